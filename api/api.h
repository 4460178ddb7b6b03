/*
 * api/: the public entry points (include/hcomm.h) on top of every layer:
 * argument checks, blocking wrappers, groups and communicator splits. What
 * the two files of this layer share.
 */
#ifndef HC_API_H
#define HC_API_H

#include "base/hc_base.h"

/* api_coll.c: reads HCOMM_ALGO (after hc_coll_init); drops the group state. */
hcomm_status_t hc_coll_api_init(void);
/* The topology calibration probe at the end of hcomm_init (api_probe.c). */
hcomm_status_t hc_api_topo_probe(void);
void hc_coll_group_fini(void);

#endif /* HC_API_H */
