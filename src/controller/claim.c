/* controller/claim.c - reconciling one ElasticGPUClaim, as the
 * PersistentVolume controller reconciles a PVC.
 *
 * Every step reads the API server's state (the informers' caches) and makes
 * one guarded write, so a controller killed between any two steps finds
 * where it was on restart:
 *   - the protection finalizer first (removed on deletion once no pod in
 *     the claim's namespace that is not finished names the claim);
 *   - a Pending claim: an ElasticGPU whose claimRef already has the claim's
 *     uid is a binding half done (finish it); else the one the claim names,
 *     else the best Available one of its class, else (Immediate) a new one
 *     named egpu-<claim uid>, so a retry finds it instead of making a
 *     second; WaitForFirstConsumer claims wait;
 *   - binding writes the ElasticGPU's claimRef, then its phase Bound, then
 *     the claim's status, in that order;
 *   - a Bound claim whose ElasticGPU is gone (or bound elsewhere) is Lost.
 * Why a claim stays Pending is its condition Bound (False, with a reason),
 * and an event when that reason changes.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "controller_int.h"
#include "egpu/log.h"

#define COND_BOUND "Bound"

struct claim_ctx {
    struct egpu__controller *c;
    json_t *obj; /* the claim as stored */
    struct egpu_api_claim *cl;
};

static void claim_event(struct claim_ctx *x, bool warning, const char *reason, const char *msg)
{
    egpu__controller_event(x->c, EGPU_KIND_ELASTICGPUCLAIM, x->cl->meta.ns, x->cl->meta.name,
                           x->cl->meta.uid, warning, reason, "%s", msg);
}

/* Set condition Bound on cl; true when it changed. */
static bool set_cond(struct egpu_api_claim *cl, bool bound, const char *reason, const char *msg)
{
    struct egpu_api_condition *k = NULL;
    enum egpu_api_cond_status s = bound ? EGPU_API_COND_TRUE : EGPU_API_COND_FALSE;

    for (uint32_t i = 0; i < cl->nconditions; i++) {
        if (strcmp(cl->conditions[i].type, COND_BOUND) == 0)
            k = &cl->conditions[i];
    }
    if (k != NULL && k->status == s && strcmp(k->reason, reason) == 0 &&
        strncmp(k->message, msg, sizeof(k->message) - 1) == 0)
        return false;
    if (k == NULL) {
        if (cl->nconditions == EGPU_API_CONDITIONS_MAX)
            cl->nconditions--; /* drop the last one; ours matters more */
        k = &cl->conditions[cl->nconditions++];
        memset(k, 0, sizeof(*k));
        snprintf(k->type, sizeof(k->type), COND_BOUND);
    }
    if (k->status != s || k->last_transition_time[0] == '\0')
        egpu__controller_now(k->last_transition_time, sizeof(k->last_transition_time));
    k->status = s;
    k->observed_generation = cl->meta.generation;
    snprintf(k->reason, sizeof(k->reason), "%s", reason);
    snprintf(k->message, sizeof(k->message), "%s", msg);
    return true;
}

/* Is condition Bound's reason reason? */
static bool has_cond(const struct egpu_api_claim *cl, const char *reason)
{
    for (uint32_t i = 0; i < cl->nconditions; i++) {
        if (strcmp(cl->conditions[i].type, COND_BOUND) == 0)
            return strcmp(cl->conditions[i].reason, reason) == 0;
    }
    return false;
}

static int write_status(struct claim_ctx *x)
{
    json_t *enc = egpu_api_claim_encode(x->cl), *out = NULL;
    int rc;

    if (enc == NULL)
        return -ENOMEM;
    rc = egpu__controller_put(x->c, &egpu_kube_elasticgpuclaims, x->obj, enc, "status", &out);
    json_decref(enc);
    if (rc == 0) {
        json_decref(x->obj);
        x->obj = out;
    }
    return rc;
}

/* The claim stays Pending for reason: condition and event when it changed. */
static int pending(struct claim_ctx *x, bool warning, const char *reason, const char *msg)
{
    if (x->cl->phase == EGPU_API_CLAIM_PENDING && !set_cond(x->cl, false, reason, msg))
        return 0;
    x->cl->phase = EGPU_API_CLAIM_PENDING;
    claim_event(x, warning, reason, msg);
    return write_status(x);
}

/* Does a pod of items (a JSON array of v1 Pods) in the claim's namespace
 * that has not finished name the claim in an egpuc.elasticgpu.io/ annotation? */
static bool pods_use(const json_t *items, const struct egpu_api_claim *cl)
{
    struct egpu_api_pod_claim pc[EGPU_API_POD_CLAIMS_MAX];
    const json_t *p;
    size_t i, n;

    json_array_foreach(items, i, p)
    {
        const json_t *meta = json_object_get(p, "metadata");
        const char *ns = egpu_api_str(json_object_get(meta, "namespace"));

        if (ns == NULL || strcmp(ns, cl->meta.ns) != 0 || egpu_api_pod_finished(p))
            continue;
        if (egpu_api_pod_claims(p, pc, EGPU_API_POD_CLAIMS_MAX, &n, NULL) != 0)
            continue; /* the webhook admits no such pod */
        for (size_t k = 0; k < n; k++) {
            if (strcmp(pc[k].claim, cl->meta.name) == 0)
                return true;
        }
    }
    return false;
}

/* Is the claim used by a pod of its namespace that has not finished? 1 yes,
 * 0 no, negative errno when that cannot be known. The pod informer answers
 * "yes" alone; "no" is confirmed by a consistent LIST of the namespace's
 * pods, because a pod created just before the claim's deletion may not have
 * reached the informer yet, and removing the finalizer then would delete a
 * claim a pod is about to use (the same check as Kubernetes' PVC protection
 * controller). */
static int in_use(struct egpu__controller *c, const struct egpu_api_claim *cl)
{
    json_t *pods = egpu_kube_informer_list(c->inf[EGPU__CONTROLLER_PODS]), *list = NULL;
    struct egpu_kube_status st;
    struct egpu_error err;
    bool used;
    int rc;

    if (pods == NULL)
        return -ENOMEM;
    used = pods_use(pods, cl);
    json_decref(pods);
    if (used)
        return 1;
    rc = egpu_kube_list(c->kube, &egpu_kube_pods, cl->meta.ns, NULL, &list, &st, &err);
    if (rc != 0) {
        egpu_log(EGPU_LOG_WARN, "claim=%s/%s: cannot list pods to confirm it is unused: %s",
                 cl->meta.ns, cl->meta.name, err.msg);
        return rc < 0 ? rc : -EIO;
    }
    used = pods_use(json_object_get(list, "items"), cl);
    json_decref(list);
    return used ? 1 : 0;
}

/* Add or remove the protection finalizer. Returns 0 with *done true when
 * the reconcile ends here. */
static int protect(struct claim_ctx *x, bool *done)
{
    struct egpu_api_meta *m = &x->cl->meta;
    bool has = egpu_api_meta_has_finalizer(m, EGPU_FINALIZER_CLAIM_PROTECTION);
    json_t *enc, *out = NULL;
    int rc;

    *done = m->deletion_timestamp[0] != '\0';
    if (*done && !has)
        return 0;
    if (*done && (rc = in_use(x->c, x->cl)) != 0)
        return rc < 0 ? rc
                      : 0; /* in use: wait for the pods (their changes queue the claim again) */
    if (!*done && has)
        return 0;
    if (*done) {
        uint32_t k = 0;

        for (uint32_t i = 0; i < m->nfinalizers; i++) {
            if (strcmp(m->finalizers[i], EGPU_FINALIZER_CLAIM_PROTECTION) != 0)
                memmove(m->finalizers[k++], m->finalizers[i], sizeof(m->finalizers[i]));
        }
        m->nfinalizers = k;
    } else {
        if (m->nfinalizers == EGPU_API_FINALIZERS_MAX)
            return 0;
        snprintf(m->finalizers[m->nfinalizers++], EGPU_API_FINALIZER_MAX, "%s",
                 EGPU_FINALIZER_CLAIM_PROTECTION);
    }
    enc = egpu_api_claim_encode(x->cl);
    if (enc == NULL)
        return -ENOMEM;
    rc = egpu__controller_put(x->c, &egpu_kube_elasticgpuclaims, x->obj, enc, "finalizers", &out);
    json_decref(enc);
    if (rc == 0) {
        egpu_log(EGPU_LOG_INFO, "%s finalizer claim=%s/%s", *done ? "removed" : "added", m->ns,
                 m->name);
        json_decref(x->obj);
        x->obj = out;
        rc = egpu_api_claim_decode(out, x->cl, NULL) == 0 ? 0 : -EPROTO;
    }
    return rc;
}

/* The claim's class: its own, or the default one (the first by name of
 * those annotated default). NULL with *why set when there is none. */
static struct egpu_api_class *class_of(struct egpu__controller *c, const struct egpu_api_claim *cl,
                                       char *why, size_t len)
{
    json_t *all = egpu_kube_informer_list(c->inf[EGPU__CONTROLLER_CLASSES]), *o;
    struct egpu_api_class *best = NULL, *k = egpu_malloc(sizeof(*k));
    size_t i;

    (void)egpu_api_class_missing(cl->class_name, why, len);
    json_array_foreach(all, i, o)
    {
        if (k == NULL || egpu_api_class_decode(o, k, NULL) != 0)
            continue;
        if (egpu_api_class_serves(k, cl->class_name, best)) {
            struct egpu_api_class *t = best;

            best = k;
            k = t != NULL ? t : egpu_malloc(sizeof(*k));
        }
    }
    egpu_free(k);
    json_decref(all);
    return best;
}

/* Write the ElasticGPU's half of the binding: claimRef with the claim's
 * uid, then phase Bound (with the card and percent of a TFLOPS claim). */
static int bind_egpu(struct claim_ctx *x, json_t **eobj, struct egpu_api_egpu *e,
                     const struct egpu_api_class *cls)
{
    struct egpu_api_claim *cl = x->cl;
    json_t *enc, *out = NULL;
    char model[EGPU_MODEL_MAX];
    int64_t pct = 0;
    int rc = 0;

    if (!e->has_claim_ref || e->claim_uid[0] == '\0') {
        e->has_claim_ref = true;
        snprintf(e->claim_ns, sizeof(e->claim_ns), "%s", cl->meta.ns);
        snprintf(e->claim_name, sizeof(e->claim_name), "%s", cl->meta.name);
        snprintf(e->claim_uid, sizeof(e->claim_uid), "%s", cl->meta.uid);
        enc = egpu_api_egpu_encode(e);
        rc = enc != NULL
                 ? egpu__controller_put(x->c, &egpu_kube_elasticgpus, *eobj, enc, "spec", &out)
                 : -ENOMEM;
        json_decref(enc);
        if (rc)
            return rc;
        json_decref(*eobj);
        *eobj = out;
        if (egpu_api_egpu_decode(out, e, NULL) != 0)
            return -EPROTO;
    }
    if (cl->tflops_milli > 0 && e->ngpus > 0) {
        egpu__controller_gpu_model(x->c, e->gpu_names[0], model, sizeof(model));
        if (egpu_api_egpu_fit(e, cl, cls, model, &pct) != EGPU_API_FIT_OK)
            pct = 0;
    }
    if (e->phase == EGPU_API_EGPU_BOUND && (pct == 0 || e->tflops_core_pct == pct))
        return 0;
    e->phase = EGPU_API_EGPU_BOUND;
    e->reason[0] = e->message[0] = '\0';
    if (pct > 0) {
        snprintf(e->chosen_gpu, sizeof(e->chosen_gpu), "%s", e->gpu_names[0]);
        snprintf(e->model, sizeof(e->model), "%s", model);
        e->tflops_core_pct = pct;
    }
    enc = egpu_api_egpu_encode(e);
    out = NULL;
    rc = enc != NULL
             ? egpu__controller_put(x->c, &egpu_kube_elasticgpus, *eobj, enc, "status", &out)
             : -ENOMEM;
    json_decref(enc);
    if (rc)
        return rc;
    json_decref(*eobj);
    *eobj = out;
    egpu__controller_event(x->c, EGPU_KIND_ELASTICGPU, NULL, e->meta.name, e->meta.uid, false,
                           "Bound", "bound to ElasticGPUClaim %s/%s", cl->meta.ns, cl->meta.name);
    return 0;
}

/* Bind the claim to ElasticGPU e: its half first, then the claim's status. */
static int bind(struct claim_ctx *x, json_t **eobj, struct egpu_api_egpu *e,
                const struct egpu_api_class *cls)
{
    struct egpu_api_claim *cl = x->cl;
    char msg[1024];
    int rc = bind_egpu(x, eobj, e, cls);

    if (rc)
        return rc;
    cl->phase = EGPU_API_CLAIM_BOUND;
    snprintf(cl->bound_egpu, sizeof(cl->bound_egpu), "%s", e->meta.name);
    cl->has_cap_core = true;
    cl->cap_core_pct = e->core_pct;
    cl->has_cap_mem = e->has_mem;
    cl->cap_mem_mib = e->has_mem ? e->mem_mib : 0;
    cl->observed_generation = cl->meta.generation;
    snprintf(msg, sizeof(msg), "bound to ElasticGPU %s on node %s", e->meta.name, e->node_name);
    (void)set_cond(cl, true, "Bound", msg);
    rc = write_status(x);
    if (rc == 0)
        claim_event(x, false, "Bound", msg);
    return rc;
}

/* An ElasticGPU whose claimRef carries this claim's uid: a binding begun
 * before a restart (or a provisioned one). Returns it, or NULL. */
static struct egpu_api_egpu *half_bound(struct egpu__controller *c, const struct egpu_api_claim *cl,
                                        json_t **eobj)
{
    char name[EGPU_K8S_NAME_MAX];
    const char *n[2] = {NULL, egpu__controller_index_egpu_of_uid(c, cl->meta.uid)};
    struct egpu_api_egpu *e;

    if (egpu_controller_provisioned_name(cl->meta.uid, name, sizeof(name)) == 0)
        n[0] = name;
    for (int i = 0; i < 2; i++) {
        if (n[i] == NULL || (e = egpu__controller_egpu_get(c, n[i], eobj)) == NULL)
            continue;
        if (e->has_claim_ref && strcmp(e->claim_uid, cl->meta.uid) == 0)
            return e;
        json_decref(*eobj);
        *eobj = NULL;
        egpu_free(e);
    }
    return NULL;
}

/* The best Available ElasticGPU of cls for the claim, or NULL. */
static struct egpu_api_egpu *best_available(struct egpu__controller *c,
                                            const struct egpu_api_claim *cl,
                                            const struct egpu_api_class *cls, json_t **eobj)
{
    json_t *avail = egpu__controller_index_available(c), *o, *v;
    size_t n = json_object_size(avail), m = 0;
    const char *name;
    struct egpu_api_egpu *dec = egpu_calloc(n ? n : 1, sizeof(*dec)), *e = NULL;
    const struct egpu_api_egpu **ptr = egpu_calloc(n ? n : 1, sizeof(*ptr));
    char(*models)[EGPU_MODEL_MAX] = egpu_calloc(n ? n : 1, EGPU_MODEL_MAX);
    const char **mptr = egpu_calloc(n ? n : 1, sizeof(*mptr));
    long best;

    if (dec != NULL && ptr != NULL && models != NULL && mptr != NULL) {
        json_object_foreach(avail, name, v)
        {
            o = egpu_kube_informer_get(c->inf[EGPU__CONTROLLER_EGPUS], NULL, name);
            if (o == NULL || egpu_api_egpu_decode(o, &dec[m], NULL) != 0 ||
                dec[m].phase != EGPU_API_EGPU_AVAILABLE) {
                json_decref(o);
                continue;
            }
            json_decref(o);
            ptr[m] = &dec[m];
            mptr[m] = dec[m].ngpus ? egpu__controller_gpu_model(c, dec[m].gpu_names[0], models[m],
                                                                EGPU_MODEL_MAX)
                                   : "";
            m++;
        }
        best = egpu_api_best_fit(ptr, mptr, m, cl, cls);
        if (best >= 0)
            e = egpu__controller_egpu_get(c, dec[best].meta.name, eobj);
    }
    egpu_free(dec);
    egpu_free(ptr);
    egpu_free(models);
    egpu_free(mptr);
    return e;
}

/* Create the ElasticGPU of choice ch for the claim (named egpu-<claim
 * uid>, so a retry after a crash finds it instead of making a second), count
 * it in the inventories at once, and bind it. */
static int create_and_bind(struct claim_ctx *x, const struct egpu_api_class *cls,
                           const struct egpu_controller_choice *ch)
{
    struct egpu__controller *c = x->c;
    struct egpu_api_claim *cl = x->cl;
    struct egpu_api_egpu *e = egpu_calloc(1, sizeof(*e));
    struct egpu_error err = {0};
    struct egpu_kube_status st = {0};
    json_t *enc = NULL, *out = NULL, *ann;
    int rc;

    if (e == NULL)
        return -ENOMEM;
    (void)egpu_controller_provisioned_name(cl->meta.uid, e->meta.name, sizeof(e->meta.name));
    e->core_pct = ch->core_pct;
    e->has_mem = ch->source == EGPU_API_PROVISIONER_GPUSHARE && ch->mem_mib > 0;
    e->mem_mib = e->has_mem ? ch->mem_mib : 0;
    snprintf(e->node_name, sizeof(e->node_name), "%s", ch->node);
    e->source = ch->source;
    e->ngpus = ch->ngpus;
    memcpy(e->gpu_names, ch->gpu_names, sizeof(e->gpu_names));
    e->has_claim_ref = true;
    snprintf(e->claim_ns, sizeof(e->claim_ns), "%s", cl->meta.ns);
    snprintf(e->claim_name, sizeof(e->claim_name), "%s", cl->meta.name);
    snprintf(e->claim_uid, sizeof(e->claim_uid), "%s", cl->meta.uid);
    snprintf(e->class_name, sizeof(e->class_name), "%s", cls->meta.name);
    e->has_reclaim_policy = true;
    e->reclaim_policy = cls->reclaim_policy;
    enc = egpu_api_egpu_encode(e);
    ann = json_pack("{s:s}", EGPU_ANN_PROVISIONED_BY, egpu_api_provisioner_name(cls->provisioner));
    /* A namespace with a GPUBudget is charged for it until it is gone
     * (budget.c): the finalizer keeps it until metered to its deletion. */
    if (enc != NULL && egpu__controller_budget_exists(c, cl->meta.ns) &&
        json_object_set_new(json_object_get(enc, "metadata"), "finalizers",
                            json_pack("[s]", EGPU_FINALIZER_METERING)) != 0) {
        json_decref(enc);
        enc = NULL;
    }
    if (enc == NULL || ann == NULL ||
        json_object_set_new(json_object_get(enc, "metadata"), "annotations", ann) != 0) {
        json_decref(enc);
        egpu_free(e);
        return -ENOMEM;
    }
    rc = egpu_kube_create(c->kube, &egpu_kube_elasticgpus, NULL, enc, &out, &st, &err);
    json_decref(enc);
    if (rc == -EEXIST) {
        /* Made before a crash, and not in the cache yet: take the stored one. */
        rc = egpu_kube_get(c->kube, &egpu_kube_elasticgpus, NULL, e->meta.name, &out, &st, &err);
    } else if (rc == 0) {
        egpu__controller_event(
            c, EGPU_KIND_ELASTICGPU, NULL, e->meta.name, NULL, false, "Provisioned",
            "provisioned by %s for ElasticGPUClaim %s/%s on node %s, GPU %s%s",
            egpu_api_provisioner_name(cls->provisioner), cl->meta.ns, cl->meta.name, e->node_name,
            e->gpu_names[0], e->ngpus > 1 ? " and more" : "");
    }
    if (rc == 0)
        egpu__controller_index_created(c, out); /* counted before its watch event comes */
    if (rc == 0 && egpu_api_egpu_decode(out, e, &err) != 0)
        rc = -EPROTO;
    if (rc == 0 && strcmp(e->claim_uid, cl->meta.uid) != 0)
        rc = egpu_error_set(&err, -EEXIST, "ElasticGPU %s exists for another claim", e->meta.name);
    if (rc == 0)
        rc = bind(x, &out, e, cls);
    else
        egpu_log(EGPU_LOG_WARN, "provisioning failed claim=%s/%s error=\"%s\"", cl->meta.ns,
                 cl->meta.name, err.msg);
    json_decref(out);
    egpu_free(e);
    return rc;
}

/* Provision an ElasticGPU for the claim where the placement core chooses
 * (Immediate). */
static int provision(struct claim_ctx *x, const struct egpu_api_class *cls)
{
    struct egpu_error err = {0};
    struct egpu_controller_inventory *inv = egpu__controller_index_inventory(x->c, cls, &err);
    struct egpu_controller_choice ch;
    int rc;

    if (inv == NULL)
        return err.code ? err.code : -ENOMEM;
    rc = egpu_controller_place(inv, x->cl, cls, &ch, &err);
    if (rc == EGPU_ENOFIT || rc == EGPU_ERANGE)
        return pending(x, true, "ProvisioningFailed", err.msg);
    if (rc)
        return rc;
    return create_and_bind(x, cls, &ch);
}

/* Drop the scheduler's selection from the claim, so it chooses again. */
static int unselect(struct claim_ctx *x)
{
    json_t *ann =
        json_deep_copy(json_object_get(json_object_get(x->obj, "metadata"), "annotations"));
    json_t *enc, *out = NULL;
    int rc;

    if (ann == NULL)
        return -ENOMEM;
    (void)json_object_del(ann, EGPU_ANN_SELECTED_NODE);
    (void)json_object_del(ann, EGPU_ANN_SELECTED_GPUS);
    enc = json_pack("{s:{s:o}}", "metadata", "annotations", ann);
    if (enc == NULL)
        return -ENOMEM;
    rc = egpu__controller_put(x->c, &egpu_kube_elasticgpuclaims, x->obj, enc, "annotations", &out);
    json_decref(enc);
    if (rc == 0) {
        egpu_log(EGPU_LOG_INFO, "removed the selection claim=%s/%s", x->cl->meta.ns,
                 x->cl->meta.name);
        json_decref(x->obj);
        x->obj = out;
    }
    return rc;
}

/* Provision a WaitForFirstConsumer claim where the scheduler placed its
 * first pod (node and gpus, from the claim's annotations). Those can be
 * written by the claim's owner too, so the selection is checked like any
 * placement (egpu_controller_place_at); refused, the claim says why (condition
 * and event) and loses the annotations, for the scheduler to choose again. */
static int provision_selected(struct claim_ctx *x, const struct egpu_api_class *cls,
                              const char *node, const char *gpus)
{
    struct egpu_error err = {0};
    struct egpu_controller_inventory *inv = egpu__controller_index_inventory(x->c, cls, &err);
    struct egpu_controller_choice ch;
    char why[2048];
    int rc;

    if (inv == NULL)
        return err.code ? err.code : -ENOMEM;
    rc = egpu_controller_place_at(inv, x->cl, cls, node, gpus, &ch, &err);
    if (rc == EGPU_ENOFIT || rc == EGPU_ERANGE) {
        snprintf(why, sizeof(why),
                 "the scheduler's selection (node %.253s, GPUs %.256s) was refused: %s; it is "
                 "removed for the scheduler to choose again",
                 node, gpus, err.msg);
        rc = pending(x, true, "SelectionRejected", why);
        return rc ? rc : unselect(x);
    }
    if (rc)
        return rc;
    return create_and_bind(x, cls, &ch);
}

static int sync_pending(struct claim_ctx *x)
{
    struct egpu__controller *c = x->c;
    struct egpu_api_claim *cl = x->cl;
    struct egpu_api_class *cls = NULL;
    struct egpu_api_egpu *e;
    json_t *eobj = NULL;
    char why[1024], model[EGPU_MODEL_MAX];
    enum egpu_api_fit fit;
    int rc;

    egpu__controller_index_refresh(c);
    e = half_bound(c, cl, &eobj);
    if (cl->class_name[0] != '\0' || e == NULL)
        cls = class_of(c, cl, why, sizeof(why));
    if (e != NULL) {
        rc = bind(x, &eobj, e, cls);
        goto out;
    }
    if (cl->egpu_name[0] != '\0') {
        e = egpu__controller_egpu_get(c, cl->egpu_name, &eobj);
        if (e == NULL) {
            snprintf(why, sizeof(why), "ElasticGPU %s not found", cl->egpu_name);
            rc = pending(x, true, "ElasticGPUNotFound", why);
            goto out;
        }
        if (cl->class_name[0] == '\0') {
            egpu_free(cls);
            cls = NULL; /* named without a class: only the ElasticGPU's own class "" fits */
        }
        fit = egpu_api_egpu_fit(
            e, cl, cls,
            e->ngpus ? egpu__controller_gpu_model(c, e->gpu_names[0], model, sizeof(model)) : "",
            NULL);
        if (fit != EGPU_API_FIT_OK) {
            snprintf(why, sizeof(why), "ElasticGPU %s does not fit the claim: %s", e->meta.name,
                     egpu_api_fit_name(fit));
            rc = pending(x, true, "ElasticGPUDoesNotFit", why);
            goto out;
        }
        rc = bind(x, &eobj, e, cls);
        goto out;
    }
    if (cls == NULL) {
        rc = pending(x, true, "ClassNotFound", why);
        goto out;
    }
    snprintf(cl->class_name, sizeof(cl->class_name), "%s", cls->meta.name);
    if (cls->binding_mode == EGPU_API_BINDING_WAIT_FOR_FIRST_CONSUMER) {
        json_t *ann = json_object_get(json_object_get(x->obj, "metadata"), "annotations");
        const char *node = egpu_api_str(json_object_get(ann, EGPU_ANN_SELECTED_NODE));
        const char *gpus = egpu_api_str(json_object_get(ann, EGPU_ANN_SELECTED_GPUS));

        if (node != NULL && gpus != NULL) {
            /* Its pod is placed there: an Available ElasticGPU elsewhere
             * would not do. */
            json_incref(ann); /* node and gpus live in it; x->obj is replaced on writes */
            rc = provision_selected(x, cls, node, gpus);
            json_decref(ann);
            goto out;
        }
    }
    e = best_available(c, cl, cls, &eobj);
    if (e != NULL) {
        rc = bind(x, &eobj, e, cls);
        goto out;
    }
    if (cls->binding_mode == EGPU_API_BINDING_WAIT_FOR_FIRST_CONSUMER) {
        rc = 0;
        if (has_cond(cl, "SelectionRejected"))
            goto out; /* why the last selection was refused stays until the next one */
        snprintf(why, sizeof(why),
                 "waiting for the first pod that uses this claim to be scheduled (class %s "
                 "has bindingMode WaitForFirstConsumer)",
                 cls->meta.name);
        rc = pending(x, false, "WaitForFirstConsumer", why);
        goto out;
    }
    rc = provision(x, cls);
out:
    json_decref(eobj);
    egpu_free(e);
    egpu_free(cls);
    return rc;
}

/* A Bound claim: its ElasticGPU must exist and name it; repair its half
 * when it lost claimRef or phase, else the claim is Lost. */
static int sync_bound(struct claim_ctx *x)
{
    struct egpu__controller *c = x->c;
    struct egpu_api_claim *cl = x->cl;
    json_t *eobj = NULL;
    struct egpu_api_egpu *e = egpu__controller_egpu_get(c, cl->bound_egpu, &eobj);
    struct egpu_kube_status st = {0};
    char why[1024];
    int rc = 0;

    if (e == NULL) {
        /* The cache may lag: ask the API server before calling it lost. */
        rc = egpu_kube_get(c->kube, &egpu_kube_elasticgpus, NULL, cl->bound_egpu, &eobj, &st, NULL);
        if (rc != 0 && rc != -ENOENT)
            return rc;
        if (rc == 0 && (e = egpu_malloc(sizeof(*e))) != NULL &&
            egpu_api_egpu_decode(eobj, e, NULL) != 0) {
            egpu_free(e);
            e = NULL;
        }
    }
    if (e != NULL &&
        (!e->has_claim_ref ||
         (strcmp(e->claim_ns, cl->meta.ns) == 0 && strcmp(e->claim_name, cl->meta.name) == 0 &&
          (e->claim_uid[0] == '\0' || strcmp(e->claim_uid, cl->meta.uid) == 0)))) {
        rc = bind_egpu(x, &eobj, e, NULL);
    } else {
        snprintf(why, sizeof(why),
                 e == NULL ? "ElasticGPU %s was deleted"
                           : "ElasticGPU %s is bound to another claim",
                 cl->bound_egpu);
        cl->phase = EGPU_API_CLAIM_LOST;
        (void)set_cond(cl, false, "ElasticGPULost", why);
        rc = write_status(x);
        if (rc == 0)
            claim_event(x, true, "ClaimLost", why);
    }
    json_decref(eobj);
    egpu_free(e);
    return rc;
}

/* --mode dra: a claim neither bound to nor naming an ElasticGPU is a
 * ResourceClaim (dra.c), allocated by
 * kube-scheduler with the first pod that uses it; its status follows what
 * was allocated (phase Bound, the consumed capacity, the device and node in
 * condition Bound's message), Pending until then. */
static int sync_dra(struct claim_ctx *x)
{
    struct egpu_api_claim *cl = x->cl;
    struct egpu_controller_dra_alloc a;
    struct egpu_error err = {0};
    struct egpu_api_class *cls;
    char why[1280], rcname[EGPU_K8S_NAME_MAX];
    bool changed;
    int rc;

    cls = class_of(x->c, cl, why, sizeof(why));
    if (cls == NULL)
        return pending(x, true, "ClassNotFound", why);
    rc = egpu__controller_dra_claim(x->c, cl, cls, &a, &err);
    egpu_free(cls);
    if (rc == EGPU_ERANGE || rc == -EEXIST)
        return pending(x, true, "ProvisioningFailed", err.msg);
    if (rc)
        return rc;
    if (egpu_api_dra_object_name(cl->meta.name, rcname, sizeof(rcname)) != 0)
        return pending(x, true, "ProvisioningFailed", "name too long");
    if (!a.allocated) {
        snprintf(why, sizeof(why),
                 "ResourceClaim %s waits for kube-scheduler to allocate it with the first pod "
                 "that uses it",
                 rcname);
        return pending(x, false, "WaitForFirstConsumer", why);
    }
    snprintf(why, sizeof(why), "ResourceClaim %s allocated: device %s/%s on node %s", rcname,
             a.pool, a.device, a.node[0] ? a.node : "(not given)");
    changed = cl->phase != EGPU_API_CLAIM_BOUND;
    changed = set_cond(cl, true, COND_BOUND, why) || changed;
    if (a.cores > 0 && (!cl->has_cap_core || cl->cap_core_pct != a.cores)) {
        cl->has_cap_core = true;
        cl->cap_core_pct = a.cores;
        changed = true;
    }
    if (a.mem_mib > 0 && (!cl->has_cap_mem || cl->cap_mem_mib != a.mem_mib)) {
        cl->has_cap_mem = true;
        cl->cap_mem_mib = a.mem_mib;
        changed = true;
    }
    if (!changed)
        return 0;
    cl->phase = EGPU_API_CLAIM_BOUND;
    claim_event(x, false, COND_BOUND, why);
    return write_status(x);
}

int egpu__controller_claim_sync(struct egpu__controller *c, const char *ns, const char *name)
{
    struct claim_ctx x = {.c = c};
    bool done = false;
    int rc;

    x.cl = egpu__controller_claim_get(c, ns, name, &x.obj);
    if (x.cl == NULL)
        return 0;
    rc = protect(&x, &done);
    /* A claim bound to an ElasticGPU, or naming one, stays on it in DRA mode
     * too: switching modes moves no capacity that is held already. */
    if (rc == 0 && !done && c->o.dra && x.cl->bound_egpu[0] == '\0' && x.cl->egpu_name[0] == '\0') {
        rc = sync_dra(&x);
    } else if (rc == 0 && !done) {
        if (x.cl->phase == EGPU_API_CLAIM_BOUND)
            rc = sync_bound(&x);
        else if (x.cl->phase == EGPU_API_CLAIM_PENDING)
            rc = sync_pending(&x);
    }
    json_decref(x.obj);
    egpu_free(x.cl);
    return rc;
}
