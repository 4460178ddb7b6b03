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
 * Every failure is printed as "rank R: CALL: <hcomm_last_error()>" on
 * stderr; the exit status is 1 when a call failed.
 */
#include "mp_test.h"

#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
