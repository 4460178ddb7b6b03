/* Peer baseline for hcomm's mixed_load: a training-step-like mix of
 * non-blocking MPI collectives, measured the way mixed_load measures hcomm.
 *
 *   mpicc -O2 -o mixed_load_mpi bench/peers/mixed_load_mpi.c
 *   mpirun -n 2 ./mixed_load_mpi -p bench/profiles/mixed.txt [-P NAME] [-n STEPS]
 *          [-w WARMUP] [-a max|mean|min|rank0] [-l LIB] [-J FILE]
 *
 * Profile: one message class a line, "<collective> <bytes> <count per step>",
 * collective one of allreduce allgather broadcast reduce_scatter alltoall,
 * bytes with an optional K/M/G (binary) suffix, '#' starts a comment. bytes
 * is the nccl-tests size of the call: the buffer of allreduce and broadcast
 * (root 0), the gathered output of allgather, the input of reduce_scatter,
 * each rank's send buffer of alltoall (bytes / nranks to every rank); the
 * per-rank collectives round it down to a multiple of 4 * nranks.
 *
 * A step posts every message of the profile, in file order (a line's count
 * copies one after the other, each with its own buffers), as float32-sum
 * MPI_Iallreduce / MPI_Iallgather / MPI_Ibcast / MPI_Ireduce_scatter_block /
 * MPI_Ialltoall, then MPI_Waitall. WARMUP untimed steps, a barrier, then
 * STEPS steps back to back, each timed on its own with MPI_Wtime. A step's
 * time is reduced over the ranks (-a: the slowest rank by default); p50 is
 * the sorted element at STEPS/2, p99 the one at floor(0.99 STEPS).
 * eff_GBps = bytes_per_step / mean step time (1e9 bytes). After the timed
 * steps every output is checked against the exact result ("wrong", and
 * exit 1 when it is not 0).
 *
 * Rank 0 prints one JSON line on stdout (and appends it to -J FILE):
 *   {"tool":"mixed_load","lib":"openmpi","profile":"mixed","nranks":2,
 *    "steps":100,"step_us_mean":..,"step_us_p50":..,"step_us_p99":..,
 *    "bytes_per_step":..,"eff_GBps":..,"wrong":0, ...}
 * lib is -l LIB, else "openmpi" or "mpich" from MPI_Get_library_version.
 * Bad arguments or profile: a message on stderr, exit 2.
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
    float **send, **recv; /* per_step buffers each (broadcast: recv only) */
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
        fputs("\nusage: mixed_load_mpi -p PROFILE [-P NAME] [-n STEPS] [-w WARMUP]"
              " [-a max|mean|min|rank0] [-l LIB] [-J FILE]\n", stderr);
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
    char line[1024];
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
        size_t bytes, per;
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
            per = bytes / 4 / (size_t)nranks;
            m->count = per;
            m->eff_bytes = per * 4 * (size_t)nranks;
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

/* What rank r contributes at global element index i: small integers, so every
 * sum is exact in float32 and independent of the reduction order. */
static float val(int r, size_t i) { return (float)((r + 1) * (int)(i % 7 + 1)); }

static void setup(struct mclass *m)
{
    size_t n = m->count, N = m->count * (size_t)nranks;
    m->send = calloc((size_t)m->per_step, sizeof *m->send);
    m->recv = calloc((size_t)m->per_step, sizeof *m->recv);
    for (int k = 0; k < m->per_step; k++) {
        float *s = NULL, *r;
        switch (m->coll) {
        case C_ALLREDUCE:
            s = alloc_floats(n), r = alloc_floats(n);
            for (size_t i = 0; i < n; i++) s[i] = val(rank, i), r[i] = -1;
            break;
        case C_BROADCAST:
            r = alloc_floats(n);
            for (size_t i = 0; i < n; i++) r[i] = val(rank, i);
            break;
        case C_ALLGATHER:
            s = alloc_floats(n), r = alloc_floats(N);
            for (size_t i = 0; i < n; i++) s[i] = val(rank, i);
            for (size_t i = 0; i < N; i++) r[i] = -1;
            break;
        case C_REDUCE_SCATTER:
            s = alloc_floats(N), r = alloc_floats(n);
            for (size_t i = 0; i < N; i++) s[i] = val(rank, i);
            for (size_t i = 0; i < n; i++) r[i] = -1;
            break;
        default: /* C_ALLTOALL: block j goes to rank j */
            s = alloc_floats(N), r = alloc_floats(N);
            for (size_t i = 0; i < N; i++) s[i] = val(rank, i), r[i] = -1;
            break;
        }
        m->send[k] = s;
        m->recv[k] = r;
    }
}

static void post(const struct mclass *m, int k, MPI_Request *req)
{
    int n = (int)m->count;
    switch (m->coll) {
    case C_ALLREDUCE:
        MPI_Iallreduce(m->send[k], m->recv[k], n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, req);
        break;
    case C_BROADCAST:
        MPI_Ibcast(m->recv[k], n, MPI_FLOAT, 0, MPI_COMM_WORLD, req);
        break;
    case C_ALLGATHER:
        MPI_Iallgather(m->send[k], n, MPI_FLOAT, m->recv[k], n, MPI_FLOAT, MPI_COMM_WORLD, req);
        break;
    case C_REDUCE_SCATTER:
        MPI_Ireduce_scatter_block(m->send[k], m->recv[k], n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                                  req);
        break;
    default:
        MPI_Ialltoall(m->send[k], n, MPI_FLOAT, m->recv[k], n, MPI_FLOAT, MPI_COMM_WORLD, req);
        break;
    }
}

static long check(const struct mclass *m)
{
    long wrong = 0;
    size_t n = m->count;
    float tri = (float)nranks * (nranks + 1) / 2;
    for (int k = 0; k < m->per_step; k++) {
        const float *r = m->recv[k];
        long w = 0;
        switch (m->coll) {
        case C_ALLREDUCE:
            for (size_t i = 0; i < n; i++) w += r[i] != tri * (float)(i % 7 + 1);
            break;
        case C_BROADCAST:
            for (size_t i = 0; i < n; i++) w += r[i] != val(0, i);
            break;
        case C_ALLGATHER:
            for (int s = 0; s < nranks; s++)
                for (size_t i = 0; i < n; i++) w += r[s * n + i] != val(s, i);
            break;
        case C_REDUCE_SCATTER:
            for (size_t i = 0; i < n; i++)
                w += r[i] != tri * (float)((rank * n + i) % 7 + 1);
            break;
        default:
            for (int s = 0; s < nranks; s++)
                for (size_t i = 0; i < n; i++) w += r[s * n + i] != val(s, rank * n + i);
            break;
        }
        if (w && wrong == 0)
            fprintf(stderr, "mixed_load_mpi: rank %d: %s %zu bytes (profile line %d), copy %d: "
                    "%ld wrong elements\n", rank, coll_names[m->coll], m->bytes, m->line, k, w);
        wrong += w;
    }
    return wrong;
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

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    const char *profile = NULL, *pname = NULL, *lib = NULL, *json = NULL, *avg = "max";
    long steps = 100, warmup = 10;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            if (rank == 0)
                printf("usage: mixed_load_mpi -p PROFILE [-P NAME] [-n STEPS] [-w WARMUP]"
                       " [-a max|mean|min|rank0] [-l LIB] [-J FILE]\n");
            MPI_Finalize();
            return 0;
        }
        if (a[0] != '-' || !a[1] || a[2] || i + 1 >= argc)
            die_usage("bad argument '%s'", a);
        const char *v = argv[++i];
        char *end;
        switch (a[1]) {
        case 'p': profile = v; break;
        case 'P': pname = v; break;
        case 'l': lib = v; break;
        case 'J': json = v; break;
        case 'a': avg = v; break;
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
    MPI_Op avg_op = MPI_MAX;
    int avg_rank0 = 0, avg_mean = 0;
    if (!strcmp(avg, "min")) avg_op = MPI_MIN;
    else if (!strcmp(avg, "mean")) avg_op = MPI_SUM, avg_mean = 1;
    else if (!strcmp(avg, "rank0")) avg_rank0 = 1;
    else if (strcmp(avg, "max")) die_usage("-a wants max, mean, min or rank0, not '%s'", avg);
    if (!pname) { /* basename without its extension */
        const char *b = strrchr(profile, '/');
        b = b ? b + 1 : profile;
        char *p = strdup(b), *dot = strrchr(p, '.');
        if (dot && dot != p) *dot = 0;
        pname = p;
    }
    if (!lib) lib = lib_flavour();

    int ncls;
    struct mclass *cls = read_profile(profile, &ncls);
    size_t bytes_per_step = 0;
    int nreq = 0;
    for (int c = 0; c < ncls; c++) {
        setup(&cls[c]);
        bytes_per_step += cls[c].eff_bytes * (size_t)cls[c].per_step;
        nreq += cls[c].per_step;
    }
    MPI_Request *reqs = malloc(sizeof *reqs * (size_t)nreq);
    /* statuses rather than MPI_STATUSES_IGNORE: gcc 12 warns about MPICH's prototype */
    MPI_Status *sts = malloc(sizeof *sts * (size_t)nreq);
    double *t = malloc(sizeof *t * (size_t)steps);
    if (!reqs || !sts || !t) die_usage("out of memory");

    for (long s = -warmup; s < steps; s++) {
        if (s == 0) MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        int q = 0;
        for (int c = 0; c < ncls; c++)
            for (int k = 0; k < cls[c].per_step; k++) post(&cls[c], k, &reqs[q++]);
        MPI_Waitall(nreq, reqs, sts);
        if (s >= 0) t[s] = (MPI_Wtime() - t0) * 1e6;
    }

    if (avg_rank0)
        MPI_Bcast(t, (int)steps, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    else
        MPI_Allreduce(MPI_IN_PLACE, t, (int)steps, MPI_DOUBLE, avg_op, MPI_COMM_WORLD);
    if (avg_mean)
        for (long s = 0; s < steps; s++) t[s] /= nranks;

    long wrong = 0, wrong_all = 0;
    for (int c = 0; c < ncls; c++) wrong += check(&cls[c]);
    MPI_Reduce(&wrong, &wrong_all, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);

    if (rank == 0) {
        double sum = 0;
        for (long s = 0; s < steps; s++) sum += t[s];
        qsort(t, (size_t)steps, sizeof *t, cmp_double);
        double mean = sum / steps;
        fprintf(stderr, "# mixed_load_mpi (%s): profile %s: %d classes, %d messages, %zu bytes "
                "per step, %d ranks, %ld steps after %ld warm-up, step time over ranks: %s\n",
                lib, pname,
                ncls, nreq, bytes_per_step, nranks, steps, warmup, avg);
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
            fprintf(f, ",\"nranks\":%d,\"steps\":%ld,\"warmup\":%ld,\"step_us_mean\":%.3f,"
                    "\"step_us_p50\":%.3f,\"step_us_p99\":%.3f,\"step_us_min\":%.3f,"
                    "\"step_us_max\":%.3f,\"bytes_per_step\":%zu,\"messages_per_step\":%d,"
                    "\"eff_GBps\":%.4f,\"dtype\":\"float32\",\"op\":\"sum\",",
                    nranks, steps, warmup, mean, t[steps / 2], t[(long)(steps * 0.99)], t[0],
                    t[steps - 1], bytes_per_step, nreq, bytes_per_step / mean / 1e3);
            json_str(f, "average", avg);
            fprintf(f, ",\"wrong\":%ld}\n", wrong_all);
            if (pass) fclose(f);
            else fflush(f);
        }
    }
    for (int c = 0; c < ncls; c++) {
        for (int k = 0; k < cls[c].per_step; k++) free(cls[c].send[k]), free(cls[c].recv[k]);
        free(cls[c].send);
        free(cls[c].recv);
    }
    free(cls);
    free(reqs);
    free(sts);
    free(t);
    MPI_Bcast(&wrong_all, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    return wrong_all ? 1 : 0;
}
