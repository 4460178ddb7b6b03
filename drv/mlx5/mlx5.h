/*
 * mlx5: drv/verbs' protocol over queues this driver programs itself. Internal
 * header shared by
 *   mlx5_dp.c     the data path: WQEs built in place in the send queue,
 *                 the doorbell record then the BlueFlame copy or the 8-byte
 *                 doorbell, receives posted into the receive queue, CQEs
 *                 polled by their owner bit, the CQ's consumer-index
 *                 doorbell record;
 *   mlx5_dev.c    the queue backend (hc_verbs_dp_t) for a device (QPs and
 *                 CQs made by ibverbs, then mlx5dv_init_obj), the probe,
 *                 hcomm_info's lines, the ops table;
 *   mlx5_model*.c the model of the queues and its backend: test machinery,
 *                 in the test objects only (-DHCOMM_MLX5_MODEL=ON), never
 *                 in libhcomm.so or libhcomm.a; it plugs in through
 *                 hc_mlx5_model_glue (below).
 * Layouts come from rdma-core's mlx5dv.h; what it lacks and the barriers are
 * in mlx5_layout.h. The design is in docs/mlx5.md.
 */
#ifndef HC_DRV_MLX5_H
#define HC_DRV_MLX5_H

#include "drv/mlx5/mlx5_layout.h"
#include "drv/verbs/verbs.h"

#include <infiniband/mlx5dv.h>

struct hc_mlx5_model;

/* How the doorbell is rung (HCOMM_MLX5_MMIO). */
enum { HC_MLX5_MMIO_DB = 1, HC_MLX5_MMIO_BF = 2 };

/* Send WQEBBs per protocol WQE slot: a WQE of the largest inline payload the
 * driver asks for (HC_VERBS_INLINE bytes after ctrl + raddr + the inline
 * header) fits in this many 64-byte blocks. */
#define HC_MLX5_MAX_WQE_BBS                                                                        \
    ((16 + 16 + 4 + HC_VERBS_INLINE + MLX5_SEND_WQE_BB - 1) / MLX5_SEND_WQE_BB)

typedef struct hc_mlx5_qp {
    /* send queue: wqe_cnt WQEBBs of 64 bytes */
    uint8_t *sq_buf;
    uint32_t sq_cnt, sq_mask;
    uint32_t sq_pi; /* WQEBBs posted; the doorbell record holds its low 16 bits */
    uint32_t sq_ci; /* WQEBBs known complete (after the last retired WQE) */
    uint64_t *sq_wrid;  /* per first WQEBB of a WQE: its wr_id */
    uint8_t *sq_nbb;    /* per first WQEBB of a WQE: how many WQEBBs it took */
    uint8_t *sq_op;     /* per first WQEBB of a WQE: its MLX5_OPCODE_* */
    uint32_t last_idx;  /* the last WQE written: its first WQEBB and size */
    uint8_t last_nbb;
    volatile __be32 *dbrec; /* [MLX5_RCV_DBR], [MLX5_SND_DBR] */
    uint8_t *bf_reg;
    uint32_t bf_size, bf_off;
    uint8_t mmio;      /* HC_MLX5_MMIO_* */
    uint32_t qpn;
    uint32_t max_inline;
    /* receive queue: rq_cnt WQEs of rq_stride bytes (one data segment each) */
    uint8_t *rq_buf;
    uint32_t rq_cnt, rq_mask, rq_stride;
    uint32_t rq_pi, rq_ci; /* receives posted / completed */
    uint64_t *rq_wrid;
    struct hc_mlx5_model *model; /* model queues: told of each doorbell (NULL on a device) */
    struct hc_mlx5_cq *cq;       /* where its completions go */
    uint64_t n_db, n_bf, n_wqe;  /* doorbells, BlueFlame copies, WQEs */
} hc_mlx5_qp_t;

typedef struct hc_mlx5_cq {
    uint8_t *buf;
    uint32_t cnt, mask, cqe_size; /* cqe_size 64 or 128 (the 64-byte CQE is its second half) */
    uint32_t ci;                  /* CQEs consumed */
    volatile __be32 *dbrec;       /* [MLX5_CQ_SET_CI] */
    uint32_t cqn;
    hc_mlx5_qp_t **qps; /* the QPs completing here, found by number */
    uint32_t nqps, qps_cap;
    hc_mlx5_qp_t *last; /* the last QP found */
    struct hc_mlx5_model *model;
} hc_mlx5_cq_t;

/* mlx5_dp.c: the queues from rdma-core's descriptions (a device's, through
 * mlx5dv_init_obj, or the model's). A layout the data path does not handle
 * is HCOMM_ERR_UNSUPPORTED with the reason. */
hcomm_status_t hc_mlx5_qp_setup(hc_mlx5_qp_t *q, const struct mlx5dv_qp *dv, uint32_t qpn,
                                uint32_t max_inline, int mmio);
void hc_mlx5_qp_cleanup(hc_mlx5_qp_t *q);
hcomm_status_t hc_mlx5_cq_setup(hc_mlx5_cq_t *cq, const struct mlx5dv_cq *dv);
void hc_mlx5_cq_cleanup(hc_mlx5_cq_t *cq);
hcomm_status_t hc_mlx5_cq_attach(hc_mlx5_cq_t *cq, hc_mlx5_qp_t *q);
void hc_mlx5_cq_detach(hc_mlx5_cq_t *cq, hc_mlx5_qp_t *q);

/* Writes n WQEs and rings the doorbell once: 0, or EAGAIN (no room for
 * wr[*posted]), EINVAL (a request the data path cannot express). */
int hc_mlx5_post(hc_mlx5_qp_t *q, const hc_verbs_wr_t *wr, int n, int *posted);
/* Writes n WQEs without the doorbell / rings it for all written so far. */
int hc_mlx5_write_wqe(hc_mlx5_qp_t *q, const hc_verbs_wr_t *wr);
void hc_mlx5_ring(hc_mlx5_qp_t *q, int nwqe);
int hc_mlx5_post_recv(hc_mlx5_qp_t *q, uint64_t addr, uint32_t len, uint32_t lkey, uint64_t wr_id);
/* Up to n completions into wc: wr_id, status (mapped from the syndrome),
 * vendor_err, qp_num, byte_len, opcode, imm_data, wc_flags. */
int hc_mlx5_poll(hc_mlx5_cq_t *cq, struct ibv_wc *wc, int n);
/* ibverbs' status for an error CQE's syndrome. */
enum ibv_wc_status hc_mlx5_syndrome_status(uint8_t syndrome);

/* ---- mlx5_dev.c, shared with the model's backend (mlx5_model_dp.c) ---- */

typedef struct {
    const char *mmio; /* HCOMM_MLX5_MMIO */
    bool model;       /* HCOMM_MLX5_MODEL */
} hc_mlx5_cfg_t;
extern hc_mlx5_cfg_t hc_mlx5_cfg;

/* A backend's device state (hc_verbs_drv_t.bdev). */
typedef struct {
    int mmio; /* HCOMM_MLX5_MMIO (0: auto) */
    struct hc_mlx5_model *model;
} hc_mlx5_dev_t;

/* HCOMM_MLX5_MMIO (and drv/verbs' knobs) checked: *mmio_p HC_MLX5_MMIO_* or 0 (auto). */
hcomm_status_t hc_mlx5_check_knobs(int *mmio_p);
/* The data path's state for a QP / CQ a backend made (q->bq, cq->bq), and its end. */
hcomm_status_t hc_mlx5_qp_wrap(hc_verbs_drv_t *d, hc_verbs_cq_t *cq, hc_verbs_qp_t *q,
                               const struct mlx5dv_qp *dv, uint32_t max_inline);
void hc_mlx5_qp_unwrap(hc_verbs_qp_t *q);
hcomm_status_t hc_mlx5_cq_wrap(hc_verbs_drv_t *d, hc_verbs_cq_t *cq, const struct mlx5dv_cq *dv);
void hc_mlx5_cq_unwrap(hc_verbs_cq_t *cq);
/* hc_verbs_dp_t's post_send, post_recv and poll_cq over the data path. */
int hc_mlx5_post_send(hc_verbs_qp_t *q, const hc_verbs_wr_t *wr, int n, int *posted);
int hc_mlx5_recv(hc_verbs_qp_t *q, uint64_t addr, uint32_t len, uint32_t lkey, uint64_t wr_id);
int hc_mlx5_poll_cq(hc_verbs_cq_t *cq, struct ibv_wc *wc, int n);

/* The model of the queues, where it is linked in (the test library): its
 * queue backend for HCOMM_MLX5_MODEL=1, and what the data path tells it
 * (a QP's doorbell rung, a CQ about to be polled) for queues it made
 * (q->model, cq->model set). Set by the model's constructor; NULL in
 * libhcomm.so and libhcomm.a, where HCOMM_MLX5_MODEL=1 is refused. */
typedef struct {
    const hc_verbs_dp_t *dp;
    void (*kick)(struct hc_mlx5_model *m, uint32_t qpn);
    int (*progress)(struct hc_mlx5_model *m);
} hc_mlx5_model_glue_t;
extern const hc_mlx5_model_glue_t *hc_mlx5_model_glue;

#endif /* HC_DRV_MLX5_H */
