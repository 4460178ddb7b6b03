/*
 * The GPU model's streams, events and stream memory ops, and its faults
 * (-DHCOMM_GPU_MODEL=ON): FIFO order on a stream under random delays; an
 * event waited for across streams holds the waiting stream until the
 * recorded work is done, the record current at the time of the wait
 * counting; wait/write value32 with CUDA's wrap-around comparison; each
 * fault knob fails its operation with a message naming the device and the
 * operation, at once, and the dispatch's deadline ends a wait that lasts.
 */
#include "gpu_test.h"

#include "base/config.h"
#include "gpu/model/gpu_model_test.h"

#include <time.h>
#include <unistd.h>

static int teardown(void **state)
{
    (void)state;
    hc_gpu_fini();
    return 0;
}

static void nap_ms(int ms)
{
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

static void test_fifo(void **state)
{
    (void)state;
    assert_int_equal(gpu_test_start("1", NULL, "200"), HCOMM_OK);
    const hc_gpu_ops_t *ops = hc_gpu_backend();
    enum { N = 200 };
    uint32_t in[N], out[N];
    for (int i = 0; i < N; i++)
        in[i] = (uint32_t)i * 2654435761u, out[i] = 0;
    uint32_t *w;
    assert_int_equal(hc_gpu_model_test_alloc(4, (void **)&w), HCOMM_OK);
    hc_gpu_stream_t s;
    assert_int_equal(ops->stream_create(0, &s), HCOMM_OK);
    for (int i = 0; i < N; i++) { /* each copy out sees the copy in just before it */
        assert_int_equal(ops->copy_async(w, &in[i], 4, s), HCOMM_OK);
        assert_int_equal(ops->copy_async(&out[i], w, 4, s), HCOMM_OK);
    }
    assert_int_equal(ops->stream_synchronize(s), HCOMM_OK);
    assert_memory_equal(out, in, sizeof(in));
    assert_int_equal(ops->stream_destroy(s), HCOMM_OK);
    assert_int_equal(hc_gpu_model_test_free(w), HCOMM_OK);
}

static void test_events_across_streams(void **state)
{
    (void)state;
    assert_int_equal(gpu_test_start("1", NULL, "50"), HCOMM_OK);
    const hc_gpu_ops_t *ops = hc_gpu_backend();
    static uint32_t flags[2];
    flags[0] = flags[1] = 0;
    assert_int_equal(ops->host_register(flags, sizeof(flags)), HCOMM_OK);
    hc_gpu_stream_t a, b, c;
    hc_gpu_event_t ea, eb;
    assert_int_equal(ops->stream_create(0, &a), HCOMM_OK);
    assert_int_equal(ops->stream_create(0, &b), HCOMM_OK);
    assert_int_equal(ops->stream_create(0, &c), HCOMM_OK);
    assert_int_equal(ops->event_create(&ea), HCOMM_OK);
    assert_int_equal(ops->event_create(&eb), HCOMM_OK);
    assert_int_equal(ops->event_query(ea), HCOMM_OK); /* never recorded: complete */
    char x[64], out[64] = {0}, *d;
    gpu_test_random(x, sizeof(x), 3);
    assert_int_equal(hc_gpu_model_test_alloc(sizeof(x), (void **)&d), HCOMM_OK);
    /* a: wait for flag 0, then write d; b: wait for a's record, then read d */
    assert_int_equal(ops->wait_value32(a, &flags[0], 1), HCOMM_OK);
    assert_int_equal(ops->copy_async(d, x, sizeof(x), a), HCOMM_OK);
    assert_int_equal(ops->event_record(ea, a), HCOMM_OK);
    assert_int_equal(ops->stream_wait_event(b, ea), HCOMM_OK);
    /* re-recording ea on c (done at once) does not release b: it waits for
     * the record current when it was told to */
    assert_int_equal(ops->event_record(ea, c), HCOMM_OK);
    assert_int_equal(ops->copy_async(out, d, sizeof(out), b), HCOMM_OK);
    assert_int_equal(ops->event_record(eb, b), HCOMM_OK);
    assert_int_equal(ops->event_synchronize(ea), HCOMM_OK);
    nap_ms(20);
    assert_int_equal(ops->event_query(eb), HCOMM_IN_PROGRESS);
    __atomic_store_n(&flags[0], 1, __ATOMIC_RELEASE);
    assert_int_equal(ops->event_synchronize(eb), HCOMM_OK);
    assert_memory_equal(out, x, sizeof(x));
    /* write_value32 in order after a copy, wait_value32's wrap-around */
    assert_int_equal(ops->write_value32(c, &flags[1], 7), HCOMM_OK);
    assert_int_equal(ops->stream_synchronize(c), HCOMM_OK);
    assert_int_equal(__atomic_load_n(&flags[1], __ATOMIC_ACQUIRE), 7);
    __atomic_store_n(&flags[1], 0xfffffff0u, __ATOMIC_RELEASE);
    assert_int_equal(ops->wait_value32(c, &flags[1], 5), HCOMM_OK); /* 0xfffffff0 - 5 < 0 */
    assert_int_equal(ops->event_record(eb, c), HCOMM_OK);
    nap_ms(10);
    assert_int_equal(ops->event_query(eb), HCOMM_IN_PROGRESS);
    __atomic_store_n(&flags[1], 5, __ATOMIC_RELEASE);
    assert_int_equal(ops->event_synchronize(eb), HCOMM_OK);
    /* a word that is neither device memory nor registered: refused */
    uint32_t loose = 0;
    assert_int_equal(ops->write_value32(c, &loose, 1), HCOMM_ERR_INVALID);
    gpu_test_contains(hc_error_last(), "host_register'ed");
    assert_int_equal(ops->host_unregister(flags), HCOMM_OK);
    ops->event_destroy(ea), ops->event_destroy(eb);
    ops->stream_destroy(a), ops->stream_destroy(b), ops->stream_destroy(c);
    assert_int_equal(hc_gpu_model_test_free(d), HCOMM_OK);
}

/* copy:N fails the Nth copy (fills count: 1 here) once; later ones work. */
static void test_fault_copy(void **state)
{
    (void)state;
    assert_int_equal(gpu_test_start("1", "copy:3", NULL), HCOMM_OK);
    char x[32] = "abc", *d;
    assert_int_equal(hc_gpu_model_test_alloc(sizeof(x), (void **)&d), HCOMM_OK);
    hc_mem_attr_t a = gpu_test_attr(d, sizeof(x));
    assert_int_equal(hc_gpu_model_test_fill(d, x, sizeof(x)), HCOMM_OK);    /* copy 1 */
    assert_int_equal(hc_gpu_copy(x, NULL, d, &a, sizeof(x)), HCOMM_OK);     /* copy 2 */
    assert_int_equal(hc_gpu_copy(d, &a, x, NULL, sizeof(x)), HCOMM_ERR_IO); /* copy 3 */
    gpu_test_contains(hc_error_last(), "gpu model device 0: copy of 32 bytes host->device");
    gpu_test_contains(hc_error_last(), "copy number 3 failed");
    assert_int_equal(hc_gpu_copy(d, &a, x, NULL, sizeof(x)), HCOMM_OK); /* reported once */
    assert_int_equal(hc_gpu_model_test_free(d), HCOMM_OK);
}

static void test_fault_reduce_and_ipc(void **state)
{
    (void)state;
    assert_int_equal(gpu_test_start("1", "reduce:1,ipc", NULL), HCOMM_OK);
    float *d;
    assert_int_equal(hc_gpu_model_test_alloc(64, (void **)&d), HCOMM_OK);
    hc_mem_attr_t a = gpu_test_attr(d, 64);
    assert_int_equal(hc_gpu_reduce(d, &a, d, &a, 16, HCOMM_FLOAT32, HCOMM_MAX, 0), HCOMM_ERR_IO);
    gpu_test_contains(hc_error_last(), "gpu model device 0: max reduction of 16 float32");
    gpu_test_contains(hc_error_last(), "reduction number 1 failed");
    const hc_gpu_ops_t *ops = hc_gpu_backend();
    hc_gpu_ipc_handle_t h;
    assert_int_equal(ops->ipc_export(d, &h), HCOMM_OK);
    void *p;
    assert_int_equal(ops->ipc_import(&h, &p), HCOMM_ERR_INVALID);
    gpu_test_contains(hc_error_last(), "invalid handle");
    close(h.fd);
    assert_int_equal(hc_gpu_model_test_free(d), HCOMM_OK);
}

static void test_fault_ipc_bad_handle(void **state)
{
    (void)state;
    assert_int_equal(gpu_test_start("1", NULL, NULL), HCOMM_OK);
    const hc_gpu_ops_t *ops = hc_gpu_backend();
    hc_gpu_ipc_handle_t h = {.fd = 0, .length = 4096}; /* stdin: no model export */
    void *p;
    assert_int_equal(ops->ipc_import(&h, &p), HCOMM_ERR_INVALID);
    gpu_test_contains(hc_error_last(), "invalid handle");
}

/* lost:N: after N operations every call fails, and a stream waiting on a
 * word nobody writes gives up instead of hanging. */
static void test_fault_lost(void **state)
{
    (void)state;
    assert_int_equal(gpu_test_start("1", "lost:2", NULL), HCOMM_OK);
    const hc_gpu_ops_t *ops = hc_gpu_backend();
    static uint32_t flag;
    assert_int_equal(ops->host_register(&flag, sizeof(flag)), HCOMM_OK);
    hc_gpu_stream_t s, t;
    assert_int_equal(ops->stream_create(0, &s), HCOMM_OK);
    assert_int_equal(ops->stream_create(0, &t), HCOMM_OK);
    assert_int_equal(ops->wait_value32(s, &flag, 1), HCOMM_OK);  /* operation 1: waits */
    assert_int_equal(ops->write_value32(t, &flag, 0), HCOMM_OK); /* operation 2 */
    char x[8] = {0};
    assert_int_equal(ops->write_value32(t, &flag, 0), HCOMM_ERR_IO); /* lost */
    gpu_test_contains(hc_error_last(), "model device 0 is lost");
    /* the waiting worker gives up (ERR_ABORTED), or finds the device lost
     * before it started waiting (ERR_IO): either way, no hang */
    hcomm_status_t st = ops->stream_synchronize(s);
    assert_true(st == HCOMM_ERR_ABORTED || st == HCOMM_ERR_IO);
    gpu_test_contains(hc_error_last(), "lost");
    void *d;
    assert_int_equal(ops->alloc(0, 64, HC_MEM_DEVICE, &d), HCOMM_ERR_IO);
    hc_mem_attr_t a;
    assert_int_equal(hc_gpu_mem_type(x, sizeof(x), &a), HCOMM_ERR_IO);
    gpu_test_contains(hc_error_last(), "pointer query");
    ops->stream_destroy(s), ops->stream_destroy(t);
}

/* A device operation that lasts past HCOMM_TIMEOUT: the dispatch returns
 * ERR_TIMEOUT naming the operation instead of waiting on. */
static void test_dispatch_deadline(void **state)
{
    (void)state;
    assert_int_equal(gpu_test_start("1", NULL, "1000000"), HCOMM_OK); /* up to 1 s each */
    char *d, x[16] = {0};
    assert_int_equal(hc_gpu_model_test_alloc(16, (void **)&d), HCOMM_OK);
    hc_mem_attr_t a = gpu_test_attr(d, 16);
    double saved = hc_cfg.timeout;
    hc_cfg.timeout = 0.001;
    hcomm_status_t st = HCOMM_OK;
    for (int i = 0; i < 20 && st == HCOMM_OK; i++) /* a delay under 1 ms is possible, 20 are not */
        st = hc_gpu_copy(d, &a, x, NULL, sizeof(x));
    hc_cfg.timeout = saved;
    assert_int_equal(st, HCOMM_ERR_TIMEOUT);
    gpu_test_contains(hc_error_last(), "copy of 16 bytes host->device: not done after");
    hc_gpu_fini(); /* waits for the delayed copies, then frees */
}

static void test_bad_fault_knob(void **state)
{
    (void)state;
    assert_int_equal(gpu_test_start("1", "copy:0", NULL), HCOMM_ERR_INVALID);
    gpu_test_contains(hc_error_last(), "HCOMM_GPU_MODEL_FAULT=copy:0");
    assert_int_equal(gpu_test_start("1", "melt", NULL), HCOMM_ERR_INVALID);
    gpu_test_contains(hc_error_last(), "\"melt\" is not copy:N");
    assert_int_equal(gpu_test_start("1", NULL, "-3"), HCOMM_ERR_INVALID);
    gpu_test_contains(hc_error_last(), "HCOMM_GPU_MODEL_DELAY=-3");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_fifo, teardown),
        cmocka_unit_test_teardown(test_events_across_streams, teardown),
        cmocka_unit_test_teardown(test_fault_copy, teardown),
        cmocka_unit_test_teardown(test_fault_reduce_and_ipc, teardown),
        cmocka_unit_test_teardown(test_fault_ipc_bad_handle, teardown),
        cmocka_unit_test_teardown(test_fault_lost, teardown),
        cmocka_unit_test_teardown(test_dispatch_deadline, teardown),
        cmocka_unit_test_teardown(test_bad_fault_knob, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
