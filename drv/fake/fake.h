/*
 * fake: a fault-injecting network driver for tests. It moves real bytes
 * between the processes of one host and is usable only when HCOMM_NET=fake
 * (lowest priority of the network scope; the ladder never picks it on its
 * own). It exists so that the core's handling of everything a real NIC
 * driver may answer (no credit, late completions, completions out of order,
 * RMA that needs registered memory and keys, a connection that breaks) is
 * exercised on any machine; see docs/drivers.md.
 *
 * Frames. Each rank listens on an abstract-namespace AF_UNIX SOCK_SEQPACKET
 * socket named from a hash of the job key and its rank. One datagram is one
 * frame (header + payload), so message boundaries come for free. Sockets are
 * connected lazily, on the first frame to a peer, and carry one direction
 * only: a rank writes its frames to a peer on the socket it connected and
 * reads the peer's frames from the socket the peer connected. Two ranks
 * that send to each other for the first time at once thus each open their
 * own socket, and no tie-break is needed: each direction is one socket,
 * ordered by the kernel. The first datagram on a socket is a hello {magic,
 * ranks, instance ids, job key hash}; a socket with a bad hello is closed
 * and logged. Everything is non-blocking and polled by progress (epoll): a
 * full socket (EAGAIN) means "queue it", progress retries, and a connection
 * queue past HC_FAKE_QUEUE_BYTES answers ERR_AGAIN. Frames to a peer go out
 * strictly in put order: put writes directly only when nothing is queued
 * (with HCOMM_FAKE_LANE_SHUFFLE: in put order per lane, see below).
 *
 * RMA. get and write (HC_CONN_CAP_GET | HC_CONN_CAP_WRITE) need memory
 * registered with this driver (HC_DRV_CAP_USER_REG): mem_reg hands out a
 * random-looking 64-bit handle per registration, kept in a table with its
 * range; rkey_pack packs {magic, owner pid, handle, base, len}. get/write
 * check that the lkey is a live registration covering local..+len, that the
 * rkey covers remote_addr..+len and that the owner still holds that
 * registration (read from its table with process_vm_readv), and fail with
 * ERR_INVALID naming the key otherwise: this is what catches a core that
 * forgets to register a buffer, to send its key, or deregisters it while a
 * peer still reads it. The bytes move with process_vm_readv/_writev. There
 * is no rkey_ptr (ERR_UNSUPPORTED).
 *
 * Device memory (GPUDirect RDMA, mem_types HC_MEM_DEVICE): mem_reg maps the
 * GPU layer's dmabuf fd a second time, as a NIC maps a dmabuf for DMA; the
 * registration table keeps that mapping's address (dma), and get/write
 * move the bytes between the two processes' mappings, never through the
 * device pointer (PROT_NONE under the GPU model).
 *
 * Faults, from this driver's knobs (hc_fake_knobs below, read with the
 * others at init). Percentages are 0..100; every default is 0 (no faults).
 *   HCOMM_FAKE_SEED=N       seed of the fault PRNG (default: pid and clock);
 *                           each rank mixes in its rank. Logged at info.
 *   HCOMM_FAKE_AGAIN=P      P% of puts refused with ERR_AGAIN ("no credit").
 *   HCOMM_FAKE_ASYNC=P      P% of puts with a cookie answer IN_PROGRESS: the
 *                           frame is queued and sent later by progress, in
 *                           order with every other frame of the connection,
 *                           and put_done comes after it was sent, held back
 *                           0-3 progress calls (so completions of different
 *                           frames are reported out of order).
 *   HCOMM_FAKE_RMA_ASYNC=P  P% of get/write with a cookie answer IN_PROGRESS:
 *                           they are executed (keys checked again) and
 *                           completed through env->rma_done from progress,
 *                           in shuffled order.
 *   HCOMM_FAKE_LANE_SHUFFLE=P frames of different lanes (hdr.lane) overtake
 *                           each other, as over separate connections
 *                           (docs/lanes.md): P% of the frames that may be
 *                           kept wait in the queue, put writes a frame
 *                           directly when nothing of its lane is queued,
 *                           and progress holds a queued lane back for the
 *                           pass P% of the time while later lanes go; each
 *                           lane stays in put order.
 *   HCOMM_FAKE_DROP_AFTER=N after N frames sent on a connection, close it:
 *                           frames not yet sent fail, both sides report
 *                           env->peer_failed with a reason naming
 *                           HCOMM_FAKE_DROP_AFTER (the dropping side sends a
 *                           last DROP frame so the peer can tell a fake
 *                           drop from a crash).
 * A put without a cookie never answers IN_PROGRESS: control frames are
 * copied, user data (EAGER, CONT, DATA) that cannot go at once is refused
 * with ERR_AGAIN, as tcp does, so a blocking send never returns while its
 * bytes sit in this process.
 *
 * A peer whose socket closes without the goodbye frame (BYE, sent by
 * disconnect) is reported with env->peer_failed, after every put and RMA
 * still owed a completion on that connection got it.
 */
#ifndef HC_DRV_FAKE_H
#define HC_DRV_FAKE_H

#include "base/list.h"
#include "drv/drv.h"
#include "base/config.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#define HC_FAKE_MAX_FRAME (32u << 10)
#define HC_FAKE_EAGER_MAX (256u << 10)
#define HC_FAKE_HDR sizeof(hc_frame_hdr_t)
#define HC_FAKE_QUEUE_BYTES (8u << 20) /* per connection: queued before ERR_AGAIN */
#define HC_FAKE_QUEUE_COPY (1u << 20)  /* per connection: copied control bytes */
#define HC_FAKE_REG_SLOTS 65536u       /* registrations one process may hold */
#define HC_FAKE_SLOT_BITS 20           /* low bits of a handle: its slot */
#define HC_FAKE_RMA_MAX 1024           /* asynchronous RMAs in flight before ERR_AGAIN */
#define HC_FAKE_DONE_DELAY 4           /* put_done held back 0..3 progress calls */
#define HC_FAKE_READ_BUDGET 32         /* datagrams read per socket per progress call */
#define HC_FAKE_HELLO_NS (5ull * 1000000000ull)
#define HC_FAKE_CONNECT_NS (10ull * 1000000000ull)
#define HC_FAKE_CLOSING_NS 1000000000ull
#define HC_FAKE_DRAIN_NS 1000000000ull
#define HC_FAKE_MAGIC 0x6863666bu      /* "hcfk" */
#define HC_FAKE_RKEY_MAGIC 0x6b72666bu /* "kfrk" */

/* Driver frames (never delivered). */
enum {
    HC_FAKE_FRAME_BYE = HC_FRAME_DRIVER, /* orderly close follows: EOF is not a failure */
    HC_FAKE_FRAME_DROP,                  /* fault: a = frames sent before the drop */
};

/* Address blob. */
typedef struct {
    uint32_t magic;
    int32_t rank;
    uint32_t pid;
    uint32_t nregs; /* slots of the registration table */
    uint64_t instance;
    uint64_t regs; /* address of the registration table (key liveness checks) */
} hc_fake_addr_t;

/* First datagram on every socket. */
typedef struct {
    uint32_t magic;
    int32_t src_rank, dst_rank;
    uint32_t pid;
    uint64_t src_instance, dst_instance;
    uint64_t key; /* hash of the job key */
} hc_fake_hello_t;

/* A registration. handle 0: free slot. dma: where the owner's process
 * reaches base's bytes, as a NIC's DMA would: base itself for host memory;
 * for device memory (registered by dmabuf) a second mapping of the dmabuf
 * fd, [map, map + map_len), made by mem_reg and unmapped by mem_dereg. */
typedef struct {
    uint64_t handle;
    uint64_t base;
    uint64_t len;
    uint64_t dma;
    uint64_t map, map_len;
} hc_fake_reg_t;

/* Packed remote key. */
typedef struct {
    uint32_t magic;
    uint32_t pid;
    uint64_t handle;
    uint64_t base;
    uint64_t len;
} hc_fake_rkey_wire_t;
_Static_assert(sizeof(hc_fake_rkey_wire_t) <= HC_RKEY_MAX, "fake rkey fits HC_RKEY_MAX");

struct hc_rkey {
    hc_fake_rkey_wire_t w;
};

/* What epoll reports: the first field of each object. */
enum { HC_FAKE_EP_LISTEN = 1, HC_FAKE_EP_ANON, HC_FAKE_EP_IN, HC_FAKE_EP_OUT };
/* The sending socket. CLOSING: dropped, the DROP notice still to go out. */
enum { HC_FAKE_OUT_NONE, HC_FAKE_OUT_RETRY, HC_FAKE_OUT_UP, HC_FAKE_OUT_CLOSING };

typedef struct hc_fake_tx {
    struct hc_fake_tx *next;
    hc_frame_hdr_t hdr;
    const void *payload;
    void *cookie;
    uint8_t *copy; /* owned copy of a NULL-cookie payload */
    bool inprog;   /* put answered IN_PROGRESS: put_done owed */
    int delay;     /* sent: progress calls left before put_done */
} hc_fake_tx_t;

typedef struct {
    hc_fake_tx_t *head, *tail;
} hc_fake_txq_t;

typedef struct hc_fake_drv hc_fake_drv_t;
typedef struct hc_fake_conn hc_fake_conn_t;

typedef struct {
    int kind; /* HC_FAKE_EP_IN / _OUT */
    hc_fake_conn_t *conn;
} hc_fake_ep_t;

struct hc_fake_conn {
    hc_conn_t base;
    hc_fake_drv_t *drv;
    hc_fake_addr_t addr; /* the peer's blob */
    char name[48];       /* "rank 3 (pid 1234)" */
    int out_fd, in_fd;
    int out_state;
    int err; /* errno of a failed send, acted on by progress */
    bool failed, bye;
    bool drop_now;     /* HCOMM_FAKE_DROP_AFTER reached: progress drops the connection */
    bool active;       /* on the driver's active list */
    uint64_t deadline; /* RETRY: connect; CLOSING: DROP notice */
    uint64_t sent;     /* core frames written to the socket */
    size_t q_bytes, q_copy;
    uint32_t lane_q[HC_FRAME_LANES]; /* frames of each lane in txq */
    hc_fake_txq_t txq;               /* not sent yet, in order */
    hc_fake_txq_t done;              /* sent, put_done held back */
    hc_fake_ep_t out_ep, in_ep;
    hc_fake_conn_t *active_next;
    /* HCOMM_FAKE_HANDSHAKE: puts wait (ERR_AGAIN) until the peer answered
     * our endpoint blob through env->ep_send / ops->ep_recv. */
    int hs_state; /* 0 none, 1 hello sent, 2 up */
    uint64_t hs_token;
};

typedef struct hc_fake_anon {
    int kind; /* HC_FAKE_EP_ANON */
    int fd;
    struct hc_fake_anon *next;
    uint64_t deadline;
} hc_fake_anon_t;

typedef struct {
    hc_fake_conn_t *conn;
    hc_rma_t rma;
    struct hc_rkey rkey; /* a copy: the core may release its own after the call */
    bool has_rkey;
    bool write;
} hc_fake_rma_op_t;

struct hc_fake_drv {
    hc_drv_t base;
    const hc_drv_env_t *env;
    int epfd;
    int listen_kind; /* HC_FAKE_EP_LISTEN: epoll's tag for the listener */
    int listen_fd;
    hc_fake_addr_t me;
    uint64_t key_hash;
    hc_fake_conn_t **conns;    /* by world rank */
    hc_fake_conn_t *active;    /* conns with sockets, queues or held completions */
    hc_fake_anon_t *anon;      /* accepted, hello pending */
    hc_fake_anon_t *anon_dead; /* retired during a progress batch */
    uint8_t *rbuf;             /* one datagram */
    hc_fake_reg_t *regs;
    uint32_t *reg_free; /* stack of free slots */
    uint32_t nfree;
    uint64_t reg_gen;
    hc_fake_rma_op_t **rma; /* asynchronous RMAs not executed yet */
    int nrma;
    uint64_t rng;
    uint64_t next_timer_ns;
    bool closing;
    /* faults */
    uint64_t seed;
    int pct_again, pct_async, pct_rma_async, pct_shuffle;
    uint64_t drop_after;
    /* counters, logged at close */
    uint64_t n_put, n_again, n_async, n_rma, n_rma_async, n_drops;
    uint64_t n_overtaken; /* frames sent before an earlier frame of another lane */
    uint64_t n_dev_regs;  /* device memory registered by dmabuf (GPUDirect RDMA) */
};

/* HCOMM_FAKE_* (fake.c's knob table). 0 seed: from the pid and the clock; 0 drop: never. */
typedef struct {
    int64_t seed, again, async, rma_async, drop_after, shuffle;
    bool handshake;
} hc_fake_cfg_t;
extern hc_fake_cfg_t hc_fake_cfg;

/* ---- small helpers ---------------------------------------------------------------- */

static inline uint64_t hc_fake_mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static inline uint64_t hc_fake_rand(hc_fake_drv_t *d)
{
    d->rng += 0x9e3779b97f4a7c15ull;
    return hc_fake_mix(d->rng);
}

static inline bool hc_fake_roll(hc_fake_drv_t *d, int pct)
{
    return pct > 0 && (int)(hc_fake_rand(d) % 100) < pct;
}

static inline void hc_fake_q_push(hc_fake_txq_t *q, hc_fake_tx_t *t)
{
    HC_FIFO_PUSH(q, t);
}

static inline unsigned hc_fake_lane(const hc_fake_tx_t *t)
{
    return t->hdr.lane & (HC_FRAME_LANES - 1);
}

/* ---- fake.c: helpers, failure, probe/open/connect, teardown, the ops table ---- */

socklen_t hc_fake_sockaddr(uint64_t key_hash, int rank, struct sockaddr_un *sa);
void hc_fake_ep(hc_fake_drv_t *d, int op, int fd, uint32_t events, void *ptr);
void hc_fake_close_fd(hc_fake_drv_t *d, int *fd);
void hc_fake_activate(hc_fake_conn_t *c);
/* txq's own push and pop: they count each lane's queued frames. */
void hc_fake_txq_push(hc_fake_conn_t *c, hc_fake_tx_t *t);
/* Takes t (after prev, NULL: the head) out of txq. */
void hc_fake_txq_take(hc_fake_conn_t *c, hc_fake_tx_t *prev, hc_fake_tx_t *t);
void hc_fake_tx_free(hc_fake_tx_t *t);
/* One datagram: header + payload, all or nothing (SOCK_SEQPACKET). */
ssize_t hc_fake_send(int fd, const hc_frame_hdr_t *hdr, const void *payload);
void hc_fake_conn_fail(hc_fake_conn_t *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* HCOMM_FAKE_DROP_AFTER reached: the DROP notice goes last on the sending
 * socket, and both sockets stay open until it is out (or a second passed),
 * so the peer reads it before it sees either socket close. */
void hc_fake_drop(hc_fake_conn_t *c);
/* ---- fake_progress.c: receiving, progress ---- */

/* Retired, not freed: an event for it may still wait in progress's batch.
 * Progress frees the retired ones when the batch is done. */
void hc_fake_anon_free(hc_fake_drv_t *d, hc_fake_anon_t *a, bool close_fd);
void hc_fake_anon_reap(hc_fake_drv_t *d);
int hc_fake_progress(hc_drv_t *drv);
/* ---- fake_send.c: sending, memory keys, RMA ---- */

/* Opens the sending socket to c's peer and writes the hello. Errors are
 * left in c->err for progress: never a failure from inside put. */
void hc_fake_out_start(hc_fake_conn_t *c);
/* Writes queued frames while the socket takes them; returns how many. With
 * the lane shuffle a lane may be held back for this pass (its later frames
 * with it) while the frames of other lanes behind it go; on the way out
 * (drain) nothing is held. */
int hc_fake_flush_lanes(hc_fake_conn_t *c, bool shuffle);
int hc_fake_flush(hc_fake_conn_t *c);
hcomm_status_t hc_fake_put(hc_conn_t *conn, const hc_frame_hdr_t *hdr, const void *payload,
                           void *cookie);
hcomm_status_t hc_fake_mem_reg(hc_drv_t *drv, const hc_mem_desc_t *desc, uint64_t *key_p);
void hc_fake_mem_dereg(hc_drv_t *drv, uint64_t key);
hcomm_status_t hc_fake_rkey_pack(hc_drv_t *drv, uint64_t key, const hc_mem_desc_t *desc, void *buf,
                                 size_t *len_p);
hcomm_status_t hc_fake_rkey_unpack(hc_conn_t *conn, const void *buf, size_t len,
                                   hc_rkey_t **rkey_p);
void hc_fake_rkey_release(hc_conn_t *conn, hc_rkey_t *rkey);
hcomm_status_t hc_fake_rkey_ptr(hc_conn_t *conn, const hc_rkey_t *rkey, uint64_t remote_addr,
                                size_t len, void **ptr_p);
hcomm_status_t hc_fake_get(hc_conn_t *conn, const hc_rma_t *rma);
hcomm_status_t hc_fake_write(hc_conn_t *conn, const hc_rma_t *rma);
/* Executes about half of the asynchronous RMAs, in random order. */
int hc_fake_rma_progress(hc_fake_drv_t *d);

#endif /* HC_DRV_FAKE_H */
