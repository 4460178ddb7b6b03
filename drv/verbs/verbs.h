/*
 * verbs: RDMA between nodes over plain libibverbs (any HCA, RoCE or
 * InfiniBand, soft-RoCE rdma_rxe). Internal header shared by
 *   verbs_dev.c   device and port choice (HCOMM_IB_HCA), GID choice, probe,
 *                 hcomm_info's device listing, open/close of the device;
 *   verbs_conn.c  RC queue pairs per peer: lazy creation, the handshake
 *                 through env->ep_send, INIT/RTR/RTS, failure, teardown;
 *   verbs_data.c  eager SENDs into the peer's receive slots, credits
 *                 written back by RDMA WRITE, RDMA READ/WRITE for get and
 *                 write, memory registration and remote keys, progress;
 *   verbs_ibv.c   the ibverbs queue backend (hc_verbs_dp_t below):
 *                 ibv_create_qp/ibv_modify_qp, ibv_post_send, ibv_poll_cq.
 * The protocol never calls ibverbs' queue functions itself: it goes through
 * a queue backend, so that drv/mlx5 can put its own WQEs, doorbells and CQE
 * polling (and its model of them) under the same protocol.
 * The design is in docs/verbs.md and docs/mlx5.md.
 */
#ifndef HC_DRV_VERBS_H
#define HC_DRV_VERBS_H

#include "base/hc_base.h"
#include "base/list.h"
#include "drv/drv.h"

#include <infiniband/verbs.h>

#define HC_VERBS_MAGIC 0x68637662u     /* "hcvb" */
#define HC_VERBS_REG_MAGIC 0x72656776u /* "vger" */
#define HC_VERBS_MAX_QPS 8             /* HCOMM_IB_QPS_PER_PEER at most */
#define HC_VERBS_SLOTS 64              /* eager receive slots per peer (credits) */
#define HC_VERBS_SLOT_BYTES 8192u      /* one eager frame per slot (layout below) */
/* A slot: u64 head | frame header | payload | pad to 8 | u64 tail; head and
 * tail both hold (sequence << 32 | payload length), the sequence being the
 * frame's number on the connection plus one (never 0). */
#define HC_VERBS_SLOT_OVERHEAD (8 + sizeof(hc_frame_hdr_t) + 8)
#define HC_VERBS_MAX_FRAME (HC_VERBS_SLOT_BYTES - HC_VERBS_SLOT_OVERHEAD)
#define HC_VERBS_SQ_DEPTH 256          /* send queue entries per QP */
#define HC_VERBS_CREDIT_BATCH (HC_VERBS_SLOTS / 4) /* reposted slots per credit write */
#define HC_VERBS_INLINE 256            /* inline data asked of the QP */
#define HC_VERBS_CHUNK_MIN (1u << 20)  /* an RMA is cut into pieces of at least this */
#define HC_VERBS_CHUNKS_PER_RMA 32     /* ... and at most about this many pieces */
#define HC_VERBS_HB_NS 1000000000ull   /* idle connection: a credit write this often */
#define HC_VERBS_CTRL_STRIDE 64        /* bytes per peer in the control region */
#define HC_VERBS_POLL_BATCH 32

/* Driver-private frame types (never delivered). */
enum { HC_VERBS_FRAME_BYE = HC_FRAME_DRIVER };

/* Address blob every rank publishes at init: the device end of this rank. */
typedef struct {
    uint32_t magic;
    uint8_t link_layer; /* IBV_LINK_LAYER_* */
    uint8_t port;
    uint8_t mtu;        /* enum ibv_mtu */
    uint8_t pad;
    uint16_t lid;
    uint16_t pad2;
    uint8_t gid[16];
    uint64_t instance;  /* random per process */
} hc_verbs_addr_t;

/* Handshake blobs (env->ep_send / ops->ep_recv). */
enum { HC_VERBS_EP_HELLO = 1, HC_VERBS_EP_READY };
#define HC_VERBS_EP_RTR 1u /* HELLO flag: the sender's QPs were in RTR when it was sent */
typedef struct {
    uint32_t magic;
    uint8_t kind;
    uint8_t flags;
    uint8_t nqp;
    uint8_t pad;
    int32_t rank;
    uint32_t psn;
    uint64_t instance;
    uint64_t ctrl_addr; /* the sender's control region: the receiver writes its credits there */
    uint32_t ctrl_rkey;
    uint32_t slots;     /* receive slots posted before this HELLO (first credits) */
    uint32_t qpn[HC_VERBS_MAX_QPS];
    uint64_t ring_addr; /* the sender's receive slots (eager by RDMA WRITE) */
    uint32_t ring_rkey;
    uint32_t eager;     /* HC_VERBS_EAGER_*: both sides must agree */
} hc_verbs_ep_t;

/* A memory registration as the protocol sees it: ibverbs' MR, or a queue
 * backend's own key (mr NULL, handle the backend's). */
typedef struct {
    struct ibv_mr *mr;
    uint32_t lkey, rkey;
    uint32_t handle;
    void *map; /* a queue model's mapping of a dmabuf (device memory), else NULL */
    size_t map_len;
} hc_verbs_mr_t;

/* A registration: what mem_reg's key points at. The driver keeps its live
 * ones on a list (calls come under mem/'s lock): close releases those still
 * held, as a device refuses to free a protection domain that has MRs. */
typedef struct hc_verbs_reg {
    uint32_t magic;
    hc_verbs_mr_t mr;
    uintptr_t addr;
    size_t len;
    struct hc_verbs_reg *prev, *next;
} hc_verbs_reg_t;

/* A peer's packed key, unpacked. */
struct hc_rkey {
    uint64_t addr, len;
    uint32_t rkey;
};
typedef struct {
    uint64_t addr, len;
    uint32_t rkey;
    uint32_t magic;
} __attribute__((packed)) hc_verbs_rkey_wire_t;

typedef struct hc_verbs_rma {
    struct hc_verbs_rma *next;
    struct hc_verbs_conn *conn;
    void *cookie;
    uint8_t *local;
    uint64_t raddr;
    size_t len, posted; /* bytes; posted: handed to QPs so far */
    uint32_t lkey, rkey;
    uint32_t pieces_out; /* posted pieces without their completion yet */
    bool write;
    bool queued;   /* on the connection's pending list */
    bool finished; /* status final (rma_done pushed, or the sync caller told) */
    bool orphan;   /* a synchronous caller gave up: free when the pieces are back */
    hcomm_status_t status;
} hc_verbs_rma_t;

/* One signaled send-queue entry: completions come in order per QP, so the
 * oldest mark is the one a CQE completes. */
typedef struct {
    uint64_t sq_seq; /* WQEs posted on the QP up to and including this one */
    uint64_t tx_seq; /* eager sends posted (qp 0) up to and including this one */
    hc_verbs_rma_t *rma;
} hc_verbs_mark_t;

typedef struct {
    struct ibv_qp *qp; /* ibverbs' QP (NULL on a backend without one) */
    void *bq;          /* the queue backend's state for this QP */
    uint32_t qpn;
    bool live;         /* created and not destroyed */
    uint64_t sq_posted, sq_done; /* WQEs posted / known complete */
    uint32_t unsignaled;         /* since the last signaled WQE */
    hc_verbs_mark_t marks[HC_VERBS_SQ_DEPTH];
    uint32_t mark_head, mark_n;
    uint64_t moved_ns; /* with marks in flight: when the oldest was posted or the last retired */
} hc_verbs_qp_t;

/* How eager frames travel (HCOMM_IB_EAGER). */
enum { HC_VERBS_EAGER_WRITE = 1, HC_VERBS_EAGER_SEND = 2 };

/* An arrived eager slot waiting for delivery (SEND mode: from its CQE). */
typedef struct hc_verbs_rx {
    struct hc_verbs_rx *next;
    struct hc_verbs_conn *conn;
    uint32_t slot, len;
} hc_verbs_rx_t;

enum { HC_VERBS_C_NONE, HC_VERBS_C_HELLO, HC_VERBS_C_UP, HC_VERBS_C_FAILED, HC_VERBS_C_CLOSED };

typedef struct hc_verbs_conn {
    hc_conn_t base;
    struct hc_verbs_drv *d;
    int state;
    hc_verbs_addr_t addr;  /* the peer's device end (its address blob) */
    /* handshake */
    bool qps_made, rtr, sent_hello, hello_rtr, peer_ready;
    hc_verbs_ep_t remote;
    bool have_remote;
    uint32_t psn;
    /* queue pairs: qp[0] carries the eager frames and credits, all carry RMA */
    int nqp;
    hc_verbs_qp_t *qp;
    int rr; /* next QP for an RMA piece */
    int cqi; /* index in the driver's CQs, -1 */
    /* eager receive: SLOTS slots the peer SENDs into */
    uint8_t *rx_buf;
    hc_verbs_mr_t rx_mr;
    hc_verbs_rx_t rx[HC_VERBS_SLOTS];
    uint64_t rx_seq;                 /* frames taken from the slots */
    uint64_t rx_posted, rx_advertised; /* slots given to the peer (its credits) */
    uint64_t peer_ring_addr;
    uint32_t peer_ring_rkey;
    int up_idx; /* position in the driver's list of polled rings, -1 */
    bool credit_owed; /* a credit write is due but could not be posted */
    /* eager send: a copy of each frame in tx slots (unless inline) */
    uint8_t *tx_buf;
    hc_verbs_mr_t tx_mr;
    uint64_t tx_sent, tx_done;
    uint64_t peer_posted; /* credits: the peer's posted count (HELLO, then its writes) */
    uint64_t peer_ctrl_addr;
    uint32_t peer_ctrl_rkey;
    uint64_t last_post_ns;
    /* RMA not yet fully posted, in order */
    struct {
        hc_verbs_rma_t *head, *tail;
    } pending;
    bool bye;         /* the peer said it is closing: errors after it are quiet */
    bool fail_owed;   /* peer_failed not reported yet */
    char why[256];
} hc_verbs_conn_t;

typedef struct hc_verbs_cq {
    struct ibv_cq *cq; /* ibverbs' CQ (NULL on a backend without one) */
    void *bq;          /* the queue backend's state for this CQ */
    int users, cap; /* connections using it / that fit */
} hc_verbs_cq_t;

struct hc_verbs_drv;

/* One send work request, as the protocol asks for it (the backends turn it
 * into an ibv_send_wr or write the WQE themselves). */
enum { HC_VERBS_OP_WRITE = 1, HC_VERBS_OP_WRITE_IMM, HC_VERBS_OP_READ, HC_VERBS_OP_SEND };
typedef struct {
    uint64_t wr_id;
    uint64_t laddr, raddr;
    uint32_t len, lkey, rkey;
    uint32_t imm;   /* WRITE_IMM: host order */
    uint8_t op;     /* HC_VERBS_OP_* */
    bool signal;    /* a CQE when it completes */
    bool inl;       /* data inline in the WQE (len <= the QP's inline room) */
} hc_verbs_wr_t;

/* The queue backend: how QPs, CQs and keys are made and how work is posted
 * and completions polled. verbs_ibv.c is ibverbs'; drv/mlx5 has its own. */
typedef struct hc_verbs_dp {
    const char *name;
    /* Opens the device end (NULL: ibverbs' device and GID choice, verbs_dev.c);
     * fills d->me, d->dev_name, d->max_msg, d->dev_attr's limits. */
    hcomm_status_t (*dev_open)(struct hc_verbs_drv *d, const hc_drv_env_t *env);
    void (*dev_close)(struct hc_verbs_drv *d);
    hcomm_status_t (*mr_reg)(struct hc_verbs_drv *d, void *addr, size_t len, int access,
                             hc_verbs_mr_t *mr);
    void (*mr_dereg)(struct hc_verbs_drv *d, hc_verbs_mr_t *mr);
    /* Device memory (GPUDirect RDMA): [addr, addr + len) is the device
     * range, its bytes dmabuf fd from offset on (ibv_reg_dmabuf_mr). NULL:
     * the backend cannot, and device memory is staged. mr_dereg undoes it. */
    hcomm_status_t (*mr_reg_dmabuf)(struct hc_verbs_drv *d, void *addr, size_t len, int fd,
                                    uint64_t offset, int access, hc_verbs_mr_t *mr);
    hcomm_status_t (*cq_create)(struct hc_verbs_drv *d, int cqe, hc_verbs_cq_t *cq);
    void (*cq_destroy)(struct hc_verbs_drv *d, hc_verbs_cq_t *cq);
    /* An RC QP in INIT on cq (sends and receives), max_recv receives; sets
     * q->qpn, q->live and *max_inline (the inline room it got). */
    hcomm_status_t (*qp_create)(struct hc_verbs_drv *d, hc_verbs_cq_t *cq, uint32_t max_recv,
                                hc_verbs_qp_t *q, uint32_t *max_inline);
    /* RTR then RTS towards the peer's QP dest_qpn (c's address, psns). */
    hcomm_status_t (*qp_connect)(struct hc_verbs_conn *c, hc_verbs_qp_t *q, uint32_t dest_qpn,
                                 uint32_t rq_psn);
    void (*qp_destroy)(struct hc_verbs_drv *d, hc_verbs_qp_t *q);
    /* n work requests behind one doorbell: 0, or an errno (nothing posted
     * of wr[i] and after it; *posted says how many went). */
    int (*post_send)(hc_verbs_qp_t *q, const hc_verbs_wr_t *wr, int n, int *posted);
    int (*post_recv)(hc_verbs_qp_t *q, uint64_t addr, uint32_t len, uint32_t lkey, uint64_t wr_id);
    /* Up to n completions into wc (wr_id, status, qp_num, byte_len,
     * vendor_err, imm_data, wc_flags); < 0 on a broken CQ. */
    int (*poll_cq)(hc_verbs_cq_t *cq, struct ibv_wc *wc, int n);
} hc_verbs_dp_t;
extern const hc_verbs_dp_t hc_verbs_dp_ibv;

typedef struct hc_verbs_drv {
    hc_drv_t base;
    const hc_drv_env_t *env;
    const hc_verbs_dp_t *dp; /* the queue backend */
    void *bdev;              /* the backend's device state */
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    char dev_name[64];
    struct ibv_device_attr dev_attr;
    struct ibv_port_attr port_attr;
    hc_verbs_addr_t me;
    int gid_index;
    uint32_t max_inline, max_msg;
    int nqp;
    size_t zcopy_threshold;
    uint32_t signal_every; /* HCOMM_IB_SIGNAL_EVERY */
    /* completion queues, shared by up to cap connections each */
    hc_verbs_cq_t *cqs;
    int ncq;
    int cqe_per_conn;
    /* control region: HC_VERBS_CTRL_STRIDE bytes per peer; word 0 of a
     * peer's line is its posted-receive count, written by it (RDMA WRITE) */
    uint8_t *ctrl;
    hc_verbs_mr_t ctrl_mr;
    hc_verbs_conn_t **conns; /* by world rank */
    hc_verbs_ep_t *early;    /* by world rank: a HELLO that came before connect() */
    /* completions waiting for their callbacks (progress drains them) */
    struct {
        hc_verbs_rx_t *head, *tail;
    } rxq;
    struct {
        hc_verbs_rma_t *head, *tail;
    } doneq;
    int nfail_owed;
    int eager;                /* HC_VERBS_EAGER_* */
    hc_verbs_conn_t **up;     /* WRITE mode: connections whose rings progress polls */
    int nup;
    int npending; /* RMA on connections' pending lists */
    uint32_t ticks;
    uint64_t nmarks; /* signaled WQEs in flight, all QPs (0: the CQs can wait) */
    uint64_t stall_ns; /* a QP whose oldest signaled WQE waits this long fails its peer */
    hc_verbs_rma_t *rma_free;
    uint64_t hb_next;
    /* counters (HCOMM_LOG=info at close) */
    uint64_t n_write_bytes, n_read_bytes, n_eager_bytes, n_eager_frames, n_inline;
    uint64_t n_regs, n_deregs, n_credit_writes, n_again_credit;
    hc_verbs_reg_t *regs; /* live registrations (mem_reg's), newest first */
} hc_verbs_drv_t;

/* Knobs (verbs_dev.c). */
typedef struct {
    const char *hca, *eager;
    int64_t gid_index, timeout, retry_cnt, tc, sl, qps_per_peer, signal_every;
    size_t zcopy_threshold;
    bool spread;
} hc_verbs_cfg_t;
extern hc_verbs_cfg_t hc_verbs_cfg;

/* verbs_dev.c */
hcomm_status_t hc_verbs_probe(const hc_drv_env_t *env, char *why, size_t why_len);
/* ibverbs' device end: device, port and GID choice, PD (the ibv backend's
 * dev_open, also drv/mlx5's). */
hcomm_status_t hc_verbs_dev_open(hc_verbs_drv_t *d, const hc_drv_env_t *env);
void hc_verbs_dev_close(hc_verbs_drv_t *d);
/* The driver over a queue backend: what the verbs and mlx5 ops tables'
 * open and close are. */
hcomm_status_t hc_verbs_open_dp(const hc_drv_env_t *env, const hc_verbs_dp_t *dp,
                                hc_drv_t **drv_p);
void hc_verbs_close(hc_drv_t *drv);
hcomm_status_t hc_verbs_check_knobs(void);
/* The ops every driver over the protocol shares (all but name, priority,
 * probe, open, describe). */
void hc_verbs_fill_ops(struct hc_drv_ops *ops);
void hc_verbs_describe(const hc_drv_env_t *env, void (*line)(const char *text, void *arg),
                       void *arg);
/* The device and port HCOMM_IB_HCA and the port states choose (ctx open). */
typedef struct {
    struct ibv_context *ctx;
    char name[64];
    int port;
    struct ibv_port_attr pattr;
    /* which of ncand candidates (near of them on this rank's NUMA node;
     * slower ones, or of another link layer, left out) */
    int index, ncand, near, node, slower;
} hc_verbs_pick_t;
hcomm_status_t hc_verbs_choose(const hc_drv_env_t *env, hc_verbs_pick_t *pick, char *why,
                               size_t why_len);
/* Which of n candidate devices (their NUMA nodes in node[], -1 unknown)
 * local rank local_rank uses: the (local_rank mod near)-th of the near ones
 * on my_node when there are any (*near_p of them), else local_rank mod n.
 * (Exposed for the unit test.) */
int hc_verbs_spread(const int *node, int n, int my_node, int local_rank, int *near_p);
/* keep[i]: candidate i's port is among the fastest (gbps, its rate; the
 * first fastest wins a tie of rates across link layers) and of that one's
 * link layer ll. (Exposed for the unit test.) */
void hc_verbs_fastest(const double *gbps, const uint8_t *ll, int n, bool *keep);
/* HCOMM_IB_HCA matching (exposed for the unit test). */
bool hc_verbs_hca_match(const char *spec, const char *dev, int port);

/* verbs_conn.c */
hcomm_status_t hc_verbs_conn_start(hc_verbs_conn_t *c);
void hc_verbs_ep_recv(hc_drv_t *drv, int from, const void *blob, size_t len);
void hc_verbs_conn_fail(hc_verbs_conn_t *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
hcomm_status_t hc_verbs_connect(hc_drv_t *drv, int peer, const void *addr, size_t addr_len,
                                hc_conn_t **conn_p);
void hc_verbs_disconnect(hc_conn_t *conn);
void hc_verbs_conn_free_qps(hc_verbs_conn_t *c);

/* verbs_ibv.c: the ibverbs backend's pieces, which drv/mlx5 reuses for its
 * control path on a real device. */
hcomm_status_t hc_verbs_ibv_mr_reg(hc_verbs_drv_t *d, void *addr, size_t len, int access,
                                   hc_verbs_mr_t *mr);
void hc_verbs_ibv_mr_dereg(hc_verbs_drv_t *d, hc_verbs_mr_t *mr);
hcomm_status_t hc_verbs_ibv_mr_reg_dmabuf(hc_verbs_drv_t *d, void *addr, size_t len, int fd,
                                          uint64_t offset, int access, hc_verbs_mr_t *mr);
hcomm_status_t hc_verbs_ibv_cq_create(hc_verbs_drv_t *d, int cqe, hc_verbs_cq_t *cq);
void hc_verbs_ibv_cq_destroy(hc_verbs_drv_t *d, hc_verbs_cq_t *cq);
hcomm_status_t hc_verbs_ibv_qp_create(hc_verbs_drv_t *d, hc_verbs_cq_t *cq, uint32_t max_recv,
                                      hc_verbs_qp_t *q, uint32_t *max_inline);
hcomm_status_t hc_verbs_ibv_qp_connect(struct hc_verbs_conn *c, hc_verbs_qp_t *q,
                                       uint32_t dest_qpn, uint32_t rq_psn);
void hc_verbs_ibv_qp_destroy(hc_verbs_drv_t *d, hc_verbs_qp_t *q);

/* verbs_data.c */
hcomm_status_t hc_verbs_put(hc_conn_t *conn, const hc_frame_hdr_t *hdr, const void *payload,
                            void *cookie);
hcomm_status_t hc_verbs_get(hc_conn_t *conn, const hc_rma_t *rma);
hcomm_status_t hc_verbs_write(hc_conn_t *conn, const hc_rma_t *rma);
int hc_verbs_progress(hc_drv_t *drv);
/* Polls the CQs once: completions into the driver's queues, no callbacks. */
int hc_verbs_poll(hc_verbs_drv_t *d);
hcomm_status_t hc_verbs_mem_reg(hc_drv_t *drv, const hc_mem_desc_t *desc, uint64_t *key_p);
void hc_verbs_mem_dereg(hc_drv_t *drv, uint64_t key);
void hc_verbs_regs_release(hc_verbs_drv_t *d);
hcomm_status_t hc_verbs_rkey_pack(hc_drv_t *drv, uint64_t key, const hc_mem_desc_t *desc,
                                  void *buf, size_t *len_p);
hcomm_status_t hc_verbs_rkey_unpack(hc_conn_t *conn, const void *buf, size_t len,
                                    hc_rkey_t **rkey_p);
void hc_verbs_rkey_release(hc_conn_t *conn, hc_rkey_t *rkey);
/* Posts the receive of one eager slot. */
int hc_verbs_post_slot(hc_verbs_conn_t *c, uint32_t slot);
/* WRITE mode: the rings progress polls. */
void hc_verbs_up_add(hc_verbs_conn_t *c);
void hc_verbs_up_del(hc_verbs_conn_t *c);
/* Fails what the connection still owed (RMA), once. */
void hc_verbs_conn_flush(hc_verbs_conn_t *c, hcomm_status_t st);

/* wr_id of a receive: (peer << 8 | slot) << 2 | 1; of a signaled send:
 * (peer << 8 | qp index) << 2 | 2. The QP number of the CQE is checked
 * against the connection's, so CQEs of destroyed QPs are ignored. */
#define HC_VERBS_WR_RECV 1u
#define HC_VERBS_WR_SEND 2u
static inline uint64_t hc_verbs_wr(uint32_t kind, int peer, uint32_t idx)
{
    return (((uint64_t)(uint32_t)peer << 8 | idx) << 2) | kind;
}

#endif /* HC_DRV_VERBS_H */
