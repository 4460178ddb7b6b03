/*
 * mixed_load: the collectives of one training step, as a step. A profile
 * lists message classes, one a line: `<collective> <bytes> <count per
 * step>` (`#` starts a comment). Each step issues every message of the
 * profile as a non-blocking collective (float32, sum for reductions) and
 * then waits for all of them, as DDP overlaps its gradient buckets; with
 * -z 1 the calls are blocking, one after another. Warm-up steps first, so
 * pools and connections are steady, then timed steps back to back.
 *
 * Every message has its own buffers (they are all in flight at once) and its
 * own offset into the reference pattern, so a result landing in another
 * message's buffer shows. Allreduce runs in place (DDP reduces its bucket
 * in place), the others out of place. Checked steps are extra, untimed
 * steps with fresh inputs and sentinel outputs, checked element by element
 * with the *_bw tools' checks (bench_colls.c): one after the warm-up, one
 * after every ML_CHECK_EVERY timed steps and one after the last.
 *
 * The built-in profiles are the .txt files of bench/profiles/, compiled in
 * (profiles.h).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "bench_common.h"
#include "profiles.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ML_CHECK_EVERY 25
#define ML_DEFAULT_PROFILE "mixed"
#define ML_MAX_COUNT 100000 /* messages of one class per step */

static const struct {
    const char *name;
    const struct hb_coll *coll;
} ml_colls[] = {
    {"allreduce", &hb_coll_allreduce}, {"allgather", &hb_coll_allgather},
    {"broadcast", &hb_coll_broadcast}, {"reduce_scatter", &hb_coll_reduce_scatter},
    {"alltoall", &hb_coll_alltoall},
};
#define ML_NCOLLS (sizeof(ml_colls) / sizeof(ml_colls[0]))

/* One line of a profile. */
struct ml_class {
    const struct hb_coll *coll;
    size_t bytes_asked; /* as written */
    size_t bytes;       /* rounded down to whole float32 elements (per rank) */
    long count;         /* messages per step */
    int line;           /* in the profile's text */
};

struct ml_profile {
    char name[128];   /* the built-in name, or the file's name without .txt */
    const char *file; /* -p FILE, or NULL for a built-in */
    char *text;
    struct ml_class *classes;
    int nclasses;
};

/* One message of a step. */
struct ml_msg {
    const struct hb_coll *coll;
    struct hb_coll_ctx c;
    int in_place;
    size_t send_bytes, recv_bytes;
    char what[128], what_input[160];
};

/* A profile that does not parse: "mixed_load: SOURCE:LINE: what is wrong"
 * on rank 0, exit 2 everywhere (every rank parses the same text). */
static void __attribute__((format(printf, 3, 4), noreturn))
ml_profile_error(const struct ml_profile *p, int line, const char *fmt, ...)
{
    va_list ap;

    if (hb_rank == 0) {
        if (p->file)
            fprintf(stderr, "mixed_load: %s:%d: ", p->file, line);
        else
            fprintf(stderr, "mixed_load: built-in profile %s, line %d: ", p->name, line);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
    }
    hcomm_finalize();
    exit(2);
}

static char *ml_read_file(const char *path)
{
    FILE *f = fopen(path, "r");
    size_t len = 0, cap = 4096, n;
    char *buf;

    if (!f) hb_usage_error("-p: cannot open '%s': %s", path, strerror(errno));
    if (!(buf = malloc(cap))) {
        fprintf(stderr, "rank %d: out of memory reading '%s'\n", hb_rank, path);
        exit(1);
    }
    while ((n = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += n;
        if (cap - len - 1 == 0) {
            char *bigger = cap > (1u << 24) ? NULL : realloc(buf, cap * 2);
            if (!bigger) {
                fclose(f);
                hb_usage_error("-p: '%s' is larger than 16 MiB: not a profile", path);
            }
            buf = bigger;
            cap *= 2;
        }
    }
    if (ferror(f)) hb_usage_error("-p: reading '%s' failed: %s", path, strerror(errno));
    fclose(f);
    buf[len] = '\0';
    return buf;
}

static const char *ml_builtin_text(const char *name)
{
    for (const struct hb_builtin_profile *b = hb_builtin_profiles; b->name; b++)
        if (!strcmp(b->name, name)) return b->text;
    return NULL;
}

static void ml_list_builtins(FILE *f)
{
    for (const struct hb_builtin_profile *b = hb_builtin_profiles; b->name; b++)
        fprintf(f, "%s%s", b == hb_builtin_profiles ? "" : " ", b->name);
    fputc('\n', f);
}

/* Splits line (modified) at spaces and tabs into at most max words. */
static int ml_words(char *line, char **words, int max)
{
    int n = 0;

    for (char *p = line;;) {
        while (*p == ' ' || *p == '\t' || *p == '\r')
            p++;
        if (!*p) return n;
        if (n == max) return max + 1;
        words[n++] = p;
        while (*p && *p != ' ' && *p != '\t' && *p != '\r')
            p++;
        if (*p) *p++ = '\0';
    }
}

static void ml_profile_parse(struct ml_profile *p)
{
    char *text = strdup(p->text), *line, *next, *w[3];
    int lineno = 0, cap = 0, nranks = hb_nranks;

    if (!text) {
        fprintf(stderr, "rank %d: out of memory parsing a profile\n", hb_rank);
        exit(1);
    }
    for (line = text; line; line = next) {
        struct ml_class k = {0};
        char *hash, *end;
        size_t elems;
        int nw;

        lineno++;
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        if ((hash = strchr(line, '#'))) *hash = '\0';
        nw = ml_words(line, w, 3);
        if (nw == 0) continue;
        for (size_t i = 0; i < ML_NCOLLS; i++)
            if (!strcmp(w[0], ml_colls[i].name)) k.coll = ml_colls[i].coll;
        if (!k.coll)
            ml_profile_error(p, lineno,
                             "unknown collective '%s' (allreduce, allgather, broadcast, "
                             "reduce_scatter or alltoall)",
                             w[0]);
        if (nw < 2) ml_profile_error(p, lineno, "'%s' without a size in bytes", w[0]);
        if (hb_parse_size(w[1], &k.bytes_asked))
            ml_profile_error(p, lineno, "bad size '%s' (bytes, with an optional K, M or G suffix)",
                             w[1]);
        if (nw < 3) ml_profile_error(p, lineno, "'%s %s' without a count per step", w[0], w[1]);
        if (nw > 3)
            ml_profile_error(p, lineno,
                             "more than three fields (a line is '<collective> <bytes> <count per "
                             "step>')");
        errno = 0;
        k.count = strtol(w[2], &end, 10);
        if (errno || *end || end == w[2] || k.count < 1 || k.count > ML_MAX_COUNT)
            ml_profile_error(p, lineno, "bad count per step '%s' (an integer from 1 to %d)", w[2],
                             ML_MAX_COUNT);
        elems = k.bytes_asked / sizeof(float);
        if (k.coll->per_rank) elems = elems / (size_t)nranks * (size_t)nranks;
        if (elems == 0)
            ml_profile_error(p, lineno,
                             "%s of %zu bytes holds no %sfloat32 element%s with %d ranks", w[0],
                             k.bytes_asked, k.coll->per_rank ? "whole " : "",
                             k.coll->per_rank ? " per rank" : "", nranks);
        k.bytes = elems * sizeof(float);
        k.line = lineno;
        if (p->nclasses == cap) {
            struct ml_class *bigger;
            cap = cap ? cap * 2 : 16;
            if (!(bigger = realloc(p->classes, sizeof(*bigger) * (size_t)cap))) {
                fprintf(stderr, "rank %d: out of memory parsing a profile\n", hb_rank);
                exit(1);
            }
            p->classes = bigger;
        }
        p->classes[p->nclasses++] = k;
    }
    free(text);
    if (p->nclasses == 0)
        ml_profile_error(p, lineno, "no messages (every line is empty or a comment)");
}

static void ml_profile_load(const struct hb_opts *o, struct ml_profile *p)
{
    memset(p, 0, sizeof(*p));
    if (o->profile_file) {
        const char *base = strrchr(o->profile_file, '/');
        size_t len;

        base = base ? base + 1 : o->profile_file;
        snprintf(p->name, sizeof(p->name), "%s", base);
        len = strlen(p->name);
        if (len > 4 && !strcmp(p->name + len - 4, ".txt")) p->name[len - 4] = '\0';
        p->file = o->profile_file;
        p->text = ml_read_file(o->profile_file);
        return;
    }
    snprintf(p->name, sizeof(p->name), "%s",
             o->profile_name ? o->profile_name : ML_DEFAULT_PROFILE);
    if (!strcmp(p->name, "list")) {
        if (hb_rank == 0) ml_list_builtins(stdout);
        hcomm_finalize();
        exit(0);
    }
    if (!ml_builtin_text(p->name)) {
        if (hb_rank == 0) {
            fprintf(stderr, "mixed_load: -P: no built-in profile '%s'; there are: ", p->name);
            ml_list_builtins(stderr);
        }
        hcomm_finalize();
        exit(2);
    }
    p->text = strdup(ml_builtin_text(p->name));
    if (!p->text) {
        fprintf(stderr, "rank %d: out of memory\n", hb_rank);
        exit(1);
    }
}

/* The messages of one step, each with its buffers. */
static struct ml_msg *ml_msgs_create(const struct ml_profile *p, const struct hb_opts *o,
                                     int *nmsgs_p)
{
    struct ml_msg *msgs;
    long n = 0;
    int k = 0;

    for (int i = 0; i < p->nclasses; i++)
        n += p->classes[i].count;
    if (!(msgs = calloc((size_t)n, sizeof(*msgs)))) {
        fprintf(stderr, "rank %d: out of memory for %ld messages\n", hb_rank, n);
        exit(1);
    }
    for (int i = 0; i < p->nclasses; i++) {
        const struct ml_class *cl = &p->classes[i];
        size_t elems = cl->bytes / sizeof(float), send, recv;

        for (long j = 0; j < cl->count; j++, k++) {
            struct ml_msg *m = &msgs[k];

            m->coll = cl->coll;
            m->in_place = cl->coll == &hb_coll_allreduce;
            m->c.comm = hcomm_comm_world();
            m->c.rank = hb_rank;
            m->c.nranks = hb_nranks;
            m->c.dtype = HCOMM_FLOAT32;
            m->c.esize = sizeof(float);
            m->c.op = cl->coll->reduces ? HCOMM_SUM : HB_OP_NONE;
            m->c.root = cl->coll->rooted ? 0 : -1;
            m->c.count = cl->coll->per_rank ? elems / (size_t)hb_nranks : elems;
            /* consecutive messages start at different phases of the
             * pattern (the sum pattern repeats every 3 elements) */
            m->c.first = (size_t)k;
            cl->coll->buf_elems(elems, hb_nranks, &send, &recv);
            if (m->in_place) send = 0;
            m->send_bytes = send * sizeof(float);
            m->recv_bytes = recv * sizeof(float);
            m->c.sendbuf = send ? hb_buf_alloc(m->send_bytes, o->mem_hcomm) : NULL;
            m->c.recvbuf = recv ? hb_buf_alloc(m->recv_bytes, o->mem_hcomm) : NULL;
            if (o->mem_hcomm == HB_MEM_DEVICE) { /* fill and check work on host copies */
                m->c.dsend = m->c.sendbuf;
                m->c.drecv = m->c.recvbuf;
                m->c.hsend = send ? hb_buf_alloc(m->send_bytes, 0) : NULL;
                m->c.hrecv = recv ? hb_buf_alloc(m->recv_bytes, 0) : NULL;
                m->c.send_bytes = m->send_bytes;
                m->c.recv_bytes = m->recv_bytes;
            }
            snprintf(m->what, sizeof(m->what),
                     "message %d (%s %zu bytes, profile line %d; elements numbered from %d)", k,
                     cl->coll->name, cl->bytes, cl->line, k);
            snprintf(m->what_input, sizeof(m->what_input), "%s: input buffer changed", m->what);
            m->c.what = m->what;
            m->c.what_input = m->what_input;
        }
    }
    *nmsgs_p = k;
    return msgs;
}

static void ml_msgs_destroy(struct ml_msg *msgs, int nmsgs, const struct hb_opts *o)
{
    for (int i = 0; i < nmsgs; i++) {
        struct hb_coll_ctx *c = &msgs[i].c;
        if (o->mem_hcomm == HB_MEM_DEVICE) {
            hb_buf_free(c->hsend, msgs[i].send_bytes, 0);
            hb_buf_free(c->hrecv, msgs[i].recv_bytes, 0);
            c->sendbuf = c->dsend;
            c->recvbuf = c->drecv;
        }
        hb_buf_free(c->sendbuf, msgs[i].send_bytes, o->mem_hcomm);
        hb_buf_free(c->recvbuf, msgs[i].recv_bytes, o->mem_hcomm);
    }
    free(msgs);
}

/* One step: every message posted, then every request waited for; or
 * blocking calls one after another. */
static void ml_step(struct ml_msg *msgs, int nmsgs, hcomm_request_t *reqs, int blocking)
{
    char call[64];

    if (blocking) {
        for (int i = 0; i < nmsgs; i++)
            hb_coll_call(msgs[i].coll, &msgs[i].c, msgs[i].in_place, 1);
        return;
    }
    for (int i = 0; i < nmsgs; i++) {
        hcomm_status_t st = msgs[i].coll->irun(&msgs[i].c, msgs[i].in_place, &reqs[i]);
        if (st != HCOMM_OK) {
            snprintf(call, sizeof(call), "hcomm_i%s", msgs[i].coll->name);
            hb_check(st, call);
        }
    }
    for (int i = 0; i < nmsgs; i++)
        hb_check(hcomm_wait(reqs[i]), "hcomm_wait");
}

/* An untimed step on fresh inputs; returns the wrong elements of all ranks.
 * -m device: filled in the host copies and moved to the device, the results
 * moved back and checked there; the timed steps then get the device
 * buffers again. */
static int64_t ml_checked_step(struct ml_msg *msgs, int nmsgs, hcomm_request_t *reqs, int blocking)
{
    int64_t wrong = 0, total;

    for (int i = 0; i < nmsgs; i++) {
        hb_dev_move(&msgs[i].c, -1);
        msgs[i].coll->fill(&msgs[i].c, msgs[i].in_place);
        hb_dev_move(&msgs[i].c, 1);
    }
    ml_step(msgs, nmsgs, reqs, blocking);
    for (int i = 0; i < nmsgs; i++) {
        hb_dev_move(&msgs[i].c, 0);
        wrong += (int64_t)msgs[i].coll->check(&msgs[i].c, msgs[i].in_place);
        if (msgs[i].c.dsend || msgs[i].c.drecv) {
            msgs[i].c.sendbuf = msgs[i].c.dsend;
            msgs[i].c.recvbuf = msgs[i].c.drecv;
        }
    }
    hb_check(hcomm_allreduce(&wrong, &total, 1, HCOMM_INT64, HCOMM_SUM, hcomm_comm_world()),
             "hcomm_allreduce");
    return total;
}

static void ml_print_header(const struct hb_opts *o, const struct ml_profile *p, int steps,
                            int warmup, int nmsgs, size_t step_bytes)
{
    if (o->csv) {
        printf("profile,nranks,steps,step_us_mean,step_us_p50,step_us_p99,step_us_min,step_us_max,"
               "bytes_per_step,eff_GBps,wrong\n");
        return;
    }
    printf("# mixed_load: %s\n", hcomm_version_string());
    printf("# profile %s (%s%s)  ranks %d  steps %d  warmup %d  blocking %d  average %d (%s)  "
           "check %d  mem %s\n",
           p->name, p->file ? "file " : "built-in", p->file ? p->file : "", hb_nranks, steps,
           warmup, o->blocking, o->average, hb_average_name(o->average), o->check,
           hb_mem_name(o->mem_hcomm));
    printf("#\n# %-14s %12s %9s %14s\n", "collective", "bytes", "per step", "bytes/step");
    for (int i = 0; i < p->nclasses; i++) {
        const struct ml_class *k = &p->classes[i];
        printf("# %-14s %12zu %9ld %14zu", k->coll->name, k->bytes, k->count,
               k->bytes * (size_t)k->count);
        if (k->bytes != k->bytes_asked) printf("   (%zu asked)", k->bytes_asked);
        putchar('\n');
    }
    printf("# %d messages, %zu bytes per step\n#\n", nmsgs, step_bytes);
    printf("# %12s %12s %12s %12s %12s %14s %9s %6s\n", "step_mean", "step_p50", "step_p99",
           "step_min", "step_max", "bytes/step", "eff_bw", "#wrong");
    printf("# %12s %12s %12s %12s %12s %14s %9s %6s\n", "(us)", "(us)", "(us)", "(us)", "(us)",
           "(B)", "(GB/s)", "");
}

int main(int argc, char **argv)
{
    struct hb_opts o;
    struct ml_profile prof;
    struct ml_msg *msgs;
    struct hb_stats st;
    hcomm_request_t *reqs;
    double *lat, mean_us, eff;
    int64_t wrong = 0;
    size_t step_bytes = 0;
    int nmsgs, steps, warmup;
    uint64_t t0, t1;
    FILE *json;
    char wrong_s[32];

    hb_init(&argc, &argv);
    hb_opts_parse(argc, argv, HB_TOOL_MIXED, &o);
    hb_start(&o);
    ml_profile_load(&o, &prof);
    if (o.show_profile) {
        if (hb_rank == 0) fputs(prof.text, stdout);
        free(prof.text);
        hb_check(hcomm_finalize(), "hcomm_finalize");
        return 0;
    }
    ml_profile_parse(&prof);
    json = hb_json_open(o.json, hcomm_comm_world());
    steps = o.iters >= 0 ? o.iters : 100;
    warmup = o.warmup >= 0 ? o.warmup : 10;

    msgs = ml_msgs_create(&prof, &o, &nmsgs);
    for (int i = 0; i < prof.nclasses; i++)
        step_bytes += prof.classes[i].bytes * (size_t)prof.classes[i].count;
    reqs = malloc(sizeof(*reqs) * (size_t)nmsgs);
    lat = malloc(sizeof(double) * ((size_t)steps + 1));
    if (!reqs || !lat) {
        fprintf(stderr, "rank %d: out of memory for %d steps\n", hb_rank, steps);
        exit(1);
    }
    if (hb_rank == 0) ml_print_header(&o, &prof, steps, warmup, nmsgs, step_bytes);

    /* defined inputs for the warm-up: garbage could hold slow denormals */
    for (int i = 0; i < nmsgs; i++) {
        hb_dev_move(&msgs[i].c, -1); /* (-m device: filled on the host, then moved) */
        msgs[i].coll->fill(&msgs[i].c, msgs[i].in_place);
        hb_dev_move(&msgs[i].c, 1);
    }
    for (int i = 0; i < warmup; i++)
        ml_step(msgs, nmsgs, reqs, o.blocking);
    if (o.check) wrong += ml_checked_step(msgs, nmsgs, reqs, o.blocking);
    hb_check(hcomm_barrier(hcomm_comm_world()), "hcomm_barrier");
    t0 = hb_now_ns();
    for (int i = 0; i < steps; i++) {
        ml_step(msgs, nmsgs, reqs, o.blocking);
        t1 = hb_now_ns();
        lat[i] = (double)(t1 - t0) / 1e3;
        if (o.check && ((i + 1) % ML_CHECK_EVERY == 0 || i == steps - 1)) {
            wrong += ml_checked_step(msgs, nmsgs, reqs, o.blocking);
            t1 = hb_now_ns();
        }
        t0 = t1;
    }
    /* one series, as the collective tools: each step reduced over the ranks,
     * the mean and the percentiles of it (min <= mean, p50 <= p99 <= max) */
    hb_times_reduce(lat, (size_t)steps, o.average, hcomm_comm_world());
    hb_stats_compute(lat, (size_t)steps, &st);
    mean_us = st.mean;
    eff = mean_us > 0 ? (double)step_bytes / mean_us / 1e3 : 0;

    if (hb_rank == 0) {
        struct hb_json j;

        if (o.check)
            snprintf(wrong_s, sizeof(wrong_s), "%lld", (long long)wrong);
        else
            snprintf(wrong_s, sizeof(wrong_s), "N/A");
        if (o.csv)
            printf("%s,%d,%d,%.3f,%.3f,%.3f,%.3f,%.3f,%zu,%.4f,%s\n", prof.name, hb_nranks, steps,
                   mean_us, st.p50, st.p99, st.min, st.max, step_bytes, eff, wrong_s);
        else
            printf("  %12.2f %12.2f %12.2f %12.2f %12.2f %14zu %9.3f %6s\n"
                   "# Out of bounds values : %lld %s\n#\n",
                   mean_us, st.p50, st.p99, st.min, st.max, step_bytes, eff, wrong_s,
                   (long long)wrong, wrong ? "FAILED" : "OK");
        if (o.csv && wrong)
            fprintf(stderr, "mixed_load: %lld wrong values: FAILED\n", (long long)wrong);
        fflush(stdout);

        hb_json_begin(&j);
        hb_json_str(&j, "tool", "mixed_load");
        hb_json_str(&j, "lib", "hcomm");
        hb_json_str(&j, "profile", prof.name);
        hb_json_int(&j, "nranks", hb_nranks);
        hb_json_int(&j, "steps", steps);
        hb_json_num(&j, "step_us_mean", mean_us);
        hb_json_num(&j, "step_us_p50", st.p50);
        hb_json_num(&j, "step_us_p99", st.p99);
        hb_json_int(&j, "bytes_per_step", (long long)step_bytes);
        hb_json_num(&j, "eff_GBps", eff);
        if (o.check)
            hb_json_int(&j, "wrong", (long long)wrong);
        else
            hb_json_null(&j, "wrong");
        hb_json_num(&j, "step_us_min", st.min);
        hb_json_num(&j, "step_us_max", st.max);
        hb_json_int(&j, "messages_per_step", nmsgs);
        hb_json_int(&j, "warmup", warmup);
        hb_json_int(&j, "blocking", o.blocking);
        hb_json_str(&j, "average", hb_average_name(o.average));
        hb_json_str(&j, "mem", hb_mem_name(o.mem_hcomm));
        if (prof.file) hb_json_str(&j, "profile_file", prof.file);
        hb_json_write(&j, json);
    }
    hb_json_close(json, o.json);
    ml_msgs_destroy(msgs, nmsgs, &o);
    free(reqs);
    free(lat);
    free(prof.classes);
    free(prof.text);
    hb_check(hcomm_finalize(), "hcomm_finalize");
    return wrong ? 1 : 0;
}
