#ifndef HC_COLL_COPY_H
#define HC_COLL_COPY_H

#include "base/hc_base.h"

/* memcpy with non-temporal stores (falls back to memcpy without AVX2). For
 * outputs larger than the caches that this rank will not read again. */
void hc_copy_nt(void *dst, const void *src, size_t len);

/* Outputs at least this large are written with non-temporal stores. */
#define HC_COPY_NT_THRESHOLD (8u << 20)

#endif
