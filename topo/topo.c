/*
 * Node identity and machine description (hwloc).
 */
#include "topo/topo_int.h"

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

/* ---- this rank ------------------------------------------------------------------------------ */

typedef struct {
    const char *name; /* this node's id */
    size_t host_len;  /* the host part of it (before '/') */
    char *sw;
    int matches;      /* 2: exact, 1: host name */
    const uint64_t *cpus; /* this process's CPU binding; NULL unknown */
    bool system;          /* the file is NCCL's <system> */
    int sys_numa;         /* hc_topo_sys_numa of the binding */
} hc_topo_find_t;

static hcomm_status_t hc_topo_find_system(void *arg, const hc_topo_sys_t *sys, const char *where)
{
    (void)where;
    hc_topo_find_t *f = arg;
    f->system = true;
    f->sys_numa = f->cpus ? hc_topo_sys_numa(sys, f->cpus) : -2;
    return HCOMM_OK;
}

static hcomm_status_t hc_topo_find_node(void *arg, const char *name, const char *sw, const char *where)
{
    (void)where;
    hc_topo_find_t *f = arg;
    int m = !strcmp(name, f->name) ? 2
            : strlen(name) == f->host_len && !strncmp(name, f->name, f->host_len) ? 1 : 0;
    if (m > f->matches) {
        f->matches = m;
        snprintf(f->sw, HC_TOPO_PATH_MAX, "%s", sw);
    }
    return HCOMM_OK;
}

hcomm_status_t hc_topo_self(const char *file, const char *name, hc_topo_self_t *out)
{
    *out = (hc_topo_self_t){.numa = -1, .core = -1};
    uint64_t cpus[HC_TOPO_CPUSET_WORDS] = {0};
    bool bound = false;
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo) == 0 && hwloc_topology_load(topo) == 0) {
        hwloc_bitmap_t set = hwloc_bitmap_alloc();
        if (set && hwloc_get_cpubind(topo, set, HWLOC_CPUBIND_PROCESS) == 0) {
            int nn = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
            for (int i = 0; i < nn; i++) {
                hwloc_obj_t o = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, i);
                if (o && o->cpuset && !hwloc_bitmap_iszero(set) && hwloc_bitmap_isincluded(set, o->cpuset)) {
                    out->numa = (int32_t)o->os_index;
                    break;
                }
            }
            /* For an NCCL <system> file's affinities (CPUs past its 4096: unknown). */
            bound = !hwloc_bitmap_iszero(set) && hwloc_bitmap_last(set) < 64 * HC_TOPO_CPUSET_WORDS;
            for (int c = bound ? hwloc_bitmap_first(set) : -1; c >= 0; c = hwloc_bitmap_next(set, c))
                cpus[c / 64] |= 1ull << (c % 64);
        }
        if (set && hwloc_get_last_cpu_location(topo, set, HWLOC_CPUBIND_THREAD) == 0)
            out->core = hwloc_bitmap_first(set);
        if (set) hwloc_bitmap_free(set);
        hwloc_topology_destroy(topo);
    }
    if (!file || !file[0]) return HCOMM_OK;
    hc_topo_find_t f = {
        .name = name, .host_len = strcspn(name, "/"), .sw = out->sw, .cpus = bound ? cpus : NULL};
    hc_topo_file_cb_t cb = {.node = hc_topo_find_node, .system = hc_topo_find_system, .arg = &f};
    hcomm_status_t st = hc_topo_file_parse(file, &cb);
    if (st != HCOMM_OK) return st;
    if (f.system) {
        hc_log_info(
            "HCOMM_TOPO_FILE %s is NCCL's <system> XML: it describes this node, not switches: "
            "the switch is unknown",
            file);
        if (f.sys_numa >= 0)
            hc_log_info("HCOMM_TOPO_FILE %s: this process's CPUs are in the affinity of <cpu "
                        "numaid=\"%d\">: NUMA node %d (hwloc says %d)",
                        file, f.sys_numa, f.sys_numa, out->numa);
        else if (f.sys_numa == -1)
            hc_log_info(
                "HCOMM_TOPO_FILE %s: this process's CPUs are in no single <cpu>'s affinity: NUMA "
                "node unknown (hwloc says %d)",
                file, out->numa);
        if (f.sys_numa != -2) out->numa = f.sys_numa;
    } else if (!f.matches) {
        hc_log_info("HCOMM_TOPO_FILE %s does not list this node (%s): its switch is unknown", file,
                    name);
    }
    return HCOMM_OK;
}

void hc_topo_io_describe(void (*line)(const char *text, void *arg), void *arg)
{
    hwloc_topology_t topo;
    char text[512];
    if (hwloc_topology_init(&topo) != 0) return;
    (void)hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    if (hwloc_topology_load(topo) != 0) {
        hwloc_topology_destroy(topo);
        line("I/O devices: hwloc could not load the topology", arg);
        return;
    }
    int n = 0;
    for (hwloc_obj_t o = NULL; (o = hwloc_get_next_osdev(topo, o));) {
        const char *kind = o->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK       ? "network"
                           : o->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS ? "rdma"
                           : o->attr->osdev.type == HWLOC_OBJ_OSDEV_GPU         ? "gpu"
                           : o->attr->osdev.type == HWLOC_OBJ_OSDEV_COPROC      ? "coproc"
                                                                               : NULL;
        if (!kind) continue;
        hwloc_obj_t cpu = hwloc_get_non_io_ancestor_obj(topo, o);
        int numa = -1;
        if (cpu && cpu->nodeset && hwloc_bitmap_weight(cpu->nodeset) == 1) numa = hwloc_bitmap_first(cpu->nodeset);
        char pci[32] = "";
        for (hwloc_obj_t p = o->parent; p; p = p->parent)
            if (p->type == HWLOC_OBJ_PCI_DEVICE) {
                snprintf(pci, sizeof(pci), "%04x:%02x:%02x.%01x", p->attr->pcidev.domain, p->attr->pcidev.bus,
                         p->attr->pcidev.dev, p->attr->pcidev.func);
                break;
            }
        snprintf(text, sizeof(text), "%s (%s): %s%s, NUMA node %s", o->name ? o->name : "?", kind,
                 pci[0] ? "PCI " : "virtual (no PCI device)", pci, numa >= 0 ? "" : "unknown");
        if (numa >= 0) snprintf(text + strlen(text), sizeof(text) - strlen(text), "%d", numa);
        line(text, arg);
        n++;
    }
    if (!n) line("no network, RDMA or GPU devices that hwloc sees on PCI", arg);
    hwloc_topology_destroy(topo);
}
