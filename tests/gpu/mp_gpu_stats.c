/*
 * The staging's counters and its pinned buffers (api/api_stage_mem.c,
 * core/stats_gpu.c, docs/gpu.md "Pinned staging"), on the GPU model:
 *
 *   mp_gpu_stats calls dev|host SMALL NSMALL LARGE NLARGE   NSMALL out-of-place
 *       int32 sum allreduces of SMALL elements then NLARGE of LARGE, on
 *       device (dev) or host buffers, every result checked; the counters
 *       are read from the HCOMM_STATS report at finalize by
 *       stats_gpu_test.py, which knows the expected copies from the same
 *       arguments
 *   mp_gpu_stats pin   staging buffers are registered with the backend
 *       once, not per call: the model's own count of host_register calls
 *       and hc_gpu_stats.pin_regs grow by one at the first whole-buffer
 *       call and at the first pipelined call (HCOMM_GPU_STAGE_CHUNK set
 *       below the message by the test), not at the 20 calls after each;
 *       every call after the first of its size takes a kept buffer
 */
#include "common/mp_test.h"
#include "api/api_stage.h"
#include "gpu/gpu.h"
#include "gpu/model/gpu_model_test.h"

typedef struct {
    void *p;
    int dev;
} buf_t;

static buf_t buf_new(int dev, size_t n)
{
    buf_t b = {.dev = dev};
    if (dev)
        MP_OK(hc_gpu_model_test_alloc(n, &b.p));
    else
        b.p = mp_xmalloc(n);
    return b;
}

static void buf_put(buf_t *b, const void *h, size_t n)
{
    if (b->dev)
        MP_OK(hc_gpu_model_test_fill(b->p, h, n));
    else
        memcpy(b->p, h, n);
}

static void buf_get(const buf_t *b, void *h, size_t n)
{
    if (b->dev)
        MP_OK(hc_gpu_model_test_read(h, b->p, n));
    else
        memcpy(h, b->p, n);
}

static void buf_free(buf_t *b)
{
    if (b->dev)
        MP_OK(hc_gpu_model_test_free(b->p));
    else
        free(b->p);
}

/* An out-of-place int32 sum of count elements (rank + i + v): checked. */
static void allreduce_one(int dev, size_t count, int v)
{
    size_t n = count * 4;
    buf_t s = buf_new(dev, n), r = buf_new(dev, n);
    int32_t *h = mp_xmalloc(n);
    for (size_t i = 0; i < count; i++)
        h[i] = mp_rank + (int32_t)(i % 1000) + v;
    buf_put(&s, h, n);
    MP_OK(hcomm_allreduce(s.p, r.p, count, HCOMM_INT32, HCOMM_SUM, hcomm_comm_world()));
    buf_get(&r, h, n);
    int32_t base = mp_size * (mp_size - 1) / 2;
    for (size_t i = 0; i < count; i++)
        if (h[i] != base + mp_size * ((int32_t)(i % 1000) + v)) {
            mp_fail("allreduce of %zu (%s): element %zu expected %d got %d", count,
                    dev ? "device" : "host", i, base + mp_size * ((int)(i % 1000) + v), h[i]);
            break;
        }
    free(h);
    buf_free(&s);
    buf_free(&r);
}

static int run_calls(int argc, char **argv)
{
    if (argc < 7) {
        fprintf(stderr, "usage: mp_gpu_stats calls dev|host SMALL NSMALL LARGE NLARGE\n");
        return 2;
    }
    int dev = !strcmp(argv[2], "dev");
    size_t small = strtoull(argv[3], NULL, 0), large = strtoull(argv[5], NULL, 0);
    int nsmall = atoi(argv[4]), nlarge = atoi(argv[6]);
    mp_init();
    for (int k = 0; k < nsmall; k++)
        allreduce_one(dev, small, k);
    for (int k = 0; k < nlarge; k++)
        allreduce_one(dev, large, k);
    return mp_finish("mp_gpu_stats calls");
}

/* The registrations (the model's and the stats') and the kept buffers
 * taken, since start. */
typedef struct {
    uint64_t model_regs, pin_regs, reuses, allocs;
} pin_count_t;

static pin_count_t pin_count(void)
{
    hc_gpu_model_counters_t m;
    hc_gpu_model_test_counters(&m);
    return (pin_count_t){m.registers, hc_gpu_stats.pin_regs, hc_gpu_stats.buf_reuses,
                         hc_gpu_stats.buf_allocs};
}

/* n calls of count elements: want_regs new registrations (model and
 * stats alike), want_allocs new buffers, the rest reused. */
static void pin_step(const char *what, size_t count, int n, uint64_t want_regs,
                     uint64_t want_allocs)
{
    pin_count_t a = pin_count();
    for (int k = 0; k < n; k++)
        allreduce_one(1, count, k);
    pin_count_t b = pin_count();
    uint64_t regs = b.model_regs - a.model_regs, pins = b.pin_regs - a.pin_regs;
    uint64_t allocs = b.allocs - a.allocs, reuses = b.reuses - a.reuses;
    if (regs != want_regs || pins != want_regs || allocs != want_allocs ||
        reuses != (uint64_t)n - want_allocs)
        mp_fail("%s (%d calls): host_register calls %llu (stats: %llu), buffers made %llu, "
                "reused %llu; expected %llu, %llu made, %llu reused",
                what, n, (unsigned long long)regs, (unsigned long long)pins,
                (unsigned long long)allocs, (unsigned long long)reuses,
                (unsigned long long)want_regs, (unsigned long long)want_allocs,
                (unsigned long long)n - want_allocs);
    else if (mp_rank == 0)
        printf("%s: %d calls, %llu registration(s), %llu buffer(s) reused\n", what, n,
               (unsigned long long)regs, (unsigned long long)reuses);
}

static int run_pin(void)
{
    mp_init();
    size_t chunk = hc_stage_pipe_chunk; /* the pipeline's (HCOMM_GPU_STAGE_CHUNK) */
    pin_step("whole-buffer, first call", 4096, 1, 1, 1);
    pin_step("whole-buffer, same size", 4096, 20, 0, 0);
    pin_step("whole-buffer, a size of the same class", 4000, 5, 0, 0);
    pin_step("pipelined, first call", chunk / 4 * 3 + 5, 1, 1, 1);
    pin_step("pipelined, same size", chunk / 4 * 3 + 5, 20, 0, 0);
    if (hc_gpu_stats.pin_failures)
        mp_fail("%llu registrations refused", (unsigned long long)hc_gpu_stats.pin_failures);
    return mp_finish("mp_gpu_stats pin");
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *what = argc > 1 ? argv[1] : "";
    if (!strcmp(what, "calls")) return run_calls(argc, argv);
    if (!strcmp(what, "pin")) return run_pin();
    fprintf(stderr, "usage: mp_gpu_stats calls dev|host SMALL NSMALL LARGE NLARGE | pin\n");
    return 2;
}
