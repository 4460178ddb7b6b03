/*
 * budget_probe: the 2-rank workloads of the instruction budget test
 * (tests/perf/budget.sh, docs/bench.md "Instruction budget").
 *
 *   hcommrun -n 2 budget_probe pingpong|allreduce ITERATIONS
 *
 * Rank 0 is measured under callgrind with --toggle-collect on its hcomm
 * calls (hcomm_send + hcomm_recv, or hcomm_allreduce). Their inclusive cost
 * would include spinning for the peer, which depends on scheduling; so rank
 * 0 never waits inside them: before each call that needs the peer, it waits
 * outside hcomm (not counted) on a flag in a shared page that rank 1 sets
 * once what rank 0 needs is in place (its reply sent; its allreduce
 * contribution posted). Rank 0's calls then find everything there on their
 * first poll, and their cost is the same run to run.
 *
 * Every result is checked; a wrong one, or a flag that does not come
 * within 60 s, fails the run.
 */
#include <hcomm.h>

#include <fcntl.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define PROBE_FLAG_WAIT_SEC 60.0

static double probe_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The page both ranks map: ranks of one hcommrun job share its pid. */
static _Atomic int64_t *probe_flag_open(char *name, size_t cap)
{
    snprintf(name, cap, "/hcomm_budget_probe.%d", (int)getppid());
    int fd = shm_open(name, O_RDWR | O_CREAT, 0600);
    if (fd < 0 || ftruncate(fd, 4096) != 0) {
        perror("budget_probe: shm_open/ftruncate");
        return NULL;
    }
    void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        perror("budget_probe: mmap");
        return NULL;
    }
    return (_Atomic int64_t *)p;
}

/* Rank 0: waits (outside hcomm) until rank 1 says step `want` is ready. */
static int probe_flag_wait(_Atomic int64_t *flag, int64_t want)
{
    double deadline = probe_now() + PROBE_FLAG_WAIT_SEC;
    while (*flag < want) {
        if (probe_now() > deadline) {
            fprintf(stderr, "budget_probe: rank 1 did not reach step %lld within %.0f s\n",
                    (long long)want, PROBE_FLAG_WAIT_SEC);
            return -1;
        }
        sched_yield();
    }
    return 0;
}

static int probe_check(hcomm_status_t st, const char *what)
{
    if (st == HCOMM_OK) return 0;
    fprintf(stderr, "budget_probe: %s: %s\n", what, hcomm_last_error());
    return -1;
}

static int probe_pingpong(int rank, long iters, _Atomic int64_t *flag, hcomm_comm_t w)
{
    for (long i = 0; i < iters; i++) {
        int64_t out = i, in = -1;
        if (rank == 0) {
            if (probe_check(hcomm_send(&out, 1, HCOMM_INT64, 1, 0, w), "hcomm_send") ||
                probe_flag_wait(flag, i + 1) ||
                probe_check(hcomm_recv(&in, 1, HCOMM_INT64, 1, 0, w), "hcomm_recv"))
                return -1;
            if (in != i + 1) {
                fprintf(stderr, "budget_probe: pingpong %ld: got %lld, expected %ld\n", i,
                        (long long)in, i + 1);
                return -1;
            }
        } else {
            if (probe_check(hcomm_recv(&in, 1, HCOMM_INT64, 0, 0, w), "hcomm_recv")) return -1;
            out = in + 1;
            if (probe_check(hcomm_send(&out, 1, HCOMM_INT64, 0, 0, w), "hcomm_send")) return -1;
            *flag = i + 1;
        }
    }
    return 0;
}

static int probe_allreduce(int rank, long iters, _Atomic int64_t *flag, hcomm_comm_t w)
{
    for (long i = 0; i < iters; i++) {
        int64_t mine = i * 2 + rank, sum = -1;
        if (rank == 0) {
            if (probe_flag_wait(flag, i + 1) ||
                probe_check(hcomm_allreduce(&mine, &sum, 1, HCOMM_INT64, HCOMM_SUM, w),
                            "hcomm_allreduce"))
                return -1;
        } else {
            hcomm_request_t req;
            int done = 0;
            if (probe_check(hcomm_iallreduce(&mine, &sum, 1, HCOMM_INT64, HCOMM_SUM, w, &req),
                            "hcomm_iallreduce") ||
                probe_check(hcomm_test(req, &done), "hcomm_test"))
                return -1;
            *flag = i + 1;
            if (!done && probe_check(hcomm_wait(req), "hcomm_wait")) return -1;
        }
        if (sum != i * 4 + 1) {
            fprintf(stderr, "budget_probe: rank %d allreduce %ld: got %lld, expected %ld\n", rank,
                    i, (long long)sum, i * 4 + 1);
            return -1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 3 || (strcmp(argv[1], "pingpong") && strcmp(argv[1], "allreduce")) ||
        atol(argv[2]) <= 0) {
        fprintf(stderr, "usage: hcommrun -n 2 budget_probe pingpong|allreduce ITERATIONS\n");
        return 2;
    }
    long iters = atol(argv[2]);
    char name[64];
    _Atomic int64_t *flag = probe_flag_open(name, sizeof(name));
    if (!flag) return 1;
    if (probe_check(hcomm_init(&argc, &argv), "hcomm_init")) return 1;
    hcomm_comm_t w = hcomm_comm_world();
    int rank = hcomm_comm_rank(w), rc = 1;
    if (rank == 0) shm_unlink(name); /* both ranks mapped it before init's rendezvous */
    if (hcomm_comm_size(w) != 2) {
        fprintf(stderr, "budget_probe: needs 2 ranks\n");
        goto out;
    }
    rc = strcmp(argv[1], "pingpong") ? probe_allreduce(rank, iters, flag, w)
                                     : probe_pingpong(rank, iters, flag, w);
out:
    if (hcomm_finalize() != HCOMM_OK) rc = 1;
    return rc ? 1 : 0;
}
