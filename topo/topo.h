/*
 * topo/: what the machine looks like. For now: the node identity (host name +
 * network namespace, so that ranks in different namespaces count as
 * different nodes) and an hwloc summary for hcomm_info.
 */
#ifndef HC_TOPO_H
#define HC_TOPO_H

#include "base/hc_base.h"

/* "host/net:[4026531840]" or HCOMM_NODE_ID when set (override). */
hcomm_status_t hc_topo_node_id(const char *override, char *buf, size_t len);

/* One-line machine summary from hwloc: packages, NUMA nodes, cores, PUs. */
void hc_topo_describe(void (*line)(const char *text, void *arg), void *arg);

#endif /* HC_TOPO_H */
