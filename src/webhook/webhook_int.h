/* webhook/webhook_int.h - egpu-webhook's private parts: the AdmissionReview
 * decoder and encoder (review.c), the JSON Patch builder (patch.c), the
 * pod templates of workload kinds (template.c), the mutating and validating
 * rules (mutate.c, place.c, validate.c), the claims pods use (claims.c), the GPU
 * facts (facts.c) and the options. */
#ifndef EGPU_WEBHOOK_INT_H
#define EGPU_WEBHOOK_INT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "egpu/api.h"
#include "egpu/cli.h"
#include "egpu/core.h"
#include "egpu/webhook.h"

/* ------------------------------------------------------------------------ */
/* AdmissionReview (review.c)                                               */

#define EGPU_WEBHOOK_REVIEW_API_VERSION       "admission.k8s.io/v1"
#define EGPU_WEBHOOK_REVIEW_KIND              "AdmissionReview"
/* request.uid, bytes incl. NUL (the API server's is 36) */
#define EGPU_WEBHOOK_UID_MAX                  256
/* --default-memory-per-core at most, MiB per gpu-core percent (6.4 TiB a card) */
#define EGPU_WEBHOOK_DEFAULT_MEM_PER_CORE_MAX 65536

enum egpu__webhook_op {
    EGPU_WEBHOOK_OP_CREATE,
    EGPU_WEBHOOK_OP_UPDATE,
    EGPU_WEBHOOK_OP_DELETE,
    EGPU_WEBHOOK_OP_CONNECT
};

/* A decoded AdmissionReview request. Strings and objects are borrowed from
 * doc; a string field that is absent reads "". */
struct egpu__webhook_review {
    json_t *doc;                        /* the whole review (owned; egpu__webhook_review_free) */
    const char *uid;                    /* request.uid, 1..255 bytes */
    const char *group, *version, *kind; /* request.kind; group "" is the core group */
    const char *resource;               /* request.resource.resource, e.g. "pods" */
    const char *sub_resource;           /* request.subResource, "" for the object itself */
    enum egpu__webhook_op op;           /* request.operation */
    const char *ns, *name;              /* request.namespace, request.name */
    const char *username;               /* request.userInfo.username */
    const json_t *object;               /* request.object; NULL when absent or null */
    const json_t *old_object;           /* request.oldObject; NULL when absent or null */
    bool dry_run;                       /* request.dryRun */
};

/* Decode body (len bytes, NUL not needed). Returns
 *   0            *out complete;
 *   EGPU_ERANGE  a review with a usable request.uid that is wrong otherwise
 *                (apiVersion, kind, a field of the wrong type or value):
 *                out->doc and out->uid are set (the reply is an
 *                AdmissionReview denying with code 400 and err's text), the
 *                rest of *out is unspecified;
 *   EGPU_ESYNTAX not JSON, not an object, no request or no usable
 *                request.uid: nothing to reply to but HTTP 400 with err's
 *                text; *out holds nothing to free;
 *   -ENOMEM.
 * err names the field and what was expected. Free *out with
 * egpu__webhook_review_free in every case (a no-op when it holds nothing). */
int egpu__webhook_review_decode(const char *body, size_t len, struct egpu__webhook_review *out,
                                struct egpu_error *err) EGPU_MUST_CHECK;

/* Copy src into dst (len bytes incl. NUL, cut to fit) with every control
 * character and '"' replaced by '?', for log lines and plain-text replies
 * that quote outside input. */
void egpu__webhook_printable(char *dst, size_t len, const char *src);

/* Drop r's document and zero r. */
void egpu__webhook_review_free(struct egpu__webhook_review *r);

/* An AdmissionResponse to encode. */
struct egpu__webhook_response {
    bool allowed;
    int code;            /* denial: status.code (403, 400) */
    const char *reason;  /* denial: status.reason ("Forbidden", "BadRequest") */
    const char *message; /* denial: status.message, what the user reads */
    const json_t *patch; /* JSON Patch operations (array), or NULL / empty: none */
    const json_t *audit; /* auditAnnotations (object of strings), or NULL */
    const char *const *warnings;
    size_t nwarnings;
};

/* Append the reply AdmissionReview {apiVersion, kind, response{uid,
 * allowed, status{metadata, status, message, reason, code} (denials only),
 * patch (base64 of the compact JSON Patch text), patchType "JSONPatch",
 * auditAnnotations, warnings}} to out, compact, keys in that order and each
 * optional one only when it has something. Returns 0, -ENOMEM, -EMSGSIZE
 * (out full) or -EINVAL (base64 failed). */
int egpu__webhook_response_encode(const char *uid, const struct egpu__webhook_response *r,
                                  struct egpu_buf *out, struct egpu_error *err) EGPU_MUST_CHECK;

/* ------------------------------------------------------------------------ */
/* JSON Patch (patch.c)                                                     */

#define EGPU_WEBHOOK_PATH_MAX 32 /* segments of the pointers we build */

/* A JSON Pointer (RFC 6901) under construction: object keys are borrowed,
 * array indexes written into idx. */
struct egpu__webhook_pointer {
    size_t n;
    const char *seg[EGPU_WEBHOOK_PATH_MAX];
    char idx[EGPU_WEBHOOK_PATH_MAX][24];
};

/* Append the pointer text of p to out: "/" before each segment, "~" as
 * "~0" and "/" as "~1" (in that order, so "a~1" is "a~01"). Returns 0 or
 * what egpu_buf_append returns. */
int egpu__webhook_pointer_text(const struct egpu__webhook_pointer *p,
                               struct egpu_buf *out) EGPU_MUST_CHECK;

/* Append to ops (a JSON array) the RFC 6902 operations that turn old into
 * new at pointer at: keys only in old are removed, keys only in new added
 * (a whole object at once when its parent was absent), values that differ
 * replaced; objects are compared key by key and arrays of equal length
 * element by element (arrays of different length are replaced whole). So a
 * field neither side changed is never named, and nothing else is dropped.
 * old NULL means "absent" (new is added whole). A difference deeper than
 * EGPU_WEBHOOK_PATH_MAX segments replaces its subtree at that depth. Returns 0
 * or -ENOMEM. */
int egpu__webhook_patch_diff(json_t *ops, struct egpu__webhook_pointer *at, const json_t *old,
                             const json_t *new) EGPU_MUST_CHECK;

/* Apply ops (RFC 6902 add, remove, replace: the ones egpu__webhook_patch_diff
 * makes) to doc in place, as the API server will. Returns 0, -EINVAL (an
 * operation that does not fit doc) or -ENOMEM. For tests and the fuzzer, which
 * check that a patch does what it says. */
int egpu__webhook_patch_apply(json_t *doc, const json_t *ops) EGPU_MUST_CHECK;

/* ------------------------------------------------------------------------ */
/* Pod templates (template.c)                                               */

/* Where the pod (template) of an object of kind group/version/kind lies:
 * the pointer segments from the object's root to the PodTemplateSpec-like
 * part holding metadata and spec ("" for a Pod itself). */
struct egpu__webhook_podpart {
    bool is_pod;             /* a core/v1 Pod */
    const char *const *segs; /* static; segments to the template */
    size_t nsegs;
    const json_t *metadata;    /* the template's (or pod's) metadata, or NULL */
    const json_t *annotations; /* its metadata.annotations, or NULL */
    const json_t *spec;        /* the PodSpec, or NULL */
};

/* Find the pod part of obj for kind group/version/kind. Returns true and
 * writes *out when the kind is one we handle (Pod, the apps/v1 workloads,
 * batch/v1 Job and CronJob), else false. */
bool egpu__webhook_podpart_find(const char *group, const char *version, const char *kind,
                                const json_t *obj, struct egpu__webhook_podpart *out);

/* ------------------------------------------------------------------------ */
/* The rules (mutate.c, validate.c)                                         */

/* One verdict: allowed (with ops and warnings) or denied with message. */
struct egpu__webhook_verdict {
    bool allowed;
    int code;           /* when denied */
    const char *reason; /* when denied, static */
    char message[EGPU_API_PROBLEMS_MAX * EGPU_API_PROBLEM_MAX + 64];
    json_t *ops; /* JSON Patch operations (owned), NULL = none */
    size_t nwarnings;
    char warnings[EGPU_API_PROBLEMS_MAX][EGPU_API_PROBLEM_MAX];
    size_t nconverted;
    char converted[8][128]; /* names converted, for metrics */
};

/* The mutating rules for review rv: fills *v (zeroed first). facts (may be
 * NULL: none known) are the cluster's GPUs, which DRA mode's rewrite
 * checks a request against (/validate no longer sees it once rewritten).
 * Returns 0 or -ENOMEM. */
int egpu__webhook_mutate(const struct egpu_webhook_config *cfg, const struct egpu_api_facts *facts,
                         bool nvidia, const struct egpu__webhook_review *rv,
                         struct egpu__webhook_verdict *v) EGPU_MUST_CHECK;

/* The validating rules for review rv with the cluster's facts (may be
 * NULL): fills *v (zeroed first). Returns 0 or -ENOMEM. */
int egpu__webhook_validate(const struct egpu_webhook_config *cfg,
                           const struct egpu_api_facts *facts,
                           const struct egpu__webhook_review *rv,
                           struct egpu__webhook_verdict *v) EGPU_MUST_CHECK;

/* The rules of /mutate-place (place.c) for review rv: fills *v (zeroed first).
 * A Pod CREATE (no subresource) whose spec names no scheduler of its own
 * (egpu__webhook_names_scheduler) and that asks no GPU (egpu_api_pod_asks_gpu
 * with HAMi's names counted: those pods are /mutate-nvidia's or HAMi's) gets
 * one JSON Patch operation setting spec.schedulerName to
 * egpu__webhook_scheduler_name(cfg); with cfg->set_scheduler_name false, and
 * for anything else (a GPU pod, another scheduler, an UPDATE, another kind, a
 * pod without a spec object), v is allowed with no patch. Never denies.
 * Returns 0 or -ENOMEM. */
int egpu__webhook_place(const struct egpu_webhook_config *cfg,
                        const struct egpu__webhook_review *rv,
                        struct egpu__webhook_verdict *v) EGPU_MUST_CHECK;

/* Does spec (a PodSpec) name a scheduler of its own: a schedulerName that is
 * a non-empty string other than "default-scheduler" (which the API server
 * writes into a pod that names none)? (mutate.c) */
bool egpu__webhook_names_scheduler(const json_t *spec);

/* The scheduler name the mutating routes set: cfg->scheduler_name, or
 * EGPU_SCHEDULER_NAME when NULL. Static or cfg's string. (mutate.c) */
const char *egpu__webhook_scheduler_name(const struct egpu_webhook_config *cfg);

/* Free v->ops. */
void egpu__webhook_verdict_free(struct egpu__webhook_verdict *v);

/* Add msg (cut to EGPU_API_PROBLEM_MAX) to p, or count it in p->more when p
 * is full (claims.c). */
void egpu__webhook_problem_add(struct egpu_api_problems *p, const char *msg);

/* Add a warning (printf fmt, cut to fit a warnings entry) to v, or drop it
 * when v holds EGPU_API_PROBLEMS_MAX already (claims.c). */
void egpu__webhook_warn(struct egpu__webhook_verdict *v, const char *fmt, ...) EGPU_PRINTF(2, 3);

/* Deny v with code 403 "Forbidden" and p's problems joined with "; ", then
 * "; and N more" (claims.c). */
void egpu__webhook_deny_problems(struct egpu__webhook_verdict *v,
                                 const struct egpu_api_problems *p);

/* ------------------------------------------------------------------------ */
/* The seccomp guard of shared-GPU containers (seccomp.c)                   */

/* cfg->seccomp_profile, or its default EGPU_WEBHOOK_SECCOMP_PROFILE. */
const char *egpu__webhook_seccomp_profile(const struct egpu_webhook_config *cfg);

/* One problem in p for each thing in spec (a PodSpec) that would lift the
 * seccomp guard of a container asking a gpu-core share 1..99, naming the
 * field and the allowed values: privileged true, a seccompProfile other
 * than ours, capabilities.add SYS_ADMIN or ALL; and the pod's
 * seccompProfile Unconfined when it has such a container. */
void egpu__webhook_seccomp_check(const struct egpu_webhook_config *cfg, const json_t *spec,
                                 struct egpu_api_problems *p);

/* Give each such container of spec (a copy of a Pod's PodSpec) without a
 * seccompProfile ours, in its securityContext (made when absent); other
 * members are kept. Returns 0 or -ENOMEM. */
int egpu__webhook_seccomp_apply(const struct egpu_webhook_config *cfg,
                                json_t *spec) EGPU_MUST_CHECK;

/* ------------------------------------------------------------------------ */
/* Pods use claims (claims.c)                                               */

/* One container that uses a claim, and what it gets. */
struct egpu__webhook_claim_use {
    size_t ctr;                              /* its index in spec.containers */
    char container[EGPU_CONTAINER_NAME_MAX]; /* its name */
    char claim[EGPU_K8S_NAME_MAX];           /* the ElasticGPUClaim, of the pod's namespace */
    struct egpu_api_gpu_ask ask;             /* gpu-core and gpu-memory from the claim */
    bool done; /* it asks exactly that already, or in DRA mode already names the claim's
                * ResourceClaim (the patch seen again): nothing to write */
};

/* The claims of the Pod being created in rv (pp: its pod part; nvidia: the
 * route converts HAMi's names, which then count as GPU requests too), each
 * annotation egpuc.elasticgpu.io/<container>: <claim> looked up through
 * cfg->claims in the pod's namespace (request.namespace) and resolved into
 * uses[0..*n) (uses has EGPU_API_POD_CLAIMS_MAX entries). Every annotation
 * that cannot be honoured adds one sentence to p, naming the annotation
 * and the reason (no such container, the claim missing, Lost, Pending with
 * gpu-tflops, malformed, the lookup unanswered, the container asking a GPU
 * itself); egpu_api_pod_claims's error is added as it is. Each use to write
 * adds one warning to v. In DRA mode (cfg->mode) a use is done when its
 * container already has what egpu__webhook_dra_rewrite writes for it
 * (egpu__webhook_dra_claim_done). Returns 0 (problems or not) or -ENOMEM. */
int egpu__webhook_claims_resolve(const struct egpu_webhook_config *cfg, bool nvidia,
                                 const struct egpu__webhook_review *rv,
                                 const struct egpu__webhook_podpart *pp,
                                 struct egpu__webhook_claim_use *uses, size_t *n,
                                 struct egpu_api_problems *p,
                                 struct egpu__webhook_verdict *v) EGPU_MUST_CHECK;

/* Write uses[0..n) into spec (a copy of the pod's PodSpec): gpu-core and,
 * when given, gpu-memory as decimal strings, in both resources.requests and
 * resources.limits of each container not yet done (extended resources need
 * both, equal). Returns 0, -EINVAL (a use whose container is not in spec)
 * or -ENOMEM. */
int egpu__webhook_claims_apply(json_t *spec, const struct egpu__webhook_claim_use *uses,
                               size_t n) EGPU_MUST_CHECK;

/* On a Pod UPDATE in rv: one problem in p for each egpuc.elasticgpu.io/
 * annotation that was added, changed or removed (they are fixed at the
 * pod's creation). */
void egpu__webhook_claims_immutable(const struct egpu__webhook_review *rv,
                                    struct egpu_api_problems *p);

/* ------------------------------------------------------------------------ */
/* GPU budgets (budgets.c)                                                  */

/* On the Pod being created in rv, which asks an elasticgpu.io resource once
 * rewritten (meta and spec: the copies being rewritten, changed in place):
 * when cfg->budgets is set and the namespace (request.namespace) has a
 * GPUBudget (the first by name when several), add the finalizer
 * elasticgpu.io/metering to meta's finalizers, and give spec the budget's
 * PriorityClass for its state (status.state, InBudget until the controller
 * has written one): overBudgetPriorityClassName when OverBudget, else
 * inBudgetPriorityClassName (none: the priority is left alone). The class
 * is set as the API server's Priority plugin sets it: priorityClassName,
 * priority (its value) and preemptionPolicy (its own, default
 * PreemptLowerPriority) together; a class of the pod's own is replaced. A
 * class that does not exist or cannot be read leaves the priority alone.
 * Each change adds warnings to v saying why (the namespace's state, the
 * class replaced, the class missing); a pod that already has all of it
 * (the patch seen again) is left as it is, with no warning. A lookup
 * that cannot be answered adds one problem to p (the pod is refused:
 * budgets are not dodged by a moment's failure). Returns 0 or -ENOMEM. */
int egpu__webhook_budget_apply(const struct egpu_webhook_config *cfg,
                               const struct egpu__webhook_review *rv, json_t *meta, json_t *spec,
                               struct egpu_api_problems *p,
                               struct egpu__webhook_verdict *v) EGPU_MUST_CHECK;

/* On a Pod UPDATE in rv: one problem in p when the finalizer
 * elasticgpu.io/metering was removed by a user other than
 * cfg->controller_user (budgets.c). */
void egpu__webhook_budget_finalizer_guard(const struct egpu_webhook_config *cfg,
                                          const struct egpu__webhook_review *rv,
                                          struct egpu_api_problems *p);

/* ------------------------------------------------------------------------ */
/* Claims against ResourceQuotas (quota.c)                                  */

/* Is rv about an elasticgpu.io ElasticGPUClaim? */
bool egpu__webhook_quota_is_claim(const struct egpu__webhook_review *rv);

/* On an ElasticGPUClaim CREATE, or an UPDATE that raises what it holds (a
 * Bound claim its status.capacity, a Pending one its requests, gpu-tflops
 * as 99): one problem in p when that would take namespace request.namespace
 * past a ResourceQuota without scopes on requests.elasticgpu.io/gpu-core or
 * gpu-memory, counting its claims (not Lost), the ElasticGPUs whose claimRef
 * names a claim of it that is gone (Released, not Failed), and its
 * unfinished pods' containers that use no claim (those that do ask what
 * their claim holds, counted once, with it).
 * The sentence is the quota plugin's ("ElasticGPUClaim \"b\" is forbidden:
 * exceeded quota: gpu-quota, requested: requests.elasticgpu.io/gpu-core=99,
 * used: requests.elasticgpu.io/gpu-core=99, limited:
 * requests.elasticgpu.io/gpu-core=100 (used: ...)"); a read through
 * cfg->quota that fails adds one problem too (fail closed). Nothing when
 * cfg->quota is NULL. Returns 0 or -ENOMEM. */
int egpu__webhook_quota_claim(const struct egpu_webhook_config *cfg,
                              const struct egpu__webhook_review *rv,
                              struct egpu_api_problems *p) EGPU_MUST_CHECK;

/* On a Pod CREATE: the same for what the pod's containers that use no claim
 * ask, against everything the namespace holds (so claims count against the
 * quota for pods too, which the API server's quota plugin cannot see).
 * Returns 0 or -ENOMEM. */
int egpu__webhook_quota_pod(const struct egpu_webhook_config *cfg,
                            const struct egpu__webhook_review *rv,
                            struct egpu_api_problems *p) EGPU_MUST_CHECK;

/* The same check for core gpu-core percent and mem gpu-memory MiB that
 * what (e.g. "ResourceClaim \"c\"", for the message) asks in namespace ns,
 * against everything the namespace holds but ResourceClaim skip_rc (the one
 * under review; NULL: none). rc_obj (or NULL): the ResourceClaim under
 * review; when an ElasticGPUClaim of the namespace controls it (its
 * ownerReference, as egpu-controller --mode dra makes elasticgpu-<claim>),
 * only what it asks beyond that claim counts (the two are one holding; each
 * ResourceClaim in the namespace is counted so too). Returns 0 or -ENOMEM. */
int egpu__webhook_quota_ask(const struct egpu_webhook_config *cfg, const char *ns,
                            const char *skip_rc, const json_t *rc_obj, int64_t core, int64_t mem,
                            const char *what, struct egpu_api_problems *p) EGPU_MUST_CHECK;

/* ------------------------------------------------------------------------ */
/* DRA claims against GPUBudgets and ResourceQuotas (dra_quota.c)           */

/* Is rv about a resource.k8s.io ResourceClaim or ResourceClaimTemplate? */
bool egpu__webhook_dra_quota_is_dra(const struct egpu__webhook_review *rv);

/* On the CREATE of a ResourceClaim or ResourceClaimTemplate asking this
 * driver's DeviceClasses (egpu_api_dra_spec_usage of its spec, a
 * template's spec.spec): a spec that does not parse is one problem in p
 * naming the field; so is a namespace whose GPUBudget (the first by name)
 * is OverBudget (naming the budget, its used and gpuHours), and one over a
 * ResourceQuota (egpu__webhook_quota_ask). Nothing for any other operation,
 * or for an object asking nothing of this driver. Returns 0 or -ENOMEM. */
int egpu__webhook_dra_quota(const struct egpu_webhook_config *cfg,
                            const struct egpu__webhook_review *rv,
                            struct egpu_api_problems *p) EGPU_MUST_CHECK;

/* The GPUBudget of a namespace among list (its GPUBudgets): the first by
 * metadata.name, or NULL; borrowed from list (budgets.c). */
const json_t *egpu__webhook_budget_first(const json_t *list);

/* ------------------------------------------------------------------------ */
/* DRA mode (dra.c)                                                         */

/* On a Pod being created in DRA mode (meta and spec: the copies mutate.c
 * rewrites, compatible names already converted and uses[0..nuses) written
 * by egpu__webhook_claims_apply; nvidia: the route converts HAMi's names):
 * when spec asks an elasticgpu.io resource, validate it
 * (egpu_api_pod_validate with facts, NULL for none, and cfg's default
 * memory: a share must fit the largest card, a gpu-model name one the
 * cluster has, as /validate judges it; each problem goes to p
 * and nothing is rewritten), then give each GPU container its pod claim
 * egpu-<index> (its GPU names removed from requests and limits): for a
 * container of a use not done, spec.resourceClaims' resourceClaimName the
 * ElasticGPUClaim's ResourceClaim (egpu_api_dra_object_name; a name too
 * long is a problem naming the claim); for any other, a
 * ResourceClaimTemplate, listed in meta's annotation EGPU_ANN_DRA_CLAIMS
 * (left out, and a pod owner's own removed, when there is none). One
 * warning per container to v. Returns the number of containers rewritten
 * (0: none asks a GPU, or problems), or -ENOMEM. */
int egpu__webhook_dra_rewrite(const struct egpu_webhook_config *cfg,
                              const struct egpu_api_facts *facts, bool nvidia, json_t *meta,
                              json_t *spec, const struct egpu__webhook_claim_use *uses,
                              size_t nuses, struct egpu_api_problems *p,
                              struct egpu__webhook_verdict *v) EGPU_MUST_CHECK;

/* Does container ctr (its index in spec.containers, spec a PodSpec) already
 * have what egpu__webhook_dra_rewrite writes for ElasticGPUClaim claim:
 * resources.claims {name egpu-<ctr>, request EGPU_API_DRA_REQUEST} and
 * spec.resourceClaims {name egpu-<ctr>, resourceClaimName the claim's
 * ResourceClaim}, nothing more in either entry? */
bool egpu__webhook_dra_claim_done(const json_t *spec, size_t ctr, const char *claim);

/* On a Pod CREATE or UPDATE in rv (/validate, every mode): one problem in p
 * when an UPDATE adds, changes or removes EGPU_ANN_DRA_CLAIMS, or a CREATE
 * carries one that is not what egpu__webhook_dra_rewrite writes for this
 * pod (outside DRA mode: any). */
void egpu__webhook_dra_guard(const struct egpu_webhook_config *cfg,
                             const struct egpu__webhook_review *rv, struct egpu_api_problems *p);

/* The marker EGPU_RES_DRA in spec (a PodSpec of a Pod or a pod template;
 * annotations its metadata.annotations, may be NULL), on /validate: one
 * problem in p per container that names it in requests or limits and is
 * not one egpu__webhook_dra_rewrite moved to a claim (outside DRA mode:
 * every one; in DRA mode: one without resources.claims egpu-<i> and the
 * pod's resourceClaims entry egpu-<i> naming a template the annotation
 * EGPU_ANN_DRA_CLAIMS lists or its ElasticGPUClaim's ResourceClaim; an
 * init container always), or whose marker is not "1" in both maps.
 * Returns 0 (problems or not) or -ENOMEM. */
int egpu__webhook_dra_marker_check(const struct egpu_webhook_config *cfg, const json_t *spec,
                                   const json_t *annotations,
                                   struct egpu_api_problems *p) EGPU_MUST_CHECK;

/* ------------------------------------------------------------------------ */
/* What the cluster has (facts.c)                                           */

struct egpu_kube;
struct egpu__webhook_facts;

/* One immutable view of the cluster's GPUs, shared by the requests that
 * took it (reference counted). facts.models points into it. */
struct egpu__webhook_facts_snap {
    struct egpu_api_facts facts; /* max_card_mib, nmodels, models */
    size_t ncards;               /* GPU objects known */
};

/* GPU facts fed by egpu_kube_informer_cbs (facts.c), for main.c and tests:
 * create, feed (the informer callbacks, or directly in tests), read. */
struct egpu__webhook_facts *egpu__webhook_facts_new(void);
void egpu__webhook_facts_free(struct egpu__webhook_facts *f);
/* Informer callbacks; ud is the struct egpu__webhook_facts. */
void egpu__webhook_facts_on_add(void *ud, const json_t *gpu);
void egpu__webhook_facts_on_update(void *ud, const json_t *old_gpu, const json_t *gpu);
void egpu__webhook_facts_on_delete(void *ud, const json_t *gpu);
/* The current view (rebuilt here when GPUs changed since the last one), a
 * reference the caller drops with egpu__webhook_facts_put; NULL when out of
 * memory. */
const struct egpu__webhook_facts_snap *egpu__webhook_facts_get(struct egpu__webhook_facts *f);
void egpu__webhook_facts_put(const struct egpu__webhook_facts_snap *s);

/* ------------------------------------------------------------------------ */
/* Options (options.c)                                                      */

/* ------------------------------------------------------------------------ */
/* Self-signed serving certificate (certs.c: the PKI; selfsigned.c: the      */
/* Secret, the configurations' caBundle, the served files)                  */

#define EGPU_WEBHOOK_SS_NAMES    4   /* DNS names of the serving certificate */
#define EGPU_WEBHOOK_SS_NAME_MAX 256 /* one name, bytes incl. NUL */

struct egpu__webhook_ss_options {
    bool enabled;              /* --self-signed */
    const char *ns;            /* the Secret's and the Service's; NULL = the client's */
    const char *secret;        /* Secret holding ca.crt, ca.key, tls.crt, tls.key */
    const char *service;       /* the Service the API server calls */
    const char *configuration; /* name of both webhook configurations */
    int64_t ca_validity_s;     /* a new CA's life, seconds */
    int64_t cert_validity_s;   /* a new serving certificate's life, seconds */
    int64_t renew_before_s;    /* make either again this long before it ends */
    int64_t check_s;           /* read the Secret and the caBundles this often */
};

/* A duration "N" followed by s, m, h or d (e.g. 30d, 8760h, 90s) into
 * *out_s, seconds in min_s..max_s. Returns 0, -EINVAL (not that form) or
 * -ERANGE; *out_s only on success. */
int egpu__webhook_ss_parse_duration(const char *s, int64_t min_s, int64_t max_s,
                                    int64_t *out_s) EGPU_MUST_CHECK;

/* The serving certificate's DNS names for Service svc in namespace ns:
 * svc, svc.ns, svc.ns.svc, svc.ns.svc.cluster.local. Returns 0, -EINVAL
 * (an empty name) or -ENAMETOOLONG. */
int egpu__webhook_ss_dns_names(const char *svc, const char *ns,
                               char names[EGPU_WEBHOOK_SS_NAMES][EGPU_WEBHOOK_SS_NAME_MAX])
    EGPU_MUST_CHECK;

/* Whether a certificate ending at not_after_s must be made again at now_s. */
bool egpu__webhook_ss_is_due(int64_t not_after_s, int64_t now_s, int64_t renew_before_s);

/* Standard base64 (GnuTLS) of len bytes into *out, or of a base64 string
 * into *out (NUL added) and *len. *out is egpu_malloc'd (caller
 * egpu_free()s). Return 0, -EINVAL or -ENOMEM; *out only on success. */
int egpu__webhook_b64_encode(const void *data, size_t len, char **out) EGPU_MUST_CHECK;
int egpu__webhook_b64_decode(const char *b64, char **out, size_t *len) EGPU_MUST_CHECK;

/* The PEM texts of the Secret (each egpu_malloc'd, or NULL). */
struct egpu__webhook_pki {
    char *ca_crt;  /* CA bundle: the current CA first, then older ones still valid */
    char *ca_key;  /* the current CA's key */
    char *tls_crt; /* the serving certificate */
    char *tls_key; /* its key */
};

/* What egpu__webhook_pki_check found. */
struct egpu__webhook_pki_info {
    int64_t ca_not_after_s;  /* the current CA's end, Unix seconds */
    int64_t tls_not_after_s; /* the serving certificate's */
    unsigned nca;            /* certificates in ca_crt */
    bool tls_matches;        /* signed by the current CA and naming every name */
};

/* Free p's texts and zero it. */
void egpu__webhook_pki_clear(struct egpu__webhook_pki *p);

/* A new CA (CN=cn, ECDSA P-256, valid validity_s from now_s) into
 * p->ca_crt (that certificate alone) and p->ca_key, replacing them. */
int egpu__webhook_pki_new_ca(const char *cn, int64_t now_s, int64_t validity_s,
                             struct egpu__webhook_pki *p, struct egpu_error *err) EGPU_MUST_CHECK;

/* A new serving key and certificate for names[0..n) signed by p's current
 * CA, valid validity_s from now_s but never past the CA, into p->tls_crt
 * and p->tls_key, replacing them. */
int egpu__webhook_pki_new_leaf(struct egpu__webhook_pki *p,
                               const char names[][EGPU_WEBHOOK_SS_NAME_MAX], size_t n,
                               int64_t now_s, int64_t validity_s,
                               struct egpu_error *err) EGPU_MUST_CHECK;

/* Parse all of p and fill *out. Returns 0, or -EINVAL when a part is
 * missing or does not parse, or a key is not its certificate's (err says
 * which). */
int egpu__webhook_pki_check(const struct egpu__webhook_pki *p,
                            const char names[][EGPU_WEBHOOK_SS_NAME_MAX], size_t n,
                            struct egpu__webhook_pki_info *out,
                            struct egpu_error *err) EGPU_MUST_CHECK;

/* The CA bundle newer (PEM) followed by the certificates of older that
 * have not ended at now_s, into *out (egpu_malloc'd). */
int egpu__webhook_pki_bundle_join(const char *newer, const char *older, int64_t now_s, char **out,
                                  struct egpu_error *err) EGPU_MUST_CHECK;

struct egpu_kube;
struct egpu__webhook_selfsigned;

/* The keeper of the Secret, the caBundles and the files cert_file and
 * key_file (in one directory, made 0700 when missing). new makes the first
 * pass: reads or creates the Secret, patches the caBundles, writes the
 * files; it fails when the Secret cannot be read or written or the files
 * cannot be. kc is borrowed for *out's life. */
int egpu__webhook_selfsigned_new(const struct egpu__webhook_ss_options *o, struct egpu_kube *kc,
                                 const char *cert_file, const char *key_file,
                                 struct egpu__webhook_selfsigned **out,
                                 struct egpu_error *err) EGPU_MUST_CHECK;
/* Start the thread that does that again every check_s. */
int egpu__webhook_selfsigned_start(struct egpu__webhook_selfsigned *s,
                                   struct egpu_error *err) EGPU_MUST_CHECK;
/* Stop the thread (if started) and free s. NULL is a no-op. */
void egpu__webhook_selfsigned_free(struct egpu__webhook_selfsigned *s);

struct egpu__webhook_options {
    struct egpu_cli_server srv; /* the flags every server shares (egpu/cli.h) */
    struct egpu_webhook_config cfg;
    struct egpu__webhook_ss_options ss;
};

/* Parse argv (and the EGPU_* environment) into *o. Returns -1 to run, 0 when
 * --help or --version was answered, 2 on a bad flag (message printed). */
int egpu__webhook_options_parse(int argc, char **argv, struct egpu__webhook_options *o);

#endif /* EGPU_WEBHOOK_INT_H */
