/* scheduler/ahead_int.h - the HostPriorityList of the prioritize call that
 * follows a filter, encoded ahead on another thread.
 *
 * kube-scheduler calls filter, then (after its own score plugins) prioritize
 * with exactly the nodes that passed, in filter's order. Filter already knows
 * every one of their scores, so it posts them here and a worker thread
 * encodes the reply while filter's own reply goes out; prioritize then finds
 * it ready (or waits for the rest) instead of encoding thousands of entries
 * itself. A post is identified by a token (the filter's sequence number);
 * the reply is handed out only for that token and exactly the posted names,
 * so it is never given for another request.
 */
#ifndef EGPU_SCHED_AHEAD_INT_H
#define EGPU_SCHED_AHEAD_INT_H

#include <stddef.h>
#include <stdint.h>

#include "egpu/core.h"

struct egpu__ahead;

/* Start the worker thread. Returns NULL when out of memory or when the
 * thread cannot be created (the caller then encodes every reply itself). */
struct egpu__ahead *egpu__ahead_new(void);
/* Stop and join the worker and free everything. NULL is a no-op. */
void egpu__ahead_free(struct egpu__ahead *ah);

/* Hand the worker n names (NUL-terminated, copied) with their scores
 * (0..10, copied) for the filter call token. Replaces whatever was posted
 * before; a reply being encoded for an older token is dropped when done.
 * Returns 0 or -ENOMEM (then nothing is posted). */
int egpu__ahead_post(struct egpu__ahead *ah, uint64_t token, const char *const *names,
                     const uint8_t *scores, size_t n) EGPU_MUST_CHECK;

/* When the last post was for token and named exactly names[0..n) in order,
 * wait until its reply is encoded and append it to reply: returns 1. Returns
 * 0 when it does not match (nothing appended: encode the reply yourself), or
 * -EMSGSIZE / -ENOMEM from the append or the encoding. */
int egpu__ahead_take(struct egpu__ahead *ah, uint64_t token, const char *const *names, size_t n,
                     struct egpu_buf *reply);

#endif
