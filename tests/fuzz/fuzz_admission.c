/* tests/fuzz/fuzz_admission.c - egpu-webhook's request path
 * (src/webhook: the AdmissionReview decoder, /mutate, /mutate-nvidia,
 * /validate and /mutate-place, the reply encoder), driven through egpu_webhook_handle exactly
 * as the HTTPS server calls it.
 *
 * Input: one byte of settings (bits 0-1: the route, in the order of
 * enum egpu_webhook_route; bit 2:
 * --compat-nvidia; bit 3: --set-scheduler-name false; bit 4: aliyun in MiB;
 * bit 5: no GPU facts; bit 6: a claims source, the fake below, else none;
 * bit 7: a GPUBudgets source, the fake below, else none), a second byte
 * (bit 0: --mode dra), then the request body. Invariants: never fails but
 * for memory; the answer is HTTP 400 in plain text, or a 200 AdmissionReview
 * (admission.k8s.io/v1) whose response.uid is request.uid; /validate never
 * patches; /mutate-place never denies and patches nothing but
 * spec.schedulerName (one operation, to the configured name); a patch decodes (base64, JSON) and
 * applies to the request's object; and a mutating route given the patched object makes no patch
 * (reinvocationPolicy: IfNeeded), claims resolved included. A patch that
 * sets spec.schedulerName sets the configured name, and only with
 * --set-scheduler-name (DRA mode too). In DRA mode the patched Pod passes
 * /validate's guard of elasticgpu.io/dra-claims (each template named by
 * its spec's hash, each spec one the webhook makes, each named by the
 * pod's resourceClaims), and, when the Pod carried no marker
 * elasticgpu.io/dra of its own, /validate's check of the markers the patch
 * wrote (each beside the claim it made). No leak (LeakSanitizer).
 *
 * The claims source knows, in every namespace, the claims "bound" (Bound,
 * 30% and 8192 MiB), "whole" (Bound, two cards), "pending" (Pending, 40%
 * and 4096 MiB), "tflops" (Pending, gpu-tflops), "lost" (Lost) and "bad"
 * (malformed); "down" and "cached-down" stand for an API server that does
 * not answer, the latter with a Bound claim in the cache; every other name
 * is missing.
 *
 * The GPUBudgets source answers by namespace: "in" has an InBudget budget
 * naming class gpu-in (value 1000), "over" an OverBudget one naming gpu-over
 * (value -10, preemptionPolicy Never), "unmetered" one without status,
 * "missing" one whose classes do not exist, "several" two (the first by
 * name OverBudget), "bad" a malformed one, "down" cannot be read; every
 * other namespace has none.
 */
#include <errno.h>
#include <string.h>

#include <gnutls/gnutls.h>
#include <jansson.h>

#include "fuzz.h"
#include "egpu/webhook.h"
#include "webhook_int.h"

static const char *const models[] = {"NVIDIA A100-SXM4-40GB", "NVIDIA H100"};
static const struct egpu_api_facts facts = {.max_card_mib = 40960, .nmodels = 2, .models = models};
static json_t *claims; /* name -> ElasticGPUClaim (namespace ignored) */

static const char *const claim_text[][2] = {
    {"bound", "{\"spec\":{\"resources\":{\"requests\":{\"elasticgpu.io/gpu-core\":30,"
              "\"elasticgpu.io/gpu-memory\":8192}}},\"status\":{\"phase\":\"Bound\","
              "\"elasticGPUName\":\"e1\",\"capacity\":{\"elasticgpu.io/gpu-core\":30,"
              "\"elasticgpu.io/gpu-memory\":8192}}}"},
    {"whole", "{\"spec\":{\"resources\":{\"requests\":{\"elasticgpu.io/gpu-core\":200}}},"
              "\"status\":{\"phase\":\"Bound\",\"elasticGPUName\":\"e2\",\"capacity\":{"
              "\"elasticgpu.io/gpu-core\":200}}}"},
    {"pending", "{\"spec\":{\"resources\":{\"requests\":{\"elasticgpu.io/gpu-core\":40,"
                "\"elasticgpu.io/gpu-memory\":4096}}}}"},
    {"tflops", "{\"spec\":{\"resources\":{\"requests\":{\"elasticgpu.io/gpu-tflops\":100}}}}"},
    {"lost", "{\"spec\":{\"resources\":{\"requests\":{\"elasticgpu.io/gpu-core\":30}}},"
             "\"status\":{\"phase\":\"Lost\"}}"},
    {"bad", "{\"spec\":{\"resources\":{\"requests\":{\"elasticgpu.io/gpu-core\":150}}}}"},
    {"cached-down", "{\"spec\":{\"resources\":{\"requests\":{\"elasticgpu.io/gpu-core\":30}}},"
                    "\"status\":{\"phase\":\"Bound\",\"elasticGPUName\":\"e3\","
                    "\"capacity\":{\"elasticgpu.io/gpu-core\":30}}}"},
};

static int claim_get(void *ud, const char *ns, const char *name, bool fresh, json_t **out,
                     struct egpu_error *err)
{
    json_t *c;

    (void)ud;
    FUZZ_CHECK(ns != NULL && ns[0] != '\0' && name != NULL && name[0] != '\0');
    if (fresh && (strcmp(name, "down") == 0 || strcmp(name, "cached-down") == 0))
        return egpu_error_set(err, -ECONNREFUSED, "connection refused");
    c = json_object_get(claims, name);
    if (c == NULL)
        return -ENOENT;
    *out = json_deep_copy(c);
    if (*out == NULL)
        return -ENOMEM;
    json_object_set_new(*out, "metadata", json_pack("{s:s, s:s}", "namespace", ns, "name", name));
    return 0;
}

static const struct egpu_webhook_claims source = {.get = claim_get};

static json_t *budget(const char *name, const char *state, const char *in, const char *over)
{
    json_t *b = json_pack("{s:s, s:s, s:{s:s}, s:{s:i, s:s, s:s, s:s}}", "apiVersion",
                          "elasticgpu.io/v1alpha1", "kind", "GPUBudget", "metadata", "name", name,
                          "spec", "gpuHours", 10, "period", "Daily", "inBudgetPriorityClassName",
                          in, "overBudgetPriorityClassName", over);

    if (b != NULL && state != NULL)
        json_object_set_new(b, "status", json_pack("{s:s}", "state", state));
    return b;
}

static int budget_list(void *ud, const char *ns, json_t **out, struct egpu_error *err)
{
    json_t *l;

    (void)ud;
    FUZZ_CHECK(ns != NULL && ns[0] != '\0');
    if (strcmp(ns, "down") == 0)
        return egpu_error_set(err, -EIO, "the cache is gone");
    l = json_array();
    if (l == NULL)
        return -ENOMEM;
    if (strcmp(ns, "in") == 0)
        json_array_append_new(l, budget("b", "InBudget", "gpu-in", "gpu-over"));
    else if (strcmp(ns, "over") == 0)
        json_array_append_new(l, budget("b", "OverBudget", "gpu-in", "gpu-over"));
    else if (strcmp(ns, "unmetered") == 0)
        json_array_append_new(l, budget("b", NULL, "gpu-in", "gpu-over"));
    else if (strcmp(ns, "missing") == 0)
        json_array_append_new(l, budget("b", "OverBudget", "gpu-gone", "gpu-gone"));
    else if (strcmp(ns, "bad") == 0)
        json_array_append_new(l, budget("b", "OverBudget", "gpu-in", "Not A Name"));
    else if (strcmp(ns, "several") == 0) {
        json_array_append_new(l, budget("z", "InBudget", "gpu-in", "gpu-over"));
        json_array_append_new(l, budget("a", "OverBudget", "gpu-in", "gpu-over"));
    }
    *out = l;
    return 0;
}

static int class_get(void *ud, const char *name, json_t **out, struct egpu_error *err)
{
    (void)ud;
    (void)err;
    FUZZ_CHECK(name != NULL && name[0] != '\0');
    if (strcmp(name, "gpu-in") == 0)
        *out = json_pack("{s:s, s:i}", "apiVersion", "scheduling.k8s.io/v1", "value", 1000);
    else if (strcmp(name, "gpu-over") == 0)
        *out = json_pack("{s:s, s:i, s:s}", "apiVersion", "scheduling.k8s.io/v1", "value", -10,
                         "preemptionPolicy", "Never");
    else
        return -ENOENT;
    return *out != NULL ? 0 : -ENOMEM;
}

static const struct egpu_webhook_budgets budgets = {.list = budget_list,
                                                    .priority_class = class_get};

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet();
    claims = json_object();
    for (size_t i = 0; i < sizeof(claim_text) / sizeof(claim_text[0]); i++)
        json_object_set_new(claims, claim_text[i][0], json_loads(claim_text[i][1], 0, NULL));
    FUZZ_CHECK(json_object_size(claims) == sizeof(claim_text) / sizeof(claim_text[0]));
    return 0;
}

/* Handle body; returns the reply's text (malloc'ed) and its status. */
static char *run(const struct egpu_webhook_config *cfg, enum egpu_webhook_route r,
                 const struct egpu_api_facts *f, const char *body, size_t len,
                 struct egpu_webhook_reply *reply)
{
    struct egpu_buf out;
    char *text;
    int rc;

    egpu_buf_init(&out, 64 << 20);
    rc = egpu_webhook_handle(cfg, r, f, body, len, &out, reply);
    FUZZ_CHECK(rc == 0);
    FUZZ_CHECK(reply->http_status == 200 || reply->http_status == 400);
    text = fuzz_cstr((const uint8_t *)egpu_buf_str(&out), out.len);
    egpu_buf_free(&out);
    return text;
}

static json_t *decode_patch(const char *b64)
{
    gnutls_datum_t in = {(unsigned char *)(uintptr_t)b64, (unsigned)strlen(b64)}, raw;
    json_t *ops;

    FUZZ_CHECK(gnutls_base64_decode2(&in, &raw) == 0);
    ops = json_loadb((const char *)raw.data, raw.size, JSON_ALLOW_NUL, NULL);
    gnutls_free(raw.data);
    FUZZ_CHECK(json_is_array(ops) && json_array_size(ops) > 0);
    return ops;
}

/* Does a container or init container of obj (a Pod) name the marker
 * EGPU_RES_DRA in requests or limits? */
static bool has_marker(const json_t *obj)
{
    static const char *const lists[] = {"containers", "initContainers"};
    const json_t *spec = json_object_get(obj, "spec"), *c;
    size_t i;

    for (size_t l = 0; l < 2; l++) {
        json_array_foreach(json_object_get(spec, lists[l]), i, c)
        {
            const json_t *res = json_object_get(c, "resources");

            if (json_object_get(json_object_get(res, "requests"), EGPU_RES_DRA) != NULL ||
                json_object_get(json_object_get(res, "limits"), EGPU_RES_DRA) != NULL)
                return true;
        }
    }
    return false;
}

/* In DRA mode: a patched Pod CREATE (text: its review) holds a
 * dra-claims annotation that /validate's guard accepts and, when the
 * original (orig, the request's object) had no marker, only markers
 * /validate accepts. */
static void check_dra(const struct egpu_webhook_config *cfg, const char *text, const json_t *orig)
{
    struct egpu_api_problems p = {0};
    struct egpu__webhook_review rv;
    struct egpu_error err = {0};

    if (egpu__webhook_review_decode(text, strlen(text), &rv, &err) == 0 &&
        rv.op == EGPU_WEBHOOK_OP_CREATE && strcmp(rv.kind, "Pod") == 0 && rv.group[0] == '\0') {
        const json_t *meta = json_object_get(rv.object, "metadata");

        egpu__webhook_dra_guard(cfg, &rv, &p);
        FUZZ_CHECK(p.n == 0);
        if (!has_marker(orig)) {
            FUZZ_CHECK(egpu__webhook_dra_marker_check(cfg, json_object_get(rv.object, "spec"),
                                                      json_object_get(meta, "annotations"),
                                                      &p) == 0);
            FUZZ_CHECK(p.n == 0);
        }
    }
    egpu__webhook_review_free(&rv);
}

/* The patch applies to the object, and mutating the result patches nothing. */
static void check_patch(const struct egpu_webhook_config *cfg, enum egpu_webhook_route r,
                        const char *body, size_t len, const json_t *ops)
{
    json_t *review = json_loadb(body, len, JSON_ALLOW_NUL, NULL);
    json_t *req = json_object_get(review, "request"), *obj, *orig;
    struct egpu_webhook_reply again;
    char *text, *reply;
    json_t *doc;

    FUZZ_CHECK(req != NULL);
    orig = json_deep_copy(json_object_get(req, "object"));
    obj = json_deep_copy(orig);
    FUZZ_CHECK(obj != NULL);
    FUZZ_CHECK(egpu__webhook_patch_apply(obj, ops) == 0);
    FUZZ_CHECK(json_object_set_new(req, "object", obj) == 0);
    text = json_dumps(review, JSON_COMPACT);
    FUZZ_CHECK(text != NULL);
    reply = run(cfg, r, NULL, text, strlen(text), &again);
    FUZZ_CHECK(again.http_status == 200);
    doc = json_loads(reply, 0, NULL);
    FUZZ_CHECK(json_object_get(json_object_get(doc, "response"), "patch") == NULL);
    json_decref(doc);
    free(reply);
    if (cfg->mode == EGPU_WEBHOOK_MODE_DRA)
        check_dra(cfg, text, orig);
    free(text);
    json_decref(orig);
    json_decref(review);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct egpu_webhook_config cfg = {0};
    struct egpu_webhook_reply reply;
    enum egpu_webhook_route r;
    const json_t *resp;
    char *body, *text;
    json_t *doc, *in;

    if (size < 2)
        return 0;
    r = (enum egpu_webhook_route)(data[0] & 3);
    cfg.compat_nvidia = data[0] & 4;
    cfg.set_scheduler_name = !(data[0] & 8);
    cfg.aliyun_mem_mib = data[0] & 16 ? 1 : 0;
    cfg.claims = data[0] & 64 ? &source : NULL;
    cfg.budgets = data[0] & 128 ? &budgets : NULL;
    cfg.mode = data[1] & 1 ? EGPU_WEBHOOK_MODE_DRA : EGPU_WEBHOOK_MODE_DEVICE_PLUGIN;
    body = fuzz_dup(data + 2, size - 2);
    text = run(&cfg, r, data[0] & 32 ? NULL : &facts, body, size - 2, &reply);
    if (reply.http_status == 400) {
        FUZZ_CHECK(strcmp(reply.content_type, "text/plain; charset=utf-8") == 0);
        FUZZ_CHECK(reply.result == EGPU_WEBHOOK_ERROR);
        free(text);
        free(body);
        return 0;
    }
    doc = json_loads(text, 0, NULL);
    FUZZ_CHECK(doc != NULL);
    FUZZ_CHECK(
        strcmp(json_string_value(json_object_get(doc, "apiVersion")), "admission.k8s.io/v1") == 0);
    FUZZ_CHECK(strcmp(json_string_value(json_object_get(doc, "kind")), "AdmissionReview") == 0);
    resp = json_object_get(doc, "response");
    in = json_loadb(body, size - 2, JSON_ALLOW_NUL, NULL);
    FUZZ_CHECK(in != NULL);
    FUZZ_CHECK(json_equal(json_object_get(resp, "uid"),
                          json_object_get(json_object_get(in, "request"), "uid")));
    json_decref(in);
    FUZZ_CHECK(json_is_boolean(json_object_get(resp, "allowed")));
    FUZZ_CHECK(json_is_true(json_object_get(resp, "allowed")) ==
               (reply.result == EGPU_WEBHOOK_ALLOWED || reply.result == EGPU_WEBHOOK_PATCHED));
    FUZZ_CHECK(r != EGPU_WEBHOOK_MUTATE_PLACE || reply.result != EGPU_WEBHOOK_DENIED);
    if (json_object_get(resp, "patch") != NULL) {
        json_t *ops = decode_patch(json_string_value(json_object_get(resp, "patch")));

        FUZZ_CHECK(r != EGPU_WEBHOOK_VALIDATE);
        FUZZ_CHECK(reply.result == EGPU_WEBHOOK_PATCHED);
        if (r == EGPU_WEBHOOK_MUTATE_PLACE) {
            const json_t *op = json_array_get(ops, 0);

            FUZZ_CHECK(json_array_size(ops) == 1);
            FUZZ_CHECK(
                strcmp(json_string_value(json_object_get(op, "path")), "/spec/schedulerName") == 0);
            FUZZ_CHECK(json_is_string(json_object_get(op, "value")) &&
                       strcmp(json_string_value(json_object_get(op, "value")),
                              egpu__webhook_scheduler_name(&cfg)) == 0);
        } else {
            size_t i;
            json_t *op;

            json_array_foreach(ops, i, op)
            {
                const char *path = json_string_value(json_object_get(op, "path"));
                const char *v = json_string_value(json_object_get(op, "value"));

                if (path != NULL && strcmp(path, "/spec/schedulerName") == 0)
                    FUZZ_CHECK(cfg.set_scheduler_name && v != NULL &&
                               strcmp(v, egpu__webhook_scheduler_name(&cfg)) == 0);
            }
        }
        check_patch(&cfg, r, body, size - 2, ops);
        json_decref(ops);
    }
    json_decref(doc);
    free(text);
    free(body);
    return 0;
}
