/*
 * mlx5 model (mlx5_model.h): a ConnectX NIC's queues in software.
 *
 * The segment: one memfd per process (kept open until close, so that a peer
 * opens /proc/PID/fd/N and maps it MAP_SHARED), HC_M5_SEG_BYTES of virtual
 * space touched lazily:
 *   header      magic, version, layout size, pid, memfd number, nonce, the
 *               address the owner maps it at (the liveness probe reads the
 *               header there through process_vm_readv)
 *   QP table    HC_M5_MAX_QP entries (qpn = index + 1): state, generation,
 *               CQ, ring offsets, the RQ's consumed index (peers consume
 *               receives, under the lock of the QP's CQ)
 *   CQ table    HC_M5_MAX_CQ entries (cqn = index + 1): a process-shared
 *               robust mutex over the producer index, ring offsets
 *   key table   HC_M5_MAX_KEY entries (mkey = index << 8 | variant; index 0
 *               unused; dereg bumps the variant)
 *   heap        rings and doorbell records (SQ, RQ, CQ, dbrecs, the fake
 *               BlueFlame register): a bump allocator; freed blocks are only
 *               reused once the bump space is exhausted (a peer that still
 *               looks at a destroyed queue sees stale, not reused, memory)
 * The model id (16 bytes): pid (4, little endian), memfd number (4), nonce
 * (8), checked against the header when a peer maps the segment.
 *
 * Choices the header leaves open (drv/mlx5's data path agrees with them):
 *   - SQ: the producer index is the low 16 bits of be32 dbrec[MLX5_SND_DBR]
 *     in WQEBBs; the WQE index in a control segment (bits 8..23 of
 *     opmod_idx_opcode) must equal the 16-bit WQEBB index the WQE starts at,
 *     its qpn (upper 24 bits of qpn_ds) the QP's; ds 0, an unknown opcode, a
 *     segment past ds, a WQE running past the doorbell record: a bad WQE
 *     (LOCAL_QP_OP_ERR). Several data segments (a gather list) and inline
 *     segments may follow; a data segment with byte_count 0 carries nothing
 *     (its lkey is not checked) and a zero-length transfer checks no key.
 *   - RQ: one struct mlx5_wqe_data_seg per receive (stride 16); receives
 *     posted = the low 16 bits of be32 dbrec[MLX5_RCV_DBR].
 *   - CQ: dbrec[0] (set_ci) is read as a 24-bit consumer index; overrun when
 *     producer - consumer >= entries. cq_uar is NULL (no arming).
 *   - Requester CQEs (MLX5_CQE_REQ): sop_drop_qpn = be32(opcode << 24 | qpn)
 *     as the hardware writes it (the WQE's opcode in the top byte: mask the
 *     qpn with 0xffffff), wqe_counter = be16(WQE index), byte_cnt =
 *     be32(length) for READ, 0 otherwise.
 *   - Responder CQEs: sop_drop_qpn = be32(responder qpn), flags_rqpn =
 *     be32(requester qpn), wqe_counter = be16(RQ index, 16-bit counter),
 *     byte_cnt = be32(length), imm_inval_pkey = the WQE's imm as is (0 for
 *     SEND).
 *   - Error CQEs: vendor_err_synd = 0x80 | syndrome when the model found the
 *     error, 0xc0 | syndrome when it was injected (HCOMM_MLX5_MODEL_FAULT);
 *     s_wqe_opcode_qpn = be32(WQE opcode << 24 | qpn) (opcode 0 for RQ
 *     flushes).
 *   - Target QP in INIT (not connected yet): the WQE waits, as RC retries,
 *     for HC_M5_RETRY_NS, then TRANSPORT_RETRY_EXC_ERR. Target QP in ERROR or
 *     destroyed: TRANSPORT_RETRY_EXC_ERR at once. No receive posted (RNR):
 *     waits for ever (rnr_retry 7), unless the target process is gone.
 *   - A CQ overrun at the target (a responder CQE that does not fit) moves the
 *     target QP to error; the requester's WQE still completes.
 *   - rnr_waits counts WQEs that had to wait (no receive, or the target QP
 *     not connected yet), once per WQE.
 *
 * Threads: the driver calls a model from one thread; the only lock is each
 * CQ's robust mutex (peers write responder CQEs into it).
 * Permissions: peers open /proc/PID/fd/N and use process_vm_writev/readv,
 * which need ptrace access (same user; under Yama ptrace_scope 1 the model
 * names any process its tracer, prctl PR_SET_PTRACER_ANY).
 */
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
static const char *const hc_m5_fault_names[] = {"remote_access", "local_prot", "length", "retry",
                                                "flush"};

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

typedef struct {
    uint64_t addr, len;
    uint32_t access;
    uint8_t variant, valid, pad[2];
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

static const char *hc_m5_op_name(uint8_t op)
{
    switch (op) {
    case MLX5_OPCODE_RDMA_WRITE:
        return "RDMA WRITE";
    case MLX5_OPCODE_RDMA_WRITE_IMM:
        return "RDMA WRITE WITH IMMEDIATE";
    case MLX5_OPCODE_SEND:
        return "SEND";
    case MLX5_OPCODE_SEND_IMM:
        return "SEND WITH IMMEDIATE";
    case MLX5_OPCODE_RDMA_READ:
        return "RDMA READ";
    }
    return "unknown opcode";
}

static const char *hc_m5_state_name(uint32_t st)
{
    static const char *const names[] = {"free", "INIT", "RTS", "ERROR", "destroyed"};
    return st < HC_ARRAY_SIZE(names) ? names[st] : "corrupt";
}

static void hc_m5_set_why(hc_mlx5_model_t *m, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void hc_m5_set_why(hc_mlx5_model_t *m, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->why, sizeof(m->why), fmt, ap);
    va_end(ap);
}

/* ---- heap ------------------------------------------------------------------------------------ */

static uint64_t hc_m5_alloc(hc_mlx5_model_t *m, uint64_t len)
{
    len = HC_ALIGN_UP(len, (uint64_t)HC_CACHE_LINE);
    uint64_t off = 0;
    if (m->heap_end - m->heap_next >= len) {
        off = m->heap_next;
        m->heap_next += len;
    } else {
        for (int i = 0; i < m->nfree; i++) {
            if (m->free[i].len < len) continue;
            off = m->free[i].off;
            m->free[i].off += len;
            m->free[i].len -= len;
            if (m->free[i].len == 0) m->free[i] = m->free[--m->nfree];
            break;
        }
        if (!off) return 0;
    }
    memset(hc_m5_at(m->seg, off), 0, len);
    return off;
}

static void hc_m5_free(hc_mlx5_model_t *m, uint64_t off, uint64_t len)
{
    if (!off) return;
    len = HC_ALIGN_UP(len, (uint64_t)HC_CACHE_LINE);
    if (m->nfree == HC_M5_MAX_FREE) {
        hc_log_debug("mlx5 model: free list full: %llu bytes at %llu not reused",
                     (unsigned long long)len, (unsigned long long)off);
        return;
    }
    m->free[m->nfree++] = (hc_m5_blk_t){.off = off, .len = len};
}

/* ---- keys ------------------------------------------------------------------------------------ */

/* NULL when key covers [addr, addr + len) with the access need in table s,
 * else what is wrong. */
static const char *hc_m5_key_check(const hc_m5_seg_t *s, uint32_t key, uint64_t addr, uint64_t len,
                                   uint32_t need)
{
    uint32_t i = key >> 8;
    if (i == 0 || i >= HC_M5_MAX_KEY) return "is not a key of this model";
    const hc_m5_key_t *k = &s->key[i];
    if (!__atomic_load_n(&k->valid, __ATOMIC_ACQUIRE)) return "is not registered";
    if (k->variant != (key & 0xff)) return "is stale (deregistered; its entry was reused)";
    if ((k->access & need) != need) return "lacks the access";
    if (addr < k->addr || addr - k->addr > k->len || len > k->len - (addr - k->addr))
        return "does not cover the range";
    return NULL;
}

/* ---- CQs ------------------------------------------------------------------------------------- */

static bool hc_m5_cq_lock(hc_m5_scq_t *c, uint32_t cqn)
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

static void hc_m5_cq_unlock(hc_m5_scq_t *c)
{
    pthread_mutex_unlock(&c->lock);
}

/* Writes one CQE into CQ cq of segment s, lock held: the body, a release
 * fence, then op_own (cqe[63]: the opcode nibble) with the owner bit.
 * false: the CQ overran (logged, nothing written). */
static bool hc_m5_cqe_put(hc_mlx5_model_t *m, hc_m5_seg_t *s, uint32_t cq, const uint8_t *cqe)
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

static void hc_m5_cqe_err(uint8_t *buf, uint8_t op, uint8_t synd, uint8_t vendor, uint8_t wqe_op,
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
static void hc_m5_rq_flush(hc_mlx5_model_t *m, hc_m5_seg_t *s, hc_m5_sqp_t *sq)
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
static void hc_m5_resp_fail_locked(hc_mlx5_model_t *m, hc_m5_seg_t *s, hc_m5_sqp_t *sq,
                                   bool consume, uint8_t synd, uint8_t vendor)
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
static void hc_m5_req_fail(hc_mlx5_model_t *m, hc_m5_qp_t *q, const hc_m5_wqe_t *w, uint8_t synd,
                           uint8_t vendor, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static void hc_m5_req_fail(hc_mlx5_model_t *m, hc_m5_qp_t *q, const hc_m5_wqe_t *w, uint8_t synd,
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
static void hc_m5_req_done(hc_mlx5_model_t *m, hc_m5_qp_t *q, const hc_m5_wqe_t *w,
                           uint32_t byte_cnt)
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
static int hc_m5_move(const hc_m5_peer_t *p, bool write, const hc_m5_wqe_t *w, uint64_t raddr,
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
static bool hc_m5_peer_alive(const hc_m5_peer_t *p)
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

/* ---- WQEs ------------------------------------------------------------------------------------ */

static inline uint8_t *hc_m5_wqe_at(const hc_m5_qp_t *q, uint16_t idx, uint32_t off)
{
    return q->sq +
           ((((uint32_t)idx & (q->sq_cnt - 1)) * MLX5_SEND_WQE_BB + off) & (q->sq_bytes - 1));
}

static inline uint16_t hc_m5_sq_pi(const hc_m5_qp_t *q)
{
    return (uint16_t)be32toh(__atomic_load_n(&q->dbrec[MLX5_SND_DBR], __ATOMIC_ACQUIRE));
}

/* The control segment of the WQE at idx: opcode, ds, size (at most left
 * WQEBBs). */
static void hc_m5_wqe_head(const hc_m5_qp_t *q, uint16_t idx, uint16_t left, hc_m5_wqe_t *w)
{
    const struct mlx5_wqe_ctrl_seg *c = (const struct mlx5_wqe_ctrl_seg *)hc_m5_wqe_at(q, idx, 0);
    uint32_t oi = be32toh(c->opmod_idx_opcode), qd = be32toh(c->qpn_ds);
    w->idx = idx;
    w->opcode = (uint8_t)oi;
    w->ds = (uint8_t)(qd & 0x3f);
    w->nbb = HC_MAX(1u, ((uint32_t)w->ds * 16 + MLX5_SEND_WQE_BB - 1) / MLX5_SEND_WQE_BB);
    if (w->nbb > left) w->nbb = left;
    w->signaled = (c->fm_ce_se & MLX5_WQE_CTRL_CQ_UPDATE) != 0;
    w->imm = c->imm;
    w->len = 0;
    w->niov = 0;
    w->raddr = 0;
    w->rkey = 0;
}

static bool hc_m5_iov_add(hc_m5_wqe_t *w, void *base, uint64_t len)
{
    if (!len) return true;
    if (w->niov == HC_M5_MAX_IOV) return false;
    w->iov[w->niov++] = (struct iovec){.iov_base = base, .iov_len = len};
    w->len += len;
    return true;
}

/* Parses the WQE at q->sq_ci (left WQEBBs posted) into w: 0, or a syndrome
 * with m->why. */
static uint8_t hc_m5_parse(hc_mlx5_model_t *m, const hc_m5_qp_t *q, uint16_t left, hc_m5_wqe_t *w)
{
    uint16_t idx = q->sq_ci;
    hc_m5_wqe_head(q, idx, left, w);
    const struct mlx5_wqe_ctrl_seg *c = (const struct mlx5_wqe_ctrl_seg *)hc_m5_wqe_at(q, idx, 0);
    uint32_t oi = be32toh(c->opmod_idx_opcode), qd = be32toh(c->qpn_ds);
    const uint8_t bad = HC_M5_SYN(LOCAL_QP_OP_ERR);
    if (((oi >> 8) & 0xffff) != idx) {
        hc_m5_set_why(m, "the control segment's WQE index is %u, the WQE is at WQEBB index %u",
                      (oi >> 8) & 0xffff, idx);
        return bad;
    }
    if ((qd >> 8) != q->qpn) {
        hc_m5_set_why(m, "the control segment's QP number is %u", qd >> 8);
        return bad;
    }
    if (w->ds == 0) {
        hc_m5_set_why(m, "ds (the WQE's size in 16-byte units) is 0");
        return bad;
    }
    uint32_t need_bb = ((uint32_t)w->ds * 16 + MLX5_SEND_WQE_BB - 1) / MLX5_SEND_WQE_BB;
    if (need_bb > left) {
        hc_m5_set_why(m,
                      "the WQE of %u WQEBBs (ds %u) runs past the send doorbell record (%u "
                      "WQEBBs posted from it)",
                      need_bb, w->ds, left);
        return bad;
    }
    bool rdma = false, is_read = false;
    switch (w->opcode) {
    case MLX5_OPCODE_RDMA_READ:
        is_read = true;
        /* fall through */
    case MLX5_OPCODE_RDMA_WRITE:
    case MLX5_OPCODE_RDMA_WRITE_IMM:
        rdma = true;
        break;
    case MLX5_OPCODE_SEND:
    case MLX5_OPCODE_SEND_IMM:
        break;
    default:
        hc_m5_set_why(m, "opcode 0x%x is not modelled (RDMA WRITE[_IMM], RDMA READ, SEND[_IMM])",
                      w->opcode);
        return bad;
    }
    uint32_t off = 16, end = (uint32_t)w->ds * 16;
    if (rdma) {
        if (end < 32) {
            hc_m5_set_why(m, "ds %u leaves no room for the remote address segment", w->ds);
            return bad;
        }
        const struct mlx5_wqe_raddr_seg *r =
            (const struct mlx5_wqe_raddr_seg *)hc_m5_wqe_at(q, idx, off);
        w->raddr = be64toh(r->raddr);
        w->rkey = be32toh(r->rkey);
        off = 32;
    }
    while (off < end) {
        const uint8_t *p = hc_m5_wqe_at(q, idx, off);
        uint32_t bc;
        memcpy(&bc, p, 4);
        bc = be32toh(bc);
        if (bc & MLX5_INLINE_SEG) {
            uint32_t n = bc & ~(uint32_t)MLX5_INLINE_SEG;
            if (is_read) {
                hc_m5_set_why(m, "inline data in an RDMA READ");
                return bad;
            }
            if ((uint64_t)off + 4 + n > end) {
                hc_m5_set_why(m, "inline data of %u bytes at byte %u runs past the WQE's %u bytes",
                              n, off, end);
                return bad;
            }
            /* the data may wrap past the end of the SQ buffer */
            uint32_t at = (uint32_t)(hc_m5_wqe_at(q, idx, off + 4) - q->sq);
            uint32_t first = HC_MIN(n, q->sq_bytes - at);
            if (!hc_m5_iov_add(w, q->sq + at, first) || !hc_m5_iov_add(w, q->sq, n - first)) {
                hc_m5_set_why(m, "more than %d data pieces", HC_M5_MAX_IOV);
                return bad;
            }
            off += HC_ALIGN_UP(4 + n, 16u);
            continue;
        }
        if (off + 16 > end) {
            hc_m5_set_why(m, "a data segment at byte %u runs past the WQE's %u bytes", off, end);
            return bad;
        }
        const struct mlx5_wqe_data_seg *d = (const struct mlx5_wqe_data_seg *)p;
        uint32_t lkey = be32toh(d->lkey);
        uint64_t addr = be64toh(d->addr);
        off += 16;
        if (bc == 0) continue; /* carries nothing */
        const char *why =
            hc_m5_key_check(m->seg, lkey, addr, bc, is_read ? IBV_ACCESS_LOCAL_WRITE : 0);
        if (why) {
            hc_m5_set_why(m, "lkey 0x%x %s [0x%llx, +%u)%s", lkey, why, (unsigned long long)addr,
                          bc, is_read ? " (LOCAL_WRITE for the READ's destination)" : "");
            return HC_M5_SYN(LOCAL_PROT_ERR);
        }
        if (!hc_m5_iov_add(w, (void *)(uintptr_t)addr, bc)) {
            hc_m5_set_why(m, "more than %d data pieces", HC_M5_MAX_IOV);
            return bad;
        }
    }
    return 0;
}

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

/* SEND, SEND WITH IMMEDIATE, RDMA WRITE WITH IMMEDIATE: consume a receive
 * of the target QP. */
static int hc_m5_exec_recv(hc_mlx5_model_t *m, hc_m5_qp_t *q, hc_m5_wqe_t *w)
{
    const hc_m5_peer_t *p = q->peer;
    hc_m5_seg_t *ps = p->seg;
    hc_m5_sqp_t *pq = &ps->qp[q->peer_idx];
    uint32_t pqpn = q->peer_idx + 1;
    const uint8_t vm = HC_M5_VENDOR_MODEL;
    bool wimm = w->opcode == MLX5_OPCODE_RDMA_WRITE_IMM;
    if (wimm && w->len) {
        const char *why = hc_m5_key_check(ps, w->rkey, w->raddr, w->len, IBV_ACCESS_REMOTE_WRITE);
        if (why) {
            hc_m5_resp_fail(m, q, false, 0, 0);
            hc_m5_req_fail(m, q, w, HC_M5_SYN(REMOTE_ACCESS_ERR), vm | HC_M5_SYN(REMOTE_ACCESS_ERR),
                           "rkey 0x%x %s [0x%llx, +%llu) (REMOTE_WRITE) at the target QP %u",
                           w->rkey, why, (unsigned long long)w->raddr, (unsigned long long)w->len,
                           pqpn);
            return HC_M5_DONE;
        }
    }
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
    const struct mlx5_wqe_data_seg *rd =
        (const struct mlx5_wqe_data_seg *)hc_m5_at(ps, pq->rq_off) + (ridx & (pq->rq_cnt - 1));
    uint32_t rlen = be32toh(rd->byte_count), rkey = be32toh(rd->lkey);
    uint64_t raddr = be64toh(rd->addr);
    int e;
    if (!wimm) {
        if (w->len > rlen) {
            hc_m5_resp_fail_locked(m, ps, pq, true, HC_M5_SYN(LOCAL_LENGTH_ERR),
                                   vm | HC_M5_SYN(LOCAL_LENGTH_ERR));
            hc_m5_cq_unlock(pc);
            hc_m5_req_fail(m, q, w, HC_M5_SYN(REMOTE_OP_ERR), vm | HC_M5_SYN(REMOTE_OP_ERR),
                           "%llu bytes into the target QP %u's receive %u of %u bytes",
                           (unsigned long long)w->len, pqpn, ridx, rlen);
            return HC_M5_DONE;
        }
        const char *why =
            w->len ? hc_m5_key_check(ps, rkey, raddr, w->len, IBV_ACCESS_LOCAL_WRITE) : NULL;
        if (why) {
            hc_m5_resp_fail_locked(m, ps, pq, true, HC_M5_SYN(LOCAL_PROT_ERR),
                                   vm | HC_M5_SYN(LOCAL_PROT_ERR));
            hc_m5_cq_unlock(pc);
            hc_m5_req_fail(m, q, w, HC_M5_SYN(REMOTE_OP_ERR), vm | HC_M5_SYN(REMOTE_OP_ERR),
                           "the target QP %u's receive %u: lkey 0x%x %s [0x%llx, +%llu) "
                           "(LOCAL_WRITE)",
                           pqpn, ridx, rkey, why, (unsigned long long)raddr,
                           (unsigned long long)w->len);
            return HC_M5_DONE;
        }
        e = hc_m5_move(p, true, w, raddr, false);
    } else {
        e = hc_m5_move(p, true, w, w->raddr, true);
    }
    if (!e && w->len == 0 && !hc_m5_peer_alive(p)) e = ESRCH;
    if (e) {
        if (e != ESRCH && e != EPERM) {
            if (wimm)
                hc_m5_resp_fail_locked(m, ps, pq, false, 0, 0);
            else
                hc_m5_resp_fail_locked(m, ps, pq, true, HC_M5_SYN(LOCAL_PROT_ERR),
                                       vm | HC_M5_SYN(LOCAL_PROT_ERR));
        }
        hc_m5_cq_unlock(pc);
        hc_m5_xfer_fail(m, q, w, e, wimm ? w->raddr : raddr);
        return HC_M5_DONE;
    }
    uint8_t buf[64];
    struct mlx5_cqe64 *cqe = (struct mlx5_cqe64 *)buf;
    memset(cqe, 0, sizeof(*cqe));
    uint8_t op = w->opcode == MLX5_OPCODE_SEND       ? MLX5_CQE_RESP_SEND
                 : w->opcode == MLX5_OPCODE_SEND_IMM ? MLX5_CQE_RESP_SEND_IMM
                                                     : MLX5_CQE_RESP_WR_IMM;
    cqe->imm_inval_pkey = w->opcode == MLX5_OPCODE_SEND ? 0 : w->imm;
    cqe->byte_cnt = htobe32((uint32_t)w->len);
    cqe->flags_rqpn = htobe32(q->qpn);
    cqe->sop_drop_qpn = htobe32(pqpn);
    cqe->wqe_counter = htobe16(ridx);
    cqe->op_own = (uint8_t)(op << 4);
    pq->rq_ci++;
    if (!hc_m5_cqe_put(m, ps, pq->cq, buf)) /* the target's CQ overran */
        hc_m5_resp_fail_locked(m, ps, pq, false, 0, 0);
    hc_m5_cq_unlock(pc);
    m->stats.bytes += w->len;
    if (w->signaled) hc_m5_req_done(m, q, w, 0);
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
static int hc_m5_qp_run(hc_mlx5_model_t *m, hc_m5_qp_t *q)
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

/* ---- the doorbell check ---------------------------------------------------------------------- */

static bool hc_m5_poisoned(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != HC_M5_POISON) return false;
    return true;
}

static void hc_m5_bad_doorbell(hc_mlx5_model_t *m, const hc_m5_qp_t *q, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void hc_m5_bad_doorbell(hc_mlx5_model_t *m, const hc_m5_qp_t *q, const char *fmt, ...)
{
    m->stats.bad_doorbells++;
    int level = m->stats.bad_doorbells <= HC_M5_LOG_DOORBELLS ? HC_LOG_WARN : HC_LOG_DEBUG;
    if (level > hc_log_level_current) return;
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    hc_log(level, "mlx5 model: QP %u: bad doorbell: %s", q->qpn, why);
}

/* Whether the BlueFlame half h holds the whole WQE at idx (ds 16-byte units). */
static bool hc_m5_bf_matches(const hc_m5_qp_t *q, const uint8_t *h, uint16_t idx, uint32_t bytes,
                             uint32_t *at)
{
    uint32_t start = (uint32_t)(hc_m5_wqe_at(q, idx, 0) - q->sq);
    uint32_t first = HC_MIN(bytes, q->sq_bytes - start);
    for (uint32_t i = 0; i < bytes; i++) {
        uint8_t v = i < first ? q->sq[start + i] : q->sq[i - first];
        if (h[i] != v) {
            *at = i;
            return false;
        }
    }
    return true;
}

/* Checks the doorbell write behind the WQEs from db_ci to the doorbell
 * record: the first 8 bytes of the last one's control segment (8-byte
 * doorbell) or the whole of it (BlueFlame, a lone WQE), in the expected half
 * of the BlueFlame register. Counts and logs a bad one; the WQEs run anyway. */
static void hc_m5_doorbell(hc_mlx5_model_t *m, hc_m5_qp_t *q)
{
    uint16_t pi = hc_m5_sq_pi(q);
    uint8_t *half = q->bf + (size_t)q->bf_half * HC_M5_BF_SIZE;
    uint8_t *other = q->bf + (size_t)(q->bf_half ^ 1) * HC_M5_BF_SIZE;
    if (pi == q->db_ci) {
        bool wrote = !hc_m5_poisoned(half, 8);
        if (wrote || !hc_m5_poisoned(other, 8)) {
            hc_m5_bad_doorbell(m, q,
                               "a doorbell write with no new WQE behind the send doorbell "
                               "record (%u)",
                               pi);
            if (wrote) q->bf_half ^= 1;
            memset(half, HC_M5_POISON, MLX5_SEND_WQE_BB);
            memset(other, HC_M5_POISON, MLX5_SEND_WQE_BB);
        }
        return;
    }
    uint16_t n = (uint16_t)(pi - q->db_ci);
    if (n > q->sq_cnt) { /* the run reports it */
        q->db_ci = pi;
        return;
    }
    uint16_t i = q->db_ci, last = i;
    uint32_t nwqe = 0, last_ds = 0;
    bool boundary = true;
    while (i != pi) {
        const struct mlx5_wqe_ctrl_seg *c = (const struct mlx5_wqe_ctrl_seg *)hc_m5_wqe_at(q, i, 0);
        uint32_t ds = be32toh(c->qpn_ds) & 0x3f;
        uint32_t nbb = HC_MAX(1u, (ds * 16 + MLX5_SEND_WQE_BB - 1) / MLX5_SEND_WQE_BB);
        last = i;
        last_ds = ds;
        nwqe++;
        if (nbb > (uint16_t)(pi - i)) {
            boundary = false;
            break;
        }
        i = (uint16_t)(i + nbb);
    }
    q->db_ci = pi;
    const uint8_t *ctrl = hc_m5_wqe_at(q, last, 0);
    if (!boundary) {
        hc_m5_bad_doorbell(m, q,
                           "the send doorbell record %u is inside WQE %u (ds %u), not at a "
                           "WQE boundary",
                           pi, last, last_ds);
        q->bf_half ^= 1;
    } else if (memcmp(half, ctrl, 8) == 0) {
        if (!hc_m5_poisoned(half + 8, MLX5_SEND_WQE_BB - 8)) { /* BlueFlame */
            uint32_t bytes = last_ds * 16, at = 0;
            if (nwqe != 1)
                hc_m5_bad_doorbell(m, q, "a BlueFlame write behind %u WQEs (one only) ending at %u",
                                   nwqe, pi);
            else if (bytes > HC_M5_BF_SIZE)
                hc_m5_bad_doorbell(m, q,
                                   "a BlueFlame write of WQE %u of %u bytes (the register "
                                   "half holds %u)",
                                   last, bytes, HC_M5_BF_SIZE);
            else if (!hc_m5_bf_matches(q, half, last, bytes, &at))
                hc_m5_bad_doorbell(m, q,
                                   "the BlueFlame copy of WQE %u differs from the WQE at "
                                   "byte %u (0x%02x, the WQE has 0x%02x)",
                                   last, at, half[at], (unsigned)hc_m5_wqe_at(q, last, at)[0]);
        }
        q->bf_half ^= 1;
    } else if (memcmp(other, ctrl, 8) == 0) {
        hc_m5_bad_doorbell(m, q,
                           "the doorbell for WQE %u was written at BlueFlame offset %u, "
                           "expected %u (the offset alternates)",
                           last, (q->bf_half ^ 1) * HC_M5_BF_SIZE, q->bf_half * HC_M5_BF_SIZE);
        /* resynchronised: the next one goes to this half */
    } else {
        uint64_t got, want;
        memcpy(&got, half, 8);
        memcpy(&want, ctrl, 8);
        hc_m5_bad_doorbell(m, q,
                           "the doorbell write at BlueFlame offset %u is %016llx (in memory "
                           "order), not the first 8 bytes %016llx of WQE %u, "
                           "the last of the %u behind the send doorbell record %u",
                           q->bf_half * HC_M5_BF_SIZE, (unsigned long long)be64toh(got),
                           (unsigned long long)be64toh(want), last, nwqe, pi);
        q->bf_half ^= 1;
    }
    memset(half, HC_M5_POISON, MLX5_SEND_WQE_BB);
    memset(other, HC_M5_POISON, MLX5_SEND_WQE_BB);
}

/* ---- faults ---------------------------------------------------------------------------------- */

static hcomm_status_t hc_m5_parse_faults(hc_mlx5_model_t *m, const char *spec)
{
    if (!spec || !*spec) return HCOMM_OK;
    const char *p = spec;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        const char *at = memchr(p, '@', n);
        if (!at)
            return hc_error(HCOMM_ERR_INVALID,
                            "HCOMM_MLX5_MODEL_FAULT: \"%.*s\" in \"%s\" is not "
                            "KIND@N (no @N)",
                            (int)n, p, spec);
        size_t kl = (size_t)(at - p);
        int kind = -1;
        for (int k = 0; k < (int)HC_ARRAY_SIZE(hc_m5_fault_names); k++)
            if (strlen(hc_m5_fault_names[k]) == kl && memcmp(p, hc_m5_fault_names[k], kl) == 0)
                kind = k;
        if (kind < 0)
            return hc_error(HCOMM_ERR_INVALID,
                            "HCOMM_MLX5_MODEL_FAULT: unknown fault kind \"%.*s\" "
                            "in \"%s\" (remote_access, local_prot, length, retry or flush)",
                            (int)kl, p, spec);
        uint64_t v = 0;
        const char *d = at + 1, *end = p + n;
        bool ok = d < end;
        for (; d < end && ok; d++) {
            ok = *d >= '0' && *d <= '9' && v < 1000000000000000ull;
            v = v * 10 + (uint64_t)(*d - '0');
        }
        if (!ok || v == 0)
            return hc_error(HCOMM_ERR_INVALID,
                            "HCOMM_MLX5_MODEL_FAULT: \"%.*s\" in \"%s\": N must be "
                            "a number >= 1 (the N-th WQE this NIC runs)",
                            (int)n, p, spec);
        if (m->nfaults == HC_M5_MAX_FAULTS)
            return hc_error(HCOMM_ERR_INVALID,
                            "HCOMM_MLX5_MODEL_FAULT: more than %d faults in \"%s\"",
                            HC_M5_MAX_FAULTS, spec);
        /* kept sorted by N (insertion; a later duplicate N comes after) */
        int j = m->nfaults++;
        while (j > 0 && m->faults[j - 1].n > v) {
            m->faults[j] = m->faults[j - 1];
            j--;
        }
        m->faults[j] = (hc_m5_fault_t){.n = v, .kind = kind};
        if (!comma) break;
        p = comma + 1;
    }
    return HCOMM_OK;
}

/* ---- open / close ---------------------------------------------------------------------------- */

hcomm_status_t hc_mlx5_model_open(hc_mlx5_model_t **m_p, const char *fault)
{
    *m_p = NULL;
    hc_mlx5_model_t *m = calloc(1, sizeof(*m));
    if (!m) return hc_error(HCOMM_ERR_NO_MEMORY, "mlx5 model: %zu bytes for the model", sizeof(*m));
    m->fd = -1;
    hcomm_status_t st = hc_m5_parse_faults(m, fault);
    if (st != HCOMM_OK) {
        free(m);
        return st;
    }
    m->fd = memfd_create("hcomm-mlx5-model", MFD_CLOEXEC);
    if (m->fd < 0) {
        st = hc_error_errno(HCOMM_ERR_IO, errno, "mlx5 model: memfd_create for the segment");
        goto fail;
    }
    if (ftruncate(m->fd, (off_t)HC_M5_SEG_BYTES) != 0) {
        st = hc_error_errno(HCOMM_ERR_NO_MEMORY, errno,
                            "mlx5 model: ftruncate of the %llu-byte segment",
                            (unsigned long long)HC_M5_SEG_BYTES);
        goto fail;
    }
    void *base = mmap(NULL, HC_M5_SEG_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, m->fd, 0);
    if (base == MAP_FAILED) {
        st = hc_error_errno(HCOMM_ERR_NO_MEMORY, errno, "mlx5 model: mmap of the %llu-byte segment",
                            (unsigned long long)HC_M5_SEG_BYTES);
        goto fail;
    }
    m->seg = base;
    m->pid = getpid();
    /* Peers reach this process's memory (process_vm_writev/readv) and memfd
     * (/proc/PID/fd/N) with ptrace-style checks: under Yama's ptrace_scope 1
     * only a tracer we name may, so name any (a test-only build). */
#ifdef PR_SET_PTRACER
    if (prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0) != 0 && errno != EINVAL)
        hc_log_debug("mlx5 model: prctl(PR_SET_PTRACER_ANY): %s", strerror(errno));
#endif
    uint64_t nonce = 0;
    if (getrandom(&nonce, sizeof(nonce), GRND_NONBLOCK) != (ssize_t)sizeof(nonce) || !nonce)
        nonce = hc_time_ns() ^ ((uint64_t)(uintptr_t)base << 7) ^ (uint64_t)m->pid << 40;
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    for (uint32_t i = 0; i < HC_M5_MAX_CQ; i++) {
        int rc = pthread_mutex_init(&m->seg->cq[i].lock, &a);
        if (rc) {
            pthread_mutexattr_destroy(&a);
            st = hc_error_errno(HCOMM_ERR_INTERNAL, rc,
                                "mlx5 model: a robust shared mutex for CQ %u", i + 1);
            goto fail;
        }
    }
    pthread_mutexattr_destroy(&a);
    m->heap_next = HC_ALIGN_UP((uint64_t)sizeof(hc_m5_seg_t), 4096ull);
    m->heap_end = HC_M5_SEG_BYTES;
    m->qp_hint = 0;
    m->key_hint = 1;
    hc_m5_hdr_t *h = &m->seg->hdr;
    h->version = HC_M5_VERSION;
    h->layout = (uint32_t)sizeof(hc_m5_seg_t);
    h->pid = (int32_t)m->pid;
    h->fd = m->fd;
    h->nonce = nonce;
    h->self_addr = (uint64_t)(uintptr_t)base;
    h->size = HC_M5_SEG_BYTES;
    __atomic_store_n(&h->magic, HC_M5_MAGIC, __ATOMIC_RELEASE);
    hc_m5_peer_t *self = &m->peers[0];
    hc_mlx5_model_id(m, self->id);
    self->seg = m->seg;
    self->len = HC_M5_SEG_BYTES;
    self->pid = m->pid;
    self->self = true;
    m->npeers = 1;
    hc_log_debug("mlx5 model: opened (pid %d, memfd %d, %d faults injected)", (int)m->pid, m->fd,
                 m->nfaults);
    *m_p = m;
    return HCOMM_OK;
fail:
    if (m->seg) munmap(m->seg, HC_M5_SEG_BYTES);
    if (m->fd >= 0) close(m->fd);
    free(m);
    return st;
}

void hc_mlx5_model_close(hc_mlx5_model_t *m)
{
    if (!m) return;
    for (uint32_t i = 0; i < HC_M5_MAX_QP; i++)
        if (m->qp[i].s) __atomic_store_n(&m->qp[i].s->state, HC_M5_QP_DESTROYED, __ATOMIC_RELEASE);
    for (uint32_t i = 0; i < HC_M5_MAX_CQ; i++)
        m->seg->cq[i].state = HC_M5_CQ_FREE;
    __atomic_store_n(&m->seg->hdr.magic, 0, __ATOMIC_RELEASE);
    for (int i = 1; i < m->npeers; i++)
        munmap(m->peers[i].seg, m->peers[i].len);
    munmap(m->seg, HC_M5_SEG_BYTES);
    close(m->fd);
    free(m);
}

void hc_mlx5_model_id(const hc_mlx5_model_t *m, uint8_t id[HC_MLX5_MODEL_ID_LEN])
{
    uint32_t pid = htole32((uint32_t)m->seg->hdr.pid), fd = htole32((uint32_t)m->seg->hdr.fd);
    uint64_t nonce = htole64(m->seg->hdr.nonce);
    memcpy(id, &pid, 4);
    memcpy(id + 4, &fd, 4);
    memcpy(id + 8, &nonce, 8);
}

/* The peer whose model id is id: this model, a mapped one, or mapped now. */
static hcomm_status_t hc_m5_peer_get(hc_mlx5_model_t *m, const uint8_t *id, hc_m5_peer_t **p_p)
{
    for (int i = 0; i < m->npeers; i++) {
        if (memcmp(m->peers[i].id, id, HC_MLX5_MODEL_ID_LEN) == 0) {
            *p_p = &m->peers[i];
            return HCOMM_OK;
        }
    }
    uint32_t pid, fd;
    uint64_t nonce;
    memcpy(&pid, id, 4);
    memcpy(&fd, id + 4, 4);
    memcpy(&nonce, id + 8, 8);
    pid = le32toh(pid);
    fd = le32toh(fd);
    nonce = le64toh(nonce);
    if (m->npeers == HC_M5_MAX_PEERS)
        return hc_error(HCOMM_ERR_NO_MEMORY,
                        "mlx5 model: %d peer models mapped already (at most %d); "
                        "cannot map the one of process %u",
                        m->npeers - 1, HC_M5_MAX_PEERS - 1, pid);
    char path[64];
    snprintf(path, sizeof(path), "/proc/%u/fd/%u", pid, fd);
    int pfd = open(path, O_RDWR | O_CLOEXEC);
    if (pfd < 0)
        return hc_error_errno(HCOMM_ERR_PEER_FAILED, errno,
                              "mlx5 model: opening the peer model's segment %s", path);
    struct stat sb;
    if (fstat(pfd, &sb) != 0 || (uint64_t)sb.st_size < sizeof(hc_m5_seg_t)) {
        int e = errno;
        close(pfd);
        return hc_error(HCOMM_ERR_PEER_FAILED, "mlx5 model: %s is not a model segment (%s)", path,
                        e ? strerror(e) : "too small");
    }
    size_t len = (size_t)sb.st_size;
    void *base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, pfd, 0);
    int e = errno;
    close(pfd);
    if (base == MAP_FAILED)
        return hc_error_errno(HCOMM_ERR_NO_MEMORY, e,
                              "mlx5 model: mmap of the peer segment %s (%zu "
                              "bytes)",
                              path, len);
    const hc_m5_hdr_t *h = &((const hc_m5_seg_t *)base)->hdr;
    if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != HC_M5_MAGIC ||
        h->version != HC_M5_VERSION || h->layout != sizeof(hc_m5_seg_t) || h->nonce != nonce ||
        (uint32_t)h->pid != pid || (uint32_t)h->fd != fd || h->size != len) {
        hcomm_status_t st = hc_error(HCOMM_ERR_PEER_FAILED,
                                     "mlx5 model: %s is not the model segment "
                                     "the peer id names (magic %016llx version %u layout %u pid %d "
                                     "nonce %016llx; expected version %u layout %zu pid %u nonce "
                                     "%016llx)",
                                     path, (unsigned long long)h->magic, h->version, h->layout,
                                     h->pid, (unsigned long long)h->nonce, HC_M5_VERSION,
                                     sizeof(hc_m5_seg_t), pid, (unsigned long long)nonce);
        munmap(base, len);
        return st;
    }
    hc_m5_peer_t *p = &m->peers[m->npeers++];
    memcpy(p->id, id, HC_MLX5_MODEL_ID_LEN);
    p->seg = base;
    p->len = len;
    p->pid = (pid_t)pid;
    p->self = false;
    hc_log_debug("mlx5 model: mapped the model of process %u (%s)", pid, path);
    *p_p = p;
    return HCOMM_OK;
}

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

hcomm_status_t hc_mlx5_model_qp_create(hc_mlx5_model_t *m, uint32_t cqn, uint32_t sq_wqe,
                                       uint32_t rq_wqe, uint32_t max_inline, struct mlx5dv_qp *out,
                                       uint32_t *qpn_p)
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
    uint32_t i = 0;
    bool found = false;
    for (uint32_t k = 0; k < HC_M5_MAX_QP && !found; k++) {
        i = (m->qp_hint + k) % HC_M5_MAX_QP;
        uint32_t st = m->seg->qp[i].state;
        found = !m->qp[i].s && (st == HC_M5_QP_FREE || st == HC_M5_QP_DESTROYED);
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
    memset(out, 0, sizeof(*out));
    out->dbrec = q->dbrec;
    out->sq.buf = q->sq;
    out->sq.wqe_cnt = sq_wqe;
    out->sq.stride = MLX5_SEND_WQE_BB;
    out->rq.buf = hc_m5_at(m->seg, q->off_rq);
    out->rq.wqe_cnt = rq_wqe;
    out->rq.stride = (uint32_t)sizeof(struct mlx5_wqe_data_seg);
    out->bf.reg = q->bf;
    out->bf.size = HC_M5_BF_SIZE;
    out->sqn = out->rqn = q->qpn;
    *qpn_p = q->qpn;
    return HCOMM_OK;
}

static hc_m5_qp_t *hc_m5_qp_get(hc_mlx5_model_t *m, uint32_t qpn)
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

/* ---- execution ------------------------------------------------------------------------------- */

void hc_mlx5_model_kick(hc_mlx5_model_t *m, uint32_t qpn)
{
    hc_m5_qp_t *q = hc_m5_qp_get(m, qpn);
    if (HC_UNLIKELY(!q)) {
        hc_log_warn("mlx5 model: doorbell of QP %u, which does not exist", qpn);
        return;
    }
    hc_m5_doorbell(m, q);
    if (m->defer)
        q->marked = true;
    else
        hc_m5_qp_run(m, q);
}

int hc_mlx5_model_progress(hc_mlx5_model_t *m)
{
    int n = 0;
    for (int k = 0; k < m->nlive; k++) {
        hc_m5_qp_t *q = &m->qp[m->live[k]];
        if (q->marked || q->waiting) {
            n += hc_m5_qp_run(m, q);
        } else if (__atomic_load_n(&q->s->state, __ATOMIC_ACQUIRE) == HC_M5_QP_ERR) {
            /* moved to ERROR by a peer, or WQEs / receives posted since: flushes */
            if (hc_m5_sq_pi(q) != q->sq_ci ||
                (uint16_t)be32toh(__atomic_load_n(&q->dbrec[MLX5_RCV_DBR], __ATOMIC_ACQUIRE)) !=
                    (uint16_t)q->s->rq_ci)
                n += hc_m5_qp_run(m, q);
        }
    }
    return n;
}

void hc_mlx5_model_defer(hc_mlx5_model_t *m, bool defer)
{
    m->defer = defer;
}

void hc_mlx5_model_stats(const hc_mlx5_model_t *m, hc_mlx5_model_stats_t *s)
{
    *s = m->stats;
}
