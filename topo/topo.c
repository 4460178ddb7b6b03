/*
 * Node identity and machine description (hwloc).
 */
#include "topo/topo.h"

#include <hwloc.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

hcomm_status_t hc_topo_node_id(const char *override, char *buf, size_t len)
{
    if (override && override[0]) {
        snprintf(buf, len, "%s", override);
        return HCOMM_OK;
    }
    char host[128] = "", ns[64] = "";
    if (gethostname(host, sizeof(host) - 1) != 0)
        snprintf(host, sizeof(host), "unknown-host");
    ssize_t n = readlink("/proc/self/ns/net", ns, sizeof(ns) - 1);
    if (n < 0)
        snprintf(ns, sizeof(ns), "net:[?]");
    else
        ns[n] = '\0';
    snprintf(buf, len, "%s/%s", host, ns);
    return HCOMM_OK;
}

void hc_topo_describe(void (*line)(const char *text, void *arg), void *arg)
{
    hwloc_topology_t topo;
    char text[256];
    if (hwloc_topology_init(&topo) != 0 || hwloc_topology_load(topo) != 0) {
        line("hwloc: topology unavailable", arg);
        return;
    }
    snprintf(text, sizeof(text), "packages %d, NUMA nodes %d, cores %d, PUs %d",
             hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE),
             hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE),
             hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE),
             hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU));
    line(text, arg);
    hwloc_topology_destroy(topo);
}
