/* tests/unit/test_api_dra.c - DRA mode's claims (src/api/dra.c): CEL
 * quoting of hostile text, the model selector, the ResourceClaimSpec of
 * each kind of ask, and template names made from the spec's content.
 *
 * That a quoted string stays one literal under a real CEL parser is shown
 * by tests/integration/test_dra_cel.py; here the exact text is pinned.
 * Objects are written with ' for " (tu_json() swaps them). */
#include "testutil.h"
#include "testjson.h"

#include <errno.h>
#include <jansson.h>

#include "egpu/api.h"

static void check_quote(const char *in, size_t len, const char *want)
{
    struct egpu_error err = {0};
    char *out = NULL;
    int rc = egpu_api_cel_quote(in, len, &out, &err);

    if (rc != 0)
        fail_msg("quote of %zu bytes: %d %s", len, rc, err.msg);
    assert_string_equal(out, want);
    for (const char *p = out; *p; p++) /* printable ASCII only */
        assert_true(*p >= 0x20 && *p < 0x7f);
    egpu_free(out);
}

#define QUOTE(lit, want) check_quote(lit, sizeof(lit) - 1, want)

static void test_quote_plain_and_hostile(void **state)
{
    (void)state;
    QUOTE("A100-SXM4-80GB", "\"A100-SXM4-80GB\"");
    QUOTE("", "\"\"");
    QUOTE("\"", "\"\\\"\"");
    QUOTE("\\", "\"\\\\\"");
    QUOTE("a\nb", "\"a\\nb\"");
    QUOTE("\r\t", "\"\\r\\t\"");
    /* The classic injection: the quotes stay escaped, the whole is one literal. */
    QUOTE("\" || true || \"", "\"\\\" || true || \\\"\"");
    /* An escaped backslash before a quote cannot unescape it. */
    QUOTE("\\\" || true || \\\"", "\"\\\\\\\" || true || \\\\\\\"\"");
    QUOTE("'", "\"'\"");
    QUOTE("\x01\x1f\x7f", "\"\\x01\\x1F\\x7F\"");
    QUOTE("a\0b", "\"a\\x00b\"");
    QUOTE("`${x}`", "\"`${x}`\"");
}

static void test_quote_unicode(void **state)
{
    (void)state;
    QUOTE("\xc3\xa9", "\"\\u00E9\"");                        /* é, U+00E9 */
    QUOTE("\xe6\x97\xa5\xe6\x9c\xac", "\"\\u65E5\\u672C\""); /* 日本 */
    QUOTE("\xf0\x9f\x98\x80", "\"\\U0001F600\"");            /* U+1F600 */
    QUOTE("\xef\xbc\x82", "\"\\uFF02\"");                    /* a fullwidth quote is not a quote */
    QUOTE("\xe2\x80\xa8", "\"\\u2028\"");                    /* line separator */
    QUOTE("\xf4\x8f\xbf\xbf", "\"\\U0010FFFF\"");            /* the last code point */
}

static void check_bad_utf8(const char *in, size_t len, size_t at)
{
    struct egpu_error err = {0};
    char *out = (char *)"untouched";
    char want[64];

    assert_int_equal(egpu_api_cel_quote(in, len, &out, &err), EGPU_ESYNTAX);
    assert_string_equal(out, "untouched");
    snprintf(want, sizeof(want), "byte %zu (0x%02X) of the text is not valid UTF-8", at,
             (unsigned char)in[at]);
    if (strstr(err.msg, want) == NULL || strstr(err.msg, "allowed: UTF-8 text") == NULL)
        fail_msg("message \"%s\" lacks \"%s\"", err.msg, want);
}

#define BAD(lit, at) check_bad_utf8(lit, sizeof(lit) - 1, at)

static void test_quote_refuses_invalid_utf8(void **state)
{
    (void)state;
    BAD("\xff", 0);
    BAD("ab\x80", 2);           /* a lone continuation byte */
    BAD("\xc0\xaf", 0);         /* overlong '/' */
    BAD("\xe0\x80\xa2", 0);     /* overlong '"' */
    BAD("x\xed\xa0\x80", 1);    /* a surrogate */
    BAD("\xf4\x90\x80\x80", 0); /* past U+10FFFF */
    BAD("\xe6\x97", 0);         /* cut short */
    BAD("\xc3\x22 || true", 0); /* a quote swallowed as a continuation byte */
}

static void test_quote_length(void **state)
{
    static char big[EGPU_API_CEL_TEXT_MAX + 1];
    struct egpu_error err = {0};
    char *out = NULL;

    (void)state;
    memset(big, '"', sizeof(big));
    assert_int_equal(egpu_api_cel_quote(big, sizeof(big), &out, &err), EGPU_ERANGE);
    assert_null(out);
    assert_non_null(strstr(err.msg, "at most 1024 bytes"));
    /* The worst case at the limit fits: every byte escaped. */
    assert_int_equal(egpu_api_cel_quote(big, EGPU_API_CEL_TEXT_MAX, &out, &err), 0);
    assert_int_equal(strlen(out), 2 * EGPU_API_CEL_TEXT_MAX + 2);
    egpu_free(out);
}

#define ATTR "device.attributes[\"gpu.elasticgpu.io\"].productName"

static void test_model_selector(void **state)
{
    struct egpu_error err = {0};
    char *out = NULL;

    (void)state;
    assert_int_equal(egpu_api_dra_model_selector("A100|H100", &out, &err), 0);
    assert_string_equal(out, "has(" ATTR ") && " ATTR " in [\"A100\", \"H100\"]");
    egpu_free(out);
    /* '|' separates models, so the classic "] || true || [" names empty ones
     * (refused below); without bars, the quotes stay escaped. */
    assert_int_equal(egpu_api_dra_model_selector("\"] + [true] + [\"", &out, &err), 0);
    assert_string_equal(out, "has(" ATTR ") && " ATTR " in [\"\\\"] + [true] + [\\\"\"]");
    egpu_free(out);
    out = NULL;
    assert_int_equal(egpu_api_dra_model_selector("\"] || true || [\"", &out, &err), EGPU_ERANGE);
    out = NULL;
    /* A model past the API's 64 bytes is cut as the slice's attribute is:
     * at 64 bytes, or before the character that straddles them. */
#define D60 "012345678901234567890123456789012345678901234567890123456789"
    assert_int_equal(
        egpu_api_dra_model_selector(D60 "0123XYZ|" D60 "012\xc3\xa9|" D60 "01\xc3\xa9", &out, &err),
        0);
    assert_string_equal(out, "has(" ATTR ") && " ATTR " in [\"" D60 "0123\", \"" D60 "012\", \"" D60
                             "01\\u00E9\"]");
    egpu_free(out);
    out = NULL;
    assert_int_equal(egpu_api_dra_model_selector("", &out, &err), EGPU_ERANGE);
    assert_non_null(strstr(err.msg, "annotation elasticgpu.io/gpu-model is empty"));
    assert_int_equal(egpu_api_dra_model_selector("A100||H100", &out, &err), EGPU_ERANGE);
    assert_non_null(strstr(err.msg, "names an empty model"));
    assert_int_equal(egpu_api_dra_model_selector("A100|\xff", &out, &err), EGPU_ESYNTAX);
    assert_non_null(strstr(err.msg, "annotation elasticgpu.io/gpu-model: byte 0 (0xFF)"));
    assert_null(out);
}

static void check_spec(int64_t core, int64_t mem, bool has_mem, const char *models,
                       const char *want)
{
    struct egpu_api_gpu_ask ask = {.core_pct = core, .mem_mib = mem, .has_mem = has_mem};
    struct egpu_error err = {0};
    json_t *spec = NULL, *w = tu_json(want);

    if (egpu_api_dra_claim_spec(&ask, models, &spec, &err) != 0)
        fail_msg("spec of core %lld: %s", (long long)core, err.msg);
    if (!json_equal(spec, w)) {
        char *got = json_dumps(spec, JSON_SORT_KEYS);

        fail_msg("core %lld mem %lld: got %s", (long long)core, (long long)mem, got);
    }
    json_decref(spec);
    json_decref(w);
}

static void test_claim_spec_shapes(void **state)
{
    (void)state;
    check_spec(30, 4096, true, NULL,
               "{'devices': {'requests': [{'name': 'gpu', 'exactly': {"
               "'deviceClassName': 'gpu-share.elasticgpu.io', 'allocationMode': 'ExactCount',"
               "'count': 1, 'capacity': {'requests': {'cores': '30', 'memory': '4096Mi'}}}}]}}");
    check_spec(99, 0, false, "",
               "{'devices': {'requests': [{'name': 'gpu', 'exactly': {"
               "'deviceClassName': 'gpu-share.elasticgpu.io', 'allocationMode': 'ExactCount',"
               "'count': 1, 'capacity': {'requests': {'cores': '99'}}}}]}}");
    check_spec(100, 0, false, NULL,
               "{'devices': {'requests': [{'name': 'gpu', 'exactly': {"
               "'deviceClassName': 'gpu.elasticgpu.io', 'allocationMode': 'ExactCount',"
               "'count': 1}}]}}");
    check_spec(300, 0, false, "H100",
               "{'devices': {'requests': [{'name': 'gpu', 'exactly': {"
               "'deviceClassName': 'gpu.elasticgpu.io', 'allocationMode': 'ExactCount',"
               "'count': 3, 'selectors': [{'cel': {'expression': "
               "'has(device.attributes[\\'gpu.elasticgpu.io\\'].productName) && "
               "device.attributes[\\'gpu.elasticgpu.io\\'].productName in [\\'H100\\']'}}]}}],"
               "'constraints': [{'requests': ['gpu'], "
               "'distinctAttribute': 'gpu.elasticgpu.io/uuid'}]}}");
}

static void check_spec_refused(int64_t core, int64_t mem, bool has_mem, const char *models,
                               int code, const char *part)
{
    struct egpu_api_gpu_ask ask = {.core_pct = core, .mem_mib = mem, .has_mem = has_mem};
    struct egpu_error err = {0};
    json_t *spec = NULL;

    assert_int_equal(egpu_api_dra_claim_spec(&ask, models, &spec, &err), code);
    assert_null(spec);
    if (strstr(err.msg, part) == NULL)
        fail_msg("message \"%s\" lacks \"%s\"", err.msg, part);
}

static void test_claim_spec_refused(void **state)
{
    (void)state;
    check_spec_refused(0, 0, false, NULL, EGPU_ERANGE, "elasticgpu.io/gpu-core is 0; allowed");
    check_spec_refused(150, 0, false, NULL, EGPU_ERANGE, "gpu-core is 150");
    check_spec_refused(3300, 0, false, NULL, EGPU_ERANGE, "at most 32 cards");
    check_spec_refused(200, 1024, true, NULL, EGPU_ERANGE, "gpu-memory is 1024");
    check_spec_refused(30, 0, true, NULL, EGPU_ERANGE, "gpu-memory is 0");
    check_spec_refused(30, 1, true, "\xc0\xaf", EGPU_ESYNTAX, "not valid UTF-8");
}

static void name_of(const char *text, char out[EGPU_API_DRA_TEMPLATE_NAME_MAX])
{
    struct egpu_error err = {0};
    json_t *o = tu_json(text);

    assert_int_equal(egpu_api_dra_template_name(o, out, &err), 0);
    json_decref(o);
}

/* The agent's model attribute and the selector's match cut at the same
 * place: the API's 64 bytes, never inside a UTF-8 character. */
static void test_attr_len(void **state)
{
    char s[80];

    (void)state;
    assert_int_equal(egpu_api_dra_attr_len("H100", 4), 4);
    memset(s, 'a', 64);
    assert_int_equal(egpu_api_dra_attr_len(s, 64), 64);
    memset(s, 'a', sizeof(s));
    assert_int_equal(egpu_api_dra_attr_len(s, sizeof(s)), 64);
    /* "é" (0xC3 0xA9) at bytes 63..64: the cut ends before it */
    memset(s, 'a', sizeof(s));
    s[63] = (char)0xC3;
    s[64] = (char)0xA9;
    assert_int_equal(egpu_api_dra_attr_len(s, sizeof(s)), 63);
    /* a 3-byte character at 62..64 */
    memset(s, 'a', sizeof(s));
    s[62] = (char)0xE2;
    s[63] = (char)0x82;
    s[64] = (char)0xAC;
    assert_int_equal(egpu_api_dra_attr_len(s, sizeof(s)), 62);
}

static void test_template_name(void **state)
{
    char a[EGPU_API_DRA_TEMPLATE_NAME_MAX], b[EGPU_API_DRA_TEMPLATE_NAME_MAX];
    struct egpu_api_gpu_ask ask = {.core_pct = 30, .mem_mib = 4096, .has_mem = true};
    struct egpu_error err = {0};
    json_t *spec = NULL, *arr = json_array();

    (void)state;
    /* Pinned: SHA-256 of the sorted compact text (Python's json.dumps with
     * sort_keys and separators (',', ':') makes the same text). */
    assert_int_equal(egpu_api_dra_claim_spec(&ask, NULL, &spec, &err), 0);
    assert_int_equal(egpu_api_dra_template_name(spec, a, &err), 0);
    assert_string_equal(a, "egpu-5f75388cac51c537165fcf027a25a102");
    assert_int_equal(strlen(a), EGPU_API_DRA_TEMPLATE_NAME_MAX - 1);
    json_decref(spec);
    /* Key order does not matter, content does. */
    name_of("{'devices': {'requests': [{'name': 'gpu', 'exactly': {'count': 1, "
            "'capacity': {'requests': {'memory': '4096Mi', 'cores': '30'}}, "
            "'allocationMode': 'ExactCount', 'deviceClassName': 'gpu-share.elasticgpu.io'}}]}}",
            b);
    assert_string_equal(a, b);
    name_of("{'devices': {'requests': [{'name': 'gpu', 'exactly': {'count': 1, "
            "'capacity': {'requests': {'memory': '4096Mi', 'cores': '31'}}, "
            "'allocationMode': 'ExactCount', 'deviceClassName': 'gpu-share.elasticgpu.io'}}]}}",
            b);
    assert_string_not_equal(a, b);
    for (size_t i = 5; i < strlen(b); i++)
        assert_non_null(strchr("0123456789abcdef", b[i]));
    assert_int_equal(egpu_api_dra_template_name(arr, a, &err), EGPU_ESYNTAX);
    json_decref(arr);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quote_plain_and_hostile),
        cmocka_unit_test(test_quote_unicode),
        cmocka_unit_test(test_quote_refuses_invalid_utf8),
        cmocka_unit_test(test_quote_length),
        cmocka_unit_test(test_model_selector),
        cmocka_unit_test(test_claim_spec_shapes),
        cmocka_unit_test(test_claim_spec_refused),
        cmocka_unit_test(test_attr_len),
        cmocka_unit_test(test_template_name),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
