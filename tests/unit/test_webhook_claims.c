/* tests/unit/test_webhook_claims.c - pods use claims (src/webhook/claims.c)
 * through the real handler, one row per rule: a Pod CREATE whose
 * annotation egpuc.elasticgpu.io/<container>: <claim> names an
 * ElasticGPUClaim, looked up in a fake cache and a fake API server; the
 * exact JSON Patch (decoded) and warnings, or the exact denial, out. Each
 * patch is applied as the API server would: the result passes /validate,
 * and a second pass over it (reinvocationPolicy: IfNeeded) makes no patch.
 * On UPDATE, /validate refuses a claim annotation added, changed or
 * removed.
 */
#include "webhook_testutil.h"

#define ANN     "egpuc.elasticgpu.io/train"
#define C0      "/spec/containers/0/resources"
#define SN_ADD  "{'op':'add','path':'/spec/schedulerName','value':'elastic-gpu-scheduler'}"
#define CORE    "elasticgpu.io/gpu-core"
#define MEM     "elasticgpu.io/gpu-memory"
#define TENCENT "tencent.com/vcuda-core"

/* The fake lookup: claims in the cache, and in the API server. */
struct fake {
    json_t *cache, *live; /* "ns/name" -> ElasticGPUClaim */
    bool down;            /* the API server does not answer */
    int gets, fresh_gets;
};

static int fake_get(void *ud, const char *ns, const char *name, bool fresh, json_t **out,
                    struct egpu_error *err)
{
    struct fake *f = ud;
    char key[400];
    json_t *obj;

    snprintf(key, sizeof(key), "%s/%s", ns, name);
    f->gets++;
    if (fresh) {
        f->fresh_gets++;
        if (f->down)
            return egpu_error_set(err, -ECONNREFUSED,
                                  "GET /apis/elasticgpu.io/v1alpha1/namespaces/%s/"
                                  "elasticgpuclaims/%s: connection refused",
                                  ns, name);
    }
    obj = json_object_get(fresh ? f->live : f->cache, key);
    if (obj == NULL)
        return -ENOENT;
    *out = json_incref(obj);
    return 0;
}

/* An ElasticGPUClaim ml/name with spec requests (JSON with ') and status
 * (JSON with ', or NULL). */
static json_t *claim(const char *name, const char *requests, const char *status)
{
    json_t *c = json_pack("{s:s, s:s, s:{s:s, s:s, s:s}, s:{s:{s:o}}}", "apiVersion",
                          "elasticgpu.io/v1alpha1", "kind", "ElasticGPUClaim", "metadata", "name",
                          name, "namespace", "ml", "uid", "u-1", "spec", "resources", "requests",
                          wt_json(requests));

    assert_non_null(c);
    if (status != NULL)
        json_object_set_new(c, "status", wt_json(status));
    return c;
}

#define SHARE30 "{'elasticgpu.io/gpu-core':30,'elasticgpu.io/gpu-memory':8192}"
#define BOUND30                                                              \
    "{'phase':'Bound','elasticGPUName':'egpu-1','capacity':{'elasticgpu.io/" \
    "gpu-core':30,'elasticgpu.io/gpu-memory':8192}}"
#define TFLOPS100 "{'elasticgpu.io/gpu-tflops':100,'elasticgpu.io/gpu-memory':16384}"
#define BOUND33                                                              \
    "{'phase':'Bound','elasticGPUName':'egpu-2','capacity':{'elasticgpu.io/" \
    "gpu-core':33,'elasticgpu.io/gpu-memory':16384}}"
#define WHOLE2 "{'elasticgpu.io/gpu-core':200}"
#define BOUND200 \
    "{'phase':'Bound','elasticGPUName':'egpu-3','capacity':{'elasticgpu.io/gpu-core':200}}"
#define SHARE40 "{'elasticgpu.io/gpu-core':40,'elasticgpu.io/gpu-memory':4096}"
#define PENDING "{'phase':'Pending'}"
#define LOST    "{'phase':'Lost','elasticGPUName':'egpu-9'}"

/* The patch giving container 0 gpu-core core (and gpu-memory mem, when not
 * NULL) as requests and limits, and the scheduler. */
#define ADD_BOTH(res)                                         \
    "[{'op':'add','path':'" C0 "/requests','value':" res "}," \
    "{'op':'add','path':'" C0 "/limits','value':" res "}," SN_ADD "]"

struct ccase {
    const char *what;
    const char *annotation;   /* the value of ANN, or NULL: none */
    const char *limits;       /* the container's own resources.limits, or NULL */
    const char *cache_status; /* the claim "notebook" in the cache: status, or "-" absent */
    const char *cache_spec;
    const char *live_status; /* ... in the API server, "-" absent */
    const char *live_spec;
    bool down;           /* the API server does not answer */
    bool no_source;      /* cfg.claims NULL */
    const char *ops;     /* the patch, when allowed */
    const char *warning; /* the one warning, when allowed */
    const char *denied;  /* the denial's message, or NULL */
    int fresh_gets;      /* live GETs made: -1 = not checked */
};

#define MISSING_MSG "annotation " ANN ": ElasticGPUClaim ml/notebook not found"

static const struct ccase cases[] = {
    {"Bound gpushare claim: its capacity", "notebook", NULL, BOUND30, SHARE30, BOUND30, SHARE30,
     false, false, ADD_BOTH("{'" CORE "':'30','" MEM "':'8192'}"),
     "container \"train\": elasticgpu.io/gpu-core 30 and elasticgpu.io/gpu-memory 8192 from "
     "ElasticGPUClaim ml/notebook (Bound to ElasticGPU egpu-1)",
     NULL, 0},
    {"Bound TFLOPS claim: the percent it resolved to", "notebook", NULL, BOUND33, TFLOPS100,
     BOUND33, TFLOPS100, false, false, ADD_BOTH("{'" CORE "':'33','" MEM "':'16384'}"),
     "container \"train\": elasticgpu.io/gpu-core 33 and elasticgpu.io/gpu-memory 16384 from "
     "ElasticGPUClaim ml/notebook (Bound to ElasticGPU egpu-2)",
     NULL, 0},
    {"Bound whole cards: gpu-core 200, no memory", "notebook", NULL, BOUND200, WHOLE2, BOUND200,
     WHOLE2, false, false, ADD_BOTH("{'" CORE "':'200'}"),
     "container \"train\": elasticgpu.io/gpu-core 200 from ElasticGPUClaim ml/notebook (Bound to "
     "ElasticGPU egpu-3)",
     NULL, 0},
    {"Pending (WaitForFirstConsumer) core claim: its requests", "notebook", NULL, PENDING, SHARE40,
     PENDING, SHARE40, false, false, ADD_BOTH("{'" CORE "':'40','" MEM "':'4096'}"),
     "container \"train\": elasticgpu.io/gpu-core 40 and elasticgpu.io/gpu-memory 4096 from "
     "ElasticGPUClaim ml/notebook (Pending: its requests)",
     NULL, 1 /* a Pending claim may be Bound by now: asked before taking its requests */},
    {"the own namespace spelled out", "ml/notebook", NULL, BOUND30, SHARE30, BOUND30, SHARE30,
     false, false, ADD_BOTH("{'" CORE "':'30','" MEM "':'8192'}"),
     "container \"train\": elasticgpu.io/gpu-core 30 and elasticgpu.io/gpu-memory 8192 from "
     "ElasticGPUClaim ml/notebook (Bound to ElasticGPU egpu-1)",
     NULL, 0},
    {"created a moment before the pod: not cached yet, a live GET finds it", "notebook", NULL, "-",
     NULL, BOUND30, SHARE30, false, false, ADD_BOTH("{'" CORE "':'30','" MEM "':'8192'}"),
     "container \"train\": elasticgpu.io/gpu-core 30 and elasticgpu.io/gpu-memory 8192 from "
     "ElasticGPUClaim ml/notebook (Bound to ElasticGPU egpu-1)",
     NULL, 1},
    {"the cache says Pending TFLOPS, the API server Bound: bound", "notebook", NULL, PENDING,
     TFLOPS100, BOUND33, TFLOPS100, false, false, ADD_BOTH("{'" CORE "':'33','" MEM "':'16384'}"),
     "container \"train\": elasticgpu.io/gpu-core 33 and elasticgpu.io/gpu-memory 16384 from "
     "ElasticGPUClaim ml/notebook (Bound to ElasticGPU egpu-2)",
     NULL, 1},
    {"API server down, the cache has it Bound: admitted", "notebook", NULL, BOUND30, SHARE30, "-",
     NULL, true, false, ADD_BOTH("{'" CORE "':'30','" MEM "':'8192'}"),
     "container \"train\": elasticgpu.io/gpu-core 30 and elasticgpu.io/gpu-memory 8192 from "
     "ElasticGPUClaim ml/notebook (Bound to ElasticGPU egpu-1)",
     NULL, 0},
    {"missing (in neither)", "notebook", NULL, "-", NULL, "-", NULL, false, false, NULL, NULL,
     MISSING_MSG, 1},
    {"the cache still has it, the API server not: missing", "notebook", NULL, LOST, SHARE30, "-",
     NULL, false, false, NULL, NULL, MISSING_MSG, 1},
    {"Lost", "notebook", NULL, LOST, SHARE30, LOST, SHARE30, false, false, NULL, NULL,
     "annotation " ANN ": ElasticGPUClaim ml/notebook is Lost: its ElasticGPU egpu-9 is gone; "
     "allowed: a Bound claim, or a Pending one (create the claim again)",
     1},
    {"Pending and asking gpu-tflops", "notebook", NULL, PENDING, TFLOPS100, PENDING, TFLOPS100,
     false, false, NULL, NULL,
     "annotation " ANN
     ": ElasticGPUClaim ml/notebook is Pending and asks elasticgpu.io/gpu-tflops; "
     "its gpu-core percent is known only once it is Bound (it depends on the card it lands on); "
     "allowed: a Bound claim, or a Pending one asking elasticgpu.io/gpu-core",
     1},
    {"another namespace", "prod/notebook", NULL, BOUND30, SHARE30, BOUND30, SHARE30, false, false,
     NULL, NULL,
     "annotation " ANN ": claim \"prod/notebook\" is in another namespace; allowed: the name of an "
     "ElasticGPUClaim in the pod's own namespace ml",
     -1},
    {"the container asks gpu-core itself", "notebook", "{'elasticgpu.io/gpu-core':'50'}", BOUND30,
     SHARE30, BOUND30, SHARE30, false, false, NULL, NULL,
     "container \"train\" uses claim notebook (annotation " ANN
     ") and also requests elasticgpu.io/gpu-core; remove one",
     -1},
    {"the container asks a compatible name", "notebook",
     "{'tencent.com/vcuda-core':'30','tencent.com/vcuda-memory':'16'}", BOUND30, SHARE30, BOUND30,
     SHARE30, false, false, NULL, NULL,
     "container \"train\" uses claim notebook (annotation " ANN
     ") and also requests tencent.com/vcuda-core, tencent.com/vcuda-memory; remove one",
     -1},
    {"the container asks other values than the claim's", "notebook",
     "{'elasticgpu.io/gpu-core':'30','elasticgpu.io/gpu-memory':'4096'}", BOUND30, SHARE30, BOUND30,
     SHARE30, false, false, NULL, NULL,
     "container \"train\" uses claim notebook (annotation " ANN
     ") and also requests elasticgpu.io/gpu-core, elasticgpu.io/gpu-memory; remove one",
     -1},
    {"API server down and not cached: refused (fail closed)", "notebook", NULL, "-", NULL, "-",
     NULL, true, false, NULL, NULL,
     "annotation " ANN ": cannot look up ElasticGPUClaim ml/notebook (GET "
     "/apis/elasticgpu.io/v1alpha1/namespaces/ml/elasticgpuclaims/notebook: connection refused); "
     "the pod is refused rather than admitted without its claim's GPU limit, try again",
     1},
    {"no claim source at all: refused", "notebook", NULL, BOUND30, SHARE30, BOUND30, SHARE30, false,
     true, NULL, NULL,
     "annotation " ANN ": cannot look up ElasticGPUClaim ml/notebook (this webhook has no access "
     "to ElasticGPUClaims); the pod is refused rather than admitted without its claim's GPU "
     "limit, try again",
     -1},
    {"a malformed claim", "notebook", NULL, BOUND30, "{'elasticgpu.io/gpu-core':150}", BOUND30,
     "{'elasticgpu.io/gpu-core':150}", false, false, NULL, NULL,
     "annotation " ANN ": ElasticGPUClaim ml/notebook is malformed: "
     "spec.resources.requests.elasticgpu.io/gpu-core is 150; allowed: 1..99 to share one card, "
     "or a multiple of 100 for whole cards",
     1},
    {"no claim annotation: nothing looked up", NULL, NULL, BOUND30, SHARE30, BOUND30, SHARE30,
     false, false, NULL, NULL, NULL, 0},
};

static void fill(json_t *map, const char *status, const char *spec)
{
    if (strcmp(status, "-") != 0)
        json_object_set_new(map, "ml/notebook", claim("notebook", spec, status));
}

/* The patched pod passes /validate, and /mutate again patches nothing. */
static void check_applied(const struct egpu_webhook_config *cfg, const json_t *pod,
                          const json_t *ops)
{
    json_t *doc = json_deep_copy(pod);
    struct wt_reply again;

    assert_int_equal(egpu__webhook_patch_apply(doc, ops), 0);
    again = wt_call(cfg, EGPU_WEBHOOK_VALIDATE, NULL,
                    wt_review("CREATE", "", "v1", "Pod", "alice", json_incref(doc), NULL));
    wt_assert_allowed_minimal(&again);
    wt_free(&again);
    again = wt_call(cfg, EGPU_WEBHOOK_MUTATE, NULL,
                    wt_review("CREATE", "", "v1", "Pod", "alice", doc, NULL));
    wt_assert_allowed_minimal(&again); /* idempotent */
    wt_free(&again);
}

static void test_claims(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct ccase *c = &cases[i];
        struct fake f = {.cache = json_object(), .live = json_object(), .down = c->down};
        struct egpu_webhook_claims src = {.get = fake_get, .ud = &f};
        struct egpu_webhook_config cfg = {.set_scheduler_name = true,
                                          .claims = c->no_source ? NULL : &src};
        char ann[600];
        json_t *pod, *warnings;
        struct wt_reply w;

        print_message("case %zu: %s\n", i, c->what);
        fill(f.cache, c->cache_status, c->cache_spec);
        fill(f.live, c->live_status, c->live_spec);
        if (c->annotation != NULL)
            snprintf(ann, sizeof(ann), "{'team':'ml','" ANN "':'%s'}", c->annotation);
        pod = wt_pod(c->limits, c->annotation ? ann : NULL, NULL);
        w = wt_call(&cfg, EGPU_WEBHOOK_MUTATE, NULL,
                    wt_review("CREATE", "", "v1", "Pod", "alice", json_incref(pod), NULL));
        if (c->denied != NULL) {
            wt_assert_denied(&w, c->denied);
            assert_null(json_object_get(wt_response(&w), "warnings"));
        } else if (c->ops == NULL) {
            wt_assert_allowed_minimal(&w);
            assert_int_equal(f.gets, 0);
        } else {
            assert_int_equal(w.result, EGPU_WEBHOOK_PATCHED);
            assert_true(json_is_true(json_object_get(wt_response(&w), "allowed")));
            wt_assert_json(w.ops, c->ops);
            warnings = json_object_get(wt_response(&w), "warnings");
            assert_int_equal(json_array_size(warnings), 1);
            assert_string_equal(json_string_value(json_array_get(warnings, 0)), c->warning);
        }
        if (c->fresh_gets >= 0)
            assert_int_equal(f.fresh_gets, c->fresh_gets);
        if (c->ops != NULL)
            check_applied(&cfg, pod, w.ops);
        wt_free(&w);
        json_decref(pod);
        json_decref(f.cache);
        json_decref(f.live);
    }
}

/* A pod of two containers, both wrong: every problem is reported, and a
 * claim on an init container names the containers there are. */
static void test_every_problem_reported(void **state)
{
    struct fake f = {.cache = json_object(), .live = json_object()};
    struct egpu_webhook_claims src = {.get = fake_get, .ud = &f};
    struct egpu_webhook_config cfg = {.set_scheduler_name = true, .claims = &src};
    json_t *pod = wt_json(
        "{'apiVersion':'v1','kind':'Pod','metadata':{'name':'p','namespace':'ml','annotations':{"
        "'egpuc.elasticgpu.io/train':'gone','egpuc.elasticgpu.io/setup':'notebook'}},"
        "'spec':{'initContainers':[{'name':'setup','image':'i'}],'containers':[{'name':'train',"
        "'image':'t'},{'name':'log','image':'l'}]}}");
    struct wt_reply w;

    (void)state;
    fill(f.live, BOUND30, SHARE30);
    w = wt_call(&cfg, EGPU_WEBHOOK_MUTATE_NVIDIA, NULL,
                wt_review("CREATE", "", "v1", "Pod", "alice", pod, NULL));
    wt_assert_denied(&w, "annotation egpuc.elasticgpu.io/train: ElasticGPUClaim ml/gone not found; "
                         "annotation egpuc.elasticgpu.io/setup: the pod has no container "
                         "\"setup\"; allowed: one of its containers: train, log");
    wt_free(&w);
    json_decref(f.cache);
    json_decref(f.live);
}

/* Two containers using two claims: each gets its own, in one patch; the
 * other containers and the pod's own scheduler are left alone. */
static void test_two_containers(void **state)
{
    struct fake f = {.cache = json_object(), .live = json_object()};
    struct egpu_webhook_claims src = {.get = fake_get, .ud = &f};
    struct egpu_webhook_config cfg = {.set_scheduler_name = true, .claims = &src};
    json_t *pod = wt_json(
        "{'apiVersion':'v1','kind':'Pod','metadata':{'name':'p','namespace':'ml','annotations':{"
        "'egpuc.elasticgpu.io/a':'one','egpuc.elasticgpu.io/c':'two'}},"
        "'spec':{'schedulerName':'my-scheduler','containers':[{'name':'a','image':'a',"
        "'resources':{'limits':{'cpu':'1'},'requests':{'cpu':'1'}}},{'name':'b','image':'b'},"
        "{'name':'c','image':'c','resources':null}]}}");
    struct wt_reply w;

    (void)state;
    json_object_set_new(f.cache, "ml/one", claim("one", SHARE30, BOUND30));
    json_object_set_new(f.cache, "ml/two", claim("two", WHOLE2, BOUND200));
    w = wt_call(&cfg, EGPU_WEBHOOK_MUTATE, NULL,
                wt_review("CREATE", "", "v1", "Pod", "alice", json_incref(pod), NULL));
    assert_int_equal(w.result, EGPU_WEBHOOK_PATCHED);
    wt_assert_json(
        w.ops, "[{'op':'add','path':'/spec/containers/0/resources/limits/elasticgpu.io~1gpu-core',"
               "'value':'30'},{'op':'add','path':'/spec/containers/0/resources/limits/"
               "elasticgpu.io~1gpu-memory','value':'8192'},{'op':'add','path':'/spec/containers/"
               "0/resources/requests/elasticgpu.io~1gpu-core','value':'30'},{'op':'add','path':"
               "'/spec/containers/0/resources/requests/elasticgpu.io~1gpu-memory','value':'8192'"
               "},{'op':'add','path':'/spec/containers/0/securityContext','value':{"
               "'seccompProfile':" WT_SECCOMP "}},"
               "{'op':'replace','path':'/spec/containers/2/resources','value':{'requests':{"
               "'elasticgpu.io/gpu-core':'200'},'limits':{'elasticgpu.io/gpu-core':'200'}}}]");
    assert_int_equal(f.fresh_gets, 0);
    check_applied(&cfg, pod, w.ops);
    wt_free(&w);
    json_decref(pod);
    json_decref(f.cache);
    json_decref(f.live);
}

/* A pod's claim annotations are fixed at creation: /validate refuses an
 * UPDATE that adds, changes or removes one, from any user. */
struct ucase {
    const char *what;
    const char *old_ann, *new_ann; /* annotations, JSON with ' */
    const char *user;
    const char *denied; /* NULL: allowed */
};

static const struct ucase ucases[] = {
    {"changed", "{'" ANN "':'notebook'}", "{'" ANN "':'other'}", "alice",
     "annotation " ANN " cannot change after the pod is created (was \"notebook\", now \"other\"; "
     "the scheduler and the controller rely on the claims a pod was created with); create a new "
     "pod"},
    {"added", "{'team':'ml'}", "{'team':'ml','" ANN "':'notebook'}", "alice",
     "annotation " ANN " cannot be added to a pod after it is created (the scheduler and the "
     "controller rely on the claims a pod was created with); create a new pod"},
    {"removed", "{'team':'ml','" ANN "':'notebook'}", "{'team':'ml'}", "alice",
     "annotation " ANN " cannot be removed from a pod (the scheduler and the controller rely on "
     "the claims a pod was created with); delete the pod instead"},
    {"removed by the scheduler too", "{'" ANN "':'notebook'}", "{}", EGPU_WEBHOOK_SCHEDULER_USER,
     "annotation " ANN " cannot be removed from a pod (the scheduler and the controller rely on "
     "the claims a pod was created with); delete the pod instead"},
    {"kept, another annotation changed", "{'team':'ml','" ANN "':'notebook'}",
     "{'team':'ai','" ANN "':'notebook'}", "alice", NULL},
    {"none before or after", "{'team':'ml'}", "{'team':'ai'}", "alice", NULL},
};

static void test_update_immutable(void **state)
{
    struct egpu_webhook_config cfg = {.set_scheduler_name = true};

    (void)state;
    for (size_t i = 0; i < sizeof(ucases) / sizeof(ucases[0]); i++) {
        const struct ucase *c = &ucases[i];
        const char *res = "{'elasticgpu.io/gpu-core':'30'}";
        json_t *old = wt_pod(res, c->old_ann, "elastic-gpu-scheduler");
        json_t *now = wt_pod(res, c->new_ann, "elastic-gpu-scheduler");
        struct wt_reply w;

        print_message("case %zu: %s\n", i, c->what);
        w = wt_call(&cfg, EGPU_WEBHOOK_VALIDATE, NULL,
                    wt_review("UPDATE", "", "v1", "Pod", c->user, now, old));
        if (c->denied != NULL)
            wt_assert_denied(&w, c->denied);
        else
            wt_assert_allowed_minimal(&w);
        wt_free(&w);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_claims),
        cmocka_unit_test(test_every_problem_reported),
        cmocka_unit_test(test_two_containers),
        cmocka_unit_test(test_update_immutable),
    };

    egpu_log_level = -1;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
