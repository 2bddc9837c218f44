/* agent/marker_int.h - elasticgpu.io/allocated right after Allocate
 * (marker.c), private to src/agent.
 */
#ifndef EGPU_AGENT_MARKER_INT_H
#define EGPU_AGENT_MARKER_INT_H

#include <stddef.h>

#include "container_int.h"

struct egpu__marker;

/* Counters for /metrics. */
struct egpu__marker_stats {
    unsigned long marked;  /* containers marked (or found marked) after Allocate */
    unsigned long gave_up; /* PodResources never showed the owner: left to PreStartContainer */
    unsigned long failed;  /* the owner was found but not marked (PreStartContainer decides) */
    unsigned long dropped; /* not queued: the queue was full */
};

/* Start the marker's thread; cfg is copied (its strings and lock are
 * borrowed and must outlive the marker). Returns 0, -ENOMEM or -EAGAIN. */
int egpu__marker_new(const struct egpu__container_config *cfg,
                     struct egpu__marker **out) EGPU_MUST_CHECK;

/* Stop the thread (a List in flight ends first) and free. NULL is a no-op. */
void egpu__marker_free(struct egpu__marker *m);

/* Queue the n IDs an Allocate just gave (copied): the thread marks their
 * owner allocated once PodResources shows it. Never blocks on I/O; a NULL
 * marker or a full queue leaves the mark to PreStartContainer. */
void egpu__marker_add(struct egpu__marker *m, char *const *ids, size_t n);

/* A copy of the counters (all 0 for NULL). */
void egpu__marker_stats(struct egpu__marker *m, struct egpu__marker_stats *out);

#endif /* EGPU_AGENT_MARKER_INT_H */
