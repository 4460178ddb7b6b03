/*
 * Bringing a rank up and down.
 *
 * Init is two rendezvous rounds: the first exchanges each rank's pid and node
 * identity, from which every rank derives the same node map; the drivers
 * that map calls for are then opened, and the second round exchanges their
 * address blobs (one fixed-size slot per registered driver), after which each
 * driver wires up and every peer gets a connection: self for this rank, the
 * node driver for ranks of this node, the network driver for the rest.
 *
 * Teardown is idempotent and used by both finalize and a failed init.
 */
#include "core/hc_core.h"
#include "core/stats.h"
#include "gpu/gpu.h"
#include "mem/mem.h"
#include "topo/topo.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

hc_ctx_t hc_ctx;

#define HC_DRV_ADDR_MAX 512
_Static_assert(HC_DRV_SCOPE_NET < HC_DRV_MAX, "the address table has a slot per driver scope");

typedef struct {
    uint32_t pid;
    int32_t launcher_local_rank, launcher_local_size; /* -1: the launcher did not say */
    char node_id[160];
    /* Where the process really runs: kernel boot id + network namespace.
     * Ranks grouped as one node (same node_id) must share it, or they
     * cannot share memory. */
    char machine[200];
    hc_topo_self_t topo; /* core, NUMA node, the switch path of its node (HCOMM_TOPO_FILE) */
} hc_rank_info_t;

static void hc_ctx_machine_id(char *buf, size_t len)
{
    char boot[64] = "?", where[128];
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (!fgets(boot, sizeof(boot), f))
            snprintf(boot, sizeof(boot), "?");
        boot[strcspn(boot, "\n")] = '\0';
        fclose(f);
    }
    hc_topo_node_id(NULL, where, sizeof(where));
    snprintf(buf, len, "%.40s/%.150s", boot, where);
}

/* Ranks of one node must be able to share memory, and what the launcher
 * said about local ranks must agree with the node map: said at once, not
 * as a node-segment timeout later. */
static hcomm_status_t hc_ctx_check_nodes(const hc_rank_info_t *info)
{
    int n = hc_ctx.size;
    for (int r = 0; r < n; r++) {
        if (hc_ctx.node_of_rank[r] != hc_ctx.node || r == hc_ctx.rank)
            continue;
        const hc_rank_info_t *a = &info[hc_ctx.rank], *b = &info[r];
        if (strncmp(a->machine, b->machine, sizeof(a->machine)))
            return hc_error(HCOMM_ERR_INVALID,
                            "hcomm_init: ranks %d and %d are grouped as one node (node id \"%s\"%s) "
                            "but run on different machines or network namespaces (%s vs %s): "
                            "they cannot share memory; give each host its own HCOMM_NODE_ID",
                            hc_ctx.rank, r, a->node_id, hc_cfg.node_id[0] ? ", HCOMM_NODE_ID" : "",
                            a->machine, b->machine);
        if (a->launcher_local_rank >= 0 && a->launcher_local_rank == b->launcher_local_rank)
            return hc_error(HCOMM_ERR_INVALID,
                            "hcomm_init: ranks %d and %d on one node both say local rank %d "
                            "(HCOMM_LOCAL_RANK or the launcher's variable)",
                            hc_ctx.rank, r, a->launcher_local_rank);
    }
    const hc_rank_info_t *me = &info[hc_ctx.rank];
    if (me->launcher_local_size > 0 && me->launcher_local_size != hc_ctx.local_size)
        return hc_error(HCOMM_ERR_INVALID,
                        "hcomm_init: the launcher says %d ranks on this node (HCOMM_LOCAL_SIZE or "
                        "its own variable), the node map has %d (ranks with node id \"%s\")",
                        me->launcher_local_size, hc_ctx.local_size, me->node_id);
    if (me->launcher_local_rank >= hc_ctx.local_size)
        return hc_error(HCOMM_ERR_INVALID,
                        "hcomm_init: local rank %d (HCOMM_LOCAL_RANK or the launcher's variable) "
                        "is out of range for the %d ranks on this node",
                        me->launcher_local_rank, hc_ctx.local_size);
    return HCOMM_OK;
}

static void hc_ctx_verdict(void *arg, int peer, int cause, hcomm_status_t status, const char *why)
{
    (void)arg;
    hc_peer_verdict(peer, cause, status, why);
}

hc_drv_t *hc_core_node_driver(void)
{
    for (int i = 0; i < hc_ctx.ndrvs; i++)
        if (hc_ctx.drvs[i]->ops->scope == HC_DRV_SCOPE_NODE)
            return hc_ctx.drvs[i];
    return NULL;
}

/* Per-peer handshakes of drivers travel through the bootstrap relay, on the
 * channel of the driver's index. */
static hcomm_status_t hc_ctx_ep_send(void *core, hc_drv_t *drv, int peer, const void *blob,
                                     size_t len)
{
    (void)core;
    if (len > HC_DRV_EP_BLOB_MAX)
        return hc_error(HCOMM_ERR_INVALID, "%s: a %zu-byte handshake (at most %d)",
                        drv->ops->name, len, HC_DRV_EP_BLOB_MAX);
    if (peer < 0 || peer >= hc_ctx.size || hc_ctx.peers[peer].failed)
        return hc_error(HCOMM_ERR_PEER_FAILED, "%s: handshake with rank %d: it failed",
                        drv->ops->name, peer);
    return hc_bootstrap_relay(hc_ctx.bs, peer, (uint32_t)drv->index, blob, len);
}

static void hc_ctx_ep_recv(void *arg, int from, uint32_t channel, const void *blob, size_t len)
{
    (void)arg;
    if (channel >= (uint32_t)hc_ctx.ndrvs) {
        hc_log_warn("handshake from rank %d for driver %u, which is not open here: dropped", from,
                    channel);
        return;
    }
    hc_drv_t *d = hc_ctx.drvs[channel];
    d->ops->ep_recv(d, from, blob, len);
}

static void hc_ctx_peer_failed(void *core, int peer, hcomm_status_t status, const char *why)
{
    (void)core;
    hc_peer_fail(peer, status, why);
}

/* Registers a region with every open driver, handing each the whole region;
 * one refusal undoes the registrations made before it. */
static hcomm_status_t hc_ctx_mem_reg(void *arg, hc_mem_region_t *region)
{
    (void)arg;
    bool dev = region->mem_type != HC_MEM_HOST;
    hc_mem_desc_t desc = {.addr = region->base,
                          .len = region->size,
                          .page_size = region->page_size,
                          .fd = region->fd,
                          .fd_offset = 0,
                          .iovas = NULL,
                          .numa_node = region->numa_node,
                          .user = (region->flags & HC_MEM_USER) != 0,
                          .mem_type = region->mem_type,
                          .device = dev ? region->device : -1,
                          .dmabuf_fd = dev ? region->dmabuf_fd : -1,
                          .dmabuf_offset = dev ? region->dmabuf_offset : 0};
    for (int i = 0; i < hc_ctx.ndrvs; i++) {
        hc_drv_t *d = hc_ctx.drvs[i];
        region->keys[i] = 0;
        /* Device memory only for the drivers that move it (key 0 for the
         * others: hc_mem_key_local refuses them). */
        if (!hc_drv_moves(d->ops, region->mem_type)) continue;
        hcomm_status_t st = d->ops->mem_reg(d, &desc, &region->keys[i]);
        if (st != HCOMM_OK) {
            while (--i >= 0)
                if (hc_drv_moves(hc_ctx.drvs[i]->ops, region->mem_type))
                    hc_ctx.drvs[i]->ops->mem_dereg(hc_ctx.drvs[i], region->keys[i]);
            return st;
        }
    }
    return HCOMM_OK;
}

static void hc_ctx_mem_dereg(void *arg, hc_mem_region_t *region)
{
    (void)arg;
    for (int i = 0; i < hc_ctx.ndrvs; i++)
        if (hc_drv_moves(hc_ctx.drvs[i]->ops, region->mem_type))
            hc_ctx.drvs[i]->ops->mem_dereg(hc_ctx.drvs[i], region->keys[i]);
}

/* More ranks on this machine than cores: waits must yield almost at once,
 * or the rank being waited for cannot run. Counted per kernel (boot id), not
 * per node: "nodes" that are network namespaces or containers of one host
 * share its cores, and four spinning ranks on two cores made each message
 * wait for a scheduler time slice (~0.5 ms per small allreduce). */
static void hc_ctx_tune_backoff(const hc_rank_info_t *info)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    const char *mine = info[hc_ctx.rank].machine;
    size_t boot_len = strcspn(mine, "/");
    int here = 0;
    for (int r = 0; r < hc_ctx.size; r++)
        if (!strncmp(info[r].machine, mine, boot_len) && info[r].machine[boot_len] == '/')
            here++;
    if (cpus > 0 && here > cpus) {
        hc_backoff_spin_limit = 32;
        hc_log_info("%d ranks on %ld cores of this machine: waits yield quickly", here, cpus);
    } else {
        hc_backoff_spin_limit = 2048;
    }
}

/* Node index of every rank: nodes numbered in order of their first rank. */
static hcomm_status_t hc_ctx_build_nodes(const hc_rank_info_t *info)
{
    int n = hc_ctx.size;
    hc_ctx.node_of_rank = malloc(sizeof(int) * (size_t)n);
    hc_ctx.local_ranks = malloc(sizeof(int) * (size_t)n);
    if (!hc_ctx.node_of_rank || !hc_ctx.local_ranks)
        return hc_error(HCOMM_ERR_NO_MEMORY, "hcomm_init: node map");
    int nodes = 0;
    for (int r = 0; r < n; r++) {
        hc_ctx.node_of_rank[r] = -1;
        for (int q = 0; q < r; q++) {
            if (!strncmp(info[q].node_id, info[r].node_id, sizeof(info[r].node_id))) {
                hc_ctx.node_of_rank[r] = hc_ctx.node_of_rank[q];
                break;
            }
        }
        if (hc_ctx.node_of_rank[r] < 0)
            hc_ctx.node_of_rank[r] = nodes++;
    }
    hc_ctx.node_count = nodes;
    hc_ctx.node = hc_ctx.node_of_rank[hc_ctx.rank];
    hc_ctx.local_size = 0;
    for (int r = 0; r < n; r++) {
        if (hc_ctx.node_of_rank[r] != hc_ctx.node)
            continue;
        if (r == hc_ctx.rank)
            hc_ctx.local_rank = hc_ctx.local_size;
        hc_ctx.local_ranks[hc_ctx.local_size++] = r;
    }
    return hc_ctx_check_nodes(info);
}

/* The map every rank builds from the same exchanged table (so the same
 * map everywhere); rank 0 writes it to HCOMM_TOPO_DUMP_FILE. */
static hcomm_status_t hc_ctx_build_topo(const hc_rank_info_t *info)
{
    int n = hc_ctx.size, nn = hc_ctx.node_count;
    hc_topo_weights_t w;
    hcomm_status_t st = hc_topo_weights_parse(hc_cfg.topo_weights, &w);
    if (st != HCOMM_OK)
        return st;
    int *numa = malloc(sizeof(int) * (size_t)n);
    const char **names = calloc((size_t)nn, sizeof(char *)), **sw = calloc((size_t)nn, sizeof(char *));
    if (!numa || !names || !sw) {
        st = hc_error(HCOMM_ERR_NO_MEMORY, "hcomm_init: topology map");
        goto out;
    }
    for (int r = 0; r < n; r++) {
        int k = hc_ctx.node_of_rank[r];
        numa[r] = info[r].topo.numa;
        if (!names[k]) {
            names[k] = info[r].node_id;
            sw[k] = info[r].topo.sw;
        } else if (strcmp(sw[k], info[r].topo.sw)) {
            st = hc_error(HCOMM_ERR_INVALID, "hcomm_init: HCOMM_TOPO_FILE puts node %s under switch "
                          "\"%s\" for one rank and \"%s\" for rank %d: every rank must read the "
                          "same file", names[k], sw[k], info[r].topo.sw, r);
            goto out;
        }
    }
    if ((st = hc_topo_map_new(n, hc_ctx.node_of_rank, numa, nn, names, sw, &w, &hc_ctx.topo)) != HCOMM_OK)
        goto out;
    if (hc_ctx.rank == 0 && hc_cfg.topo_dump_file[0]) {
        if (hc_topo_map_dump_path(hc_ctx.topo, hc_cfg.topo_dump_file) != HCOMM_OK)
            hc_log_warn("HCOMM_TOPO_DUMP_FILE=%s: %s", hc_cfg.topo_dump_file, hcomm_last_error());
        else
            hc_log_info("topology: the map went to %s", hc_cfg.topo_dump_file);
    }
out:
    free(numa);
    free(names);
    free(sw);
    return st;
}

static hcomm_status_t hc_ctx_connect_all(const uint8_t *table)
{
    /* Which open driver serves which scope. */
    hc_drv_t *by_scope[HC_DRV_SCOPES] = {0};
    for (int i = 0; i < hc_ctx.ndrvs; i++)
        by_scope[hc_ctx.drvs[i]->ops->scope] = hc_ctx.drvs[i];
    size_t stride = (size_t)HC_DRV_SCOPES * HC_DRV_ADDR_MAX; /* one blob per scope */

    for (int i = 0; i < hc_ctx.ndrvs; i++) {
        hc_drv_t *d = hc_ctx.drvs[i];
        const void **addrs = calloc((size_t)hc_ctx.size, sizeof(*addrs));
        size_t *lens = calloc((size_t)hc_ctx.size, sizeof(*lens));
        if (!addrs || !lens) {
            free(addrs);
            free(lens);
            return hc_error(HCOMM_ERR_NO_MEMORY, "hcomm_init: wireup tables");
        }
        for (int r = 0; r < hc_ctx.size; r++) {
            const uint8_t *slot =
                table + (size_t)r * stride + (size_t)d->ops->scope * HC_DRV_ADDR_MAX;
            uint32_t len;
            memcpy(&len, slot, sizeof(len));
            addrs[r] = slot + sizeof(len);
            lens[r] = len;
        }
        hcomm_status_t st = d->ops->wireup(d, addrs, lens);
        free(addrs);
        free(lens);
        if (st != HCOMM_OK)
            return st;
    }
    for (int r = 0; r < hc_ctx.size; r++) {
        hc_drv_t *d;
        if (r == hc_ctx.rank)
            d = by_scope[HC_DRV_SCOPE_SELF];
        else if (hc_ctx.node_of_rank[r] == hc_ctx.node && by_scope[HC_DRV_SCOPE_NODE])
            d = by_scope[HC_DRV_SCOPE_NODE];
        else
            d = by_scope[HC_DRV_SCOPE_NET];
        if (!d)
            return hc_error(HCOMM_ERR_NO_DEVICE, "hcomm_init: no driver reaches rank %d", r);
        const uint8_t *slot = table + (size_t)r * stride + (size_t)d->ops->scope * HC_DRV_ADDR_MAX;
        uint32_t len;
        memcpy(&len, slot, sizeof(len));
        hc_conn_t *conn = NULL;
        hcomm_status_t st = d->ops->connect(d, r, slot + sizeof(len), len, &conn);
        if (st != HCOMM_OK)
            return st;
        conn->core_priv = &hc_ctx.peers[r];
        if (conn->eager_max > 16 * conn->max_frame)
            conn->eager_max = 16 * conn->max_frame;
        hc_ctx.peers[r].conn = conn;
    }
    return HCOMM_OK;
}

void hc_ctx_teardown(void)
{
    while (!hc_list_empty(&hc_ctx.comms) && hc_ctx.comms.next)
        hc_comm_destroy(hc_container_of(hc_ctx.comms.next, struct hcomm_comm, link));
    /* drivers that drain their sockets below may still deliver frames */
    hc_ctx.world = NULL;
    hc_ctx.tearing_down = true;
    hc_p2p_orphans_cleanup();
    hc_gdr_fini();
    if (hc_ctx.peers) {
        for (int r = 0; r < hc_ctx.size; r++) {
            hc_peer_t *p = &hc_ctx.peers[r];
            hc_list_t *pos, *tmp;
            hc_list_foreach_safe(pos, tmp, &p->pending)
            {
                hc_pending_frame_t *f = hc_container_of(pos, hc_pending_frame_t, link);
                hc_p2p_pending_del(p, f);
                free(f);
            }
            free(p->partial);
            p->partial = NULL;
            if (p->conn)
                p->conn->ops->disconnect(p->conn);
            if (p->pidfd >= 0)
                close(p->pidfd);
        }
    }
    /* Drivers drop their own registrations when they close; regions a
     * driver owns (the shm segment) go with it, before mem/ shuts down. */
    hc_mem_set_reg_hooks(NULL, NULL, NULL);
    for (int i = hc_ctx.ndrvs - 1; i >= 0; i--)
        hc_ctx.drvs[i]->ops->close(hc_ctx.drvs[i]);
    hc_mem_finalize();
    hc_gpu_fini(); /* after mem/: staging chunks are pool memory */
    if (hc_ctx.bs)
        hc_bootstrap_close(hc_ctx.bs);
    free(hc_ctx.peers);
    hc_topo_map_free(hc_ctx.topo);
    hc_ctx.topo = NULL;
    free(hc_ctx.node_of_rank);
    free(hc_ctx.local_ranks);
    hc_bootstrap_pmi_finalize();
    hc_bootstrap_pmix_finalize();
    hc_stats_fini();
    hc_request_pool_fini();
    memset(&hc_ctx, 0, sizeof(hc_ctx));
    hc_list_init(&hc_ctx.comms);
}

/* HCOMM_CONTROL_FD (hcommrun): the socket on which the launcher asks for
 * this rank's hang report; kept from the application's children. */
static void hc_ctx_control_open(void)
{
    /* Kept for the life of the process, never closed: a later hcomm_init
     * (after hcomm_finalize) finds it again, never a reused number. */
    static int kept = -1;
    int fd = (int)hc_cfg.control_fd;
    hc_ctx.control_fd = kept;
    if (fd < 0 || kept >= 0)
        return;
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0 || fcntl(fd, F_SETFD, FD_CLOEXEC) != 0) {
        hc_log_warn("HCOMM_CONTROL_FD=%d is not an open descriptor (%s): hcommrun cannot ask this "
                    "rank for its hang report", fd, strerror(errno));
        return;
    }
    hc_ctx.control_fd = kept = fd;
    /* hcommrun waits for reports only from ranks that said so */
    (void)send(fd, "hcomm-up", 8, MSG_DONTWAIT | MSG_NOSIGNAL);
}

/* Init, first phase: the configuration and who this rank is (the launcher's
 * or the caller's parameters). Nothing to undo when it fails. */
static hcomm_status_t hc_ctx_init_config(const hc_bootstrap_params_t *given)
{
    hcomm_status_t st;
    if ((st = hc_config_load()) != HCOMM_OK)
        return st;
    if ((st = hc_rndv_init()) != HCOMM_OK || (st = hc_gdr_init()) != HCOMM_OK ||
        (st = hc_p2p_lanes_init()) != HCOMM_OK)
        return st;
    if (given)
        hc_ctx.bs_params = *given;
    else if ((st = hc_bootstrap_params_from_env(&hc_ctx.bs_params)) != HCOMM_OK)
        return st;
    hc_ctx.rank = hc_ctx.bs_params.rank;
    hc_ctx.size = hc_ctx.bs_params.size;
    hc_log_set_rank(hc_ctx.size > 1 ? hc_ctx.rank : -1);
    if ((st = hc_log_configure(hc_cfg.log_file, hc_cfg.log_subsys)) != HCOMM_OK) return st;
    hc_config_check_unknown(hc_ctx.rank == 0); /* one warning per job, not per rank */
    return HCOMM_OK;
}

/* The request pool, the peer table and mem/. */
static hcomm_status_t hc_ctx_init_peers(void)
{
    hcomm_status_t st;
    if ((st = hc_request_pool_init()) != HCOMM_OK)
        return st;
    hc_ctx.peers = calloc((size_t)hc_ctx.size, sizeof(hc_peer_t));
    if (!hc_ctx.peers)
        return hc_error(HCOMM_ERR_NO_MEMORY, "hcomm_init: peer table for %d ranks", hc_ctx.size);
    for (int r = 0; r < hc_ctx.size; r++) {
        hc_ctx.peers[r].pidfd = -1;
        hc_list_init(&hc_ctx.peers[r].pending);
    }
    /* The GPU layer below mem/: HCOMM_GPU_MODEL=1 where the model is not
     * built in fails here, by name (docs/gpu.md). */
    if ((st = hc_gpu_init()) != HCOMM_OK) {
        char saved[512];
        snprintf(saved, sizeof(saved), "%s", hc_error_last());
        return hc_error(st, "hcomm_init: %s", saved);
    }
    hc_mem_set_local_size(hc_ctx.bs_params.local_size);
    return hc_mem_init();
}

/* Rendezvous round 1: who runs where (pid, node identity, topology); every
 * rank derives the same node map and topology from it. *info_p: the table,
 * the bootstrap's (valid until it closes). */
static hcomm_status_t hc_ctx_round_ranks(const hc_rank_info_t **info_p)
{
    hcomm_status_t st;
    hc_rank_info_t me = {.pid = (uint32_t)getpid(),
                         .launcher_local_rank = hc_ctx.bs_params.local_rank,
                         .launcher_local_size = hc_ctx.bs_params.local_size};
    hc_topo_node_id(hc_cfg.node_id, me.node_id, sizeof(me.node_id));
    hc_ctx_machine_id(me.machine, sizeof(me.machine));
    snprintf(hc_ctx.node_id, sizeof(hc_ctx.node_id), "%s", me.node_id);
    if ((st = hc_topo_mode_parse(hc_cfg.topo, &hc_ctx.topo_mode)) != HCOMM_OK ||
        (st = hc_topo_self(hc_cfg.topo_file, me.node_id, &me.topo)) != HCOMM_OK)
        return st; /* the message names the variable (and the file and line) */
    /* Round 1 by node: ranks that agree on node_id and machine share /dev/shm
     * (those that agree on node_id alone are an error the map reports). */
    _Static_assert(offsetof(hc_rank_info_t, machine) ==
                       offsetof(hc_rank_info_t, node_id) + sizeof(me.node_id),
                   "node_id and machine are the node key, adjacent");
    hc_ctx.bs_params.node_key_off = hc_cfg.bootstrap_nodes ? offsetof(hc_rank_info_t, node_id) : 0;
    hc_ctx.bs_params.node_key_len =
        hc_cfg.bootstrap_nodes ? sizeof(me.node_id) + sizeof(me.machine) : 0;
    const void *table = NULL;
    st = hc_bootstrap_open(&hc_ctx.bs_params, &me, sizeof(me), hc_cfg.timeout, &hc_ctx.bs, &table);
    if (st != HCOMM_OK)
        return st;
    const hc_rank_info_t *info = table;
    hc_bootstrap_set_notice(hc_ctx.bs, hc_ctx_verdict, NULL);
    hc_bootstrap_set_relay(hc_ctx.bs, hc_ctx_ep_recv, NULL);
    if ((st = hc_ctx_build_nodes(info)) != HCOMM_OK)
        return st;
    if ((st = hc_ctx_build_topo(info)) != HCOMM_OK)
        return st;
    for (int r = 0; r < hc_ctx.size; r++)
        hc_ctx.peers[r].pid = (pid_t)info[r].pid;
    *info_p = info;
    return HCOMM_OK;
}

/* The drivers the node map calls for, with what they are told of the job;
 * then the lists of those to poll and to flush. */
static hcomm_status_t hc_ctx_open_drivers(void)
{
    hcomm_status_t st;
    /* The network driver picks the interface that routes to the rendezvous
     * host (file:// rendezvous: no host, the driver chooses). */
    hc_bootstrap_url_t url;
    if (hc_ctx.bs_params.url[0] && hc_bootstrap_url_parse(hc_ctx.bs_params.url, "HCOMM_BOOTSTRAP",
                                                          &url) == HCOMM_OK &&
        !url.is_file)
        snprintf(hc_ctx.bootstrap_host, sizeof(hc_ctx.bootstrap_host), "%s", url.host);
    hc_ctx.env = (hc_drv_env_t){
        .bootstrap_host = hc_ctx.bootstrap_host,
        .rank = hc_ctx.rank,
        .size = hc_ctx.size,
        .local_rank = hc_ctx.local_rank,
        .local_size = hc_ctx.local_size,
        .local_ranks = hc_ctx.local_ranks,
        .node_of_rank = hc_ctx.node_of_rank,
        .node_id = hc_ctx.node_id,
        .job_key = hc_ctx.bs_params.job_key[0] ? hc_ctx.bs_params.job_key : hc_ctx.bs_params.url,
        .core = &hc_ctx,
        .deliver = hc_p2p_deliver,
        .put_done = hc_p2p_put_done,
        .rma_done = hc_rndv_rma_done,
        .peer_failed = hc_ctx_peer_failed,
        .ep_send = hc_ctx_ep_send,
        .lanes = hc_ctx.lanes ? HC_FRAME_LANES : 1,
    };
    if ((st = hc_drv_select_open(&hc_ctx.env, hc_ctx.drvs, &hc_ctx.ndrvs)) != HCOMM_OK)
        return st;
    for (int i = 0; i < hc_ctx.ndrvs; i++)
        if (!hc_drv_progress_is_noop(hc_ctx.drvs[i]->ops))
            hc_ctx.poll[hc_ctx.npoll++] = hc_ctx.drvs[i];
    for (int i = 0; i < hc_ctx.ndrvs; i++)
        if (hc_ctx.drvs[i]->ops->flush)
            hc_ctx.flush[hc_ctx.nflush++] = hc_ctx.drvs[i];
    /* RLIMIT_MEMLOCK matters only to a driver that registers memory */
    for (int i = 0; i < hc_ctx.ndrvs; i++)
        if (hc_drv_registers_memory(hc_ctx.drvs[i]->ops)) {
            hc_mem_memlock_needed(hc_ctx.drvs[i]->ops->name);
            break;
        }
    return HCOMM_OK;
}

/* Rendezvous round 2: every driver's address blob; then every peer is
 * connected. */
static hcomm_status_t hc_ctx_round_addrs(void)
{
    hcomm_status_t st;
    size_t stride = (size_t)HC_DRV_SCOPES * HC_DRV_ADDR_MAX; /* one blob per scope */
    uint8_t *blobs = calloc(1, stride);
    uint8_t *table2 = malloc(stride * (size_t)hc_ctx.size);
    if (!blobs || !table2) {
        st = hc_error(HCOMM_ERR_NO_MEMORY, "hcomm_init: address table");
        goto out;
    }
    for (int i = 0; i < hc_ctx.ndrvs; i++) {
        hc_drv_t *d = hc_ctx.drvs[i];
        /* By scope, not by position: a rank alone on its node opens no node
         * driver, so its network driver's position differs from its
         * peers'. */
        uint8_t *slot = blobs + (size_t)d->ops->scope * HC_DRV_ADDR_MAX;
        size_t len = HC_DRV_ADDR_MAX - sizeof(uint32_t);
        if ((st = d->ops->addr_pack(d, slot + sizeof(uint32_t), &len)) != HCOMM_OK)
            goto out;
        uint32_t len32 = (uint32_t)len;
        memcpy(slot, &len32, sizeof(len32));
    }
    if (hc_ctx.size > 1) {
        st = hc_cfg.bootstrap_nodes
                 ? hc_bootstrap_allgather_nodes(hc_ctx.bs, blobs, stride, table2,
                                                hc_ctx.node_of_rank, hc_cfg.timeout)
                 : hc_bootstrap_allgather(hc_ctx.bs, blobs, stride, table2, hc_cfg.timeout);
        if (st != HCOMM_OK)
            goto out;
    } else {
        memcpy(table2, blobs, stride);
    }
    st = hc_ctx_connect_all(table2);
out:
    free(blobs);
    free(table2);
    return st;
}

/* Local peers are watched through pidfds: their death is seen at once. */
static void hc_ctx_watch_local(void)
{
    for (int i = 0; i < hc_ctx.local_size; i++) {
        int r = hc_ctx.local_ranks[i];
        if (r == hc_ctx.rank)
            continue;
        hc_ctx.peers[r].pidfd = (int)syscall(SYS_pidfd_open, hc_ctx.peers[r].pid, 0);
        if (hc_ctx.peers[r].pidfd < 0)
            hc_log_debug("pidfd_open(%d) for rank %d: %s", hc_ctx.peers[r].pid, r, strerror(errno));
    }
}

static hcomm_status_t hc_ctx_world_create(void)
{
    int *all = malloc(sizeof(int) * (size_t)hc_ctx.size);
    if (!all)
        return hc_error(HCOMM_ERR_NO_MEMORY, "hcomm_init: world communicator");
    for (int r = 0; r < hc_ctx.size; r++)
        all[r] = r;
    hcomm_status_t st = hc_comm_create(1, hc_ctx.size, all, &hc_ctx.world);
    free(all);
    if (st != HCOMM_OK)
        return st;
    hc_ctx.world->is_world = true;
    return HCOMM_OK;
}

/* HCOMM_LOG=info, rank 0: where init's time went, phase by phase, and what
 * went through rank 0's bootstrap (docs/bootstrap.md, "Init time by job
 * size"). t[]: hc_time_sec() at the start and at the end of each phase. */
enum {
    HC_INIT_T_START,
    HC_INIT_T_CONFIG,
    HC_INIT_T_ROUND1,
    HC_INIT_T_DRIVERS,
    HC_INIT_T_ROUND2,
    HC_INIT_T_WORLD,
    HC_INIT_T_COUNT
};

static void hc_ctx_init_report(const double *t)
{
    if (hc_ctx.rank != 0 || hc_log_level_current < HC_LOG_INFO) return;
    hc_bootstrap_traffic_t tr;
    hc_bootstrap_traffic(&tr);
    hc_log_info("init: %.1f ms on rank 0 (%d ranks): configuration %.1f, bootstrap round 1 %.1f, "
                "drivers opened %.1f, round 2 and connections %.1f, world communicator %.1f ms; "
                "rank 0's bootstrap: sent %llu messages (%llu bytes), received %llu (%llu bytes)",
                (t[HC_INIT_T_WORLD] - t[HC_INIT_T_START]) * 1e3, hc_ctx.size,
                (t[HC_INIT_T_CONFIG] - t[HC_INIT_T_START]) * 1e3,
                (t[HC_INIT_T_ROUND1] - t[HC_INIT_T_CONFIG]) * 1e3,
                (t[HC_INIT_T_DRIVERS] - t[HC_INIT_T_ROUND1]) * 1e3,
                (t[HC_INIT_T_ROUND2] - t[HC_INIT_T_DRIVERS]) * 1e3,
                (t[HC_INIT_T_WORLD] - t[HC_INIT_T_ROUND2]) * 1e3, (unsigned long long)tr.sent_msgs,
                (unsigned long long)tr.sent_bytes, (unsigned long long)tr.recv_msgs,
                (unsigned long long)tr.recv_bytes);
}

hcomm_status_t hc_ctx_init(const hc_bootstrap_params_t *given)
{
    hcomm_status_t st;
    const hc_rank_info_t *info = NULL;
    double t[HC_INIT_T_COUNT] = {hc_time_sec()};

    memset(&hc_ctx, 0, sizeof(hc_ctx));
    hc_list_init(&hc_ctx.comms);
    hc_list_init(&hc_ctx.rndv_active);
    hc_list_init(&hc_ctx.orphans);
    hc_ctx.next_ctx_id = 1;
    hc_ctx.control_fd = -1;

    if ((st = hc_ctx_init_config(given)) != HCOMM_OK)
        return st;
    if ((st = hc_ctx_init_peers()) != HCOMM_OK) goto err;
    t[HC_INIT_T_CONFIG] = hc_time_sec();
    if ((st = hc_ctx_round_ranks(&info)) != HCOMM_OK) goto err;
    t[HC_INIT_T_ROUND1] = hc_time_sec();
    if ((st = hc_ctx_open_drivers()) != HCOMM_OK) goto err;
    t[HC_INIT_T_DRIVERS] = hc_time_sec();
    if ((st = hc_ctx_round_addrs()) != HCOMM_OK) goto err;
    t[HC_INIT_T_ROUND2] = hc_time_sec();
    hc_ctx_watch_local();
    hc_mem_set_reg_hooks(hc_ctx_mem_reg, hc_ctx_mem_dereg, NULL);
    hc_ctx_tune_backoff(info);
    if ((st = hc_ctx_world_create()) != HCOMM_OK || (st = hc_stats_init()) != HCOMM_OK)
        goto err;
    hc_ctx_control_open();
    hc_ctx.initialized = true;
    t[HC_INIT_T_WORLD] = hc_time_sec();
    hc_ctx_init_report(t);
    hc_log_info("rank %d of %d up: node %d of %d (%d local ranks), bootstrap via %s", hc_ctx.rank,
                hc_ctx.size, hc_ctx.node, hc_ctx.node_count, hc_ctx.local_size,
                hc_ctx.bs_params.source);
    return HCOMM_OK;
err:
    {
        char saved[512];
        snprintf(saved, sizeof(saved), "%s", hc_error_last());
        hc_ctx_teardown();
        hc_error(st, "%s", saved);
    }
    return st;
}

static void hc_ctx_mem_line(const char *text, void *arg)
{
    (void)arg;
    hc_log_info("%s", text);
}

/* Finalize's barrier: the drivers keep answering, e.g. a peer whose last
 * packet's acknowledgement was lost retransmits it until this rank acks. */
static void hc_ctx_finalize_idle(void *arg)
{
    (void)arg;
    for (int i = 0; i < hc_ctx.npoll; i++)
        (void)hc_ctx.poll[i]->ops->progress(hc_ctx.poll[i]);
    for (int i = 0; i < hc_ctx.nflush; i++)
        hc_ctx.flush[i]->ops->flush(hc_ctx.flush[i]);
}

void hc_ctx_finalize(void)
{
    if (hc_stats_level)
        hc_stats_report("finalize"); /* level 2 includes pools and the registration cache */
    else if (hc_log_level_current >= HC_LOG_INFO)
        hc_mem_stats_print(hc_ctx_mem_line, NULL);
    /* Nobody may unmap what a peer may still be reading: wait for all. */
    if (hc_ctx.bs && hc_ctx.size > 1 && hc_ctx.nfailed == 0) {
        double t = hc_cfg.timeout < 30 ? hc_cfg.timeout : 30;
        hc_bootstrap_set_idle(hc_ctx.bs, hc_ctx_finalize_idle, NULL);
        if (hc_bootstrap_barrier(hc_ctx.bs, t) != HCOMM_OK)
            hc_log_warn("hcomm_finalize: not every rank reached finalize: %s", hc_error_last());
        hc_bootstrap_set_idle(hc_ctx.bs, NULL, NULL);
    }
    hc_ctx_teardown();
}
