/* tests/unit/test_controller_period.c - a GPUBudget's periods
 * (src/controller/period.c). The expected bounds come from Python's
 * zoneinfo over the same tz database, an implementation independent of
 * GLib's: days of 23 and 25 hours across Berlin's daylight-saving changes,
 * a week from Monday in a zone half an hour off the hour, months of 28 and
 * 31 days across a year's end, and Santiago's change at midnight, where the
 * day starts at 01:00. */
#include "testutil.h"

#include "budget_int.h"

static void test_calendar_periods(void **state)
{
    static const struct {
        enum egpu_api_period period;
        const char *zone;
        int64_t now, start, end;
    } rows[] = {
        {EGPU_API_PERIOD_DAILY, "UTC", 1795523696, 1795478400, 1795564800},
        {EGPU_API_PERIOD_DAILY, "Europe/Berlin", 1795563000, 1795561200, 1795647600},
        {EGPU_API_PERIOD_DAILY, "Europe/Berlin", 1774785600, 1774738800, 1774821600}, /* 23 h */
        {EGPU_API_PERIOD_DAILY, "Europe/Berlin", 1792929600, 1792879200, 1792969200}, /* 25 h */
        {EGPU_API_PERIOD_WEEKLY, "UTC", 1795600800, 1795392000, 1795996800},
        {EGPU_API_PERIOD_WEEKLY, "Asia/Kolkata", 1795982400, 1795977000, 1796581800},
        {EGPU_API_PERIOD_WEEKLY, "Europe/Berlin", 1795996800, 1795993200, 1796598000},
        {EGPU_API_PERIOD_MONTHLY, "UTC", 1771113600, 1769904000, 1772323200},
        {EGPU_API_PERIOD_MONTHLY, "America/New_York", 1798759800, 1796101200, 1798779600},
        {EGPU_API_PERIOD_MONTHLY, "America/New_York", 1798779599, 1796101200, 1798779600},
        {EGPU_API_PERIOD_DAILY, "America/Santiago", 1788696000, 1788667200, 1788750000},
    };
    (void)state;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        struct egpu_api_budget b;
        struct egpu_error err = {0};
        int64_t s = -1, e = -1;

        memset(&b, 0, sizeof(b));
        b.period = rows[i].period;
        snprintf(b.time_zone, sizeof(b.time_zone), "%s", rows[i].zone);
        assert_int_equal(egpu__controller_budget_period(&b, rows[i].now, &s, &e, &err), 0);
        if (s != rows[i].start || e != rows[i].end)
            fail_msg("row %zu (%s): got [%lld, %lld), want [%lld, %lld)", i, rows[i].zone,
                     (long long)s, (long long)e, (long long)rows[i].start, (long long)rows[i].end);
        /* The instant that ends a period starts the next one. */
        assert_int_equal(egpu__controller_budget_period(&b, e, &s, &e, &err), 0);
        assert_int_equal(s, rows[i].end);
    }
}

static void test_duration_periods(void **state)
{
    struct egpu_api_budget b;
    struct egpu_error err = {0};
    int64_t s, e;

    (void)state;
    memset(&b, 0, sizeof(b));
    b.period = EGPU_API_PERIOD_DURATION;
    b.period_s = 12 * 3600;
    snprintf(b.time_zone, sizeof(b.time_zone), "Europe/Berlin"); /* not used */
    assert_int_equal(egpu__controller_budget_period(&b, 1795523696, &s, &e, &err), 0);
    assert_int_equal(s, 1795521600); /* 2026-11-24T12:00:00Z */
    assert_int_equal(e, 1795521600 + 12 * 3600);
    assert_int_equal(egpu__controller_budget_period(&b, 1795521600, &s, &e, &err), 0);
    assert_int_equal(s, 1795521600);
    assert_int_equal(egpu__controller_budget_period(&b, 1795521599, &s, &e, &err), 0);
    assert_int_equal(e, 1795521600);
}

static void test_unknown_zone(void **state)
{
    struct egpu_api_budget b;
    struct egpu_error err = {0};
    int64_t s = 7, e = 7;

    (void)state;
    memset(&b, 0, sizeof(b));
    b.period = EGPU_API_PERIOD_DAILY;
    snprintf(b.time_zone, sizeof(b.time_zone), "Mars/Olympus_Mons");
    assert_int_equal(egpu__controller_budget_period(&b, 1795523696, &s, &e, &err), EGPU_ERANGE);
    assert_string_equal(err.msg, "spec.timeZone is \"Mars/Olympus_Mons\"; allowed: a zone of the "
                                 "tz database, e.g. UTC, Europe/Berlin or America/New_York");
    assert_int_equal(s, 7);
    assert_int_equal(e, 7);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_calendar_periods),
        cmocka_unit_test(test_duration_periods),
        cmocka_unit_test(test_unknown_zone),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
