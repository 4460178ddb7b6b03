/*
 * drv/mlx5/mlx5_model.c driven by hand: WQEs assembled here with mlx5dv.h's
 * structs (no drv/mlx5 data path code), doorbells rung the way mlx5 does
 * (the send doorbell record, then the first 8 bytes of the last WQE's
 * control segment, or the whole WQE for BlueFlame, at the alternating half
 * of the register), CQEs polled by their owner bit with the consumer index
 * written back into the CQ's doorbell record.
 *
 * Two QPs of one model connected to each other (the peer id is the model's
 * own), and one case with a forked child process as the target (its memory
 * reached through process_vm_writev/readv, its CQ written in its segment,
 * then killed: TRANSPORT_RETRY_EXC_ERR).
 */
#include "drv/mlx5/mlx5_model.h"

#include <endian.h>
#include <infiniband/verbs.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#define OP_WRITE MLX5_OPCODE_RDMA_WRITE
#define OP_WRITE_IMM MLX5_OPCODE_RDMA_WRITE_IMM
#define OP_READ MLX5_OPCODE_RDMA_READ
#define OP_SEND MLX5_OPCODE_SEND
#define OP_SEND_IMM MLX5_OPCODE_SEND_IMM
#define SYN(x) MLX5_CQE_SYNDROME_##x
#define ANY_OP 0xffu
#define RW (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

/* ---- the driver's side, by hand -------------------------------------------------------------- */

typedef struct {
    hc_mlx5_model_t *m;
    struct mlx5dv_qp dv;
    uint32_t qpn;
    uint32_t pi;     /* WQEBBs posted */
    uint32_t bf_off; /* the half the next doorbell goes to */
    uint32_t rq_pi;
    uint32_t last_idx, last_nbb, nwqe;
} tqp_t;

typedef struct {
    struct mlx5dv_cq dv;
    uint32_t ci;
} tcq_t;

typedef struct {
    uint8_t op;
    bool sig;
    uint32_t imm; /* host order; the WQE carries htobe32(imm) */
    uint64_t raddr;
    uint32_t rkey;
    bool inl;
    const void *data; /* inline bytes */
    uint64_t laddr;
    uint32_t len, lkey;
} twr_t;

enum { DB8, DB_BF, DB_BAD, DB_WRONG_HALF, DB_BF_CORRUPT };

static void cq_open(hc_mlx5_model_t *m, tcq_t *c, uint32_t cqe)
{
    memset(c, 0, sizeof(*c));
    assert_int_equal(hc_mlx5_model_cq_create(m, cqe, &c->dv), HCOMM_OK);
    assert_true(c->dv.cqe_cnt >= cqe);
    assert_int_equal(c->dv.cqe_size, 64);
}

static void qp_open(hc_mlx5_model_t *m, tqp_t *q, tcq_t *c, uint32_t sq, uint32_t rq)
{
    memset(q, 0, sizeof(*q));
    q->m = m;
    assert_int_equal(hc_mlx5_model_qp_create(m, c->dv.cqn, sq, rq, 256, &q->dv, &q->qpn), HCOMM_OK);
    assert_int_equal(q->dv.sq.wqe_cnt, sq);
    assert_int_equal(q->dv.sq.stride, 64);
    assert_int_equal(q->dv.rq.wqe_cnt, rq);
    assert_int_equal(q->dv.rq.stride, 16);
    assert_int_equal(q->dv.bf.size, 256);
}

static uint8_t *bb(tqp_t *q, uint32_t i)
{
    return (uint8_t *)q->dv.sq.buf + (size_t)(i & (q->dv.sq.wqe_cnt - 1)) * 64;
}

/* Writes one WQE at the producer index (wrapping BB by BB); returns the
 * 16-bit index of its first WQEBB. */
static uint16_t post(tqp_t *q, const twr_t *wr)
{
    uint8_t img[1024];
    memset(img, 0, sizeof(img));
    bool rdma = wr->op != OP_SEND && wr->op != OP_SEND_IMM;
    size_t off = 16;
    if (rdma) {
        struct mlx5_wqe_raddr_seg *r = (struct mlx5_wqe_raddr_seg *)(img + 16);
        r->raddr = htobe64(wr->raddr);
        r->rkey = htobe32(wr->rkey);
        off = 32;
    }
    if (wr->inl) {
        uint32_t bc = htobe32(wr->len | MLX5_INLINE_SEG);
        memcpy(img + off, &bc, 4);
        memcpy(img + off + 4, wr->data, wr->len);
        off += (4 + wr->len + 15) / 16 * 16;
    } else if (wr->len) {
        struct mlx5_wqe_data_seg *d = (struct mlx5_wqe_data_seg *)(img + off);
        d->byte_count = htobe32(wr->len);
        d->lkey = htobe32(wr->lkey);
        d->addr = htobe64(wr->laddr);
        off += 16;
    }
    uint32_t ds = (uint32_t)off / 16, nbb = ((uint32_t)off + 63) / 64;
    struct mlx5_wqe_ctrl_seg *c = (struct mlx5_wqe_ctrl_seg *)img;
    c->opmod_idx_opcode = htobe32((q->pi & 0xffff) << 8 | wr->op);
    c->qpn_ds = htobe32(q->qpn << 8 | ds);
    c->fm_ce_se = wr->sig ? MLX5_WQE_CTRL_CQ_UPDATE : 0;
    c->imm = htobe32(wr->imm);
    for (uint32_t b = 0; b < nbb; b++)
        memcpy(bb(q, q->pi + b), img + b * 64, 64);
    uint16_t idx = (uint16_t)q->pi;
    q->last_idx = q->pi;
    q->last_nbb = nbb;
    q->nwqe++;
    q->pi += nbb;
    return idx;
}

/* The doorbell for what was posted since the last one, then the kick. */
static void ring(tqp_t *q, int mode)
{
    __atomic_thread_fence(__ATOMIC_RELEASE);
    q->dv.dbrec[MLX5_SND_DBR] = htobe32(q->pi & 0xffff);
    uint32_t off = mode == DB_WRONG_HALF ? q->bf_off ^ q->dv.bf.size : q->bf_off;
    uint8_t *reg = (uint8_t *)q->dv.bf.reg + off;
    if (mode == DB_BF || mode == DB_BF_CORRUPT) {
        for (uint32_t b = 0; b < q->last_nbb; b++)
            memcpy(reg + b * 64, bb(q, q->last_idx + b), 64);
        if (mode == DB_BF_CORRUPT) reg[20] ^= 0x40;
    } else {
        uint64_t v;
        memcpy(&v, bb(q, q->last_idx), 8);
        if (mode == DB_BAD) v ^= 0x0100; /* one bit of the WQE index */
        *(volatile uint64_t *)reg = v;
    }
    if (mode != DB_WRONG_HALF) q->bf_off ^= q->dv.bf.size;
    q->nwqe = 0;
    hc_mlx5_model_kick(q->m, q->qpn);
}

static void post_recv(tqp_t *q, const void *addr, uint32_t len, uint32_t lkey)
{
    struct mlx5_wqe_data_seg *d =
        (struct mlx5_wqe_data_seg *)q->dv.rq.buf + (q->rq_pi & (q->dv.rq.wqe_cnt - 1));
    d->byte_count = htobe32(len);
    d->lkey = htobe32(lkey);
    d->addr = htobe64((uint64_t)(uintptr_t)addr);
    q->rq_pi++;
    __atomic_thread_fence(__ATOMIC_RELEASE);
    q->dv.dbrec[MLX5_RCV_DBR] = htobe32(q->rq_pi & 0xffff);
}

static bool poll1(tcq_t *c, struct mlx5_cqe64 *out)
{
    uint8_t *slot = (uint8_t *)c->dv.buf + (size_t)(c->ci & (c->dv.cqe_cnt - 1)) * 64;
    uint8_t op_own = __atomic_load_n(&slot[63], __ATOMIC_ACQUIRE);
    if ((op_own >> 4) == MLX5_CQE_INVALID || (op_own & 1) != ((c->ci / c->dv.cqe_cnt) & 1))
        return false;
    memcpy(out, slot, 64);
    c->ci++;
    c->dv.dbrec[0] = htobe32(c->ci & 0xffffff);
    return true;
}

static void expect_none(tcq_t *c)
{
    struct mlx5_cqe64 e;
    if (poll1(c, &e)) fail_msg("an unexpected CQE: op_own 0x%02x", e.op_own);
}

static void expect_req(tcq_t *c, uint32_t qpn, uint16_t idx, uint8_t op, uint32_t byte_cnt)
{
    struct mlx5_cqe64 e;
    if (!poll1(c, &e)) fail_msg("no requester CQE for WQE %u", idx);
    if ((e.op_own >> 4) != MLX5_CQE_REQ) {
        const struct mlx5_err_cqe *x = (const struct mlx5_err_cqe *)&e;
        fail_msg("WQE %u: CQE opcode %u (syndrome 0x%x), expected REQ", idx, e.op_own >> 4,
                 x->syndrome);
    }
    assert_int_equal(be32toh(e.sop_drop_qpn) & 0xffffff, qpn);
    assert_int_equal(be32toh(e.sop_drop_qpn) >> 24, op);
    assert_int_equal(be16toh(e.wqe_counter), idx);
    if (op == OP_READ) assert_int_equal(be32toh(e.byte_cnt), byte_cnt);
}

static void expect_resp(tcq_t *c, uint8_t op, uint32_t qpn, uint16_t ridx, uint32_t len,
                        uint32_t imm)
{
    struct mlx5_cqe64 e;
    if (!poll1(c, &e)) fail_msg("no responder CQE for receive %u", ridx);
    assert_int_equal(e.op_own >> 4, op);
    assert_int_equal(be32toh(e.sop_drop_qpn) & 0xffffff, qpn);
    assert_int_equal(be16toh(e.wqe_counter), ridx);
    assert_int_equal(be32toh(e.byte_cnt), len);
    if (op != MLX5_CQE_RESP_SEND) assert_int_equal(be32toh(e.imm_inval_pkey), imm);
}

static void expect_err(tcq_t *c, uint8_t op, uint8_t synd, uint32_t qpn, uint16_t idx,
                       uint8_t wqe_op)
{
    struct mlx5_cqe64 e;
    if (!poll1(c, &e)) fail_msg("no error CQE (syndrome 0x%x) for index %u", synd, idx);
    const struct mlx5_err_cqe *x = (const struct mlx5_err_cqe *)&e;
    if ((e.op_own >> 4) != op || x->syndrome != synd)
        fail_msg("index %u: CQE opcode %u syndrome 0x%x, expected opcode %u syndrome 0x%x", idx,
                 e.op_own >> 4, x->syndrome, op, synd);
    assert_true(x->vendor_err_synd != 0);
    assert_int_equal(be32toh(x->s_wqe_opcode_qpn) & 0xffffff, qpn);
    if (wqe_op != ANY_OP) assert_int_equal(be32toh(x->s_wqe_opcode_qpn) >> 24, wqe_op);
    assert_int_equal(be16toh(x->wqe_counter), idx);
}

static uint8_t vendor_of_next(tcq_t *c)
{
    const uint8_t *slot = (const uint8_t *)c->dv.buf + (size_t)(c->ci & (c->dv.cqe_cnt - 1)) * 64;
    return ((const struct mlx5_err_cqe *)slot)->vendor_err_synd;
}

/* Two QPs of one model connected to each other (64 WQEBBs, 16 receives each). */
typedef struct {
    hc_mlx5_model_t *m;
    tcq_t ca, cb;
    tqp_t a, b;
} pair_t;

static void pair_open(pair_t *p, hc_mlx5_model_t *m, uint32_t cqe)
{
    p->m = m;
    cq_open(m, &p->ca, cqe);
    cq_open(m, &p->cb, cqe);
    qp_open(m, &p->a, &p->ca, 64, 16);
    qp_open(m, &p->b, &p->cb, 64, 16);
    uint8_t id[HC_MLX5_MODEL_ID_LEN];
    hc_mlx5_model_id(m, id);
    assert_int_equal(hc_mlx5_model_qp_connect(m, p->a.qpn, id, p->b.qpn), HCOMM_OK);
    assert_int_equal(hc_mlx5_model_qp_connect(m, p->b.qpn, id, p->a.qpn), HCOMM_OK);
}

static void pair_close(pair_t *p)
{
    hc_mlx5_model_qp_destroy(p->m, p->a.qpn);
    hc_mlx5_model_qp_destroy(p->m, p->b.qpn);
    hc_mlx5_model_cq_destroy(p->m, p->ca.dv.cqn);
    hc_mlx5_model_cq_destroy(p->m, p->cb.dv.cqn);
}

static hc_mlx5_model_t *model_open(const char *fault)
{
    hc_mlx5_model_t *m = NULL;
    hcomm_status_t st = hc_mlx5_model_open(&m, fault);
    if (st != HCOMM_OK) fail_msg("hc_mlx5_model_open: %s", hc_error_last());
    return m;
}

static uint32_t reg(hc_mlx5_model_t *m, void *addr, size_t len, int access)
{
    uint32_t key = 0;
    assert_int_equal(hc_mlx5_model_reg(m, addr, len, access, &key), HCOMM_OK);
    return key;
}

static hc_mlx5_model_stats_t stats(hc_mlx5_model_t *m)
{
    hc_mlx5_model_stats_t s;
    hc_mlx5_model_stats(m, &s);
    return s;
}

static uint8_t pat(uint32_t seed, uint32_t i)
{
    return (uint8_t)(seed * 131u + i * 7u + (i >> 8));
}

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = pat(seed, (uint32_t)i);
}

static void check(const uint8_t *p, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != pat(seed, (uint32_t)i))
            fail_msg("byte %zu of %zu is 0x%02x, expected 0x%02x (seed %u)", i, n, p[i],
                     pat(seed, (uint32_t)i), seed);
}

static uint8_t src[65536], dst[65536], rbuf[4][256];

/* The fixture of most cases: a model and one pair in it, the CQs of the size
 * given as the prestate (64 without one). */
static int pair_setup(void **state)
{
    uint32_t cqe = *state ? (uint32_t)(uintptr_t)*state : 64;
    pair_t *p = malloc(sizeof(*p));
    if (!p) return -1;
    pair_open(p, model_open(""), cqe);
    *state = p;
    return 0;
}

static int pair_teardown(void **state)
{
    pair_t *p = *state;
    hc_mlx5_model_t *m = p->m;
    pair_close(p);
    hc_mlx5_model_close(m);
    free(p);
    return 0;
}

/* ---- WQEs by shape, posted, rung and completed ----------------------------------------------- */

/* WRITE, WRITE WITH IMMEDIATE (see with_imm) or READ by pointer; len 0: no data segment. */
static twr_t wr_rdma(uint8_t op, const void *laddr, uint32_t lkey, const void *raddr, uint32_t rkey,
                     uint32_t len, bool sig)
{
    return (twr_t){.op = op,
                   .sig = sig,
                   .raddr = (uintptr_t)raddr,
                   .rkey = rkey,
                   .laddr = (uintptr_t)laddr,
                   .len = len,
                   .lkey = lkey};
}

/* A zero-length WRITE. */
static twr_t wr_zero(const void *raddr, uint32_t rkey, bool sig)
{
    return wr_rdma(OP_WRITE, NULL, 0, raddr, rkey, 0, sig);
}

static twr_t wr_send(const void *laddr, uint32_t lkey, uint32_t len, bool sig)
{
    return (twr_t){.op = OP_SEND, .sig = sig, .laddr = (uintptr_t)laddr, .len = len, .lkey = lkey};
}

/* Inline data, signaled (raddr and rkey unused for a SEND). */
static twr_t wr_inline(uint8_t op, const void *raddr, uint32_t rkey, const void *data, uint32_t len)
{
    return (twr_t){.op = op,
                   .sig = true,
                   .raddr = (uintptr_t)raddr,
                   .rkey = rkey,
                   .inl = true,
                   .data = data,
                   .len = len};
}

static twr_t with_imm(twr_t wr, uint32_t imm)
{
    wr.imm = imm;
    return wr;
}

static uint16_t post_wr(tqp_t *q, twr_t wr)
{
    return post(q, &wr);
}

static uint16_t post_ring(tqp_t *q, twr_t wr, int mode)
{
    uint16_t i = post(q, &wr);
    ring(q, mode);
    return i;
}

/* Posted, rung, and its requester CQE (a READ's byte count is its length). */
static uint16_t run_ok(tqp_t *q, tcq_t *c, twr_t wr, int mode)
{
    uint16_t i = post_ring(q, wr, mode);
    expect_req(c, q->qpn, i, wr.op, wr.len);
    return i;
}

static void expect_req_err(tcq_t *c, uint8_t synd, uint32_t qpn, uint16_t idx, uint8_t wqe_op)
{
    expect_err(c, MLX5_CQE_REQ_ERR, synd, qpn, idx, wqe_op);
}

static void expect_resp_err(tcq_t *c, uint8_t synd, uint32_t qpn, uint16_t ridx)
{
    expect_err(c, MLX5_CQE_RESP_ERR, synd, qpn, ridx, ANY_OP);
}

/* Posted, rung (8 bytes), and its requester error CQE with that syndrome. */
static uint16_t run_err(tqp_t *q, tcq_t *c, twr_t wr, uint8_t synd)
{
    uint16_t i = post_ring(q, wr, DB8);
    expect_req_err(c, synd, q->qpn, i, wr.op);
    return i;
}

/* ---- cases ----------------------------------------------------------------------------------- */

static void test_write(void **state)
{
    pair_t *p = *state;
    hc_mlx5_model_t *m = p->m;
    fill(src, 4096, 1);
    memset(dst, 0, 4096);
    uint32_t ks = reg(m, src, 4096, IBV_ACCESS_LOCAL_WRITE);
    uint32_t kd = reg(m, dst, 4096, RW);
    /* pointer */
    run_ok(&p->a, &p->ca, wr_rdma(OP_WRITE, src, ks, dst, kd, 1000, true), DB8);
    check(dst, 1000, 1);
    assert_int_equal(dst[1000], 0);
    /* inline (2 WQEBBs), by BlueFlame */
    uint8_t inl[40];
    fill(inl, sizeof(inl), 2);
    run_ok(&p->a, &p->ca, wr_inline(OP_WRITE, dst + 2000, kd, inl, sizeof(inl)), DB_BF);
    assert_int_equal(p->a.last_nbb, 2);
    check(dst + 2000, sizeof(inl), 2);
    /* zero length: no data segment */
    run_ok(&p->a, &p->ca, wr_zero(dst, kd, true), DB8);
    expect_none(&p->ca);
    expect_none(&p->cb);
    hc_mlx5_model_stats_t s = stats(m);
    assert_int_equal(s.wqes, 3);
    assert_int_equal(s.cqes, 3);
    assert_int_equal(s.err_cqes, 0);
    assert_int_equal(s.bad_doorbells, 0);
    assert_int_equal(s.bytes, 1040);
}

static void test_send_recv(void **state)
{
    pair_t *p = *state;
    hc_mlx5_model_t *m = p->m;
    fill(src, 4096, 3);
    memset(dst, 0, 4096);
    memset(rbuf, 0, sizeof(rbuf));
    uint32_t ks = reg(m, src, 4096, 0);
    uint32_t kd = reg(m, dst, 4096, RW);
    uint32_t kr = reg(m, rbuf, sizeof(rbuf), IBV_ACCESS_LOCAL_WRITE);
    for (int i = 0; i < 4; i++)
        post_recv(&p->b, rbuf[i], 256, kr);
    /* SEND by pointer */
    run_ok(&p->a, &p->ca, wr_send(src, ks, 100, true), DB8);
    expect_resp(&p->cb, MLX5_CQE_RESP_SEND, p->b.qpn, 0, 100, 0);
    check(rbuf[0], 100, 3);
    /* SEND WITH IMMEDIATE, inline */
    uint8_t inl[20];
    fill(inl, sizeof(inl), 4);
    twr_t si = with_imm(wr_inline(OP_SEND_IMM, NULL, 0, inl, sizeof(inl)), 0xdeadbeef);
    run_ok(&p->a, &p->ca, si, DB_BF);
    expect_resp(&p->cb, MLX5_CQE_RESP_SEND_IMM, p->b.qpn, 1, sizeof(inl), 0xdeadbeef);
    check(rbuf[1], sizeof(inl), 4);
    /* RDMA WRITE WITH IMMEDIATE: data at raddr, a receive consumed without data */
    twr_t wi = with_imm(wr_rdma(OP_WRITE_IMM, src, ks, dst + 64, kd, 300, true), 0x12345678);
    run_ok(&p->a, &p->ca, wi, DB8);
    expect_resp(&p->cb, MLX5_CQE_RESP_WR_IMM, p->b.qpn, 2, 300, 0x12345678);
    check(dst + 64, 300, 3);
    for (int i = 0; i < 256; i++)
        assert_int_equal(rbuf[2][i], 0);
    /* an unsignaled zero-length SEND still consumes a receive */
    post_ring(&p->a, wr_send(NULL, 0, 0, false), DB8);
    expect_none(&p->ca);
    expect_resp(&p->cb, MLX5_CQE_RESP_SEND, p->b.qpn, 3, 0, 0);
    expect_none(&p->cb);
}

static void test_read(void **state)
{
    pair_t *p = *state;
    hc_mlx5_model_t *m = p->m;
    fill(src, 5000, 5);
    memset(dst, 0, 8192);
    uint32_t ks = reg(m, src, 5000, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
    uint32_t kd = reg(m, dst, 8192, IBV_ACCESS_LOCAL_WRITE);
    run_ok(&p->a, &p->ca, wr_rdma(OP_READ, dst + 8, kd, src, ks, 5000, true), DB8);
    check(dst + 8, 5000, 5);
    assert_int_equal(dst[0], 0);
    assert_int_equal(dst[5008], 0);
    assert_int_equal(stats(m).bytes, 5000);
}

static void test_unsignaled(void **state)
{
    pair_t *p = *state;
    hc_mlx5_model_t *m = p->m;
    fill(src, 64, 6);
    uint32_t ks = reg(m, src, 64, 0);
    uint32_t kd = reg(m, dst, 4096, RW);
    for (int i = 0; i < 3; i++)
        post_wr(&p->a, wr_rdma(OP_WRITE, src, ks, dst + i * 64, kd, 64, false));
    ring(&p->a, DB8); /* three behind one doorbell */
    expect_none(&p->ca);
    for (int i = 0; i < 3; i++)
        check(dst + i * 64, 64, 6);
    /* an unsignaled one and a signaled one behind one doorbell: one CQE */
    post_wr(&p->a, wr_rdma(OP_WRITE, src, ks, dst, kd, 8, false));
    run_ok(&p->a, &p->ca, wr_rdma(OP_WRITE, src, ks, dst, kd, 8, true), DB8);
    expect_none(&p->ca);
    assert_int_equal(stats(m).wqes, 5);
    assert_int_equal(stats(m).cqes, 1);
}

/* A 64-WQEBB SQ, 1000 WQEs of 1 to 4 WQEBBs (inline WQEs straddling the
 * ring end checked byte by byte), a 16-entry CQ polled by owner bit. */
static void test_sq_wrap(void **state)
{
    pair_t *p = *state;
    hc_mlx5_model_t *m = p->m;
    assert_int_equal(p->ca.dv.cqe_cnt, 16); /* the fixture's, from main() */
    uint32_t ks = reg(m, src, sizeof(src), 0);
    uint32_t kd = reg(m, dst, sizeof(dst), RW);
    int straddles = 0, bf_straddles = 0, flips = 0, last_owner = 0;
    uint8_t inl[256];
    uint32_t i = 0;
    while (i < 1000) {
        int batch = i % 10 == 9 ? 3 : 1;
        bool bf = batch == 1 && i % 2 == 0; /* BlueFlame for every other lone WQE */
        uint16_t idx[3];
        uint32_t len[3], seed[3];
        for (int k = 0; k < batch; k++, i++) {
            seed[k] = i;
            uint8_t *d = dst + (size_t)(i % 32) * 512;
            twr_t wr;
            if (i % 3 == 0) {
                uint8_t *s = src + (size_t)(i % 32) * 512;
                len[k] = 1 + (i * 53) % 500;
                fill(s, len[k], i);
                wr = wr_rdma(OP_WRITE, s, ks, d, kd, len[k], true);
            } else {
                len[k] = 1 + (i * 37) % 200; /* up to 4 WQEBBs */
                fill(inl, len[k], i);
                wr = wr_inline(OP_WRITE, d, kd, inl, len[k]);
            }
            memset(d, 0, 512);
            idx[k] = post_wr(&p->a, wr);
            if ((idx[k] & 63) + p->a.last_nbb > 64) {
                straddles++;
                bf_straddles += bf;
            }
        }
        ring(&p->a, bf ? DB_BF : DB8);
        for (int k = 0; k < batch; k++) {
            uint32_t ci = p->ca.ci;
            const uint8_t *slot = (const uint8_t *)p->ca.dv.buf + (ci & 15) * 64;
            int owner = slot[63] & 1;
            if (owner != last_owner) flips++;
            last_owner = owner;
            expect_req(&p->ca, p->a.qpn, idx[k], OP_WRITE, 0);
            check(dst + (size_t)(seed[k] % 32) * 512, len[k], seed[k]);
            assert_int_equal(dst[(size_t)(seed[k] % 32) * 512 + len[k]], 0);
        }
        expect_none(&p->ca);
    }
    if (straddles < 10 || bf_straddles < 3)
        fail_msg("only %d WQEs straddled the ring end (%d rung by BlueFlame)", straddles,
                 bf_straddles);
    if (flips < 60) fail_msg("the owner bit flipped %d times", flips); /* 1000 CQEs, 16 entries */
    hc_mlx5_model_stats_t s = stats(m);
    assert_int_equal(s.wqes, i);
    assert_int_equal(s.cqes, i);
    assert_int_equal(s.bad_doorbells, 0);
}

/* The 16-bit WQE index wraps (70000 one-WQEBB WQEs); a 4-entry CQ. */
static void test_index_wrap(void **state)
{
    pair_t *p = *state;
    hc_mlx5_model_t *m = p->m;
    assert_int_equal(p->ca.dv.cqe_cnt, 4); /* the fixture's, from main() */
    uint32_t ks = reg(m, src, 64, 0);
    uint32_t kd = reg(m, dst, 4096, RW);
    for (uint32_t i = 0; i < 70000; i++) {
        bool sig = i % 16 == 15;
        memcpy(src, &i, 4);
        uint16_t idx = post_wr(&p->a, wr_rdma(OP_WRITE, src, ks, dst, kd, 4, sig));
        assert_int_equal(idx, i & 0xffff);
        ring(&p->a, i % 2 ? DB_BF : DB8);
        uint32_t got;
        memcpy(&got, dst, 4);
        assert_int_equal(got, i);
        if (sig) expect_req(&p->ca, p->a.qpn, idx, OP_WRITE, 0);
    }
    expect_none(&p->ca);
    assert_int_equal(stats(m).bad_doorbells, 0);
}

static void test_cq_wrap(void **state)
{
    pair_t *p = *state; /* CQs of 3 entries, rounded up to 4 */
    hc_mlx5_model_t *m = p->m;
    assert_int_equal(p->ca.dv.cqe_cnt, 4);
    for (int k = 0; k < 4; k++)
        assert_int_equal(((uint8_t *)p->ca.dv.buf)[k * 64 + 63], MLX5_CQE_INVALID << 4);
    uint32_t kd = reg(m, dst, 64, RW);
    for (uint32_t i = 0; i < 200; i++) {
        uint16_t idx = post_ring(&p->a, wr_zero(dst, kd, true), DB8);
        const uint8_t *slot = (const uint8_t *)p->ca.dv.buf + (p->ca.ci & 3) * 64;
        assert_int_equal(slot[63] & 1, (p->ca.ci / 4) & 1);
        expect_req(&p->ca, p->a.qpn, idx, OP_WRITE, 0);
    }
    /* batches that fill the CQ exactly */
    for (int r = 0; r < 20; r++) {
        uint16_t idx[4];
        for (int k = 0; k < 4; k++)
            idx[k] = post_wr(&p->a, wr_zero(dst, kd, true));
        ring(&p->a, DB8);
        for (int k = 0; k < 4; k++)
            expect_req(&p->ca, p->a.qpn, idx[k], OP_WRITE, 0);
        expect_none(&p->ca);
    }
    assert_int_equal(stats(m).err_cqes, 0);
}

/* A CQ not kept up: the completion that does not fit is lost, the QP goes to
 * error, later WQEs are flushed once there is room. */
static void test_cq_overrun(void **state)
{
    pair_t *p = *state;
    hc_mlx5_model_t *m = p->m;
    assert_int_equal(p->ca.dv.cqe_cnt, 2); /* the fixture's, from main() */
    uint32_t kd = reg(m, dst, 64, RW);
    uint16_t idx[3];
    for (int k = 0; k < 3; k++)
        idx[k] = post_wr(&p->a, wr_zero(dst, kd, true));
    ring(&p->a, DB8);
    expect_req(&p->ca, p->a.qpn, idx[0], OP_WRITE, 0);
    expect_req(&p->ca, p->a.qpn, idx[1], OP_WRITE, 0);
    expect_none(&p->ca);
    run_err(&p->a, &p->ca, wr_zero(dst, kd, true), SYN(WR_FLUSH_ERR));
    expect_none(&p->ca);
}

static void test_rnr(void **state)
{
    pair_t *p = *state;
    hc_mlx5_model_t *m = p->m;
    fill(src, 64, 7);
    memset(rbuf, 0, sizeof(rbuf));
    uint32_t ks = reg(m, src, 64, 0);
    uint32_t kd = reg(m, dst, 64, RW);
    uint32_t kr = reg(m, rbuf, sizeof(rbuf), IBV_ACCESS_LOCAL_WRITE);
    uint16_t i0 = post_ring(&p->a, wr_send(src, ks, 50, true), DB8);
    expect_none(&p->ca);
    expect_none(&p->cb);
    assert_int_equal(stats(m).rnr_waits, 1);
    assert_int_equal(hc_mlx5_model_progress(m), 0);
    assert_int_equal(stats(m).rnr_waits, 1); /* counted once per WQE */
    /* a WRITE behind it waits too (in order) */
    uint16_t i1 = post_ring(&p->a, wr_rdma(OP_WRITE, src, ks, dst, kd, 8, true), DB8);
    expect_none(&p->ca);
    post_recv(&p->b, rbuf[0], 256, kr);
    assert_int_equal(hc_mlx5_model_progress(m), 2);
    expect_req(&p->ca, p->a.qpn, i0, OP_SEND, 0);
    expect_req(&p->ca, p->a.qpn, i1, OP_WRITE, 0);
    expect_resp(&p->cb, MLX5_CQE_RESP_SEND, p->b.qpn, 0, 50, 0);
    check(rbuf[0], 50, 7);
    assert_int_equal(hc_mlx5_model_progress(m), 0);
}

static void test_defer(void **state)
{
    pair_t *p = *state;
    hc_mlx5_model_t *m = p->m;
    uint32_t kd = reg(m, dst, 64, RW);
    hc_mlx5_model_defer(m, true);
    uint16_t i0 = post_ring(&p->a, wr_zero(dst, kd, true), DB8);
    uint16_t i1 = post_ring(&p->a, wr_zero(dst, kd, true), DB_BF);
    expect_none(&p->ca);
    assert_int_equal(hc_mlx5_model_progress(m), 2);
    expect_req(&p->ca, p->a.qpn, i0, OP_WRITE, 0);
    expect_req(&p->ca, p->a.qpn, i1, OP_WRITE, 0);
    assert_int_equal(hc_mlx5_model_progress(m), 0);
    hc_mlx5_model_defer(m, false);
    run_ok(&p->a, &p->ca, wr_zero(dst, kd, true), DB8);
    assert_int_equal(stats(m).bad_doorbells, 0);
}

/* A bad lkey: LOCAL_PROT_ERR whether signaled or not, the QP's receives and
 * the WQEs behind it flushed, and those posted later too. */
static void test_err_lkey(void **state)
{
    pair_t *p = *state;
    hc_mlx5_model_t *m = p->m;
    uint32_t ks = reg(m, src, 64, 0);
    uint32_t kd = reg(m, dst, 64, RW);
    uint32_t kr = reg(m, rbuf, sizeof(rbuf), IBV_ACCESS_LOCAL_WRITE);
    post_recv(&p->a, rbuf[0], 256, kr);
    post_recv(&p->a, rbuf[1], 256, kr);
    uint16_t i0 = post_wr(&p->a, wr_rdma(OP_WRITE, src, 0x7f0042, dst, kd, 8, false));
    uint16_t i1 = post_wr(&p->a, wr_rdma(OP_WRITE, src, ks, dst, kd, 8, true));
    ring(&p->a, DB8);
    assert_int_equal(vendor_of_next(&p->ca), 0x80 | SYN(LOCAL_PROT_ERR));
    expect_req_err(&p->ca, SYN(LOCAL_PROT_ERR), p->a.qpn, i0, OP_WRITE);
    expect_resp_err(&p->ca, SYN(WR_FLUSH_ERR), p->a.qpn, 0);
    expect_resp_err(&p->ca, SYN(WR_FLUSH_ERR), p->a.qpn, 1);
    expect_req_err(&p->ca, SYN(WR_FLUSH_ERR), p->a.qpn, i1, OP_WRITE);
    expect_none(&p->ca);
    /* posted later: flushed at the kick, receives at progress */
    run_err(&p->a, &p->ca, wr_send(src, ks, 8, false), SYN(WR_FLUSH_ERR));
    post_recv(&p->a, rbuf[2], 256, kr);
    assert_int_equal(hc_mlx5_model_progress(m), 0);
    expect_resp_err(&p->ca, SYN(WR_FLUSH_ERR), p->a.qpn, 2);
    expect_none(&p->ca);
    expect_none(&p->cb);
    /* a READ into memory without LOCAL_WRITE */
    pair_t q;
    pair_open(&q, m, 64);
    uint32_t kro = reg(m, dst + 1024, 64, IBV_ACCESS_REMOTE_READ);
    run_err(&q.a, &q.ca, wr_rdma(OP_READ, src, ks, dst + 1024, kro, 8, true), SYN(LOCAL_PROT_ERR));
    pair_close(&q);
}

/* rkey wrong, out of range, without the access: REMOTE_ACCESS_ERR, and the
 * target QP goes to error too (its receives flushed). */
static void test_err_rkey(void **state)
{
    (void)state;
    hc_mlx5_model_t *m = model_open("");
    uint32_t ks = reg(m, src, 4096, IBV_ACCESS_LOCAL_WRITE);
    uint32_t kd = reg(m, dst, 1024, RW);
    uint32_t kno = reg(m, dst + 2048, 1024, IBV_ACCESS_LOCAL_WRITE); /* local only */
    uint32_t kr = reg(m, rbuf, sizeof(rbuf), IBV_ACCESS_LOCAL_WRITE);
    const struct {
        uint8_t op;
        uint64_t raddr;
        uint32_t rkey, len;
    } cases[] = {
        {OP_WRITE, (uintptr_t)dst, 0x7f0000 | 0x11, 8}, /* no such key */
        {OP_WRITE, (uintptr_t)dst + 1020, kd, 8},       /* past the end */
        {OP_WRITE, (uintptr_t)dst + 2048, kno, 8},      /* no REMOTE_WRITE */
        {OP_READ, (uintptr_t)dst + 2048, kno, 8},       /* no REMOTE_READ */
        {OP_WRITE_IMM, (uintptr_t)dst - 8, kd, 16},     /* before the start */
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        pair_t p;
        pair_open(&p, m, 64);
        post_recv(&p.b, rbuf[0], 256, kr);
        const void *raddr = (const void *)(uintptr_t)cases[c].raddr;
        twr_t wr = wr_rdma(cases[c].op, src, ks, raddr, cases[c].rkey, cases[c].len, false);
        run_err(&p.a, &p.ca, wr, SYN(REMOTE_ACCESS_ERR));
        expect_none(&p.ca);
        expect_resp_err(&p.cb, SYN(WR_FLUSH_ERR), p.b.qpn, 0);
        expect_none(&p.cb);
        /* the target's own WQEs are flushed now */
        run_err(&p.b, &p.cb, wr_zero(dst, kd, false), SYN(WR_FLUSH_ERR));
        pair_close(&p);
    }
    hc_mlx5_model_close(m);
}

/* A SEND larger than the receive: the responder's LOCAL_LENGTH_ERR, the
 * requester's REMOTE_OP_ERR. */
static void test_err_length(void **state)
{
    pair_t *p = *state;
    hc_mlx5_model_t *m = p->m;
    uint32_t ks = reg(m, src, 4096, 0);
    uint32_t kr = reg(m, rbuf, sizeof(rbuf), IBV_ACCESS_LOCAL_WRITE);
    post_recv(&p->b, rbuf[0], 100, kr);
    post_recv(&p->b, rbuf[1], 256, kr);
    run_err(&p->a, &p->ca, wr_send(src, ks, 101, false), SYN(REMOTE_OP_ERR));
    expect_resp_err(&p->cb, SYN(LOCAL_LENGTH_ERR), p->b.qpn, 0);
    expect_resp_err(&p->cb, SYN(WR_FLUSH_ERR), p->b.qpn, 1);
    expect_none(&p->ca);
    expect_none(&p->cb);
    /* a receive whose key does not allow the write: REMOTE_OP_ERR / LOCAL_PROT_ERR */
    pair_t q;
    pair_open(&q, m, 64);
    uint32_t kro = reg(m, rbuf[2], 256, 0);
    post_recv(&q.b, rbuf[2], 256, kro);
    run_err(&q.a, &q.ca, wr_send(src, ks, 10, false), SYN(REMOTE_OP_ERR));
    expect_resp_err(&q.cb, SYN(LOCAL_PROT_ERR), q.b.qpn, 0);
    pair_close(&q);
}

/* The target QP destroyed; a QP never connected; a control segment with
 * the wrong WQE index; the wrong QP number. */
static void test_err_qp(void **state)
{
    (void)state;
    hc_mlx5_model_t *m = model_open("");
    uint32_t kd = reg(m, dst, 64, RW);
    pair_t p;
    pair_open(&p, m, 64);
    hc_mlx5_model_qp_destroy(m, p.b.qpn);
    run_err(&p.a, &p.ca, wr_zero(dst, kd, false), SYN(TRANSPORT_RETRY_EXC_ERR));
    hc_mlx5_model_qp_destroy(m, p.a.qpn);
    /* the destroyed QP's number made again: still not the QP r.a connected to */
    pair_t r;
    pair_open(&r, m, 64);
    hc_mlx5_model_qp_destroy(m, r.b.qpn);
    tqp_t nb;
    for (int k = 0; k < 1024; k++) {
        qp_open(m, &nb, &r.cb, 64, 16);
        if (nb.qpn == r.b.qpn) break;
        hc_mlx5_model_qp_destroy(m, nb.qpn);
    }
    assert_int_equal(nb.qpn, r.b.qpn);
    uint8_t id[HC_MLX5_MODEL_ID_LEN];
    hc_mlx5_model_id(m, id);
    assert_int_equal(hc_mlx5_model_qp_connect(m, nb.qpn, id, r.a.qpn), HCOMM_OK);
    run_err(&r.a, &r.ca, wr_zero(dst, kd, false), SYN(TRANSPORT_RETRY_EXC_ERR));
    pair_close(&r); /* r.b.qpn is nb's now */
    /* not connected (INIT) */
    tqp_t c;
    qp_open(m, &c, &p.ca, 64, 16);
    run_err(&c, &p.ca, wr_zero(dst, kd, true), SYN(LOCAL_QP_OP_ERR));
    hc_mlx5_model_qp_destroy(m, c.qpn);
    hc_mlx5_model_cq_destroy(m, p.ca.dv.cqn);
    hc_mlx5_model_cq_destroy(m, p.cb.dv.cqn);
    /* wrong WQE index, wrong QP number in the control segment */
    for (int v = 0; v < 2; v++) {
        pair_t q;
        pair_open(&q, m, 64);
        post_wr(&q.a, wr_zero(dst, kd, true));
        uint16_t w1 = post_wr(&q.a, wr_zero(dst, kd, true));
        struct mlx5_wqe_ctrl_seg *ctrl = (struct mlx5_wqe_ctrl_seg *)bb(&q.a, w1);
        if (v == 0)
            ctrl->opmod_idx_opcode = htobe32((uint32_t)(w1 + 5) << 8 | OP_WRITE);
        else
            ctrl->qpn_ds = htobe32((q.a.qpn + 1) << 8 | 2);
        ring(&q.a, DB8);
        expect_req(&q.ca, q.a.qpn, (uint16_t)(w1 - 1), OP_WRITE, 0);
        expect_req_err(&q.ca, SYN(LOCAL_QP_OP_ERR), q.a.qpn, w1, OP_WRITE);
        expect_none(&q.ca);
        pair_close(&q);
    }
    assert_int_equal(stats(m).bad_doorbells, 0);
    hc_mlx5_model_close(m);
}

/* A key deregistered: refused as rkey and lkey, also once its entry is
 * registered again (another variant). */
static void test_stale_key(void **state)
{
    (void)state;
    hc_mlx5_model_t *m = model_open("");
    uint32_t ks = reg(m, src, 64, 0);
    uint32_t k1 = reg(m, dst, 64, RW);
    hc_mlx5_model_dereg(m, k1);
    uint32_t k2 = 0;
    for (int i = 0; i < 9000 && (k2 >> 8) != (k1 >> 8); i++) {
        if (k2) hc_mlx5_model_dereg(m, k2);
        k2 = reg(m, dst, 64, RW);
    }
    assert_int_equal(k2 >> 8, k1 >> 8); /* the same entry ... */
    assert_int_not_equal(k2, k1);       /* ... another variant */
    const struct {
        const uint8_t *laddr;
        uint32_t lkey;
        const uint8_t *raddr;
        uint32_t rkey;
        uint8_t synd; /* 0: completes */
    } cases[] = {
        {src, ks, dst, k1, SYN(REMOTE_ACCESS_ERR)}, /* the stale key as rkey */
        {dst, k1, src, k2, SYN(LOCAL_PROT_ERR)},    /* ... as lkey */
        {src, ks, dst, k2, 0},                      /* the new variant */
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        pair_t p;
        pair_open(&p, m, 64);
        twr_t wr = wr_rdma(OP_WRITE, cases[c].laddr, cases[c].lkey, cases[c].raddr, cases[c].rkey,
                           8, true);
        if (cases[c].synd)
            run_err(&p.a, &p.ca, wr, cases[c].synd);
        else
            run_ok(&p.a, &p.ca, wr, DB8);
        pair_close(&p);
    }
    hc_mlx5_model_close(m);
}

static void test_fault_spec(void **state)
{
    (void)state;
    const char *good[] = {"", "flush@1", "remote_access@3,local_prot@1,length@2,retry@4,flush@5",
                          "retry@18446744"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        hc_mlx5_model_t *m = NULL;
        if (hc_mlx5_model_open(&m, good[i]) != HCOMM_OK)
            fail_msg("\"%s\" refused: %s", good[i], hc_error_last());
        hc_mlx5_model_close(m);
    }
    hc_mlx5_model_t *m = NULL;
    assert_int_equal(hc_mlx5_model_open(&m, NULL), HCOMM_OK);
    hc_mlx5_model_close(m);
    const struct {
        const char *spec, *names;
    } bad[] = {
        {"foo@1", "foo"},         {"retry", "\"retry\""},         {"retry@", "\"retry@\""},
        {"retry@0", "retry@0"},   {"retry@x", "retry@x"},         {"retry@1,", "\"\""},
        {",retry@1", "\"\""},     {"retry@1x", "retry@1x"},       {"@3", "\"\""},
        {"retry@-1", "retry@-1"}, {"flush@2,lenght@3", "lenght"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        m = (hc_mlx5_model_t *)1;
        assert_int_equal(hc_mlx5_model_open(&m, bad[i].spec), HCOMM_ERR_INVALID);
        assert_null(m);
        const char *e = hc_error_last();
        if (!strstr(e, "HCOMM_MLX5_MODEL_FAULT") || !strstr(e, bad[i].names))
            fail_msg("\"%s\": the message \"%s\" does not name %s", bad[i].spec, e, bad[i].names);
    }
    char many[1024] = "";
    for (int i = 1; i <= 33; i++)
        snprintf(many + strlen(many), sizeof(many) - strlen(many), "%sflush@%d", i > 1 ? "," : "",
                 i);
    assert_int_equal(hc_mlx5_model_open(&m, many), HCOMM_ERR_INVALID);
    assert_non_null(strstr(hc_error_last(), "HCOMM_MLX5_MODEL_FAULT"));
}

/* Each injected kind at its WQE number, counted over all the NIC's QPs. */
static void test_fault_inject(void **state)
{
    (void)state;
    hc_mlx5_model_t *m = model_open("remote_access@2,local_prot@3,length@4,retry@5,flush@6");
    uint32_t ks = reg(m, src, 64, 0);
    uint32_t kd = reg(m, dst, 64, RW);
    uint32_t kr = reg(m, rbuf, sizeof(rbuf), IBV_ACCESS_LOCAL_WRITE);
    pair_t p[6];
    for (int i = 0; i < 6; i++) {
        pair_open(&p[i], m, 64);
        post_recv(&p[i].b, rbuf[0], 256, kr);
    }
    const twr_t w = wr_rdma(OP_WRITE, src, ks, dst, kd, 8, true);
    const twr_t s = wr_send(src, ks, 8, true);
    enum { RESP_ANY, RESP_NONE, RESP_ERR };
    const struct {
        int pair;
        const twr_t *wr;
        uint8_t synd; /* 0: completes */
        bool vendor;  /* the CQE's vendor syndrome checked: 0xc0 | synd, injected */
        int resp;     /* the target's CQ: not checked, empty, or resp_synd on receive 0 */
        uint8_t resp_synd;
    } cases[] = {
        /* #1 runs */
        {0, &w, 0, false, RESP_ANY, 0},
        /* #2 remote_access: the target to error as well */
        {0, &w, SYN(REMOTE_ACCESS_ERR), true, RESP_ERR, SYN(WR_FLUSH_ERR)},
        /* #3 local_prot */
        {1, &w, SYN(LOCAL_PROT_ERR), false, RESP_NONE, 0},
        /* #4 length, on a SEND: the receive completes with LOCAL_LENGTH_ERR */
        {2, &s, SYN(REMOTE_OP_ERR), false, RESP_ERR, SYN(LOCAL_LENGTH_ERR)},
        /* #5 retry */
        {3, &w, SYN(TRANSPORT_RETRY_EXC_ERR), false, RESP_ANY, 0},
        /* #6 flush */
        {4, &w, SYN(WR_FLUSH_ERR), true, RESP_ANY, 0},
        /* #7 runs */
        {5, &w, 0, false, RESP_ANY, 0},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        pair_t *q = &p[cases[c].pair];
        if (!cases[c].synd) {
            run_ok(&q->a, &q->ca, *cases[c].wr, DB8);
            continue;
        }
        uint16_t i = post_ring(&q->a, *cases[c].wr, DB8);
        if (cases[c].vendor) assert_int_equal(vendor_of_next(&q->ca), 0xc0 | cases[c].synd);
        expect_req_err(&q->ca, cases[c].synd, q->a.qpn, i, cases[c].wr->op);
        if (cases[c].resp == RESP_NONE) expect_none(&q->cb);
        if (cases[c].resp == RESP_ERR) expect_resp_err(&q->cb, cases[c].resp_synd, q->b.qpn, 0);
    }
    for (int k = 0; k < 6; k++)
        pair_close(&p[k]);
    hc_mlx5_model_close(m);
}

static void test_bad_doorbell(void **state)
{
    pair_t *p = *state;
    hc_mlx5_model_t *m = p->m;
    uint32_t kd = reg(m, dst, 64, RW);
    twr_t wr = wr_zero(dst, kd, true);
    /* each doorbell for one WQE, and the bad doorbells counted so far */
    const struct {
        int mode;
        uint64_t bad;
    } rings[] = {
        {DB_BAD, 1}, /* wrong 8 bytes: counted, the WQE runs anyway */
        {DB8, 1},    {DB_WRONG_HALF, 2}, {DB_BF, 2}, {DB_BF_CORRUPT, 3},
    };
    for (size_t k = 0; k < sizeof(rings) / sizeof(rings[0]); k++) {
        run_ok(&p->a, &p->ca, wr, rings[k].mode);
        assert_int_equal(stats(m).bad_doorbells, rings[k].bad);
    }
    /* BlueFlame behind two WQEs; then the doorbell for the first of two, not the last */
    for (int first = 0; first < 2; first++) {
        uint16_t j0 = post_wr(&p->a, wr);
        uint16_t j1 = post_wr(&p->a, wr);
        if (first) {
            p->a.last_idx = j0;
            p->a.last_nbb = 1;
        }
        ring(&p->a, first ? DB8 : DB_BF);
        expect_req(&p->ca, p->a.qpn, j0, OP_WRITE, 0);
        expect_req(&p->ca, p->a.qpn, j1, OP_WRITE, 0);
        assert_int_equal(stats(m).bad_doorbells, 4 + first);
    }
    run_ok(&p->a, &p->ca, wr, DB8);
    assert_int_equal(stats(m).bad_doorbells, 5);
    assert_int_equal(stats(m).err_cqes, 0);
}

static void test_create_args(void **state)
{
    (void)state;
    hc_mlx5_model_t *m = model_open("");
    struct mlx5dv_cq cq;
    struct mlx5dv_qp qp;
    uint32_t qpn;
    assert_int_equal(hc_mlx5_model_cq_create(m, 0, &cq), HCOMM_ERR_INVALID);
    assert_int_equal(hc_mlx5_model_cq_create(m, 100, &cq), HCOMM_OK);
    assert_int_equal(cq.cqe_cnt, 128);
    assert_int_equal(hc_mlx5_model_qp_create(m, 77, 64, 16, 64, &qp, &qpn), HCOMM_ERR_INVALID);
    assert_int_equal(hc_mlx5_model_qp_create(m, cq.cqn, 48, 16, 64, &qp, &qpn), HCOMM_ERR_INVALID);
    assert_non_null(strstr(hc_error_last(), "sq_wqe 48"));
    assert_int_equal(hc_mlx5_model_qp_create(m, cq.cqn, 64, 12, 64, &qp, &qpn), HCOMM_ERR_INVALID);
    assert_non_null(strstr(hc_error_last(), "rq_wqe 12"));
    assert_int_equal(hc_mlx5_model_qp_create(m, cq.cqn, 2, 16, 256, &qp, &qpn), HCOMM_ERR_INVALID);
    assert_int_equal(hc_mlx5_model_reg(m, dst, 64, IBV_ACCESS_REMOTE_WRITE, &qpn),
                     HCOMM_ERR_INVALID);
    uint8_t id[HC_MLX5_MODEL_ID_LEN];
    hc_mlx5_model_id(m, id);
    assert_int_equal(hc_mlx5_model_qp_create(m, cq.cqn, 64, 16, 64, &qp, &qpn), HCOMM_OK);
    assert_int_not_equal(hc_mlx5_model_qp_connect(m, qpn, id, 400), HCOMM_OK); /* no such QP */
    id[8] ^= 1; /* another nonce: not this model, and not a live one */
    assert_int_not_equal(hc_mlx5_model_qp_connect(m, qpn, id, qpn), HCOMM_OK);
    hc_mlx5_model_close(m);
}

/* ---- a forked child process as the target ---------------------------------------------------- */

typedef struct {
    uint8_t id[HC_MLX5_MODEL_ID_LEN];
    uint32_t qpn, key, rkey_rbuf;
    uint64_t addr;
} hello_t;

static uint8_t child_buf[8192], child_rbuf[256];

static bool xread(int fd, void *p, size_t n)
{
    uint8_t *b = p;
    while (n) {
        ssize_t r = read(fd, b, n);
        if (r <= 0) return false;
        b += r;
        n -= (size_t)r;
    }
    return true;
}

static bool xwrite(int fd, const void *p, size_t n)
{
    return write(fd, p, n) == (ssize_t)n;
}

/* The child's model, CQ and QP: 0, or the exit status for what failed. */
static int child_open(hc_mlx5_model_t **m, tcq_t *c, tqp_t *q)
{
    memset(c, 0, sizeof(*c));
    memset(q, 0, sizeof(*q));
    if (hc_mlx5_model_open(m, "") != HCOMM_OK) return 10;
    q->m = *m;
    if (hc_mlx5_model_cq_create(*m, 16, &c->dv) != HCOMM_OK) return 11;
    if (hc_mlx5_model_qp_create(*m, c->dv.cqn, 64, 16, 64, &q->dv, &q->qpn) != HCOMM_OK) return 12;
    return 0;
}

/* The child's hello (its id and QP number filled in here) to the parent,
 * the parent's back, connected, and a byte to say so: 0, or an exit status. */
static int child_hello(hc_mlx5_model_t *m, tqp_t *q, hello_t *h, int rfd, int wfd)
{
    h->qpn = q->qpn;
    hc_mlx5_model_id(m, h->id);
    if (!xwrite(wfd, h, sizeof(*h))) return 15;
    hello_t ph;
    if (!xread(rfd, &ph, sizeof(ph))) return 16;
    if (hc_mlx5_model_qp_connect(m, q->qpn, ph.id, ph.qpn) != HCOMM_OK) return 17;
    uint8_t ok = 1;
    if (!xwrite(wfd, &ok, 1)) return 18;
    return 0;
}

/* The parent's side of a case with a forked child as the target. */
typedef struct {
    pid_t pid;
    int rfd, wfd; /* the parent's ends of the two pipes */
    hello_t ch;   /* the child's hello */
    hc_mlx5_model_t *m;
    tcq_t c;
    tqp_t q;
} parent_t;

/* Forks a child that runs child(rfd, wfd) and exits with what it returns;
 * then the child's hello read, this side's model, CQ and QP made and
 * connected to the child's, and the child's byte that it is too. */
static void parent_open(parent_t *t, int (*child)(int rfd, int wfd))
{
    int p2c[2], c2p[2];
    assert_int_equal(pipe(p2c), 0);
    assert_int_equal(pipe(c2p), 0);
    fflush(NULL);
    t->pid = fork();
    assert_true(t->pid >= 0);
    if (t->pid == 0) {
        close(p2c[1]);
        close(c2p[0]);
        _exit(child(p2c[0], c2p[1]));
    }
    close(p2c[0]);
    close(c2p[1]);
    t->rfd = c2p[0];
    t->wfd = p2c[1];
    if (!xread(t->rfd, &t->ch, sizeof(t->ch))) {
        int status = 0;
        waitpid(t->pid, &status, 0);
        fail_msg("the child did not start (exit %d)", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    }
    t->m = model_open("");
    cq_open(t->m, &t->c, 16);
    qp_open(t->m, &t->q, &t->c, 64, 16);
    hello_t h = {.qpn = t->q.qpn};
    hc_mlx5_model_id(t->m, h.id);
    assert_true(xwrite(t->wfd, &h, sizeof(h)));
    if (hc_mlx5_model_qp_connect(t->m, t->q.qpn, t->ch.id, t->ch.qpn) != HCOMM_OK)
        fail_msg("connect to the child: %s", hc_error_last());
    uint8_t ok = 0;
    assert_true(xread(t->rfd, &ok, 1));
}

static void parent_close(parent_t *t)
{
    close(t->wfd);
    close(t->rfd);
    hc_mlx5_model_qp_destroy(t->m, t->q.qpn);
    hc_mlx5_model_cq_destroy(t->m, t->c.dv.cqn);
    hc_mlx5_model_close(t->m);
}

static void kill_child(parent_t *t)
{
    kill(t->pid, SIGKILL);
    int status;
    assert_int_equal(waitpid(t->pid, &status, 0), t->pid);
}

/* A command to the child, and its answer: 1. */
static void child_says_ok(parent_t *t, const char *cmd)
{
    uint8_t ok = 0;
    assert_true(xwrite(t->wfd, cmd, 1));
    assert_true(xread(t->rfd, &ok, 1));
    assert_int_equal(ok, 1);
}

static int child_main(int rfd, int wfd)
{
    hc_mlx5_model_t *m;
    tcq_t c;
    tqp_t q;
    int rc = child_open(&m, &c, &q);
    if (rc) return rc;
    fill(child_buf, sizeof(child_buf), 21);
    memset(child_rbuf, 0, sizeof(child_rbuf));
    hello_t h = {.addr = (uintptr_t)child_buf};
    if (hc_mlx5_model_reg(m, child_buf, sizeof(child_buf), RW, &h.key) != HCOMM_OK) return 13;
    uint32_t kr;
    if (hc_mlx5_model_reg(m, child_rbuf, sizeof(child_rbuf), IBV_ACCESS_LOCAL_WRITE, &kr) !=
        HCOMM_OK)
        return 14;
    post_recv(&q, child_rbuf, sizeof(child_rbuf), kr);
    rc = child_hello(m, &q, &h, rfd, wfd);
    if (rc) return rc;
    char cmd;
    while (xread(rfd, &cmd, 1)) {
        uint8_t ok = 1;
        if (cmd == 'c') { /* the parent's WRITE landed */
            for (uint32_t i = 0; i < 4096; i++)
                if (child_buf[i] != pat(22, i)) ok = 0;
        } else if (cmd == 's') { /* the parent's SEND: a CQE in this process's CQ */
            struct mlx5_cqe64 e;
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            bool got = false;
            do {
                hc_mlx5_model_progress(m);
                got = poll1(&c, &e);
                clock_gettime(CLOCK_MONOTONIC, &t1);
            } while (!got && t1.tv_sec - t0.tv_sec < 10);
            ok = got && (e.op_own >> 4) == MLX5_CQE_RESP_SEND && be32toh(e.byte_cnt) == 123 &&
                 (be32toh(e.sop_drop_qpn) & 0xffffff) == q.qpn;
            for (uint32_t i = 0; i < 123; i++)
                if (child_rbuf[i] != pat(23, i)) ok = 0;
        }
        if (!xwrite(wfd, &ok, 1)) break;
    }
    return 0;
}

static void test_child_peer(void **state)
{
    (void)state;
    parent_t t;
    parent_open(&t, child_main);
    const void *caddr = (const void *)(uintptr_t)t.ch.addr;
    uint32_t kl = reg(t.m, dst, sizeof(dst), IBV_ACCESS_LOCAL_WRITE);
    uint32_t ks = reg(t.m, src, sizeof(src), 0);
    /* READ the child's memory */
    memset(dst, 0, 8192);
    run_ok(&t.q, &t.c, wr_rdma(OP_READ, dst, kl, caddr, t.ch.key, 8192, true), DB8);
    check(dst, 8192, 21);
    /* WRITE into it */
    fill(src, 4096, 22);
    run_ok(&t.q, &t.c, wr_rdma(OP_WRITE, src, ks, caddr, t.ch.key, 4096, true), DB_BF);
    child_says_ok(&t, "c");
    /* SEND into its receive: the CQE lands in the child's CQ */
    fill(src, 123, 23);
    run_ok(&t.q, &t.c, wr_send(src, ks, 123, true), DB8);
    child_says_ok(&t, "s");
    /* the child killed: the next WRITE fails with TRANSPORT_RETRY_EXC_ERR */
    kill_child(&t);
    uint16_t i = post_wr(&t.q, wr_rdma(OP_WRITE, src, ks, caddr, t.ch.key, 64, false));
    uint16_t i2 = post_wr(&t.q, wr_rdma(OP_WRITE, src, ks, caddr, t.ch.key, 64, true));
    ring(&t.q, DB8);
    expect_req_err(&t.c, SYN(TRANSPORT_RETRY_EXC_ERR), t.q.qpn, i, OP_WRITE);
    expect_req_err(&t.c, SYN(WR_FLUSH_ERR), t.q.qpn, i2, OP_WRITE);
    expect_none(&t.c);
    parent_close(&t);
}

/* A child that connects and then posts nothing. */
static int child_idle(int rfd, int wfd)
{
    hc_mlx5_model_t *m;
    tcq_t c;
    tqp_t q;
    hello_t h = {0};
    int rc = child_open(&m, &c, &q);
    if (!rc) rc = child_hello(m, &q, &h, rfd, wfd);
    if (rc) return rc;
    char cmd;
    while (xread(rfd, &cmd, 1)) {
    }
    return 0;
}

/* A SEND to a dead child with no receive posted: not an endless RNR wait. */
static void test_child_gone_rnr(void **state)
{
    (void)state;
    parent_t t;
    parent_open(&t, child_idle);
    uint32_t ks = reg(t.m, src, 64, 0);
    uint16_t i = post_ring(&t.q, wr_send(src, ks, 8, true), DB8);
    expect_none(&t.c); /* RNR: the child posted nothing */
    assert_int_equal(stats(t.m).rnr_waits, 1);
    kill_child(&t);
    hc_mlx5_model_progress(t.m);
    expect_req_err(&t.c, SYN(TRANSPORT_RETRY_EXC_ERR), t.q.qpn, i, OP_SEND);
    parent_close(&t);
}

/* The cases on the pair fixture; ON_PAIR_CQ with the CQs' size. */
#define ON_PAIR(f) cmocka_unit_test_setup_teardown(f, pair_setup, pair_teardown)
#define ON_PAIR_CQ(f, cqe)                                                                         \
    cmocka_unit_test_prestate_setup_teardown(f, pair_setup, pair_teardown, (void *)(uintptr_t)(cqe))

int main(void)
{
    const struct CMUnitTest tests[] = {
        ON_PAIR(test_write),
        ON_PAIR(test_send_recv),
        ON_PAIR(test_read),
        ON_PAIR(test_unsignaled),
        ON_PAIR_CQ(test_sq_wrap, 16),
        ON_PAIR_CQ(test_index_wrap, 4),
        ON_PAIR_CQ(test_cq_wrap, 3),
        ON_PAIR_CQ(test_cq_overrun, 2),
        ON_PAIR(test_rnr),
        ON_PAIR(test_defer),
        ON_PAIR(test_err_lkey),
        cmocka_unit_test(test_err_rkey),
        ON_PAIR(test_err_length),
        cmocka_unit_test(test_err_qp),
        cmocka_unit_test(test_stale_key),
        cmocka_unit_test(test_fault_spec),
        cmocka_unit_test(test_fault_inject),
        ON_PAIR(test_bad_doorbell),
        cmocka_unit_test(test_create_args),
        cmocka_unit_test(test_child_peer),
        cmocka_unit_test(test_child_gone_rnr),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
