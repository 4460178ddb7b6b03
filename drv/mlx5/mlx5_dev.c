/*
 * mlx5: the queue backends under drv/verbs' protocol, the probe, hcomm_info's
 * lines and the ops table (docs/mlx5.md).
 *
 * On a device: QPs and CQs are made by ibverbs (drv/verbs' control path:
 * device and GID choice, PD, INIT/RTR/RTS), then mlx5dv_init_obj gives their
 * send and receive rings, doorbell records, BlueFlame register and CQ
 * buffer, and mlx5_dp.c does the posting and polling. The probe makes one CQ
 * and one QP and checks their layout against what the data path handles; a
 * device that is not mlx5 or whose queues it cannot drive is skipped with
 * the reason, and drv/verbs (below on the ladder) serves it.
 *
 * On the model (HCOMM_MLX5_MODEL=1): no device; the model of the queues
 * makes them and executes what the data path posts. It is test machinery,
 * in the test library only (mlx5_model*.c, built into the test objects with
 * -DHCOMM_MLX5_MODEL=ON): it registers its queue backend here
 * (hc_mlx5_model_glue), and a library without it refuses the variable.
 */
#include "drv/mlx5/mlx5.h"
#include "base/config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

hc_mlx5_cfg_t hc_mlx5_cfg;
const hc_mlx5_model_glue_t *hc_mlx5_model_glue;

static const hc_config_knob_t hc_mlx5_knobs[] = {
    HC_KNOB_STR(hc_mlx5_cfg.mmio, "HCOMM_MLX5_MMIO", "auto",
                "mlx5: how a doorbell is rung: bf (BlueFlame: a single WQE copied to the "
                "NIC's register), db (the 8-byte doorbell; the NIC reads the WQEs), auto (bf "
                "when the QP has a BlueFlame register)"),
    HC_KNOB_BOOL(hc_mlx5_cfg.model, "HCOMM_MLX5_MODEL", "0",
                 "mlx5: run over the model of the mlx5 queues instead of a device (tests: only "
                 "the test library has the model, with -DHCOMM_MLX5_MODEL=ON)"),
};
HC_CONFIG_KNOBS("mlx5", hc_mlx5_knobs)

hcomm_status_t hc_mlx5_check_knobs(int *mmio_p)
{
    const char *m = hc_mlx5_cfg.mmio;
    if (!strcmp(m, "bf"))
        *mmio_p = HC_MLX5_MMIO_BF;
    else if (!strcmp(m, "db"))
        *mmio_p = HC_MLX5_MMIO_DB;
    else if (!strcmp(m, "auto"))
        *mmio_p = 0;
    else
        return hc_error(HCOMM_ERR_INVALID, "HCOMM_MLX5_MMIO=%s must be bf, db or auto", m);
    return hc_verbs_check_knobs();
}

/* The mode a QP uses: auto is BlueFlame when it has a register for it. */
static int hc_mlx5_mode(int want, const struct mlx5dv_qp *dv)
{
    if (want) return want;
    return dv->bf.size >= MLX5_SEND_WQE_BB ? HC_MLX5_MMIO_BF : HC_MLX5_MMIO_DB;
}

/* ---- common to both backends ------------------------------------------------------------------ */

int hc_mlx5_post_send(hc_verbs_qp_t *q, const hc_verbs_wr_t *wr, int n, int *posted)
{
    return hc_mlx5_post(q->bq, wr, n, posted);
}

int hc_mlx5_recv(hc_verbs_qp_t *q, uint64_t addr, uint32_t len, uint32_t lkey, uint64_t wr_id)
{
    return hc_mlx5_post_recv(q->bq, addr, len, lkey, wr_id);
}

int hc_mlx5_poll_cq(hc_verbs_cq_t *cq, struct ibv_wc *wc, int n)
{
    return hc_mlx5_poll(cq->bq, wc, n);
}

/* The data path's state of a QP the backend just made. */
hcomm_status_t hc_mlx5_qp_wrap(hc_verbs_drv_t *d, hc_verbs_cq_t *cq, hc_verbs_qp_t *q,
                               const struct mlx5dv_qp *dv, uint32_t max_inline)
{
    hc_mlx5_dev_t *dev = d->bdev;
    hc_mlx5_qp_t *mq = calloc(1, sizeof(*mq));
    if (!mq) return hc_error(HCOMM_ERR_NO_MEMORY, "mlx5: QP state");
    hcomm_status_t st = hc_mlx5_qp_setup(mq, dv, q->qpn, max_inline, hc_mlx5_mode(dev->mmio, dv));
    if (st == HCOMM_OK) st = hc_mlx5_cq_attach(cq->bq, mq);
    if (st != HCOMM_OK) {
        hc_mlx5_qp_cleanup(mq);
        free(mq);
        return st;
    }
    mq->model = dev->model;
    mq->cq = cq->bq;
    q->bq = mq;
    return HCOMM_OK;
}

void hc_mlx5_qp_unwrap(hc_verbs_qp_t *q)
{
    hc_mlx5_qp_t *mq = q->bq;
    if (!mq) return;
    if (mq->cq) hc_mlx5_cq_detach(mq->cq, mq);
    hc_mlx5_qp_cleanup(mq);
    free(mq);
    q->bq = NULL;
}

hcomm_status_t hc_mlx5_cq_wrap(hc_verbs_drv_t *d, hc_verbs_cq_t *cq, const struct mlx5dv_cq *dv)
{
    hc_mlx5_dev_t *dev = d->bdev;
    hc_mlx5_cq_t *mcq = calloc(1, sizeof(*mcq));
    if (!mcq) return hc_error(HCOMM_ERR_NO_MEMORY, "mlx5: CQ state");
    hcomm_status_t st = hc_mlx5_cq_setup(mcq, dv);
    if (st != HCOMM_OK) {
        free(mcq);
        return st;
    }
    mcq->model = dev->model;
    cq->bq = mcq;
    return HCOMM_OK;
}

void hc_mlx5_cq_unwrap(hc_verbs_cq_t *cq)
{
    if (!cq->bq) return;
    hc_mlx5_cq_cleanup(cq->bq);
    free(cq->bq);
    cq->bq = NULL;
}

/* ---- a device: ibverbs makes the queues, mlx5dv opens them ------------------------------------ */

static hcomm_status_t hc_mlx5_dv_qp(struct ibv_qp *qp, struct mlx5dv_qp *dv)
{
    struct mlx5dv_obj obj = {.qp = {.in = qp, .out = dv}};
    int rc = mlx5dv_init_obj(&obj, MLX5DV_OBJ_QP);
    if (rc) return hc_error_errno(HCOMM_ERR_UNSUPPORTED, rc, "mlx5: mlx5dv_init_obj(QP %u)", qp->qp_num);
    return HCOMM_OK;
}

static hcomm_status_t hc_mlx5_dv_cq(struct ibv_cq *cq, struct mlx5dv_cq *dv)
{
    struct mlx5dv_obj obj = {.cq = {.in = cq, .out = dv}};
    int rc = mlx5dv_init_obj(&obj, MLX5DV_OBJ_CQ);
    if (rc) return hc_error_errno(HCOMM_ERR_UNSUPPORTED, rc, "mlx5: mlx5dv_init_obj(CQ)");
    return HCOMM_OK;
}

static hcomm_status_t hc_mlx5_hw_open(hc_verbs_drv_t *d, const hc_drv_env_t *env)
{
    hc_mlx5_dev_t *dev = calloc(1, sizeof(*dev));
    if (!dev) return hc_error(HCOMM_ERR_NO_MEMORY, "mlx5: device state");
    d->bdev = dev;
    hcomm_status_t st = hc_mlx5_check_knobs(&dev->mmio);
    if (st != HCOMM_OK) return st;
    st = hc_verbs_dev_open(d, env);
    if (st != HCOMM_OK) return st;
    if (!mlx5dv_is_supported(d->ctx->device))
        return hc_error(HCOMM_ERR_UNSUPPORTED, "mlx5: %s is not an mlx5 device", d->dev_name);
    return HCOMM_OK;
}

static void hc_mlx5_hw_close(hc_verbs_drv_t *d)
{
    hc_verbs_dev_close(d);
    free(d->bdev);
    d->bdev = NULL;
}

static hcomm_status_t hc_mlx5_hw_cq_create(hc_verbs_drv_t *d, int cqe, hc_verbs_cq_t *cq)
{
    hcomm_status_t st = hc_verbs_ibv_cq_create(d, cqe, cq);
    struct mlx5dv_cq dv;
    if (st == HCOMM_OK) st = hc_mlx5_dv_cq(cq->cq, &dv);
    if (st == HCOMM_OK) st = hc_mlx5_cq_wrap(d, cq, &dv);
    if (st != HCOMM_OK) hc_verbs_ibv_cq_destroy(d, cq);
    return st;
}

static void hc_mlx5_hw_cq_destroy(hc_verbs_drv_t *d, hc_verbs_cq_t *cq)
{
    hc_mlx5_cq_unwrap(cq);
    hc_verbs_ibv_cq_destroy(d, cq);
}

static hcomm_status_t hc_mlx5_hw_qp_create(hc_verbs_drv_t *d, hc_verbs_cq_t *cq, uint32_t max_recv,
                                           hc_verbs_qp_t *q, uint32_t *max_inline)
{
    hcomm_status_t st = hc_verbs_ibv_qp_create(d, cq, max_recv, q, max_inline);
    struct mlx5dv_qp dv;
    if (st == HCOMM_OK) st = hc_mlx5_dv_qp(q->qp, &dv);
    if (st == HCOMM_OK) st = hc_mlx5_qp_wrap(d, cq, q, &dv, *max_inline);
    if (st != HCOMM_OK && q->live) hc_verbs_ibv_qp_destroy(d, q);
    return st;
}

static void hc_mlx5_hw_qp_destroy(hc_verbs_drv_t *d, hc_verbs_qp_t *q)
{
    hc_mlx5_qp_unwrap(q);
    hc_verbs_ibv_qp_destroy(d, q);
}

static const hc_verbs_dp_t hc_mlx5_dp_hw = {
    .name = "mlx5 direct",
    .dev_open = hc_mlx5_hw_open,
    .dev_close = hc_mlx5_hw_close,
    .mr_reg = hc_verbs_ibv_mr_reg,
    .mr_dereg = hc_verbs_ibv_mr_dereg,
    .mr_reg_dmabuf = hc_verbs_ibv_mr_reg_dmabuf,
    .cq_create = hc_mlx5_hw_cq_create,
    .cq_destroy = hc_mlx5_hw_cq_destroy,
    .qp_create = hc_mlx5_hw_qp_create,
    .qp_connect = hc_verbs_ibv_qp_connect,
    .qp_destroy = hc_mlx5_hw_qp_destroy,
    .post_send = hc_mlx5_post_send,
    .post_recv = hc_mlx5_recv,
    .poll_cq = hc_mlx5_poll_cq,
};

/* The probe's check: one CQ and one QP made as the driver makes them, and
 * their layout read through mlx5dv. why: the reason when it fails. */
static hcomm_status_t hc_mlx5_hw_check(hc_verbs_pick_t *pick, int mmio, char *why, size_t why_len)
{
    struct ibv_pd *pd = ibv_alloc_pd(pick->ctx);
    struct ibv_cq *cq = pd ? ibv_create_cq(pick->ctx, 64, NULL, NULL, 0) : NULL;
    struct ibv_qp_init_attr ia = {.send_cq = cq,
                                  .recv_cq = cq,
                                  .cap = {.max_send_wr = HC_VERBS_SQ_DEPTH,
                                          .max_recv_wr = HC_VERBS_SLOTS,
                                          .max_send_sge = 2,
                                          .max_recv_sge = 1,
                                          .max_inline_data = HC_VERBS_INLINE},
                                  .qp_type = IBV_QPT_RC};
    struct ibv_qp *qp = cq ? ibv_create_qp(pd, &ia) : NULL;
    hcomm_status_t st = HCOMM_OK;
    struct mlx5dv_qp dq;
    struct mlx5dv_cq dc;
    hc_mlx5_qp_t mq;
    hc_mlx5_cq_t mc;
    if (!qp) {
        snprintf(why, why_len, "%s: a test QP could not be made (%s)", pick->name, strerror(errno));
        st = HCOMM_ERR_UNSUPPORTED;
    } else if (hc_mlx5_dv_qp(qp, &dq) != HCOMM_OK || hc_mlx5_dv_cq(cq, &dc) != HCOMM_OK ||
               hc_mlx5_cq_setup(&mc, &dc) != HCOMM_OK ||
               hc_mlx5_qp_setup(&mq, &dq, qp->qp_num, ia.cap.max_inline_data, hc_mlx5_mode(mmio, &dq)) != HCOMM_OK) {
        snprintf(why, why_len, "%s: %s", pick->name, hc_error_last());
        st = HCOMM_ERR_UNSUPPORTED;
    } else {
        snprintf(why, why_len, "%s port %d: direct queues (send queue %u WQEBBs, %u-byte CQEs, "
                 "doorbell by %s, BlueFlame register %u bytes)",
                 pick->name, pick->port, dq.sq.wqe_cnt, dc.cqe_size,
                 hc_mlx5_mode(mmio, &dq) == HC_MLX5_MMIO_BF ? "BlueFlame" : "8-byte write", dq.bf.size);
        hc_mlx5_qp_cleanup(&mq);
        hc_mlx5_cq_cleanup(&mc);
    }
    if (qp) (void)ibv_destroy_qp(qp);
    if (cq) (void)ibv_destroy_cq(cq);
    if (pd) (void)ibv_dealloc_pd(pd);
    return st;
}

/* ---- the driver ------------------------------------------------------------------------------- */

static hcomm_status_t hc_mlx5_probe(const hc_drv_env_t *env, char *why, size_t why_len)
{
    (void)env;
    int mmio = 0;
    if (hc_mlx5_check_knobs(&mmio) != HCOMM_OK) {
        snprintf(why, why_len, "%s", hc_error_last());
        return HCOMM_ERR_INVALID;
    }
    if (hc_mlx5_cfg.model) {
        if (hc_mlx5_model_glue) {
            snprintf(why, why_len, "the model of the mlx5 queues (HCOMM_MLX5_MODEL=1), doorbell %s",
                     mmio == HC_MLX5_MMIO_DB ? "by 8-byte write" : "by BlueFlame for single WQEs");
            return HCOMM_OK;
        }
        snprintf(why, why_len, "HCOMM_MLX5_MODEL=1, but this library has no model of the queues "
                 "(test machinery: only the test library of a -DHCOMM_MLX5_MODEL=ON build has it)");
        return HCOMM_ERR_UNSUPPORTED;
    }
    hc_verbs_pick_t pick;
    hcomm_status_t st = hc_verbs_choose(env, &pick, why, why_len);
    if (st != HCOMM_OK) return st;
    if (!mlx5dv_is_supported(pick.ctx->device)) {
        snprintf(why, why_len, "%s is not an mlx5 device (drv/verbs drives it)", pick.name);
        ibv_close_device(pick.ctx);
        return HCOMM_ERR_UNSUPPORTED;
    }
    st = hc_mlx5_hw_check(&pick, mmio, why, why_len);
    ibv_close_device(pick.ctx);
    return st;
}

static hcomm_status_t hc_mlx5_open(const hc_drv_env_t *env, hc_drv_t **drv_p)
{
    if (hc_mlx5_cfg.model && hc_mlx5_model_glue)
        return hc_verbs_open_dp(env, hc_mlx5_model_glue->dp, drv_p);
    return hc_verbs_open_dp(env, &hc_mlx5_dp_hw, drv_p);
}

static void hc_mlx5_describe(const hc_drv_env_t *env, void (*line)(const char *text, void *arg), void *arg)
{
    (void)env;
    char t[320];
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    for (int i = 0; list && i < n; i++) {
        snprintf(t, sizeof(t), "  mlx5: %s: %s", ibv_get_device_name(list[i]),
                 mlx5dv_is_supported(list[i]) ? "mlx5 (direct queues possible)"
                                              : "not mlx5 (drv/verbs drives it)");
        line(t, arg);
    }
    if (list) ibv_free_device_list(list);
    line(hc_mlx5_model_glue ? "  mlx5: this library has the model of the queues"
                            : "  mlx5: no model of the queues in this library",
         arg);
}

static struct hc_drv_ops hc_mlx5_ops = {
    .name = "mlx5",
    .priority = 60,
    .probe = hc_mlx5_probe,
    .open = hc_mlx5_open,
    .describe = hc_mlx5_describe,
};

__attribute__((constructor)) static void hc_mlx5_register(void)
{
    hc_verbs_fill_ops(&hc_mlx5_ops);
    hc_drv_register(&hc_mlx5_ops);
}
