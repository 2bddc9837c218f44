/* tests/unit/test_quantity.c - Kubernetes resource quantities (src/core/quantity.c).
 *
 * Checks the grammar of k8s.io/apimachinery resource.Quantity as documented in
 * egpu/core.h: which strings parse, to which exact mantissa and exponents, and
 * which fail with EGPU_ESYNTAX or EGPU_ERANGE. Then checks the conversions
 * (exact and rounded up) and the four helpers Elastic GPU reads resources
 * with, including that errors name the field and that *out is written only on
 * success. Every expected number was worked out by hand; the comments show
 * the arithmetic where it is not obvious.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "testutil.h"

/* A value no conversion in these tests can produce, to detect stray writes. */
#define SENTINEL ((int64_t)0x5a5a5a5a5a5a5a5aLL)

#define FIELD_CPU  "resources.requests.cpu"
#define FIELD_MEM  "resources.limits.memory"
#define FIELD_CORE "resources.limits.elasticgpu.io/gpu-core"
#define FIELD_GMEM "resources.limits.elasticgpu.io/gpu-memory"

struct parse_case {
    const char *s;
    bool negative;
    uint64_t mantissa;
    int dec_exp;
    int bin_exp;
};

struct fail_case {
    const char *s;
    int rc;
};

struct units_case {
    const char *s;
    int64_t want;
};

/* One of the four helpers, so a table can be checked against any of them. */
typedef int (*parse_fn)(const char *s, const char *field, int64_t *out, struct egpu_error *err);

/* The message in err must contain needle; the failure says which input. */
static void expect_msg_has(const struct egpu_error *err, const char *needle, const char *input)
{
    if (strstr(err->msg, needle) == NULL)
        fail_msg("input \"%s\": message \"%s\" lacks \"%s\"", input, err->msg, needle);
}

/* Parse s, which must succeed with exactly the given representation. */
static void expect_parse(const struct parse_case *c)
{
    struct egpu_quantity q;
    struct egpu_error err = {0};
    int rc = egpu_quantity_parse(c->s, &q, &err);

    if (rc != 0)
        fail_msg("\"%s\": rc %d (%s)", c->s, rc, err.msg);
    if (q.negative != c->negative || q.mantissa != c->mantissa || q.dec_exp != c->dec_exp ||
        q.bin_exp != c->bin_exp)
        fail_msg("\"%s\": got %s%llu e%d b%d, want %s%llu e%d b%d", c->s, q.negative ? "-" : "+",
                 (unsigned long long)q.mantissa, q.dec_exp, q.bin_exp, c->negative ? "-" : "+",
                 (unsigned long long)c->mantissa, c->dec_exp, c->bin_exp);
}

/* Parse s, which must fail with rc, leave *q alone and fill in err. */
static void expect_parse_fail(const char *s, int want_rc)
{
    struct egpu_quantity q = {.negative = true, .mantissa = 777, .dec_exp = 7, .bin_exp = 7};
    struct egpu_error err = {0};
    int rc = egpu_quantity_parse(s, &q, &err);

    if (rc != want_rc)
        fail_msg("\"%s\": rc %d, want %d (%s)", s, rc, want_rc, err.msg);
    if (err.code != want_rc || err.msg[0] == '\0')
        fail_msg("\"%s\": err.code %d, msg \"%s\"", s, err.code, err.msg);
    if (!q.negative || q.mantissa != 777 || q.dec_exp != 7 || q.bin_exp != 7)
        fail_msg("\"%s\": *q written on failure", s);
    /* A NULL err is allowed and must give the same code. */
    rc = egpu_quantity_parse(s, &q, NULL);
    if (rc != want_rc)
        fail_msg("\"%s\" without err: rc %d, want %d", s, rc, want_rc);
}

/* Parse s and convert it to units of 10^dec * 2^bin; the result must be want. */
static void expect_units(const char *s, int dec, int bin, enum egpu_round round, int64_t want)
{
    struct egpu_quantity q;
    int64_t out = SENTINEL;

    if (egpu_quantity_parse(s, &q, NULL) != 0)
        fail_msg("\"%s\" does not parse", s);
    if (egpu_quantity_to_units(&q, dec, bin, round, &out) != 0)
        fail_msg("\"%s\" to 10^%d*2^%d: conversion failed", s, dec, bin);
    if (out != want)
        fail_msg("\"%s\" to 10^%d*2^%d: got %lld, want %lld", s, dec, bin, (long long)out,
                 (long long)want);
}

/* Parse s and convert it; the conversion must be EGPU_ERANGE and leave *out alone. */
static void expect_units_range(const char *s, int dec, int bin, enum egpu_round round)
{
    struct egpu_quantity q;
    int64_t out = SENTINEL;
    int rc;

    if (egpu_quantity_parse(s, &q, NULL) != 0)
        fail_msg("\"%s\" does not parse", s);
    rc = egpu_quantity_to_units(&q, dec, bin, round, &out);
    if (rc != EGPU_ERANGE)
        fail_msg("\"%s\" to 10^%d*2^%d: rc %d, want EGPU_ERANGE", s, dec, bin, rc);
    if (out != SENTINEL)
        fail_msg("\"%s\": *out written on failure (%lld)", s, (long long)out);
}

/* Helper fn must accept s and give want. */
static void expect_helper(parse_fn fn, const char *s, int64_t want)
{
    struct egpu_error err = {0};
    int64_t out = SENTINEL;
    int rc = fn(s, "field", &out, &err);

    if (rc != 0)
        fail_msg("\"%s\": rc %d (%s)", s, rc, err.msg);
    if (out != want)
        fail_msg("\"%s\": got %lld, want %lld", s, (long long)out, (long long)want);
}

/* Helper fn must reject s with want_rc, name field in the message, leave *out alone. */
static void expect_helper_fail(parse_fn fn, const char *s, const char *field, int want_rc,
                               struct egpu_error *err)
{
    int64_t out = SENTINEL;
    int rc;

    memset(err, 0, sizeof(*err));
    rc = fn(s, field, &out, err);
    if (rc != want_rc)
        fail_msg("\"%s\": rc %d, want %d (%s)", s, rc, want_rc, err->msg);
    if (err->code != want_rc)
        fail_msg("\"%s\": err.code %d, want %d", s, err->code, want_rc);
    if (out != SENTINEL)
        fail_msg("\"%s\": *out written on failure (%lld)", s, (long long)out);
    expect_msg_has(err, field, s);
}

static void parse_valid_forms(void **state)
{
    /* Trailing zeros of the digits move into dec_exp ("30" = 3e1) and the
     * decimal point subtracts the fraction digits ("0.5" = 5e-1). */
    static const struct parse_case cases[] = {
        {"30", false, 3, 1, 0},
        {"500m", false, 5, -1, 0}, /* 5e2 * 1e-3 */
        {"4Gi", false, 4, 0, 30},
        {"4096Mi", false, 4096, 0, 20},
        {"1e3", false, 1, 3, 0},
        {"1E3", false, 1, 3, 0},
        {"1e-2", false, 1, -2, 0},
        {"1E+2", false, 1, 2, 0},
        {"0.5", false, 5, -1, 0},
        {".5", false, 5, -1, 0},
        {"5.", false, 5, 0, 0},
        {"+3", false, 3, 0, 0},
        {"-2.50", true, 25, -1, 0}, /* digits 250, two after the point, one trailing zero */
        {"+.5Ki", false, 5, -1, 10},
        {"1.5Gi", false, 15, -1, 30},
        {"100n", false, 1, -7, 0}, /* 1e2 * 1e-9 */
        {"7u", false, 7, -6, 0},
        {"2k", false, 2, 3, 0},
        {"3M", false, 3, 6, 0},
        {"4G", false, 4, 9, 0},
        {"5T", false, 5, 12, 0},
        {"6P", false, 6, 15, 0},
        {"1E", false, 1, 18, 0}, /* a bare E is exa, not an exponent */
        {"3Ki", false, 3, 0, 10},
        {"1Ti", false, 1, 0, 40},
        {"1Pi", false, 1, 0, 50},
        {"1Ei", false, 1, 0, 60},
        {"0", false, 0, 0, 0},
        {"-0.000", false, 0, 0, 0}, /* zero is never negative and has no exponent */
        {"0Gi", false, 0, 0, 0},
        {"0012", false, 12, 0, 0},
        {"1e100", false, 1, 100, 0},
        {"1e-100", false, 1, -100, 0},
        {"1e007", false, 1, 7, 0},
        {"123456789012345678", false, 123456789012345678ULL, 0, 0}, /* 18 digits: the limit */
        /* 19 digits, but the last is a trailing zero, so 18 are significant. */
        {"1234567890123456780", false, 123456789012345678ULL, 1, 0},
        /* 4 leading zeros then 18 significant digits; 21 after the point. */
        {"0.000123456789012345678", false, 123456789012345678ULL, -21, 0},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        expect_parse(&cases[i]);
}

static void parse_rejects_bad_syntax(void **state)
{
    static const char *const bad[] = {
        "",      "abc",  "1.2.3", "1Kb", "1K",   "Mi",  "1e",    "1e+", "1E-", "--1",
        "1 ",    " 1",   ".",     "+",   "-",    "+Ki", "1ki",   "1mi", "1i",  "1Mi3",
        "1e3.5", "1e 3", "0x10",  "1EE", "1.5e", "1,5", "1e3Ki", "1m5", "ee3", "1MiB",
    };

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        expect_parse_fail(bad[i], EGPU_ESYNTAX);
}

static void parse_rejects_out_of_range(void **state)
{
    static const char *const big[] = {
        "1e1000",
        "1e101", /* the exponent limit is +-100 */
        "1e-101",
        "1E101",
        "1234567890123456789", /* 19 significant digits */
        "12345678901234567.89",
        "1000000000000000000001", /* 22 significant digits: the zeros are inside */
        "-1234567890123456789Ki",
        "12345678901234567890123456789012345678901234567890123456789012345678901234567890",
    };

    (void)state;
    for (size_t i = 0; i < sizeof(big) / sizeof(big[0]); i++)
        expect_parse_fail(big[i], EGPU_ERANGE);
}

/* Leading and trailing zeros are not significant digits (core.h: EGPU_ERANGE
 * only for more than 18 significant digits), however many there are. */
static void parse_ignores_insignificant_zeros(void **state)
{
    char s[128];
    struct parse_case c;

    (void)state;
    /* 80 leading zeros, then 5: the value 5. */
    memset(s, '0', 80);
    memcpy(s + 80, "5", 2);
    c = (struct parse_case){s, false, 5, 0, 0};
    expect_parse(&c);
    /* 1 and 80 zeros: 1e80. */
    s[0] = '1';
    memset(s + 1, '0', 80);
    s[81] = '\0';
    c = (struct parse_case){s, false, 1, 80, 0};
    expect_parse(&c);
    /* "0." with 79 zeros and a 1: 1e-80. */
    memcpy(s, "0.", 2);
    memset(s + 2, '0', 79);
    memcpy(s + 81, "1", 2);
    c = (struct parse_case){s, false, 1, -80, 0};
    expect_parse(&c);
}

static void to_units_exact_and_round_up(void **state)
{
    struct egpu_quantity q = {.mantissa = 3, .dec_exp = -1}; /* 0.3, built by hand */
    int64_t out = SENTINEL;

    (void)state;
    assert_int_equal(egpu_quantity_to_units(&q, -3, 0, EGPU_ROUND_EXACT, &out), 0);
    assert_int_equal(out, 300);

    expect_units("1.5", -3, 0, EGPU_ROUND_EXACT, 1500);
    expect_units_range("1.5", 0, 0, EGPU_ROUND_EXACT);
    expect_units("1.5", 0, 0, EGPU_ROUND_UP, 2);
    expect_units("1.0001", 0, 0, EGPU_ROUND_UP, 2);
    expect_units("2", 0, 0, EGPU_ROUND_EXACT, 2);
    /* Round up is toward +infinity: -1.5 -> -1, -0.5 -> 0. */
    expect_units("-1.5", 0, 0, EGPU_ROUND_UP, -1);
    expect_units("-0.5", 0, 0, EGPU_ROUND_UP, 0);
    expect_units("-3", -3, 0, EGPU_ROUND_EXACT, -3000);
    expect_units("1Ki", 0, 0, EGPU_ROUND_EXACT, 1024);
    expect_units("1Ki", 0, 10, EGPU_ROUND_EXACT, 1);
    /* 1Ki in units of 1000 is 1.024: not whole, rounds up to 2. */
    expect_units_range("1Ki", 3, 0, EGPU_ROUND_EXACT);
    expect_units("1Ki", 3, 0, EGPU_ROUND_UP, 2);
    /* 1Mi in milli: 1048576 * 1000. */
    expect_units("1Mi", -3, 0, EGPU_ROUND_EXACT, 1048576000);
    /* 1G in MiB: 10^9 / 2^20 = 953.67 -> 954. */
    expect_units("1G", 0, 20, EGPU_ROUND_UP, 954);
    expect_units_range("1G", 0, 20, EGPU_ROUND_EXACT);
    /* 1.5Gi in MiB: 1.5 * 1024. */
    expect_units("1.5Gi", 0, 20, EGPU_ROUND_EXACT, 1536);
    expect_units("4096Mi", 0, 30, EGPU_ROUND_EXACT, 4);
    expect_units("1n", 0, 0, EGPU_ROUND_UP, 1);
    expect_units_range("1n", 0, 0, EGPU_ROUND_EXACT);
    expect_units("1n", -9, 0, EGPU_ROUND_EXACT, 1);
    /* A value far smaller than the unit still rounds up to one unit. */
    expect_units("1e-100", 0, 0, EGPU_ROUND_UP, 1);
    expect_units("1e-100", 0, 60, EGPU_ROUND_UP, 1);
    expect_units_range("1e-100", 0, 0, EGPU_ROUND_EXACT);
    expect_units("-1e-100", 0, 0, EGPU_ROUND_UP, 0);
    expect_units("0", 18, 60, EGPU_ROUND_EXACT, 0);
    expect_units("0", -100, 0, EGPU_ROUND_EXACT, 0);
    expect_units("1E", 0, 0, EGPU_ROUND_EXACT, 1000000000000000000LL);
    /* 1E in milli is 10^21, beyond INT64_MAX (about 9.22e18). */
    expect_units_range("1E", -3, 0, EGPU_ROUND_UP);
}

/* Values near INT64_MAX = 9223372036854775807 convert or fail with EGPU_ERANGE. */
static void to_units_overflow(void **state)
{
    (void)state;
    /* 7 * 2^60 = 7 * 1152921504606846976. */
    expect_units("7Ei", 0, 0, EGPU_ROUND_EXACT, 8070450532247928832LL);
    expect_units("8Ei", 0, 10, EGPU_ROUND_EXACT, 9007199254740992LL); /* 2^53 KiB */
    expect_units_range("8Ei", 0, 0, EGPU_ROUND_EXACT);                /* 2^63 */
    expect_units_range("8Ei", 0, 0, EGPU_ROUND_UP);
    /* 17 significant digits and two zeros: fits, 7 below INT64_MAX. */
    expect_units("9223372036854775800", 0, 0, EGPU_ROUND_EXACT, 9223372036854775800LL);
    /* 18 significant digits and one zero: 3 above INT64_MAX. */
    expect_units_range("9223372036854775810", 0, 0, EGPU_ROUND_EXACT);
    expect_units_range("100Ei", -3, 0, EGPU_ROUND_UP);
    expect_units_range("1e100", 0, 0, EGPU_ROUND_UP);
    expect_units_range("1e100", -100, 0, EGPU_ROUND_UP);
    expect_units_range("999999999999999999Ei", 0, 0, EGPU_ROUND_UP);
}

/* "0.1" and "100m" are the same value, so they parse to the same
 * representation and every conversion agrees. */
static void equal_values_compare_equal(void **state)
{
    static const char *const pairs[][2] = {
        {"0.1", "100m"}, {"1", "1000m"}, {"1k", "1e3"},    {"1.50", "1500m"},
        {"0.5", "5e-1"}, {"2E", "2e18"}, {"100n", "0.1u"},
    };
    static const int units[][2] = {{-9, 0}, {-3, 0}, {0, 0}, {0, 20}, {3, 0}, {0, 10}};

    (void)state;
    for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
        struct egpu_quantity a, b;

        if (egpu_quantity_parse(pairs[i][0], &a, NULL) != 0 ||
            egpu_quantity_parse(pairs[i][1], &b, NULL) != 0)
            fail_msg("\"%s\" or \"%s\" does not parse", pairs[i][0], pairs[i][1]);
        if (a.negative != b.negative || a.mantissa != b.mantissa || a.dec_exp != b.dec_exp)
            fail_msg("\"%s\" and \"%s\" differ", pairs[i][0], pairs[i][1]);
        for (size_t u = 0; u < sizeof(units) / sizeof(units[0]); u++) {
            int64_t va = SENTINEL, vb = SENTINEL;
            int ra = egpu_quantity_to_units(&a, units[u][0], units[u][1], EGPU_ROUND_UP, &va);
            int rb = egpu_quantity_to_units(&b, units[u][0], units[u][1], EGPU_ROUND_UP, &vb);

            if (ra != rb || va != vb)
                fail_msg("\"%s\" -> %lld (rc %d), \"%s\" -> %lld (rc %d)", pairs[i][0],
                         (long long)va, ra, pairs[i][1], (long long)vb, rb);
        }
    }
    expect_units("0.1", -3, 0, EGPU_ROUND_EXACT, 100);
    expect_units("100m", -3, 0, EGPU_ROUND_EXACT, 100);
}

static void cpu_milli(void **state)
{
    static const struct units_case ok[] = {
        {"0.0001", 1}, /* 0.1 millicore rounds up to 1 */
        {"1.5", 1500},   {"500m", 500},    {"2", 2000},
        {"0.1", 100},    {"100m", 100},    {"100n", 1}, /* 0.0001 millicore rounds up */
        {"1001u", 2},                                   /* 1.001 millicores */
        {"0", 0},        {"-0", 0},                     /* zero has no sign */
        {"1k", 1000000}, {"1e3", 1000000}, {"1Ki", 1024000},
    };
    struct egpu_error err;

    (void)state;
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
        expect_helper(egpu_parse_cpu_milli, ok[i].s, ok[i].want);
    expect_helper_fail(egpu_parse_cpu_milli, "abc", FIELD_CPU, EGPU_ESYNTAX, &err);
    /* A syntax error from the parser gets the field in front. */
    assert_int_equal(strncmp(err.msg, FIELD_CPU ": ", strlen(FIELD_CPU) + 2), 0);
    expect_helper_fail(egpu_parse_cpu_milli, "", FIELD_CPU, EGPU_ESYNTAX, &err);
    expect_helper_fail(egpu_parse_cpu_milli, "1K", FIELD_CPU, EGPU_ESYNTAX, &err);
    expect_helper_fail(egpu_parse_cpu_milli, "1e1000", FIELD_CPU, EGPU_ERANGE, &err);
    expect_helper_fail(egpu_parse_cpu_milli, "-1", FIELD_CPU, EGPU_ERANGE, &err);
    expect_helper_fail(egpu_parse_cpu_milli, "-500m", FIELD_CPU, EGPU_ERANGE, &err);
    /* 100 * 2^60 * 1000 millicores overflows int64. */
    expect_helper_fail(egpu_parse_cpu_milli, "100Ei", FIELD_CPU, EGPU_ERANGE, &err);
    expect_helper_fail(egpu_parse_cpu_milli, "1E", FIELD_CPU, EGPU_ERANGE, &err);
}

static void mem_mib(void **state)
{
    static const struct units_case ok[] = {
        {"4Gi", 4096},
        {"4096Mi", 4096},
        {"1G", 954}, /* 10^9 / 2^20 = 953.67 */
        {"1e3", 1},  /* 1000 bytes round up to one MiB */
        {"0", 0},
        {"1", 1},
        {"1Mi", 1},
        {"1048577", 2}, /* one byte over 1 MiB */
        {"1048576", 1},
        {"1.5Gi", 1536},
        {"0.5Mi", 1},
        {"1Ti", 1048576},
        {"1Ei", 1099511627776LL}, /* 2^40 */
        {"100Ei", 109951162777600LL},
        {"128974848", 123}, /* 123 * 1048576 exactly */
    };
    struct egpu_error err;

    (void)state;
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
        expect_helper(egpu_parse_mem_mib, ok[i].s, ok[i].want);
    expect_helper_fail(egpu_parse_mem_mib, "4GB", FIELD_MEM, EGPU_ESYNTAX, &err);
    expect_helper_fail(egpu_parse_mem_mib, "Mi", FIELD_MEM, EGPU_ESYNTAX, &err);
    expect_helper_fail(egpu_parse_mem_mib, "-1Gi", FIELD_MEM, EGPU_ERANGE, &err);
    expect_helper_fail(egpu_parse_mem_mib, "1e100", FIELD_MEM, EGPU_ERANGE, &err);
    expect_helper_fail(egpu_parse_mem_mib, "1234567890123456789", FIELD_MEM, EGPU_ERANGE, &err);
}

static void gpu_core_pct(void **state)
{
    static const struct units_case ok[] = {
        {"1", 1},     {"30", 30},  {"99", 99},    {"100", 100}, {"200", 200}, {"6400", 6400},
        {"1e2", 100}, {"3e1", 30}, {"0.3e2", 30}, {"1k", 1000}, {"50.0", 50},
    };
    /* Well-formed values outside 1..99 and 100*k, k <= 64. */
    static const char *const range[] = {"0",    "100.5", "150", "30.5",  "500m", "-1",
                                        "6500", "101",   "199", "1e100", "1Ki"};
    /* Values that are whole numbers, so the message states the allowed values. */
    static const char *const named[] = {"0", "150", "6500", "101", "1Ki"};
    struct egpu_error err;

    (void)state;
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
        expect_helper(egpu_parse_gpu_core_pct, ok[i].s, ok[i].want);
    for (size_t i = 0; i < sizeof(range) / sizeof(range[0]); i++)
        expect_helper_fail(egpu_parse_gpu_core_pct, range[i], FIELD_CORE, EGPU_ERANGE, &err);
    for (size_t i = 0; i < sizeof(named) / sizeof(named[0]); i++) {
        expect_helper_fail(egpu_parse_gpu_core_pct, named[i], FIELD_CORE, EGPU_ERANGE, &err);
        expect_msg_has(&err, "1..99", named[i]);
        expect_msg_has(&err, "100", named[i]);
    }
    expect_helper_fail(egpu_parse_gpu_core_pct, "30%", FIELD_CORE, EGPU_ESYNTAX, &err);
    expect_helper_fail(egpu_parse_gpu_core_pct, "", FIELD_CORE, EGPU_ESYNTAX, &err);
}

static void gpu_mem_mib(void **state)
{
    static const struct units_case ok[] = {
        {"4096", 4096},   {"4k", 4000},   {"0", 0},         {"16Ki", 16384},
        {"1Mi", 1048576}, {"2.5k", 2500}, {"4096.0", 4096}, {"0.5Ki", 512},
    };
    static const char *const range[] = {"1.5", "500m", "-1", "0.1Ki", "1e-1"};
    struct egpu_error err;

    (void)state;
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
        expect_helper(egpu_parse_gpu_mem_mib, ok[i].s, ok[i].want);
    for (size_t i = 0; i < sizeof(range) / sizeof(range[0]); i++)
        expect_helper_fail(egpu_parse_gpu_mem_mib, range[i], FIELD_GMEM, EGPU_ERANGE, &err);
    expect_helper_fail(egpu_parse_gpu_mem_mib, "4096MB", FIELD_GMEM, EGPU_ESYNTAX, &err);
    expect_helper_fail(egpu_parse_gpu_mem_mib, "x", FIELD_GMEM, EGPU_ESYNTAX, &err);
}

/* err may be NULL (core.h): the helpers must still report failure, and must
 * still leave *out alone. */
static void helpers_fail_without_err(void **state)
{
    static const struct {
        parse_fn fn;
        const char *s;
        int rc;
    } cases[] = {
        {egpu_parse_cpu_milli, "abc", EGPU_ESYNTAX},
        {egpu_parse_cpu_milli, "1e1000", EGPU_ERANGE},
        {egpu_parse_cpu_milli, "-1", EGPU_ERANGE},
        {egpu_parse_mem_mib, "1K", EGPU_ESYNTAX},
        {egpu_parse_mem_mib, "1e100", EGPU_ERANGE},
        {egpu_parse_gpu_core_pct, "", EGPU_ESYNTAX},
        {egpu_parse_gpu_core_pct, "150", EGPU_ERANGE},
        {egpu_parse_gpu_mem_mib, "1.2.3", EGPU_ESYNTAX},
        {egpu_parse_gpu_mem_mib, "1.5", EGPU_ERANGE},
    };

    int bad = 0;

    (void)state;
    /* Every case is run and reported before the test fails, so one run
     * shows all the inputs that go wrong. */
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int64_t out = SENTINEL;
        int rc = cases[i].fn(cases[i].s, "field", &out, NULL);

        if (rc != cases[i].rc) {
            print_error("case %zu \"%s\": rc %d, want %d\n", i, cases[i].s, rc, cases[i].rc);
            bad++;
        }
        if (out != SENTINEL) {
            print_error("case %zu \"%s\": *out written on failure\n", i, cases[i].s);
            bad++;
        }
    }
    if (bad)
        fail_msg("%d wrong results with err == NULL", bad);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(parse_valid_forms),
        cmocka_unit_test(parse_rejects_bad_syntax),
        cmocka_unit_test(parse_rejects_out_of_range),
        cmocka_unit_test(parse_ignores_insignificant_zeros),
        cmocka_unit_test(to_units_exact_and_round_up),
        cmocka_unit_test(to_units_overflow),
        cmocka_unit_test(equal_values_compare_equal),
        cmocka_unit_test(cpu_milli),
        cmocka_unit_test(mem_mib),
        cmocka_unit_test(gpu_core_pct),
        cmocka_unit_test(gpu_mem_mib),
        cmocka_unit_test(helpers_fail_without_err),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
