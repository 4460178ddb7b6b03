/*
 * The node family on device memory (coll/node.h, docs/gpu.md "Node
 * collectives on device memory"): a large allreduce, reduce, broadcast,
 * gather, scatter, allgather, reduce_scatter or alltoall whose buffers are
 * GPU memory comes down
 * without the API's host staging.
 *
 *   IPC: when every rank's buffers are device memory and every rank maps
 *     every peer's through the node driver's IPC keys (shm: the GPU layer's
 *     ipc_export / ipc_import), the single copy's MAP shape runs on the
 *     device (hc_node_1copy_map_device). Copies and reductions go through
 *     the GPU dispatch; no byte passes through host memory.
 *   Staged: otherwise (a rank with host buffers, an import refused, an
 *     alltoall in place) each rank with device buffers stages them through
 *     a host buffer of its own, two whole copies as the API's staging
 *     would make (hc_node_dev_fall_back), and the region's algorithm runs
 *     on host memory.
 *
 * Under HCOMM_GPU_IPC=1 a collective with device buffers that cannot go by
 * IPC fails on every rank (all see the same votes), naming the rank and why.
 */
#include "coll/node.h"
#include "gpu/gpu.h"

static hcomm_status_t hc_node_dev_fail(const hc_coll_op_t *op, hcomm_status_t st,
                                       const char *what)
{
    return hc_error(st, "%s (%s): %s: %s", hc_coll_name(op->kind), op->algo, what,
                    hc_error_last());
}

/* A fallback's staging (op->tmp); its host buffer is the region's
 * nd->dev_stage. */
typedef struct {
    hc_coll_step_fn inner;   /* the region's algorithm */
    uint8_t *user_out;       /* the device output, or NULL when nothing goes back */
    const uint8_t *host_out; /* where the algorithm leaves it */
    size_t out_bytes;
} hc_node_dev_stage_t;


/* n bytes between this rank's device buffer and its host staging. */
static hcomm_status_t hc_node_dev_stage_copy(const hc_coll_op_t *op, void *dst, const void *src,
                                             size_t n, bool in)
{
    hc_mem_attr_t a;
    hcomm_status_t st = hc_gpu_mem_type(in ? src : dst, n, &a);
    if (st == HCOMM_OK)
        st = in ? hc_gpu_copy(dst, NULL, src, &a, n) : hc_gpu_copy(dst, &a, src, NULL, n);
    if (st != HCOMM_OK)
        return hc_node_dev_fail(op, st, in ? "staging the device input in host memory"
                                           : "copying the result back to device memory");
    if (in) {
        hc_gpu_stats.d2h_copies++;
        hc_gpu_stats.d2h_bytes += n;
    } else {
        hc_gpu_stats.h2d_copies++;
        hc_gpu_stats.h2d_bytes += n;
    }
    return HCOMM_OK;
}

static hc_step_t hc_node_dev_staged(hc_coll_op_t *op)
{
    hc_node_dev_stage_t *ds = op->tmp;
    hc_step_t s = ds->inner(op);
    if (!s.done || s.st != HCOMM_OK || !ds->user_out)
        return s;
    hcomm_status_t st = hc_node_dev_stage_copy(op, ds->user_out, ds->host_out, ds->out_bytes, false);
    return st == HCOMM_OK ? s : hc_step_fail(st);
}

hc_step_t hc_node_dev_fall_back(hc_coll_op_t *op)
{
    if (op->smem == HC_MEM_HOST && op->rmem == HC_MEM_HOST)
        return op->step(op);
    size_t sn, rn;
    hc_node_extents(op, &sn, &rn);
    bool root = op->comm->rank == op->root, bcast = op->kind == HC_COLL_BROADCAST;
    uint8_t *s = (uint8_t *)op->sbuf, *r = op->rbuf;
    /* (a reduce's and a gather's output only at the root, a scatter's input
     * too: elsewhere it may be none) */
    bool sdev = op->smem != HC_MEM_HOST && hc_node_reads_in(op, op->comm->rank),
         rdev = op->rmem != HC_MEM_HOST && hc_node_writes_out(op, op->comm->rank);
    bool in = sdev && (!bcast || root), out = rdev && (!bcast || !root);
    /* One host region for both where they overlap (in place: the same
     * relation between them), else one per device buffer. */
    bool overlap = sdev && rdev && s < r + rn && r < s + sn;
    uint8_t *lo = overlap ? HC_MIN(s, r) : NULL;
    size_t sb = sdev && !overlap ? HC_ALIGN_UP(sn, (size_t)64) : 0;
    size_t total = overlap ? (size_t)(HC_MAX(s + sn, r + rn) - lo) : sb + (rdev ? rn : 0);
    hc_coll_node_t *nd = hc_node_of(op);
    if (nd->dev_stage_bytes < total) {
        free(nd->dev_stage);
        nd->dev_stage_bytes = HC_ALIGN_UP(total, (size_t)4096);
        nd->dev_stage = aligned_alloc(4096, nd->dev_stage_bytes);
    }
    hc_node_dev_stage_t *ds = malloc(sizeof(*ds));
    if (!ds || !nd->dev_stage) {
        free(ds);
        nd->dev_stage_bytes = 0;
        return hc_step_fail(hc_error(HCOMM_ERR_NO_MEMORY,
                                     "%s: no memory to stage %zu bytes of device buffers",
                                     hc_coll_name(op->kind), total));
    }
    uint8_t *h = nd->dev_stage;
    uint8_t *hs = !sdev ? s : overlap ? h + (s - lo) : h;
    uint8_t *hr = !rdev ? r : overlap ? h + (r - lo) : h + sb;
    *ds = (hc_node_dev_stage_t){.inner = op->step, .user_out = out ? r : NULL, .host_out = hr,
                                .out_bytes = rn};
    free(op->tmp); /* (none: the node family keeps no state there) */
    op->tmp = ds;
    if (in) {
        hcomm_status_t st = hc_node_dev_stage_copy(op, hs, s, sn, true);
        if (st != HCOMM_OK)
            return hc_step_fail(st);
    }
    op->sbuf = hs;
    op->rbuf = hr;
    op->smem = op->rmem = HC_MEM_HOST;
    op->step = hc_node_dev_staged;
    return op->step(op);
}

uint8_t hc_node_mem_bits(const hc_coll_op_t *op)
{
    int me = op->comm->rank;
    uint8_t smem = hc_node_reads_in(op, me) ? op->smem : op->rmem;
    uint8_t rmem = hc_node_writes_out(op, me) ? op->rmem : smem;
    if (smem == HC_MEM_HOST && rmem == HC_MEM_HOST)
        return HC_NODE_MEM_HOST;
    if (smem == HC_MEM_DEVICE && rmem == HC_MEM_DEVICE)
        return HC_NODE_MEM_DEVICE;
    return HC_NODE_MEM_MIXED;
}

uint8_t hc_node_pack_device(hc_coll_node_t *nd, const void *buf, size_t len, uint8_t *out)
{
    hc_mem_attr_t attr;
    uint64_t key;
    hc_mem_desc_t desc;
    hc_mem_region_t *held = NULL;
    size_t klen = HC_RKEY_MAX;
    if (nd->nheld == (int)HC_ARRAY_SIZE(nd->held) || hc_gpu_mem_type(buf, len, &attr) != HCOMM_OK ||
        attr.type != HC_MEM_DEVICE ||
        hc_mem_key_typed(nd->drv, (void *)buf, len, &attr, &key, &desc, &held) != HCOMM_OK)
        return 0;
    nd->held[nd->nheld++] = held;
    if (!key || nd->drv->ops->rkey_pack(nd->drv, key, &desc, out, &klen) != HCOMM_OK ||
        klen > HC_RKEY_MAX)
        return 0;
    return (uint8_t)klen;
}

/* dst (device) = src (device), n bytes; a no-op when they are one buffer. */
static hcomm_status_t hc_node_dev_copy(void *dst, const void *src, size_t n)
{
    if (dst == src || !n)
        return HCOMM_OK;
    hc_mem_attr_t da, sa;
    hcomm_status_t st = hc_gpu_mem_type(dst, n, &da);
    if (st == HCOMM_OK)
        st = hc_gpu_mem_type(src, n, &sa);
    return st == HCOMM_OK ? hc_gpu_copy(dst, &da, src, &sa, n) : st;
}

/* acc = the reduction of m elements at byte offset off of every rank's
 * input (nd->zs), on the device: first's copied in (a no-op where acc is
 * that very input: in place), then the others in rank order, AVG divided
 * at the last step. */
static hcomm_status_t hc_node_dev_reduce(hc_coll_op_t *op, hc_coll_node_t *nd, uint8_t *acc,
                                         int first, size_t off, size_t m)
{
    size_t n = m * op->esize;
    hc_mem_attr_t aa;
    hcomm_status_t st = hc_node_dev_copy(acc, nd->zs[first] + off, n);
    if (st == HCOMM_OK)
        st = hc_gpu_mem_type(acc, n, &aa);
    for (int j = 0, k = 1; j < nd->n && st == HCOMM_OK; j++) {
        if (j == first)
            continue;
        hc_mem_attr_t sa;
        const uint8_t *src = nd->zs[j] + off;
        st = hc_gpu_mem_type(src, n, &sa);
        if (st == HCOMM_OK)
            st = hc_gpu_reduce(acc, &aa, src, &sa, m, op->dtype, op->op,
                               ++k == nd->n ? nd->n : 0);
    }
    return st;
}

hcomm_status_t hc_node_1copy_map_device(hc_coll_op_t *op, hc_coll_node_t *nd, size_t lo,
                                        size_t hi)
{
    size_t es = op->esize, b = op->bytes;
    hcomm_status_t st = HCOMM_OK;
    uint8_t *out = op->rbuf;
    hc_gpu_stats.node_ipc_calls++;
    switch (op->kind) {
    case HC_COLL_ALLREDUCE: {
        /* my slice [lo, hi) into rank 0's output, then into every other's */
        size_t off = lo * es, n = (hi - lo) * es;
        if (!n)
            return HCOMM_OK;
        st = hc_node_dev_reduce(op, nd, nd->zr[0] + off, 0, off, hi - lo);
        for (int j = 1; j < nd->n && st == HCOMM_OK; j++)
            st = hc_node_dev_copy(nd->zr[j] + off, nd->zr[0] + off, n);
        hc_gpu_stats.node_ipc_bytes += n;
        break;
    }
    case HC_COLL_REDUCE: {
        /* my slice [lo, hi) into the root's output, the root's input
         * first: in place, that slice of its input is the accumulator */
        size_t off = lo * es, n = (hi - lo) * es;
        if (n)
            st = hc_node_dev_reduce(op, nd, nd->zr[op->root] + off, op->root, off, hi - lo);
        hc_gpu_stats.node_ipc_bytes += n;
        break;
    }
    case HC_COLL_GATHER: /* my input into my block of the root's output (in place there: none) */
        st = hc_node_dev_copy(nd->zr[op->root] + (size_t)nd->me * b, op->sbuf, b);
        break;
    case HC_COLL_SCATTER: /* my block of the root's input into my output (likewise) */
        st = hc_node_dev_copy(out, nd->zs[op->root] + (size_t)nd->me * b, b);
        break;
    case HC_COLL_BROADCAST: /* the root's buffer into mine */
        if (nd->me != op->root)
            st = hc_node_dev_copy(out, nd->zs[op->root], b);
        break;
    case HC_COLL_ALLTOALL: /* my block of every rank's input (every rank out of place) */
        for (int j = 0; j < nd->n && st == HCOMM_OK; j++)
            st = hc_node_dev_copy(out + (size_t)j * b, nd->zs[j] + (size_t)nd->me * b, b);
        break;
    case HC_COLL_ALLGATHER: /* every rank's input into my output (mine: no-op in place) */
        for (int j = 0; j < nd->n && st == HCOMM_OK; j++)
            st = hc_node_dev_copy(out + (size_t)j * b, nd->zs[j], b);
        break;
    case HC_COLL_REDUCE_SCATTER:
        /* my block of every rank's input into my output, my own input
         * first: in place, my output is that block, which only I read */
        if (b)
            st = hc_node_dev_reduce(op, nd, out, nd->me, (size_t)nd->me * b, b / es);
        hc_gpu_stats.node_ipc_bytes += b;
        break;
    default:
        st = hc_error(HCOMM_ERR_INTERNAL, "node single copy on device memory: collective %d",
                      (int)op->kind);
    }
    if (st != HCOMM_OK)
        return hc_node_dev_fail(op, st, "moving through the peers' mapped device buffers");
    return HCOMM_OK;
}

hcomm_status_t hc_node_device_refused(hc_coll_op_t *op, hc_coll_node_t *nd)
{
    for (int j = 0; j < nd->n; j++) {
        const hc_node_desc_t *d = &nd->desc[j];
        const char *why = d->mem == HC_NODE_MEM_HOST    ? "its buffers are host memory"
                          : d->mem == HC_NODE_MEM_MIXED ? "one of its buffers is host memory"
                          : (!d->skey_len && hc_node_reads_in(op, j)) ||
                                  (!d->rkey_len && hc_node_writes_out(op, j))
                              ? "its device buffers have no IPC key (export refused)"
                          : !(d->vote & HC_NODE_CAN_MAP) ? "it could not map every peer's buffers"
                          : op->kind == HC_COLL_ALLTOALL && !(d->vote & HC_NODE_OUT_OF_PLACE)
                              ? "it calls hcomm_alltoall in place"
                              : NULL;
        if (why)
            return hc_error(HCOMM_ERR_UNSUPPORTED,
                            "%s: HCOMM_GPU_IPC=1, but its device buffers cannot go by IPC: "
                            "communicator rank %d: %s",
                            hc_coll_name(op->kind), j, why);
    }
    return hc_error(HCOMM_ERR_UNSUPPORTED, "%s: HCOMM_GPU_IPC=1, but its device buffers cannot "
                                           "go by IPC",
                    hc_coll_name(op->kind));
}
