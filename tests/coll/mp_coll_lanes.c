/*
 * mp_coll_lanes: several collectives at once, on two communicators and on
 * one communicator's non-blocking queue, with point-to-point among them;
 * every byte checked; then what the network driver says each of its
 * connections carried (docs/lanes.md).
 *
 * Each round:
 *   comm A (the world): one large iallreduce (int32 sum) and NSMALL small
 *     iallreduces queued behind it on A;
 *   comm B (a split of the world, the same ranks): --nb blocking small
 *     allreduces, while
 *   point-to-point runs on A and on B at once: every rank sends NMSG
 *     messages to every other rank with TAG_ANY (one size, received with
 *     hcomm_irecv_any: the sender of each and, per sender, the order of its
 *     messages are checked: MPI's non-overtaking rule with any-source
 *     receives) and NMSG with TAG_PEER (sizes across the drivers' frame,
 *     fragment and rendezvous limits, received from that rank); half the
 *     receives are posted before the sends, half later (unexpected path).
 *
 * --expect WHAT then checks the network driver's counters (this test links
 * the library's objects to reach them and hc_p2p_lane):
 *   lanes   tcp, HCOMM_LANES=auto, n = HCOMM_CONN_PER_PEER sockets: A's and
 *           B's collective lanes go on different sockets, both ways, and
 *           every lane seen on socket s has lane % n == s;
 *   nolanes tcp, HCOMM_LANES=0: every frame carried lane 0, on socket 0,
 *           and rendezvous DATA on the other sockets as before lanes;
 *   onesock tcp, HCOMM_CONN_PER_PEER=1: both lanes on socket 0;
 *   shuffle the fake driver with HCOMM_FAKE_LANE_SHUFFLE: frames of some
 *           lane did overtake frames of another (in the job as a whole).
 *   none    no check (any driver).
 */
#include "common/mp_test.h"
#include "core/hc_core.h"

#define TAG_ANY 5
#define TAG_PEER 6
#define NMSG 8
#define NSMALL 6
#define ANY_BYTES 49152 /* the fake driver's 32 KiB frames: two fragments */
#define DEADLINE_S 60.0

static const size_t peer_sizes[] = {0, 8, 4000, 40000, 100000, 300000};
#define NPEER_SIZES (sizeof(peer_sizes) / sizeof(peer_sizes[0]))

static size_t opt_big = (size_t)2 << 20; /* int32 elements of A's large allreduce */
static int opt_rounds = 3, opt_nb = 40;
static const char *opt_expect = "none";

/* Byte j of message seq from src on comm c (0: A, 1: B) in round r. */
static inline uint8_t pat(int src, int seq, int c, int r, size_t j)
{
    uint64_t h = mp_hash(((uint64_t)(unsigned)src << 40) ^ ((uint64_t)(unsigned)seq << 20) ^
                         ((uint64_t)(unsigned)c << 16) ^ (uint64_t)(unsigned)r);
    return (uint8_t)((h >> ((j & 7) * 8)) + (j >> 3));
}

static void fill(uint8_t *b, size_t n, int src, int seq, int c, int r)
{
    for (size_t j = 0; j < n; j++)
        b[j] = pat(src, seq, c, r, j);
}

static size_t bad_byte(const uint8_t *b, size_t n, int src, int seq, int c, int r)
{
    for (size_t j = 0; j < n; j++)
        if (b[j] != pat(src, seq, c, r, j)) return j;
    return n;
}

typedef struct {
    hcomm_request_t req;
    int done;
} live_t;

/* Tests every request not done yet once; returns how many remain. */
static int poll_all(live_t *l, int n, const char *what)
{
    int left = 0;
    for (int i = 0; i < n; i++) {
        if (l[i].done) continue;
        int d = 0;
        hcomm_status_t st = hcomm_test(l[i].req, &d);
        if (st != HCOMM_OK) {
            mp_fail("%s #%d: expected OK got %s (%s)", what, i, mp_status_name(st),
                    hcomm_last_error());
            exit(1);
        }
        l[i].done = d;
        left += !d;
    }
    return left;
}

/* Point-to-point of one comm in one round. */
typedef struct {
    hcomm_comm_t comm;
    int c;                           /* 0: A, 1: B */
    uint8_t **sbuf_any, **sbuf_peer; /* [peer * NMSG + seq] */
    uint8_t **rbuf_any, **rbuf_peer;
    int *src_any; /* source of each any-source receive */
    live_t *reqs; /* sends, then receives */
    int nreq, nposted_rx;
} p2p_t;

static int p2p_nany(void)
{
    return (mp_size - 1) * NMSG;
}

static void p2p_setup(p2p_t *p, hcomm_comm_t comm, int c, int round)
{
    int n = mp_size, me = mp_rank, nany = p2p_nany();
    memset(p, 0, sizeof(*p));
    p->comm = comm;
    p->c = c;
    size_t slots = (size_t)n * NMSG;
    p->sbuf_any = calloc(slots, sizeof(void *));
    p->sbuf_peer = calloc(slots, sizeof(void *));
    p->rbuf_any = calloc((size_t)nany, sizeof(void *));
    p->rbuf_peer = calloc(slots, sizeof(void *));
    p->src_any = calloc((size_t)nany, sizeof(int));
    p->reqs = calloc(4 * slots, sizeof(live_t));
    if (!p->sbuf_any || !p->sbuf_peer || !p->rbuf_any || !p->rbuf_peer || !p->src_any || !p->reqs) {
        mp_fail("out of memory");
        exit(1);
    }
    for (int q = 0; q < n; q++) {
        if (q == me) continue;
        for (int s = 0; s < NMSG; s++) {
            size_t k = (size_t)q * NMSG + (size_t)s, psz = peer_sizes[s % NPEER_SIZES];
            p->sbuf_any[k] = mp_xmalloc(ANY_BYTES);
            fill(p->sbuf_any[k], ANY_BYTES, me, s, c, round);
            p->sbuf_peer[k] = mp_xmalloc(psz);
            fill(p->sbuf_peer[k], psz, me, s, c, round);
            p->rbuf_peer[k] = mp_xmalloc(psz);
        }
    }
    for (int i = 0; i < nany; i++) {
        p->rbuf_any[i] = mp_xmalloc(ANY_BYTES);
        p->src_any[i] = -2;
    }
}

/* Posts receives until half (first call) or all of them are posted. */
static void p2p_post_rx(p2p_t *p, bool all)
{
    int n = mp_size, me = mp_rank, nany = p2p_nany(), total = 2 * nany;
    int upto = all ? total : total / 2;
    for (; p->nposted_rx < upto; p->nposted_rx++) {
        int i = p->nposted_rx;
        live_t *l = &p->reqs[p->nreq++];
        if (i % 2 == 0) { /* any-source receives, in order */
            int a = i / 2;
            MP_OK(hcomm_irecv_any(p->rbuf_any[a], ANY_BYTES, HCOMM_UINT8, TAG_ANY, p->comm,
                                  &p->src_any[a], &l->req));
        } else { /* per-peer receives: peer-major over the others, seq minor */
            int b = i / 2, q = b / NMSG, s = b % NMSG;
            if (q >= me) q++;
            (void)n;
            size_t k = (size_t)q * NMSG + (size_t)s;
            MP_OK(hcomm_irecv(p->rbuf_peer[k], peer_sizes[s % NPEER_SIZES], HCOMM_UINT8, q,
                              TAG_PEER, p->comm, &l->req));
        }
    }
}

/* Sends of both comms, interleaved so that their frames are in flight at
 * once: every message of A next to one of B. */
static void p2p_post_tx(p2p_t *pa, p2p_t *pb)
{
    int n = mp_size, me = mp_rank;
    for (int s = 0; s < NMSG; s++)
        for (int d = 1; d < n; d++) {
            int q = (me + d) % n;
            size_t k = (size_t)q * NMSG + (size_t)s;
            for (int c = 0; c < 2; c++) {
                p2p_t *p = c ? pb : pa;
                MP_OK(hcomm_isend(p->sbuf_any[k], ANY_BYTES, HCOMM_UINT8, q, TAG_ANY, p->comm,
                                  &p->reqs[p->nreq++].req));
                MP_OK(hcomm_isend(p->sbuf_peer[k], peer_sizes[s % NPEER_SIZES], HCOMM_UINT8, q,
                                  TAG_PEER, p->comm, &p->reqs[p->nreq++].req));
            }
        }
}

static void p2p_check(p2p_t *p, int round)
{
    int n = mp_size, me = mp_rank, nany = p2p_nany();
    const char *cn = p->c ? "B" : "A";
    int *next = calloc((size_t)n, sizeof(int));
    if (!next) {
        mp_fail("out of memory");
        exit(1);
    }
    /* Receives from any source are matched in posting order: each sender's
     * messages must come in its order, 0, 1, 2, ... */
    for (int a = 0; a < nany; a++) {
        int src = p->src_any[a];
        if (src < 0 || src >= n || src == me) {
            mp_fail("round %d comm %s: any-source receive %d: source %d", round, cn, a, src);
            continue;
        }
        int seq = next[src]++;
        size_t bad = bad_byte(p->rbuf_any[a], ANY_BYTES, src, seq, p->c, round);
        if (bad != ANY_BYTES)
            mp_fail("round %d comm %s: any-source receive %d from rank %d expected message %d: "
                    "byte %zu wrong (overtaken or corrupt)",
                    round, cn, a, src, seq, bad);
    }
    for (int q = 0; q < n; q++)
        if (q != me && next[q] != NMSG)
            mp_fail("round %d comm %s: %d any-source messages from rank %d, expected %d", round, cn,
                    next[q], q, NMSG);
    for (int q = 0; q < n; q++) {
        if (q == me) continue;
        for (int s = 0; s < NMSG; s++) {
            size_t k = (size_t)q * NMSG + (size_t)s, psz = peer_sizes[s % NPEER_SIZES];
            size_t bad = bad_byte(p->rbuf_peer[k], psz, q, s, p->c, round);
            if (bad != psz)
                mp_fail("round %d comm %s: message %d (%zu B) from rank %d: byte %zu wrong", round,
                        cn, s, psz, q, bad);
        }
    }
    free(next);
}

static void p2p_free(p2p_t *p)
{
    int n = mp_size, nany = p2p_nany();
    for (int i = 0; i < n * NMSG; i++) {
        free(p->sbuf_any[i]);
        free(p->sbuf_peer[i]);
        free(p->rbuf_peer[i]);
    }
    for (int i = 0; i < nany; i++)
        free(p->rbuf_any[i]);
    free(p->sbuf_any);
    free(p->sbuf_peer);
    free(p->rbuf_any);
    free(p->rbuf_peer);
    free(p->src_any);
    free(p->reqs);
}

static int64_t small_in(int rank, int round, int i, size_t j)
{
    return (int64_t)rank * 1000003 + (int64_t)round * 7919 + (int64_t)i * 131 + (int64_t)j;
}

static int64_t small_sum(int round, int i, size_t j)
{
    int64_t s = 0;
    for (int r = 0; r < mp_size; r++)
        s += small_in(r, round, i, j);
    return s;
}

static void round_run(hcomm_comm_t a, hcomm_comm_t b, int round)
{
    int n = mp_size, me = mp_rank;
    /* A: the large allreduce, then small ones behind it on A's queue. */
    int32_t *big = mp_xmalloc(opt_big * 4), *bigr = mp_xmalloc(opt_big * 4);
    for (size_t i = 0; i < opt_big; i++)
        big[i] = (me + 1) * (int32_t)(i % 1000) + round;
    live_t acoll[1 + NSMALL] = {{0}};
    MP_OK(hcomm_iallreduce(big, bigr, opt_big, HCOMM_INT32, HCOMM_SUM, a, &acoll[0].req));
    int64_t *sin[NSMALL], *sout[NSMALL];
    for (int k = 0; k < NSMALL; k++) {
        size_t cnt = 1 + (size_t)k * 37;
        sin[k] = mp_xmalloc(cnt * 8);
        sout[k] = mp_xmalloc(cnt * 8);
        for (size_t j = 0; j < cnt; j++)
            sin[k][j] = small_in(me, round, 1000 + k, j);
        MP_OK(hcomm_iallreduce(sin[k], sout[k], cnt, HCOMM_INT64, HCOMM_SUM, a, &acoll[1 + k].req));
    }
    /* Point-to-point on A and B. */
    p2p_t pa, pb;
    p2p_setup(&pa, a, 0, round);
    p2p_setup(&pb, b, 1, round);
    p2p_post_rx(&pa, false);
    p2p_post_rx(&pb, false);
    p2p_post_tx(&pa, &pb);
    /* B: blocking small allreduces while all of that is in flight. */
    int during = 0;
    for (int i = 0; i < opt_nb; i++) {
        size_t cnt = 1 + (size_t)(i % 16);
        int64_t in[16], out[16];
        for (size_t j = 0; j < cnt; j++)
            in[j] = small_in(me, round, i, j);
        MP_OK(hcomm_allreduce(in, out, cnt, HCOMM_INT64, HCOMM_SUM, b));
        for (size_t j = 0; j < cnt; j++)
            if (out[j] != small_sum(round, i, j)) {
                mp_fail("round %d: allreduce %d on B element %zu: expected %lld got %lld", round, i,
                        j, (long long)small_sum(round, i, j), (long long)out[j]);
                break;
            }
        if (i == opt_nb / 2) {
            p2p_post_rx(&pa, true);
            p2p_post_rx(&pb, true);
        }
        during += !acoll[0].done;
        poll_all(acoll, 1 + NSMALL, "iallreduce on A");
        poll_all(pa.reqs, pa.nreq, "p2p on A");
        poll_all(pb.reqs, pb.nreq, "p2p on B");
    }
    p2p_post_rx(&pa, true);
    p2p_post_rx(&pb, true);
    double deadline = mp_now() + DEADLINE_S;
    while (poll_all(acoll, 1 + NSMALL, "iallreduce on A") + poll_all(pa.reqs, pa.nreq, "p2p on A") +
               poll_all(pb.reqs, pb.nreq, "p2p on B") >
           0) {
        if (mp_now() > deadline) {
            mp_fail("round %d: requests not done after %.0f s", round, DEADLINE_S);
            exit(1);
        }
    }
    printf("rank %d: round %d: %d of %d allreduces on B ran while A's %zu-byte allreduce was in "
           "flight\n",
           me, round, during, opt_nb, opt_big * 4);
    int64_t nsum = (int64_t)n * (n + 1) / 2;
    for (size_t i = 0; i < opt_big; i++) {
        int32_t want = (int32_t)(nsum * (int64_t)(i % 1000) + (int64_t)n * round);
        if (bigr[i] != want) {
            mp_fail("round %d: large allreduce on A element %zu: expected %d got %d", round, i,
                    want, bigr[i]);
            break;
        }
    }
    for (int k = 0; k < NSMALL; k++) {
        size_t cnt = 1 + (size_t)k * 37;
        for (size_t j = 0; j < cnt; j++)
            if (sout[k][j] != small_sum(round, 1000 + k, j)) {
                mp_fail("round %d: small iallreduce %d on A element %zu: expected %lld got %lld",
                        round, k, j, (long long)small_sum(round, 1000 + k, j),
                        (long long)sout[k][j]);
                break;
            }
        free(sin[k]);
        free(sout[k]);
    }
    p2p_check(&pa, round);
    p2p_check(&pb, round);
    p2p_free(&pa);
    p2p_free(&pb);
    free(big);
    free(bigr);
}

/* ---- the driver's counters ------------------------------------------------------------ */

static struct {
    char name[48];
    uint64_t v;
} kvs[256];
static int nkv;

static void kv_cb(const char *name, uint64_t v, void *arg)
{
    (void)arg;
    if (nkv < (int)(sizeof(kvs) / sizeof(kvs[0]))) {
        snprintf(kvs[nkv].name, sizeof(kvs[nkv].name), "%s", name);
        kvs[nkv++].v = v;
    }
}

static uint64_t kv(const char *fmt, int i)
{
    char name[48];
    snprintf(name, sizeof(name), fmt, i);
    for (int k = 0; k < nkv; k++)
        if (!strcmp(kvs[k].name, name)) return kvs[k].v;
    return 0;
}

static const char *net_counters(void)
{
    for (int i = 0; i < hc_ctx.ndrvs; i++) {
        hc_drv_t *d = hc_ctx.drvs[i];
        if (d->ops->scope == HC_DRV_SCOPE_NET) {
            d->ops->counters(d, kv_cb, NULL);
            return d->ops->name;
        }
    }
    return NULL;
}

static void expect_lanes(hcomm_comm_t a, hcomm_comm_t b)
{
    const char *drv = net_counters();
    if (!strcmp(opt_expect, "shuffle")) {
        int64_t mine = drv && !strcmp(drv, "fake") ? (int64_t)kv("frames_overtaken", 0) : 0, all;
        MP_OK(hcomm_allreduce(&mine, &all, 1, HCOMM_INT64, HCOMM_SUM, hcomm_comm_world()));
        printf("rank %d: %lld frames overtook another lane's here, %lld in the job\n", mp_rank,
               (long long)mine, (long long)all);
        if (!drv || strcmp(drv, "fake") || all == 0)
            mp_fail("--expect shuffle: driver %s, %lld frames overtaken in the job (expected the "
                    "fake driver and some)",
                    drv ? drv : "(none)", (long long)all);
        return;
    }
    if (!drv || strcmp(drv, "tcp")) {
        mp_fail("--expect %s: the network driver is %s, expected tcp", opt_expect,
                drv ? drv : "(none)");
        return;
    }
    const char *env = getenv("HCOMM_CONN_PER_PEER");
    int nsock = env ? atoi(env) : 4;
    unsigned la = hc_p2p_lane(a->ctx_id | HC_CTX_COLL), lb = hc_p2p_lane(b->ctx_id | HC_CTX_COLL);
    for (int s = 0; s < nsock; s++)
        printf("rank %d: tcp socket %d: tx %llu frames (lanes %#llx), rx %llu frames (lanes "
               "%#llx)\n",
               mp_rank, s, (unsigned long long)kv("socket%d_tx_frames", s),
               (unsigned long long)kv("socket%d_tx_lanes", s),
               (unsigned long long)kv("socket%d_rx_frames", s),
               (unsigned long long)kv("socket%d_rx_lanes", s));
    if (!strcmp(opt_expect, "lanes")) {
        printf("rank %d: comm A's collectives on lane %u, comm B's on lane %u\n", mp_rank, la, lb);
        if (la % (unsigned)nsock == lb % (unsigned)nsock) {
            mp_fail("lanes %u and %u map to one socket of %d: the test cannot tell", la, lb, nsock);
            return;
        }
        for (int s = 0; s < nsock; s++) {
            uint64_t m = kv("socket%d_tx_lanes", s) | kv("socket%d_rx_lanes", s);
            for (unsigned l = 0; l < HC_FRAME_LANES; l++)
                if ((m & (1ull << l)) && l % (unsigned)nsock != (unsigned)s)
                    mp_fail("lane %u seen on socket %d, expected on socket %u", l, s,
                            l % (unsigned)nsock);
        }
        const struct {
            const char *name;
            unsigned lane;
        } want[] = {{"A", la}, {"B", lb}};
        for (int k = 0; k < 2; k++) {
            int s = (int)(want[k].lane % (unsigned)nsock);
            if (!(kv("socket%d_tx_lanes", s) & (1ull << want[k].lane)) ||
                !(kv("socket%d_rx_lanes", s) & (1ull << want[k].lane)))
                mp_fail("comm %s's collective lane %u: not both sent and received on socket %d",
                        want[k].name, want[k].lane, s);
        }
    } else if (!strcmp(opt_expect, "nolanes")) {
        uint64_t others = 0;
        for (int s = 0; s < nsock; s++) {
            uint64_t m = kv("socket%d_tx_lanes", s) | kv("socket%d_rx_lanes", s);
            if (m & ~1ull)
                mp_fail("HCOMM_LANES=0: socket %d carried lanes %#llx, expected lane 0 only", s,
                        (unsigned long long)m);
            if (s > 0) /* a ring sends to one neighbour and receives from another */
                others += kv("socket%d_rx_frames", s) + kv("socket%d_tx_frames", s);
        }
        if (!kv("socket%d_rx_frames", 0)) mp_fail("HCOMM_LANES=0: nothing received on socket 0");
        if (nsock > 1 && !others)
            mp_fail("HCOMM_LANES=0: no DATA frame sent or received on sockets 1..%d", nsock - 1);
    } else if (!strcmp(opt_expect, "onesock")) {
        uint64_t m = kv("socket%d_rx_lanes", 0);
        if (!(m & (1ull << la)) || !(m & (1ull << lb)))
            mp_fail("one socket: lanes %u and %u expected on socket 0, got lanes %#llx", la, lb,
                    (unsigned long long)m);
        for (int s = 1; s < HC_FRAME_LANES; s++)
            if (kv("socket%d_tx_frames", s) || kv("socket%d_rx_frames", s))
                mp_fail("one socket: frames on socket %d", s);
    } else {
        mp_fail("--expect %s: not lanes, nolanes, onesock, shuffle or none", opt_expect);
    }
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--expect") && i + 1 < argc)
            opt_expect = argv[++i];
        else if (!strcmp(argv[i], "--big") && i + 1 < argc)
            opt_big = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            opt_rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--nb") && i + 1 < argc)
            opt_nb = atoi(argv[++i]);
        else {
            fprintf(stderr,
                    "usage: %s [--expect lanes|nolanes|onesock|shuffle|none] [--big N] "
                    "[--rounds N] [--nb N]: bad argument %s\n",
                    argv[0], argv[i]);
            return 2;
        }
    }
    if (opt_big < 1 || opt_rounds < 1 || opt_nb < 2) {
        fprintf(stderr, "%s: --big must be >= 1, --rounds >= 1, --nb >= 2\n", argv[0]);
        return 2;
    }
    mp_init();
    if (mp_size < 2) {
        printf("skipped: needs 2 ranks or more\n");
        hcomm_finalize();
        return 77;
    }
    hcomm_comm_t a = hcomm_comm_world(), b;
    MP_OK(hcomm_comm_split(a, 0, mp_rank, &b));
    for (int r = 0; r < opt_rounds; r++)
        round_run(a, b, r);
    MP_OK(hcomm_barrier(a));
    if (strcmp(opt_expect, "none")) expect_lanes(a, b);
    MP_OK(hcomm_comm_free(b));
    return mp_finish("mp_coll_lanes");
}
