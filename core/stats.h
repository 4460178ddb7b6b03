/*
 * Per-process operation counters (HCOMM_STATS=1 prints them at finalize).
 * Plain increments on the calling thread: hcomm calls are serialized.
 */
#ifndef HC_STATS_H
#define HC_STATS_H

#include <stdint.h>

enum { HC_STATS_COLL_KINDS = 7 };

typedef struct {
    uint64_t send_msgs, send_bytes, recv_msgs, recv_bytes;
    uint64_t eager, fragmented, rndv_get, rndv_write, rndv_stream, unexpected;
    uint64_t credit_waits; /* frames queued because a peer's slots were full */
    uint64_t coll_calls[HC_STATS_COLL_KINDS], coll_bytes[HC_STATS_COLL_KINDS];
    uint64_t coll_node, coll_p2p;
} hc_stats_t;

extern hc_stats_t hc_stats;

/* Writes the counters through line() (one line each), rank-prefixed. */
void hc_stats_print(int rank, void (*line)(const char *text, void *arg), void *arg);

#endif
