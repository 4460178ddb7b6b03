/*
 * CPU binding plan of hcommrun.
 *
 * Core binding pins each rank to one CPU. The slots are the CPUs hcommrun
 * may run on (sched_getaffinity, so `taskset` and cgroup limits are honoured)
 * in hwloc's logical core order, which walks the tree depth first: the cores
 * of one package / NUMA node come before the next one, so consecutive ranks
 * (who talk most in rings) share caches and memory. On SMT machines the first
 * hardware thread of every core comes first and the siblings after, so ranks
 * get whole cores before they share one. More ranks than slots wrap around.
 *
 * NUMA binding gives rank i all allowed CPUs of the (i mod n)-th NUMA node that
 * has any; memory-only nodes are skipped.
 *
 * Without a usable hwloc topology the plan falls back to the allowed CPUs in
 * numeric order (core) or one set of all of them (numa), with a warning.
 */
#include "hcommrun.h"

#include <errno.h>
#include <hwloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Reads this process's affinity, growing the set for hosts with more CPUs
 * than a cpu_set_t holds. */
static int get_allowed(cpu_set_t **set_p, size_t *setsize_p, int *maxcpus_p)
{
    for (int ncpus = 1024; ncpus <= (1 << 22); ncpus *= 2) {
        cpu_set_t *set = CPU_ALLOC(ncpus);
        size_t size = CPU_ALLOC_SIZE(ncpus);
        if (set == NULL) break;
        CPU_ZERO_S(size, set);
        if (sched_getaffinity(0, size, set) == 0) {
            *set_p = set;
            *setsize_p = size;
            *maxcpus_p = (int)(size * 8);
            return 0;
        }
        int err = errno;
        CPU_FREE(set);
        if (err != EINVAL) {
            fprintf(stderr, "hcommrun: sched_getaffinity failed: %s\n", strerror(err));
            return -1;
        }
    }
    fprintf(stderr, "hcommrun: sched_getaffinity failed: cannot size the CPU set\n");
    return -1;
}

static int plan_reserve(hc_run_bind_plan_t *plan, int *cap)
{
    if (plan->nsets < *cap) return 0;
    int ncap = *cap ? *cap * 2 : 64;
    unsigned char *n = realloc(plan->sets, (size_t)ncap * plan->setsize);
    if (n == NULL) {
        fprintf(stderr, "hcommrun: out of memory for the binding plan\n");
        return -1;
    }
    plan->sets = n;
    *cap = ncap;
    return 0;
}

static cpu_set_t *plan_add(hc_run_bind_plan_t *plan, int *cap)
{
    if (plan_reserve(plan, cap) != 0) return NULL;
    cpu_set_t *s = (cpu_set_t *)(plan->sets + (size_t)plan->nsets * plan->setsize);
    CPU_ZERO_S(plan->setsize, s);
    plan->nsets++;
    return s;
}

/* Core slots from hwloc: level k holds the k-th allowed PU of every core. */
static int plan_cores_hwloc(hwloc_topology_t topo, const cpu_set_t *allowed, int maxcpus,
                            hc_run_bind_plan_t *plan, int *cap)
{
    hwloc_obj_type_t type = HWLOC_OBJ_CORE;
    if (hwloc_get_nbobjs_by_type(topo, type) <= 0) type = HWLOC_OBJ_PU;
    for (int level = 0;; level++) {
        int added = 0;
        hwloc_obj_t obj = NULL;
        while ((obj = hwloc_get_next_obj_by_type(topo, type, obj)) != NULL) {
            int k = 0, pick = -1;
            unsigned id;
            hwloc_bitmap_foreach_begin(id, obj->cpuset)
            {
                if ((int)id < maxcpus && CPU_ISSET_S(id, plan->setsize, allowed)) {
                    if (k++ == level) {
                        pick = (int)id;
                        break;
                    }
                }
            }
            hwloc_bitmap_foreach_end();
            if (pick < 0) continue;
            cpu_set_t *s = plan_add(plan, cap);
            if (s == NULL) return -1;
            CPU_SET_S(pick, plan->setsize, s);
            added++;
        }
        if (added == 0) return 0;
    }
}

static int plan_numa_hwloc(hwloc_topology_t topo, const cpu_set_t *allowed, int maxcpus,
                           hc_run_bind_plan_t *plan, int *cap)
{
    hwloc_obj_t node = NULL;
    while ((node = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, node)) != NULL) {
        if (node->cpuset == NULL) continue;
        cpu_set_t *s = plan_add(plan, cap);
        if (s == NULL) return -1;
        int any = 0;
        unsigned id;
        hwloc_bitmap_foreach_begin(id, node->cpuset)
        {
            if ((int)id < maxcpus && CPU_ISSET_S(id, plan->setsize, allowed)) {
                CPU_SET_S(id, plan->setsize, s);
                any = 1;
            }
        }
        hwloc_bitmap_foreach_end();
        if (!any) plan->nsets--; /* memory-only node, or none of its CPUs allowed */
    }
    return 0;
}

int hc_run_bind_plan_create(hc_run_bind_mode_t mode, hc_run_bind_plan_t *plan)
{
    cpu_set_t *allowed = NULL;
    size_t setsize;
    int maxcpus, cap = 0, ret = -1;
    hwloc_topology_t topo = NULL;

    memset(plan, 0, sizeof(*plan));
    plan->mode = mode;
    if (mode == HC_RUN_BIND_NONE) return 0;
    if (get_allowed(&allowed, &setsize, &maxcpus) != 0) return -1;
    plan->setsize = setsize;

    if (hwloc_topology_init(&topo) != 0) {
        topo = NULL;
    } else if (hwloc_topology_load(topo) != 0) {
        hwloc_topology_destroy(topo);
        topo = NULL;
    }
    if (topo != NULL) {
        int rc = mode == HC_RUN_BIND_CORE ? plan_cores_hwloc(topo, allowed, maxcpus, plan, &cap)
                                          : plan_numa_hwloc(topo, allowed, maxcpus, plan, &cap);
        if (rc != 0) goto out_free;
    }
    if (plan->nsets == 0) {
        fprintf(stderr,
                "hcommrun: warning: hwloc topology %s; binding over the allowed CPUs in "
                "numeric order\n",
                topo ? "matches none of the allowed CPUs" : "could not be loaded");
        if (mode == HC_RUN_BIND_NUMA) {
            cpu_set_t *s = plan_add(plan, &cap);
            if (s == NULL) goto out_free;
            memcpy(s, allowed, setsize);
        } else {
            for (int c = 0; c < maxcpus; c++) {
                if (!CPU_ISSET_S(c, setsize, allowed)) continue;
                cpu_set_t *s = plan_add(plan, &cap);
                if (s == NULL) goto out_free;
                CPU_SET_S(c, setsize, s);
            }
        }
    }
    if (plan->nsets == 0) {
        fprintf(stderr, "hcommrun: no CPU is allowed for this process; cannot bind\n");
        goto out_free;
    }
    ret = 0;
    goto out_topo;

out_free:
    free(plan->sets);
    plan->sets = NULL;
    plan->nsets = 0;
out_topo:
    if (topo != NULL) hwloc_topology_destroy(topo);
    CPU_FREE(allowed);
    return ret;
}

void hc_run_bind_plan_destroy(hc_run_bind_plan_t *plan)
{
    free(plan->sets);
    plan->sets = NULL;
    plan->nsets = 0;
}

void hc_run_bind_set_format(const cpu_set_t *set, size_t setsize, char *buf, size_t len)
{
    size_t off = 0;
    int max = (int)(setsize * 8);
    buf[0] = '\0';
    for (int c = 0; c < max; c++) {
        if (!CPU_ISSET_S(c, setsize, set)) continue;
        int end = c;
        while (end + 1 < max && CPU_ISSET_S(end + 1, setsize, set))
            end++;
        int n = end > c ? snprintf(buf + off, len - off, "%s%d-%d", off ? "," : "", c, end)
                        : snprintf(buf + off, len - off, "%s%d", off ? "," : "", c);
        if (n < 0 || (size_t)n >= len - off) {
            buf[len - 1] = '\0';
            return;
        }
        off += (size_t)n;
        c = end;
    }
}
