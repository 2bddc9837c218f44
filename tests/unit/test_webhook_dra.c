/* tests/unit/test_webhook_dra.c - egpu-webhook --mode dra (src/webhook/dra.c)
 * through the real handler: a GPU pod's patch applied as the API server
 * would, and the pod that results, whole: its GPU names gone from requests
 * and limits, a resources.claims entry per GPU container, the
 * resourceClaims naming egpu-<hash> templates and the annotation
 * elasticgpu.io/dra-claims listing their specs (src/api's own, so the name
 * is checked against the spec). Then /validate on it (allowed), a second
 * pass (no patch), and the guard of the annotation: forged on CREATE,
 * changed or removed on UPDATE, carried outside DRA mode. A container using
 * an ElasticGPUClaim gets the controller's ResourceClaim for it.
 */
#include "webhook_testutil.h"

static const struct egpu_webhook_config dra_cfg = {.mode = EGPU_WEBHOOK_MODE_DRA,
                                                   .set_scheduler_name = true};

/* The template name of the spec egpu_api_dra_claim_spec makes for ask. */
static void template_of(int64_t core, int64_t mem, const char *models, json_t **spec,
                        char name[EGPU_API_DRA_TEMPLATE_NAME_MAX])
{
    struct egpu_api_gpu_ask ask = {.core_pct = core, .mem_mib = mem, .has_mem = mem > 0};
    struct egpu_error err = {0};

    assert_int_equal(egpu_api_dra_claim_spec(&ask, models, spec, &err), 0);
    assert_int_equal(egpu_api_dra_template_name(*spec, name, &err), 0);
}

/* The pod mutated on route r with cfg: the patch applied (the result is
 * returned; the reply's warnings to *warnings when not NULL). */
static json_t *mutated(const struct egpu_webhook_config *cfg, json_t *pod, json_t **warnings)
{
    json_t *doc = json_deep_copy(pod);
    struct wt_reply w = wt_call(cfg, EGPU_WEBHOOK_MUTATE, NULL,
                                wt_review("CREATE", "", "v1", "Pod", "alice", pod, NULL));

    assert_int_equal(w.status, 200);
    if (!json_is_true(json_object_get(wt_response(&w), "allowed")))
        fail_msg("denied: %s", w.text);
    assert_non_null(w.ops);
    assert_int_equal(w.result, EGPU_WEBHOOK_PATCHED);
    assert_int_equal(egpu__webhook_patch_apply(doc, w.ops), 0);
    if (warnings != NULL)
        *warnings = json_incref(json_object_get(wt_response(&w), "warnings"));
    wt_free(&w);
    return doc;
}

/* /validate (CREATE) allows doc, and /mutate again makes no patch. */
static void check_settled(const struct egpu_webhook_config *cfg, const json_t *doc)
{
    struct wt_reply w;

    w = wt_call(cfg, EGPU_WEBHOOK_VALIDATE, NULL,
                wt_review("CREATE", "", "v1", "Pod", "alice", json_deep_copy(doc), NULL));
    wt_assert_allowed_minimal(&w);
    wt_free(&w);
    w = wt_call(cfg, EGPU_WEBHOOK_MUTATE, NULL,
                wt_review("CREATE", "", "v1", "Pod", "alice", json_deep_copy(doc), NULL));
    wt_assert_allowed_minimal(&w);
    wt_free(&w);
}

static json_t *ann_claims(const json_t *pod)
{
    const char *t = json_string_value(json_object_get(
        json_object_get(json_object_get(pod, "metadata"), "annotations"), EGPU_ANN_DRA_CLAIMS));

    assert_non_null(t);
    return json_loads(t, 0, NULL);
}

static void test_share(void **state)
{
    json_t *spec, *doc, *claims, *warnings, *ctr, *want;
    char name[EGPU_API_DRA_TEMPLATE_NAME_MAX], text[512];

    (void)state;
    template_of(30, 4096, NULL, &spec, name);
    doc = mutated(&dra_cfg,
                  wt_pod("{'elasticgpu.io/gpu-core':'30','elasticgpu.io/gpu-memory':'4096',"
                         "'cpu':'2'}",
                         NULL, NULL),
                  &warnings);
    ctr = json_array_get(json_object_get(json_object_get(doc, "spec"), "containers"), 0);
    wt_assert_json(json_object_get(ctr, "resources"),
                   "{'requests':{'elasticgpu.io/dra':'1'},'limits':{'cpu':'2',"
                   "'elasticgpu.io/dra':'1'},'claims':[{'name':'egpu-0','request':'gpu'}]}");
    /* elastic-gpu-scheduler places it, its extender scoring the nodes. */
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(doc, "spec"), "schedulerName")),
        "elastic-gpu-scheduler");
    /* The seccomp guard of a shared container stays. */
    assert_non_null(json_object_get(json_object_get(ctr, "securityContext"), "seccompProfile"));
    snprintf(text, sizeof(text), "[{'name':'egpu-0','resourceClaimTemplateName':'%s'}]", name);
    wt_assert_json(json_object_get(json_object_get(doc, "spec"), "resourceClaims"), text);
    claims = ann_claims(doc);
    want = json_pack("{s:O}", name, spec);
    assert_true(json_equal(claims, want));
    snprintf(text, sizeof(text),
             "container \"train\": elasticgpu.io/gpu-core 30 and gpu-memory 4096 MiB now come "
             "from ResourceClaimTemplate %s (pod claim egpu-0, request gpu)",
             name);
    assert_int_equal(json_array_size(warnings), 1);
    assert_string_equal(json_string_value(json_array_get(warnings, 0)), text);
    check_settled(&dra_cfg, doc);
    json_decref(want);
    json_decref(claims);
    json_decref(warnings);
    json_decref(spec);
    json_decref(doc);
}

/* Compatible names are converted first, then rewritten; whole cards with a
 * model get a count and the quoted selector. */
static void test_compat_whole_and_models(void **state)
{
    char name[EGPU_API_DRA_TEMPLATE_NAME_MAX];
    json_t *spec, *doc, *claims, *res;

    (void)state;
    template_of(30, 4096, NULL, &spec, name);
    doc = mutated(
        &dra_cfg,
        wt_pod("{'tencent.com/vcuda-core':'30','tencent.com/vcuda-memory':'16'}", NULL, NULL),
        NULL);
    res = json_object_get(
        json_array_get(json_object_get(json_object_get(doc, "spec"), "containers"), 0),
        "resources");
    wt_assert_json(json_object_get(res, "limits"), "{'elasticgpu.io/dra':'1'}");
    claims = ann_claims(doc);
    assert_true(json_equal(json_object_get(claims, name), spec));
    check_settled(&dra_cfg, doc);
    json_decref(claims);
    json_decref(spec);
    json_decref(doc);

    /* A hostile model stays one literal of the selector's list. */
    template_of(200, 0, "H100|\"] + [true] + [\"", &spec, name);
    doc = mutated(&dra_cfg,
                  wt_pod("{'elasticgpu.io/gpu-core':'200'}",
                         "{'elasticgpu.io/gpu-model':'H100|\\\"] + [true] + [\\\"'}", NULL),
                  NULL);
    claims = ann_claims(doc);
    assert_true(json_equal(json_object_get(claims, name), spec));
    res = json_object_get(
        json_array_get(json_object_get(json_object_get(spec, "devices"), "requests"), 0),
        "exactly");
    assert_int_equal(json_integer_value(json_object_get(res, "count")), 2);
    assert_string_equal(json_string_value(json_object_get(res, "deviceClassName")),
                        "gpu.elasticgpu.io");
    assert_string_equal(
        json_string_value(json_object_get(
            json_object_get(json_array_get(json_object_get(res, "selectors"), 0), "cel"),
            "expression")),
        "has(device.attributes[\"gpu.elasticgpu.io\"].productName) && "
        "device.attributes[\"gpu.elasticgpu.io\"].productName in "
        "[\"H100\", \"\\\"] + [true] + [\\\"\"]");
    check_settled(&dra_cfg, doc);
    json_decref(claims);
    json_decref(spec);
    json_decref(doc);
}

/* Containers 0 and 2 ask the same share, 1 none: one template, two claims;
 * requests go too; a tenant's own dra-claims annotation is overwritten. */
static void test_two_containers(void **state)
{
    char name[EGPU_API_DRA_TEMPLATE_NAME_MAX], text[512];
    json_t *spec, *pod, *doc, *claims, *ctrs;

    (void)state;
    template_of(50, 1024, NULL, &spec, name);
    pod = wt_json(
        "{'apiVersion':'v1','kind':'Pod','metadata':{'name':'p','namespace':'ml',"
        "'annotations':{'elasticgpu.io/dra-claims':'{\\\"egpu-0\\\":{}}'}},"
        "'spec':{'containers':["
        "{'name':'a','resources':{'requests':{'elasticgpu.io/gpu-core':'50',"
        "'elasticgpu.io/gpu-memory':'1024'},'limits':{'elasticgpu.io/gpu-core':'50',"
        "'elasticgpu.io/gpu-memory':'1024'}},'securityContext':{'seccompProfile':" WT_SECCOMP "}},"
        "{'name':'b','resources':{'limits':{'cpu':'1'}}},"
        "{'name':'c','resources':{'limits':{'elasticgpu.io/gpu-core':'50',"
        "'elasticgpu.io/gpu-memory':'1024'}},'securityContext':{'seccompProfile':" WT_SECCOMP
        "}}]}}");
    doc = mutated(&dra_cfg, pod, NULL);
    ctrs = json_object_get(json_object_get(doc, "spec"), "containers");
    wt_assert_json(json_object_get(json_array_get(ctrs, 0), "resources"),
                   "{'requests':{'elasticgpu.io/dra':'1'},'limits':{'elasticgpu.io/dra':'1'},"
                   "'claims':[{'name':'egpu-0','request':'gpu'}]}");
    wt_assert_json(json_object_get(json_array_get(ctrs, 1), "resources"), "{'limits':{'cpu':'1'}}");
    wt_assert_json(json_object_get(json_array_get(ctrs, 2), "resources"),
                   "{'requests':{'elasticgpu.io/dra':'1'},'limits':{'elasticgpu.io/dra':'1'},"
                   "'claims':[{'name':'egpu-2','request':'gpu'}]}");
    snprintf(text, sizeof(text),
             "[{'name':'egpu-0','resourceClaimTemplateName':'%s'},"
             "{'name':'egpu-2','resourceClaimTemplateName':'%s'}]",
             name, name);
    wt_assert_json(json_object_get(json_object_get(doc, "spec"), "resourceClaims"), text);
    claims = ann_claims(doc);
    assert_int_equal(json_object_size(claims), 1);
    assert_true(json_equal(json_object_get(claims, name), spec));
    check_settled(&dra_cfg, doc);
    json_decref(claims);
    json_decref(spec);
    json_decref(doc);
}

/* Reinvoked after a later webhook added a GPU container: the claim made on
 * the first pass is kept, the new container gets its own. */
static void test_reinvoked_with_a_new_container(void **state)
{
    char first[EGPU_API_DRA_TEMPLATE_NAME_MAX], second[EGPU_API_DRA_TEMPLATE_NAME_MAX];
    json_t *s1, *s2, *doc, *again, *claims;
    char text[512];

    (void)state;
    template_of(30, 4096, NULL, &s1, first);
    template_of(50, 1024, NULL, &s2, second);
    doc = mutated(
        &dra_cfg,
        wt_pod("{'elasticgpu.io/gpu-core':'30','elasticgpu.io/gpu-memory':'4096'}", NULL, NULL),
        NULL);
    json_array_append_new(
        json_object_get(json_object_get(doc, "spec"), "containers"),
        wt_json(
            "{'name':'sidecar','resources':{'limits':{'elasticgpu.io/gpu-core':'50',"
            "'elasticgpu.io/gpu-memory':'1024'}},'securityContext':{'seccompProfile':" WT_SECCOMP
            "}}"));
    again = mutated(&dra_cfg, doc, NULL);
    snprintf(text, sizeof(text),
             "[{'name':'egpu-0','resourceClaimTemplateName':'%s'},"
             "{'name':'egpu-1','resourceClaimTemplateName':'%s'}]",
             first, second);
    wt_assert_json(json_object_get(json_object_get(again, "spec"), "resourceClaims"), text);
    claims = ann_claims(again);
    assert_int_equal(json_object_size(claims), 2);
    assert_true(json_equal(json_object_get(claims, first), s1));
    assert_true(json_equal(json_object_get(claims, second), s2));
    check_settled(&dra_cfg, again);
    json_decref(claims);
    json_decref(again);
    json_decref(s1);
    json_decref(s2);
}

static void check_mutate_denied(const char *limits, const char *annotations, const char *message)
{
    struct wt_reply w = wt_call(
        &dra_cfg, EGPU_WEBHOOK_MUTATE, NULL,
        wt_review("CREATE", "", "v1", "Pod", "alice", wt_pod(limits, annotations, NULL), NULL));

    wt_assert_denied(&w, message);
    wt_free(&w);
}

/* What /validate would refuse is refused here: it cannot see the request
 * once rewritten. */
static void test_denied(void **state)
{
    (void)state;
    check_mutate_denied("{'elasticgpu.io/gpu-core':'150'}", NULL,
                        "container \"train\": elasticgpu.io/gpu-core is 150; allowed: 1..99 to "
                        "share one card, or a multiple of 100 for whole cards");
    check_mutate_denied("{'elasticgpu.io/gpu-core':'30'}", NULL,
                        "container \"train\": elasticgpu.io/gpu-core is 30 (a share of one card) "
                        "without elasticgpu.io/gpu-memory; allowed: gpu-memory in MiB with every "
                        "share, in requests and limits, e.g. elasticgpu.io/gpu-memory: \"4096\" "
                        "(a share is booked and limited to the memory it names)");
}

/* The cluster's GPUs judge a request as /validate would: a share larger
 * than the largest card, or a model the cluster lacks, is refused at
 * /mutate (the same pods pass without facts: nothing else refuses them). */
static void test_denied_by_the_cluster(void **state)
{
    static const char *const models[] = {"A100-SXM4-40GB"};
    const struct egpu_api_facts f = {.max_card_mib = 40960, .nmodels = 1, .models = models};
    const char *big = "{'elasticgpu.io/gpu-core':'30','elasticgpu.io/gpu-memory':'81920'}";
    const char *share = "{'elasticgpu.io/gpu-core':'30','elasticgpu.io/gpu-memory':'4096'}";
    const char *h100 = "{'elasticgpu.io/gpu-model':'H100'}";
    struct wt_reply w;
    const char *msg;

    (void)state;
    w = wt_call(&dra_cfg, EGPU_WEBHOOK_MUTATE, &f,
                wt_review("CREATE", "", "v1", "Pod", "alice", wt_pod(big, NULL, NULL), NULL));
    assert_false(json_is_true(json_object_get(wt_response(&w), "allowed")));
    msg = json_string_value(json_object_get(json_object_get(wt_response(&w), "status"), "message"));
    assert_non_null(msg);
    assert_non_null(strstr(msg, "largest card"));
    wt_free(&w);
    w = wt_call(&dra_cfg, EGPU_WEBHOOK_MUTATE, &f,
                wt_review("CREATE", "", "v1", "Pod", "alice", wt_pod(share, h100, NULL), NULL));
    assert_false(json_is_true(json_object_get(wt_response(&w), "allowed")));
    msg = json_string_value(json_object_get(json_object_get(wt_response(&w), "status"), "message"));
    assert_non_null(msg);
    assert_non_null(strstr(msg, "A100-SXM4-40GB"));
    wt_free(&w);
    /* no facts: both pass */
    json_decref(mutated(&dra_cfg, wt_pod(big, NULL, NULL), NULL));
    json_decref(mutated(&dra_cfg, wt_pod(share, h100, NULL), NULL));
}

static void check_validate(const struct egpu_webhook_config *cfg, const char *op, json_t *obj,
                           json_t *old, const char *message);

/* The claims the fake lookup has: "ns/name" -> ElasticGPUClaim. */
static int fake_get(void *ud, const char *ns, const char *name, bool fresh, json_t **out,
                    struct egpu_error *err)
{
    char key[400];
    json_t *obj;

    (void)fresh;
    (void)err;
    snprintf(key, sizeof(key), "%s/%s", ns, name);
    obj = json_object_get(ud, key);
    if (obj == NULL)
        return -ENOENT;
    *out = json_incref(obj);
    return 0;
}

/* ElasticGPUClaim ml/name asking requests (JSON with '), Pending. */
static json_t *egpu_claim(const char *name, const char *requests)
{
    json_t *c = json_pack("{s:s, s:s, s:{s:s, s:s, s:s}, s:{s:{s:o}}, s:{s:s}}", "apiVersion",
                          "elasticgpu.io/v1alpha1", "kind", "ElasticGPUClaim", "metadata", "name",
                          name, "namespace", "ml", "uid", "u-1", "spec", "resources", "requests",
                          wt_json(requests), "status", "phase", "Pending");

    assert_non_null(c);
    return c;
}

/* A container naming an ElasticGPUClaim gets the controller's ResourceClaim
 * for it (elasticgpu-<claim>, request gpu): the claim's resources removed
 * again, no template and no dra-claims entry; another container's own
 * request still gets its template. Settled: /validate allows the pod and a
 * second pass changes nothing. */
static void test_claims(void **state)
{
    json_t *have = json_object(), *doc, *warnings, *ctrs, *spec, *claims, *pod;
    struct egpu_webhook_claims src = {.get = fake_get, .ud = have};
    struct egpu_webhook_config cfg = dra_cfg;
    char name[EGPU_API_DRA_TEMPLATE_NAME_MAX], text[512];

    (void)state;
    cfg.claims = &src;
    json_object_set_new(have, "ml/gpushare-claim-a",
                        egpu_claim("gpushare-claim-a", "{'elasticgpu.io/gpu-core':30,"
                                                       "'elasticgpu.io/gpu-memory':4096}"));
    /* Only a claim: as the README's gpushare-egpuclass example's pods. */
    doc = mutated(&cfg,
                  wt_pod("{'cpu':'2'}", "{'egpuc.elasticgpu.io/train':'gpushare-claim-a'}", NULL),
                  &warnings);
    ctrs = json_object_get(json_object_get(doc, "spec"), "containers");
    wt_assert_json(json_object_get(json_array_get(ctrs, 0), "resources"),
                   "{'requests':{'elasticgpu.io/dra':'1'},'limits':{'cpu':'2',"
                   "'elasticgpu.io/dra':'1'},'claims':[{'name':'egpu-0','request':'gpu'}]}");
    wt_assert_json(json_object_get(json_object_get(doc, "spec"), "resourceClaims"),
                   "[{'name':'egpu-0','resourceClaimName':'elasticgpu-gpushare-claim-a'}]");
    assert_null(json_object_get(json_object_get(json_object_get(doc, "metadata"), "annotations"),
                                EGPU_ANN_DRA_CLAIMS));
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(doc, "spec"), "schedulerName")),
        "elastic-gpu-scheduler");
    /* A share: the seccomp guard is given as to any share. */
    assert_non_null(json_object_get(json_array_get(ctrs, 0), "securityContext"));
    assert_int_equal(json_array_size(warnings), 2);
    assert_string_equal(json_string_value(json_array_get(warnings, 1)),
                        "container \"train\": the GPU of ElasticGPUClaim gpushare-claim-a now "
                        "comes from ResourceClaim elasticgpu-gpushare-claim-a (pod claim egpu-0, "
                        "request gpu)");
    check_settled(&cfg, doc);
    /* The marker stands with the ResourceClaim of the claim the container's
     * annotation names, not another's. */
    json_object_set_new(json_object_get(json_object_get(doc, "metadata"), "annotations"),
                        "egpuc.elasticgpu.io/train", json_string("gpushare-claim-b"));
    check_validate(&cfg, "CREATE", json_deep_copy(doc), NULL,
                   "container \"train\": elasticgpu.io/dra marks a container whose GPU "
                   "egpu-webhook moved to a ResourceClaim, and this one has none "
                   "(resources.claims egpu-0, and the pod's resourceClaims entry of that name "
                   "naming a template of annotation elasticgpu.io/dra-claims or the "
                   "ResourceClaim of its ElasticGPUClaim); allowed: no elasticgpu.io/dra (ask "
                   "elasticgpu.io/gpu-core and gpu-memory: egpu-webhook adds it)");
    json_decref(warnings);
    json_decref(doc);

    /* With a second container asking on its own: its template, listed. */
    pod = wt_pod(NULL, "{'egpuc.elasticgpu.io/train':'gpushare-claim-a'}", NULL);
    ctrs = json_object_get(json_object_get(pod, "spec"), "containers");
    json_array_append_new(
        ctrs, wt_json("{'name':'side','image':'s','resources':{'limits':{"
                      "'elasticgpu.io/gpu-core':'20','elasticgpu.io/gpu-memory':'1024'}}}"));
    doc = mutated(&cfg, pod, NULL);
    template_of(20, 1024, NULL, &spec, name);
    snprintf(text, sizeof(text),
             "[{'name':'egpu-0','resourceClaimName':'elasticgpu-gpushare-claim-a'},"
             "{'name':'egpu-1','resourceClaimTemplateName':'%s'}]",
             name);
    wt_assert_json(json_object_get(json_object_get(doc, "spec"), "resourceClaims"), text);
    claims = ann_claims(doc);
    assert_int_equal(json_object_size(claims), 1);
    assert_true(json_equal(json_object_get(claims, name), spec));
    check_settled(&cfg, doc);
    json_decref(claims);
    json_decref(spec);
    json_decref(doc);

    /* A pod owner's own dra-claims annotation goes when there is no template. */
    doc = mutated(&cfg,
                  wt_pod(NULL,
                         "{'egpuc.elasticgpu.io/train':'gpushare-claim-a',"
                         "'elasticgpu.io/dra-claims':'{}'}",
                         NULL),
                  NULL);
    assert_null(json_object_get(json_object_get(json_object_get(doc, "metadata"), "annotations"),
                                EGPU_ANN_DRA_CLAIMS));
    json_decref(doc);
    json_decref(have);
}

/* What claims.c refuses in device-plugin mode is refused here too: the
 * claim must exist in the pod's namespace; a container also asking a GPU
 * itself; in DRA mode also a claim bound to an ElasticGPU (it has no
 * ResourceClaim) and one whose ResourceClaim name would pass 253 characters. */
static void test_claims_denied(void **state)
{
    json_t *have = json_object();
    struct egpu_webhook_claims src = {.get = fake_get, .ud = have};
    struct egpu_webhook_config cfg = dra_cfg;
    char longname[254], ann[400], msg[1024];
    struct wt_reply w;

    (void)state;
    cfg.claims = &src;
    json_object_set_new(have, "ml/c1", egpu_claim("c1", "{'elasticgpu.io/gpu-core':100}"));
    json_object_set_new(have, "other/c2", egpu_claim("c2", "{'elasticgpu.io/gpu-core':100}"));
    w = wt_call(&cfg, EGPU_WEBHOOK_MUTATE, NULL,
                wt_review("CREATE", "", "v1", "Pod", "alice",
                          wt_pod(NULL, "{'egpuc.elasticgpu.io/train':'c2'}", NULL), NULL));
    wt_assert_denied(&w, "annotation egpuc.elasticgpu.io/train: ElasticGPUClaim ml/c2 not found");
    wt_free(&w);
    w = wt_call(&cfg, EGPU_WEBHOOK_MUTATE, NULL,
                wt_review("CREATE", "", "v1", "Pod", "alice",
                          wt_pod("{'elasticgpu.io/gpu-core':'100'}",
                                 "{'egpuc.elasticgpu.io/train':'c1'}", NULL),
                          NULL));
    wt_assert_denied(&w, "container \"train\" uses claim c1 (annotation "
                         "egpuc.elasticgpu.io/train) and also requests elasticgpu.io/gpu-core; "
                         "remove one");
    wt_free(&w);
    json_object_set_new(have, "ml/old", egpu_claim("old", "{'elasticgpu.io/gpu-core':100}"));
    json_object_set_new(json_object_get(json_object_get(have, "ml/old"), "status"),
                        "elasticGPUName", json_string("egpu-7"));
    json_object_set_new(json_object_get(json_object_get(have, "ml/old"), "status"), "phase",
                        json_string("Bound"));
    w = wt_call(&cfg, EGPU_WEBHOOK_MUTATE, NULL,
                wt_review("CREATE", "", "v1", "Pod", "alice",
                          wt_pod(NULL, "{'egpuc.elasticgpu.io/train':'old'}", NULL), NULL));
    wt_assert_denied(&w, "annotation egpuc.elasticgpu.io/train: ElasticGPUClaim ml/old is bound "
                         "to ElasticGPU egpu-7, capacity kube-scheduler's allocator cannot see, "
                         "so egpu-controller --mode dra makes no ResourceClaim for it; allowed in "
                         "DRA mode: a claim not bound to and not naming an ElasticGPU");
    wt_free(&w);
    for (size_t i = 0; i < 250; i++) /* a DNS subdomain: labels of 63 */
        longname[i] = i % 64 == 63 ? '.' : 'a';
    longname[250] = '\0';
    snprintf(ann, sizeof(ann), "ml/%s", longname);
    json_object_set_new(have, ann, egpu_claim(longname, "{'elasticgpu.io/gpu-core':100}"));
    snprintf(ann, sizeof(ann), "{'egpuc.elasticgpu.io/train':'%s'}", longname);
    w = wt_call(&cfg, EGPU_WEBHOOK_MUTATE, NULL,
                wt_review("CREATE", "", "v1", "Pod", "alice", wt_pod(NULL, ann, NULL), NULL));
    snprintf(msg, sizeof(msg),
             "container \"train\" uses ElasticGPUClaim %s: with elasticgpu- in front its name "
             "passes 253 characters, so egpu-controller --mode dra makes no ResourceClaim for it; "
             "allowed: a claim name of at most 242 characters",
             longname);
    wt_assert_denied(&w, msg);
    wt_free(&w);
    json_decref(have);
}

static void check_validate(const struct egpu_webhook_config *cfg, const char *op, json_t *obj,
                           json_t *old, const char *message)
{
    struct wt_reply w = wt_call(cfg, EGPU_WEBHOOK_VALIDATE, NULL,
                                wt_review(op, "", "v1", "Pod", "alice", obj, old));

    if (message == NULL)
        wt_assert_allowed_minimal(&w);
    else
        wt_assert_denied(&w, message);
    wt_free(&w);
}

static void set_ann(json_t *pod, const char *value)
{
    json_t *ann = json_object_get(json_object_get(pod, "metadata"), "annotations");

    if (value == NULL)
        json_object_del(ann, EGPU_ANN_DRA_CLAIMS);
    else
        json_object_set_new(ann, EGPU_ANN_DRA_CLAIMS, json_string(value));
}

/* The annotation on /validate: forged on CREATE, touched on UPDATE, carried
 * outside DRA mode. */
static void test_guard(void **state)
{
    struct egpu_webhook_config dp = {.set_scheduler_name = true};
    char name[EGPU_API_DRA_TEMPLATE_NAME_MAX], text[1024];
    json_t *spec, *doc, *forged, *caps, *wrapped;
    char *t;

    (void)state;
    template_of(30, 4096, NULL, &spec, name);
    doc = mutated(
        &dra_cfg,
        wt_pod("{'elasticgpu.io/gpu-core':'30','elasticgpu.io/gpu-memory':'4096'}", NULL, NULL),
        NULL);
    /* Forged: more cores under the same name (a spec the webhook could make,
     * but not under that name). */
    forged = json_deep_copy(doc);
    caps = json_deep_copy(spec);
    json_object_set_new(
        json_object_get(
            json_object_get(
                json_object_get(
                    json_array_get(json_object_get(json_object_get(caps, "devices"), "requests"),
                                   0),
                    "exactly"),
                "capacity"),
            "requests"),
        "cores", json_string("31"));
    wrapped = json_pack("{s:o}", name, caps);
    t = json_dumps(wrapped, JSON_COMPACT);
    json_decref(wrapped);
    set_ann(forged, t);
    free(t);
    snprintf(text, sizeof(text),
             "annotation elasticgpu.io/dra-claims entry \"%s\" is not a claim spec egpu-webhook "
             "makes under that name; allowed: what egpu-webhook writes",
             name);
    check_validate(&dra_cfg, "CREATE", forged, NULL, text);
    /* Not JSON. */
    forged = json_deep_copy(doc);
    set_ann(forged, "{");
    /* The marker then marks a claim of no template listed either. */
    check_validate(&dra_cfg, "CREATE", forged, NULL,
                   "annotation elasticgpu.io/dra-claims is not a JSON object; allowed: what "
                   "egpu-webhook writes, {template name: claim spec}; container \"train\": "
                   "elasticgpu.io/dra marks a container whose GPU egpu-webhook moved to a "
                   "ResourceClaim, and this one has none (resources.claims egpu-0, and the pod's "
                   "resourceClaims entry of that name naming a template of annotation "
                   "elasticgpu.io/dra-claims or the ResourceClaim of its ElasticGPUClaim); "
                   "allowed: no elasticgpu.io/dra (ask elasticgpu.io/gpu-core and gpu-memory: "
                   "egpu-webhook adds it)");
    /* Outside DRA mode, a pod may carry neither it nor the marker. */
    check_validate(&dp, "CREATE", json_deep_copy(doc), NULL,
                   "annotation elasticgpu.io/dra-claims is written only by egpu-webhook in DRA "
                   "mode (--mode dra); a pod may not set it; container \"train\": "
                   "elasticgpu.io/dra is written only by egpu-webhook in DRA mode (--mode dra), "
                   "beside the ResourceClaim it makes for a container's GPU; allowed: no "
                   "elasticgpu.io/dra (ask elasticgpu.io/gpu-core and gpu-memory)");
    /* UPDATE: unchanged passes (in either mode), removed or changed not. */
    check_validate(&dra_cfg, "UPDATE", json_deep_copy(doc), json_deep_copy(doc), NULL);
    check_validate(&dp, "UPDATE", json_deep_copy(doc), json_deep_copy(doc), NULL);
    forged = json_deep_copy(doc);
    set_ann(forged, NULL);
    check_validate(&dra_cfg, "UPDATE", forged, json_deep_copy(doc),
                   "annotation elasticgpu.io/dra-claims names the pod's ResourceClaimTemplates "
                   "and is fixed when the pod is created; user \"alice\" may not remove it; "
                   "container \"train\": elasticgpu.io/dra marks a container whose GPU "
                   "egpu-webhook moved to a ResourceClaim, and this one has none "
                   "(resources.claims egpu-0, and the pod's resourceClaims entry of that name "
                   "naming a template of annotation elasticgpu.io/dra-claims or the "
                   "ResourceClaim of its ElasticGPUClaim); allowed: no elasticgpu.io/dra (ask "
                   "elasticgpu.io/gpu-core and gpu-memory: egpu-webhook adds it)");
    forged = json_deep_copy(doc);
    set_ann(forged, "{}");
    check_validate(&dp, "UPDATE", forged, json_deep_copy(doc),
                   "annotation elasticgpu.io/dra-claims names the pod's ResourceClaimTemplates "
                   "and is fixed when the pod is created; user \"alice\" may not change it");
    forged = json_deep_copy(doc);
    set_ann(doc, NULL);
    check_validate(&dra_cfg, "UPDATE", forged, json_deep_copy(doc),
                   "annotation elasticgpu.io/dra-claims names the pod's ResourceClaimTemplates "
                   "and is fixed when the pod is created; user \"alice\" may not add it");
    json_decref(spec);
    json_decref(doc);
}

/* The container's resources of doc (container i). */
static json_t *res_of(json_t *doc, size_t i)
{
    return json_object_get(
        json_array_get(json_object_get(json_object_get(doc, "spec"), "containers"), i),
        "resources");
}

/* schedulerName as in device-plugin mode: none with --set-scheduler-name
 * false (the extender in the main kube-scheduler), a pod's own kept; the
 * marker in either case, and a pod owner's own marker on a container that
 * gets a claim is set to "1". */
static void test_scheduler_name_and_marker(void **state)
{
    struct egpu_webhook_config main_sched = dra_cfg;
    const char *share = "{'elasticgpu.io/gpu-core':'30','elasticgpu.io/gpu-memory':'4096'}";
    json_t *doc;

    (void)state;
    main_sched.set_scheduler_name = false;
    doc = mutated(&main_sched, wt_pod(share, NULL, NULL), NULL);
    assert_null(json_object_get(json_object_get(doc, "spec"), "schedulerName"));
    wt_assert_json(json_object_get(res_of(doc, 0), "limits"), "{'elasticgpu.io/dra':'1'}");
    wt_assert_json(json_object_get(res_of(doc, 0), "requests"), "{'elasticgpu.io/dra':'1'}");
    check_settled(&main_sched, doc);
    json_decref(doc);

    doc = mutated(&dra_cfg, wt_pod(share, NULL, "team-scheduler"), NULL);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(doc, "spec"), "schedulerName")),
        "team-scheduler");
    check_settled(&dra_cfg, doc);
    json_decref(doc);

    doc = mutated(&dra_cfg,
                  wt_pod("{'elasticgpu.io/gpu-core':'100','elasticgpu.io/dra':'7'}", NULL, NULL),
                  NULL);
    wt_assert_json(json_object_get(res_of(doc, 0), "limits"), "{'elasticgpu.io/dra':'1'}");
    check_settled(&dra_cfg, doc);
    json_decref(doc);
}

/* A pod whose only elasticgpu.io name is the marker asks no GPU: /mutate
 * leaves it alone (no claim, no scheduler) and /validate refuses it, in DRA
 * mode and outside it; on an init container too. */
static void test_marker_alone_refused(void **state)
{
    struct egpu_webhook_config dp = {.set_scheduler_name = true};
    const char *marker = "{'elasticgpu.io/dra':'1','cpu':'1'}";
    const char *dra_msg =
        "container \"train\": elasticgpu.io/dra marks a container whose GPU egpu-webhook "
        "moved to a ResourceClaim, and this one has none (resources.claims egpu-0, and the "
        "pod's resourceClaims entry of that name naming a template of annotation "
        "elasticgpu.io/dra-claims or the ResourceClaim of its ElasticGPUClaim); allowed: no "
        "elasticgpu.io/dra (ask elasticgpu.io/gpu-core and gpu-memory: egpu-webhook adds it)";
    const char *dp_msg =
        "container \"train\": elasticgpu.io/dra is written only by egpu-webhook in DRA mode "
        "(--mode dra), beside the ResourceClaim it makes for a container's GPU; allowed: no "
        "elasticgpu.io/dra (ask elasticgpu.io/gpu-core and gpu-memory)";
    struct wt_reply w;
    json_t *pod;

    (void)state;
    for (int m = 0; m < 2; m++) {
        const struct egpu_webhook_config *cfg = m == 0 ? &dra_cfg : &dp;

        w = wt_call(
            cfg, EGPU_WEBHOOK_MUTATE, NULL,
            wt_review("CREATE", "", "v1", "Pod", "alice", wt_pod(marker, NULL, NULL), NULL));
        wt_assert_allowed_minimal(&w);
        wt_free(&w);
        check_validate(cfg, "CREATE", wt_pod(marker, NULL, NULL), NULL, m == 0 ? dra_msg : dp_msg);
    }
    /* Forging the claim entries without a template the annotation lists. */
    pod = wt_pod(marker, NULL, NULL);
    json_object_set_new(res_of(pod, 0), "claims", wt_json("[{'name':'egpu-0','request':'gpu'}]"));
    json_object_set_new(json_object_get(pod, "spec"), "resourceClaims",
                        wt_json("[{'name':'egpu-0','resourceClaimTemplateName':'mine'}]"));
    check_validate(&dra_cfg, "CREATE", pod, NULL, dra_msg);
    /* An UPDATE refuses only what is new: a pod admitted before the mode
     * changed keeps working; a marker added is refused. */
    check_validate(&dp, "UPDATE", wt_pod(marker, NULL, NULL), wt_pod(marker, NULL, NULL), NULL);
    check_validate(&dp, "UPDATE", wt_pod(marker, NULL, NULL), wt_pod("{'cpu':'1'}", NULL, NULL),
                   dp_msg);
    /* An init container never gets one. */
    pod = wt_pod(NULL, NULL, NULL);
    json_object_set_new(json_object_get(pod, "spec"), "initContainers",
                        wt_json("[{'name':'setup','resources':{'limits':{"
                                "'elasticgpu.io/dra':'1'}}}]"));
    check_validate(&dra_cfg, "CREATE", pod, NULL,
                   "init container \"setup\": elasticgpu.io/dra marks a container whose GPU "
                   "egpu-webhook --mode dra moved to a ResourceClaim; allowed: none on an init "
                   "container");
}

/* On a pod /mutate rewrote, the marker is judged with its claim: another
 * value, a claim entry removed or renamed, or the same marker on the
 * container next to it are refused. */
static void test_marker_with_its_claim(void **state)
{
    const char *bad_value = "container \"train\": elasticgpu.io/dra must be \"1\" in "
                            "resources.requests and resources.limits, as egpu-webhook writes it";
    json_t *doc, *forged, *ctrs;

    (void)state;
    doc = mutated(
        &dra_cfg,
        wt_pod("{'elasticgpu.io/gpu-core':'30','elasticgpu.io/gpu-memory':'4096'}", NULL, NULL),
        NULL);
    forged = json_deep_copy(doc);
    json_object_set_new(json_object_get(res_of(forged, 0), "limits"), EGPU_RES_DRA,
                        json_string("2"));
    check_validate(&dra_cfg, "CREATE", forged, NULL, bad_value);
    forged = json_deep_copy(doc);
    json_object_del(json_object_get(res_of(forged, 0), "requests"), EGPU_RES_DRA);
    check_validate(&dra_cfg, "CREATE", forged, NULL, bad_value);
    /* The integer some clients send is the same quantity. */
    forged = json_deep_copy(doc);
    json_object_set_new(json_object_get(res_of(forged, 0), "limits"), EGPU_RES_DRA,
                        json_integer(1));
    check_validate(&dra_cfg, "CREATE", forged, NULL, NULL);
    forged = json_deep_copy(doc);
    json_object_set_new(res_of(forged, 0), "claims",
                        wt_json("[{'name':'egpu-0','request':'other'}]"));
    check_validate(&dra_cfg, "CREATE", forged, NULL,
                   "container \"train\": elasticgpu.io/dra marks a container whose GPU "
                   "egpu-webhook moved to a ResourceClaim, and this one has none "
                   "(resources.claims egpu-0, and the pod's resourceClaims entry of that name "
                   "naming a template of annotation elasticgpu.io/dra-claims or the "
                   "ResourceClaim of its ElasticGPUClaim); allowed: no elasticgpu.io/dra (ask "
                   "elasticgpu.io/gpu-core and gpu-memory: egpu-webhook adds it)");
    /* A second container copying the first one's marker and claim entry is
     * container 1, whose pod claim would be egpu-1. */
    forged = json_deep_copy(doc);
    ctrs = json_object_get(json_object_get(forged, "spec"), "containers");
    json_array_append_new(ctrs, json_deep_copy(json_array_get(ctrs, 0)));
    json_object_set_new(json_array_get(ctrs, 1), "name", json_string("copy"));
    check_validate(&dra_cfg, "CREATE", forged, NULL,
                   "container \"copy\": elasticgpu.io/dra marks a container whose GPU "
                   "egpu-webhook moved to a ResourceClaim, and this one has none "
                   "(resources.claims egpu-1, and the pod's resourceClaims entry of that name "
                   "naming a template of annotation elasticgpu.io/dra-claims or the "
                   "ResourceClaim of its ElasticGPUClaim); allowed: no elasticgpu.io/dra (ask "
                   "elasticgpu.io/gpu-core and gpu-memory: egpu-webhook adds it)");
    json_decref(doc);
}

/* Device-plugin mode (the default) is untouched: the same pod keeps its
 * resources and gets the scheduler. */
static void test_device_plugin_mode_unchanged(void **state)
{
    struct egpu_webhook_config dp = {.set_scheduler_name = true};
    json_t *doc;

    (void)state;
    doc = mutated(
        &dp,
        wt_pod("{'elasticgpu.io/gpu-core':'30','elasticgpu.io/gpu-memory':'4096'}", NULL, NULL),
        NULL);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(doc, "spec"), "schedulerName")),
        "elastic-gpu-scheduler");
    assert_null(json_object_get(json_object_get(doc, "spec"), "resourceClaims"));
    json_decref(doc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_share),
        cmocka_unit_test(test_compat_whole_and_models),
        cmocka_unit_test(test_two_containers),
        cmocka_unit_test(test_reinvoked_with_a_new_container),
        cmocka_unit_test(test_denied),
        cmocka_unit_test(test_denied_by_the_cluster),
        cmocka_unit_test(test_claims),
        cmocka_unit_test(test_claims_denied),
        cmocka_unit_test(test_guard),
        cmocka_unit_test(test_device_plugin_mode_unchanged),
        cmocka_unit_test(test_scheduler_name_and_marker),
        cmocka_unit_test(test_marker_alone_refused),
        cmocka_unit_test(test_marker_with_its_claim),
    };

    egpu_log_level = -1;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
