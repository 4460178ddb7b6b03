/*
 * Status strings (from the one X-macro in hcomm.h) and the per-thread last
 * error message that names the function, argument, peer and value.
 */
#include "base/hc_base.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static __thread char hc_error_buf[512];

HC_EXPORT const char *hcomm_strerror(hcomm_status_t status)
{
    switch (status) {
#define HC_STATUS_CASE_(name, value, text)                                                         \
    case HCOMM_##name:                                                                             \
        return text;
        HCOMM_STATUS_MAP(HC_STATUS_CASE_)
#undef HC_STATUS_CASE_
    }
    return "unknown status";
}

HC_EXPORT const char *hcomm_last_error(void)
{
    return hc_error_buf;
}

const char *hc_error_last(void)
{
    return hc_error_buf;
}

void hc_error_save(hc_error_saved_t *saved)
{
    _Static_assert(sizeof(saved->text) == sizeof(hc_error_buf), "one size");
    memcpy(saved->text, hc_error_buf, sizeof(hc_error_buf));
}

void hc_error_restore(const hc_error_saved_t *saved)
{
    memcpy(hc_error_buf, saved->text, sizeof(hc_error_buf));
}

static hcomm_status_t hc_error_vset(hcomm_status_t status, int errno_value, const char *fmt,
                                    va_list ap)
{
    /* Formatted aside first: a message may quote the previous one
     * (hc_error(st, "...: %s", hc_error_last())), which lives in the buffer
     * being written. */
    char text[sizeof(hc_error_buf)];
    int n = vsnprintf(text, sizeof(text), fmt, ap);
    if (errno_value && n >= 0 && (size_t)n < sizeof(text))
        snprintf(text + n, sizeof(text) - (size_t)n, ": %s", strerror(errno_value));
    memcpy(hc_error_buf, text, sizeof(hc_error_buf));
    hc_log_debug("%s (%s)", hc_error_buf, hcomm_strerror(status));
    return status;
}

hcomm_status_t hc_error(hcomm_status_t status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    hc_error_vset(status, 0, fmt, ap);
    va_end(ap);
    return status;
}

hcomm_status_t hc_error_errno(hcomm_status_t status, int errno_value, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    hc_error_vset(status, errno_value, fmt, ap);
    va_end(ap);
    return status;
}
