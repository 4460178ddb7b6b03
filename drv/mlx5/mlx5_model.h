/*
 * mlx5 model: what a ConnectX NIC does with the queues drv/mlx5 writes,
 * modelled in software so the mlx5 data path runs (and is tested) on
 * machines without one. Test machinery: built with -DHCOMM_MLX5_MODEL=ON
 * into the test objects only (the test library, lib/test/libhcomm.so, and
 * the tests), never into libhcomm.so or libhcomm.a; the files:
 * mlx5_model.c (this design, open/close, peers, execution), _res.c (CQs,
 * QPs, keys), _wqe.c (parsing, the doorbell check), _exec.c (running
 * WQEs), _cq.c (CQEs, data movement), _dp.c (drv/mlx5's queue backend on
 * it), mlx5_model_int.h (what they share).
 *
 * Each process that opens the model gets a "NIC": one memfd segment holding
 * its QPs (send and receive rings, doorbell records, a fake UAR page for the
 * BlueFlame/doorbell writes), CQs and memory keys. A peer maps that segment
 * (/proc/PID/fd/N) when one of its QPs is connected to a QP of it.
 *
 * Buffers are handed to the data path as rdma-core's own descriptions
 * (struct mlx5dv_qp, struct mlx5dv_cq), so drv/mlx5's data path cannot tell
 * model queues from a device's: same WQE/CQE layouts (mlx5dv.h), same
 * doorbell records, the same owner-bit protocol.
 *
 * Execution: hc_mlx5_model_kick (called by the data path right after it rang
 * a model QP's doorbell) consumes the WQEs between the model's consumed index
 * and the send doorbell record, in order, checking that the doorbell write
 * matches the last of them (8-byte doorbell: the first 8 bytes of its control
 * segment; BlueFlame: the whole WQE, in the half of the BlueFlame register
 * the alternation says). A WQE the model cannot run yet (a SEND or WRITE
 * WITH IMMEDIATE whose target has no posted receive: RNR) stays, and later
 * kicks or hc_mlx5_model_progress run it.
 *
 * Semantics modelled (RC only):
 *   RDMA WRITE, RDMA WRITE WITH IMMEDIATE, RDMA READ, SEND, SEND WITH
 *   IMMEDIATE; data by pointer segments (lkey checked against this
 *   process's keys) or inline; the target's memory reached by
 *   process_vm_writev/readv after its key (rkey: index, variant, access,
 *   range) is checked in the target's key table. WRITE places bytes in
 *   increasing address order, the last 8 bytes after the rest.
 *   Requester CQEs (MLX5_CQE_REQ) for WQEs with MLX5_WQE_CTRL_CQ_UPDATE;
 *   responder CQEs (MLX5_CQE_RESP_SEND, _RESP_SEND_IMM, _RESP_WR_IMM) on the
 *   target's receive CQ, consuming one receive WQE of its RQ (RQ doorbell
 *   record = receives posted).
 *   Errors: an error CQE (MLX5_CQE_REQ_ERR, struct mlx5_err_cqe, syndrome
 *   and vendor syndrome) for the failing WQE whether signaled or not, the QP
 *   to the error state, and flush CQEs (MLX5_CQE_SYNDROME_WR_FLUSH_ERR) for
 *   every WQE posted after it and every receive still posted. Causes: bad
 *   lkey (LOCAL_PROT_ERR), bad rkey / access / range (REMOTE_ACCESS_ERR, and
 *   the responder QP goes to error too), a SEND larger than the receive
 *   (the responder's LOCAL_LENGTH_ERR and the requester's REMOTE_OP_ERR),
 *   target process gone or its QP destroyed (TRANSPORT_RETRY_EXC_ERR), a QP
 *   not in RTS, and injected faults (HCOMM_MLX5_MODEL_FAULT).
 *   CQ overrun (the consumer index doorbell record not kept up): the model
 *   logs it and moves the QP to the error state without writing the CQE.
 * Not modelled: UD/DC, atomics, memory windows, CQE compression (the driver
 * never asks for it), timing (the model completes at once), PCIe ordering.
 */
#ifndef HC_DRV_MLX5_MODEL_H
#define HC_DRV_MLX5_MODEL_H

#include "base/hc_base.h"

#include <infiniband/mlx5dv.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct hc_mlx5_model hc_mlx5_model_t;

/* The identity a peer needs to reach this model NIC (carried in the verbs
 * address blob's GID field): 16 bytes. */
#define HC_MLX5_MODEL_ID_LEN 16

/* Opens this process's model NIC. fault: HCOMM_MLX5_MODEL_FAULT, "" for
 * none, else KIND@N[,KIND@N...]: the N-th WQE this NIC runs (1-based,
 * counted over all its QPs) fails with KIND: remote_access, local_prot,
 * length, retry (the peer "gone"), flush. A malformed spec is ERR_INVALID
 * with a message naming HCOMM_MLX5_MODEL_FAULT. */
hcomm_status_t hc_mlx5_model_open(hc_mlx5_model_t **m_p, const char *fault);
void hc_mlx5_model_close(hc_mlx5_model_t *m);
void hc_mlx5_model_id(const hc_mlx5_model_t *m, uint8_t id[HC_MLX5_MODEL_ID_LEN]);

/* A CQ of cqe entries (rounded up to a power of two; 64-byte CQEs, all
 * initialised invalid and owned by the NIC). */
hcomm_status_t hc_mlx5_model_cq_create(hc_mlx5_model_t *m, uint32_t cqe, struct mlx5dv_cq *out);
void hc_mlx5_model_cq_destroy(hc_mlx5_model_t *m, uint32_t cqn);

/* An RC QP on CQ cqn (send and receive completions), in INIT: sq_wqe send
 * WQEBBs and rq_wqe receive WQEs (powers of two), room for max_inline inline
 * bytes. out->bf.reg/size describe the model's BlueFlame register (two
 * halves of out->bf.size bytes); out->dbrec[MLX5_RCV_DBR] and
 * [MLX5_SND_DBR] are the doorbell records. Returns the QP number. */
hcomm_status_t hc_mlx5_model_qp_create(hc_mlx5_model_t *m, uint32_t cqn, uint32_t sq_wqe,
                                       uint32_t rq_wqe, uint32_t max_inline,
                                       struct mlx5dv_qp *out, uint32_t *qpn_p);
/* RTR + RTS towards the peer's QP (its model id and QP number). */
hcomm_status_t hc_mlx5_model_qp_connect(hc_mlx5_model_t *m, uint32_t qpn,
                                        const uint8_t peer_id[HC_MLX5_MODEL_ID_LEN],
                                        uint32_t peer_qpn);
void hc_mlx5_model_qp_destroy(hc_mlx5_model_t *m, uint32_t qpn);

/* A memory key over [addr, addr + len) with IBV_ACCESS_* flags; lkey and
 * rkey are the same 32-bit mkey (index << 8 | variant). */
hcomm_status_t hc_mlx5_model_reg(hc_mlx5_model_t *m, void *addr, size_t len, int access,
                                 uint32_t *key_p);
void hc_mlx5_model_dereg(hc_mlx5_model_t *m, uint32_t key);
/* The same for memory the CPU must not touch at addr (device memory): the
 * model moves its bytes at dma instead (the caller's mapping of its
 * dmabuf, as a NIC's DMA), in this process and for peers. */
hcomm_status_t hc_mlx5_model_reg_dma(hc_mlx5_model_t *m, void *addr, size_t len, int access,
                                     void *dma, uint32_t *key_p);

/* The data path rang qpn's doorbell: run what its send doorbell record
 * posted. */
void hc_mlx5_model_kick(hc_mlx5_model_t *m, uint32_t qpn);
/* Runs what waits (RNR): called by the data path before it polls a CQ.
 * Returns the number of WQEs run. */
int hc_mlx5_model_progress(hc_mlx5_model_t *m);

/* Defers execution: kicks only note the QP, hc_mlx5_model_progress runs
 * it (the benchmark times the driver's own work without the model's). */
void hc_mlx5_model_defer(hc_mlx5_model_t *m, bool defer);

/* Counters: WQEs run, CQEs written, error CQEs, doorbell checks failed. */
typedef struct {
    uint64_t wqes, cqes, err_cqes, bad_doorbells, rnr_waits, bytes;
} hc_mlx5_model_stats_t;
void hc_mlx5_model_stats(const hc_mlx5_model_t *m, hc_mlx5_model_stats_t *s);

#endif /* HC_DRV_MLX5_MODEL_H */
