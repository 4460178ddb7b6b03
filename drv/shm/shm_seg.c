/*
 * shm driver: the node segment (header, directory of arena blocks, the
 * FIFOs of every ordered pair of local ranks, the arena; shm.h).
 *
 * The node leader (local rank 0) creates the segment in mem/ (a memfd on
 * hugepages when reserved, mapped 0600, never a name in the file system) and
 * hands the descriptor to each local rank over an abstract Unix socket that
 * checks the peer's uid and the job key.
 *
 * The arena gives node-shared memory by key (shared_get) to the collectives:
 * under the arena lock (a word of the segment taken by CAS), the first local
 * rank to ask for a key claims a directory entry and carves the block; the
 * others find it.
 */
#include "drv/shm/shm.h"
#include "base/config.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

/* ---- sharing the segment ----------------------------------------------------- */

typedef struct {
    uint64_t magic;
    uint32_t local_rank;
    uint32_t key_len;
    char key[160];
} hc_shm_hello_t;

static socklen_t hc_shm_sockaddr(const hc_drv_env_t *env, struct sockaddr_un *sa)
{
    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_UNIX;
    /* Abstract name (leading NUL): nothing in the file system, gone with the
     * socket. Unique per job and node; access is checked on accept. */
    int n = snprintf(sa->sun_path + 1, sizeof(sa->sun_path) - 1, "hcomm-shm-%016llx",
                     (unsigned long long)hc_shm_hash(env->job_key, env->node_id));
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static size_t hc_shm_seg_size(hc_drv_shm_t *s, uint64_t *fifo_off, uint64_t *stride,
                              uint64_t *arena_off, uint64_t *arena_size)
{
    *fifo_off = HC_ALIGN_UP(sizeof(hc_shm_seg_t), (size_t)4096);
    *stride = HC_ALIGN_UP(sizeof(hc_shm_fifo_t) + (uint64_t)s->nslots * s->slot_size, 4096);
    *arena_off = *fifo_off + *stride * (uint64_t)s->L * (uint64_t)s->L;
    *arena_size = (8ull << 20) + (uint64_t)s->L * (4ull << 20);
    return (size_t)(*arena_off + *arena_size);
}

static hcomm_status_t hc_shm_leader_share(hc_drv_shm_t *s, double deadline)
{
    const hc_drv_env_t *env = s->base.env;
    struct sockaddr_un sa;
    socklen_t salen = hc_shm_sockaddr(env, &sa);
    int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (lfd < 0) return hc_error_errno(HCOMM_ERR_IO, errno, "shm: socket");
    if (bind(lfd, (struct sockaddr *)&sa, salen) != 0 || listen(lfd, 128) != 0) {
        int e = errno;
        close(lfd);
        return hc_error_errno(HCOMM_ERR_IO, e, "shm: cannot listen on the node socket");
    }
    int served = 0;
    hcomm_status_t st = HCOMM_OK;
    while (served < s->L - 1) {
        if (hc_time_sec() > deadline) {
            st = hc_error(HCOMM_ERR_TIMEOUT,
                          "hcomm_init: shm: only %d of %d local ranks fetched "
                          "the node segment before the deadline",
                          served, s->L - 1);
            break;
        }
        struct pollfd p = {.fd = lfd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0) continue;
        int cfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (cfd < 0) continue;
        struct ucred cred;
        socklen_t clen = sizeof(cred);
        hc_shm_hello_t hello;
        struct pollfd cp = {.fd = cfd, .events = POLLIN};
        bool ok = getsockopt(cfd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) == 0 &&
                  cred.uid == getuid() && poll(&cp, 1, 2000) == 1 &&
                  recv(cfd, &hello, sizeof(hello), MSG_WAITALL) == (ssize_t)sizeof(hello) &&
                  hello.magic == HC_SHM_MAGIC && hello.key_len < sizeof(hello.key) &&
                  hello.key_len == strlen(env->job_key) &&
                  !memcmp(hello.key, env->job_key, hello.key_len);
        if (!ok) {
            hc_log_warn("shm: dropped a node-socket client that is not part of this job");
            close(cfd);
            continue;
        }
        uint64_t size = s->seg_region->size;
        char cbuf[CMSG_SPACE(sizeof(int))] = {0};
        struct iovec iov = {.iov_base = &size, .iov_len = sizeof(size)};
        struct msghdr msg = {
            .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &s->seg_region->fd, sizeof(int));
        if (sendmsg(cfd, &msg, MSG_NOSIGNAL) == (ssize_t)sizeof(size)) served++;
        close(cfd);
    }
    close(lfd);
    return st;
}

static hcomm_status_t hc_shm_follower_fetch(hc_drv_shm_t *s, double deadline)
{
    const hc_drv_env_t *env = s->base.env;
    struct sockaddr_un sa;
    socklen_t salen = hc_shm_sockaddr(env, &sa);
    unsigned delay_us = 1000;
    for (;;) {
        if (hc_time_sec() > deadline)
            return hc_error(HCOMM_ERR_TIMEOUT,
                            "hcomm_init: shm: node leader (rank %d) did not "
                            "share the node segment before the deadline",
                            env->local_ranks[0]);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) return hc_error_errno(HCOMM_ERR_IO, errno, "shm: socket");
        if (connect(fd, (struct sockaddr *)&sa, salen) != 0) {
            close(fd);
            usleep(delay_us);
            delay_us = HC_MIN(delay_us * 2, 50000u);
            continue;
        }
        hc_shm_hello_t hello = {.magic = HC_SHM_MAGIC, .local_rank = (uint32_t)s->lr};
        hello.key_len = (uint32_t)HC_MIN(strlen(env->job_key), sizeof(hello.key) - 1);
        memcpy(hello.key, env->job_key, hello.key_len);
        uint64_t size = 0;
        char cbuf[CMSG_SPACE(sizeof(int))] = {0};
        struct iovec iov = {.iov_base = &size, .iov_len = sizeof(size)};
        struct msghdr msg = {
            .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int segfd = -1;
        if (send(fd, &hello, sizeof(hello), MSG_NOSIGNAL) == (ssize_t)sizeof(hello) &&
            poll(&p, 1, (int)HC_MAX(1.0, (deadline - hc_time_sec()) * 1000)) == 1 &&
            recvmsg(fd, &msg, MSG_CMSG_CLOEXEC) == (ssize_t)sizeof(size)) {
            struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
            if (c && c->cmsg_type == SCM_RIGHTS) memcpy(&segfd, CMSG_DATA(c), sizeof(int));
        }
        close(fd);
        if (segfd < 0)
            return hc_error(HCOMM_ERR_BOOTSTRAP,
                            "hcomm_init: shm: the node leader (rank %d) "
                            "refused or closed the node socket",
                            env->local_ranks[0]);
        hcomm_status_t st = hc_mem_region_attach(segfd, size, &s->seg_region);
        close(segfd);
        if (st != HCOMM_OK) return st;
        s->seg = s->seg_region->base;
        if (s->seg->magic != HC_SHM_MAGIC || s->seg->local_size != (uint32_t)s->L ||
            s->seg->nslots != s->nslots || s->seg->slot_size != s->slot_size)
            return hc_error(HCOMM_ERR_INVALID, "hcomm_init: shm: node segment layout differs "
                                               "between ranks (HCOMM_SHM_* must match)");
        return HCOMM_OK;
    }
}

hcomm_status_t hc_drv_shm_wireup(hc_drv_t *drv, const void *const *addrs, const size_t *lens)
{
    (void)addrs;
    (void)lens;
    hc_drv_shm_t *s = (hc_drv_shm_t *)drv;
    double deadline = hc_time_sec() + hc_cfg.timeout;
    if (s->lr == 0) {
        uint64_t fifo_off, stride, arena_off, arena_size;
        size_t size = hc_shm_seg_size(s, &fifo_off, &stride, &arena_off, &arena_size);
        hcomm_status_t st = hc_mem_region_create(size, HC_MEM_SHARED | HC_MEM_NO_REG, -1,
                                                 "hcomm-shm-node", &s->seg_region);
        if (st != HCOMM_OK) return st;
        s->seg = s->seg_region->base;
        hc_shm_seg_t *g = s->seg;
        g->local_size = (uint32_t)s->L;
        g->nslots = s->nslots;
        g->slot_size = s->slot_size;
        g->fifo_off = fifo_off;
        g->fifo_stride = stride;
        g->arena_off = arena_off;
        g->arena_size = arena_size;
        __atomic_store_n(&g->magic, HC_SHM_MAGIC, __ATOMIC_RELEASE);
        return hc_shm_leader_share(s, deadline);
    }
    return hc_shm_follower_fetch(s, deadline);
}

/* ---- the arena ------------------------------------------------------------------ */

/* The arena lock lives in the shared segment. A rank that dies holding it
 * makes the others give up at the deadline (their callers then fall back to
 * algorithms that need no shared memory). */
static bool hc_shm_arena_lock(hc_shm_seg_t *g)
{
    double deadline = hc_time_sec() + hc_cfg.timeout;
    hc_backoff_t b = {0};
    for (;;) {
        uint32_t expect = 0;
        if (__atomic_compare_exchange_n(&g->arena_lock, &expect, 1, false, __ATOMIC_ACQUIRE,
                                        __ATOMIC_RELAXED))
            return true;
        if (hc_time_sec() > deadline) return false;
        hc_backoff_step(&b);
    }
}

static void hc_shm_arena_unlock(hc_shm_seg_t *g)
{
    __atomic_store_n(&g->arena_lock, 0, __ATOMIC_RELEASE);
}

/* Node-shared memory by key: the first local rank to ask creates it (zeroed:
 * a released block of a fitting size is reused, else the arena grows) with
 * `users` references, later ones share it; each shared_put drops one and
 * the last releases the block for reuse. Keys are never reused for
 * different data. */
void *hc_drv_shm_shared_get(hc_drv_t *drv, uint64_t key, size_t size, int users)
{
    hc_drv_shm_t *s = (hc_drv_shm_t *)drv;
    hc_shm_seg_t *g = s->seg;
    if (!g || key <= HC_SHM_KEY_FREE) return NULL;
    size = HC_ALIGN_UP(size, (size_t)4096);
    if (!hc_shm_arena_lock(g)) {
        hc_log_warn("shm: node arena lock not released before the deadline");
        return NULL;
    }
    hc_shm_dir_t *hit = NULL, *reuse = NULL, *empty = NULL;
    for (int i = 0; i < HC_SHM_DIR_ENTRIES; i++) {
        hc_shm_dir_t *e = &g->dir[i];
        if (e->key == key) {
            hit = e;
            break;
        }
        if (e->key == HC_SHM_KEY_FREE && e->size >= size && (!reuse || e->size < reuse->size))
            reuse = e;
        if (e->key == 0 && !empty) empty = e;
    }
    void *base = NULL;
    if (hit) {
        if (hit->size >= size) base = (uint8_t *)g + hit->off;
    } else if (reuse) {
        reuse->key = key;
        reuse->refs = users;
        base = (uint8_t *)g + reuse->off;
        memset(base, 0, reuse->size);
    } else if (empty && g->arena_used + size <= g->arena_size) {
        empty->key = key;
        empty->off = g->arena_off + g->arena_used;
        empty->size = size;
        empty->refs = users;
        g->arena_used += size;
        base = (uint8_t *)g + empty->off; /* never used before: still zero */
    }
    hc_shm_arena_unlock(g);
    return base;
}

void hc_drv_shm_shared_put(hc_drv_t *drv, uint64_t key)
{
    hc_drv_shm_t *s = (hc_drv_shm_t *)drv;
    hc_shm_seg_t *g = s->seg;
    if (!g || key <= HC_SHM_KEY_FREE || !hc_shm_arena_lock(g)) return;
    for (int i = 0; i < HC_SHM_DIR_ENTRIES; i++) {
        hc_shm_dir_t *e = &g->dir[i];
        if (e->key != key) continue;
        if (e->refs > 0 && --e->refs == 0) e->key = HC_SHM_KEY_FREE;
        break;
    }
    hc_shm_arena_unlock(g);
}
