/* webhook/handle.c - one AdmissionReview in, one reply out: the decoder,
 * the route's rules and the encoder, without I/O, so the HTTP server, the
 * unit tests and the fuzzer run the same path.
 *
 * A body with no request.uid to answer gets HTTP 400 with a plain-text
 * reason; a review that is wrong otherwise an AdmissionReview with
 * allowed: false, code 400 ("BadRequest") and the field named; a request
 * that breaks a rule allowed: false, code 403 ("Forbidden"), which the user
 * reads as `admission webhook "<name>" denied the request: <message>`.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "egpu/log.h"
#include "webhook_int.h"

const char *egpu_webhook_route_path(enum egpu_webhook_route r)
{
    switch (r) {
    case EGPU_WEBHOOK_MUTATE:
        return "/mutate";
    case EGPU_WEBHOOK_MUTATE_NVIDIA:
        return "/mutate-nvidia";
    case EGPU_WEBHOOK_VALIDATE:
        return "/validate";
    case EGPU_WEBHOOK_MUTATE_PLACE:
        return "/mutate-place";
    }
    return "/";
}

const char *egpu_webhook_route_name(enum egpu_webhook_route r)
{
    return egpu_webhook_route_path(r) + 1;
}

const char *egpu_webhook_result_name(enum egpu_webhook_result r)
{
    switch (r) {
    case EGPU_WEBHOOK_ALLOWED:
        return "allowed";
    case EGPU_WEBHOOK_PATCHED:
        return "patched";
    case EGPU_WEBHOOK_DENIED:
        return "denied";
    case EGPU_WEBHOOK_ERROR:
        return "error";
    }
    return "error";
}

static void set_type(struct egpu_webhook_reply *reply, int status, const char *type)
{
    reply->http_status = status;
    snprintf(reply->content_type, sizeof(reply->content_type), "%s", type);
}

static int answer(enum egpu_webhook_route r, const struct egpu__webhook_review *rv,
                  struct egpu__webhook_verdict *v, struct egpu_buf *out,
                  struct egpu_webhook_reply *reply)
{
    const char *warnings[EGPU_API_PROBLEMS_MAX];
    struct egpu__webhook_response resp = {.allowed = v->allowed,
                                          .code = v->code,
                                          .reason = v->reason,
                                          .message = v->message,
                                          .patch = v->ops,
                                          .warnings = warnings,
                                          .nwarnings = v->nwarnings};

    char uid[64], ns[64], name[128], user[128], kind[64], msg[1024];

    for (size_t i = 0; i < v->nwarnings; i++)
        warnings[i] = v->warnings[i];
    egpu__webhook_printable(uid, sizeof(uid), rv->uid);
    egpu__webhook_printable(ns, sizeof(ns), rv->ns);
    egpu__webhook_printable(name, sizeof(name), rv->name);
    egpu__webhook_printable(user, sizeof(user), rv->username);
    egpu__webhook_printable(kind, sizeof(kind), rv->kind);
    egpu__webhook_printable(msg, sizeof(msg), v->message);
    reply->result = !v->allowed ? EGPU_WEBHOOK_DENIED
                    : v->ops    ? EGPU_WEBHOOK_PATCHED
                                : EGPU_WEBHOOK_ALLOWED;
    reply->nconverted = v->nconverted;
    memcpy(reply->converted, v->converted, sizeof(reply->converted));
    if (!v->allowed)
        egpu_log(EGPU_LOG_INFO,
                 "denied route=%s uid=%s kind=%s object=%s/%s op=%d user=\"%s\" dry_run=%d "
                 "message=\"%s\"",
                 egpu_webhook_route_name(r), uid, kind, ns, name, (int)rv->op, user, rv->dry_run,
                 msg);
    else if (v->ops) /* the common case: counted in /metrics, logged at debug level */
        egpu_log(EGPU_LOG_DEBUG,
                 "patched route=%s uid=%s kind=%s object=%s/%s ops=%zu converted=%zu dry_run=%d",
                 egpu_webhook_route_name(r), uid, kind, ns, name, json_array_size(v->ops),
                 v->nconverted, rv->dry_run);
    return egpu__webhook_response_encode(rv->uid, &resp, out, NULL);
}

int egpu_webhook_handle(const struct egpu_webhook_config *cfg, enum egpu_webhook_route r,
                        const struct egpu_api_facts *facts, const char *body, size_t len,
                        struct egpu_buf *out, struct egpu_webhook_reply *reply)
{
    struct egpu_error err = {0};
    struct egpu__webhook_review rv;
    struct egpu__webhook_verdict *v;
    int rc;

    memset(reply, 0, sizeof(*reply));
    set_type(reply, 200, "application/json");
    rc = egpu__webhook_review_decode(body, len, &rv, &err);
    if (rc == EGPU_ESYNTAX) {
        reply->result = EGPU_WEBHOOK_ERROR;
        set_type(reply, 400, "text/plain; charset=utf-8");
        egpu_log(EGPU_LOG_WARN, "bad request route=%s error=\"%s\"", egpu_webhook_route_name(r),
                 err.msg);
        return egpu_buf_printf(out, "%s\n", err.msg);
    }
    if (rc == EGPU_ERANGE) {
        struct egpu__webhook_response resp = {
            .allowed = false, .code = 400, .reason = "BadRequest", .message = err.msg};

        char uid[64], msg[EGPU_ERRMSG_MAX];

        reply->result = EGPU_WEBHOOK_ERROR;
        egpu__webhook_printable(uid, sizeof(uid), rv.uid);
        egpu__webhook_printable(msg, sizeof(msg), err.msg);
        egpu_log(EGPU_LOG_WARN, "bad review route=%s uid=%s error=\"%s\"",
                 egpu_webhook_route_name(r), uid, msg);
        rc = egpu__webhook_response_encode(rv.uid, &resp, out, NULL);
        egpu__webhook_review_free(&rv);
        return rc;
    }
    if (rc) {
        egpu__webhook_review_free(&rv);
        return rc;
    }
    v = egpu_malloc(sizeof(*v)); /* about 10 KiB of message and warnings */
    if (v == NULL) {
        egpu__webhook_review_free(&rv);
        return -ENOMEM;
    }
    if (r == EGPU_WEBHOOK_VALIDATE)
        rc = egpu__webhook_validate(cfg, facts, &rv, v);
    else if (r == EGPU_WEBHOOK_MUTATE_PLACE)
        rc = egpu__webhook_place(cfg, &rv, v);
    else
        rc = egpu__webhook_mutate(cfg, facts, r == EGPU_WEBHOOK_MUTATE_NVIDIA || cfg->compat_nvidia,
                                  &rv, v);
    if (!rc)
        rc = answer(r, &rv, v, out, reply);
    egpu__webhook_verdict_free(v);
    egpu_free(v);
    egpu__webhook_review_free(&rv);
    return rc;
}
