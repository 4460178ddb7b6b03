/*
 * mp_revoke_relay: a revoke reaches every member as a revoke, whichever way
 * it arrives. Rank 0 revokes a communicator while the other members wait in
 * a collective on it. A member that learns it from rank 0's REVOKE, and one
 * that learns it first from another member that gave up on the
 * communicator because of it (that member's give-up can overtake rank 0's
 * REVOKE), must both fail with ERR_REVOKED naming communicator rank 0, never
 * with ERR_PEER_FAILED (nobody failed) or without naming who revoked.
 *
 *   mp_revoke_relay [--rounds N] [--count C]
 *
 * Each round: a fresh communicator (split of world), one allreduce on it to
 * connect everything and a world barrier, then ranks 1.. start an
 * allreduce of C floats that
 * rank 0 never joins; rank 0 waits a pseudo-random 0-2 ms and revokes. The
 * round ends with a world barrier. Run it on shm and on the fake driver
 * (which reorders frames).
 */
#include "common/mp_test.h"

int main(int argc, char **argv)
{
    int rounds = 40;
    size_t count = 4096;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--count") && i + 1 < argc)
            count = (size_t)atol(argv[++i]);
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    mp_init();
    if (mp_size < 3) {
        printf("skipped: needs 3 ranks or more (a member that relays the revoke)\n");
        hcomm_finalize();
        return 77;
    }
    hcomm_comm_t world = hcomm_comm_world();
    float *in = mp_xmalloc(count * sizeof(float)), *out = mp_xmalloc(count * sizeof(float));
    for (size_t k = 0; k < count; k++)
        in[k] = (float)(mp_rank + 1);
    for (int r = 0; r < rounds && !mp_failures; r++) {
        hcomm_comm_t c;
        MP_OK(hcomm_comm_split(world, 0, mp_rank, &c));
        MP_OK(hcomm_allreduce(in, out, count, HCOMM_FLOAT32, HCOMM_SUM, c));
        /* every rank is out of that allreduce (rank 0 may finish it first:
         * a revoke then would fail it on the others, rightly) */
        MP_OK(hcomm_barrier(world));
        if (mp_rank == 0) {
            usleep((useconds_t)(mp_hash((uint64_t)r + 1) % 2000));
            MP_OK(hcomm_comm_revoke(c));
        } else {
            double t0 = mp_now();
            hcomm_status_t st = hcomm_allreduce(in, out, count, HCOMM_FLOAT32, HCOMM_SUM, c);
            const char *msg = hcomm_last_error();
            if (st != HCOMM_ERR_REVOKED)
                mp_fail("round %d: the allreduce rank 0 revoked returned %s, want ERR_REVOKED: %s",
                        r, mp_status_name(st), msg);
            else if (!strstr(msg, "communicator rank 0 (world rank 0) revoked"))
                mp_fail("round %d: ERR_REVOKED without naming rank 0: %s", r, msg);
            else if (mp_now() - t0 > 10.0)
                mp_fail("round %d: the revoke took %.1f s to arrive", r, mp_now() - t0);
            /* a later call is refused with the same words */
            st = hcomm_barrier(c);
            if (st != HCOMM_ERR_REVOKED || !strstr(hcomm_last_error(), "communicator rank 0"))
                mp_fail("round %d: a barrier after the revoke returned %s: %s", r,
                        mp_status_name(st), hcomm_last_error());
        }
        MP_OK(hcomm_comm_free(c));
        MP_OK(hcomm_barrier(world));
    }
    free(in);
    free(out);
    return mp_finish("mp_revoke_relay");
}
