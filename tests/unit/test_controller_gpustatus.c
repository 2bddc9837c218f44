/* tests/unit/test_controller_gpustatus.c - GPU status.allocated built from pods
 * (src/controller/gpustatus.c's pure part): the entries one pod gives per
 * card, the pods that give none (not bound, finished, annotation broken or
 * naming another node), the order, and the index that reports only the
 * cards whose entries changed.
 *
 * Objects are written with ' for " (tu_json() swaps them); inside the assigned
 * annotation's text \\' becomes \". */
#include "testutil.h"
#include "testjson.h"

#include <errno.h>
#include <jansson.h>

#include "egpu/controller.h"

static void assert_json(const json_t *got, const char *want_q)
{
    json_t *want = tu_json(want_q);

    if (!json_equal((json_t *)got, want)) {
        char *g = json_dumps(got, JSON_SORT_KEYS | JSON_COMPACT);
        char *w = json_dumps(want, JSON_SORT_KEYS | JSON_COMPACT);

        print_error("got  %s\nwant %s\n", g, w);
        free(g);
        free(w);
        json_decref(want);
        fail();
    }
    json_decref(want);
}

/* A pod of ns/name bound to node (NULL: not bound) in phase (NULL: none)
 * with assigned text (q form, NULL: none) and extra annotations (q form
 * object members, "" for none). */
static json_t *pod(const char *ns, const char *name, const char *node, const char *phase,
                   const char *assigned, const char *extra)
{
    char buf[6000];

    snprintf(buf, sizeof(buf),
             "{'metadata':{'namespace':'%s','name':'%s','uid':'uid-%s','annotations':{%s%s%s%s%s}},"
             "'spec':{%s%s%s},'status':{%s%s%s}}",
             ns, name, name, assigned ? "'elasticgpu.io/assigned':'" : "", assigned ? assigned : "",
             assigned ? "'" : "", assigned && extra[0] ? "," : "", extra,
             node ? "'nodeName':'" : "", node ? node : "", node ? "'" : "",
             phase ? "'phase':'" : "", phase ? phase : "", phase ? "'" : "");
    return tu_json(buf);
}

#define TWO_CONTAINERS                                                                           \
    "{\\'node\\':\\'n1\\',\\'containers\\':["                                                    \
    "{\\'name\\':\\'train\\',\\'core\\':30,\\'memory\\':4096,\\'gpus\\':[\\'GPU-a\\']},"         \
    "{\\'name\\':\\'side\\',\\'core\\':100,\\'memory\\':0,\\'gpus\\':[\\'GPU-a\\',\\'GPU-b\\']}" \
    "]}"

static void test_entries_of_a_pod(void **state)
{
    struct egpu_error err = {0};
    json_t *p =
        pod("ml", "job", "n1", "Running", TWO_CONTAINERS, "'egpuc.elasticgpu.io/train':'team-a'");
    json_t *out = NULL;

    (void)state;
    assert_int_equal(egpu_controller_pod_gpu_entries(p, &out, &err), 0);
    assert_json(out, "{'n1/GPU-a':["
                     "{'namespace':'ml','pod':'job','podUID':'uid-job','container':'train',"
                     "'core':30,'memory':4096,'claim':'team-a'},"
                     "{'namespace':'ml','pod':'job','podUID':'uid-job','container':'side',"
                     "'core':100,'memory':0}],"
                     "'n1/GPU-b':["
                     "{'namespace':'ml','pod':'job','podUID':'uid-job','container':'side',"
                     "'core':100,'memory':0}]}");
    json_decref(out);
    json_decref(p);
}

static void test_pods_that_give_nothing(void **state)
{
    static const struct {
        const char *node, *phase, *assigned;
        int rc;
        const char *msg;
    } rows[] = {
        {NULL, NULL, TWO_CONTAINERS, 0, ""},        /* not bound yet */
        {"n1", "Succeeded", TWO_CONTAINERS, 0, ""}, /* finished */
        {"n1", "Failed", TWO_CONTAINERS, 0, ""},
        {"n1", NULL, NULL, 0, ""}, /* not ours */
        {"n2", "Running", TWO_CONTAINERS, EGPU_ERANGE,
         "elasticgpu.io/assigned: node: \"n1\", but the pod is bound to node \"n2\""},
        {"n1", "Running", "{\\'node\\':\\'n1\\',\\'containers\\':[{}]}", EGPU_ESYNTAX,
         "elasticgpu.io/assigned: containers[0].name: missing"},
        {"n1", "Running", "not json", EGPU_ESYNTAX, "elasticgpu.io/assigned: not a JSON object"},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        struct egpu_error err = {0};
        json_t *p = pod("ml", "job", rows[i].node, rows[i].phase, rows[i].assigned, "");
        json_t *out = NULL;

        assert_int_equal(egpu_controller_pod_gpu_entries(p, &out, &err), rows[i].rc);
        assert_non_null(out);
        assert_int_equal(json_object_size(out), 0);
        if (rows[i].msg[0] != '\0' && strncmp(err.msg, rows[i].msg, strlen(rows[i].msg)) != 0)
            fail_msg("row %zu: message \"%s\", want \"%s...\"", i, err.msg, rows[i].msg);
        json_decref(out);
        json_decref(p);
    }
}

static void test_sort_and_equal(void **state)
{
    json_t *list = tu_json("[{'namespace':'b','pod':'a','container':'x'},"
                           "{'namespace':'a','pod':'z','container':'y'},"
                           "{'namespace':'a','pod':'b','container':'y','core':20},"
                           "{'namespace':'a','pod':'b','container':'y','core':10},"
                           "{'namespace':'a','pod':'b','container':'c'}]");
    json_t *empty = tu_json("[]"), *null = json_null();

    (void)state;
    assert_int_equal(egpu_controller_gpu_allocated_sort(list), 0);
    assert_json(list, "[{'namespace':'a','pod':'b','container':'c'},"
                      "{'namespace':'a','pod':'b','container':'y','core':10},"
                      "{'namespace':'a','pod':'b','container':'y','core':20},"
                      "{'namespace':'a','pod':'z','container':'y'},"
                      "{'namespace':'b','pod':'a','container':'x'}]");
    assert_int_equal(egpu_controller_gpu_allocated_sort(null), -EINVAL);
    assert_true(egpu_controller_gpu_allocated_equal(NULL, empty));
    assert_true(egpu_controller_gpu_allocated_equal(null, empty));
    assert_false(egpu_controller_gpu_allocated_equal(NULL, list));
    assert_false(egpu_controller_gpu_allocated_equal(list, empty));
    assert_true(egpu_controller_gpu_allocated_equal(list, list));
    json_decref(list);
    json_decref(empty);
}

/* Index ix's pod event; asserts it touched exactly the cards want (q form
 * JSON array, any order). */
static void pod_event(struct egpu_controller_gpu_index *ix, const char *name, json_t *p,
                      const char *want)
{
    struct egpu_error err = {0};
    json_t *touched = NULL, *w = tu_json(want);
    size_t i;
    json_t *k;

    assert_int_equal(egpu_controller_gpu_index_pod(ix, "ml", name, p, &touched, &err), 0);
    assert_int_equal(json_array_size(touched), json_array_size(w));
    json_array_foreach(w, i, k)
    {
        bool found = false;

        for (size_t j = 0; j < json_array_size(touched); j++)
            found = found || json_equal(json_array_get(touched, j), k);
        if (!found)
            fail_msg("%s not touched", json_string_value(k));
    }
    json_decref(touched);
    json_decref(w);
    json_decref(p);
}

static void test_index_touches_only_changed_cards(void **state)
{
    struct egpu_controller_gpu_index *ix = egpu_controller_gpu_index_new();
    json_t *gpu =
        tu_json("{'metadata':{'name':'n1-gpu0'},'spec':{'nodeName':'n1','uuid':'GPU-a'}}");
    json_t *bad = tu_json("{'metadata':{'name':'x'},'spec':{'nodeName':'n1'}}");
    struct egpu_error err = {0};
    char key[EGPU_CONTROLLER_CARD_KEY_MAX], name[EGPU_K8S_NAME_MAX];
    json_t *alloc, *cards;

    (void)state;
    assert_non_null(ix);
    pod_event(ix, "job", pod("ml", "job", "n1", NULL, TWO_CONTAINERS, ""),
              "['n1/GPU-a','n1/GPU-b']");
    /* Running now, a claim of another container: the same entries. */
    pod_event(ix, "job",
              pod("ml", "job", "n1", "Running", TWO_CONTAINERS, "'egpuc.elasticgpu.io/other':'c'"),
              "[]");
    /* A second pod on GPU-b only. */
    pod_event(ix, "b",
              pod("ml", "b", "n1", NULL,
                  "{\\'node\\':\\'n1\\',\\'containers\\':[{\\'name\\':\\'m\\',\\'core\\':20,"
                  "\\'memory\\':1,\\'gpus\\':[\\'GPU-b\\']}]}",
                  ""),
              "['n1/GPU-b']");
    alloc = egpu_controller_gpu_index_allocated(ix, "n1/GPU-b");
    assert_json(alloc, "[{'namespace':'ml','pod':'b','podUID':'uid-b','container':'m','core':20,"
                       "'memory':1},"
                       "{'namespace':'ml','pod':'job','podUID':'uid-job','container':'side',"
                       "'core':100,'memory':0}]");
    json_decref(alloc);
    /* The claim of train shows on GPU-a only. */
    pod_event(ix, "job",
              pod("ml", "job", "n1", "Running", TWO_CONTAINERS, "'egpuc.elasticgpu.io/train':'c'"),
              "['n1/GPU-a']");
    /* Finished: both its cards. */
    pod_event(ix, "job", pod("ml", "job", "n1", "Succeeded", TWO_CONTAINERS, ""),
              "['n1/GPU-a','n1/GPU-b']");
    alloc = egpu_controller_gpu_index_allocated(ix, "n1/GPU-a");
    assert_json(alloc, "[]");
    json_decref(alloc);
    /* Deleted: its card; deleted again: nothing. */
    pod_event(ix, "b", NULL, "['n1/GPU-b']");
    pod_event(ix, "b", NULL, "[]");
    alloc = egpu_controller_gpu_index_allocated(ix, "n1/GPU-b");
    assert_json(alloc, "[]");
    json_decref(alloc);

    /* GPU objects: their card keys. */
    assert_false(egpu_controller_gpu_index_gpu_name(ix, "n1/GPU-a", name, sizeof(name)));
    assert_int_equal(egpu_controller_gpu_index_gpu(ix, gpu, false, key, sizeof(key), &err), 0);
    assert_string_equal(key, "n1/GPU-a");
    assert_true(egpu_controller_gpu_index_gpu_name(ix, "n1/GPU-a", name, sizeof(name)));
    assert_string_equal(name, "n1-gpu0");
    cards = egpu_controller_gpu_index_cards(ix);
    assert_json(cards, "['n1/GPU-a']");
    json_decref(cards);
    assert_int_equal(egpu_controller_gpu_index_gpu(ix, bad, false, key, sizeof(key), &err),
                     EGPU_ESYNTAX);
    assert_int_equal(egpu_controller_gpu_index_gpu(ix, gpu, true, key, sizeof(key), &err), 0);
    assert_false(egpu_controller_gpu_index_gpu_name(ix, "n1/GPU-a", name, sizeof(name)));
    json_decref(gpu);
    json_decref(bad);
    egpu_controller_gpu_index_free(ix);
}

static void test_index_drops_a_broken_annotation(void **state)
{
    struct egpu_controller_gpu_index *ix = egpu_controller_gpu_index_new();
    struct egpu_error err = {0};
    json_t *p = pod("ml", "job", "n1", NULL, "{}", ""), *touched = NULL, *alloc;

    (void)state;
    pod_event(ix, "job", pod("ml", "job", "n1", NULL, TWO_CONTAINERS, ""),
              "['n1/GPU-a','n1/GPU-b']");
    assert_int_equal(egpu_controller_gpu_index_pod(ix, "ml", "job", p, &touched, &err),
                     EGPU_ESYNTAX);
    assert_int_equal(json_array_size(touched), 2);
    alloc = egpu_controller_gpu_index_allocated(ix, "n1/GPU-a");
    assert_json(alloc, "[]");
    json_decref(alloc);
    json_decref(touched);
    json_decref(p);
    egpu_controller_gpu_index_free(ix);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_entries_of_a_pod),
        cmocka_unit_test(test_pods_that_give_nothing),
        cmocka_unit_test(test_sort_and_equal),
        cmocka_unit_test(test_index_touches_only_changed_cards),
        cmocka_unit_test(test_index_drops_a_broken_annotation),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
