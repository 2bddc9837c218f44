/* agent/podresources_int.h - the kubelet's PodResources List
 * (podresources.c), private to src/agent: who holds which device IDs, as
 * the kubelet itself records it. Used by PreStartContainer and the mark
 * after Allocate (the owner of IDs) and by the cleanup (the dirs still
 * held); a DRA kubelet plugin would ask the same.
 */
#ifndef EGPU_AGENT_PODRESOURCES_INT_H
#define EGPU_AGENT_PODRESOURCES_INT_H

#include "egpu/core.h"
#include "podresources/v1/api.pb-c.h"

/* A PodResources List: the shape of egpu__podres_list, so a caller's
 * configuration can name another (a unit test's answer without a kubelet).
 * On 0 *out is an answer unpacked with egpu__pb_allocator (pb_int.h), freed
 * by the caller with v1__list_pod_resources_response__free_unpacked. */
typedef int (*egpu__podres_list_fn)(const char *socket, V1__ListPodResourcesResponse **out,
                                    struct egpu_error *err);

/* PodResources List on socket (a unix socket path; RESOURCE_EXHAUSTED, the
 * kubelet's rate limit, retried twice, 200 ms apart; 5 s per call): the
 * unpacked answer in *out (free with
 * v1__list_pod_resources_response__free_unpacked and egpu__pb_allocator).
 * Returns 0, what egpu_grpc_call returns (-EAGAIN: nobody listens), or
 * -EPROTO (malformed reply), with err set. */
int egpu__podres_list(const char *socket, V1__ListPodResourcesResponse **out,
                      struct egpu_error *err) EGPU_MUST_CHECK;

#endif /* EGPU_AGENT_PODRESOURCES_INT_H */
