/*
 * The hierarchical pipelines' cost model (coll/net_hier.h, docs/topology.md):
 * time = latency + bytes / bandwidth per level, the pipeline's overlap
 * included, against the flat algorithms; decided once per communicator and
 * size class, alike on every rank.
 */
#include "coll/net_hier.h"

#include <stdint.h>

static uint64_t hc_hier_logged[HC_COLL_KIND_COUNT]; /* size classes whose prediction was printed */

double hc_hier_log2(int n)
{
    int k = 0;
    while ((1 << k) < n)
        k++;
    return k;
}

/* The network's latency and bandwidth: the probe's when it ran. */
void hc_hier_net(double *a_p, double *b_p)
{
    const hc_topo_map_t *map = hc_ctx.topo;
    *a_p = map && map->net_gbps > 0 ? map->net_lat_us : HC_HIER_A_NET;
    *b_p = map && map->net_gbps > 0 ? map->net_gbps : HC_HIER_B_NET;
}

/* Ring links that leave each node (the ring's node crossings, spread over
 * the nodes): they share the node's link. */
static int hc_hier_ring_per_node(struct hcomm_comm *comm)
{
    hc_coll_comm_t *cc = comm->coll_priv;
    const hc_topo_map_t *map = hc_ctx.topo;
    int pos, N = cc->hier_N;
    const int *order = hc_coll_ring_order(comm, &pos);
    if (!order || !map) return 1;
    return HC_MAX(
        1, (hc_topo_ring_crossings(map, comm->world_ranks, comm->size, order, HC_TOPO_SWITCH) + N -
            1) /
               N);
}

/* A pipeline of K pieces whose stage s takes t[s] us per piece: the first
 * piece passes every stage, each further one adds the time of the busiest
 * lane per piece (a comm runs its children one at a time). K = 1: the
 * levels in sequence. */
static double hc_hier_pipe_time(const hc_hier_pipe_t *p, int K, const double *t)
{
    double sum = 0, busy[HC_HIER_LANES] = {0}, most = 0;
    for (int s = 0; s < p->nstages; s++) {
        sum += t[s];
        busy[p->lane[s]] += t[s];
    }
    for (int l = 0; l < HC_HIER_LANES; l++)
        most = HC_MAX(most, busy[l]);
    return sum + (K - 1) * most;
}

typedef struct {
    double ring, rd, hier;
} hc_hier_model_t;

/* Recursive doubling over the power-of-two part of comm: round k pairs r
 * with r ^ 2^k and lasts as long as its slowest pair (rounds whose pairs
 * all share a node cost the host class). S: microseconds-per-GB/s of the
 * first round's message (bytes / 1e3); growing: round k moves 2^k times
 * that (allgather), else the same (allreduce). */
static double hc_hier_rd_time(struct hcomm_comm *comm, const hc_topo_map_t *map, double a_net,
                              double b_net, double S, bool growing)
{
    int n = comm->size, pof2 = 1;
    while (pof2 * 2 <= n)
        pof2 *= 2;
    double t = n > pof2 ? 2 * (a_net + S / b_net) : 0, m = S;
    for (int d = 1; d < pof2; d *= 2, m = growing ? 2 * m : m) {
        bool cross = false;
        for (int r = 0; r < pof2 && !cross && map; r++)
            cross = map->node[comm->world_ranks[r]] != map->node[comm->world_ranks[r ^ d]];
        t += cross || !map ? a_net + m / b_net : HC_HIER_A_HOST + m / HC_HIER_B_HOST;
    }
    return t;
}

/* Predicted microseconds of allreduce of `bytes` on comm (N nodes x L).
 * Uses only what every rank knows alike (the map, the comm, the size), so
 * that every rank makes the same choice. */
static hc_hier_model_t hc_hier_predict(struct hcomm_comm *comm, size_t bytes)
{
    hc_coll_comm_t *cc = comm->coll_priv;
    double S = (double)bytes / 1e3; /* bytes / (GB/s) in us: bytes / 1e3 / GBps */
    int n = comm->size, N = cc->hier_N, L = cc->hier_L;
    double a_net, b_net;
    hc_hier_net(&a_net, &b_net);
    hc_hier_model_t m;
    /* The ring: every step waits for its slowest link, a network link; a
     * node's NIC carries as many ring links as leave that node. */
    m.ring = 2.0 * (n - 1) * (a_net + S / n / (b_net / hc_hier_ring_per_node(comm)));
    m.rd = hc_hier_rd_time(comm, hc_ctx.topo, a_net, b_net, S, false);
    /* hier, per piece P: the node's reduce-scatter and allgather, L - 1
     * steps of P / L each; the rails' allreduce of P / L, L rails sharing
     * the node's link (each moves P / L at a 1/L share); each level with
     * its start. */
    size_t piece;
    int K = hc_hier_cut(bytes, 1, (size_t)L, &piece);
    double P = S / K, t[3];
    t[0] = t[2] = HC_HIER_A_HOST + (L - 1) * (HC_HIER_A_HOST + P / L / HC_HIER_B_HOST);
    double rail_ring = 2.0 * (N - 1) * (a_net + P / N / b_net);
    double rail_rd = hc_hier_log2(N) * (a_net + P / b_net);
    t[1] = HC_HIER_A_HOST + HC_MIN(rail_ring, rail_rd);
    m.hier = hc_hier_pipe_time(&hc_hier_allreduce_pipe, K, t);
    return m;
}

double hc_hier_allreduce_predicted(const hc_coll_op_t *op)
{
    return hc_hier_predict(op->comm, op->bytes).hier;
}

bool hc_net_hier_applies(const hc_coll_op_t *op)
{
    return op->comm->size >= 4 && hc_coll_hier_ready(op->comm);
}

bool hc_net_hier_auto(const hc_coll_op_t *op)
{
    if (!hc_net_hier_applies(op)) return false; /* the registry asks auto_pick first */
    /* Decided once per communicator and size class (a power of two: the
     * model runs on the class's upper bound). */
    hc_coll_comm_t *cc = op->comm->coll_priv;
    int cls = hc_hier_class(op->bytes);
    if (cc->hier_decided & (1ull << cls)) return cc->hier_yes & (1ull << cls);
    size_t ub = cls >= 63 ? SIZE_MAX : ((size_t)1 << cls) - 1;
    if (ub < op->bytes) ub = op->bytes;
    hc_hier_model_t m = hc_hier_predict(op->comm, ub);
    double flat = ub <= HC_NET_SMALL_BYTES ? m.rd : m.ring;
    bool pick = m.hier < flat;
    cc->hier_decided |= 1ull << cls;
    if (pick) cc->hier_yes |= 1ull << cls;
    uint64_t *logged = &hc_hier_logged[HC_COLL_ALLREDUCE];
    if (hc_log_level_current >= HC_LOG_INFO && !(*logged & (1ull << cls)) && op->comm->rank == 0) {
        *logged |= 1ull << cls;
        hc_log_info("topology model: allreduce of %zu bytes on %d nodes x %d ranks: predicted "
                    "hier %.1f us, ring %.1f us, rd %.1f us -> %s",
                    op->bytes, cc->hier_N, cc->hier_L, m.hier, m.ring, m.rd,
                    pick                       ? "hier"
                    : ub <= HC_NET_SMALL_BYTES ? "rd"
                                               : "ring");
    }
    return pick;
}

/* Reduce: the allreduce model (see hc_hier_reduce_pipe). */
bool hc_net_hier_reduce_auto(const hc_coll_op_t *op)
{
    return hc_net_hier_auto(op);
}

/* allgather and reduce_scatter of op->bytes per rank: the flat ring's
 * n - 1 steps of a block, as slow as the node's link shared by the ring
 * links leaving the node (recursive doubling for small pof2 allgathers),
 * against hier's pipeline: per piece P of a block, the rail's N - 1 steps
 * of P (L rails sharing the node's link) and the node's L - 1 steps of
 * N P plus the copy of n P, each level with its start. */
typedef struct {
    double flat, hier;
} hc_hier_blocks_model_t;

static hc_hier_blocks_model_t hc_hier_blocks_predict(const hc_coll_op_t *op)
{
    hc_coll_comm_t *cc = op->comm->coll_priv;
    double a_net, b_net;
    hc_hier_net(&a_net, &b_net);
    int n = op->comm->size, N = cc->hier_N, L = cc->hier_L;
    double B = (double)op->bytes / 1e3;
    hc_hier_blocks_model_t m;
    m.flat = (n - 1) * (a_net + B * hc_hier_ring_per_node(op->comm) / b_net);
    if (op->kind == HC_COLL_ALLGATHER && !(n & (n - 1)) &&
        op->bytes * (size_t)n <= HC_NET_SMALL_BYTES)
        m.flat = HC_MIN(m.flat, hc_hier_rd_time(op->comm, hc_ctx.topo, a_net, b_net, B, true));
    size_t piece;
    int K = hc_hier_cut(op->bytes, 1, 1, &piece);
    double P = B / K;
    double rail = HC_HIER_A_HOST + HC_HIER_LEVEL_US + (N - 1) * (a_net + P * L / b_net);
    double node = HC_HIER_A_HOST + HC_HIER_LEVEL_US +
                  (L - 1) * (HC_HIER_A_HOST + N * P / HC_HIER_B_HOST) +
                  (double)n * P / HC_HIER_B_HOST /* the copy */;
    const hc_hier_pipe_t *p =
        op->kind == HC_COLL_ALLGATHER ? &hc_hier_allgather_pipe : &hc_hier_reduce_scatter_pipe;
    double t[2] = {p->lane[0] == HC_HIER_RAIL ? rail : node,
                   p->lane[0] == HC_HIER_RAIL ? node : rail};
    m.hier = hc_hier_pipe_time(p, K, t);
    return m;
}

double hc_hier_blocks_predicted(const hc_coll_op_t *op)
{
    return hc_hier_blocks_predict(op).hier;
}

bool hc_net_hier_blocks_auto(const hc_coll_op_t *op)
{
    if (!hc_net_hier_applies(op)) return false;
    hc_coll_comm_t *cc = op->comm->coll_priv;
    hc_hier_blocks_model_t m = hc_hier_blocks_predict(op);
    bool pick = m.hier < m.flat;
    int cls = hc_hier_class(op->bytes);
    uint64_t *logged = &hc_hier_logged[op->kind];
    if (hc_log_level_current >= HC_LOG_INFO && !(*logged & (1ull << cls)) && op->comm->rank == 0) {
        *logged |= 1ull << cls;
        hc_log_info("topology model: %s of %zu bytes per rank on %d nodes x %d ranks: predicted "
                    "hier %.1f us, "
                    "flat %.1f us -> %s",
                    hc_hier_what(op->kind), op->bytes, cc->hier_N, cc->hier_L, m.hier, m.flat,
                    pick ? "hier" : "flat");
    }
    return pick;
}
