/* tests/unit/test_controller_metering.c - a GPUBudget's metering step
 * (src/controller/metering.c) with a clock of the test's own:
 *
 * - a synthetic day of 1,000 pods with staggered starts and ends, metered in
 *   steps at random instants, the budget written out and read back between
 *   steps (what a restarted or new leader sees), comes to exactly the
 *   percent-seconds and MiB-seconds worked out pod by pod;
 * - a period rollover while pods run charges each period its part, and a
 *   controller down for days rolls over once per period;
 * - a budget starts at 0 when first seen, a clock going back counts
 *   nothing, a changed period keeps what was counted, and the state turns at
 *   gpuHours. */
#include "testutil.h"

#include <jansson.h>
#include <stdint.h>

#include "budget_int.h"

#define DAY   86400
#define T0    1795478400 /* 2026-11-24T00:00:00Z */
#define NPODS 1000

static uint64_t rng = 88172645463325252ULL;

static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void daily(struct egpu_api_budget *b, int64_t gpu_hours)
{
    memset(b, 0, sizeof(*b));
    snprintf(b->meta.ns, sizeof(b->meta.ns), "ml");
    snprintf(b->meta.name, sizeof(b->meta.name), "team");
    b->gpu_hours_milli = gpu_hours * 1000;
    b->period = EGPU_API_PERIOD_DAILY;
    snprintf(b->period_text, sizeof(b->period_text), "Daily");
    snprintf(b->time_zone, sizeof(b->time_zone), "UTC");
    snprintf(b->over_class, sizeof(b->over_class), "gpu-over-budget");
}

/* b written out and read back, as the API server hands it to the next
 * leader. */
static void round_trip(struct egpu_api_budget *b)
{
    struct egpu_error err = {0};
    json_t *o = egpu_api_budget_encode(b);
    char *text = json_dumps(o, JSON_COMPACT);
    json_t *back = json_loads(text, 0, NULL);

    assert_non_null(back);
    assert_int_equal(egpu_api_budget_decode(back, b, &err), 0);
    json_decref(back);
    free(text);
    json_decref(o);
}

static void step(struct egpu_api_budget *b, const struct egpu_api_meter_pod *p, size_t n,
                 int64_t now, struct egpu__controller_meter_step *st)
{
    struct egpu_error err = {0};

    if (egpu__controller_meter_step(b, p, n, NULL, 0, now, st, &err) != 0)
        fail_msg("step at %lld: %s", (long long)now, err.msg);
}

static void test_synthetic_day(void **state)
{
    static struct egpu_api_meter_pod pods[NPODS];
    struct egpu_api_budget b;
    struct egpu__controller_meter_step st;
    int64_t want_core = 0, want_mem = 0, next_core = 0, now;
    const int64_t start = T0 + 3600; /* the budget is first seen at 01:00 */

    (void)state;
    for (int i = 0; i < NPODS; i++) {
        struct egpu_api_meter_pod *p = &pods[i];
        int64_t a, e;

        p->core_pct =
            (int64_t)(next_rand() % 4 == 0 ? 100 * (1 + next_rand() % 2) : 5 + next_rand() % 95);
        p->mem_mib = p->core_pct < 100 ? (int64_t)(1024 * (1 + next_rand() % 16)) : 0;
        /* starts from 2 h before the day to its end; runs 1 min to 6 h, some still running */
        p->start_s = T0 - 7200 + (int64_t)(next_rand() % (DAY + 7200));
        p->end_s =
            next_rand() % 10 == 0 ? INT64_MAX : p->start_s + 60 + (int64_t)(next_rand() % 21600);
        /* by hand: the part of [start, end) within [01:00, 24:00), and after midnight */
        a = p->start_s > start ? p->start_s : start;
        e = p->end_s < T0 + DAY ? p->end_s : T0 + DAY;
        if (e > a) {
            want_core += p->core_pct * (e - a);
            want_mem += p->mem_mib * (e - a);
        }
        a = p->start_s > T0 + DAY ? p->start_s : T0 + DAY;
        e = p->end_s < T0 + DAY + 1800 ? p->end_s : T0 + DAY + 1800;
        if (e > a)
            next_core += p->core_pct * (e - a);
    }
    daily(&b, 1000000);
    step(&b, pods, NPODS, start, &st);
    assert_true(st.started);
    assert_int_equal(b.core_pct_s, 0);
    assert_int_equal(b.period_start_s, T0);
    assert_int_equal(b.period_end_s, T0 + DAY);
    /* Steps at random instants (restarts, failovers, resyncs), each from
     * what the last one wrote. */
    for (now = start; now < T0 + DAY - 1;) {
        now += 1 + (int64_t)(next_rand() % 3000);
        if (now > T0 + DAY - 1)
            now = T0 + DAY - 1;
        step(&b, pods, NPODS, now, &st);
        assert_int_equal(st.rollovers, 0);
        round_trip(&b);
    }
    step(&b, pods, NPODS, T0 + DAY - 1, &st); /* the same instant again: nothing */
    /* The last second of the day is counted when the day ends. */
    {
        int64_t c = b.core_pct_s, m = b.mem_mib_s;

        for (int i = 0; i < NPODS; i++)
            egpu_api_meter_add(&pods[i], T0 + DAY - 1, T0 + DAY, &c, &m);
        assert_int_equal(c, want_core);
        assert_int_equal(m, want_mem);
        print_message("synthetic day: %d pods, %.3f GPU-hours metered exactly as by hand\n", NPODS,
                      (double)c / 360000.0);
    }
    /* Half an hour into the next day: one rollover, and only the new day's part. */
    step(&b, pods, NPODS, T0 + DAY + 1800, &st);
    assert_int_equal(st.rollovers, 1);
    assert_int_equal(b.period_start_s, T0 + DAY);
    assert_int_equal(b.core_pct_s, next_core);
}

static void test_rollover_while_running(void **state)
{
    struct egpu_api_meter_pod pods[2] = {
        {.core_pct = 50, .mem_mib = 1024, .start_s = T0 + DAY - 600, .end_s = INT64_MAX},
        {.core_pct = 200, .start_s = T0 + DAY - 60, .end_s = T0 + DAY + 120},
    };
    struct egpu_api_budget b;
    struct egpu__controller_meter_step st;

    (void)state;
    daily(&b, 1);
    step(&b, pods, 2, T0 + DAY - 300, &st); /* first seen at 23:55 */
    step(&b, pods, 2, T0 + DAY - 60, &st);  /* 23:59 */
    assert_int_equal(b.core_pct_s, 50 * 240);
    step(&b, pods, 2, T0 + DAY + 60, &st); /* 00:01: the day ended a minute ago */
    assert_int_equal(st.rollovers, 1);
    assert_int_equal(st.ended_start_s, T0);
    assert_int_equal(st.ended_used_milli, (50 * 300 + 200 * 60) / 360); /* 0.075 GPU-hours */
    assert_int_equal(b.period_start_s, T0 + DAY);
    assert_int_equal(b.period_end_s, T0 + 2 * DAY);
    assert_int_equal(b.core_pct_s, (50 + 200) * 60);
    assert_int_equal(b.mem_mib_s, 1024 * 60);
    assert_int_equal(b.metered_until_s, T0 + DAY + 60);
    /* Down for three days: a rollover per day, and only the last day counts. */
    step(&b, pods, 2, T0 + 4 * DAY + 100, &st);
    assert_int_equal(st.rollovers, 3);
    assert_int_equal(b.period_start_s, T0 + 4 * DAY);
    assert_int_equal(b.core_pct_s, 50 * 100);
}

static void test_state_start_and_clock(void **state)
{
    struct egpu_api_meter_pod pod = {.core_pct = 100, .start_s = T0, .end_s = INT64_MAX};
    struct egpu_api_budget b;
    struct egpu__controller_meter_step st;

    (void)state;
    daily(&b, 1); /* 1 GPU-hour a day */
    step(&b, &pod, 1, T0 + 7200, &st);
    assert_true(st.started && st.state_changed);
    assert_int_equal(b.core_pct_s, 0); /* nothing before the budget was seen */
    assert_int_equal(b.state, EGPU_API_BUDGET_IN_BUDGET);
    step(&b, &pod, 1, T0 + 7200 + 3599, &st);
    assert_false(st.state_changed);
    assert_int_equal(b.state, EGPU_API_BUDGET_IN_BUDGET);
    step(&b, &pod, 1, T0 + 7200 + 3600, &st); /* exactly 1 GPU-hour */
    assert_true(st.state_changed);
    assert_int_equal(b.state, EGPU_API_BUDGET_OVER_BUDGET);
    /* The clock goes back: nothing counted, nothing moves back. */
    step(&b, &pod, 1, T0 + 3600, &st);
    assert_int_equal(b.core_pct_s, 360000);
    assert_int_equal(b.metered_until_s, T0 + 7200 + 3600);
    /* The period changes to weekly: recomputed around until, usage kept. */
    b.period = EGPU_API_PERIOD_WEEKLY;
    step(&b, &pod, 1, T0 + 7200 + 3700, &st);
    assert_true(st.period_replaced);
    assert_int_equal(b.period_start_s, T0 - DAY); /* Monday 2026-11-23 */
    assert_int_equal(b.core_pct_s, 360000 + 100 * 100);
    /* An unknown zone changes nothing. */
    {
        struct egpu_api_budget before = b;
        struct egpu_error err = {0};

        snprintf(b.time_zone, sizeof(b.time_zone), "Nowhere/Land");
        snprintf(before.time_zone, sizeof(before.time_zone), "Nowhere/Land");
        assert_int_equal(
            egpu__controller_meter_step(&b, &pod, 1, NULL, 0, T0 + 9 * 3600, &st, &err),
            EGPU_ERANGE);
        assert_memory_equal(&b, &before, sizeof(b));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_synthetic_day),
        cmocka_unit_test(test_rollover_while_running),
        cmocka_unit_test(test_state_start_and_clock),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
