/*
 * The self driver: a rank's messages to itself. put delivers synchronously
 * (the core's deliver never waits, so this cannot recurse without bound) and
 * get is a memcpy inside the process.
 */
#include "drv/drv.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    hc_drv_t base;
    hc_conn_t conn;
} hc_drv_self_t;

static hcomm_status_t hc_drv_self_probe(const hc_drv_env_t *env, char *why, size_t len)
{
    (void)env;
    (void)why;
    (void)len;
    return HCOMM_OK;
}

static hcomm_status_t hc_drv_self_open(const hc_drv_env_t *env, hc_drv_t **drv_p)
{
    hc_drv_self_t *s = calloc(1, sizeof(*s));
    if (!s)
        return hc_error(HCOMM_ERR_NO_MEMORY, "self driver");
    s->base.env = env;
    *drv_p = &s->base;
    return HCOMM_OK;
}

static hcomm_status_t hc_drv_self_connect(hc_drv_t *drv, int peer, const void *addr, size_t len,
                                          hc_conn_t **conn_p)
{
    (void)addr;
    (void)len;
    hc_drv_self_t *s = (hc_drv_self_t *)drv;
    s->conn.ops = drv->ops;
    s->conn.drv = drv;
    s->conn.peer = peer;
    s->conn.caps = HC_CONN_CAP_GET | HC_CONN_CAP_WRITE | HC_CONN_CAP_RKEY_PTR;
    s->conn.max_frame = 1u << 30;
    s->conn.eager_max = 64 * 1024;
    *conn_p = &s->conn;
    return HCOMM_OK;
}

static hcomm_status_t hc_drv_self_put(hc_conn_t *conn, const hc_frame_hdr_t *hdr,
                                      const void *payload, void *cookie)
{
    (void)cookie;
    const hc_drv_env_t *env = conn->drv->env;
    env->deliver(env->core, conn, hdr, payload);
    return HCOMM_OK;
}

/* The "peer" is this process: RMA is memmove, a remote address is local. */
static hcomm_status_t hc_drv_self_get(hc_conn_t *conn, const hc_rma_t *rma)
{
    (void)conn;
    memmove(rma->local, (const void *)(uintptr_t)rma->remote_addr, rma->len);
    return HCOMM_OK;
}

static hcomm_status_t hc_drv_self_write(hc_conn_t *conn, const hc_rma_t *rma)
{
    (void)conn;
    memmove((void *)(uintptr_t)rma->remote_addr, rma->local, rma->len);
    return HCOMM_OK;
}

static hcomm_status_t hc_drv_self_rkey_ptr(hc_conn_t *conn, const hc_rkey_t *rkey,
                                           uint64_t remote_addr, size_t len, void **ptr_p)
{
    (void)conn;
    (void)rkey;
    (void)len;
    *ptr_p = (void *)(uintptr_t)remote_addr;
    return HCOMM_OK;
}

static void hc_drv_self_close(hc_drv_t *drv)
{
    free(drv);
}

static const struct hc_drv_ops hc_drv_self_ops = {
    .name = "self",
    .scope = HC_DRV_SCOPE_SELF,
    .priority = 0,
    .probe = hc_drv_self_probe,
    .open = hc_drv_self_open,
    .connect = hc_drv_self_connect,
    .put = hc_drv_self_put,
    .get = hc_drv_self_get,
    .write = hc_drv_self_write,
    .rkey_ptr = hc_drv_self_rkey_ptr,
    .close = hc_drv_self_close,
};
HC_DRV_REGISTER(hc_drv_self_ops)
