/*
 * The model of a GPU: its memory, and the ops table (test library only).
 *
 * Device memory is a memfd mapped twice: the program's address is
 * PROT_NONE, so any CPU access to it faults as real device memory would
 * (SIGSEGV), and the model's copies and kernels use a private read-write
 * alias of the same pages. Managed memory is mapped read-write for the
 * program too. A free does not give the address back to the kernel: it
 * becomes a PROT_NONE reservation (so a stale pointer still faults), and
 * the next allocation that fits is mapped over it with MAP_FIXED: the model
 * re-uses addresses on purpose, so that a cache keyed by address that
 * missed a free is caught. The free is reported (hc_gpu_range_freed)
 * before the address can be handed out again.
 *
 * IPC: a handle is the memfd (passed over a unix socket by SCM_RIGHTS),
 * the allocation's size and id and the exported pointer's offset; import
 * maps it PROT_NONE plus an alias in the importing process. dmabuf_fd gives
 * the same memfd, so an RDMA model can map the device's bytes.
 *
 * Faults (HCOMM_GPU_MODEL_FAULT): copy:N, reduce:N (the Nth fails when it
 * runs), ipc (every import: invalid handle), dmabuf (every dmabuf_fd
 * fails, as on a kernel or driver without dmabuf export), lost:N (after N
 * stream operations the device is lost: every call and queued operation
 * fails).
 */
#include "gpu/model/gpu_model.h"
#include "base/config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define HC_GM_RESV_MAX 64 /* freed ranges kept reserved for re-use */
#define HC_GM_REG_MAX 256 /* host_register'ed ranges */
static const char hc_gm_magic[8] = "hcgpumdl";

hc_gpu_model_state_t hc_gpu_model;

static const char *hc_gm_fault_knob, *hc_gm_delay_knob;
static bool hc_gm_no_stage_knob;
static const hc_config_knob_t hc_gm_knobs[] = {
    HC_KNOB_STR(hc_gm_fault_knob, "HCOMM_GPU_MODEL_FAULT", "",
                "gpu model: faults on demand, comma separated: copy:N (the Nth copy fails), "
                "reduce:N (the Nth reduction fails), ipc (every IPC import fails: invalid "
                "handle), register (every host_register is refused), dmabuf (every dmabuf "
                "export fails), lost:N (the device is lost after N stream operations)"),
    HC_KNOB_STR(hc_gm_delay_knob, "HCOMM_GPU_MODEL_DELAY", "",
                "gpu model: each stream operation first waits a random 0..N microseconds, so "
                "that completions across streams come out of order"),
    HC_KNOB_BOOL(hc_gm_no_stage_knob, "HCOMM_GPU_MODEL_NO_STAGE", "0",
                 "gpu model: the entry points leave device buffers unstaged, so that a test "
                 "proves a CPU access to device memory faults (api/api_stage.c)"),
};
HC_CONFIG_KNOBS("gpu model", hc_gm_knobs)

typedef struct {
    uintptr_t base;
    size_t len;
} hc_gm_range_t;

static struct {
    pthread_mutex_t lock;
    hc_gpu_model_alloc_t *allocs;
    hc_gm_range_t resv[HC_GM_RESV_MAX], reg[HC_GM_REG_MAX];
    int nresv, nreg;
    uint64_t next_id;
    long page;
} hc_gm = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* ---- faults --------------------------------------------------------------------------------- */

static hcomm_status_t hc_gm_parse_faults(const char *spec)
{
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", spec ? spec : "");
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        long *at = !strncmp(t, "copy:", 5)     ? &hc_gpu_model.copy_at
                   : !strncmp(t, "reduce:", 7) ? &hc_gpu_model.reduce_at
                   : !strncmp(t, "lost:", 5)   ? &hc_gpu_model.lost_after
                                               : NULL;
        if (!strcmp(t, "ipc") || !strcmp(t, "dmabuf")) {
            *(t[0] == 'i' ? &hc_gpu_model.ipc : &hc_gpu_model.dmabuf) = true;
            continue;
        }
        if (!strcmp(t, "register")) {
            hc_gpu_model.no_register = true;
            continue;
        }
        char *end = NULL;
        long n = at ? strtol(strchr(t, ':') + 1, &end, 10) : 0;
        if (!at || *end || n < 1)
            return hc_error(HCOMM_ERR_INVALID,
                            "HCOMM_GPU_MODEL_FAULT=%s: \"%s\" is not copy:N, reduce:N, ipc, "
                            "register, dmabuf or lost:N (N >= 1)",
                            spec, t);
        *at = n;
    }
    return HCOMM_OK;
}

hcomm_status_t hc_gpu_model_check_lost(const char *what)
{
    if (!atomic_load(&hc_gpu_model.lost)) return HCOMM_OK;
    return hc_error(HCOMM_ERR_IO, "%s: model device 0 is lost (HCOMM_GPU_MODEL_FAULT=lost:%ld)",
                    what, hc_gpu_model.lost_after);
}

void hc_gpu_model_count_op(void)
{
    long n = atomic_fetch_add(&hc_gpu_model.ops, 1) + 1;
    if (hc_gpu_model.lost_after && n > hc_gpu_model.lost_after)
        atomic_store(&hc_gpu_model.lost, true);
}

/* ---- the allocation table ------------------------------------------------------------------- */

/* The allocation holding p, with the lock held. */
static hc_gpu_model_alloc_t *hc_gm_find(uintptr_t p)
{
    for (hc_gpu_model_alloc_t *a = hc_gm.allocs; a; a = a->next)
        if (p >= a->base && p < a->base + a->map_len) return a;
    return NULL;
}

static bool hc_gm_in(const hc_gm_range_t *r, int n, uintptr_t p)
{
    for (int i = 0; i < n; i++)
        if (p >= r[i].base && p < r[i].base + r[i].len) return true;
    return false;
}

hcomm_status_t hc_gpu_model_resolve(const void *p, size_t n, const char *what, char **addr_p,
                                    hc_gpu_model_alloc_t **a_p)
{
    uintptr_t u = (uintptr_t)p;
    hcomm_status_t st = HCOMM_OK;
    pthread_mutex_lock(&hc_gm.lock);
    hc_gpu_model_alloc_t *a = hc_gm_find(u);
    if (a) {
        if (n > a->len || u - a->base > a->len - n) {
            st = hc_error(HCOMM_ERR_INVALID,
                          "%s [%p, +%zu) runs past the end of allocation %llu [%#lx, +%zu)", what,
                          p, n, (unsigned long long)a->id, (unsigned long)a->base, a->len);
            goto out;
        }
        atomic_fetch_add(&a->refs, 1);
        *addr_p = a->alias + (u - a->base);
    } else if (hc_gm_in(hc_gm.resv, hc_gm.nresv, u)) {
        st = hc_error(HCOMM_ERR_INVALID, "%s %p: illegal address (freed device memory)", what, p);
        goto out;
    } else {
        *addr_p = (char *)p; /* host memory */
    }
    *a_p = a;
out:
    pthread_mutex_unlock(&hc_gm.lock);
    return st;
}

void hc_gpu_model_unref(hc_gpu_model_alloc_t *a)
{
    if (!a || atomic_fetch_sub(&a->refs, 1) != 1) return;
    munmap(a->alias, a->map_len);
    close(a->fd);
    free(a);
}

bool hc_gpu_model_memop_ok(const void *p)
{
    uintptr_t u = (uintptr_t)p;
    pthread_mutex_lock(&hc_gm.lock);
    bool ok = (hc_gm_find(u) && hc_gm_find(u)->type == HC_MEM_DEVICE) ||
              hc_gm_in(hc_gm.reg, hc_gm.nreg, u);
    pthread_mutex_unlock(&hc_gm.lock);
    return ok;
}

/* The program's mapping of fd: over a freed reservation that fits, or new.
 * Called with the lock held. */
static void *hc_gm_map_user(int fd, size_t len, int prot)
{
    for (int i = 0; i < hc_gm.nresv; i++) {
        hc_gm_range_t *r = &hc_gm.resv[i];
        if (r->len < len) continue;
        void *p = mmap((void *)r->base, len, prot, MAP_SHARED | MAP_FIXED, fd, 0);
        if (p == MAP_FAILED) return p;
        r->base += len;
        r->len -= len;
        if (!r->len) hc_gm.resv[i] = hc_gm.resv[--hc_gm.nresv];
        return p;
    }
    return mmap(NULL, len, prot, MAP_SHARED, fd, 0);
}

/* Makes [base, base + len) a PROT_NONE reservation kept for re-use (the
 * oldest one given back when they are too many). Lock held. */
static void hc_gm_reserve(uintptr_t base, size_t len)
{
    void *p = mmap((void *)base, len, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        munmap((void *)base, len);
        return;
    }
    if (hc_gm.nresv == HC_GM_RESV_MAX) {
        munmap((void *)hc_gm.resv[0].base, hc_gm.resv[0].len);
        memmove(&hc_gm.resv[0], &hc_gm.resv[1], (HC_GM_RESV_MAX - 1) * sizeof(hc_gm.resv[0]));
        hc_gm.nresv--;
    }
    hc_gm.resv[hc_gm.nresv++] = (hc_gm_range_t){base, len};
}

/* Maps fd (map_len bytes) for the program and the model, enters it in the
 * table. Takes fd. */
static hcomm_status_t hc_gm_install(int fd, size_t len, size_t map_len, hc_mem_type_t type,
                                    bool imported, hc_gpu_model_alloc_t **a_p)
{
    hc_gpu_model_alloc_t *a = calloc(1, sizeof(*a));
    char *alias = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (!a || alias == MAP_FAILED) {
        int e = errno;
        if (alias != MAP_FAILED) munmap(alias, map_len);
        free(a);
        close(fd);
        return hc_error_errno(HCOMM_ERR_NO_MEMORY, e, "model: mapping %zu bytes", map_len);
    }
    int prot = type == HC_MEM_MANAGED ? PROT_READ | PROT_WRITE : PROT_NONE;
    pthread_mutex_lock(&hc_gm.lock);
    void *user = hc_gm_map_user(fd, map_len, prot);
    if (user == MAP_FAILED) {
        int e = errno;
        pthread_mutex_unlock(&hc_gm.lock);
        munmap(alias, map_len);
        free(a);
        close(fd);
        return hc_error_errno(HCOMM_ERR_NO_MEMORY, e, "model: mapping %zu bytes", map_len);
    }
    *a = (hc_gpu_model_alloc_t){.next = hc_gm.allocs,
                                .base = (uintptr_t)user,
                                .len = len,
                                .map_len = map_len,
                                .alias = alias,
                                .fd = fd,
                                .id = ++hc_gm.next_id,
                                .type = type,
                                .imported = imported};
    atomic_init(&a->refs, 1);
    hc_gm.allocs = a;
    pthread_mutex_unlock(&hc_gm.lock);
    *a_p = a;
    return HCOMM_OK;
}

/* Removes the allocation holding ptr (its start, for a free), reserves its
 * address, reports the range freed. */
static hcomm_status_t hc_gm_remove(void *ptr, bool imported, const char *what)
{
    uintptr_t u = (uintptr_t)ptr;
    hcomm_status_t st = HCOMM_OK;
    pthread_mutex_lock(&hc_gm.lock);
    hc_gpu_model_alloc_t **pp = &hc_gm.allocs, *a;
    while ((a = *pp) && !(u >= a->base && u < a->base + a->map_len))
        pp = &a->next;
    if (!a || a->imported != imported || (!imported && u != a->base)) {
        st = hc_error(HCOMM_ERR_INVALID, "model: %s(%p): not %s", what, ptr,
                      imported ? "an imported IPC mapping" : "the start of an allocation");
        goto out;
    }
    *pp = a->next;
    hc_gm_reserve(a->base, a->map_len);
    hc_gpu_range_freed(a->base, a->map_len); /* before the address can be handed out again */
    atomic_fetch_add(&hc_gpu_model.frees, 1);
out:
    pthread_mutex_unlock(&hc_gm.lock);
    if (st == HCOMM_OK) hc_gpu_model_unref(a);
    return st;
}

/* ---- the ops: memory ------------------------------------------------------------------------ */

static hcomm_status_t hc_gm_alloc(int device, size_t len, hc_mem_type_t type, void **ptr_p)
{
    hcomm_status_t st = hc_gpu_model_check_lost("model alloc");
    if (st != HCOMM_OK) return st;
    if (device != 0 || len == 0 || (type != HC_MEM_DEVICE && type != HC_MEM_MANAGED))
        return hc_error(HCOMM_ERR_INVALID,
                        "model alloc: device %d (the model has device 0), "
                        "%zu bytes (> 0), type %s (device or managed)",
                        device, len, hc_mem_type_name(type));
    size_t map_len = HC_ALIGN_UP(len, (size_t)hc_gm.page);
    int fd = memfd_create("hcomm-gpu-model", MFD_CLOEXEC);
    if (fd < 0) return hc_error_errno(HCOMM_ERR_NO_MEMORY, errno, "model alloc: memfd_create");
    if (ftruncate(fd, (off_t)map_len) != 0) {
        int e = errno;
        close(fd);
        return hc_error_errno(HCOMM_ERR_NO_MEMORY, e, "model alloc: %zu bytes", len);
    }
    hc_gpu_model_alloc_t *a;
    if ((st = hc_gm_install(fd, len, map_len, type, false, &a)) != HCOMM_OK) return st;
    atomic_fetch_add(&hc_gpu_model.allocs, 1);
    *ptr_p = (void *)a->base;
    return HCOMM_OK;
}

static hcomm_status_t hc_gm_free(void *ptr)
{
    return hc_gm_remove(ptr, false, "free");
}

static hcomm_status_t hc_gm_query(const void *ptr, hc_mem_attr_t *attr_p)
{
    hcomm_status_t st = hc_gpu_model_check_lost("model pointer query");
    if (st != HCOMM_OK) return st;
    uintptr_t u = (uintptr_t)ptr;
    hc_mem_attr_t at = {.type = HC_MEM_HOST, .device = -1};
    pthread_mutex_lock(&hc_gm.lock);
    hc_gpu_model_alloc_t *a = hc_gm_find(u);
    if (a) {
        at = (hc_mem_attr_t){a->type, a->device, a->id, a->base, a->len};
    } else {
        for (int i = 0; i < hc_gm.nreg; i++)
            if (u >= hc_gm.reg[i].base && u < hc_gm.reg[i].base + hc_gm.reg[i].len)
                at.base = hc_gm.reg[i].base, at.length = hc_gm.reg[i].len;
    }
    pthread_mutex_unlock(&hc_gm.lock);
    *attr_p = at;
    return HCOMM_OK;
}

static hcomm_status_t hc_gm_host_register(void *ptr, size_t len)
{
    uintptr_t u = (uintptr_t)ptr;
    hcomm_status_t st = HCOMM_OK;
    if (!ptr || !len) return hc_error(HCOMM_ERR_INVALID, "model host_register: empty range");
    if (hc_gpu_model.no_register)
        return hc_error(HCOMM_ERR_NO_MEMORY,
                        "model host_register [%p, +%zu): refused (HCOMM_GPU_MODEL_FAULT=register)",
                        ptr, len);
    pthread_mutex_lock(&hc_gm.lock);
    for (int i = 0; i < hc_gm.nreg; i++)
        if (u < hc_gm.reg[i].base + hc_gm.reg[i].len && hc_gm.reg[i].base < u + len) {
            st = hc_error(HCOMM_ERR_INVALID,
                          "model host_register [%p, +%zu): already registered "
                          "(overlaps [%#lx, +%zu))",
                          ptr, len, (unsigned long)hc_gm.reg[i].base, hc_gm.reg[i].len);
            goto out;
        }
    if (hc_gm_find(u) || hc_gm_find(u + len - 1)) {
        st = hc_error(HCOMM_ERR_INVALID, "model host_register(%p): device memory", ptr);
    } else if (hc_gm.nreg == HC_GM_REG_MAX) {
        st = hc_error(HCOMM_ERR_NO_MEMORY, "model host_register: %d ranges already", HC_GM_REG_MAX);
    } else {
        hc_gm.reg[hc_gm.nreg++] = (hc_gm_range_t){u, len};
        atomic_fetch_add(&hc_gpu_model.registers, 1);
    }
out:
    pthread_mutex_unlock(&hc_gm.lock);
    return st;
}

static hcomm_status_t hc_gm_host_unregister(void *ptr)
{
    hcomm_status_t st =
        hc_error(HCOMM_ERR_INVALID, "model host_unregister(%p): not registered", ptr);
    pthread_mutex_lock(&hc_gm.lock);
    for (int i = 0; i < hc_gm.nreg; i++)
        if (hc_gm.reg[i].base == (uintptr_t)ptr) {
            hc_gm.reg[i] = hc_gm.reg[--hc_gm.nreg];
            st = HCOMM_OK;
            break;
        }
    pthread_mutex_unlock(&hc_gm.lock);
    return st;
}

/* ---- IPC and dmabuf ------------------------------------------------------------------------- */

/* A new fd of the allocation holding [ptr, ptr + len), its offset there. */
static hcomm_status_t hc_gm_share(const void *ptr, size_t len, const char *what, int *fd_p,
                                  hc_mem_attr_t *at_p)
{
    hcomm_status_t st = hc_gpu_model_check_lost(what);
    if (st != HCOMM_OK) return st;
    uintptr_t u = (uintptr_t)ptr;
    pthread_mutex_lock(&hc_gm.lock);
    hc_gpu_model_alloc_t *a = hc_gm_find(u);
    if (!a || a->type != HC_MEM_DEVICE || len > a->len || u - a->base > a->len - len) {
        st = hc_error(HCOMM_ERR_INVALID, "model %s [%p, +%zu): not inside one device allocation",
                      what, ptr, len);
    } else if ((*fd_p = fcntl(a->fd, F_DUPFD_CLOEXEC, 0)) < 0) {
        st = hc_error_errno(HCOMM_ERR_IO, errno, "model %s: dup", what);
    } else {
        *at_p = (hc_mem_attr_t){a->type, a->device, a->id, a->base, a->map_len};
    }
    pthread_mutex_unlock(&hc_gm.lock);
    return st;
}

static hcomm_status_t hc_gm_ipc_export(const void *ptr, hc_gpu_ipc_handle_t *h_p)
{
    hc_mem_attr_t at;
    int fd;
    hcomm_status_t st = hc_gm_share(ptr, 1, "ipc_export", &fd, &at);
    if (st != HCOMM_OK) return st;
    hc_gpu_ipc_handle_t h = {.fd = fd,
                             .device = at.device,
                             .alloc_id = at.alloc_id,
                             .offset = (uintptr_t)ptr - at.base,
                             .length = at.length};
    memcpy(h.bytes, hc_gm_magic, sizeof(hc_gm_magic));
    *h_p = h;
    return HCOMM_OK;
}

static hcomm_status_t hc_gm_ipc_import(const hc_gpu_ipc_handle_t *h, void **ptr_p)
{
    hcomm_status_t st = hc_gpu_model_check_lost("model ipc_import");
    if (st != HCOMM_OK) return st;
    if (hc_gpu_model.ipc)
        return hc_error(HCOMM_ERR_INVALID,
                        "model ipc_import: invalid handle (allocation %llu "
                        "of the peer; HCOMM_GPU_MODEL_FAULT=ipc)",
                        (unsigned long long)h->alloc_id);
    struct stat sb;
    if (memcmp(h->bytes, hc_gm_magic, sizeof(hc_gm_magic)) || h->fd < 0 || fstat(h->fd, &sb) != 0 ||
        (size_t)sb.st_size < h->length || h->length == 0 || h->offset >= h->length ||
        h->length % (size_t)hc_gm.page)
        return hc_error(HCOMM_ERR_INVALID,
                        "model ipc_import: invalid handle (fd %d, %zu bytes, "
                        "offset %zu: not a model memfd export of that size)",
                        h->fd, h->length, h->offset);
    int fd = fcntl(h->fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) return hc_error_errno(HCOMM_ERR_IO, errno, "model ipc_import: dup");
    hc_gpu_model_alloc_t *a;
    if ((st = hc_gm_install(fd, h->length, h->length, HC_MEM_DEVICE, true, &a)) != HCOMM_OK)
        return st;
    atomic_fetch_add(&hc_gpu_model.imports, 1);
    *ptr_p = (char *)a->base + h->offset;
    return HCOMM_OK;
}

static hcomm_status_t hc_gm_ipc_close(void *ptr)
{
    return hc_gm_remove(ptr, true, "ipc_close");
}

static hcomm_status_t hc_gm_dmabuf_fd(const void *ptr, size_t len, int *fd_p, uint64_t *offset_p)
{
    if (hc_gpu_model.dmabuf)
        return hc_error(HCOMM_ERR_UNSUPPORTED, "model dmabuf_fd(%p, %zu bytes): no dmabuf export "
                        "(HCOMM_GPU_MODEL_FAULT=dmabuf)", ptr, len);
    hc_mem_attr_t at;
    int fd;
    hcomm_status_t st = hc_gm_share(ptr, len ? len : 1, "dmabuf_fd", &fd, &at);
    if (st != HCOMM_OK) return st;
    *fd_p = fd;
    *offset_p = (uintptr_t)ptr - at.base;
    return HCOMM_OK;
}

/* ---- lifecycle and the table ---------------------------------------------------------------- */

static hcomm_status_t hc_gm_init(char *why, size_t why_len)
{
    memset(&hc_gpu_model, 0, sizeof(hc_gpu_model));
    hc_gm.page = sysconf(_SC_PAGESIZE);
    hcomm_status_t st = hc_gm_parse_faults(hc_config_env("HCOMM_GPU_MODEL_FAULT"));
    const char *d = hc_config_env("HCOMM_GPU_MODEL_DELAY");
    if (st == HCOMM_OK && d && *d) {
        char *end;
        long long v = strtoll(d, &end, 10);
        if (*end || v < 0 || v > 1000000)
            st = hc_error(HCOMM_ERR_INVALID,
                          "HCOMM_GPU_MODEL_DELAY=%s must be microseconds, 0..1000000", d);
        hc_gpu_model.delay_us = v;
    }
    /* Test knob: the engine's entry points leave device buffers unstaged
     * (docs/gpu.md: the test that proves a missed site faults). */
    const char *ns = hc_config_env("HCOMM_GPU_MODEL_NO_STAGE");
    hc_gpu_no_stage = ns && !strcmp(ns, "1");
    if (st != HCOMM_OK) snprintf(why, why_len, "%s", hc_error_last());
    return st;
}

static void hc_gm_fini(void)
{
    hc_gpu_model_streams_fini();
    pthread_mutex_lock(&hc_gm.lock);
    while (hc_gm.allocs) {
        hc_gpu_model_alloc_t *a = hc_gm.allocs;
        hc_gm.allocs = a->next;
        munmap((void *)a->base, a->map_len);
        hc_gpu_range_freed(a->base, a->map_len);
        hc_gpu_model_unref(a);
    }
    for (int i = 0; i < hc_gm.nresv; i++)
        munmap((void *)hc_gm.resv[i].base, hc_gm.resv[i].len);
    hc_gm.nresv = hc_gm.nreg = 0;
    pthread_mutex_unlock(&hc_gm.lock);
}

static int hc_gm_device_count(void)
{
    return 1;
}

static void hc_gm_device_describe(int device, char *buf, size_t len)
{
    snprintf(buf, len,
             "model%d (memfd device memory, PROT_NONE to the CPU; streams are threads%s%s)", device,
             hc_gpu_model.delay_us ? "; random delays" : "",
             hc_gpu_model.copy_at || hc_gpu_model.reduce_at || hc_gpu_model.ipc ||
                     hc_gpu_model.dmabuf || hc_gpu_model.lost_after
                 ? "; faults on"
                 : "");
}

const hc_gpu_ops_t hc_gpu_model_ops = {
    .name = "model",
    .init = hc_gm_init,
    .fini = hc_gm_fini,
    .device_count = hc_gm_device_count,
    .device_describe = hc_gm_device_describe,
    .query = hc_gm_query,
    .alloc = hc_gm_alloc,
    .free = hc_gm_free,
    .copy_async = hc_gpu_model_copy_async,
    .reduce_async = hc_gpu_model_reduce_async,
    .stream_create = hc_gpu_model_stream_create,
    .stream_destroy = hc_gpu_model_stream_destroy,
    .stream_synchronize = hc_gpu_model_stream_synchronize,
    .stream_wait_event = hc_gpu_model_stream_wait_event,
    .event_create = hc_gpu_model_event_create,
    .event_record = hc_gpu_model_event_record,
    .event_query = hc_gpu_model_event_query,
    .event_synchronize = hc_gpu_model_event_synchronize,
    .event_destroy = hc_gpu_model_event_destroy,
    .wait_value32 = hc_gpu_model_wait_value32,
    .write_value32 = hc_gpu_model_write_value32,
    .ipc_export = hc_gm_ipc_export,
    .ipc_import = hc_gm_ipc_import,
    .ipc_close = hc_gm_ipc_close,
    .dmabuf_fd = hc_gm_dmabuf_fd,
    .host_register = hc_gm_host_register,
    .host_unregister = hc_gm_host_unregister,
};

__attribute__((constructor)) static void hc_gpu_model_plug(void)
{
    hc_gpu_model_glue = &hc_gpu_model_ops;
}
