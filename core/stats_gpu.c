/*
 * Statistics: device memory's lines of the HCOMM_STATS report (stats.h,
 * docs/observability.md "Device memory"): the staging's copies and calls,
 * its buffers and their pinning (hc_gpu_stats, gpu/gpu.h), written only
 * while a GPU backend is active or something was counted.
 */
#include "core/stats.h"
#include "core/hc_core.h"
#include "gpu/gpu.h"

#include <stdio.h>
#include <string.h>

static bool hc_stats_gpu_any(void)
{
    static const hc_gpu_stats_t zero;
    return hc_gpu_on || memcmp(&hc_gpu_stats, &zero, sizeof(zero)) != 0;
}

static const char *hc_stats_gpu_backend(void)
{
    const hc_gpu_ops_t *ops = hc_gpu_backend();
    return ops ? ops->name : "none";
}

void hc_stats_gpu_reset(void)
{
    memset(&hc_gpu_stats, 0, sizeof(hc_gpu_stats));
}

void hc_stats_gpu_lines(void (*line)(const char *text, void *arg), void *arg)
{
    if (!hc_stats_gpu_any()) return;
    const hc_gpu_stats_t *g = &hc_gpu_stats;
    char text[768];
    snprintf(text, sizeof(text),
             "device memory (%s): staging copies device->host %llu / %llu B, host->device "
             "%llu / %llu B; reductions on the device %llu / %llu B; staged calls: whole %llu, "
             "pipelined %llu (%llu with a device buffer here) in %llu chunks",
             hc_stats_gpu_backend(), (unsigned long long)g->d2h_copies,
             (unsigned long long)g->d2h_bytes, (unsigned long long)g->h2d_copies,
             (unsigned long long)g->h2d_bytes, (unsigned long long)g->dev_reduces,
             (unsigned long long)g->dev_reduce_bytes, (unsigned long long)g->whole_calls,
             (unsigned long long)g->pipe_calls, (unsigned long long)g->pipe_dev_calls,
             (unsigned long long)g->pipe_chunks);
    line(text, arg);
    snprintf(text, sizeof(text),
             "device staging buffers: made %llu, reused %llu; pinned (host_register) %llu / "
             "%llu B, refused %llu (left pageable)",
             (unsigned long long)g->buf_allocs, (unsigned long long)g->buf_reuses,
             (unsigned long long)g->pin_regs, (unsigned long long)g->pin_bytes,
             (unsigned long long)g->pin_failures);
    line(text, arg);
    snprintf(text, sizeof(text),
             "device node collectives (unstaged): %llu with a device buffer here, %llu of them "
             "by IPC; %llu B reduced here by IPC",
             (unsigned long long)g->node_dev_calls, (unsigned long long)g->node_ipc_calls,
             (unsigned long long)g->node_ipc_bytes);
    line(text, arg);
}

void hc_stats_gpu_json(FILE *f, unsigned rep)
{
    if (!hc_stats_gpu_any()) return;
    const hc_gpu_stats_t *g = &hc_gpu_stats;
    fprintf(f,
            "{\"type\":\"gpu\",\"report\":%u,\"rank\":%d,\"backend\":\"%s\",\"d2h_copies\":%llu,"
            "\"d2h_bytes\":%llu,\"h2d_copies\":%llu,\"h2d_bytes\":%llu,\"dev_reduces\":%llu,"
            "\"dev_reduce_bytes\":%llu,\"whole_calls\":%llu,\"pipe_calls\":%llu,"
            "\"pipe_dev_calls\":%llu,\"pipe_chunks\":%llu,\"buf_allocs\":%llu,"
            "\"buf_reuses\":%llu,\"pin_regs\":%llu,\"pin_bytes\":%llu,\"pin_failures\":%llu,"
            "\"node_dev_calls\":%llu,\"node_ipc_calls\":%llu,\"node_ipc_bytes\":%llu}\n",
            rep, hc_ctx.rank, hc_stats_gpu_backend(), (unsigned long long)g->d2h_copies,
            (unsigned long long)g->d2h_bytes, (unsigned long long)g->h2d_copies,
            (unsigned long long)g->h2d_bytes, (unsigned long long)g->dev_reduces,
            (unsigned long long)g->dev_reduce_bytes, (unsigned long long)g->whole_calls,
            (unsigned long long)g->pipe_calls, (unsigned long long)g->pipe_dev_calls,
            (unsigned long long)g->pipe_chunks, (unsigned long long)g->buf_allocs,
            (unsigned long long)g->buf_reuses, (unsigned long long)g->pin_regs,
            (unsigned long long)g->pin_bytes, (unsigned long long)g->pin_failures,
            (unsigned long long)g->node_dev_calls, (unsigned long long)g->node_ipc_calls,
            (unsigned long long)g->node_ipc_bytes);
}
