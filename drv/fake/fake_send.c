/*
 * fake: sending (put, queues, lanes), memory keys and RMA (fake.h has the
 * design).
 */
#include "drv/fake/fake.h"

#include <sys/mman.h>

/* ---- sending ---------------------------------------------------------------------------- */

/* Opens the sending socket to c's peer and writes the hello. Errors are
 * left in c->err for progress: never a failure from inside put. */
void hc_fake_out_start(hc_fake_conn_t *c)
{
    hc_fake_drv_t *d = c->drv;
    hc_fake_activate(c);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        c->err = errno;
        return;
    }
    struct sockaddr_un sa;
    socklen_t salen = hc_fake_sockaddr(d->key_hash, c->base.peer, &sa);
    if (connect(fd, (struct sockaddr *)&sa, salen) != 0) {
        int e = errno;
        close(fd);
        if (e == EAGAIN || e == EINTR) { /* the peer's backlog is full: retry from progress */
            if (c->out_state != HC_FAKE_OUT_RETRY) c->deadline = hc_time_ns() + HC_FAKE_CONNECT_NS;
            c->out_state = HC_FAKE_OUT_RETRY;
            return;
        }
        c->err = e;
        return;
    }
    hc_fake_hello_t h = {.magic = HC_FAKE_MAGIC,
                         .src_rank = d->env->rank,
                         .dst_rank = c->base.peer,
                         .pid = d->me.pid,
                         .src_instance = d->me.instance,
                         .dst_instance = c->addr.instance,
                         .key = d->key_hash};
    /* A fresh socket always takes one small datagram. */
    if (send(fd, &h, sizeof(h), MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof(h)) {
        c->err = errno ? errno : EIO;
        close(fd);
        return;
    }
    c->out_fd = fd;
    c->out_state = HC_FAKE_OUT_UP;
    /* Only to hear the peer close: nothing is ever read from this socket. */
    hc_fake_ep(d, EPOLL_CTL_ADD, fd, EPOLLIN | EPOLLRDHUP, &c->out_ep);
}

/* A core frame went out on c's socket. */
static void hc_fake_sent(hc_fake_conn_t *c)
{
    c->sent++;
    if (HC_UNLIKELY(c->drv->drop_after && c->sent == c->drv->drop_after)) c->drop_now = true;
}

/* Writes queued frames while the socket takes them; returns how many. With
 * the lane shuffle a lane may be held back for this pass (its later frames
 * with it) while the frames of other lanes behind it go; on the way out
 * (drain) nothing is held. */
int hc_fake_flush_lanes(hc_fake_conn_t *c, bool shuffle)
{
    hc_fake_drv_t *d = c->drv;
    int n = 0;
    uint32_t held = 0;
    hc_fake_tx_t *prev = NULL;
    bool passed = false; /* a frame of a held lane is still queued before this one */
    while (c->out_state == HC_FAKE_OUT_UP && !c->err && !c->drop_now && !c->failed) {
        hc_fake_tx_t *t = prev ? prev->next : c->txq.head;
        if (!t) break;
        uint32_t bit = 1u << hc_fake_lane(t);
        if (shuffle && !(held & bit) && hc_fake_roll(d, d->pct_shuffle)) held |= bit;
        if (held & bit) {
            prev = t;
            passed = true;
            continue;
        }
        if (hc_fake_send(c->out_fd, &t->hdr, t->payload) < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK) c->err = errno;
            break;
        }
        hc_fake_txq_take(c, prev, t);
        if (passed) d->n_overtaken++;
        c->q_bytes -= HC_FAKE_HDR + t->hdr.len;
        if (t->copy) c->q_copy -= t->hdr.len;
        hc_fake_sent(c);
        n++;
        if (t->inprog) {
            t->delay = (int)(hc_fake_rand(d) % HC_FAKE_DONE_DELAY);
            hc_fake_q_push(&c->done, t);
        } else {
            hc_fake_tx_free(t);
        }
    }
    if (shuffle && n == 0 && held && c->txq.head)
        return hc_fake_flush_lanes(c, false); /* every lane held: nobody would ever go */
    return n;
}

int hc_fake_flush(hc_fake_conn_t *c)
{
    return hc_fake_flush_lanes(c, c->drv->pct_shuffle > 0);
}

hcomm_status_t hc_fake_put(hc_conn_t *conn, const hc_frame_hdr_t *hdr, const void *payload,
                           void *cookie)
{
    hc_fake_conn_t *c = (hc_fake_conn_t *)conn;
    hc_fake_drv_t *d = c->drv;
    if (HC_UNLIKELY(c->failed))
        return hc_error(HCOMM_ERR_PEER_FAILED, "fake: connection to %s failed", c->name);
    size_t len = hdr->len, total = HC_FAKE_HDR + len;
    if (HC_UNLIKELY(len > HC_FAKE_MAX_FRAME))
        return hc_error(HCOMM_ERR_INVALID,
                        "fake put to %s: frame of %zu bytes exceeds max_frame %u", c->name, len,
                        HC_FAKE_MAX_FRAME);
    if (HC_UNLIKELY(hdr->type >= HC_FRAME_DRIVER))
        return hc_error(HCOMM_ERR_INVALID, "fake put to %s: frame type %u is reserved for drivers",
                        c->name, hdr->type);
    if (HC_UNLIKELY(hc_fake_cfg.handshake) && c->hs_state != 2) {
        if (c->hs_state == 0) {
            /* HELLO {magic, token}; the peer's ep_recv answers ACK {magic, token}. */
            uint64_t blob[3] = {0x6f6c6c6568ull, 0, hc_fake_mix(d->seed ^ (uint64_t)conn->peer)};
            c->hs_token = blob[2];
            const hc_drv_env_t *env = d->env;
            hcomm_status_t st = env->ep_send(env->core, &d->base, conn->peer, blob, sizeof(blob));
            if (st == HCOMM_OK)
                c->hs_state = 1;
            else if (st != HCOMM_ERR_AGAIN)
                return st;
        }
        return HCOMM_ERR_AGAIN; /* the core queues the frame and retries */
    }
    d->n_put++;
    if (hc_fake_roll(d, d->pct_again)) {
        d->n_again++;
        return HCOMM_ERR_AGAIN;
    }
    if (c->out_state == HC_FAKE_OUT_NONE && !c->err) hc_fake_out_start(c);
    bool async = cookie && hc_fake_roll(d, d->pct_async);
    bool user_data =
        hdr->type == HC_FRAME_EAGER || hdr->type == HC_FRAME_CONT || hdr->type == HC_FRAME_DATA;
    /* Lane shuffle: a frame that can be kept may wait so that later frames
     * of other lanes pass it; only its own lane's queued frames hold it. */
    bool ahead =
        d->pct_shuffle ? c->lane_q[hdr->lane & (HC_FRAME_LANES - 1)] != 0 : c->txq.head != NULL;
    if (d->pct_shuffle && (cookie || !user_data) && hc_fake_roll(d, d->pct_shuffle)) async = true;
    if (!async && !ahead && c->out_state == HC_FAKE_OUT_UP && !c->err && !c->drop_now) {
        if (c->txq.head) d->n_overtaken++;
        if (hc_fake_send(c->out_fd, hdr, payload) >= 0) {
            hc_fake_sent(c);
            if (HC_UNLIKELY(c->drop_now)) hc_fake_activate(c); /* progress drops it */
            return HCOMM_OK;
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            c->err = errno; /* failed by progress; the frame is queued and failed with it */
    }
    if (!cookie && user_data)
        return HCOMM_ERR_AGAIN; /* not kept past the call: the core takes its request path */
    if (c->txq.head && c->q_bytes + total > HC_FAKE_QUEUE_BYTES) return HCOMM_ERR_AGAIN;
    if (!cookie && c->q_copy + len > HC_FAKE_QUEUE_COPY) return HCOMM_ERR_AGAIN;
    hc_fake_tx_t *t = calloc(1, sizeof(*t));
    if (!t) return hc_error(HCOMM_ERR_NO_MEMORY, "fake put to %s: queue entry", c->name);
    t->hdr = *hdr;
    t->cookie = cookie;
    if (cookie) {
        t->payload = payload;
        t->inprog = true;
    } else if (len) {
        t->copy = malloc(len);
        if (!t->copy) {
            free(t);
            return hc_error(HCOMM_ERR_NO_MEMORY, "fake put to %s: %zu-byte copy", c->name, len);
        }
        memcpy(t->copy, payload, len);
        t->payload = t->copy;
        c->q_copy += len;
    }
    c->q_bytes += total;
    hc_fake_txq_push(c, t);
    hc_fake_activate(c);
    if (async) d->n_async++;
    return cookie ? HCOMM_IN_PROGRESS : HCOMM_OK;
}

/* ---- memory keys ------------------------------------------------------------------------- */

static hc_fake_reg_t *hc_fake_reg_find(hc_fake_drv_t *d, uint64_t key)
{
    uint64_t slot = key & ((1ull << HC_FAKE_SLOT_BITS) - 1);
    if (key == 0 || slot >= HC_FAKE_REG_SLOTS || d->regs[slot].handle != key) return NULL;
    return &d->regs[slot];
}

/* Device memory: a second mapping of its dmabuf fd, as a NIC's DMA. */
static hcomm_status_t hc_fake_map_dmabuf(const hc_mem_desc_t *desc, hc_fake_reg_t *reg)
{
    if (desc->mem_type != HC_MEM_DEVICE || desc->dmabuf_fd < 0)
        return hc_error(HCOMM_ERR_UNSUPPORTED,
                        "fake mem_reg: %s memory at %p without a dmabuf fd cannot be registered",
                        hc_mem_type_name(desc->mem_type), desc->addr);
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t off = desc->dmabuf_offset & ~(page - 1), skip = desc->dmabuf_offset - off;
    size_t map_len = HC_ALIGN_UP(desc->len + skip, page);
    void *m = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                   desc->dmabuf_fd, (off_t)off);
    if (m == MAP_FAILED)
        return hc_error_errno(HCOMM_ERR_NO_MEMORY, errno,
                              "fake mem_reg: mmap of dmabuf fd %d (%zu bytes at offset %llu) for "
                              "device memory at %p",
                              desc->dmabuf_fd, map_len, (unsigned long long)off, desc->addr);
    reg->map = (uint64_t)(uintptr_t)m;
    reg->map_len = map_len;
    reg->dma = reg->map + skip;
    return HCOMM_OK;
}

hcomm_status_t hc_fake_mem_reg(hc_drv_t *drv, const hc_mem_desc_t *desc, uint64_t *key_p)
{
    hc_fake_drv_t *d = (hc_fake_drv_t *)drv;
    if (!desc || !desc->addr || desc->len == 0)
        return hc_error(HCOMM_ERR_INVALID, "fake mem_reg: empty range (%p, %zu bytes)",
                        desc ? desc->addr : NULL, desc ? desc->len : 0);
    if (d->nfree == 0)
        return hc_error(HCOMM_ERR_NO_MEMORY, "fake mem_reg: all %u registrations in use",
                        HC_FAKE_REG_SLOTS);
    hc_fake_reg_t reg = {.base = (uint64_t)(uintptr_t)desc->addr,
                         .len = desc->len,
                         .dma = (uint64_t)(uintptr_t)desc->addr};
    if (desc->mem_type != HC_MEM_HOST) {
        hcomm_status_t st = hc_fake_map_dmabuf(desc, &reg);
        if (st != HCOMM_OK) return st;
        d->n_dev_regs++;
    }
    uint32_t slot = d->reg_free[--d->nfree];
    uint64_t handle = (hc_fake_mix(++d->reg_gen) << HC_FAKE_SLOT_BITS) | slot;
    if ((handle >> HC_FAKE_SLOT_BITS) == 0) handle |= 1ull << 63; /* never 0, whatever the slot */
    reg.handle = handle;
    d->regs[slot] = reg;
    *key_p = handle;
    return HCOMM_OK;
}

void hc_fake_mem_dereg(hc_drv_t *drv, uint64_t key)
{
    hc_fake_drv_t *d = (hc_fake_drv_t *)drv;
    hc_fake_reg_t *r = hc_fake_reg_find(d, key);
    if (!r) {
        hc_log_warn("fake mem_dereg: key %016llx is not a live registration (deregistered twice?)",
                    (unsigned long long)key);
        return;
    }
    for (int i = 0; i < d->nrma; i++) {
        const hc_fake_rma_op_t *op = d->rma[i];
        if (op->rma.lkey == key)
            hc_log_warn("fake mem_dereg: key %016llx still used by a %s to %s in flight "
                        "(deregistered before rma_done)",
                        (unsigned long long)key, op->write ? "write" : "get", op->conn->name);
    }
    __atomic_store_n(&r->handle, 0, __ATOMIC_RELEASE);
    if (r->map) munmap((void *)(uintptr_t)r->map, r->map_len);
    r->map = 0;
    d->reg_free[d->nfree++] = (uint32_t)(r - d->regs);
}

hcomm_status_t hc_fake_rkey_pack(hc_drv_t *drv, uint64_t key, const hc_mem_desc_t *desc, void *buf,
                                 size_t *len_p)
{
    hc_fake_drv_t *d = (hc_fake_drv_t *)drv;
    const hc_fake_reg_t *r = hc_fake_reg_find(d, key);
    if (!r)
        return hc_error(HCOMM_ERR_INVALID, "fake rkey_pack: key %016llx is not a live registration",
                        (unsigned long long)key);
    uint64_t a = (uint64_t)(uintptr_t)desc->addr;
    if (a < r->base || desc->len > r->len || a - r->base > r->len - desc->len)
        return hc_error(HCOMM_ERR_INVALID,
                        "fake rkey_pack: [%p, +%zu) is outside key %016llx ([%#llx, +%llu))",
                        desc->addr, desc->len, (unsigned long long)key, (unsigned long long)r->base,
                        (unsigned long long)r->len);
    if (*len_p < sizeof(hc_fake_rkey_wire_t))
        return hc_error(HCOMM_ERR_INVALID, "fake rkey_pack: %zu bytes of room, need %zu", *len_p,
                        sizeof(hc_fake_rkey_wire_t));
    hc_fake_rkey_wire_t w = {
        .magic = HC_FAKE_RKEY_MAGIC, .pid = d->me.pid, .handle = key, .base = a, .len = desc->len};
    memcpy(buf, &w, sizeof(w));
    *len_p = sizeof(w);
    return HCOMM_OK;
}

hcomm_status_t hc_fake_rkey_unpack(hc_conn_t *conn, const void *buf, size_t len, hc_rkey_t **rkey_p)
{
    hc_fake_conn_t *c = (hc_fake_conn_t *)conn;
    hc_fake_rkey_wire_t w;
    if (len == 0) {
        *rkey_p = NULL; /* get/write then fail, naming the missing key */
        return HCOMM_OK;
    }
    if (len != sizeof(w))
        return hc_error(HCOMM_ERR_INVALID, "fake rkey_unpack: %zu-byte key from %s, expected %zu",
                        len, c->name, sizeof(w));
    memcpy(&w, buf, sizeof(w));
    if (w.magic != HC_FAKE_RKEY_MAGIC || w.handle == 0)
        return hc_error(
            HCOMM_ERR_INVALID,
            "fake rkey_unpack: key from %s is not a fake rkey (magic %08x, handle %016llx)",
            c->name, w.magic, (unsigned long long)w.handle);
    if (w.pid != c->addr.pid)
        return hc_error(HCOMM_ERR_INVALID,
                        "fake rkey_unpack: key %016llx belongs to pid %u, not to %s",
                        (unsigned long long)w.handle, w.pid, c->name);
    hc_rkey_t *k = malloc(sizeof(*k));
    if (!k) return hc_error(HCOMM_ERR_NO_MEMORY, "fake rkey_unpack");
    k->w = w;
    *rkey_p = k;
    return HCOMM_OK;
}

void hc_fake_rkey_release(hc_conn_t *conn, hc_rkey_t *rkey)
{
    (void)conn;
    free(rkey);
}

hcomm_status_t hc_fake_rkey_ptr(hc_conn_t *conn, const hc_rkey_t *rkey, uint64_t remote_addr,
                                size_t len, void **ptr_p)
{
    (void)rkey;
    (void)remote_addr;
    (void)len;
    *ptr_p = NULL;
    return hc_error(HCOMM_ERR_UNSUPPORTED, "fake: %s's memory cannot be mapped here (no rkey_ptr)",
                    ((hc_fake_conn_t *)conn)->name);
}

/* ---- RMA ----------------------------------------------------------------------------------- */

/* Every key check of one transfer; the message names the bad key. */
static hcomm_status_t hc_fake_rma_check(hc_fake_conn_t *c, const hc_rma_t *rma,
                                        const hc_rkey_t *rkey, bool write, uint64_t *ldma_p,
                                        uint64_t *rdma_p)
{
    hc_fake_drv_t *d = c->drv;
    const char *what = write ? "write to" : "get from";
    uint64_t local = (uint64_t)(uintptr_t)rma->local, remote = rma->remote_addr;
    if (!rma->local && rma->len)
        return hc_error(HCOMM_ERR_INVALID, "fake %s %s: local buffer is NULL", what, c->name);
    const hc_fake_reg_t *r = hc_fake_reg_find(d, rma->lkey);
    if (!r)
        return hc_error(HCOMM_ERR_INVALID,
                        "fake %s %s: lkey %016llx is not a live registration (local %p, %zu bytes: "
                        "not registered?)",
                        what, c->name, (unsigned long long)rma->lkey, rma->local, rma->len);
    if (local < r->base || rma->len > r->len || local - r->base > r->len - rma->len)
        return hc_error(HCOMM_ERR_INVALID,
                        "fake %s %s: lkey %016llx covers [%#llx, +%llu), not local %p+%zu", what,
                        c->name, (unsigned long long)rma->lkey, (unsigned long long)r->base,
                        (unsigned long long)r->len, rma->local, rma->len);
    if (!rkey)
        return hc_error(HCOMM_ERR_INVALID,
                        "fake %s %s: no rkey for remote %#llx+%zu (the peer's key was not sent or "
                        "not unpacked)",
                        what, c->name, (unsigned long long)remote, rma->len);
    const hc_fake_rkey_wire_t *w = &rkey->w;
    if (remote < w->base || rma->len > w->len || remote - w->base > w->len - rma->len)
        return hc_error(HCOMM_ERR_INVALID,
                        "fake %s %s: rkey %016llx covers [%#llx, +%llu), not remote %#llx+%zu",
                        what, c->name, (unsigned long long)w->handle, (unsigned long long)w->base,
                        (unsigned long long)w->len, (unsigned long long)remote, rma->len);
    /* The owner must still hold the registration: read its table entry. */
    uint64_t slot = w->handle & ((1ull << HC_FAKE_SLOT_BITS) - 1);
    hc_fake_reg_t theirs = {0};
    struct iovec l = {.iov_base = &theirs, .iov_len = sizeof(theirs)};
    struct iovec rv = {.iov_base = (void *)(uintptr_t)(c->addr.regs + slot * sizeof(theirs)),
                       .iov_len = sizeof(theirs)};
    if (slot >= c->addr.nregs)
        return hc_error(HCOMM_ERR_INVALID, "fake %s %s: rkey %016llx names no registration slot",
                        what, c->name, (unsigned long long)w->handle);
    if (process_vm_readv((pid_t)c->addr.pid, &l, 1, &rv, 1, 0) != (ssize_t)sizeof(theirs))
        return hc_error_errno(HCOMM_ERR_IO, errno, "fake %s %s: cannot read its registration table",
                              what, c->name);
    if (theirs.handle != w->handle || w->base < theirs.base ||
        w->base - theirs.base + w->len > theirs.len)
        return hc_error(HCOMM_ERR_INVALID,
                        "fake %s %s: rkey %016llx is no longer registered there (deregistered "
                        "before the transfer)",
                        what, c->name, (unsigned long long)w->handle);
    /* Where the bytes are reached: device memory through the dmabuf mappings. */
    *ldma_p = r->dma + (local - r->base);
    *rdma_p = theirs.dma + (remote - theirs.base);
    return HCOMM_OK;
}

static hcomm_status_t hc_fake_rma_move(hc_fake_conn_t *c, const hc_rma_t *rma, bool write,
                                       uint64_t ldma, uint64_t rdma)
{
    size_t done = 0;
    while (done < rma->len) {
        struct iovec l = {.iov_base = (char *)(uintptr_t)ldma + done, .iov_len = rma->len - done};
        struct iovec r = {.iov_base = (void *)(uintptr_t)(rdma + done), .iov_len = rma->len - done};
        ssize_t n = write ? process_vm_writev((pid_t)c->addr.pid, &l, 1, &r, 1, 0)
                          : process_vm_readv((pid_t)c->addr.pid, &l, 1, &r, 1, 0);
        if (n <= 0)
            return hc_error_errno(HCOMM_ERR_IO, n < 0 ? errno : EIO, "fake: process_vm_%s %s",
                                  write ? "writev to" : "readv from", c->name);
        done += (size_t)n;
    }
    return HCOMM_OK;
}

static hcomm_status_t hc_fake_rma(hc_conn_t *conn, const hc_rma_t *rma, bool write)
{
    hc_fake_conn_t *c = (hc_fake_conn_t *)conn;
    hc_fake_drv_t *d = c->drv;
    if (HC_UNLIKELY(c->failed))
        return hc_error(HCOMM_ERR_PEER_FAILED, "fake: connection to %s failed", c->name);
    uint64_t ldma = 0, rdma = 0;
    hcomm_status_t st = hc_fake_rma_check(c, rma, rma->rkey, write, &ldma, &rdma);
    if (st != HCOMM_OK) return st;
    d->n_rma++;
    if (rma->cookie && hc_fake_roll(d, d->pct_rma_async)) {
        if (d->nrma == HC_FAKE_RMA_MAX) return HCOMM_ERR_AGAIN;
        hc_fake_rma_op_t *op = calloc(1, sizeof(*op));
        if (!op) return hc_error(HCOMM_ERR_NO_MEMORY, "fake: RMA to %s", c->name);
        op->conn = c;
        op->rma = *rma;
        op->write = write;
        op->rkey = *rma->rkey;
        op->rma.rkey = &op->rkey;
        d->rma[d->nrma++] = op;
        d->n_rma_async++;
        return HCOMM_IN_PROGRESS;
    }
    return hc_fake_rma_move(c, rma, write, ldma, rdma);
}

hcomm_status_t hc_fake_get(hc_conn_t *conn, const hc_rma_t *rma)
{
    return hc_fake_rma(conn, rma, false);
}

hcomm_status_t hc_fake_write(hc_conn_t *conn, const hc_rma_t *rma)
{
    return hc_fake_rma(conn, rma, true);
}

/* Executes about half of the asynchronous RMAs, in random order. */
int hc_fake_rma_progress(hc_fake_drv_t *d)
{
    int n = 0;
    for (int budget = d->nrma; budget > 0 && d->nrma > 0; budget--) {
        int i = (int)(hc_fake_rand(d) % (uint64_t)d->nrma);
        if (hc_fake_rand(d) & 1) continue;
        hc_fake_rma_op_t *op = d->rma[i];
        d->rma[i] = d->rma[--d->nrma];
        /* Checked again: the core must keep both registrations until rma_done. */
        uint64_t ldma = 0, rdma = 0;
        hcomm_status_t st =
            hc_fake_rma_check(op->conn, &op->rma, &op->rkey, op->write, &ldma, &rdma);
        if (st == HCOMM_OK) st = hc_fake_rma_move(op->conn, &op->rma, op->write, ldma, rdma);
        if (st != HCOMM_OK) hc_log_warn("%s", hc_error_last());
        d->env->rma_done(d->env->core, &op->conn->base, op->rma.cookie, st);
        free(op);
        n++;
    }
    return n;
}
