/*
 * dpdk driver: the port string and EAL. HCOMM_DPDK_PORT gives this rank's
 * port (an entry per local rank); EAL starts once per process, for good,
 * and the probe checks the port without starting it. See docs/dpdk.md.
 *
 * EAL is started as a library inside an application has to be: in memory
 * only (no runtime files that two jobs on a host would share), no PCI scan
 * unless the port is a PCI address, no telemetry socket, on the CPU the
 * calling thread runs on (EAL pins its main thread to its first lcore: the
 * caller's affinity is restored right after), hugepages when some are free,
 * else plain memory. HCOMM_DPDK_ARGS replaces the defaults; the port's own
 * argument (--vdev= or -a) and -l are added unless the arguments name them.
 */
#include "drv/dpdk/dpdk.h"

#include <dlfcn.h>
#include <limits.h>
#include <net/if.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ether.h>

/* ---- HCOMM_DPDK_PORT ----------------------------------------------------------- */

bool hc_dpdk_port_spec(const hc_drv_env_t *env, char *out, size_t cap)
{
    const char *spec = hc_dpdk_cfg.port_list ? hc_dpdk_cfg.port_list : "";
    if (spec[0] == '\0') return false;
    /* Entry local_rank % entries of a ';' list. */
    int entries = 1;
    for (const char *p = spec; *p; p++)
        entries += *p == ';';
    int want = (env->local_rank > 0 ? env->local_rank : 0) % entries;
    const char *start = spec;
    for (int i = 0; i < want; i++)
        start = strchr(start, ';') + 1;
    size_t n = strcspn(start, ";"), o = 0;
    for (size_t i = 0; i < n && o + 12 < cap; i++) {
        if (start[i] == '%' && i + 1 < n && (start[i + 1] == 'r' || start[i + 1] == 'l')) {
            o += (size_t)snprintf(out + o, cap - o, "%d",
                                  start[i + 1] == 'r' ? env->rank : HC_MAX(env->local_rank, 0));
            i++;
        } else {
            out[o++] = start[i];
        }
    }
    out[o] = '\0';
    return o > 0;
}

/* A PCI address (dddd:bb:dd.f or bb:dd.f), as opposed to a vdev string. */
bool hc_dpdk_is_pci(const char *s)
{
    unsigned a, b, c, d;
    char tail;
    return sscanf(s, "%x:%x:%x.%x%c", &a, &b, &c, &d, &tail) == 4 ||
           sscanf(s, "%x:%x.%x%c", &b, &c, &d, &tail) == 3 ||
           (sscanf(s, "%x:%x:%x.%x%c", &a, &b, &c, &d, &tail) == 5 && tail == ',');
}

/* The value of key= in a vdev's argument list ("" when absent). */
void hc_dpdk_vdev_arg(const char *spec, const char *key, char *out, size_t cap)
{
    size_t kl = strlen(key);
    out[0] = '\0';
    for (const char *p = strchr(spec, ','); p; p = strchr(p + 1, ',')) {
        if (!strncmp(p + 1, key, kl) && p[1 + kl] == '=') {
            size_t n = strcspn(p + 2 + kl, ",");
            snprintf(out, cap, "%.*s", (int)HC_MIN(n, cap - 1), p + 2 + kl);
            return;
        }
    }
}

/* hcomm's XDP program for af_xdp ports: hcomm/hcomm_xdp.o next to the
 * library (the build tree's lib/ and the installed libdir alike). */
static bool hc_dpdk_xdp_prog(char *out, size_t cap)
{
    Dl_info di;
    if (!dladdr((void *)hc_dpdk_xdp_prog, &di) || !di.dli_fname) return false;
    const char *slash = strrchr(di.dli_fname, '/');
    if (!slash) return false;
    snprintf(out, cap, "%.*s/hcomm/hcomm_xdp.o", (int)(slash - di.dli_fname), di.dli_fname);
    return access(out, R_OK) == 0;
}

/* The MTU asked for: HCOMM_DPDK_MTU, else on memif (a shared-memory link
 * with no wire MTU) HC_DPDK_MEMIF_MTU, else 0 (the port's). */
int64_t hc_dpdk_want_mtu(const char *spec)
{
    if (hc_dpdk_cfg.mtu != 0) return hc_dpdk_cfg.mtu;
    return !strncmp(spec, "net_memif", 9) ? HC_DPDK_MEMIF_MTU : 0;
}

static long hc_dpdk_free_hugepages(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[128];
    long n = 0;
    if (!f) return 0;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "HugePages_Free: %ld", &n) == 1) break;
    fclose(f);
    return n;
}

static bool hc_dpdk_args_have(char **argv, int argc, const char *const *names)
{
    for (int i = 0; i < argc; i++)
        for (const char *const *n = names; *n; n++)
            if (!strncmp(argv[i], *n, strlen(*n))) return true;
    return false;
}

/* ---- EAL ------------------------------------------------------------------------- */

static bool hc_dpdk_eal_done;
static char hc_dpdk_eal_error[1600];

/* EAL's arguments: argv points into the buffers beside it. */
typedef struct {
    char *argv[64];
    int argc;
    char buf[1024], portarg[PATH_MAX + 1024], lcore[32];
} hc_dpdk_eal_argv_t;

/* Records why EAL cannot start (for every later open, the probe and
 * hcomm_info) and copies it to why. */
static hcomm_status_t __attribute__((format(printf, 3, 4)))
hc_dpdk_eal_fail(char *why, size_t why_len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(hc_dpdk_eal_error, sizeof(hc_dpdk_eal_error), fmt, ap);
    va_end(ap);
    snprintf(why, why_len, "%s", hc_dpdk_eal_error);
    return HCOMM_ERR_NO_DEVICE;
}

/* The --vdev= argument of a virtual port: the port string with hcomm's
 * additions, unless it sets them itself. snprintf's answer: cap or more
 * when it does not fit. */
static int hc_dpdk_vdev_devarg(const char *port, char *out, size_t cap)
{
    /* af_packet: its default ring (512 frames) loses a third of a
     * stream on a busy host (4096 frames lose none), and with its
     * default qdisc bypass, full-size frames sent through a Linux
     * bridge stopped reaching the receiving af_packet socket in
     * our tests (a plain packet socket still saw them), so both
     * are set unless the port string says otherwise. */
    bool afp = !strncmp(port, "net_af_packet", 13);
    /* memif: a ring buffer holds a whole frame (HCOMM_DPDK_MTU), so
     * that a frame is one descriptor each way. */
    char bsize[32] = "";
    int64_t fmtu = hc_dpdk_want_mtu(port);
    if (!strncmp(port, "net_memif", 9) && !strstr(port, "bsize=") && fmtu > RTE_ETHER_MTU &&
        fmtu <= HC_DPDK_MTU_MAX)
        snprintf(bsize, sizeof(bsize), ",bsize=%u",
                 (unsigned)HC_MIN(65535, (fmtu + RTE_ETHER_HDR_LEN + 127) / 128 * 128));
    /* af_xdp: DPDK's default XDP program sends every packet of
     * the queue to the AF_XDP socket, the job's own bootstrap
     * connection on that interface included (no job could start
     * there); hcomm's sends only its own packets there. */
    char xdp[PATH_MAX + 16] = "";
    if (!strncmp(port, "net_af_xdp", 10) && !strstr(port, "xdp_prog=")) {
        if (hc_dpdk_xdp_prog(xdp + 10, sizeof(xdp) - 10))
            memcpy(xdp, ",xdp_prog=", 10);
        else
            hc_log_warn("dpdk: %s: hcomm's XDP program (hcomm/hcomm_xdp.o next to "
                        "libhcomm) is missing: DPDK's default takes every packet of "
                        "the queue, TCP on this interface (the bootstrap) stops",
                        port);
    }
    /* af_xdp: no preferred busy polling. With it (DPDK's default,
     * busy_budget=64) every receive poll that finds the ring empty
     * is a recvfrom() into the kernel's NAPI, and the progress
     * engine polls flat out: 8-byte ping-pong on a veth 3.81-3.98 us
     * against 3.64-3.88 without (docs/dpdk.md). */
    bool axdp = !strncmp(port, "net_af_xdp", 10);
    return snprintf(out, cap, "--vdev=%s%s%s%s%s%s", port,
                    afp && !strstr(port, "framecnt=") ? ",framecnt=4096" : "",
                    afp && !strstr(port, "qdisc_bypass=") ? ",qdisc_bypass=0" : "", bsize, xdp,
                    axdp && !strstr(port, "busy_budget=") ? ",busy_budget=0" : "");
}

/* EAL's arguments for port: HCOMM_DPDK_ARGS or the defaults, then -l and
 * the port's argument unless they name them; the command line is recorded
 * in hc_dpdk_cfg.eal_args. */
static hcomm_status_t hc_dpdk_eal_args(const char *port, hc_dpdk_eal_argv_t *a, char *why,
                                       size_t why_len)
{
    char args[1024];
    const char *user = hc_dpdk_cfg.args ? hc_dpdk_cfg.args : "";
    if (user[0])
        snprintf(args, sizeof(args), "%s", user);
    else
        /* --in-memory needs hugepages (it refuses --no-huge); without free
         * ones, plain memory and no shared configuration (no mp socket). */
        snprintf(args, sizeof(args), "%s --no-telemetry --log-level=*:error",
                 hc_dpdk_free_hugepages() >= 64 ? "--in-memory" : "--no-huge -m 512 --no-shconf");
    snprintf(hc_dpdk_cfg.eal_args, sizeof(hc_dpdk_cfg.eal_args), "%s", args);

    a->argc = 0;
    a->argv[a->argc++] = "hcomm";
    snprintf(a->buf, sizeof(a->buf), "%s", args);
    for (char *tok = strtok(a->buf, " \t"); tok && a->argc < 56; tok = strtok(NULL, " \t"))
        a->argv[a->argc++] = tok;
    static const char *const lcore_opts[] = {"-l", "-c", "--lcores", NULL};
    static const char *const dev_opts[] = {"-a", "--allow", "--vdev", "-b", "--block", NULL};
    if (!hc_dpdk_args_have(a->argv, a->argc, lcore_opts)) {
        int cpu = sched_getcpu();
        snprintf(a->lcore, sizeof(a->lcore), "-l%d", cpu < 0 ? 0 : cpu);
        a->argv[a->argc++] = a->lcore;
    }
    if (!hc_dpdk_args_have(a->argv, a->argc, dev_opts)) {
        if (hc_dpdk_is_pci(port)) {
            snprintf(a->portarg, sizeof(a->portarg), "-a%s", port);
        } else {
            int len = hc_dpdk_vdev_devarg(port, a->portarg, sizeof(a->portarg));
            if (len < 0 || (size_t)len >= sizeof(a->portarg))
                return hc_dpdk_eal_fail(why, why_len,
                                        "dpdk: HCOMM_DPDK_PORT=%.200s: the device argument with "
                                        "hcomm's additions is %d bytes, more than %zu",
                                        port, len, sizeof(a->portarg) - 1);
            a->argv[a->argc++] = "--no-pci";
        }
        a->argv[a->argc++] = a->portarg;
    }
    a->argv[a->argc] = NULL;
    size_t o = 0;
    for (int i = 1; i < a->argc && o < sizeof(hc_dpdk_cfg.eal_args) - 2; i++)
        o += (size_t)snprintf(hc_dpdk_cfg.eal_args + o, sizeof(hc_dpdk_cfg.eal_args) - o, "%s%s",
                              i > 1 ? " " : "", a->argv[i]);
    return HCOMM_OK;
}

hcomm_status_t hc_dpdk_eal_start(const char *port, char *why, size_t why_len)
{
    if (hc_dpdk_eal_done) {
        if (hc_dpdk_eal_error[0]) {
            snprintf(why, why_len, "%s", hc_dpdk_eal_error);
            return HCOMM_ERR_NO_DEVICE;
        }
        return HCOMM_OK;
    }
    hc_dpdk_eal_done = true;
    hc_dpdk_eal_argv_t a;
    hcomm_status_t st = hc_dpdk_eal_args(port, &a, why, why_len);
    if (st != HCOMM_OK) return st;

    cpu_set_t saved;
    bool have_saved = sched_getaffinity(0, sizeof(saved), &saved) == 0;
    /* rte_eal_init permutes argv: hand it a copy. */
    char *copy[64];
    memcpy(copy, a.argv, sizeof(char *) * (size_t)(a.argc + 1));
    hc_log_debug("dpdk: rte_eal_init %s", hc_dpdk_cfg.eal_args);
    int rc = rte_eal_init(a.argc, copy);
    if (have_saved) (void)sched_setaffinity(0, sizeof(saved), &saved);
    if (rc < 0)
        return hc_dpdk_eal_fail(why, why_len, "rte_eal_init(%s) failed: %s", hc_dpdk_cfg.eal_args,
                                rte_strerror(rte_errno));
    return HCOMM_OK;
}

/* Without starting EAL: it cannot be started twice, nor survive a fork
 * (the conformance suite probes before it forks its ranks), so the probe
 * checks only what it can see from outside: the port is named, a vdev's
 * kernel interface exists, a PCI device is there. */
hcomm_status_t hc_dpdk_probe(const hc_drv_env_t *env, char *why, size_t why_len)
{
    char spec[sizeof(hc_dpdk_cfg.port)], iface[64], path[600];
    if (hc_dpdk_port.up) return HCOMM_OK;
    if (hc_dpdk_eal_done && hc_dpdk_eal_error[0]) {
        snprintf(why, why_len, "%s", hc_dpdk_eal_error);
        return HCOMM_ERR_NO_DEVICE;
    }
    if (!hc_dpdk_port_spec(env, spec, sizeof(spec))) {
        snprintf(why, why_len,
                 "HCOMM_DPDK_PORT is not set (a PCI address or a vdev such as "
                 "net_af_packet0,iface=eth1)");
        return HCOMM_ERR_NO_DEVICE;
    }
    if (hc_dpdk_is_pci(spec)) {
        char addr[64];
        snprintf(addr, sizeof(addr), "%.*s", (int)strcspn(spec, ","), spec);
        snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s%s",
                 strchr(addr, ':') == strrchr(addr, ':') ? "0000:" : "", addr);
        if (access(path, F_OK) != 0) {
            snprintf(why, why_len, "HCOMM_DPDK_PORT=%s: no PCI device %s", spec, path);
            return HCOMM_ERR_NO_DEVICE;
        }
        return HCOMM_OK;
    }
    if (strncmp(spec, "net_", 4) != 0) {
        snprintf(why, why_len, "HCOMM_DPDK_PORT=%s is neither a PCI address nor a vdev (net_...)",
                 spec);
        return HCOMM_ERR_NO_DEVICE;
    }
    hc_dpdk_vdev_arg(spec, "iface", iface, sizeof(iface));
    if (iface[0] && if_nametoindex(iface) == 0) {
        snprintf(why, why_len, "HCOMM_DPDK_PORT=%s: no interface %s in this network namespace",
                 spec, iface);
        return HCOMM_ERR_NO_DEVICE;
    }
    return HCOMM_OK;
}

bool hc_dpdk_eal_running(void)
{
    return hc_dpdk_eal_done && !hc_dpdk_eal_error[0];
}
