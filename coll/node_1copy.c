/*
 * The node family's single copy (coll/node.h): large allreduce, allgather,
 * reduce_scatter and alltoall straight between the ranks' buffers.
 */
#include "coll/node.h"
#include "gpu/gpu.h"

#include <unistd.h>
/* ---- zero-copy allreduce of pool memory ------------------------------------------ */

void hc_node_rkeys_release(hc_coll_node_t *nd)
{
    for (int i = 0; i < nd->nrkeys; i++)
        nd->rkey_conn[i]->ops->rkey_release(nd->rkey_conn[i], nd->rkeys[i]);
    nd->nrkeys = 0;
    for (int i = 0; i < nd->nheld; i++)
        hc_mem_reg_cache_put(nd->held[i]);
    nd->nheld = 0;
}

/* This rank's packed node-driver key for buf (0 bytes: none, not mappable). */
static uint8_t hc_node_pack(hc_coll_node_t *nd, const void *buf, size_t len, uint8_t *out)
{
    uint64_t key;
    hc_mem_desc_t desc;
    size_t klen = HC_RKEY_MAX;
    if (hc_mem_key_local(nd->drv, (void *)buf, len, &key, &desc, NULL) != HCOMM_OK ||
        desc.fd < 0 || nd->drv->ops->rkey_pack(nd->drv, key, &desc, out, &klen) != HCOMM_OK ||
        klen > HC_RKEY_MAX)
        return 0;
    return (uint8_t)klen;
}

/* Where rank j's buffer at addr, len bytes (its key: key/klen), is mapped
 * here, or NULL. */
static uint8_t *hc_node_ptr(hc_coll_op_t *op, hc_coll_node_t *nd, int j, const uint8_t *key,
                            uint8_t klen, uint64_t addr, size_t len)
{
    hc_conn_t *c = hc_core_conn(op->comm->world_ranks[j]);
    hc_rkey_t *rk = NULL;
    void *ptr = NULL;
    if (!klen || !(c->caps & HC_CONN_CAP_RKEY_PTR) ||
        nd->nrkeys == (int)HC_ARRAY_SIZE(nd->rkeys) ||
        c->ops->rkey_unpack(c, key, klen, &rk) != HCOMM_OK)
        return NULL;
    nd->rkeys[nd->nrkeys] = rk;
    nd->rkey_conn[nd->nrkeys++] = c;
    if (c->ops->rkey_ptr(c, rk, addr, len, &ptr) != HCOMM_OK)
        return NULL;
    return ptr;
}

/* Large collectives without staging. Ticks: op->tick is the handshake (a:
 * descriptors published; b: votes cast), then the data ticks. Every rank
 * votes for the best it can do with everyone's buffers and all take the
 * lowest vote, so all decide alike:
 *   MAP (every buffer is pool memory every rank can map): each rank reduces
 *     its slice of the message out of every rank's input and writes it into
 *     every rank's output; one barrier at the end. No copy besides the result.
 *   GET (the node driver reads and writes peers' memory: process_vm_readv
 *     and _writev): each rank pulls its slice of every peer's input,
 *     reduces it, and writes the result into its own output and every
 *     peer's; one barrier at the end. One copy per byte in and out.
 *   STAGE: the data ticks run the staged algorithms. */
/* The node driver found comm rank j's process gone: that is its failure
 * (recorded as any other, so the error names the rank that failed first,
 * which may be another one j left after). */
static HC_NOINLINE hcomm_status_t hc_node_peer_gone(hc_coll_op_t *op, int j, hcomm_status_t st)
{
    if (st != HCOMM_ERR_PEER_FAILED)
        return st;
    int w = op->comm->world_ranks[j];
    hc_peer_fail(w, st, hc_error_last());
    return hc_peer_error(w, hc_coll_name(op->kind));
}

static hcomm_status_t hc_node_get(hc_coll_op_t *op, int j, void *dst, uint64_t raddr, size_t len)
{
    hc_conn_t *c = hc_core_conn(op->comm->world_ranks[j]);
    hc_rma_t rma = {.local = dst, .len = len, .remote_addr = raddr}; /* CMA: no keys, at once */
    hcomm_status_t st = len ? c->ops->get(c, &rma) : HCOMM_OK;
    return HC_LIKELY(st == HCOMM_OK) ? st : hc_node_peer_gone(op, j, st);
}

static hcomm_status_t hc_node_write(hc_coll_op_t *op, int j, uint64_t raddr, const void *src,
                                    size_t len)
{
    hc_conn_t *c = hc_core_conn(op->comm->world_ranks[j]);
    hc_rma_t rma = {.local = (void *)src, .len = len, .remote_addr = raddr};
    hcomm_status_t st = len ? c->ops->write(c, &rma) : HCOMM_OK;
    return HC_LIKELY(st == HCOMM_OK) ? st : hc_node_peer_gone(op, j, st);
}

static bool hc_node_can_get(hc_coll_op_t *op)
{
    const uint32_t need = HC_CONN_CAP_GET | HC_CONN_CAP_WRITE;
    for (int j = 0; j < op->comm->size; j++) {
        if (j == op->comm->rank)
            continue;
        hc_conn_t *c = hc_core_conn(op->comm->world_ranks[j]);
        if (!c || (c->caps & need) != need || c->drv != hc_core_node_driver())
            return false;
    }
    return true;
}

/* GET-mode data movement of the collectives other than allreduce: every
 * rank reads what it needs straight out of the peers' buffers. */
static hcomm_status_t hc_node_get_phase(hc_coll_op_t *op, hc_coll_node_t *nd)
{
    size_t b = op->bytes, es = op->esize;
    uint8_t *out = op->rbuf;
    const uint8_t *in = op->sbuf;
    const void *srcs[64];
    hcomm_status_t st = HCOMM_OK;
    switch (op->kind) {
    case HC_COLL_ALLGATHER:
        for (int j = 0; j < nd->n && st == HCOMM_OK; j++) {
            if (j != nd->me)
                st = hc_node_get(op, j, out + (size_t)j * b, nd->desc[j].saddr, b);
            else if (in != out + (size_t)j * b)
                memcpy(out + (size_t)j * b, in, b);
        }
        break;
    case HC_COLL_ALLTOALL:
        for (int j = 0; j < nd->n && st == HCOMM_OK; j++) {
            if (j != nd->me)
                st = hc_node_get(op, j, out + (size_t)j * b,
                                 nd->desc[j].saddr + (size_t)nd->me * b, b);
            else if (in != out)
                memcpy(out + (size_t)j * b, in + (size_t)j * b, b);
        }
        break;
    case HC_COLL_REDUCE_SCATTER: {
        /* My block of every rank's input, chunk by chunk; my own input
         * first so that in place (out is my block of in) aliases srcs[0]. */
        size_t chunk = nd->block / (size_t)nd->n / es, count = b / es;
        for (size_t e = 0; e < count && st == HCOMM_OK; e += chunk) {
            size_t m = HC_MIN(chunk, count - e);
            int k = 1;
            srcs[0] = in + (size_t)nd->me * b + e * es;
            for (int j = 0; j < nd->n && st == HCOMM_OK; j++) {
                if (j == nd->me)
                    continue;
                uint8_t *tmp = nd->scratch + (size_t)(k - 1) * chunk * es;
                st = hc_node_get(op, j, tmp, nd->desc[j].saddr + (size_t)nd->me * b + e * es,
                                 m * es);
                srcs[k++] = tmp;
            }
            if (st == HCOMM_OK)
                hc_reduce(out + e * es, srcs, nd->n, m, op->dtype, op->op, nd->n);
        }
        break;
    }
    default:
        st = hc_error(HCOMM_ERR_INTERNAL, "node single copy: collective %d", (int)op->kind);
    }
    return st;
}

/* State 0: this rank's buffers and keys into its descriptor. */
static void hc_node_1copy_publish(hc_coll_op_t *op, hc_coll_node_t *nd, hc_node_desc_t *me)
{
    hc_node_rkeys_release(nd);
    me->saddr = (uint64_t)(uintptr_t)op->sbuf;
    me->raddr = (uint64_t)(uintptr_t)op->rbuf;
    me->mem = hc_node_mem_bits(op);
    if (HC_UNLIKELY(me->mem != HC_NODE_MEM_HOST)) {
        /* device memory: IPC keys (a host buffer beside it gets none) */
        size_t sn, rn;
        hc_node_extents(op, &sn, &rn);
        bool in = hc_node_reads_in(op, nd->me), out = hc_node_writes_out(op, nd->me);
        me->skey_len = in && op->smem == HC_MEM_DEVICE
                           ? hc_node_pack_device(nd, op->sbuf, sn, me->skey)
                           : 0;
        me->rkey_len = (me->skey_len || !in) && out && op->rmem == HC_MEM_DEVICE
                           ? hc_node_pack_device(nd, op->rbuf, rn, me->rkey)
                           : 0;
        return;
    }
    me->skey_len = hc_node_pack(nd, op->sbuf, op->bytes, me->skey);
    me->rkey_len = me->skey_len ? hc_node_pack(nd, op->rbuf, op->bytes, me->rkey) : 0;
}

/* State 1: this rank's vote, from every rank's descriptor (MAP: every
 * buffer mapped here, into nd->zs/zr; GET; out of place). */
static void hc_node_1copy_vote(hc_coll_op_t *op, hc_coll_node_t *nd, hc_node_desc_t *me)
{
    /* Mapping and the driver's get are for buffers of one kind on every
     * rank: all host (pool memory mapped, or CMA), or all device (IPC). */
    bool same = true;
    for (int j = 0; j < nd->n; j++)
        same = same && nd->desc[j].mem == me->mem;
    bool map = (op->kind == HC_COLL_ALLREDUCE || me->mem == HC_NODE_MEM_DEVICE) && same &&
               me->mem != HC_NODE_MEM_MIXED;
    bool bcast = op->kind == HC_COLL_BROADCAST; /* only the root's buffer is read */
    for (int j = 0; j < nd->n && map; j++) {
        hc_node_desc_t *d = &nd->desc[j];
        if (bcast && j != op->root)
            continue;
        bool in = hc_node_reads_in(op, j), out = hc_node_writes_out(op, j);
        if ((in && !d->skey_len) || (out && !d->rkey_len)) {
            map = false;
        } else if (j == nd->me) {
            nd->zs[j] = op->sbuf;
            nd->zr[j] = op->rbuf;
        } else {
            size_t sn, rn;
            hc_node_extents(op, &sn, &rn);
            uint8_t *sb = in ? hc_node_ptr(op, nd, j, d->skey, d->skey_len, d->saddr, sn) : NULL;
            uint8_t *rb = (sb || !in) && out
                              ? hc_node_ptr(op, nd, j, d->rkey, d->rkey_len, d->raddr, rn)
                              : NULL;
            map = (sb || !in) && (rb || !out);
            if (map) {
                nd->zs[j] = sb;
                nd->zr[j] = rb;
            }
        }
    }
    const uint8_t *sb = op->sbuf, *rb = op->rbuf;
    bool apart = !hc_node_writes_out(op, nd->me) || !hc_node_reads_in(op, nd->me) ||
                 sb + op->bytes <= rb || rb + op->bytes <= sb;
    /* (the rooted collectives have no GET shape: they map device buffers
     * only, and host ones fall back) */
    bool get = same && me->mem == HC_NODE_MEM_HOST && !hc_coll_rooted(op->kind) &&
               hc_node_can_get(op);
    me->vote = (map ? HC_NODE_CAN_MAP : 0u) | (get ? HC_NODE_CAN_GET : 0u) |
               (apart ? HC_NODE_OUT_OF_PLACE : 0u);
}

/* Some rank can neither map nor get: the op goes on as node-staged, from
 * the next tick. */
static hc_step_t hc_node_1copy_fall_back(hc_coll_op_t *op, uint64_t t0)
{
    op->tick = t0 + 1;
    op->state = op->phase = op->round = 0;
    op->step = op->fallback;
    op->algo = "node-staged";
    return hc_node_dev_fall_back(op);
}

/* allgather, alltoall, reduce_scatter by GET (hc_node_get_phase). */
static hcomm_status_t hc_node_1copy_blocks(hc_coll_op_t *op, hc_coll_node_t *nd)
{
    size_t es = op->esize;
    hcomm_status_t st = hc_node_get_phase(op, nd);
    if (st != HCOMM_OK)
        return st;
    if (hc_node_counting()) {
        /* reduce_scatter pulls in chunks (hc_node_get_phase) */
        size_t chunk = nd->block / (size_t)nd->n / es, count = op->bytes / es;
        hc_node_count_each(op, nd,
                           op->kind == HC_COLL_REDUCE_SCATTER ? (count + chunk - 1) / chunk : 1,
                           op->bytes);
    }
    return HCOMM_OK;
}

/* allreduce by MAP: elements [lo, hi) of every input reduced into every
 * output. */
static void hc_node_1copy_map(hc_coll_op_t *op, hc_coll_node_t *nd, size_t lo, size_t hi)
{
    size_t es = op->esize;
    const void *srcs[64];
    size_t chunk = nd->block / es;
    for (size_t e = lo; e < hi; e += chunk) {
        size_t m = HC_MIN(chunk, hi - e);
        for (int j = 0; j < nd->n; j++)
            srcs[j] = nd->zs[j] + e * es;
        hc_reduce(nd->scratch, srcs, nd->n, m, op->dtype, op->op, nd->n);
        for (int j = 0; j < nd->n; j++)
            hc_copy_nt(nd->zr[j] + e * es, nd->scratch, m * es);
    }
    if (hc_node_counting())
        hc_node_count_sliced(op, nd, chunk);
}

/* allreduce by GET. Outputs that fit the caches: my slice of every peer's
 * input is pulled next to mine, reduced, written into my output and pushed
 * into every peer's; one barrier. Larger outputs with few ranks are
 * memory bound: each rank pulls every peer's whole input and reduces
 * it into its own output (streaming stores), touching exactly its
 * inputs once and its output once, like `c = a + b`; no remote
 * writes (each would pay a read for ownership of the line). All
 * ranks reduce in rank order, so results are bit-identical. Only when
 * no rank works in place: a peer may still be pulling the input I
 * would overwrite. */
static hcomm_status_t hc_node_1copy_get(hc_coll_op_t *op, hc_coll_node_t *nd, uint32_t mode,
                                        size_t lo, size_t hi)
{
    size_t es = op->esize;
    const void *srcs[64];
    bool full =
        op->bytes >= HC_COPY_NT_THRESHOLD && nd->n <= 3 && (mode & HC_NODE_OUT_OF_PLACE);
    size_t chunk = nd->block / (size_t)nd->n / es;
    uint8_t *res = nd->scratch + (size_t)(nd->n - 1) * chunk * es;
    size_t from = full ? 0 : lo, to = full ? op->count : hi;
    for (size_t e = from; e < to; e += chunk) {
        size_t m = HC_MIN(chunk, to - e);
        for (int j = 0, k = 0; j < nd->n; j++) {
            if (j == nd->me) {
                srcs[j] = (const uint8_t *)op->sbuf + e * es;
                continue;
            }
            uint8_t *tmp = nd->scratch + (size_t)k++ * chunk * es;
            hcomm_status_t st = hc_node_get(op, j, tmp, nd->desc[j].saddr + e * es, m * es);
            if (st != HCOMM_OK)
                return st;
            srcs[j] = tmp;
        }
        hc_reduce(res, srcs, nd->n, m, op->dtype, op->op, nd->n);
        if (full) {
            hc_copy_nt((uint8_t *)op->rbuf + e * es, res, m * es);
            continue;
        }
        memcpy((uint8_t *)op->rbuf + e * es, res, m * es);
        for (int j = 0; j < nd->n; j++) {
            if (j == nd->me)
                continue;
            hcomm_status_t st = hc_node_write(op, j, nd->desc[j].raddr + e * es, res, m * es);
            if (st != HCOMM_OK)
                return st;
        }
    }
    if (hc_node_counting()) {
        if (full) /* every rank pulls every peer's whole input */
            hc_node_count_each(op, nd, (op->count + chunk - 1) / chunk, op->bytes);
        else
            hc_node_count_sliced(op, nd, chunk);
    }
    return HCOMM_OK;
}

/* State 2: the data moves as the lowest vote says (MAP or GET; every rank
 * decides alike), then this rank posts the last tick. */
static hcomm_status_t hc_node_1copy_move(hc_coll_op_t *op, hc_coll_node_t *nd, uint32_t mode)
{
    uint64_t last = op->tick_end - 1;
    size_t lo, hi;
    hc_node_slice(op->count, nd->n, nd->me, &lo, &hi);
    hcomm_status_t st = HCOMM_OK;
    if ((mode & HC_NODE_CAN_MAP) && nd->desc[nd->me].mem == HC_NODE_MEM_DEVICE)
        st = hc_node_1copy_map_device(op, nd, lo, hi);
    else if (op->kind != HC_COLL_ALLREDUCE)
        st = hc_node_1copy_blocks(op, nd);
    else if (mode & HC_NODE_CAN_MAP)
        hc_node_1copy_map(op, nd, lo, hi);
    else
        st = hc_node_1copy_get(op, nd, mode, lo, hi);
    if (st != HCOMM_OK)
        return st;
    /* b before a: seeing a(t) must keep implying b >= t-1. */
    hc_node_post_b(nd, last);
    hc_node_post_a(nd, op, last);
    op->state = 4;
    return HCOMM_OK;
}

hc_step_t hc_node_1copy(hc_coll_op_t *op)
{
    hc_coll_node_t *nd = hc_node_of(op);
    uint64_t t0 = op->tick, last = op->tick_end - 1;
    hc_node_desc_t *me = &nd->desc[nd->me];
    switch (op->state) {
    case 0: /* publish: descriptors are read up to the vote, so wait b >= t0-1 */
        if (!hc_node_wait_b(nd, op, t0 - 1))
            return HC_STEP_PENDING;
        hc_node_1copy_publish(op, nd, me);
        hc_node_post_a(nd, op, t0);
        op->state = 1;
        /* fallthrough */
    case 1: /* vote */
        if (!hc_node_wait_a(nd, op, t0))
            return HC_STEP_PENDING;
        hc_node_1copy_vote(op, nd, me);
        hc_node_post_b(nd, t0); /* publishes the vote */
        op->state = 2;
        /* fallthrough */
    case 2: {
        if (!hc_node_wait_b(nd, op, t0))
            return HC_STEP_PENDING;
        uint32_t mode = HC_NODE_CAN_GET | HC_NODE_CAN_MAP | HC_NODE_OUT_OF_PLACE;
        bool dev = false;
        for (int j = 0; j < nd->n; j++) {
            mode &= nd->desc[j].vote;
            dev = dev || nd->desc[j].mem != HC_NODE_MEM_HOST;
        }
        if (op->kind == HC_COLL_ALLTOALL && !(mode & HC_NODE_OUT_OF_PLACE))
            mode = 0; /* a rank in place: a peer may still read the block it overwrites */
        if (HC_UNLIKELY(me->mem != HC_NODE_MEM_HOST))
            hc_gpu_stats.node_dev_calls++;
        if (HC_UNLIKELY(dev && !(mode & HC_NODE_CAN_MAP) && hc_ipc_mode == HC_GDR_ON))
            return hc_step_fail(hc_node_device_refused(op, nd)); /* on every rank alike */
        if (!(mode & (HC_NODE_CAN_GET | HC_NODE_CAN_MAP)))
            return hc_node_1copy_fall_back(op, t0);
        hcomm_status_t st = hc_node_1copy_move(op, nd, mode);
        if (st != HCOMM_OK)
            return hc_step_fail(st);
    }
        /* fallthrough */
    case 4: /* nobody returns while others may still read its buffers */
        if (!hc_node_wait_b(nd, op, last))
            return HC_STEP_PENDING;
        return HC_STEP_DONE;
    }
    return HC_STEP_DONE;
}
