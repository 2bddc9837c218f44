/* tests/unit/webhook_testutil.h - what the egpu-webhook unit tests share:
 * AdmissionReviews built from a pod in a line, the real handler run on
 * them, and the reply taken apart (status, patch decoded, warnings).
 *
 * JSON in the tests is written with ' for " (wt_json swaps them), so a pod
 * fits in a C string without escapes.
 */
#ifndef EGPU_WEBHOOK_TESTUTIL_H
#define EGPU_WEBHOOK_TESTUTIL_H

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <gnutls/gnutls.h>
#include <jansson.h>

#include "egpu/core.h"
#include "egpu/log.h"
#include "egpu/webhook.h"
#include "testutil.h"
#include "webhook_int.h"

#define WT_UID  "3c1d6b0e-9a7f-4e2d-b5c8-1f0e9d8c7b6a"
#define WT_WIRE EGPU_SOURCE_DIR "/../shared/k8s-wire/" /* read in place, never copied */

/* text with every ' turned into ", parsed; fails the test when not JSON. */
static inline json_t *wt_json(const char *text)
{
    char *s = strdup(text);
    json_error_t jerr;
    json_t *v;

    assert_non_null(s);
    for (char *p = s; *p; p++)
        if (*p == '\'')
            *p = '"';
    v = json_loads(s, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
    if (v == NULL)
        fail_msg("bad test JSON: %s: %s", jerr.text, s);
    free(s);
    return v;
}

/* A whole file (malloc'ed, NUL-terminated) or NULL when absent. */
static inline char *wt_read(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    long n;

    if (f == NULL)
        return NULL;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    if (len)
        *len = (size_t)n;
    return buf;
}

/* A shared/k8s-wire fixture, parsed; skips the test when the folder is not
 * beside this checkout. */
static inline json_t *wt_wire(const char *name)
{
    char path[1024];
    char *text;
    json_t *v;

    snprintf(path, sizeof(path), "%s%s", WT_WIRE, name);
    text = wt_read(path, NULL);
    if (text == NULL)
        tu_skip("shared/k8s-wire is not beside this checkout");
    v = json_loads(text, 0, NULL);
    assert_non_null(v);
    free(text);
    return v;
}

/* An AdmissionReview request (compact text, malloc'ed) for object (and
 * old, may be NULL) of kind group/version/kind, operation op by user. Both
 * objects are stolen. */
static inline char *wt_review(const char *op, const char *group, const char *version,
                              const char *kind, const char *user, json_t *object, json_t *old)
{
    json_t *doc = json_pack(
        "{s:s, s:s, s:{s:s, s:{s:s, s:s, s:s}, s:{s:s, s:s, s:s}, s:s, s:s, s:s, s:{s:s}, "
        "s:o, s:o, s:b}}",
        "apiVersion", "admission.k8s.io/v1", "kind", "AdmissionReview", "request", "uid", WT_UID,
        "kind", "group", group, "version", version, "kind", kind, "resource", "group", group,
        "version", version, "resource", "pods", "name", "p", "namespace", "ml", "operation", op,
        "userInfo", "username", user, "object", object ? object : json_null(), "oldObject",
        old ? old : json_null(), "dryRun", 0);
    char *text;

    assert_non_null(doc);
    text = json_dumps(doc, JSON_COMPACT);
    json_decref(doc);
    return text;
}

/* The seccompProfile /mutate gives a container asking a gpu-core share. */
#define WT_SECCOMP "{'type':'Localhost','localhostProfile':'elastic-gpu/shared-gpu.json'}"

/* A Pod with one container "train" whose resources.limits are limits (JSON
 * with '), annotations (may be NULL) and spec.schedulerName sched (NULL:
 * none). The container has the seccompProfile of a shared-GPU container
 * already (WT_SECCOMP), so the rows about other rules see no seccomp op;
 * test_webhook_seccomp.c removes it. */
static inline json_t *wt_pod(const char *limits, const char *annotations, const char *sched)
{
    json_t *pod = wt_json("{'apiVersion':'v1','kind':'Pod','metadata':{'name':'p','namespace':"
                          "'ml','labels':{'app':'x'}},'spec':{'containers':[{'name':'train',"
                          "'image':'registry/train:1','resources':{},'securityContext':{"
                          "'seccompProfile':" WT_SECCOMP "}}],'restartPolicy':'Never'}}");
    json_t *spec = json_object_get(pod, "spec");

    if (limits != NULL)
        json_object_set_new(
            json_object_get(json_array_get(json_object_get(spec, "containers"), 0), "resources"),
            "limits", wt_json(limits));
    if (annotations != NULL)
        json_object_set_new(json_object_get(pod, "metadata"), "annotations", wt_json(annotations));
    if (sched != NULL)
        json_object_set_new(spec, "schedulerName", json_string(sched));
    return pod;
}

/* A workload of kind (apps/v1 Deployment...) whose template is pod's
 * metadata and spec (pod stolen). */
static inline json_t *wt_workload(const char *kind, json_t *pod)
{
    json_t *tmpl = json_pack("{s:O, s:O}", "metadata", json_object_get(pod, "metadata"), "spec",
                             json_object_get(pod, "spec"));
    json_t *obj;

    json_decref(pod);
    if (strcmp(kind, "CronJob") == 0)
        obj = json_pack("{s:s, s:s, s:{s:s}, s:{s:s, s:{s:{s:o}}}}", "apiVersion", "batch/v1",
                        "kind", kind, "metadata", "name", "w", "spec", "schedule", "* * * * *",
                        "jobTemplate", "spec", "template", tmpl);
    else
        obj = json_pack("{s:s, s:s, s:{s:s}, s:{s:o}}", "apiVersion",
                        strcmp(kind, "Job") == 0 ? "batch/v1" : "apps/v1", "kind", kind, "metadata",
                        "name", "w", "spec", "template", tmpl);
    assert_non_null(obj);
    return obj;
}

/* The reply of one request through the real handler. */
struct wt_reply {
    int status;
    enum egpu_webhook_result result;
    char *text;  /* the body as sent (malloc'ed) */
    json_t *doc; /* parsed, when status is 200 */
    json_t *ops; /* the patch decoded, or NULL */
};

static inline json_t *wt_b64_json(const char *b64)
{
    gnutls_datum_t in = {(unsigned char *)(uintptr_t)b64, (unsigned)strlen(b64)}, out;
    json_t *v;

    assert_int_equal(gnutls_base64_decode2(&in, &out), 0);
    v = json_loadb((const char *)out.data, out.size, 0, NULL);
    assert_non_null(v);
    gnutls_free(out.data);
    return v;
}

static inline struct wt_reply wt_run(const struct egpu_webhook_config *cfg,
                                     enum egpu_webhook_route r, const struct egpu_api_facts *f,
                                     const char *body, size_t len)
{
    struct egpu_webhook_reply reply;
    struct wt_reply w = {0};
    struct egpu_buf out;

    egpu_buf_init(&out, 16 << 20);
    assert_int_equal(egpu_webhook_handle(cfg, r, f, body, len, &out, &reply), 0);
    w.status = reply.http_status;
    w.result = reply.result;
    w.text = strdup(egpu_buf_str(&out));
    egpu_buf_free(&out);
    if (w.status == 200) {
        const char *p;

        w.doc = json_loads(w.text, 0, NULL);
        assert_non_null(w.doc);
        assert_string_equal(reply.content_type, "application/json");
        assert_string_equal(
            json_string_value(json_object_get(json_object_get(w.doc, "response"), "uid")), WT_UID);
        p = json_string_value(json_object_get(json_object_get(w.doc, "response"), "patch"));
        if (p != NULL) {
            w.ops = wt_b64_json(p);
            assert_string_equal(
                json_string_value(json_object_get(json_object_get(w.doc, "response"), "patchType")),
                "JSONPatch");
        }
    }
    return w;
}

/* Run review text (freed) on route r. */
static inline struct wt_reply wt_call(const struct egpu_webhook_config *cfg,
                                      enum egpu_webhook_route r, const struct egpu_api_facts *f,
                                      char *review)
{
    struct wt_reply w = wt_run(cfg, r, f, review, strlen(review));

    free(review);
    return w;
}

static inline void wt_free(struct wt_reply *w)
{
    free(w->text);
    json_decref(w->doc);
    json_decref(w->ops);
    memset(w, 0, sizeof(*w));
}

static inline json_t *wt_response(const struct wt_reply *w)
{
    return json_object_get(w->doc, "response");
}

/* got and want (JSON with ') must be equal; the message shows both. */
static inline void wt_assert_json(const json_t *got, const char *want_text)
{
    json_t *want = wt_json(want_text);

    if (!json_equal(got, want)) {
        char *g = got ? json_dumps(got, JSON_COMPACT | JSON_ENCODE_ANY) : strdup("(null)");
        char *w = json_dumps(want, JSON_COMPACT | JSON_ENCODE_ANY);

        fail_msg("JSON differs\n got: %s\nwant: %s", g, w);
    }
    json_decref(want);
}

/* The reply is exactly "allowed, nothing else" (the allow_minimal shape). */
static inline void wt_assert_allowed_minimal(const struct wt_reply *w)
{
    assert_int_equal(w->status, 200);
    wt_assert_json(w->doc, "{'apiVersion':'admission.k8s.io/v1','kind':'AdmissionReview',"
                           "'response':{'uid':'" WT_UID "','allowed':true}}");
    assert_int_equal(w->result, EGPU_WEBHOOK_ALLOWED);
}

/* The reply denies with code 403 and exactly message. */
static inline void wt_assert_denied(const struct wt_reply *w, const char *message)
{
    const json_t *st = json_object_get(wt_response(w), "status");

    assert_int_equal(w->status, 200);
    assert_false(json_is_true(json_object_get(wt_response(w), "allowed")));
    assert_string_equal(json_string_value(json_object_get(st, "message")), message);
    assert_string_equal(json_string_value(json_object_get(st, "reason")), "Forbidden");
    assert_int_equal(json_integer_value(json_object_get(st, "code")), 403);
    assert_null(json_object_get(wt_response(w), "patch"));
    assert_int_equal(w->result, EGPU_WEBHOOK_DENIED);
}

#endif /* EGPU_WEBHOOK_TESTUTIL_H */
