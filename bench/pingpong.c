/*
 * pingpong: one-way latency between ranks 0 and 1 with blocking
 * hcomm_send/hcomm_recv, measured like the peers' mpi_bench.c so the
 * columns compare directly: bytes, mean one-way latency (half the round
 * trip), its median and 99th percentile, and bytes / mean latency in MB/s.
 *
 * Rank 0 sends sbuf and receives the echo into a separate rbuf; rank 1
 * echoes what it received from its one buffer. Every data check happens
 * outside the timed region. Before each iteration rank 0 stamps the
 * iteration number into sbuf (the whole buffer when it is small, else one
 * word per KiB and the last word) and checks the stamps of the echo after
 * it; at the end of a size both ranks compare the whole buffer with the
 * last iteration's pattern. So a stale, partial or corrupted transfer fails
 * the run, at the cost of a few stores per KiB between iterations.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "bench_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PP_STAMP_STRIDE 1024
#define PP_SMALL 16 /* below this every byte carries the iteration */

static uint8_t pp_base_byte(size_t n, size_t k)
{
    return (uint8_t)(k * 0x9du + (k >> 9) + n * 7 + 0x5a);
}

static uint64_t pp_stamp_word(size_t n, size_t off, uint64_t iter)
{
    return (iter + 1) * 0x9e3779b97f4a7c15ull ^ ((uint64_t)off << 20) ^ n;
}

/* Writes the parts of the pattern that change with the iteration. */
static void pp_stamp(uint8_t *buf, size_t n, uint64_t iter)
{
    uint64_t w;

    if (n < PP_SMALL) {
        for (size_t k = 0; k < n; k++)
            buf[k] = pp_base_byte(n, k) ^ (uint8_t)(iter * 0x35 + 0x11);
        return;
    }
    for (size_t off = 0; off + 8 <= n; off += PP_STAMP_STRIDE) {
        w = pp_stamp_word(n, off, iter);
        memcpy(buf + off, &w, 8);
    }
    w = pp_stamp_word(n, n - 8, iter);
    memcpy(buf + n - 8, &w, 8);
}

/* The whole pattern of iteration iter. */
static void pp_fill(uint8_t *buf, size_t n, uint64_t iter)
{
    for (size_t k = 0; k < n; k++)
        buf[k] = pp_base_byte(n, k);
    pp_stamp(buf, n, iter);
}

/* Bytes of got that differ from want, comparing only the stamped words
 * (stamps_only) or everything; describes the first one on stderr. */
static size_t pp_compare(const uint8_t *got, const uint8_t *want, size_t n, int stamps_only,
                         long iter)
{
    size_t wrong = 0, first = 0;

    if (stamps_only && n >= PP_SMALL) {
        for (size_t off = 0; off + 8 <= n; off += PP_STAMP_STRIDE)
            if (memcmp(got + off, want + off, 8) && !wrong++) first = off;
        if (memcmp(got + n - 8, want + n - 8, 8) && !wrong++) first = n - 8;
    } else if (memcmp(got, want, n)) {
        for (size_t k = 0; k < n; k++)
            if (got[k] != want[k] && !wrong++) first = k;
    }
    if (wrong)
        fprintf(stderr,
                "rank %d: pingpong %zu bytes, iteration %ld: %zu %s wrong, first at byte %zu "
                "(0x%02x, expected 0x%02x)\n",
                hb_rank, n, iter, wrong, stamps_only ? "stamped words" : "bytes", first, got[first],
                want[first]);
    return wrong;
}

static int pp_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void pp_print_row(const struct hb_opts *o, size_t n, double *lat, int iters)
{
    double sum = 0, mean;

    for (int i = 0; i < iters; i++)
        sum += lat[i];
    mean = sum / iters;
    qsort(lat, (size_t)iters, sizeof(double), pp_cmp_double);
    if (o->csv)
        printf("%zu,%.4f,%.4f,%.4f,%.2f\n", n, mean, lat[iters / 2], lat[(int)(iters * 0.99)],
               mean > 0 ? (double)n / mean : 0);
    else
        printf("  %10zu %12.3f %10.3f %10.3f %12.1f\n", n, mean, lat[iters / 2],
               lat[(int)(iters * 0.99)], mean > 0 ? (double)n / mean : 0);
    fflush(stdout);
}

/* One size; returns the number of wrong bytes this rank saw. */
/* Messages go over the world communicator, as in the peers' benchmark;
 * pair (ranks 0 and 1) only synchronizes the start of each size. */
static size_t pp_run_size(const struct hb_opts *o, hcomm_comm_t pair, size_t n, uint8_t *sbuf,
                          uint8_t *rbuf, uint8_t *want, double *lat)
{
    hcomm_comm_t comm = hcomm_comm_world();
    int iters = o->iters >= 0 ? o->iters : hb_iters_for(n, 10000, 200);
    int warmup = o->warmup >= 0 ? o->warmup : iters / 10 + 1;
    long total = (long)warmup + iters;
    size_t wrong = 0;

    if (hb_rank == 0) pp_fill(sbuf, n, 0);
    hb_check(hcomm_barrier(pair), "hcomm_barrier");
    for (long i = 0; i < total; i++) {
        if (hb_rank == 0) {
            uint64_t t0, t1;

            pp_stamp(sbuf, n, (uint64_t)i);
            t0 = hb_now_ns();
            hb_check(hcomm_send(sbuf, n, HCOMM_UINT8, 1, 0, comm), "hcomm_send");
            hb_check(hcomm_recv(rbuf, n, HCOMM_UINT8, 1, 0, comm), "hcomm_recv");
            t1 = hb_now_ns();
            if (i >= warmup) lat[i - warmup] = (double)(t1 - t0) / 2e3;
            wrong += pp_compare(rbuf, sbuf, n, 1, i);
        } else {
            hb_check(hcomm_recv(rbuf, n, HCOMM_UINT8, 0, 0, comm), "hcomm_recv");
            hb_check(hcomm_send(rbuf, n, HCOMM_UINT8, 0, 0, comm), "hcomm_send");
        }
    }
    if (n) {
        /* sbuf holds exactly what rank 0 sent last */
        if (hb_rank == 0) {
            wrong += pp_compare(rbuf, sbuf, n, 0, total - 1);
        } else {
            pp_fill(want, n, (uint64_t)(total - 1));
            wrong += pp_compare(rbuf, want, n, 0, total - 1);
        }
    }
    if (hb_rank == 0) pp_print_row(o, n, lat, iters);
    return wrong;
}

int main(int argc, char **argv)
{
    struct hb_opts o;
    hcomm_comm_t pair;
    uint8_t *sbuf = NULL, *rbuf = NULL, *want = NULL;
    double *lat = NULL;
    size_t n, wrong = 0, bytes;
    int max_iters;

    hb_init(&argc, &argv);
    hb_opts_parse(argc, argv, 0, &o);
    if (hb_nranks < 2) {
        if (hb_rank == 0)
            fprintf(stderr,
                    "pingpong: needs 2 ranks, this job has %d "
                    "(run: hcommrun -n 2 pingpong)\n",
                    hb_nranks);
        hcomm_finalize();
        return 2;
    }
    /* only ranks 0 and 1 take part; the others go straight to
     * hcomm_finalize(), which waits for every rank without a busy poll that
     * would steal a core from the pair */
    hb_check(
        hcomm_comm_split(hcomm_comm_world(), hb_rank < 2 ? 0 : HCOMM_UNDEFINED, hb_rank, &pair),
        "hcomm_comm_split");
    if (hb_rank >= 2) {
        hb_check(hcomm_finalize(), "hcomm_finalize");
        return 0;
    }

    bytes = o.max_bytes;
    if (hb_rank == 0) {
        sbuf = hb_buf_alloc(bytes, o.mem_hcomm);
        max_iters = o.iters >= 0 ? o.iters : 10000;
        if (!(lat = malloc(sizeof(double) * (size_t)max_iters))) {
            fprintf(stderr, "rank 0: out of memory for %d latencies\n", max_iters);
            return 1;
        }
        if (o.csv)
            printf("bytes,lat_us,p50_us,p99_us,MB/s\n");
        else
            printf("# pingpong: %s\n# ranks %d  mem %s\n# %10s %12s %10s %10s %12s\n",
                   hcomm_version_string(), hb_nranks, o.mem_hcomm ? "hcomm" : "malloc", "bytes",
                   "lat_us", "p50_us", "p99_us", "MB/s");
    } else {
        want = malloc(bytes ? bytes : 1);
        if (!want) {
            fprintf(stderr, "rank 1: out of memory for a %zu-byte reference\n", bytes);
            return 1;
        }
    }
    rbuf = hb_buf_alloc(bytes, o.mem_hcomm);

    n = o.min_bytes;
    do {
        wrong += pp_run_size(&o, pair, n, sbuf, rbuf, want, lat);
    } while (hb_size_next(&o, &n));

    if (wrong)
        fprintf(stderr, "rank %d: pingpong: %zu wrong bytes or words received: FAILED\n", hb_rank,
                wrong);
    hb_buf_free(sbuf, bytes, o.mem_hcomm);
    hb_buf_free(rbuf, bytes, o.mem_hcomm);
    free(want);
    free(lat);
    hb_check(hcomm_comm_free(pair), "hcomm_comm_free");
    hb_check(hcomm_finalize(), "hcomm_finalize");
    return wrong ? 1 : 0;
}
