/* webhook/budgets.c - GPU budgets at admission, enforced without deleting
 * anything: a GPU pod created in a namespace that has a
 * GPUBudget gets the budget's PriorityClass for the namespace's state and
 * the finalizer elasticgpu.io/metering; /validate keeps that finalizer for
 * the controller to remove.
 *
 * The priority. The API server's Priority admission plugin runs before the
 * mutating webhooks: it has already resolved spec.priority (and
 * spec.preemptionPolicy) from the class the pod named, or from the global
 * default class, or 0. A webhook that changed only spec.priorityClassName
 * would leave spec.priority saying the old class's value, and kube-
 * scheduler orders and preempts by spec.priority alone. So the three fields
 * are set together, as the plugin would have set them for the budget's
 * class: priorityClassName, priority = the PriorityClass's value,
 * preemptionPolicy = its preemptionPolicy (PreemptLowerPriority when it
 * has none). A class the pod named itself is replaced (a budget is not
 * dodged by naming a higher class), with a warning saying so. A class the
 * budget names that does not exist (or cannot be used) leaves the pod at
 * the priority it has, with a warning naming the budget and the class: the
 * pod is admitted, never refused for a missing class.
 *
 * The finalizer. Usage is metered from pod lifecycle; a pod deleted while
 * the controller is down would be gone before the controller saw its end.
 * With elasticgpu.io/metering the pod stays (Terminating) until the
 * controller has metered it to its end and removed the finalizer. Only the
 * controller may remove it (egpu__webhook_budget_finalizer_guard, on /validate).
 *
 * Which budget: the namespace's GPUBudget; with several, the first by name
 * (the others are ignored here; docs/webhook.md says so). Its state is
 * status.state as the controller wrote it, and InBudget for a budget the
 * controller has not metered yet.
 *
 * Reinvocation (the patched pod seen again): everything is in place, so
 * nothing changes and no warning is given.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "egpu/log.h"
#include "webhook_int.h"

#define PREEMPT_LOWER "PreemptLowerPriority"
#define PREEMPT_NEVER "Never"

/* The GPUBudget of the namespace: the first of list by metadata.name, or
 * NULL when list holds none with a name. Borrowed from list. */
static const json_t *first_by_name(const json_t *list)
{
    const json_t *best = NULL, *obj;
    const char *best_name = NULL;
    size_t i;

    json_array_foreach(list, i, obj)
    {
        const char *name = egpu_api_str(json_object_get(json_object_get(obj, "metadata"), "name"));

        if (name == NULL || name[0] == '\0')
            continue;
        if (best_name == NULL || strcmp(name, best_name) < 0) {
            best = obj;
            best_name = name;
        }
    }
    return best;
}

const json_t *egpu__webhook_budget_first(const json_t *list)
{
    return first_by_name(list);
}

/* A PriorityClass's value and preemptionPolicy (static string). Returns
 * true, or false with why (len bytes) naming the field that is wrong. */
static bool class_decode(const json_t *pc, json_int_t *value, const char **policy, char *why,
                         size_t len)
{
    const json_t *val = json_object_get(pc, "value");
    const json_t *pol = json_object_get(pc, "preemptionPolicy");

    if (!json_is_integer(val) || json_integer_value(val) < INT32_MIN ||
        json_integer_value(val) > INT32_MAX) {
        snprintf(why, len, "cannot be used (its value is not a 32-bit integer)");
        return false;
    }
    *value = json_integer_value(val);
    if (pol == NULL || json_is_null(pol)) {
        *policy = PREEMPT_LOWER;
    } else if (json_is_string(pol) && strcmp(json_string_value(pol), PREEMPT_LOWER) == 0) {
        *policy = PREEMPT_LOWER;
    } else if (json_is_string(pol) && strcmp(json_string_value(pol), PREEMPT_NEVER) == 0) {
        *policy = PREEMPT_NEVER;
    } else {
        snprintf(why, len,
                 "cannot be used (its preemptionPolicy is not " PREEMPT_LOWER " or " PREEMPT_NEVER
                 ")");
        return false;
    }
    return true;
}

/* Add the metering finalizer to meta. Returns 1 when added, 0 when it was
 * there, -ENOMEM. */
static int add_finalizer(json_t *meta)
{
    json_t *fins = json_object_get(meta, "finalizers");
    json_t *now;
    const json_t *f;
    size_t i;

    json_array_foreach(fins, i, f)
    {
        if (json_is_string(f) && strcmp(json_string_value(f), EGPU_FINALIZER_METERING) == 0)
            return 0;
    }
    now = json_is_array(fins) ? json_copy(fins) : json_array();
    if (now == NULL || json_array_append_new(now, json_string(EGPU_FINALIZER_METERING)) != 0 ||
        json_object_set_new(meta, "finalizers", now) != 0)
        return -ENOMEM;
    return 1;
}

/* Give spec class name with value and policy. Returns 1 when something
 * changed, 0 when spec had exactly that, -ENOMEM. */
static int set_class(json_t *spec, const char *name, json_int_t value, const char *policy)
{
    const char *had = egpu_api_str(json_object_get(spec, "priorityClassName"));
    const json_t *prio = json_object_get(spec, "priority");
    const char *had_policy = egpu_api_str(json_object_get(spec, "preemptionPolicy"));

    if (had != NULL && strcmp(had, name) == 0 && json_is_integer(prio) &&
        json_integer_value(prio) == value && had_policy != NULL && strcmp(had_policy, policy) == 0)
        return 0;
    if (json_object_set_new(spec, "priorityClassName", json_string(name)) != 0 ||
        json_object_set_new(spec, "priority", json_integer(value)) != 0 ||
        json_object_set_new(spec, "preemptionPolicy", json_string(policy)) != 0)
        return -ENOMEM;
    return 1;
}

int egpu__webhook_budget_apply(const struct egpu_webhook_config *cfg,
                               const struct egpu__webhook_review *rv, json_t *meta, json_t *spec,
                               struct egpu_api_problems *p, struct egpu__webhook_verdict *v)
{
    const struct egpu_webhook_budgets *src = cfg->budgets;
    struct egpu_api_budget *b = NULL;
    struct egpu_error err = {0};
    json_t *list = NULL, *pc = NULL;
    const json_t *obj;
    const char *bname, *cls = "", *field = "", *policy = PREEMPT_LOWER;
    const char *had;
    char msg[2 * EGPU_API_PROBLEM_MAX], why[EGPU_API_PROBLEM_MAX] = "";
    char replaced[EGPU_K8S_NAME_MAX] = "";
    bool over = false, usable = false;
    json_int_t value = 0;
    int rc, added, changed = 0;

    if (src == NULL || rv->ns[0] == '\0' || !egpu_api_spec_wants_gpu(spec))
        return 0;
    rc = src->list(src->ud, rv->ns, &list, &err);
    if (rc == -ENOMEM)
        return rc;
    if (rc) {
        snprintf(msg, sizeof(msg),
                 "cannot read the GPUBudgets of namespace %s (%.300s); the pod is refused rather "
                 "than admitted outside its budget, try again",
                 rv->ns, err.msg);
        egpu__webhook_problem_add(p, msg);
        return 0;
    }
    obj = first_by_name(list);
    if (obj == NULL) {
        json_decref(list);
        return 0; /* no budget: nothing to do */
    }
    bname = egpu_api_str(json_object_get(json_object_get(obj, "metadata"), "name"));
    b = egpu_malloc(sizeof(*b)); /* about 10 KiB: not on a pool thread's stack */
    if (b == NULL) {
        json_decref(list);
        return -ENOMEM;
    }
    rc = egpu_api_budget_decode(obj, b, &err);
    if (rc == -ENOMEM)
        goto out;
    if (rc == 0) {
        over = b->has_state && b->state == EGPU_API_BUDGET_OVER_BUDGET;
        cls = over ? b->over_class : b->in_class;
        field = over ? "overBudgetPriorityClassName" : "inBudgetPriorityClassName";
    } else {
        snprintf(why, sizeof(why), "%s", err.msg);
    }
    if (cls[0] != '\0') {
        rc = src->priority_class(src->ud, cls, &pc, &err);
        if (rc == -ENOMEM)
            goto out;
        if (rc == 0) {
            usable = class_decode(pc, &value, &policy, why, sizeof(why));
        } else if (rc == -ENOENT) {
            snprintf(why, sizeof(why), "does not exist");
        } else {
            snprintf(msg, sizeof(msg),
                     "cannot look up PriorityClass %.253s of GPUBudget %s/%.200s (%.200s); the pod "
                     "is refused rather than admitted outside its budget, try again",
                     cls, rv->ns, bname, err.msg);
            egpu__webhook_problem_add(p, msg);
            rc = 0;
            goto out;
        }
    }
    rc = added = add_finalizer(meta);
    if (rc < 0)
        goto out;
    had = egpu_api_str(json_object_get(spec, "priorityClassName"));
    if (had != NULL && had[0] != '\0' && usable && strcmp(had, cls) != 0)
        snprintf(replaced, sizeof(replaced), "%.253s", had); /* before set_class replaces it */
    if (usable) {
        rc = changed = set_class(spec, cls, value, policy);
        if (rc < 0)
            goto out;
    }
    rc = 0;
    if (!added && !changed)
        goto out; /* all in place already (the patch seen again): no word */
    if (why[0] != '\0' && cls[0] == '\0') { /* the budget itself is unreadable */
        egpu__webhook_warn(
            v,
            "namespace %s has GPUBudget %.200s, which cannot be read (%.250s); the pod keeps "
            "its priority",
            rv->ns, bname, why);
    } else if (!usable && cls[0] != '\0') {
        egpu__webhook_warn(
            v,
            "namespace %s is %s its GPU budget (GPUBudget %.200s), whose PriorityClass %.200s "
            "(spec.%s) %.120s: the pod is admitted at the priority it has; create the "
            "PriorityClass or correct the GPUBudget",
            rv->ns, over ? "over" : "within", bname, cls, field, why);
    } else if (!usable) {
        egpu__webhook_warn(
            v,
            "namespace %s is within its GPU budget (GPUBudget %.200s); the pod keeps its "
            "priority and its GPU time is metered (finalizer " EGPU_FINALIZER_METERING ")",
            rv->ns, bname);
    } else if (over) {
        egpu__webhook_warn(
            v,
            "namespace %s is over its GPU budget (GPUBudget %.200s); the pod gets PriorityClass "
            "%.200s and may be preempted by pods of namespaces within budget",
            rv->ns, bname, cls);
    } else {
        egpu__webhook_warn(v,
                           "namespace %s is within its GPU budget (GPUBudget %.200s); the pod gets "
                           "PriorityClass %.200s",
                           rv->ns, bname, cls);
    }
    if (changed && replaced[0] != '\0')
        egpu__webhook_warn(
            v,
            "the pod's PriorityClass %.200s is replaced by %.200s: GPU pods of namespace %s take "
            "the class of GPUBudget %.200s",
            replaced, cls, rv->ns, bname);
out:
    json_decref(pc);
    json_decref(list);
    egpu_free(b);
    return rc;
}

static bool has_metering(const json_t *obj)
{
    const json_t *fins = json_object_get(json_object_get(obj, "metadata"), "finalizers");
    const json_t *f;
    size_t i;

    json_array_foreach(fins, i, f)
    {
        if (json_is_string(f) && strcmp(json_string_value(f), EGPU_FINALIZER_METERING) == 0)
            return true;
    }
    return false;
}

void egpu__webhook_budget_finalizer_guard(const struct egpu_webhook_config *cfg,
                                          const struct egpu__webhook_review *rv,
                                          struct egpu_api_problems *p)
{
    const char *user = cfg->controller_user ? cfg->controller_user : EGPU_WEBHOOK_CONTROLLER_USER;
    char msg[2 * EGPU_API_PROBLEM_MAX];

    if (rv->op != EGPU_WEBHOOK_OP_UPDATE || !has_metering(rv->old_object) ||
        has_metering(rv->object) || strcmp(rv->username, user) == 0)
        return;
    snprintf(msg, sizeof(msg),
             "finalizer " EGPU_FINALIZER_METERING " is removed only by the controller (%.200s), "
             "once it has metered the pod's GPU time to its end; user \"%.128s\" may not remove it",
             user, rv->username);
    egpu__webhook_problem_add(p, msg);
}
