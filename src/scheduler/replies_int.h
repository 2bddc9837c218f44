/* scheduler/replies_int.h - the filter reply made last, given again or
 * made from.
 *
 * Private to src/scheduler. For one pod after another kube-scheduler's
 * filter calls name the same nodes (in the same order for a pod retried,
 * in the order its parallel filter found them otherwise) and mostly get
 * the same answer: ~85 KB of NodeNames for 5,000 nodes, 0.16 ms of
 * yajl_gen. The reply made last is kept with what it was made of (the
 * names, each node's verdict and refusal text, each node's slot and where
 * its NodeNames entry lies). The same shared list with the same verdicts
 * gets the kept text; the same nodes in any order get a reply whose
 * entries are copied from the kept one, node by node, where they were made
 * in the same state (first of the array or not), with the rest made by
 * yajl_gen in that state: byte for byte what egpu__wire_filter_result
 * writes. Thread-safe.
 */
#ifndef EGPU_SCHED_REPLIES_INT_H
#define EGPU_SCHED_REPLIES_INT_H

#include "wire_int.h"

struct egpu__replies;

/* A new empty memo, or NULL when out of memory. */
struct egpu__replies *egpu__replies_new(void);
/* Free the memo. NULL is a no-op. */
void egpu__replies_free(struct egpu__replies *m);
/* Replies given from the kept one (its text, or made from it) so far. */
uint64_t egpu__replies_given(struct egpu__replies *m);

/* egpu__wire_filter_result(reply, a, why), from the kept reply: its text
 * when a names the same shared list (a->list) and why[] says the same
 * (NULL, or an equal text, for every node); made from it when slots (may
 * be NULL: a's node slots, EGPU_NO_SLOT for none, in the cluster whose
 * node-set stamp is members) find most of a's passing nodes in it;
 * otherwise encoded in full. The reply is then kept in place of the last
 * (NodeNames form only). m may be NULL, or busy with another call: the
 * reply is then encoded in full. Same returns as egpu__wire_filter_result. */
int egpu__replies_filter(struct egpu__replies *m, struct egpu_buf *reply,
                         const struct egpu__wire_args *a, const char *const *why,
                         const uint32_t *slots, uint64_t members) EGPU_MUST_CHECK;

#endif /* EGPU_SCHED_REPLIES_INT_H */
