/* scheduler/plist_int.h - the HostPriorityList made last, kept to make the
 * next one from.
 *
 * Private to src/scheduler. Pod after pod, prioritize asks about the same
 * nodes with mostly the same scores: only the node that took the last pod
 * moved. Entries are found again by node (each name's node slot, valid
 * while the cluster's node-set stamp, never the same for two node sets,
 * is), so a list in another order (kube-scheduler's parallel filter lists
 * feasible nodes in the order its workers find them) is made from the last
 * one too. What it is worth: prioritize over 5,000 nodes in shuffled order
 * costs 0.36 ms at p50 with it and 0.65 ms without, and the
 * filter+prioritize pair 1.5-1.75 ms at p99 with it and 1.7-1.8 ms without,
 * against a target of 2 ms (bench_extender --one-core, on the 2-core
 * development VM; docs/scheduler.md).
 *
 * The text is always byte for byte what egpu__wire_priorities writes for the
 * same names and scores: every byte comes from yajl_gen. An entry is copied
 * only into the same state it was made in (the first entry of the list, or
 * one after another, with its separator); anything else is encoded again by
 * a generator brought to that state.
 */
#ifndef EGPU_SCHED_PLIST_INT_H
#define EGPU_SCHED_PLIST_INT_H

#include <stddef.h>
#include <stdint.h>

#include "egpu/core.h"

struct egpu__plist {
    struct egpu_buf text; /* the list, "" when none was made */
    size_t n;             /* names */
    uint8_t *score;       /* n scores, 0..10 (0 = left out) */
    size_t *at;           /* n + 1: entry i is text[at[i], at[i + 1]), empty at score 0 */
    uint64_t members;     /* the node-set stamp of the slots it was made with; 0 = none */
    uint32_t *by_slot;    /* nby: position of the entry for the node in slot s */
    size_t nby;
};

/* An empty list. Free with egpu__plist_free. */
void egpu__plist_init(struct egpu__plist *pl);
void egpu__plist_free(struct egpu__plist *pl);

/* Make pl->text the HostPriorityList for names[0..n) (NUL-terminated) with
 * score[0..n) (0..10; 0 = left out). slots gives each name's node slot
 * (EGPU_NO_SLOT for none) in the cluster whose node-set stamp is members:
 * entries are found again by node, in any order, while the stamp is the
 * same. Returns 1 (made from the last list), 0 (encoded in full), -ENOMEM
 * or -EMSGSIZE (past 64 MiB); on error pl is empty. */
int egpu__plist_set(struct egpu__plist *pl, const char *const *names, const uint32_t *slots,
                    uint64_t members, const uint8_t *score, size_t n) EGPU_MUST_CHECK;

#endif /* EGPU_SCHED_PLIST_INT_H */
