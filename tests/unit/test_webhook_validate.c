/* tests/unit/test_webhook_validate.c - POST /validate
 * (src/webhook/validate.c) through the real handler, one row per rule:
 * AdmissionReview in, the exact denial text out (what the user reads after
 * `admission webhook "validate.webhook.elasticgpu.io" denied the request: `),
 * for Pods and every workload kind; UPDATE refusing only new problems; the
 * system annotations writable only by their users; the GPU facts (facts.c)
 * as an informer feeds them.
 */
#include "webhook_testutil.h"

static const char *const models[] = {"NVIDIA A100-SXM4-40GB", "NVIDIA H100"};
static const struct egpu_api_facts facts = {.max_card_mib = 40960, .nmodels = 2, .models = models};
static const struct egpu_webhook_config cfg = {.set_scheduler_name = true};

struct vcase {
    const char *what;
    const char *limits, *annotations;
    const char *denied; /* NULL: allowed */
};

#define CORE150                                                                                   \
    "container \"train\": elasticgpu.io/gpu-core is 150; allowed: 1..99 to share one card, or a " \
    "multiple of 100 for whole cards"

static const struct vcase cases[] = {
    {"the issue's example", "{'elasticgpu.io/gpu-core':'150'}", NULL, CORE150},
    {"a shared card", "{'elasticgpu.io/gpu-core':'30','elasticgpu.io/gpu-memory':'4096'}", NULL,
     NULL},
    {"whole cards", "{'elasticgpu.io/gpu-core':'200'}", NULL, NULL},
    {"a share without memory", "{'elasticgpu.io/gpu-core':'30'}", NULL,
     "container \"train\": elasticgpu.io/gpu-core is 30 (a share of one card) without "
     "elasticgpu.io/gpu-memory; allowed: gpu-memory in MiB with every share, in requests and "
     "limits, e.g. elasticgpu.io/gpu-memory: \"4096\" (a share is booked and limited to the memory "
     "it names)"},
    {"gpu-core 0.5", "{'elasticgpu.io/gpu-core':'500m'}", NULL,
     "container \"train\": elasticgpu.io/gpu-core is 500m; allowed: 1..99 to share one card, or a "
     "multiple of 100 for whole cards"},
    {"memory without core", "{'elasticgpu.io/gpu-memory':'1024'}", NULL,
     "container \"train\": elasticgpu.io/gpu-memory needs elasticgpu.io/gpu-core in the same "
     "container; allowed: gpu-core 1..99 with gpu-memory to share one card"},
    {"memory above the largest card",
     "{'elasticgpu.io/gpu-core':'50','elasticgpu.io/gpu-memory':'81920'}", NULL,
     "container \"train\": elasticgpu.io/gpu-memory is 81920; allowed: up to 40960 MiB, the "
     "memory of the largest card in the cluster"},
    {"memory on whole cards", "{'elasticgpu.io/gpu-core':'100','elasticgpu.io/gpu-memory':'1000'}",
     NULL,
     "container \"train\": elasticgpu.io/gpu-memory is 1000 with elasticgpu.io/gpu-core 100 "
     "(whole cards); allowed: no gpu-memory on whole cards, which come with all their memory, or "
     "gpu-core 1..99 to share one card"},
    {"memory not a number", "{'elasticgpu.io/gpu-core':'50','elasticgpu.io/gpu-memory':'4Gi'}",
     NULL,
     "container \"train\": elasticgpu.io/gpu-memory is 4Gi; allowed: a whole number of MiB, "
     "e.g. 4096"},
    {"core-limit below the request",
     "{'elasticgpu.io/gpu-core':'30','elasticgpu.io/gpu-memory':'4096'}",
     "{'elasticgpu.io/gpu-core-limit':'20'}",
     "annotation elasticgpu.io/gpu-core-limit is 20; allowed: 30..100 (at least the largest "
     "gpu-core of a shared container)"},
    {"core-limit above 100", "{'elasticgpu.io/gpu-core':'30','elasticgpu.io/gpu-memory':'4096'}",
     "{'elasticgpu.io/gpu-core-limit':'150'}",
     "annotation elasticgpu.io/gpu-core-limit is \"150\"; allowed: a whole percent from the "
     "containers' gpu-core up to 100"},
    {"core-limit in range", "{'elasticgpu.io/gpu-core':'30','elasticgpu.io/gpu-memory':'4096'}",
     "{'elasticgpu.io/gpu-core-limit':'80'}", NULL},
    {"a model the cluster has", "{'elasticgpu.io/gpu-core':'30','elasticgpu.io/gpu-memory':'4096'}",
     "{'elasticgpu.io/gpu-model':'NVIDIA H100'}", NULL},
    {"a model it has not", "{'elasticgpu.io/gpu-core':'30','elasticgpu.io/gpu-memory':'4096'}",
     "{'elasticgpu.io/gpu-model':'NVIDIA H100|Tesla T4'}",
     "annotation elasticgpu.io/gpu-model names \"Tesla T4\"; allowed: the models the cluster has: "
     "NVIDIA A100-SXM4-40GB, NVIDIA H100"},
    {"a bad node policy", "{'elasticgpu.io/gpu-core':'30','elasticgpu.io/gpu-memory':'4096'}",
     "{'elasticgpu.io/node-policy':'pack'}",
     "annotation elasticgpu.io/node-policy is \"pack\"; allowed: binpack, spread, best-fit, "
     "random, fgd, fgd-cpu, fgd-cpu-fill"},
    {"a bad card policy", "{'elasticgpu.io/gpu-core':'30','elasticgpu.io/gpu-memory':'4096'}",
     "{'elasticgpu.io/card-policy':'tight'}",
     "annotation elasticgpu.io/card-policy is \"tight\"; allowed: binpack, spread, best-fit, "
     "random, fgd, fgd-cpu, fgd-cpu-fill"},
    {"good policies", "{'elasticgpu.io/gpu-core':'30','elasticgpu.io/gpu-memory':'4096'}",
     "{'elasticgpu.io/node-policy':'spread','elasticgpu.io/card-policy':'fgd'}", NULL},
    {"two problems at once", "{'elasticgpu.io/gpu-core':'150'}",
     "{'elasticgpu.io/node-policy':'pack'}",
     CORE150 "; annotation elasticgpu.io/node-policy is \"pack\"; allowed: binpack, spread, "
             "best-fit, random, fgd, fgd-cpu, fgd-cpu-fill"},
    {"no GPU at all", "{'cpu':'1'}", NULL, NULL},
};

static void test_rules(void **state)
{
    static const char *const kinds[][2] = {
        {"", "Pod"},           {"apps", "Deployment"}, {"apps", "StatefulSet"},
        {"apps", "DaemonSet"}, {"apps", "ReplicaSet"}, {"batch", "Job"},
        {"batch", "CronJob"},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
            const struct vcase *c = &cases[i];
            json_t *obj = wt_pod(c->limits, c->annotations, NULL);
            struct wt_reply w;

            print_message("case %zu (%s): %s\n", i, kinds[k][1], c->what);
            if (k > 0)
                obj = wt_workload(kinds[k][1], obj);
            w = wt_call(&cfg, EGPU_WEBHOOK_VALIDATE, &facts,
                        wt_review("CREATE", kinds[k][0], "v1", kinds[k][1], "alice", obj, NULL));
            if (c->denied)
                wt_assert_denied(&w, c->denied);
            else
                wt_assert_allowed_minimal(&w);
            wt_free(&w);
        }
    }
}

/* Requests and limits that differ, and init containers asking GPUs. */
static void test_requests_limits_init(void **state)
{
    json_t *pod =
        wt_pod("{'elasticgpu.io/gpu-core':'30','elasticgpu.io/gpu-memory':'4096'}", NULL, NULL);
    json_t *c = json_array_get(json_object_get(json_object_get(pod, "spec"), "containers"), 0);
    struct wt_reply w;

    (void)state;
    json_object_set_new(json_object_get(c, "resources"), "requests",
                        wt_json("{'elasticgpu.io/gpu-core':'20'}"));
    json_object_set_new(json_object_get(pod, "spec"), "initContainers",
                        wt_json("[{'name':'prep','resources':{'limits':"
                                "{'elasticgpu.io/gpu-core':'10'}}}]"));
    w = wt_call(&cfg, EGPU_WEBHOOK_VALIDATE, &facts,
                wt_review("CREATE", "", "v1", "Pod", "alice", pod, NULL));
    wt_assert_denied(&w, "container \"train\": elasticgpu.io/gpu-core requests 20 but limits 30; "
                         "allowed: requests equal to limits (an extended resource is not "
                         "overcommitted); init container \"prep\": asks elasticgpu.io/gpu-core; "
                         "allowed: GPUs in regular containers only (an init container's GPU "
                         "would be held for the pod's whole life)");
    wt_free(&w);
}

/* Without facts (none known yet) the checks that need them are skipped. */
static void test_no_facts(void **state)
{
    struct wt_reply w;

    (void)state;
    w = wt_call(&cfg, EGPU_WEBHOOK_VALIDATE, NULL,
                wt_review("CREATE", "", "v1", "Pod", "alice",
                          wt_pod("{'elasticgpu.io/gpu-core':'50','elasticgpu.io/gpu-memory':"
                                 "'81920'}",
                                 "{'elasticgpu.io/gpu-model':'Tesla T4'}", NULL),
                          NULL));
    wt_assert_allowed_minimal(&w);
    wt_free(&w);
}

/* UPDATE: a problem the old object had already never blocks an unrelated
 * edit; a new one is refused, alone. */
static void test_update_only_new_problems(void **state)
{
    struct wt_reply w;

    (void)state;
    w = wt_call(
        &cfg, EGPU_WEBHOOK_VALIDATE, &facts,
        wt_review("UPDATE", "", "v1", "Pod", "alice",
                  wt_pod("{'elasticgpu.io/gpu-core':'150'}", "{'x':'finalizer gone'}", NULL),
                  wt_pod("{'elasticgpu.io/gpu-core':'150'}", NULL, NULL)));
    wt_assert_allowed_minimal(&w);
    wt_free(&w);
    w = wt_call(
        &cfg, EGPU_WEBHOOK_VALIDATE, &facts,
        wt_review(
            "UPDATE", "apps", "v1", "Deployment", "alice",
            wt_workload("Deployment", wt_pod("{'elasticgpu.io/gpu-core':'150'}",
                                             "{'elasticgpu.io/node-policy':'pack'}", NULL)),
            wt_workload("Deployment", wt_pod("{'elasticgpu.io/gpu-core':'150'}", NULL, NULL))));
    wt_assert_denied(&w, "annotation elasticgpu.io/node-policy is \"pack\"; allowed: binpack, "
                         "spread, best-fit, random, fgd, fgd-cpu, fgd-cpu-fill");
    wt_free(&w);
}

/* elasticgpu.io/assigned and allocated: only the scheduler's and the
 * agent's users may add, change or remove them. */
static void test_system_annotations(void **state)
{
    const char *sched = EGPU_WEBHOOK_SCHEDULER_USER, *agent = EGPU_WEBHOOK_AGENT_USER;
    const char *asg = "{'elasticgpu.io/assigned':'{}'}", *alc = "{'elasticgpu.io/allocated':'x'}";
    const char *gpu = "{'elasticgpu.io/gpu-core':'30','elasticgpu.io/gpu-memory':'4096'}";
    struct egpu_webhook_config custom = {.scheduler_user = "sched", .agent_user = "agent"};
    struct wt_reply w;

    (void)state;
    w = wt_call(&cfg, EGPU_WEBHOOK_VALIDATE, &facts,
                wt_review("CREATE", "", "v1", "Pod", "alice", wt_pod(gpu, asg, NULL), NULL));
    wt_assert_denied(&w, "annotation elasticgpu.io/assigned is written only by the scheduler "
                         "(system:serviceaccount:elastic-gpu-system:egpu-scheduler); user "
                         "\"alice\" may not add it");
    wt_free(&w);
    w = wt_call(&cfg, EGPU_WEBHOOK_VALIDATE, &facts,
                wt_review("UPDATE", "", "v1", "Pod", sched, wt_pod(gpu, asg, NULL),
                          wt_pod(gpu, NULL, NULL)));
    wt_assert_allowed_minimal(&w);
    wt_free(&w);
    w = wt_call(
        &cfg, EGPU_WEBHOOK_VALIDATE, &facts,
        wt_review("UPDATE", "", "v1", "Pod", "alice",
                  wt_pod(gpu, "{'elasticgpu.io/assigned':'{\\\"node\\\":\\\"n2\\\"}'}", NULL),
                  wt_pod(gpu, asg, NULL)));
    wt_assert_denied(&w, "annotation elasticgpu.io/assigned is written only by the scheduler "
                         "(system:serviceaccount:elastic-gpu-system:egpu-scheduler); user "
                         "\"alice\" may not change it");
    wt_free(&w);
    w = wt_call(&cfg, EGPU_WEBHOOK_VALIDATE, &facts,
                wt_review("UPDATE", "", "v1", "Pod", agent, wt_pod(gpu, alc, NULL),
                          wt_pod(gpu, NULL, NULL)));
    wt_assert_allowed_minimal(&w);
    wt_free(&w);
    /* the scheduler may not write the agent's annotation */
    w = wt_call(&cfg, EGPU_WEBHOOK_VALIDATE, &facts,
                wt_review("UPDATE", "", "v1", "Pod", sched, wt_pod(gpu, NULL, NULL),
                          wt_pod(gpu, alc, NULL)));
    wt_assert_denied(&w, "annotation elasticgpu.io/allocated is written only by the node agent "
                         "(system:serviceaccount:elastic-gpu-system:egpu-agent); user "
                         "\"system:serviceaccount:elastic-gpu-system:egpu-scheduler\" may not "
                         "remove it");
    wt_free(&w);
    /* anyone may edit the rest while both stay as they are */
    w = wt_call(&cfg, EGPU_WEBHOOK_VALIDATE, &facts,
                wt_review("UPDATE", "", "v1", "Pod", "alice",
                          wt_pod(gpu,
                                 "{'elasticgpu.io/assigned':'{}','elasticgpu.io/allocated':"
                                 "'x','team':'b'}",
                                 NULL),
                          wt_pod(gpu,
                                 "{'elasticgpu.io/assigned':'{}','elasticgpu.io/allocated':"
                                 "'x'}",
                                 NULL)));
    wt_assert_allowed_minimal(&w);
    wt_free(&w);
    /* the users come from the flags */
    w = wt_call(&custom, EGPU_WEBHOOK_VALIDATE, &facts,
                wt_review("CREATE", "", "v1", "Pod", "sched", wt_pod(gpu, asg, NULL), NULL));
    wt_assert_allowed_minimal(&w);
    wt_free(&w);
    w = wt_call(&custom, EGPU_WEBHOOK_VALIDATE, &facts,
                wt_review("CREATE", "", "v1", "Pod", sched, wt_pod(gpu, alc, NULL), NULL));
    wt_assert_denied(&w, "annotation elasticgpu.io/allocated is written only by the node agent "
                         "(agent); user \"system:serviceaccount:elastic-gpu-system:egpu-scheduler\""
                         " may not add it");
    wt_free(&w);
}

/* The mutating routes never deny a rule of /validate, and /validate never
 * patches. */
static void test_routes_apart(void **state)
{
    struct wt_reply w;

    (void)state;
    w = wt_call(&cfg, EGPU_WEBHOOK_MUTATE, &facts,
                wt_review("CREATE", "", "v1", "Pod", "alice",
                          wt_pod("{'elasticgpu.io/gpu-core':'150'}", NULL, "x"), NULL));
    wt_assert_allowed_minimal(&w);
    wt_free(&w);
    w = wt_call(&cfg, EGPU_WEBHOOK_VALIDATE, &facts,
                wt_review("CREATE", "", "v1", "Pod", "alice",
                          wt_pod("{'tencent.com/vcuda-core':'30'}", NULL, "default-scheduler"),
                          NULL));
    wt_assert_allowed_minimal(&w);
    wt_free(&w);
}

static json_t *gpu_obj(const char *name, const char *model, int mem)
{
    return json_pack("{s:s, s:{s:s}, s:{s:s, s:i}}", "kind", "GPU", "metadata", "name", name,
                     "spec", "model", model, "memory", mem);
}

/* The facts as an informer feeds them: largest card, models once each,
 * updates and deletes, half-written objects ignored, and a snapshot taken
 * before a change unchanged by it. */
static void test_facts(void **state)
{
    struct egpu__webhook_facts *f = egpu__webhook_facts_new();
    const struct egpu__webhook_facts_snap *s, *old;
    json_t *a = gpu_obj("n1-0", "NVIDIA H100", 81920), *b = gpu_obj("n1-1", "NVIDIA H100", 81920);
    json_t *c = gpu_obj("n2-0", "NVIDIA A100-SXM4-40GB", 40960);
    json_t *bad = wt_json("{'metadata':{'name':'n3-0'},'spec':{'memory':'lots'}}");
    json_t *noname = wt_json("{'spec':{'memory':999999,'model':'X'}}");

    (void)state;
    assert_non_null(f);
    s = egpu__webhook_facts_get(f);
    assert_int_equal(s->ncards, 0);
    assert_int_equal(s->facts.max_card_mib, 0);
    assert_int_equal(s->facts.nmodels, 0);
    egpu__webhook_facts_put(s);
    egpu__webhook_facts_on_add(f, a);
    egpu__webhook_facts_on_add(f, b);
    egpu__webhook_facts_on_add(f, c);
    egpu__webhook_facts_on_add(f, bad);
    egpu__webhook_facts_on_add(f, noname);
    old = egpu__webhook_facts_get(f);
    assert_int_equal(old->ncards, 4);
    assert_int_equal(old->facts.max_card_mib, 81920);
    assert_int_equal(old->facts.nmodels, 2);
    assert_string_equal(old->facts.models[0], "NVIDIA A100-SXM4-40GB");
    assert_string_equal(old->facts.models[1], "NVIDIA H100");
    assert_ptr_equal(egpu__webhook_facts_get(f), old); /* unchanged: the same view */
    egpu__webhook_facts_put(old);
    egpu__webhook_facts_on_delete(f, a);
    egpu__webhook_facts_on_update(f, b, c = (json_decref(c), gpu_obj("n1-1", "NVIDIA L4", 24576)));
    s = egpu__webhook_facts_get(f);
    assert_int_equal(s->ncards, 3);
    assert_int_equal(s->facts.max_card_mib, 40960);
    assert_int_equal(s->facts.nmodels, 2);
    assert_string_equal(s->facts.models[1], "NVIDIA L4");
    assert_int_equal(old->facts.max_card_mib, 81920); /* still readable */
    egpu__webhook_facts_put(old);
    egpu__webhook_facts_put(s);
    egpu__webhook_facts_free(f);
    json_decref(a);
    json_decref(b);
    json_decref(c);
    json_decref(bad);
    json_decref(noname);
    assert_int_equal(egpu_alloc_live(), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rules),
        cmocka_unit_test(test_requests_limits_init),
        cmocka_unit_test(test_no_facts),
        cmocka_unit_test(test_update_only_new_problems),
        cmocka_unit_test(test_system_annotations),
        cmocka_unit_test(test_routes_apart),
        cmocka_unit_test(test_facts),
    };

    egpu_log_level = -1;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
