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

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HC_BS_ENV_FN "hc_bootstrap_params_from_env"

typedef struct {
    const char *source;
    const char *rank, *size, *local_rank, *local_size;
    bool needs_url; /* the launcher gives no rendezvous address of its own */
} hc_bootstrap_launcher_t;

static const hc_bootstrap_launcher_t hc_bootstrap_launchers[] = {
    {"hcommrun", "HCOMM_RANK", "HCOMM_SIZE", "HCOMM_LOCAL_RANK", "HCOMM_LOCAL_SIZE", true},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", false},
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE", true},
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
    long size, rank, v;

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

/* torchrun's MASTER_ADDR may be a bare IPv6 address: bracket it. */
static hcomm_status_t hc_bootstrap_env_torch_url(hc_bootstrap_params_t *p)
{
    const char *addr = getenv("MASTER_ADDR"), *port = getenv("MASTER_PORT");
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

hcomm_status_t hc_bootstrap_params_from_env(hc_bootstrap_params_t *p_p)
{
    hc_bootstrap_params_t p;
    const hc_bootstrap_launcher_t *l = NULL;
    const char *url = getenv("HCOMM_BOOTSTRAP"), *key = getenv("HCOMM_JOB_KEY");
    hcomm_status_t st;

    if (p_p == NULL) return hc_error(HCOMM_ERR_INVALID, HC_BS_ENV_FN ": argument p is NULL");
    memset(&p, 0, sizeof(p));
    for (size_t i = 0; i < HC_ARRAY_SIZE(hc_bootstrap_launchers) && l == NULL; i++) {
        const hc_bootstrap_launcher_t *c = &hc_bootstrap_launchers[i];
        bool has_rank = getenv(c->rank) != NULL, has_size = getenv(c->size) != NULL;
        if (has_rank != has_size)
            return hc_error(HCOMM_ERR_INVALID, HC_BS_ENV_FN ": %s is set but %s is not (%s)",
                            has_rank ? c->rank : c->size, has_rank ? c->size : c->rank, c->source);
        if (has_rank) l = c;
    }
    if (l) {
        st = hc_bootstrap_env_launcher(l, &p);
        if (st != HCOMM_OK) return st;
    } else {
        p.rank = 0;
        p.size = 1;
        p.local_rank = 0;
        p.local_size = 1;
        p.source = "single";
    }

    if (key) {
        if (strlen(key) > HC_BOOTSTRAP_MAX_KEY)
            return hc_error(HCOMM_ERR_INVALID,
                            HC_BS_ENV_FN ": HCOMM_JOB_KEY is %zu characters, at most %u allowed",
                            strlen(key), HC_BOOTSTRAP_MAX_KEY);
        strcpy(p.job_key, key);
    }

    if (url && url[0]) {
        hc_bootstrap_url_t u;
        if (strlen(url) >= sizeof(p.url))
            return hc_error(HCOMM_ERR_INVALID, HC_BS_ENV_FN ": HCOMM_BOOTSTRAP too long (%zu)",
                            strlen(url));
        st = hc_bootstrap_url_parse(url, HC_BS_ENV_FN ": HCOMM_BOOTSTRAP", &u);
        if (st != HCOMM_OK) return st;
        strcpy(p.url, url);
    } else if (l && !l->needs_url) {
        st = hc_bootstrap_env_torch_url(&p);
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
