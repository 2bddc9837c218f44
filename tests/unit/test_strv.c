/* tests/unit/test_strv.c - arrays of C strings (src/core/strv.c): a copy is
 * one allocation holding equal strings at new addresses; equality compares
 * contents, position by position. */
#include <string.h>

#include "testutil.h"

static void copy_is_one_block_of_equal_strings(void **state)
{
    const char *v[] = {"gpu-node-1", "", "n\"3", "gpu-node-22"};
    const long live = egpu_alloc_live();
    const char **c = egpu_strv_copy(v, 4);

    (void)state;
    assert_non_null(c);
    assert_int_equal(egpu_alloc_live(), live + 1);
    for (int i = 0; i < 4; i++) {
        assert_string_equal(c[i], v[i]);
        assert_ptr_not_equal(c[i], v[i]);
    }
    assert_true(egpu_strv_equal(c, v, 4));
    egpu_free(c);
    assert_int_equal(egpu_alloc_live(), live);
    c = egpu_strv_copy(v, 0);
    assert_non_null(c);
    egpu_free(c);
}

static void equal_compares_every_position(void **state)
{
    const char *a[] = {"a", "b", "c"};
    const char *b[] = {"a", "b", "d"};
    const char *swapped[] = {"b", "a", "c"};

    (void)state;
    assert_true(egpu_strv_equal(a, b, 2));
    assert_false(egpu_strv_equal(a, b, 3));
    assert_false(egpu_strv_equal(a, swapped, 3));
    assert_true(egpu_strv_equal(a, swapped, 0));
}

static void copy_out_of_memory(void **state)
{
    const char *v[] = {"x", "y"};

    (void)state;
    egpu_alloc_fail_after(1);
    assert_null(egpu_strv_copy(v, 2));
    egpu_alloc_fail_after(0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(copy_is_one_block_of_equal_strings),
        cmocka_unit_test(equal_compares_every_position),
        cmocka_unit_test(copy_out_of_memory),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
