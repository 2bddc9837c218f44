/* agent/prestart_int.h - PreStartContainer's API-server side (prestart.c),
 * private to src/agent: the owner of the kubelet's device IDs and the gRPC
 * answers around the shared part of a container's allocation
 * (container_int.h).
 */
#ifndef EGPU_AGENT_PRESTART_INT_H
#define EGPU_AGENT_PRESTART_INT_H

#include <stdbool.h>
#include <stddef.h>

#include "egpu/agent.h"
#include "egpu/grpc.h"
#include "egpu/kube.h"
#include "container_int.h"
#include "record_int.h"

#define EGPU_PRESTART_EVENT_REASON "AllocationMismatch" /* the pod's Warning event */

/* PreStartContainer with the API server: find the pod and container owning
 * ids (n) through PodResources List (cfg->podres_list on
 * cfg->pod_resources), read its assignment, check that the IDs lie on the
 * assigned card(s), write limits.json and vcuda.conf into the allocation
 * dir (egpu__container_write) and merge-patch elasticgpu.io/allocated on
 * the pod unless the mark after Allocate did (egpu__container_mark;
 * *marked, may be NULL: whether it patched). Returns 0, -ENOMEM (st left
 * alone), or a negative code with st set: FAILED_PRECONDITION for IDs on
 * other cards than assigned (nothing written) or an assignment or
 * gpu-core-limit that is missing or wrong, NOT_FOUND for IDs no container
 * owns or a pod gone, UNAVAILABLE when the kubelet or the API server
 * cannot be reached, INTERNAL for a malformed PodResources answer or an
 * allocation dir or file that cannot be written. On
 * IDs on other cards than assigned *mismatch (may be NULL) is set true and
 * a Warning event (reason EGPU_PRESTART_EVENT_REASON) is posted on the pod
 * (best effort: a failed POST is only logged). Once limits.json and
 * vcuda.conf are written, *wrote (may be NULL; the caller's) gets what they
 * say, for the agent's record, even when the pod's patch then fails;
 * otherwise *wrote is left as it was (the caller zeroes it). */
int egpu__prestart_run(const struct egpu__container_config *cfg, const struct egpu_gpu_info *cards,
                       size_t ncards, char *const *ids, size_t n, bool *mismatch, bool *marked,
                       struct egpu__alloc_limits *wrote,
                       struct egpu_grpc_status *st) EGPU_MUST_CHECK;

#endif /* EGPU_AGENT_PRESTART_INT_H */
