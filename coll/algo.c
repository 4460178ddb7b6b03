/*
 * The collective algorithm registry: selection from the family tables
 * (node_region.c, coll_net.c) as coll.h describes.
 */
#include "coll/coll.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const hc_coll_algo_t *const hc_coll_tables[] = {hc_coll_node_algos, hc_coll_net_algos};

/* word is one of the space-separated words of list. */
static bool hc_algo_word_in(const char *word, const char *list)
{
    size_t n = strlen(word);
    for (const char *p = list; p && *p;) {
        const char *e = strchr(p, ' ');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !strncasecmp(p, word, n)) return true;
        p = e ? e + 1 : NULL;
    }
    return false;
}

hc_coll_step_fn hc_coll_algo_pick(hc_coll_op_t *op, const char *forced, bool node)
{
    for (size_t t = node ? 0 : 1; t < HC_ARRAY_SIZE(hc_coll_tables); t++) {
        for (const hc_coll_algo_t *a = hc_coll_tables[t]; a->name; a++) {
            if (!(a->colls & HC_COLL_BIT(op->kind))) continue;
            bool by_name = forced && !strcasecmp(forced, a->name);
            if (forced && !by_name && a->family && !hc_algo_word_in(forced, a->family)) continue;
            if (!by_name && a->auto_pick && !a->auto_pick(op)) continue;
            if (a->applies && !a->applies(op)) continue;
            op->algo = a->name;
            op->entry = a;
            hc_coll_step_fn step = a->prepare ? a->prepare(op, forced) : a->step;
            if (step) return step;
        }
    }
    return NULL;
}

void *hc_coll_state(hc_coll_op_t *op)
{
    if (op->tmp) return op->tmp;
    size_t bytes = op->entry && op->entry->state_size ? op->entry->state_size(op) : 0;
    op->tmp = malloc(bytes ? bytes : 1);
    if (!op->tmp) {
        hc_error(HCOMM_ERR_NO_MEMORY, "%s (algorithm %s): no memory for %zu bytes of state",
                 hc_coll_name(op->kind), op->algo, bytes);
        return NULL;
    }
    op->tmp_bytes = bytes;
    return op->tmp;
}

bool hc_coll_algo_known(const char *forced)
{
    if (!strcasecmp(forced, "auto")) return true;
    for (size_t t = 0; t < HC_ARRAY_SIZE(hc_coll_tables); t++)
        for (const hc_coll_algo_t *a = hc_coll_tables[t]; a->name; a++)
            if (!strcasecmp(forced, a->name) || (a->family && hc_algo_word_in(forced, a->family)))
                return true;
    return false;
}

void hc_coll_algo_list(char *buf, size_t len)
{
    size_t n = (size_t)snprintf(buf, len, "auto");
    for (size_t t = 0; t < HC_ARRAY_SIZE(hc_coll_tables); t++)
        for (const hc_coll_algo_t *a = hc_coll_tables[t]; a->name; a++) {
            const char *words[2] = {a->name, a->family};
            for (int w = 0; w < 2; w++) {
                for (const char *p = words[w]; p && *p && n < len;) {
                    const char *e = strchr(p, ' ');
                    int l = e ? (int)(e - p) : (int)strlen(p);
                    char word[32];
                    snprintf(word, sizeof(word), "%.*s", l, p);
                    char listed[512];
                    snprintf(listed, sizeof(listed), "%s", buf);
                    for (char *c = listed; *c; c++)
                        if (*c == ',') *c = ' ';
                    if (!hc_algo_word_in(word, listed) && n < len)
                        n += (size_t)snprintf(buf + n, len - n, ", %s", word);
                    p = e ? e + 1 : NULL;
                }
            }
        }
}
