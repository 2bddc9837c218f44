/* egpu/api.h - the elasticgpu.io contract every Elastic GPU component shares.
 *
 * Names, units and formats that more than one component reads or writes:
 * the two resources and their units, every annotation, the elasticgpu.io/
 * assigned annotation's format, how a pod's GPU request is read and
 * validated (with the messages a user sees), and the names of the
 * GPU-sharing systems Elastic GPU replaces, with their conversions. No I/O:
 * like src/core, everything here works on memory only, so the scheduler,
 * the agent, the webhook, the controller and the kubectl plugin all call the
 * same code and no component includes another component's header.
 *
 * Units: GPU core in percent of one card (1..99 shares one card, 100*k is k
 * whole cards), GPU memory in MiB per card. Objects are jansson values of
 * the Kubernetes API's JSON (core/v1 Pod, PodSpec, PodTemplateSpec).
 *
 * Errors are 0 or a negative code (EGPU_ESYNTAX, EGPU_ERANGE, -ENOMEM) with
 * the field named in err (see egpu/core.h).
 */
#ifndef EGPU_API_H
#define EGPU_API_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "egpu/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Names (src/api/names.c)                                                  */

/* The API group, its one served version (a CRD's versions[].name, the URL
 * segment after /apis/elasticgpu.io/), and the two as an object's
 * apiVersion. Every elasticgpu.io name below is built from the group. */
#define EGPU_API_GROUP            "elasticgpu.io"
#define EGPU_API_VERSION_NAME     "v1alpha1"
#define EGPU_API_VERSION          EGPU_API_GROUP "/" EGPU_API_VERSION_NAME
/* The DRA driver's name (resource.k8s.io/v1: a ResourceSlice's spec.driver,
 * a DeviceClass selector's device.driver, the kubelet plugin's registration
 * name, the CDI vendor k8s.<driver>): one name for every DRA-mode object. */
#define EGPU_API_DRA_DRIVER       "gpu." EGPU_API_GROUP
/* DRA mode's contract (resource.k8s.io/v1), used by the agent's
 * ResourceSlice, the DeviceClasses of deploy/ and the chart, the webhook's
 * ResourceClaimTemplates and the budgets on claims:
 * - the two capacities of each device: cores, percent of the card's time
 *   (0..100, step 1), and memory, a quantity of bytes (the card's MiB, step
 *   1Mi); a request naming neither takes the whole card (requestPolicy
 *   default);
 * - the DeviceClasses: one for shares (a request with capacity), one for
 *   whole cards (the class whose extendedResourceName is elasticgpu.io/gpu);
 * - the node label that picks the agent's mode: value "dra" runs the DRA
 *   DaemonSet (egpu-agent --mode dra) on that node, absent or any other
 *   value the device-plugin DaemonSet. One mode per node. */
#define EGPU_API_DRA_CAP_CORES    "cores"
#define EGPU_API_DRA_CAP_MEMORY   "memory"
#define EGPU_API_DRA_CLASS_SHARE  "gpu-share." EGPU_API_GROUP
#define EGPU_API_DRA_CLASS_WHOLE  "gpu." EGPU_API_GROUP
#define EGPU_LABEL_AGENT_MODE     EGPU_API_GROUP "/agent-mode"
#define EGPU_LABEL_AGENT_MODE_DRA "dra"
#define EGPU_SCHEDULER_NAME       "elastic-gpu-scheduler"      /* spec.schedulerName of GPU pods */
#define EGPU_RES_GPU_CORE         EGPU_API_GROUP "/gpu-core"   /* percent of one card */
#define EGPU_RES_GPU_MEMORY       EGPU_API_GROUP "/gpu-memory" /* MiB per card */
#define EGPU_RES_DRA              EGPU_API_GROUP "/dra"
/* The scheduler's decision, written by bind (format below). */
#define EGPU_ANN_ASSIGNED         EGPU_API_GROUP "/assigned"
/* Written by the node agent once the kubelet allocated the pod's devices. */
#define EGPU_ANN_ALLOCATED        EGPU_API_GROUP "/allocated"
/* Per-pod overrides of the tier policies (egpu_policy_parse names), and the
 * allowed GPU models ("A|B", as GPU objects' spec.model). */
#define EGPU_ANN_NODE_POLICY      EGPU_API_GROUP "/node-policy"
#define EGPU_ANN_CARD_POLICY      EGPU_API_GROUP "/card-policy"
#define EGPU_ANN_GPU_MODEL        EGPU_API_GROUP "/gpu-model"
/* The compute ceiling of every shared container of the pod, percent of a
 * card, from its gpu-core up to 100: the interposer lets it burst up to this
 * while the card is otherwise idle (absent: no burst). */
#define EGPU_ANN_CORE_LIMIT       EGPU_API_GROUP "/gpu-core-limit"
/* egpuc.elasticgpu.io/<container>: <claim name>: the container's GPU comes
 * from that ElasticGPUClaim in the pod's namespace. */
#define EGPU_ANN_CLAIM_PREFIX     "egpuc." EGPU_API_GROUP "/"
/* On an ElasticGPUClaim of a WaitForFirstConsumer class: where the scheduler
 * placed the first pod that uses it, for the controller to provision there
 * (as volume.kubernetes.io/selected-node on a PVC). The node's name, and
 * the GPU object names of the card(s), comma-separated. */
#define EGPU_ANN_SELECTED_NODE    EGPU_API_GROUP "/selected-node"
#define EGPU_ANN_SELECTED_GPUS    EGPU_API_GROUP "/selected-gpus"

#define EGPU_K8S_NAME_MAX       254 /* DNS subdomain 253 + NUL */
#define EGPU_CONTAINER_NAME_MAX 64  /* DNS label 63 + NUL */
#define EGPU_MODEL_MAX          256 /* elasticgpu.io/gpu-model value, bytes incl. NUL */

/* The text of a JSON string usable as C text: v's value, or NULL when v is
 * not a string or holds a NUL character (which C would cut short). Borrowed
 * from v. */
const char *egpu_api_str(const json_t *v);

/* o[key] as an object (o an object, or NULL): *out borrowed from o, or
 * NULL when the member is absent or null. Returns 0, or EGPU_ESYNTAX for
 * another type, naming path followed by key (path: the JSON path of o with
 * a trailing '.', or "" at the top). */
int egpu_api_field_obj(const json_t *o, const char *key, const char *path, const json_t **out,
                       struct egpu_error *err);

/* The text of o[key] copied into dst (len bytes, NUL-terminated; "" when
 * the member is absent or null). Returns 0, or EGPU_ESYNTAX naming path
 * followed by key (path as for egpu_api_field_obj) when it is another type,
 * holds a NUL, is len bytes or longer, or (required) is absent, null or
 * empty. */
int egpu_api_field_text(const json_t *o, const char *key, const char *path, bool required,
                        char *dst, size_t len, struct egpu_error *err);

/* Whether pod (a v1 Pod, or NULL) has finished: status.phase Succeeded or
 * Failed, where the kubelet leaves a pod whose containers all ended for
 * good (core/v1 PodPhase). A pod without a readable phase has not. */
bool egpu_api_pod_finished(const json_t *pod);

/* ------------------------------------------------------------------------ */
/* The assignment annotation (src/api/assigned.c)                           */

struct egpu_assigned_container {
    char name[EGPU_CONTAINER_NAME_MAX];
    uint32_t core_pct; /* per card: 1..99, or 100 for whole cards */
    uint32_t mem_mib;  /* per card */
    uint32_t ncards;
    uint32_t first_card; /* its cards are uuids[first_card .. first_card + ncards) */
};

/* elasticgpu.io/assigned, decoded. */
struct egpu_assigned {
    char node[EGPU_K8S_NAME_MAX];
    uint32_t ncontainers;
    struct egpu_assigned_container containers[EGPU_CONTAINERS_MAX];
    uint32_t ncards;
    char uuids[EGPU_PICK_SHARES_MAX][EGPU_UUID_MAX];
};

/* Encode a as the annotation's JSON text, e.g.
 * {"node":"gpu-node-1","containers":[{"name":"trainer","core":30,"memory":4096,
 *  "gpus":["GPU-8f6..."]}]}. Returns a string the caller egpu_free()s, or NULL
 * when out of memory. */
char *egpu_assigned_encode(const struct egpu_assigned *a);

/* Decode the annotation's text into *out. Returns 0, or EGPU_ESYNTAX naming
 * the bad field (not JSON, missing or mistyped field, too many containers or
 * cards, values out of range). *out written only on success. */
int egpu_assigned_decode(const char *text, struct egpu_assigned *out,
                         struct egpu_error *err) EGPU_MUST_CHECK;

/* ------------------------------------------------------------------------ */
/* A pod's GPU request (src/api/request.c)                                  */

/* One container's Elastic GPU ask. */
struct egpu_api_gpu_ask {
    int64_t core_pct; /* 0: the container asks no GPU; else 1..99 or 100*k */
    int64_t mem_mib;  /* per card; 0 when has_mem is false */
    bool has_mem;     /* elasticgpu.io/gpu-memory given */
};

/* Read container's (a core/v1 Container) elasticgpu.io/gpu-core and
 * gpu-memory: each from resources.requests, else resources.limits (the API
 * server copies limits into missing requests of extended resources). name
 * is the container's name for messages. With strict (the webhook), requests
 * and limits that are both given must be equal, and gpu-memory on whole
 * cards is refused (a whole card comes with all its memory, unlimited).
 * Errors read as the user sees them, e.g.
 *   container "train": elasticgpu.io/gpu-core is 150; allowed: 1..99 to
 *   share one card, or a multiple of 100 for whole cards
 * Returns 0 (out->core_pct 0 when no GPU is asked), EGPU_ESYNTAX (not a
 * quantity, a mistyped map) or EGPU_ERANGE (a value outside the allowed
 * ones, gpu-memory without gpu-core, requests != limits). *out written only
 * on success. */
int egpu_api_container_gpu(const json_t *container, const char *name, bool strict,
                           struct egpu_api_gpu_ask *out, struct egpu_error *err) EGPU_MUST_CHECK;

/* An init container may not ask for GPUs (its card would be held for the
 * pod's whole life). Returns 0 when container (an initContainers entry)
 * asks none, else EGPU_ERANGE ("init container \"setup\": asks
 * elasticgpu.io/gpu-core; allowed: GPUs in regular containers only ...")
 * or egpu_api_container_gpu's errors, prefixed "init ". */
int egpu_api_init_container_gpu(const json_t *container, const char *name,
                                struct egpu_error *err) EGPU_MUST_CHECK;

/* The per-pod annotations the scheduler and agent read, decoded. */
struct egpu_api_pod_annotations {
    bool has_node_policy, has_card_policy;
    enum egpu_policy_kind node_policy, card_policy;
    char gpu_model[EGPU_MODEL_MAX]; /* "" = any model */
    uint32_t core_limit;            /* elasticgpu.io/gpu-core-limit, 1..100; 0 = absent */
};

/* Decode annotations (metadata.annotations of a pod: an object, or NULL /
 * JSON null for none) into *out. Returns 0, or EGPU_ESYNTAX / EGPU_ERANGE
 * naming the annotation, its value and the allowed values (e.g.
 * "annotation elasticgpu.io/node-policy is \"pack\"; allowed: binpack,
 * spread, fgd, ..."). *out written only on success. */
int egpu_api_pod_annotations(const json_t *annotations, struct egpu_api_pod_annotations *out,
                             struct egpu_error *err) EGPU_MUST_CHECK;

/* What the cluster has, for the checks that depend on it. */
struct egpu_api_facts {
    uint32_t max_card_mib;     /* largest card's memory, MiB; 0 = unknown (not checked) */
    size_t nmodels;            /* models known; 0 = unknown (not checked) */
    const char *const *models; /* GPU objects' spec.model values, borrowed */
    /* MiB per gpu-core percent the webhook gives a share of one card that
     * names no gpu-memory (--default-memory-per-core; the pods made from a
     * template get it when created); 0 = none: such a share is refused */
    uint32_t default_mem_per_core_mib;
};

#define EGPU_API_PROBLEMS_MAX 8
#define EGPU_API_PROBLEM_MAX  512

/* Every problem found, each a whole sentence for the user. */
struct egpu_api_problems {
    size_t n;    /* problems kept, <= EGPU_API_PROBLEMS_MAX */
    size_t more; /* problems found beyond those kept */
    char msg[EGPU_API_PROBLEMS_MAX][EGPU_API_PROBLEM_MAX];
};

/* Validate a pod's GPU request as the webhook admits it: spec is a core/v1
 * PodSpec, annotations its pod's (or template's) metadata.annotations (may
 * be NULL). Every container and init container is read with
 * egpu_api_container_gpu(strict); init containers may not ask for GPUs;
 * gpu-memory must fit the largest card known; a share of one card (gpu-core
 * 1..99) must name its gpu-memory unless facts->default_mem_per_core_mib
 * (its memory would otherwise be neither booked nor limited: "container
 * \"x\": elasticgpu.io/gpu-core is 30 (a share of one card) without
 * elasticgpu.io/gpu-memory; allowed: ..."); the annotations must decode,
 * gpu-core-limit must lie between each shared container's gpu-core and 100,
 * and gpu-model must name models the cluster has (facts may be NULL: those
 * two checks are then skipped). Appends each problem to *out (which the
 * caller zeroes). Returns the number of problems found in this call. */
size_t egpu_api_pod_validate(const json_t *spec, const json_t *annotations,
                             const struct egpu_api_facts *facts, struct egpu_api_problems *out);

/* Give each container of spec (a PodSpec, edited in place) that asks a
 * share of one card (gpu-core 1..99, as egpu_api_container_gpu reads it)
 * and no gpu-memory the operator's default: gpu-memory core_pct *
 * mib_per_core MiB (a quantity string) in resources.limits, and in
 * resources.requests when that map holds the gpu-core. One sentence per
 * container set goes to *notes ("container \"x\": elasticgpu.io/gpu-memory
 * set to 12000 MiB, ..."), for the webhook's warnings. Containers that do
 * not decode, whole cards and init containers are left alone (validation
 * refuses them). Returns the number of containers set, or -ENOMEM. */
int egpu_api_share_memory_default(json_t *spec, uint32_t mib_per_core,
                                  struct egpu_api_problems *notes) EGPU_MUST_CHECK;

/* EGPU_RES_DRA is the marker egpu-webhook --mode dra gives each container
 * whose GPU it moved to a ResourceClaim, "1" in requests and limits:
 * kube-scheduler calls the extender only for a pod that asks one of its
 * managedResources (deploy/scheduler, where this one is ignoredByScheduler:
 * true). It is no GPU ask: no node advertises it and the kubelet drops it
 * from the pod's requests.
 *
 * Is name (a resource name, NUL-terminated) an elasticgpu.io resource that
 * asks for a GPU: any name of the group but the marker EGPU_RES_DRA? */
bool egpu_api_res_asks_gpu(const char *name);

/* Does spec (a PodSpec) ask any container or init container for an
 * elasticgpu.io resource (egpu_api_res_asks_gpu: the marker EGPU_RES_DRA is
 * not one), in requests or limits? */
bool egpu_api_spec_wants_gpu(const json_t *spec);

/* Does a pod ask a GPU in any way the mutating routes turn into elasticgpu.io
 * resources? spec: its PodSpec; annotations: its metadata.annotations (may
 * be NULL; a value that is not an object counts as none); both borrowed.
 * True when a container or init container names, in resources.requests or
 * limits, an elasticgpu.io resource (egpu_api_res_asks_gpu: not the marker
 * EGPU_RES_DRA, which /mutate wrote on a GPU pod it already rewrote) or a
 * compatible name
 * (egpu_api_compat_known; HAMi's nvidia.com/gpucores and gpumem only with
 * nvidia; nvidia.com/gpu alone never), or an annotation starts with
 * EGPU_ANN_CLAIM_PREFIX (a container using an ElasticGPUClaim). The names
 * are the ones the webhook configurations' matchConditions list
 * (deploy/webhook/webhooks.yaml); values are not read, so a malformed
 * quantity still counts as asked. */
bool egpu_api_pod_asks_gpu(const json_t *spec, const json_t *annotations, bool nvidia);

/* ------------------------------------------------------------------------ */
/* Compatible names (src/api/compat.c)                                      */

/* Which families of other systems' names to rewrite. */
struct egpu_api_compat_opts {
    bool nvidia;               /* HAMi's nvidia.com/gpucores and gpumem (with nvidia.com/gpu
                                  as the card count): off by default, since NVIDIA's device
                                  plugin may own nvidia.com names in the same cluster */
    uint32_t aliyun_mem_mib;   /* MiB in one unit of aliyun.com/gpu-mem; 0 = 1024 (GiB) */
    uint32_t memory_only_core; /* gpu-core given to a container that asks GPU memory
                                  only (gpushare, HAMi without gpucores), percent;
                                  0 = 1. Such a pod also gets gpu-core-limit 100,
                                  so it may use the whole card while it is idle, as
                                  on the system it came from */
};

/* One rewrite of a container's resource: in containers[container] (or
 * initContainers when init), in requests or limits, name `from` is removed
 * ("" = nothing removed: a gpu-core added to a memory-only ask) and `to`
 * (NULL: nothing added) set to `value`. Edits of one container come
 * together, its requests' before its limits'. */
struct egpu_api_compat_edit {
    bool init;
    uint32_t container;
    bool limits;         /* false: resources.requests */
    char from[128];      /* the other system's resource name */
    char from_value[32]; /* its quantity as the pod wrote it, in its units, e.g. "4" */
    const char *to;      /* EGPU_RES_GPU_CORE, EGPU_RES_GPU_MEMORY, or NULL */
    char value[32];      /* the converted quantity, e.g. "4096" */
};

/* One rewrite of an annotation: `from` removed ("" = nothing removed), `to`
 * set to value (NULL: nothing added). egpu_api_compat_convert makes them
 * only when the pod does not already have `to`; egpu_api_compat_apply sets
 * `to` as told. */
struct egpu_api_compat_annotation {
    char from[128];
    const char *to;
    char value[32];
};

#define EGPU_API_COMPAT_EDITS_MAX 128

/* What converting one pod spec does. About 31 KiB: allocate it, rather
 * than putting it on a server thread's stack. */
struct egpu_api_compat_result {
    size_t nedits;
    struct egpu_api_compat_edit edits[EGPU_API_COMPAT_EDITS_MAX];
    size_t nannotations;
    struct egpu_api_compat_annotation annotations[8];
    size_t nwarnings; /* one sentence per converted name, for AdmissionResponse.warnings;
                         the first EGPU_API_PROBLEMS_MAX are kept, the rest dropped */
    char warnings[EGPU_API_PROBLEMS_MAX][EGPU_API_PROBLEM_MAX];
};

/* Work out the rewrites that turn other systems' names in spec (a PodSpec)
 * and annotations (its metadata.annotations, may be NULL) into elasticgpu.io
 * ones, with units converted (tencent.com/vcuda-memory and
 * inspur.com/vcuda-memory: 1 = 256 MiB; aliyun.com/gpu-mem: opts'
 * unit; the rest: percent and MiB as ours). Reads only; the caller applies
 * the edits (egpu_api_compat_apply, or as JSON Patch operations). A
 * container that already asks an elasticgpu.io resource keeps it and its
 * other names are left alone. Writes *out (zeroed first). Returns 0, or
 * EGPU_ERANGE / EGPU_ESYNTAX naming the container, the other system's name,
 * its value and why it has no equivalent (e.g. nvidia.com/gpu 2 with
 * nvidia.com/gpumem: several shared cards; aliyun.com/gpu-count 2 with
 * aliyun.com/gpu-mem). gpushare's card count aliyun.com/gpu-count (1) beside
 * aliyun.com/gpu-mem is removed, as HAMi's nvidia.com/gpu is: no device
 * plugin advertises it once gpushare is gone. Each warning names the unit
 * of both sides where they differ ("aliyun.com/gpu-mem 4 (GiB) rewritten to
 * elasticgpu.io/gpu-memory 4096 (MiB)"), else the one unit. */
int egpu_api_compat_convert(const json_t *spec, const json_t *annotations,
                            const struct egpu_api_compat_opts *opts,
                            struct egpu_api_compat_result *out,
                            struct egpu_error *err) EGPU_MUST_CHECK;

/* Apply res's edits to spec and its annotation rewrites to annotations (a
 * JSON object, created by the caller when absent; may be NULL when res has
 * no annotation rewrites), in place. Returns 0, -EINVAL (res does not fit
 * spec) or -ENOMEM. */
int egpu_api_compat_apply(json_t *spec, json_t *annotations,
                          const struct egpu_api_compat_result *res) EGPU_MUST_CHECK;

/* Is name one of the compatible names egpu_api_compat_convert rewrites
 * (resources and annotations; with nvidia, HAMi's too)? */
bool egpu_api_compat_known(const char *name, bool nvidia);

/* ------------------------------------------------------------------------ */
/* Claims, classes and ElasticGPUs (src/api/objects.c, claim.c, class.c,    */
/* elasticgpu.c, fit.c)                                                     */
/*
 * The three objects of the claim model (DESIGN.md section 3), decoded from
 * the API server's JSON into plain structs, validated, and rendered back. The
 * CRDs in deploy/crds are the one source of their shape: every field read
 * here is in the CRD's schema with the same type, limits and enums, and the
 * CRD's CEL rules say the same as the checks here
 * (tests/integration/test_crds.py holds the two together).
 *
 * Decoders take the object (a json_t of the whole API object, as GET or a
 * watch event gives it), zero-fill *out, and write it only on success: two
 * decodings of equal objects compare equal with memcmp. Fields that are not
 * ours (labels, managedFields, unknown spec fields) are ignored, as a client
 * of a newer CRD version would. Errors name the field by its path in the
 * manifest, the value and the allowed values, e.g.
 *   spec.resources.requests.elasticgpu.io/gpu-core is 150; allowed: 1..99 to
 *   share one card, or a multiple of 100 for whole cards
 * and are EGPU_ESYNTAX (a field of the wrong JSON type, a missing required
 * field, text too long for its buffer), EGPU_ERANGE (a value outside the
 * allowed ones, a rule between fields) or -ENOMEM.
 *
 * Encoders (egpu_api_*_encode) return a new JSON object (the caller
 * json_decref()s it), or NULL when out of memory: apiVersion, kind,
 * metadata (only the fields below; empty ones left out), spec and status, so
 * the result can be POSTed (drop status, or not: the API server ignores it
 * on create) or PUT to .../status with its resourceVersion. decode(encode(x))
 * equals x for every x a decoder produced.
 */

/* Kinds and plurals (the URL segment under /apis/elasticgpu.io/v1alpha1). */
#define EGPU_KIND_GPU                   "GPU"
#define EGPU_KIND_ELASTICGPU            "ElasticGPU"
#define EGPU_KIND_ELASTICGPUCLAIM       "ElasticGPUClaim"
#define EGPU_KIND_ELASTICGPUCLASS       "ElasticGPUClass"
#define EGPU_PLURAL_GPUS                "gpus"
#define EGPU_PLURAL_ELASTICGPUS         "elasticgpus"       /* cluster-scoped */
#define EGPU_PLURAL_ELASTICGPUCLAIMS    "elasticgpuclaims"  /* namespaced */
#define EGPU_PLURAL_ELASTICGPUCLASSES   "elasticgpuclasses" /* cluster-scoped */
#define EGPU_KIND_GPUBUDGET             "GPUBudget"
#define EGPU_PLURAL_GPUBUDGETS          "gpubudgets" /* namespaced */
/* Held by the webhook on a GPU pod of a namespace with a GPUBudget, until the
 * controller has metered the pod to its end: a pod deleted while the
 * controller is down is still charged up to the second it ended. */
#define EGPU_FINALIZER_METERING         EGPU_API_GROUP "/metering"
/* A new resource of claims: compute in TFLOPS (a positive JSON number, at
 * most 1000000; kept in thousandths), which becomes the core percent of the
 * card the claim lands on (egpu_api_tflops_to_core). */
#define EGPU_RES_GPU_TFLOPS             EGPU_API_GROUP "/gpu-tflops"
/* The provisioners: a slice (core and memory) of one card, or whole cards. */
#define EGPU_PROVISIONER_GPUSHARE       "gpushare.provisioner." EGPU_API_GROUP
#define EGPU_PROVISIONER_PHYSICAL       "physical.provisioner." EGPU_API_GROUP
/* Held on a claim while a pod uses it, as kubernetes.io/pvc-protection. */
#define EGPU_FINALIZER_CLAIM_PROTECTION EGPU_API_GROUP "/claim-protection"
/* On an ElasticGPUClass: "true" makes it the class of claims that name none
 * (as storageclass.kubernetes.io/is-default-class); any other value: not. */
#define EGPU_ANN_DEFAULT_CLASS          EGPU_API_GROUP "/is-default-class"

#define EGPU_NAMESPACE_MAX      64      /* DNS label 63 + NUL */
#define EGPU_API_UID_MAX        64      /* metadata.uid, claimRef.uid */
#define EGPU_API_RV_MAX         64      /* metadata.resourceVersion */
#define EGPU_API_TIME_MAX       64      /* RFC 3339 text, e.g. "2026-07-24T09:31:03Z" */
#define EGPU_API_FINALIZER_MAX  320     /* qualified name: prefix 253 + '/' + name 63 + NUL */
#define EGPU_API_FINALIZERS_MAX 16      /* finalizers kept; more is EGPU_ESYNTAX */
#define EGPU_API_TFLOPS_MAX     1000000 /* TFLOPS of a claim or a card's peak */

/* The metadata the controller reads and writes back. */
struct egpu_api_meta {
    char ns[EGPU_NAMESPACE_MAX]; /* "" for cluster-scoped objects */
    char name[EGPU_K8S_NAME_MAX];
    char uid[EGPU_API_UID_MAX];                 /* "" before create */
    char resource_version[EGPU_API_RV_MAX];     /* "" before create */
    int64_t generation;                         /* 0 before create */
    char deletion_timestamp[EGPU_API_TIME_MAX]; /* "" unless being deleted */
    uint32_t nfinalizers;
    char finalizers[EGPU_API_FINALIZERS_MAX][EGPU_API_FINALIZER_MAX];
};

/* Does meta hold finalizer name? */
bool egpu_api_meta_has_finalizer(const struct egpu_api_meta *meta, const char *name);

enum egpu_api_cond_status {
    EGPU_API_COND_TRUE,
    EGPU_API_COND_FALSE,
    EGPU_API_COND_UNKNOWN,
};

#define EGPU_API_COND_TYPE_MAX    64   /* type, at most 63 bytes */
#define EGPU_API_COND_REASON_MAX  128  /* reason, CamelCase, 1..127 bytes */
#define EGPU_API_COND_MESSAGE_MAX 1024 /* message, at most 1023 bytes */
#define EGPU_API_CONDITIONS_MAX   8

/* A metav1.Condition (list keyed by type: two with one type are refused). */
struct egpu_api_condition {
    char type[EGPU_API_COND_TYPE_MAX];
    enum egpu_api_cond_status status;
    int64_t observed_generation; /* 0: not given */
    char last_transition_time[EGPU_API_TIME_MAX];
    char reason[EGPU_API_COND_REASON_MAX];
    char message[EGPU_API_COND_MESSAGE_MAX];
};

/* "True", "False", "Unknown". */
const char *egpu_api_cond_status_name(enum egpu_api_cond_status s);

/* Set condition type in conds[0..*n) (at most EGPU_API_CONDITIONS_MAX; the
 * last is dropped to make room for a new type) to status, reason and
 * message, observedGeneration generation, as the API conventions say:
 * lastTransitionTime becomes now (RFC 3339 text) only when the status
 * changes or the condition is new. Returns true when anything changed (the
 * object needs a write), false when it already said so (src/api/objects.c). */
bool egpu_api_condition_set(struct egpu_api_condition *conds, uint32_t *n, const char *type,
                            enum egpu_api_cond_status status, const char *reason,
                            const char *message, int64_t generation, const char *now);

enum egpu_api_provisioner {
    EGPU_API_PROVISIONER_GPUSHARE, /* gpuShare: a slice of one card, gpu-core 1..99 */
    EGPU_API_PROVISIONER_PHYSICAL, /* physicalGPU: whole cards, gpu-core 100 per card */
};
/* EGPU_PROVISIONER_GPUSHARE or EGPU_PROVISIONER_PHYSICAL. */
const char *egpu_api_provisioner_name(enum egpu_api_provisioner p);

enum egpu_api_reclaim {
    EGPU_API_RECLAIM_DELETE, /* the default, as StorageClass's */
    EGPU_API_RECLAIM_RETAIN,
};
const char *egpu_api_reclaim_name(enum egpu_api_reclaim r); /* "Delete", "Retain" */

enum egpu_api_binding_mode {
    EGPU_API_BINDING_IMMEDIATE, /* the default */
    EGPU_API_BINDING_WAIT_FOR_FIRST_CONSUMER,
};
/* "Immediate", "WaitForFirstConsumer". */
const char *egpu_api_binding_mode_name(enum egpu_api_binding_mode m);

/* ---- The claims a pod uses (src/api/podclaims.c) ---- */

/* Is s a DNS-1123 label (container and namespace names: [a-z0-9-], at most
 * 63 bytes, alphanumeric at both ends)? A subdomain (object names: labels
 * joined by '.', at most 253 bytes)? NULL is neither. */
bool egpu_api_dns_label(const char *s);
bool egpu_api_dns_subdomain(const char *s);

#define EGPU_API_POD_CLAIMS_MAX EGPU_CONTAINERS_MAX

/* One egpuc.elasticgpu.io/<container>: <claim> annotation. */
struct egpu_api_pod_claim {
    char container[EGPU_CONTAINER_NAME_MAX]; /* <container>, a DNS label */
    char claim[EGPU_K8S_NAME_MAX];           /* an ElasticGPUClaim of the pod's namespace */
};

/* The claim annotations of pod (a v1 Pod, borrowed; only
 * metadata.annotations and metadata.namespace are read) into out[0..max),
 * *n of them, in the annotations' order. A value "<ns>/<claim>" is accepted
 * when ns is the pod's own namespace. Whether the containers exist is the
 * caller's to check. Returns 0; EGPU_ESYNTAX when annotations is not an
 * object or a value is not text; EGPU_ERANGE, the annotation named, for a
 * key that is not a container name, a value that is not a claim name or is
 * in another namespace, one claim used by two containers, or more than max
 * claims. *n is 0 on error; out[] may be partly written. */
int egpu_api_pod_claims(const json_t *pod, struct egpu_api_pod_claim *out, size_t max, size_t *n,
                        struct egpu_error *err) EGPU_MUST_CHECK;

/* The claim container uses in pc[0..n), or NULL (borrowed from pc). */
const char *egpu_api_pod_claim_of(const struct egpu_api_pod_claim *pc, size_t n,
                                  const char *container);

/* ---- ElasticGPUClaim (namespaced) ---- */

enum egpu_api_claim_phase {
    EGPU_API_CLAIM_PENDING, /* also what an absent status.phase reads as */
    EGPU_API_CLAIM_BOUND,
    EGPU_API_CLAIM_LOST,
};
const char *egpu_api_claim_phase_name(enum egpu_api_claim_phase p); /* "Pending", ... */

struct egpu_api_claim {
    struct egpu_api_meta meta; /* ns and name required */
    /* spec.resources.requests: exactly one of gpu-core and gpu-tflops */
    int64_t core_pct;                   /* elasticgpu.io/gpu-core: 1..99 or 100*k (k <= 64); 0 when
                                           tflops_milli is given */
    int64_t tflops_milli;               /* elasticgpu.io/gpu-tflops in thousandths of a TFLOPS,
                                           1..10^9; 0 when core_pct is given */
    int64_t mem_mib;                    /* elasticgpu.io/gpu-memory, MiB, >= 1; 0 when !has_mem */
    bool has_mem;                       /* not with whole cards (core_pct >= 100) */
    char class_name[EGPU_K8S_NAME_MAX]; /* spec.elasticGPUClassName; "" = the default class */
    char egpu_name[EGPU_K8S_NAME_MAX];  /* spec.elasticGPUName; "" = not chosen yet */
    /* status */
    enum egpu_api_claim_phase phase;
    char bound_egpu[EGPU_K8S_NAME_MAX]; /* status.elasticGPUName */
    bool has_cap_core, has_cap_mem;     /* status.capacity given */
    int64_t cap_core_pct;               /* what the bound ElasticGPU gives: percent */
    int64_t cap_mem_mib;                /* and MiB */
    int64_t observed_generation;        /* 0: not given */
    uint32_t nconditions;
    struct egpu_api_condition conditions[EGPU_API_CONDITIONS_MAX];
};

/* Decode an ElasticGPUClaim. Rules beyond the JSON types: gpu-core 1..99 or
 * a multiple of 100 up to 6400; exactly one of gpu-core and gpu-tflops;
 * gpu-tflops > 0 and <= EGPU_API_TFLOPS_MAX (rounded up to a thousandth);
 * gpu-memory >= 1 and not with whole cards. Returns 0, EGPU_ESYNTAX,
 * EGPU_ERANGE or -ENOMEM (see above). *out (about 16 KiB) written only on
 * success. */
int egpu_api_claim_decode(const json_t *obj, struct egpu_api_claim *out,
                          struct egpu_error *err) EGPU_MUST_CHECK;
/* Render c as an ElasticGPUClaim (new reference; NULL when out of memory). */
json_t *egpu_api_claim_encode(const struct egpu_api_claim *c);

/* ---- ElasticGPUClass (cluster-scoped; fields at the top level) ---- */

#define EGPU_API_SELECTOR_REQS_MAX   8    /* requirements of a nodeSelector */
#define EGPU_API_SELECTOR_VALUES_MAX 8    /* values of one in/notin requirement */
#define EGPU_API_LABEL_KEY_MAX       320  /* prefix 253 + '/' + name 63 + NUL */
#define EGPU_API_LABEL_VALUE_MAX     64   /* 63 + NUL */
#define EGPU_API_SELECTOR_TEXT_MAX   1024 /* parameters.nodeSelector, bytes incl. NUL */
#define EGPU_API_CLASS_TFLOPS_MAX    16   /* tflops.<model> parameters */
#define EGPU_API_PARAM_VALUE_MAX     1024 /* any parameter's value, bytes incl. NUL */

enum egpu_api_selector_op {
    EGPU_API_SEL_EQ,     /* key=value (also written key==value) */
    EGPU_API_SEL_NE,     /* key!=value: true when the label is absent too */
    EGPU_API_SEL_IN,     /* key in (v1,v2) */
    EGPU_API_SEL_NOTIN,  /* key notin (v1,v2): true when the label is absent too */
    EGPU_API_SEL_EXISTS, /* key */
    EGPU_API_SEL_ABSENT, /* !key */
};

/* A label selector in kubectl's text form, parsed: requirements ANDed. */
struct egpu_api_selector {
    uint32_t nreqs;
    struct egpu_api_selector_req {
        enum egpu_api_selector_op op;
        char key[EGPU_API_LABEL_KEY_MAX];
        uint32_t nvalues; /* EQ and NE: 1; IN and NOTIN: 1..8; EXISTS and ABSENT: 0 */
        char values[EGPU_API_SELECTOR_VALUES_MAX][EGPU_API_LABEL_VALUE_MAX];
    } reqs[EGPU_API_SELECTOR_REQS_MAX];
};

/* Parse text, requirements separated by commas, each one of: key, !key,
 * key=value, key==value, key!=value, key in (v1,v2), key notin (v1,v2)
 * (spaces around words allowed; keys [A-Za-z0-9._/-], at most 317 bytes;
 * values [A-Za-z0-9._-], at most 63 bytes, may be empty after = and !=).
 * "" is the empty selector, which matches every node. Returns 0 or
 * EGPU_ERANGE naming field (e.g. "parameters.nodeSelector"), the text and
 * the grammar. *out written only on success. */
int egpu_api_selector_parse(const char *text, const char *field, struct egpu_api_selector *out,
                            struct egpu_error *err) EGPU_MUST_CHECK;
/* sel in canonical text ("k=v,k2 in (a,b)"), NUL-terminated, into buf of len
 * bytes. Returns the length it needs (as snprintf): parsing that text gives
 * sel back. */
size_t egpu_api_selector_format(const struct egpu_api_selector *sel, char *buf, size_t len);
/* Do labels (a node's metadata.labels: object, or NULL / JSON null for none)
 * satisfy every requirement of sel? */
bool egpu_api_selector_matches(const struct egpu_api_selector *sel, const json_t *labels);
/* A node's value of label key (a C string borrowed from what ud holds), or
 * NULL when it has none. */
typedef const char *(*egpu_api_label_fn)(const void *ud, const char *key);
/* egpu_api_selector_matches over labels read through label(ud, key), for a
 * caller that keeps a node's labels in a form of its own (the scheduler's
 * cache packs them). */
bool egpu_api_selector_matches_fn(const struct egpu_api_selector *sel, egpu_api_label_fn label,
                                  const void *ud);

/* One tflops.<model> parameter: the model's peak, in thousandths of a TFLOPS. */
struct egpu_api_class_peak {
    char model[EGPU_MODEL_MAX];
    int64_t tflops_milli; /* 1..10^9 */
};

struct egpu_api_class {
    struct egpu_api_meta meta; /* name required; ns "" */
    bool is_default;           /* annotation EGPU_ANN_DEFAULT_CLASS is "true" */
    enum egpu_api_provisioner provisioner;
    enum egpu_api_reclaim reclaim_policy;    /* absent: Delete */
    enum egpu_api_binding_mode binding_mode; /* absent: Immediate */
    /* parameters (a map of strings; any other key is refused):
     *   models:       "A|B", the card models it may use ("" or absent: any)
     *   nodeSelector: a label selector on nodes (egpu_api_selector_parse)
     *   policy:       egpu_policy_parse's names, for both the node and the card
     *   tflops.<model>: "<peak TFLOPS>", digits with up to 3 decimals, > 0 */
    char models[EGPU_MODEL_MAX];
    bool has_node_selector;
    struct egpu_api_selector node_selector;
    bool has_policy;
    enum egpu_policy_kind policy;
    uint32_t npeaks;
    struct egpu_api_class_peak peaks[EGPU_API_CLASS_TFLOPS_MAX]; /* in the object's order */
};

/* Decode an ElasticGPUClass. Returns 0, EGPU_ESYNTAX, EGPU_ERANGE (e.g.
 * "provisioner is \"x\"; allowed: gpushare.provisioner.elasticgpu.io,
 * physical.provisioner.elasticgpu.io", "parameters has \"zone\"; allowed:
 * models, nodeSelector, policy, tflops.<model>") or -ENOMEM. *out (about 17
 * KiB) written only on success. */
int egpu_api_class_decode(const json_t *obj, struct egpu_api_class *out,
                          struct egpu_error *err) EGPU_MUST_CHECK;
/* Render c as an ElasticGPUClass (new reference; NULL when out of memory).
 * reclaimPolicy and bindingMode are always written. */
json_t *egpu_api_class_encode(const struct egpu_api_class *c);

/* May class c use cards of model (a GPU object's spec.model)? True when c
 * names no models, or one of its models is model, or model with a leading
 * "NVIDIA " removed (so "A100-SXM4-80GB" names "NVIDIA A100-SXM4-80GB"). */
bool egpu_api_class_allows_model(const struct egpu_api_class *c, const char *model);

/* A claim's class, as a PVC's StorageClass: the one it names, else the
 * default, the first by name (strcmp) of those annotated default. Does k
 * serve a claim naming class_name ("" = none) better than best (NULL: none
 * found yet)? Offer every class in any order, keeping the one this says
 * yes to: the same class comes out on every component. */
bool egpu_api_class_serves(const struct egpu_api_class *k, const char *class_name,
                           const struct egpu_api_class *best);

/* The sentence for a claim naming class_name ("" = none) that no class
 * serves, into buf (len bytes): "ElasticGPUClass \"fast\" not found", or
 * "no ElasticGPUClass is named and none is the default (annotation
 * elasticgpu.io/is-default-class: \"true\")". Returns buf. */
const char *egpu_api_class_missing(const char *class_name, char *buf, size_t len);
/* The peak TFLOPS c gives model (matched as egpu_api_class_allows_model
 * matches), in thousandths, or 0 when c has none for it. */
int64_t egpu_api_class_peak(const struct egpu_api_class *c, const char *model);

/* ---- ElasticGPU (cluster-scoped) ---- */

enum egpu_api_egpu_phase {
    EGPU_API_EGPU_PENDING, /* also what an absent status.phase reads as */
    EGPU_API_EGPU_AVAILABLE,
    EGPU_API_EGPU_BOUND,
    EGPU_API_EGPU_RELEASED,
    EGPU_API_EGPU_FAILED,
};
const char *egpu_api_egpu_phase_name(enum egpu_api_egpu_phase p); /* "Pending", ... */

#define EGPU_API_STATUS_TEXT_MAX 1024 /* status.reason and status.message, incl. NUL */

struct egpu_api_egpu {
    struct egpu_api_meta meta; /* name required; ns "" */
    /* spec */
    int64_t core_pct; /* capacity gpu-core: gpuShare 1..99, physicalGPU 100 per card */
    int64_t mem_mib;  /* capacity gpu-memory, MiB >= 1; gpuShare only */
    bool has_mem;
    char node_name[EGPU_K8S_NAME_MAX]; /* required */
    enum egpu_api_provisioner source;  /* gpuShare or physicalGPU: exactly one */
    uint32_t ngpus;                    /* gpuShare: 1; physicalGPU: 1..64, no repeats */
    char gpu_names[EGPU_NODE_GPUS_MAX][EGPU_K8S_NAME_MAX]; /* GPU object names */
    bool has_claim_ref;
    char claim_ns[EGPU_NAMESPACE_MAX], claim_name[EGPU_K8S_NAME_MAX];
    char claim_uid[EGPU_API_UID_MAX];   /* "" = any claim of that name (pre-bound by hand) */
    char class_name[EGPU_K8S_NAME_MAX]; /* spec.elasticGPUClassName; "" = none */
    bool has_reclaim_policy;            /* spec.reclaimPolicy (copied from the class) */
    enum egpu_api_reclaim reclaim_policy;
    /* status */
    enum egpu_api_egpu_phase phase;
    char reason[EGPU_API_STATUS_TEXT_MAX];
    char message[EGPU_API_STATUS_TEXT_MAX];
    int64_t observed_generation;
    char chosen_gpu[EGPU_K8S_NAME_MAX]; /* status.gpuName: the card chosen ("" = none) */
    char model[EGPU_MODEL_MAX];         /* status.model: that card's model */
    int64_t tflops_core_pct;            /* status.corePercent: a TFLOPS claim's percent of
                                           that card, 1..99; 0 = not given */
};

/* Decode an ElasticGPU. Beyond types: exactly one source; a gpuShare's
 * gpu-core 1..99; a physicalGPU's gpu-core 100 times its cards and no
 * gpu-memory; gpuNames without repeats; claimRef's namespace and name
 * non-empty. Returns 0, EGPU_ESYNTAX, EGPU_ERANGE or -ENOMEM. *out (about 25
 * KiB) written only on success. */
int egpu_api_egpu_decode(const json_t *obj, struct egpu_api_egpu *out,
                         struct egpu_error *err) EGPU_MUST_CHECK;
/* Render e as an ElasticGPU (new reference; NULL when out of memory). */
json_t *egpu_api_egpu_encode(const struct egpu_api_egpu *e);

/* ---- Binding helpers ---- */

/* A claim's TFLOPS as the core percent of a card of peak TFLOPS (both in
 * thousandths): 100 * tflops / peak, rounded up, so the claim gets at least
 * what it asked. Returns 0 with *core_pct 1..99, or EGPU_ERANGE when it
 * needs 100% or more of the card ("elasticgpu.io/gpu-tflops 400 is 129% of
 * a card of 312 TFLOPS; allowed: at most 99% of one card, 308.88 TFLOPS")
 * or when either value is <= 0. */
int egpu_api_tflops_to_core(int64_t tflops_milli, int64_t peak_milli, int64_t *core_pct,
                            struct egpu_error *err) EGPU_MUST_CHECK;

/* Why an ElasticGPU does not fit a claim; EGPU_API_FIT_OK when it does. */
enum egpu_api_fit {
    EGPU_API_FIT_OK,
    EGPU_API_FIT_DELETING, /* the ElasticGPU is being deleted */
    EGPU_API_FIT_TAKEN,    /* claimRef names another claim, or Bound with none */
    EGPU_API_FIT_PHASE,    /* neither Available nor Bound (Released, Failed, or Pending
                              without a claimRef carrying the claim's uid) */
    EGPU_API_FIT_CLASS,    /* spec.elasticGPUClassName is not the claim's class */
    EGPU_API_FIT_KIND,     /* its source is not what the class and the claim ask */
    EGPU_API_FIT_MODEL,    /* the class refuses the card's model, or has no peak for it */
    EGPU_API_FIT_TFLOPS,   /* the claim's TFLOPS need 100% or more of the card */
    EGPU_API_FIT_CORE,     /* capacity gpu-core below the claim's */
    EGPU_API_FIT_MEMORY,   /* capacity gpu-memory below the claim's */
};
/* "fits", "deleting", "taken", "phase", "class", "kind", "model", "tflops",
 * "core", "memory". */
const char *egpu_api_fit_name(enum egpu_api_fit f);

/* Does e fit claim c, under class cls (the claim's class, its class_name
 * resolved; NULL: no class, so no model or TFLOPS rules)? model is the
 * model of e's card(s) (a GPU object's spec.model; NULL or "" unknown: then
 * the class's models are not checked, and a TFLOPS claim does not fit).
 * Checked in the order of enum egpu_api_fit; the first failing check is
 * returned. A Pending ElasticGPU whose claimRef carries the claim's uid (one
 * provisioned for it, not yet Bound) passes the phase check, so its binding
 * gets the TFLOPS percent. The claim's kind: gpu-core 100*k or a physical class ask whole
 * cards (physicalGPU), anything else a share (gpuShare); the class's
 * provisioner must be that kind too. *core_pct (may be NULL) gets the
 * claim's gpu-core, its TFLOPS converted on model's peak, when it fits. */
enum egpu_api_fit egpu_api_egpu_fit(const struct egpu_api_egpu *e, const struct egpu_api_claim *c,
                                    const struct egpu_api_class *cls, const char *model,
                                    int64_t *core_pct);

/* The best of n ElasticGPUs (egpus[i], with models[i] its card's model;
 * models may be NULL) for claim c under cls: among those that fit, the least
 * gpu-core left over, then the least gpu-memory left over (none given: 0),
 * then the smallest name (strcmp), so the choice is the same on every
 * controller. Returns the index, or -1 when none fits. */
long egpu_api_best_fit(const struct egpu_api_egpu *const *egpus, const char *const *models,
                       size_t n, const struct egpu_api_claim *c, const struct egpu_api_class *cls);

/* ------------------------------------------------------------------------ */
/* Time (src/api/time.c)                                                    */

/* The seconds since the Unix epoch of RFC 3339 text as the API server
 * writes metav1.Time and MicroTime: "2026-07-24T09:31:03Z",
 * "2026-07-24T09:31:03.123456Z", "2026-07-24T11:31:03+02:00" (a fraction is
 * cut off: the second it falls in; none before 1970-01-01T00:00:00Z).
 * Returns 0, or EGPU_ESYNTAX naming
 * field and the text ("status.startTime is \"yesterday\"; allowed: RFC 3339,
 * e.g. 2026-07-24T09:31:03Z"). */
int egpu_api_time_parse(const char *text, const char *field, int64_t *unix_s,
                        struct egpu_error *err) EGPU_MUST_CHECK;

/* unix_s as "2026-07-24T09:31:03Z" into buf (EGPU_API_TIME_MAX bytes). */
const char *egpu_api_time_format(int64_t unix_s, char buf[EGPU_API_TIME_MAX]);

/* A duration as Go writes it with hours, minutes and seconds ("24h",
 * "1h30m", "90m", "45s"; each unit at most once, in that order), in whole
 * seconds into *seconds. Returns 0, or EGPU_ESYNTAX naming field. */
int egpu_api_duration_parse(const char *text, const char *field, int64_t *seconds,
                            struct egpu_error *err) EGPU_MUST_CHECK;

/* ------------------------------------------------------------------------ */
/* GPUBudget (src/api/budget.c) and metering (src/api/meter.c)              */
/*
 * A GPUBudget gives a namespace spec.gpuHours per period: 100 gpu-core for
 * one hour is one GPU-hour (30 for an hour: 0.3), and gpu-memory may be
 * charged too, spec.memoryWeight GPU-hours per GiB-hour (default 0). The
 * controller meters the pods of the namespace from the second each was
 * bound to a node to the second it ended, into status.metering: percent-
 * seconds and MiB-seconds of the current period up to metering.until, the
 * checkpoint a restarted or new leader continues from, written with the
 * object's resourceVersion so no second is lost or counted twice.
 */

enum egpu_api_period {
    EGPU_API_PERIOD_DAILY,    /* from 00:00 of each day in spec.timeZone */
    EGPU_API_PERIOD_WEEKLY,   /* from Monday 00:00 */
    EGPU_API_PERIOD_MONTHLY,  /* from the 1st, 00:00 */
    EGPU_API_PERIOD_DURATION, /* every period_s seconds from the Unix epoch */
};

enum egpu_api_budget_state {
    EGPU_API_BUDGET_IN_BUDGET,
    EGPU_API_BUDGET_OVER_BUDGET,
};

/* "InBudget", "OverBudget". */
const char *egpu_api_budget_state_name(enum egpu_api_budget_state s);

#define EGPU_API_TZ_MAX          64              /* spec.timeZone, an IANA name, 63 bytes */
#define EGPU_API_PERIOD_TEXT_MAX 32              /* spec.period as written */
#define EGPU_API_GPU_HOURS_MAX   1e9             /* spec.gpuHours */
#define EGPU_API_PERIOD_MIN_S    60              /* a duration period: at least a minute */
#define EGPU_API_PERIOD_MAX_S    (366LL * 86400) /* and at most 366 days */

struct egpu_api_budget {
    struct egpu_api_meta meta; /* ns and name required */
    /* spec */
    int64_t gpu_hours_milli;     /* spec.gpuHours in thousandths (rounded down), 0..10^12 */
    int64_t memory_weight_micro; /* spec.memoryWeight in millionths of a GPU-hour per
                                    GiB-hour (rounded down), 0..10^9; 0 when absent */
    enum egpu_api_period period; /* spec.period; absent: Monthly */
    int64_t period_s;            /* EGPU_API_PERIOD_DURATION: its seconds; else 0 */
    char period_text[EGPU_API_PERIOD_TEXT_MAX]; /* spec.period as given ("Monthly" when absent) */
    char time_zone[EGPU_API_TZ_MAX];            /* spec.timeZone; absent: "UTC" */
    char in_class[EGPU_K8S_NAME_MAX];           /* spec.inBudgetPriorityClassName; "" = none */
    char over_class[EGPU_K8S_NAME_MAX];         /* spec.overBudgetPriorityClassName */
    /* status (all 0 / false until the controller writes them) */
    bool has_period;         /* status.periodStart and periodEnd given */
    int64_t period_start_s;  /* status.periodStart, Unix seconds */
    int64_t period_end_s;    /* status.periodEnd */
    bool has_metering;       /* status.metering given */
    int64_t metered_until_s; /* status.metering.until: usage is counted up to here */
    int64_t core_pct_s;      /* status.metering.coreSeconds: gpu-core percent x s */
    int64_t mem_mib_s;       /* status.metering.memorySeconds: gpu-memory MiB x s */
    bool has_state;          /* status.state given */
    enum egpu_api_budget_state state;
    int64_t observed_generation; /* 0: not given */
    uint32_t nconditions;
    struct egpu_api_condition conditions[EGPU_API_CONDITIONS_MAX];
};

/* Decode a GPUBudget. Rules beyond the JSON types: gpuHours 0..10^9 (a
 * number); memoryWeight 0..1000; period Daily, Weekly, Monthly or a
 * duration (egpu_api_duration_parse) of 1 minute to 366 days; timeZone an
 * IANA name ([A-Za-z0-9_+-] words joined by '/', at most 63 bytes; whether
 * the zone exists is the controller's to check); overBudgetPriorityClassName
 * required, both class names DNS subdomains; metering.until within the
 * period when both are given. Returns 0, EGPU_ESYNTAX, EGPU_ERANGE (the
 * field, its value and what is allowed) or -ENOMEM. *out (about 10 KiB)
 * written only on success. */
int egpu_api_budget_decode(const json_t *obj, struct egpu_api_budget *out,
                           struct egpu_error *err) EGPU_MUST_CHECK;

/* Render b as a GPUBudget (new reference; NULL when out of memory), status
 * with used and remaining in GPU-hours (egpu_api_budget_used_milli). */
json_t *egpu_api_budget_encode(const struct egpu_api_budget *b);

/* The GPU-hours b's metering has counted, in thousandths (rounded down):
 * core_pct_s / 360 + memory_weight_micro x mem_mib_s / (1024 x 3600 x 1000). */
int64_t egpu_api_budget_used_milli(const struct egpu_api_budget *b);

/* InBudget while used < gpuHours, else OverBudget (a budget of 0 is spent
 * from the start). */
enum egpu_api_budget_state egpu_api_budget_state_of(const struct egpu_api_budget *b);

/* What one pod is charged for, read from the API server's own fields. */
struct egpu_api_meter_pod {
    int64_t core_pct; /* the sum of its containers' gpu-core (whole cards: 100 each) */
    int64_t mem_mib;  /* the sum of its shared containers' gpu-memory */
    int64_t start_s;  /* bound: PodScheduled True's lastTransitionTime; 0 = not bound */
    int64_t end_s;    /* ended: its containers' last terminated.finishedAt (phase Succeeded
                         or Failed), else its deletionTimestamp; INT64_MAX = running */
};

/* Read pod (a v1 Pod, borrowed) into *out. A pod that asks no GPU, or is not
 * bound yet, reads as core_pct 0 or start_s 0: it is charged nothing. A
 * container that uses an ElasticGPUClaim (egpuc.elasticgpu.io/<container>,
 * read with egpu_api_pod_claims) is left out: it is charged with its claim
 * (egpu_api_meter_pod_holds, egpu_api_meter_holds_add); when the claim
 * annotations do not decode, every container is the pod's own. Returns 0,
 * or the first error of egpu_api_container_gpu (lenient) or
 * egpu_api_time_parse naming the field. */
int egpu_api_meter_pod_read(const json_t *pod, struct egpu_api_meter_pod *out,
                            struct egpu_error *err) EGPU_MUST_CHECK;

/* What a namespace holds through one of its ElasticGPUClaims: either the
 * reservation of an ElasticGPU whose claimRef names the claim (Bound, or
 * Released once the claim is gone: a Retain ElasticGPU counts against the
 * namespace that made it until it is deleted), or a container of a pod
 * that uses the claim. */
struct egpu_api_meter_hold {
    char claim[EGPU_K8S_NAME_MAX]; /* the claim's name in the namespace */
    bool reserved;                 /* true: an ElasticGPU; false: a pod's container */
    struct egpu_api_meter_pod m;   /* its gpu-core, gpu-memory and seconds */
};

/* The containers of pod (a v1 Pod, borrowed; read as egpu_api_meter_pod_read
 * reads it) that use a claim, as holds (reserved false, the pod's bound and
 * end seconds) into out[0..max), *n of them. Returns 0 (none when the claim
 * annotations do not decode), or egpu_api_meter_pod_read's errors. */
int egpu_api_meter_pod_holds(const json_t *pod, struct egpu_api_meter_hold *out, size_t max,
                             size_t *n, struct egpu_error *err) EGPU_MUST_CHECK;

/* ElasticGPU obj (borrowed, with a claimRef: the caller picks those of the
 * namespace) as a hold (reserved true) of the claim its claimRef names:
 * spec.capacity's gpu-core (100 per whole card) and a share's gpu-memory,
 * from the later of its metadata.creationTimestamp and claim_created_s
 * (the creationTimestamp of the claim whose uid its claimRef carries, 0
 * when that claim is gone: an ElasticGPU made for a claim is never older
 * than it, and one bound by hand is not charged for before its claim
 * existed) to its metadata.deletionTimestamp (INT64_MAX while not being
 * deleted). A Failed one (its node gone) holds nothing: start_s 0. Only
 * fields the API server and egpu-controller write. Returns 0, EGPU_ESYNTAX
 * or EGPU_ERANGE (egpu_api_egpu_decode's, or a timestamp naming its field,
 * or no claimRef), -ENOMEM. */
int egpu_api_meter_egpu_read(const json_t *obj, int64_t claim_created_s,
                             struct egpu_api_meter_hold *out,
                             struct egpu_error *err) EGPU_MUST_CHECK;

/* Add what holds h[0..n) charge over [from_s, to_s) to *core_pct_s and
 * *mem_mib_s. Per claim (h[].claim), at every second: the larger of what
 * its ElasticGPUs reserve and what the containers using it hold, gpu-core
 * and gpu-memory each. So a claim is charged from the moment it reserves
 * capacity until it releases it, with or without pods; a pod inside it
 * costs nothing more; and pods that use one claim beyond its capacity (two
 * pods of one claim, or a pod while the claim is Lost) are charged what
 * they hold. Integers only, additive over adjacent spans (cut [from, to)
 * anywhere and the sums are the same). Returns 0 or -ENOMEM. */
int egpu_api_meter_holds_add(const struct egpu_api_meter_hold *h, size_t n, int64_t from_s,
                             int64_t to_s, int64_t *core_pct_s, int64_t *mem_mib_s) EGPU_MUST_CHECK;

/* Add what p uses over [from_s, to_s) (its overlap with [start_s, end_s))
 * to *core_pct_s and *mem_mib_s. Nothing when the overlap is empty. */
void egpu_api_meter_add(const struct egpu_api_meter_pod *p, int64_t from_s, int64_t to_s,
                        int64_t *core_pct_s, int64_t *mem_mib_s);

/* ------------------------------------------------------------------------ */
/* GPU objects (src/api/gpu.c)                                              */
/*
 * A GPU (cluster-scoped) is one physical card: spec written by egpu-agent,
 * status.allocated by egpu-controller (from the pods' elasticgpu.io/assigned),
 * status.used by egpu-agent. Decoded for readers that show it (kubectl-egpu).
 */

#define EGPU_API_HEALTH_MAX     65  /* status.health, at most 64 bytes */
#define EGPU_API_GPU_MODEL_MAX  128 /* spec.model, at most 127 bytes */
#define EGPU_API_GPU_SHARES_MAX 512 /* status.allocated entries kept; more is EGPU_ERANGE */
#define EGPU_API_GPU_MIB_MAX    4294967295LL /* spec.memory, MiB, at most */

/* status.health of a card that takes new pods, and of one that does not
 * (egpu-agent writes them); any value other than Healthy set:
 * egpu-scheduler gives the card no new pod. */
#define EGPU_API_GPU_HEALTHY   "Healthy"
#define EGPU_API_GPU_UNHEALTHY "Unhealthy"

/* spec.topology: how the card reaches each other card of its node (written
 * by egpu-agent from NVML's pair topology; a peer it cannot tell is left
 * out). At most EGPU_API_GPU_PEERS_MAX entries, one per peer index. */
#define EGPU_API_GPU_PEERS_MAX 63 /* EGPU_NODE_GPUS_MAX - 1: every other card of a node */

struct egpu_api_gpu_peer {
    uint32_t index;            /* the peer's spec.index, 0..1023 */
    enum egpu_topo_level link; /* never EGPU_TOPO_UNKNOWN once decoded */
};

/* The CRD's name of a link: "NVLink", "Internal" (the same board),
 * "SingleSwitch", "MultipleSwitches", "HostBridge", "NUMANode", "System";
 * "unknown" for EGPU_TOPO_UNKNOWN or any other value (static). */
const char *egpu_api_topo_name(enum egpu_topo_level link);

/* spec.topology of spec (a GPU object's spec, borrowed; absent or null:
 * none) into peers[0 .. *n) (caller-owned, EGPU_API_GPU_PEERS_MAX
 * entries). Limits are the CRD's: a list of at most EGPU_API_GPU_PEERS_MAX
 * objects, each with index 0..1023 and link one of the names above, no
 * index twice. Returns 0, EGPU_ESYNTAX or EGPU_ERANGE naming the field
 * ("spec.topology[2].link is \"NV\"; allowed: NVLink, Internal, ..."); *n
 * and peers written only on success. */
int egpu_api_gpu_topology_decode(const json_t *spec, struct egpu_api_gpu_peer *peers, size_t *n,
                                 struct egpu_error *err) EGPU_MUST_CHECK;

/* One status.allocated entry: a container holding a share of the card. */
struct egpu_api_gpu_share {
    char ns[EGPU_NAMESPACE_MAX];             /* namespace (required) */
    char pod[EGPU_K8S_NAME_MAX];             /* pod (required) */
    char container[EGPU_CONTAINER_NAME_MAX]; /* container (required) */
    int64_t core_pct;                        /* core, percent of the card, 0..100; 0 absent */
    int64_t mem_mib;                         /* memory, MiB; 0 absent or a whole card (all) */
    char claim[EGPU_K8S_NAME_MAX];           /* its ElasticGPUClaim; "" = none */
};

struct egpu_api_gpu {
    struct egpu_api_meta meta;          /* name required; ns "" */
    char node_name[EGPU_K8S_NAME_MAX];  /* spec.nodeName (required) */
    int64_t index;                      /* spec.index, 0..1023 (required) */
    char uuid[EGPU_UUID_MAX];           /* spec.uuid (required) */
    char model[EGPU_API_GPU_MODEL_MAX]; /* spec.model; "" = not given */
    int64_t mem_mib;                    /* spec.memory, MiB; 0 when not given */
    size_t npeers;                      /* spec.topology, in its order; 0 = none */
    struct egpu_api_gpu_peer peers[EGPU_API_GPU_PEERS_MAX];
    char health[EGPU_API_HEALTH_MAX]; /* status.health as written ("Healthy"); "" = none */
    bool has_cap_core, has_cap_mem;   /* status.capacity.core / .memory given */
    int64_t cap_core_pct, cap_mem_mib;
    size_t nallocated;                    /* status.allocated, in its order */
    struct egpu_api_gpu_share *allocated; /* owned (egpu_api_gpu_clear); NULL when none */
    bool has_used_mem, has_used_util;     /* status.used.memory / .utilization given */
    int64_t used_mem_mib, used_util_pct;  /* MiB in use; percent 0..100 */
    char used_time[EGPU_API_TIME_MAX];    /* status.used.updateTime; "" = none */
};

/* Decode a GPU object (obj: the whole object as GET or a list gives it,
 * borrowed). Limits are the CRD's: index 0..1023, spec.memory
 * 0..EGPU_API_GPU_MIB_MAX, per container core 0..100, utilization 0..100,
 * every other number >= 0; text as long as the CRD allows, any character
 * but NUL; spec.topology as egpu_api_gpu_topology_decode reads it. Beyond
 * the CRD, at most EGPU_API_GPU_SHARES_MAX containers.
 * Returns 0, EGPU_ESYNTAX (a
 * missing required field, a wrong JSON type, text too long) or EGPU_ERANGE
 * (a value out of range, more than EGPU_API_GPU_SHARES_MAX entries), naming
 * the field ("status.allocated[2].core is 150; allowed: a whole number
 * 0..100"), or -ENOMEM. *out written only on success; release it with
 * egpu_api_gpu_clear. */
int egpu_api_gpu_decode(const json_t *obj, struct egpu_api_gpu *out,
                        struct egpu_error *err) EGPU_MUST_CHECK;

/* Free g's allocated entries and zero *g. NULL is a no-op. */
void egpu_api_gpu_clear(struct egpu_api_gpu *g);

/* ------------------------------------------------------------------------ */
/* Reservations (src/api/reservation.c)                                     */
/*
 * An ElasticGPU holds its capacity on its card(s) from the moment it names
 * them until it fails or is deleted, whether or not a pod uses it yet, so
 * that nothing else is placed into it: the scheduler's cache and the trace
 * replay read it here and apply it with egpu_cluster_reserve (egpu/core.h).
 */

/* What ElasticGPU e (decoded by egpu_api_egpu_decode) reserves: its phase
 * Pending, Available, Bound or Released holds the capacity (a decoded one
 * always has a source: the cards are named), Failed holds none; one being
 * deleted (deletionTimestamp set) holds it until it is gone. *out gets
 * core_milli (capacity gpu-core x 10 per card: a gpuShare's 1..99 percent
 * as 10..990, a physicalGPU's 1000 on each card), mem_mib (a gpuShare's
 * capacity gpu-memory, 0 when not given; 0 for whole cards, which hold all
 * their memory), ncards and uuids[i] = e->gpu_names[i]: GPU object names,
 * borrowed from e, which the caller replaces with its cluster's card UUIDs
 * (the scheduler: that GPU object's spec.uuid; the replay names cards
 * "<node>-gpu<index>" and uses the names as they are). The capacity is
 * spec.capacity (for a TFLOPS claim the controller writes the percent it
 * came to there, status.corePercent repeating it). Returns true when e
 * holds capacity (*out filled), false when it holds none (*out zeroed). */
bool egpu_api_egpu_reservation(const struct egpu_api_egpu *e, struct egpu_reservation *out);

/* Can a container of request cr, placed on exactly r's cards, run inside
 * reservation r (an ElasticGPU its claim is bound to) and be counted there,
 * not beside it: the same number of cards, whole cards for whole cards, else
 * at most r's core and memory per card? The rule both the scheduler's cache
 * and egpu-controller's inventory count claim pods by (each also lets one
 * pod at a time inside one ElasticGPU, and only on the ElasticGPU's cards). */
bool egpu_api_resv_can_hold(const struct egpu_reservation *r,
                            const struct egpu_container_request *cr);

/* ------------------------------------------------------------------------ */
/* DRA mode's claims (src/api/dra.c)                                        */
/*
 * In DRA mode (egpu-webhook --mode dra) a pod's elasticgpu.io request
 * becomes, per GPU container, a ResourceClaimTemplate (resource.k8s.io/v1;
 * ../shared/k8s-wire/dra/dra_notes.md section 5) whose spec.spec is the
 * ResourceClaimSpec made here and whose name is made from that spec. The
 * webhook creates nothing: it lists the templates a pod needs in the pod's
 * annotation EGPU_ANN_DRA_CLAIMS, a JSON object {template name: claim
 * spec}, and egpu-controller creates them in the pod's namespace, so a pod
 * that admission then denies leaves no object behind. Text a tenant wrote
 * enters a CEL expression only through egpu_api_cel_quote.
 */

/* On a Pod (set by egpu-webhook in DRA mode, fixed from then on): the
 * ResourceClaimTemplates its spec.resourceClaims name, as a JSON object
 * {"egpu-<hash>": <ResourceClaimSpec>, ...}. */
#define EGPU_ANN_DRA_CLAIMS          EGPU_API_GROUP "/dra-claims"
/* The one request of every template (containers[].resources.claims[].request). */
#define EGPU_API_DRA_REQUEST         "gpu"
/* Attributes of a device in the agent's ResourceSlice that selectors read:
 * the card's model (a string, GPU objects' spec.model) and its UUID. */
#define EGPU_API_DRA_ATTR_MODEL      "productName"
#define EGPU_API_DRA_ATTR_UUID       "uuid"
/* A string attribute's value, bytes at most (resource.k8s.io/v1's limit);
 * the agent cuts a longer model there, at a UTF-8 character boundary. */
#define EGPU_API_DRA_ATTR_STRING_MAX 64

/* How many of the len bytes of s (UTF-8) a string attribute keeps: len when
 * it is at most EGPU_API_DRA_ATTR_STRING_MAX, else the longest prefix of at
 * most that many bytes that ends on a UTF-8 character boundary (the agent
 * writes a model cut so, a selector matches it cut so). Pure; never fails. */
size_t egpu_api_dra_attr_len(const char *s, size_t len);
/* Template names: the prefix and 32 lower-case hex digits (SHA-256's first
 * 128 bits); bytes incl. NUL. */
#define EGPU_API_DRA_TEMPLATE_PREFIX   "egpu-"
#define EGPU_API_DRA_TEMPLATE_NAME_MAX (sizeof(EGPU_API_DRA_TEMPLATE_PREFIX) - 1 + 32 + 1)
/* The pod's spec.resourceClaims[].name of its i-th GPU container: "egpu-<i>". */
#define EGPU_API_DRA_POD_CLAIM_PREFIX  "egpu-"
#define EGPU_API_DRA_COUNT_MAX         32    /* whole cards in one request (the API's limit) */
#define EGPU_API_CEL_TEXT_MAX          1024  /* bytes of text egpu_api_cel_quote takes */
#define EGPU_API_CEL_EXPR_MAX          10240 /* a CEL selector's expression, bytes (the API's) */

/* Quote s[0..len) (UTF-8, may hold NUL bytes; at most EGPU_API_CEL_TEXT_MAX
 * bytes) as one CEL string literal (cel-spec's syntax: a double-quoted
 * string): printable ASCII as it is, except " and \ (escaped \" and \\),
 * newline, carriage return and tab as \n \r \t, every other ASCII
 * character as \xXX, the rest up to U+FFFF as \uXXXX and above as
 * \UXXXXXXXX (no escape whose meaning differs between bytes and code
 * points). The literal is printable ASCII only and nothing in s can end
 * it. *out is egpu_malloc'd (the caller egpu_free()s it), written only
 * on success.
 * Returns 0, EGPU_ESYNTAX (s is not valid UTF-8: "byte 3 (0xFF) of the text
 * is not valid UTF-8; allowed: UTF-8 text"; overlong forms, surrogates and
 * code points past U+10FFFF included), EGPU_ERANGE (longer than
 * EGPU_API_CEL_TEXT_MAX) or -ENOMEM. */
int egpu_api_cel_quote(const char *s, size_t len, char **out,
                       struct egpu_error *err) EGPU_MUST_CHECK;

/* The CEL selector of devices whose model is one of models (the
 * EGPU_ANN_GPU_MODEL annotation's value, "A|B": models separated by '|'):
 *   has(device.attributes["gpu.elasticgpu.io"].productName) &&
 *   device.attributes["gpu.elasticgpu.io"].productName in ["A", "B"]
 * each model quoted with egpu_api_cel_quote, after a model longer than
 * EGPU_API_DRA_ATTR_STRING_MAX bytes is cut as the agent cuts the
 * attribute (to at most that many bytes, ending on a UTF-8 character
 * boundary) so it matches the card. A device without the attribute
 * is not selected (no evaluation error). *out is egpu_malloc'd (caller
 * egpu_free()s), only on success. Returns 0, EGPU_ERANGE (models empty,
 * an empty model between bars, a model too long, an expression past
 * EGPU_API_CEL_EXPR_MAX), EGPU_ESYNTAX (a model not valid UTF-8), each
 * naming the annotation, or -ENOMEM. */
int egpu_api_dra_model_selector(const char *models, char **out,
                                struct egpu_error *err) EGPU_MUST_CHECK;

/* The ResourceClaimSpec (resource.k8s.io/v1) of one container's ask (read
 * by egpu_api_container_gpu; core_pct > 0) and models (as above; NULL or ""
 * = any model): {"devices": {"requests": [{"name": "gpu", "exactly": {...}}]}}
 * with, for a share of one card (core_pct 1..99), deviceClassName
 * EGPU_API_DRA_CLASS_SHARE, count 1 and capacity.requests {"cores":
 * "<core_pct>", "memory": "<mem_mib>Mi"} (memory only when has_mem; without
 * it the device's default, the whole card's memory, is consumed); for k
 * whole cards (core_pct 100 k, k <= EGPU_API_DRA_COUNT_MAX)
 * EGPU_API_DRA_CLASS_WHOLE, count k and no capacity (each card consumes
 * its whole default), plus, for k > 1, the constraint distinctAttribute
 * "gpu.elasticgpu.io/uuid" on the request; allocationMode ExactCount
 * always; selectors [{"cel": {"expression": <egpu_api_dra_model_selector>}}]
 * when models are named. *out is a new reference (caller json_decref()s),
 * only on success. Returns 0, EGPU_ERANGE (a core_pct or mem_mib outside
 * those values, memory with whole cards), the selector's errors, or
 * -ENOMEM. */
int egpu_api_dra_claim_spec(const struct egpu_api_gpu_ask *ask, const char *models, json_t **out,
                            struct egpu_error *err) EGPU_MUST_CHECK;

/* The name of the ResourceClaimTemplate of spec (a ResourceClaimSpec as
 * above, or any JSON object): "egpu-" followed by the first 128 bits, in
 * lower-case hex, of the SHA-256 (GnuTLS) of spec's compact JSON text with
 * every object's keys sorted, so the name depends on the content only, not
 * on key order. Written to out (EGPU_API_DRA_TEMPLATE_NAME_MAX bytes).
 * Returns 0, EGPU_ESYNTAX (spec not an object), -ENOMEM, or -EIO (GnuTLS
 * refused the hash, its reason in err). */
int egpu_api_dra_template_name(const json_t *spec, char out[EGPU_API_DRA_TEMPLATE_NAME_MAX],
                               struct egpu_error *err) EGPU_MUST_CHECK;

/* The name of the DRA object egpu-controller --mode dra makes for an
 * elasticgpu.io object named name (a NUL-terminated string): the DeviceClass
 * of an ElasticGPUClass, and the ResourceClaim (in the claim's namespace) of
 * an ElasticGPUClaim, whose one request is EGPU_API_DRA_REQUEST. It is
 * EGPU_API_DRA_OBJECT_PREFIX and name, into buf (len bytes); the webhook
 * points a pod's spec.resourceClaims at the same name. Returns 0, or
 * -ENAMETOOLONG when that is longer than 253 characters (a DNS subdomain's
 * limit) or does not fit len. */
#define EGPU_API_DRA_OBJECT_PREFIX "elasticgpu-"
int egpu_api_dra_object_name(const char *name, char *buf, size_t len) EGPU_MUST_CHECK;

/* ------------------------------------------------------------------------ */
/* A ResourceClaim's allocation results of this driver (src/api/dra_result.c) */
/*
 * The one decoder of status.allocation.devices.results[] (resource.k8s.io/v1
 * DeviceRequestAllocationResult; ../shared/k8s-wire/dra/dra_notes.md
 * sections 5 and 8) that the agent (NodePrepareResources), the quota and
 * metering (dra_usage.c) and kubectl-egpu read. The status is written by
 * kube-scheduler's allocator, but an API server without the DRA validation
 * keeps what anyone writes, so every field is checked and a bad one refuses
 * the claim with its path and the allowed values. The device names of the
 * agent's ResourceSlice are EGPU_API_DRA_DEVICE_PREFIX and the card's NVML
 * index, the pool is the node's name.
 */
#define EGPU_API_DRA_DEVICE_PREFIX "gpu-" /* slice device names: "gpu-<index>" */
#define EGPU_API_DRA_RESULTS_MAX   32     /* results of one claim (the API's limit) */
#define EGPU_API_DRA_DEVICE_MAX    64     /* a device name: a DNS label, 63 + NUL */
#define EGPU_API_DRA_REQUEST_MAX   128    /* "<request>/<subrequest>": 63 + 1 + 63 + NUL */

/* One result of this driver, decoded (everything copied out of the claim). */
struct egpu_api_dra_result {
    size_t at;                              /* its position in status.allocation.devices.results */
    char request[EGPU_API_DRA_REQUEST_MAX]; /* results[].request (a DNS label, or two joined by '/')
                                             */
    char pool[EGPU_K8S_NAME_MAX];           /* the node (the agent's pool name) */
    char device[EGPU_API_DRA_DEVICE_MAX];   /* e.g. "gpu-3" (a DNS label) */
    bool has_index;                         /* device is "gpu-<n>" (egpu_api_dra_device_index) */
    uint32_t index;                         /* the card index n parsed from device */
    char share_id[EGPU_API_UID_MAX];        /* "" when none (a device not shared) */
    bool whole;                             /* no consumedCapacity: the whole device */
    bool has_cores;                         /* consumedCapacity names cores */
    int64_t core_pct;                       /* consumedCapacity cores 0..100; absent, whole: 100 */
    bool has_mem;                           /* consumedCapacity names memory */
    int64_t mem_mib;                        /* consumedCapacity memory, bytes rounded up to MiB,
                                             * 0..EGPU_API_GPU_MIB_MAX; 0 when !has_mem */
};

/* Format "gpu-<index>" into buf (len bytes). Returns 0, or -ENAMETOOLONG
 * when it does not fit (buf is then ""). */
int egpu_api_dra_device_name(uint32_t index, char *buf, size_t len) EGPU_MUST_CHECK;
/* Parse "gpu-<index>" (decimal digits, no sign, no leading zero, no suffix,
 * at most UINT32_MAX): true and *index, else false
 * (*index untouched; device NULL: false). */
bool egpu_api_dra_device_index(const char *device, uint32_t *index);
/* Is s a shareID as kube-scheduler writes it (a UUID: 36 characters,
 * 8-4-4-4-12 lowercase hex digits)? NULL is not. */
bool egpu_api_dra_is_share_id(const char *s);
/* Is s a result's request name as the API server validates it: a DNS
 * label, or "<request>/<subrequest>" (a firstAvailable subrequest), two DNS
 * labels joined by '/'? NULL is not. */
bool egpu_api_dra_is_request_name(const char *s);

/* The results of driver `driver` in claim's status.allocation.devices.results
 * (claim a ResourceClaim, borrowed), in order, into out[0..max), *n of them
 * (out and *n written also on failure, then meaningless). Results of other
 * drivers are skipped (each must still be an object with a driver string).
 * Each of ours must have a pool (a non-empty string shorter than
 * EGPU_K8S_NAME_MAX), a device (a DNS label), a request
 * (egpu_api_dra_is_request_name), a shareID absent, null, "" or a UUID
 * (egpu_api_dra_is_share_id), and a consumedCapacity absent or null (the
 * whole device) or an object whose cores is a quantity string of a whole
 * number 0..100 and whose memory a quantity string of bytes (rounded up to
 * MiB) 0..EGPU_API_GPU_MIB_MAX MiB, either one absent. No I/O, never
 * allocates. Returns 0 (also when not allocated, or claim has no status:
 * *n 0), or EGPU_ESYNTAX / EGPU_ERANGE naming the field and the allowed
 * values (e.g. "status.allocation.devices.results[1].consumedCapacity.cores
 * is \"150\"; allowed: a whole number 0..100 (percent of one card)"): claim
 * not an object, status, allocation or devices not objects, results not an
 * array or longer than EGPU_API_DRA_RESULTS_MAX, a result not an object or
 * without a driver string, each check above, and more than max results of
 * driver. driver NULL: EGPU_API_DRA_DRIVER. */
int egpu_api_dra_results(const json_t *claim, const char *driver, struct egpu_api_dra_result *out,
                         size_t max, size_t *n, struct egpu_error *err) EGPU_MUST_CHECK;

/* ------------------------------------------------------------------------ */
/* TargetWorkload (src/api/workload.c)                                      */
/*
 * FGD's target workload pinned by the operator, as a JSON document (the
 * file egpu-sim writes as target_workload.json, egpu-scheduler reads with
 * --target-workload):
 *
 *   {"apiVersion": "elasticgpu.io/v1alpha1", "kind": "TargetWorkload",
 *    "typicalPods": [{"cpuMilli": 8000, "gpuMilli": 500, "gpus": 1,
 *                     "models": "V100M16|V100M32", "weight": 0.25}, ...]}
 *
 * Each typical pod (FGD paper, section 4.1): cpuMilli, its CPU in
 * milli-cores (0..10^9); gpuMilli, what it asks of each card in milli-GPU
 * (0 = no GPU, 1..1000); gpus, how many cards (0 with gpuMilli 0, 1 for a
 * share, 1..EGPU_API_WORKLOAD_GPUS_MAX whole cards with gpuMilli 1000);
 * models, the GPU models it may use, '|'-separated, absent or "" = any;
 * weight, its share of the workload (a number >= 0; renormalised, at least
 * one above 0). Any other key is refused.
 */
#define EGPU_API_WORKLOAD_PODS_MAX   4096 /* typicalPods entries */
#define EGPU_API_WORKLOAD_GPUS_MAX   64   /* gpus of one typical pod */
#define EGPU_API_WORKLOAD_MODELS_MAX 1024 /* models, bytes incl. NUL */

struct egpu_api_typical_pod {
    int64_t cpu_milli;                         /* milli-cores */
    uint32_t gpu_milli;                        /* per card, milli-GPU; 0 = no GPU */
    uint32_t gpus;                             /* cards */
    char models[EGPU_API_WORKLOAD_MODELS_MAX]; /* '|'-separated model names; "" = any */
    double weight;                             /* >= 0 */
};

struct egpu_api_workload {
    size_t n;
    struct egpu_api_typical_pod *pods; /* n entries (egpu_free via egpu_api_workload_free) */
};

/* Decode a TargetWorkload document (above) into *out. Returns 0, or
 * EGPU_ESYNTAX / EGPU_ERANGE naming the field (e.g. "typicalPods[3].gpus:
 * 3 whole cards need gpuMilli 1000, not 500") with the allowed values, or
 * -ENOMEM; *out is then empty. Free *out with egpu_api_workload_free. */
int egpu_api_workload_decode(const json_t *doc, struct egpu_api_workload *out,
                             struct egpu_error *err) EGPU_MUST_CHECK;

/* The TargetWorkload document of w (a new reference; NULL when out of
 * memory). The typical pods keep their order; "models" is left out when "". */
json_t *egpu_api_workload_encode(const struct egpu_api_workload *w);

/* Free what *w holds and empty it. NULL is a no-op. */
void egpu_api_workload_free(struct egpu_api_workload *w);

/* ------------------------------------------------------------------------ */
/* What a DRA claim asks and holds of this driver (src/api/dra_usage.c)     */
/*
 * Budgets and quotas on DRA mode (docs/budgets.md, "DRA mode"): what a
 * ResourceClaim or ResourceClaimTemplate (resource.k8s.io/v1;
 * ../shared/k8s-wire/dra/dra_notes.md sections 5 and 7) asks of this
 * driver's two DeviceClasses, in gpu-core percent and gpu-memory MiB, and
 * what an allocated claim holds, read from its status (written by
 * kube-scheduler's allocator), never from the spec a tenant wrote.
 */
#define EGPU_API_DRA_USAGE_COUNT_MAX 128         /* devices of one request (the API's limit) */
#define EGPU_API_DRA_USAGE_MEM_MAX   (1LL << 30) /* MiB of one device's memory request: 1 PiB */

/* What a claim asks or holds of this driver's devices. */
struct egpu_api_dra_usage {
    int64_t cores;     /* percent of one card, summed over devices (a whole card 100) */
    int64_t mem_mib;   /* MiB of memory named (a request or consumedCapacity), summed */
    int64_t devices;   /* devices of this driver's classes (spec) or driver (status) */
    int64_t mem_whole; /* of those, devices whose memory is not named: each takes its card's,
                        * which is not counted in mem_mib (as a pod's share without gpu-memory) */
};

/* What ResourceClaimSpec spec (a ResourceClaim's .spec or a template's
 * .spec.spec; field is its path for messages, e.g. "spec" or "spec.spec")
 * asks of this driver's DeviceClasses, into *out: EGPU_API_DRA_CLASS_SHARE,
 * EGPU_API_DRA_CLASS_WHOLE and every elasticgpu-<class> the controller makes
 * of an ElasticGPUClass (EGPU_API_DRA_OBJECT_PREFIX: a tenant may name one in
 * a claim of their own, so it counts as ours); each request's exactly
 * (deviceClassName one of those; any other class asks nothing of us), count devices (absent:
 * 1; 1..EGPU_API_DRA_USAGE_COUNT_MAX; allocationMode absent or ExactCount), each device its
 * capacity.requests cores (a whole number 0..100) and memory (bytes, rounded up to MiB, at most
 * EGPU_API_DRA_USAGE_MEM_MAX MiB); a capacity not named is the card's
 * requestPolicy default, the whole card: cores 100, memory counted in
 * mem_whole. A request with firstAvailable counts the largest of its
 * subrequests of our classes (per figure). A spec without devices asks
 * nothing. Returns 0, or EGPU_ESYNTAX / EGPU_ERANGE naming the field (e.g.
 * "spec.devices.requests[0].exactly.capacity.requests.cores is \"150\";
 * allowed: a whole number 0..100 (percent of one card)") with the allowed
 * values; *out is then zero. */
int egpu_api_dra_spec_usage(const json_t *spec, const char *field, struct egpu_api_dra_usage *out,
                            struct egpu_error *err) EGPU_MUST_CHECK;

/* What ResourceClaim claim holds of driver EGPU_API_DRA_DRIVER, from its
 * status only: each of status.allocation.devices.results[] whose driver is
 * ours, its consumedCapacity cores and memory (memory only of a share,
 * cores below 100; a whole card's, or a result without consumedCapacity, of
 * a device that is not shared: cores 100 and the device in mem_whole, as a
 * pod's whole cards count no gpu-memory). *allocated: status.allocation is set;
 * *in_use: status.reservedFor is not empty (either may be NULL). The
 * results are egpu_api_dra_results'. Returns 0 (nothing allocated: *out
 * zero), the errors of egpu_api_dra_results (EGPU_ESYNTAX / EGPU_ERANGE
 * naming the field, e.g.
 * "status.allocation.devices.results[1].consumedCapacity.cores"), or
 * -ENOMEM; *out is then zero. */
int egpu_api_dra_claim_held(const json_t *claim, struct egpu_api_dra_usage *out, bool *allocated,
                            bool *in_use, struct egpu_error *err) EGPU_MUST_CHECK;

/* What ResourceClaim claim is charged for against its namespace's GPUBudget,
 * as a pod is (struct egpu_api_meter_pod, egpu_api_meter_add): core_pct and
 * mem_mib what egpu_api_dra_claim_held says it holds; start_s its
 * status.allocation.allocationTimestamp when kube-scheduler wrote one, else
 * its metadata.creationTimestamp (the API server's), 0 when not allocated
 * (charged nothing); end_s its metadata.deletionTimestamp, else INT64_MAX.
 * Nothing a tenant writes in its spec counts. Returns 0, or the errors of
 * egpu_api_dra_claim_held and egpu_api_time_parse naming the field; *out is
 * then zero. */
int egpu_api_dra_meter_read(const json_t *claim, struct egpu_api_meter_pod *out,
                            struct egpu_error *err) EGPU_MUST_CHECK;

#ifdef __cplusplus
}
#endif

#endif /* EGPU_API_H */
