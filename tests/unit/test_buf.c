/* tests/unit/test_buf.c - bounded buffers (the log line is test_log.c's). */
#include <errno.h>
#include <stdlib.h>

#include "testutil.h"

static void test_append_and_bound(void **state)
{
    struct egpu_buf b;
    long live = egpu_alloc_live();
    char big[300];

    (void)state;
    egpu_buf_init(&b, 10);
    assert_string_equal(egpu_buf_str(&b), "");
    assert_int_equal(egpu_buf_append(&b, "hello", 5), 0);
    assert_int_equal(egpu_buf_printf(&b, "%d", 1234), 0);
    assert_string_equal(egpu_buf_str(&b), "hello1234");
    /* One more byte fits (10), two do not: the buffer is left as it was. */
    assert_int_equal(egpu_buf_append(&b, "xy", 2), -EMSGSIZE);
    assert_int_equal(egpu_buf_printf(&b, "%s", "xy"), -EMSGSIZE);
    assert_string_equal(egpu_buf_str(&b), "hello1234");
    assert_int_equal(egpu_buf_append(&b, "!", 1), 0);
    assert_int_equal(b.len, 10);
    assert_true(b.cap <= 11);
    egpu_buf_reset(&b);
    assert_string_equal(egpu_buf_str(&b), "");
    egpu_buf_free(&b);
    /* Growth past the first allocation keeps every byte. */
    memset(big, 'a', sizeof(big));
    egpu_buf_init(&b, 4096);
    for (int i = 0; i < 10; i++)
        assert_int_equal(egpu_buf_append(&b, big, sizeof(big)), 0);
    assert_int_equal(b.len, 3000);
    assert_int_equal(strspn(egpu_buf_str(&b), "a"), 3000);
    egpu_buf_free(&b);
    assert_int_equal(egpu_alloc_live(), live);
}

static void test_out_of_memory_and_take(void **state)
{
    struct egpu_buf b;
    long live = egpu_alloc_live();
    char *s;

    (void)state;
    egpu_buf_init(&b, 1 << 20);
    egpu_alloc_fail_after(1);
    assert_int_equal(egpu_buf_append(&b, "abc", 3), -ENOMEM);
    assert_int_equal(b.len, 0);
    assert_int_equal(egpu_buf_append(&b, "abc", 3), 0);
    s = egpu_buf_take(&b);
    assert_string_equal(s, "abc");
    assert_null(b.data);
    assert_int_equal(b.len, 0);
    egpu_free(s);
    assert_null(egpu_buf_take(&b));
    assert_int_equal(egpu_alloc_live(), live);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_append_and_bound),
        cmocka_unit_test(test_out_of_memory_and_take),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
