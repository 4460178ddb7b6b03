/*
 * Driver registry and the selection ladder. Drivers register from
 * constructors; missing ops are filled from a base table that answers
 * ERR_UNSUPPORTED so callers never test for NULL. Selection: "self" always;
 * the best node driver (shm) when other ranks share the node and HCOMM_SHM is
 * on; the best network driver (or the one HCOMM_NET names) when some rank is
 * on another node, or shares the node while shm is off. Every decision is
 * logged at info level with the reasons the other drivers were skipped.
 */
#include "drv/drv.h"
#include "base/config.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

static struct hc_drv_ops hc_drv_table[HC_DRV_MAX];
static int hc_drv_n;

static hcomm_status_t hc_drv_unsup_probe(const hc_drv_env_t *env, char *why, size_t len)
{
    (void)env;
    snprintf(why, len, "no probe");
    return HCOMM_ERR_UNSUPPORTED;
}
static hcomm_status_t hc_drv_unsup_open(const hc_drv_env_t *env, hc_drv_t **drv_p)
{
    (void)env;
    (void)drv_p;
    return HCOMM_ERR_UNSUPPORTED;
}
static hcomm_status_t hc_drv_empty_addr(hc_drv_t *drv, void *buf, size_t *len_p)
{
    (void)drv;
    (void)buf;
    *len_p = 0;
    return HCOMM_OK;
}
static hcomm_status_t hc_drv_noop_wireup(hc_drv_t *drv, const void *const *a, const size_t *l)
{
    (void)drv;
    (void)a;
    (void)l;
    return HCOMM_OK;
}
static hcomm_status_t hc_drv_unsup_connect(hc_drv_t *drv, int peer, const void *addr, size_t len,
                                           hc_conn_t **conn_p)
{
    (void)drv;
    (void)addr;
    (void)len;
    (void)conn_p;
    return hc_error(HCOMM_ERR_UNSUPPORTED, "driver cannot connect to rank %d", peer);
}
static hcomm_status_t hc_drv_unsup_put(hc_conn_t *conn, const hc_frame_hdr_t *hdr,
                                       const void *payload, void *cookie)
{
    (void)conn;
    (void)hdr;
    (void)payload;
    (void)cookie;
    return HCOMM_ERR_UNSUPPORTED;
}
static hcomm_status_t hc_drv_unsup_rma(hc_conn_t *conn, const hc_rma_t *rma)
{
    (void)conn;
    (void)rma;
    return HCOMM_ERR_UNSUPPORTED;
}
/* No key needed: an empty packed key, and nothing to unpack. */
static hcomm_status_t hc_drv_empty_rkey_pack(hc_drv_t *drv, uint64_t key, const hc_mem_desc_t *desc,
                                             void *buf, size_t *len_p)
{
    (void)drv;
    (void)key;
    (void)desc;
    (void)buf;
    *len_p = 0;
    return HCOMM_OK;
}
static hcomm_status_t hc_drv_empty_rkey_unpack(hc_conn_t *conn, const void *buf, size_t len,
                                               hc_rkey_t **rkey_p)
{
    (void)buf;
    *rkey_p = NULL;
    if (len)
        return hc_error(HCOMM_ERR_INVALID, "%s: rank %d sent a %zu-byte key where none is used",
                        conn->ops->name, conn->peer, len);
    return HCOMM_OK;
}
static void hc_drv_noop_rkey_release(hc_conn_t *conn, hc_rkey_t *rkey)
{
    (void)conn;
    (void)rkey;
}
static void hc_drv_drop_ep_recv(hc_drv_t *drv, int from, const void *blob, size_t len)
{
    (void)blob;
    hc_log_warn("%s: a %zu-byte handshake from rank %d, but this driver has none: dropped",
                drv->ops->name, len, from);
}
static void hc_drv_noop_describe(const hc_drv_env_t *env,
                                 void (*line)(const char *text, void *arg), void *arg)
{
    (void)env;
    (void)line;
    (void)arg;
}
static void hc_drv_noop_counters(hc_drv_t *drv,
                                 void (*kv)(const char *name, uint64_t value, void *arg), void *arg)
{
    (void)drv;
    (void)kv;
    (void)arg;
}
static hcomm_status_t hc_drv_unsup_rkey_ptr(hc_conn_t *conn, const hc_rkey_t *rkey,
                                            uint64_t remote_addr, size_t len, void **ptr_p)
{
    (void)conn;
    (void)rkey;
    (void)remote_addr;
    (void)len;
    *ptr_p = NULL;
    return HCOMM_ERR_UNSUPPORTED;
}
static int hc_drv_noop_progress(hc_drv_t *drv)
{
    (void)drv;
    return 0;
}
static hcomm_status_t hc_drv_noop_reg(hc_drv_t *drv, const hc_mem_desc_t *desc, uint64_t *key_p)
{
    (void)drv;
    (void)desc;
    *key_p = 0;
    return HCOMM_OK;
}
static void hc_drv_noop_dereg(hc_drv_t *drv, uint64_t key)
{
    (void)drv;
    (void)key;
}
static void *hc_drv_no_shared(hc_drv_t *drv, uint64_t key, size_t size, int users)
{
    (void)drv;
    (void)key;
    (void)size;
    (void)users;
    return NULL;
}
static void hc_drv_noop_shared_put(hc_drv_t *drv, uint64_t key)
{
    (void)drv;
    (void)key;
}
static void hc_drv_noop_disconnect(hc_conn_t *conn)
{
    (void)conn;
}
static void hc_drv_noop_close(hc_drv_t *drv)
{
    (void)drv;
}

static const struct hc_drv_ops hc_drv_base = {
    .probe = hc_drv_unsup_probe,
    .open = hc_drv_unsup_open,
    .addr_pack = hc_drv_empty_addr,
    .wireup = hc_drv_noop_wireup,
    .connect = hc_drv_unsup_connect,
    .put = hc_drv_unsup_put,
    .get = hc_drv_unsup_rma,
    .progress = hc_drv_noop_progress,
    .mem_reg = hc_drv_noop_reg,
    .mem_dereg = hc_drv_noop_dereg,
    .shared_get = hc_drv_no_shared,
    .disconnect = hc_drv_noop_disconnect,
    .close = hc_drv_noop_close,
    .shared_put = hc_drv_noop_shared_put,
    .write = hc_drv_unsup_rma,
    .rkey_pack = hc_drv_empty_rkey_pack,
    .rkey_unpack = hc_drv_empty_rkey_unpack,
    .rkey_release = hc_drv_noop_rkey_release,
    .rkey_ptr = hc_drv_unsup_rkey_ptr,
    .ep_recv = hc_drv_drop_ep_recv,
    .describe = hc_drv_noop_describe,
    .counters = hc_drv_noop_counters,
};

static char hc_drv_refused[160];

const char *hc_drv_registry_error(void)
{
    return hc_drv_refused[0] ? hc_drv_refused : NULL;
}

void hc_drv_register(const struct hc_drv_ops *ops)
{
    /* Runs from constructors, before any logging is set up: the refusal is
     * kept and reported by hcomm_init (hc_drv_select_open). */
    if (hc_drv_n == HC_DRV_MAX) {
        if (!hc_drv_refused[0])
            snprintf(hc_drv_refused, sizeof(hc_drv_refused),
                     "driver %s not registered: at most %d drivers (HC_MAX_DRIVERS)",
                     ops->name ? ops->name : "(unnamed)", HC_DRV_MAX);
        return;
    }
    /* The registry is kept in ladder order (scope, then priority, highest
     * first; equal ones in registration order), whatever order the linker
     * put the drivers' constructors in. */
    int i = hc_drv_n++;
    while (i > 0 && (hc_drv_table[i - 1].scope > ops->scope ||
                     (hc_drv_table[i - 1].scope == ops->scope &&
                      hc_drv_table[i - 1].priority < ops->priority))) {
        hc_drv_table[i] = hc_drv_table[i - 1];
        i--;
    }
    /* Drivers are built with the library (drv/<name>/): a NULL op is one
     * the driver does not have, filled from the base table. */
    struct hc_drv_ops *t = &hc_drv_table[i];
    *t = *ops;
#define HC_DRV_FILL_(f)                                                                            \
    if (!t->f)                                                                                     \
        t->f = hc_drv_base.f;
    HC_DRV_FILL_(probe) HC_DRV_FILL_(open) HC_DRV_FILL_(addr_pack) HC_DRV_FILL_(wireup)
    HC_DRV_FILL_(connect) HC_DRV_FILL_(put) HC_DRV_FILL_(get) HC_DRV_FILL_(progress)
    HC_DRV_FILL_(mem_reg) HC_DRV_FILL_(mem_dereg) HC_DRV_FILL_(shared_get)
    HC_DRV_FILL_(disconnect) HC_DRV_FILL_(close) HC_DRV_FILL_(shared_put)
    HC_DRV_FILL_(write) HC_DRV_FILL_(rkey_pack) HC_DRV_FILL_(rkey_unpack)
    HC_DRV_FILL_(rkey_release) HC_DRV_FILL_(rkey_ptr) HC_DRV_FILL_(ep_recv)
    HC_DRV_FILL_(describe) HC_DRV_FILL_(counters)
#undef HC_DRV_FILL_
}

bool hc_drv_progress_is_noop(const struct hc_drv_ops *ops)
{
    return ops->progress == hc_drv_noop_progress;
}

bool hc_drv_registers_memory(const struct hc_drv_ops *ops)
{
    /* A node driver's registrations lock nothing (shm exports device
     * memory by IPC; its host memory needs no key). */
    return ops->mem_reg != hc_drv_noop_reg && ops->scope == HC_DRV_SCOPE_NET;
}

int hc_drv_count(void)
{
    return hc_drv_n;
}

const struct hc_drv_ops *hc_drv_at(int i)
{
    return (i >= 0 && i < hc_drv_n) ? &hc_drv_table[i] : NULL;
}

const struct hc_drv_ops *hc_drv_find(const char *name)
{
    for (int i = 0; i < hc_drv_n; i++)
        if (!strcasecmp(hc_drv_table[i].name, name))
            return &hc_drv_table[i];
    return NULL;
}

/* The best driver of scope that probes fine (or exactly `forced`). */
static const struct hc_drv_ops *hc_drv_pick(const hc_drv_env_t *env, int scope, const char *forced,
                                            hcomm_status_t *st_p)
{
    const struct hc_drv_ops *best = NULL;
    char why[256], skipped[768] = "";
    for (int i = 0; i < hc_drv_n; i++) {
        const struct hc_drv_ops *o = &hc_drv_table[i];
        if (o->scope != scope)
            continue;
        if (forced && strcasecmp(o->name, forced)) {
            hc_log_info("driver %s skipped: HCOMM_NET=%s", o->name, forced);
            continue;
        }
        why[0] = '\0';
        hcomm_status_t pst = o->probe(env, why, sizeof(why));
        if (pst == HCOMM_ERR_INVALID) {
            /* A knob of the driver has a bad value (the probe's contract):
             * the user set it, so going on without the driver would hide
             * the mistake. */
            *st_p = hc_error(HCOMM_ERR_INVALID, "hcomm_init: driver %s: %s", o->name,
                             why[0] ? why : "a bad setting");
            return NULL;
        }
        if (pst != HCOMM_OK) {
            hc_log_info("driver %s skipped: %s", o->name, why);
            size_t used = strlen(skipped);
            snprintf(skipped + used, sizeof(skipped) - used, "%s%s: %s", used ? "; " : "",
                     o->name, why[0] ? why : "not usable");
            continue;
        }
        if (!best || o->priority > best->priority)
            best = o;
    }
    *st_p = HCOMM_OK;
    if (!best && forced)
        *st_p = hc_error(HCOMM_ERR_NO_DEVICE, "hcomm_init: HCOMM_NET=%s is not usable here (%s)",
                         forced, skipped[0] ? skipped : "no driver of that name in this build");
    else if (!best && scope == HC_DRV_SCOPE_NET)
        *st_p = hc_error(HCOMM_ERR_NO_DEVICE, "hcomm_init: no network driver can reach the ranks "
                         "on other nodes (%s)", skipped[0] ? skipped : "none in this build");
    return best;
}

hcomm_status_t hc_drv_select_open(const hc_drv_env_t *env, hc_drv_t **drvs, int *ndrvs_p)
{
    bool remote = false;
    for (int r = 0; r < env->size; r++)
        if (env->node_of_rank[r] != env->node_of_rank[env->rank])
            remote = true;
    bool use_node = hc_cfg.shm && env->local_size > 1;
    bool need_net = remote || (!use_node && env->local_size > 1);
    const char *forced = strcasecmp(hc_cfg.net, "auto") ? hc_cfg.net : NULL;
    const struct hc_drv_ops *chosen[3] = {0};
    hcomm_status_t st;

    if (hc_drv_registry_error())
        return hc_error(HCOMM_ERR_INTERNAL, "hcomm_init: %s", hc_drv_registry_error());
    if (forced) { /* checked whether or not this job needs a network driver */
        bool known = false;
        char names[160] = "auto";
        size_t nl = strlen(names);
        for (int i = 0; i < hc_drv_n; i++) {
            if (hc_drv_table[i].scope != HC_DRV_SCOPE_NET)
                continue;
            known |= !strcasecmp(forced, hc_drv_table[i].name);
            nl += (size_t)snprintf(names + nl, sizeof(names) - nl, "|%s", hc_drv_table[i].name);
        }
        if (!known)
            return hc_error(HCOMM_ERR_INVALID,
                            "hcomm_init: HCOMM_NET=%s is not a network driver of this build: use "
                            "%s",
                            forced, names);
    }
    chosen[0] = hc_drv_pick(env, HC_DRV_SCOPE_SELF, NULL, &st);
    if (st != HCOMM_OK)
        return st;
    if (use_node) {
        chosen[1] = hc_drv_pick(env, HC_DRV_SCOPE_NODE, NULL, &st);
        if (st != HCOMM_OK)
            return st;
    }
    if (use_node && !chosen[1])
        need_net = true;
    if (need_net) {
        chosen[2] = hc_drv_pick(env, HC_DRV_SCOPE_NET, forced, &st);
        if (!chosen[2])
            return st;
    }
    if (!chosen[0])
        return hc_error(HCOMM_ERR_INTERNAL, "hcomm_init: the self driver is missing");
    int n = 0;
    for (int i = 0; i < 3; i++) {
        if (!chosen[i])
            continue;
        hc_drv_t *d = NULL;
        st = chosen[i]->open(env, &d);
        if (st != HCOMM_OK) {
            for (int k = 0; k < n; k++)
                drvs[k]->ops->close(drvs[k]);
            return st;
        }
        d->ops = chosen[i];
        d->env = env;
        d->index = n;
        drvs[n++] = d;
        hc_log_info("driver %s chosen for %s", chosen[i]->name,
                    i == 0 ? "this rank" : i == 1 ? "ranks on this node" : "ranks on other nodes");
    }
    *ndrvs_p = n;
    return HCOMM_OK;
}

void hc_drv_describe(const hc_drv_env_t *env, void (*line)(const char *text, void *arg), void *arg)
{
    static const char *const scopes[] = {"self", "node", "net"};
    for (int i = 0; i < hc_drv_n; i++) {
        const struct hc_drv_ops *o = &hc_drv_table[i];
        char why[256] = "", text[400];
        hcomm_status_t st = o->probe(env, why, sizeof(why));
        snprintf(text, sizeof(text), "%-6s (%s, priority %d): %s%s%s", o->name, scopes[o->scope],
                 o->priority, st == HCOMM_OK ? "usable" : "skipped", why[0] ? ": " : "", why);
        line(text, arg);
        o->describe(env, line, arg);
    }
}
