/*
 * hcomm_info: what hcomm sees on this machine.
 *
 *   hcomm_info        version, drivers (usable or why skipped), hugepages,
 *                     NUMA nodes, the machine's topology, memory counters
 *   hcomm_info -c     every HCOMM_* knob with its current value, default, help
 *
 * It initializes nothing: it reads the configuration and probes the drivers
 * with a one-rank environment, as a job's init would.
 */
#include "coll/reduce.h"
#include "base/config.h"
#include "drv/drv.h"
#include "mem/mem.h"
#include "topo/topo.h"

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
    fprintf(to, "usage: hcomm_info [-c]\n"
                "  (no option)  version, drivers, hugepages, NUMA, topology\n"
                "  -c           every HCOMM_* variable with its value, default and meaning\n");
}

int main(int argc, char **argv)
{
    bool config = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-c")) {
            config = true;
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
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
    if (config) {
        hc_config_foreach(print_knob, NULL);
        return 0;
    }
    printf("%s\n", hcomm_version_string());

    /* Probe as a two-rank job: one rank here, one on another node, so that
     * every scope's drivers say whether they could serve. */
    int node_of_rank[2] = {0, 1}, local_ranks[1] = {0};
    char node_id[160];
    hc_topo_node_id(hc_cfg.node_id, node_id, sizeof(node_id));
    hc_drv_env_t env = {.rank = 0, .size = 2, .local_rank = 0, .local_size = 2,
                        .local_ranks = local_ranks, .node_of_rank = node_of_rank,
                        .node_id = node_id, .job_key = "", .bootstrap_host = ""};
    printf("node id: %s\n", node_id);
    printf("drivers:\n");
    hc_drv_describe(&env, print_line, "  ");

    /* Transports whose drivers this build does not contain, and why. */
    printf("not built:\n");
    if (!HCOMM_BUILD_VERBS)
        printf("  verbs: rdma-core (libibverbs) not found at configure time\n");
    printf("  mlx5: no driver in this version (libmlx5 %s at configure time)\n",
           HCOMM_BUILD_MLX5 ? "found" : "not found");
    printf("  dpdk: no driver in this version (DPDK %s at configure time)\n",
           HCOMM_BUILD_DPDK ? "found" : "not found");
    printf("  cuda: no GPU memory support in this version (CUDA toolkit %s)\n",
           HCOMM_BUILD_CUDA ? "found" : "not found");

    hc_reduce_init();
    printf("reduction kernels: %s\n", hc_reduce_isa_name(hc_reduce_isa()));
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
