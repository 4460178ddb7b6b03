/*
 * hcomm: point-to-point messages and collectives for distributed training.
 *
 * This is the only header a user includes. Conventions that hold for every
 * function below unless its comment says otherwise:
 *
 *  - Return value: an hcomm_status_t. HCOMM_OK (0) on success, a negative
 *    HCOMM_ERR_* on failure. hcomm_strerror() names a code; hcomm_last_error()
 *    returns the calling thread's last failure message, which names the
 *    function, the argument or peer and the offending value.
 *  - Output arguments end in _p and are written only on success.
 *  - Bad arguments (NULL buffer with a non-zero count, unknown dtype or op,
 *    NULL or freed communicator, rank out of range, byte sizes that overflow,
 *    calls before hcomm_init() or after hcomm_finalize()) return
 *    HCOMM_ERR_INVALID (or HCOMM_ERR_NOT_INITIALIZED) and leave the library
 *    usable for the next valid call.
 *  - Every wait is bounded by HCOMM_TIMEOUT seconds (default 300): on expiry
 *    the call returns HCOMM_ERR_TIMEOUT and hcomm_last_error() names the
 *    operation and the peer it was waiting for. A peer process that dies makes
 *    pending and later operations that need it return HCOMM_ERR_PEER_FAILED
 *    naming the rank, well before the timeout.
 *  - Threading contract (like MPI_THREAD_SERIALIZED, per process): a process
 *    has one progress engine (one request pool, one set of connections and
 *    queues, advanced by whichever thread waits), shared by all its
 *    communicators. So at most one thread at a time may be inside hcomm,
 *    whichever communicators the calls name: two threads on two different
 *    communicators are as much a violation as two on one. Threads may take
 *    turns (the caller's own lock or hand-off orders them). This is checked
 *    (one compare-and-swap per call): a call made while another thread is
 *    inside hcomm returns HCOMM_ERR_INVALID at once, having done nothing,
 *    and hcomm_last_error() names the rule and the call the other thread is
 *    in ("hcomm_allreduce: another thread of this process is inside
 *    hcomm_barrier: the threading contract (hcomm.h) allows one thread at a
 *    time ..."). It is still the program's bug: the refusal is local, and
 *    the ranks' collectives on a communicator must be issued in one order on
 *    every rank. A blocking call keeps the process until it returns: it
 *    must not wait for something only another thread of this process would
 *    post (that thread is refused until then). The exceptions are hcomm's
 *    own threads: the progress thread (stream-ordered calls below,
 *    HCOMM_PROGRESS_THREAD) and rank 0's bootstrap service thread (it
 *    forwards other ranks' connection handshakes while rank 0's
 *    application is outside hcomm; HCOMM_BOOTSTRAP_SERVICE). They enter
 *    only when the library is free, and only for a non-blocking post, test
 *    or bootstrap pass, never across a wait; a call that finds one inside
 *    waits for it to leave (microseconds; bounded by HCOMM_TIMEOUT) instead
 *    of being refused, and the progress thread never enters while a group
 *    is open. Exempt, from any thread between
 *    hcomm_init() and hcomm_finalize(): hcomm_comm_abort() (a watchdog),
 *    hcomm_comm_rank(), hcomm_comm_size(), hcomm_comm_world(),
 *    hcomm_initialized(), hcomm_topology_hint_create/set_dim/set_size/free,
 *    the memory calls (hcomm_mem_alloc/free/deregister: the pool is
 *    thread-safe), hcomm_strerror(), hcomm_last_error() (per thread),
 *    hcomm_dtype_size(), hcomm_version_string() and (any time)
 *    hcomm_bootstrap_address().
 *  - Request handles (hcomm_request_t) are opaque values, not pointers, and
 *    carry a generation: once its request completes (hcomm_wait(), a
 *    hcomm_test() that says done, hcomm_finalize()) a handle is stale, and
 *    any later use of it returns ERR_INVALID ("... is stale"), never
 *    another request's completion.
 *  - Non-blocking calls (hcomm_i*) return HCOMM_OK once the operation is
 *    posted; the buffers belong to the library until hcomm_wait() or a
 *    successful hcomm_test() completes the request.
 */
#ifndef HCOMM_H
#define HCOMM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this header. The one place the version is written is
 * CMakeLists.txt (project(hcomm VERSION ...)): configuring fails when these
 * differ from it, and hcomm_version(), hcomm_info --version, hcomm.pc, the
 * .deb and Python's hcomm.__version__ all come from it (test
 * version_agree). */
#define HCOMM_VERSION_MAJOR 0
#define HCOMM_VERSION_MINOR 1
#define HCOMM_VERSION_PATCH 0

/* X(name, value, description): the one list of status codes and their text. */
#define HCOMM_STATUS_MAP(X)                                                                        \
    X(OK, 0, "success")                                                                            \
    X(IN_PROGRESS, 1, "operation in progress")                                                     \
    X(ERR_INVALID, -1, "invalid argument")                                                         \
    X(ERR_TIMEOUT, -2, "timed out waiting for a peer")                                             \
    X(ERR_PEER_FAILED, -3, "a peer process failed or closed its connection")                       \
    X(ERR_NO_MEMORY, -4, "out of memory")                                                          \
    X(ERR_NOT_INITIALIZED, -5, "hcomm is not initialized (call hcomm_init first)")                 \
    X(ERR_ALREADY_INITIALIZED, -6, "hcomm is already initialized")                                 \
    X(ERR_UNSUPPORTED, -7, "operation not supported by this transport or build")                   \
    X(ERR_TRUNCATED, -8, "message size does not match the receive buffer")                         \
    X(ERR_IO, -9, "system call or device error")                                                   \
    X(ERR_BOOTSTRAP, -10, "bootstrap (rendezvous) failed")                                         \
    X(ERR_NO_DEVICE, -11, "no usable transport")                                                   \
    X(ERR_AGAIN, -12, "resource temporarily unavailable, retry")                                   \
    X(ERR_ABORTED, -13, "communicator was aborted")                                                \
    X(ERR_INTERNAL, -14, "internal error (a bug in hcomm)")                                        \
    X(ERR_REVOKED, -15, "communicator was revoked (hcomm_comm_revoke): shrink or free it")

typedef enum {
#define HCOMM_STATUS_ENUM_(name, value, text) HCOMM_##name = value,
    HCOMM_STATUS_MAP(HCOMM_STATUS_ENUM_)
#undef HCOMM_STATUS_ENUM_
} hcomm_status_t;

typedef enum {
    HCOMM_INT8,
    HCOMM_UINT8,
    HCOMM_INT32,
    HCOMM_UINT32,
    HCOMM_INT64,
    HCOMM_UINT64,
    HCOMM_FLOAT16,  /* IEEE 754 binary16 */
    HCOMM_BFLOAT16, /* bfloat16: the upper half of a binary32 */
    HCOMM_FLOAT32,
    HCOMM_FLOAT64,
    HCOMM_DTYPE_COUNT /* not a type: the number of types */
} hcomm_dtype_t;

typedef enum {
    HCOMM_SUM,
    HCOMM_PROD,
    HCOMM_MAX,
    HCOMM_MIN,
    HCOMM_AVG, /* sum / communicator size; integers: truncating division of the wrapped sum */
    HCOMM_OP_COUNT /* not an op: the number of ops */
} hcomm_op_t;

typedef struct hcomm_comm *hcomm_comm_t;
/* An opaque handle with a generation (see above): compare it with NULL
 * only; it is not the address of anything. */
typedef struct hcomm_request *hcomm_request_t;
/* A stream of the active GPU backend: a cudaStream_t (CUstream) cast to
 * hcomm_stream_t for CUDA, a model stream in hcomm's tests. hcomm never
 * creates or destroys it. */
typedef struct hcomm_stream *hcomm_stream_t;

/* ---------------------------------------------------------------------------
 * Setup and teardown
 * ------------------------------------------------------------------------- */

/* Joins the job described by the environment (hcommrun's HCOMM_* variables,
 * torchrun's RANK/WORLD_SIZE/..., Open MPI's OMPI_COMM_WORLD_*, Slurm's
 * SLURM_PROCID/...; none of them: a job of one rank), runs the rendezvous,
 * opens the transports and creates the world communicator. argc/argv may be
 * NULL; they are not modified. Errors: ERR_ALREADY_INITIALIZED, ERR_BOOTSTRAP,
 * ERR_TIMEOUT, ERR_NO_DEVICE, ERR_NO_MEMORY (the message of a pool that
 * does not fit an address-space limit, ulimit -v, names the limit and the
 * HCOMM_MEM_POOL_MAX_SIZE that fits). One thread: a call while another
 * thread is inside hcomm fails with ERR_INVALID (threading contract). */
hcomm_status_t hcomm_init(int *argc, char ***argv);

/* A job from a rendezvous of the caller's own (a framework's key-value
 * store, like ncclGetUniqueId + ncclCommInitRank): rank 0 calls
 * hcomm_bootstrap_address() and hands the two strings to every rank through
 * the store; every rank then calls hcomm_init_rank() with them. */
typedef struct {
    int rank, size;             /* this rank, the job's ranks */
    int local_rank, local_size; /* among the ranks of its node; -1: let hcomm find out */
    const char *bootstrap;      /* the same on every rank: "tcp://host:port" (rank 0 listens
                                   there) or "file:///shared/dir"; NULL or "" for size 1 */
    const char *job_key;        /* the same on every rank (NULL: none): ranks of other jobs
                                   that reach the address are refused */
} hcomm_init_params_t;
hcomm_status_t hcomm_init_rank(const hcomm_init_params_t *params);
/* An address rank 0 can listen on ("tcp://<this host's address>:<a free
 * port>", url_len >= 64) and a fresh random job key (key_len >= 33). */
hcomm_status_t hcomm_bootstrap_address(char *url, size_t url_len, char *key, size_t key_len);

/* Releases every resource of the library. Communicators not freed are freed;
 * pending requests are cancelled. hcomm_init() may be called again after it.
 * Errors: ERR_NOT_INITIALIZED. */
hcomm_status_t hcomm_finalize(void);

/* 1 between hcomm_init() and hcomm_finalize(), else 0. Any thread. */
int hcomm_initialized(void);

/* The communicator of all ranks of the job; NULL before hcomm_init(). Owned
 * by the library: do not pass it to hcomm_comm_free(). */
hcomm_comm_t hcomm_comm_world(void);

/* This process's rank in comm, or -1 (and last_error set) for a bad comm.
 * Any thread, also while another is inside hcomm (the communicator is
 * looked up under a lock). */
int hcomm_comm_rank(hcomm_comm_t comm);

/* The number of ranks in comm, or -1 (and last_error set) for a bad comm.
 * Any thread, like hcomm_comm_rank(). */
int hcomm_comm_size(hcomm_comm_t comm);

/* Collective over comm: ranks passing the same color form a new
 * communicator, ordered by (key, rank in comm). A negative color
 * (HCOMM_UNDEFINED) takes part in the call and receives NULL. The new
 * communicator belongs to the caller: release it with hcomm_comm_free().
 * Errors: ERR_INVALID (comm, newcomm_p), ERR_NO_MEMORY, ERR_PEER_FAILED,
 * ERR_TIMEOUT. */
#define HCOMM_UNDEFINED (-1)
hcomm_status_t hcomm_comm_split(hcomm_comm_t comm, int color, int key, hcomm_comm_t *newcomm_p);

/* Collective over the listed ranks of comm only (the others do not call it;
 * MPI_Comm_create_group): a communicator of ranks[0..n-1], in that order
 * (every member passes the same list). tag (>= 0) tells apart creations
 * that may run at the same time on overlapping members. Errors:
 * ERR_INVALID (comm, ranks out of range or twice, this rank not listed,
 * n, tag, newcomm_p), ERR_NO_MEMORY, ERR_PEER_FAILED, ERR_TIMEOUT. */
hcomm_status_t hcomm_comm_create_group(hcomm_comm_t comm, const int *ranks, int n, int tag,
                                       hcomm_comm_t *newcomm_p);

/* Releases a communicator created by hcomm_comm_split() or
 * hcomm_comm_create_group(). Local: needs no other
 * rank. Errors: ERR_INVALID (NULL, world, already freed). */
hcomm_status_t hcomm_comm_free(hcomm_comm_t comm);

/* ---- topology hints ---------------------------------------------------------
 * A hint describes how an application arranges its ranks, today a
 * Cartesian grid (data x tensor x pipeline parallelism, a 2-D stencil), so
 * that hcomm can give it a communicator whose rank order matches the
 * machine: in the communicator made by hcomm_comm_create_from_hint(), rank
 * r sits at the grid coordinates of r in row-major order (the last dimension
 * varies fastest), and ranks are placed so that runs along the last
 * dimension stay inside a node, then inside a switch (docs/topology.md):
 * with 8 nodes x 8 ranks and an 8 x 8 grid, every row is one node, whatever
 * the launcher's numbering. HCOMM_TOPO=off keeps comm's order.
 *
 *     hcomm_topology_hint_t h;
 *     hcomm_topology_hint_create(world, &h);
 *     hcomm_topology_hint_set_dim(h, 2);
 *     hcomm_topology_hint_set_size(h, 0, 8);   // rows
 *     hcomm_topology_hint_set_size(h, 1, 8);   // ranks per row
 *     hcomm_comm_create_from_hint(world, h, &grid);
 *     hcomm_topology_hint_free(h);
 *     // row = hcomm_comm_rank(grid) / 8, column = hcomm_comm_rank(grid) % 8
 *
 * A hint is local to the rank that made it (every rank makes its own, with
 * the same dimensions). Errors name the argument: ERR_INVALID for a NULL
 * hint, a dimension count outside 1..HCOMM_HINT_MAX_DIMS, a dimension
 * index or size out of range, sizes not set, or a grid whose size is not
 * comm's. */
#define HCOMM_HINT_MAX_DIMS 8
typedef struct hcomm_topology_hint *hcomm_topology_hint_t;
hcomm_status_t hcomm_topology_hint_create(hcomm_comm_t comm, hcomm_topology_hint_t *hint_p);
hcomm_status_t hcomm_topology_hint_set_dim(hcomm_topology_hint_t hint, int ndims);
hcomm_status_t hcomm_topology_hint_set_size(hcomm_topology_hint_t hint, int dim, int n);
hcomm_status_t hcomm_topology_hint_free(hcomm_topology_hint_t hint);
/* Collective over comm (every rank passes a hint of the same grid): a new
 * communicator of comm's ranks in the grid's order (above); release it
 * with hcomm_comm_free(). Errors as hcomm_comm_split's, and ERR_INVALID
 * for a hint of another communicator or a grid that does not fit. */
hcomm_status_t hcomm_comm_create_from_hint(hcomm_comm_t comm, hcomm_topology_hint_t hint,
                                           hcomm_comm_t *newcomm_p);

/* Makes every pending and later operation on comm return ERR_ABORTED
 * promptly, without needing the other ranks. May be called from any thread,
 * e.g. a watchdog; never ends the process. The communicator must still be
 * released with hcomm_comm_free() (world: by hcomm_finalize()). */
hcomm_status_t hcomm_comm_abort(hcomm_comm_t comm);

/* ---- surviving failures: revoke and shrink ------------------------------------
 * After a member fails (ERR_PEER_FAILED naming it), the survivors can go on
 * without restarting (MPI ULFM's MPI_Comm_revoke/MPI_Comm_shrink, NCCL's
 * ncclCommRevoke/ncclCommShrink):
 *
 *     if (st == HCOMM_ERR_PEER_FAILED) {
 *         hcomm_comm_revoke(comm);           // nobody stays blocked on comm
 *         hcomm_comm_shrink(comm, &smaller); // the survivors, agreed
 *         hcomm_comm_free(comm);             // (not world: it stays till finalize)
 *         comm = smaller;                    // go on with it
 *     }
 *
 * hcomm_comm_revoke: every member's pending and later operations on comm
 * (point-to-point and collective) fail with ERR_REVOKED, at once, naming
 * the rank that revoked it; this rank's now, the others' as soon as they
 * poll. Local and non-blocking; idempotent. comm stays valid for
 * hcomm_comm_shrink and hcomm_comm_free. Called from the thread that uses
 * hcomm (hcomm_comm_abort is the any-thread, local variant).
 *
 * hcomm_comm_shrink: collective over the members of comm that are alive
 * (every one of them must call it; the dead ones need not): a new
 * communicator of exactly the members that the survivors agree are alive,
 * in comm's rank order, with a context id every one of them agrees on. The
 * agreement holds while more members fail during it (the survivors of
 * those failures agree among themselves; coll/coll_shrink.c has the
 * protocol). comm may be revoked, aborted or broken. Shrink a given
 * communicator at most once; the next failure is shrunk on the new one.
 * Errors: ERR_INVALID (bad arguments, inside a group), ERR_TIMEOUT (no
 * agreement within HCOMM_TIMEOUT: the survivors cannot reach each other). */
hcomm_status_t hcomm_comm_revoke(hcomm_comm_t comm);
hcomm_status_t hcomm_comm_shrink(hcomm_comm_t comm, hcomm_comm_t *newcomm_p);

/* ---------------------------------------------------------------------------
 * Errors
 * ------------------------------------------------------------------------- */

/* A constant string naming status; "unknown status" for values not in the
 * map. Any thread. */
const char *hcomm_strerror(hcomm_status_t status);

/* The calling thread's last failure message ("" if none yet), e.g.
 * "hcomm_broadcast: root 5 out of range for a communicator of 2 ranks".
 * Valid until the thread's next failing hcomm call. Any thread. */
const char *hcomm_last_error(void);

/* Size in bytes of one element of dtype, or 0 for an unknown dtype. */
size_t hcomm_dtype_size(hcomm_dtype_t dtype);

/* ---------------------------------------------------------------------------
 * Point-to-point. Messages between a pair of ranks with the same tag on the
 * same communicator arrive in the order they were sent. tag must be >= 0;
 * peer must be a rank of comm (it may be the caller itself). count may be 0.
 * A receive buffer smaller than the matched message fails with
 * ERR_TRUNCATED. Buffers are any memory; pool memory from hcomm_mem_alloc()
 * avoids copies.
 *
 * Receives may name HCOMM_ANY_SOURCE as the peer (MPI_ANY_SOURCE): the
 * first message with the tag from any rank of comm matches, in arrival
 * order; hcomm_recv_any() / hcomm_irecv_any() also tell which rank sent it.
 * Messages of one sender still match in the order it sent them. While such
 * a receive waits, the failure of any member of comm fails it
 * (ERR_PEER_FAILED naming the member), since that member may have been the
 * sender.
 * ------------------------------------------------------------------------- */

/* A receive's peer: whichever rank's message comes first. */
#define HCOMM_ANY_SOURCE (-1)

/* Sends count elements; returns when buf may be reused. */
hcomm_status_t hcomm_send(const void *buf, size_t count, hcomm_dtype_t dtype, int peer, int tag,
                          hcomm_comm_t comm);

/* Receives exactly count elements from (peer, tag). */
hcomm_status_t hcomm_recv(void *buf, size_t count, hcomm_dtype_t dtype, int peer, int tag,
                          hcomm_comm_t comm);

/* Non-blocking send/receive: *req_p is set on success and must be completed
 * with hcomm_wait() or hcomm_test(). */
hcomm_status_t hcomm_isend(const void *buf, size_t count, hcomm_dtype_t dtype, int peer, int tag,
                           hcomm_comm_t comm, hcomm_request_t *req_p);
hcomm_status_t hcomm_irecv(void *buf, size_t count, hcomm_dtype_t dtype, int peer, int tag,
                           hcomm_comm_t comm, hcomm_request_t *req_p);

/* Receives from any rank of comm (HCOMM_ANY_SOURCE) and writes the sender's
 * rank in comm to *source_p (may be NULL). The non-blocking form writes
 * *source_p when the message is matched: read it after hcomm_wait() or a
 * hcomm_test() that says done (it stays HCOMM_ANY_SOURCE if the receive
 * failed before it matched); *source_p must stay valid until then. */
hcomm_status_t hcomm_recv_any(void *buf, size_t count, hcomm_dtype_t dtype, int tag,
                              hcomm_comm_t comm, int *source_p);
hcomm_status_t hcomm_irecv_any(void *buf, size_t count, hcomm_dtype_t dtype, int tag,
                               hcomm_comm_t comm, int *source_p, hcomm_request_t *req_p);

/* Waits for req to complete and frees it; returns the operation's status.
 * Errors: ERR_INVALID (NULL, not a handle, or stale: its request already
 * completed, even if its slot now serves another request, which is left
 * alone), the operation's own error, ERR_TIMEOUT (the request is then freed
 * too). */
hcomm_status_t hcomm_wait(hcomm_request_t req);

/* Makes progress without blocking. *done_p = 1 when req completed (it is then
 * freed and the operation's status returned), 0 otherwise (HCOMM_OK).
 * Errors: ERR_INVALID (NULL, not a handle or stale, as hcomm_wait(); NULL
 * done_p), and *done_p is then left alone. */
hcomm_status_t hcomm_test(hcomm_request_t req, int *done_p);

/* ---------------------------------------------------------------------------
 * Memory
 * ------------------------------------------------------------------------- */

/* Allocates bytes (> 0) of pool memory: on hugepages when reserved, bound to
 * the rank's NUMA node, registered with every transport, 64-byte aligned.
 * Tensors here travel with the fewest copies. Free with hcomm_mem_free().
 * These three memory calls may run on any thread, also while another is
 * inside hcomm. Errors: ERR_INVALID (bytes 0, NULL ptr_p), ERR_NO_MEMORY. */
hcomm_status_t hcomm_mem_alloc(size_t bytes, void **ptr_p);

/* Frees memory from hcomm_mem_alloc(). NULL is a no-op. Errors: ERR_INVALID
 * for a pointer hcomm_mem_alloc() did not return (nothing is freed). */
hcomm_status_t hcomm_mem_free(void *ptr);

/* Drops any cached registration of user memory in [ptr, ptr+bytes). The
 * library sees munmap/mremap/madvise/free of mapped chunks itself (memory
 * hooks, docs/mem.md); call this before releasing a buffer the hooks cannot
 * see (a raw syscall, HCOMM_MEM_HOOKS=0). Never fails for memory it did not
 * cache. */
hcomm_status_t hcomm_mem_deregister(void *ptr, size_t bytes);

/* Device memory, for benchmarks and tests (`-m device`): bytes (> 0) on
 * device `device` of the active GPU backend (docs/gpu.md; the model of a GPU
 * in the test library, HCOMM_GPU_MODEL=1), and its free. Every call of this
 * API accepts device buffers (staged through host memory for now). A CUDA
 * program allocates with cudaMalloc as ever. Errors: ERR_UNSUPPORTED naming
 * why when no GPU backend is active, ERR_INVALID (bytes 0, NULL ptr_p, a
 * device out of range, a pointer not from here), ERR_NOT_INITIALIZED. */
hcomm_status_t hcomm_mem_alloc_device(int device, size_t bytes, void **ptr_p);
hcomm_status_t hcomm_mem_free_device(void *ptr);
/* Copies n bytes from src to dst, each host or device memory, through the
 * active GPU backend (memmove for host to host): how a program without its
 * own GPU runtime fills and reads device buffers. Synchronous. */
hcomm_status_t hcomm_memcpy(void *dst, const void *src, size_t n);

/* ---------------------------------------------------------------------------
 * Collectives. Every rank of comm calls them in the same order with the same
 * count, dtype, op and root. In place when sendbuf == recvbuf (allgather:
 * sendbuf == recvbuf + rank*sendcount*size; reduce_scatter: recvbuf ==
 * sendbuf + rank*recvcount*size). Send and receive buffers that share bytes
 * in any other way (partly overlapping, or in place at the wrong offset)
 * fail with ERR_INVALID naming both: the result would depend on the
 * algorithm's order. count == 0 is a valid no-op. fp16/bf16 are
 * reduced with fp32 accumulation within each step and rounded to nearest
 * even; integer overflow wraps. Errors: ERR_INVALID (argument named in
 * last_error), ERR_PEER_FAILED, ERR_TIMEOUT, ERR_ABORTED, ERR_NO_MEMORY.
 * ------------------------------------------------------------------------- */

/* recvbuf = op over ranks of sendbuf (count elements) on every rank. */
hcomm_status_t hcomm_allreduce(const void *sendbuf, void *recvbuf, size_t count,
                               hcomm_dtype_t dtype, hcomm_op_t op, hcomm_comm_t comm);
/* buf on root is copied to buf on every rank. */
hcomm_status_t hcomm_broadcast(void *buf, size_t count, hcomm_dtype_t dtype, int root,
                               hcomm_comm_t comm);
/* recvbuf on root = op over ranks of sendbuf; recvbuf is ignored elsewhere
 * (may be NULL there). */
hcomm_status_t hcomm_reduce(const void *sendbuf, void *recvbuf, size_t count, hcomm_dtype_t dtype,
                            hcomm_op_t op, int root, hcomm_comm_t comm);
/* recvbuf (size*sendcount elements) = sendbuf of rank 0, rank 1, ... */
hcomm_status_t hcomm_allgather(const void *sendbuf, void *recvbuf, size_t sendcount,
                               hcomm_dtype_t dtype, hcomm_comm_t comm);
/* recvbuf (recvcount elements) = block `rank` of op over ranks of sendbuf
 * (size*recvcount elements). */
hcomm_status_t hcomm_reduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                    hcomm_dtype_t dtype, hcomm_op_t op, hcomm_comm_t comm);
/* Block j of sendbuf (count elements per peer) goes to rank j, landing in
 * block `rank` of its recvbuf. In place when sendbuf == recvbuf. */
hcomm_status_t hcomm_alltoall(const void *sendbuf, void *recvbuf, size_t count,
                              hcomm_dtype_t dtype, hcomm_comm_t comm);
/* Returns once every rank of comm has entered it. */
hcomm_status_t hcomm_barrier(hcomm_comm_t comm);

/* Non-blocking twins: same arguments plus the request, completed by
 * hcomm_wait()/hcomm_test(). Several may be outstanding on one communicator;
 * they complete in any order the caller waits for them. */
hcomm_status_t hcomm_iallreduce(const void *sendbuf, void *recvbuf, size_t count,
                                hcomm_dtype_t dtype, hcomm_op_t op, hcomm_comm_t comm,
                                hcomm_request_t *req_p);
hcomm_status_t hcomm_ibroadcast(void *buf, size_t count, hcomm_dtype_t dtype, int root,
                                hcomm_comm_t comm, hcomm_request_t *req_p);
hcomm_status_t hcomm_ireduce(const void *sendbuf, void *recvbuf, size_t count, hcomm_dtype_t dtype,
                             hcomm_op_t op, int root, hcomm_comm_t comm, hcomm_request_t *req_p);
hcomm_status_t hcomm_iallgather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                hcomm_dtype_t dtype, hcomm_comm_t comm, hcomm_request_t *req_p);
hcomm_status_t hcomm_ireduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                     hcomm_dtype_t dtype, hcomm_op_t op, hcomm_comm_t comm,
                                     hcomm_request_t *req_p);
hcomm_status_t hcomm_ialltoall(const void *sendbuf, void *recvbuf, size_t count,
                               hcomm_dtype_t dtype, hcomm_comm_t comm, hcomm_request_t *req_p);
hcomm_status_t hcomm_ibarrier(hcomm_comm_t comm, hcomm_request_t *req_p);

/* Rooted and vector collectives. Counts and displacements are in elements.
 * The vector forms read their arrays during the call only (they are
 * copied): a non-blocking caller may reuse them once the call returns.
 *
 * gather: recvbuf on root (size*count elements) = sendbuf of rank 0, 1, ...;
 *   recvbuf is ignored elsewhere. In place on root when sendbuf ==
 *   recvbuf + root*count.
 * scatter: block j of sendbuf on root (size*count elements) lands in recvbuf
 *   of rank j; sendbuf is ignored elsewhere. In place on root when recvbuf ==
 *   sendbuf + root*count.
 * allgatherv: rank j's sendbuf (recvcounts[j] elements; sendcount must equal
 *   recvcounts[rank]) lands at recvbuf + displs[j] on every rank. In place
 *   when sendbuf == recvbuf + displs[rank]. recvcounts and displs must be
 *   the same on every rank.
 * reduce_scatterv: sendbuf holds size blocks in rank order, block j of
 *   recvcounts[j] elements; recvbuf (recvcounts[rank] elements) = op over
 *   ranks of block `rank`. recvcounts must be the same on every rank. In
 *   place when recvbuf == sendbuf + recvcounts[0] + ... + recvcounts[rank-1]
 *   elements (this rank's block).
 * alltoallv: sendcounts[j] elements at sendbuf + sdispls[j] go to rank j,
 *   landing at its recvbuf + rdispls[rank]; recvcounts[j] must equal rank
 *   j's sendcounts[rank] (a mismatch fails with ERR_TRUNCATED). Not in place:
 *   no send block may overlap a receive block.
 * Counts of zero are allowed anywhere; every rank must still call. Every
 * block must lie in the address space: (displs[j] + counts[j]) * size at
 * most PTRDIFF_MAX bytes, and the buffer plus that not wrapping around; the
 * receive blocks must not overlap each other (allgatherv's sendbuf only at
 * its in-place position). Errors name the array and the index
 * ("hcomm_allgatherv: displs[0] = ... overflows"). */
hcomm_status_t hcomm_gather(const void *sendbuf, void *recvbuf, size_t count, hcomm_dtype_t dtype,
                            int root, hcomm_comm_t comm);
hcomm_status_t hcomm_scatter(const void *sendbuf, void *recvbuf, size_t count,
                             hcomm_dtype_t dtype, int root, hcomm_comm_t comm);
hcomm_status_t hcomm_allgatherv(const void *sendbuf, size_t sendcount, void *recvbuf,
                                const size_t *recvcounts, const size_t *displs,
                                hcomm_dtype_t dtype, hcomm_comm_t comm);
hcomm_status_t hcomm_reduce_scatterv(const void *sendbuf, void *recvbuf, const size_t *recvcounts,
                                     hcomm_dtype_t dtype, hcomm_op_t op, hcomm_comm_t comm);
hcomm_status_t hcomm_alltoallv(const void *sendbuf, const size_t *sendcounts,
                               const size_t *sdispls, void *recvbuf, const size_t *recvcounts,
                               const size_t *rdispls, hcomm_dtype_t dtype, hcomm_comm_t comm);
hcomm_status_t hcomm_igather(const void *sendbuf, void *recvbuf, size_t count,
                             hcomm_dtype_t dtype, int root, hcomm_comm_t comm,
                             hcomm_request_t *req_p);
hcomm_status_t hcomm_iscatter(const void *sendbuf, void *recvbuf, size_t count,
                              hcomm_dtype_t dtype, int root, hcomm_comm_t comm,
                              hcomm_request_t *req_p);
hcomm_status_t hcomm_iallgatherv(const void *sendbuf, size_t sendcount, void *recvbuf,
                                 const size_t *recvcounts, const size_t *displs,
                                 hcomm_dtype_t dtype, hcomm_comm_t comm, hcomm_request_t *req_p);
hcomm_status_t hcomm_ireduce_scatterv(const void *sendbuf, void *recvbuf,
                                      const size_t *recvcounts, hcomm_dtype_t dtype,
                                      hcomm_op_t op, hcomm_comm_t comm, hcomm_request_t *req_p);
hcomm_status_t hcomm_ialltoallv(const void *sendbuf, const size_t *sendcounts,
                                const size_t *sdispls, void *recvbuf, const size_t *recvcounts,
                                const size_t *rdispls, hcomm_dtype_t dtype, hcomm_comm_t comm,
                                hcomm_request_t *req_p);

/* Collectives issued between hcomm_group_start() and hcomm_group_end() are
 * launched together at hcomm_group_end() (small allreduces of one comm,
 * dtype and op are fused into one). Blocking collectives inside a group
 * return HCOMM_OK at once and complete by hcomm_group_end(), which waits for
 * them; non-blocking ones complete through their requests. Groups nest; only
 * the outermost end launches. A group belongs to the process, not to the
 * thread that started it (threads taking turns add to the same group).
 * Errors: ERR_INVALID (end without start). */
hcomm_status_t hcomm_group_start(void);
hcomm_status_t hcomm_group_end(void);

/* ---------------------------------------------------------------------------
 * Stream-ordered calls (NCCL's model; docs/gpu.md "Stream-ordered calls")
 *
 * Each collective and send/recv has a _stream variant: the same arguments,
 * then the stream last (after comm, as ncclAllReduce(..., comm, stream)).
 * It returns at once, having queued the operation on the stream: the
 * operation starts once the work enqueued on the stream before it is done
 * (its inputs are ready), and the work enqueued after it waits until it is
 * complete (its outputs are written). Buffers may be device or host memory
 * (device memory is staged through host memory, as for the plain calls);
 * they belong to the library until the stream has passed the operation.
 * Rules:
 *  - every rank must issue a communicator's operations in the same order;
 *    stream-ordered ones are posted in the order of the calls, whatever
 *    their streams (so work that makes an earlier call's stream wait for a
 *    later call's stream deadlocks until HCOMM_TIMEOUT);
 *  - a plain (host) call on the same communicator is not ordered with
 *    pending stream-ordered ones: synchronize the stream first;
 *  - mechanism: the stream gets a write of a flag in pinned host memory
 *    ("inputs ready") and a wait on a second flag that hcomm's progress
 *    thread writes when the operation is complete; no host thread blocks
 *    in a stream callback. The thread starts on the first stream-ordered
 *    call (HCOMM_PROGRESS_THREAD=1: at hcomm_init; =0: these calls fail
 *    with ERR_UNSUPPORTED) and stops at hcomm_finalize;
 *  - errors found at the call (not initialized, bad communicator, stream
 *    NULL, no GPU backend (ERR_UNSUPPORTED), bad dtype or peer, more than
 *    1024 operations pending (ERR_AGAIN)) are returned by it, nothing
 *    queued. Errors found later (the full argument checks, a peer that
 *    died, a device copy that failed, inputs not ready within
 *    HCOMM_TIMEOUT) become the communicator's asynchronous error: the
 *    failed operation's completion flag is still written, so the stream
 *    goes on (its outputs are not valid), later stream-ordered operations on
 *    the communicator are not run, and the next stream-ordered call on it
 *    returns the error. hcomm_comm_get_async_error() reads it;
 *  - inside hcomm_group_start()/hcomm_group_end() the stream-ordered calls
 *    are queued as one operation at the outermost end (one communicator
 *    and one stream per group); host calls in the same group run at the
 *    end as usual;
 *  - hcomm_comm_free() refuses a communicator with stream-ordered
 *    operations pending; hcomm_finalize() fails pending ones (flags written).
 * Thread safety: the threading contract above (one thread at a time).
 * ------------------------------------------------------------------------- */
hcomm_status_t hcomm_allreduce_stream(const void *sendbuf, void *recvbuf, size_t count,
                                      hcomm_dtype_t dtype, hcomm_op_t op, hcomm_comm_t comm,
                                      hcomm_stream_t stream);
hcomm_status_t hcomm_broadcast_stream(void *buf, size_t count, hcomm_dtype_t dtype, int root,
                                      hcomm_comm_t comm, hcomm_stream_t stream);
hcomm_status_t hcomm_reduce_stream(const void *sendbuf, void *recvbuf, size_t count,
                                   hcomm_dtype_t dtype, hcomm_op_t op, int root,
                                   hcomm_comm_t comm, hcomm_stream_t stream);
hcomm_status_t hcomm_allgather_stream(const void *sendbuf, void *recvbuf, size_t sendcount,
                                      hcomm_dtype_t dtype, hcomm_comm_t comm,
                                      hcomm_stream_t stream);
hcomm_status_t hcomm_reduce_scatter_stream(const void *sendbuf, void *recvbuf, size_t recvcount,
                                           hcomm_dtype_t dtype, hcomm_op_t op, hcomm_comm_t comm,
                                           hcomm_stream_t stream);
hcomm_status_t hcomm_alltoall_stream(const void *sendbuf, void *recvbuf, size_t count,
                                     hcomm_dtype_t dtype, hcomm_comm_t comm,
                                     hcomm_stream_t stream);
hcomm_status_t hcomm_barrier_stream(hcomm_comm_t comm, hcomm_stream_t stream);
hcomm_status_t hcomm_gather_stream(const void *sendbuf, void *recvbuf, size_t count,
                                   hcomm_dtype_t dtype, int root, hcomm_comm_t comm,
                                   hcomm_stream_t stream);
hcomm_status_t hcomm_scatter_stream(const void *sendbuf, void *recvbuf, size_t count,
                                    hcomm_dtype_t dtype, int root, hcomm_comm_t comm,
                                    hcomm_stream_t stream);
/* The arrays are copied during the call. */
hcomm_status_t hcomm_allgatherv_stream(const void *sendbuf, size_t sendcount, void *recvbuf,
                                       const size_t *recvcounts, const size_t *displs,
                                       hcomm_dtype_t dtype, hcomm_comm_t comm,
                                       hcomm_stream_t stream);
hcomm_status_t hcomm_reduce_scatterv_stream(const void *sendbuf, void *recvbuf,
                                            const size_t *recvcounts, hcomm_dtype_t dtype,
                                            hcomm_op_t op, hcomm_comm_t comm,
                                            hcomm_stream_t stream);
hcomm_status_t hcomm_alltoallv_stream(const void *sendbuf, const size_t *sendcounts,
                                      const size_t *sdispls, void *recvbuf,
                                      const size_t *recvcounts, const size_t *rdispls,
                                      hcomm_dtype_t dtype, hcomm_comm_t comm,
                                      hcomm_stream_t stream);
hcomm_status_t hcomm_send_stream(const void *buf, size_t count, hcomm_dtype_t dtype, int peer,
                                 int tag, hcomm_comm_t comm, hcomm_stream_t stream);
hcomm_status_t hcomm_recv_stream(void *buf, size_t count, hcomm_dtype_t dtype, int peer, int tag,
                                 hcomm_comm_t comm, hcomm_stream_t stream);
/* *status_p = the communicator's asynchronous error (HCOMM_OK: none): the
 * first failure of a stream-ordered operation on it; when not OK,
 * hcomm_last_error() gives its message, naming the operation. Sticky until
 * the communicator is freed. Errors: ERR_INVALID (comm, status_p NULL). */
hcomm_status_t hcomm_comm_get_async_error(hcomm_comm_t comm, hcomm_status_t *status_p);

/* ---------------------------------------------------------------------------
 * Introspection
 * ------------------------------------------------------------------------- */

/* "hcomm 0.1.0 (drivers: shm tcp; ...)". Any thread. */
const char *hcomm_version_string(void);
/* The library's version, "MAJOR.MINOR.PATCH" ("0.1.0"): that of the library
 * loaded, which a program built against another header may compare with
 * HCOMM_VERSION_*. Any thread, before hcomm_init too. */
const char *hcomm_version(void);

/* Writes this rank's statistics now (HCOMM_STATS=1 or 2; docs/observability.md):
 * the table on stderr and, with HCOMM_STATS_FILE, a report of JSON lines
 * (numbered: the last one of each rank is what hcomm_stats merges). comm
 * NULL: this rank alone, at once. comm given: collective over comm, every
 * rank reports after a barrier (the barrier is not counted), so the ranks'
 * reports describe the same point of the program. With statistics off it
 * reports nothing and returns HCOMM_OK. Errors: ERR_INVALID (comm freed or
 * not a communicator), the barrier's. */
hcomm_status_t hcomm_stats_dump(hcomm_comm_t comm);

#ifdef __cplusplus
}
#endif
#endif /* HCOMM_H */
