/*
 * The bootstrap's tables by node. Round 1 (hc_bs_node_send_tables, the
 * table of every rank's blob after the handshakes) and the allgather by
 * node (hc_bootstrap_allgather_nodes, round 2's addresses): rank 0 sends
 * the table once per node, to the node's lowest rank (its leader), which
 * publishes it in a shared-memory file; the node's other ranks read it
 * there (round 1: rank 0 sends them a 24-byte reference instead, naming
 * the call and the leader). Rank 0 thus sends (nodes - 1) tables instead
 * of (N - 1): O(N x nodes) bytes, O(N) on one node, where the star sent
 * O(N^2). Round 1's nodes are the ranks whose blobs agree on the bytes
 * the caller names (p->node_key_off/len: the node's id and the machine).
 *
 * The file: /dev/shm/hcomm-ag-<tag>, mode 0600 (this user only), the tag
 * a hash of the job key and, for round 1, a random number rank 0 draws and
 * the node's key; for an allgather, round 1's table (every rank's pid and
 * host: one launch's), the call's number and the leader's rank, so that neither another job nor a
 * file a crashed run left behind is ever read; the header repeats the tag
 * and the length. The leader fills it, then sets `ready` (release); a
 * reader maps it once it exists, waits for `ready` (acquire), copies, and
 * the last of the node's readers unlinks it (the leader also unlinks it when
 * its bootstrap closes, for a reader that died first). A leader's first
 * publish removes the files of leaders that died before their readers
 * took them (hc_bs_node_sweep). While a reader
 * waits it keeps reading its connection to rank 0: an ABORT (the job
 * failed) or rank 0's exit ends the wait at once, with rank 0's reason.
 */
#include "core/bootstrap_int.h"
#include "base/auth.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define HC_BS_NODE_MAGIC 0x68636f6d6d41474eull /* "hcommAGN" */

#define HC_BS_NODE_OWNER_MAGIC 0x4c656164u /* "Lead": pid and pidns are set */
#define HC_BS_NODE_PREFIX "hcomm-ag-"
#define HC_BS_NODE_SWEEP_MAX 4096 /* entries of /dev/shm one sweep looks at */

typedef struct {
    uint64_t magic;
    uint64_t tag;
    uint64_t len;            /* table bytes after the header */
    _Atomic uint32_t ready;  /* 1: the table is there */
    _Atomic int32_t readers; /* readers that have not copied it yet */
    uint32_t owner_magic;    /* HC_BS_NODE_OWNER_MAGIC (files before it: 0) */
    int32_t pid;             /* the leader that wrote it */
    uint64_t pidns;          /* the inode of its pid namespace (0: unknown) */
    uint8_t pad[16];
} hc_bs_node_hdr_t;
_Static_assert(sizeof(hc_bs_node_hdr_t) == 64, "the file's header keeps its size");

/* This process's pid namespace (the inode of /proc/self/ns/pid), 0 when
 * unknown: a pid means something only in its own namespace. */
static uint64_t hc_bs_pidns(void)
{
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

/* Once per process, before a leader's first file: removes the node tables
 * whose leader is gone. A leader killed after it wrote its file and before
 * every reader took it (or a job whose ranks all died in init) leaves the
 * file; nothing else would remove it. Only this user's files named
 * hcomm-ag-*, with this version's header, written by a process of this pid
 * namespace that no longer exists (kill(pid, 0): ESRCH), are removed: a
 * file whose leader lives, or lives where its pid means nothing here (a
 * container sharing /dev/shm), or whose pid was reused, stays. */
static void hc_bs_node_sweep(void)
{
    static bool swept;
    if (swept) return;
    swept = true;
    uint64_t ns = hc_bs_pidns();
    DIR *d = ns ? opendir("/dev/shm") : NULL;
    if (!d) return;
    int seen = 0, removed = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && seen < HC_BS_NODE_SWEEP_MAX) {
        if (strncmp(e->d_name, HC_BS_NODE_PREFIX, strlen(HC_BS_NODE_PREFIX)) != 0) continue;
        seen++;
        char name[300];
        snprintf(name, sizeof(name), "/%s", e->d_name);
        int fd = shm_open(name, O_RDONLY | O_NOFOLLOW, 0);
        if (fd < 0) continue;
        struct stat st;
        hc_bs_node_hdr_t h;
        bool stale = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
                     pread(fd, &h, sizeof(h), 0) == (ssize_t)sizeof(h) &&
                     h.magic == HC_BS_NODE_MAGIC && h.owner_magic == HC_BS_NODE_OWNER_MAGIC &&
                     h.pidns == ns && h.pid > 0 && h.pid != getpid() && kill(h.pid, 0) != 0 &&
                     errno == ESRCH;
        close(fd);
        if (stale && shm_unlink(name) == 0) removed++;
    }
    closedir(d);
    if (removed)
        hc_log_info("bootstrap: removed %d node table%s from /dev/shm whose leader had died "
                    "before its readers took them", removed, removed == 1 ? "" : "s");
}

static uint64_t hc_bs_fnv(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* The call's tag (the same on every rank of the node: nodes that share a
 * host, as tests fake them, have their own) and its file name. */
static uint64_t hc_bs_node_tag(const hc_bootstrap_t *bs, uint64_t call, int leader, char *name,
                               size_t cap)
{
    uint64_t h = hc_bs_fnv(0xcbf29ce484222325ull, bs->key_hash, sizeof(bs->key_hash));
    h = hc_bs_fnv(h, bs->table, bs->blob_len * (size_t)bs->size);
    h = hc_bs_fnv(h, &call, sizeof(call));
    h = hc_bs_fnv(h, &leader, sizeof(leader));
    snprintf(name, cap, "/hcomm-ag-%016llx", (unsigned long long)h);
    return h;
}

/* The leader: the table into a new file for `readers` local ranks. */
static hcomm_status_t hc_bs_node_publish(hc_bootstrap_t *bs, const char *fn, const char *name,
                                         uint64_t tag, const void *table, size_t len, int readers)
{
    hc_bs_node_sweep();
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0 && errno == EEXIST) { /* a crashed launch with the very same pids: not ours */
        shm_unlink(name);
        fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    }
    if (fd < 0)
        return hc_error(HCOMM_ERR_IO, "%s: rank %d cannot create /dev/shm%s for its node: %s", fn,
                        bs->rank, name, strerror(errno));
    size_t total = sizeof(hc_bs_node_hdr_t) + len;
    void *p = MAP_FAILED;
    if (ftruncate(fd, (off_t)total) == 0)
        p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int err = errno;
    close(fd);
    if (p == MAP_FAILED) {
        shm_unlink(name);
        return hc_error(HCOMM_ERR_IO, "%s: rank %d cannot size or map /dev/shm%s (%zu bytes): %s",
                        fn, bs->rank, name, total, strerror(err));
    }
    hc_bs_node_hdr_t *h = p;
    h->magic = HC_BS_NODE_MAGIC;
    h->tag = tag;
    h->len = len;
    h->owner_magic = HC_BS_NODE_OWNER_MAGIC;
    h->pid = (int32_t)getpid();
    h->pidns = hc_bs_pidns();
    memcpy(h + 1, table, len);
    atomic_store_explicit(&h->readers, readers, memory_order_relaxed);
    atomic_store_explicit(&h->ready, 1, memory_order_release);
    munmap(p, total);
    /* The previous one was read by every reader before any of them could
     * contribute to this call: normally gone already. */
    if (bs->node_file[0]) shm_unlink(bs->node_file);
    snprintf(bs->node_file, sizeof(bs->node_file), "%s", name);
    return HCOMM_OK;
}

/* A reader: one look at the file; 1 when the table was copied to out. */
static int hc_bs_node_try(const char *name, uint64_t tag, void *out, size_t len, char *why,
                          size_t whycap)
{
    int fd = shm_open(name, O_RDWR, 0);
    if (fd < 0) {
        int err = errno;
        snprintf(why, whycap, "%s", err == ENOENT ? "not there yet" : strerror(err));
        return err == ENOENT ? 0 : -1;
    }
    size_t total = sizeof(hc_bs_node_hdr_t) + len;
    struct stat st;
    void *p = MAP_FAILED;
    if (fstat(fd, &st) != 0) {
        int err = errno;
        close(fd);
        snprintf(why, whycap, "fstat: %s", strerror(err));
        return -1;
    }
    if (st.st_uid != geteuid() || (st.st_mode & 077)) {
        /* another user's file (or one others may write): never read */
        close(fd);
        snprintf(why, whycap, "owned by uid %u, mode %03o: not this user's 0600 file",
                 (unsigned)st.st_uid, (unsigned)(st.st_mode & 0777));
        return -1;
    }
    if ((size_t)st.st_size == total)
        p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        snprintf(why, whycap, "being sized");
        return 0;
    }
    hc_bs_node_hdr_t *h = p;
    int got = 0;
    if (atomic_load_explicit(&h->ready, memory_order_acquire) == 1) {
        if (h->magic != HC_BS_NODE_MAGIC || h->tag != tag || h->len != len) {
            snprintf(why, whycap, "its header does not match this job's call");
            got = -1;
        } else {
            memcpy(out, h + 1, len);
            got = 1;
            if (atomic_fetch_sub_explicit(&h->readers, 1, memory_order_acq_rel) == 1)
                shm_unlink(name); /* the last reader */
        }
    } else {
        snprintf(why, whycap, "not filled yet");
    }
    munmap(p, total);
    return got;
}

/* A reader's wait: the file, and rank 0's connection for an ABORT. */
static hcomm_status_t hc_bs_node_wait(hc_bootstrap_t *bs, const char *fn, const char *name,
                                      uint64_t tag, void *out, size_t len, int leader,
                                      double deadline, double timeout_sec)
{
    hc_bs_conn_t *c = &bs->conns[0];
    hc_bs_expect_t e = {HC_BOOTSTRAP_MSG_AG_OUT, (uint32_t)bs->size, len, true};
    char why[160] = "", text[HC_BOOTSTRAP_MAX_ABORT_TEXT + 1];
    int ms = 0;
    for (;;) {
        int got = hc_bs_node_try(name, tag, out, len, why, sizeof(why));
        if (got > 0) return HCOMM_OK;
        if (got < 0)
            return hc_error(HCOMM_ERR_BOOTSTRAP, "%s: rank %d cannot read /dev/shm%s: %s", fn,
                            bs->rank, name, why);
        int left = hc_bs_poll_ms(deadline);
        if (left == 0)
            return hc_error(HCOMM_ERR_TIMEOUT,
                            "%s: rank %d (this node's leader) did not publish the table within "
                            "%.1f s (/dev/shm%s: %s)",
                            fn, leader, timeout_sec, name, why);
        ms = HC_MIN(HC_MAX(ms * 2, 1), 8); /* 1, 2, 4, 8 ms */
        struct pollfd pfd = {c->fd, POLLIN, 0};
        if (poll(&pfd, 1, HC_MIN(ms, left)) <= 0) {
            if (bs->idle) bs->idle(bs->idle_arg);
            continue;
        }
        hc_bs_rx_t rx = hc_bs_conn_read(c, &e, why, sizeof(why));
        if (rx == HC_BS_RX_MORE) continue;
        if (rx == HC_BS_RX_EOF)
            return hc_error(HCOMM_ERR_PEER_FAILED,
                            "%s: rank 0 closed its bootstrap connection (%s)", fn, why);
        hc_bootstrap_msg_t m;
        if (rx == HC_BS_RX_BAD || hc_bootstrap_msg_parse(c->buf, c->have, &m) <= 0)
            return hc_error(HCOMM_ERR_BOOTSTRAP, "%s: bad message from rank 0: %s", fn,
                            rx == HC_BS_RX_BAD ? why : "malformed");
        c->have = 0;
        if (m.type == HC_BOOTSTRAP_MSG_ABORT)
            return hc_error(hc_bs_abort_decode(&m, text, sizeof(text)),
                            "%s: rank 0 stopped the job: %s", fn, text);
        if (hc_bs_is_sideband(m.type)) {
            hc_bs_sideband(bs, 0, &m);
            if (bs->verdict[leader] >= 0)
                return hc_error(HCOMM_ERR_PEER_FAILED,
                                "%s: rank %d (this node's leader) failed before it published the "
                                "table (rank 0's notice)",
                                fn, leader);
            continue;
        }
        return hc_error(HCOMM_ERR_BOOTSTRAP,
                        "%s: rank 0 sent message type %u while rank %d waits for its node's "
                        "leader",
                        fn, m.type, bs->rank);
    }
}

#define HC_BS_NODE_SIGNAL_MAGIC 0x68634e6f64655232ull /* "hcNodeR2" */

/* The 24 bytes rank 0 sends a rank whose table is in a node's file: round
 * 1's reference (an epoch) or an allgather's signal (the call's tag). */
typedef struct {
    uint64_t magic;
    uint64_t epoch; /* round 1: rank 0's random number; an allgather: the tag */
    uint32_t leader;
    uint32_t pad;
} hc_bs_node_ref_t;

_Static_assert(sizeof(hc_bs_node_ref_t) == HC_BS_NODE_REF_LEN, "the table's room for a reference");

/* A reader of an allgather: rank 0's signal that the node's table is (or
 * is about to be) in its file; failure notices may come first. */
static hcomm_status_t hc_bs_node_signal(hc_bootstrap_t *bs, const char *fn, uint64_t tag,
                                        int leader, double deadline, double timeout_sec)
{
    hc_bs_conn_t *c = &bs->conns[0];
    hc_bs_expect_t e = {HC_BOOTSTRAP_MSG_AG_OUT, (uint32_t)bs->size, HC_BS_NODE_REF_LEN, true};
    char why[160], text[HC_BOOTSTRAP_MAX_ABORT_TEXT + 1];
    hc_bootstrap_msg_t m;
    hcomm_status_t st;
    while ((st = hc_bs_conn_wait(c, &e, deadline, &m, why, sizeof(why))) == HCOMM_OK &&
           hc_bs_is_sideband(m.type))
        hc_bs_sideband(bs, 0, &m);
    if (st == HCOMM_ERR_TIMEOUT)
        return hc_error(st, "%s: rank %d got no word from rank 0 within %.1f s", fn, bs->rank,
                        timeout_sec);
    if (st == HCOMM_ERR_PEER_FAILED)
        return hc_error(st, "%s: rank 0 closed its bootstrap connection (%s)", fn, why);
    if (st != HCOMM_OK) return hc_error(st, "%s: bad message from rank 0: %s", fn, why);
    if (m.type == HC_BOOTSTRAP_MSG_ABORT)
        return hc_error(hc_bs_abort_decode(&m, text, sizeof(text)),
                        "%s: rank 0 stopped the job: %s", fn, text);
    hc_bs_node_ref_t ref;
    memcpy(&ref, m.payload, sizeof(ref));
    if (ref.magic != HC_BS_NODE_SIGNAL_MAGIC || ref.epoch != tag || ref.leader != (uint32_t)leader)
        return hc_error(HCOMM_ERR_BOOTSTRAP,
                        "%s: rank 0's word names another call or leader (rank %u, not %d)", fn,
                        ref.leader, leader);
    return HCOMM_OK;
}

/* Rank 0: the 24 bytes to rank r, whose table is in its node's file. */
static hcomm_status_t hc_bs_node_send_ref(hc_bootstrap_t *bs, const char *fn, uint32_t type, int r,
                                          const hc_bs_node_ref_t *ref, double deadline)
{
    hc_bootstrap_msg_t m = {HC_BOOTSTRAP_MAGIC,
                            HC_BOOTSTRAP_VERSION,
                            type,
                            0,
                            (uint32_t)bs->size,
                            0,
                            NULL,
                            sizeof(*ref),
                            ref};
    return hc_bs_send_msg(bs->conns[r].fd, &m, deadline, fn, r);
}

hcomm_status_t hc_bootstrap_allgather_nodes(hc_bootstrap_t *bs, const void *in, size_t len,
                                            void *out, const int *node_of_rank, double timeout_sec)
{
    const char *fn = "hc_bootstrap_allgather_nodes";
    if (bs == NULL || node_of_rank == NULL || len == 0 || in == NULL || out == NULL)
        return hc_error(HCOMM_ERR_INVALID, "%s: argument %s is NULL or empty", fn,
                        bs == NULL             ? "bs"
                        : node_of_rank == NULL ? "node_of_rank"
                        : len == 0             ? "len"
                        : in == NULL           ? "in"
                                               : "out");
    double deadline = hc_time_sec() + timeout_sec;
    int *lead = calloc((size_t)bs->size, sizeof(int)); /* each rank's node's leader */
    bool *to = calloc((size_t)bs->size, sizeof(bool)); /* rank 0: the other nodes' leaders */
    if (lead == NULL || to == NULL) {
        free(lead);
        free(to);
        return hc_error(HCOMM_ERR_NO_MEMORY, "%s: no memory", fn);
    }
    for (int r = 0; r < bs->size; r++) {
        lead[r] = r;
        for (int q = 0; q < r && lead[r] == r; q++)
            if (node_of_rank[q] == node_of_rank[r]) lead[r] = lead[q];
        to[r] = lead[r] == r && node_of_rank[r] != node_of_rank[0];
    }
    int leader = lead[bs->rank], readers = -1;
    for (int r = 0; r < bs->size; r++)
        readers += lead[r] == leader;
    char name[64];
    uint64_t call = bs->node_calls++;
    uint64_t tag = hc_bs_node_tag(bs, call, leader, name, sizeof(name));
    size_t tlen = len * (size_t)bs->size;
    hcomm_status_t st;
    if (bs->rank == leader) {
        /* rank 0: the leaders first, then its own node's file, then the
         * readers' signal; another leader: the table, then its file */
        st = hc_bs_allgather(bs, fn, in, len, out, to, timeout_sec);
        if (st == HCOMM_OK && readers > 0)
            st = hc_bs_node_publish(bs, fn, name, tag, out, tlen, readers);
        if (bs->rank == 0 && st == HCOMM_OK) {
            /* each node's readers: the tag of their own leader's file */
            for (int r = 1; r < bs->size && st == HCOMM_OK; r++) {
                if (lead[r] == r) continue;
                char other[64];
                hc_bs_node_ref_t ref = {
                    HC_BS_NODE_SIGNAL_MAGIC,
                    lead[r] == 0 ? tag : hc_bs_node_tag(bs, call, lead[r], other, sizeof(other)),
                    (uint32_t)lead[r], 0};
                st = hc_bs_node_send_ref(bs, fn, HC_BOOTSTRAP_MSG_AG_OUT, r, &ref, deadline);
            }
            if (st != HCOMM_OK) {
                hc_bs_abort_all(bs, st, hc_error_last());
                bs->dead = st;
            }
        }
    } else {
        st = hc_bs_allgather_send(bs, fn, in, len, deadline, timeout_sec);
        if (st == HCOMM_OK) st = hc_bs_node_signal(bs, fn, tag, leader, deadline, timeout_sec);
        if (st == HCOMM_OK)
            st = hc_bs_node_wait(bs, fn, name, tag, out, tlen, leader, deadline, timeout_sec);
        if (st != HCOMM_OK) bs->dead = st;
    }
    free(lead);
    free(to);
    return st;
}

/* ---- round 1 ------------------------------------------------------------------------ */

#define HC_BS_NODE_REF_MAGIC 0x68634e6f64655231ull /* "hcNodeR1" */

static const uint8_t *hc_bs_node_key(const hc_bootstrap_t *bs, const hc_bootstrap_params_t *p,
                                     int r)
{
    return bs->table + (size_t)r * bs->blob_len + p->node_key_off;
}

/* Round 1's file name, from the epoch and this rank's node key. */
static uint64_t hc_bs_node_tag1(const hc_bootstrap_t *bs, const hc_bootstrap_params_t *p,
                                uint64_t epoch, char *name, size_t cap)
{
    uint64_t h = hc_bs_fnv(0xcbf29ce484222325ull, bs->key_hash, sizeof(bs->key_hash));
    h = hc_bs_fnv(h, &epoch, sizeof(epoch));
    h = hc_bs_fnv(h, hc_bs_node_key(bs, p, bs->rank), p->node_key_len);
    snprintf(name, cap, "/hcomm-ag-%016llx", (unsigned long long)h);
    return h;
}

/* Ranks other than the leader that share this rank's node (the table is
 * whole here). */
static int hc_bs_node_readers(const hc_bootstrap_t *bs, const hc_bootstrap_params_t *p)
{
    int n = 0;
    const uint8_t *mine = hc_bs_node_key(bs, p, bs->rank);
    for (int r = 0; r < bs->size; r++)
        n += !memcmp(hc_bs_node_key(bs, p, r), mine, p->node_key_len);
    return n - 1;
}

hcomm_status_t hc_bs_node_send_tables(hc_bootstrap_t *bs, const hc_bootstrap_params_t *p,
                                      double deadline)
{
    const char *fn = "hc_bootstrap_open";
    size_t tlen = bs->blob_len * (size_t)bs->size;
    uint8_t *tail = bs->table + tlen; /* room made at open, not aligned: copied there */
    int *leader = malloc(sizeof(int) * (size_t)bs->size);
    if (leader == NULL) return hc_error(HCOMM_ERR_NO_MEMORY, "%s: no memory", fn);
    uint64_t epoch = 0;
    hcomm_status_t st = hc_auth_random(&epoch, sizeof(epoch));
    for (int r = 0; r < bs->size; r++) {
        leader[r] = r;
        for (int q = 0; q < r && leader[r] == r; q++)
            if (!memcmp(hc_bs_node_key(bs, p, q), hc_bs_node_key(bs, p, r), p->node_key_len))
                leader[r] = leader[q];
    }
    int readers = hc_bs_node_readers(bs, p);
    char name[64];
    uint64_t tag = hc_bs_node_tag1(bs, p, epoch, name, sizeof(name));
    if (st == HCOMM_OK && readers > 0)
        st = hc_bs_node_publish(bs, fn, name, tag, bs->table, tlen, readers);
    for (int r = 1; r < bs->size && st == HCOMM_OK; r++) {
        bool lead = leader[r] == r;
        hc_bs_node_ref_t ref = {HC_BS_NODE_REF_MAGIC, epoch, (uint32_t)leader[r], 0};
        memcpy(tail, &ref, sizeof(ref));
        hc_bootstrap_msg_t m = {HC_BOOTSTRAP_MAGIC,
                                HC_BOOTSTRAP_VERSION,
                                HC_BOOTSTRAP_MSG_TABLE,
                                0,
                                (uint32_t)bs->size,
                                0,
                                NULL,
                                lead ? tlen + sizeof(ref) : sizeof(ref),
                                lead ? (const void *)bs->table : (const void *)&ref};
        st = hc_bs_send_msg(bs->conns[r].fd, &m, deadline, fn, r);
    }
    free(leader);
    if (st != HCOMM_OK) hc_bs_abort_all(bs, st, hc_error_last());
    return st;
}

hcomm_status_t hc_bs_node_take_table(hc_bootstrap_t *bs, const hc_bootstrap_params_t *p,
                                     const hc_bootstrap_msg_t *m, double deadline, double timeout)
{
    const char *fn = "hc_bootstrap_open";
    size_t tlen = bs->blob_len * (size_t)bs->size;
    hc_bs_node_ref_t ref;
    bool lead = m->payload_len == tlen + sizeof(ref);
    if (!lead && m->payload_len != sizeof(ref))
        return hc_error(HCOMM_ERR_BOOTSTRAP,
                        "%s: rank 0 sent a table of %llu bytes, expected %zu or a %zu-byte "
                        "reference (HCOMM_BOOTSTRAP_NODES must be the same on every rank)",
                        fn, (unsigned long long)m->payload_len, tlen + sizeof(ref), sizeof(ref));
    memcpy(&ref, (const uint8_t *)m->payload + (lead ? tlen : 0), sizeof(ref));
    if (ref.magic != HC_BS_NODE_REF_MAGIC || ref.leader >= (uint32_t)bs->size ||
        (lead && ref.leader != (uint32_t)bs->rank))
        return hc_error(HCOMM_ERR_BOOTSTRAP, "%s: rank 0 sent a malformed node reference", fn);
    char name[64];
    if (lead) memcpy(bs->table, m->payload, tlen);
    uint64_t tag = hc_bs_node_tag1(bs, p, ref.epoch, name, sizeof(name));
    if (lead) {
        int readers = hc_bs_node_readers(bs, p);
        return readers > 0 ? hc_bs_node_publish(bs, fn, name, tag, bs->table, tlen, readers)
                           : HCOMM_OK;
    }
    return hc_bs_node_wait(bs, fn, name, tag, bs->table, tlen, (int)ref.leader, deadline, timeout);
}

void hc_bs_node_init(hc_bootstrap_t *bs, const char *key)
{
    static const char label[] = "hcomm bootstrap: node allgather";
    hc_auth_part_t part = {label, sizeof(label) - 1};
    uint8_t mac[HC_AUTH_MAC];
    memset(bs->key_hash, 0, sizeof(bs->key_hash));
    if (key[0] && hc_auth_mac(key, strlen(key), &part, 1, mac) == HCOMM_OK)
        memcpy(bs->key_hash, mac, HC_MIN(sizeof(mac), sizeof(bs->key_hash)));
}

/* The leader's last file goes with its bootstrap. A leader that closes
 * right after init (its own init failed: a misconfigured node map) gives its
 * readers up to HC_BS_NODE_LINGER_MS to take the table first, so that each
 * of them sees the table, and so the misconfiguration, for itself; the last
 * reader unlinks it (then ENOENT here). One that never comes (it died) costs
 * that wait once. */
#define HC_BS_NODE_LINGER_MS 2000
void hc_bs_node_close(hc_bootstrap_t *bs)
{
    if (!bs->node_file[0]) return;
    int fd = shm_open(bs->node_file, O_RDONLY, 0);
    if (fd >= 0) {
        void *p = mmap(NULL, sizeof(hc_bs_node_hdr_t), PROT_READ, MAP_SHARED, fd, 0);
        close(fd);
        if (p != MAP_FAILED) {
            hc_bs_node_hdr_t *h = p;
            for (int ms = 0; ms < HC_BS_NODE_LINGER_MS &&
                             atomic_load_explicit(&h->readers, memory_order_acquire) > 0;
                 ms++)
                usleep(1000);
            munmap(p, sizeof(hc_bs_node_hdr_t));
        }
        shm_unlink(bs->node_file);
    }
    bs->node_file[0] = 0;
}
