/* Helpers shared by the mem/ unit tests. */
#ifndef HC_MEM_TEST_H
#define HC_MEM_TEST_H

#include "base/config.h"
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

/* mem_test_init with the pool's class ratio (log2) and size limits. */
static inline void mem_test_init_pool(const char *bits, const char *initial, const char *max)
{
    setenv("HCOMM_MEM_POOL_BUCKET_BITS", bits, 1);
    setenv("HCOMM_MEM_POOL_INITIAL_SIZE", initial, 1);
    setenv("HCOMM_MEM_POOL_MAX_SIZE", max, 1);
    mem_test_init();
}

/* cmocka teardown: finalize mem/ even when the test failed midway. */
static inline int mem_test_teardown(void **state)
{
    (void)state;
    hc_mem_finalize();
    return 0;
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
