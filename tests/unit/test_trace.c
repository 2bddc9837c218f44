/* tests/unit/test_trace.c - the openb CSV loader and its error messages.
 *
 * Fixtures live in tests/fixtures/sim/. Each malformed file must fail with
 * the file and line in the message and leave nothing allocated.
 */
#include <errno.h>
#include <stdlib.h>

#include "testutil.h"
#include "egpu/sim.h"

#define FIX(name) EGPU_FIXTURES "/sim/" name

static void load_ok(const char *nodes, const char *pods, struct egpu_trace *t)
{
    struct egpu_error err = {0};

    if (egpu_trace_load(nodes, pods, t, &err) != 0)
        fail_msg("load %s %s: %s", nodes, pods, err.msg);
}

static void test_load_small(void **state)
{
    struct egpu_trace t;
    long live = egpu_alloc_live();

    (void)state;
    load_ok(FIX("nodes_small.csv"), FIX("pods_small.csv"), &t);
    assert_int_equal(t.nnodes, 3);
    assert_string_equal(t.nodes[0].name, "n-a");
    assert_int_equal(t.nodes[0].cpu_milli, 32000);
    assert_int_equal(t.nodes[0].mem_mib, 131072);
    assert_int_equal(t.nodes[0].ngpus, 4);
    assert_string_equal(t.nodes[0].model, "V100M16");
    assert_int_equal(t.nodes[2].ngpus, 0);
    assert_string_equal(t.nodes[2].model, "");
    /* Pods come back sorted by name, whatever the file order. */
    assert_int_equal(t.npods, 5);
    for (size_t i = 0; i < t.npods; i++) {
        char want[32];

        snprintf(want, sizeof(want), "pod-%zu", i + 1);
        assert_string_equal(t.pods[i].name, want);
    }
    assert_int_equal(t.pods[2].gpu_milli, 500); /* pod-3 */
    assert_int_equal(t.pods[1].num_gpu, 0);     /* pod-2 asks no GPU */
    assert_int_equal(t.pods[3].num_gpu, 2);
    assert_string_equal(t.pods[3].gpu_spec, "V100M16");
    assert_string_equal(t.pods[4].gpu_spec, "T4|V100M16");
    egpu_trace_free(&t);
    assert_int_equal(egpu_alloc_live(), live);
}

static void test_columns_by_header(void **state)
{
    struct egpu_trace t;

    (void)state;
    /* Five columns only (the multigpu20 file's form). */
    load_ok(FIX("nodes_small.csv"), FIX("pods_five_columns.csv"), &t);
    assert_int_equal(t.npods, 2);
    assert_string_equal(t.pods[0].name, "p0");
    assert_int_equal(t.pods[0].num_gpu, 4);
    assert_string_equal(t.pods[0].gpu_spec, "");
    egpu_trace_free(&t);
    /* Columns in another order, plus an unknown one. */
    load_ok(FIX("nodes_small.csv"), FIX("pods_reordered.csv"), &t);
    assert_int_equal(t.npods, 1);
    assert_string_equal(t.pods[0].name, "x");
    assert_int_equal(t.pods[0].cpu_milli, 1500);
    assert_int_equal(t.pods[0].mem_mib, 2048);
    assert_int_equal(t.pods[0].gpu_milli, 300);
    egpu_trace_free(&t);
}

struct bad_case {
    const char *nodes;
    const char *pods;
    int code;
    const char *want; /* substring of the message */
};

static void test_malformed(void **state)
{
    static const struct bad_case cases[] = {
        {"nodes_small.csv", "bad_number.csv", EGPU_ESYNTAX,
         "bad_number.csv:3: memory_mib \"abc\": not a whole number"},
        {"nodes_small.csv", "bad_share.csv", EGPU_ERANGE, "bad_share.csv:2: gpu_milli \"300\""},
        {"nodes_small.csv", "bad_range.csv", EGPU_ERANGE,
         "bad_range.csv:2: gpu_milli \"1001\": out of range (allowed 0..1000)"},
        {"nodes_small.csv", "bad_header.csv", EGPU_ESYNTAX,
         "bad_header.csv:1: header lacks column num_gpu"},
        {"nodes_small.csv", "bad_short.csv", EGPU_ESYNTAX,
         "bad_short.csv:2: memory_mib \"\": missing value"},
        {"nodes_small.csv", "empty.csv", -EINVAL, "empty.csv: no rows after the header"},
        {"nodes_small.csv", "bad_quote.csv", EGPU_ESYNTAX, "bad_quote.csv:"},
        {"nodes_no_model.csv", "pods_small.csv", EGPU_ESYNTAX,
         "nodes_no_model.csv:2: model \"\": a node with GPUs needs its GPU model"},
        {"nodes_negative.csv", "pods_small.csv", EGPU_ESYNTAX,
         "nodes_negative.csv:2: cpu_milli \"-1000\""},
        {"nodes_small.csv", "no_such_file.csv", -ENOENT, "no_such_file.csv: No such file"},
    };
    long live = egpu_alloc_live();

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char nodes[512], pods[512];
        struct egpu_trace t;
        struct egpu_error err = {0};
        int rc;

        snprintf(nodes, sizeof(nodes), "%s/sim/%s", EGPU_FIXTURES, cases[i].nodes);
        snprintf(pods, sizeof(pods), "%s/sim/%s", EGPU_FIXTURES, cases[i].pods);
        rc = egpu_trace_load(nodes, pods, &t, &err);
        if (rc != cases[i].code || strstr(err.msg, cases[i].want) == NULL)
            fail_msg("%s: rc %d (want %d), message \"%s\" (want \"%s\")", cases[i].pods, rc,
                     cases[i].code, err.msg, cases[i].want);
        assert_null(t.nodes);
        assert_null(t.pods);
        assert_int_equal(egpu_alloc_live(), live);
    }
}

static void test_out_of_memory(void **state)
{
    long live = egpu_alloc_live();
    int failures = 0;

    (void)state;
    /* Fail each allocation in turn: every load either works or says so. */
    for (long n = 1; n < 40; n++) {
        struct egpu_trace t;
        struct egpu_error err = {0};
        int rc;

        egpu_alloc_fail_after(n);
        rc = egpu_trace_load(FIX("nodes_small.csv"), FIX("pods_small.csv"), &t, &err);
        egpu_alloc_fail_after(0);
        if (rc == 0) {
            assert_int_equal(t.npods, 5);
            egpu_trace_free(&t);
        } else {
            assert_int_equal(rc, -ENOMEM);
            failures++;
        }
        assert_int_equal(egpu_alloc_live(), live);
    }
    assert_true(failures > 0);
}

static void test_cluster_and_requests(void **state)
{
    struct egpu_trace t;
    struct egpu_cluster *c;
    struct egpu_pod_request r;
    struct egpu_error err = {0};
    int v100, t4;

    (void)state;
    load_ok(FIX("nodes_small.csv"), FIX("pods_small.csv"), &t);
    assert_int_equal(egpu_trace_cluster(&t, &c, &err), 0);
    assert_int_equal(c->nnodes, 3);
    assert_int_equal(c->ngpus, 6);
    assert_int_equal(c->core_milli, 6000);
    assert_string_equal(c->nodes[0]->gpus[3].uuid, "n-a-gpu3");
    v100 = egpu_cluster_find_model(c, "V100M16");
    t4 = egpu_cluster_find_model(c, "T4");
    assert_true(v100 >= 0 && t4 >= 0);
    /* pod-5: 25% of one card, T4 or V100M16. */
    assert_int_equal(egpu_trace_request(c, &t.pods[4], &r, &err), 0);
    assert_int_equal(r.ncontainers, 1);
    assert_int_equal(r.containers[0].core_milli, 250);
    assert_int_equal(r.containers[0].ncards, 1);
    assert_true(r.model_mask == ((1ULL << v100) | (1ULL << t4)));
    /* pod-2 asks no GPU: no container, any model. */
    assert_int_equal(egpu_trace_request(c, &t.pods[1], &r, &err), 0);
    assert_int_equal(r.ncontainers, 0);
    assert_true(r.model_mask == 0);
    assert_int_equal(r.cpu_milli, 1000);
    egpu_cluster_free(c);
    egpu_trace_free(&t);
}

static void test_duplicate_node(void **state)
{
    struct egpu_trace t;
    struct egpu_cluster *c = NULL;
    struct egpu_error err = {0};

    (void)state;
    load_ok(FIX("nodes_small.csv"), FIX("pods_small.csv"), &t);
    memcpy(t.nodes[1].name, "n-a", 4);
    assert_int_equal(egpu_trace_cluster(&t, &c, &err), -EEXIST);
    assert_null(c);
    assert_non_null(strstr(err.msg, "node n-a already exists"));
    egpu_trace_free(&t);
}

static void test_find_dir(void **state)
{
    char out[256];
    struct egpu_error err = {0};

    (void)state;
    assert_int_equal(egpu_trace_find_dir(EGPU_FIXTURES "/sim", out, sizeof(out), &err), 0);
    assert_string_equal(out, EGPU_FIXTURES "/sim");
    /* A given directory that does not exist is an error, never a fallback. */
    assert_int_equal(egpu_trace_find_dir("/nonexistent/trace", out, sizeof(out), &err), -ENOENT);
    assert_non_null(strstr(err.msg, "--trace-dir /nonexistent/trace: no such directory"));
    setenv("EGPU_TRACE_DIR", "/nonexistent/env", 1);
    assert_int_equal(egpu_trace_find_dir(NULL, out, sizeof(out), &err), -ENOENT);
    assert_non_null(strstr(err.msg, "EGPU_TRACE_DIR /nonexistent/env"));
    setenv("EGPU_TRACE_DIR", EGPU_FIXTURES "/sim", 1);
    assert_int_equal(egpu_trace_find_dir(NULL, out, sizeof(out), &err), 0);
    assert_string_equal(out, EGPU_FIXTURES "/sim");
    unsetenv("EGPU_TRACE_DIR");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_small),
        cmocka_unit_test(test_columns_by_header),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_out_of_memory),
        cmocka_unit_test(test_cluster_and_requests),
        cmocka_unit_test(test_duplicate_node),
        cmocka_unit_test(test_find_dir),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
