/*
 * Point-to-point collective algorithms (any driver). Being written: until
 * then no p2p algorithm is offered and hc_coll_select reports
 * ERR_UNSUPPORTED for communicators without a node-shared region.
 */
#include "coll/coll.h"

hc_coll_step_fn hc_coll_net_select(hc_coll_op_t *op, const char *forced)
{
    (void)op;
    (void)forced;
    return NULL;
}
