/* tests/unit/test_kube_list_decode.c - the streaming list decoder
 * (src/kube/list_decode.c) against decode-whole-then-keep: json_loadb with
 * EGPU_KUBE_JSON_FLAGS, then egpu_kube_keep on every item. On apiserver-shaped
 * pages the two give equal values; on malformed ones both refuse, and the
 * streaming decoder says what was wrong. Every prefix of a page and every
 * page with one byte replaced is tried, so each token boundary is crossed.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "egpu/kube.h"
#include "kube_int.h"

/* The scheduler's pod paths (src/scheduler/api.c) and some that go through
 * values of the wrong type. */
static const char *const keep_pods[] = {"metadata.uid",
                                        "metadata.annotations",
                                        "metadata.deletionTimestamp",
                                        "spec.nodeName",
                                        "spec.schedulerName",
                                        "spec.overhead",
                                        "spec.containers[].name",
                                        "spec.containers[].resources",
                                        "spec.initContainers[].name",
                                        "spec.initContainers[].resources",
                                        "spec.resourceClaims",
                                        "status.phase",
                                        "status.resourceClaimStatuses",
                                        NULL};

/* A pod as kube-apiserver sends it: managedFields, volumes, statuses. */
#define POD(name, node, extra)                                                                    \
    "{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"" name                      \
    "\",\"namespace\":\"team-a\",\"uid\":\"6f1c2a4e-0000-4000-8000-000000000001\","               \
    "\"resourceVersion\":\"12345\",\"creationTimestamp\":\"2026-12-01T10:00:00Z\","               \
    "\"labels\":{\"app\":\"train\",\"pod-template-hash\":\"7d9f\"},"                              \
    "\"annotations\":{\"elasticgpu.io/assigned\":\"0:gpu-0=30/2048\",\"note\":\"caf\xc3\xa9\"},"  \
    "\"ownerReferences\":[{\"apiVersion\":\"apps/"                                                \
    "v1\",\"kind\":\"ReplicaSet\",\"name\":\"train-7d9f\","                                       \
    "\"uid\":\"u\",\"controller\":true,\"blockOwnerDeletion\":true}],"                            \
    "\"managedFields\":[{\"manager\":\"kube-controller-manager\",\"operation\":\"Update\","       \
    "\"apiVersion\":\"v1\",\"time\":\"2026-12-01T10:00:00Z\",\"fieldsType\":\"FieldsV1\","        \
    "\"fieldsV1\":{\"f:metadata\":{\"f:labels\":{\".\":{},\"f:app\":{}}},\"f:spec\":{\"f:"        \
    "containers\":"                                                                               \
    "{\"k:{\\\"name\\\":\\\"main\\\"}\":{\".\":{},\"f:image\":{}}}}}}]},"                         \
    "\"spec\":{\"volumes\":[{\"name\":\"kube-api-access\",\"projected\":{\"sources\":[{"          \
    "\"serviceAccountToken\":{\"expirationSeconds\":3607,\"path\":\"token\"}}],\"defaultMode\":"  \
    "420}}],"                                                                                     \
    "\"containers\":[{\"name\":\"main\",\"image\":\"registry/"                                    \
    "train:1.2\",\"args\":[\"--lr\",\"0.1\"],"                                                    \
    "\"resources\":{\"limits\":{\"elasticgpu.io/gpu-core\":\"30\",\"elasticgpu.io/gpu-memory\":"  \
    "\"2048\"},\"requests\":{\"cpu\":\"2\"}},\"env\":[{\"name\":\"X\",\"value\":\"1\"}],"         \
    "\"terminationMessagePath\":\"/dev/termination-log\",\"imagePullPolicy\":\"IfNotPresent\"},"  \
    "{\"name\":\"side\",\"image\":\"busybox\",\"resources\":{}}],"                                \
    "\"restartPolicy\":\"Always\",\"terminationGracePeriodSeconds\":30,\"dnsPolicy\":"            \
    "\"ClusterFirst\","                                                                           \
    "\"nodeName\":\"" node "\",\"schedulerName\":\"egpu-scheduler\",\"priority\":0,"              \
    "\"tolerations\":[{\"key\":\"node.kubernetes.io/not-ready\",\"operator\":\"Exists\","         \
    "\"effect\":\"NoExecute\",\"tolerationSeconds\":300}],\"enableServiceLinks\":true" extra "}," \
    "\"status\":{\"phase\":\"Running\",\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\","  \
    "\"lastProbeTime\":null}],\"hostIP\":\"10.0.0.7\",\"podIP\":\"10.1.2.3\",\"startTime\":"      \
    "\"2026-12-01T10:00:01Z\",\"containerStatuses\":[{\"name\":\"main\",\"ready\":true,"          \
    "\"restartCount\":0,\"image\":\"registry/"                                                    \
    "train:1.2\",\"imageID\":\"sha256:ab\",\"started\":true,"                                     \
    "\"state\":{\"running\":{\"startedAt\":\"2026-12-01T10:00:02Z\"}}}],\"qosClass\":"            \
    "\"Burstable\","                                                                              \
    "\"ratio\":0.25,\"big\":-9223372036854775808}}"

static const char page[] =
    "{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":\"99\","
    "\"continue\":\"abc\",\"remainingItemCount\":3},\"items\":[" POD("p0", "n1", "") "," POD(
        "p1", "n2",
        ",\"initContainers\":[{\"name\":\"init\",\"resources\":{\"limits\":"
        "{}}},7]") ","
                   "{\"metadata\":{\"name\":\"odd\",\"namespace\":\"x\"},"
                   "\"spec\":\"a string\",\"status\":[1,2]},"
                   "{\"metadata\":\"not an "
                   "object\",\"spec\":{\"containers\":{\"name\":\"obj\"}}},"
                   "{\"metadata\":{\"name\":\"dup\",\"name\":\"dup2\"},"
                   "\"spec\":{\"nodeName\":\"a\"},"
                   "\"spec\":{\"containers\":[{\"name\":\"c\"}]}},"
                   "\"a string item\",[1,{\"a\":null}],null,true,{}]}";

/* json_loadb then egpu_kube_keep on each item. NULL when either fails. */
static json_t *whole_then_keep(const char *body, size_t len, const char *const *keep)
{
    json_t *doc = json_loadb(body, len, EGPU_KUBE_JSON_FLAGS, NULL), *items;

    if (doc == NULL)
        return NULL;
    items = json_object_get(doc, "items");
    for (size_t i = 0; json_is_array(items) && i < json_array_size(items); i++) {
        json_t *t = egpu_kube_keep(json_array_get(items, i), keep);

        assert_non_null(t);
        assert_int_equal(json_array_set_new(items, i, t), 0);
    }
    return doc;
}

/* Both decoders agree on body: the same value, or both refuse it. Returns
 * whether it decoded. */
static bool agree(const char *body, size_t len, const char *const *keep)
{
    struct egpu_error err = {0};
    json_t *a = whole_then_keep(body, len, keep), *b = NULL;
    int rc = egpu__kube_list_decode(body, len, keep, &b, &err);

    if ((a == NULL) != (rc != 0) || (a != NULL && !json_equal(a, b))) {
        char *sa = a ? json_dumps(a, JSON_SORT_KEYS) : NULL;
        char *sb = b ? json_dumps(b, JSON_SORT_KEYS) : NULL;

        print_error("body (%zu bytes): %.*s\nwhole: %s\nstream: %s (%d \"%s\")\n", len,
                    (int)(len > 400 ? 400 : len), body, sa ? sa : "refused", sb ? sb : "refused",
                    rc, err.msg);
        free(sa);
        free(sb);
        fail();
    }
    if (rc != 0) {
        assert_null(b);
        assert_int_equal(rc, EGPU_ESYNTAX);
        assert_true(err.msg[0] != '\0');
    }
    json_decref(a);
    json_decref(b);
    return rc == 0;
}

static bool agree_str(const char *body)
{
    return agree(body, strlen(body), keep_pods);
}

static void test_pages_decode_as_whole_then_keep(void **state)
{
    static const char *const odd[] = {
        "spec", "spec.containers[].name", "status.phase", "metadata.labels", "spec.containers.name",
        NULL};
    struct egpu_error err = {0};
    json_t *out = NULL;

    (void)state;
    assert_true(agree(page, strlen(page), keep_pods));
    assert_true(agree(page, strlen(page), odd));
    assert_true(agree(page, strlen(page), NULL));
    /* Only the kept fields are there. */
    assert_int_equal(egpu__kube_list_decode(page, strlen(page), keep_pods, &out, &err), 0);
    {
        json_t *p0 = json_array_get(json_object_get(out, "items"), 0);
        json_t *c0 = json_array_get(json_object_get(json_object_get(p0, "spec"), "containers"), 0);
        json_t *meta = json_object_get(out, "metadata");

        assert_null(json_object_get(json_object_get(p0, "metadata"), "managedFields"));
        assert_null(json_object_get(json_object_get(p0, "spec"), "volumes"));
        assert_null(json_object_get(c0, "image"));
        assert_non_null(json_object_get(c0, "resources"));
        assert_string_equal(json_string_value(json_object_get(meta, "continue")), "abc");
    }
    json_decref(out);
    /* Pages that are not a List's shape still decode as jansson would. */
    assert_true(agree_str("[1,2]"));
    assert_true(agree_str("{\"items\":7}"));
    assert_true(agree_str("{\"items\":null,\"kind\":\"PodList\"}"));
    assert_true(agree_str("{\"items\":[],\"items\":[{\"metadata\":{\"name\":\"b\",\"x\":1}}]}"));
    assert_true(agree_str("{}"));
    assert_true(agree_str(" {\"items\":[{\"metadata\":{\"name\":\"\\u00e9\\u0000x\"}}]} \n"));
}

static void test_malformed_pages_are_refused_with_a_reason(void **state)
{
    static const struct {
        const char *body;
        const char *says;
    } bad[] = {
        {"", "malformed JSON"},
        {"   ", "malformed JSON"},
        {"7", "not an object or array"},
        {"\"s\"", "not an object or array"},
        {"{\"items\":[}", "malformed JSON"},
        {"{\"items\":[]} x", "malformed JSON"},
        {"{\"items\":[]}{}", "malformed JSON"},
        {"{\"items\":[{\"a\":\"open}]}", "malformed JSON"},
        {"{\"items\":[{\"a\":1e999}]}", "real number that overflows"},
        {"{\"items\":[{\"a\":99999999999999999999}]}", "integer outside 64 bits"},
        {"{\"items\":[{\"a\":-99999999999999999999}]}", "integer outside 64 bits"},
        {"{\"items\":[{\"a\\u0000b\":1}]}", "key holding a NUL"},
        {"{\"items\":[{\"metadata\":{\"name\":\"\xc0\xaf\"}}]}", "not UTF-8"},
        {"{\"items\":[{\"skipped\":\"\xed\xa0\x80\"}]}", "not UTF-8"},
        {"{\"items\":[{\"skipped\":\"\xf4\x90\x80\x80\"}]}", "not UTF-8"},
        {"{\"items\":[{\"sk\xe0\x80\xafipped\":1}]}", "not UTF-8"},
        {"{\"items\":[{\"skipped\":\"\\udc00\"}]}", "not UTF-8"},
        {"{\"items\":[\f]}", "control character 0x0c"},
        {"{\"items\":[1,\v2]}", "control character 0x0b"},
        {"{\"items\":[{\"a\":tru}]}", "malformed JSON"},
        {"{\"items\":[01]}", "malformed JSON"},
        {"{\"items\":[/* c */]}", "malformed JSON"},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct egpu_error err = {0};
        json_t *out = (json_t *)1;

        assert_false(agree(bad[i].body, strlen(bad[i].body), keep_pods));
        assert_int_equal(
            egpu__kube_list_decode(bad[i].body, strlen(bad[i].body), keep_pods, &out, &err),
            EGPU_ESYNTAX);
        assert_null(out);
        if (strstr(err.msg, bad[i].says) == NULL || strncmp(err.msg, "list page: ", 11) != 0)
            fail_msg("%s: \"%s\" does not say \"%s\"", bad[i].body, err.msg, bad[i].says);
    }
}

/* Nesting: jansson's limit (JSON_PARSER_MAX_DEPTH) holds in kept and skipped
 * values alike; deeper is refused without using the stack. */
static void test_deep_nesting(void **state)
{
    size_t deep = 100000;
    char *body = malloc(2 * deep + 64);
    struct egpu_error err = {0};
    json_t *out = NULL;

    (void)state;
    assert_non_null(body);
    for (int where = 0; where < 2; where++) {
        /* depth 3 before: {"items":[{"<key>": */
        const char *key = where ? "skipped" : "metadata";

        for (size_t depth = JSON_PARSER_MAX_DEPTH - 4; depth <= JSON_PARSER_MAX_DEPTH - 2;
             depth++) {
            size_t n = (size_t)snprintf(body, 64, "{\"items\":[{\"%s\":", key);

            memset(body + n, '[', depth);
            memset(body + n + depth, ']', depth);
            n += 2 * depth;
            n += (size_t)snprintf(body + n, 8, "}]}");
            (void)agree(body, n, keep_pods);
        }
    }
    memset(body, '[', deep);
    memset(body + deep, ']', deep);
    assert_int_equal(egpu__kube_list_decode(body, 2 * deep, keep_pods, &out, &err), EGPU_ESYNTAX);
    assert_non_null(strstr(err.msg, "nesting deeper than 2048"));
    memcpy(body, "{\"items\":[{\"x\":", 15);
    assert_int_equal(egpu__kube_list_decode(body, 2 * deep, keep_pods, &out, &err), EGPU_ESYNTAX);
    assert_null(out);
    free(body);
}

/* Every prefix, and the page with each byte replaced by one of a few that
 * change the syntax: the two decoders agree on each. */
static void test_every_cut_and_byte_agrees(void **state)
{
    static const char subst[] = {'"', '{', '}', '[',  ']', ',',    ':',    '0',
                                 'e', '-', ' ', '\\', 'x', '\x01', '\xff', '\xc3'};
    size_t len = strlen(page), decoded = 0;
    char *copy = malloc(len);

    (void)state;
    assert_non_null(copy);
    for (size_t n = 0; n < len; n++)
        assert_false(agree(page, n, keep_pods));
    for (size_t i = 0; i < len; i++) {
        for (size_t k = 0; k < sizeof(subst); k++) {
            if (page[i] == subst[k])
                continue;
            memcpy(copy, page, len);
            copy[i] = subst[k];
            decoded += agree(copy, len, keep_pods);
        }
    }
    assert_true(decoded > 0); /* some replacements stay valid JSON */
    free(copy);
}

/* A big string and a bad keep path. */
static void test_big_strings_and_bad_paths(void **state)
{
    size_t big = (size_t)4 << 20;
    char *body = malloc(big + 64);
    struct egpu_error err = {0};
    json_t *out = NULL;
    size_t n;

    (void)state;
    assert_non_null(body);
    for (int kept = 0; kept < 2; kept++) {
        n = (size_t)snprintf(body, 64, "{\"items\":[{\"metadata\":{\"%s\":\"", kept ? "uid" : "x");
        memset(body + n, 'a', big);
        n += big;
        n += (size_t)snprintf(body + n, 8, "\"}}]}");
        assert_true(agree(body, n, keep_pods));
    }
    assert_int_equal(egpu__kube_list_decode(page, strlen(page),
                                            (const char *const[]){"spec..x", NULL}, &out, &err),
                     -EINVAL);
    assert_null(out);
    assert_int_equal(egpu__kube_list_decode(NULL, 0, keep_pods, &out, &err), EGPU_ESYNTAX);
    free(body);
}

/* A watch event: "object" is what the paths apply to, compiled once
 * (egpu__kube_event_keep_new) for event after event; the refusals are a
 * page's. */
static void test_watch_event(void **state)
{
    static const char ev[] = "{\"type\":\"MODIFIED\",\"object\":" POD("p9", "n3", "") "}";
    struct egpu__kube_event_keep *k = NULL;
    struct egpu_error err = {0};
    json_t *out = NULL, *whole = json_loads(ev, 0, NULL), *slim;

    (void)state;
    slim = egpu_kube_keep(json_object_get(whole, "object"), keep_pods);
    assert_int_equal(json_object_set_new(whole, "object", slim), 0);
    assert_int_equal(egpu__kube_event_keep_new(keep_pods, &k, &err), 0);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(egpu__kube_event_decode_with(k, ev, strlen(ev), &out, &err), 0);
        assert_true(json_equal(whole, out));
        json_decref(out);
    }
    assert_int_equal(egpu__kube_event_decode_with(k, ev, strlen(ev) - 1, &out, &err), EGPU_ESYNTAX);
    assert_null(out);
    egpu__kube_event_keep_free(k);
    egpu__kube_event_keep_free(NULL);
    assert_int_equal(egpu__kube_event_keep_new((const char *const[]){"spec..x", NULL}, &k, &err),
                     -EINVAL);
    assert_null(k);
    json_decref(whole);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pages_decode_as_whole_then_keep),
        cmocka_unit_test(test_malformed_pages_are_refused_with_a_reason),
        cmocka_unit_test(test_deep_nesting),
        cmocka_unit_test(test_every_cut_and_byte_agrees),
        cmocka_unit_test(test_big_strings_and_bad_paths),
        cmocka_unit_test(test_watch_event),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
