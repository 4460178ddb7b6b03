/*
 * bench_mlx5_dp: the CPU cost of posting and polling, per 8-byte RDMA WRITE,
 * of drv/mlx5's data path against ibverbs' generic ibv_post_send +
 * ibv_poll_cq (docs/mlx5.md, "Performance").
 *
 *   bench_mlx5_dp model [MSGS]   drv/mlx5's data path on the model's queues,
 *                                 the model run between posting and polling
 *                                 (deferred: its work is not timed)
 *   bench_mlx5_dp ibv [MSGS]     ibverbs on the first RDMA device (soft-RoCE
 *                                 in tests/vm: bench_mlx5_dp_rxe.sh), a
 *                                 loopback RC QP pair
 *   bench_mlx5_dp syscall [N]    the cost of a bare system call (rxe's
 *                                 ibv_post_send enters the kernel once)
 *
 * Both run the same loops: batches of 64 WRITEs of 8 bytes (inline), a
 * completion asked every N (N = 1 and 16, the driver's default), one
 * doorbell per message or one per batch (mlx5: WQEs behind one doorbell;
 * ibverbs: a chained ibv_send_wr list). Posting is timed per batch; polling
 * is timed per poll call that returned completions (so a device's latency,
 * waited out between the calls, is not counted), less the clock's own cost
 * measured here. Output: one line per configuration, ns per message (post,
 * poll, sum: medians of 9 repetitions; and the user and system CPU time per
 * message over all of them, by getrusage, which tells a kernel-entering
 * post's user-space part from the rest).
 */
#include "drv/mlx5/mlx5.h"
#ifdef HCOMM_MLX5_MODEL_BUILD
#include "drv/mlx5/mlx5_model.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define BATCH 64
#define REPS 9

static inline uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static double clock_cost_ns(void)
{
    uint64_t t0 = now_ns();
    for (int i = 0; i < 100000; i++)
        (void)now_ns();
    return (double)(now_ns() - t0) / 100000.0;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct {
    double post, poll;
} cost_t;

/* A backend: post one batch (per-message doorbells or one), poll all of
 * the batch's completions; times into *t. */
typedef struct {
    int (*batch)(void *ctx, int signal_every, bool one_doorbell, double clk, cost_t *t);
    void *ctx;
    const char *name;
} backend_t;

static int run(const backend_t *b, long msgs)
{
    double clk = clock_cost_ns();
    printf("# %s: %ld messages per configuration, %d per batch, clock %.1f ns per read\n", b->name,
           msgs, BATCH, clk);
    printf("%-8s %-14s %6s %10s %10s %10s %10s %10s\n", "backend", "doorbell", "signal", "post_ns",
           "poll_ns", "total_ns", "user_ns", "sys_ns");
    const int sig[2] = {1, 16};
    for (int one = 0; one < 2; one++)
        for (int s = 0; s < 2; s++) {
            double post[REPS], poll[REPS], tot[REPS];
            struct rusage u0, u1;
            getrusage(RUSAGE_SELF, &u0);
            for (int r = 0; r < REPS; r++) {
                cost_t acc = {0, 0};
                long batches = msgs / BATCH;
                for (long k = 0; k < batches; k++)
                    if (b->batch(b->ctx, sig[s], one, clk, &acc) != 0) return 1;
                post[r] = acc.post / (double)(batches * BATCH);
                poll[r] = acc.poll / (double)(batches * BATCH);
                tot[r] = post[r] + poll[r];
            }
            getrusage(RUSAGE_SELF, &u1);
            qsort(post, REPS, sizeof(double), cmp_d);
            qsort(poll, REPS, sizeof(double), cmp_d);
            qsort(tot, REPS, sizeof(double), cmp_d);
            /* CPU time by the kernel's accounting, over all repetitions
             * (the loop and the clock reads included): where a post enters
             * the kernel, user_ns is the part that can be told apart. */
            double n_all = (double)(msgs / BATCH * BATCH) * REPS;
            double user = ((double)(u1.ru_utime.tv_sec - u0.ru_utime.tv_sec) * 1e9 +
                           (double)(u1.ru_utime.tv_usec - u0.ru_utime.tv_usec) * 1e3) / n_all;
            double sys = ((double)(u1.ru_stime.tv_sec - u0.ru_stime.tv_sec) * 1e9 +
                          (double)(u1.ru_stime.tv_usec - u0.ru_stime.tv_usec) * 1e3) / n_all;
            printf("%-8s %-14s %6d %10.1f %10.1f %10.1f %10.1f %10.1f\n", b->name,
                   one ? "one per batch" : "per message", sig[s], post[REPS / 2], poll[REPS / 2],
                   tot[REPS / 2], user, sys);
        }
    return 0;
}

/* ---- ibverbs ---------------------------------------------------------------------------------- */

typedef struct {
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    struct ibv_qp *qp[2];
    struct ibv_mr *mr;
    uint8_t *buf;
} ibv_ctx_t;

static int ibv_batch(void *vctx, int signal_every, bool one, double clk, cost_t *t)
{
    ibv_ctx_t *x = vctx;
    struct ibv_sge sge[BATCH];
    struct ibv_send_wr wr[BATCH], *bad;
    int want = 0;
    for (int i = 0; i < BATCH; i++) {
        sge[i] = (struct ibv_sge){.addr = (uintptr_t)x->buf, .length = 8, .lkey = x->mr->lkey};
        wr[i] = (struct ibv_send_wr){.wr_id = (uint64_t)i, .sg_list = &sge[i], .num_sge = 1,
                                     .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_INLINE};
        if ((i + 1) % signal_every == 0) {
            wr[i].send_flags |= IBV_SEND_SIGNALED;
            want++;
        }
        wr[i].wr.rdma.remote_addr = (uintptr_t)(x->buf + 4096);
        wr[i].wr.rdma.rkey = x->mr->rkey;
        wr[i].next = one && i + 1 < BATCH ? &wr[i + 1] : NULL;
    }
    uint64_t t0 = now_ns();
    if (one) {
        if (ibv_post_send(x->qp[0], wr, &bad)) return fprintf(stderr, "ibv_post_send failed\n"), 1;
    } else {
        for (int i = 0; i < BATCH; i++)
            if (ibv_post_send(x->qp[0], &wr[i], &bad)) return fprintf(stderr, "ibv_post_send failed\n"), 1;
    }
    t->post += (double)(now_ns() - t0) - clk;
    struct ibv_wc wc[BATCH];
    uint64_t deadline = now_ns() + 10000000000ull;
    while (want > 0) {
        uint64_t a = now_ns();
        int k = ibv_poll_cq(x->cq, BATCH, wc);
        uint64_t e = now_ns();
        if (k < 0) return fprintf(stderr, "ibv_poll_cq failed\n"), 1;
        if (k > 0) t->poll += (double)(e - a) - clk;
        for (int j = 0; j < k; j++)
            if (wc[j].status != IBV_WC_SUCCESS)
                return fprintf(stderr, "completion error: %s\n", ibv_wc_status_str(wc[j].status)), 1;
        want -= k;
        if (e > deadline) return fprintf(stderr, "no completion in 10 s\n"), 1;
    }
    return 0;
}

static int ibv_qp_up(ibv_ctx_t *x, struct ibv_qp *qp, uint32_t dest, int gid_index, union ibv_gid *gid,
                     struct ibv_port_attr *pa)
{
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
                            .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE};
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
        return 1;
    struct ibv_qp_attr r = {.qp_state = IBV_QPS_RTR, .path_mtu = pa->active_mtu, .dest_qp_num = dest,
                            .max_dest_rd_atomic = 1, .min_rnr_timer = 12};
    r.ah_attr.port_num = 1;
    r.ah_attr.dlid = pa->lid;
    if (pa->link_layer == IBV_LINK_LAYER_ETHERNET) {
        r.ah_attr.is_global = 1;
        r.ah_attr.grh.dgid = *gid;
        r.ah_attr.grh.sgid_index = (uint8_t)gid_index;
        r.ah_attr.grh.hop_limit = 64;
    }
    if (ibv_modify_qp(qp, &r, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
        return 1;
    struct ibv_qp_attr s = {.qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7,
                            .max_rd_atomic = 1};
    (void)x;
    return ibv_modify_qp(qp, &s, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                     IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) != 0;
}

static int bench_ibv(long msgs)
{
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list || n == 0) {
        printf("skipped: no RDMA device (run it in tests/vm with soft-RoCE: bench_mlx5_dp_rxe.sh)\n");
        return 77;
    }
    ibv_ctx_t x = {0};
    x.ctx = ibv_open_device(list[0]);
    struct ibv_port_attr pa;
    if (!x.ctx || ibv_query_port(x.ctx, 1, &pa)) return fprintf(stderr, "cannot open %s\n", ibv_get_device_name(list[0])), 1;
    int gid_index = getenv("BENCH_GID_INDEX") ? atoi(getenv("BENCH_GID_INDEX")) : 1;
    union ibv_gid gid;
    if (ibv_query_gid(x.ctx, 1, gid_index, &gid)) return fprintf(stderr, "no GID %d\n", gid_index), 1;
    x.pd = ibv_alloc_pd(x.ctx);
    x.cq = ibv_create_cq(x.ctx, 4 * BATCH, NULL, NULL, 0);
    x.buf = aligned_alloc(4096, 8192);
    x.mr = ibv_reg_mr(x.pd, x.buf, 8192, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    struct ibv_qp_init_attr ia = {.send_cq = x.cq, .recv_cq = x.cq, .qp_type = IBV_QPT_RC,
                                  .cap = {.max_send_wr = 2 * BATCH, .max_recv_wr = 1, .max_send_sge = 1,
                                          .max_recv_sge = 1, .max_inline_data = 64}};
    for (int i = 0; i < 2; i++)
        x.qp[i] = x.pd && x.cq && x.mr ? ibv_create_qp(x.pd, &ia) : NULL;
    if (!x.qp[0] || !x.qp[1] || ibv_qp_up(&x, x.qp[0], x.qp[1]->qp_num, gid_index, &gid, &pa) ||
        ibv_qp_up(&x, x.qp[1], x.qp[0]->qp_num, gid_index, &gid, &pa))
        return fprintf(stderr, "cannot set up a loopback QP pair on %s\n", ibv_get_device_name(list[0])), 1;
    backend_t b = {.batch = ibv_batch, .ctx = &x, .name = "ibverbs"};
    printf("# device %s\n", ibv_get_device_name(list[0]));
    int rc = run(&b, msgs);
    ibv_destroy_qp(x.qp[0]);
    ibv_destroy_qp(x.qp[1]);
    ibv_dereg_mr(x.mr);
    ibv_destroy_cq(x.cq);
    ibv_dealloc_pd(x.pd);
    ibv_close_device(x.ctx);
    ibv_free_device_list(list);
    return rc;
}

/* ---- drv/mlx5 on the model -------------------------------------------------------------------- */

#ifdef HCOMM_MLX5_MODEL_BUILD
typedef struct {
    hc_mlx5_model_t *m;
    hc_mlx5_qp_t q;
    hc_mlx5_cq_t cq;
    uint8_t *buf;
    uint32_t key;
} model_ctx_t;

static int model_batch(void *vctx, int signal_every, bool one, double clk, cost_t *t)
{
    model_ctx_t *x = vctx;
    hc_verbs_wr_t wr = {.op = HC_VERBS_OP_WRITE, .laddr = (uintptr_t)x->buf, .len = 8, .lkey = x->key,
                        .raddr = (uintptr_t)(x->buf + 4096), .rkey = x->key, .inl = true};
    int want = 0;
    uint64_t t0 = now_ns();
    for (int i = 0; i < BATCH; i++) {
        wr.signal = (i + 1) % signal_every == 0;
        wr.wr_id = (uint64_t)i;
        want += wr.signal;
        if (hc_mlx5_write_wqe(&x->q, &wr)) return fprintf(stderr, "no send queue room\n"), 1;
        if (!one) hc_mlx5_ring(&x->q, 1);
    }
    if (one) hc_mlx5_ring(&x->q, BATCH);
    t->post += (double)(now_ns() - t0) - clk;
    (void)hc_mlx5_model_progress(x->m); /* the "NIC": not timed */
    struct ibv_wc wc[BATCH];
    while (want > 0) {
        uint64_t a = now_ns();
        int k = hc_mlx5_poll(&x->cq, wc, BATCH);
        uint64_t e = now_ns();
        if (k <= 0) return fprintf(stderr, "completions missing (%d left)\n", want), 1;
        t->poll += (double)(e - a) - clk;
        for (int j = 0; j < k; j++)
            if (wc[j].status != IBV_WC_SUCCESS)
                return fprintf(stderr, "completion error: %s\n", ibv_wc_status_str(wc[j].status)), 1;
        want -= k;
    }
    return 0;
}

static int bench_model(long msgs, int mmio)
{
    model_ctx_t x = {0};
    if (hc_mlx5_model_open(&x.m, "") != HCOMM_OK) return fprintf(stderr, "%s\n", hc_error_last()), 1;
    hc_mlx5_model_defer(x.m, true);
    struct mlx5dv_cq dc;
    struct mlx5dv_qp dq[2];
    uint32_t qpn[2];
    x.buf = aligned_alloc(4096, 8192);
    uint8_t id[HC_MLX5_MODEL_ID_LEN];
    hc_mlx5_model_id(x.m, id);
    if (hc_mlx5_model_cq_create(x.m, 4 * BATCH, &dc) != HCOMM_OK ||
        hc_mlx5_model_qp_create(x.m, dc.cqn, 2048, 1, 256, &dq[0], &qpn[0]) != HCOMM_OK ||
        hc_mlx5_model_qp_create(x.m, dc.cqn, 2048, 1, 256, &dq[1], &qpn[1]) != HCOMM_OK ||
        hc_mlx5_model_qp_connect(x.m, qpn[0], id, qpn[1]) != HCOMM_OK ||
        hc_mlx5_model_qp_connect(x.m, qpn[1], id, qpn[0]) != HCOMM_OK ||
        hc_mlx5_model_reg(x.m, x.buf, 8192, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, &x.key) != HCOMM_OK ||
        hc_mlx5_cq_setup(&x.cq, &dc) != HCOMM_OK ||
        hc_mlx5_qp_setup(&x.q, &dq[0], qpn[0], 256, mmio) != HCOMM_OK || hc_mlx5_cq_attach(&x.cq, &x.q) != HCOMM_OK)
        return fprintf(stderr, "model queues: %s\n", hc_error_last()), 1;
    x.q.model = x.m;
    backend_t b = {.batch = model_batch, .ctx = &x,
                   .name = mmio == HC_MLX5_MMIO_BF ? "mlx5-bf" : "mlx5-db"};
    int rc = run(&b, msgs);
    /* The driver's posting alone: the same WQEs and doorbells with no NIC
     * behind them (the model is not told: its doorbell check, which runs
     * inside each ring above, is not in these numbers), the ring reset as
     * if every WQE completed. */
    x.q.model = NULL;
    for (int one = 0; one < 2 && rc == 0; one++) {
        double per[REPS];
        hc_verbs_wr_t wr = {.op = HC_VERBS_OP_WRITE, .laddr = (uintptr_t)x.buf, .len = 8, .lkey = x.key,
                            .raddr = (uintptr_t)(x.buf + 4096), .rkey = x.key, .inl = true};
        for (int r = 0; r < REPS; r++) {
            long batches = msgs / BATCH;
            uint64_t t0 = now_ns();
            for (long k = 0; k < batches; k++) {
                for (int i = 0; i < BATCH; i++) {
                    wr.signal = (i + 1) % 16 == 0;
                    (void)hc_mlx5_write_wqe(&x.q, &wr);
                    if (!one) hc_mlx5_ring(&x.q, 1);
                }
                if (one) hc_mlx5_ring(&x.q, BATCH);
                x.q.sq_ci = x.q.sq_pi;
            }
            per[r] = (double)(now_ns() - t0) / (double)(batches * BATCH);
        }
        qsort(per, REPS, sizeof(double), cmp_d);
        printf("%-8s %-14s %6d %10.1f %10s %10s   (posting only: no NIC behind the doorbell)\n",
               b.name, one ? "one per batch" : "per message", 16, per[REPS / 2], "-", "-");
    }
    hc_mlx5_model_stats_t s;
    hc_mlx5_model_stats(x.m, &s);
    if (s.bad_doorbells) {
        fprintf(stderr, "the model saw %llu doorbells that did not match their WQEs\n",
                (unsigned long long)s.bad_doorbells);
        rc = 1;
    }
    hc_mlx5_qp_cleanup(&x.q);
    hc_mlx5_cq_cleanup(&x.cq);
    hc_mlx5_model_close(x.m);
    free(x.buf);
    return rc;
}
#endif

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "model";
    long msgs = argc > 2 ? atol(argv[2]) : 200000;
    if (msgs < BATCH) msgs = BATCH;
    if (!strcmp(mode, "ibv")) return bench_ibv(msgs);
    if (!strcmp(mode, "syscall")) { /* what one kernel entry costs here (rxe's kick is one) */
        double best = 1e18;
        for (int r = 0; r < REPS; r++) {
            uint64_t t0 = now_ns();
            for (long i = 0; i < msgs; i++)
                (void)syscall(SYS_getppid);
            best = HC_MIN(best, (double)(now_ns() - t0) / (double)msgs);
        }
        printf("# a bare system call (getppid): %.1f ns (best of %d)\n", best, REPS);
        return 0;
    }
    if (!strcmp(mode, "model")) {
#ifdef HCOMM_MLX5_MODEL_BUILD
        int rc = bench_model(msgs, HC_MLX5_MMIO_DB);
        return rc ? rc : bench_model(msgs, HC_MLX5_MMIO_BF);
#else
        printf("skipped: this build has no model of the mlx5 queues (-DHCOMM_MLX5_MODEL=ON)\n");
        return 77;
#endif
    }
    fprintf(stderr, "usage: bench_mlx5_dp model|ibv|syscall [MESSAGES]\n");
    return 2;
}
