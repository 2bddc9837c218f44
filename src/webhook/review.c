/* webhook/review.c - admission.k8s.io/v1 AdmissionReview: the request
 * decoded, the reply encoded.
 *
 * Wire format: ../shared/k8s-wire/admission_notes.md. The API server
 * accepts a reply only as HTTP 200 with apiVersion admission.k8s.io/v1,
 * kind AdmissionReview and response.uid equal to request.uid; anything else
 * goes to the webhook's failurePolicy with an error the user cannot act on.
 * So every input that carries a usable request.uid is answered with an
 * AdmissionReview, a malformed one with allowed: false, code 400 and a
 * message naming the field and what was expected (the user sees it after
 * `admission webhook "..." denied the request: `). Only a body with no uid
 * to answer (not JSON, no request, no request.uid) gets HTTP 400 with a
 * plain-text reason, which the API server quotes in its error.
 *
 * DESIGN: the body is parsed once by jansson with JSON_ALLOW_NUL (a pod
 * owner may put "\u0000" in an annotation; that must not turn a valid pod
 * into a 400), and every string the webhook uses as C text is read through
 * egpu_api_str, which refuses one holding a NUL. The parsed document is kept
 * and the rules read the object in place, no copy. The reply is built as a
 * jansson object in the key order of the fixtures and dumped compact; the
 * patch is base64-encoded by GnuTLS (gnutls_base64_encode2), one line, no
 * padding surprises.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gnutls/gnutls.h>

#include "webhook_int.h"

#define PATCH_BYTES_MAX ((size_t)4 << 20) /* a JSON Patch's text before base64 */

void egpu__webhook_printable(char *dst, size_t len, const char *src)
{
    size_t i = 0;

    if (len == 0)
        return;
    for (; src != NULL && src[i] != '\0' && i + 1 < len; i++)
        dst[i] = ((unsigned char)src[i] < 0x20 || src[i] == 0x7f || src[i] == '"') ? '?' : src[i];
    dst[i] = '\0';
}

void egpu__webhook_review_free(struct egpu__webhook_review *r)
{
    json_decref(r->doc);
    memset(r, 0, sizeof(*r));
}

/* The string member key of obj (field names it for messages): absent or
 * null reads "" (when optional), a string without NUL its text. Returns 0
 * or EGPU_ERANGE with err set. */
static int str_field(const json_t *obj, const char *key, const char *field, bool required,
                     const char **out, struct egpu_error *err)
{
    json_t *v = json_object_get(obj, key);

    if (v == NULL || json_is_null(v)) {
        if (required)
            return egpu_error_set(err, EGPU_ERANGE, "%s: missing; expected a string", field);
        *out = "";
        return 0;
    }
    *out = egpu_api_str(v);
    if (*out == NULL)
        return egpu_error_set(err, EGPU_ERANGE, "%s: expected a string without NUL characters",
                              field);
    return 0;
}

/* An object member: absent or null gives NULL (0), an object itself (0),
 * anything else EGPU_ERANGE naming field. */
static int obj_field(const json_t *obj, const char *key, const char *field, const json_t **out,
                     struct egpu_error *err)
{
    json_t *v = json_object_get(obj, key);

    if (v == NULL || json_is_null(v)) {
        *out = NULL;
        return 0;
    }
    if (!json_is_object(v))
        return egpu_error_set(err, EGPU_ERANGE, "%s: expected an object, got %s", field,
                              json_is_array(v)    ? "an array"
                              : json_is_string(v) ? "a string"
                                                  : "a number or boolean");
    *out = v;
    return 0;
}

static int decode_op(const char *s, enum egpu__webhook_op *out, struct egpu_error *err)
{
    static const char *const names[] = {"CREATE", "UPDATE", "DELETE", "CONNECT"};

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (strcmp(s, names[i]) == 0) {
            *out = (enum egpu__webhook_op)i;
            return 0;
        }
    }
    return egpu_error_set(err, EGPU_ERANGE,
                          "request.operation \"%.64s\": expected CREATE, UPDATE, DELETE or CONNECT",
                          s);
}

/* The request's fields after uid, apiVersion and kind. */
static int decode_request(const json_t *req, struct egpu__webhook_review *out,
                          struct egpu_error *err)
{
    const json_t *kind, *resource, *user;
    const char *op;
    json_t *dry;
    int rc;

    rc = obj_field(req, "kind", "request.kind", &kind, err);
    if (!rc && kind == NULL)
        rc = egpu_error_set(err, EGPU_ERANGE,
                            "request.kind: missing; expected {group, version, kind}");
    if (!rc)
        rc = str_field(kind, "group", "request.kind.group", false, &out->group, err);
    if (!rc)
        rc = str_field(kind, "version", "request.kind.version", true, &out->version, err);
    if (!rc)
        rc = str_field(kind, "kind", "request.kind.kind", true, &out->kind, err);
    if (!rc)
        rc = obj_field(req, "resource", "request.resource", &resource, err);
    out->resource = "";
    if (!rc && resource != NULL)
        rc = str_field(resource, "resource", "request.resource.resource", false, &out->resource,
                       err);
    if (!rc)
        rc = str_field(req, "subResource", "request.subResource", false, &out->sub_resource, err);
    if (!rc)
        rc = str_field(req, "operation", "request.operation", true, &op, err);
    if (!rc)
        rc = decode_op(op, &out->op, err);
    if (!rc)
        rc = str_field(req, "namespace", "request.namespace", false, &out->ns, err);
    if (!rc)
        rc = str_field(req, "name", "request.name", false, &out->name, err);
    if (!rc)
        rc = obj_field(req, "userInfo", "request.userInfo", &user, err);
    out->username = "";
    if (!rc && user != NULL)
        rc = str_field(user, "username", "request.userInfo.username", false, &out->username, err);
    if (!rc)
        rc = obj_field(req, "object", "request.object", &out->object, err);
    if (!rc)
        rc = obj_field(req, "oldObject", "request.oldObject", &out->old_object, err);
    if (rc)
        return rc;
    dry = json_object_get(req, "dryRun");
    if (dry != NULL && !json_is_null(dry) && !json_is_boolean(dry))
        return egpu_error_set(err, EGPU_ERANGE, "request.dryRun: expected true or false");
    out->dry_run = json_is_true(dry);
    if ((out->op == EGPU_WEBHOOK_OP_CREATE || out->op == EGPU_WEBHOOK_OP_UPDATE) &&
        out->object == NULL)
        return egpu_error_set(err, EGPU_ERANGE, "request.object: missing; a %s carries the object",
                              out->op == EGPU_WEBHOOK_OP_CREATE ? "CREATE" : "UPDATE");
    if (out->op == EGPU_WEBHOOK_OP_UPDATE && out->old_object == NULL)
        return egpu_error_set(err, EGPU_ERANGE,
                              "request.oldObject: missing; an UPDATE carries the object before it");
    return 0;
}

int egpu__webhook_review_decode(const char *body, size_t len, struct egpu__webhook_review *out,
                                struct egpu_error *err)
{
    json_error_t jerr;
    const json_t *req;
    const char *s;
    json_t *doc, *uid;

    memset(out, 0, sizeof(*out));
    doc = json_loadb(body, len, JSON_ALLOW_NUL, &jerr);
    if (doc == NULL) {
        char why[sizeof(jerr.text)];

        if (json_error_code(&jerr) == json_error_out_of_memory)
            return egpu_error_set(err, -ENOMEM, "AdmissionReview: out of memory");
        egpu__webhook_printable(why, sizeof(why), jerr.text); /* it may quote the body */
        return egpu_error_set(err, EGPU_ESYNTAX,
                              "AdmissionReview: body is not JSON: %.200s (line %d, column %d)", why,
                              jerr.line, jerr.column);
    }
    req = json_object_get(doc, "request");
    if (!json_is_object(doc) || !json_is_object(req)) {
        const char *why = !json_is_object(doc) ? "not a JSON object"
                          : req == NULL        ? "request: missing"
                                               : "request: not an object";

        json_decref(doc);
        return egpu_error_set(err, EGPU_ESYNTAX,
                              "AdmissionReview: %s; expected an admission.k8s.io/v1 "
                              "AdmissionReview with a request",
                              why);
    }
    uid = json_object_get(req, "uid");
    s = egpu_api_str(uid);
    if (s == NULL || s[0] == '\0' || strlen(s) >= EGPU_WEBHOOK_UID_MAX) {
        const char *why = uid == NULL            ? "missing"
                          : !json_is_string(uid) ? "not a string"
                          : s == NULL            ? "holds a NUL character"
                          : s[0] == '\0'         ? "empty"
                                                 : "too long";

        json_decref(doc); /* why is static text */
        return egpu_error_set(err, EGPU_ESYNTAX,
                              "AdmissionReview: request.uid: %s; expected a string of 1..%d bytes",
                              why, EGPU_WEBHOOK_UID_MAX - 1);
    }
    out->doc = doc;
    out->uid = s;
    s = egpu_api_str(json_object_get(doc, "apiVersion"));
    if (s == NULL || strcmp(s, EGPU_WEBHOOK_REVIEW_API_VERSION) != 0)
        return egpu_error_set(err, EGPU_ERANGE,
                              "AdmissionReview apiVersion \"%.64s\" is not served; expected "
                              "\"" EGPU_WEBHOOK_REVIEW_API_VERSION
                              "\" (admissionReviewVersions: [v1])",
                              s ? s : "");
    s = egpu_api_str(json_object_get(doc, "kind"));
    if (s == NULL || strcmp(s, EGPU_WEBHOOK_REVIEW_KIND) != 0)
        return egpu_error_set(
            err, EGPU_ERANGE,
            "kind \"%.64s\" is not served; expected \"" EGPU_WEBHOOK_REVIEW_KIND "\"", s ? s : "");
    return decode_request(req, out, err);
}

/* ------------------------------------------------------------------------ */
/* The reply                                                                */

/* The base64 of ops' compact text as a JSON string (new reference), or NULL
 * with *rc set. */
static json_t *patch_base64(const json_t *ops, int *rc)
{
    gnutls_datum_t in, b64 = {NULL, 0};
    char *text = json_dumps(ops, JSON_COMPACT);
    json_t *s = NULL;

    if (text == NULL) {
        *rc = -ENOMEM;
        return NULL;
    }
    in.data = (unsigned char *)text;
    in.size = (unsigned)strlen(text);
    if (strlen(text) > PATCH_BYTES_MAX) {
        *rc = -EMSGSIZE;
    } else if (gnutls_base64_encode2(&in, &b64) != GNUTLS_E_SUCCESS) {
        *rc = -EINVAL;
    } else {
        s = json_stringn((const char *)b64.data, b64.size);
        *rc = s == NULL ? -ENOMEM : 0;
    }
    gnutls_free(b64.data);
    free(text);
    return s;
}

/* Set key in obj to v (stolen); false when out of memory. */
static bool put(json_t *obj, const char *key, json_t *v)
{
    return v != NULL && json_object_set_new(obj, key, v) == 0;
}

static json_t *build_response(const char *uid, const struct egpu__webhook_response *r, int *rc)
{
    json_t *resp = json_object();
    bool ok = resp != NULL && put(resp, "uid", json_string(uid)) &&
              put(resp, "allowed", json_boolean(r->allowed));

    *rc = 0;
    if (ok && !r->allowed) {
        json_t *st = json_object();

        ok = st != NULL && put(st, "metadata", json_object()) &&
             put(st, "status", json_string("Failure")) &&
             put(st, "message", json_string(r->message ? r->message : "")) &&
             put(st, "reason", json_string(r->reason ? r->reason : "")) &&
             put(st, "code", json_integer(r->code));
        ok = ok ? put(resp, "status", st) : (json_decref(st), false);
    }
    if (ok && r->patch != NULL && json_array_size(r->patch) > 0) {
        json_t *b64 = patch_base64(r->patch, rc);

        if (b64 == NULL) {
            json_decref(resp);
            return NULL;
        }
        ok = put(resp, "patch", b64) && put(resp, "patchType", json_string("JSONPatch"));
    }
    if (ok && r->audit != NULL && json_object_size(r->audit) > 0)
        ok = put(resp, "auditAnnotations", json_deep_copy(r->audit));
    if (ok && r->nwarnings > 0) {
        json_t *w = json_array();

        for (size_t i = 0; ok && w != NULL && i < r->nwarnings; i++)
            ok = json_array_append_new(w, json_string(r->warnings[i])) == 0;
        ok = ok && w != NULL ? put(resp, "warnings", w) : (json_decref(w), false);
    }
    if (!ok) {
        json_decref(resp);
        *rc = -ENOMEM;
        return NULL;
    }
    return resp;
}

int egpu__webhook_response_encode(const char *uid, const struct egpu__webhook_response *r,
                                  struct egpu_buf *out, struct egpu_error *err)
{
    json_t *doc = json_object(), *resp;
    char *text = NULL;
    int rc = 0;

    resp = build_response(uid, r, &rc);
    if (doc == NULL || resp == NULL ||
        !put(doc, "apiVersion", json_string(EGPU_WEBHOOK_REVIEW_API_VERSION)) ||
        !put(doc, "kind", json_string(EGPU_WEBHOOK_REVIEW_KIND)) ||
        json_object_set(doc, "response", resp))
        rc = rc ? rc : -ENOMEM;
    if (!rc) {
        text = json_dumps(doc, JSON_COMPACT);
        rc = text == NULL ? -ENOMEM : egpu_buf_append(out, text, strlen(text));
    }
    free(text);
    json_decref(resp);
    json_decref(doc);
    if (rc)
        return egpu_error_set(err, rc, "AdmissionReview reply: %s", egpu_strerror(rc));
    return 0;
}
