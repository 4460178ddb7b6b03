/*
 * Every HCOMM_* knob, declared once. The library's own: X(field, ENV_NAME,
 * type, default, help) below, read into hc_cfg. A driver's own: a table of
 * hc_config_knob_t next to its code, registered with HC_CONFIG_KNOBS, read
 * into the driver's variables. hc_config_load() reads both once, at init;
 * nothing else calls getenv() for an HCOMM_ knob. `hcomm_info -c` (and
 * docs/config.md, generated from it) lists the core's knobs, then each
 * driver's by driver name. Types: INT (int64), SIZE (bytes, accepts K/M/G
 * suffixes), DOUBLE, STR (string, "" for unset), BOOL (0/1/yes/no/on/off).
 */
#ifndef HC_CONFIG_H
#define HC_CONFIG_H

#include "base/hc_base.h"

#define HC_CONFIG_MAP(X)                                                                           \
    X(log, "HCOMM_LOG", STR, "warn", "log level: error|warn|info|debug|trace")                     \
    X(log_file, "HCOMM_LOG_FILE", STR, "",                                                         \
      "log to this file instead of stderr (%r rank, %h host, %p pid, %% a percent sign)")         \
    X(log_subsys, "HCOMM_LOG_SUBSYS", STR, "",                                                     \
      "info/debug/trace messages only of these subsystems, comma separated: base core mem topo "  \
      "coll api drv self shm tcp verbs mlx5 dpdk fake (^ first: all but these; another name is "  \
      "refused); warnings and errors always")                                                     \
    X(rank, "HCOMM_RANK", STR, "",                                                                 \
      "this rank (set by hcommrun; read and checked by the bootstrap, docs/launchers.md)")        \
    X(size, "HCOMM_SIZE", STR, "", "the job's ranks (set by hcommrun)")                            \
    X(local_rank, "HCOMM_LOCAL_RANK", STR, "", "this rank among its node's (set by hcommrun)")     \
    X(local_size, "HCOMM_LOCAL_SIZE", STR, "", "ranks on this node (set by hcommrun)")             \
    X(bootstrap, "HCOMM_BOOTSTRAP", STR, "",                                                       \
      "rank 0's rendezvous address: tcp://host:port or file:///shared/dir (hcommrun, PMI, PMIx, "  \
      "srun and torchrun give one)")                                                               \
    X(job_key, "HCOMM_JOB_KEY", STR, "",                                                           \
      "shared secret of the job's ranks: others reaching the rendezvous are refused")             \
    X(reduce_isa, "HCOMM_REDUCE_ISA", STR, "",                                                     \
      "debug: reduction kernels scalar|avx2|avx512|avx512fp16 instead of the best this CPU has")   \
    X(timeout, "HCOMM_TIMEOUT", DOUBLE, "300",                                                     \
      "seconds any wait may last before ERR_TIMEOUT (decimal; above 1e9: no limit)")              \
    X(progress_thread, "HCOMM_PROGRESS_THREAD", STR, "",                                          \
      "the progress thread: unset: started by the first stream-ordered call; 1: started by "       \
      "hcomm_init, also advancing host operations; 0: none (stream-ordered calls refused)")       \
    X(bootstrap_service, "HCOMM_BOOTSTRAP_SERVICE", BOOL, "1",                                   \
      "rank 0 answers the bootstrap (relayed driver handshakes, failure reports) from a thread "   \
      "of its own while its application is outside hcomm (it sleeps in poll otherwise); 0: only "  \
      "from inside hcomm calls")                                                                   \
    X(bootstrap_nodes, "HCOMM_BOOTSTRAP_NODES", BOOL, "1",                                       \
      "init's tables go by node: rank 0 sends each table to one rank per node, which shares it "  \
      "with its node through a file in /dev/shm (rank 0 sends O(N x nodes) bytes); 0: rank 0 "    \
      "sends every rank every table (O(N^2))")                                                     \
    X(net, "HCOMM_NET", STR, "auto", "transport between nodes: auto|mlx5|verbs|dpdk|tcp")          \
    X(shm, "HCOMM_SHM", BOOL, "1", "use shared memory between ranks of one node")                  \
    X(node_id, "HCOMM_NODE_ID", STR, "", "node identity override (default: host name + netns)")    \
    X(topo, "HCOMM_TOPO", STR, "full",                                                             \
      "topology awareness of collectives across nodes: off (rank order) | local (ranks grouped "   \
      "by node and NUMA node) | full (also switches: rings toured over the cost matrix, "          \
      "hierarchical allreduce); docs/topology.md")                                                 \
    X(topo_file, "HCOMM_TOPO_FILE", STR, "",                                                       \
      "topology file: lines \"node <name> switch <path>\", or XML: hcomm's <cluster> of nested "  \
      "<switch> and <node> elements, or NCCL's per-node <system> (NCCL_TOPO_FILE: NUMA nodes "     \
      "and devices, no switches); docs/topology.md")                                               \
    X(topo_dump_file, "HCOMM_TOPO_DUMP_FILE", STR, "",                                             \
      "rank 0 writes the job's map here at init, in the topology file's line format, or as "      \
      "<cluster> XML when the name ends in .xml")                                                  \
    X(topo_probe, "HCOMM_TOPO_PROBE", BOOL, "1",                                                  \
      "at init, measure latency and bandwidth between nodes (a few pairs per round, one leader "   \
      "per node) and order rings and choose algorithms by the measured costs (HCOMM_TOPO=full, "   \
      "more than one node)")                                                                        \
    X(topo_probe_budget, "HCOMM_TOPO_PROBE_BUDGET", DOUBLE, "0.5",                                 \
      "seconds the probe may take in all, whatever the job size (rank 0's value counts): before "  \
      "each round every rank agrees whether time is left, slow pairs are measured with fewer "     \
      "bytes, pairs not measured take their class's mean; a round may overrun it by what it had "  \
      "started; 0: no limit")                                                                      \
    X(topo_cache, "HCOMM_TOPO_CACHE", STR, "",                                                     \
      "directory where rank 0 keeps probe results, keyed by the job's node set, network driver "   \
      "and links, so that a restarted job skips the probe (empty: $XDG_CACHE_HOME/hcomm or "       \
      "~/.cache/hcomm; none: no cache)")                                                           \
    X(topo_weights, "HCOMM_TOPO_WEIGHTS", STR, "1,3,15,30",                                        \
      "costs of the classes same NUMA node, same host, same switch, across switches")             \
    X(algo, "HCOMM_ALGO", STR, "auto",                                                             \
      "force a collective algorithm: auto | node (node-direct, node-staged: allreduce) | "         \
      "hier (allreduce across nodes of equal rank counts) | "                                     \
      "ring (allreduce reduce broadcast allgather reduce_scatter) | rd (allreduce allgather) | "    \
      "tree (reduce broadcast) | direct (alltoall); collectives it lacks use auto (logged)")        \
    X(rndv, "HCOMM_RNDV", STR, "auto",                                                             \
      "large p2p messages: auto (the receiver gets if it can, else the sender writes, else "      \
      "streams) | get | write | stream (what a connection cannot do streams)")                    \
    X(gdr, "HCOMM_GDR", STR, "auto",                                                               \
      "GPUDirect RDMA (docs/gpu.md): device buffers of p2p calls above the eager size move by "  \
      "rendezvous RMA straight between device memory registered by dmabuf, no host copy: auto "   \
      "(where the peer's driver moves device memory and the registration succeeds, else "        \
      "staged through host memory) | 0 (always staged) | 1 (required: a call that cannot go "    \
      "direct fails, naming the driver and why)")                                                 \
    X(gpu_ipc, "HCOMM_GPU_IPC", STR, "auto",                                                       \
      "IPC inside a node (docs/gpu.md): device buffers of p2p calls above the eager size to a "    \
      "local peer move by the shm driver's get/write between the two device buffers, the "         \
      "peer's allocation mapped by an IPC handle, no host copy; an allreduce, reduce, "            \
      "broadcast, gather, scatter, allgather, reduce_scatter or alltoall moving at least 256 "     \
      "KiB on a communicator of one "                                                              \
      "node runs on the devices through the ranks' mapped buffers (every rank with device "        \
      "buffers; else staged whole): auto | 0 (always staged by the API, pipelined where it "       \
      "can) | 1 (required: a call that cannot go direct fails, naming why; must be the same "      \
      "on every rank)")                                                                            \
    X(lanes, "HCOMM_LANES", STR, "auto",                                                           \
      "lanes: auto gives each communicator context's frames a lane of their own, so a driver "    \
      "with several connections per peer (tcp) carries concurrent collectives of different "      \
      "communicators on different ones, each in order (docs/lanes.md) | 0: every frame on one "   \
      "lane, the drivers' placement without lanes")                                                \
    X(coll_chunk, "HCOMM_COLL_CHUNK", SIZE, "256K",                                                \
      "pipeline chunk per rank for large node collectives")                                        \
    X(coll_small, "HCOMM_COLL_SMALL", SIZE, "4K",                                                  \
      "largest node collective done through the cache-line flagged region")                        \
    X(check, "HCOMM_CHECK", BOOL, "0",                                                             \
      "debug: before each collective, compare kind, count, dtype, op and root across ranks "      \
      "(one extra small allgather per call)")                                                     \
    X(group_fuse, "HCOMM_GROUP_FUSE", SIZE, "64K",                                                 \
      "fuse grouped allreduces whose total size is at most this many bytes")                       \
    X(hugepage_size, "HCOMM_HUGEPAGE_SIZE", STR, "2M", "hugepage size for pools: 2M|1G")           \
    X(mem_pool_initial, "HCOMM_MEM_POOL_INITIAL_SIZE", SIZE, "64M", "pool bytes created at init")  \
    X(mem_pool_node_initial, "HCOMM_MEM_POOL_NODE_INITIAL_SIZE", SIZE, "512M",                     \
      "pool bytes created at init by all the ranks of a node together: a rank's share (this "      \
      "divided by the local size its launcher gives, at least one hugepage) caps "                 \
      "HCOMM_MEM_POOL_INITIAL_SIZE; 0: no cap")                                                    \
    X(mem_pool_max, "HCOMM_MEM_POOL_MAX_SIZE", SIZE, "512M", "pool growth limit")                  \
    X(mem_pool_bucket_bits, "HCOMM_MEM_POOL_BUCKET_BITS", INT, "2",                                \
      "log2 of the ratio between pool size classes")                                               \
    X(reg_cache_max_bytes, "HCOMM_REG_CACHE_MAX_BYTES", SIZE, "1G",                                \
      "bytes of user memory the registration cache may hold (a larger range is registered for "    \
      "one use, uncached)")                                                                        \
    X(reg_cache_max_entries, "HCOMM_REG_CACHE_MAX_ENTRIES", INT, "1024",                           \
      "entries the registration cache may hold")                                                   \
    X(mem_hooks, "HCOMM_MEM_HOOKS", BOOL, "1",                                                     \
      "registration cache: intercept munmap, free and the like to drop records of memory given "   \
      "back (0: only hcomm_mem_deregister does)")                                                  \
    X(stats, "HCOMM_STATS", INT, "0",                                                              \
      "statistics: 0 off, 1 per operation calls, bytes, times (mean, p50, p99, max), sizes, "     \
      "algorithms and drivers, printed at finalize and by hcomm_stats_dump; 2 as "                \
      "HCOMM_STATS_LEVEL=2 (docs/observability.md); an explicit 0 keeps statistics off whatever "  \
      "HCOMM_STATS_LEVEL says")                                                                    \
    X(stats_level, "HCOMM_STATS_LEVEL", INT, "1",                                                  \
      "statistics level: 1 basic (as HCOMM_STATS=1), 2 detailed: adds per communicator and per "   \
      "peer counts (p2p messages and node collectives' shared-memory traffic), time blocked in "   \
      "waits, drivers', pool and registration-cache counters, and times every call; set without "  \
      "HCOMM_STATS it turns statistics on at this level, with HCOMM_STATS=1 or 2 the higher of "   \
      "the two counts")                                                                            \
    X(stats_file, "HCOMM_STATS_FILE", STR, "",                                                     \
      "statistics also as JSON lines in this file (%r rank, %h host, %p pid); hcomm_stats "       \
      "merges the ranks' files into a job report")                                                \
    X(stats_sample, "HCOMM_STATS_SAMPLE", INT, "64",                                               \
      "level 1 times one call in this many (random phase) below 64 KiB, so that timing costs "    \
      "under 3% of an 8-byte collective; 1: every call")                                          \
    X(warn_after, "HCOMM_WARN_AFTER", DOUBLE, "10",                                                \
      "seconds a blocking call or wait may last before it logs what it waits for (who, which "    \
      "step, last heard), then again at each such interval; 0: never")                            \
    X(control_fd, "HCOMM_CONTROL_FD", INT, "-1",                                                   \
      "set by hcommrun: a socket on which it asks this rank for its hang report (--timeout, "     \
      "SIGUSR1)")

/* The largest HCOMM_TIMEOUT kept as given (seconds); larger values saturate
 * to it, which no job outlives (deadlines are 64-bit nanoseconds). */
#define HC_TIMEOUT_MAX 1e9

typedef enum { HC_CFG_INT, HC_CFG_SIZE, HC_CFG_DOUBLE, HC_CFG_STR, HC_CFG_BOOL } hc_cfg_type_t;

typedef struct {
#define HC_CFG_FIELD_INT int64_t
#define HC_CFG_FIELD_SIZE size_t
#define HC_CFG_FIELD_DOUBLE double
#define HC_CFG_FIELD_STR const char *
#define HC_CFG_FIELD_BOOL bool
#define HC_CFG_DECLARE_(field, env, type, def, help) HC_CFG_FIELD_##type field;
    HC_CONFIG_MAP(HC_CFG_DECLARE_)
#undef HC_CFG_DECLARE_
} hc_config_t;

extern hc_config_t hc_cfg;

/* A knob a driver declares (field: int64_t, size_t, double, const char * or
 * bool, by type). */
typedef struct {
    const char *env, *def, *help;
    hc_cfg_type_t type;
    void *field;
} hc_config_knob_t;

#define HC_KNOB_INT(var, env, def, help) {env, def, help, HC_CFG_INT, &(var)}
#define HC_KNOB_SIZE(var, env, def, help) {env, def, help, HC_CFG_SIZE, &(var)}
#define HC_KNOB_DOUBLE(var, env, def, help) {env, def, help, HC_CFG_DOUBLE, &(var)}
#define HC_KNOB_STR(var, env, def, help) {env, def, help, HC_CFG_STR, &(var)}
#define HC_KNOB_BOOL(var, env, def, help) {env, def, help, HC_CFG_BOOL, &(var)}

/* The value of a knob read outside hc_config_load (the bootstrap, which
 * unit tests run without hcomm_init; the reduction kernels, chosen at their
 * first use): getenv, for a name the table lists (NULL otherwise). */
const char *hc_config_env(const char *name);
/* HCOMM_* variables of the environment that no knob names: one warning
 * each, naming the nearest knob (HCOMM_LGO: HCOMM_LOG?); report false: info. */
void hc_config_check_unknown(bool report);

/* Registers a driver's knobs (from a constructor: HC_CONFIG_KNOBS). */
void hc_config_register(const char *owner, const hc_config_knob_t *knobs, size_t n);
#define HC_CONFIG_KNOBS(owner, table)                                                              \
    __attribute__((constructor)) static void hc_config_knobs_##table(void)                       \
    {                                                                                              \
        hc_config_register(owner, table, sizeof(table) / sizeof((table)[0]));                     \
    }

/* Reads every knob from the environment (defaults for unset ones). A value
 * that does not parse fails with ERR_INVALID naming the variable. */
hcomm_status_t hc_config_load(void);

/* Calls fn for each knob: name, current value as text, default, help. */
void hc_config_foreach(void (*fn)(const char *env, const char *value, const char *def,
                                  const char *help, void *arg),
                       void *arg);

/* Parses "64M", "8K", "1G", "4096": bytes. */
bool hc_config_parse_size(const char *s, size_t *out);

#endif /* HC_CONFIG_H */
