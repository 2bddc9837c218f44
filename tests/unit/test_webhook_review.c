/* tests/unit/test_webhook_review.c - the AdmissionReview decoder and
 * encoder (src/webhook/review.c) through the real handler: every
 * shared/k8s-wire admission fixture answered as admission_notes.md says
 * (read in place, skipped when that folder is absent), and every malformed
 * review answered with a reply the API server reads as a clear error.
 */
#include "webhook_testutil.h"

static const struct egpu_webhook_config cfg = {.set_scheduler_name = true};

/* The fixture request (example.com/vgpu: none of our names) on every route
 * but /mutate-place is answered exactly as
 * admission_review_response_allow_minimal.json: the same JSON, and the same
 * bytes as the fixture dumped compact. /mutate-place, whose pods are those
 * that ask no GPU, gives it the scheduler. */
static void test_fixture_request_allow_minimal(void **state)
{
    json_t *req = wt_wire("admission_review_request_pod_create.json");
    json_t *want = wt_wire("admission_review_response_allow_minimal.json");
    char *body = json_dumps(req, 0), *want_text = json_dumps(want, JSON_COMPACT);
    char *want_sorted = json_dumps(want, JSON_COMPACT | JSON_SORT_KEYS);

    (void)state;
    for (int r = 0; r < EGPU_WEBHOOK_ROUTES; r++) {
        struct wt_reply w = wt_run(&cfg, (enum egpu_webhook_route)r, NULL, body, strlen(body));
        char *got_sorted;

        if (r == EGPU_WEBHOOK_MUTATE_PLACE) {
            /* The fixture's pod asks no GPU of ours (example.com/vgpu):
             * /mutate-place gives it the scheduler, and nothing else. */
            assert_int_equal(w.result, EGPU_WEBHOOK_PATCHED);
            wt_assert_json(w.ops, "[{'op':'replace','path':'/spec/schedulerName','value':"
                                  "'elastic-gpu-scheduler'}]");
            wt_free(&w);
            continue;
        }
        got_sorted = json_dumps(w.doc, JSON_COMPACT | JSON_SORT_KEYS);

        assert_int_equal(w.status, 200);
        assert_true(json_equal(w.doc, want));
        assert_string_equal(w.text, want_text); /* byte for byte */
        assert_string_equal(got_sorted, want_sorted);
        assert_int_equal(w.result, EGPU_WEBHOOK_ALLOWED);
        free(got_sorted);
        wt_free(&w);
    }
    free(body);
    free(want_text);
    free(want_sorted);
    json_decref(req);
    json_decref(want);
}

/* The encoder given the fixture's patch operations and auditAnnotations
 * gives admission_review_response_patch.json exactly, base64 included. */
static void test_encode_patch_fixture(void **state)
{
    json_t *want = wt_wire("admission_review_response_patch.json");
    json_t *ops = wt_wire("admission_patch_decoded.json");
    const json_t *resp = json_object_get(want, "response");
    struct egpu__webhook_response r = {
        .allowed = true, .patch = ops, .audit = json_object_get(resp, "auditAnnotations")};
    struct egpu_buf out;
    json_t *got;

    (void)state;
    egpu_buf_init(&out, 1 << 20);
    assert_int_equal(egpu__webhook_response_encode(WT_UID, &r, &out, NULL), 0);
    got = json_loads(egpu_buf_str(&out), 0, NULL);
    assert_non_null(got);
    assert_true(json_equal(got, want));
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(got, "response"), "patch")),
        json_string_value(json_object_get(resp, "patch")));
    json_decref(got);
    json_decref(ops);
    json_decref(want);
    egpu_buf_free(&out);
}

/* A denial with the fixture's message and warning is the deny fixture. */
static void test_encode_deny_fixture(void **state)
{
    json_t *want = wt_wire("admission_review_response_deny.json");
    const json_t *resp = json_object_get(want, "response");
    const json_t *st = json_object_get(resp, "status");
    const char *warnings[] = {
        json_string_value(json_array_get(json_object_get(resp, "warnings"), 0))};
    struct egpu__webhook_response r = {.allowed = false,
                                       .code = 403,
                                       .reason = "Forbidden",
                                       .message = json_string_value(json_object_get(st, "message")),
                                       .warnings = warnings,
                                       .nwarnings = 1};
    struct egpu_buf out;
    char *a, *b;
    json_t *got;

    (void)state;
    egpu_buf_init(&out, 1 << 20);
    assert_int_equal(egpu__webhook_response_encode(WT_UID, &r, &out, NULL), 0);
    got = json_loads(egpu_buf_str(&out), 0, NULL);
    a = json_dumps(got, JSON_COMPACT | JSON_SORT_KEYS);
    b = json_dumps(want, JSON_COMPACT | JSON_SORT_KEYS);
    assert_string_equal(a, b);
    free(a);
    free(b);
    json_decref(got);
    json_decref(want);
    egpu_buf_free(&out);
}

/* Every key of a (recursively, objects only) is in b and the reverse. */
static void assert_same_keys(const json_t *a, const json_t *b, const char *where)
{
    const char *k;
    json_t *v;

    json_object_foreach((json_t *)a, k, v)
    {
        if (json_object_get(b, k) == NULL)
            fail_msg("%s: key %s only in our reply", where, k);
        if (json_is_object(v))
            assert_same_keys(v, json_object_get(b, k), k);
    }
    json_object_foreach((json_t *)b, k, v)
    {
        if (json_object_get(a, k) == NULL)
            fail_msg("%s: key %s only in the fixture", where, k);
    }
}

/* Our real denial and real patch have exactly the keys of the deny and
 * patch fixtures (the patch fixture's auditAnnotations aside: we set none). */
static void test_reply_shapes(void **state)
{
    json_t *deny = wt_wire("admission_review_response_deny.json");
    json_t *patch = wt_wire("admission_review_response_patch.json");
    struct wt_reply w;

    (void)state;
    /* a compatible name and a warning, and a bad gpu-core with a warning */
    w = wt_call(&cfg, EGPU_WEBHOOK_MUTATE, NULL,
                wt_review("CREATE", "", "v1", "Pod", "alice",
                          wt_pod("{'tencent.com/vcuda-core':'30'}", NULL, NULL), NULL));
    json_object_del(json_object_get(patch, "response"), "auditAnnotations");
    json_object_set_new(json_object_get(patch, "response"), "warnings", json_array());
    assert_same_keys(w.doc, patch, "patch");
    wt_free(&w);
    w = wt_call(&cfg, EGPU_WEBHOOK_MUTATE_NVIDIA, NULL,
                wt_review("CREATE", "", "v1", "Pod", "alice",
                          wt_pod("{'nvidia.com/gpu':'2','nvidia.com/gpumem':'1000'}", NULL, NULL),
                          NULL));
    json_object_del(json_object_get(deny, "response"), "warnings");
    assert_same_keys(w.doc, deny, "deny");
    wt_free(&w);
    json_decref(deny);
    json_decref(patch);
}

static void assert_http400(const char *body, const char *want)
{
    struct wt_reply w = wt_run(&cfg, EGPU_WEBHOOK_VALIDATE, NULL, body, strlen(body));

    assert_int_equal(w.status, 400);
    assert_int_equal(w.result, EGPU_WEBHOOK_ERROR);
    assert_string_equal(w.text, want);
    wt_free(&w);
}

/* No uid to answer: HTTP 400 with a plain-text reason. */
static void test_no_uid_http400(void **state)
{
    (void)state;
    assert_http400("", "AdmissionReview: body is not JSON: '[' or '{' expected near end of file "
                       "(line 1, column 0)\n");
    assert_http400("{\"request\":", "AdmissionReview: body is not JSON: unexpected token near "
                                    "end of file (line 1, column 11)\n");
    assert_http400("[1,2]", "AdmissionReview: not a JSON object; expected an admission.k8s.io/v1 "
                            "AdmissionReview with a request\n");
    assert_http400("{\"apiVersion\":\"admission.k8s.io/v1\"}",
                   "AdmissionReview: request: missing; expected an admission.k8s.io/v1 "
                   "AdmissionReview with a request\n");
    assert_http400("{\"request\":[]}", "AdmissionReview: request: not an object; expected an "
                                       "admission.k8s.io/v1 AdmissionReview with a request\n");
    assert_http400("{\"request\":{}}",
                   "AdmissionReview: request.uid: missing; expected a string of 1..255 bytes\n");
    assert_http400("{\"request\":{\"uid\":7}}", "AdmissionReview: request.uid: not a string; "
                                                "expected a string of 1..255 bytes\n");
    assert_http400("{\"request\":{\"uid\":\"\"}}",
                   "AdmissionReview: request.uid: empty; expected a string of 1..255 bytes\n");
    assert_http400("{\"request\":{\"uid\":\"a\\u0000b\"}}",
                   "AdmissionReview: request.uid: holds a NUL character; expected a string of "
                   "1..255 bytes\n");
}

/* A review with a uid but wrong otherwise: a 200 AdmissionReview that
 * denies with code 400 and names what was expected. */
static void assert_bad_review(const char *review_with_quotes, const char *message)
{
    json_t *doc = wt_json(review_with_quotes);
    char *body = json_dumps(doc, JSON_COMPACT);
    struct wt_reply w = wt_run(&cfg, EGPU_WEBHOOK_MUTATE, NULL, body, strlen(body));
    json_t *want = json_pack("{s:s, s:s, s:{s:s, s:b, s:{s:{}, s:s, s:s, s:s, s:i}}}", "apiVersion",
                             "admission.k8s.io/v1", "kind", "AdmissionReview", "response", "uid",
                             WT_UID, "allowed", 0, "status", "metadata", "status", "Failure",
                             "message", message, "reason", "BadRequest", "code", 400);

    assert_int_equal(w.status, 200);
    if (!json_equal(w.doc, want))
        fail_msg("got %s", w.text);
    assert_int_equal(w.result, EGPU_WEBHOOK_ERROR);
    json_decref(want);
    json_decref(doc);
    free(body);
    wt_free(&w);
}

#define REQ_HEAD \
    "{'apiVersion':'admission.k8s.io/v1','kind':'AdmissionReview','request':{'uid':'" WT_UID "'"
#define POD_KIND ",'kind':{'group':'','version':'v1','kind':'Pod'}"

static void test_bad_review_denied_400(void **state)
{
    (void)state;
    assert_bad_review("{'apiVersion':'admission.k8s.io/v1beta1','kind':'AdmissionReview',"
                      "'request':{'uid':'" WT_UID "'}}",
                      "AdmissionReview apiVersion \"admission.k8s.io/v1beta1\" is not served; "
                      "expected \"admission.k8s.io/v1\" (admissionReviewVersions: [v1])");
    assert_bad_review("{'kind':'AdmissionReview','request':{'uid':'" WT_UID "'}}",
                      "AdmissionReview apiVersion \"\" is not served; expected "
                      "\"admission.k8s.io/v1\" (admissionReviewVersions: [v1])");
    assert_bad_review("{'apiVersion':'admission.k8s.io/v1','kind':'ConversionReview',"
                      "'request':{'uid':'" WT_UID "'}}",
                      "kind \"ConversionReview\" is not served; expected \"AdmissionReview\"");
    assert_bad_review(REQ_HEAD "}}", "request.kind: missing; expected {group, version, kind}");
    assert_bad_review(REQ_HEAD ",'kind':'Pod'}}", "request.kind: expected an object, got a string");
    assert_bad_review(REQ_HEAD ",'kind':{'group':'','kind':'Pod'}}}",
                      "request.kind.version: missing; expected a string");
    assert_bad_review(REQ_HEAD POD_KIND "}}", "request.operation: missing; expected a string");
    assert_bad_review(REQ_HEAD POD_KIND ",'operation':'PATCH'}}",
                      "request.operation \"PATCH\": expected CREATE, UPDATE, DELETE or CONNECT");
    assert_bad_review(REQ_HEAD POD_KIND ",'operation':'CREATE','object':[1]}}",
                      "request.object: expected an object, got an array");
    assert_bad_review(REQ_HEAD POD_KIND ",'operation':'CREATE'}}",
                      "request.object: missing; a CREATE carries the object");
    assert_bad_review(REQ_HEAD POD_KIND ",'operation':'UPDATE','object':{}}}",
                      "request.oldObject: missing; an UPDATE carries the object before it");
    assert_bad_review(REQ_HEAD POD_KIND ",'operation':'CREATE','object':{},'dryRun':'yes'}}",
                      "request.dryRun: expected true or false");
    assert_bad_review(REQ_HEAD POD_KIND ",'operation':'CREATE','object':{},'userInfo':"
                                        "{'username':5}}}",
                      "request.userInfo.username: expected a string without NUL characters");
    assert_bad_review(REQ_HEAD POD_KIND ",'operation':'CREATE','object':{},'namespace':"
                                        "'a\\u0000b'}}",
                      "request.namespace: expected a string without NUL characters");
}

/* A NUL in a tenant's annotation value does not make a valid review a 400:
 * it is decoded and answered. */
static void test_nul_in_object_answered(void **state)
{
    struct wt_reply w;

    (void)state;
    w = wt_call(&cfg, EGPU_WEBHOOK_VALIDATE, NULL,
                wt_review("CREATE", "", "v1", "Pod", "alice",
                          wt_pod(NULL, "{'note':'a\\u0000b'}", NULL), NULL));
    wt_assert_allowed_minimal(&w);
    wt_free(&w);
}

/* DELETE (object null) and CONNECT pass on every route. */
static void test_delete_connect_allowed(void **state)
{
    const char *ops[] = {"DELETE", "CONNECT"};

    (void)state;
    for (int r = 0; r < EGPU_WEBHOOK_ROUTES; r++) {
        for (size_t i = 0; i < 2; i++) {
            struct wt_reply w =
                wt_call(&cfg, (enum egpu_webhook_route)r, NULL,
                        wt_review(ops[i], "", "v1", "Pod", "alice", NULL,
                                  wt_pod("{'elasticgpu.io/gpu-core':'150'}", NULL, NULL)));

            wt_assert_allowed_minimal(&w);
            wt_free(&w);
        }
    }
}

/* Control characters in quoted input never reach a reply or a log line. */
static void test_printable(void **state)
{
    char out[16];

    (void)state;
    egpu__webhook_printable(out, sizeof(out),
                            "a\nb\"c\x7f"
                            "d");
    assert_string_equal(out, "a?b?c?d");
    egpu__webhook_printable(out, 4, "abcdef");
    assert_string_equal(out, "abc");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixture_request_allow_minimal),
        cmocka_unit_test(test_encode_patch_fixture),
        cmocka_unit_test(test_encode_deny_fixture),
        cmocka_unit_test(test_reply_shapes),
        cmocka_unit_test(test_no_uid_http400),
        cmocka_unit_test(test_bad_review_denied_400),
        cmocka_unit_test(test_nul_in_object_answered),
        cmocka_unit_test(test_delete_connect_allowed),
        cmocka_unit_test(test_printable),
    };

    egpu_log_level = -1;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
