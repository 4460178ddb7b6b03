/*
 * mlx5 model: CQEs written under the CQ's lock, requester completions and
 * the bytes moved between processes (mlx5_model.c has the design).
 */
#include "drv/mlx5/mlx5_model_int.h"

/* ---- CQs ------------------------------------------------------------------------------------- */

bool hc_m5_cq_lock(hc_m5_scq_t *c, uint32_t cqn)
{
    int rc = pthread_mutex_lock(&c->lock);
    if (HC_LIKELY(rc == 0)) return true;
    if (rc == EOWNERDEAD) {
        hc_log_warn("mlx5 model: CQ %u: the process holding its lock died; lock recovered", cqn);
        pthread_mutex_consistent(&c->lock);
        return true;
    }
    hc_log_error("mlx5 model: CQ %u: locking it failed: %s", cqn, strerror(rc));
    return false;
}

void hc_m5_cq_unlock(hc_m5_scq_t *c)
{
    pthread_mutex_unlock(&c->lock);
}

/* Writes one CQE into CQ cq of segment s, lock held: the body, a release
 * fence, then op_own (cqe[63]: the opcode nibble) with the owner bit.
 * false: the CQ overran (logged, nothing written). */
bool hc_m5_cqe_put(hc_mlx5_model_t *m, hc_m5_seg_t *s, uint32_t cq, const uint8_t *cqe)
{
    hc_m5_scq_t *c = &s->cq[cq];
    if (HC_UNLIKELY(c->state != HC_M5_CQ_LIVE)) {
        hc_log_debug("mlx5 model: a CQE for CQ %u, which was destroyed: dropped", cq + 1);
        return true;
    }
    const __be32 *db = (const __be32 *)hc_m5_at(s, c->dbrec_off);
    uint32_t ci = be32toh(__atomic_load_n(&db[HC_M5_CQ_SET_CI], __ATOMIC_ACQUIRE)) & 0xffffff;
    uint32_t used = (c->pi - ci) & 0xffffff;
    if (HC_UNLIKELY(used >= c->cnt)) {
        if (!c->overrun)
            hc_log_error("mlx5 model: CQ %u overrun: producer index %u, consumer index %u in its "
                         "doorbell record, %u entries: the completion is lost and its QP goes to "
                         "the error state",
                         cq + 1, c->pi & 0xffffff, ci, c->cnt);
        c->overrun = 1;
        return false;
    }
    uint8_t *slot = hc_m5_at(s, c->buf_off) + (size_t)(c->pi & (c->cnt - 1)) * 64;
    memcpy(slot, cqe, 63);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    __atomic_store_n(&slot[63], (uint8_t)(cqe[63] | ((c->pi >> c->log_cnt) & 1)), __ATOMIC_RELEASE);
    c->pi++;
    c->overrun = 0;
    m->stats.cqes++;
    uint8_t op = cqe[63] >> 4;
    if (op == MLX5_CQE_REQ_ERR || op == MLX5_CQE_RESP_ERR) m->stats.err_cqes++;
    return true;
}

void hc_m5_cqe_err(uint8_t *buf, uint8_t op, uint8_t synd, uint8_t vendor, uint8_t wqe_op,
                   uint32_t qpn, uint16_t counter)
{
    struct mlx5_err_cqe *e = (struct mlx5_err_cqe *)buf;
    memset(e, 0, sizeof(*e));
    e->syndrome = synd;
    e->vendor_err_synd = vendor;
    e->s_wqe_opcode_qpn = htobe32((uint32_t)wqe_op << 24 | (qpn & 0xffffff));
    e->wqe_counter = htobe16(counter);
    e->op_own = (uint8_t)(op << 4);
}

/* Flushes the receives posted on QP sq of segment s (in ERROR), its CQ's lock
 * held; stops at a CQ overrun (a later call goes on). */
void hc_m5_rq_flush(hc_mlx5_model_t *m, hc_m5_seg_t *s, hc_m5_sqp_t *sq)
{
    uint32_t qpn = (uint32_t)(sq - s->qp) + 1;
    const __be32 *db = (const __be32 *)hc_m5_at(s, sq->dbrec_off);
    uint16_t posted = (uint16_t)be32toh(__atomic_load_n(&db[MLX5_RCV_DBR], __ATOMIC_ACQUIRE));
    uint8_t cqe[64];
    while (posted != (uint16_t)sq->rq_ci) {
        hc_m5_cqe_err(cqe, MLX5_CQE_RESP_ERR, HC_M5_SYN(WR_FLUSH_ERR),
                      HC_M5_VENDOR_MODEL | HC_M5_SYN(WR_FLUSH_ERR), 0, qpn, (uint16_t)sq->rq_ci);
        if (!hc_m5_cqe_put(m, s, sq->cq, cqe)) break;
        sq->rq_ci++;
    }
}

/* QP sq of segment s to ERROR (its CQ's lock held): a RESP_ERR CQE with synd
 * for the receive being consumed (consume), then flushes of the others. */
void hc_m5_resp_fail_locked(hc_mlx5_model_t *m, hc_m5_seg_t *s, hc_m5_sqp_t *sq, bool consume,
                            uint8_t synd, uint8_t vendor)
{
    if (consume) {
        uint8_t cqe[64];
        hc_m5_cqe_err(cqe, MLX5_CQE_RESP_ERR, synd, vendor, 0, (uint32_t)(sq - s->qp) + 1,
                      (uint16_t)sq->rq_ci);
        hc_m5_cqe_put(m, s, sq->cq, cqe);
        sq->rq_ci++;
    }
    __atomic_store_n(&sq->state, HC_M5_QP_ERR, __ATOMIC_RELEASE);
    hc_m5_rq_flush(m, s, sq);
}

/* ---- requester completions ------------------------------------------------------------------- */

/* The WQE w of q failed with synd: an error CQE (signaled or not), q to
 * ERROR, its receives flushed. fmt says why (logged at info level). */
void hc_m5_req_fail(hc_mlx5_model_t *m, hc_m5_qp_t *q, const hc_m5_wqe_t *w, uint8_t synd,
                    uint8_t vendor, const char *fmt, ...)
{
    if (hc_log_level_current >= HC_LOG_INFO) {
        char why[256];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, sizeof(why), fmt, ap);
        va_end(ap);
        hc_log_info("mlx5 model: QP %u WQE %u (%s) failed, syndrome 0x%x vendor 0x%x: %s", q->qpn,
                    w->idx, hc_m5_op_name(w->opcode), synd, vendor, why);
    }
    uint8_t cqe[64];
    hc_m5_cqe_err(cqe, MLX5_CQE_REQ_ERR, synd, vendor, w->opcode, q->qpn, w->idx);
    hc_m5_scq_t *c = &m->seg->cq[q->s->cq];
    if (!hc_m5_cq_lock(c, q->s->cq + 1)) {
        __atomic_store_n(&q->s->state, HC_M5_QP_ERR, __ATOMIC_RELEASE);
        return;
    }
    hc_m5_cqe_put(m, m->seg, q->s->cq, cqe);
    __atomic_store_n(&q->s->state, HC_M5_QP_ERR, __ATOMIC_RELEASE);
    hc_m5_rq_flush(m, m->seg, q->s);
    hc_m5_cq_unlock(c);
}

/* A successful requester CQE (w asked for one); a CQ overrun moves q to
 * ERROR. */
void hc_m5_req_done(hc_mlx5_model_t *m, hc_m5_qp_t *q, const hc_m5_wqe_t *w, uint32_t byte_cnt)
{
    uint8_t buf[64];
    struct mlx5_cqe64 *cqe = (struct mlx5_cqe64 *)buf;
    memset(cqe, 0, sizeof(*cqe));
    cqe->byte_cnt = htobe32(byte_cnt);
    cqe->sop_drop_qpn = htobe32((uint32_t)w->opcode << 24 | q->qpn);
    cqe->wqe_counter = htobe16(w->idx);
    cqe->op_own = MLX5_CQE_REQ << 4;
    hc_m5_scq_t *c = &m->seg->cq[q->s->cq];
    if (!hc_m5_cq_lock(c, q->s->cq + 1)) return;
    if (!hc_m5_cqe_put(m, m->seg, q->s->cq, buf)) {
        __atomic_store_n(&q->s->state, HC_M5_QP_ERR, __ATOMIC_RELEASE);
        hc_m5_rq_flush(m, m->seg, q->s);
    }
    hc_m5_cq_unlock(c);
}

/* ---- data movement --------------------------------------------------------------------------- */

/* The bytes [from, from + n) of the local list iov as a list in out. */
static int hc_m5_iov_sub(const struct iovec *iov, int niov, uint64_t from, uint64_t n,
                         struct iovec *out)
{
    int k = 0;
    for (int i = 0; i < niov && n; i++) {
        uint64_t l = iov[i].iov_len;
        if (from >= l) {
            from -= l;
            continue;
        }
        uint64_t take = HC_MIN(l - from, n);
        out[k++] = (struct iovec){.iov_base = (uint8_t *)iov[i].iov_base + from, .iov_len = take};
        n -= take;
        from = 0;
    }
    return k;
}

/* Copies bytes [from, from + n) of the local list to (write) or from the
 * peer's raddr + from. 0 or an errno (ESRCH: the peer is gone). */
static int hc_m5_copy(const hc_m5_peer_t *p, bool write, const struct iovec *iov, int niov,
                      uint64_t from, uint64_t n, uint64_t raddr)
{
    if (!n) return 0;
    struct iovec sub[HC_M5_MAX_IOV];
    int ns = hc_m5_iov_sub(iov, niov, from, n, sub);
    if (p->self) {
        uint8_t *r = (uint8_t *)(uintptr_t)(raddr + from);
        for (int i = 0; i < ns; i++) {
            if (write)
                memcpy(r, sub[i].iov_base, sub[i].iov_len);
            else
                memcpy(sub[i].iov_base, r, sub[i].iov_len);
            r += sub[i].iov_len;
        }
        return 0;
    }
    struct iovec riov = {.iov_base = (void *)(uintptr_t)(raddr + from), .iov_len = n};
    ssize_t rc = write ? process_vm_writev(p->pid, sub, (unsigned long)ns, &riov, 1, 0)
                       : process_vm_readv(p->pid, sub, (unsigned long)ns, &riov, 1, 0);
    if (rc < 0) return errno;
    return (uint64_t)rc == n ? 0 : EFAULT;
}

/* Moves len bytes between w's list and the peer's raddr; tail_last (WRITE):
 * the last 8 bytes after the rest. */
int hc_m5_move(const hc_m5_peer_t *p, bool write, const hc_m5_wqe_t *w, uint64_t raddr,
               bool tail_last)
{
    if (write && tail_last && w->len > 8) {
        int e = hc_m5_copy(p, true, w->iov, w->niov, 0, w->len - 8, raddr);
        if (e) return e;
        __atomic_thread_fence(__ATOMIC_RELEASE);
        return hc_m5_copy(p, true, w->iov, w->niov, w->len - 8, 8, raddr);
    }
    return hc_m5_copy(p, write, w->iov, w->niov, 0, w->len, raddr);
}

/* Whether the peer process still maps its segment where its header says
 * (catches a dead process, a zombie and a reused pid). */
bool hc_m5_peer_alive(const hc_m5_peer_t *p)
{
    if (p->self) return true;
    uint8_t hdr[sizeof(hc_m5_hdr_t)];
    struct iovec l = {.iov_base = hdr, .iov_len = sizeof(hdr)};
    struct iovec r = {.iov_base = (void *)(uintptr_t)p->seg->hdr.self_addr, .iov_len = sizeof(hdr)};
    ssize_t rc = process_vm_readv(p->pid, &l, 1, &r, 1, 0);
    if (rc != (ssize_t)sizeof(hdr)) {
        hc_log_debug("mlx5 model: peer process %d: its segment header is unreadable (%s)",
                     (int)p->pid, rc < 0 ? strerror(errno) : "short read");
        return false;
    }
    return memcmp(hdr, &p->seg->hdr, sizeof(hdr)) == 0 && p->seg->hdr.magic == HC_M5_MAGIC;
}
