/* webhook/validate.c - POST /validate: a bad GPU request is refused with a
 * message that names the container, the field, the value and what is
 * allowed, and the system annotations are protected.
 *
 * Rules, for a Pod and the pod template of a workload, on CREATE and UPDATE:
 *   - egpu_api_pod_validate (src/api, the rules every component applies):
 *     gpu-core 1..99 or 100*k, gpu-memory only with gpu-core and within the
 *     largest card the cluster has, gpu-memory with every share of one card
 *     (unless --default-memory-per-core, which /mutate writes into Pods),
 *     no gpu-memory on whole cards, requests
 *     equal to limits, gpu-core-limit between the request and 100, gpu-model
 *     naming models the cluster has, the policy annotations, init
 *     containers too. Every problem found is reported, joined with "; ".
 *     On UPDATE only problems the old object did not have already are
 *     refused: a rule made stricter, or a card that left the cluster, never
 *     blocks an unrelated edit (removing a finalizer, a label).
 *   - the seccomp guard (seccomp.c): a container asking a gpu-core share
 *     1..99 may not be privileged, run under another seccompProfile or add
 *     SYS_ADMIN (or ALL), and its pod's seccompProfile may not be
 *     Unconfined; on UPDATE, as above, only what is new is refused.
 *   - On a Pod, elasticgpu.io/assigned may be added, changed or removed only
 *     by --scheduler-user and elasticgpu.io/allocated only by --agent-user
 *     (DESIGN.md section 5: the scheduler and the agent believe them, so a
 *     pod owner must not write them).
 *   - On a Pod, elasticgpu.io/dra-claims (dra.c) may not be added, changed
 *     or removed by an UPDATE, and on a CREATE must be what /mutate writes
 *     in DRA mode (outside it a pod may not carry it): egpu-controller
 *     creates the ResourceClaimTemplates it lists.
 *   - The marker elasticgpu.io/dra (dra.c), on a Pod or a template: only
 *     in DRA mode, only on a container /mutate moved to a ResourceClaim
 *     (its resources.claims egpu-<i> and the pod's resourceClaims entry
 *     naming a template of the dra-claims annotation or its
 *     ElasticGPUClaim's ResourceClaim), "1" in requests and limits; on
 *     UPDATE, as above, only what is new is refused.
 *   - On a Pod UPDATE, no egpuc.elasticgpu.io/ annotation may be added,
 *     changed or removed (claims.c): /mutate turned them into the pod's
 *     requests at creation, and the scheduler and the controller rely on
 *     them.
 *   - On a Pod UPDATE, the finalizer elasticgpu.io/metering may be removed
 *     only by --controller-user (budgets.c): the controller removes it once
 *     it has metered the pod to its end, and a pod owner removing it would
 *     take the pod's last seconds out of the namespace's budget.
 *   - An ElasticGPUClaim CREATE, or an UPDATE raising what it holds, and a
 *     Pod CREATE, are held to the namespace's ResourceQuotas with its
 *     claims counted (quota.c).
 *   - A resource.k8s.io ResourceClaim or ResourceClaimTemplate CREATE asking
 *     this driver's classes is held to the namespace's GPUBudget and
 *     ResourceQuotas (dra_quota.c).
 * DELETE, CONNECT and subresources pass.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "webhook_int.h"

static bool has_problem(const struct egpu_api_problems *p, const char *msg)
{
    for (size_t i = 0; i < p->n; i++) {
        if (strcmp(p->msg[i], msg) == 0)
            return true;
    }
    return false;
}

static const json_t *annotation(const json_t *obj, const char *key)
{
    return json_object_get(json_object_get(json_object_get(obj, "metadata"), "annotations"), key);
}

/* Who may write the system annotation key, if the user may not. */
static void system_annotations(const struct egpu_webhook_config *cfg,
                               const struct egpu__webhook_review *rv, struct egpu_api_problems *p)
{
    const struct {
        const char *key, *user, *who;
    } rules[] = {
        {EGPU_ANN_ASSIGNED, cfg->scheduler_user ? cfg->scheduler_user : EGPU_WEBHOOK_SCHEDULER_USER,
         "the scheduler"},
        {EGPU_ANN_ALLOCATED, cfg->agent_user ? cfg->agent_user : EGPU_WEBHOOK_AGENT_USER,
         "the node agent"},
    };

    for (size_t i = 0; i < sizeof(rules) / sizeof(rules[0]); i++) {
        const json_t *now = annotation(rv->object, rules[i].key);
        const json_t *before = annotation(rv->old_object, rules[i].key);
        char msg[EGPU_API_PROBLEM_MAX];
        const char *did;

        if ((now == NULL && before == NULL) ||
            (now != NULL && before != NULL && json_equal(now, before)) ||
            strcmp(rv->username, rules[i].user) == 0)
            continue;
        did = before == NULL ? "add" : now == NULL ? "remove" : "change";
        snprintf(msg, sizeof(msg),
                 "annotation %s is written only by %s (%s); user \"%.128s\" may not %s it",
                 rules[i].key, rules[i].who, rules[i].user, rv->username, did);
        egpu__webhook_problem_add(p, msg);
    }
}

int egpu__webhook_validate(const struct egpu_webhook_config *cfg,
                           const struct egpu_api_facts *facts,
                           const struct egpu__webhook_review *rv, struct egpu__webhook_verdict *v)
{
    struct egpu_api_problems now = {0}, before = {0}, refused = {0};
    /* The cluster's facts and the operator's default memory of a share. */
    struct egpu_api_facts f = facts != NULL ? *facts : (struct egpu_api_facts){0};
    struct egpu__webhook_podpart pp, old;

    memset(v, 0, sizeof(*v));
    v->allowed = true;
    if (rv->sub_resource[0] != '\0' ||
        (rv->op != EGPU_WEBHOOK_OP_CREATE && rv->op != EGPU_WEBHOOK_OP_UPDATE))
        return 0;
    if (egpu__webhook_quota_is_claim(
            rv)) { /* quota.c: claims count against the namespace's quota */
        if (egpu__webhook_quota_claim(cfg, rv, &refused) != 0)
            return -ENOMEM;
        if (refused.n > 0)
            egpu__webhook_deny_problems(v, &refused);
        return 0;
    }
    if (egpu__webhook_dra_quota_is_dra(rv)) { /* dra_quota.c: DRA claims, budget and quota */
        if (egpu__webhook_dra_quota(cfg, rv, &refused) != 0)
            return -ENOMEM;
        if (refused.n > 0)
            egpu__webhook_deny_problems(v, &refused);
        return 0;
    }
    if (!egpu__webhook_podpart_find(rv->group, rv->version, rv->kind, rv->object, &pp))
        return 0;
    if (pp.is_pod) {
        system_annotations(cfg, rv, &refused);
        egpu__webhook_dra_guard(cfg, rv, &refused); /* dra.c */
    }
    if (pp.is_pod && rv->op == EGPU_WEBHOOK_OP_UPDATE) {
        egpu__webhook_claims_immutable(rv, &refused);
        egpu__webhook_budget_finalizer_guard(cfg, rv, &refused);
    }
    f.default_mem_per_core_mib = cfg->default_mem_per_core;
    if (pp.spec != NULL) {
        (void)egpu_api_pod_validate(pp.spec, pp.annotations, &f, &now);
        egpu__webhook_seccomp_check(cfg, pp.spec, &now);
        if (egpu__webhook_dra_marker_check(cfg, pp.spec, pp.annotations, &now) != 0)
            return -ENOMEM;
    }
    if (rv->op == EGPU_WEBHOOK_OP_UPDATE && now.n > 0 &&
        egpu__webhook_podpart_find(rv->group, rv->version, rv->kind, rv->old_object, &old) &&
        old.spec != NULL) {
        (void)egpu_api_pod_validate(old.spec, old.annotations, &f, &before);
        egpu__webhook_seccomp_check(cfg, old.spec, &before);
        if (egpu__webhook_dra_marker_check(cfg, old.spec, old.annotations, &before) != 0)
            return -ENOMEM;
    }
    for (size_t i = 0; i < now.n; i++) {
        if (!has_problem(&before, now.msg[i]))
            egpu__webhook_problem_add(&refused, now.msg[i]);
    }
    if (refused.n > 0 && before.n == 0)
        refused.more += now.more; /* beyond those kept (with old ones, not comparable) */
    if (refused.n == 0 && pp.is_pod && egpu__webhook_quota_pod(cfg, rv, &refused) != 0)
        return -ENOMEM;
    if (refused.n > 0)
        egpu__webhook_deny_problems(v, &refused);
    return 0;
}
