/* scheduler/dra_int.h - DRA pods and the ResourceClaims that give them their
 * GPUs (dra.c): what cache.c calls when a node is rebuilt or capacity on it
 * is freed, and what the verbs ask of a DRA pod.
 *
 * DESIGN: the claims live beside the cache's own entries (a map of their
 * own, per-node lists of their own, struct egpu__sched_dra), so a node's or
 * a pod's entry is not made larger by them. cache.c calls the few hooks
 * below from its rebuild; dra.c calls nothing of cache.c but the placement
 * core through the cache's cluster. Every function here expects the caller
 * to hold the cache lock, except egpu__sched_dra_refs (no cache) and
 * egpu__sched_dra_free.
 */
#ifndef EGPU_SCHED_DRA_INT_H
#define EGPU_SCHED_DRA_INT_H

#include <jansson.h>

#include "egpu/scheduler.h"

struct egpu__sched_dra;

/* A DRA pod's spec.resourceClaims entries at most (the API's limit), plus
 * its extended-resource claim. */
#define EGPU__SCHED_DRA_REFS_MAX 33

/* The ResourceClaims of a DRA pod, by name, in its namespace. */
struct egpu__sched_dra_refs {
    size_t n;
    char names[EGPU__SCHED_DRA_REFS_MAX][EGPU_K8S_NAME_MAX];
};

/* The claims pod (a v1.Pod, borrowed) uses, into *out: for each
 * spec.resourceClaims[] entry its resourceClaimName, or for one made from a
 * resourceClaimTemplateName the resourceClaimName that
 * status.resourceClaimStatuses[] gives under the entry's name (an entry
 * there with no resourceClaimName: no claim is needed, none is listed), and
 * status.extendedResourceClaimStatus.resourceClaimName (DRAExtendedResource)
 * when set. Wire format: core/v1 PodSpec.ResourceClaims and PodStatus
 * (../shared/k8s-wire/dra/dra_notes.md section 5). Returns 0, -EAGAIN (a
 * template's claim is not made yet: no status entry names it; kube-scheduler
 * waits for it too), or EGPU_ESYNTAX / EGPU_ERANGE naming the field (not a
 * list, an entry with neither name, a name too long or with a NUL, more
 * than EGPU__SCHED_DRA_REFS_MAX). *out written only on success. */
int egpu__sched_dra_refs(const json_t *pod, struct egpu__sched_dra_refs *out,
                         struct egpu_error *err) EGPU_MUST_CHECK;

/* The request the placement core judges DRA pod pod by, into *req: the
 * pod's CPU and memory, and one container request per device of each
 * device request of its claims refs (in pod.ns) that are not allocated yet:
 * a share (cores 1..99 percent and its memory MiB), or k whole cards (cores
 * 100, count k). A share that names no memory consumes its card's whole
 * memory (the slice's default), which depends on the node: it asks 0 here
 * and whole_mem[i] is true for it (the caller sets the node's card memory).
 * An allocated claim adds nothing: it is held on its cards already. The
 * model mask is left 0. Returns 0, -EAGAIN (a claim is not in the cache yet:
 * its watch event has not come; the message names it), EGPU_ERANGE (a
 * claim's spec the extender cannot read, or more than EGPU_CONTAINERS_MAX
 * device requests), with err set. */
int egpu__sched_dra_request_locked(struct egpu_sched_cache *c, const struct egpu_sched_pod *pod,
                                   const struct egpu__sched_dra_refs *refs,
                                   struct egpu_pod_request *req,
                                   bool whole_mem[EGPU_CONTAINERS_MAX],
                                   struct egpu_error *err) EGPU_MUST_CHECK;

/* Node node is about to be rebuilt (removed from the core and added again):
 * the claims applied there are marked as held before and as not applied
 * (the removal releases them). */
void egpu__sched_dra_node_down(struct egpu_sched_cache *c, const char *node);
/* Apply node's claims that are not applied (with held_before, only those
 * held before the rebuild), oldest first; each waits while the node or a
 * card of its results is not in the core, and is an overfill (logged,
 * counted) when its cards lack the room. Also called when capacity on node
 * was freed. */
void egpu__sched_dra_node_up(struct egpu_sched_cache *c, const char *node, bool held_before);

/* How many ResourceClaims the cache holds. */
size_t egpu__sched_dra_count_locked(struct egpu_sched_cache *c);
/* For FGD's target workload built from the cache: one request per cached
 * claim that asks devices of this driver (its ask, no CPU or memory), into
 * out (room for max). Returns how many were written. */
size_t egpu__sched_dra_asks_locked(struct egpu_sched_cache *c, struct egpu_pod_request *out,
                                   size_t max);

/* Add the DRA claims' figures to *out (egpu_sched_cache_stats_locked). */
void egpu__sched_dra_stats_locked(struct egpu_sched_cache *c, struct egpu_sched_cache_stats *out);

/* Free what the cache's DRA part holds (NULL is a no-op); the core's
 * assignments go with the cluster. */
void egpu__sched_dra_free(struct egpu__sched_dra *d);

#endif /* EGPU_SCHED_DRA_INT_H */
