/*
 * mp_relay_asleep: ranks that need rank 0's bootstrap relay (per-peer
 * driver handshakes: verbs/mlx5 queue pairs, the fake driver's
 * HCOMM_FAKE_HANDSHAKE) do not wait for rank 0's application thread to
 * enter hcomm (issue 36: a relay that answers without it).
 *
 *   mp_relay_asleep [--sleep S] [--limit S]
 *
 * Rank 0 sleeps S seconds (default 3) right after hcomm_init, outside
 * hcomm. Meanwhile ranks 1..n-1 exchange messages with each other (a ring
 * of sendrecvs, every byte checked), which needs the handshakes between
 * them relayed by rank 0: it must finish within --limit seconds (default
 * 1). Then every rank joins a barrier.
 */
#include "common/mp_test.h"

int main(int argc, char **argv)
{
    double sleep_s = 3, limit = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--sleep") && i + 1 < argc)
            sleep_s = atof(argv[++i]);
        else if (!strcmp(argv[i], "--limit") && i + 1 < argc)
            limit = atof(argv[++i]);
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    mp_init();
    hcomm_comm_t world = hcomm_comm_world();
    if (mp_size < 3) {
        printf("skipped: needs 3 ranks or more (two that talk while rank 0 sleeps)\n");
        hcomm_finalize();
        return 77;
    }
    if (mp_rank == 0) {
        mp_sleep_ms((int)(sleep_s * 1000));
    } else {
        int n = mp_size - 1, me = mp_rank - 1;
        int to = 1 + (me + 1) % n, from = 1 + (me + n - 1) % n;
        double t0 = mp_now();
        for (int it = 0; it < 10; it++) {
            uint64_t out[64], in[64];
            for (int k = 0; k < 64; k++)
                out[k] = mp_hash((uint64_t)(mp_rank * 1000 + it * 64 + k));
            hcomm_request_t r[2];
            MP_OK(hcomm_irecv(in, 64, HCOMM_UINT64, from, it, world, &r[0]));
            MP_OK(hcomm_isend(out, 64, HCOMM_UINT64, to, it, world, &r[1]));
            MP_OK(hcomm_wait(r[0]));
            MP_OK(hcomm_wait(r[1]));
            for (int k = 0; k < 64; k++)
                if (in[k] != mp_hash((uint64_t)(from * 1000 + it * 64 + k))) {
                    mp_fail("message %d from rank %d: element %d wrong", it, from, k);
                    break;
                }
        }
        double dt = mp_now() - t0;
        printf("rank %d: 10 exchanges with ranks %d and %d in %.3f s while rank 0 slept\n",
               mp_rank, from, to, dt);
        if (dt > limit)
            mp_fail("the exchanges took %.3f s (limit %.1f s): they waited for rank 0 to enter "
                    "hcomm", dt, limit);
    }
    MP_OK(hcomm_barrier(world));
    return mp_finish("mp_relay_asleep");
}
