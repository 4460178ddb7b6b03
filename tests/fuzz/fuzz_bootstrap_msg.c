/*
 * libFuzzer target for the bootstrap wire parser, the code that reads what
 * any process on the network sends to rank 0's rendezvous port. The input is
 * copied into an exact-size heap buffer so ASan catches a read past its end.
 * Properties: parse never reads out of bounds, returns -1, 0 or a length no
 * larger than the input; the header parser agrees with the full parser; and
 * a parsed message packs back to exactly the bytes it came from; the version
 * reader agrees with the parser on what it accepts.
 */
#include "core/bootstrap.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *in = malloc(size ? size : 1);
    if (in == NULL) return 0;
    memcpy(in, data, size);

    hc_bootstrap_msg_t m, h;
    long r = hc_bootstrap_msg_parse(in, size, &m);
    long hr = hc_bootstrap_msg_parse_header(in, size, &h);
    if (r < -1 || (r > 0 && (size_t)r > size)) abort();
    /* Header verdict and full verdict agree: both refuse, or the header gives
     * the length the full parse consumes (or needs). */
    if ((r == -1) != (hr == -1)) abort();
    if (r > 0 && hr != r) abort();
    if (r > 0 && hc_bootstrap_msg_version(in, size) != HC_BOOTSTRAP_VERSION) abort();
    if (r == 0 && hr > 0 && (size_t)hr <= size) abort();
    if (r > 0) {
        if (m.auth != in + HC_BOOTSTRAP_HDR_LEN ||
            (const uint8_t *)m.payload + m.payload_len != in + r)
            abort();
        uint8_t *back = malloc((size_t)r);
        if (back == NULL) abort();
        if (hc_bootstrap_msg_pack(&m, back, (size_t)r) != r || memcmp(back, in, (size_t)r)) abort();
        /* One byte short of the room it needs: pack refuses. */
        if (hc_bootstrap_msg_pack(&m, back, (size_t)r - 1) != -1) abort();
        free(back);
    }
    free(in);
    return 0;
}
