/*
 * Leaf helpers every layer may use: error reporting (status + this thread's
 * message), logging with rank prefixes, monotonic time and deadlines,
 * branch hints. No dependency on any other hcomm module.
 */
#ifndef HC_BASE_H
#define HC_BASE_H

#include "hcomm.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define HC_EXPORT __attribute__((visibility("default")))
#define HC_LIKELY(x) __builtin_expect(!!(x), 1)
#define HC_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define HC_NOINLINE __attribute__((noinline))
/* Inlined even where a function has several callers: a shared entry point
 * that must cost its callers nothing over writing it out in each. */
#define HC_ALWAYS_INLINE inline __attribute__((always_inline))
#define HC_CACHE_LINE 64
#define HC_ALIGNED_CL __attribute__((aligned(HC_CACHE_LINE)))
/* Drivers one process can register and open: each open driver has a key slot
 * in every memory region (mem/) and an entry in the core's tables (drv/). */
#define HC_MAX_DRIVERS 10

#define HC_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define HC_MIN(a, b) ((a) < (b) ? (a) : (b))
#define HC_MAX(a, b) ((a) > (b) ? (a) : (b))
#define HC_ALIGN_UP(x, a) (((x) + (a)-1) & ~((__typeof__(x))(a)-1))

/* ---- errors ---------------------------------------------------------------
 * hc_error() records "fmt..." as this thread's last error and returns status,
 * so a failure is reported in one line: return hc_error(HCOMM_ERR_INVALID,
 * "hcomm_send: peer %d out of range", peer); It logs at debug level only: the
 * caller decides whether a failure deserves a warning. */
hcomm_status_t hc_error(hcomm_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Like hc_error() but appends ": <strerror(errno_value)>". */
hcomm_status_t hc_error_errno(hcomm_status_t status, int errno_value, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
const char *hc_error_last(void);
/* The thread's last error message kept aside and put back: a best-effort
 * step whose failure is only logged (a control frame to a peer) must not
 * replace the words of the error its caller is about to return. */
typedef struct {
    char text[512];
} hc_error_saved_t;
void hc_error_save(hc_error_saved_t *saved);
void hc_error_restore(const hc_error_saved_t *saved);
/* Is st one of the error codes of HCOMM_STATUS_MAP (a status read from a
 * peer's frame or a shared flag is checked before it is returned)? */
static inline bool hc_status_is_error(int st)
{
    switch (st) {
#define HC_STATUS_CASE_(name, value, text) case (value):
        HCOMM_STATUS_MAP(HC_STATUS_CASE_)
#undef HC_STATUS_CASE_
        return st < 0;
    default:
        return false;
    }
}

/* ---- logging ------------------------------------------------------------ */
typedef enum { HC_LOG_ERROR, HC_LOG_WARN, HC_LOG_INFO, HC_LOG_DEBUG, HC_LOG_TRACE } hc_log_level_t;
extern int hc_log_level_current;                /* set from HCOMM_LOG at init */
void hc_log_set_rank(int rank);                 /* prefix "[hcomm r3]"; -1 = none */
/* Once the rank is known: HCOMM_LOG_FILE (pattern: %r %h %p) and
 * HCOMM_LOG_SUBSYS (comma list, ^ excludes); NULL or "": unchanged.
 * HCOMM_ERR_INVALID (nothing changed) when subsys names a subsystem that is
 * not one of hc_log_subsystems (NULL-terminated). */
hcomm_status_t hc_log_configure(const char *file_pattern, const char *subsys);
extern const char *const hc_log_subsystems[];
/* A condition of the whole job (a limit every rank shares): a warning on
 * rank 0 (or before the rank is known), info elsewhere. */
#define hc_log_warn_job(...) hc_log(hc_log_job_level(), __VA_ARGS__)
int hc_log_job_level(void);
/* pattern with %r (rank), %h (host), %p (pid), %% expanded into out; false
 * when it does not fit. */
bool hc_path_expand(const char *pattern, int rank, char *out, size_t len);
bool hc_log_level_parse(const char *s, int *level_p);
void hc_log_emit(int level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define hc_log(level, ...)                                                                         \
    do {                                                                                           \
        if (HC_UNLIKELY((level) <= hc_log_level_current))                                          \
            hc_log_emit((level), __FILE__, __LINE__, __VA_ARGS__);                                 \
    } while (0)
#define hc_log_error(...) hc_log(HC_LOG_ERROR, __VA_ARGS__)
#define hc_log_warn(...) hc_log(HC_LOG_WARN, __VA_ARGS__)
#define hc_log_info(...) hc_log(HC_LOG_INFO, __VA_ARGS__)
#define hc_log_debug(...) hc_log(HC_LOG_DEBUG, __VA_ARGS__)
#define hc_log_trace(...) hc_log(HC_LOG_TRACE, __VA_ARGS__)

/* ---- files -------------------------------------------------------------- */

/* The number a file (sysfs, procfs) starts with into *out; false (and *out
 * untouched) when it cannot be opened or holds none. */
bool hc_read_long(const char *path, long *out);

/* ---- time --------------------------------------------------------------- */
static inline uint64_t hc_time_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
static inline double hc_time_sec(void)
{
    return (double)hc_time_ns() * 1e-9;
}

/* Spin-then-yield backoff for every busy wait: spins while a wait is young,
 * then yields the core so that more ranks than cores still make progress. */
typedef struct {
    uint32_t spins;
} hc_backoff_t;
void hc_backoff_step(hc_backoff_t *b);
/* Idle iterations before a wait starts yielding (lower when the node runs
 * more ranks than this process may use cores). */
extern int hc_backoff_spin_limit;
static inline void hc_backoff_reset(hc_backoff_t *b)
{
    b->spins = 0;
}
static inline void hc_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield" ::: "memory");
#endif
}

/* Overflow-checked size arithmetic for byte counts of user arguments. */
static inline bool hc_mul_overflows(size_t a, size_t b, size_t *out)
{
    return __builtin_mul_overflow(a, b, out);
}

#endif /* HC_BASE_H */
