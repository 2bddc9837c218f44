/* tests/unit/test_net_service.c - the set-up src/net/service.c does for
 * every component: the registry made from a table of families (types,
 * labels, buckets and registration order as /metrics shows them, and the
 * errors), families added to a registry made before, and the leader elector's settings from the
 * common lease flags.
 */
#include <errno.h>

#include "testutil.h"
#include "egpu/cli.h"
#include "egpu/kube.h"
#include "egpu/net.h"

static char *render(struct egpu_metrics *reg)
{
    struct egpu_buf b;

    egpu_buf_init(&b, 1 << 20);
    assert_int_equal(egpu_metrics_render(reg, &b), 0);
    return egpu_buf_take(&b);
}

/* Each kind registered as its egpu_metric_* would, in table order. */
static void test_metrics_table(void **state)
{
    static const char *const kind[] = {"kind"};
    static const double bounds[] = {0.5, 1};
    long live = egpu_alloc_live();
    struct egpu_metric *gauge = NULL, *counter = NULL, *hist = NULL;
    const struct egpu_service_metric m[] = {
        {EGPU_SERVICE_GAUGE, "x_depth", "Keys waiting.", 0, NULL, 0, NULL, &gauge},
        {EGPU_SERVICE_COUNTER, "x_errors_total", "Failures, by kind.", 1, kind, 0, NULL, &counter},
        {EGPU_SERVICE_HISTOGRAM, "x_seconds", "Time per key.", 1, kind, 2, bounds, &hist},
    };
    struct egpu_metrics *reg = NULL;
    struct egpu_error err = {0};
    char *text;

    (void)state;
    assert_int_equal(egpu_service_metrics_new(m, 3, &reg, &err), 0);
    assert_non_null(reg);
    assert_non_null(gauge);
    assert_non_null(counter);
    assert_non_null(hist);
    assert_int_equal(egpu_metric_set(gauge, NULL, 3), 0);
    assert_int_equal(egpu_metric_inc(counter, (const char *const[]){"Pod"}), 0);
    assert_int_equal(egpu_metric_observe(hist, (const char *const[]){"Pod"}, 0.7), 0);
    /* The wrong operation for a kind is refused: each is what it says. */
    assert_int_equal(egpu_metric_set(counter, (const char *const[]){"Pod"}, 1), -EINVAL);
    assert_int_equal(egpu_metric_inc(hist, (const char *const[]){"Pod"}), -EINVAL);
    text = render(reg);
    assert_string_equal(text, "# HELP x_depth Keys waiting.\n"
                              "# TYPE x_depth gauge\n"
                              "x_depth 3\n"
                              "# HELP x_errors_total Failures, by kind.\n"
                              "# TYPE x_errors_total counter\n"
                              "x_errors_total{kind=\"Pod\"} 1\n"
                              "# HELP x_seconds Time per key.\n"
                              "# TYPE x_seconds histogram\n"
                              "x_seconds_bucket{kind=\"Pod\",le=\"0.5\"} 0\n"
                              "x_seconds_bucket{kind=\"Pod\",le=\"1\"} 1\n"
                              "x_seconds_bucket{kind=\"Pod\",le=\"+Inf\"} 1\n"
                              "x_seconds_sum{kind=\"Pod\"} 0.7\n"
                              "x_seconds_count{kind=\"Pod\"} 1\n");
    egpu_free(text);
    egpu_metrics_free(reg);
    /* An empty table: an empty registry. */
    assert_int_equal(egpu_service_metrics_new(NULL, 0, &reg, &err), 0);
    assert_non_null(reg);
    egpu_metrics_free(reg);
    assert_int_equal(egpu_alloc_live(), live);
}

/* The first refused family stops the table, with its error in err; the
 * registry is the caller's to free either way. */
static void test_metrics_errors(void **state)
{
    long live = egpu_alloc_live();
    struct egpu_metric *a = NULL, *b = NULL, *c = NULL;
    const struct egpu_service_metric m[] = {
        {EGPU_SERVICE_GAUGE, "ok_gauge", "", 0, NULL, 0, NULL, &a},
        {EGPU_SERVICE_COUNTER, "no_total_suffix", "A counter's name ends in _total.", 0, NULL, 0,
         NULL, &b},
        {EGPU_SERVICE_GAUGE, "never_registered", "", 0, NULL, 0, NULL, &c},
    };
    const struct egpu_service_metric twice[] = {
        {EGPU_SERVICE_GAUGE, "same", "one help", 0, NULL, 0, NULL, &a},
        {EGPU_SERVICE_GAUGE, "same", "another help", 0, NULL, 0, NULL, &b},
    };
    struct egpu_metrics *reg = NULL;
    struct egpu_error err = {0};
    char *text;

    (void)state;
    assert_int_equal(egpu_service_metrics_new(m, 3, &reg, &err), -EINVAL);
    assert_int_equal(err.code, -EINVAL);
    assert_string_equal(err.msg, "metrics: Invalid argument");
    assert_non_null(reg);
    assert_non_null(a);
    assert_null(c);
    text = render(reg);
    assert_string_equal(text, "# TYPE ok_gauge gauge\nok_gauge 0\n");
    egpu_free(text);
    egpu_metrics_free(reg);
    memset(&err, 0, sizeof(err));
    assert_int_equal(egpu_service_metrics_new(twice, 2, &reg, &err), -EEXIST);
    assert_string_equal(err.msg, "metrics: File exists");
    egpu_metrics_free(reg);
    assert_int_equal(egpu_alloc_live(), live);
}

/* Families a library adds to the registry its main made follow the main's,
 * in table order; a refusal keeps those before it. */
static void test_metrics_add(void **state)
{
    long live = egpu_alloc_live();
    struct egpu_metric *a = NULL, *b = NULL, *c = NULL;
    const struct egpu_service_metric first[] = {
        {EGPU_SERVICE_GAUGE, "main_gauge", "", 0, NULL, 0, NULL, &a},
    };
    const struct egpu_service_metric more[] = {
        {EGPU_SERVICE_COUNTER, "lib_writes_total", "", 0, NULL, 0, NULL, &b},
        {EGPU_SERVICE_HISTOGRAM, "lib_seconds", "", 0, NULL, 0, NULL, &c}, /* no bounds: le=+Inf */
        {EGPU_SERVICE_COUNTER, "lib_bad", "", 0, NULL, 0, NULL, NULL},
    };
    struct egpu_metrics *reg = NULL;
    struct egpu_error err = {0};
    char *text;

    (void)state;
    assert_int_equal(egpu_service_metrics_new(first, 1, &reg, &err), 0);
    assert_int_equal(egpu_service_metrics_add(reg, more, 2, &err), 0);
    text = render(reg);
    assert_string_equal(text, "# TYPE main_gauge gauge\nmain_gauge 0\n"
                              "# TYPE lib_writes_total counter\nlib_writes_total 0\n"
                              "# TYPE lib_seconds histogram\n"
                              "lib_seconds_bucket{le=\"+Inf\"} 0\n"
                              "lib_seconds_sum 0\nlib_seconds_count 0\n");
    egpu_free(text);
    /* The same table again: the same families (a shared registry). */
    assert_int_equal(egpu_service_metrics_add(reg, more, 2, &err), 0);
    /* A counter without _total is refused, with the error in err. */
    assert_int_equal(egpu_service_metrics_add(reg, more + 2, 1, &err), -EINVAL);
    assert_string_equal(err.msg, "metrics: Invalid argument");
    egpu_metrics_free(reg);
    assert_int_equal(egpu_alloc_live(), live);
}

/* The lease flags as the elector's settings; the namespace defaults to the
 * client's. */
static void test_elector_config(void **state)
{
    struct egpu_cli_server o;
    struct egpu_kube_elector_config ec;

    (void)state;
    egpu_cli_server_defaults(&o);
    o.lease.name = "egpu-controller";
    memset(&ec, 0xa5, sizeof(ec)); /* zeroed first: nothing left over */
    egpu_service_elector_config(&o, "egpu-system", &ec);
    assert_string_equal(ec.ns, "egpu-system");
    assert_string_equal(ec.name, "egpu-controller");
    assert_null(ec.identity);
    /* client-go's timings, the flags' defaults */
    assert_int_equal(ec.lease_duration_ms, 15000);
    assert_int_equal(ec.renew_deadline_ms, 10000);
    assert_int_equal(ec.retry_period_ms, 2000);
    assert_true(ec.release_on_cancel);
    assert_null(ec.on_started_leading);
    assert_null(ec.on_stopped_leading);
    assert_null(ec.on_new_leader);
    assert_null(ec.ud);
    /* --lease-namespace and the durations win. */
    o.lease.ns = "other";
    o.lease.duration_ms = 30000;
    o.lease.renew_deadline_ms = 20000;
    o.lease.retry_period_ms = 4000;
    egpu_service_elector_config(&o, "egpu-system", &ec);
    assert_string_equal(ec.ns, "other");
    assert_int_equal(ec.lease_duration_ms, 30000);
    assert_int_equal(ec.renew_deadline_ms, 20000);
    assert_int_equal(ec.retry_period_ms, 4000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_metrics_table),
        cmocka_unit_test(test_metrics_errors),
        cmocka_unit_test(test_metrics_add),
        cmocka_unit_test(test_elector_config),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
