/*
 * The knob table of config.h read into hc_cfg. Values are parsed once, at
 * init; a malformed value is an error naming the variable, not a silent
 * default.
 */
#include "base/config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

hc_config_t hc_cfg;

static const hc_config_knob_t hc_cfg_table[] = {
#define HC_CFG_ENTRY_(field, envname, type, defv, helptext)                                        \
    {envname, defv, helptext, HC_CFG_##type, &hc_cfg.field},
    HC_CONFIG_MAP(HC_CFG_ENTRY_)
#undef HC_CFG_ENTRY_
};

/* Drivers' tables, kept sorted by owner so that listings do not depend on
 * the order constructors ran in. */
#define HC_CFG_MAX_TABLES 16
static struct {
    const char *owner;
    const hc_config_knob_t *knobs;
    size_t n;
} hc_cfg_tables[HC_CFG_MAX_TABLES];
static size_t hc_cfg_ntables;
static const char *hc_cfg_refused; /* a table that did not fit: init fails naming it */

void hc_config_register(const char *owner, const hc_config_knob_t *knobs, size_t n)
{
    if (hc_cfg_ntables == HC_CFG_MAX_TABLES) {
        hc_cfg_refused = owner;
        return;
    }
    size_t i = hc_cfg_ntables++;
    while (i > 0 && strcmp(hc_cfg_tables[i - 1].owner, owner) > 0) {
        hc_cfg_tables[i] = hc_cfg_tables[i - 1];
        i--;
    }
    hc_cfg_tables[i].owner = owner;
    hc_cfg_tables[i].knobs = knobs;
    hc_cfg_tables[i].n = n;
}

/* Every knob, the core's first; stops when fn says false. */
static bool hc_config_walk(bool (*fn)(const hc_config_knob_t *k, void *arg), void *arg)
{
    for (size_t i = 0; i < HC_ARRAY_SIZE(hc_cfg_table); i++)
        if (!fn(&hc_cfg_table[i], arg))
            return false;
    for (size_t t = 0; t < hc_cfg_ntables; t++)
        for (size_t i = 0; i < hc_cfg_tables[t].n; i++)
            if (!fn(&hc_cfg_tables[t].knobs[i], arg))
                return false;
    return true;
}

/* Numbers are decimal, as documented: strtol's base 0 would read "0x10" as
 * 16 and "010" as 8, and strtod takes hex floats, "inf" and "nan". */
static bool hc_config_decimal(const char *s, const char *allowed)
{
    return *s && s[strspn(s, allowed)] == '\0' && !strpbrk(s, "xX");
}

bool hc_config_parse_size(const char *s, size_t *out)
{
    char *end;
    errno = 0;
    if (!(*s >= '0' && *s <= '9'))
        return false;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || errno)
        return false;
    unsigned shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    case 't': case 'T': shift = 40; end++; break;
    default: break;
    }
    if (*end == 'i' || *end == 'B' || *end == 'b')
        end++;
    if (*end == 'B')
        end++;
    if (*end != '\0' || (shift && v > (~0ull >> shift)))
        return false;
    *out = (size_t)(v << shift);
    return true;
}

static bool hc_config_parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"1", "y", "yes", "on", "true"};
    static const char *const no[] = {"0", "n", "no", "off", "false"};
    for (size_t i = 0; i < HC_ARRAY_SIZE(yes); i++) {
        if (!strcasecmp(s, yes[i])) { *out = true; return true; }
        if (!strcasecmp(s, no[i])) { *out = false; return true; }
    }
    return false;
}

static bool hc_config_parse_one(const hc_config_knob_t *e, const char *s)
{
    void *field = e->field;
    char *end;
    errno = 0;
    switch (e->type) {
    case HC_CFG_INT: {
        long long v = strtoll(s, &end, 10);
        if (!hc_config_decimal(s, "-+0123456789") || end == s || *end || errno)
            return false;
        *(int64_t *)field = v;
        return true;
    }
    case HC_CFG_SIZE:
        return hc_config_parse_size(s, (size_t *)field);
    case HC_CFG_DOUBLE: {
        double v = strtod(s, &end);
        if (!hc_config_decimal(s, "-+.0123456789eE") || end == s || *end || errno ||
            !isfinite(v) || v < 0)
            return false;
        *(double *)field = v;
        return true;
    }
    case HC_CFG_STR:
        *(const char **)field = s;
        return true;
    case HC_CFG_BOOL:
        return hc_config_parse_bool(s, (bool *)field);
    }
    return false;
}

static bool hc_config_load_one(const hc_config_knob_t *e, void *arg)
{
    hcomm_status_t *st = arg;
    if (!hc_config_parse_one(e, e->def)) {
        *st = hc_error(HCOMM_ERR_INTERNAL, "config: bad default for %s", e->env);
        return false;
    }
    const char *v = getenv(e->env);
    if (v && !hc_config_parse_one(e, v)) {
        hc_config_parse_one(e, e->def);
        static const char *const expect[] = {
            [HC_CFG_INT] = "a decimal integer", [HC_CFG_SIZE] = "a decimal byte count "
            "with an optional K/M/G/T suffix", [HC_CFG_DOUBLE] = "a non-negative decimal "
            "number", [HC_CFG_STR] = "a string", [HC_CFG_BOOL] = "1/0, on/off, yes/no or "
            "true/false"};
        *st = hc_error(HCOMM_ERR_INVALID, "hcomm_init: cannot parse %s=\"%s\": expected %s",
                       e->env, v, expect[e->type]);
        return false;
    }
    return true;
}

hcomm_status_t hc_config_load(void)
{
    hcomm_status_t st = HCOMM_OK;
    if (hc_cfg_refused)
        return hc_error(HCOMM_ERR_INTERNAL, "config: the knobs of %s were not registered (more "
                        "than %d tables)", hc_cfg_refused, HC_CFG_MAX_TABLES);
    if (!hc_config_walk(hc_config_load_one, &st))
        return st;
    int level;
    if (!hc_log_level_parse(hc_cfg.log, &level))
        return hc_error(HCOMM_ERR_INVALID,
                        "hcomm_init: HCOMM_LOG=\"%s\" is not one of error|warn|info|debug|trace",
                        hc_cfg.log);
    hc_log_level_current = level;
    if (hc_cfg.timeout <= 0)
        return hc_error(HCOMM_ERR_INVALID, "hcomm_init: HCOMM_TIMEOUT must be > 0");
    /* Deadlines are nanoseconds in 64 bits: beyond HC_TIMEOUT_MAX the
     * arithmetic would overflow, and no wait needs more. Saturate. */
    if (hc_cfg.timeout > HC_TIMEOUT_MAX) {
        hc_log_info("HCOMM_TIMEOUT=%g s is beyond %g s (31 years): waits have no practical "
                    "limit", hc_cfg.timeout, HC_TIMEOUT_MAX);
        hc_cfg.timeout = HC_TIMEOUT_MAX;
    }
    if (hc_cfg.warn_after < 0)
        return hc_error(HCOMM_ERR_INVALID,
                        "hcomm_init: HCOMM_WARN_AFTER=%g: use seconds > 0, or 0 for never",
                        hc_cfg.warn_after);
    if (hc_cfg.warn_after > HC_TIMEOUT_MAX)
        hc_cfg.warn_after = HC_TIMEOUT_MAX;
    return HCOMM_OK;
}

typedef struct {
    void (*fn)(const char *env, const char *value, const char *def, const char *help, void *arg);
    void *arg;
} hc_cfg_print_t;

static bool hc_config_print_one(const hc_config_knob_t *e, void *arg)
{
    hc_cfg_print_t *p = arg;
    char buf[64];
    const void *field = e->field;
    const char *value = buf;
    switch (e->type) {
    case HC_CFG_INT: snprintf(buf, sizeof(buf), "%lld", (long long)*(const int64_t *)field); break;
    case HC_CFG_SIZE: snprintf(buf, sizeof(buf), "%zu", *(const size_t *)field); break;
    case HC_CFG_DOUBLE: snprintf(buf, sizeof(buf), "%g", *(const double *)field); break;
    case HC_CFG_STR: value = *(const char *const *)field; break;
    case HC_CFG_BOOL: value = *(const bool *)field ? "1" : "0"; break;
    }
    p->fn(e->env, value ? value : "", e->def, e->help, p->arg);
    return true;
}

void hc_config_foreach(void (*fn)(const char *env, const char *value, const char *def,
                                  const char *help, void *arg),
                       void *arg)
{
    hc_cfg_print_t p = {fn, arg};
    (void)hc_config_walk(hc_config_print_one, &p);
}
