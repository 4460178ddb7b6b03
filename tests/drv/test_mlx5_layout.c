/*
 * drv/mlx5: the bytes the data path writes, checked against WQEs and CQEs
 * assembled here by hand from the layout documented in rdma-core's mlx5dv.h
 * and the ConnectX programmer's reference (send WQE: 16-byte control
 * segment {opmod:8 | wqe_index:16 | opcode:8, qpn:24 | ds:6, signature,
 * stream id:16, fm_ce_se, immediate}, remote-address segment {raddr:64,
 * rkey:32, 0}, data segment {byte_count:32, lkey:32, addr:64}, inline
 * segment {byte_count | 0x80000000, bytes...}; all big-endian; 64-byte
 * WQEBBs). The expected images below use no mlx5dv.h struct or helper, so
 * a mistake in how the driver fills them shows.
 *
 * The queues are plain memory here: no NIC and no model; the doorbell
 * register is a buffer whose contents are compared too.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "drv/mlx5/mlx5.h"

#include <stdlib.h>
#include <string.h>

#define SQ_BBS 64
#define RQ_N 16

typedef struct {
    uint8_t *sq, *rq, *bf;
    __be32 dbrec[2];
    hc_mlx5_qp_t q;
} fixture_t;

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static void put_be64(uint8_t *p, uint64_t v)
{
    put_be32(p, (uint32_t)(v >> 32));
    put_be32(p + 4, (uint32_t)v);
}

static void put_be16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static fixture_t *fx_new(int mmio, uint32_t bf_size)
{
    fixture_t *f = calloc(1, sizeof(*f));
    f->sq = aligned_alloc(64, SQ_BBS * 64);
    f->rq = aligned_alloc(64, RQ_N * 16);
    f->bf = aligned_alloc(64, 1024);
    memset(f->sq, 0xee, SQ_BBS * 64);
    memset(f->rq, 0xee, RQ_N * 16);
    memset(f->bf, 0, 1024);
    struct mlx5dv_qp dv = {.dbrec = f->dbrec,
                           .sq = {.buf = f->sq, .wqe_cnt = SQ_BBS, .stride = 64},
                           .rq = {.buf = f->rq, .wqe_cnt = RQ_N, .stride = 16},
                           .bf = {.reg = f->bf, .size = bf_size}};
    assert_int_equal(hc_mlx5_qp_setup(&f->q, &dv, 0x1234, 256, mmio), HCOMM_OK);
    return f;
}

static void fx_free(fixture_t *f)
{
    hc_mlx5_qp_cleanup(&f->q);
    free(f->sq);
    free(f->rq);
    free(f->bf);
    free(f);
}

/* The control segment a WQE at index idx must start with. */
static void ctrl_image(uint8_t *e, uint16_t idx, uint8_t opcode, uint32_t qpn, uint8_t ds, bool ce,
                       uint32_t imm_host)
{
    memset(e, 0, 16);
    put_be32(e, (uint32_t)idx << 8 | opcode);
    put_be32(e + 4, qpn << 8 | ds);
    e[11] = ce ? 0x08 : 0x00; /* CQ update: 2 << 2 */
    put_be32(e + 12, imm_host);
}

static void t_write(void **state)
{
    (void)state;
    fixture_t *f = fx_new(HC_MLX5_MMIO_DB, 256);
    hc_verbs_wr_t wr = {.op = HC_VERBS_OP_WRITE, .laddr = 0x1122334455667788ull, .len = 8,
                        .lkey = 0xaabbccdd, .raddr = 0x0102030405060708ull, .rkey = 0x99887766,
                        .signal = true, .wr_id = 42};
    int posted = -1;
    assert_int_equal(hc_mlx5_post(&f->q, &wr, 1, &posted), 0);
    assert_int_equal(posted, 1);
    uint8_t e[64];
    memset(e, 0xee, sizeof(e));
    ctrl_image(e, 0, 0x08, 0x1234, 3, true, 0);
    put_be64(e + 16, 0x0102030405060708ull);
    put_be32(e + 24, 0x99887766);
    put_be32(e + 28, 0);
    put_be32(e + 32, 8);
    put_be32(e + 36, 0xaabbccdd);
    put_be64(e + 40, 0x1122334455667788ull);
    assert_memory_equal(f->sq, e, 48);
    /* The doorbell record: the producer index (1 WQEBB), big-endian. */
    uint8_t db[4];
    put_be32(db, 1);
    assert_memory_equal(&f->dbrec[MLX5_SND_DBR], db, 4);
    /* The 8-byte doorbell: the first 8 bytes of the control segment. */
    assert_memory_equal(f->bf, e, 8);
    assert_int_equal(f->q.bf_off, 256);
    fx_free(f);
}

static void t_opcodes(void **state)
{
    (void)state;
    fixture_t *f = fx_new(HC_MLX5_MMIO_DB, 256);
    hc_verbs_wr_t w[4] = {
        {.op = HC_VERBS_OP_WRITE_IMM, .laddr = 0x1000, .len = 100, .lkey = 7, .raddr = 0x2000, .rkey = 9, .imm = 0xdeadbeef},
        {.op = HC_VERBS_OP_READ, .laddr = 0x3000, .len = 1 << 20, .lkey = 7, .raddr = 0x4000, .rkey = 9, .signal = true},
        {.op = HC_VERBS_OP_SEND, .laddr = 0x5000, .len = 64, .lkey = 7},
        {.op = HC_VERBS_OP_WRITE, .laddr = 0, .len = 0, .raddr = 0x6000, .rkey = 9},
    };
    int posted = 0;
    assert_int_equal(hc_mlx5_post(&f->q, w, 4, &posted), 0);
    assert_int_equal(posted, 4);
    uint8_t e[64];
    /* WRITE WITH IMMEDIATE: the immediate big-endian in the control segment. */
    ctrl_image(e, 0, 0x09, 0x1234, 3, false, 0xdeadbeef);
    put_be64(e + 16, 0x2000);
    put_be32(e + 24, 9);
    put_be32(e + 28, 0);
    put_be32(e + 32, 100);
    put_be32(e + 36, 7);
    put_be64(e + 40, 0x1000);
    assert_memory_equal(f->sq, e, 48);
    /* RDMA READ at index 1. */
    ctrl_image(e, 1, 0x10, 0x1234, 3, true, 0);
    put_be64(e + 16, 0x4000);
    put_be32(e + 24, 9);
    put_be32(e + 28, 0);
    put_be32(e + 32, 1 << 20);
    put_be32(e + 36, 7);
    put_be64(e + 40, 0x3000);
    assert_memory_equal(f->sq + 64, e, 48);
    /* SEND: no remote address, the data segment follows the control. */
    ctrl_image(e, 2, 0x0a, 0x1234, 2, false, 0);
    put_be32(e + 16, 64);
    put_be32(e + 20, 7);
    put_be64(e + 24, 0x5000);
    assert_memory_equal(f->sq + 128, e, 32);
    /* A zero-length WRITE has no data segment (a byte count of 0 means 2 GiB). */
    ctrl_image(e, 3, 0x08, 0x1234, 2, false, 0);
    put_be64(e + 16, 0x6000);
    put_be32(e + 24, 9);
    put_be32(e + 28, 0);
    assert_memory_equal(f->sq + 192, e, 32);
    /* One doorbell for the four, carrying the last WQE's control bytes. */
    assert_int_equal(f->q.n_db, 1);
    assert_memory_equal(f->bf, f->sq + 192, 8);
    fx_free(f);
}

static void t_inline_and_bf(void **state)
{
    (void)state;
    fixture_t *f = fx_new(HC_MLX5_MMIO_BF, 256);
    uint8_t data[20];
    for (int i = 0; i < 20; i++)
        data[i] = (uint8_t)(0x40 + i);
    hc_verbs_wr_t wr = {.op = HC_VERBS_OP_WRITE, .laddr = (uint64_t)(uintptr_t)data, .len = 20,
                        .inl = true, .raddr = 0x7000, .rkey = 0x55, .signal = true};
    int posted = 0;
    assert_int_equal(hc_mlx5_post(&f->q, &wr, 1, &posted), 0);
    /* ds: ctrl 1 + raddr 1 + (4 + 20 bytes -> 2) = 4. */
    uint8_t e[64];
    memset(e, 0, sizeof(e));
    ctrl_image(e, 0, 0x08, 0x1234, 4, true, 0);
    put_be64(e + 16, 0x7000);
    put_be32(e + 24, 0x55);
    put_be32(e + 32, 0x80000000u | 20);
    memcpy(e + 36, data, 20);
    assert_memory_equal(f->sq, e, 56);
    /* BlueFlame: the whole WQEBB in the register's first half. */
    assert_memory_equal(f->bf, f->sq, 64);
    assert_int_equal(f->q.n_bf, 1);
    /* The next doorbell goes to the other half. */
    assert_int_equal(f->q.bf_off, 256);
    assert_int_equal(hc_mlx5_post(&f->q, &wr, 1, &posted), 0);
    assert_memory_equal(f->bf + 256, f->sq + 64, 64);
    assert_int_equal(f->q.bf_off, 0);
    /* Two WQEs behind one doorbell: no BlueFlame, the 8-byte doorbell. */
    hc_verbs_wr_t two[2] = {wr, wr};
    memset(f->bf, 0, 512);
    assert_int_equal(hc_mlx5_post(&f->q, two, 2, &posted), 0);
    assert_memory_equal(f->bf, f->sq + 3 * 64, 8);
    uint8_t zero[56] = {0};
    assert_memory_equal(f->bf + 8, zero, 56);
    /* READ cannot be inline; an inline payload above the room is refused. */
    hc_verbs_wr_t bad = wr;
    bad.op = HC_VERBS_OP_READ;
    assert_int_equal(hc_mlx5_post(&f->q, &bad, 1, &posted), EINVAL);
    assert_int_equal(posted, 0);
    bad = wr;
    bad.len = 257;
    assert_int_equal(hc_mlx5_post(&f->q, &bad, 1, &posted), EINVAL);
    fx_free(f);
}

/* A 5-WQEBB inline WQE straddling the ring's end: its segments and bytes
 * continue at the ring's start. */
static void t_wrap(void **state)
{
    (void)state;
    fixture_t *f = fx_new(HC_MLX5_MMIO_DB, 256);
    uint8_t data[256];
    for (int i = 0; i < 256; i++)
        data[i] = (uint8_t)(i * 7 + 1);
    /* Fill up to the last WQEBB with one-block WQEs, retiring as we go. */
    hc_verbs_wr_t one = {.op = HC_VERBS_OP_WRITE, .laddr = 0x10, .len = 8, .lkey = 1, .raddr = 0x20, .rkey = 2};
    int posted;
    for (int i = 0; i < SQ_BBS - 2; i++)
        assert_int_equal(hc_mlx5_post(&f->q, &one, 1, &posted), 0);
    f->q.sq_ci = f->q.sq_pi; /* as if completions came */
    assert_int_equal(f->q.sq_pi, SQ_BBS - 2);
    hc_verbs_wr_t big = {.op = HC_VERBS_OP_WRITE, .laddr = (uint64_t)(uintptr_t)data, .len = 256,
                         .inl = true, .raddr = 0xabc0, .rkey = 3, .signal = true, .wr_id = 77};
    assert_int_equal(hc_mlx5_post(&f->q, &big, 1, &posted), 0);
    /* ds = 2 + (4 + 256 + 15) / 16 = 19 -> 304 bytes -> 5 WQEBBs. */
    assert_int_equal(f->q.sq_pi, SQ_BBS - 2 + 5);
    uint8_t img[5 * 64];
    memset(img, 0, sizeof(img));
    ctrl_image(img, SQ_BBS - 2, 0x08, 0x1234, 19, true, 0);
    put_be64(img + 16, 0xabc0);
    put_be32(img + 24, 3);
    put_be32(img + 32, 0x80000000u | 256);
    memcpy(img + 36, data, 256);
    /* Blocks 62, 63 at the ring's end, then 0, 1, 2. */
    uint8_t got[5 * 64];
    memcpy(got, f->sq + (SQ_BBS - 2) * 64, 128);
    memcpy(got + 128, f->sq, 192);
    assert_memory_equal(got, img, 36 + 256);
    /* The completion of that WQE frees all five blocks. */
    uint8_t cq[64 * 4];
    memset(cq, 0, sizeof(cq));
    for (int i = 0; i < 4; i++)
        cq[i * 64 + 63] = 0xf0; /* INVALID, owner 0 */
    __be32 cdb[2] = {0, 0};
    struct mlx5dv_cq dcq = {.buf = cq, .dbrec = cdb, .cqe_cnt = 4, .cqe_size = 64, .cqn = 5};
    hc_mlx5_cq_t c;
    assert_int_equal(hc_mlx5_cq_setup(&c, &dcq), HCOMM_OK);
    assert_int_equal(hc_mlx5_cq_attach(&c, &f->q), HCOMM_OK);
    uint8_t *cqe = cq;
    put_be16(cqe + 60, (uint16_t)(SQ_BBS - 2));
    put_be32(cqe + 56, 0x1234);
    cqe[63] = 0x00; /* REQ, owner 0 */
    struct ibv_wc wc[4];
    assert_int_equal(hc_mlx5_poll(&c, wc, 4), 1);
    assert_int_equal(wc[0].wr_id, 77);
    assert_int_equal(wc[0].status, IBV_WC_SUCCESS);
    assert_int_equal(f->q.sq_ci, f->q.sq_pi);
    hc_mlx5_cq_cleanup(&c);
    fx_free(f);
}

/* The 16-bit WQE index wraps with the producer counter. */
static void t_index_wrap(void **state)
{
    (void)state;
    fixture_t *f = fx_new(HC_MLX5_MMIO_DB, 0);
    f->q.sq_pi = f->q.sq_ci = 65535;
    hc_verbs_wr_t one = {.op = HC_VERBS_OP_SEND, .laddr = 0x10, .len = 8, .lkey = 1};
    int posted;
    assert_int_equal(hc_mlx5_post(&f->q, &one, 1, &posted), 0);
    assert_int_equal(hc_mlx5_post(&f->q, &one, 1, &posted), 0);
    uint8_t e[16];
    ctrl_image(e, 0xffff, 0x0a, 0x1234, 2, false, 0);
    assert_memory_equal(f->sq + (65535 % SQ_BBS) * 64, e, 16);
    ctrl_image(e, 0x0000, 0x0a, 0x1234, 2, false, 0);
    assert_memory_equal(f->sq + (65536 % SQ_BBS) * 64, e, 16);
    uint8_t db[4];
    put_be32(db, 1); /* (65535 + 2) & 0xffff */
    assert_memory_equal(&f->dbrec[MLX5_SND_DBR], db, 4);
    /* No BlueFlame register (size 0): the doorbell stays on one word. */
    assert_int_equal(f->q.bf_off, 0);
    fx_free(f);
}

static void t_full(void **state)
{
    (void)state;
    fixture_t *f = fx_new(HC_MLX5_MMIO_DB, 256);
    hc_verbs_wr_t one = {.op = HC_VERBS_OP_WRITE, .laddr = 0x10, .len = 8, .lkey = 1, .raddr = 0x20, .rkey = 2};
    int posted;
    for (int i = 0; i < SQ_BBS; i++)
        assert_int_equal(hc_mlx5_post(&f->q, &one, 1, &posted), 0);
    assert_int_equal(hc_mlx5_post(&f->q, &one, 1, &posted), EAGAIN);
    assert_int_equal(posted, 0);
    fx_free(f);
}

static void t_recv(void **state)
{
    (void)state;
    fixture_t *f = fx_new(HC_MLX5_MMIO_DB, 256);
    assert_int_equal(hc_mlx5_post_recv(&f->q, 0x1122334455667788ull, 8192, 0x42, 9), 0);
    uint8_t e[16];
    put_be32(e, 8192);
    put_be32(e + 4, 0x42);
    put_be64(e + 8, 0x1122334455667788ull);
    assert_memory_equal(f->rq, e, 16);
    uint8_t db[4];
    put_be32(db, 1);
    assert_memory_equal(&f->dbrec[MLX5_RCV_DBR], db, 4);
    for (int i = 1; i < RQ_N; i++)
        assert_int_equal(hc_mlx5_post_recv(&f->q, 0x1000, 64, 0x42, (uint64_t)i), 0);
    assert_int_equal(hc_mlx5_post_recv(&f->q, 0x1000, 64, 0x42, 99), ENOMEM); /* full */
    fx_free(f);
}

/* CQEs assembled by hand: requester, responder with and without immediate,
 * an error CQE, the owner bit on the second pass, 128-byte CQEs. */
static void cqe_image(uint8_t *c, uint8_t opcode, bool owner, uint32_t qpn, uint16_t counter,
                      uint32_t byte_cnt, uint32_t imm_be_host)
{
    memset(c, 0, 64);
    put_be32(c + 36, imm_be_host);
    put_be32(c + 44, byte_cnt);
    put_be32(c + 56, qpn);
    put_be16(c + 60, counter);
    c[63] = (uint8_t)(opcode << 4 | (owner ? 1 : 0));
}

static void t_cqe(void **state)
{
    (void)state;
    for (uint32_t size = 64; size <= 128; size += 64) {
        fixture_t *f = fx_new(HC_MLX5_MMIO_DB, 256);
        uint8_t *buf = aligned_alloc(64, 4 * size);
        memset(buf, 0, 4 * size);
        for (int i = 0; i < 4; i++)
            buf[i * size + size - 1] = 0xf0;
        __be32 cdb[2] = {0, 0};
        struct mlx5dv_cq dcq = {.buf = buf, .dbrec = cdb, .cqe_cnt = 4, .cqe_size = size, .cqn = 5};
        hc_mlx5_cq_t c;
        assert_int_equal(hc_mlx5_cq_setup(&c, &dcq), HCOMM_OK);
        assert_int_equal(hc_mlx5_cq_attach(&c, &f->q), HCOMM_OK);
        hc_verbs_wr_t w = {.op = HC_VERBS_OP_WRITE, .laddr = 0x10, .len = 8, .lkey = 1, .raddr = 0x20,
                           .rkey = 2, .signal = true};
        int posted;
        for (int i = 0; i < 6; i++) {
            w.wr_id = 100 + (uint64_t)i;
            assert_int_equal(hc_mlx5_post(&f->q, &w, 1, &posted), 0);
        }
        for (int i = 0; i < 3; i++)
            assert_int_equal(hc_mlx5_post_recv(&f->q, 0x9000, 64, 3, 200 + (uint64_t)i), 0);
        uint8_t *c64 = buf + size - 64; /* the 64-byte CQE is a slot's last 64 bytes */
        struct ibv_wc wc[8];
        assert_int_equal(hc_mlx5_poll(&c, wc, 8), 0); /* all invalid */
        cqe_image(c64 + 0 * size, MLX5_CQE_REQ, false, 0x1234, 0, 0, 0);
        cqe_image(c64 + 1 * size, MLX5_CQE_RESP_SEND, false, 0x1234, 0, 64, 0);
        cqe_image(c64 + 2 * size, MLX5_CQE_RESP_WR_IMM, false, 0x1234, 1, 4096, 0xcafe0001);
        /* An error CQE: syndrome remote access (0x13), vendor syndrome 0x88. */
        uint8_t *e = c64 + 3 * size;
        cqe_image(e, MLX5_CQE_REQ_ERR, false, 0x1234, 2, 0, 0);
        e[54] = 0x88;
        e[55] = 0x13;
        assert_int_equal(hc_mlx5_poll(&c, wc, 8), 4);
        assert_int_equal(wc[0].wr_id, 100);
        assert_int_equal(wc[0].status, IBV_WC_SUCCESS);
        assert_int_equal(wc[0].qp_num, 0x1234);
        assert_int_equal(wc[1].wr_id, 200);
        assert_int_equal(wc[1].byte_len, 64);
        assert_int_equal(wc[1].opcode, IBV_WC_RECV);
        assert_int_equal(wc[2].wr_id, 201);
        assert_int_equal(wc[2].byte_len, 4096);
        assert_true(wc[2].wc_flags & IBV_WC_WITH_IMM);
        assert_int_equal(be32toh(wc[2].imm_data), 0xcafe0001);
        assert_int_equal(wc[3].wr_id, 102);
        assert_int_equal(wc[3].status, IBV_WC_REM_ACCESS_ERR);
        assert_int_equal(wc[3].vendor_err, 0x88);
        /* The consumer index doorbell record: 4, big-endian. */
        uint8_t db[4];
        put_be32(db, 4);
        assert_memory_equal(&cdb[0], db, 4);
        /* Second pass: an old CQE (owner 0) is not new; owner 1 is. */
        assert_int_equal(hc_mlx5_poll(&c, wc, 8), 0);
        cqe_image(c64, MLX5_CQE_REQ, true, 0x1234, 5, 0, 0);
        assert_int_equal(hc_mlx5_poll(&c, wc, 8), 1);
        assert_int_equal(wc[0].wr_id, 105);
        /* A CQE of a QP not on this CQ: reported by number, flushed. */
        cqe_image(c64 + size, MLX5_CQE_REQ, true, 0x777, 0, 0, 0);
        assert_int_equal(hc_mlx5_poll(&c, wc, 8), 1);
        assert_int_equal(wc[0].qp_num, 0x777);
        assert_int_not_equal(wc[0].status, IBV_WC_SUCCESS);
        hc_mlx5_cq_cleanup(&c);
        free(buf);
        fx_free(f);
    }
}

static void t_reject(void **state)
{
    (void)state;
    uint8_t buf[4096];
    __be32 db[2];
    struct mlx5dv_qp dv = {.dbrec = db,
                           .sq = {.buf = buf, .wqe_cnt = 64, .stride = 128},
                           .bf = {.reg = buf, .size = 256}};
    hc_mlx5_qp_t q;
    assert_int_equal(hc_mlx5_qp_setup(&q, &dv, 1, 0, HC_MLX5_MMIO_DB), HCOMM_ERR_UNSUPPORTED);
    assert_non_null(strstr(hc_error_last(), "stride 128"));
    dv.sq.stride = 64;
    dv.sq.wqe_cnt = 48;
    assert_int_equal(hc_mlx5_qp_setup(&q, &dv, 1, 0, HC_MLX5_MMIO_DB), HCOMM_ERR_UNSUPPORTED);
    assert_non_null(strstr(hc_error_last(), "power of two"));
    dv.sq.wqe_cnt = 64;
    dv.bf.size = 0;
    assert_int_equal(hc_mlx5_qp_setup(&q, &dv, 1, 0, HC_MLX5_MMIO_BF), HCOMM_ERR_UNSUPPORTED);
    assert_non_null(strstr(hc_error_last(), "BlueFlame"));
    struct mlx5dv_cq dc = {.buf = buf, .dbrec = db, .cqe_cnt = 64, .cqe_size = 32};
    hc_mlx5_cq_t c;
    assert_int_equal(hc_mlx5_cq_setup(&c, &dc), HCOMM_ERR_UNSUPPORTED);
    assert_non_null(strstr(hc_error_last(), "32-byte CQEs"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(t_write),  cmocka_unit_test(t_opcodes), cmocka_unit_test(t_inline_and_bf),
        cmocka_unit_test(t_wrap),   cmocka_unit_test(t_index_wrap), cmocka_unit_test(t_full),
        cmocka_unit_test(t_recv),   cmocka_unit_test(t_cqe),     cmocka_unit_test(t_reject),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
