/* agent/dra_mode.c - egpu-agent --mode dra (dra_mode_int.h): the node agent
 * as the kubelet's DRA plugin. The parts are dra_plugin.c (DRAPlugin v1 and
 * v1beta1), dra_registration.c (the plugin watcher's Registration) and
 * dra_slice.c (the node's ResourceSlice); this file starts them, keeps them
 * up and stops them.
 *
 * Threads:
 * - the main thread (run) loops every LOOP_MS: a registration socket that
 *   is gone (the kubelet wiped its registry dir, or someone removed it) is
 *   served again, and so is a DRAPlugin socket; the slice is published when
 *   due (dirty, or the periodic --slice-interval), a failure retried after
 *   RETRY_MIN_MS, doubling up to the interval. egpu__dra_slice_publish is
 *   level-triggered, so every publish converges whatever happened since.
 * - the health watcher (health.c, with this file's refresh as its probe)
 *   lists the cards on a backend event, a --fake-health-file change or
 *   every 10 s: when the list differs in what the slice or the plugin use
 *   (identity, memory, health, links), the plugin gets the new cards and the
 *   slice is marked dirty. It alone lists the backend (egpu_gpus allows one
 *   lister beside one waiter), and publishes the GPU objects as in
 *   device-plugin mode (the seed's objects and status.used stay true).
 * - an informer on this node's ResourceSlices of the driver (fieldSelector
 *   spec.nodeName=<node>,spec.driver=<driver>) marks the slice dirty when one
 *   is deleted: the kubelet deletes them all at its start and 30 s after
 *   the driver's last plugin disconnects, and the scheduler must see the
 *   devices again within a loop turn, not a --slice-interval later.
 * The cards are shared under lock; dirty and the readiness facts are
 * atomics.
 *
 * Stop (SIGTERM): the health thread and the informer end, the registration
 * socket is removed first (the kubelet deregisters the plugin), then the
 * DRAPlugin socket. The slice stays: an agent back within the kubelet's 30 s
 * keeps it, and after that the kubelet deletes it.
 *
 * Units: milliseconds on CLOCK_MONOTONIC, the interval in seconds.
 */
#define _GNU_SOURCE /* pthread, nanosleep */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "egpu/agent.h"
#include "egpu/kube.h"
#include "egpu/log.h"
#include "egpu/net.h"
#include "allocdir_int.h"
#include "dra_mode_int.h"
#include "dra_plugin_int.h"
#include "dra_slice_int.h"
#include "health_int.h"

#define LOOP_MS      200  /* one turn of the main loop */
#define RETRY_MIN_MS 1000 /* first retry of a failed publish or serve */

struct dra_mode {
    const struct egpu__dra_mode_config *cfg;
    const char *socket;       /* the DRAPlugin socket (cfg's or the default) */
    const char *registry_dir; /* cfg's or the default */
    struct egpu_gpus *gpus;
    struct egpu_kube_config *kcfg;
    struct egpu_kube *kube;
    struct egpu__dra_plugin *plugin;
    struct egpu__dra_registration *reg;
    struct egpu_kube_informer *inf;
    struct egpu_service svc;
    struct egpu_metrics *metrics;
    struct egpu__health health;
    pthread_t health_thread;
    bool health_started;
    char selector[2 * EGPU_KUBE_NAME_MAX + 64]; /* the informer's field selector */

    pthread_mutex_t lock;        /* guards cards and ncards */
    struct egpu_gpu_info *cards; /* EGPU_NODE_GPUS_MAX slots: the cards as last listed */
    size_t ncards;               /* listed */
    /* The slice's optional attributes (driverVersion, cudaComputeCapability,
     * ...) of the cards as last listed: made by refresh (the lister), read by
     * publish for the whole of its write, both under attrs_lock. attr_cfg's
     * pointers point into *attrs; the pair is replaced, never edited. */
    pthread_mutex_t attrs_lock;
    struct egpu__dra_slice_attrs *attrs;    /* owned, or NULL before the first list */
    struct egpu__dra_slice_config attr_cfg; /* driver_version, cuda_driver_version, extra */
    atomic_bool dirty;                      /* publish at the next turn */
    atomic_bool published;                  /* the last publish succeeded */
    atomic_bool reg_serving;                /* the registration socket is served */
    atomic_bool plugin_serving;             /* the DRAPlugin socket is served */
    struct egpu__dra_slice_state slice;     /* the main thread's alone */

    /* /metrics (set by the main thread; the families live in metrics) */
    struct egpu_metric *m_registered, *m_cards, *m_healthy, *m_devices, *m_publishes, *m_get_info;
    struct egpu_metric *m_generation, *m_deletions, *m_republishes, *m_card_state;
    struct egpu_metric *m_requests, *m_claims, *m_errors, *m_prepared, *m_bad_records;
    struct egpu_metric *m_shares, *m_alloc_core, *m_alloc_mem, *m_card_mem;
    unsigned long seen_get_info;        /* GetInfo calls already counted */
    struct egpu__dra_plugin_stats seen; /* the plugin's counters already counted */
    struct egpu__dra_usage *usage;      /* the main thread's copy of the plugin's sums */
    bool ever_published;                /* a publish succeeded once (main thread) */
};

static long now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Does a card differ from b in what the slice or the plugin read? (Use
 * figures, used_mem_mib and util_pct, move on every probe and are left out.) */
static bool card_differs(const struct egpu_gpu_info *a, const struct egpu_gpu_info *b, size_t n)
{
    return strcmp(a->uuid, b->uuid) != 0 || a->index != b->index || a->minor != b->minor ||
           strcmp(a->model, b->model) != 0 || a->mem_mib != b->mem_mib ||
           a->healthy != b->healthy || strcmp(a->reason, b->reason) != 0 ||
           a->has_links != b->has_links || memcmp(a->links, b->links, n) != 0;
}

/* Make the slice's optional attributes of cards[0 .. n) from the backend
 * (NVML calls: the lister's thread only) and put them in place of the old
 * ones. Out of memory keeps the old ones (the slice then lacks or misplaces
 * optional attributes until the next change; never an error). */
static void set_attributes(struct dra_mode *m, const struct egpu_gpu_info *cards, size_t n)
{
    struct egpu__dra_slice_attrs *a = egpu_calloc(1, sizeof(*a)), *old;
    struct egpu__dra_slice_config cfg = {0};

    if (a == NULL) {
        egpu_log(EGPU_LOG_WARN, "ResourceSlice attributes not read error=\"out of memory\"");
        return;
    }
    egpu__dra_slice_attributes(m->gpus, cards, n, a, &cfg);
    pthread_mutex_lock(&m->attrs_lock);
    old = m->attrs;
    m->attrs = a;
    m->attr_cfg = cfg;
    pthread_mutex_unlock(&m->attrs_lock);
    egpu_free(old);
}

/* The health watcher's probe (struct egpu__health.refresh), also called
 * once by start: list the cards and their links; when they differ from the
 * last list, hand them to the plugin and mark the slice dirty. */
static int refresh(void *data, bool *changed, struct egpu_error *err)
{
    struct dra_mode *m = data;
    struct egpu_gpu_info *cards = egpu_calloc(EGPU_NODE_GPUS_MAX, sizeof(*cards));
    size_t n = 0;
    int rc;

    *changed = false;
    if (cards == NULL)
        return egpu_error_set(err, -ENOMEM, "GPU list: out of memory");
    rc = egpu_gpus_list(m->gpus, cards, EGPU_NODE_GPUS_MAX, &n, err);
    if (rc) {
        egpu_free(cards);
        return rc;
    }
    egpu_gpus_read_links(m->gpus, cards, n);
    pthread_mutex_lock(&m->lock);
    *changed = n != m->ncards || m->attrs == NULL;
    for (size_t i = 0; i < n && !*changed; i++)
        *changed = card_differs(&cards[i], &m->cards[i], n);
    pthread_mutex_unlock(&m->lock);
    if (*changed)
        set_attributes(m, cards, n);
    pthread_mutex_lock(&m->lock);
    if (*changed) {
        memcpy(m->cards, cards, n * sizeof(*cards));
        m->ncards = n;
        egpu__dra_plugin_set_cards(m->plugin, cards, n);
    }
    pthread_mutex_unlock(&m->lock);
    if (*changed) {
        size_t healthy = 0;

        for (size_t i = 0; i < n; i++)
            healthy += cards[i].healthy;
        egpu_log(EGPU_LOG_INFO, "GPU list changed cards=%zu healthy=%zu: publishing the slice", n,
                 healthy);
        atomic_store(&m->dirty, true);
    }
    egpu_free(cards);
    return 0;
}

/* The families of DRA mode's /metrics, in the order the page shows them. */
static int metrics_new(struct dra_mode *m, struct egpu_error *err)
{
    static const char *const result_label[] = {"result"};
    static const char *const gpu_labels[] = {"gpu", "device"};
    static const char *const state_labels[] = {"gpu", "device", "state"};
    static const char *const method_label[] = {"method"};
    static const char *const error_labels[] = {"method", "reason"};
    const struct egpu_service_metric t[] = {
        {EGPU_SERVICE_GAUGE, "egpu_agent_dra_registered",
         "1 while the kubelet's last NotifyRegistrationStatus said the DRA plugin is registered.",
         0, NULL, 0, NULL, &m->m_registered},
        {EGPU_SERVICE_GAUGE, "egpu_agent_gpus", "GPUs the backend lists.", 0, NULL, 0, NULL,
         &m->m_cards},
        {EGPU_SERVICE_GAUGE, "egpu_agent_gpus_healthy", "Healthy GPUs.", 0, NULL, 0, NULL,
         &m->m_healthy},
        {EGPU_SERVICE_GAUGE, "egpu_agent_dra_slice_devices",
         "Devices in the node's ResourceSlice as last published.", 0, NULL, 0, NULL, &m->m_devices},
        {EGPU_SERVICE_COUNTER, "egpu_agent_dra_slice_publishes_total",
         "Publishes of the node's ResourceSlice, by result: ok or error.", 1, result_label, 0, NULL,
         &m->m_publishes},
        {EGPU_SERVICE_COUNTER, "egpu_agent_dra_get_info_total",
         "GetInfo calls the registration answered (the kubelet's plugin watcher).", 0, NULL, 0,
         NULL, &m->m_get_info},
        {EGPU_SERVICE_GAUGE, "egpu_agent_dra_slice_generation",
         "The pool generation of the node's ResourceSlice as last published.", 0, NULL, 0, NULL,
         &m->m_generation},
        {EGPU_SERVICE_COUNTER, "egpu_agent_dra_slice_deletions_total",
         "Deletions of the node's ResourceSlice the agent saw (the kubelet deletes it at its "
         "start and 30 s after the plugin leaves).",
         0, NULL, 0, NULL, &m->m_deletions},
        {EGPU_SERVICE_COUNTER, "egpu_agent_dra_slice_republishes_total",
         "Publishes that created the node's ResourceSlice again after it had been published "
         "(it was deleted).",
         0, NULL, 0, NULL, &m->m_republishes},
        {EGPU_SERVICE_GAUGE, "egpu_agent_dra_gpu_slice_state",
         "1 for the card's state in the ResourceSlice as last published: published, tainted "
         "(unhealthy, with the device taint) or absent (left out); 0 for the others.",
         3, state_labels, 0, NULL, &m->m_card_state},
        {EGPU_SERVICE_COUNTER, "egpu_agent_dra_requests_total",
         "DRAPlugin requests the kubelet made, by method: NodePrepareResources or "
         "NodeUnprepareResources (v1 and v1beta1).",
         1, method_label, 0, NULL, &m->m_requests},
        {EGPU_SERVICE_COUNTER, "egpu_agent_dra_claims_total",
         "Claims the DRAPlugin requests named, by method.", 1, method_label, 0, NULL, &m->m_claims},
        {EGPU_SERVICE_COUNTER, "egpu_agent_dra_errors_total",
         "Claims answered with an error, by method and reason: invalid (the claim refused), "
         "not_found (no such claim, or deleted mid-prepare), api (the API server), file (a "
         "file operation), no_memory; and requests refused whole, reason bad_request.",
         2, error_labels, 0, NULL, &m->m_errors},
        {EGPU_SERVICE_GAUGE, "egpu_agent_dra_claims_prepared",
         "Claims prepared on the node (the agent's claim records).", 0, NULL, 0, NULL,
         &m->m_prepared},
        {EGPU_SERVICE_GAUGE, "egpu_agent_dra_claim_records_bad",
         "Entries named as claim records that the agent does not believe (the next prepare of "
         "the claim rebuilds them).",
         0, NULL, 0, NULL, &m->m_bad_records},
        {EGPU_SERVICE_GAUGE, "egpu_agent_dra_gpu_shares",
         "Devices of prepared claims on the card (a whole card counts as one), from the agent's "
         "claim records.",
         2, gpu_labels, 0, NULL, &m->m_shares},
        {EGPU_SERVICE_GAUGE, "egpu_agent_dra_gpu_allocated_core_percent",
         "Core percent of the card that prepared claims consume (their allocation results, as "
         "the claim records hold them).",
         2, gpu_labels, 0, NULL, &m->m_alloc_core},
        {EGPU_SERVICE_GAUGE, "egpu_agent_dra_gpu_allocated_memory_mib",
         "Memory MiB of the card that prepared claims consume (their allocation results, as the "
         "claim records hold them).",
         2, gpu_labels, 0, NULL, &m->m_alloc_mem},
        {EGPU_SERVICE_GAUGE, "egpu_agent_dra_gpu_memory_mib",
         "The card's memory MiB (its memory capacity in the slice).", 2, gpu_labels, 0, NULL,
         &m->m_card_mem},
    };

    return egpu_service_metrics_new(t, sizeof(t) / sizeof(t[0]), &m->metrics, err);
}

/* Keep a card's series only while the card is listed (values[0] its UUID,
 * values[1] its slice device). */
static bool keep_card(const char *const *values, void *data)
{
    const struct egpu__dra_usage *u = data;

    for (size_t i = 0; i < u->ncards; i++)
        if (strcmp(u->cards[i].uuid, values[0]) == 0 && strcmp(u->cards[i].device, values[1]) == 0)
            return true;
    return false;
}

static const char *const METHODS[2] = {"NodePrepareResources", "NodeUnprepareResources"};

/* The DRAPlugin counters, from the plugin's (what is new since the last
 * refresh). */
static void metrics_plugin(struct dra_mode *m)
{
    struct egpu__dra_plugin_stats s, *o = &m->seen;

    egpu__dra_plugin_stats(m->plugin, &s);
    (void)egpu_metric_add(m->m_requests, &METHODS[0], (double)(s.prepare_calls - o->prepare_calls));
    (void)egpu_metric_add(m->m_requests, &METHODS[1],
                          (double)(s.unprepare_calls - o->unprepare_calls));
    (void)egpu_metric_add(m->m_claims, &METHODS[0], (double)(s.prepare_claims - o->prepare_claims));
    (void)egpu_metric_add(m->m_claims, &METHODS[1],
                          (double)(s.unprepare_claims - o->unprepare_claims));
    (void)egpu_metric_add(m->m_errors, (const char *const[]){METHODS[0], "bad_request"},
                          (double)(s.prepare_bad - o->prepare_bad));
    (void)egpu_metric_add(m->m_errors, (const char *const[]){METHODS[1], "bad_request"},
                          (double)(s.unprepare_bad - o->unprepare_bad));
    for (int r = 0; r < EGPU_DRA_REASON_COUNT; r++) {
        const char *reason = egpu__dra_reason_name((enum egpu__dra_reason)r);

        (void)egpu_metric_add(m->m_errors, (const char *const[]){METHODS[0], reason},
                              (double)(s.prepare_errors[r] - o->prepare_errors[r]));
        (void)egpu_metric_add(m->m_errors, (const char *const[]){METHODS[1], reason},
                              (double)(s.unprepare_errors[r] - o->unprepare_errors[r]));
    }
    *o = s;
}

/* The per-card gauges of the prepared claims, from the plugin's sums of its
 * claim records (never from a file a container can reach). */
static void metrics_usage(struct dra_mode *m)
{
    struct egpu__dra_usage *u = m->usage;

    if (u == NULL)
        return;
    egpu__dra_plugin_usage(m->plugin, u);
    (void)egpu_metric_set(m->m_prepared, NULL, (double)u->claims);
    (void)egpu_metric_set(m->m_bad_records, NULL, (double)u->bad);
    for (size_t i = 0; i < u->ncards; i++) {
        const struct egpu__dra_card_usage *c = &u->cards[i];
        const char *values[2] = {c->uuid, c->device};

        if (c->uuid[0] == '\0' || c->device[0] == '\0')
            continue;
        (void)egpu_metric_set(m->m_shares, values, (double)c->shares);
        (void)egpu_metric_set(m->m_alloc_core, values, (double)c->core_pct);
        (void)egpu_metric_set(m->m_alloc_mem, values, (double)c->alloc_mem_mib);
        (void)egpu_metric_set(m->m_card_mem, values, (double)c->mem_mib);
    }
    (void)egpu_metric_retain(m->m_shares, keep_card, u);
    (void)egpu_metric_retain(m->m_alloc_core, keep_card, u);
    (void)egpu_metric_retain(m->m_alloc_mem, keep_card, u);
    (void)egpu_metric_retain(m->m_card_mem, keep_card, u);
    (void)egpu_metric_retain(m->m_card_state, keep_card, u);
}

/* The gauges and the GetInfo counter, from the registration and the cards. */
static void metrics_refresh(struct dra_mode *m)
{
    struct egpu__dra_registration_state s;
    size_t n, healthy = 0;

    egpu__dra_registration_state(m->reg, &s);
    (void)egpu_metric_set(m->m_registered, NULL, s.registered ? 1.0 : 0.0);
    (void)egpu_metric_add(m->m_get_info, NULL, (double)(s.get_info_calls - m->seen_get_info));
    m->seen_get_info = s.get_info_calls;
    pthread_mutex_lock(&m->lock);
    n = m->ncards;
    for (size_t i = 0; i < n; i++)
        healthy += m->cards[i].healthy;
    pthread_mutex_unlock(&m->lock);
    (void)egpu_metric_set(m->m_cards, NULL, (double)n);
    (void)egpu_metric_set(m->m_healthy, NULL, (double)healthy);
    metrics_plugin(m);
    metrics_usage(m);
}

/* Each card's state in the slice just published from cards[0 .. n) with sc. */
static void metrics_slice_state(struct dra_mode *m, const struct egpu__dra_slice_config *sc,
                                const struct egpu_gpu_info *cards, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        enum egpu__dra_card_state now = egpu__dra_slice_card_state(sc, &m->slice, &cards[i]);
        char device[32];

        if (cards[i].uuid[0] == '\0' ||
            egpu_api_dra_device_name(cards[i].index, device, sizeof(device)) != 0)
            continue;
        for (int k = 0; k < EGPU_DRA_CARD_STATE_COUNT; k++)
            (void)egpu_metric_set(
                m->m_card_state,
                (const char *const[]){cards[i].uuid, device,
                                      egpu__dra_card_state_name((enum egpu__dra_card_state)k)},
                k == (int)now ? 1.0 : 0.0);
    }
}

/* Publish the slice for the cards as last listed; true when it holds. A
 * conflict (the slice changed between the list and the write) is tried
 * again at once, once. */
static bool publish(struct dra_mode *m)
{
    /* An unhealthy card stays with a device taint (gate DRADeviceTaints);
     * where the API server drops taints, dra_slice.c leaves it out. */
    struct egpu__dra_slice_config sc = {
        .driver = EGPU_API_DRA_DRIVER, .node = m->cfg->node, .taint_unhealthy = true};
    struct egpu__dra_slice_stats st;
    struct egpu_error err = {0};
    struct egpu_gpu_info *cards = egpu_calloc(EGPU_NODE_GPUS_MAX, sizeof(*cards));
    size_t n;
    int rc;

    if (cards == NULL) {
        egpu_log(EGPU_LOG_WARN, "ResourceSlice not published error=\"out of memory\"");
        return false;
    }
    pthread_mutex_lock(&m->lock);
    n = m->ncards;
    memcpy(cards, m->cards, n * sizeof(*cards));
    pthread_mutex_unlock(&m->lock);
    pthread_mutex_lock(&m->attrs_lock);
    sc.driver_version = m->attr_cfg.driver_version;
    sc.cuda_driver_version = m->attr_cfg.cuda_driver_version;
    sc.extra = m->attr_cfg.extra;
    rc = egpu__dra_slice_publish(m->kube, &m->slice, &sc, cards, n, &st, &err);
    if (rc == EGPU_KUBE_ECONFLICT) {
        err = (struct egpu_error){0};
        rc = egpu__dra_slice_publish(m->kube, &m->slice, &sc, cards, n, &st, &err);
    }
    pthread_mutex_unlock(&m->attrs_lock);
    (void)egpu_metric_inc(m->m_publishes, (const char *const[]){rc ? "error" : "ok"});
    if (rc) {
        egpu_free(cards);
        egpu_log(EGPU_LOG_WARN, "ResourceSlice not published error=\"%s\"", err.msg);
        return false;
    }
    metrics_slice_state(m, &sc, cards, n);
    egpu_free(cards);
    if (st.created && m->ever_published)
        (void)egpu_metric_inc(m->m_republishes, NULL);
    m->ever_published = true;
    (void)egpu_metric_set(m->m_devices, NULL, (double)st.devices);
    (void)egpu_metric_set(m->m_generation, NULL, (double)st.generation);
    if (st.created || st.updated || st.deleted)
        egpu_log(EGPU_LOG_NOTICE,
                 "ResourceSlice published name=%s devices=%u generation=%lld created=%u "
                 "updated=%u duplicates_deleted=%u",
                 st.name, st.devices, (long long)st.generation, st.created, st.updated, st.deleted);
    else
        egpu_log(EGPU_LOG_DEBUG, "ResourceSlice unchanged name=%s devices=%u", st.name, st.devices);
    return true;
}

/* The informer's on_delete: one of this node's slices of the driver is
 * gone; publish again at the next turn. */
static void on_slice_delete(void *ud, const json_t *obj)
{
    struct dra_mode *m = ud;
    const char *name = egpu_kube_str(json_object_get(json_object_get(obj, "metadata"), "name"));

    egpu_log(EGPU_LOG_NOTICE, "ResourceSlice deleted name=%s: publishing again",
             name != NULL ? name : "?");
    (void)egpu_metric_inc(m->m_deletions, NULL);
    atomic_store(&m->dirty, true);
}

static bool ready(void *data, char *why, size_t len)
{
    struct dra_mode *m = data;

    if (!atomic_load(&m->reg_serving)) {
        snprintf(why, len, "registration socket %s not served",
                 egpu__dra_registration_socket(m->reg));
        return false;
    }
    if (!atomic_load(&m->plugin_serving)) {
        snprintf(why, len, "DRA plugin socket %s not served", m->socket);
        return false;
    }
    if (!atomic_load(&m->published)) {
        snprintf(why, len, "ResourceSlice of node %s not published", m->cfg->node);
        return false;
    }
    snprintf(why, len, "ok");
    return true;
}

/* mkdir -p the directory part of path (the DRAPlugin socket's). */
static int make_parent(const char *path, struct egpu_error *err)
{
    char dir[PATH_MAX];
    char *slash;
    int rc;

    if (snprintf(dir, sizeof(dir), "%s", path) >= (int)sizeof(dir))
        return egpu_error_set(err, -ENAMETOOLONG, "--dra-socket %s: path too long", path);
    slash = strrchr(dir, '/');
    if (slash == NULL || slash == dir)
        return 0;
    *slash = '\0';
    rc = egpu__allocdir_mkdir_p(dir);
    if (rc)
        return egpu_error_set(err, rc, "--dra-socket: mkdir %s: %s", dir, strerror(-rc));
    return 0;
}

static int start(void *data, struct egpu_error *err)
{
    struct dra_mode *m = data;
    const struct egpu__dra_mode_config *c = m->cfg;
    struct egpu_gpus_config gc = {.fake = c->fake, .nvml_library = c->nvml, .node = c->node};
    struct egpu__dra_plugin_config pc = {.node = c->node,
                                         .driver = EGPU_API_DRA_DRIVER,
                                         .endpoint = m->socket,
                                         .alloc_root = c->alloc_root,
                                         .cdi_dir = c->cdi_dir,
                                         .interposer = c->interposer,
                                         .ctx_extra_mib = c->ctx_extra_mib};
    struct egpu__dra_registration_config rc_cfg = {
        .registry_dir = m->registry_dir, .driver = EGPU_API_DRA_DRIVER, .endpoint = m->socket};
    struct egpu_kube_informer_opts io = {.res = &egpu_kube_resourceslices,
                                         .field_selector = m->selector};
    struct egpu_kube_informer_cbs cbs = {.on_delete = on_slice_delete, .ud = m};
    struct egpu_service_config sc = {.opts = c->srv, .ready = ready, .data = m};
    const char *cdi = c->cdi_dir != NULL ? c->cdi_dir : EGPU_CDI_DIR;
    bool changed;
    int rc;

    m->cards = egpu_calloc(EGPU_NODE_GPUS_MAX, sizeof(*m->cards));
    m->usage = egpu_calloc(1, sizeof(*m->usage));
    if (m->cards == NULL || m->usage == NULL)
        return egpu_error_set(err, -ENOMEM, "out of memory");
    rc = egpu_gpus_open(&gc, &m->gpus, err);
    if (!rc)
        rc = egpu_kube_config_load(c->srv->kubeconfig, c->srv->context, &m->kcfg, err);
    if (!rc)
        rc = egpu_kube_new(m->kcfg, &m->kube, err);
    if (rc)
        return rc;
    pc.kube = m->kube;
    rc = egpu__dra_plugin_new(&pc, &m->plugin, err);
    if (!rc)
        rc = egpu__dra_registration_new(&rc_cfg, &m->reg, err);
    if (!rc)
        rc = refresh(m, &changed, err);
    if (rc)
        return rc;
    rc = egpu__allocdir_mkdir_p(cdi);
    if (rc)
        return egpu_error_set(err, rc, "--cdi-dir: mkdir %s: %s", cdi, strerror(-rc));
    rc = make_parent(m->socket, err);
    if (!rc)
        rc = metrics_new(m, err);
    sc.reg = m->metrics;
    if (!rc)
        rc = egpu_service_new(&sc, &m->svc, err);
    if (!rc)
        rc = egpu_service_start(&m->svc, err);
    if (rc)
        return rc;
    egpu_log(EGPU_LOG_NOTICE,
             "serving addr=%s port=%u node=%s backend=%s mode=dra driver=%s socket=%s "
             "registry=%s cdi=%s",
             c->srv->listen, egpu_http_server_port(m->svc.hsrv), c->node,
             egpu_gpus_kind(m->gpus) == EGPU_GPUS_FAKE ? "fake" : "nvml", EGPU_API_DRA_DRIVER,
             m->socket, m->registry_dir, cdi);
    /* The GPU objects, as device-plugin mode publishes them. */
    m->health = (struct egpu__health){.gpus = m->gpus,
                                      .node = c->node,
                                      .fake_health = c->fake_health,
                                      .kube = m->kube,
                                      .refresh = refresh,
                                      .refresh_data = m};
    egpu__health_publish(&m->health);
    atomic_store(&m->published, publish(m));
    atomic_store(&m->dirty, false);
    /* DRAPlugin before the registration: the kubelet dials the endpoint
     * as soon as GetInfo names it. */
    rc = egpu__dra_plugin_serve(m->plugin, err);
    if (rc)
        return rc;
    atomic_store(&m->plugin_serving, true);
    rc = egpu__dra_registration_serve(m->reg, err);
    if (rc)
        return rc;
    atomic_store(&m->reg_serving, true);
    rc = egpu_kube_informer_new(m->kube, &io, &cbs, &m->inf, err);
    if (!rc)
        rc = egpu_kube_informer_start(m->inf, err);
    if (rc)
        return rc;
    rc = pthread_create(&m->health_thread, NULL, egpu__health_main, &m->health);
    if (rc)
        return egpu_error_set(err, -rc, "health thread: %s", strerror(rc));
    m->health_started = true;
    return 0;
}

/* Log what the kubelet last said through NotifyRegistrationStatus, once per
 * change. */
static void log_registration(struct dra_mode *m, struct egpu__dra_registration_state *last)
{
    struct egpu__dra_registration_state s;

    egpu__dra_registration_state(m->reg, &s);
    if (s.notifications == last->notifications)
        return;
    if (s.registered)
        egpu_log(EGPU_LOG_NOTICE, "kubelet registered the plugin driver=%s", EGPU_API_DRA_DRIVER);
    else
        egpu_log(EGPU_LOG_WARN, "kubelet refused the plugin driver=%s error=\"%s\"",
                 EGPU_API_DRA_DRIVER, s.error);
    *last = s;
}

static bool socket_exists(const char *path)
{
    struct stat st;

    return lstat(path, &st) == 0 && S_ISSOCK(st.st_mode);
}

static void run(void *data)
{
    struct dra_mode *m = data;
    struct egpu__dra_registration_state last = {0};
    long interval_ms = (long)m->cfg->slice_interval_s * 1000;
    long retry_ms = RETRY_MIN_MS, next_publish, next_serve = 0;
    bool warned_reg = false, warned_plugin = false;

    next_publish = now_ms() + (atomic_load(&m->published) ? interval_ms : retry_ms);
    while (!egpu_service_stopping()) {
        struct timespec nap = {.tv_sec = 0, .tv_nsec = LOOP_MS * 1000000L};
        struct egpu_error err = {0};
        long now;

        nanosleep(&nap, NULL);
        now = now_ms();
        log_registration(m, &last);
        metrics_refresh(m);
        if (!socket_exists(m->socket) && now >= next_serve) {
            if (atomic_load(&m->plugin_serving))
                egpu_log(EGPU_LOG_NOTICE, "DRA plugin socket %s gone: serving again", m->socket);
            atomic_store(&m->plugin_serving, false);
            if (make_parent(m->socket, &err) != 0 || egpu__dra_plugin_serve(m->plugin, &err) != 0) {
                if (!warned_plugin)
                    egpu_log(EGPU_LOG_WARN, "DRA plugin not served, retrying error=\"%s\"",
                             err.msg);
                warned_plugin = true;
                next_serve = now + RETRY_MIN_MS;
            } else {
                warned_plugin = false;
                atomic_store(&m->plugin_serving, true);
            }
            err = (struct egpu_error){0};
        }
        if (!egpu__dra_registration_socket_exists(m->reg) && now >= next_serve) {
            if (atomic_load(&m->reg_serving))
                egpu_log(EGPU_LOG_NOTICE, "registration socket %s gone: serving again",
                         egpu__dra_registration_socket(m->reg));
            atomic_store(&m->reg_serving, false);
            if (egpu__dra_registration_serve(m->reg, &err) != 0) {
                if (!warned_reg)
                    egpu_log(EGPU_LOG_WARN, "registration not served, retrying error=\"%s\"",
                             err.msg);
                warned_reg = true;
                next_serve = now + RETRY_MIN_MS;
            } else {
                warned_reg = false;
                atomic_store(&m->reg_serving, true);
            }
        }
        if (!atomic_exchange(&m->dirty, false) && now < next_publish)
            continue;
        if (publish(m)) {
            atomic_store(&m->published, true);
            retry_ms = RETRY_MIN_MS;
            next_publish = now_ms() + interval_ms;
        } else {
            /* The slice may still be there; readiness says the last try failed. */
            atomic_store(&m->published, false);
            next_publish = now_ms() + retry_ms;
            retry_ms = retry_ms * 2 < interval_ms ? retry_ms * 2 : interval_ms;
        }
    }
}

static void finish(void *data)
{
    struct dra_mode *m = data;

    if (m->health_started)
        pthread_join(m->health_thread, NULL); /* it ends once egpu_service_stopping() */
    egpu_kube_informer_free(m->inf);
    egpu_service_stop(&m->svc);
    /* The registration first: the kubelet deregisters before the endpoint goes. */
    egpu__dra_registration_free(m->reg);
    egpu__dra_plugin_free(m->plugin);
    egpu_service_free(&m->svc);
    egpu_metrics_free(m->metrics);
    egpu__dra_slice_state_close(&m->slice);
    egpu_kube_free(m->kube);
    egpu_kube_config_free(m->kcfg);
    egpu_gpus_free(m->gpus);
    egpu_free(m->cards);
    egpu_free(m->usage);
    egpu_free(m->attrs);
    pthread_mutex_destroy(&m->lock);
    pthread_mutex_destroy(&m->attrs_lock);
}

int egpu__dra_mode_main(const struct egpu__dra_mode_config *cfg)
{
    static struct dra_mode m;
    struct egpu_service_main sm = {
        .prog = "egpu-agent", .start = start, .run = run, .finish = finish};

    m = (struct dra_mode){.cfg = cfg,
                          .socket = cfg->socket != NULL ? cfg->socket : EGPU_DRA_MODE_SOCKET,
                          .registry_dir = cfg->registry_dir != NULL ? cfg->registry_dir
                                                                    : EGPU_DRA_REGISTRY_DIR};
    pthread_mutex_init(&m.lock, NULL);
    pthread_mutex_init(&m.attrs_lock, NULL);
    snprintf(m.selector, sizeof(m.selector), "spec.nodeName=%s,spec.driver=%s", cfg->node,
             EGPU_API_DRA_DRIVER);
    sm.log_level = cfg->srv->log_level;
    return egpu_service_main(&sm, &m);
}
