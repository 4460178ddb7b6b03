/*
 * The rendezvous through a launcher's PMI-1 service: MPICH's, Intel MPI's
 * and MVAPICH's mpiexec.hydra give each rank PMI_FD, a socket that speaks
 * the simple PMI wire protocol (text lines "cmd=... key=value ..."). hcomm
 * needs only its key-value space: rank 0 publishes a bootstrap address of
 * its own and a fresh job key, a PMI barrier makes them visible, every rank
 * reads them, and the usual tcp:// rendezvous follows. The socket stays
 * open until hcomm_finalize says "cmd=finalize" (hydra takes a rank that
 * closes it without that for a failed one).
 */
#include "core/bootstrap.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define HC_PMI_FN "hcomm_init (PMI)"
#define HC_PMI_KEY "hcomm-bootstrap"

static int hc_pmi_fd = -1;

static double hc_pmi_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Sends one request line and reads one reply line; the reply must start
 * with "cmd=<want>" and carry no rc other than 0. */
static hcomm_status_t hc_pmi_call(int fd, const char *req, const char *want, char *reply,
                                  size_t len, double timeout)
{
    size_t rl = strlen(req), off = 0;
    while (off < rl) {
        ssize_t w = write(fd, req + off, rl - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return hc_error(HCOMM_ERR_BOOTSTRAP, HC_PMI_FN ": writing \"%.*s\" to PMI_FD %d: %s",
                            (int)strcspn(req, "\n"), req, fd, w < 0 ? strerror(errno) : "closed");
        off += (size_t)w;
    }
    double end = hc_pmi_now() + timeout;
    size_t n = 0;
    for (;;) {
        double left = end - hc_pmi_now();
        if (left <= 0)
            return hc_error(HCOMM_ERR_TIMEOUT,
                            HC_PMI_FN ": no answer to \"%.*s\" from the launcher within %g s "
                                      "(HCOMM_TIMEOUT)",
                            (int)strcspn(req, "\n"), req, timeout);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int pr = poll(&p, 1, left > 1 ? 1000 : (int)(left * 1000) + 1);
        if (pr < 0 && errno != EINTR)
            return hc_error(HCOMM_ERR_BOOTSTRAP, HC_PMI_FN ": poll on PMI_FD: %s", strerror(errno));
        if (pr <= 0)
            continue;
        ssize_t r = read(fd, reply + n, len - 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return hc_error(HCOMM_ERR_BOOTSTRAP, HC_PMI_FN ": the launcher closed PMI_FD during "
                                                 "\"%.*s\"",
                            (int)strcspn(req, "\n"), req);
        n += (size_t)r;
        reply[n] = 0;
        char *nl = strchr(reply, '\n');
        if (nl) {
            *nl = 0;
            break;
        }
        if (n == len - 1)
            return hc_error(HCOMM_ERR_BOOTSTRAP, HC_PMI_FN ": reply to \"%.*s\" too long",
                            (int)strcspn(req, "\n"), req);
    }
    char cmd[64];
    snprintf(cmd, sizeof(cmd), "cmd=%s", want);
    const char *rc = strstr(reply, "rc=");
    if (strncmp(reply, cmd, strlen(cmd)) || (rc && atoi(rc + 3) != 0))
        return hc_error(HCOMM_ERR_BOOTSTRAP, HC_PMI_FN ": the launcher answered \"%s\" to \"%.*s\"",
                        reply, (int)strcspn(req, "\n"), req);
    return HCOMM_OK;
}

/* The value of attribute name in a reply line. */
static bool hc_pmi_attr(const char *reply, const char *name, char *out, size_t len)
{
    size_t nl = strlen(name);
    for (const char *p = reply; (p = strstr(p, name)) != NULL; p += nl) {
        if ((p != reply && p[-1] != ' ') || p[nl] != '=')
            continue;
        const char *v = p + nl + 1;
        size_t vl = strcspn(v, " ");
        if (vl >= len)
            return false;
        memcpy(out, v, vl);
        out[vl] = 0;
        return true;
    }
    return false;
}

hcomm_status_t hc_bootstrap_pmi(hc_bootstrap_params_t *p, double timeout)
{
    const char *fds = getenv("PMI_FD");
    char *end;
    long fd = fds ? strtol(fds, &end, 10) : -1;
    if (!fds || *end || fd < 0 || fd > 1 << 20)
        return hc_error(HCOMM_ERR_INVALID,
                        HC_PMI_FN ": PMI_RANK and PMI_SIZE say this is rank %d of %d but PMI_FD "
                                  "(\"%s\") is not a descriptor: set HCOMM_BOOTSTRAP, or launch "
                                  "with mpiexec.hydra",
                        p->rank, p->size, fds ? fds : "not set");
    char reply[1024], kvs[256], req[1400];
    hcomm_status_t st;
    if ((st = hc_pmi_call((int)fd, "cmd=init pmi_version=1 pmi_subversion=1\n", "response_to_init",
                          reply, sizeof(reply), timeout)) != HCOMM_OK)
        return st;
    if ((st = hc_pmi_call((int)fd, "cmd=get_my_kvsname\n", "my_kvsname", reply, sizeof(reply),
                          timeout)) != HCOMM_OK)
        return st;
    if (!hc_pmi_attr(reply, "kvsname", kvs, sizeof(kvs)))
        return hc_error(HCOMM_ERR_BOOTSTRAP, HC_PMI_FN ": no kvsname in \"%s\"", reply);
    hc_pmi_fd = (int)fd;
    if (p->rank == 0) {
        char url[128], key[40];
        if ((st = hc_bootstrap_address_make(url, sizeof(url), key, sizeof(key))) != HCOMM_OK)
            return st;
        snprintf(req, sizeof(req), "cmd=put kvsname=%s key=" HC_PMI_KEY " value=%s,%s\n", kvs, url,
                 key);
        if ((st = hc_pmi_call((int)fd, req, "put_result", reply, sizeof(reply), timeout)))
            return st;
    }
    if ((st = hc_pmi_call((int)fd, "cmd=barrier_in\n", "barrier_out", reply, sizeof(reply),
                          timeout)) != HCOMM_OK)
        return st;
    snprintf(req, sizeof(req), "cmd=get kvsname=%s key=" HC_PMI_KEY "\n", kvs);
    if ((st = hc_pmi_call((int)fd, req, "get_result", reply, sizeof(reply), timeout)))
        return st;
    char value[200];
    char *comma;
    if (!hc_pmi_attr(reply, "value", value, sizeof(value)) || !(comma = strchr(value, ',')))
        return hc_error(HCOMM_ERR_BOOTSTRAP, HC_PMI_FN ": rank 0's address is not in \"%s\"",
                        reply);
    *comma = 0;
    if (strlen(value) >= sizeof(p->url) || strlen(comma + 1) > HC_BOOTSTRAP_MAX_KEY)
        return hc_error(HCOMM_ERR_BOOTSTRAP, HC_PMI_FN ": rank 0's address is too long");
    strcpy(p->url, value);
    if (!p->job_key[0]) /* HCOMM_JOB_KEY, when set, is the user's to give */
        strcpy(p->job_key, comma + 1);
    hc_bootstrap_url_t u;
    return hc_bootstrap_url_parse(p->url, HC_PMI_FN ": rank 0's address", &u);
}

void hc_bootstrap_pmi_finalize(void)
{
    if (hc_pmi_fd < 0)
        return;
    char reply[256];
    (void)hc_pmi_call(hc_pmi_fd, "cmd=finalize\n", "finalize_ack", reply, sizeof(reply), 10.0);
    hc_pmi_fd = -1; /* the launcher's descriptor: it closes it */
}
