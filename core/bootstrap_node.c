/*
 * The bootstrap's allgather by node (hc_bootstrap_allgather_nodes): rank 0
 * gathers every rank's part as the plain allgather does, but sends the
 * result once per node, to the node's lowest rank (its leader), which
 * publishes it in a shared-memory file; the node's other ranks read it
 * there. Rank 0 thus sends (nodes - 1) tables instead of (N - 1): O(N x
 * nodes) bytes, O(N) on one node, where the star sent O(N^2).
 *
 * The file: /dev/shm/hcomm-ag-<tag>, mode 0600 (this user only), the tag
 * a hash of the job key, round 1's table (every rank's pid and host: one
 * launch's), the call's number and the leader's rank, so that neither another job nor a
 * file a crashed run left behind is ever read; the header repeats the tag
 * and the length. The leader fills it, then sets `ready` (release); a
 * reader maps it once it exists, waits for `ready` (acquire), copies, and
 * the last of the node's readers unlinks it (the leader also unlinks it when
 * its bootstrap closes, for a reader that died first). While a reader
 * waits it keeps reading its connection to rank 0: an ABORT (the job
 * failed) or rank 0's exit ends the wait at once, with rank 0's reason.
 */
#include "core/bootstrap_int.h"
#include "base/auth.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define HC_BS_NODE_MAGIC 0x68636f6d6d41474eull /* "hcommAGN" */

typedef struct {
    uint64_t magic;
    uint64_t tag;
    uint64_t len;            /* table bytes after the header */
    _Atomic uint32_t ready;  /* 1: the table is there */
    _Atomic int32_t readers; /* readers that have not copied it yet */
    uint8_t pad[32];
} hc_bs_node_hdr_t;

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
static uint64_t hc_bs_node_tag(const hc_bootstrap_t *bs, int leader, char *name, size_t cap)
{
    uint64_t h = hc_bs_fnv(0xcbf29ce484222325ull, bs->key_hash, sizeof(bs->key_hash));
    h = hc_bs_fnv(h, bs->table, bs->blob_len * (size_t)bs->size);
    h = hc_bs_fnv(h, &bs->node_calls, sizeof(bs->node_calls));
    h = hc_bs_fnv(h, &leader, sizeof(leader));
    snprintf(name, cap, "/hcomm-ag-%016llx", (unsigned long long)h);
    return h;
}

/* The leader: the table into a new file for `readers` local ranks. */
static hcomm_status_t hc_bs_node_publish(hc_bootstrap_t *bs, const char *fn, const char *name,
                                         uint64_t tag, const void *table, size_t len, int readers)
{
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
    memcpy(h + 1, table, len);
    atomic_store_explicit(&h->readers, readers, memory_order_relaxed);
    atomic_store_explicit(&h->ready, 1, memory_order_release);
    munmap(p, total);
    snprintf(bs->node_file, sizeof(bs->node_file), "%s", name);
    return HCOMM_OK;
}

/* A reader: one look at the file; 1 when the table was copied to out. */
static int hc_bs_node_try(const char *name, uint64_t tag, void *out, size_t len, char *why,
                          size_t whycap)
{
    int fd = shm_open(name, O_RDWR, 0);
    if (fd < 0) {
        snprintf(why, whycap, "%s", errno == ENOENT ? "not there yet" : strerror(errno));
        return errno == ENOENT ? 0 : -1;
    }
    size_t total = sizeof(hc_bs_node_hdr_t) + len;
    struct stat st;
    void *p = MAP_FAILED;
    if (fstat(fd, &st) == 0 && (size_t)st.st_size == total)
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
    int me = node_of_rank[bs->rank], leader = -1, locals = 0;
    bool *to = calloc((size_t)bs->size, sizeof(bool)); /* rank 0: the other nodes' leaders */
    if (to == NULL) return hc_error(HCOMM_ERR_NO_MEMORY, "%s: no memory", fn);
    for (int r = 0; r < bs->size; r++) {
        int n = node_of_rank[r];
        bool first = true;
        for (int q = 0; q < r && first; q++)
            first = node_of_rank[q] != n;
        to[r] = first && n != node_of_rank[0];
        if (n != me) continue;
        locals++;
        if (leader < 0) leader = r;
    }
    char name[64];
    uint64_t tag = hc_bs_node_tag(bs, leader, name, sizeof(name));
    bs->node_calls++;
    hcomm_status_t st;
    if (bs->rank == leader) {
        st = hc_bs_allgather(bs, fn, in, len, out, to, timeout_sec);
        if (st == HCOMM_OK && locals > 1)
            st = hc_bs_node_publish(bs, fn, name, tag, out, len * (size_t)bs->size, locals - 1);
    } else {
        double deadline = hc_time_sec() + timeout_sec;
        st = hc_bs_allgather_send(bs, fn, in, len, deadline);
        if (st == HCOMM_OK)
            st = hc_bs_node_wait(bs, fn, name, tag, out, len * (size_t)bs->size, leader, deadline,
                                 timeout_sec);
        if (st != HCOMM_OK) bs->dead = st;
    }
    free(to);
    return st;
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

void hc_bs_node_close(hc_bootstrap_t *bs)
{
    if (bs->node_file[0]) shm_unlink(bs->node_file); /* ENOENT: every reader had it */
    bs->node_file[0] = 0;
}
