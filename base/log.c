/*
 * Logging to stderr with a rank prefix; one write() per line so that lines of
 * several ranks do not interleave. The level comes from HCOMM_LOG.
 */
#include "base/hc_base.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <time.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

int hc_log_level_current = HC_LOG_WARN;
static int hc_log_rank = -1;
static int hc_log_fd = STDERR_FILENO;
/* HCOMM_LOG_SUBSYS: the subsystems whose info/debug/trace lines are shown */
static char hc_log_subsys[256];
static bool hc_log_subsys_exclude;

int hc_log_job_level(void)
{
    return hc_log_rank <= 0 ? HC_LOG_WARN : HC_LOG_INFO;
}

bool hc_path_expand(const char *pattern, int rank, char *out, size_t len)
{
    size_t n = 0;
    for (const char *p = pattern; *p; p++) {
        char piece[300];
        if (*p == '%' && p[1]) {
            p++;
            if (*p == 'r')
                snprintf(piece, sizeof(piece), "%d", rank);
            else if (*p == 'p')
                snprintf(piece, sizeof(piece), "%d", (int)getpid());
            else if (*p == 'h') {
                if (gethostname(piece, sizeof(piece) - 1) != 0)
                    snprintf(piece, sizeof(piece), "unknown");
                piece[sizeof(piece) - 1] = 0;
            } else if (*p == '%')
                snprintf(piece, sizeof(piece), "%%");
            else
                snprintf(piece, sizeof(piece), "%%%c", *p);
        } else {
            piece[0] = *p;
            piece[1] = 0;
        }
        size_t k = strlen(piece);
        if (n + k >= len)
            return false;
        memcpy(out + n, piece, k);
        n += k;
    }
    out[n] = 0;
    return true;
}

/* The subsystems HCOMM_LOG_SUBSYS may name: the library's folders and the
 * drivers' (drv/<name>/, hc_log_subsys_shown). */
const char *const hc_log_subsystems[] = {"api",   "base", "coll", "core", "drv",
                                         "mem",   "topo", "self", "shm",  "tcp",
                                         "verbs", "mlx5", "dpdk", "fake", NULL};

static bool hc_log_subsys_known(const char *name, size_t len)
{
    for (int i = 0; hc_log_subsystems[i]; i++)
        if (strlen(hc_log_subsystems[i]) == len && !strncmp(hc_log_subsystems[i], name, len))
            return true;
    return false;
}

static hcomm_status_t hc_log_subsys_check(const char *list)
{
    char valid[160];
    size_t n = 0;
    for (int i = 0; hc_log_subsystems[i]; i++)
        n += (size_t)snprintf(valid + n, sizeof(valid) - n, "%s%s", i ? " " : "",
                              hc_log_subsystems[i]);
    for (const char *p = list; *p;) {
        size_t len = strcspn(p, ",");
        if (!hc_log_subsys_known(p, len))
            return hc_error(HCOMM_ERR_INVALID,
                            "hcomm_init: HCOMM_LOG_SUBSYS=\"%s\": \"%.*s\" is not a subsystem; "
                            "the subsystems are %s (comma separated; ^ first: all but these)",
                            list, (int)len, p, valid);
        p += len + (p[len] == ',');
    }
    return HCOMM_OK;
}

hcomm_status_t hc_log_configure(const char *file_pattern, const char *subsys)
{
    if (subsys && subsys[0]) {
        hcomm_status_t st = hc_log_subsys_check(subsys + (subsys[0] == '^'));
        if (st != HCOMM_OK) return st;
        hc_log_subsys_exclude = subsys[0] == '^';
        snprintf(hc_log_subsys, sizeof(hc_log_subsys), ",%s,", subsys + hc_log_subsys_exclude);
    } else {
        hc_log_subsys[0] = 0;
    }
    if (file_pattern && file_pattern[0]) {
        char path[512];
        int fd = -1;
        if (hc_path_expand(file_pattern, hc_log_rank < 0 ? 0 : hc_log_rank, path, sizeof(path)))
            fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd < 0) {
            hc_log_warn("HCOMM_LOG_FILE=%s: cannot open it (%s): logging to stderr", file_pattern,
                        strerror(errno));
            return HCOMM_OK;
        }
        if (hc_log_fd != STDERR_FILENO)
            close(hc_log_fd);
        hc_log_fd = fd;
    }
    return HCOMM_OK;
}

/* The subsystem of a source file: drv/<name>/ -> name, else its folder. */
static bool hc_log_subsys_shown(const char *file)
{
    if (!hc_log_subsys[0])
        return true;
    char sub[32] = "";
    const char *d = strstr(file, "/drv/");
    if (d) {
        d += 5;
        size_t l = strcspn(d, "/");
        if (l < sizeof(sub) - 2 && d[l] == '/')
            snprintf(sub, sizeof(sub), ",%.*s,", (int)l, d);
    }
    if (!sub[0]) {
        const char *end = strrchr(file, '/');
        const char *start = end;
        while (start && start > file && start[-1] != '/')
            start--;
        if (end && start && end > start && (size_t)(end - start) < sizeof(sub) - 2)
            snprintf(sub, sizeof(sub), ",%.*s,", (int)(end - start), start);
    }
    bool listed = sub[0] && strstr(hc_log_subsys, sub) != NULL;
    return hc_log_subsys_exclude ? !listed : listed;
}

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
    if (level >= HC_LOG_INFO && !hc_log_subsys_shown(file))
        return;
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
    ssize_t w = write(hc_log_fd, buf, (size_t)n);
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
