/* controller/writes.c - how egpu-controller writes: whole-object PUTs
 * guarded by resourceVersion (so a write made from a stale cache fails with
 * 409 and the key is retried, never overwriting a newer state), events, and
 * reading cached objects through src/api's decoders. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "controller_int.h"
#include "egpu/log.h"

int egpu__controller_put(struct egpu__controller *c, const struct egpu_kube_resource *res,
                         const json_t *orig, const json_t *enc, const char *which, json_t **out)
{
    json_t *obj = json_deep_copy(orig), *meta, *v, *obj_part;
    const char *ns = egpu_api_str(json_object_get(json_object_get(orig, "metadata"), "namespace"));
    const char *name = egpu_api_str(json_object_get(json_object_get(orig, "metadata"), "name"));
    struct egpu_kube_status st = {0};
    struct egpu_error err = {0};
    bool status = strcmp(which, "status") == 0;
    int rc;

    if (obj == NULL || name == NULL)
        goto nomem;
    meta = json_object_get(obj, "metadata");
    if (strcmp(which, "finalizers") == 0 || strcmp(which, "annotations") == 0) {
        obj_part = meta;
        v = json_object_get(json_object_get(enc, "metadata"), which);
    } else {
        obj_part = obj;
        v = json_object_get(enc, which);
    }
    if (v != NULL ? json_object_set(obj_part, which, v) != 0 : false)
        goto nomem;
    if (v == NULL)
        (void)json_object_del(obj_part, which); /* absent in both: nothing to drop */
    rc = status ? egpu_kube_update_status(c->kube, res, ns, name, obj, out, &st, &err)
                : egpu_kube_update(c->kube, res, ns, name, obj, out, &st, &err);
    json_decref(obj);
    if (rc)
        egpu_log(rc == EGPU_KUBE_ECONFLICT ? EGPU_LOG_DEBUG : EGPU_LOG_WARN,
                 "write failed object=%s%s%s part=%s error=\"%s\"", ns ? ns : "", ns ? "/" : "",
                 name, which, err.msg);
    return rc;
nomem:
    json_decref(obj);
    return -ENOMEM;
}

void egpu__controller_event(struct egpu__controller *c, const char *kind, const char *ns,
                            const char *name, const char *uid, bool warning, const char *reason,
                            const char *fmt, ...)
{
    char msg[1024];
    struct egpu_error err = {0};
    struct egpu_kube_event ev = {.kind = kind,
                                 /* core/v1 for a Pod (dra.c), else ours */
                                 .api_version = strcmp(kind, "Pod") == 0 ? "v1" : EGPU_API_VERSION,
                                 .involved_ns = ns,
                                 .name = name,
                                 .uid = uid != NULL && uid[0] ? uid : NULL,
                                 .warning = warning,
                                 .reason = reason,
                                 .message = msg,
                                 .component = EGPU__CONTROLLER_PROG};
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    egpu_log(warning ? EGPU_LOG_WARN : EGPU_LOG_INFO, "event kind=%s object=%s%s%s reason=%s %s",
             kind, ns ? ns : "", ns && ns[0] ? "/" : "", name, reason, msg);
    if (egpu_kube_event_post(c->kube, &ev, &err) != 0)
        egpu_log(EGPU_LOG_WARN, "event not posted object=%s reason=%s error=\"%s\"", name, reason,
                 err.msg);
}

void egpu__controller_now(char *buf, size_t len)
{
    time_t t = time(NULL);
    struct tm tm;

    gmtime_r(&t, &tm);
    strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

struct egpu_api_egpu *egpu__controller_egpu_get(struct egpu__controller *c, const char *name,
                                                json_t **obj)
{
    json_t *o = egpu_kube_informer_get(c->inf[EGPU__CONTROLLER_EGPUS], NULL, name);
    struct egpu_api_egpu *e;
    struct egpu_error err = {0};

    if (o == NULL)
        return NULL;
    e = egpu_malloc(sizeof(*e));
    if (e == NULL || egpu_api_egpu_decode(o, e, &err) != 0) {
        if (e != NULL)
            egpu_log(EGPU_LOG_WARN, "ElasticGPU %s left alone: %s", name, err.msg);
        egpu_free(e);
        json_decref(o);
        return NULL;
    }
    if (obj != NULL)
        *obj = o;
    else
        json_decref(o);
    return e;
}

struct egpu_api_claim *egpu__controller_claim_get(struct egpu__controller *c, const char *ns,
                                                  const char *name, json_t **obj)
{
    json_t *o = egpu_kube_informer_get(c->inf[EGPU__CONTROLLER_CLAIMS], ns, name);
    struct egpu_api_claim *cl;
    struct egpu_error err = {0};

    if (o == NULL)
        return NULL;
    cl = egpu_malloc(sizeof(*cl));
    if (cl == NULL || egpu_api_claim_decode(o, cl, &err) != 0) {
        if (cl != NULL)
            egpu_log(EGPU_LOG_WARN, "ElasticGPUClaim %s/%s left alone: %s", ns, name, err.msg);
        egpu_free(cl);
        json_decref(o);
        return NULL;
    }
    if (obj != NULL)
        *obj = o;
    else
        json_decref(o);
    return cl;
}

const char *egpu__controller_gpu_model(struct egpu__controller *c, const char *name, char *buf,
                                       size_t len)
{
    json_t *g = egpu_kube_informer_get(c->inf[EGPU__CONTROLLER_GPUS], NULL, name);
    const char *m = egpu_api_str(json_object_get(json_object_get(g, "spec"), "model"));

    snprintf(buf, len, "%s", m != NULL ? m : "");
    json_decref(g);
    return buf;
}
