/* scheduler/extender.c - filter, prioritize and bind for kube-scheduler.
 *
 * Wire format: kube-scheduler extender v1 (k8s.io/kube-scheduler/extender/v1
 * types.go; shared/k8s-wire/scheduler_extender_notes.md). The scheduler sends
 * Go field names (Pod, Nodes, NodeNames, PodName, ...), and reads replies
 * case-insensitively; we write the Go names too.
 *
 * DESIGN: no API-server calls on the filter and prioritize paths; they read
 * the cache under its lock. bind decides and reserves under the lock, then
 * writes elasticgpu.io/assigned and POSTs the Binding outside it; any failure
 * undoes the reservation and the annotation, so a failed bind leaks no share.
 * bind serves only a pod that the cache (the API server's watch) shows as
 * this scheduler's (spec.schedulerName) and asking for a GPU; the request
 * names the pod and the node, and nothing else in it is believed.
 * Placers (one per node/card policy pair, made on first use) live under the
 * cache lock too, since they cache per-node results of the cache's cluster.
 * A pod that uses claims is judged by the claims' room (claims.c), which
 * the verbs ask through its door (claims_int.h) under the same lock.
 *
 * Hot path (filter and prioritize, called for every pod with every
 * candidate node): ExtenderArgs are streamed by wire.c (yajl; only the Pod
 * goes through jansson), the names are looked up in one pipelined batch
 * in a dense index of the node set (lookup_slots, slots_int.h), and egpu_placer_score_slots answers
 * feasibility and score for all of them from the placer's memo against the cluster's packed node
 * generations; only refused nodes pay for their reason text, and when the
 * pod fits somewhere only the first REFUSALS_SHOWN of them (the reply
 * leaves the rest out; wire.c encodes each distinct reason once).
 * Allocations are per request (verdicts, slots), never per node.
 *
 * Two things are reused from one request to the next, each for its figure
 * in bench_extender --one-core at 5,000 nodes in shuffled order (what
 * kube-scheduler sends; the target is p99 under 2 ms): the placer's memo
 * (src/core/placement.c; without it the pair costs 2.3-2.5 ms at p50 instead
 * of 1.2-1.3) and prioritize's HostPriorityList made from the one before
 * (plist.c; without it prioritize costs 0.65 ms at p50 instead of 0.36, the
 * pair 1.7-1.8 ms at p99 instead of 1.5-1.75). Nothing else is kept: the
 * NodeNames memo, the kept filter reply, filter's verdicts kept for
 * prioritize and the slot and reason memos saved nothing there, or less
 * than 0.13 ms at p50 (each was tried, measured the same way and taken out
 * again). Figures on the 2-core development VM. The memo is also filled
 * ahead of the requests: egpu_extender_warm evaluates the cached pods'
 * request shapes on every node, a bounded slice per hold of the cache lock
 * (warm.c's thread calls it), since the first pod of a shape the memo does
 * not hold costs 25-60 ms of filter at 65,000 nodes (docs/scheduler.md,
 * "The memo warm"). The shapes are the pods' own requests, so a tenant's
 * pods steer only which shapes are evaluated first, within the memo's size.
 *
 * Load awareness (--load-aware): the placers break exact ties by the
 * cards' measured load (src/core/load.c), the replay's choice among nodes
 * of equal score is the one whose cards the pod would get are least loaded
 * (then the hash, as before), and filter fails the tied nodes that are more
 * loaded than it, each saying both loads. Reports that have grown stale
 * are turned unknown (egpu_sched_cache_expire_loads_locked) before each
 * verb judges.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "egpu/log.h"
#include "egpu/scheduler.h"
#include "claims_int.h"
#include "dra_int.h"
#include "plist_int.h"
#include "slots_int.h"
#include "wire_int.h"

#define NPOLICIES              EGPU_POLICY_COUNT
/* Refusals filter words when the pod fits on a node, at most: those of the
 * nodes that cannot host it first, then of the nodes a better one beats,
 * each in the request's order (a node steered around is always worded,
 * see judge). kube-scheduler shows a node's refusal only in the
 * FailedScheduling event of a pod that fits nowhere ("0/N nodes are
 * available: ..."), and drops a node that is neither passed nor failed
 * (scheduler_extender_notes.md), so past these the reply names only the
 * nodes that pass: at 65,000 nodes it was 8 MB that both sides encoded and
 * parsed, for nothing anyone sees. A pod that fits nowhere gets every
 * node's reason, as preemption needs each node's status. */
#define REFUSALS_SHOWN         100
/* Of the nodes tied for the best score, filter passes this many at most
 * (the replay's choice among them): every one is as good for the node
 * policy, and kube-scheduler's prioritize and its own scoring plugins then
 * read no more names than this. With the openb mix at 65,000 nodes a share
 * of 160 milli-GPU tied on 25,000 nodes, and prioritize of that many names
 * took 5-6 ms (bench_extender --nodes 65000). */
#define TIED_PASSED            1000
#define WORKLOAD_REFRESH_PODS  64 /* rebuild the live target workload after this many new pods */
/* A rebuilt live target workload replaces the one in use only when they are
 * this far apart (egpu_workload_distance, total variation): replacing it
 * drops every placer's memo, so the first pod of each request shape after
 * it evaluates every node again (bench_extender --nodes: the p99). Below 1%
 * of the pods' weight moved, the scores it would change are the few within
 * one integer step of another (docs/scheduler.md, "The live target
 * workload"). */
#define WORKLOAD_KEEP_DISTANCE 0.01

/* A pass of the memo warm (egpu_extender_warm): the shapes it judges
 * ahead, walked from shapes[next_shape - 1] down, at node slot next_slot. */
struct warm {
    struct egpu_pod_request *shapes; /* most frequent first; owned */
    size_t nshapes, next_shape;
    uint32_t next_slot;
    bool passing;   /* a pass is under way */
    uint64_t epoch; /* placers_epoch the last pass began for; UINT64_MAX = none yet */
    double ended_s; /* CLOCK_MONOTONIC s the last pass ended (or found nothing to do) */
};

struct egpu_extender {
    struct egpu_extender_config cfg;
    char scheduler_name[EGPU_K8S_NAME_MAX]; /* cfg.scheduler_name's copy */
    struct egpu_sched_cache *cache;
    struct egpu_extender_ops ops;
    /* Guarded by the cache lock: */
    struct egpu_placer *placers[NPOLICIES][NPOLICIES];
    struct egpu_placer *dra_placers[NPOLICIES][NPOLICIES]; /* for DRA pods (cfg.dra) */
    struct egpu_workload live;          /* FGD target workload built from cached pods */
    struct egpu__slot_index slot_index; /* node name -> slot (lookup_slots) */
    size_t live_pods;                   /* pods in the cache when live was built */
    bool target_failed;                 /* cfg.target could not be used (logged) */
    uint64_t placers_epoch;             /* drop_placers calls */
    struct warm warm;                   /* egpu_extender_warm's pass */
    /* Not: */
    pthread_mutex_t plist_lock;         /* guards plist */
    struct egpu__plist plist;           /* the HostPriorityList made last */
    atomic_uint_least64_t plist_reused; /* prioritize replies made from it */
    atomic_uint_least64_t binds[EGPU_BIND_RESULTS];
    atomic_uint_least64_t load_decided; /* filter calls where load failed a tied node */
    atomic_uint_least64_t workload_kept, workload_replaced; /* live workload rebuilds */
    atomic_uint_least64_t warm_passes, warm_verdicts;       /* egpu_extender_warm's */
};

const char *egpu_bind_result_name(enum egpu_bind_result r)
{
    static const char *const names[] = {"ok",      "bad_request", "unknown",
                                        "no_fit",  "ambiguous",   "annotate",
                                        "binding", "not_ours",    "claim"};

    return (size_t)r < sizeof(names) / sizeof(names[0]) ? names[r] : "unknown";
}

struct egpu_extender *egpu_extender_new(const struct egpu_extender_config *cfg,
                                        struct egpu_sched_cache *cache,
                                        const struct egpu_extender_ops *ops, struct egpu_error *err)
{
    struct egpu_extender *x = egpu_calloc(1, sizeof(*x));

    if (x == NULL) {
        egpu_error_set(err, -ENOMEM, "extender: out of memory");
        return NULL;
    }
    x->cfg = *cfg;
    snprintf(x->scheduler_name, sizeof(x->scheduler_name), "%s",
             cfg->scheduler_name && cfg->scheduler_name[0] ? cfg->scheduler_name
                                                           : EGPU_SCHEDULER_NAME_DEFAULT);
    x->cfg.scheduler_name = x->scheduler_name;
    x->cache = cache;
    x->ops = *ops;
    x->warm.epoch = UINT64_MAX; /* the first warm step begins a pass */
    if (pthread_mutex_init(&x->plist_lock, NULL) != 0) {
        egpu_free(x);
        egpu_error_set(err, -ENOMEM, "extender: out of memory");
        return NULL;
    }
    egpu__plist_init(&x->plist);
    egpu__slot_index_init(&x->slot_index);
    return x;
}

static void drop_placers(struct egpu_extender *x)
{
    x->placers_epoch++;
    for (int i = 0; i < NPOLICIES; i++) {
        for (int j = 0; j < NPOLICIES; j++) {
            egpu_placer_free(x->placers[i][j]);
            egpu_placer_free(x->dra_placers[i][j]);
            x->placers[i][j] = NULL;
            x->dra_placers[i][j] = NULL;
        }
    }
}

void egpu_extender_free(struct egpu_extender *x)
{
    if (x == NULL)
        return;
    egpu__plist_free(&x->plist);
    pthread_mutex_destroy(&x->plist_lock);
    drop_placers(x);
    egpu_workload_free(&x->live);
    egpu__slot_index_free(&x->slot_index);
    egpu_free(x->warm.shapes);
    egpu_free(x);
}

uint64_t egpu_extender_prioritize_reused(struct egpu_extender *x)
{
    return atomic_load(&x->plist_reused);
}

uint64_t egpu_extender_load_decided(struct egpu_extender *x)
{
    return atomic_load(&x->load_decided);
}

void egpu_extender_workload_rebuilds(struct egpu_extender *x, uint64_t *kept, uint64_t *replaced)
{
    *kept = atomic_load(&x->workload_kept);
    *replaced = atomic_load(&x->workload_replaced);
}

/* Hold the cache for a verb: with load awareness, the reports that have
 * grown stale since are made unknown first. */
static struct egpu_cluster *lock_cache(struct egpu_extender *x)
{
    struct egpu_cluster *c = egpu_sched_cache_lock(x->cache);

    if (x->cfg.load_aware)
        egpu_sched_cache_expire_loads_locked(x->cache, (int64_t)time(NULL));
    return c;
}

void egpu_extender_bind_counts(struct egpu_extender *x, uint64_t out[EGPU_BIND_RESULTS])
{
    for (int i = 0; i < EGPU_BIND_RESULTS; i++)
        out[i] = atomic_load(&x->binds[i]);
}

/* ------------------------------------------------------------------------ */
/* Replies                                                                   */

static int reply_json(struct egpu_buf *reply, json_t *doc, int status)
{
    char *text = json_dumps(doc, JSON_COMPACT);
    int rc;

    json_decref(doc);
    if (text == NULL)
        return 500;
    rc = egpu_buf_append(reply, text, strlen(text));
    free(text);
    return rc ? 500 : status;
}

/* {"Error": msg} with an HTTP status; for every verb's error replies. */
static int reply_error(struct egpu_buf *reply, int status, const char *msg)
{
    return reply_json(reply, json_pack("{s:s}", "Error", msg), status);
}

/* A refusal of a filter call: an ExtenderFilterResult with no nodes and msg
 * as its Error, HTTP 200, as the extender protocol has it, so kube-scheduler
 * shows msg in the pod's events (any other status shows only its code). */
static int filter_refused(struct egpu_buf *reply, const char *msg)
{
    return reply_json(reply,
                      json_pack("{s:n,s:n,s:n,s:n,s:s}", "Nodes", "NodeNames", "FailedNodes",
                                "FailedAndUnresolvableNodes", "Error", msg),
                      200);
}

/* ------------------------------------------------------------------------ */
/* Placers and the live target workload (cache lock held)                   */

/* x->live from cfg.target (--target-workload). Returns 0, or an error
 * (logged once; the caller then builds it from the cached pods). */
static int pinned_workload(struct egpu_extender *x, struct egpu_cluster *c)
{
    const struct egpu_api_workload *t = x->cfg.target;
    struct egpu_typical_pod *pods = egpu_calloc(t->n ? t->n : 1, sizeof(*pods));
    struct egpu_error err = {0};
    int rc = pods == NULL ? egpu_error_set(&err, -ENOMEM, "out of memory") : 0;

    for (size_t i = 0; rc == 0 && i < t->n; i++) {
        pods[i] = (struct egpu_typical_pod){.cpu_milli = t->pods[i].cpu_milli,
                                            .gpu_milli = t->pods[i].gpu_milli,
                                            .ncards = t->pods[i].gpus,
                                            .weight = t->pods[i].weight};
        rc = egpu_cluster_model_mask(c, t->pods[i].models, &pods[i].model_mask, &err);
        if (rc)
            egpu_error_prefix(&err, rc, "typicalPods[%zu].models", i);
    }
    if (rc == 0 && (rc = egpu_workload_from_list(pods, t->n, &x->live)) != 0)
        egpu_error_set(&err, rc, "%s", egpu_strerror(rc));
    egpu_free(pods);
    if (rc != 0 && !x->target_failed)
        egpu_log(EGPU_LOG_ERROR,
                 "target workload unusable, built from the cached pods instead error=\"%s\"",
                 err.msg);
    x->target_failed = rc != 0;
    return rc;
}

static void refresh_live_workload(struct egpu_extender *x, struct egpu_cluster *c)
{
    struct egpu_workload fresh = {0};
    size_t pods;
    static const struct egpu_typical_pod fallback[] = {
        {.gpu_milli = 250, .ncards = 1, .weight = 1},
        {.gpu_milli = 500, .ncards = 1, .weight = 1},
        {.gpu_milli = 1000, .ncards = 1, .weight = 1},
    };

    if (x->cfg.target != NULL && !x->target_failed) {
        /* Pinned: built once, its model names resolved in c's model table. */
        if (x->live.n > 0 || pinned_workload(x, c) == 0)
            return;
    }
    /* Asked on every verb: the pod count alone, not the stats' walk over
     * every pod (95% of bind's instructions with fgd-cpu at 5,000 nodes). */
    pods = egpu_sched_cache_pods_locked(x->cache);
    if (x->live.n > 0 && pods < x->live_pods + WORKLOAD_REFRESH_PODS)
        return;
    if (egpu_sched_cache_workload_locked(x->cache, &fresh) != 0 &&
        egpu_workload_from_list(fallback, 3, &fresh) != 0)
        return;
    x->live_pods = pods;
    if (x->live.n > 0 && egpu_workload_distance(&x->live, &fresh) < WORKLOAD_KEEP_DISTANCE) {
        /* The mix has not moved: the placers keep their memos. */
        egpu_workload_free(&fresh);
        atomic_fetch_add(&x->workload_kept, 1);
        return;
    }
    drop_placers(x); /* FGD placers borrow the old workload */
    egpu_workload_free(&x->live);
    x->live = fresh;
    atomic_fetch_add(&x->workload_replaced, 1);
}

/* The placer of a node and a card policy; with dra, the one of DRA pods:
 * the cards are kube-scheduler's allocator's first fit in the agent's device
 * order (index), and the node is scored blind to it, with the card tier's
 * own pick (egpu-sim --dra's default, which docs/replay.md recommends). */
static struct egpu_placer *placer(struct egpu_extender *x, struct egpu_cluster *c,
                                  enum egpu_policy_kind node, enum egpu_policy_kind card, bool dra,
                                  struct egpu_error *err)
{
    struct egpu_placer_config pc = {.node_policy = node,
                                    .card_policy = card,
                                    .seed = x->cfg.seed,
                                    .memo = true,
                                    .load_aware = x->cfg.load_aware,
                                    .dra = dra,
                                    .dra_order = EGPU_DRA_ORDER_INDEX,
                                    .dra_blind = true};
    struct egpu_placer **slot = dra ? &x->dra_placers[node][card] : &x->placers[node][card];

    if (egpu_policy_needs_workload(node) || egpu_policy_needs_workload(card)) {
        if (x->cfg.workload == NULL)
            refresh_live_workload(x, c);
        pc.workload = x->cfg.workload ? x->cfg.workload : &x->live;
    }
    if (*slot == NULL)
        *slot = egpu_placer_new(&pc, err);
    return *slot;
}

static struct egpu_placer *placer_for(struct egpu_extender *x, struct egpu_cluster *c,
                                      const struct egpu_sched_pod *p, struct egpu_error *err)
{
    return placer(x, c, p->has_node_policy ? p->node_policy : x->cfg.node_policy,
                  p->has_card_policy ? p->card_policy : x->cfg.card_policy, p->dra, err);
}

/* ------------------------------------------------------------------------ */
/* The memo warm                                                             */

#define WARM_PERIOD_MS 30000 /* cfg.warm_period_ms when 0 */

static bool synced(struct egpu_extender *x)
{
    return x->ops.synced == NULL || x->ops.synced(x->ops.data);
}

static double monotonic_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Begin a pass for placer p: the cached pods' shapes counted (cache lock
 * held). False when there is nothing to warm or no memory. */
static bool warm_begin(struct egpu_extender *x, struct egpu_placer *p, struct egpu_cluster *c)
{
    struct warm *w = &x->warm;
    size_t keep = egpu_placer_memo_shapes(p, c);
    struct egpu_shape_tally t;
    bool ok = false;

    keep -= keep / 8; /* room for the shapes the pods ask that no cached pod has */
    w->passing = false;
    w->epoch = x->placers_epoch;
    egpu_free(w->shapes);
    w->shapes = NULL;
    w->nshapes = w->next_shape = 0;
    egpu_shape_tally_init(&t);
    if (keep > 0 && egpu_sched_cache_shapes_locked(x->cache, &t) == 0 &&
        (w->shapes = egpu_malloc(keep * sizeof(*w->shapes))) != NULL) {
        w->nshapes = w->next_shape = egpu_shape_tally_top(&t, 2, w->shapes, keep);
        w->next_slot = 0;
        w->passing = ok = true;
    }
    egpu_shape_tally_free(&t);
    return ok;
}

size_t egpu_extender_warm(struct egpu_extender *x, uint32_t budget)
{
    struct warm *w = &x->warm;
    double period = (x->cfg.warm_period_ms ? x->cfg.warm_period_ms : WARM_PERIOD_MS) / 1000.0;
    struct egpu_error err = {0};
    struct egpu_placer *p;
    struct egpu_cluster *c;
    size_t looked = 0, made = 0;

    if (budget == 0 || !synced(x))
        return 0;
    c = lock_cache(x);
    p = placer(x, c, x->cfg.node_policy, x->cfg.card_policy, false, &err);
    if (p != NULL &&
        (w->epoch != x->placers_epoch || (!w->passing && monotonic_s() - w->ended_s >= period)) &&
        !warm_begin(x, p, c))
        w->ended_s = monotonic_s(); /* nothing to warm now: the next pass is due a period on */
    while (p != NULL && w->passing && looked < budget) {
        uint32_t n;

        if (w->next_shape == 0) {
            w->passing = false;
            w->ended_s = monotonic_s();
            atomic_fetch_add(&x->warm_passes, 1);
            break;
        }
        n = w->next_slot < c->nnodes ? (uint32_t)(c->nnodes - w->next_slot) : 0;
        if (n > budget - looked)
            n = (uint32_t)(budget - looked);
        made += egpu_placer_warm(p, c, &w->shapes[w->next_shape - 1], w->next_slot, n);
        looked += n;
        w->next_slot += n;
        if (w->next_slot >= c->nnodes) {
            w->next_shape--;
            w->next_slot = 0;
        }
    }
    egpu_sched_cache_unlock(x->cache);
    atomic_fetch_add(&x->warm_verdicts, made);
    return looked;
}

void egpu_extender_warm_counts(struct egpu_extender *x, uint64_t *passes, uint64_t *verdicts)
{
    *passes = atomic_load(&x->warm_passes);
    *verdicts = atomic_load(&x->warm_verdicts);
}

/* ------------------------------------------------------------------------ */
/* filter and prioritize                                                     */

/* The pod's allowed-model mask in cluster c (adds unknown names to it). */
static int model_mask(struct egpu_cluster *c, struct egpu_sched_pod *p, struct egpu_error *err)
{
    return egpu_cluster_model_mask(c, p->gpu_model, &p->req.model_mask, err);
}

/* Decode ExtenderArgs. Returns 0, or an HTTP status with the reply written:
 * 400 for a body that is not ExtenderArgs; for filter, a Pod object whose
 * content is refused is a refusal of the pod (200 with Error). */
static int decode_args(const char *body, size_t len, struct egpu__wire_args *a,
                       struct egpu_buf *reply, bool filter)
{
    struct egpu_error err = {0};
    int rc = egpu__wire_args_decode(body, len, a, &err);

    if (rc == 0)
        return 0;
    if (rc != -ENOMEM && filter && a->pod_refused)
        return filter_refused(reply, err.msg);
    return reply_error(reply, rc == -ENOMEM ? 500 : 400, err.msg);
}

/* The placer for a GPU pod, its model mask resolved (cache lock held).
 * NULL with *err set when the pod's model list or policies are unusable. */
static struct egpu_placer *pod_placer(struct egpu_extender *x, struct egpu_cluster *c,
                                      struct egpu_sched_pod *pod, struct egpu_error *err)
{
    if (model_mask(c, pod, err) != 0)
        return NULL;
    return placer_for(x, c, pod, err);
}

/* The slots of the nodes named names[0..n) into slots (n entries),
 * EGPU_NO_SLOT for a name that is no node (cache lock held), from the
 * extender's dense index of the node set (slots_int.h), not the node
 * records. Returns 0 or -ENOMEM. */
static int lookup_slots(struct egpu_extender *x, const struct egpu_cluster *c,
                        const char *const *names, size_t n, uint32_t *slots)
{
    return egpu__slot_index_lookup(&x->slot_index, c, names, n, slots);
}

/* Steer pod around the nodes bind would refuse as ambiguous (cache lock
 * held): of nodes slots[0..n) that fit (v[i].ok), those where another pod
 * is placed and not yet allocated and the card pick bind would make gives
 * egpu_sched_cache_is_ambiguous_locked's answer (the same gpu-core on other
 * cards or memory) get v[i].ok = false and, with steered (n entries, NULL
 * when the reason is not wanted), steered[i] = the reason (the caller frees
 * each). Only the nodes of egpu_sched_cache_waiting_next_locked are looked
 * at, usually none, so a filter over 5,000 nodes pays one pointer test.
 * Before the best-score tie set: a steered node must not hide another one
 * that fits. Returns 0 or -ENOMEM. */
static int steer(struct egpu_extender *x, struct egpu_placer *p, struct egpu_cluster *c,
                 const struct egpu_sched_pod *pod, const uint32_t *slots, size_t n,
                 struct egpu_verdict *v, char **steered)
{
    const void *it = NULL;
    const char *name;
    bool *mark = NULL;

    while ((name = egpu_sched_cache_waiting_next_locked(x->cache, &it)) != NULL) {
        const struct egpu_node *node = egpu_cluster_node(c, name);

        if (node == NULL || node->slot >= c->cap)
            continue;
        if (mark == NULL && (mark = egpu_calloc(c->cap, sizeof(*mark))) == NULL)
            return -ENOMEM;
        mark[node->slot] = true;
    }
    for (size_t i = 0; mark != NULL && i < n; i++) {
        struct egpu_node *node;
        struct egpu_pick pick;
        char text[1024];

        if (!v[i].ok || slots[i] == EGPU_NO_SLOT || slots[i] >= c->cap || !mark[slots[i]])
            continue;
        node = c->nodes[slots[i]];
        /* The pick bind would make (egpu_extender_bind). */
        if (!egpu_placer_can_host(p, c, node, &pod->req, &pick, text, sizeof(text)) ||
            !egpu_sched_cache_is_ambiguous_locked(x->cache, pod, node, &pick, text, sizeof(text)))
            continue;
        v[i].ok = false;
        if (steered != NULL && (steered[i] = egpu_strdup(text)) == NULL) {
            egpu_free(mark);
            return -ENOMEM;
        }
    }
    egpu_free(mark);
    return 0;
}

/* Judge nodes names[0..n) for request r (cache lock held): v[i] gets
 * feasibility and score; why[i] (when why != NULL) NULL for a node that can
 * host the pod, else a reason whose text is appended to reasons. The
 * placer's memo answers both at once for a node that has not changed
 * (egpu_placer_score_slots), so only refusals cost more than a lookup;
 * when some node can host the pod, only the first REFUSALS_SHOWN refused
 * ones (and every one steer failed) get a reason and the others why[i] =
 * egpu__wire_unlisted.
 * With pod (may be NULL), the nodes where binding it would be ambiguous
 * fail too (steer). slots (n entries) gets the nodes' slots
 * (lookup_slots). Returns 0 or -ENOMEM. */
static int judge(struct egpu_extender *x, struct egpu_placer *p, struct egpu_cluster *c,
                 const struct egpu_sched_pod *pod, const struct egpu_pod_request *r,
                 const char *const *names, size_t n, uint32_t *slots, struct egpu_verdict *v,
                 const char **why, struct egpu_buf *reasons)
{
    static const char failed[] = ""; /* marker: reason text is in reasons */
    char **steered = NULL;           /* n reasons of steer, allocated when a node waits */
    const void *it = NULL;
    size_t pos = 0, shown = 0;
    bool fits = false;
    int rc = 0;

    if (lookup_slots(x, c, names, n, slots) != 0)
        return -ENOMEM;
    egpu_placer_score_slots(p, c, r, slots, n, v);
    if (pod != NULL && egpu_sched_cache_waiting_next_locked(x->cache, &it) != NULL) {
        if (why != NULL && (steered = egpu_calloc(n ? n : 1, sizeof(*steered))) == NULL)
            return -ENOMEM;
        rc = steer(x, p, c, pod, slots, n, v, steered);
    }
    for (size_t i = 0; why != NULL && !fits && i < n; i++)
        fits = v[i].ok;
    for (size_t i = 0; why != NULL && i < n; i++) {
        char text[512];
        const char *reason = text;

        if (v[i].ok) {
            why[i] = NULL;
            continue;
        }
        /* The pod fits somewhere: kube-scheduler shows no refusal (see
         * REFUSALS_SHOWN), so past the first few none is worded; a node
         * steered around always is ("not yet allocated": a wait of
         * seconds, which bench/live_replay and an operator look for). */
        if (fits && (steered == NULL || steered[i] == NULL) && shown++ >= REFUSALS_SHOWN) {
            why[i] = egpu__wire_unlisted;
            continue;
        }
        if (slots[i] == EGPU_NO_SLOT) {
            why[i] = EGPU__SCHED_UNKNOWN_NODE;
            continue;
        }
        /* Refused: the reason, which the placer's memo does not keep. */
        if (steered != NULL && steered[i] != NULL)
            reason = steered[i];
        else
            (void)egpu_placer_can_host(p, c, c->nodes[slots[i]], r, NULL, text, sizeof(text));
        if (rc == 0)
            rc = egpu_buf_append(reasons, reason, strlen(reason) + 1);
        why[i] = failed;
    }
    for (size_t i = 0; steered != NULL && i < n; i++)
        egpu_free(steered[i]);
    egpu_free(steered);
    for (size_t i = 0; rc == 0 && why != NULL && i < n; i++) {
        if (why[i] == failed) {
            why[i] = reasons->data + pos;
            pos += strlen(why[i]) + 1;
        }
    }
    return rc;
}

/* Does the pod use claims (egpuc.elasticgpu.io/<container>)? Such a pod is
 * judged by its claim plan, at the claims' door (claims_int.h). */
static bool claimed(const struct egpu_sched_pod *pod)
{
    return pod->nclaims > 0 || pod->claims_error != NULL;
}

/* Is the pod judged by the node policy? One that asks for a GPU is; one
 * that asks for none only with --pods-without-gpu place (cfg.place_cpu_pods):
 * then its CPU and memory decide, as egpu-sim places such a pod. */
static bool judged(const struct egpu_extender *x, const struct egpu_sched_pod *pod)
{
    return egpu_sched_pod_wants_gpu(pod) || x->cfg.place_cpu_pods || pod->dra;
}

/* The index of the node first in the replay's order among the feasible
 * ones of v and names (n each), or SIZE_MAX when none is feasible: the best
 * score, among equal scores (with load_aware) the lowest load, and then the
 * lowest egpu_hash_str of the name with
 * seed, the earlier on equal hashes (egpu_placer_schedule's rule). A name is
 * hashed only when it ties the best so far. */
static size_t replay_choice(const struct egpu_verdict *v, const char *const *names, size_t n,
                            uint64_t seed, bool load_aware)
{
    size_t best = SIZE_MAX;
    uint64_t best_rank = 0;
    bool ranked = false; /* best_rank is best's */

    for (size_t i = 0; i < n; i++) {
        if (!v[i].ok || (best != SIZE_MAX && v[i].score < v[best].score))
            continue;
        if (load_aware && best != SIZE_MAX && v[i].score == v[best].score &&
            v[i].load != v[best].load) {
            if (v[i].load > v[best].load)
                continue;
            ranked = false; /* a new best on load alone */
        } else if (best != SIZE_MAX && v[i].score == v[best].score) {
            uint64_t rank = egpu_hash_str(names[i], seed);

            if (!ranked)
                best_rank = egpu_hash_str(names[best], seed);
            ranked = true;
            if (rank >= best_rank)
                continue;
            best_rank = rank;
        } else {
            ranked = false;
        }
        best = i;
    }
    return best;
}

/* Map the policy's scores onto 0..10 (MaxExtenderPriority) for kube-scheduler,
 * which adds score x weight x 10 to a node's total and breaks ties at
 * random: the node first in the replay's order (replay_choice) gets 10,
 * every other feasible node the linear map of its score (worst feasible 0,
 * best 10) but at most 9, so kube-scheduler's best total is the replay's
 * choice whenever its own plugins score the nodes alike. Nodes that cannot
 * host the pod score 0. v, names and score are arrays of n. */
static void priority_scores(const struct egpu_verdict *v, const char *const *names, size_t n,
                            uint64_t seed, bool load_aware, uint8_t *score)
{
    size_t first = replay_choice(v, names, n, seed, load_aware);
    double lo = 0, hi = 0;
    bool any = false;

    for (size_t i = 0; i < n; i++) {
        if (v[i].ok) {
            lo = any && lo < v[i].score ? lo : v[i].score;
            hi = any && hi > v[i].score ? hi : v[i].score;
            any = true;
        }
    }
    for (size_t i = 0; i < n; i++) {
        double f = hi > lo ? 10.0 * (v[i].score - lo) / (hi - lo) + 0.5 : 9.0;

        /* Only the nodes that fit are scaled: another's score may lie outside [lo, hi]. */
        score[i] = !v[i].ok ? 0 : i == first ? 10 : f < 9.0 ? (uint8_t)(f > 0.0 ? f : 0.0) : 9;
    }
}

/* The node policy a pod is placed by (its annotation, else the flag). */
static const char *node_policy_name(const struct egpu_extender *x, const struct egpu_sched_pod *p)
{
    return egpu_policy_name(p->has_node_policy ? p->node_policy : x->cfg.node_policy);
}

#define LOAD_TEXTS    102 /* a refusal for load per load value: 0..100 and unknown */
#define LOAD_TEXT_MAX 320

/* "5%", or "unknown" for EGPU_LOAD_UNKNOWN, into buf. */
static const char *load_name(uint16_t load, char buf[16])
{
    if (load == EGPU_LOAD_UNKNOWN)
        return "unknown (no fresh report)";
    snprintf(buf, 16, "%u%%", (unsigned)load);
    return buf;
}

/* Filter's narrowing: of the feasible nodes, only those tied for the best
 * exact score pass (the replay's choice is one of them, and kube-scheduler's
 * choice among them cannot lose the policy's ranking to its 0..10 scale);
 * each other feasible node fails with better (why[i] = better), a text
 * written here naming the node first in the replay's order. With
 * load_aware, of the tied nodes only those whose load equals the first's
 * pass; each more loaded one fails with a text naming both loads, one per
 * load value in *loaded (LOAD_TEXTS entries, allocated here on first need;
 * the caller frees it). Past REFUSALS_SHOWN worded refusals (those why
 * holds already count) a node it fails gets egpu__wire_unlisted instead.
 * Of the tied nodes that pass, at most TIED_PASSED: the replay's choice
 * and the first others in the request's order; the rest fail with a text
 * saying so (written into better + len / 2). v is left as it
 * is: prioritize answers from it, as it would without filter. v, why and
 * names are arrays of n; better holds len bytes. Returns whether load
 * failed a node. */
static bool pass_best(const struct egpu_verdict *v, const char **why, const char *const *names,
                      size_t n, uint64_t seed, bool load_aware, const char *policy, char *better,
                      size_t len, char (**loaded)[LOAD_TEXT_MAX])
{
    size_t first = replay_choice(v, names, n, seed, load_aware), shown = 0, passed = 1;
    char *tied = better + len / 2;
    bool by_load = false;

    if (first == SIZE_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        shown += why[i] != NULL && why[i] != egpu__wire_unlisted;
    snprintf(better, len / 2,
             "node %s fits this pod better (node policy %s); filter passes only the nodes "
             "tied for the best score",
             names[first], policy);
    snprintf(tied, len - len / 2,
             "node %s fits this pod as well (node policy %s); filter passes at most %d of the "
             "nodes tied for the best score",
             names[first], policy, TIED_PASSED);
    for (size_t i = 0; i < n; i++) {
        bool fails =
            v[i].ok && (v[i].score != v[first].score || (load_aware && v[i].load > v[first].load));

        if (v[i].ok && !fails && i != first && passed++ >= TIED_PASSED) {
            /* A tied node past the cap: a refusal like the others. */
            why[i] = shown++ >= REFUSALS_SHOWN ? egpu__wire_unlisted : tied;
            continue;
        }

        /* The pod fits on first: past REFUSALS_SHOWN, none is worded. */
        if (fails && shown++ >= REFUSALS_SHOWN) {
            why[i] = egpu__wire_unlisted;
        } else if (v[i].ok && v[i].score != v[first].score) {
            why[i] = better;
        } else if (load_aware && v[i].ok && v[i].load > v[first].load) {
            size_t k = v[i].load == EGPU_LOAD_UNKNOWN ? LOAD_TEXTS - 1 : v[i].load;
            char a[16], b[16];

            if (*loaded == NULL && (*loaded = egpu_calloc(LOAD_TEXTS, LOAD_TEXT_MAX)) == NULL)
                continue; /* out of memory: it passes, prioritize still ranks it lower */
            if ((*loaded)[k][0] == '\0')
                snprintf((*loaded)[k], LOAD_TEXT_MAX,
                         "node %s fits this pod as well and its cards are less loaded (load %s "
                         "against %s: the higher of GPU utilization and memory in use); filter "
                         "passes only the least loaded of the nodes tied for the best score",
                         names[first], load_name(v[first].load, a), load_name(v[i].load, b));
            why[i] = (*loaded)[k];
            by_load = true;
        }
    }
    return by_load;
}

static int priorities(struct egpu_extender *x, struct egpu_buf *reply,
                      const struct egpu__wire_args *a, const uint32_t *slots, uint64_t members,
                      const uint8_t *score);

/* judge() for a DRA pod's request r whose containers i with whole_mem[i]
 * ask their card's whole memory (a share naming no memory consumes the
 * slice's default, all of the card's), which depends on the node: the
 * nodes are judged in groups of the same card memory, each group with
 * those containers asking that much. The reasons of each group are copied
 * into owned (n entries, the caller egpu_free()s each), why[i] pointing
 * at them. Returns 0 or -ENOMEM. */
static int judge_by_card_memory(struct egpu_extender *x, struct egpu_placer *p,
                                struct egpu_cluster *c, const struct egpu_pod_request *r,
                                const bool *whole_mem, const char *const *names, size_t n,
                                uint32_t *slots, struct egpu_verdict *v, const char **why,
                                char **owned)
{
    const size_t m = n ? n : 1;
    const char **gnames = egpu_malloc(m * sizeof(*gnames)), **gwhy = NULL;
    uint32_t *mem = egpu_malloc(m * sizeof(*mem)), *gslots = egpu_malloc(m * sizeof(*gslots));
    size_t *at = egpu_malloc(m * sizeof(*at));
    struct egpu_verdict *gv = egpu_malloc(m * sizeof(*gv));
    bool *done = egpu_calloc(m, sizeof(*done));
    int rc = 0;

    if (why != NULL && (gwhy = egpu_calloc(m, sizeof(*gwhy))) == NULL)
        rc = -ENOMEM;
    if (gnames == NULL || mem == NULL || gslots == NULL || at == NULL || gv == NULL ||
        done == NULL || rc != 0 || lookup_slots(x, c, names, n, slots) != 0)
        rc = -ENOMEM;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const struct egpu_node *node = slots[i] != EGPU_NO_SLOT ? c->nodes[slots[i]] : NULL;

        mem[i] = node != NULL && node->ngpus > 0 ? node->gpus[0].mem_mib : 0;
    }
    for (size_t i = 0; rc == 0 && i < n; i++) {
        struct egpu_pod_request gr = *r;
        struct egpu_buf reasons;
        size_t k = 0;

        if (done[i])
            continue;
        for (size_t j = i; j < n; j++) {
            if (!done[j] && mem[j] == mem[i]) {
                done[j] = true;
                at[k] = j;
                gnames[k++] = names[j];
            }
        }
        for (uint32_t ci = 0; ci < gr.ncontainers; ci++) {
            if (whole_mem[ci])
                gr.containers[ci].mem_mib = mem[i];
        }
        egpu_buf_init(&reasons, k * 2048 + 1);
        rc = judge(x, p, c, NULL, &gr, gnames, k, gslots, gv, gwhy, &reasons);
        for (size_t g = 0; rc == 0 && g < k; g++) {
            slots[at[g]] = gslots[g];
            v[at[g]] = gv[g];
            if (why == NULL || gwhy[g] == NULL)
                continue;
            owned[at[g]] = egpu_strdup(gwhy[g]);
            why[at[g]] = owned[at[g]];
            rc = owned[at[g]] == NULL ? -ENOMEM : 0;
        }
        egpu_buf_free(&reasons);
    }
    egpu_free(gnames);
    egpu_free(gwhy);
    egpu_free(mem);
    egpu_free(gslots);
    egpu_free(at);
    egpu_free(gv);
    egpu_free(done);
    return rc;
}

/* filter (filter true) and prioritize for a DRA pod (a->pod.dra; with
 * --dra). Its request is made of its ResourceClaims in the cache
 * (egpu__sched_dra_request_locked) and judged by its DRA placer: the nodes
 * are scored by the node policy against the cards' use, allocated claims
 * included, as egpu-sim --dra scores them.
 *
 * Filter: kube-scheduler's DynamicResources plugin has already kept only
 * the nodes where its allocator can allocate the claims, so every node sent
 * can take the pod. Of those, as for any pod, only the ones tied for the
 * best score pass (the others fail naming the best), so that kube-scheduler's
 * own scores, which are blind to GPUs, cannot outweigh the node policy's
 * ranking; where the model finds no node that fits (it does not model
 * everything the allocator does: another driver's devices, a claim's
 * selectors), every known node passes and the allocator's word stands. A
 * node the cache does not know fails with its reason, as for any pod. A
 * claim not in the cache yet (its watch event has not come) refuses the
 * whole call, so kube-scheduler tries the pod again; so does a pod that
 * asks gpu-core beside the marker, or any DRA pod without --dra.
 * Prioritize answers the scores; for those refusals 503 or 400, which
 * kube-scheduler passes over (the extender adds no score). */
static int dra_verb(struct egpu_extender *x, struct egpu__wire_args *a, struct egpu_buf *reply,
                    bool filter)
{
    const size_t n = a->n ? a->n : 1;
    struct egpu__sched_dra_refs *refs = NULL;
    struct egpu_error err = {0};
    struct egpu_pod_request req;
    struct egpu_placer *p;
    struct egpu_cluster *c;
    struct egpu_verdict *v = NULL;
    struct egpu_buf reasons;
    const char **why = NULL;
    char **owned = NULL; /* reasons judge_by_card_memory copied */
    uint32_t *slots = NULL;
    uint8_t *score = NULL;
    uint64_t members = 0;
    char better[1024];
    char(*loaded)[LOAD_TEXT_MAX] = NULL;
    bool whole_mem[EGPU_CONTAINERS_MAX], any = false, by_mem = false;
    int rc = 0, status;

    egpu_buf_init(&reasons, a->n * 2048 + 1);
    if (!x->cfg.dra)
        rc = egpu_error_set(&err, -ENOTSUP,
                            "pod %s/%s is a DRA pod (" EGPU_RES_DRA "): egpu-scheduler runs "
                            "without --dra, so it does not read its ResourceClaims",
                            a->pod.ns, a->pod.name);
    else if (egpu_sched_pod_wants_gpu(&a->pod))
        rc = egpu_error_set(&err, EGPU_ERANGE,
                            "pod %s/%s asks " EGPU_RES_GPU_CORE " beside " EGPU_RES_DRA
                            "; allowed: one of them (a DRA pod's GPUs come from its "
                            "ResourceClaims)",
                            a->pod.ns, a->pod.name);
    else if ((refs = egpu_malloc(sizeof(*refs))) == NULL)
        rc = egpu_error_set(&err, -ENOMEM, "out of memory");
    else
        rc = egpu__sched_dra_refs(a->pod_obj, refs, &err);
    if (rc == 0) {
        v = egpu_calloc(n, sizeof(*v));
        slots = egpu_malloc(n * sizeof(*slots));
        why = filter ? egpu_calloc(n, sizeof(*why)) : NULL;
        owned = filter ? egpu_calloc(n, sizeof(*owned)) : NULL;
        score = filter ? NULL : egpu_calloc(n, sizeof(*score));
        if (v == NULL || slots == NULL || (filter ? why == NULL || owned == NULL : score == NULL))
            rc = egpu_error_set(&err, -ENOMEM, "out of memory");
    }
    if (rc == 0) {
        c = lock_cache(x);
        rc = egpu__sched_dra_request_locked(x->cache, &a->pod, refs, &req, whole_mem, &err);
        if (rc == 0)
            rc = egpu_cluster_model_mask(c, a->pod.gpu_model, &req.model_mask, &err);
        if (rc == 0 && (p = placer_for(x, c, &a->pod, &err)) == NULL)
            rc = err.code ? err.code : -ENOMEM;
        for (uint32_t i = 0; rc == 0 && i < req.ncontainers; i++)
            by_mem = by_mem || whole_mem[i];
        if (rc == 0 &&
            (by_mem ? judge_by_card_memory(x, p, c, &req, whole_mem, a->names, a->n, slots, v, why,
                                           owned)
                    : judge(x, p, c, NULL, &req, a->names, a->n, slots, v, why, &reasons)) != 0)
            rc = egpu_error_set(&err, -ENOMEM, "out of memory");
        members = c->members;
        egpu_sched_cache_unlock(x->cache);
    }
    if (rc == -ENOMEM) {
        status = reply_error(reply, 500, "out of memory");
    } else if (rc != 0) {
        egpu_log(EGPU_LOG_DEBUG, "DRA pod refused pod=%s/%s verb=%s reason=\"%s\"", a->pod.ns,
                 a->pod.name, filter ? "filter" : "prioritize", err.msg);
        status = filter ? filter_refused(reply, err.msg)
                        : reply_error(reply, rc == -EAGAIN ? 503 : 400, err.msg);
    } else if (filter) {
        for (size_t i = 0; i < a->n; i++)
            any = any || v[i].ok;
        for (size_t i = 0; !any && i < a->n; i++) {
            if (slots[i] != EGPU_NO_SLOT)
                why[i] = NULL; /* the allocator found room: its word stands */
        }
        if (any && pass_best(v, why, a->names, a->n, x->cfg.seed, x->cfg.load_aware,
                             node_policy_name(x, &a->pod), better, sizeof(better), &loaded))
            atomic_fetch_add(&x->load_decided, 1);
        status = egpu__wire_filter_result(reply, a, why) == 0 ? 200 : 500;
    } else {
        priority_scores(v, a->names, a->n, x->cfg.seed, x->cfg.load_aware, score);
        status = priorities(x, reply, a, slots, members, score) == 0 ? 200 : 500;
    }
    egpu_free(loaded);
    egpu_buf_free(&reasons);
    egpu_free(refs);
    egpu_free(v);
    egpu_free(why);
    for (size_t i = 0; owned != NULL && i < a->n; i++)
        egpu_free(owned[i]);
    egpu_free(owned);
    egpu_free(slots);
    egpu_free(score);
    return status;
}

int egpu_extender_filter(struct egpu_extender *x, const char *body, size_t len,
                         struct egpu_buf *reply)
{
    struct egpu__wire_args a;
    struct egpu_error err = {0};
    struct egpu_placer *p = NULL;
    struct egpu_buf reasons;
    struct egpu_verdict *v = NULL;
    struct egpu_sched_claim_plan *plan = NULL;
    struct egpu_cluster *c;
    const char **why;
    uint32_t *slots = NULL;
    char better[1024];                   /* the reasons of the nodes pass_best fails */
    char(*loaded)[LOAD_TEXT_MAX] = NULL; /* and of those it fails for their load */
    bool by_load = false;
    bool gpu;
    int status, rc = 0;

    if (!synced(x))
        return filter_refused(reply, "elastic-gpu extender: node cache not synced yet");
    status = decode_args(body, len, &a, reply, true);
    if (status)
        return status;
    if (a.pod.dra) {
        status = dra_verb(x, &a, reply, true);
        egpu__wire_args_free(&a);
        return status;
    }
    why = egpu_calloc(a.n ? a.n : 1, sizeof(*why));
    if (why == NULL) {
        egpu__wire_args_free(&a);
        return reply_error(reply, 500, "out of memory");
    }
    egpu_buf_init(&reasons, a.n * 2048 + 1);
    /* A pod that uses claims is judged by its plan, also when its claimed
     * containers ask nothing (the plan says why it cannot go anywhere). */
    gpu = judged(x, &a.pod) || claimed(&a.pod);
    if (claimed(&a.pod) && (plan = egpu_malloc(sizeof(*plan))) == NULL) {
        egpu_buf_free(&reasons);
        egpu_free(why);
        egpu__wire_args_free(&a);
        return reply_error(reply, 500, "out of memory");
    }
    c = lock_cache(x);
    if (plan != NULL) {
        p = pod_placer(x, c, &a.pod, &err);
        v = p ? egpu_malloc((a.n ? a.n : 1) * sizeof(*v)) : NULL;
        if (p != NULL && v != NULL) {
            rc = egpu__sched_claims_judge(x->cache, p, c, &a.pod, x->cfg.load_aware, plan, a.names,
                                          a.n, v, why, &reasons);
            if (rc == 0)
                by_load = pass_best(v, why, a.names, a.n, x->cfg.seed, x->cfg.load_aware,
                                    node_policy_name(x, &a.pod), better, sizeof(better), &loaded);
        }
    } else if (judged(x, &a.pod)) {
        p = pod_placer(x, c, &a.pod, &err);
        v = p ? egpu_malloc((a.n ? a.n : 1) * sizeof(*v)) : NULL;
        slots = v ? egpu_malloc((a.n ? a.n : 1) * sizeof(*slots)) : NULL;
        rc = v != NULL && slots == NULL ? -ENOMEM : 0;
        if (slots != NULL) {
            rc = judge(x, p, c, &a.pod, &a.pod.req, a.names, a.n, slots, v, why, &reasons);
            if (rc == 0)
                by_load = pass_best(v, why, a.names, a.n, x->cfg.seed, x->cfg.load_aware,
                                    node_policy_name(x, &a.pod), better, sizeof(better), &loaded);
        }
    }
    /* A pod without GPUs, unless judged: every node passes (why all NULL). */
    egpu_sched_cache_unlock(x->cache);
    if (gpu && (p == NULL || v == NULL || rc != 0)) {
        status =
            p == NULL ? filter_refused(reply, err.msg) : reply_error(reply, 500, "out of memory");
        goto out;
    }
    status = egpu__wire_filter_result(reply, &a, why) == 0 ? 200 : 500;
    if (status == 200 && by_load)
        atomic_fetch_add(&x->load_decided, 1);
out:
    egpu_free(loaded);
    egpu_buf_free(&reasons);
    egpu_free(why);
    egpu_free(v);
    egpu_free(slots);
    egpu_free(plan);
    egpu__wire_args_free(&a);
    return status;
}

/* Append the HostPriorityList for a's nodes with score[] to reply: made
 * from the list made last when it is free (another prioritize may be using
 * it), where only the entries that changed are encoded again, found by
 * node through slots of the node set members; else (slots NULL: no node was
 * looked up) in full. Returns 0, -ENOMEM or -EMSGSIZE. */
static int priorities(struct egpu_extender *x, struct egpu_buf *reply,
                      const struct egpu__wire_args *a, const uint32_t *slots, uint64_t members,
                      const uint8_t *score)
{
    int rc;

    if (slots == NULL || pthread_mutex_trylock(&x->plist_lock) != 0)
        return egpu__wire_priorities(reply, a, score);
    rc = egpu__plist_set(&x->plist, a->names, slots, members, score, a->n);
    if (rc == 1)
        atomic_fetch_add(&x->plist_reused, 1);
    if (rc >= 0)
        rc =
            egpu_buf_append(reply, x->plist.text.data ? x->plist.text.data : "", x->plist.text.len);
    pthread_mutex_unlock(&x->plist_lock);
    return rc;
}

int egpu_extender_prioritize(struct egpu_extender *x, const char *body, size_t len,
                             struct egpu_buf *reply)
{
    struct egpu__wire_args a;
    struct egpu_error err = {0};
    struct egpu_placer *p = NULL;
    struct egpu_cluster *c;
    struct egpu_verdict *v;
    struct egpu_sched_claim_plan *plan;
    uint32_t *slots;
    uint64_t members = 0;
    uint8_t *score;
    int status, rc = 0;

    if (!synced(x))
        return reply_error(reply, 503, "elastic-gpu extender: node cache not synced yet");
    status = decode_args(body, len, &a, reply, false);
    if (status)
        return status;
    if (a.pod.dra) {
        status = dra_verb(x, &a, reply, false);
        egpu__wire_args_free(&a);
        return status;
    }
    v = egpu_calloc(a.n ? a.n : 1, sizeof(*v));
    score = egpu_calloc(a.n ? a.n : 1, sizeof(*score));
    slots = egpu_malloc((a.n ? a.n : 1) * sizeof(*slots));
    if (v == NULL || score == NULL || slots == NULL) {
        egpu_free(v);
        egpu_free(score);
        egpu_free(slots);
        egpu__wire_args_free(&a);
        return reply_error(reply, 500, "out of memory");
    }
    plan = claimed(&a.pod) ? egpu_malloc(sizeof(*plan)) : NULL;
    c = lock_cache(x);
    if (judged(x, &a.pod) || plan != NULL)
        p = pod_placer(x, c, &a.pod, &err);
    if (claimed(&a.pod)) {
        /* Judged afresh: only the plan's nodes score. */
        if (plan == NULL) {
            rc = -ENOMEM;
        } else if (p != NULL) {
            rc = egpu__sched_claims_judge(x->cache, p, c, &a.pod, x->cfg.load_aware, plan, a.names,
                                          a.n, v, NULL, NULL);
        }
        p = NULL; /* no slots to reuse the list by */
    } else if (p != NULL) {
        rc = judge(x, p, c, &a.pod, &a.pod.req, a.names, a.n, slots, v, NULL, NULL);
        members = c->members;
    }
    egpu_sched_cache_unlock(x->cache);
    if (rc != 0) {
        status = reply_error(reply, 500, "out of memory");
        goto out;
    }
    /* Every node scores 0 for a pod not judged (v all zero: not ok). */
    priority_scores(v, a.names, a.n, x->cfg.seed, x->cfg.load_aware, score);
    status = priorities(x, reply, &a, p != NULL ? slots : NULL, members, score) == 0 ? 200 : 500;
out:
    egpu_free(plan);
    egpu_free(v);
    egpu_free(score);
    egpu_free(slots);
    egpu__wire_args_free(&a);
    return status;
}

/* ------------------------------------------------------------------------ */
/* bind                                                                      */

static int bind_fail(struct egpu_extender *x, enum egpu_bind_result r, struct egpu_buf *reply,
                     int status, const char *msg)
{
    atomic_fetch_add(&x->binds[r], 1);
    egpu_log(EGPU_LOG_WARN, "bind failed reason=%s error=\"%s\"", egpu_bind_result_name(r), msg);
    return reply_error(reply, status, msg);
}

/* A pod owner's text, fit for a message and a log line: at most len - 1
 * bytes, anything but [A-Za-z0-9._-] shown as '?', and "..." when cut. */
static void printable(const char *in, char *out, size_t len)
{
    size_t n = 0;

    for (; in[n] != '\0' && n + 1 < len; n++)
        out[n] = ((in[n] >= 'a' && in[n] <= 'z') || (in[n] >= 'A' && in[n] <= 'Z') ||
                  (in[n] >= '0' && in[n] <= '9') || strchr("._-", in[n]) != NULL)
                     ? in[n]
                     : '?';
    out[n] = '\0';
    if (in[n] != '\0' && len > 4)
        memcpy(out + len - 4, "...", 4);
}

/* After the Binding of DRA pod ns/name: read the pod and its
 * ResourceClaims from the API server (kube-scheduler's PreBind wrote their
 * allocation before it called bind) and hold that allocation in the cache
 * now, so a pod judged after this bind is scored against it even before
 * the claims' watch events come. A failure is logged: the watch still
 * tells. */
static void dra_read_claims(struct egpu_extender *x, const char *ns, const char *name)
{
    struct egpu__sched_dra_refs *refs;
    struct egpu_error err = {0};
    json_t *pod = NULL;

    if (x->ops.get_pod == NULL || x->ops.get_claim == NULL)
        return;
    refs = egpu_malloc(sizeof(*refs));
    if (refs == NULL || x->ops.get_pod(x->ops.data, ns, name, &pod, &err) != 0 ||
        egpu__sched_dra_refs(pod, refs, &err) != 0) {
        egpu_log(EGPU_LOG_WARN,
                 "claims of a bound DRA pod not read, the watch will tell pod=%s/%s error=\"%s\"",
                 ns, name, refs == NULL ? "out of memory" : err.msg);
        goto out;
    }
    for (size_t i = 0; i < refs->n; i++) {
        json_t *claim = NULL;

        if (x->ops.get_claim(x->ops.data, ns, refs->names[i], &claim, &err) != 0 ||
            egpu_sched_cache_dra_claim_read(x->cache, claim, &err) != 0)
            egpu_log(EGPU_LOG_WARN,
                     "claim of a bound DRA pod not read, the watch will tell pod=%s/%s "
                     "claim=%s error=\"%s\"",
                     ns, name, refs->names[i], err.msg);
        json_decref(claim);
    }
out:
    json_decref(pod);
    egpu_free(refs);
}

struct bind_args {
    char ns[EGPU_K8S_NAME_MAX], name[EGPU_K8S_NAME_MAX], uid[EGPU_K8S_NAME_MAX];
    char node[EGPU_K8S_NAME_MAX];
};

static int parse_bind(const char *body, size_t len, struct bind_args *b, char *msg, size_t mlen)
{
    static const char *const keys[] = {"PodName", "PodNamespace", "PodUID", "Node"};
    char *dst[] = {b->name, b->ns, b->uid, b->node};
    json_error_t jerr;
    json_t *root = json_loadb(body, len, 0, &jerr);

    if (!json_is_object(root)) {
        snprintf(msg, mlen, "ExtenderBindingArgs: %s%s",
                 root ? "must be a JSON object" : "malformed JSON: ", root ? "" : jerr.text);
        json_decref(root);
        return -EINVAL;
    }
    for (int i = 0; i < 4; i++) {
        const json_t *v = json_object_get(root, keys[i]);
        bool optional = i == 2;

        if ((v == NULL && optional) ||
            (json_is_string(v) && json_string_length(v) == 0 && optional)) {
            dst[i][0] = '\0';
            continue;
        }
        if (!json_is_string(v) || json_string_length(v) == 0 ||
            json_string_length(v) >= EGPU_K8S_NAME_MAX) {
            snprintf(msg, mlen,
                     "ExtenderBindingArgs.%s: must be a non-empty string of at most %d "
                     "characters",
                     keys[i], EGPU_K8S_NAME_MAX - 1);
            json_decref(root);
            return -EINVAL;
        }
        memcpy(dst[i], json_string_value(v), json_string_length(v) + 1);
    }
    json_decref(root);
    return 0;
}

int egpu_extender_bind(struct egpu_extender *x, const char *body, size_t len,
                       struct egpu_buf *reply)
{
    struct egpu_error err = {0};
    struct bind_args b;
    struct egpu_sched_pod *pod = NULL;
    struct egpu_assigned *assigned = NULL;
    struct egpu_cluster *c;
    struct egpu_node *node;
    struct egpu_placer *p;
    struct egpu_pick pick;
    struct egpu_sched_claim_plan *plan = NULL;
    struct egpu__sched_claim_mark marks[EGPU_CONTAINERS_MAX];
    uint32_t nmarks = 0;
    char msg[2048], *text = NULL;
    enum egpu_bind_result result = EGPU_BIND_OK;
    bool cards, dra = false;

    if (parse_bind(body, len, &b, msg, sizeof(msg)) != 0)
        return bind_fail(x, EGPU_BIND_BAD_REQUEST, reply, 400, msg);
    pod = egpu_malloc(sizeof(*pod));
    assigned = egpu_malloc(sizeof(*assigned));
    if (pod == NULL || assigned == NULL) {
        egpu_free(pod);
        egpu_free(assigned);
        return reply_error(reply, 500, "out of memory");
    }
    c = lock_cache(x);
    node = egpu_cluster_node(c, b.node);
    if (egpu_sched_cache_pod_locked(x->cache, b.ns, b.name) == NULL) {
        snprintf(msg, sizeof(msg), "pod %s/%s is not in the elastic-gpu cache", b.ns, b.name);
        result = EGPU_BIND_UNKNOWN;
    } else if (node == NULL) {
        snprintf(msg, sizeof(msg), "node %s is not in the elastic-gpu cache", b.node);
        result = EGPU_BIND_UNKNOWN;
    } else {
        *pod = *egpu_sched_cache_pod_locked(x->cache, b.ns, b.name);
        if (b.uid[0] && pod->uid[0] && strcmp(b.uid, pod->uid) != 0) {
            snprintf(msg, sizeof(msg), "pod %s/%s has uid %s, not %s", b.ns, b.name, pod->uid,
                     b.uid);
            result = EGPU_BIND_UNKNOWN;
        } else if (strcmp(pod->scheduler_name, x->scheduler_name) != 0) {
            /* Whoever asks, only this scheduler's pods are ours to bind:
             * the pod as the API server gave it, not the request, says. */
            char shown[64];

            printable(pod->scheduler_name, shown, sizeof(shown));
            snprintf(msg, sizeof(msg),
                     "pod %s/%s: spec.schedulerName is \"%s\", not \"%s\": not this "
                     "scheduler's pod to bind",
                     b.ns, b.name, shown, x->scheduler_name);
            result = EGPU_BIND_NOT_OURS;
        } else if (!judged(x, pod)) {
            snprintf(msg, sizeof(msg),
                     "pod %s/%s asks for no " EGPU_RES_GPU_CORE
                     ": the extender binds only pods that ask for a GPU "
                     "(--pods-without-gpu pass)",
                     b.ns, b.name);
            result = EGPU_BIND_NOT_OURS;
        }
    }
    if (result == EGPU_BIND_OK && pod->dra) {
        /* The allocator chose its cards (its claims say them, and the agent
         * reads them there): no elasticgpu.io/assigned, the Binding alone. */
        if (!x->cfg.dra || egpu_sched_pod_wants_gpu(pod)) {
            snprintf(msg, sizeof(msg), "pod %s/%s is a DRA pod (" EGPU_RES_DRA "): %s", b.ns,
                     b.name,
                     !x->cfg.dra ? "egpu-scheduler runs without --dra"
                                 : "it asks " EGPU_RES_GPU_CORE " too; allowed: one of them");
            result = EGPU_BIND_NOT_OURS;
        } else {
            dra = true;
            pick.nshares = 0;
            memset(assigned, 0, sizeof(*assigned));
            /* Its CPU and memory count at once; where the cache's books
             * cannot fit them it is bound all the same (kube-scheduler's
             * NodeResourcesFit judged them) and counted once the watch shows
             * it there. One placed already is refused, as any pod. */
            int rc = egpu_sched_cache_reserve_locked(x->cache, pod, node, &pick, assigned, &err);

            if (rc == EGPU_EALLOCATED) {
                snprintf(msg, sizeof(msg), "%s", err.msg);
                result = EGPU_BIND_NO_FIT;
            } else if (rc != 0) {
                egpu_log(EGPU_LOG_DEBUG,
                         "DRA pod not reserved before its binding pod=%s/%s error=\"%s\"", b.ns,
                         b.name, err.msg);
            }
            memset(assigned, 0, sizeof(*assigned)); /* no annotation: nothing to name */
        }
    } else if (result == EGPU_BIND_OK) {
        p = model_mask(c, pod, &err) == 0 ? placer_for(x, c, pod, &err) : NULL;
        if (p == NULL) {
            snprintf(msg, sizeof(msg), "pod %s/%s: %s", b.ns, b.name, err.msg);
            result = EGPU_BIND_BAD_REQUEST;
        } else if (claimed(pod) && (plan = egpu_malloc(sizeof(*plan))) == NULL) {
            snprintf(msg, sizeof(msg), "out of memory");
            result = EGPU_BIND_NO_FIT;
        } else if (plan != NULL) {
            result = egpu__sched_claims_place(x->cache, p, c, pod, node, plan, &pick, marks,
                                              &nmarks, msg, sizeof(msg));
        } else if (!egpu_placer_can_host(p, c, node, &pod->req, &pick, msg, sizeof(msg))) {
            result = EGPU_BIND_NO_FIT;
        }
        if (result != EGPU_BIND_OK) {
            /* said */
        } else if (egpu_sched_cache_is_ambiguous_locked(x->cache, pod, node, &pick, msg,
                                                        sizeof(msg))) {
            result = EGPU_BIND_AMBIGUOUS;
        } else if (egpu_sched_cache_reserve_locked(x->cache, pod, node, &pick, assigned, &err) !=
                   0) {
            snprintf(msg, sizeof(msg), "%s", err.msg);
            result = EGPU_BIND_NO_FIT;
        }
    }
    egpu_sched_cache_unlock(x->cache);
    if (result != EGPU_BIND_OK)
        goto out;
    /* A WaitForFirstConsumer claim learns where its first pod goes before
     * the pod is bound there, so the controller provisions it on that card. */
    for (uint32_t i = 0; i < nmarks; i++) {
        int rc = x->ops.annotate_claim != NULL
                     ? x->ops.annotate_claim(x->ops.data, b.ns, marks[i].claim, b.node,
                                             marks[i].gpus, &err)
                     : egpu_error_set(&err, -ENOTSUP, "the extender cannot annotate claims");

        if (rc != 0) {
            snprintf(msg, sizeof(msg), "annotating claim %s/%s with its node: %s", b.ns,
                     marks[i].claim, err.msg);
            (void)egpu_sched_cache_unreserve(x->cache, b.ns, b.name);
            result = EGPU_BIND_CLAIM;
            goto out;
        }
        egpu_log(EGPU_LOG_INFO,
                 "claim marked for provisioning claim=%s/%s pod=%s/%s node=%s gpus=%s", b.ns,
                 marks[i].claim, b.ns, b.name, b.node, marks[i].gpus);
    }
    /* A pod without GPUs (--pods-without-gpu place) has no cards to name:
     * the Binding alone places it; the cache counts it from its nodeName. */
    cards = assigned->ncontainers > 0 || nmarks > 0 || plan != NULL;
    text = cards ? egpu_assigned_encode(assigned) : NULL;
    if (cards && (text == NULL ||
                  x->ops.annotate(x->ops.data, b.ns, b.name, EGPU_ANN_ASSIGNED, text, &err) != 0)) {
        snprintf(msg, sizeof(msg), "annotating pod %s/%s: %s", b.ns, b.name,
                 text ? err.msg : "out of memory");
        (void)egpu_sched_cache_unreserve(x->cache, b.ns, b.name);
        result = EGPU_BIND_ANNOTATE;
        goto out;
    }
    if (x->ops.bind(x->ops.data, b.ns, b.name, b.uid, b.node, &err) != 0) {
        struct egpu_error uerr = {0};

        snprintf(msg, sizeof(msg), "binding pod %s/%s to %s: %s", b.ns, b.name, b.node, err.msg);
        result = EGPU_BIND_BINDING;
        if (cards &&
            x->ops.annotate(x->ops.data, b.ns, b.name, EGPU_ANN_ASSIGNED, NULL, &uerr) != 0)
            egpu_log(EGPU_LOG_WARN, "could not remove annotation pod=%s/%s error=\"%s\"", b.ns,
                     b.name, uerr.msg);
        (void)egpu_sched_cache_unreserve(x->cache, b.ns, b.name);
    } else if (dra) {
        dra_read_claims(x, b.ns, b.name);
    }
out:
    for (uint32_t i = 0; i < nmarks; i++)
        egpu_free(marks[i].gpus);
    egpu_free(plan);
    egpu_free(text);
    egpu_free(pod);
    egpu_free(assigned);
    if (result != EGPU_BIND_OK)
        return bind_fail(x, result, reply, 200, msg); /* a refusal: the Error says why */
    atomic_fetch_add(&x->binds[EGPU_BIND_OK], 1);
    egpu_log(EGPU_LOG_INFO, "bound pod=%s/%s node=%s", b.ns, b.name, b.node);
    return reply_json(reply, json_pack("{s:s}", "Error", ""), 200);
}
