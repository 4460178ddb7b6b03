/*
 * GPUDirect RDMA: which path a p2p call's device buffer takes to a peer
 * (docs/gpu.md, "GPUDirect RDMA"). The core never names CUDA: it asks the
 * GPU layer what a buffer is (the API did: hc_mem_attr_t) and the peer's
 * connection's driver what it moves (hc_drv_ops.mem_types).
 *
 * Direct means: the request carries the device buffer itself (req->dev);
 * above the eager size the rendezvous registers it by dmabuf through the
 * registration cache and the driver's get/write move the bytes between the
 * two buffers, no host copy; an eager message arriving into a direct
 * receive is copied by the GPU dispatch (p2p_recv.c). Staged means: the
 * API copies the buffer through host memory (api/api_stage.c).
 *
 * HCOMM_GDR: auto chooses direct where the driver moves device memory, its
 * connection can get or write, and the buffer registers; 0 always stages;
 * 1 requires direct and fails the call naming the driver and why it cannot.
 * A send of eager size stays staged under every mode (a frame's payload is
 * read by the CPU), as does a receive from any source (the sender, hence
 * the driver, is not known when it is posted).
 *
 * Streamed (auto only): a receive from a peer whose rendezvous streams
 * (hc_rndv_streams: tcp, dpdk, HCOMM_RNDV=stream) and whose driver cannot
 * go direct carries the device buffer too: every message arrives in frames
 * the CPU reads anyway (eager, fragments, DATA), and each is copied into
 * the device buffer by the GPU dispatch as it arrives, instead of into a
 * whole host staging buffer copied once the message is in.
 */
#include "core/hc_core.h"
#include "core/stats.h"
#include "mem/mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

hc_gdr_mode_t hc_gdr_mode = HC_GDR_AUTO;
hc_gdr_mode_t hc_ipc_mode = HC_GDR_AUTO;

static struct {
    uint8_t *logged; /* per world rank: bit 0 send, bit 1 receive decision logged */
    int nlogged;
} hc_gdr;

static bool hc_gdr_parse(const char *v, hc_gdr_mode_t *mode_p)
{
    static const char *const names[] = {"0", "auto", "1"};
    for (int m = 0; m < (int)HC_ARRAY_SIZE(names); m++)
        if (v && !strcasecmp(v, names[m])) {
            *mode_p = (hc_gdr_mode_t)m;
            return true;
        }
    return false;
}

hcomm_status_t hc_gdr_init(void)
{
    if (!hc_gdr_parse(hc_cfg.gdr, &hc_gdr_mode))
        return hc_error(HCOMM_ERR_INVALID, "hcomm_init: HCOMM_GDR=%s is not auto, 0 or 1",
                        hc_cfg.gdr);
    if (!hc_gdr_parse(hc_cfg.gpu_ipc, &hc_ipc_mode))
        return hc_error(HCOMM_ERR_INVALID, "hcomm_init: HCOMM_GPU_IPC=%s is not auto, 0 or 1",
                        hc_cfg.gpu_ipc);
    return HCOMM_OK;
}

/* The knob that governs a driver's direct device path: HCOMM_GPU_IPC for
 * the node driver (IPC), HCOMM_GDR for the network drivers. */
static hc_gdr_mode_t hc_gdr_mode_of(const struct hc_drv_ops *ops, const char **knob_p)
{
    bool node = ops && ops->scope == HC_DRV_SCOPE_NODE;
    if (knob_p) *knob_p = node ? "HCOMM_GPU_IPC" : "HCOMM_GDR";
    return node ? hc_ipc_mode : hc_gdr_mode;
}

void hc_gdr_fini(void)
{
    free(hc_gdr.logged);
    hc_gdr.logged = NULL;
    hc_gdr.nlogged = 0;
}

static const char *hc_gdr_name(hc_gdr_mode_t m)
{
    return m == HC_GDR_OFF ? "0" : m == HC_GDR_ON ? "1" : "auto";
}

const char *hc_gdr_mode_name(void)
{
    return hc_gdr_name(hc_gdr_mode);
}

/* HCOMM_LOG=info: the first decision per peer and direction. */
static void hc_gdr_log(int wpeer, bool recv, const struct hc_drv_ops *ops, const char *path,
                       const char *why)
{
    if (hc_log_level_current < HC_LOG_INFO || wpeer < 0) return;
    if (!hc_gdr.logged && hc_ctx.size > 0) {
        hc_gdr.logged = calloc((size_t)hc_ctx.size, 1);
        hc_gdr.nlogged = hc_gdr.logged ? hc_ctx.size : 0;
    }
    uint8_t bit = recv ? 2 : 1;
    if (wpeer >= hc_gdr.nlogged || (hc_gdr.logged[wpeer] & bit)) return;
    hc_gdr.logged[wpeer] |= bit;
    const char *knob;
    hc_gdr_mode_t m = hc_gdr_mode_of(ops, &knob);
    hc_log_info("gpu: device buffers %s rank %d over %s: %s (%s=%s)%s%s", recv ? "from" : "to",
                wpeer, ops ? ops->name : "?", path, knob,
                hc_gdr_name(m), why[0] ? ": " : "", why);
}

/* Why conn cannot move device memory directly ("" if it can). */
static void hc_gdr_conn_why(const hc_conn_t *conn, char *why, size_t len)
{
    why[0] = '\0';
    if (!hc_drv_moves(conn->ops, HC_MEM_DEVICE))
        snprintf(why, len, "driver %s moves host memory only (no %s)", conn->ops->name,
                 hc_drv_device_path(conn->ops));
    else if (!(conn->caps & (HC_CONN_CAP_GET | HC_CONN_CAP_WRITE)))
        snprintf(why, len, "driver %s's connection to rank %d can neither get nor write",
                 conn->ops->name, conn->peer);
}

/* Registers buf as the rendezvous will (the record stays cached), so that
 * a refusal is known before the call is posted. */
static void hc_gdr_reg_why(hc_conn_t *conn, void *buf, size_t len, const hc_mem_attr_t *attr,
                           char *why, size_t why_len)
{
    hc_mem_desc_t desc;
    hc_mem_region_t *held = NULL;
    uint64_t key;
    hcomm_status_t st = hc_mem_key_typed(conn->drv, buf, len, attr, &key, &desc, &held);
    if (st == HCOMM_OK) {
        hc_mem_reg_cache_put(held);
        return;
    }
    snprintf(why, why_len, "driver %s refused the %s: %s", conn->ops->name,
             conn->ops->scope == HC_DRV_SCOPE_NODE ? "IPC export" : "dmabuf registration",
             hc_error_last());
}

hcomm_status_t hc_gdr_choose(const char *fn, bool recv, struct hcomm_comm *comm, int peer,
                             void *buf, size_t len, const hc_mem_attr_t *attr,
                             hc_gdr_path_t *path_p)
{
    *path_p = HC_GDR_PATH_STAGED;
    int wpeer = peer == HCOMM_ANY_SOURCE ? -1 : comm->world_ranks[peer];
    hc_conn_t *conn = wpeer >= 0 ? hc_ctx.peers[wpeer].conn : NULL;
    const char *knob = "HCOMM_GDR";
    /* A receive from any source: the stricter of the two knobs. */
    hc_gdr_mode_t mode = conn ? hc_gdr_mode_of(conn->ops, &knob) : HC_MAX(hc_gdr_mode, hc_ipc_mode);
    if (!conn && hc_ipc_mode > hc_gdr_mode) knob = "HCOMM_GPU_IPC";
    if (mode == HC_GDR_OFF) return HCOMM_OK;
    char why[512] = "";
    if (attr->type != HC_MEM_DEVICE) {
        snprintf(why, sizeof(why), "%s memory is staged", hc_mem_type_name(attr->type));
    } else if (!conn) {
        snprintf(why, sizeof(why),
                 "a receive from any source is staged (its driver is not "
                 "known when it is posted)");
    } else {
        hc_gdr_conn_why(conn, why, sizeof(why));
        if (!why[0] && !recv && !hc_p2p_goes_rndv(conn, len)) {
            /* Small messages stay staged, under every mode: not a refusal. */
            return HCOMM_OK;
        }
        if (!why[0]) hc_gdr_reg_why(conn, buf, len, attr, why, sizeof(why));
    }
    bool direct = why[0] == '\0';
    bool streamed = !direct && conn && mode == HC_GDR_AUTO && attr->type == HC_MEM_DEVICE &&
                    (recv ? hc_rndv_streams(conn)
                          : hc_p2p_goes_rndv(conn, len) &&
                                !(conn->caps & (HC_CONN_CAP_GET | HC_CONN_CAP_WRITE)));
    if (streamed) {
        /* Every message from this peer arrives in frames the CPU reads
         * anyway (eager, or a rendezvous stream): each goes straight into
         * the device buffer by the GPU dispatch as it arrives, rather than
         * into a whole host staging buffer copied once all is in. A send's
         * stream fills its staging frame by frame just before each frame
         * goes (no get or write can read it first: its connection has
         * neither), rather than all of it before the RTS. */
        hc_gdr_log(wpeer, recv, conn->ops,
                   recv ? "streamed, each frame copied into device memory as it arrives"
                        : "streamed, each frame copied from device memory as it goes",
                   why);
        hc_stats.gdr_streamed++;
        *path_p = HC_GDR_PATH_STREAMED;
        return HCOMM_OK;
    }
    hc_gdr_log(wpeer, recv, conn ? conn->ops : NULL,
               direct ? hc_drv_device_path(conn->ops) : "staged", why);
    if (direct) {
        *path_p = HC_GDR_PATH_DIRECT;
        return HCOMM_OK;
    }
    if (mode == HC_GDR_ON)
        return hc_error(HCOMM_ERR_UNSUPPORTED,
                        "%s: %s=1, but the %zu-byte device buffer %s rank %d cannot go by %s: %s",
                        fn, knob, len, recv ? "from" : "to", peer,
                        conn ? hc_drv_device_path(conn->ops) : "a direct path", why);
    hc_stats.gdr_staged++;
    return HCOMM_OK;
}

/* "GPUDirect RDMA (dmabuf): HCOMM_GDR=auto; p2p above the eager size direct
 * over fake, mlx5 (...)" for the drivers of one scope kind (node: IPC). */
static size_t hc_gdr_describe_kind(char *buf, size_t len, bool node)
{
    const char *knob = node ? "HCOMM_GPU_IPC" : "HCOMM_GDR";
    hc_gdr_mode_t m = node ? hc_ipc_mode : hc_gdr_mode;
    size_t n = (size_t)snprintf(buf, len, "%s: %s=%s; ",
                                node ? "IPC inside a node" : "GPUDirect RDMA (dmabuf)", knob,
                                hc_gdr_name(m));
    if (m == HC_GDR_OFF) {
        n += (size_t)snprintf(buf + HC_MIN(n, len), len - HC_MIN(n, len),
                              "off: every device buffer staged");
        return HC_MIN(n, len);
    }
    bool any = false;
    for (int i = 0; i < hc_drv_count() && n < len; i++) {
        const struct hc_drv_ops *o = hc_drv_at(i);
        if (!hc_drv_moves(o, HC_MEM_DEVICE) || (o->scope == HC_DRV_SCOPE_NODE) != node) continue;
        n += (size_t)snprintf(buf + n, len - n, "%s%s",
                              any ? ", " : "p2p above the eager size direct over ", o->name);
        any = true;
    }
    if (n < len)
        n += (size_t)snprintf(buf + n, len - n, "%s",
                              !any   ? "no driver here moves device memory: staged"
                              : node ? " (where the GPU backend exports the allocation and CMA is "
                                       "allowed; else staged)"
                                     : " (where the dmabuf registration succeeds; else staged)");
    return HC_MIN(n, len);
}

void hc_gdr_describe(char *buf, size_t len)
{
    /* Before hcomm_init (hcomm_info): the environment's values. */
    if (!hc_ctx.initialized) {
        if (!hc_gdr_parse(hc_config_env("HCOMM_GDR"), &hc_gdr_mode)) hc_gdr_mode = HC_GDR_AUTO;
        if (!hc_gdr_parse(hc_config_env("HCOMM_GPU_IPC"), &hc_ipc_mode)) hc_ipc_mode = HC_GDR_AUTO;
    }
    size_t n = hc_gdr_describe_kind(buf, len, true);
    if (n + 2 < len) {
        memcpy(buf + n, "; ", 3);
        n += 2;
        hc_gdr_describe_kind(buf + n, len - n, false);
    }
    if (len && n < len) {
        size_t m = strlen(buf);
        snprintf(buf + m, len - m,
                 "; sends of eager size, receives from any source and the "
                 "other drivers staged, but under auto a receive over a driver that "
                 "streams (tcp, dpdk) takes each frame into device memory as it arrives");
    }
}
