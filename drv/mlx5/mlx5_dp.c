/*
 * mlx5: the data path (docs/mlx5.md). No ibverbs call here: WQEs are
 * written in place in the send queue, the doorbell record is bumped and the
 * doorbell rung (an 8-byte write of the WQE's first control bytes, or a
 * BlueFlame copy of the whole WQE), receives are written into the receive
 * queue, and completions are read from the CQ by their owner bit.
 *
 * Send queue bookkeeping: sq_pi counts WQEBBs posted (the doorbell record
 * holds its low 16 bits, each control segment the 16-bit index of its first
 * WQEBB); per first WQEBB the wr_id, the opcode and the WQEBB count are kept,
 * so a CQE's wqe_counter says which WQE completed and, RC completing in
 * order, that every WQEBB up to its end is free again (sq_ci).
 *
 * The CQ: CQE i is valid once its owner bit equals bit log2(cnt) of i (the
 * pass over the ring) and its opcode is not INVALID; the consumer index
 * doorbell record is written after each poll that took CQEs, once their
 * reads are done, so the NIC never overwrites a CQE being read.
 */
#include "drv/mlx5/mlx5.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static bool hc_mlx5_pow2(uint32_t v)
{
    return v && !(v & (v - 1));
}

hcomm_status_t hc_mlx5_qp_setup(hc_mlx5_qp_t *q, const struct mlx5dv_qp *dv, uint32_t qpn,
                                uint32_t max_inline, int mmio)
{
    *q = (hc_mlx5_qp_t){0};
    if (dv->sq.stride != MLX5_SEND_WQE_BB)
        return hc_error(HCOMM_ERR_UNSUPPORTED, "mlx5: send queue stride %u (the data path writes %d-byte WQEBBs)",
                        dv->sq.stride, MLX5_SEND_WQE_BB);
    if (!hc_mlx5_pow2(dv->sq.wqe_cnt) || dv->sq.wqe_cnt > 65536 || dv->sq.wqe_cnt < 2 * HC_MLX5_MAX_WQE_BBS)
        return hc_error(HCOMM_ERR_UNSUPPORTED,
                        "mlx5: send queue of %u WQEBBs (a power of two from %d to 65536 needed)",
                        dv->sq.wqe_cnt, 2 * HC_MLX5_MAX_WQE_BBS);
    if (dv->rq.wqe_cnt && (!hc_mlx5_pow2(dv->rq.wqe_cnt) || !hc_mlx5_pow2(dv->rq.stride) ||
                           dv->rq.stride < sizeof(struct mlx5_wqe_data_seg)))
        return hc_error(HCOMM_ERR_UNSUPPORTED,
                        "mlx5: receive queue of %u WQEs of %u bytes (powers of two, at least 16 bytes)",
                        dv->rq.wqe_cnt, dv->rq.stride);
    if (!dv->sq.buf || !dv->dbrec || !dv->bf.reg)
        return hc_error(HCOMM_ERR_UNSUPPORTED, "mlx5: the QP's buffers, doorbell record or UAR are not given");
    if (mmio == HC_MLX5_MMIO_BF && dv->bf.size < MLX5_SEND_WQE_BB)
        return hc_error(HCOMM_ERR_UNSUPPORTED,
                        "mlx5: HCOMM_MLX5_MMIO=bf but the QP's BlueFlame register has %u bytes "
                        "(none: use db or auto)", dv->bf.size);
    q->sq_buf = dv->sq.buf;
    q->sq_cnt = dv->sq.wqe_cnt;
    q->sq_mask = dv->sq.wqe_cnt - 1;
    q->dbrec = dv->dbrec;
    q->bf_reg = dv->bf.reg;
    q->bf_size = dv->bf.size;
    q->mmio = (uint8_t)mmio;
    q->qpn = qpn;
    q->max_inline = max_inline;
    q->rq_buf = dv->rq.buf;
    q->rq_cnt = dv->rq.wqe_cnt;
    q->rq_mask = dv->rq.wqe_cnt ? dv->rq.wqe_cnt - 1 : 0;
    q->rq_stride = dv->rq.stride;
    q->sq_wrid = calloc(q->sq_cnt, sizeof(*q->sq_wrid));
    q->sq_nbb = calloc(q->sq_cnt, 1);
    q->sq_op = calloc(q->sq_cnt, 1);
    q->rq_wrid = calloc(q->rq_cnt ? q->rq_cnt : 1, sizeof(*q->rq_wrid));
    if (!q->sq_wrid || !q->sq_nbb || !q->sq_op || !q->rq_wrid) {
        hc_mlx5_qp_cleanup(q);
        return hc_error(HCOMM_ERR_NO_MEMORY, "mlx5: queue bookkeeping for QP %u", qpn);
    }
    return HCOMM_OK;
}

void hc_mlx5_qp_cleanup(hc_mlx5_qp_t *q)
{
    free(q->sq_wrid);
    free(q->sq_nbb);
    free(q->sq_op);
    free(q->rq_wrid);
    q->sq_wrid = NULL;
    q->sq_nbb = q->sq_op = NULL;
    q->rq_wrid = NULL;
}

hcomm_status_t hc_mlx5_cq_setup(hc_mlx5_cq_t *cq, const struct mlx5dv_cq *dv)
{
    *cq = (hc_mlx5_cq_t){0};
    if (dv->cqe_size != 64 && dv->cqe_size != 128)
        return hc_error(HCOMM_ERR_UNSUPPORTED, "mlx5: %u-byte CQEs (64 or 128 handled)", dv->cqe_size);
    if (!hc_mlx5_pow2(dv->cqe_cnt) || !dv->buf || !dv->dbrec)
        return hc_error(HCOMM_ERR_UNSUPPORTED, "mlx5: a CQ of %u entries (a power of two needed)", dv->cqe_cnt);
    cq->buf = dv->buf;
    cq->cnt = dv->cqe_cnt;
    cq->mask = dv->cqe_cnt - 1;
    cq->cqe_size = dv->cqe_size;
    cq->dbrec = dv->dbrec;
    cq->cqn = dv->cqn;
    return HCOMM_OK;
}

void hc_mlx5_cq_cleanup(hc_mlx5_cq_t *cq)
{
    free(cq->qps);
    cq->qps = NULL;
    cq->nqps = cq->qps_cap = 0;
    cq->last = NULL;
}

hcomm_status_t hc_mlx5_cq_attach(hc_mlx5_cq_t *cq, hc_mlx5_qp_t *q)
{
    if (cq->nqps == cq->qps_cap) {
        uint32_t cap = cq->qps_cap ? 2 * cq->qps_cap : 16;
        hc_mlx5_qp_t **n = realloc(cq->qps, cap * sizeof(*n));
        if (!n) return hc_error(HCOMM_ERR_NO_MEMORY, "mlx5: CQ %u's QP table", cq->cqn);
        cq->qps = n;
        cq->qps_cap = cap;
    }
    cq->qps[cq->nqps++] = q;
    return HCOMM_OK;
}

void hc_mlx5_cq_detach(hc_mlx5_cq_t *cq, hc_mlx5_qp_t *q)
{
    for (uint32_t i = 0; i < cq->nqps; i++)
        if (cq->qps[i] == q) {
            cq->qps[i] = cq->qps[--cq->nqps];
            break;
        }
    if (cq->last == q) cq->last = NULL;
}

/* ---- send ------------------------------------------------------------------------------------- */

static const uint8_t hc_mlx5_opcode[] = {
    [HC_VERBS_OP_WRITE] = MLX5_OPCODE_RDMA_WRITE,
    [HC_VERBS_OP_WRITE_IMM] = MLX5_OPCODE_RDMA_WRITE_IMM,
    [HC_VERBS_OP_READ] = MLX5_OPCODE_RDMA_READ,
    [HC_VERBS_OP_SEND] = MLX5_OPCODE_SEND,
};

/* The next 16-byte segment after p in the ring (segments never straddle
 * its end: WQEBBs are 64 bytes, segments 16). */
static inline uint8_t *hc_mlx5_seg_next(const hc_mlx5_qp_t *q, uint8_t *p)
{
    p += 16;
    return p == q->sq_buf + (size_t)q->sq_cnt * MLX5_SEND_WQE_BB ? q->sq_buf : p;
}

/* Copies inline bytes into the ring from dst on, wrapping at its end. */
static inline void hc_mlx5_copy_inline(const hc_mlx5_qp_t *q, uint8_t *dst, const void *src, size_t len)
{
    uint8_t *end = q->sq_buf + (size_t)q->sq_cnt * MLX5_SEND_WQE_BB;
    size_t first = HC_MIN(len, (size_t)(end - dst));
    memcpy(dst, src, first);
    if (len > first) memcpy(q->sq_buf, (const uint8_t *)src + first, len - first);
}

int hc_mlx5_write_wqe(hc_mlx5_qp_t *q, const hc_verbs_wr_t *wr)
{
    if (HC_UNLIKELY(wr->op < HC_VERBS_OP_WRITE || wr->op > HC_VERBS_OP_SEND)) return EINVAL;
    bool raddr = wr->op != HC_VERBS_OP_SEND;
    bool inl = wr->inl && wr->len;
    if (HC_UNLIKELY(inl && (wr->op == HC_VERBS_OP_READ || wr->len > q->max_inline))) return EINVAL;
    uint32_t ds = 1 + (raddr ? 1 : 0) +
                  (inl ? (HC_MLX5_INL_BYTES + wr->len + 15) / 16 : (wr->len ? 1 : 0));
    uint32_t nbb = (ds * 16 + MLX5_SEND_WQE_BB - 1) / MLX5_SEND_WQE_BB;
    if (HC_UNLIKELY(q->sq_pi - q->sq_ci + nbb > q->sq_cnt)) return EAGAIN;
    uint32_t idx = q->sq_pi & q->sq_mask;
    uint8_t *ctrl = q->sq_buf + (size_t)idx * MLX5_SEND_WQE_BB;
    uint8_t *p = ctrl + HC_MLX5_CTRL_BYTES; /* within the first WQEBB: no wrap */
    if (raddr) {
        struct mlx5_wqe_raddr_seg *r = (struct mlx5_wqe_raddr_seg *)p;
        r->raddr = htobe64(wr->raddr);
        r->rkey = htobe32(wr->rkey);
        r->reserved = 0;
        p = hc_mlx5_seg_next(q, p);
    }
    if (inl) {
        struct mlx5_wqe_inl_data_seg *s = (struct mlx5_wqe_inl_data_seg *)p;
        s->byte_count = htobe32(wr->len | MLX5_INLINE_SEG);
        hc_mlx5_copy_inline(q, p + HC_MLX5_INL_BYTES, (const void *)(uintptr_t)wr->laddr, wr->len);
    } else if (wr->len) {
        mlx5dv_set_data_seg((struct mlx5_wqe_data_seg *)p, wr->len, wr->lkey, wr->laddr);
    }
    uint8_t opcode = hc_mlx5_opcode[wr->op];
    /* mlx5dv_set_ctrl_seg leaves the stream id (reserved on RC) as the ring
     * had it: clear it, or a stale WQE's bytes go to the NIC. */
    ((struct mlx5_wqe_ctrl_seg *)ctrl)->dci_stream_channel_id = 0;
    mlx5dv_set_ctrl_seg((struct mlx5_wqe_ctrl_seg *)ctrl, (uint16_t)q->sq_pi, opcode, 0, q->qpn,
                        wr->signal ? MLX5_WQE_CTRL_CQ_UPDATE : 0, (uint8_t)ds, 0,
                        wr->op == HC_VERBS_OP_WRITE_IMM ? htobe32(wr->imm) : 0);
    q->sq_wrid[idx] = wr->wr_id;
    q->sq_nbb[idx] = (uint8_t)nbb;
    q->sq_op[idx] = opcode;
    q->last_idx = idx;
    q->last_nbb = (uint8_t)nbb;
    q->sq_pi += nbb;
    q->n_wqe++;
    return 0;
}

/* The doorbell for everything written: the record, then the MMIO write.
 * nwqe is how many WQEs this doorbell covers (BlueFlame only for one). */
void hc_mlx5_ring(hc_mlx5_qp_t *q, int nwqe)
{
    uint32_t lidx = q->last_idx, nbb = q->last_nbb;
    const uint64_t *ctrl = (const uint64_t *)(q->sq_buf + (size_t)lidx * MLX5_SEND_WQE_BB);
    hc_mlx5_wqe_before_dbrec();
    q->dbrec[MLX5_SND_DBR] = htobe32(q->sq_pi & 0xffff);
    hc_mlx5_dbrec_before_mmio();
    volatile uint64_t *reg = (volatile uint64_t *)(q->bf_reg + q->bf_off);
    if (q->mmio == HC_MLX5_MMIO_BF && nwqe == 1 && nbb * MLX5_SEND_WQE_BB <= q->bf_size) {
        /* BlueFlame: the WQE itself, 64 bytes at a time, so the NIC need not
         * read it from host memory. */
        for (uint32_t b = 0; b < nbb; b++) {
            const uint64_t *src =
                (const uint64_t *)(q->sq_buf + (size_t)((lidx + b) & q->sq_mask) * MLX5_SEND_WQE_BB);
            for (int w = 0; w < MLX5_SEND_WQE_BB / 8; w++)
                reg[b * 8 + (uint32_t)w] = src[w];
        }
        q->n_bf++;
    } else {
        /* The 8-byte doorbell: the first 8 bytes of the last WQE's control
         * segment (its index and opcode, QP number and size). */
        *reg = *ctrl;
    }
    hc_mlx5_mmio_flush();
    q->bf_off ^= q->bf_size;
    q->n_db++;
    if (HC_UNLIKELY(q->model)) hc_mlx5_model_glue->kick(q->model, q->qpn); /* test library */
}

int hc_mlx5_post(hc_mlx5_qp_t *q, const hc_verbs_wr_t *wr, int n, int *posted)
{
    int rc = 0, i = 0;
    for (; i < n; i++)
        if ((rc = hc_mlx5_write_wqe(q, &wr[i])) != 0) break;
    if (i) hc_mlx5_ring(q, i);
    *posted = i;
    return rc;
}

/* ---- receive ---------------------------------------------------------------------------------- */

int hc_mlx5_post_recv(hc_mlx5_qp_t *q, uint64_t addr, uint32_t len, uint32_t lkey, uint64_t wr_id)
{
    if (HC_UNLIKELY(!q->rq_cnt || q->rq_pi - q->rq_ci >= q->rq_cnt)) return ENOMEM;
    uint32_t idx = q->rq_pi & q->rq_mask;
    struct mlx5_wqe_data_seg *d = (struct mlx5_wqe_data_seg *)(q->rq_buf + (size_t)idx * q->rq_stride);
    mlx5dv_set_data_seg(d, len, lkey, addr);
    if (q->rq_stride >= 2 * sizeof(*d)) /* room for more: end the scatter list */
        mlx5dv_set_data_seg(d + 1, 0, MLX5_INVALID_LKEY, 0);
    q->rq_wrid[idx] = wr_id;
    q->rq_pi++;
    hc_mlx5_rwqe_before_dbrec();
    q->dbrec[MLX5_RCV_DBR] = htobe32(q->rq_pi & 0xffff);
    return 0;
}

/* ---- completions ------------------------------------------------------------------------------ */

enum ibv_wc_status hc_mlx5_syndrome_status(uint8_t syndrome)
{
    switch (syndrome) {
    case MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR: return IBV_WC_LOC_LEN_ERR;
    case MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR: return IBV_WC_LOC_QP_OP_ERR;
    case MLX5_CQE_SYNDROME_LOCAL_PROT_ERR: return IBV_WC_LOC_PROT_ERR;
    case MLX5_CQE_SYNDROME_WR_FLUSH_ERR: return IBV_WC_WR_FLUSH_ERR;
    case MLX5_CQE_SYNDROME_MW_BIND_ERR: return IBV_WC_MW_BIND_ERR;
    case MLX5_CQE_SYNDROME_BAD_RESP_ERR: return IBV_WC_BAD_RESP_ERR;
    case MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR: return IBV_WC_LOC_ACCESS_ERR;
    case MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR: return IBV_WC_REM_INV_REQ_ERR;
    case MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR: return IBV_WC_REM_ACCESS_ERR;
    case MLX5_CQE_SYNDROME_REMOTE_OP_ERR: return IBV_WC_REM_OP_ERR;
    case MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR: return IBV_WC_RETRY_EXC_ERR;
    case MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR: return IBV_WC_RNR_RETRY_EXC_ERR;
    case MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR: return IBV_WC_REM_ABORT_ERR;
    default: return IBV_WC_GENERAL_ERR;
    }
}

static hc_mlx5_qp_t *hc_mlx5_cq_qp(hc_mlx5_cq_t *cq, uint32_t qpn)
{
    if (cq->last && cq->last->qpn == qpn) return cq->last;
    for (uint32_t i = 0; i < cq->nqps; i++)
        if (cq->qps[i]->qpn == qpn) return cq->last = cq->qps[i];
    return NULL;
}

/* A send CQE for the WQE at 16-bit index w: its wr_id, and every WQEBB up
 * to its end is free. */
static uint64_t hc_mlx5_sq_retire(hc_mlx5_qp_t *q, uint16_t w, uint8_t *op)
{
    uint32_t idx = w & q->sq_mask;
    uint32_t full = q->sq_ci + (uint16_t)(w - (uint16_t)q->sq_ci);
    q->sq_ci = full + q->sq_nbb[idx];
    *op = q->sq_op[idx];
    return q->sq_wrid[idx];
}

static enum ibv_wc_opcode hc_mlx5_wc_op(uint8_t op)
{
    return op == MLX5_OPCODE_RDMA_READ ? IBV_WC_RDMA_READ
           : op == MLX5_OPCODE_SEND    ? IBV_WC_SEND
                                       : IBV_WC_RDMA_WRITE;
}

int hc_mlx5_poll(hc_mlx5_cq_t *cq, struct ibv_wc *wc, int n)
{
    if (HC_UNLIKELY(cq->model)) (void)hc_mlx5_model_glue->progress(cq->model); /* test library */
    int k = 0;
    while (k < n) {
        uint8_t *slot = cq->buf + (size_t)(cq->ci & cq->mask) * cq->cqe_size;
        struct mlx5_cqe64 *cqe = (struct mlx5_cqe64 *)(slot + cq->cqe_size - sizeof(struct mlx5_cqe64));
        uint8_t op_own = *(volatile uint8_t *)&cqe->op_own;
        uint8_t opcode = op_own >> 4;
        if (opcode == MLX5_CQE_INVALID || (op_own & MLX5_CQE_OWNER_MASK) != !!(cq->ci & cq->cnt)) break;
        hc_mlx5_owner_before_cqe();
        cq->ci++;
        struct ibv_wc *w = &wc[k++];
        uint32_t qpn = be32toh(cqe->sop_drop_qpn) & 0xffffff;
        *w = (struct ibv_wc){.qp_num = qpn, .status = IBV_WC_SUCCESS};
        hc_mlx5_qp_t *q = hc_mlx5_cq_qp(cq, qpn);
        if (HC_UNLIKELY(mlx5dv_get_cqe_format(cqe) == 3)) {
            /* A compressed CQE block: never asked for (the CQs are made
             * without MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE). */
            w->status = IBV_WC_GENERAL_ERR;
            w->vendor_err = 0xc0;
            continue;
        }
        if (HC_UNLIKELY(!q)) { /* a destroyed QP's: the protocol drops it by number */
            w->status = IBV_WC_WR_FLUSH_ERR;
            continue;
        }
        uint8_t sop = 0;
        switch (opcode) {
        case MLX5_CQE_REQ:
            w->wr_id = hc_mlx5_sq_retire(q, be16toh(cqe->wqe_counter), &sop);
            w->opcode = hc_mlx5_wc_op(sop);
            w->byte_len = be32toh(cqe->byte_cnt);
            break;
        case MLX5_CQE_RESP_SEND:
        case MLX5_CQE_RESP_SEND_IMM:
        case MLX5_CQE_RESP_WR_IMM:
            /* A QP's receives complete in order. */
            w->wr_id = q->rq_wrid[q->rq_ci & q->rq_mask];
            q->rq_ci++;
            w->byte_len = be32toh(cqe->byte_cnt);
            w->opcode = opcode == MLX5_CQE_RESP_WR_IMM ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
            if (opcode != MLX5_CQE_RESP_SEND) {
                w->wc_flags = IBV_WC_WITH_IMM;
                w->imm_data = cqe->imm_inval_pkey;
            }
            break;
        case MLX5_CQE_REQ_ERR:
        case MLX5_CQE_RESP_ERR: {
            const struct mlx5_err_cqe *e = (const struct mlx5_err_cqe *)cqe;
            w->status = hc_mlx5_syndrome_status(e->syndrome);
            w->vendor_err = e->vendor_err_synd;
            if (opcode == MLX5_CQE_REQ_ERR) {
                w->wr_id = hc_mlx5_sq_retire(q, be16toh(e->wqe_counter), &sop);
                w->opcode = hc_mlx5_wc_op(sop);
            } else {
                w->wr_id = q->rq_wrid[q->rq_ci & q->rq_mask];
                q->rq_ci++;
                w->opcode = IBV_WC_RECV;
            }
            break;
        }
        default:
            w->status = IBV_WC_GENERAL_ERR;
            w->vendor_err = opcode;
            break;
        }
    }
    if (k) {
        hc_mlx5_cqe_before_ci();
        cq->dbrec[HC_MLX5_CQ_SET_CI] = htobe32(cq->ci & 0xffffff);
    }
    return k;
}
