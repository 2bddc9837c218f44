/* tests/unit/test_webhook_mutate.c - POST /mutate and /mutate-nvidia
 * (src/webhook/mutate.c) through the real handler, one row per compatible
 * name: AdmissionReview in, the exact JSON Patch operations (decoded from
 * the reply's base64) and warnings out. Each patch is then applied to the
 * object as the API server would: the result must pass /validate, and a
 * second pass over it (reinvocationPolicy: IfNeeded) must make no patch.
 * A share without gpu-memory: refused, or given --default-memory-per-core.
 */
#include "webhook_testutil.h"

#define L              "/spec/containers/0/resources/limits/"
#define CORE           "elasticgpu.io~1gpu-core"
#define MEM            "elasticgpu.io~1gpu-memory"
#define RM(name)       "{'op':'remove','path':'" L name "'}"
#define ADD(name, val) "{'op':'add','path':'" L name "','value':'" val "'}"
#define SN             "{'op':'replace','path':'/spec/schedulerName','value':'elastic-gpu-scheduler'}"
#define ANN_LIMIT100 \
    "{'op':'add','path':'/metadata/annotations','value':{'elasticgpu.io/gpu-core-limit':'100'}}"
#define MEMORY_ONLY                                                                          \
    "container \"train\": asks GPU memory only; given elasticgpu.io/gpu-core 1 and the pod " \
    "elasticgpu.io/gpu-core-limit 100, so it may use the whole card while it is idle"

struct mcase {
    const char *what;
    enum egpu_webhook_route route;
    bool compat_nvidia;
    uint32_t aliyun_mem_mib;
    const char *limits, *annotations;
    const char *ops;         /* NULL: allowed, no patch */
    const char *warnings[4]; /* NULL-terminated */
    const char *denied;      /* the denial's message, or NULL */
};

static const struct mcase cases[] = {
    {"tencent core",
     EGPU_WEBHOOK_MUTATE,
     false,
     0,
     "{'tencent.com/vcuda-core':'30'}",
     NULL,
     "[" RM("tencent.com~1vcuda-core") "," ADD(CORE, "30") "," SN "]",
     {"container \"train\": tencent.com/vcuda-core rewritten to elasticgpu.io/gpu-core 30 "
      "(percent of a card)"},
     NULL},
    {"tencent core and memory",
     EGPU_WEBHOOK_MUTATE,
     false,
     0,
     "{'tencent.com/vcuda-core':'30','tencent.com/vcuda-memory':'16'}",
     NULL,
     "[" RM("tencent.com~1vcuda-core") "," RM("tencent.com~1vcuda-memory") "," ADD(
         CORE, "30") "," ADD(MEM, "4096") "," SN "]",
     {"container \"train\": tencent.com/vcuda-core rewritten to elasticgpu.io/gpu-core 30 "
      "(percent of a card)",
      "container \"train\": tencent.com/vcuda-memory 16 (1 = 256 MiB) rewritten to "
      "elasticgpu.io/gpu-memory 4096 (MiB)"},
     NULL},
    {"inspur core and memory",
     EGPU_WEBHOOK_MUTATE,
     false,
     0,
     "{'inspur.com/vcuda-core':'50','inspur.com/vcuda-memory':'8'}",
     NULL,
     "[" RM("inspur.com~1vcuda-core") "," RM("inspur.com~1vcuda-memory") "," ADD(
         CORE, "50") "," ADD(MEM, "2048") "," SN "]",
     {"container \"train\": inspur.com/vcuda-core rewritten to elasticgpu.io/gpu-core 50 "
      "(percent of a card)",
      "container \"train\": inspur.com/vcuda-memory 8 (1 = 256 MiB) rewritten to "
      "elasticgpu.io/gpu-memory 2048 (MiB)"},
     NULL},
    {"aliyun GiB (memory only)",
     EGPU_WEBHOOK_MUTATE,
     false,
     0,
     "{'aliyun.com/gpu-mem':'8'}",
     NULL,
     "[" ANN_LIMIT100 "," RM("aliyun.com~1gpu-mem") "," ADD(CORE, "1") "," ADD(MEM, "8192") "," SN
                                                                                            "]",
     /* Each side's unit, not "8192 (GiB)". */
     {MEMORY_ONLY, "container \"train\": aliyun.com/gpu-mem 8 (GiB) rewritten to "
                   "elasticgpu.io/gpu-memory 8192 (MiB)"},
     NULL},
    {"aliyun MiB",
     EGPU_WEBHOOK_MUTATE,
     false,
     1,
     "{'aliyun.com/gpu-mem':'3000'}",
     NULL,
     "[" ANN_LIMIT100 "," RM("aliyun.com~1gpu-mem") "," ADD(CORE, "1") "," ADD(MEM, "3000") "," SN
                                                                                            "]",
     {MEMORY_ONLY, "container \"train\": aliyun.com/gpu-mem rewritten to elasticgpu.io/gpu-memory "
                   "3000 (MiB)"},
     NULL},
    /* gpushare's card count goes with gpushare. */
    {"aliyun with its card count",
     EGPU_WEBHOOK_MUTATE,
     false,
     0,
     "{'aliyun.com/gpu-mem':'4','aliyun.com/gpu-count':'1'}",
     NULL,
     "[" ANN_LIMIT100 "," RM("aliyun.com~1gpu-mem") "," RM("aliyun.com~1gpu-count") "," ADD(
         CORE, "1") "," ADD(MEM, "4096") "," SN "]",
     {MEMORY_ONLY,
      "container \"train\": aliyun.com/gpu-mem 4 (GiB) rewritten to elasticgpu.io/gpu-memory "
      "4096 (MiB)",
      "container \"train\": aliyun.com/gpu-count removed (gpushare's card count; "
      "aliyun.com/gpu-mem is one shared card's memory)"},
     NULL},
    {"aliyun with two cards: denied",
     EGPU_WEBHOOK_MUTATE,
     false,
     0,
     "{'aliyun.com/gpu-mem':'4','aliyun.com/gpu-count':'2'}",
     NULL,
     NULL,
     {NULL},
     "container \"train\": aliyun.com/gpu-count is 2 with aliyun.com/gpu-mem; allowed: 1 "
     "(aliyun.com/gpu-mem is the memory of one shared card; Elastic GPU shares at most one card "
     "per container), or no aliyun.com/gpu-count"},
    {"elastic-gpu percent",
     EGPU_WEBHOOK_MUTATE,
     false,
     0,
     "{'elastic-gpu/gpu-percent':'40'}",
     NULL,
     "[" RM("elastic-gpu~1gpu-percent") "," ADD(CORE, "40") "," SN "]",
     {"container \"train\": elastic-gpu/gpu-percent rewritten to elasticgpu.io/gpu-core 40 "
      "(percent of a card)"},
     NULL},
    {"elasticgpu.com",
     EGPU_WEBHOOK_MUTATE,
     false,
     0,
     "{'elasticgpu.com/gpu-core':'20','elasticgpu.com/gpu-memory':'1024'}",
     NULL,
     "[" RM("elasticgpu.com~1gpu-core") "," RM("elasticgpu.com~1gpu-memory") "," ADD(
         CORE, "20") "," ADD(MEM, "1024") "," SN "]",
     {"container \"train\": elasticgpu.com/gpu-core rewritten to elasticgpu.io/gpu-core 20 "
      "(percent of a card)",
      "container \"train\": elasticgpu.com/gpu-memory rewritten to elasticgpu.io/gpu-memory 1024 "
      "(MiB)"},
     NULL},
    {"gpushare provisioner",
     EGPU_WEBHOOK_MUTATE,
     false,
     0,
     "{'gpushare.provisioner.elasticgpu.io/gpu-core':'10',"
     "'gpushare.provisioner.elasticgpu.io/gpu-memory':'512'}",
     NULL,
     "[" RM("gpushare.provisioner.elasticgpu.io~1gpu-core") "," RM(
         "gpushare.provisioner.elasticgpu.io~1gpu-memory") "," ADD(CORE, "10") "," ADD(MEM,
                                                                                       "512") "," SN
                                                                                              "]",
     {"container \"train\": gpushare.provisioner.elasticgpu.io/gpu-core rewritten to "
      "elasticgpu.io/gpu-core 10 (percent of a card)",
      "container \"train\": gpushare.provisioner.elasticgpu.io/gpu-memory rewritten to "
      "elasticgpu.io/gpu-memory 512 (MiB)"},
     NULL},
#define HAMI_OPS                                                                                   \
    "[" RM("nvidia.com~1gpu") "," RM("nvidia.com~1gpucores") "," RM("nvidia.com~1gpumem") "," ADD( \
        CORE, "30") "," ADD(MEM, "4000") "," SN "]"
#define HAMI_WARNINGS                                                                            \
    {                                                                                            \
        "container \"train\": nvidia.com/gpucores rewritten to elasticgpu.io/gpu-core 30 "       \
        "(percent "                                                                              \
        "of a card)",                                                                            \
            "container \"train\": nvidia.com/gpumem rewritten to elasticgpu.io/gpu-memory 4000 " \
            "(MiB)",                                                                             \
            "container \"train\": nvidia.com/gpu removed (the card count is in "                 \
            "elasticgpu.io/gpu-core)"                                                            \
    }
#define HAMI "{'nvidia.com/gpu':'1','nvidia.com/gpucores':'30','nvidia.com/gpumem':'4000'}"
    {"HAMi on /mutate-nvidia", EGPU_WEBHOOK_MUTATE_NVIDIA, false, 0, HAMI, NULL, HAMI_OPS,
     HAMI_WARNINGS, NULL},
    {"HAMi on /mutate with --compat-nvidia", EGPU_WEBHOOK_MUTATE, true, 0, HAMI, NULL, HAMI_OPS,
     HAMI_WARNINGS, NULL},
    {"HAMi on /mutate: left to NVIDIA's plugin",
     EGPU_WEBHOOK_MUTATE,
     false,
     0,
     HAMI,
     NULL,
     NULL,
     {NULL},
     NULL},
    {"HAMi memory only",
     EGPU_WEBHOOK_MUTATE_NVIDIA,
     false,
     0,
     "{'nvidia.com/gpu':'1','nvidia.com/gpumem':'2048'}",
     NULL,
     "[" ANN_LIMIT100 "," RM("nvidia.com~1gpu") "," RM("nvidia.com~1gpumem") "," ADD(
         CORE, "1") "," ADD(MEM, "2048") "," SN "]",
     {MEMORY_ONLY,
      "container \"train\": nvidia.com/gpumem rewritten to elasticgpu.io/gpu-memory 2048 (MiB)",
      "container \"train\": nvidia.com/gpu removed (the card count is in elasticgpu.io/gpu-core)"},
     NULL},
    {"HAMi whole cards",
     EGPU_WEBHOOK_MUTATE_NVIDIA,
     false,
     0,
     "{'nvidia.com/gpu':'2','nvidia.com/gpucores':'100'}",
     NULL,
     "[" RM("nvidia.com~1gpu") "," RM("nvidia.com~1gpucores") "," ADD(CORE, "200") "," SN "]",
     {"container \"train\": nvidia.com/gpucores rewritten to elasticgpu.io/gpu-core 200 (percent "
      "of a card)",
      "container \"train\": nvidia.com/gpu removed (the card count is in elasticgpu.io/gpu-core)"},
     NULL},
    {"tencent core-limit annotation",
     EGPU_WEBHOOK_MUTATE,
     false,
     0,
     "{'tencent.com/vcuda-core':'30'}",
     "{'team':'a','tencent.com/vcuda-core-limit':'60'}",
     "[{'op':'remove','path':'/metadata/annotations/tencent.com~1vcuda-core-limit'},"
     "{'op':'add','path':'/metadata/annotations/elasticgpu.io~1gpu-core-limit','value':'60'}," RM(
         "tencent.com~1vcuda-core") "," ADD(CORE, "30") "," SN "]",
     {"container \"train\": tencent.com/vcuda-core rewritten to elasticgpu.io/gpu-core 30 "
      "(percent of a card)",
      "annotation tencent.com/vcuda-core-limit rewritten to elasticgpu.io/gpu-core-limit 60 "
      "(percent of a card)"},
     NULL},
    {"inspur core-limit annotation",
     EGPU_WEBHOOK_MUTATE,
     false,
     0,
     "{'inspur.com/vcuda-core':'20'}",
     "{'inspur.com/vcuda-core-limit':'50'}",
     "[{'op':'remove','path':'/metadata/annotations/inspur.com~1vcuda-core-limit'},"
     "{'op':'add','path':'/metadata/annotations/elasticgpu.io~1gpu-core-limit','value':'50'}," RM(
         "inspur.com~1vcuda-core") "," ADD(CORE, "20") "," SN "]",
     {"container \"train\": inspur.com/vcuda-core rewritten to elasticgpu.io/gpu-core 20 "
      "(percent of a card)",
      "annotation inspur.com/vcuda-core-limit rewritten to elasticgpu.io/gpu-core-limit 50 "
      "(percent of a card)"},
     NULL},
    {"HAMi several shared cards: denied",
     EGPU_WEBHOOK_MUTATE_NVIDIA,
     false,
     0,
     "{'nvidia.com/gpu':'2','nvidia.com/gpumem':'1000'}",
     NULL,
     NULL,
     {NULL},
     "container \"train\": nvidia.com/gpu is 2 with a share of each card (nvidia.com/gpucores or "
     "gpumem); allowed: nvidia.com/gpu 1 to share one card, or whole cards without gpucores and "
     "gpumem (Elastic GPU shares at most one card per container)"},
    {"two names for the compute share: denied",
     EGPU_WEBHOOK_MUTATE,
     false,
     0,
     "{'tencent.com/vcuda-core':'30','elastic-gpu/gpu-percent':'30'}",
     NULL,
     NULL,
     {NULL},
     "container \"train\": asks both tencent.com/vcuda-core and elastic-gpu/gpu-percent; allowed: "
     "one name for the GPU compute share"},
    {"not a number: denied",
     EGPU_WEBHOOK_MUTATE,
     false,
     0,
     "{'tencent.com/vcuda-memory':'lots'}",
     NULL,
     NULL,
     {NULL},
     "container \"train\": tencent.com/vcuda-memory is lots; allowed: a whole number (1 = 256 "
     "MiB)"},
};

/* Apply w's patch to object (a copy), check the result is valid for
 * /validate and that mutating it again changes nothing. */
static void check_applied(const struct egpu_webhook_config *cfg, enum egpu_webhook_route r,
                          const json_t *object, const json_t *ops, const char *kind,
                          const char *group)
{
    json_t *doc = json_deep_copy(object);
    struct egpu_webhook_config vcfg = *cfg;
    struct wt_reply again;

    assert_int_equal(egpu__webhook_patch_apply(doc, ops), 0);
    /* A share converted without memory (tencent.com/vcuda-core alone) is
     * refused unless the operator set a default: test_share_memory. */
    if (vcfg.default_mem_per_core == 0)
        vcfg.default_mem_per_core = 1;
    again = wt_call(&vcfg, EGPU_WEBHOOK_VALIDATE, NULL,
                    wt_review("CREATE", group, "v1", kind, "alice", json_incref(doc), NULL));
    wt_assert_allowed_minimal(&again);
    wt_free(&again);
    again = wt_call(cfg, r, NULL, wt_review("CREATE", group, "v1", kind, "alice", doc, NULL));
    wt_assert_allowed_minimal(&again); /* idempotent */
    wt_free(&again);
}

static void test_compatible_names(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct mcase *c = &cases[i];
        struct egpu_webhook_config cfg = {.set_scheduler_name = true,
                                          .compat_nvidia = c->compat_nvidia,
                                          .aliyun_mem_mib = c->aliyun_mem_mib};
        json_t *pod = wt_pod(c->limits, c->annotations, "default-scheduler");
        struct wt_reply w;
        json_t *warnings;
        size_t n = 0;

        print_message("case %zu: %s\n", i, c->what);
        w = wt_call(&cfg, c->route, NULL,
                    wt_review("CREATE", "", "v1", "Pod", "alice", json_incref(pod), NULL));
        if (c->denied != NULL) {
            wt_assert_denied(&w, c->denied);
        } else if (c->ops == NULL) {
            wt_assert_allowed_minimal(&w);
        } else {
            assert_int_equal(w.result, EGPU_WEBHOOK_PATCHED);
            assert_true(json_is_true(json_object_get(wt_response(&w), "allowed")));
            assert_null(json_object_get(wt_response(&w), "status"));
            wt_assert_json(w.ops, c->ops);
            check_applied(&cfg, c->route, pod, w.ops, "Pod", "");
        }
        warnings = json_object_get(wt_response(&w), "warnings");
        while (c->warnings[n] != NULL) {
            assert_string_equal(json_string_value(json_array_get(warnings, n)), c->warnings[n]);
            n++;
        }
        assert_int_equal(json_array_size(warnings), n);
        wt_free(&w);
        json_decref(pod);
    }
}

/* spec.schedulerName: set on a GPU pod that names no scheduler or the
 * default one, never over another, never with --set-scheduler-name false. */
static void test_scheduler_name(void **state)
{
    struct egpu_webhook_config on = {.set_scheduler_name = true}, off = {0},
                               named = {.set_scheduler_name = true, .scheduler_name = "egpu-2"};
    const char *gpu = "{'elasticgpu.io/gpu-core':'30','elasticgpu.io/gpu-memory':'1024'}";
    struct wt_reply w;

    (void)state;
    w = wt_call(
        &on, EGPU_WEBHOOK_MUTATE, NULL,
        wt_review("CREATE", "", "v1", "Pod", "u", wt_pod(gpu, NULL, "default-scheduler"), NULL));
    wt_assert_json(w.ops, "[" SN "]");
    assert_null(json_object_get(wt_response(&w), "warnings"));
    wt_free(&w);
    w = wt_call(&on, EGPU_WEBHOOK_MUTATE, NULL,
                wt_review("CREATE", "", "v1", "Pod", "u", wt_pod(gpu, NULL, NULL), NULL));
    wt_assert_json(w.ops, "[{'op':'add','path':'/spec/schedulerName','value':"
                          "'elastic-gpu-scheduler'}]");
    wt_free(&w);
    w = wt_call(&named, EGPU_WEBHOOK_MUTATE, NULL,
                wt_review("CREATE", "", "v1", "Pod", "u", wt_pod(gpu, NULL, ""), NULL));
    wt_assert_json(w.ops, "[{'op':'replace','path':'/spec/schedulerName','value':'egpu-2'}]");
    wt_free(&w);
    w = wt_call(&on, EGPU_WEBHOOK_MUTATE, NULL,
                wt_review("CREATE", "", "v1", "Pod", "u", wt_pod(gpu, NULL, "volcano"), NULL));
    wt_assert_allowed_minimal(&w);
    wt_free(&w);
    w = wt_call(&off, EGPU_WEBHOOK_MUTATE, NULL,
                wt_review("CREATE", "", "v1", "Pod", "u",
                          wt_pod("{'tencent.com/vcuda-core':'30'}", NULL, "default-scheduler"),
                          NULL));
    wt_assert_json(w.ops, "[" RM("tencent.com~1vcuda-core") "," ADD(CORE, "30") "]");
    wt_free(&w);
    w = wt_call(&on, EGPU_WEBHOOK_MUTATE, NULL,
                wt_review("CREATE", "", "v1", "Pod", "u",
                          wt_pod("{'cpu':'1','example.com/vgpu':'1'}", NULL, "default-scheduler"),
                          NULL));
    wt_assert_allowed_minimal(&w); /* not a GPU pod of ours */
    wt_free(&w);
    /* a Pod UPDATE is never patched: resources and schedulerName are immutable */
    w = wt_call(
        &on, EGPU_WEBHOOK_MUTATE, NULL,
        wt_review("UPDATE", "", "v1", "Pod", "u",
                  wt_pod("{'tencent.com/vcuda-core':'30'}", "{'a':'b'}", "default-scheduler"),
                  wt_pod("{'tencent.com/vcuda-core':'30'}", NULL, "default-scheduler")));
    wt_assert_allowed_minimal(&w);
    wt_free(&w);
}

/* The pod templates of the workload kinds are rewritten where they lie;
 * schedulerName is left to their pods. */
static void test_templates(void **state)
{
    static const struct {
        const char *kind, *group, *prefix;
    } kinds[] = {
        {"Deployment", "apps", "/spec/template"},
        {"StatefulSet", "apps", "/spec/template"},
        {"DaemonSet", "apps", "/spec/template"},
        {"ReplicaSet", "apps", "/spec/template"},
        {"Job", "batch", "/spec/template"},
        {"CronJob", "batch", "/spec/jobTemplate/spec/template"},
    };
    struct egpu_webhook_config cfg = {.set_scheduler_name = true};

    (void)state;
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        for (int op = 0; op < 2; op++) {
            json_t *obj = wt_workload(kinds[i].kind, wt_pod("{'tencent.com/vcuda-core':'30'}", NULL,
                                                            "default-scheduler"));
            char want[1024];
            struct wt_reply w;

            snprintf(want, sizeof(want),
                     "[{'op':'remove','path':'%s/spec/containers/0/resources/limits/"
                     "tencent.com~1vcuda-core'},{'op':'add','path':'%s/spec/containers/0/"
                     "resources/limits/elasticgpu.io~1gpu-core','value':'30'}]",
                     kinds[i].prefix, kinds[i].prefix);
            w = wt_call(&cfg, EGPU_WEBHOOK_MUTATE, NULL,
                        wt_review(op ? "UPDATE" : "CREATE", kinds[i].group, "v1", kinds[i].kind,
                                  "u", json_incref(obj), op ? json_deep_copy(obj) : NULL));
            wt_assert_json(w.ops, want);
            assert_int_equal(json_array_size(json_object_get(wt_response(&w), "warnings")), 1);
            check_applied(&cfg, EGPU_WEBHOOK_MUTATE, obj, w.ops, kinds[i].kind, kinds[i].group);
            wt_free(&w);
            json_decref(obj);
        }
    }
    {
        /* a kind we do not handle, and an apps version we do not know */
        json_t *obj =
            wt_workload("Deployment", wt_pod("{'tencent.com/vcuda-core':'30'}", NULL, NULL));
        struct wt_reply w = wt_call(
            &cfg, EGPU_WEBHOOK_MUTATE, NULL,
            wt_review("CREATE", "apps", "v1beta2", "Deployment", "u", json_incref(obj), NULL));

        wt_assert_allowed_minimal(&w);
        wt_free(&w);
        w = wt_call(&cfg, EGPU_WEBHOOK_MUTATE, NULL,
                    wt_review("CREATE", "example.com", "v1", "Trainer", "u", obj, NULL));
        wt_assert_allowed_minimal(&w);
        wt_free(&w);
    }
}

/* The fixture's real pod (defaulted, managedFields, volumes, tolerations)
 * with gpu-manager's names in requests and limits: the patch names only the
 * four resource keys, the shared container's seccompProfile and
 * schedulerName, and applied it leaves every other field as it was. */
static void test_real_pod_nothing_dropped(void **state)
{
    json_t *review = wt_wire("admission_review_request_pod_create.json");
    json_t *pod = json_deep_copy(json_object_get(json_object_get(review, "request"), "object"));
    json_t *res = json_object_get(
        json_array_get(json_object_get(json_object_get(pod, "spec"), "containers"), 0),
        "resources");
    struct egpu_webhook_config cfg = {.set_scheduler_name = true};
    json_t *doc, *want;
    struct wt_reply w;

    (void)state;
    json_object_set_new(res, "limits", wt_json("{'tencent.com/vcuda-core':'50'}"));
    json_object_set_new(res, "requests", wt_json("{'tencent.com/vcuda-core':'50'}"));
    w = wt_call(&cfg, EGPU_WEBHOOK_MUTATE, NULL,
                wt_review("CREATE", "", "v1", "Pod", "kubernetes-admin", json_incref(pod), NULL));
    wt_assert_json(
        w.ops, "[" RM("tencent.com~1vcuda-core") "," ADD(
                   CORE, "50") ","
                               "{'op':'remove','path':'/spec/containers/0/resources/requests/"
                               "tencent.com~1vcuda-core'},{'op':'add','path':'/spec/containers/0/"
                               "resources/requests/elasticgpu.io~1gpu-core','value':'50'},"
                               "{'op':'add','path':'/spec/containers/0/securityContext','value':"
                               "{'seccompProfile':" WT_SECCOMP "}}," SN "]");
    doc = json_deep_copy(pod);
    assert_int_equal(egpu__webhook_patch_apply(doc, w.ops), 0);
    want = json_deep_copy(pod);
    res = json_object_get(
        json_array_get(json_object_get(json_object_get(want, "spec"), "containers"), 0),
        "resources");
    json_object_set_new(res, "limits", wt_json("{'elasticgpu.io/gpu-core':'50'}"));
    json_object_set_new(res, "requests", wt_json("{'elasticgpu.io/gpu-core':'50'}"));
    json_object_set_new(
        json_array_get(json_object_get(json_object_get(want, "spec"), "containers"), 0),
        "securityContext", wt_json("{'seccompProfile':" WT_SECCOMP "}"));
    json_object_set_new(json_object_get(want, "spec"), "schedulerName",
                        json_string("elastic-gpu-scheduler"));
    assert_true(json_equal(doc, want));
    json_decref(doc);
    json_decref(want);
    json_decref(pod);
    json_decref(review);
    wt_free(&w);
}

/* A Pod's share that names no gpu-memory (here tencent.com/vcuda-core
 * alone, as a tencent pod moving over asks): without
 * --default-memory-per-core /validate refuses it naming gpu-memory; with
 * it /mutate writes gpu-core x MiB with a warning, and the result passes
 * /validate with no default at all. A template is not given memory (its
 * pods are, when created); whole cards never. */
static void test_share_memory(void **state)
{
    struct egpu_webhook_config none = {.set_scheduler_name = true};
    struct egpu_webhook_config dflt = {.set_scheduler_name = true, .default_mem_per_core = 400};
    json_t *pod = wt_pod("{'tencent.com/vcuda-core':'30'}", NULL, "default-scheduler");
    json_t *doc, *warnings, *obj;
    struct wt_reply w;

    (void)state;
    w = wt_call(&none, EGPU_WEBHOOK_MUTATE, NULL,
                wt_review("CREATE", "", "v1", "Pod", "alice", json_incref(pod), NULL));
    wt_assert_json(w.ops, "[" RM("tencent.com~1vcuda-core") "," ADD(CORE, "30") "," SN "]");
    doc = json_deep_copy(pod);
    assert_int_equal(egpu__webhook_patch_apply(doc, w.ops), 0);
    wt_free(&w);
    w = wt_call(&none, EGPU_WEBHOOK_VALIDATE, NULL,
                wt_review("CREATE", "", "v1", "Pod", "alice", doc, NULL));
    wt_assert_denied(&w, "container \"train\": elasticgpu.io/gpu-core is 30 (a share of one card) "
                         "without elasticgpu.io/gpu-memory; allowed: gpu-memory in MiB with every "
                         "share, in requests and limits, e.g. elasticgpu.io/gpu-memory: \"4096\" "
                         "(a share is booked and limited to the memory it names)");
    wt_free(&w);

    w = wt_call(&dflt, EGPU_WEBHOOK_MUTATE, NULL,
                wt_review("CREATE", "", "v1", "Pod", "alice", json_incref(pod), NULL));
    wt_assert_json(w.ops, "[" RM("tencent.com~1vcuda-core") "," ADD(CORE, "30") "," ADD(
                              MEM, "12000") "," SN "]");
    warnings = json_object_get(wt_response(&w), "warnings");
    assert_int_equal(json_array_size(warnings), 2);
    assert_string_equal(json_string_value(json_array_get(warnings, 1)),
                        "container \"train\": elasticgpu.io/gpu-memory set to 12000 MiB "
                        "(elasticgpu.io/gpu-core 30 x 400 MiB, the cluster's default memory per "
                        "gpu-core percent); name elasticgpu.io/gpu-memory in requests and limits "
                        "to choose");
    check_applied(&none, EGPU_WEBHOOK_MUTATE, pod, w.ops, "Pod", "");
    doc = json_deep_copy(pod);
    assert_int_equal(egpu__webhook_patch_apply(doc, w.ops), 0);
    wt_free(&w);
    w = wt_call(&none, EGPU_WEBHOOK_VALIDATE, NULL,
                wt_review("CREATE", "", "v1", "Pod", "alice", doc, NULL));
    wt_assert_allowed_minimal(&w);
    wt_free(&w);
    json_decref(pod);

    /* Whole cards keep all their memory. */
    pod = wt_pod("{'elasticgpu.io/gpu-core':'200'}", NULL, "elastic-gpu-scheduler");
    w = wt_call(&dflt, EGPU_WEBHOOK_MUTATE, NULL,
                wt_review("CREATE", "", "v1", "Pod", "alice", pod, NULL));
    wt_assert_allowed_minimal(&w);
    wt_free(&w);

    /* A template: converted, no memory added; it validates with the default. */
    obj = wt_workload("Deployment", wt_pod("{'elasticgpu.io/gpu-core':'30'}", NULL, NULL));
    w = wt_call(&dflt, EGPU_WEBHOOK_MUTATE, NULL,
                wt_review("CREATE", "apps", "v1", "Deployment", "u", json_incref(obj), NULL));
    wt_assert_allowed_minimal(&w);
    wt_free(&w);
    w = wt_call(&dflt, EGPU_WEBHOOK_VALIDATE, NULL,
                wt_review("CREATE", "apps", "v1", "Deployment", "u", json_incref(obj), NULL));
    wt_assert_allowed_minimal(&w);
    wt_free(&w);
    w = wt_call(&none, EGPU_WEBHOOK_VALIDATE, NULL,
                wt_review("CREATE", "apps", "v1", "Deployment", "u", obj, NULL));
    assert_false(json_is_true(json_object_get(wt_response(&w), "allowed")));
    wt_free(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_compatible_names), cmocka_unit_test(test_scheduler_name),
        cmocka_unit_test(test_templates),        cmocka_unit_test(test_real_pod_nothing_dropped),
        cmocka_unit_test(test_share_memory),
    };

    egpu_log_level = -1;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
