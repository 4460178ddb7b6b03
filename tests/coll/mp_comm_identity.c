/*
 * mp_comm_identity: no two live communicators share state (issue 30.1).
 *
 * Communicators are created in every pattern a framework uses: split
 * (colors that group ranks apart: {0,2},{1,3} at 4 ranks), create_group
 * (pairs {0,1},{2,3}: data-parallel x tensor-parallel, as DeviceMesh builds
 * them), create_from_hint (grid rows and columns), nested (a split of a
 * split, a group of a group), and with creation and destruction interleaved
 * across ranks (one rank frees a communicator and creates the next while
 * the others still use theirs). Then, many rounds: every live communicator
 * runs collectives at once (non-blocking, posted on all of them before any
 * wait, sizes that take the inline, staged and single-copy node paths),
 * each with values unique to that communicator and round, and every result
 * is checked. A communicator that reads another's shared region, flags or
 * frames gets a foreign sum: the test names it.
 *
 *   mp_comm_identity [--rounds N]
 */
#include "common/mp_test.h"

#define MAXC 24

typedef struct {
    hcomm_comm_t c;
    char name[48];
    int id; /* the same on every member: part of the values */
} comm_t;

static comm_t comms[MAXC];
static int ncomms;

static void add(hcomm_comm_t c, int id, const char *fmt, int a)
{
    if (!c)
        return;
    if (ncomms == MAXC) {
        mp_fail("too many communicators");
        exit(1);
    }
    comms[ncomms].c = c;
    comms[ncomms].id = id;
    snprintf(comms[ncomms].name, sizeof(comms[ncomms].name), fmt, a);
    ncomms++;
}

/* Every live communicator at once: counts that take each node path. */
static void round_all(int round)
{
    static const size_t counts[] = {1, 3, 600, 70000};
    size_t count = counts[round % 4];
    hcomm_request_t reqs[MAXC];
    int64_t *in[MAXC], *out[MAXC];
    for (int i = 0; i < ncomms; i++) {
        in[i] = mp_xmalloc(count * sizeof(int64_t));
        out[i] = mp_xmalloc(count * sizeof(int64_t));
        int r = hcomm_comm_rank(comms[i].c);
        for (size_t k = 0; k < count; k++)
            in[i][k] = (int64_t)comms[i].id * 1000003 + (int64_t)round * 1009 + r * 7 + (int64_t)k;
        MP_OK(hcomm_iallreduce(in[i], out[i], count, HCOMM_INT64, HCOMM_SUM, comms[i].c,
                               &reqs[i]));
    }
    for (int i = 0; i < ncomms; i++) {
        MP_OK(hcomm_wait(reqs[i]));
        int n = hcomm_comm_size(comms[i].c);
        int bad = 0;
        for (size_t k = 0; k < count && bad < 1; k++) {
            int64_t want = 0;
            for (int r = 0; r < n; r++)
                want += (int64_t)comms[i].id * 1000003 + (int64_t)round * 1009 + r * 7 + (int64_t)k;
            if (out[i][k] != want) {
                mp_fail("round %d: %s (%d ranks): element %zu is %lld, expected %lld: another "
                        "communicator's data",
                        round, comms[i].name, n, k, (long long)out[i][k], (long long)want);
                bad++;
            }
        }
        free(in[i]);
        free(out[i]);
    }
    /* and blocking ones, one communicator after another, in an order that
     * differs between ranks of different communicators */
    for (int j = 0; j < ncomms; j++) {
        int i = (j + round) % ncomms;
        int64_t v = comms[i].id * 31 + round, s = 0;
        MP_OK(hcomm_allreduce(&v, &s, 1, HCOMM_INT64, HCOMM_SUM, comms[i].c));
        if (s != v * hcomm_comm_size(comms[i].c))
            mp_fail("round %d: %s: blocking allreduce gave %lld, expected %lld", round,
                    comms[i].name, (long long)s, (long long)(v * hcomm_comm_size(comms[i].c)));
    }
}

int main(int argc, char **argv)
{
    int rounds = 24;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
    mp_init();
    hcomm_comm_t w = hcomm_comm_world();
    int me = mp_rank, n = mp_size;
    if (n < 4 || n % 2) {
        fprintf(stderr, "mp_comm_identity: needs an even number of ranks, 4 or more\n");
        return 2;
    }
    /* The shape: split by parity, then pairs by create_group. */
    hcomm_comm_t parity, pair, sub, gsub, strided;
    MP_OK(hcomm_comm_split(w, me % 2, me, &parity));
    add(parity, 100 + me % 2, "split parity %d", me % 2);
    int pr[2] = {me & ~1, me | 1};
    MP_OK(hcomm_comm_create_group(w, pr, 2, 7, &pair));
    add(pair, 200 + me / 2, "group pair %d", me / 2);
    /* Nested: a split of the parity comm (halves of it), a group of the pair's ranks in
     * reverse order made from the parity comm's... members only, of the world. */
    int pn = hcomm_comm_size(parity), prk = hcomm_comm_rank(parity);
    MP_OK(hcomm_comm_split(parity, prk < pn / 2, -prk, &sub));
    add(sub, 300 + (me % 2) * 2 + (prk < pn / 2), "split of parity, half %d",
        (me % 2) * 2 + (prk < pn / 2));
    int rev[2] = {1, 0};
    MP_OK(hcomm_comm_create_group(pair, rev, 2, 9, &gsub));
    add(gsub, 400 + me / 2, "group of pair %d reversed", me / 2);
    /* From a hint: a grid whose rows are pairs. */
    hcomm_topology_hint_t hint;
    hcomm_comm_t grid = NULL, row = NULL, col = NULL;
    MP_OK(hcomm_topology_hint_create(w, &hint));
    MP_OK(hcomm_topology_hint_set_dim(hint, 2));
    MP_OK(hcomm_topology_hint_set_size(hint, 0, n / 2));
    MP_OK(hcomm_topology_hint_set_size(hint, 1, 2));
    hcomm_status_t hst = hcomm_comm_create_from_hint(w, hint, &grid);
    MP_OK(hcomm_topology_hint_free(hint));
    if (hst == HCOMM_OK) {
        add(grid, 500, "hint grid%s", 0);
        int g = hcomm_comm_rank(grid);
        MP_OK(hcomm_comm_split(grid, g / 2, g, &row));
        add(row, 600 + g / 2, "grid row %d", g / 2);
        MP_OK(hcomm_comm_split(grid, g % 2, g, &col));
        add(col, 700 + g % 2, "grid column %d", g % 2);
    } else {
        fprintf(stderr, "rank %d: create_from_hint: %s (skipped: grid patterns)\n", me,
                hcomm_last_error());
    }
    /* Interleaved creation and destruction: at step s each rank pairs
     * with rank ^ (s + 1) (when there is one) by create_group; the lower
     * member frees its previous pair before it makes the next, the higher
     * one only after, so each new pair is made while an old one of its
     * members is still alive elsewhere. The last pair stays. */
    hcomm_comm_t keep = NULL;
    int keep_id = 0;
    for (int step = 0; step < 3; step++) {
        int p = me ^ (step + 1);
        if (p < n) {
            int members[2] = {me < p ? me : p, me < p ? p : me};
            hcomm_comm_t c = NULL;
            if (keep && me == members[0]) {
                MP_OK(hcomm_comm_free(keep));
                keep = NULL;
            }
            MP_OK(hcomm_comm_create_group(w, members, 2, 20 + step, &c));
            int64_t v = step + me, s = 0;
            MP_OK(hcomm_allreduce(&v, &s, 1, HCOMM_INT64, HCOMM_SUM, c));
            if (s != 2 * step + me + p)
                mp_fail("interleaved step %d: %lld, expected %d", step, (long long)s,
                        2 * step + me + p);
            if (keep)
                MP_OK(hcomm_comm_free(keep));
            keep = c;
            keep_id = 800 + members[0] * 64 + members[1];
        }
        MP_OK(hcomm_barrier(w));
    }
    add(keep, keep_id, "interleaved pair with rank %d", keep_id % 64 == me ? (keep_id - 800) / 64 : keep_id % 64);
    /* A strided group of odd world ranks made through the world but by the
     * odd ranks only, while the even ranks make theirs from the parity comm. */
    if (me % 2) {
        int *odd = mp_xmalloc(sizeof(int) * (size_t)(n / 2));
        for (int i = 0; i < n / 2; i++)
            odd[i] = 2 * i + 1;
        MP_OK(hcomm_comm_create_group(w, odd, n / 2, 11, &strided));
        free(odd);
    } else {
        int *all = mp_xmalloc(sizeof(int) * (size_t)pn);
        for (int i = 0; i < pn; i++)
            all[i] = pn - 1 - i;
        MP_OK(hcomm_comm_create_group(parity, all, pn, 11, &strided));
        free(all);
    }
    add(strided, 900 + me % 2, "strided %d", me % 2);
    add(w, 1, "world%s", 0);

    for (int r = 0; r < rounds; r++)
        round_all(r);

    for (int i = 0; i < ncomms; i++)
        if (comms[i].c != w)
            MP_OK(hcomm_comm_free(comms[i].c));
    return mp_finish("mp_comm_identity");
}
