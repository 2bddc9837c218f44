/* scheduler/slots_int.h - node name to cluster slot, in dense memory, for
 * the names of one request (src/scheduler/slots.c).
 *
 * Private to src/scheduler. filter and prioritize look up every node name
 * kube-scheduler sends (65,000 of them at the largest clusters). The
 * cluster's own map (egpu_cluster_nodes) finds the node record, whose name
 * it compares and whose slot the verbs then read: three cache and TLB
 * misses a name into records spread over gigabytes. This index holds, for
 * one node set (the cluster's id and node-set stamp, never the same for two
 * node sets), a table of (hash, slot, name) with the names one after
 * another in one pool: 16 bytes a table entry at half load and the names'
 * bytes, about 3 MiB at 65,000 nodes. It is made again, from the cluster's
 * nodes, on the first look-up after a node was added or removed; between
 * those it answers exactly as egpu_cluster_nodes would (a name of no node:
 * EGPU_NO_SLOT).
 */
#ifndef EGPU_SCHED_SLOTS_INT_H
#define EGPU_SCHED_SLOTS_INT_H

#include <stddef.h>
#include <stdint.h>

#include "egpu/core.h"

struct egpu__slot_entry {
    uint32_t tag;  /* the hash's high 32 bits */
    uint32_t slot; /* EGPU_NO_SLOT: empty */
    uint32_t name; /* offset of the NUL-terminated name in pool */
    uint32_t spare;
};

struct egpu__slot_index {
    uint64_t cluster; /* the cluster id it was made for; 0 = none */
    uint64_t members; /* and its node-set stamp */
    struct egpu__slot_entry *tab;
    size_t mask; /* table entries - 1 (a power of two minus one) */
    char *pool;  /* the names */
};

/* An empty index (no allocation). Free with egpu__slot_index_free. */
void egpu__slot_index_init(struct egpu__slot_index *ix);
void egpu__slot_index_free(struct egpu__slot_index *ix);

/* slots[i] = the slot of the node of c named names[i] (NUL-terminated), or
 * EGPU_NO_SLOT, for i < n, making ix again first when c's node set is not
 * the one it was made for (caller holds whatever guards c and ix). Returns
 * 0, or -ENOMEM (ix is then empty, slots untouched). */
int egpu__slot_index_lookup(struct egpu__slot_index *ix, const struct egpu_cluster *c,
                            const char *const *names, size_t n, uint32_t *slots) EGPU_MUST_CHECK;

#endif /* EGPU_SCHED_SLOTS_INT_H */
