/*
 * Groups (hcomm_group_start/end) when something goes wrong. Each iteration
 * posts a group of four int32 SUM allreduces (1, 7, 300 and 20000
 * elements: the first three fused into one collective, the last on its own)
 * and checks every result; at iteration STALL_AT the fault happens.
 *
 *   mp_coll_group_fault --stall SEC [--nb]
 *       3+ ranks, HCOMM_TIMEOUT=T (small). Rank 1 sleeps SEC (> T) before
 *       its group. The others' group must fail with ERR_TIMEOUT after about
 *       T (one deadline for the whole group, not one per member), every
 *       member completed, and the next collective must fail at once with
 *       ERR_TIMEOUT (not PEER_FAILED) and say it timed out. --nb: members
 *       are non-blocking and waited after hcomm_group_end.
 *   mp_coll_group_fault --abort
 *       2 ranks. On a split communicator rank 0 posts a group that rank 1
 *       never joins; another thread aborts the communicator 300 ms later:
 *       hcomm_group_end must return ERR_ABORTED promptly, later calls too,
 *       and world must keep working.
 *   mp_coll_group_fault --deferred
 *       hcomm_wait/hcomm_test on a request of a group that has not ended:
 *       ERR_INVALID naming hcomm_group_end; the group then runs normally.
 *   mp_coll_group_fault --kill WHERE
 *       3 ranks, launched by hand (mp_fault.sh): rank 1 SIGKILLs itself
 *       before hcomm_group_start (start), after posting two of the four
 *       allreduces (between) or right before hcomm_group_end (end). The
 *       survivors' group must fail with ERR_PEER_FAILED naming rank 1.
 */
#include "common/mp_test.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NMEM 4
#define STALL_AT 3
#define ITERS 6
static const size_t counts[NMEM] = {1, 7, 300, 20000};

typedef struct {
    int32_t *in[NMEM], *out[NMEM];
    hcomm_request_t req[NMEM];
} group_t;

static int32_t value(int r, int it, int m, size_t i)
{
    return (int32_t)(mp_hash(((uint64_t)it << 40) ^ ((uint64_t)m << 32) ^ i) % 1000) - 500 + r;
}

static void group_fill(group_t *g, int it)
{
    for (int m = 0; m < NMEM; m++) {
        for (size_t i = 0; i < counts[m]; i++) {
            g->in[m][i] = value(mp_rank, it, m, i);
            g->out[m][i] = -7;
        }
        g->req[m] = NULL;
    }
}

static void group_check(const group_t *g, int it)
{
    for (int m = 0; m < NMEM; m++)
        for (size_t i = 0; i < counts[m]; i++) {
            int64_t want = 0;
            for (int r = 0; r < mp_size; r++)
                want += value(r, it, m, i);
            if (g->out[m][i] != (int32_t)want) {
                mp_fail("iteration %d member %d (%zu elements) element %zu expected %lld got %d",
                        it, m, counts[m], i, (long long)want, g->out[m][i]);
                return;
            }
        }
}

/* An iteration before the fault: OK and every result right. */
static void group_expect_ok(const group_t *g, int it, hcomm_status_t st)
{
    if (st != HCOMM_OK)
        mp_fail("iteration %d: group expected OK got %s (%s)", it, mp_status_name(st),
                hcomm_last_error());
    group_check(g, it);
}

/* Posts members [from, to) of the group (inside hcomm_group_start). */
static void group_post(group_t *g, hcomm_comm_t comm, int nb, int from, int to)
{
    for (int m = from; m < to; m++)
        MP_OK(nb ? hcomm_iallreduce(g->in[m], g->out[m], counts[m], HCOMM_INT32, HCOMM_SUM, comm,
                                    &g->req[m])
                 : hcomm_allreduce(g->in[m], g->out[m], counts[m], HCOMM_INT32, HCOMM_SUM, comm));
}

/* hcomm_group_end, then the waits of non-blocking members: the first
 * failure (every member must complete, with a status, either way). */
static hcomm_status_t group_end(group_t *g, int nb)
{
    hcomm_status_t first = hcomm_group_end();
    for (int m = 0; nb && m < NMEM; m++) {
        hcomm_status_t st = hcomm_wait(g->req[m]);
        if (first == HCOMM_OK)
            first = st;
    }
    return first;
}

static void group_alloc(group_t *g)
{
    for (int m = 0; m < NMEM; m++) {
        g->in[m] = mp_xmalloc(counts[m] * sizeof(int32_t));
        g->out[m] = mp_xmalloc(counts[m] * sizeof(int32_t));
    }
}

static void group_free(group_t *g)
{
    for (int m = 0; m < NMEM; m++) {
        free(g->in[m]);
        free(g->out[m]);
    }
}

static int run_stall(double stall, int nb)
{
    hcomm_comm_t w = hcomm_comm_world();
    const char *tv = getenv("HCOMM_TIMEOUT");
    double timeout = tv ? atof(tv) : 300;
    if (mp_size < 3 || timeout * 2 >= stall) {
        mp_fail("--stall needs 3+ ranks and HCOMM_TIMEOUT < SEC/2 (got %d ranks, %g s, SEC %g)",
                mp_size, timeout, stall);
        return 1;
    }
    group_t g;
    group_alloc(&g);
    for (int it = 0; it < ITERS; it++) {
        group_fill(&g, it);
        if (it == STALL_AT && mp_rank == 1) {
            mp_sleep_ms((int)(stall * 1000));
            /* The others gave up: whatever this says, it must not hang. */
            MP_OK(hcomm_group_start());
            for (int m = 0; m < NMEM; m++)
                (void)(nb ? hcomm_iallreduce(g.in[m], g.out[m], counts[m], HCOMM_INT32, HCOMM_SUM,
                                             w, &g.req[m])
                          : hcomm_allreduce(g.in[m], g.out[m], counts[m], HCOMM_INT32, HCOMM_SUM,
                                            w));
            double t0 = mp_now();
            hcomm_status_t st = group_end(&g, nb);
            printf("rank 1: after the stall the group returned %s after %.2f s (%s)\n",
                   mp_status_name(st), mp_now() - t0, hcomm_last_error());
            break;
        }
        MP_OK(hcomm_group_start());
        group_post(&g, w, nb, 0, NMEM);
        double t0 = mp_now();
        hcomm_status_t st = group_end(&g, nb);
        double dt = mp_now() - t0;
        if (it < STALL_AT) {
            group_expect_ok(&g, it, st);
            continue;
        }
        /* Rank 1 is asleep: one deadline for the whole group. */
        if (st != HCOMM_ERR_TIMEOUT)
            mp_fail("stalled group: expected ERR_TIMEOUT got %s after %.2f s (%s)",
                    mp_status_name(st), dt, hcomm_last_error());
        else if (dt < timeout * 0.9 || dt > timeout + 1.5)
            mp_fail("stalled group: ERR_TIMEOUT expected after about HCOMM_TIMEOUT=%g s got "
                    "%.2f s", timeout, dt);
        else
            printf("rank %d: stalled group timed out after %.2f s (HCOMM_TIMEOUT=%g)\n", mp_rank,
                   dt, timeout);
        /* Later collectives say why the communicator is unusable. */
        int32_t x = 1, y = 0;
        t0 = mp_now();
        st = hcomm_allreduce(&x, &y, 1, HCOMM_INT32, HCOMM_SUM, w);
        dt = mp_now() - t0;
        if (st != HCOMM_ERR_TIMEOUT || !strstr(hcomm_last_error(), "timed out") || dt > 0.5)
            mp_fail("allreduce after the timeout: expected ERR_TIMEOUT at once saying \"timed "
                    "out\" got %s after %.2f s (%s)",
                    mp_status_name(st), dt, hcomm_last_error());
        /* A group after it: every post fails at once, the end is clean. */
        MP_OK(hcomm_group_start());
        for (int m = 0; m < NMEM; m++) {
            st = nb ? hcomm_iallreduce(g.in[m], g.out[m], counts[m], HCOMM_INT32, HCOMM_SUM, w,
                                       &g.req[m])
                    : hcomm_allreduce(g.in[m], g.out[m], counts[m], HCOMM_INT32, HCOMM_SUM, w);
            if (st != HCOMM_ERR_TIMEOUT)
                mp_fail("post in a group after the timeout: expected ERR_TIMEOUT got %s (%s)",
                        mp_status_name(st), hcomm_last_error());
        }
        MP_OK(hcomm_group_end());
        break;
    }
    group_free(&g);
    /* No final allreduce: world is unusable by design. */
    hcomm_status_t st = hcomm_finalize();
    (void)st;
    if (mp_failures)
        printf("rank %d: mp_coll_group_fault: FAILED (%d failures)\n", mp_rank, mp_failures);
    else if (mp_rank == 0)
        printf("rank 0: mp_coll_group_fault: passed\n");
    return mp_failures ? 1 : 0;
}

static void *abort_later(void *arg)
{
    mp_sleep_ms(300);
    hcomm_status_t st = hcomm_comm_abort((hcomm_comm_t)arg);
    if (st != HCOMM_OK)
        mp_fail("hcomm_comm_abort expected OK got %s", mp_status_name(st));
    return NULL;
}

static int run_abort(void)
{
    hcomm_comm_t w = hcomm_comm_world(), sub;
    MP_OK(hcomm_comm_split(w, 0, mp_rank, &sub));
    group_t g;
    group_alloc(&g);
    if (mp_rank == 0) {
        pthread_t t;
        pthread_create(&t, NULL, abort_later, sub);
        group_fill(&g, 0);
        MP_OK(hcomm_group_start());
        group_post(&g, sub, 1, 0, NMEM);
        double t0 = mp_now();
        hcomm_status_t st = group_end(&g, 1);
        double dt = mp_now() - t0;
        if (st != HCOMM_ERR_ABORTED || dt > 3)
            mp_fail("group on an aborted communicator: expected ERR_ABORTED within 3 s got %s "
                    "after %.2f s (%s)",
                    mp_status_name(st), dt, hcomm_last_error());
        else
            printf("rank 0: group aborted after %.2f s\n", dt);
        pthread_join(t, NULL);
        MP_OK(hcomm_group_start());
        for (int m = 0; m < NMEM; m++) {
            st = hcomm_allreduce(g.in[m], g.out[m], counts[m], HCOMM_INT32, HCOMM_SUM, sub);
            if (st != HCOMM_ERR_ABORTED)
                mp_fail("post in a group after the abort: expected ERR_ABORTED got %s (%s)",
                        mp_status_name(st), hcomm_last_error());
        }
        MP_OK(hcomm_group_end());
    }
    MP_OK(hcomm_comm_free(sub));
    /* world still works, groups on it too */
    group_fill(&g, 1);
    MP_OK(hcomm_group_start());
    group_post(&g, w, 0, 0, NMEM);
    MP_OK(group_end(&g, 0));
    group_check(&g, 1);
    group_free(&g);
    return mp_finish("mp_coll_group_fault");
}

static int run_deferred(void)
{
    hcomm_comm_t w = hcomm_comm_world();
    group_t g;
    group_alloc(&g);
    group_fill(&g, 0);
    MP_OK(hcomm_group_start());
    group_post(&g, w, 1, 0, NMEM);
    MP_EXPECT(HCOMM_ERR_INVALID, hcomm_wait(g.req[0]));
    mp_expect_msg("hcomm_wait inside the group", "hcomm_group_end", NULL);
    int done = 0;
    MP_EXPECT(HCOMM_ERR_INVALID, hcomm_test(g.req[2], &done));
    mp_expect_msg("hcomm_test inside the group", "hcomm_group_end", NULL);
    MP_OK(group_end(&g, 1));
    group_check(&g, 0);
    group_free(&g);
    return mp_finish("mp_coll_group_fault");
}

static int run_kill(const char *where)
{
    hcomm_comm_t w = hcomm_comm_world();
    int at = !strcmp(where, "start") ? 0 : !strcmp(where, "between") ? 1 : !strcmp(where, "end") ? 2 : -1;
    if (at < 0 || mp_size < 3) {
        mp_fail("--kill start|between|end on 3+ ranks");
        return 2;
    }
    group_t g;
    group_alloc(&g);
    for (int it = 0; it < ITERS; it++) {
        int victim = it == STALL_AT && mp_rank == 1;
        group_fill(&g, it);
        if (victim && at == 0)
            raise(SIGKILL);
        MP_OK(hcomm_group_start());
        group_post(&g, w, it & 1, 0, 2);
        if (victim && at == 1)
            raise(SIGKILL);
        group_post(&g, w, it & 1, 2, NMEM);
        if (victim && at == 2)
            raise(SIGKILL);
        double t0 = mp_now();
        hcomm_status_t st = group_end(&g, it & 1);
        if (it < STALL_AT) {
            group_expect_ok(&g, it, st);
            continue;
        }
        char what[64];
        snprintf(what, sizeof(what), "group %s", where);
        mp_expect_peer_failed(st, t0, 1, what);
        break;
    }
    group_free(&g);
    mp_survivors_sync(1);
    MP_OK(hcomm_finalize());
    return mp_failures ? 1 : 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 3 && !strcmp(argv[1], "--stall")) {
        double stall = atof(argv[2]);
        int nb = argc >= 4 && !strcmp(argv[3], "--nb");
        mp_init();
        return run_stall(stall, nb);
    }
    if (argc >= 2 && !strcmp(argv[1], "--abort")) {
        mp_init();
        return run_abort();
    }
    if (argc >= 2 && !strcmp(argv[1], "--deferred")) {
        mp_init();
        return run_deferred();
    }
    if (argc >= 3 && !strcmp(argv[1], "--kill")) {
        mp_init();
        return run_kill(argv[2]);
    }
    fprintf(stderr, "usage: mp_coll_group_fault --stall SEC [--nb] | --abort | --deferred | "
                    "--kill start|between|end\n");
    return 2;
}
