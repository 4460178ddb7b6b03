/*
 * Tests of topo/: the topology file (parse errors named by file and line,
 * dump -> load round trip), the cost classes, and the ring builder on
 * synthetic topologies written to files and loaded back:
 *   - 64 nodes x 8 ranks behind 2 switch levels (4 spines x 4 leaves x 4
 *     nodes), ranks numbered in a scattered order: the ring crosses node
 *     boundaries exactly 64 times and leaf switches exactly 16 times, where
 *     the rank order crosses them hundreds of times;
 *   - nodes behind two switches: the ring crosses between them only twice;
 *   - small random maps (up to 8 ranks): the ring's cost within 5% of the
 *     brute-force optimum;
 *   - 4096 ranks (512 x 8 and 4096 x 1): the compute time, printed.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "topo/test_rng.h"

#include "topo/topo.h"

static char tmpdir[] = "/tmp/hc-topo-test.XXXXXX";


static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Writes a synthetic topology: nodes = spines * leaves * per_leaf nodes of
 * ppn ranks on 2 NUMA nodes each, rank numbers scattered by a random
 * permutation (scatter) or node-major. Returns the path (static buffer). */
static const char *write_topo(const char *name, int spines, int leaves, int per_leaf, int ppn,
                              bool scatter)
{
    static char path[256];
    snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    int nodes = spines * leaves * per_leaf, n = nodes * ppn;
    fprintf(f, "# synthetic: %d spines x %d leaves x %d nodes x %d ranks\n", spines, leaves,
            per_leaf, ppn);
    for (int k = 0; k < nodes; k++)
        fprintf(f, "node n%03d switch spine%d/leaf%d   # comment\n", k, k / (leaves * per_leaf),
                k / per_leaf);
    int *perm = malloc(sizeof(int) * (size_t)n);
    for (int i = 0; i < n; i++) perm[i] = i;
    for (int i = n - 1; scatter && i > 0; i--) {
        int j = (int)(rnd() % (uint32_t)(i + 1)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    fprintf(f, "\n");
    for (int slot = 0; slot < n; slot++) /* slot: node-major position; perm: its rank */
        fprintf(f, "rank %d node n%03d numa %d\n", perm[slot], slot / ppn, (slot % ppn) * 2 / ppn);
    free(perm);
    fclose(f);
    return path;
}

static int *identity_members(int n)
{
    int *m = malloc(sizeof(int) * (size_t)n);
    for (int i = 0; i < n; i++) m[i] = i;
    return m;
}

static void check_permutation(const int *order, int n)
{
    char *seen = calloc((size_t)n, 1);
    assert_int_equal(order[0], 0);
    for (int p = 0; p < n; p++) {
        assert_true(order[p] >= 0 && order[p] < n);
        assert_false(seen[order[p]]);
        seen[order[p]] = 1;
    }
    free(seen);
}

static void test_64x8_two_levels(void **state)
{
    (void)state;
    const char *path = write_topo("64x8.topo", 4, 4, 4, 8, true);
    hc_topo_map_t *m = NULL;
    assert_int_equal(hc_topo_map_load(path, NULL, &m), HCOMM_OK);
    assert_int_equal(m->n, 512);
    assert_int_equal(m->nnodes, 64);
    assert_int_equal(m->nleaves, 16);
    int n = m->n, *mem = identity_members(n), *order = malloc(sizeof(int) * (size_t)n);
    assert_int_equal(hc_topo_ring(m, mem, n, HC_TOPO_MODE_OFF, order), HCOMM_OK);
    int off_nodes = hc_topo_ring_crossings(m, mem, n, order, HC_TOPO_SWITCH);
    int off_sw = hc_topo_ring_crossings(m, mem, n, order, HC_TOPO_NET);
    assert_int_equal(hc_topo_ring(m, mem, n, HC_TOPO_MODE_FULL, order), HCOMM_OK);
    check_permutation(order, n);
    int nodes_x = hc_topo_ring_crossings(m, mem, n, order, HC_TOPO_SWITCH);
    int sw_x = hc_topo_ring_crossings(m, mem, n, order, HC_TOPO_NET);
    int numa_x = hc_topo_ring_crossings(m, mem, n, order, HC_TOPO_HOST);
    printf("64x8 scattered: rank order crosses nodes %d times, switches %d; topology ring: "
           "nodes %d, switches %d, NUMA+nodes %d\n", off_nodes, off_sw, nodes_x, sw_x, numa_x);
    assert_int_equal(nodes_x, 64);
    assert_int_equal(sw_x, 16);
    assert_int_equal(numa_x, 128); /* 2 NUMA nodes per node: one NUMA change inside each */
    assert_true(off_nodes > 400);
    /* LOCAL: nodes whole, but in order of first rank: as many node
     * crossings, switch crossings not minimised. */
    assert_int_equal(hc_topo_ring(m, mem, n, HC_TOPO_MODE_LOCAL, order), HCOMM_OK);
    check_permutation(order, n);
    assert_int_equal(hc_topo_ring_crossings(m, mem, n, order, HC_TOPO_SWITCH), 64);
    /* A sub-communicator: every other rank. */
    int half = n / 2, *sub = malloc(sizeof(int) * (size_t)half);
    for (int i = 0; i < half; i++) sub[i] = 2 * i + 1;
    assert_int_equal(hc_topo_ring(m, sub, half, HC_TOPO_MODE_FULL, order), HCOMM_OK);
    check_permutation(order, half);
    int sub_nodes = 0;
    {
        char seen[64] = {0};
        for (int i = 0; i < half; i++)
            if (!seen[m->node[sub[i]]]++) sub_nodes++;
    }
    assert_int_equal(hc_topo_ring_crossings(m, sub, half, order, HC_TOPO_SWITCH), sub_nodes);
    free(sub);
    free(mem);
    free(order);
    hc_topo_map_free(m);
}

static void test_two_switches(void **state)
{
    (void)state;
    /* 8 nodes, 2 per rank, alternating between two switches in node order. */
    char path[256];
    snprintf(path, sizeof(path), "%s/two.topo", tmpdir);
    FILE *f = fopen(path, "w");
    for (int k = 0; k < 8; k++) fprintf(f, "node h%d switch core/sw%d\n", k, k % 2);
    for (int r = 0; r < 16; r++) fprintf(f, "rank %d node h%d\n", r, r % 8);
    fclose(f);
    hc_topo_map_t *m = NULL;
    assert_int_equal(hc_topo_map_load(path, NULL, &m), HCOMM_OK);
    int *mem = identity_members(16), order[16];
    assert_int_equal(hc_topo_ring(m, mem, 16, HC_TOPO_MODE_OFF, order), HCOMM_OK);
    assert_int_equal(hc_topo_ring_crossings(m, mem, 16, order, HC_TOPO_NET), 16);
    assert_int_equal(hc_topo_ring(m, mem, 16, HC_TOPO_MODE_FULL, order), HCOMM_OK);
    check_permutation(order, 16);
    assert_int_equal(hc_topo_ring_crossings(m, mem, 16, order, HC_TOPO_NET), 2);
    assert_int_equal(hc_topo_ring_crossings(m, mem, 16, order, HC_TOPO_SWITCH), 8);
    free(mem);
    hc_topo_map_free(m);
}

/* Brute force over every ring through members 0..n-1 starting at 0. */
static double best_cost(const hc_topo_map_t *m, const int *mem, int n, int *perm, int k)
{
    if (k == n) return hc_topo_ring_cost(m, mem, n, perm);
    double best = 1e300;
    for (int i = k; i < n; i++) {
        int t = perm[k];
        perm[k] = perm[i];
        perm[i] = t;
        double c = best_cost(m, mem, n, perm, k + 1);
        if (c < best) best = c;
        perm[i] = perm[k];
        perm[k] = t;
    }
    return best;
}

static void test_small_vs_brute_force(void **state)
{
    (void)state;
    double worst = 1.0;
    for (int trial = 0; trial < 150; trial++) {
        int n = 3 + (int)(rnd() % 6), nodes = 1 + (int)(rnd() % (uint32_t)(n < 5 ? n : 5));
        int node[8], numa[8];
        const char *sw[8];
        static const char *const sws[3] = {"s/a", "s/b", "t/c"};
        for (int k = 0; k < nodes; k++) sw[k] = sws[rnd() % 3];
        for (int r = 0; r < n; r++) {
            node[r] = r < nodes ? r : (int)(rnd() % (uint32_t)nodes);
            numa[r] = (int)(rnd() % 2);
        }
        hc_topo_map_t *m = NULL;
        assert_int_equal(hc_topo_map_new(n, node, numa, nodes, NULL, sw, NULL, &m), HCOMM_OK);
        int mem[8], order[8], perm[8];
        /* members in a scattered order */
        for (int i = 0; i < n; i++) mem[i] = i;
        for (int i = n - 1; i > 0; i--) {
            int j = (int)(rnd() % (uint32_t)(i + 1)), t = mem[i];
            mem[i] = mem[j];
            mem[j] = t;
        }
        assert_int_equal(hc_topo_ring(m, mem, n, HC_TOPO_MODE_FULL, order), HCOMM_OK);
        check_permutation(order, n);
        for (int i = 0; i < n; i++) perm[i] = i;
        double opt = best_cost(m, mem, n, perm, 1);
        double got = hc_topo_ring_cost(m, mem, n, order);
        if (got / opt > worst) worst = got / opt;
        if (got > opt * 1.05 + 1e-9)
            fail_msg("trial %d: %d ranks on %d nodes: ring cost %g, optimum %g", trial, n, nodes,
                     got, opt);
        hc_topo_map_free(m);
    }
    printf("150 random maps of 3..8 ranks: worst ring cost / optimum = %.3f\n", worst);
}

static void time_ring(const char *name, int spines, int leaves, int per_leaf, int ppn)
{
    const char *path = write_topo(name, spines, leaves, per_leaf, ppn, true);
    hc_topo_map_t *m = NULL;
    assert_int_equal(hc_topo_map_load(path, NULL, &m), HCOMM_OK);
    int n = m->n, *mem = identity_members(n), *order = malloc(sizeof(int) * (size_t)n);
    double t0 = now_s();
    assert_int_equal(hc_topo_ring(m, mem, n, HC_TOPO_MODE_FULL, order), HCOMM_OK);
    double t = now_s() - t0;
    check_permutation(order, n);
    int leaves_n = m->nleaves;
    assert_int_equal(hc_topo_ring_crossings(m, mem, n, order, HC_TOPO_SWITCH), m->nnodes);
    assert_int_equal(hc_topo_ring_crossings(m, mem, n, order, HC_TOPO_NET), leaves_n);
    printf("%d ranks on %d nodes (%d leaves): ring computed in %.3f s\n", n, m->nnodes, leaves_n, t);
    free(mem);
    free(order);
    hc_topo_map_free(m);
}

static void test_4096_time(void **state)
{
    (void)state;
    time_ring("512x8.topo", 4, 8, 16, 8);
    time_ring("4096x1.topo", 4, 16, 64, 1);
}

/* The order a topology hint uses (hcomm_comm_create_from_hint): an 8 x 8
 * grid over 8 nodes x 8 ranks numbered at random: each row is one node. */
static void test_grid_rows_are_nodes(void **state)
{
    (void)state;
    const char *path = write_topo("8x8.topo", 1, 2, 4, 8, true);
    hc_topo_map_t *m = NULL;
    assert_int_equal(hc_topo_map_load(path, NULL, &m), HCOMM_OK);
    int n = m->n, *mem = identity_members(n), order[64];
    assert_int_equal(n, 64);
    assert_int_equal(hc_topo_ring(m, mem, n, HC_TOPO_MODE_FULL, order), HCOMM_OK);
    bool used[8] = {0};
    for (int row = 0; row < 8; row++) {
        int node = m->node[order[row * 8]];
        assert_false(used[node]);
        used[node] = true;
        for (int c = 1; c < 8; c++) assert_int_equal(m->node[order[row * 8 + c]], node);
    }
    free(mem);
    hc_topo_map_free(m);
}

static void test_dump_roundtrip(void **state)
{
    (void)state;
    const char *path = write_topo("rt.topo", 1, 2, 3, 4, true);
    hc_topo_map_t *a = NULL, *b = NULL;
    assert_int_equal(hc_topo_map_load(path, NULL, &a), HCOMM_OK);
    char out[256];
    snprintf(out, sizeof(out), "%s/dump.topo", tmpdir);
    FILE *f = fopen(out, "w");
    assert_int_equal(hc_topo_map_dump(a, f), HCOMM_OK);
    fclose(f);
    assert_int_equal(hc_topo_map_load(out, NULL, &b), HCOMM_OK);
    assert_int_equal(a->n, b->n);
    assert_int_equal(a->nnodes, b->nnodes);
    assert_int_equal(a->nleaves, b->nleaves);
    for (int r = 0; r < a->n; r++) {
        assert_int_equal(a->node[r], b->node[r]);
        assert_int_equal(a->numa[r], b->numa[r]);
        for (int q = 0; q < a->n; q++) assert_int_equal(hc_topo_class(a, r, q), hc_topo_class(b, r, q));
    }
    for (int k = 0; k < a->nnodes; k++) {
        assert_string_equal(a->name[k], b->name[k]);
        assert_string_equal(a->sw[k], b->sw[k]);
    }
    hc_topo_map_free(a);
    hc_topo_map_free(b);
}

static void expect_load_error(const char *text, const char *want)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/bad.topo", tmpdir);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    hc_topo_map_t *m = NULL;
    assert_int_equal(hc_topo_map_load(path, NULL, &m), HCOMM_ERR_INVALID);
    assert_null(m);
    const char *e = hcomm_last_error();
    if (!strstr(e, want)) fail_msg("error \"%s\" does not say \"%s\"", e, want);
}

static void test_file_errors(void **state)
{
    (void)state;
    expect_load_error("rank 0 node a\nswitch x\n", "bad.topo:2: unknown line \"switch ...\"");
    expect_load_error("node a sw x\n", "bad.topo:1: want \"node <name> switch <path>\"");
    expect_load_error("rank x node a\n", "bad.topo:1: want \"rank <r> node <name> [numa <k>]\"");
    expect_load_error("rank 0 node a\nrank 2 node a\n", "rank 1 has no rank line");
    expect_load_error("rank 0 node a\nrank 0 node b\n", "bad.topo:2: rank 0 placed twice");
    expect_load_error("node a switch x\nnode a switch y\nrank 0 node a\n", "listed twice");
    expect_load_error("# only a comment\n", "no rank lines");
    hc_topo_map_t *m = NULL;
    assert_int_equal(hc_topo_map_load("/nonexistent/x.topo", NULL, &m), HCOMM_ERR_INVALID);
    assert_non_null(strstr(hcomm_last_error(), "/nonexistent/x.topo"));
}

static void test_weights_and_classes(void **state)
{
    (void)state;
    hc_topo_weights_t w;
    assert_int_equal(hc_topo_weights_parse(NULL, &w), HCOMM_OK);
    assert_true(w.w[HC_TOPO_NUMA] == 1 && w.w[HC_TOPO_HOST] == 3 && w.w[HC_TOPO_SWITCH] == 15 &&
                w.w[HC_TOPO_NET] == 30);
    assert_int_equal(hc_topo_weights_parse("2,4,8,16", &w), HCOMM_OK);
    assert_true(w.w[HC_TOPO_NET] == 16);
    assert_int_equal(hc_topo_weights_parse("1,2,3", &w), HCOMM_ERR_INVALID);
    assert_non_null(strstr(hcomm_last_error(), "HCOMM_TOPO_WEIGHTS=1,2,3"));
    assert_int_equal(hc_topo_weights_parse("1,2,3,-4", &w), HCOMM_ERR_INVALID);
    hc_topo_mode_t mode;
    assert_int_equal(hc_topo_mode_parse("LOCAL", &mode), HCOMM_OK);
    assert_int_equal(mode, HC_TOPO_MODE_LOCAL);
    assert_int_equal(hc_topo_mode_parse("sometimes", &mode), HCOMM_ERR_INVALID);
    assert_non_null(strstr(hcomm_last_error(), "HCOMM_TOPO=sometimes"));
    /* ranks 0,1 on node 0 (NUMA 0, 1), 2 on node 1 (same leaf), 3 on node 2 (other leaf),
     * 4 on node 3 (no switch known) */
    int node[5] = {0, 0, 1, 2, 3}, numa[5] = {0, 1, 0, 0, -1};
    const char *sw[4] = {"a/x", "a/x", "a/y", NULL};
    hc_topo_map_t *m = NULL;
    assert_int_equal(hc_topo_map_new(5, node, numa, 4, NULL, sw, NULL, &m), HCOMM_OK);
    assert_int_equal(hc_topo_class(m, 0, 0), HC_TOPO_SELF);
    assert_int_equal(hc_topo_class(m, 0, 1), HC_TOPO_HOST);
    assert_int_equal(hc_topo_class(m, 0, 2), HC_TOPO_SWITCH);
    assert_int_equal(hc_topo_class(m, 0, 3), HC_TOPO_NET);
    assert_int_equal(hc_topo_class(m, 3, 4), HC_TOPO_SWITCH);
    assert_true(hc_topo_cost(m, 2, 3) == 30);
    hc_topo_map_free(m);
    int bad[2] = {0, 5};
    assert_int_equal(hc_topo_map_new(2, bad, NULL, 2, NULL, NULL, NULL, &m), HCOMM_ERR_INVALID);
}

int main(void)
{
    if (!mkdtemp(tmpdir)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_64x8_two_levels),   cmocka_unit_test(test_two_switches),
        cmocka_unit_test(test_small_vs_brute_force), cmocka_unit_test(test_4096_time),
        cmocka_unit_test(test_grid_rows_are_nodes), cmocka_unit_test(test_dump_roundtrip),    cmocka_unit_test(test_file_errors),
        cmocka_unit_test(test_weights_and_classes),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return rc;
}
