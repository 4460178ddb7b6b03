/*
 * dpdk: the static inlines the driver's files share on the data path (the
 * clock every put and poll reads, the busy list the timers visit).
 */
#ifndef HC_DRV_DPDK_INL_H
#define HC_DRV_DPDK_INL_H

#include "drv/dpdk/dpdk.h"

#include <rte_cycles.h>
#include <time.h>

/* Microseconds from the TSC as EAL calibrated it ((2^32 us) per cycle;
 * 0 until open): the driver reads the clock on every poll, and
 * clock_gettime took 17% of the CPU of an 8-byte memif ping-pong. */
extern uint64_t hc_dpdk_us_per_cycle_q32 __attribute__((visibility("hidden"))); /* dpdk_setup.c */

static inline uint64_t hc_dpdk_now_us(void)
{
    if (HC_LIKELY(hc_dpdk_us_per_cycle_q32))
        return (uint64_t)(((unsigned __int128)rte_get_tsc_cycles() * hc_dpdk_us_per_cycle_q32) >>
                          32);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* Drops d->busy[i] (the last entry takes its place). */
static inline void hc_dpdk_unbusy(hc_dpdk_drv_t *d, int i)
{
    d->busy[i]->busy = false;
    d->busy[i] = d->busy[--d->nbusy];
}

#endif /* HC_DRV_DPDK_INL_H */
