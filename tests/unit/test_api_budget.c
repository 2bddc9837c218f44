/* tests/unit/test_api_budget.c - GPUBudget and metering (src/api/budget.c,
 * meter.c, time.c): one table row per rule with its exact message, every
 * good budget rendered and read back to the same struct, used and state,
 * what a pod is charged for, and times and durations as tables.
 *
 * Objects are written with ' for " (tu_json() swaps them) to stay readable. */
#include "testutil.h"
#include "testjson.h"

#include <errno.h>
#include <jansson.h>
#include <stdint.h>

#include "egpu/api.h"

#define HEAD       "{'apiVersion': 'elasticgpu.io/v1alpha1', 'kind': 'GPUBudget', "
#define META       "'metadata': {'name': 'b', 'namespace': 'ml'}, "
#define SPEC(more) "'spec': {'gpuHours': 120, 'overBudgetPriorityClassName': 'low'" more "}"

static void test_budget_rules(void **state)
{
    static const struct {
        const char *obj;
        int code;
        const char *msg;
    } rows[] = {
        {HEAD META "'spec': {'overBudgetPriorityClassName': 'low'}}", EGPU_ESYNTAX,
         "spec.gpuHours is missing; allowed: a number of GPU-hours from 0 to 1000000000, e.g. "
         "120 or 7.5"},
        {HEAD META "'spec': {'gpuHours': '120', 'overBudgetPriorityClassName': 'low'}}",
         EGPU_ESYNTAX,
         "spec.gpuHours is \"120\"; allowed: a number of GPU-hours from 0 to 1000000000, e.g. "
         "120 or 7.5"},
        {HEAD META "'spec': {'gpuHours': -1, 'overBudgetPriorityClassName': 'low'}}", EGPU_ERANGE,
         "spec.gpuHours is -1; allowed: a number of GPU-hours from 0 to 1000000000, e.g. 120 or "
         "7.5"},
        {HEAD META SPEC(", 'memoryWeight': 2000") "}", EGPU_ERANGE,
         "spec.memoryWeight is 2000; allowed: GPU-hours charged per GiB-hour of gpu-memory, a "
         "number from 0 to 1000, e.g. 0.0125 (80 GiB for an hour = 1 GPU-hour)"},
        {HEAD META SPEC(", 'period': 'Hourly'") "}", EGPU_ERANGE,
         "spec.period is \"Hourly\"; allowed: Daily, Weekly, Monthly, or a duration from 1m to "
         "8784h (366 days), e.g. 12h or 168h"},
        {HEAD META SPEC(", 'period': '30s'") "}", EGPU_ERANGE,
         "spec.period is \"30s\"; allowed: Daily, Weekly, Monthly, or a duration from 1m to "
         "8784h (366 days), e.g. 12h or 168h"},
        {HEAD META SPEC(", 'period': '8785h'") "}", EGPU_ERANGE,
         "spec.period is \"8785h\"; allowed: Daily, Weekly, Monthly, or a duration from 1m to "
         "8784h (366 days), e.g. 12h or 168h"},
        {HEAD META SPEC(", 'timeZone': '../etc/passwd'") "}", EGPU_ERANGE,
         "spec.timeZone is \"../etc/passwd\"; allowed: an IANA time zone name, e.g. UTC or "
         "Europe/Berlin"},
        {HEAD META SPEC(", 'timeZone': 'Europe//Berlin'") "}", EGPU_ERANGE,
         "spec.timeZone is \"Europe//Berlin\"; allowed: an IANA time zone name, e.g. UTC or "
         "Europe/Berlin"},
        {HEAD META "'spec': {'gpuHours': 1}}", EGPU_ESYNTAX,
         "spec.overBudgetPriorityClassName is missing"},
        {HEAD META SPEC(", 'inBudgetPriorityClassName': 'High_Prio'") "}", EGPU_ERANGE,
         "spec.inBudgetPriorityClassName is \"High_Prio\"; allowed: the name of a PriorityClass, "
         "a DNS subdomain ([a-z0-9.-])"},
        {HEAD META SPEC("") ", 'status': {'periodStart': '2026-11-01T00:00:00Z'}}", EGPU_ERANGE,
         "status.periodStart and status.periodEnd: allowed: both or neither, the start before "
         "the end"},
        {HEAD META SPEC("") ", 'status': {'periodStart': 'soon', "
                            "'periodEnd': '2026-11-01T00:00:00Z'}}",
         EGPU_ESYNTAX,
         "status.periodStart is \"soon\"; allowed: RFC 3339, e.g. 2026-07-24T09:31:03Z"},
        {HEAD META SPEC("") ", 'status': {'periodStart': '2026-11-01T00:00:00Z', "
                            "'periodEnd': '2026-12-01T00:00:00Z', 'metering': {'until': "
                            "'2026-10-31T00:00:00Z'}}}",
         EGPU_ERANGE,
         "status.metering.until is outside the period; allowed: from status.periodStart to "
         "status.periodEnd"},
        {HEAD META SPEC("") ", 'status': {'metering': {'coreSeconds': 5}}}", EGPU_ESYNTAX,
         "status.metering.until is missing"},
        {HEAD META SPEC("") ", 'status': {'metering': {'until': '2026-10-31T00:00:00Z', "
                            "'coreSeconds': -5}}}",
         EGPU_ERANGE, NULL},
        {HEAD META SPEC("") ", 'status': {'state': 'Broke'}}", EGPU_ERANGE,
         "status.state is \"Broke\"; allowed: InBudget, OverBudget"},
        {"{'apiVersion': 'elasticgpu.io/v1alpha1', 'kind': 'GPUBudget', 'metadata': {'name': "
         "'b'}, " SPEC("") "}",
         EGPU_ESYNTAX, NULL},
    };
    (void)state;
    for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
        struct egpu_api_budget *b = calloc(1, sizeof(*b));
        struct egpu_error err = {0};
        json_t *o = tu_json(rows[r].obj);
        int rc = egpu_api_budget_decode(o, b, &err);

        if (rc != rows[r].code || (rows[r].msg != NULL && strcmp(err.msg, rows[r].msg) != 0))
            fail_msg("row %zu: got %d \"%s\", want %d \"%s\"", r, rc, err.msg, rows[r].code,
                     rows[r].msg ? rows[r].msg : "(any)");
        json_decref(o);
        free(b);
    }
}

/* Good budgets: the fields as read, and rendered back to the same struct. */
static void test_budget_fields(void **state)
{
    struct egpu_api_budget *b = calloc(1, sizeof(*b)), *again = calloc(1, sizeof(*again));
    struct egpu_error err = {0};
    json_t *o, *enc;

    (void)state;
    o = tu_json(HEAD META "'spec': {'gpuHours': 7.5, 'memoryWeight': 0.0125, 'period': '12h', "
                          "'timeZone': 'America/Argentina/Buenos_Aires', "
                          "'inBudgetPriorityClassName': 'gpu-in-budget', "
                          "'overBudgetPriorityClassName': 'gpu-over-budget'}, "
                          "'status': {'periodStart': '2026-11-24T12:00:00Z', "
                          "'periodEnd': '2026-11-25T00:00:00Z', 'metering': {'until': "
                          "'2026-11-24T15:00:00Z', 'coreSeconds': 2700000, 'memorySeconds': 0}, "
                          "'state': 'OverBudget', 'observedGeneration': 3}}");
    assert_int_equal(egpu_api_budget_decode(o, b, &err), 0);
    json_decref(o);
    assert_int_equal(b->gpu_hours_milli, 7500);
    assert_int_equal(b->memory_weight_micro, 12500);
    assert_int_equal(b->period, EGPU_API_PERIOD_DURATION);
    assert_int_equal(b->period_s, 12 * 3600);
    assert_string_equal(b->time_zone, "America/Argentina/Buenos_Aires");
    assert_string_equal(b->in_class, "gpu-in-budget");
    assert_string_equal(b->over_class, "gpu-over-budget");
    assert_true(b->has_period && b->has_metering && b->has_state);
    assert_int_equal(b->period_start_s, 1795521600); /* 2026-11-24T12:00:00Z */
    assert_int_equal(b->period_end_s, 1795521600 + 12 * 3600);
    assert_int_equal(b->metered_until_s, 1795521600 + 3 * 3600);
    /* 2,700,000 percent-seconds = 100% for 7.5 h = 7.5 GPU-hours: spent */
    assert_int_equal(egpu_api_budget_used_milli(b), 7500);
    assert_int_equal(egpu_api_budget_state_of(b), EGPU_API_BUDGET_OVER_BUDGET);
    enc = egpu_api_budget_encode(b);
    assert_non_null(enc);
    assert_true(json_number_value(json_object_get(json_object_get(enc, "status"), "used")) == 7.5);
    assert_true(json_integer_value(json_object_get(json_object_get(enc, "status"), "remaining")) ==
                0);
    assert_int_equal(egpu_api_budget_decode(enc, again, &err), 0);
    assert_memory_equal(b, again, sizeof(*b));
    json_decref(enc);

    /* The defaults: Monthly, UTC, no memory weight, no in-budget class. */
    o = tu_json(HEAD META SPEC("") "}");
    assert_int_equal(egpu_api_budget_decode(o, b, &err), 0);
    json_decref(o);
    assert_int_equal(b->period, EGPU_API_PERIOD_MONTHLY);
    assert_string_equal(b->period_text, "Monthly");
    assert_string_equal(b->time_zone, "UTC");
    assert_int_equal(b->memory_weight_micro, 0);
    assert_string_equal(b->in_class, "");
    assert_false(b->has_period || b->has_metering || b->has_state);
    assert_int_equal(egpu_api_budget_state_of(b), EGPU_API_BUDGET_IN_BUDGET);
    enc = egpu_api_budget_encode(b);
    assert_int_equal(egpu_api_budget_decode(enc, again, &err), 0);
    assert_memory_equal(b, again, sizeof(*b));
    json_decref(enc);
    free(b);
    free(again);
}

/* used: percent-seconds and weighted MiB-seconds, rounded down; the state
 * turns at exactly gpuHours. */
static void test_used_and_state(void **state)
{
    struct egpu_api_budget b;

    (void)state;
    memset(&b, 0, sizeof(b));
    b.gpu_hours_milli = 1000; /* 1 GPU-hour */
    b.core_pct_s = 30 * 3600; /* 30% for an hour: 0.3 */
    assert_int_equal(egpu_api_budget_used_milli(&b), 300);
    b.memory_weight_micro = 12500;    /* 0.0125 per GiB-hour */
    b.mem_mib_s = 40LL * 1024 * 3600; /* 40 GiB for an hour: 0.5 */
    assert_int_equal(egpu_api_budget_used_milli(&b), 800);
    assert_int_equal(egpu_api_budget_state_of(&b), EGPU_API_BUDGET_IN_BUDGET);
    b.core_pct_s += 179; /* 0.4997 h of 100%: 1 second short of 1.0 */
    assert_int_equal(egpu_api_budget_used_milli(&b), 800);
    b.core_pct_s = 50 * 3600 + 30 * 3600; /* 0.8 + 0.5 */
    assert_int_equal(egpu_api_budget_used_milli(&b), 1300);
    assert_int_equal(egpu_api_budget_state_of(&b), EGPU_API_BUDGET_OVER_BUDGET);
    b.core_pct_s = 50 * 3600; /* exactly 1.0 */
    assert_int_equal(egpu_api_budget_used_milli(&b), 1000);
    assert_int_equal(egpu_api_budget_state_of(&b), EGPU_API_BUDGET_OVER_BUDGET);
    memset(&b, 0, sizeof(b)); /* a budget of 0 is spent from the start */
    assert_int_equal(egpu_api_budget_state_of(&b), EGPU_API_BUDGET_OVER_BUDGET);
    assert_string_equal(egpu_api_budget_state_name(EGPU_API_BUDGET_IN_BUDGET), "InBudget");
}

static void test_meter_pod(void **state)
{
    static const struct {
        const char *pod;
        int code;
        int64_t core, mem, start, end;
    } rows[] = {
        /* running: bound at 12:00, shared 30% + 4096 MiB and a whole card */
        {"{'metadata': {}, 'spec': {'nodeName': 'n1', 'containers': ["
         "{'name': 'a', 'resources': {'requests': {'elasticgpu.io/gpu-core': '30', "
         "'elasticgpu.io/gpu-memory': '4096'}}}, "
         "{'name': 'b', 'resources': {'limits': {'elasticgpu.io/gpu-core': '100'}}}, "
         "{'name': 'c'}]}, "
         "'status': {'phase': 'Running', 'conditions': [{'type': 'Ready', 'status': 'True', "
         "'lastTransitionTime': '2026-11-24T13:00:00Z'}, {'type': 'PodScheduled', 'status': "
         "'True', 'lastTransitionTime': '2026-11-24T12:00:00Z'}]}}",
         0, 130, 4096, 1795521600, INT64_MAX},
        /* succeeded: the last container's finishedAt */
        {"{'metadata': {'deletionTimestamp': '2026-11-24T20:00:00Z'}, 'spec': {'nodeName': "
         "'n1', 'containers': [{'name': 'a', 'resources': {'requests': "
         "{'elasticgpu.io/gpu-core': '50'}}}]}, 'status': {'phase': 'Succeeded', "
         "'conditions': [{'type': 'PodScheduled', 'status': 'True', 'lastTransitionTime': "
         "'2026-11-24T12:00:00Z'}], 'containerStatuses': ["
         "{'state': {'terminated': {'finishedAt': '2026-11-24T13:00:00Z'}}}, "
         "{'state': {'terminated': {'finishedAt': '2026-11-24T14:00:00+01:00'}}}]}}",
         0, 50, 0, 1795521600, 1795521600 + 3600},
        /* deleted while running: until its deletionTimestamp */
        {"{'metadata': {'deletionTimestamp': '2026-11-24T12:30:00Z'}, 'spec': {'nodeName': "
         "'n1', 'containers': [{'name': 'a', 'resources': {'requests': "
         "{'elasticgpu.io/gpu-core': '50'}}}]}, 'status': {'phase': 'Running', "
         "'conditions': [{'type': 'PodScheduled', 'status': 'True', 'lastTransitionTime': "
         "'2026-11-24T12:00:00Z'}]}}",
         0, 50, 0, 1795521600, 1795521600 + 1800},
        /* not bound yet: no nodeName, or PodScheduled False */
        {"{'spec': {'containers': [{'name': 'a', 'resources': {'requests': "
         "{'elasticgpu.io/gpu-core': '50'}}}]}, 'status': {'conditions': [{'type': "
         "'PodScheduled', 'status': 'False', 'lastTransitionTime': '2026-11-24T12:00:00Z'}]}}",
         0, 50, 0, 0, INT64_MAX},
        /* no GPU */
        {"{'spec': {'nodeName': 'n1', 'containers': [{'name': 'a'}]}}", 0, 0, 0, 0, INT64_MAX},
        /* a bad time names the field */
        {"{'spec': {'nodeName': 'n1', 'containers': []}, 'status': {'conditions': [{'type': "
         "'PodScheduled', 'status': 'True', 'lastTransitionTime': 'noon'}]}}",
         EGPU_ESYNTAX, 0, 0, 0, 0},
        /* a bad quantity names the container */
        {"{'spec': {'nodeName': 'n1', 'containers': [{'name': 'a', 'resources': {'requests': "
         "{'elasticgpu.io/gpu-core': 'lots'}}}]}}",
         EGPU_ERANGE, 0, 0, 0, 0},
    };
    (void)state;
    for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
        struct egpu_api_meter_pod p = {-1, -1, -1, -1};
        struct egpu_error err = {0};
        json_t *o = tu_json(rows[r].pod);
        int rc = egpu_api_meter_pod_read(o, &p, &err);

        json_decref(o);
        if (rc != rows[r].code)
            fail_msg("row %zu: got %d (%s), want %d", r, rc, err.msg, rows[r].code);
        if (rc != 0) {
            assert_int_equal(p.core_pct, -1); /* untouched */
            continue;
        }
        if (p.core_pct != rows[r].core || p.mem_mib != rows[r].mem || p.start_s != rows[r].start ||
            p.end_s != rows[r].end)
            fail_msg("row %zu: got %lld %lld %lld %lld", r, (long long)p.core_pct,
                     (long long)p.mem_mib, (long long)p.start_s, (long long)p.end_s);
    }
}

/* The overlap of [start, end) with the window, times the ask; and the sum
 * over windows that tile a span is the span's, whatever the cuts. */
static void test_meter_add(void **state)
{
    struct egpu_api_meter_pod p = {.core_pct = 30, .mem_mib = 100, .start_s = 1000, .end_s = 2000};
    int64_t core = 0, mem = 0, c2 = 0, m2 = 0;

    (void)state;
    egpu_api_meter_add(&p, 0, 500, &core, &mem);     /* before */
    egpu_api_meter_add(&p, 2000, 3000, &core, &mem); /* after: end is exclusive */
    assert_int_equal(core, 0);
    egpu_api_meter_add(&p, 500, 1500, &core, &mem);
    assert_int_equal(core, 30 * 500);
    assert_int_equal(mem, 100 * 500);
    egpu_api_meter_add(&p, 1500, 5000, &core, &mem);
    assert_int_equal(core, 30 * 1000);
    p.end_s = INT64_MAX; /* running */
    egpu_api_meter_add(&p, 0, 10000, &c2, &m2);
    assert_int_equal(c2, 30 * 9000);
    p.start_s = 0; /* not bound */
    egpu_api_meter_add(&p, 0, 10000, &c2, &m2);
    assert_int_equal(c2, 30 * 9000);
    /* cuts */
    p.start_s = 1234;
    p.end_s = 98765;
    for (int64_t step = 1; step < 5000; step = step * 3 + 7) {
        int64_t c = 0, m = 0;

        for (int64_t t = 0; t < 100000; t += step)
            egpu_api_meter_add(&p, t, t + step, &c, &m);
        assert_int_equal(c, 30 * (98765 - 1234));
        assert_int_equal(m, 100 * (98765 - 1234));
    }
}

/* A claim is charged per second the larger of its ElasticGPU's reservation
 * and its pods: a bound claim with no pod its capacity; a pod inside it
 * nothing more; two pods of one claim both; a Released one until deleted;
 * additive over any cuts. */
static void test_meter_claim_holds(void **state)
{
    struct egpu_api_meter_hold h[4] = {
        {"a", true, {.core_pct = 99, .mem_mib = 0, .start_s = 1000, .end_s = 5000}},
        {"a", false, {.core_pct = 99, .mem_mib = 0, .start_s = 2000, .end_s = 3000}},
        {"a", false, {.core_pct = 99, .mem_mib = 0, .start_s = 2500, .end_s = INT64_MAX}},
        {"b", true, {.core_pct = 50, .mem_mib = 10, .start_s = 0, .end_s = INT64_MAX}},
    };
    /* a: 99 over [1000, 2500), 198 over [2500, 3000), 99 over [3000, 5000) and
     * 99 after (the second pod alone, its claim's ElasticGPU gone); b: Failed */
    int64_t want = 99 * 1500 + 198 * 500 + 99 * 2000 + 99 * 5000, core = 0, mem = 0;

    (void)state;
    assert_int_equal(egpu_api_meter_holds_add(h, 4, 0, 10000, &core, &mem), 0);
    assert_int_equal(core, want);
    assert_int_equal(mem, 0);
    for (int64_t step = 1; step < 3000; step = step * 3 + 7) {
        int64_t c = 0, m = 0;

        for (int64_t t = 0; t < 10000; t += step)
            assert_int_equal(
                egpu_api_meter_holds_add(h, 4, t, t + step < 10000 ? t + step : 10000, &c, &m), 0);
        assert_int_equal(c, want);
    }
    h[3].m.start_s = 100; /* b held: 50 and 10 MiB */
    core = mem = 0;
    assert_int_equal(egpu_api_meter_holds_add(h + 3, 1, 0, 1100, &core, &mem), 0);
    assert_int_equal(core, 50 * 1000);
    assert_int_equal(mem, 10 * 1000);
}

/* An ElasticGPU as a hold: capacity, from the later creation, to its
 * deletion; Failed holds nothing; a pod's claim containers are holds and
 * not the pod's own. */
static void test_meter_egpu_and_pod_holds(void **state)
{
    struct egpu_api_meter_hold h[4];
    struct egpu_api_meter_pod p;
    struct egpu_error err = {0};
    size_t n = 0;
    json_t *o = tu_json(
        "{'apiVersion': 'elasticgpu.io/v1alpha1', 'kind': 'ElasticGPU', 'metadata': {'name': "
        "'e1', 'creationTimestamp': '1970-01-01T00:16:40Z', 'deletionTimestamp': "
        "'1970-01-01T00:33:20Z'}, 'spec': {'capacity': {'elasticgpu.io/gpu-core': 99, "
        "'elasticgpu.io/gpu-memory': 4096}, 'nodeName': 'n1', 'gpuShare': {'gpuName': 'g'}, "
        "'claimRef': {'namespace': 'ml', 'name': 'a', 'uid': 'u'}}, 'status': {'phase': "
        "'Released'}}");

    (void)state;
    assert_int_equal(egpu_api_meter_egpu_read(o, 0, &h[0], &err), 0);
    assert_string_equal(h[0].claim, "a");
    assert_true(h[0].reserved);
    assert_int_equal(h[0].m.core_pct, 99);
    assert_int_equal(h[0].m.mem_mib, 4096);
    assert_int_equal(h[0].m.start_s, 1000);
    assert_int_equal(h[0].m.end_s, 2000);
    assert_int_equal(egpu_api_meter_egpu_read(o, 1500, &h[0], &err), 0);
    assert_int_equal(h[0].m.start_s, 1500);
    json_object_set_new(json_object_get(o, "status"), "phase", json_string("Failed"));
    assert_int_equal(egpu_api_meter_egpu_read(o, 0, &h[0], &err), 0);
    assert_int_equal(h[0].m.start_s, 0);
    json_object_del(json_object_get(o, "spec"), "claimRef");
    assert_int_equal(egpu_api_meter_egpu_read(o, 0, &h[0], &err), EGPU_ERANGE);
    json_decref(o);

    o = tu_json("{'metadata': {'namespace': 'ml', 'annotations': {'egpuc.elasticgpu.io/a': "
                "'c1'}}, 'spec': {'nodeName': 'n1', 'containers': [{'name': 'a', 'resources': "
                "{'requests': {'elasticgpu.io/gpu-core': '99'}}}, {'name': 'b', 'resources': "
                "{'requests': {'elasticgpu.io/gpu-core': '20'}}}]}, 'status': {'conditions': "
                "[{'type': 'PodScheduled', 'status': 'True', 'lastTransitionTime': "
                "'1970-01-01T00:16:40Z'}]}}");
    assert_int_equal(egpu_api_meter_pod_read(o, &p, &err), 0);
    assert_int_equal(p.core_pct, 20); /* b alone: a is charged with its claim */
    assert_int_equal(egpu_api_meter_pod_holds(o, h, 4, &n, &err), 0);
    assert_int_equal(n, 1);
    assert_string_equal(h[0].claim, "c1");
    assert_false(h[0].reserved);
    assert_int_equal(h[0].m.core_pct, 99);
    assert_int_equal(h[0].m.start_s, 1000);
    assert_int_equal(h[0].m.end_s, INT64_MAX);
    json_decref(o);
}

static void test_time_and_duration(void **state)
{
    static const struct {
        const char *text;
        int code;
        int64_t s;
    } times[] = {
        {"1970-01-01T00:00:00Z", 0, 0},
        {"2026-11-24T12:00:00Z", 0, 1795521600},
        {"2026-11-24T12:00:00.999999Z", 0, 1795521600},
        {"2026-11-24T13:30:00+01:30", 0, 1795521600},
        {"2026-11-24T10:00:00-02:00", 0, 1795521600},
        {"2024-02-29T00:00:00Z", 0, 1709164800},
        {"2026-02-29T00:00:00Z", EGPU_ESYNTAX, 0},
        {"2026-04-31T00:00:00Z", EGPU_ESYNTAX, 0},
        {"2026-11-24 12:00:00Z", EGPU_ESYNTAX, 0},
        {"2026-11-24T12:00:00", EGPU_ESYNTAX, 0},
        {"2026-11-24T12:00:00.Z", EGPU_ESYNTAX, 0},
        {"2026-11-24T12:00:00Zjunk", EGPU_ESYNTAX, 0},
        {"2026-13-01T00:00:00Z", EGPU_ESYNTAX, 0},
        {"", EGPU_ESYNTAX, 0},
    };
    static const struct {
        const char *text;
        int code;
        int64_t s;
    } durs[] = {
        {"24h", 0, 86400},
        {"1h30m", 0, 5400},
        {"90m", 0, 5400},
        {"45s", 0, 45},
        {"1h1m1s", 0, 3661},
        {"m", EGPU_ESYNTAX, 0},
        {"1d", EGPU_ESYNTAX, 0},
        {"30m1h", EGPU_ESYNTAX, 0},
        {"1h1h", EGPU_ESYNTAX, 0},
        {"", EGPU_ESYNTAX, 0},
        {"-1h", EGPU_ESYNTAX, 0},
        {"1.5h", EGPU_ESYNTAX, 0},
        {"99999999999h", EGPU_ESYNTAX, 0},
    };
    char buf[EGPU_API_TIME_MAX];
    struct egpu_error err = {0};

    (void)state;
    for (size_t i = 0; i < sizeof(times) / sizeof(times[0]); i++) {
        int64_t s = -1;
        int rc = egpu_api_time_parse(times[i].text, "t", &s, &err);

        if (rc != times[i].code || (rc == 0 && s != times[i].s))
            fail_msg("%s: got %d %lld", times[i].text, rc, (long long)s);
    }
    assert_int_equal(egpu_api_time_parse("noon", "status.startTime", &(int64_t){0}, &err),
                     EGPU_ESYNTAX);
    assert_string_equal(err.msg, "status.startTime is \"noon\"; allowed: RFC 3339, e.g. "
                                 "2026-07-24T09:31:03Z");
    assert_string_equal(egpu_api_time_format(1795521600, buf), "2026-11-24T12:00:00Z");
    for (size_t i = 0; i < sizeof(durs) / sizeof(durs[0]); i++) {
        int64_t s = -1;
        int rc = egpu_api_duration_parse(durs[i].text, "spec.period", &s, &err);

        if (rc != durs[i].code || (rc == 0 && s != durs[i].s))
            fail_msg("%s: got %d %lld", durs[i].text, rc, (long long)s);
    }
    assert_int_equal(egpu_api_duration_parse("1d", "spec.period", &(int64_t){0}, &err),
                     EGPU_ESYNTAX);
    assert_string_equal(err.msg, "spec.period is \"1d\"; allowed: a duration in hours, minutes "
                                 "and seconds, e.g. 24h, 1h30m, 90m");
}

/* Conditions as the API conventions keep them: lastTransitionTime moves
 * only with the status; an unchanged condition is no write; a new type
 * pushes out the last when the list is full. */
static void test_condition_set(void **state)
{
    struct egpu_api_condition c[EGPU_API_CONDITIONS_MAX];
    uint32_t n = 0;

    (void)state;
    assert_true(egpu_api_condition_set(c, &n, "Ready", EGPU_API_COND_TRUE, "Metered", "ok", 1,
                                       "2026-11-24T00:00:00Z"));
    assert_int_equal(n, 1);
    assert_string_equal(c[0].last_transition_time, "2026-11-24T00:00:00Z");
    assert_false(egpu_api_condition_set(c, &n, "Ready", EGPU_API_COND_TRUE, "Metered", "ok", 1,
                                        "2026-11-24T01:00:00Z"));
    assert_true(egpu_api_condition_set(c, &n, "Ready", EGPU_API_COND_TRUE, "Metered", "ok 2", 2,
                                       "2026-11-24T02:00:00Z"));
    assert_string_equal(c[0].last_transition_time, "2026-11-24T00:00:00Z"); /* same status */
    assert_int_equal(c[0].observed_generation, 2);
    assert_true(egpu_api_condition_set(c, &n, "Ready", EGPU_API_COND_FALSE, "InvalidTimeZone",
                                       "no such zone", 2, "2026-11-24T03:00:00Z"));
    assert_string_equal(c[0].last_transition_time, "2026-11-24T03:00:00Z");
    assert_string_equal(c[0].reason, "InvalidTimeZone");
    for (int i = 0; i < EGPU_API_CONDITIONS_MAX + 2; i++) {
        char type[16];

        snprintf(type, sizeof(type), "T%d", i);
        assert_true(egpu_api_condition_set(c, &n, type, EGPU_API_COND_UNKNOWN, "R", "", 0,
                                           "2026-11-24T04:00:00Z"));
    }
    assert_int_equal(n, EGPU_API_CONDITIONS_MAX);
    assert_string_equal(c[0].type, "Ready"); /* the first ones stay */
    assert_string_equal(c[n - 1].type, "T9");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_budget_rules),
        cmocka_unit_test(test_budget_fields),
        cmocka_unit_test(test_used_and_state),
        cmocka_unit_test(test_meter_pod),
        cmocka_unit_test(test_meter_add),
        cmocka_unit_test(test_meter_claim_holds),
        cmocka_unit_test(test_meter_egpu_and_pod_holds),
        cmocka_unit_test(test_time_and_duration),
        cmocka_unit_test(test_condition_set),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
