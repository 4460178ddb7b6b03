/*
 * The relay: a small blob from one rank to another through rank 0's star
 * (per-peer handshakes of drivers whose endpoints are made for one peer,
 * such as RC queue pairs), before or besides any transport between them.
 * The receiver learns the sender from the connection, never from the
 * message.
 */
#include "core/bootstrap_int.h"

#include <string.h>

/* ---- relay: point-to-point through the star ---------------------------- */

static hcomm_status_t hc_bs_relay_send(hc_bootstrap_t *bs, int fd, int to, int from,
                                       uint32_t channel, const void *blob, size_t len)
{
    uint8_t payload[HC_BOOTSTRAP_RELAY_HDR + HC_BOOTSTRAP_MAX_RELAY];
    uint32_t words[3] = {(uint32_t)to, (uint32_t)from, channel};
    for (int w = 0; w < 3; w++)
        for (int i = 0; i < 4; i++)
            payload[4 * w + i] = (uint8_t)(words[w] >> (8 * i));
    if (len) memcpy(payload + HC_BOOTSTRAP_RELAY_HDR, blob, len);
    hc_bootstrap_msg_t m = {HC_BOOTSTRAP_MAGIC,
                            HC_BOOTSTRAP_VERSION,
                            HC_BOOTSTRAP_MSG_RELAY,
                            (uint32_t)bs->rank,
                            (uint32_t)bs->size,
                            0,
                            NULL,
                            HC_BOOTSTRAP_RELAY_HDR + len,
                            payload};
    /* Rare (a connection's setup) and small: a short bounded send. */
    return hc_bs_send_msg(fd, &m, hc_time_sec() + 1.0, "bootstrap relay", to);
}

void hc_bs_relay_msg(hc_bootstrap_t *bs, int from, const hc_bootstrap_msg_t *m)
{
    const uint8_t *p = m->payload;
    uint32_t w[3];
    for (int k = 0; k < 3; k++)
        w[k] = (uint32_t)p[4 * k] | (uint32_t)p[4 * k + 1] << 8 | (uint32_t)p[4 * k + 2] << 16 |
               (uint32_t)p[4 * k + 3] << 24;
    size_t len = (size_t)m->payload_len - HC_BOOTSTRAP_RELAY_HDR;
    /* The sender is who the connection says, never what the message claims
     * (rank 0 forwards with the true sender). */
    int src = bs->rank == 0 ? from : (int)w[1];
    if (w[0] >= (uint32_t)bs->size || src < 0 || src >= bs->size) {
        hc_log_warn("bootstrap: relay from rank %d to rank %u dropped (bad rank)", from, w[0]);
        return;
    }
    if ((int)w[0] != bs->rank) {
        /* Rank 0 forwards; a destination that is gone loses it. */
        if (bs->rank == 0 && hc_bs_conn_up(bs, (int)w[0]) &&
            hc_bs_relay_send(bs, bs->conns[w[0]].fd, (int)w[0], src, w[2],
                             p + HC_BOOTSTRAP_RELAY_HDR, len) != HCOMM_OK)
            hc_log_debug("bootstrap: relay %d -> %u not forwarded", src, w[0]);
        return;
    }
    bs->nrelayed++;
    if (bs->relay) bs->relay(bs->relay_arg, src, w[2], p + HC_BOOTSTRAP_RELAY_HDR, len);
}

void hc_bootstrap_set_relay(hc_bootstrap_t *bs, hc_bootstrap_relay_fn fn, void *arg)
{
    if (bs == NULL) return;
    bs->relay = fn;
    bs->relay_arg = arg;
}

hcomm_status_t hc_bootstrap_relay(hc_bootstrap_t *bs, int to, uint32_t channel, const void *blob,
                                  size_t len)
{
    if (bs == NULL || to < 0 || to >= bs->size || to == bs->rank)
        return hc_error(HCOMM_ERR_INVALID, "hc_bootstrap_relay: argument to (%d) is not a peer",
                        to);
    if (len > HC_BOOTSTRAP_MAX_RELAY || (len && blob == NULL))
        return hc_error(HCOMM_ERR_INVALID, "hc_bootstrap_relay: argument len (%zu) above %u", len,
                        HC_BOOTSTRAP_MAX_RELAY);
    int link = bs->rank == 0 ? to : 0;
    if (!hc_bs_conn_up(bs, link))
        return hc_error(HCOMM_ERR_PEER_FAILED, "hc_bootstrap_relay: the star to rank %d is gone",
                        link);
    return hc_bs_relay_send(bs, bs->conns[link].fd, to, bs->rank, channel, blob, len);
}
