/*
 * mlx5 model: WQEs run: RDMA WRITE / READ, SEND and the WITH IMMEDIATE
 * forms against the target's queues and keys, errors, injected faults
 * (mlx5_model.c has the design).
 */
#include "drv/mlx5/mlx5_model_int.h"

/* The target QP of q to ERROR (a remote error it detected): lock its CQ;
 * consume: the next receive, if one is posted, completes with synd. */
static void hc_m5_resp_fail(hc_mlx5_model_t *m, hc_m5_qp_t *q, bool consume, uint8_t synd,
                            uint8_t vendor)
{
    hc_m5_seg_t *ps = q->peer->seg;
    hc_m5_sqp_t *pq = &ps->qp[q->peer_idx];
    uint32_t st = __atomic_load_n(&pq->state, __ATOMIC_ACQUIRE);
    if (pq->gen != q->peer_gen || st != HC_M5_QP_RTS) return;
    hc_m5_scq_t *pc = &ps->cq[pq->cq];
    if (!hc_m5_cq_lock(pc, pq->cq + 1)) return;
    if (consume) {
        const __be32 *db = (const __be32 *)hc_m5_at(ps, pq->dbrec_off);
        uint16_t posted = (uint16_t)be32toh(__atomic_load_n(&db[MLX5_RCV_DBR], __ATOMIC_ACQUIRE));
        consume = posted != (uint16_t)pq->rq_ci;
    }
    hc_m5_resp_fail_locked(m, ps, pq, consume, synd, vendor);
    hc_m5_cq_unlock(pc);
}

static void hc_m5_xfer_fail(hc_mlx5_model_t *m, hc_m5_qp_t *q, const hc_m5_wqe_t *w, int e,
                            uint64_t raddr)
{
    const hc_m5_peer_t *p = q->peer;
    const char *call =
        w->opcode == MLX5_OPCODE_RDMA_READ ? "process_vm_readv" : "process_vm_writev";
    if (e == ESRCH) {
        hc_m5_req_fail(m, q, w, HC_M5_SYN(TRANSPORT_RETRY_EXC_ERR),
                       HC_M5_VENDOR_MODEL | HC_M5_SYN(TRANSPORT_RETRY_EXC_ERR),
                       "the target process %d is gone (%s: %s)", (int)p->pid, call, strerror(e));
    } else if (e == EPERM) {
        hc_log_error("mlx5 model: %s into process %d is not permitted (ptrace restrictions?)", call,
                     (int)p->pid);
        hc_m5_req_fail(m, q, w, HC_M5_SYN(TRANSPORT_RETRY_EXC_ERR),
                       HC_M5_VENDOR_MODEL | HC_M5_SYN(TRANSPORT_RETRY_EXC_ERR),
                       "%s into process %d: %s", call, (int)p->pid, strerror(e));
    } else {
        /* EFAULT: the target's memory is not mapped there, though its key covers it */
        bool send = w->opcode == MLX5_OPCODE_SEND || w->opcode == MLX5_OPCODE_SEND_IMM;
        uint8_t synd =
            e == EFAULT && !send ? HC_M5_SYN(REMOTE_ACCESS_ERR) : HC_M5_SYN(REMOTE_OP_ERR);
        hc_m5_req_fail(m, q, w, synd, HC_M5_VENDOR_MODEL | synd,
                       "%s at 0x%llx (+%llu) of process %d: %s", call, (unsigned long long)raddr,
                       (unsigned long long)w->len, (int)p->pid, strerror(e));
    }
}

/* exec_recv's steps: the receive to consume (HC_M5_GO: the target CQ's lock
 * held), its placement (false: failed, reported, unlocked) and the
 * responder's CQE (unlocks). */
#define HC_M5_GO 2

/* Locks the target QP's CQ and finds the receive w consumes: HC_M5_GO with
 * *ridx_p (lock held), or HC_M5_DONE (failed, reported) / HC_M5_WAIT (no
 * receive posted: RNR), the lock released. */
static int hc_m5_recv_take(hc_mlx5_model_t *m, hc_m5_qp_t *q, hc_m5_wqe_t *w, uint16_t *ridx_p)
{
    const hc_m5_peer_t *p = q->peer;
    hc_m5_seg_t *ps = p->seg;
    hc_m5_sqp_t *pq = &ps->qp[q->peer_idx];
    uint32_t pqpn = q->peer_idx + 1;
    const uint8_t vm = HC_M5_VENDOR_MODEL;
    hc_m5_scq_t *pc = &ps->cq[pq->cq];
    if (!hc_m5_cq_lock(pc, pq->cq + 1)) {
        hc_m5_req_fail(m, q, w, HC_M5_SYN(REMOTE_OP_ERR), vm | HC_M5_SYN(REMOTE_OP_ERR),
                       "the lock of the target QP %u's CQ %u is broken", pqpn, pq->cq + 1);
        return HC_M5_DONE;
    }
    uint32_t st = __atomic_load_n(&pq->state, __ATOMIC_ACQUIRE);
    if (st != HC_M5_QP_RTS || pq->gen != q->peer_gen) {
        hc_m5_cq_unlock(pc);
        hc_m5_req_fail(m, q, w, HC_M5_SYN(TRANSPORT_RETRY_EXC_ERR),
                       vm | HC_M5_SYN(TRANSPORT_RETRY_EXC_ERR), "the target QP %u is %s", pqpn,
                       pq->gen != q->peer_gen ? "destroyed" : hc_m5_state_name(st));
        return HC_M5_DONE;
    }
    const __be32 *db = (const __be32 *)hc_m5_at(ps, pq->dbrec_off);
    uint16_t posted = (uint16_t)be32toh(__atomic_load_n(&db[MLX5_RCV_DBR], __ATOMIC_ACQUIRE));
    uint16_t ridx = (uint16_t)pq->rq_ci, avail = (uint16_t)(posted - ridx);
    if (avail == 0) {
        hc_m5_cq_unlock(pc);
        if (!hc_m5_peer_alive(p)) {
            hc_m5_req_fail(m, q, w, HC_M5_SYN(TRANSPORT_RETRY_EXC_ERR),
                           vm | HC_M5_SYN(TRANSPORT_RETRY_EXC_ERR),
                           "the target process %d is gone (waiting for a receive)", (int)p->pid);
            return HC_M5_DONE;
        }
        return HC_M5_WAIT; /* RNR */
    }
    if (avail > pq->rq_cnt) {
        hc_m5_resp_fail_locked(m, ps, pq, false, 0, 0);
        hc_m5_cq_unlock(pc);
        hc_m5_req_fail(m, q, w, HC_M5_SYN(REMOTE_OP_ERR), vm | HC_M5_SYN(REMOTE_OP_ERR),
                       "the target QP %u's receive doorbell record (%u) is %u receives past its "
                       "consumed index %u (RQ of %u)",
                       pqpn, posted, avail, ridx, pq->rq_cnt);
        return HC_M5_DONE;
    }
    *ridx_p = ridx;
    return HC_M5_GO;
}

/* Moves w's bytes (the target CQ's lock held): into receive ridx (SEND),
 * or to w->raddr (WRITE WITH IMMEDIATE, its key checked before). false:
 * the WQE failed, the target QP's side done, the lock released. */
static bool hc_m5_recv_place(hc_mlx5_model_t *m, hc_m5_qp_t *q, hc_m5_wqe_t *w, uint16_t ridx)
{
    const hc_m5_peer_t *p = q->peer;
    hc_m5_seg_t *ps = p->seg;
    hc_m5_sqp_t *pq = &ps->qp[q->peer_idx];
    hc_m5_scq_t *pc = &ps->cq[pq->cq];
    uint32_t pqpn = q->peer_idx + 1;
    const uint8_t vm = HC_M5_VENDOR_MODEL;
    bool wimm = w->opcode == MLX5_OPCODE_RDMA_WRITE_IMM;
    const struct mlx5_wqe_data_seg *rd =
        (const struct mlx5_wqe_data_seg *)hc_m5_at(ps, pq->rq_off) + (ridx & (pq->rq_cnt - 1));
    uint32_t rlen = be32toh(rd->byte_count), rkey = be32toh(rd->lkey);
    uint64_t raddr = wimm ? w->raddr : be64toh(rd->addr);
    const char *why = NULL;
    if (!wimm && w->len > rlen) {
        hc_m5_resp_fail_locked(m, ps, pq, true, HC_M5_SYN(LOCAL_LENGTH_ERR),
                               vm | HC_M5_SYN(LOCAL_LENGTH_ERR));
        hc_m5_cq_unlock(pc);
        hc_m5_req_fail(m, q, w, HC_M5_SYN(REMOTE_OP_ERR), vm | HC_M5_SYN(REMOTE_OP_ERR),
                       "%llu bytes into the target QP %u's receive %u of %u bytes",
                       (unsigned long long)w->len, pqpn, ridx, rlen);
        return false;
    }
    if (!wimm && w->len) why = hc_m5_key_check(ps, rkey, raddr, w->len, IBV_ACCESS_LOCAL_WRITE);
    if (why) {
        hc_m5_resp_fail_locked(m, ps, pq, true, HC_M5_SYN(LOCAL_PROT_ERR),
                               vm | HC_M5_SYN(LOCAL_PROT_ERR));
        hc_m5_cq_unlock(pc);
        hc_m5_req_fail(m, q, w, HC_M5_SYN(REMOTE_OP_ERR), vm | HC_M5_SYN(REMOTE_OP_ERR),
                       "the target QP %u's receive %u: lkey 0x%x %s [0x%llx, +%llu) "
                       "(LOCAL_WRITE)",
                       pqpn, ridx, rkey, why, (unsigned long long)raddr,
                       (unsigned long long)w->len);
        return false;
    }
    if (!wimm && w->len) raddr = hc_m5_key_dma(ps, rkey, raddr);
    int e = hc_m5_move(p, true, w, raddr, wimm);
    if (!e && w->len == 0 && !hc_m5_peer_alive(p)) e = ESRCH;
    if (!e) return true;
    if (e != ESRCH && e != EPERM) {
        if (wimm)
            hc_m5_resp_fail_locked(m, ps, pq, false, 0, 0);
        else
            hc_m5_resp_fail_locked(m, ps, pq, true, HC_M5_SYN(LOCAL_PROT_ERR),
                                   vm | HC_M5_SYN(LOCAL_PROT_ERR));
    }
    hc_m5_cq_unlock(pc);
    hc_m5_xfer_fail(m, q, w, e, raddr);
    return false;
}

/* The responder's CQE for receive ridx (the target CQ's lock held, then
 * released), and the requester's if w asked for one. */
static void hc_m5_recv_done(hc_mlx5_model_t *m, hc_m5_qp_t *q, hc_m5_wqe_t *w, uint16_t ridx)
{
    hc_m5_seg_t *ps = q->peer->seg;
    hc_m5_sqp_t *pq = &ps->qp[q->peer_idx];
    uint8_t buf[64];
    struct mlx5_cqe64 *cqe = (struct mlx5_cqe64 *)buf;
    memset(cqe, 0, sizeof(*cqe));
    uint8_t op = w->opcode == MLX5_OPCODE_SEND       ? MLX5_CQE_RESP_SEND
                 : w->opcode == MLX5_OPCODE_SEND_IMM ? MLX5_CQE_RESP_SEND_IMM
                                                     : MLX5_CQE_RESP_WR_IMM;
    cqe->imm_inval_pkey = w->opcode == MLX5_OPCODE_SEND ? 0 : w->imm;
    cqe->byte_cnt = htobe32((uint32_t)w->len);
    cqe->flags_rqpn = htobe32(q->qpn);
    cqe->sop_drop_qpn = htobe32(q->peer_idx + 1);
    cqe->wqe_counter = htobe16(ridx);
    cqe->op_own = (uint8_t)(op << 4);
    pq->rq_ci++;
    if (!hc_m5_cqe_put(m, ps, pq->cq, buf)) /* the target's CQ overran */
        hc_m5_resp_fail_locked(m, ps, pq, false, 0, 0);
    hc_m5_cq_unlock(&ps->cq[pq->cq]);
    m->stats.bytes += w->len;
    if (w->signaled) hc_m5_req_done(m, q, w, 0);
}

/* SEND, SEND WITH IMMEDIATE, RDMA WRITE WITH IMMEDIATE: consume a receive
 * of the target QP. */
static int hc_m5_exec_recv(hc_mlx5_model_t *m, hc_m5_qp_t *q, hc_m5_wqe_t *w)
{
    hc_m5_seg_t *ps = q->peer->seg;
    const uint8_t vm = HC_M5_VENDOR_MODEL;
    if (w->opcode == MLX5_OPCODE_RDMA_WRITE_IMM && w->len) {
        const char *why = hc_m5_key_check(ps, w->rkey, w->raddr, w->len, IBV_ACCESS_REMOTE_WRITE);
        if (why) {
            hc_m5_resp_fail(m, q, false, 0, 0);
            hc_m5_req_fail(m, q, w, HC_M5_SYN(REMOTE_ACCESS_ERR), vm | HC_M5_SYN(REMOTE_ACCESS_ERR),
                           "rkey 0x%x %s [0x%llx, +%llu) (REMOTE_WRITE) at the target QP %u",
                           w->rkey, why, (unsigned long long)w->raddr, (unsigned long long)w->len,
                           q->peer_idx + 1);
            return HC_M5_DONE;
        }
        w->raddr = hc_m5_key_dma(ps, w->rkey, w->raddr);
    }
    uint16_t ridx = 0;
    int rc = hc_m5_recv_take(m, q, w, &ridx);
    if (rc != HC_M5_GO) return rc;
    if (hc_m5_recv_place(m, q, w, ridx)) hc_m5_recv_done(m, q, w, ridx);
    return HC_M5_DONE;
}

/* Runs WQE w of q (in RTS): HC_M5_DONE (completed or failed) or HC_M5_WAIT. */
static int hc_m5_exec(hc_mlx5_model_t *m, hc_m5_qp_t *q, hc_m5_wqe_t *w)
{
    const hc_m5_peer_t *p = q->peer;
    hc_m5_seg_t *ps = p->seg;
    hc_m5_sqp_t *pq = &ps->qp[q->peer_idx];
    uint32_t pqpn = q->peer_idx + 1;
    const uint8_t vm = HC_M5_VENDOR_MODEL;
    uint32_t st = __atomic_load_n(&pq->state, __ATOMIC_ACQUIRE);
    if (pq->gen != q->peer_gen || st == HC_M5_QP_FREE || st == HC_M5_QP_DESTROYED ||
        st == HC_M5_QP_ERR) {
        hc_m5_req_fail(m, q, w, HC_M5_SYN(TRANSPORT_RETRY_EXC_ERR),
                       vm | HC_M5_SYN(TRANSPORT_RETRY_EXC_ERR),
                       "the target QP %u (process %d) is %s", pqpn, (int)p->pid,
                       pq->gen != q->peer_gen ? "destroyed" : hc_m5_state_name(st));
        return HC_M5_DONE;
    }
    if (st == HC_M5_QP_INIT) { /* not connected yet: RC retries */
        uint64_t now = hc_time_ns();
        if (!q->wait_ns) q->wait_ns = now;
        if (now - q->wait_ns < HC_M5_RETRY_NS) return HC_M5_WAIT;
        hc_m5_req_fail(m, q, w, HC_M5_SYN(TRANSPORT_RETRY_EXC_ERR),
                       vm | HC_M5_SYN(TRANSPORT_RETRY_EXC_ERR),
                       "the target QP %u (process %d) stayed in INIT (not connected) for %llu s",
                       pqpn, (int)p->pid, (unsigned long long)(HC_M5_RETRY_NS / 1000000000ull));
        return HC_M5_DONE;
    }
    if (w->opcode != MLX5_OPCODE_RDMA_WRITE && w->opcode != MLX5_OPCODE_RDMA_READ)
        return hc_m5_exec_recv(m, q, w);
    bool wr = w->opcode == MLX5_OPCODE_RDMA_WRITE;
    if (w->len) {
        const char *why = hc_m5_key_check(ps, w->rkey, w->raddr, w->len,
                                          wr ? IBV_ACCESS_REMOTE_WRITE : IBV_ACCESS_REMOTE_READ);
        if (why) {
            hc_m5_resp_fail(m, q, false, 0, 0);
            hc_m5_req_fail(m, q, w, HC_M5_SYN(REMOTE_ACCESS_ERR), vm | HC_M5_SYN(REMOTE_ACCESS_ERR),
                           "rkey 0x%x %s [0x%llx, +%llu) (%s) at the target QP %u", w->rkey, why,
                           (unsigned long long)w->raddr, (unsigned long long)w->len,
                           wr ? "REMOTE_WRITE" : "REMOTE_READ", pqpn);
            return HC_M5_DONE;
        }
        w->raddr = hc_m5_key_dma(ps, w->rkey, w->raddr); /* the owner's dmabuf mapping */
    }
    int e = hc_m5_move(p, wr, w, w->raddr, true);
    if (!e && w->len == 0 && !hc_m5_peer_alive(p)) e = ESRCH;
    if (e) {
        if (e != ESRCH && e != EPERM) hc_m5_resp_fail(m, q, false, 0, 0);
        hc_m5_xfer_fail(m, q, w, e, w->raddr);
        return HC_M5_DONE;
    }
    m->stats.bytes += w->len;
    if (w->signaled) hc_m5_req_done(m, q, w, wr ? 0 : (uint32_t)w->len);
    return HC_M5_DONE;
}

/* An injected fault for WQE w (the nrun-th): as if the cause had happened. */
static void hc_m5_inject(hc_mlx5_model_t *m, hc_m5_qp_t *q, hc_m5_wqe_t *w, int kind)
{
    const uint8_t vf = HC_M5_VENDOR_FAULT;
    const char *name = hc_m5_fault_names[kind];
    unsigned long long n = (unsigned long long)m->nrun;
    bool recv = w->opcode == MLX5_OPCODE_SEND || w->opcode == MLX5_OPCODE_SEND_IMM ||
                w->opcode == MLX5_OPCODE_RDMA_WRITE_IMM;
    switch (kind) {
    case HC_M5_F_REMOTE_ACCESS:
        hc_m5_resp_fail(m, q, false, 0, 0);
        hc_m5_req_fail(m, q, w, HC_M5_SYN(REMOTE_ACCESS_ERR), vf | HC_M5_SYN(REMOTE_ACCESS_ERR),
                       "injected (HCOMM_MLX5_MODEL_FAULT %s@%llu)", name, n);
        break;
    case HC_M5_F_LOCAL_PROT:
        hc_m5_req_fail(m, q, w, HC_M5_SYN(LOCAL_PROT_ERR), vf | HC_M5_SYN(LOCAL_PROT_ERR),
                       "injected (HCOMM_MLX5_MODEL_FAULT %s@%llu)", name, n);
        break;
    case HC_M5_F_LENGTH:
        hc_m5_resp_fail(m, q, recv, HC_M5_SYN(LOCAL_LENGTH_ERR), vf | HC_M5_SYN(LOCAL_LENGTH_ERR));
        hc_m5_req_fail(m, q, w, HC_M5_SYN(REMOTE_OP_ERR), vf | HC_M5_SYN(REMOTE_OP_ERR),
                       "injected (HCOMM_MLX5_MODEL_FAULT %s@%llu)", name, n);
        break;
    case HC_M5_F_RETRY:
        hc_m5_req_fail(m, q, w, HC_M5_SYN(TRANSPORT_RETRY_EXC_ERR),
                       vf | HC_M5_SYN(TRANSPORT_RETRY_EXC_ERR),
                       "injected (HCOMM_MLX5_MODEL_FAULT %s@%llu)", name, n);
        break;
    default:
        hc_m5_req_fail(m, q, w, HC_M5_SYN(WR_FLUSH_ERR), vf | HC_M5_SYN(WR_FLUSH_ERR),
                       "injected (HCOMM_MLX5_MODEL_FAULT %s@%llu)", name, n);
        break;
    }
}

static int hc_m5_fault_at(hc_mlx5_model_t *m, uint64_t n)
{
    while (m->fault_next < m->nfaults && m->faults[m->fault_next].n < n)
        m->fault_next++;
    if (m->fault_next < m->nfaults && m->faults[m->fault_next].n == n)
        return m->faults[m->fault_next++].kind;
    return -1;
}

/* QP q in ERROR: flushes the receives posted (lock of its CQ). */
static void hc_m5_rq_flush_own(hc_mlx5_model_t *m, hc_m5_qp_t *q)
{
    hc_m5_scq_t *c = &m->seg->cq[q->s->cq];
    if (!hc_m5_cq_lock(c, q->s->cq + 1)) return;
    hc_m5_rq_flush(m, m->seg, q->s);
    hc_m5_cq_unlock(c);
}

/* Runs q's WQEs from sq_ci to the send doorbell record: the number run or
 * flushed. */
int hc_m5_qp_run(hc_mlx5_model_t *m, hc_m5_qp_t *q)
{
    int ran = 0;
    q->marked = false;
    uint16_t pi = hc_m5_sq_pi(q);
    if ((uint16_t)(pi - q->sq_ci) > q->sq_cnt) {
        hc_log_error("mlx5 model: QP %u: the send doorbell record %u is %u WQEBBs past the model's "
                     "consumed index %u (SQ of %u WQEBBs): QP moved to the error state",
                     q->qpn, pi, (uint16_t)(pi - q->sq_ci), q->sq_ci, q->sq_cnt);
        __atomic_store_n(&q->s->state, HC_M5_QP_ERR, __ATOMIC_RELEASE);
        q->sq_ci = q->db_ci = pi;
        q->waiting = false;
        hc_m5_rq_flush_own(m, q);
        return 0;
    }
    hc_m5_wqe_t w;
    while (q->sq_ci != pi) {
        uint32_t st = __atomic_load_n(&q->s->state, __ATOMIC_ACQUIRE);
        uint16_t left = (uint16_t)(pi - q->sq_ci);
        if (st == HC_M5_QP_ERR) {
            hc_m5_wqe_head(q, q->sq_ci, left, &w);
            uint8_t cqe[64];
            hc_m5_cqe_err(cqe, MLX5_CQE_REQ_ERR, HC_M5_SYN(WR_FLUSH_ERR),
                          HC_M5_VENDOR_MODEL | HC_M5_SYN(WR_FLUSH_ERR), w.opcode, q->qpn, w.idx);
            hc_m5_scq_t *c = &m->seg->cq[q->s->cq];
            if (!hc_m5_cq_lock(c, q->s->cq + 1)) break;
            bool put = hc_m5_cqe_put(m, m->seg, q->s->cq, cqe);
            hc_m5_cq_unlock(c);
            if (!put) break; /* CQ full: flushed once the consumer makes room */
            q->waiting = false;
            q->wait_ns = 0;
            q->sq_ci = (uint16_t)(q->sq_ci + w.nbb);
            ran++;
            continue;
        }
        bool first = !q->waiting;
        int fault = -1;
        uint8_t synd;
        if (first) m->nrun++;
        if (st != HC_M5_QP_RTS) {
            hc_m5_wqe_head(q, q->sq_ci, left, &w);
            hc_m5_set_why(m, "the QP is in %s, not RTS", hc_m5_state_name(st));
            synd = HC_M5_SYN(LOCAL_QP_OP_ERR);
        } else {
            synd = hc_m5_parse(m, q, left, &w);
            if (!synd && first) fault = hc_m5_fault_at(m, m->nrun);
        }
        if (synd) {
            hc_m5_req_fail(m, q, &w, synd, HC_M5_VENDOR_MODEL | synd, "%s", m->why);
        } else if (fault >= 0) {
            hc_m5_inject(m, q, &w, fault);
        } else if (hc_m5_exec(m, q, &w) == HC_M5_WAIT) {
            if (first) {
                q->waiting = true;
                m->stats.rnr_waits++;
                hc_log_debug("mlx5 model: QP %u WQE %u (%s) waits: the target QP %u has no receive "
                             "posted or is not connected yet",
                             q->qpn, w.idx, hc_m5_op_name(w.opcode), q->peer_idx + 1);
            }
            break;
        }
        q->waiting = false;
        q->wait_ns = 0;
        q->sq_ci = (uint16_t)(q->sq_ci + w.nbb);
        m->stats.wqes++;
        ran++;
    }
    if (__atomic_load_n(&q->s->state, __ATOMIC_ACQUIRE) == HC_M5_QP_ERR) {
        const __be32 *db = q->dbrec;
        if ((uint16_t)be32toh(__atomic_load_n(&db[MLX5_RCV_DBR], __ATOMIC_ACQUIRE)) !=
            (uint16_t)q->s->rq_ci)
            hc_m5_rq_flush_own(m, q);
    }
    return ran;
}
