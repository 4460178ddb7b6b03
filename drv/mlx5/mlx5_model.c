/*
 * mlx5 model (mlx5_model.h): a ConnectX NIC's queues in software.
 *
 * The segment: one memfd per process (kept open until close, so that a peer
 * opens /proc/PID/fd/N and maps it MAP_SHARED), HC_M5_SEG_BYTES of virtual
 * space touched lazily:
 *   header      magic, version, layout size, pid, memfd number, nonce, the
 *               address the owner maps it at (the liveness probe reads the
 *               header there through process_vm_readv)
 *   QP table    HC_M5_MAX_QP entries (qpn = index + 1): state, generation,
 *               CQ, ring offsets, the RQ's consumed index (peers consume
 *               receives, under the lock of the QP's CQ)
 *   CQ table    HC_M5_MAX_CQ entries (cqn = index + 1): a process-shared
 *               robust mutex over the producer index, ring offsets
 *   key table   HC_M5_MAX_KEY entries (mkey = index << 8 | variant; index 0
 *               unused; dereg bumps the variant)
 *   heap        rings and doorbell records (SQ, RQ, CQ, dbrecs, the fake
 *               BlueFlame register): a bump allocator; freed blocks are only
 *               reused once the bump space is exhausted (a peer that still
 *               looks at a destroyed queue sees stale, not reused, memory)
 * The model id (16 bytes): pid (4, little endian), memfd number (4), nonce
 * (8), checked against the header when a peer maps the segment.
 *
 * Choices the header leaves open (drv/mlx5's data path agrees with them):
 *   - SQ: the producer index is the low 16 bits of be32 dbrec[MLX5_SND_DBR]
 *     in WQEBBs; the WQE index in a control segment (bits 8..23 of
 *     opmod_idx_opcode) must equal the 16-bit WQEBB index the WQE starts at,
 *     its qpn (upper 24 bits of qpn_ds) the QP's; ds 0, an unknown opcode, a
 *     segment past ds, a WQE running past the doorbell record: a bad WQE
 *     (LOCAL_QP_OP_ERR). Several data segments (a gather list) and inline
 *     segments may follow; a data segment with byte_count 0 carries nothing
 *     (its lkey is not checked) and a zero-length transfer checks no key.
 *   - RQ: one struct mlx5_wqe_data_seg per receive (stride 16); receives
 *     posted = the low 16 bits of be32 dbrec[MLX5_RCV_DBR].
 *   - CQ: dbrec[0] (set_ci) is read as a 24-bit consumer index; overrun when
 *     producer - consumer >= entries. cq_uar is NULL (no arming).
 *   - Requester CQEs (MLX5_CQE_REQ): sop_drop_qpn = be32(opcode << 24 | qpn)
 *     as the hardware writes it (the WQE's opcode in the top byte: mask the
 *     qpn with 0xffffff), wqe_counter = be16(WQE index), byte_cnt =
 *     be32(length) for READ, 0 otherwise.
 *   - Responder CQEs: sop_drop_qpn = be32(responder qpn), flags_rqpn =
 *     be32(requester qpn), wqe_counter = be16(RQ index, 16-bit counter),
 *     byte_cnt = be32(length), imm_inval_pkey = the WQE's imm as is (0 for
 *     SEND).
 *   - Error CQEs: vendor_err_synd = 0x80 | syndrome when the model found the
 *     error, 0xc0 | syndrome when it was injected (HCOMM_MLX5_MODEL_FAULT);
 *     s_wqe_opcode_qpn = be32(WQE opcode << 24 | qpn) (opcode 0 for RQ
 *     flushes).
 *   - Target QP in INIT (not connected yet): the WQE waits, as RC retries,
 *     for HC_M5_RETRY_NS, then TRANSPORT_RETRY_EXC_ERR. Target QP in ERROR or
 *     destroyed: TRANSPORT_RETRY_EXC_ERR at once. No receive posted (RNR):
 *     waits for ever (rnr_retry 7), unless the target process is gone.
 *   - A CQ overrun at the target (a responder CQE that does not fit) moves the
 *     target QP to error; the requester's WQE still completes.
 *   - rnr_waits counts WQEs that had to wait (no receive, or the target QP
 *     not connected yet), once per WQE.
 *
 * Threads: the driver calls a model from one thread; the only lock is each
 * CQ's robust mutex (peers write responder CQEs into it).
 * Permissions: peers open /proc/PID/fd/N and use process_vm_writev/readv,
 * which need ptrace access (same user; under Yama ptrace_scope 1 the model
 * names any process its tracer, prctl PR_SET_PTRACER_ANY).
 */
#include "drv/mlx5/mlx5_model_int.h"

const char *const hc_m5_fault_names[5] = {"remote_access", "local_prot", "length", "retry",
                                          "flush"};

const char *hc_m5_op_name(uint8_t op)
{
    switch (op) {
    case MLX5_OPCODE_RDMA_WRITE:
        return "RDMA WRITE";
    case MLX5_OPCODE_RDMA_WRITE_IMM:
        return "RDMA WRITE WITH IMMEDIATE";
    case MLX5_OPCODE_SEND:
        return "SEND";
    case MLX5_OPCODE_SEND_IMM:
        return "SEND WITH IMMEDIATE";
    case MLX5_OPCODE_RDMA_READ:
        return "RDMA READ";
    }
    return "unknown opcode";
}

const char *hc_m5_state_name(uint32_t st)
{
    static const char *const names[] = {"free", "INIT", "RTS", "ERROR", "destroyed"};
    return st < HC_ARRAY_SIZE(names) ? names[st] : "corrupt";
}

void hc_m5_set_why(hc_mlx5_model_t *m, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->why, sizeof(m->why), fmt, ap);
    va_end(ap);
}

/* ---- heap ------------------------------------------------------------------------------------ */

uint64_t hc_m5_alloc(hc_mlx5_model_t *m, uint64_t len)
{
    len = HC_ALIGN_UP(len, (uint64_t)HC_CACHE_LINE);
    uint64_t off = 0;
    if (m->heap_end - m->heap_next >= len) {
        off = m->heap_next;
        m->heap_next += len;
    } else {
        for (int i = 0; i < m->nfree; i++) {
            if (m->free[i].len < len) continue;
            off = m->free[i].off;
            m->free[i].off += len;
            m->free[i].len -= len;
            if (m->free[i].len == 0) m->free[i] = m->free[--m->nfree];
            break;
        }
        if (!off) return 0;
    }
    memset(hc_m5_at(m->seg, off), 0, len);
    return off;
}

void hc_m5_free(hc_mlx5_model_t *m, uint64_t off, uint64_t len)
{
    if (!off) return;
    len = HC_ALIGN_UP(len, (uint64_t)HC_CACHE_LINE);
    if (m->nfree == HC_M5_MAX_FREE) {
        hc_log_debug("mlx5 model: free list full: %llu bytes at %llu not reused",
                     (unsigned long long)len, (unsigned long long)off);
        return;
    }
    m->free[m->nfree++] = (hc_m5_blk_t){.off = off, .len = len};
}

/* ---- keys ------------------------------------------------------------------------------------ */

/* NULL when key covers [addr, addr + len) with the access need in table s,
 * else what is wrong. */
const char *hc_m5_key_check(const hc_m5_seg_t *s, uint32_t key, uint64_t addr, uint64_t len,
                            uint32_t need)
{
    uint32_t i = key >> 8;
    if (i == 0 || i >= HC_M5_MAX_KEY) return "is not a key of this model";
    const hc_m5_key_t *k = &s->key[i];
    if (!__atomic_load_n(&k->valid, __ATOMIC_ACQUIRE)) return "is not registered";
    if (k->variant != (key & 0xff)) return "is stale (deregistered; its entry was reused)";
    if ((k->access & need) != need) return "lacks the access";
    if (addr < k->addr || addr - k->addr > k->len || len > k->len - (addr - k->addr))
        return "does not cover the range";
    return NULL;
}

uint64_t hc_m5_key_dma(const hc_m5_seg_t *s, uint32_t key, uint64_t addr)
{
    const hc_m5_key_t *k = &s->key[key >> 8];
    return k->dma ? k->dma + (addr - k->addr) : addr;
}

/* ---- faults ---------------------------------------------------------------------------------- */

static hcomm_status_t hc_m5_parse_faults(hc_mlx5_model_t *m, const char *spec)
{
    if (!spec || !*spec) return HCOMM_OK;
    const char *p = spec;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        const char *at = memchr(p, '@', n);
        if (!at)
            return hc_error(HCOMM_ERR_INVALID,
                            "HCOMM_MLX5_MODEL_FAULT: \"%.*s\" in \"%s\" is not "
                            "KIND@N (no @N)",
                            (int)n, p, spec);
        size_t kl = (size_t)(at - p);
        int kind = -1;
        for (int k = 0; k < (int)HC_ARRAY_SIZE(hc_m5_fault_names); k++)
            if (strlen(hc_m5_fault_names[k]) == kl && memcmp(p, hc_m5_fault_names[k], kl) == 0)
                kind = k;
        if (kind < 0)
            return hc_error(HCOMM_ERR_INVALID,
                            "HCOMM_MLX5_MODEL_FAULT: unknown fault kind \"%.*s\" "
                            "in \"%s\" (remote_access, local_prot, length, retry or flush)",
                            (int)kl, p, spec);
        uint64_t v = 0;
        const char *d = at + 1, *end = p + n;
        bool ok = d < end;
        for (; d < end && ok; d++) {
            ok = *d >= '0' && *d <= '9' && v < 1000000000000000ull;
            v = v * 10 + (uint64_t)(*d - '0');
        }
        if (!ok || v == 0)
            return hc_error(HCOMM_ERR_INVALID,
                            "HCOMM_MLX5_MODEL_FAULT: \"%.*s\" in \"%s\": N must be "
                            "a number >= 1 (the N-th WQE this NIC runs)",
                            (int)n, p, spec);
        if (m->nfaults == HC_M5_MAX_FAULTS)
            return hc_error(HCOMM_ERR_INVALID,
                            "HCOMM_MLX5_MODEL_FAULT: more than %d faults in \"%s\"",
                            HC_M5_MAX_FAULTS, spec);
        /* kept sorted by N (insertion; a later duplicate N comes after) */
        int j = m->nfaults++;
        while (j > 0 && m->faults[j - 1].n > v) {
            m->faults[j] = m->faults[j - 1];
            j--;
        }
        m->faults[j] = (hc_m5_fault_t){.n = v, .kind = kind};
        if (!comma) break;
        p = comma + 1;
    }
    return HCOMM_OK;
}

/* ---- open / close ---------------------------------------------------------------------------- */

/* This process's segment: a memfd of HC_M5_SEG_BYTES, mapped (m->fd,
 * m->seg; the caller closes them on failure). */
static hcomm_status_t hc_m5_seg_map(hc_mlx5_model_t *m)
{
    m->fd = memfd_create("hcomm-mlx5-model", MFD_CLOEXEC);
    if (m->fd < 0)
        return hc_error_errno(HCOMM_ERR_IO, errno, "mlx5 model: memfd_create for the segment");
    if (ftruncate(m->fd, (off_t)HC_M5_SEG_BYTES) != 0)
        return hc_error_errno(HCOMM_ERR_NO_MEMORY, errno,
                              "mlx5 model: ftruncate of the %llu-byte segment",
                              (unsigned long long)HC_M5_SEG_BYTES);
    void *base = mmap(NULL, HC_M5_SEG_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, m->fd, 0);
    if (base == MAP_FAILED)
        return hc_error_errno(HCOMM_ERR_NO_MEMORY, errno,
                              "mlx5 model: mmap of the %llu-byte segment",
                              (unsigned long long)HC_M5_SEG_BYTES);
    m->seg = base;
    return HCOMM_OK;
}

/* The CQs' robust process-shared locks, the heap, the header peers check
 * (published last, by its magic) and this model as peer 0. */
static hcomm_status_t hc_m5_seg_init(hc_mlx5_model_t *m)
{
    uint64_t nonce = 0;
    if (getrandom(&nonce, sizeof(nonce), GRND_NONBLOCK) != (ssize_t)sizeof(nonce) || !nonce)
        nonce = hc_time_ns() ^ ((uint64_t)(uintptr_t)m->seg << 7) ^ (uint64_t)m->pid << 40;
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    for (uint32_t i = 0; i < HC_M5_MAX_CQ; i++) {
        int rc = pthread_mutex_init(&m->seg->cq[i].lock, &a);
        if (rc) {
            pthread_mutexattr_destroy(&a);
            return hc_error_errno(HCOMM_ERR_INTERNAL, rc,
                                  "mlx5 model: a robust shared mutex for CQ %u", i + 1);
        }
    }
    pthread_mutexattr_destroy(&a);
    m->heap_next = HC_ALIGN_UP((uint64_t)sizeof(hc_m5_seg_t), 4096ull);
    m->heap_end = HC_M5_SEG_BYTES;
    m->qp_hint = 0;
    m->key_hint = 1;
    hc_m5_hdr_t *h = &m->seg->hdr;
    h->version = HC_M5_VERSION;
    h->layout = (uint32_t)sizeof(hc_m5_seg_t);
    h->pid = (int32_t)m->pid;
    h->fd = m->fd;
    h->nonce = nonce;
    h->self_addr = (uint64_t)(uintptr_t)m->seg;
    h->size = HC_M5_SEG_BYTES;
    __atomic_store_n(&h->magic, HC_M5_MAGIC, __ATOMIC_RELEASE);
    hc_m5_peer_t *self = &m->peers[0];
    hc_mlx5_model_id(m, self->id);
    self->seg = m->seg;
    self->len = HC_M5_SEG_BYTES;
    self->pid = m->pid;
    self->self = true;
    m->npeers = 1;
    return HCOMM_OK;
}

hcomm_status_t hc_mlx5_model_open(hc_mlx5_model_t **m_p, const char *fault)
{
    *m_p = NULL;
    hc_mlx5_model_t *m = calloc(1, sizeof(*m));
    if (!m) return hc_error(HCOMM_ERR_NO_MEMORY, "mlx5 model: %zu bytes for the model", sizeof(*m));
    m->fd = -1;
    hcomm_status_t st = hc_m5_parse_faults(m, fault);
    if (st != HCOMM_OK) {
        free(m);
        return st;
    }
    st = hc_m5_seg_map(m);
    if (st != HCOMM_OK) goto fail;
    m->pid = getpid();
    /* Peers reach this process's memory (process_vm_writev/readv) and memfd
     * (/proc/PID/fd/N) with ptrace-style checks: under Yama's ptrace_scope 1
     * only a tracer we name may, so name any (test machinery only). */
#ifdef PR_SET_PTRACER
    if (prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0) != 0 && errno != EINVAL)
        hc_log_debug("mlx5 model: prctl(PR_SET_PTRACER_ANY): %s", strerror(errno));
#endif
    st = hc_m5_seg_init(m);
    if (st != HCOMM_OK) goto fail;
    hc_log_debug("mlx5 model: opened (pid %d, memfd %d, %d faults injected)", (int)m->pid, m->fd,
                 m->nfaults);
    *m_p = m;
    return HCOMM_OK;
fail:
    if (m->seg) munmap(m->seg, HC_M5_SEG_BYTES);
    if (m->fd >= 0) close(m->fd);
    free(m);
    return st;
}

void hc_mlx5_model_close(hc_mlx5_model_t *m)
{
    if (!m) return;
    /* A device refuses to free a protection domain that still has memory
     * registrations (ibv_dealloc_pd: EBUSY); the model says so. */
    uint32_t held = 0;
    for (uint32_t i = 1; i < HC_M5_MAX_KEY; i++)
        held += __atomic_load_n(&m->seg->key[i].valid, __ATOMIC_ACQUIRE) != 0;
    if (held)
        hc_log_warn("mlx5 model: closed with %u memory keys still registered (a device's "
                    "ibv_dealloc_pd answers EBUSY)",
                    held);
    for (uint32_t i = 0; i < HC_M5_MAX_QP; i++)
        if (m->qp[i].s) __atomic_store_n(&m->qp[i].s->state, HC_M5_QP_DESTROYED, __ATOMIC_RELEASE);
    for (uint32_t i = 0; i < HC_M5_MAX_CQ; i++)
        m->seg->cq[i].state = HC_M5_CQ_FREE;
    __atomic_store_n(&m->seg->hdr.magic, 0, __ATOMIC_RELEASE);
    for (int i = 1; i < m->npeers; i++)
        munmap(m->peers[i].seg, m->peers[i].len);
    munmap(m->seg, HC_M5_SEG_BYTES);
    close(m->fd);
    free(m);
}

void hc_mlx5_model_id(const hc_mlx5_model_t *m, uint8_t id[HC_MLX5_MODEL_ID_LEN])
{
    uint32_t pid = htole32((uint32_t)m->seg->hdr.pid), fd = htole32((uint32_t)m->seg->hdr.fd);
    uint64_t nonce = htole64(m->seg->hdr.nonce);
    memcpy(id, &pid, 4);
    memcpy(id + 4, &fd, 4);
    memcpy(id + 8, &nonce, 8);
}

/* The peer whose model id is id: this model, a mapped one, or mapped now. */
hcomm_status_t hc_m5_peer_get(hc_mlx5_model_t *m, const uint8_t *id, hc_m5_peer_t **p_p)
{
    for (int i = 0; i < m->npeers; i++) {
        if (memcmp(m->peers[i].id, id, HC_MLX5_MODEL_ID_LEN) == 0) {
            *p_p = &m->peers[i];
            return HCOMM_OK;
        }
    }
    uint32_t pid, fd;
    uint64_t nonce;
    memcpy(&pid, id, 4);
    memcpy(&fd, id + 4, 4);
    memcpy(&nonce, id + 8, 8);
    pid = le32toh(pid);
    fd = le32toh(fd);
    nonce = le64toh(nonce);
    if (m->npeers == HC_M5_MAX_PEERS)
        return hc_error(HCOMM_ERR_NO_MEMORY,
                        "mlx5 model: %d peer models mapped already (at most %d); "
                        "cannot map the one of process %u",
                        m->npeers - 1, HC_M5_MAX_PEERS - 1, pid);
    char path[64];
    snprintf(path, sizeof(path), "/proc/%u/fd/%u", pid, fd);
    int pfd = open(path, O_RDWR | O_CLOEXEC);
    if (pfd < 0)
        return hc_error_errno(HCOMM_ERR_PEER_FAILED, errno,
                              "mlx5 model: opening the peer model's segment %s", path);
    struct stat sb;
    if (fstat(pfd, &sb) != 0 || (uint64_t)sb.st_size < sizeof(hc_m5_seg_t)) {
        int e = errno;
        close(pfd);
        return hc_error(HCOMM_ERR_PEER_FAILED, "mlx5 model: %s is not a model segment (%s)", path,
                        e ? strerror(e) : "too small");
    }
    size_t len = (size_t)sb.st_size;
    void *base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, pfd, 0);
    int e = errno;
    close(pfd);
    if (base == MAP_FAILED)
        return hc_error_errno(HCOMM_ERR_NO_MEMORY, e,
                              "mlx5 model: mmap of the peer segment %s (%zu "
                              "bytes)",
                              path, len);
    const hc_m5_hdr_t *h = &((const hc_m5_seg_t *)base)->hdr;
    if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != HC_M5_MAGIC ||
        h->version != HC_M5_VERSION || h->layout != sizeof(hc_m5_seg_t) || h->nonce != nonce ||
        (uint32_t)h->pid != pid || (uint32_t)h->fd != fd || h->size != len) {
        hcomm_status_t st = hc_error(HCOMM_ERR_PEER_FAILED,
                                     "mlx5 model: %s is not the model segment "
                                     "the peer id names (magic %016llx version %u layout %u pid %d "
                                     "nonce %016llx; expected version %u layout %zu pid %u nonce "
                                     "%016llx)",
                                     path, (unsigned long long)h->magic, h->version, h->layout,
                                     h->pid, (unsigned long long)h->nonce, HC_M5_VERSION,
                                     sizeof(hc_m5_seg_t), pid, (unsigned long long)nonce);
        munmap(base, len);
        return st;
    }
    hc_m5_peer_t *p = &m->peers[m->npeers++];
    memcpy(p->id, id, HC_MLX5_MODEL_ID_LEN);
    p->seg = base;
    p->len = len;
    p->pid = (pid_t)pid;
    p->self = false;
    hc_log_debug("mlx5 model: mapped the model of process %u (%s)", pid, path);
    *p_p = p;
    return HCOMM_OK;
}

/* ---- execution ------------------------------------------------------------------------------- */

void hc_mlx5_model_kick(hc_mlx5_model_t *m, uint32_t qpn)
{
    hc_m5_qp_t *q = hc_m5_qp_get(m, qpn);
    if (HC_UNLIKELY(!q)) {
        hc_log_warn("mlx5 model: doorbell of QP %u, which does not exist", qpn);
        return;
    }
    hc_m5_doorbell(m, q);
    if (m->defer)
        q->marked = true;
    else
        hc_m5_qp_run(m, q);
}

int hc_mlx5_model_progress(hc_mlx5_model_t *m)
{
    int n = 0;
    for (int k = 0; k < m->nlive; k++) {
        hc_m5_qp_t *q = &m->qp[m->live[k]];
        if (q->marked || q->waiting) {
            n += hc_m5_qp_run(m, q);
        } else if (__atomic_load_n(&q->s->state, __ATOMIC_ACQUIRE) == HC_M5_QP_ERR) {
            /* moved to ERROR by a peer, or WQEs / receives posted since: flushes */
            if (hc_m5_sq_pi(q) != q->sq_ci ||
                (uint16_t)be32toh(__atomic_load_n(&q->dbrec[MLX5_RCV_DBR], __ATOMIC_ACQUIRE)) !=
                    (uint16_t)q->s->rq_ci)
                n += hc_m5_qp_run(m, q);
        }
    }
    return n;
}

void hc_mlx5_model_defer(hc_mlx5_model_t *m, bool defer)
{
    m->defer = defer;
}

void hc_mlx5_model_stats(const hc_mlx5_model_t *m, hc_mlx5_model_stats_t *s)
{
    *s = m->stats;
}
