/* api/time.c - RFC 3339 times and Go durations, as the API server writes
 * metav1.Time / MicroTime and as users write periods. Times before 1970
 * (UTC) are refused: no object of a cluster carries one. No I/O; no time zone
 * but UTC and numeric offsets (IANA zones are the controller's, see
 * src/controller/period.c). */
#define _DEFAULT_SOURCE /* timegm */
#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "egpu/api.h"

#define TIME_ALLOWED "allowed: RFC 3339, e.g. 2026-07-24T09:31:03Z"

/* n digits at *p into *out; false unless all n are digits. */
static bool digits(const char **p, int n, int *out)
{
    int v = 0;

    for (int i = 0; i < n; i++) {
        if (!isdigit((unsigned char)(*p)[i]))
            return false;
        v = v * 10 + ((*p)[i] - '0');
    }
    *p += n;
    *out = v;
    return true;
}

static bool lit(const char **p, char ch)
{
    if (**p != ch)
        return false;
    (*p)++;
    return true;
}

int egpu_api_time_parse(const char *text, const char *field, int64_t *unix_s,
                        struct egpu_error *err)
{
    const char *p = text;
    int y, mo, d, h, mi, s, oh = 0, om = 0, sign = 0;
    struct tm tm;
    time_t t;

    if (p == NULL)
        return egpu_error_set(err, EGPU_ESYNTAX, "%s is missing; " TIME_ALLOWED, field);
    if (!digits(&p, 4, &y) || !lit(&p, '-') || !digits(&p, 2, &mo) || !lit(&p, '-') ||
        !digits(&p, 2, &d) || !(lit(&p, 'T') || lit(&p, 't')) || !digits(&p, 2, &h) ||
        !lit(&p, ':') || !digits(&p, 2, &mi) || !lit(&p, ':') || !digits(&p, 2, &s))
        goto bad;
    if (lit(&p, '.')) {
        if (!isdigit((unsigned char)*p))
            goto bad;
        while (isdigit((unsigned char)*p))
            p++;
    }
    if (lit(&p, 'Z') || lit(&p, 'z')) {
        sign = 0;
    } else if (*p == '+' || *p == '-') {
        sign = *p++ == '+' ? 1 : -1;
        if (!digits(&p, 2, &oh) || !lit(&p, ':') || !digits(&p, 2, &om) || oh > 23 || om > 59)
            goto bad;
    } else {
        goto bad;
    }
    if (*p != '\0' || y < 1970 || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 ||
        s > 60)
        goto bad;
    memset(&tm, 0, sizeof(tm));
    tm.tm_year = y - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = d;
    tm.tm_hour = h;
    tm.tm_min = mi;
    tm.tm_sec = s == 60 ? 59 : s; /* a leap second is the second before it */
    t = timegm(&tm);
    if (tm.tm_mday != d) /* 31 April rolled into May */
        goto bad;
    t -= (time_t)sign * ((time_t)oh * 3600 + om * 60);
    if (t < 0) /* before 1970 in UTC */
        goto bad;
    *unix_s = (int64_t)t;
    return 0;
bad:
    return egpu_error_set(err, EGPU_ESYNTAX, "%s is \"%.64s\"; " TIME_ALLOWED, field, text);
}

const char *egpu_api_time_format(int64_t unix_s, char buf[EGPU_API_TIME_MAX])
{
    time_t t = (time_t)unix_s;
    struct tm tm;

    if (gmtime_r(&t, &tm) == NULL ||
        strftime(buf, EGPU_API_TIME_MAX, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        snprintf(buf, EGPU_API_TIME_MAX, "1970-01-01T00:00:00Z");
    return buf;
}

int egpu_api_duration_parse(const char *text, const char *field, int64_t *seconds,
                            struct egpu_error *err)
{
    static const struct {
        char unit;
        int64_t s;
    } units[] = {{'h', 3600}, {'m', 60}, {'s', 1}};
    const char *p = text;
    int64_t total = 0;
    size_t next = 0;

    if (p == NULL || *p == '\0')
        goto bad;
    while (*p != '\0') {
        int64_t v = 0;
        size_t u;

        if (!isdigit((unsigned char)*p))
            goto bad;
        while (isdigit((unsigned char)*p)) {
            if (v > 100000000)
                goto bad;
            v = v * 10 + (*p++ - '0');
        }
        for (u = next; u < sizeof(units) / sizeof(units[0]) && units[u].unit != *p; u++)
            ;
        if (u == sizeof(units) / sizeof(units[0]))
            goto bad;
        total += v * units[u].s;
        next = u + 1;
        p++;
    }
    *seconds = total;
    return 0;
bad:
    return egpu_error_set(err, EGPU_ESYNTAX,
                          "%s is \"%.64s\"; allowed: a duration in hours, minutes and seconds, "
                          "e.g. 24h, 1h30m, 90m",
                          field, text != NULL ? text : "");
}
