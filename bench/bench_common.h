/*
 * Shared code of hcomm's benchmark tools (pingpong and the nccl-tests-style
 * collective benchmarks). The tools use only the public API, like a user.
 */
#ifndef HB_BENCH_COMMON_H
#define HB_BENCH_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <hcomm.h>

/* This process's rank and the job size: set by hb_start(); before it, the
 * rank the launcher's variables give (usage errors print on rank 0 only)
 * and 0. */
extern int hb_rank;
extern int hb_nranks;

struct hb_opts;
/* The program's name; starts no job. Then hb_opts_parse(), then hb_start():
 * the options are checked before the job starts, so a bad one exits 2 at
 * once on every rank without a rendezvous. */
void hb_init(int *argc, char ***argv);
/* hcomm_init(), then rank and size of the world communicator; checks the
 * options that depend on the job size (-r). */
void hb_start(const struct hb_opts *opts);

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

/* -a: which rank's time a row reports (the nccl-tests values). */
enum hb_average {
    HB_AVG_RANK0 = 0,
    HB_AVG_MEAN = 1,
    HB_AVG_MIN = 2,
    HB_AVG_MAX = 3,
};

/* pingpong -M */
enum hb_pp_mode {
    HB_PP_LAT,
    HB_PP_BW,
    HB_PP_BIBW,
};

/* Which tool parses its arguments: each takes its own options. */
enum hb_tool {
    HB_TOOL_PINGPONG,
    HB_TOOL_COLL,
    HB_TOOL_MIXED,
};

struct hb_opts {
    size_t min_bytes, max_bytes;
    size_t factor;
    int iters;  /* -1: per-size (or per-tool) default */
    int warmup; /* -1: per-size (or per-tool) default */
    hcomm_dtype_t dtype;
    int dtype_all; /* -d all: one block of rows per dtype */
    int op;        /* hcomm_op_t or HB_OP_ALL */
    int root;
    int check;
    int mem_hcomm; /* 0: malloc; 1: hcomm_mem_alloc(); HB_MEM_DEVICE: device memory */
    int csv;
    int blocking;             /* -z: 1 blocking calls, 0 hcomm_i* then hcomm_wait */
    int average;              /* -a: enum hb_average */
    const char *json;         /* -J: JSON lines file, or NULL */
    int mode;                 /* pingpong -M: enum hb_pp_mode */
    int window;               /* pingpong -W: messages per window in bw modes */
    const char *profile_file; /* mixed_load -p */
    const char *profile_name; /* mixed_load -P */
    int show_profile;         /* mixed_load --show-profile */
    size_t step_bytes;        /* -i: add this to the size instead of -f (0: -f) */
    int cycles;               /* -N: the sweep this many times (collective tools) */
};

/* Parses argv (after hb_init(), before hb_start()) for the given tool. Bad arguments: rank 0
 * prints the reason and the usage, every rank exits 2. -h/--help: usage on
 * stdout, exit 0. */
void hb_opts_parse(int argc, char **argv, enum hb_tool tool, struct hb_opts *opts_p);

/* BYTES with an optional K, M or G (binary) suffix, optionally followed by
 * B or iB. Returns 0, or -1 when s is not such a size. */
int hb_parse_size(const char *s, size_t *size_p);

/* Prints "prog: MSG" and the usage (rank 0 only), finalizes, exits 2. */
void hb_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* Advances *size_p along MIN, MIN*F, ... (0 is followed by 1); returns 0
 * once past MAX. */
int hb_size_next(const struct hb_opts *opts, size_t *size_p);

/* Page-aligned buffer of at least bytes (malloc, or hcomm pool memory with
 * -m hcomm); exits 1 when out of memory. Free with hb_buf_free(). */
/* -m device: buffers from the active GPU backend (hcomm_mem_alloc_device);
 * the tools fill and check host copies and move them with hcomm_memcpy. */
#define HB_MEM_DEVICE 2
const char *hb_mem_name(int mem); /* "malloc", "hcomm", "device" */
void *hb_buf_alloc(size_t bytes, int mem_hcomm);
void hb_buf_free(void *buf, size_t bytes, int mem_hcomm);

/* Data types: names as nccl-tests prints them (float, half, ...). */
const char *hb_dtype_name(hcomm_dtype_t dtype);
/* Names as hcomm's C enum spells them (float32, float16, ...): JSON output. */
const char *hb_dtype_cname(hcomm_dtype_t dtype);
const char *hb_op_name(int op);

/* Summary of per-iteration times; hb_stats_compute() sorts v. p50 is the
 * element at n/2 of the sorted samples, p99 the one at floor(0.99 n). */
struct hb_stats {
    double mean, min, max, p50, p99;
};
void hb_stats_compute(double *v, size_t n, struct hb_stats *stats_p);

/* Reduces v[0..n) over the ranks of comm in place, element by element, as
 * -a says: rank 0's values (broadcast), the mean, the minimum or the
 * maximum. Every rank of comm calls it; every rank gets the result. */
void hb_times_reduce(double *v, size_t n, int average, hcomm_comm_t comm);
const char *hb_average_name(int average);

/*
 * JSON lines (-J): rank 0 writes one object per result. hb_json_open() is
 * called by every rank of comm (rank 0 opens, the others learn whether it
 * could): an unwritable path is a usage error (exit 2 on every rank). On the
 * other ranks it returns NULL, and a NULL file makes hb_json_write() a no-op.
 */
struct hb_json {
    char buf[2048];
    size_t len;
};
FILE *hb_json_open(const char *path, hcomm_comm_t comm);
/* Flushes and closes; on a write error prints it and exits 1. */
void hb_json_close(FILE *f, const char *path);
void hb_json_begin(struct hb_json *j);
void hb_json_str(struct hb_json *j, const char *key, const char *val);
void hb_json_int(struct hb_json *j, const char *key, long long v);
/* Non-finite values are written as null. */
void hb_json_num(struct hb_json *j, const char *key, double v);
void hb_json_null(struct hb_json *j, const char *key);
/* Closes the object and writes it as one line. */
void hb_json_write(struct hb_json *j, FILE *f);

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
    size_t first;            /* index of element 0 in the reference pattern (hb_fill) */
    char *sendbuf, *recvbuf; /* allocated for the largest size */
    /* -m device: sendbuf/recvbuf are host copies that fill and check use;
     * the calls get these device buffers (hb_coll_phase moves the bytes) */
    char *dsend, *drecv, *hsend, *hrecv;
    size_t send_bytes, recv_bytes;
    const char *what;        /* for check messages about the result */
    const char *what_input;  /* ... about an input the call must not change */
};

/* -m device: to 1, the host copies' bytes to the device buffers, which
 * the calls then get; to 0, the device bytes back into the host copies,
 * which fill and check get again; -1: the host copies again, nothing moved. */
void hb_dev_move(struct hb_coll_ctx *c, int to_device);

struct hb_coll {
    const char *name;
    int reduces; /* takes an op */
    int rooted;  /* takes a root */
    /* count is per rank: the row's size is count * nranks * esize */
    int per_rank;
    double (*busbw_factor)(int nranks);
    /* elements to allocate, given the largest total element count */
    void (*buf_elems)(size_t max_elems, int nranks, size_t *send_p, size_t *recv_p);
    /* the blocking call (hcomm_allreduce) */
    hcomm_status_t (*run)(const struct hb_coll_ctx *c, int in_place);
    /* its non-blocking twin (hcomm_iallreduce): posts the same call */
    hcomm_status_t (*irun)(const struct hb_coll_ctx *c, int in_place, hcomm_request_t *req_p);
    /* writes the inputs of one checked run (and sentinels where output goes) */
    void (*fill)(const struct hb_coll_ctx *c, int in_place);
    /* wrong elements on this rank after the checked run */
    size_t (*check)(const struct hb_coll_ctx *c, int in_place);
};

/* The collectives, in bench_colls.c: the *_bw tools and mixed_load share
 * their calls, buffer sizes, inputs and checks. */
extern const struct hb_coll hb_coll_allreduce;
extern const struct hb_coll hb_coll_allgather;
extern const struct hb_coll hb_coll_broadcast;
extern const struct hb_coll hb_coll_reduce;
extern const struct hb_coll hb_coll_reduce_scatter;
extern const struct hb_coll hb_coll_alltoall;
extern const struct hb_coll hb_coll_gather;
extern const struct hb_coll hb_coll_scatter;
extern const struct hb_coll hb_coll_alltoallv;

/* One call of coll: blocking, or posted and waited for (blocking 0). Exits
 * through hb_check() when hcomm fails. */
void hb_coll_call(const struct hb_coll *coll, const struct hb_coll_ctx *c, int in_place,
                  int blocking);

int hb_coll_main(int argc, char **argv, const struct hb_coll *coll);

#endif /* HB_BENCH_COMMON_H */
