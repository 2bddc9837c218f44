/* controller/main.c - egpu-controller: informers on ElasticGPUClaims,
 * ElasticGPUClasses, ElasticGPUs, GPUs, Nodes and Pods feed a work queue
 * of keys; one worker reconciles them (claim.c, egpu.c) while this
 * instance holds the Lease; the health server serves /healthz, /readyz and
 * /metrics.
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

#include "ctl_int.h"
#include "egpu/log.h"

static const char *const inf_kind[CTL_NINF] = {
    "ElasticGPUClaim", "ElasticGPUClass", "ElasticGPU", "GPU", "Node", "Pod", "GPUBudget"};

static long long now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static const char *meta_str(const json_t *o, const char *k)
{
    return egpu_api_str(json_object_get(json_object_get(o, "metadata"), k));
}

void ctl_enqueue_claim(struct ctl *c, const char *ns, const char *name)
{
    char key[EGPU_NAMESPACE_MAX + EGPU_K8S_NAME_MAX + 4];

    if (ns == NULL || name == NULL || name[0] == '\0')
        return;
    snprintf(key, sizeof(key), "c/%s/%s", ns, name);
    (void)egpu_ctl_queue_add(c->queue, key);
}

void ctl_enqueue_budgets(struct ctl *c, const char *ns)
{
    char key[EGPU_NAMESPACE_MAX + 4];

    if (ns == NULL || ns[0] == '\0')
        return;
    snprintf(key, sizeof(key), "b/%s", ns);
    (void)egpu_ctl_queue_add(c->queue, key);
}

void ctl_enqueue_egpu(struct ctl *c, const char *name)
{
    char key[EGPU_K8S_NAME_MAX + 4];

    if (name == NULL || name[0] == '\0')
        return;
    snprintf(key, sizeof(key), "e/%s", name);
    (void)egpu_ctl_queue_add(c->queue, key);
}

/* Queue every object of informer i (claims: only those not Bound when
 * pending_only). */
static void enqueue_all(struct ctl *c, enum ctl_inf i, bool pending_only)
{
    json_t *all = egpu_kube_informer_list(c->inf[i]), *o;
    size_t k;

    json_array_foreach(all, k, o)
    {
        const char *phase = egpu_api_str(json_object_get(json_object_get(o, "status"), "phase"));

        if (i == CTL_EGPUS)
            ctl_enqueue_egpu(c, meta_str(o, "name"));
        else if (i == CTL_BUDGETS)
            ctl_enqueue_budgets(c, meta_str(o, "namespace"));
        else if (!pending_only || phase == NULL || strcmp(phase, "Pending") == 0)
            ctl_enqueue_claim(c, meta_str(o, "namespace"), meta_str(o, "name"));
    }
    json_decref(all);
}

/* ---- informer callbacks: queue the keys a change concerns ---- */

static void on_claim(void *ud, const json_t *o)
{
    struct ctl *c = ud;
    const json_t *st = json_object_get(o, "status");
    char name[EGPU_K8S_NAME_MAX];

    ctl_enqueue_claim(c, meta_str(o, "namespace"), meta_str(o, "name"));
    /* Its ElasticGPUs follow it (Released, Bound). */
    ctl_enqueue_egpu(c, egpu_api_str(json_object_get(st, "elasticGPUName")));
    ctl_enqueue_egpu(c,
                     egpu_api_str(json_object_get(json_object_get(o, "spec"), "elasticGPUName")));
    if (meta_str(o, "uid") != NULL &&
        egpu_ctl_provisioned_name(meta_str(o, "uid"), name, sizeof(name)) == 0)
        ctl_enqueue_egpu(c, name);
}

static void on_egpu(void *ud, const json_t *o)
{
    struct ctl *c = ud;
    const json_t *ref = json_object_get(json_object_get(o, "spec"), "claimRef");

    const char *rns = egpu_api_str(json_object_get(ref, "namespace"));
    const json_t *f, *meta = json_object_get(o, "metadata");
    bool fin = false;
    size_t i;

    ctl_index_note_egpu(c, meta_str(o, "name"), false);
    ctl_enqueue_egpu(c, meta_str(o, "name"));
    ctl_enqueue_claim(c, rns, egpu_api_str(json_object_get(ref, "name")));
    json_array_foreach(json_object_get(meta, "finalizers"), i, f)
    {
        const char *s = egpu_api_str(f);

        fin = fin || (s != NULL && strcmp(s, EGPU_FINALIZER_METERING) == 0);
    }
    /* Meter the claim's namespace now: an ElasticGPU being deleted may be
     * released once metered; one of a budgeted namespace without the
     * finalizer gets it before it can go unmetered. */
    if (rns != NULL && ((fin && json_object_get(meta, "deletionTimestamp") != NULL) ||
                        (!fin && ctl_budget_exists(c, rns))))
        ctl_enqueue_budgets(c, rns);
}

static void on_egpu_delete(void *ud, const json_t *o)
{
    struct ctl *c = ud;

    on_egpu(ud, o);
    ctl_index_note_egpu(c, meta_str(o, "name"), true);
    enqueue_all(c, CTL_CLAIMS, false); /* Bound ones may be Lost; Pending ones may fit now */
}

/* Classes, GPUs and Nodes: capacity or rules changed. */
static void on_capacity(void *ud, const json_t *o)
{
    struct ctl *c = ud;

    (void)o;
    ctl_index_note_capacity(c);
    enqueue_all(c, CTL_CLAIMS, true);
    enqueue_all(c, CTL_EGPUS, false);
}

/* Only a change of what provisioning reads counts: a GPU's status written
 * on every pod, or a Node's heartbeat, would queue every claim each time. */
static void on_capacity_update(void *ud, const json_t *old, const json_t *o)
{
    if (ctl_capacity_changed(old, o))
        on_capacity(ud, o);
}

static void on_pod(void *ud, const json_t *o)
{
    struct ctl *c = ud;
    const char *ns = meta_str(o, "namespace"), *key;
    json_t *v;

    json_object_foreach((json_t *)json_object_get(json_object_get(o, "metadata"), "annotations"),
                        key, v)
    {
        if (strncmp(key, EGPU_ANN_CLAIM_PREFIX, strlen(EGPU_ANN_CLAIM_PREFIX)) == 0)
            ctl_enqueue_claim(c, ns, egpu_api_str(v));
    }
}

/* A GPUBudget added or deleted, or its spec changed (not its status: the
 * controller's own writes would queue it again at once). */
static void on_budget(void *ud, const json_t *o)
{
    ctl_enqueue_budgets(ud, meta_str(o, "namespace"));
}

static void on_budget_update(void *ud, const json_t *old, const json_t *o)
{
    const json_t *g0 = json_object_get(json_object_get(old, "metadata"), "generation");
    const json_t *g1 = json_object_get(json_object_get(o, "metadata"), "generation");

    if (!json_equal((json_t *)g0, (json_t *)g1))
        on_budget(ud, o);
}

/* A pod holding the metering finalizer that ended or is being deleted may
 * be released once metered: meter its namespace now rather than at the
 * next --meter-seconds. */
static void on_pod_metering(struct ctl *c, const json_t *o)
{
    const json_t *f, *meta = json_object_get(o, "metadata");
    size_t i;

    if (json_object_get(meta, "deletionTimestamp") == NULL && !egpu_api_pod_finished(o))
        return;
    json_array_foreach(json_object_get(meta, "finalizers"), i, f)
    {
        const char *s = egpu_api_str(f);

        if (s != NULL && strcmp(s, EGPU_FINALIZER_METERING) == 0)
            ctl_enqueue_budgets(c, meta_str(o, "namespace"));
    }
}

#define UPDATE_OF(fn)                                                     \
    static void fn##_update(void *ud, const json_t *old, const json_t *o) \
    {                                                                     \
        fn(ud, old);                                                      \
        fn(ud, o);                                                        \
    }
UPDATE_OF(on_claim)
UPDATE_OF(on_egpu)
UPDATE_OF(on_pod)

/* Pods and GPUs also feed GPU status.allocated (gpustatus.c); pods also
 * what the inventories count as held (index.c). */
static void on_pod_add(void *ud, const json_t *o)
{
    on_pod(ud, o);
    ctl_gs_pod(ud, o, false);
    ctl_index_note_pod(ud, o, false);
}

static void on_pod_changed(void *ud, const json_t *old, const json_t *o)
{
    on_pod_update(ud, old, o);
    ctl_gs_pod(ud, o, false);
    ctl_index_note_pod(ud, o, false);
    on_pod_metering(ud, o);
}

static void on_pod_delete(void *ud, const json_t *o)
{
    on_pod(ud, o);
    ctl_gs_pod(ud, o, true);
    ctl_index_note_pod(ud, o, true);
}

static void on_gpu_add(void *ud, const json_t *o)
{
    on_capacity(ud, o);
    ctl_gs_gpu(ud, NULL, o, false);
}

static void on_gpu_update(void *ud, const json_t *old, const json_t *o)
{
    on_capacity_update(ud, old, o);
    ctl_gs_gpu(ud, old, o, false);
}

static void on_gpu_delete(void *ud, const json_t *o)
{
    on_capacity(ud, o);
    ctl_gs_gpu(ud, NULL, o, true);
}

/* ---- the worker ---- */

static void process(struct ctl *c, const char *key)
{
    const char *labels[1];
    long long t0 = now_ms();
    int rc;

    if (key[0] == 'c' && key[1] == '/') {
        char ns[EGPU_NAMESPACE_MAX];
        const char *slash = strchr(key + 2, '/');

        labels[0] = "ElasticGPUClaim";
        if (slash == NULL || (size_t)(slash - key - 2) >= sizeof(ns))
            return;
        memcpy(ns, key + 2, (size_t)(slash - key - 2));
        ns[slash - key - 2] = '\0';
        rc = ctl_claim_sync(c, ns, slash + 1);
    } else if (key[0] == 'g' && key[1] == '/') {
        labels[0] = "GPU";
        rc = ctl_gs_sync(c, key + 2);
    } else if (key[0] == 'b' && key[1] == '/') {
        labels[0] = "GPUBudget";
        rc = ctl_budget_sync(c, key + 2);
    } else {
        labels[0] = "ElasticGPU";
        rc = ctl_egpu_sync(c, key + 2);
    }
    (void)egpu_metric_observe(c->m_latency, labels, (double)(now_ms() - t0) / 1000.0);
    if (rc == 0) {
        egpu_ctl_queue_forget(c->queue, key);
        return;
    }
    (void)egpu_metric_inc(c->m_errors, labels);
    egpu_log(rc == EGPU_KUBE_ECONFLICT ? EGPU_LOG_DEBUG : EGPU_LOG_WARN,
             "reconcile failed key=%s error=\"%s\" retry_ms=%ld", key, egpu_strerror(rc),
             egpu_ctl_queue_add_backoff(c->queue, key));
}

static bool synced(struct ctl *c)
{
    for (int i = 0; i < CTL_NINF; i++) {
        if (!egpu_kube_informer_has_synced(c->inf[i]))
            return false;
    }
    return true;
}

static void *worker(void *data)
{
    struct ctl *c = data;
    bool was_leading = false;

    while (!atomic_load(&c->stop)) {
        char *key = NULL;
        bool leading = atomic_load(&c->leading);

        if (!leading || !synced(c)) {
            was_leading = false;
            struct timespec ts = {0, 50 * 1000000};

            nanosleep(&ts, NULL);
            continue;
        }
        if (!was_leading) {
            egpu_log(EGPU_LOG_NOTICE, "reconciling: caches synced and leading");
            enqueue_all(c, CTL_CLAIMS, false);
            enqueue_all(c, CTL_EGPUS, false);
            enqueue_all(c, CTL_BUDGETS, false);
            ctl_gs_enqueue_all(c);
            was_leading = true;
        }
        if (egpu_ctl_queue_get(c->queue, 200, &key) != 0)
            continue;
        if (atomic_load(&c->leading))
            process(c, key);
        else
            (void)egpu_ctl_queue_add(c->queue, key); /* the next leader's, or ours later */
        egpu_ctl_queue_done(c->queue, key);
        egpu_free(key);
    }
    return NULL;
}

/* ---- health, metrics, leader election ---- */

static bool ready(void *data, char *why, size_t len)
{
    struct ctl *c = data;

    for (int i = 0; i < CTL_NINF; i++) {
        if (!egpu_kube_informer_has_synced(c->inf[i])) {
            snprintf(why, len, "%s objects not listed yet", inf_kind[i]);
            return false;
        }
    }
    if (!egpu_kube_informers_healthy(c->inf, inf_kind, CTL_NINF, c->o.srv.watch_unhealthy_ms, why,
                                     len))
        return false;
    snprintf(why, len, "ok");
    return true;
}

static int register_metrics(struct ctl *c, struct egpu_error *err)
{
    static const char *const phase[] = {"phase"}, *const kind[] = {"kind"};
    static const char *const budget[] = {"namespace", "name"};
    int rc;

    c->reg = egpu_metrics_new();
    if (c->reg == NULL)
        return egpu_error_set(err, -ENOMEM, "metrics: out of memory");
    rc = egpu_metric_gauge(c->reg, "egpu_controller_claims",
                           "ElasticGPUClaims by status.phase (Pending, Bound, Lost).", 1, phase,
                           &c->m_claims);
    if (!rc)
        rc = egpu_metric_gauge(c->reg, "egpu_controller_elasticgpus",
                               "ElasticGPUs by status.phase (Pending, Available, Bound, Released, "
                               "Failed).",
                               1, phase, &c->m_egpus);
    if (!rc)
        rc = egpu_metric_histogram(c->reg, "egpu_controller_reconcile_duration_seconds",
                                   "Time to reconcile one key, by kind (ElasticGPUClaim, "
                                   "ElasticGPU, GPU: its status.allocated).",
                                   1, kind, EGPU_METRIC_DEFAULT_NBUCKETS,
                                   egpu_metric_default_buckets, &c->m_latency);
    if (!rc)
        rc = egpu_metric_counter(c->reg, "egpu_controller_reconcile_errors_total",
                                 "Reconciles that failed and were queued again with backoff "
                                 "(409 conflicts included), by kind.",
                                 1, kind, &c->m_errors);
    if (!rc)
        rc = egpu_metric_gauge(c->reg, "egpu_controller_queue_depth",
                               "Keys waiting in the work queue (ready or on a backoff timer).", 0,
                               NULL, &c->m_depth);
    if (!rc)
        rc = egpu_metric_gauge(c->reg, "egpu_controller_leader",
                               "1 while this instance reconciles (holds the Lease, or leader "
                               "election is off).",
                               0, NULL, &c->m_leader);
    if (!rc)
        rc = egpu_metric_gauge(c->reg, "egpu_controller_budget_used_gpu_hours",
                               "GPU-hours a GPUBudget's namespace used in its current period, as "
                               "last metered.",
                               2, budget, &c->m_budget_used);
    if (!rc)
        rc = egpu_metric_gauge(c->reg, "egpu_controller_budget_remaining_gpu_hours",
                               "GPU-hours left in a GPUBudget's current period (negative when "
                               "over).",
                               2, budget, &c->m_budget_remaining);
    if (!rc)
        rc = egpu_metric_gauge(c->reg, "egpu_controller_budget_over",
                               "1 while a GPUBudget's namespace is OverBudget, else 0.", 2, budget,
                               &c->m_budget_over);
    if (rc)
        return egpu_error_set(err, rc, "metrics: %s", egpu_strerror(rc));
    return 0;
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
    struct ctl *c = data;
    bool leading = atomic_load(&c->leading);

    count_phases(c->m_claims, c->inf[CTL_CLAIMS], claim_phases, 3);
    count_phases(c->m_egpus, c->inf[CTL_EGPUS], egpu_phases, 5);
    (void)egpu_metric_set(c->m_depth, NULL, (double)egpu_ctl_queue_len(c->queue));
    (void)egpu_metric_set(c->m_leader, NULL, leading ? 1.0 : 0.0);
    if (leading && now_ms() >= c->next_meter_ms) {
        c->next_meter_ms = now_ms() + c->o.meter_ms;
        enqueue_all(c, CTL_BUDGETS, false);
    }
    if (leading && now_ms() >= c->next_resync_ms) {
        c->next_resync_ms = now_ms() + c->o.resync_ms;
        enqueue_all(c, CTL_CLAIMS, false);
        enqueue_all(c, CTL_EGPUS, false);
        ctl_gs_enqueue_all(c);
    }
}

static void on_started_leading(void *ud)
{
    struct ctl *c = ud;

    egpu_log(EGPU_LOG_NOTICE, "started leading identity=%s", egpu_kube_elector_identity(c->el));
    atomic_store(&c->leading, true);
}

static void on_stopped_leading(void *ud)
{
    struct ctl *c = ud;

    egpu_log(EGPU_LOG_NOTICE, "stopped leading");
    atomic_store(&c->leading, false);
}

static int start_informers(struct ctl *c, struct egpu_error *err)
{
    static const struct egpu_kube_resource *const res[CTL_NINF] = {&egpu_kube_elasticgpuclaims,
                                                                   &egpu_kube_elasticgpuclasses,
                                                                   &egpu_kube_elasticgpus,
                                                                   &egpu_kube_gpus,
                                                                   &egpu_kube_nodes,
                                                                   &egpu_kube_pods,
                                                                   &egpu_kube_gpubudgets};
    const struct egpu_kube_informer_cbs cbs[CTL_NINF] = {
        {on_claim, on_claim_update, on_claim, c},
        {on_capacity, on_capacity_update, on_capacity, c},
        {on_egpu, on_egpu_update, on_egpu_delete, c},
        {on_gpu_add, on_gpu_update, on_gpu_delete, c},
        {on_capacity, on_capacity_update, on_capacity, c},
        {on_pod_add, on_pod_changed, on_pod_delete, c},
        {on_budget, on_budget_update, on_budget, c},
    };
    int rc = 0;

    for (int i = 0; rc == 0 && i < CTL_NINF; i++) {
        struct egpu_kube_informer_opts io = {.res = res[i]};

        rc = egpu_kube_informer_new(c->kube, &io, &cbs[i], &c->inf[i], err);
    }
    for (int i = 0; rc == 0 && i < CTL_NINF; i++)
        rc = egpu_kube_informer_start(c->inf[i], err);
    return rc;
}

static int start(void *data, struct egpu_error *err)
{
    struct ctl *c = data;
    struct egpu_service_config sc = {.opts = &c->o.srv, .ready = ready, .data = c};
    int rc;

    c->assumed = json_object();
    c->queue = egpu_ctl_queue_new(10, 30000);
    if (c->assumed == NULL || c->queue == NULL || ctl_index_new(c) != 0)
        return egpu_error_set(err, -ENOMEM, "out of memory");
    rc = egpu_kube_config_load(c->o.srv.kubeconfig, c->o.srv.context, &c->kcfg, err);
    if (!rc)
        rc = egpu_kube_new(c->kcfg, &c->kube, err);
    if (!rc)
        rc = register_metrics(c, err);
    if (!rc)
        rc = ctl_gs_init(c, err);
    sc.reg = c->reg;
    if (!rc)
        rc = egpu_service_new(&sc, &c->svc, err);
    if (!rc)
        rc = start_informers(c, err);
    if (!rc && c->o.srv.lease.elect) {
        struct egpu_kube_elector_config ec = {
            .ns = c->o.srv.lease.ns ? c->o.srv.lease.ns : egpu_kube_namespace(c->kube),
            .name = c->o.srv.lease.name,
            .lease_duration_ms = c->o.srv.lease.duration_ms,
            .renew_deadline_ms = c->o.srv.lease.renew_deadline_ms,
            .retry_period_ms = c->o.srv.lease.retry_period_ms,
            .release_on_cancel = true,
            .on_started_leading = on_started_leading,
            .on_stopped_leading = on_stopped_leading,
            .ud = c};

        rc = egpu_kube_elector_new(c->kube, &ec, &c->el, err);
        if (!rc)
            rc = egpu_kube_elector_start(c->el, err);
    } else if (!rc) {
        atomic_store(&c->leading, true);
    }
    if (!rc) {
        rc = -pthread_create(&c->worker, NULL, worker, c);
        c->worker_started = rc == 0;
        if (rc)
            egpu_error_set(err, rc, "worker thread: %s", egpu_strerror(rc));
    }
    if (!rc)
        rc = egpu_service_start(&c->svc, err);
    if (!rc)
        egpu_log(EGPU_LOG_NOTICE,
                 "serving addr=%s port=%u resync_s=%ld leader_elect=%s lease=%s/%s identity=%s",
                 c->o.srv.listen, egpu_http_server_port(c->svc.hsrv), c->o.resync_ms / 1000,
                 c->o.srv.lease.elect ? "true" : "false",
                 c->o.srv.lease.ns ? c->o.srv.lease.ns : egpu_kube_namespace(c->kube),
                 c->o.srv.lease.name, c->el != NULL ? egpu_kube_elector_identity(c->el) : "-");
    return rc;
}

static void finish(void *data)
{
    struct ctl *c = data;

    atomic_store(&c->stop, true);
    if (c->queue != NULL)
        egpu_ctl_queue_shutdown(c->queue);
    if (c->worker_started)
        pthread_join(c->worker, NULL);
    egpu_kube_elector_free(c->el); /* releases the Lease when leading */
    egpu_service_stop(&c->svc);
    for (int i = 0; i < CTL_NINF; i++)
        egpu_kube_informer_free(c->inf[i]);
    egpu_service_free(&c->svc);
    egpu_metrics_free(c->reg);
    egpu_ctl_queue_free(c->queue);
    ctl_gs_free(c);
    ctl_index_free(c);
    json_decref(c->assumed);
    egpu_kube_free(c->kube);
    egpu_kube_config_free(c->kcfg);
}

int main(int argc, char **argv)
{
    static struct ctl c;
    struct egpu_service_main m = {
        .prog = CTL_PROG, .start = start, .tick = tick, .tick_ms = 500, .finish = finish};
    int status = ctl_options_parse(argc, argv, &c.o);

    if (status >= 0)
        return status;
    m.log_level = c.o.srv.log_level;
    return egpu_service_main(&m, &c);
}
