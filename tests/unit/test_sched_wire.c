/* tests/unit/test_sched_wire.c - the extender's wire layer (src/scheduler/
 * wire.c) and the HostPriorityList kept in plist.c.
 *
 * Decoding: keys in any order, unknown and nested look-alike keys, the
 * NodeList form, every malformed shape we could think of (truncated at every
 * byte, wrong types, non-string and oversized names), each with no leaked
 * egpu_malloc block. Encoding: odd node names (quotes, backslashes, control
 * characters, UTF-8) survive a round trip through the replies. Prioritize
 * after filter equals prioritize alone, for the same nodes, for the
 * survivors, in another order, and after the cluster changed in between,
 * and a list made from the last one is the full encoding's text. The
 * kube-scheduler fixtures of shared/k8s-wire are decoded too (skipped when
 * that folder is absent). The extender's name-to-slot index (slots.c)
 * answers as the cluster's own look-up while nodes come and go and for
 * another cluster.
 */
#include <pthread.h>
#include <stdlib.h>

#include "testutil.h"
#include "sched_testutil.h"
#include "egpu/log.h"
#include "egpu/scheduler.h"
#include "plist_int.h"
#include "slots_int.h"
#include "wire_int.h"

#define WIRE EGPU_SOURCE_DIR "/../shared/k8s-wire/"

/* ------------------------------------------------------------------------ */
/* Fixtures                                                                  */

/* A pod asking core percent of one card (0 = no GPU) and mem MiB of it. */
static json_t *make_pod(const char *name, int core, int mem)
{
    json_t *req = json_pack("{s:s,s:s}", "cpu", "1", "memory", "1Gi");

    if (core > 0) {
        json_object_set_new(req, EGPU_RES_GPU_CORE, json_sprintf("%d", core));
        json_object_set_new(req, EGPU_RES_GPU_MEMORY, json_sprintf("%d", mem));
    }
    return json_pack("{s:{s:s,s:s,s:s},s:{s:[{s:s,s:{s:o}}]},s:{s:s}}", "metadata", "name", name,
                     "namespace", "ns", "uid", name, "spec", "containers", "name", "c0",
                     "resources", "requests", req, "status", "phase", "Pending");
}

static void add_gpu_node(struct egpu_sched_cache *c, const char *name, int ngpus)
{
    struct egpu_error err = {0};
    json_t *n = json_pack("{s:{s:s},s:{s:{s:s,s:s}}}", "metadata", "name", name, "status",
                          "allocatable", "cpu", "64", "memory", "256Gi");

    if (egpu_sched_cache_node_set(c, n, &err) != 0)
        fail_msg("node: %s", err.msg);
    json_decref(n);
    for (int i = 0; i < ngpus; i++) {
        char uuid[300];
        json_t *g;

        snprintf(uuid, sizeof(uuid), "GPU-%s-%d", name, i);
        g = json_pack("{s:{s:s},s:{s:s,s:i,s:s,s:s,s:i}}", "metadata", "name", uuid, "spec",
                      "nodeName", name, "index", i, "uuid", uuid, "model", "A100", "memory", 40960);
        if (egpu_sched_cache_gpu_set(c, g, &err) != 0)
            fail_msg("gpu: %s", err.msg);
        json_decref(g);
    }
}

/* Put a pod of core percent on card 0 of node (counted at once). */
static void use_card(struct egpu_sched_cache *c, const char *pod, const char *node, int core)
{
    struct egpu_error err = {0};
    json_t *p = make_pod(pod, core, 0);
    char ann[512];

    snprintf(ann, sizeof(ann),
             "{\"node\":\"%s\",\"containers\":[{\"name\":\"c0\",\"core\":%d,\"memory\":0,"
             "\"gpus\":[\"GPU-%s-0\"]}]}",
             node, core, node);
    json_object_set_new(json_object_get(p, "spec"), "nodeName", json_string(node));
    json_object_set_new(json_object_get(p, "metadata"), "annotations",
                        json_pack("{s:s}", EGPU_ANN_ASSIGNED, ann));
    if (egpu_sched_cache_pod_set(c, p, &err) != 0)
        fail_msg("pod: %s", err.msg);
    json_decref(p);
}

static bool yes(void *data)
{
    (void)data;
    return true;
}

static struct egpu_extender *new_extender(struct egpu_sched_cache *c, enum egpu_policy_kind k)
{
    struct egpu_extender_ops ops = {.synced = yes};
    struct egpu_extender_config cfg = {.node_policy = k, .card_policy = k, .seed = 1};
    struct egpu_error err = {0};
    struct egpu_extender *x = egpu_extender_new(&cfg, c, &ops, &err);

    assert_non_null(x);
    return x;
}

/* Call verb with body; check status and that it leaked nothing; return the
 * reply text (caller free()s). */
static char *call_text(int (*verb)(struct egpu_extender *, const char *, size_t, struct egpu_buf *),
                       struct egpu_extender *x, const char *body, size_t len, int want_status)
{
    struct egpu_buf reply;
    long live = egpu_alloc_live();
    int status;
    char *text;

    egpu_buf_init(&reply, 16 << 20);
    status = verb(x, body, len, &reply);
    if (status != want_status)
        fail_msg("status %d (want %d): %s", status, want_status, egpu_buf_str(&reply));
    text = strdup(egpu_buf_str(&reply));
    egpu_buf_free(&reply);
    /* A good call may leave a placer and filter's verdicts behind (freed
     * with the extender: see the tests' own counts); a refused one nothing. */
    if (want_status != 200)
        assert_int_equal(egpu_alloc_live(), live);
    return text;
}

static json_t *call(int (*verb)(struct egpu_extender *, const char *, size_t, struct egpu_buf *),
                    struct egpu_extender *x, const char *body, int want_status)
{
    char *text = call_text(verb, x, body, strlen(body), want_status);
    json_error_t jerr;
    json_t *out = json_loads(text, 0, &jerr);

    if (out == NULL)
        fail_msg("reply is not JSON (%s): %s", jerr.text, text);
    free(text);
    return out;
}

/* Expect status with an Error that contains want, with nothing leaked. */
static void
expect_error(int (*verb)(struct egpu_extender *, const char *, size_t, struct egpu_buf *),
             struct egpu_extender *x, const char *body, size_t len, int status, const char *want)
{
    char *text = call_text(verb, x, body, len, status);
    json_t *out = json_loads(text, 0, NULL);
    const char *msg = json_string_value(json_object_get(out, "Error"));

    if (msg == NULL || strstr(msg, want) == NULL)
        fail_msg("want an error with \"%s\", got %s", want, text);
    json_decref(out);
    free(text);
}

static void expect_400(int (*verb)(struct egpu_extender *, const char *, size_t, struct egpu_buf *),
                       struct egpu_extender *x, const char *body, size_t len, const char *want)
{
    expect_error(verb, x, body, len, 400, want);
}

/* ------------------------------------------------------------------------ */
/* Decoding                                                                  */

static void test_decode_any_order_and_unknown_keys(void **state)
{
    static const char body[] =
        "{\"Extra\":{\"NodeNames\":[\"decoy\"],\"Pod\":7,\"Nodes\":{\"items\":[]}},"
        "\"NodeNames\":[\"n1\",\"n\\u00e9\\\"2\"],\"Junk\":[1,2.5e300,true,null,[{}]],"
        "\"Nodes\":null,"
        "\"Pod\":{\"metadata\":{\"name\":\"p\",\"namespace\":\"ns\",\"uid\":\"u\","
        "\"annotations\":{\"NodeNames\":\"[]\"}},\"spec\":{\"containers\":[{\"name\":\"c\","
        "\"resources\":{\"requests\":{\"" EGPU_RES_GPU_CORE "\":\"30\"}}}]}},"
        "\"Later\":\"x\"}";
    long live = egpu_alloc_live();
    struct egpu__wire_args a;
    struct egpu_error err = {0};

    (void)state;
    if (egpu__wire_args_decode(body, strlen(body), &a, &err) != 0)
        fail_msg("decode: %s", err.msg);
    assert_int_equal(a.n, 2);
    assert_false(a.full);
    assert_string_equal(a.names[0], "n1");
    assert_string_equal(a.names[1], "n\xc3\xa9\"2");
    assert_string_equal(a.pod.name, "p");
    assert_string_equal(a.pod.ns, "ns");
    assert_string_equal(a.pod.uid, "u");
    assert_int_equal(a.pod.req.containers[0].core_milli, 300);
    egpu__wire_args_free(&a);
    assert_int_equal(egpu_alloc_live(), live);

    /* A key given twice counts once, the last time. */
    {
        static const char twice[] = "{\"NodeNames\":[\"a\",\"b\"],\"Pod\":{\"metadata\":"
                                    "{\"name\":\"first\"},\"spec\":{}},\"NodeNames\":[\"c\"],"
                                    "\"Pod\":{\"metadata\":{\"name\":\"second\"},\"spec\":{}}}";

        assert_int_equal(egpu__wire_args_decode(twice, strlen(twice), &a, &err), 0);
        assert_int_equal(a.n, 1);
        assert_string_equal(a.names[0], "c");
        assert_string_equal(a.pod.name, "second");
        egpu__wire_args_free(&a);
    }
    /* An empty list is a list. */
    {
        static const char none[] = "{\"Pod\":{\"metadata\":{\"name\":\"p\"},\"spec\":{}},"
                                   "\"NodeNames\":[]}";

        assert_int_equal(egpu__wire_args_decode(none, strlen(none), &a, &err), 0);
        assert_int_equal(a.n, 0);
        egpu__wire_args_free(&a);
    }
    /* Whitespace after the object, as yajl's lexer counts it (\f and \v
     * too), is no text after it. */
    {
        static const char ws[] = "{\"Pod\":{\"metadata\":{\"name\":\"p\"},\"spec\":{}},"
                                 "\"NodeNames\":[\"a\"]} \t\r\n\f\v";

        assert_int_equal(egpu__wire_args_decode(ws, strlen(ws), &a, &err), 0);
        assert_int_equal(a.n, 1);
        egpu__wire_args_free(&a);
    }
    assert_int_equal(egpu_alloc_live(), live);
}

/* The wire decoder reads what jansson reads from the scheduler's fixtures. */
static void test_decode_fixtures(void **state)
{
    static const char *const files[] = {"extender_filter_args.json",
                                        "extender_filter_args_full_nodes.json",
                                        "extender_prioritize_args.json"};
    int seen = 0;

    (void)state;
    for (size_t f = 0; f < sizeof(files) / sizeof(files[0]); f++) {
        char path[512];
        json_t *doc, *names, *items;
        struct egpu__wire_args a;
        struct egpu_error err = {0};
        char *text;

        snprintf(path, sizeof(path), "%s%s", WIRE, files[f]);
        doc = json_load_file(path, 0, NULL);
        if (doc == NULL)
            continue;
        seen++;
        text = json_dumps(doc, JSON_INDENT(2)); /* whitespace everywhere */
        if (egpu__wire_args_decode(text, strlen(text), &a, &err) != 0)
            fail_msg("%s: %s", files[f], err.msg);
        names = json_object_get(doc, "NodeNames");
        items = json_object_get(json_object_get(doc, "Nodes"), "items");
        assert_int_equal(a.full, !json_is_array(names));
        assert_int_equal(a.n, json_array_size(a.full ? items : names));
        for (size_t i = 0; i < a.n; i++) {
            const char *want =
                a.full ? json_string_value(json_object_get(
                             json_object_get(json_array_get(items, i), "metadata"), "name"))
                       : json_string_value(json_array_get(names, i));
            assert_string_equal(a.names[i], want);
            if (a.full) {
                json_t *item = json_loadb(a.body + a.items[i].off, a.items[i].len, 0, NULL);

                assert_true(json_equal(item, json_array_get(items, i)));
                json_decref(item);
            }
        }
        assert_string_equal(a.pod.name,
                            json_string_value(json_object_get(
                                json_object_get(json_object_get(doc, "Pod"), "metadata"), "name")));
        egpu__wire_args_free(&a);
        free(text);
        json_decref(doc);
    }
    if (seen == 0)
        tu_skip("no extender fixture in shared/k8s-wire");
}

static void test_malformed_bodies(void **state)
{
    const long live = egpu_alloc_live(); /* whole test: nothing left behind */
    struct egpu_sched_cache *c = egpu_sched_cache_new();
    struct egpu_extender *x = new_extender(c, EGPU_POLICY_BINPACK);
    const char *const nodes[] = {"n1", "n2"};
    char *good = tu_extender_args(make_pod("p", 30, 1024), nodes, 2, false);
    char *full = tu_extender_args(make_pod("p", 30, 1024), nodes, 2, true);
    char huge[600], big[400];
    static const struct {
        const char *body, *want;
    } cases[] = {
        {"", "malformed JSON"},
        {"   ", "malformed JSON"},
        {"{", "malformed JSON"},
        {"{\"Pod\":", "malformed JSON"},
        {"{\"NodeNames\":[\"a\",]}", "malformed JSON"},
        {"{\"NodeNames\":[\"a\"]} {}", "malformed JSON"},
        {"{\"NodeNames\":[\"a\"]}\"", "malformed JSON"},
        {"{\"NodeNames\":[\"a\"]} \"junk", "malformed JSON"},
        {"{\"NodeNames\":[\"\\x\"]}", "malformed JSON"},
        {"{\"NodeNames\":[\"\xff\"]}", "malformed JSON"},
        {"[1,2]", "must be a JSON object"},
        {"\"Pod\"", "must be a JSON object"},
        {"null", "must be a JSON object"},
        {"{\"NodeNames\":[\"n1\"]}", "ExtenderArgs.Pod: pod: must be a JSON object"},
        {"{\"Pod\":5,\"NodeNames\":[\"n1\"]}", "ExtenderArgs.Pod: pod: must be a JSON object"},
        {"{\"Pod\":[],\"NodeNames\":[\"n1\"]}", "ExtenderArgs.Pod: pod: must be a JSON object"},
        {"{\"Pod\":{\"metadata\":{\"name\":\"p\"},\"spec\":{}}}", "both missing"},
        {"{\"Pod\":{\"metadata\":{\"name\":\"p\"},\"spec\":{}},\"NodeNames\":null,\"Nodes\":null}",
         "both missing"},
        {"{\"Pod\":{\"metadata\":{\"name\":\"p\"},\"spec\":{}},\"Nodes\":{\"items\":{}}}",
         "both missing"},
        {"{\"Pod\":{\"metadata\":{\"name\":\"p\"},\"spec\":{}},\"NodeNames\":7}",
         "ExtenderArgs.NodeNames: must be an array of strings or null"},
        {"{\"Pod\":{\"metadata\":{\"name\":\"p\"},\"spec\":{}},\"NodeNames\":\"n1\"}",
         "ExtenderArgs.NodeNames: must be an array"},
        {"{\"Pod\":{\"metadata\":{\"name\":\"p\"},\"spec\":{}},\"NodeNames\":{\"n1\":1}}",
         "ExtenderArgs.NodeNames: must be an array"},
        {"{\"Pod\":{\"metadata\":{\"name\":\"p\"},\"spec\":{}},\"NodeNames\":[\"n1\",7]}",
         "ExtenderArgs.NodeNames[1]: must be a string"},
        {"{\"Pod\":{\"metadata\":{\"name\":\"p\"},\"spec\":{}},\"NodeNames\":[null]}",
         "ExtenderArgs.NodeNames[0]: must be a string"},
        {"{\"Pod\":{\"metadata\":{\"name\":\"p\"},\"spec\":{}},\"NodeNames\":[[\"n1\"]]}",
         "ExtenderArgs.NodeNames[0]: must be a string"},
        {"{\"Pod\":{\"metadata\":{\"name\":\"p\"},\"spec\":{}},\"NodeNames\":[\"a\",{}]}",
         "ExtenderArgs.NodeNames[1]: must be a string"},
        {"{\"Pod\":{\"metadata\":{\"name\":\"p\"},\"spec\":{}},\"NodeNames\":[\"a\",\"\"]}",
         "ExtenderArgs.NodeNames[1]: node name missing"},
        {"{\"Pod\":{\"metadata\":{\"name\":\"p\"},\"spec\":{}},\"NodeNames\":[\"a\\u0000b\"]}",
         "ExtenderArgs.NodeNames[0]: contains a NUL"},
        {"{\"Pod\":{\"metadata\":{\"name\":\"p\"},\"spec\":{}},\"NodeNames\":null,"
         "\"Nodes\":{\"items\":[{\"metadata\":{\"name\":\"a\"}},{\"metadata\":{}}]}}",
         "ExtenderArgs.Nodes.items[1]: node name missing"},
        {"{\"Pod\":{\"metadata\":{\"name\":\"p\"},\"spec\":{}},"
         "\"Nodes\":{\"items\":[{\"metadata\":{\"name\":5}}]}}",
         "ExtenderArgs.Nodes.items[0].metadata.name: must be a string"},
        {"{\"Pod\":{\"metadata\":{\"name\":\"p\"},\"spec\":{}},\"Nodes\":{\"items\":[\"a\"]}}",
         "ExtenderArgs.Nodes.items[0]: node name missing"},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        expect_400(egpu_extender_filter, x, cases[i].body, strlen(cases[i].body), cases[i].want);
        expect_400(egpu_extender_prioritize, x, cases[i].body, strlen(cases[i].body),
                   cases[i].want);
    }
    /* A Pod object refused for its content is the pod's fault: filter refuses
     * it with the protocol's Error (HTTP 200, kube-scheduler shows the text);
     * prioritize, whose reply has no Error, answers 400. */
    {
        const char *b = "{\"Pod\":{\"metadata\":{},\"spec\":{}},\"NodeNames\":[\"n1\"]}";

        expect_error(egpu_extender_filter, x, b, strlen(b), 200,
                     "ExtenderArgs.Pod: metadata.name: missing");
        expect_400(egpu_extender_prioritize, x, b, strlen(b), "metadata.name");
    }
    /* Names no node can have: 300 characters; the Pod's own limits hold too. */
    memset(big, 'x', 300);
    big[300] = '\0';
    snprintf(huge, sizeof(huge),
             "{\"Pod\":{\"metadata\":{\"name\":\"p\"},\"spec\":{}},\"NodeNames\":[\"%s\"]}", big);
    expect_400(egpu_extender_filter, x, huge, strlen(huge),
               "ExtenderArgs.NodeNames[0]: longer than 253 characters");
    memset(big, 'y', 300);
    big[300] = '\0';
    {
        json_t *pod = make_pod("p", 30, 1024);
        const char *const one[] = {"n1"};
        char *text;

        json_object_set_new(json_object_get(pod, "metadata"), "name", json_string(big));
        text = tu_extender_args(pod, one, 1, false);
        expect_error(egpu_extender_filter, x, text, strlen(text), 200,
                     "ExtenderArgs.Pod: metadata.name: longer than");
        free(text);
    }
    /* Cut short at every byte: never a crash, a leak or a 200. */
    for (size_t len = 0; len < strlen(good); len++)
        expect_400(egpu_extender_prioritize, x, good, len, "ExtenderArgs");
    for (size_t len = 0; len < strlen(full); len++)
        expect_400(egpu_extender_filter, x, full, len, "ExtenderArgs");
    free(good);
    free(full);
    egpu_extender_free(x);
    egpu_sched_cache_free(c);
    assert_int_equal(egpu_alloc_live(), live);
}

/* ------------------------------------------------------------------------ */
/* Encoding                                                                  */

/* prioritize's 10 goes to the node egpu_placer_schedule (the replay) picks,
 * also among exact ties, which it breaks by a hash of the node name with the
 * seed, not by the order of the list: 12 empty nodes (all tie), asked in two
 * orders, then the same with two nodes made fuller (a tie between them), for
 * two seeds. Every other node scores at most 9, and filter passes exactly
 * the nodes tied for the best score. */
static void test_ten_is_the_placers_choice(void **state)
{
    const long live = egpu_alloc_live(); /* whole test: nothing left behind */
    enum { N = 12 };
    struct egpu_sched_cache *c = egpu_sched_cache_new();
    char names[N][16];
    const char *fwd[N], *rev[N];
    struct egpu_pod_request req = {.cpu_milli = 1000, .mem_mib = 1024, .ncontainers = 1};

    (void)state;
    req.containers[0] =
        (struct egpu_container_request){.core_milli = 300, .ncards = 1, .mem_mib = 1024};
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof(names[i]), "tie-%02d", i);
        fwd[i] = names[i];
        rev[N - 1 - i] = names[i];
        add_gpu_node(c, names[i], 1);
    }
    for (int round = 0; round < 2; round++) {
        if (round == 1) { /* two nodes fuller, tied with each other */
            use_card(c, "f1", "tie-03", 40);
            use_card(c, "f2", "tie-09", 40);
        }
        for (uint64_t seed = 1; seed <= 2; seed++) {
            struct egpu_extender_ops ops = {.synced = yes};
            struct egpu_extender_config cfg = {.node_policy = EGPU_POLICY_BINPACK,
                                               .card_policy = EGPU_POLICY_BINPACK,
                                               .seed = seed};
            struct egpu_placer_config pc = {.node_policy = EGPU_POLICY_BINPACK,
                                            .card_policy = EGPU_POLICY_BINPACK,
                                            .seed = seed};
            struct egpu_error err = {0};
            struct egpu_extender *x = egpu_extender_new(&cfg, c, &ops, &err);
            struct egpu_placer *p = egpu_placer_new(&pc, &err);
            struct egpu_node *node = NULL;
            struct egpu_pick pick;
            char want[16];

            assert_non_null(x);
            assert_non_null(p);
            assert_int_equal(egpu_placer_schedule(p, egpu_sched_cache_lock(c), &req, &node, &pick),
                             0);
            snprintf(want, sizeof(want), "%s", node->name);
            egpu_sched_cache_unlock(c);
            egpu_placer_free(p);
            for (int order = 0; order < 2; order++) {
                char *body = tu_extender_args(make_pod("p", 30, 1024), order ? rev : fwd, N, false);
                json_t *out = call(egpu_extender_prioritize, x, body, 200);
                json_t *fr = call(egpu_extender_filter, x, body, 200);
                int tens = 0;

                for (size_t i = 0; i < json_array_size(out); i++) {
                    json_t *e = json_array_get(out, i);
                    json_int_t sc = json_integer_value(json_object_get(e, "Score"));

                    if (sc == 10) {
                        tens++;
                        assert_string_equal(json_string_value(json_object_get(e, "Host")), want);
                    } else {
                        assert_true(sc <= 9);
                    }
                }
                assert_int_equal(tens, 1);
                /* filter: all 12 tie in round 0; tie-03 and tie-09 in round 1. */
                assert_int_equal(json_array_size(json_object_get(fr, "NodeNames")),
                                 round == 0 ? N : 2);
                if (round == 1)
                    assert_true(strcmp(want, "tie-03") == 0 || strcmp(want, "tie-09") == 0);
                json_decref(out);
                json_decref(fr);
                free(body);
            }
            egpu_extender_free(x);
        }
    }
    egpu_sched_cache_free(c);
    assert_int_equal(egpu_alloc_live(), live);
}

/* fuzz_extender's find (e33ad4c, docs/fuzzing.md): prioritize maps the
 * scores of the nodes that fit onto 0..9, linearly from their lowest (lo)
 * to their highest (hi). A node that does not fit has score 0, below lo
 * when every fitting node scores above 0, and its scaled score was cast to
 * uint8_t while negative: undefined. The reply was right all the same, so
 * only UBSan's float-cast-overflow catches the old code: clang's
 * -fsanitize=undefined has it (the fuzz build: -14.1 for "full" and "gone"
 * here), gcc's, which `make asan` uses, does not. Here, for binpack,
 * three nodes fit, none empty ("low" 10%, "mid" 20%, "high" 40% of their
 * card used), and "full" (80%) and "gone" (no such node) do not. The reply
 * scores "high" 10 and "mid" 1..9; "low" (the lowest that fits, 0) and the
 * two that do not fit are left out (0 to kube-scheduler). */
static void test_unfit_node_below_the_fitting_scores(void **state)
{
    const long live = egpu_alloc_live(); /* whole test: nothing left behind */
    struct egpu_sched_cache *c = egpu_sched_cache_new();
    struct egpu_extender *x = new_extender(c, EGPU_POLICY_BINPACK);
    const char *const fwd[] = {"full", "low", "gone", "mid", "high"};
    const char *const rev[] = {"high", "mid", "gone", "low", "full"};
    char *body;
    json_t *out;

    (void)state;
    add_gpu_node(c, "low", 1);
    add_gpu_node(c, "mid", 1);
    add_gpu_node(c, "high", 1);
    add_gpu_node(c, "full", 1);
    use_card(c, "l", "low", 10);
    use_card(c, "m", "mid", 20);
    use_card(c, "h", "high", 40);
    use_card(c, "f", "full", 80);
    for (int order = 0; order < 2; order++) {
        body = tu_extender_args(make_pod("p", 30, 1024), order ? rev : fwd, 5, false);
        out = call(egpu_extender_prioritize, x, body, 200);
        assert_int_equal(json_array_size(out), 2);
        for (size_t i = 0; i < json_array_size(out); i++) {
            json_t *e = json_array_get(out, i);
            const char *host = json_string_value(json_object_get(e, "Host"));
            json_int_t sc = json_integer_value(json_object_get(e, "Score"));

            if (strcmp(host, "high") == 0) {
                assert_int_equal(sc, 10);
            } else {
                assert_string_equal(host, "mid");
                assert_true(sc >= 1 && sc <= 9);
            }
        }
        json_decref(out);
        /* filter agrees: only the best passes. */
        out = call(egpu_extender_filter, x, body, 200);
        assert_int_equal(json_array_size(json_object_get(out, "NodeNames")), 1);
        assert_string_equal(json_string_value(json_array_get(json_object_get(out, "NodeNames"), 0)),
                            "high");
        json_decref(out);
        free(body);
    }
    egpu_extender_free(x);
    egpu_sched_cache_free(c);
    assert_int_equal(egpu_alloc_live(), live);
}

/* A message given by several nodes is encoded once and copied: the reply is
 * byte for byte what a generator writing every message afresh writes, with
 * messages that need escapes, one address for many nodes, equal texts at
 * other addresses, more distinct addresses than the memo's slots (so slots
 * are taken over), and the nodes filter leaves out (egpu__wire_unlisted),
 * which appear nowhere. */
static void test_filter_reasons_encoded_once(void **state)
{
    enum { N = 700 };
    const long live = egpu_alloc_live();
    static const char shared[] = "node \"a\" fits this pod better \\ \x01 \xc3\xa9";
    char(*own)[32] = malloc(N * sizeof(*own));
    const char **names = malloc(N * sizeof(*names)), **why = malloc(N * sizeof(*why));
    char(*name)[16] = malloc(N * sizeof(*name));
    struct egpu__wire_args a = {0};
    struct egpu_buf reply;
    const unsigned char *buf;
    size_t len;
    yajl_gen g;

    (void)state;
    assert_non_null(own);
    assert_non_null(names);
    assert_non_null(why);
    assert_non_null(name);
    for (int i = 0; i < N; i++) {
        snprintf(name[i], sizeof(name[i]), "n\"%d", i);
        names[i] = name[i];
        snprintf(own[i], sizeof(own[i]), "reason %d", i % 3 == 0 ? 7 : i);
        why[i] = i % 5 == 0   ? NULL                /* passes */
                 : i % 5 == 1 ? shared              /* one address, many nodes */
                 : i % 5 == 2 ? egpu__wire_unlisted /* left out */
                              : own[i];             /* an address of its own */
    }
    a.n = N;
    a.names = names;
    egpu_buf_init(&reply, 1 << 24);
    assert_int_equal(egpu__wire_filter_result(&reply, &a, why), 0);
    /* The reference: every message written afresh. */
    g = egpu__wire_gen();
    assert_non_null(g);
    assert_int_equal(yajl_gen_map_open(g), yajl_gen_status_ok);
    assert_int_equal(yajl_gen_string(g, (const unsigned char *)"Nodes", 5), yajl_gen_status_ok);
    assert_int_equal(yajl_gen_null(g), yajl_gen_status_ok);
    assert_int_equal(yajl_gen_string(g, (const unsigned char *)"NodeNames", 9), yajl_gen_status_ok);
    assert_int_equal(yajl_gen_array_open(g), yajl_gen_status_ok);
    for (int i = 0; i < N; i++)
        if (why[i] == NULL)
            assert_int_equal(yajl_gen_string(g, (const unsigned char *)names[i], strlen(names[i])),
                             yajl_gen_status_ok);
    assert_int_equal(yajl_gen_array_close(g), yajl_gen_status_ok);
    assert_int_equal(yajl_gen_string(g, (const unsigned char *)"FailedNodes", 11),
                     yajl_gen_status_ok);
    assert_int_equal(yajl_gen_map_open(g), yajl_gen_status_ok);
    for (int i = 0; i < N; i++) {
        if (why[i] == NULL || why[i] == egpu__wire_unlisted)
            continue;
        assert_int_equal(yajl_gen_string(g, (const unsigned char *)names[i], strlen(names[i])),
                         yajl_gen_status_ok);
        assert_int_equal(yajl_gen_string(g, (const unsigned char *)why[i], strlen(why[i])),
                         yajl_gen_status_ok);
    }
    assert_int_equal(yajl_gen_map_close(g), yajl_gen_status_ok);
    assert_int_equal(yajl_gen_string(g, (const unsigned char *)"FailedAndUnresolvableNodes", 26),
                     yajl_gen_status_ok);
    assert_int_equal(yajl_gen_map_open(g), yajl_gen_status_ok);
    assert_int_equal(yajl_gen_map_close(g), yajl_gen_status_ok);
    assert_int_equal(yajl_gen_string(g, (const unsigned char *)"Error", 5), yajl_gen_status_ok);
    assert_int_equal(yajl_gen_string(g, (const unsigned char *)"", 0), yajl_gen_status_ok);
    assert_int_equal(yajl_gen_map_close(g), yajl_gen_status_ok);
    assert_int_equal(yajl_gen_get_buf(g, &buf, &len), yajl_gen_status_ok);
    assert_int_equal(reply.len, len);
    assert_memory_equal(reply.data, buf, len);
    yajl_gen_free(g);
    /* And it is JSON: the unlisted nodes are nowhere in it. */
    {
        json_t *out = json_loads(reply.data, 0, NULL);

        assert_non_null(out);
        assert_int_equal(json_object_size(json_object_get(out, "FailedNodes")), 3 * N / 5);
        assert_null(json_object_get(json_object_get(out, "FailedNodes"), name[2]));
        assert_string_equal(
            json_string_value(json_object_get(json_object_get(out, "FailedNodes"), name[1])),
            shared);
        json_decref(out);
    }
    egpu_buf_free(&reply);
    free(own);
    free(names);
    free(why);
    free(name);
    assert_int_equal(egpu_alloc_live(), live);
}

/* When the pod fits somewhere, filter words 100 refusals at most: those of
 * the nodes that cannot host it first, in the request's order, then of the
 * nodes a better one beats; the others are left out of the reply
 * (kube-scheduler shows none of them and drops a node in neither list). A
 * pod that fits nowhere gets every node's reason, as before. */
static void test_refusals_shown_when_the_pod_fits(void **state)
{
    enum { N = 260 };
    const long live = egpu_alloc_live();
    struct egpu_sched_cache *c = egpu_sched_cache_new();
    struct egpu_extender *x = new_extender(c, EGPU_POLICY_BINPACK);
    const char **names = malloc(N * sizeof(*names));
    char(*name)[16] = malloc(N * sizeof(*name));
    json_t *out, *failed;
    char *body;

    (void)state;
    assert_non_null(names);
    assert_non_null(name);
    for (int i = 0; i < N; i++) {
        char pod[24];

        snprintf(name[i], sizeof(name[i]), "n%03d", i);
        names[i] = name[i];
        add_gpu_node(c, name[i], 1);
        snprintf(pod, sizeof(pod), "u%03d", i);
        /* Every third node full, one node busier than the rest (the best for binpack). */
        use_card(c, pod, name[i], i % 3 == 0 ? 100 : i == 200 ? 40 : 10);
    }
    body = tu_extender_args(make_pod("p", 30, 0), names, N, false);
    out = call(egpu_extender_filter, x, body, 200);
    assert_int_equal(json_array_size(json_object_get(out, "NodeNames")), 1);
    assert_string_equal(json_string_value(json_array_get(json_object_get(out, "NodeNames"), 0)),
                        "n200");
    failed = json_object_get(out, "FailedNodes");
    assert_int_equal(json_object_size(failed), 100);
    /* 87 full nodes (every third of 260), then the first 13 of the others. */
    for (int i = 0, beaten = 0; i < N; i++) {
        const char *why = json_string_value(json_object_get(failed, name[i]));

        if (i == 200)
            continue;
        if (i % 3 == 0) {
            assert_non_null(why);
            assert_non_null(strstr(why, "no card with 30% core"));
        } else if (beaten++ < 13) {
            assert_non_null(why);
            assert_non_null(strstr(why, "node n200 fits this pod better"));
        } else {
            assert_null(why);
        }
    }
    json_decref(out);
    free(body);
    /* 95% fits nowhere: every node says why. */
    body = tu_extender_args(make_pod("q", 95, 0), names, N, false);
    out = call(egpu_extender_filter, x, body, 200);
    assert_int_equal(json_array_size(json_object_get(out, "NodeNames")), 0);
    assert_int_equal(json_object_size(json_object_get(out, "FailedNodes")), N);
    json_decref(out);
    free(body);
    free(names);
    free(name);
    egpu_extender_free(x);
    egpu_sched_cache_free(c);
    assert_int_equal(egpu_alloc_live(), live);
}

static void test_odd_names_round_trip(void **state)
{
    const long live = egpu_alloc_live(); /* whole test: nothing left behind */
    struct egpu_sched_cache *c = egpu_sched_cache_new();
    struct egpu_extender *x = new_extender(c, EGPU_POLICY_BINPACK);
    const char *const nodes[] = {"quo\"te",
                                 "back\\slash",
                                 "nl\nand\ttab",
                                 "ctl\x01\x1f",
                                 "caf\xc3\xa9",
                                 "\xe6\x97\xa5\xe6\x9c\xac",
                                 "emoji\xf0\x9f\x9a\x80",
                                 "sl/ash",
                                 "plain"};
    const size_t n = sizeof(nodes) / sizeof(nodes[0]);
    json_t *out, *list;
    char *body, *text;

    (void)state;
    /* Real GPU nodes with those names, so some pass and some score. */
    for (size_t i = 0; i < n; i++)
        add_gpu_node(c, nodes[i], 1);
    use_card(c, "busy", "plain", 50);
    body = tu_extender_args(make_pod("p", 30, 1024), nodes, (int)n, false);
    out = call(egpu_extender_filter, x, body, 200);
    /* Only the best node passes ("plain", the fullest for binpack); every
     * other name comes back as a FailedNodes key, saying which is better. */
    list = json_object_get(out, "NodeNames");
    assert_int_equal(json_array_size(list), 1);
    assert_string_equal(json_string_value(json_array_get(list, 0)), "plain");
    for (size_t i = 0; i + 1 < n; i++)
        assert_non_null(strstr(
            json_string_value(json_object_get(json_object_get(out, "FailedNodes"), nodes[i])),
            "node plain fits this pod better (node policy binpack)"));
    json_decref(out);
    out = call(egpu_extender_prioritize, x, body, 200);
    /* Only "plain" scores above 0; the others are left out (0 to kube-scheduler). */
    assert_int_equal(json_array_size(out), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(out, 0), "Host")),
                        "plain");
    assert_int_equal(json_integer_value(json_object_get(json_array_get(out, 0), "Score")), 10);
    json_decref(out);
    free(body);
    /* Unknown to the cache: the odd names become FailedNodes keys. */
    egpu_extender_free(x);
    egpu_sched_cache_free(c);
    c = egpu_sched_cache_new();
    x = new_extender(c, EGPU_POLICY_BINPACK);
    body = tu_extender_args(make_pod("p", 30, 1024), nodes, (int)n, false);
    out = call(egpu_extender_filter, x, body, 200);
    assert_int_equal(json_array_size(json_object_get(out, "NodeNames")), 0);
    for (size_t i = 0; i < n; i++)
        assert_non_null(strstr(
            json_string_value(json_object_get(json_object_get(out, "FailedNodes"), nodes[i])),
            "unknown"));
    json_decref(out);
    free(body);
    /* The exact text: escapes as JSON wants them, UTF-8 as is. */
    {
        const char *const two[] = {"a\"b\\c\x01", "\xc3\xa9"};

        body = tu_extender_args(make_pod("p", 0, 0), two, 2, false);
        /* A pod without GPUs scores every node 0: an empty list. */
        text = call_text(egpu_extender_prioritize, x, body, strlen(body), 200);
        assert_string_equal(text, "[]");
        free(text);
        text = call_text(egpu_extender_filter, x, body, strlen(body), 200);
        assert_string_equal(text, "{\"Nodes\":null,\"NodeNames\":[\"a\\\"b\\\\c\\u0001\","
                                  "\"\xc3\xa9\"],\"FailedNodes\":{},"
                                  "\"FailedAndUnresolvableNodes\":{},\"Error\":\"\"}");
        free(text);
        free(body);
    }
    egpu_extender_free(x);
    egpu_sched_cache_free(c);
    assert_int_equal(egpu_alloc_live(), live);
}

/* Every character that needs an escape, at every position of a name long
 * enough for the eight-byte scan: the reply parses back to the same name. */
static void test_escape_every_position(void **state)
{
    /* Those escaped, and two passed as they are (DEL, UTF-8). */
    static const char *const special[] = {"\"", "\\", "\x01", "\x1f", "\n", "\x7f", "\xc3\xa9"};
    const size_t nspecial = sizeof(special) / sizeof(special[0]);
    const long live = egpu_alloc_live();
    struct egpu_sched_cache *c = egpu_sched_cache_new();
    struct egpu_extender *x = new_extender(c, EGPU_POLICY_BINPACK);
    char names[7 * 21][64];
    const char *list[7 * 21];
    int n = 0;
    json_t *out;
    char *body;

    (void)state;
    for (size_t k = 0; k < nspecial; k++) {
        for (int at = 0; at < 21; at++) {
            snprintf(names[n], sizeof(names[n]), "%.*s%s%.*s", at, "aaaaaaaaaaaaaaaaaaaaa",
                     special[k], 20 - at, "bbbbbbbbbbbbbbbbbbbbb");
            list[n] = names[n];
            n++;
        }
    }
    body = tu_extender_args(make_pod("p", 0, 0), list, n, false);
    /* The HostPriorityList encoder, every node scoring (a pod without GPUs
     * scores 0 everywhere, and zeros are left out of the reply). */
    {
        struct egpu__wire_args a;
        struct egpu_error err = {0};
        struct egpu_buf reply;
        uint8_t score[7 * 21];

        memset(score, 5, sizeof(score));
        assert_int_equal(egpu__wire_args_decode(body, strlen(body), &a, &err), 0);
        egpu_buf_init(&reply, 1 << 20);
        assert_int_equal(egpu__wire_priorities(&reply, &a, score), 0);
        out = json_loads(egpu_buf_str(&reply), 0, NULL);
        assert_non_null(out);
        assert_int_equal(json_array_size(out), n);
        for (int i = 0; i < n; i++)
            assert_string_equal(json_string_value(json_object_get(json_array_get(out, i), "Host")),
                                list[i]);
        json_decref(out);
        egpu_buf_free(&reply);
        egpu__wire_args_free(&a);
    }
    out = call(egpu_extender_filter, x, body, 200);
    for (int i = 0; i < n; i++)
        assert_string_equal(json_string_value(json_array_get(json_object_get(out, "NodeNames"), i)),
                            list[i]);
    json_decref(out);
    free(body);
    egpu_extender_free(x);
    egpu_sched_cache_free(c);
    assert_int_equal(egpu_alloc_live(), live);
}

/* A Node of the NodeList form goes back as the bytes it came as, even where
 * jansson would not decode it again: a "\u0000" in a label, an integer past
 * int64 (found by tests/fuzz/fuzz_extender: the filter answered 500 with an
 * empty body for every pod while such a Node was in the list). */
static void test_nodelist_form_echoes_bytes(void **state)
{
    static const char odd[] = "{\"metadata\":{\"name\":\"n1\",\"labels\":{\"z\":\"a\\u0000b\"}},"
                              "\"status\":{\"n\": 123456789012345678901234567890}}";
    static const char plain[] = "{\"metadata\":{\"name\":\"n2\"}}";
    const long live = egpu_alloc_live();
    struct egpu_sched_cache *c = egpu_sched_cache_new();
    struct egpu_extender *x = new_extender(c, EGPU_POLICY_BINPACK);
    char body[1024], *text, *pod_text;
    json_t *pod = make_pod("p", 30, 0);

    (void)state;
    add_gpu_node(c, "n1", 1);
    add_gpu_node(c, "n2", 1);
    pod_text = json_dumps(pod, JSON_COMPACT);
    json_decref(pod);
    snprintf(body, sizeof(body), "{\"Pod\":%s,\"Nodes\":{\"items\":[%s,%s]},\"NodeNames\":null}",
             pod_text, odd, plain);
    free(pod_text);
    text = call_text(egpu_extender_filter, x, body, strlen(body), 200);
    assert_non_null(strstr(text, "\"items\":["
                                 "{\"metadata\":{\"name\":\"n1\""));
    assert_non_null(strstr(text, odd));
    assert_non_null(strstr(text, plain));
    assert_non_null(strstr(text, "\"FailedNodes\":{}"));
    free(text);
    egpu_extender_free(x);
    egpu_sched_cache_free(c);
    assert_int_equal(egpu_alloc_live(), live);
}

/* NodeNames null, Nodes.items given: the passing Node objects come back. */
static void test_nodelist_form(void **state)
{
    const long live = egpu_alloc_live(); /* whole test: nothing left behind */
    struct egpu_sched_cache *c = egpu_sched_cache_new();
    struct egpu_extender *x = new_extender(c, EGPU_POLICY_BINPACK);
    const char *const nodes[] = {"n1", "n2", "ghost", "n\"3"};
    json_t *out, *items, *in;
    char *body;

    (void)state;
    add_gpu_node(c, "n1", 1);
    add_gpu_node(c, "n2", 1);
    add_gpu_node(c, "n\"3", 1);
    use_card(c, "busy", "n1", 50);
    body = tu_extender_args(make_pod("p", 60, 1024), nodes, 4, true);
    in = json_loads(body, 0, NULL);
    out = call(egpu_extender_filter, x, body, 200);
    assert_true(json_is_null(json_object_get(out, "NodeNames")));
    items = json_object_get(json_object_get(out, "Nodes"), "items");
    assert_int_equal(json_array_size(items), 2);
    /* Byte for byte what was sent, labels and status included. */
    assert_true(
        json_equal(json_array_get(items, 0),
                   json_array_get(json_object_get(json_object_get(in, "Nodes"), "items"), 1)));
    assert_true(
        json_equal(json_array_get(items, 1),
                   json_array_get(json_object_get(json_object_get(in, "Nodes"), "items"), 3)));
    assert_non_null(strstr(
        json_string_value(json_object_get(json_object_get(out, "FailedNodes"), "n1")), "60%"));
    assert_non_null(json_object_get(json_object_get(out, "FailedNodes"), "ghost"));
    json_decref(out);
    /* Prioritize reads the names from the items too: n2 and n"3 (empty,
     * feasible) tie at 10; n1 and the ghost cannot host the pod (0, left out). */
    out = call(egpu_extender_prioritize, x, body, 200);
    assert_int_equal(json_array_size(out), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(out, 1), "Host")), "n\"3");
    json_decref(out);
    json_decref(in);
    free(body);
    /* Both given: NodeNames wins, as kube-scheduler reads them. */
    {
        static const char both[] =
            "{\"Pod\":{\"metadata\":{\"name\":\"p\"},\"spec\":{}},"
            "\"Nodes\":{\"metadata\":{},\"items\":[{\"metadata\":{\"name\":\"n1\"}}]},"
            "\"NodeNames\":[\"n2\"]}";

        out = call(egpu_extender_filter, x, both, 200);
        assert_true(json_is_null(json_object_get(out, "Nodes")));
        assert_string_equal(json_string_value(json_array_get(json_object_get(out, "NodeNames"), 0)),
                            "n2");
        json_decref(out);
    }
    egpu_extender_free(x);
    egpu_sched_cache_free(c);
    assert_int_equal(egpu_alloc_live(), live);
}

/* ------------------------------------------------------------------------ */
/* filter, then prioritize                                                   */

#define NNODES 12

static void node_names(char names[NNODES][16], const char *order[NNODES])
{
    for (int i = 0; i < NNODES; i++) {
        snprintf(names[i], 16, "node-%02d", i);
        order[i] = names[i];
    }
}

/* Nodes node-00..11 with one card each; node-01..09 have 10..90% of it
 * used, so binpack scores differ from node to node and a 30% pod does not
 * fit node-08 and node-09. */
static struct egpu_sched_cache *spread_cache(void)
{
    struct egpu_sched_cache *c = egpu_sched_cache_new();

    for (int i = 0; i < NNODES; i++) {
        char name[16], pod[16];

        snprintf(name, sizeof(name), "node-%02d", i);
        add_gpu_node(c, name, 1);
        if (i > 0 && i <= 9) {
            snprintf(pod, sizeof(pod), "u%d", i);
            use_card(c, pod, name, 10 * i);
        }
    }
    return c;
}

/* The prioritize reply for nodes[0..n) from a fresh extender (no filter). */
static char *fresh_prioritize(struct egpu_sched_cache *c, const char *const *nodes, int n, int core)
{
    struct egpu_extender *x = new_extender(c, EGPU_POLICY_BINPACK);
    char *body = tu_extender_args(make_pod("p", core, 1024), nodes, n, false);
    char *text = call_text(egpu_extender_prioritize, x, body, strlen(body), 200);

    free(body);
    egpu_extender_free(x);
    return text;
}

static void test_filter_then_prioritize_same_scores(void **state)
{
    const long live = egpu_alloc_live(); /* whole test: nothing left behind */
    struct egpu_sched_cache *c = spread_cache();
    struct egpu_extender *x = new_extender(c, EGPU_POLICY_BINPACK);
    char names[NNODES][16];
    const char *all[NNODES], *survivors[NNODES], *shuffled[NNODES];
    char *body, *want, *got;
    json_t *out, *passed;
    uint64_t hits;
    int ns = 0;

    (void)state;
    node_names(names, all);
    body = tu_extender_args(make_pod("p", 30, 1024), all, NNODES, false);
    out = call(egpu_extender_filter, x, body, 200);
    passed = json_object_get(out, "NodeNames");
    for (size_t i = 0; i < json_array_size(passed); i++)
        survivors[ns++] = json_string_value(json_array_get(passed, i));
    /* Only the best node passes: node-07, the fullest (70%) a 30% share fits
     * for binpack; the fuller ones fail for room, the others name node-07. */
    assert_int_equal(ns, 1);
    assert_string_equal(survivors[0], "node-07");
    assert_non_null(
        strstr(json_string_value(json_object_get(json_object_get(out, "FailedNodes"), "node-00")),
               "node node-07 fits this pod better"));
    /* The feasible nodes (passed, or failed only for a better one) make the
     * list prioritize is asked about below. */
    ns = 0;
    for (int i = 0; i < NNODES; i++) {
        const char *why =
            json_string_value(json_object_get(json_object_get(out, "FailedNodes"), all[i]));

        if (why == NULL || strstr(why, "fits this pod better") != NULL)
            survivors[ns++] = all[i];
    }
    assert_true(ns > 2 && ns < NNODES); /* some fail for room, some fit */
    /* The same nodes. */
    want = fresh_prioritize(c, all, NNODES, 30);
    got = call_text(egpu_extender_prioritize, x, body, strlen(body), 200);
    assert_string_equal(got, want);
    assert_int_equal(egpu_extender_prioritize_reused(x), 0); /* the first list: in full */
    assert_non_null(strstr(got, "\"Score\":10"));
    assert_null(strstr(got, "\"Score\":0")); /* zeros are left out */
    free(want);
    free(got);
    free(body);
    /* The feasible nodes only. */
    body = call_text(egpu_extender_filter, x, "", 0, 400); /* a failed call keeps nothing */
    free(body);
    body = tu_extender_args(make_pod("p", 30, 1024), all, NNODES, false);
    json_decref(call(egpu_extender_filter, x, body, 200));
    free(body);
    body = tu_extender_args(make_pod("p", 30, 1024), survivors, ns, false);
    want = fresh_prioritize(c, survivors, ns, 30);
    hits = egpu_extender_prioritize_reused(x);
    got = call_text(egpu_extender_prioritize, x, body, strlen(body), 200);
    assert_string_equal(got, want);
    /* Fewer nodes than the list before, the same scores: made from it, its
     * entries found by node; asked again (a retry), given again. */
    assert_int_equal(egpu_extender_prioritize_reused(x), hits + 1);
    free(got);
    got = call_text(egpu_extender_prioritize, x, body, strlen(body), 200);
    assert_string_equal(got, want);
    assert_int_equal(egpu_extender_prioritize_reused(x), hits + 2);
    free(want);
    free(got);
    /* The cluster changes between the two calls: the answer follows the
     * change. node-01 (10% used) takes 40% more: its score moves, the rest
     * stay, so the list is made from the last one. Then node-00 (empty,
     * left out at score 0) takes 40%: it is listed now and the lowest node
     * changes, and still most entries are copied from the last list. */
    for (int round = 0; round < 2; round++) {
        char *all_body = tu_extender_args(make_pod("p", 30, 1024), all, NNODES, false);
        const char *node = round == 0 ? "node-01" : "node-00";
        bool listed = false;

        for (int i = 0; i < ns; i++)
            listed = listed || strcmp(survivors[i], node) == 0;
        assert_true(listed);
        json_decref(call(egpu_extender_filter, x, all_body, 200));
        free(all_body);
        use_card(c, round == 0 ? "late" : "late0", node, 40);
        want = fresh_prioritize(c, survivors, ns, 30);
        got = call_text(egpu_extender_prioritize, x, body, strlen(body), 200);
        assert_string_equal(got, want);
        assert_int_equal(egpu_extender_prioritize_reused(x), hits + 3 + (uint64_t)round);
        free(want);
        free(got);
    }
    free(body);
    /* Another order, a node filter never saw, a name twice: still right. */
    for (int i = 0; i < NNODES; i++)
        shuffled[i] = all[(i * 5 + 3) % NNODES];
    shuffled[4] = "stranger";
    shuffled[7] = shuffled[6];
    body = tu_extender_args(make_pod("p", 30, 1024), all, NNODES, false);
    json_decref(call(egpu_extender_filter, x, body, 200));
    free(body);
    body = tu_extender_args(make_pod("p", 30, 1024), shuffled, NNODES, false);
    want = fresh_prioritize(c, shuffled, NNODES, 30);
    got = call_text(egpu_extender_prioritize, x, body, strlen(body), 200);
    assert_string_equal(got, want);
    free(want);
    free(got);
    free(body);
    /* Another pod, or the same pod asking more: not the filter's answer. */
    body = tu_extender_args(make_pod("p", 30, 1024), all, NNODES, false);
    json_decref(call(egpu_extender_filter, x, body, 200));
    free(body);
    body = tu_extender_args(make_pod("p", 50, 1024), all, NNODES, false);
    want = fresh_prioritize(c, all, NNODES, 50);
    got = call_text(egpu_extender_prioritize, x, body, strlen(body), 200);
    assert_string_equal(got, want);
    free(want);
    free(got);
    free(body);
    json_decref(out);
    egpu_extender_free(x);
    egpu_sched_cache_free(c);
    assert_int_equal(egpu_alloc_live(), live);
}

static void test_cache_change_between_filter_and_prioritize(void **state)
{
    const long live = egpu_alloc_live(); /* whole test: nothing left behind */
    struct egpu_sched_cache *c = spread_cache();
    struct egpu_extender *x = new_extender(c, EGPU_POLICY_BINPACK);
    char names[NNODES][16];
    const char *all[NNODES];
    char *body, *before, *want, *got;

    (void)state;
    node_names(names, all);
    body = tu_extender_args(make_pod("p", 30, 1024), all, NNODES, false);
    before = fresh_prioritize(c, all, NNODES, 30);
    /* node-00 (empty, score 0 under binpack) fills to 70%: now the best. */
    json_decref(call(egpu_extender_filter, x, body, 200));
    use_card(c, "late", "node-00", 70);
    want = fresh_prioritize(c, all, NNODES, 30);
    assert_string_not_equal(want, before);
    got = call_text(egpu_extender_prioritize, x, body, strlen(body), 200);
    assert_string_equal(got, want);
    assert_non_null(strstr(got, "{\"Host\":\"node-00\",\"Score\":10}"));
    free(want);
    free(got);
    /* A node leaves between the two calls: it scores 0, so it is left out. */
    json_decref(call(egpu_extender_filter, x, body, 200));
    assert_int_equal(egpu_sched_cache_node_delete(c, "node-07"), 0);
    want = fresh_prioritize(c, all, NNODES, 30);
    got = call_text(egpu_extender_prioritize, x, body, strlen(body), 200);
    assert_string_equal(got, want);
    assert_non_null(strstr(before, "\"node-07\""));
    assert_null(strstr(got, "\"node-07\""));
    free(want);
    free(got);
    free(before);
    free(body);
    egpu_extender_free(x);
    egpu_sched_cache_free(c);
    assert_int_equal(egpu_alloc_live(), live);
}

/* Pods filtered and prioritized from several threads at once, interleaved:
 * every prioritize still gives the answer of a lone prioritize. */
struct racer {
    struct egpu_extender *x;
    const char *body;
    const char *want;
    int bad;
};

static void *race(void *arg)
{
    struct racer *r = arg;

    for (int i = 0; i < 50; i++) {
        struct egpu_buf reply;

        egpu_buf_init(&reply, 1 << 20);
        if (egpu_extender_filter(r->x, r->body, strlen(r->body), &reply) != 200)
            r->bad++;
        egpu_buf_reset(&reply);
        if (egpu_extender_prioritize(r->x, r->body, strlen(r->body), &reply) != 200 ||
            strcmp(egpu_buf_str(&reply), r->want) != 0)
            r->bad++;
        egpu_buf_free(&reply);
    }
    return NULL;
}

/* A refused node's reason follows the node, the request and the node set
 * when they change. */
static void test_refusal_reasons_follow_changes(void **state)
{
    const long live = egpu_alloc_live(); /* whole test: nothing left behind */
    struct egpu_sched_cache *c = egpu_sched_cache_new();
    struct egpu_extender *x = new_extender(c, EGPU_POLICY_BINPACK);
    const char *const nodes[] = {"n1", "n2"};
    char *body60, *body80;
    json_t *out;

    (void)state;
    add_gpu_node(c, "n1", 1);
    add_gpu_node(c, "n2", 1);
    use_card(c, "busy", "n1", 50);
    body60 = tu_extender_args(make_pod("p", 60, 1024), nodes, 2, false);
    body80 = tu_extender_args(make_pod("q", 80, 1024), nodes, 2, false);
    for (int round = 0; round < 2; round++) { /* asked again: the same answer */
        out = call(egpu_extender_filter, x, body60, 200);
        assert_non_null(
            strstr(json_string_value(json_object_get(json_object_get(out, "FailedNodes"), "n1")),
                   "most free card: 50%"));
        json_decref(out);
    }
    /* n1 changes: its reason is written again. */
    use_card(c, "more", "n1", 20);
    out = call(egpu_extender_filter, x, body60, 200);
    assert_non_null(
        strstr(json_string_value(json_object_get(json_object_get(out, "FailedNodes"), "n1")),
               "most free card: 30%"));
    json_decref(out);
    /* Another request: its own reasons (80% asked). */
    out = call(egpu_extender_filter, x, body80, 200);
    assert_non_null(strstr(
        json_string_value(json_object_get(json_object_get(out, "FailedNodes"), "n1")), "80%"));
    json_decref(out);
    /* n1 leaves and comes back (another slot; its pods find it again): the
     * answer is a fresh extender's, n2's slot moved too. */
    out = call(egpu_extender_filter, x, body60, 200);
    json_decref(out);
    assert_int_equal(egpu_sched_cache_node_delete(c, "n1"), 0);
    add_gpu_node(c, "n1", 1);
    {
        struct egpu_extender *fresh = new_extender(c, EGPU_POLICY_BINPACK);
        char *want = call_text(egpu_extender_filter, fresh, body60, strlen(body60), 200);
        char *got = call_text(egpu_extender_filter, x, body60, strlen(body60), 200);

        assert_string_equal(got, want);
        free(want);
        free(got);
        egpu_extender_free(fresh);
    }
    free(body60);
    free(body80);
    egpu_extender_free(x);
    egpu_sched_cache_free(c);
    assert_int_equal(egpu_alloc_live(), live);
}

static void test_concurrent_pods(void **state)
{
    const long live = egpu_alloc_live(); /* whole test: nothing left behind */
    struct egpu_sched_cache *c = spread_cache();
    struct egpu_extender *x = new_extender(c, EGPU_POLICY_BINPACK);
    char names[NNODES][16], *bodies[4], *wants[4];
    const char *all[NNODES];
    struct racer r[4];
    pthread_t t[4];

    (void)state;
    node_names(names, all);
    for (int i = 0; i < 4; i++) {
        char pod[8];

        snprintf(pod, sizeof(pod), "p%d", i);
        bodies[i] = tu_extender_args(make_pod(pod, 10 + 20 * i, 1024), all, NNODES, false);
        wants[i] = fresh_prioritize(c, all, NNODES, 10 + 20 * i);
        r[i] = (struct racer){.x = x, .body = bodies[i], .want = wants[i]};
    }
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&t[i], NULL, race, &r[i]), 0);
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(r[i].bad, 0);
        free(bodies[i]);
        free(wants[i]);
    }
    egpu_extender_free(x);
    egpu_sched_cache_free(c);
    assert_int_equal(egpu_alloc_live(), live);
}

/* The HostPriorityList made from the last one is always the text
 * egpu__wire_priorities writes for the same names and scores. 400 steps of
 * random score changes (one node, a few, none, scores moving to and from 0,
 * the first entry changing), the names switching now and then, found by
 * node with each step in another order (slots), where a name with no node
 * and a name given twice come along and the node set's stamp changes now
 * and then. Every step is compared byte for byte. */
static void test_plist_matches_full_encoding(void **state)
{
    const long live = egpu_alloc_live();
    enum { N = 40, STEPS = 400 };
    struct egpu__plist pl;
    char names[2][N][24];
    const char *list[N];
    uint32_t slots[N];
    uint8_t score[2][N], now[N];
    int order[N];
    struct egpu_rng rng;
    int made_from_last = 0, full = 0, which = 0;
    uint64_t members = 5;

    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < N; i++)
            snprintf(names[k][i], sizeof(names[k][i]), k ? "other-%02d" : "node-\"%02d\"", i);
    }
    (void)state;
    egpu_rng_seed(&rng, 11);
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < N; i++)
            score[k][i] = (uint8_t)egpu_rng_below(&rng, 11);
    }
    for (int i = 0; i < N; i++)
        order[i] = i;
    egpu__plist_init(&pl);
    for (int step = 0; step < STEPS; step++) {
        struct egpu__wire_args a = {.n = N, .names = list};
        int changes = (int)egpu_rng_below(&rng, 4), rc;
        bool same_set = step % 97 != 96 && step % 53 != 52;
        struct egpu_buf want;

        for (int c = 0; c < changes; c++) {
            int i = egpu_rng_below(&rng, 5) == 0 ? order[0] : (int)egpu_rng_below(&rng, N);

            score[which][i] = (uint8_t)egpu_rng_below(&rng, 11);
        }
        if (step % 97 == 96)
            which = 1 - which;
        if (step % 53 == 52)
            members++;                    /* slots now mean other nodes: nothing is found by them */
        for (int i = N - 1; i > 0; i--) { /* another order */
            int k = (int)egpu_rng_below(&rng, (uint32_t)i + 1), t = order[i];

            order[i] = order[k];
            order[k] = t;
        }
        for (int i = 0; i < N; i++) {
            list[i] = names[which][order[i]];
            slots[i] = (uint32_t)(which * N + order[i]);
            now[i] = score[which][order[i]];
        }
        list[7] = "no-such-node"; /* not a node: encoded, never found */
        slots[7] = EGPU_NO_SLOT;
        list[9] = list[8]; /* a name twice */
        slots[9] = slots[8];
        now[9] = now[8];
        rc = egpu__plist_set(&pl, list, slots, members, now, N);
        assert_true(rc == 0 || rc == 1);
        egpu_buf_init(&want, 1 << 20);
        assert_int_equal(egpu__wire_priorities(&want, &a, now), 0);
        assert_int_equal(pl.text.len, want.len);
        assert_memory_equal(pl.text.data, want.data, want.len);
        egpu_buf_free(&want);
        /* The same nodes, at most 3 scores moved: always made from the last. */
        if (step > 0 && same_set)
            assert_int_equal(rc, 1);
        if (!same_set)
            assert_int_equal(rc, 0);
        made_from_last += rc == 1;
        full += rc == 0;
    }
    assert_true(made_from_last > 300 && full >= 4);
    egpu__plist_free(&pl);
    assert_int_equal(egpu_alloc_live(), live);
}

/* Every name's slot from the index is the one egpu_cluster_node gives
 * (EGPU_NO_SLOT for a name of no node), for names in and out of c. */
static void assert_slots_match(struct egpu__slot_index *ix, const struct egpu_cluster *c,
                               const char *const *names, size_t n)
{
    uint32_t slots[64];

    assert_true(n <= 64);
    memset(slots, 0xab, sizeof(slots));
    assert_int_equal(egpu__slot_index_lookup(ix, c, names, n, slots), 0);
    for (size_t i = 0; i < n; i++) {
        const struct egpu_node *node = egpu_cluster_node(c, names[i]);

        if (node == NULL)
            assert_true(slots[i] == EGPU_NO_SLOT);
        else
            assert_int_equal(slots[i], node->slot);
    }
}

static void test_slot_index_follows_the_node_set(void **state)
{
    const long live = egpu_alloc_live();
    struct egpu_cluster *c = egpu_cluster_new(), *other = egpu_cluster_new();
    struct egpu__slot_index ix;
    char names[40][32];
    const char *list[64];
    size_t n = 0;

    (void)state;
    assert_non_null(c);
    assert_non_null(other);
    /* Names that share their first eight bytes, differ only in their
     * last one, or are as long as a word: the hash reads words. */
    for (int i = 0; i < 40; i++)
        snprintf(names[i], sizeof(names[i]),
                 i % 3 == 0   ? "gpu-node-%05d"
                 : i % 3 == 1 ? "n%d"
                              : "abcdefg%d",
                 i);
    for (int i = 0; i < 30; i++) {
        struct egpu_node_spec spec = {.name = names[i], .cpu_milli = 1000, .mem_mib = 1024};

        assert_int_equal(egpu_cluster_add_node(c, &spec, NULL), 0);
    }
    for (int i = 0; i < 40; i++)
        list[n++] = names[i]; /* 30 nodes and 10 names of none */
    list[n++] = "";
    list[n++] = "gpu-node-0000";
    list[n++] = names[4]; /* a name twice */
    egpu__slot_index_init(&ix);
    assert_slots_match(&ix, c, list, n);
    assert_slots_match(&ix, c, list, n); /* the same index again */
    /* A removal moves the last node into the hole: slots change. */
    assert_int_equal(egpu_cluster_remove_node(c, names[3]), 0);
    assert_int_equal(egpu_cluster_remove_node(c, names[0]), 0);
    assert_slots_match(&ix, c, list, n);
    for (int i = 30; i < 35; i++) {
        struct egpu_node_spec spec = {.name = names[i], .cpu_milli = 1000, .mem_mib = 1024};

        assert_int_equal(egpu_cluster_add_node(c, &spec, NULL), 0);
    }
    assert_slots_match(&ix, c, list, n);
    /* Another cluster, with none of these nodes but one. */
    {
        struct egpu_node_spec spec = {.name = names[7], .cpu_milli = 1000, .mem_mib = 1024};

        assert_int_equal(egpu_cluster_add_node(other, &spec, NULL), 0);
    }
    assert_slots_match(&ix, other, list, n);
    assert_slots_match(&ix, c, list, n);
    egpu__slot_index_free(&ix);
    egpu_cluster_free(c);
    egpu_cluster_free(other);
    assert_int_equal(egpu_alloc_live(), live);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_any_order_and_unknown_keys),
        cmocka_unit_test(test_plist_matches_full_encoding),
        cmocka_unit_test(test_slot_index_follows_the_node_set),
        cmocka_unit_test(test_decode_fixtures),
        cmocka_unit_test(test_malformed_bodies),
        cmocka_unit_test(test_ten_is_the_placers_choice),
        cmocka_unit_test(test_unfit_node_below_the_fitting_scores),
        cmocka_unit_test(test_odd_names_round_trip),
        cmocka_unit_test(test_filter_reasons_encoded_once),
        cmocka_unit_test(test_refusals_shown_when_the_pod_fits),
        cmocka_unit_test(test_escape_every_position),
        cmocka_unit_test(test_nodelist_form),
        cmocka_unit_test(test_nodelist_form_echoes_bytes),
        cmocka_unit_test(test_filter_then_prioritize_same_scores),
        cmocka_unit_test(test_cache_change_between_filter_and_prioritize),
        cmocka_unit_test(test_refusal_reasons_follow_changes),
        cmocka_unit_test(test_concurrent_pods),
    };

    egpu_log_level = EGPU_LOG_ERROR;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
