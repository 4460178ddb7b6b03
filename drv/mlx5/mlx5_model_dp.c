/*
 * mlx5 model: the queue backend (hc_verbs_dp_t) of drv/mlx5 on the model of
 * the queues (HCOMM_MLX5_MODEL=1): CQs, QPs and memory keys made by the
 * model (mlx5_model.h), posted and polled by drv/mlx5's own data path.
 * Test machinery: built into the test objects only (-DHCOMM_MLX5_MODEL=ON),
 * never into libhcomm.so or libhcomm.a; its constructor plugs it into the
 * driver (hc_mlx5_model_glue, mlx5.h). Ranks on the model talk only to each
 * other (the address says "model").
 */
#include "drv/mlx5/mlx5.h"
#include "drv/mlx5/mlx5_model.h"
#include "base/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* The link layer a model address carries: no device talks to it. */
#define HC_MLX5_MODEL_LINK 0x4d

static struct {
    const char *fault;
} hc_mlx5_model_cfg;

static const hc_config_knob_t hc_mlx5_model_knobs[] = {
    HC_KNOB_STR(hc_mlx5_model_cfg.fault, "HCOMM_MLX5_MODEL_FAULT", "",
                "mlx5 model: KIND@N[,...]: the N-th WQE this process's model runs fails with "
                "KIND (remote_access, local_prot, length, retry, flush)"),
};
HC_CONFIG_KNOBS("mlx5 model", hc_mlx5_model_knobs)

static uint32_t hc_mlx5_pow2_up(uint32_t v)
{
    uint32_t p = 1;
    while (p < v)
        p <<= 1;
    return p;
}

static hcomm_status_t hc_mlx5_model_dev_open(hc_verbs_drv_t *d, const hc_drv_env_t *env)
{
    (void)env;
    hc_mlx5_dev_t *dev = calloc(1, sizeof(*dev));
    if (!dev) return hc_error(HCOMM_ERR_NO_MEMORY, "mlx5: model state");
    d->bdev = dev;
    hcomm_status_t st = hc_mlx5_check_knobs(&dev->mmio);
    if (st != HCOMM_OK) return st;
    st = hc_mlx5_model_open(&dev->model, hc_mlx5_model_cfg.fault);
    if (st != HCOMM_OK) return st;
    snprintf(d->dev_name, sizeof(d->dev_name), "mlx5 model");
    d->me.link_layer = HC_MLX5_MODEL_LINK;
    d->me.port = 1;
    d->me.mtu = IBV_MTU_4096;
    hc_mlx5_model_id(dev->model, d->me.gid);
    d->max_msg = 1u << 30;
    d->dev_attr.max_cqe = 1 << 16;
    d->dev_attr.max_qp_rd_atom = d->dev_attr.max_qp_init_rd_atom = 16;
    hc_log_info("mlx5: the model of the mlx5 queues (HCOMM_MLX5_MODEL=1), doorbell %s",
                dev->mmio == HC_MLX5_MMIO_DB ? "by 8-byte write" : "by BlueFlame for single WQEs");
    return HCOMM_OK;
}

static void hc_mlx5_model_dev_close(hc_verbs_drv_t *d)
{
    hc_mlx5_dev_t *dev = d->bdev;
    if (dev && dev->model) {
        hc_mlx5_model_stats_t s;
        hc_mlx5_model_stats(dev->model, &s);
        hc_log_info(
            "mlx5 model: %llu WQEs run, %llu CQEs (%llu errors), %llu bytes, %llu RNR waits, "
            "%llu doorbells that did not match their WQE",
            (unsigned long long)s.wqes, (unsigned long long)s.cqes, (unsigned long long)s.err_cqes,
            (unsigned long long)s.bytes, (unsigned long long)s.rnr_waits,
            (unsigned long long)s.bad_doorbells);
        if (s.bad_doorbells)
            hc_log_warn("mlx5 model: %llu doorbells did not match the WQEs they published",
                        (unsigned long long)s.bad_doorbells);
        hc_mlx5_model_close(dev->model);
    }
    free(dev);
    d->bdev = NULL;
}

static hcomm_status_t hc_mlx5_model_mr_reg(hc_verbs_drv_t *d, void *addr, size_t len, int access,
                                           hc_verbs_mr_t *mr)
{
    hc_mlx5_dev_t *dev = d->bdev;
    uint32_t key;
    hcomm_status_t st = hc_mlx5_model_reg(dev->model, addr, len, access, &key);
    if (st != HCOMM_OK) return st;
    *mr = (hc_verbs_mr_t){.lkey = key, .rkey = key, .handle = 1};
    return HCOMM_OK;
}

/* Device memory: the model maps the dmabuf fd, as a NIC maps it for DMA. */
static hcomm_status_t hc_mlx5_model_mr_reg_dmabuf(hc_verbs_drv_t *d, void *addr, size_t len, int fd,
                                                  uint64_t offset, int access, hc_verbs_mr_t *mr)
{
    hc_mlx5_dev_t *dev = d->bdev;
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t off = offset & ~(page - 1), skip = offset - off;
    size_t map_len = HC_ALIGN_UP(len + skip, page);
    void *map =
        mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, (off_t)off);
    if (map == MAP_FAILED)
        return hc_error_errno(HCOMM_ERR_NO_MEMORY, errno,
                              "mlx5 model: mmap of dmabuf fd %d (%zu bytes at offset %llu) for "
                              "device memory at %p",
                              fd, map_len, (unsigned long long)off, addr);
    uint32_t key;
    hcomm_status_t st =
        hc_mlx5_model_reg_dma(dev->model, addr, len, access, (char *)map + skip, &key);
    if (st != HCOMM_OK) {
        munmap(map, map_len);
        return st;
    }
    *mr = (hc_verbs_mr_t){.lkey = key, .rkey = key, .handle = 1, .map = map, .map_len = map_len};
    return HCOMM_OK;
}

static void hc_mlx5_model_mr_dereg(hc_verbs_drv_t *d, hc_verbs_mr_t *mr)
{
    hc_mlx5_dev_t *dev = d->bdev;
    if (!mr->handle) return;
    hc_mlx5_model_dereg(dev->model, mr->lkey);
    mr->handle = 0;
    if (mr->map) munmap(mr->map, mr->map_len);
    mr->map = NULL;
}

static hcomm_status_t hc_mlx5_model_cq_make(hc_verbs_drv_t *d, int cqe, hc_verbs_cq_t *cq)
{
    hc_mlx5_dev_t *dev = d->bdev;
    struct mlx5dv_cq dv;
    hcomm_status_t st = hc_mlx5_model_cq_create(dev->model, (uint32_t)cqe, &dv);
    if (st != HCOMM_OK) return st;
    st = hc_mlx5_cq_wrap(d, cq, &dv);
    if (st != HCOMM_OK) hc_mlx5_model_cq_destroy(dev->model, dv.cqn);
    return st;
}

static void hc_mlx5_model_cq_free(hc_verbs_drv_t *d, hc_verbs_cq_t *cq)
{
    hc_mlx5_dev_t *dev = d->bdev;
    hc_mlx5_cq_t *mcq = cq->bq;
    if (!mcq) return;
    uint32_t cqn = mcq->cqn;
    hc_mlx5_cq_unwrap(cq);
    hc_mlx5_model_cq_destroy(dev->model, cqn);
}

static hcomm_status_t hc_mlx5_model_qp_make(hc_verbs_drv_t *d, hc_verbs_cq_t *cq, uint32_t max_recv,
                                            hc_verbs_qp_t *q, uint32_t *max_inline)
{
    hc_mlx5_dev_t *dev = d->bdev;
    hc_mlx5_cq_t *mcq = cq->bq;
    struct mlx5dv_qp dv;
    uint32_t qpn = 0;
    hcomm_status_t st = hc_mlx5_model_qp_create(
        dev->model, mcq->cqn, hc_mlx5_pow2_up(HC_VERBS_SQ_DEPTH * HC_MLX5_MAX_WQE_BBS),
        hc_mlx5_pow2_up(max_recv), HC_VERBS_INLINE, &dv, &qpn);
    if (st != HCOMM_OK) return st;
    q->qp = NULL;
    q->qpn = qpn;
    q->live = true;
    *max_inline = HC_VERBS_INLINE;
    st = hc_mlx5_qp_wrap(d, cq, q, &dv, HC_VERBS_INLINE);
    if (st != HCOMM_OK) {
        hc_mlx5_model_qp_destroy(dev->model, qpn);
        q->live = false;
    }
    return st;
}

static hcomm_status_t hc_mlx5_model_qp_rts(hc_verbs_conn_t *c, hc_verbs_qp_t *q, uint32_t dest_qpn,
                                           uint32_t rq_psn)
{
    (void)rq_psn;
    hc_mlx5_dev_t *dev = c->d->bdev;
    return hc_mlx5_model_qp_connect(dev->model, q->qpn, c->addr.gid, dest_qpn);
}

static void hc_mlx5_model_qp_free(hc_verbs_drv_t *d, hc_verbs_qp_t *q)
{
    hc_mlx5_dev_t *dev = d->bdev;
    hc_mlx5_qp_unwrap(q);
    if (q->live) hc_mlx5_model_qp_destroy(dev->model, q->qpn);
    q->live = false;
}

static const hc_verbs_dp_t hc_mlx5_dp_model = {
    .name = "mlx5 direct, on the model",
    .dev_open = hc_mlx5_model_dev_open,
    .dev_close = hc_mlx5_model_dev_close,
    .mr_reg = hc_mlx5_model_mr_reg,
    .mr_dereg = hc_mlx5_model_mr_dereg,
    .mr_reg_dmabuf = hc_mlx5_model_mr_reg_dmabuf,
    .cq_create = hc_mlx5_model_cq_make,
    .cq_destroy = hc_mlx5_model_cq_free,
    .qp_create = hc_mlx5_model_qp_make,
    .qp_connect = hc_mlx5_model_qp_rts,
    .qp_destroy = hc_mlx5_model_qp_free,
    .post_send = hc_mlx5_post_send,
    .post_recv = hc_mlx5_recv,
    .poll_cq = hc_mlx5_poll_cq,
};

static const hc_mlx5_model_glue_t hc_mlx5_model_glue_table = {
    .dp = &hc_mlx5_dp_model,
    .kick = hc_mlx5_model_kick,
    .progress = hc_mlx5_model_progress,
};

__attribute__((constructor)) static void hc_mlx5_model_plug(void)
{
    hc_mlx5_model_glue = &hc_mlx5_model_glue_table;
}
