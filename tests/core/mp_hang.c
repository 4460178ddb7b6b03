/*
 * mp_hang MODE [ARG]: jobs that hang or disagree on purpose, for
 * hang_test.sh to read what the library says about them. 4 ranks; ranks
 * loop over 4 allreduces of 256 float32 and the last rank misbehaves at
 * the third (#2):
 *   skip     it calls hcomm_barrier instead (a skipped collective)
 *   root     call #2 is a broadcast; the last rank uses root 1, the others 0
 *   sleep S  it sleeps S seconds first (outside hcomm)
 *   stop     it stops itself (SIGSTOP) until the test continues it
 *   skipend  it skips the last allreduce (#3), sleeps 6 s, and finalizes
 *   nb S     at #2, three waits on the last rank, which sleeps S seconds (2;
 *            hang_test.sh gives 3)
 *            before each of its parts: rank 0's hcomm_irecv (tag 7, 256
 *            float32) + hcomm_wait; rank 0's hcomm_send of 8 MiB (tag 8,
 *            a rendezvous) that the last rank receives late; then #2 as
 *            hcomm_iallreduce + hcomm_wait on every rank
 * Every failure is printed as "rank R: CALL: <hcomm_last_error()>" on
 * stderr; the exit status is 1 when a call failed.
 */
#include "common/mp_test.h"

#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NB_BIG (8u << 20) /* bytes: past every connection's eager limit */

/* mode nb at #2 (see above); the last rank is late for each part. */
static hcomm_status_t nb_parts(int me, int n, int ms, float *a, float *b, const char **call)
{
    hcomm_comm_t w = hcomm_comm_world();
    hcomm_request_t req;
    hcomm_status_t st = HCOMM_OK;
    float small[256];
    if (me == 0) {
        *call = "hcomm_irecv";
        st = hcomm_irecv(small, 256, HCOMM_FLOAT32, n - 1, 7, w, &req);
        if (st == HCOMM_OK) {
            *call = "hcomm_wait(irecv)";
            st = hcomm_wait(req);
        }
    } else if (me == n - 1) {
        mp_sleep_ms(ms);
        for (int k = 0; k < 256; k++)
            small[k] = (float)k;
        *call = "hcomm_send(small)";
        st = hcomm_send(small, 256, HCOMM_FLOAT32, 0, 7, w);
    }
    if (st != HCOMM_OK)
        return st;
    if (me == 0 && small[255] != 255.0f) {
        *call = "irecv data";
        return HCOMM_ERR_INTERNAL;
    }
    if (me == 0 || me == n - 1) {
        unsigned char *big = malloc(NB_BIG);
        if (!big)
            return HCOMM_ERR_NO_MEMORY;
        memset(big, me == 0 ? 0x5a : 0, NB_BIG);
        if (me == 0) {
            *call = "hcomm_send(big)";
            st = hcomm_send(big, NB_BIG, HCOMM_UINT8, n - 1, 8, w);
        } else {
            mp_sleep_ms(ms);
            *call = "hcomm_recv(big)";
            st = hcomm_recv(big, NB_BIG, HCOMM_UINT8, 0, 8, w);
            if (st == HCOMM_OK && (big[0] != 0x5a || big[NB_BIG - 1] != 0x5a)) {
                *call = "rendezvous data";
                st = HCOMM_ERR_INTERNAL;
            }
        }
        free(big);
        if (st != HCOMM_OK)
            return st;
    }
    if (me == n - 1)
        mp_sleep_ms(ms);
    *call = "hcomm_iallreduce";
    st = hcomm_iallreduce(a, b, 256, HCOMM_FLOAT32, HCOMM_SUM, w, &req);
    if (st == HCOMM_OK) {
        *call = "hcomm_wait(iallreduce)";
        st = hcomm_wait(req);
    }
    return st;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    MP_OK(hcomm_init(&argc, &argv));
    hcomm_comm_t w = hcomm_comm_world();
    int me = hcomm_comm_rank(w), n = hcomm_comm_size(w);
    float a[256] = {0}, b[256];
    hcomm_status_t st = HCOMM_OK;
    const char *call = "";
    for (int i = 0; i < 4 && st == HCOMM_OK; i++) {
        bool odd = me == n - 1 && i == 2;
        if (i == 2 && !strcmp(mode, "nb")) {
            st = nb_parts(me, n, (int)(atof(argc > 2 ? argv[2] : "2") * 1000), a, b, &call);
            continue;
        }
        if (odd && !strcmp(mode, "sleep"))
            sleep((unsigned)atoi(argc > 2 ? argv[2] : "1"));
        if (odd && !strcmp(mode, "stop"))
            raise(SIGSTOP);
        if (me == n - 1 && i == 3 && !strcmp(mode, "skipend")) {
            sleep(6); /* past the others' HCOMM_TIMEOUT: they time out, not see it leave */
            break;
        }
        if (odd && !strcmp(mode, "skip")) {
            call = "hcomm_barrier";
            st = hcomm_barrier(w);
        } else if (i == 2 && !strcmp(mode, "root")) {
            call = "hcomm_broadcast";
            st = hcomm_broadcast(a, 256, HCOMM_FLOAT32, odd ? 1 : 0, w);
        } else {
            call = "hcomm_allreduce";
            st = hcomm_allreduce(a, b, 256, HCOMM_FLOAT32, HCOMM_SUM, w);
        }
    }
    if (st != HCOMM_OK)
        fprintf(stderr, "rank %d: %s: %s\n", me, call, hcomm_last_error());
    hcomm_finalize();
    return st == HCOMM_OK ? 0 : 1;
}
