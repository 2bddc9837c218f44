/* net/service.c - what every long-running component does around its own
 * work (see egpu/net.h, "Service"): its servers, the health endpoints wired
 * to its readiness, the signals that stop it and the order it stops in.
 *
 * DESIGN: a component (egpu-scheduler, egpu-agent, egpu-webhook) serves its
 * own routes on --listen:--port and /healthz, /readyz and /metrics on
 * --health-listen:--health-port, or, with no routes of its own (the agent),
 * only the health endpoints on --listen:--port. The two servers are made
 * from the common flags (struct egpu_cli_server) here, so their limits mean
 * the same in every binary. Each port has its own per-address cap, set by
 * the component to fit the port's real callers: the own server's
 * (--max-per-client) for the few known clients (a kube-scheduler, the API
 * servers: one address opens many connections), the health port's
 * (--health-max-per-client) for probers (the kubelet, Prometheus: a
 * connection or two each). A component with no routes of its own serves
 * the health endpoints on --port under --max-per-client. No cap is
 * --max-connections: one address (one pod) never holds a whole port.
 *
 * Set-up the components share is here too, so it is written once: the
 * registry of their /metrics families (egpu_service_metrics_new and
 * _add, from a table of them) and the leader elector's settings from the common lease
 * flags (egpu_service_elector_config; the elector itself is src/kube's,
 * above this layer, so the component makes and starts it).
 *
 * Order: the main thread parses, installs the signal handlers, starts, then
 * waits for SIGTERM or SIGINT; teardown stops both servers first (no
 * handler runs after), then the component stops what the handlers read
 * (informers, the device plugin), then the servers and health are freed.
 */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "egpu/cli.h"
#include "egpu/kube.h"
#include "egpu/log.h"
#include "egpu/net.h"

static atomic_bool stopping;

static void on_signal(int sig)
{
    (void)sig;
    atomic_store(&stopping, true);
}

bool egpu_service_stopping(void)
{
    return atomic_load(&stopping);
}

void egpu_service_request_stop(void)
{
    atomic_store(&stopping, true);
}

int egpu_service_new(const struct egpu_service_config *cfg, struct egpu_service *svc,
                     struct egpu_error *err)
{
    const struct egpu_cli_server *o = cfg->opts;
    struct egpu_http_config hh = {.bind_addr = cfg->own_server ? o->health_listen : o->listen,
                                  .port = (uint16_t)(cfg->own_server ? o->health_port : o->port),
                                  .timeout_s = o->idle_timeout_s,
                                  .request_timeout_s = o->request_timeout_s,
                                  .max_connections = o->max_connections,
                                  .max_per_client = cfg->own_server ? o->health_max_per_client
                                                                    : o->max_per_client};
    int rc = 0;

    memset(svc, 0, sizeof(*svc));
    if (cfg->own_server) {
        struct egpu_http_config hc = {.bind_addr = o->listen,
                                      .port = (uint16_t)o->port,
                                      .threads = o->threads,
                                      .timeout_s = o->idle_timeout_s,
                                      .request_timeout_s = o->request_timeout_s,
                                      .max_connections = o->max_connections,
                                      .max_per_client = o->max_per_client,
                                      .handshake_timeout_s = o->handshake_timeout_s,
                                      .max_body_bytes = o->max_body_bytes,
                                      .conn_memory_bytes = cfg->conn_memory_bytes,
                                      .tls_cert_file = o->tls_cert,
                                      .tls_key_file = o->tls_key,
                                      .tls_client_ca = o->tls_client_ca,
                                      .tls_client_cn = o->tls_client_cn};

        rc = egpu_http_server_new(&hc, &svc->srv, err);
        if (!rc && cfg->health_on_own)
            rc = egpu_health_new(svc->srv, NULL, cfg->ready, cfg->data, &svc->own_health, err);
    }
    if (!rc)
        rc = egpu_http_server_new(&hh, &svc->hsrv, err);
    if (!rc)
        rc = egpu_health_new(svc->hsrv, cfg->reg, cfg->ready, cfg->data, &svc->health, err);
    if (!rc && svc->srv != NULL)
        rc = egpu_health_add_server(svc->health, svc->srv, err);
    return rc;
}

int egpu_service_start(struct egpu_service *svc, struct egpu_error *err)
{
    int rc = 0;

    if (svc->srv != NULL)
        rc = egpu_http_server_start(svc->srv, err);
    if (!rc)
        rc = egpu_http_server_start(svc->hsrv, err);
    return rc;
}

void egpu_service_stop(struct egpu_service *svc)
{
    if (svc->srv != NULL)
        egpu_http_server_stop(svc->srv);
    if (svc->hsrv != NULL)
        egpu_http_server_stop(svc->hsrv);
}

void egpu_service_free(struct egpu_service *svc)
{
    egpu_health_free(svc->health);
    egpu_health_free(svc->own_health);
    egpu_http_server_free(svc->srv);
    egpu_http_server_free(svc->hsrv);
    memset(svc, 0, sizeof(*svc));
}

int egpu_service_metrics_add(struct egpu_metrics *reg, const struct egpu_service_metric *m,
                             size_t n, struct egpu_error *err)
{
    int rc = 0;

    for (size_t i = 0; rc == 0 && i < n; i++) {
        switch (m[i].type) {
        case EGPU_SERVICE_COUNTER:
            rc =
                egpu_metric_counter(reg, m[i].name, m[i].help, m[i].nlabels, m[i].labels, m[i].out);
            break;
        case EGPU_SERVICE_GAUGE:
            rc = egpu_metric_gauge(reg, m[i].name, m[i].help, m[i].nlabels, m[i].labels, m[i].out);
            break;
        case EGPU_SERVICE_HISTOGRAM:
            rc = egpu_metric_histogram(reg, m[i].name, m[i].help, m[i].nlabels, m[i].labels,
                                       m[i].nbounds, m[i].bounds, m[i].out);
            break;
        default:
            rc = -EINVAL;
        }
    }
    if (rc)
        return egpu_error_set(err, rc, "metrics: %s", egpu_strerror(rc));
    return 0;
}

int egpu_service_metrics_new(const struct egpu_service_metric *m, size_t n,
                             struct egpu_metrics **reg, struct egpu_error *err)
{
    *reg = egpu_metrics_new();
    if (*reg == NULL)
        return egpu_error_set(err, -ENOMEM, "metrics: out of memory");
    return egpu_service_metrics_add(*reg, m, n, err);
}

void egpu_service_elector_config(const struct egpu_cli_server *opts, const char *default_ns,
                                 struct egpu_kube_elector_config *ec)
{
    memset(ec, 0, sizeof(*ec));
    ec->ns = opts->lease.ns != NULL ? opts->lease.ns : default_ns;
    ec->name = opts->lease.name;
    ec->lease_duration_ms = opts->lease.duration_ms;
    ec->renew_deadline_ms = opts->lease.renew_deadline_ms;
    ec->retry_period_ms = opts->lease.retry_period_ms;
    ec->release_on_cancel = true;
}

int egpu_service_main(const struct egpu_service_main *m, void *app)
{
    struct egpu_error err = {0};
    struct sigaction sa;

    egpu_log_level = m->log_level;
    egpu_log_set_component(m->prog);
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    egpu_log(EGPU_LOG_NOTICE, "starting version=%s v=%d", EGPU_VERSION, egpu_log_level);
    if (m->start(app, &err) != 0) {
        egpu_log(EGPU_LOG_ERROR, "start failed: %s",
                 err.msg[0] ? err.msg : egpu_strerror(err.code));
        egpu_service_request_stop();
        m->finish(app);
        return 1;
    }
    if (m->run != NULL)
        m->run(app);
    while (m->run == NULL && !egpu_service_stopping()) {
        struct timespec ts = {.tv_sec = m->tick_ms / 1000,
                              .tv_nsec = (m->tick_ms % 1000) * 1000 * 1000};

        if (m->tick != NULL)
            m->tick(app);
        nanosleep(&ts, NULL);
    }
    egpu_log(EGPU_LOG_NOTICE, "stopping");
    egpu_service_request_stop();
    m->finish(app);
    return 0;
}
