/* webhook/main.c - egpu-webhook: the AdmissionReview routes over HTTPS, the
 * GPU facts from an informer, the ElasticGPUClaims pods use from another
 * (with a live GET on a miss), the GPUBudgets and PriorityClasses from two
 * more, and the health endpoints.
 *
 * Threads: requests run on the HTTPS server's pool threads (egpu_webhook_
 * handle has no shared state but the facts snapshot, taken by reference);
 * the informers feed the facts and the claims' cache on their own threads
 * (a claim lookup on a pool thread reads that cache, or GETs the claim
 * through the shared client); the main thread only
 * waits, refreshing the GPU gauges every 200 ms. SIGTERM or SIGINT stops
 * it: both servers stop (requests in flight end), the informers stop, and
 * it exits 0. The servers, the probes, the signals and that order are
 * src/net/service.c's, as in every component. With --self-signed, the
 * serving certificate is made or read from its Secret before the HTTPS
 * server starts, and selfsigned.c's thread keeps it, and the
 * configurations' caBundle, current.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "egpu/kube.h"
#include "egpu/log.h"
#include "egpu/net.h"
#include "egpu/webhook.h"
#include "webhook_int.h"

/* A live GET of a claim gives up after this long, below the API server's
 * 5 s timeoutSeconds for the webhook (deploy/webhook/webhooks.yaml), so the
 * user reads why the pod was refused, and a hanging API server holds an
 * HTTPS thread no longer than that. */
#define LOOKUP_TIMEOUT_MS 3000

struct app;

struct route_ctx {
    struct app *a;
    enum egpu_webhook_route r;
};

struct app {
    struct egpu__webhook_options o;
    struct egpu_kube_config *kcfg;
    struct egpu_kube *kube;
    struct egpu_kube *lookup; /* the live GETs of claims, with a short timeout */
    struct egpu__webhook_facts *facts;
    struct egpu_kube_informer *inf;         /* GPU objects: the facts */
    struct egpu_kube_informer *claims_inf;  /* ElasticGPUClaims: what pods use */
    struct egpu_webhook_claims claims;      /* the lookup /mutate calls (claim_get) */
    struct egpu_kube_informer *budgets_inf; /* GPUBudgets, all namespaces */
    struct egpu_kube_informer *classes_inf; /* PriorityClasses */
    struct egpu_webhook_budgets budgets;    /* budget_list, class_get */
    struct egpu_kube_informer *egpus_inf;   /* ElasticGPUs: the Released ones count */
    struct egpu_webhook_quota quota;        /* quota_list: claims against quotas */
    struct egpu__webhook_selfsigned *ss;    /* --self-signed: the certificate's keeper */
    struct egpu_service svc; /* HTTPS: the routes, /healthz, /readyz; HTTP: the probes */
    struct egpu_metrics *reg;
    struct egpu_metric *m_requests, *m_conversions, *m_gpus, *m_largest, *m_models;
    struct route_ctx routes[EGPU_WEBHOOK_ROUTES];
};

static int on_review(void *data, const struct egpu_http_request *req,
                     struct egpu_http_response *resp)
{
    struct route_ctx *rc_ = data;
    struct app *a = rc_->a;
    const struct egpu__webhook_facts_snap *snap = NULL;
    struct egpu_webhook_reply reply;
    const char *labels[2];
    int rc;

    if (rc_->r == EGPU_WEBHOOK_VALIDATE)
        snap = egpu__webhook_facts_get(a->facts);
    rc = egpu_webhook_handle(&a->o.cfg, rc_->r, snap ? &snap->facts : NULL, req->body,
                             req->body_len, &resp->body, &reply);
    egpu__webhook_facts_put(snap);
    labels[0] = egpu_webhook_route_name(rc_->r);
    if (rc) {
        labels[1] = egpu_webhook_result_name(EGPU_WEBHOOK_ERROR);
        (void)egpu_metric_inc(a->m_requests, labels);
        egpu_log(EGPU_LOG_ERROR, "request failed route=%s error=\"%s\"", labels[0],
                 egpu_strerror(rc));
        return rc; /* 500: the API server applies failurePolicy */
    }
    labels[1] = egpu_webhook_result_name(reply.result);
    (void)egpu_metric_inc(a->m_requests, labels);
    for (size_t i = 0; i < reply.nconverted; i++)
        (void)egpu_metric_inc(a->m_conversions, (const char *const[]){reply.converted[i]});
    resp->status = reply.http_status;
    return egpu_http_response_set_type(resp, reply.content_type);
}

/* The claims' lookup (egpu_webhook_claims.get): the informer's cache, or a
 * live GET when fresh. Any thread. */
static int claim_get(void *ud, const char *ns, const char *name, bool fresh, json_t **out,
                     struct egpu_error *err)
{
    struct app *a = ud;

    if (!fresh) {
        *out = egpu_kube_informer_get(a->claims_inf, ns, name);
        return *out != NULL ? 0 : -ENOENT;
    }
    return egpu_kube_get(a->lookup, &egpu_kube_elasticgpuclaims, ns, name, out, NULL, err);
}

/* The GPUBudgets of namespace ns (egpu_webhook_budgets.list): those of the
 * informer's cache in ns. Any thread. */
static int budget_list(void *ud, const char *ns, json_t **out, struct egpu_error *err)
{
    struct app *a = ud;
    json_t *all = egpu_kube_informer_list(a->budgets_inf), *mine = json_array();
    const json_t *obj;
    size_t i;

    (void)err;
    if (all == NULL || mine == NULL) {
        json_decref(all);
        json_decref(mine);
        return -ENOMEM;
    }
    json_array_foreach(all, i, obj)
    {
        const char *bns =
            egpu_kube_str(json_object_get(json_object_get(obj, "metadata"), "namespace"));

        if (bns != NULL && strcmp(bns, ns) == 0 &&
            json_array_append(mine, (json_t *)(uintptr_t)obj) != 0) {
            json_decref(all);
            json_decref(mine);
            return -ENOMEM;
        }
    }
    json_decref(all);
    *out = mine;
    return 0;
}

/* A PriorityClass from the informer's cache (egpu_webhook_budgets.
 * priority_class). Any thread. */
static int class_get(void *ud, const char *name, json_t **out, struct egpu_error *err)
{
    struct app *a = ud;

    (void)err;
    *out = egpu_kube_informer_get(a->classes_inf, NULL, name);
    return *out != NULL ? 0 : -ENOENT;
}

/* What a namespace holds against its quotas (egpu_webhook_quota.list): a
 * live LIST of its ResourceQuotas, claims or pods; ElasticGPUs from the
 * informer's cache. Any thread. */
static int quota_list(void *ud, enum egpu_webhook_quota_list what, const char *ns, json_t **out,
                      struct egpu_error *err)
{
    static const struct egpu_kube_resource *const res[] = {
        [EGPU_WEBHOOK_LIST_QUOTAS] = &egpu_kube_resourcequotas,
        [EGPU_WEBHOOK_LIST_CLAIMS] = &egpu_kube_elasticgpuclaims,
        [EGPU_WEBHOOK_LIST_PODS] = &egpu_kube_pods,
        [EGPU_WEBHOOK_LIST_RESOURCECLAIMS] = &egpu_kube_resourceclaims,
    };
    struct app *a = ud;
    json_t *list = NULL, *items;
    int rc;

    if (what == EGPU_WEBHOOK_LIST_ELASTICGPUS) {
        *out = egpu_kube_informer_list(a->egpus_inf);
        return *out != NULL ? 0 : -ENOMEM;
    }
    if ((unsigned)what >= sizeof(res) / sizeof(res[0]) || res[what] == NULL)
        return -EINVAL;
    rc = egpu_kube_list(a->lookup, res[what], ns, NULL, &list, NULL, err);
    if (rc)
        return rc;
    items = json_object_get(list, "items");
    *out = json_is_array(items) ? json_incref(items) : json_array();
    json_decref(list);
    return *out != NULL ? 0 : -ENOMEM;
}

static bool ready(void *data, char *why, size_t len)
{
    static const char *const kind[] = {"GPU", "ElasticGPUClaim", "GPUBudget", "PriorityClass",
                                       "ElasticGPU"};
    static const char *const listed[] = {"GPU objects", "ElasticGPUClaims", "GPUBudgets",
                                         "PriorityClasses", "ElasticGPUs"};
    struct app *a = data;
    struct egpu_kube_informer *infs[] = {a->inf, a->claims_inf, a->budgets_inf, a->classes_inf,
                                         a->egpus_inf};

    for (size_t i = 0; i < sizeof(infs) / sizeof(infs[0]); i++) {
        if (!egpu_kube_informer_has_synced(infs[i])) {
            snprintf(why, len, "%s not listed yet", listed[i]);
            return false;
        }
    }
    if (!egpu_kube_informers_healthy(infs, kind, 4, a->o.srv.watch_unhealthy_ms, why, len))
        return false;
    snprintf(why, len, "ok");
    return true;
}

static int register_metrics(struct app *a, struct egpu_error *err)
{
    static const char *const route_result[] = {"route", "result"};
    static const char *const name[] = {"name"};
    const struct egpu_service_metric m[] = {
        {EGPU_SERVICE_COUNTER, "egpu_webhook_admission_requests_total",
         "AdmissionReviews answered, by route (mutate, mutate-nvidia, validate, mutate-place) and "
         "result (allowed, patched, denied, error).",
         2, route_result, 0, NULL, &a->m_requests},
        {EGPU_SERVICE_COUNTER, "egpu_webhook_conversions_total",
         "Pods and templates whose compatible name was rewritten into an elasticgpu.io one, by "
         "that name.",
         1, name, 0, NULL, &a->m_conversions},
        {EGPU_SERVICE_GAUGE, "egpu_webhook_gpus", "GPU objects known (" EGPU_API_VERSION " gpus).",
         0, NULL, 0, NULL, &a->m_gpus},
        {EGPU_SERVICE_GAUGE, "egpu_webhook_largest_card_mib",
         "Memory of the largest GPU known, MiB (gpu-memory above it is refused; 0 = none known, "
         "not checked).",
         0, NULL, 0, NULL, &a->m_largest},
        {EGPU_SERVICE_GAUGE, "egpu_webhook_gpu_models",
         "GPU models known (elasticgpu.io/gpu-model must name one).", 0, NULL, 0, NULL,
         &a->m_models},
    };

    return egpu_service_metrics_new(m, sizeof(m) / sizeof(m[0]), &a->reg, err);
}

static void refresh_metrics(void *data)
{
    struct app *a = data;
    const struct egpu__webhook_facts_snap *s = egpu__webhook_facts_get(a->facts);

    if (s == NULL)
        return;
    (void)egpu_metric_set(a->m_gpus, NULL, (double)s->ncards);
    (void)egpu_metric_set(a->m_largest, NULL, (double)s->facts.max_card_mib);
    (void)egpu_metric_set(a->m_models, NULL, (double)s->facts.nmodels);
    egpu__webhook_facts_put(s);
}

static int start(void *data, struct egpu_error *err)
{
    struct app *a = data;
    struct egpu_service_config sc = {.opts = &a->o.srv,
                                     .own_server = true,
                                     .health_on_own = true, /* probes over HTTPS too */
                                     /* reviews are small: see conn_memory_bytes in net.h */
                                     .conn_memory_bytes = 32 * 1024,
                                     .ready = ready,
                                     .data = a};
    /* Streaming lists (kube.h's stream_list): every GPU object of the cluster
     * costs the API server far less streamed than paged. */
    struct egpu_kube_informer_opts io = {.res = &egpu_kube_gpus, .stream_list = true};
    struct egpu_kube_informer_opts cio = {.res = &egpu_kube_elasticgpuclaims, .stream_list = true};
    struct egpu_kube_informer_opts bio = {.res = &egpu_kube_gpubudgets, .stream_list = true};
    struct egpu_kube_informer_opts pio = {.res = &egpu_kube_priorityclasses, .stream_list = true};
    struct egpu_kube_informer_opts eio = {.res = &egpu_kube_elasticgpus, .stream_list = true};
    struct egpu_kube_informer_cbs ccbs = {0}; /* read by lookups, nothing to follow */
    struct egpu_kube_informer_cbs cbs = {.on_add = egpu__webhook_facts_on_add,
                                         .on_update = egpu__webhook_facts_on_update,
                                         .on_delete = egpu__webhook_facts_on_delete};
    int rc;

    rc = egpu_kube_config_load(a->o.srv.kubeconfig, a->o.srv.context, &a->kcfg, err);
    if (!rc)
        rc = egpu_kube_new(a->kcfg, &a->kube, err);
    if (!rc) { /* a copy of the config, with the lookup's timeout */
        long timeout_ms = a->kcfg->timeout_ms;

        a->kcfg->timeout_ms = LOOKUP_TIMEOUT_MS;
        rc = egpu_kube_new(a->kcfg, &a->lookup, err);
        a->kcfg->timeout_ms = timeout_ms;
    }
    if (rc)
        return rc;
    a->facts = egpu__webhook_facts_new();
    if (a->facts == NULL)
        return egpu_error_set(err, -ENOMEM, "facts: out of memory");
    cbs.ud = a->facts;
    rc = egpu_kube_informer_new(a->kube, &io, &cbs, &a->inf, err);
    if (!rc)
        rc = egpu_kube_informer_new(a->kube, &cio, &ccbs, &a->claims_inf, err);
    if (!rc)
        rc = egpu_kube_informer_new(a->kube, &bio, &ccbs, &a->budgets_inf, err);
    if (!rc)
        rc = egpu_kube_informer_new(a->kube, &pio, &ccbs, &a->classes_inf, err);
    if (!rc)
        rc = egpu_kube_informer_new(a->kube, &eio, &ccbs, &a->egpus_inf, err);
    a->claims = (struct egpu_webhook_claims){.get = claim_get, .ud = a};
    a->o.cfg.claims = &a->claims;
    a->budgets =
        (struct egpu_webhook_budgets){.list = budget_list, .priority_class = class_get, .ud = a};
    a->o.cfg.budgets = &a->budgets;
    a->quota = (struct egpu_webhook_quota){.list = quota_list, .ud = a};
    a->o.cfg.quota = &a->quota;
    /* --self-signed: the files exist before the HTTPS server reads them */
    if (!rc && a->o.ss.enabled)
        rc = egpu__webhook_selfsigned_new(&a->o.ss, a->kube, a->o.srv.tls_cert, a->o.srv.tls_key,
                                          &a->ss, err);
    if (!rc)
        rc = register_metrics(a, err);
    sc.reg = a->reg;
    if (!rc)
        rc = egpu_service_new(&sc, &a->svc, err);
    for (int r = 0; rc == 0 && r < EGPU_WEBHOOK_ROUTES; r++) {
        const char *path = egpu_webhook_route_path((enum egpu_webhook_route)r);

        a->routes[r] = (struct route_ctx){a, (enum egpu_webhook_route)r};
        rc = egpu_http_server_route(a->svc.srv, "POST", path, on_review, &a->routes[r]);
        if (rc)
            egpu_error_set(err, rc, "route %s: %s", path, egpu_strerror(rc));
    }
    if (!rc)
        rc = egpu_kube_informer_start(a->inf, err);
    if (!rc)
        rc = egpu_kube_informer_start(a->claims_inf, err);
    if (!rc)
        rc = egpu_kube_informer_start(a->budgets_inf, err);
    if (!rc)
        rc = egpu_kube_informer_start(a->classes_inf, err);
    if (!rc)
        rc = egpu_kube_informer_start(a->egpus_inf, err);
    if (!rc)
        rc = egpu_service_start(&a->svc, err);
    if (!rc && a->ss != NULL)
        rc = egpu__webhook_selfsigned_start(a->ss, err);
    if (!rc)
        egpu_log(EGPU_LOG_NOTICE,
                 "serving addr=%s port=%u health_addr=%s health_port=%u mode=%s scheduler_name=%s "
                 "set_scheduler_name=%s compat_nvidia=%s aliyun_gpu_mem_mib=%u "
                 "memory_only_core=%u default_memory_per_core_mib=%u controller_user=%s",
                 a->o.srv.listen, egpu_http_server_port(a->svc.srv), a->o.srv.health_listen,
                 egpu_http_server_port(a->svc.hsrv),
                 a->o.cfg.mode == EGPU_WEBHOOK_MODE_DRA ? "dra" : "device-plugin",
                 a->o.cfg.scheduler_name, a->o.cfg.set_scheduler_name ? "true" : "false",
                 a->o.cfg.compat_nvidia ? "true" : "false", a->o.cfg.aliyun_mem_mib,
                 a->o.cfg.memory_only_core, a->o.cfg.default_mem_per_core,
                 a->o.cfg.controller_user);
    return rc;
}

static void finish(void *data)
{
    struct app *a = data;

    egpu_service_stop(&a->svc);
    egpu__webhook_selfsigned_free(a->ss);
    egpu_kube_informer_free(a->inf);
    egpu_kube_informer_free(a->claims_inf);
    egpu_kube_informer_free(a->budgets_inf);
    egpu_kube_informer_free(a->egpus_inf);
    egpu_kube_informer_free(a->classes_inf);
    egpu_service_free(&a->svc);
    egpu_metrics_free(a->reg);
    egpu__webhook_facts_free(a->facts);
    egpu_kube_free(a->lookup);
    egpu_kube_free(a->kube);
    egpu_kube_config_free(a->kcfg);
}

int main(int argc, char **argv)
{
    static struct app a;
    struct egpu_service_main m = {.prog = "egpu-webhook",
                                  .start = start,
                                  .tick = refresh_metrics,
                                  .tick_ms = 200,
                                  .finish = finish};
    int status = egpu__webhook_options_parse(argc, argv, &a.o);

    if (status >= 0)
        return status;
    m.log_level = a.o.srv.log_level;
    return egpu_service_main(&m, &a);
}
