/*
 * hcommrun internals shared by its three files: hcommrun.c (options, spawn,
 * event loop), hcommrun_bind.c (CPU binding plan from hwloc) and
 * hcommrun_tag.c (the "[rank] " prefixes of --tag-output). hcommrun does not
 * link libhcomm, so it has its own small error convention: functions return
 * 0 or -1 after printing one "hcommrun: ..." line to stderr.
 */
#ifndef HC_RUN_H
#define HC_RUN_H

#include <sched.h>
#include <stddef.h>
#include <sys/types.h>

#define HC_RUN_MAX_RANKS 4096

typedef enum {
    HC_RUN_BIND_NONE,
    HC_RUN_BIND_CORE,
    HC_RUN_BIND_NUMA,
} hc_run_bind_mode_t;

/* CPU sets for the ranks: rank i gets sets[i % nsets] (a set of one CPU per
 * slot for core binding, the allowed CPUs of one NUMA node for numa binding).
 * The sets are CPU_ALLOC-style, setsize bytes each, stored back to back. */
typedef struct {
    hc_run_bind_mode_t mode;
    size_t setsize;
    int nsets;
    unsigned char *sets;
} hc_run_bind_plan_t;

/* Builds the plan for mode over the CPUs this process may run on
 * (sched_getaffinity). Mode NONE gives an empty plan (nsets 0). Returns 0 or
 * -1 with a message printed. */
int hc_run_bind_plan_create(hc_run_bind_mode_t mode, hc_run_bind_plan_t *plan);
void hc_run_bind_plan_destroy(hc_run_bind_plan_t *plan);

/* The CPU set of rank, or NULL when the plan binds nothing. */
static inline cpu_set_t *hc_run_bind_plan_set(const hc_run_bind_plan_t *plan, int rank)
{
    if (plan->nsets == 0) return NULL;
    return (cpu_set_t *)(plan->sets + (size_t)(rank % plan->nsets) * plan->setsize);
}

/* Formats set as a CPU list ("0-3,8") into buf (always NUL terminated). */
void hc_run_bind_set_format(const cpu_set_t *set, size_t setsize, char *buf, size_t len);

/* One output stream of one rank under --tag-output: bytes read from the
 * rank's pipe are cut into lines and written to dest_fd with "[rank] " in
 * front. A line longer than HC_RUN_TAG_MAX_LINE is cut there. */
#define HC_RUN_TAG_MAX_LINE (64 * 1024)

typedef struct {
    int fd;      /* read end of the rank's pipe, -1 once closed */
    int dest_fd; /* 1 or 2 */
    int rank;
    char *partial; /* bytes after the last newline */
    size_t partial_len, partial_cap;
} hc_run_tag_stream_t;

/* Reads what is available from s->fd (non-blocking) and writes the complete
 * lines. Returns 1 while the stream is open, 0 at end of file (then call
 * hc_run_tag_stream_close). */
int hc_run_tag_stream_pump(hc_run_tag_stream_t *s);
/* Writes the partial line (if any), closes fd, frees the buffer. */
void hc_run_tag_stream_close(hc_run_tag_stream_t *s);

/* write(2) until done; EINTR retried. Returns 0 or -1 (errno set). */
int hc_run_write_all(int fd, const void *buf, size_t len);

#endif /* HC_RUN_H */
