/*
 * Device buffers through the public API, staged at the entry points
 * (api/api_stage.c, docs/gpu.md), on the GPU model (HCOMM_GPU_MODEL=1):
 *
 *   mp_gpu_stage p2p [MAX]   send/recv, isend/irecv (completed by
 *       hcomm_test), irecv_any, device to device, host to device and device
 *       to host, sizes 0 B .. 64 MiB (or MAX bytes), every byte checked
 *       and the guard bytes past each receive buffer intact
 *   mp_gpu_stage realloc   a device buffer freed and another allocated at
 *       the same address between two allreduces: the memory-type cache
 *       looks the address up anew (a new allocation id) and both results
 *       are right; the staging counters show one copy in and one back of
 *       each byte of an in-place allreduce
 *   mp_gpu_stage nostage   (one process, no launcher) a child with
 *       HCOMM_GPU_MODEL_NO_STAGE=1 whose device-buffer allreduce reaches the
 *       CPU must die by SIGSEGV; a child with staging on passes
 *   mp_gpu_stage fault-in | fault-out   rank 1's staging copy in (or back)
 *       fails (HCOMM_GPU_MODEL_FAULT=copy:N set by the test on that rank):
 *       its error names the device and the call; the other ranks fail
 *       promptly (copy in: the communicator is revoked) or complete with
 *       the right result (copy back), never a wrong one
 */
#include "common/mp_test.h"
#include "api/api_stage.h"
#include "gpu/gpu.h"
#include "gpu/model/gpu_model_test.h"

#include <signal.h>
#include <sys/wait.h>

#define GUARD 64

static void *dev_alloc(size_t n)
{
    void *d;
    MP_OK(hc_gpu_model_test_alloc(n, &d));
    return d;
}

static void dev_fill(void *d, const void *h, size_t n)
{
    MP_OK(hc_gpu_model_test_fill(d, h, n));
}

static void dev_read(void *h, const void *d, size_t n)
{
    MP_OK(hc_gpu_model_test_read(h, d, n));
}

static uint8_t pat(size_t i, size_t n, int from)
{
    return (uint8_t)(mp_hash(i * 31 + n * 7 + (uint64_t)from) & 0xff);
}

/* One transfer of n bytes from rank 0 to rank 1 (sdev / rdev: device
 * buffers), by mode 0 blocking, 1 isend/irecv + hcomm_test, 2 irecv_any. */
static void p2p_one(size_t n, int sdev, int rdev, int mode)
{
    hcomm_comm_t w = hcomm_comm_world();
    size_t cap = n + GUARD;
    uint8_t *h = mp_xmalloc(cap);
    if (mp_rank == 0) {
        for (size_t i = 0; i < n; i++)
            h[i] = pat(i, n, 0);
        void *buf = h;
        if (sdev) {
            buf = dev_alloc(cap);
            dev_fill(buf, h, n);
        }
        if (mode == 0) {
            MP_OK(hcomm_send(buf, n, HCOMM_UINT8, 1, 7, w));
        } else {
            hcomm_request_t r;
            MP_OK(hcomm_isend(buf, n, HCOMM_UINT8, 1, 7, w, &r));
            MP_OK(hcomm_wait(r));
        }
        if (sdev) MP_OK(hc_gpu_model_test_free(buf));
    } else if (mp_rank == 1) {
        memset(h, 0xee, cap);
        void *buf = h;
        if (rdev) {
            buf = dev_alloc(cap);
            dev_fill(buf, h, cap);
        }
        if (mode == 0) {
            MP_OK(hcomm_recv(buf, n, HCOMM_UINT8, 0, 7, w));
        } else {
            hcomm_request_t r;
            int src = -5, done = 0;
            if (mode == 1)
                MP_OK(hcomm_irecv(buf, n, HCOMM_UINT8, 0, 7, w, &r));
            else
                MP_OK(hcomm_irecv_any(buf, n, HCOMM_UINT8, 7, w, &src, &r));
            double t0 = mp_now();
            while (!done && mp_now() - t0 < 60)
                MP_OK(hcomm_test(r, &done));
            if (!done) mp_fail("p2p %zu bytes: not done after 60 s", n);
            if (mode == 2 && src != 0)
                mp_fail("irecv_any %zu bytes: source expected 0 got %d", n, src);
        }
        if (rdev) {
            dev_read(h, buf, cap);
            MP_OK(hc_gpu_model_test_free(buf));
        }
        for (size_t i = 0; i < n; i++)
            if (h[i] != pat(i, n, 0)) {
                mp_fail("p2p %zu bytes (send %s, recv %s, mode %d): byte %zu expected %u got %u", n,
                        sdev ? "device" : "host", rdev ? "device" : "host", mode, i, pat(i, n, 0),
                        h[i]);
                break;
            }
        for (size_t i = n; i < cap; i++)
            if (h[i] != 0xee) {
                mp_fail("p2p %zu bytes: guard byte %zu past the receive changed", n, i - n);
                break;
            }
    }
    free(h);
}

/* max: the largest size (the rxe guest's emulated CPUs take 4 MiB) */
static int run_p2p(size_t max)
{
    size_t sizes[] = {0, 1, 7, 4096, 65537, 1 << 20, 4 << 20, 16 << 20, 64 << 20};
    int nsizes = (int)(sizeof(sizes) / sizeof(sizes[0]));
    for (int k = 0; k < nsizes && sizes[k] <= max; k++)
        for (int c = 0; c < 3; c++) { /* dev->dev, host->dev, dev->host */
            int sdev = c != 1, rdev = c != 2;
            for (int mode = 0; mode < 3; mode++)
                p2p_one(sizes[k], sdev, rdev, mode);
        }
    MP_OK(hcomm_barrier(hcomm_comm_world()));
    return mp_finish("mp_gpu_stage p2p");
}

/* An allreduce (sum of int32) over a device buffer holding rank + v. */
static void allreduce_check(void *d, size_t count, int v, const char *what)
{
    int32_t *h = mp_xmalloc(count * 4);
    for (size_t i = 0; i < count; i++)
        h[i] = mp_rank + v + (int32_t)i;
    dev_fill(d, h, count * 4);
    MP_OK(hcomm_allreduce(d, d, count, HCOMM_INT32, HCOMM_SUM, hcomm_comm_world()));
    dev_read(h, d, count * 4);
    int32_t base = mp_size * (mp_size - 1) / 2;
    for (size_t i = 0; i < count; i++)
        if (h[i] != base + mp_size * (v + (int32_t)i)) {
            mp_fail("%s: element %zu expected %d got %d", what, i, base + mp_size * (v + (int)i),
                    h[i]);
            break;
        }
    free(h);
}

static int run_realloc(void)
{
    size_t count = 4096;
    void *a = dev_alloc(count * 4);
    hc_mem_attr_t at, bt;
    MP_OK(hc_gpu_mem_type(a, count * 4, &at));
    hc_gpu_stats_t c0 = hc_gpu_stats;
    hc_api_stage_counters_t o0, o1; /* the older view of the same counters */
    hc_api_stage_counters(&o0);
    allreduce_check(a, count, 1, "first buffer");
    hc_gpu_stats_t c1 = hc_gpu_stats; /* in place: one copy in and one back, of every byte */
    hc_api_stage_counters(&o1);
    if (o1.calls != o0.calls + 1 || o1.bytes_in != o0.bytes_in + count * 4 ||
        o1.bytes_out != o0.bytes_out + count * 4)
        mp_fail("hc_api_stage_counters: expected 1 call, %zu bytes in and out; got %llu, %llu, "
                "%llu",
                count * 4, (unsigned long long)(o1.calls - o0.calls),
                (unsigned long long)(o1.bytes_in - o0.bytes_in),
                (unsigned long long)(o1.bytes_out - o0.bytes_out));
    if (c1.whole_calls != c0.whole_calls + 1 || c1.d2h_bytes != c0.d2h_bytes + count * 4 ||
        c1.h2d_bytes != c0.h2d_bytes + count * 4 || c1.d2h_copies != c0.d2h_copies + 1 ||
        c1.h2d_copies != c0.h2d_copies + 1)
        mp_fail("staging counters: expected 1 call, 1 copy of %zu bytes in and 1 out; got %llu, "
                "%llu / %llu, %llu / %llu",
                count * 4, (unsigned long long)(c1.whole_calls - c0.whole_calls),
                (unsigned long long)(c1.d2h_copies - c0.d2h_copies),
                (unsigned long long)(c1.d2h_bytes - c0.d2h_bytes),
                (unsigned long long)(c1.h2d_copies - c0.h2d_copies),
                (unsigned long long)(c1.h2d_bytes - c0.h2d_bytes));
    MP_OK(hc_gpu_model_test_free(a));
    void *b = dev_alloc(count * 4);
    if (b != a)
        mp_fail("the model did not re-use the freed address (%p then %p): the test proves "
                "nothing",
                a, b);
    MP_OK(hc_gpu_mem_type(b, count * 4, &bt));
    if (bt.alloc_id == at.alloc_id || bt.type != HC_MEM_DEVICE)
        mp_fail("re-used address: the cache answered the old allocation (id %llu, type %s)",
                (unsigned long long)bt.alloc_id, hc_mem_type_name(bt.type));
    allreduce_check(b, count, 1000, "buffer re-allocated at the same address");
    MP_OK(hc_gpu_model_test_free(b));
    MP_OK(hcomm_barrier(hcomm_comm_world()));
    return mp_finish("mp_gpu_stage realloc");
}

/* A child: one rank (no launcher), an out-of-place allreduce of device
 * buffers (one rank: a copy from sendbuf to recvbuf, by the CPU if
 * unstaged). Exits 0 when the result is right. */
static int nostage_child(int nostage)
{
    if (nostage) setenv("HCOMM_GPU_MODEL_NO_STAGE", "1", 1);
    if (hcomm_init(NULL, NULL) != HCOMM_OK) {
        fprintf(stderr, "child: hcomm_init: %s\n", hcomm_last_error());
        return 3;
    }
    mp_rank = 0;
    mp_size = 1;
    void *s = dev_alloc(256), *r = dev_alloc(256);
    int32_t h[64];
    for (int i = 0; i < 64; i++)
        h[i] = i * 3;
    dev_fill(s, h, sizeof(h));
    hcomm_status_t st = hcomm_allreduce(s, r, 64, HCOMM_INT32, HCOMM_SUM, hcomm_comm_world());
    memset(h, 0, sizeof(h));
    dev_read(h, r, sizeof(h));
    int ok = st == HCOMM_OK;
    for (int i = 0; ok && i < 64; i++)
        ok = h[i] == i * 3;
    hcomm_finalize();
    return ok && !mp_failures ? 0 : 1;
}

static int run_nostage(void)
{
    mp_rank = 0;
    for (int nostage = 1; nostage >= 0; nostage--) {
        pid_t pid = fork();
        if (pid == 0) { /* a fresh process; under ASan a SEGV must stay a SIGSEGV */
            char opts[512], arg[2] = {(char)('0' + nostage), 0};
            const char *o = getenv("ASAN_OPTIONS");
            snprintf(opts, sizeof(opts), "%s%shandle_segv=0", o ? o : "", o && *o ? ":" : "");
            setenv("ASAN_OPTIONS", opts, 1);
            execl("/proc/self/exe", "mp_gpu_stage", "nostage-child", arg, (char *)NULL);
            _exit(127);
        }
        int wst = 0;
        waitpid(pid, &wst, 0);
        if (nostage && !(WIFSIGNALED(wst) && WTERMSIG(wst) == SIGSEGV))
            mp_fail("HCOMM_GPU_MODEL_NO_STAGE=1: the unstaged allreduce expected to die by "
                    "SIGSEGV, got %s %d",
                    WIFSIGNALED(wst) ? "signal" : "exit",
                    WIFSIGNALED(wst) ? WTERMSIG(wst) : WEXITSTATUS(wst));
        if (!nostage && !(WIFEXITED(wst) && WEXITSTATUS(wst) == 0))
            mp_fail("staged allreduce of device buffers: child ended with %s %d",
                    WIFSIGNALED(wst) ? "signal" : "exit",
                    WIFSIGNALED(wst) ? WTERMSIG(wst) : WEXITSTATUS(wst));
    }
    if (!mp_failures) printf("mp_gpu_stage nostage: unstaged died by SIGSEGV, staged passed\n");
    return mp_failures ? 1 : 0;
}

/* Rank 1's copy 2 (the staging copy in: copy 1 is the test's fill) or
 * copy 3 (the copy back) fails. */
static int run_fault(int in)
{
    const char *r = getenv("HCOMM_RANK");
    if (r && atoi(r) == 1) setenv("HCOMM_GPU_MODEL_FAULT", in ? "copy:2" : "copy:3", 1);
    mp_init();
    size_t count = 65537;
    void *d = dev_alloc(count * 4);
    int32_t *h = mp_xmalloc(count * 4);
    for (size_t i = 0; i < count; i++)
        h[i] = mp_rank + (int32_t)i;
    dev_fill(d, h, count * 4);
    double t0 = mp_now();
    hcomm_status_t st = hcomm_allreduce(d, d, count, HCOMM_INT32, HCOMM_SUM, hcomm_comm_world());
    double dt = mp_now() - t0;
    const char *msg = hcomm_last_error();
    if (mp_rank == 1) {
        if (st == HCOMM_OK)
            mp_fail("fault %s: the failed copy went unnoticed", in ? "in" : "out");
        else if (!strstr(msg, "device 0") || !strstr(msg, "hcomm_allreduce"))
            mp_fail("fault: the error does not name the device and the call: %s", msg);
        else
            printf("rank 1: %s (as expected)\n", msg);
    } else if (st != HCOMM_OK) {
        if (!in)
            mp_fail("fault out: rank 1's copy back failed, yet this rank failed: %s", msg);
        else if (dt > 20)
            mp_fail("fault in: failed only after %.1f s (expected promptly): %s", dt, msg);
    } else {
        if (in) mp_fail("fault in: this rank completed although rank 1 had no input");
        dev_read(h, d, count * 4);
        int32_t base = mp_size * (mp_size - 1) / 2;
        for (size_t i = 0; i < count; i++)
            if (h[i] != base + mp_size * (int32_t)i) {
                mp_fail("fault out: element %zu expected %d got %d", i, base + mp_size * (int)i,
                        h[i]);
                break;
            }
    }
    free(h);
    MP_OK(hc_gpu_model_test_free(d));
    int ret = mp_failures ? 1 : 0;
    hcomm_finalize();
    if (!ret) printf("rank %d: fault %s: ok (%.2f s)\n", mp_rank, in ? "in" : "out", dt);
    return ret;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *what = argc > 1 ? argv[1] : "";
    if (!strcmp(what, "nostage")) return run_nostage();
    if (!strcmp(what, "nostage-child") && argc > 2) /* one child, by hand */
        return nostage_child(atoi(argv[2]));
    if (!strcmp(what, "fault-in") || !strcmp(what, "fault-out"))
        return run_fault(!strcmp(what, "fault-in"));
    if (strcmp(what, "p2p") && strcmp(what, "realloc")) {
        fprintf(stderr, "usage: mp_gpu_stage p2p [MAX_BYTES] | realloc | nostage | fault-in | "
                        "fault-out\n");
        return 2;
    }
    mp_init();
    size_t max = argc > 2 ? (size_t)strtoull(argv[2], NULL, 0) : (size_t)64 << 20;
    return !strcmp(what, "p2p") ? run_p2p(max) : run_realloc();
}
