/* controller/controller_int.h - egpu-controller's private parts: its options
 * (options.c), the state the reconcilers share (made by main.c), the event
 * routing (route.c), the worker (worker.c), the API writes and events
 * (writes.c), and the reconcilers (claim.c, egpu.c, budget.c). */
#ifndef EGPU_CONTROLLER_INT_H
#define EGPU_CONTROLLER_INT_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "egpu/api.h"
#include "egpu/cli.h"
#include "egpu/controller.h"
#include "egpu/kube.h"
#include "egpu/net.h"

#define EGPU__CONTROLLER_PROG "egpu-controller"

struct egpu__controller_options {
    struct egpu_cli_server srv;
    long resync_ms; /* every key queued again this often */
    long meter_ms;  /* each namespace with a GPUBudget metered this often */
    bool dra;       /* --mode dra: also the DRA reconcilers (dra.c) */
    long dra_gc_ms; /* a ResourceClaimTemplate of ours no pod names is deleted after this */
};

/* Parse argv into *o. Returns -1 to run, else the exit status (0 after
 * --help or --version, 2 after bad usage). */
int egpu__controller_options_parse(int argc, char **argv, struct egpu__controller_options *o);

enum egpu__controller_inf {
    EGPU__CONTROLLER_CLAIMS,
    EGPU__CONTROLLER_CLASSES,
    EGPU__CONTROLLER_EGPUS,
    EGPU__CONTROLLER_GPUS,
    EGPU__CONTROLLER_NODES,
    EGPU__CONTROLLER_PODS,
    EGPU__CONTROLLER_BUDGETS,
    EGPU__CONTROLLER_NINF
};

/* --mode dra's informers (dra.c): none without it. */
enum egpu__controller_dra_inf {
    EGPU__CONTROLLER_DRA_TEMPLATES, /* resource.k8s.io/v1 ResourceClaimTemplates */
    EGPU__CONTROLLER_DRA_CLASSES,   /* resource.k8s.io/v1 DeviceClasses */
    EGPU__CONTROLLER_DRA_CLAIMS,    /* resource.k8s.io/v1 ResourceClaims labelled ours */
    EGPU__CONTROLLER_DRA_NINF
};

struct egpu__controller {
    struct egpu__controller_options o;
    struct egpu_kube_config *kcfg;
    struct egpu_kube *kube;
    struct egpu_kube_informer *inf[EGPU__CONTROLLER_NINF];
    struct egpu_controller_queue *queue;
    struct egpu_kube_elector *el;
    atomic_bool leading;
    atomic_bool stop;
    pthread_t worker;
    bool worker_started;
    long long next_resync_ms;
    long long next_meter_ms;
    json_t *assumed; /* ElasticGPUs this controller created that the informer may not
                        hold yet: name -> object (worker thread only) */
    struct egpu__controller_index
        *idx; /* index.c: inventories and ElasticGPU maps, kept across reconciles */
    struct egpu_service svc;
    struct egpu_metrics *reg;
    struct egpu_metric *m_claims, *m_egpus, *m_latency, *m_errors, *m_depth, *m_leader;
    struct egpu_controller_gpu_index *gs;                                   /* gpustatus.c */
    struct egpu_metric *m_gs_writes, *m_gs_errors;                          /* gpustatus.c */
    struct egpu_metric *m_budget_used, *m_budget_remaining, *m_budget_over; /* budget.c */
    struct egpu_kube_informer *dra_inf[EGPU__CONTROLLER_DRA_NINF];          /* dra.c */
    json_t *dra_warned; /* dra.c, worker only: "<ns>/<pod>" -> {"<uid> <template> <reason>": true},
                           the Warning events posted once per pod */
    json_t *dra_unref;  /* dra.c, worker only: "<ns>/<template>" -> ms (CLOCK_MONOTONIC)
                           since when no pod names it */
    long long next_dra_gc_ms;
};

/* ---- route.c: which keys a change concerns ---- */

/* Queue keys in c->queue: "c/<ns>/<name>" for a claim, "e/<name>" for an
 * ElasticGPU, "b/<ns>" for the GPUBudgets of a namespace ("g/<node>/<uuid>"
 * for a card: gpustatus.c). A NULL or empty name (or ns) queues nothing; a
 * failed add (out of memory, queue shut down) is dropped: the resync queues
 * the key again. Any thread. */
void egpu__controller_enqueue_claim(struct egpu__controller *c, const char *ns, const char *name);
void egpu__controller_enqueue_budgets(struct egpu__controller *c, const char *ns);
void egpu__controller_enqueue_egpu(struct egpu__controller *c, const char *name);
/* Queue the key of every object in informer i's cache (EGPU__CONTROLLER_CLAIMS,
 * EGPU__CONTROLLER_EGPUS or EGPU__CONTROLLER_BUDGETS; claims: only those not past Pending when
 * pending_only). c->inf[i] must exist. */
void egpu__controller_enqueue_all(struct egpu__controller *c, enum egpu__controller_inf i,
                                  bool pending_only);
/* The informer callbacks of each EGPU__CONTROLLER_* informer into cbs[0..EGPU__CONTROLLER_NINF), ud
 * c: they queue the keys a change concerns and take the notes of index.c
 * and gpustatus.c (c->queue must exist; c->idx and c->gs may be NULL; the
 * capacity, ElasticGPU and budget callbacks read c->inf[EGPU__CONTROLLER_CLAIMS],
 * [EGPU__CONTROLLER_EGPUS] and [EGPU__CONTROLLER_BUDGETS], which must exist). */
void egpu__controller_route_cbs(struct egpu__controller *c,
                                struct egpu_kube_informer_cbs cbs[EGPU__CONTROLLER_NINF]);
/* Make c->inf[0..EGPU__CONTROLLER_NINF) on c->kube with egpu__controller_route_cbs's callbacks and
 * start them. Returns 0 or egpu_kube_informer_new's or _start's error
 * (finish frees what was made). */
int egpu__controller_informers_start(struct egpu__controller *c, struct egpu_error *err);

/* ---- worker.c ---- */

/* The worker thread (pthread start routine, data: the struct egpu__controller): while
 * c->leading and every informer has synced, take keys from c->queue and
 * reconcile each (egpu__controller_claim_sync, egpu__controller_egpu_sync,
 * egpu__controller_gs_sync, egpu__controller_budget_sync), observing c->m_latency and counting
 * c->m_errors; a failed key is queued again with backoff. On becoming leader it queues every claim,
 * ElasticGPU, budget and card. Returns NULL once c->stop. */
void *egpu__controller_worker(void *data);

/* Reconcile one claim or ElasticGPU from the caches. Returns 0 (done, or
 * nothing to do), or a negative code: the key is retried with backoff. */
int egpu__controller_claim_sync(struct egpu__controller *c, const char *ns, const char *name);
int egpu__controller_egpu_sync(struct egpu__controller *c, const char *name);
/* Meter the GPUBudgets of namespace ns and release the pods metered to
 * their end (budget.c). Returns 0 or the client's error. */
int egpu__controller_budget_sync(struct egpu__controller *c, const char *ns);
/* Append to (*m)[0..*n) (egpu_realloc'd; grown as needed, room for one more
 * kept) what each ResourceClaim of namespace ns allocated on this driver is
 * charged (egpu_api_dra_meter_read), from a consistent LIST (dra_metering.c).
 * Returns 0 (an API server without resource.k8s.io/v1 too), -ENOMEM or the
 * client's error (the step is retried: nothing is counted short). */
int egpu__controller_dra_meter_claims(struct egpu__controller *c, const char *ns,
                                      struct egpu_api_meter_pod **m, size_t *n);
/* Has namespace ns a GPUBudget in the informer's cache (budget.c)? */
bool egpu__controller_budget_exists(struct egpu__controller *c, const char *ns);

/* ---- index.c: what the worker keeps between reconciles ---- */

/* Create c->idx. Returns 0 or -ENOMEM (egpu__controller_index_free frees what was made). */
int egpu__controller_index_new(struct egpu__controller *c);
void egpu__controller_index_free(struct egpu__controller *c);
/* Informer threads: ElasticGPU name changed (deleted: a delete event), or
 * a GPU, Node or class changed what provisioning may use. */
void egpu__controller_index_note_egpu(struct egpu__controller *c, const char *name, bool deleted);
void egpu__controller_index_note_capacity(struct egpu__controller *c);
/* Informer threads: pod changed (deleted: a delete event); what it holds
 * is counted again in the inventories at the next refresh. */
void egpu__controller_index_note_pod(struct egpu__controller *c, const json_t *pod, bool deleted);
/* Does an update from old to obj (GPU, Node or class) change capacity:
 * a GPU's spec or health, a Node's labels, a class's fields? */
bool egpu__controller_capacity_changed(const json_t *old, const json_t *obj);
/* Worker: apply the notes taken since the last call. */
void egpu__controller_index_refresh(struct egpu__controller *c);
/* Worker: count ElasticGPU obj, just created by this controller, at once. */
void egpu__controller_index_created(struct egpu__controller *c, json_t *obj);
/* Worker: the inventory of class cls, built on first use and kept current
 * (borrowed; valid until the next refresh). NULL with err set on failure. */
struct egpu_controller_inventory *egpu__controller_index_inventory(struct egpu__controller *c,
                                                                   const struct egpu_api_class *cls,
                                                                   struct egpu_error *err);
/* Worker: the ElasticGPU whose claimRef has uid, or NULL (borrowed). */
const char *egpu__controller_index_egpu_of_uid(struct egpu__controller *c, const char *uid);
/* Worker: the names of the Available ElasticGPUs, as a JSON object's keys
 * (borrowed). */
json_t *egpu__controller_index_available(struct egpu__controller *c);

/* ---- gpustatus.c: GPU status.allocated from the pods' assigned annotations ---- */

/* Create c->gs and register the status-write counters in c->reg. Returns 0
 * or an error (egpu__controller_gs_free frees what was made). */
int egpu__controller_gs_init(struct egpu__controller *c, struct egpu_error *err);
void egpu__controller_gs_free(struct egpu__controller *c);
/* Informer threads: a pod was added or changed (deleted false) or deleted;
 * a GPU object was added (old NULL), changed from old, or deleted. They
 * queue "g/<node>/<uuid>" for each card whose status may now differ. */
void egpu__controller_gs_pod(struct egpu__controller *c, const json_t *pod, bool deleted);
void egpu__controller_gs_gpu(struct egpu__controller *c, const json_t *old, const json_t *gpu,
                             bool deleted);
/* Queue every card of a GPU object (leading starts, resync). */
void egpu__controller_gs_enqueue_all(struct egpu__controller *c);
/* Worker: make the status.allocated of the GPU object of card key
 * "<node>/<uuid>" what the pods say (a merge patch, only when it differs).
 * Returns 0 or the client's error (the key is retried). */
int egpu__controller_gs_sync(struct egpu__controller *c, const char *key);

/* ---- dra.c: --mode dra, a pod's ResourceClaimTemplates ---- */

/* With c->o.dra, make and start c->dra_inf (ResourceClaimTemplates of every
 * namespace) and c->dra_warned, c->dra_unref; without it, nothing. Returns 0,
 * -ENOMEM or the informer's error (egpu__controller_dra_free frees what was
 * made). */
int egpu__controller_dra_start(struct egpu__controller *c, struct egpu_error *err);
void egpu__controller_dra_free(struct egpu__controller *c);
/* Have c->dra_inf all synced (true without --mode dra)? And are they
 * healthy (egpu_kube_informers_healthy's rule; why gets the reason)? */
bool egpu__controller_dra_synced(struct egpu__controller *c);
bool egpu__controller_dra_healthy(struct egpu__controller *c, long max_ms, char *why, size_t len);
/* Informer threads: pod (added, changed or deleted) carries EGPU_ANN_DRA_CLAIMS:
 * queue "t/<ns>/<name>" (--mode dra only). */
void egpu__controller_dra_note_pod(struct egpu__controller *c, const json_t *pod);
/* Informer threads: ElasticGPUClass cls changed: queue "d/<name>" (--mode
 * dra only). */
void egpu__controller_dra_note_class(struct egpu__controller *c, const json_t *cls);
/* Worker: make the DeviceClass of ElasticGPUClass name what
 * egpu_controller_dra_device_class says (create; update one it owns that
 * differs; one it does not own is left, with a Warning event on the class).
 * Returns 0 or the client's error. */
int egpu__controller_dra_class_sync(struct egpu__controller *c, const char *name);
/* Worker, claim.c's --mode dra path: the ResourceClaim of claim cl of class
 * cls (egpu_controller_dra_claim_object), created when missing, and what
 * kube-scheduler allocated to it into *out. Returns 0; EGPU_ERANGE (the
 * claim cannot be one) or -EEXIST (a ResourceClaim of that name the claim
 * does not own), err saying why in one sentence; or the client's error. */
int egpu__controller_dra_claim(struct egpu__controller *c, const struct egpu_api_claim *cl,
                               const struct egpu_api_class *cls,
                               struct egpu_controller_dra_alloc *out, struct egpu_error *err);
/* Queue every annotated pod's key, every class's "d/<name>" and the
 * collection key "T" (leading starts, resync; --mode dra only). */
void egpu__controller_dra_enqueue_all(struct egpu__controller *c);
/* Worker: make the templates pod ns/name's annotation names (see dra.c).
 * Returns 0 or the client's error (the key is retried). */
int egpu__controller_dra_sync(struct egpu__controller *c, const char *ns, const char *name);
/* Worker: delete the templates of ours no pod has named for
 * c->o.dra_gc_ms. Returns 0 or the client's error. */
int egpu__controller_dra_gc(struct egpu__controller *c);

/* ---- writes.c ---- */

/* PUT a copy of orig with its spec (which "spec"), status ("status"),
 * metadata.finalizers ("finalizers") or metadata.annotations
 * ("annotations") taken from enc, an encoding of the
 * decoded object (egpu_api_*_encode) after the change; orig's
 * resourceVersion guards it (a stale one is EGPU_KUBE_ECONFLICT). *out
 * (may be NULL) gets the stored object. Returns 0 or the client's error. */
int egpu__controller_put(struct egpu__controller *c, const struct egpu_kube_resource *res,
                         const json_t *orig, const json_t *enc, const char *which, json_t **out);

/* Post an Event about an object (kind "Pod": a core/v1 Pod, else an
 * elasticgpu.io object); failures are logged only. */
void egpu__controller_event(struct egpu__controller *c, const char *kind, const char *ns,
                            const char *name, const char *uid, bool warning, const char *reason,
                            const char *fmt, ...) EGPU_PRINTF(8, 9);

/* Now as RFC 3339 ("2026-07-24T09:31:03Z") into buf. */
void egpu__controller_now(char *buf, size_t len);

/* The cached object, decoded into heap memory (caller egpu_free()s); NULL
 * when absent or malformed (logged). */
struct egpu_api_egpu *egpu__controller_egpu_get(struct egpu__controller *c, const char *name,
                                                json_t **obj);
struct egpu_api_claim *egpu__controller_claim_get(struct egpu__controller *c, const char *ns,
                                                  const char *name, json_t **obj);

/* The model of the GPU object name (from the cache), or "" ; into buf. */
const char *egpu__controller_gpu_model(struct egpu__controller *c, const char *name, char *buf,
                                       size_t len);

#endif /* EGPU_CONTROLLER_INT_H */
