/*
 * Inside topo/: the topology file parser that the map loader (topo_map.c)
 * and this rank's switch lookup (topo.c) share.
 */
#ifndef HC_TOPO_INT_H
#define HC_TOPO_INT_H

#include "topo/topo.h"

/* One line of a topology file: a node with its switch path, or a rank's
 * placement (numa -1 when the line has none). */
typedef struct {
    hcomm_status_t (*node)(void *arg, const char *name, const char *sw, const char *where);
    hcomm_status_t (*rank)(void *arg, int rank, const char *node, int numa, const char *where);
    void *arg;
} hc_topo_file_cb_t;

/* Parses path line by line; errors (and the callbacks' `where`) say
 * "path:line". */
hcomm_status_t hc_topo_file_parse(const char *path, const hc_topo_file_cb_t *cb);

#endif /* HC_TOPO_INT_H */
