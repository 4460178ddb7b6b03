/*
 * Topology hints in a job (run under hcommrun with tests/lib/fake_nodes.sh,
 * which names each rank's node in HCOMM_NODE_ID):
 *   mp_topo_hint ROWS COLS
 * makes a ROWS x COLS grid communicator from a hint and checks that every
 * row's ranks share one node and different rows different nodes (with
 * HCOMM_TOPO=off: that the grid keeps world's order), that an allreduce
 * along each row (a split by row) works, and that bad hints are refused
 * with messages naming the argument.
 */
#include "common/mp_test.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t node_hash(void)
{
    const char *id = getenv("HCOMM_NODE_ID");
    uint64_t h = 1469598103934665603ull;
    for (const char *p = id ? id : ""; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
    return h;
}

static void bad_hints(hcomm_comm_t world)
{
    hcomm_topology_hint_t h = NULL;
    hcomm_comm_t c = NULL;
    MP_EXPECT(HCOMM_ERR_INVALID, hcomm_topology_hint_create(world, NULL));
    mp_expect_msg("create NULL", "hint_p is NULL", NULL);
    MP_OK(hcomm_topology_hint_create(world, &h));
    MP_EXPECT(HCOMM_ERR_INVALID, hcomm_topology_hint_set_size(h, 0, 2));
    mp_expect_msg("size before dim", "set_dim first", NULL);
    MP_EXPECT(HCOMM_ERR_INVALID, hcomm_topology_hint_set_dim(h, 0));
    mp_expect_msg("ndims 0", "ndims 0 is outside 1..8", NULL);
    MP_EXPECT(HCOMM_ERR_INVALID, hcomm_topology_hint_set_dim(h, 9));
    MP_OK(hcomm_topology_hint_set_dim(h, 2));
    MP_EXPECT(HCOMM_ERR_INVALID, hcomm_topology_hint_set_size(h, 2, 4));
    mp_expect_msg("dim 2", "dim 2 is outside 0..1", NULL);
    MP_EXPECT(HCOMM_ERR_INVALID, hcomm_topology_hint_set_size(h, 1, 0));
    mp_expect_msg("n 0", "n 0 for dimension 1 is not positive", NULL);
    MP_EXPECT(HCOMM_ERR_INVALID, hcomm_comm_create_from_hint(world, h, &c));
    mp_expect_msg("unset", "dimension 0 is not set", NULL);
    MP_OK(hcomm_topology_hint_set_size(h, 0, mp_size));
    MP_OK(hcomm_topology_hint_set_size(h, 1, 2));
    MP_EXPECT(HCOMM_ERR_INVALID, hcomm_comm_create_from_hint(world, h, &c));
    mp_expect_msg("too big", "the grid has", "the communicator", NULL);
    MP_EXPECT(HCOMM_ERR_INVALID, hcomm_comm_create_from_hint(world, h, NULL));
    MP_OK(hcomm_topology_hint_free(h));
    MP_EXPECT(HCOMM_ERR_INVALID, hcomm_topology_hint_set_dim(NULL, 2));
    mp_expect_msg("NULL hint", "hint is NULL", NULL);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: mp_topo_hint ROWS COLS\n");
        return 2;
    }
    int rows = atoi(argv[1]), cols = atoi(argv[2]);
    mp_init();
    hcomm_comm_t world = hcomm_comm_world();
    const char *topo = getenv("HCOMM_TOPO");
    bool off = topo && !strcmp(topo, "off");
    hcomm_topology_hint_t h;
    hcomm_comm_t grid = NULL, row = NULL;
    MP_OK(hcomm_topology_hint_create(world, &h));
    MP_OK(hcomm_topology_hint_set_dim(h, 2));
    MP_OK(hcomm_topology_hint_set_size(h, 0, rows));
    MP_OK(hcomm_topology_hint_set_size(h, 1, cols));
    MP_OK(hcomm_comm_create_from_hint(world, h, &grid));
    MP_OK(hcomm_topology_hint_free(h));
    if (grid) {
        int g = hcomm_comm_rank(grid), n = hcomm_comm_size(grid);
        if (n != mp_size) mp_fail("grid has %d ranks, world %d", n, mp_size);
        uint64_t mine[2] = {node_hash(), (uint64_t)mp_rank}, *all = calloc((size_t)n * 2, sizeof(uint64_t));
        MP_OK(hcomm_allgather(mine, all, 2, HCOMM_UINT64, grid));
        for (int r = 0; r < n && !off; r++) {
            int rr = r / cols;
            uint64_t first = all[2 * (rr * cols)];
            if (all[2 * r] != first)
                mp_fail("grid rank %d (world %d) is not on the node of its row %d's first rank", r,
                        (int)all[2 * r + 1], rr);
            for (int q = 0; q < rr * cols; q += cols)
                if (all[2 * q] == first)
                    mp_fail("rows %d and %d share a node", q / cols, rr);
        }
        for (int r = 0; r < n && off; r++)
            if ((int)all[2 * r + 1] != r) mp_fail("HCOMM_TOPO=off: grid rank %d is world rank %d", r, (int)all[2 * r + 1]);
        /* A row communicator and an allreduce along it. */
        MP_OK(hcomm_comm_split(grid, g / cols, g % cols, &row));
        int64_t v = g, sum = 0, want = 0;
        for (int c = 0; c < cols; c++) want += (g / cols) * cols + c;
        MP_OK(hcomm_allreduce(&v, &sum, 1, HCOMM_INT64, HCOMM_SUM, row));
        if (sum != want) mp_fail("row %d allreduce: %lld, want %lld", g / cols, (long long)sum, (long long)want);
        if (mp_rank == 0)
            printf("%d x %d grid over the job%s: rows %s\n", rows, cols, off ? " (HCOMM_TOPO=off)" : "",
                   off ? "in world order" : "each on one node");
        MP_OK(hcomm_comm_free(row));
        MP_OK(hcomm_comm_free(grid));
        free(all);
    }
    bad_hints(world);
    return mp_finish("mp_topo_hint");
}
