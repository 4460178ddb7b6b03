/*
 * A rank killed with SIGKILL: the survivors' operations that need it must
 * fail with ERR_PEER_FAILED naming the rank, well before HCOMM_TIMEOUT, and
 * operations among the survivors must go on working.
 *
 *   mp_killed [VICTIM]   (3 or more ranks; VICTIM defaults to the last rank)
 *
 * Survivors print "rank R: got PEER_FAILED naming rank V after X s" for the
 * receive and for the allreduce and exit 0 when every check held; the shell
 * driver (tests/api/mp_fault.sh) launches the ranks itself, since hcommrun
 * would terminate the survivors as soon as the victim dies.
 */
#include "common/mp_test.h"

#include <signal.h>


int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    mp_init();
    hcomm_comm_t w = hcomm_comm_world();
    int victim = argc > 1 ? atoi(argv[1]) : mp_size - 1;
    if (mp_size < 3 || victim < 0 || victim >= mp_size) {
        mp_fail("needs 3 or more ranks and a victim in range, got %d ranks, victim %d", mp_size,
                victim);
        return 2;
    }
    /* Everybody connected and working first. */
    int64_t one = 1, n = 0;
    MP_OK(hcomm_allreduce(&one, &n, 1, HCOMM_INT64, HCOMM_SUM, w));
    MP_OK(hcomm_barrier(w));
    if (mp_rank == victim) {
        mp_sleep_ms(300);
        raise(SIGKILL);
        return 3; /* not reached */
    }
    int32_t x = 0;
    double t0 = mp_now();
    mp_expect_peer_failed(hcomm_recv(&x, 1, HCOMM_INT32, victim, 0, w), t0, victim, "hcomm_recv");
    t0 = mp_now();
    int64_t s = 0;
    mp_expect_peer_failed(hcomm_allreduce(&one, &s, 1, HCOMM_INT64, HCOMM_SUM, w), t0, victim,
                  "hcomm_allreduce");
    t0 = mp_now();
    mp_expect_peer_failed(hcomm_send(&x, 1, HCOMM_INT32, victim, 0, w), t0, victim, "hcomm_send");
    hcomm_request_t req;
    t0 = mp_now();
    hcomm_status_t st = hcomm_irecv(&x, 1, HCOMM_INT32, victim, 1, w, &req);
    if (st == HCOMM_OK) st = hcomm_wait(req);
    mp_expect_peer_failed(st, t0, victim, "hcomm_irecv+wait");

    /* Survivors still talk to each other (a ring over the survivors). */
    int *live = mp_xmalloc(sizeof(int) * (size_t)mp_size);
    int nl = 0, me = -1;
    for (int r = 0; r < mp_size; r++)
        if (r != victim) {
            if (r == mp_rank) me = nl;
            live[nl++] = r;
        }
    int next = live[(me + 1) % nl], prev = live[(me + nl - 1) % nl];
    int64_t v = 1000 + mp_rank, got = -1;
    MP_OK(hcomm_isend(&v, 1, HCOMM_INT64, next, 7, w, &req));
    MP_OK(hcomm_recv(&got, 1, HCOMM_INT64, prev, 7, w));
    MP_OK(hcomm_wait(req));
    if (got != 1000 + prev)
        mp_fail("survivor ring: expected %d got %lld", 1000 + prev, (long long)got);
    free(live);

    mp_survivors_sync(victim);
    t0 = mp_now();
    st = hcomm_finalize();
    if (st != HCOMM_OK)
        mp_fail("hcomm_finalize after a peer died expected OK got %s (%s)", mp_status_name(st),
                hcomm_last_error());
    if (mp_now() - t0 > 10) mp_fail("hcomm_finalize after a peer died took %.1f s", mp_now() - t0);
    printf("rank %d: mp_killed: %s\n", mp_rank, mp_failures ? "FAILED" : "passed");
    return mp_failures ? 1 : 0;
}
