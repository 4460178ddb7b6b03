/*
 * Two threads of every rank calling hcomm at once, against the threading
 * contract (hcomm.h: one thread at a time per process, whichever
 * communicators the calls name). Every call must either succeed with a
 * correct result or fail at once with HCOMM_ERR_INVALID and a message
 * naming the rule and the call; never a crash, a hang or a wrong result with
 * status OK. Before the check existed this crashed (hc_coll_finish ->
 * hc_list_del), returned wrong sums with status OK, or failed with an
 * unrelated error and an empty hcomm_last_error().
 *
 * A refused call did nothing, so each thread retries it until it goes
 * through: every rank then posts the same number of collectives, and the
 * k-th of every rank pair up, whichever thread posted it. So a result is
 * correct when it combines one contribution per rank: thread t of rank r
 * adds (t + 1) << 2r to element j, plus j << 40; every 2-bit field of a sum
 * must be 1 or 2, and bits 40 up must be size * j.
 *
 * First a refusal that must happen: thread 0 waits inside hcomm_wait for a
 * message nobody sends, thread 1 tries hcomm_group_start/end (which do
 * nothing when they go through) until one is refused naming hcomm_wait,
 * then ends the wait with hcomm_comm_abort, allowed from any thread.
 *
 * Then phases (both threads of a rank finish one before either starts the
 * next, or the ranks' k-th collectives could differ in size): 8-byte
 * blocking allreduces (the inline node path); 16 KiB allreduces, blocking,
 * non-blocking + hcomm_wait and non-blocking + hcomm_test; point-to-point
 * with hcomm_test (a blocking wait could hold the process while the peer's
 * matching thread is held out: the contract makes that a deadlock, not
 * something to test). hcomm_comm_rank/size, hcomm_mem_alloc/free and
 * hcomm_strerror, allowed from any thread, run alongside and must never
 * fail.
 *
 *   mp_threads [--iters N]   N blocking allreduces per thread (default 2000;
 *                            the other phases scale from it)
 */
#include "common/mp_test.h"

#include <pthread.h>
#include <sched.h>

#define RULE "threading contract"
#define BIG 2048

static pthread_mutex_t g_fail_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t g_phase; /* both threads of this rank end a phase before the next */
static int g_iters = 2000;
static hcomm_comm_t g_self; /* a communicator of this rank alone */
static int g_waiting;       /* thread 0 is about to wait on g_self */

typedef struct {
    int t;
    hcomm_comm_t comm;
    long ok, refused;
    hcomm_request_t held; /* a completed request of this thread (stale handle) */
} worker_t;

__attribute__((format(printf, 2, 3))) static void fail(worker_t *w, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&g_fail_lock);
    mp_fail("thread %d: %s", w->t, msg);
    pthread_mutex_unlock(&g_fail_lock);
}

/* st of a call named fn: 1 when it went through, 0 when it was refused under
 * the rule (the caller retries); anything else ends the test. */
static int went_through(worker_t *w, hcomm_status_t st, const char *fn)
{
    if (st == HCOMM_OK) return 1;
    const char *msg = hcomm_last_error();
    if (st == HCOMM_ERR_INVALID && strstr(msg, RULE) && strstr(msg, fn)) {
        w->refused++;
        sched_yield();
        return 0;
    }
    fail(w, "%s: expected OK or ERR_INVALID naming the %s and %s, got %s (\"%s\")", fn, RULE, fn,
         mp_status_name(st), msg);
    exit(1);
}

static void check_sum(worker_t *w, const char *what, const int64_t *res, int count)
{
    uint64_t low0 = (uint64_t)res[0] & ((1ull << 40) - 1);
    for (int r = 0; r < mp_size; r++) {
        uint64_t f = (low0 >> (2 * r)) & 3;
        if (f != 1 && f != 2) {
            fail(w, "%s: rank %d's contribution expected 1 or 2 got %llu (sum %#llx)", what, r,
                 (unsigned long long)f, (unsigned long long)res[0]);
            return;
        }
    }
    if (low0 >> (2 * mp_size))
        fail(w, "%s: sum %#llx has bits above the ranks' fields", what, (unsigned long long)low0);
    for (int j = 0; j < count; j++) {
        uint64_t want = low0 + ((uint64_t)mp_size * (uint64_t)j << 40);
        if ((uint64_t)res[j] != want) {
            fail(w, "%s: element %d expected %#llx got %#llx", what, j, (unsigned long long)want,
                 (unsigned long long)res[j]);
            return;
        }
    }
}

static void fill(const worker_t *w, int64_t *in, int count)
{
    for (int j = 0; j < count; j++)
        in[j] = (int64_t)(((uint64_t)(w->t + 1) << (2 * mp_rank)) | ((uint64_t)j << 40));
}

/* Calls allowed from any thread, made while the other thread may be inside. */
static void any_thread_calls(worker_t *w)
{
    int r = hcomm_comm_rank(w->comm), n = hcomm_comm_size(w->comm);
    if (r != mp_rank || n != mp_size)
        fail(w, "hcomm_comm_rank/size from a second thread expected %d/%d got %d/%d (%s)", mp_rank,
             mp_size, r, n, hcomm_last_error());
    void *p = NULL;
    hcomm_status_t st = hcomm_mem_alloc(4096 << (w->t * 4), &p);
    if (st != HCOMM_OK)
        fail(w, "hcomm_mem_alloc from a second thread expected OK got %s (%s)", mp_status_name(st),
             hcomm_last_error());
    else if ((st = hcomm_mem_free(p)) != HCOMM_OK)
        fail(w, "hcomm_mem_free from a second thread expected OK got %s (%s)", mp_status_name(st),
             hcomm_last_error());
    if (strcmp(hcomm_strerror(HCOMM_ERR_INVALID), "invalid argument"))
        fail(w, "hcomm_strerror from a second thread: \"%s\"", hcomm_strerror(HCOMM_ERR_INVALID));
}

static void allreduce_blocking(worker_t *w, int count)
{
    int64_t in[BIG], out[BIG];
    fill(w, in, count);
    memset(out, 0xee, sizeof(out[0]) * (size_t)count);
    while (!went_through(w,
                         hcomm_allreduce(in, out, (size_t)count, HCOMM_INT64, HCOMM_SUM, w->comm),
                         "hcomm_allreduce"))
        ;
    check_sum(w, "hcomm_allreduce", out, count);
    w->ok++;
}

/* with_test: complete with hcomm_test polls, else hcomm_wait. */
static void allreduce_nb(worker_t *w, int count, int with_test)
{
    int64_t in[BIG], out[BIG];
    fill(w, in, count);
    memset(out, 0xee, sizeof(out[0]) * (size_t)count);
    hcomm_request_t req;
    while (!went_through(
        w, hcomm_iallreduce(in, out, (size_t)count, HCOMM_INT64, HCOMM_SUM, w->comm, &req),
        "hcomm_iallreduce"))
        ;
    if (with_test) {
        for (int done = 0; !done;)
            went_through(w, hcomm_test(req, &done), "hcomm_test");
    } else {
        while (!went_through(w, hcomm_wait(req), "hcomm_wait"))
            ;
    }
    check_sum(w, with_test ? "hcomm_iallreduce + hcomm_test" : "hcomm_iallreduce + hcomm_wait", out,
              count);
    w->held = req;
    w->ok++;
}

/* Thread t sends to the next rank and receives from the previous one with
 * tag t: messages of one tag pair in order, so the payload says exactly who
 * sent it. Only hcomm_test completes them (see the top). */
static void p2p_round(worker_t *w, int i, size_t elems)
{
    static __thread int64_t sbuf[8192], rbuf[8192];
    int right = (mp_rank + 1) % mp_size, left = (mp_rank + mp_size - 1) % mp_size;
    for (size_t k = 0; k < elems; k++)
        sbuf[k] =
            ((int64_t)mp_rank << 48) | ((int64_t)w->t << 40) | ((int64_t)i << 16) | (int64_t)k;
    memset(rbuf, 0, elems * sizeof(rbuf[0]));
    hcomm_request_t rr, sr;
    while (!went_through(w, hcomm_irecv(rbuf, elems, HCOMM_INT64, left, w->t, w->comm, &rr),
                         "hcomm_irecv"))
        ;
    while (!went_through(w, hcomm_isend(sbuf, elems, HCOMM_INT64, right, w->t, w->comm, &sr),
                         "hcomm_isend"))
        ;
    for (int done = 0; !done;)
        went_through(w, hcomm_test(sr, &done), "hcomm_test");
    for (int done = 0; !done;)
        went_through(w, hcomm_test(rr, &done), "hcomm_test");
    for (size_t k = 0; k < elems; k++) {
        int64_t want =
            ((int64_t)left << 48) | ((int64_t)w->t << 40) | ((int64_t)i << 16) | (int64_t)k;
        if (rbuf[k] != want) {
            fail(w, "p2p round %d (%zu elements): element %zu expected %#llx got %#llx", i, elems,
                 k, (unsigned long long)want, (unsigned long long)rbuf[k]);
            break;
        }
    }
    w->ok++;
}

/* Thread 0: a receive nobody sends, waited for until thread 1 aborts it. */
static void refusal_waiter(worker_t *w)
{
    char c;
    hcomm_request_t r;
    while (!went_through(w, hcomm_irecv(&c, 1, HCOMM_UINT8, 0, 100, g_self, &r), "hcomm_irecv"))
        ;
    __atomic_store_n(&g_waiting, 1, __ATOMIC_RELEASE);
    hcomm_status_t st;
    while ((st = hcomm_wait(r)) == HCOMM_ERR_INVALID && strstr(hcomm_last_error(), RULE))
        w->refused++;
    if (st != HCOMM_ERR_ABORTED)
        fail(w,
             "hcomm_wait on a receive aborted by the other thread: expected ERR_ABORTED got %s "
             "(%s)",
             mp_status_name(st), hcomm_last_error());
}

static void abort_self(worker_t *w)
{
    hcomm_status_t st = hcomm_comm_abort(g_self);
    if (st != HCOMM_OK)
        fail(w, "hcomm_comm_abort from a second thread expected OK got %s (%s)", mp_status_name(st),
             hcomm_last_error());
}

/* Thread 1: calls that must be refused while thread 0 is inside hcomm_wait. */
static void refusal_prober(worker_t *w)
{
    while (!__atomic_load_n(&g_waiting, __ATOMIC_ACQUIRE))
        sched_yield();
    double t0 = mp_now();
    long before = w->refused;
    int aborted = 0;
    while (w->refused == before && mp_now() - t0 < 10) {
        if (!went_through(w, hcomm_group_start(), "hcomm_group_start")) continue;
        /* The group is open; if closing it is refused, thread 0 is inside
         * its wait, which only the abort ends: abort first. */
        while (!went_through(w, hcomm_group_end(), "hcomm_group_end"))
            if (!aborted++) abort_self(w);
    }
    if (w->refused == before)
        fail(w, "no call refused in 10 s while the other thread waits inside hcomm_wait");
    else if (!strstr(hcomm_last_error(), "inside hcomm_wait"))
        fail(w, "the refusal expected to name hcomm_wait (the other thread's call) got \"%s\"",
             hcomm_last_error());
    if (!aborted) abort_self(w);
}

static void *worker(void *arg)
{
    worker_t *w = arg;
    if (w->t == 0)
        refusal_waiter(w);
    else
        refusal_prober(w);
    pthread_barrier_wait(&g_phase);
    for (int i = 0; i < g_iters; i++) {
        allreduce_blocking(w, 1);
        if (i % 16 == 0) any_thread_calls(w);
    }
    /* Without this, one thread's first 16 KiB allreduce would pair with the
     * other rank's last 8-byte one: a real ordering bug of the program. */
    pthread_barrier_wait(&g_phase);
    for (int i = 0; i < g_iters / 8; i++) {
        switch (i % 3) {
        case 0:
            allreduce_blocking(w, BIG);
            break;
        case 1:
            allreduce_nb(w, BIG, 0);
            break;
        default:
            allreduce_nb(w, BIG, 1);
            break;
        }
    }
    pthread_barrier_wait(&g_phase);
    for (int i = 0; i < g_iters / 4; i++)
        p2p_round(w, i, i % 8 == 7 ? 8192 : 4);
    return NULL;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--iters") && i + 1 < argc) {
            g_iters = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: mp_threads [--iters N]\n");
            return 2;
        }
    }
    if (g_iters < 8) g_iters = 8;
    setvbuf(stdout, NULL, _IOLBF, 0);
    mp_init();
    if (mp_size > 20) {
        printf("skipped: the sums' 2-bit fields hold at most 20 ranks\n");
        return 77;
    }
    hcomm_comm_t w = hcomm_comm_world();
    MP_OK(hcomm_comm_split(w, mp_rank, 0, &g_self));
    worker_t ws[2] = {{.t = 0, .comm = w}, {.t = 1, .comm = w}};
    pthread_t th[2];
    pthread_barrier_init(&g_phase, NULL, 2);
    double t0 = mp_now();
    for (int t = 0; t < 2; t++)
        if (pthread_create(&th[t], NULL, worker, &ws[t]) != 0) {
            mp_fail("pthread_create failed");
            exit(1);
        }
    for (int t = 0; t < 2; t++)
        pthread_join(th[t], NULL);
    long refused = ws[0].refused + ws[1].refused;
    printf("rank %d: %ld + %ld calls went through, %ld refused under the rule, %.1f s\n", mp_rank,
           ws[0].ok, ws[1].ok, refused, mp_now() - t0);
    MP_OK(hcomm_comm_free(g_self));
    /* With two threads hammering one process for thousands of calls, none
     * overlapping would mean the check is not there. */
    if (refused == 0) mp_fail("expected some calls refused under the %s, got none", RULE);
    /* A request completed by one thread is a stale handle for everyone. */
    for (int t = 0; t < 2; t++)
        if (ws[t].held) {
            MP_EXPECT(HCOMM_ERR_INVALID, hcomm_wait(ws[t].held));
        }
    /* The library is still usable, and the last message is this thread's. */
    int64_t v = mp_rank + 1, s = 0;
    MP_OK(hcomm_allreduce(&v, &s, 1, HCOMM_INT64, HCOMM_SUM, w));
    if (s != (int64_t)mp_size * (mp_size + 1) / 2)
        mp_fail("allreduce after the threads expected %d got %lld", mp_size * (mp_size + 1) / 2,
                (long long)s);
    return mp_finish("mp_threads");
}
