/* egpu/webhook.h - egpu-webhook, the admission webhook: AdmissionReview
 * (admission.k8s.io/v1) in, AdmissionReview out.
 *
 * Four routes (see docs/webhook.md):
 *   POST /mutate          rewrite other GPU-sharing systems' names into
 *                         elasticgpu.io ones (units converted, one warning per
 *                         name), turn the ElasticGPUClaim a pod's container
 *                         uses (egpuc.elasticgpu.io/<container>: <claim>)
 *                         into its requests and limits, set
 *                         spec.schedulerName of GPU pods, and give a GPU
 *                         pod of a namespace with a GPUBudget the
 *                         budget's PriorityClass and the finalizer
 *                         elasticgpu.io/metering;
 *   POST /mutate-nvidia   the same, HAMi's nvidia.com names included;
 *   POST /mutate-place    set spec.schedulerName of a Pod that asks no GPU
 *                         and names no scheduler of its own, so that
 *                         elastic-gpu-scheduler (egpu-scheduler
 *                         --pods-without-gpu place) packs it too;
 *   POST /validate        refuse a bad GPU request with a message naming the
 *                         container, the field, the value and what is allowed,
 *                         and protect the system annotations, a pod's
 *                         claim annotations and its metering finalizer.
 * Pods are handled, and the pod templates of apps/v1 Deployments,
 * StatefulSets, DaemonSets and ReplicaSets, batch/v1 Jobs
 * (spec.template) and CronJobs (spec.jobTemplate.spec.template).
 *
 * egpu_webhook_handle is the whole request path without I/O: the HTTP
 * server calls it with the request body and sends what it wrote, so unit
 * tests and the fuzzer drive exactly what the API server reaches.
 */
#ifndef EGPU_WEBHOOK_H
#define EGPU_WEBHOOK_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "egpu/api.h"
#include "egpu/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define EGPU_WEBHOOK_SCHEDULER_USER  "system:serviceaccount:elastic-gpu-system:egpu-scheduler"
#define EGPU_WEBHOOK_AGENT_USER      "system:serviceaccount:elastic-gpu-system:egpu-agent"
#define EGPU_WEBHOOK_CONTROLLER_USER "system:serviceaccount:elastic-gpu-system:egpu-controller"

/* The seccomp profile a container with a gpu-core share (1..99) gets: a
 * Localhost profile, relative to the kubelet's seccomp directory
 * (/var/lib/kubelet/seccomp), that deploy/agent installs on every GPU node
 * (deploy/agent/seccomp/shared-gpu.json; docs/security.md). */
#define EGPU_WEBHOOK_SECCOMP_PROFILE "elastic-gpu/shared-gpu.json"

/* The routes, in the order of egpu_webhook_route_path. */
enum egpu_webhook_route {
    EGPU_WEBHOOK_MUTATE,
    EGPU_WEBHOOK_MUTATE_NVIDIA,
    EGPU_WEBHOOK_VALIDATE,
    EGPU_WEBHOOK_MUTATE_PLACE,
};
#define EGPU_WEBHOOK_ROUTES 4

/* The outcome of one request, for metrics and logs. */
enum egpu_webhook_result {
    EGPU_WEBHOOK_ALLOWED, /* allowed, no patch */
    EGPU_WEBHOOK_PATCHED, /* allowed with a patch */
    EGPU_WEBHOOK_DENIED,  /* allowed: false (the request broke a rule) */
    EGPU_WEBHOOK_ERROR,   /* the review itself was bad: HTTP 400, or allowed: false code 400 */
};
#define EGPU_WEBHOOK_RESULTS 4

/* "/mutate", "/mutate-nvidia", "/validate", "/mutate-place"; "mutate", ...
 * without the slash
 * for metric labels (egpu_webhook_route_name). Static strings. */
const char *egpu_webhook_route_path(enum egpu_webhook_route r);
const char *egpu_webhook_route_name(enum egpu_webhook_route r);
/* "allowed", "patched", "denied", "error". Static string. */
const char *egpu_webhook_result_name(enum egpu_webhook_result r);

/* Where /mutate finds the ElasticGPUClaims that pods name in their
 * annotations egpuc.elasticgpu.io/<container>: <claim> (docs/claims.md).
 * get looks up claim ns/name (both non-empty C strings): with fresh false
 * it may answer from a cache (egpu-webhook: its informer), with fresh true
 * it must ask the API server (a live GET). The handler asks fresh after a
 * cache miss, before it denies on what the cache said, and when the cache
 * has the claim Pending, so a claim created a moment before the pod, or
 * bound since the cache last heard, is judged as it is now. Returns 0 and
 * *out (a new reference the caller json_decref()s) when the claim exists;
 * -ENOENT when it does not (fresh: the API server said 404); -ENOMEM; any
 * other negative code when it cannot be told (the API server did not
 * answer, or refused the read), with err saying why. Called on the HTTPS
 * server's pool threads, concurrently: it must be thread-safe. */
struct egpu_webhook_claims {
    int (*get)(void *ud, const char *ns, const char *name, bool fresh, json_t **out,
               struct egpu_error *err);
    void *ud;
};

/* Where /mutate finds the GPUBudget of a pod's namespace and the
 * PriorityClasses budgets name (egpu-webhook: its informers' caches).
 * list gives every GPUBudget of namespace ns (a non-empty C string):
 * returns 0 and *out, a new JSON array (maybe empty) the caller
 * json_decref()s; -ENOMEM; any other negative code when they cannot be
 * told, with err saying why. priority_class gives the PriorityClass name
 * (a non-empty C string; scheduling.k8s.io/v1, cluster-scoped): 0 and *out
 * (a new reference the caller json_decref()s); -ENOENT when it does not
 * exist; -ENOMEM; any other negative code with err. Both are called on the
 * HTTPS server's pool threads, concurrently: they must be thread-safe. */
struct egpu_webhook_budgets {
    int (*list)(void *ud, const char *ns, json_t **out, struct egpu_error *err);
    int (*priority_class)(void *ud, const char *name, json_t **out, struct egpu_error *err);
    void *ud;
};

/* Where the webhook reads what a namespace holds against its ResourceQuotas
 * of requests.elasticgpu.io/gpu-core and gpu-memory (webhook/quota.c): list
 * gives, from the API server (a consistent LIST, not a cache: a claim
 * admitted a moment ago must be counted), the items of what in namespace ns
 * (a non-empty C string; ignored for ElasticGPUs, which are cluster-scoped
 * and may come from a cache): 0 and *out, a new JSON array (maybe empty) the
 * caller json_decref()s; -ENOMEM; any other negative code when they cannot
 * be told, with err saying why. Called on the HTTPS server's pool threads,
 * concurrently: it must be thread-safe. */
enum egpu_webhook_quota_list {
    EGPU_WEBHOOK_LIST_QUOTAS,      /* v1 ResourceQuotas */
    EGPU_WEBHOOK_LIST_CLAIMS,      /* ElasticGPUClaims */
    EGPU_WEBHOOK_LIST_PODS,        /* v1 Pods */
    EGPU_WEBHOOK_LIST_ELASTICGPUS, /* ElasticGPUs, all of them */
};
struct egpu_webhook_quota {
    int (*list)(void *ud, enum egpu_webhook_quota_list what, const char *ns, json_t **out,
                struct egpu_error *err);
    void *ud;
};

/* How GPU pods get their GPUs (--mode). */
enum egpu_webhook_mode {
    EGPU_WEBHOOK_MODE_DEVICE_PLUGIN, /* elasticgpu.io extended resources, elastic-gpu-scheduler */
    EGPU_WEBHOOK_MODE_DRA, /* ResourceClaimTemplates (resource.k8s.io/v1), kube-scheduler's
                              allocator (webhook/dra.c, docs/webhook.md "DRA mode") */
};

/* What the handlers need to know; strings borrowed for the config's use. */
struct egpu_webhook_config {
    enum egpu_webhook_mode mode;   /* EGPU_WEBHOOK_MODE_DEVICE_PLUGIN (0) by default */
    const char *scheduler_name;    /* set on GPU pods (and on /mutate-place's pods
                                      without GPU); NULL = EGPU_SCHEDULER_NAME */
    bool set_scheduler_name;       /* false: leave spec.schedulerName alone (on
                                      /mutate-place too) */
    bool compat_nvidia;            /* rewrite HAMi's nvidia.com names on /mutate too */
    uint32_t aliyun_mem_mib;       /* MiB in one aliyun.com/gpu-mem; 0 = 1024 */
    uint32_t memory_only_core;     /* gpu-core percent for a memory-only ask; 0 = 1 */
    uint32_t default_mem_per_core; /* MiB per gpu-core percent given to a pod's share
                                      that names no gpu-memory; 0 = refuse such a share */
    const char *scheduler_user;    /* only user that may write elasticgpu.io/assigned;
                                      NULL = EGPU_WEBHOOK_SCHEDULER_USER */
    const char *agent_user;        /* only user that may write elasticgpu.io/allocated;
                                      NULL = EGPU_WEBHOOK_AGENT_USER */
    const char *controller_user;   /* only user that may remove the finalizer
                                      elasticgpu.io/metering from a pod;
                                      NULL = EGPU_WEBHOOK_CONTROLLER_USER */
    const char *seccomp_profile;   /* the seccompProfile of shared-GPU containers: a
                                      Localhost path, or "RuntimeDefault";
                                      NULL = EGPU_WEBHOOK_SECCOMP_PROFILE */

    /* Where claims are looked up; NULL: a pod that uses one is refused. */
    const struct egpu_webhook_claims *claims;
    /* Where GPUBudgets and PriorityClasses are looked up; NULL: budgets are
     * not enforced (no priority class set, no finalizer added). */
    const struct egpu_webhook_budgets *budgets;
    /* Where ResourceQuotas, claims, pods and ElasticGPUs are read for the
     * quota of claims; NULL: claims are not held to quotas. */
    const struct egpu_webhook_quota *quota;
};

/* What one request's answer is. */
struct egpu_webhook_reply {
    int http_status;                 /* 200 (an AdmissionReview) or 400 (plain text) */
    enum egpu_webhook_result result; /* for metrics */
    char content_type[48];           /* "application/json" or "text/plain; charset=utf-8" */
    size_t nconverted;               /* compatible names converted (mutate) */
    char converted[8][128];          /* the first of them, for metrics */
};

/* Answer one AdmissionReview of len bytes (body need not be NUL-terminated)
 * on route r: the reply body is appended to out (caller-owned, bounded),
 * its status and type go to *reply. facts (may be NULL: the checks that
 * depend on the cluster are skipped) is what the cluster has, read by
 * /validate. A body that is not JSON or has no request.uid is answered 400
 * with a plain-text reason; every other input, however malformed, gets a
 * 200 AdmissionReview whose response.uid is request.uid. Thread-safe (cfg
 * and facts are only read). A mutating route given a Pod that uses claims
 * calls cfg->claims->get, and one given a GPU Pod cfg->budgets (see
 * above): the only I/O on this path. Returns 0,
 * or -ENOMEM / -EMSGSIZE (out full); out may then hold part of a reply and
 * must be discarded. */
int egpu_webhook_handle(const struct egpu_webhook_config *cfg, enum egpu_webhook_route r,
                        const struct egpu_api_facts *facts, const char *body, size_t len,
                        struct egpu_buf *out, struct egpu_webhook_reply *reply) EGPU_MUST_CHECK;

#ifdef __cplusplus
}
#endif

#endif /* EGPU_WEBHOOK_H */
