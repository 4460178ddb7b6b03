/*
 * A plain small job used while garbage clients hammer the bootstrap port
 * (tests/api/mp_fault.sh, cases garbage*): it must start and compute
 * correctly regardless. MP_INIT_DELAY_MS delays this rank's hcomm_init, so
 * the driver can hold the other ranks in the rendezvous while it sends junk;
 * MP_INIT_WAIT_FILE instead holds it until that file exists (at most 30 s),
 * so the driver can say exactly when its flood is in place.
 * Prints "rank R: job ok" on success.
 */
#include "common/mp_test.h"

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *delay = getenv("MP_INIT_DELAY_MS");
    if (delay) mp_sleep_ms(atoi(delay));
    const char *wait_file = getenv("MP_INIT_WAIT_FILE");
    for (int ms = 0; wait_file && access(wait_file, F_OK) != 0; ms += 10) {
        if (ms >= 30000) {
            fprintf(stderr, "mp_bootstrap_garbage: %s never appeared\n", wait_file);
            return 1;
        }
        mp_sleep_ms(10);
    }
    double t0 = mp_now();
    mp_init();
    hcomm_comm_t w = hcomm_comm_world();
    int64_t v[3] = {mp_rank, 1, (int64_t)mp_rank * mp_rank}, s[3] = {0};
    MP_OK(hcomm_allreduce(v, s, 3, HCOMM_INT64, HCOMM_SUM, w));
    int64_t want0 = 0, want2 = 0;
    for (int r = 0; r < mp_size; r++) {
        want0 += r;
        want2 += (int64_t)r * r;
    }
    if (s[0] != want0 || s[1] != mp_size || s[2] != want2)
        mp_fail("allreduce expected {%lld,%d,%lld} got {%lld,%lld,%lld}", (long long)want0, mp_size,
                (long long)want2, (long long)s[0], (long long)s[1], (long long)s[2]);
    int next = (mp_rank + 1) % mp_size, prev = (mp_rank + mp_size - 1) % mp_size;
    hcomm_request_t req;
    int32_t out = 100 + mp_rank, in = -1;
    MP_OK(hcomm_isend(&out, 1, HCOMM_INT32, next, 3, w, &req));
    MP_OK(hcomm_recv(&in, 1, HCOMM_INT32, prev, 3, w));
    MP_OK(hcomm_wait(req));
    if (in != 100 + prev) mp_fail("ring expected %d got %d", 100 + prev, in);
    MP_OK(hcomm_barrier(w));
    int rc = mp_finish("mp_bootstrap_garbage");
    if (!rc) printf("rank %d: job ok (init to end %.2f s)\n", mp_rank, mp_now() - t0);
    return rc;
}
