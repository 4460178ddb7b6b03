/*
 * NCCL's per-node topology XML (NCCL_TOPO_FILE, docs/topology.md): what
 * hcomm reads of a <system> tree. It describes one node's internals, not
 * switches: the CPUs of each NUMA node (<cpu numaid= affinity=>) and what
 * hangs off them (<pci busid= class=> bridges and devices, <nic> with
 * <net name= dev= speed= port= guid=>, <gpu dev=>). hcomm keeps the NUMA
 * nodes with their CPUs, so that a rank's NUMA node can come from the file
 * (clouds' VMs often hide it from hwloc), and the network and GPU devices
 * with the NUMA node they hang off, which hcomm_info --topo shows.
 *
 * The syntax is checked strictly (topo_xml.c), the vocabulary loosely:
 * NCCL writes many elements and attributes hcomm has no use for (<nvlink>,
 * <nvs>, <c2c>, sm=, gdr=, link_speed=...), and a file written for NCCL must
 * load unchanged. What hcomm reads must be well formed: a numaid that is
 * not a number, an affinity that is not a CPU mask, or a <cpu> outside
 * <system> is an error naming file:line.
 */
#include "topo/topo_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *path;
    hc_topo_sys_t *sys;
} hc_topo_sys_walk_t;

static hcomm_status_t hc_topo_sys_int(const hc_topo_sys_walk_t *w, const hc_xml_elem_t *e,
                                      const char *attr, long lo, long hi, int *out)
{
    const char *v = hc_xml_attr(e, attr);
    if (!v) return HCOMM_OK;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi)
        return hc_error(HCOMM_ERR_INVALID,
                        "%s:%d: <%s %s=\"%s\">: want an integer in %ld..%ld "
                        "(HCOMM_TOPO_FILE, NCCL <system>)",
                        w->path, e->line, e->name, attr, v, lo, hi);
    *out = (int)x;
    return HCOMM_OK;
}

static void hc_topo_sys_str(const hc_xml_elem_t *e, const char *attr, char *out, size_t len)
{
    const char *v = hc_xml_attr(e, attr);
    if (v) snprintf(out, len, "%s", v);
}

/* affinity="000000ff,ffff0000,00ffffff": 32-bit hex words, the most
 * significant first (Linux's cpumap format, which NCCL copies). */
static hcomm_status_t hc_topo_sys_affinity(const hc_topo_sys_walk_t *w, const hc_xml_elem_t *e,
                                           hc_topo_sys_cpu_t *cpu)
{
    const char *v = hc_xml_attr(e, "affinity");
    if (!v) return HCOMM_OK;
    uint32_t word[2 * HC_TOPO_CPUSET_WORDS];
    int n = 0;
    const char *p = v;
    for (;;) {
        if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) p += 2;
        uint32_t x = 0;
        int digits = 0;
        for (; digits < 8; p++, digits++) {
            int d = *p >= '0' && *p <= '9'   ? *p - '0'
                    : *p >= 'a' && *p <= 'f' ? *p - 'a' + 10
                    : *p >= 'A' && *p <= 'F' ? *p - 'A' + 10
                                             : -1;
            if (d < 0) break;
            x = x << 4 | (uint32_t)d;
        }
        if (!digits || (*p != ',' && *p != '\0') || n == (int)HC_ARRAY_SIZE(word))
            return hc_error(HCOMM_ERR_INVALID,
                            "%s:%d: <cpu affinity=\"%.80s\">: want a CPU mask of "
                            "comma-separated 32-bit hex words, the highest first, at most %d CPUs "
                            "(HCOMM_TOPO_FILE, NCCL <system>)",
                            w->path, e->line, v, 64 * HC_TOPO_CPUSET_WORDS);
        word[n++] = x;
        if (*p == '\0') break;
        p++;
    }
    memset(cpu->cpus, 0, sizeof(cpu->cpus));
    for (int i = 0; i < n; i++) /* word[n - 1] holds CPUs 0..31 */
        cpu->cpus[i / 2] |= (uint64_t)word[n - 1 - i] << (32 * (i % 2));
    cpu->has_affinity = true;
    return HCOMM_OK;
}

static hc_topo_sys_dev_t *hc_topo_sys_dev(const hc_topo_sys_walk_t *w, const hc_xml_elem_t *e)
{
    if (w->sys->ndevs == HC_TOPO_SYS_MAX_DEVS) {
        hc_error(HCOMM_ERR_INVALID, "%s:%d: more than %d devices (HCOMM_TOPO_FILE, NCCL <system>)",
                 w->path, e->line, HC_TOPO_SYS_MAX_DEVS);
        return NULL;
    }
    hc_topo_sys_dev_t *d = &w->sys->dev[w->sys->ndevs++];
    memset(d, 0, sizeof(*d));
    d->dev = d->port = -1;
    return d;
}

static bool hc_topo_sys_has_child(const hc_xml_elem_t *e, const char *name)
{
    for (const hc_xml_elem_t *c = e->child; c; c = c->next)
        if (!strcmp(c->name, name)) return true;
    return false;
}

/* e and what it holds; numa, busid: of the <cpu> and <pci> around it. */
static hcomm_status_t hc_topo_sys_walk(const hc_topo_sys_walk_t *w, const hc_xml_elem_t *e,
                                       int numa, const char *busid)
{
    hcomm_status_t st = HCOMM_OK;
    char bus[32];
    snprintf(bus, sizeof(bus), "%s", busid);
    if (!strcmp(e->name, "cpu")) {
        if (strcmp(e->parent->name, "system"))
            return hc_error(HCOMM_ERR_INVALID,
                            "%s:%d: a <cpu> inside <%s>: a <cpu> belongs directly in "
                            "<system> (HCOMM_TOPO_FILE, NCCL <system>)",
                            w->path, e->line, e->parent->name);
        if (w->sys->ncpus == HC_TOPO_SYS_MAX_CPUS)
            return hc_error(HCOMM_ERR_INVALID,
                            "%s:%d: more than %d <cpu> elements (HCOMM_TOPO_FILE, "
                            "NCCL <system>)",
                            w->path, e->line, HC_TOPO_SYS_MAX_CPUS);
        hc_topo_sys_cpu_t *cpu = &w->sys->cpu[w->sys->ncpus++];
        memset(cpu, 0, sizeof(*cpu));
        cpu->numa = -1;
        cpu->line = e->line;
        if ((st = hc_topo_sys_int(w, e, "numaid", -1, 1 << 16, &cpu->numa)) != HCOMM_OK ||
            (st = hc_topo_sys_affinity(w, e, cpu)) != HCOMM_OK)
            return st;
        numa = cpu->numa;
    } else if (!strcmp(e->name, "pci")) {
        hc_topo_sys_str(e, "busid", bus, sizeof(bus));
        const char *cls = hc_xml_attr(e, "class");
        bool net = cls && !strncmp(cls, "0x02", 4) && !hc_topo_sys_has_child(e, "nic");
        bool gpu = cls && !strncmp(cls, "0x03", 4) && !hc_topo_sys_has_child(e, "gpu");
        if (net || gpu) {
            hc_topo_sys_dev_t *d = hc_topo_sys_dev(w, e);
            if (!d) return HCOMM_ERR_INVALID;
            d->kind = net ? HC_TOPO_DEV_PCI_NET : HC_TOPO_DEV_PCI_GPU;
            d->numa = numa;
            snprintf(d->name, sizeof(d->name), "%s", cls);
            snprintf(d->busid, sizeof(d->busid), "%s", bus);
        }
    } else if (!strcmp(e->name, "net") || !strcmp(e->name, "gpu")) {
        hc_topo_sys_dev_t *d = hc_topo_sys_dev(w, e);
        if (!d) return HCOMM_ERR_INVALID;
        d->kind = e->name[0] == 'n' ? HC_TOPO_DEV_NET : HC_TOPO_DEV_GPU;
        d->numa = numa;
        snprintf(d->busid, sizeof(d->busid), "%s", bus);
        hc_topo_sys_str(e, "name", d->name, sizeof(d->name));
        hc_topo_sys_str(e, "guid", d->guid, sizeof(d->guid));
        if ((st = hc_topo_sys_int(w, e, "dev", 0, 1 << 20, &d->dev)) != HCOMM_OK ||
            (st = hc_topo_sys_int(w, e, "port", 0, 1 << 20, &d->port)) != HCOMM_OK)
            return st;
        const char *sp = hc_xml_attr(e, "speed");
        if (sp) {
            char *end;
            d->speed_mbps = strtod(sp, &end);
            if (end == sp || *end || !(d->speed_mbps >= 0) || d->speed_mbps > 1e12)
                return hc_error(HCOMM_ERR_INVALID,
                                "%s:%d: <net speed=\"%s\">: want a number of Mb/s "
                                "(HCOMM_TOPO_FILE, NCCL <system>)",
                                w->path, e->line, sp);
        }
    }
    for (const hc_xml_elem_t *c = e->child; c && st == HCOMM_OK; c = c->next)
        st = hc_topo_sys_walk(w, c, numa, bus);
    return st;
}

hcomm_status_t hc_topo_sys_from_xml(const char *path, const hc_xml_elem_t *root,
                                    hc_topo_sys_t **sys_p)
{
    hc_topo_sys_t *sys = calloc(1, sizeof(*sys));
    if (!sys) return hc_error(HCOMM_ERR_NO_MEMORY, "%s: NCCL <system>", path);
    hc_topo_sys_walk_t w = {.path = path, .sys = sys};
    int version = 1;
    hcomm_status_t st = hc_topo_sys_int(&w, root, "version", 0, 1 << 20, &version);
    for (const hc_xml_elem_t *c = root->child; c && st == HCOMM_OK; c = c->next)
        st = hc_topo_sys_walk(&w, c, -1, "");
    if (st != HCOMM_OK) {
        free(sys);
        return st;
    }
    *sys_p = sys;
    return HCOMM_OK;
}

void hc_topo_sys_free(hc_topo_sys_t *sys)
{
    free(sys);
}

int hc_topo_sys_numa(const hc_topo_sys_t *sys, const uint64_t *cpus)
{
    bool any = false, empty = true;
    for (int i = 0; i < HC_TOPO_CPUSET_WORDS; i++)
        empty = empty && !cpus[i];
    for (int c = 0; c < sys->ncpus; c++) {
        if (!sys->cpu[c].has_affinity) continue;
        any = true;
        bool in = !empty;
        for (int i = 0; i < HC_TOPO_CPUSET_WORDS && in; i++)
            in = !(cpus[i] & ~sys->cpu[c].cpus[i]);
        if (in) return sys->cpu[c].numa;
    }
    return any ? -1 : -2;
}

/* "0-23,48-71" into out (cut with "..." when it does not fit). */
static void hc_topo_sys_cpulist(const uint64_t *set, char *out, size_t len)
{
    size_t o = 0;
    out[0] = '\0';
    int n = 64 * HC_TOPO_CPUSET_WORDS;
    for (int i = 0; i < n; i++) {
        if (!(set[i / 64] >> (i % 64) & 1)) continue;
        int j = i;
        while (j + 1 < n && set[(j + 1) / 64] >> ((j + 1) % 64) & 1)
            j++;
        int k = j == i ? snprintf(out + o, len - o, "%s%d", o ? "," : "", i)
                       : snprintf(out + o, len - o, "%s%d-%d", o ? "," : "", i, j);
        if (k < 0 || (size_t)k >= len - o) {
            snprintf(out + (o < len - 4 ? o : len - 4), 4, "...");
            return;
        }
        o += (size_t)k;
        i = j;
    }
    if (!o) snprintf(out, len, "none");
}

void hc_topo_sys_describe(const hc_topo_sys_t *sys, void (*line)(const char *text, void *arg),
                          void *arg)
{
    char text[640], cpus[400], numa[32];
    for (int c = 0; c < sys->ncpus; c++) {
        const hc_topo_sys_cpu_t *cpu = &sys->cpu[c];
        if (cpu->has_affinity) hc_topo_sys_cpulist(cpu->cpus, cpus, sizeof(cpus));
        if (cpu->numa >= 0)
            snprintf(numa, sizeof(numa), "NUMA node %d", cpu->numa);
        else
            snprintf(numa, sizeof(numa), "NUMA node unknown");
        snprintf(text, sizeof(text), "%s: CPUs %s (<cpu> of line %d)", numa,
                 cpu->has_affinity ? cpus : "not given (no affinity=)", cpu->line);
        line(text, arg);
    }
    if (!sys->ncpus) line("no <cpu> elements: NUMA nodes unknown", arg);
    for (int i = 0; i < sys->ndevs; i++) {
        const hc_topo_sys_dev_t *d = &sys->dev[i];
        size_t o = 0;
        switch (d->kind) {
        case HC_TOPO_DEV_NET:
            o = (size_t)snprintf(text, sizeof(text), "network device %s (<net>",
                                 d->name[0] ? d->name : "?");
            if (d->dev >= 0) o += (size_t)snprintf(text + o, sizeof(text) - o, " dev %d", d->dev);
            if (d->speed_mbps > 0)
                o += (size_t)snprintf(text + o, sizeof(text) - o, ", %g Mb/s", d->speed_mbps);
            if (d->port >= 0)
                o += (size_t)snprintf(text + o, sizeof(text) - o, ", port %d", d->port);
            if (d->guid[0]) o += (size_t)snprintf(text + o, sizeof(text) - o, ", guid %s", d->guid);
            o += (size_t)snprintf(text + o, sizeof(text) - o, ")");
            break;
        case HC_TOPO_DEV_GPU:
            o = (size_t)snprintf(text, sizeof(text), "GPU");
            if (d->dev >= 0) o += (size_t)snprintf(text + o, sizeof(text) - o, " dev %d", d->dev);
            o += (size_t)snprintf(text + o, sizeof(text) - o, " (<gpu>)");
            break;
        case HC_TOPO_DEV_PCI_NET:
        case HC_TOPO_DEV_PCI_GPU:
            o = (size_t)snprintf(text, sizeof(text), "%s PCI device (class %s)",
                                 d->kind == HC_TOPO_DEV_PCI_NET ? "network" : "GPU", d->name);
            break;
        }
        snprintf(text + o, sizeof(text) - o, ": %s%s, NUMA node %s",
                 d->busid[0] ? "PCI " : "no PCI address", d->busid, d->numa >= 0 ? "" : "unknown");
        if (d->numa >= 0) {
            size_t l = strlen(text);
            snprintf(text + l, sizeof(text) - l, "%d", d->numa);
        }
        line(text, arg);
    }
    if (!sys->ndevs)
        line("no network or GPU devices (<net>, <gpu>, or <pci> of class 0x02/0x03)", arg);
}
