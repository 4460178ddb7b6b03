/*
 * lanes_lat: the latency of small allreduces on one communicator while a
 * large allreduce runs in a loop on another (docs/lanes.md). Comm A is the
 * world, comm B a split of it with the same ranks.
 *
 *   lanes_lat [-a A_BYTES] [-b B_BYTES] [-n ITERS] [-w WARMUP] [-m malloc|hcomm|device]
 *
 * Phase 1 times ITERS blocking float32 sum allreduces of B_BYTES on B with
 * nothing else running; phase 2 the same while A keeps one non-blocking
 * float32 sum allreduce of A_BYTES in flight (reposted as soon as it
 * completes, between B's calls, so A's bytes and B's frames meet on the
 * same peers). At the end the ranks agree on how many A allreduces to run
 * (each posts the same number, the engine matching them in issue order)
 * and wait for them. Every B result and every A result is checked (inputs
 * rank + 1, so the sums are exact in float32); a wrong element fails the
 * run. Rank 0 prints one line of key=value pairs for scripts
 * (tests/netns/bench_lanes.sh): B's p50/p99/mean in microseconds alone and
 * beside A, and A's allreduces completed during phase 2 and their bus
 * bandwidth. What lanes does is HCOMM_LANES's business: this tool only
 * reports it. -m picks the buffers as the other tools do (malloc, the
 * pool, or device memory of the active GPU backend: filled and checked
 * through hcomm_memcpy; during phase 2 only A's first and last elements
 * are checked, so that checks do not load the host). Public API only.
 */
#include "bench_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void stats(uint64_t *t, int n, double *p50, double *p99, double *mean)
{
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += (double)t[i];
    qsort(t, (size_t)n, sizeof(*t), cmp_u64);
    *p50 = (double)t[n / 2] * 1e-3;
    *p99 = (double)t[(size_t)((double)(n - 1) * 0.99)] * 1e-3;
    *mean = sum / n * 1e-3;
}

static int usage(const char *prog, const char *why)
{
    FILE *f = why ? stderr : stdout;
    if (why) fprintf(f, "%s: %s\n", prog, why);
    fprintf(f,
            "usage: %s [-a A_BYTES (16M)] [-b B_BYTES (8)] [-n ITERS (2000)] [-w WARMUP (200)]\n"
            "       [-m malloc|hcomm|device (malloc)]\n",
            prog);
    return why ? 2 : 0;
}

static int mem; /* -m: 0 malloc, 1 the pool, HB_MEM_DEVICE */

/* A result of n floats from ranks with inputs rank + 1 (device memory: read
 * through mirror, whole, or its first and last elements when stride is 0). */
static int check(const float *out, float *mirror, size_t n, int nranks, size_t stride)
{
    float want = (float)nranks * (float)(nranks + 1) / 2.0f;
    if (mem == HB_MEM_DEVICE && stride == 0) {
        float ends[2];
        hb_check(hcomm_memcpy(&ends[0], out, 4), "hcomm_memcpy");
        hb_check(hcomm_memcpy(&ends[1], out + n - 1, 4), "hcomm_memcpy");
        return ends[0] == want && ends[1] == want;
    }
    if (mem == HB_MEM_DEVICE) {
        hb_check(hcomm_memcpy(mirror, out, n * 4), "hcomm_memcpy");
        out = mirror;
    }
    for (size_t i = 0; i < n; i += stride ? stride : 1)
        if (out[i] != want) return 0;
    return n == 0 || out[n - 1] == want;
}

/* n floats of value v into buf (device memory: through the host). */
static void fill(float *buf, size_t n, float v)
{
    float *h = mem == HB_MEM_DEVICE ? malloc(n * 4) : buf;
    if (!h) {
        fprintf(stderr, "lanes_lat: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++)
        h[i] = v;
    if (mem == HB_MEM_DEVICE) {
        hb_check(hcomm_memcpy(buf, h, n * 4), "hcomm_memcpy");
        free(h);
    }
}

int main(int argc, char **argv)
{
    size_t a_bytes = (size_t)16 << 20, b_bytes = 8;
    int iters = 2000, warmup = 200;
    for (int i = 1; i < argc; i += 2) { /* options and their values, in pairs */
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) return usage(argv[0], NULL);
        if (!v) return usage(argv[0], "an option lacks its value");
        if (!strcmp(o, "-a"))
            a_bytes = strtoull(v, NULL, 0);
        else if (!strcmp(o, "-b"))
            b_bytes = strtoull(v, NULL, 0);
        else if (!strcmp(o, "-n"))
            iters = atoi(v);
        else if (!strcmp(o, "-w"))
            warmup = atoi(v);
        else if (!strcmp(o, "-m") && (!strcmp(v, "malloc") || !strcmp(v, "hcomm") ||
                                      !strcmp(v, "device")))
            mem = !strcmp(v, "device") ? HB_MEM_DEVICE : !strcmp(v, "hcomm");
        else if (!strcmp(o, "-m"))
            return usage(argv[0], "-m: malloc, hcomm or device");
        else
            return usage(argv[0], "unknown option");
    }
    if (a_bytes < 4 || b_bytes < 4 || a_bytes % 4 || b_bytes % 4)
        return usage(argv[0], "-a and -b must be multiples of 4 bytes (float32), at least 4");
    if (iters < 10 || warmup < 0) return usage(argv[0], "-n must be >= 10, -w >= 0");
    hb_check(hcomm_init(NULL, NULL), "hcomm_init");
    hcomm_comm_t a = hcomm_comm_world(), b;
    int me = hcomm_comm_rank(a), n = hcomm_comm_size(a);
    hb_rank = me;
    hb_check(hcomm_comm_split(a, 0, me, &b), "hcomm_comm_split");
    size_t na = a_bytes / 4, nb = b_bytes / 4;
    float *ain = hb_buf_alloc(a_bytes, mem), *aout = hb_buf_alloc(a_bytes, mem);
    float *bin = hb_buf_alloc(b_bytes, mem), *bout = hb_buf_alloc(b_bytes, mem);
    /* host mirrors of device results */
    float *amir = mem == HB_MEM_DEVICE ? malloc(a_bytes) : NULL;
    float *bmir = mem == HB_MEM_DEVICE ? malloc(b_bytes) : NULL;
    uint64_t *t_alone = malloc(sizeof(uint64_t) * (size_t)iters);
    uint64_t *t_busy = malloc(sizeof(uint64_t) * (size_t)iters);
    if (!t_alone || !t_busy || (mem == HB_MEM_DEVICE && (!amir || !bmir))) {
        fprintf(stderr, "rank %d: out of memory\n", me);
        return 1;
    }
    fill(ain, na, (float)(me + 1));
    fill(bin, nb, (float)(me + 1));
    int bad = 0;
    /* Warm-up: connections, pools, algorithm choices, A's first run. */
    for (int i = 0; i < warmup; i++)
        hb_check(hcomm_allreduce(bin, bout, nb, HCOMM_FLOAT32, HCOMM_SUM, b), "warm-up on B");
    hb_check(hcomm_allreduce(ain, aout, na, HCOMM_FLOAT32, HCOMM_SUM, a), "warm-up on A");
    bad += !check(aout, amir, na, n, 1);
    /* Phase 1: B alone. */
    hb_check(hcomm_barrier(a), "barrier");
    for (int i = 0; i < iters; i++) {
        uint64_t t0 = hb_now_ns();
        hb_check(hcomm_allreduce(bin, bout, nb, HCOMM_FLOAT32, HCOMM_SUM, b), "allreduce on B");
        t_alone[i] = hb_now_ns() - t0;
        bad += !check(bout, bmir, nb, n, 1);
    }
    /* Phase 2: B beside A's loop. */
    hb_check(hcomm_barrier(a), "barrier");
    hcomm_request_t ra;
    int64_t posted = 1, done = 0, done_in_phase;
    hb_check(hcomm_iallreduce(ain, aout, na, HCOMM_FLOAT32, HCOMM_SUM, a, &ra), "iallreduce on A");
    uint64_t p0 = hb_now_ns();
    for (int i = 0; i < iters; i++) {
        int d = 0;
        hb_check(hcomm_test(ra, &d), "test on A");
        if (d) {
            done++;
            bad += !check(aout, amir, na, n, mem == HB_MEM_DEVICE ? 0 : 4099);
            hb_check(hcomm_iallreduce(ain, aout, na, HCOMM_FLOAT32, HCOMM_SUM, a, &ra),
                     "iallreduce on A");
            posted++;
        }
        uint64_t t0 = hb_now_ns();
        hb_check(hcomm_allreduce(bin, bout, nb, HCOMM_FLOAT32, HCOMM_SUM, b), "allreduce on B");
        t_busy[i] = hb_now_ns() - t0;
        bad += !check(bout, bmir, nb, n, 1);
    }
    double phase_s = (double)(hb_now_ns() - p0) * 1e-9;
    done_in_phase = done;
    /* Every rank runs the same number of A allreduces. */
    int64_t most = 0;
    hb_check(hcomm_allreduce(&posted, &most, 1, HCOMM_INT64, HCOMM_MAX, b),
             "agreeing on A's count");
    hb_check(hcomm_wait(ra), "wait on A");
    bad += !check(aout, amir, na, n, 1);
    for (; posted < most; posted++) {
        hb_check(hcomm_allreduce(ain, aout, na, HCOMM_FLOAT32, HCOMM_SUM, a), "allreduce on A");
        bad += !check(aout, amir, na, n, 1);
    }
    int64_t bad64 = bad, bad_all = 0;
    hb_check(hcomm_allreduce(&bad64, &bad_all, 1, HCOMM_INT64, HCOMM_SUM, a), "agreeing on checks");
    double a50, a99, amean, b50, b99, bmean;
    stats(t_alone, iters, &a50, &a99, &amean);
    stats(t_busy, iters, &b50, &b99, &bmean);
    double busbw = (double)done_in_phase * (double)a_bytes * 2.0 * (n - 1) / n / phase_s * 1e-9;
    if (me == 0) {
        const char *lanes = getenv("HCOMM_LANES");
        printf("# lanes_lat: %d ranks, B %zu B x %d, A %zu B in a loop, %s buffers; HCOMM_LANES=%s\n",
               n, b_bytes, iters, a_bytes, hb_mem_name(mem), lanes ? lanes : "(unset: auto)");
        printf("lanes=%s ranks=%d b_bytes=%zu a_bytes=%zu iters=%d alone_p50_us=%.2f "
               "alone_p99_us=%.2f alone_mean_us=%.2f busy_p50_us=%.2f busy_p99_us=%.2f "
               "busy_mean_us=%.2f a_done=%lld a_busbw_gbs=%.3f wrong=%lld\n",
               lanes ? lanes : "auto", n, b_bytes, a_bytes, iters, a50, a99, amean, b50, b99, bmean,
               (long long)done_in_phase, busbw, (long long)bad_all);
    }
    hb_check(hcomm_comm_free(b), "hcomm_comm_free");
    hb_buf_free(ain, a_bytes, mem);
    hb_buf_free(aout, a_bytes, mem);
    hb_buf_free(bin, b_bytes, mem);
    hb_buf_free(bout, b_bytes, mem);
    free(amir);
    free(bmir);
    free(t_alone);
    free(t_busy);
    hb_check(hcomm_finalize(), "hcomm_finalize");
    if (bad_all)
        fprintf(stderr, "rank %d: %lld wrong results in the job\n", me, (long long)bad_all);
    return bad_all ? 1 : 0;
}
