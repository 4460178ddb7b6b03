/*
 * Logging to stderr with a rank prefix; one write() per line so that lines of
 * several ranks do not interleave. The level comes from HCOMM_LOG.
 */
#include "base/hc_base.h"

#include <sched.h>
#include <time.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

int hc_log_level_current = HC_LOG_WARN;
static int hc_log_rank = -1;

static const char *const hc_log_names[] = {"error", "warn", "info", "debug", "trace"};

void hc_log_set_rank(int rank)
{
    hc_log_rank = rank;
}

bool hc_log_level_parse(const char *s, int *level_p)
{
    for (int i = 0; i < (int)HC_ARRAY_SIZE(hc_log_names); i++) {
        if (!strcasecmp(s, hc_log_names[i])) {
            *level_p = i;
            return true;
        }
    }
    return false;
}

void hc_log_emit(int level, const char *file, int line, const char *fmt, ...)
{
    char buf[1024];
    int n;
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    if (hc_log_rank >= 0)
        n = snprintf(buf, sizeof(buf), "[hcomm r%d] %s: ", hc_log_rank, hc_log_names[level]);
    else
        n = snprintf(buf, sizeof(buf), "[hcomm] %s: ", hc_log_names[level]);
    va_list ap;
    va_start(ap, fmt);
    n += vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof(buf) - 40)
        n = (int)sizeof(buf) - 40;
    if (level >= HC_LOG_DEBUG)
        n += snprintf(buf + n, sizeof(buf) - (size_t)n, " (%s:%d)", base, line);
    buf[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, buf, (size_t)n);
    (void)w;
}

int hc_backoff_spin_limit = 2048;
#define HC_BACKOFF_PURE_SPINS 512u

void hc_backoff_step(hc_backoff_t *b)
{
    /* Spin while the wait is young (a peer on another core answers within
     * microseconds), then give the core away: with more ranks than cores the
     * rank we wait for may need this very core. When the node is
     * oversubscribed the spin phase is short (set at init). */
    if (b->spins < (uint32_t)hc_backoff_spin_limit) {
        /* The first iterations poll flat out: PAUSE costs up to ~140 cycles
         * on current x86 cores (and a trip out of translated code under
         * qemu TCG), paid on every poll of a message about to land. */
        if (b->spins++ >= HC_BACKOFF_PURE_SPINS) hc_cpu_relax();
        return;
    }
    /* A wait this long (~10 ms of yields) is a stalled or stopped peer, not
     * a message in flight: stop burning the core, poll every 50 us. */
    if (b->spins < (uint32_t)hc_backoff_spin_limit + 20000) {
        b->spins++;
        sched_yield();
        return;
    }
    struct timespec ts = {0, 50000};
    nanosleep(&ts, NULL);
}
