/* controller/budget.c - GPUBudgets: the leader meters each namespace that
 * has one (queue key "b/<ns>").
 *
 * One step of a namespace: a consistent LIST of its pods (so a pod bound a
 * moment ago is there, whatever the pod informer has heard), each read with
 * egpu_api_meter_pod_read (its GPU ask, PodScheduled's time, its end); then
 * for every GPUBudget of the namespace, egpu__controller_meter_step from its status's
 * checkpoint to now and a PUT of its status guarded by resourceVersion: a
 * stale leader's write fails with 409 and nothing is counted twice; a
 * write that did not happen leaves the checkpoint where it was, so nothing
 * is lost either. Events say when metering starts, when a period resets and
 * when the namespace goes over or back within budget. Last, pods holding
 * the webhook's elasticgpu.io/metering finalizer that every budget has
 * metered to their end (or that never got a card) lose it, and so do all
 * of them once the namespace has no budget left. The key comes back every
 * --meter-seconds.
 *
 * Claims: the namespace is also charged for what it holds
 * through its ElasticGPUClaims, with or without pods: every ElasticGPU of
 * the informer's cache whose claimRef is in the namespace (Bound, or
 * Released and kept by Retain until it is deleted) from the later of its
 * and its claim's creation to its deletion, and the containers that use a
 * claim, per claim the larger of the two at each second
 * (egpu_api_meter_holds_add), so a claim and its pod are never counted
 * twice. Those ElasticGPUs get the finalizer elasticgpu.io/metering
 * (provisioned ones at creation, claim.c; others here), lost once metered
 * to their deletion, as pods are.
 *
 * DRA mode: allocated ResourceClaims of the namespace on this driver are
 * charged like pods, from their status (dra_metering.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "budget_int.h"
#include "controller_int.h"
#include "egpu/log.h"

#define COND_READY "Ready"

/* A pod of the namespace as metering sees it. */
struct meter_pod {
    const json_t *obj; /* borrowed from the list */
    bool readable;     /* egpu_api_meter_pod_read took it */
    struct egpu_api_meter_pod m;
};

static void metrics_of(struct egpu__controller *c, const struct egpu_api_budget *b)
{
    const char *const labels[2] = {b->meta.ns, b->meta.name};
    int64_t used = egpu_api_budget_used_milli(b);

    (void)egpu_metric_set(c->m_budget_used, labels, (double)used / 1000.0);
    (void)egpu_metric_set(c->m_budget_remaining, labels,
                          (double)(b->gpu_hours_milli - used) / 1000.0);
    (void)egpu_metric_set(c->m_budget_over, labels,
                          b->has_state && b->state == EGPU_API_BUDGET_OVER_BUDGET ? 1.0 : 0.0);
}

static void events_of(struct egpu__controller *c, const struct egpu_api_budget *b,
                      const struct egpu__controller_meter_step *st)
{
    char t1[EGPU_API_TIME_MAX], t2[EGPU_API_TIME_MAX];
    int64_t used = egpu_api_budget_used_milli(b);

    if (st->started)
        egpu__controller_event(c, EGPU_KIND_GPUBUDGET, b->meta.ns, b->meta.name, b->meta.uid, false,
                               "MeteringStarted",
                               "GPU pods of namespace %s are metered from %s; this %s period "
                               "ends %s",
                               b->meta.ns, egpu_api_time_format(b->metered_until_s, t1),
                               b->period_text, egpu_api_time_format(b->period_end_s, t2));
    if (st->rollovers > 0)
        egpu__controller_event(
            c, EGPU_KIND_GPUBUDGET, b->meta.ns, b->meta.name, b->meta.uid, false, "PeriodReset",
            "a new period began at %s; %.3f GPU-hours were used in the one "
            "from %s",
            egpu_api_time_format(b->period_start_s, t1), (double)st->ended_used_milli / 1000.0,
            egpu_api_time_format(st->ended_start_s, t2));
    if (st->state_changed && !st->started && b->state == EGPU_API_BUDGET_OVER_BUDGET)
        egpu__controller_event(
            c, EGPU_KIND_GPUBUDGET, b->meta.ns, b->meta.name, b->meta.uid, true, "OverBudget",
            "namespace %s used %.3f of %.3f GPU-hours this period; new GPU pods "
            "get PriorityClass %s",
            b->meta.ns, (double)used / 1000.0, (double)b->gpu_hours_milli / 1000.0, b->over_class);
    else if (st->state_changed && !st->started)
        egpu__controller_event(
            c, EGPU_KIND_GPUBUDGET, b->meta.ns, b->meta.name, b->meta.uid, false, "InBudget",
            "namespace %s is within its %.3f GPU-hours again (%.3f used)", b->meta.ns,
            (double)b->gpu_hours_milli / 1000.0, (double)used / 1000.0);
}

/* Meter budget obj over m[0..n) and write its status. *until gets the
 * checkpoint now stored, or INT64_MAX when the budget cannot meter (it does
 * not decode, or names an unknown time zone: it then holds no pod back).
 * Returns 0 or the client's error (the namespace is retried). */
static int meter_one(struct egpu__controller *c, const json_t *obj,
                     const struct egpu_api_meter_pod *m, size_t n,
                     const struct egpu_api_meter_hold *h, size_t nh, int64_t now, int64_t *until)
{
    struct egpu_api_budget *b = egpu_malloc(sizeof(*b));
    struct egpu_error err = {0};
    struct egpu__controller_meter_step st;
    char stamp[EGPU_API_TIME_MAX];
    json_t *enc;
    bool changed, ok;
    int rc;

    *until = INT64_MAX;
    if (b == NULL)
        return -ENOMEM;
    if (egpu_api_budget_decode(obj, b, &err) != 0) {
        egpu_log(EGPU_LOG_WARN, "GPUBudget not metered: %s", err.msg);
        egpu_free(b);
        return 0; /* the API server's schema keeps these out; nothing to write into */
    }
    egpu__controller_now(stamp, sizeof(stamp));
    rc = egpu__controller_meter_step(b, m, n, h, nh, now, &st, &err);
    if (rc == -ENOMEM) {
        egpu_free(b);
        return rc;
    }
    ok = rc == 0;
    if (!ok) {
        /* An unknown time zone: say so on the object; nothing is counted. */
        changed =
            egpu_api_condition_set(b->conditions, &b->nconditions, COND_READY, EGPU_API_COND_FALSE,
                                   "InvalidTimeZone", err.msg, b->meta.generation, stamp);
        if (changed)
            egpu__controller_event(c, EGPU_KIND_GPUBUDGET, b->meta.ns, b->meta.name, b->meta.uid,
                                   true, "InvalidTimeZone", "%s", err.msg);
    } else {
        (void)egpu_api_condition_set(b->conditions, &b->nconditions, COND_READY, EGPU_API_COND_TRUE,
                                     "Metered", "the namespace's GPU pods are metered",
                                     b->meta.generation, stamp);
        changed = true; /* the checkpoint moved */
    }
    b->observed_generation = b->meta.generation;
    rc = 0;
    if (changed) {
        enc = egpu_api_budget_encode(b);
        rc = enc == NULL ? -ENOMEM
                         : egpu__controller_put(c, &egpu_kube_gpubudgets, obj, enc, "status", NULL);
        json_decref(enc);
    }
    if (rc == 0 && ok) {
        *until = b->metered_until_s;
        events_of(c, b, &st);
        metrics_of(c, b);
    }
    egpu_free(b);
    return rc;
}

/* Drop (add false) or add the metering finalizer of obj, an object of res
 * (a v1 Pod or an ElasticGPU) named kind in the log line. */
static void set_finalizer(struct egpu__controller *c, const struct egpu_kube_resource *res,
                          const char *kind, const json_t *obj, bool add)
{
    const json_t *meta = json_object_get(obj, "metadata"), *f;
    const char *ns = egpu_api_str(json_object_get(meta, "namespace"));
    const char *name = egpu_api_str(json_object_get(meta, "name"));
    json_t *keep = json_array(), *enc;
    size_t i;

    json_array_foreach(json_object_get(meta, "finalizers"), i, f)
    {
        const char *s = egpu_api_str(f);

        if (s == NULL || strcmp(s, EGPU_FINALIZER_METERING) != 0)
            json_array_append(keep, (json_t *)f);
    }
    if (add)
        json_array_append_new(keep, json_string(EGPU_FINALIZER_METERING));
    enc = json_pack("{s:{s:o}}", "metadata", "finalizers", keep);
    if (enc != NULL && egpu__controller_put(c, res, obj, enc, "finalizers", NULL) == 0)
        egpu_log(EGPU_LOG_INFO, "metering finalizer %s %s=%s%s%s", add ? "added" : "removed", kind,
                 ns != NULL ? ns : "", ns != NULL ? "/" : "", name != NULL ? name : "");
    json_decref(enc);
}

static bool holds_finalizer(const json_t *pod)
{
    const json_t *f;
    size_t i;

    json_array_foreach(json_object_get(json_object_get(pod, "metadata"), "finalizers"), i, f)
    {
        const char *s = egpu_api_str(f);

        if (s != NULL && strcmp(s, EGPU_FINALIZER_METERING) == 0)
            return true;
    }
    return false;
}

/* May p lose the metering finalizer, every budget of its namespace having
 * counted up to until (budgets false: the namespace has none left)? Yes
 * once it is metered to its end; at once when it holds nothing to meter (no
 * GPU, unreadable, or deleted before it was ever bound). */
static bool done_metering(const struct meter_pod *p, int64_t until, bool budgets)
{
    if (!budgets || !p->readable || p->m.core_pct == 0)
        return true;
    if (p->m.start_s == 0) /* a pod being deleted is never bound */
        return json_object_get(json_object_get(p->obj, "metadata"), "deletionTimestamp") != NULL;
    return p->m.end_s != INT64_MAX && p->m.end_s <= until;
}

/* The creationTimestamp of the claim of ElasticGPU e's claimRef when a claim
 * with its uid is in the cache, else 0. */
static int64_t claim_created(struct egpu__controller *c, const json_t *egpu)
{
    const json_t *ref = json_object_get(json_object_get(egpu, "spec"), "claimRef");
    const char *ns = egpu_api_str(json_object_get(ref, "namespace"));
    const char *name = egpu_api_str(json_object_get(ref, "name"));
    const char *uid = egpu_api_str(json_object_get(ref, "uid"));
    json_t *cl;
    const char *cuid, *created;
    int64_t t = 0;

    if (ns == NULL || name == NULL || uid == NULL || uid[0] == '\0')
        return 0;
    cl = egpu_kube_informer_get(c->inf[EGPU__CONTROLLER_CLAIMS], ns, name);
    cuid = egpu_api_str(json_object_get(json_object_get(cl, "metadata"), "uid"));
    created = egpu_api_str(json_object_get(json_object_get(cl, "metadata"), "creationTimestamp"));
    if (cuid != NULL && strcmp(cuid, uid) == 0 && created != NULL &&
        egpu_api_time_parse(created, "metadata.creationTimestamp", &t, NULL) != 0)
        t = 0;
    json_decref(cl);
    return t;
}

/* The objects of all (a list from an informer; its reference is taken)
 * whose <parent>[.<child>].namespace is ns, in all's order (new
 * reference), or NULL. */
static json_t *in_namespace(json_t *all, const char *ns, const char *parent, const char *child)
{
    json_t *out = json_array(), *o;
    size_t i;

    if (all == NULL || out == NULL) {
        json_decref(all);
        json_decref(out);
        return NULL;
    }
    json_array_foreach(all, i, o)
    {
        json_t *at = json_object_get(o, parent);
        const char *ons;

        if (child != NULL)
            at = json_object_get(at, child);
        ons = egpu_api_str(json_object_get(at, "namespace"));
        if (ons != NULL && strcmp(ons, ns) == 0)
            json_array_append(out, o);
    }
    json_decref(all);
    return out;
}

/* The ElasticGPUs of the cache whose claimRef is in ns (new reference), or
 * NULL. */
static json_t *egpus_of(struct egpu__controller *c, const char *ns)
{
    return in_namespace(egpu_kube_informer_list(c->inf[EGPU__CONTROLLER_EGPUS]), ns, "spec",
                        "claimRef");
}

bool egpu__controller_budget_exists(struct egpu__controller *c, const char *ns)
{
    json_t *all = egpu_kube_informer_list(c->inf[EGPU__CONTROLLER_BUDGETS]), *o;
    bool yes = false;
    size_t i;

    json_array_foreach(all, i, o)
    {
        const char *bns =
            egpu_api_str(json_object_get(json_object_get(o, "metadata"), "namespace"));

        if (bns != NULL && ns != NULL && strcmp(bns, ns) == 0)
            yes = true;
    }
    json_decref(all);
    return yes;
}

/* The GPUBudgets of ns, in the informer's order (new reference), or NULL. */
static json_t *budgets_of(struct egpu__controller *c, const char *ns)
{
    return in_namespace(egpu_kube_informer_list(c->inf[EGPU__CONTROLLER_BUDGETS]), ns, "metadata",
                        NULL);
}

/* Append what pod (readable) holds through claims to *h (grown as needed). */
static int add_pod_holds(const json_t *pod, struct egpu_api_meter_hold **h, size_t *nh, size_t *cap)
{
    struct egpu_error err = {0};
    struct egpu_api_meter_hold *grown;
    size_t k = 0;

    if (*cap - *nh < EGPU_API_POD_CLAIMS_MAX) {
        grown = egpu_realloc(*h, (*cap + EGPU_API_POD_CLAIMS_MAX + 16) * sizeof(**h));
        if (grown == NULL)
            return -ENOMEM;
        *h = grown;
        *cap += EGPU_API_POD_CLAIMS_MAX + 16;
    }
    if (egpu_api_meter_pod_holds(pod, *h + *nh, EGPU_API_POD_CLAIMS_MAX, &k, &err) == 0)
        *nh += k;
    return 0;
}

int egpu__controller_budget_sync(struct egpu__controller *c, const char *ns)
{
    struct egpu_kube_status kst = {0};
    struct egpu_error err = {0};
    struct meter_pod *pods = NULL;
    struct egpu_api_meter_pod *m = NULL;
    struct egpu_api_meter_hold *h = NULL, *eh = NULL;
    json_t *budgets = budgets_of(c, ns), *list = NULL, *egpus = egpus_of(c, ns), *o;
    int64_t now = (int64_t)time(NULL), until = INT64_MAX, u;
    size_t n = 0, nm = 0, nh = 0, hcap = 0, ne = 0, i;
    bool have;
    int rc;

    if (budgets == NULL || egpus == NULL) {
        json_decref(budgets);
        json_decref(egpus);
        return -ENOMEM;
    }
    have = json_array_size(budgets) > 0;
    rc = egpu_kube_list(c->kube, &egpu_kube_pods, ns, NULL, &list, &kst, &err);
    if (rc) {
        egpu_log(EGPU_LOG_WARN, "namespace=%s: cannot list pods to meter: %s", ns, err.msg);
        json_decref(budgets);
        json_decref(egpus);
        return rc;
    }
    n = json_array_size(json_object_get(list, "items"));
    ne = json_array_size(egpus);
    pods = egpu_calloc(n + 1, sizeof(*pods));
    m = egpu_calloc(n + 1, sizeof(*m));
    eh = egpu_calloc(ne + 1, sizeof(*eh));
    hcap = ne;
    h = egpu_calloc(hcap + 1, sizeof(*h));
    if (pods == NULL || m == NULL || eh == NULL || h == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    json_array_foreach(egpus, i, o)
    {
        if (egpu_api_meter_egpu_read(o, claim_created(c, o), &eh[i], &err) == 0) {
            h[nh++] = eh[i];
        } else {
            eh[i].m.start_s = -1; /* unreadable: holds no finalizer back */
            egpu_log(EGPU_LOG_WARN, "elasticgpu=%s not metered: %s",
                     egpu_api_str(json_object_get(json_object_get(o, "metadata"), "name")),
                     err.msg);
        }
    }
    json_array_foreach(json_object_get(list, "items"), i, o)
    {
        pods[i].obj = o;
        pods[i].readable = egpu_api_meter_pod_read(o, &pods[i].m, &err) == 0;
        if (pods[i].readable) {
            m[nm++] = pods[i].m;
            rc = add_pod_holds(o, &h, &nh, &hcap);
            if (rc)
                goto out;
        } else {
            egpu_log(EGPU_LOG_WARN, "pod=%s/%s not metered: %s", ns,
                     egpu_api_str(json_object_get(json_object_get(o, "metadata"), "name")),
                     err.msg);
        }
    }
    if (have) { /* DRA mode: allocated ResourceClaims, as pods (dra_metering.c) */
        rc = egpu__controller_dra_meter_claims(c, ns, &m, &nm);
        if (rc)
            goto out;
    }
    json_array_foreach(budgets, i, o)
    {
        rc = meter_one(c, o, m, nm, h, nh, now, &u);
        if (rc)
            goto out; /* retried: no finalizer goes before every budget has counted */
        if (u < until)
            until = u;
    }
    for (i = 0; i < n; i++) {
        if (holds_finalizer(pods[i].obj) && done_metering(&pods[i], until, have))
            set_finalizer(c, &egpu_kube_pods, "pod", pods[i].obj, false);
    }
    json_array_foreach(egpus, i, o)
    {
        bool deleting =
            json_object_get(json_object_get(o, "metadata"), "deletionTimestamp") != NULL;
        bool done =
            !have || eh[i].m.start_s <= 0 || (eh[i].m.end_s != INT64_MAX && eh[i].m.end_s <= until);

        if (holds_finalizer(o) && deleting && done)
            set_finalizer(c, &egpu_kube_elasticgpus, "elasticgpu", o, false);
        else if (holds_finalizer(o) && !have)
            set_finalizer(c, &egpu_kube_elasticgpus, "elasticgpu", o, false);
        else if (!holds_finalizer(o) && have && !deleting)
            set_finalizer(c, &egpu_kube_elasticgpus, "elasticgpu", o, true);
    }
out:
    egpu_free(pods);
    egpu_free(m);
    egpu_free(h);
    egpu_free(eh);
    json_decref(list);
    json_decref(budgets);
    json_decref(egpus);
    return rc;
}
