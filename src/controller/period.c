/* controller/period.c - the period of a GPUBudget an instant falls in:
 * calendar periods (Daily, Weekly from Monday, Monthly from the 1st) start
 * at 00:00 in the budget's IANA time zone, read from the system's tz
 * database (tzdata) by GLib's GTimeZone, so a day across a daylight-saving
 * change is 23 or 25 hours long; duration periods follow one another from
 * the Unix epoch. Where 00:00 does not exist in a zone (a change at
 * midnight), the period starts at the first local time that does. */
#include <glib.h>
#include <stdio.h>

#include "budget_int.h"

/* 00:00 of date in tz (the first local time after it when 00:00 does not
 * exist there), as a new GDateTime, or NULL. */
static GDateTime *midnight(GTimeZone *tz, const GDate *date)
{
    return g_date_time_new(tz, g_date_get_year(date), g_date_get_month(date), g_date_get_day(date),
                           0, 0, 0);
}

int egpu__controller_budget_period(const struct egpu_api_budget *b, int64_t now_s, int64_t *start,
                                   int64_t *end, struct egpu_error *err)
{
    GDateTime *utc, *local = NULL, *first = NULL, *next = NULL;
    GTimeZone *tz;
    GDate from, to;
    int rc = 0;

    if (b->period == EGPU_API_PERIOD_DURATION) {
        if (b->period_s <= 0 || now_s < 0)
            return egpu_error_set(err, EGPU_ERANGE, "spec.period: not a duration");
        *start = now_s - now_s % b->period_s;
        *end = *start + b->period_s;
        return 0;
    }
    tz = g_time_zone_new_identifier(b->time_zone);
    if (tz == NULL)
        return egpu_error_set(err, EGPU_ERANGE,
                              "spec.timeZone is \"%s\"; allowed: a zone of the tz database, e.g. "
                              "UTC, Europe/Berlin or America/New_York",
                              b->time_zone);
    utc = g_date_time_new_from_unix_utc(now_s);
    if (utc != NULL)
        local = g_date_time_to_timezone(utc, tz);
    if (local != NULL) {
        /* Calendar dates first (GDate: no time zone), then their midnights. */
        g_date_clear(&from, 1);
        g_date_set_dmy(&from, (GDateDay)g_date_time_get_day_of_month(local),
                       (GDateMonth)g_date_time_get_month(local),
                       (GDateYear)g_date_time_get_year(local));
        switch (b->period) {
        case EGPU_API_PERIOD_DAILY:
            break;
        case EGPU_API_PERIOD_WEEKLY: /* ISO 8601: day 1 is Monday */
            g_date_subtract_days(&from, (guint)g_date_time_get_day_of_week(local) - 1);
            break;
        default:
            g_date_set_day(&from, 1);
            break;
        }
        to = from;
        if (b->period == EGPU_API_PERIOD_MONTHLY)
            g_date_add_months(&to, 1);
        else
            g_date_add_days(&to, b->period == EGPU_API_PERIOD_WEEKLY ? 7 : 1);
        first = midnight(tz, &from);
        next = midnight(tz, &to);
    }
    if (first == NULL || next == NULL) {
        rc = egpu_error_set(err, EGPU_ERANGE, "the period of %lld in %s is out of range",
                            (long long)now_s, b->time_zone);
    } else {
        *start = g_date_time_to_unix(first);
        *end = g_date_time_to_unix(next);
    }
    if (next != NULL)
        g_date_time_unref(next);
    if (first != NULL)
        g_date_time_unref(first);
    if (local != NULL)
        g_date_time_unref(local);
    if (utc != NULL)
        g_date_time_unref(utc);
    g_time_zone_unref(tz);
    return rc;
}
