/*
 * HMAC-SHA256 through OpenSSL's libcrypto (base/auth.h): no cryptography of
 * our own, only the framing of what is signed.
 */
#include "base/auth.h"

#include "base/hc_base.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>

hcomm_status_t hc_auth_random(void *buf, size_t n)
{
    uint8_t *p = buf;
    while (n > 0) {
        ssize_t got = getrandom(p, n, 0);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return hc_error_errno(HCOMM_ERR_INTERNAL, errno, "hcomm: getrandom for a nonce");
        p += got;
        n -= (size_t)got;
    }
    return HCOMM_OK;
}

hcomm_status_t hc_auth_mac(const void *key, size_t key_len, const hc_auth_part_t *parts,
                           int nparts, uint8_t mac[HC_AUTH_MAC])
{
    static const uint8_t empty = 0;
    EVP_MAC *alg = EVP_MAC_fetch(NULL, "HMAC", NULL);
    EVP_MAC_CTX *ctx = alg ? EVP_MAC_CTX_new(alg) : NULL;
    OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string("digest", (char *)"SHA256", 0),
                           OSSL_PARAM_construct_end()};
    size_t out = 0;
    bool ok = ctx && EVP_MAC_init(ctx, key_len ? key : &empty, key_len, params);
    for (int i = 0; ok && i < nparts; i++) {
        uint64_t len = parts[i].len;
        uint8_t le[8];
        for (int b = 0; b < 8; b++)
            le[b] = (uint8_t)(len >> (8 * b));
        ok = EVP_MAC_update(ctx, le, sizeof(le)) &&
             (len == 0 || EVP_MAC_update(ctx, parts[i].p, parts[i].len));
    }
    ok = ok && EVP_MAC_final(ctx, mac, &out, HC_AUTH_MAC) && out == HC_AUTH_MAC;
    EVP_MAC_CTX_free(ctx);
    EVP_MAC_free(alg);
    if (!ok)
        return hc_error(HCOMM_ERR_INTERNAL, "hcomm: HMAC-SHA256 (libcrypto) failed");
    return HCOMM_OK;
}

bool hc_auth_equal(const uint8_t *a, const uint8_t *b, size_t n)
{
    return CRYPTO_memcmp(a, b, n) == 0;
}
