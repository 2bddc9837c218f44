/* scheduler/replies_int.h - the filter reply encoded last, given again when
 * the same node list gets the same verdicts.
 *
 * Private to src/scheduler. While the cluster does not change where it
 * matters, kube-scheduler's filter calls for one pod after another (the
 * replicas of a Deployment, a pod retried) name the same nodes and get the
 * same answer: ~85 KB of NodeNames for 5,000 nodes, 0.16 ms of yajl_gen. The
 * text is a function of its inputs (the names, and for each node passing or
 * the refusal text), so the reply made last is kept with them and copied
 * when they are the same. Thread-safe.
 */
#ifndef EGPU_SCHED_REPLIES_INT_H
#define EGPU_SCHED_REPLIES_INT_H

#include "wire_int.h"

struct egpu__replies;

/* A new empty memo, or NULL when out of memory. */
struct egpu__replies *egpu__replies_new(void);
/* Free the memo. NULL is a no-op. */
void egpu__replies_free(struct egpu__replies *m);

/* egpu__wire_filter_result(reply, a, why), from the kept text when a names
 * the same shared list (a->list) as the reply kept and why[] says the same
 * (NULL, or an equal text, for every node); otherwise encoded and kept in
 * place of the last (only replies for a whole shared list in the NodeNames
 * form are kept). m may be NULL (always encoded). Same returns as
 * egpu__wire_filter_result. */
int egpu__replies_filter(struct egpu__replies *m, struct egpu_buf *reply,
                         const struct egpu__wire_args *a, const char *const *why) EGPU_MUST_CHECK;

#endif /* EGPU_SCHED_REPLIES_INT_H */
