/*
 * Hangs that explain themselves (docs/observability.md).
 *
 * A wait that lasts longer than HCOMM_WARN_AFTER logs what it waits for:
 * the operation, the step of its algorithm, the ranks it needs and what
 * from each (data, a credit, a flag), and when each was last heard from.
 * The timeout error carries the same text, and hcommrun can ask any rank
 * for it on the control socket (HCOMM_CONTROL_FD) while the job runs.
 *
 * "Last heard": every frame delivered bumps its peer's counter (no clock on
 * that path); the slow poll, about every 50 ms inside waits, stamps the
 * peers whose counter moved. A peer on this node is also described by its
 * process state (/proc: running, sleeping, stopped).
 */
#include "core/hc_core.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define HC_HEARD_PERIOD_NS 50000000ull  /* peers' last-heard stamps */
#define HC_CONTROL_PERIOD_NS 20000000ull /* hcommrun's report requests */
#define HC_REPORT_MAX 8192

void hc_explain_add(hc_explain_t *e, const char *fmt, ...)
{
    if (e->n + 1 >= e->len)
        return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(e->buf + e->n, e->len - e->n, fmt, ap);
    va_end(ap);
    if (w > 0)
        e->n = HC_MIN(e->n + (size_t)w, e->len - 1);
}

void hc_explain_wait(hc_explain_t *e, int wrank)
{
    for (int i = 0; i < e->nwaits; i++)
        if (e->waits[i] == wrank)
            return;
    if (e->nwaits < HC_EXPLAIN_WAITS)
        e->waits[e->nwaits++] = wrank;
}

/* The state letter of /proc/<pid>/stat, described; NULL when unreadable. */
static const char *hc_proc_state(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')'); /* the command name may hold spaces */
    if (!p || p[1] != ' ')
        return NULL;
    switch (p[2]) {
    case 'R': return "running";
    case 'S': return "sleeping";
    case 'D': return "in uninterruptible sleep";
    case 'T': return "stopped (SIGSTOP or a debugger)";
    case 't': return "stopped by a debugger";
    case 'Z': return "exited (zombie)";
    default: return "in an unusual state";
    }
}

static void hc_peer_line(int w, uint64_t now, hc_explain_t *e)
{
    const hc_peer_t *p = &hc_ctx.peers[w];
    const char *node = hc_ctx.topo && hc_ctx.topo->name ? hc_ctx.topo->name[hc_ctx.node_of_rank[w]]
                                                        : "?";
    hc_explain_add(e, "\n  rank %d (node %s, pid %d): ", w, node, (int)p->pid);
    if (w == hc_ctx.rank) {
        hc_explain_add(e, "this rank");
        return;
    }
    if (p->failed) {
        hc_explain_add(e, "failed: %s", p->fail_why[0] ? p->fail_why : "no details");
        return;
    }
    /* heard_ns stamps point-to-point frames (any driver, shm's included);
     * node collectives meet in the node's shared region, which counts no
     * peer's traffic: for a rank on this node, say so rather than claim
     * that nothing came from it (the collective's line names its flag). */
    bool local = hc_core_on_my_node(w);
    char seen[200];
    bool in_region = local && hc_coll_ops.node_heard && hc_coll_ops.node_heard(w, seen, sizeof(seen));
    if (p->heard_ns)
        hc_explain_add(e, "last heard %.1f s ago (its last message)",
                       (double)(now - p->heard_ns) * 1e-9);
    else if (in_region)
        hc_explain_add(e, "no message from it since init");
    else if (local)
        hc_explain_add(e, "no message from it since init (collectives in the node's shared "
                          "region are not counted per rank)");
    else
        hc_explain_add(e, "nothing received from it since init");
    if (in_region)
        hc_explain_add(e, "; %s", seen);
    if (local) {
        const char *st = hc_proc_state(p->pid);
        hc_explain_add(e, "; on this node, its process is %s", st ? st : "not visible here");
    }
    if (p->conn && p->conn->ops->explain) {
        char drv[600];
        drv[0] = '\0';
        p->conn->ops->explain(p->conn, drv, sizeof(drv));
        if (drv[0])
            hc_explain_add(e, "; %s: %s", p->conn->ops->name, drv);
    }
}

void hc_wait_explain(struct hcomm_request *req, const struct hc_coll_op *op, const char *what,
                     uint64_t waited_ns, hc_explain_t *e)
{
    hc_explain_add(e, "%s has waited %.1f s%s: ", what ? what : "a wait", (double)waited_ns * 1e-9,
                   e->note ? e->note : "");
    if ((req && req->kind == HC_REQ_COLL) || op) {
        if (hc_coll_ops.explain)
            hc_coll_ops.explain(req, op, e);
        else
            hc_explain_add(e, "a collective");
    } else if (req) {
        const struct hcomm_comm *c = req->comm;
        if (!c || c->is_world)
            hc_explain_add(e, "%s on the world communicator: waiting for ",
                           req->kind == HC_REQ_SEND ? "a send" : "a receive");
        else
            hc_explain_add(e, "%s on communicator 0x%x (%d ranks): waiting for ",
                           req->kind == HC_REQ_SEND ? "a send" : "a receive", c->ctx_id, c->size);
        hc_p2p_explain(req, e);
    }
    uint64_t now = hc_time_ns();
    for (int i = 0; i < e->nwaits; i++)
        hc_peer_line(e->waits[i], now, e);
}

void hc_hang_check(struct hcomm_request *req, const struct hc_coll_op *op, const char *what,
                   uint64_t start_ns, uint64_t now, uint64_t *next_p)
{
    if (hc_cfg.warn_after <= 0)
        return;
    uint64_t period = (uint64_t)(hc_cfg.warn_after * 1e9);
    if (!*next_p)
        *next_p = start_ns + period;
    if (now < *next_p)
        return;
    *next_p = now + period;
    char buf[2048], note[64];
    snprintf(note, sizeof(note), " (HCOMM_WARN_AFTER=%g)", hc_cfg.warn_after);
    hc_explain_t e = {.buf = buf, .len = sizeof(buf), .note = note};
    hc_wait_explain(req, op, what, now - start_ns, &e);
    hc_log_warn("%s", buf);
}

/* hcommrun asked: the wait in progress, with a first line it can read. */
static void hc_hang_answer(uint64_t now)
{
    char text[HC_REPORT_MAX - 256], out[HC_REPORT_MAX];
    hc_explain_t e = {.buf = text, .len = sizeof(text)};
    text[0] = 0;
    if (hc_ctx.waiting.what)
        hc_wait_explain(hc_ctx.waiting.req, hc_ctx.waiting.op, hc_ctx.waiting.what,
                        now - hc_ctx.waiting.since_ns, &e);
    else
        hc_explain_add(&e, "not blocked in hcomm (polling hcomm_test, or between calls)");
    char waits[128] = "-";
    size_t n = 0;
    for (int i = 0; i < e.nwaits && n + 12 < sizeof(waits); i++)
        n += (size_t)snprintf(waits + n, sizeof(waits) - n, "%s%d", i ? "," : "", e.waits[i]);
    int len = snprintf(out, sizeof(out), "hcomm-report rank=%d waits_for=%s\n%s\n", hc_ctx.rank,
                       waits, text);
    if (len > 0)
        (void)send(hc_ctx.control_fd, out, (size_t)HC_MIN(len, (int)sizeof(out) - 1),
                   MSG_DONTWAIT | MSG_NOSIGNAL);
}

void hc_hang_poll(uint64_t now)
{
    static uint64_t next_heard, next_control;
    if (now >= next_heard) {
        next_heard = now + HC_HEARD_PERIOD_NS;
        for (int r = 0; r < hc_ctx.size; r++) {
            hc_peer_t *p = &hc_ctx.peers[r];
            if (p->rx_frames != p->rx_seen) {
                p->rx_seen = p->rx_frames;
                p->heard_ns = now;
            }
        }
    }
    if (hc_ctx.control_fd < 0 || now < next_control)
        return;
    next_control = now + HC_CONTROL_PERIOD_NS;
    char req[64];
    ssize_t n = recv(hc_ctx.control_fd, req, sizeof(req), MSG_DONTWAIT);
    if (n > 0)
        hc_hang_answer(now);
}
