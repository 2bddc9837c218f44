/* webhook/mutate.c - POST /mutate and /mutate-nvidia: other GPU-sharing
 * systems' names rewritten into elasticgpu.io ones, and spec.schedulerName
 * of GPU pods.
 *
 * For a Pod (CREATE) and the pod template of a workload (CREATE and UPDATE):
 *   1. egpu_api_compat_convert works out the rewrites (tencent.com/,
 *      inspur.com/, aliyun.com/, gpushare and the older elastic-gpu names,
 *      and HAMi's nvidia.com/ ones on /mutate-nvidia or with
 *      --compat-nvidia), units converted; its error denies the request
 *      with its message (a name with no equivalent, e.g. several shared
 *      cards);
 *   2. the rewrites are applied to a copy of the template's metadata and
 *      spec (egpu_api_compat_apply, the same code every component uses);
 *   3. on a Pod, each container that uses an ElasticGPUClaim (annotation
 *      egpuc.elasticgpu.io/<container>: <claim>) gets the claim's gpu-core
 *      and gpu-memory as requests and limits (claims.c, which also says
 *      what is refused: a claim missing, Lost or Pending with gpu-tflops,
 *      a container asking a GPU itself, a lookup the API server did not
 *      answer); one warning per container says where its GPU comes from;
 *   3b. on a Pod, with --default-memory-per-core, each container that asks a
 *      share of one card (gpu-core 1..99) and no gpu-memory gets gpu-core x
 *      that many MiB, with a warning (egpu_api_share_memory_default); without
 *      it /validate refuses such a share, naming gpu-memory;
 *   4. on a Pod, each container that now asks a gpu-core share (1..99)
 *      and has no seccompProfile gets --seccomp-profile (seccomp.c), and a
 *      Pod that asks for what lifts that guard (privileged, another
 *      profile, SYS_ADMIN, the pod's Unconfined) is refused, naming the
 *      field; a workload template is only checked, by /validate;
 *   5. a Pod that now asks an elasticgpu.io resource and names no scheduler
 *      of its own (absent or "default-scheduler") gets --scheduler-name,
 *      unless --set-scheduler-name false (the extender then runs inside the
 *      main kube-scheduler);
 *   6. such a Pod, in a namespace with a GPUBudget, gets the budget's
 *      PriorityClass for its state (priorityClassName, priority and
 *      preemptionPolicy together) and the finalizer elasticgpu.io/metering
 *      (budgets.c; a budget or class that cannot be looked up refuses it);
 *   6b. in DRA mode (--mode dra) a Pod gets 5 but not 6: its GPU requests
 *      become ResourceClaimTemplates and resourceClaims instead, and each
 *      such container the marker elasticgpu.io/dra, so that kube-scheduler
 *      calls the extender for it (dra.c, which says what is rewritten); a
 *      container using an ElasticGPUClaim (checked as in 3) gets the
 *      claim's ResourceClaim, which egpu-controller --mode dra makes;
 *   7. the difference between the copy and the original becomes the JSON
 *      Patch (patch.c), and each converted name one `warnings` entry.
 * A Pod UPDATE is left alone: a pod's resources and schedulerName cannot
 * change after it was created, and a patch touching them would make the API
 * server refuse unrelated edits (a label, a finalizer). Subresources,
 * DELETE and CONNECT pass untouched. The same pass over an already patched
 * object finds nothing to rewrite and makes no patch, so
 * reinvocationPolicy: IfNeeded is safe. No side effects: dry runs are
 * answered the same.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "egpu/log.h"
#include "webhook_int.h"

void egpu__webhook_verdict_free(struct egpu__webhook_verdict *v)
{
    json_decref(v->ops);
    v->ops = NULL;
}

static void note_converted(struct egpu__webhook_verdict *v, const char *name)
{
    if (name[0] == '\0')
        return;
    for (size_t i = 0; i < v->nconverted; i++) {
        if (strcmp(v->converted[i], name) == 0)
            return;
    }
    if (v->nconverted < sizeof(v->converted) / sizeof(v->converted[0]))
        snprintf(v->converted[v->nconverted++], sizeof(v->converted[0]), "%s", name);
}

static void deny(struct egpu__webhook_verdict *v, int code, const char *reason, const char *msg)
{
    v->allowed = false;
    v->code = code;
    v->reason = reason;
    snprintf(v->message, sizeof(v->message), "%s", msg);
}

bool egpu__webhook_names_scheduler(const json_t *spec)
{
    const char *s = egpu_api_str(json_object_get(spec, "schedulerName"));

    return s != NULL && s[0] != '\0' && strcmp(s, "default-scheduler") != 0;
}

const char *egpu__webhook_scheduler_name(const struct egpu_webhook_config *cfg)
{
    return cfg->scheduler_name ? cfg->scheduler_name : EGPU_SCHEDULER_NAME;
}

/* The copy of the template's metadata and spec, rewritten; *notes gets the
 * --default-memory-per-core warnings. */
static int rewrite(const struct egpu_webhook_config *cfg, const struct egpu__webhook_podpart *pp,
                   const struct egpu_api_compat_result *res,
                   const struct egpu__webhook_claim_use *uses, size_t nuses, json_t **meta,
                   json_t **spec, struct egpu_api_problems *notes)
{
    int rc;

    json_t *ann = NULL;

    *meta = pp->metadata != NULL ? json_deep_copy(pp->metadata) : json_object();
    *spec = json_deep_copy(pp->spec);
    if (*meta == NULL || *spec == NULL)
        return -ENOMEM;
    if (res->nannotations > 0) {
        ann = json_object_get(*meta, "annotations");
        if (!json_is_object(ann)) {
            ann = json_object();
            if (ann == NULL || json_object_set_new(*meta, "annotations", ann) != 0)
                return -ENOMEM;
        }
    }
    if (egpu_api_compat_apply(*spec, ann, res) != 0)
        return -ENOMEM; /* -EINVAL cannot be: res was made from this spec */
    /* A Pod's share that names no memory gets the operator's default (a
     * template is left alone: its pods get it when they are created, and a
     * changed template would roll them all). Before the claims: a claimed
     * container asks nothing itself. */
    if (pp->is_pod && egpu_api_share_memory_default(*spec, cfg->default_mem_per_core, notes) < 0)
        return -ENOMEM;
    rc = egpu__webhook_claims_apply(*spec, uses, nuses);
    if (rc)
        return rc; /* -EINVAL cannot be either: uses were found in this spec */
    if (pp->is_pod) {
        rc = egpu__webhook_seccomp_apply(cfg, *spec);
        if (rc)
            return rc;
    }
    /* In DRA mode too: the extender scores the nodes of a DRA pod (FGD),
     * kube-scheduler's allocator then picks its card (dra.c). */
    if (pp->is_pod && cfg->set_scheduler_name && !egpu__webhook_names_scheduler(*spec) &&
        egpu_api_spec_wants_gpu(*spec)) {
        if (json_object_set_new(*spec, "schedulerName",
                                json_string(egpu__webhook_scheduler_name(cfg))) != 0)
            return -ENOMEM;
    }
    return 0;
}

static int diff(const struct egpu__webhook_podpart *pp, const json_t *meta, const json_t *spec,
                json_t *ops)
{
    struct egpu__webhook_pointer at = {0};
    int rc = 0;

    for (size_t i = 0; i < pp->nsegs; i++)
        at.seg[at.n++] = pp->segs[i];
    at.seg[at.n++] = "metadata";
    if (pp->metadata != NULL || json_object_size(meta) > 0)
        rc = egpu__webhook_patch_diff(ops, &at, pp->metadata, meta);
    at.seg[at.n - 1] = "spec";
    if (!rc)
        rc = egpu__webhook_patch_diff(ops, &at, pp->spec, spec);
    return rc;
}

int egpu__webhook_mutate(const struct egpu_webhook_config *cfg, const struct egpu_api_facts *facts,
                         bool nvidia, const struct egpu__webhook_review *rv,
                         struct egpu__webhook_verdict *v)
{
    struct egpu_api_compat_opts opts = {.nvidia = nvidia,
                                        .aliyun_mem_mib = cfg->aliyun_mem_mib,
                                        .memory_only_core = cfg->memory_only_core};
    struct egpu__webhook_claim_use uses[EGPU_API_POD_CLAIMS_MAX];
    struct egpu_api_problems problems = {0}, notes = {0};
    struct egpu_api_compat_result *res;
    struct egpu_error err = {0};
    size_t nuses = 0;
    json_t *meta = NULL, *spec = NULL;
    struct egpu__webhook_podpart pp;
    int rc;

    memset(v, 0, sizeof(*v));
    v->allowed = true;
    if (rv->sub_resource[0] != '\0' ||
        (rv->op != EGPU_WEBHOOK_OP_CREATE && rv->op != EGPU_WEBHOOK_OP_UPDATE))
        return 0;
    if (!egpu__webhook_podpart_find(rv->group, rv->version, rv->kind, rv->object, &pp) ||
        pp.spec == NULL || (pp.is_pod && rv->op != EGPU_WEBHOOK_OP_CREATE))
        return 0;
    res = egpu_malloc(sizeof(*res)); /* about 31 KiB: not on a pool thread's stack */
    if (res == NULL)
        return -ENOMEM;
    rc = egpu_api_compat_convert(pp.spec, pp.annotations, &opts, res, &err);
    if (rc == -ENOMEM) {
        egpu_free(res);
        return rc;
    }
    if (rc) {
        deny(v, 403, "Forbidden", err.msg);
        egpu_free(res);
        return 0;
    }
    if (pp.is_pod) {
        rc = egpu__webhook_claims_resolve(cfg, nvidia, rv, &pp, uses, &nuses, &problems, v);
        if (rc || problems.n > 0) {
            if (!rc)
                egpu__webhook_deny_problems(v, &problems);
            v->nwarnings = 0;
            egpu_free(res);
            return rc;
        }
    }
    rc = rewrite(cfg, &pp, res, uses, nuses, &meta, &spec, &notes);
    if (!rc && pp.is_pod) {
        /* On the converted spec: a compatible gpu-core share counts too. */
        egpu__webhook_seccomp_check(cfg, spec, &problems);
        if (problems.n > 0) {
            egpu__webhook_deny_problems(v, &problems);
            v->nwarnings = 0;
            goto out;
        }
        if (cfg->mode == EGPU_WEBHOOK_MODE_DRA) /* dra.c: claims, not budgets' classes */
            rc = egpu__webhook_dra_rewrite(cfg, facts, nvidia, meta, spec, uses, nuses, &problems,
                                           v);
        else
            rc = egpu__webhook_budget_apply(cfg, rv, meta, spec, &problems, v);
        rc = rc > 0 ? 0 : rc;
        if (!rc && problems.n > 0) {
            egpu__webhook_deny_problems(v, &problems);
            v->nwarnings = 0;
            goto out;
        }
    }
    if (!rc) {
        v->ops = json_array();
        rc = v->ops == NULL ? -ENOMEM : diff(&pp, meta, spec, v->ops);
    }
    if (!rc) {
        for (size_t i = 0; i < res->nwarnings && v->nwarnings < EGPU_API_PROBLEMS_MAX; i++)
            snprintf(v->warnings[v->nwarnings++], sizeof(v->warnings[0]), "%s", res->warnings[i]);
        for (size_t i = 0; i < notes.n && v->nwarnings < EGPU_API_PROBLEMS_MAX; i++)
            snprintf(v->warnings[v->nwarnings++], sizeof(v->warnings[0]), "%s", notes.msg[i]);
        for (size_t i = 0; i < res->nedits; i++)
            note_converted(v, res->edits[i].from);
        for (size_t i = 0; i < res->nannotations; i++)
            note_converted(v, res->annotations[i].from);
    }
out:
    if (rc || json_array_size(v->ops) == 0)
        egpu__webhook_verdict_free(v);
    json_decref(meta);
    json_decref(spec);
    egpu_free(res);
    return rc;
}
