/* scheduler/sched_int.h - egpu-scheduler's private parts: options and the
 * API-server side (informers, annotate, bind). */
#ifndef EGPU_SCHED_INT_H
#define EGPU_SCHED_INT_H

#include "egpu/kube.h"
#include "egpu/scheduler.h"

#define SCHED_INFORMERS 3 /* nodes, GPUs, pods, in this order */

struct egpu_sched_api {
    struct egpu_kube *kube;
    struct egpu_sched_cache *cache;
    struct egpu_kube_informer *informers[SCHED_INFORMERS];
    atomic_ulong refused[SCHED_INFORMERS]; /* objects the cache refused (malformed), logged */
};

/* The kind of informer i ("Node", "GPU", "Pod"), for logs and metric labels. */
const char *egpu__sched_api_kind(int i);

/* Objects of informer i left out of the cache since the start: those the
 * informer skipped (no event, no usable name) and those the cache refused as
 * malformed. Each was logged when it happened. */
unsigned long egpu__sched_api_skipped(struct egpu_sched_api *api, int i);

/* Start the informers feeding api->cache. Returns 0 or an informer error. */
int egpu__sched_api_start(struct egpu_sched_api *api, struct egpu_error *err) EGPU_MUST_CHECK;
/* Stop and free the informers. */
void egpu__sched_api_stop(struct egpu_sched_api *api);
/* struct egpu_extender_ops callbacks; data is the struct egpu_sched_api. */
bool egpu__sched_api_synced(void *data);
int egpu__sched_api_annotate(void *data, const char *ns, const char *name, const char *key,
                             const char *value, struct egpu_error *err);
int egpu__sched_api_bind(void *data, const char *ns, const char *name, const char *uid,
                         const char *node, struct egpu_error *err);

/* egpu-scheduler's settings, from flags, else environment, else defaults. */
struct egpu_sched_options {
    const char *listen; /* address to serve on */
    unsigned port;
    const char *prefix; /* path prefix of the verbs, "" or "/scheduler" */
    const char *tls_cert, *tls_key;
    const char *kubeconfig, *context;
    enum egpu_policy_kind node_policy, card_policy;
    uint64_t seed;
    long watch_unhealthy_ms;    /* not ready while an informer has failed this long */
    const char *scheduler_name; /* bind serves only pods with this spec.schedulerName */
    bool leader_elect;
    const char *lease_ns, *lease_name;
    long lease_duration_ms, renew_deadline_ms, retry_period_ms;
    unsigned threads;
    size_t max_body_bytes;
    int log_level;
};

/* Parse argv (and the EGPU_* environment) into *o. Returns -1 to run, 0 when
 * --help or --version was answered, 2 on a bad flag (message printed). */
int egpu__sched_options_parse(int argc, char **argv, struct egpu_sched_options *o);

#endif /* EGPU_SCHED_INT_H */
