/*
 * mlx5: what rdma-core's mlx5dv.h does not give the data path, in one place:
 * the doorbell-record indexes of a CQ, a few field accessors, and the memory
 * barriers, each named for what it orders (rdma-core keeps its udma and mmio
 * barriers in a header it does not install; these are ours, written from
 * the same ordering rules). Everything else (WQE segments, CQE layouts,
 * opcodes, syndromes, owner bit) is mlx5dv.h's.
 */
#ifndef HC_DRV_MLX5_LAYOUT_H
#define HC_DRV_MLX5_LAYOUT_H

#include <endian.h>
#include <infiniband/mlx5dv.h>
#include <stdint.h>

/* A CQ's doorbell record: the consumer index (24 bits), then the arm word
 * (this driver never arms: it polls). */
enum { HC_MLX5_CQ_SET_CI = 0, HC_MLX5_CQ_ARM_DB = 1 };

/* Bytes of a send WQE's segments. */
enum {
    HC_MLX5_CTRL_BYTES = sizeof(struct mlx5_wqe_ctrl_seg),   /* 16 */
    HC_MLX5_RADDR_BYTES = sizeof(struct mlx5_wqe_raddr_seg), /* 16 */
    HC_MLX5_DATA_BYTES = sizeof(struct mlx5_wqe_data_seg),   /* 16 */
    HC_MLX5_INL_BYTES = sizeof(struct mlx5_wqe_inl_data_seg) /* 4 */
};
_Static_assert(sizeof(struct mlx5_wqe_ctrl_seg) == 16, "mlx5 ctrl segment is 16 bytes");
_Static_assert(sizeof(struct mlx5_wqe_raddr_seg) == 16, "mlx5 raddr segment is 16 bytes");
_Static_assert(sizeof(struct mlx5_wqe_data_seg) == 16, "mlx5 data segment is 16 bytes");
_Static_assert(sizeof(struct mlx5_cqe64) == 64, "mlx5 CQE is 64 bytes");
_Static_assert(sizeof(struct mlx5_err_cqe) == 64, "mlx5 error CQE is 64 bytes");

/* The WQE index a ctrl segment carries (bits 8..23 of opmod_idx_opcode). */
static inline uint16_t hc_mlx5_ctrl_index(const struct mlx5_wqe_ctrl_seg *c)
{
    return (uint16_t)(be32toh(c->opmod_idx_opcode) >> 8);
}

static inline uint8_t hc_mlx5_ctrl_opcode(const struct mlx5_wqe_ctrl_seg *c)
{
    return (uint8_t)be32toh(c->opmod_idx_opcode);
}

/* Size in 16-byte units (low 6 bits of qpn_ds). */
static inline uint8_t hc_mlx5_ctrl_ds(const struct mlx5_wqe_ctrl_seg *c)
{
    return (uint8_t)(be32toh(c->qpn_ds) & 0x3f);
}

static inline uint32_t hc_mlx5_ctrl_qpn(const struct mlx5_wqe_ctrl_seg *c)
{
    return be32toh(c->qpn_ds) >> 8;
}

/* ---- barriers -------------------------------------------------------------------------------- */
/* x86 keeps stores in order with stores and loads with loads, and DMA to
 * write-back memory is coherent: most orderings need only the compiler's.
 * Write-combining stores (the BlueFlame register) are the exception: they
 * may pass earlier stores and sit in a buffer until flushed, hence sfence.
 * Elsewhere the architecture's barriers for outer-shareable (device) order. */
#if defined(__x86_64__) || defined(__i386__)
#define HC_MLX5_CC() __asm__ __volatile__("" ::: "memory")
/* WQE stores before the doorbell record store that publishes them. */
#define hc_mlx5_wqe_before_dbrec() HC_MLX5_CC()
/* The doorbell record store before the MMIO doorbell (write-combining). */
#define hc_mlx5_dbrec_before_mmio() __asm__ __volatile__("sfence" ::: "memory")
/* The MMIO doorbell (or BlueFlame copy) out of the write-combining buffer. */
#define hc_mlx5_mmio_flush() __asm__ __volatile__("sfence" ::: "memory")
/* The CQE's owner byte read before the rest of the CQE. */
#define hc_mlx5_owner_before_cqe() HC_MLX5_CC()
/* The CQE's reads done before the consumer index gives its slot back. */
#define hc_mlx5_cqe_before_ci() HC_MLX5_CC()
/* Receive WQE stores before the receive doorbell record. */
#define hc_mlx5_rwqe_before_dbrec() HC_MLX5_CC()
#elif defined(__aarch64__)
#define hc_mlx5_wqe_before_dbrec() __asm__ __volatile__("dmb oshst" ::: "memory")
#define hc_mlx5_dbrec_before_mmio() __asm__ __volatile__("dmb oshst" ::: "memory")
#define hc_mlx5_mmio_flush() __asm__ __volatile__("dsb st" ::: "memory")
#define hc_mlx5_owner_before_cqe() __asm__ __volatile__("dmb oshld" ::: "memory")
#define hc_mlx5_cqe_before_ci() __asm__ __volatile__("dmb osh" ::: "memory")
#define hc_mlx5_rwqe_before_dbrec() __asm__ __volatile__("dmb oshst" ::: "memory")
#else
#define hc_mlx5_wqe_before_dbrec() __atomic_thread_fence(__ATOMIC_SEQ_CST)
#define hc_mlx5_dbrec_before_mmio() __atomic_thread_fence(__ATOMIC_SEQ_CST)
#define hc_mlx5_mmio_flush() __atomic_thread_fence(__ATOMIC_SEQ_CST)
#define hc_mlx5_owner_before_cqe() __atomic_thread_fence(__ATOMIC_SEQ_CST)
#define hc_mlx5_cqe_before_ci() __atomic_thread_fence(__ATOMIC_SEQ_CST)
#define hc_mlx5_rwqe_before_dbrec() __atomic_thread_fence(__ATOMIC_SEQ_CST)
#endif

#endif /* HC_DRV_MLX5_LAYOUT_H */
