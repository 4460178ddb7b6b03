/*
 * shm driver, control path: the knobs, probe, open, connect, close and the
 * ops table. See shm.h for the other files and docs/architecture.md.
 *
 * Ranks of one node talk through one shared segment (shm_seg.c) that the
 * node leader (local rank 0) creates and shares at wireup. A connection is
 * a pair of FIFOs in it (shm_data.c), plus single-copy get/write through
 * CMA when the kernel lets this process read the peer's memory: connect
 * checks it by reading a canary from the peer (shm_rma.c).
 */
#include "drv/shm/shm.h"
#include "base/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

hc_shm_cfg_t hc_shm_cfg;

static const hc_config_knob_t hc_shm_knobs[] = {
    HC_KNOB_INT(hc_shm_cfg.slots, "HCOMM_SHM_SLOTS", "0",
                "shm: receive slots per connection (rounded up to a power of two); 0: 64, fewer "
                "(down to 4) on nodes with so many ranks that one rank's slots would exceed "
                "HCOMM_SHM_RECV_MAX"),
    HC_KNOB_SIZE(hc_shm_cfg.slot_size, "HCOMM_SHM_SLOT_SIZE", "8K",
                 "shm: bytes per receive slot (eager size)"),
    HC_KNOB_SIZE(hc_shm_cfg.recv_max, "HCOMM_SHM_RECV_MAX", "16M",
                 "shm: with HCOMM_SHM_SLOTS=0, the bytes of receive slots one rank may have from "
                 "all its local peers (the node segment holds local ranks^2 FIFOs)"),
    HC_KNOB_BOOL(hc_shm_cfg.cma, "HCOMM_SHM_CMA", "1",
                 "shm: single-copy large messages with process_vm_readv when the kernel allows it"),
};
HC_CONFIG_KNOBS("shm", hc_shm_knobs)

/* What connect reads (and writes back) in a peer with CMA to see whether it
 * may (shm_rma.c): its address and value travel in the address blob. */
static volatile uint64_t hc_shm_canary_value;

static hcomm_status_t hc_drv_shm_probe(const hc_drv_env_t *env, char *why, size_t len)
{
    if (env->local_size < 2) {
        snprintf(why, len, "only one rank on this node");
        return HCOMM_ERR_UNSUPPORTED;
    }
    if (!hc_cfg.shm) {
        snprintf(why, len, "disabled by HCOMM_SHM=0");
        return HCOMM_ERR_UNSUPPORTED;
    }
    return HCOMM_OK;
}

uint32_t hc_shm_auto_slots(int local_size, size_t slot_size, size_t recv_max)
{
    uint32_t n = 64;
    uint64_t peers = local_size > 1 ? (uint64_t)local_size - 1 : 1;
    while (n > 4 && peers * n * slot_size > recv_max)
        n >>= 1;
    return n;
}

static hcomm_status_t hc_drv_shm_open(const hc_drv_env_t *env, hc_drv_t **drv_p)
{
    if ((hc_shm_cfg.slots < 2 && hc_shm_cfg.slots != 0) || hc_shm_cfg.slots > 65536)
        return hc_error(HCOMM_ERR_INVALID,
                        "hcomm_init: HCOMM_SHM_SLOTS=%lld must be 0 (auto) or in [2, 65536]",
                        (long long)hc_shm_cfg.slots);
    if (hc_shm_cfg.slot_size < 256 || hc_shm_cfg.slot_size > (1u << 24))
        return hc_error(HCOMM_ERR_INVALID,
                        "hcomm_init: HCOMM_SHM_SLOT_SIZE=%zu must be in [256, 16M]",
                        hc_shm_cfg.slot_size);
    hc_drv_shm_t *s = calloc(1, sizeof(*s));
    if (!s) return hc_error(HCOMM_ERR_NO_MEMORY, "shm driver");
    s->base.env = env;
    s->lr = env->local_rank;
    s->L = env->local_size;
    /* A power of two, so that slot positions are masks, not divisions, on
     * the data path. */
    s->slot_size = HC_ALIGN_UP(hc_shm_cfg.slot_size, (size_t)HC_CACHE_LINE);
    s->nslots = 1;
    if (hc_shm_cfg.slots == 0) {
        s->nslots = hc_shm_auto_slots(s->L, s->slot_size, hc_shm_cfg.recv_max);
        if (s->nslots < 64 && env->local_rank == 0)
            hc_log_info("shm: %d ranks on this node: %u receive slots of %zu bytes per "
                        "connection (HCOMM_SHM_RECV_MAX=%zu; HCOMM_SHM_SLOTS sets them)",
                        s->L, s->nslots, s->slot_size, hc_shm_cfg.recv_max);
    }
    while (s->nslots < (uint32_t)hc_shm_cfg.slots)
        s->nslots <<= 1;
    s->conns = calloc((size_t)s->L, sizeof(*s->conns));
    s->maps = calloc(HC_SHM_MAPS, sizeof(*s->maps));
    s->imports = calloc(HC_SHM_IMPORTS, sizeof(*s->imports));
    s->active = calloc((size_t)s->L, sizeof(int));
    if (!s->conns || !s->active || !s->maps || !s->imports) {
        free(s->imports);
        free(s->conns);
        free(s->active);
        free(s->maps);
        free(s);
        return hc_error(HCOMM_ERR_NO_MEMORY, "shm driver");
    }
    s->canary = hc_shm_hash(env->job_key, env->node_id) | 1;
    hc_shm_canary_value = s->canary;
    *drv_p = &s->base;
    return HCOMM_OK;
}

static hcomm_status_t hc_drv_shm_addr_pack(hc_drv_t *drv, void *buf, size_t *len_p)
{
    hc_drv_shm_t *s = (hc_drv_shm_t *)drv;
    if (*len_p < sizeof(hc_shm_addr_t))
        return hc_error(HCOMM_ERR_INTERNAL, "shm: address slot too small");
    hc_shm_addr_t a = {.pid = (uint32_t)getpid(),
                       .local_rank = (uint32_t)s->lr,
                       .canary_addr = (uint64_t)(uintptr_t)&hc_shm_canary_value,
                       .canary = s->canary};
    memcpy(buf, &a, sizeof(a));
    *len_p = sizeof(a);
    return HCOMM_OK;
}

static hcomm_status_t hc_drv_shm_connect(hc_drv_t *drv, int peer, const void *addr, size_t len,
                                         hc_conn_t **conn_p)
{
    hc_drv_shm_t *s = (hc_drv_shm_t *)drv;
    hc_shm_addr_t a;
    if (len != sizeof(a))
        return hc_error(HCOMM_ERR_BOOTSTRAP, "shm: bad address blob from rank %d", peer);
    memcpy(&a, addr, sizeof(a));
    if ((int)a.local_rank >= s->L || (int)a.local_rank == s->lr)
        return hc_error(HCOMM_ERR_BOOTSTRAP, "shm: rank %d claims local rank %u", peer,
                        a.local_rank);
    hc_shm_conn_t *c = &s->conns[a.local_rank];
    c->base.ops = drv->ops;
    c->base.drv = drv;
    c->base.peer = peer;
    c->base.max_frame = s->slot_size - HC_SHM_SLOT_HDR;
    /* Up to 64 KiB streams through consecutive slots (copy-in and copy-out
     * overlap); beyond, one process_vm_readv copy beats two memcpys. */
    c->base.eager_max = HC_MIN(64u * 1024, 8 * c->base.max_frame);
    c->out = hc_shm_fifo(s, s->lr, (int)a.local_rank);
    c->in = hc_shm_fifo(s, (int)a.local_rank, s->lr);
    c->pid = (pid_t)a.pid;
    c->base.caps |= HC_CONN_CAP_RKEY_PTR; /* memfd memory (shm_rma.c) */
    if (hc_shm_cfg.cma) hc_shm_cma_probe(c, &a);
    if (!c->connected) {
        c->connected = true;
        s->active[s->nactive++] = (int)a.local_rank;
    }
    *conn_p = &c->base;
    return HCOMM_OK;
}

static void hc_drv_shm_close(hc_drv_t *drv)
{
    hc_drv_shm_t *s = (hc_drv_shm_t *)drv;
    for (int i = 0; i < s->nmaps; i++)
        munmap(s->maps[i].base, s->maps[i].size);
    free(s->maps);
    hc_shm_ipc_close_all(s);
    free(s->imports);
    if (s->seg_region) hc_mem_region_destroy(s->seg_region);
    free(s->conns);
    free(s->active);
    free(s);
}

static const struct hc_drv_ops hc_drv_shm_ops = {
    .name = "shm",
    .scope = HC_DRV_SCOPE_NODE,
    .priority = 100,
    .probe = hc_drv_shm_probe,
    .open = hc_drv_shm_open,
    .addr_pack = hc_drv_shm_addr_pack,
    .wireup = hc_drv_shm_wireup,
    .connect = hc_drv_shm_connect,
    .put = hc_drv_shm_put,
    .mem_types = 1u << HC_MEM_DEVICE, /* by IPC (shm_ipc.c) */
    .get = hc_drv_shm_get,
    .write = hc_drv_shm_write,
    .mem_reg = hc_drv_shm_mem_reg,
    .mem_dereg = hc_drv_shm_mem_dereg,
    .rkey_pack = hc_drv_shm_rkey_pack,
    .rkey_unpack = hc_drv_shm_rkey_unpack,
    .rkey_release = hc_drv_shm_rkey_release,
    .rkey_ptr = hc_drv_shm_rkey_ptr,
    .progress = hc_drv_shm_progress,
    .shared_get = hc_drv_shm_shared_get,
    .shared_put = hc_drv_shm_shared_put,
    .close = hc_drv_shm_close,
};
HC_DRV_REGISTER(hc_drv_shm_ops)
