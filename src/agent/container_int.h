/* agent/container_int.h - one container's allocation (container.c), private
 * to src/agent: what any kubelet protocol does once it knows which
 * container of which pod is to run with which device IDs (the device
 * plugin's PreStartContainer and its mark after Allocate today; a DRA
 * kubelet plugin beside them later): read the pod's assignment, check the
 * IDs against it, write limits.json and vcuda.conf into the allocation dir
 * and mark the pod elasticgpu.io/allocated.
 *
 * Units: core in percent of one card, memory in MiB per card.
 */
#ifndef EGPU_AGENT_CONTAINER_INT_H
#define EGPU_AGENT_CONTAINER_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "egpu/api.h"
#include "egpu/kube.h"
#include "podresources_int.h"
#include "record_int.h"

/* One container of a pod, by name: the owner of some device IDs. */
struct egpu__container_ref {
    char ns[EGPU_K8S_NAME_MAX];
    char pod[EGPU_K8S_NAME_MAX];
    char container[EGPU_K8S_NAME_MAX];
};

/* What a container's allocation needs, and where the kubelet tells who
 * owns device IDs (PreStartContainer and the mark after Allocate ask it);
 * all borrowed. */
struct egpu__container_config {
    struct egpu_kube *kube;           /* API client */
    const char *node;                 /* this node (the host of the agent's events) */
    const char *pod_resources;        /* PodResources socket path */
    egpu__podres_list_fn podres_list; /* NULL: egpu__podres_list on pod_resources */
    const char *alloc_root;           /* allocation dirs go below it */
    unsigned ctx_extra_mib; /* vcuda.conf's EGPU_VCUDA_CONTEXT_EXTRA_MIB; 0: not written */
    /* held around each read-and-patch of elasticgpu.io/allocated (NULL: none) */
    pthread_mutex_t *allocated_lock;
};

/* The container of r (a PodResources List answer, the kubelet's own
 * record) holding every one of ids (n) as gpu-core devices, into *o.
 * Returns whether one does. */
bool egpu__container_owner(const V1__ListPodResourcesResponse *r, char *const *ids, size_t n,
                           struct egpu__container_ref *o);

/* Whether the device ID id is "<uuid>-<nn>" (a core ID of card uuid, as
 * egpu__plugin_device_id makes it); *slot gets nn (0..99) when it is. */
bool egpu__container_id_on_card(const char *id, const char *uuid, unsigned *slot);

/* The pod's (borrowed) elasticgpu.io/assigned decoded into *a. Returns 0,
 * -ENOENT (no such annotation) or EGPU_ESYNTAX with err. */
int egpu__container_assigned(const json_t *pod, struct egpu_assigned *a,
                             struct egpu_error *err) EGPU_MUST_CHECK;

/* The container named name in a (borrowed pointer into a), or NULL. */
const struct egpu_assigned_container *egpu__container_find(const struct egpu_assigned *a,
                                                           const char *name);

/* Whether the pod's (borrowed) elasticgpu.io/allocated holds container. */
bool egpu__container_is_allocated(const json_t *pod, const char *container);

/* Check ids (n) against o's container c of a: each ID on one of its cards,
 * core IDs per card. Returns 0, or -EINVAL with err "pod <ns>/<pod>
 * container <name> is assigned ... but the kubelet gave ..." naming both. */
int egpu__container_check_ids(const struct egpu__container_ref *o, const struct egpu_assigned *a,
                              const struct egpu_assigned_container *c, char *const *ids, size_t n,
                              struct egpu_error *err) EGPU_MUST_CHECK;

/* The core limit of o's container asking core percent of each card, into
 * *out: the pod's (borrowed) annotation elasticgpu.io/gpu-core-limit (an
 * integer, core..100), or core when absent. Returns 0, or -EINVAL with err
 * "pod <ns>/<pod>: ..." saying what is wrong. */
int egpu__container_core_limit(const json_t *pod, const struct egpu__container_ref *o,
                               unsigned core, unsigned *out,
                               struct egpu_error *err) EGPU_MUST_CHECK;

/* Write o's limits (container c of a; core_limit as egpu__container_core_limit
 * gives it) into the allocation dir of ids (n) below cfg->alloc_root, made
 * when missing: vcuda.conf, then limits.json, each atomically (a random
 * O_EXCL | O_NOFOLLOW temporary name, then renameat), in the dir opened as
 * a directory fd. The texts are made first: out of memory touches nothing.
 * When a write fails the dir is left as it was (a dir this call made is
 * removed). *dir (len bytes) gets the dir's path; once both files are
 * written *wrote (may be NULL; the caller's) gets what they say, for the
 * agent's record. Returns 0 or a negative code with err ("out of memory",
 * or the dir or file that failed and why). */
int egpu__container_write(const struct egpu__container_config *cfg,
                          const struct egpu__container_ref *o, const struct egpu_assigned *a,
                          const struct egpu_assigned_container *c, unsigned core_limit,
                          char *const *ids, size_t n, struct egpu__alloc_limits *wrote, char *dir,
                          size_t len, struct egpu_error *err) EGPU_MUST_CHECK;

/* Add o's container c of a to elasticgpu.io/allocated of its pod as the
 * pod is now (a GET, then a merge patch), under cfg->allocated_lock: two
 * marks at once never drop each other's container. *wrote says whether a
 * patch was needed (false when the container is there with the same
 * limits). Returns 0, or what egpu_kube_get or egpu_kube_patch returns
 * (-ENOMEM: out of memory), with err. */
int egpu__container_mark(const struct egpu__container_config *cfg,
                         const struct egpu__container_ref *o, const struct egpu_assigned *a,
                         const struct egpu_assigned_container *c, bool *wrote,
                         struct egpu_error *err) EGPU_MUST_CHECK;

#endif /* EGPU_AGENT_CONTAINER_INT_H */
