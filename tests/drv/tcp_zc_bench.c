/*
 * tcp_zc_bench: plain send() vs send(MSG_ZEROCOPY) throughput for one TCP
 * stream, frame sizes 256 KiB .. 32 MiB, the measurement behind the tcp
 * driver's HCOMM_ZCOPY_THRESHOLD default (docs/tcp.md).
 *
 *   tcp_zc_bench server PORT              (receives until the peer closes)
 *   tcp_zc_bench client HOST PORT [MiB]   (prints one line per size and mode)
 *
 * The client sends MiB (default 1024) per size and mode from one buffer,
 * keeping zerocopy sends in flight while completions lag (as the driver
 * does), and counts a mode's time until the last completion arrived.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/errqueue.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef MSG_ZEROCOPY
#define MSG_ZEROCOPY 0x4000000
#endif

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int serve(int port)
{
    int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (bind(l, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(l, 4) != 0) {
        perror("bind/listen");
        return 1;
    }
    char *buf = malloc(1 << 22);
    for (;;) {
        int s = accept(l, NULL, NULL);
        if (s < 0)
            return 1;
        while (recv(s, buf, 1 << 22, 0) > 0)
            ;
        close(s);
    }
}

/* Completions reaped so far; returns the highest id completed + 1. */
static uint32_t reap(int fd, uint32_t done, int *copied)
{
    for (;;) {
        char ctrl[128];
        struct msghdr m = {.msg_control = ctrl, .msg_controllen = sizeof(ctrl)};
        if (recvmsg(fd, &m, MSG_ERRQUEUE | MSG_DONTWAIT) < 0)
            return done;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
            struct sock_extended_err *e = (void *)CMSG_DATA(c);
            if (e->ee_origin != SO_EE_ORIGIN_ZEROCOPY)
                continue;
            if (e->ee_code & SO_EE_CODE_ZEROCOPY_COPIED)
                (*copied)++;
            if (e->ee_data + 1 > done)
                done = e->ee_data + 1;
        }
    }
}

static double run(const char *host, int port, size_t frame, size_t total, int zc, int *copied)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res;
    char ps[16];
    snprintf(ps, sizeof(ps), "%d", port);
    if (getaddrinfo(host, ps, &hints, &res) != 0)
        return -1;
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (zc && setsockopt(fd, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof(one)) != 0)
        return -1;
    if (connect(fd, res->ai_addr, res->ai_addrlen) != 0)
        return -1;
    freeaddrinfo(res);
    char *buf = aligned_alloc(4096, frame);
    memset(buf, 1, frame);
    uint32_t issued = 0, done = 0;
    double t0 = now_s();
    for (size_t sent = 0; sent < total;) {
        size_t off = 0;
        while (off < frame) {
            ssize_t n = send(fd, buf + off, frame - off, zc ? MSG_ZEROCOPY : 0);
            if (n < 0 && errno == ENOBUFS) {
                struct pollfd p = {.fd = fd, .events = 0};
                poll(&p, 1, 1);
                done = reap(fd, done, copied);
                continue;
            }
            if (n < 0)
                return -1;
            off += (size_t)n;
            if (zc)
                issued++;
        }
        sent += frame;
        if (zc)
            done = reap(fd, done, copied);
    }
    while (zc && done < issued) {
        struct pollfd p = {.fd = fd, .events = 0};
        poll(&p, 1, 10);
        done = reap(fd, done, copied);
    }
    double t = now_s() - t0;
    close(fd);
    free(buf);
    return (double)total / t / 1e9;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && !strcmp(argv[1], "server"))
        return serve(atoi(argv[2]));
    if (argc < 4 || strcmp(argv[1], "client")) {
        fprintf(stderr, "usage: %s server PORT | client HOST PORT [MiB]\n", argv[0]);
        return 2;
    }
    size_t total = (size_t)(argc > 4 ? atoi(argv[4]) : 1024) << 20;
    printf("%10s %12s %12s %s\n", "frame", "send GB/s", "zcopy GB/s", "zc completions copied");
    for (size_t frame = 256 << 10; frame <= (32u << 20); frame *= 2) {
        int copied = 0, c0 = 0;
        double plain = run(argv[2], atoi(argv[3]), frame, total, 0, &c0);
        double zc = run(argv[2], atoi(argv[3]), frame, total, 1, &copied);
        printf("%10zu %12.2f %12.2f %d\n", frame, plain, zc, copied);
        fflush(stdout);
    }
    return 0;
}
