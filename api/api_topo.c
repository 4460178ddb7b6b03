/*
 * Topology hints (include/hcomm.h): a Cartesian grid the application
 * arranges its ranks in, and a communicator ordered for it. The order is
 * the communicator's topology order (coll/coll_topo.c: nodes toured, each
 * node's ranks together, grouped by NUMA node), so runs along the grid's
 * last dimension stay inside nodes; the new communicator comes from
 * hcomm_comm_split with that position as key.
 */
#include "api/api.h"
#include "coll/coll.h"

#include <stdlib.h>

#define HC_HINT_MAGIC 0x68696e74u /* "hint" */

struct hcomm_topology_hint {
    uint32_t magic;
    hcomm_comm_t comm;
    int ndims;
    int dims[HCOMM_HINT_MAX_DIMS];
};

static hcomm_status_t hc_hint_check(const char *fn, hcomm_topology_hint_t hint)
{
    if (!hint) return hc_error(HCOMM_ERR_INVALID, "%s: hint is NULL", fn);
    if (hint->magic != HC_HINT_MAGIC)
        return hc_error(HCOMM_ERR_INVALID, "%s: hint %p is not a hint (freed?)", fn, (void *)hint);
    return HCOMM_OK;
}

HC_EXPORT hcomm_status_t hcomm_topology_hint_create(hcomm_comm_t comm, hcomm_topology_hint_t *hint_p)
{
    /* Any thread, like hcomm_comm_rank: comm is checked under the list's lock. */
    hcomm_status_t st = hc_comm_shape("hcomm_topology_hint_create", comm, NULL, NULL);
    if (st != HCOMM_OK) return st;
    if (!hint_p) return hc_error(HCOMM_ERR_INVALID, "hcomm_topology_hint_create: hint_p is NULL");
    struct hcomm_topology_hint *h = calloc(1, sizeof(*h));
    if (!h) return hc_error(HCOMM_ERR_NO_MEMORY, "hcomm_topology_hint_create: no memory");
    h->magic = HC_HINT_MAGIC;
    h->comm = comm;
    *hint_p = h;
    return HCOMM_OK;
}

HC_EXPORT hcomm_status_t hcomm_topology_hint_set_dim(hcomm_topology_hint_t hint, int ndims)
{
    hcomm_status_t st = hc_hint_check("hcomm_topology_hint_set_dim", hint);
    if (st != HCOMM_OK) return st;
    if (ndims < 1 || ndims > HCOMM_HINT_MAX_DIMS)
        return hc_error(HCOMM_ERR_INVALID, "hcomm_topology_hint_set_dim: ndims %d is outside 1..%d", ndims,
                        HCOMM_HINT_MAX_DIMS);
    hint->ndims = ndims;
    for (int d = 0; d < HCOMM_HINT_MAX_DIMS; d++) hint->dims[d] = 0;
    return HCOMM_OK;
}

HC_EXPORT hcomm_status_t hcomm_topology_hint_set_size(hcomm_topology_hint_t hint, int dim, int n)
{
    hcomm_status_t st = hc_hint_check("hcomm_topology_hint_set_size", hint);
    if (st != HCOMM_OK) return st;
    if (hint->ndims == 0)
        return hc_error(HCOMM_ERR_INVALID, "hcomm_topology_hint_set_size: call hcomm_topology_hint_set_dim first");
    if (dim < 0 || dim >= hint->ndims)
        return hc_error(HCOMM_ERR_INVALID, "hcomm_topology_hint_set_size: dim %d is outside 0..%d (the "
                        "hint has %d dimensions)", dim, hint->ndims - 1, hint->ndims);
    if (n < 1)
        return hc_error(HCOMM_ERR_INVALID, "hcomm_topology_hint_set_size: n %d for dimension %d is not "
                        "positive", n, dim);
    hint->dims[dim] = n;
    return HCOMM_OK;
}

HC_EXPORT hcomm_status_t hcomm_topology_hint_free(hcomm_topology_hint_t hint)
{
    hcomm_status_t st = hc_hint_check("hcomm_topology_hint_free", hint);
    if (st != HCOMM_OK) return st;
    hint->magic = 0;
    free(hint);
    return HCOMM_OK;
}

static hcomm_status_t hc_comm_create_from_hint(hcomm_comm_t comm, hcomm_topology_hint_t hint,
                                               hcomm_comm_t *newcomm_p);

HC_EXPORT hcomm_status_t hcomm_comm_create_from_hint(hcomm_comm_t comm, hcomm_topology_hint_t hint,
                                                     hcomm_comm_t *newcomm_p)
{
    int g = hc_api_enter("hcomm_comm_create_from_hint");
    if (g < 0) return HCOMM_ERR_INVALID;
    hcomm_status_t st = hc_comm_create_from_hint(comm, hint, newcomm_p);
    hc_api_leave(g);
    return st;
}

static hcomm_status_t hc_comm_create_from_hint(hcomm_comm_t comm, hcomm_topology_hint_t hint,
                                               hcomm_comm_t *newcomm_p)
{
    const char *fn = "hcomm_comm_create_from_hint";
    hcomm_status_t st = hc_check_comm(fn, comm);
    if (st != HCOMM_OK) return st;
    if ((st = hc_hint_check(fn, hint)) != HCOMM_OK) return st;
    if (!newcomm_p) return hc_error(HCOMM_ERR_INVALID, "%s: newcomm_p is NULL", fn);
    if (hint->comm != comm)
        return hc_error(HCOMM_ERR_INVALID, "%s: the hint was made for another communicator", fn);
    if (hint->ndims == 0) return hc_error(HCOMM_ERR_INVALID, "%s: the hint has no dimensions (set_dim)", fn);
    long total = 1;
    for (int d = 0; d < hint->ndims; d++) {
        if (hint->dims[d] == 0)
            return hc_error(HCOMM_ERR_INVALID, "%s: the size of dimension %d is not set (set_size)", fn, d);
        total *= hint->dims[d];
        if (total > comm->size) break;
    }
    if (total != comm->size)
        return hc_error(HCOMM_ERR_INVALID, "%s: the grid has %ld%s ranks, the communicator %d", fn, total,
                        total > comm->size ? " or more" : "", comm->size);
    int pos = comm->rank;
    if (hc_ctx.topo_mode != HC_TOPO_MODE_OFF) {
        const int *order = hc_coll_ring_order(comm, &pos);
        if (!order) return hc_error(HCOMM_ERR_NO_MEMORY, "%s: ring order", fn);
    }
    return hcomm_comm_split(comm, 0, pos, newcomm_p);
}
