/* core/frag_int.h - fragmentation of a hypothetical node state (private).
 *
 * Placers evaluate "what if this pod went on card g": a view is a copy of the
 * few numbers fragmentation depends on, cheap to modify and to measure.
 */
#ifndef EGPU_CORE_FRAG_INT_H
#define EGPU_CORE_FRAG_INT_H

#include "egpu/core.h"

struct egpu__node_view {
    int64_t free_cpu_milli;
    uint16_t model;
    uint32_t ngpus;
    uint32_t free_milli[EGPU_NODE_GPUS_MAX]; /* free compute per card */
};

/* Fill v from node n's current state. */
void egpu__view_of(const struct egpu_node *n, struct egpu__node_view *v);

/* F(M) of the view, in milli-GPU (see egpu_frag_node). */
double egpu__frag_view(const struct egpu__node_view *v, const struct egpu_workload *w);

#endif /* EGPU_CORE_FRAG_INT_H */
