/* tests/unit/test_cli.c - strict flag value parsing shared by the binaries. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "testutil.h"
#include "egpu/cli.h"

static void test_u64(void **state)
{
    uint64_t v = 7;

    (void)state;
    assert_int_equal(egpu_cli_parse_u64("42", 0, 100, &v), 0);
    assert_int_equal(v, 42);
    assert_int_equal(egpu_cli_parse_u64("18446744073709551615", 0, UINT64_MAX, &v), 0);
    assert_true(v == UINT64_MAX);
    v = 7;
    /* Partial, signed, spaced, empty, out of range and overflowing values
     * are refused and leave *out alone. */
    const char *bad[] = {"", "12x", " 12", "-1", "+1", "101", "18446744073709551616", "0x10"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(egpu_cli_parse_u64(bad[i], 0, 100, &v), -EINVAL);
    assert_int_equal(egpu_cli_parse_u64(NULL, 0, 100, &v), -EINVAL);
    assert_int_equal(v, 7);
    assert_int_equal(egpu_cli_parse_u64("0", 1, 5, &v), -EINVAL);
}

static void test_double_and_bool(void **state)
{
    double d = -1;
    bool b = false;

    (void)state;
    assert_int_equal(egpu_cli_parse_double("1.3", 0.01, 100, &d), 0);
    assert_true(fabs(d - 1.3) < 1e-12);
    assert_int_equal(egpu_cli_parse_double("1e-9", 1e-9, 1, &d), 0);
    assert_int_equal(egpu_cli_parse_double("", 0, 1, &d), -EINVAL);
    assert_int_equal(egpu_cli_parse_double("0.5x", 0, 1, &d), -EINVAL);
    assert_int_equal(egpu_cli_parse_double("nan", 0, 1, &d), -EINVAL);
    assert_int_equal(egpu_cli_parse_double("2", 0, 1, &d), -EINVAL);
    assert_int_equal(egpu_cli_parse_bool("true", &b), 0);
    assert_true(b);
    assert_int_equal(egpu_cli_parse_bool("0", &b), 0);
    assert_false(b);
    assert_int_equal(egpu_cli_parse_bool("yes", &b), -EINVAL);
    assert_int_equal(egpu_cli_parse_bool("TRUE", &b), -EINVAL);
}

struct seen {
    char port[16];
    char who[32];
    int calls;
};

static int record(void *ctx, int opt, const char *value, const char *who)
{
    struct seen *s = ctx;

    (void)opt;
    if (strcmp(value, "bad") == 0)
        return egpu_cli_usage_error("t", "%s: bad value", who);
    snprintf(s->port, sizeof(s->port), "%s", value);
    snprintf(s->who, sizeof(s->who), "%s", who);
    s->calls++;
    return 0;
}

/* The shared driver: a variable applies, a flag wins over it, help and the
 * version answer 0, bad usage answers 2. */
/* The HTTP server flags both server binaries take: one range check and one
 * message for each. */
static void test_http_limit(void **state)
{
    unsigned v = 7;

    (void)state;
    assert_int_equal(egpu_cli_http_limit("p", "--max-connections", "65536", false, &v), 0);
    assert_int_equal(v, 65536);
    assert_int_equal(egpu_cli_http_limit("p", "--idle-timeout", "3600", true, &v), 0);
    assert_int_equal(v, 3600);
    assert_int_equal(egpu_cli_http_limit("p", "--idle-timeout", "3601", true, &v), 2);
    assert_int_equal(egpu_cli_http_limit("p", "--max-per-client", "0", false, &v), 2);
    assert_int_equal(egpu_cli_http_limit("p", "--max-per-client", "65537", false, &v), 2);
    assert_int_equal(egpu_cli_http_limit("p", "EGPU_REQUEST_TIMEOUT", "1s", true, &v), 2);
    assert_int_equal(v, 3600);
}

static void test_parse_driver(void **state)
{
    static const struct option longopts[] = {
        {"port", required_argument, NULL, 300},
        {"version", no_argument, NULL, 301},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    static const struct egpu_cli_env env[] = {{"EGPU_TEST_PORT", 300}};
    char a0[] = "t", a1[] = "--port", a2[] = "9", a3[] = "extra", a4[] = "--nope", a5[] = "bad",
         a6[] = "--version";
    struct seen s;

    (void)state;
    memset(&s, 0, sizeof(s));
    setenv("EGPU_TEST_PORT", "7", 1);
    {
        char *argv[] = {a0, NULL};

        assert_int_equal(egpu_cli_parse(1, argv, longopts, 301, env, 1, "t", "1", "", record, &s),
                         -1);
        assert_string_equal(s.port, "7");
        assert_string_equal(s.who, "EGPU_TEST_PORT");
    }
    {
        char *argv[] = {a0, a1, a2, NULL};

        assert_int_equal(egpu_cli_parse(3, argv, longopts, 301, env, 1, "t", "1", "", record, &s),
                         -1);
        assert_string_equal(s.port, "9");
        assert_string_equal(s.who, "--port");
    }
    unsetenv("EGPU_TEST_PORT");
    {
        char *argv[] = {a0, a3, NULL};

        assert_int_equal(egpu_cli_parse(2, argv, longopts, 301, env, 1, "t", "1", "", record, &s),
                         2);
    }
    {
        char *argv[] = {a0, a4, NULL};

        assert_int_equal(egpu_cli_parse(2, argv, longopts, 301, env, 1, "t", "1", "", record, &s),
                         2);
    }
    {
        char *argv[] = {a0, a1, a5, NULL};

        assert_int_equal(egpu_cli_parse(3, argv, longopts, 301, env, 1, "t", "1", "", record, &s),
                         2);
    }
    {
        char *argv[] = {a0, a6, NULL};

        assert_int_equal(egpu_cli_parse(2, argv, longopts, 301, env, 1, "t", "1", "", record, &s),
                         0);
    }
    {
        char *argv[] = {a0, a1, NULL};

        /* --port without its value. */
        assert_int_equal(egpu_cli_parse(2, argv, longopts, 301, env, 1, "t", "1", "", record, &s),
                         2);
    }
    assert_int_equal(s.calls, 3); /* the variable, then the variable and the flag */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_u64),
        cmocka_unit_test(test_double_and_bool),
        cmocka_unit_test(test_parse_driver),
        cmocka_unit_test(test_http_limit),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
