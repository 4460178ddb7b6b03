/*
 * A small, strict XML reader for topology files (docs/topology.md). It reads
 * a whole file into a tree of elements, each with its attributes and the
 * line it starts on, and accepts only what topology files need:
 *   - one root element, elements nested in it, self-closing tags;
 *   - attributes whose values are quoted ("..." or '...'), each name once
 *     per element; in values the five predefined entities (&lt; &gt; &amp;
 *     &quot; &apos;) and character references (&#65; &#x41;);
 *   - comments (<!-- ... -->, without "--" inside) and whitespace anywhere
 *     between tags; one <?xml ...?> declaration before the root.
 * Everything else (text between tags, CDATA, DOCTYPE, other processing
 * instructions, an end tag that does not match, anything after the root) is
 * an error naming file:line. Nothing in it is unbounded: the file's size,
 * the depth, the number of elements and of attributes per element, and the
 * length of names and values all have limits, each an error when exceeded.
 *
 * Memory: the elements and attributes live in two arrays sized once from an
 * upper bound (the file's count of '<' and '=' characters), the names and
 * decoded values in one arena no larger than twice the file; pointers into
 * them stay valid until hc_xml_free.
 */
#include "topo/topo_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct hc_xml {
    char *text; /* the file, NUL-terminated */
    size_t len;
    hc_xml_elem_t *elems;
    int nelems, elem_cap;
    hc_xml_attr_t *attrs;
    int nattrs, attr_cap;
    char *arena;
    size_t arena_used, arena_cap;
};

typedef struct {
    hc_xml_t *doc;
    const char *path;
    const char *p, *end;
    int line;
} hc_xml_parser_t;

static hcomm_status_t hc_xml_fail(const hc_xml_parser_t *x, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static hcomm_status_t hc_xml_fail(const hc_xml_parser_t *x, int line, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return hc_error(HCOMM_ERR_INVALID, "%s:%d: %s (HCOMM_TOPO_FILE, XML)", x->path, line, msg);
}

static bool hc_xml_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static bool hc_xml_name_start(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_' || c == ':';
}

static bool hc_xml_name_char(char c)
{
    return hc_xml_name_start(c) || (c >= '0' && c <= '9') || c == '-' || c == '.';
}

static bool hc_xml_at(const hc_xml_parser_t *x, const char *s)
{
    size_t n = strlen(s);
    return (size_t)(x->end - x->p) >= n && !memcmp(x->p, s, n);
}

/* Moves p forward by n characters, counting lines. */
static void hc_xml_skip(hc_xml_parser_t *x, size_t n)
{
    for (; n && x->p < x->end; n--, x->p++)
        if (*x->p == '\n') x->line++;
}

static void hc_xml_skip_space(hc_xml_parser_t *x)
{
    while (x->p < x->end && hc_xml_space(*x->p))
        hc_xml_skip(x, 1);
}

static char *hc_xml_arena(hc_xml_parser_t *x, size_t n)
{
    hc_xml_t *d = x->doc;
    if (d->arena_used + n > d->arena_cap) return NULL; /* cannot happen: sized from the file */
    char *s = d->arena + d->arena_used;
    d->arena_used += n;
    return s;
}

/* A name at p: letters, digits, _ : - . (not starting with a digit, - or .). */
static hcomm_status_t hc_xml_name(hc_xml_parser_t *x, const char *what, const char **out)
{
    const char *s = x->p;
    if (s == x->end || !hc_xml_name_start(*s))
        return hc_xml_fail(x, x->line, "want %s, found %s", what,
                           s == x->end ? "the end of the file"
                                       : "a character that cannot start a name");
    while (x->p < x->end && hc_xml_name_char(*x->p))
        x->p++;
    size_t n = (size_t)(x->p - s);
    if (n > HC_XML_MAX_NAME)
        return hc_xml_fail(x, x->line, "%s longer than %d characters", what, HC_XML_MAX_NAME);
    char *c = hc_xml_arena(x, n + 1);
    if (!c) return hc_error(HCOMM_ERR_INTERNAL, "%s: XML arena", x->path);
    memcpy(c, s, n);
    c[n] = '\0';
    *out = c;
    return HCOMM_OK;
}

/* An entity or character reference at p (just after '&'), appended to *o. */
static hcomm_status_t hc_xml_entity(hc_xml_parser_t *x, char **o)
{
    static const struct {
        const char *name;
        char c;
    } named[] = {{"lt;", '<'}, {"gt;", '>'}, {"amp;", '&'}, {"quot;", '"'}, {"apos;", '\''}};
    for (size_t i = 0; i < HC_ARRAY_SIZE(named); i++)
        if (hc_xml_at(x, named[i].name)) {
            *(*o)++ = named[i].c;
            x->p += strlen(named[i].name);
            return HCOMM_OK;
        }
    if (x->p < x->end && *x->p == '#') {
        bool hex = x->p + 1 < x->end && x->p[1] == 'x';
        const char *s = x->p + 1 + hex;
        unsigned long v = 0;
        int digits = 0;
        for (; s < x->end && digits < 8; s++, digits++) {
            int d = *s >= '0' && *s <= '9'          ? *s - '0'
                    : hex && *s >= 'a' && *s <= 'f' ? *s - 'a' + 10
                    : hex && *s >= 'A' && *s <= 'F' ? *s - 'A' + 10
                                                    : -1;
            if (d < 0) break;
            v = v * (hex ? 16 : 10) + (unsigned long)d;
        }
        if (digits && s < x->end && *s == ';' && v >= 1 && v <= 0x10ffff &&
            !(v >= 0xd800 && v <= 0xdfff)) {
            char *c = *o; /* UTF-8: never longer than the reference itself */
            if (v < 0x80) {
                *c++ = (char)v;
            } else if (v < 0x800) {
                *c++ = (char)(0xc0 | (v >> 6));
                *c++ = (char)(0x80 | (v & 0x3f));
            } else if (v < 0x10000) {
                *c++ = (char)(0xe0 | (v >> 12));
                *c++ = (char)(0x80 | ((v >> 6) & 0x3f));
                *c++ = (char)(0x80 | (v & 0x3f));
            } else {
                *c++ = (char)(0xf0 | (v >> 18));
                *c++ = (char)(0x80 | ((v >> 12) & 0x3f));
                *c++ = (char)(0x80 | ((v >> 6) & 0x3f));
                *c++ = (char)(0x80 | (v & 0x3f));
            }
            *o = c;
            x->p = s + 1;
            return HCOMM_OK;
        }
    }
    return hc_xml_fail(x, x->line,
                       "'&' starts no known entity: write &amp; for '&' (also &lt; &gt; "
                       "&quot; &apos; &#N; &#xH;)");
}

/* A quoted value at p, decoded. */
static hcomm_status_t hc_xml_value(hc_xml_parser_t *x, const char *attr, const char **out)
{
    if (x->p == x->end || (*x->p != '"' && *x->p != '\''))
        return hc_xml_fail(x, x->line, "attribute %s: want a quoted value (\"...\" or '...')",
                           attr);
    char q = *x->p++;
    int line0 = x->line;
    /* '<' cannot be in a value: the first one before the closing quote is
     * most likely a quote left out. (The text has no NUL: strcspn stays in
     * it.) */
    char stop[3] = {q, '<', '\0'};
    const char *close = x->p + strcspn(x->p, stop);
    if (close == x->end)
        return hc_xml_fail(x, line0, "attribute %s: its value has no closing %c", attr, q);
    if (*close == '<') {
        hc_xml_skip(x, (size_t)(close - x->p));
        return hc_xml_fail(x, line0,
                           "attribute %s: '<' in its value, on line %d (a closing %c missing? "
                           "write &lt; for '<')",
                           attr, x->line, q);
    }
    if (close - x->p > HC_XML_MAX_VALUE)
        return hc_xml_fail(x, line0, "attribute %s: value longer than %d characters", attr,
                           HC_XML_MAX_VALUE);
    char *v = hc_xml_arena(x, (size_t)(close - x->p) + 1), *o = v;
    if (!v) return hc_error(HCOMM_ERR_INTERNAL, "%s: XML arena", x->path);
    const char *end = x->end;
    x->end = close; /* entities end inside the value */
    hcomm_status_t st = HCOMM_OK;
    while (st == HCOMM_OK && x->p < close) {
        char c = *x->p;
        if (c == '&') {
            x->p++;
            st = hc_xml_entity(x, &o);
        } else {
            if (c == '\n') x->line++;
            *o++ = hc_xml_space(c) ? ' ' : c; /* XML normalizes whitespace in values */
            x->p++;
        }
    }
    x->end = end;
    if (st != HCOMM_OK) return st;
    *o = '\0';
    x->p++; /* the quote */
    *out = v;
    return HCOMM_OK;
}

/* <!-- ... --> at p. */
static hcomm_status_t hc_xml_comment(hc_xml_parser_t *x)
{
    int line0 = x->line;
    hc_xml_skip(x, 4);
    for (;;) {
        if (x->p >= x->end) return hc_xml_fail(x, line0, "comment <!-- not closed by -->");
        if (hc_xml_at(x, "--")) {
            if (hc_xml_at(x, "-->")) {
                hc_xml_skip(x, 3);
                return HCOMM_OK;
            }
            return hc_xml_fail(x, x->line,
                               "\"--\" inside a comment (XML allows it only in the closing -->)");
        }
        hc_xml_skip(x, 1);
    }
}

/* Comments and whitespace; anything else that is not an element stops it
 * with an error, an element ('<' and a name) or the end stops it quietly. */
static hcomm_status_t hc_xml_misc(hc_xml_parser_t *x, const char *where)
{
    for (;;) {
        hc_xml_skip_space(x);
        if (x->p >= x->end) return HCOMM_OK;
        if (hc_xml_at(x, "<!--")) {
            hcomm_status_t st = hc_xml_comment(x);
            if (st != HCOMM_OK) return st;
            continue;
        }
        if (hc_xml_at(x, "<!DOCTYPE"))
            return hc_xml_fail(x, x->line, "<!DOCTYPE ...> is not supported in a topology file");
        if (hc_xml_at(x, "<![CDATA["))
            return hc_xml_fail(x, x->line, "CDATA sections are not supported in a topology file");
        if (hc_xml_at(x, "<?"))
            return hc_xml_fail(x, x->line,
                               "a processing instruction (<?...?>) %s: only one <?xml ...?> "
                               "declaration, before the root element, is allowed",
                               where);
        if (*x->p != '<') {
            const char *s = x->p;
            size_t n = 0;
            while (s + n < x->end && n < 20 && s[n] != '<' && s[n] != '\n')
                n++;
            return hc_xml_fail(x, x->line,
                               "text \"%.*s\" %s: a topology file holds only elements, "
                               "attributes and comments",
                               (int)n, s, where);
        }
        return HCOMM_OK;
    }
}

static hc_xml_elem_t *hc_xml_new_elem(hc_xml_parser_t *x, hc_xml_elem_t *parent, int line)
{
    hc_xml_t *d = x->doc;
    if (d->nelems == d->elem_cap) return NULL;
    hc_xml_elem_t *e = &d->elems[d->nelems++];
    memset(e, 0, sizeof(*e));
    e->line = line;
    e->parent = parent;
    e->attrs = d->attrs + d->nattrs;
    if (parent) {
        if (parent->last_child)
            parent->last_child->next = e;
        else
            parent->child = e;
        parent->last_child = e;
    }
    return e;
}

/* An element at p ('<' and a name), with its content, to its end tag. The
 * nesting is followed with an explicit stack, not recursion. */
static hcomm_status_t hc_xml_element(hc_xml_parser_t *x, hc_xml_elem_t **root_p)
{
    hc_xml_elem_t *cur = NULL; /* the open element whose content is being read */
    int depth = 0;
    hcomm_status_t st;
    for (;;) {
        /* At '<': a start tag, or the end tag of cur. */
        if (cur && hc_xml_at(x, "</")) {
            int line = x->line;
            x->p += 2;
            const char *name;
            if ((st = hc_xml_name(x, "the element name of an end tag", &name)) != HCOMM_OK)
                return st;
            hc_xml_skip_space(x);
            if (x->p >= x->end || *x->p != '>')
                return hc_xml_fail(x, x->line, "end tag </%s: want '>'", name);
            x->p++;
            if (strcmp(name, cur->name))
                return hc_xml_fail(x, line, "end tag </%s> does not match <%s> of line %d", name,
                                   cur->name, cur->line);
            cur = cur->parent;
            depth--;
            if (!cur) return HCOMM_OK;
        } else {
            int line = x->line;
            x->p++; /* '<' */
            const char *name;
            if ((st = hc_xml_name(x, "an element name after '<'", &name)) != HCOMM_OK) return st;
            if (depth == HC_XML_MAX_DEPTH)
                return hc_xml_fail(x, line, "<%s> nested deeper than %d elements", name,
                                   HC_XML_MAX_DEPTH);
            hc_xml_elem_t *e = hc_xml_new_elem(x, cur, line);
            if (!e) return hc_xml_fail(x, line, "more than %d elements", HC_XML_MAX_ELEMS);
            e->name = name;
            if (!cur) *root_p = e;
            for (;;) {
                bool space = x->p < x->end && hc_xml_space(*x->p);
                hc_xml_skip_space(x);
                if (x->p >= x->end) return hc_xml_fail(x, line, "tag <%s not closed by '>'", name);
                if (*x->p == '>' || hc_xml_at(x, "/>")) break;
                if (!space)
                    return hc_xml_fail(x, x->line, "<%s: want a space, '>' or '/>' after %s", name,
                                       e->nattrs ? "an attribute" : "the element name");
                hc_xml_attr_t a;
                if ((st = hc_xml_name(x, "an attribute name", &a.name)) != HCOMM_OK) return st;
                hc_xml_skip_space(x);
                if (x->p >= x->end || *x->p != '=')
                    return hc_xml_fail(x, x->line, "<%s: attribute %s: want '=' and a quoted value",
                                       name, a.name);
                x->p++;
                hc_xml_skip_space(x);
                if ((st = hc_xml_value(x, a.name, &a.value)) != HCOMM_OK) return st;
                for (int i = 0; i < e->nattrs; i++)
                    if (!strcmp(e->attrs[i].name, a.name))
                        return hc_xml_fail(x, line, "<%s>: attribute %s given twice", name, a.name);
                if (e->nattrs == HC_XML_MAX_ATTRS)
                    return hc_xml_fail(x, line, "<%s>: more than %d attributes", name,
                                       HC_XML_MAX_ATTRS);
                if (x->doc->nattrs == x->doc->attr_cap)
                    return hc_error(HCOMM_ERR_INTERNAL, "%s: XML attribute table", x->path);
                x->doc->attrs[x->doc->nattrs++] = a;
                e->nattrs++;
            }
            if (*x->p == '/') {
                x->p += 2;
                if (!cur) return HCOMM_OK; /* a self-closing root */
            } else {
                x->p++;
                cur = e;
                depth++;
            }
        }
        if ((st = hc_xml_misc(x, "inside an element")) != HCOMM_OK) return st;
        if (x->p >= x->end)
            return hc_xml_fail(x, x->line, "the file ends inside <%s> of line %d (no </%s>)",
                               cur->name, cur->line, cur->name);
    }
}

static size_t hc_xml_count(const char *s, size_t n, char c)
{
    size_t k = 0;
    for (const char *e = s + n; (s = memchr(s, c, (size_t)(e - s))); s++)
        k++;
    return k;
}

void hc_xml_free(hc_xml_t *doc)
{
    if (!doc) return;
    free(doc->text);
    free(doc->elems);
    free(doc->attrs);
    free(doc->arena);
    free(doc);
}

/* Reads the whole file f into d->text (at most HC_XML_MAX_BYTES, no NUL
 * byte), NUL-terminated. */
static hcomm_status_t hc_xml_load(FILE *f, const char *path, hc_xml_t *d)
{
    for (size_t cap = 0; d->len <= HC_XML_MAX_BYTES;) {
        if (d->len == cap) {
            cap = HC_MIN(cap ? 2 * cap : (size_t)65536, (size_t)HC_XML_MAX_BYTES + 1);
            char *t = realloc(d->text, cap + 1);
            if (!t) return hc_error(HCOMM_ERR_NO_MEMORY, "%s: reading the XML file", path);
            d->text = t;
        }
        size_t got = fread(d->text + d->len, 1, cap - d->len, f);
        if (got == 0) break;
        d->len += got;
    }
    if (ferror(f))
        return hc_error_errno(HCOMM_ERR_INVALID, errno, "HCOMM_TOPO_FILE: reading %s", path);
    if (d->len > HC_XML_MAX_BYTES)
        return hc_error(HCOMM_ERR_INVALID, "%s: larger than %d bytes (HCOMM_TOPO_FILE, XML)", path,
                        HC_XML_MAX_BYTES);
    d->text[d->len] = '\0';
    if (memchr(d->text, '\0', d->len))
        return hc_error(HCOMM_ERR_INVALID, "%s: a NUL byte: not a text file (HCOMM_TOPO_FILE, XML)",
                        path);
    return HCOMM_OK;
}

/* The element, attribute and string tables, sized from the text: at most
 * one element per '<', one attribute per '=' (both capped), and the text's
 * strings twice over. */
static hcomm_status_t hc_xml_alloc(hc_xml_t *d, const char *path)
{
    size_t lt = hc_xml_count(d->text, d->len, '<'), eq = hc_xml_count(d->text, d->len, '=');
    d->elem_cap = (int)HC_MIN(lt, (size_t)HC_XML_MAX_ELEMS);
    d->attr_cap = (int)HC_MIN(eq, (size_t)HC_XML_MAX_ELEMS * HC_XML_MAX_ATTRS);
    d->arena_cap = 2 * d->len + 2;
    d->elems = malloc(sizeof(*d->elems) * (size_t)HC_MAX(d->elem_cap, 1));
    d->attrs = malloc(sizeof(*d->attrs) * (size_t)HC_MAX(d->attr_cap, 1));
    d->arena = malloc(d->arena_cap);
    if (!d->elems || !d->attrs || !d->arena)
        return hc_error(HCOMM_ERR_NO_MEMORY, "%s: parsing the XML file", path);
    return HCOMM_OK;
}

/* The document: an optional byte order mark and declaration, one root
 * element, comments and space around it. */
static hcomm_status_t hc_xml_document(hc_xml_t *d, const char *path, const hc_xml_elem_t **root_p)
{
    hcomm_status_t st;
    hc_xml_parser_t x = {.doc = d, .path = path, .p = d->text, .end = d->text + d->len, .line = 1};
    if (hc_xml_at(&x, "\xef\xbb\xbf")) x.p += 3; /* a UTF-8 byte order mark */
    hc_xml_skip_space(&x);
    if (hc_xml_at(&x, "<?xml") && x.p + 5 < x.end && hc_xml_space(x.p[5])) {
        int line = x.line;
        const char *q = strstr(x.p, "?>");
        if (!q) return hc_xml_fail(&x, line, "<?xml declaration not closed by ?>");
        hc_xml_skip(&x, (size_t)(q + 2 - x.p));
    }
    const hc_xml_elem_t *root = NULL;
    if ((st = hc_xml_misc(&x, "before the root element")) != HCOMM_OK) return st;
    if (x.p >= x.end) return hc_xml_fail(&x, x.line, "no root element");
    hc_xml_elem_t *r = NULL;
    if ((st = hc_xml_element(&x, &r)) != HCOMM_OK) return st;
    root = r;
    if ((st = hc_xml_misc(&x, "after the root element")) != HCOMM_OK) return st;
    if (x.p < x.end)
        return hc_xml_fail(
            &x, x.line, "%s after the root element <%s> of line %d ended: an XML file has one root",
            hc_xml_at(&x, "</") ? "an end tag" : "a second element", root->name, root->line);
    *root_p = root;
    return HCOMM_OK;
}

hcomm_status_t hc_xml_read(const char *path, hc_xml_t **doc_p, const hc_xml_elem_t **root_p)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return hc_error_errno(HCOMM_ERR_INVALID, errno, "HCOMM_TOPO_FILE: cannot open %s", path);
    hc_xml_t *d = calloc(1, sizeof(*d));
    const hc_xml_elem_t *root = NULL;
    hcomm_status_t st = HCOMM_OK;
    if (!d) {
        st = hc_error(HCOMM_ERR_NO_MEMORY, "%s: reading the XML file", path);
        goto close;
    }
    if ((st = hc_xml_load(f, path, d)) != HCOMM_OK || (st = hc_xml_alloc(d, path)) != HCOMM_OK ||
        (st = hc_xml_document(d, path, &root)) != HCOMM_OK)
        goto close;
    *doc_p = d;
    *root_p = root;
    fclose(f);
    return HCOMM_OK;
close:
    fclose(f);
    hc_xml_free(d);
    return st;
}

const char *hc_xml_attr(const hc_xml_elem_t *e, const char *name)
{
    for (int i = 0; i < e->nattrs; i++)
        if (!strcmp(e->attrs[i].name, name)) return e->attrs[i].value;
    return NULL;
}
