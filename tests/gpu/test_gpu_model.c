/*
 * The GPU model's memory and the dispatch on it (-DHCOMM_GPU_MODEL=ON):
 * a CPU touch of device memory kills the process by SIGSEGV; copies in the
 * four directions from 0 bytes to 64 MiB; reductions of every dtype and op
 * on the device (and mixed host/device) equal to base/reduce's on the host;
 * the memory-type cache looks a re-used address up anew; IPC between two
 * processes through a memfd passed over a unix socket; a dmabuf fd maps the
 * same bytes.
 */
#include "gpu_test.h"

#include "base/dtype.h"
#include "base/reduce.h"
#include "gpu/model/gpu_model_test.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static int setup(void **state)
{
    (void)state;
    return gpu_test_start("1", NULL, NULL) == HCOMM_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    hc_gpu_fini();
    return 0;
}

static void test_cpu_touch_faults(void **state)
{
    (void)state;
    char *d;
    assert_int_equal(hc_gpu_model_test_alloc(4096, (void **)&d), HCOMM_OK);
    char x[16] = "device bytes";
    assert_int_equal(hc_gpu_model_test_fill(d, x, sizeof(x)), HCOMM_OK);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct sigaction sa = {.sa_handler = SIG_DFL};
        sigaction(SIGSEGV, &sa, NULL);
        volatile char c = d[3]; /* must fault */
        (void)c;
        _exit(0);
    }
    int wst;
    assert_int_equal(waitpid(pid, &wst, 0), pid);
    assert_true(WIFSIGNALED(wst));
    assert_int_equal(WTERMSIG(wst), SIGSEGV);
    char y[16];
    assert_int_equal(hc_gpu_model_test_read(y, d, sizeof(y)), HCOMM_OK);
    assert_memory_equal(x, y, sizeof(x));
    assert_int_equal(hc_gpu_model_test_free(d), HCOMM_OK);
}

/* host -> device -> device -> host -> host, every hop by hc_gpu_copy. */
static void test_copies(void **state)
{
    (void)state;
    static const size_t sizes[] = {0, 1, 7, 4096, 65537, (1u << 20) + 3, 64u << 20};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        size_t n = sizes[k], cap = n ? n : 1;
        char *h = malloc(cap), *back = malloc(cap), *h2 = malloc(cap), *d1, *d2;
        assert_non_null(h && back && h2);
        gpu_test_random(h, n, (unsigned)k);
        memset(back, 0, cap);
        assert_int_equal(hc_gpu_model_test_alloc(cap, (void **)&d1), HCOMM_OK);
        assert_int_equal(hc_gpu_model_test_alloc(cap, (void **)&d2), HCOMM_OK);
        hc_mem_attr_t a1 = gpu_test_attr(d1, n), a2 = gpu_test_attr(d2, n);
        hc_mem_attr_t ah = gpu_test_attr(h, n);
        assert_int_equal(a1.type, HC_MEM_DEVICE);
        assert_int_equal(ah.type, HC_MEM_HOST);
        hc_gpu_model_counters_t c0, c1;
        hc_gpu_model_test_counters(&c0);
        assert_int_equal(hc_gpu_copy(d1, &a1, h, &ah, n), HCOMM_OK);
        assert_int_equal(hc_gpu_copy(d2, &a2, d1, &a1, n), HCOMM_OK);
        assert_int_equal(hc_gpu_copy(back, &ah, d2, &a2, n), HCOMM_OK);
        assert_int_equal(hc_gpu_copy(h2, NULL, back, NULL, n), HCOMM_OK);
        hc_gpu_model_test_counters(&c1);
        assert_memory_equal(h2, h, n);
        assert_int_equal(c1.copies - c0.copies, n ? 3 : 0); /* host->host: no device copy */
        assert_int_equal(c1.copy_bytes - c0.copy_bytes, 3 * n);
        assert_int_equal(hc_gpu_model_test_free(d1), HCOMM_OK);
        assert_int_equal(hc_gpu_model_test_free(d2), HCOMM_OK);
        free(h), free(back), free(h2);
    }
}

/* One reduction x = op(x, y) with x, y on the host or the device. */
static void reduce_case(hcomm_dtype_t dt, hcomm_op_t op, size_t count, bool x_dev, bool y_dev,
                        unsigned seed)
{
    size_t n = count * hc_dtype_size(dt);
    unsigned char *x = malloc(n), *y = malloc(n), *ref = malloc(n), *out = malloc(n);
    assert_non_null(x && y && ref && out);
    gpu_test_random(x, n, seed);
    gpu_test_random(y, n, seed * 7 + 1);
    const void *in[2] = {x, y};
    hc_reduce_scalar(ref, in, 2, count, dt, op, 4);
    void *dx = x, *dy = y;
    if (x_dev) {
        assert_int_equal(hc_gpu_model_test_alloc(n, &dx), HCOMM_OK);
        assert_int_equal(hc_gpu_model_test_fill(dx, x, n), HCOMM_OK);
    }
    if (y_dev) {
        assert_int_equal(hc_gpu_model_test_alloc(n, &dy), HCOMM_OK);
        assert_int_equal(hc_gpu_model_test_fill(dy, y, n), HCOMM_OK);
    }
    hc_mem_attr_t ax = gpu_test_attr(dx, n), ay = gpu_test_attr(dy, n);
    assert_int_equal(hc_gpu_reduce(dx, &ax, dy, &ay, count, dt, op, 4), HCOMM_OK);
    if (x_dev)
        assert_int_equal(hc_gpu_model_test_read(out, dx, n), HCOMM_OK);
    else
        memcpy(out, x, n);
    if (memcmp(out, ref, n))
        fail_msg("%s %s of %zu, x on the %s, y on the %s: differs from the host kernel",
                 hc_dtype_name(dt), hc_op_name(op), count, x_dev ? "device" : "host",
                 y_dev ? "device" : "host");
    if (x_dev) assert_int_equal(hc_gpu_model_test_free(dx), HCOMM_OK);
    if (y_dev) assert_int_equal(hc_gpu_model_test_free(dy), HCOMM_OK);
    free(x), free(y), free(ref), free(out);
}

static void test_reductions(void **state)
{
    (void)state;
    hc_gpu_model_counters_t c0, c1;
    hc_gpu_model_test_counters(&c0);
    for (int dt = 0; dt < HCOMM_DTYPE_COUNT; dt++)
        for (int op = 0; op < HCOMM_OP_COUNT; op++) {
            unsigned seed = (unsigned)(dt * 10 + op);
            reduce_case((hcomm_dtype_t)dt, (hcomm_op_t)op, 1031, true, true, seed);
            reduce_case((hcomm_dtype_t)dt, (hcomm_op_t)op, 517, true, false, seed + 1);
            reduce_case((hcomm_dtype_t)dt, (hcomm_op_t)op, 517, false, true, seed + 2);
        }
    hc_gpu_model_test_counters(&c1);
    /* device x: a kernel each (2 of 3 cases per dtype and op) */
    assert_true(c1.kernels - c0.kernels >= 2u * HCOMM_DTYPE_COUNT * HCOMM_OP_COUNT);
    /* past the dispatch's 4 MiB staging chunk, both mixed ways */
    reduce_case(HCOMM_FLOAT32, HCOMM_SUM, (5u << 20) / 4 + 3, true, false, 77);
    reduce_case(HCOMM_BFLOAT16, HCOMM_MAX, (5u << 20) / 2 + 1, false, true, 78);
}

static void test_mem_type_cache(void **state)
{
    (void)state;
    size_t n = 64 << 10;
    char *d1, *d2;
    assert_int_equal(hc_gpu_model_test_alloc(n, (void **)&d1), HCOMM_OK);
    uint64_t h0, q0, h1, q1;
    hc_gpu_cache_counters(&h0, &q0);
    hc_mem_attr_t a1 = gpu_test_attr(d1 + 100, 200);
    assert_int_equal(a1.type, HC_MEM_DEVICE);
    assert_int_equal(a1.base, (uintptr_t)d1);
    assert_int_equal(a1.length, n);
    hc_mem_attr_t again = gpu_test_attr(d1 + 5000, 10);
    hc_gpu_cache_counters(&h1, &q1);
    assert_int_equal(q1 - q0, 1); /* the second lookup came from the cache */
    assert_int_equal(h1 - h0, 1);
    assert_int_equal(again.alloc_id, a1.alloc_id);
    /* past the end of the allocation: refused, naming it */
    hc_mem_attr_t bad;
    assert_int_equal(hc_gpu_mem_type(d1 + n - 8, 16, &bad), HCOMM_ERR_INVALID);
    gpu_test_contains(hc_error_last(), "runs past the end of device allocation");
    /* freed, then the model hands the same address out again */
    assert_int_equal(hc_gpu_model_test_free(d1), HCOMM_OK);
    assert_int_equal(hc_gpu_model_test_alloc(n, (void **)&d2), HCOMM_OK);
    assert_ptr_equal(d2, d1);
    hc_gpu_cache_counters(&h0, &q0);
    hc_mem_attr_t a2 = gpu_test_attr(d2 + 100, 200);
    hc_gpu_cache_counters(&h1, &q1);
    assert_int_equal(q1 - q0, 1); /* looked up anew, not answered from the stale entry */
    assert_int_not_equal(a2.alloc_id, a1.alloc_id);
    assert_int_equal(hc_gpu_model_test_free(d2), HCOMM_OK);
    /* host memory, plain and registered */
    static char page[8192] __attribute__((aligned(4096)));
    hc_mem_attr_t ah = gpu_test_attr(page, 10);
    assert_int_equal(ah.type, HC_MEM_HOST);
    assert_int_equal(ah.base, 0);
    const hc_gpu_ops_t *ops = hc_gpu_backend();
    assert_int_equal(ops->host_register(page, sizeof(page)), HCOMM_OK);
    ah = gpu_test_attr(page + 10, 10);
    assert_int_equal(ah.type, HC_MEM_HOST);
    assert_int_equal(ah.base, (uintptr_t)page);
    assert_int_equal(ops->host_register(page + 4096, 10), HCOMM_ERR_INVALID);
    gpu_test_contains(hc_error_last(), "already registered");
    assert_int_equal(ops->host_unregister(page), HCOMM_OK);
    /* a freed pointer given to the model's copies: an error, not a fault */
    char *d3, x[8] = {0};
    assert_int_equal(hc_gpu_model_test_alloc(n, (void **)&d3), HCOMM_OK);
    assert_int_equal(hc_gpu_model_test_free(d3), HCOMM_OK);
    hc_mem_attr_t dev = {.type = HC_MEM_DEVICE, .device = 0};
    assert_int_equal(hc_gpu_copy(x, NULL, d3, &dev, sizeof(x)), HCOMM_ERR_INVALID);
    gpu_test_contains(hc_error_last(), "illegal address (freed device memory)");
}

/* ---- IPC ---------------------------------------------------------------------------------- */

static void send_handle(int sock, const hc_gpu_ipc_handle_t *h)
{
    char cbuf[CMSG_SPACE(sizeof(int))] = {0};
    struct iovec iov = {(void *)h, sizeof(*h)};
    struct msghdr m = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &h->fd, sizeof(int));
    assert_int_equal(sendmsg(sock, &m, 0), (ssize_t)sizeof(*h));
}

static bool recv_handle(int sock, hc_gpu_ipc_handle_t *h)
{
    char cbuf[CMSG_SPACE(sizeof(int))] = {0};
    struct iovec iov = {h, sizeof(*h)};
    struct msghdr m = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
    if (recvmsg(sock, &m, 0) != (ssize_t)sizeof(*h)) return false;
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    if (!c || c->cmsg_type != SCM_RIGHTS) return false;
    memcpy(&h->fd, CMSG_DATA(c), sizeof(int));
    return true;
}

enum { IPC_LEN = (1 << 20) + 5, IPC_OFF = 4096 };

/* The importing process: reads what the exporter wrote, writes its own. */
static int ipc_child(int sock)
{
    hc_gpu_fini(); /* the parent's model state: start a fresh one here */
    if (gpu_test_start("1", NULL, NULL) != HCOMM_OK) return 10;
    hc_gpu_ipc_handle_t h;
    if (!recv_handle(sock, &h)) return 11;
    const hc_gpu_ops_t *ops = hc_gpu_backend();
    char *p;
    if (ops->ipc_import(&h, (void **)&p) != HCOMM_OK) return 12;
    close(h.fd);
    size_t n = IPC_LEN - IPC_OFF;
    hc_mem_attr_t a;
    if (hc_gpu_mem_type(p, n, &a) != HCOMM_OK || a.type != HC_MEM_DEVICE) return 13;
    char *want = malloc(IPC_LEN), *got = malloc(n);
    gpu_test_random(want, IPC_LEN, 1234);
    if (hc_gpu_copy(got, NULL, p, &a, n) != HCOMM_OK) return 14;
    if (memcmp(got, want + IPC_OFF, n)) return 15;
    gpu_test_random(got, n, 999);
    if (hc_gpu_copy(p, &a, got, NULL, n) != HCOMM_OK) return 16;
    if (ops->ipc_close(p) != HCOMM_OK) return 17;
    if (write(sock, "k", 1) != 1) return 18;
    hc_gpu_fini();
    return 0;
}

static void test_ipc_two_processes(void **state)
{
    (void)state;
    char *d, *data = malloc(IPC_LEN);
    gpu_test_random(data, IPC_LEN, 1234);
    assert_int_equal(hc_gpu_model_test_alloc(IPC_LEN, (void **)&d), HCOMM_OK);
    assert_int_equal(hc_gpu_model_test_fill(d, data, IPC_LEN), HCOMM_OK);
    hc_gpu_ipc_handle_t h;
    const hc_gpu_ops_t *ops = hc_gpu_backend();
    assert_int_equal(ops->ipc_export(d + IPC_OFF, &h), HCOMM_OK);
    assert_int_equal(h.offset, IPC_OFF);
    assert_true(h.fd >= 0);
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(sv[0]);
        _exit(ipc_child(sv[1]));
    }
    close(sv[1]);
    send_handle(sv[0], &h);
    close(h.fd);
    char ack = 0;
    assert_int_equal(read(sv[0], &ack, 1), 1);
    int wst;
    assert_int_equal(waitpid(pid, &wst, 0), pid);
    assert_true(WIFEXITED(wst));
    assert_int_equal(WEXITSTATUS(wst), 0);
    assert_int_equal(ack, 'k');
    size_t n = IPC_LEN - IPC_OFF;
    char *got = malloc(n), *want = malloc(n);
    gpu_test_random(want, n, 999);
    assert_int_equal(hc_gpu_model_test_read(got, d + IPC_OFF, n), HCOMM_OK);
    assert_memory_equal(got, want, n);
    close(sv[0]);
    assert_int_equal(hc_gpu_model_test_free(d), HCOMM_OK);
    free(data), free(got), free(want);
}

static void test_dmabuf(void **state)
{
    (void)state;
    size_t n = 3 * 4096 + 100;
    char *d, *data = malloc(n);
    gpu_test_random(data, n, 55);
    assert_int_equal(hc_gpu_model_test_alloc(n, (void **)&d), HCOMM_OK);
    assert_int_equal(hc_gpu_model_test_fill(d, data, n), HCOMM_OK);
    int fd = -1;
    uint64_t off = 0;
    const hc_gpu_ops_t *ops = hc_gpu_backend();
    assert_int_equal(ops->dmabuf_fd(d + 5000, 2000, &fd, &off), HCOMM_OK);
    assert_int_equal(off, 5000);
    char *m = mmap(NULL, 4 * 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    assert_true(m != MAP_FAILED);
    assert_memory_equal(m + off, data + 5000, 2000); /* the same bytes */
    memset(m + off, 0x5a, 16); /* and written through it, seen by the device */
    char back[16], want[16];
    memset(want, 0x5a, sizeof(want));
    assert_int_equal(hc_gpu_model_test_read(back, d + 5000, sizeof(back)), HCOMM_OK);
    assert_memory_equal(back, want, sizeof(want));
    munmap(m, 4 * 4096);
    close(fd);
    assert_int_equal(ops->dmabuf_fd(d + n - 10, 20, &fd, &off), HCOMM_ERR_INVALID);
    gpu_test_contains(hc_error_last(), "not inside one device allocation");
    int x;
    assert_int_equal(ops->dmabuf_fd(&x, 4, &fd, &off), HCOMM_ERR_INVALID);
    assert_int_equal(hc_gpu_model_test_free(d), HCOMM_OK);
    free(data);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_cpu_touch_faults, setup, teardown),
        cmocka_unit_test_setup_teardown(test_copies, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reductions, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mem_type_cache, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ipc_two_processes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dmabuf, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
