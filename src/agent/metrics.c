/* agent/metrics.c - the agent's own series on /metrics (metrics_int.h):
 * registered once into the registry the service serves, then refreshed
 * (every second, by the main loop) from the plugin's counters and from its
 * record of what PreStartContainer wrote (record.c), never from a file a
 * container could have written. A container's limit gauges go to 0 once
 * its entry has left the record (the cleanup dropped its dir), so a
 * scraper sees it leave. Units: percent of a card, MiB.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "egpu/log.h"
#include "metrics_int.h"

int egpu__agent_metrics_register(struct egpu__agent_metrics *m, struct egpu_metrics *reg,
                                 struct egpu_error *err)
{
    static const char *const gpu_label[] = {"gpu"};
    static const char *const used_labels[] = {"gpu", "source"};
    static const char *const ctr_labels[] = {"namespace", "pod", "container"};
    static const char *const at_label[] = {"at"};
    const struct egpu_service_metric t[] = {
        {EGPU_SERVICE_GAUGE, "egpu_agent_registered",
         "1 while the device plugin is registered with the kubelet.", 0, NULL, 0, NULL,
         &m->m_registered},
        {EGPU_SERVICE_GAUGE, "egpu_agent_gpus", "GPUs the backend lists.", 0, NULL, 0, NULL,
         &m->m_cards},
        {EGPU_SERVICE_GAUGE, "egpu_agent_gpus_healthy", "Healthy GPUs.", 0, NULL, 0, NULL,
         &m->m_healthy},
        {EGPU_SERVICE_COUNTER, "egpu_agent_allocations_total",
         "Containers the device plugin allocated.", 0, NULL, 0, NULL, &m->m_allocs},
        {EGPU_SERVICE_COUNTER, "egpu_agent_allocation_errors_total", "Allocate calls refused.", 0,
         NULL, 0, NULL, &m->m_alloc_errors},
        {EGPU_SERVICE_COUNTER, "egpu_agent_prestarts_total", "PreStartContainer calls answered OK.",
         0, NULL, 0, NULL, &m->m_prestarts},
        {EGPU_SERVICE_COUNTER, "egpu_agent_registrations_total",
         "Successful registrations with the kubelet.", 0, NULL, 0, NULL, &m->m_registrations},
        {EGPU_SERVICE_COUNTER, "egpu_agent_allocation_mismatches_total",
         "PreStartContainer calls refused: device IDs on other GPUs than the scheduler assigned.",
         0, NULL, 0, NULL, &m->m_mismatches},
        {EGPU_SERVICE_COUNTER, "egpu_agent_allocated_marks_total",
         "Containers marked elasticgpu.io/allocated, by when: right after Allocate (PodResources "
         "showed the owner) or at PreStartContainer (the fallback).",
         1, at_label, 0, NULL, &m->m_marks},
        {EGPU_SERVICE_GAUGE, "egpu_agent_gpu_allocated_core_percent",
         "Core percent of the GPU given to live allocations (as PreStartContainer wrote).", 1,
         gpu_label, 0, NULL, &m->m_gpu_core},
        {EGPU_SERVICE_GAUGE, "egpu_agent_gpu_allocated_memory_mib",
         "Memory MiB of the GPU given to live allocations (as PreStartContainer wrote).", 1,
         gpu_label, 0, NULL, &m->m_gpu_mem},
        {EGPU_SERVICE_GAUGE, "egpu_agent_gpu_used_memory_mib",
         "Memory MiB in use on the GPU, as NVML reports it (0 for fake cards); source is the NVML "
         "call: nvmlDeviceGetMemoryInfo_v2 (the driver's reservation left out), "
         "nvmlDeviceGetMemoryInfo (counted in) or none.",
         2, used_labels, 0, NULL, &m->m_gpu_used},
        {EGPU_SERVICE_GAUGE, "egpu_agent_gpu_reserved_memory_mib",
         "Memory MiB the driver and firmware reserve on the GPU (nvmlDeviceGetMemoryInfo_v2; 0 "
         "where only nvmlDeviceGetMemoryInfo answers, which counts it as used).",
         1, gpu_label, 0, NULL, &m->m_gpu_reserved},
        {EGPU_SERVICE_GAUGE, "egpu_agent_container_limit_core_percent",
         "A container's core limit, percent per GPU (0 once it is gone).", 3, ctr_labels, 0, NULL,
         &m->m_ctr_core},
        {EGPU_SERVICE_GAUGE, "egpu_agent_container_limit_memory_mib",
         "A container's memory limit, MiB per GPU (0 once it is gone).", 3, ctr_labels, 0, NULL,
         &m->m_ctr_mem},
    };

    *m = (struct egpu__agent_metrics){.reg = reg};
    return egpu_service_metrics_add(reg, t, sizeof(t) / sizeof(t[0]), err);
}

/* Set the container gauges of key (adding it to the known ones). */
static void set_container(struct egpu__agent_metrics *m, const char *ns, const char *pod,
                          const char *container, double core, double mem)
{
    struct egpu__agent_ctr *k = NULL;
    const char *values[3];

    for (size_t i = 0; i < m->nctrs && k == NULL; i++)
        if (strcmp(m->ctrs[i].v[0], ns) == 0 && strcmp(m->ctrs[i].v[1], pod) == 0 &&
            strcmp(m->ctrs[i].v[2], container) == 0)
            k = &m->ctrs[i];
    if (k == NULL) {
        struct egpu__agent_ctr *grown = egpu_realloc(m->ctrs, (m->nctrs + 1) * sizeof(*grown));

        if (grown == NULL)
            return;
        m->ctrs = grown;
        k = &m->ctrs[m->nctrs++];
        snprintf(k->v[0], sizeof(k->v[0]), "%s", ns);
        snprintf(k->v[1], sizeof(k->v[1]), "%s", pod);
        snprintf(k->v[2], sizeof(k->v[2]), "%s", container);
    }
    k->live = true;
    values[0] = k->v[0];
    values[1] = k->v[1];
    values[2] = k->v[2];
    (void)egpu_metric_set(m->m_ctr_core, values, core);
    (void)egpu_metric_set(m->m_ctr_mem, values, mem);
}

/* Keep a used-memory series only while its card is listed with that
 * source, so a card that falls back from v2 to v1 (or leaves) does not
 * leave its old series behind. */
struct used_keep {
    const struct egpu_gpu_info *cards;
    size_t ncards;
};

static bool keep_used(const char *const *values, void *data)
{
    const struct used_keep *k = data;

    for (size_t i = 0; i < k->ncards; i++)
        if (strcmp(k->cards[i].uuid, values[0]) == 0)
            return strcmp(egpu_gpu_mem_source_name(k->cards[i].mem_source), values[1]) == 0;
    return false;
}

size_t egpu__agent_metrics_used_retain(struct egpu_metric *m_used,
                                       const struct egpu_gpu_info *cards, size_t n)
{
    struct used_keep k = {.cards = cards, .ncards = n};

    return egpu_metric_retain(m_used, keep_used, &k);
}

/* What refresh_allocations adds up. */
struct alloc_sum {
    struct egpu__agent_metrics *m;
    const struct egpu_gpu_info *cards;
    size_t ncards;
    double core[EGPU_NODE_GPUS_MAX], mem[EGPU_NODE_GPUS_MAX];
};

static void add_limits(void *data, const struct egpu__alloc_limits *l)
{
    struct alloc_sum *s = data;

    for (uint32_t g = 0; g < l->ngpus; g++) {
        for (size_t i = 0; i < s->ncards; i++) {
            if (strcmp(s->cards[i].uuid, l->gpus[g]) == 0) {
                s->core[i] += l->core_pct;
                s->mem[i] += l->mem_mib;
            }
        }
    }
    set_container(s->m, l->ns, l->pod, l->container, l->core_pct, l->mem_mib);
}

/* The allocation gauges from the agent's own record of what
 * PreStartContainer wrote (the cleanup drops the dirs no container holds),
 * never from a file a container could have written. */
static void refresh_allocations(struct egpu__agent_metrics *m, struct egpu_plugin *p)
{
    struct egpu_gpu_info *cards = egpu_calloc(EGPU_NODE_GPUS_MAX, sizeof(*cards));
    struct alloc_sum *s = egpu_calloc(1, sizeof(*s));

    if (cards == NULL || s == NULL) {
        egpu_free(cards);
        egpu_free(s);
        return;
    }
    s->m = m;
    s->cards = cards;
    s->ncards = egpu__plugin_cards(p, cards, EGPU_NODE_GPUS_MAX);
    for (size_t i = 0; i < m->nctrs; i++)
        m->ctrs[i].live = false;
    egpu__plugin_each_limits(p, add_limits, s);
    for (size_t i = 0; i < s->ncards; i++) {
        const char *values[1] = {cards[i].uuid};
        const char *used[2] = {cards[i].uuid, egpu_gpu_mem_source_name(cards[i].mem_source)};

        if (cards[i].uuid[0] == '\0')
            continue;
        (void)egpu_metric_set(m->m_gpu_core, values, s->core[i]);
        (void)egpu_metric_set(m->m_gpu_mem, values, s->mem[i]);
        (void)egpu_metric_set(m->m_gpu_used, used, (double)cards[i].used_mem_mib);
        (void)egpu_metric_set(m->m_gpu_reserved, values, (double)cards[i].reserved_mem_mib);
    }
    (void)egpu__agent_metrics_used_retain(m->m_gpu_used, cards, s->ncards);
    for (size_t i = 0; i < m->nctrs; i++) {
        const char *values[3] = {m->ctrs[i].v[0], m->ctrs[i].v[1], m->ctrs[i].v[2]};

        if (m->ctrs[i].live)
            continue;
        (void)egpu_metric_set(m->m_ctr_core, values, 0);
        (void)egpu_metric_set(m->m_ctr_mem, values, 0);
    }
    egpu_free(s);
    egpu_free(cards);
}

void egpu__agent_metrics_refresh(struct egpu__agent_metrics *m, struct egpu_plugin *p,
                                 bool registered)
{
    struct egpu_plugin_stats s;

    egpu__plugin_stats(p, &s);
    (void)egpu_metric_set(m->m_registered, NULL, registered ? 1.0 : 0.0);
    (void)egpu_metric_set(m->m_cards, NULL, (double)s.cards);
    (void)egpu_metric_set(m->m_healthy, NULL, (double)s.healthy);
    (void)egpu_metric_add(m->m_allocs, NULL, (double)(s.allocations - m->seen.allocations));
    (void)egpu_metric_add(m->m_alloc_errors, NULL, (double)(s.alloc_errors - m->seen.alloc_errors));
    (void)egpu_metric_add(m->m_prestarts, NULL, (double)(s.prestarts - m->seen.prestarts));
    (void)egpu_metric_add(m->m_registrations, NULL,
                          (double)(s.registrations - m->seen.registrations));
    (void)egpu_metric_add(m->m_mismatches, NULL, (double)(s.mismatches - m->seen.mismatches));
    (void)egpu_metric_add(m->m_marks, (const char *const[]){"allocate"},
                          (double)(s.marked_allocate - m->seen.marked_allocate));
    (void)egpu_metric_add(m->m_marks, (const char *const[]){"prestart"},
                          (double)(s.marked_prestart - m->seen.marked_prestart));
    m->seen = s;
    refresh_allocations(m, p);
}

void egpu__agent_metrics_close(struct egpu__agent_metrics *m)
{
    egpu_free(m->ctrs);
    m->ctrs = NULL;
    m->nctrs = 0;
}
