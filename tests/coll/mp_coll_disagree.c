/*
 * mp_coll_disagree: ranks that disagree on a collective's root or counts
 * never let the job go on as if nothing happened, and nobody waits for
 * HCOMM_TIMEOUT (issue 30.2), without HCOMM_CHECK.
 *
 * Each case runs on a fresh communicator (a disagreement breaks it): the
 * collective, then a barrier on the same communicator. What must hold on
 * every rank:
 *   - no rank gets OK from both calls (the disagreement is seen by the
 *     collective itself or, at the latest, by the next one: docs/
 *     observability.md says which);
 *   - a rank whose own result is wrong by its own arguments never gets OK
 *     from the collective (checked where the test can tell: broadcast
 *     receivers whose root sent other data, reduce roots);
 *   - both calls return within 15 s (HCOMM_TIMEOUT is 60 here);
 *   - every error message names another rank.
 * Splits of the roots: "half" (ranks of even index name root 0, odd ones
 * root 1: the case), "last" (only the last rank names root 1) and
 * "swap" (ranks 0 and 1 each name the other).
 *
 *   mp_coll_disagree [--case NAME]
 */
#include "common/mp_test.h"

typedef enum { BCAST, REDUCE, GATHER, SCATTER, ALLTOALL, ALLGATHERV, REDUCE_SCATTERV, ALLGATHER } kind_t;

typedef struct {
    const char *name;
    kind_t kind;
    int half;     /* roots: 1 half/half, 2 rank 0 names root 1 and every other rank root 0
                     (two ranks that each take the other for the root), 0 only the last
                     rank differs (root 1) */
    size_t count; /* elements (per block) */
} case_t;

static const case_t cases[] = {
    {"bcast_half_small", BCAST, 1, 4},
    {"bcast_half_mid", BCAST, 1, 2000},
    {"bcast_half_large", BCAST, 1, 300000},
    {"bcast_last_small", BCAST, 0, 4},
    {"bcast_swap_small", BCAST, 2, 4},
    {"bcast_swap_large", BCAST, 2, 300000},
    {"reduce_swap_small", REDUCE, 2, 4},
    {"gather_swap", GATHER, 2, 100},
    {"scatter_swap", SCATTER, 2, 100},
    {"bcast_last_large", BCAST, 0, 300000},
    {"reduce_half_small", REDUCE, 1, 4},
    {"reduce_half_large", REDUCE, 1, 300000},
    {"reduce_last_small", REDUCE, 0, 4},
    {"gather_half", GATHER, 1, 100},
    {"scatter_half", SCATTER, 1, 100},
    {"alltoall_count", ALLTOALL, 0, 100},
    {"alltoall_count_large", ALLTOALL, 0, 70000},
    {"allgatherv_count", ALLGATHERV, 0, 100},
    {"allgatherv_count_large", ALLGATHERV, 0, 70000},
    {"reduce_scatterv_count", REDUCE_SCATTERV, 0, 100},
    {"allgather_count", ALLGATHER, 0, 100},
};

static int root_of(const case_t *c, int r, int n)
{
    return c->half == 2 ? r == 0 : c->half ? r % 2 : (r == n - 1);
}

/* The value rank r contributes at element k. */
static float val(int r, size_t k)
{
    return (float)(r * 1000 + (int)(k % 997));
}

static hcomm_status_t run(const case_t *c, hcomm_comm_t comm, float *sb, float *rb, int *wrong)
{
    int me = hcomm_comm_rank(comm), n = hcomm_comm_size(comm);
    int root = root_of(c, me, n);
    size_t cnt = c->count, *counts = mp_xmalloc(sizeof(size_t) * (size_t)n),
           *displs = mp_xmalloc(sizeof(size_t) * (size_t)n);
    /* the last rank believes the last block is one element longer */
    for (int j = 0; j < n; j++)
        counts[j] = cnt + (me == n - 1 && j == n - 1);
    size_t off = 0;
    for (int j = 0; j < n; j++) {
        displs[j] = off;
        off += counts[j];
    }
    for (size_t k = 0; k < cnt * (size_t)n + 1; k++)
        sb[k] = val(me, k);
    hcomm_status_t st = HCOMM_ERR_INTERNAL;
    *wrong = 0;
    switch (c->kind) {
    case BCAST:
        if (me == root)
            for (size_t k = 0; k < cnt; k++)
                rb[k] = val(me, k);
        st = hcomm_broadcast(rb, cnt, HCOMM_FLOAT32, root, comm);
        for (size_t k = 0; st == HCOMM_OK && k < cnt && !*wrong; k++)
            *wrong = rb[k] != val(root, k);
        break;
    case REDUCE:
        st = hcomm_reduce(sb, rb, cnt, HCOMM_FLOAT32, HCOMM_SUM, root, comm);
        if (st == HCOMM_OK && me == root) {
            float want = 0;
            for (int r = 0; r < n; r++)
                want += val(r, 0);
            *wrong = rb[0] != want;
        }
        break;
    case GATHER:
        st = hcomm_gather(sb, rb, cnt, HCOMM_FLOAT32, root, comm);
        for (int r = 0; st == HCOMM_OK && me == root && r < n && !*wrong; r++)
            *wrong = rb[(size_t)r * cnt] != val(r, 0);
        break;
    case SCATTER:
        st = hcomm_scatter(sb, rb, cnt, HCOMM_FLOAT32, root, comm);
        if (st == HCOMM_OK)
            *wrong = rb[0] != val(root, (size_t)me * cnt);
        break;
    case ALLTOALL:
        st = hcomm_alltoall(sb, rb, cnt + (me == n - 1), HCOMM_FLOAT32, comm);
        break;
    case ALLGATHERV:
        st = hcomm_allgatherv(sb, counts[me], rb, counts, displs, HCOMM_FLOAT32, comm);
        break;
    case REDUCE_SCATTERV:
        st = hcomm_reduce_scatterv(sb, rb, counts, HCOMM_FLOAT32, HCOMM_SUM, comm);
        break;
    case ALLGATHER:
        st = hcomm_allgather(sb, rb, cnt + (me == n - 1), HCOMM_FLOAT32, comm);
        break;
    }
    free(counts);
    free(displs);
    return st;
}

static int names_other_rank(const char *msg, int me)
{
    for (const char *p = msg; (p = strstr(p, "rank ")) != NULL; p += 5) {
        if (p[5] < '0' || p[5] > '9')
            continue;
        if (strtol(p + 5, NULL, 10) != me)
            return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *only = NULL;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--case") && i + 1 < argc)
            only = argv[++i];
    setvbuf(stdout, NULL, _IOLBF, 0);
    mp_init();
    hcomm_comm_t w = hcomm_comm_world();
    if (mp_size < 2) {
        printf("skipped: needs 2+ ranks\n");
        hcomm_finalize();
        return 77;
    }
    size_t maxc = 300000 * (size_t)mp_size + 16;
    float *sb = mp_xmalloc(maxc * sizeof(float)), *rb = mp_xmalloc(maxc * sizeof(float));
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const case_t *c = &cases[i];
        if (only && strcmp(only, c->name))
            continue;
        if (c->half && mp_size < 2)
            continue;
        hcomm_comm_t comm;
        MP_OK(hcomm_comm_split(w, 0, mp_rank, &comm));
        int wrong = 0;
        double t0 = mp_now();
        hcomm_status_t st1 = run(c, comm, sb, rb, &wrong);
        char msg1[600];
        snprintf(msg1, sizeof(msg1), "%s", hcomm_last_error());
        double t1 = mp_now();
        hcomm_status_t st2 = hcomm_barrier(comm);
        char msg2[600];
        snprintf(msg2, sizeof(msg2), "%s", hcomm_last_error());
        double t2 = mp_now();
        if (st1 == HCOMM_OK && st2 == HCOMM_OK)
            mp_fail("%s: the collective and the barrier after it both returned OK: the "
                    "disagreement went unseen",
                    c->name);
        if (st1 == HCOMM_OK && wrong)
            mp_fail("%s: OK with a result that is wrong by this rank's own arguments", c->name);
        if (t1 - t0 > 15 || t2 - t1 > 15)
            mp_fail("%s: took %.1f s + %.1f s: waited for the timeout", c->name, t1 - t0, t2 - t1);
        if (st1 != HCOMM_OK && !names_other_rank(msg1, hcomm_comm_rank(comm)))
            mp_fail("%s: the collective's error names no other rank: %s", c->name, msg1);
        if (st2 != HCOMM_OK && st1 == HCOMM_OK && !names_other_rank(msg2, hcomm_comm_rank(comm)))
            mp_fail("%s: the barrier's error names no other rank: %s", c->name, msg2);
        if (getenv("MP_VERBOSE") || mp_rank == 0)
            printf("rank %d: %s: %s%s / barrier %s (%.2f s): %s\n", mp_rank, c->name,
                   mp_status_name(st1), wrong ? " (wrong data)" : "", mp_status_name(st2), t2 - t0,
                   st1 != HCOMM_OK ? msg1 : msg2);
        MP_OK(hcomm_comm_free(comm));
        MP_OK(hcomm_barrier(w)); /* world is untouched */
    }
    free(sb);
    free(rb);
    return mp_finish("mp_coll_disagree");
}
