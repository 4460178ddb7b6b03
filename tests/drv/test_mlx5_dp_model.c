/*
 * drv/mlx5: the data path (mlx5_dp.c) against the model (mlx5_model.c), in
 * one process, two QPs connected to each other: every opcode the data path
 * can post (including the ones the verbs protocol does not use today: RDMA
 * WRITE WITH IMMEDIATE, SEND by pointer), receives, both doorbell modes,
 * WQEs behind one doorbell, wrap-around of the send ring with WQEs of every
 * inline size, and error CQEs followed by flushes, all read back through
 * hc_mlx5_poll as the driver reads them. (The model is built only with
 * -DHCOMM_MLX5_MODEL=ON.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "drv/mlx5/mlx5.h"
#include "drv/mlx5/mlx5_model.h"

#include <stdlib.h>
#include <string.h>

#define BUF (1 << 20)

typedef struct {
    hc_mlx5_model_t *m;
    hc_mlx5_cq_t cq;
    hc_mlx5_qp_t a, b;
    uint8_t *abuf, *bbuf;
    uint32_t akey, bkey;
} pair_t;

static pair_t *pair_new(int mmio)
{
    pair_t *p = calloc(1, sizeof(*p));
    assert_int_equal(hc_mlx5_model_open(&p->m, ""), HCOMM_OK);
    uint8_t id[HC_MLX5_MODEL_ID_LEN];
    hc_mlx5_model_id(p->m, id);
    struct mlx5dv_cq dc;
    struct mlx5dv_qp da, db;
    uint32_t qa, qb;
    assert_int_equal(hc_mlx5_model_cq_create(p->m, 1024, &dc), HCOMM_OK);
    assert_int_equal(hc_mlx5_model_qp_create(p->m, dc.cqn, 256, 64, 256, &da, &qa), HCOMM_OK);
    assert_int_equal(hc_mlx5_model_qp_create(p->m, dc.cqn, 256, 64, 256, &db, &qb), HCOMM_OK);
    assert_int_equal(hc_mlx5_model_qp_connect(p->m, qa, id, qb), HCOMM_OK);
    assert_int_equal(hc_mlx5_model_qp_connect(p->m, qb, id, qa), HCOMM_OK);
    assert_int_equal(hc_mlx5_cq_setup(&p->cq, &dc), HCOMM_OK);
    assert_int_equal(hc_mlx5_qp_setup(&p->a, &da, qa, 256, mmio), HCOMM_OK);
    assert_int_equal(hc_mlx5_qp_setup(&p->b, &db, qb, 256, mmio), HCOMM_OK);
    p->a.model = p->b.model = p->cq.model = p->m;
    assert_int_equal(hc_mlx5_cq_attach(&p->cq, &p->a), HCOMM_OK);
    assert_int_equal(hc_mlx5_cq_attach(&p->cq, &p->b), HCOMM_OK);
    p->abuf = aligned_alloc(4096, BUF);
    p->bbuf = aligned_alloc(4096, BUF);
    memset(p->abuf, 0, BUF);
    memset(p->bbuf, 0, BUF);
    int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
    assert_int_equal(hc_mlx5_model_reg(p->m, p->abuf, BUF, acc, &p->akey), HCOMM_OK);
    assert_int_equal(hc_mlx5_model_reg(p->m, p->bbuf, BUF, acc, &p->bkey), HCOMM_OK);
    return p;
}

static void pair_free(pair_t *p)
{
    hc_mlx5_model_stats_t s;
    hc_mlx5_model_stats(p->m, &s);
    assert_int_equal(s.bad_doorbells, 0); /* every doorbell the data path rang was right */
    hc_mlx5_qp_cleanup(&p->a);
    hc_mlx5_qp_cleanup(&p->b);
    hc_mlx5_cq_cleanup(&p->cq);
    hc_mlx5_model_close(p->m);
    free(p->abuf);
    free(p->bbuf);
    free(p);
}

/* Polls until n completions came (the model completes at once). */
static int poll_n(pair_t *p, struct ibv_wc *wc, int n)
{
    int got = 0;
    for (int tries = 0; got < n && tries < 1000; tries++) {
        int k = hc_mlx5_poll(&p->cq, wc + got, n - got);
        assert_true(k >= 0);
        got += k;
    }
    return got;
}

static void fill(uint8_t *b, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++)
        b[i] = (uint8_t)(seed * 131 + i * 7 + (i >> 8));
}

static void post1(hc_mlx5_qp_t *q, const hc_verbs_wr_t *wr)
{
    int posted = 0;
    assert_int_equal(hc_mlx5_post(q, wr, 1, &posted), 0);
    assert_int_equal(posted, 1);
}

static void opcodes(int mmio)
{
    pair_t *p = pair_new(mmio);
    struct ibv_wc wc[8];
    /* SEND by pointer into B's posted receive. */
    fill(p->abuf, 1000, 1);
    assert_int_equal(hc_mlx5_post_recv(&p->b, (uintptr_t)p->bbuf, 4096, p->bkey, 500), 0);
    hc_verbs_wr_t s = {.op = HC_VERBS_OP_SEND, .laddr = (uintptr_t)p->abuf, .len = 1000,
                       .lkey = p->akey, .signal = true, .wr_id = 1};
    post1(&p->a, &s);
    assert_int_equal(poll_n(p, wc, 2), 2);
    int rx = wc[0].qp_num == p->b.qpn ? 0 : 1;
    assert_int_equal(wc[rx].wr_id, 500);
    assert_int_equal(wc[rx].opcode, IBV_WC_RECV);
    assert_int_equal(wc[rx].byte_len, 1000);
    assert_int_equal(wc[1 - rx].wr_id, 1);
    assert_int_equal(wc[1 - rx].opcode, IBV_WC_SEND);
    assert_memory_equal(p->bbuf, p->abuf, 1000);
    /* An inline SEND. */
    fill(p->abuf, 200, 2);
    assert_int_equal(hc_mlx5_post_recv(&p->b, (uintptr_t)p->bbuf + 8192, 4096, p->bkey, 501), 0);
    s = (hc_verbs_wr_t){.op = HC_VERBS_OP_SEND, .laddr = (uintptr_t)p->abuf, .len = 200, .inl = true,
                        .signal = true, .wr_id = 2};
    post1(&p->a, &s);
    assert_int_equal(poll_n(p, wc, 2), 2);
    assert_memory_equal(p->bbuf + 8192, p->abuf, 200);
    /* RDMA WRITE WITH IMMEDIATE: the data at raddr, a receive consumed, the
     * immediate in network order as ibverbs gives it. */
    fill(p->abuf, 4096, 3);
    assert_int_equal(hc_mlx5_post_recv(&p->b, (uintptr_t)p->bbuf, 16, p->bkey, 502), 0);
    hc_verbs_wr_t wi = {.op = HC_VERBS_OP_WRITE_IMM, .laddr = (uintptr_t)p->abuf, .len = 4096,
                        .lkey = p->akey, .raddr = (uintptr_t)p->bbuf + 65536, .rkey = p->bkey,
                        .imm = 0x12345678, .signal = true, .wr_id = 3};
    post1(&p->a, &wi);
    assert_int_equal(poll_n(p, wc, 2), 2);
    rx = wc[0].qp_num == p->b.qpn ? 0 : 1;
    assert_int_equal(wc[rx].wr_id, 502);
    assert_int_equal(wc[rx].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
    assert_true(wc[rx].wc_flags & IBV_WC_WITH_IMM);
    assert_int_equal(be32toh(wc[rx].imm_data), 0x12345678);
    assert_int_equal(wc[rx].byte_len, 4096);
    assert_memory_equal(p->bbuf + 65536, p->abuf, 4096);
    /* RDMA READ of 256 KiB from B into A. */
    fill(p->bbuf + 131072, 262144, 4);
    hc_verbs_wr_t r = {.op = HC_VERBS_OP_READ, .laddr = (uintptr_t)p->abuf + 131072, .len = 262144,
                       .lkey = p->akey, .raddr = (uintptr_t)p->bbuf + 131072, .rkey = p->bkey,
                       .signal = true, .wr_id = 4};
    post1(&p->a, &r);
    assert_int_equal(poll_n(p, wc, 1), 1);
    assert_int_equal(wc[0].wr_id, 4);
    assert_int_equal(wc[0].opcode, IBV_WC_RDMA_READ);
    assert_int_equal(wc[0].status, IBV_WC_SUCCESS);
    assert_memory_equal(p->abuf + 131072, p->bbuf + 131072, 262144);
    assert_int_equal(hc_mlx5_poll(&p->cq, wc, 8), 0);
    pair_free(p);
}

static void t_opcodes_db(void **state)
{
    (void)state;
    opcodes(HC_MLX5_MMIO_DB);
}

static void t_opcodes_bf(void **state)
{
    (void)state;
    opcodes(HC_MLX5_MMIO_BF);
}

/* 16 WRITEs behind one doorbell, only the last signaled: one CQE, every
 * byte there; then thousands of WQEs of every inline size around the ring. */
static void t_batch_and_wrap(void **state)
{
    (void)state;
    pair_t *p = pair_new(HC_MLX5_MMIO_BF);
    hc_verbs_wr_t w[16];
    fill(p->abuf, 16 * 4096, 5);
    for (int i = 0; i < 16; i++)
        w[i] = (hc_verbs_wr_t){.op = HC_VERBS_OP_WRITE, .laddr = (uintptr_t)p->abuf + (size_t)i * 4096,
                               .len = 4096, .lkey = p->akey,
                               .raddr = (uintptr_t)p->bbuf + (size_t)i * 4096, .rkey = p->bkey,
                               .signal = i == 15, .wr_id = 100 + (uint64_t)i};
    int posted = 0;
    uint64_t db0 = p->a.n_db;
    assert_int_equal(hc_mlx5_post(&p->a, w, 16, &posted), 0);
    assert_int_equal(posted, 16);
    assert_int_equal(p->a.n_db - db0, 1);
    struct ibv_wc wc[16];
    assert_int_equal(poll_n(p, wc, 1), 1);
    assert_int_equal(wc[0].wr_id, 115);
    assert_int_equal(hc_mlx5_poll(&p->cq, wc, 16), 0);
    assert_memory_equal(p->bbuf, p->abuf, 16 * 4096);
    assert_int_equal(p->a.sq_ci, p->a.sq_pi);
    /* The send ring (256 WQEBBs) around about 50 times: inline WRITEs of
     * 1..256 bytes (1 to 5 WQEBBs, straddling its end), each to its own
     * place, a CQE every 16. */
    memset(p->bbuf, 0, BUF);
    fill(p->abuf, 65536, 6);
    uint32_t n = 0, owed = 0;
    for (uint32_t i = 0; i < 5000; i++) {
        uint32_t len = 1 + (i * 37) % 256;
        hc_verbs_wr_t x = {.op = HC_VERBS_OP_WRITE, .laddr = (uintptr_t)p->abuf + (i % 200) * 256,
                           .len = len, .inl = true, .raddr = (uintptr_t)p->bbuf + (size_t)(i % 4000) * 256,
                           .rkey = p->bkey, .signal = (i % 16) == 15, .wr_id = i};
        int rc;
        while ((rc = hc_mlx5_post(&p->a, &x, 1, &posted)) == EAGAIN)
            owed -= (uint32_t)poll_n(p, wc, 1);
        assert_int_equal(rc, 0);
        owed += x.signal;
        n++;
    }
    while (owed)
        owed -= (uint32_t)poll_n(p, wc, 1);
    for (uint32_t i = 1000; i < 5000; i++) { /* the last 4000 writes, each checked */
        uint32_t len = 1 + (i * 37) % 256;
        assert_memory_equal(p->bbuf + (size_t)(i % 4000) * 256, p->abuf + (i % 200) * 256, len);
    }
    assert_true(p->a.sq_pi > 40u * 256u);
    pair_free(p);
}

/* A bad remote key: the error CQE with its syndrome, then the flush of what
 * was posted after it, both through the data path's decoder. */
static void t_errors(void **state)
{
    (void)state;
    pair_t *p = pair_new(HC_MLX5_MMIO_DB);
    hc_verbs_wr_t bad = {.op = HC_VERBS_OP_WRITE, .laddr = (uintptr_t)p->abuf, .len = 64, .lkey = p->akey,
                         .raddr = (uintptr_t)p->bbuf, .rkey = p->bkey ^ 0x100, .wr_id = 7};
    hc_verbs_wr_t next = bad;
    next.rkey = p->bkey;
    next.wr_id = 8;
    next.signal = true;
    hc_verbs_wr_t two[2] = {bad, next};
    int posted = 0;
    assert_int_equal(hc_mlx5_post(&p->a, two, 2, &posted), 0);
    struct ibv_wc wc[8];
    int k = poll_n(p, wc, 2);
    assert_true(k >= 2);
    /* The unsignaled failing WQE reports anyway. */
    int e = -1;
    for (int i = 0; i < k; i++)
        if (wc[i].qp_num == p->a.qpn && wc[i].wr_id == 7) e = i;
    assert_true(e >= 0);
    assert_int_equal(wc[e].status, IBV_WC_REM_ACCESS_ERR);
    assert_int_not_equal(wc[e].vendor_err, 0);
    bool flushed = false;
    for (int i = 0; i < k; i++)
        if (wc[i].qp_num == p->a.qpn && wc[i].wr_id == 8) flushed = wc[i].status == IBV_WC_WR_FLUSH_ERR;
    if (!flushed) {
        k = poll_n(p, wc, 1);
        flushed = k == 1 && wc[0].wr_id == 8 && wc[0].status == IBV_WC_WR_FLUSH_ERR;
    }
    assert_true(flushed);
    /* Everything up to the flushed WQE is retired. */
    assert_int_equal(p->a.sq_ci, p->a.sq_pi);
    pair_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(t_opcodes_db),
        cmocka_unit_test(t_opcodes_bf),
        cmocka_unit_test(t_batch_and_wrap),
        cmocka_unit_test(t_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
