/* controller/dra.c - egpu-controller --mode dra: the ResourceClaimTemplates
 * (resource.k8s.io/v1, ../shared/k8s-wire/dra/dra_notes.md section 5) that
 * egpu-webhook's DRA mode names in a pod.
 *
 * The webhook creates nothing, so a pod that admission then denies leaves
 * nothing behind: it writes the pod's annotation EGPU_ANN_DRA_CLAIMS, a JSON
 * object {template name: ResourceClaimSpec}, and spec.resourceClaims naming
 * those templates. kube-controller-manager makes each pod's claims from the
 * templates once they exist; making them is this file's job:
 *
 * - key "t/<ns>/<pod>" (a pod carrying the annotation): the annotation is
 *   read as a tenant's (the webhook guards it, but nothing here relies on
 *   that): its spec bodies are never used. The specs are made again from the
 *   pod's own request (each GPU container's elasticgpu.io resources, or,
 *   once the webhook has rewritten them away, the ask each entry says, and
 *   the pod's elasticgpu.io/gpu-model, through src/api's
 *   egpu_api_dra_claim_spec and egpu_api_dra_template_name, the webhook's
 *   own functions: want_of). An entry
 *   is made only when its name is one of those, its spec is that one, and
 *   the pod's spec.resourceClaims names it; else a Warning event on the pod
 *   names the template and why, and nothing is made. The template is then
 *   created in the pod's namespace, without owner (many pods of one pod
 *   template share it), labelled EGPU_CONTROLLER_MANAGED_BY_KEY=
 *   EGPU_CONTROLLER_MANAGED_BY_VALUE. One that exists already with another
 *   spec (egpu_controller_dra_spec_same) is left as it is, with a Warning
 *   event on the pod. Each Warning is posted once per pod (dra_warned).
 * - key "d/<class>" (--mode dra, every ElasticGPUClass): its DeviceClass
 *   elasticgpu-<class> (egpu_controller_dra_device_class), owned by the
 *   class so that the garbage collector deletes it with the class; one of
 *   that name the class does not own is left, with a Warning event.
 * - an ElasticGPUClaim (claim.c calls egpu__controller_dra_claim): its
 *   ResourceClaim elasticgpu-<claim> (egpu_controller_dra_claim_object),
 *   owned by the claim; what kube-scheduler allocated goes back on the
 *   claim's status.
 * - key "T" (queued every resync): the templates of ours (the label) that no
 *   pod names are deleted once none has for --dra-template-gc-seconds, after
 *   a consistent LIST of the namespace's pods from the API server agrees
 *   with the cache (a pod created a moment ago, still on its way through the
 *   watch, keeps it). Since when a template went unnamed is kept in memory
 *   only: a restarted controller waits the whole time again, never less.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "controller_int.h"
#include "egpu/log.h"

static long long now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static const json_t *meta_of(const json_t *o)
{
    return json_object_get(o, "metadata");
}

static const char *meta_str(const json_t *o, const char *k)
{
    return egpu_api_str(json_object_get(meta_of(o), k));
}

static const char *annotation(const json_t *o, const char *k)
{
    return egpu_api_str(json_object_get(json_object_get(meta_of(o), "annotations"), k));
}

static bool ours(const json_t *tmpl)
{
    const char *v = egpu_api_str(
        json_object_get(json_object_get(meta_of(tmpl), "labels"), EGPU_CONTROLLER_MANAGED_BY_KEY));

    return v != NULL && strcmp(v, EGPU_CONTROLLER_MANAGED_BY_VALUE) == 0;
}

/* ---- informers ---- */

static void on_template(void *ud, const json_t *o)
{
    struct egpu__controller *c = ud;

    (void)o;
    (void)egpu_controller_queue_add(c->queue, "T");
}

static void on_template_update(void *ud, const json_t *old, const json_t *o)
{
    (void)old;
    on_template(ud, o);
}

/* A DeviceClass of ours changed or went: its class's key. */
static void on_device_class(void *ud, const json_t *o)
{
    struct egpu__controller *c = ud;
    const char *name = meta_str(o, "name");
    char key[EGPU_K8S_NAME_MAX + 4];
    size_t n = strlen(EGPU_API_DRA_OBJECT_PREFIX);

    if (name == NULL || strncmp(name, EGPU_API_DRA_OBJECT_PREFIX, n) != 0 || name[n] == '\0')
        return;
    snprintf(key, sizeof(key), "d/%s", name + n);
    (void)egpu_controller_queue_add(c->queue, key);
}

static void on_device_class_update(void *ud, const json_t *old, const json_t *o)
{
    (void)old;
    on_device_class(ud, o);
}

/* A ResourceClaim of ours changed or went: its ElasticGPUClaim's key. */
static void on_resource_claim(void *ud, const json_t *o)
{
    const json_t *ref;
    size_t i;

    json_array_foreach(json_object_get(meta_of(o), "ownerReferences"), i, ref)
    {
        const char *kind = egpu_api_str(json_object_get(ref, "kind"));

        if (kind != NULL && strcmp(kind, EGPU_KIND_ELASTICGPUCLAIM) == 0)
            egpu__controller_enqueue_claim(ud, meta_str(o, "namespace"),
                                           egpu_api_str(json_object_get(ref, "name")));
    }
}

static void on_resource_claim_update(void *ud, const json_t *old, const json_t *o)
{
    (void)old;
    on_resource_claim(ud, o);
}

int egpu__controller_dra_start(struct egpu__controller *c, struct egpu_error *err)
{
    const struct egpu_kube_informer_cbs cbs[EGPU__CONTROLLER_DRA_NINF] = {
        {on_template, on_template_update, on_template, c},
        {on_device_class, on_device_class_update, on_device_class, c},
        {on_resource_claim, on_resource_claim_update, on_resource_claim, c},
    };
    static const struct egpu_kube_resource *const res[EGPU__CONTROLLER_DRA_NINF] = {
        &egpu_kube_resourceclaimtemplates, &egpu_kube_deviceclasses, &egpu_kube_resourceclaims};
    static const char *const sel[EGPU__CONTROLLER_DRA_NINF] = {
        NULL, NULL, EGPU_CONTROLLER_MANAGED_BY_KEY "=" EGPU_CONTROLLER_MANAGED_BY_VALUE};
    int rc = 0;

    if (!c->o.dra)
        return 0;
    c->dra_warned = json_object();
    c->dra_unref = json_object();
    if (c->dra_warned == NULL || c->dra_unref == NULL)
        return egpu_error_set(err, -ENOMEM, "out of memory");
    for (int i = 0; rc == 0 && i < EGPU__CONTROLLER_DRA_NINF; i++) {
        struct egpu_kube_informer_opts io = {.res = res[i], .label_selector = sel[i]};

        rc = egpu_kube_informer_new(c->kube, &io, &cbs[i], &c->dra_inf[i], err);
    }
    for (int i = 0; rc == 0 && i < EGPU__CONTROLLER_DRA_NINF; i++)
        rc = egpu_kube_informer_start(c->dra_inf[i], err);
    return rc;
}

void egpu__controller_dra_free(struct egpu__controller *c)
{
    for (int i = 0; i < EGPU__CONTROLLER_DRA_NINF; i++) {
        egpu_kube_informer_free(c->dra_inf[i]);
        c->dra_inf[i] = NULL;
    }
    json_decref(c->dra_warned);
    json_decref(c->dra_unref);
    c->dra_warned = c->dra_unref = NULL;
}

bool egpu__controller_dra_synced(struct egpu__controller *c)
{
    for (int i = 0; i < EGPU__CONTROLLER_DRA_NINF; i++) {
        if (c->dra_inf[i] != NULL && !egpu_kube_informer_has_synced(c->dra_inf[i]))
            return false;
    }
    return true;
}

bool egpu__controller_dra_healthy(struct egpu__controller *c, long max_ms, char *why, size_t len)
{
    static const char *const kinds[EGPU__CONTROLLER_DRA_NINF] = {"ResourceClaimTemplate",
                                                                 "DeviceClass"};

    return !c->o.dra || egpu_kube_informers_healthy(c->dra_inf, kinds, EGPU__CONTROLLER_DRA_NINF,
                                                    max_ms, why, len);
}

static void enqueue_pod(struct egpu__controller *c, const char *ns, const char *name)
{
    char key[EGPU_NAMESPACE_MAX + EGPU_K8S_NAME_MAX + 4];

    if (ns == NULL || name == NULL || ns[0] == '\0' || name[0] == '\0')
        return;
    snprintf(key, sizeof(key), "t/%s/%s", ns, name);
    (void)egpu_controller_queue_add(c->queue, key);
}

void egpu__controller_dra_note_pod(struct egpu__controller *c, const json_t *pod)
{
    if (c->o.dra && annotation(pod, EGPU_ANN_DRA_CLAIMS) != NULL)
        enqueue_pod(c, meta_str(pod, "namespace"), meta_str(pod, "name"));
}

void egpu__controller_dra_note_class(struct egpu__controller *c, const json_t *cls)
{
    const char *name = meta_str(cls, "name");
    char key[EGPU_K8S_NAME_MAX + 4];

    if (!c->o.dra || name == NULL || name[0] == '\0')
        return;
    snprintf(key, sizeof(key), "d/%s", name);
    (void)egpu_controller_queue_add(c->queue, key);
}

void egpu__controller_dra_enqueue_all(struct egpu__controller *c)
{
    json_t *all, *o;
    size_t i;

    if (!c->o.dra)
        return;
    all = egpu_kube_informer_list(c->inf[EGPU__CONTROLLER_PODS]);
    json_array_foreach(all, i, o)
    {
        egpu__controller_dra_note_pod(c, o);
    }
    json_decref(all);
    all = egpu_kube_informer_list(c->inf[EGPU__CONTROLLER_CLASSES]);
    json_array_foreach(all, i, o)
    {
        egpu__controller_dra_note_class(c, o);
    }
    json_decref(all);
    (void)egpu_controller_queue_add(c->queue, "T");
}

/* ---- one pod ---- */

/* Add spec (a new reference, taken) to want under its name. */
static int want_add(json_t *want, json_t *spec, struct egpu_error *err)
{
    char name[EGPU_API_DRA_TEMPLATE_NAME_MAX];
    int rc = egpu_api_dra_template_name(spec, name, err);

    if (!rc && json_object_set_new(want, name, spec) != 0)
        return -ENOMEM;
    if (rc)
        json_decref(spec);
    return rc;
}

/* The specs the pod's own request makes: {template name: ResourceClaimSpec},
 * as egpu-webhook makes them (src/api/dra.c), with the pod's
 * elasticgpu.io/gpu-model. The request is each container's elasticgpu.io
 * resources while the pod has them. egpu-webhook's DRA mode removes them
 * (docs/webhook.md, "DRA mode"), so a pod without any is read from the
 * entries: each entry's body is read back as an ask
 * (egpu_controller_dra_ask_of) and its spec made again from that ask. Only a
 * spec the webhook itself would make for some ask counts, never the body. An
 * ask that does not decode makes nothing (the webhook refuses such a pod). */
static int want_of(const json_t *pod, const json_t *entries, json_t **out, struct egpu_error *err)
{
    const json_t *spec = json_object_get(pod, "spec"), *ct;
    struct egpu_api_pod_annotations pa;
    json_t *want = json_object();
    const char *models = NULL;
    size_t i;
    int rc = 0;

    if (want == NULL)
        return -ENOMEM;
    if (egpu_api_pod_annotations(json_object_get(meta_of(pod), "annotations"), &pa, NULL) == 0 &&
        pa.gpu_model[0] != '\0')
        models = pa.gpu_model;
    if (egpu_api_spec_wants_gpu(spec)) {
        json_array_foreach(json_object_get(spec, "containers"), i, ct)
        {
            const char *cname = egpu_api_str(json_object_get(ct, "name"));
            struct egpu_api_gpu_ask ask;
            json_t *cs = NULL;

            if (egpu_api_container_gpu(ct, cname != NULL ? cname : "", false, &ask, NULL) != 0 ||
                ask.core_pct == 0)
                continue;
            rc = egpu_api_dra_claim_spec(&ask, models, &cs, err);
            if (rc == -ENOMEM)
                break;
            rc = rc ? 0 : want_add(want, cs, err); /* refused asks make nothing */
            if (rc)
                break;
        }
    } else {
        const char *k;
        const json_t *body;

        json_object_foreach((json_t *)entries, k, body)
        {
            struct egpu_api_gpu_ask ask;
            json_t *cs = NULL;

            if (egpu_controller_dra_ask_of(body, &ask) != 0)
                continue;
            rc = egpu_api_dra_claim_spec(&ask, models, &cs, err);
            if (rc == -ENOMEM)
                break;
            rc = rc ? 0 : want_add(want, cs, err);
            if (rc)
                break;
        }
    }
    if (rc) {
        json_decref(want);
        return rc;
    }
    *out = want;
    return 0;
}

/* A Warning event on the pod, once per pod uid, template and reason. */
static void warn_once(struct egpu__controller *c, const json_t *pod, const char *tmpl,
                      const char *reason, const char *msg)
{
    const char *ns = meta_str(pod, "namespace"), *name = meta_str(pod, "name");
    const char *uid = meta_str(pod, "uid");
    char pkey[EGPU_NAMESPACE_MAX + EGPU_K8S_NAME_MAX + 2], wkey[512];
    json_t *seen;

    snprintf(pkey, sizeof(pkey), "%s/%s", ns, name);
    snprintf(wkey, sizeof(wkey), "%s %.253s %s", uid != NULL ? uid : "", tmpl, reason);
    seen = json_object_get(c->dra_warned, pkey);
    if (seen == NULL) {
        seen = json_object();
        if (seen == NULL || json_object_set_new(c->dra_warned, pkey, seen) != 0)
            return;
    }
    if (json_object_get(seen, wkey) != NULL)
        return;
    (void)json_object_set_new(seen, wkey, json_true());
    egpu__controller_event(c, "Pod", ns, name, uid, true, reason, "%s", msg);
}

static int create_template(struct egpu__controller *c, const json_t *pod, const char *tname,
                           const json_t *spec)
{
    const char *ns = meta_str(pod, "namespace");
    struct egpu_kube_status st = {0};
    struct egpu_error err = {0};
    json_t *obj = json_pack(
        "{s:s, s:s, s:{s:s, s:s, s:{s:s}}, s:{s:O}}", "apiVersion", "resource.k8s.io/v1", "kind",
        "ResourceClaimTemplate", "metadata", "name", tname, "namespace", ns, "labels",
        EGPU_CONTROLLER_MANAGED_BY_KEY, EGPU_CONTROLLER_MANAGED_BY_VALUE, "spec", "spec", spec);
    int rc;

    if (obj == NULL)
        return -ENOMEM;
    rc = egpu_kube_create(c->kube, &egpu_kube_resourceclaimtemplates, ns, obj, NULL, &st, &err);
    json_decref(obj);
    if (rc == -EEXIST) /* made a moment ago; its spec is checked at the next sync */
        return 0;
    if (rc) {
        egpu_log(EGPU_LOG_WARN, "ResourceClaimTemplate %s/%s not created: %s", ns, tname, err.msg);
        return rc;
    }
    egpu__controller_event(c, "Pod", ns, meta_str(pod, "name"), meta_str(pod, "uid"), false,
                           "ResourceClaimTemplateCreated",
                           "ResourceClaimTemplate %s created from the pod's elasticgpu.io request",
                           tname);
    return 0;
}

/* One entry of the annotation: made, left, or refused. */
static int sync_entry(struct egpu__controller *c, const json_t *pod, const json_t *want,
                      const json_t *named, const char *tname, const json_t *body)
{
    const json_t *w = json_object_get(want, tname);
    const char *ns = meta_str(pod, "namespace");
    char msg[768];
    json_t *have, *whole;
    bool same;

    if (json_object_get(named, tname) == NULL) {
        snprintf(msg, sizeof(msg),
                 "ResourceClaimTemplate %.253s in annotation %s: the pod's spec.resourceClaims "
                 "does not name it; not created",
                 tname, EGPU_ANN_DRA_CLAIMS);
        warn_once(c, pod, tname, "ResourceClaimTemplateRefused", msg);
        return 0;
    }
    if (w == NULL || !json_equal((json_t *)w, (json_t *)body)) {
        snprintf(msg, sizeof(msg), "ResourceClaimTemplate %.253s in annotation %s: %s; not created",
                 tname, EGPU_ANN_DRA_CLAIMS,
                 w == NULL ? "not the name of a spec the pod's elasticgpu.io request makes"
                           : "its spec is not the one the pod's elasticgpu.io request makes");
        warn_once(c, pod, tname, "ResourceClaimTemplateRefused", msg);
        return 0;
    }
    have = egpu_kube_informer_get(c->dra_inf[EGPU__CONTROLLER_DRA_TEMPLATES], ns, tname);
    if (have == NULL)
        return create_template(c, pod, tname, w);
    /* The whole template spec: labels or annotations the claims would get
     * make another spec too. */
    whole = json_pack("{s:O}", "spec", w);
    if (whole == NULL) {
        json_decref(have);
        return -ENOMEM;
    }
    same = egpu_controller_dra_spec_same(whole, json_object_get(have, "spec"));
    json_decref(whole);
    json_decref(have);
    if (!same) {
        snprintf(msg, sizeof(msg),
                 "ResourceClaimTemplate %.253s exists with another spec than the pod's "
                 "elasticgpu.io request makes; left as it is",
                 tname);
        warn_once(c, pod, tname, "ResourceClaimTemplateConflict", msg);
    }
    return 0;
}

int egpu__controller_dra_sync(struct egpu__controller *c, const char *ns, const char *name)
{
    json_t *pod = egpu_kube_informer_get(c->inf[EGPU__CONTROLLER_PODS], ns, name);
    json_t *entries = NULL, *want = NULL, *named = NULL, *body;
    struct egpu_error err = {0};
    const char *text, *tname;
    int rc = 0;

    if (pod == NULL) {
        char pkey[EGPU_NAMESPACE_MAX + EGPU_K8S_NAME_MAX + 2];

        snprintf(pkey, sizeof(pkey), "%s/%s", ns, name);
        (void)json_object_del(c->dra_warned, pkey);
        return 0;
    }
    text = annotation(pod, EGPU_ANN_DRA_CLAIMS);
    if (text == NULL || json_object_get(meta_of(pod), "deletionTimestamp") != NULL ||
        egpu_api_pod_finished(pod))
        goto out;
    if (egpu_controller_dra_entries(text, &entries, &err) != 0) {
        warn_once(c, pod, "-", "ResourceClaimTemplateRefused", err.msg);
        goto out;
    }
    rc = want_of(pod, entries, &want, &err);
    if (rc) {
        egpu_log(EGPU_LOG_WARN, "pod %s/%s: its templates not made: %s", ns, name, err.msg);
        goto out;
    }
    named = egpu_controller_dra_pod_templates(pod);
    if (named == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    json_object_foreach(entries, tname, body)
    {
        int r = sync_entry(c, pod, want, named, tname, body);

        rc = rc ? rc : r;
    }
out:
    json_decref(named);
    json_decref(want);
    json_decref(entries);
    json_decref(pod);
    return rc;
}

/* ---- garbage collection ---- */

/* Does a pod of ns named by the API server (a consistent LIST) name tmpl?
 * Returns 1 (yes), 0 (no) or the client's error. */
static int named_by_a_pod(struct egpu__controller *c, const char *ns, const char *tmpl)
{
    struct egpu_kube_status st = {0};
    struct egpu_error err = {0};
    json_t *list = NULL, *pod;
    size_t i;
    int rc = egpu_kube_list(c->kube, &egpu_kube_pods, ns, NULL, &list, &st, &err), found = 0;

    if (rc) {
        egpu_log(EGPU_LOG_WARN, "pods of %s not listed: %s", ns, err.msg);
        return rc;
    }
    json_array_foreach(json_object_get(list, "items"), i, pod)
    {
        json_t *t = egpu_controller_dra_pod_templates(pod);

        found = found || t == NULL || json_object_get(t, tmpl) != NULL;
        json_decref(t);
    }
    json_decref(list);
    return found;
}

int egpu__controller_dra_gc(struct egpu__controller *c)
{
    json_t *pods, *tmpls, *named = json_object(), *seen = json_object(), *o;
    long long now = now_ms();
    const char *k;
    void *tmp;
    size_t i;
    int rc = 0;

    if (!c->o.dra || named == NULL || seen == NULL) {
        json_decref(named);
        json_decref(seen);
        return c->o.dra ? -ENOMEM : 0;
    }
    pods = egpu_kube_informer_list(c->inf[EGPU__CONTROLLER_PODS]);
    json_array_foreach(pods, i, o)
    {
        json_t *t = egpu_controller_dra_pod_templates(o);
        const char *tn;
        json_t *v;

        json_object_foreach(t, tn, v)
        {
            char key[EGPU_NAMESPACE_MAX + EGPU_K8S_NAME_MAX + 2];

            snprintf(key, sizeof(key), "%s/%s", meta_str(o, "namespace"), tn);
            (void)json_object_set(named, key, json_true());
        }
        json_decref(t);
    }
    json_decref(pods);
    tmpls = egpu_kube_informer_list(c->dra_inf[EGPU__CONTROLLER_DRA_TEMPLATES]);
    json_array_foreach(tmpls, i, o)
    {
        const char *ns = meta_str(o, "namespace"), *name = meta_str(o, "name");
        char key[EGPU_NAMESPACE_MAX + EGPU_K8S_NAME_MAX + 2];
        struct egpu_kube_status st = {0};
        struct egpu_error err = {0};
        long long since;
        int r;

        if (ns == NULL || name == NULL || !ours(o) ||
            json_object_get(meta_of(o), "deletionTimestamp") != NULL)
            continue;
        snprintf(key, sizeof(key), "%s/%s", ns, name);
        if (json_object_get(named, key) != NULL)
            continue;
        (void)json_object_set(seen, key, json_true());
        if (json_object_get(c->dra_unref, key) == NULL)
            (void)json_object_set_new(c->dra_unref, key, json_integer(now));
        since = json_integer_value(json_object_get(c->dra_unref, key));
        if (now - since < c->o.dra_gc_ms)
            continue;
        r = named_by_a_pod(c, ns, name);
        if (r == 1) {
            (void)json_object_del(seen, key);
            continue;
        }
        if (r == 0)
            r = egpu_kube_delete(c->kube, &egpu_kube_resourceclaimtemplates, ns, name, &st, &err);
        if (r == 0 || r == -ENOENT) {
            egpu_log(EGPU_LOG_INFO,
                     "ResourceClaimTemplate %s/%s deleted: no pod has named it for %ld s", ns, name,
                     c->o.dra_gc_ms / 1000);
            (void)json_object_del(seen, key);
        } else {
            egpu_log(EGPU_LOG_WARN, "ResourceClaimTemplate %s/%s not deleted: %s", ns, name,
                     err.msg);
            rc = rc ? rc : r;
        }
    }
    json_decref(tmpls);
    /* Forget the templates that are named again or gone. */
    json_object_foreach_safe(c->dra_unref, tmp, k, o)
    {
        if (json_object_get(seen, k) == NULL)
            (void)json_object_del(c->dra_unref, k);
    }
    json_decref(named);
    json_decref(seen);
    return rc;
}

/* ---- an ElasticGPUClass's DeviceClass ---- */

static bool owned_by(const json_t *obj, const char *uid)
{
    const json_t *ref;
    size_t i;

    json_array_foreach(json_object_get(meta_of(obj), "ownerReferences"), i, ref)
    {
        const char *u = egpu_api_str(json_object_get(ref, "uid"));

        if (u != NULL && uid[0] != '\0' && strcmp(u, uid) == 0)
            return true;
    }
    return false;
}

/* A Warning event on ElasticGPUClass cls, once per uid and reason. */
static void warn_class_once(struct egpu__controller *c, const struct egpu_api_class *cls,
                            const char *reason, const char *msg)
{
    char ckey[EGPU_K8S_NAME_MAX + 8], wkey[EGPU_API_UID_MAX + 64];
    json_t *seen;

    snprintf(ckey, sizeof(ckey), "class/%s", cls->meta.name);
    snprintf(wkey, sizeof(wkey), "%s %s", cls->meta.uid, reason);
    seen = json_object_get(c->dra_warned, ckey);
    if (seen == NULL) {
        seen = json_object();
        if (seen == NULL || json_object_set_new(c->dra_warned, ckey, seen) != 0)
            return;
    }
    if (json_object_get(seen, wkey) != NULL)
        return;
    (void)json_object_set_new(seen, wkey, json_true());
    egpu__controller_event(c, EGPU_KIND_ELASTICGPUCLASS, NULL, cls->meta.name, cls->meta.uid, true,
                           reason, "%s", msg);
}

int egpu__controller_dra_class_sync(struct egpu__controller *c, const char *name)
{
    json_t *obj = egpu_kube_informer_get(c->inf[EGPU__CONTROLLER_CLASSES], NULL, name);
    struct egpu_api_class *cls = NULL;
    struct egpu_kube_status st = {0};
    struct egpu_error err = {0};
    json_t *want = NULL, *have = NULL;
    const char *dname;
    char msg[768];
    int rc = 0;

    if (obj == NULL) { /* gone: the garbage collector deletes its DeviceClass */
        char ckey[EGPU_K8S_NAME_MAX + 8];

        snprintf(ckey, sizeof(ckey), "class/%s", name);
        (void)json_object_del(c->dra_warned, ckey);
        return 0;
    }
    cls = egpu_malloc(sizeof(*cls));
    if (cls == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    if (egpu_api_class_decode(obj, cls, &err) != 0) {
        egpu_log(EGPU_LOG_WARN, "ElasticGPUClass %s: no DeviceClass: %s", name, err.msg);
        goto out;
    }
    rc = egpu_controller_dra_device_class(cls, &want, &err);
    if (rc == -ENOMEM)
        goto out;
    if (rc) {
        snprintf(msg, sizeof(msg), "no DeviceClass made: %s", err.msg);
        warn_class_once(c, cls, "DeviceClassRefused", msg);
        rc = 0;
        goto out;
    }
    dname = meta_str(want, "name");
    have = egpu_kube_informer_get(c->dra_inf[EGPU__CONTROLLER_DRA_CLASSES], NULL, dname);
    if (have == NULL) {
        rc = egpu_kube_create(c->kube, &egpu_kube_deviceclasses, NULL, want, NULL, &st, &err);
        if (rc == -EEXIST)
            rc = 0; /* the informer will show it: compared then */
        else if (rc)
            egpu_log(EGPU_LOG_WARN, "DeviceClass %s not created: %s", dname, err.msg);
        else
            egpu_log(EGPU_LOG_INFO, "DeviceClass %s created for ElasticGPUClass %s", dname, name);
        goto out;
    }
    if (!owned_by(have, cls->meta.uid)) {
        snprintf(msg, sizeof(msg),
                 "DeviceClass %s exists and is not this class's (no ownerReference to it); "
                 "left as it is",
                 dname);
        warn_class_once(c, cls, "DeviceClassConflict", msg);
        goto out;
    }
    if (!egpu_controller_dra_spec_same(json_object_get(want, "spec"),
                                       json_object_get(have, "spec"))) {
        json_t *put = json_deep_copy(have);

        if (put == NULL || json_object_set(put, "spec", json_object_get(want, "spec")) != 0) {
            json_decref(put);
            rc = -ENOMEM;
            goto out;
        }
        rc = egpu_kube_update(c->kube, &egpu_kube_deviceclasses, NULL, dname, put, NULL, &st, &err);
        json_decref(put);
        if (rc)
            egpu_log(rc == EGPU_KUBE_ECONFLICT ? EGPU_LOG_DEBUG : EGPU_LOG_WARN,
                     "DeviceClass %s not updated: %s", dname, err.msg);
    }
out:
    json_decref(have);
    json_decref(want);
    egpu_free(cls);
    json_decref(obj);
    return rc;
}

/* ---- an ElasticGPUClaim's ResourceClaim ---- */

int egpu__controller_dra_claim(struct egpu__controller *c, const struct egpu_api_claim *cl,
                               const struct egpu_api_class *cls,
                               struct egpu_controller_dra_alloc *out, struct egpu_error *err)
{
    struct egpu_kube_status st = {0};
    json_t *want = NULL, *have;
    const char *name;
    int rc;

    memset(out, 0, sizeof(*out));
    rc = egpu_controller_dra_claim_object(cl, cls, &want, err);
    if (rc)
        return rc;
    name = meta_str(want, "name");
    have = egpu_kube_informer_get(c->dra_inf[EGPU__CONTROLLER_DRA_CLAIMS], cl->meta.ns, name);
    if (have == NULL) {
        rc = egpu_kube_create(c->kube, &egpu_kube_resourceclaims, cl->meta.ns, want, &have, &st,
                              err);
        if (rc == -EEXIST) /* not ours (the informer sees only ours), or just made */
            egpu_error_set(err, -EEXIST,
                           "ResourceClaim %s exists and is not this claim's; left as it is", name);
        else if (rc == 0)
            egpu_log(EGPU_LOG_INFO, "ResourceClaim %s/%s created for ElasticGPUClaim %s",
                     cl->meta.ns, name, cl->meta.name);
    }
    if (rc == 0 && !owned_by(have, cl->meta.uid))
        rc = egpu_error_set(err, -EEXIST,
                            "ResourceClaim %s exists and is not this claim's; left as it is", name);
    if (rc == 0)
        egpu_controller_dra_allocation(have, out);
    json_decref(have);
    json_decref(want);
    return rc;
}
