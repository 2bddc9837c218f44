/* egpu/controller.h - the pure parts of egpu-controller: its work queue,
 * and the inventory it provisions from (the cluster of GPU objects and
 * Nodes, existing ElasticGPUs and what pods hold counted as allocated, and
 * the choice of node and card for a claim).
 *
 * The controller binds ElasticGPUClaims to ElasticGPUs as the
 * PersistentVolume controller binds claims to volumes (DESIGN.md section 2,
 * item 5; docs/claims.md). Its I/O (the informers and their routing,
 * the worker, the reconcilers' writes and events, leader election) lives
 * in src/controller's other files (controller_int.h) and main.c; what is
 * here does no I/O, so unit tests drive it directly.
 *
 * Errors are 0 or a negative code (-errno or EGPU_E*), with a message in
 * *err (may be NULL).
 */
#ifndef EGPU_CONTROLLER_H
#define EGPU_CONTROLLER_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "egpu/api.h"
#include "egpu/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Work queue (src/controller/queue.c)                                      */
/*
 * client-go's rate-limited work queue: keys (C strings, copied) wait in FIFO
 * order; a key is in the queue at most once (adding it again while it waits
 * does nothing); a key being processed (between get and done) is never
 * handed to a second worker: added meanwhile, it is queued again at done.
 * Delayed adds wait on a timer; add_backoff delays a key by its own failure
 * count (base * 2^failures, at most max), which forget clears. Thread-safe.
 */
struct egpu_controller_queue;

/* A queue whose backoff goes from base_ms doubling to max_ms (0: 5 ms and
 * 60000 ms). NULL when out of memory. */
struct egpu_controller_queue *egpu_controller_queue_new(long base_ms, long max_ms);
/* Shut down (waiting gets return -ESHUTDOWN) and free. NULL is a no-op;
 * no thread may be inside a call. */
void egpu_controller_queue_free(struct egpu_controller_queue *q);

/* Queue key now (no-op when it already waits). Returns 0, -ENOMEM or
 * -ESHUTDOWN. */
int egpu_controller_queue_add(struct egpu_controller_queue *q, const char *key);
/* Queue key after delay_ms (<= 0: now). A key already waiting on a timer
 * keeps the earlier time. Returns 0, -ENOMEM or -ESHUTDOWN. */
int egpu_controller_queue_add_after(struct egpu_controller_queue *q, const char *key,
                                    long delay_ms);
/* Queue key after its backoff and count one more failure of it. Returns
 * the delay used (ms, >= 0) or a negative code as egpu_controller_queue_add. */
long egpu_controller_queue_add_backoff(struct egpu_controller_queue *q, const char *key);
/* Forget key's failures (after a success). */
void egpu_controller_queue_forget(struct egpu_controller_queue *q, const char *key);
/* Failures of key counted since the last forget. */
unsigned egpu_controller_queue_failures(struct egpu_controller_queue *q, const char *key);

/* Wait up to timeout_ms (< 0: forever) for a key; *key gets it (caller
 * egpu_free()s it, and calls egpu_controller_queue_done with it). Returns 0,
 * -ETIMEDOUT or -ESHUTDOWN. */
int egpu_controller_queue_get(struct egpu_controller_queue *q, long timeout_ms, char **key);
/* key's processing ended; queue it again if it was added meanwhile. */
void egpu_controller_queue_done(struct egpu_controller_queue *q, const char *key);
/* Keys ready now, plus those waiting on a timer (the depth metric). */
size_t egpu_controller_queue_len(struct egpu_controller_queue *q);
/* Wake every waiting get with -ESHUTDOWN; later adds fail. */
void egpu_controller_queue_shutdown(struct egpu_controller_queue *q);

/* ------------------------------------------------------------------------ */
/* Inventory and provisioning (src/controller/inventory.c, place.c)          */

/* One GPU object the inventory holds. */
struct egpu_controller_card {
    char name[EGPU_K8S_NAME_MAX]; /* the GPU object's metadata.name */
    char node[EGPU_K8S_NAME_MAX]; /* spec.nodeName */
    char uuid[EGPU_UUID_MAX];     /* spec.uuid */
    char model[EGPU_MODEL_MAX];   /* spec.model ("" unknown) */
    uint32_t index;               /* spec.index */
    uint32_t mem_mib;             /* spec.memory */
};

/* The cards a class may provision from, as a placement-core cluster. */
struct egpu_controller_inventory {
    struct egpu_cluster *cluster; /* nodes: those with a Node object, matching the class's
                                     nodeSelector, with their healthy cards of allowed
                                     models (one model per node, as the core needs) */
    size_t ncards;
    struct egpu_controller_card *cards; /* every card in cluster, in GPU-list order */
    struct egpu_map *by_uuid;           /* spec.uuid -> struct egpu_controller_card */
    struct egpu_map *by_name;           /* GPU name -> struct egpu_controller_card */
    size_t skipped;                     /* GPU objects left out (malformed, unhealthy, model,
                                           node missing or not selected, mixed models) */
    json_t *pods;                       /* pod key -> {"n": containers held, "in": [ElasticGPU
                                           names it is counted inside]} */
    json_t *occupants;                  /* ElasticGPU name -> the pod key counted inside it */
};

/* Build *inv from gpus (a JSON array of GPU objects: spec.nodeName, index,
 * uuid, model, memory; status.health "Unhealthy" leaves a card out) and
 * nodes (a JSON array of core/v1 Nodes), for class cls (NULL: every card):
 * its models (egpu_api_class_allows_model) and nodeSelector (matched on the
 * Node's labels). Nodes get unbounded CPU and memory: an ElasticGPU reserves
 * card capacity only. Returns 0, or -ENOMEM / EGPU_ELIMIT (more than
 * EGPU_MODELS_MAX models); *inv is freed with egpu_controller_inventory_free either
 * way. */
int egpu_controller_inventory_build(const json_t *gpus, const json_t *nodes,
                                    const struct egpu_api_class *cls,
                                    struct egpu_controller_inventory *inv,
                                    struct egpu_error *err) EGPU_MUST_CHECK;

/* The assignment key of an ElasticGPU's reservation in an inventory:
 * EGPU_CONTROLLER_RESV_PREFIX + its name (the scheduler's form; never a pod key,
 * which holds a '/'), and the room it takes with the terminating NUL. */
#define EGPU_CONTROLLER_RESV_PREFIX  "elasticgpu:"
#define EGPU_CONTROLLER_RESV_KEY_MAX (sizeof(EGPU_CONTROLLER_RESV_PREFIX) - 1 + EGPU_K8S_NAME_MAX)

/* Count ElasticGPU e's reservation as allocated, under key
 * EGPU_CONTROLLER_RESV_PREFIX "<name>": what egpu_api_egpu_reservation says e
 * holds (phase Pending, Available, Bound or Released, deleting or not: its
 * gpu-core and gpu-memory on its gpuShare card, or its physicalGPU cards
 * whole; Failed: nothing), applied with egpu_cluster_reserve, as the
 * scheduler's cache and the replay do. Its GPU object names are mapped to
 * the inventory's cards; those not in the inventory, or on another node
 * than the first one that is, are left out (a reservation on some cards in
 * the inventory and some not counts the ones in it). Returns 0 (counted, or
 * Failed: nothing to count); -ENOENT when none of its cards is in the
 * inventory (another class's cards: nothing to count); EGPU_ENOFIT when it
 * does not fit what is left (two ElasticGPUs overcommit a card; err names
 * the card, what is free and what e asks); EGPU_EALLOCATED when counted
 * already; -ENOMEM. */
int egpu_controller_inventory_reserve(struct egpu_controller_inventory *inv,
                                      const struct egpu_api_egpu *e,
                                      struct egpu_error *err) EGPU_MUST_CHECK;

/* Stop counting the reservation of the ElasticGPU called name (held under
 * EGPU_CONTROLLER_RESV_PREFIX "<name>"): its room is free again. Nothing happens
 * when none is counted. This and egpu_controller_inventory_reserve keep an
 * inventory current as ElasticGPUs change, without rebuilding it. */
void egpu_controller_inventory_unreserve(struct egpu_controller_inventory *inv, const char *name);

/* Count what pod (key "<ns>/<name>") holds, as its elasticgpu.io/assigned
 * a says (egpu_controller_pod_holds), replacing what was counted for it before.
 * Each container is held under "pod:<key>#<i>" on the cards of a that are
 * in inv (another class's cards: nothing to count). A container whose
 * claim is bound to an ElasticGPU (egpus[i], its name; NULL, or egpus
 * NULL: none) is counted inside that ElasticGPU instead - nothing more is
 * held - when that ElasticGPU is counted in inv on exactly the container's
 * cards, no other pod is inside it, and egpu_api_resv_can_hold says it
 * fits: the scheduler's cache's rule, so a claim pod is never counted
 * twice. Returns 0, or the first container's error (EGPU_ENOFIT: a pod
 * where inv has no room for it; -ENOMEM), the others counted anyway. */
int egpu_controller_inventory_count_pod(struct egpu_controller_inventory *inv, const char *key,
                                        const struct egpu_assigned *a, const char *const *egpus,
                                        struct egpu_error *err) EGPU_MUST_CHECK;

/* Stop counting pod key (finished, deleted, or about to be counted again):
 * its room is free again. Nothing happens when none is counted. */
void egpu_controller_inventory_uncount_pod(struct egpu_controller_inventory *inv, const char *key);

/* Free what inv holds and zero it. */
void egpu_controller_inventory_free(struct egpu_controller_inventory *inv);

/* Where a claim is provisioned. */
struct egpu_controller_choice {
    char node[EGPU_K8S_NAME_MAX];
    enum egpu_api_provisioner source;
    uint32_t ngpus;
    char gpu_names[EGPU_NODE_GPUS_MAX][EGPU_K8S_NAME_MAX]; /* GPU object names, by index */
    char model[EGPU_MODEL_MAX];                            /* the cards' model */
    int64_t core_pct; /* the ElasticGPU's gpu-core: the claim's, or its TFLOPS on model */
    int64_t mem_mib;  /* gpuShare's gpu-memory; 0 = none asked */
    bool from_tflops; /* core_pct came from gpu-tflops */
};

/* Choose node and card(s) for claim c of class cls (its provisioner: a
 * gpuShare slice, or physicalGPU whole cards) in inv, with the placement
 * core and cls's policy for both tiers (binpack when it names none; fgd
 * uses the claim's own shape as the workload), seeded from the claim's uid
 * so the choice is the same on every controller. A gpu-tflops claim tries
 * each model that cls has a peak for, the one needing the largest percent
 * (the smallest card that can hold it) first, ties by model name. Returns
 * 0, or EGPU_ENOFIT / EGPU_ERANGE with err saying why in one sentence for
 * the claim's condition (no card fits, the claim's kind is not the
 * class's, no model has a peak, TFLOPS above every card), or -ENOMEM. */
int egpu_controller_place(struct egpu_controller_inventory *inv, const struct egpu_api_claim *c,
                          const struct egpu_api_class *cls, struct egpu_controller_choice *out,
                          struct egpu_error *err) EGPU_MUST_CHECK;

/* Check the placement the scheduler selected for claim c of class cls (a
 * WaitForFirstConsumer claim's annotations EGPU_ANN_SELECTED_NODE, node,
 * and EGPU_ANN_SELECTED_GPUS, gpus: GPU object names separated by commas)
 * against inv, as any placement: the claim's kind must be the class's
 * provisioner's; node must be in inv (a Node object the class's
 * nodeSelector matches, with healthy cards of its models); gpus must name
 * cards of inv on node, no repeats, one for a share and k for k whole
 * cards; a gpu-tflops claim needs the class's peak for the card's model and
 * less than 100% of it; and the cards must have the room (what existing
 * ElasticGPUs hold counted). These annotations can be written by the
 * claim's owner, so they are a wish and nothing more. On success *out is
 * filled as egpu_controller_place fills it and inv is unchanged. Returns 0, or
 * EGPU_ERANGE (malformed or not allowed) / EGPU_ENOFIT (no room) with err
 * saying why in one sentence for the claim's condition, or -ENOMEM. */
int egpu_controller_place_at(struct egpu_controller_inventory *inv, const struct egpu_api_claim *c,
                             const struct egpu_api_class *cls, const char *node, const char *gpus,
                             struct egpu_controller_choice *out,
                             struct egpu_error *err) EGPU_MUST_CHECK;

/* The name of the ElasticGPU provisioned for the claim of uid:
 * "egpu-<uid>" into buf (len bytes). A retry after a crash finds the one
 * made before instead of making a second. Returns 0 or -ENAMETOOLONG. */
int egpu_controller_provisioned_name(const char *uid, char *buf, size_t len);

/* The annotation a provisioned ElasticGPU carries: the provisioner's name
 * (as pv.kubernetes.io/provisioned-by). reclaimPolicy Delete deletes only
 * ElasticGPUs that carry it. */
#define EGPU_ANN_PROVISIONED_BY EGPU_API_GROUP "/provisioned-by"

/* ------------------------------------------------------------------------ */
/* GPU status.allocated (src/controller/gpustatus.c)                        */
/*
 * What each GPU object's status.allocated should hold, from the pods: a pod
 * counts while it is bound (spec.nodeName set), not finished (status.phase
 * neither Succeeded nor Failed) and carries elasticgpu.io/assigned (written
 * by egpu-scheduler's bind only; deploy/admission keeps pod owners from
 * setting or changing it) naming the node it is bound to. Each container of
 * the annotation gives one entry per card it names:
 *   {"namespace","pod","podUID","container","core","memory"[,"claim"]}
 * core: percent of the card (100 for whole cards), memory: MiB of the card
 * as the annotation says (0: not limited), claim: the ElasticGPUClaim the
 * container uses (egpuc.elasticgpu.io/<container>, egpu_api_pod_claims),
 * absent when none. A card is named by its card key "<node>/<uuid>" (the
 * node of the annotation and the NVML UUID it lists), which a GPU object
 * has as spec.nodeName and spec.uuid.
 *
 * The index keeps every pod's entries and every GPU object's card key, so
 * a pod event reports only the cards whose entries changed. Thread-safe
 * (one mutex): informer threads update it while the worker reads it.
 */
struct egpu_controller_gpu_index;

#define EGPU_CONTROLLER_CARD_KEY_MAX                            \
    (EGPU_K8S_NAME_MAX + EGPU_UUID_MAX) /* with the '/' and NUL \
                                         */

/* The entries pod (a core/v1 Pod, borrowed) contributes, as a new JSON
 * object (caller json_decref()s) mapping card keys to arrays of entries in
 * the annotation's order; {} for a pod that does not count (see above).
 * Returns 0, or EGPU_ESYNTAX / EGPU_ERANGE naming the field when the
 * annotation does not decode (egpu_assigned_decode's message), names
 * another node than spec.nodeName, or a card's key would be too long: *out
 * is {} then too, so a bad annotation never counts. A claim annotation that
 * does not decode only leaves the claims out. -ENOMEM: *out NULL. */
int egpu_controller_pod_gpu_entries(const json_t *pod, json_t **out, struct egpu_error *err);

/* What pod (a core/v1 Pod, borrowed) holds: *a, decoded from its
 * elasticgpu.io/assigned, and its claim annotations into pc[0..max), *npc
 * of them. A pod that holds nothing - not bound, Succeeded or Failed, no
 * annotation - gets a->ncontainers 0. Returns 0, or EGPU_ESYNTAX /
 * EGPU_ERANGE when the annotation does not decode or names another node
 * than spec.nodeName (a->ncontainers 0: a bad annotation never counts). A
 * claim annotation that does not decode only leaves the claims out. The
 * one reading of a pod's holdings for GPU status and the inventory. */
int egpu_controller_pod_holds(const json_t *pod, struct egpu_assigned *a,
                              struct egpu_api_pod_claim *pc, size_t max, size_t *npc,
                              struct egpu_error *err) EGPU_MUST_CHECK;

/* Sort a status.allocated array in place: by namespace, pod, container,
 * then podUID, core, memory and claim. Returns 0 or -EINVAL (not an
 * array). */
int egpu_controller_gpu_allocated_sort(json_t *list);

/* Do two status.allocated values say the same (NULL, absent and [] are
 * equal; otherwise json_equal)? */
bool egpu_controller_gpu_allocated_equal(const json_t *a, const json_t *b);

/* A new, empty index; NULL when out of memory. */
struct egpu_controller_gpu_index *egpu_controller_gpu_index_new(void);
/* NULL is a no-op. */
void egpu_controller_gpu_index_free(struct egpu_controller_gpu_index *ix);

/* Pod ns/name is now pod (NULL: deleted). *touched (may be NULL) gets a new
 * JSON array of the card keys whose entries changed (caller json_decref()s;
 * [] when none). Returns 0, or what egpu_controller_pod_gpu_entries returns (the
 * pod's entries are dropped then, and *touched names the cards that held
 * them), or -ENOMEM (the pod's old entries stay). */
int egpu_controller_gpu_index_pod(struct egpu_controller_gpu_index *ix, const char *ns,
                                  const char *name, const json_t *pod, json_t **touched,
                                  struct egpu_error *err);

/* GPU object gpu (borrowed) was added or changed (deleted false) or deleted
 * (true): remember which object holds its card key. The card key into key
 * (EGPU_CONTROLLER_CARD_KEY_MAX bytes) for the caller to queue. Returns 0, or
 * EGPU_ESYNTAX when gpu lacks metadata.name, spec.nodeName or spec.uuid, or
 * they are too long (nothing remembered), or -ENOMEM. */
int egpu_controller_gpu_index_gpu(struct egpu_controller_gpu_index *ix, const json_t *gpu,
                                  bool deleted, char *key, size_t len, struct egpu_error *err);

/* The name of the GPU object holding card key into name (len bytes). False
 * when none does (yet). */
bool egpu_controller_gpu_index_gpu_name(struct egpu_controller_gpu_index *ix, const char *key,
                                        char *name, size_t len);

/* Every card key of a GPU object, as a new JSON array (NULL: no memory). */
json_t *egpu_controller_gpu_index_cards(struct egpu_controller_gpu_index *ix);

/* What status.allocated of card key should be: a new, sorted JSON array
 * ([] when nothing holds the card; NULL when out of memory). */
json_t *egpu_controller_gpu_index_allocated(struct egpu_controller_gpu_index *ix, const char *key);

/* ------------------------------------------------------------------------ */
/* DRA mode: a pod's ResourceClaimTemplates (src/controller/dra_spec.c)      */
/*
 * egpu-controller --mode dra makes the ResourceClaimTemplates (resource.k8s.io/v1,
 * dra_notes.md section 5) that egpu-webhook's DRA mode names in a pod's
 * annotation EGPU_ANN_DRA_CLAIMS, a JSON object {template name: the
 * template's spec}, and in its spec.resourceClaims[].resourceClaimTemplateName.
 * The annotation is read as a tenant's: its spec bodies are compared, never
 * used (docs/claims.md, "DRA mode").
 */

/* The label of every ResourceClaimTemplate the controller makes; only those
 * are garbage-collected. */
#define EGPU_CONTROLLER_MANAGED_BY_KEY   "app.kubernetes.io/managed-by"
#define EGPU_CONTROLLER_MANAGED_BY_VALUE "egpu-controller"
/* Entries an annotation may hold at most: a pod's spec.resourceClaims holds
 * at most 32 (core/v1 validation), and its text at most this many bytes. */
#define EGPU_CONTROLLER_DRA_ENTRIES_MAX  32
#define EGPU_CONTROLLER_DRA_TEXT_MAX     (64 * 1024)

/* Decode the annotation's text (NUL-terminated) into *out: a new JSON object
 * (caller json_decref()s) of at most EGPU_CONTROLLER_DRA_ENTRIES_MAX entries,
 * each a non-empty name of at most 253 characters mapped to an object.
 * Returns 0, or EGPU_ESYNTAX (longer than EGPU_CONTROLLER_DRA_TEXT_MAX, not a
 * JSON object, an entry that is not an object, a bad name) or EGPU_ERANGE (too
 * many entries), the message naming the annotation and what was wrong;
 * *out is written only on success. */
int egpu_controller_dra_entries(const char *text, json_t **out,
                                struct egpu_error *err) EGPU_MUST_CHECK;

/* The ask a template spec (an annotation entry's body, borrowed) says, read
 * back from the shape egpu_api_dra_claim_spec makes: one request
 * EGPU_API_DRA_REQUEST; EGPU_API_DRA_CLASS_SHARE with capacity.requests
 * cores "<1..99>" and optionally memory "<n>Mi", or EGPU_API_DRA_CLASS_WHOLE
 * with count k (core_pct 100 k). Only a start: the caller makes the spec
 * again from *ask and compares. Returns 0 or EGPU_ESYNTAX (any other
 * shape). */
int egpu_controller_dra_ask_of(const json_t *spec, struct egpu_api_gpu_ask *ask) EGPU_MUST_CHECK;

/* The names of the ResourceClaimTemplates pod (a core/v1 Pod, borrowed)
 * names in spec.resourceClaims[].resourceClaimTemplateName, as the keys of
 * a new JSON object (values true; {} when none; NULL: out of memory). */
json_t *egpu_controller_dra_pod_templates(const json_t *pod);

/* Does the spec of a stored ResourceClaimTemplate, have (its "spec", as the
 * API server returns it), say what want (the spec the controller makes)
 * says? The API server fills defaults and canonicalizes quantities
 * (dra_notes.md sections 5 and 7: "4096Mi" comes back "4Gi"), so: an object
 * field absent on one side must be empty (null, "", [] or an object of
 * such values: {"creationTimestamp": null}) or a default
 * on the other (allocationMode "ExactCount", count 1, a toleration's
 * operator "Equal"); arrays match element by element; strings under a
 * "capacity" object match as quantities of equal value (egpu_quantity_parse);
 * anything else must be equal. want and have borrowed; NULL matches only
 * NULL. */
bool egpu_controller_dra_spec_same(const json_t *want, const json_t *have);

/* ------------------------------------------------------------------------ */
/* DRA mode: an ElasticGPUClass's DeviceClass (src/controller/dra_spec.c)    */

/* The DeviceClass (resource.k8s.io/v1, dra_notes.md section 4) that stands
 * for cls (decoded, with its uid) in DRA mode, as a new object (caller
 * json_decref()s): metadata.name egpu_api_dra_object_name, the label
 * EGPU_CONTROLLER_MANAGED_BY_KEY, one ownerReference to cls (controller:
 * true; the garbage collector deletes the DeviceClass with the class), and
 * spec.selectors: device.driver == EGPU_API_DRA_DRIVER, and, when cls names
 * models, egpu_api_dra_model_selector over each model and "NVIDIA " + model
 * (egpu_api_class_allows_model's rule). The class's nodeSelector and policy
 * have no DeviceClass field: the allocator picks nodes and devices. Returns
 * 0, -ENAMETOOLONG (the name), the selector's EGPU_ERANGE / EGPU_ESYNTAX
 * (err prefixed with the class's parameters.models), or -ENOMEM; *out only
 * on success. */
int egpu_controller_dra_device_class(const struct egpu_api_class *cls, json_t **out,
                                     struct egpu_error *err) EGPU_MUST_CHECK;

/* ------------------------------------------------------------------------ */
/* DRA mode: an ElasticGPUClaim's ResourceClaim (src/controller/dra_spec.c)  */

/* The ResourceClaim (resource.k8s.io/v1) that stands for claim cl of class
 * cls in DRA mode, as a new object (caller json_decref()s): name
 * egpu_api_dra_object_name(cl's name) in cl's namespace, the label
 * EGPU_CONTROLLER_MANAGED_BY_KEY, one ownerReference to cl (the garbage
 * collector deletes it with the claim), and the spec egpu_api_dra_claim_spec
 * makes for cl's gpu-core and gpu-memory with deviceClassName the class's
 * DeviceClass. Returns 0, EGPU_ERANGE (a gpu-tflops claim: DRA allocates
 * capacity, not TFLOPS; a name too long; a share in a whole-card class or
 * the other way) with err saying why in one sentence, or -ENOMEM. */
int egpu_controller_dra_claim_object(const struct egpu_api_claim *cl,
                                     const struct egpu_api_class *cls, json_t **out,
                                     struct egpu_error *err) EGPU_MUST_CHECK;

/* What kube-scheduler allocated to a ResourceClaim, for this driver. */
struct egpu_controller_dra_alloc {
    bool allocated;                 /* status.allocation holds a result of this driver */
    char node[EGPU_K8S_NAME_MAX];   /* allocation.nodeSelector's metadata.name ("" unknown) */
    char pool[EGPU_K8S_NAME_MAX];   /* results[].pool */
    char device[EGPU_K8S_NAME_MAX]; /* results[].device */
    int64_t cores;                  /* consumedCapacity cores, percent (0: none given) */
    int64_t mem_mib;                /* consumedCapacity memory, MiB, rounded up (0: none) */
};

/* Read rc's (a ResourceClaim, borrowed) status.allocation: the first
 * result whose driver is EGPU_API_DRA_DRIVER, its consumedCapacity, and the
 * node of the nodeSelector's matchFields metadata.name In [node]
 * (dra_notes.md section 5). Fields too long or malformed are left out; no
 * allocation, or none of this driver: out->allocated false. */
void egpu_controller_dra_allocation(const json_t *rc, struct egpu_controller_dra_alloc *out);

#ifdef __cplusplus
}
#endif

#endif /* EGPU_CONTROLLER_H */
