/*
 * Inside topo/: the topology file parser that the map loader (topo_map.c)
 * and this rank's switch lookup (topo.c) share.
 */
#ifndef HC_TOPO_INT_H
#define HC_TOPO_INT_H

#include "topo/topo.h"

/* What a topology file says, in either form: a node with its switch path
 * (a line, or a <node> inside <switch> elements), a rank's placement (numa
 * -1 when it has none), or one node's internals (NCCL's <system>). A NULL
 * callback ignores what it would be given. */
typedef struct {
    hcomm_status_t (*node)(void *arg, const char *name, const char *sw, const char *where);
    hcomm_status_t (*rank)(void *arg, int rank, const char *node, int numa, const char *where);
    hcomm_status_t (*system)(void *arg, const hc_topo_sys_t *sys, const char *where);
    void *arg;
} hc_topo_file_cb_t;

/* Parses path: XML when its first non-blank character is '<'
 * (topo_file_xml.c), else line by line; errors (and the callbacks' `where`)
 * say "path:line". */
hcomm_status_t hc_topo_file_parse(const char *path, const hc_topo_file_cb_t *cb);
hcomm_status_t hc_topo_file_parse_xml(const char *path, const hc_topo_file_cb_t *cb);
/* The first non-blank character of path is '<' (a UTF-8 byte order mark
 * counts as blank). Errors: the file cannot be read. */
hcomm_status_t hc_topo_file_is_xml(const char *path, bool *xml_p);

/* ---- the XML reader (topo_xml.c) ------------------------------------------------------------ */

#define HC_XML_MAX_BYTES (16 << 20)
#define HC_XML_MAX_DEPTH 64
#define HC_XML_MAX_ELEMS (1 << 20)
#define HC_XML_MAX_ATTRS 32 /* per element */
#define HC_XML_MAX_NAME 64  /* element and attribute names */
#define HC_XML_MAX_VALUE 4096

typedef struct {
    const char *name, *value; /* value decoded: entities replaced */
} hc_xml_attr_t;

typedef struct hc_xml_elem {
    const char *name;
    int line; /* of its '<' */
    int nattrs;
    const hc_xml_attr_t *attrs;
    struct hc_xml_elem *parent, *child, *last_child, *next; /* child: the first; next: sibling */
} hc_xml_elem_t;

typedef struct hc_xml hc_xml_t;

/* Reads and parses path (the module comment of topo_xml.c says what is
 * accepted); *root_p points into *doc_p, which hc_xml_free releases.
 * Errors: ERR_INVALID naming "path:line" and what is wrong. */
hcomm_status_t hc_xml_read(const char *path, hc_xml_t **doc_p, const hc_xml_elem_t **root_p);
void hc_xml_free(hc_xml_t *doc);
/* The value of attribute name of e, NULL when e has none. */
const char *hc_xml_attr(const hc_xml_elem_t *e, const char *name);

/* What hcomm reads of NCCL's <system> element root of path (topo_sys.c). */
hcomm_status_t hc_topo_sys_from_xml(const char *path, const hc_xml_elem_t *root,
                                    hc_topo_sys_t **sys_p);

#endif /* HC_TOPO_INT_H */
