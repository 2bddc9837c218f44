/* kube/status.c - the API's Status object (meta/v1 Status) and what a
 * failed reply means to the caller.
 *
 * Every error reply of the kube-apiserver is a Status (api_protocol_notes.md,
 * "Status object"): code, reason, message. A proxy or a crashed server may
 * answer something else; then, as client-go's NewGenericServerResponse does,
 * the reason is derived from the HTTP status and the message is the start of
 * the body, so a caller always gets a filled struct and never crashes on a
 * malformed reply.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "kube_int.h"

struct code_reason {
    long code;
    const char *reason;
    const char *message;
};

static const struct code_reason generic[] = {
    {400, "BadRequest", "the server rejected our request for an unknown reason"},
    {401, "Unauthorized", "the server has asked for the client to provide credentials"},
    {403, "Forbidden", "the server does not allow access to the requested resource"},
    {404, "NotFound", "the server could not find the requested resource"},
    {405, "MethodNotAllowed", "the server does not allow this method on the requested resource"},
    {406, "NotAcceptable",
     "the server was unable to respond with a content type that the client supports"},
    {409, "Conflict", "the server reported a conflict"},
    {410, "Expired", "the resource version is too old"},
    {415, "UnsupportedMediaType", "the server does not support the media type of the request"},
    {422, "Invalid", "the server rejected our request due to an error in our request"},
    {429, "TooManyRequests",
     "the server has received too many requests and has asked us to try again later"},
    {500, "InternalError", "an error on the server has prevented the request from succeeding"},
    {503, "ServiceUnavailable", "the server is currently unable to handle the request"},
    {504, "Timeout", "the server was unable to return a response in the time allotted"},
};

static const struct code_reason *generic_for(long code)
{
    for (size_t i = 0; i < sizeof(generic) / sizeof(generic[0]); i++) {
        if (generic[i].code == code)
            return &generic[i];
    }
    return NULL;
}

/* Copy at most the first line-worth of text, control characters as spaces. */
static void copy_text(char *dst, size_t cap, const char *src, size_t len)
{
    size_t n = len < cap - 1 ? len : cap - 1;

    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)src[i];

        dst[i] = (c < 0x20 || c == 0x7f) ? ' ' : (char)c;
    }
    dst[n] = '\0';
}

int egpu__kube_status_from_json(const json_t *root, long http_code, struct egpu_kube_status *st)
{
    const char *kind = json_string_value(json_object_get(root, "kind"));
    json_t *v;

    memset(st, 0, sizeof(*st));
    st->code = (int)http_code;
    if (!json_is_object(root) || kind == NULL || strcmp(kind, "Status") != 0)
        return -EPROTO;
    v = json_object_get(root, "code");
    if (json_is_integer(v) && json_integer_value(v) > 0 && json_integer_value(v) < 1000)
        st->code = (int)json_integer_value(v);
    v = json_object_get(root, "reason");
    if (json_is_string(v))
        copy_text(st->reason, sizeof(st->reason), json_string_value(v), json_string_length(v));
    v = json_object_get(root, "message");
    if (json_is_string(v))
        copy_text(st->message, sizeof(st->message), json_string_value(v), json_string_length(v));
    return 0;
}

int egpu_kube_status_parse(const char *body, size_t len, long http_code,
                           struct egpu_kube_status *st)
{
    const struct code_reason *g = generic_for(http_code);
    json_t *root = NULL;
    int rc;

    if (body != NULL && len > 0)
        root = json_loadb(body, len, EGPU_KUBE_JSON_FLAGS, NULL);
    rc = egpu__kube_status_from_json(root, http_code, st);
    json_decref(root);
    if (rc == 0)
        return 0;
    if (g != NULL)
        snprintf(st->reason, sizeof(st->reason), "%s", g->reason);
    if (body != NULL && len > 0)
        copy_text(st->message, sizeof(st->message) > 201 ? 201 : sizeof(st->message), body, len);
    else if (g != NULL)
        snprintf(st->message, sizeof(st->message), "%s", g->message);
    else
        snprintf(st->message, sizeof(st->message), "unexpected HTTP status %ld", http_code);
    return -EPROTO;
}

int egpu_kube_status_errno(const struct egpu_kube_status *st)
{
    switch (st->code) {
    case 400:
    case 422:
        return -EINVAL;
    case 401:
        return -EACCES;
    case 403:
        return -EPERM;
    case 404:
        return -ENOENT;
    case 405:
        return -EOPNOTSUPP;
    case 409:
        return strcmp(st->reason, "AlreadyExists") == 0 ? -EEXIST : EGPU_KUBE_ECONFLICT;
    case 410:
        return EGPU_KUBE_EEXPIRED;
    case 415:
        return -ENOTSUP;
    case 429:
    case 503:
        return -EAGAIN;
    case 504:
        return -ETIMEDOUT;
    default:
        break;
    }
    if (st->code >= 400 && st->code < 500)
        return -EINVAL;
    if (st->code >= 500 && st->code < 600)
        return -EIO;
    return -EPROTO;
}
