/* tests/unit/test_log.c - the klog line (src/net/log.c): its header, one
 * line per message whatever the message holds, and what each --v and
 * --log-level shows, which every binary takes from here. */
#include <errno.h>
#include <regex.h>
#include <stdlib.h>

#include "testutil.h"
#include "egpu/log.h"

/* What egpu_log wrote while fn ran, one malloc'd string (caller frees). */
struct capture {
    char *text;
    size_t len;
    FILE *f;
};

static void capture_start(struct capture *c)
{
    c->text = NULL;
    c->len = 0;
    c->f = open_memstream(&c->text, &c->len);
    assert_non_null(c->f);
    egpu_log_set_stream(c->f);
    egpu_log_set_component("egpu-test");
}

static char *capture_end(struct capture *c)
{
    egpu_log_set_stream(NULL);
    fclose(c->f);
    return c->text;
}

static size_t count_lines(const char *s)
{
    size_t n = 0;

    for (; *s != '\0'; s++)
        n += *s == '\n';
    return n;
}

/* klog's header: severity, mmdd, hh:mm:ss.uuuuuu, the thread id right
 * aligned in 7 columns, file:line] - then our component. */
static void assert_klog_line(const char *line, char severity, const char *msg)
{
    char pattern[512];
    regex_t re;
    int rc;

    snprintf(pattern, sizeof(pattern),
             "^%c(0[1-9]|1[0-2])(0[1-9]|[12][0-9]|3[01]) ([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]"
             "\\.[0-9]{6} [ 0-9]{6}[0-9] test_log\\.c:[0-9]+\\] egpu-test: %s\n$",
             severity, msg);
    assert_int_equal(regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB), 0);
    rc = regexec(&re, line, 0, NULL, 0);
    regfree(&re);
    if (rc != 0)
        fail_msg("not a klog line with %c and \"%s\": %s", severity, msg, line);
}

static void test_line_is_klog(void **state)
{
    struct capture c;
    char *text;
    int saved = egpu_log_level;

    (void)state;
    egpu_log_level = EGPU_LOG_V_MAX;
    capture_start(&c);
    egpu_log(EGPU_LOG_INFO, "placed pod=%s node=%s", "ns/a", "gpu-1");
    text = capture_end(&c);
    assert_klog_line(text, 'I', "placed pod=ns/a node=gpu-1");
    free(text);
    /* Only E, W and I: klog has no letter for verbosity, so debug is I too. */
    {
        static const struct {
            int level;
            char letter;
        } want[] = {{EGPU_LOG_ERROR, 'E'},
                    {EGPU_LOG_WARN, 'W'},
                    {EGPU_LOG_NOTICE, 'I'},
                    {EGPU_LOG_INFO, 'I'},
                    {EGPU_LOG_DEBUG, 'I'}};

        for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
            capture_start(&c);
            egpu_log(want[i].level, "x=%zu", i);
            text = capture_end(&c);
            assert_int_equal(text[0], want[i].letter);
            free(text);
        }
    }
    egpu_log_level = saved;
}

/* Which of the five levels a verbosity writes, as a string of letters
 * e (error), w (warn), n (notice), i (info), d (debug). */
static void shown(int level, char *out)
{
    static const struct {
        int level;
        char c;
    } levels[] = {{EGPU_LOG_ERROR, 'e'},
                  {EGPU_LOG_WARN, 'w'},
                  {EGPU_LOG_NOTICE, 'n'},
                  {EGPU_LOG_INFO, 'i'},
                  {EGPU_LOG_DEBUG, 'd'}};
    int saved = egpu_log_level;
    struct capture c;
    char *text, *p;

    egpu_log_level = level;
    capture_start(&c);
    for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++)
        egpu_log(levels[i].level, "level=%c", levels[i].c);
    text = capture_end(&c);
    egpu_log_level = saved;
    p = out;
    for (const char *at = text; (at = strstr(at, "level=")) != NULL; at += 7)
        *p++ = at[6];
    *p = '\0';
    free(text);
}

/* --v N is klog's verbosity: errors and warnings always, 0 the operator's
 * lines, 2 the events, 4 debugging, the numbers between as the one
 * below; --log-level names the same levels. */
static void test_verbosity_levels(void **state)
{
    static const char *const want_v[EGPU_LOG_V_MAX + 1] = {"ewn",   "ewn",   "ewni",  "ewni",
                                                           "ewnid", "ewnid", "ewnid", "ewnid",
                                                           "ewnid", "ewnid", "ewnid"};
    static const char *const names[][2] = {
        {"error", "e"}, {"warn", "ew"}, {"info", "ewni"}, {"debug", "ewnid"}};
    char arg[8], got[8];
    int level, v2, v4;

    (void)state;
    for (int v = 0; v <= EGPU_LOG_V_MAX; v++) {
        snprintf(arg, sizeof(arg), "%d", v);
        assert_int_equal(egpu_log_parse_v(arg, &level), 0);
        shown(level, got);
        if (strcmp(got, want_v[v]) != 0)
            fail_msg("--v %d shows \"%s\", want \"%s\"", v, got, want_v[v]);
    }
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        assert_int_equal(egpu_log_parse_level(names[i][0], &level), 0);
        shown(level, got);
        if (strcmp(got, names[i][1]) != 0)
            fail_msg("--log-level %s shows \"%s\", want \"%s\"", names[i][0], got, names[i][1]);
    }
    /* info and debug are --v 2 and --v 4 exactly; the default is --v 2. */
    assert_int_equal(egpu_log_parse_level("info", &level), 0);
    assert_int_equal(egpu_log_parse_v("2", &v2), 0);
    assert_int_equal(level, v2);
    assert_int_equal(egpu_log_parse_level("debug", &level), 0);
    assert_int_equal(egpu_log_parse_v("4", &v4), 0);
    assert_int_equal(level, v4);
    assert_int_equal(egpu_log_level, v2);
}

static void test_parse_refuses(void **state)
{
    static const char *const bad_v[] = {"11", "-1", "", "4x", " 4", "+4", "v4", "99999999999"};
    static const char *const bad_level[] = {"1", "3", "verbose", "INFO", "notice", "", "debug "};
    int level = 12345;

    (void)state;
    for (size_t i = 0; i < sizeof(bad_v) / sizeof(bad_v[0]); i++)
        assert_int_equal(egpu_log_parse_v(bad_v[i], &level), -EINVAL);
    assert_int_equal(egpu_log_parse_v(NULL, &level), -EINVAL);
    for (size_t i = 0; i < sizeof(bad_level) / sizeof(bad_level[0]); i++)
        assert_int_equal(egpu_log_parse_level(bad_level[i], &level), -EINVAL);
    assert_int_equal(egpu_log_parse_level(NULL, &level), -EINVAL);
    assert_int_equal(level, 12345); /* untouched on error */
}

/* A pod owner's text with a newline cannot forge a line: control
 * characters are escaped and the message stays one line. */
static void test_message_never_spans_lines(void **state)
{
    struct capture c;
    char *text;

    (void)state;
    capture_start(&c);
    egpu_log(EGPU_LOG_INFO, "denied message=\"%s\"",
             "a\nE1122 03:15:04.123456      77 x.c:1] forged\r\ttab \x1b[31mred\x7f");
    text = capture_end(&c);
    assert_int_equal(count_lines(text), 1);
    assert_klog_line(text, 'I',
                     "denied message=\"a\\\\nE1122 03:15:04\\.123456      77 x\\.c:1\\] "
                     "forged\\\\r\\\\ttab \\\\x1b\\[31mred\\\\x7f\"");
    free(text);
}

/* A message longer than a line is cut, never inside an escape, and the
 * line still ends with its newline. */
static void test_long_message_cut(void **state)
{
    static char big[5000];
    struct capture c;
    char *text, *body;
    size_t n;

    (void)state;
    memset(big, '\n', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    capture_start(&c);
    egpu_log(EGPU_LOG_WARN, "m=%s", big);
    text = capture_end(&c);
    n = strlen(text);
    assert_int_equal(count_lines(text), 1);
    assert_int_equal(text[n - 1], '\n');
    body = strstr(text, "] egpu-test: m=") + strlen("] egpu-test: m=");
    /* only whole "\n" escapes: an even number of bytes, each pair \ and n */
    assert_int_equal((text + n - 1 - body) % 2, 0);
    for (char *p = body; p < text + n - 1; p += 2)
        assert_true(p[0] == '\\' && p[1] == 'n');
    assert_true(n <= 3072);
    free(text);
}

/* A hidden level evaluates none of its arguments. */
static void test_hidden_level_evaluates_nothing(void **state)
{
    int calls = 0, saved = egpu_log_level;

    (void)state;
    egpu_log_level = EGPU_LOG_INFO;
    egpu_log(EGPU_LOG_DEBUG, "n=%d", ++calls);
    assert_int_equal(calls, 0);
    egpu_log_level = saved;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_line_is_klog),
        cmocka_unit_test(test_verbosity_levels),
        cmocka_unit_test(test_parse_refuses),
        cmocka_unit_test(test_message_never_spans_lines),
        cmocka_unit_test(test_long_message_cut),
        cmocka_unit_test(test_hidden_level_evaluates_nothing),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
