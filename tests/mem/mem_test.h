/* Helpers shared by the mem/ unit tests. */
#ifndef HC_MEM_TEST_H
#define HC_MEM_TEST_H

#include "core/config.h"
#include "mem/mem_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Loads hc_cfg from the environment (after the test's setenv calls) and
 * initializes mem/. */
static inline void mem_test_init(void)
{
    if (hc_config_load() != HCOMM_OK || hc_mem_init() != HCOMM_OK) {
        fprintf(stderr, "mem init failed: %s\n", hc_error_last());
        abort();
    }
}

/* HugePages_Free from /proc/meminfo (-1 if unreadable). */
static inline long mem_test_huge_free(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    long n = -1;
    if (!f) return -1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "HugePages_Free: %ld", &n) == 1) break;
    fclose(f);
    return n;
}

#endif
