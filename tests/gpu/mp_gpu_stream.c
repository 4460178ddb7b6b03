/*
 * Stream-ordered calls (api/api_stream.c, core/progress_thread.c,
 * docs/gpu.md "Stream-ordered calls") on the GPU model:
 *
 *   mp_gpu_stream basic   a gated stream: the test's copy filling the input,
 *       the allreduce, a copy reading the output; the call returns at once
 *       while the stream is held, and the bytes read back are right (the
 *       op waited for the fill, the read waited for the op); 1 and 65537
 *       elements, in and out of place
 *   mp_gpu_stream order   five dependent ops queued on one stream
 *       (allreduce, allreduce, broadcast, allgather, send/recv ring): right
 *       only if they ran in order, each after the one before
 *   mp_gpu_stream streams   two streams, each with its own allreduce
 *   mp_gpu_stream group   a group of stream ops (two allreduces, a
 *       reduce_scatter, an alltoallv) queued as one
 *   mp_gpu_stream misuse   NULL stream, HCOMM_PROGRESS_THREAD=0, a group
 *       on two streams, a peer out of range: refused by name, nothing queued
 *   mp_gpu_stream nobackend   without a GPU backend: refused by name
 *   mp_gpu_stream timeout   a stream whose inputs never become ready:
 *       the op fails with ERR_TIMEOUT naming it (async error, then the next
 *       call), and the stream still goes on
 *   mp_gpu_stream fault   rank 1's staging copy fails: its async error
 *       names the device and the call; the others see theirs (revoked)
 *   mp_gpu_stream kill   rank 2 dies: the others' stream allreduce fails
 *       with ERR_PEER_FAILED naming it, through the async error
 */
#include "common/mp_test.h"
#include "core/progress_thread.h"
#include "gpu/gpu.h"
#include "gpu/model/gpu_model_test.h"

#include <signal.h>
#include <sys/wait.h>

static hcomm_stream_t S(hc_gpu_stream_t s)
{
    return (hcomm_stream_t)s;
}

static void *dev_alloc(size_t n)
{
    void *d;
    MP_OK(hc_gpu_model_test_alloc(n, &d));
    return d;
}

/* A word the stream waits on (pinned for the model), 0 until opened. */
static uint32_t *gate_new(void)
{
    uint32_t *w = aligned_alloc(64, 64);
    *w = 0;
    MP_OK(hc_gpu_model_test_host_register(w, 64));
    return w;
}

static void gate_open(uint32_t *w)
{
    __atomic_store_n(w, 1, __ATOMIC_RELEASE);
}

static void gate_free(uint32_t *w)
{
    MP_OK(hc_gpu_model_test_host_unregister(w));
    free(w);
}

static void check_i32(const char *what, const int32_t *h, size_t n, int32_t (*want)(size_t))
{
    for (size_t i = 0; i < n; i++)
        if (h[i] != want(i)) {
            mp_fail("%s: element %zu expected %d got %d", what, i, want(i), h[i]);
            return;
        }
}

static int32_t sum_of_ranks_plus_i(size_t i)
{
    return mp_size * (mp_size - 1) / 2 + mp_size * (int32_t)i;
}

static void run_basic(void)
{
    hcomm_comm_t w = hcomm_comm_world();
    size_t counts[2] = {1, 65537};
    for (int c = 0; c < 2; c++)
        for (int inplace = 0; inplace < 2; inplace++) {
            size_t n = counts[c], b = n * 4;
            int32_t *hin = mp_xmalloc(b), *hout = mp_xmalloc(b);
            for (size_t i = 0; i < n; i++)
                hin[i] = mp_rank + (int32_t)i, hout[i] = -1;
            void *din = dev_alloc(b), *dout = inplace ? din : dev_alloc(b);
            hc_gpu_stream_t s;
            MP_OK(hc_gpu_model_test_stream_create(&s));
            uint32_t *g = gate_new();
            MP_OK(hc_gpu_model_test_gate(s, g, 1));
            MP_OK(hc_gpu_model_test_copy_async(din, hin, b, s));
            double t0 = mp_now();
            MP_OK(hcomm_allreduce_stream(din, dout, n, HCOMM_INT32, HCOMM_SUM, w, S(s)));
            double dt = mp_now() - t0;
            MP_OK(hc_gpu_model_test_copy_async(hout, dout, b, s));
            if (dt > 0.5) mp_fail("basic: the call took %.3f s with its stream held", dt);
            mp_sleep_ms(100);
            if (hout[0] != -1) mp_fail("basic: the output was read before the gate opened");
            gate_open(g);
            MP_OK(hc_gpu_model_test_stream_sync(s));
            check_i32(inplace ? "basic in place" : "basic", hout, n, sum_of_ranks_plus_i);
            hcomm_status_t as = HCOMM_ERR_INTERNAL;
            MP_OK(hcomm_comm_get_async_error(w, &as));
            if (as != HCOMM_OK) mp_fail("basic: async error %s", hcomm_last_error());
            MP_OK(hc_gpu_model_test_stream_destroy(s));
            gate_free(g);
            MP_OK(hc_gpu_model_test_free(din));
            if (!inplace) MP_OK(hc_gpu_model_test_free(dout));
            free(hin);
            free(hout);
        }
}

/* x = rank + 1; x = sum(x) (S1); x = sum(x) (S1 * size); broadcast from
 * rank size-1 (same everywhere); allgather x to y[size]; ring: send y[0]
 * to rank+1, receive from rank-1 into z. Each step reads the last one's
 * output: any reordering or overlap gives other numbers. */
static void run_order(void)
{
    hcomm_comm_t w = hcomm_comm_world();
    hc_gpu_stream_t s;
    MP_OK(hc_gpu_model_test_stream_create(&s));
    uint32_t *g = gate_new();
    int32_t x = mp_rank + 1, z = -1, *y = mp_xmalloc(4 * (size_t)mp_size);
    int32_t *dx = dev_alloc(4), *dy = dev_alloc(4 * (size_t)mp_size), *dz = dev_alloc(4);
    MP_OK(hc_gpu_model_test_gate(s, g, 1));
    MP_OK(hc_gpu_model_test_copy_async(dx, &x, 4, s));
    MP_OK(hcomm_allreduce_stream(dx, dx, 1, HCOMM_INT32, HCOMM_SUM, w, S(s)));
    MP_OK(hcomm_allreduce_stream(dx, dx, 1, HCOMM_INT32, HCOMM_SUM, w, S(s)));
    MP_OK(hcomm_broadcast_stream(dx, 1, HCOMM_INT32, mp_size - 1, w, S(s)));
    MP_OK(hcomm_allgather_stream(dx, dy, 1, HCOMM_INT32, w, S(s)));
    if (mp_size > 1) {
        hcomm_comm_t c = w;
        int to = (mp_rank + 1) % mp_size, from = (mp_rank + mp_size - 1) % mp_size;
        /* even ranks send first; one stream per rank orders its two */
        if (mp_rank % 2 == 0) {
            MP_OK(hcomm_send_stream(dy, 1, HCOMM_INT32, to, 5, c, S(s)));
            MP_OK(hcomm_recv_stream(dz, 1, HCOMM_INT32, from, 5, c, S(s)));
        } else {
            MP_OK(hcomm_recv_stream(dz, 1, HCOMM_INT32, from, 5, c, S(s)));
            MP_OK(hcomm_send_stream(dy, 1, HCOMM_INT32, to, 5, c, S(s)));
        }
    } else {
        MP_OK(hc_gpu_model_test_copy_async(dz, dy, 4, s));
    }
    MP_OK(hc_gpu_model_test_copy_async(&x, dx, 4, s));
    MP_OK(hc_gpu_model_test_copy_async(y, dy, 4 * (size_t)mp_size, s));
    MP_OK(hc_gpu_model_test_copy_async(&z, dz, 4, s));
    gate_open(g);
    MP_OK(hc_gpu_model_test_stream_sync(s));
    int32_t want = mp_size * (mp_size + 1) / 2 * mp_size;
    if (x != want) mp_fail("order: x expected %d got %d", want, x);
    for (int r = 0; r < mp_size; r++)
        if (y[r] != want) mp_fail("order: y[%d] expected %d got %d", r, want, y[r]);
    if (z != want) mp_fail("order: the ring's z expected %d got %d", want, z);
    MP_OK(hc_gpu_model_test_stream_destroy(s));
    gate_free(g);
    MP_OK(hc_gpu_model_test_free(dx));
    MP_OK(hc_gpu_model_test_free(dy));
    MP_OK(hc_gpu_model_test_free(dz));
    free(y);
}

static void run_streams(void)
{
    hcomm_comm_t w = hcomm_comm_world();
    hc_gpu_stream_t s[2];
    int32_t h[2], out[2] = {-1, -1};
    void *d[2];
    for (int k = 0; k < 2; k++) {
        MP_OK(hc_gpu_model_test_stream_create(&s[k]));
        d[k] = dev_alloc(4);
        h[k] = (mp_rank + 1) * (k ? 100 : 1);
        MP_OK(hc_gpu_model_test_copy_async(d[k], &h[k], 4, s[k]));
        MP_OK(hcomm_allreduce_stream(d[k], d[k], 1, HCOMM_INT32, k ? HCOMM_MAX : HCOMM_SUM, w,
                                     S(s[k])));
        MP_OK(hc_gpu_model_test_copy_async(&out[k], d[k], 4, s[k]));
    }
    for (int k = 0; k < 2; k++) {
        MP_OK(hc_gpu_model_test_stream_sync(s[k]));
        MP_OK(hc_gpu_model_test_stream_destroy(s[k]));
        MP_OK(hc_gpu_model_test_free(d[k]));
    }
    if (out[0] != mp_size * (mp_size + 1) / 2)
        mp_fail("streams: stream 0's sum expected %d got %d", mp_size * (mp_size + 1) / 2, out[0]);
    if (out[1] != mp_size * 100)
        mp_fail("streams: stream 1's max expected %d got %d", mp_size * 100, out[1]);
}

static void run_group(void)
{
    hcomm_comm_t w = hcomm_comm_world();
    size_t n = (size_t)mp_size;
    hc_gpu_stream_t s;
    MP_OK(hc_gpu_model_test_stream_create(&s));
    uint32_t *g = gate_new();
    int32_t a = mp_rank, b = 2 * mp_rank, *rs = mp_xmalloc(4 * n), rsout = -1;
    int32_t *av = mp_xmalloc(4 * n), *avout = mp_xmalloc(4 * n), ra = -1, rb = -1;
    size_t *cnt = mp_xmalloc(sizeof(size_t) * n), *dis = mp_xmalloc(sizeof(size_t) * n);
    for (size_t j = 0; j < n; j++)
        rs[j] = (int32_t)j + mp_rank, av[j] = mp_rank * 1000 + (int32_t)j, cnt[j] = 1, dis[j] = j;
    void *da = dev_alloc(4), *db = dev_alloc(4), *drs = dev_alloc(4 * n), *drso = dev_alloc(4);
    void *dav = dev_alloc(4 * n), *davo = dev_alloc(4 * n);
    MP_OK(hc_gpu_model_test_gate(s, g, 1));
    MP_OK(hc_gpu_model_test_copy_async(da, &a, 4, s));
    MP_OK(hc_gpu_model_test_copy_async(db, &b, 4, s));
    MP_OK(hc_gpu_model_test_copy_async(drs, rs, 4 * n, s));
    MP_OK(hc_gpu_model_test_copy_async(dav, av, 4 * n, s));
    MP_OK(hcomm_group_start());
    MP_OK(hcomm_allreduce_stream(da, da, 1, HCOMM_INT32, HCOMM_SUM, w, S(s)));
    MP_OK(hcomm_allreduce_stream(db, db, 1, HCOMM_INT32, HCOMM_SUM, w, S(s)));
    MP_OK(hcomm_reduce_scatter_stream(drs, drso, 1, HCOMM_INT32, HCOMM_SUM, w, S(s)));
    MP_OK(hcomm_alltoallv_stream(dav, cnt, dis, davo, cnt, dis, HCOMM_INT32, w, S(s)));
    memset(cnt, 0xff, sizeof(size_t) * n); /* copied at the call: reuse is allowed */
    MP_OK(hcomm_group_end());
    MP_OK(hc_gpu_model_test_copy_async(&ra, da, 4, s));
    MP_OK(hc_gpu_model_test_copy_async(&rb, db, 4, s));
    MP_OK(hc_gpu_model_test_copy_async(&rsout, drso, 4, s));
    MP_OK(hc_gpu_model_test_copy_async(avout, davo, 4 * n, s));
    gate_open(g);
    MP_OK(hc_gpu_model_test_stream_sync(s));
    int32_t S1 = mp_size * (mp_size - 1) / 2;
    if (ra != S1 || rb != 2 * S1)
        mp_fail("group: allreduces expected %d, %d got %d, %d", S1, 2 * S1, ra, rb);
    if (rsout != mp_size * mp_rank + S1)
        mp_fail("group: reduce_scatter expected %d got %d", mp_size * mp_rank + S1, rsout);
    for (int j = 0; j < mp_size; j++)
        if (avout[j] != j * 1000 + mp_rank)
            mp_fail("group: alltoallv block %d expected %d got %d", j, j * 1000 + mp_rank,
                    avout[j]);
    MP_OK(hc_gpu_model_test_stream_destroy(s));
    gate_free(g);
    void *all[] = {da, db, drs, drso, dav, davo};
    for (int i = 0; i < 6; i++)
        MP_OK(hc_gpu_model_test_free(all[i]));
    free(rs), free(av), free(avout), free(cnt), free(dis);
}

static void expect_refused(hcomm_status_t st, hcomm_status_t want, const char *what,
                           const char *words)
{
    if (st != want)
        mp_fail("%s: expected %s got %s (%s)", what, mp_status_name(want), mp_status_name(st),
                hcomm_last_error());
    else if (!strstr(hcomm_last_error(), words))
        mp_fail("%s: message expected to say \"%s\": %s", what, words, hcomm_last_error());
}

static void run_misuse(void)
{
    hcomm_comm_t w = hcomm_comm_world();
    void *d = dev_alloc(64);
    hc_gpu_stream_t s[2];
    MP_OK(hc_gpu_model_test_stream_create(&s[0]));
    MP_OK(hc_gpu_model_test_stream_create(&s[1]));
    expect_refused(hcomm_allreduce_stream(d, d, 1, HCOMM_INT32, HCOMM_SUM, w, NULL),
                   HCOMM_ERR_INVALID, "NULL stream", "hcomm_allreduce_stream: stream is NULL");
    expect_refused(hcomm_allreduce_stream(d, d, 1, HCOMM_INT32, HCOMM_SUM, NULL, S(s[0])),
                   HCOMM_ERR_INVALID, "NULL comm", "hcomm_allreduce_stream");
    expect_refused(hcomm_send_stream(d, 1, HCOMM_INT32, mp_size, 0, w, S(s[0])), HCOMM_ERR_INVALID,
                   "peer out of range", "peer");
    expect_refused(hcomm_allgatherv_stream(d, 1, d, NULL, NULL, HCOMM_INT32, w, S(s[0])),
                   HCOMM_ERR_INVALID, "NULL counts", "recvcounts is NULL");
    hcomm_status_t as;
    expect_refused(hcomm_comm_get_async_error(w, NULL), HCOMM_ERR_INVALID, "status_p NULL",
                   "status_p is NULL");
    /* a group on two streams: the second is refused, the first still runs */
    MP_OK(hcomm_group_start());
    MP_OK(hcomm_allreduce_stream(d, d, 1, HCOMM_INT32, HCOMM_SUM, w, S(s[0])));
    expect_refused(hcomm_allreduce_stream(d, d, 1, HCOMM_INT32, HCOMM_SUM, w, S(s[1])),
                   HCOMM_ERR_INVALID, "group on two streams", "one stream");
    MP_OK(hcomm_group_end());
    MP_OK(hc_gpu_model_test_stream_sync(s[0]));
    MP_OK(hcomm_comm_get_async_error(w, &as));
    if (as != HCOMM_OK) mp_fail("misuse: async error after the group: %s", hcomm_last_error());
    for (int k = 0; k < 2; k++)
        MP_OK(hc_gpu_model_test_stream_destroy(s[k]));
    MP_OK(hc_gpu_model_test_free(d));
}

/* HCOMM_PROGRESS_THREAD=0 (set by the test) */
static void run_nothread(void)
{
    hc_gpu_stream_t s;
    MP_OK(hc_gpu_model_test_stream_create(&s));
    int32_t *d = dev_alloc(4);
    expect_refused(
        hcomm_allreduce_stream(d, d, 1, HCOMM_INT32, HCOMM_SUM, hcomm_comm_world(), S(s)),
        HCOMM_ERR_UNSUPPORTED, "HCOMM_PROGRESS_THREAD=0", "HCOMM_PROGRESS_THREAD=0");
    MP_OK(hc_gpu_model_test_stream_destroy(s));
    MP_OK(hc_gpu_model_test_free(d));
}

/* No backend: any non-NULL handle; refused before it is looked at. */
static void run_nobackend(void)
{
    int32_t x = 1;
    expect_refused(hcomm_allreduce_stream(&x, &x, 1, HCOMM_INT32, HCOMM_SUM, hcomm_comm_world(),
                                          (hcomm_stream_t)&x),
                   HCOMM_ERR_UNSUPPORTED, "no backend", "no GPU backend is active");
}

/* HCOMM_TIMEOUT=2 (set by the test): the gate is opened only after 4 s. */
static void run_timeout(void)
{
    hcomm_comm_t w = hcomm_comm_world();
    hc_gpu_stream_t s;
    MP_OK(hc_gpu_model_test_stream_create(&s));
    uint32_t *g = gate_new();
    int32_t *d = dev_alloc(4), x = 7;
    MP_OK(hc_gpu_model_test_gate(s, g, 1));
    MP_OK(hcomm_allreduce_stream(d, d, 1, HCOMM_INT32, HCOMM_SUM, w, S(s)));
    MP_OK(hc_gpu_model_test_copy_async(d, &x, 4, s)); /* after it */
    hcomm_status_t as = HCOMM_OK;
    double t0 = mp_now();
    while (as == HCOMM_OK && mp_now() - t0 < 10) {
        MP_OK(hcomm_comm_get_async_error(w, &as));
        mp_sleep_ms(20);
    }
    expect_refused(as, HCOMM_ERR_TIMEOUT, "inputs never ready", "hcomm_allreduce_stream");
    if (!strstr(hcomm_last_error(), "inputs were not ready"))
        mp_fail("timeout: the message does not say why: %s", hcomm_last_error());
    expect_refused(hcomm_barrier_stream(w, S(s)), HCOMM_ERR_TIMEOUT, "the next call",
                   "an earlier stream-ordered operation on this communicator failed");
    gate_open(g);
    MP_OK(hc_gpu_model_test_stream_sync(s)); /* the stream went on: its done flag was written */
    x = 0;
    MP_OK(hc_gpu_model_test_read(&x, d, 4));
    if (x != 7) mp_fail("timeout: the copy after the failed op did not run (%d)", x);
    MP_OK(hc_gpu_model_test_stream_destroy(s));
    gate_free(g);
    MP_OK(hc_gpu_model_test_free(d));
}

/* Waits for the async error; returns it. */
static hcomm_status_t async_wait(hcomm_comm_t w, double limit)
{
    hcomm_status_t as = HCOMM_OK;
    double t0 = mp_now();
    while (as == HCOMM_OK && mp_now() - t0 < limit) {
        MP_OK(hcomm_comm_get_async_error(w, &as));
        if (as == HCOMM_OK) mp_sleep_ms(10);
    }
    return as;
}

static int run_fault(void)
{
    const char *r = getenv("HCOMM_RANK");
    if (r && atoi(r) == 1) setenv("HCOMM_GPU_MODEL_FAULT", "copy:2", 1);
    mp_init();
    hcomm_comm_t w = hcomm_comm_world();
    hc_gpu_stream_t s;
    MP_OK(hc_gpu_model_test_stream_create(&s));
    size_t n = 1024;
    int32_t *h = mp_xmalloc(n * 4);
    for (size_t i = 0; i < n; i++)
        h[i] = (int32_t)i;
    void *d = dev_alloc(n * 4);
    MP_OK(hc_gpu_model_test_copy_async(d, h, n * 4, s)); /* copy 1 */
    MP_OK(hcomm_allreduce_stream(d, d, n, HCOMM_INT32, HCOMM_SUM, w, S(s)));
    hc_gpu_model_test_stream_sync(s);
    hcomm_status_t as = async_wait(w, 20);
    if (as == HCOMM_OK)
        mp_fail("fault: no async error on rank %d", mp_rank);
    else if (mp_rank == 1 && (!strstr(hcomm_last_error(), "device 0") ||
                              !strstr(hcomm_last_error(), "hcomm_allreduce_stream")))
        mp_fail("fault: rank 1's error does not name the device and the call: %s",
                hcomm_last_error());
    else
        printf("rank %d: async error %s: %s\n", mp_rank, mp_status_name(as), hcomm_last_error());
    MP_OK(hc_gpu_model_test_stream_destroy(s));
    MP_OK(hc_gpu_model_test_free(d));
    free(h);
    hcomm_finalize();
    return mp_failures ? 1 : 0;
}

/* The victim's process (as conformance_mp.c's kill_wrap): hcommrun's
 * process waits for the real rank, its child, and exits 0 when that was
 * SIGKILLed as planned, so that hcommrun does not end the survivors. */
static void kill_wrap(void)
{
    const char *r = getenv("HCOMM_RANK"), *n = getenv("HCOMM_SIZE");
    if (!r || !n || atoi(r) != atoi(n) - 1) return;
    pid_t pid = fork();
    if (pid <= 0) return;
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        ;
    exit(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL ? 0 : 1);
}

static int run_kill(void)
{
    kill_wrap();
    mp_init();
    int victim = mp_size - 1;
    hcomm_comm_t w = hcomm_comm_world();
    hc_gpu_stream_t s;
    MP_OK(hc_gpu_model_test_stream_create(&s));
    void *d = dev_alloc(4);
    MP_OK(hcomm_barrier(w));
    if (mp_rank == victim) raise(SIGKILL);
    double t0 = mp_now();
    MP_OK(hcomm_allreduce_stream(d, d, 1, HCOMM_INT32, HCOMM_SUM, w, S(s)));
    hcomm_status_t as = async_wait(w, 20);
    (void)hcomm_comm_get_async_error(w, &as);
    mp_expect_peer_failed(as, t0, victim, "hcomm_allreduce_stream (async)");
    MP_OK(hc_gpu_model_test_stream_sync(s));
    MP_OK(hc_gpu_model_test_stream_destroy(s));
    MP_OK(hc_gpu_model_test_free(d));
    mp_survivors_sync(victim);
    hcomm_finalize();
    printf("rank %d: mp_gpu_stream kill: %s\n", mp_rank, mp_failures ? "FAILED" : "passed");
    return mp_failures ? 1 : 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *what = argc > 1 ? argv[1] : "";
    if (!strcmp(what, "fault")) return run_fault();
    if (!strcmp(what, "kill")) return run_kill();
    static const struct {
        const char *name;
        void (*fn)(void);
    } modes[] = {{"basic", run_basic},         {"order", run_order},    {"streams", run_streams},
                 {"group", run_group},         {"misuse", run_misuse},  {"nothread", run_nothread},
                 {"nobackend", run_nobackend}, {"timeout", run_timeout}};
    for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++)
        if (!strcmp(what, modes[i].name)) {
            mp_init();
            modes[i].fn();
            char name[64];
            snprintf(name, sizeof(name), "mp_gpu_stream %s", what);
            return mp_finish(name);
        }
    fprintf(stderr, "usage: mp_gpu_stream basic | order | streams | group | misuse | nothread | "
                    "nobackend | timeout | fault | kill\n");
    return 2;
}
