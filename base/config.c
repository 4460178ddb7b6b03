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

typedef struct {
    const char *name;
    bool found;
} hc_cfg_find_t;

static bool hc_config_find_one(const hc_config_knob_t *k, void *arg)
{
    hc_cfg_find_t *f = arg;
    if (!strcmp(k->env, f->name)) {
        f->found = true;
        return false;
    }
    return true;
}

const char *hc_config_env(const char *name)
{
    hc_cfg_find_t f = {name, false};
    (void)hc_config_walk(hc_config_find_one, &f);
    return f.found ? getenv(name) : NULL;
}

/* Edit distance (optimal string alignment: a swap of two neighbours is
 * one edit), at most 63 characters each. */
static int hc_config_distance(const char *a, const char *b)
{
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la > 63 || lb > 63)
        return 99;
    int d[64][64];
    for (int i = 0; i <= la; i++)
        d[i][0] = i;
    for (int j = 0; j <= lb; j++)
        d[0][j] = j;
    for (int i = 1; i <= la; i++)
        for (int j = 1; j <= lb; j++) {
            int c = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            int del = d[i - 1][j] + 1, ins = d[i][j - 1] + 1;
            d[i][j] = c < del ? (c < ins ? c : ins) : (del < ins ? del : ins);
            /* two letters swapped count as one typo (HCOMM_LGO: HCOMM_LOG) */
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < d[i][j])
                d[i][j] = d[i - 2][j - 2] + 1;
        }
    return d[la][lb];
}

typedef struct {
    const char *name;
    const char *best;
    int dist;
} hc_cfg_near_t;

static bool hc_config_near_one(const hc_config_knob_t *k, void *arg)
{
    hc_cfg_near_t *n = arg;
    int d = hc_config_distance(n->name, k->env);
    /* ties: the name of the same length (a typo more than a missing letter) */
    bool closer_len = n->best && abs((int)strlen(k->env) - (int)strlen(n->name)) <
                                     abs((int)strlen(n->best) - (int)strlen(n->name));
    if (d < n->dist || (d == n->dist && closer_len)) {
        n->dist = d;
        n->best = k->env;
    }
    return true;
}

extern char **environ;

void hc_config_check_unknown(bool report)
{
    for (char **e = environ; e && *e; e++) {
        if (strncmp(*e, "HCOMM_", 6))
            continue;
        char name[128];
        size_t len = strcspn(*e, "=");
        if (len >= sizeof(name))
            continue;
        memcpy(name, *e, len);
        name[len] = 0;
        hc_cfg_find_t f = {name, false};
        (void)hc_config_walk(hc_config_find_one, &f);
        if (f.found)
            continue;
        /* the names of hcomm's scripts and test suite, not of the library */
        static const char *const others[] = {"HCOMM_VM_",    "HCOMM_TEST_", "HCOMM_BENCH_",
                                             "HCOMM_ZZTEST_", "HCOMM_BUILD", "HCOMM_HUGEPAGES",
                                             "HCOMM_DRIVERS"};
        bool theirs = false;
        for (size_t i = 0; i < HC_ARRAY_SIZE(others); i++)
            theirs |= !strncmp(name, others[i], strlen(others[i]));
        if (theirs)
            continue;
        hc_cfg_near_t n = {name, NULL, 99};
        (void)hc_config_walk(hc_config_near_one, &n);
        if (n.best && n.dist <= 3)
            hc_log(report ? HC_LOG_WARN : HC_LOG_INFO,
                   "%s is not an hcomm variable (ignored): did you mean %s? (hcomm_info -c lists "
                   "them all)", name, n.best);
        else
            hc_log(report ? HC_LOG_WARN : HC_LOG_INFO,
                   "%s is not an hcomm variable (ignored; hcomm_info -c lists them all)", name);
    }
}
