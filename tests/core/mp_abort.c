/* hcomm_comm_abort from another thread: a receive that can never match and a
 * collective one rank never joins both return HCOMM_ERR_ABORTED promptly; the
 * aborted communicator can be freed locally; world keeps working. 2 ranks. */
#include "common/mp_test.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static void *watchdog(void *arg)
{
    usleep(300 * 1000);
    hcomm_status_t st = hcomm_comm_abort((hcomm_comm_t)arg);
    if (st != HCOMM_OK)
        printf("rank %d: hcomm_comm_abort failed: %s\n", mp_rank, hcomm_strerror(st));
    return NULL;
}

int main(void)
{
    mp_init();
    hcomm_comm_t world = hcomm_comm_world(), sub;
    if (hcomm_comm_size(world) != 2) {
        printf("skipped: needs exactly 2 ranks\n");
        return 77;
    }
    MP_OK(hcomm_comm_split(world, 0, mp_rank, &sub));
    if (mp_rank == 0) {
        pthread_t t;
        pthread_create(&t, NULL, watchdog, sub);
        hcomm_request_t coll;
        float x = 1, y;
        MP_OK(hcomm_iallreduce(&x, &y, 1, HCOMM_FLOAT32, HCOMM_SUM, sub, &coll));
        double t0 = mp_now();
        char buf[16];
        hcomm_status_t st = hcomm_recv(buf, sizeof(buf), HCOMM_UINT8, 1, 99, sub);
        double waited = mp_now() - t0;
        if (st != HCOMM_ERR_ABORTED || waited > 5.0) {
            printf("rank 0: recv on aborted comm: %s after %.2f s (expected ABORTED < 5 s)\n",
                   hcomm_strerror(st), waited);
            return 1;
        }
        st = hcomm_wait(coll);
        if (st != HCOMM_ERR_ABORTED) {
            printf("rank 0: pending allreduce on aborted comm: %s (expected ABORTED)\n",
                   hcomm_strerror(st));
            return 1;
        }
        st = hcomm_send(buf, 1, HCOMM_UINT8, 1, 1, sub);
        if (st != HCOMM_ERR_ABORTED) {
            printf("rank 0: send after abort: %s (expected ABORTED)\n", hcomm_strerror(st));
            return 1;
        }
        pthread_join(t, NULL);
        printf("rank 0: aborted after %.2f s as expected\n", waited);
    }
    /* Rank 1 never touches sub again: the abort needed nothing from it. */
    MP_OK(hcomm_comm_free(sub));
    int v = mp_rank + 1, sum = 0;
    MP_OK(hcomm_allreduce(&v, &sum, 1, HCOMM_INT32, HCOMM_SUM, world));
    if (sum != 3) {
        printf("rank %d: world allreduce after abort gave %d, expected 3\n", mp_rank, sum);
        return 1;
    }
    MP_OK(hcomm_finalize());
    return 0;
}
