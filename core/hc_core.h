/*
 * core/: the runtime. One process-wide context (hc_ctx) holds the job's
 * shape, the open drivers, one hc_peer per world rank (its connection, its
 * failure state and the frames waiting for credit), the communicators and
 * the request pool.
 *
 * Point-to-point protocol (p2p*.c, rndv.c), carried by any driver as frames:
 *   size <= conn->eager_max: one EAGER frame; the send completes at once.
 *   larger: RTS {size, sender request, sender address}. When the receive is
 *   matched: with HC_CONN_CAP_GET the receiver reads the data itself and
 *   answers FIN; otherwise it answers CTS and the sender streams DATA frames
 *   straight into the receive buffer.
 * Matching is per communicator, FIFO per (source, tag): each connection
 * delivers in order and unexpected messages are queued in arrival order.
 */
#ifndef HC_CORE_H
#define HC_CORE_H

#include "core/bootstrap.h"
#include "core/stats.h"
#include "base/config.h"
#include "base/dtype.h"
#include "base/hc_base.h"
#include "base/list.h"
#include "drv/drv.h"
#include "topo/topo.h"

#include <sys/types.h>

/* ---- requests ----------------------------------------------------------- */
/* Rendezvous states (core/rndv.c). */
enum {
    HC_RNDV_NONE,
    HC_RNDV_RTS_SENT,  /* sender: waits for FIN, NACK or CTS */
    HC_RNDV_WRITING,   /* sender: its write is in flight */
    HC_RNDV_STREAMING, /* sender: DATA frames going out */
    HC_RNDV_GETTING,   /* receiver: its get is in flight */
    HC_RNDV_CTS_SENT,  /* receiver: waits for DATA, or FIN/NACK after the sender's write */
};

typedef enum { HC_REQ_SEND = 1, HC_REQ_RECV, HC_REQ_COLL } hc_req_kind_t;

#define HC_REQ_MAGIC 0x68637271u /* live request */
#define HC_REQ_FREED 0x66726565u /* back in the pool */
#define HC_REQ_DRAINING 0x64726e67u /* freed, but a driver still holds its payloads */

/* Memory that requests' in-flight payloads point into (a failed
 * collective's scratch): freed when the last of them drains. */
typedef struct hc_drain {
    void *buf;
    int refs;
} hc_drain_t;

struct hc_coll_op;

struct hcomm_request {
    uint32_t magic;
    uint8_t kind;
    bool done;
    bool user;          /* handed to the user: freed by wait/test, else by the library */
    bool rndv;          /* in hc_ctx.rndv_active (a rendezvous waits for a frame or an RMA) */
    uint8_t rndv_state; /* HC_RNDV_* (core/rndv.c) */
    bool deferred;      /* collective posted in a group that has not ended yet */
    bool dev;           /* p2p: buf is device memory (GPUDirect RDMA, core/gdr.c): moved only
                           by the driver's RMA or the GPU dispatch, never by the CPU; mem
                           describes it */
    hcomm_status_t status;
    uint32_t index;     /* slot in the request table: rendezvous frames name it */
    uint32_t gen;       /* bumped at every reuse: stale rendezvous frames are dropped */
    struct hcomm_comm *comm;
    /* p2p */
    void *buf;
    size_t len;         /* bytes posted (recv: capacity) */
    size_t done_bytes;  /* send: bytes handed to the driver; recv: bytes arrived */
    size_t msg_len;     /* recv: length of the matched message */
    uint32_t inflight;  /* send: puts that returned IN_PROGRESS and are not done */
    int peer;           /* comm rank (recv: the source; HCOMM_ANY_SOURCE until matched) */
    int wpeer;          /* world rank of peer (-1: a receive from any source, not matched yet) */
    int *source_out;    /* recv from any source: where the matched source's comm rank goes */
    int32_t tag;
    uint32_t ctx_id;
    uint64_t remote_id; /* rendezvous: the peer's request id */
    hc_mem_attr_t mem;  /* buf's memory when dev */
    struct hc_mem_region *rndv_held; /* registration-cache record held until the end */
    struct hc_mem_region *put_held;  /* send streamed on an HC_CONN_CAP_PUT_REG connection: its
                                        buffer's record, held until the request is recycled
                                        (every put it made is done) */
    hc_drain_t *drain;  /* memory to free once its in-flight payloads are out */
    hc_list_t link;     /* posted-receive queue or a peer's pending list */
    /* collectives */
    struct hc_coll_op *coll;
    /* device buffers staged through host memory (api/api_stage.c): copied
     * back when the request is retired to the user (hcomm_wait/test) */
    void *stage;
    /* a send on that path streamed (hc_gdr_choose: HC_GDR_PATH_STREAMED): buf is host
     * staging, filled from this device buffer (memory mem) frame by frame just before
     * each DATA frame goes; stage_done bytes are in */
    const void *stage_src;
    size_t stage_done;
    /* statistics (core/stats.h): the operation's kind (HC_STATS_NONE:
     * internal), its bytes and its begin time stamp (0: not timed) */
    uint8_t stat_kind;
    size_t stat_bytes;
    uint64_t stat_t0;
    /* its failure's words, kept at completion (malloc'd; NULL: none): the
     * thread's last error may have moved on to another failure by the time
     * the caller reads this request's status */
    char *error;
};

hcomm_status_t hc_request_pool_init(void);
void hc_request_pool_fini(void);
struct hcomm_request *hc_request_alloc(hc_req_kind_t kind);
void hc_request_free(struct hcomm_request *req);
/* Drops every reference the library holds to req: its queue, a fragment
 * lane receiving into it, frames of it waiting to be sent. */
void hc_request_detach(struct hcomm_request *req);
/* put_done brought a freed request's in-flight count to 0: recycle it. */
void hc_request_drained(struct hcomm_request *req);
/* Progresses until a failed send's in-flight puts are out (a driver no
 * longer reads its buffer) or the deadline passes. */
void hc_request_drain(struct hcomm_request *req, uint64_t *deadline_p);
/* Request named by a rendezvous id (index | gen << 32), or NULL if stale. */
struct hcomm_request *hc_request_by_id(uint64_t id);
static inline uint64_t hc_request_id(const struct hcomm_request *req)
{
    return (uint64_t)req->index | ((uint64_t)req->gen << 32);
}
void hc_request_keep_error(struct hcomm_request *req);
static inline void hc_request_complete(struct hcomm_request *req, hcomm_status_t status)
{
    req->status = status;
    req->done = true;
    if (HC_UNLIKELY(status < 0))
        hc_request_keep_error(req);
}
/* A completed request's status, its own failure's words made the thread's
 * last error again (hcomm_last_error() describes this status). */
static inline hcomm_status_t hc_request_result(const struct hcomm_request *req)
{
    if (HC_UNLIKELY(req->status < 0 && req->error))
        hc_error(req->status, "%s", req->error);
    return req->status;
}
/* User handles (hcomm_request_t) are not pointers but (generation << 32) |
 * (index << 1) | 1: a handle kept after its request completed names a slot
 * whose generation has moved on and is refused, instead of reaching the
 * request that reuses the slot. Generations also keep rising across
 * hcomm_finalize/hcomm_init, so a handle of an earlier init matches nothing.
 * (The low bit set: no pointer to a request or to the caller's memory
 * passes for a handle.) */
_Static_assert(sizeof(uintptr_t) == 8, "request handles carry a 32-bit generation");
static inline hcomm_request_t hc_request_handle(const struct hcomm_request *req)
{
    return (hcomm_request_t)(uintptr_t)(((uint64_t)req->gen << 32) |
                                        ((uint64_t)req->index << 1) | 1u);
}
/* The live request handed to the user that handle names, or NULL (NULL,
 * not a handle, completed, stale, of an earlier init, not the user's). */
struct hcomm_request *hc_request_from_handle(hcomm_request_t handle);
/* Why hc_request_from_handle refused handle, in words, for a message. */
void hc_request_handle_explain(hcomm_request_t handle, char *buf, size_t len);
/* The operation req carries for the statistics begins (t0 from
 * hc_stats_begin) / completed for its caller. */
static inline void hc_request_stat(struct hcomm_request *req, unsigned kind, size_t bytes,
                                   uint64_t t0)
{
    req->stat_kind = (uint8_t)kind;
    req->stat_bytes = bytes;
    req->stat_t0 = t0;
}
static inline void hc_request_stat_end(struct hcomm_request *req)
{
    if (HC_UNLIKELY(req->stat_t0 != 0)) {
        hc_stats_end(req->stat_kind, req->stat_bytes, req->comm, req->stat_t0);
        req->stat_t0 = 0;
    }
}

/* ---- hang reports (core/hang.c) ------------------------------------------
 * What a wait is waiting for, in words, built by the layer that owns each
 * piece (p2p requests here, collectives in coll/ through hc_coll_ops). */
#define HC_EXPLAIN_WAITS 16
typedef struct {
    char *buf;
    size_t len, n;
    int waits[HC_EXPLAIN_WAITS]; /* world ranks waited for, in order of mention */
    int nwaits;
    const char *note; /* after "has waited N s" (NULL: none) */
} hc_explain_t;
void hc_explain_add(hc_explain_t *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Notes that the wait needs world rank w (listed once). */
void hc_explain_wait(hc_explain_t *e, int wrank);
/* What req (a p2p send or receive) waits for: "a message from rank 3 with
 * tag 7 (none has arrived)", ... (p2p_explain.c); comm ranks of req->comm. */
void hc_p2p_explain(const struct hcomm_request *req, hc_explain_t *e);
/* The wait in progress (hc_ctx.waiting), or req/op given: the whole story,
 * then one line per rank waited for (last heard, process state). */
void hc_wait_explain(struct hcomm_request *req, const struct hc_coll_op *op, const char *what,
                     uint64_t waited_ns, hc_explain_t *e);
/* From the slow poll: when each peer was last heard from, and hcommrun's
 * report requests on HCOMM_CONTROL_FD. */
void hc_hang_poll(uint64_t now);
/* A wait started at start_ns is now at now: warns (HCOMM_WARN_AFTER) when
 * *next_p is due and moves it on. */
void hc_hang_check(struct hcomm_request *req, const struct hc_coll_op *op, const char *what,
                   uint64_t start_ns, uint64_t now, uint64_t *next_p);

/* ---- peers --------------------------------------------------------------- */
typedef struct hc_pending_frame {
    hc_list_t link;
    hc_frame_hdr_t hdr;
    const void *payload;
    struct hcomm_request *req; /* DATA frames: the send request streaming */
    size_t stream_off;         /* DATA: next offset to send */
    size_t stream_end;
    uint8_t inline_payload[HC_FRAME_CTRL_MAX]; /* control payloads (RTS, CTS) are copied here */
} hc_pending_frame_t;

/* A multi-fragment EAGER message arriving from a peer on one lane: its
 * receive or its unexpected-queue entry (one of the two, or neither:
 * discarded). Fragments of messages of different lanes may interleave on
 * a connection (docs/lanes.md), so each lane has its own. */
typedef struct {
    struct hcomm_request *req;
    void *unexp;
    size_t off, len;
    bool active;
} hc_p2p_partial_t;

typedef struct hc_peer {
    hc_conn_t *conn;
    int node;          /* node index */
    pid_t pid;
    int pidfd;         /* local peers: becomes readable when the process exits */
    bool failed;
    hcomm_status_t fail_status;
    char fail_why[160];
    /* Who is to blame: the rank whose failure this one follows (itself when
     * it died), as judged by the bootstrap's rank 0 once `judged`. */
    int cause;
    bool judged;
    bool verdict_pending; /* judged before this rank saw it: fail at next slow poll */
    uint64_t fail_ns;
    hc_list_t pending; /* frames waiting for credit, in order; one waits only behind its lane's */
    uint32_t lane_pending[HC_FRAME_LANES]; /* frames of each lane in pending */
    uint32_t lane_mask;                    /* bit l: lane_pending[l] != 0 */
    /* Fragmented messages arriving from this peer, one per lane
     * (HC_FRAME_LANES entries, allocated at the first one; NULL before). */
    hc_p2p_partial_t *partial;
    /* frames delivered from this peer, and when the slow poll last saw
     * that count move (hang reports: "last heard") */
    uint64_t rx_frames, rx_seen, heard_ns;
} hc_peer_t;

/* ---- communicators ------------------------------------------------------- */
#define HC_COMM_MAGIC 0x68636f6du
#define HC_COMM_FREED 0x64656164u

struct hcomm_comm {
    uint32_t magic;
    uint32_t ctx_id;     /* p2p context; collectives use ctx_id | HC_CTX_COLL */
    int rank, size;
    int *world_ranks;    /* comm rank -> world rank */
    int *comm_rank_of;   /* world rank -> comm rank, -1 if absent */
    bool is_world;
    int aborted;          /* set from any thread by hcomm_comm_abort (atomic): 1 aborted,
                             2 revoked (hcomm_comm_revoke here or by revoked_by) */
    int revoked_by;       /* comm rank that revoked it first (this one's: its own) */
    hc_list_t posted;    /* posted receives, in posting order */
    hc_list_t unexpected;
    hc_list_t link;      /* in hc_ctx.comms */
    uint64_t coll_seq;   /* collectives issued on this comm */
    uint64_t coll_chain; /* the signatures of all of them, chained (hc_coll_number) */
    hc_list_t coll_queue; /* active collective ops, in issue order */
    void *coll_priv;     /* coll/'s per-comm state (node regions, ...) */
    uint32_t split_seq;  /* splits done from this comm (for child ctx ids) */
    struct hc_stats_comm *stats; /* level-2 statistics of this comm, NULL until used */
};

#define HC_CTX_COLL 0x80000000u
/* Internal communicators of coll/ (hierarchical algorithms): context ids
 * derived from their parent's, above every id hcomm_comm_split hands out. */
#define HC_CTX_SUB 0x40000000u
/* Tags on a collective context: the collective's sequence number in the low
 * 16 bits, a signature in the 15 above (coll/coll.c's hc_coll_number: the
 * kind, and a hash of the arguments chained over every earlier collective
 * of the communicator, so that a disagreement stays visible to every later
 * one). A message from the peer a collective receive waits for proves the
 * ranks disagree when it is of the same collective with another signature,
 * or of a later collective: one context's frames arrive in the order they
 * were sent, so that peer went past without sending what this rank waits
 * for. The receive then fails at once (ERR_INVALID) instead of taking the
 * wrong data or waiting for the timeout. */
#define HC_COLL_TAG_SEQ_MASK 0xffff
static inline bool hc_coll_tag_conflict(uint32_t ctx_id, int32_t mine, int32_t theirs)
{
    if (!(ctx_id & HC_CTX_COLL) || mine == theirs)
        return false;
    return (int16_t)(uint16_t)((uint32_t)theirs - (uint32_t)mine) >= 0;
}

/* hcomm_comm_abort may set the flag from another thread. */
static inline bool hc_comm_aborted(const struct hcomm_comm *comm)
{
    return __atomic_load_n(&comm->aborted, __ATOMIC_ACQUIRE) != 0;
}

bool hc_comm_valid(const struct hcomm_comm *comm);
/* hcomm_comm_rank/size, callable from any thread (hcomm.h): comm checked as
 * hc_check_comm does and its rank and size read under the list's lock, so a
 * communicator freed meanwhile by the thread inside hcomm is refused, never
 * read. rank_p, size_p may be NULL. */
hcomm_status_t hc_comm_shape(const char *fn, struct hcomm_comm *comm, int *rank_p, int *size_p);
hcomm_status_t hc_comm_create(uint32_t ctx_id, int size, const int *world_ranks,
                              struct hcomm_comm **comm_p);
void hc_comm_destroy(struct hcomm_comm *comm);
struct hcomm_comm *hc_comm_by_ctx(uint32_t ctx_id);

/* ---- the context ---------------------------------------------------------- */
/* The wait in progress: its request (NULL for an inline collective: op),
 * what the caller called (NULL: none), since when (0: not yet stamped). */
typedef struct {
    struct hcomm_request *req;
    const struct hc_coll_op *op;
    const char *what;
    uint64_t since_ns;
} hc_wait_state_t;

typedef struct hc_ctx {
    bool initialized;
    int rank, size;
    int local_rank, local_size;
    int node, node_count;
    int *node_of_rank;
    int *local_ranks;   /* world ranks of my node */
    hc_topo_map_t *topo; /* every rank's node, NUMA node and switch (the same on every rank) */
    hc_topo_mode_t topo_mode; /* HCOMM_TOPO */
    char node_id[160];
    char bootstrap_host[256]; /* host of a tcp:// rendezvous, "" otherwise */
    hc_bootstrap_params_t bs_params;
    hc_bootstrap_t *bs;
    hc_drv_env_t env;
    hc_drv_t *drvs[HC_DRV_MAX];
    int ndrvs;
    hc_drv_t *poll[HC_DRV_MAX]; /* the open drivers that have progress work */
    int npoll;
    hc_drv_t *flush[HC_DRV_MAX]; /* the open drivers that batch their puts (ops->flush) */
    int nflush;
    bool in_progress;            /* inside hc_progress: its end flushes the batches */
    bool tearing_down;           /* the communicators are gone: frames a driver still
                                    delivers (while it drains) are dropped */
    hc_peer_t *peers;
    struct hcomm_comm *world;
    hc_list_t comms;
    hc_list_t rndv_active; /* rendezvous in flight: sends waiting for CTS/FIN, receives for DATA */
    hc_list_t orphans;    /* frames for communicators not created here yet */
    int npending;         /* frames queued in peers' pending lists */
    uint64_t slow_next_ns;
    int group_depth;
    int nfailed;          /* peers declared failed */
    int nverdicts_pending; /* peers judged failed by rank 0, not yet failed here */
    uint32_t next_ctx_id; /* lowest communicator context id never used here */
    int control_fd;       /* HCOMM_CONTROL_FD: hcommrun asks for hang reports here, -1 */
    bool lanes;           /* HCOMM_LANES=auto: frames get their context's lane (docs/lanes.md) */
    hc_wait_state_t waiting; /* the wait in progress (hang reports) */
    struct hc_p2p_blk *blk;  /* the request-free blocking receive polling now (p2p_recv.c) */
} hc_ctx_t;

extern hc_ctx_t hc_ctx;

/* The runtime's lifecycle (context.c), called by the API layer. */
/* given: the job as the caller describes it (hcomm_init_rank), validated;
 * NULL: from the environment. */
hcomm_status_t hc_ctx_init(const hc_bootstrap_params_t *given);
void hc_ctx_finalize(void);

/* ---- progress (progress.c) ------------------------------------------------ */
/* What the runtime calls in the collectives layer above it: one table that
 * coll/ registers at init (hc_core_register_coll) and clears at finalize;
 * every entry is NULL until then. The runtime never includes coll/. */
typedef struct {
    /* Advances the collectives in flight; returns how many events. */
    int (*progress)(void);
    /* A collective request timed out: drop its state. */
    void (*cancel)(struct hcomm_request *req);
    /* Fail the collectives queued on comm; with release, also free coll/'s
     * state for it (the communicator is being destroyed). */
    void (*comm_free)(struct hcomm_comm *comm, hcomm_status_t status, bool release);
    /* Comm rank `from` gave up on comm (HC_FRAME_GIVE_UP). */
    void (*gave_up)(struct hcomm_comm *comm, int from, hcomm_status_t status, int cause);
    /* Hang reports: what the collective of req (or the inline op) waits
     * for: the call, its algorithm and step, the ranks and what from them. */
    void (*explain)(struct hcomm_request *req, const struct hc_coll_op *op, hc_explain_t *e);
    /* A receive of a collective met a message of the same collective slot
     * with another signature: the error text naming both calls. */
    void (*conflict)(uint32_t ctx_id, int32_t mine, int32_t theirs, int peer, char *buf,
                     size_t len);
    /* A message of a collective context that no posted receive took, from
     * comm rank `from`, before it is queued as unexpected: coll/ checks
     * that it is not of a collective this rank has completed or of the
     * running one with another signature (records, never sends: this runs
     * inside a driver's progress). */
    void (*stray)(struct hcomm_comm *comm, int from, int32_t tag);
    /* HC_FRAME_COLL_PROBE from comm rank `from`, whose collective `tag`
     * waits for this rank: coll/ compares it with its own (records only). */
    void (*probe)(struct hcomm_comm *comm, int from, int32_t tag);
    /* HC_FRAME_SHRINK from comm rank `from` (records only). */
    void (*shrink)(struct hcomm_comm *comm, int from, const hc_frame_hdr_t *hdr,
                   const void *payload);
    /* Hang reports: what this rank last saw of world rank w in the node's
     * shared regions (traffic no frame counts), in words; false: nothing. */
    bool (*node_heard)(int w, char *buf, size_t len);
} hc_coll_ops_t;

extern hc_coll_ops_t hc_coll_ops;
/* ops NULL: clears the table. */
void hc_core_register_coll(const hc_coll_ops_t *ops);
/* Tells every other member of comm that this rank gave up on it (status;
 * cause: the world rank whose failure made it give up, or -1). */
void hc_p2p_give_up(struct hcomm_comm *comm, hcomm_status_t status, int cause);
/* Tells every other member that this rank revoked comm (HC_FRAME_REVOKE). */
void hc_p2p_revoke(struct hcomm_comm *comm);
/* A frame of hcomm_comm_shrink's agreement (HC_FRAME_SHRINK) to comm rank
 * `peer`: tag, a, b and up to HC_FRAME_CTRL_MAX bytes of payload. */
void hc_p2p_shrink_frame(struct hcomm_comm *comm, int peer, int32_t tag, uint64_t a, uint64_t b,
                         const void *payload, uint32_t len);
/* Asks comm rank `peer` whether it agrees with this rank's collective of
 * `tag` (HC_FRAME_COLL_PROBE), which waits for it. */
void hc_p2p_coll_probe(struct hcomm_comm *comm, int peer, int32_t tag);
/* hcomm_comm_abort's body: validates comm against the live list under a
 * lock (any thread), then raises the flag. */
hcomm_status_t hc_comm_abort(struct hcomm_comm *comm);
/* hcomm_comm_revoke's body (the caller's thread): the flag as abort's, and
 * every other member is told (HC_FRAME_REVOKE). */
hcomm_status_t hc_comm_revoke(struct hcomm_comm *comm);
/* A member (comm rank `by`) revoked comm: recorded, acted on as an abort
 * by the thread that notices (hc_comm_handle_abort). */
void hc_comm_revoked(struct hcomm_comm *comm, int by);
/* The error of an operation on an aborted or revoked comm. */
hcomm_status_t hc_comm_abort_error(const struct hcomm_comm *comm, const char *fn);
/* The thread that notices comm->aborted fails the comm's pending work. */
void hc_comm_handle_abort(struct hcomm_comm *comm);
/* One pass over every driver plus queued frames; returns events seen. */
int hc_progress(void);
/* Liveness and deadline work done every ~ms by waits. */
void hc_progress_slow(void);
/* Waits for req->done under the HCOMM_TIMEOUT deadline. what names the
 * operation in the timeout message. */
hcomm_status_t hc_request_wait(struct hcomm_request *req, const char *what);
/* The same against a deadline shared by several waits (hcomm_group_end):
 * *deadline_p is hc_time_ns() + HCOMM_TIMEOUT, set by the first wait that
 * reads the clock when it is 0. */
hcomm_status_t hc_request_wait_until(struct hcomm_request *req, const char *what,
                                     uint64_t *deadline_p);
/* Peer failure: fail everything that needs peer. Idempotent. */
void hc_peer_fail(int peer, hcomm_status_t status, const char *why);
/* The status and message for an operation that needs a failed peer. */
hcomm_status_t hc_peer_error(int wpeer, const char *what);
/* The world rank whose failure came first, as far as this rank knows (a
 * failed peer's cause when rank 0 judged it left after another's
 * failure), or -1: what an error caused by a failure names. */
int hc_core_first_failed(void);
/* Rank 0's verdict on a peer (the bootstrap's notice function): recorded,
 * taken as a failure at the next slow poll. */
void hc_peer_verdict(int peer, int cause, hcomm_status_t status, const char *why);

/* ---- p2p (p2p.c, p2p_recv.c, p2p_fail.c) ----------------------------------- */
/* The lane of every frame of context ctx_id (docs/lanes.md): frames of one
 * context share it, so a driver that keeps each lane in order keeps the
 * order matching needs (per context and source); frames of different
 * contexts may take different lanes and overtake each other. User
 * communicators (ids handed out in sequence) take consecutive pairs, point
 * to point then collectives; internal ones (HC_CTX_SUB) are hashed.
 * HCOMM_LANES=0: lane 0 for all. */
static inline uint8_t hc_p2p_lane(uint32_t ctx_id)
{
    if (!hc_ctx.lanes)
        return 0;
    uint32_t base = ctx_id & ~HC_CTX_COLL, coll = ctx_id >> 31;
    if (base & HC_CTX_SUB)
        base = (base * 0x9e3779b1u) >> 24;
    return (uint8_t)((base * 2 + coll) & (HC_FRAME_LANES - 1));
}
/* HCOMM_LANES at init: on or off, or ERR_INVALID naming the variable. */
hcomm_status_t hc_p2p_lanes_init(void);
/* Queues f (its hdr.lane set) at the end of p's pending frames / takes it
 * out (the caller frees it): the only ways frames enter and leave. */
void hc_p2p_pending_add(hc_peer_t *p, hc_pending_frame_t *f);
void hc_p2p_pending_del(hc_peer_t *p, hc_pending_frame_t *f);
/* Forgets req as the receive of a fragmented message (it is going away). */
void hc_p2p_partial_forget(struct hcomm_request *req);
hcomm_status_t hc_p2p_isend(struct hcomm_comm *comm, uint32_t ctx_id, const void *buf, size_t len,
                            int peer, int32_t tag, struct hcomm_request **req_p);
/* Blocking-send fast path: puts an eager message straight away when nothing
 * is queued for the peer; *sent_p false means use hc_p2p_isend. */
hcomm_status_t hc_p2p_send_eager_now(struct hcomm_comm *comm, const void *buf, size_t len,
                                     int peer, int32_t tag, bool *sent_p);
hcomm_status_t hc_p2p_irecv(struct hcomm_comm *comm, uint32_t ctx_id, void *buf, size_t len,
                            int peer, int32_t tag, struct hcomm_request **req_p);
/* The same on a buffer of memory mem (NULL: host; device: GPUDirect RDMA,
 * core/gdr.c chose it: a send above the eager size, a receive from one
 * peer whose driver moves device memory). */
hcomm_status_t hc_p2p_isend_mem(struct hcomm_comm *comm, uint32_t ctx_id, const void *buf,
                                size_t len, int peer, int32_t tag, const hc_mem_attr_t *mem,
                                struct hcomm_request **req_p);
/* A send streamed from device memory src (of memory mem) through host
 * staging buf, filled frame by frame as the stream goes (the path
 * HC_GDR_PATH_STREAMED chose: above the eager size, a connection that can
 * neither get nor write). */
hcomm_status_t hc_p2p_isend_streamed(struct hcomm_comm *comm, uint32_t ctx_id, void *buf,
                                     const void *src, const hc_mem_attr_t *mem, size_t len,
                                     int peer, int32_t tag, struct hcomm_request **req_p);
/* Blocking-receive fast path (host memory, one source, user context): when
 * nothing is queued unexpected on comm, polls the drivers a few times with
 * no request; a single-frame eager message of exactly len bytes that would
 * have met a receive posted now lands in buf. false: nothing was received
 * (whatever arrived, that message included, is where hc_p2p_irecv finds
 * it): use hc_p2p_irecv. */
bool hc_p2p_recv_now(struct hcomm_comm *comm, void *buf, size_t len, int peer, int32_t tag);
hcomm_status_t hc_p2p_irecv_mem(struct hcomm_comm *comm, uint32_t ctx_id, void *buf, size_t len,
                                int peer, int32_t tag, const hc_mem_attr_t *mem,
                                struct hcomm_request **req_p);
void hc_p2p_deliver(void *core, hc_conn_t *conn, const hc_frame_hdr_t *hdr, const void *payload);
void hc_p2p_put_done(void *core, hc_conn_t *conn, void *cookie, hcomm_status_t status);
/* ---- what the layers above (coll/, the API) may ask of the runtime -------
 * They go through these, never through hc_ctx's tables: which connection
 * reaches a rank, whether it failed, the node driver, the node map. */
static inline hc_conn_t *hc_core_conn(int wrank)
{
    return hc_ctx.peers[wrank].conn;
}
static inline bool hc_core_peer_failed(int wrank)
{
    return hc_ctx.peers[wrank].failed;
}
static inline bool hc_core_any_failed(void)
{
    return hc_ctx.nfailed != 0;
}
static inline bool hc_core_on_my_node(int wrank)
{
    return hc_ctx.node_of_rank[wrank] == hc_ctx.node;
}
/* The open driver of node scope (shared memory between the node's ranks),
 * or NULL. */
hc_drv_t *hc_core_node_driver(void);

/* Key and descriptor of [buf, buf+len) for drv (core/memkey.c). held_p:
 * where a registration-cache record taken for it goes (release it with
 * hc_mem_reg_cache_put when done); NULL: pool or region memory only, no
 * cache. Memory the driver needs no key for gives key 0 and a descriptor
 * with fd -1 unless it lies in a region. */
struct hc_mem_desc;
hcomm_status_t hc_mem_key_local(hc_drv_t *drv, void *buf, size_t len, uint64_t *key_p,
                                hc_mem_desc_t *desc, struct hc_mem_region **held_p);
/* The same for memory of type mem (NULL or HOST: hc_mem_key_local). Device
 * memory: only a driver that moves it (hc_drv_moves) and needs keys gets
 * one, through the registration cache by dmabuf; any other is refused,
 * naming the driver. */
hcomm_status_t hc_mem_key_typed(hc_drv_t *drv, void *buf, size_t len, const hc_mem_attr_t *mem,
                                uint64_t *key_p, hc_mem_desc_t *desc,
                                struct hc_mem_region **held_p);
/* GPUDirect RDMA (core/gdr.c): HCOMM_GDR at init; the path of a p2p
 * call's device buffer (attr: what the API found) to or from peer (a comm
 * rank, or HCOMM_ANY_SOURCE): *direct_p true when the driver of the peer's
 * connection moves device memory, the call is above the eager size (a
 * send) and the buffer registers by dmabuf; false: stage it. Under
 * HCOMM_GDR=1 a call that cannot go direct fails here, naming the driver
 * and why. hc_gdr_describe: the line of hcomm_info and HCOMM_LOG=info. */
typedef enum { HC_GDR_OFF, HC_GDR_AUTO, HC_GDR_ON } hc_gdr_mode_t;
extern hc_gdr_mode_t hc_gdr_mode;
extern hc_gdr_mode_t hc_ipc_mode; /* HCOMM_GPU_IPC: the node driver's direct path (IPC) */
hcomm_status_t hc_gdr_init(void);
void hc_gdr_fini(void);
const char *hc_gdr_mode_name(void);
/* The path hc_gdr_choose gives a device buffer: staged whole by the API;
 * direct (the request carries it: RMA, or the GPU dispatch for frames);
 * streamed (auto, a peer whose rendezvous streams: a receive takes each
 * frame into the device buffer as it arrives; a send above the eager size
 * gets host staging that the stream fills frame by frame, req->stage_src). */
typedef enum { HC_GDR_PATH_STAGED, HC_GDR_PATH_DIRECT, HC_GDR_PATH_STREAMED } hc_gdr_path_t;
hcomm_status_t hc_gdr_choose(const char *fn, bool recv, struct hcomm_comm *comm, int peer,
                             void *buf, size_t len, const hc_mem_attr_t *attr,
                             hc_gdr_path_t *path_p);
void hc_gdr_describe(char *buf, size_t len);
/* Rendezvous (core/rndv.c): HCOMM_RNDV at init; the drivers' rma_done. */
hcomm_status_t hc_rndv_init(void);
/* Whether a len-byte message on conn goes by rendezvous (else in frames
 * whose payload the driver reads: one up to max_frame, fragments up to
 * eager_max). */
static inline bool hc_p2p_goes_rndv(const hc_conn_t *conn, size_t len)
{
    return len > conn->max_frame && len > conn->eager_max;
}
/* Whether the rendezvous from conn's peer to this rank streams DATA frames
 * (the receiver can neither get nor ask for a write: tcp, dpdk, or
 * HCOMM_RNDV=stream). */
bool hc_rndv_streams(const hc_conn_t *conn);
void hc_rndv_rma_done(void *core, hc_conn_t *conn, void *cookie, hcomm_status_t status);
/* Retries frames queued for credit; returns how many went out. */
int hc_p2p_flush_pending(void);
/* Fails every request of comm (abort) or of peer (failure). */
void hc_p2p_fail_comm(struct hcomm_comm *comm, hcomm_status_t status);
void hc_p2p_fail_peer(int wpeer, hcomm_status_t status);
void hc_p2p_comm_cleanup(struct hcomm_comm *comm);
void hc_p2p_adopt_orphans(struct hcomm_comm *comm);
void hc_p2p_orphans_cleanup(void);

/* Element sizes and names: base/dtype.h. */

/* ---- argument checks shared by the API --------------------------------------- */
/* Each check is an inline test of the good case (a few instructions, no
 * call: they run on every call of the small-message path) and, when it
 * fails, the out-of-line function that finds which rule broke and says so
 * (the instruction budget, docs/bench.md: the checks cost a round trip
 * ~190 instructions as calls, mostly saving and restoring registers). */
hcomm_status_t hc_check_init(const char *fn);
hcomm_status_t hc_check_comm_slow(const char *fn, struct hcomm_comm *comm);
hcomm_status_t hc_check_buf_slow(const char *fn, const char *name, const void *buf, size_t count,
                                 hcomm_dtype_t dtype, size_t mult, size_t *bytes_p);
hcomm_status_t hc_check_dtype(const char *fn, hcomm_dtype_t dtype);

/* hcomm is initialized and comm is a live communicator, not aborted. */
static HC_ALWAYS_INLINE hcomm_status_t hc_check_comm(const char *fn, struct hcomm_comm *comm)
{
    if (HC_LIKELY(hc_ctx.initialized && (comm == hc_ctx.world || hc_comm_valid(comm)) &&
                  !hc_comm_aborted(comm)))
        return HCOMM_OK;
    return hc_check_comm_slow(fn, comm);
}

/* count elements of dtype (times mult) at buf: a known dtype, a byte size
 * that neither overflows nor wraps the address space, buf not NULL unless
 * empty; *bytes_p the size. */
static HC_ALWAYS_INLINE hcomm_status_t hc_check_buf(const char *fn, const char *name,
                                                    const void *buf, size_t count,
                                                    hcomm_dtype_t dtype, size_t mult,
                                                    size_t *bytes_p)
{
    size_t bytes;
    if (HC_LIKELY((unsigned)dtype < HCOMM_DTYPE_COUNT &&
                  !__builtin_mul_overflow(count, hc_dtype_sizes[dtype], &bytes) &&
                  (mult == 1 || !__builtin_mul_overflow(bytes, mult, &bytes)) &&
                  bytes <= (size_t)PTRDIFF_MAX && (buf || !bytes) &&
                  (uintptr_t)buf <= UINTPTR_MAX - bytes)) {
        *bytes_p = bytes;
        return HCOMM_OK;
    }
    return hc_check_buf_slow(fn, name, buf, count, dtype, mult, bytes_p);
}

#endif /* HC_CORE_H */
