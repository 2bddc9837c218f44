/* controller/dra_spec.c - the pure parts of the DRA-mode template
 * reconciler (dra.c): decoding a pod's elasticgpu.io/dra-claims annotation as
 * hostile input, the templates a pod names, and whether a stored
 * ResourceClaimTemplate's spec says what the controller would make, across
 * the API server's defaulting and quantity canonicalization
 * (../shared/k8s-wire/dra/dra_notes.md sections 5 and 7). No I/O.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "egpu/controller.h"

int egpu_controller_dra_entries(const char *text, json_t **out, struct egpu_error *err)
{
    json_error_t jerr;
    json_t *obj, *v;
    const char *name;

    if (text == NULL || strlen(text) > EGPU_CONTROLLER_DRA_TEXT_MAX)
        return egpu_error_set(err, EGPU_ESYNTAX,
                              "annotation %s: longer than %d bytes; allowed: a JSON object of "
                              "template names to specs",
                              "elasticgpu.io/dra-claims", EGPU_CONTROLLER_DRA_TEXT_MAX);
    obj = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
    if (obj == NULL || !json_is_object(obj)) {
        json_decref(obj);
        return egpu_error_set(err, EGPU_ESYNTAX,
                              "annotation %s: not a JSON object of template names to specs",
                              "elasticgpu.io/dra-claims");
    }
    if (json_object_size(obj) > EGPU_CONTROLLER_DRA_ENTRIES_MAX) {
        size_t n = json_object_size(obj);

        json_decref(obj);
        return egpu_error_set(err, EGPU_ERANGE, "annotation %s: %zu templates; allowed: at most %d",
                              "elasticgpu.io/dra-claims", n, EGPU_CONTROLLER_DRA_ENTRIES_MAX);
    }
    json_object_foreach(obj, name, v)
    {
        size_t len = strlen(name);

        if (len == 0 || len >= EGPU_K8S_NAME_MAX || !json_is_object(v)) {
            /* the message first: name is obj's key */
            int rc = egpu_error_set(err, EGPU_ESYNTAX,
                                    "annotation %s: entry \"%.64s\": allowed: a name of 1..253 "
                                    "characters mapped to a template spec object",
                                    "elasticgpu.io/dra-claims", name);

            json_decref(obj);
            return rc;
        }
    }
    *out = obj;
    return 0;
}

int egpu_controller_dra_ask_of(const json_t *spec, struct egpu_api_gpu_ask *ask)
{
    const json_t *reqs = json_object_get(json_object_get(spec, "devices"), "requests");
    const json_t *r = json_array_get(reqs, 0), *ex = json_object_get(r, "exactly");
    const json_t *cap = json_object_get(json_object_get(ex, "capacity"), "requests");
    const char *cls = egpu_api_str(json_object_get(ex, "deviceClassName"));
    const char *name = egpu_api_str(json_object_get(r, "name"));
    const char *cores = egpu_api_str(json_object_get(cap, EGPU_API_DRA_CAP_CORES));
    const char *mem = egpu_api_str(json_object_get(cap, EGPU_API_DRA_CAP_MEMORY));
    const json_t *count = json_object_get(ex, "count");
    struct egpu_quantity q;
    int64_t v;

    memset(ask, 0, sizeof(*ask));
    if (json_array_size(reqs) != 1 || cls == NULL || name == NULL ||
        strcmp(name, EGPU_API_DRA_REQUEST) != 0)
        return EGPU_ESYNTAX;
    if (strcmp(cls, EGPU_API_DRA_CLASS_WHOLE) == 0) {
        if (!json_is_integer(count) || json_integer_value(count) < 1 ||
            json_integer_value(count) > EGPU_API_DRA_COUNT_MAX)
            return EGPU_ESYNTAX;
        ask->core_pct = 100 * json_integer_value(count);
        return 0;
    }
    if (strcmp(cls, EGPU_API_DRA_CLASS_SHARE) != 0 || cores == NULL ||
        egpu_quantity_parse(cores, &q, NULL) != 0 ||
        egpu_quantity_to_units(&q, 0, 0, EGPU_ROUND_EXACT, &v) != 0 || v < 1 || v > 99)
        return EGPU_ESYNTAX;
    ask->core_pct = v;
    if (mem != NULL) {
        if (egpu_quantity_parse(mem, &q, NULL) != 0 || q.negative ||
            egpu_quantity_to_units(&q, 0, 20, EGPU_ROUND_EXACT, &v) != 0 || v < 1)
            return EGPU_ESYNTAX;
        ask->mem_mib = v;
        ask->has_mem = true;
    }
    return 0;
}

json_t *egpu_controller_dra_pod_templates(const json_t *pod)
{
    const json_t *rc, *claims = json_object_get(json_object_get(pod, "spec"), "resourceClaims");
    json_t *out = json_object();
    size_t i;

    if (out == NULL)
        return NULL;
    json_array_foreach(claims, i, rc)
    {
        const char *t = egpu_api_str(json_object_get(rc, "resourceClaimTemplateName"));

        if (t != NULL && t[0] != '\0' && json_object_set_new(out, t, json_true()) != 0) {
            json_decref(out);
            return NULL;
        }
    }
    return out;
}

/* null, "", [], or an object whose every value is empty ({"creationTimestamp":
 * null}, the metadata the API server returns for a template spec without
 * one). */
static bool empty(const json_t *v)
{
    const char *k;
    const json_t *x;

    if (json_is_object(v)) {
        json_object_foreach((json_t *)v, k, x)
        {
            if (!json_is_null(x) && !(json_is_string(x) && json_string_length(x) == 0) &&
                !(json_is_array(x) && json_array_size(x) == 0) &&
                !(json_is_object(x) && json_object_size(x) == 0))
                return false;
        }
        return true;
    }
    return v == NULL || json_is_null(v) || (json_is_string(v) && json_string_length(v) == 0) ||
           (json_is_array(v) && json_array_size(v) == 0);
}

/* What the API server fills in when a field is absent (ExactDeviceRequest,
 * DeviceSubRequest, DeviceToleration of resource.k8s.io/v1). */
static bool defaulted(const char *key, const json_t *v)
{
    if (strcmp(key, "allocationMode") == 0)
        return json_is_string(v) && strcmp(json_string_value(v), "ExactCount") == 0;
    if (strcmp(key, "count") == 0)
        return json_is_integer(v) && json_integer_value(v) == 1;
    if (strcmp(key, "operator") == 0)
        return json_is_string(v) && strcmp(json_string_value(v), "Equal") == 0;
    return false;
}

/* Two quantities of equal value, both in thousandths (exact), or equal text. */
static bool same_quantity(const char *a, const char *b)
{
    struct egpu_quantity qa, qb;
    int64_t va, vb;

    if (strcmp(a, b) == 0)
        return true;
    if (egpu_quantity_parse(a, &qa, NULL) != 0 || egpu_quantity_parse(b, &qb, NULL) != 0)
        return false;
    if (egpu_quantity_to_units(&qa, -3, 0, EGPU_ROUND_EXACT, &va) != 0 ||
        egpu_quantity_to_units(&qb, -3, 0, EGPU_ROUND_EXACT, &vb) != 0)
        return false;
    return va == vb;
}

static bool same(const json_t *want, const json_t *have, bool quantities, int depth)
{
    if (depth > 32)
        return false;
    if (want == NULL || have == NULL)
        return want == have;
    if (json_is_object(want) && json_is_object(have)) {
        const char *k;
        const json_t *v;

        json_object_foreach((json_t *)want, k, v)
        {
            const json_t *h = json_object_get(have, k);

            if (h == NULL ? !(empty(v) || defaulted(k, v))
                          : !same(v, h, quantities || strcmp(k, "capacity") == 0, depth + 1))
                return false;
        }
        json_object_foreach((json_t *)have, k, v)
        {
            if (json_object_get(want, k) == NULL && !empty(v) && !defaulted(k, v))
                return false;
        }
        return true;
    }
    if (json_is_array(want) && json_is_array(have)) {
        if (json_array_size(want) != json_array_size(have))
            return false;
        for (size_t i = 0; i < json_array_size(want); i++) {
            if (!same(json_array_get(want, i), json_array_get(have, i), quantities, depth + 1))
                return false;
        }
        return true;
    }
    if (quantities && json_is_string(want) && json_is_string(have))
        return same_quantity(json_string_value(want), json_string_value(have));
    return json_equal((json_t *)want, (json_t *)have);
}

bool egpu_controller_dra_spec_same(const json_t *want, const json_t *have)
{
    return same(want, have, false, 0);
}

/* models "A|B" as "A|NVIDIA A|B|NVIDIA B" (a model already "NVIDIA ..."
 * once), egpu_malloc'd; NULL when out of memory. */
static char *with_vendor(const char *models)
{
    static const char vendor[] = "NVIDIA ";
    size_t n = 1, len = strlen(models);
    const char *p = models;
    char *out, *w;

    for (const char *q = models; *q; q++)
        n += *q == '|';
    out = egpu_malloc(2 * len + n * (sizeof(vendor) + 1) + 1);
    if (out == NULL)
        return NULL;
    w = out;
    for (;;) {
        const char *bar = strchr(p, '|');
        size_t m = bar != NULL ? (size_t)(bar - p) : strlen(p);

        if (w != out)
            *w++ = '|';
        memcpy(w, p, m);
        w += m;
        if (m > 0 && strncmp(p, vendor, sizeof(vendor) - 1) != 0) {
            *w++ = '|';
            memcpy(w, vendor, sizeof(vendor) - 1);
            w += sizeof(vendor) - 1;
            memcpy(w, p, m);
            w += m;
        }
        if (bar == NULL)
            break;
        p = bar + 1;
    }
    *w = '\0';
    return out;
}

int egpu_controller_dra_device_class(const struct egpu_api_class *cls, json_t **out,
                                     struct egpu_error *err)
{
    char name[EGPU_K8S_NAME_MAX], *driver = NULL, *models = NULL, *expr = NULL;
    char drv[128];
    json_t *sel, *obj;
    int rc;

    rc = egpu_api_dra_object_name(cls->meta.name, name, sizeof(name));
    if (rc)
        return egpu_error_set(err, rc,
                              "ElasticGPUClass %.64s: DeviceClass %s%.64s... longer than 253 "
                              "characters",
                              cls->meta.name, EGPU_API_DRA_OBJECT_PREFIX, cls->meta.name);
    rc = egpu_api_cel_quote(EGPU_API_DRA_DRIVER, strlen(EGPU_API_DRA_DRIVER), &driver, err);
    if (rc)
        return rc;
    snprintf(drv, sizeof(drv), "device.driver == %s", driver);
    egpu_free(driver);
    sel = json_pack("[{s:{s:s}}]", "cel", "expression", drv);
    if (sel == NULL)
        return -ENOMEM;
    if (cls->models[0] != '\0') {
        models = with_vendor(cls->models);
        rc = models == NULL ? -ENOMEM : egpu_api_dra_model_selector(models, &expr, err);
        egpu_free(models);
        if (rc) {
            json_decref(sel);
            if (rc == EGPU_ERANGE || rc == EGPU_ESYNTAX) {
                char why[EGPU_ERRMSG_MAX];

                snprintf(why, sizeof(why), "%s", err != NULL ? err->msg : "");
                return egpu_error_set(err, rc, "ElasticGPUClass %s parameters.models: %s",
                                      cls->meta.name, why);
            }
            return rc;
        }
        rc = json_array_append_new(sel, json_pack("{s:{s:s}}", "cel", "expression", expr));
        egpu_free(expr);
        if (rc) {
            json_decref(sel);
            return -ENOMEM;
        }
    }
    obj = json_pack("{s:s, s:s, s:{s:s, s:{s:s}, s:[{s:s, s:s, s:s, s:s, s:b}]}, s:{s:o}}",
                    "apiVersion", "resource.k8s.io/v1", "kind", "DeviceClass", "metadata", "name",
                    name, "labels", EGPU_CONTROLLER_MANAGED_BY_KEY,
                    EGPU_CONTROLLER_MANAGED_BY_VALUE, "ownerReferences", "apiVersion",
                    EGPU_API_VERSION, "kind", EGPU_KIND_ELASTICGPUCLASS, "name", cls->meta.name,
                    "uid", cls->meta.uid, "controller", 1, "spec", "selectors", sel);
    if (obj == NULL)
        return -ENOMEM;
    *out = obj;
    return 0;
}

int egpu_controller_dra_claim_object(const struct egpu_api_claim *cl,
                                     const struct egpu_api_class *cls, json_t **out,
                                     struct egpu_error *err)
{
    struct egpu_api_gpu_ask ask = {
        .core_pct = cl->core_pct, .mem_mib = cl->mem_mib, .has_mem = cl->has_mem};
    char name[EGPU_K8S_NAME_MAX], dclass[EGPU_K8S_NAME_MAX];
    bool share = cl->core_pct >= 1 && cl->core_pct <= 99;
    json_t *spec = NULL, *req, *obj;
    int rc;

    if (cl->core_pct == 0)
        return egpu_error_set(err, EGPU_ERANGE,
                              "asks elasticgpu.io/gpu-tflops; allowed in DRA mode: gpu-core "
                              "(and gpu-memory), the capacity the allocator counts");
    if (share != (cls->provisioner == EGPU_API_PROVISIONER_GPUSHARE))
        return egpu_error_set(err, EGPU_ERANGE, "asks %s, but class %s provisions %s",
                              share ? "a share of one card" : "whole cards", cls->meta.name,
                              share ? "whole cards" : "shares of one card");
    if (egpu_api_dra_object_name(cl->meta.name, name, sizeof(name)) != 0 ||
        egpu_api_dra_object_name(cls->meta.name, dclass, sizeof(dclass)) != 0)
        return egpu_error_set(err, EGPU_ERANGE,
                              "the claim's or its class's name with %s in front is longer "
                              "than 253 characters",
                              EGPU_API_DRA_OBJECT_PREFIX);
    rc = egpu_api_dra_claim_spec(&ask, NULL, &spec, err);
    if (rc)
        return rc;
    req = json_object_get(
        json_array_get(json_object_get(json_object_get(spec, "devices"), "requests"), 0),
        "exactly");
    if (req == NULL || json_object_set_new(req, "deviceClassName", json_string(dclass)) != 0) {
        json_decref(spec);
        return -ENOMEM;
    }
    obj = json_pack("{s:s, s:s, s:{s:s, s:s, s:{s:s}, s:[{s:s, s:s, s:s, s:s, s:b}]}, s:o}",
                    "apiVersion", "resource.k8s.io/v1", "kind", "ResourceClaim", "metadata", "name",
                    name, "namespace", cl->meta.ns, "labels", EGPU_CONTROLLER_MANAGED_BY_KEY,
                    EGPU_CONTROLLER_MANAGED_BY_VALUE, "ownerReferences", "apiVersion",
                    EGPU_API_VERSION, "kind", EGPU_KIND_ELASTICGPUCLAIM, "name", cl->meta.name,
                    "uid", cl->meta.uid, "controller", 1, "spec", spec);
    if (obj == NULL)
        return -ENOMEM;
    *out = obj;
    return 0;
}

static void copy_str(char *dst, size_t len, const json_t *v)
{
    const char *s = egpu_api_str(v);

    if (s != NULL && strlen(s) < len)
        memcpy(dst, s, strlen(s) + 1);
}

static int64_t quantity_in(const json_t *v, int unit_bin)
{
    struct egpu_quantity q;
    int64_t out = 0;

    if (!json_is_string(v) || egpu_quantity_parse(json_string_value(v), &q, NULL) != 0 ||
        q.negative || egpu_quantity_to_units(&q, 0, unit_bin, EGPU_ROUND_UP, &out) != 0)
        return 0;
    return out;
}

void egpu_controller_dra_allocation(const json_t *rc, struct egpu_controller_dra_alloc *out)
{
    const json_t *alloc = json_object_get(json_object_get(rc, "status"), "allocation");
    const json_t *r, *term, *f;
    size_t i, j, k;

    memset(out, 0, sizeof(*out));
    json_array_foreach(json_object_get(json_object_get(alloc, "devices"), "results"), i, r)
    {
        const char *drv = egpu_api_str(json_object_get(r, "driver"));
        const json_t *cc = json_object_get(r, "consumedCapacity");

        if (drv == NULL || strcmp(drv, EGPU_API_DRA_DRIVER) != 0)
            continue;
        out->allocated = true;
        copy_str(out->pool, sizeof(out->pool), json_object_get(r, "pool"));
        copy_str(out->device, sizeof(out->device), json_object_get(r, "device"));
        out->cores = quantity_in(json_object_get(cc, EGPU_API_DRA_CAP_CORES), 0);
        out->mem_mib = quantity_in(json_object_get(cc, EGPU_API_DRA_CAP_MEMORY), 20);
        break;
    }
    json_array_foreach(json_object_get(json_object_get(alloc, "nodeSelector"), "nodeSelectorTerms"),
                       i, term)
    {
        json_array_foreach(json_object_get(term, "matchFields"), j, f)
        {
            const char *key = egpu_api_str(json_object_get(f, "key"));
            const char *op = egpu_api_str(json_object_get(f, "operator"));
            const json_t *vals = json_object_get(f, "values");

            if (key == NULL || op == NULL || strcmp(key, "metadata.name") != 0 ||
                strcmp(op, "In") != 0 || json_array_size(vals) != 1)
                continue;
            k = 0;
            copy_str(out->node, sizeof(out->node), json_array_get(vals, k));
            return;
        }
    }
}
