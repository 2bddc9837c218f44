/* scheduler/main.c - egpu-scheduler: wires the cache, the informers, the
 * extender verbs, leader election and the HTTP server together.
 *
 * The main thread only waits: every second it probes the API server (for
 * /readyz) and refreshes the gauges in /metrics. HTTP requests run on the
 * server's threads, informer callbacks on the informers' threads, and the
 * Lease on the elector's; the cache's lock orders them. SIGTERM or SIGINT
 * stops it: the Lease is released (so another replica takes over in about a
 * second), the servers stop, the informers stop, and it exits 0. The
 * servers, the probes, the signals and that order are src/net/service.c's,
 * as in every component.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "egpu/kube.h"
#include "egpu/log.h"
#include "egpu/net.h"
#include "egpu/scheduler.h"
#include "sched_int.h"

struct app {
    struct egpu_sched_options o;
    struct egpu_kube_config *kcfg;
    struct egpu_kube *kube;
    struct egpu_sched_cache *cache;
    struct egpu_api_workload target; /* --target-workload's typical pods; n = 0: none */
    struct egpu_sched_api api;
    struct egpu_extender *x;
    struct egpu_warmer *warmer; /* --memo-warm; NULL when off */
    struct egpu_kube_elector *el;
    struct egpu_service svc;      /* the verbs (--listen, --port); the probes (--health-*) */
    struct egpu__follower follow; /* with --follow-lease */
    bool following;
    bool cache_synced; /* egpu_sched_cache_synced called (tick) */
    struct egpu_metrics *reg;
    struct egpu_metric *m_binds, *m_bind_failures, *m_core, *m_mem, *m_leader, *m_nodes, *m_gpus,
        *m_pods, *m_unresolved, *m_waiting, *m_reused, *m_load_decided, *m_skipped, *m_dup_gpus,
        *m_assigned_ignored, *m_resvs, *m_resv_overfills, *m_reserved_core, *m_reserved_mem,
        *m_claims, *m_classes, *m_inside, *m_dra_claims, *m_dra_overfills, *m_workload,
        *m_warm_passes, *m_warm_verdicts;
    uint64_t binds_seen[EGPU_BIND_RESULTS];
    unsigned long skipped_seen[SCHED_INFORMERS];
    uint64_t assigned_ignored_seen, resv_overfills_seen, dra_overfills_seen;
    uint64_t reused_seen, load_decided_seen, workload_kept_seen, workload_replaced_seen;
    uint64_t warm_passes_seen, warm_verdicts_seen;
    atomic_bool api_ok;
    char api_error[EGPU_ERRMSG_MAX];
    pthread_mutex_t api_error_lock;
};

static int reply(struct egpu_http_response *resp, int status)
{
    resp->status = status;
    return egpu_http_response_set_type(resp, "application/json");
}

static int on_filter(void *data, const struct egpu_http_request *req,
                     struct egpu_http_response *resp)
{
    struct app *a = data;

    return reply(resp, egpu_extender_filter(a->x, req->body, req->body_len, &resp->body));
}

static int on_prioritize(void *data, const struct egpu_http_request *req,
                         struct egpu_http_response *resp)
{
    struct app *a = data;

    return reply(resp, egpu_extender_prioritize(a->x, req->body, req->body_len, &resp->body));
}

static int on_bind(void *data, const struct egpu_http_request *req, struct egpu_http_response *resp)
{
    struct app *a = data;

    char why[512];

    if (a->el != NULL && !egpu_kube_elector_is_leader(a->el)) {
        if (egpu_buf_printf(&resp->body, "{\"Error\":\"egpu-scheduler %s is not the leader\"}",
                            egpu_kube_elector_identity(a->el)) != 0)
            return -ENOMEM;
        return reply(resp, 200); /* a refusal: ExtenderBindingResult.Error says why */
    }
    /* A call comes from this pod's kube-scheduler, which calls only while it
     * leads: a refusal may be a view up to a second old, so read again. */
    if (a->following && !egpu__follower_leads(&a->follow, why, sizeof(why)))
        egpu__follower_poll(&a->follow);
    if (a->following && !egpu__follower_leads(&a->follow, why, sizeof(why))) {
        json_t *doc = json_pack("{s:s+}", "Error", "egpu-scheduler is not the leader: ", why);
        char *text = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
        int rc = text ? egpu_buf_append(&resp->body, text, strlen(text)) : -ENOMEM;

        free(text);
        json_decref(doc);
        return rc ? rc : reply(resp, 200);
    }
    return reply(resp, egpu_extender_bind(a->x, req->body, req->body_len, &resp->body));
}

static bool ready(void *data, char *why, size_t len)
{
    const char *kinds[SCHED_INFORMERS];
    struct app *a = data;

    for (int i = 0; i < SCHED_INFORMERS; i++)
        kinds[i] = egpu__sched_api_kind(i);

    if (!egpu__sched_api_synced(&a->api)) {
        snprintf(why, len,
                 "cache not synced: waiting for the first list of nodes, GPUs, pods, "
                 "ElasticGPUs and their claims and classes%s",
                 a->o.dra ? ", and ResourceClaims (--dra)" : "");
        return false;
    }
    if (!atomic_load(&a->api_ok)) {
        pthread_mutex_lock(&a->api_error_lock);
        snprintf(why, len, "API server unreachable: %s", a->api_error);
        pthread_mutex_unlock(&a->api_error_lock);
        return false;
    }
    if (!egpu_kube_informers_healthy(a->api.informers, kinds, SCHED_INFORMERS,
                                     a->o.srv.watch_unhealthy_ms, why, len))
        return false;
    if (a->el != NULL && !egpu_kube_elector_is_leader(a->el)) {
        snprintf(why, len, "not the leader (Lease %s)", a->o.srv.lease.name);
        return false;
    }
    if (a->following && !egpu__follower_leads(&a->follow, why, len))
        return false; /* why: "... does not hold Lease ..." */
    snprintf(why, len, "ok");
    return true;
}

static void probe_api(struct app *a)
{
    struct egpu_kube_status st;
    struct egpu_error err = {0};
    json_t *out = NULL;
    int rc = egpu_kube_request(a->kube, "GET", "/version", NULL, NULL, 0, 1 << 16, &out, &st, &err);

    json_decref(out);
    if (rc != 0) {
        pthread_mutex_lock(&a->api_error_lock);
        snprintf(a->api_error, sizeof(a->api_error), "%s", err.msg);
        pthread_mutex_unlock(&a->api_error_lock);
        if (atomic_exchange(&a->api_ok, false))
            egpu_log(EGPU_LOG_WARN, "API server unreachable error=\"%s\"", err.msg);
    } else if (!atomic_exchange(&a->api_ok, true)) {
        egpu_log(EGPU_LOG_NOTICE, "API server reachable");
    }
}

static int register_metrics(struct app *a, struct egpu_error *err)
{
    static const char *const result[] = {"reason"};
    static const char *const node[] = {"node"};
    static const char *const kind[] = {"kind"};
    static const char *const outcome[] = {"result"};
    static const char *const state[] = {"state"};
    const struct egpu_service_metric m[] = {
        {EGPU_SERVICE_COUNTER, "egpu_scheduler_binds_total", "Pods bound.", 0, NULL, 0, NULL,
         &a->m_binds},
        {EGPU_SERVICE_COUNTER, "egpu_scheduler_bind_failures_total",
         "Binds refused or failed, by reason.", 1, result, 0, NULL, &a->m_bind_failures},
        {EGPU_SERVICE_GAUGE, "egpu_scheduler_allocated_core_percent",
         "GPU compute allocated on a node, percent of one card (200 = two whole cards).", 1, node,
         0, NULL, &a->m_core},
        {EGPU_SERVICE_GAUGE, "egpu_scheduler_allocated_memory_mib",
         "GPU memory allocated on a node, MiB.", 1, node, 0, NULL, &a->m_mem},
        {EGPU_SERVICE_GAUGE, "egpu_scheduler_leader",
         "1 while this instance holds the Lease (or leader election is off).", 0, NULL, 0, NULL,
         &a->m_leader},
        {EGPU_SERVICE_GAUGE, "egpu_scheduler_cache_nodes", "Nodes in the cache.", 0, NULL, 0, NULL,
         &a->m_nodes},
        {EGPU_SERVICE_GAUGE, "egpu_scheduler_cache_gpus", "GPUs in the cache.", 0, NULL, 0, NULL,
         &a->m_gpus},
        {EGPU_SERVICE_GAUGE, "egpu_scheduler_cache_pods", "Pods in the cache.", 0, NULL, 0, NULL,
         &a->m_pods},
        {EGPU_SERVICE_GAUGE, "egpu_scheduler_cache_unresolved_pods",
         "Pods counted without their cards (annotation does not match the node's GPUs).", 0, NULL,
         0, NULL, &a->m_unresolved},
        {EGPU_SERVICE_GAUGE, "egpu_scheduler_cache_waiting_pods",
         "Pods placed by bind whose cards the node agent has not marked allocated yet "
         "(elasticgpu.io/allocated).",
         0, NULL, 0, NULL, &a->m_waiting},
        {EGPU_SERVICE_COUNTER, "egpu_scheduler_prioritize_reused_total",
         "Prioritize replies made from the one before, with only the changed scores encoded again.",
         0, NULL, 0, NULL, &a->m_reused},
        {EGPU_SERVICE_COUNTER, "egpu_scheduler_load_decided_total",
         "Filter calls (--load-aware) where measured load failed nodes tied for the best score.", 0,
         NULL, 0, NULL, &a->m_load_decided},
        {EGPU_SERVICE_COUNTER, "egpu_scheduler_target_workload_rebuilds_total",
         "Rebuilds of the target workload learned from the cached pods (FGD policies without "
         "--target-workload), by result: kept (within 1% of the one in use, which stays) or "
         "replaced (went into use).",
         1, outcome, 0, NULL, &a->m_workload},
        {EGPU_SERVICE_COUNTER, "egpu_scheduler_memo_warm_passes_total",
         "Passes of the memo warm (--memo-warm) finished: the cached pods' request shapes judged "
         "ahead on every node.",
         0, NULL, 0, NULL, &a->m_warm_passes},
        {EGPU_SERVICE_COUNTER, "egpu_scheduler_memo_warm_verdicts_total",
         "Node verdicts the memo warm made ahead of the requests (a node whose memoised verdict "
         "for a shape was not of its state).",
         0, NULL, 0, NULL, &a->m_warm_verdicts},
        {EGPU_SERVICE_COUNTER, "egpu_scheduler_objects_skipped_total",
         "API objects left out of the cache, by kind: watch lines that were no event, objects "
         "without a usable name, and malformed objects (each is logged).",
         1, kind, 0, NULL, &a->m_skipped},
        {EGPU_SERVICE_GAUGE, "egpu_scheduler_cache_duplicate_gpus",
         "GPU objects left out of placement because another GPU object already names their UUID (a "
         "Warning event DuplicateGPU is posted on each).",
         0, NULL, 0, NULL, &a->m_dup_gpus},
        {EGPU_SERVICE_COUNTER, "egpu_scheduler_assigned_changes_ignored_total",
         "Changes to a bound pod's elasticgpu.io/assigned annotation that the cache did not "
         "believe (the decision recorded at bind stands).",
         0, NULL, 0, NULL, &a->m_assigned_ignored},
        {EGPU_SERVICE_GAUGE, "egpu_scheduler_reservations",
         "ElasticGPUs in the cache by state: applied (their capacity counts as allocated), waiting "
         "(their node or GPU object is not known yet), overfill (their cards lack the room: not "
         "applied), off (Failed: hold nothing).",
         1, state, 0, NULL, &a->m_resvs},
        {EGPU_SERVICE_COUNTER, "egpu_scheduler_reservation_overfills_total",
         "Times an ElasticGPU's reservation was found not to fit its cards (each is logged; it is "
         "tried again when capacity is freed).",
         0, NULL, 0, NULL, &a->m_resv_overfills},
        {EGPU_SERVICE_GAUGE, "egpu_scheduler_reserved_core_percent",
         "GPU compute held by applied ElasticGPUs, percent of one card (part of "
         "egpu_scheduler_allocated_core_percent).",
         0, NULL, 0, NULL, &a->m_reserved_core},
        {EGPU_SERVICE_GAUGE, "egpu_scheduler_reserved_memory_mib",
         "GPU memory held by applied ElasticGPUs, MiB (whole cards: all their memory).", 0, NULL, 0,
         NULL, &a->m_reserved_mem},
        {EGPU_SERVICE_GAUGE, "egpu_scheduler_cache_claims", "ElasticGPUClaims in the cache.", 0,
         NULL, 0, NULL, &a->m_claims},
        {EGPU_SERVICE_GAUGE, "egpu_scheduler_cache_classes", "ElasticGPUClasses in the cache.", 0,
         NULL, 0, NULL, &a->m_classes},
        {EGPU_SERVICE_GAUGE, "egpu_scheduler_claimed_containers_inside",
         "Containers counted inside their claim's ElasticGPU (their share is part of "
         "egpu_scheduler_reserved_core_percent, not added to it).",
         0, NULL, 0, NULL, &a->m_inside},
        {EGPU_SERVICE_GAUGE, "egpu_scheduler_dra_claims",
         "ResourceClaims in the cache (--dra) by state: applied (their allocation counts as "
         "allocated on its cards), waiting (their node or a card is not known yet), overfill "
         "(their cards lack the room: not applied), off (not allocated on this driver's "
         "devices).",
         1, state, 0, NULL, &a->m_dra_claims},
        {EGPU_SERVICE_COUNTER, "egpu_scheduler_dra_claim_overfills_total",
         "Times an allocated ResourceClaim was found not to fit its cards in the cache (each is "
         "logged; it is tried again when capacity is freed).",
         0, NULL, 0, NULL, &a->m_dra_overfills},
    };

    return egpu_service_metrics_new(m, sizeof(m) / sizeof(m[0]), &a->reg, err);
}

/* Is the node named values[0] in cluster data, with cards? */
static bool node_has_gpus(const char *const *values, void *data)
{
    const struct egpu_node *n = egpu_cluster_node(data, values[0]);

    return n != NULL && n->ngpus > 0;
}

static void refresh_metrics(struct app *a)
{
    uint64_t counts[EGPU_BIND_RESULTS];
    struct egpu_sched_cache_stats st;
    struct egpu_cluster *c;

    egpu_extender_bind_counts(a->x, counts);
    for (int r = 0; r < EGPU_BIND_RESULTS; r++) {
        const char *label[] = {egpu_bind_result_name(r)};
        double delta = (double)(counts[r] - a->binds_seen[r]);

        if (delta > 0)
            (void)(r == EGPU_BIND_OK ? egpu_metric_add(a->m_binds, NULL, delta)
                                     : egpu_metric_add(a->m_bind_failures, label, delta));
        a->binds_seen[r] = counts[r];
    }
    {
        uint64_t reused = egpu_extender_prioritize_reused(a->x);

        if (reused > a->reused_seen)
            (void)egpu_metric_add(a->m_reused, NULL, (double)(reused - a->reused_seen));
        a->reused_seen = reused;
        reused = egpu_extender_load_decided(a->x);
        if (reused > a->load_decided_seen)
            (void)egpu_metric_add(a->m_load_decided, NULL, (double)(reused - a->load_decided_seen));
        a->load_decided_seen = reused;
    }
    {
        uint64_t kept, replaced;
        const char *l_kept[] = {"kept"}, *l_replaced[] = {"replaced"};

        egpu_extender_workload_rebuilds(a->x, &kept, &replaced);
        (void)egpu_metric_add(a->m_workload, l_kept, (double)(kept - a->workload_kept_seen));
        (void)egpu_metric_add(a->m_workload, l_replaced,
                              (double)(replaced - a->workload_replaced_seen));
        a->workload_kept_seen = kept;
        a->workload_replaced_seen = replaced;
        egpu_extender_warm_counts(a->x, &kept, &replaced);
        (void)egpu_metric_add(a->m_warm_passes, NULL, (double)(kept - a->warm_passes_seen));
        (void)egpu_metric_add(a->m_warm_verdicts, NULL, (double)(replaced - a->warm_verdicts_seen));
        a->warm_passes_seen = kept;
        a->warm_verdicts_seen = replaced;
    }
    for (int i = 0; i < SCHED_INFORMERS; i++) {
        const char *label[] = {egpu__sched_api_kind(i)};
        unsigned long skipped = egpu__sched_api_skipped(&a->api, i);

        (void)egpu_metric_add(a->m_skipped, label, (double)(skipped - a->skipped_seen[i]));
        a->skipped_seen[i] = skipped;
    }
    egpu_sched_cache_stats(a->cache, &st);
    (void)egpu_metric_set(a->m_nodes, NULL, (double)st.nodes);
    (void)egpu_metric_set(a->m_gpus, NULL, (double)st.gpus);
    (void)egpu_metric_set(a->m_pods, NULL, (double)st.pods);
    (void)egpu_metric_set(a->m_unresolved, NULL, (double)st.unresolved);
    (void)egpu_metric_set(a->m_waiting, NULL, (double)st.waiting);
    (void)egpu_metric_set(a->m_dup_gpus, NULL, (double)st.duplicate_gpus);
    (void)egpu_metric_add(a->m_assigned_ignored, NULL,
                          (double)(st.assigned_ignored - a->assigned_ignored_seen));
    a->assigned_ignored_seen = st.assigned_ignored;
    for (int s = 0; s < EGPU_SCHED_RESV_STATES; s++) {
        const char *label[] = {egpu_sched_resv_state_name(s)};

        (void)egpu_metric_set(a->m_resvs, label, (double)st.reservations[s]);
    }
    (void)egpu_metric_add(a->m_resv_overfills, NULL,
                          (double)(st.reservation_overfills - a->resv_overfills_seen));
    a->resv_overfills_seen = st.reservation_overfills;
    (void)egpu_metric_set(a->m_reserved_core, NULL, (double)st.reserved_core_milli / 10.0);
    (void)egpu_metric_set(a->m_reserved_mem, NULL, (double)st.reserved_mem_mib);
    (void)egpu_metric_set(a->m_claims, NULL, (double)st.claims);
    (void)egpu_metric_set(a->m_classes, NULL, (double)st.classes);
    (void)egpu_metric_set(a->m_inside, NULL, (double)st.inside);
    for (int s = 0; s < EGPU_SCHED_RESV_STATES; s++) {
        const char *label[] = {egpu_sched_resv_state_name(s)};

        (void)egpu_metric_set(a->m_dra_claims, label, (double)st.dra_claims[s]);
    }
    (void)egpu_metric_add(a->m_dra_overfills, NULL,
                          (double)(st.dra_overfills - a->dra_overfills_seen));
    a->dra_overfills_seen = st.dra_overfills;
    {
        char why[512];
        bool leads = a->following ? egpu__follower_leads(&a->follow, why, sizeof(why))
                                  : a->el == NULL || egpu_kube_elector_is_leader(a->el);

        (void)egpu_metric_set(a->m_leader, NULL, leads ? 1.0 : 0.0);
    }
    c = egpu_sched_cache_lock(a->cache);
    for (size_t i = 0; i < c->nnodes; i++) {
        const struct egpu_node *n = c->nodes[i];
        const char *label[] = {n->name};
        uint64_t core = 0, mem = 0;

        if (n->ngpus == 0)
            continue;
        for (uint32_t g = 0; g < n->ngpus; g++) {
            core += n->gpus[g].used_core_milli;
            mem += n->gpus[g].used_mem_mib;
        }
        (void)egpu_metric_set(a->m_core, label, (double)core / 10.0);
        (void)egpu_metric_set(a->m_mem, label, (double)mem);
    }
    /* A node that left (or lost its cards) leaves the per-node series too. */
    (void)egpu_metric_retain(a->m_core, node_has_gpus, c);
    (void)egpu_metric_retain(a->m_mem, node_has_gpus, c);
    egpu_sched_cache_unlock(a->cache);
}

static void on_started_leading(void *ud)
{
    (void)ud;
    egpu_log(EGPU_LOG_NOTICE, "started leading: binding pods");
}

static void on_stopped_leading(void *ud)
{
    (void)ud;
    egpu_log(EGPU_LOG_WARN, "stopped leading: no more binds");
}

/* Read --target-workload FILE (a TargetWorkload JSON document, trusted as
 * the operator's configuration) into a->target. 0 or an error naming it. */
static int load_target(struct app *a, struct egpu_error *err)
{
    json_error_t jerr;
    json_t *doc = json_load_file(a->o.target_workload, JSON_REJECT_DUPLICATES, &jerr);
    int rc;

    if (doc == NULL)
        return egpu_error_set(err, EGPU_ESYNTAX, "--target-workload %s: line %d: %s",
                              a->o.target_workload, jerr.line, jerr.text);
    rc = egpu_api_workload_decode(doc, &a->target, err);
    json_decref(doc);
    if (rc)
        return egpu_error_prefix(err, rc, "--target-workload %s", a->o.target_workload);
    egpu_log(EGPU_LOG_INFO, "target workload pinned file=%s typical_pods=%zu", a->o.target_workload,
             a->target.n);
    return 0;
}

static int start(void *data, struct egpu_error *err)
{
    struct app *a = data;
    struct egpu_extender_config xc = {.scheduler_name = a->o.scheduler_name,
                                      .node_policy = a->o.node_policy,
                                      .card_policy = a->o.card_policy,
                                      .seed = a->o.seed,
                                      .load_aware = a->o.load_aware,
                                      .place_cpu_pods = a->o.place_cpu_pods,
                                      .dra = a->o.dra};
    struct egpu_extender_ops ops = {.data = &a->api,
                                    .synced = egpu__sched_api_synced,
                                    .annotate = egpu__sched_api_annotate,
                                    .annotate_claim = egpu__sched_api_annotate_claim,
                                    .bind = egpu__sched_api_bind,
                                    .get_pod = egpu__sched_api_get_pod,
                                    .get_claim = egpu__sched_api_get_claim};
    struct egpu_service_config sc = {
        .opts = &a->o.srv, .own_server = true, .ready = ready, .data = a};
    const char *verbs[] = {"filter", "prioritize", "bind"};
    egpu_http_handler_cb handlers[] = {on_filter, on_prioritize, on_bind};
    int rc;

    if (a->o.target_workload != NULL) {
        rc = load_target(a, err);
        if (rc)
            return rc;
        xc.target = &a->target;
    }
    rc = egpu_kube_config_load(a->o.srv.kubeconfig, a->o.srv.context, &a->kcfg, err);
    if (!rc)
        rc = egpu_kube_new(a->kcfg, &a->kube, err);
    if (rc)
        return rc;
    a->cache = egpu_sched_cache_new();
    if (a->cache == NULL)
        return egpu_error_set(err, -ENOMEM, "cache: out of memory");
    egpu_sched_cache_set_load_aware(a->cache, a->o.load_aware, a->o.load_max_age_s);
    if (a->o.place_cpu_pods)
        egpu_log(EGPU_LOG_INFO, "pods without GPUs: judged, scored and bound by the node policy "
                                "(--pods-without-gpu place)");
    if (a->o.load_aware)
        egpu_log(EGPU_LOG_NOTICE, "load-aware: exact ties go to the less loaded cards max_age=%us",
                 a->o.load_max_age_s);
    a->api.kube = a->kube;
    a->api.cache = a->cache;
    a->api.dra = a->o.dra;
    if (a->o.dra)
        egpu_log(EGPU_LOG_INFO, "DRA pods: judged by their ResourceClaims, bound with the "
                                "Binding alone (--dra)");
    a->x = egpu_extender_new(&xc, a->cache, &ops, err);
    if (a->x == NULL)
        return err->code;
    rc = register_metrics(a, err);
    sc.reg = a->reg;
    if (!rc)
        rc = egpu_service_new(&sc, &a->svc, err);
    for (int i = 0; rc == 0 && i < 3; i++) {
        char path[512];

        snprintf(path, sizeof(path), "%s/%s", a->o.prefix, verbs[i]);
        rc = egpu_http_server_route(a->svc.srv, "POST", path, handlers[i], a);
        if (rc)
            egpu_error_set(err, rc, "route %s: %s", path, egpu_strerror(rc));
    }
    if (!rc && a->o.follow_lease != NULL) {
        char host[256] = "";

        if (a->o.pod_name == NULL && gethostname(host, sizeof(host) - 1) != 0)
            host[0] = '\0';
        rc = egpu__follower_init(&a->follow, a->kube,
                                 a->o.srv.lease.ns ? a->o.srv.lease.ns
                                                   : egpu_kube_namespace(a->kube),
                                 a->o.follow_lease, a->o.pod_name ? a->o.pod_name : host, err);
        a->following = rc == 0;
        if (a->following)
            egpu__follower_poll(&a->follow);
    }
    if (!rc)
        rc = egpu__sched_api_start(&a->api, err);
    if (!rc && a->o.memo_warm)
        rc = egpu_warmer_start(a->x, &a->warmer, err);
    if (!rc && a->o.srv.lease.elect) {
        struct egpu_kube_elector_config ec;

        egpu_service_elector_config(&a->o.srv, egpu_kube_namespace(a->kube), &ec);
        ec.on_started_leading = on_started_leading;
        ec.on_stopped_leading = on_stopped_leading;

        rc = egpu_kube_elector_new(a->kube, &ec, &a->el, err);
        if (!rc)
            rc = egpu_kube_elector_start(a->el, err);
    }
    if (!rc)
        rc = egpu_service_start(&a->svc, err);
    if (!rc)
        egpu_log(
            EGPU_LOG_NOTICE,
            "serving addr=%s port=%u health_addr=%s health_port=%u prefix=\"%s\" "
            "node_policy=%s card_policy=%s memo_warm=%s leader_elect=%s follow_lease=%s pod=%s",
            a->o.srv.listen, egpu_http_server_port(a->svc.srv), a->o.srv.health_listen,
            egpu_http_server_port(a->svc.hsrv), a->o.prefix, egpu_policy_name(a->o.node_policy),
            egpu_policy_name(a->o.card_policy), a->o.memo_warm ? "true" : "false",
            a->o.srv.lease.elect ? "true" : "false", a->following ? a->follow.name : "-",
            a->following ? a->follow.pod : "-");
    return rc;
}

static void finish(void *data)
{
    struct app *a = data;

    egpu_kube_elector_free(a->el); /* releases the Lease when leading */
    egpu_service_stop(&a->svc);
    egpu_warmer_stop(a->warmer);
    egpu__sched_api_stop(&a->api);
    egpu_service_free(&a->svc);
    if (a->following)
        egpu__follower_destroy(&a->follow);
    egpu_metrics_free(a->reg);
    egpu_extender_free(a->x);
    egpu_api_workload_free(&a->target);
    egpu_sched_cache_free(a->cache);
    egpu_kube_free(a->kube);
    egpu_kube_config_free(a->kcfg);
}

#define TICK_SLOW_MS 2000 /* a step of the tick that took longer is logged */

static int64_t monotonic_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Log step when it took more than TICK_SLOW_MS since *t0 (ms); *t0 = now.
 * The gauges and the cache's synced mark wait for the whole tick, so a
 * stalled one says which step held them. */
static void tick_step(const char *step, int64_t *t0)
{
    int64_t now = monotonic_ms();

    if (now - *t0 > TICK_SLOW_MS)
        egpu_log(EGPU_LOG_WARN, "slow tick: the gauges waited step=%s took_ms=%lld", step,
                 (long long)(now - *t0));
    *t0 = now;
}

/* Every second: probe the API server (for /readyz), read the followed
 * Lease, tell the cache once its informers have synced, refresh the
 * gauges. */
static void tick(void *data)
{
    struct app *a = data;
    int64_t t0 = monotonic_ms();

    probe_api(a);
    tick_step("api-probe", &t0);
    if (a->following) {
        egpu__follower_poll(&a->follow);
        tick_step("follow-lease", &t0);
    }
    if (!a->cache_synced && egpu__sched_api_synced(&a->api)) {
        egpu_sched_cache_synced(a->cache); /* logs what the first lists left wrong, once */
        a->cache_synced = true;
    }
    refresh_metrics(a);
    tick_step("refresh-gauges", &t0);
}

int main(int argc, char **argv)
{
    static struct app a;
    struct egpu_service_main m = {
        .prog = "egpu-scheduler", .start = start, .tick = tick, .tick_ms = 1000, .finish = finish};
    int status = egpu__sched_options_parse(argc, argv, &a.o);

    if (status >= 0)
        return status;
    m.log_level = a.o.srv.log_level;
    pthread_mutex_init(&a.api_error_lock, NULL);
    snprintf(a.api_error, sizeof(a.api_error), "not probed yet");
    return egpu_service_main(&m, &a);
}
