/*
 * Proof of the job key without sending it (issue 30.5): HMAC-SHA256 from
 * OpenSSL's libcrypto over nonces that both sides choose, compared in
 * constant time. The key never travels; a recorded handshake cannot be
 * replayed because the other side's fresh nonce is part of what is signed.
 *
 * Who uses it: the bootstrap (a rank and rank 0 prove the key to each other
 * before rank 0 accepts a HELLO) and tcp's data sockets (each connection is
 * bound to its pair of instances and socket index). docs/bootstrap.md says
 * what the key protects and what it does not.
 */
#ifndef HC_BASE_AUTH_H
#define HC_BASE_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hcomm.h"

#define HC_AUTH_NONCE 16 /* bytes of a nonce */
#define HC_AUTH_MAC 32   /* bytes of an HMAC-SHA256 */

/* One piece of the message an HMAC covers. */
typedef struct {
    const void *p;
    size_t len;
} hc_auth_part_t;

/* n bytes from the kernel's random source (getrandom); ERR_INTERNAL with
 * an error naming errno when it fails. */
hcomm_status_t hc_auth_random(void *buf, size_t n);

/* HMAC-SHA256 under key (key_len bytes; 0 is allowed: a job without a key
 * still binds its handshakes to the nonces) over the concatenation of the
 * parts, each preceded by its length (so the split points are signed too).
 * ERR_INTERNAL when libcrypto fails. */
hcomm_status_t hc_auth_mac(const void *key, size_t key_len, const hc_auth_part_t *parts,
                           int nparts, uint8_t mac[HC_AUTH_MAC]);

/* a == b over n bytes, in time independent of where they differ. */
bool hc_auth_equal(const uint8_t *a, const uint8_t *b, size_t n);

#endif /* HC_BASE_AUTH_H */
