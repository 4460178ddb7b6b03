/*
 * Helpers shared by the bootstrap tests that fork ranks (test_bootstrap_open,
 * test_bootstrap_auth). The test process itself is rank 0, so its
 * assertions see rank 0's view; a child reports through its exit status
 * only (0 = every check passed; otherwise a code saying which check failed,
 * with the reason on stderr). Every child is killed at the end of its test
 * (kill_all as the teardown), so a failure cannot leave ranks behind.
 */
#ifndef HC_TESTS_BS_TEST_H
#define HC_TESTS_BS_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "core/bootstrap.h"

#include <stdio.h>
#include <sys/types.h>

#define BLOB_LEN 24
#define KEY "test-key-42"
#define TIMEOUT 10.0

extern pid_t kids[32];
extern int nkids;

typedef int (*child_fn)(void *arg);

/* Rank r's blob: BLOB_LEN bytes that differ per rank. */
void blob_fill(uint8_t *b, int rank);
/* A loopback port that was free a moment ago. */
int free_port(void);
hc_bootstrap_params_t params(int rank, int size, const char *url, const char *key);
void sleep_ms(int ms);
/* Forks a child that exits with fn(arg); killed by kill_all. */
pid_t spawn(child_fn fn, void *arg);
/* Exit status of pid (128 + signal when killed), waiting at most
 * timeout_s (then -1). */
int reap(pid_t pid, double timeout_s);
int kill_all(void **state);
/* Every child left exited 0 (within 20 s each). */
void reap_all_ok(void);
/* The table holds every rank's blob_fill. */
bool table_ok(const void *table, int size);

/* A well-behaved rank: open, check the table, allgather, barrier, poll. */
typedef struct {
    hc_bootstrap_params_t p;
    int delay_ms;          /* start late */
    bool wait_rank0_death; /* after the collectives, wait for bootstrap poll to say 0 */
} rank_arg_t;

#define CHILD_FAIL(code, ...)                                                                      \
    do {                                                                                           \
        fprintf(stderr, "rank %d: ", a->p.rank);                                                   \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fprintf(stderr, " [%s]\n", hc_error_last());                                               \
        rc = code;                                                                                 \
        goto out;                                                                                  \
    } while (0)

/* The first rank judged failed after polling the bootstrap, or -1. */
int dead_rank(hc_bootstrap_t *bs, int size);
int run_rank(void *arg);
/* size ranks on url, rank 0 in this process (starting late by
 * rank0_delay_ms); every one must succeed. */
void run_job(const char *url, int size, int rank0_delay_ms, const char *key);
/* A TCP connection to 127.0.0.1:port, retried until timeout (-1 then). */
int connect_retry(int port, double timeout);

/* A rank whose open must fail with status want and a message containing
 * want_text, within max_time seconds when that is > 0. */
typedef struct {
    hc_bootstrap_params_t p;
    hcomm_status_t want;
    const char *want_text;
    double timeout;
    double max_time; /* seconds the failure may take; 0 = any */
    size_t blob_len; /* 0: BLOB_LEN; less: this rank's blob is shorter than the others' */
} expect_fail_arg_t;
int run_expect_fail(void *arg);

/* Drops this (child) process to user nobody: another user on this host,
 * whose failed key proofs cannot stop the job. False when not root. */
bool become_stranger(void);

#endif /* HC_TESTS_BS_TEST_H */
