/* egpu/scheduler.h - egpu-scheduler: the kube-scheduler HTTP extender.
 *
 * The extender keeps a cache of every GPU's capacity and allocations (built
 * from Node, GPU and Pod objects by list+watch), answers kube-scheduler's
 * filter, prioritize and bind calls (extender v1 JSON, kube-scheduler's
 * extender/v1/types.go; see shared/k8s-wire/scheduler_extender_notes.md) with
 * the placement core, and records each decision on the pod in the
 * elasticgpu.io/assigned annotation before it POSTs the Binding. With --dra
 * it also follows ResourceClaims (resource.k8s.io/v1): a DRA pod (the
 * marker EGPU_RES_DRA on a container) is judged by its claims' ask against
 * the cards' use, allocated claims included, and bound with the Binding
 * alone (kube-scheduler's allocator chose its cards; dra.c).
 *
 * Units: GPU core in percent of one card (elasticgpu.io/gpu-core), GPU memory
 * in MiB per card (elasticgpu.io/gpu-memory), CPU in millicores, memory MiB.
 */
#ifndef EGPU_SCHEDULER_H
#define EGPU_SCHEDULER_H

#include <jansson.h>
#include <pthread.h>

#include "egpu/api.h"
#include "egpu/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* A pod's elasticgpu.io/assigned as the cache keeps it                     */
/* (src/scheduler/assigned.c)                                               */

/* One container of the record: its name, at the record's byte offset name,
 * and its cards, uuids first_card .. first_card + ncards (egpu_assigned_
 * container's fields). */
struct egpu_sched_assigned_container {
    uint16_t name;
    uint16_t core_pct; /* per card: 1..99, or 100 for whole cards */
    uint32_t mem_mib;  /* per card */
    uint16_t ncards, first_card;
};

/* struct egpu_assigned (5,640 bytes, room for 16 containers and 64 cards of
 * the longest names) stored as long as what it holds: one allocation of size
 * bytes, its containers here, then the cards' offsets, then the node's,
 * containers' and cards' names one after another; read through the
 * functions below. Built only by egpu_sched_assigned_new, so two records of
 * the same annotation are the same bytes (compared and copied as one). */
struct egpu_sched_assigned {
    uint16_t size;        /* bytes of the record */
    uint16_t ncontainers; /* <= EGPU_CONTAINERS_MAX */
    uint16_t ncards;      /* <= EGPU_PICK_SHARES_MAX */
    uint16_t node;        /* byte offset of the node's name */
    uint16_t uuids;       /* byte offset of ncards uint16_t offsets of the cards' UUIDs */
    struct egpu_sched_assigned_container containers[];
};

/* A record of a (a decoded annotation, or bind's decision), allocated (the
 * caller egpu_free()s it); NULL when out of memory. */
struct egpu_sched_assigned *egpu_sched_assigned_new(const struct egpu_assigned *a);
/* A copy of a (non-NULL), allocated; NULL when out of memory. */
struct egpu_sched_assigned *egpu_sched_assigned_dup(const struct egpu_sched_assigned *a);
/* Do a and b (either may be NULL) hold the same annotation? */
bool egpu_sched_assigned_same(const struct egpu_sched_assigned *a,
                              const struct egpu_sched_assigned *b);
/* The node's name; container i's name (i < ncontainers); card k's UUID
 * (k < ncards). Borrowed from a. */
const char *egpu_sched_assigned_node(const struct egpu_sched_assigned *a);
const char *egpu_sched_assigned_name(const struct egpu_sched_assigned *a, uint32_t i);
const char *egpu_sched_assigned_uuid(const struct egpu_sched_assigned *a, uint32_t k);

/* ------------------------------------------------------------------------ */
/* Pods as the scheduler sees them (src/scheduler/pod.c)                    */

struct egpu_sched_pod {
    /* metadata.namespace ("default" when absent), .name, .uid ("" when
     * absent) and spec.nodeName ("" when unbound), each shorter than
     * EGPU_K8S_NAME_MAX; elasticgpu.io/gpu-model ("" = any, shorter than
     * EGPU_MODEL_MAX), spec.schedulerName (below) and the names of the GPU
     * containers (req.ncontainers of them, in req's order, each shorter than
     * EGPU_CONTAINER_NAME_MAX; read with egpu_sched_pod_container): stored
     * once, as long as they are, one after another in names (owned,
     * names_len bytes) */
    const char *ns, *name, *uid, *node;
    const char *gpu_model;
    /* spec.schedulerName; "" when absent or unusable (absent, not a string,
     * too long, with a NUL): a name no scheduler has */
    const char *scheduler_name;
    const char *containers; /* the first GPU container's name, the others after it */
    char *names;
    uint32_t names_len;
    bool terminal;               /* status.phase Succeeded or Failed */
    bool deleting;               /* metadata.deletionTimestamp set */
    struct egpu_pod_request req; /* CPU, memory and GPU containers (model mask 0) */
    bool has_node_policy, has_card_policy;
    enum egpu_policy_kind node_policy, card_policy; /* per-pod overrides */
    bool has_assigned;
    struct egpu_sched_assigned *assigned; /* owned; non-NULL exactly when has_assigned */
    char *assigned_error; /* why a present annotation was not usable (owned), NULL when it was */
    bool allocated;       /* elasticgpu.io/allocated present */
    /* egpuc.elasticgpu.io/<container>: <claim> (egpu_api_pod_claims), in
     * the annotations' order; when they cannot be read, nclaims is 0 and
     * claims_error says why (the parse does not fail: the pod still counts
     * on its node, and filter refuses it with that message) */
    uint32_t nclaims;
    struct egpu_api_pod_claim *claims; /* nclaims entries, owned; NULL when none */
    char *claims_error;                /* owned, NULL when they could be read */
    /* A container carries the marker EGPU_RES_DRA (requests or limits, any
     * value; egpu-webhook --mode dra puts 1): a DRA pod, whose GPUs come
     * from its ResourceClaims (spec.resourceClaims), not from gpu-core. */
    bool dra;
};

/* Read a v1.Pod (API JSON) into *out: identity, node, phase, the sum of its
 * containers' CPU and memory requests (max with each init container, as the
 * scheduler counts them; a missing request falls back to the limit), one
 * request per container that asks elasticgpu.io/gpu-core (gpu-memory alone
 * is refused), the annotations above. A malformed elasticgpu.io/assigned
 * does not fail the parse: has_assigned stays false and assigned_error says
 * why, so the caller can report it. Returns 0, or EGPU_ESYNTAX /
 * EGPU_ERANGE with the field named (e.g. "spec.containers[0].resources.
 * requests[elasticgpu.io/gpu-core]: 150 is not ..."). *out written only on
 * success. */
int egpu_sched_pod_parse(const json_t *pod, struct egpu_sched_pod *out,
                         struct egpu_error *err) EGPU_MUST_CHECK;
/* The names are allocated, and assigned, claims and the two error messages
 * only for the pods that have them (most have none): *out owns them, to be released
 * with egpu_sched_pod_clear and copied with egpu_sched_pod_copy, never by
 * assignment alone. Its previous contents are overwritten, not freed.
 * -ENOMEM, with the field named, when they cannot be allocated. */

/* Free what p owns (names, assigned, claims, assigned_error, claims_error),
 * leaving them NULL (the strings in names ""), has_assigned false and
 * nclaims 0; the rest of *p is kept. p may be NULL. */
void egpu_sched_pod_clear(struct egpu_sched_pod *p);

/* *to takes over what *from owns (what *to owned is freed first, as
 * egpu_sched_pod_clear); *from owns nothing after it (as after
 * egpu_sched_pod_clear), the rest of it kept. Both non-NULL. Cannot fail. */
void egpu_sched_pod_move(struct egpu_sched_pod *to, struct egpu_sched_pod *from);

/* Copy src into *dst with its own allocations (dst's previous
 * contents are overwritten, not freed). Returns 0, or -ENOMEM with *dst
 * unchanged. */
int egpu_sched_pod_copy(struct egpu_sched_pod *dst,
                        const struct egpu_sched_pod *src) EGPU_MUST_CHECK;

/* The name of GPU container i of p (i < p->req.ncontainers), borrowed from
 * p. */
const char *egpu_sched_pod_container(const struct egpu_sched_pod *p, uint32_t i);

/* Does the pod ask for any Elastic GPU resource? */
bool egpu_sched_pod_wants_gpu(const struct egpu_sched_pod *p);

/* ------------------------------------------------------------------------ */
/* The cluster cache (src/scheduler/cache.c; its ElasticGPUs, claims and    */
/* classes in src/scheduler/claims.c)                                       */

/* Every node's CPU, memory and cards, and every pod's allocation, kept from
 * the informers' events. Pods count on the node named in their
 * elasticgpu.io/assigned annotation (the decision of a bind, even before the
 * Binding lands), else on spec.nodeName. All functions lock the cache; the
 * *_locked ones expect the caller to hold egpu_sched_cache_lock. */
struct egpu_sched_cache;

/* New empty cache, or NULL when out of memory. */
struct egpu_sched_cache *egpu_sched_cache_new(void);
void egpu_sched_cache_free(struct egpu_sched_cache *c);

/* Informer events. A v1.Node gives allocatable CPU and memory; a GPU object
 * (elasticgpu.io/v1alpha1, spec: nodeName, index, uuid, model, memory MiB)
 * gives a card; a v1.Pod gives requests and its placement. Each returns 0,
 * or EGPU_ESYNTAX / EGPU_ERANGE naming the bad field, in which case the
 * cache is unchanged, or -ENOMEM. Deletes of unknown objects are no-ops
 * (an informer may deliver a delete for an object it never listed).
 * gpu_delete reads only metadata.name and spec.nodeName (EGPU_ESYNTAX when
 * either is missing), all its informer's store keeps of a GPU object.
 *
 * GPU objects are known by metadata.name. A card UUID belongs to the first
 * GPU object seen with it: gpu_set of another object naming the same UUID
 * keeps that object's card out of placement (its node keeps its other
 * cards, the owner's node is untouched) and returns -EEXIST with a message
 * naming both objects; once the owner is deleted, the duplicate takes the
 * card over. A bound pod's elasticgpu.io/assigned is fixed once seen: a
 * later pod_set that changes or removes it keeps the recorded decision
 * (logged, counted in egpu_sched_cache_stats' assigned_ignored). */
int egpu_sched_cache_node_set(struct egpu_sched_cache *c, const json_t *node,
                              struct egpu_error *err) EGPU_MUST_CHECK;
int egpu_sched_cache_node_delete(struct egpu_sched_cache *c, const char *name);
int egpu_sched_cache_gpu_set(struct egpu_sched_cache *c, const json_t *gpu,
                             struct egpu_error *err) EGPU_MUST_CHECK;
int egpu_sched_cache_gpu_delete(struct egpu_sched_cache *c, const json_t *gpu,
                                struct egpu_error *err);
int egpu_sched_cache_pod_set(struct egpu_sched_cache *c, const json_t *pod,
                             struct egpu_error *err) EGPU_MUST_CHECK;
int egpu_sched_cache_pod_delete(struct egpu_sched_cache *c, const char *ns, const char *name);

/* Measured load (--load-aware; off in a new cache). On, each card's
 * status.used as egpu-agent writes it (NVML utilization percent, memory in
 * use MiB, updateTime) gives the placement core the card's load
 * (egpu_load_pct) while the report is fresh: its updateTime no more than
 * max_age_s old (a time ahead of the clock counts as now). A card with no
 * status.used, neither figure, no or an unreadable updateTime, or one older
 * than max_age_s has an unknown load, never an idle one. A report that
 * changes only the load sets the card's load in the core (a new node
 * generation when the value moves) and never rebuilds the node. Off, the
 * core's loads stay unknown and nothing of status.used is read. */
#define EGPU_SCHED_LOAD_MAX_AGE_DEFAULT 300 /* seconds: five missed one-minute reports */
void egpu_sched_cache_set_load_aware(struct egpu_sched_cache *c, bool on, int64_t max_age_s);
/* Turn the reports that have grown older than max_age_s by now_s (Unix
 * seconds) unknown in the core (cache lock held). Cheap when none can have:
 * the cache keeps the earliest time one may. The extender calls it before
 * each verb with the clock; egpu_sched_cache_gpu_set judges with the clock
 * too. */
void egpu_sched_cache_expire_loads_locked(struct egpu_sched_cache *c, int64_t now_s);

/* ElasticGPUs (elasticgpu.io/v1alpha1, decoded by egpu_api_egpu_decode):
 * the capacity each holds (egpu_api_egpu_reservation: phase Pending,
 * Available, Bound or Released; gpuShare{gpuName}: capacity gpu-core and
 * gpu-memory on that GPU object's card, physicalGPU{gpuNames}: those whole
 * cards) counts as allocated on its spec.nodeName's cards, so filter,
 * prioritize and bind see it taken. Failed ones hold nothing; a delete frees
 * what it held. Events may come in any order: one naming a node or GPU
 * object the cache does not know yet waits and is applied when it comes
 * (and waits again while it is gone). Reservations are applied oldest first
 * (by first sight) and keep what they hold when a node is rebuilt; one whose
 * cards lack the room is not applied (never a negative free), logged and
 * counted (stats: reservations[EGPU_SCHED_RESV_OVERFILL],
 * reservation_overfills) and tried again whenever capacity on its node is
 * freed. egpu_sched_cache_egpu_set returns 0 (also for an overfill: the
 * object is tracked), EGPU_ESYNTAX / EGPU_ERANGE from the decoder naming
 * the field (the cache is unchanged: a malformed update keeps the previous
 * version), or -ENOMEM. Deleting an unknown name is a no-op. */
int egpu_sched_cache_egpu_set(struct egpu_sched_cache *c, const json_t *egpu,
                              struct egpu_error *err) EGPU_MUST_CHECK;
int egpu_sched_cache_egpu_delete(struct egpu_sched_cache *c, const char *name);

/* ElasticGPUClaims (namespaced, egpu_api_claim_decode) and ElasticGPUClasses
 * (cluster-scoped, egpu_api_class_decode), for pods that use claims
 * (egpuc.elasticgpu.io/<container>: <claim>, read with egpu_api_pod_claims).
 *
 * A claim is served by the ElasticGPU whose spec.claimRef names it (not
 * Released; claimRef.uid, when given, the claim's uid; the one the claim's
 * status.elasticGPUName names first, else the oldest seen). A claimed
 * container of a pod placed on that ElasticGPU's node and card(s), whose
 * request fits inside it, is counted INSIDE the ElasticGPU's reservation
 * while that is applied: its share is not added to the card again (the
 * pod's CPU, memory and other containers count as usual). One pod at a time
 * is counted inside an ElasticGPU; any other, and any container whose
 * ElasticGPU is not applied (or not there yet: a WaitForFirstConsumer claim
 * before provisioning), counts beside it, as any pod. Whatever order the
 * events come in (the ElasticGPU before or after the pod, the ElasticGPU or
 * the claim changed or deleted, a relist), the pods of the claim concerned
 * are counted again, so a share is never held twice and never dropped.
 *
 * Each returns 0, EGPU_ESYNTAX / EGPU_ERANGE from the decoder naming the
 * field (the cache unchanged) or -ENOMEM. Deletes of unknown objects are
 * no-ops. */
int egpu_sched_cache_claim_set(struct egpu_sched_cache *c, const json_t *claim,
                               struct egpu_error *err) EGPU_MUST_CHECK;
int egpu_sched_cache_claim_delete(struct egpu_sched_cache *c, const char *ns, const char *name);
int egpu_sched_cache_class_set(struct egpu_sched_cache *c, const json_t *cls,
                               struct egpu_error *err) EGPU_MUST_CHECK;
int egpu_sched_cache_class_delete(struct egpu_sched_cache *c, const char *name);

/* ResourceClaims (resource.k8s.io/v1, all namespaces; DRA mode,
 * src/scheduler/dra.c). Per claim the cache keeps what its spec asks
 * (spec.devices.requests[].exactly or firstAvailable of this driver's
 * DeviceClasses, egpu_api_dra_spec_usage: it only steers the scoring of the
 * pods that use the claim, since a tenant writes it) and, once allocated,
 * its results of driver EGPU_API_DRA_DRIVER (egpu_api_dra_results: status,
 * written by kube-scheduler's allocator): pool = the node, device
 * "gpu-<index>" = the card of that index there, consumedCapacity cores and
 * memory (none: the whole card). An allocated claim holds that capacity on
 * those cards in the placement core as a pod's assignment does, under the
 * key "resourceclaim:<namespace>/<name>" (no pod key has a ':'); it is
 * applied again when its node is rebuilt, waits while its node or a card of
 * its results is not known yet (applied when they come), is an overfill
 * (not applied, logged, counted) when its cards lack the room, and is
 * dropped when the claim is deallocated or deleted.
 *
 * egpu_sched_cache_dra_claim_set takes an informer event;
 * egpu_sched_cache_dra_claim_read a claim that bind has just read from the
 * API server (after kube-scheduler's PreBind wrote its allocation): applied
 * the same way, and until an informer event at least as new as it arrives
 * (metadata.resourceVersion compared as a number), older events are
 * stale and ignored, so a watch that lags does not take the allocation
 * back. A read older than what the cache holds changes nothing, nor does
 * a read of a claim the cache does not hold (filter judged the pod with
 * its claims cached, so such a claim has been deleted since). Each
 * returns 0, or EGPU_ESYNTAX / EGPU_ERANGE naming the field (a name
 * missing, results the decoder refuses, results on two nodes or naming a
 * device that is not "gpu-<index>"), the cache unchanged (a malformed
 * update keeps the version before), or -ENOMEM. A spec the extender cannot
 * read does not fail: the allocation is still held, and filter refuses the
 * pods that ask by it with the message. Deletes of unknown claims are
 * no-ops. */
int egpu_sched_cache_dra_claim_set(struct egpu_sched_cache *c, const json_t *claim,
                                   struct egpu_error *err) EGPU_MUST_CHECK;
int egpu_sched_cache_dra_claim_read(struct egpu_sched_cache *c, const json_t *claim,
                                    struct egpu_error *err) EGPU_MUST_CHECK;
int egpu_sched_cache_dra_claim_delete(struct egpu_sched_cache *c, const char *ns, const char *name);

/* Hold the cache; returns its cluster, valid until egpu_sched_cache_unlock. */
struct egpu_cluster *egpu_sched_cache_lock(struct egpu_sched_cache *c);
void egpu_sched_cache_unlock(struct egpu_sched_cache *c);

/* The cached pod ns/name, or NULL (borrowed; valid while locked). */
const struct egpu_sched_pod *egpu_sched_cache_pod_locked(struct egpu_sched_cache *c, const char *ns,
                                                         const char *name);

/* Would placing pod on node with pick make a kubelet request ambiguous?
 * True when another pod placed on node and not yet allocated by the agent
 * has a container with the same gpu-core as one of pod's but other cards or
 * memory (DESIGN.md section 2.3); why then names that pod. bind refuses
 * such a node and filter fails it (only the nodes of
 * egpu_sched_cache_waiting_next_locked can be). */
bool egpu_sched_cache_is_ambiguous_locked(struct egpu_sched_cache *c,
                                          const struct egpu_sched_pod *pod,
                                          const struct egpu_node *node,
                                          const struct egpu_pick *pick, char *why, size_t len);

/* The nodes where a pod is placed by its elasticgpu.io/assigned and not yet
 * marked elasticgpu.io/allocated (not finished), one per call: start with
 * *it NULL; NULL after the last. Kept as the pods change, so no node is
 * walked: usually none or a few (pods between bind and the agent's mark).
 * The name is borrowed, valid while locked and the cache unchanged. */
const char *egpu_sched_cache_waiting_next_locked(struct egpu_sched_cache *c, const void **it);

/* Reserve pick for pod on node (bind's decision, before the API writes) and
 * fill *out with the annotation to write. Until the pod's watch event shows
 * the annotation, older events for the pod do not undo the reservation.
 * Returns 0, EGPU_EALLOCATED (already placed), -EINVAL (pick no longer
 * fits) or -ENOMEM. */
int egpu_sched_cache_reserve_locked(struct egpu_sched_cache *c, const struct egpu_sched_pod *pod,
                                    struct egpu_node *node, const struct egpu_pick *pick,
                                    struct egpu_assigned *out,
                                    struct egpu_error *err) EGPU_MUST_CHECK;

/* Undo a reservation (bind failed). Returns 0 or EGPU_ENOTALLOC. */
int egpu_sched_cache_unreserve(struct egpu_sched_cache *c, const char *ns, const char *name);

/* Reservations by state (egpu_sched_cache_stats.reservations). */
enum egpu_sched_resv_state {
    EGPU_SCHED_RESV_OFF,      /* holds nothing (Failed) */
    EGPU_SCHED_RESV_WAITING,  /* its node or a GPU object it names is not known yet */
    EGPU_SCHED_RESV_APPLIED,  /* held: counted as allocated */
    EGPU_SCHED_RESV_OVERFILL, /* its cards lack the room: not applied */
    EGPU_SCHED_RESV_STATES,
};
/* "off", "waiting", "applied", "overfill". */
const char *egpu_sched_resv_state_name(enum egpu_sched_resv_state s);

/* Counts for /metrics and readiness: nodes with a Node object, cards, pods
 * cached, pods counted on a node, pods whose cards could not be resolved. */
struct egpu_sched_cache_stats {
    size_t nodes, gpus, pods, placed, unresolved;
    size_t waiting; /* pods placed by an assignment and not yet marked allocated by the agent
                       (the ambiguity window; a node with one steers same-size pods away) */
    size_t reservations[EGPU_SCHED_RESV_STATES]; /* ElasticGPUs cached, by state */
    uint64_t reserved_core_milli;                /* held by applied ones, milli-GPU */
    uint64_t reserved_mem_mib;                   /* and MiB (whole cards: all their memory) */
    uint64_t reservation_overfills;              /* times one was found not to fit */
    size_t duplicate_gpus;                       /* GPU objects left out: their UUID is another's */
    uint64_t assigned_ignored; /* changes to a bound pod's assigned annotation not believed */
    size_t claims;             /* ElasticGPUClaims cached */
    size_t classes;            /* ElasticGPUClasses cached */
    size_t inside;             /* containers counted inside their claim's ElasticGPU */
    /* ResourceClaims cached, by state: off (not allocated, or on no device
     * of this driver), waiting (its node or a card not known yet), applied
     * (held), overfill (its cards lack the room) */
    size_t dra_claims[EGPU_SCHED_RESV_STATES];
    uint64_t dra_core_milli; /* held by applied ones, milli-GPU */
    uint64_t dra_mem_mib;    /* and MiB (whole cards: all their memory) */
    uint64_t dra_overfills;  /* times one was found not to fit its cards */
};
void egpu_sched_cache_stats(struct egpu_sched_cache *c, struct egpu_sched_cache_stats *out);

/* Tell c that every informer has listed its kind once (the caller polls
 * its informers' has_synced). Until then a pod counted without its cards
 * is logged at debug only: the first lists come in any order (a pod
 * before its node's GPU objects, a node's cards one by one), and those
 * states clear by themselves. This call logs, once, a warning per pod
 * still counted without its cards (the first 20, then one line with how
 * many; or an info line "cache synced" when there is none); from then on
 * a pod that becomes so is warned about once, until its cards are matched
 * again. egpu_sched_cache_stats' unresolved counts them at any time.
 * Later calls do nothing. */
void egpu_sched_cache_synced(struct egpu_sched_cache *c);
void egpu_sched_cache_stats_locked(struct egpu_sched_cache *c, struct egpu_sched_cache_stats *out);
/* egpu_sched_cache_stats' pods alone (caller holds the lock), in O(1): the
 * full stats walk every pod (1.8 M instructions at 35,000 pods). */
size_t egpu_sched_cache_pods_locked(const struct egpu_sched_cache *c);

/* FGD's target workload from the cached pods (egpu_workload_from_requests,
 * coverage 0.95); a DRA pod counts by its claims instead: each cached
 * ResourceClaim that asks this driver's devices is one request of its ask,
 * without CPU. Returns 0, -EINVAL when there is nothing to build it from,
 * or -ENOMEM. */
int egpu_sched_cache_workload_locked(struct egpu_sched_cache *c,
                                     struct egpu_workload *out) EGPU_MUST_CHECK;

/* Count into t (egpu_shape_tally_add) the request of every cached pod the
 * default placer would judge by its shape alone (caller holds the lock):
 * one GPU container, neither DRA nor claims, no elasticgpu.io/gpu-model,
 * no policy annotation, not terminal or deleting. What the memo warm
 * (egpu_extender_warm) evaluates ahead. Returns 0 or -ENOMEM. */
int egpu_sched_cache_shapes_locked(struct egpu_sched_cache *c,
                                   struct egpu_shape_tally *t) EGPU_MUST_CHECK;

/* ------------------------------------------------------------------------ */
/* The extender verbs (src/scheduler/extender.c)                             */

/* What bind needs from the API server; main.c wires these to src/kube. */
struct egpu_extender_ops {
    void *data;
    /* Has the cache seen the initial list of every watched resource? */
    bool (*synced)(void *data);
    /* Set (value != NULL) or remove (value == NULL) annotation key on pod
     * ns/name, retrying a 409 on a fresh copy. 0 or a negative code. */
    int (*annotate)(void *data, const char *ns, const char *name, const char *key,
                    const char *value, struct egpu_error *err);
    /* Merge-patch claim ns/name's metadata.annotations EGPU_ANN_SELECTED_NODE
     * = node and EGPU_ANN_SELECTED_GPUS = gpus (GPU object names, comma-
     * separated): where a WaitForFirstConsumer claim is to be provisioned.
     * NULL: such claims are not bound. 0 or a negative code. */
    int (*annotate_claim)(void *data, const char *ns, const char *name, const char *node,
                          const char *gpus, struct egpu_error *err);
    /* POST the pods/binding subresource (uid may be ""). 0 or a negative code. */
    int (*bind)(void *data, const char *ns, const char *name, const char *uid, const char *node,
                struct egpu_error *err);
    /* GET pod ns/name, and ResourceClaim ns/name (resource.k8s.io/v1), into
     * *out (a new reference the caller json_decref()s). After the Binding of
     * a DRA pod bind reads its claims, whose allocation kube-scheduler's
     * PreBind has written, so the next pod is scored against it before
     * their watch events come. NULL: not read (the watch alone tells). 0 or
     * a negative code. */
    int (*get_pod)(void *data, const char *ns, const char *name, json_t **out,
                   struct egpu_error *err);
    int (*get_claim)(void *data, const char *ns, const char *name, json_t **out,
                     struct egpu_error *err);
};

/* The scheduler name (KubeSchedulerConfiguration profile) bind serves by
 * default: deploy/scheduler/scheduler-config.yaml's profile. */
#define EGPU_SCHEDULER_NAME_DEFAULT "elastic-gpu-scheduler"

struct egpu_extender_config {
    const char *scheduler_name;             /* bind serves only pods whose spec.schedulerName is
                                               this (copied); NULL or "" =
                                               EGPU_SCHEDULER_NAME_DEFAULT */
    enum egpu_policy_kind node_policy;      /* default node tier */
    enum egpu_policy_kind card_policy;      /* default card tier */
    uint64_t seed;                          /* random policy and ties */
    const struct egpu_workload *workload;   /* FGD's target workload; NULL = target's, else
                                               built from the pods in the cache */
    const struct egpu_api_workload *target; /* --target-workload: the operator's target
                                               workload (borrowed, outlives the extender;
                                               model names resolved against the cache's
                                               cluster at first use); NULL = none */
    bool load_aware;         /* --load-aware: placers break exact ties by measured load, and filter
                                fails the tied nodes whose cards are more loaded */
    bool place_cpu_pods;     /* --pods-without-gpu place: a pod that asks for no GPU is judged,
                                scored and bound by the node policy as egpu-sim places it (its
                                CPU and memory against each node's allocatable); false: it passes
                                every filter, scores 0 and bind refuses it */
    bool dra;                /* --dra: DRA pods (a container with EGPU_RES_DRA) are judged by
                                their ResourceClaims in the cache (egpu_sched_cache_dra_claim_set)
                                with the node policy, as egpu-sim --dra places them (the cards
                                are kube-scheduler's allocator's, blind: the node is scored with
                                the card tier's own pick), and bound with the Binding alone;
                                false: filter and bind refuse them, naming the flag */
    unsigned warm_period_ms; /* egpu_extender_warm: the least time from the end of one pass to
                                the start of the next, ms; 0 = 30,000 */
};

/* Bind outcomes, for the bind failures metric. */
enum egpu_bind_result {
    EGPU_BIND_OK,
    EGPU_BIND_BAD_REQUEST, /* malformed body */
    EGPU_BIND_UNKNOWN,     /* pod or node not in the cache */
    EGPU_BIND_NO_FIT,      /* the node can no longer host the pod */
    EGPU_BIND_AMBIGUOUS,   /* DESIGN.md 2.3: would confuse the kubelet */
    EGPU_BIND_ANNOTATE,    /* writing elasticgpu.io/assigned failed */
    EGPU_BIND_BINDING,     /* POST binding failed */
    EGPU_BIND_NOT_OURS,    /* the pod is another scheduler's or asks for no GPU */
    EGPU_BIND_CLAIM,       /* annotating a WaitForFirstConsumer claim failed */
    EGPU_BIND_RESULTS,
};
const char *egpu_bind_result_name(enum egpu_bind_result r);

struct egpu_extender;

/* New extender over cache (borrowed) calling ops (copied). Returns NULL with
 * *err set on -ENOMEM. */
struct egpu_extender *egpu_extender_new(const struct egpu_extender_config *cfg,
                                        struct egpu_sched_cache *cache,
                                        const struct egpu_extender_ops *ops,
                                        struct egpu_error *err);
void egpu_extender_free(struct egpu_extender *x);

/* The verbs, kube-scheduler extender v1 (extender/v1/types.go): body is the
 * request JSON (ExtenderArgs for filter and prioritize, ExtenderBindingArgs
 * for bind); the reply JSON (ExtenderFilterResult, HostPriorityList with
 * scores 0..10, ExtenderBindingResult) is appended to reply. Returns the
 * HTTP status: 200, 400 for malformed input (reply then carries the message
 * naming the field), 404 for a bind of an unknown pod, 403 for a bind of a
 * pod that is not this scheduler's to bind (its cached spec.schedulerName is
 * not cfg.scheduler_name, or it asks for no elasticgpu.io resource: nothing
 * is annotated or bound then), 503 for filter and prioritize before the
 * cache is synced, and for prioritize of a DRA pod whose ResourceClaim is
 * not cached yet (400 for a DRA pod it refuses otherwise: without --dra,
 * gpu-core beside the marker, a claim spec it cannot read; filter refuses
 * those with 200 and the Error). bind reads only the names, uid and node of its body; what
 * it decides on is the pod as the cache holds it (from the API server's
 * watch). The cache is never changed by a failed call. */
int egpu_extender_filter(struct egpu_extender *x, const char *body, size_t len,
                         struct egpu_buf *reply);
int egpu_extender_prioritize(struct egpu_extender *x, const char *body, size_t len,
                             struct egpu_buf *reply);
int egpu_extender_bind(struct egpu_extender *x, const char *body, size_t len,
                       struct egpu_buf *reply);

/* The memo warm: one step of judging ahead, for the default placer
 * (cfg.node_policy and cfg.card_policy, made if need be), the request shapes
 * of the cached pods (egpu_sched_cache_shapes_locked) that come up at least
 * twice, most frequent first and at most 7/8 of what its memo keeps
 * (egpu_placer_memo_shapes), over every node slot (egpu_placer_warm), so
 * that the first pod of such a shape finds every node memoised instead of
 * evaluating each one (at 65,000 nodes 25-60 ms of filter). A pass counts
 * the shapes and walks them from the least frequent, so the most frequent
 * are the memo's most recently used; one begins when the placer is new (the
 * first step once the cache is synced, and after the learned target
 * workload is replaced) and again cfg.warm_period_ms after the last ended
 * (what changed since is judged again). Each call holds the cache lock for
 * at most budget node slots (each an entry read, or an evaluation when the
 * entry is not of the node's generation), so the verbs wait at most that
 * long, except the step that begins a pass: it also counts the shapes, one
 * walk over every cached pod under the lock, as the learned target
 * workload's rebuild does. Returns the node slots looked at: 0 when there is nothing to do now
 * (not synced, no pass due, a random policy, or out of memory: tried again
 * at the next pass), so a caller sleeps then and calls again. Thread-safe. */
size_t egpu_extender_warm(struct egpu_extender *x, uint32_t budget);

/* Passes of egpu_extender_warm finished since start, and the verdicts they
 * made (node slots whose memo entry was not of the node's generation). */
void egpu_extender_warm_counts(struct egpu_extender *x, uint64_t *passes, uint64_t *verdicts);

/* A thread that calls egpu_extender_warm(x, 1024) while it finds work and
 * every 200 ms when it does not (src/scheduler/warm.c). Start returns 0 and
 * *out, or -ENOMEM or a pthread_create error (negative errno) with *err
 * set. Stop (NULL: no-op) joins the thread and frees it: before
 * egpu_extender_free(x). */
struct egpu_warmer;
int egpu_warmer_start(struct egpu_extender *x, struct egpu_warmer **out,
                      struct egpu_error *err) EGPU_MUST_CHECK;
void egpu_warmer_stop(struct egpu_warmer *w);

/* Binds by outcome since start (index enum egpu_bind_result). */
void egpu_extender_bind_counts(struct egpu_extender *x, uint64_t out[EGPU_BIND_RESULTS]);

/* Prioritize replies since start made from the one before (the same nodes,
 * in any order), with only the changed scores encoded again. */
uint64_t egpu_extender_prioritize_reused(struct egpu_extender *x);
/* Filter calls since start (with load_aware) where measured load decided
 * among nodes tied for the best score: a tied node failed for its load. */
uint64_t egpu_extender_load_decided(struct egpu_extender *x);
/* Rebuilds since start of the target workload learned from the cached pods
 * (FGD policies without --target-workload; one every 64 new pods): *kept
 * those within 1% (total variation) of the workload in use, which stays, so
 * the placers keep their memos; *replaced those that went into use, the
 * first one included. */
void egpu_extender_workload_rebuilds(struct egpu_extender *x, uint64_t *kept, uint64_t *replaced);

#ifdef __cplusplus
}
#endif

#endif /* EGPU_SCHEDULER_H */
