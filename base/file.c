/*
 * Small file helpers (base/hc_base.h): one number from a sysfs or procfs
 * file, which mem/, the tcp driver and the verbs driver each read.
 */
#include "base/hc_base.h"

#include <stdio.h>

bool hc_read_long(const char *path, long *out)
{
    FILE *f = fopen(path, "r");
    if (!f) return false;
    long v;
    bool ok = fscanf(f, "%ld", &v) == 1;
    fclose(f);
    if (ok) *out = v;
    return ok;
}
