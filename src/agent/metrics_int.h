/* agent/metrics_int.h - the agent's series on /metrics (metrics.c),
 * private to src/agent.
 */
#ifndef EGPU_AGENT_METRICS_INT_H
#define EGPU_AGENT_METRICS_INT_H

#include <stdbool.h>
#include <stddef.h>

#include "egpu/api.h"
#include "egpu/net.h"
#include "plugin_int.h"

/* One container's labels (namespace, pod, container). */
struct egpu__agent_ctr {
    char v[3][EGPU_K8S_NAME_MAX];
    bool live;
};

/* The series and what the last refresh saw. Caller-owned storage, filled by
 * egpu__agent_metrics_register; the series are the registry's. */
struct egpu__agent_metrics {
    struct egpu_metrics *reg; /* borrowed */
    struct egpu_metric *m_registered, *m_cards, *m_healthy, *m_allocs, *m_alloc_errors,
        *m_prestarts, *m_registrations, *m_mismatches, *m_marks;
    struct egpu_metric *m_gpu_core, *m_gpu_mem, *m_gpu_used, *m_gpu_reserved, *m_ctr_core,
        *m_ctr_mem;
    struct egpu__agent_ctr *ctrs; /* containers with limit gauges (set to 0 once gone) */
    size_t nctrs;
    struct egpu_plugin_stats seen; /* the counters at the last refresh */
};

/* Register the agent's series (egpu_agent_*) in reg (borrowed: it must
 * outlive m) and fill *m, by egpu_service_metrics_add. Returns 0, or its
 * error ("metrics: <reason>": -EINVAL, -EEXIST, EGPU_ELIMIT, -ENOMEM). */
int egpu__agent_metrics_register(struct egpu__agent_metrics *m, struct egpu_metrics *reg,
                                 struct egpu_error *err) EGPU_MUST_CHECK;

/* Set the series from the plugin p (its counters, cards and record) and
 * registered (whether the device plugin is registered with the kubelet).
 * Out of memory skips the allocation gauges of this refresh. One thread at
 * a time. */
void egpu__agent_metrics_refresh(struct egpu__agent_metrics *m, struct egpu_plugin *p,
                                 bool registered);

/* Drop the series of m_used (labels gpu, source: egpu_agent_gpu_used_memory_mib)
 * but those of a card of cards[0 .. n) under the source it has now
 * (egpu_gpu_mem_source_name), so a card that fell back from v2 to v1, or
 * left, keeps no stale series. Returns how many were dropped. */
size_t egpu__agent_metrics_used_retain(struct egpu_metric *m_used,
                                       const struct egpu_gpu_info *cards, size_t n);

/* Free what m holds besides the series (the registry frees those). */
void egpu__agent_metrics_close(struct egpu__agent_metrics *m);

#endif /* EGPU_AGENT_METRICS_INT_H */
