/* agent/prestart_int.h - the API-server side of the device plugin
 * (prestart.c), private to src/agent: steering GetPreferredAllocation to the
 * card(s) the scheduler assigned, and writing a container's limits before it
 * starts (PreStartContainer).
 */
#ifndef EGPU_AGENT_PRESTART_INT_H
#define EGPU_AGENT_PRESTART_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "egpu/agent.h"
#include "egpu/grpc.h"
#include "egpu/kube.h"
#include "podresources_int.h"
#include "record_int.h"

/* What PreStartContainer needs; all borrowed. */
struct egpu_prestart_config {
    struct egpu_kube *kube;           /* API client */
    const char *node;                 /* this node */
    const char *pod_resources;        /* PodResources socket path */
    egpu__podres_list_fn podres_list; /* NULL: egpu__podres_list on pod_resources */
    const char *alloc_root;           /* allocation dirs go below it */
    unsigned ctx_extra_mib; /* vcuda.conf's EGPU_VCUDA_CONTEXT_EXTRA_MIB; 0: not written */
    /* held around each read-and-patch of elasticgpu.io/allocated (NULL: none) */
    pthread_mutex_t *allocated_lock;
};

#define EGPU_PRESTART_EVENT_REASON "AllocationMismatch" /* the pod's Warning event */

/* GetPreferredAllocation with the API server: find the pending pod on node
 * whose container was assigned exactly size IDs' worth (core * cards ==
 * size) and is not allocated yet, and pick size IDs of avail (n) on its
 * card(s), must (nmust) first, into out (room for size; borrowed pointers
 * into avail/must). Returns how many it picked: size, or 0 when no pod
 * matches or its cards lack room (the caller then chooses by itself). */
size_t egpu__prestart_prefer(struct egpu_kube *kube, const char *node,
                             const struct egpu_gpu_info *cards, size_t ncards, char *const *avail,
                             size_t n, char *const *must, size_t nmust, size_t size, char **out);

/* PreStartContainer with the API server: find the pod and container owning
 * ids (n) through PodResources List, read its assignment, check that the IDs
 * lie on the assigned card(s), write limits.json into the allocation dir
 * (atomically) and merge-patch elasticgpu.io/allocated on the pod unless the
 * mark after Allocate did (*marked, may be NULL: whether it patched). Returns 0
 * or a negative code with st set: FAILED_PRECONDITION for IDs on other cards
 * than assigned (nothing written), NOT_FOUND for IDs no container owns,
 * UNAVAILABLE when the kubelet or the API server cannot be reached. On
 * IDs on other cards than assigned *mismatch (may be NULL) is set true and
 * a Warning event (reason EGPU_PRESTART_EVENT_REASON) is posted on the pod
 * (best effort: a failed POST is only logged). Once limits.json and
 * vcuda.conf are written, *wrote (may be NULL; the caller's) gets what they
 * say, for the agent's record, even when the pod's patch then fails;
 * otherwise *wrote is left as it was (the caller zeroes it). */
int egpu__prestart_run(const struct egpu_prestart_config *cfg, const struct egpu_gpu_info *cards,
                       size_t ncards, char *const *ids, size_t n, bool *mismatch, bool *marked,
                       struct egpu__alloc_limits *wrote,
                       struct egpu_grpc_status *st) EGPU_MUST_CHECK;

/* The mark right after Allocate (marker.c): when a container of r (a
 * PodResources List answer, the kubelet's own record) holds every one of
 * ids (n), read its pod's assignment and, when PreStartContainer would
 * accept the IDs (on the assigned card(s), core per card, a usable
 * gpu-core-limit), add the container to elasticgpu.io/allocated as
 * PreStartContainer does. Nothing a tenant writes is believed: the owner
 * comes from the kubelet, the assignment from the annotation only the
 * scheduler may write. Returns 1 (marked, or marked already), 0 (no
 * container of r holds the IDs yet) or a negative code with err (not
 * marked: PreStartContainer decides). */
int egpu__prestart_mark(const struct egpu_prestart_config *cfg,
                        const V1__ListPodResourcesResponse *r, char *const *ids, size_t n,
                        struct egpu_error *err) EGPU_MUST_CHECK;

#endif /* EGPU_AGENT_PRESTART_INT_H */
