/*
 * Pool memory as the kernel sees it: on hugepages (smaps KernelPageSize) and
 * under a bind policy (numa_maps) when hugepages are reserved; on regular
 * pages, counted, and still working when none are. As root the test reserves
 * 64 more hugepages itself when fewer than 32 are free, and takes them back
 * afterwards.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "mem_test.h"

#include <unistd.h>

static bool added; /* we raised nr_hugepages by 64 */

static long read_long(const char *path)
{
    FILE *f = fopen(path, "r");
    long v = -1;
    if (f) {
        if (fscanf(f, "%ld", &v) != 1) v = -1;
        fclose(f);
    }
    return v;
}

static void write_long(const char *path, long v)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fprintf(f, "%ld\n", v);
        fclose(f);
    }
}

/* Takes back the 64 pages we added, relative to the current count: other
 * processes on the host may have changed it meanwhile. */
static void restore_hugepages(void)
{
    if (!added) return;
    long now = read_long("/proc/sys/vm/nr_hugepages");
    if (now >= 64) write_long("/proc/sys/vm/nr_hugepages", now - 64);
    added = false;
}

/* The smaps block of the mapping holding addr: its KernelPageSize in kB. */
static long smaps_kernel_page_kb(const void *addr)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    bool in = false;
    long kb = -1;
    if (!f) return -1;
    while (fgets(line, sizeof(line), f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            in = (uintptr_t)addr >= lo && (uintptr_t)addr < hi;
            continue;
        }
        if (in && sscanf(line, "KernelPageSize: %ld kB", &kb) == 1) break;
    }
    fclose(f);
    return kb;
}

/* The numa_maps line of the mapping starting at base (empty if none). */
static bool numa_maps_line(const void *base, char *out, size_t outlen)
{
    FILE *f = fopen("/proc/self/numa_maps", "r");
    char line[1024];
    bool found = false;
    if (!f) return false;
    while (!found && fgets(line, sizeof(line), f)) {
        unsigned long a;
        if (sscanf(line, "%lx ", &a) == 1 && a == (uintptr_t)base) {
            snprintf(out, outlen, "%s", line);
            found = true;
        }
    }
    fclose(f);
    return found;
}

static void test_pool_pages_and_policy(void **state)
{
    (void)state;
    if (mem_test_huge_free() < 32 && geteuid() == 0) {
        long old_nr = read_long("/proc/sys/vm/nr_hugepages");
        if (old_nr >= 0) {
            write_long("/proc/sys/vm/nr_hugepages", old_nr + 64);
            added = true;
            atexit(restore_hugepages);
        }
    }
    bool have_huge = mem_test_huge_free() >= 32;
    setenv("HCOMM_MEM_POOL_INITIAL_SIZE", "8M", 1);
    setenv("HCOMM_MEM_POOL_MAX_SIZE", "32M", 1);
    setenv("HCOMM_HUGEPAGE_SIZE", "2M", 1);
    mem_test_init();
    void *p;
    assert_int_equal(hc_mem_alloc(4096, &p), HCOMM_OK);
    memset(p, 0x3c, 4096);
    hc_mem_region_t *r = hc_mem_region_lookup(p, 4096, NULL);
    assert_non_null(r);
    long kb = smaps_kernel_page_kb(p);
    hc_mem_stats_t s;
    hc_mem_stats_get(&s);
    if (have_huge) {
        assert_true(r->huge);
        assert_int_equal(kb, 2048);
        assert_true(s.cls[0].bytes_huge > 0);
        printf("pool on hugepages: smaps KernelPageSize %ld kB\n", kb);
    } else {
        printf("skipped: no hugepages reserved (hugepage assertions; run as root or "
               "reserve with hugepages/hcomm-hugepages -n 64)\n");
        assert_false(r->huge);
        assert_int_equal(kb, sysconf(_SC_PAGESIZE) / 1024);
        assert_true(s.huge_fallbacks >= 1);
        assert_true(s.cls[0].bytes_regular > 0);
    }
    char line[1024];
    if (!hc_mem_g.numa_ok) {
        printf("skipped: libnuma reports no NUMA support (bind policy assertion)\n");
    } else if (!numa_maps_line(r->base, line, sizeof(line))) {
        printf("skipped: /proc/self/numa_maps has no line for %p (kernel without NUMA)\n", r->base);
    } else {
        printf("numa_maps: %s", line);
        assert_non_null(strstr(line, "bind:"));
        if (have_huge) assert_non_null(strstr(line, "huge"));
    }
    /* A second region grows the pool the same way. */
    void *q;
    assert_int_equal(hc_mem_alloc(4 << 20, &q), HCOMM_OK);
    memset(q, 1, 4 << 20);
    assert_int_equal(hc_mem_free(q), HCOMM_OK);
    assert_int_equal(((unsigned char *)p)[4095], 0x3c);
    assert_int_equal(hc_mem_free(p), HCOMM_OK);
    hc_mem_finalize();
    restore_hugepages();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool_pages_and_policy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
