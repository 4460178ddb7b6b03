/*
 * topo/: what the machine and the job look like (docs/topology.md).
 *   - the node identity (host name + network namespace, so that ranks in
 *     different namespaces count as different nodes) and an hwloc summary
 *     for hcomm_info (topo.c);
 *   - where this rank runs (core, NUMA node: hwloc) and its node's switch
 *     path from the topology file (topo.c);
 *   - the map: every rank's node and NUMA node, every node's switch path,
 *     built from what the ranks exchanged at init or loaded from a file,
 *     and the cost classes between ranks (topo_map.c);
 *   - ring orders on the map (topo_ring.c).
 * Nothing here communicates: the core exchanges, topo/ computes, and every
 * computation is deterministic, so that every rank derives the same order.
 */
#ifndef HC_TOPO_H
#define HC_TOPO_H

#include "base/hc_base.h"

#include <stdio.h>

/* "host/net:[4026531840]" or HCOMM_NODE_ID when set (override). */
hcomm_status_t hc_topo_node_id(const char *override, char *buf, size_t len);

/* One-line machine summary from hwloc: packages, NUMA nodes, cores, PUs. */
void hc_topo_describe(void (*line)(const char *text, void *arg), void *arg);
/* One line per network, RDMA and GPU device hwloc sees: its PCI address
 * and the NUMA node it hangs off (the PCIe path's end on the CPU side). */
void hc_topo_io_describe(void (*line)(const char *text, void *arg), void *arg);

/* ---- this rank ------------------------------------------------------------------------------ */

#define HC_TOPO_PATH_MAX 64 /* a switch path, NUL included */
#define HC_TOPO_NAME_MAX 160

typedef struct {
    int32_t numa; /* NUMA node of the CPU binding; -1: unbound across NUMA nodes, or unknown */
    int32_t core; /* OS index of the PU this rank ran on at init; -1 unknown */
    char sw[HC_TOPO_PATH_MAX]; /* its node's switch path from HCOMM_TOPO_FILE; "" unknown */
} hc_topo_self_t;

/* Where this process runs (hwloc), and the switch path of node `name` in
 * the topology file `file` (NULL or "": none). When the file is NCCL's
 * per-node <system> XML and gives CPU affinities, its <cpu> whose affinity
 * holds this process's CPU binding names the NUMA node (instead of
 * hwloc's; -1 when the binding spans several). An unreadable or malformed
 * file is an error naming it and the line. */
hcomm_status_t hc_topo_self(const char *file, const char *name, hc_topo_self_t *out);

/* ---- one node's internals: NCCL's topology XML (topo_sys.c) ------------------------------- */

/* NCCL_TOPO_FILE's <system version="1"> describes one node: its CPUs
 * (<cpu numaid= affinity=>) and what hangs off them (<pci busid= class=>,
 * <nic><net name= dev= speed= port= guid=/></nic>, <gpu dev=>). hcomm keeps
 * the NUMA nodes with their CPUs and the network and GPU devices with the
 * NUMA node they hang off (docs/topology.md). */
#define HC_TOPO_SYS_MAX_CPUS 64
#define HC_TOPO_SYS_MAX_DEVS 256
#define HC_TOPO_CPUSET_WORDS 64 /* CPUs 0..4095 */

typedef struct {
    int numa; /* numaid=; -1 absent */
    int line; /* of the <cpu> in the file */
    bool has_affinity;
    uint64_t cpus[HC_TOPO_CPUSET_WORDS]; /* affinity=: bit i is CPU i */
} hc_topo_sys_cpu_t;

typedef enum {
    HC_TOPO_DEV_NET,     /* <net> (inside <nic>) */
    HC_TOPO_DEV_GPU,     /* <gpu> */
    HC_TOPO_DEV_PCI_NET, /* a <pci> of a network class (0x02....) with no <nic> inside */
    HC_TOPO_DEV_PCI_GPU, /* a <pci> of a display class (0x03....) with no <gpu> inside */
} hc_topo_dev_kind_t;

typedef struct {
    hc_topo_dev_kind_t kind;
    int numa;          /* numaid of the <cpu> it hangs off; -1 none */
    int dev, port;     /* dev=, port=; -1 absent */
    double speed_mbps; /* speed= of a <net> (Mb/s, as NCCL writes it); 0 absent */
    char name[64];     /* <net name=>; a <pci>'s class= */
    char busid[32];    /* busid= of the nearest <pci> around it (or its own); "" none */
    char guid[32];     /* <net guid=> */
} hc_topo_sys_dev_t;

typedef struct hc_topo_sys {
    int ncpus, ndevs;
    hc_topo_sys_cpu_t cpu[HC_TOPO_SYS_MAX_CPUS];
    hc_topo_sys_dev_t dev[HC_TOPO_SYS_MAX_DEVS];
} hc_topo_sys_t;

/* The kinds of topology file: hcomm's lines, hcomm's <cluster> XML, NCCL's
 * <system> XML. Errors: unreadable or malformed (file:line). */
typedef enum { HC_TOPO_FILE_LINES, HC_TOPO_FILE_CLUSTER, HC_TOPO_FILE_SYSTEM } hc_topo_file_kind_t;
hcomm_status_t hc_topo_file_kind(const char *path, hc_topo_file_kind_t *kind_p);

/* Loads an NCCL <system> file; any other kind of file is ERR_INVALID. */
hcomm_status_t hc_topo_sys_load(const char *path, hc_topo_sys_t **sys_p);
void hc_topo_sys_free(hc_topo_sys_t *sys);
/* The numaid of the <cpu> whose affinity holds every CPU of cpus
 * (HC_TOPO_CPUSET_WORDS words); -1 when none does (or cpus is empty); -2
 * when no <cpu> of sys has an affinity (the file cannot tell). */
int hc_topo_sys_numa(const hc_topo_sys_t *sys, const uint64_t *cpus);
/* One line per NUMA node (its CPUs) and per device (kind, name, PCI
 * address, NUMA node). */
void hc_topo_sys_describe(const hc_topo_sys_t *sys, void (*line)(const char *text, void *arg),
                          void *arg);

/* ---- the map -------------------------------------------------------------------------------- */

enum { HC_TOPO_SELF, HC_TOPO_NUMA, HC_TOPO_HOST, HC_TOPO_SWITCH, HC_TOPO_NET, HC_TOPO_NCLASS };

/* The class weights (docs/topology.md): same NUMA 1, same host 3, same
 * switch 15, across switches 30. */
typedef struct {
    double w[HC_TOPO_NCLASS];
} hc_topo_weights_t;

/* "1,3,15,30" (NULL or "": the defaults). */
hcomm_status_t hc_topo_weights_parse(const char *s, hc_topo_weights_t *out);

typedef struct hc_topo_map {
    int n;       /* ranks */
    int nnodes;
    int *node;   /* rank -> node index (nodes numbered by their lowest rank) */
    int *numa;   /* rank -> NUMA node, -1 unknown */
    char (*name)[HC_TOPO_NAME_MAX]; /* node -> name */
    char (*sw)[HC_TOPO_PATH_MAX];   /* node -> switch path, "" unknown */
    int *leaf;   /* node -> leaf switch group (nodes with equal paths), -1 unknown */
    int nleaves;
    hc_topo_weights_t weights;
    /* After a calibration probe (hc_topo_map_calibrate): node x node cost,
     * microseconds to move HC_TOPO_REF_BYTES (latency + bytes / bandwidth),
     * measured or, for pairs not sampled, the mean of their class; NULL:
     * the class weights. net_lat_us, net_gbps: the mean of the measured
     * pairs (0: not measured). */
    double *ncost;
    double net_lat_us, net_gbps;
    int measured_pairs;
} hc_topo_map_t;

#define HC_TOPO_REF_BYTES ((size_t)1 << 20)

/* One measured pair of nodes (node indices of the map). */
typedef struct {
    int32_t a, b;
    float lat_us; /* one-way small-message latency */
    float gbps;   /* bandwidth, GB/s (10^9 bytes) */
} hc_topo_meas_t;

/* Installs measurements: every node pair gets a cost (measured, else its
 * class's mean, else the mean of all). n == 0 leaves the map as it is. */
hcomm_status_t hc_topo_map_calibrate(hc_topo_map_t *map, const hc_topo_meas_t *m, int n);

/* A map of n ranks: node[r] the node index of rank r (0..nnodes-1, any
 * numbering), numa[r] (NULL: unknown), per node its name and switch path
 * (NULL: unnamed, unknown). */
hcomm_status_t hc_topo_map_new(int n, const int *node, const int *numa, int nnodes,
                               const char *const *names, const char *const *sw,
                               const hc_topo_weights_t *weights, hc_topo_map_t **map_p);
void hc_topo_map_free(hc_topo_map_t *map);

/* The class of ranks a and b (HC_TOPO_SELF .. HC_TOPO_NET), and its weight. */
int hc_topo_class(const hc_topo_map_t *map, int a, int b);
static inline double hc_topo_cost(const hc_topo_map_t *map, int a, int b)
{
    int na = map->node[a], nb = map->node[b];
    if (map->ncost && na != nb) return map->ncost[(size_t)na * (size_t)map->nnodes + (size_t)nb];
    return map->weights.w[hc_topo_class(map, a, b)];
}

/* The map of a topology file with rank lines (a dump, or a synthetic
 * topology): errors name the file and line. */
hcomm_status_t hc_topo_map_load(const char *path, const hc_topo_weights_t *weights,
                                hc_topo_map_t **map_p);
/* Writes map in the file format (node and rank lines). */
hcomm_status_t hc_topo_map_dump(const hc_topo_map_t *map, FILE *f);
/* Writes map as <cluster> XML: nested <switch> elements, <node> and
 * <rank> elements (hc_topo_map_load reads it back as the same map).
 * Errors: a switch path that XML cannot hold (an empty part: "a//b"). */
hcomm_status_t hc_topo_map_dump_xml(const hc_topo_map_t *map, FILE *f);
/* Writes map to path: as XML when path ends in ".xml", else as lines. */
hcomm_status_t hc_topo_map_dump_path(const hc_topo_map_t *map, const char *path);

/* ---- rings ---------------------------------------------------------------------------------- */

typedef enum { HC_TOPO_MODE_OFF, HC_TOPO_MODE_LOCAL, HC_TOPO_MODE_FULL } hc_topo_mode_t;

/* "off" | "local" | "full". */
hcomm_status_t hc_topo_mode_parse(const char *s, hc_topo_mode_t *out);

/* A ring through the n ranks members[0..n-1] (ranks of map; the members of
 * a communicator): order[p] = index into members of the p-th rank of the
 * ring, order[0] = 0. OFF: 0, 1, 2, ...; LOCAL: grouped by node and NUMA
 * node, nodes in order of their first member; FULL: nodes toured by
 * nearest neighbour + 2-opt on the class weights (docs/topology.md).
 * Deterministic: the same inputs give the same ring on every rank. */
hcomm_status_t hc_topo_ring(const hc_topo_map_t *map, const int *members, int n,
                            hc_topo_mode_t mode, int *order);

/* The ring's cost: the sum of the weights of its n links (order closed). */
double hc_topo_ring_cost(const hc_topo_map_t *map, const int *members, int n, const int *order);
/* How many of the ring's links join different nodes / different leaf
 * switches. */
int hc_topo_ring_crossings(const hc_topo_map_t *map, const int *members, int n, const int *order,
                           int cls);

#endif /* HC_TOPO_H */
