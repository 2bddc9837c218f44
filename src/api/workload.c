/* api/workload.c - FGD's target workload pinned by the operator: the
 * TargetWorkload document egpu-sim writes and egpu-scheduler
 * --target-workload reads (the format is in egpu/api.h). Strict: every
 * field is checked and any other key refused, so a typo does not silently
 * leave a typical pod out of the fragmentation measure. No I/O. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "egpu/api.h"

#define KIND "TargetWorkload"

/* An integer field of entry i in lo..hi; absent is 0 when optional. */
static int int_field(const json_t *o, const char *key, size_t i, int64_t lo, int64_t hi,
                     bool required, int64_t *out, struct egpu_error *err)
{
    const json_t *v = json_object_get(o, key);

    *out = 0;
    if (v == NULL && !required)
        return 0;
    if (v == NULL)
        return egpu_error_set(err, EGPU_ESYNTAX,
                              "typicalPods[%zu].%s: missing (an integer %lld..%lld)", i, key,
                              (long long)lo, (long long)hi);
    if (!json_is_integer(v))
        return egpu_error_set(err, EGPU_ESYNTAX,
                              "typicalPods[%zu].%s: must be an integer %lld..%lld", i, key,
                              (long long)lo, (long long)hi);
    *out = json_integer_value(v);
    if (*out < lo || *out > hi)
        return egpu_error_set(err, EGPU_ERANGE, "typicalPods[%zu].%s: %lld is outside %lld..%lld",
                              i, key, (long long)*out, (long long)lo, (long long)hi);
    return 0;
}

static int typical_pod(const json_t *o, size_t i, struct egpu_api_typical_pod *p,
                       struct egpu_error *err)
{
    static const char *const keys[] = {"cpuMilli", "gpuMilli", "gpus", "models", "weight"};
    const json_t *v;
    const char *key, *models;
    int64_t cpu, milli, gpus;
    int rc;

    if (!json_is_object(o))
        return egpu_error_set(err, EGPU_ESYNTAX, "typicalPods[%zu]: must be an object", i);
    json_object_foreach((json_t *)o, key, v)
    {
        size_t k = 0;

        while (k < sizeof(keys) / sizeof(keys[0]) && strcmp(keys[k], key) != 0)
            k++;
        if (k == sizeof(keys) / sizeof(keys[0]))
            return egpu_error_set(err, EGPU_ESYNTAX,
                                  "typicalPods[%zu] has \"%.64s\"; allowed: cpuMilli, gpuMilli, "
                                  "gpus, models, weight",
                                  i, key);
    }
    rc = int_field(o, "cpuMilli", i, 0, 1000000000, false, &cpu, err);
    if (rc == 0)
        rc = int_field(o, "gpuMilli", i, 0, 1000, false, &milli, err);
    if (rc == 0)
        rc = int_field(o, "gpus", i, 0, EGPU_API_WORKLOAD_GPUS_MAX, false, &gpus, err);
    if (rc)
        return rc;
    if ((milli == 0) != (gpus == 0))
        return egpu_error_set(err, EGPU_ERANGE,
                              "typicalPods[%zu]: gpuMilli %lld with gpus %lld: both 0 (no GPU) "
                              "or both above 0",
                              i, (long long)milli, (long long)gpus);
    if (gpus > 1 && milli != 1000)
        return egpu_error_set(
            err, EGPU_ERANGE,
            "typicalPods[%zu].gpus: %lld whole cards need gpuMilli 1000, not %lld "
            "(a share is one card)",
            i, (long long)gpus, (long long)milli);
    v = json_object_get(o, "models");
    models = v != NULL ? egpu_api_str(v) : "";
    if (models == NULL || strlen(models) >= sizeof(p->models))
        return egpu_error_set(err, EGPU_ESYNTAX,
                              "typicalPods[%zu].models: must be a string of GPU model names "
                              "separated by '|', at most %d bytes",
                              i, EGPU_API_WORKLOAD_MODELS_MAX - 1);
    v = json_object_get(o, "weight");
    if (v == NULL || !json_is_number(v))
        return egpu_error_set(err, EGPU_ESYNTAX, "typicalPods[%zu].weight: %s (a number >= 0)", i,
                              v == NULL ? "missing" : "not a number");
    if (!isfinite(json_number_value(v)) || json_number_value(v) < 0)
        return egpu_error_set(err, EGPU_ERANGE, "typicalPods[%zu].weight: %g is below 0", i,
                              json_number_value(v));
    p->cpu_milli = cpu;
    p->gpu_milli = (uint32_t)milli;
    p->gpus = (uint32_t)gpus;
    memcpy(p->models, models, strlen(models) + 1);
    p->weight = json_number_value(v);
    return 0;
}

int egpu_api_workload_decode(const json_t *doc, struct egpu_api_workload *out,
                             struct egpu_error *err)
{
    const char *av = egpu_api_str(json_object_get(doc, "apiVersion"));
    const char *kind = egpu_api_str(json_object_get(doc, "kind"));
    const json_t *list = json_object_get(doc, "typicalPods"), *v;
    const char *key;
    double total = 0;
    size_t i;
    int rc = 0;

    memset(out, 0, sizeof(*out));
    if (!json_is_object(doc))
        return egpu_error_set(err, EGPU_ESYNTAX, "TargetWorkload: must be a JSON object");
    json_object_foreach((json_t *)doc, key, v)
    {
        if (strcmp(key, "apiVersion") != 0 && strcmp(key, "kind") != 0 &&
            strcmp(key, "typicalPods") != 0)
            return egpu_error_set(err, EGPU_ESYNTAX,
                                  "TargetWorkload has \"%.64s\"; allowed: apiVersion, kind, "
                                  "typicalPods",
                                  key);
    }
    if (av == NULL || strcmp(av, EGPU_API_VERSION) != 0)
        return egpu_error_set(err, EGPU_ESYNTAX, "apiVersion: must be \"" EGPU_API_VERSION "\"");
    if (kind == NULL || strcmp(kind, KIND) != 0)
        return egpu_error_set(err, EGPU_ESYNTAX, "kind: must be \"" KIND "\"");
    if (!json_is_array(list) || json_array_size(list) == 0 ||
        json_array_size(list) > EGPU_API_WORKLOAD_PODS_MAX)
        return egpu_error_set(err, json_is_array(list) ? EGPU_ERANGE : EGPU_ESYNTAX,
                              "typicalPods: must be an array of 1..%d typical pods",
                              EGPU_API_WORKLOAD_PODS_MAX);
    out->pods = egpu_calloc(json_array_size(list), sizeof(*out->pods));
    if (out->pods == NULL)
        return egpu_error_set(err, -ENOMEM, "TargetWorkload: out of memory");
    json_array_foreach(list, i, v)
    {
        rc = typical_pod(v, i, &out->pods[i], err);
        if (rc)
            break;
        total += out->pods[i].weight;
    }
    if (rc == 0 && !(total > 0))
        rc = egpu_error_set(err, EGPU_ERANGE,
                            "typicalPods: every weight is 0; at least one must "
                            "be above 0");
    if (rc) {
        egpu_api_workload_free(out);
        return rc;
    }
    out->n = json_array_size(list);
    return 0;
}

json_t *egpu_api_workload_encode(const struct egpu_api_workload *w)
{
    json_t *list = json_array(), *doc;

    for (size_t i = 0; list != NULL && i < w->n; i++) {
        const struct egpu_api_typical_pod *p = &w->pods[i];
        json_t *o =
            json_pack("{s:I,s:I,s:I,s:f}", "cpuMilli", (json_int_t)p->cpu_milli, "gpuMilli",
                      (json_int_t)p->gpu_milli, "gpus", (json_int_t)p->gpus, "weight", p->weight);

        if (o != NULL && p->models[0] != '\0' &&
            json_object_set_new(o, "models", json_string(p->models)) != 0) {
            json_decref(o);
            o = NULL;
        }
        if (o == NULL || json_array_append_new(list, o) != 0) {
            json_decref(list);
            return NULL;
        }
    }
    if (list == NULL)
        return NULL;
    doc = json_pack("{s:s,s:s,s:o}", "apiVersion", EGPU_API_VERSION, "kind", KIND, "typicalPods",
                    list);
    return doc;
}

void egpu_api_workload_free(struct egpu_api_workload *w)
{
    if (w == NULL)
        return;
    egpu_free(w->pods);
    w->pods = NULL;
    w->n = 0;
}
