/* Operation counters and their report (see stats.h). */
#include "core/stats.h"

#include <stdio.h>
#include <string.h>

hc_stats_t hc_stats;

void hc_stats_print(int rank, void (*line)(const char *text, void *arg), void *arg)
{
    static const char *const kinds[HC_STATS_COLL_KINDS] = {
        "allreduce", "broadcast", "reduce", "allgather", "reduce_scatter", "alltoall", "barrier"};
    char buf[256];
    snprintf(buf, sizeof(buf),
             "stats r%d: p2p sent %llu msgs / %llu B, received %llu msgs / %llu B; eager %llu, "
             "fragmented %llu, rendezvous get %llu, write %llu, stream %llu; unexpected %llu; "
             "credit waits %llu",
             rank, (unsigned long long)hc_stats.send_msgs, (unsigned long long)hc_stats.send_bytes,
             (unsigned long long)hc_stats.recv_msgs, (unsigned long long)hc_stats.recv_bytes,
             (unsigned long long)hc_stats.eager, (unsigned long long)hc_stats.fragmented,
             (unsigned long long)hc_stats.rndv_get, (unsigned long long)hc_stats.rndv_write,
             (unsigned long long)hc_stats.rndv_stream,
             (unsigned long long)hc_stats.unexpected, (unsigned long long)hc_stats.credit_waits);
    line(buf, arg);
    for (int k = 0; k < HC_STATS_COLL_KINDS; k++) {
        if (!hc_stats.coll_calls[k])
            continue;
        snprintf(buf, sizeof(buf), "stats r%d: %-14s %llu calls, %llu B", rank, kinds[k],
                 (unsigned long long)hc_stats.coll_calls[k],
                 (unsigned long long)hc_stats.coll_bytes[k]);
        line(buf, arg);
    }
    snprintf(buf, sizeof(buf), "stats r%d: collectives by node algorithms %llu, by p2p %llu", rank,
             (unsigned long long)hc_stats.coll_node, (unsigned long long)hc_stats.coll_p2p);
    line(buf, arg);
}
