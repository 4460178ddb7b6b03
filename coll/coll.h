/*
 * coll/: collective operations, written against the core (requests, p2p,
 * progress) and the drivers' node-shared memory, never against a particular
 * transport.
 *
 * Every collective is an hc_coll_op_t: a resumable state machine (step()
 * returns an hc_step_t: pending, done, or failed with a status) queued on its
 * communicator. Only the head of a communicator's queue runs, so collectives
 * on one communicator execute in issue order on every rank; queues of
 * different communicators advance independently, from any wait.
 *
 * Algorithm families:
 *   node (node_*.c, node.h): all ranks of the communicator share a node and a
 *     node-shared region: small messages through cache-line flagged slots,
 *     large ones pipelined through double-buffered staging blocks, each rank
 *     reducing its slice straight out of shared memory.
 *   net (coll_net.c's table, net_*.c by family): point-to-point algorithms that
 *     run over any driver:
 *     recursive doubling, ring (reduce-scatter + allgather), binomial trees,
 *     pairwise exchange, dissemination barrier.
 * hc_coll_select() picks one per call from the size, the rank count and the
 * placement (HCOMM_ALGO forces one; HCOMM_LOG=info prints the choice once
 * per collective and size class).
 */
#ifndef HC_COLL_H
#define HC_COLL_H

#include "base/reduce.h"
#include "core/hc_core.h"

typedef enum {
    HC_COLL_ALLREDUCE,
    HC_COLL_BROADCAST,
    HC_COLL_REDUCE,
    HC_COLL_ALLGATHER,
    HC_COLL_REDUCE_SCATTER,
    HC_COLL_ALLTOALL,
    HC_COLL_BARRIER,
    HC_COLL_GATHER,
    HC_COLL_SCATTER,
    HC_COLL_ALLGATHERV,
    HC_COLL_REDUCE_SCATTERV,
    HC_COLL_ALLTOALLV,
    HC_COLL_KIND_COUNT
} hc_coll_kind_t;
/* hc_coll_sig keeps the kind in its low bits, the tag 15 bits of the sig. */
#define HC_COLL_SIG_KIND_BITS 4
#define HC_COLL_SIG_KIND_MASK ((1u << HC_COLL_SIG_KIND_BITS) - 1)
_Static_assert(HC_COLL_KIND_COUNT <= (1 << HC_COLL_SIG_KIND_BITS), "the kind fits the signature");

/* The per-rank element counts and displacements of a vector collective,
 * as the caller gave them (NULL where the kind has none). */
typedef struct {
    const size_t *scounts, *sdispls, *rcounts, *rdispls;
} hc_coll_vec_t;

/* What a step says: pending, done, or failed with a status. A type of its
 * own (a struct), so that a status returned where a step result is due, or
 * the reverse, does not compile: HCOMM_IN_PROGRESS is 1, as "done" once was,
 * and a driver get that answers IN_PROGRESS must never finish a collective. */
typedef struct {
    hcomm_status_t st; /* != OK: failed */
    bool done;
} hc_step_t;

#define HC_STEP_PENDING ((hc_step_t){HCOMM_OK, false})
#define HC_STEP_DONE ((hc_step_t){HCOMM_OK, true})
static inline hc_step_t hc_step_fail(hcomm_status_t st)
{
    return (hc_step_t){st == HCOMM_OK ? HCOMM_ERR_INTERNAL : st, true};
}
/* Done and OK: the caller's step goes on. */
static inline bool hc_step_ok(hc_step_t s)
{
    return s.done && s.st == HCOMM_OK;
}
/* A helper's status as a step result: OK goes on (pending is not meant). */
#define HC_STEP_TRY(expr)                                                                          \
    do {                                                                                           \
        hcomm_status_t st_ = (expr);                                                               \
        if (HC_UNLIKELY(st_ != HCOMM_OK))                                                          \
            return hc_step_fail(st_);                                                              \
    } while (0)

#define HC_COLL_MAX_REQS 64

typedef struct hc_coll_op hc_coll_op_t;
typedef hc_step_t (*hc_coll_step_fn)(hc_coll_op_t *op);

struct hc_coll_op {
    hc_list_t link; /* comm->coll_queue */
    struct hcomm_request *req;
    struct hcomm_comm *comm;
    hc_coll_kind_t kind;
    const void *sbuf;
    void *rbuf;
    size_t count; /* elements: per rank block for allgather/reduce_scatter/alltoall */
    hcomm_dtype_t dtype;
    hcomm_op_t op;
    int root;
    size_t esize;
    size_t bytes; /* count * esize */
    /* What sbuf and rbuf are (HC_MEM_*: gpu/gpu.h): device memory reaches
     * an op only where hc_coll_node_takes_device said so (api/api_stage.c);
     * everywhere else the API stages it and these are HC_MEM_HOST. */
    uint8_t smem, rmem;
    uint64_t seq; /* position in the communicator's collective order */
    uint32_t sig; /* hc_coll_sig(): what every rank must agree on, folded */
    hc_coll_step_fn step;
    hc_coll_step_fn fallback; /* node single-copy: the staged algorithm to run instead */
    const char *algo;
    const struct hc_coll_algo *entry; /* the registry entry chosen (NULL: local copy) */
    bool started;
    /* Waiting on point-to-point messages of peers that share a node region:
     * progress passes counted, and a peer seen ahead (in a later
     * collective) at the last check, + 1 (hc_coll_check_ahead). */
    uint32_t polls;
    int ahead_suspect;
    uint64_t probe_at; /* when to ask the peers it waits for (ns; 0: not waiting yet) */
    /* A failure the step found without returning it (node algorithms: the
     * ranks disagree on the collective): the engine ends the op with it. */
    int error;
    hcomm_status_t end_status; /* how it ended (hc_coll_finish), for the release hook */
    /* Failed, waiting for its in-flight sends to leave the driver. */
    bool draining;
    hcomm_status_t drain_status;
    /* algorithm state */
    int state;
    int phase, round, nrounds;
    uint64_t tick, tick_end;
    size_t off, chunk;
    void *tmp;
    size_t tmp_bytes;
    struct hcomm_request *reqs[HC_COLL_MAX_REQS];
    int nreqs;
    int vrank, pof2, rem;
    /* Called when the op ends, before its request completes (group fusion). */
    void (*on_done)(hc_coll_op_t *op, hcomm_status_t status);
    void *done_arg;
    /* A child collective (hc_coll_child_start): the op it is part of. */
    const struct hc_coll_op *parent;
    /* Vector collectives: counts and displacements per rank, copied at the
     * call (varr owns them, freed with the op), so the caller may reuse its
     * arrays once a non-blocking call returns. */
    hc_coll_vec_t vec;
    size_t *varr;
};

/* Per-communicator state of coll/ (comm->coll_priv). */
typedef struct hc_coll_comm {
    struct hcomm_comm *comm;
    bool broken;      /* a collective failed midway: the communicator is unusable */
    hcomm_status_t broken_status; /* how: TIMEOUT, ABORTED, PEER_FAILED, ... */
    char broken_why[512]; /* the whole last error (as long as hcomm_last_error may be) */
    int gave_up_rank;              /* >= 0: that member gave up on the comm (HC_FRAME_GIVE_UP) */
    hcomm_status_t gave_up_status;
    int gave_up_cause; /* the world rank whose failure made it give up, or -1 */
    /* >= 0: a message from that member proved the ranks disagree on a
     * collective (hc_coll_stray); the running or next collective fails with
     * mismatch_why and the communicator breaks (the others are told). */
    int mismatch_rank;
    char mismatch_why[400];
    /* The signatures of the last collectives here, by seq % 8: a probe
     * (HC_FRAME_COLL_PROBE) about one this rank completed is compared. */
    struct {
        uint64_t seq;
        uint32_t sig;
    } sig_hist[8];
    bool node_checked;
    struct hc_coll_node *node; /* NULL: no node-shared region for this comm */
    hc_list_t active_link;     /* in the list of comms with queued collectives */
    bool active;
    /* The ring order (coll_topo.c): ring[p] = the comm rank at position p. */
    int *ring;
    int ring_pos; /* this rank's position */
    /* Hierarchical algorithms (net_hier*.c): the internal communicators of
     * this rank's node and of its rail (the ranks of its local index on
     * every node, in ring order); hier_ok false: not regular, or not
     * spanning nodes. */
    bool hier_checked, hier_ok;
    int hier_L, hier_N, hier_i; /* ranks per node, nodes, this rank's local index */
    struct hcomm_comm *hier_node, *hier_rail;
    uint64_t hier_decided, hier_yes; /* the model's choice per size class (net_hier_model.c) */
    void *hier_buf; /* hier's slices (pool memory), kept between calls */
    size_t hier_buf_bytes;
    struct hc_coll_shrink *shrink; /* hcomm_comm_shrink's agreement state (coll_shrink.c) */
} hc_coll_comm_t;

hc_coll_comm_t *hc_coll_comm(struct hcomm_comm *comm);
/* "hcomm_allreduce", ...: the public function of a kind, for messages. */
const char *hc_coll_name(hc_coll_kind_t kind);
/* The collectives with a root: reduce, broadcast, gather, scatter. */
static inline bool hc_coll_rooted(hc_coll_kind_t kind)
{
    return kind == HC_COLL_REDUCE || kind == HC_COLL_BROADCAST || kind == HC_COLL_GATHER ||
           kind == HC_COLL_SCATTER;
}
/* The error for an op on cc after a member gave up on it (HC_FRAME_GIVE_UP). */
hcomm_status_t hc_coll_gave_up_error(const hc_coll_comm_t *cc, const char *what);
/* The world rank whose failure is known here, from this rank's own
 * detection or from a give-up that named it (a give-up reaches a rank
 * before its own detection does): what a failure passed on without a
 * cause names. -1 when none. */
extern int hc_coll_heard_cause;
static inline int hc_coll_known_cause(void)
{
    int c = hc_core_first_failed();
    return c >= 0 ? c : hc_coll_heard_cause;
}
/* Can a new collective start on comm? OK, or the error that it may not
 * (broken earlier, a failed member, a member gave up, a disagreement seen
 * since the last one: that one breaks the communicator now). */
hcomm_status_t hc_coll_comm_usable(struct hcomm_comm *comm, hc_coll_comm_t *cc, const char *fn);

void hc_coll_op_init(hc_coll_op_t *op);
/* Marks comm unusable for collectives, with the status and reason that
 * later calls report (the first one is kept). */
void hc_coll_break(struct hcomm_comm *comm, hcomm_status_t status, const char *why);
/* Runs a blocking op to completion outside the queues (small node ops). */
hcomm_status_t hc_coll_run_inline(hc_coll_op_t *op, const char *fn);
/* Largest allreduce/reduce that travels inside the node flag line. */
#define HC_COLL_NODE_INLINE 24

/* The signature of op's arguments (kind, count, dtype, op, root) that the
 * ranks compare: node algorithms beside their flags, p2p ones in the tag. */
uint32_t hc_coll_sig(const hc_coll_op_t *op);
/* Assigns op its place in comm's collective order (seq) and its sig. */
void hc_coll_number(hc_coll_op_t *op);

/* Starts op (queued behind earlier collectives of its comm). */
hcomm_status_t hc_coll_start(hc_coll_op_t *op);
int hc_coll_progress(void);

/* ---- node algorithms (node_*.c) ------------------------------------------- */
bool hc_coll_node_usable(struct hcomm_comm *comm);
/* forced: NULL, "node", or a node sub-algorithm ("node-direct",
 * "node-staged") that applies to allreduce. */

void hc_coll_node_free(struct hc_coll_node *node);
/* This rank started collective seq on the node's communicator (any path). */
void hc_coll_node_started(struct hc_coll_node *node, uint64_t seq);
/* Has comm rank j started a collective after seq? */
bool hc_coll_node_ahead(const struct hc_coll_node *node, int j, uint64_t seq);
/* Hang reports (hc_coll_ops.node_heard): the latest collective world rank
 * w started in a node region this rank shares with it. */
bool hc_coll_node_heard(int w, char *buf, size_t len);
/* This rank's communicator broke with status: tell the node's other ranks. */
void hc_coll_node_give_up(struct hc_coll_node *node, hcomm_status_t status, int cause);

/* ---- hcomm_comm_shrink (coll_shrink.c) ---------------------------------------- */
/* The survivors of comm agree on who they are: a new communicator of them. */
hcomm_status_t hc_coll_shrink(struct hcomm_comm *comm, struct hcomm_comm **newcomm_p);
/* HC_FRAME_SHRINK (the runtime's hook: records only). */
void hc_coll_shrink_frame(struct hcomm_comm *comm, int from, const hc_frame_hdr_t *hdr,
                          const void *payload);
/* Answers owed to later coordinators; every progress pass. */
/* Sends the FINAL views owed (progress; inline: an idle pass costs a load). */
extern int hc_sh_owed;
void hc_coll_shrink_progress_owed(void);
static inline void hc_coll_shrink_progress(void)
{
    if (HC_UNLIKELY(hc_sh_owed)) hc_coll_shrink_progress_owed();
}
void hc_coll_shrink_free(struct hc_coll_shrink *s);

/* Lifecycle (coll.c), called by the API layer after and before the runtime's. */
hcomm_status_t hc_coll_init(void);
void hc_coll_fini(void);

/* ---- the algorithm registry (algo.c) -------------------------------------------
 * Every algorithm is one table entry; a new one (a hierarchical allreduce,
 * a topology-aware ring) is a new entry in its family's table. Selection
 * (hc_coll_algo_pick) walks the node table, when every rank shares a node,
 * then the p2p table:
 *   HCOMM_ALGO=auto: the first entry that implements the collective, whose
 *     applies() holds and whose auto_pick() says yes;
 *   HCOMM_ALGO=<name>: the entry of that name (applies() permitting);
 *   HCOMM_ALGO=<family>: as auto, among the entries of that family.
 * A forced value that covers no entry for the collective falls back to
 * auto (coll_api.c warns once per collective). */
#define HC_COLL_BIT(kind) (1u << (kind))

typedef struct hc_coll_algo {
    const char *name;   /* logs, stats and HCOMM_ALGO=<name> */
    const char *family; /* the HCOMM_ALGO words that choose it as auto would, space
                           separated; NULL: any forced value (barrier has one way) */
    uint32_t colls;     /* HC_COLL_BIT() of the collectives it implements */
    /* Preconditions (NULL: none): never chosen otherwise. */
    bool (*applies)(const hc_coll_op_t *op);
    /* The automatic choice (NULL: yes; the table's last entry for a
     * collective should say yes). */
    bool (*auto_pick)(const hc_coll_op_t *op);
    /* Sets op up and returns its step, or NULL when it cannot run after all
     * (NULL: use `step` as it is). forced: HCOMM_ALGO, NULL for auto. */
    hc_coll_step_fn (*prepare)(hc_coll_op_t *op, const char *forced);
    hc_coll_step_fn step;
    /* Bytes of per-op state (scratch) the algorithm needs for op, allocated
     * by hc_coll_state at its first step; NULL: none (node algorithms keep
     * theirs in the node region). */
    size_t (*state_size)(const hc_coll_op_t *op);
    /* Called before the op's state is freed, when it has some (NULL: none):
     * what the state holds beyond memory (child collectives). */
    void (*release)(hc_coll_op_t *op);
} hc_coll_algo_t;

extern const hc_coll_algo_t hc_coll_node_algos[]; /* node_region.c; ends with name NULL */
extern const hc_coll_algo_t hc_coll_net_algos[];  /* coll_net.c; ends with name NULL */

/* The step for op from the tables (op->algo set), or NULL when nothing
 * matches; node: the node table may be used (every rank on one node). */
hc_coll_step_fn hc_coll_algo_pick(hc_coll_op_t *op, const char *forced, bool node);
/* op's state as its table entry sizes it, allocated on first use (op->tmp,
 * freed with the op); NULL with an error when out of memory. */
void *hc_coll_state(hc_coll_op_t *op);
/* HCOMM_ALGO names some entry or family ("auto" included). */
bool hc_coll_algo_known(const char *forced);
/* "auto, node, ring, ..." for error messages. */
void hc_coll_algo_list(char *buf, size_t len);

/* ---- topology (coll_topo.c) ---------------------------------------------------- */

/* comm's ring order from the map (HCOMM_TOPO), computed at first use and
 * kept: order[p] is the comm rank at ring position p, *pos_p this rank's
 * position. NULL when out of memory. */
const int *hc_coll_ring_order(struct hcomm_comm *comm, int *pos_p);
/* The internal communicators for hierarchical algorithms (cc->hier_*),
 * created at first use; false when comm is not made of >= 2 nodes with the
 * same number (>= 2) of its ranks each, or HCOMM_TOPO=off. */
bool hc_coll_hier_ready(struct hcomm_comm *comm);
/* The map's costs changed (the calibration probe, inside hcomm_init, with
 * no collective in flight): every communicator recomputes its ring order
 * and hierarchy at its next collective. */
void hc_coll_topo_recalibrated(void);
/* Frees what coll_topo.c keeps in cc (before cc goes). */
void hc_coll_topo_free(hc_coll_comm_t *cc);

/* ---- the engine's own parts (coll.c, coll_fault.c, coll_explain.c) ------------- */

/* Ends op with status: completes its request and drops it from its queue. */
void hc_coll_finish(hc_coll_op_t *op, hcomm_status_t status);
/* cc has work for the engine's progress pass (queued ops, a recorded
 * disagreement to act on). */
void hc_coll_activate(hc_coll_comm_t *cc);
/* A collective's tag on its communicator's collective context. */
static inline int32_t hc_coll_tag(const hc_coll_op_t *op)
{
    return (int32_t)(((uint32_t)op->seq & HC_COLL_TAG_SEQ_MASK) | (op->sig & 0x7fff) << 16);
}
/* coll_fault.c: a waiting p2p collective asks its peers (COLL_PROBE) and
 * looks for a peer ahead on node flags; a member's failure gives up the
 * derived communicators; the runtime's frame hooks. */
void hc_coll_maybe_probe(hc_coll_op_t *op);
hcomm_status_t hc_coll_check_ahead(hc_coll_op_t *op, hc_coll_comm_t *cc);
void hc_coll_children_give_up(struct hcomm_comm *comm, int dead);
/* Gives up the collectives of communicators that lost a member since the
 * last check (progress; inline: an idle pass costs a compare). */
extern int hc_coll_failures_seen;
void hc_coll_check_failures_new(void);
static inline void hc_coll_check_failures(void)
{
    if (HC_UNLIKELY(hc_ctx.nfailed != hc_coll_failures_seen)) hc_coll_check_failures_new();
}
void hc_coll_stray(struct hcomm_comm *comm, int from, int32_t tag);
void hc_coll_probe(struct hcomm_comm *comm, int from, int32_t tag);
void hc_coll_gave_up(struct hcomm_comm *comm, int from, hcomm_status_t status, int cause);
/* coll_explain.c: the runtime's explain and conflict hooks. */
void hc_coll_explain(struct hcomm_request *req, const struct hc_coll_op *op, hc_explain_t *e);
void hc_coll_conflict(uint32_t ctx_id, int32_t mine, int32_t theirs, int peer, char *buf,
                      size_t len);

/* ---- the post path (coll_post.c, coll_group.c, coll_comm.c) ------------------- */

/* What a collective is asked to do: count in elements (per rank block for
 * allgather, reduce_scatter, alltoall), bytes = count * element size (the
 * vector kinds: the totals), vec: a vector collective's per-rank counts
 * and displacements (NULL otherwise). */
typedef struct {
    hc_coll_kind_t kind;
    const void *sbuf;
    void *rbuf;
    size_t count, bytes;
    hcomm_dtype_t dtype;
    hcomm_op_t op;
    int root;
    const hc_coll_vec_t *vec;
    uint8_t smem, rmem; /* HC_MEM_*: 0 (host) unless hc_coll_node_takes_device */
} hc_coll_args_t;

/* Whether the collective a on comm takes device buffers as they are (the
 * node family: by IPC, or in its region with device copies; coll/
 * node_device.c), instead of the API's host staging. It depends only on
 * what every rank of comm shares (the collective, its size, the
 * communicator, HCOMM_ALGO), never on memory types, so every rank decides
 * alike: a large allreduce, reduce, broadcast, gather, scatter, allgather,
 * reduce_scatter or alltoall on a communicator of one node whose node
 * family single copy would run (the rooted ones' only while a GPU backend
 * is active: hc_node_prep_broadcast, _direct, _gather, _scatter).
 * HC_COLL_NODE_DEVICE_MIN: the least bytes it moves (allreduce, reduce,
 * broadcast: the message; the others: the per-rank block times the ranks). */
#define HC_COLL_NODE_DEVICE_MIN (256u * 1024)
bool hc_coll_node_takes_device(const hc_coll_args_t *a, struct hcomm_comm *comm);
/* The node region of comm (hc_coll_node_usable) has its private scratch. */
bool hc_coll_node_scratch(struct hcomm_comm *comm);
/* Reads HCOMM_ALGO (after hc_coll_init): a name that is none fails init. */
hcomm_status_t hc_coll_post_init(void);
/* Decides and starts a collective (the user's, after the API's argument
 * checks, or the library's own): req_p NULL is a blocking call (waited
 * here); inside a group it is deferred to the group's end. */
hcomm_status_t hc_coll_post(const hc_coll_args_t *a, struct hcomm_comm *comm,
                            hcomm_request_t *req_p);
/* Picks op's algorithm and starts it; on failure op is released (its
 * request is the caller's: free or complete it). */
hcomm_status_t hc_coll_launch(hc_coll_op_t *op);
/* A request that is already complete (count 0 and the other no-op cases);
 * nothing for a blocking call (req_p NULL). */
hcomm_status_t hc_coll_noop(hcomm_request_t *req_p);
/* The library's own allgather of `bytes` per rank on comm (comm split,
 * HCOMM_CHECK): neither counted nor fingerprinted. */
hcomm_status_t hc_coll_internal_allgather(const void *mine, void *all, size_t bytes,
                                          struct hcomm_comm *comm);
/* The library's own votes on comm (blocking, outside any group): *max_p is
 * the largest `mine` of the ranks; *any_p whether `mine` is true on some. */
hcomm_status_t hc_coll_internal_max(uint64_t mine, uint64_t *max_p, struct hcomm_comm *comm);
hcomm_status_t hc_coll_internal_any(bool mine, bool *any_p, struct hcomm_comm *comm);
extern bool hc_coll_internal;
/* Groups (coll_group.c). */
void hc_coll_group_start(void);
hcomm_status_t hc_coll_group_end(void);
hcomm_status_t hc_coll_group_defer(hc_coll_op_t *op, hcomm_request_t *req_p);
void hc_coll_group_fini(void);
/* Communicators made by collectives (coll_comm.c); the arguments checked. */
hcomm_status_t hc_coll_comm_split(struct hcomm_comm *comm, int color, int key,
                                  struct hcomm_comm **newcomm_p);
hcomm_status_t hc_coll_comm_create_group(struct hcomm_comm *comm, const int *ranks, int n,
                                         int tag, struct hcomm_comm **newcomm_p);

/* Ops from the cache (freed by hc_coll_op_release, which also drops the
 * op's requests and scratch). */
hc_coll_op_t *hc_coll_op_alloc(void);
void hc_coll_op_release(hc_coll_op_t *op);
/* Sets op's arguments (kind .. root, element size, bytes) from a. */
void hc_coll_op_set(hc_coll_op_t *op, const hc_coll_args_t *a, struct hcomm_comm *comm);
/* A new op with its request (req->coll, op->req), its arguments set. */
hcomm_status_t hc_coll_op_create(const hc_coll_args_t *a, struct hcomm_comm *comm,
                                 hc_coll_op_t **op_p);
/* A collective on an internal communicator, started from a step: the
 * request completes when it ends (hc_coll_child_end frees it, abandoning
 * the op and everything queued behind it on its comm with status if it
 * still runs). */
hcomm_status_t hc_coll_child_start(hc_coll_op_t *parent, struct hcomm_comm *comm, hc_coll_kind_t kind,
                                   const void *sbuf, void *rbuf, size_t count, hcomm_op_t rop, int root,
                                   struct hcomm_request **req_p);
void hc_coll_child_end(struct hcomm_request *req, hcomm_status_t status);

/* ---- p2p algorithms (coll_net.c) --------------------------------------------- */

/* Internal p2p for algorithms: collective context, tag from the op's seq. */
hcomm_status_t hc_coll_isend(hc_coll_op_t *op, const void *buf, size_t len, int peer);
hcomm_status_t hc_coll_irecv(hc_coll_op_t *op, void *buf, size_t len, int peer);
/* Done when every request in op->reqs completed OK (they are then freed and
 * nreqs reset), pending, or failed with the first failure. */
hc_step_t hc_coll_reqs_test(hc_coll_op_t *op);

/* A member of op's comm that has failed, or -1. */
int hc_coll_failed_member(struct hcomm_comm *comm);

#endif /* HC_COLL_H */
