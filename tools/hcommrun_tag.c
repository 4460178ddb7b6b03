/*
 * --tag-output: prefix every line a rank writes with "[rank] ".
 *
 * Each read of a rank's pipe is cut at newlines; the complete lines of one
 * read go out in one write(2), so lines of different ranks interleave but are
 * never torn in the middle (as long as a batch fits the destination pipe's
 * atomic size, which line-sized batches do). The bytes after the last newline
 * wait in a per-stream buffer that grows only as far as needed; a line longer
 * than HC_RUN_TAG_MAX_LINE is cut there so a rank that never writes a newline
 * cannot make hcommrun grow without bound. At end of file the pending partial
 * line is written with a newline added.
 *
 * When hcommrun's own stdout/stderr is gone (EPIPE), output is dropped and the
 * pipes keep being drained, so ranks never block on a full pipe.
 */
#include "hcommrun.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define READ_CHUNK (64 * 1024)

int hc_run_write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

typedef struct {
    char *buf;
    size_t len, cap;
} outbuf_t;

static int out_append(outbuf_t *o, const void *data, size_t len)
{
    if (len == 0) return 0; /* data may be NULL (an empty partial line) */
    if (o->len + len > o->cap) {
        size_t ncap = o->cap ? o->cap : 4096;
        while (ncap < o->len + len)
            ncap *= 2;
        char *n = realloc(o->buf, ncap);
        if (n == NULL) return -1;
        o->buf = n;
        o->cap = ncap;
    }
    memcpy(o->buf + o->len, data, len);
    o->len += len;
    return 0;
}

/* Appends "[rank] " + partial + data[0..len) + "\n" and empties partial. */
static int out_line(outbuf_t *o, hc_run_tag_stream_t *s, const char *data, size_t len)
{
    char prefix[24];
    int n = snprintf(prefix, sizeof(prefix), "[%d] ", s->rank);
    if (out_append(o, prefix, (size_t)n) != 0 || out_append(o, s->partial, s->partial_len) != 0 ||
        out_append(o, data, len) != 0 || out_append(o, "\n", 1) != 0)
        return -1;
    s->partial_len = 0;
    return 0;
}

static int partial_append(hc_run_tag_stream_t *s, const char *data, size_t len)
{
    if (s->partial_len + len > s->partial_cap) {
        size_t ncap = s->partial_cap ? s->partial_cap : 256;
        while (ncap < s->partial_len + len)
            ncap *= 2;
        char *n = realloc(s->partial, ncap);
        if (n == NULL) return -1;
        s->partial = n;
        s->partial_cap = ncap;
    }
    memcpy(s->partial + s->partial_len, data, len);
    s->partial_len += len;
    return 0;
}

static void flush_out(hc_run_tag_stream_t *s, outbuf_t *o)
{
    /* EPIPE or similar: nobody reads hcommrun's output any more; drop it. */
    if (o->len > 0) (void)hc_run_write_all(s->dest_fd, o->buf, o->len);
    free(o->buf);
}

int hc_run_tag_stream_pump(hc_run_tag_stream_t *s)
{
    static char chunk[READ_CHUNK];
    outbuf_t o = {0};
    int oom = 0;

    if (s->fd < 0) return 0;
    for (;;) {
        ssize_t n = read(s->fd, chunk, sizeof(chunk));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) break;
        if (n <= 0) { /* EOF, or an error we treat as one */
            flush_out(s, &o);
            return 0;
        }
        const char *p = chunk, *end = chunk + n;
        while (p < end && !oom) {
            const char *nl = memchr(p, '\n', (size_t)(end - p));
            size_t room = HC_RUN_TAG_MAX_LINE - s->partial_len;
            if (nl != NULL && (size_t)(nl - p) <= room) {
                oom = out_line(&o, s, p, (size_t)(nl - p)) != 0;
                p = nl + 1;
            } else if ((size_t)(end - p) >= room) {
                oom = out_line(&o, s, p, room) != 0; /* over-long line: cut it */
                p += room;
            } else {
                oom = partial_append(s, p, (size_t)(end - p)) != 0;
                p = end;
            }
        }
        if (oom) {
            fprintf(stderr,
                    "hcommrun: out of memory tagging the output of rank %d; "
                    "passing it through untagged\n",
                    s->rank);
            flush_out(s, &o);
            o = (outbuf_t){0};
            (void)hc_run_write_all(s->dest_fd, s->partial, s->partial_len);
            s->partial_len = 0;
            (void)hc_run_write_all(s->dest_fd, p, (size_t)(end - p));
            oom = 0;
        }
        if ((size_t)n < sizeof(chunk))
            break; /* most likely drained; epoll tells us when there is more */
    }
    flush_out(s, &o);
    return 1;
}

void hc_run_tag_stream_close(hc_run_tag_stream_t *s)
{
    if (s->partial_len > 0) {
        outbuf_t o = {0};
        if (out_line(&o, s, "", 0) == 0)
            flush_out(s, &o);
        else
            free(o.buf);
    }
    if (s->fd >= 0) close(s->fd);
    s->fd = -1;
    free(s->partial);
    s->partial = NULL;
    s->partial_len = s->partial_cap = 0;
}
