/* scheduler/dra.c - DRA mode: the ResourceClaims that give DRA pods their
 * GPUs, held in the cache, and what a DRA pod asks.
 *
 * In DRA mode (issue 26; docs/scheduler.md "DRA pods") kube-scheduler's
 * allocator picks a DRA pod's cards from the agents' ResourceSlices and
 * writes them into the pod's ResourceClaims (status.allocation, at PreBind);
 * the extender scores the nodes (prioritize, the node policy) against the
 * cards' use, which must include what those claims hold. So each cached
 * claim keeps:
 *   - its ask, read from its spec (a tenant's text: it only steers scores)
 *     with the shared egpu_api_dra_spec_usage, one request at a time, as
 *     container requests of the placement core: a share (cores percent and
 *     memory MiB) or k whole cards;
 *   - once allocated, its results of driver EGPU_API_DRA_DRIVER, decoded by
 *     the shared egpu_api_dra_results (written by kube-scheduler, status
 *     subresource; every field checked, a bad one refuses the claim): one
 *     node (the pool), cards "gpu-<index>" and consumedCapacity.
 * An allocated claim is an assignment in the core under "resourceclaim:" +
 * "namespace/name", with one container per shared result (its cores and
 * memory; memory not named: the slice's default, the whole card's) and one
 * for its whole cards, and no CPU or memory of the node; the pod's own CPU
 * and memory count as any pod's (cache.c), and a DRA pod asks no gpu-core,
 * so nothing is counted twice.
 *
 * Events come in any order: a claim naming a node or a card the cache does
 * not know yet waits and is applied when the node is rebuilt with it
 * (cache.c's rebuild calls egpu__sched_dra_node_down and _up); claims that
 * did not fit are tried again whenever capacity on their node is freed.
 * A node's rebuild applies the claims it held before first, then the pods
 * and ElasticGPUs, then the rest, so a rebuild never moves capacity.
 *
 * Units: cores in percent of one card (milli-GPU in the core), memory MiB.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "egpu/api.h"
#include "egpu/kube.h"
#include "egpu/log.h"
#include "egpu/scheduler.h"
#include "cache_int.h"
#include "dra_int.h"

/* The core's key of an allocated claim: the prefix and "namespace/name".
 * Pod keys are "namespace/name" and a namespace has no ':', so the two
 * never meet (nor "elasticgpu:" + an ElasticGPU's name, which has no '/'). */
#define RC_PREFIX     "resourceclaim:"
#define RC_PREFIX_LEN (sizeof(RC_PREFIX) - 1)
#define RC_KEY_MAX    (EGPU_NAMESPACE_MAX + EGPU_K8S_NAME_MAX)

#define STR_(x) #x
#define STR(x)  STR_(x)

/* One result of ours, as the core holds it. */
struct dra_held {
    uint32_t index;      /* the card's NVML index ("gpu-<index>") */
    uint32_t core_milli; /* EGPU_GPU_MILLI: the whole card */
    bool has_mem;        /* consumedCapacity named memory */
    uint32_t mem_mib;    /* its memory, MiB (has_mem) */
};

struct dra_node;

struct dra_claim {
    char key[RC_PREFIX_LEN + RC_KEY_MAX]; /* RC_PREFIX + "namespace/name": the core's key */
    const char *name;                     /* key + RC_PREFIX_LEN: the map's key */
    uint64_t seq;                         /* arrival order: older ones are applied first */
    uint64_t rv;                          /* resourceVersion applied (0: not a number) */
    uint64_t read_rv;                     /* bind read this version; older events are stale */
    /* what its spec asks (a tenant's: scoring only) */
    uint32_t nask;
    struct egpu_container_request ask[EGPU_CONTAINERS_MAX];
    bool ask_whole_mem[EGPU_CONTAINERS_MAX]; /* a share naming no memory: its card's whole */
    char ask_error[EGPU_ERRMSG_MAX];         /* why the spec cannot be read, or "" */
    /* what its status holds (kube-scheduler's) */
    bool allocated;               /* status.allocation is set */
    char node[EGPU_K8S_NAME_MAX]; /* the pool of its results of ours; "" when none */
    uint32_t nheld;
    struct dra_held held[EGPU_API_DRA_RESULTS_MAX];
    enum egpu_sched_resv_state state, reported; /* now, and as last logged */
    bool was_applied;                           /* held before its node's rebuild */
    char why[EGPU_ERRMSG_MAX];                  /* why it is not applied */
    struct dra_node *home;                      /* node_of(node), or NULL */
    struct dra_claim *next;                     /* home->claims, by seq */
};

struct dra_node {
    char name[EGPU_K8S_NAME_MAX];
    struct dra_claim *claims; /* the claims allocated there, oldest first */
};

struct egpu__sched_dra {
    struct egpu_map *claims; /* "namespace/name" -> struct dra_claim */
    struct egpu_map *nodes;  /* node name -> struct dra_node */
    uint64_t seq;            /* last dra_claim.seq handed out */
    uint64_t overfills;      /* times a claim was found not to fit */
};

void egpu__sched_dra_free(struct egpu__sched_dra *d)
{
    size_t pos = 0;
    void *v;

    if (d == NULL)
        return;
    while ((v = egpu_map_next(d->claims, &pos, NULL)) != NULL)
        egpu_free(v);
    pos = 0;
    while ((v = egpu_map_next(d->nodes, &pos, NULL)) != NULL)
        egpu_free(v);
    egpu_map_free(d->claims);
    egpu_map_free(d->nodes);
    egpu_free(d);
}

/* c's DRA part, made on first use; NULL when out of memory (create) or not
 * made yet. */
static struct egpu__sched_dra *dra_of(struct egpu_sched_cache *c, bool create)
{
    struct egpu__sched_dra *d = c->dra;

    if (d != NULL || !create)
        return d;
    d = egpu_calloc(1, sizeof(*d));
    if (d == NULL)
        return NULL;
    d->claims = egpu_map_new();
    d->nodes = egpu_map_new();
    if (d->claims == NULL || d->nodes == NULL) {
        egpu__sched_dra_free(d);
        return NULL;
    }
    c->dra = d;
    return d;
}

/* ---- Holding a claim in the core ---- */

/* Record e's new state; log it when it differs from what was last logged. */
static void note(struct egpu__sched_dra *d, struct dra_claim *e, enum egpu_sched_resv_state st,
                 const char *why)
{
    e->state = st;
    snprintf(e->why, sizeof(e->why), "%s", why != NULL ? why : "");
    if (e->reported == st)
        return;
    e->reported = st;
    switch (st) {
    case EGPU_SCHED_RESV_APPLIED:
        egpu_log(EGPU_LOG_INFO, "resource claim held claim=%s node=%s devices=%u", e->name, e->node,
                 e->nheld);
        break;
    case EGPU_SCHED_RESV_OVERFILL:
        d->overfills++;
        egpu_log(EGPU_LOG_WARN,
                 "resource claim does not fit its cards, not held claim=%s node=%s reason=\"%s\" "
                 "overfills=%" PRIu64,
                 e->name, e->node, e->why, d->overfills);
        break;
    case EGPU_SCHED_RESV_WAITING:
        egpu_log(EGPU_LOG_INFO, "resource claim waits claim=%s node=%s reason=\"%s\"", e->name,
                 e->node, e->why);
        break;
    case EGPU_SCHED_RESV_OFF:
    default:
        egpu_log(EGPU_LOG_DEBUG, "resource claim holds nothing claim=%s reason=\"%s\"", e->name,
                 e->why);
        break;
    }
}

/* Hold e in the core when it is allocated on our devices and not held yet:
 * its node and every card of its results must be in the core (else it
 * waits), and the cards must have the room (else an overfill). */
static void claim_apply(struct egpu_sched_cache *c, struct dra_claim *e)
{
    struct egpu__sched_dra *d = c->dra;
    struct egpu_pod_request req = {0};
    struct egpu_pick pick = {0};
    struct egpu_error err = {0};
    uint32_t whole = UINT32_MAX; /* the container of its whole cards */
    struct egpu_node *n;
    char why[EGPU_ERRMSG_MAX];
    int rc;

    if (e->nheld == 0) {
        note(d, e, EGPU_SCHED_RESV_OFF,
             e->allocated ? "allocated on no device of driver " EGPU_API_DRA_DRIVER
                          : "not allocated");
        return;
    }
    if (e->state == EGPU_SCHED_RESV_APPLIED)
        return;
    n = egpu_cluster_node(c->cluster, e->node);
    if (n == NULL) {
        snprintf(why, sizeof(why), "node %.200s is not in the cache (no Node object yet)", e->node);
        note(d, e, EGPU_SCHED_RESV_WAITING, why);
        return;
    }
    for (uint32_t i = 0; i < e->nheld; i++) {
        const struct dra_held *h = &e->held[i];
        struct egpu_share *s = &pick.shares[pick.nshares];
        uint32_t g = 0, ci;

        while (g < n->ngpus && n->gpus[g].index != h->index)
            g++;
        if (g == n->ngpus) {
            snprintf(why, sizeof(why),
                     "card " EGPU_API_DRA_DEVICE_PREFIX "%u is not known on node %.200s (no GPU "
                     "object of that index)",
                     h->index, e->node);
            note(d, e, EGPU_SCHED_RESV_WAITING, why);
            return;
        }
        if (h->core_milli == EGPU_GPU_MILLI && whole != UINT32_MAX) {
            ci = whole;
        } else if (req.ncontainers == EGPU_CONTAINERS_MAX) {
            note(d, e, EGPU_SCHED_RESV_OFF,
                 "more than " STR(EGPU_CONTAINERS_MAX) " shares in one claim");
            return;
        } else {
            ci = req.ncontainers++;
            req.containers[ci] = (struct egpu_container_request){.core_milli = h->core_milli};
            if (h->core_milli == EGPU_GPU_MILLI)
                whole = ci;
        }
        req.containers[ci].ncards++;
        s->container = (uint16_t)ci;
        s->gpu = (uint16_t)g;
        s->core_milli = h->core_milli;
        /* consumedCapacity holds every capacity; without memory, the
         * slice's default: the whole card's. */
        s->mem_mib =
            h->core_milli == EGPU_GPU_MILLI || !h->has_mem ? n->gpus[g].mem_mib : h->mem_mib;
        if (h->core_milli != EGPU_GPU_MILLI)
            req.containers[ci].mem_mib = s->mem_mib;
        pick.nshares++;
    }
    rc = egpu_cluster_assign(c->cluster, e->key, n, &req, &pick, &err);
    if (rc == 0)
        note(d, e, EGPU_SCHED_RESV_APPLIED, NULL);
    else
        note(d, e, rc == -EINVAL ? EGPU_SCHED_RESV_OVERFILL : EGPU_SCHED_RESV_WAITING, err.msg);
}

/* Give back what e holds in the core (its state becomes waiting). */
static void claim_release(struct egpu_sched_cache *c, struct dra_claim *e)
{
    if (e->state != EGPU_SCHED_RESV_APPLIED)
        return;
    if (egpu_cluster_release(c->cluster, e->key, NULL) != 0)
        egpu_log(EGPU_LOG_ERROR, "bug: held resource claim held nothing claim=%s", e->name);
    e->state = EGPU_SCHED_RESV_WAITING;
}

static struct dra_node *node_of(struct egpu__sched_dra *d, const char *name, bool create)
{
    struct dra_node *dn = egpu_map_get(d->nodes, name);

    if (dn != NULL || !create)
        return dn;
    if (strlen(name) >= sizeof(dn->name) || (dn = egpu_calloc(1, sizeof(*dn))) == NULL)
        return NULL;
    memcpy(dn->name, name, strlen(name) + 1);
    if (egpu_map_put(d->nodes, dn->name, dn) != 0) {
        egpu_free(dn);
        return NULL;
    }
    return dn;
}

/* Link e into its node's list, by seq. Returns 0 or -ENOMEM. */
static int claim_link(struct egpu__sched_dra *d, struct dra_claim *e)
{
    struct dra_claim **at;

    if (e->node[0] == '\0')
        return 0;
    e->home = node_of(d, e->node, true);
    if (e->home == NULL)
        return -ENOMEM;
    for (at = &e->home->claims; *at != NULL && (*at)->seq < e->seq; at = &(*at)->next)
        ;
    e->next = *at;
    *at = e;
    return 0;
}

static void claim_unlink(struct egpu__sched_dra *d, struct dra_claim *e)
{
    struct dra_claim **at;
    struct dra_node *dn = e->home;

    if (dn == NULL)
        return;
    for (at = &dn->claims; *at != NULL && *at != e; at = &(*at)->next)
        ;
    if (*at == e)
        *at = e->next;
    e->next = NULL;
    e->home = NULL;
    if (dn->claims == NULL) {
        (void)egpu_map_del(d->nodes, dn->name); /* present: dn came from the map */
        egpu_free(dn);
    }
}

void egpu__sched_dra_node_down(struct egpu_sched_cache *c, const char *node)
{
    struct dra_node *dn = c->dra != NULL ? node_of(c->dra, node, false) : NULL;

    for (struct dra_claim *e = dn != NULL ? dn->claims : NULL; e != NULL; e = e->next) {
        e->was_applied = e->state == EGPU_SCHED_RESV_APPLIED;
        if (e->was_applied)
            e->state = EGPU_SCHED_RESV_WAITING; /* the node's removal releases it */
    }
}

void egpu__sched_dra_node_up(struct egpu_sched_cache *c, const char *node, bool held_before)
{
    struct dra_node *dn = c->dra != NULL && node != NULL ? node_of(c->dra, node, false) : NULL;

    for (struct dra_claim *e = dn != NULL ? dn->claims : NULL; e != NULL; e = e->next) {
        if (!held_before || e->was_applied)
            claim_apply(c, e);
    }
}

/* Capacity on node was freed: the claims and ElasticGPUs there that did not
 * fit try again. */
static void retry(struct egpu_sched_cache *c, const char *node)
{
    if (node[0] != '\0')
        egpu__sched_resv_retry(c, node); /* which calls egpu__sched_dra_node_up too */
}

/* ---- Decoding a claim ---- */

/* metadata.resourceVersion as a number (etcd's revision), 0 when it is not
 * one: then it is never compared. */
static uint64_t rv_of(const json_t *meta)
{
    const char *s = egpu_kube_str(json_object_get(meta, "resourceVersion"));
    char *end;
    unsigned long long v;

    if (s == NULL || s[0] < '0' || s[0] > '9')
        return 0;
    errno = 0;
    v = strtoull(s, &end, 10);
    return errno == 0 && *end == '\0' ? (uint64_t)v : 0;
}

/* The container requests of one device request's usage u (a share of one
 * card per device, or its whole cards) appended to e's ask. */
static int ask_of(struct dra_claim *e, const struct egpu_api_dra_usage *u, const char *path,
                  struct egpu_error *err)
{
    int64_t each = u->devices > 0 ? u->cores / u->devices : 0;
    int64_t mem = u->devices > 0 && u->mem_whole == 0 ? u->mem_mib / u->devices : 0;
    int rc;

    if (u->devices == 0)
        return 0; /* another driver's class */
    if (each >= 100) {
        if (e->nask == EGPU_CONTAINERS_MAX)
            goto too_many;
        rc = egpu_container_request_set(&e->ask[e->nask], 100 * u->devices, 0, err);
        if (rc)
            return egpu_error_prefix(err, rc, "%s: %lld whole cards", path, (long long)u->devices);
        e->ask_whole_mem[e->nask++] = false; /* whole cards come with all their memory */
        return 0;
    }
    for (int64_t k = 0; k < u->devices; k++) {
        if (e->nask == EGPU_CONTAINERS_MAX)
            goto too_many;
        /* cores 0 (memory only) is scored as the least share, 1%. */
        rc = egpu_container_request_set(&e->ask[e->nask], each > 0 ? each : 1, mem, err);
        if (rc)
            return egpu_error_prefix(err, rc, "%s", path);
        /* No memory named: the slice's default, all of the card's. */
        e->ask_whole_mem[e->nask++] = u->mem_whole > 0;
    }
    return 0;
too_many:
    return egpu_error_set(
        err, EGPU_ERANGE,
        "%s: more than " STR(
            EGPU_CONTAINERS_MAX) " devices of driver " EGPU_API_DRA_DRIVER
                                 " in one claim; allowed: up to " STR(
                                     EGPU_CONTAINERS_MAX) " (a share or whole cards each)",
        path);
}

/* e's ask from the claim's spec, one device request at a time (each is
 * judged as its own container request), with the shared
 * egpu_api_dra_spec_usage on a spec holding that request alone. Once per
 * claim event, never on a verb. */
static int spec_ask(const json_t *spec, struct dra_claim *e, struct egpu_error *err)
{
    const json_t *reqs = json_object_get(json_object_get(spec, "devices"), "requests"), *r;
    struct egpu_api_dra_usage u;
    size_t i;
    int rc;

    e->nask = 0;
    /* The whole spec first: its checks name the field as it stands. */
    rc = egpu_api_dra_spec_usage(spec, "spec", &u, err);
    if (rc)
        return rc;
    json_array_foreach(reqs, i, r)
    {
        json_t *one = json_pack("{s:{s:[O]}}", "devices", "requests", r);
        char path[64];

        if (one == NULL)
            return egpu_error_set(err, -ENOMEM, "out of memory");
        snprintf(path, sizeof(path), "spec.devices.requests[%zu]", i);
        rc = egpu_api_dra_spec_usage(one, path, &u, err);
        json_decref(one);
        if (rc == 0)
            rc = ask_of(e, &u, path, err);
        if (rc)
            return rc;
    }
    return 0;
}

/* The fields of claim obj into *e (its name in key and name; not linked):
 * its allocation (the decoder's refusals fail it) and its ask (a refusal is
 * kept in ask_error). */
static int claim_decode(const json_t *obj, struct dra_claim *e, struct egpu_error *err)
{
    static _Thread_local struct egpu_api_dra_result res[EGPU_API_DRA_RESULTS_MAX];
    const json_t *meta = json_object_get(obj, "metadata");
    const char *ns = egpu_kube_str(json_object_get(meta, "namespace"));
    const char *name = egpu_kube_str(json_object_get(meta, "name"));
    struct egpu_error aerr = {0};
    size_t n = 0;
    int rc;

    if (ns == NULL || ns[0] == '\0' || strlen(ns) >= EGPU_NAMESPACE_MAX)
        return egpu_error_set(err, EGPU_ESYNTAX,
                              "ResourceClaim: metadata.namespace missing or "
                              "invalid");
    if (name == NULL || name[0] == '\0' || strlen(name) >= EGPU_K8S_NAME_MAX)
        return egpu_error_set(err, EGPU_ESYNTAX, "ResourceClaim: metadata.name missing or invalid");
    snprintf(e->key, sizeof(e->key), RC_PREFIX "%s/%s", ns, name);
    e->name = e->key + RC_PREFIX_LEN;
    e->rv = rv_of(meta);
    rc = egpu_api_dra_results(obj, EGPU_API_DRA_DRIVER, res, EGPU_API_DRA_RESULTS_MAX, &n, err);
    if (rc)
        return egpu_error_prefix(err, rc, "ResourceClaim %s", e->name);
    e->allocated = json_is_object(json_object_get(json_object_get(obj, "status"), "allocation"));
    e->nheld = 0;
    e->node[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        const struct egpu_api_dra_result *r = &res[i];
        struct dra_held *h = &e->held[e->nheld++];
        const char *f = "status.allocation.devices.results";

        if (i > 0 && strcmp(r->pool, e->node) != 0)
            return egpu_error_set(err, EGPU_ERANGE,
                                  "ResourceClaim %s: %s[%zu].pool is \"%.64s\" and an earlier "
                                  "result's \"%.64s\"; allowed: one node's pool (the agent "
                                  "publishes one per node)",
                                  e->name, f, r->at, r->pool, e->node);
        if (!r->has_index)
            return egpu_error_set(err, EGPU_ERANGE,
                                  "ResourceClaim %s: %s[%zu].device is \"%.64s\"; allowed: "
                                  "" EGPU_API_DRA_DEVICE_PREFIX "<index>, a device of the "
                                  "agent's ResourceSlice",
                                  e->name, f, r->at, r->device);
        memcpy(e->node, r->pool, sizeof(e->node));
        h->index = r->index;
        h->core_milli =
            r->whole || r->core_pct >= 100 ? EGPU_GPU_MILLI : (uint32_t)r->core_pct * 10;
        h->has_mem = r->has_mem;
        h->mem_mib = r->has_mem ? (uint32_t)r->mem_mib : 0;
    }
    if (spec_ask(json_object_get(obj, "spec"), e, &aerr) != 0) {
        snprintf(e->ask_error, sizeof(e->ask_error), "%s", aerr.msg);
        e->nask = 0;
    } else {
        e->ask_error[0] = '\0';
    }
    return 0;
}

/* Does e hold the same thing as f (node and results)? */
static bool same_holding(const struct dra_claim *e, const struct dra_claim *f)
{
    return e->allocated == f->allocated && strcmp(e->node, f->node) == 0 && e->nheld == f->nheld &&
           memcmp(e->held, f->held, e->nheld * sizeof(e->held[0])) == 0;
}

static int claim_set(struct egpu_sched_cache *c, const json_t *obj, bool read,
                     struct egpu_error *err)
{
    struct dra_claim *f = egpu_calloc(1, sizeof(*f)), *e;
    struct egpu__sched_dra *d;
    char was[EGPU_K8S_NAME_MAX];
    bool created = false;
    int rc;

    if (f == NULL)
        return egpu_error_set(err, -ENOMEM, "ResourceClaim: out of memory");
    rc = claim_decode(obj, f, err);
    if (rc) {
        egpu_free(f);
        return rc;
    }
    pthread_mutex_lock(&c->lock);
    d = dra_of(c, true);
    if (d == NULL) {
        rc = egpu_error_set(err, -ENOMEM, "ResourceClaim %s: out of memory", f->name);
        goto out;
    }
    e = egpu_map_get(d->claims, f->name);
    /* A read of a claim the cache does not hold is passed over: filter
     * judged the pod with its claims in the cache, so this one was deleted
     * since (its delete event came before the read could be applied). */
    if (e == NULL && read) {
        egpu_log(EGPU_LOG_DEBUG, "resource claim read but gone from the cache claim=%s", f->name);
        goto out;
    }
    /* An event older than what bind read lags behind it; a read older than
     * what the cache holds is the same. */
    if (e != NULL && f->rv != 0 &&
        ((!read && e->read_rv != 0 && f->rv < e->read_rv) ||
         (read && e->rv != 0 && f->rv <= e->rv))) {
        egpu_log(EGPU_LOG_DEBUG,
                 "resource claim version older than the one held claim=%s rv=%" PRIu64, f->name,
                 f->rv);
        goto out;
    }
    if (e == NULL) {
        e = f;
        f = NULL;
        e->seq = ++d->seq;
        if (egpu_map_put(d->claims, e->name, e) != 0) {
            rc = egpu_error_set(err, -ENOMEM, "ResourceClaim %s: out of memory", e->name);
            egpu_free(e);
            goto out;
        }
        created = true;
    }
    if (!created) {
        bool same = same_holding(e, f);

        e->rv = f->rv;
        e->nask = f->nask;
        memcpy(e->ask, f->ask, sizeof(e->ask));
        memcpy(e->ask_whole_mem, f->ask_whole_mem, sizeof(e->ask_whole_mem));
        memcpy(e->ask_error, f->ask_error, sizeof(e->ask_error));
        if (!same) {
            snprintf(was, sizeof(was), "%s", e->state == EGPU_SCHED_RESV_APPLIED ? e->node : "");
            claim_release(c, e);
            claim_unlink(d, e);
            e->allocated = f->allocated;
            memcpy(e->node, f->node, sizeof(e->node));
            e->nheld = f->nheld;
            memcpy(e->held, f->held, sizeof(e->held));
        } else {
            was[0] = '\0';
        }
        e->read_rv = read ? e->rv : 0;
        if (same)
            goto out;
    } else {
        was[0] = '\0';
        e->read_rv = read ? e->rv : 0;
    }
    if (claim_link(d, e) != 0) {
        egpu_log(EGPU_LOG_ERROR, "out of memory: resource claim not held claim=%s", e->name);
        note(d, e, EGPU_SCHED_RESV_WAITING, "out of memory");
    } else {
        claim_apply(c, e);
    }
    retry(c, was);
out:
    pthread_mutex_unlock(&c->lock);
    egpu_free(f);
    return rc;
}

int egpu_sched_cache_dra_claim_set(struct egpu_sched_cache *c, const json_t *claim,
                                   struct egpu_error *err)
{
    return claim_set(c, claim, false, err);
}

int egpu_sched_cache_dra_claim_read(struct egpu_sched_cache *c, const json_t *claim,
                                    struct egpu_error *err)
{
    return claim_set(c, claim, true, err);
}

int egpu_sched_cache_dra_claim_delete(struct egpu_sched_cache *c, const char *ns, const char *name)
{
    char key[2 * EGPU_K8S_NAME_MAX + 2], was[EGPU_K8S_NAME_MAX];
    struct egpu__sched_dra *d;
    struct dra_claim *e;

    snprintf(key, sizeof(key), "%s/%s", ns, name);
    pthread_mutex_lock(&c->lock);
    d = dra_of(c, false);
    e = d != NULL ? egpu_map_get(d->claims, key) : NULL;
    if (e != NULL) {
        snprintf(was, sizeof(was), "%s", e->state == EGPU_SCHED_RESV_APPLIED ? e->node : "");
        claim_release(c, e);
        claim_unlink(d, e);
        (void)egpu_map_del(d->claims, e->name); /* present: just found */
        egpu_log(EGPU_LOG_DEBUG, "resource claim gone claim=%s", key);
        egpu_free(e);
        retry(c, was);
    }
    pthread_mutex_unlock(&c->lock);
    return 0;
}

size_t egpu__sched_dra_count_locked(struct egpu_sched_cache *c)
{
    return c->dra != NULL ? egpu_map_count(c->dra->claims) : 0;
}

size_t egpu__sched_dra_asks_locked(struct egpu_sched_cache *c, struct egpu_pod_request *out,
                                   size_t max)
{
    const struct dra_claim *e;
    size_t pos = 0, n = 0;

    while (c->dra != NULL && n < max && (e = egpu_map_next(c->dra->claims, &pos, NULL)) != NULL) {
        if (e->nask == 0)
            continue;
        memset(&out[n], 0, sizeof(out[n]));
        out[n].ncontainers = e->nask;
        memcpy(out[n].containers, e->ask, e->nask * sizeof(e->ask[0]));
        n++;
    }
    return n;
}

void egpu__sched_dra_stats_locked(struct egpu_sched_cache *c, struct egpu_sched_cache_stats *out)
{
    const struct dra_claim *e;
    size_t pos = 0;

    if (c->dra == NULL)
        return;
    out->dra_overfills = c->dra->overfills;
    while ((e = egpu_map_next(c->dra->claims, &pos, NULL)) != NULL) {
        const struct egpu_assignment *a;

        out->dra_claims[e->state]++;
        if (e->state != EGPU_SCHED_RESV_APPLIED ||
            (a = egpu_cluster_assignment(c->cluster, e->key)) == NULL)
            continue;
        for (uint32_t i = 0; i < a->nshares; i++) {
            out->dra_core_milli += a->shares[i].core_milli;
            out->dra_mem_mib += a->shares[i].mem_mib;
        }
    }
}

/* ---- What a DRA pod asks ---- */

/* A name field of the pod (borrowed; NULL when absent, not a string or
 * with a NUL), and whether it fits EGPU_K8S_NAME_MAX. */
static const char *name_at(const json_t *o, const char *key)
{
    const char *s = egpu_kube_str(json_object_get(o, key));

    return s != NULL && s[0] != '\0' ? s : NULL;
}

static int ref_add(struct egpu__sched_dra_refs *out, const char *name, const char *field,
                   struct egpu_error *err)
{
    if (strlen(name) >= EGPU_K8S_NAME_MAX)
        return egpu_error_set(err, EGPU_ERANGE, "%s: longer than %d characters", field,
                              EGPU_K8S_NAME_MAX - 1);
    if (out->n == EGPU__SCHED_DRA_REFS_MAX)
        return egpu_error_set(err, EGPU_ERANGE, "%s: more than %d claims", field,
                              EGPU__SCHED_DRA_REFS_MAX);
    memcpy(out->names[out->n++], name, strlen(name) + 1);
    return 0;
}

int egpu__sched_dra_refs(const json_t *pod, struct egpu__sched_dra_refs *out,
                         struct egpu_error *err)
{
    const json_t *list = json_object_get(json_object_get(pod, "spec"), "resourceClaims");
    const json_t *st = json_object_get(pod, "status");
    const json_t *sts = json_object_get(st, "resourceClaimStatuses"), *ent;
    const char *ext =
        name_at(json_object_get(st, "extendedResourceClaimStatus"), "resourceClaimName");
    struct egpu__sched_dra_refs *r = egpu_calloc(1, sizeof(*r));
    size_t i;
    int rc = 0;

    if (r == NULL)
        return egpu_error_set(err, -ENOMEM, "pod: out of memory");
    if (list != NULL && !json_is_null(list) && !json_is_array(list))
        rc = egpu_error_set(err, EGPU_ESYNTAX, "spec.resourceClaims: must be a list");
    json_array_foreach(list, i, ent)
    {
        const char *entry = name_at(ent, "name"), *claim = name_at(ent, "resourceClaimName");
        const char *tmpl = name_at(ent, "resourceClaimTemplateName");
        char field[96];
        const json_t *s;
        size_t j;

        if (rc)
            break;
        snprintf(field, sizeof(field), "spec.resourceClaims[%zu]", i);
        if (entry == NULL) {
            rc = egpu_error_set(err, EGPU_ESYNTAX, "%s.name: missing or not a string", field);
        } else if (claim != NULL) {
            rc = ref_add(r, claim, field, err);
        } else if (tmpl == NULL) {
            rc = egpu_error_set(err, EGPU_ESYNTAX,
                                "%s: neither resourceClaimName nor resourceClaimTemplateName",
                                field);
        } else {
            /* The claim kube-controller-manager made from the template. */
            bool found = false;

            json_array_foreach(sts, j, s)
            {
                const char *sname = name_at(s, "name");

                if (sname == NULL || strcmp(sname, entry) != 0)
                    continue;
                found = true;
                claim = name_at(s, "resourceClaimName");
                if (claim != NULL) /* none: no claim is needed */
                    rc = ref_add(r, claim, "status.resourceClaimStatuses[].resourceClaimName", err);
                break;
            }
            if (!found)
                rc = egpu_error_set(err, -EAGAIN,
                                    "%s (%.63s): the claim from template %.200s is not made yet "
                                    "(no status.resourceClaimStatuses entry names it)",
                                    field, entry, tmpl);
        }
    }
    if (rc == 0 && ext != NULL)
        rc = ref_add(r, ext, "status.extendedResourceClaimStatus.resourceClaimName", err);
    if (rc == 0)
        *out = *r;
    egpu_free(r);
    return rc;
}

int egpu__sched_dra_request_locked(struct egpu_sched_cache *c, const struct egpu_sched_pod *pod,
                                   const struct egpu__sched_dra_refs *refs,
                                   struct egpu_pod_request *req,
                                   bool whole_mem[EGPU_CONTAINERS_MAX], struct egpu_error *err)
{
    memset(req, 0, sizeof(*req));
    memset(whole_mem, 0, EGPU_CONTAINERS_MAX * sizeof(whole_mem[0]));
    req->cpu_milli = pod->req.cpu_milli;
    req->mem_mib = pod->req.mem_mib;
    for (size_t i = 0; i < refs->n; i++) {
        char key[2 * EGPU_K8S_NAME_MAX + 2];
        const struct dra_claim *e;

        snprintf(key, sizeof(key), "%s/%s", pod->ns, refs->names[i]);
        e = c->dra != NULL ? egpu_map_get(c->dra->claims, key) : NULL;
        if (e == NULL)
            return egpu_error_set(err, -EAGAIN,
                                  "ResourceClaim %.300s of pod %s/%s is not in the elastic-gpu "
                                  "cache yet (its watch event has not come; kube-scheduler "
                                  "retries the pod)",
                                  key, pod->ns, pod->name);
        if (e->allocated)
            continue; /* held on its cards already */
        if (e->ask_error[0] != '\0')
            return egpu_error_set(err, EGPU_ERANGE, "ResourceClaim %.300s: %s", key, e->ask_error);
        if (req->ncontainers + e->nask > EGPU_CONTAINERS_MAX)
            return egpu_error_set(
                err, EGPU_ERANGE,
                "pod %s/%s: its claims ask more than " STR(
                    EGPU_CONTAINERS_MAX) " devices of driver " EGPU_API_DRA_DRIVER
                                         "; allowed: up to " STR(EGPU_CONTAINERS_MAX),
                pod->ns, pod->name);
        memcpy(&req->containers[req->ncontainers], e->ask, e->nask * sizeof(e->ask[0]));
        memcpy(&whole_mem[req->ncontainers], e->ask_whole_mem, e->nask * sizeof(whole_mem[0]));
        req->ncontainers += e->nask;
    }
    return 0;
}
