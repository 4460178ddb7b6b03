/*
 * verbs driver: the ibverbs queue backend (hc_verbs_dp_t, verbs.h). QPs and
 * CQs through ibv_create_qp/ibv_create_cq, work through ibv_post_send and
 * ibv_post_recv, completions through ibv_poll_cq: the generic path, any HCA
 * and soft-RoCE. drv/mlx5 reuses its control-path functions on a device and
 * replaces the posting and polling.
 */
#include "drv/verbs/verbs.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

hcomm_status_t hc_verbs_ibv_mr_reg(hc_verbs_drv_t *d, void *addr, size_t len, int access,
                                   hc_verbs_mr_t *mr)
{
    struct ibv_mr *m = ibv_reg_mr(d->pd, addr, len, access);
    if (!m) {
        int e = errno;
        return hc_error_errno(HCOMM_ERR_NO_MEMORY, e, "verbs: ibv_reg_mr(%p, %zu bytes) on %s%s", addr,
                              len, d->dev_name,
                              e == ENOMEM || e == EPERM ? " (RLIMIT_MEMLOCK: ulimit -l unlimited)" : "");
    }
    *mr = (hc_verbs_mr_t){.mr = m, .lkey = m->lkey, .rkey = m->rkey};
    return HCOMM_OK;
}

/* Device memory by its dmabuf fd (rdma-core 34+, kernel 5.12+; soft-RoCE
 * and many providers answer EOPNOTSUPP / EINVAL: then HCOMM_GDR=auto
 * stages, and 1 fails naming this). */
hcomm_status_t hc_verbs_ibv_mr_reg_dmabuf(hc_verbs_drv_t *d, void *addr, size_t len, int fd,
                                          uint64_t offset, int access, hc_verbs_mr_t *mr)
{
    struct ibv_mr *m = ibv_reg_dmabuf_mr(d->pd, offset, len, (uint64_t)(uintptr_t)addr, fd, access);
    if (!m)
        return hc_error_errno(HCOMM_ERR_UNSUPPORTED, errno,
                              "verbs: ibv_reg_dmabuf_mr(fd %d, offset %llu, %zu bytes at %p) on %s",
                              fd, (unsigned long long)offset, len, addr, d->dev_name);
    *mr = (hc_verbs_mr_t){.mr = m, .lkey = m->lkey, .rkey = m->rkey};
    return HCOMM_OK;
}

void hc_verbs_ibv_mr_dereg(hc_verbs_drv_t *d, hc_verbs_mr_t *mr)
{
    (void)d;
    if (!mr->mr) return;
    int rc = ibv_dereg_mr(mr->mr);
    if (rc) hc_log_warn("verbs: ibv_dereg_mr: %s", strerror(rc));
    mr->mr = NULL;
}

hcomm_status_t hc_verbs_ibv_cq_create(hc_verbs_drv_t *d, int cqe, hc_verbs_cq_t *cq)
{
    cq->cq = ibv_create_cq(d->ctx, cqe, NULL, NULL, 0);
    if (!cq->cq) return hc_error_errno(HCOMM_ERR_NO_MEMORY, errno, "verbs: ibv_create_cq(%d entries)", cqe);
    return HCOMM_OK;
}

void hc_verbs_ibv_cq_destroy(hc_verbs_drv_t *d, hc_verbs_cq_t *cq)
{
    (void)d;
    if (cq->cq) (void)ibv_destroy_cq(cq->cq);
    cq->cq = NULL;
}

hcomm_status_t hc_verbs_ibv_qp_create(hc_verbs_drv_t *d, hc_verbs_cq_t *cq, uint32_t max_recv,
                                      hc_verbs_qp_t *q, uint32_t *max_inline)
{
    struct ibv_qp_init_attr ia = {
        .send_cq = cq->cq,
        .recv_cq = cq->cq,
        .cap = {.max_send_wr = HC_VERBS_SQ_DEPTH,
                .max_recv_wr = max_recv,
                .max_send_sge = 2,
                .max_recv_sge = 1,
                .max_inline_data = HC_VERBS_INLINE},
        .qp_type = IBV_QPT_RC,
        .sq_sig_all = 0,
    };
    struct ibv_qp *qp = ibv_create_qp(d->pd, &ia);
    if (!qp) { /* some devices have less inline room */
        ia.cap.max_inline_data = 0;
        qp = ibv_create_qp(d->pd, &ia);
    }
    if (!qp) return hc_error_errno(HCOMM_ERR_NO_MEMORY, errno, "verbs: ibv_create_qp on %s", d->dev_name);
    q->qp = qp;
    q->qpn = qp->qp_num;
    q->live = true;
    *max_inline = ia.cap.max_inline_data;
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT,
                            .pkey_index = 0,
                            .port_num = d->me.port,
                            .qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
                                               IBV_ACCESS_REMOTE_WRITE};
    int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    if (rc) return hc_error_errno(HCOMM_ERR_INTERNAL, rc, "verbs: QP %u to INIT", q->qpn);
    return HCOMM_OK;
}

hcomm_status_t hc_verbs_ibv_qp_connect(hc_verbs_conn_t *c, hc_verbs_qp_t *q, uint32_t dest_qpn,
                                       uint32_t rq_psn)
{
    hc_verbs_drv_t *d = c->d;
    enum ibv_mtu mtu = (enum ibv_mtu)HC_MIN(d->me.mtu, c->addr.mtu);
    uint8_t rd = (uint8_t)HC_MIN(16, HC_MIN(d->dev_attr.max_qp_rd_atom, d->dev_attr.max_qp_init_rd_atom));
    if (rd < 1) rd = 1;
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR,
                            .path_mtu = mtu,
                            .dest_qp_num = dest_qpn,
                            .rq_psn = rq_psn,
                            .max_dest_rd_atomic = rd,
                            .min_rnr_timer = 12};
    a.ah_attr.port_num = d->me.port;
    a.ah_attr.sl = (uint8_t)hc_verbs_cfg.sl;
    a.ah_attr.dlid = c->addr.lid;
    if (d->me.link_layer == IBV_LINK_LAYER_ETHERNET || c->addr.link_layer == IBV_LINK_LAYER_ETHERNET) {
        a.ah_attr.is_global = 1;
        memcpy(a.ah_attr.grh.dgid.raw, c->addr.gid, 16);
        a.ah_attr.grh.sgid_index = (uint8_t)d->gid_index;
        a.ah_attr.grh.hop_limit = 64;
        a.ah_attr.grh.traffic_class = (uint8_t)hc_verbs_cfg.tc;
    }
    int rc = ibv_modify_qp(q->qp, &a,
                           IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                               IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (rc)
        return hc_error_errno(HCOMM_ERR_INTERNAL, rc, "verbs: QP %u to RTR (rank %d, GID index %d)",
                              q->qpn, c->base.peer, d->gid_index);
    struct ibv_qp_attr b = {.qp_state = IBV_QPS_RTS,
                            .timeout = (uint8_t)hc_verbs_cfg.timeout,
                            .retry_cnt = (uint8_t)hc_verbs_cfg.retry_cnt,
                            .rnr_retry = 7,
                            .sq_psn = c->psn,
                            .max_rd_atomic = rd};
    rc = ibv_modify_qp(q->qp, &b,
                       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                           IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
    if (rc) return hc_error_errno(HCOMM_ERR_INTERNAL, rc, "verbs: QP %u to RTS (rank %d)", q->qpn, c->base.peer);
    return HCOMM_OK;
}

void hc_verbs_ibv_qp_destroy(hc_verbs_drv_t *d, hc_verbs_qp_t *q)
{
    (void)d;
    if (q->qp) (void)ibv_destroy_qp(q->qp);
    q->qp = NULL;
    q->live = false;
}

static const enum ibv_wr_opcode hc_verbs_ibv_op[] = {
    [HC_VERBS_OP_WRITE] = IBV_WR_RDMA_WRITE,
    [HC_VERBS_OP_WRITE_IMM] = IBV_WR_RDMA_WRITE_WITH_IMM,
    [HC_VERBS_OP_READ] = IBV_WR_RDMA_READ,
    [HC_VERBS_OP_SEND] = IBV_WR_SEND,
};

static int hc_verbs_ibv_post_send(hc_verbs_qp_t *q, const hc_verbs_wr_t *wr, int n, int *posted)
{
    struct ibv_sge sge[16];
    struct ibv_send_wr w[16], *bad = NULL;
    *posted = 0;
    while (*posted < n) {
        int k = HC_MIN(n - *posted, 16);
        for (int i = 0; i < k; i++) {
            const hc_verbs_wr_t *r = &wr[*posted + i];
            sge[i] = (struct ibv_sge){.addr = r->laddr, .length = r->len, .lkey = r->lkey};
            w[i] = (struct ibv_send_wr){.wr_id = r->wr_id,
                                        .next = i + 1 < k ? &w[i + 1] : NULL,
                                        .sg_list = &sge[i],
                                        .num_sge = r->len ? 1 : 0,
                                        .opcode = hc_verbs_ibv_op[r->op],
                                        .send_flags = (r->signal ? IBV_SEND_SIGNALED : 0) |
                                                      (r->inl ? IBV_SEND_INLINE : 0),
                                        .imm_data = htobe32(r->imm)};
            w[i].wr.rdma.remote_addr = r->raddr;
            w[i].wr.rdma.rkey = r->rkey;
        }
        int rc = ibv_post_send(q->qp, w, &bad);
        if (rc) {
            for (struct ibv_send_wr *p = w; p != bad && p; p = p->next)
                (*posted)++;
            return rc;
        }
        *posted += k;
    }
    return 0;
}

static int hc_verbs_ibv_post_recv(hc_verbs_qp_t *q, uint64_t addr, uint32_t len, uint32_t lkey,
                                  uint64_t wr_id)
{
    struct ibv_sge sge = {.addr = addr, .length = len, .lkey = lkey};
    struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1}, *bad = NULL;
    return ibv_post_recv(q->qp, &wr, &bad);
}

static int hc_verbs_ibv_poll_cq(hc_verbs_cq_t *cq, struct ibv_wc *wc, int n)
{
    return ibv_poll_cq(cq->cq, n, wc);
}

const hc_verbs_dp_t hc_verbs_dp_ibv = {
    .name = "ibverbs",
    .dev_open = NULL,
    .mr_reg = hc_verbs_ibv_mr_reg,
    .mr_dereg = hc_verbs_ibv_mr_dereg,
    .mr_reg_dmabuf = hc_verbs_ibv_mr_reg_dmabuf,
    .cq_create = hc_verbs_ibv_cq_create,
    .cq_destroy = hc_verbs_ibv_cq_destroy,
    .qp_create = hc_verbs_ibv_qp_create,
    .qp_connect = hc_verbs_ibv_qp_connect,
    .qp_destroy = hc_verbs_ibv_qp_destroy,
    .post_send = hc_verbs_ibv_post_send,
    .post_recv = hc_verbs_ibv_post_recv,
    .poll_cq = hc_verbs_ibv_poll_cq,
};
