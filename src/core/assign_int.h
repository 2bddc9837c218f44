/* core/assign_int.h - assignment internals shared by cluster.c and assign.c. */
#ifndef EGPU_CORE_ASSIGN_INT_H
#define EGPU_CORE_ASSIGN_INT_H

#include "egpu/core.h"

/* Undo assignment a on its node (card totals, CPU, memory), unlink it from
 * the node and the pod index, and free it. a must be live in c. */
void egpu__assignment_drop(struct egpu_cluster *c, struct egpu_assignment *a);

/* Does pick of request r fit node's current state? On false, why (if not
 * NULL) gets one line naming the first problem. */
bool egpu__pick_fits(const struct egpu_node *node, const struct egpu_pod_request *r,
                     const struct egpu_pick *pick, char *why, size_t why_len);

/* Give node n (in slot n->slot of c) a new generation, in the node and in
 * c->gens: every change to a node or its slot goes through here, so per-node
 * caches keyed by generation never match a node that changed. */
static inline void egpu__node_touch(struct egpu_cluster *c, struct egpu_node *n)
{
    n->gen = ++c->gen;
    c->gens[n->slot] = n->gen;
}

#endif /* EGPU_CORE_ASSIGN_INT_H */
