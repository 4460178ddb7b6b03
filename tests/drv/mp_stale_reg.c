/*
 * mp_stale_reg: a buffer range freed and mapped again (mmap MAP_FIXED over
 * it) between two transfers is never read or written through its old
 * registration. Two ranks; each round the sender maps fresh pages at the
 * same address, fills them with that round's pattern and sends; the
 * receiver maps fresh zeroed pages at its same address and receives. A
 * driver that kept using the old registration (the old physical pages)
 * would send the previous round's bytes, or write where the receiver no
 * longer looks; every byte of every round is checked. Messages are above
 * every driver's zero-copy threshold, so they go by rendezvous (RDMA READ
 * or WRITE on verbs, through the registration cache).
 *
 *   mp_stale_reg [--bytes N] [--rounds R]
 */
#include "common/mp_test.h"

#include <sys/mman.h>

static uint8_t pat(int round, size_t i)
{
    return (uint8_t)((i * 2654435761u) >> 13 ^ (size_t)round * 0x9e);
}

static uint8_t *remap(uint8_t *at, size_t len)
{
    void *p = mmap(at, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | (at ? MAP_FIXED : 0), -1, 0);
    if (p == MAP_FAILED) {
        mp_fail("mmap of %zu bytes%s failed", len, at ? " (MAP_FIXED)" : "");
        exit(1);
    }
    return p;
}

int main(int argc, char **argv)
{
    size_t len = 1u << 20;
    int rounds = 8;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--bytes") && i + 1 < argc)
            len = (size_t)strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--bytes N] [--rounds R]\n", argv[0]);
            return 2;
        }
    }
    mp_init();
    if (mp_size != 2) {
        if (mp_rank == 0) printf("skipped: mp_stale_reg needs exactly 2 ranks\n");
        hcomm_finalize();
        return 77;
    }
    hcomm_comm_t w = hcomm_comm_world();
    uint8_t *buf = NULL;
    size_t bad_total = 0;
    for (int r = 0; r < rounds; r++) {
        buf = remap(buf, len); /* round 0: anywhere; then the same address, new pages */
        if (mp_rank == 0) {
            for (size_t i = 0; i < len; i++)
                buf[i] = pat(r, i);
            MP_OK(hcomm_send(buf, len, HCOMM_UINT8, 1, r, w));
        } else {
            MP_OK(hcomm_recv(buf, len, HCOMM_UINT8, 0, r, w));
            size_t bad = 0, first = len;
            for (size_t i = 0; i < len; i++)
                if (buf[i] != pat(r, i)) {
                    if (first == len) first = i;
                    bad++;
                }
            if (bad)
                mp_fail("round %d: %zu of %zu bytes wrong (first at %zu: %#x, want %#x)", r, bad,
                        len, first, buf[first], pat(r, first));
            bad_total += bad;
        }
    }
    munmap(buf, len);
    if (mp_rank == 1 && !bad_total)
        printf("rank 1: %d rounds of %zu bytes into and out of remapped buffers: every byte right\n",
               rounds, len);
    return mp_finish("mp_stale_reg");
}
