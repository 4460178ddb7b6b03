/*
 * shm: ranks of one node talk through one shared segment.
 *
 * The node leader (local rank 0) creates the segment in mem/ (a memfd on
 * hugepages when reserved, mapped 0600, never a name in the file system) and
 * hands the descriptor to each local rank over an abstract Unix socket that
 * checks the peer's uid and the job key. The segment holds:
 *
 *   header | directory of keyed arena blocks | FIFO[i][j] for every ordered
 *   pair of local ranks | arena
 *
 * A FIFO is `nslots` receive slots owned by the receiver plus the receiver's
 * consumed counter (the credits). A slot is {seq, frame header, payload}: the
 * sender fills it and publishes it by storing seq = n+1 with release order;
 * the receiver polls the seq of its next slot with acquire order, so an 8-byte
 * message is one cache line handed between the two cores. Credits return by
 * the receiver storing its consumed count, which the sender reads only when
 * its cached copy says the FIFO is full.
 *
 * Large messages skip the slots: get() reads the sender's buffer directly
 * with process_vm_readv (one copy), when the kernel allows it (checked at
 * connect by reading a canary from the peer).
 *
 * The arena gives node-shared memory by key (shared_get) to the collectives:
 * the first local rank to ask for a key claims a directory entry with a CAS
 * and carves the block; the others find it and wait until it is published.
 */
#include "drv/drv.h"
#include "base/config.h"
#include "mem/mem.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#define HC_SHM_MAGIC 0x68636f6d73686d31ull /* "hcomshm1" */
#define HC_SHM_DIR_ENTRIES 256
#define HC_SHM_SLOT_HDR 40 /* seq (8) + frame header (32) */

/* A directory entry: key 0 = never used, HC_SHM_KEY_FREE = a released block
 * (off/size kept for reuse), anything else = live until `refs` more puts. */
typedef struct {
    uint64_t key;
    uint64_t off; /* from the segment base */
    uint64_t size;
    uint32_t refs;
    uint32_t pad;
} hc_shm_dir_t;
#define HC_SHM_KEY_FREE 1ull

typedef struct {
    uint64_t magic;
    uint32_t local_size, nslots;
    uint64_t slot_size;
    uint64_t fifo_off, fifo_stride;
    uint64_t arena_off, arena_size;
    uint64_t arena_used HC_ALIGNED_CL;
    uint32_t arena_lock; /* held only while the directory changes */
    hc_shm_dir_t dir[HC_SHM_DIR_ENTRIES];
} hc_shm_seg_t;

typedef struct {
    uint64_t tail HC_ALIGNED_CL; /* frames consumed by the receiver */
    uint8_t pad[HC_CACHE_LINE - sizeof(uint64_t)];
    uint8_t slots[] HC_ALIGNED_CL;
} hc_shm_fifo_t;

typedef struct {
    uint64_t seq;
    hc_frame_hdr_t hdr;
    uint8_t payload[];
} hc_shm_slot_t;
_Static_assert(sizeof(hc_shm_slot_t) == HC_SHM_SLOT_HDR, "slot header layout");

/* Frames whose two 64-bit words are zero (every EAGER and CONT frame that is
 * not a fragmented message's first) travel compact: only the first 16 bytes
 * of the header, payload at offset 24, so that up to 40 bytes of payload
 * share the seq flag's cache line. hdr.reserved marks it (the core always
 * sends 0 there). */
#define HC_SHM_COMPACT 0x1u
#define HC_SHM_COMPACT_HDR 16
_Static_assert(offsetof(hc_frame_hdr_t, a) == HC_SHM_COMPACT_HDR, "compact header prefix");

typedef struct {
    uint32_t pid;
    uint32_t local_rank;
    uint64_t canary_addr;
    uint64_t canary;
} hc_shm_addr_t;

typedef struct {
    hc_conn_t base;
    hc_shm_fifo_t *out; /* my slots in the peer's receive FIFO */
    hc_shm_fifo_t *in;  /* the peer's frames to me */
    uint64_t head;      /* frames I sent */
    uint64_t tail_cache;
    uint64_t in_tail;   /* frames I consumed */
    pid_t pid;
    bool connected;
} hc_shm_conn_t;

typedef struct {
    hc_drv_t base;
    hc_mem_region_t *seg_region;
    hc_shm_seg_t *seg;
    int lr, L;
    uint32_t nslots;
    size_t slot_size;
    hc_shm_conn_t *conns; /* by local rank */
    int *active;          /* local ranks with a connection */
    int nactive;
    uint64_t canary;
    struct hc_shm_map *maps; /* peers' memfds mapped here (remote keys) */
    int nmaps;
} hc_drv_shm_t;

/* This driver's knobs (listed by hcomm_info -c with the others). */
static struct {
    int64_t slots;
    size_t slot_size;
    bool cma;
} hc_shm_cfg;

static const hc_config_knob_t hc_shm_knobs[] = {
    HC_KNOB_INT(hc_shm_cfg.slots, "HCOMM_SHM_SLOTS", "64",
                "shm: receive slots per connection (rounded up to a power of two)"),
    HC_KNOB_SIZE(hc_shm_cfg.slot_size, "HCOMM_SHM_SLOT_SIZE", "8K",
                 "shm: bytes per receive slot (eager size)"),
    HC_KNOB_BOOL(hc_shm_cfg.cma, "HCOMM_SHM_CMA", "1",
                 "shm: single-copy large messages with process_vm_readv when the kernel allows it"),
};
HC_CONFIG_KNOBS("shm", hc_shm_knobs)

#define HC_SHM_MAPS 64 /* peers' memfds mapped at once (remote keys) */

/* A peer's memfd mapped here (see "remote keys" below). */
typedef struct hc_shm_map {
    pid_t pid;
    uint64_t ino, size;
    uint8_t *base;
    int refs;
    uint64_t used; /* LRU stamp */
} hc_shm_map_t;

static volatile uint64_t hc_shm_canary_value;

static uint64_t hc_shm_hash(const char *a, const char *b)
{
    uint64_t h = 1469598103934665603ull;
    for (const char *s = a; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    h = (h ^ 0xff) * 1099511628211ull;
    for (const char *s = b; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static hc_shm_fifo_t *hc_shm_fifo(hc_drv_shm_t *s, int from, int to)
{
    return (hc_shm_fifo_t *)((uint8_t *)s->seg + s->seg->fifo_off +
                             ((uint64_t)from * (uint64_t)s->L + (uint64_t)to) * s->seg->fifo_stride);
}

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

static hcomm_status_t hc_drv_shm_open(const hc_drv_env_t *env, hc_drv_t **drv_p)
{
    if (hc_shm_cfg.slots < 2 || hc_shm_cfg.slots > 65536)
        return hc_error(HCOMM_ERR_INVALID, "hcomm_init: HCOMM_SHM_SLOTS=%lld must be in [2, 65536]",
                        (long long)hc_shm_cfg.slots);
    if (hc_shm_cfg.slot_size < 256 || hc_shm_cfg.slot_size > (1u << 24))
        return hc_error(HCOMM_ERR_INVALID,
                        "hcomm_init: HCOMM_SHM_SLOT_SIZE=%zu must be in [256, 16M]",
                        hc_shm_cfg.slot_size);
    hc_drv_shm_t *s = calloc(1, sizeof(*s));
    if (!s)
        return hc_error(HCOMM_ERR_NO_MEMORY, "shm driver");
    s->base.env = env;
    s->lr = env->local_rank;
    s->L = env->local_size;
    /* A power of two, so that slot positions are masks, not divisions, on
     * the data path. */
    s->nslots = 1;
    while (s->nslots < (uint32_t)hc_shm_cfg.slots)
        s->nslots <<= 1;
    s->slot_size = HC_ALIGN_UP(hc_shm_cfg.slot_size, (size_t)HC_CACHE_LINE);
    s->conns = calloc((size_t)s->L, sizeof(*s->conns));
    s->maps = calloc(HC_SHM_MAPS, sizeof(*s->maps));
    s->active = calloc((size_t)s->L, sizeof(int));
    if (!s->conns || !s->active || !s->maps) {
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
    if (lfd < 0)
        return hc_error_errno(HCOMM_ERR_IO, errno, "shm: socket");
    if (bind(lfd, (struct sockaddr *)&sa, salen) != 0 || listen(lfd, 128) != 0) {
        int e = errno;
        close(lfd);
        return hc_error_errno(HCOMM_ERR_IO, e, "shm: cannot listen on the node socket");
    }
    int served = 0;
    hcomm_status_t st = HCOMM_OK;
    while (served < s->L - 1) {
        if (hc_time_sec() > deadline) {
            st = hc_error(HCOMM_ERR_TIMEOUT, "hcomm_init: shm: only %d of %d local ranks fetched "
                                             "the node segment before the deadline",
                          served, s->L - 1);
            break;
        }
        struct pollfd p = {.fd = lfd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0)
            continue;
        int cfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (cfd < 0)
            continue;
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
        struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
                             .msg_controllen = sizeof(cbuf)};
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &s->seg_region->fd, sizeof(int));
        if (sendmsg(cfd, &msg, MSG_NOSIGNAL) == (ssize_t)sizeof(size))
            served++;
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
            return hc_error(HCOMM_ERR_TIMEOUT, "hcomm_init: shm: node leader (rank %d) did not "
                                               "share the node segment before the deadline",
                            env->local_ranks[0]);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return hc_error_errno(HCOMM_ERR_IO, errno, "shm: socket");
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
        struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
                             .msg_controllen = sizeof(cbuf)};
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int segfd = -1;
        if (send(fd, &hello, sizeof(hello), MSG_NOSIGNAL) == (ssize_t)sizeof(hello) &&
            poll(&p, 1, (int)HC_MAX(1.0, (deadline - hc_time_sec()) * 1000)) == 1 &&
            recvmsg(fd, &msg, MSG_CMSG_CLOEXEC) == (ssize_t)sizeof(size)) {
            struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
            if (c && c->cmsg_type == SCM_RIGHTS)
                memcpy(&segfd, CMSG_DATA(c), sizeof(int));
        }
        close(fd);
        if (segfd < 0)
            return hc_error(HCOMM_ERR_BOOTSTRAP, "hcomm_init: shm: the node leader (rank %d) "
                                                 "refused or closed the node socket",
                            env->local_ranks[0]);
        hcomm_status_t st = hc_mem_region_attach(segfd, size, &s->seg_region);
        close(segfd);
        if (st != HCOMM_OK)
            return st;
        s->seg = s->seg_region->base;
        if (s->seg->magic != HC_SHM_MAGIC || s->seg->local_size != (uint32_t)s->L ||
            s->seg->nslots != s->nslots || s->seg->slot_size != s->slot_size)
            return hc_error(HCOMM_ERR_INVALID, "hcomm_init: shm: node segment layout differs "
                                               "between ranks (HCOMM_SHM_* must match)");
        return HCOMM_OK;
    }
}

static hcomm_status_t hc_drv_shm_wireup(hc_drv_t *drv, const void *const *addrs,
                                        const size_t *lens)
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
        if (st != HCOMM_OK)
            return st;
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
    c->base.caps |= HC_CONN_CAP_RKEY_PTR; /* memfd memory: see the remote keys above */
    if (hc_shm_cfg.cma) {
        uint64_t seen = 0;
        struct iovec l = {.iov_base = &seen, .iov_len = sizeof(seen)};
        struct iovec r = {.iov_base = (void *)(uintptr_t)a.canary_addr, .iov_len = sizeof(seen)};
        ssize_t n = process_vm_readv(c->pid, &l, 1, &r, 1, 0);
        if (n == (ssize_t)sizeof(seen) && seen == a.canary) {
            c->base.caps |= HC_CONN_CAP_GET;
            /* Writing needs the same permission; prove it by writing the
             * canary's own value back. */
            struct iovec w = {.iov_base = &seen, .iov_len = sizeof(seen)};
            if (process_vm_writev(c->pid, &w, 1, &r, 1, 0) == (ssize_t)sizeof(seen))
                c->base.caps |= HC_CONN_CAP_WRITE;
        }
        else
            hc_log_info("shm: single-copy reads from rank %d unavailable (%s): large messages "
                        "go through the slots",
                        peer, n < 0 ? strerror(errno) : "canary mismatch");
    }
    if (!c->connected) {
        c->connected = true;
        s->active[s->nactive++] = (int)a.local_rank;
    }
    *conn_p = &c->base;
    return HCOMM_OK;
}

/* ---- data path ---------------------------------------------------------------- */

static hcomm_status_t hc_drv_shm_put(hc_conn_t *conn, const hc_frame_hdr_t *hdr,
                                     const void *payload, void *cookie)
{
    (void)cookie;
    hc_shm_conn_t *c = (hc_shm_conn_t *)conn;
    hc_drv_shm_t *s = (hc_drv_shm_t *)conn->drv;
    if (HC_UNLIKELY(hdr->len > conn->max_frame))
        return hc_error(HCOMM_ERR_INVALID, "shm put: a %u-byte frame exceeds max_frame %zu",
                        hdr->len, conn->max_frame);
    if (HC_UNLIKELY(c->head - c->tail_cache >= s->nslots)) {
        c->tail_cache = __atomic_load_n(&c->out->tail, __ATOMIC_ACQUIRE);
        if (c->head - c->tail_cache >= s->nslots)
            return HCOMM_ERR_AGAIN;
    }
    hc_shm_slot_t *slot =
        (hc_shm_slot_t *)(c->out->slots + (c->head & (s->nslots - 1)) * s->slot_size);
    if (hdr->a == 0 && hdr->b == 0) {
        uint8_t *p = (uint8_t *)&slot->hdr;
        memcpy(p, hdr, HC_SHM_COMPACT_HDR);
        slot->hdr.reserved = HC_SHM_COMPACT;
        if (hdr->len)
            memcpy(p + HC_SHM_COMPACT_HDR, payload, hdr->len);
    } else {
        slot->hdr = *hdr;
        slot->hdr.reserved = 0;
        if (hdr->len)
            memcpy(slot->payload, payload, hdr->len);
    }
    /* Publish: the receiver's acquire load of seq orders header and payload. */
    __atomic_store_n(&slot->seq, c->head + 1, __ATOMIC_RELEASE);
    c->head++;
    return HCOMM_OK;
}

/* Single-copy transfer with the peer process (CMA), looping over partial
 * transfers: process_vm_readv for get, process_vm_writev for write. */
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

static hcomm_status_t hc_shm_cma(hc_conn_t *conn, void *local, uint64_t raddr, size_t len,
                                 bool write)
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

/* CMA needs no keys and completes at once. */
static hcomm_status_t hc_drv_shm_get(hc_conn_t *conn, const hc_rma_t *rma)
{
    return hc_shm_cma(conn, rma->local, rma->remote_addr, rma->len, false);
}

static hcomm_status_t hc_drv_shm_write(hc_conn_t *conn, const hc_rma_t *rma)
{
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


struct hc_rkey {
    hc_shm_map_t *map; /* NULL: no mapping (CMA only) */
    uint64_t off, addr;
};

static hcomm_status_t hc_drv_shm_rkey_pack(hc_drv_t *drv, uint64_t key, const hc_mem_desc_t *desc,
                                           void *buf, size_t *len_p)
{
    (void)drv;
    (void)key;
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
        if (!m->refs && (!victim || m->used < victim->used))
            victim = m;
    }
    if (s->nmaps == HC_SHM_MAPS && !victim)
        return NULL; /* every mapping is in use: the caller does without */
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pid, (int)w->fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    struct stat st;
    void *base = MAP_FAILED;
    if (fstat(fd, &st) == 0 && (uint64_t)st.st_ino == w->ino &&
        (uint64_t)st.st_size >= w->file_size)
        base = mmap(NULL, w->file_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (base == MAP_FAILED)
        return NULL;
    hc_shm_map_t *m = s->nmaps < HC_SHM_MAPS ? &s->maps[s->nmaps++] : victim;
    if (m == victim)
        munmap(m->base, m->size);
    *m = (hc_shm_map_t){.pid = pid, .ino = w->ino, .size = w->file_size, .base = base,
                        .used = ++clock};
    return m;
}

static hcomm_status_t hc_drv_shm_rkey_unpack(hc_conn_t *conn, const void *buf, size_t len,
                                             hc_rkey_t **rkey_p)
{
    hc_shm_conn_t *c = (hc_shm_conn_t *)conn;
    hc_drv_shm_t *s = (hc_drv_shm_t *)conn->drv;
    *rkey_p = NULL;
    if (len == 0)
        return HCOMM_OK;
    hc_shm_rkey_wire_t w;
    if (len != sizeof(w))
        return hc_error(HCOMM_ERR_INVALID, "shm: a %zu-byte key from rank %d (expected %zu)", len,
                        conn->peer, sizeof(w));
    memcpy(&w, buf, sizeof(w));
    if (w.magic != HC_SHM_RKEY_MAGIC || w.off > w.file_size)
        return hc_error(HCOMM_ERR_INVALID, "shm: a malformed key from rank %d", conn->peer);
    hc_rkey_t *k = calloc(1, sizeof(*k));
    if (!k)
        return hc_error(HCOMM_ERR_NO_MEMORY, "shm: remote key of rank %d", conn->peer);
    k->off = w.off;
    k->addr = w.addr;
    k->map = hc_shm_map_get(s, c->pid, &w);
    if (k->map)
        k->map->refs++;
    *rkey_p = k;
    return HCOMM_OK;
}

static void hc_drv_shm_rkey_release(hc_conn_t *conn, hc_rkey_t *rkey)
{
    (void)conn;
    if (!rkey)
        return;
    if (rkey->map)
        rkey->map->refs--;
    free(rkey);
}

static hcomm_status_t hc_drv_shm_rkey_ptr(hc_conn_t *conn, const hc_rkey_t *rkey,
                                          uint64_t remote_addr, size_t len, void **ptr_p)
{
    *ptr_p = NULL;
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

static int hc_drv_shm_progress(hc_drv_t *drv)
{
    hc_drv_shm_t *s = (hc_drv_shm_t *)drv;
    const hc_drv_env_t *env = drv->env;
    int events = 0;
    for (int i = 0; i < s->nactive; i++) {
        hc_shm_conn_t *c = &s->conns[s->active[i]];
        for (int budget = 0; budget < 16; budget++) {
            hc_shm_slot_t *slot =
                (hc_shm_slot_t *)(c->in->slots + (c->in_tail & (s->nslots - 1)) * s->slot_size);
            if (__atomic_load_n(&slot->seq, __ATOMIC_ACQUIRE) != c->in_tail + 1)
                break;
            if (slot->hdr.reserved & HC_SHM_COMPACT) {
                hc_frame_hdr_t h;
                memcpy(&h, &slot->hdr, HC_SHM_COMPACT_HDR);
                h.reserved = 0;
                h.a = h.b = 0;
                env->deliver(env->core, &c->base, &h,
                             (const uint8_t *)&slot->hdr + HC_SHM_COMPACT_HDR);
            } else {
                env->deliver(env->core, &c->base, &slot->hdr, slot->payload);
            }
            c->in_tail++;
            __atomic_store_n(&c->in->tail, c->in_tail, __ATOMIC_RELEASE);
            events++;
        }
    }
    return events;
}

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
        if (hc_time_sec() > deadline)
            return false;
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
static void *hc_drv_shm_shared_get(hc_drv_t *drv, uint64_t key, size_t size, int users)
{
    hc_drv_shm_t *s = (hc_drv_shm_t *)drv;
    hc_shm_seg_t *g = s->seg;
    if (!g || key <= HC_SHM_KEY_FREE)
        return NULL;
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
        if (e->key == 0 && !empty)
            empty = e;
    }
    void *base = NULL;
    if (hit) {
        if (hit->size >= size)
            base = (uint8_t *)g + hit->off;
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

static void hc_drv_shm_shared_put(hc_drv_t *drv, uint64_t key)
{
    hc_drv_shm_t *s = (hc_drv_shm_t *)drv;
    hc_shm_seg_t *g = s->seg;
    if (!g || key <= HC_SHM_KEY_FREE || !hc_shm_arena_lock(g))
        return;
    for (int i = 0; i < HC_SHM_DIR_ENTRIES; i++) {
        hc_shm_dir_t *e = &g->dir[i];
        if (e->key != key)
            continue;
        if (e->refs > 0 && --e->refs == 0)
            e->key = HC_SHM_KEY_FREE;
        break;
    }
    hc_shm_arena_unlock(g);
}

static void hc_drv_shm_close(hc_drv_t *drv)
{
    hc_drv_shm_t *s = (hc_drv_shm_t *)drv;
    for (int i = 0; i < s->nmaps; i++)
        munmap(s->maps[i].base, s->maps[i].size);
    free(s->maps);
    if (s->seg_region)
        hc_mem_region_destroy(s->seg_region);
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
    .get = hc_drv_shm_get,
    .write = hc_drv_shm_write,
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
