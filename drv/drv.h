/*
 * The transport abstraction. Collectives and point-to-point are written once,
 * against connections; each driver (drv/<name>/) fills one struct hc_drv_ops
 * and registers itself with HC_DRV_REGISTER. drv.c probes the registered
 * drivers in ladder order, logs the choice and why others were skipped, and
 * fills ops a driver leaves NULL from a base table returning ERR_UNSUPPORTED,
 * so callers never test for NULL.
 *
 * A connection is a reliable stream of frames to one peer that keeps the
 * order of the frames of each lane (hdr.lane): frames of different lanes
 * may overtake each other, and so may frames flagged
 * HC_FRAME_FLAG_UNORDERED (docs/lanes.md). A driver with one ordered
 * channel per peer keeps every frame in order, which satisfies this; one
 * with several (tcp's sockets) may carry lanes on different ones. Each frame is a 32-byte
 * header plus up to conn->max_frame payload bytes (a longer put fails with
 * ERR_INVALID), written into a receive slot the peer owns (credit based: a
 * full peer makes put return ERR_AGAIN) and handed to the core on the
 * peer's side by the driver's progress through env->deliver.
 *
 * Completions: every put/get/write that returned IN_PROGRESS gets exactly
 * one put_done/rma_done, never from inside the call that started it, and
 * all of a connection's come before its env->peer_failed (none after);
 * once a connection failed, put and RMA on it fail at once (not ERR_AGAIN).
 * tests/drv/conformance_ops.c checks all of this for every driver. Drivers that can read a peer's memory
 * directly (shm via process_vm_readv, RDMA READ) set HC_CONN_CAP_GET, which
 * lets large messages skip the slots.
 */
#ifndef HC_DRV_H
#define HC_DRV_H

#include "base/hc_base.h"
#include "gpu/gpu.h"

#include <sys/types.h>

typedef struct hc_drv hc_drv_t;
typedef struct hc_conn hc_conn_t;

/* Frame types of the core protocol (core/p2p.c). Drivers carry them opaquely
 * (what they may act on is in hdr.flags), except types >= HC_FRAME_DRIVER,
 * which a driver may use for itself and must not deliver. */
enum {
    HC_FRAME_EAGER = 1, /* tagged message, payload is the data */
    HC_FRAME_RTS,       /* rendezvous request: a = total bytes, b = sender request id,
                           payload = hc_frame_rts_t */
    HC_FRAME_CTS,       /* clear to send: a = sender request id, b = receiver request id;
                           payload empty (stream DATA) or hc_frame_cts_t (write there) */
    HC_FRAME_DATA,      /* rendezvous data: a = receiver request id, b = byte offset */
    HC_FRAME_FIN,       /* rendezvous done: a = the peer's request id (receiver's get done:
                           sender id; sender's write done: receiver id) */
    HC_FRAME_NACK,      /* receiver failed the rendezvous: a = sender request id, b = -status */
    HC_FRAME_CONT,      /* next fragment of a multi-frame EAGER message */
    HC_FRAME_GIVE_UP,   /* the sender's communicator ctx_id broke: a = -status, b = the world
                           rank whose failure made it give up + 1 (0: none) */
    HC_FRAME_REVOKE,    /* the sender revoked communicator ctx_id (hcomm_comm_revoke) */
    HC_FRAME_SHRINK,    /* hcomm_comm_shrink's agreement on ctx_id (coll/coll_shrink.c): tag,
                           a, b and a payload of one bitmap chunk */
    HC_FRAME_COLL_PROBE, /* a collective of ctx_id has waited long for the receiver:
                            a = its tag (sequence, signature); the receiver checks that it
                            agrees (and gives up on the communicator if it does not) */
    HC_FRAME_DRIVER = 0x80
};

/* Lanes: the core gives every frame a lane, a function of its context
 * (core/hc_core.h: hc_p2p_lane), below this bound. Frames of one lane keep
 * their order on a connection; a driver may carry different lanes on
 * different channels (env->lanes says whether the core spreads them). */
#define HC_FRAME_LANES 16

typedef struct {
    uint8_t type;
    uint8_t flags;
    uint8_t lane;     /* < HC_FRAME_LANES: frames of one lane keep their order */
    uint8_t reserved; /* 0 from the core (shm marks its compact frames here) */
    uint32_t ctx_id;  /* communicator context the frame belongs to */
    int32_t tag;
    uint32_t len; /* payload bytes after this header */
    uint64_t a;
    uint64_t b;
} hc_frame_hdr_t;
_Static_assert(sizeof(hc_frame_hdr_t) == 32, "frame header is 32 bytes on the wire");

/* hdr.flags of an EAGER frame: more fragments follow (CONT frames, in order,
 * on the same connection); hdr.a then holds the message's total length. */
#define HC_FRAME_FLAG_MORE 0x01
/* hdr.flags of an RTS: the sender's connection can write into the receiver
 * (a CTS may carry the receive buffer's key). */
#define HC_FRAME_FLAG_CAN_WRITE 0x02
/* hdr.flags of any frame: it may overtake the connection's earlier frames,
 * even of its own lane (rendezvous DATA, placed by offset): a driver may
 * send it on any channel. Frames without it keep their order in their lane. */
#define HC_FRAME_FLAG_UNORDERED 0x04
/* hdr.flags of an RTS: the sender's buffer is device memory (GPUDirect
 * RDMA, docs/gpu.md): the receiver must get it or ask for a write, never a
 * stream of DATA frames, which the sender's CPU would read. */
#define HC_FRAME_FLAG_DEVICE 0x08

/* ---- memory keys ---------------------------------------------------------
 * Memory a driver may have to reach is registered with it once: library
 * regions when they are created, user buffers through the registration cache
 * (only for drivers with HC_DRV_CAP_USER_REG). The driver sees the whole
 * region (hc_mem_desc_t) and returns a key, an opaque 64-bit handle. For a
 * peer to reach that memory the owner packs a remote key (rkey_pack, at most
 * HC_RKEY_MAX bytes, carried in RTS/CTS payloads and node descriptors); the
 * peer unpacks it on its connection (rkey_unpack) into an hc_rkey_t that get
 * and write take, and where the transport can map peer memory into this
 * process (HC_CONN_CAP_RKEY_PTR: shm's memfds) rkey_ptr gives a local
 * pointer to it. A driver that needs no key (shm's CMA, tcp) packs 0 bytes.
 */
#define HC_RKEY_MAX 40

typedef struct hc_mem_desc {
    void *addr;
    size_t len;
    size_t page_size;      /* 4 KiB, 2 MiB or 1 GiB */
    int fd;                /* memfd backing it (other local processes can map it), else -1 */
    uint64_t fd_offset;    /* offset of addr in fd */
    const uint64_t *iovas; /* IO address of each page (len / page_size), NULL when unknown */
    int numa_node;         /* -1 unknown */
    bool user;             /* user memory (registration cache), not a library region */
    /* What memory it is (gpu/gpu.h). HC_MEM_DEVICE is offered only to a
     * driver whose mem_types has it: addr is then a device address the CPU
     * must never touch, and the device's bytes are dmabuf_fd from
     * dmabuf_offset on (the GPU layer's dmabuf_fd; valid during mem_reg
     * only: a driver keeps what it maps or registers, not the fd). */
    hc_mem_type_t mem_type;
    int device;             /* -1 for host memory */
    int dmabuf_fd;          /* -1 for host memory */
    uint64_t dmabuf_offset; /* of addr in dmabuf_fd */
} hc_mem_desc_t;

typedef struct hc_rkey hc_rkey_t; /* each driver defines its own */

/* One RMA transfer (get: remote -> local, write: local -> remote). */
typedef struct {
    void *local;
    size_t len;
    uint64_t lkey;          /* key of the registration holding local (0: none needed) */
    uint64_t remote_addr;   /* in the peer's address space */
    const hc_rkey_t *rkey;  /* from rkey_unpack (NULL: none needed) */
    void *cookie;           /* handed back by env->rma_done; NULL: finish before returning */
} hc_rma_t;

/* RTS payload: the sender's buffer and its packed key (rkey_len bytes). */
typedef struct {
    uint64_t addr;
    uint8_t rkey_len;
    uint8_t rkey[HC_RKEY_MAX];
} hc_frame_rts_t;

/* CTS payload of a write-based rendezvous (empty for streaming): where the
 * sender writes. */
typedef struct {
    uint64_t addr;
    uint8_t rkey_len;
    uint8_t rkey[HC_RKEY_MAX];
} hc_frame_cts_t;

/* Control payloads the core queues are copied; none is larger than this. */
#define HC_FRAME_CTRL_MAX 64
_Static_assert(sizeof(hc_frame_rts_t) <= HC_FRAME_CTRL_MAX, "RTS fits a control payload");
_Static_assert(sizeof(hc_frame_cts_t) <= HC_FRAME_CTRL_MAX, "CTS fits a control payload");

/* What the core hands a driver at probe/open. Valid until close. */
typedef struct hc_drv_env {
    int rank, size;           /* world */
    int local_rank, local_size;
    const int *local_ranks;   /* world rank of each local rank of this node */
    const int *node_of_rank;  /* node index of every world rank */
    const char *node_id;      /* this node's identity (host + netns or HCOMM_NODE_ID) */
    const char *job_key;      /* per-job secret ("" when the launcher set none) */
    const char *bootstrap_host; /* host part of the rendezvous address ("" for file://) */
    void *core;               /* first argument of the callbacks below */
    /* A frame arrived on conn. payload (hdr->len bytes) is valid only during
     * the call; the core consumes it before returning. */
    void (*deliver)(void *core, hc_conn_t *conn, const hc_frame_hdr_t *hdr, const void *payload);
    /* A put that returned IN_PROGRESS no longer needs its payload. */
    void (*put_done)(void *core, hc_conn_t *conn, void *cookie, hcomm_status_t status);
    /* A get/write that returned IN_PROGRESS finished (status: how). */
    void (*rma_done)(void *core, hc_conn_t *conn, void *cookie, hcomm_status_t status);
    /* Every connection to peer is gone (closed, reset, silent past the limit). */
    void (*peer_failed)(void *core, int peer, hcomm_status_t status, const char *why);
    /* Per-peer endpoint handshake (RDMA queue pairs and the like): sends up
     * to HC_DRV_EP_BLOB_MAX bytes to the same driver on peer, which gets
     * them in ops->ep_recv, in order. Relayed through the bootstrap, so a
     * driver starts it lazily (at the first put to a peer, returning
     * ERR_AGAIN until its connection is up) and only for peers this rank
     * talks to. ERR_AGAIN: retry later; other: the peer is unreachable. */
    hcomm_status_t (*ep_send)(void *core, hc_drv_t *drv, int peer, const void *blob, size_t len);
    /* How many lanes the core spreads its frames over: 1 (HCOMM_LANES=0:
     * every hdr.lane is 0, a driver keeps its placement of old) or
     * HC_FRAME_LANES. A driver with several channels per peer maps lanes
     * onto them; one with a single channel ignores it. 0 reads as 1. */
    int lanes;
} hc_drv_env_t;

#define HC_DRV_EP_BLOB_MAX 4096

enum { HC_DRV_SCOPE_SELF, HC_DRV_SCOPE_NODE, HC_DRV_SCOPE_NET, HC_DRV_SCOPES };
enum {
    HC_CONN_CAP_GET = 1u << 0,      /* get: read the peer's memory */
    HC_CONN_CAP_WRITE = 1u << 1,    /* write: write the peer's memory */
    HC_CONN_CAP_RKEY_PTR = 1u << 2, /* rkey_ptr: the peer's memory mapped here */
    /* put sends a payload by zero copy only from memory registered with the
     * driver (a NIC that DMAs by IO address): the core registers the buffer
     * of a streamed rendezvous send through the registration cache and holds
     * it until the request is recycled, after its last put_done. */
    HC_CONN_CAP_PUT_REG = 1u << 3,
};
/* hc_drv_ops.caps */
enum {
    HC_DRV_CAP_USER_REG = 1u << 0, /* get/write need user buffers registered (lkey/rkey) */
};

/* Base of every driver instance; drivers embed it first. */
struct hc_drv {
    const struct hc_drv_ops *ops;
    const hc_drv_env_t *env;
    int index; /* position in the core's table of open drivers (mem keys) */
};

/* Base of every connection; drivers embed it first. */
struct hc_conn {
    const struct hc_drv_ops *ops;
    hc_drv_t *drv;
    int peer;          /* world rank */
    uint32_t caps;     /* HC_CONN_CAP_* */
    size_t max_frame;  /* largest payload one put accepts */
    size_t eager_max;  /* messages up to this size go eagerly, in one frame or in
                          fragments of max_frame (the core caps it at 16 frames) */
    void *core_priv;   /* the core's per-peer state */
};

/* A driver's table. Drivers are built with the library, one folder each
 * (drv/<name>/, docs/drivers.md); this is an internal interface, changed
 * with its drivers, not an ABI: libhcomm exports only hcomm_* and loads no
 * outside driver (docs/interface.md, "No out-of-tree drivers"). */
struct hc_drv_ops {
    const char *name; /* "shm", "tcp", ... as HCOMM_NET names it */
    int scope;        /* HC_DRV_SCOPE_* */
    int priority;     /* ladder order inside a scope: higher is tried first */
    uint32_t caps;    /* HC_DRV_CAP_* */
    /* Memory types (1u << HC_MEM_*) that mem_reg, get and write move with no
     * CPU touch (NCCL's ptrSupport): device memory by dmabuf. 0 (the
     * default) reads as host only; the core then stages device buffers
     * through host memory for this driver (docs/gpu.md, "GPUDirect RDMA"). */
    uint32_t mem_types;

    /* Can this driver run here? On no, write why (for hcomm_info / logs).
     * HCOMM_ERR_INVALID means one of the driver's settings has a bad value
     * (why names the variable): hcomm_init then fails with it rather than
     * pass the driver over; any other status skips the driver. */
    hcomm_status_t (*probe)(const hc_drv_env_t *env, char *why, size_t why_len);
    /* Opens the local endpoint. */
    hcomm_status_t (*open)(const hc_drv_env_t *env, hc_drv_t **drv_p);
    /* Writes this endpoint's address blob (in: *len_p = capacity). */
    hcomm_status_t (*addr_pack)(hc_drv_t *drv, void *buf, size_t *len_p);
    /* Second phase of open, after every rank's blob is known (collective
     * among the ranks that use this driver): e.g. map shared segments. */
    hcomm_status_t (*wireup)(hc_drv_t *drv, const void *const *addrs, const size_t *addr_lens);
    /* Connection to peer (world rank), whose blob is addr. */
    hcomm_status_t (*connect)(hc_drv_t *drv, int peer, const void *addr, size_t addr_len,
                              hc_conn_t **conn_p);
    /* Sends one frame. OK: payload may be reused; IN_PROGRESS: env->put_done(cookie)
     * later; ERR_AGAIN: no credit now, call progress and retry; other: failed.
     * With a NULL cookie the driver must not keep the payload: it copies it
     * (OK) or refuses (ERR_AGAIN), never IN_PROGRESS. */
    hcomm_status_t (*put)(hc_conn_t *conn, const hc_frame_hdr_t *hdr, const void *payload,
                          void *cookie);
    /* RMA (HC_CONN_CAP_GET / _WRITE): get copies rma->len bytes from the
     * peer's remote_addr into local, write the reverse. OK: done; IN_PROGRESS
     * (only with a cookie): env->rma_done(cookie, status) later, local must
     * stay valid until then; ERR_AGAIN: no resources now, progress and retry;
     * other: failed (the message names the peer). */
    hcomm_status_t (*get)(hc_conn_t *conn, const hc_rma_t *rma);
    /* Harvests completions and incoming frames; returns how many events. */
    int (*progress)(hc_drv_t *drv);
    /* Registers memory with this driver; *key_p goes into the region table
     * (0 when the driver keeps nothing). A failure is rolled back by the core
     * for the drivers that had accepted it. */
    hcomm_status_t (*mem_reg)(hc_drv_t *drv, const hc_mem_desc_t *desc, uint64_t *key_p);
    void (*mem_dereg)(hc_drv_t *drv, uint64_t key);
    /* Node-shared memory found by a key every local rank agrees on: the first
     * caller creates it (zeroed), later callers map the same bytes. users:
     * how many ranks will get it (each once): the block lives until that
     * many have put it, so a rank that is done and puts it before a slower
     * one has got it cannot make the slower one create a fresh block. NULL
     * when the driver has none. */
    void *(*shared_get)(hc_drv_t *drv, uint64_t key, size_t size, int users);
    void (*disconnect)(hc_conn_t *conn);
    void (*close)(hc_drv_t *drv);
    /* Drops this rank's use of the shared_get block of key; the put that
     * completes `users` lets the driver reuse it. */
    void (*shared_put)(hc_drv_t *drv, uint64_t key);
    hcomm_status_t (*write)(hc_conn_t *conn, const hc_rma_t *rma);
    /* Remote keys (see "memory keys" above). rkey_pack: what a peer needs to
     * reach [desc->addr, +len) of registration key, into buf (in: *len_p =
     * capacity, at least HC_RKEY_MAX; out: bytes used, 0 when none is
     * needed). rkey_unpack: a peer's packed key, on the connection to it
     * (*rkey_p NULL for a 0-byte key). rkey_ptr: where remote_addr..+len of
     * that peer memory is mapped in this process (HC_CONN_CAP_RKEY_PTR), else
     * ERR_UNSUPPORTED; valid until rkey_release. For a key of device memory
     * (shm's IPC import) the pointer is device memory too: the GPU dispatch
     * may use it, the CPU never. */
    hcomm_status_t (*rkey_pack)(hc_drv_t *drv, uint64_t key, const hc_mem_desc_t *desc, void *buf,
                                size_t *len_p);
    hcomm_status_t (*rkey_unpack)(hc_conn_t *conn, const void *buf, size_t len,
                                  hc_rkey_t **rkey_p);
    void (*rkey_release)(hc_conn_t *conn, hc_rkey_t *rkey);
    hcomm_status_t (*rkey_ptr)(hc_conn_t *conn, const hc_rkey_t *rkey, uint64_t remote_addr,
                               size_t len, void **ptr_p);
    /* A handshake blob from the same driver on rank `from` (env->ep_send),
     * called from the core's slow progress (about every millisecond) or
     * while the core waits on the bootstrap; it may answer with ep_send but
     * must not call into the core otherwise. */
    void (*ep_recv)(hc_drv_t *drv, int from, const void *blob, size_t len);
    /* hcomm_info: extra lines on what the driver sees here (devices, ports,
     * addresses), each starting with two spaces; the base prints nothing. */
    void (*describe)(const hc_drv_env_t *env, void (*line)(const char *text, void *arg), void *arg);
    /* HCOMM_STATS_LEVEL=2: the driver's own counters (retries, heartbeats,
     * RDMA bytes), one kv() call each; the base reports none. */
    void (*counters)(hc_drv_t *drv, void (*kv)(const char *name, uint64_t value, void *arg),
                     void *arg);
    /* Sends what put (or progress) queued, for a driver that batches its
     * packets (one doorbell or system call per burst, not per frame). The
     * core calls it at the end of every progress pass and after each put it
     * makes outside progress, so nothing waits on a later call. NULL (the
     * base): every put leaves at once. */
    void (*flush)(hc_drv_t *drv);
    /* The core has learned that peer failed (its bootstrap connection
     * closed, another driver saw it): complete what is still owed for it
     * (put_done / rma_done with PEER_FAILED) rather than wait for the
     * driver's own timeout. NULL: nothing to do (the driver sees it itself). */
    void (*peer_gone)(hc_drv_t *drv, int peer);
    /* hcomm_info --topo: the links conn rides, in a line ("" or NULL op:
     * one link, nothing to add). tcp with rails: each interface pair and
     * its state. */
    void (*links)(hc_conn_t *conn, char *buf, size_t len);
    /* The topology cache's key (api/api_probe.c): this endpoint's links
     * (interfaces, devices, ports) in a line, the same from run to run on
     * one setup (no ephemeral port, no state). A cost matrix measured over
     * one set of links is not reused over another (one tcp rail or two).
     * NULL op: the driver's name says it all. */
    void (*local_links)(hc_drv_t *drv, char *buf, size_t len);
    /* The hang report (core/hang.c): what the driver holds for conn's peer
     * and what its links show (frames queued, bytes the kernel has not sent
     * or the process has not read), in a line ("" or NULL op: nothing). */
    void (*explain)(hc_conn_t *conn, char *buf, size_t len);
};

void hc_drv_register(const struct hc_drv_ops *ops);
#define HC_DRV_REGISTER(ops_var)                                                                   \
    __attribute__((constructor)) static void hc_drv_register_##ops_var(void)                      \
    {                                                                                              \
        hc_drv_register(&(ops_var));                                                               \
    }

/* ---- used by the core ---------------------------------------------------- */
/* Registered drivers (one more registration is refused, and init fails
 * naming it) and so at most this many open ones, each with a key slot in
 * every region: HC_MAX_DRIVERS (base/hc_base.h). */
#define HC_DRV_MAX HC_MAX_DRIVERS
/* Why a registration past HC_DRV_MAX was refused, or NULL. */
const char *hc_drv_registry_error(void);

/* Registered drivers in ladder order (scope, then priority), missing ops
 * default-filled. */
int hc_drv_count(void);
const struct hc_drv_ops *hc_drv_at(int i);
const struct hc_drv_ops *hc_drv_find(const char *name);

/* Chooses and opens the drivers for this job: self, the node driver (unless
 * HCOMM_SHM=0 or one rank per node) and the best network driver (or the one
 * HCOMM_NET names) when some peers are on other nodes; logs the choice.
 * drvs_p receives up to HC_DRV_MAX open drivers. */
hcomm_status_t hc_drv_select_open(const hc_drv_env_t *env, hc_drv_t **drvs, int *ndrvs_p);

/* True when the driver left progress to the base table (nothing to poll:
 * the self driver delivers inside put). */
bool hc_drv_progress_is_noop(const struct hc_drv_ops *ops);
/* True when the driver registers memory with a device (its own mem_reg, a
 * network driver: verbs, mlx5, dpdk, fake), which locks it against
 * RLIMIT_MEMLOCK. */
bool hc_drv_registers_memory(const struct hc_drv_ops *ops);

/* Whether the driver's RMA moves memory of type t with no CPU touch
 * (ops->mem_types; host memory always). */
static inline bool hc_drv_moves(const struct hc_drv_ops *ops, hc_mem_type_t t)
{
    return t == HC_MEM_HOST || (ops->mem_types & (1u << t)) != 0;
}

/* How a driver that moves device memory does it: "IPC" for a node driver
 * (the peer's allocation mapped here), "GPUDirect RDMA (dmabuf)" for a
 * network driver. */
static inline const char *hc_drv_device_path(const struct hc_drv_ops *ops)
{
    return ops->scope == HC_DRV_SCOPE_NODE ? "IPC" : "GPUDirect RDMA (dmabuf)";
}

/* Writes "name: reason" lines for every registered driver (hcomm_info). */
void hc_drv_describe(const hc_drv_env_t *env, void (*line)(const char *text, void *arg), void *arg);

#endif /* HC_DRV_H */
