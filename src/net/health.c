/* net/health.c - /healthz, /readyz and /metrics on a component's HTTP
 * server, and the server's own request metrics (see egpu/net.h).
 *
 * DESIGN: /healthz answers "ok" whenever a pool thread can run a handler,
 * which is what a kubelet liveness probe should test: a wedged process
 * stops answering, a merely unready one does not. /readyz asks the
 * component (its callback) so a readiness probe can take the pod out of a
 * Service while, for example, the scheduler's cache is still syncing; the
 * reason goes into the 503 body, which `kubectl describe pod` shows.
 * /metrics renders the registry on each scrape; nothing is cached.
 *
 * Request metrics are labelled by the matched route, never by the raw
 * path, so a scanner probing random URLs cannot grow the registry:
 * unmatched requests share path="unmatched".
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "egpu/net.h"

#define READY_WHY_MAX 256 /* readiness reason, bytes incl. NUL */

struct egpu_health {
    struct egpu_metrics *reg;
    egpu_ready_cb ready;
    void *data;
    struct egpu_metric *requests; /* egpu_http_requests_total{path,code} */
    struct egpu_metric *duration; /* egpu_http_request_duration_seconds{path} */
};

static int on_healthz(void *data, const struct egpu_http_request *req,
                      struct egpu_http_response *resp)
{
    (void)data;
    (void)req;
    return egpu_http_response_text(resp, 200, "ok");
}

static int on_readyz(void *data, const struct egpu_http_request *req,
                     struct egpu_http_response *resp)
{
    struct egpu_health *h = data;
    char why[READY_WHY_MAX] = "";

    (void)req;
    if (h->ready == NULL || h->ready(h->data, why, sizeof(why)))
        return egpu_http_response_text(resp, 200, "ok");
    why[sizeof(why) - 1] = '\0';
    for (char *p = why; *p; p++) {
        if (*p == '\n' || *p == '\r')
            *p = ' '; /* one line */
    }
    if (why[0] == '\0')
        return egpu_http_response_text(resp, 503, "not ready");
    return egpu_http_response_text(resp, 503, "not ready: %s", why);
}

static int on_metrics(void *data, const struct egpu_http_request *req,
                      struct egpu_http_response *resp)
{
    struct egpu_health *h = data;
    int rc;

    (void)req;
    rc = egpu_http_response_set_type(resp, EGPU_METRICS_CONTENT_TYPE);
    if (rc == 0)
        rc = egpu_metrics_render(h->reg, &resp->body);
    return rc;
}

static void on_request_done(void *data, const char *route, int status, double seconds)
{
    struct egpu_health *h = data;
    char code[16];
    const char *path = route ? route : "unmatched";

    snprintf(code, sizeof(code), "%d", status);
    /* A lost sample only makes a counter lag; it must not touch serving. */
    egpu_metric_inc(h->requests, (const char *const[]){path, code});
    egpu_metric_observe(h->duration, (const char *const[]){path}, seconds);
}

static const char *const paths[] = {"/healthz", "/readyz", "/metrics"};
static const egpu_http_handler_cb handlers[] = {on_healthz, on_readyz, on_metrics};

int egpu_health_new(struct egpu_http_server *srv, struct egpu_metrics *reg, egpu_ready_cb ready,
                    void *data, struct egpu_health **out, struct egpu_error *err)
{
    static const char *const req_labels[] = {"path", "code"};
    static const char *const dur_labels[] = {"path"};
    struct egpu_health *h;
    size_t nroutes = reg ? 3 : 2, i;
    int rc;

    h = egpu_calloc(1, sizeof(*h));
    if (h == NULL)
        return egpu_error_set(err, -ENOMEM, "health endpoints: out of memory");
    h->reg = reg;
    h->ready = ready;
    h->data = data;
    if (reg != NULL) {
        rc = egpu_metric_counter(reg, "egpu_http_requests_total",
                                 "HTTP requests answered, by matched route and status code.", 2,
                                 req_labels, &h->requests);
        if (rc != 0) {
            egpu_error_set(err, rc, "register egpu_http_requests_total: %s", egpu_strerror(rc));
            goto out_free;
        }
        rc = egpu_metric_histogram(reg, "egpu_http_request_duration_seconds",
                                   "Time from request line to end of response, by matched route.",
                                   1, dur_labels, EGPU_METRIC_DEFAULT_NBUCKETS,
                                   egpu_metric_default_buckets, &h->duration);
        if (rc != 0) {
            egpu_error_set(err, rc, "register egpu_http_request_duration_seconds: %s",
                           egpu_strerror(rc));
            goto out_free;
        }
    }
    for (i = 0; i < nroutes; i++) {
        rc = egpu_http_server_route(srv, "GET", paths[i], handlers[i], h);
        if (rc != 0) {
            egpu_error_set(err, rc, "route GET %s: %s", paths[i], egpu_strerror(rc));
            goto out_unroute;
        }
    }
    if (reg != NULL) {
        rc = egpu_http_server_observe(srv, on_request_done, h);
        if (rc != 0) {
            egpu_error_set(err, rc, "observe requests: %s", egpu_strerror(rc));
            goto out_unroute;
        }
    }
    *out = h;
    return 0;

out_unroute:
    while (i-- > 0) {
        if (egpu_http_server_unroute(srv, "GET", paths[i]) != 0)
            continue; /* cannot happen: we routed it and the server is stopped */
    }
out_free:
    egpu_free(h);
    return rc;
}

void egpu_health_free(struct egpu_health *h)
{
    egpu_free(h);
}
