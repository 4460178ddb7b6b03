/*
 * Bootstrap wire format. Every byte a rendezvous peer sends goes through
 * hc_bootstrap_msg_parse() before anything else looks at it, so the parser is
 * the security boundary of the rendezvous port: it reads fields with explicit
 * little-endian loads (no struct overlay, no alignment assumptions), checks
 * each length against a fixed limit before adding it to anything, and never
 * reads past buf + len. It rejects as early as the bytes allow (the magic
 * after 4 bytes, every header field after 32), so a garbage client is dropped
 * before rank 0 allocates anything for it. The format has no padding or
 * reserved bytes: pack(parse(x)) == x, which the fuzzer checks.
 */
#include "core/bootstrap.h"

#include <string.h>

static uint32_t hc_bootstrap_load32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t hc_bootstrap_load64(const uint8_t *p)
{
    return (uint64_t)hc_bootstrap_load32(p) | (uint64_t)hc_bootstrap_load32(p + 4) << 32;
}

static void hc_bootstrap_store32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void hc_bootstrap_store64(uint8_t *p, uint64_t v)
{
    hc_bootstrap_store32(p, (uint32_t)v);
    hc_bootstrap_store32(p + 4, (uint32_t)(v >> 32));
}

/* The auth bytes each type carries: the handshake's nonces and MACs
 * (bootstrap_auth.c), nothing elsewhere. */
static bool hc_bootstrap_msg_auth_valid(uint32_t type, uint32_t auth_len)
{
    switch (type) {
    case HC_BOOTSTRAP_MSG_HELLO:
        return auth_len == HC_BOOTSTRAP_NONCE_LEN;
    case HC_BOOTSTRAP_MSG_CHALLENGE:
        return auth_len == HC_BOOTSTRAP_NONCE_LEN + HC_BOOTSTRAP_MAC_LEN;
    case HC_BOOTSTRAP_MSG_PROOF:
        return auth_len == HC_BOOTSTRAP_MAC_LEN;
    case HC_BOOTSTRAP_MSG_REFUSE: /* authenticated only to a peer that proved the key */
        return auth_len == 0 || auth_len == HC_BOOTSTRAP_MAC_LEN;
    default:
        return auth_len == 0;
    }
}

/* The header rules, shared by parse and pack so that pack cannot produce what
 * parse rejects. */
static bool hc_bootstrap_msg_header_valid(const hc_bootstrap_msg_t *m)
{
    if (m->magic != HC_BOOTSTRAP_MAGIC || m->version != HC_BOOTSTRAP_VERSION) return false;
    if (m->size == 0 || m->size > HC_BOOTSTRAP_MAX_SIZE || m->rank >= m->size) return false;
    if (m->payload_len > HC_BOOTSTRAP_MAX_PAYLOAD) return false;
    if (!hc_bootstrap_msg_auth_valid(m->type, m->auth_len)) return false;
    switch (m->type) {
    case HC_BOOTSTRAP_MSG_PROOF:
    case HC_BOOTSTRAP_MSG_AG_IN:
        return m->payload_len <= HC_BOOTSTRAP_MAX_BLOB;
    case HC_BOOTSTRAP_MSG_TABLE: {
        /* by node: a reference alone, or the table and a reference */
        if (m->payload_len == HC_BOOTSTRAP_NODE_REF_LEN) return true;
        uint64_t t = m->payload_len, ref = t % m->size ? HC_BOOTSTRAP_NODE_REF_LEN : 0;
        return t >= ref && (t - ref) % m->size == 0 && (t - ref) / m->size <= HC_BOOTSTRAP_MAX_BLOB;
    }
    case HC_BOOTSTRAP_MSG_AG_OUT: /* the table, or (by node) rank 0's 24-byte word */
        return m->payload_len == HC_BOOTSTRAP_NODE_REF_LEN ||
               (m->payload_len % m->size == 0 && m->payload_len / m->size <= HC_BOOTSTRAP_MAX_BLOB);
    case HC_BOOTSTRAP_MSG_ABORT:
    case HC_BOOTSTRAP_MSG_REFUSE:
        return m->payload_len >= 4 && m->payload_len <= 4 + HC_BOOTSTRAP_MAX_ABORT_TEXT;
    case HC_BOOTSTRAP_MSG_FAILED:
        return m->payload_len >= HC_BOOTSTRAP_NOTICE_HDR &&
               m->payload_len <= HC_BOOTSTRAP_NOTICE_HDR + HC_BOOTSTRAP_MAX_NOTICE_TEXT;
    case HC_BOOTSTRAP_MSG_HELLO:
    case HC_BOOTSTRAP_MSG_CHALLENGE:
    case HC_BOOTSTRAP_MSG_BUSY:
        return m->payload_len == 0;
    case HC_BOOTSTRAP_MSG_RELAY:
        return m->payload_len >= HC_BOOTSTRAP_RELAY_HDR &&
               m->payload_len <= HC_BOOTSTRAP_RELAY_HDR + HC_BOOTSTRAP_MAX_RELAY;
    default:
        return false;
    }
}

uint32_t hc_bootstrap_msg_version(const void *buf, size_t len)
{
    const uint8_t *b = buf;
    if (buf == NULL || len < 8 || hc_bootstrap_load32(b) != HC_BOOTSTRAP_MAGIC) return 0;
    return hc_bootstrap_load32(b + 4);
}

long hc_bootstrap_msg_parse_header(const void *buf, size_t len, hc_bootstrap_msg_t *msg)
{
    const uint8_t *b = buf;
    hc_bootstrap_msg_t m;

    if (buf == NULL || msg == NULL) return -1;
    if (len >= 4 && hc_bootstrap_load32(b) != HC_BOOTSTRAP_MAGIC) return -1;
    if (len < HC_BOOTSTRAP_HDR_LEN) return 0;
    m.magic = hc_bootstrap_load32(b);
    m.version = hc_bootstrap_load32(b + 4);
    m.type = hc_bootstrap_load32(b + 8);
    m.rank = hc_bootstrap_load32(b + 12);
    m.size = hc_bootstrap_load32(b + 16);
    m.auth_len = hc_bootstrap_load32(b + 20);
    m.payload_len = hc_bootstrap_load64(b + 24);
    m.auth = NULL;
    m.payload = NULL;
    if (!hc_bootstrap_msg_header_valid(&m)) return -1;
    *msg = m;
    /* Both lengths are bounded above, so the sum cannot overflow. */
    return (long)(HC_BOOTSTRAP_HDR_LEN + (uint64_t)m.auth_len + m.payload_len);
}

long hc_bootstrap_msg_parse(const void *buf, size_t len, hc_bootstrap_msg_t *msg)
{
    hc_bootstrap_msg_t m;
    long total = hc_bootstrap_msg_parse_header(buf, len, &m);

    if (total <= 0 || len < (size_t)total) return total <= 0 ? total : 0;
    m.auth = (const uint8_t *)buf + HC_BOOTSTRAP_HDR_LEN;
    m.payload = (const uint8_t *)buf + HC_BOOTSTRAP_HDR_LEN + m.auth_len;
    *msg = m;
    return total;
}

long hc_bootstrap_msg_pack_header(const hc_bootstrap_msg_t *msg, void *out, size_t cap)
{
    uint8_t *o = out;

    if (msg == NULL || out == NULL || !hc_bootstrap_msg_header_valid(msg)) return -1;
    if (msg->auth_len && msg->auth == NULL) return -1;
    if (HC_BOOTSTRAP_HDR_LEN + (size_t)msg->auth_len > cap) return -1;
    hc_bootstrap_store32(o, msg->magic);
    hc_bootstrap_store32(o + 4, msg->version);
    hc_bootstrap_store32(o + 8, msg->type);
    hc_bootstrap_store32(o + 12, msg->rank);
    hc_bootstrap_store32(o + 16, msg->size);
    hc_bootstrap_store32(o + 20, msg->auth_len);
    hc_bootstrap_store64(o + 24, msg->payload_len);
    if (msg->auth_len) memcpy(o + HC_BOOTSTRAP_HDR_LEN, msg->auth, msg->auth_len);
    return (long)(HC_BOOTSTRAP_HDR_LEN + msg->auth_len);
}

long hc_bootstrap_msg_pack(const hc_bootstrap_msg_t *msg, void *out, size_t cap)
{
    uint8_t *o = out;

    if (msg == NULL || out == NULL || !hc_bootstrap_msg_header_valid(msg)) return -1;
    if (msg->payload_len && msg->payload == NULL) return -1;
    uint64_t total = HC_BOOTSTRAP_HDR_LEN + (uint64_t)msg->auth_len + msg->payload_len;
    if (total > cap || hc_bootstrap_msg_pack_header(msg, out, cap) < 0) return -1;
    if (msg->payload_len)
        memcpy(o + HC_BOOTSTRAP_HDR_LEN + msg->auth_len, msg->payload, (size_t)msg->payload_len);
    return (long)total;
}
