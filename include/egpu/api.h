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

#define EGPU_API_GROUP        "elasticgpu.io"
#define EGPU_API_VERSION      "elasticgpu.io/v1alpha1"
#define EGPU_SCHEDULER_NAME   "elastic-gpu-scheduler"    /* spec.schedulerName of GPU pods */
#define EGPU_RES_GPU_CORE     "elasticgpu.io/gpu-core"   /* percent of one card */
#define EGPU_RES_GPU_MEMORY   "elasticgpu.io/gpu-memory" /* MiB per card */
/* The scheduler's decision, written by bind (format below). */
#define EGPU_ANN_ASSIGNED     "elasticgpu.io/assigned"
/* Written by the node agent once the kubelet allocated the pod's devices. */
#define EGPU_ANN_ALLOCATED    "elasticgpu.io/allocated"
/* Per-pod overrides of the tier policies (egpu_policy_parse names), and the
 * allowed GPU models ("A|B", as GPU objects' spec.model). */
#define EGPU_ANN_NODE_POLICY  "elasticgpu.io/node-policy"
#define EGPU_ANN_CARD_POLICY  "elasticgpu.io/card-policy"
#define EGPU_ANN_GPU_MODEL    "elasticgpu.io/gpu-model"
/* The compute ceiling of every shared container of the pod, percent of a
 * card, from its gpu-core up to 100: the interposer lets it burst up to this
 * while the card is otherwise idle (absent: no burst). */
#define EGPU_ANN_CORE_LIMIT   "elasticgpu.io/gpu-core-limit"
/* egpuc.elasticgpu.io/<container>: <claim name>: the container's GPU comes
 * from that ElasticGPUClaim in the pod's namespace. */
#define EGPU_ANN_CLAIM_PREFIX "egpuc.elasticgpu.io/"

#define EGPU_K8S_NAME_MAX       254 /* DNS subdomain 253 + NUL */
#define EGPU_CONTAINER_NAME_MAX 64  /* DNS label 63 + NUL */
#define EGPU_MODEL_MAX          256 /* elasticgpu.io/gpu-model value, bytes incl. NUL */

/* The text of a JSON string usable as C text: v's value, or NULL when v is
 * not a string or holds a NUL character (which C would cut short). Borrowed
 * from v. */
const char *egpu_api_str(const json_t *v);

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
 * gpu-memory must fit the largest card known; the annotations must decode,
 * gpu-core-limit must lie between each shared container's gpu-core and 100,
 * and gpu-model must name models the cluster has (facts may be NULL: those
 * two checks are then skipped). Appends each problem to *out (which the
 * caller zeroes). Returns the number of problems found in this call. */
size_t egpu_api_pod_validate(const json_t *spec, const json_t *annotations,
                             const struct egpu_api_facts *facts, struct egpu_api_problems *out);

/* Does spec (a PodSpec) ask any container or init container for an
 * elasticgpu.io resource, in requests or limits? */
bool egpu_api_spec_wants_gpu(const json_t *spec);

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
    bool limits;    /* false: resources.requests */
    char from[128]; /* the other system's resource name */
    const char *to; /* EGPU_RES_GPU_CORE, EGPU_RES_GPU_MEMORY, or NULL */
    char value[32]; /* the converted quantity, e.g. "4096" */
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

/* What converting one pod spec does. About 27 KiB: allocate it, rather
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
 * nvidia.com/gpumem: several shared cards). */
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

#ifdef __cplusplus
}
#endif

#endif /* EGPU_API_H */
