/* core/quantity.c - Kubernetes resource quantities, parsed exactly.
 *
 * Follows the grammar of k8s.io/apimachinery/pkg/api/resource (quantity.go):
 * a signed decimal number and one suffix: binary SI (Ki..Ei), decimal SI
 * (n u m "" k M G T P E) or a decimal exponent (e3, E-2). The value is kept as
 * mantissa * 10^dec_exp * 2^bin_exp with no floating point, so "0.1" and
 * "100m" are the same value and conversions are exact. Conversions round up
 * like Quantity.ScaledValue, or insist on a whole number of units.
 */
#include <errno.h>
#include <string.h>

#include "egpu/core.h"

#define MANTISSA_DIGITS_MAX 18
#define EXPONENT_MAX        100

typedef unsigned __int128 u128;

static int parse_suffix(const char *s, struct egpu_quantity *q)
{
    static const struct {
        const char *name;
        int dec, bin;
    } suffixes[] = {
        {"", 0, 0},    {"Ki", 0, 10}, {"Mi", 0, 20}, {"Gi", 0, 30}, {"Ti", 0, 40}, {"Pi", 0, 50},
        {"Ei", 0, 60}, {"n", -9, 0},  {"u", -6, 0},  {"m", -3, 0},  {"k", 3, 0},   {"M", 6, 0},
        {"G", 9, 0},   {"T", 12, 0},  {"P", 15, 0},  {"E", 18, 0},
    };
    int sign = 1, exp = 0;
    const char *p;

    for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
        if (strcmp(s, suffixes[i].name) == 0) {
            q->dec_exp += suffixes[i].dec;
            q->bin_exp += suffixes[i].bin;
            return 0;
        }
    }
    if (s[0] != 'e' && s[0] != 'E')
        return EGPU_ESYNTAX;
    p = s + 1;
    if (*p == '+' || *p == '-')
        sign = *p++ == '-' ? -1 : 1;
    if (*p == '\0')
        return EGPU_ESYNTAX;
    for (; *p; p++) {
        if (*p < '0' || *p > '9')
            return EGPU_ESYNTAX;
        exp = exp * 10 + (*p - '0');
        if (exp > EXPONENT_MAX)
            return EGPU_ERANGE;
    }
    q->dec_exp += sign * exp;
    return 0;
}

int egpu_quantity_parse(const char *s, struct egpu_quantity *q, struct egpu_error *err)
{
    struct egpu_quantity v = {0};
    const char *p = s;
    int frac_digits = 0, sig_digits = 0, zeros = 0, rc;
    bool seen_point = false, seen_digit = false;

    if (s == NULL || *s == '\0')
        return egpu_error_set(err, EGPU_ESYNTAX, "empty quantity");
    if (*p == '+' || *p == '-')
        v.negative = *p++ == '-';
    /* Only significant digits enter the mantissa: leading zeros are skipped
     * and trailing zeros wait in `zeros` until a non-zero digit follows. */
    for (; (*p >= '0' && *p <= '9') || *p == '.'; p++) {
        if (*p == '.') {
            if (seen_point)
                return egpu_error_set(err, EGPU_ESYNTAX, "quantity \"%s\": two decimal points", s);
            seen_point = true;
            continue;
        }
        seen_digit = true;
        if (seen_point) {
            if (frac_digits == EXPONENT_MAX)
                return egpu_error_set(err, EGPU_ERANGE, "quantity \"%s\": too many digits", s);
            frac_digits++;
        }
        if (*p == '0') {
            if (sig_digits > 0 && ++zeros > EXPONENT_MAX)
                return egpu_error_set(err, EGPU_ERANGE, "quantity \"%s\": too many digits", s);
            continue;
        }
        if (sig_digits + zeros + 1 > MANTISSA_DIGITS_MAX)
            return egpu_error_set(err, EGPU_ERANGE,
                                  "quantity \"%s\": more than %d significant digits", s,
                                  MANTISSA_DIGITS_MAX);
        for (; zeros > 0; zeros--, sig_digits++)
            v.mantissa *= 10;
        v.mantissa = v.mantissa * 10 + (uint64_t)(*p - '0');
        sig_digits++;
    }
    if (!seen_digit)
        return egpu_error_set(err, EGPU_ESYNTAX,
                              "quantity \"%s\": expected a number such as 30, 500m, 4Gi or 1e3", s);
    rc = parse_suffix(p, &v);
    if (rc == EGPU_ESYNTAX)
        return egpu_error_set(err, rc,
                              "quantity \"%s\": unknown suffix \"%s\" (allowed: Ki Mi Gi Ti Pi Ei, "
                              "n u m k M G T P E, or an exponent such as e3)",
                              s, p);
    if (rc)
        return egpu_error_set(err, rc, "quantity \"%s\": exponent beyond %d", s, EXPONENT_MAX);
    v.dec_exp += zeros - frac_digits;
    if (v.mantissa == 0) {
        v.dec_exp = 0;
        v.bin_exp = 0;
        v.negative = false;
    }
    *q = v;
    return 0;
}

/* x *= base^n, saturating at the flag; n >= 0. */
static bool mul_pow(u128 *x, unsigned base, int n)
{
    const u128 limit = (u128)1 << 120;

    for (int i = 0; i < n; i++) {
        if (*x > limit / base)
            return false;
        *x *= base;
    }
    return true;
}

int egpu_quantity_to_units(const struct egpu_quantity *q, int unit_dec, int unit_bin,
                           enum egpu_round round, int64_t *out)
{
    int d = q->dec_exp - unit_dec;
    int b = q->bin_exp - unit_bin;
    u128 num = q->mantissa, den = 1, quot, rem;

    if (q->mantissa == 0) {
        *out = 0;
        return 0;
    }
    if (!mul_pow(&num, 10, d > 0 ? d : 0) || !mul_pow(&num, 2, b > 0 ? b : 0))
        return EGPU_ERANGE;
    if (!mul_pow(&den, 10, d < 0 ? -d : 0) || !mul_pow(&den, 2, b < 0 ? -b : 0)) {
        /* The unit dwarfs the value: it is a non-zero fraction of one unit. */
        if (round == EGPU_ROUND_EXACT)
            return EGPU_ERANGE;
        *out = q->negative ? 0 : 1;
        return 0;
    }
    quot = num / den;
    rem = num % den;
    if (rem != 0) {
        if (round == EGPU_ROUND_EXACT)
            return EGPU_ERANGE;
        if (!q->negative)
            quot++;
    }
    if (quot > (u128)INT64_MAX)
        return EGPU_ERANGE;
    *out = q->negative ? -(int64_t)quot : (int64_t)quot;
    return 0;
}

/* Parse s as a non-negative quantity in the given unit. */
static int parse_units(const char *s, const char *field, int unit_dec, int unit_bin,
                       enum egpu_round round, const char *unit_name, int64_t *out,
                       struct egpu_error *err)
{
    struct egpu_quantity q;
    int64_t v;
    int rc = egpu_quantity_parse(s, &q, err);

    if (rc)
        return egpu_error_prefix(err, rc, "%s", field);
    if (q.negative)
        return egpu_error_set(err, EGPU_ERANGE, "%s: \"%s\" is negative; must be >= 0", field, s);
    rc = egpu_quantity_to_units(&q, unit_dec, unit_bin, round, &v);
    if (rc == EGPU_ERANGE && round == EGPU_ROUND_EXACT)
        return egpu_error_set(err, rc, "%s: \"%s\" is not a whole number of %s", field, s,
                              unit_name);
    if (rc)
        return egpu_error_set(err, rc, "%s: \"%s\" is too large", field, s);
    *out = v;
    return 0;
}

int egpu_parse_cpu_milli(const char *s, const char *field, int64_t *out, struct egpu_error *err)
{
    return parse_units(s, field, -3, 0, EGPU_ROUND_UP, "millicores", out, err);
}

int egpu_parse_mem_mib(const char *s, const char *field, int64_t *out, struct egpu_error *err)
{
    return parse_units(s, field, 0, 20, EGPU_ROUND_UP, "MiB", out, err);
}

int egpu_parse_gpu_core_pct(const char *s, const char *field, int64_t *out, struct egpu_error *err)
{
    int64_t v;
    int rc = parse_units(s, field, 0, 0, EGPU_ROUND_EXACT, "percent", &v, err);

    if (rc)
        return rc;
    if (v < 1 || (v >= 100 && v % 100 != 0) || v > 100LL * EGPU_NODE_GPUS_MAX)
        return egpu_error_set(err, EGPU_ERANGE,
                              "%s: %lld is not a valid GPU core request (allowed: 1..99 percent "
                              "of one card, or 100*k for k whole cards, k <= %d)",
                              field, (long long)v, EGPU_NODE_GPUS_MAX);
    *out = v;
    return 0;
}

int egpu_parse_gpu_mem_mib(const char *s, const char *field, int64_t *out, struct egpu_error *err)
{
    int64_t v;
    int rc = parse_units(s, field, 0, 0, EGPU_ROUND_EXACT, "MiB", &v, err);

    if (rc)
        return rc;
    if (v > UINT32_MAX)
        return egpu_error_set(err, EGPU_ERANGE, "%s: %lld MiB is more than any GPU has", field,
                              (long long)v);
    *out = v;
    return 0;
}
