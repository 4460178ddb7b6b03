/*
 * mp_comm_group: hcomm_comm_create_group, called by the members only.
 * 3+ ranks: the even ranks in reverse order and the odd ranks form groups at
 * the same time; each allreduces its members' ranks (the sum and the
 * order are checked); then two overlapping groups {0,1} and {1,2} one
 * after the other (rank 1 is in both: distinct context ids), collectives
 * on both interleaved; then the argument errors.
 */
#include "common/mp_test.h"

static void check_group(hcomm_comm_t g, const int *ranks, int n, const char *what)
{
    int me = hcomm_comm_rank(hcomm_comm_world());
    if (hcomm_comm_size(g) != n)
        mp_fail("%s: size %d, expected %d", what, hcomm_comm_size(g), n);
    int pos = -1;
    for (int i = 0; i < n; i++)
        if (ranks[i] == me)
            pos = i;
    if (hcomm_comm_rank(g) != pos)
        mp_fail("%s: rank %d in the group, expected %d", what, hcomm_comm_rank(g), pos);
    int64_t v = me, sum = 0, want = 0;
    for (int i = 0; i < n; i++)
        want += ranks[i];
    MP_OK(hcomm_allreduce(&v, &sum, 1, HCOMM_INT64, HCOMM_SUM, g));
    if (sum != want)
        mp_fail("%s: allreduce gave %lld, expected %lld", what, (long long)sum, (long long)want);
    int first = -1; /* the group's rank 0 is ranks[0] */
    if (hcomm_comm_rank(g) == 0)
        first = me;
    MP_OK(hcomm_broadcast(&first, 1, HCOMM_INT32, 0, g));
    if (first != ranks[0])
        mp_fail("%s: the group's rank 0 is world rank %d, expected %d", what, first, ranks[0]);
}

int main(void)
{
    mp_init();
    hcomm_comm_t w = hcomm_comm_world();
    int me = mp_rank, n = mp_size;
    if (n < 3) {
        fprintf(stderr, "mp_comm_group: needs 3+ ranks\n");
        return 2;
    }
    int even[64], odd[64], ne = 0, no = 0;
    for (int r = n - 1; r >= 0; r--)
        if (r % 2 == 0)
            even[ne++] = r;
    for (int r = 1; r < n; r += 2)
        odd[no++] = r;
    hcomm_comm_t g;
    if (me % 2 == 0) {
        MP_OK(hcomm_comm_create_group(w, even, ne, 5, &g));
        check_group(g, even, ne, "even ranks");
    } else {
        MP_OK(hcomm_comm_create_group(w, odd, no, 5, &g));
        check_group(g, odd, no, "odd ranks");
    }
    MP_OK(hcomm_comm_free(g));

    const int a[2] = {0, 1}, b[2] = {1, 2};
    hcomm_comm_t ga = NULL, gb = NULL;
    if (me <= 1)
        MP_OK(hcomm_comm_create_group(w, a, 2, 1, &ga));
    if (me >= 1 && me <= 2)
        MP_OK(hcomm_comm_create_group(w, b, 2, 2, &gb));
    for (int k = 0; k < 3; k++) {
        if (ga) check_group(ga, a, 2, "group {0,1}");
        if (gb) check_group(gb, b, 2, "group {1,2}");
    }
    if (ga) MP_OK(hcomm_comm_free(ga));
    if (gb) MP_OK(hcomm_comm_free(gb));

    /* errors: local checks, no communication */
    const int dup[2] = {me, me}, out[1] = {n}, others[1] = {(me + 1) % n};
    MP_EXPECT(HCOMM_ERR_INVALID, hcomm_comm_create_group(w, dup, 2, 0, &g));
    mp_expect_msg("duplicate", "listed twice", NULL);
    MP_EXPECT(HCOMM_ERR_INVALID, hcomm_comm_create_group(w, out, 1, 0, &g));
    mp_expect_msg("out of range", "out of range", NULL);
    MP_EXPECT(HCOMM_ERR_INVALID, hcomm_comm_create_group(w, others, 1, 0, &g));
    mp_expect_msg("not a member", "is not in ranks", NULL);
    MP_EXPECT(HCOMM_ERR_INVALID, hcomm_comm_create_group(w, a, 2, -3, &g));
    MP_EXPECT(HCOMM_ERR_INVALID, hcomm_comm_create_group(w, NULL, 2, 0, &g));
    /* the world still works */
    int64_t v = 1, s = 0;
    MP_OK(hcomm_allreduce(&v, &s, 1, HCOMM_INT64, HCOMM_SUM, w));
    if (s != n)
        mp_fail("world allreduce after the groups: %lld", (long long)s);
    MP_OK(hcomm_finalize());
    if (me == 0 && !mp_failures)
        printf("mp_comm_group: %d ranks passed\n", n);
    return mp_failures ? 1 : 0;
}
