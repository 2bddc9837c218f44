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
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "egpu/net.h"

#define READY_WHY_MAX 256 /* readiness reason, bytes incl. NUL */
#define SERVERS_MAX   4   /* servers whose connections one registry counts */

struct egpu_health {
    struct egpu_metrics *reg;
    egpu_ready_cb ready;
    void *data;
    struct egpu_metric *requests;  /* egpu_http_requests_total{path,code} */
    struct egpu_metric *duration;  /* egpu_http_request_duration_seconds{path} */
    struct egpu_metric *refused;   /* egpu_http_connections_refused_total{reason} */
    struct egpu_metric *timed_out; /* egpu_http_connections_timed_out_total{reason} */
    struct egpu_metric *open;      /* egpu_http_connections_open */
    /* TLS families, registered with the first server that serves HTTPS. */
    struct egpu_metric *tls_reloads;  /* egpu_http_tls_reloads_total */
    struct egpu_metric *tls_failures; /* egpu_http_tls_reload_failures_total */
    struct egpu_metric *tls_expiry;   /* egpu_http_tls_certificate_expiry_timestamp_seconds */
    struct egpu_metric *tls_refused;  /* egpu_http_tls_clients_refused_total */
    pthread_mutex_t lock;             /* guards servers and seen */
    struct egpu_http_server *servers[SERVERS_MAX];
    struct egpu_http_conn_stats seen[SERVERS_MAX];    /* counts already added */
    struct egpu_http_tls_stats seen_tls[SERVERS_MAX]; /* generation 0: no TLS */
    size_t nservers;
};

/* Bring the connection metrics up to the servers' counts (on each scrape). */
static void sync_connections(struct egpu_health *h)
{
    unsigned open = 0;
    int64_t expiry = INT64_MAX;

    pthread_mutex_lock(&h->lock);
    for (size_t i = 0; i < h->nservers; i++) {
        struct egpu_http_conn_stats now, *was = &h->seen[i];

        egpu_http_server_conn_stats(h->servers[i], &now);
        egpu_metric_add(h->refused, (const char *const[]){"total"},
                        (double)(now.refused_total - was->refused_total));
        egpu_metric_add(h->refused, (const char *const[]){"per_client"},
                        (double)(now.refused_per_client - was->refused_per_client));
        egpu_metric_add(h->timed_out, (const char *const[]){"idle"},
                        (double)(now.timed_out_idle - was->timed_out_idle));
        egpu_metric_add(h->timed_out, (const char *const[]){"slow"},
                        (double)(now.timed_out_slow - was->timed_out_slow));
        egpu_metric_add(h->timed_out, (const char *const[]){"handshake"},
                        (double)(now.timed_out_handshake - was->timed_out_handshake));
        open += now.open;
        *was = now;
    }
    for (size_t i = 0; i < h->nservers; i++) {
        struct egpu_http_tls_stats now, *was = &h->seen_tls[i];

        if (was->generation == 0)
            continue;
        egpu_http_server_tls_stats(h->servers[i], &now);
        egpu_metric_add(h->tls_reloads, NULL,
                        (double)(now.reloads - was->reloads + now.ca_reloads - was->ca_reloads));
        egpu_metric_add(h->tls_failures, NULL,
                        (double)(now.reload_failures - was->reload_failures + now.ca_failures -
                                 was->ca_failures));
        egpu_metric_add(h->tls_refused, NULL, (double)(now.clients_refused - was->clients_refused));
        if (now.not_after_s < expiry)
            expiry = now.not_after_s;
        *was = now;
    }
    pthread_mutex_unlock(&h->lock);
    egpu_metric_set(h->open, NULL, (double)open);
    if (h->tls_expiry != NULL && expiry != INT64_MAX)
        egpu_metric_set(h->tls_expiry, NULL, (double)expiry);
}

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
    sync_connections(h);
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

/* The connection families, each child at 0 from the start so that a rate
 * or an alert on them has a series before the first event. */
static int register_connections(struct egpu_health *h, struct egpu_error *err)
{
    static const char *const reason[] = {"reason"};
    int rc;

    rc = egpu_metric_counter(h->reg, "egpu_http_connections_refused_total",
                             "Connections closed on arrival because the server's limit on open "
                             "connections was reached: in total (total) or from one client "
                             "address (per_client).",
                             1, reason, &h->refused);
    if (rc == 0)
        rc = egpu_metric_counter(h->reg, "egpu_http_connections_timed_out_total",
                                 "Connections closed because they sat idle past the idle timeout "
                                 "(idle), their request had not fully arrived within the "
                                 "request timeout of its first byte (slow), or their TLS "
                                 "handshake had not finished within the handshake timeout of "
                                 "the connection (handshake).",
                                 1, reason, &h->timed_out);
    if (rc == 0)
        rc = egpu_metric_gauge(h->reg, "egpu_http_connections_open",
                               "Connections open now, on every server of this component.", 0, NULL,
                               &h->open);
    if (rc != 0)
        return egpu_error_set(err, rc, "register connection metrics: %s", egpu_strerror(rc));
    egpu_metric_add(h->refused, (const char *const[]){"total"}, 0);
    egpu_metric_add(h->refused, (const char *const[]){"per_client"}, 0);
    egpu_metric_add(h->timed_out, (const char *const[]){"idle"}, 0);
    egpu_metric_add(h->timed_out, (const char *const[]){"slow"}, 0);
    egpu_metric_add(h->timed_out, (const char *const[]){"handshake"}, 0);
    return 0;
}

/* The TLS families (once, with the first HTTPS server). */
static int register_tls(struct egpu_health *h, struct egpu_error *err)
{
    int rc;

    if (h->tls_reloads != NULL)
        return 0;
    rc = egpu_metric_counter(h->reg, "egpu_http_tls_reloads_total",
                             "Times the HTTPS certificate and key (or the client CA bundle) were "
                             "read again after their files changed and replaced what new "
                             "connections get.",
                             0, NULL, &h->tls_reloads);
    if (rc == 0)
        rc = egpu_metric_counter(h->reg, "egpu_http_tls_reload_failures_total",
                                 "Changes of the certificate, key or client CA files that could "
                                 "not be used (each state of the files once); the previous ones "
                                 "stayed.",
                                 0, NULL, &h->tls_failures);
    if (rc == 0)
        rc = egpu_metric_counter(h->reg, "egpu_http_tls_clients_refused_total",
                                 "Connections refused for their TLS client certificate (none, "
                                 "not signed by the client CA, expired, not for clients, another "
                                 "name); 0 without --tls-client-ca.",
                                 0, NULL, &h->tls_refused);
    if (rc == 0)
        rc = egpu_metric_gauge(h->reg, "egpu_http_tls_certificate_expiry_timestamp_seconds",
                               "notAfter of the served HTTPS certificate, Unix seconds (the "
                               "earliest over this component's HTTPS servers).",
                               0, NULL, &h->tls_expiry);
    if (rc != 0)
        return egpu_error_set(err, rc, "register TLS metrics: %s", egpu_strerror(rc));
    return 0;
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
    pthread_mutex_init(&h->lock, NULL);
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
        rc = register_connections(h, err);
        if (rc != 0)
            goto out_free;
    }
    for (i = 0; i < nroutes; i++) {
        rc = egpu_http_server_route(srv, "GET", paths[i], handlers[i], h);
        if (rc != 0) {
            egpu_error_set(err, rc, "route GET %s: %s", paths[i], egpu_strerror(rc));
            goto out_unroute;
        }
    }
    if (reg != NULL) {
        rc = egpu_health_add_server(h, srv, err);
        if (rc != 0)
            goto out_unroute;
    }
    *out = h;
    return 0;

out_unroute:
    while (i-- > 0) {
        if (egpu_http_server_unroute(srv, "GET", paths[i]) != 0)
            continue; /* cannot happen: we routed it and the server is stopped */
    }
out_free:
    pthread_mutex_destroy(&h->lock);
    egpu_free(h);
    return rc;
}

int egpu_health_add_server(struct egpu_health *h, struct egpu_http_server *srv,
                           struct egpu_error *err)
{
    struct egpu_http_tls_stats tls;
    int rc;

    if (h->reg == NULL)
        return egpu_error_set(err, -EINVAL, "health endpoints without a metrics registry");
    if (h->nservers == SERVERS_MAX)
        return egpu_error_set(err, EGPU_ELIMIT, "health endpoints: more than %d servers",
                              SERVERS_MAX);
    egpu_http_server_tls_stats(srv, &tls);
    if (tls.generation != 0) {
        rc = register_tls(h, err);
        if (rc != 0)
            return rc;
    }
    rc = egpu_http_server_observe(srv, on_request_done, h);
    if (rc != 0)
        return egpu_error_set(err, rc, "observe requests: %s", egpu_strerror(rc));
    pthread_mutex_lock(&h->lock);
    h->servers[h->nservers] = srv;
    egpu_http_server_conn_stats(srv, &h->seen[h->nservers]);
    h->seen_tls[h->nservers] = tls;
    h->nservers++;
    pthread_mutex_unlock(&h->lock);
    if (tls.generation != 0)
        egpu_metric_set(h->tls_expiry, NULL, (double)tls.not_after_s);
    return 0;
}

void egpu_health_free(struct egpu_health *h)
{
    if (h == NULL)
        return;
    pthread_mutex_destroy(&h->lock);
    egpu_free(h);
}
