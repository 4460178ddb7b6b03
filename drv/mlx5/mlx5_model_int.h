/*
 * mlx5 model: what its files share (mlx5_model.c has the design). Test
 * machinery: in the test objects only, never in libhcomm.so or .a.
 */
#ifndef HC_DRV_MLX5_MODEL_INT_H
#define HC_DRV_MLX5_MODEL_INT_H

#include "drv/mlx5/mlx5_model.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#define HC_M5_MAGIC 0x6c65646f6d35786dull /* "mx5model" */
#define HC_M5_VERSION 1u
#define HC_M5_SEG_BYTES (256ull << 20) /* virtual; pages are touched as queues use them */
#define HC_M5_MAX_QP 512u
#define HC_M5_MAX_CQ 128u
#define HC_M5_MAX_KEY 8192u
#define HC_M5_MAX_PEERS 256
#define HC_M5_MAX_FAULTS 32
#define HC_M5_MAX_FREE 256
#define HC_M5_MAX_WQ 32768u      /* SQ WQEBBs / RQ receives at most (16-bit indexes) */
#define HC_M5_MAX_CQE (1u << 22) /* CQ entries at most */
#define HC_M5_BF_SIZE 256u       /* bytes per half of the BlueFlame register */
#define HC_M5_MAX_DS 63u         /* ds is 6 bits */
#define HC_M5_MAX_IOV 80         /* gather entries of one WQE (segments, wrapped inline) */
#define HC_M5_CQ_SET_CI 0        /* MLX5_CQ_SET_CI: the CQ dbrec word the consumer writes */
#define HC_M5_RETRY_NS (8ull * 1000000000ull)
#define HC_M5_POISON 0xff        /* BlueFlame register bytes not written since the last check */
#define HC_M5_VENDOR_MODEL 0x80u /* | syndrome: vendor_err_synd of an error the model found */
#define HC_M5_VENDOR_FAULT 0xc0u /* | syndrome: ... of an injected one */
#define HC_M5_LOG_DOORBELLS 16   /* bad doorbells logged as warnings (then at debug level) */

#define HC_M5_SYN(x) MLX5_CQE_SYNDROME_##x

enum { HC_M5_QP_FREE, HC_M5_QP_INIT, HC_M5_QP_RTS, HC_M5_QP_ERR, HC_M5_QP_DESTROYED };
enum { HC_M5_CQ_FREE, HC_M5_CQ_LIVE };
enum { HC_M5_DONE, HC_M5_WAIT };
enum { HC_M5_F_REMOTE_ACCESS, HC_M5_F_LOCAL_PROT, HC_M5_F_LENGTH, HC_M5_F_RETRY, HC_M5_F_FLUSH };
extern const char *const hc_m5_fault_names[5]; /* by HC_M5_F_* */

/* ---- the segment (shared with peers) --------------------------------------------------------- */

typedef struct {
    uint64_t magic;
    uint32_t version, layout; /* layout: sizeof(hc_m5_seg_t) */
    int32_t pid, fd;
    uint64_t nonce;
    uint64_t self_addr; /* where the owner maps the segment */
    uint64_t size;
} hc_m5_hdr_t;

typedef struct {
    uint32_t state; /* HC_M5_QP_*; peers set ERR (under the CQ's lock) */
    uint32_t gen;   /* bumped at every create of this entry */
    uint32_t cq;    /* CQ index (sends and receives) */
    uint32_t sq_cnt, rq_cnt;
    uint32_t rq_ci; /* receives consumed (compared in 16 bits); under the CQ's lock */
    uint64_t sq_off, rq_off, dbrec_off;
} hc_m5_sqp_t;

typedef struct {
    pthread_mutex_t lock; /* process-shared, robust: the producer index and the ring */
    uint32_t state, gen, cnt, log_cnt;
    uint32_t pi;      /* CQEs written */
    uint32_t overrun; /* an overrun was logged (cleared when a CQE fits again) */
    uint64_t buf_off, dbrec_off;
} hc_m5_scq_t;

/* dma: where the owner's process reaches addr's bytes (0: at addr): the
 * model's own mapping of a dmabuf for device memory, as a NIC DMAs. */
typedef struct {
    uint64_t addr, len;
    uint32_t access;
    uint8_t variant, valid, pad[2];
    uint64_t dma;
} hc_m5_key_t;

typedef struct {
    union {
        hc_m5_hdr_t hdr;
        uint8_t hdr_pad[256];
    };
    hc_m5_sqp_t qp[HC_M5_MAX_QP];
    hc_m5_scq_t cq[HC_M5_MAX_CQ];
    hc_m5_key_t key[HC_M5_MAX_KEY];
} hc_m5_seg_t;

/* ---- this process's side --------------------------------------------------------------------- */

typedef struct {
    uint8_t id[HC_MLX5_MODEL_ID_LEN];
    hc_m5_seg_t *seg;
    size_t len;
    pid_t pid;
    bool self;
} hc_m5_peer_t;

typedef struct {
    hc_m5_sqp_t *s; /* NULL: unused */
    uint8_t *sq, *bf;
    __be32 *dbrec;
    uint32_t qpn, sq_cnt, sq_bytes;
    uint16_t sq_ci; /* WQEBBs run (or flushed) */
    uint16_t db_ci; /* WQEBBs whose doorbell was checked */
    uint8_t bf_half;
    bool marked;  /* kicked while deferred */
    bool waiting; /* the WQE at sq_ci waits (RNR, target not connected); already counted */
    uint64_t wait_ns;
    hc_m5_peer_t *peer;
    uint32_t peer_idx, peer_gen;
    uint64_t off_sq, off_rq, off_db, off_bf;
    uint32_t len_sq, len_rq;
} hc_m5_qp_t;

typedef struct {
    uint64_t off, len;
} hc_m5_blk_t;

typedef struct {
    uint64_t n;
    int kind;
} hc_m5_fault_t;

/* One WQE as parsed. */
typedef struct {
    uint16_t idx;
    uint8_t opcode, ds;
    uint32_t nbb;
    bool signaled;
    __be32 imm;
    uint64_t raddr;
    uint32_t rkey;
    uint64_t len;
    int niov;
    struct iovec iov[HC_M5_MAX_IOV];
} hc_m5_wqe_t;

struct hc_mlx5_model {
    hc_m5_seg_t *seg;
    int fd;
    pid_t pid;
    uint64_t heap_next, heap_end;
    hc_m5_blk_t free[HC_M5_MAX_FREE];
    int nfree;
    hc_m5_qp_t qp[HC_M5_MAX_QP];
    uint16_t live[HC_M5_MAX_QP];
    int nlive;
    uint32_t qp_hint, key_hint;
    hc_m5_peer_t peers[HC_M5_MAX_PEERS]; /* [0]: this model */
    int npeers;
    hc_m5_fault_t faults[HC_M5_MAX_FAULTS];
    int nfaults, fault_next;
    uint64_t nrun; /* WQEs run (the N of KIND@N) */
    bool defer;
    hc_mlx5_model_stats_t stats;
    char why[256]; /* the reason of the error being reported */
};

_Static_assert(sizeof(struct mlx5_cqe64) == 64, "mlx5_cqe64 is 64 bytes");
_Static_assert(sizeof(struct mlx5_err_cqe) == 64, "mlx5_err_cqe is 64 bytes");
_Static_assert(sizeof(struct mlx5_wqe_ctrl_seg) == 16, "mlx5_wqe_ctrl_seg is 16 bytes");
_Static_assert(sizeof(hc_m5_seg_t) < HC_M5_SEG_BYTES / 2, "tables leave room for the heap");

static inline uint8_t *hc_m5_at(const hc_m5_seg_t *s, uint64_t off)
{
    return (uint8_t *)s + off;
}

static inline uint8_t *hc_m5_wqe_at(const hc_m5_qp_t *q, uint16_t idx, uint32_t off)
{
    return q->sq +
           ((((uint32_t)idx & (q->sq_cnt - 1)) * MLX5_SEND_WQE_BB + off) & (q->sq_bytes - 1));
}

static inline uint16_t hc_m5_sq_pi(const hc_m5_qp_t *q)
{
    return (uint16_t)be32toh(__atomic_load_n(&q->dbrec[MLX5_SND_DBR], __ATOMIC_ACQUIRE));
}

/* ---- mlx5_model.c: names, the heap, keys, faults, open / close, peers, execution ---- */

const char *hc_m5_op_name(uint8_t op);
const char *hc_m5_state_name(uint32_t st);
void hc_m5_set_why(hc_mlx5_model_t *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
uint64_t hc_m5_alloc(hc_mlx5_model_t *m, uint64_t len);
void hc_m5_free(hc_mlx5_model_t *m, uint64_t off, uint64_t len);
/* NULL when key covers [addr, addr + len) with the access need in table s,
 * else what is wrong. */
const char *hc_m5_key_check(const hc_m5_seg_t *s, uint32_t key, uint64_t addr, uint64_t len,
                            uint32_t need);
/* Where the owner of segment s reaches addr of (checked) key: its dmabuf
 * mapping for device memory, addr itself otherwise. */
uint64_t hc_m5_key_dma(const hc_m5_seg_t *s, uint32_t key, uint64_t addr);
/* The peer whose model id is id: this model, a mapped one, or mapped now. */
hcomm_status_t hc_m5_peer_get(hc_mlx5_model_t *m, const uint8_t *id, hc_m5_peer_t **p_p);

/* ---- mlx5_model_cq.c: CQEs, requester completions, data movement ---- */

bool hc_m5_cq_lock(hc_m5_scq_t *c, uint32_t cqn);
void hc_m5_cq_unlock(hc_m5_scq_t *c);
/* Writes one CQE into CQ cq of segment s, lock held: the body, a release
 * fence, then op_own (cqe[63]: the opcode nibble) with the owner bit.
 * false: the CQ overran (logged, nothing written). */
bool hc_m5_cqe_put(hc_mlx5_model_t *m, hc_m5_seg_t *s, uint32_t cq, const uint8_t *cqe);
void hc_m5_cqe_err(uint8_t *buf, uint8_t op, uint8_t synd, uint8_t vendor, uint8_t wqe_op,
                   uint32_t qpn, uint16_t counter);
/* Flushes the receives posted on QP sq of segment s (in ERROR), its CQ's lock
 * held; stops at a CQ overrun (a later call goes on). */
void hc_m5_rq_flush(hc_mlx5_model_t *m, hc_m5_seg_t *s, hc_m5_sqp_t *sq);
/* QP sq of segment s to ERROR (its CQ's lock held): a RESP_ERR CQE with synd
 * for the receive being consumed (consume), then flushes of the others. */
void hc_m5_resp_fail_locked(hc_mlx5_model_t *m, hc_m5_seg_t *s, hc_m5_sqp_t *sq, bool consume,
                            uint8_t synd, uint8_t vendor);
/* The WQE w of q failed with synd: an error CQE (signaled or not), q to
 * ERROR, its receives flushed. fmt says why (logged at info level). */
void hc_m5_req_fail(hc_mlx5_model_t *m, hc_m5_qp_t *q, const hc_m5_wqe_t *w, uint8_t synd,
                    uint8_t vendor, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* A successful requester CQE (w asked for one); a CQ overrun moves q to
 * ERROR. */
void hc_m5_req_done(hc_mlx5_model_t *m, hc_m5_qp_t *q, const hc_m5_wqe_t *w, uint32_t byte_cnt);
/* Moves len bytes between w's list and the peer's raddr; tail_last (WRITE):
 * the last 8 bytes after the rest. */
int hc_m5_move(const hc_m5_peer_t *p, bool write, const hc_m5_wqe_t *w, uint64_t raddr,
               bool tail_last);
/* Whether the peer process still maps its segment where its header says
 * (catches a dead process, a zombie and a reused pid). */
bool hc_m5_peer_alive(const hc_m5_peer_t *p);

/* ---- mlx5_model_wqe.c: WQEs parsed, the doorbell check ---- */

/* The control segment of the WQE at idx: opcode, ds, size (at most left
 * WQEBBs). */
void hc_m5_wqe_head(const hc_m5_qp_t *q, uint16_t idx, uint16_t left, hc_m5_wqe_t *w);
/* Parses the WQE at q->sq_ci (left WQEBBs posted) into w: 0, or a syndrome
 * with m->why. */
uint8_t hc_m5_parse(hc_mlx5_model_t *m, const hc_m5_qp_t *q, uint16_t left, hc_m5_wqe_t *w);
/* Checks the doorbell write behind the WQEs from db_ci to the doorbell
 * record: the first 8 bytes of the last one's control segment (8-byte
 * doorbell) or the whole of it (BlueFlame, a lone WQE), in the expected half
 * of the BlueFlame register. Counts and logs a bad one; the WQEs run anyway. */
void hc_m5_doorbell(hc_mlx5_model_t *m, hc_m5_qp_t *q);

/* ---- mlx5_model_exec.c: WQEs run ---- */

/* Runs q's WQEs from sq_ci to the send doorbell record: the number run or
 * flushed. */
int hc_m5_qp_run(hc_mlx5_model_t *m, hc_m5_qp_t *q);

/* ---- mlx5_model_res.c: CQs, QPs, keys ---- */

hc_m5_qp_t *hc_m5_qp_get(hc_mlx5_model_t *m, uint32_t qpn);

#endif /* HC_DRV_MLX5_MODEL_INT_H */
