/*
 * base/auth.c: the HMAC framing is fixed (a known answer computed outside
 * hcomm, with Python's hmac: a change of the wire format fails here), every
 * part and its split point is signed, keys differ, nonces are random.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "base/auth.h"

static void hex(const uint8_t *m, char *out)
{
    for (int i = 0; i < HC_AUTH_MAC; i++)
        sprintf(out + 2 * i, "%02x", m[i]);
}

static void test_known_answer(void **state)
{
    (void)state;
    uint8_t mac[HC_AUTH_MAC];
    char h[2 * HC_AUTH_MAC + 1];
    const char *msg = "what do ya want for nothing?";
    hc_auth_part_t p = {msg, strlen(msg)};
    assert_int_equal(hc_auth_mac("Jefe", 4, &p, 1, mac), HCOMM_OK);
    hex(mac, h);
    /* hmac.new(b'Jefe', struct.pack('<Q', 28) + msg, hashlib.sha256) */
    assert_string_equal(h, "c0b77cf99718fc7f09c8727ff74305bde25761b2db20b1081cfcc82a3ec6029e");
    /* no key, no parts: RFC 2104 HMAC-SHA256 of nothing under an empty key */
    assert_int_equal(hc_auth_mac("", 0, NULL, 0, mac), HCOMM_OK);
    hex(mac, h);
    assert_string_equal(h, "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");
}

static void test_parts_and_keys(void **state)
{
    (void)state;
    uint8_t a[HC_AUTH_MAC], b[HC_AUTH_MAC], c[HC_AUTH_MAC];
    hc_auth_part_t ab_c[2] = {{"ab", 2}, {"c", 1}}, a_bc[2] = {{"a", 1}, {"bc", 2}};
    assert_int_equal(hc_auth_mac("k", 1, ab_c, 2, a), HCOMM_OK);
    assert_int_equal(hc_auth_mac("k", 1, a_bc, 2, b), HCOMM_OK);
    assert_false(hc_auth_equal(a, b, HC_AUTH_MAC)); /* the split is signed */
    assert_int_equal(hc_auth_mac("K", 1, ab_c, 2, c), HCOMM_OK);
    assert_false(hc_auth_equal(a, c, HC_AUTH_MAC)); /* so is the key */
    assert_int_equal(hc_auth_mac("k", 1, ab_c, 2, b), HCOMM_OK);
    assert_true(hc_auth_equal(a, b, HC_AUTH_MAC));
    b[HC_AUTH_MAC - 1] ^= 1;
    assert_false(hc_auth_equal(a, b, HC_AUTH_MAC));
}

static void test_random(void **state)
{
    (void)state;
    uint8_t x[HC_AUTH_NONCE], y[HC_AUTH_NONCE];
    assert_int_equal(hc_auth_random(x, sizeof(x)), HCOMM_OK);
    assert_int_equal(hc_auth_random(y, sizeof(y)), HCOMM_OK);
    assert_memory_not_equal(x, y, sizeof(x));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_answer),
        cmocka_unit_test(test_parts_and_keys),
        cmocka_unit_test(test_random),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
