/*
 * GPUDirect RDMA by dmabuf (core/gdr.c, docs/gpu.md "GPUDirect RDMA") on
 * the GPU model (HCOMM_GPU_MODEL=1), 2 ranks on 2 fake nodes over the fake
 * driver or the mlx5 queue model, whose "NIC" maps the model's dmabuf fd;
 * and IPC inside a node (the same cases, 2 ranks on one node over shm,
 * HCOMM_GPU_IPC instead of HCOMM_GDR: the peer's allocation imported and
 * copied device to device):
 *
 *   mp_gpu_gdr p2p direct|staged   rank 0 sends to rank 1, sizes around the
 *       connection's eager limit up to 64 MiB, device->device,
 *       host->device and device->host, blocking and isend/irecv; every byte
 *       and the guard bytes checked. direct (HCOMM_GDR=1 or auto on a
 *       driver that moves device memory): above the eager size no staging
 *       copy on either rank and each device side counted its bytes as
 *       direct RMA (hc_stats.gdr_bytes); at eager sizes the send is staged
 *       and the device receive is copied by the GPU dispatch, unstaged.
 *       staged (HCOMM_GDR=0): no direct byte, every device side staged.
 *   mp_gpu_gdr p2p streamed   the same under auto on a driver that moves
 *       host memory only and streams its rendezvous (tcp): a device send
 *       goes through host staging (each byte copied out once), of eager
 *       size whole (counted in hc_stats.gdr_staged), above it filled frame
 *       by frame as its stream goes (counted in hc_stats.gdr_streamed); a
 *       device receive is never staged, at any size: every frame goes into
 *       it by the GPU dispatch (counted in gdr_streamed); no direct RMA
 *       byte.
 *   mp_gpu_gdr realloc   a device buffer on each side is registered by a
 *       transfer, freed, and a new one allocated at the same address (the
 *       model re-uses addresses) with other bytes: the second transfer
 *       must carry the new bytes (a stale registration maps the old
 *       memory) and go direct again
 *   mp_gpu_gdr refused WHY   HCOMM_GDR=1 where a call cannot go direct (a
 *       driver that moves host memory only, a device without dmabuf
 *       export): a device send and a device receive fail at once with
 *       ERR_UNSUPPORTED naming HCOMM_GDR=1 and WHY; host buffers still work
 *   mp_gpu_gdr nostream  HCOMM_GDR=1, HCOMM_RNDV=stream: a device sender
 *       is never streamed by the CPU: both sides fail by name, no hang
 *   mp_gpu_gdr fault_stream send   the same on the sending side: rank 0's
 *       third device copy fails in the middle of a 4 MiB streamed send;
 *       its send fails naming the device, rank 1's receive fails naming
 *       rank 0 (told by a NACK), no hang; the next transfer is whole
 *   mp_gpu_gdr fault_stream   (a driver that streams: tcp) rank 1's third
 *       device copy fails (HCOMM_GPU_MODEL_FAULT=copy:3, set by the test):
 *       a frame in the middle of a 4 MiB streamed receive; the receive
 *       fails naming the device, no hang, and the next 4 MiB transfer
 *       (device to device) carries every byte
 *   mp_gpu_gdr fault     rank 1's first device copy fails
 *       (HCOMM_GPU_MODEL_FAULT=copy:1, set by the test): an eager message
 *       into its direct device receive fails naming the device, then a
 *       large direct transfer still works
 */
#include "common/mp_test.h"
#include "api/api_stage.h"
#include "core/hc_core.h"
#include "core/stats.h"
#include "gpu/gpu.h"
#include "gpu/model/gpu_model_test.h"

#define GUARD 64

static void *dev_alloc(size_t n)
{
    void *d = NULL;
    MP_OK(hc_gpu_model_test_alloc(n, &d));
    return d;
}

static uint8_t pat(size_t i, size_t n, int salt)
{
    return (uint8_t)(mp_hash(i * 31 + n * 7 + (uint64_t)salt) & 0xff);
}

typedef struct {
    uint64_t staged, gdr;
} counts_t;

static counts_t counts_now(void)
{
    hc_api_stage_counters_t c;
    hc_api_stage_counters(&c);
    return (counts_t){c.bytes_in + c.bytes_out, hc_stats.gdr_bytes};
}

static size_t eager_max(void)
{
    return hc_core_conn(1 - mp_rank)->eager_max;
}

/* Rank 0 sends n bytes (pattern salt) to rank 1; *dev_p: the side's device
 * buffer to use (allocated when NULL), kept for the caller. */
static void xfer(size_t n, bool dev, int mode, int salt, void **dev_p)
{
    hcomm_comm_t w = hcomm_comm_world();
    size_t cap = n + GUARD;
    uint8_t *h = mp_xmalloc(cap);
    void *buf = h;
    if (dev) buf = *dev_p ? *dev_p : (*dev_p = dev_alloc(cap));
    if (mp_rank == 0) {
        for (size_t i = 0; i < n; i++)
            h[i] = pat(i, n, salt);
        if (dev) MP_OK(hc_gpu_model_test_fill(buf, h, n));
    } else {
        memset(h, 0xee, cap);
        if (dev) MP_OK(hc_gpu_model_test_fill(buf, h, cap));
    }
    hcomm_request_t r;
    if (mode == 0)
        MP_OK(mp_rank == 0 ? hcomm_send(buf, n, HCOMM_UINT8, 1, 7, w)
                           : hcomm_recv(buf, n, HCOMM_UINT8, 0, 7, w));
    else {
        MP_OK(mp_rank == 0 ? hcomm_isend(buf, n, HCOMM_UINT8, 1, 7, w, &r)
                           : hcomm_irecv(buf, n, HCOMM_UINT8, 0, 7, w, &r));
        MP_OK(hcomm_wait(r));
    }
    if (mp_rank == 1) {
        if (dev) MP_OK(hc_gpu_model_test_read(h, buf, cap));
        for (size_t i = 0; i < n; i++)
            if (h[i] != pat(i, n, salt)) {
                mp_fail("%zu bytes (%s receive, mode %d, salt %d): byte %zu expected %u got %u", n,
                        dev ? "device" : "host", mode, salt, i, pat(i, n, salt), h[i]);
                break;
            }
        for (size_t i = n; i < cap; i++)
            if (h[i] != 0xee) {
                mp_fail("%zu bytes: guard byte %zu past the receive changed", n, i - n);
                break;
            }
    }
    free(h);
}

enum { DIRECT, STAGED, STREAMED };

/* One transfer and what it must have cost this rank (path: DIRECT...). */
static void p2p_one(size_t n, int sdev, int rdev, int mode, int path)
{
    bool direct = path == DIRECT;
    bool dev = mp_rank == 0 ? sdev : rdev;
    void *d = NULL;
    counts_t a = counts_now();
    xfer(n, dev, mode, 0, &d);
    counts_t b = counts_now();
    if (d) MP_OK(hc_gpu_model_test_free(d));
    uint64_t staged = b.staged - a.staged, gdr = b.gdr - a.gdr;
    /* A send of eager size is staged; a direct receive never is. */
    bool want_direct = dev && (direct || path == STREAMED) && (mp_rank == 1 || n > eager_max());
    if (path == STREAMED && mp_rank == 0) want_direct = false; /* a send is always staged */
    uint64_t want_gdr = want_direct && direct && n > eager_max() ? n : 0;
    uint64_t want_staged = dev && !want_direct ? n : 0;
    if (gdr != want_gdr || staged != want_staged)
        mp_fail("%zu bytes (send %s, recv %s, mode %d, eager max %zu): direct RMA bytes %llu "
                "(want %llu), staged bytes %llu (want %llu)",
                n, sdev ? "device" : "host", rdev ? "device" : "host", mode, eager_max(),
                (unsigned long long)gdr, (unsigned long long)want_gdr, (unsigned long long)staged,
                (unsigned long long)want_staged);
}

static int run_p2p(int path)
{
    bool direct = path == DIRECT;
    uint64_t dev_recvs = 0, dev_sends_rndv = 0;
    /* larger messages go by rendezvous: tcp's frames (512 KiB) pass its eager limit */
    size_t rndv_min = HC_MAX(eager_max(), hc_core_conn(1 - mp_rank)->max_frame);
    size_t e = eager_max();
    size_t sizes[] = {1, e, e + 1, 1 << 20, (4 << 20) + 3, 64 << 20};
    int nsizes = (int)(sizeof(sizes) / sizeof(sizes[0]));
    for (int k = 0; k < nsizes; k++)
        for (int c = 0; c < 3; c++) /* dev->dev, host->dev, dev->host */
            for (int mode = 0; mode < 2; mode++) {
                if (sizes[k] == (64u << 20) && (c != 0 || mode != 0)) continue;
                p2p_one(sizes[k], c != 1, c != 2, mode, path);
                dev_recvs += c != 2;
                dev_sends_rndv += c != 1 && sizes[k] > rndv_min;
            }
    printf("rank %d: direct RMA %llu bytes in %llu rendezvous, %llu calls staged by auto, %llu "
           "calls streamed\n",
           mp_rank, (unsigned long long)hc_stats.gdr_bytes, (unsigned long long)hc_stats.gdr_rndv,
           (unsigned long long)hc_stats.gdr_staged, (unsigned long long)hc_stats.gdr_streamed);
    uint64_t want_streamed =
        path != STREAMED ? 0 : mp_rank == 1 ? dev_recvs : dev_sends_rndv;
    if (hc_stats.gdr_streamed != want_streamed)
        mp_fail("%llu device calls counted as streamed, want %llu",
                (unsigned long long)hc_stats.gdr_streamed, (unsigned long long)want_streamed);
    /* Staged: by auto (counted: a driver that moves host memory only) or by
     * HCOMM_GDR=0 / HCOMM_GPU_IPC=0 (nothing to count). The node driver's
     * knob is HCOMM_GPU_IPC, the network drivers' HCOMM_GDR. */
    bool node = hc_core_conn(1 - mp_rank)->ops->scope == HC_DRV_SCOPE_NODE;
    hc_gdr_mode_t m = node ? hc_ipc_mode : hc_gdr_mode;
    bool staged_by_auto = m == HC_GDR_AUTO && (path == STAGED || mp_rank == 0);
    if (!direct && staged_by_auto != (hc_stats.gdr_staged > 0))
        mp_fail("p2p staged under %s=%d: %llu calls counted as staged by auto",
                node ? "HCOMM_GPU_IPC" : "HCOMM_GDR", (int)m,
                (unsigned long long)hc_stats.gdr_staged);
    MP_OK(hcomm_barrier(hcomm_comm_world()));
    return mp_finish(direct             ? "mp_gpu_gdr p2p direct"
                     : path == STREAMED ? "mp_gpu_gdr p2p streamed"
                                        : "mp_gpu_gdr p2p staged");
}

/* Free a registered device buffer, allocate another at the same address
 * holding other bytes, and move it again. */
static uint64_t model_imports(void)
{
    hc_gpu_model_counters_t c;
    hc_gpu_model_test_counters(&c);
    return c.imports;
}

static int run_realloc(void)
{
    size_t n = (1 << 20) + 5;
    void *d = NULL;
    /* Over shm the receiver imports the sender's allocation (IPC): once for
     * two transfers of one allocation, once more for the new allocation at
     * the old address (an import of the freed one must not be used). */
    bool ipc = hc_core_conn(1 - mp_rank)->ops->scope == HC_DRV_SCOPE_NODE && mp_rank == 1;
    uint64_t i0 = model_imports();
    xfer(n, true, 0, 1, &d);
    uint64_t i1 = model_imports();
    xfer(n, true, 0, 4, &d);
    uint64_t i2 = model_imports();
    void *old = d;
    MP_OK(hc_gpu_model_test_free(d));
    d = dev_alloc(n + GUARD);
    if (d != old) mp_fail("realloc: the model did not re-use %p (got %p): nothing tested", old, d);
    counts_t a = counts_now();
    xfer(n, true, 1, 2, &d);
    counts_t b = counts_now();
    uint64_t i3 = model_imports();
    if (b.gdr - a.gdr != n || b.staged != a.staged)
        mp_fail("realloc: the second transfer was not direct (%llu RMA bytes, %llu staged)",
                (unsigned long long)(b.gdr - a.gdr), (unsigned long long)(b.staged - a.staged));
    if (ipc && (i1 - i0 != 1 || i2 != i1 || i3 - i2 != 1))
        mp_fail("realloc: IPC imports %llu, %llu, %llu for the first, the repeated and the "
                "re-allocated transfer (want 1, 0, 1)",
                (unsigned long long)(i1 - i0), (unsigned long long)(i2 - i1),
                (unsigned long long)(i3 - i2));
    MP_OK(hc_gpu_model_test_free(d));
    MP_OK(hcomm_barrier(hcomm_comm_world()));
    return mp_finish("mp_gpu_gdr realloc");
}

/* HCOMM_GDR=1 where a call cannot go direct; the error says why (want). */
static int run_refused(const char *want)
{
    hcomm_comm_t w = hcomm_comm_world();
    size_t n = 1 << 20;
    void *d = dev_alloc(n);
    hcomm_status_t st = mp_rank == 0 ? hcomm_send(d, n, HCOMM_UINT8, 1, 7, w)
                                     : hcomm_recv(d, n, HCOMM_UINT8, 0, 7, w);
    const char *msg = hcomm_last_error();
    if (st != HCOMM_ERR_UNSUPPORTED || !strstr(msg, "HCOMM_GDR=1") || !strstr(msg, want))
        mp_fail("refused: %s, \"%s\" (want ERR_UNSUPPORTED naming HCOMM_GDR=1 and \"%s\")",
                hcomm_strerror(st), msg, want);
    else
        printf("rank %d: %s (as expected)\n", mp_rank, msg);
    MP_OK(hc_gpu_model_test_free(d));
    uint8_t *h = mp_xmalloc(n);
    memset(h, mp_rank, n);
    MP_OK(mp_rank == 0 ? hcomm_send(h, n, HCOMM_UINT8, 1, 8, w)
                       : hcomm_recv(h, n, HCOMM_UINT8, 0, 8, w));
    if (mp_rank == 1 && h[n - 1] != 0) mp_fail("refused: the host transfer after it is wrong");
    free(h);
    MP_OK(hcomm_barrier(w));
    return mp_finish("mp_gpu_gdr refused");
}

/* HCOMM_RNDV=stream: a device sender must not be streamed. */
static int run_nostream(void)
{
    hcomm_comm_t w = hcomm_comm_world();
    size_t n = 1 << 20;
    void *d = mp_rank == 0 ? dev_alloc(n) : mp_xmalloc(n);
    hcomm_status_t st = mp_rank == 0 ? hcomm_send(d, n, HCOMM_UINT8, 1, 7, w)
                                     : hcomm_recv(d, n, HCOMM_UINT8, 0, 7, w);
    const char *msg = hcomm_last_error();
    const char *want = mp_rank == 0 ? "neither get nor ask for a write of device memory"
                                    : "a stream would read it with the CPU";
    if (st == HCOMM_OK || !strstr(msg, want))
        mp_fail("nostream: %s, \"%s\" (want a failure saying \"%s\")", hcomm_strerror(st), msg,
                want);
    else
        printf("rank %d: %s (as expected)\n", mp_rank, msg);
    if (mp_rank == 0)
        MP_OK(hc_gpu_model_test_free(d));
    else
        free(d);
    MP_OK(hcomm_barrier(w));
    return mp_finish("mp_gpu_gdr nostream");
}

/* Rank 0 sends n host bytes h; rank 1 receives them into a device buffer
 * whose copy fails (the model's fault): the receive must fail naming
 * device 0 and hcomm_recv. */
static void host_to_failing_device(hcomm_comm_t w, const uint8_t *h, size_t n, const char *what)
{
    if (mp_rank == 0) {
        MP_OK(hcomm_send(h, n, HCOMM_UINT8, 1, 7, w));
        return;
    }
    void *d = dev_alloc(n);
    hcomm_status_t st = hcomm_recv(d, n, HCOMM_UINT8, 0, 7, w);
    const char *msg = hcomm_last_error();
    if (st == HCOMM_OK || !strstr(msg, "device 0") || !strstr(msg, "hcomm_recv"))
        mp_fail("%s: %s, \"%s\" (want a failure naming device 0 and hcomm_recv)", what,
                hcomm_strerror(st), msg);
    else
        printf("rank 1: %s (as expected)\n", msg);
    MP_OK(hc_gpu_model_test_free(d));
}

/* Rank 1's first device copy fails: the GPU dispatch's copy of an eager
 * message into its direct receive. */
static int run_fault(void)
{
    hcomm_comm_t w = hcomm_comm_world();
    size_t n = 64;
    uint8_t h[64];
    memset(h, 5, sizeof(h));
    host_to_failing_device(w, h, n, "fault");
    MP_OK(hcomm_barrier(w));
    void *d = NULL; /* the device works again: a direct transfer */
    xfer((2 << 20) + 1, true, 0, 3, &d);
    MP_OK(hc_gpu_model_test_free(d));
    MP_OK(hcomm_barrier(w));
    return mp_finish("mp_gpu_gdr fault");
}

/* One side's third device copy fails: a frame in the middle of a streamed
 * receive, or of a streamed send (HC_TCP_MAX_FRAME is 512 KiB: 4 MiB is 8
 * frames). The other side fails too, by name, no hang. */
static int run_fault_stream(bool send)
{
    hcomm_comm_t w = hcomm_comm_world();
    size_t n = 4 << 20;
    uint8_t *h = mp_xmalloc(n);
    memset(h, 5, n);
    if (send) {
        hcomm_status_t st;
        const char *side;
        if (mp_rank == 0) {
            void *d = dev_alloc(n);
            MP_OK(hc_gpu_model_test_fill(d, h, n));
            st = hcomm_send(d, n, HCOMM_UINT8, 1, 7, w);
            side = "device 0";
            MP_OK(hc_gpu_model_test_free(d));
        } else {
            st = hcomm_recv(h, n, HCOMM_UINT8, 0, 7, w);
            side = "rank 0 could not write or stream";
        }
        const char *msg = hcomm_last_error();
        if (st == HCOMM_OK || !strstr(msg, side))
            mp_fail("fault_stream send: %s, \"%s\" (want a failure naming \"%s\")",
                    hcomm_strerror(st), msg, side);
        else
            printf("rank %d: %s (as expected)\n", mp_rank, msg);
    } else {
        host_to_failing_device(w, h, n, "fault_stream");
        if (mp_rank == 1 && hc_stats.gdr_streamed != 1)
            mp_fail("fault_stream: the receive was not streamed (%llu streamed)",
                    (unsigned long long)hc_stats.gdr_streamed);
    }
    free(h);
    MP_OK(hcomm_barrier(w));
    void *d = NULL; /* the device works again */
    xfer(n, true, 0, 4, &d);
    MP_OK(hc_gpu_model_test_free(d));
    MP_OK(hcomm_barrier(w));
    return mp_finish("mp_gpu_gdr fault_stream");
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *what = argc > 1 ? argv[1] : "";
    const char *how = argc > 2 ? argv[2] : "";
    if (!strcmp(what, "fault") || !strcmp(what, "fault_stream")) {
        const char *r = getenv("HCOMM_RANK");
        if (r && atoi(r) == (!strcmp(how, "send") ? 0 : 1))
            setenv("HCOMM_GPU_MODEL_FAULT", what[5] ? "copy:3" : "copy:1", 1);
    }
    mp_init();
    if (mp_size != 2) {
        fprintf(stderr, "mp_gpu_gdr: runs on 2 ranks\n");
        return 2;
    }
    if (!strcmp(what, "p2p") && !strcmp(how, "direct")) return run_p2p(DIRECT);
    if (!strcmp(what, "p2p") && !strcmp(how, "staged")) return run_p2p(STAGED);
    if (!strcmp(what, "p2p") && !strcmp(how, "streamed")) return run_p2p(STREAMED);
    if (!strcmp(what, "realloc")) return run_realloc();
    if (!strcmp(what, "refused") && *how) return run_refused(how);
    if (!strcmp(what, "nostream")) return run_nostream();
    if (!strcmp(what, "fault")) return run_fault();
    if (!strcmp(what, "fault_stream")) return run_fault_stream(!strcmp(how, "send"));
    fprintf(stderr, "usage: mp_gpu_gdr p2p direct|staged|streamed | realloc | refused WHY | nostream | "
                    "fault | fault_stream [send]\n");
    return 2;
}
