/* scheduler/cache.c - the extender's cluster cache, fed by informer events.
 *
 * DESIGN: the placement core's cluster holds the truth the extender places
 * against; this file keeps it in step with the API server. A node enters the
 * core when its Node object is known (allocatable CPU and memory), with the
 * cards its GPU objects describe. Every pod is cached (bind needs the spec of
 * pending pods); a pod counts on a node - its CPU, memory and card shares -
 * once it is placed there: by the elasticgpu.io/assigned annotation, else by
 * spec.nodeName. When a node's cards or capacity change, the node is rebuilt
 * and the pods on it counted again, so the core's totals always equal the
 * sum of what the API server says is placed. Changes that do not touch
 * placement (status updates, labels) cost one hash lookup.
 *
 * A bind reserves before it writes, and its reservation survives stale
 * events for the pod until the watch shows the annotation (or bind undoes
 * it), so two binds never see the same free capacity.
 *
 * ElasticGPUs hold their capacity as reservations (egpu__sched_resv). A
 * pod's container that uses a claim (egpu__sched_claim_use, linked into its
 * egpu__sched_claim) and sits on that claim's ElasticGPU's cards is counted
 * inside the reservation (egpu__sched_pod_entry.inside,
 * egpu__sched_resv.occupant: one pod per ElasticGPU), so its share is held
 * once. Everything that can change which ElasticGPU serves a claim, or
 * whether it is applied, first uncounts the claim's pods
 * (egpu__sched_park_users), then changes, then counts them again
 * (unpark_users, egpu__sched_claim_settle): no moment holds a share twice,
 * whatever the event order.
 *
 * The ElasticGPU, claim and class events, the claim plans and their
 * judging live in claims.c. This file keeps what counting a pod needs: a
 * reservation's applying (a node's rebuild applies them again, and applying
 * one parks its claim's users), the claims' users and the helpers claims.c
 * asks through cache_int.h; it calls nothing of claims.c.
 *
 * What tenants can change is not believed blindly (DESIGN.md section 5):
 *   - the elasticgpu.io/assigned annotation of a bound pod is a decision we
 *     recorded: once the cache has seen the pod bound, a later change to it
 *     (edited, removed, made unreadable) by anyone is logged, counted in
 *     assigned_ignored and the recorded decision stands;
 *   - a card belongs to the first GPU object that names its UUID; another
 *     GPU object with the same UUID is left out (shadowed) and reported with
 *     -EEXIST, so it cannot drop the node it names or the owner's node from
 *     the core; it takes the card over only once the owner is gone.
 *
 * Measured load (--load-aware): a GPU object's status.used (NVML
 * utilization and memory in use, updateTime) is kept beside the card, out
 * of what decides a rebuild. A report that changes only the load sets the
 * card's load in the core (egpu_cluster_set_load: a new node generation
 * when the percent moves, nothing when it does not), so the one-a-minute
 * reports of every card never rebuild a node or count its pods again. A
 * report older than load_max_age_s is unknown; the earliest time one of
 * the fresh ones expires is kept, so the check before each verb is one
 * comparison until then (and one walk over the cards when it comes).
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "egpu/api.h"
#include "egpu/kube.h"
#include "egpu/log.h"
#include "egpu/scheduler.h"
#include "cache_int.h"
#include "dra_int.h"

/* The GPU object that owns a card UUID (the first one seen with it). */
/* One allocation as long as its strings: the UUID, then the owner's name. */
struct gpu_owner {
    const char *name; /* the GPU object's metadata.name, after uuid */
    char uuid[];      /* the key in egpu_sched_cache.owners */
};

struct egpu_sched_cache *egpu_sched_cache_new(void)
{
    struct egpu_sched_cache *c = egpu_calloc(1, sizeof(*c));

    if (c == NULL)
        return NULL;
    c->cluster = egpu_cluster_new();
    c->nodes = egpu_map_new();
    c->pods = egpu_map_new();
    c->owners = egpu_map_new();
    c->resvs = egpu_map_new();
    c->claims = egpu_map_new();
    c->classes = egpu_map_new();
    if (c->cluster == NULL || c->nodes == NULL || c->pods == NULL || c->owners == NULL ||
        c->resvs == NULL || c->claims == NULL || c->classes == NULL) {
        egpu_cluster_free(c->cluster);
        egpu_map_free(c->nodes);
        egpu_map_free(c->pods);
        egpu_map_free(c->owners);
        egpu_map_free(c->resvs);
        egpu_map_free(c->claims);
        egpu_map_free(c->classes);
        egpu_free(c);
        return NULL;
    }
    pthread_mutex_init(&c->lock, NULL);
    c->load_max_age_s = EGPU_SCHED_LOAD_MAX_AGE_DEFAULT;
    c->load_expiry_s = INT64_MAX;
    return c;
}

static void free_values(struct egpu_map *m)
{
    size_t pos = 0;
    void *v;

    while ((v = egpu_map_next(m, &pos, NULL)) != NULL)
        egpu_free(v);
    egpu_map_free(m);
}

void egpu_sched_cache_free(struct egpu_sched_cache *c)
{
    size_t pos = 0;
    struct egpu__sched_node *ni;
    struct egpu__sched_pod_entry *pe;

    if (c == NULL)
        return;
    while ((ni = egpu_map_next(c->nodes, &pos, NULL)) != NULL) {
        egpu_free(ni->labels);
        for (uint32_t i = 0; i < ni->ngpus; i++) {
            egpu_free(ni->gpus[i].peers);
            egpu_free(ni->gpus[i].strs);
        }
        egpu_free(ni->gpus);
    }
    egpu_cluster_free(c->cluster);
    free_values(c->nodes);
    pos = 0;
    while ((pe = egpu_map_next(c->pods, &pos, NULL)) != NULL) {
        egpu_sched_pod_clear(&pe->pod);
        egpu_free(pe->uses);
        egpu_free(pe->inside);
    }
    free_values(c->pods);
    free_values(c->claims);
    free_values(c->classes);
    free_values(c->owners);
    free_values(c->resvs);
    egpu__sched_dra_free(c->dra);
    pthread_mutex_destroy(&c->lock);
    egpu_free(c);
}

struct egpu_cluster *egpu_sched_cache_lock(struct egpu_sched_cache *c)
{
    pthread_mutex_lock(&c->lock);
    return c->cluster;
}

void egpu_sched_cache_unlock(struct egpu_sched_cache *c)
{
    pthread_mutex_unlock(&c->lock);
}

/* The node a pod counts on, or NULL when it is not placed. */
const char *egpu__sched_target_of(const struct egpu_sched_pod *p)
{
    if (p->terminal)
        return NULL;
    if (p->has_assigned)
        return egpu_sched_assigned_node(p->assigned);
    return p->node[0] ? p->node : NULL;
}

/* Percent of each card a container asks for: 1..99, or 100 for whole cards. */
static uint32_t card_pct(const struct egpu_container_request *cr)
{
    return cr->core_milli / 10;
}

/* Build the core pick of pod p on node n from its annotation. Returns false
 * when a container or card does not match (the pod then counts without
 * cards). */
static bool pick_of(const struct egpu_sched_pod *p, const struct egpu_node *n,
                    struct egpu_pick *pick)
{
    const struct egpu_sched_assigned *a = p->assigned;

    pick->nshares = 0;
    if (!p->has_assigned || a->ncontainers != p->req.ncontainers)
        return false;
    for (uint32_t i = 0; i < a->ncontainers; i++) {
        const struct egpu_sched_assigned_container *ac = &a->containers[i];
        const struct egpu_container_request *cr;
        uint32_t ci = 0;

        while (ci < p->req.ncontainers &&
               strcmp(egpu_sched_pod_container(p, ci), egpu_sched_assigned_name(a, i)) != 0)
            ci++;
        if (ci == p->req.ncontainers)
            return false;
        cr = &p->req.containers[ci];
        if (ac->ncards != cr->ncards || ac->core_pct != card_pct(cr))
            return false;
        for (uint32_t k = 0; k < ac->ncards; k++) {
            const char *uuid = egpu_sched_assigned_uuid(a, ac->first_card + k);
            uint32_t g = 0;
            struct egpu_share *s;

            while (g < n->ngpus && strcmp(n->gpus[g].uuid, uuid) != 0)
                g++;
            if (g == n->ngpus || pick->nshares == EGPU_PICK_SHARES_MAX)
                return false;
            s = &pick->shares[pick->nshares++];
            s->container = (uint16_t)ci;
            s->gpu = (uint16_t)g;
            s->core_milli = cr->core_milli;
            s->mem_mib = cr->core_milli == EGPU_GPU_MILLI ? n->gpus[g].mem_mib : cr->mem_mib;
        }
    }
    return true;
}

/* ---- Claims: which ElasticGPU a claimed container is counted inside ---- */

static struct egpu__sched_gpu *slot_named(struct egpu__sched_node *ni, const char *name);

/* The ElasticGPU that serves claim ce: one whose spec.claimRef names it, not
 * Released (its claim is gone), whose claimRef.uid is the claim's (when
 * both are known); the one the claim's status.elasticGPUName names first,
 * else the oldest. NULL when none. */
struct egpu__sched_resv *egpu__sched_claim_resv(const struct egpu__sched_claim *ce)
{
    struct egpu__sched_resv *best = NULL;

    for (struct egpu__sched_resv *r = ce != NULL ? ce->resvs : NULL; r != NULL; r = r->claim_next) {
        if (r->released ||
            (ce->known && ce->uid[0] && r->claim_uid[0] && strcmp(ce->uid, r->claim_uid) != 0))
            continue;
        if (ce->known && strcmp(ce->bound_egpu, r->name) == 0)
            return r;
        if (best == NULL || r->seq < best->seq)
            best = r;
    }
    return best;
}

/* Does container request cr fit inside ElasticGPU r (egpu_api_resv_can_hold,
 * the rule egpu-controller's inventory counts by too)? */
bool egpu__sched_fits_inside(const struct egpu__sched_resv *r,
                             const struct egpu_container_request *cr)
{
    const struct egpu_reservation rv = {
        .core_milli = r->core_milli, .mem_mib = r->mem_mib, .ncards = r->ncards};

    return egpu_api_resv_can_hold(&rv, cr);
}

/* The card UUID of r's card k (r applied: its GPU objects are known). */
const char *egpu__sched_resv_uuid(const struct egpu__sched_resv *r, uint32_t k)
{
    const struct egpu__sched_gpu *g = r->home != NULL ? slot_named(r->home, r->gpus[k]) : NULL;

    return g != NULL ? g->uuid : "";
}

/* Position of GPU container name in p's request, or UINT32_MAX. */
uint32_t egpu__sched_container_of(const struct egpu_sched_pod *p, const char *name)
{
    for (uint32_t i = 0; i < p->req.ncontainers; i++) {
        if (strcmp(egpu_sched_pod_container(p, i), name) == 0)
            return i;
    }
    return UINT32_MAX;
}

/* Take out of req and pick (e's, on node n) the claimed containers that are
 * counted inside their claim's ElasticGPU: it is applied on n, holds no
 * other pod, the container's cards in pick are exactly its cards and its
 * request fits inside it. in[i] gets that ElasticGPU for container i of
 * e's request (NULL: counted beside). */
static void split_inside(const struct egpu__sched_pod_entry *e, const struct egpu_node *n,
                         struct egpu_pod_request *req, struct egpu_pick *pick,
                         struct egpu__sched_resv *in[EGPU_CONTAINERS_MAX])
{
    uint32_t map[EGPU_CONTAINERS_MAX], nc = 0, ns = 0;
    bool any = false;

    memset(in, 0, EGPU_CONTAINERS_MAX * sizeof(in[0]));
    for (uint32_t u = 0; u < e->nuses; u++) {
        struct egpu__sched_resv *r = egpu__sched_claim_resv(e->uses[u].ce);
        uint32_t ci = egpu__sched_container_of(&e->pod, e->pod.claims[u].container), found = 0;

        if (r == NULL || ci == UINT32_MAX || r->state != RESV_APPLIED ||
            strcmp(r->node, n->name) != 0 || (r->occupant != NULL && r->occupant != e) ||
            !egpu__sched_fits_inside(r, &req->containers[ci]))
            continue;
        for (uint32_t s = 0; s < pick->nshares; s++) {
            bool mine = false;

            if (pick->shares[s].container != ci)
                continue;
            for (uint32_t k = 0; k < r->ncards && !mine; k++)
                mine = strcmp(n->gpus[pick->shares[s].gpu].uuid, egpu__sched_resv_uuid(r, k)) == 0;
            found += mine ? 1 : EGPU_PICK_SHARES_MAX; /* a card not its: never equal */
        }
        if (found != r->ncards)
            continue;
        in[ci] = r;
        any = true;
    }
    if (!any)
        return;
    for (uint32_t i = 0; i < req->ncontainers; i++) {
        if (in[i] == NULL) {
            map[i] = nc;
            req->containers[nc++] = req->containers[i];
        }
    }
    for (uint32_t s = 0; s < pick->nshares; s++) {
        if (in[pick->shares[s].container] == NULL) {
            pick->shares[ns] = pick->shares[s];
            pick->shares[ns++].container = (uint16_t)map[pick->shares[s].container];
        }
    }
    req->ncontainers = nc;
    pick->nshares = ns;
}

/* Why e (which wants a GPU) could not be matched to its node's cards. */
static const char *unresolved_why(const struct egpu__sched_pod_entry *e)
{
    return e->pod.has_assigned     ? "annotation names cards or containers the node lacks"
           : e->pod.assigned_error ? e->pod.assigned_error
                                   : "bound without " EGPU_ANN_ASSIGNED;
}

/* Count entry e on node n in the core: its placement (annotation) read into
 * a pick, the containers counted inside their claim's ElasticGPU taken out.
 * Returns 0, or egpu_cluster_assign's error (e then holds nothing). */
static int count_on(struct egpu_sched_cache *c, struct egpu__sched_pod_entry *e,
                    struct egpu_node *n, struct egpu_error *err)
{
    struct egpu_pod_request req = e->pod.req;
    struct egpu__sched_resv *in[EGPU_CONTAINERS_MAX], **inside = NULL;
    struct egpu_pick pick = {0};
    int rc;

    e->unresolved = false;
    memset(in, 0, sizeof(in));
    if (egpu_sched_pod_wants_gpu(&e->pod) && !pick_of(&e->pod, n, &pick)) {
        /* Before the sync this is mostly the first lists arriving in any
         * order (a pod before its node's GPU objects): debug only, and
         * egpu_sched_cache_synced reports what is left. After it, one
         * warning per pod, until its cards are matched again. */
        egpu_log(c->synced && !e->warned ? EGPU_LOG_WARN : EGPU_LOG_DEBUG,
                 "counting pod without its cards pod=%s node=%s reason=\"%s\"", e->key, n->name,
                 unresolved_why(e));
        e->warned = c->synced;
        req.ncontainers = 0;
        pick.nshares = 0;
        e->unresolved = true;
    } else {
        e->warned = false;
        if (e->nuses > 0)
            split_inside(e, n, &req, &pick, in);
    }
    for (uint32_t i = 0; i < e->pod.req.ncontainers && inside == NULL; i++) {
        if (in[i] != NULL && (inside = egpu_calloc(EGPU_CONTAINERS_MAX, sizeof(*inside))) == NULL) {
            e->unresolved = false;
            return egpu_error_set(err, -ENOMEM, "pod %s: out of memory", e->key);
        }
    }
    rc = egpu_cluster_assign(c->cluster, e->key, n, &req, &pick, err);
    if (rc) {
        egpu_free(inside);
        e->unresolved = false;
        return rc;
    }
    e->counted = true;
    e->inside = inside; /* not counted before: held none */
    for (uint32_t i = 0; inside != NULL && i < e->pod.req.ncontainers; i++) {
        inside[i] = in[i];
        if (in[i] != NULL) {
            in[i]->occupant = e;
            egpu_log(EGPU_LOG_DEBUG,
                     "container counted inside its claim's ElasticGPU pod=%s container=%s "
                     "elasticgpu=%s node=%s",
                     e->key, egpu_sched_pod_container(&e->pod, i), in[i]->name, n->name);
        }
    }
    return 0;
}

/* Count entry e on its node in the core, if the node is there. A container
 * that uses a claim is counted inside the claim's ElasticGPU when that is
 * applied on the same cards (split_inside), so the card is never counted
 * twice; else beside it, as any pod. */
static void count(struct egpu_sched_cache *c, struct egpu__sched_pod_entry *e)
{
    const char *target = egpu__sched_target_of(&e->pod);
    struct egpu_node *n = target ? egpu_cluster_node(c->cluster, target) : NULL;
    struct egpu_error err = {0};

    e->unresolved = false;
    if (n == NULL)
        return;
    if (count_on(c, e, n, &err) != 0)
        egpu_log(EGPU_LOG_ERROR,
                 "pod does not fit where the API says it is pod=%s node=%s "
                 "reason=\"%s\"",
                 e->key, target, err.msg);
}

/* The node e is counted on, copied into was (EGPU_K8S_NAME_MAX bytes; ""
 * when e holds nothing), before an uncount: after it,
 * egpu__sched_resv_retry(c, was) lets the reservations there that did not
 * fit try again. */
static void counted_on(const struct egpu__sched_pod_entry *e, char *was)
{
    const char *t = e->counted ? egpu__sched_target_of(&e->pod) : NULL;

    snprintf(was, EGPU_K8S_NAME_MAX, "%s", t != NULL ? t : "");
}

/* e holds nothing in the core any more (released, or its node removed):
 * forget the ElasticGPUs it was counted inside. */
static void forget_count(struct egpu__sched_pod_entry *e)
{
    for (uint32_t i = 0; e->inside != NULL && i < EGPU_CONTAINERS_MAX; i++) {
        if (e->inside[i] != NULL && e->inside[i]->occupant == e)
            e->inside[i]->occupant = NULL;
    }
    egpu_free(e->inside);
    e->inside = NULL;
    e->counted = false;
    e->unresolved = false;
}

static void uncount(struct egpu_sched_cache *c, struct egpu__sched_pod_entry *e)
{
    if (e->counted && egpu_cluster_release(c->cluster, e->key, NULL) != 0)
        egpu_log(EGPU_LOG_ERROR, "bug: counted pod held nothing pod=%s", e->key);
    forget_count(e);
}

/* Uncount the users of claim ce (those counted on node, or anywhere when
 * node is NULL) and mark them with a new tag, so that unpark_users counts
 * exactly them again once their claim's ElasticGPU has changed: each is
 * then counted inside or beside it as it is then, never both. Returns the
 * tag (0 when ce is NULL). */
uint64_t egpu__sched_park_users(struct egpu_sched_cache *c, struct egpu__sched_claim *ce,
                                const char *node)
{
    uint64_t tag;

    if (ce == NULL)
        return 0;
    tag = ++c->park_seq;
    for (struct egpu__sched_claim_use *u = ce->uses; u != NULL; u = u->next) {
        struct egpu__sched_pod_entry *e = u->pod;
        const char *t = egpu__sched_target_of(&e->pod);

        if (!e->counted || e->parked != 0 || (node != NULL && (t == NULL || strcmp(t, node))))
            continue;
        uncount(c, e);
        e->parked = tag;
    }
    return tag;
}

static void unpark_users(struct egpu_sched_cache *c, struct egpu__sched_claim *ce, uint64_t tag)
{
    for (struct egpu__sched_claim_use *u = ce != NULL ? ce->uses : NULL; tag != 0 && u != NULL;
         u = u->next) {
        if (u->pod->parked == tag) {
            u->pod->parked = 0;
            count(c, u->pod);
        }
    }
}

/* Apply the reservations of ni that hold capacity and are not applied; with
 * held_before, only those that were applied before ni was rebuilt. */
static void resv_apply_node(struct egpu_sched_cache *c, struct egpu__sched_node *ni,
                            bool held_before)
{
    for (struct egpu__sched_resv *r = ni->resvs; r != NULL; r = r->next) {
        if (!held_before || r->was_applied)
            egpu__sched_resv_apply(c, r);
    }
}

/* The load the core is to see for card g at now_s: the report's while it
 * is fresh and load awareness is on, else unknown. */
static uint16_t card_load(const struct egpu_sched_cache *c, const struct egpu__sched_gpu *g,
                          int64_t now_s)
{
    if (!c->load_aware || g->load_pct == EGPU_LOAD_UNKNOWN || g->load_at_s <= 0 ||
        now_s - g->load_at_s > c->load_max_age_s)
        return EGPU_LOAD_UNKNOWN;
    return g->load_pct;
}

/* Note when card g's load, load (card_load's), turns stale. */
static void note_expiry(struct egpu_sched_cache *c, const struct egpu__sched_gpu *g, uint16_t load)
{
    if (load != EGPU_LOAD_UNKNOWN && g->load_at_s + c->load_max_age_s + 1 < c->load_expiry_s)
        c->load_expiry_s = g->load_at_s + c->load_max_age_s + 1;
}

/* Give the core card g's load at now_s, if its node is in the core, and
 * note when a fresh one turns stale. */
static void load_push(struct egpu_sched_cache *c, struct egpu__sched_node *ni,
                      const struct egpu__sched_gpu *g, int64_t now_s)
{
    struct egpu_node *n = egpu_cluster_node(c->cluster, ni->name);
    uint16_t load = card_load(c, g, now_s);

    note_expiry(c, g, load);
    for (uint32_t i = 0; n != NULL && !g->shadowed && i < n->ngpus; i++) {
        if (strcmp(n->gpus[i].uuid, g->uuid) == 0) {
            if (egpu_cluster_set_load(c->cluster, n, i, load) != 0) /* i is a card of n */
                egpu_log(EGPU_LOG_ERROR, "bug: no card %u on node=%s", i, n->name);
            return;
        }
    }
}

void egpu_sched_cache_expire_loads_locked(struct egpu_sched_cache *c, int64_t now_s)
{
    struct egpu__sched_node *ni;
    size_t pos = 0;

    if (now_s < c->load_expiry_s)
        return;
    c->load_expiry_s = INT64_MAX; /* load_push lowers it again for the loads still fresh */
    while ((ni = egpu_map_next(c->nodes, &pos, NULL)) != NULL) {
        for (uint32_t i = 0; i < ni->ngpus; i++) {
            if (ni->gpus[i].load_pct != EGPU_LOAD_UNKNOWN)
                load_push(c, ni, &ni->gpus[i], now_s);
        }
    }
}

void egpu_sched_cache_set_load_aware(struct egpu_sched_cache *c, bool on, int64_t max_age_s)
{
    pthread_mutex_lock(&c->lock);
    c->load_aware = on;
    c->load_max_age_s = max_age_s;
    c->load_expiry_s = INT64_MIN; /* every card's load is given again */
    egpu_sched_cache_expire_loads_locked(c, (int64_t)time(NULL));
    pthread_mutex_unlock(&c->lock);
}

/* Put node ni into the core as it is now, and count the pods placed on it.
 * Reservations keep what they held: those applied before are applied again
 * first (oldest first), then the pods are counted, then the reservations
 * that were waiting or did not fit are tried again, so rebuilding a node
 * never moves capacity from a pod to a reservation or back. */
static int rebuild(struct egpu_sched_cache *c, struct egpu__sched_node *ni, struct egpu_error *err)
{
    struct egpu_gpu_spec gpus[EGPU_NODE_GPUS_MAX];
    static _Thread_local char notes[EGPU_NODE_GPUS_MAX]
                                   [EGPU_K8S_NAME_MAX + EGPU_API_HEALTH_MAX + 4];
    static _Thread_local struct egpu_topo_link links[EGPU_NODE_GPUS_MAX][EGPU_API_GPU_PEERS_MAX];
    struct egpu_node_spec spec = {
        .name = ni->name, .cpu_milli = ni->cpu_milli, .mem_mib = ni->mem_mib, .gpus = gpus};
    struct egpu__sched_pod_entry *e;
    int64_t now = c->load_aware ? (int64_t)time(NULL) : 0;
    uint16_t load;
    int rc = 0;

    for (struct egpu__sched_resv *r = ni->resvs; r != NULL; r = r->next) {
        r->was_applied = r->state == RESV_APPLIED;
        if (r->was_applied)
            r->state = RESV_WAITING; /* the node's removal below releases it */
    }
    egpu__sched_dra_node_down(c, ni->name); /* and its ResourceClaims */
    if (egpu_cluster_node(c->cluster, ni->name) != NULL) {
        /* Removing the node releases every pod and reservation counted on it. */
        for (e = ni->pods; e != NULL; e = e->next)
            forget_count(e);
        if (egpu_cluster_remove_node(c->cluster, ni->name) != 0)
            egpu_log(EGPU_LOG_ERROR, "bug: node vanished from the core node=%s", ni->name);
    }
    if (!ni->has_node) {
        resv_apply_node(c, ni, false); /* each now waits for the node */
        egpu__sched_dra_node_up(c, ni->name, false);
        return 0;
    }
    for (uint32_t i = 0; i < ni->ngpus; i++) {
        if (ni->gpus[i].shadowed)
            continue;
        /* An unhealthy card takes no new pod; the refusal names it and
         * says its status.health. */
        if (ni->gpus[i].health[0] != '\0')
            snprintf(notes[spec.ngpus], sizeof(notes[0]), "%s (%s)", ni->gpus[i].name,
                     ni->gpus[i].health);
        gpus[spec.ngpus] = (struct egpu_gpu_spec){
            .uuid = ni->gpus[i].uuid,
            .index = ni->gpus[i].index,
            .model = ni->gpus[i].model,
            .mem_mib = ni->gpus[i].mem_mib,
            .unhealthy = ni->gpus[i].health[0] != '\0' ? notes[spec.ngpus] : NULL};
        /* spec.topology: the core passes over peers the node lacks. */
        for (uint32_t k = 0; k < ni->gpus[i].npeers; k++)
            links[spec.ngpus][k] =
                (struct egpu_topo_link){.peer_index = ni->gpus[i].peers[k].index,
                                        .level = (uint8_t)ni->gpus[i].peers[k].link};
        gpus[spec.ngpus].nlinks = ni->gpus[i].npeers;
        gpus[spec.ngpus].links = links[spec.ngpus];
        load = card_load(c, &ni->gpus[i], now);
        note_expiry(c, &ni->gpus[i], load);
        gpus[spec.ngpus].load_known = load != EGPU_LOAD_UNKNOWN;
        gpus[spec.ngpus].load_pct = load != EGPU_LOAD_UNKNOWN ? load : 0;
        spec.ngpus++;
    }
    rc = egpu_cluster_add_node(c->cluster, &spec, err);
    if (rc) {
        egpu_log(EGPU_LOG_ERROR, "node left out of the cache node=%s reason=\"%s\"", ni->name,
                 err ? err->msg : egpu_strerror(rc));
        resv_apply_node(c, ni, false); /* each now waits for the node */
        egpu__sched_dra_node_up(c, ni->name, false);
        return rc;
    }
    /* Who held what before holds it again: allocated ResourceClaims (the
     * allocator's decisions) and reservations, then the pods, then the
     * rest. */
    egpu__sched_dra_node_up(c, ni->name, true);
    resv_apply_node(c, ni, true);
    for (e = ni->pods; e != NULL; e = e->next) {
        if (!e->counted)
            count(c, e);
    }
    resv_apply_node(c, ni, false);
    egpu__sched_dra_node_up(c, ni->name, false);
    return 0;
}

static struct egpu__sched_node *node_info(struct egpu_sched_cache *c, const char *name, bool create)
{
    struct egpu__sched_node *ni = egpu_map_get(c->nodes, name);

    if (ni != NULL || !create)
        return ni;
    if (strlen(name) >= sizeof(ni->name))
        return NULL;
    ni = egpu_calloc(1, sizeof(*ni));
    if (ni == NULL)
        return NULL;
    memcpy(ni->name, name, strlen(name) + 1);
    if (egpu_map_put(c->nodes, ni->name, ni) != 0) {
        egpu_free(ni);
        return NULL;
    }
    return ni;
}

/* Forget ni when nothing refers to it any more. */
static void drop_if_empty(struct egpu_sched_cache *c, struct egpu__sched_node *ni)
{
    if (ni->has_node || ni->ngpus > 0 || ni->pods != NULL || ni->resvs != NULL)
        return;
    (void)egpu_map_del(c->nodes, ni->name); /* present: ni came from the map */
    egpu_free(ni->gpus);
    egpu_free(ni);
}

/* Whether e's pod is placed on its node by an assignment the agent has not
 * marked allocated yet: the kubelet could confuse its containers with
 * another pod's of the same gpu-core (egpu_sched_cache_is_ambiguous_locked).
 * A pod our bind placed without cards (--pods-without-gpu place) never waits. */
static bool is_waiting(const struct egpu__sched_pod_entry *e)
{
    return e->home != NULL && e->pod.has_assigned && e->pod.assigned->ncontainers > 0 &&
           !e->pod.allocated && !e->pod.terminal;
}

/* Take e out of its node's waiting count (before e->pod or e->home change). */
static void waiting_drop(struct egpu_sched_cache *c, struct egpu__sched_pod_entry *e)
{
    struct egpu__sched_node *ni = e->home;

    if (!e->waiting)
        return;
    e->waiting = false;
    if (--ni->waiting > 0)
        return;
    if (ni->wprev != NULL)
        ni->wprev->wnext = ni->wnext;
    else
        c->waiting = ni->wnext;
    if (ni->wnext != NULL)
        ni->wnext->wprev = ni->wprev;
    ni->wprev = ni->wnext = NULL;
}

/* Count e in its node's waiting count when it waits (after a change). */
static void waiting_add(struct egpu_sched_cache *c, struct egpu__sched_pod_entry *e)
{
    struct egpu__sched_node *ni = e->home;

    if (e->waiting || !is_waiting(e))
        return;
    e->waiting = true;
    if (ni->waiting++ > 0)
        return;
    ni->wprev = NULL;
    ni->wnext = c->waiting;
    if (ni->wnext != NULL)
        ni->wnext->wprev = ni;
    c->waiting = ni;
}

static void relink(struct egpu_sched_cache *c, struct egpu__sched_pod_entry *e);

/* Link e into the list of the node it is placed on now (after e->pod
 * changed), and count it there as waiting or not. */
static void rehome(struct egpu_sched_cache *c, struct egpu__sched_pod_entry *e)
{
    waiting_drop(c, e);
    relink(c, e);
    waiting_add(c, e);
}

static void relink(struct egpu_sched_cache *c, struct egpu__sched_pod_entry *e)
{
    const char *target = egpu__sched_target_of(&e->pod);
    struct egpu__sched_node *old = e->home;

    if (old != NULL && target != NULL && strcmp(old->name, target) == 0)
        return;
    if (old != NULL) {
        if (e->prev != NULL)
            e->prev->next = e->next;
        else
            old->pods = e->next;
        if (e->next != NULL)
            e->next->prev = e->prev;
        e->home = NULL;
        e->prev = e->next = NULL;
        drop_if_empty(c, old);
    }
    if (target == NULL)
        return;
    e->home = node_info(c, target, true);
    if (e->home == NULL) {
        egpu_log(EGPU_LOG_ERROR, "out of memory: pod not tracked on its node pod=%s node=%s",
                 e->key, target);
        return;
    }
    e->next = e->home->pods;
    if (e->next != NULL)
        e->next->prev = e;
    e->home->pods = e;
}

/* o.a(.b) as a C string; NULL when missing, not a string, or holding a NUL. */
static const char *str_at(const json_t *o, const char *a, const char *b)
{
    const json_t *v = json_object_get(o, a);

    if (b != NULL)
        v = json_object_get(v, b);
    return egpu_kube_str(v);
}

int egpu__sched_labels_pack(const json_t *labels, char **out, size_t *len)
{
    const char *key;
    size_t klen, n = 0;
    json_t *v;
    char *p;

    *out = NULL;
    *len = 0;
    /* An empty key (which would end the packing), a key holding a NUL
     * (json_object_get would not find it by its C
     * string) or a value that is no C string is left out: no selector
     * sees either. */
    json_object_keylen_foreach((json_t *)labels, key, klen, v)
    {
        if (klen > 0 && strlen(key) == klen && egpu_kube_str(v) != NULL)
            n += klen + 1 + strlen(json_string_value(v)) + 1;
    }
    if (n == 0)
        return 0;
    p = egpu_malloc(n + 1);
    if (p == NULL)
        return -ENOMEM;
    *out = p;
    *len = n + 1;
    json_object_keylen_foreach((json_t *)labels, key, klen, v)
    {
        if (klen > 0 && strlen(key) == klen && egpu_kube_str(v) != NULL) {
            size_t vlen = strlen(json_string_value(v));

            memcpy(p, key, klen + 1);
            p += klen + 1;
            memcpy(p, json_string_value(v), vlen + 1);
            p += vlen + 1;
        }
    }
    *p = '\0';
    return 0;
}

const char *egpu__sched_label(const void *packed, const char *key)
{
    for (const char *p = packed; p != NULL && *p != '\0';) {
        const char *val = p + strlen(p) + 1;

        if (strcmp(p, key) == 0)
            return val;
        p = val + strlen(val) + 1;
    }
    return NULL;
}

int egpu_sched_cache_node_set(struct egpu_sched_cache *c, const json_t *node,
                              struct egpu_error *err)
{
    const char *name = str_at(node, "metadata", "name");
    const json_t *alloc = json_object_get(json_object_get(node, "status"), "allocatable");
    const char *cpu = str_at(alloc, "cpu", NULL), *mem = str_at(alloc, "memory", NULL);
    const json_t *labels = json_object_get(json_object_get(node, "metadata"), "labels");
    int64_t cpu_milli = 0, mem_mib = 0;
    struct egpu__sched_node *ni;
    char *packed = NULL;
    size_t packed_len = 0;
    int rc = 0;

    if (name == NULL || name[0] == '\0' || strlen(name) >= EGPU_K8S_NAME_MAX)
        return egpu_error_set(err, EGPU_ESYNTAX, "node: metadata.name missing or invalid");
    if (cpu != NULL)
        rc = egpu_parse_cpu_milli(cpu, "status.allocatable.cpu", &cpu_milli, err);
    if (rc == 0 && mem != NULL)
        rc = egpu_parse_mem_mib(mem, "status.allocatable.memory", &mem_mib, err);
    if (rc)
        return egpu_error_prefix(err, rc, "node %s", name);
    if (egpu__sched_labels_pack(labels, &packed, &packed_len) != 0)
        return egpu_error_set(err, -ENOMEM, "node %s: out of memory", name);
    pthread_mutex_lock(&c->lock);
    ni = node_info(c, name, true);
    if (ni != NULL && (ni->labels_len != packed_len ||
                       (packed_len && memcmp(ni->labels, packed, packed_len) != 0))) {
        /* What class nodeSelectors read; placement does not change. */
        egpu_free(ni->labels);
        ni->labels = packed;
        ni->labels_len = packed_len;
        packed = NULL;
    }
    egpu_free(packed);
    if (ni == NULL) {
        rc = egpu_error_set(err, -ENOMEM, "node %s: out of memory", name);
    } else if (!ni->has_node || ni->cpu_milli != cpu_milli || ni->mem_mib != mem_mib) {
        ni->has_node = true;
        ni->cpu_milli = cpu_milli;
        ni->mem_mib = mem_mib;
        rc = rebuild(c, ni, err);
    }
    pthread_mutex_unlock(&c->lock);
    return rc;
}

int egpu_sched_cache_node_delete(struct egpu_sched_cache *c, const char *name)
{
    struct egpu__sched_node *ni;

    pthread_mutex_lock(&c->lock);
    ni = node_info(c, name, false);
    if (ni != NULL && ni->has_node) {
        ni->has_node = false;
        egpu_free(ni->labels);
        ni->labels = NULL;
        ni->labels_len = 0;
        (void)rebuild(c, ni, NULL); /* removes it: nothing to add */
        drop_if_empty(c, ni);
    }
    pthread_mutex_unlock(&c->lock);
    return 0;
}

struct gpu_fields {
    const char *name, *node, *uuid, *model;
    const char *health; /* status.health; NULL when not a string */
    int64_t index, mem_mib;
    uint16_t load_pct; /* status.used's load, EGPU_LOAD_UNKNOWN when none */
    int64_t load_at_s; /* status.used.updateTime, 0 = none or unreadable */
    size_t npeers;     /* spec.topology; 0 when none or refused */
    struct egpu_api_gpu_peer peers[EGPU_API_GPU_PEERS_MAX];
};

/* status.used as egpu-agent writes it, for the load. A malformed report
 * counts as none (unknown): it is advisory, and never keeps a card out. */
static void used_fields(const json_t *gpu, struct gpu_fields *f)
{
    const json_t *used = json_object_get(json_object_get(gpu, "status"), "used");
    const json_t *util = json_object_get(used, "utilization"),
                 *mem = json_object_get(used, "memory");
    const char *at = str_at(used, "updateTime", NULL);

    f->load_pct =
        egpu_load_pct(json_is_integer(util), json_integer_value(util), json_is_integer(mem),
                      json_integer_value(mem),
                      f->mem_mib > 0 && f->mem_mib <= UINT32_MAX ? (uint32_t)f->mem_mib : 0);
    f->load_at_s = 0;
    if (f->load_pct == EGPU_LOAD_UNKNOWN || at == NULL ||
        egpu_api_time_parse(at, "status.used.updateTime", &f->load_at_s, NULL) != 0 ||
        f->load_at_s <= 0) {
        f->load_pct = EGPU_LOAD_UNKNOWN;
        f->load_at_s = 0;
    }
}

static int gpu_fields(const json_t *gpu, struct gpu_fields *f, struct egpu_error *err)
{
    struct egpu_error terr = {0};
    const json_t *spec = json_object_get(gpu, "spec");
    const json_t *index = json_object_get(spec, "index"), *mem = json_object_get(spec, "memory");
    const char *name = str_at(gpu, "metadata", "name");

    if (name == NULL || name[0] == '\0' || strlen(name) >= EGPU_K8S_NAME_MAX)
        return egpu_error_set(err, EGPU_ESYNTAX, "GPU: metadata.name missing or invalid");
    f->name = name;
    f->node = str_at(spec, "nodeName", NULL);
    f->uuid = str_at(spec, "uuid", NULL);
    f->model = str_at(spec, "model", NULL);
    f->health = str_at(gpu, "status", "health");
    if (f->node == NULL || f->node[0] == '\0' || strlen(f->node) >= EGPU_K8S_NAME_MAX)
        return egpu_error_set(err, EGPU_ESYNTAX, "GPU %s: spec.nodeName missing or invalid", name);
    if (f->uuid == NULL || f->uuid[0] == '\0' || strlen(f->uuid) >= EGPU_UUID_MAX)
        return egpu_error_set(err, EGPU_ESYNTAX,
                              "GPU %s: spec.uuid must be a string of 1..%d characters without NUL",
                              name, EGPU_UUID_MAX - 1);
    if (!json_is_integer(index) || json_integer_value(index) < 0 ||
        json_integer_value(index) > 1023)
        return egpu_error_set(err, EGPU_ESYNTAX, "GPU %s: spec.index must be an integer 0..1023",
                              name);
    if (!json_is_integer(mem) || json_integer_value(mem) < 0 ||
        json_integer_value(mem) > UINT32_MAX)
        return egpu_error_set(err, EGPU_ESYNTAX,
                              "GPU %s: spec.memory must be an integer number of MiB", name);
    if (f->model != NULL && strlen(f->model) >= SCHED_GPU_MODEL_MAX)
        return egpu_error_set(err, EGPU_ESYNTAX, "GPU %s: spec.model too long", name);
    f->index = json_integer_value(index);
    f->mem_mib = json_integer_value(mem);
    used_fields(gpu, f);
    /* spec.topology only steers multi-card picks: one the CRD would refuse
     * counts as none (logged), and the card is still placed. */
    if (egpu_api_gpu_topology_decode(spec, f->peers, &f->npeers, &terr) != 0) {
        egpu_log(EGPU_LOG_WARN, "GPU topology ignored gpu=%s reason=\"%s\"", name, terr.msg);
        f->npeers = 0;
    }
    return 0;
}

/* The slot of GPU object name on ni, or NULL. */
static struct egpu__sched_gpu *slot_named(struct egpu__sched_node *ni, const char *name)
{
    for (uint32_t i = 0; ni != NULL && i < ni->ngpus; i++) {
        if (strcmp(ni->gpus[i].name, name) == 0)
            return &ni->gpus[i];
    }
    return NULL;
}

/* ---- ElasticGPU reservations ---- */

const char *egpu_sched_resv_state_name(enum egpu_sched_resv_state st)
{
    static const char *const names[] = {"off", "waiting", "applied", "overfill"};

    return (unsigned)st < EGPU_SCHED_RESV_STATES ? names[st] : "?";
}

/* Record r's new state; log it when it differs from what was last logged
 * (a rebuild that puts r back as it was logs nothing). */
static void resv_note(struct egpu_sched_cache *c, struct egpu__sched_resv *r,
                      enum egpu_sched_resv_state st, const char *why)
{
    r->state = st;
    snprintf(r->why, sizeof(r->why), "%s", why != NULL ? why : "");
    if (r->reported == st)
        return;
    r->reported = st;
    switch (st) {
    case RESV_APPLIED:
        egpu_log(EGPU_LOG_INFO,
                 "reservation applied elasticgpu=%s node=%s gpus=%u core_milli=%u mem_mib=%u",
                 r->name, r->node, r->ncards, r->core_milli, r->mem_mib);
        break;
    case RESV_OVERFILL:
        c->resv_overfills++;
        egpu_log(EGPU_LOG_WARN,
                 "reservation does not fit its cards, not applied elasticgpu=%s node=%s "
                 "reason=\"%s\" overfills=%llu",
                 r->name, r->node, why, (unsigned long long)c->resv_overfills);
        break;
    case RESV_WAITING:
        egpu_log(EGPU_LOG_INFO, "reservation waits elasticgpu=%s node=%s reason=\"%s\"", r->name,
                 r->node, why);
        break;
    case RESV_OFF:
    default:
        egpu_log(EGPU_LOG_INFO, "reservation holds nothing elasticgpu=%s node=%s reason=\"%s\"",
                 r->name, r->node, why);
        break;
    }
}

/* Hold r in the core if it holds capacity and is not held yet: its node and
 * every GPU object it names must be in the cache (else it waits, and is
 * applied when they come: rebuild() runs when a node or GPU arrives), and
 * its cards must have the room (else it is an overfill: not applied,
 * counted and logged; never a negative free). */
void egpu__sched_resv_apply(struct egpu_sched_cache *c, struct egpu__sched_resv *r)
{
    struct egpu_node *n = egpu_cluster_node(c->cluster, r->node);
    struct egpu_reservation res = {
        .core_milli = r->core_milli, .mem_mib = r->mem_mib, .ncards = r->ncards};
    struct egpu_error err = {0};
    char why[2 * EGPU_K8S_NAME_MAX + 64]; /* two names and the words */
    uint64_t tag;
    int rc;

    if (!r->holds) {
        resv_note(c, r, RESV_OFF, "phase Failed");
        return;
    }
    if (r->state == RESV_APPLIED)
        return;
    if (n == NULL) {
        snprintf(why, sizeof(why), "node %s is not in the cache (no Node object yet)", r->node);
        resv_note(c, r, RESV_WAITING, why);
        return;
    }
    for (uint32_t i = 0; i < r->ncards; i++) {
        const struct egpu__sched_gpu *g = slot_named(r->home, r->gpus[i]);

        if (g == NULL || g->shadowed) {
            snprintf(why, sizeof(why), "GPU %.200s is %s on node %.200s", r->gpus[i],
                     g == NULL ? "not known" : "a duplicate left out", r->node);
            resv_note(c, r, RESV_WAITING, why);
            return;
        }
        res.uuids[i] = g->uuid;
    }
    /* Its claim's users counted here beside it give their share back first,
     * and are counted again after: inside it when it holds, else beside. */
    tag = egpu__sched_park_users(c, r->claim, r->node);
    rc = egpu_cluster_reserve(c->cluster, r->key, n, &res, &err);
    if (rc == 0) {
        r->held_mem_mib = 0;
        for (uint32_t i = 0; i < r->ncards; i++) {
            const struct egpu_gpu *g = NULL;

            for (uint32_t k = 0; k < n->ngpus && g == NULL; k++)
                g = strcmp(n->gpus[k].uuid, res.uuids[i]) == 0 ? &n->gpus[k] : NULL;
            r->held_mem_mib += r->core_milli == EGPU_GPU_MILLI && g ? g->mem_mib : r->mem_mib;
        }
        resv_note(c, r, RESV_APPLIED, NULL);
    } else {
        resv_note(c, r, rc == EGPU_ENOFIT ? RESV_OVERFILL : RESV_WAITING, err.msg);
    }
    unpark_users(c, r->claim, tag);
}

/* Give back what r holds in the core (state becomes waiting, unlogged). */
void egpu__sched_resv_release(struct egpu_sched_cache *c, struct egpu__sched_resv *r)
{
    if (r->state != RESV_APPLIED)
        return;
    if (egpu_cluster_release(c->cluster, r->key, NULL) != 0)
        egpu_log(EGPU_LOG_ERROR, "bug: applied reservation held nothing elasticgpu=%s", r->name);
    if (r->occupant != NULL)
        egpu_log(EGPU_LOG_ERROR, "bug: reservation released under its pod elasticgpu=%s pod=%s",
                 r->name, r->occupant->key);
    r->state = RESV_WAITING;
}

/* Capacity on node name was freed: try its waiting and overfilled
 * reservations again, oldest first. */
void egpu__sched_resv_retry(struct egpu_sched_cache *c, const char *node)
{
    struct egpu__sched_node *ni = node != NULL ? egpu_map_get(c->nodes, node) : NULL;

    if (ni != NULL)
        resv_apply_node(c, ni, false);
    egpu__sched_dra_node_up(c, node, false); /* and the ResourceClaims there */
}

/* Link r into its node's list, by seq. Returns 0 or -ENOMEM. */
int egpu__sched_resv_link(struct egpu_sched_cache *c, struct egpu__sched_resv *r)
{
    struct egpu__sched_resv **at;

    r->home = node_info(c, r->node, true);
    if (r->home == NULL)
        return -ENOMEM;
    for (at = &r->home->resvs; *at != NULL && (*at)->seq < r->seq; at = &(*at)->next)
        ;
    r->next = *at;
    *at = r;
    return 0;
}

void egpu__sched_resv_unlink(struct egpu_sched_cache *c, struct egpu__sched_resv *r)
{
    struct egpu__sched_resv **at;

    if (r->home == NULL)
        return;
    for (at = &r->home->resvs; *at != NULL && *at != r; at = &(*at)->next)
        ;
    if (*at == r)
        *at = r->next;
    r->next = NULL;
    drop_if_empty(c, r->home);
    r->home = NULL;
}

/* ---- Claim entries ---- */

/* The entry of claim ns/name; created when create (NULL when out of memory
 * or the names are too long). */
struct egpu__sched_claim *egpu__sched_claim_get(struct egpu_sched_cache *c, const char *ns,
                                                const char *name, bool create)
{
    char key[2 * EGPU_K8S_NAME_MAX];
    struct egpu__sched_claim *ce;

    if (strlen(ns) >= EGPU_NAMESPACE_MAX || strlen(name) >= EGPU_K8S_NAME_MAX)
        return NULL;
    snprintf(key, sizeof(key), "%s/%s", ns, name);
    ce = egpu_map_get(c->claims, key);
    if (ce != NULL || !create)
        return ce;
    ce = egpu_calloc(1, sizeof(*ce));
    if (ce == NULL)
        return NULL;
    memcpy(ce->key, key, sizeof(key));
    snprintf(ce->ns, sizeof(ce->ns), "%s", ns);
    snprintf(ce->name, sizeof(ce->name), "%s", name);
    if (egpu_map_put(c->claims, ce->key, ce) != 0) {
        egpu_free(ce);
        return NULL;
    }
    return ce;
}

/* Forget ce when nothing refers to it any more. */
void egpu__sched_claim_drop_if_unused(struct egpu_sched_cache *c, struct egpu__sched_claim *ce)
{
    if (ce == NULL || ce->known || ce->uses != NULL || ce->resvs != NULL)
        return;
    (void)egpu_map_del(c->claims, ce->key); /* present: ce came from the map */
    egpu_free(ce);
}

/* Link e's claimed containers (e->pod.claims) into their claims' lists
 * (e->uses allocated for them: most pods have none). A claim that cannot be
 * tracked (out of memory) leaves that container beside, as any pod's. */
static void uses_link(struct egpu_sched_cache *c, struct egpu__sched_pod_entry *e)
{
    e->nuses = 0;
    if (e->pod.nclaims > 0 && (e->uses = egpu_calloc(e->pod.nclaims, sizeof(*e->uses))) == NULL) {
        egpu_log(EGPU_LOG_ERROR, "out of memory: claims not tracked pod=%s", e->key);
        return;
    }
    for (uint32_t i = 0; i < e->pod.nclaims; i++) {
        struct egpu__sched_claim *ce =
            egpu__sched_claim_get(c, e->pod.ns, e->pod.claims[i].claim, true);
        struct egpu__sched_claim_use *u = &e->uses[e->nuses];

        if (ce == NULL) {
            egpu_log(EGPU_LOG_ERROR, "out of memory: claim not tracked pod=%s claim=%s", e->key,
                     e->pod.claims[i].claim);
            break; /* uses[i] must stay claims[i]'s */
        }
        u->pod = e;
        u->ce = ce;
        u->prev = NULL;
        u->next = ce->uses;
        if (u->next != NULL)
            u->next->prev = u;
        ce->uses = u;
        e->nuses++;
    }
}

static void uses_unlink(struct egpu_sched_cache *c, struct egpu__sched_pod_entry *e)
{
    for (uint32_t i = 0; i < e->nuses; i++) {
        struct egpu__sched_claim_use *u = &e->uses[i];

        if (u->prev != NULL)
            u->prev->next = u->next;
        else
            u->ce->uses = u->next;
        if (u->next != NULL)
            u->next->prev = u->prev;
        egpu__sched_claim_drop_if_unused(c, u->ce);
    }
    e->nuses = 0;
    egpu_free(e->uses);
    e->uses = NULL;
}

/* Claim ce's users were parked under tag while its ElasticGPUs changed:
 * apply those that can hold now, count the users again (inside or beside),
 * then let the reservations on their nodes try the capacity freed. */
void egpu__sched_claim_settle(struct egpu_sched_cache *c, struct egpu__sched_claim *ce,
                              uint64_t tag)
{
    if (ce == NULL)
        return;
    for (struct egpu__sched_resv *r = ce->resvs; r != NULL; r = r->claim_next)
        egpu__sched_resv_apply(c, r);
    unpark_users(c, ce, tag);
    for (struct egpu__sched_claim_use *u = ce->uses; u != NULL; u = u->next) {
        const char *t = egpu__sched_target_of(&u->pod->pod);

        if (t != NULL)
            egpu__sched_resv_retry(c, t);
    }
}

/* Make GPU object name the owner of uuid unless another object owns it.
 * Returns 0 (name owns it), -EEXIST (*owner_out: the other owner's name) or
 * -ENOMEM. */
static int claim_uuid(struct egpu_sched_cache *c, const char *uuid, const char *name,
                      const char **owner_out)
{
    struct gpu_owner *o = egpu_map_get(c->owners, uuid);

    if (o != NULL) {
        *owner_out = o->name;
        return strcmp(o->name, name) == 0 ? 0 : -EEXIST;
    }
    o = egpu_malloc(sizeof(*o) + strlen(uuid) + 1 + strlen(name) + 1);
    if (o == NULL)
        return -ENOMEM;
    memcpy(o->uuid, uuid, strlen(uuid) + 1);
    o->name = memcpy(o->uuid + strlen(uuid) + 1, name, strlen(name) + 1);
    if (egpu_map_put(c->owners, o->uuid, o) != 0) {
        egpu_free(o);
        return -ENOMEM;
    }
    return 0;
}

/* The owner of uuid (GPU object name) is gone: give the card to a GPU object
 * that was shadowed for it, if any, and put its node back together. */
static void release_uuid(struct egpu_sched_cache *c, const char *uuid, const char *name)
{
    struct gpu_owner *o = egpu_map_get(c->owners, uuid);
    struct egpu__sched_node *ni;
    const char *owner;
    size_t pos = 0;

    if (o == NULL || strcmp(o->name, name) != 0)
        return;
    (void)egpu_map_del(c->owners, o->uuid); /* present: just found */
    egpu_free(o);
    while (c->nshadowed > 0 && (ni = egpu_map_next(c->nodes, &pos, NULL)) != NULL) {
        for (uint32_t i = 0; i < ni->ngpus; i++) {
            struct egpu__sched_gpu *g = &ni->gpus[i];

            if (!g->shadowed || strcmp(g->uuid, uuid) != 0 ||
                claim_uuid(c, uuid, g->name, &owner) != 0)
                continue;
            g->shadowed = false;
            c->nshadowed--;
            egpu_log(EGPU_LOG_INFO, "GPU takes its card over gpu=%s node=%s uuid=%s", g->name,
                     ni->name, uuid);
            (void)rebuild(c, ni, NULL); /* a failure is logged there */
            return;
        }
    }
}

/* Make room in ni->gpus for want slots (want <= EGPU_NODE_GPUS_MAX): grown
 * to twice as many (8 at first) when full, halved when no more than a
 * quarter is used, freed when none. New slots are zeroed; a slot moves only
 * here, so no pointer into gpus is held across a call. Returns 0, or
 * -ENOMEM with ni unchanged. */
static int gpus_resize(struct egpu__sched_node *ni, uint32_t want)
{
    uint32_t cap = ni->gpus_cap;
    struct egpu__sched_gpu *g;

    if (want == 0) {
        egpu_free(ni->gpus);
        ni->gpus = NULL;
        ni->gpus_cap = 0;
        return 0;
    }
    if (want > cap)
        cap = cap == 0 ? 8 : 2 * cap;
    else if (want <= cap / 4)
        cap /= 2;
    else
        return 0;
    cap = cap < want ? want : cap > EGPU_NODE_GPUS_MAX ? EGPU_NODE_GPUS_MAX : cap;
    g = egpu_realloc(ni->gpus, (size_t)cap * sizeof(*g));
    if (g == NULL)
        return -ENOMEM;
    if (cap > ni->gpus_cap)
        memset(g + ni->gpus_cap, 0, (size_t)(cap - ni->gpus_cap) * sizeof(*g));
    ni->gpus = g;
    ni->gpus_cap = cap;
    return 0;
}

/* Copy s to b + *at, moving *at past its NUL; returns the copy. */
static const char *put_str(char *b, size_t *at, const char *s)
{
    size_t len = strlen(s) + 1;
    char *to = memcpy(b + *at, s, len);

    *at += len;
    return to;
}

/* Store g's strings in a new strs of their length, in this order (so two
 * cards with the same strings have the same strs), and free the old one
 * (the arguments may point into it). Returns 0, or -ENOMEM with g unchanged. */
static int gpu_strs(struct egpu__sched_gpu *g, const char *uuid, const char *model,
                    const char *name, const char *health)
{
    size_t len = strlen(uuid) + strlen(model) + strlen(name) + strlen(health) + 4, at = 0;
    char *b = egpu_malloc(len), *old = g->strs;

    if (b == NULL)
        return -ENOMEM;
    g->uuid = put_str(b, &at, uuid);
    g->model = put_str(b, &at, model);
    g->name = put_str(b, &at, name);
    g->health = put_str(b, &at, health);
    g->strs = b;
    g->strs_len = (uint32_t)len;
    egpu_free(old);
    return 0;
}

/* Are a and b the same card for placement, their loads aside? */
static bool same_card(const struct egpu__sched_gpu *a, const struct egpu__sched_gpu *b)
{
    return a->index == b->index && a->mem_mib == b->mem_mib && a->shadowed == b->shadowed &&
           a->strs_len == b->strs_len && memcmp(a->strs, b->strs, a->strs_len) == 0 &&
           a->npeers == b->npeers &&
           (a->npeers == 0 || memcmp(a->peers, b->peers, a->npeers * sizeof(*a->peers)) == 0);
}

int egpu_sched_cache_gpu_set(struct egpu_sched_cache *c, const json_t *gpu, struct egpu_error *err)
{
    int64_t now;
    struct gpu_fields f;
    struct egpu__sched_node *ni;
    struct egpu__sched_gpu g = {0}, *slot;
    const char *owner = NULL, *health = "";
    int rc = gpu_fields(gpu, &f, err);

    if (rc)
        return rc;
    /* status.health as egpu-agent writes it: a card that is not Healthy takes
     * no new pod (none written yet: a new object, taken as healthy). */
    if (f.health != NULL && f.health[0] != '\0' && strcmp(f.health, EGPU_API_GPU_HEALTHY) != 0)
        health = f.health;
    if (gpu_strs(&g, f.uuid, f.model && *f.model ? f.model : "unknown", f.name, health) != 0)
        return egpu_error_set(err, -ENOMEM, "GPU %s: out of memory", f.name);
    g.index = (uint32_t)f.index;
    g.mem_mib = (uint32_t)f.mem_mib;
    now = (int64_t)time(NULL);
    g.load_pct = f.load_pct;
    g.load_at_s = f.load_at_s < now ? f.load_at_s : now; /* ahead of our clock: now */
    if (f.npeers > 0) {
        g.peers = egpu_malloc(f.npeers * sizeof(*g.peers));
        if (g.peers == NULL) {
            egpu_free(g.strs);
            return egpu_error_set(err, -ENOMEM, "GPU %s: out of memory", f.name);
        }
        memcpy(g.peers, f.peers, f.npeers * sizeof(*g.peers));
        g.npeers = (uint32_t)f.npeers;
    }
    pthread_mutex_lock(&c->lock);
    ni = node_info(c, f.node, true);
    if (ni == NULL) {
        rc = egpu_error_set(err, -ENOMEM, "GPU %s: out of memory", f.name);
        goto out;
    }
    slot = slot_named(ni, f.name);
    if (slot == NULL && ni->ngpus == EGPU_NODE_GPUS_MAX) {
        rc = egpu_error_set(err, EGPU_ELIMIT, "node %s: more than %d GPUs", f.node,
                            EGPU_NODE_GPUS_MAX);
        goto out;
    }
    if (slot == NULL && gpus_resize(ni, ni->ngpus + 1) != 0) {
        rc = egpu_error_set(err, -ENOMEM, "GPU %s: out of memory", f.name);
        goto out;
    }
    rc = claim_uuid(c, g.uuid, g.name, &owner);
    if (rc == -ENOMEM) {
        rc = egpu_error_set(err, rc, "GPU %s: out of memory", f.name);
        goto out;
    }
    g.shadowed = rc == -EEXIST;
    if (slot != NULL && slot->shadowed && g.shadowed) {
        /* Left out of the core either way: its health and load are kept
         * for when it takes the card over, nothing else changes. */
        if (strcmp(slot->health, g.health) != 0 &&
            gpu_strs(slot, slot->uuid, slot->model, slot->name, g.health) != 0) {
            rc = egpu_error_set(err, -ENOMEM, "GPU %s: out of memory", f.name);
            goto out;
        }
        slot->load_pct = g.load_pct;
        slot->load_at_s = g.load_at_s;
    }
    if (slot != NULL && same_card(slot, &g)) {
        /* A status change placement does not read (allocated), or one of
         * the load alone: the core's card follows it, no rebuild. */
        slot->load_pct = g.load_pct;
        slot->load_at_s = g.load_at_s;
        load_push(c, ni, slot, now);
        rc = 0;
        goto out;
    }
    if (slot != NULL && strcmp(slot->uuid, g.uuid) != 0)
        release_uuid(c, slot->uuid, slot->name); /* its UUID changed */
    if (slot == NULL)
        slot = &ni->gpus[ni->ngpus++];
    else if (slot->shadowed)
        c->nshadowed--;
    c->nshadowed += g.shadowed;
    /* A new slot is zeroed (calloc, or a deleted card's moved): owns nothing. */
    egpu_free(slot->peers);
    egpu_free(slot->strs);
    *slot = g;
    g.peers = NULL; /* the slot owns them now */
    g.strs = NULL;
    if (g.shadowed) {
        /* Left out of the core, so the node as it was stands. */
        rc = egpu_error_set(err, -EEXIST,
                            "GPU %s: spec.uuid %s is already GPU %s's; this card is left out "
                            "until %s is gone",
                            f.name, g.uuid, owner, owner);
        (void)rebuild(c, ni, NULL);
        goto out;
    }
    rc = rebuild(c, ni, err);
out:
    pthread_mutex_unlock(&c->lock);
    egpu_free(g.peers); /* not taken by a slot */
    egpu_free(g.strs);
    return rc;
}

int egpu_sched_cache_gpu_delete(struct egpu_sched_cache *c, const json_t *gpu,
                                struct egpu_error *err)
{
    struct gpu_fields f;
    struct egpu__sched_node *ni;
    struct egpu__sched_gpu *slot, gone;
    int rc = 0;

    /* The name and node alone: the scheduler's GPU informer stores only
     * those (store_field), and a relist's delete comes from the store. */
    f.name = str_at(gpu, "metadata", "name");
    f.node = str_at(json_object_get(gpu, "spec"), "nodeName", NULL);
    if (f.name == NULL || f.name[0] == '\0')
        return egpu_error_set(err, EGPU_ESYNTAX, "GPU: metadata.name missing or invalid");
    if (f.node == NULL || f.node[0] == '\0')
        return egpu_error_set(err, EGPU_ESYNTAX, "GPU %s: spec.nodeName missing or invalid",
                              f.name);
    pthread_mutex_lock(&c->lock);
    ni = node_info(c, f.node, false);
    slot = slot_named(ni, f.name);
    if (slot != NULL) {
        gone = *slot;
        *slot = ni->gpus[--ni->ngpus];
        if (gone.shadowed)
            c->nshadowed--;
        memset(&ni->gpus[ni->ngpus], 0, sizeof(ni->gpus[0])); /* moved: owns nothing */
        (void)gpus_resize(ni, ni->ngpus); /* shrinking: a failure keeps the larger array */
        rc = gone.shadowed ? 0 : rebuild(c, ni, err);
        release_uuid(c, gone.uuid, gone.name);
        egpu_free(gone.peers);
        egpu_free(gone.strs);
        drop_if_empty(c, ni);
    }
    pthread_mutex_unlock(&c->lock);
    return rc;
}

/* Same placement: node and annotation (what count() reads) are equal. */
static bool same_placement(const struct egpu_sched_pod *a, const struct egpu_sched_pod *b)
{
    const char *ta = egpu__sched_target_of(a), *tb = egpu__sched_target_of(b);

    if ((ta == NULL) != (tb == NULL) || (ta && strcmp(ta, tb) != 0))
        return false;
    if (a->has_assigned != b->has_assigned)
        return false;
    return !a->has_assigned || egpu_sched_assigned_same(a->assigned, b->assigned);
}

static bool same_assigned(const struct egpu_sched_pod *a, const struct egpu_sched_pod *b)
{
    return a->has_assigned == b->has_assigned &&
           (!a->has_assigned || egpu_sched_assigned_same(a->assigned, b->assigned));
}

/* The cache saw e's pod bound with its assigned annotation (or without one),
 * and p changes that: the decision was recorded at bind and nobody else may
 * move it (a pod owner could otherwise free its card in our books and have
 * another pod bound onto it). Keep the recorded one in p. */
static void keep_assigned(struct egpu_sched_cache *c, struct egpu__sched_pod_entry *e,
                          struct egpu_sched_pod *p)
{
    struct egpu_sched_assigned *theirs = p->assigned;
    char *their_error = p->assigned_error;

    c->assigned_ignored++;
    egpu_log(EGPU_LOG_WARN,
             "changed " EGPU_ANN_ASSIGNED " of a bound pod not believed pod=%s node=%s "
             "ignored=%llu",
             e->key, p->node, (unsigned long long)c->assigned_ignored);
    /* Swapped: e->pod is replaced by p next, and frees what p brought. */
    p->has_assigned = e->pod.has_assigned;
    p->assigned = e->pod.assigned;
    p->assigned_error = e->pod.assigned_error;
    e->pod.has_assigned = theirs != NULL;
    e->pod.assigned = theirs;
    e->pod.assigned_error = their_error;
}

static void pod_key(char *key, const char *ns, const char *name)
{
    snprintf(key, POD_KEY_MAX, "%s/%s", ns, name);
}

/* A zeroed pod entry with key (the name stored once, as long as it is), or
 * NULL when out of memory. */
static struct egpu__sched_pod_entry *pod_entry_new(const char *key)
{
    size_t len = strlen(key) + 1;
    struct egpu__sched_pod_entry *e = egpu_calloc(1, sizeof(*e) + len);

    if (e != NULL)
        memcpy(e->key, key, len);
    return e;
}

static bool same_claims(const struct egpu_sched_pod *a, const struct egpu_sched_pod *b)
{
    return a->nclaims == b->nclaims &&
           (a->nclaims == 0 ||
            memcmp(a->claims, b->claims, a->nclaims * sizeof(a->claims[0])) == 0);
}

/* The claims whose ElasticGPU e is counted inside, into out (at most
 * EGPU_CONTAINERS_MAX), before e is uncounted. Returns how many. */
static uint32_t occupied(const struct egpu__sched_pod_entry *e, struct egpu__sched_claim **out)
{
    uint32_t n = 0;

    for (uint32_t i = 0; e->inside != NULL && i < EGPU_CONTAINERS_MAX; i++) {
        if (e->inside[i] != NULL && e->inside[i]->claim != NULL)
            out[n++] = e->inside[i]->claim;
    }
    return n;
}

/* e was counted inside the ElasticGPUs of claims ce[0..n) and is not any
 * more: another pod using the claim, counted beside, moves inside. */
static void settle_freed(struct egpu_sched_cache *c, struct egpu__sched_claim **ce, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        struct egpu__sched_resv *r = egpu__sched_claim_resv(ce[i]);

        if (r != NULL && r->occupant == NULL)
            egpu__sched_claim_settle(c, ce[i], egpu__sched_park_users(c, ce[i], NULL));
    }
}

int egpu_sched_cache_pod_set(struct egpu_sched_cache *c, const json_t *pod, struct egpu_error *err)
{
    struct egpu_sched_pod *p = egpu_malloc(sizeof(*p));
    struct egpu__sched_claim *freed[EGPU_CONTAINERS_MAX];
    struct egpu__sched_pod_entry *e;
    char key[POD_KEY_MAX], was[EGPU_K8S_NAME_MAX];
    uint32_t nfreed;
    int rc;

    if (p == NULL)
        return egpu_error_set(err, -ENOMEM, "pod: out of memory");
    rc = egpu_sched_pod_parse(pod, p, err);
    if (rc) {
        egpu_free(p);
        return rc;
    }
    pod_key(key, p->ns, p->name);
    pthread_mutex_lock(&c->lock);
    e = egpu_map_get(c->pods, key);
    if (e == NULL) {
        e = pod_entry_new(key);
        if (e == NULL) {
            rc = egpu_error_set(err, -ENOMEM, "pod %s: out of memory", key);
            goto out;
        }
        rc = egpu_map_put(c->pods, e->key, e);
        if (rc) {
            egpu_free(e);
            rc = egpu_error_set(err, rc, "pod %s: out of memory", key);
            goto out;
        }
        egpu_sched_pod_move(&e->pod, p);
        uses_link(c, e);
        rehome(c, e);
        count(c, e);
        goto out;
    }
    if (e->reserved && !p->has_assigned && !p->terminal && !p->deleting && p->node[0] == '\0')
        goto out; /* an event from before our bind's patch: keep the reservation */
    e->reserved = false;
    if (e->pod.node[0] != '\0' && strcmp(e->pod.node, p->node) == 0 && !e->pod.terminal &&
        !p->terminal && !same_assigned(&e->pod, p))
        keep_assigned(c, e, p);
    if (same_placement(&e->pod, p) && p->req.ncontainers == e->pod.req.ncontainers &&
        same_claims(&e->pod, p)) {
        waiting_drop(c, e);
        egpu_sched_pod_move(&e->pod, p); /* allocated flag, phase... */
        waiting_add(c, e);
        goto out;
    }
    counted_on(e, was);
    nfreed = occupied(e, freed);
    uncount(c, e);
    uses_unlink(c, e);
    egpu_sched_pod_move(&e->pod, p);
    uses_link(c, e);
    rehome(c, e);
    count(c, e);
    egpu__sched_resv_retry(c, was);
    settle_freed(c, freed, nfreed);
out:
    pthread_mutex_unlock(&c->lock);
    egpu_sched_pod_clear(p); /* when not moved into the cache */
    egpu_free(p);
    return rc;
}

int egpu_sched_cache_pod_delete(struct egpu_sched_cache *c, const char *ns, const char *name)
{
    char key[POD_KEY_MAX], was[EGPU_K8S_NAME_MAX];
    struct egpu__sched_claim *freed[EGPU_CONTAINERS_MAX];
    struct egpu__sched_pod_entry *e;
    uint32_t nfreed;

    pod_key(key, ns, name);
    pthread_mutex_lock(&c->lock);
    e = egpu_map_get(c->pods, key);
    if (e != NULL) {
        counted_on(e, was);
        nfreed = occupied(e, freed);
        uncount(c, e);
        uses_unlink(c, e);
        e->pod.terminal = true; /* placed nowhere: unlinks it */
        rehome(c, e);
        (void)egpu_map_del(c->pods, e->key); /* present: just found */
        egpu_sched_pod_clear(&e->pod);
        egpu_free(e);
        egpu__sched_resv_retry(c, was);
        settle_freed(c, freed, nfreed);
    }
    pthread_mutex_unlock(&c->lock);
    return 0;
}

const struct egpu_sched_pod *egpu_sched_cache_pod_locked(struct egpu_sched_cache *c, const char *ns,
                                                         const char *name)
{
    char key[POD_KEY_MAX];
    struct egpu__sched_pod_entry *e;

    pod_key(key, ns, name);
    e = egpu_map_get(c->pods, key);
    return e ? &e->pod : NULL;
}

/* Card UUIDs of container ci of the pick, in order, joined for comparison. */
static void pick_cards(const struct egpu_node *n, const struct egpu_pick *pick, uint32_t ci,
                       char *out, size_t len)
{
    size_t used = 0;

    out[0] = '\0';
    for (uint32_t i = 0; i < pick->nshares && used < len; i++) {
        if (pick->shares[i].container == ci) {
            int k = snprintf(out + used, len - used, "%s,", n->gpus[pick->shares[i].gpu].uuid);

            used += k > 0 ? (size_t)k : 0;
        }
    }
}

static void assigned_cards(const struct egpu_sched_assigned *a, uint32_t i, char *out, size_t len)
{
    size_t used = 0;

    out[0] = '\0';
    for (uint32_t k = 0; k < a->containers[i].ncards && used < len; k++) {
        int n = snprintf(out + used, len - used, "%s,",
                         egpu_sched_assigned_uuid(a, a->containers[i].first_card + k));

        used += n > 0 ? (size_t)n : 0;
    }
}

bool egpu_sched_cache_is_ambiguous_locked(struct egpu_sched_cache *c,
                                          const struct egpu_sched_pod *pod,
                                          const struct egpu_node *node,
                                          const struct egpu_pick *pick, char *why, size_t len)
{
    char mine[EGPU_NODE_GPUS_MAX * EGPU_UUID_MAX], theirs[EGPU_NODE_GPUS_MAX * EGPU_UUID_MAX];
    const struct egpu__sched_node *ni = egpu_map_get(c->nodes, node->name);
    const struct egpu__sched_pod_entry *e;

    for (e = ni ? ni->pods : NULL; e != NULL; e = e->next) {
        const struct egpu_sched_pod *q = &e->pod;

        if (!q->has_assigned || q->allocated || q->terminal ||
            strcmp(egpu_sched_assigned_node(q->assigned), node->name))
            continue;
        if (strcmp(q->ns, pod->ns) == 0 && strcmp(q->name, pod->name) == 0)
            continue;
        for (uint32_t i = 0; i < pod->req.ncontainers; i++) {
            const struct egpu_container_request *cr = &pod->req.containers[i];
            uint32_t pct = card_pct(cr) * cr->ncards; /* what gpu-core said */

            pick_cards(node, pick, i, mine, sizeof(mine));
            for (uint32_t j = 0; j < q->assigned->ncontainers; j++) {
                const struct egpu_sched_assigned_container *qc = &q->assigned->containers[j];
                uint32_t qpct = qc->core_pct * qc->ncards;

                if (qpct != pct)
                    continue;
                assigned_cards(q->assigned, j, theirs, sizeof(theirs));
                if (strcmp(mine, theirs) != 0 || qc->mem_mib != cr->mem_mib) {
                    snprintf(why, len,
                             "pod %s/%s placed on node %s is not yet allocated and asks the same "
                             "gpu-core (%u%%) on other cards or memory; the kubelet's request "
                             "would be ambiguous until it is (retry shortly)",
                             q->ns, q->name, node->name, pct);
                    return true;
                }
            }
        }
    }
    return false;
}

bool egpu__sched_cache_node_waits(struct egpu_sched_cache *c, const char *node)
{
    const struct egpu__sched_node *ni = egpu_map_get(c->nodes, node);

    return ni != NULL && ni->waiting > 0;
}

const char *egpu_sched_cache_waiting_next_locked(struct egpu_sched_cache *c, const void **it)
{
    const struct egpu__sched_node *ni =
        *it == NULL ? c->waiting : ((const struct egpu__sched_node *)*it)->wnext;

    *it = ni;
    return ni != NULL ? ni->name : NULL;
}

int egpu_sched_cache_reserve_locked(struct egpu_sched_cache *c, const struct egpu_sched_pod *pod,
                                    struct egpu_node *node, const struct egpu_pick *pick,
                                    struct egpu_assigned *out, struct egpu_error *err)
{
    struct egpu_assigned *a = out;
    char key[POD_KEY_MAX];
    struct egpu_sched_assigned *mine, *before;
    struct egpu__sched_pod_entry *e;
    bool created = false, had;
    int rc;

    pod_key(key, pod->ns, pod->name);
    e = egpu_map_get(c->pods, key);
    if (e != NULL && e->counted)
        return egpu_error_set(err, EGPU_EALLOCATED, "pod %s is already placed on node %s", key,
                              egpu__sched_target_of(&e->pod) ? egpu__sched_target_of(&e->pod)
                                                             : "?");
    memset(a, 0, sizeof(*a));
    snprintf(a->node, sizeof(a->node), "%s", node->name);
    a->ncontainers = pod->req.ncontainers;
    for (uint32_t i = 0; i < pod->req.ncontainers; i++) {
        const struct egpu_container_request *cr = &pod->req.containers[i];
        struct egpu_assigned_container *ac = &a->containers[i];

        snprintf(ac->name, sizeof(ac->name), "%s", egpu_sched_pod_container(pod, i));
        ac->core_pct = card_pct(cr);
        ac->mem_mib = cr->mem_mib;
        ac->first_card = a->ncards;
        for (uint32_t s = 0; s < pick->nshares; s++) {
            if (pick->shares[s].container != i)
                continue;
            snprintf(a->uuids[a->ncards++], EGPU_UUID_MAX, "%s",
                     node->gpus[pick->shares[s].gpu].uuid);
            ac->ncards++;
        }
    }
    mine = egpu_sched_assigned_new(a);
    if (mine == NULL)
        return egpu_error_set(err, -ENOMEM, "pod %s: out of memory", key);
    if (e == NULL) {
        e = pod_entry_new(key);
        if (e == NULL || egpu_sched_pod_copy(&e->pod, pod) != 0) {
            egpu_free(e);
            egpu_free(mine);
            return egpu_error_set(err, -ENOMEM, "pod %s: out of memory", key);
        }
        egpu_free(e->pod.assigned); /* the request's, if any: ours replaces it */
        e->pod.assigned = NULL;
        e->pod.has_assigned = false;
        if (egpu_map_put(c->pods, e->key, e) != 0) {
            egpu_sched_pod_clear(&e->pod);
            egpu_free(e);
            egpu_free(mine);
            return egpu_error_set(err, -ENOMEM, "pod %s: out of memory", key);
        }
        uses_link(c, e);
        created = true;
    }
    had = e->pod.has_assigned;
    before = e->pod.assigned;
    e->pod.has_assigned = true;
    e->pod.assigned = mine;
    rehome(c, e);
    /* Counted as the annotation will say: a claimed container inside its
     * ElasticGPU, the rest beside. */
    rc = count_on(c, e, node, err);
    if (rc) {
        e->pod.has_assigned = had;
        e->pod.assigned = before;
        egpu_free(mine);
        rehome(c, e);
        if (created) {
            uses_unlink(c, e);
            (void)egpu_map_del(c->pods, e->key); /* present: just put */
            egpu_sched_pod_clear(&e->pod);
            egpu_free(e);
        }
        return rc;
    }
    egpu_free(before);
    e->reserved = true;
    return 0;
}

int egpu_sched_cache_unreserve(struct egpu_sched_cache *c, const char *ns, const char *name)
{
    char key[POD_KEY_MAX], was[EGPU_K8S_NAME_MAX];
    struct egpu__sched_claim *freed[EGPU_CONTAINERS_MAX];
    struct egpu__sched_pod_entry *e;
    uint32_t nfreed;
    int rc = EGPU_ENOTALLOC;

    pod_key(key, ns, name);
    pthread_mutex_lock(&c->lock);
    e = egpu_map_get(c->pods, key);
    if (e != NULL && e->counted) {
        counted_on(e, was);
        nfreed = occupied(e, freed);
        uncount(c, e);
        e->pod.has_assigned = false;
        e->reserved = false;
        rehome(c, e);
        egpu__sched_resv_retry(c, was);
        settle_freed(c, freed, nfreed);
        rc = 0;
    }
    pthread_mutex_unlock(&c->lock);
    return rc;
}

void egpu_sched_cache_stats_locked(struct egpu_sched_cache *c, struct egpu_sched_cache_stats *out)
{
    const struct egpu__sched_claim *ce;
    const struct egpu__sched_pod_entry *e;
    const struct egpu__sched_resv *r;
    size_t pos = 0;

    memset(out, 0, sizeof(*out));
    out->reservation_overfills = c->resv_overfills;
    while ((r = egpu_map_next(c->resvs, &pos, NULL)) != NULL) {
        out->reservations[r->state]++;
        if (r->state == RESV_APPLIED) {
            out->reserved_core_milli += (uint64_t)r->core_milli * r->ncards;
            out->reserved_mem_mib += r->held_mem_mib;
        }
    }
    pos = 0;
    out->nodes = c->cluster->nnodes;
    out->gpus = c->cluster->ngpus;
    out->pods = egpu_map_count(c->pods);
    out->duplicate_gpus = c->nshadowed;
    out->assigned_ignored = c->assigned_ignored;
    while ((e = egpu_map_next(c->pods, &pos, NULL)) != NULL) {
        out->placed += e->counted;
        out->unresolved += e->unresolved;
        out->waiting += e->waiting;
        for (uint32_t i = 0; e->inside != NULL && i < e->pod.req.ncontainers; i++)
            out->inside += e->inside[i] != NULL;
    }
    pos = 0;
    while ((ce = egpu_map_next(c->claims, &pos, NULL)) != NULL)
        out->claims += ce->known;
    out->classes = egpu_map_count(c->classes);
    egpu__sched_dra_stats_locked(c, out);
}

#define SYNC_WARN_PODS 20 /* pods named one by one at the sync; the rest are counted */

void egpu_sched_cache_synced(struct egpu_sched_cache *c)
{
    struct egpu__sched_pod_entry *e;
    size_t pos = 0, n = 0;

    pthread_mutex_lock(&c->lock);
    if (c->synced) {
        pthread_mutex_unlock(&c->lock);
        return;
    }
    c->synced = true;
    while ((e = egpu_map_next(c->pods, &pos, NULL)) != NULL) {
        const char *node = egpu__sched_target_of(&e->pod);

        if (!e->unresolved)
            continue;
        if (n++ < SYNC_WARN_PODS)
            egpu_log(EGPU_LOG_WARN, "counting pod without its cards pod=%s node=%s reason=\"%s\"",
                     e->key, node != NULL ? node : "", unresolved_why(e));
        e->warned = true;
    }
    if (n > 0)
        egpu_log(EGPU_LOG_WARN,
                 "cache synced with pods counted without their cards pods=%zu unresolved=%zu "
                 "named=%zu (egpu_scheduler_cache_unresolved_pods)",
                 egpu_map_count(c->pods), n, n < SYNC_WARN_PODS ? n : (size_t)SYNC_WARN_PODS);
    else
        egpu_log(EGPU_LOG_INFO, "cache synced pods=%zu unresolved=0", egpu_map_count(c->pods));
    pthread_mutex_unlock(&c->lock);
}

size_t egpu_sched_cache_pods_locked(const struct egpu_sched_cache *c)
{
    return egpu_map_count(c->pods);
}

void egpu_sched_cache_stats(struct egpu_sched_cache *c, struct egpu_sched_cache_stats *out)
{
    pthread_mutex_lock(&c->lock);
    egpu_sched_cache_stats_locked(c, out);
    pthread_mutex_unlock(&c->lock);
}

int egpu_sched_cache_workload_locked(struct egpu_sched_cache *c, struct egpu_workload *out)
{
    size_t ndra = egpu__sched_dra_count_locked(c), pos = 0;
    struct egpu_pod_request *asks = NULL;
    const struct egpu__sched_pod_entry *e;
    struct egpu_workload_tally t;
    int rc = 0;

    /* Counted in place: a copy of every request was 100 MB at 450,000 pods,
     * made every WORKLOAD_REFRESH_PODS pods. */
    egpu_workload_tally_init(&t);
    while (rc == 0 && (e = egpu_map_next(c->pods, &pos, NULL)) != NULL) {
        if (!e->pod.dra)
            rc = egpu_workload_tally_add(&t, &e->pod.req);
    }
    /* A DRA pod asks no gpu-core: its GPUs are its claims' asks, added
     * after the pods (without the pod's CPU), not a GPU-less pod. */
    if (rc == 0 && ndra > 0) {
        size_t n;

        if ((asks = egpu_malloc(ndra * sizeof(*asks))) == NULL)
            rc = -ENOMEM;
        n = rc == 0 ? egpu__sched_dra_asks_locked(c, asks, ndra) : 0;
        for (size_t i = 0; rc == 0 && i < n; i++)
            rc = egpu_workload_tally_add(&t, &asks[i]);
    }
    if (rc == 0)
        rc = egpu_workload_tally_finish(&t, 0.95, out);
    egpu_free(asks);
    egpu_workload_tally_free(&t);
    return rc;
}

int egpu_sched_cache_shapes_locked(struct egpu_sched_cache *c, struct egpu_shape_tally *t)
{
    const struct egpu__sched_pod_entry *e;
    size_t pos = 0;
    int rc = 0;

    while (rc == 0 && (e = egpu_map_next(c->pods, &pos, NULL)) != NULL) {
        const struct egpu_sched_pod *p = &e->pod;

        if (p->req.ncontainers == 1 && !p->dra && p->nclaims == 0 && p->claims_error == NULL &&
            p->gpu_model[0] == '\0' && !p->has_node_policy && !p->has_card_policy && !p->terminal &&
            !p->deleting)
            rc = egpu_shape_tally_add(t, &p->req);
    }
    return rc;
}
