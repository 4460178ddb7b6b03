/*
 * The rendezvous through PMIx (Open MPI's mpirun/prterun, srun --mpi=pmix):
 * when the launcher runs a PMIx server (PMIX_NAMESPACE, PMIX_RANK set), rank 0
 * puts a bootstrap address of its own and a fresh key under one key, a PMIx
 * fence with data collection publishes it, every rank gets it, and the usual
 * tcp:// rendezvous follows. The PMIx client stays initialized until
 * hcomm_finalize. Built when libpmix is found (Debian's libpmix-dev).
 */
#include "core/bootstrap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if HCOMM_HAVE_PMIX
#include <pmix.h>

#define HC_PMIX_FN "hcomm_init (PMIx)"
#define HC_PMIX_KEY "hcomm.bootstrap"

static bool hc_pmix_up;

bool hc_bootstrap_pmix_available(void)
{
    return getenv("PMIX_NAMESPACE") && getenv("PMIX_RANK");
}

hcomm_status_t hc_bootstrap_pmix(hc_bootstrap_params_t *p, double timeout)
{
    (void)timeout; /* PMIx's fence has its own; the launcher ends a job whose rank died */
    pmix_proc_t me;
    pmix_status_t rc = PMIx_Init(&me, NULL, 0);
    if (rc != PMIX_SUCCESS)
        return hc_error(HCOMM_ERR_BOOTSTRAP,
                        HC_PMIX_FN ": PMIx_Init failed: %s (PMIX_NAMESPACE=%s): set "
                                   "HCOMM_BOOTSTRAP to bypass PMIx",
                        PMIx_Error_string(rc), getenv("PMIX_NAMESPACE"));
    hc_pmix_up = true;
    if ((int)me.rank != p->rank)
        return hc_error(HCOMM_ERR_BOOTSTRAP,
                        HC_PMIX_FN ": PMIx says rank %u, the launcher's variables rank %d",
                        me.rank, p->rank);
    if (p->rank == 0) {
        char url[128], key[40], val[200];
        hcomm_status_t st = hc_bootstrap_address_make(url, sizeof(url), key, sizeof(key));
        if (st != HCOMM_OK)
            return st;
        snprintf(val, sizeof(val), "%s,%s", url, key);
        pmix_value_t v;
        PMIX_VALUE_LOAD(&v, val, PMIX_STRING);
        rc = PMIx_Put(PMIX_GLOBAL, HC_PMIX_KEY, &v);
        PMIX_VALUE_DESTRUCT(&v);
        if (rc == PMIX_SUCCESS)
            rc = PMIx_Commit();
        if (rc != PMIX_SUCCESS)
            return hc_error(HCOMM_ERR_BOOTSTRAP, HC_PMIX_FN ": publishing rank 0's address: %s",
                            PMIx_Error_string(rc));
    }
    pmix_info_t info;
    bool collect = true;
    PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    pmix_proc_t all;
    PMIX_LOAD_PROCID(&all, me.nspace, PMIX_RANK_WILDCARD);
    rc = PMIx_Fence(&all, 1, &info, 1);
    PMIX_INFO_DESTRUCT(&info);
    if (rc != PMIX_SUCCESS)
        return hc_error(HCOMM_ERR_BOOTSTRAP, HC_PMIX_FN ": PMIx_Fence: %s", PMIx_Error_string(rc));
    pmix_proc_t root;
    PMIX_LOAD_PROCID(&root, me.nspace, 0);
    pmix_value_t *got = NULL;
    rc = PMIx_Get(&root, HC_PMIX_KEY, NULL, 0, &got);
    if (rc != PMIX_SUCCESS || !got || got->type != PMIX_STRING || !got->data.string)
        return hc_error(HCOMM_ERR_BOOTSTRAP, HC_PMIX_FN ": rank 0's address: %s",
                        rc != PMIX_SUCCESS ? PMIx_Error_string(rc) : "not a string");
    char val[200];
    snprintf(val, sizeof(val), "%s", got->data.string);
    PMIX_VALUE_RELEASE(got);
    char *comma = strchr(val, ',');
    if (!comma || (size_t)(comma - val) >= sizeof(p->url) ||
        strlen(comma + 1) > HC_BOOTSTRAP_MAX_KEY)
        return hc_error(HCOMM_ERR_BOOTSTRAP, HC_PMIX_FN ": malformed address \"%s\"", val);
    *comma = 0;
    strcpy(p->url, val);
    if (!p->job_key[0])
        strcpy(p->job_key, comma + 1);
    hc_bootstrap_url_t u;
    return hc_bootstrap_url_parse(p->url, HC_PMIX_FN ": rank 0's address", &u);
}

void hc_bootstrap_pmix_finalize(void)
{
    if (!hc_pmix_up)
        return;
    hc_pmix_up = false;
    (void)PMIx_Finalize(NULL, 0);
}

#else /* no libpmix at build time */

bool hc_bootstrap_pmix_available(void)
{
    return false;
}

hcomm_status_t hc_bootstrap_pmix(hc_bootstrap_params_t *p, double timeout)
{
    (void)p;
    (void)timeout;
    return hc_error(HCOMM_ERR_UNSUPPORTED, "hcomm_init: built without PMIx (libpmix-dev)");
}

void hc_bootstrap_pmix_finalize(void)
{
}

#endif
