/*
 * verbs_write_lat: the floor under hcomm's 8-byte latency over a verbs
 * device, a bare ibverbs ping-pong with no library around it.
 *
 * Two processes (this one and a forked child) on one device, each with one
 * RC queue pair connected to the other's: process 0 RDMA WRITEs a frame
 * into the peer's receive ring and polls its own ring for the answer,
 * process 1 polls and answers, as perftest's ib_write_lat does. The frame
 * layout is an argument, so that the same loop runs with perftest's layout
 * (8 bytes, always the same address, every WRITE signaled) and with the one
 * hcomm's verbs driver puts on the wire (docs/verbs.md: a 56-byte slot
 * image for an 8-byte message, into a ring of 64 slots of 8 KiB, one WRITE
 * in 16 signaled). It prints the median one-way time (half the round trip)
 * and the median time of ibv_post_send itself (on soft-RoCE that system
 * call carries the whole software NIC's work), measured with the TSC, whose
 * rate is calibrated against CLOCK_MONOTONIC at start (-m gives it instead).
 *
 *   verbs_write_lat [-d DEV] [-g GID_INDEX] [-n ITERS] [-s BYTES] [-S STRIDE]
 *                   [-k SLOTS] [-e SIGNAL_EVERY] [-m TSC_MHZ]
 *
 * Used by tests/vm/bench_rdma.sh beside perftest; not a ctest test.
 * Exit 0, 1 on any failure (with the reason), 77 when there is no device.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <infiniband/verbs.h>

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

#define WL_WARMUP 1000

static size_t wl_pages(size_t n) { return (n + 4095) & ~(size_t)4095; }

typedef struct {
    uint32_t qpn;
    uint64_t addr;
    uint32_t rkey;
    union ibv_gid gid;
} wl_addr_t;

typedef struct {
    const char *dev;
    int gid, iters, size, stride, slots, signal_every;
    double mhz;
} wl_opts_t;

static int wl_fail(const char *what, int err)
{
    fprintf(stderr, "verbs_write_lat: %s: %s\n", what, strerror(err));
    return 1;
}

/* TSC ticks per microsecond, against CLOCK_MONOTONIC over 50 ms. */
static double wl_tsc_mhz(void)
{
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    uint64_t t0 = __rdtsc();
    do
        clock_gettime(CLOCK_MONOTONIC, &b);
    while ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec) < 5e7);
    uint64_t t1 = __rdtsc();
    double us = ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / 1e3;
    return (double)(t1 - t0) / us;
}

static int wl_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int wl_xfer(int fd, void *buf, size_t len, bool out)
{
    uint8_t *p = buf;
    while (len) {
        ssize_t k = out ? write(fd, p, len) : read(fd, p, len);
        if (k <= 0) return k == 0 ? EPIPE : errno;
        p += k;
        len -= (size_t)k;
    }
    return 0;
}

static struct ibv_context *wl_open(const char *name)
{
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    struct ibv_context *ctx = NULL;
    for (int i = 0; list && i < n && !ctx; i++)
        if (!name || !strcmp(ibv_get_device_name(list[i]), name)) ctx = ibv_open_device(list[i]);
    if (list) ibv_free_device_list(list);
    return ctx;
}

/* One side of the ping-pong: me 0 starts, me 1 answers. */
static int wl_run(const wl_opts_t *o, int me, int fd)
{
    struct ibv_context *ctx = wl_open(o->dev);
    if (!ctx) {
        if (me == 0)
            fprintf(stderr, "verbs_write_lat: skipped: no verbs device%s%s\n", o->dev ? " " : "",
                    o->dev ? o->dev : "");
        return 77;
    }
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    if (!pd) return wl_fail("ibv_alloc_pd", errno);
    size_t ring = (size_t)o->stride * (size_t)o->slots;
    uint8_t *rx = aligned_alloc(4096, wl_pages(ring)), *tx = aligned_alloc(4096, wl_pages(ring));
    if (!rx || !tx) return wl_fail("ring memory", ENOMEM);
    memset(rx, 0, wl_pages(ring));
    memset(tx, 0, wl_pages(ring));
    struct ibv_mr *mr = ibv_reg_mr(pd, rx, wl_pages(ring), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (!mr) return wl_fail("ibv_reg_mr", errno);
    struct ibv_cq *cq = ibv_create_cq(ctx, 512, NULL, NULL, 0);
    if (!cq) return wl_fail("ibv_create_cq", errno);
    struct ibv_qp_init_attr ia = {.send_cq = cq,
                                  .recv_cq = cq,
                                  .qp_type = IBV_QPT_RC,
                                  .cap = {.max_send_wr = 256,
                                          .max_recv_wr = 1,
                                          .max_send_sge = 1,
                                          .max_recv_sge = 1,
                                          .max_inline_data = 256}};
    struct ibv_qp *qp = ibv_create_qp(pd, &ia);
    if (!qp) return wl_fail("ibv_create_qp", errno);
    if ((uint32_t)o->size > ia.cap.max_inline_data) {
        fprintf(stderr, "verbs_write_lat: -s %d: the QP inlines at most %u bytes\n", o->size,
                ia.cap.max_inline_data);
        return 1;
    }
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT,
                            .port_num = 1,
                            .qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
    int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    if (rc) return wl_fail("QP to INIT", rc);
    struct ibv_port_attr port;
    if ((rc = ibv_query_port(ctx, 1, &port))) return wl_fail("ibv_query_port", rc);
    wl_addr_t mine = {.qpn = qp->qp_num, .addr = (uintptr_t)rx, .rkey = mr->rkey}, peer;
    if ((rc = ibv_query_gid(ctx, 1, o->gid, &mine.gid))) return wl_fail("ibv_query_gid", rc);
    if ((rc = wl_xfer(fd, &mine, sizeof(mine), true)) || (rc = wl_xfer(fd, &peer, sizeof(peer), false)))
        return wl_fail("address exchange", rc);
    a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTR,
                             .path_mtu = port.active_mtu,
                             .dest_qp_num = peer.qpn,
                             .max_dest_rd_atomic = 1,
                             .min_rnr_timer = 12,
                             .ah_attr = {.is_global = 1,
                                         .port_num = 1,
                                         .grh = {.dgid = peer.gid, .sgid_index = (uint8_t)o->gid, .hop_limit = 64}}};
    rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (rc) return wl_fail("QP to RTR", rc);
    a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7, .max_rd_atomic = 1};
    rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                   IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
    if (rc) return wl_fail("QP to RTS", rc);
    char go = 0;
    if ((rc = wl_xfer(fd, &go, 1, true)) || (rc = wl_xfer(fd, &go, 1, false))) return wl_fail("start", rc);

    uint64_t *post = calloc((size_t)o->iters, 8), *iter = calloc((size_t)o->iters, 8);
    if (!post || !iter) return wl_fail("samples", ENOMEM);
    /* A round trip has no time limit of its own: the parent's alarm (main)
     * ends a run whose peer stopped answering. */
    int unsignaled = 0, outstanding = 0;
    for (int i = -WL_WARMUP; i < o->iters; i++) {
        uint64_t seq = (uint64_t)(i + WL_WARMUP + 1);
        size_t off = (size_t)(seq % (uint64_t)o->slots) * (size_t)o->stride;
        /* the frame's last 8 bytes carry the sequence: the poller's flag */
        volatile const uint64_t *flag = (volatile const uint64_t *)(rx + off + (size_t)o->size - 8);
        uint64_t t0 = __rdtsc();
        if (me == 1)
            while (*flag != seq) _mm_pause();
        uint64_t *img = (uint64_t *)(tx + off);
        img[0] = seq;
        img[o->size / 8 - 1] = seq;
        struct ibv_sge sge = {.addr = (uintptr_t)img, .length = (uint32_t)o->size};
        struct ibv_send_wr wr = {.wr_id = seq,
                                 .sg_list = &sge,
                                 .num_sge = 1,
                                 .opcode = IBV_WR_RDMA_WRITE,
                                 .send_flags = IBV_SEND_INLINE,
                                 .wr.rdma = {.remote_addr = peer.addr + off, .rkey = peer.rkey}},
                           *bad;
        if (++unsignaled >= o->signal_every) {
            wr.send_flags |= IBV_SEND_SIGNALED;
            unsignaled = 0;
            outstanding++;
        }
        uint64_t tp = __rdtsc();
        if ((rc = ibv_post_send(qp, &wr, &bad))) return wl_fail("ibv_post_send", rc);
        uint64_t tq = __rdtsc();
        struct ibv_wc wc[16];
        do {
            int k = ibv_poll_cq(cq, 16, wc);
            if (k < 0) return wl_fail("ibv_poll_cq", EIO);
            for (int j = 0; j < k; j++) {
                if (wc[j].status != IBV_WC_SUCCESS) {
                    fprintf(stderr, "verbs_write_lat: WRITE failed: %s\n", ibv_wc_status_str(wc[j].status));
                    return 1;
                }
                outstanding--;
            }
        } while (outstanding > 8); /* keep the send queue from filling */
        if (me == 0)
            while (*flag != seq) _mm_pause();
        if (i >= 0) {
            post[i] = tq - tp;
            iter[i] = __rdtsc() - t0;
        }
    }
    qsort(post, (size_t)o->iters, 8, wl_cmp);
    qsort(iter, (size_t)o->iters, 8, wl_cmp);
    if (me == 0)
        printf("verbs_write_lat: %d B frames, stride %d, %d slots, 1 in %d signaled, %d iterations: "
               "one-way p50 %.2f us, ibv_post_send p50 %.2f us\n",
               o->size, o->stride, o->slots, o->signal_every, o->iters,
               (double)iter[o->iters / 2] / o->mhz / 2, (double)post[o->iters / 2] / o->mhz);
    return 0;
}

int main(int argc, char **argv)
{
    wl_opts_t o = {.gid = 0, .iters = 10000, .size = 8, .stride = 8, .slots = 1, .signal_every = 1, .mhz = 0};
    int c;
    while ((c = getopt(argc, argv, "d:g:n:s:S:k:e:m:")) != -1) {
        switch (c) {
        case 'd': o.dev = optarg; break;
        case 'g': o.gid = atoi(optarg); break;
        case 'n': o.iters = atoi(optarg); break;
        case 's': o.size = atoi(optarg); break;
        case 'S': o.stride = atoi(optarg); break;
        case 'k': o.slots = atoi(optarg); break;
        case 'e': o.signal_every = atoi(optarg); break;
        case 'm': o.mhz = atof(optarg); break;
        default:
            fprintf(stderr, "usage: verbs_write_lat [-d DEV] [-g GID] [-n ITERS] [-s BYTES] [-S STRIDE] "
                            "[-k SLOTS] [-e SIGNAL_EVERY] [-m TSC_MHZ]\n");
            return 1;
        }
    }
    if (o.iters < 1 || o.size < 8 || o.size % 8 || o.stride < o.size || o.slots < 1 || o.signal_every < 1 ||
        o.signal_every > 64 || o.gid < 0 || o.mhz < 0) {
        fprintf(stderr, "verbs_write_lat: want -n >= 1, -s a multiple of 8 (>= 8), -S >= -s, -k >= 1, "
                        "-e 1..64, -g >= 0 and -m the TSC frequency in MHz (0 or none: measured)\n");
        return 1;
    }
    if (o.mhz == 0) o.mhz = wl_tsc_mhz();
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) return wl_fail("socketpair", errno);
    pid_t child = fork();
    if (child < 0) return wl_fail("fork", errno);
    if (child == 0) {
        close(sv[0]);
        alarm(120);
        _exit(wl_run(&o, 1, sv[1]));
    }
    close(sv[1]);
    alarm(120);
    int rc = wl_run(&o, 0, sv[0]);
    close(sv[0]);
    int st = 0;
    if (rc) kill(child, SIGKILL);
    if (waitpid(child, &st, 0) < 0) return wl_fail("waitpid", errno);
    if (rc) return rc;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}
