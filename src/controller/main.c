/* controller/main.c - egpu-controller's process: options, wiring and the
 * main loop. Informers on ElasticGPUClaims, ElasticGPUClasses, ElasticGPUs,
 * GPUs, Nodes, Pods and GPUBudgets feed a work queue of keys (route.c);
 * one worker (worker.c) reconciles them while this instance holds the
 * Lease; the health server serves /healthz, /readyz and /metrics.
 *
 * Threads: each informer calls back on its own thread and only queues keys
 * (the queue is thread-safe); the worker thread reads the caches and
 * writes; the main thread ticks every 500 ms (metrics, the resync that
 * queues every key again). One worker keeps the reconcilers free of locks:
 * every decision reads the API server's state and every write is guarded
 * by resourceVersion, so a stale read costs a 409 and a retry, never a
 * wrong write. SIGTERM stops the worker, the elector (releasing the Lease),
 * the informers and the server, and exits 0.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "controller_int.h"
#include "egpu/log.h"

static const char *const inf_kind[EGPU__CONTROLLER_NINF] = {
    "ElasticGPUClaim", "ElasticGPUClass", "ElasticGPU", "GPU", "Node", "Pod", "GPUBudget"};

static long long now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- health, metrics, leader election ---- */

static bool ready(void *data, char *why, size_t len)
{
    struct egpu__controller *c = data;

    for (int i = 0; i < EGPU__CONTROLLER_NINF; i++) {
        if (!egpu_kube_informer_has_synced(c->inf[i])) {
            snprintf(why, len, "%s objects not listed yet", inf_kind[i]);
            return false;
        }
    }
    if (!egpu__controller_dra_synced(c)) {
        snprintf(why, len, "ResourceClaimTemplate objects not listed yet");
        return false;
    }
    if (!egpu_kube_informers_healthy(c->inf, inf_kind, EGPU__CONTROLLER_NINF,
                                     c->o.srv.watch_unhealthy_ms, why, len) ||
        !egpu__controller_dra_healthy(c, c->o.srv.watch_unhealthy_ms, why, len))
        return false;
    snprintf(why, len, "ok");
    return true;
}

static int register_metrics(struct egpu__controller *c, struct egpu_error *err)
{
    static const char *const phase[] = {"phase"}, *const kind[] = {"kind"};
    static const char *const budget[] = {"namespace", "name"};
    const struct egpu_service_metric m[] = {
        {EGPU_SERVICE_GAUGE, "egpu_controller_claims",
         "ElasticGPUClaims by status.phase (Pending, Bound, Lost).", 1, phase, 0, NULL,
         &c->m_claims},
        {EGPU_SERVICE_GAUGE, "egpu_controller_elasticgpus",
         "ElasticGPUs by status.phase (Pending, Available, Bound, Released, Failed).", 1, phase, 0,
         NULL, &c->m_egpus},
        {EGPU_SERVICE_HISTOGRAM, "egpu_controller_reconcile_duration_seconds",
         "Time to reconcile one key, by kind (ElasticGPUClaim, ElasticGPU, GPU: its "
         "status.allocated).",
         1, kind, EGPU_METRIC_DEFAULT_NBUCKETS, egpu_metric_default_buckets, &c->m_latency},
        {EGPU_SERVICE_COUNTER, "egpu_controller_reconcile_errors_total",
         "Reconciles that failed and were queued again with backoff (409 conflicts included), by "
         "kind.",
         1, kind, 0, NULL, &c->m_errors},
        {EGPU_SERVICE_GAUGE, "egpu_controller_queue_depth",
         "Keys waiting in the work queue (ready or on a backoff timer).", 0, NULL, 0, NULL,
         &c->m_depth},
        {EGPU_SERVICE_GAUGE, "egpu_controller_leader",
         "1 while this instance reconciles (holds the Lease, or leader election is off).", 0, NULL,
         0, NULL, &c->m_leader},
        {EGPU_SERVICE_GAUGE, "egpu_controller_budget_used_gpu_hours",
         "GPU-hours a GPUBudget's namespace used in its current period, as last metered.", 2,
         budget, 0, NULL, &c->m_budget_used},
        {EGPU_SERVICE_GAUGE, "egpu_controller_budget_remaining_gpu_hours",
         "GPU-hours left in a GPUBudget's current period (negative when over).", 2, budget, 0, NULL,
         &c->m_budget_remaining},
        {EGPU_SERVICE_GAUGE, "egpu_controller_budget_over",
         "1 while a GPUBudget's namespace is OverBudget, else 0.", 2, budget, 0, NULL,
         &c->m_budget_over},
    };

    return egpu_service_metrics_new(m, sizeof(m) / sizeof(m[0]), &c->reg, err);
}

static void count_phases(struct egpu_metric *m, struct egpu_kube_informer *inf,
                         const char *const *names, size_t n)
{
    json_t *all = egpu_kube_informer_list(inf), *o;
    double count[8] = {0};
    size_t i;

    json_array_foreach(all, i, o)
    {
        const char *p = egpu_api_str(json_object_get(json_object_get(o, "status"), "phase"));

        for (size_t k = 0; k < n; k++) {
            if (strcmp(p != NULL ? p : "Pending", names[k]) == 0)
                count[k]++;
        }
    }
    json_decref(all);
    for (size_t k = 0; all != NULL && k < n; k++)
        (void)egpu_metric_set(m, (const char *const[]){names[k]}, count[k]);
}

static void tick(void *data)
{
    static const char *const claim_phases[] = {"Pending", "Bound", "Lost"};
    static const char *const egpu_phases[] = {"Pending", "Available", "Bound", "Released",
                                              "Failed"};
    struct egpu__controller *c = data;
    bool leading = atomic_load(&c->leading);

    count_phases(c->m_claims, c->inf[EGPU__CONTROLLER_CLAIMS], claim_phases, 3);
    count_phases(c->m_egpus, c->inf[EGPU__CONTROLLER_EGPUS], egpu_phases, 5);
    (void)egpu_metric_set(c->m_depth, NULL, (double)egpu_controller_queue_len(c->queue));
    (void)egpu_metric_set(c->m_leader, NULL, leading ? 1.0 : 0.0);
    if (leading && now_ms() >= c->next_meter_ms) {
        c->next_meter_ms = now_ms() + c->o.meter_ms;
        egpu__controller_enqueue_all(c, EGPU__CONTROLLER_BUDGETS, false);
    }
    if (leading && now_ms() >= c->next_resync_ms) {
        c->next_resync_ms = now_ms() + c->o.resync_ms;
        egpu__controller_enqueue_all(c, EGPU__CONTROLLER_CLAIMS, false);
        egpu__controller_enqueue_all(c, EGPU__CONTROLLER_EGPUS, false);
        egpu__controller_gs_enqueue_all(c);
        egpu__controller_dra_enqueue_all(c);
    }
}

static void on_started_leading(void *ud)
{
    struct egpu__controller *c = ud;

    egpu_log(EGPU_LOG_NOTICE, "started leading identity=%s", egpu_kube_elector_identity(c->el));
    atomic_store(&c->leading, true);
}

static void on_stopped_leading(void *ud)
{
    struct egpu__controller *c = ud;

    egpu_log(EGPU_LOG_NOTICE, "stopped leading");
    atomic_store(&c->leading, false);
}

static int start(void *data, struct egpu_error *err)
{
    struct egpu__controller *c = data;
    struct egpu_service_config sc = {.opts = &c->o.srv, .ready = ready, .data = c};
    int rc;

    c->assumed = json_object();
    c->queue = egpu_controller_queue_new(10, 30000);
    if (c->assumed == NULL || c->queue == NULL || egpu__controller_index_new(c) != 0)
        return egpu_error_set(err, -ENOMEM, "out of memory");
    rc = egpu_kube_config_load(c->o.srv.kubeconfig, c->o.srv.context, &c->kcfg, err);
    if (!rc)
        rc = egpu_kube_new(c->kcfg, &c->kube, err);
    if (!rc)
        rc = register_metrics(c, err);
    if (!rc)
        rc = egpu__controller_gs_init(c, err);
    sc.reg = c->reg;
    if (!rc)
        rc = egpu_service_new(&sc, &c->svc, err);
    if (!rc)
        rc = egpu__controller_informers_start(c, err);
    if (!rc)
        rc = egpu__controller_dra_start(c, err);
    if (!rc && c->o.srv.lease.elect) {
        struct egpu_kube_elector_config ec;

        egpu_service_elector_config(&c->o.srv, egpu_kube_namespace(c->kube), &ec);
        ec.on_started_leading = on_started_leading;
        ec.on_stopped_leading = on_stopped_leading;
        ec.ud = c;

        rc = egpu_kube_elector_new(c->kube, &ec, &c->el, err);
        if (!rc)
            rc = egpu_kube_elector_start(c->el, err);
    } else if (!rc) {
        atomic_store(&c->leading, true);
    }
    if (!rc) {
        rc = -pthread_create(&c->worker, NULL, egpu__controller_worker, c);
        c->worker_started = rc == 0;
        if (rc)
            egpu_error_set(err, rc, "worker thread: %s", egpu_strerror(rc));
    }
    if (!rc)
        rc = egpu_service_start(&c->svc, err);
    if (!rc)
        egpu_log(EGPU_LOG_NOTICE,
                 "serving addr=%s port=%u resync_s=%ld mode=%s leader_elect=%s lease=%s/%s "
                 "identity=%s",
                 c->o.srv.listen, egpu_http_server_port(c->svc.hsrv), c->o.resync_ms / 1000,
                 c->o.dra ? "dra" : "device-plugin", c->o.srv.lease.elect ? "true" : "false",
                 c->o.srv.lease.ns ? c->o.srv.lease.ns : egpu_kube_namespace(c->kube),
                 c->o.srv.lease.name, c->el != NULL ? egpu_kube_elector_identity(c->el) : "-");
    return rc;
}

static void finish(void *data)
{
    struct egpu__controller *c = data;

    atomic_store(&c->stop, true);
    if (c->queue != NULL)
        egpu_controller_queue_shutdown(c->queue);
    if (c->worker_started)
        pthread_join(c->worker, NULL);
    egpu_kube_elector_free(c->el); /* releases the Lease when leading */
    egpu_service_stop(&c->svc);
    for (int i = 0; i < EGPU__CONTROLLER_NINF; i++)
        egpu_kube_informer_free(c->inf[i]);
    egpu__controller_dra_free(c);
    egpu_service_free(&c->svc);
    egpu_metrics_free(c->reg);
    egpu_controller_queue_free(c->queue);
    egpu__controller_gs_free(c);
    egpu__controller_index_free(c);
    json_decref(c->assumed);
    egpu_kube_free(c->kube);
    egpu_kube_config_free(c->kcfg);
}

int main(int argc, char **argv)
{
    static struct egpu__controller c;
    struct egpu_service_main m = {.prog = EGPU__CONTROLLER_PROG,
                                  .start = start,
                                  .tick = tick,
                                  .tick_ms = 500,
                                  .finish = finish};
    int status = egpu__controller_options_parse(argc, argv, &c.o);

    if (status >= 0)
        return status;
    m.log_level = c.o.srv.log_level;
    return egpu_service_main(&m, &c);
}
