/* tests/unit/test_net_metrics.c - the Prometheus registry: exact exposition
 * text (escaping, histogram buckets, value formats), registration rules,
 * bounded rendering, and exact sums under concurrent updates. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>

#include "testutil.h"
#include "egpu/net.h"

static char *render(struct egpu_metrics *reg)
{
    struct egpu_buf b;

    egpu_buf_init(&b, 1 << 20);
    assert_int_equal(egpu_metrics_render(reg, &b), 0);
    return egpu_buf_take(&b);
}

static void assert_render(struct egpu_metrics *reg, const char *want)
{
    char *got = render(reg);

    if (strcmp(got ? got : "", want) != 0)
        fail_msg("rendered:\n%s\n--- wanted:\n%s", got ? got : "", want);
    egpu_free(got);
}

static void test_counter_labels_escaped(void **state)
{
    static const char *const labels[] = {"reason", "path"};
    long live = egpu_alloc_live();
    struct egpu_metrics *reg = egpu_metrics_new();
    struct egpu_metric *m, *again;
    double v;

    (void)state;
    assert_non_null(reg);
    assert_int_equal(egpu_metric_counter(reg, "vgpu_allocate_errors_total",
                                         "Failed Allocate calls.\nLabel values below show the "
                                         "three escapes: backslash, quote, newline.",
                                         2, labels, &m),
                     0);
    /* A labelled family shows no sample before its first update. */
    assert_render(reg, "# HELP vgpu_allocate_errors_total Failed Allocate calls.\\nLabel values "
                       "below show the three escapes: backslash, quote, newline.\n"
                       "# TYPE vgpu_allocate_errors_total counter\n");
    assert_int_equal(egpu_metric_add(m,
                                     (const char *const[]){"device \"GPU-5b4c2e1a\" unhealthy\n"
                                                           "retry later",
                                                           "C:\\vgpu\\lib"},
                                     3),
                     0);
    assert_int_equal(egpu_metric_add(m, (const char *const[]){"timeout", ""}, 0), 0);
    assert_render(reg, "# HELP vgpu_allocate_errors_total Failed Allocate calls.\\nLabel values "
                       "below show the three escapes: backslash, quote, newline.\n"
                       "# TYPE vgpu_allocate_errors_total counter\n"
                       "vgpu_allocate_errors_total{reason=\"device \\\"GPU-5b4c2e1a\\\" "
                       "unhealthy\\nretry later\",path=\"C:\\\\vgpu\\\\lib\"} 3\n"
                       "vgpu_allocate_errors_total{reason=\"timeout\",path=\"\"} 0\n");
    assert_int_equal(egpu_metric_inc(m, (const char *const[]){"timeout", ""}), 0);
    assert_int_equal(egpu_metric_get(m, (const char *const[]){"timeout", ""}, &v), 0);
    assert_true(v == 1.0);
    assert_int_equal(egpu_metric_get(m, (const char *const[]){"nope", ""}, &v), -ENOENT);
    /* HELP escapes only backslash and newline; quotes stay. */
    assert_int_equal(egpu_metric_counter(reg, "x_total", "a \"q\" \\ b", 0, NULL, &again), 0);
    /* Counters never go down; NaN is refused. */
    assert_int_equal(egpu_metric_add(again, NULL, -1), -EINVAL);
    assert_int_equal(egpu_metric_add(again, NULL, NAN), -EINVAL);
    assert_int_equal(egpu_metric_set(again, NULL, 5), -EINVAL);
    assert_int_equal(egpu_metric_add(again, NULL, 2.5), 0);
    assert_render(reg, "# HELP vgpu_allocate_errors_total Failed Allocate calls.\\nLabel values "
                       "below show the three escapes: backslash, quote, newline.\n"
                       "# TYPE vgpu_allocate_errors_total counter\n"
                       "vgpu_allocate_errors_total{reason=\"device \\\"GPU-5b4c2e1a\\\" "
                       "unhealthy\\nretry later\",path=\"C:\\\\vgpu\\\\lib\"} 3\n"
                       "vgpu_allocate_errors_total{reason=\"timeout\",path=\"\"} 1\n"
                       "# HELP x_total a \"q\" \\\\ b\n"
                       "# TYPE x_total counter\n"
                       "x_total 2.5\n");
    egpu_metrics_free(reg);
    assert_int_equal(egpu_alloc_live(), live);
}

static void test_gauge_values(void **state)
{
    static const char *const labels[] = {"node", "uuid"};
    long live = egpu_alloc_live();
    struct egpu_metrics *reg = egpu_metrics_new();
    struct egpu_metric *g, *info;

    (void)state;
    assert_int_equal(egpu_metric_gauge(reg, "vgpu_device_memory_allocated_bytes",
                                       "GPU memory promised to pods, per physical GPU.", 2, labels,
                                       &g),
                     0);
    /* Children print sorted by label values, not in creation order. */
    assert_int_equal(
        egpu_metric_set(g, (const char *const[]){"gpu-node-1", "GPU-fef8"}, 8589934592.0), 0);
    assert_int_equal(egpu_metric_set(g, (const char *const[]){"gpu-node-1", "GPU-5b4c"}, 7), 0);
    assert_int_equal(egpu_metric_add(g, (const char *const[]){"gpu-node-1", "GPU-5b4c"}, -7), 0);
    assert_int_equal(egpu_metric_gauge(reg, "vgpu_build_info", "", 0, NULL, &info), 0);
    assert_int_equal(egpu_metric_inc(info, NULL), 0);
    assert_int_equal(egpu_metric_observe(info, NULL, 1), -EINVAL);
    assert_int_equal(egpu_metric_set(g, NULL, 1), -EINVAL);
    assert_int_equal(egpu_metric_set(g, (const char *const[]){"a", NULL}, 1), -EINVAL);
    assert_render(reg, "# HELP vgpu_device_memory_allocated_bytes GPU memory promised to pods, "
                       "per physical GPU.\n"
                       "# TYPE vgpu_device_memory_allocated_bytes gauge\n"
                       "vgpu_device_memory_allocated_bytes{node=\"gpu-node-1\",uuid=\"GPU-5b4c\"} "
                       "0\n"
                       "vgpu_device_memory_allocated_bytes{node=\"gpu-node-1\",uuid=\"GPU-fef8\"} "
                       "8589934592\n"
                       "# TYPE vgpu_build_info gauge\n"
                       "vgpu_build_info 1\n");
    egpu_metrics_free(reg);

    /* Values: shortest exact form, and Prometheus' spellings of the specials. */
    reg = egpu_metrics_new();
    assert_int_equal(egpu_metric_gauge(reg, "v", "", 1, (const char *const[]){"k"}, &g), 0);
    assert_int_equal(egpu_metric_set(g, (const char *const[]){"a"}, 0.1 + 0.2), 0);
    assert_int_equal(egpu_metric_set(g, (const char *const[]){"b"}, 1e21), 0);
    assert_int_equal(egpu_metric_set(g, (const char *const[]){"c"}, NAN), 0);
    assert_int_equal(egpu_metric_set(g, (const char *const[]){"d"}, INFINITY), 0);
    assert_int_equal(egpu_metric_set(g, (const char *const[]){"e"}, -INFINITY), 0);
    assert_int_equal(egpu_metric_set(g, (const char *const[]){"f"}, -0.25), 0);
    assert_int_equal(egpu_metric_set(g, (const char *const[]){"g"}, 1.7342), 0);
    assert_render(reg, "# TYPE v gauge\n"
                       "v{k=\"a\"} 0.30000000000000004\n"
                       "v{k=\"b\"} 1e+21\n"
                       "v{k=\"c\"} NaN\n"
                       "v{k=\"d\"} +Inf\n"
                       "v{k=\"e\"} -Inf\n"
                       "v{k=\"f\"} -0.25\n"
                       "v{k=\"g\"} 1.7342\n");
    egpu_metrics_free(reg);
    assert_int_equal(egpu_alloc_live(), live);
}

/* Keep the children whose first label value does not start with "gone". */
static bool not_gone(const char *const *values, void *data)
{
    int *calls = data;

    (*calls)++;
    return strncmp(values[0], "gone", 4) != 0;
}

/* egpu_metric_retain drops exactly the series keep refuses, frees them,
 * and the family goes on working (a dropped series comes back at 0). */
static void test_retain_drops_series(void **state)
{
    long live = egpu_alloc_live();
    struct egpu_metrics *reg = egpu_metrics_new();
    struct egpu_metric *g, *plain;
    double v = -1;
    int calls = 0;

    (void)state;
    assert_int_equal(egpu_metric_gauge(reg, "alloc", "", 1, (const char *const[]){"node"}, &g), 0);
    assert_int_equal(egpu_metric_gauge(reg, "plain", "", 0, NULL, &plain), 0);
    for (int i = 0; i < 40; i++) { /* enough to grow the table */
        char name[16];

        snprintf(name, sizeof(name), i % 4 == 0 ? "gone-%02d" : "node-%02d", i);
        assert_int_equal(egpu_metric_set(g, (const char *const[]){name}, i), 0);
    }
    assert_int_equal(egpu_metric_set(plain, NULL, 3), 0);
    assert_int_equal(egpu_metric_retain(g, not_gone, &calls), 10);
    assert_int_equal(calls, 40);
    assert_int_equal(egpu_metric_retain(plain, not_gone, &calls), 0); /* no labels: untouched */
    assert_int_equal(egpu_metric_get(g, (const char *const[]){"gone-04"}, &v), -ENOENT);
    assert_int_equal(egpu_metric_get(g, (const char *const[]){"node-05"}, &v), 0);
    assert_true(v == 5);
    assert_int_equal(egpu_metric_inc(g, (const char *const[]){"gone-04"}), 0);
    assert_int_equal(egpu_metric_get(g, (const char *const[]){"gone-04"}, &v), 0);
    assert_true(v == 1);
    assert_int_equal(egpu_metric_retain(NULL, not_gone, &calls), 0);
    {
        struct egpu_buf out;

        egpu_buf_init(&out, 1 << 20);
        assert_int_equal(egpu_metrics_render(reg, &out), 0);
        assert_null(strstr(out.data, "gone-00"));
        assert_non_null(strstr(out.data, "alloc{node=\"gone-04\"} 1\n"));
        assert_non_null(strstr(out.data, "alloc{node=\"node-39\"} 39\n"));
        egpu_buf_free(&out);
    }
    egpu_metrics_free(reg);
    assert_int_equal(egpu_alloc_live(), live);
}

static void test_histogram_buckets(void **state)
{
    static const double bounds[] = {0.005, 0.01, 0.05, 0.1};
    static const double samples[] = {0.001, 0.005, 0.007, 0.03, 0.03, 0.2, 7};
    long live = egpu_alloc_live();
    struct egpu_metrics *reg = egpu_metrics_new();
    struct egpu_metric *h, *hl;
    double count;

    (void)state;
    assert_int_equal(egpu_metric_histogram(reg, "vgpu_allocate_duration_seconds",
                                           "Latency of DevicePlugin.Allocate.", 0, NULL, 4, bounds,
                                           &h),
                     0);
    assert_render(reg, "# HELP vgpu_allocate_duration_seconds Latency of DevicePlugin.Allocate.\n"
                       "# TYPE vgpu_allocate_duration_seconds histogram\n"
                       "vgpu_allocate_duration_seconds_bucket{le=\"0.005\"} 0\n"
                       "vgpu_allocate_duration_seconds_bucket{le=\"0.01\"} 0\n"
                       "vgpu_allocate_duration_seconds_bucket{le=\"0.05\"} 0\n"
                       "vgpu_allocate_duration_seconds_bucket{le=\"0.1\"} 0\n"
                       "vgpu_allocate_duration_seconds_bucket{le=\"+Inf\"} 0\n"
                       "vgpu_allocate_duration_seconds_sum 0\n"
                       "vgpu_allocate_duration_seconds_count 0\n");
    for (size_t i = 0; i < sizeof(samples) / sizeof(samples[0]); i++)
        assert_int_equal(egpu_metric_observe(h, NULL, samples[i]), 0);
    assert_int_equal(egpu_metric_add(h, NULL, 1), -EINVAL);
    assert_int_equal(egpu_metric_get(h, NULL, &count), 0);
    assert_true(count == 7);
    /* Upper bounds are inclusive (0.005 lands in le="0.005"), counts are
     * cumulative, +Inf equals _count, and _sum adds every sample. */
    assert_render(reg, "# HELP vgpu_allocate_duration_seconds Latency of DevicePlugin.Allocate.\n"
                       "# TYPE vgpu_allocate_duration_seconds histogram\n"
                       "vgpu_allocate_duration_seconds_bucket{le=\"0.005\"} 2\n"
                       "vgpu_allocate_duration_seconds_bucket{le=\"0.01\"} 3\n"
                       "vgpu_allocate_duration_seconds_bucket{le=\"0.05\"} 5\n"
                       "vgpu_allocate_duration_seconds_bucket{le=\"0.1\"} 5\n"
                       "vgpu_allocate_duration_seconds_bucket{le=\"+Inf\"} 7\n"
                       "vgpu_allocate_duration_seconds_sum 7.273\n"
                       "vgpu_allocate_duration_seconds_count 7\n");
    egpu_metrics_free(reg);

    /* With labels, le comes last; a trailing +Inf bound is accepted. */
    reg = egpu_metrics_new();
    assert_int_equal(egpu_metric_histogram(reg, "d_seconds", "", 1, (const char *const[]){"path"},
                                           2, (const double[]){1, INFINITY}, &hl),
                     0);
    assert_int_equal(egpu_metric_observe(hl, (const char *const[]){"/x"}, 0.5), 0);
    assert_int_equal(egpu_metric_observe(hl, (const char *const[]){"/x"}, 2), 0);
    assert_render(reg, "# TYPE d_seconds histogram\n"
                       "d_seconds_bucket{path=\"/x\",le=\"1\"} 1\n"
                       "d_seconds_bucket{path=\"/x\",le=\"+Inf\"} 2\n"
                       "d_seconds_sum{path=\"/x\"} 2.5\n"
                       "d_seconds_count{path=\"/x\"} 2\n");
    egpu_metrics_free(reg);
    assert_int_equal(egpu_alloc_live(), live);
}

static void test_registration_rules(void **state)
{
    static const char *const one[] = {"a"};
    long live = egpu_alloc_live();
    struct egpu_metrics *reg = egpu_metrics_new();
    struct egpu_metric *m, *same, *h;

    (void)state;
    assert_int_equal(egpu_metric_counter(reg, "requests", "h", 0, NULL, &m), -EINVAL);
    assert_int_equal(egpu_metric_counter(reg, "9bad_total", "h", 0, NULL, &m), -EINVAL);
    assert_int_equal(egpu_metric_gauge(reg, "bad-name", "h", 0, NULL, &m), -EINVAL);
    assert_int_equal(egpu_metric_gauge(reg, "ok:name", "h", 1, (const char *const[]){"__x"}, &m),
                     -EINVAL);
    assert_int_equal(egpu_metric_gauge(reg, "ok", "h", 1, (const char *const[]){"1x"}, &m),
                     -EINVAL);
    assert_int_equal(egpu_metric_gauge(reg, "ok", "h", 2, (const char *const[]){"a", "a"}, &m),
                     -EINVAL);
    assert_int_equal(egpu_metric_histogram(reg, "hh", "h", 1, (const char *const[]){"le"}, 1,
                                           (const double[]){1}, &m),
                     -EINVAL);
    assert_int_equal(egpu_metric_histogram(reg, "hh", "h", 0, NULL, 2, (const double[]){1, 1}, &m),
                     -EINVAL);
    assert_int_equal(
        egpu_metric_histogram(reg, "hh", "h", 0, NULL, 2, (const double[]){NAN, 1}, &m), -EINVAL);
    assert_int_equal(
        egpu_metric_gauge(reg, "many", "h", EGPU_METRIC_LABELS_MAX + 1,
                          (const char *const[]){"a", "b", "c", "d", "e", "f", "g", "h", "i"}, &m),
        EGPU_ELIMIT);
    /* Same shape again: the same family; another shape: -EEXIST. */
    assert_int_equal(egpu_metric_counter(reg, "c_total", "h", 1, one, &m), 0);
    assert_int_equal(egpu_metric_counter(reg, "c_total", "h", 1, one, &same), 0);
    assert_ptr_equal(m, same);
    assert_int_equal(egpu_metric_counter(reg, "c_total", "other help", 1, one, &same), -EEXIST);
    assert_int_equal(egpu_metric_gauge(reg, "c_total", "h", 1, one, &same), -EEXIST);
    /* A histogram's series names are taken too. */
    assert_int_equal(egpu_metric_histogram(reg, "lat", "h", 0, NULL, 1, (const double[]){1}, &h),
                     0);
    assert_int_equal(egpu_metric_gauge(reg, "lat_count", "h", 0, NULL, &m), -EEXIST);
    assert_int_equal(egpu_metric_histogram(reg, "c", "h", 0, NULL, 1, (const double[]){1}, &h), 0);
    assert_int_equal(egpu_metric_gauge(reg, "x_sum", "h", 0, NULL, &m), 0);
    assert_int_equal(egpu_metric_histogram(reg, "x", "h", 0, NULL, 1, (const double[]){1}, &h),
                     -EEXIST);
    /* Out of memory while registering leaves nothing behind. */
    for (long nth = 1; nth < 12; nth++) {
        egpu_alloc_fail_after(nth);
        if (egpu_metric_gauge(reg, "oom", "h", 1, one, &m) == 0) {
            egpu_alloc_fail_after(0);
            break;
        }
        egpu_alloc_fail_after(0);
    }
    egpu_metrics_free(reg);
    assert_int_equal(egpu_alloc_live(), live);
}

static void test_render_bounded(void **state)
{
    long live = egpu_alloc_live();
    struct egpu_metrics *reg = egpu_metrics_new();
    struct egpu_metric *m;
    struct egpu_buf b;

    (void)state;
    assert_int_equal(egpu_metric_gauge(reg, "a_gauge", "some help", 0, NULL, &m), 0);
    egpu_buf_init(&b, 20);
    assert_int_equal(egpu_buf_append(&b, "keep", 4), 0);
    assert_int_equal(egpu_metrics_render(reg, &b), -EMSGSIZE);
    assert_string_equal(egpu_buf_str(&b), "keep");
    egpu_buf_free(&b);
    /* An empty registry renders nothing. */
    egpu_metrics_free(reg);
    reg = egpu_metrics_new();
    egpu_buf_init(&b, 20);
    assert_int_equal(egpu_metrics_render(reg, &b), 0);
    assert_int_equal(b.len, 0);
    egpu_buf_free(&b);
    /* A child that cannot be allocated is an error, not a crash. */
    assert_int_equal(egpu_metric_counter(reg, "n_total", "", 1, (const char *const[]){"k"}, &m), 0);
    egpu_alloc_fail_after(1);
    assert_int_equal(egpu_metric_inc(m, (const char *const[]){"v"}), -ENOMEM);
    egpu_alloc_fail_after(0);
    egpu_metrics_free(reg);
    assert_int_equal(egpu_alloc_live(), live);
}

#define NTHREADS 8
#define NINCS    20000

struct worker {
    struct egpu_metric *counter;
    struct egpu_metric *hist;
    int id;
};

static void *hammer(void *arg)
{
    struct worker *w = arg;
    char label[16];

    for (int i = 0; i < NINCS; i++) {
        /* Half the updates hit a shared child, half a new one per 1000. */
        snprintf(label, sizeof(label), "k%d", (i % 2) ? 0 : (i / 1000) % 10);
        if (egpu_metric_inc(w->counter, (const char *const[]){label}) != 0)
            return (void *)1;
        if (egpu_metric_observe(w->hist, NULL, (double)(i % 4)) != 0)
            return (void *)1;
    }
    return NULL;
}

static void test_concurrent_updates(void **state)
{
    long live = egpu_alloc_live();
    struct egpu_metrics *reg = egpu_metrics_new();
    struct worker w[NTHREADS];
    pthread_t t[NTHREADS];
    double total = 0, v;
    char label[16];
    char *text;

    (void)state;
    assert_int_equal(
        egpu_metric_counter(reg, "ops_total", "", 1, (const char *const[]){"k"}, &w[0].counter), 0);
    assert_int_equal(
        egpu_metric_histogram(reg, "op_size", "", 0, NULL, 2, (const double[]){0.5, 2}, &w[0].hist),
        0);
    for (int i = 0; i < NTHREADS; i++) {
        w[i] = (struct worker){.counter = w[0].counter, .hist = w[0].hist, .id = i};
        assert_int_equal(pthread_create(&t[i], NULL, hammer, &w[i]), 0);
    }
    for (int i = 0; i < NTHREADS; i++) {
        void *ret;

        assert_int_equal(pthread_join(t[i], &ret), 0);
        assert_null(ret);
    }
    for (int k = 0; k < 10; k++) {
        snprintf(label, sizeof(label), "k%d", k);
        assert_int_equal(egpu_metric_get(w[0].counter, (const char *const[]){label}, &v), 0);
        total += v;
    }
    assert_true(total == (double)NTHREADS * NINCS);
    assert_int_equal(egpu_metric_get(w[0].counter, (const char *const[]){"k0"}, &v), 0);
    assert_true(v == NTHREADS * (NINCS / 2 + NINCS / 20));
    /* Each thread observed 0,1,2,3 NINCS/4 times each: sum 1.5 * NINCS. */
    text = render(reg);
    assert_non_null(strstr(text, "op_size_bucket{le=\"0.5\"} 40000\n"
                                 "op_size_bucket{le=\"2\"} 120000\n"
                                 "op_size_bucket{le=\"+Inf\"} 160000\n"
                                 "op_size_sum 240000\n"
                                 "op_size_count 160000\n"));
    egpu_free(text);
    egpu_metrics_free(reg);
    assert_int_equal(egpu_alloc_live(), live);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counter_labels_escaped), cmocka_unit_test(test_gauge_values),
        cmocka_unit_test(test_histogram_buckets),      cmocka_unit_test(test_registration_rules),
        cmocka_unit_test(test_render_bounded),         cmocka_unit_test(test_concurrent_updates),
        cmocka_unit_test(test_retain_drops_series),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
