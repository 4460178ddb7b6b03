/*
 * Shared code of hcomm's benchmark tools (pingpong and the nccl-tests-style
 * collective benchmarks). The tools use only the public API, like a user.
 */
#ifndef HB_BENCH_COMMON_H
#define HB_BENCH_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include <hcomm.h>

/* Set by hb_init(): this process's rank and the job size. */
extern int hb_rank;
extern int hb_nranks;

/* hcomm_init(), then rank and size of the world communicator. */
void hb_init(int *argc, char ***argv);

/* On failure prints "rank R: WHAT failed: <strerror>: <last_error>" and
 * exits 1; returns on HCOMM_OK. */
void hb_check(hcomm_status_t status, const char *what);

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t hb_now_ns(void);

/* Iterations per size, the rule of the peers' mpi_bench.c. */
int hb_iters_for(size_t bytes, int small, int large);

/* Not hcomm ops: data movement (no op) and "-o all". */
#define HB_OP_NONE (-1)
#define HB_OP_ALL (-2)

struct hb_opts {
    size_t min_bytes, max_bytes;
    size_t factor;
    int iters;  /* -1: per-size default */
    int warmup; /* -1: per-size default */
    hcomm_dtype_t dtype;
    int op; /* hcomm_op_t or HB_OP_ALL */
    int root;
    int check;
    int mem_hcomm; /* buffers from hcomm_mem_alloc() instead of malloc */
    int csv;
};

/* Parses argv (after hb_init()). is_coll enables -d -o -r -c. Bad
 * arguments: rank 0 prints the reason and the usage, every rank exits 2.
 * -h/--help: usage on stdout, exit 0. */
void hb_opts_parse(int argc, char **argv, int is_coll, struct hb_opts *opts_p);

/* Prints "prog: MSG" and the usage (rank 0 only), finalizes, exits 2. */
void hb_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* Advances *size_p along MIN, MIN*F, ... (0 is followed by 1); returns 0
 * once past MAX. */
int hb_size_next(const struct hb_opts *opts, size_t *size_p);

/* Page-aligned buffer of at least bytes (malloc, or hcomm pool memory with
 * -m hcomm); exits 1 when out of memory. Free with hb_buf_free(). */
void *hb_buf_alloc(size_t bytes, int mem_hcomm);
void hb_buf_free(void *buf, size_t bytes, int mem_hcomm);

/* Data types: names as nccl-tests prints them. */
const char *hb_dtype_name(hcomm_dtype_t dtype);
const char *hb_op_name(int op);

/* IEEE binary16 and bfloat16 <-> binary32, round to nearest even. */
uint16_t hb_half_from_float(float f);
float hb_half_to_float(uint16_t h);
uint16_t hb_bf16_from_float(float f);
float hb_bf16_to_float(uint16_t b);

/*
 * Reference data. Every input element is a small integer chosen so that the
 * exact result of any reduction is representable in every dtype and does not
 * depend on the order of the reduction: a check can then compare bits.
 */

/* The value rank contributes at element idx (op HB_OP_NONE: data movement). */
int64_t hb_value(hcomm_dtype_t dtype, int op, int rank, int nranks, size_t idx);

/* buf[k] = hb_value(rank, first + k) for k < count. */
void hb_fill(void *buf, size_t first, size_t count, hcomm_dtype_t dtype, int op, int rank);

/* Sets count elements of buf to a sentinel (all bits 1: NaN for floats). */
void hb_fill_sentinel(void *buf, size_t count, hcomm_dtype_t dtype);

/* Pass as rank to hb_count_wrong(): expect op over all ranks. */
#define HB_REDUCED (-1)

/* Number of k < count where buf[k] differs from hb_value(rank, first + k),
 * or with rank HB_REDUCED from op over every rank's value. The first few
 * mismatches of the process are described on stderr, prefixed with what. */
size_t hb_count_wrong(const void *buf, size_t first, size_t count, hcomm_dtype_t dtype, int op,
                      int rank, const char *what);

/*
 * Collective benchmarks: a tool describes its collective, hb_coll_main()
 * does the rest (arguments, sizes, timing, checks, output).
 */
struct hb_coll_ctx {
    hcomm_comm_t comm;
    int rank, nranks;
    hcomm_dtype_t dtype;
    size_t esize;            /* bytes per element */
    int op;                  /* hcomm_op_t, or HB_OP_NONE */
    int root;                /* -1 when the collective has none */
    size_t count;            /* the count argument of the call */
    char *sendbuf, *recvbuf; /* allocated for the largest size */
    const char *what;        /* for check messages about the result */
    const char *what_input;  /* ... about an input the call must not change */
};

struct hb_coll {
    const char *name;
    int reduces; /* takes an op */
    int rooted;  /* takes a root */
    /* count is per rank: the row's size is count * nranks * esize */
    int per_rank;
    double (*busbw_factor)(int nranks);
    /* elements to allocate, given the largest total element count */
    void (*buf_elems)(size_t max_elems, int nranks, size_t *send_p, size_t *recv_p);
    hcomm_status_t (*run)(const struct hb_coll_ctx *c, int in_place);
    /* writes the inputs of one checked run (and sentinels where output goes) */
    void (*fill)(const struct hb_coll_ctx *c, int in_place);
    /* wrong elements on this rank after the checked run */
    size_t (*check)(const struct hb_coll_ctx *c, int in_place);
};

int hb_coll_main(int argc, char **argv, const struct hb_coll *coll);

#endif /* HB_BENCH_COMMON_H */
