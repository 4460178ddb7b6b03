/*
 * mlx5 model: WQEs parsed, and the doorbell write behind them checked
 * (mlx5_model.c has the design).
 */
#include "drv/mlx5/mlx5_model_int.h"

/* ---- WQEs ------------------------------------------------------------------------------------ */

/* The control segment of the WQE at idx: opcode, ds, size (at most left
 * WQEBBs). */
void hc_m5_wqe_head(const hc_m5_qp_t *q, uint16_t idx, uint16_t left, hc_m5_wqe_t *w)
{
    const struct mlx5_wqe_ctrl_seg *c = (const struct mlx5_wqe_ctrl_seg *)hc_m5_wqe_at(q, idx, 0);
    uint32_t oi = be32toh(c->opmod_idx_opcode), qd = be32toh(c->qpn_ds);
    w->idx = idx;
    w->opcode = (uint8_t)oi;
    w->ds = (uint8_t)(qd & 0x3f);
    w->nbb = HC_MAX(1u, ((uint32_t)w->ds * 16 + MLX5_SEND_WQE_BB - 1) / MLX5_SEND_WQE_BB);
    if (w->nbb > left) w->nbb = left;
    w->signaled = (c->fm_ce_se & MLX5_WQE_CTRL_CQ_UPDATE) != 0;
    w->imm = c->imm;
    w->len = 0;
    w->niov = 0;
    w->raddr = 0;
    w->rkey = 0;
}

static bool hc_m5_iov_add(hc_m5_wqe_t *w, void *base, uint64_t len)
{
    if (!len) return true;
    if (w->niov == HC_M5_MAX_IOV) return false;
    w->iov[w->niov++] = (struct iovec){.iov_base = base, .iov_len = len};
    w->len += len;
    return true;
}

/* The control segment's checks (index, QP number, size) and the opcode:
 * 0 with *rdma / *is_read, or LOCAL_QP_OP_ERR with m->why. */
static uint8_t hc_m5_parse_ctrl(hc_mlx5_model_t *m, const hc_m5_qp_t *q, uint16_t left,
                                const hc_m5_wqe_t *w, bool *rdma, bool *is_read)
{
    uint16_t idx = w->idx;
    const struct mlx5_wqe_ctrl_seg *c = (const struct mlx5_wqe_ctrl_seg *)hc_m5_wqe_at(q, idx, 0);
    uint32_t oi = be32toh(c->opmod_idx_opcode), qd = be32toh(c->qpn_ds);
    const uint8_t bad = HC_M5_SYN(LOCAL_QP_OP_ERR);
    if (((oi >> 8) & 0xffff) != idx) {
        hc_m5_set_why(m, "the control segment's WQE index is %u, the WQE is at WQEBB index %u",
                      (oi >> 8) & 0xffff, idx);
        return bad;
    }
    if ((qd >> 8) != q->qpn) {
        hc_m5_set_why(m, "the control segment's QP number is %u", qd >> 8);
        return bad;
    }
    if (w->ds == 0) {
        hc_m5_set_why(m, "ds (the WQE's size in 16-byte units) is 0");
        return bad;
    }
    uint32_t need_bb = ((uint32_t)w->ds * 16 + MLX5_SEND_WQE_BB - 1) / MLX5_SEND_WQE_BB;
    if (need_bb > left) {
        hc_m5_set_why(m,
                      "the WQE of %u WQEBBs (ds %u) runs past the send doorbell record (%u "
                      "WQEBBs posted from it)",
                      need_bb, w->ds, left);
        return bad;
    }
    *rdma = *is_read = false;
    switch (w->opcode) {
    case MLX5_OPCODE_RDMA_READ:
        *is_read = true;
        /* fall through */
    case MLX5_OPCODE_RDMA_WRITE:
    case MLX5_OPCODE_RDMA_WRITE_IMM:
        *rdma = true;
        return 0;
    case MLX5_OPCODE_SEND:
    case MLX5_OPCODE_SEND_IMM:
        return 0;
    }
    hc_m5_set_why(m, "opcode 0x%x is not modelled (RDMA WRITE[_IMM], RDMA READ, SEND[_IMM])",
                  w->opcode);
    return bad;
}

/* The data of the WQE from byte off to end: inline pieces and data segments
 * (lkeys checked) into w's list. 0, or a syndrome with m->why. */
static uint8_t hc_m5_parse_data(hc_mlx5_model_t *m, const hc_m5_qp_t *q, uint32_t off, uint32_t end,
                                bool is_read, hc_m5_wqe_t *w)
{
    const uint8_t bad = HC_M5_SYN(LOCAL_QP_OP_ERR);
    uint16_t idx = w->idx;
    while (off < end) {
        const uint8_t *p = hc_m5_wqe_at(q, idx, off);
        uint32_t bc;
        memcpy(&bc, p, 4);
        bc = be32toh(bc);
        if (bc & MLX5_INLINE_SEG) {
            uint32_t n = bc & ~(uint32_t)MLX5_INLINE_SEG;
            if (is_read) {
                hc_m5_set_why(m, "inline data in an RDMA READ");
                return bad;
            }
            if ((uint64_t)off + 4 + n > end) {
                hc_m5_set_why(m, "inline data of %u bytes at byte %u runs past the WQE's %u bytes",
                              n, off, end);
                return bad;
            }
            /* the data may wrap past the end of the SQ buffer */
            uint32_t at = (uint32_t)(hc_m5_wqe_at(q, idx, off + 4) - q->sq);
            uint32_t first = HC_MIN(n, q->sq_bytes - at);
            if (!hc_m5_iov_add(w, q->sq + at, first) || !hc_m5_iov_add(w, q->sq, n - first)) {
                hc_m5_set_why(m, "more than %d data pieces", HC_M5_MAX_IOV);
                return bad;
            }
            off += HC_ALIGN_UP(4 + n, 16u);
            continue;
        }
        if (off + 16 > end) {
            hc_m5_set_why(m, "a data segment at byte %u runs past the WQE's %u bytes", off, end);
            return bad;
        }
        const struct mlx5_wqe_data_seg *d = (const struct mlx5_wqe_data_seg *)p;
        uint32_t lkey = be32toh(d->lkey);
        uint64_t addr = be64toh(d->addr);
        off += 16;
        if (bc == 0) continue; /* carries nothing */
        const char *why =
            hc_m5_key_check(m->seg, lkey, addr, bc, is_read ? IBV_ACCESS_LOCAL_WRITE : 0);
        if (why) {
            hc_m5_set_why(m, "lkey 0x%x %s [0x%llx, +%u)%s", lkey, why, (unsigned long long)addr,
                          bc, is_read ? " (LOCAL_WRITE for the READ's destination)" : "");
            return HC_M5_SYN(LOCAL_PROT_ERR);
        }
        addr = hc_m5_key_dma(m->seg, lkey, addr); /* device memory: the dmabuf mapping */
        if (!hc_m5_iov_add(w, (void *)(uintptr_t)addr, bc)) {
            hc_m5_set_why(m, "more than %d data pieces", HC_M5_MAX_IOV);
            return bad;
        }
    }
    return 0;
}

/* Parses the WQE at q->sq_ci (left WQEBBs posted) into w: 0, or a syndrome
 * with m->why. */
uint8_t hc_m5_parse(hc_mlx5_model_t *m, const hc_m5_qp_t *q, uint16_t left, hc_m5_wqe_t *w)
{
    uint16_t idx = q->sq_ci;
    hc_m5_wqe_head(q, idx, left, w);
    bool rdma, is_read;
    uint8_t synd = hc_m5_parse_ctrl(m, q, left, w, &rdma, &is_read);
    if (synd) return synd;
    uint32_t off = 16, end = (uint32_t)w->ds * 16;
    if (rdma) {
        if (end < 32) {
            hc_m5_set_why(m, "ds %u leaves no room for the remote address segment", w->ds);
            return HC_M5_SYN(LOCAL_QP_OP_ERR);
        }
        const struct mlx5_wqe_raddr_seg *r =
            (const struct mlx5_wqe_raddr_seg *)hc_m5_wqe_at(q, idx, off);
        w->raddr = be64toh(r->raddr);
        w->rkey = be32toh(r->rkey);
        off = 32;
    }
    return hc_m5_parse_data(m, q, off, end, is_read, w);
}

/* ---- the doorbell check ---------------------------------------------------------------------- */

static bool hc_m5_poisoned(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != HC_M5_POISON) return false;
    return true;
}

static void hc_m5_bad_doorbell(hc_mlx5_model_t *m, const hc_m5_qp_t *q, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void hc_m5_bad_doorbell(hc_mlx5_model_t *m, const hc_m5_qp_t *q, const char *fmt, ...)
{
    m->stats.bad_doorbells++;
    int level = m->stats.bad_doorbells <= HC_M5_LOG_DOORBELLS ? HC_LOG_WARN : HC_LOG_DEBUG;
    if (level > hc_log_level_current) return;
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    hc_log(level, "mlx5 model: QP %u: bad doorbell: %s", q->qpn, why);
}

/* Whether the BlueFlame half h holds the whole WQE at idx (ds 16-byte units). */
static bool hc_m5_bf_matches(const hc_m5_qp_t *q, const uint8_t *h, uint16_t idx, uint32_t bytes,
                             uint32_t *at)
{
    uint32_t start = (uint32_t)(hc_m5_wqe_at(q, idx, 0) - q->sq);
    uint32_t first = HC_MIN(bytes, q->sq_bytes - start);
    for (uint32_t i = 0; i < bytes; i++) {
        uint8_t v = i < first ? q->sq[start + i] : q->sq[i - first];
        if (h[i] != v) {
            *at = i;
            return false;
        }
    }
    return true;
}

/* Walks the WQEs from db_ci to the doorbell record pi: *last (the first
 * WQEBB of the last), its ds, their number. false: pi is inside a WQE, not
 * at a boundary. */
static bool hc_m5_db_walk(const hc_m5_qp_t *q, uint16_t pi, uint16_t *last, uint32_t *last_ds,
                          uint32_t *nwqe)
{
    uint16_t i = q->db_ci;
    while (i != pi) {
        const struct mlx5_wqe_ctrl_seg *c = (const struct mlx5_wqe_ctrl_seg *)hc_m5_wqe_at(q, i, 0);
        uint32_t ds = be32toh(c->qpn_ds) & 0x3f;
        uint32_t nbb = HC_MAX(1u, (ds * 16 + MLX5_SEND_WQE_BB - 1) / MLX5_SEND_WQE_BB);
        *last = i;
        *last_ds = ds;
        (*nwqe)++;
        if (nbb > (uint16_t)(pi - i)) return false;
        i = (uint16_t)(i + nbb);
    }
    return true;
}

/* A BlueFlame write in half (its first 8 bytes match WQE last's): one WQE
 * only, that fits the half, copied whole. */
static void hc_m5_db_bf_check(hc_mlx5_model_t *m, const hc_m5_qp_t *q, const uint8_t *half,
                              uint16_t pi, uint16_t last, uint32_t last_ds, uint32_t nwqe)
{
    uint32_t bytes = last_ds * 16, at = 0;
    if (nwqe != 1)
        hc_m5_bad_doorbell(m, q, "a BlueFlame write behind %u WQEs (one only) ending at %u", nwqe,
                           pi);
    else if (bytes > HC_M5_BF_SIZE)
        hc_m5_bad_doorbell(m, q,
                           "a BlueFlame write of WQE %u of %u bytes (the register half holds %u)",
                           last, bytes, HC_M5_BF_SIZE);
    else if (!hc_m5_bf_matches(q, half, last, bytes, &at))
        hc_m5_bad_doorbell(m, q,
                           "the BlueFlame copy of WQE %u differs from the WQE at byte %u (0x%02x, "
                           "the WQE has 0x%02x)",
                           last, at, half[at], (unsigned)hc_m5_wqe_at(q, last, at)[0]);
}

/* Checks the doorbell write behind the WQEs from db_ci to the doorbell
 * record: the first 8 bytes of the last one's control segment (8-byte
 * doorbell) or the whole of it (BlueFlame, a lone WQE), in the expected half
 * of the BlueFlame register. Counts and logs a bad one; the WQEs run anyway. */
void hc_m5_doorbell(hc_mlx5_model_t *m, hc_m5_qp_t *q)
{
    uint16_t pi = hc_m5_sq_pi(q);
    uint8_t *half = q->bf + (size_t)q->bf_half * HC_M5_BF_SIZE;
    uint8_t *other = q->bf + (size_t)(q->bf_half ^ 1) * HC_M5_BF_SIZE;
    if (pi == q->db_ci) {
        bool wrote = !hc_m5_poisoned(half, 8);
        if (wrote || !hc_m5_poisoned(other, 8)) {
            hc_m5_bad_doorbell(m, q,
                               "a doorbell write with no new WQE behind the send doorbell "
                               "record (%u)",
                               pi);
            if (wrote) q->bf_half ^= 1;
            memset(half, HC_M5_POISON, MLX5_SEND_WQE_BB);
            memset(other, HC_M5_POISON, MLX5_SEND_WQE_BB);
        }
        return;
    }
    uint16_t n = (uint16_t)(pi - q->db_ci);
    if (n > q->sq_cnt) { /* the run reports it */
        q->db_ci = pi;
        return;
    }
    uint16_t last = q->db_ci;
    uint32_t nwqe = 0, last_ds = 0;
    bool boundary = hc_m5_db_walk(q, pi, &last, &last_ds, &nwqe);
    q->db_ci = pi;
    const uint8_t *ctrl = hc_m5_wqe_at(q, last, 0);
    if (!boundary) {
        hc_m5_bad_doorbell(m, q,
                           "the send doorbell record %u is inside WQE %u (ds %u), not at a "
                           "WQE boundary",
                           pi, last, last_ds);
        q->bf_half ^= 1;
    } else if (memcmp(half, ctrl, 8) == 0) {
        if (!hc_m5_poisoned(half + 8, MLX5_SEND_WQE_BB - 8)) /* BlueFlame */
            hc_m5_db_bf_check(m, q, half, pi, last, last_ds, nwqe);
        q->bf_half ^= 1;
    } else if (memcmp(other, ctrl, 8) == 0) {
        hc_m5_bad_doorbell(m, q,
                           "the doorbell for WQE %u was written at BlueFlame offset %u, "
                           "expected %u (the offset alternates)",
                           last, (q->bf_half ^ 1) * HC_M5_BF_SIZE, q->bf_half * HC_M5_BF_SIZE);
        /* resynchronised: the next one goes to this half */
    } else {
        uint64_t got, want;
        memcpy(&got, half, 8);
        memcpy(&want, ctrl, 8);
        hc_m5_bad_doorbell(m, q,
                           "the doorbell write at BlueFlame offset %u is %016llx (in memory "
                           "order), not the first 8 bytes %016llx of WQE %u, "
                           "the last of the %u behind the send doorbell record %u",
                           q->bf_half * HC_M5_BF_SIZE, (unsigned long long)be64toh(got),
                           (unsigned long long)be64toh(want), last, nwqe, pi);
        q->bf_half ^= 1;
    }
    memset(half, HC_M5_POISON, MLX5_SEND_WQE_BB);
    memset(other, HC_M5_POISON, MLX5_SEND_WQE_BB);
}
