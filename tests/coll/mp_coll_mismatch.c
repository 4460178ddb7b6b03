/*
 * Ranks that disagree on a collective must never get success with a
 * partial result. 2+ ranks; the last rank calls with a different argument.
 *
 *   mp_coll_mismatch          count mismatches (the default checks): every
 *                             rank that has a result must fail, on any path
 *                             (node signatures, p2p exact sizes). Each case
 *                             on a fresh communicator (a mismatch breaks it).
 *                             Every failure's message names another
 *                             rank; one that says a rank called with
 *                             "other arguments" (or went past without this
 *                             rank) names a rank that really did and says
 *                             which arguments are compared.
 *   mp_coll_mismatch --check  HCOMM_CHECK=1: count, dtype, op and root
 *                             mismatches fail on every rank with ERR_INVALID
 *                             and a message naming the field, this rank's
 *                             value and the value on a rank that called
 *                             with another (coll/coll_post.c's "FIELD X here,
 *                             Y on rank R (HCOMM_CHECK)"); the communicator
 *                             stays usable.
 */
#include "common/mp_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HC_MAXI(a, b) ((a) > (b) ? (a) : (b))

enum { M_ALLREDUCE, M_REDUCE, M_BROADCAST, M_ALLGATHER, M_REDUCE_SCATTER, M_ALLTOALL, M_N };
static const char *const names[M_N] = {"allreduce", "reduce", "broadcast",
                                       "allgather", "reduce_scatter", "alltoall"};

typedef struct {
    int coll;
    size_t count;   /* everyone's but the last rank's */
    size_t count_l; /* the last rank's */
    hcomm_dtype_t dtype, dtype_l;
    hcomm_op_t op, op_l;
    int root, root_l;
} mcase_t;

static hcomm_status_t call(const mcase_t *c, hcomm_comm_t comm, float *sb, float *rb)
{
    int last = hcomm_comm_rank(comm) == hcomm_comm_size(comm) - 1;
    size_t n = last ? c->count_l : c->count;
    hcomm_dtype_t d = last ? c->dtype_l : c->dtype;
    hcomm_op_t op = last ? c->op_l : c->op;
    int root = last ? c->root_l : c->root;
    switch (c->coll) {
    case M_ALLREDUCE: return hcomm_allreduce(sb, rb, n, d, op, comm);
    case M_REDUCE: return hcomm_reduce(sb, rb, n, d, op, root, comm);
    case M_BROADCAST: return hcomm_broadcast(rb, n, d, root, comm);
    case M_ALLGATHER: return hcomm_allgather(sb, rb, n, d, comm);
    case M_REDUCE_SCATTER: return hcomm_reduce_scatter(sb, rb, n, d, op, comm);
    case M_ALLTOALL: return hcomm_alltoall(sb, rb, n, d, comm);
    }
    return HCOMM_ERR_INVALID;
}

/* Does this rank hold a result the mismatch could have corrupted? */
static int has_result(const mcase_t *c, int me, int last)
{
    if (c->coll == M_REDUCE) return me == c->root;           /* only the root's */
    if (c->coll == M_BROADCAST) return me != c->root && last; /* receivers that disagree */
    return 1;
}

static void describe(const mcase_t *c, char *out, size_t cap)
{
    snprintf(out, cap, "%s count %zu/%zu dtype %d/%d op %d/%d root %d/%d", names[c->coll],
             c->count, c->count_l, c->dtype, c->dtype_l, c->op, c->op_l, c->root, c->root_l);
}

/* Only the last rank calls with other arguments: do ranks a and b differ? */
static int differs(int a, int b, int n)
{
    return (a == n - 1) != (b == n - 1);
}

/* The number after the first `key` in msg, or -1. */
static long num_after(const char *msg, const char *key)
{
    const char *p = strstr(msg, key);
    if (!p)
        return -1;
    p += strlen(key);
    if (*p < '0' || *p > '9')
        return -1;
    return strtol(p, NULL, 10);
}

/* Does msg name a communicator rank other than me ("rank R", not "world
 * rank R": the explanations name both)? */
static int names_other_rank(const char *msg, int me, int n)
{
    for (const char *p = msg; (p = strstr(p, "rank ")) != NULL; p += 5) {
        if (p - msg >= 6 && !strncmp(p - 6, "world ", 6))
            continue;
        if (p[5] < '0' || p[5] > '9')
            continue;
        long r = strtol(p + 5, NULL, 10);
        if (r != me && r >= 0 && r < n)
            return 1;
    }
    return 0;
}

static const char *dtype_name(hcomm_dtype_t d)
{
    return d == HCOMM_FLOAT32 ? "float32" : d == HCOMM_INT32 ? "int32" : "?";
}

static const char *op_name(hcomm_op_t op)
{
    return op == HCOMM_SUM ? "sum" : op == HCOMM_MAX ? "max" : "?";
}

/* What is wrong with the message of a failed call (into out), or 0 if nothing. */
static int bad_message(const mcase_t *c, int check, int me, int n, const char *msg, char *out,
                       size_t cap)
{
    int last = me == n - 1;
    if (check) {
        /* coll/coll_post.c compares count, dtype, op, root in this order and
         * names the first that differs: "FIELD MINE here, THEIRS on rank R" */
        char want[96];
        if (c->count != c->count_l)
            snprintf(want, sizeof(want), "count %zu here, %zu on rank ", last ? c->count_l : c->count,
                     last ? c->count : c->count_l);
        else if (c->dtype != c->dtype_l)
            snprintf(want, sizeof(want), "dtype %s here, %s on rank ",
                     dtype_name(last ? c->dtype_l : c->dtype),
                     dtype_name(last ? c->dtype : c->dtype_l));
        else if (c->op != c->op_l)
            snprintf(want, sizeof(want), "op %s here, %s on rank ", op_name(last ? c->op_l : c->op),
                     op_name(last ? c->op : c->op_l));
        else
            snprintf(want, sizeof(want), "root %d here, %d on rank ", last ? c->root_l : c->root,
                     last ? c->root : c->root_l);
        if (!strstr(msg, "HCOMM_CHECK"))
            return snprintf(out, cap, "does not name HCOMM_CHECK");
        if (!strstr(msg, want))
            return snprintf(out, cap, "does not name the field as \"%s...\"", want);
        long r = num_after(msg, want);
        if (r < 0 || r >= n || !differs(me, (int)r, n))
            return snprintf(out, cap, "names rank %ld, which called with the same arguments", r);
        return 0;
    }
    if (!names_other_rank(msg, me, n))
        return snprintf(out, cap, "names no other rank");
    /* "communicator rank R called X here with other arguments (...)" and
     * "communicator rank R went past this collective without this rank":
     * R must be a rank whose arguments differ, and the message must say
     * which arguments the signature compares */
    if (strstr(msg, "other arguments")) {
        long r = -1;
        for (const char *p = msg; r < 0 && (p = strstr(p, "communicator rank ")) != NULL; p++) {
            char *end;
            long q = strtol(p + 18, &end, 10);
            if (end != p + 18 && (!strncmp(end, " called ", 8) || !strncmp(end, " went past", 10)))
                r = q;
        }
        if (r < 0)
            return snprintf(out, cap, "says \"other arguments\" without naming the rank");
        if (r >= n || !differs(me, (int)r, n))
            return snprintf(out, cap, "says rank %ld called with other arguments, but it did not",
                            r);
        if (!strstr(msg, "count, dtype, op or root") && !strstr(msg, "root, count, dtype or op"))
            return snprintf(out, cap, "does not say which arguments differ (count, dtype, op or "
                                      "root)");
        /* the advice at its end (a message cut short loses it first) */
        if (!strstr(msg, " went past") && !strstr(msg, "HCOMM_CHECK=1"))
            return snprintf(out, cap, "does not point to HCOMM_CHECK=1 (cut short?)");
    }
    return 0;
}

int main(int argc, char **argv)
{
    int check = argc > 1 && !strcmp(argv[1], "--check");
    setvbuf(stdout, NULL, _IOLBF, 0);
    mp_init();
    hcomm_comm_t w = hcomm_comm_world();
    if (mp_size < 2) {
        printf("skipped: needs 2+ ranks\n");
        hcomm_finalize();
        return 77;
    }
    const int n = mp_size, me = mp_rank;
    /* counts: inline-sized, flag-line sized, staged (several blocks) */
    static const size_t sizes[][2] = {{4, 2}, {1024, 512}, {600000, 300000}, {7, 8}};
    mcase_t cases[64];
    int nc = 0;
    for (int co = 0; co < M_N; co++)
        for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++)
            cases[nc++] = (mcase_t){co, sizes[k][0], sizes[k][1], HCOMM_FLOAT32, HCOMM_FLOAT32,
                                    HCOMM_SUM, HCOMM_SUM, 0, 0};
    if (check) {
        /* Same bytes, other meaning: only a fingerprint can see these. */
        cases[nc++] = (mcase_t){M_ALLREDUCE, 64, 64, HCOMM_FLOAT32, HCOMM_INT32, HCOMM_SUM,
                                HCOMM_SUM, 0, 0};
        cases[nc++] = (mcase_t){M_ALLREDUCE, 64, 64, HCOMM_FLOAT32, HCOMM_FLOAT32, HCOMM_SUM,
                                HCOMM_MAX, 0, 0};
        cases[nc++] = (mcase_t){M_BROADCAST, 64, 64, HCOMM_FLOAT32, HCOMM_FLOAT32, HCOMM_SUM,
                                HCOMM_SUM, 0, 1};
        cases[nc++] = (mcase_t){M_REDUCE, 64, 64, HCOMM_FLOAT32, HCOMM_FLOAT32, HCOMM_SUM,
                                HCOMM_SUM, 0, 1};
    }
    size_t maxc = 600000 * (size_t)n;
    float *sb = mp_xmalloc(maxc * sizeof(float)), *rb = mp_xmalloc(maxc * sizeof(float));
    for (size_t i = 0; i < maxc; i++)
        sb[i] = (float)(i % 100);
    const char *only = getenv("MP_CASE"); /* debugging: run one case */
    int upto = getenv("MP_UPTO") ? atoi(getenv("MP_UPTO")) : 0;
    for (int i = only ? atoi(only) : 0; i < (only ? HC_MAXI(atoi(only) + 1, upto) : nc); i++) {
        const mcase_t *c = &cases[i];
        char what[160], why[160];
        describe(c, what, sizeof(what));
        hcomm_comm_t comm = w;
        if (!check)
            MP_OK(hcomm_comm_split(w, 0, me, &comm));
        hcomm_status_t st = call(c, comm, sb, rb);
        const char *msg = hcomm_last_error();
        if (st == HCOMM_OK && has_result(c, me, me == n - 1)) {
            mp_fail("%s: expected a failure got OK (a partial result reported as success)",
                    what);
        } else if (check && st != HCOMM_ERR_INVALID) {
            mp_fail("%s: expected ERR_INVALID under HCOMM_CHECK got %s (%s)", what,
                    mp_status_name(st), msg);
        } else if (st != HCOMM_OK && bad_message(c, check, me, n, msg, why, sizeof(why))) {
            mp_fail("%s: %s: the message %s: \"%s\"", what, mp_status_name(st), why, msg);
        } else if (getenv("MP_VERBOSE") || (st != HCOMM_OK && me == 0 && i % 4 == 1)) {
            printf("rank %d: %s: %s (%s)\n", me, what, mp_status_name(st), msg);
        }
        if (check) {
            /* Nothing was sent: the communicator still works. */
            float x = 1, y = 0;
            MP_OK(hcomm_allreduce(&x, &y, 1, HCOMM_FLOAT32, HCOMM_SUM, comm));
            if (y != (float)n) mp_fail("%s: allreduce after it expected %d got %g", what, n, y);
        } else {
            MP_OK(hcomm_comm_free(comm));
            MP_OK(hcomm_barrier(w)); /* world is untouched */
        }
    }
    free(sb);
    free(rb);
    return mp_finish("mp_coll_mismatch");
}
