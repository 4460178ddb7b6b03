/*
 * pingpong: point-to-point between ranks 0 and 1, in three modes.
 *
 * -M lat (default): one-way latency with blocking hcomm_send/hcomm_recv,
 * measured like the peers' mpi_bench.c so the columns compare directly:
 * bytes, mean one-way latency (half the round trip), its median and 99th
 * percentile, and bytes / mean latency in MB/s.
 *
 * -M bw / -M bibw: osu_bw's and osu_bibw's bandwidth, a window of
 * non-blocking messages in flight (pp_run_bw()).
 *
 * Latency mode:
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

/* -m device: the device buffers the calls get; sbuf and rbuf are then host
 * copies that the stamps and checks use, moved with hcomm_memcpy outside
 * the timed region. */
static uint8_t *pp_dsbuf, *pp_drbuf;

static uint8_t *pp_s(uint8_t *sbuf)
{
    return pp_dsbuf ? pp_dsbuf : sbuf;
}

static uint8_t *pp_r(uint8_t *rbuf)
{
    return pp_drbuf ? pp_drbuf : rbuf;
}

/* host copy to device (push) or back (pull) */
static void pp_move(uint8_t *host, uint8_t *dev, size_t n, int push)
{
    if (!dev || !n) return;
    hb_check(push ? hcomm_memcpy(dev, host, n) : hcomm_memcpy(host, dev, n), "hcomm_memcpy");
}

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
        /* name the first wrong byte of the first wrong word */
        while (wrong && got[first] == want[first])
            first++;
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

/* One row: mean, percentiles and bandwidth of a size. lat holds the
 * samples: one-way latencies (lat mode) or window times (bw modes), divided
 * by the messages of a window before the statistics. */
struct pp_row {
    size_t bytes;
    int iters;
    double lat_us; /* lat: mean one-way latency; bw: mean window time / messages */
    struct hb_stats s;
    double mbps;
    int64_t wrong; /* both ranks */
};

static int pp_msgs_per_sample(const struct hb_opts *o)
{
    return o->mode == HB_PP_LAT ? 1 : (o->mode == HB_PP_BW ? o->window : 2 * o->window);
}

static const char *pp_mode_name(int mode)
{
    return mode == HB_PP_LAT ? "lat" : (mode == HB_PP_BW ? "bw" : "bibw");
}

static void pp_print_header(const struct hb_opts *o)
{
    const char *cols[4] = {"lat_us", "p50_us", "p99_us", "MB/s"};

    if (o->mode != HB_PP_LAT) {
        cols[0] = "msg_us";
        cols[1] = "msg_p50_us";
        cols[2] = "msg_p99_us";
    }
    if (o->csv) {
        printf("bytes,%s,%s,%s,%s\n", cols[0], cols[1], cols[2], cols[3]);
        return;
    }
    printf("# pingpong: %s\n# ranks %d  mem %s  mode %s", hcomm_version_string(), hb_nranks,
           hb_mem_name(o->mem_hcomm), pp_mode_name(o->mode));
    if (o->mode != HB_PP_LAT)
        printf("  window %d: msg_us (mean, p50, p99) = window time / %d messages, MB/s = %d x "
               "bytes / window time",
               o->window, pp_msgs_per_sample(o), pp_msgs_per_sample(o));
    printf("\n# %10s %12s %10s %10s %12s\n", "bytes", cols[0], cols[1], cols[2], cols[3]);
}

static void pp_print_row(const struct hb_opts *o, const struct pp_row *r, FILE *json)
{
    struct hb_json j;

    if (o->csv)
        printf("%zu,%.4f,%.4f,%.4f,%.2f\n", r->bytes, r->lat_us, r->s.p50, r->s.p99, r->mbps);
    else
        printf("  %10zu %12.3f %10.3f %10.3f %12.1f\n", r->bytes, r->lat_us, r->s.p50, r->s.p99,
               r->mbps);
    fflush(stdout);
    hb_json_begin(&j);
    hb_json_str(&j, "tool", "pingpong");
    hb_json_str(&j, "lib", "hcomm");
    hb_json_str(&j, "mode", pp_mode_name(o->mode));
    hb_json_int(&j, "bytes", (long long)r->bytes);
    hb_json_num(&j, "lat_us", r->lat_us);
    hb_json_num(&j, "p50_us", r->s.p50);
    hb_json_num(&j, "p99_us", r->s.p99);
    hb_json_num(&j, "MBps", r->mbps);
    hb_json_num(&j, "min_us", r->s.min);
    hb_json_num(&j, "max_us", r->s.max);
    hb_json_int(&j, "window", o->mode == HB_PP_LAT ? 1 : o->window);
    hb_json_int(&j, "iters", r->iters);
    hb_json_int(&j, "wrong", (long long)r->wrong);
    hb_json_str(&j, "mem", hb_mem_name(o->mem_hcomm));
    hb_json_write(&j, json);
}

/* Fills the row from the samples of rank 0 (the others pass their own,
 * unused) and the wrong count of this rank; every rank of pair calls it. */
static void pp_finish_row(const struct hb_opts *o, hcomm_comm_t pair, size_t n, double *lat,
                          int iters, size_t wrong, FILE *json)
{
    struct pp_row r = {.bytes = n, .iters = iters};
    int64_t mine = (int64_t)wrong;
    int msgs = pp_msgs_per_sample(o);

    hb_check(hcomm_allreduce(&mine, &r.wrong, 1, HCOMM_INT64, HCOMM_SUM, pair), "hcomm_allreduce");
    if (hb_rank != 0) return;
    /* a sample times msgs messages (a window): every column is per message,
     * so that min <= lat <= max and min <= p50 <= p99 <= max */
    for (int i = 0; i < iters; i++)
        lat[i] /= msgs;
    hb_stats_compute(lat, (size_t)iters, &r.s);
    r.lat_us = r.s.mean;
    r.mbps = r.s.mean > 0 ? (double)n / r.s.mean : 0;
    pp_print_row(o, &r, json);
}

/* One size of -M lat; returns the number of wrong bytes this rank saw. */
/* Messages go over the world communicator, as in the peers' benchmark;
 * pair (ranks 0 and 1) only synchronizes the start of each size. */
static size_t pp_run_lat(const struct hb_opts *o, hcomm_comm_t pair, size_t n, uint8_t *sbuf,
                         uint8_t *rbuf, uint8_t *want, double *lat, FILE *json)
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
            pp_move(sbuf, pp_dsbuf, n, 1);
            t0 = hb_now_ns();
            hb_check(hcomm_send(pp_s(sbuf), n, HCOMM_UINT8, 1, 0, comm), "hcomm_send");
            hb_check(hcomm_recv(pp_r(rbuf), n, HCOMM_UINT8, 1, 0, comm), "hcomm_recv");
            t1 = hb_now_ns();
            if (i >= warmup) lat[i - warmup] = (double)(t1 - t0) / 2e3;
            pp_move(rbuf, pp_drbuf, n, 0);
            wrong += pp_compare(rbuf, sbuf, n, 1, i);
        } else {
            hb_check(hcomm_recv(pp_r(rbuf), n, HCOMM_UINT8, 0, 0, comm), "hcomm_recv");
            hb_check(hcomm_send(pp_r(rbuf), n, HCOMM_UINT8, 0, 0, comm), "hcomm_send");
        }
    }
    if (hb_rank != 0) pp_move(rbuf, pp_drbuf, n, 0);
    if (n) {
        /* sbuf holds exactly what rank 0 sent last */
        if (hb_rank == 0) {
            wrong += pp_compare(rbuf, sbuf, n, 0, total - 1);
        } else {
            pp_fill(want, n, (uint64_t)(total - 1));
            wrong += pp_compare(rbuf, want, n, 0, total - 1);
        }
    }
    pp_finish_row(o, pair, n, lat, iters, wrong, json);
    return wrong;
}

/*
 * One size of -M bw or bibw, osu_bw's and osu_bibw's method. bw: rank 0
 * posts a window of hcomm_isend, rank 1 a window of hcomm_irecv; both wait
 * for all, then rank 1 sends a 1-byte ack that rank 0 receives. bibw: both
 * ranks post a window of receives and a window of sends and wait for all.
 * Rank 0 times each window (a sample). The messages of a window share one
 * buffer, as in OSU: the sender stamps it with the window number before the
 * window, the receiver checks the stamps after it (outside the timed
 * region), and the whole buffer after the last window.
 */
static size_t pp_run_bw(const struct hb_opts *o, hcomm_comm_t pair, size_t n, uint8_t *sbuf,
                        uint8_t *rbuf, uint8_t *want, hcomm_request_t *reqs, double *lat,
                        FILE *json)
{
    hcomm_comm_t comm = hcomm_comm_world();
    int iters = o->iters >= 0 ? o->iters : (n <= 8192 ? 100 : 20);
    int warmup = o->warmup >= 0 ? o->warmup : (n <= 8192 ? 10 : 2);
    int bibw = o->mode == HB_PP_BIBW, w = o->window, peer = 1 - hb_rank;
    int sends = bibw || hb_rank == 0, recvs = bibw || hb_rank == 1, nreq = bibw ? 2 * w : w;
    long total = (long)warmup + iters;
    size_t wrong = 0;
    uint8_t ack = 0;

    pp_fill(sbuf, n, 0);
    pp_fill(want, n, 0);
    hb_check(hcomm_barrier(pair), "hcomm_barrier");
    for (long i = 0; i < total; i++) {
        uint64_t t0, t1;

        if (sends) pp_stamp(sbuf, n, (uint64_t)i);
        if (sends) pp_move(sbuf, pp_dsbuf, n, 1);
        if (recvs) pp_stamp(want, n, (uint64_t)i);
        t0 = hb_now_ns();
        if (recvs)
            for (int k = 0; k < w; k++)
                hb_check(hcomm_irecv(pp_r(rbuf), n, HCOMM_UINT8, peer, 1, comm, &reqs[k]),
                         "hcomm_irecv");
        if (sends)
            for (int k = 0; k < w; k++)
                hb_check(
                    hcomm_isend(pp_s(sbuf), n, HCOMM_UINT8, peer, 1, comm, &reqs[nreq - w + k]),
                    "hcomm_isend");
        for (int k = 0; k < nreq; k++)
            hb_check(hcomm_wait(reqs[k]), "hcomm_wait");
        if (!bibw && hb_rank == 0)
            hb_check(hcomm_recv(&ack, 1, HCOMM_UINT8, 1, 2, comm), "hcomm_recv");
        else if (!bibw)
            hb_check(hcomm_send(&ack, 1, HCOMM_UINT8, 0, 2, comm), "hcomm_send");
        t1 = hb_now_ns();
        if (hb_rank == 0 && i >= warmup) lat[i - warmup] = (double)(t1 - t0) / 1e3;
        if (recvs) pp_move(rbuf, pp_drbuf, n, 0);
        if (recvs) wrong += pp_compare(rbuf, want, n, 1, i);
    }
    if (recvs && n) wrong += pp_compare(rbuf, want, n, 0, total - 1);
    pp_finish_row(o, pair, n, lat, iters, wrong, json);
    return wrong;
}

int main(int argc, char **argv)
{
    struct hb_opts o;
    hcomm_comm_t pair;
    hcomm_request_t *reqs = NULL;
    uint8_t *sbuf = NULL, *rbuf = NULL, *want = NULL;
    double *lat = NULL;
    size_t n, wrong = 0, bytes;
    int max_iters;
    FILE *json;

    hb_init(&argc, &argv);
    hb_opts_parse(argc, argv, HB_TOOL_PINGPONG, &o);
    hb_start(&o);
    if (hb_nranks < 2) {
        if (hb_rank == 0)
            fprintf(stderr,
                    "pingpong: needs 2 ranks, this job has %d "
                    "(run: hcommrun -n 2 pingpong)\n",
                    hb_nranks);
        hcomm_finalize();
        return 2;
    }
    json = hb_json_open(o.json, hcomm_comm_world());
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
    max_iters = o.iters >= 0 ? o.iters : 10000;
    sbuf = hb_buf_alloc(bytes, o.mem_hcomm);
    rbuf = hb_buf_alloc(bytes, o.mem_hcomm);
    if (o.mem_hcomm == HB_MEM_DEVICE) { /* stamps and checks on host copies */
        pp_dsbuf = sbuf;
        pp_drbuf = rbuf;
        sbuf = hb_buf_alloc(bytes, 0);
        rbuf = hb_buf_alloc(bytes, 0);
    }
    want = malloc(bytes ? bytes : 1);
    lat = malloc(sizeof(double) * (size_t)max_iters);
    reqs = malloc(sizeof(*reqs) * 2 * (size_t)o.window);
    if (!want || !lat || !reqs) {
        fprintf(stderr, "rank %d: out of memory for a %zu-byte reference and %d samples\n", hb_rank,
                bytes, max_iters);
        return 1;
    }
    if (hb_rank == 0) pp_print_header(&o);

    n = o.min_bytes;
    do {
        if (o.mode == HB_PP_LAT)
            wrong += pp_run_lat(&o, pair, n, sbuf, rbuf, want, lat, json);
        else
            wrong += pp_run_bw(&o, pair, n, sbuf, rbuf, want, reqs, lat, json);
    } while (hb_size_next(&o, &n));

    if (wrong)
        fprintf(stderr, "rank %d: pingpong: %zu wrong bytes or words received: FAILED\n", hb_rank,
                wrong);
    hb_json_close(json, o.json);
    if (o.mem_hcomm == HB_MEM_DEVICE) {
        hb_buf_free(sbuf, bytes, 0);
        hb_buf_free(rbuf, bytes, 0);
        sbuf = pp_dsbuf;
        rbuf = pp_drbuf;
    }
    hb_buf_free(sbuf, bytes, o.mem_hcomm);
    hb_buf_free(rbuf, bytes, o.mem_hcomm);
    free(want);
    free(lat);
    free(reqs);
    hb_check(hcomm_comm_free(pair), "hcomm_comm_free");
    hb_check(hcomm_finalize(), "hcomm_finalize");
    return wrong ? 1 : 0;
}
