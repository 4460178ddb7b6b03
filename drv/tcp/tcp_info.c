/*
 * The kernel's minimum RTT of a socket (struct tcp_info's tcpi_min_rtt,
 * the windowed minimum, net.ipv4.tcp_min_rtt_wlen). It is in Linux's
 * <linux/tcp.h> struct only: glibc's <netinet/tcp.h>, which the rest of the
 * driver includes, stops before it, and the two headers cannot meet in one
 * file. The rails' stripe takes a rail's delay from it (tcp_rail.c): unlike
 * the smoothed RTT, delayed acknowledgements of an idle socket's small
 * frames (heartbeats) do not inflate it.
 */
#include "drv/tcp/tcp.h"

#include <linux/tcp.h>
#include <netinet/in.h>
#include <stddef.h>
#include <sys/socket.h>

uint32_t hc_drv_tcp_min_rtt_us(int fd)
{
    struct tcp_info ti;
    socklen_t len = sizeof(ti);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
        len < offsetof(struct tcp_info, tcpi_min_rtt) + sizeof(ti.tcpi_min_rtt))
        return 0;
    return ti.tcpi_min_rtt == ~0u ? 0 : ti.tcpi_min_rtt; /* ~0: no sample yet */
}
