/*
 * hcomm_info: what hcomm sees on this machine.
 *
 *   hcomm_info        version, drivers (usable or why skipped), the GPU layer
 *                     (backend and devices, or why none), hugepages,
 *                     NUMA nodes, the machine's topology, memory counters
 *   hcomm_info -c     every HCOMM_* knob with its current value, default, help
 *   hcomm_info --version   the library's version and drivers
 *
 * An HCOMM_* variable of the environment that is no knob is warned about on
 * stderr, naming the nearest knob, as hcomm_init does.
 *
 * It initializes nothing: it reads the configuration and probes the drivers
 * with a one-rank environment, as a job's init would.
 */
#include "base/reduce.h"
#include "base/config.h"
#include "gpu/gpu.h"
#include "drv/drv.h"
#include "mem/mem.h"
#include "topo/topo.h"
#include "core/hc_core.h"
#include "api/api_stage.h"

#include <hcomm.h>
#include <stdlib.h>

#include <numa.h>
#include <stdio.h>
#include <string.h>

static void print_line(const char *text, void *arg)
{
    printf("%s%s\n", (const char *)arg, text);
}

static void print_knob(const char *env, const char *value, const char *def, const char *help,
                       void *arg)
{
    (void)arg;
    printf("%-30s = %-12s (default %s)\n    %s\n", env, value, def, help);
}

static void print_hugepages(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    if (!f) {
        printf("  /proc/meminfo unreadable\n");
        return;
    }
    while (fgets(line, sizeof(line), f))
        if (!strncmp(line, "HugePages_", 10) || !strncmp(line, "Hugepagesize", 12))
            printf("  %s", line);
    fclose(f);
}

static void usage(FILE *to)
{
    fprintf(to, "usage: hcomm_info [-c | --topo [FILE] | --version | -h]\n"
                "  (no option)  version, drivers, hugepages, NUMA, topology\n"
                "  -c           every HCOMM_* variable with its value, default and meaning;\n"
                "               HCOMM_* variables of the environment that are not hcomm's\n"
                "               are warned about on stderr (as hcomm_init does)\n"
                "  --version    the library's version and drivers (-V)\n"
                "  --topo       this process's place (core, NUMA node, NUMA distances, the\n"
                "               switch of HCOMM_TOPO_FILE); under a job (hcommrun -n N\n"
                "               hcomm_info --topo) rank 0 prints the job's map, its cost\n"
                "               matrix and the ring order; --topo FILE: the same for the map\n"
                "               in FILE (lines or <cluster> XML), or, for NCCL's per-node\n"
                "               <system> XML, its NUMA nodes and devices (docs/topology.md)\n");
}

static const char *const class_names[HC_TOPO_NCLASS] = {"self", "numa", "host", "switch", "net"};

/* The map, its cost matrix (up to 32 ranks) and the ring order of all its
 * ranks in each mode. */
static int print_map(const hc_topo_map_t *m)
{
    printf("map: %d ranks on %d nodes, %d leaf switches; weights numa %g, host %g, switch %g, net %g\n",
           m->n, m->nnodes, m->nleaves, m->weights.w[HC_TOPO_NUMA], m->weights.w[HC_TOPO_HOST],
           m->weights.w[HC_TOPO_SWITCH], m->weights.w[HC_TOPO_NET]);
    for (int k = 0; k < m->nnodes; k++) {
        printf("  node %d %s (switch %s):", k, m->name[k], m->sw[k][0] ? m->sw[k] : "unknown");
        for (int r = 0; r < m->n; r++)
            if (m->node[r] == k) {
                if (m->numa[r] >= 0) printf(" %d (NUMA %d)", r, m->numa[r]);
                else printf(" %d", r);
            }
        printf("\n");
    }
    if (m->n <= 32) {
        printf("cost matrix (rank x rank):\n     ");
        for (int b = 0; b < m->n; b++) printf("%4d", b);
        printf("\n");
        for (int a = 0; a < m->n; a++) {
            printf("  %2d ", a);
            for (int b = 0; b < m->n; b++) printf("%4g", hc_topo_cost(m, a, b));
            printf("\n");
        }
    } else {
        printf("cost matrix: %d x %d (printed up to 32 ranks); classes:", m->n, m->n);
        for (int c = HC_TOPO_NUMA; c < HC_TOPO_NCLASS; c++) printf(" %s %g", class_names[c], m->weights.w[c]);
        printf("\n");
    }
    int *mem = malloc(sizeof(int) * (size_t)m->n), *order = malloc(sizeof(int) * (size_t)m->n);
    if (!mem || !order) {
        free(mem);
        free(order);
        return 1;
    }
    for (int r = 0; r < m->n; r++) mem[r] = r;
    static const char *const modes[] = {"off", "local", "full"};
    for (int md = 0; md < 3; md++) {
        if (hc_topo_ring(m, mem, m->n, (hc_topo_mode_t)md, order) != HCOMM_OK) {
            printf("ring (%s): %s\n", modes[md], hcomm_last_error());
            continue;
        }
        printf("ring (HCOMM_TOPO=%s): %d node crossings, %d switch crossings, cost %g:", modes[md],
               hc_topo_ring_crossings(m, mem, m->n, order, HC_TOPO_SWITCH),
               hc_topo_ring_crossings(m, mem, m->n, order, HC_TOPO_NET),
               hc_topo_ring_cost(m, mem, m->n, order));
        for (int p = 0; p < m->n && p < 64; p++) printf(" %d", order[p]);
        printf("%s\n", m->n > 64 ? " ..." : "");
    }
    free(mem);
    free(order);
    return 0;
}

/* NCCL's <system> file: one node's NUMA nodes and devices. */
static int print_system(const char *file, const char *indent)
{
    hc_topo_sys_t *sys = NULL;
    if (hc_topo_sys_load(file, &sys) != HCOMM_OK) {
        fprintf(stderr, "hcomm_info: %s\n", hcomm_last_error());
        return 1;
    }
    hc_topo_sys_describe(sys, print_line, (void *)indent);
    hc_topo_sys_free(sys);
    return 0;
}

/* Every driver's line and details, probed as a two-rank job: one rank
 * here, one on another node, so that every scope's drivers say whether
 * they could serve. */
static void describe_drivers(const char *node_id)
{
    int node_of_rank[2] = {0, 1}, local_ranks[1] = {0};
    hc_drv_env_t env = {.rank = 0, .size = 2, .local_rank = 0, .local_size = 2,
                        .local_ranks = local_ranks, .node_of_rank = node_of_rank,
                        .node_id = node_id, .job_key = "", .bootstrap_host = ""};
    hc_drv_describe(&env, print_line, "  ");
}

/* Rank 0's links to the first rank of every other node: the driver, and
 * the rails with their state where the driver has several (a pair that has
 * not talked yet may show its rails down: connections open on first use). */
static void print_links(void)
{
    bool *seen = calloc((size_t)hc_ctx.size, sizeof(bool));
    if (!seen) return;
    printf("links from rank 0 (node %d) to each other node's first rank:\n",
           hc_ctx.node_of_rank[0]);
    int shown = 0;
    for (int w = 1; w < hc_ctx.size; w++) {
        int n = hc_ctx.node_of_rank[w];
        if (n == hc_ctx.node_of_rank[0] || n < 0 || n >= hc_ctx.size || seen[n]) continue;
        seen[n] = true;
        hc_conn_t *c = hc_ctx.peers[w].conn;
        char text[1024] = "";
        if (c && c->ops->links) c->ops->links(c, text, sizeof(text));
        printf("  node %d (rank %d): %s%s%s\n", n, w, c ? c->ops->name : "no connection",
               text[0] ? ": " : " (one link)", text);
        shown++;
    }
    if (!shown) printf("  (one node: none)\n");
    free(seen);
}

static int topo_main(const char *file)
{
    hc_topo_file_kind_t kind;
    if (file) {
        if (hc_topo_file_kind(file, &kind) != HCOMM_OK) {
            fprintf(stderr, "hcomm_info: %s\n", hcomm_last_error());
            return 1;
        }
        if (kind == HC_TOPO_FILE_SYSTEM) {
            printf("%s: NCCL's <system> XML, one node's internals (no switches, no ranks):\n",
                   file);
            return print_system(file, "  ");
        }
        hc_topo_weights_t w;
        hc_topo_map_t *m = NULL;
        if (hc_topo_weights_parse(hc_cfg.topo_weights, &w) != HCOMM_OK ||
            hc_topo_map_load(file, &w, &m) != HCOMM_OK) {
            fprintf(stderr, "hcomm_info: %s\n", hcomm_last_error());
            return 1;
        }
        int rc = print_map(m);
        hc_topo_map_free(m);
        return rc;
    }
    if (getenv("HCOMM_RANK") || getenv("PMI_RANK") || getenv("OMPI_COMM_WORLD_RANK")) {
        if (hcomm_init(NULL, NULL) != HCOMM_OK) {
            fprintf(stderr, "hcomm_info: %s\n", hcomm_last_error());
            return 1;
        }
        int rc = 0;
        if (hc_ctx.rank == 0) {
            printf("job: %d ranks, HCOMM_TOPO=%s\n", hc_ctx.size, hc_cfg.topo);
            rc = print_map(hc_ctx.topo);
            print_links();
        }
        hcomm_finalize();
        return rc;
    }
    char node_id[160];
    hc_topo_self_t me;
    hc_topo_node_id(hc_cfg.node_id, node_id, sizeof(node_id));
    if (hc_topo_self(hc_cfg.topo_file, node_id, &me) != HCOMM_OK) {
        fprintf(stderr, "hcomm_info: %s\n", hcomm_last_error());
        return 1;
    }
    printf("node id: %s\n", node_id);
    printf("this process: core %d, NUMA node %d%s\n", me.core, me.numa,
           me.numa < 0 ? " (not bound inside one NUMA node)" : "");
    bool system = hc_cfg.topo_file[0] && hc_topo_file_kind(hc_cfg.topo_file, &kind) == HCOMM_OK &&
                  kind == HC_TOPO_FILE_SYSTEM;
    printf("switch: %s\n", me.sw[0] ? me.sw
                           : system
                               ? "unknown (HCOMM_TOPO_FILE is NCCL's <system> XML: no switches)"
                           : hc_cfg.topo_file[0] ? "not in HCOMM_TOPO_FILE"
                                                 : "unknown (no HCOMM_TOPO_FILE)");
    if (system) {
        printf("HCOMM_TOPO_FILE (NCCL <system>; a process bound inside one <cpu>'s affinity is on "
               "its NUMA node):\n");
        if (print_system(hc_cfg.topo_file, "  ") != 0) return 1;
    }
    printf("machine: ");
    hc_topo_describe(print_line, "");
    printf("links (the drivers' view: devices, ports, rails):\n");
    describe_drivers(node_id);
    printf("I/O devices (hwloc):\n");
    hc_topo_io_describe(print_line, "  ");
    if (numa_available() >= 0) {
        int n = numa_max_node() + 1;
        printf("NUMA distances:\n     ");
        for (int b = 0; b < n; b++) printf("%4d", b);
        printf("\n");
        for (int a = 0; a < n; a++) {
            printf("  %2d ", a);
            for (int b = 0; b < n; b++) printf("%4d", numa_distance(a, b));
            printf("\n");
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    bool config = false, topo = false;
    const char *topo_file = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-c")) {
            config = true;
        } else if (!strcmp(argv[i], "--topo")) {
            topo = true;
            if (i + 1 < argc && argv[i + 1][0] != '-') topo_file = argv[++i];
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--version") || !strcmp(argv[i], "-V")) {
            printf("%s\n", hcomm_version_string());
            return 0;
        } else {
            fprintf(stderr, "hcomm_info: unknown argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    hcomm_status_t st = hc_config_load();
    if (st != HCOMM_OK) {
        fprintf(stderr, "hcomm_info: %s\n", hcomm_last_error());
        return 1;
    }
    hc_config_check_unknown(true);
    if (config) {
        hc_config_foreach(print_knob, NULL);
        return 0;
    }
    if (topo) return topo_main(topo_file);
    printf("%s\n", hcomm_version_string());

    char node_id[160];
    hc_topo_node_id(hc_cfg.node_id, node_id, sizeof(node_id));
    printf("node id: %s\n", node_id);
    printf("drivers:\n");
    describe_drivers(node_id);

    /* Transports whose drivers this build does not contain, and why. */
    printf("not built:\n");
    if (!HCOMM_BUILD_VERBS)
        printf("  verbs: rdma-core (libibverbs) not found at configure time\n");
    if (!HCOMM_BUILD_MLX5)
        printf("  mlx5: rdma-core's libmlx5 (mlx5dv) not found at configure time\n");
    if (!HCOMM_BUILD_DPDK)
        printf("  dpdk: DPDK (libdpdk-dev) not found at configure time\n");
    /* The cuda backend is in every build (libcuda.so.1 by dlopen: the gpu
     * line says whether it runs); its kernels need nvcc at build time. */
    if (!HCOMM_BUILD_CUDA_KERNELS)
        printf("  cuda kernels: nvcc not found at configure time: GPU reductions unavailable "
               "(device buffers are reduced through host staging)\n");

    hc_reduce_init();
    printf("reduction kernels: %s\n", hc_reduce_isa_name(hc_reduce_isa()));
    /* The GPU layer: its backend and devices, or why there is none (a
     * refused HCOMM_GPU_MODEL=1 is said there, not an error here). */
    char gpu[2048];
    (void)hc_gpu_init();
    hc_gpu_describe(gpu, sizeof(gpu));
    printf("%s\n", gpu);
    /* the path device buffers take (api/api_stage.c) */
    hc_api_stage_describe(gpu, sizeof(gpu));
    printf("  %s\n", gpu);
    hc_gpu_fini();
    printf("hugepages:\n");
    print_hugepages();
    if (numa_available() >= 0)
        printf("NUMA nodes: %d (configured), this CPU on node %d\n", numa_num_configured_nodes(),
               numa_node_of_cpu(0));
    else
        printf("NUMA: not available (libnuma says no NUMA support)\n");
    printf("topology: ");
    hc_topo_describe(print_line, "");
    if (hc_mem_init() == HCOMM_OK) {
        printf("memory pools:\n");
        hc_mem_stats_print(print_line, "  ");
        hc_mem_finalize();
    }
    return 0;
}
