/*
 * mp_kill_loop: a training loop of large allreduces on the world and on a
 * derived communicator, one rank SIGKILLed in the middle of it
 * (tests/core/kill_matrix.sh launches it, one job per victim and mode).
 *
 *   mp_kill_loop VICTIM MODE [--mib M] [--seed S]
 *
 * Every rank loops: an allreduce of M MiB (default 4) on the world, then a
 * small one on its node pair (a split by rank / 2, as a framework's
 * data-parallel x tensor-parallel groups). The victim kills itself with
 * SIGKILL after a pseudo-random number of iterations (from S) and a few
 * milliseconds into a non-blocking allreduce. A survivor whose call fails
 * prints one line
 *     rank R: failed STATUS after X s in CALL: MESSAGE
 * and then, by MODE:
 *   exit    exits at once (exit 0, no finalize: a job that dies on error);
 *   linger  tears down as a framework does: one more allreduce on each
 *           communicator (each must fail at once, naming the victim, and
 *           is printed the same way), frees the derived communicator,
 *           sleeps 1 s, finalizes, exits 0.
 * The driver checks that every failure names the victim ("peer rank V
 * (world) failed") and came within its bound. Exit 3: the loop ran out
 * without a failure (the victim did not die?).
 */
#include "common/mp_test.h"

#include <signal.h>

static int victim;

static void report(hcomm_status_t st, double t0, const char *call)
{
    printf("rank %d: failed %s after %.3f s in %s: %s\n", mp_rank, mp_status_name(st),
           mp_now() - t0, call, hcomm_last_error());
    fflush(stdout);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: mp_kill_loop VICTIM exit|linger [--mib M] [--seed S]\n");
        return 2;
    }
    victim = atoi(argv[1]);
    int linger = !strcmp(argv[2], "linger");
    size_t mib = 4;
    uint64_t seed = 1;
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "--mib") && i + 1 < argc)
            mib = (size_t)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 10);
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    mp_init();
    hcomm_comm_t w = hcomm_comm_world(), pair;
    MP_OK(hcomm_comm_split(w, mp_rank / 2, mp_rank, &pair));
    size_t n = mib * (1u << 20) / sizeof(float);
    float *a = mp_xmalloc(n * sizeof(float)), *b = mp_xmalloc(n * sizeof(float));
    for (size_t k = 0; k < n; k++)
        a[k] = (float)(k % 13);
    uint64_t h = mp_hash(seed * 7919 + (uint64_t)victim);
    int die_at = 2 + (int)(h % 6);            /* iterations before the kill */
    int die_us = (int)((h >> 8) % 20000);     /* that far into the last one */
    for (int it = 0; it < 10000; it++) {
        const char *call = "hcomm_allreduce(world)";
        double t0 = mp_now();
        hcomm_status_t st;
        if (mp_rank == victim && it == die_at) {
            hcomm_request_t req;
            MP_OK(hcomm_iallreduce(a, b, n, HCOMM_FLOAT32, HCOMM_SUM, w, &req));
            usleep((useconds_t)die_us);
            (void)hcomm_test(req, NULL);
            raise(SIGKILL);
        }
        st = hcomm_allreduce(a, b, n, HCOMM_FLOAT32, HCOMM_SUM, w);
        if (st == HCOMM_OK) {
            call = "hcomm_allreduce(pair)";
            float x = 1, y = 0;
            st = hcomm_allreduce(&x, &y, 1, HCOMM_FLOAT32, HCOMM_SUM, pair);
        }
        if (st == HCOMM_OK)
            continue;
        report(st, t0, call);
        free(a);
        free(b);
        if (!linger)
            exit(0);
        float x = 1, y = 0;
        t0 = mp_now();
        st = hcomm_allreduce(&x, &y, 1, HCOMM_FLOAT32, HCOMM_SUM, w);
        if (st != HCOMM_OK)
            report(st, t0, "hcomm_allreduce(world, again)");
        else
            printf("rank %d: hcomm_allreduce(world, again) returned OK\n", mp_rank);
        t0 = mp_now();
        st = hcomm_allreduce(&x, &y, 1, HCOMM_FLOAT32, HCOMM_SUM, pair);
        /* the pair holds the victim or not: with it, a failure naming it;
         * without it, OK or a failure naming it (the pair's collectives
         * are children of nothing: they may go on) */
        if (st != HCOMM_OK)
            report(st, t0, "hcomm_allreduce(pair, again)");
        else
            printf("rank %d: hcomm_allreduce(pair, again) returned OK\n", mp_rank);
        MP_OK(hcomm_comm_free(pair));
        mp_sleep_ms(1000);
        t0 = mp_now();
        st = hcomm_finalize();
        printf("rank %d: hcomm_finalize %s after %.3f s%s%s\n", mp_rank, mp_status_name(st),
               mp_now() - t0, st ? ": " : "", st ? hcomm_last_error() : "");
        exit(0);
    }
    printf("rank %d: the loop ended without a failure\n", mp_rank);
    return 3;
}
