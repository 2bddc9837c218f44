/* tests/unit/test_webhook_place.c - POST /mutate-place (src/webhook/place.c)
 * through the real handler: a Pod CREATE that asks no GPU and names no
 * scheduler gets exactly one operation setting spec.schedulerName to
 * --scheduler-name, which, applied as the API server applies it, changes
 * nothing else and makes a second pass patch nothing; a GPU pod (in any
 * container, init containers included, in our names, the compatible ones,
 * HAMi's, or through a claim), a pod naming another scheduler, an UPDATE, a
 * subresource, another kind and --set-scheduler-name false are allowed
 * unchanged; a malformed body or review gets the same errors as /mutate.
 */
#include "webhook_testutil.h"

#define PLAIN "{'cpu':'2','memory':'4Gi'}"

static const struct egpu_webhook_config on = {.set_scheduler_name = true};

/* pod through /mutate-place with cfg; the reply. */
static struct wt_reply place(const struct egpu_webhook_config *cfg, const char *op, json_t *pod,
                             json_t *old)
{
    return wt_call(cfg, EGPU_WEBHOOK_MUTATE_PLACE, NULL,
                   wt_review(op, "", "v1", "Pod", "alice", pod, old));
}

/* A pod that asks no GPU gets the scheduler: "add" when it names none,
 * "replace" over "" and "default-scheduler" (what the API server writes);
 * --scheduler-name chooses the name. The patch applied leaves every other
 * field as it was, and the patched pod makes no patch (reinvoked or not). */
static void test_cpu_pod_gets_the_scheduler(void **state)
{
    static const struct {
        const char *sched; /* NULL: none */
        const char *op;
    } rows[] = {{NULL, "add"}, {"default-scheduler", "replace"}, {"", "replace"}};
    const struct egpu_webhook_config named = {.set_scheduler_name = true,
                                              .scheduler_name = "egpu-2"};

    (void)state;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        for (int n = 0; n < 2; n++) {
            const struct egpu_webhook_config *cfg = n ? &named : &on;
            const char *name = n ? "egpu-2" : "elastic-gpu-scheduler";
            json_t *pod = wt_pod(PLAIN, "{'team':'a'}", rows[i].sched), *want, *got;
            struct wt_reply w = place(cfg, "CREATE", json_deep_copy(pod), NULL), again;
            char ops[256];

            assert_int_equal(w.status, 200);
            assert_int_equal(w.result, EGPU_WEBHOOK_PATCHED);
            assert_true(json_is_true(json_object_get(wt_response(&w), "allowed")));
            assert_null(json_object_get(wt_response(&w), "warnings"));
            snprintf(ops, sizeof(ops), "[{'op':'%s','path':'/spec/schedulerName','value':'%s'}]",
                     rows[i].op, name);
            wt_assert_json(w.ops, ops);
            got = json_deep_copy(pod);
            assert_int_equal(egpu__webhook_patch_apply(got, w.ops), 0);
            want = json_deep_copy(pod);
            json_object_set_new(json_object_get(want, "spec"), "schedulerName", json_string(name));
            assert_true(json_equal(got, want));
            again = place(cfg, "CREATE", got, NULL);
            wt_assert_allowed_minimal(&again);
            wt_free(&again);
            wt_free(&w);
            json_decref(want);
            json_decref(pod);
        }
    }
}

/* A pod that asks a GPU anywhere is /mutate's: allowed, no patch. So is a
 * pod of HAMi's names (mutate-nvidia's, or HAMi's own scheduler's) and a
 * pod whose container uses a claim. nvidia.com/gpu alone is NVIDIA's device
 * plugin's, not a GPU of ours: that pod is placed. */
static void test_gpu_pods_left_alone(void **state)
{
    static const char *const gpu_limits[] = {
        "{'elasticgpu.io/gpu-core':'30','elasticgpu.io/gpu-memory':'4096'}",
        "{'cpu':'1','elasticgpu.io/gpu-core':'100'}",
        "{'elasticgpu.io/future':'1'}",
        "{'tencent.com/vcuda-core':'30'}",
        "{'inspur.com/vcuda-memory':'4'}",
        "{'aliyun.com/gpu-mem':'2'}",
        "{'elastic-gpu/gpu-percent':'20'}",
        "{'elasticgpu.com/gpu-memory':'1024'}",
        "{'gpushare.provisioner.elasticgpu.io/gpu-core':'50'}",
        "{'nvidia.com/gpu':'1','nvidia.com/gpucores':'30'}",
        "{'nvidia.com/gpumem':'3000'}",
    };
    struct wt_reply w;
    json_t *pod;

    (void)state;
    for (size_t i = 0; i < sizeof(gpu_limits) / sizeof(gpu_limits[0]); i++) {
        w = place(&on, "CREATE", wt_pod(gpu_limits[i], NULL, NULL), NULL);
        wt_assert_allowed_minimal(&w);
        wt_free(&w);
    }
    /* requests only */
    pod = wt_pod(PLAIN, NULL, NULL);
    json_object_set_new(
        json_object_get(
            json_array_get(json_object_get(json_object_get(pod, "spec"), "containers"), 0),
            "resources"),
        "requests", wt_json("{'elasticgpu.io/gpu-core':'50'}"));
    w = place(&on, "CREATE", pod, NULL);
    wt_assert_allowed_minimal(&w);
    wt_free(&w);
    /* a GPU init container beside a plain container: the pod asks a GPU */
    pod = wt_pod(PLAIN, NULL, "default-scheduler");
    json_object_set_new(json_object_get(pod, "spec"), "initContainers",
                        wt_json("[{'name':'warm','image':'w:1','resources':{'limits':"
                                "{'elasticgpu.io/gpu-core':'10','elasticgpu.io/gpu-memory':"
                                "'1024'}}}]"));
    w = place(&on, "CREATE", pod, NULL);
    wt_assert_allowed_minimal(&w);
    wt_free(&w);
    /* a plain init container: still a pod without GPU */
    pod = wt_pod(PLAIN, NULL, "default-scheduler");
    json_object_set_new(
        json_object_get(pod, "spec"), "initContainers",
        wt_json("[{'name':'warm','image':'w:1','resources':{'limits':" PLAIN "}}]"));
    w = place(&on, "CREATE", pod, NULL);
    wt_assert_json(w.ops, "[{'op':'replace','path':'/spec/schedulerName','value':"
                          "'elastic-gpu-scheduler'}]");
    wt_free(&w);
    /* a container using an ElasticGPUClaim (its requests come from /mutate) */
    w = place(&on, "CREATE", wt_pod(PLAIN, "{'egpuc.elasticgpu.io/train':'my-claim'}", NULL), NULL);
    wt_assert_allowed_minimal(&w);
    wt_free(&w);
    /* other annotations of ours ask nothing */
    w = place(&on, "CREATE", wt_pod(PLAIN, "{'elasticgpu.io/node-policy':'spread'}", NULL), NULL);
    wt_assert_json(w.ops, "[{'op':'add','path':'/spec/schedulerName','value':"
                          "'elastic-gpu-scheduler'}]");
    wt_free(&w);
    /* nvidia.com/gpu alone, and names that only look like ours */
    w = place(&on, "CREATE",
              wt_pod("{'nvidia.com/gpu':'1','elasticgpu.io.evil/x':'1','tencent.com/vcuda':'1'}",
                     NULL, NULL),
              NULL);
    wt_assert_json(w.ops, "[{'op':'add','path':'/spec/schedulerName','value':"
                          "'elastic-gpu-scheduler'}]");
    wt_free(&w);
}

/* A pod naming another scheduler keeps it. */
static void test_other_scheduler_kept(void **state)
{
    static const char *const names[] = {"volcano", "elastic-gpu-scheduler", "default"};

    (void)state;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        struct wt_reply w = place(&on, "CREATE", wt_pod(PLAIN, NULL, names[i]), NULL);

        wt_assert_allowed_minimal(&w);
        wt_free(&w);
    }
}

/* Only a Pod CREATE of the object itself is patched; nothing with
 * --set-scheduler-name false (the extender in the main kube-scheduler). */
static void test_only_pod_create(void **state)
{
    const struct egpu_webhook_config off = {0};
    struct wt_reply w;
    json_t *doc;
    char *text;

    (void)state;
    w = place(&off, "CREATE", wt_pod(PLAIN, NULL, NULL), NULL);
    wt_assert_allowed_minimal(&w);
    wt_free(&w);
    w = place(&on, "UPDATE", wt_pod(PLAIN, "{'a':'b'}", NULL), wt_pod(PLAIN, NULL, NULL));
    wt_assert_allowed_minimal(&w);
    wt_free(&w);
    /* a Deployment's template: its pods are placed when they are created */
    w = wt_call(&on, EGPU_WEBHOOK_MUTATE_PLACE, NULL,
                wt_review("CREATE", "apps", "v1", "Deployment", "alice",
                          wt_workload("Deployment", wt_pod(PLAIN, NULL, NULL)), NULL));
    wt_assert_allowed_minimal(&w);
    wt_free(&w);
    /* not a pod: a ConfigMap, a Pod of another group */
    w = wt_call(&on, EGPU_WEBHOOK_MUTATE_PLACE, NULL,
                wt_review("CREATE", "", "v1", "ConfigMap", "alice",
                          wt_json("{'kind':'ConfigMap','data':{'spec':'x'}}"), NULL));
    wt_assert_allowed_minimal(&w);
    wt_free(&w);
    w = wt_call(
        &on, EGPU_WEBHOOK_MUTATE_PLACE, NULL,
        wt_review("CREATE", "example.com", "v1", "Pod", "alice", wt_pod(PLAIN, NULL, NULL), NULL));
    wt_assert_allowed_minimal(&w);
    wt_free(&w);
    /* a pod without a spec object, or without a spec */
    w = place(&on, "CREATE", wt_json("{'kind':'Pod','metadata':{'name':'p'},'spec':'x'}"), NULL);
    wt_assert_allowed_minimal(&w);
    wt_free(&w);
    w = place(&on, "CREATE", wt_json("{'kind':'Pod','metadata':{'name':'p'}}"), NULL);
    wt_assert_allowed_minimal(&w);
    wt_free(&w);
    /* a subresource (pods/binding, pods/ephemeralcontainers...) */
    text = wt_review("CREATE", "", "v1", "Pod", "alice", wt_pod(PLAIN, NULL, NULL), NULL);
    doc = json_loads(text, 0, NULL);
    free(text);
    json_object_set_new(json_object_get(doc, "request"), "subResource", json_string("binding"));
    text = json_dumps(doc, JSON_COMPACT);
    json_decref(doc);
    w = wt_call(&on, EGPU_WEBHOOK_MUTATE_PLACE, NULL, text);
    wt_assert_allowed_minimal(&w);
    wt_free(&w);
}

/* Malformed input gets exactly what /mutate answers: HTTP 400 with a
 * plain-text reason when there is no uid to answer, an AdmissionReview
 * denying with code 400 when the review is wrong otherwise. */
static void test_bad_input_as_mutate(void **state)
{
    static const char *const bodies[] = {
        "{\"request\":",
        "not json",
        "[1,2]",
        "{\"request\":{}}",
        "{\"apiVersion\":\"v1\",\"kind\":\"AdmissionReview\",\"request\":{\"uid\":\"x\"}}",
        "{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\",\"request\":"
        "{\"uid\":\"x\",\"operation\":\"CREATE\",\"kind\":{\"group\":\"\",\"version\":\"v1\","
        "\"kind\":\"Pod\"},\"object\":[]}}",
        "{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\",\"request\":"
        "{\"uid\":\"x\",\"operation\":\"CREATE\",\"kind\":{\"group\":\"\",\"version\":\"v1\","
        "\"kind\":\"Pod\"},\"object\":null}}",
    };

    (void)state;
    for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
        struct egpu_webhook_reply a, b;
        struct egpu_buf oa, ob;

        egpu_buf_init(&oa, 1 << 20);
        egpu_buf_init(&ob, 1 << 20);
        assert_int_equal(egpu_webhook_handle(&on, EGPU_WEBHOOK_MUTATE_PLACE, NULL, bodies[i],
                                             strlen(bodies[i]), &oa, &a),
                         0);
        assert_int_equal(egpu_webhook_handle(&on, EGPU_WEBHOOK_MUTATE, NULL, bodies[i],
                                             strlen(bodies[i]), &ob, &b),
                         0);
        assert_int_equal(a.result, EGPU_WEBHOOK_ERROR);
        assert_int_equal(a.http_status, b.http_status);
        assert_string_equal(a.content_type, b.content_type);
        assert_string_equal(egpu_buf_str(&oa), egpu_buf_str(&ob));
        if (i == 0)
            assert_string_equal(egpu_buf_str(&oa), "AdmissionReview: body is not JSON: unexpected "
                                                   "token near end of file (line 1, column 11)\n");
        egpu_buf_free(&oa);
        egpu_buf_free(&ob);
    }
}

/* The route's path and metric label. */
static void test_route_names(void **state)
{
    (void)state;
    assert_string_equal(egpu_webhook_route_path(EGPU_WEBHOOK_MUTATE_PLACE), "/mutate-place");
    assert_string_equal(egpu_webhook_route_name(EGPU_WEBHOOK_MUTATE_PLACE), "mutate-place");
    assert_int_equal(EGPU_WEBHOOK_ROUTES, EGPU_WEBHOOK_MUTATE_PLACE + 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_pod_gets_the_scheduler),
        cmocka_unit_test(test_gpu_pods_left_alone),
        cmocka_unit_test(test_other_scheduler_kept),
        cmocka_unit_test(test_only_pod_create),
        cmocka_unit_test(test_bad_input_as_mutate),
        cmocka_unit_test(test_route_names),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
