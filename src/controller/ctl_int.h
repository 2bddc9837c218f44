/* controller/ctl_int.h - egpu-controller's private parts: its options
 * (options.c), the state the reconcilers share (main.c), the API writes
 * and events (writes.c), and the two reconcilers (claim.c, egpu.c). */
#ifndef EGPU_CTL_INT_H
#define EGPU_CTL_INT_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "egpu/api.h"
#include "egpu/cli.h"
#include "egpu/controller.h"
#include "egpu/kube.h"
#include "egpu/net.h"

#define CTL_PROG "egpu-controller"

struct ctl_options {
    struct egpu_cli_server srv;
    long resync_ms; /* every key queued again this often */
    long meter_ms;  /* each namespace with a GPUBudget metered this often */
};

/* Parse argv into *o. Returns -1 to run, else the exit status (0 after
 * --help or --version, 2 after bad usage). */
int ctl_options_parse(int argc, char **argv, struct ctl_options *o);

enum ctl_inf {
    CTL_CLAIMS,
    CTL_CLASSES,
    CTL_EGPUS,
    CTL_GPUS,
    CTL_NODES,
    CTL_PODS,
    CTL_BUDGETS,
    CTL_NINF
};

struct ctl {
    struct ctl_options o;
    struct egpu_kube_config *kcfg;
    struct egpu_kube *kube;
    struct egpu_kube_informer *inf[CTL_NINF];
    struct egpu_ctl_queue *queue;
    struct egpu_kube_elector *el;
    atomic_bool leading;
    atomic_bool stop;
    pthread_t worker;
    bool worker_started;
    long long next_resync_ms;
    long long next_meter_ms;
    json_t *assumed;       /* ElasticGPUs this controller created that the informer may not
                              hold yet: name -> object (worker thread only) */
    struct ctl_index *idx; /* index.c: inventories and ElasticGPU maps, kept across reconciles */
    struct egpu_service svc;
    struct egpu_metrics *reg;
    struct egpu_metric *m_claims, *m_egpus, *m_latency, *m_errors, *m_depth, *m_leader;
    struct egpu_ctl_gpu_index *gs;                                          /* gpustatus.c */
    struct egpu_metric *m_gs_writes, *m_gs_errors;                          /* gpustatus.c */
    struct egpu_metric *m_budget_used, *m_budget_remaining, *m_budget_over; /* budget.c */
};

/* Queue keys: "c/<ns>/<name>" for a claim, "e/<name>" for an ElasticGPU,
 * "b/<ns>" for the GPUBudgets of a namespace. */
void ctl_enqueue_claim(struct ctl *c, const char *ns, const char *name);
void ctl_enqueue_budgets(struct ctl *c, const char *ns);
void ctl_enqueue_egpu(struct ctl *c, const char *name);

/* Reconcile one claim or ElasticGPU from the caches. Returns 0 (done, or
 * nothing to do), or a negative code: the key is retried with backoff. */
int ctl_claim_sync(struct ctl *c, const char *ns, const char *name);
int ctl_egpu_sync(struct ctl *c, const char *name);
/* Meter the GPUBudgets of namespace ns and release the pods metered to
 * their end (budget.c). Returns 0 or the client's error. */
int ctl_budget_sync(struct ctl *c, const char *ns);
/* Has namespace ns a GPUBudget in the informer's cache (budget.c)? */
bool ctl_budget_exists(struct ctl *c, const char *ns);

/* ---- index.c: what the worker keeps between reconciles ---- */

/* Create c->idx. Returns 0 or -ENOMEM (ctl_index_free frees what was made). */
int ctl_index_new(struct ctl *c);
void ctl_index_free(struct ctl *c);
/* Informer threads: ElasticGPU name changed (deleted: a delete event), or
 * a GPU, Node or class changed what provisioning may use. */
void ctl_index_note_egpu(struct ctl *c, const char *name, bool deleted);
void ctl_index_note_capacity(struct ctl *c);
/* Informer threads: pod changed (deleted: a delete event); what it holds
 * is counted again in the inventories at the next refresh. */
void ctl_index_note_pod(struct ctl *c, const json_t *pod, bool deleted);
/* Does an update from old to obj (GPU, Node or class) change capacity:
 * a GPU's spec or health, a Node's labels, a class's fields? */
bool ctl_capacity_changed(const json_t *old, const json_t *obj);
/* Worker: apply the notes taken since the last call. */
void ctl_index_refresh(struct ctl *c);
/* Worker: count ElasticGPU obj, just created by this controller, at once. */
void ctl_index_created(struct ctl *c, json_t *obj);
/* Worker: the inventory of class cls, built on first use and kept current
 * (borrowed; valid until the next refresh). NULL with err set on failure. */
struct egpu_ctl_inventory *ctl_index_inventory(struct ctl *c, const struct egpu_api_class *cls,
                                               struct egpu_error *err);
/* Worker: the ElasticGPU whose claimRef has uid, or NULL (borrowed). */
const char *ctl_index_egpu_of_uid(struct ctl *c, const char *uid);
/* Worker: the names of the Available ElasticGPUs, as a JSON object's keys
 * (borrowed). */
json_t *ctl_index_available(struct ctl *c);

/* ---- gpustatus.c: GPU status.allocated from the pods' assigned annotations ---- */

/* Create c->gs and register the status-write counters in c->reg. Returns 0
 * or an error (ctl_gs_free frees what was made). */
int ctl_gs_init(struct ctl *c, struct egpu_error *err);
void ctl_gs_free(struct ctl *c);
/* Informer threads: a pod was added or changed (deleted false) or deleted;
 * a GPU object was added (old NULL), changed from old, or deleted. They
 * queue "g/<node>/<uuid>" for each card whose status may now differ. */
void ctl_gs_pod(struct ctl *c, const json_t *pod, bool deleted);
void ctl_gs_gpu(struct ctl *c, const json_t *old, const json_t *gpu, bool deleted);
/* Queue every card of a GPU object (leading starts, resync). */
void ctl_gs_enqueue_all(struct ctl *c);
/* Worker: make the status.allocated of the GPU object of card key
 * "<node>/<uuid>" what the pods say (a merge patch, only when it differs).
 * Returns 0 or the client's error (the key is retried). */
int ctl_gs_sync(struct ctl *c, const char *key);

/* ---- writes.c ---- */

/* PUT a copy of orig with its spec (which "spec"), status ("status"),
 * metadata.finalizers ("finalizers") or metadata.annotations
 * ("annotations") taken from enc, an encoding of the
 * decoded object (egpu_api_*_encode) after the change; orig's
 * resourceVersion guards it (a stale one is EGPU_KUBE_ECONFLICT). *out
 * (may be NULL) gets the stored object. Returns 0 or the client's error. */
int ctl_put(struct ctl *c, const struct egpu_kube_resource *res, const json_t *orig,
            const json_t *enc, const char *which, json_t **out);

/* Post an Event about an object; failures are logged only. */
void ctl_event(struct ctl *c, const char *kind, const char *ns, const char *name, const char *uid,
               bool warning, const char *reason, const char *fmt, ...) EGPU_PRINTF(8, 9);

/* Now as RFC 3339 ("2026-07-24T09:31:03Z") into buf. */
void ctl_now(char *buf, size_t len);

/* The cached object, decoded into heap memory (caller egpu_free()s); NULL
 * when absent or malformed (logged). */
struct egpu_api_egpu *ctl_egpu_get(struct ctl *c, const char *name, json_t **obj);
struct egpu_api_claim *ctl_claim_get(struct ctl *c, const char *ns, const char *name, json_t **obj);

/* The model of the GPU object name (from the cache), or "" ; into buf. */
const char *ctl_gpu_model(struct ctl *c, const char *name, char *buf, size_t len);

#endif /* EGPU_CTL_INT_H */
