/* webhook/dra_quota.c - DRA mode's ResourceClaims and ResourceClaimTemplates
 * (resource.k8s.io/v1) held to the namespace's GPUBudget and to its
 * ResourceQuotas on requests.elasticgpu.io/gpu-core and gpu-memory: the
 * quota of cores and memory Kubernetes lacks (its ResourceQuota counts
 * devices of a class, not what share of one a claim consumes).
 *
 * On /validate, a CREATE of either kind whose spec (a template's
 * spec.spec) asks this driver's classes (egpu_api_dra_spec_usage: cores
 * percent and memory MiB; whole cards 100 each, memory not counted):
 *   - a spec that does not parse is refused, naming the field and the
 *     allowed values (kube-scheduler would find no device for it);
 *   - a namespace whose GPUBudget (the first by name, as for pods) has
 *     status.state OverBudget refuses it, naming the budget and its figures:
 *     DRA-mode pods get no PriorityClass to run at a lower priority, so what
 *     over budget means here is no new claims until the period resets (or
 *     the budget grows); claims already made keep their devices, nothing is
 *     deleted. A budget the controller has not metered yet is within budget;
 *   - what it asks is held to every ResourceQuota as ElasticGPUClaims are
 *     (quota.c, egpu__webhook_quota_ask, with the namespace's ResourceClaims
 *     counted: the allocated ones by their status, the others by their
 *     spec). A template holds nothing itself: it is judged by the one claim
 *     made from it per pod, and each such claim is judged at its creation
 *     again (kube-controller-manager creates it, this webhook sees it).
 * A read that fails refuses (fail closed), as for ElasticGPUClaims.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "webhook_int.h"

#define DRA_GROUP     "resource.k8s.io"
#define KIND_CLAIM    "ResourceClaim"
#define KIND_TEMPLATE "ResourceClaimTemplate"

bool egpu__webhook_dra_quota_is_dra(const struct egpu__webhook_review *rv)
{
    return strcmp(rv->group, DRA_GROUP) == 0 &&
           (strcmp(rv->kind, KIND_CLAIM) == 0 || strcmp(rv->kind, KIND_TEMPLATE) == 0);
}

/* One problem in p when namespace ns's GPUBudget is OverBudget. */
static int budget(const struct egpu_webhook_config *cfg, const char *ns, const char *what,
                  struct egpu_api_problems *p)
{
    const struct egpu_webhook_budgets *src = cfg->budgets;
    char msg[2 * EGPU_API_PROBLEM_MAX];
    struct egpu_error err = {0};
    struct egpu_api_budget *b;
    json_t *list = NULL;
    const json_t *obj;
    int64_t used;
    int rc;

    if (src == NULL || src->list == NULL)
        return 0;
    rc = src->list(src->ud, ns, &list, &err);
    if (rc == -ENOMEM)
        return rc;
    if (rc) {
        snprintf(msg, sizeof(msg),
                 "cannot read the GPUBudgets of namespace %s (%.300s); the %s is refused rather "
                 "than admitted outside its budget, try again",
                 ns, err.msg, what);
        egpu__webhook_problem_add(p, msg);
        return 0;
    }
    obj = egpu__webhook_budget_first(list);
    if (obj == NULL) {
        json_decref(list);
        return 0;
    }
    b = egpu_malloc(sizeof(*b)); /* about 10 KiB: not on a pool thread's stack */
    if (b == NULL) {
        json_decref(list);
        return -ENOMEM;
    }
    rc = egpu_api_budget_decode(obj, b, &err);
    if (rc == 0 && b->has_state && b->state == EGPU_API_BUDGET_OVER_BUDGET) {
        used = egpu_api_budget_used_milli(b);
        snprintf(msg, sizeof(msg),
                 "%s is forbidden: namespace %s is over its GPU budget: GPUBudget %.200s used "
                 "%" PRId64 ".%03" PRId64 " of %" PRId64 ".%03" PRId64
                 " GPU-hours this period; in DRA mode no new claim on " EGPU_API_DRA_DRIVER
                 " is admitted until the period resets or spec.gpuHours grows",
                 what, ns, b->meta.name, used / 1000, used % 1000, b->gpu_hours_milli / 1000,
                 b->gpu_hours_milli % 1000);
        egpu__webhook_problem_add(p, msg);
    }
    egpu_free(b);
    json_decref(list);
    return rc == -ENOMEM ? rc : 0; /* an unreadable budget: as for pods, not enforced */
}

int egpu__webhook_dra_quota(const struct egpu_webhook_config *cfg,
                            const struct egpu__webhook_review *rv, struct egpu_api_problems *p)
{
    bool is_claim = strcmp(rv->kind, KIND_CLAIM) == 0;
    const json_t *spec = json_object_get(rv->object, "spec");
    const char *gen =
        egpu_api_str(json_object_get(json_object_get(rv->object, "metadata"), "generateName"));
    char what[EGPU_K8S_NAME_MAX + 48], msg[sizeof(what) + EGPU_ERRMSG_MAX + 4];
    struct egpu_api_dra_usage u;
    struct egpu_error err = {0};
    size_t before = p->n;
    int rc;

    if (rv->op != EGPU_WEBHOOK_OP_CREATE || rv->object == NULL || rv->ns[0] == '\0')
        return 0;
    if (!is_claim)
        spec = json_object_get(spec, "spec");
    if (rv->name[0] == '\0' && gen != NULL) /* kube-controller-manager's claims of a template */
        snprintf(what, sizeof(what), "%s \"%.240s<generated>\"",
                 is_claim ? KIND_CLAIM : KIND_TEMPLATE, gen);
    else
        snprintf(what, sizeof(what), "%s \"%.253s\"", is_claim ? KIND_CLAIM : KIND_TEMPLATE,
                 rv->name);
    if (egpu_api_dra_spec_usage(spec, is_claim ? "spec" : "spec.spec", &u, &err) != 0) {
        snprintf(msg, sizeof(msg), "%s: %s", what, err.msg);
        egpu__webhook_problem_add(p, msg);
        return 0;
    }
    if (u.devices == 0)
        return 0; /* asks nothing of this driver */
    rc = budget(cfg, rv->ns, what, p);
    if (rc || p->n > before)
        return rc;
    return egpu__webhook_quota_ask(cfg, rv->ns, is_claim ? rv->name : NULL,
                                   is_claim ? rv->object : NULL, u.cores, u.mem_mib, what, p);
}
