/*
 * The topology file (docs/topology.md), in lines:
 *     # comment
 *     node <name> switch <path>
 *     rank <r> node <name> [numa <k>]
 * or, when its first non-blank character is '<', in XML (topo_file_xml.c).
 */
#include "topo/topo_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static bool hc_topo_int(const char *s, long lo, long hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return false;
    *out = (int)v;
    return true;
}

static hcomm_status_t hc_topo_file_line(char *line, const char *where, const hc_topo_file_cb_t *cb)
{
    char *hash = strchr(line, '#');
    if (hash) *hash = '\0';
    char *w[8];
    int nw = 0;
    for (char *save = NULL, *t = strtok_r(line, " \t\r\n", &save); t; t = strtok_r(NULL, " \t\r\n", &save)) {
        if (nw == (int)HC_ARRAY_SIZE(w))
            return hc_error(HCOMM_ERR_INVALID, "%s: too many words (HCOMM_TOPO_FILE)", where);
        w[nw++] = t;
    }
    if (nw == 0) return HCOMM_OK;
    if (!strcmp(w[0], "node")) {
        if (nw != 4 || strcmp(w[2], "switch"))
            return hc_error(HCOMM_ERR_INVALID, "%s: want \"node <name> switch <path>\" (HCOMM_TOPO_FILE)",
                            where);
        if (strlen(w[1]) >= HC_TOPO_NAME_MAX || strlen(w[3]) >= HC_TOPO_PATH_MAX)
            return hc_error(HCOMM_ERR_INVALID, "%s: a node name is at most %d characters, a switch "
                            "path at most %d (HCOMM_TOPO_FILE)", where, HC_TOPO_NAME_MAX - 1,
                            HC_TOPO_PATH_MAX - 1);
        return cb->node ? cb->node(cb->arg, w[1], w[3], where) : HCOMM_OK;
    }
    if (!strcmp(w[0], "rank")) {
        int r, numa = -1;
        if ((nw != 4 && nw != 6) || strcmp(w[2], "node") || !hc_topo_int(w[1], 0, 1 << 24, &r) ||
            (nw == 6 && (strcmp(w[4], "numa") || !hc_topo_int(w[5], -1, 1 << 16, &numa))))
            return hc_error(HCOMM_ERR_INVALID,
                            "%s: want \"rank <r> node <name> [numa <k>]\" (HCOMM_TOPO_FILE)", where);
        if (strlen(w[3]) >= HC_TOPO_NAME_MAX)
            return hc_error(HCOMM_ERR_INVALID, "%s: node name longer than %d characters", where,
                            HC_TOPO_NAME_MAX - 1);
        return cb->rank ? cb->rank(cb->arg, r, w[3], numa, where) : HCOMM_OK;
    }
    return hc_error(HCOMM_ERR_INVALID, "%s: unknown line \"%s ...\": want node or rank lines "
                    "(HCOMM_TOPO_FILE, docs/topology.md)", where, w[0]);
}

hcomm_status_t hc_topo_file_is_xml(const char *path, bool *xml_p)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return hc_error_errno(HCOMM_ERR_INVALID, errno, "HCOMM_TOPO_FILE: cannot open %s", path);
    int c = fgetc(f);
    if (c == 0xef) /* a UTF-8 byte order mark */
        c = fgetc(f) == 0xbb && fgetc(f) == 0xbf ? fgetc(f) : 0;
    while (c == ' ' || c == '\t' || c == '\r' || c == '\n')
        c = fgetc(f);
    bool err = ferror(f);
    fclose(f);
    if (err) return hc_error_errno(HCOMM_ERR_INVALID, errno, "HCOMM_TOPO_FILE: reading %s", path);
    *xml_p = c == '<';
    return HCOMM_OK;
}

hcomm_status_t hc_topo_file_parse(const char *path, const hc_topo_file_cb_t *cb)
{
    bool xml;
    hcomm_status_t st = hc_topo_file_is_xml(path, &xml);
    if (st != HCOMM_OK) return st;
    if (xml) return hc_topo_file_parse_xml(path, cb);
    FILE *f = fopen(path, "r");
    if (!f)
        return hc_error_errno(HCOMM_ERR_INVALID, errno, "HCOMM_TOPO_FILE: cannot open %s", path);
    char line[1024], where[600];
    for (int no = 1; st == HCOMM_OK && fgets(line, sizeof(line), f); no++) {
        snprintf(where, sizeof(where), "%s:%d", path, no);
        if (!strchr(line, '\n') && !feof(f))
            st = hc_error(HCOMM_ERR_INVALID, "%s: line longer than %zu characters", where,
                          sizeof(line) - 2);
        else
            st = hc_topo_file_line(line, where, cb);
    }
    if (st == HCOMM_OK && ferror(f))
        st = hc_error_errno(HCOMM_ERR_INVALID, errno, "HCOMM_TOPO_FILE: reading %s", path);
    fclose(f);
    return st;
}
