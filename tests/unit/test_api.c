/* tests/unit/test_api.c - the elasticgpu.io contract (src/api): one table row
 * per validation rule and per compatible name, each a pod spec in and the
 * exact denial text, or the exact converted spec, out. */
#include "testutil.h"

#include <errno.h>
#include <jansson.h>

#include "egpu/api.h"

static json_t *parse(const char *text)
{
    json_error_t e;
    json_t *v = json_loads(text, 0, &e);

    if (v == NULL)
        fail_msg("bad test JSON: %s: %s", e.text, text);
    return v;
}

/* The problems of spec + annotations, joined with "; " as the webhook does. */
static void problems_text(const char *spec, const char *ann, const struct egpu_api_facts *f,
                          char *out, size_t len)
{
    json_t *s = parse(spec), *a = ann ? parse(ann) : NULL;
    struct egpu_api_problems p = {0};
    size_t n = egpu_api_pod_validate(s, a, f, &p), used = 0;

    assert_int_equal(n, p.n + p.more);
    out[0] = '\0';
    for (size_t i = 0; i < p.n; i++)
        used += (size_t)snprintf(out + used, len - used, "%s%s", i ? "; " : "", p.msg[i]);
    json_decref(s);
    json_decref(a);
}

#define C1(res) "{\"containers\":[{\"name\":\"train\",\"resources\":" res "}]}"

struct rule_case {
    const char *what, *spec, *ann, *want;
};

static void test_validation_rules(void **state)
{
    static const char *const models[] = {"NVIDIA A100-SXM4-80GB", "NVIDIA H100"};
    const struct egpu_api_facts facts = {.max_card_mib = 81920, .nmodels = 2, .models = models};
    static const struct rule_case cases[] = {
        {"share",
         C1("{\"limits\":{\"elasticgpu.io/gpu-core\":\"30\",\"elasticgpu.io/gpu-memory\":"
            "\"4096\"},\"requests\":{\"elasticgpu.io/gpu-core\":\"30\","
            "\"elasticgpu.io/gpu-memory\":\"4096\"}}"),
         NULL, ""},
        {"whole cards", C1("{\"limits\":{\"elasticgpu.io/gpu-core\":\"200\"}}"), NULL, ""},
        {"no GPU", C1("{\"limits\":{\"cpu\":\"1\"}}"), NULL, ""},
        {"core 150", C1("{\"limits\":{\"elasticgpu.io/gpu-core\":\"150\"}}"), NULL,
         "container \"train\": elasticgpu.io/gpu-core is 150; allowed: 1..99 to share one card, "
         "or a multiple of 100 for whole cards"},
        {"core 0", C1("{\"requests\":{\"elasticgpu.io/gpu-core\":\"0\"}}"), NULL,
         "container \"train\": elasticgpu.io/gpu-core is 0; allowed: 1..99 to share one card, or "
         "a multiple of 100 for whole cards"},
        {"core fraction", C1("{\"requests\":{\"elasticgpu.io/gpu-core\":\"500m\"}}"), NULL,
         "container \"train\": elasticgpu.io/gpu-core is 500m; allowed: 1..99 to share one card, "
         "or a multiple of 100 for whole cards"},
        {"more cards than a node", C1("{\"limits\":{\"elasticgpu.io/gpu-core\":\"6500\"}}"), NULL,
         "container \"train\": elasticgpu.io/gpu-core is 6500; allowed: at most 64 whole cards "
         "(6400), the most one node may hold"},
        {"memory alone", C1("{\"limits\":{\"elasticgpu.io/gpu-memory\":\"1024\"}}"), NULL,
         "container \"train\": elasticgpu.io/gpu-memory needs elasticgpu.io/gpu-core in the same "
         "container; allowed: gpu-core 1..99 with gpu-memory to share one card"},
        {"memory not a number",
         C1("{\"limits\":{\"elasticgpu.io/gpu-core\":\"30\",\"elasticgpu.io/"
            "gpu-memory\":\"4Gi\"}}"),
         NULL,
         "container \"train\": elasticgpu.io/gpu-memory is 4Gi; allowed: a whole number of MiB, "
         "e.g. 4096"},
        {"memory 0",
         C1("{\"limits\":{\"elasticgpu.io/gpu-core\":\"30\",\"elasticgpu.io/gpu-memory\":\"0\"}}"),
         NULL,
         "container \"train\": elasticgpu.io/gpu-memory is 0; allowed: a whole number of MiB from "
         "1"},
        {"memory beyond the largest card",
         C1("{\"limits\":{\"elasticgpu.io/gpu-core\":\"30\",\"elasticgpu.io/gpu-memory\":"
            "\"90000\"}}"),
         NULL,
         "container \"train\": elasticgpu.io/gpu-memory is 90000; allowed: up to 81920 MiB, the "
         "memory of the largest card in the cluster"},
        {"memory on whole cards",
         C1("{\"limits\":{\"elasticgpu.io/gpu-core\":\"200\",\"elasticgpu.io/gpu-memory\":"
            "\"8192\"}}"),
         NULL,
         "container \"train\": elasticgpu.io/gpu-memory is 8192 with elasticgpu.io/gpu-core 200 "
         "(whole cards); allowed: no gpu-memory on whole cards, which come with all their "
         "memory, or gpu-core 1..99 to share one card"},
        {"requests differ from limits",
         C1("{\"requests\":{\"elasticgpu.io/gpu-core\":\"20\"},\"limits\":"
            "{\"elasticgpu.io/gpu-core\":\"30\"}}"),
         NULL,
         "container \"train\": elasticgpu.io/gpu-core requests 20 but limits 30; allowed: "
         "requests equal to limits (an extended resource is not overcommitted)"},
        {"init container",
         "{\"containers\":[{\"name\":\"main\"}],\"initContainers\":[{\"name\":\"setup\","
         "\"resources\":{\"limits\":{\"elasticgpu.io/gpu-core\":\"10\"}}}]}",
         NULL,
         "init container \"setup\": asks elasticgpu.io/gpu-core; allowed: GPUs in regular "
         "containers only (an init container's GPU would be held for the pod's whole life)"},
        {"bad init container value",
         "{\"containers\":[],\"initContainers\":[{\"name\":\"setup\",\"resources\":{\"limits\":"
         "{\"elasticgpu.io/gpu-core\":\"101\"}}}]}",
         NULL,
         "init container \"setup\": elasticgpu.io/gpu-core is 101; allowed: 1..99 to share one "
         "card, or a multiple of 100 for whole cards"},
        {"core limit below the share",
         C1("{\"limits\":{\"elasticgpu.io/gpu-core\":\"30\",\"elasticgpu.io/"
            "gpu-memory\":\"4096\"}}"),
         "{\"elasticgpu.io/gpu-core-limit\":\"20\"}",
         "annotation elasticgpu.io/gpu-core-limit is 20; allowed: 30..100 (at least the largest "
         "gpu-core of a shared container)"},
        {"core limit above 100",
         C1("{\"limits\":{\"elasticgpu.io/gpu-core\":\"30\",\"elasticgpu.io/"
            "gpu-memory\":\"4096\"}}"),
         "{\"elasticgpu.io/gpu-core-limit\":\"120\"}",
         "annotation elasticgpu.io/gpu-core-limit is \"120\"; allowed: a whole percent from the "
         "containers' gpu-core up to 100"},
        {"core limit in range",
         C1("{\"limits\":{\"elasticgpu.io/gpu-core\":\"30\",\"elasticgpu.io/"
            "gpu-memory\":\"4096\"}}"),
         "{\"elasticgpu.io/gpu-core-limit\":\"80\"}", ""},
        {"unknown model",
         C1("{\"limits\":{\"elasticgpu.io/gpu-core\":\"30\",\"elasticgpu.io/"
            "gpu-memory\":\"4096\"}}"),
         "{\"elasticgpu.io/gpu-model\":\"NVIDIA H100|NVIDIA H200\"}",
         "annotation elasticgpu.io/gpu-model names \"NVIDIA H200\"; allowed: the models the "
         "cluster has: NVIDIA A100-SXM4-80GB, NVIDIA H100"},
        {"known models",
         C1("{\"limits\":{\"elasticgpu.io/gpu-core\":\"30\",\"elasticgpu.io/"
            "gpu-memory\":\"4096\"}}"),
         "{\"elasticgpu.io/gpu-model\":\"NVIDIA H100|NVIDIA A100-SXM4-80GB\"}", ""},
        {"node policy",
         C1("{\"limits\":{\"elasticgpu.io/gpu-core\":\"30\",\"elasticgpu.io/"
            "gpu-memory\":\"4096\"}}"),
         "{\"elasticgpu.io/node-policy\":\"pack\"}",
         "annotation elasticgpu.io/node-policy is \"pack\"; allowed: binpack, spread, best-fit, "
         "random, fgd, fgd-cpu, fgd-cpu-fill"},
        {"card policy",
         C1("{\"limits\":{\"elasticgpu.io/gpu-core\":\"30\",\"elasticgpu.io/"
            "gpu-memory\":\"4096\"}}"),
         "{\"elasticgpu.io/card-policy\":\"fgd\",\"elasticgpu.io/node-policy\":\"spread\"}", ""},
        {"two problems at once",
         "{\"containers\":[{\"name\":\"a\",\"resources\":{\"limits\":{\"elasticgpu.io/gpu-core\":"
         "\"150\"}}},{\"name\":\"b\",\"resources\":{\"limits\":{\"elasticgpu.io/gpu-memory\":"
         "\"1\"}}}]}",
         NULL,
         "container \"a\": elasticgpu.io/gpu-core is 150; allowed: 1..99 to share one card, or a "
         "multiple of 100 for whole cards; container \"b\": elasticgpu.io/gpu-memory needs "
         "elasticgpu.io/gpu-core in the same container; allowed: gpu-core 1..99 with gpu-memory "
         "to share one card"},
        {"mistyped resources", C1("{\"limits\":[1]}"), NULL,
         "container \"train\": resources.limits must be an object of quantities"},
        {"integer quantity",
         C1("{\"limits\":{\"elasticgpu.io/gpu-core\":40,\"elasticgpu.io/gpu-memory\":4096}}"), NULL,
         ""},
        {"share without memory", C1("{\"requests\":{\"elasticgpu.io/gpu-core\":\"30\"}}"), NULL,
         "container \"train\": elasticgpu.io/gpu-core is 30 (a share of one card) without "
         "elasticgpu.io/gpu-memory; allowed: gpu-memory in MiB with every share, in requests and "
         "limits, e.g. elasticgpu.io/gpu-memory: \"4096\" (a share is booked and limited to the "
         "memory it names)"},
        {"whole cards without memory", C1("{\"limits\":{\"elasticgpu.io/gpu-core\":\"200\"}}"),
         NULL, ""},
    };
    char got[4096];

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        problems_text(cases[i].spec, cases[i].ann, &facts, got, sizeof(got));
        if (strcmp(got, cases[i].want) != 0)
            fail_msg("%s:\n got  %s\n want %s", cases[i].what, got, cases[i].want);
    }
    /* With the operator's default memory per core a share may name none
     * (the webhook's /mutate writes it into the pod). */
    {
        struct egpu_api_facts dflt = facts;

        dflt.default_mem_per_core_mib = 400;
        problems_text(C1("{\"limits\":{\"elasticgpu.io/gpu-core\":\"30\"}}"), NULL, &dflt, got,
                      sizeof(got));
        assert_string_equal(got, "");
    }
    /* Without facts the cluster-dependent checks are skipped. */
    problems_text(C1("{\"limits\":{\"elasticgpu.io/gpu-core\":\"30\",\"elasticgpu.io/gpu-memory\":"
                     "\"900000\"}}"),
                  "{\"elasticgpu.io/gpu-model\":\"X\"}", NULL, got, sizeof(got));
    assert_string_equal(got, "");
}

/* egpu_api_share_memory_default: each share that names no gpu-memory gets
 * gpu-core x MiB in limits (and requests where the core is), one note each;
 * a share with memory, whole cards, init containers and an undecodable
 * container are left alone. */
static void test_share_memory_default(void **state)
{
    json_t *s = parse("{\"containers\":["
                      "{\"name\":\"a\",\"resources\":{\"requests\":{\"elasticgpu.io/gpu-core\":"
                      "\"30\"},\"limits\":{\"elasticgpu.io/gpu-core\":\"30\"}}},"
                      "{\"name\":\"b\",\"resources\":{\"limits\":{\"elasticgpu.io/gpu-core\":5}}},"
                      "{\"name\":\"c\",\"resources\":{\"limits\":{\"elasticgpu.io/gpu-core\":"
                      "\"30\",\"elasticgpu.io/gpu-memory\":\"1000\"}}},"
                      "{\"name\":\"d\",\"resources\":{\"limits\":{\"elasticgpu.io/gpu-core\":"
                      "\"100\"}}},"
                      "{\"name\":\"e\",\"resources\":{\"limits\":{\"elasticgpu.io/gpu-core\":"
                      "\"x\"}}},{\"name\":\"f\"}],"
                      "\"initContainers\":[{\"name\":\"i\",\"resources\":{\"limits\":"
                      "{\"elasticgpu.io/gpu-core\":\"30\"}}}]}");
    json_t *want =
        parse("{\"containers\":["
              "{\"name\":\"a\",\"resources\":{\"requests\":{\"elasticgpu.io/gpu-core\":"
              "\"30\",\"elasticgpu.io/gpu-memory\":\"12000\"},\"limits\":{\"elasticgpu.io/"
              "gpu-core\":\"30\",\"elasticgpu.io/gpu-memory\":\"12000\"}}},"
              "{\"name\":\"b\",\"resources\":{\"limits\":{\"elasticgpu.io/gpu-core\":5,"
              "\"elasticgpu.io/gpu-memory\":\"2000\"}}},"
              "{\"name\":\"c\",\"resources\":{\"limits\":{\"elasticgpu.io/gpu-core\":"
              "\"30\",\"elasticgpu.io/gpu-memory\":\"1000\"}}},"
              "{\"name\":\"d\",\"resources\":{\"limits\":{\"elasticgpu.io/gpu-core\":"
              "\"100\"}}},"
              "{\"name\":\"e\",\"resources\":{\"limits\":{\"elasticgpu.io/gpu-core\":"
              "\"x\"}}},{\"name\":\"f\"}],"
              "\"initContainers\":[{\"name\":\"i\",\"resources\":{\"limits\":"
              "{\"elasticgpu.io/gpu-core\":\"30\"}}}]}");
    struct egpu_api_problems notes = {0};
    char *got;

    (void)state;
    assert_int_equal(egpu_api_share_memory_default(s, 0, &notes), 0);
    assert_int_equal(notes.n, 0);
    assert_int_equal(egpu_api_share_memory_default(s, 400, &notes), 2);
    got = json_dumps(s, JSON_SORT_KEYS);
    if (!json_equal(s, want))
        fail_msg("got %s", got);
    free(got);
    assert_int_equal(notes.n, 2);
    assert_string_equal(notes.msg[0],
                        "container \"a\": elasticgpu.io/gpu-memory set to 12000 MiB "
                        "(elasticgpu.io/gpu-core 30 x 400 MiB, the cluster's default memory per "
                        "gpu-core percent); name elasticgpu.io/gpu-memory in requests and limits "
                        "to choose");
    /* Now every share names its memory: nothing more to set, and it validates. */
    assert_int_equal(egpu_api_share_memory_default(s, 400, &notes), 0);
    json_decref(s);
    json_decref(want);
}

static void test_problems_are_bounded(void **state)
{
    char spec[16384];
    size_t used;
    json_t *s;
    struct egpu_api_problems p = {0};

    (void)state;
    used = (size_t)snprintf(spec, sizeof(spec), "{\"containers\":[");
    for (int i = 0; i < 20; i++)
        used += (size_t)snprintf(spec + used, sizeof(spec) - used,
                                 "%s{\"name\":\"c%d\",\"resources\":{\"limits\":{"
                                 "\"elasticgpu.io/gpu-core\":\"30\",\"elasticgpu.io/"
                                 "gpu-memory\":\"1\"}}}",
                                 i ? "," : "", i);
    snprintf(spec + used, sizeof(spec) - used, "]}");
    s = parse(spec);
    assert_int_equal(egpu_api_pod_validate(s, NULL, NULL, &p), 1);
    assert_string_equal(p.msg[0], "20 containers ask for GPUs; allowed: at most 16");
    json_decref(s);
}

/* Convert, apply, and compare the whole spec and annotations. */
struct compat_case {
    const char *what, *spec, *ann;
    struct egpu_api_compat_opts opts;
    const char *want_spec, *want_ann, *want_warning, *want_error;
};

static void run_compat(const struct compat_case *c)
{
    json_t *spec = parse(c->spec), *ann = parse(c->ann ? c->ann : "{}"), *ws, *wa;
    struct egpu_api_compat_result *r = egpu_malloc(sizeof(*r));
    struct egpu_error err = {0};
    int rc;

    assert_non_null(r);
    rc = egpu_api_compat_convert(spec, ann, &c->opts, r, &err);
    if (c->want_error != NULL) {
        if (rc == 0 || strcmp(err.msg, c->want_error) != 0)
            fail_msg("%s: rc %d error\n got  %s\n want %s", c->what, rc, err.msg, c->want_error);
        assert_int_equal(r->nedits, 0);
        goto out;
    }
    if (rc != 0)
        fail_msg("%s: %s", c->what, err.msg);
    assert_int_equal(egpu_api_compat_apply(spec, ann, r), 0);
    ws = parse(c->want_spec);
    wa = parse(c->want_ann ? c->want_ann : "{}");
    if (!json_equal(spec, ws) || !json_equal(ann, wa)) {
        char *g1 = json_dumps(spec, JSON_SORT_KEYS), *g2 = json_dumps(ann, JSON_SORT_KEYS);

        fail_msg("%s:\n got  %s %s\n want %s %s", c->what, g1, g2, c->want_spec,
                 c->want_ann ? c->want_ann : "{}");
    }
    if (c->want_warning != NULL && (r->nwarnings == 0 || strcmp(r->warnings[0], c->want_warning)))
        fail_msg("%s: warning\n got  %s\n want %s", c->what, r->nwarnings ? r->warnings[0] : "",
                 c->want_warning);
    if (c->want_warning == NULL && r->nedits == 0)
        assert_int_equal(r->nwarnings, 0);
    json_decref(ws);
    json_decref(wa);
    /* Idempotent: a second pass over the converted spec changes nothing. */
    assert_int_equal(egpu_api_compat_convert(spec, ann, &c->opts, r, &err), 0);
    assert_int_equal(r->nedits, 0);
    assert_int_equal(r->nannotations, 0);
out:
    egpu_free(r);
    json_decref(spec);
    json_decref(ann);
}

#define L(res) "{\"containers\":[{\"name\":\"c\",\"resources\":{\"limits\":" res "}}]}"
#define RL(res) \
    "{\"containers\":[{\"name\":\"c\",\"resources\":{\"requests\":" res ",\"limits\":" res "}}]}"

static void test_compatible_names(void **state)
{
    const struct egpu_api_compat_opts nv = {.nvidia = true};
    const struct egpu_api_compat_opts mib = {.aliyun_mem_mib = 1};
    const struct egpu_api_compat_opts core5 = {.memory_only_core = 5};
    const struct compat_case cases[] = {
        {"tencent core and memory",
         RL("{\"tencent.com/vcuda-core\":\"30\",\"tencent.com/vcuda-memory\":\"16\"}"),
         NULL,
         {0},
         RL("{\"elasticgpu.io/gpu-core\":\"30\",\"elasticgpu.io/gpu-memory\":\"4096\"}"),
         NULL,
         "container \"c\": tencent.com/vcuda-core rewritten to elasticgpu.io/gpu-core 30 (percent "
         "of a card)",
         NULL},
        {"inspur core and memory",
         L("{\"inspur.com/vcuda-core\":\"50\",\"inspur.com/vcuda-memory\":\"4\"}"),
         NULL,
         {0},
         L("{\"elasticgpu.io/gpu-core\":\"50\",\"elasticgpu.io/gpu-memory\":\"1024\"}"),
         NULL,
         NULL,
         NULL},
        {"tencent memory warning",
         L("{\"tencent.com/vcuda-memory\":\"2\",\"tencent.com/vcuda-core\":"
           "\"10\"}"),
         NULL,
         {0},
         L("{\"elasticgpu.io/gpu-core\":\"10\",\"elasticgpu.io/gpu-memory\":\"512\"}"),
         NULL,
         "container \"c\": tencent.com/vcuda-core rewritten to elasticgpu.io/gpu-core 10 (percent "
         "of a card)",
         NULL},
        {"tencent whole card drops memory",
         L("{\"tencent.com/vcuda-core\":\"100\",\"tencent.com/vcuda-memory\":\"64\"}"),
         NULL,
         {0},
         L("{\"elasticgpu.io/gpu-core\":\"100\"}"),
         NULL,
         NULL,
         NULL},
        {"aliyun GiB",
         RL("{\"aliyun.com/gpu-mem\":\"3\"}"),
         NULL,
         {0},
         RL("{\"elasticgpu.io/gpu-core\":\"1\",\"elasticgpu.io/gpu-memory\":\"3072\"}"),
         "{\"elasticgpu.io/gpu-core-limit\":\"100\"}",
         "container \"c\": asks GPU memory only; given elasticgpu.io/gpu-core 1 and the pod "
         "elasticgpu.io/gpu-core-limit 100, so it may use the whole card while it is idle",
         NULL},
        {"aliyun GiB, the pod's own core limit",
         RL("{\"aliyun.com/gpu-mem\":\"3\"}"),
         "{\"tencent.com/vcuda-core-limit\":\"60\"}",
         {0},
         RL("{\"elasticgpu.io/gpu-core\":\"1\",\"elasticgpu.io/gpu-memory\":\"3072\"}"),
         "{\"elasticgpu.io/gpu-core-limit\":\"60\"}",
         "container \"c\": asks GPU memory only; given elasticgpu.io/gpu-core 1, and the pod's own "
         "core limit applies",
         NULL},
        {"aliyun MiB", L("{\"aliyun.com/gpu-mem\":\"3000\"}"), NULL, mib,
         L("{\"elasticgpu.io/gpu-core\":\"1\",\"elasticgpu.io/gpu-memory\":\"3000\"}"),
         "{\"elasticgpu.io/gpu-core-limit\":\"100\"}", NULL, NULL},
        {"aliyun memory-only core", L("{\"aliyun.com/gpu-mem\":\"1\"}"),
         "{\"elasticgpu.io/gpu-core-limit\":\"60\"}", core5,
         L("{\"elasticgpu.io/gpu-core\":\"5\",\"elasticgpu.io/gpu-memory\":\"1024\"}"),
         "{\"elasticgpu.io/gpu-core-limit\":\"60\"}", NULL, NULL},
        {"elastic-gpu percent",
         L("{\"elastic-gpu/gpu-percent\":\"25\"}"),
         NULL,
         {0},
         L("{\"elasticgpu.io/gpu-core\":\"25\"}"),
         NULL,
         "container \"c\": elastic-gpu/gpu-percent rewritten to elasticgpu.io/gpu-core 25 "
         "(percent of a card)",
         NULL},
        {"elasticgpu.com",
         L("{\"elasticgpu.com/gpu-core\":\"40\",\"elasticgpu.com/gpu-memory\":"
           "\"2048\"}"),
         NULL,
         {0},
         L("{\"elasticgpu.io/gpu-core\":\"40\",\"elasticgpu.io/gpu-memory\":\"2048\"}"),
         NULL,
         NULL,
         NULL},
        {"gpushare provisioner",
         L("{\"gpushare.provisioner.elasticgpu.io/gpu-core\":\"20\","
           "\"gpushare.provisioner.elasticgpu.io/gpu-memory\":\"1000\"}"),
         NULL,
         {0},
         L("{\"elasticgpu.io/gpu-core\":\"20\",\"elasticgpu.io/gpu-memory\":\"1000\"}"),
         NULL,
         NULL,
         NULL},
        {"HAMi share",
         L("{\"nvidia.com/gpu\":\"1\",\"nvidia.com/gpucores\":\"30\","
           "\"nvidia.com/gpumem\":\"3000\"}"),
         NULL, nv, L("{\"elasticgpu.io/gpu-core\":\"30\",\"elasticgpu.io/gpu-memory\":\"3000\"}"),
         NULL,
         "container \"c\": nvidia.com/gpucores rewritten to elasticgpu.io/gpu-core 30 (percent of "
         "a card)",
         NULL},
        {"HAMi memory only", L("{\"nvidia.com/gpu\":\"1\",\"nvidia.com/gpumem\":\"3000\"}"), NULL,
         nv, L("{\"elasticgpu.io/gpu-core\":\"1\",\"elasticgpu.io/gpu-memory\":\"3000\"}"),
         "{\"elasticgpu.io/gpu-core-limit\":\"100\"}", NULL, NULL},
        {"HAMi two whole cards", L("{\"nvidia.com/gpu\":\"2\",\"nvidia.com/gpucores\":\"100\"}"),
         NULL, nv, L("{\"elasticgpu.io/gpu-core\":\"200\"}"), NULL, NULL, NULL},
        {"HAMi two shared cards", L("{\"nvidia.com/gpu\":\"2\",\"nvidia.com/gpucores\":\"30\"}"),
         NULL, nv, NULL, NULL, NULL,
         "container \"c\": nvidia.com/gpu is 2 with a share of each card (nvidia.com/gpucores or "
         "gpumem); allowed: nvidia.com/gpu 1 to share one card, or whole cards without gpucores "
         "and gpumem (Elastic GPU shares at most one card per container)"},
        {"HAMi names left alone without opt-in",
         L("{\"nvidia.com/gpu\":\"1\",\"nvidia.com/gpucores\":\"30\"}"),
         NULL,
         {0},
         L("{\"nvidia.com/gpu\":\"1\",\"nvidia.com/gpucores\":\"30\"}"),
         NULL,
         NULL,
         NULL},
        {"nvidia.com/gpu alone is NVIDIA's", L("{\"nvidia.com/gpu\":\"1\"}"), NULL, nv,
         L("{\"nvidia.com/gpu\":\"1\"}"), NULL, NULL, NULL},
        {"ours win",
         L("{\"elasticgpu.io/gpu-core\":\"30\",\"tencent.com/vcuda-core\":\"50\"}"),
         NULL,
         {0},
         L("{\"elasticgpu.io/gpu-core\":\"30\",\"tencent.com/vcuda-core\":\"50\"}"),
         NULL,
         NULL,
         NULL},
        {"core limit annotation",
         L("{\"tencent.com/vcuda-core\":\"30\"}"),
         "{\"tencent.com/vcuda-core-limit\":\"70\"}",
         {0},
         L("{\"elasticgpu.io/gpu-core\":\"30\"}"),
         "{\"elasticgpu.io/gpu-core-limit\":\"70\"}",
         NULL,
         NULL},
        {"inspur core limit annotation",
         L("{\"inspur.com/vcuda-core\":\"30\"}"),
         "{\"inspur.com/vcuda-core-limit\":\"40\",\"team\":\"x\"}",
         {0},
         L("{\"elasticgpu.io/gpu-core\":\"30\"}"),
         "{\"elasticgpu.io/gpu-core-limit\":\"40\",\"team\":\"x\"}",
         NULL,
         NULL},
        {"two core names",
         L("{\"tencent.com/vcuda-core\":\"30\",\"inspur.com/vcuda-core\":\"30\"}"),
         NULL,
         {0},
         NULL,
         NULL,
         NULL,
         "container \"c\": asks both tencent.com/vcuda-core and inspur.com/vcuda-core; allowed: "
         "one name for the GPU compute share"},
        {"not a whole number",
         L("{\"tencent.com/vcuda-memory\":\"1.5\"}"),
         NULL,
         {0},
         NULL,
         NULL,
         NULL,
         "container \"c\": tencent.com/vcuda-memory is 1.5; allowed: a whole number (1 = "
         "256 MiB)"},
        {"init container converted too",
         "{\"containers\":[{\"name\":\"m\"}],\"initContainers\":[{\"name\":\"i\",\"resources\":"
         "{\"limits\":{\"tencent.com/vcuda-core\":\"10\"}}}]}",
         NULL,
         {0},
         "{\"containers\":[{\"name\":\"m\"}],\"initContainers\":[{\"name\":\"i\",\"resources\":"
         "{\"limits\":{\"elasticgpu.io/gpu-core\":\"10\"}}}]}",
         NULL,
         NULL,
         NULL},
        {"other fields untouched",
         "{\"containers\":[{\"name\":\"c\",\"image\":\"x\",\"resources\":{\"limits\":{\"cpu\":"
         "\"2\",\"tencent.com/vcuda-core\":\"30\"}}}],\"nodeSelector\":{\"a\":\"b\"}}",
         NULL,
         {0},
         "{\"containers\":[{\"name\":\"c\",\"image\":\"x\",\"resources\":{\"limits\":{\"cpu\":"
         "\"2\",\"elasticgpu.io/gpu-core\":\"30\"}}}],\"nodeSelector\":{\"a\":\"b\"}}",
         NULL,
         NULL,
         NULL},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        run_compat(&cases[i]);
    assert_true(egpu_api_compat_known("aliyun.com/gpu-mem", false));
    assert_true(egpu_api_compat_known("tencent.com/vcuda-core-limit", false));
    assert_false(egpu_api_compat_known("nvidia.com/gpumem", false));
    assert_true(egpu_api_compat_known("nvidia.com/gpumem", true));
    assert_false(egpu_api_compat_known("nvidia.com/gpu", true));
}

static void test_converted_then_validated(void **state)
{
    /* A converted request is validated like a native one: 150 percent in
     * gpu-manager's name is refused in ours. */
    json_t *spec = parse(L("{\"tencent.com/vcuda-core\":\"150\"}"));
    struct egpu_api_compat_result *r = egpu_malloc(sizeof(*r));
    struct egpu_api_problems p = {0};
    struct egpu_error err = {0};

    (void)state;
    assert_int_equal(egpu_api_compat_convert(spec, NULL, NULL, r, &err), 0);
    assert_int_equal(egpu_api_compat_apply(spec, NULL, r), 0);
    assert_int_equal(egpu_api_pod_validate(spec, NULL, NULL, &p), 1);
    assert_string_equal(p.msg[0], "container \"c\": elasticgpu.io/gpu-core is 150; allowed: "
                                  "1..99 to share one card, or a multiple of 100 for whole cards");
    assert_true(egpu_api_spec_wants_gpu(spec));
    egpu_free(r);
    json_decref(spec);
}

static void test_wants_gpu(void **state)
{
    struct egpu_api_compat_result *r;
    struct egpu_error err = {0};
    json_t *s;

    (void)state;
    s = parse(L("{\"cpu\":\"1\"}"));
    assert_false(egpu_api_spec_wants_gpu(s));
    json_decref(s);
    s = parse("{\"initContainers\":[{\"resources\":{\"requests\":{\"elasticgpu.io/gpu-memory\":"
              "\"1\"}}}]}");
    assert_true(egpu_api_spec_wants_gpu(s));
    json_decref(s);
    s = parse("{\"containers\":null}");
    assert_false(egpu_api_spec_wants_gpu(s));
    json_decref(s);
    /* DRA mode's marker is no GPU ask, alone or beside a GPU claim; a GPU
     * name beside it still is. */
    assert_true(egpu_api_res_asks_gpu("elasticgpu.io/gpu-core"));
    assert_true(egpu_api_res_asks_gpu("elasticgpu.io/gpu-tflops"));
    assert_false(egpu_api_res_asks_gpu(EGPU_RES_DRA));
    assert_false(egpu_api_res_asks_gpu("elasticgpu.io"));
    assert_false(egpu_api_res_asks_gpu("tencent.com/vcuda-core"));
    s = parse(L("{\"elasticgpu.io/dra\":\"1\",\"cpu\":\"1\"}"));
    assert_false(egpu_api_spec_wants_gpu(s));
    assert_false(egpu_api_pod_asks_gpu(s, NULL, true));
    json_decref(s);
    s = parse(L("{\"elasticgpu.io/dra\":\"1\",\"elasticgpu.io/gpu-core\":\"100\"}"));
    assert_true(egpu_api_spec_wants_gpu(s));
    assert_true(egpu_api_pod_asks_gpu(s, NULL, false));
    json_decref(s);
    s = parse(L("{\"elasticgpu.io/dra\":\"1\",\"tencent.com/vcuda-core\":\"100\"}"));
    assert_false(egpu_api_spec_wants_gpu(s));
    assert_true(egpu_api_pod_asks_gpu(s, NULL, false));
    /* ... and a compatible name beside the marker is still converted. */
    r = egpu_malloc(sizeof(*r));
    assert_non_null(r);
    assert_int_equal(egpu_api_compat_convert(s, NULL, NULL, r, &err), 0);
    assert_int_equal(r->nedits, 1);
    assert_string_equal(r->edits[0].to, EGPU_RES_GPU_CORE);
    egpu_free(r);
    json_decref(s);
}

static void test_annotations(void **state)
{
    struct egpu_api_pod_annotations a;
    struct egpu_error err = {0};
    json_t *ann;

    (void)state;
    assert_int_equal(egpu_api_pod_annotations(NULL, &a, &err), 0);
    assert_int_equal(a.core_limit, 0);
    ann = parse("{\"elasticgpu.io/gpu-core-limit\":\"55\",\"elasticgpu.io/node-policy\":\"fgd\"}");
    assert_int_equal(egpu_api_pod_annotations(ann, &a, &err), 0);
    assert_int_equal(a.core_limit, 55);
    assert_true(a.has_node_policy && a.node_policy == EGPU_POLICY_FGD);
    json_decref(ann);
    ann = json_pack("{s:s%}", EGPU_ANN_GPU_MODEL, "A\0B", (size_t)3);
    assert_int_equal(egpu_api_pod_annotations(ann, &a, &err), EGPU_ERANGE);
    assert_non_null(strstr(err.msg, EGPU_ANN_GPU_MODEL));
    json_decref(ann);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_validation_rules),
        cmocka_unit_test(test_problems_are_bounded),
        cmocka_unit_test(test_compatible_names),
        cmocka_unit_test(test_converted_then_validated),
        cmocka_unit_test(test_wants_gpu),
        cmocka_unit_test(test_annotations),
        cmocka_unit_test(test_share_memory_default),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
