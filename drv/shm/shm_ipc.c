/*
 * shm driver: a local peer's device memory, mapped by IPC (docs/gpu.md,
 * "IPC inside a node").
 *
 * The owner: mem_reg of device memory (the registration cache offers it:
 * the driver declares HC_MEM_DEVICE in mem_types) exports the allocation
 * through the GPU layer (ipc_export: an fd, or CUDA's opaque bytes) into an
 * export record that lives as long as the registration; the packed key
 * names that record by its address in the owner's process, with the
 * allocation's id and the registered address.
 *
 * A peer: reads the record with process_vm_readv (the permission CMA
 * needs), duplicates the fd it names with pidfd_getfd (/proc/PID/fd/N on a
 * kernel without it), imports the allocation (ipc_import) and keeps the
 * import per (owner, allocation id), least recently used out past
 * HC_SHM_IMPORTS. get and write are then copies through the GPU dispatch
 * between the local buffer and the mapping: device to device, no host
 * copy. An allocation freed and re-made at the same address has a new id:
 * an old import is never used for it (and its record's magic is cleared at
 * deregistration, so a key of a freed allocation is refused, not read).
 *
 * A device buffer of this rank against a host buffer of the peer (no IPC
 * key: CMA reaches host memory by address): a get into it is refused, so
 * that the rendezvous asks the sender to write, which it does through an
 * import of this buffer (one host-to-device copy); a write from it (only
 * under HCOMM_RNDV=write) moves through a host bounce buffer, HC_SHM_BOUNCE
 * bytes at a time: the GPU dispatch on the device side, CMA on the host
 * side.
 */
#include "drv/shm/shm.h"
#include "gpu/gpu.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

#define HC_SHM_IPC_MAGIC 0x637069206d687368ull /* "hshm ipc" */
#define HC_SHM_IPC_KEY_MAGIC 0x69736873u       /* "shsi" */
#define HC_SHM_BOUNCE (4u << 20)

/* What the owner keeps per registration of device memory (the key). */
struct hc_shm_ipc_export {
    uint64_t magic; /* HC_SHM_IPC_MAGIC while registered, 0 after */
    uint64_t addr;  /* the registered address */
    uint64_t len;
    hc_gpu_ipc_handle_t h; /* h.offset: of addr in the allocation */
};

typedef struct {
    uint32_t magic; /* HC_SHM_IPC_KEY_MAGIC */
    uint32_t reserved;
    uint64_t record; /* the owner's hc_shm_ipc_export_t */
    uint64_t alloc_id;
    uint64_t addr;
    uint64_t len;
} hc_shm_ipc_key_wire_t;
_Static_assert(sizeof(hc_shm_ipc_key_wire_t) <= HC_RKEY_MAX, "IPC key fits HC_RKEY_MAX");

bool hc_shm_ipc_key_is(const void *buf, size_t len)
{
    uint32_t magic;
    if (len != sizeof(hc_shm_ipc_key_wire_t)) return false;
    memcpy(&magic, buf, sizeof(magic));
    return magic == HC_SHM_IPC_KEY_MAGIC;
}

/* ---- the owner ------------------------------------------------------------------ */

hcomm_status_t hc_drv_shm_mem_reg(hc_drv_t *drv, const hc_mem_desc_t *desc, uint64_t *key_p)
{
    (void)drv;
    *key_p = 0;
    if (desc->mem_type != HC_MEM_DEVICE) return HCOMM_OK; /* host: CMA needs no key */
    const hc_gpu_ops_t *g = hc_gpu_backend();
    if (!g || !g->ipc_export)
        return hc_error(HCOMM_ERR_UNSUPPORTED, "shm: no GPU backend exports device memory here");
    hc_shm_ipc_export_t *e = calloc(1, sizeof(*e));
    if (!e) return hc_error(HCOMM_ERR_NO_MEMORY, "shm: IPC export record");
    hcomm_status_t st = g->ipc_export(desc->addr, &e->h);
    if (st != HCOMM_OK) {
        free(e);
        return st;
    }
    e->addr = (uint64_t)(uintptr_t)desc->addr;
    e->len = desc->len;
    __atomic_store_n(&e->magic, HC_SHM_IPC_MAGIC, __ATOMIC_RELEASE);
    *key_p = (uint64_t)(uintptr_t)e;
    return HCOMM_OK;
}

void hc_drv_shm_mem_dereg(hc_drv_t *drv, uint64_t key)
{
    (void)drv;
    hc_shm_ipc_export_t *e = (hc_shm_ipc_export_t *)(uintptr_t)key;
    if (!e) return;
    __atomic_store_n(&e->magic, 0, __ATOMIC_RELEASE);
    if (e->h.fd >= 0) close(e->h.fd);
    free(e);
}

hcomm_status_t hc_shm_ipc_key_pack(const hc_shm_ipc_export_t *e, void *buf, size_t *len_p)
{
    hc_shm_ipc_key_wire_t w = {.magic = HC_SHM_IPC_KEY_MAGIC,
                               .record = (uint64_t)(uintptr_t)e,
                               .alloc_id = e->h.alloc_id,
                               .addr = e->addr,
                               .len = e->len};
    if (*len_p < sizeof(w))
        return hc_error(HCOMM_ERR_INVALID, "shm: rkey_pack: argument len_p (%zu) is below %zu",
                        *len_p, sizeof(w));
    memcpy(buf, &w, sizeof(w));
    *len_p = sizeof(w);
    return HCOMM_OK;
}

/* ---- the peer: imports ---------------------------------------------------------- */

/* A copy of fd number `fd` of process pid (pidfd_getfd; /proc/PID/fd/N
 * where the kernel lacks it), or -1 with errno. */
static int hc_shm_take_fd(pid_t pid, int fd)
{
    int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (pfd >= 0) {
        int got = (int)syscall(SYS_pidfd_getfd, pfd, fd, 0);
        int e = errno;
        close(pfd);
        if (got >= 0 || e != ENOSYS) {
            errno = e;
            return got;
        }
    }
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pid, fd);
    return open(path, O_RDWR | O_CLOEXEC);
}

/* Reads the owner's export record named by w and imports its allocation. */
static hcomm_status_t hc_shm_ipc_import(hc_shm_conn_t *c, const hc_shm_ipc_key_wire_t *w,
                                        hc_shm_import_t *imp)
{
    int peer = c->base.peer;
    hc_shm_ipc_export_t e;
    struct iovec l = {.iov_base = &e, .iov_len = sizeof(e)};
    struct iovec r = {.iov_base = (void *)(uintptr_t)w->record, .iov_len = sizeof(e)};
    if (process_vm_readv(c->pid, &l, 1, &r, 1, 0) != (ssize_t)sizeof(e))
        return hc_error_errno(HCOMM_ERR_PEER_FAILED, errno,
                              "shm: rank %d's IPC export record is not readable", peer);
    if (e.magic != HC_SHM_IPC_MAGIC || e.h.alloc_id != w->alloc_id || e.addr != w->addr ||
        e.len != w->len)
        return hc_error(HCOMM_ERR_PEER_FAILED,
                        "shm: rank %d's device buffer at %#llx (allocation %llu) is no longer "
                        "registered there (freed, or the transfer abandoned)",
                        peer, (unsigned long long)w->addr, (unsigned long long)w->alloc_id);
    hc_gpu_ipc_handle_t h = e.h;
    int fd = -1;
    if (h.fd >= 0 && (fd = hc_shm_take_fd(c->pid, h.fd)) < 0)
        return hc_error_errno(HCOMM_ERR_IO, errno,
                              "shm: cannot take rank %d's IPC handle (fd %d; pidfd_getfd needs "
                              "the permission CMA needs)",
                              peer, h.fd);
    h.fd = fd;
    void *ptr = NULL;
    hcomm_status_t st = hc_gpu_backend()->ipc_import(&h, &ptr);
    if (fd >= 0) close(fd);
    if (st != HCOMM_OK)
        return hc_error(st, "shm: importing rank %d's device allocation %llu: %s", peer,
                        (unsigned long long)w->alloc_id, hc_error_last());
    *imp = (hc_shm_import_t){
        .pid = c->pid, .alloc_id = w->alloc_id, .ptr = ptr, .owner_addr = w->addr, .len = w->len};
    return HCOMM_OK;
}

static hcomm_status_t hc_shm_import_get(hc_drv_shm_t *s, hc_shm_conn_t *c,
                                        const hc_shm_ipc_key_wire_t *w, hc_shm_import_t **imp_p)
{
    static uint64_t clock;
    hc_shm_import_t *victim = NULL;
    for (int i = 0; i < s->nimports; i++) {
        hc_shm_import_t *m = &s->imports[i];
        if (m->pid == c->pid && m->alloc_id == w->alloc_id && m->owner_addr == w->addr &&
            m->len == w->len) {
            m->used = ++clock;
            *imp_p = m;
            return HCOMM_OK;
        }
        if (!m->refs && (!victim || m->used < victim->used)) victim = m;
    }
    if (s->nimports == HC_SHM_IMPORTS && !victim)
        return hc_error(HCOMM_ERR_NO_MEMORY,
                        "shm: %d peer device allocations in use at once (HC_SHM_IMPORTS)",
                        HC_SHM_IMPORTS);
    hc_shm_import_t fresh;
    hcomm_status_t st = hc_shm_ipc_import(c, w, &fresh);
    if (st != HCOMM_OK) return st;
    hc_shm_import_t *m = s->nimports < HC_SHM_IMPORTS ? &s->imports[s->nimports++] : victim;
    if (m == victim) hc_gpu_backend()->ipc_close(m->ptr);
    *m = fresh;
    m->used = ++clock;
    *imp_p = m;
    return HCOMM_OK;
}

hcomm_status_t hc_shm_ipc_key_unpack(hc_shm_conn_t *c, const void *buf, hc_rkey_t *k)
{
    hc_drv_shm_t *s = (hc_drv_shm_t *)c->base.drv;
    hc_shm_ipc_key_wire_t w;
    memcpy(&w, buf, sizeof(w));
    if (!hc_gpu_backend())
        return hc_error(HCOMM_ERR_UNSUPPORTED,
                        "shm: rank %d offers device memory, and no GPU backend is active here",
                        c->base.peer);
    hcomm_status_t st = hc_shm_import_get(s, c, &w, &k->imp);
    if (st != HCOMM_OK) return st;
    k->imp->refs++;
    k->addr = w.addr;
    return HCOMM_OK;
}

void hc_shm_ipc_close_all(hc_drv_shm_t *s)
{
    const hc_gpu_ops_t *g = hc_gpu_backend();
    for (int i = 0; i < s->nimports && g; i++)
        g->ipc_close(s->imports[i].ptr);
    s->nimports = 0;
}

/* Where [remote_addr, + len) of rank c's imported device key lies here, or
 * ERR_INVALID naming the range when it is outside the key. */
static hcomm_status_t hc_shm_ipc_at(const hc_shm_conn_t *c, const hc_shm_import_t *imp,
                                    uint64_t remote_addr, size_t len, void **ptr_p)
{
    uint64_t off = remote_addr - imp->owner_addr;
    if (remote_addr < imp->owner_addr || off > imp->len || len > imp->len - off)
        return hc_error(HCOMM_ERR_INVALID,
                        "shm: [%#llx, +%zu) of rank %d lies outside its device key "
                        "[%#llx, +%llu)",
                        (unsigned long long)remote_addr, len, c->base.peer,
                        (unsigned long long)imp->owner_addr, (unsigned long long)imp->len);
    *ptr_p = (uint8_t *)imp->ptr + off;
    return HCOMM_OK;
}

hcomm_status_t hc_shm_ipc_ptr(hc_conn_t *conn, const hc_rkey_t *rkey, uint64_t remote_addr,
                              size_t len, void **ptr_p)
{
    return hc_shm_ipc_at((const hc_shm_conn_t *)conn, rkey->imp, remote_addr, len, ptr_p);
}

/* ---- get and write with device memory ------------------------------------------- */

/* A local device buffer against the peer's host memory: CMA into or out of
 * a host bounce buffer, the device side through the GPU dispatch. */
static hcomm_status_t hc_shm_ipc_bounce(hc_shm_conn_t *c, const hc_rma_t *rma,
                                        const hc_mem_attr_t *la, bool write)
{
    size_t chunk = HC_MIN(rma->len, (size_t)HC_SHM_BOUNCE);
    uint8_t *b = malloc(chunk ? chunk : 1);
    if (!b) return hc_error(HCOMM_ERR_NO_MEMORY, "shm: bounce buffer for device memory");
    hcomm_status_t st = HCOMM_OK;
    for (size_t off = 0; off < rma->len && st == HCOMM_OK; off += chunk) {
        size_t n = HC_MIN(chunk, rma->len - off);
        uint8_t *local = (uint8_t *)rma->local + off;
        if (write) {
            st = hc_gpu_copy(b, NULL, local, la, n);
            if (st == HCOMM_OK) st = hc_shm_cma(&c->base, b, rma->remote_addr + off, n, true);
        } else {
            st = hc_shm_cma(&c->base, b, rma->remote_addr + off, n, false);
            if (st == HCOMM_OK) st = hc_gpu_copy(local, la, b, NULL, n);
        }
    }
    free(b);
    return st;
}

hcomm_status_t hc_shm_ipc_rma(hc_shm_conn_t *c, const hc_rma_t *rma, bool write)
{
    hc_mem_attr_t la;
    hcomm_status_t st = hc_gpu_mem_type(rma->local, rma->len, &la);
    if (st != HCOMM_OK) return st;
    const hc_shm_import_t *imp = rma->rkey ? rma->rkey->imp : NULL;
    if (!imp && !write)
        /* Into device memory here from host memory there: the sender
         * writes it instead (the rendezvous asks when a get fails), through
         * an import of this buffer, one host-to-device copy. */
        return hc_error(HCOMM_ERR_UNSUPPORTED,
                        "shm: a get from rank %d's host memory into device memory here: "
                        "asking for a write",
                        c->base.peer);
    if (!imp) return hc_shm_ipc_bounce(c, rma, &la, write);
    void *remote = NULL;
    if ((st = hc_shm_ipc_at(c, imp, rma->remote_addr, rma->len, &remote)) != HCOMM_OK) return st;
    hc_mem_attr_t ra;
    if ((st = hc_gpu_mem_type(remote, rma->len, &ra)) != HCOMM_OK) return st;
    st = write ? hc_gpu_copy(remote, &ra, rma->local, &la, rma->len)
               : hc_gpu_copy(rma->local, &la, remote, &ra, rma->len);
    if (st != HCOMM_OK)
        return hc_error(st, "shm: device copy %s rank %d's mapped allocation: %s",
                        write ? "to" : "from", c->base.peer, hc_error_last());
    return HCOMM_OK;
}
