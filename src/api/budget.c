/* api/budget.c - GPUBudget: decoded, validated, rendered back, and what its
 * metering comes to (see "GPUBudget" in egpu/api.h).
 *
 * gpuHours and memoryWeight are JSON numbers kept in thousandths and
 * millionths, rounded down, except that a value within 10^-6 of a whole unit
 * is that unit (so what the encoder writes decodes to the same value). The
 * metering itself is integers (percent-seconds, MiB-seconds): exact, and
 * the same on every controller.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "objects_int.h"

static const char *const state_names[2] = {"InBudget", "OverBudget"};
static const char *const period_names[3] = {"Daily", "Weekly", "Monthly"};

const char *egpu_api_budget_state_name(enum egpu_api_budget_state s)
{
    return (unsigned)s < 2 ? state_names[s] : "unknown";
}

/* o[key], a number in 0..max, times scale into *out (rounded down). */
static int scaled(const json_t *o, const char *key, const char *path, double max, double scale,
                  const char *allowed, bool required, int64_t *out, struct egpu_error *err)
{
    const json_t *v = json_object_get(o, key);
    double d, m, r;
    char t[64];

    *out = 0;
    if (v == NULL || json_is_null(v))
        return required ? egpu_error_set(err, EGPU_ESYNTAX, "%s is missing; %s", path, allowed) : 0;
    if (!json_is_number(v))
        return egpu_error_set(err, EGPU_ESYNTAX, "%s is %s; %s", path,
                              egpu__api_json_text(v, t, sizeof(t)), allowed);
    d = json_number_value(v);
    if (!(d >= 0) || d > max)
        return egpu_error_set(err, EGPU_ERANGE, "%s is %s; %s", path,
                              egpu__api_json_text(v, t, sizeof(t)), allowed);
    m = d * scale;
    r = nearbyint(m);
    *out = (int64_t)(fabs(m - r) < 1e-6 ? r : floor(m));
    return 0;
}

/* An IANA zone name: words of [A-Za-z0-9_+-] joined by single '/'. */
static bool zone_name(const char *s)
{
    size_t word = 0;

    if (*s == '\0')
        return false;
    for (; *s != '\0'; s++) {
        unsigned char ch = (unsigned char)*s;

        if (ch == '/') {
            if (word == 0)
                return false;
            word = 0;
            continue;
        }
        if (!((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '+' || ch == '-'))
            return false;
        word++;
    }
    return word > 0;
}

static int period_decode(const json_t *spec, struct egpu_api_budget *b, struct egpu_error *err)
{
    int rc = egpu__api_text(spec, "period", "spec.period", false, true, b->period_text,
                            sizeof(b->period_text), err);

    if (rc)
        return rc;
    if (b->period_text[0] == '\0')
        snprintf(b->period_text, sizeof(b->period_text), "Monthly");
    for (int i = 0; i < 3; i++) {
        if (strcmp(b->period_text, period_names[i]) == 0) {
            b->period = (enum egpu_api_period)i;
            return 0;
        }
    }
    b->period = EGPU_API_PERIOD_DURATION;
    if (egpu_api_duration_parse(b->period_text, "spec.period", &b->period_s, NULL) != 0 ||
        b->period_s < EGPU_API_PERIOD_MIN_S || b->period_s > EGPU_API_PERIOD_MAX_S)
        return egpu_error_set(err, EGPU_ERANGE,
                              "spec.period is \"%s\"; allowed: Daily, Weekly, Monthly, or a "
                              "duration from 1m to 8784h (366 days), e.g. 12h or 168h",
                              b->period_text);
    return 0;
}

static int class_name(const json_t *spec, const char *key, bool required, char *buf,
                      struct egpu_error *err)
{
    char path[64];
    int rc;

    snprintf(path, sizeof(path), "spec.%s", key);
    rc = egpu__api_text(spec, key, path, required, true, buf, EGPU_K8S_NAME_MAX, err);
    if (rc == 0 && buf[0] != '\0' && !egpu_api_dns_subdomain(buf))
        rc = egpu_error_set(err, EGPU_ERANGE,
                            "%s is \"%s\"; allowed: the name of a PriorityClass, a DNS subdomain "
                            "([a-z0-9.-])",
                            path, buf);
    return rc;
}

static int spec_decode(const json_t *obj, struct egpu_api_budget *b, struct egpu_error *err)
{
    const json_t *spec;
    int rc;

    rc = egpu__api_object(obj, "spec", "spec", true, &spec, err);
    if (!rc)
        rc = scaled(spec, "gpuHours", "spec.gpuHours", EGPU_API_GPU_HOURS_MAX, 1e3,
                    "allowed: a number of GPU-hours from 0 to 1000000000, e.g. 120 or 7.5", true,
                    &b->gpu_hours_milli, err);
    if (!rc)
        rc = scaled(spec, "memoryWeight", "spec.memoryWeight", 1000, 1e6,
                    "allowed: GPU-hours charged per GiB-hour of gpu-memory, a number from 0 to "
                    "1000, e.g. 0.0125 (80 GiB for an hour = 1 GPU-hour)",
                    false, &b->memory_weight_micro, err);
    if (!rc)
        rc = period_decode(spec, b, err);
    if (!rc)
        rc = egpu__api_text(spec, "timeZone", "spec.timeZone", false, true, b->time_zone,
                            sizeof(b->time_zone), err);
    if (rc)
        return rc;
    if (b->time_zone[0] == '\0')
        snprintf(b->time_zone, sizeof(b->time_zone), "UTC");
    else if (!zone_name(b->time_zone))
        return egpu_error_set(err, EGPU_ERANGE,
                              "spec.timeZone is \"%s\"; allowed: an IANA time zone name, e.g. "
                              "UTC or Europe/Berlin",
                              b->time_zone);
    rc = class_name(spec, "inBudgetPriorityClassName", false, b->in_class, err);
    if (!rc)
        rc = class_name(spec, "overBudgetPriorityClassName", true, b->over_class, err);
    return rc;
}

static int time_field(const json_t *o, const char *key, const char *path, int64_t *out, bool *has,
                      struct egpu_error *err)
{
    char text[EGPU_API_TIME_MAX];
    int rc = egpu__api_text(o, key, path, false, true, text, sizeof(text), err);

    *has = false;
    if (rc || text[0] == '\0')
        return rc;
    *has = true;
    return egpu_api_time_parse(text, path, out, err);
}

static int status_decode(const json_t *obj, struct egpu_api_budget *b, struct egpu_error *err)
{
    const json_t *st, *m;
    bool has_start, has_end, has;
    int state = 0;
    int rc;

    rc = egpu__api_object(obj, "status", "status", false, &st, err);
    if (rc || st == NULL)
        return rc;
    rc = time_field(st, "periodStart", "status.periodStart", &b->period_start_s, &has_start, err);
    if (!rc)
        rc = time_field(st, "periodEnd", "status.periodEnd", &b->period_end_s, &has_end, err);
    if (rc)
        return rc;
    if (has_start != has_end || (has_start && b->period_end_s <= b->period_start_s))
        return egpu_error_set(err, EGPU_ERANGE,
                              "status.periodStart and status.periodEnd: allowed: both or neither, "
                              "the start before the end");
    b->has_period = has_start;
    rc = egpu__api_object(st, "metering", "status.metering", false, &m, err);
    if (!rc && m != NULL) {
        b->has_metering = true;
        rc = time_field(m, "until", "status.metering.until", &b->metered_until_s, &has, err);
        if (!rc && !has)
            rc = egpu_error_set(err, EGPU_ESYNTAX, "status.metering.until is missing");
        if (!rc)
            rc = egpu__api_int(m, "coreSeconds", "status.metering.coreSeconds", 0, INT64_MAX, NULL,
                               &b->core_pct_s, &has, err);
        if (!rc)
            rc = egpu__api_int(m, "memorySeconds", "status.metering.memorySeconds", 0, INT64_MAX,
                               NULL, &b->mem_mib_s, &has, err);
        if (!rc && b->has_period &&
            (b->metered_until_s < b->period_start_s || b->metered_until_s > b->period_end_s))
            rc = egpu_error_set(err, EGPU_ERANGE,
                                "status.metering.until is outside the period; allowed: from "
                                "status.periodStart to status.periodEnd");
    }
    if (!rc)
        rc =
            egpu__api_enum(st, "state", "status.state", state_names, 2, &state, &b->has_state, err);
    b->state = (enum egpu_api_budget_state)state;
    if (!rc)
        rc = egpu__api_int(st, "observedGeneration", "status.observedGeneration", 0, INT64_MAX,
                           NULL, &b->observed_generation, &has, err);
    if (!rc)
        rc = egpu__api_conditions_decode(st, b->conditions, &b->nconditions, err);
    return rc;
}

int egpu_api_budget_decode(const json_t *obj, struct egpu_api_budget *out, struct egpu_error *err)
{
    struct egpu_api_budget *b = egpu_calloc(1, sizeof(*b));
    int rc;

    if (b == NULL)
        return egpu_error_set(err, -ENOMEM, "GPUBudget: out of memory");
    rc = egpu__api_check_kind(obj, EGPU_KIND_GPUBUDGET, err);
    if (!rc)
        rc = egpu__api_meta_decode(obj, true, &b->meta, err);
    if (!rc)
        rc = spec_decode(obj, b, err);
    if (!rc)
        rc = status_decode(obj, b, err);
    if (!rc)
        memcpy(out, b, sizeof(*b));
    egpu_free(b);
    return rc;
}

int64_t egpu_api_budget_used_milli(const struct egpu_api_budget *b)
{
    /* percent-seconds -> GPU-hour thousandths: / 100 / 3600 * 1000 */
    long double core = (long double)b->core_pct_s / 360.0L;
    long double mem = (long double)b->memory_weight_micro * (long double)b->mem_mib_s /
                      (1024.0L * 3600.0L * 1000.0L);

    return (int64_t)floorl(core + mem);
}

enum egpu_api_budget_state egpu_api_budget_state_of(const struct egpu_api_budget *b)
{
    return egpu_api_budget_used_milli(b) < b->gpu_hours_milli ? EGPU_API_BUDGET_IN_BUDGET
                                                              : EGPU_API_BUDGET_OVER_BUDGET;
}

json_t *egpu_api_budget_encode(const struct egpu_api_budget *b)
{
    json_t *o = egpu__api_object_new(EGPU_KIND_GPUBUDGET, &b->meta);
    json_t *spec = NULL, *st = NULL, *m = NULL;
    int64_t used = egpu_api_budget_used_milli(b);
    char t[EGPU_API_TIME_MAX];
    bool ok;

    if (o == NULL)
        return NULL;
    ok = egpu__api_set(o, "spec", spec = json_object()) &&
         egpu__api_set(spec, "gpuHours", egpu__api_milli_number(b->gpu_hours_milli)) &&
         (b->memory_weight_micro == 0 ||
          egpu__api_set(spec, "memoryWeight", json_real((double)b->memory_weight_micro / 1e6))) &&
         egpu__api_set_text(spec, "period", b->period_text) &&
         egpu__api_set_text(spec, "timeZone", b->time_zone) &&
         egpu__api_set_text(spec, "inBudgetPriorityClassName", b->in_class) &&
         egpu__api_set_text(spec, "overBudgetPriorityClassName", b->over_class) &&
         egpu__api_set(o, "status", st = json_object()) &&
         egpu__api_set(st, "used", egpu__api_milli_number(used)) &&
         egpu__api_set(st, "remaining", egpu__api_milli_number(b->gpu_hours_milli - used));
    if (ok && b->has_period)
        ok = egpu__api_set_text(st, "periodStart", egpu_api_time_format(b->period_start_s, t)) &&
             egpu__api_set_text(st, "periodEnd", egpu_api_time_format(b->period_end_s, t));
    if (ok && b->has_metering)
        ok = egpu__api_set(st, "metering", m = json_object()) &&
             egpu__api_set_text(m, "until", egpu_api_time_format(b->metered_until_s, t)) &&
             egpu__api_set(m, "coreSeconds", json_integer(b->core_pct_s)) &&
             egpu__api_set(m, "memorySeconds", json_integer(b->mem_mib_s));
    if (ok && b->has_state)
        ok = egpu__api_set(st, "state", json_string(egpu_api_budget_state_name(b->state)));
    if (ok && b->observed_generation > 0)
        ok = egpu__api_set(st, "observedGeneration", json_integer(b->observed_generation));
    if (ok && b->nconditions > 0)
        ok = egpu__api_set(st, "conditions",
                           egpu__api_conditions_encode(b->conditions, b->nconditions));
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}
