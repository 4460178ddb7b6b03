/*
 * Argument checks of the collectives that go beyond one buffer: the vector
 * collectives' counts and displacements, and the overlap of send and receive
 * buffers. Each failure names the function, the argument (with its index)
 * and the value.
 *
 * Displacements: a block is [buf + displs[r] * size, + counts[r] * size).
 * That its byte offsets do not overflow size_t is not enough: buf plus a
 * displacement near SIZE_MAX wraps around the address space and lands
 * before buf (allgatherv wrote there and returned OK). So the end of every
 * block, in bytes, must be at most PTRDIFF_MAX (no object is larger) and buf
 * plus it must not wrap.
 *
 * Overlap: a collective reads its send buffer while other ranks' data lands
 * in its receive buffer; when the two share bytes the result depends on the
 * order the algorithm happens to use (a partial overlap gave a wrong result
 * with status OK). The only sharing allowed is the documented in-place form
 * of each collective (hcomm.h), where the send data sits exactly where this
 * rank's own block of the result goes. The vector collectives also need
 * their receive blocks disjoint. Blocks are first checked in the order the
 * caller gave them, which is how they are almost always laid out (linear);
 * only blocks out of order are sorted.
 */
#include "api/api.h"

#include <stdlib.h>

hcomm_status_t hc_check_counts(const char *fn, const char *name, const size_t *counts,
                               hcomm_comm_t comm, hcomm_dtype_t dtype, size_t *total_p)
{
    if (!counts)
        return hc_error(HCOMM_ERR_INVALID, "%s: %s is NULL (it needs %d entries)", fn, name,
                        comm->size);
    size_t es = hc_dtype_size(dtype), total = 0;
    for (int r = 0; r < comm->size; r++) {
        if (counts[r] > SIZE_MAX / es || total + counts[r] < total ||
            (total + counts[r]) > SIZE_MAX / es)
            return hc_error(HCOMM_ERR_INVALID, "%s: %s[%d] = %zu elements of %zu bytes overflows",
                            fn, name, r, counts[r], es);
        total += counts[r];
    }
    if (total > (size_t)PTRDIFF_MAX / es)
        return hc_error(HCOMM_ERR_INVALID,
                        "%s: %s add up to %zu elements of %zu bytes, which "
                        "overflows the largest buffer (PTRDIFF_MAX bytes)",
                        fn, name, total, es);
    *total_p = total;
    return HCOMM_OK;
}

hcomm_status_t hc_check_displs(const char *fn, const char *name, const size_t *displs,
                               const size_t *counts, const char *buf_name, const void *buf,
                               hcomm_comm_t comm, hcomm_dtype_t dtype)
{
    if (!displs)
        return hc_error(HCOMM_ERR_INVALID, "%s: %s is NULL (it needs %d entries)", fn, name,
                        comm->size);
    size_t es = hc_dtype_size(dtype);
    uintptr_t base = (uintptr_t)buf;
    for (int r = 0; r < comm->size; r++) {
        size_t end;
        if (displs[r] > SIZE_MAX - counts[r] || hc_mul_overflows(displs[r] + counts[r], es, &end) ||
            end > (size_t)PTRDIFF_MAX || base > UINTPTR_MAX - end)
            return hc_error(HCOMM_ERR_INVALID,
                            "%s: %s[%d] = %zu overflows: the block of %zu elements of %zu bytes "
                            "it places at %s %p + %s[%d] * %zu would end outside the address "
                            "space (a block must end within PTRDIFF_MAX bytes of %s, without "
                            "wrapping)",
                            fn, name, r, displs[r], counts[r], es, buf_name, buf, name, r, es,
                            buf_name);
    }
    return HCOMM_OK;
}

static bool hc_bytes_overlap(uintptr_t a, size_t an, uintptr_t b, size_t bn)
{
    return an && bn && a < b + bn && b < a + an;
}

HC_NOINLINE hcomm_status_t hc_overlap_error(const char *fn, const void *sbuf, size_t sbytes,
                                            const void *rbuf, size_t rbytes, const char *rule)
{
    return hc_error(HCOMM_ERR_INVALID,
                    "%s: sendbuf %p (%zu bytes) and recvbuf %p (%zu bytes) overlap without being "
                    "in place (%s): the result would depend on the algorithm's order; use "
                    "separate buffers or the in-place form",
                    fn, sbuf, sbytes, rbuf, rbytes, rule);
}

/* A block of a vector collective's buffer, in bytes. */
typedef struct {
    uintptr_t lo, hi;
    int rank;
} hc_block_t;

static int hc_block_cmp(const void *a, const void *b)
{
    const hc_block_t *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* The non-empty blocks [buf + displs[r] * es, + counts[r] * es), sorted by
 * start (a malloc'ed array, *n_p entries; NULL and ERR_NO_MEMORY). */
static hcomm_status_t hc_blocks_sorted(const char *fn, const void *buf, const size_t *counts,
                                       const size_t *displs, int size, size_t es,
                                       hc_block_t **blocks_p, int *n_p)
{
    hc_block_t *b = malloc(sizeof(*b) * (size_t)size);
    if (!b) return hc_error(HCOMM_ERR_NO_MEMORY, "%s: no memory to check %d blocks", fn, size);
    int n = 0;
    for (int r = 0; r < size; r++)
        if (counts[r]) {
            b[n].lo = (uintptr_t)buf + displs[r] * es;
            b[n].hi = b[n].lo + counts[r] * es;
            b[n].rank = r;
            n++;
        }
    qsort(b, (size_t)n, sizeof(*b), hc_block_cmp);
    *blocks_p = b;
    *n_p = n;
    return HCOMM_OK;
}

/* Receive blocks disjoint: in the given order when they are laid out
 * increasingly (no allocation), else sorted. *sorted_p: the sorted blocks
 * when sorting was needed (the caller frees), else NULL; *linear_p tells
 * that the blocks, in rank order, are increasing and disjoint. */
static hcomm_status_t hc_check_rblocks(const char *fn, const void *rbuf, const size_t *rcounts,
                                       const size_t *rdispls, int size, size_t es,
                                       hc_block_t **sorted_p, int *nsorted_p)
{
    *sorted_p = NULL;
    *nsorted_p = 0;
    size_t prev_end = 0; /* in elements, from rbuf */
    bool linear = true;
    for (int r = 0; r < size && linear; r++)
        if (rcounts[r]) {
            linear = rdispls[r] >= prev_end;
            prev_end = rdispls[r] + rcounts[r];
        }
    if (linear) return HCOMM_OK;
    hc_block_t *b = NULL;
    int n = 0;
    hcomm_status_t st = hc_blocks_sorted(fn, rbuf, rcounts, rdispls, size, es, &b, &n);
    if (st != HCOMM_OK) return st;
    for (int i = 1; i < n; i++)
        if (b[i].lo < b[i - 1].hi) {
            int p = b[i - 1].rank, q = b[i].rank;
            free(b);
            return hc_error(HCOMM_ERR_INVALID,
                            "%s: the receive blocks of ranks %d and %d overlap in recvbuf "
                            "(recvcounts[%d] = %zu at displs %zu, recvcounts[%d] = %zu at displs "
                            "%zu): each byte of recvbuf may receive one block only",
                            fn, p, q, p, rcounts[p], rdispls[p], q, rcounts[q], rdispls[q]);
        }
    *sorted_p = b;
    *nsorted_p = n;
    return HCOMM_OK;
}

/* The first receive block that [lo, hi) overlaps: -1 if none. Blocks either
 * linear in rank order (sorted NULL) or sorted. */
static int hc_rblock_hit(uintptr_t lo, uintptr_t hi, const void *rbuf, const size_t *rcounts,
                         const size_t *rdispls, int size, size_t es, const hc_block_t *sorted,
                         int nsorted)
{
    if (lo == hi) return -1;
    if (!sorted) {
        for (int r = 0; r < size; r++) {
            uintptr_t a = (uintptr_t)rbuf + rdispls[r] * es;
            if (hc_bytes_overlap(lo, hi - lo, a, rcounts[r] * es)) return r;
        }
        return -1;
    }
    int l = 0, h = nsorted; /* first block ending after lo */
    while (l < h) {
        int m = (l + h) / 2;
        if (sorted[m].hi <= lo)
            l = m + 1;
        else
            h = m;
    }
    return l < nsorted && sorted[l].lo < hi ? sorted[l].rank : -1;
}

hcomm_status_t hc_check_allgatherv_overlap(const char *fn, const void *sbuf, size_t scount,
                                           const void *rbuf, const size_t *rcounts,
                                           const size_t *rdispls, hcomm_comm_t comm,
                                           hcomm_dtype_t dtype)
{
    size_t es = hc_dtype_size(dtype);
    hc_block_t *sorted;
    int nsorted;
    hcomm_status_t st =
        hc_check_rblocks(fn, rbuf, rcounts, rdispls, comm->size, es, &sorted, &nsorted);
    if (st != HCOMM_OK) return st;
    uintptr_t lo = (uintptr_t)sbuf, mine = (uintptr_t)rbuf + rdispls[comm->rank] * es;
    int r = lo == mine ? -1
                       : hc_rblock_hit(lo, lo + scount * es, rbuf, rcounts, rdispls, comm->size, es,
                                       sorted, nsorted);
    free(sorted);
    if (r >= 0)
        return hc_error(HCOMM_ERR_INVALID,
                        "%s: sendbuf %p (%zu bytes) overlaps the receive block of rank %d "
                        "(recvbuf %p + displs[%d] = %zu elements) without being in place (in "
                        "place means sendbuf == recvbuf + displs[%d] elements): use separate "
                        "buffers or the in-place form",
                        fn, sbuf, scount * es, r, rbuf, r, rdispls[r], comm->rank);
    return HCOMM_OK;
}

hcomm_status_t hc_check_alltoallv_overlap(const char *fn, const void *sbuf, const size_t *scounts,
                                          const size_t *sdispls, const void *rbuf,
                                          const size_t *rcounts, const size_t *rdispls,
                                          hcomm_comm_t comm, hcomm_dtype_t dtype)
{
    size_t es = hc_dtype_size(dtype);
    hc_block_t *sorted;
    int nsorted;
    hcomm_status_t st =
        hc_check_rblocks(fn, rbuf, rcounts, rdispls, comm->size, es, &sorted, &nsorted);
    if (st != HCOMM_OK) return st;
    /* The extents first: disjoint extents (separate buffers) need nothing more. */
    uintptr_t slo = UINTPTR_MAX, shi = 0, rlo = UINTPTR_MAX, rhi = 0;
    for (int r = 0; r < comm->size; r++) {
        uintptr_t s = (uintptr_t)sbuf + sdispls[r] * es, d = (uintptr_t)rbuf + rdispls[r] * es;
        if (scounts[r]) {
            slo = HC_MIN(slo, s);
            shi = HC_MAX(shi, s + scounts[r] * es);
        }
        if (rcounts[r]) {
            rlo = HC_MIN(rlo, d);
            rhi = HC_MAX(rhi, d + rcounts[r] * es);
        }
    }
    bool maybe = slo < rhi && rlo < shi;
    if (maybe && !sorted)
        st = hc_blocks_sorted(fn, rbuf, rcounts, rdispls, comm->size, es, &sorted, &nsorted);
    int hit = -1, from = -1;
    for (int r = 0; st == HCOMM_OK && maybe && r < comm->size && hit < 0; r++) {
        uintptr_t s = (uintptr_t)sbuf + sdispls[r] * es;
        hit = hc_rblock_hit(s, s + scounts[r] * es, rbuf, rcounts, rdispls, comm->size, es, sorted,
                            nsorted);
        from = r;
    }
    free(sorted);
    if (st == HCOMM_OK && hit >= 0)
        st = hc_error(HCOMM_ERR_INVALID,
                      "%s: the send block for rank %d (sendbuf %p + sdispls[%d] = %zu, %zu "
                      "elements) overlaps the receive block of rank %d (recvbuf %p + rdispls[%d] "
                      "= %zu, %zu elements): alltoallv is not done in place; use separate "
                      "buffers",
                      fn, from, sbuf, from, sdispls[from], scounts[from], hit, rbuf, hit,
                      rdispls[hit], rcounts[hit]);
    return st;
}
