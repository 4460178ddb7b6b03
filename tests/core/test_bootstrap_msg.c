/*
 * Bootstrap wire format: round trips, every class of malformed header,
 * truncation, and a deterministic mutation run (the gcc-side stand-in for the
 * libFuzzer target in tests/fuzz). Inputs live in exact-size heap buffers so
 * that ASan sees any read past the end.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "core/bootstrap.h"

#include <stdlib.h>
#include <string.h>

/* Auth bytes of the lengths each handshake message carries. */
#define NONCE "0123456789abcdef"
#define MAC "MAC:0123456789abcdef0123456789ab"
#define CHAL NONCE MAC

static hc_bootstrap_msg_t mk(uint32_t type, uint32_t rank, uint32_t size, const char *auth,
                             const void *payload, uint64_t plen)
{
    hc_bootstrap_msg_t m = {HC_BOOTSTRAP_MAGIC,
                            HC_BOOTSTRAP_VERSION,
                            type,
                            rank,
                            size,
                            auth ? (uint32_t)strlen(auth) : 0,
                            auth,
                            plen,
                            payload};
    return m;
}

/* Packs m into an exact-size heap buffer; *len_p = its length. */
static uint8_t *pack_exact(const hc_bootstrap_msg_t *m, size_t *len_p)
{
    size_t len = HC_BOOTSTRAP_HDR_LEN + m->auth_len + (size_t)m->payload_len;
    uint8_t *b = malloc(len);
    assert_non_null(b);
    assert_int_equal(hc_bootstrap_msg_pack(m, b, len), (long)len);
    *len_p = len;
    return b;
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    put32(p, (uint32_t)v);
    put32(p + 4, (uint32_t)(v >> 32));
}

static void test_roundtrip(void **state)
{
    (void)state;
    uint8_t blob[96];
    for (size_t i = 0; i < sizeof(blob); i++)
        blob[i] = (uint8_t)(i * 13 + 1);
    int32_t code = HCOMM_ERR_TIMEOUT;
    uint8_t abort_pl[4 + 5];
    memcpy(abort_pl, &code, 4);
    memcpy(abort_pl + 4, "hello", 5);
    hc_bootstrap_msg_t cases[] = {
        mk(HC_BOOTSTRAP_MSG_HELLO, 3, 4, NONCE, NULL, 0),
        mk(HC_BOOTSTRAP_MSG_CHALLENGE, 0, 4, CHAL, NULL, 0),
        mk(HC_BOOTSTRAP_MSG_PROOF, 3, 4, MAC, blob, 24),
        mk(HC_BOOTSTRAP_MSG_PROOF, 1, 2, MAC, NULL, 0),
        mk(HC_BOOTSTRAP_MSG_TABLE, 0, 4, NULL, blob, 96),
        mk(HC_BOOTSTRAP_MSG_AG_IN, 2, 3, NULL, blob, 7),
        mk(HC_BOOTSTRAP_MSG_AG_OUT, 0, 3, NULL, blob, 21),
        mk(HC_BOOTSTRAP_MSG_AG_OUT, 0, 3, NULL, NULL, 0),
        mk(HC_BOOTSTRAP_MSG_ABORT, 0, 3, NULL, abort_pl, sizeof(abort_pl)),
        mk(HC_BOOTSTRAP_MSG_REFUSE, 0, 3, NULL, abort_pl, sizeof(abort_pl)),
        mk(HC_BOOTSTRAP_MSG_REFUSE, 0, 3, MAC, abort_pl, sizeof(abort_pl)),
        mk(HC_BOOTSTRAP_MSG_BUSY, 0, 3, NULL, NULL, 0),
        mk(HC_BOOTSTRAP_MSG_PROOF, HC_BOOTSTRAP_MAX_SIZE - 1, HC_BOOTSTRAP_MAX_SIZE, MAC, blob, 1),
    };
    for (size_t c = 0; c < HC_ARRAY_SIZE(cases); c++) {
        size_t len;
        uint8_t *b = pack_exact(&cases[c], &len);
        hc_bootstrap_msg_t m;
        assert_int_equal(hc_bootstrap_msg_parse(b, len, &m), (long)len);
        assert_int_equal(m.magic, HC_BOOTSTRAP_MAGIC);
        assert_int_equal(m.type, cases[c].type);
        assert_int_equal(m.rank, cases[c].rank);
        assert_int_equal(m.size, cases[c].size);
        assert_int_equal(m.auth_len, cases[c].auth_len);
        assert_int_equal(m.payload_len, cases[c].payload_len);
        assert_memory_equal(m.auth, cases[c].auth ? cases[c].auth : "", m.auth_len);
        if (m.payload_len) assert_memory_equal(m.payload, cases[c].payload, m.payload_len);
        /* Little-endian on the wire, whatever the host. */
        assert_int_equal(b[0], HC_BOOTSTRAP_MAGIC & 0xff);
        assert_int_equal(b[12], cases[c].rank & 0xff);
        assert_int_equal(b[24], cases[c].payload_len & 0xff);
        free(b);
    }
}

static void test_pack_rejects(void **state)
{
    (void)state;
    uint8_t out[256], blob[8] = {0};
    hc_bootstrap_msg_t m = mk(HC_BOOTSTRAP_MSG_PROOF, 1, 2, MAC, blob, 8);
    assert_int_equal(hc_bootstrap_msg_pack(&m, out, HC_BOOTSTRAP_HDR_LEN + 32 + 7), -1); /* cap */
    assert_int_equal(hc_bootstrap_msg_pack(&m, out, HC_BOOTSTRAP_HDR_LEN + 32 + 8), 72);
    assert_int_equal(hc_bootstrap_msg_pack(NULL, out, sizeof(out)), -1);
    assert_int_equal(hc_bootstrap_msg_pack(&m, NULL, sizeof(out)), -1);
    m.payload = NULL;
    assert_int_equal(hc_bootstrap_msg_pack(&m, out, sizeof(out)), -1);
    m = mk(HC_BOOTSTRAP_MSG_PROOF, 1, 2, MAC, blob, 8);
    m.auth = NULL;
    assert_int_equal(hc_bootstrap_msg_pack(&m, out, sizeof(out)), -1);
    m = mk(HC_BOOTSTRAP_MSG_PROOF, 2, 2, MAC, blob, 8); /* rank >= size */
    assert_int_equal(hc_bootstrap_msg_pack(&m, out, sizeof(out)), -1);
    m = mk(HC_BOOTSTRAP_MSG_TABLE, 0, 3, NULL, blob, 8); /* 8 % 3 != 0 */
    assert_int_equal(hc_bootstrap_msg_pack(&m, out, sizeof(out)), -1);
    /* round 1 by node: a 24-byte reference alone, or after a table */
    uint8_t big[24 + 3 * 8] = {0};
    m = mk(HC_BOOTSTRAP_MSG_TABLE, 0, 5, NULL, big, 24);
    assert_int_equal(hc_bootstrap_msg_pack(&m, out, sizeof(out)), HC_BOOTSTRAP_HDR_LEN + 24);
    m = mk(HC_BOOTSTRAP_MSG_TABLE, 0, 3, NULL, big, 24 + 3 * 8); /* 48 % 3 == 0: a table */
    assert_int_equal(hc_bootstrap_msg_pack(&m, out, sizeof(out)), HC_BOOTSTRAP_HDR_LEN + 48);
    m = mk(HC_BOOTSTRAP_MSG_TABLE, 0, 5, NULL, big, 24 + 5 * 4); /* 44: 5 blobs of 4 + reference */
    assert_int_equal(hc_bootstrap_msg_pack(&m, out, sizeof(out)), HC_BOOTSTRAP_HDR_LEN + 44);
    m = mk(HC_BOOTSTRAP_MSG_TABLE, 0, 5, NULL, big, 23); /* neither */
    assert_int_equal(hc_bootstrap_msg_pack(&m, out, sizeof(out)), -1);
    m = mk(HC_BOOTSTRAP_MSG_TABLE, 0, 5, NULL, big, 26); /* 26 - 24 = 2: not 5 blobs */
    assert_int_equal(hc_bootstrap_msg_pack(&m, out, sizeof(out)), -1);
    m = mk(HC_BOOTSTRAP_MSG_TABLE, 0, 2, MAC, blob, 8); /* auth outside the handshake */
    assert_int_equal(hc_bootstrap_msg_pack(&m, out, sizeof(out)), -1);
    m = mk(HC_BOOTSTRAP_MSG_HELLO, 1, 2, NONCE, blob, 8); /* the blob goes in PROOF */
    assert_int_equal(hc_bootstrap_msg_pack(&m, out, sizeof(out)), -1);
    m = mk(HC_BOOTSTRAP_MSG_HELLO, 1, 2, "short nonce", NULL, 0);
    assert_int_equal(hc_bootstrap_msg_pack(&m, out, sizeof(out)), -1);
    m = mk(HC_BOOTSTRAP_MSG_CHALLENGE, 0, 2, NONCE, NULL, 0); /* a nonce without its MAC */
    assert_int_equal(hc_bootstrap_msg_pack(&m, out, sizeof(out)), -1);
    m = mk(9, 0, 2, NULL, NULL, 0); /* protocol 1's WELCOME */
    assert_int_equal(hc_bootstrap_msg_pack(&m, out, sizeof(out)), -1);
}

/* Each case patches one field of a valid 4-rank proof into something the
 * parser must refuse, from the header alone. */
typedef struct {
    const char *what;
    size_t off;
    int width;
    uint64_t value;
} bad_field_t;

static void test_malformed(void **state)
{
    (void)state;
    static const bad_field_t bad[] = {
        {"magic", 0, 4, 0x12345678},
        {"magic byte", 3, 1, 0},
        {"version 0", 4, 4, 0},
        {"version 1 (the key in the clear)", 4, 4, 1},
        {"version 2 (round 1's table sent to every rank)", 4, 4, 2},
        {"version 4", 4, 4, 4},
        {"type 0", 8, 4, 0},
        {"type 6", 8, 4, 6},
        {"type max", 8, 4, 0xffffffffu},
        {"rank == size", 12, 4, 4},
        {"rank huge", 12, 4, 0xffffffffu},
        {"size 0", 16, 4, 0},
        {"size > max", 16, 4, HC_BOOTSTRAP_MAX_SIZE + 1},
        {"type 9 (retired)", 8, 4, 9},
        {"type 1 with a MAC", 8, 4, HC_BOOTSTRAP_MSG_HELLO},
        {"auth_len 0", 20, 4, 0},
        {"auth_len 31", 20, 4, 31},
        {"auth_len 33", 20, 4, 33},
        {"auth_len huge", 20, 4, 0xffffffffu},
        {"proof payload > max blob", 24, 8, HC_BOOTSTRAP_MAX_BLOB + 1},
        {"payload > 256 MiB", 24, 8, HC_BOOTSTRAP_MAX_PAYLOAD + 1},
        {"payload 2^64-1", 24, 8, ~0ull},
    };
    uint8_t blob[16] = {1, 2, 3};
    hc_bootstrap_msg_t good = mk(HC_BOOTSTRAP_MSG_PROOF, 1, 4, MAC, blob, sizeof(blob));
    size_t len;
    uint8_t *ref = pack_exact(&good, &len);
    hc_bootstrap_msg_t m;

    /* The version is readable even where nothing else is. */
    assert_int_equal(hc_bootstrap_msg_version(ref, 8), HC_BOOTSTRAP_VERSION);
    assert_int_equal(hc_bootstrap_msg_version(ref, 7), 0);
    assert_int_equal(hc_bootstrap_msg_version("GET / HTTP", 10), 0);
    for (size_t i = 0; i < HC_ARRAY_SIZE(bad); i++) {
        uint8_t *b = malloc(len);
        memcpy(b, ref, len);
        if (bad[i].width == 1)
            b[bad[i].off] = (uint8_t)bad[i].value;
        else if (bad[i].width == 4)
            put32(b + bad[i].off, (uint32_t)bad[i].value);
        else
            put64(b + bad[i].off, bad[i].value);
        if (hc_bootstrap_msg_parse(b, len, &m) != -1)
            fail_msg("accepted a header with bad %s", bad[i].what);
        /* The header alone is enough to refuse it. */
        if (hc_bootstrap_msg_parse(b, HC_BOOTSTRAP_HDR_LEN, &m) != -1)
            fail_msg("bad %s not refused from the header alone", bad[i].what);
        free(b);
    }
    free(ref);

    /* Per-type payload rules. */
    uint8_t big[64] = {0};
    struct {
        hc_bootstrap_msg_t m;
        const char *what;
    } tcase[] = {
        {mk(HC_BOOTSTRAP_MSG_TABLE, 0, 3, NULL, big, 10), "table not a multiple of size"},
        {mk(HC_BOOTSTRAP_MSG_AG_OUT, 0, 4, NULL, big, 6), "ag_out not a multiple of size"},
        {mk(HC_BOOTSTRAP_MSG_TABLE, 0, 1, MAC, big, 4), "auth on a table"},
        {mk(HC_BOOTSTRAP_MSG_AG_IN, 1, 2, MAC, big, 4), "auth on ag_in"},
        {mk(HC_BOOTSTRAP_MSG_ABORT, 0, 2, NULL, big, 3), "abort shorter than its code"},
        {mk(HC_BOOTSTRAP_MSG_REFUSE, 0, 2, MAC, big, 3), "refuse shorter than its code"},
        {mk(HC_BOOTSTRAP_MSG_REFUSE, 0, 2, NONCE, big, 8), "refuse with a nonce for a MAC"},
        {mk(HC_BOOTSTRAP_MSG_HELLO, 1, 2, NONCE, big, 8), "hello with a payload"},
        {mk(HC_BOOTSTRAP_MSG_CHALLENGE, 0, 2, CHAL, big, 8), "challenge with a payload"},
    };
    for (size_t i = 0; i < HC_ARRAY_SIZE(tcase); i++) {
        /* pack refuses these too, so build them by hand. */
        size_t l = HC_BOOTSTRAP_HDR_LEN + tcase[i].m.auth_len + (size_t)tcase[i].m.payload_len;
        uint8_t *b = malloc(l);
        put32(b, HC_BOOTSTRAP_MAGIC);
        put32(b + 4, HC_BOOTSTRAP_VERSION);
        put32(b + 8, tcase[i].m.type);
        put32(b + 12, tcase[i].m.rank);
        put32(b + 16, tcase[i].m.size);
        put32(b + 20, tcase[i].m.auth_len);
        put64(b + 24, tcase[i].m.payload_len);
        memcpy(b + HC_BOOTSTRAP_HDR_LEN, tcase[i].m.auth ? tcase[i].m.auth : "",
               tcase[i].m.auth_len);
        memcpy(b + HC_BOOTSTRAP_HDR_LEN + tcase[i].m.auth_len, big, (size_t)tcase[i].m.payload_len);
        if (hc_bootstrap_msg_parse(b, l, &m) != -1) fail_msg("accepted %s", tcase[i].what);
        free(b);
    }
    /* Per-rank table share beyond the blob limit, and an oversized abort. */
    uint8_t h[HC_BOOTSTRAP_HDR_LEN];
    put32(h, HC_BOOTSTRAP_MAGIC);
    put32(h + 4, HC_BOOTSTRAP_VERSION);
    put32(h + 8, HC_BOOTSTRAP_MSG_TABLE);
    put32(h + 12, 0);
    put32(h + 16, 2);
    put32(h + 20, 0);
    put64(h + 24, 2ull * (HC_BOOTSTRAP_MAX_BLOB + 1));
    assert_int_equal(hc_bootstrap_msg_parse(h, sizeof(h), &m), -1);
    put64(h + 24, 2ull * HC_BOOTSTRAP_MAX_BLOB); /* the limit itself: needs more bytes */
    assert_int_equal(hc_bootstrap_msg_parse(h, sizeof(h), &m), 0);
    assert_int_equal(hc_bootstrap_msg_parse_header(h, sizeof(h), &m),
                     (long)(HC_BOOTSTRAP_HDR_LEN + 2ull * HC_BOOTSTRAP_MAX_BLOB));
    put32(h + 8, HC_BOOTSTRAP_MSG_ABORT);
    put64(h + 24, 4 + HC_BOOTSTRAP_MAX_ABORT_TEXT + 1);
    assert_int_equal(hc_bootstrap_msg_parse(h, sizeof(h), &m), -1);

    assert_int_equal(hc_bootstrap_msg_parse(NULL, 10, &m), -1);
    assert_int_equal(hc_bootstrap_msg_parse(h, sizeof(h), NULL), -1);
}

static void test_truncated(void **state)
{
    (void)state;
    uint8_t blob[40];
    for (size_t i = 0; i < sizeof(blob); i++)
        blob[i] = (uint8_t)i;
    hc_bootstrap_msg_t good = mk(HC_BOOTSTRAP_MSG_PROOF, 2, 5, MAC, blob, sizeof(blob));
    size_t len;
    uint8_t *ref = pack_exact(&good, &len);
    hc_bootstrap_msg_t m;
    m.magic = 0xdead;

    for (size_t l = 0; l < len; l++) {
        uint8_t *b = malloc(l ? l : 1);
        memcpy(b, ref, l);
        long r = hc_bootstrap_msg_parse(b, l, &m);
        if (r != 0) fail_msg("prefix of %zu bytes gave %ld, expected 0", l, r);
        free(b);
    }
    assert_int_equal(m.magic, 0xdead); /* untouched until a message is complete */
    assert_int_equal(hc_bootstrap_msg_parse(ref, len, &m), (long)len);

    /* Two messages back to back: the first is consumed alone. */
    uint8_t *two = malloc(2 * len);
    memcpy(two, ref, len);
    memcpy(two + len, ref, len);
    assert_int_equal(hc_bootstrap_msg_parse(two, 2 * len, &m), (long)len);
    assert_int_equal(hc_bootstrap_msg_parse(two + len, len, &m), (long)len);
    free(two);

    /* Garbage is refused as soon as the magic is in. */
    uint8_t junk[4] = {'G', 'E', 'T', ' '};
    assert_int_equal(hc_bootstrap_msg_parse(junk, 3, &m), 0);
    assert_int_equal(hc_bootstrap_msg_parse(junk, 4, &m), -1);
    free(ref);
}

/* xorshift64*: the same inputs on every run. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ull;
}

static void test_mutations(void **state)
{
    (void)state;
    static const uint64_t interesting[] = {0,
                                           1,
                                           2,
                                           3,
                                           4,
                                           5,
                                           7,
                                           31,
                                           32,
                                           127,
                                           128,
                                           255,
                                           HC_BOOTSTRAP_MAX_BLOB,
                                           HC_BOOTSTRAP_MAX_BLOB + 1,
                                           HC_BOOTSTRAP_MAX_SIZE,
                                           0x7fffffff,
                                           0xffffffff};
    uint8_t blob[48];
    for (size_t i = 0; i < sizeof(blob); i++)
        blob[i] = (uint8_t)(i ^ 0x5a);
    uint8_t abort_pl[12] = {0xfe, 0xff, 0xff, 0xff, 'x', 'y'};
    hc_bootstrap_msg_t seeds_m[] = {
        mk(HC_BOOTSTRAP_MSG_HELLO, 1, 4, NONCE, NULL, 0),
        mk(HC_BOOTSTRAP_MSG_CHALLENGE, 0, 4, CHAL, NULL, 0),
        mk(HC_BOOTSTRAP_MSG_PROOF, 1, 4, MAC, blob, 12),
        mk(HC_BOOTSTRAP_MSG_TABLE, 0, 4, NULL, blob, 48),
        mk(HC_BOOTSTRAP_MSG_AG_IN, 2, 3, NULL, blob, 5),
        mk(HC_BOOTSTRAP_MSG_AG_OUT, 0, 3, NULL, blob, 15),
        mk(HC_BOOTSTRAP_MSG_ABORT, 0, 2, NULL, abort_pl, sizeof(abort_pl)),
        mk(HC_BOOTSTRAP_MSG_REFUSE, 0, 2, MAC, abort_pl, sizeof(abort_pl)),
        mk(HC_BOOTSTRAP_MSG_PROOF, 0, 1, MAC, NULL, 0),
    };
    uint8_t *seeds[HC_ARRAY_SIZE(seeds_m)];
    size_t seed_len[HC_ARRAY_SIZE(seeds_m)];
    for (size_t i = 0; i < HC_ARRAY_SIZE(seeds_m); i++)
        seeds[i] = pack_exact(&seeds_m[i], &seed_len[i]);

    long accepted = 0, rejected = 0, incomplete = 0;
    uint8_t work[256], back[256];
    for (int iter = 0; iter < 200000; iter++) {
        size_t s = (size_t)(rnd() % HC_ARRAY_SIZE(seeds));
        size_t len = seed_len[s];
        memcpy(work, seeds[s], len);
        int nmut = 1 + (int)(rnd() % 4);
        for (int k = 0; k < nmut; k++) {
            if (len == 0) break;
            switch (rnd() % 6) {
            case 0: /* flip a bit */
                work[rnd() % len] ^= (uint8_t)(1u << (rnd() % 8));
                break;
            case 1: /* random byte */
                work[rnd() % len] = (uint8_t)rnd();
                break;
            case 2: /* interesting value in a header field */
                put32(work + 4 * (rnd() % 8),
                      (uint32_t)interesting[rnd() % HC_ARRAY_SIZE(interesting)]);
                break;
            case 3: /* truncate */
                len = (size_t)(rnd() % (len + 1));
                break;
            case 4: /* extend with junk */
                while (len < sizeof(work) - 16 && rnd() % 2)
                    work[len++] = (uint8_t)rnd();
                break;
            default: /* consistent length fields for a changed type/size */
                if (len >= HC_BOOTSTRAP_HDR_LEN) put64(work + 24, rnd() % 64);
                break;
            }
        }
        uint8_t *in = malloc(len ? len : 1);
        memcpy(in, work, len);
        hc_bootstrap_msg_t m;
        long r = hc_bootstrap_msg_parse(in, len, &m);
        if (r > 0) {
            accepted++;
            if ((size_t)r > len) fail_msg("iteration %d: consumed %ld of %zu bytes", iter, r, len);
            if (m.auth != in + HC_BOOTSTRAP_HDR_LEN ||
                (const uint8_t *)m.payload + m.payload_len != in + r)
                fail_msg("iteration %d: auth/payload outside the message", iter);
            long p = hc_bootstrap_msg_pack(&m, back, sizeof(back));
            if (p != r || memcmp(back, in, (size_t)r) != 0)
                fail_msg("iteration %d: pack(parse(x)) != x", iter);
        } else if (r == 0) {
            incomplete++;
        } else {
            assert_int_equal(r, -1);
            rejected++;
        }
        free(in);
    }
    for (size_t i = 0; i < HC_ARRAY_SIZE(seeds); i++)
        free(seeds[i]);
    print_message("mutations: %ld accepted, %ld incomplete, %ld rejected\n", accepted, incomplete,
                  rejected);
    /* The mutator must reach all three outcomes, or it tests little. */
    assert_true(accepted > 1000);
    assert_true(incomplete > 1000);
    assert_true(rejected > 1000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip), cmocka_unit_test(test_pack_rejects),
        cmocka_unit_test(test_malformed), cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_mutations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
