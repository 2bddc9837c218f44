/* tests/unit/test_error.c - the error record of src/core/error.c:
 * egpu_error_set, egpu_error_errno (a failed system call's -errno and its
 * text) and egpu_error_prefix. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "egpu/core.h"
#include "testutil.h"

/* A failed open: the code is its -errno, the text ends with strerror's. */
static void test_errno_of_a_failed_call(void **state)
{
    struct egpu_error err = {0};
    int rc;

    (void)state;
    errno = 0;
    rc = open("/nonexistent/egpu-test", O_RDONLY);
    assert_int_equal(rc, -1);
    rc = egpu_error_errno(&err, "open %s", "/nonexistent/egpu-test");
    assert_int_equal(rc, -ENOENT);
    assert_int_equal(err.code, -ENOENT);
    assert_string_equal(err.msg, "open /nonexistent/egpu-test: No such file or directory");
}

/* errno is read before the message is formatted, and 0 is no success. */
static void test_errno_kept_and_never_zero(void **state)
{
    struct egpu_error err = {0};

    (void)state;
    errno = EACCES;
    assert_int_equal(egpu_error_errno(&err, "%s", "x"), -EACCES);
    assert_string_equal(err.msg, "x: Permission denied");
    errno = 0;
    assert_int_equal(egpu_error_errno(&err, "stat %d", 3), -EIO);
    assert_string_equal(err.msg, "stat 3: Input/output error");
    errno = ENOENT;
    assert_int_equal(egpu_error_errno(NULL, "no record"), -ENOENT);
}

/* A message that fills the record leaves no room for the text, and is
 * never overrun. */
static void test_errno_long_message(void **state)
{
    struct egpu_error err = {0};
    char big[EGPU_ERRMSG_MAX + 32];

    (void)state;
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    errno = ENOENT;
    assert_int_equal(egpu_error_errno(&err, "%s", big), -ENOENT);
    assert_int_equal(strlen(err.msg), EGPU_ERRMSG_MAX - 1);
    memset(big, 'b', EGPU_ERRMSG_MAX - 8);
    big[EGPU_ERRMSG_MAX - 8] = '\0';
    errno = ENOENT;
    egpu_error_errno(&err, "%s", big);
    assert_int_equal(strlen(err.msg), EGPU_ERRMSG_MAX - 1); /* the text, cut to fit */
    assert_memory_equal(err.msg + EGPU_ERRMSG_MAX - 8, ": No s", 6);
}

/* set and prefix, which errno's helper sits beside. */
static void test_set_and_prefix(void **state)
{
    struct egpu_error err = {0};

    (void)state;
    assert_int_equal(egpu_error_set(&err, EGPU_ERANGE, "core %d", 150), EGPU_ERANGE);
    assert_string_equal(err.msg, "core 150");
    assert_int_equal(egpu_error_prefix(&err, EGPU_ERANGE, "container \"%s\"", "c"), EGPU_ERANGE);
    assert_string_equal(err.msg, "container \"c\": core 150");
    assert_string_equal(egpu_strerror(-ENOENT), "No such file or directory");
    assert_string_equal(egpu_strerror(EGPU_ENOFIT), "no node or card satisfies the request");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_errno_of_a_failed_call),
        cmocka_unit_test(test_errno_kept_and_never_zero),
        cmocka_unit_test(test_errno_long_message),
        cmocka_unit_test(test_set_and_prefix),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
