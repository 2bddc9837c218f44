/* tests/unit/test_api_workload.c - the TargetWorkload document (src/api/
 * workload.c): one table row per rule with its exact message and code, a
 * good document read into its typical pods, and every good document encoded
 * and read back to the same typical pods.
 *
 * Documents are written with ' for " (tu_json() swaps them). */
#include "testutil.h"
#include "testjson.h"

#include <errno.h>
#include <jansson.h>
#include <stdint.h>

#include "egpu/api.h"

#define HEAD      "{'apiVersion': 'elasticgpu.io/v1alpha1', 'kind': 'TargetWorkload', "
#define PODS(...) HEAD "'typicalPods': [" __VA_ARGS__ "]}"

static void test_rules(void **state)
{
    static const struct {
        const char *doc;
        int code;
        const char *msg;
    } rows[] = {
        {"[]", EGPU_ESYNTAX, "TargetWorkload: must be a JSON object"},
        {HEAD "'typicalPods': [], 'spec': {}}", EGPU_ESYNTAX,
         "TargetWorkload has \"spec\"; allowed: apiVersion, kind, typicalPods"},
        {"{'apiVersion': 'v1', 'kind': 'TargetWorkload', 'typicalPods': []}", EGPU_ESYNTAX,
         "apiVersion: must be \"elasticgpu.io/v1alpha1\""},
        {"{'apiVersion': 'elasticgpu.io/v1alpha1', 'kind': 'Workload', 'typicalPods': []}",
         EGPU_ESYNTAX, "kind: must be \"TargetWorkload\""},
        {HEAD "'typicalPods': {}}", EGPU_ESYNTAX,
         "typicalPods: must be an array of 1..4096 typical pods"},
        {PODS(""), EGPU_ERANGE, "typicalPods: must be an array of 1..4096 typical pods"},
        {PODS("7"), EGPU_ESYNTAX, "typicalPods[0]: must be an object"},
        {PODS("{'weight': 1, 'gpu': 1}"), EGPU_ESYNTAX,
         "typicalPods[0] has \"gpu\"; allowed: cpuMilli, gpuMilli, gpus, models, weight"},
        {PODS("{'weight': 1}, {'cpuMilli': '8', 'weight': 1}"), EGPU_ESYNTAX,
         "typicalPods[1].cpuMilli: must be an integer 0..1000000000"},
        {PODS("{'cpuMilli': -1, 'weight': 1}"), EGPU_ERANGE,
         "typicalPods[0].cpuMilli: -1 is outside 0..1000000000"},
        {PODS("{'gpuMilli': 1001, 'gpus': 1, 'weight': 1}"), EGPU_ERANGE,
         "typicalPods[0].gpuMilli: 1001 is outside 0..1000"},
        {PODS("{'gpuMilli': 1000, 'gpus': 65, 'weight': 1}"), EGPU_ERANGE,
         "typicalPods[0].gpus: 65 is outside 0..64"},
        {PODS("{'gpuMilli': 500, 'weight': 1}"), EGPU_ERANGE,
         "typicalPods[0]: gpuMilli 500 with gpus 0: both 0 (no GPU) or both above 0"},
        {PODS("{'gpus': 2, 'weight': 1}"), EGPU_ERANGE,
         "typicalPods[0]: gpuMilli 0 with gpus 2: both 0 (no GPU) or both above 0"},
        {PODS("{'gpuMilli': 500, 'gpus': 3, 'weight': 1}"), EGPU_ERANGE,
         "typicalPods[0].gpus: 3 whole cards need gpuMilli 1000, not 500 (a share is one card)"},
        {PODS("{'models': 7, 'weight': 1}"), EGPU_ESYNTAX,
         "typicalPods[0].models: must be a string of GPU model names separated by '|', at most "
         "1023 bytes"},
        {PODS("{'cpuMilli': 1}"), EGPU_ESYNTAX, "typicalPods[0].weight: missing (a number >= 0)"},
        {PODS("{'weight': '1'}"), EGPU_ESYNTAX,
         "typicalPods[0].weight: not a number (a number >= 0)"},
        {PODS("{'weight': -0.5}"), EGPU_ERANGE, "typicalPods[0].weight: -0.5 is below 0"},
        {PODS("{'weight': 0}, {'gpuMilli': 1000, 'gpus': 1, 'weight': 0.0}"), EGPU_ERANGE,
         "typicalPods: every weight is 0; at least one must be above 0"},
    };
    const long live = egpu_alloc_live();

    (void)state;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        json_t *doc = tu_json(rows[i].doc);
        struct egpu_api_workload w;
        struct egpu_error err = {0};
        int rc = egpu_api_workload_decode(doc, &w, &err);

        if (rc != rows[i].code || strcmp(err.msg, rows[i].msg) != 0)
            fail_msg("row %zu: got %d \"%s\", want %d \"%s\"", i, rc, err.msg, rows[i].code,
                     rows[i].msg);
        assert_int_equal(w.n, 0);
        assert_null(w.pods);
        json_decref(doc);
    }
    assert_int_equal(egpu_alloc_live(), live);
}

static void test_models_too_long(void **state)
{
    char models[EGPU_API_WORKLOAD_MODELS_MAX + 1];
    json_t *doc = tu_json(PODS("{'weight': 1}"));
    struct egpu_api_workload w;
    struct egpu_error err = {0};

    (void)state;
    memset(models, 'A', sizeof(models) - 1);
    models[sizeof(models) - 1] = '\0';
    json_object_set_new(json_array_get(json_object_get(doc, "typicalPods"), 0), "models",
                        json_string(models));
    assert_int_equal(egpu_api_workload_decode(doc, &w, &err), EGPU_ESYNTAX);
    assert_non_null(strstr(err.msg, "typicalPods[0].models"));
    models[sizeof(models) - 2] = '\0'; /* 1023 bytes: the most there is room for */
    json_object_set_new(json_array_get(json_object_get(doc, "typicalPods"), 0), "models",
                        json_string(models));
    assert_int_equal(egpu_api_workload_decode(doc, &w, &err), 0);
    assert_int_equal(strlen(w.pods[0].models), EGPU_API_WORKLOAD_MODELS_MAX - 1);
    egpu_api_workload_free(&w);
    json_decref(doc);
}

static void test_fields_and_round_trip(void **state)
{
    json_t *doc = tu_json(PODS("{'cpuMilli': 8000, 'gpuMilli': 500, 'gpus': 1, 'weight': 0.25},"
                               "{'cpuMilli': 4000, 'gpuMilli': 1000, 'gpus': 2, "
                               " 'models': 'V100M16|V100M32', 'weight': 0.5},"
                               "{'cpuMilli': 2000, 'weight': 0.1}"));
    struct egpu_api_workload w, back;
    struct egpu_error err = {0};
    const long live = egpu_alloc_live();
    json_t *enc;
    char *text;

    (void)state;
    assert_int_equal(egpu_api_workload_decode(doc, &w, &err), 0);
    assert_int_equal(w.n, 3);
    assert_int_equal(w.pods[0].cpu_milli, 8000);
    assert_int_equal(w.pods[0].gpu_milli, 500);
    assert_int_equal(w.pods[0].gpus, 1);
    assert_string_equal(w.pods[0].models, "");
    assert_true(w.pods[0].weight == 0.25);
    assert_int_equal(w.pods[1].gpus, 2);
    assert_string_equal(w.pods[1].models, "V100M16|V100M32");
    assert_int_equal(w.pods[2].gpu_milli, 0);
    assert_int_equal(w.pods[2].gpus, 0);
    assert_true(w.pods[2].weight == 0.1); /* not renormalised: the core does that */
    enc = egpu_api_workload_encode(&w);
    assert_non_null(enc);
    /* "models" only where a pod has some; the rest as read. */
    assert_null(json_object_get(json_array_get(json_object_get(enc, "typicalPods"), 0), "models"));
    text = json_dumps(enc, JSON_COMPACT);
    json_decref(enc);
    enc = json_loads(text, 0, NULL);
    assert_int_equal(egpu_api_workload_decode(enc, &back, &err), 0);
    assert_int_equal(back.n, w.n);
    assert_memory_equal(back.pods, w.pods, w.n * sizeof(*w.pods));
    egpu_api_workload_free(&back);
    egpu_api_workload_free(&w);
    egpu_api_workload_free(&w); /* emptied: a second free is a no-op */
    egpu_api_workload_free(NULL);
    free(text);
    json_decref(enc);
    json_decref(doc);
    assert_int_equal(egpu_alloc_live(), live);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rules),
        cmocka_unit_test(test_models_too_long),
        cmocka_unit_test(test_fields_and_round_trip),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
