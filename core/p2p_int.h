/*
 * Inside the p2p protocol: what p2p.c (the send path), p2p_recv.c
 * (matching, unexpected messages, reassembly), p2p_fail.c (failures and
 * communicator control frames), p2p_explain.c (hang reports) and rndv.c (the
 * rendezvous state machine) share. Not for the rest of the core.
 */
#ifndef HC_P2P_INT_H
#define HC_P2P_INT_H

#include "core/hc_core.h"

/* A sender's rendezvous offer, from its RTS (kept with an unexpected one). */
typedef struct {
    uint64_t addr;
    bool can_write; /* the sender's connection can write into this rank */
    bool device;    /* the sender's buffer is device memory: never streamed */
    uint8_t rkey_len;
    uint8_t rkey[HC_RKEY_MAX];
} hc_rndv_offer_t;

/* A message that arrived before its receive was posted (p2p_recv.c). */
typedef struct {
    hc_list_t link;
    int wpeer;
    uint32_t ctx_id;
    int32_t tag;
    uint8_t type; /* EAGER or RTS; orphans: GIVE_UP, REVOKE, SHRINK too */
    uint8_t lane; /* hdr.lane: where its fragments' state is while they arrive */
    size_t len;   /* message bytes */
    size_t have;  /* EAGER bytes arrived so far (< len while fragments follow) */
    uint64_t remote_id;
    uint64_t b;            /* SHRINK (an orphan): hdr.b */
    hc_rndv_offer_t offer; /* RTS */
    uint8_t data[];        /* EAGER payload; SHRINK's */
} hc_unexp_t;

/* The request-free blocking receive (hc_p2p_recv_now) while it polls:
 * hc_ctx.blk points at it, on its caller's stack. */
enum { HC_P2P_BLK_WAIT, HC_P2P_BLK_DONE, HC_P2P_BLK_LEFT };
typedef struct hc_p2p_blk {
    uint32_t ctx_id;
    int src; /* communicator rank */
    int32_t tag;
    void *buf;
    size_t len;
    int state; /* HC_P2P_BLK_*: LEFT: its message came in another shape (left unexpected) */
} hc_p2p_blk_t;

/* The communicator of a frame's context (its collective context included);
 * NULL when this rank has not created it yet. */
static inline struct hcomm_comm *hc_p2p_comm_of(uint32_t ctx_id)
{
    uint32_t base = ctx_id & ~HC_CTX_COLL;
    struct hcomm_comm *w = hc_ctx.world;
    if (HC_LIKELY(w && w->ctx_id == base)) return w;
    return hc_comm_by_ctx(base);
}

/* p2p.c */
hcomm_status_t hc_p2p_put(hc_peer_t *p, const hc_frame_hdr_t *hdr, const void *payload,
                          struct hcomm_request *req);
void hc_p2p_control(hc_peer_t *p, uint8_t type, uint32_t ctx_id, uint64_t a, uint64_t b);

/* p2p_recv.c */
void hc_p2p_size_mismatch(struct hcomm_request *req, size_t msg_len);
/* Received bytes into req's buffer at off (a device buffer through the GPU
 * dispatch); false: failed, req completed with the error. */
bool hc_p2p_recv_copy(struct hcomm_request *req, size_t off, const void *data, size_t len);
/* The copy alone: its status (the message names the receive). */
hcomm_status_t hc_p2p_recv_put(struct hcomm_request *req, size_t off, const void *data, size_t len);
/* Keeps a frame no receive took (EAGER, RTS, or a GIVE_UP for a
 * communicator not created yet) on q, with its fragments' state. */
void hc_p2p_unexpected(hc_list_t *q, int wpeer, const hc_frame_hdr_t *hdr, const void *payload);

/* p2p_fail.c */
/* GIVE_UP, REVOKE, SHRINK and COLL_PROBE frames (hc_p2p_deliver). */
void hc_p2p_comm_frame_deliver(int wpeer, const hc_frame_hdr_t *hdr, const void *payload);

/* rndv.c */
/* Sends the RTS of req (len > the connection's eager limit). */
hcomm_status_t hc_rndv_send(hc_peer_t *p, struct hcomm_request *req);
/* An RTS payload, checked: false when malformed. */
bool hc_rndv_offer_parse(const hc_frame_hdr_t *hdr, const void *payload, hc_rndv_offer_t *o);
/* A receive met a rendezvous message of size bytes from sender request sid. */
void hc_rndv_matched(struct hcomm_request *req, hc_peer_t *p, size_t size, uint64_t sid,
                     const hc_rndv_offer_t *o);
/* CTS, DATA, FIN and NACK frames. */
void hc_rndv_frame(hc_peer_t *p, int wpeer, const hc_frame_hdr_t *hdr, const void *payload);
/* A request leaves the rendezvous without finishing it (failed in bulk):
 * releases what it holds; the caller completes it. */
void hc_rndv_forget(struct hcomm_request *req);

#endif /* HC_P2P_INT_H */
