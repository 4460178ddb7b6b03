/*
 * tcp driver, the receive stream: each socket reads into its own buffer of
 * max_frame plus slack, as much as the kernel has (8 reads at most per
 * event), and hands every complete frame to the core, or to the rails'
 * parser (tcp_rail.c) when the frames carry a rail header; small frames are
 * thus read many per system call. The driver's own frames (heartbeats,
 * rail ACKs and notices, the idle-close handshake, BYE) are handled here.
 * A drained data socket is asked for an immediate ACK (TCP_QUICKACK): a
 * sender's MSG_ZEROCOPY completion waits for it.
 */
#include "drv/tcp/tcp.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>

/* ---- receiving ---------------------------------------------------------------------- */

void hc_drv_tcp_driver_frame(hc_tcp_conn_t *c, hc_tcp_slot_t *s, const hc_frame_hdr_t *h)
{
    switch (h->type) {
    case HC_TCP_FRAME_HB:
        c->drv->n_hb_rx++;
        if (!(h->flags & HC_TCP_HB_ECHO)) break;
        if (c->drv->pre) /* rails: the echo goes back on the rail asked */
            hc_drv_tcp_rail_ctrl(s, HC_TCP_FRAME_HB, 0, 0, 0);
        else
            hc_drv_tcp_ctrl(c, HC_TCP_FRAME_HB, 0, 0, 0);
        break;
    case HC_TCP_FRAME_ACK:
        hc_drv_tcp_rail_ack(c, h);
        break;
    case HC_TCP_FRAME_RAIL_DOWN:
        hc_drv_tcp_rail_peer_left(c, h);
        break;
    case HC_TCP_FRAME_BYE:
        c->bye = true;
        break;
    case HC_TCP_FRAME_CLOSE:
    case HC_TCP_FRAME_CLOSE_OK:
    case HC_TCP_FRAME_CLOSE_NO:
        hc_drv_tcp_idle_frame(c, h);
        break;
    default:
        hc_log_debug("tcp: unknown driver frame %u from %s ignored", h->type, c->name);
    }
}

int hc_drv_tcp_next_frame(hc_tcp_slot_t *s, size_t pre, hc_frame_hdr_t *h, const uint8_t **pre_p,
                          const uint8_t **payload)
{
    size_t hl = pre + HC_TCP_HDR, have = s->rend - s->rstart;
    if (have < hl) return 0;
    memcpy(h, s->rbuf + s->rstart + pre, HC_TCP_HDR);
    if (HC_UNLIKELY(h->len > HC_TCP_MAX_FRAME)) {
        hc_drv_tcp_conn_fail(s->conn, "%s sent a malformed frame (type %u, %u bytes)",
                             s->conn->name, h->type, h->len);
        return -1;
    }
    size_t need = hl + h->len;
    if (have < need) {
        if (s->rstart + need > s->rcap) { /* the rest would not fit after it */
            memmove(s->rbuf, s->rbuf + s->rstart, have);
            s->rend = have;
            s->rstart = 0;
        }
        return 0;
    }
    *pre_p = s->rbuf + s->rstart;
    *payload = s->rbuf + s->rstart + hl;
    s->rstart += need;
    s->rx_bulk |= (h->flags & HC_FRAME_FLAG_UNORDERED) != 0;
    return 1;
}

/* Hands every complete frame in the buffer to the core. */
static int hc_drv_tcp_parse(hc_tcp_slot_t *s)
{
    hc_tcp_conn_t *c = s->conn;
    const hc_drv_env_t *env = c->drv->env;
    int n = 0, got;
    hc_frame_hdr_t h;
    const uint8_t *pre, *payload;
    while ((got = hc_drv_tcp_next_frame(s, 0, &h, &pre, &payload)) > 0) {
        if (HC_UNLIKELY(h.type >= HC_FRAME_DRIVER)) {
            hc_drv_tcp_driver_frame(c, s, &h);
        } else {
            hc_tcp_sock_stats_t *st = &c->drv->sock[s->idx];
            st->rx_frames++;
            st->rx_bytes += HC_TCP_HDR + h.len;
            st->rx_lanes |= 1u << (h.lane & (HC_FRAME_LANES - 1));
            c->n_rx++;
            env->deliver(env->core, &c->base, &h, payload);
        }
        n++;
        if (HC_UNLIKELY(c->failed || s->fd < 0)) return -1;
    }
    if (got < 0) return -1;
    if (s->rstart == s->rend) s->rstart = s->rend = 0;
    return n;
}

int hc_drv_tcp_read(hc_tcp_slot_t *s)
{
    hc_tcp_conn_t *c = s->conn;
    int events = 0;
    for (int k = 0; k < 8; k++) {
        if (s->rend == s->rcap) {
            memmove(s->rbuf, s->rbuf + s->rstart, s->rend - s->rstart);
            s->rend -= s->rstart;
            s->rstart = 0;
        }
        size_t room = s->rcap - s->rend;
        ssize_t n = recv(s->fd, s->rbuf + s->rend, room, MSG_DONTWAIT);
        if (n > 0) {
            s->rend += (size_t)n;
            uint64_t now = hc_time_ns();
            if (HC_UNLIKELY(c->suspect)) {
                hc_log_info("tcp: %s speaks again after %.1f s of silence", c->name,
                            (double)(now - c->last_rx_ns) * 1e-9);
                c->suspect = false;
            }
            c->last_rx_ns = s->last_rd_ns = now;
            int f = HC_UNLIKELY(c->drv->pre) ? hc_drv_tcp_rail_parse(s) : hc_drv_tcp_parse(s);
            if (f < 0) return events;
            events += f;
            if ((size_t)n < room) {
                /* Drained a data socket: acknowledge now. A sender's
                 * MSG_ZEROCOPY completion (and so its put_done) waits for
                 * the ACK, which delayed ACK holds back for up to 40 ms when
                 * no data flows back: measured 22 ms per 1 MiB message over
                 * loopback before this. The flag does not stick (tcp(7)).
                 * With lanes any socket may carry DATA, and the small
                 * frames of a lane's socket need no system call more. */
                if ((s->idx > 0 && !c->drv->lanes) || s->rx_bulk) {
                    int one = 1;
                    (void)setsockopt(s->fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof(one));
                }
                s->rx_bulk = false;
                break;
            }
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        int rerr = n < 0 ? errno : 0;
        if (hc_drv_tcp_idle_eof(s)) {
            /* the peer closed this socket after we agreed to an idle close */
        } else if (c->bye || c->drv->closing) {
            hc_drv_tcp_slot_close(s, HCOMM_ERR_PEER_FAILED);
        } else if (n == 0) {
            hc_drv_tcp_sock_lost(s, true, "%s closed its connection (process exited or was killed)",
                                 c->name);
        } else {
            hc_drv_tcp_sock_lost(s, false, "reading from %s failed: %s", c->name, strerror(rerr));
        }
        return events + 1;
    }
    return events;
}
