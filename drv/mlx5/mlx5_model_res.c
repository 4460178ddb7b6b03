/*
 * mlx5 model: CQs, QPs and memory keys made and destroyed (mlx5_model.c has
 * the design).
 */
#include "drv/mlx5/mlx5_model_int.h"

/* ---- CQs, QPs, keys -------------------------------------------------------------------------- */

static bool hc_m5_pow2(uint32_t v)
{
    return v && !(v & (v - 1));
}

hcomm_status_t hc_mlx5_model_cq_create(hc_mlx5_model_t *m, uint32_t cqe, struct mlx5dv_cq *out)
{
    if (cqe == 0 || cqe > HC_M5_MAX_CQE)
        return hc_error(HCOMM_ERR_INVALID, "mlx5 model: a CQ of %u entries (1 to %u)", cqe,
                        HC_M5_MAX_CQE);
    uint32_t cnt = 1, log_cnt = 0;
    while (cnt < cqe) {
        cnt <<= 1;
        log_cnt++;
    }
    uint32_t i;
    for (i = 0; i < HC_M5_MAX_CQ; i++)
        if (m->seg->cq[i].state == HC_M5_CQ_FREE) break;
    if (i == HC_M5_MAX_CQ)
        return hc_error(HCOMM_ERR_NO_MEMORY, "mlx5 model: all %u CQs in use", HC_M5_MAX_CQ);
    uint64_t buf = hc_m5_alloc(m, (uint64_t)cnt * 64), db = buf ? hc_m5_alloc(m, 64) : 0;
    if (!db) {
        hc_m5_free(m, buf, (uint64_t)cnt * 64);
        return hc_error(HCOMM_ERR_NO_MEMORY,
                        "mlx5 model: the segment has no room for a CQ of %u "
                        "entries (%llu of %llu bytes used)",
                        cnt, (unsigned long long)m->heap_next, (unsigned long long)m->heap_end);
    }
    uint8_t *ring = hc_m5_at(m->seg, buf);
    for (uint32_t k = 0; k < cnt; k++)
        ring[(size_t)k * 64 + 63] = MLX5_CQE_INVALID << 4;
    hc_m5_scq_t *c = &m->seg->cq[i];
    hc_m5_cq_lock(c, i + 1);
    c->cnt = cnt;
    c->log_cnt = log_cnt;
    c->pi = 0;
    c->overrun = 0;
    c->buf_off = buf;
    c->dbrec_off = db;
    c->gen++;
    c->state = HC_M5_CQ_LIVE;
    hc_m5_cq_unlock(c);
    memset(out, 0, sizeof(*out));
    out->buf = ring;
    out->dbrec = (__be32 *)hc_m5_at(m->seg, db);
    out->cqe_cnt = cnt;
    out->cqe_size = 64;
    out->cq_uar = NULL;
    out->cqn = i + 1;
    return HCOMM_OK;
}

void hc_mlx5_model_cq_destroy(hc_mlx5_model_t *m, uint32_t cqn)
{
    if (cqn == 0 || cqn > HC_M5_MAX_CQ || m->seg->cq[cqn - 1].state != HC_M5_CQ_LIVE) {
        hc_log_warn("mlx5 model: cq_destroy of CQ %u, which does not exist", cqn);
        return;
    }
    hc_m5_scq_t *c = &m->seg->cq[cqn - 1];
    if (!hc_m5_cq_lock(c, cqn)) return;
    c->state = HC_M5_CQ_FREE;
    hc_m5_cq_unlock(c);
    hc_m5_free(m, c->buf_off, (uint64_t)c->cnt * 64);
    hc_m5_free(m, c->dbrec_off, 64);
}

/* qp_create's arguments: a live CQ, ring sizes that are powers of two, an
 * inline size that fits a WQE in the send queue. */
static hcomm_status_t hc_m5_qp_args_check(hc_mlx5_model_t *m, uint32_t cqn, uint32_t sq_wqe,
                                          uint32_t rq_wqe, uint32_t max_inline)
{
    if (cqn == 0 || cqn > HC_M5_MAX_CQ || m->seg->cq[cqn - 1].state != HC_M5_CQ_LIVE)
        return hc_error(HCOMM_ERR_INVALID, "mlx5 model: qp_create on CQ %u, which does not exist",
                        cqn);
    if (!hc_m5_pow2(sq_wqe) || sq_wqe > HC_M5_MAX_WQ)
        return hc_error(HCOMM_ERR_INVALID,
                        "mlx5 model: qp_create: sq_wqe %u is not a power of two "
                        "from 1 to %u",
                        sq_wqe, HC_M5_MAX_WQ);
    if (!hc_m5_pow2(rq_wqe) || rq_wqe > HC_M5_MAX_WQ)
        return hc_error(HCOMM_ERR_INVALID,
                        "mlx5 model: qp_create: rq_wqe %u is not a power of two "
                        "from 1 to %u",
                        rq_wqe, HC_M5_MAX_WQ);
    /* the largest inline WQE: ctrl + raddr + the inline header + the data */
    uint32_t inl_bytes = 16 + 16 + HC_ALIGN_UP(4 + max_inline, 16u);
    if (max_inline > HC_M5_MAX_DS * 16 || inl_bytes > HC_M5_MAX_DS * 16 ||
        (inl_bytes + MLX5_SEND_WQE_BB - 1) / MLX5_SEND_WQE_BB > sq_wqe)
        return hc_error(HCOMM_ERR_INVALID,
                        "mlx5 model: qp_create: max_inline %u does not fit a WQE "
                        "(at most %u bytes) in an SQ of %u WQEBBs",
                        max_inline, HC_M5_MAX_DS * 16, sq_wqe);
    return HCOMM_OK;
}

/* The new QP q as rdma-core's description: rings, doorbell records, the
 * BlueFlame register. */
static void hc_m5_qp_describe(hc_mlx5_model_t *m, const hc_m5_qp_t *q, uint32_t rq_wqe,
                              struct mlx5dv_qp *out)
{
    memset(out, 0, sizeof(*out));
    out->dbrec = q->dbrec;
    out->sq.buf = q->sq;
    out->sq.wqe_cnt = q->sq_cnt;
    out->sq.stride = MLX5_SEND_WQE_BB;
    out->rq.buf = hc_m5_at(m->seg, q->off_rq);
    out->rq.wqe_cnt = rq_wqe;
    out->rq.stride = (uint32_t)sizeof(struct mlx5_wqe_data_seg);
    out->bf.reg = q->bf;
    out->bf.size = HC_M5_BF_SIZE;
    out->sqn = out->rqn = q->qpn;
}

hcomm_status_t hc_mlx5_model_qp_create(hc_mlx5_model_t *m, uint32_t cqn, uint32_t sq_wqe,
                                       uint32_t rq_wqe, uint32_t max_inline, struct mlx5dv_qp *out,
                                       uint32_t *qpn_p)
{
    hcomm_status_t st = hc_m5_qp_args_check(m, cqn, sq_wqe, rq_wqe, max_inline);
    if (st != HCOMM_OK) return st;
    uint32_t i = 0;
    bool found = false;
    for (uint32_t k = 0; k < HC_M5_MAX_QP && !found; k++) {
        i = (m->qp_hint + k) % HC_M5_MAX_QP;
        uint32_t qst = m->seg->qp[i].state;
        found = !m->qp[i].s && (qst == HC_M5_QP_FREE || qst == HC_M5_QP_DESTROYED);
    }
    if (!found) return hc_error(HCOMM_ERR_NO_MEMORY, "mlx5 model: all %u QPs in use", HC_M5_MAX_QP);
    m->qp_hint = (i + 1) % HC_M5_MAX_QP;
    hc_m5_qp_t *q = &m->qp[i];
    memset(q, 0, sizeof(*q));
    q->len_sq = sq_wqe * MLX5_SEND_WQE_BB;
    q->len_rq = rq_wqe * (uint32_t)sizeof(struct mlx5_wqe_data_seg);
    q->off_sq = hc_m5_alloc(m, q->len_sq);
    q->off_rq = q->off_sq ? hc_m5_alloc(m, q->len_rq) : 0;
    q->off_db = q->off_rq ? hc_m5_alloc(m, 64) : 0;
    q->off_bf = q->off_db ? hc_m5_alloc(m, 2 * HC_M5_BF_SIZE) : 0;
    if (!q->off_bf) {
        hc_m5_free(m, q->off_sq, q->len_sq);
        hc_m5_free(m, q->off_rq, q->len_rq);
        hc_m5_free(m, q->off_db, 64);
        memset(q, 0, sizeof(*q));
        return hc_error(HCOMM_ERR_NO_MEMORY,
                        "mlx5 model: the segment has no room for a QP of %u "
                        "send WQEBBs and %u receives (%llu of %llu bytes used)",
                        sq_wqe, rq_wqe, (unsigned long long)m->heap_next,
                        (unsigned long long)m->heap_end);
    }
    hc_m5_sqp_t *s = &m->seg->qp[i];
    s->gen++;
    s->cq = cqn - 1;
    s->sq_cnt = sq_wqe;
    s->rq_cnt = rq_wqe;
    s->rq_ci = 0;
    s->sq_off = q->off_sq;
    s->rq_off = q->off_rq;
    s->dbrec_off = q->off_db;
    __atomic_store_n(&s->state, HC_M5_QP_INIT, __ATOMIC_RELEASE);
    q->s = s;
    q->sq = hc_m5_at(m->seg, q->off_sq);
    q->bf = hc_m5_at(m->seg, q->off_bf);
    memset(q->bf, HC_M5_POISON, 2 * HC_M5_BF_SIZE);
    q->dbrec = (__be32 *)hc_m5_at(m->seg, q->off_db);
    q->qpn = i + 1;
    q->sq_cnt = sq_wqe;
    q->sq_bytes = q->len_sq;
    m->live[m->nlive++] = (uint16_t)i;
    hc_m5_qp_describe(m, q, rq_wqe, out);
    *qpn_p = q->qpn;
    return HCOMM_OK;
}

hc_m5_qp_t *hc_m5_qp_get(hc_mlx5_model_t *m, uint32_t qpn)
{
    if (qpn == 0 || qpn > HC_M5_MAX_QP || !m->qp[qpn - 1].s) return NULL;
    return &m->qp[qpn - 1];
}

hcomm_status_t hc_mlx5_model_qp_connect(hc_mlx5_model_t *m, uint32_t qpn,
                                        const uint8_t peer_id[HC_MLX5_MODEL_ID_LEN],
                                        uint32_t peer_qpn)
{
    hc_m5_qp_t *q = hc_m5_qp_get(m, qpn);
    if (!q)
        return hc_error(HCOMM_ERR_INVALID, "mlx5 model: qp_connect of QP %u, which does not exist",
                        qpn);
    uint32_t st = __atomic_load_n(&q->s->state, __ATOMIC_ACQUIRE);
    if (st != HC_M5_QP_INIT)
        return hc_error(HCOMM_ERR_INVALID,
                        "mlx5 model: qp_connect of QP %u in state %s (only from "
                        "INIT)",
                        qpn, hc_m5_state_name(st));
    hc_m5_peer_t *p = NULL;
    hcomm_status_t rc = hc_m5_peer_get(m, peer_id, &p);
    if (rc != HCOMM_OK) return rc;
    if (peer_qpn == 0 || peer_qpn > HC_M5_MAX_QP)
        return hc_error(HCOMM_ERR_INVALID,
                        "mlx5 model: qp_connect of QP %u to QP %u of process %d: "
                        "no such QP number (1 to %u)",
                        qpn, peer_qpn, (int)p->pid, HC_M5_MAX_QP);
    const hc_m5_sqp_t *pq = &p->seg->qp[peer_qpn - 1];
    uint32_t pst = __atomic_load_n(&pq->state, __ATOMIC_ACQUIRE);
    if (pst == HC_M5_QP_FREE || pst == HC_M5_QP_DESTROYED)
        return hc_error(HCOMM_ERR_PEER_FAILED,
                        "mlx5 model: qp_connect of QP %u to QP %u of process "
                        "%d, which is %s",
                        qpn, peer_qpn, (int)p->pid, hc_m5_state_name(pst));
    q->peer = p;
    q->peer_idx = peer_qpn - 1;
    q->peer_gen = pq->gen;
    __atomic_store_n(&q->s->state, HC_M5_QP_RTS, __ATOMIC_RELEASE);
    return HCOMM_OK;
}

void hc_mlx5_model_qp_destroy(hc_mlx5_model_t *m, uint32_t qpn)
{
    hc_m5_qp_t *q = hc_m5_qp_get(m, qpn);
    if (!q) {
        hc_log_warn("mlx5 model: qp_destroy of QP %u, which does not exist", qpn);
        return;
    }
    __atomic_store_n(&q->s->state, HC_M5_QP_DESTROYED, __ATOMIC_RELEASE);
    hc_m5_free(m, q->off_sq, q->len_sq);
    hc_m5_free(m, q->off_rq, q->len_rq);
    hc_m5_free(m, q->off_db, 64);
    hc_m5_free(m, q->off_bf, 2 * HC_M5_BF_SIZE);
    for (int k = 0; k < m->nlive; k++) {
        if (m->live[k] == qpn - 1) {
            m->live[k] = m->live[--m->nlive];
            break;
        }
    }
    memset(q, 0, sizeof(*q));
}

hcomm_status_t hc_mlx5_model_reg(hc_mlx5_model_t *m, void *addr, size_t len, int access,
                                 uint32_t *key_p)
{
    return hc_mlx5_model_reg_dma(m, addr, len, access, NULL, key_p);
}

hcomm_status_t hc_mlx5_model_reg_dma(hc_mlx5_model_t *m, void *addr, size_t len, int access,
                                     void *dma, uint32_t *key_p)
{
    if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
        !(access & IBV_ACCESS_LOCAL_WRITE))
        return hc_error(HCOMM_ERR_INVALID,
                        "mlx5 model: reg of [%p, +%zu) with access 0x%x: remote "
                        "write needs IBV_ACCESS_LOCAL_WRITE too",
                        addr, len, (unsigned)access);
    if ((uintptr_t)addr + len < (uintptr_t)addr)
        return hc_error(HCOMM_ERR_INVALID, "mlx5 model: reg of [%p, +%zu) wraps the address space",
                        addr, len);
    uint32_t i = 0;
    bool found = false;
    for (uint32_t k = 0; k < HC_M5_MAX_KEY - 1 && !found; k++) {
        i = 1 + (m->key_hint - 1 + k) % (HC_M5_MAX_KEY - 1);
        found = !m->seg->key[i].valid;
    }
    if (!found)
        return hc_error(HCOMM_ERR_NO_MEMORY, "mlx5 model: reg of [%p, +%zu): all %u keys in use",
                        addr, len, HC_M5_MAX_KEY - 1);
    m->key_hint = i % (HC_M5_MAX_KEY - 1) + 1;
    hc_m5_key_t *k = &m->seg->key[i];
    k->addr = (uint64_t)(uintptr_t)addr;
    k->len = len;
    k->access = (uint32_t)access;
    k->dma = (uint64_t)(uintptr_t)dma;
    __atomic_store_n(&k->valid, 1, __ATOMIC_RELEASE);
    *key_p = i << 8 | k->variant;
    return HCOMM_OK;
}

void hc_mlx5_model_dereg(hc_mlx5_model_t *m, uint32_t key)
{
    uint32_t i = key >> 8;
    if (i == 0 || i >= HC_M5_MAX_KEY || !m->seg->key[i].valid ||
        m->seg->key[i].variant != (key & 0xff)) {
        hc_log_warn("mlx5 model: dereg of key 0x%x, which is not registered", key);
        return;
    }
    hc_m5_key_t *k = &m->seg->key[i];
    __atomic_store_n(&k->valid, 0, __ATOMIC_RELEASE);
    k->variant++;
}
