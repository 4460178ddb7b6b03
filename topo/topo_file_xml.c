/*
 * Topology files in XML (docs/topology.md): the root element says which
 * form a file is.
 *   - <cluster>: hcomm's, the line format's equivalent in NCCL's XML style.
 *     <switch name=> elements nest from the top of the fabric down; a
 *     <node name=> inside them has the names of its enclosing switches,
 *     joined by '/', as its switch path (a <node> directly in <cluster>:
 *     unknown); <rank id= [numa=]/> inside a <node> places a rank on it.
 *     Its vocabulary is closed: an element or attribute it does not define
 *     is an error.
 *   - <system>: NCCL's NCCL_TOPO_FILE, one node's internals (topo_sys.c).
 * Both give the parser's callbacks what the line format gives them, so the
 * map loader and this rank's switch lookup read every form alike.
 *
 * hc_topo_map_dump_xml writes a map as <cluster>: the switch paths become a
 * tree of <switch> elements (children in the order their first node
 * comes), each node with its <rank> elements.
 */
#include "topo/topo_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct {
    const char *path;
    const hc_topo_file_cb_t *cb;
    char where[600];
} hc_topo_xml_t;

static const char *hc_topo_xml_where(hc_topo_xml_t *t, const hc_xml_elem_t *e)
{
    snprintf(t->where, sizeof(t->where), "%s:%d", t->path, e->line);
    return t->where;
}

/* Refuses e's attributes other than those in allowed (NULL-terminated). */
static hcomm_status_t hc_topo_xml_only(hc_topo_xml_t *t, const hc_xml_elem_t *e,
                                       const char *const *allowed, const char *want)
{
    for (int i = 0; i < e->nattrs; i++) {
        bool ok = false;
        for (const char *const *a = allowed; *a && !ok; a++)
            ok = !strcmp(*a, e->attrs[i].name);
        if (!ok)
            return hc_error(HCOMM_ERR_INVALID,
                            "%s: <%s>: unknown attribute %s (want %s; HCOMM_TOPO_FILE, "
                            "docs/topology.md)",
                            hc_topo_xml_where(t, e), e->name, e->attrs[i].name, want);
    }
    return HCOMM_OK;
}

/* A node or switch name: given, not empty, no whitespace or '#' (the line
 * format could not hold it), for a switch no '/' (it joins the path). */
static hcomm_status_t hc_topo_xml_name(hc_topo_xml_t *t, const hc_xml_elem_t *e, bool is_switch,
                                       const char **name_p)
{
    const char *v = hc_xml_attr(e, "name");
    if (!v || !v[0])
        return hc_error(HCOMM_ERR_INVALID,
                        "%s: <%s> without a name=\"...\" (HCOMM_TOPO_FILE, "
                        "docs/topology.md)",
                        hc_topo_xml_where(t, e), e->name);
    if (strpbrk(v, is_switch ? " #/" : " #"))
        return hc_error(HCOMM_ERR_INVALID,
                        "%s: <%s name=\"%s\">: a %s name holds no whitespace%s or '#' "
                        "(HCOMM_TOPO_FILE)",
                        hc_topo_xml_where(t, e), e->name, v, e->name,
                        is_switch ? ", '/' (it joins a switch path)" : "");
    if (strlen(v) >= HC_TOPO_NAME_MAX)
        return hc_error(HCOMM_ERR_INVALID,
                        "%s: <%s name=\"%.40s...\">: longer than %d characters "
                        "(HCOMM_TOPO_FILE)",
                        hc_topo_xml_where(t, e), e->name, v, HC_TOPO_NAME_MAX - 1);
    *name_p = v;
    return HCOMM_OK;
}

static hcomm_status_t hc_topo_xml_int(hc_topo_xml_t *t, const hc_xml_elem_t *e, const char *attr,
                                      long lo, long hi, int *out)
{
    const char *v = hc_xml_attr(e, attr);
    char *end;
    errno = 0;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || errno || end == v || *end || x < lo || x > hi)
        return hc_error(HCOMM_ERR_INVALID,
                        "%s: <%s %s=\"%s\">: want an integer in %ld..%ld (HCOMM_TOPO_FILE)",
                        hc_topo_xml_where(t, e), e->name, attr, v ? v : "", lo, hi);
    *out = (int)x;
    return HCOMM_OK;
}

static hcomm_status_t hc_topo_xml_node(hc_topo_xml_t *t, const hc_xml_elem_t *e, const char *sw)
{
    static const char *const attrs[] = {"name", NULL}, *const rank_attrs[] = {"id", "numa", NULL};
    const char *name;
    hcomm_status_t st;
    if ((st = hc_topo_xml_only(t, e, attrs, "name")) != HCOMM_OK ||
        (st = hc_topo_xml_name(t, e, false, &name)) != HCOMM_OK)
        return st;
    if (sw[0] && t->cb->node &&
        (st = t->cb->node(t->cb->arg, name, sw, hc_topo_xml_where(t, e))) != HCOMM_OK)
        return st;
    for (const hc_xml_elem_t *c = e->child; c; c = c->next) {
        if (strcmp(c->name, "rank"))
            return hc_error(HCOMM_ERR_INVALID,
                            "%s: <%s> inside <node>: want <rank id=\"r\" [numa=\"k\"]/> "
                            "(HCOMM_TOPO_FILE, docs/topology.md)",
                            hc_topo_xml_where(t, c), c->name);
        if (c->child)
            return hc_error(HCOMM_ERR_INVALID,
                            "%s: <%s> inside <rank>: a <rank> holds no elements "
                            "(HCOMM_TOPO_FILE)",
                            hc_topo_xml_where(t, c->child), c->child->name);
        int r, numa = -1;
        if ((st = hc_topo_xml_only(t, c, rank_attrs, "id, numa")) != HCOMM_OK ||
            (st = hc_topo_xml_int(t, c, "id", 0, 1 << 24, &r)) != HCOMM_OK ||
            (hc_xml_attr(c, "numa") &&
             (st = hc_topo_xml_int(t, c, "numa", -1, 1 << 16, &numa)) != HCOMM_OK))
            return st;
        if (t->cb->rank &&
            (st = t->cb->rank(t->cb->arg, r, name, numa, hc_topo_xml_where(t, c))) != HCOMM_OK)
            return st;
    }
    return HCOMM_OK;
}

/* The <switch> and <node> elements inside parent, whose switch path is sw
 * (HC_TOPO_PATH_MAX bytes, restored on return). */
static hcomm_status_t hc_topo_xml_level(hc_topo_xml_t *t, const hc_xml_elem_t *parent, char *sw)
{
    static const char *const attrs[] = {"name", NULL};
    hcomm_status_t st = HCOMM_OK;
    for (const hc_xml_elem_t *e = parent->child; e && st == HCOMM_OK; e = e->next) {
        if (!strcmp(e->name, "node")) {
            st = hc_topo_xml_node(t, e, sw);
            continue;
        }
        if (strcmp(e->name, "switch"))
            return hc_error(HCOMM_ERR_INVALID,
                            "%s: unknown element <%s> inside <%s>: want <switch name=\"...\"> "
                            "or <node name=\"...\"> (HCOMM_TOPO_FILE, docs/topology.md)",
                            hc_topo_xml_where(t, e), e->name, parent->name);
        const char *name;
        if ((st = hc_topo_xml_only(t, e, attrs, "name")) != HCOMM_OK ||
            (st = hc_topo_xml_name(t, e, true, &name)) != HCOMM_OK)
            return st;
        size_t n = strlen(sw);
        if (n + (n > 0) + strlen(name) >= HC_TOPO_PATH_MAX)
            return hc_error(HCOMM_ERR_INVALID,
                            "%s: the switch path %s/%s is longer than %d characters "
                            "(HCOMM_TOPO_FILE)",
                            hc_topo_xml_where(t, e), sw, name, HC_TOPO_PATH_MAX - 1);
        size_t o = n;
        if (n) sw[o++] = '/';
        memcpy(sw + o, name, strlen(name) + 1); /* fits: checked above */
        st = hc_topo_xml_level(t, e, sw);
        sw[n] = '\0';
    }
    return st;
}

hcomm_status_t hc_topo_file_parse_xml(const char *path, const hc_topo_file_cb_t *cb)
{
    hc_xml_t *doc;
    const hc_xml_elem_t *root;
    hcomm_status_t st = hc_xml_read(path, &doc, &root);
    if (st != HCOMM_OK) return st;
    hc_topo_xml_t t = {.path = path, .cb = cb};
    if (!strcmp(root->name, "cluster")) {
        static const char *const attrs[] = {"version", NULL};
        const char *v = hc_xml_attr(root, "version");
        char sw[HC_TOPO_PATH_MAX] = "";
        if ((st = hc_topo_xml_only(&t, root, attrs, "version")) == HCOMM_OK && v && strcmp(v, "1"))
            st = hc_error(HCOMM_ERR_INVALID,
                          "%s: <cluster version=\"%s\">: this hcomm reads version 1",
                          hc_topo_xml_where(&t, root), v);
        if (st == HCOMM_OK) st = hc_topo_xml_level(&t, root, sw);
    } else if (!strcmp(root->name, "system")) {
        hc_topo_sys_t *sys = NULL;
        if ((st = hc_topo_sys_from_xml(path, root, &sys)) == HCOMM_OK && cb->system)
            st = cb->system(cb->arg, sys, hc_topo_xml_where(&t, root));
        hc_topo_sys_free(sys);
    } else if (!strcmp(root->name, "topology")) {
        st = hc_error(HCOMM_ERR_INVALID,
                      "%s: <topology> is hwloc's XML (lstopo), not a topology file: want "
                      "NCCL's <system> (NCCL_TOPO_FILE) or hcomm's <cluster> (docs/topology.md)",
                      hc_topo_xml_where(&t, root));
    } else {
        st = hc_error(
            HCOMM_ERR_INVALID,
            "%s: root element <%s>: want <cluster> (switches and ranks) or "
            "<system> (one node, NCCL_TOPO_FILE's format) (HCOMM_TOPO_FILE, docs/topology.md)",
            hc_topo_xml_where(&t, root), root->name);
    }
    hc_xml_free(doc);
    return st;
}

/* ---- the kind of a file, NCCL system files ------------------------------------------------ */

typedef struct {
    bool system_seen;
    hc_topo_sys_t *copy; /* hc_topo_sys_load's */
} hc_topo_kind_t;

static hcomm_status_t hc_topo_kind_system(void *arg, const hc_topo_sys_t *sys, const char *where)
{
    hc_topo_kind_t *k = arg;
    k->system_seen = true;
    if (!k->copy) return HCOMM_OK;
    (void)where;
    *k->copy = *sys;
    return HCOMM_OK;
}

hcomm_status_t hc_topo_file_kind(const char *path, hc_topo_file_kind_t *kind_p)
{
    bool xml;
    hcomm_status_t st = hc_topo_file_is_xml(path, &xml);
    if (st != HCOMM_OK) return st;
    if (!xml) {
        *kind_p = HC_TOPO_FILE_LINES;
        return HCOMM_OK;
    }
    hc_topo_kind_t k = {0};
    hc_topo_file_cb_t cb = {.system = hc_topo_kind_system, .arg = &k};
    if ((st = hc_topo_file_parse_xml(path, &cb)) != HCOMM_OK) return st;
    *kind_p = k.system_seen ? HC_TOPO_FILE_SYSTEM : HC_TOPO_FILE_CLUSTER;
    return HCOMM_OK;
}

hcomm_status_t hc_topo_sys_load(const char *path, hc_topo_sys_t **sys_p)
{
    bool xml;
    hcomm_status_t st = hc_topo_file_is_xml(path, &xml);
    if (st != HCOMM_OK) return st;
    if (!xml)
        return hc_error(HCOMM_ERR_INVALID,
                        "%s: not an NCCL <system> XML file (it is in the line format)", path);
    hc_topo_kind_t k = {.copy = calloc(1, sizeof(hc_topo_sys_t))};
    if (!k.copy) return hc_error(HCOMM_ERR_NO_MEMORY, "%s: NCCL <system>", path);
    hc_topo_file_cb_t cb = {.system = hc_topo_kind_system, .arg = &k};
    if ((st = hc_topo_file_parse_xml(path, &cb)) == HCOMM_OK && !k.system_seen)
        st = hc_error(HCOMM_ERR_INVALID,
                      "%s: not an NCCL <system> XML file (its root is <cluster>)", path);
    if (st != HCOMM_OK) {
        hc_topo_sys_free(k.copy);
        return st;
    }
    *sys_p = k.copy;
    return HCOMM_OK;
}

/* ---- writing <cluster> ------------------------------------------------------------------ */

/* s with XML's special characters as entities. */
static void hc_topo_xml_put(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '&':
            fputs("&amp;", f);
            break;
        case '<':
            fputs("&lt;", f);
            break;
        case '>':
            fputs("&gt;", f);
            break;
        case '"':
            fputs("&quot;", f);
            break;
        case '\'':
            fputs("&apos;", f);
            break;
        default:
            fputc(*s, f);
        }
    }
}

typedef struct {
    char name[HC_TOPO_PATH_MAX];
    int child, last, next; /* switches: the first child, the last, the next sibling; -1 none */
    int node, last_node; /* the first and last node directly under it (hc_topo_dump_t.next_node) */
} hc_topo_dump_sw_t;

typedef struct {
    const hc_topo_map_t *m;
    FILE *f;
    hc_topo_dump_sw_t *sw; /* sw[0]: the top (<cluster>) */
    int nsw;
    int *next_node; /* node -> the next node under the same switch */
    int *first_rank, *next_rank;
} hc_topo_dump_t;

static void hc_topo_dump_indent(FILE *f, int depth)
{
    for (int i = 0; i < depth; i++)
        fputs("  ", f);
}

static void hc_topo_dump_level(const hc_topo_dump_t *d, int s, int depth)
{
    for (int k = d->sw[s].node; k >= 0; k = d->next_node[k]) {
        hc_topo_dump_indent(d->f, depth);
        fputs("<node name=\"", d->f);
        hc_topo_xml_put(d->f, d->m->name[k]);
        fputs(d->first_rank[k] >= 0 ? "\">\n" : "\"/>\n", d->f);
        for (int r = d->first_rank[k]; r >= 0; r = d->next_rank[r]) {
            hc_topo_dump_indent(d->f, depth + 1);
            if (d->m->numa[r] >= 0)
                fprintf(d->f, "<rank id=\"%d\" numa=\"%d\"/>\n", r, d->m->numa[r]);
            else
                fprintf(d->f, "<rank id=\"%d\"/>\n", r);
        }
        if (d->first_rank[k] >= 0) {
            hc_topo_dump_indent(d->f, depth);
            fputs("</node>\n", d->f);
        }
    }
    for (int c = d->sw[s].child; c >= 0; c = d->sw[c].next) {
        hc_topo_dump_indent(d->f, depth);
        fputs("<switch name=\"", d->f);
        hc_topo_xml_put(d->f, d->sw[c].name);
        fputs("\">\n", d->f);
        hc_topo_dump_level(d, c, depth + 1);
        hc_topo_dump_indent(d->f, depth);
        fputs("</switch>\n", d->f);
    }
}

/* The switch under s named name[0..len), made when missing; -1: no memory. */
static int hc_topo_dump_child(hc_topo_dump_t *d, int *cap, int s, const char *name, size_t len)
{
    for (int c = d->sw[s].child; c >= 0; c = d->sw[c].next)
        if (strlen(d->sw[c].name) == len && !memcmp(d->sw[c].name, name, len)) return c;
    if (d->nsw == *cap) {
        int ncap = 2 * *cap;
        hc_topo_dump_sw_t *a = realloc(d->sw, sizeof(*a) * (size_t)ncap);
        if (!a) return -1;
        d->sw = a;
        *cap = ncap;
    }
    int c = d->nsw++;
    hc_topo_dump_sw_t *n = &d->sw[c];
    snprintf(n->name, sizeof(n->name), "%.*s", (int)len, name);
    n->child = n->last = n->next = n->node = n->last_node = -1;
    if (d->sw[s].last >= 0)
        d->sw[d->sw[s].last].next = c;
    else
        d->sw[s].child = c;
    d->sw[s].last = c;
    return c;
}

hcomm_status_t hc_topo_map_dump_xml(const hc_topo_map_t *m, FILE *f)
{
    hc_topo_dump_t d = {.m = m, .f = f};
    int cap = 64, nn = m->nnodes;
    hcomm_status_t st = HCOMM_OK;
    d.sw = malloc(sizeof(*d.sw) * (size_t)cap);
    d.next_node = malloc(sizeof(int) * (size_t)nn);
    d.first_rank = malloc(sizeof(int) * (size_t)nn);
    d.next_rank = malloc(sizeof(int) * (size_t)m->n);
    if (!d.sw || !d.next_node || !d.first_rank || !d.next_rank) {
        st = hc_error(HCOMM_ERR_NO_MEMORY, "topology dump of %d nodes", nn);
        goto out;
    }
    d.nsw = 1;
    d.sw[0] = (hc_topo_dump_sw_t){.child = -1, .last = -1, .next = -1, .node = -1, .last_node = -1};
    /* Ranks per node in ascending order: built from the highest down. */
    for (int k = 0; k < nn; k++)
        d.first_rank[k] = -1;
    for (int r = m->n - 1; r >= 0; r--) {
        d.next_rank[r] = d.first_rank[m->node[r]];
        d.first_rank[m->node[r]] = r;
    }
    for (int k = 0; k < nn && st == HCOMM_OK; k++) {
        int s = 0;
        for (const char *p = m->sw[k]; *p && s >= 0;) {
            size_t len = strcspn(p, "/");
            if (!len || strpbrk(m->sw[k], " \t#")) {
                st = hc_error(
                    HCOMM_ERR_INVALID,
                    "topology dump: node %s's switch path \"%s\" has an empty part or "
                    "a blank: XML cannot hold it (name a file without .xml: the line format)",
                    m->name[k], m->sw[k]);
                break;
            }
            s = hc_topo_dump_child(&d, &cap, s, p, len);
            p += len;
            if (*p == '/' && !p[1]) {
                st = hc_error(HCOMM_ERR_INVALID,
                              "topology dump: node %s's switch path \"%s\" ends in '/': XML "
                              "cannot hold it (name a file without .xml)",
                              m->name[k], m->sw[k]);
                break;
            }
            if (*p == '/') p++;
        }
        if (st != HCOMM_OK) break;
        if (s < 0) {
            st = hc_error(HCOMM_ERR_NO_MEMORY, "topology dump of %d nodes", nn);
            break;
        }
        d.next_node[k] = -1;
        if (d.sw[s].last_node >= 0)
            d.next_node[d.sw[s].last_node] = k;
        else
            d.sw[s].node = k;
        d.sw[s].last_node = k;
    }
    if (st != HCOMM_OK) goto out;
    fprintf(f,
            "<?xml version=\"1.0\"?>\n<!-- hcomm topology v1: %d ranks on %d nodes "
            "(docs/topology.md) -->\n"
            "<cluster version=\"1\">\n",
            m->n, nn);
    hc_topo_dump_level(&d, 0, 1);
    fputs("</cluster>\n", f);
    if (ferror(f)) st = hc_error(HCOMM_ERR_INVALID, "topology dump: write error");
out:
    free(d.sw);
    free(d.next_node);
    free(d.first_rank);
    free(d.next_rank);
    return st;
}

hcomm_status_t hc_topo_map_dump_path(const hc_topo_map_t *map, const char *path)
{
    size_t n = strlen(path);
    bool xml = n >= 4 && !strcasecmp(path + n - 4, ".xml");
    FILE *f = fopen(path, "w");
    if (!f)
        return hc_error_errno(HCOMM_ERR_INVALID, errno, "HCOMM_TOPO_DUMP_FILE: cannot write %s",
                              path);
    hcomm_status_t st = xml ? hc_topo_map_dump_xml(map, f) : hc_topo_map_dump(map, f);
    if (fclose(f) != 0 && st == HCOMM_OK)
        st = hc_error_errno(HCOMM_ERR_INVALID, errno, "HCOMM_TOPO_DUMP_FILE: writing %s", path);
    return st;
}
