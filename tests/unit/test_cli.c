/* tests/unit/test_cli.c - strict flag value parsing shared by the binaries. */
#include <errno.h>
#include <math.h>

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_u64),
        cmocka_unit_test(test_double_and_bool),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
