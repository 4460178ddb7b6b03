/*
 * Who am I: the job description from the launcher's environment. The first
 * launcher whose rank and size variables are both present wins (hcommrun,
 * torchrun, Open MPI, Slurm); a launcher with only one of the two is an
 * error, not a fall-through, because silently running as "one rank of one"
 * inside a real job makes every rank its own job and the job hangs.
 * Everything is validated here, so hc_bootstrap_open() and the rest of the
 * library can trust the fields: a bad value is an ERR_INVALID naming the
 * variable and the value it had.
 */
#include "core/bootstrap.h"
#include "base/config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#define HC_BS_ENV_FN "hc_bootstrap_params_from_env"

typedef struct {
    const char *source;
    const char *rank, *size, *local_rank, *local_size;
    bool needs_url; /* the launcher gives no rendezvous address of its own */
    bool pmi;       /* ... but a PMI-1 key-value space on PMI_FD (core/bootstrap_pmi.c) */
} hc_bootstrap_launcher_t;

static const hc_bootstrap_launcher_t hc_bootstrap_launchers[] = {
    {"hcommrun", "HCOMM_RANK", "HCOMM_SIZE", "HCOMM_LOCAL_RANK", "HCOMM_LOCAL_SIZE", true},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", false},
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE", true},
    /* mpiexec.hydra (MPICH, Intel MPI, MVAPICH); before Slurm: under srun it
     * is the nearer launcher */
    {"hydra", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", true, true},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", NULL, true},
};

/* A decimal integer in [lo, hi], the whole string, no sign games. */
static hcomm_status_t hc_bootstrap_env_int(const char *name, long lo, long hi, long *v_p)
{
    const char *s = getenv(name);
    char *end;
    long v;

    if (s == NULL) return hc_error(HCOMM_ERR_INVALID, HC_BS_ENV_FN ": %s is not set", name);
    /* strtol alone would accept " 3", "+3" and "" */
    const char *d = s[0] == '-' ? s + 1 : s;
    bool digit = d[0] >= '0' && d[0] <= '9';
    errno = 0;
    v = digit ? strtol(s, &end, 10) : 0;
    if (!digit || *end != '\0' || errno)
        return hc_error(HCOMM_ERR_INVALID, HC_BS_ENV_FN ": %s is not an integer (\"%s\")", name, s);
    if (v < lo || v > hi)
        return hc_error(HCOMM_ERR_INVALID, HC_BS_ENV_FN ": %s=%ld is out of range [%ld, %ld]", name,
                        v, lo, hi);
    *v_p = v;
    return HCOMM_OK;
}

static bool hc_bootstrap_host_char_ok(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '.' || c == '_';
}

hcomm_status_t hc_bootstrap_url_parse(const char *url, const char *what, hc_bootstrap_url_t *u_p)
{
    hc_bootstrap_url_t u;
    memset(&u, 0, sizeof(u));

    if (url == NULL) return hc_error(HCOMM_ERR_INVALID, "%s: the bootstrap URL is NULL", what);
    if (!strncmp(url, "file://", 7)) {
        const char *dir = url + 7;
        if (dir[0] != '/')
            return hc_error(HCOMM_ERR_INVALID,
                            "%s=\"%s\": a file URL needs an absolute directory (file:///dir)", what,
                            url);
        if (strlen(dir) >= sizeof(u.dir) - 64)
            return hc_error(HCOMM_ERR_INVALID, "%s=\"%s\": directory path too long", what, url);
        u.is_file = true;
        strcpy(u.dir, dir);
        *u_p = u;
        return HCOMM_OK;
    }
    if (strncmp(url, "tcp://", 6))
        return hc_error(HCOMM_ERR_INVALID,
                        "%s=\"%s\": expected tcp://host:port or file:///absolute/dir", what, url);

    const char *h = url + 6, *hend, *port;
    if (h[0] == '[') {
        hend = strchr(h, ']');
        if (hend == NULL || hend[1] != ':')
            return hc_error(HCOMM_ERR_INVALID, "%s=\"%s\": expected tcp://[ipv6]:port", what, url);
        h++;
        port = hend + 2;
        for (const char *c = h; c < hend; c++) {
            if (!(hc_bootstrap_host_char_ok(*c) || *c == ':' || *c == '%'))
                return hc_error(HCOMM_ERR_INVALID, "%s=\"%s\": bad character in IPv6 address", what,
                                url);
        }
    } else {
        hend = strchr(h, ':');
        if (hend == NULL) return hc_error(HCOMM_ERR_INVALID, "%s=\"%s\": missing :port", what, url);
        port = hend + 1;
        for (const char *c = h; c < hend; c++) {
            if (!hc_bootstrap_host_char_ok(*c))
                return hc_error(HCOMM_ERR_INVALID,
                                "%s=\"%s\": bad character '%c' in host (IPv6 needs [brackets])",
                                what, url, *c);
        }
    }
    if (hend == h) return hc_error(HCOMM_ERR_INVALID, "%s=\"%s\": empty host", what, url);
    if ((size_t)(hend - h) >= sizeof(u.host))
        return hc_error(HCOMM_ERR_INVALID, "%s=\"%s\": host name too long", what, url);

    char *end;
    errno = 0;
    long pv = (port[0] >= '0' && port[0] <= '9') ? strtol(port, &end, 10) : -1;
    if (pv < 1 || pv > 65535 || *end != '\0' || errno)
        return hc_error(HCOMM_ERR_INVALID, "%s=\"%s\": port must be an integer in [1, 65535]", what,
                        url);
    memcpy(u.host, h, (size_t)(hend - h));
    u.port = (int)pv;
    *u_p = u;
    return HCOMM_OK;
}

static hcomm_status_t hc_bootstrap_env_launcher(const hc_bootstrap_launcher_t *l,
                                                hc_bootstrap_params_t *p)
{
    hcomm_status_t st;
    long size = 0, rank = 0, v = 0;

    st = hc_bootstrap_env_int(l->size, 1, HC_BOOTSTRAP_MAX_SIZE, &size);
    if (st != HCOMM_OK) return st;
    st = hc_bootstrap_env_int(l->rank, 0, size - 1, &rank);
    if (st != HCOMM_OK) return st;
    p->rank = (int)rank;
    p->size = (int)size;
    p->local_rank = p->local_size = -1;
    if (l->local_size && getenv(l->local_size)) {
        st = hc_bootstrap_env_int(l->local_size, 1, size, &v);
        if (st != HCOMM_OK) return st;
        p->local_size = (int)v;
    }
    if (l->local_rank && getenv(l->local_rank)) {
        long hi = p->local_size > 0 ? p->local_size - 1 : size - 1;
        st = hc_bootstrap_env_int(l->local_rank, 0, hi, &v);
        if (st != HCOMM_OK) return st;
        p->local_rank = (int)v;
    }
    if (p->local_size > 0 && p->local_rank < 0 && l->local_rank)
        return hc_error(HCOMM_ERR_INVALID, HC_BS_ENV_FN ": %s is set but %s is not", l->local_size,
                        l->local_rank);
    p->source = l->source;
    return HCOMM_OK;
}

/* torchrun's MASTER_ADDR may be a bare IPv6 address: bracket it. Under
 * torchrun's elastic agent (TORCHELASTIC_RUN_ID set) the agent's TCPStore
 * holds MASTER_PORT for the whole job, so rank 0 listens on MASTER_PORT + 1
 * (docs/bootstrap.md), and the job key is the run's identity (run id,
 * restart count, address): ranks of another run or attempt are refused. */
static hcomm_status_t hc_bootstrap_env_torch_url(hc_bootstrap_params_t *p)
{
    const char *addr = getenv("MASTER_ADDR"), *port = getenv("MASTER_PORT");
    const char *run = getenv("TORCHELASTIC_RUN_ID");
    char port_buf[16];
    if (run && port) {
        char *end;
        long pv = strtol(port, &end, 10);
        if (*end || pv < 1 || pv >= 65535)
            return hc_error(HCOMM_ERR_INVALID, HC_BS_ENV_FN ": MASTER_PORT=\"%s\" is not a port "
                                               "below 65535", port);
        snprintf(port_buf, sizeof(port_buf), "%ld", pv + 1);
        if (!p->job_key[0]) {
            const char *restart = getenv("TORCHELASTIC_RESTART_COUNT");
            snprintf(p->job_key, sizeof(p->job_key), "torchelastic:%.40s:%.8s:%.40s:%ld", run,
                     restart ? restart : "0", addr ? addr : "", pv);
        }
        port = port_buf;
        p->port_span = HC_BOOTSTRAP_DERIVED_PORT_SPAN;
    }
    const char *missing = addr == NULL ? "MASTER_ADDR" : port == NULL ? "MASTER_PORT" : NULL;
    int n;

    if (missing) {
        if (p->size == 1) return HCOMM_OK;
        return hc_error(HCOMM_ERR_INVALID,
                        HC_BS_ENV_FN ": torchrun job of %d ranks but %s is not set (set it, or "
                                     "HCOMM_BOOTSTRAP)",
                        p->size, missing);
    }
    if (strchr(addr, ':') && addr[0] != '[')
        n = snprintf(p->url, sizeof(p->url), "tcp://[%s]:%s", addr, port);
    else
        n = snprintf(p->url, sizeof(p->url), "tcp://%s:%s", addr, port);
    if (n < 0 || (size_t)n >= sizeof(p->url))
        return hc_error(HCOMM_ERR_INVALID, HC_BS_ENV_FN ": MASTER_ADDR too long (\"%s\")", addr);
    hc_bootstrap_url_t u;
    return hc_bootstrap_url_parse(p->url, HC_BS_ENV_FN ": MASTER_ADDR:MASTER_PORT", &u);
}

/* The first host of a Slurm host list: "node[07-09,12],gpu1" -> "node07",
 * "a,b" -> "a", "n[3]" -> "n3". */
hcomm_status_t hc_bootstrap_slurm_first_host(const char *list, char *out, size_t len)
{
    size_t pre = strcspn(list, ",[");
    if (pre == 0 || pre >= len)
        return hc_error(HCOMM_ERR_INVALID, HC_BS_ENV_FN ": the Slurm node list \"%s\" does not "
                                           "start with a host name", list);
    memcpy(out, list, pre);
    out[pre] = 0;
    if (list[pre] != '[')
        return HCOMM_OK;
    const char *r = list + pre + 1;
    size_t dl = strspn(r, "0123456789"); /* the first number of the range, zeros kept */
    if (dl == 0 || (r[dl] != '-' && r[dl] != ',' && r[dl] != ']') || pre + dl >= len)
        return hc_error(HCOMM_ERR_INVALID, HC_BS_ENV_FN ": cannot read the Slurm node list "
                                           "\"%s\"", list);
    memcpy(out + pre, r, dl);
    out[pre + dl] = 0;
    /* a suffix after the bracket ("n[1-2]-ib") belongs to every host */
    const char *close = strchr(r, ']');
    if (!close)
        return hc_error(HCOMM_ERR_INVALID, HC_BS_ENV_FN ": unclosed [ in the Slurm node list "
                                           "\"%s\"", list);
    size_t suf = strcspn(close + 1, ",");
    if (pre + dl + suf >= len)
        return hc_error(HCOMM_ERR_INVALID, HC_BS_ENV_FN ": host name too long in \"%s\"", list);
    memcpy(out + pre + dl, close + 1, suf);
    out[pre + dl + suf] = 0;
    return HCOMM_OK;
}

/* The task count of node `node` in SLURM_STEP_TASKS_PER_NODE ("2(x3),1"). */
static long hc_bootstrap_slurm_tasks_on(const char *tpn, long node)
{
    long seen = 0;
    for (const char *p = tpn; *p;) {
        char *end;
        long cnt = strtol(p, &end, 10), rep = 1;
        if (end == p || cnt < 1)
            return -1;
        p = end;
        if (!strncmp(p, "(x", 2)) {
            rep = strtol(p + 2, &end, 10);
            if (end == p + 2 || *end != ')' || rep < 1)
                return -1;
            p = end + 1;
        }
        if (node < seen + rep)
            return cnt;
        seen += rep;
        if (*p == ',')
            p++;
        else if (*p)
            return -1;
    }
    return -1;
}

/* srun without an address (docs/launchers.md): rank 0 runs on the first host
 * of the step's node list and listens on a port derived from the job and
 * step ids, 20000 + (job * 64 + step) mod 40000, or the first free one of
 * the 15 after it (HC_BOOTSTRAP_DERIVED_PORT_SPAN); the key is the step's
 * identity; the local size comes from SLURM_STEP_TASKS_PER_NODE. */
static hcomm_status_t hc_bootstrap_env_slurm(hc_bootstrap_params_t *p)
{
    const char *list = getenv("SLURM_STEP_NODELIST");
    if (!list) list = getenv("SLURM_JOB_NODELIST");
    if (!list) list = getenv("SLURM_NODELIST");
    const char *job = getenv("SLURM_JOB_ID"), *step = getenv("SLURM_STEP_ID");
    if (!list || !job) {
        if (p->size == 1) return HCOMM_OK;
        return hc_error(HCOMM_ERR_INVALID,
                        HC_BS_ENV_FN ": Slurm job of %d ranks but %s is not set (set "
                                     "HCOMM_BOOTSTRAP, or run under srun)",
                        p->size, !list ? "SLURM_STEP_NODELIST" : "SLURM_JOB_ID");
    }
    char host[256];
    hcomm_status_t st = hc_bootstrap_slurm_first_host(list, host, sizeof(host));
    if (st != HCOMM_OK) return st;
    char *end;
    long j = strtol(job, &end, 10), s = step ? strtol(step, NULL, 10) : 0;
    if (*end || j < 0)
        return hc_error(HCOMM_ERR_INVALID, HC_BS_ENV_FN ": SLURM_JOB_ID=\"%s\" is not a job id",
                        job);
    if (s < 0) s = 0; /* batch (-5), extern (-4) steps... */
    int port = 20000 + (int)(((unsigned long)j * 64u + (unsigned long)s) % 40000u);
    snprintf(p->url, sizeof(p->url), "tcp://%s:%d", host, port);
    p->port_span = HC_BOOTSTRAP_DERIVED_PORT_SPAN;
    if (!p->job_key[0]) {
        const char *cl = getenv("SLURM_CLUSTER_NAME");
        snprintf(p->job_key, sizeof(p->job_key), "slurm:%.32s:%ld.%ld", cl ? cl : "", j, s);
    }
    const char *tpn = getenv("SLURM_STEP_TASKS_PER_NODE");
    if (!tpn) tpn = getenv("SLURM_TASKS_PER_NODE");
    const char *nid = getenv("SLURM_NODEID");
    if (tpn && nid && p->local_size < 0) {
        long t = hc_bootstrap_slurm_tasks_on(tpn, strtol(nid, NULL, 10));
        if (t < 1 || t > p->size)
            return hc_error(HCOMM_ERR_INVALID,
                            HC_BS_ENV_FN ": cannot read node %s's task count in "
                                         "SLURM_STEP_TASKS_PER_NODE=\"%s\"",
                            nid, tpn);
        p->local_size = (int)t;
        if (p->local_rank >= p->local_size)
            return hc_error(HCOMM_ERR_INVALID,
                            HC_BS_ENV_FN ": SLURM_LOCALID=%d but node %s runs %ld tasks",
                            p->local_rank, nid, t);
    }
    hc_bootstrap_url_t u;
    return hc_bootstrap_url_parse(p->url, HC_BS_ENV_FN ": the Slurm-derived address", &u);
}

/* Which launcher started this rank (the first whose rank and size are both
 * set) and what its variables say; *l_p NULL: none, a single rank. */
static hcomm_status_t hc_bootstrap_env_who(hc_bootstrap_params_t *p,
                                           const hc_bootstrap_launcher_t **l_p)
{
    const hc_bootstrap_launcher_t *l = NULL;
    for (size_t i = 0; i < HC_ARRAY_SIZE(hc_bootstrap_launchers) && l == NULL; i++) {
        const hc_bootstrap_launcher_t *c = &hc_bootstrap_launchers[i];
        bool has_rank = getenv(c->rank) != NULL, has_size = getenv(c->size) != NULL;
        if (has_rank != has_size)
            return hc_error(HCOMM_ERR_INVALID, HC_BS_ENV_FN ": %s is set but %s is not (%s)",
                            has_rank ? c->rank : c->size, has_rank ? c->size : c->rank, c->source);
        if (has_rank) l = c;
    }
    *l_p = l;
    if (l) return hc_bootstrap_env_launcher(l, p);
    p->rank = 0;
    p->size = 1;
    p->local_rank = 0;
    p->local_size = 1;
    p->source = "single";
    return HCOMM_OK;
}

/* HCOMM_JOB_KEY, and HCOMM_BOOTSTRAP or else the url torchrun's variables
 * imply. */
static hcomm_status_t hc_bootstrap_env_given(hc_bootstrap_params_t *p, const char *key,
                                             const char *url, const hc_bootstrap_launcher_t *l)
{
    hcomm_status_t st;
    if (key) {
        if (strlen(key) > HC_BOOTSTRAP_MAX_KEY)
            return hc_error(HCOMM_ERR_INVALID,
                            HC_BS_ENV_FN ": HCOMM_JOB_KEY is %zu characters, at most %u allowed",
                            strlen(key), HC_BOOTSTRAP_MAX_KEY);
        strcpy(p->job_key, key);
    }

    if (url && url[0]) {
        hc_bootstrap_url_t u;
        if (strlen(url) >= sizeof(p->url))
            return hc_error(HCOMM_ERR_INVALID, HC_BS_ENV_FN ": HCOMM_BOOTSTRAP too long (%zu)",
                            strlen(url));
        st = hc_bootstrap_url_parse(url, HC_BS_ENV_FN ": HCOMM_BOOTSTRAP", &u);
        if (st != HCOMM_OK) return st;
        strcpy(p->url, url);
        p->key_expected = true;
    } else if (l && !l->needs_url) {
        st = hc_bootstrap_env_torch_url(p);
        if (st != HCOMM_OK) return st;
    }
    return HCOMM_OK;
}

/* PMI-1 on PMI_FD (hydra). srun --mpi=pmi2 sets PMI_RANK/PMI_SIZE/PMI_FD
 * too, but speaks PMI-2: the step's own variables describe the job as well
 * (then *l_p becomes slurm's entry). */
static hcomm_status_t hc_bootstrap_env_pmi1(hc_bootstrap_params_t *p,
                                            const hc_bootstrap_launcher_t **l_p)
{
    hcomm_status_t st = hc_bootstrap_pmi(p, hc_cfg.timeout > 0 ? hc_cfg.timeout : 60.0);
    if (st != HCOMM_OK && getenv("SLURM_STEP_ID") && getenv("SLURM_PROCID")) {
        hc_log_info("bootstrap: PMI-1 on PMI_FD failed (%s): using srun's variables",
                    hc_error_last());
        hc_bootstrap_params_t q;
        memset(&q, 0, sizeof(q));
        const hc_bootstrap_launcher_t *sl = NULL;
        for (size_t i = 0; i < HC_ARRAY_SIZE(hc_bootstrap_launchers); i++)
            if (!strcmp(hc_bootstrap_launchers[i].source, "slurm"))
                sl = &hc_bootstrap_launchers[i];
        if ((st = hc_bootstrap_env_launcher(sl, &q)) != HCOMM_OK) return st;
        strcpy(q.job_key, p->job_key);
        *p = q;
        *l_p = sl;
        return hc_bootstrap_env_slurm(p);
    }
    return st;
}

hcomm_status_t hc_bootstrap_params_from_env(hc_bootstrap_params_t *p_p)
{
    hc_bootstrap_params_t p;
    const hc_bootstrap_launcher_t *l = NULL;
    const char *url = hc_config_env("HCOMM_BOOTSTRAP"), *key = hc_config_env("HCOMM_JOB_KEY");
    hcomm_status_t st;

    if (p_p == NULL) return hc_error(HCOMM_ERR_INVALID, HC_BS_ENV_FN ": argument p is NULL");
    memset(&p, 0, sizeof(p));
    if ((st = hc_bootstrap_env_who(&p, &l)) != HCOMM_OK) return st;
    if ((st = hc_bootstrap_env_given(&p, key, url, l)) != HCOMM_OK) return st;
    /* PMIx when the launcher serves it (mpirun/prterun, srun --mpi=pmix) */
    if (p.size > 1 && p.url[0] == '\0' && l &&
        (!strcmp(l->source, "openmpi") || !strcmp(l->source, "slurm")) &&
        hc_bootstrap_pmix_available()) {
        st = hc_bootstrap_pmix(&p, hc_cfg.timeout > 0 ? hc_cfg.timeout : 60.0);
        if (st != HCOMM_OK) return st;
    }
    if (p.url[0] == '\0' && l && !strcmp(l->source, "slurm")) {
        st = hc_bootstrap_env_slurm(&p);
        if (st != HCOMM_OK) return st;
    }
    if (p.size > 1 && p.url[0] == '\0' && l && l->pmi) {
        st = hc_bootstrap_env_pmi1(&p, &l);
        if (st != HCOMM_OK) return st;
    }
    if (p.size > 1 && p.url[0] == '\0')
        return hc_error(HCOMM_ERR_INVALID,
                        HC_BS_ENV_FN ": %s job of %d ranks but HCOMM_BOOTSTRAP is not set "
                                     "(tcp://host:port or file:///shared/dir)",
                        p.source, p.size);
    if (p.size == 1 && !l) p.url[0] = '\0';
    *p_p = p;
    return HCOMM_OK;
}

hcomm_status_t hc_bootstrap_params_given(int rank, int size, int local_rank, int local_size,
                                         const char *url, const char *key,
                                         hc_bootstrap_params_t *p_p)
{
    hc_bootstrap_params_t p;
    memset(&p, 0, sizeof(p));
    if (size < 1 || (unsigned)size > HC_BOOTSTRAP_MAX_SIZE)
        return hc_error(HCOMM_ERR_INVALID, "hcomm_init_rank: size %d is out of range [1, %d]",
                        size, HC_BOOTSTRAP_MAX_SIZE);
    if (rank < 0 || rank >= size)
        return hc_error(HCOMM_ERR_INVALID, "hcomm_init_rank: rank %d is out of range [0, %d)",
                        rank, size);
    if ((local_size < 0) != (local_rank < 0) || local_size > size ||
        (local_size > 0 && local_rank >= local_size))
        return hc_error(HCOMM_ERR_INVALID,
                        "hcomm_init_rank: local_rank %d of local_size %d: give both (local_rank "
                        "< local_size <= size) or -1 for both",
                        local_rank, local_size);
    p.rank = rank;
    p.size = size;
    p.local_rank = local_rank;
    p.local_size = local_size;
    p.source = "hcomm_init_rank";
    p.key_expected = true;
    if (key && key[0]) {
        if (strlen(key) > HC_BOOTSTRAP_MAX_KEY)
            return hc_error(HCOMM_ERR_INVALID,
                            "hcomm_init_rank: job_key is %zu characters, at most %u allowed",
                            strlen(key), HC_BOOTSTRAP_MAX_KEY);
        strcpy(p.job_key, key);
    }
    if (url && url[0]) {
        hc_bootstrap_url_t u;
        if (strlen(url) >= sizeof(p.url))
            return hc_error(HCOMM_ERR_INVALID, "hcomm_init_rank: bootstrap too long (%zu)",
                            strlen(url));
        hcomm_status_t st = hc_bootstrap_url_parse(url, "hcomm_init_rank: bootstrap", &u);
        if (st != HCOMM_OK)
            return st;
        strcpy(p.url, url);
    } else if (size > 1) {
        return hc_error(HCOMM_ERR_INVALID,
                        "hcomm_init_rank: a job of %d ranks needs a bootstrap address (rank 0's "
                        "hcomm_bootstrap_address, shared through your store)",
                        size);
    }
    *p_p = p;
    return HCOMM_OK;
}

/* The IPv4 address this host reaches others with: the source address of
 * the default route (a UDP connect sends nothing), else 127.0.0.1. */
static void hc_bootstrap_host_addr(char *buf, size_t len)
{
    snprintf(buf, len, "127.0.0.1");
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return;
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(9)};
    inet_pton(AF_INET, "192.0.2.1", &to.sin_addr); /* TEST-NET-1: routed by default, never sent */
    struct sockaddr_in me;
    socklen_t ml = sizeof(me);
    if (connect(s, (struct sockaddr *)&to, sizeof(to)) == 0 &&
        getsockname(s, (struct sockaddr *)&me, &ml) == 0 && me.sin_addr.s_addr != 0)
        inet_ntop(AF_INET, &me.sin_addr, buf, (socklen_t)len);
    close(s);
}

hcomm_status_t hc_bootstrap_address_make(char *url, size_t url_len, char *key, size_t key_len)
{
    char host[INET_ADDRSTRLEN];
    hc_bootstrap_host_addr(host, sizeof(host));
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t al = sizeof(a);
    if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        getsockname(s, (struct sockaddr *)&a, &al) != 0) {
        int e = errno;
        if (s >= 0)
            close(s);
        return hc_error(HCOMM_ERR_BOOTSTRAP, "hcomm_bootstrap_address: no free port: %s",
                        strerror(e));
    }
    close(s); /* the port is free now; rank 0 binds it again at hcomm_init_rank */
    snprintf(url, url_len, "tcp://%s:%d", host, ntohs(a.sin_port));
    uint8_t r[16];
    if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
        return hc_error(HCOMM_ERR_BOOTSTRAP, "hcomm_bootstrap_address: getrandom failed: %s",
                        strerror(errno));
    for (int i = 0; i < 16 && (size_t)(2 * i + 2) < key_len; i++)
        snprintf(key + 2 * i, 3, "%02x", r[i]);
    return HCOMM_OK;
}
