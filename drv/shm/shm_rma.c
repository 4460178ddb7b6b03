/*
 * shm driver: single-copy transfers and remote keys.
 *
 * get() reads the peer's buffer directly with process_vm_readv and write()
 * writes it with process_vm_writev (one copy each), when the kernel allows
 * it: connect checks that by reading a canary from the peer and writing it
 * back (hc_shm_cma_probe). Large messages then skip the FIFOs.
 */
#include "drv/shm/shm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

/* ---- CMA ------------------------------------------------------------------------ */

void hc_shm_cma_probe(hc_shm_conn_t *c, const hc_shm_addr_t *a)
{
    uint64_t seen = 0;
    struct iovec l = {.iov_base = &seen, .iov_len = sizeof(seen)};
    struct iovec r = {.iov_base = (void *)(uintptr_t)a->canary_addr, .iov_len = sizeof(seen)};
    ssize_t n = process_vm_readv(c->pid, &l, 1, &r, 1, 0);
    if (n == (ssize_t)sizeof(seen) && seen == a->canary) {
        c->base.caps |= HC_CONN_CAP_GET;
        /* Writing needs the same permission; prove it by writing the
         * canary's own value back. */
        struct iovec w = {.iov_base = &seen, .iov_len = sizeof(seen)};
        if (process_vm_writev(c->pid, &w, 1, &r, 1, 0) == (ssize_t)sizeof(seen))
            c->base.caps |= HC_CONN_CAP_WRITE;
    } else
        hc_log_info("shm: single-copy reads from rank %d unavailable (%s): large messages "
                    "go through the slots",
                    c->base.peer, n < 0 ? strerror(errno) : "canary mismatch");
}

/* The process is gone, or a zombie, or dying (/proc/PID/stat state Z, X,
 * x): what a CMA failure during a peer's exit looks like. */
static bool hc_shm_pid_gone(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return true;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    if (!p || p[1] != ' ') return false;
    return p[2] == 'Z' || p[2] == 'X' || p[2] == 'x';
}

/* Single-copy transfer with the peer process (CMA), looping over partial
 * transfers: process_vm_readv for get, process_vm_writev for write. */
hcomm_status_t hc_shm_cma(hc_conn_t *conn, void *local, uint64_t raddr, size_t len, bool write)
{
    hc_shm_conn_t *c = (hc_shm_conn_t *)conn;
    size_t done = 0;
    while (done < len) {
        struct iovec l = {.iov_base = (char *)local + done, .iov_len = len - done};
        struct iovec r = {.iov_base = (void *)(uintptr_t)(raddr + done), .iov_len = len - done};
        ssize_t n = write ? process_vm_writev(c->pid, &l, 1, &r, 1, 0)
                          : process_vm_readv(c->pid, &l, 1, &r, 1, 0);
        if (n <= 0 && (errno == ESRCH || (errno == EFAULT && hc_shm_pid_gone(c->pid))))
            /* the peer's process is gone (or exiting: its memory is being
             * torn down): a peer failure, not an I/O error */
            return hc_error(HCOMM_ERR_PEER_FAILED, "shm: rank %d's process is gone (process_vm_%s)",
                            conn->peer, write ? "writev" : "readv");
        if (n <= 0 && errno == EFAULT)
            /* The peer is alive but the range it advertised is no longer
             * mapped: it abandoned the transfer (its operation failed on
             * another peer's death and it freed the buffer), which the
             * caller must see as that peer failing, not as an I/O error
             * (coll_topo_2x2_hier_peer_death caught ERR_IO here). */
            return hc_error(HCOMM_ERR_PEER_FAILED,
                            "shm: rank %d's buffer at %#llx is no longer mapped (it abandoned the "
                            "transfer: its operation failed, or it freed the buffer early)",
                            conn->peer, (unsigned long long)(raddr + done));
        if (n <= 0)
            return hc_error_errno(HCOMM_ERR_IO, errno, "shm: process_vm_%s rank %d",
                                  write ? "writev to" : "readv from", conn->peer);
        done += (size_t)n;
    }
    return HCOMM_OK;
}

/* True when rma involves device memory: a peer's imported allocation, or
 * (with a GPU backend on) a local device buffer. */
static bool hc_shm_rma_device(const hc_rma_t *rma)
{
    if (rma->rkey && rma->rkey->imp) return true;
    hc_mem_attr_t a;
    return HC_UNLIKELY(hc_gpu_on) && hc_gpu_mem_type(rma->local, rma->len, &a) == HCOMM_OK &&
           a.type != HC_MEM_HOST;
}

/* CMA needs no keys and completes at once; device memory goes through the
 * GPU dispatch (shm_ipc.c). */
hcomm_status_t hc_drv_shm_get(hc_conn_t *conn, const hc_rma_t *rma)
{
    if (HC_UNLIKELY(hc_shm_rma_device(rma)))
        return hc_shm_ipc_rma((hc_shm_conn_t *)conn, rma, false);
    return hc_shm_cma(conn, rma->local, rma->remote_addr, rma->len, false);
}

hcomm_status_t hc_drv_shm_write(hc_conn_t *conn, const hc_rma_t *rma)
{
    if (HC_UNLIKELY(hc_shm_rma_device(rma)))
        return hc_shm_ipc_rma((hc_shm_conn_t *)conn, rma, true);
    return hc_shm_cma(conn, rma->local, rma->remote_addr, rma->len, true);
}

/* ---- remote keys: peers' shared memory mapped in place ---------------------
 * Memory backed by a memfd (pool regions) can be mapped by the other local
 * ranks. Its packed key names the memfd by the owner's fd number and inode
 * (and the file's size); a peer opens /proc/PID/fd/N, which needs the same
 * permission as reading that process's memory, and refuses a file whose
 * inode differs (the fd number was reused). Mappings are cached per peer
 * and inode, referenced by the remote keys that use them, and the least
 * recently used unreferenced one is unmapped when HC_SHM_MAPS are in use.
 * Memory without a memfd packs an empty key (CMA reaches it by address).
 */
#define HC_SHM_RKEY_MAGIC 0x6b6d6873u /* "shmk" */

typedef struct {
    uint32_t magic;
    int32_t fd;
    uint64_t ino, file_size;
    uint64_t off;  /* offset of addr in the file */
    uint64_t addr; /* in the owner's address space */
} hc_shm_rkey_wire_t;
_Static_assert(sizeof(hc_shm_rkey_wire_t) <= HC_RKEY_MAX, "shm key fits HC_RKEY_MAX");

hcomm_status_t hc_drv_shm_rkey_pack(hc_drv_t *drv, uint64_t key, const hc_mem_desc_t *desc,
                                    void *buf, size_t *len_p)
{
    (void)drv;
    if (desc->mem_type == HC_MEM_DEVICE && key)
        return hc_shm_ipc_key_pack((const hc_shm_ipc_export_t *)(uintptr_t)key, buf, len_p);
    struct stat st;
    if (desc->fd < 0 || fstat(desc->fd, &st) != 0) {
        *len_p = 0;
        return HCOMM_OK;
    }
    hc_shm_rkey_wire_t w = {.magic = HC_SHM_RKEY_MAGIC,
                            .fd = desc->fd,
                            .ino = (uint64_t)st.st_ino,
                            .file_size = (uint64_t)st.st_size,
                            .off = desc->fd_offset,
                            .addr = (uint64_t)(uintptr_t)desc->addr};
    if (*len_p < sizeof(w))
        return hc_error(HCOMM_ERR_INVALID, "shm: rkey_pack: argument len_p (%zu) is below %zu",
                        *len_p, sizeof(w));
    memcpy(buf, &w, sizeof(w));
    *len_p = sizeof(w);
    return HCOMM_OK;
}

static hc_shm_map_t *hc_shm_map_get(hc_drv_shm_t *s, pid_t pid, const hc_shm_rkey_wire_t *w)
{
    static uint64_t clock;
    hc_shm_map_t *victim = NULL;
    for (int i = 0; i < s->nmaps; i++) {
        hc_shm_map_t *m = &s->maps[i];
        if (m->pid == pid && m->ino == w->ino && m->size == w->file_size) {
            m->used = ++clock;
            return m;
        }
        if (!m->refs && (!victim || m->used < victim->used)) victim = m;
    }
    if (s->nmaps == HC_SHM_MAPS && !victim)
        return NULL; /* every mapping is in use: the caller does without */
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pid, (int)w->fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat st;
    void *base = MAP_FAILED;
    if (fstat(fd, &st) == 0 && (uint64_t)st.st_ino == w->ino &&
        (uint64_t)st.st_size >= w->file_size)
        base = mmap(NULL, w->file_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (base == MAP_FAILED) return NULL;
    hc_shm_map_t *m = s->nmaps < HC_SHM_MAPS ? &s->maps[s->nmaps++] : victim;
    if (m == victim) munmap(m->base, m->size);
    *m = (hc_shm_map_t){
        .pid = pid, .ino = w->ino, .size = w->file_size, .base = base, .used = ++clock};
    return m;
}

hcomm_status_t hc_drv_shm_rkey_unpack(hc_conn_t *conn, const void *buf, size_t len,
                                      hc_rkey_t **rkey_p)
{
    hc_shm_conn_t *c = (hc_shm_conn_t *)conn;
    hc_drv_shm_t *s = (hc_drv_shm_t *)conn->drv;
    *rkey_p = NULL;
    if (len == 0) return HCOMM_OK;
    if (hc_shm_ipc_key_is(buf, len)) {
        hc_rkey_t *k = calloc(1, sizeof(*k));
        if (!k) return hc_error(HCOMM_ERR_NO_MEMORY, "shm: remote key of rank %d", conn->peer);
        hcomm_status_t st = hc_shm_ipc_key_unpack(c, buf, k);
        if (st != HCOMM_OK) {
            free(k);
            return st;
        }
        *rkey_p = k;
        return HCOMM_OK;
    }
    hc_shm_rkey_wire_t w;
    if (len != sizeof(w))
        return hc_error(HCOMM_ERR_INVALID, "shm: a %zu-byte key from rank %d (expected %zu)", len,
                        conn->peer, sizeof(w));
    memcpy(&w, buf, sizeof(w));
    if (w.magic != HC_SHM_RKEY_MAGIC || w.off > w.file_size)
        return hc_error(HCOMM_ERR_INVALID, "shm: a malformed key from rank %d", conn->peer);
    hc_rkey_t *k = calloc(1, sizeof(*k));
    if (!k) return hc_error(HCOMM_ERR_NO_MEMORY, "shm: remote key of rank %d", conn->peer);
    k->off = w.off;
    k->addr = w.addr;
    k->map = hc_shm_map_get(s, c->pid, &w);
    if (k->map) k->map->refs++;
    *rkey_p = k;
    return HCOMM_OK;
}

void hc_drv_shm_rkey_release(hc_conn_t *conn, hc_rkey_t *rkey)
{
    (void)conn;
    if (!rkey) return;
    if (rkey->map) rkey->map->refs--;
    if (rkey->imp) rkey->imp->refs--;
    free(rkey);
}

hcomm_status_t hc_drv_shm_rkey_ptr(hc_conn_t *conn, const hc_rkey_t *rkey, uint64_t remote_addr,
                                   size_t len, void **ptr_p)
{
    *ptr_p = NULL;
    if (rkey && rkey->imp) /* a peer's device allocation, imported: a device pointer */
        return hc_shm_ipc_ptr(conn, rkey, remote_addr, len, ptr_p);
    if (!rkey || !rkey->map)
        return HCOMM_ERR_UNSUPPORTED; /* not memfd memory, or not mappable here */
    uint64_t at = rkey->off + (remote_addr - rkey->addr);
    if (remote_addr < rkey->addr || at > rkey->map->size || len > rkey->map->size - at)
        return hc_error(HCOMM_ERR_INVALID,
                        "shm: rkey_ptr: [%#llx, +%zu) of rank %d lies outside its key",
                        (unsigned long long)remote_addr, len, conn->peer);
    *ptr_p = rkey->map->base + at;
    return HCOMM_OK;
}
