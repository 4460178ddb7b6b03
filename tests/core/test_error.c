/*
 * The last-error buffer (base/error.c): a message may quote the previous
 * one, which lives in the buffer being written (seen garbled before:
 * "HCOMM_TOPO=nearby" came out as "earby" when wrapped).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "base/hc_base.h"

static void test_quote_previous(void **state)
{
    (void)state;
    hc_error(HCOMM_ERR_INVALID, "HCOMM_TOPO=nearby: want off, local or full");
    hc_error(HCOMM_ERR_INVALID, "hcomm_init: %s", hc_error_last());
    assert_string_equal(hcomm_last_error(), "hcomm_init: HCOMM_TOPO=nearby: want off, local or full");
    hc_error(HCOMM_ERR_IO, "outer (%s) and again (%s)", hc_error_last(), hc_error_last());
    assert_string_equal(hcomm_last_error(), "outer (hcomm_init: HCOMM_TOPO=nearby: want off, local or full) and "
                                            "again (hcomm_init: HCOMM_TOPO=nearby: want off, local or full)");
}

static void test_truncates(void **state)
{
    (void)state;
    char big[2000];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    hc_error(HCOMM_ERR_INVALID, "%s", big);
    size_t n = strlen(hcomm_last_error());
    assert_true(n > 400 && n < sizeof(big));
    hc_error(HCOMM_ERR_INVALID, "wrap: %s", hc_error_last());
    assert_memory_equal(hcomm_last_error(), "wrap: xxxx", 10);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_quote_previous), cmocka_unit_test(test_truncates)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
