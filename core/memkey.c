/*
 * This rank's memory as a driver sees it: the key of the registration that
 * holds a buffer and the descriptor to pack for a peer (rndv.c, the node
 * collectives' zero-copy path). Pool memory carries its keys from creation;
 * other memory is registered through the registration cache, and only for
 * drivers that need it (HC_DRV_CAP_USER_REG). Device memory (GPUDirect RDMA)
 * is registered by dmabuf, only for drivers that move it.
 */
#include "core/hc_core.h"
#include "mem/mem.h"

hcomm_status_t hc_mem_key_local(hc_drv_t *drv, void *buf, size_t len, uint64_t *key_p,
                                hc_mem_desc_t *desc, hc_mem_region_t **held_p)
{
    size_t off = 0;
    hc_mem_region_t *held = NULL;
    *key_p = 0;
    if (held_p)
        *held_p = NULL;
    *desc = (hc_mem_desc_t){.addr = buf, .len = len, .page_size = 4096, .fd = -1,
                            .numa_node = -1, .user = true};
    hc_mem_region_t *r = hc_mem_region_lookup(buf, len, &off);
    if (!r && held_p && (drv->ops->caps & HC_DRV_CAP_USER_REG)) {
        hcomm_status_t st = hc_mem_reg_cache_get(buf, len, &r);
        if (st != HCOMM_OK)
            return st;
        *held_p = held = r;
        off = (size_t)((uint8_t *)buf - (uint8_t *)r->base);
    }
    if (!r)
        return HCOMM_OK;
    if ((drv->ops->caps & HC_DRV_CAP_USER_REG) && !r->registered) {
        if (held) {
            hc_mem_reg_cache_put(held);
            *held_p = NULL;
        }
        return hc_error(HCOMM_ERR_INTERNAL, "memory at %p is not registered with %s", buf,
                        drv->ops->name);
    }
    if (r->registered)
        *key_p = r->keys[drv->index];
    desc->page_size = r->page_size;
    desc->fd = r->fd;
    desc->fd_offset = off;
    desc->numa_node = r->numa_node;
    desc->user = held != NULL;
    return HCOMM_OK;
}

hcomm_status_t hc_mem_key_typed(hc_drv_t *drv, void *buf, size_t len, const hc_mem_attr_t *mem,
                                uint64_t *key_p, hc_mem_desc_t *desc, hc_mem_region_t **held_p)
{
    if (!mem || mem->type == HC_MEM_HOST)
        return hc_mem_key_local(drv, buf, len, key_p, desc, held_p);
    *key_p = 0;
    if (held_p) *held_p = NULL;
    if (!hc_drv_moves(drv->ops, mem->type) || !held_p)
        return hc_error(HCOMM_ERR_UNSUPPORTED,
                        "%s cannot move %s memory (%p, %zu bytes) directly: it declares no "
                        "%s registration",
                        drv->ops->name, hc_mem_type_name(mem->type), buf, len,
                        hc_drv_device_path(drv->ops));
    hc_mem_region_t *r;
    hcomm_status_t st = hc_mem_reg_cache_get_typed(buf, len, mem, &r);
    if (st != HCOMM_OK) return st;
    if (!r->registered) {
        hc_mem_reg_cache_put(r);
        return hc_error(HCOMM_ERR_INTERNAL, "device memory at %p is not registered with %s", buf,
                        drv->ops->name);
    }
    *held_p = r;
    *key_p = r->keys[drv->index];
    *desc = (hc_mem_desc_t){.addr = buf,
                            .len = len,
                            .page_size = r->page_size,
                            .fd = -1,
                            .numa_node = -1,
                            .user = true,
                            .mem_type = mem->type,
                            .device = mem->device,
                            .dmabuf_fd = -1,
                            .dmabuf_offset =
                                r->dmabuf_offset + (uint64_t)((uint8_t *)buf - (uint8_t *)r->base)};
    return HCOMM_OK;
}
