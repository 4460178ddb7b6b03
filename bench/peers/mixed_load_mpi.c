/* Peer baseline for hcomm's mixed_load (bench/mixed_load.c): a training-step-
 * like mix of non-blocking MPI collectives, measured the way mixed_load
 * measures hcomm, one JSON line with the same fields.
 *
 *   mpicc -O2 -o mixed_load_mpi bench/peers/mixed_load_mpi.c
 *   mpirun -n 2 ./mixed_load_mpi -p bench/profiles/mixed.txt [-N NAME] [-n STEPS]
 *          [-w WARMUP] [-a rank0|mean|min|max] [-c 0|1] [-l LIB] [-J FILE]
 *
 * Profile (bench/profiles/): one message class a line, "<collective> <bytes>
 * <count per step>", collective one of allreduce allgather broadcast
 * reduce_scatter alltoall, bytes with an optional K/M/G (binary) suffix, '#'
 * starts a comment. bytes is the size column of the *_bw tools: the buffer of
 * allreduce and broadcast (root 0), the gathered output of allgather, the
 * input of reduce_scatter, each rank's send buffer of alltoall; the per-rank
 * collectives round it down to whole float32 elements per rank.
 *
 * A step posts every message of the profile in file order (a line's count
 * copies one after the other, each with its own buffers and its own offset
 * into the reference pattern) as float32-sum MPI_Iallreduce (in place, as
 * mixed_load and DDP) / MPI_Iallgather / MPI_Ibcast / MPI_Ireduce_scatter_block
 * / MPI_Ialltoall, then MPI_Waitall. As mixed_load: WARMUP steps (default
 * 10), a checked step, a barrier, then STEPS steps (default 100) back to back,
 * one clock read between steps; checked steps (fresh inputs, sentinel
 * outputs, untimed) also after every 25 timed steps and after the last (-c 0:
 * none, "wrong" null). Each rank's per-step times and its mean are reduced
 * over the ranks by -a (default max, the slowest rank, as hcomm's tools;
 * 0..3 accepted too): step_us_mean is the reduced mean, p50 the sorted
 * reduced step at STEPS/2, p99 the one at floor(0.99 STEPS). eff_GBps =
 * bytes_per_step / step_us_mean (1e9 bytes).
 *
 * Rank 0 prints one JSON line on stdout (and appends it to -J FILE):
 *   {"tool":"mixed_load","lib":"openmpi","profile":"mixed","nranks":2,
 *    "steps":100,"step_us_mean":..,"step_us_p50":..,"step_us_p99":..,
 *    "bytes_per_step":..,"eff_GBps":..,"wrong":0, ...}
 * lib is -l LIB, else "openmpi" or "mpich" from MPI_Get_library_version;
 * profile is -N NAME, else the file's name without .txt. Exit 0; 1 when a
 * result is wrong; 2 on bad arguments or a bad profile (message on stderr).
 */
#include <mpi.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum coll { C_ALLREDUCE, C_ALLGATHER, C_BROADCAST, C_REDUCE_SCATTER, C_ALLTOALL, C_NCOLL };
static const char *const coll_names[C_NCOLL] = {"allreduce", "allgather", "broadcast",
                                                "reduce_scatter", "alltoall"};

struct mclass {
    enum coll coll;
    size_t bytes;     /* as written in the profile */
    size_t eff_bytes; /* after rounding: what the call moves by the size convention */
    size_t count;     /* the count argument: total (allreduce, bcast) or per rank */
    int per_step;
    int line;
};

/* One message of a step: every message has its own buffers (all are in
 * flight at once) and its own offset into the reference pattern. */
struct msg {
    const struct mclass *cls;
    size_t first;      /* index of element 0 in the pattern */
    float *send, *recv; /* allreduce and broadcast: recv only (in place) */
};

static int rank, nranks;

static void die_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die_usage(const char *fmt, ...)
{
    if (rank == 0) {
        va_list ap;
        va_start(ap, fmt);
        fputs("mixed_load_mpi: ", stderr);
        vfprintf(stderr, fmt, ap);
        fputs("\nusage: mixed_load_mpi -p PROFILE [-N NAME] [-n STEPS] [-w WARMUP]"
              " [-a rank0|mean|min|max] [-l LIB] [-J FILE]\n", stderr);
        va_end(ap);
    }
    MPI_Finalize();
    exit(2);
}

static int parse_size(const char *s, size_t *out)
{
    char *end;
    errno = 0;
    if (!isdigit((unsigned char)*s)) return -1;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno) return -1;
    int shift = 0;
    switch (*end) {
    case 'K': case 'k': shift = 10; end++; break;
    case 'M': case 'm': shift = 20; end++; break;
    case 'G': case 'g': shift = 30; end++; break;
    }
    if (*end == 'i' && end[1] == 'B') end += 2;
    else if (*end == 'B') end++;
    if (*end || (shift && v > (ULLONG_MAX >> shift))) return -1;
    *out = (size_t)(v << shift);
    return 0;
}

/* Parses the profile; every rank reads the same file. */
static struct mclass *read_profile(const char *path, int *n_p)
{
    FILE *f = fopen(path, "r");
    if (!f) die_usage("%s: %s", path, strerror(errno));
    struct mclass *cls = NULL;
    int n = 0, cap = 0, lineno = 0;
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        lineno++;
        char *hash = strchr(line, '#');
        if (hash) *hash = 0;
        char name[64], bytes_s[64], count_s[64], extra[8];
        int k = sscanf(line, "%63s %63s %63s %7s", name, bytes_s, count_s, extra);
        if (k <= 0) continue;
        if (k != 3)
            die_usage("%s:%d: want \"<collective> <bytes> <count per step>\"", path, lineno);
        int c;
        for (c = 0; c < C_NCOLL && strcmp(name, coll_names[c]); c++)
            ;
        if (c == C_NCOLL)
            die_usage("%s:%d: unknown collective '%s' (allreduce allgather broadcast "
                      "reduce_scatter alltoall)", path, lineno, name);
        size_t bytes;
        if (parse_size(bytes_s, &bytes) || bytes == 0)
            die_usage("%s:%d: bad size '%s'", path, lineno, bytes_s);
        char *end;
        long cnt = strtol(count_s, &end, 10);
        if (*end || cnt < 1 || cnt > 100000)
            die_usage("%s:%d: bad count per step '%s' (1..100000)", path, lineno, count_s);
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            cls = realloc(cls, sizeof *cls * cap);
            if (!cls) die_usage("out of memory");
        }
        struct mclass *m = &cls[n++];
        memset(m, 0, sizeof *m);
        m->coll = (enum coll)c;
        m->bytes = bytes;
        m->per_step = (int)cnt;
        m->line = lineno;
        if (c == C_ALLREDUCE || c == C_BROADCAST) {
            m->count = bytes / 4;
            m->eff_bytes = m->count * 4;
        } else {
            m->count = bytes / 4 / (size_t)nranks;
            m->eff_bytes = m->count * 4 * (size_t)nranks;
        }
        if (m->count == 0)
            die_usage("%s:%d: %s of %zu bytes is less than one float32 per rank (%d ranks)",
                      path, lineno, name, bytes, nranks);
        if (m->count * (size_t)nranks > INT_MAX)
            die_usage("%s:%d: %zu bytes is too large for MPI int counts", path, lineno, bytes);
        if (m->eff_bytes != bytes && rank == 0)
            fprintf(stderr, "mixed_load_mpi: %s:%d: %s %zu bytes rounded down to %zu "
                    "(a multiple of 4 * %d ranks)\n", path, lineno, name, bytes, m->eff_bytes,
                    nranks);
    }
    fclose(f);
    if (!n) die_usage("%s: no message classes", path);
    *n_p = n;
    return cls;
}

static float *alloc_floats(size_t n)
{
    size_t bytes = (n * sizeof(float) + 4095) / 4096 * 4096;
    float *p = aligned_alloc(4096, bytes ? bytes : 4096);
    if (!p) {
        fprintf(stderr, "mixed_load_mpi: rank %d: out of memory (%zu bytes)\n", rank, bytes);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return p;
}

/* What rank r contributes at pattern index i: small integers, so every sum
 * is exact in float32 and independent of the reduction order. */
static float val(int r, size_t i) { return (float)((r + 1) * (int)(i % 7 + 1)); }

/* elements of the send and receive buffers */
static void buf_elems(const struct mclass *c, size_t *send, size_t *recv)
{
    size_t n = c->count, N = c->count * (size_t)nranks;
    switch (c->coll) {
    case C_ALLREDUCE: case C_BROADCAST: *send = 0, *recv = n; break;
    case C_ALLGATHER: *send = n, *recv = N; break;
    case C_REDUCE_SCATTER: *send = N, *recv = n; break;
    default: *send = N, *recv = N; break;
    }
}

/* Fresh inputs, sentinels (-1) where outputs go. */
static void fill(struct msg *m)
{
    size_t ns, nr;
    buf_elems(m->cls, &ns, &nr);
    for (size_t i = 0; i < ns; i++) m->send[i] = val(rank, m->first + i);
    if (ns)
        for (size_t i = 0; i < nr; i++) m->recv[i] = -1;
    else /* in place: the input is the buffer */
        for (size_t i = 0; i < nr; i++) m->recv[i] = val(rank, m->first + i);
}

static void post(const struct msg *m, MPI_Request *req)
{
    int n = (int)m->cls->count;
    switch (m->cls->coll) {
    case C_ALLREDUCE: /* in place, as DDP reduces its buckets (and hcomm's mixed_load) */
        MPI_Iallreduce(MPI_IN_PLACE, m->recv, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, req);
        break;
    case C_BROADCAST:
        MPI_Ibcast(m->recv, n, MPI_FLOAT, 0, MPI_COMM_WORLD, req);
        break;
    case C_ALLGATHER:
        MPI_Iallgather(m->send, n, MPI_FLOAT, m->recv, n, MPI_FLOAT, MPI_COMM_WORLD, req);
        break;
    case C_REDUCE_SCATTER:
        MPI_Ireduce_scatter_block(m->send, m->recv, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, req);
        break;
    default:
        MPI_Ialltoall(m->send, n, MPI_FLOAT, m->recv, n, MPI_FLOAT, MPI_COMM_WORLD, req);
        break;
    }
}

/* Wrong elements of m on this rank: outputs against the exact result, and
 * the inputs of the out-of-place calls unchanged. */
static long check(const struct msg *m, int k)
{
    const struct mclass *c = m->cls;
    const float *r = m->recv, *s = m->send;
    size_t n = c->count, f = m->first, ns, nr;
    float tri = (float)nranks * (nranks + 1) / 2;
    long w = 0;
    switch (c->coll) {
    case C_ALLREDUCE:
        for (size_t i = 0; i < n; i++) w += r[i] != tri * (float)((f + i) % 7 + 1);
        break;
    case C_BROADCAST:
        for (size_t i = 0; i < n; i++) w += r[i] != val(0, f + i);
        break;
    case C_ALLGATHER:
        for (int q = 0; q < nranks; q++)
            for (size_t i = 0; i < n; i++) w += r[q * n + i] != val(q, f + i);
        break;
    case C_REDUCE_SCATTER:
        for (size_t i = 0; i < n; i++)
            w += r[i] != tri * (float)((f + rank * n + i) % 7 + 1);
        break;
    default:
        for (int q = 0; q < nranks; q++)
            for (size_t i = 0; i < n; i++) w += r[q * n + i] != val(q, f + rank * n + i);
        break;
    }
    buf_elems(c, &ns, &nr);
    for (size_t i = 0; i < ns; i++) w += s[i] != val(rank, f + i);
    if (w)
        fprintf(stderr, "mixed_load_mpi: rank %d: message %d (%s %zu bytes, profile line %d): "
                "%ld wrong elements\n", rank, k, coll_names[c->coll], c->eff_bytes, c->line, w);
    return w;
}

static void step(struct msg *msgs, int nmsgs, MPI_Request *reqs, MPI_Status *sts)
{
    for (int i = 0; i < nmsgs; i++) post(&msgs[i], &reqs[i]);
    MPI_Waitall(nmsgs, reqs, sts);
}

/* An untimed step on fresh inputs; the wrong elements of every rank. */
static long checked_step(struct msg *msgs, int nmsgs, MPI_Request *reqs, MPI_Status *sts)
{
    long wrong = 0, total;
    for (int i = 0; i < nmsgs; i++) fill(&msgs[i]);
    step(msgs, nmsgs, reqs, sts);
    for (int i = 0; i < nmsgs; i++) wrong += check(&msgs[i], i);
    MPI_Allreduce(&wrong, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    return total;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static const char *lib_flavour(void)
{
    char v[MPI_MAX_LIBRARY_VERSION_STRING];
    int len;
    MPI_Get_library_version(v, &len);
    if (strstr(v, "Open MPI")) return "openmpi";
    if (strstr(v, "MPICH")) return "mpich";
    return "mpi";
}

static void json_str(FILE *f, const char *key, const char *s)
{
    fprintf(f, "\"%s\":\"", key);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        if ((unsigned char)*s >= 0x20) fputc(*s, f);
    }
    fputc('"', f);
}

#define CHECK_EVERY 25 /* as hcomm's mixed_load: a checked step after every 25 timed ones */

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    const char *profile = NULL, *pname = NULL, *lib = NULL, *json = NULL, *avg = "max";
    long steps = 100, warmup = 10;
    int check_on = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            if (rank == 0)
                printf("usage: mixed_load_mpi -p PROFILE [-N NAME] [-n STEPS] [-w WARMUP]"
                       " [-a rank0|mean|min|max] [-c 0|1] [-l LIB] [-J FILE]\n");
            MPI_Finalize();
            return 0;
        }
        if (a[0] != '-' || !a[1] || a[2] || i + 1 >= argc)
            die_usage("bad argument '%s'", a);
        const char *v = argv[++i];
        char *end;
        switch (a[1]) {
        case 'p': profile = v; break;
        case 'N': pname = v; break;
        case 'l': lib = v; break;
        case 'J': json = v; break;
        case 'a': avg = v; break;
        case 'c':
            if (strcmp(v, "0") && strcmp(v, "1")) die_usage("-c wants 0 or 1, not '%s'", v);
            check_on = *v == '1';
            break;
        case 'n':
        case 'w': {
            long x = strtol(v, &end, 10);
            if (*end || x < (a[1] == 'n') || x > 10000000)
                die_usage("bad %s '%s'", a[1] == 'n' ? "step count" : "warm-up count", v);
            *(a[1] == 'n' ? &steps : &warmup) = x;
            break;
        }
        default: die_usage("unknown option '%s'", a);
        }
    }
    if (!profile) die_usage("-p PROFILE is required");
    /* -a as hcomm's tools: 0 rank0, 1 mean, 2 min, 3 max (default); names too */
    static const char *const avg_names[] = {"rank0", "mean", "min", "max"};
    int average = -1;
    for (int k = 0; k < 4; k++)
        if (!strcmp(avg, avg_names[k]) || (avg[0] == '0' + k && !avg[1])) average = k;
    if (average < 0) die_usage("-a wants rank0, mean, min or max (or 0..3), not '%s'", avg);
    if (!pname) { /* the file's name without .txt, as mixed_load names it */
        const char *b = strrchr(profile, '/');
        char *p = strdup(b ? b + 1 : profile);
        size_t len = strlen(p);
        if (len > 4 && !strcmp(p + len - 4, ".txt")) p[len - 4] = 0;
        pname = p;
    }
    if (!lib) lib = lib_flavour();

    int ncls, nmsgs = 0;
    struct mclass *cls = read_profile(profile, &ncls);
    size_t bytes_per_step = 0;
    for (int c = 0; c < ncls; c++) {
        bytes_per_step += cls[c].eff_bytes * (size_t)cls[c].per_step;
        nmsgs += cls[c].per_step;
    }
    struct msg *msgs = calloc((size_t)nmsgs, sizeof *msgs);
    MPI_Request *reqs = malloc(sizeof *reqs * (size_t)nmsgs);
    /* statuses rather than MPI_STATUSES_IGNORE: gcc 12 warns about MPICH's prototype */
    MPI_Status *sts = malloc(sizeof *sts * (size_t)nmsgs);
    double *t = malloc(sizeof *t * (size_t)(steps + 1));
    if (!msgs || !reqs || !sts || !t) die_usage("out of memory");
    for (int c = 0, k = 0; c < ncls; c++)
        for (int j = 0; j < cls[c].per_step; j++, k++) {
            size_t ns, nr;
            buf_elems(&cls[c], &ns, &nr);
            msgs[k].cls = &cls[c];
            msgs[k].first = (size_t)k;
            msgs[k].send = ns ? alloc_floats(ns) : NULL;
            msgs[k].recv = alloc_floats(nr);
            fill(&msgs[k]); /* defined inputs for the warm-up too */
        }

    long wrong = 0;
    for (long s = 0; s < warmup; s++) step(msgs, nmsgs, reqs, sts);
    if (check_on) wrong += checked_step(msgs, nmsgs, reqs, sts);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime(), t1, sum = 0;
    for (long s = 0; s < steps; s++) {
        step(msgs, nmsgs, reqs, sts);
        t1 = MPI_Wtime();
        t[s] = (t1 - t0) * 1e6;
        if (check_on && ((s + 1) % CHECK_EVERY == 0 || s == steps - 1)) {
            wrong += checked_step(msgs, nmsgs, reqs, sts);
            t1 = MPI_Wtime();
        }
        t0 = t1;
    }
    /* as hcomm's tools: this rank's mean in the last slot, every slot reduced
     * over the ranks (-a); the percentiles are those of the reduced steps */
    for (long s = 0; s < steps; s++) sum += t[s];
    t[steps] = sum / steps;
    if (average == 0)
        MPI_Bcast(t, (int)steps + 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    else
        MPI_Allreduce(MPI_IN_PLACE, t, (int)steps + 1, MPI_DOUBLE,
                      average == 1 ? MPI_SUM : average == 2 ? MPI_MIN : MPI_MAX, MPI_COMM_WORLD);
    if (average == 1)
        for (long s = 0; s <= steps; s++) t[s] /= nranks;

    if (rank == 0) {
        double mean = t[steps];
        qsort(t, (size_t)steps, sizeof *t, cmp_double);
        fprintf(stderr, "# mixed_load_mpi (%s): profile %s: %d classes, %d messages, %zu bytes "
                "per step, %d ranks, %ld steps after %ld warm-up, average %s\n",
                lib, pname, ncls, nmsgs, bytes_per_step, nranks, steps, warmup,
                avg_names[average]);
        for (int pass = 0; pass < 2; pass++) {
            FILE *f = pass ? (json ? fopen(json, "a") : NULL) : stdout;
            if (pass && json && !f) {
                fprintf(stderr, "mixed_load_mpi: %s: %s\n", json, strerror(errno));
                MPI_Abort(MPI_COMM_WORLD, 2);
            }
            if (!f) continue;
            fputs("{\"tool\":\"mixed_load\",", f);
            json_str(f, "lib", lib);
            fputc(',', f);
            json_str(f, "profile", pname);
            fprintf(f, ",\"nranks\":%d,\"steps\":%ld,\"step_us_mean\":%.3f,\"step_us_p50\":%.3f,"
                    "\"step_us_p99\":%.3f,\"bytes_per_step\":%zu,\"eff_GBps\":%.4f,",
                    nranks, steps, mean, t[steps / 2], t[(long)(steps * 0.99)], bytes_per_step,
                    bytes_per_step / mean / 1e3);
            if (check_on)
                fprintf(f, "\"wrong\":%ld,", wrong);
            else
                fputs("\"wrong\":null,", f);
            fprintf(f, "\"step_us_min\":%.3f,\"step_us_max\":%.3f,\"messages_per_step\":%d,"
                    "\"warmup\":%ld,\"blocking\":0,\"average\":\"%s\",\"mem\":\"malloc\",",
                    t[0], t[steps - 1], nmsgs, warmup, avg_names[average]);
            json_str(f, "profile_file", profile);
            fputs("}\n", f);
            if (pass) fclose(f);
            else fflush(f);
        }
    }
    for (int k = 0; k < nmsgs; k++) free(msgs[k].send), free(msgs[k].recv);
    free(msgs);
    free(cls);
    free(reqs);
    free(sts);
    free(t);
    MPI_Finalize();
    return wrong ? 1 : 0;
}
