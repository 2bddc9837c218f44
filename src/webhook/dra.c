/* webhook/dra.c - egpu-webhook --mode dra: a pod's elasticgpu.io requests
 * become ResourceClaims made from ResourceClaimTemplates (resource.k8s.io/v1),
 * which kube-scheduler's allocator places on the agent's ResourceSlices.
 *
 * On a Pod CREATE (/mutate and /mutate-nvidia), once mutate.c has converted
 * the compatible names (so tencent.com/, aliyun.com/, HAMi's ... ask as
 * elasticgpu.io ones), and the request passed egpu_api_pod_validate (the
 * rules /validate would apply, which can no longer see the request once it
 * is rewritten), each container i that asks a GPU gets:
 *   - its elasticgpu.io resources, and any compatible name still there,
 *     removed from resources.requests and resources.limits;
 *   - the marker elasticgpu.io/dra: "1" (EGPU_RES_DRA) in requests and
 *     limits: an extended resource no node advertises, listed in the
 *     extender's managedResources with ignoredByScheduler: true, so that
 *     kube-scheduler calls egpu-scheduler for the pod (its filter and
 *     prioritize score the node, FGD; the allocator picks the card), and
 *     the kubelet drops it;
 *   - resources.claims entry {name: egpu-<i>, request: gpu};
 * and the pod gets, per such container:
 *   - spec.resourceClaims entry {name: egpu-<i>, resourceClaimTemplateName:
 *     egpu-<hash>}, the template whose spec.spec is the container's
 *     ResourceClaimSpec (egpu_api_dra_claim_spec: cores percent and memory
 *     Mi of a share, a count of whole cards, a CEL selector on the models of
 *     elasticgpu.io/gpu-model, quoted) and whose name is made from it
 *     (egpu_api_dra_template_name), so equal asks share one template;
 *   - the annotation elasticgpu.io/dra-claims, {template name: claim spec}
 *     (compact, keys sorted), which egpu-controller reads to create the
 *     templates. The webhook creates nothing itself: a pod that a later
 *     admission step denies leaves no object behind, and dry runs are
 *     answered the same.
 * A pod owner's own dra-claims annotation is overwritten; entries of it
 * that no resourceClaims entry names are dropped. The pass over the
 * patched pod (reinvocationPolicy: IfNeeded) finds no GPU request left and
 * changes nothing (the marker is no GPU request). The pod gets
 * spec.schedulerName as in device-plugin mode (mutate.c; none with
 * --set-scheduler-name false, where the extender runs in the main
 * kube-scheduler); device-plugin mode's PriorityClass and metering
 * finalizer are not given: budgets on claims are held elsewhere.
 *
 * A container i that uses an ElasticGPUClaim C (annotation
 * egpuc.elasticgpu.io/<container>: C, which claims.c resolved as in
 * device-plugin mode: C must exist in the pod's namespace, not be Lost, ...,
 * and mutate.c wrote C's gpu-core and gpu-memory into the container, so the
 * rules and the seccomp guard above judge them) gets instead:
 *   - those resources removed, the marker, and resources.claims {name:
 *     egpu-<i>, request: gpu};
 *   - spec.resourceClaims {name: egpu-<i>, resourceClaimName:
 *     elasticgpu-<C>}, the ResourceClaim egpu-controller --mode dra makes
 *     for C in C's namespace (egpu_api_dra_object_name, the controller's
 *     name; its one request is gpu); no template, no dra-claims entry.
 * ResourceClaims are namespaced: a pod's resourceClaimName can only name a
 * claim of its own namespace, so a tenant cannot reach another's this way.
 *
 * On /validate (every mode) the marker is refused where this file did not
 * write it (egpu__webhook_dra_marker_check): outside DRA mode, on an init
 * container, and on a container without the claim entries above, so a pod
 * owner cannot send a pod with no GPU claim to the extender this way.
 * And the annotation is fixed once the pod exists (an
 * UPDATE may not add, change or remove it), and on a Pod CREATE it must be
 * what this file writes: each entry a spec this file makes for some ask with
 * the pod's own gpu-model annotation, under the name made from it, named by
 * one of the pod's resourceClaims. Outside DRA mode a pod may not carry it.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "webhook_int.h"

#define MARKER "1" /* the value of EGPU_RES_DRA, in requests and limits */

static const json_t *annotations_of(const json_t *meta)
{
    const json_t *a = json_object_get(meta, "annotations");

    return json_is_object(a) ? a : NULL;
}

static const char *models_of(const json_t *meta)
{
    return egpu_api_str(json_object_get(annotations_of(meta), EGPU_ANN_GPU_MODEL));
}

/* Remove the GPU names from one of a container's resource maps (the
 * marker EGPU_RES_DRA stays: set_marker writes it again). */
static void strip_names(json_t *map, bool nvidia)
{
    const char *key;
    json_t *val;
    void *tmp;

    if (!json_is_object(map))
        return;
    json_object_foreach_safe(map, tmp, key, val)
    {
        (void)val;
        if (egpu_api_res_asks_gpu(key) || egpu_api_compat_known(key, nvidia))
            (void)json_object_del(map, key); /* the key is there: cannot fail */
    }
}

/* Set the entry named name of the array arr[key] of obj (made when absent)
 * to entry (taken), replacing one of that name. */
static int set_named(json_t *obj, const char *key, const char *name, json_t *entry)
{
    json_t *arr = json_object_get(obj, key);
    size_t i;
    json_t *e;

    if (entry == NULL)
        return -ENOMEM;
    if (!json_is_array(arr)) {
        arr = json_array();
        if (arr == NULL || json_object_set_new(obj, key, arr) != 0) {
            json_decref(entry);
            return -ENOMEM;
        }
    }
    json_array_foreach(arr, i, e)
    {
        const char *n = egpu_api_str(json_object_get(e, "name"));

        if (n != NULL && strcmp(n, name) == 0)
            return json_array_set_new(arr, i, entry) == 0 ? 0 : -ENOMEM;
    }
    return json_array_append_new(arr, entry) == 0 ? 0 : -ENOMEM;
}

/* resources[kind][EGPU_RES_DRA] = "1", making the map if needed. */
static int set_marker(json_t *resources, const char *kind)
{
    json_t *map = json_object_get(resources, kind);

    if (!json_is_object(map)) {
        map = json_object();
        if (map == NULL || json_object_set_new(resources, kind, map) != 0)
            return -ENOMEM;
    }
    return json_object_set_new(map, EGPU_RES_DRA, json_string(MARKER)) != 0 ? -ENOMEM : 0;
}

/* A container's resources (an object) moved to pod claim pod_claim: its GPU
 * names out of requests and limits, the marker in, and resources.claims
 * entry ctr_claim (taken). Returns 0 or -ENOMEM. */
static int move_to_claim(json_t *res, bool nvidia, const char *pod_claim, json_t *ctr_claim)
{
    int rc;

    strip_names(json_object_get(res, "requests"), nvidia);
    strip_names(json_object_get(res, "limits"), nvidia);
    rc = set_marker(res, "requests");
    if (!rc)
        rc = set_marker(res, "limits");
    if (rc) {
        json_decref(ctr_claim);
        return rc;
    }
    return set_named(res, "claims", pod_claim, ctr_claim);
}

/* Is name a resourceClaimTemplateName of spec's resourceClaims? */
static bool names_template(const json_t *spec, const char *name)
{
    const json_t *rc = json_object_get(spec, "resourceClaims");
    size_t i;
    json_t *e;

    json_array_foreach(rc, i, e)
    {
        const char *t = egpu_api_str(json_object_get(e, "resourceClaimTemplateName"));

        if (t != NULL && strcmp(t, name) == 0)
            return true;
    }
    return false;
}

static void problem(struct egpu_api_problems *p, const char *fmt, ...) EGPU_PRINTF(2, 3);

static void problem(struct egpu_api_problems *p, const char *fmt, ...)
{
    char msg[EGPU_API_PROBLEM_MAX];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    egpu__webhook_problem_add(p, msg);
}

/* Container c (index i, name) asks ask: its claim. */
static int rewrite_one(json_t *spec, json_t *c, size_t i, const char *name,
                       const struct egpu_api_gpu_ask *ask, const char *models, bool nvidia,
                       json_t *claims, struct egpu_api_problems *p, struct egpu__webhook_verdict *v)
{
    char tmpl[EGPU_API_DRA_TEMPLATE_NAME_MAX], pod_claim[32];
    struct egpu_error err = {0};
    json_t *cs = NULL, *res;
    int rc;

    rc = egpu_api_dra_claim_spec(ask, models, &cs, &err);
    if (rc == 0)
        rc = egpu_api_dra_template_name(cs, tmpl, &err);
    if (rc == EGPU_ESYNTAX || rc == EGPU_ERANGE || rc == -EIO) {
        problem(p, "container \"%s\": %s", name, err.msg);
        json_decref(cs);
        return 0;
    }
    if (rc) {
        json_decref(cs);
        return rc;
    }
    snprintf(pod_claim, sizeof(pod_claim), EGPU_API_DRA_POD_CLAIM_PREFIX "%zu", i);
    if (json_object_set_new(claims, tmpl, cs) != 0)
        return -ENOMEM;
    res = json_object_get(c, "resources"); /* an object: egpu_api_container_gpu read it */
    rc = move_to_claim(res, nvidia, pod_claim,
                       json_pack("{s:s, s:s}", "name", pod_claim, "request", EGPU_API_DRA_REQUEST));
    if (!rc)
        rc = set_named(
            spec, "resourceClaims", pod_claim,
            json_pack("{s:s, s:s}", "name", pod_claim, "resourceClaimTemplateName", tmpl));
    if (!rc && ask->core_pct < 100)
        egpu__webhook_warn(v,
                           "container \"%s\": " EGPU_RES_GPU_CORE " %lld%s%lld MiB now come from "
                           "ResourceClaimTemplate %s (pod claim %s, request " EGPU_API_DRA_REQUEST
                           ")",
                           name, (long long)ask->core_pct, ask->has_mem ? " and gpu-memory " : "",
                           ask->has_mem ? (long long)ask->mem_mib : 0LL, tmpl, pod_claim);
    else if (!rc)
        egpu__webhook_warn(
            v,
            "container \"%s\": %lld whole card(s) now come from ResourceClaimTemplate %s "
            "(pod claim %s, request " EGPU_API_DRA_REQUEST ")",
            name, (long long)(ask->core_pct / 100), tmpl, pod_claim);
    return rc;
}

/* Is the entry named name of array arr exactly want? */
static bool has_entry(const json_t *arr, const char *name, const json_t *want)
{
    size_t i;
    json_t *e;

    json_array_foreach(arr, i, e)
    {
        const char *n = egpu_api_str(json_object_get(e, "name"));

        if (n != NULL && strcmp(n, name) == 0)
            return json_equal(e, want);
    }
    return false;
}

/* The entries a container i using ElasticGPUClaim claim gets: its pod claim
 * name into pod_claim (32 bytes), *ctr_claim its resources.claims entry and
 * *pod_entry its spec.resourceClaims one (new references). Returns 0,
 * -ENAMETOOLONG (the ResourceClaim's name) or -ENOMEM (nothing made). */
static int claim_entries(size_t i, const char *claim, char pod_claim[32], json_t **ctr_claim,
                         json_t **pod_entry)
{
    char rc_name[EGPU_K8S_NAME_MAX];

    *ctr_claim = *pod_entry = NULL;
    if (egpu_api_dra_object_name(claim, rc_name, sizeof(rc_name)) != 0)
        return -ENAMETOOLONG;
    snprintf(pod_claim, 32, EGPU_API_DRA_POD_CLAIM_PREFIX "%zu", i);
    *ctr_claim = json_pack("{s:s, s:s}", "name", pod_claim, "request", EGPU_API_DRA_REQUEST);
    *pod_entry = json_pack("{s:s, s:s}", "name", pod_claim, "resourceClaimName", rc_name);
    if (*ctr_claim == NULL || *pod_entry == NULL) {
        json_decref(*ctr_claim);
        json_decref(*pod_entry);
        *ctr_claim = *pod_entry = NULL;
        return -ENOMEM;
    }
    return 0;
}

bool egpu__webhook_dra_claim_done(const json_t *spec, size_t ctr, const char *claim)
{
    const json_t *c = json_array_get(json_object_get(spec, "containers"), ctr);
    json_t *ce, *pe;
    char pod_claim[32];
    bool done;

    if (claim_entries(ctr, claim, pod_claim, &ce, &pe) != 0)
        return false;
    done = has_entry(json_object_get(json_object_get(c, "resources"), "claims"), pod_claim, ce) &&
           has_entry(json_object_get(spec, "resourceClaims"), pod_claim, pe);
    json_decref(ce);
    json_decref(pe);
    return done;
}

/* Container c (index i, name) uses ElasticGPUClaim u->claim, whose ask
 * claims.c wrote into it: its claim's ResourceClaim instead. */
static int rewrite_claim(json_t *spec, json_t *c, size_t i, const char *name, bool nvidia,
                         const struct egpu__webhook_claim_use *u, struct egpu_api_problems *p,
                         struct egpu__webhook_verdict *v)
{
    char pod_claim[32];
    json_t *ce, *pe, *res;
    int rc = claim_entries(i, u->claim, pod_claim, &ce, &pe);

    if (rc == -ENAMETOOLONG) {
        problem(p,
                "container \"%s\" uses ElasticGPUClaim %.253s: with " EGPU_API_DRA_OBJECT_PREFIX
                " in front its name passes 253 characters, so egpu-controller --mode dra makes "
                "no ResourceClaim for it; allowed: a claim name of at most %zu characters",
                name, u->claim,
                (size_t)EGPU_K8S_NAME_MAX - 1 - (sizeof(EGPU_API_DRA_OBJECT_PREFIX) - 1));
        return 0;
    }
    if (rc)
        return rc;
    res = json_object_get(c, "resources"); /* an object: claims.c wrote into it */
    rc = move_to_claim(res, nvidia, pod_claim, ce);
    if (!rc)
        rc = set_named(spec, "resourceClaims", pod_claim, json_incref(pe));
    if (!rc)
        egpu__webhook_warn(
            v,
            "container \"%s\": the GPU of ElasticGPUClaim %s now comes from ResourceClaim "
            "%s (pod claim %s, request " EGPU_API_DRA_REQUEST ")",
            name, u->claim, egpu_api_str(json_object_get(pe, "resourceClaimName")), pod_claim);
    json_decref(pe);
    return rc;
}

/* The use of uses[0..n) for container i that is still to write, or NULL. */
static const struct egpu__webhook_claim_use *use_of(const struct egpu__webhook_claim_use *uses,
                                                    size_t n, size_t i)
{
    for (size_t k = 0; k < n; k++) {
        if (uses[k].ctr == i && !uses[k].done)
            return &uses[k];
    }
    return NULL;
}

int egpu__webhook_dra_rewrite(const struct egpu_webhook_config *cfg,
                              const struct egpu_api_facts *facts, bool nvidia, json_t *meta,
                              json_t *spec, const struct egpu__webhook_claim_use *uses,
                              size_t nuses, struct egpu_api_problems *p,
                              struct egpu__webhook_verdict *v)
{
    /* The cluster's facts and the operator's default memory of a share. */
    struct egpu_api_facts f = facts != NULL ? *facts : (struct egpu_api_facts){0};
    const char *models = models_of(meta), *key;
    json_t *claims, *old, *ann, *c, *val;
    json_t *ctrs = json_object_get(spec, "containers");
    size_t before = p->n, i;
    void *tmp;
    char *text;
    int rc = 0, n = 0;

    f.default_mem_per_core_mib = cfg->default_mem_per_core;
    if (!egpu_api_spec_wants_gpu(spec))
        return 0;
    if (egpu_api_pod_validate(spec, annotations_of(meta), &f, p) > 0)
        return 0;
    claims = json_object();
    if (claims == NULL)
        return -ENOMEM;
    json_array_foreach(ctrs, i, c)
    {
        const struct egpu__webhook_claim_use *u;
        struct egpu_api_gpu_ask ask;
        struct egpu_error err = {0};
        const char *name = egpu_api_str(json_object_get(c, "name"));

        if (name == NULL)
            name = "";
        if (egpu_api_container_gpu(c, name, true, &ask, &err) != 0 || ask.core_pct == 0)
            continue; /* validated above: no error left; no GPU asked */
        u = use_of(uses, nuses, i);
        if (u != NULL)
            rc = rewrite_claim(spec, c, i, name, nvidia, u, p, v);
        else
            rc = rewrite_one(spec, c, i, name, &ask, models, nvidia, claims, p, v);
        if (rc)
            break;
        n++;
    }
    if (rc || p->n > before) {
        json_decref(claims);
        return rc;
    }
    /* Keep what an earlier pass wrote for the claims the pod still names. */
    key = egpu_api_str(json_object_get(annotations_of(meta), EGPU_ANN_DRA_CLAIMS));
    old = key != NULL ? json_loads(key, 0, NULL) : NULL;
    if (json_is_object(old)) {
        json_object_foreach_safe(old, tmp, key, val)
        {
            if (json_object_get(claims, key) == NULL && names_template(spec, key) &&
                json_object_set(claims, key, val) != 0)
                rc = -ENOMEM;
        }
    }
    json_decref(old);
    if (!rc && json_object_size(claims) == 0) {
        /* Only ElasticGPUClaims: no template to list (a pod owner's own goes). */
        json_decref(claims);
        (void)json_object_del(json_object_get(meta, "annotations"), EGPU_ANN_DRA_CLAIMS);
        return n;
    }
    text = rc ? NULL : json_dumps(claims, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(claims);
    if (text == NULL)
        return -ENOMEM;
    ann = json_object_get(meta, "annotations");
    if (!json_is_object(ann)) {
        ann = json_object();
        if (ann == NULL || json_object_set_new(meta, "annotations", ann) != 0)
            rc = -ENOMEM;
    }
    if (!rc && json_object_set_new(ann, EGPU_ANN_DRA_CLAIMS, json_string(text)) != 0)
        rc = -ENOMEM;
    free(text); /* jansson's allocator */
    return rc ? rc : n;
}

/* ------------------------------------------------------------------------ */
/* /validate                                                                */

/* The ask spec (a claim spec from the annotation) was made for, read back:
 * 0, or -1 when it is not of a shape this file makes. */
static int ask_of(const json_t *spec, struct egpu_api_gpu_ask *ask)
{
    const json_t *ex = json_object_get(
        json_array_get(json_object_get(json_object_get(spec, "devices"), "requests"), 0),
        "exactly");
    const json_t *req = json_object_get(json_object_get(ex, "capacity"), "requests");
    const char *cls = egpu_api_str(json_object_get(ex, "deviceClassName"));
    const char *cores = egpu_api_str(json_object_get(req, EGPU_API_DRA_CAP_CORES));
    const char *mem = egpu_api_str(json_object_get(req, EGPU_API_DRA_CAP_MEMORY));
    json_int_t count = json_integer_value(json_object_get(ex, "count"));
    long long x;
    char tail[4];

    memset(ask, 0, sizeof(*ask));
    if (cls == NULL)
        return -1;
    if (strcmp(cls, EGPU_API_DRA_CLASS_WHOLE) == 0) {
        if (count < 1 || count > EGPU_API_DRA_COUNT_MAX)
            return -1;
        ask->core_pct = 100 * (int64_t)count;
        return 0;
    }
    if (strcmp(cls, EGPU_API_DRA_CLASS_SHARE) != 0 || cores == NULL ||
        sscanf(cores, "%lld%1s", &x, tail) != 1 || x < 1 || x > 99)
        return -1;
    ask->core_pct = x;
    if (mem != NULL) {
        if (sscanf(mem, "%lldMi%1s", &x, tail) != 1 || x < 1)
            return -1;
        ask->mem_mib = x;
        ask->has_mem = true;
    }
    return 0;
}

/* On a Pod CREATE: the annotation's text, as this file writes it. */
static void check_created(const struct egpu_webhook_config *cfg, const json_t *obj,
                          const char *text, struct egpu_api_problems *p)
{
    const json_t *meta = json_object_get(obj, "metadata"), *spec = json_object_get(obj, "spec");
    const char *models = models_of(meta), *key;
    json_t *claims, *val;

    if (cfg->mode != EGPU_WEBHOOK_MODE_DRA) {
        problem(p, "annotation " EGPU_ANN_DRA_CLAIMS " is written only by egpu-webhook in DRA mode "
                   "(--mode dra); a pod may not set it");
        return;
    }
    claims = json_loads(text, 0, NULL);
    if (!json_is_object(claims)) {
        problem(p, "annotation " EGPU_ANN_DRA_CLAIMS " is not a JSON object; allowed: what "
                   "egpu-webhook writes, {template name: claim spec}");
        json_decref(claims);
        return;
    }
    json_object_foreach(claims, key, val)
    {
        char want[EGPU_API_DRA_TEMPLATE_NAME_MAX];
        struct egpu_api_gpu_ask ask;
        struct egpu_error err = {0};
        json_t *made = NULL;
        bool ok;

        ok = ask_of(val, &ask) == 0 && egpu_api_dra_claim_spec(&ask, models, &made, &err) == 0 &&
             json_equal(made, val) && egpu_api_dra_template_name(made, want, &err) == 0 &&
             strcmp(want, key) == 0;
        json_decref(made);
        if (!ok)
            problem(p,
                    "annotation " EGPU_ANN_DRA_CLAIMS " entry \"%.64s\" is not a claim spec "
                    "egpu-webhook makes under that name; allowed: what egpu-webhook writes",
                    key);
        else if (!names_template(spec, key))
            problem(p,
                    "annotation " EGPU_ANN_DRA_CLAIMS " names template \"%s\", which no "
                    "spec.resourceClaims entry of the pod uses",
                    key);
    }
    json_decref(claims);
}

void egpu__webhook_dra_guard(const struct egpu_webhook_config *cfg,
                             const struct egpu__webhook_review *rv, struct egpu_api_problems *p)
{
    const json_t *now = json_object_get(annotations_of(json_object_get(rv->object, "metadata")),
                                        EGPU_ANN_DRA_CLAIMS);
    const json_t *before = json_object_get(
        annotations_of(json_object_get(rv->old_object, "metadata")), EGPU_ANN_DRA_CLAIMS);
    const char *text = egpu_api_str(now);

    if (rv->op == EGPU_WEBHOOK_OP_UPDATE) {
        char user[128];

        if ((now == NULL && before == NULL) ||
            (now != NULL && before != NULL && json_equal(now, before)))
            return;
        egpu__webhook_printable(user, sizeof(user), rv->username);
        problem(p,
                "annotation " EGPU_ANN_DRA_CLAIMS " names the pod's ResourceClaimTemplates and is "
                "fixed when the pod is created; user \"%s\" may not %s it",
                user,
                before == NULL ? "add"
                : now == NULL  ? "remove"
                               : "change");
        return;
    }
    if (now == NULL)
        return;
    if (text == NULL) {
        problem(p, "annotation " EGPU_ANN_DRA_CLAIMS " is not a string");
        return;
    }
    check_created(cfg, rv->object, text, p);
}

/* The spec.resourceClaims entry of spec named name, or NULL. */
static const json_t *pod_claim_entry(const json_t *spec, const char *name)
{
    const json_t *e;
    size_t k;

    json_array_foreach(json_object_get(spec, "resourceClaims"), k, e)
    {
        const char *n = egpu_api_str(json_object_get(e, "name"));

        if (n != NULL && strcmp(n, name) == 0)
            return e;
    }
    return NULL;
}

/* Does container i of spec (c, named name) have what
 * egpu__webhook_dra_rewrite writes beside the marker: resources.claims
 * {name: egpu-<i>, request: gpu} and spec.resourceClaims egpu-<i> naming
 * either a ResourceClaimTemplate that templates (the pod's dra-claims
 * annotation, decoded; may be NULL) lists, or the ResourceClaim of the
 * ElasticGPUClaim that annotation egpuc.elasticgpu.io/<name> of ann names?
 * -ENOMEM when that cannot be told. */
static int has_made_claim(const json_t *spec, const json_t *c, size_t i, const char *name,
                          const json_t *ann, const json_t *templates, bool *out)
{
    char pod_claim[32], key[EGPU_CONTAINER_NAME_MAX + sizeof(EGPU_ANN_CLAIM_PREFIX)];
    const json_t *claims = json_object_get(json_object_get(c, "resources"), "claims");
    const json_t *pe;
    const char *t, *claim = NULL;
    json_t *ce, *want;

    *out = false;
    snprintf(pod_claim, sizeof(pod_claim), EGPU_API_DRA_POD_CLAIM_PREFIX "%zu", i);
    pe = pod_claim_entry(spec, pod_claim);
    t = egpu_api_str(json_object_get(pe, "resourceClaimTemplateName"));
    if (t != NULL) {
        ce = json_pack("{s:s, s:s}", "name", pod_claim, "request", EGPU_API_DRA_REQUEST);
        want = json_pack("{s:s, s:s}", "name", pod_claim, "resourceClaimTemplateName", t);
        if (ce == NULL || want == NULL) {
            json_decref(ce);
            json_decref(want);
            return -ENOMEM;
        }
        *out = json_object_get(templates, t) != NULL && has_entry(claims, pod_claim, ce) &&
               json_equal(pe, want);
        json_decref(ce);
        json_decref(want);
        return 0;
    }
    if (strlen(name) <= EGPU_CONTAINER_NAME_MAX) {
        snprintf(key, sizeof(key), EGPU_ANN_CLAIM_PREFIX "%s", name);
        claim = egpu_api_str(json_object_get(ann, key));
    }
    if (pe == NULL || claim == NULL)
        return 0;
    switch (claim_entries(i, claim, pod_claim, &ce, &want)) {
    case 0:
        break;
    case -ENAMETOOLONG:
        return 0; /* no ResourceClaim for it: the pod cannot name it */
    default:
        return -ENOMEM;
    }
    *out = has_entry(claims, pod_claim, ce) && json_equal(pe, want);
    json_decref(ce);
    json_decref(want);
    return 0;
}

/* Is resources[kind][EGPU_RES_DRA] MARKER (a string, or the integer 1)? */
static bool marker_is(const json_t *res, const char *kind)
{
    const json_t *v = json_object_get(json_object_get(res, kind), EGPU_RES_DRA);
    const char *s = egpu_api_str(v);

    return (s != NULL && strcmp(s, MARKER) == 0) ||
           (json_is_integer(v) && json_integer_value(v) == 1);
}

/* Does resources name the marker in requests or limits? */
static bool has_marker(const json_t *res)
{
    return json_object_get(json_object_get(res, "requests"), EGPU_RES_DRA) != NULL ||
           json_object_get(json_object_get(res, "limits"), EGPU_RES_DRA) != NULL;
}

int egpu__webhook_dra_marker_check(const struct egpu_webhook_config *cfg, const json_t *spec,
                                   const json_t *annotations, struct egpu_api_problems *p)
{
    static const char *const lists[] = {"containers", "initContainers"};
    const char *text = egpu_api_str(json_object_get(annotations, EGPU_ANN_DRA_CLAIMS));
    json_t *templates = NULL;
    int rc = 0;

    for (size_t l = 0; l < 2 && !rc; l++) {
        const json_t *c;
        size_t i;

        json_array_foreach(json_object_get(spec, lists[l]), i, c)
        {
            const json_t *res = json_object_get(c, "resources");
            const char *name = egpu_api_str(json_object_get(c, "name"));
            bool made = false;

            if (!has_marker(res))
                continue;
            if (name == NULL)
                name = "";
            if (l == 1) {
                problem(p,
                        "init container \"%.63s\": " EGPU_RES_DRA " marks a container whose GPU "
                        "egpu-webhook --mode dra moved to a ResourceClaim; allowed: none on an "
                        "init container",
                        name);
                continue;
            }
            if (cfg->mode != EGPU_WEBHOOK_MODE_DRA) {
                problem(p,
                        "container \"%.63s\": " EGPU_RES_DRA " is written only by egpu-webhook "
                        "in DRA mode (--mode dra), beside the ResourceClaim it makes for a "
                        "container's GPU; allowed: no " EGPU_RES_DRA " (ask " EGPU_RES_GPU_CORE
                        " and gpu-memory)",
                        name);
                continue;
            }
            if (text != NULL && templates == NULL)
                templates = json_loads(text, 0, NULL); /* NULL: lists none */
            rc = has_made_claim(spec, c, i, name, annotations, templates, &made);
            if (rc)
                break;
            if (!made)
                problem(p,
                        "container \"%.63s\": " EGPU_RES_DRA " marks a container whose GPU "
                        "egpu-webhook moved to a ResourceClaim, and this one has none "
                        "(resources.claims " EGPU_API_DRA_POD_CLAIM_PREFIX "%zu, and the pod's "
                        "resourceClaims entry of that name naming a template of "
                        "annotation " EGPU_ANN_DRA_CLAIMS
                        " or the ResourceClaim of its ElasticGPUClaim); allowed: no " EGPU_RES_DRA
                        " (ask " EGPU_RES_GPU_CORE " and gpu-memory: egpu-webhook adds it)",
                        name, i);
            else if (!marker_is(res, "requests") || !marker_is(res, "limits"))
                problem(p,
                        "container \"%.63s\": " EGPU_RES_DRA " must be \"" MARKER "\" in "
                        "resources.requests and resources.limits, as egpu-webhook writes it",
                        name);
        }
    }
    json_decref(templates);
    return rc;
}
