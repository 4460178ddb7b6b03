/*
 * Rank 0's bootstrap service thread (docs/bootstrap.md "Rank 0 answers
 * while its application is away"). Rank 0 is the hub of the bootstrap
 * star: it forwards the blobs of per-peer driver handshakes (verbs and mlx5
 * queue pairs, the fake driver's HCOMM_FAKE_HANDSHAKE) and answers failure
 * reports with verdicts. Inside an hcomm call its slow progress does that;
 * while its application computes or sleeps outside hcomm, two other ranks
 * that connect to each other would wait for it (a whole compute phase).
 *
 * This thread sleeps in poll() on the bootstrap sockets and an eventfd.
 * When one has something, it claims the library as the progress thread
 * does (one compare-and-swap on the threading contract's owner word; an
 * application call that finds it inside waits for it to leave, bounded by
 * HCOMM_TIMEOUT), runs one hc_bootstrap_poll and leaves: microseconds. When
 * the application is inside hcomm, its own progress reads the sockets and
 * the thread retries a little later. A message that is not for the slow
 * path (a rank already in a bootstrap allgather rank 0 has not reached)
 * stays on its socket; the thread then backs off, so it never spins.
 * HCOMM_BOOTSTRAP_SERVICE=0: no thread.
 */
#include "api/api.h"
#include "base/config.h"
#include "core/bootstrap.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

uintptr_t hc_bs_service_self; /* the thread's pointer while it runs (api.c waits for it) */

static struct {
    pthread_t thread;
    bool running;
    int stop_fd; /* eventfd: written by hc_api_bs_service_stop */
    struct pollfd *pfds;
    int max;
    uint64_t passes, relayed; /* what it did (hcomm_info, tests: HCOMM_LOG=debug at stop) */
} svc = {.stop_fd = -1};

static void hc_bs_service_nap(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void *hc_bs_service_main(void *arg)
{
    (void)arg;
    __atomic_store_n(&hc_bs_service_self, hc_api_self(), __ATOMIC_RELEASE);
    int nfds = 0; /* the bootstrap sockets in svc.pfds[1..], refreshed inside the library */
    bool refresh = true;
    for (;;) {
        if (refresh) {
            uintptr_t cur = 0;
            if (__atomic_compare_exchange_n(&hc_api_owner, &cur, hc_api_self(), false,
                                            __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
                __atomic_store_n(&hc_api_owner_fn, "the bootstrap service thread",
                                 __ATOMIC_RELAXED);
                nfds = hc_ctx.bs ? hc_bootstrap_poll_fds(hc_ctx.bs, svc.pfds + 1, svc.max - 1) : 0;
                __atomic_store_n(&hc_api_owner, 0, __ATOMIC_RELEASE);
                refresh = false;
            } else {
                hc_bs_service_nap(5);
                if (__atomic_load_n(&svc.running, __ATOMIC_ACQUIRE)) continue;
            }
        }
        svc.pfds[0] = (struct pollfd){.fd = svc.stop_fd, .events = POLLIN};
        int n = poll(svc.pfds, (nfds_t)(nfds + 1), 1000);
        if (n < 0 && errno != EINTR) break;
        if (svc.pfds[0].revents) break; /* stop */
        if (n <= 0) continue;
        /* Something to read: the library, if the application is not inside
         * (then its own progress reads it; look again a little later). */
        uintptr_t cur = 0;
        if (!__atomic_compare_exchange_n(&hc_api_owner, &cur, hc_api_self(), false,
                                         __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
            hc_bs_service_nap(2);
            continue;
        }
        __atomic_store_n(&hc_api_owner_fn, "the bootstrap service thread", __ATOMIC_RELAXED);
        int did = hc_ctx.bs ? hc_bootstrap_poll(hc_ctx.bs) : 0;
        nfds = hc_ctx.bs ? hc_bootstrap_poll_fds(hc_ctx.bs, svc.pfds + 1, svc.max - 1) : 0;
        __atomic_store_n(&hc_api_owner, 0, __ATOMIC_RELEASE);
        svc.passes++;
        svc.relayed += (uint64_t)did;
        /* Readable but nothing for the slow path (a message that waits for
         * a bootstrap call of this rank's application): do not spin on it. */
        if (did == 0) hc_bs_service_nap(20);
    }
    __atomic_store_n(&hc_bs_service_self, 0, __ATOMIC_RELEASE);
    return NULL;
}

hcomm_status_t hc_api_bs_service_start(void)
{
    if (!hc_cfg.bootstrap_service || hc_ctx.rank != 0 || hc_ctx.size < 2 || !hc_ctx.bs ||
        svc.running)
        return HCOMM_OK;
    svc.max = hc_ctx.size + 1;
    svc.pfds = calloc((size_t)svc.max, sizeof(*svc.pfds));
    svc.stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (!svc.pfds || svc.stop_fd < 0) {
        hc_log_warn("bootstrap service thread not started (%s): rank 0 answers the bootstrap "
                    "only inside hcomm calls", svc.pfds ? "eventfd failed" : "no memory");
        free(svc.pfds);
        svc.pfds = NULL;
        if (svc.stop_fd >= 0) close(svc.stop_fd);
        svc.stop_fd = -1;
        return HCOMM_OK;
    }
    svc.passes = svc.relayed = 0;
    __atomic_store_n(&svc.running, true, __ATOMIC_RELEASE);
    int rc = pthread_create(&svc.thread, NULL, hc_bs_service_main, NULL);
    if (rc != 0) {
        __atomic_store_n(&svc.running, false, __ATOMIC_RELEASE);
        hc_log_warn("bootstrap service thread not started (pthread_create: error %d): rank 0 "
                    "answers the bootstrap only inside hcomm calls", rc);
        free(svc.pfds);
        svc.pfds = NULL;
        close(svc.stop_fd);
        svc.stop_fd = -1;
        return HCOMM_OK;
    }
    hc_log_debug("bootstrap service thread started");
    return HCOMM_OK;
}

void hc_api_bs_service_stop(void)
{
    if (!__atomic_load_n(&svc.running, __ATOMIC_ACQUIRE)) return;
    __atomic_store_n(&svc.running, false, __ATOMIC_RELEASE);
    uint64_t one = 1;
    if (write(svc.stop_fd, &one, sizeof(one)) != (ssize_t)sizeof(one))
        hc_log_debug("bootstrap service thread: eventfd write failed");
    /* The caller is inside the library: the thread cannot claim it and
     * only naps between tries, seeing the stop at its next poll. */
    pthread_join(svc.thread, NULL);
    hc_log_debug("bootstrap service thread stopped after %llu passes, %llu messages handled",
                 (unsigned long long)svc.passes, (unsigned long long)svc.relayed);
    close(svc.stop_fd);
    svc.stop_fd = -1;
    free(svc.pfds);
    svc.pfds = NULL;
}
