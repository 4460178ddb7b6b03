/*
 * Inside the p2p collective family (coll_net.c and the net_*.c files): the
 * helpers every algorithm shares and the algorithms' step functions, which
 * coll_net.c's table registers.
 */
#ifndef HC_COLL_NET_H
#define HC_COLL_NET_H

#include "coll/coll.h"

#include <stdlib.h>
#include <string.h>

#define HC_NET_SMALL_BYTES ((size_t)64 << 10)
#define HC_NET_CHUNK_BYTES ((size_t)1 << 20)
#define HC_NET_WINDOW 8
/* Round-based algorithms post at most this many requests at once. */
#define HC_NET_BATCH (HC_COLL_MAX_REQS / 2)

_Static_assert(2 * HC_NET_WINDOW <= HC_COLL_MAX_REQS, "window fits the request array");

extern uint8_t hc_net_zero; /* the buffer of zero-byte messages */

static inline int hc_net_mod(int a, int n)
{
    a %= n;
    return a < 0 ? a + n : a;
}

/* Element j*len/parts without overflowing for huge len. */
static inline size_t hc_net_split(size_t len, size_t parts, size_t j)
{
    return (len / parts) * j + (len % parts) * j / parts;
}

/* The op's state, sized by its table entry (hc_coll_state). */
static inline int hc_net_alloc(hc_coll_op_t *op)
{
    return hc_coll_state(op) ? HCOMM_OK : HCOMM_ERR_NO_MEMORY;
}

/* dst = op(a, b); last: the final reduction of these elements (AVG divides). */
static inline void hc_net_reduce2(hc_coll_op_t *op, void *dst, const void *a, const void *b,
                                  size_t count, bool last)
{
    const void *srcs[2] = {a, b};
    if (count)
        hc_reduce(dst, srcs, 2, count, op->dtype, op->op,
                  last && op->op == HCOMM_AVG ? op->comm->size : 0);
}

/* A request of op failed with st: returns st with a message naming the
 * collective and the failed peer (or the transport's own reason). */
int hc_net_failed(hc_coll_op_t *op, int st);

/* hc_coll_reqs_test with failures explained. */
static inline hc_step_t hc_net_test(hc_coll_op_t *op)
{
    hc_step_t rc = hc_coll_reqs_test(op);
    return HC_UNLIKELY(rc.st != HCOMM_OK) ? hc_step_fail(hc_net_failed(op, rc.st)) : rc;
}

static inline hcomm_status_t hc_net_send(hc_coll_op_t *op, const void *buf, size_t len, int peer)
{
    return hc_coll_isend(op, len ? buf : &hc_net_zero, len, peer);
}

static inline hcomm_status_t hc_net_recv(hc_coll_op_t *op, void *buf, size_t len, int peer)
{
    return hc_coll_irecv(op, len ? buf : &hc_net_zero, len, peer);
}

/* For the pipelined engines, which track requests one by one: ids[i] names
 * op->reqs[i]. Pops one completed request: 1 (its id in *id_p), 0 when none
 * has completed, or its failure status. */
int hc_net_pop(hc_coll_op_t *op, int32_t *ids, int32_t *id_p);

hcomm_status_t hc_net_post(hc_coll_op_t *op, int32_t *ids, int32_t id, bool send, const void *buf,
                           size_t len, int peer);

/* A windowed pipeline of units (chunks): unit u is received from a peer
 * (its request id 2u), processed once it arrived, in order, and sent on
 * (id 2u + 1) once unit u - lag has been processed (units below lag need
 * nothing: the first step's, sent from the caller's data). At most
 * `window` receives ahead of processing and `window` sends in flight. The
 * ring (reduce-scatter then allgather, lag = chunks per step) and the
 * broadcast chain (lag 0: forward what arrived) are such pipelines; a
 * unit range a rank has no part in starts at its end (the chain's root
 * receives nothing: next_recv = next_proc = nunits). */
typedef struct {
    int nunits, window, lag;
    int next_send, next_recv, next_proc, sends_inflight;
    uint8_t rdone[HC_NET_WINDOW];
    int32_t ids[HC_COLL_MAX_REQS];
} hc_net_pipe_t;

typedef struct {
    hcomm_status_t (*post_send)(hc_coll_op_t *op, void *ctx, int u);
    hcomm_status_t (*post_recv)(hc_coll_op_t *op, void *ctx, int u);
    void (*process)(hc_coll_op_t *op, void *ctx, int u); /* NULL: nothing to do */
} hc_net_pipe_ops_t;

/* Advances the pipeline as far as completed requests allow: done when
 * every unit was processed and sent and no send is in flight. */
hc_step_t hc_net_pipe_run(hc_coll_op_t *op, hc_net_pipe_t *p, const hc_net_pipe_ops_t *ops,
                          void *ctx);

/* State sizes (the table's state_size), by family file. */
size_t hc_net_rd_state(const hc_coll_op_t *op);             /* net_rd.c */
size_t hc_net_tree_reduce_state(const hc_coll_op_t *op);    /* net_tree.c */
size_t hc_net_alltoall_state(const hc_coll_op_t *op);       /* net_direct.c */
size_t hc_net_allreduce_ring_state(const hc_coll_op_t *op); /* net_ring.c */
size_t hc_net_reduce_scatter_ring_state(const hc_coll_op_t *op);
size_t hc_net_allgather_ring_state(const hc_coll_op_t *op);
size_t hc_net_reduce_ring_state(const hc_coll_op_t *op);
size_t hc_net_chain_state(const hc_coll_op_t *op);
/* net_hier*.c (net_hier.h): the pipelines (allreduce, reduce, allgather, reduce_scatter) */
size_t hc_net_hier_state(const hc_coll_op_t *op);
bool hc_net_hier_applies(const hc_coll_op_t *op);
bool hc_net_hier_auto(const hc_coll_op_t *op);
void hc_net_hier_release(hc_coll_op_t *op);
size_t hc_net_hier_seq_state(const hc_coll_op_t *op); /* broadcast, barrier */
void hc_net_hier_seq_release(hc_coll_op_t *op);
bool hc_net_hier_small_auto(const hc_coll_op_t *op);
hc_coll_step_fn hc_net_hier_small_prepare(hc_coll_op_t *op, const char *forced);
bool hc_net_hier_blocks_auto(const hc_coll_op_t *op);
hc_coll_step_fn hc_net_hier_blocks_prepare(hc_coll_op_t *op, const char *forced);
bool hc_net_hier_reduce_auto(const hc_coll_op_t *op);

/* The algorithms, by family file. */
hc_step_t hc_net_allreduce_rd(hc_coll_op_t *op); /* net_rd.c */
hc_step_t hc_net_allgather_rd(hc_coll_op_t *op);
hc_step_t hc_net_allreduce_ring(hc_coll_op_t *op); /* net_ring.c */
hc_step_t hc_net_reduce_scatter_ring(hc_coll_op_t *op);
hc_step_t hc_net_allgather_ring(hc_coll_op_t *op);
hc_step_t hc_net_reduce_ring(hc_coll_op_t *op);
hc_step_t hc_net_broadcast_chain(hc_coll_op_t *op);
hc_step_t hc_net_broadcast_tree(hc_coll_op_t *op); /* net_tree.c */
hc_step_t hc_net_reduce_tree(hc_coll_op_t *op);
hc_step_t hc_net_alltoall(hc_coll_op_t *op); /* net_direct.c */
/* net_vector.c */
hc_step_t hc_net_gather(hc_coll_op_t *op);
hc_step_t hc_net_scatter(hc_coll_op_t *op);
hc_step_t hc_net_allgatherv_ring(hc_coll_op_t *op);
size_t hc_net_reduce_scatterv_state(const hc_coll_op_t *op);
hc_step_t hc_net_reduce_scatterv(hc_coll_op_t *op);
hc_step_t hc_net_alltoallv(hc_coll_op_t *op);
hc_step_t hc_net_barrier(hc_coll_op_t *op);
hc_step_t hc_net_allreduce_hier(hc_coll_op_t *op); /* net_hier_slices.c, net_hier_seq.c */
hc_step_t hc_net_broadcast_hier(hc_coll_op_t *op);
hc_step_t hc_net_barrier_hier(hc_coll_op_t *op);
hc_step_t hc_net_reduce_hier(hc_coll_op_t *op);

#endif /* HC_COLL_NET_H */
