/*
 * tcp driver, interface choice (HCOMM_SOCKET_IFNAME): the one interface of
 * the plain driver, or one per list entry with rails (tcp_rail.c), and the
 * address strings of logs and messages.
 *
 * The plain choice: HCOMM_SOCKET_IFNAME (NCCL_SOCKET_IFNAME's rules: the
 * first usable match, IPv4 before IPv6), else the interface that routes to
 * the rendezvous host, else the first non-loopback interface that is up,
 * else loopback. Rails: every entry of a list of two or more (no ^) that
 * matches an interface not taken yet, of the first one's address family.
 */
#include "drv/tcp/tcp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* ---- interface choice ----------------------------------------------------- */

/* NCCL_SOCKET_IFNAME rules: comma-separated prefixes ("=name" exact), a
 * leading ^ turns the whole list into exclusions. */
static bool hc_drv_tcp_if_match(const char *list, const char *name)
{
    if (!list || !list[0]) return true;
    bool exclude = list[0] == '^';
    const char *p = list + (exclude ? 1 : 0);
    bool hit = false;
    while (*p && !hit) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n > 0 && p[0] == '=')
            hit = strlen(name) == n - 1 && !strncmp(name, p + 1, n - 1);
        else if (n > 0)
            hit = !strncmp(name, p, n);
        p += n + (end ? 1 : 0);
    }
    return exclude ? !hit : hit;
}

static bool hc_drv_tcp_sa_equal(const struct sockaddr *a, const struct sockaddr *b)
{
    if (a->sa_family != b->sa_family) return false;
    if (a->sa_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
               ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                   &((const struct sockaddr_in6 *)b)->sin6_addr, sizeof(struct in6_addr));
}

/* The local address the kernel would use to reach host (a UDP connect sends
 * nothing). */
static bool hc_drv_tcp_route_src(const char *host, struct sockaddr_storage *src)
{
    if (!host || !host[0]) return false;
    struct addrinfo hints = {.ai_socktype = SOCK_DGRAM, .ai_flags = AI_NUMERICSERV}, *res = NULL;
    if (getaddrinfo(host, "9", &hints, &res) != 0 || !res) return false;
    bool ok = false;
    int fd = socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
        socklen_t len = sizeof(*src);
        ok = getsockname(fd, (struct sockaddr *)src, &len) == 0;
    }
    if (fd >= 0) close(fd);
    freeaddrinfo(res);
    return ok;
}

static bool hc_drv_tcp_if_usable(const struct ifaddrs *ifa)
{
    if (!ifa->ifa_addr || !(ifa->ifa_flags & IFF_UP)) return false;
    if (ifa->ifa_addr->sa_family == AF_INET) return true;
    if (ifa->ifa_addr->sa_family == AF_INET6)
        return !IN6_IS_ADDR_LINKLOCAL(&((struct sockaddr_in6 *)ifa->ifa_addr)->sin6_addr);
    return false;
}

/* Picks the interface and address to listen on; on failure writes why. */
static bool hc_drv_tcp_pick_if(const hc_drv_env_t *env, const char *filter,
                               struct sockaddr_storage *sa, socklen_t *salen, char *ifname,
                               size_t ifname_len, char *why, size_t why_len)
{
    struct ifaddrs *ifs = NULL, *best = NULL;
    if (getifaddrs(&ifs) != 0) {
        snprintf(why, why_len, "getifaddrs: %s", strerror(errno));
        return false;
    }
    if (filter && filter[0]) {
        /* The user's list: the first usable match, IPv4 before IPv6. */
        for (int pass = 0; pass < 2 && !best; pass++)
            for (struct ifaddrs *i = ifs; i && !best; i = i->ifa_next)
                if (hc_drv_tcp_if_usable(i) && hc_drv_tcp_if_match(filter, i->ifa_name) &&
                    i->ifa_addr->sa_family == (pass ? AF_INET6 : AF_INET))
                    best = i;
        if (!best)
            snprintf(why, why_len, "HCOMM_SOCKET_IFNAME=%s matches no interface that is up",
                     filter);
    } else {
        struct sockaddr_storage src;
        if (hc_drv_tcp_route_src(env ? env->bootstrap_host : NULL, &src))
            for (struct ifaddrs *i = ifs; i && !best; i = i->ifa_next)
                if (hc_drv_tcp_if_usable(i) &&
                    hc_drv_tcp_sa_equal(i->ifa_addr, (struct sockaddr *)&src))
                    best = i;
        for (int pass = 0; pass < 3 && !best; pass++)
            for (struct ifaddrs *i = ifs; i && !best; i = i->ifa_next) {
                if (!hc_drv_tcp_if_usable(i)) continue;
                bool lo = i->ifa_flags & IFF_LOOPBACK;
                int fam = i->ifa_addr->sa_family;
                if ((pass == 0 && !lo && fam == AF_INET) || (pass == 1 && !lo) || pass == 2)
                    best = i;
            }
        if (!best) snprintf(why, why_len, "no network interface is up");
    }
    if (best) {
        *salen = best->ifa_addr->sa_family == AF_INET ? sizeof(struct sockaddr_in)
                                                      : sizeof(struct sockaddr_in6);
        memset(sa, 0, sizeof(*sa));
        memcpy(sa, best->ifa_addr, *salen);
        snprintf(ifname, ifname_len, "%s", best->ifa_name);
    }
    freeifaddrs(ifs);
    return best != NULL;
}

/* The first usable interface (IPv4 before IPv6, family fam if nonzero) that
 * matches the single list entry e (e_len bytes) and is not in taken. */
static struct ifaddrs *hc_drv_tcp_rail_match(struct ifaddrs *ifs, const char *e, size_t e_len,
                                             int fam, char (*taken)[32], int ntaken)
{
    char one[64];
    snprintf(one, sizeof(one), "%.*s", (int)HC_MIN(e_len, sizeof(one) - 1), e);
    for (int pass = 0; pass < 2; pass++)
        for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
            if (!hc_drv_tcp_if_usable(i) || !hc_drv_tcp_if_match(one, i->ifa_name)) continue;
            int f = i->ifa_addr->sa_family;
            if (f != (pass ? AF_INET6 : AF_INET) || (fam && f != fam)) continue;
            bool dup = false;
            for (int k = 0; k < ntaken; k++)
                dup |= !strcmp(taken[k], i->ifa_name);
            if (!dup) return i;
        }
    return NULL;
}

int hc_drv_tcp_pick_rails(const hc_drv_env_t *env, const char *list, struct sockaddr_storage *sa,
                          socklen_t *salen, char (*ifname)[32], char *why, size_t why_len)
{
    struct ifaddrs *ifs = NULL;
    int n = 0;
    if (list && list[0] && list[0] != '^' && strchr(list, ',') && getifaddrs(&ifs) == 0) {
        for (const char *p = list; *p && n < HC_TCP_MAX_RAILS;) {
            const char *end = strchr(p, ',');
            size_t len = end ? (size_t)(end - p) : strlen(p);
            int fam = n ? sa[0].ss_family : 0; /* every rail of the family of the first */
            struct ifaddrs *i = len ? hc_drv_tcp_rail_match(ifs, p, len, fam, ifname, n) : NULL;
            if (i) {
                salen[n] = i->ifa_addr->sa_family == AF_INET ? sizeof(struct sockaddr_in)
                                                             : sizeof(struct sockaddr_in6);
                memset(&sa[n], 0, sizeof(sa[n]));
                memcpy(&sa[n], i->ifa_addr, salen[n]);
                snprintf(ifname[n], 32, "%s", i->ifa_name);
                n++;
            }
            p += len + (end ? 1 : 0);
        }
        freeifaddrs(ifs);
    }
    if (n >= 2) return n;
    /* One entry, exclusions, or only one entry matched: today's choice. */
    return hc_drv_tcp_pick_if(env, list, &sa[0], &salen[0], ifname[0], 32, why, why_len) ? 1 : 0;
}

uint8_t hc_drv_tcp_prefix_of(const struct sockaddr_storage *sa)
{
    struct ifaddrs *ifs = NULL;
    uint8_t bits = 0;
    if (getifaddrs(&ifs) != 0) return 0;
    for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
        if (!i->ifa_addr || !i->ifa_netmask ||
            !hc_drv_tcp_sa_equal(i->ifa_addr, (const struct sockaddr *)sa))
            continue;
        const uint8_t *m;
        size_t n;
        if (i->ifa_netmask->sa_family == AF_INET) {
            m = (const uint8_t *)&((const struct sockaddr_in *)i->ifa_netmask)->sin_addr;
            n = 4;
        } else {
            m = (const uint8_t *)&((const struct sockaddr_in6 *)i->ifa_netmask)->sin6_addr;
            n = 16;
        }
        for (size_t k = 0; k < n; k++)
            bits = (uint8_t)(bits + __builtin_popcount(m[k]));
        break;
    }
    freeifaddrs(ifs);
    return bits;
}

/* The address of sa without its port (hcomm_info: nothing listens yet). */
void hc_drv_tcp_ip_str(const struct sockaddr_storage *sa, char *buf, size_t len)
{
    const void *a = sa->ss_family == AF_INET
                        ? (const void *)&((const struct sockaddr_in *)sa)->sin_addr
                        : (const void *)&((const struct sockaddr_in6 *)sa)->sin6_addr;
    if (!inet_ntop(sa->ss_family, a, buf, (socklen_t)len)) snprintf(buf, len, "?");
}

void hc_drv_tcp_addr_str(int family, const void *addr, uint16_t port_n, char *buf, size_t len)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    inet_ntop(family, addr, ip, sizeof(ip));
    snprintf(buf, len, family == AF_INET6 ? "[%s]:%u" : "%s:%u", ip, ntohs(port_n));
}

void hc_drv_tcp_sa_str(const struct sockaddr_storage *sa, char *buf, size_t len)
{
    if (sa->ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        hc_drv_tcp_addr_str(AF_INET, &in->sin_addr, in->sin_port, buf, len);
    } else if (sa->ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        hc_drv_tcp_addr_str(AF_INET6, &in6->sin6_addr, in6->sin6_port, buf, len);
    } else {
        snprintf(buf, len, "(family %d)", sa->ss_family);
    }
}
