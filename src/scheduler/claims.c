/* scheduler/claims.c - the scheduler's claims: ElasticGPUs, ElasticGPUClaims
 * and ElasticGPUClasses in the cluster cache, and the judging of pods that
 * use claims for filter, prioritize and bind.
 *
 * DESIGN: the informer events of the three kinds are taken here
 * (egpu_sched_cache_egpu_set and the others, egpu/scheduler.h); what
 * counts a pod or applies a reservation stays in cache.c, which a node's
 * rebuild runs too, and is asked through cache_int.h, so the calls run one
 * way (claims.c -> cache.c). Whatever can change which ElasticGPU serves a
 * claim, or whether it is applied, first parks the claim's users
 * (egpu__sched_park_users), then changes, then settles them
 * (egpu__sched_claim_settle): no moment holds a share twice.
 *
 * A pod that uses claims is judged by its claim plan (plan_pod): where its
 * bound claims' ElasticGPUs are, which containers go inside them, which
 * WaitForFirstConsumer claims its bind provisions, and the first reason it
 * can go nowhere. The extender asks the door at the end of this file
 * (claims_int.h) with the cache lock held, and nothing else.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "egpu/api.h"
#include "egpu/log.h"
#include "egpu/scheduler.h"
#include "cache_int.h"
#include "claims_int.h"

static void resv_claim_link(struct egpu__sched_resv *r, struct egpu__sched_claim *ce)
{
    r->claim = ce;
    if (ce != NULL) {
        r->claim_next = ce->resvs;
        ce->resvs = r;
    }
}

static void resv_claim_unlink(struct egpu__sched_resv *r)
{
    struct egpu__sched_resv **at;

    if (r->claim == NULL)
        return;
    for (at = &r->claim->resvs; *at != NULL && *at != r; at = &(*at)->claim_next)
        ;
    if (*at == r)
        *at = r->claim_next;
    r->claim_next = NULL;
    r->claim = NULL;
}

/* Does r already say what e holds (same node, cards, amounts, holding,
 * claim)? */
static bool resv_same(const struct egpu__sched_resv *r, const struct egpu_api_egpu *e, bool holds,
                      const struct egpu_reservation *res)
{
    const struct egpu__sched_claim *ce = r->claim;

    if (r->holds != holds || strcmp(r->node, e->node_name) != 0 || r->ncards != res->ncards ||
        r->core_milli != res->core_milli || r->mem_mib != res->mem_mib)
        return false;
    if ((ce != NULL) != e->has_claim_ref ||
        (ce != NULL && (strcmp(ce->ns, e->claim_ns) != 0 || strcmp(ce->name, e->claim_name) != 0 ||
                        strcmp(r->claim_uid, e->claim_uid) != 0)) ||
        r->released != (e->phase == EGPU_API_EGPU_RELEASED))
        return false;
    for (uint32_t i = 0; i < r->ncards; i++) {
        if (strcmp(r->gpus[i], res->uuids[i]) != 0)
            return false;
    }
    return true;
}

int egpu_sched_cache_egpu_set(struct egpu_sched_cache *c, const json_t *obj, struct egpu_error *err)
{
    struct egpu_api_egpu *e = egpu_malloc(sizeof(*e));
    struct egpu__sched_resv *r = NULL, *old;
    struct egpu__sched_claim *ce_old = NULL, *ce_new = NULL;
    struct egpu_reservation res;
    char old_node[EGPU_K8S_NAME_MAX] = "";
    uint64_t tag_old = 0, tag_new = 0;
    bool holds;
    int rc;

    if (e == NULL)
        return egpu_error_set(err, -ENOMEM, "ElasticGPU: out of memory");
    rc = egpu_api_egpu_decode(obj, e, err);
    if (rc) {
        egpu_free(e);
        return rc;
    }
    /* Also when e has no cards yet (a decoded one always has): nothing held. */
    holds = egpu_api_egpu_reservation(e, &res);
    if (!holds)
        res.ncards = e->ngpus, res.core_milli = 0, res.mem_mib = 0;
    for (uint32_t i = 0; i < e->ngpus; i++)
        res.uuids[i] = e->gpu_names[i];
    pthread_mutex_lock(&c->lock);
    old = egpu_map_get(c->resvs, e->meta.name);
    if (old != NULL && resv_same(old, e, holds, &res))
        goto out; /* a status change that holds the same: nothing moves */
    if (e->has_claim_ref) {
        ce_new = egpu__sched_claim_get(c, e->claim_ns, e->claim_name, true);
        if (ce_new == NULL) {
            rc = egpu_error_set(err, -ENOMEM, "ElasticGPU %s: out of memory", e->meta.name);
            goto out;
        }
    }
    r = egpu_calloc(1, sizeof(*r) + (size_t)e->ngpus * sizeof(r->gpus[0]));
    if (r == NULL) {
        egpu__sched_claim_drop_if_unused(c, ce_new);
        rc = egpu_error_set(err, -ENOMEM, "ElasticGPU %s: out of memory", e->meta.name);
        goto out;
    }
    snprintf(r->key, sizeof(r->key), RESV_PREFIX "%s", e->meta.name);
    r->name = r->key + RESV_PREFIX_LEN;
    memcpy(r->node, e->node_name, sizeof(r->node));
    r->holds = holds;
    r->core_milli = res.core_milli;
    r->mem_mib = res.mem_mib;
    r->ncards = e->ngpus;
    for (uint32_t i = 0; i < e->ngpus; i++)
        memcpy(r->gpus[i], e->gpu_names[i], sizeof(r->gpus[i]));
    r->seq = old != NULL ? old->seq : ++c->resv_seq;
    r->reported = old != NULL ? old->reported : RESV_OFF;
    r->state = RESV_WAITING;
    r->released = e->phase == EGPU_API_EGPU_RELEASED;
    snprintf(r->claim_uid, sizeof(r->claim_uid), "%s", e->claim_uid);
    /* The pods of its claims give back what they hold, and are counted
     * again once it is in place: inside it or beside it, never both. */
    tag_new = egpu__sched_park_users(c, ce_new, NULL);
    if (old != NULL) {
        /* Changed: give back what it held, then hold what it says now. */
        ce_old = old->claim != ce_new ? old->claim : NULL;
        tag_old = egpu__sched_park_users(c, ce_old, NULL);
        memcpy(old_node, old->node, sizeof(old_node));
        egpu__sched_resv_release(c, old);
        egpu__sched_resv_unlink(c, old);
        resv_claim_unlink(old);
        (void)egpu_map_del(c->resvs, old->name); /* present: just found */
        egpu_free(old);
    }
    rc = egpu_map_put(c->resvs, r->name, r);
    if (rc == 0 && egpu__sched_resv_link(c, r) != 0) {
        (void)egpu_map_del(c->resvs, r->name);
        rc = -ENOMEM;
    }
    if (rc) {
        egpu_free(r);
        rc = egpu_error_set(err, -ENOMEM, "ElasticGPU %s: out of memory", e->meta.name);
    } else {
        resv_claim_link(r, ce_new);
        if (old == NULL && !holds)
            r->reported = RESV_OFF; /* a new Failed one: nothing to say */
        egpu__sched_resv_apply(c, r);
    }
    egpu__sched_claim_settle(c, ce_new, tag_new);
    egpu__sched_claim_settle(c, ce_old, tag_old);
    if (old_node[0] != '\0')
        egpu__sched_resv_retry(c, old_node);
    egpu__sched_claim_drop_if_unused(c, ce_old);
    egpu__sched_claim_drop_if_unused(c, ce_new);
out:
    pthread_mutex_unlock(&c->lock);
    egpu_free(e);
    return rc;
}

int egpu_sched_cache_egpu_delete(struct egpu_sched_cache *c, const char *name)
{
    char node[EGPU_K8S_NAME_MAX];
    struct egpu__sched_claim *ce;
    struct egpu__sched_resv *r;
    uint64_t tag;

    pthread_mutex_lock(&c->lock);
    r = egpu_map_get(c->resvs, name);
    if (r != NULL) {
        memcpy(node, r->node, sizeof(node));
        ce = r->claim;
        tag = egpu__sched_park_users(c, ce, NULL);
        if (r->state == RESV_APPLIED)
            egpu_log(EGPU_LOG_INFO, "reservation freed elasticgpu=%s node=%s", r->name, r->node);
        egpu__sched_resv_release(c, r);
        egpu__sched_resv_unlink(c, r);
        resv_claim_unlink(r);
        (void)egpu_map_del(c->resvs, r->name); /* present: just found */
        egpu_free(r);
        egpu__sched_claim_settle(c, ce, tag);
        egpu__sched_resv_retry(c, node);
        egpu__sched_claim_drop_if_unused(c, ce);
    }
    pthread_mutex_unlock(&c->lock);
    return 0;
}

/* ---- ElasticGPUClaims and ElasticGPUClasses ---- */

int egpu_sched_cache_claim_set(struct egpu_sched_cache *c, const json_t *obj,
                               struct egpu_error *err)
{
    struct egpu_api_claim *cl = egpu_malloc(sizeof(*cl));
    struct egpu__sched_claim *ce;
    uint64_t tag;
    int rc;

    if (cl == NULL)
        return egpu_error_set(err, -ENOMEM, "ElasticGPUClaim: out of memory");
    rc = egpu_api_claim_decode(obj, cl, err);
    if (rc) {
        egpu_free(cl);
        return rc;
    }
    pthread_mutex_lock(&c->lock);
    ce = egpu__sched_claim_get(c, cl->meta.ns, cl->meta.name, true);
    if (ce == NULL) {
        rc = egpu_error_set(err, -ENOMEM, "ElasticGPUClaim %s/%s: out of memory", cl->meta.ns,
                            cl->meta.name);
    } else if (!ce->known || strcmp(ce->uid, cl->meta.uid) != 0 ||
               strcmp(ce->class_name, cl->class_name) != 0 || ce->phase != cl->phase ||
               strcmp(ce->bound_egpu, cl->bound_egpu) != 0) {
        /* Which ElasticGPU serves it may change: its users are counted again. */
        tag = egpu__sched_park_users(c, ce, NULL);
        ce->known = true;
        memcpy(ce->uid, cl->meta.uid, sizeof(ce->uid));
        memcpy(ce->class_name, cl->class_name, sizeof(ce->class_name));
        ce->phase = cl->phase;
        memcpy(ce->bound_egpu, cl->bound_egpu, sizeof(ce->bound_egpu));
        egpu__sched_claim_settle(c, ce, tag);
    }
    pthread_mutex_unlock(&c->lock);
    egpu_free(cl);
    return rc;
}

int egpu_sched_cache_claim_delete(struct egpu_sched_cache *c, const char *ns, const char *name)
{
    struct egpu__sched_claim *ce;
    uint64_t tag;

    pthread_mutex_lock(&c->lock);
    ce = egpu__sched_claim_get(c, ns, name, false);
    if (ce != NULL && ce->known) {
        tag = egpu__sched_park_users(c, ce, NULL);
        ce->known = false;
        ce->uid[0] = ce->class_name[0] = ce->bound_egpu[0] = '\0';
        ce->phase = EGPU_API_CLAIM_PENDING;
        egpu__sched_claim_settle(c, ce, tag);
        egpu__sched_claim_drop_if_unused(c, ce);
    }
    pthread_mutex_unlock(&c->lock);
    return 0;
}

int egpu_sched_cache_class_set(struct egpu_sched_cache *c, const json_t *obj,
                               struct egpu_error *err)
{
    struct egpu_api_class *k = egpu_malloc(sizeof(*k)), *old;
    int rc;

    if (k == NULL)
        return egpu_error_set(err, -ENOMEM, "ElasticGPUClass: out of memory");
    rc = egpu_api_class_decode(obj, k, err);
    if (rc) {
        egpu_free(k);
        return rc;
    }
    pthread_mutex_lock(&c->lock);
    old = egpu_map_get(c->classes, k->meta.name);
    if (old != NULL) {
        (void)egpu_map_del(c->classes, old->meta.name); /* present: just found */
        egpu_free(old);
    }
    if (egpu_map_put(c->classes, k->meta.name, k) != 0) {
        egpu_free(k);
        rc = egpu_error_set(err, -ENOMEM, "ElasticGPUClass: out of memory");
    }
    pthread_mutex_unlock(&c->lock);
    return rc;
}

int egpu_sched_cache_class_delete(struct egpu_sched_cache *c, const char *name)
{
    struct egpu_api_class *k;

    pthread_mutex_lock(&c->lock);
    k = egpu_map_get(c->classes, name);
    if (k != NULL) {
        (void)egpu_map_del(c->classes, k->meta.name); /* present: just found */
        egpu_free(k);
    }
    pthread_mutex_unlock(&c->lock);
    return 0;
}

/* The class of a claim: the one it names, else the default (the first by
 * name of those annotated default, as egpu-controller picks it). NULL with
 * why written when there is none. */
static const struct egpu_api_class *
class_of(struct egpu_sched_cache *c, const struct egpu__sched_claim *ce, char *why, size_t len)
{
    const struct egpu_api_class *k, *best = NULL;
    char missing[EGPU_ERRMSG_MAX];
    size_t pos = 0;

    while ((k = egpu_map_next(c->classes, &pos, NULL)) != NULL) {
        if (egpu_api_class_serves(k, ce->class_name, best))
            best = k;
    }
    if (best == NULL)
        snprintf(why, len, "claim %s: %s", ce->name,
                 egpu_api_class_missing(ce->class_name, missing, sizeof(missing)));
    return best;
}

/* Plan one claimed container (pod container ci, claim pc) into plan. */
static void plan_claim(struct egpu_sched_cache *c, const struct egpu_sched_pod *pod,
                       const struct egpu_api_pod_claim *pc, struct egpu_sched_claim_plan *plan,
                       bool *in)
{
    struct egpu__sched_claim *ce = egpu__sched_claim_get(c, pod->ns, pc->claim, false);
    uint32_t ci = egpu__sched_container_of(pod, pc->container);
    const struct egpu_container_request *cr;
    const struct egpu_api_class *cls;
    struct egpu__sched_resv *r;
    char *why = plan->error;
    size_t len = sizeof(plan->error);

    if (ci == UINT32_MAX) {
        snprintf(why, len,
                 "container %s uses claim %s (annotation " EGPU_ANN_CLAIM_PREFIX
                 "%s) but asks no " EGPU_RES_GPU_CORE
                 ": the webhook turns a claim into its container's requests",
                 pc->container, pc->claim, pc->container);
        return;
    }
    cr = &pod->req.containers[ci];
    for (struct egpu__sched_claim_use *u = ce != NULL ? ce->uses : NULL; u != NULL; u = u->next) {
        const struct egpu_sched_pod *q = &u->pod->pod;

        if ((strcmp(q->ns, pod->ns) != 0 || strcmp(q->name, pod->name) != 0) &&
            egpu__sched_target_of(q) != NULL) {
            snprintf(why, len,
                     "claim %s is in use by pod %s/%s on node %s; a claim serves one running "
                     "pod at a time",
                     pc->claim, q->ns, q->name, egpu__sched_target_of(q));
            return;
        }
    }
    r = egpu__sched_claim_resv(ce);
    if (r != NULL) {
        if (r->state != RESV_APPLIED) {
            snprintf(why, len,
                     "claim %s: its ElasticGPU %s on node %s holds nothing yet (%s): %.300s",
                     pc->claim, r->name, r->node, egpu_sched_resv_state_name(r->state), r->why);
            return;
        }
        if (!egpu__sched_fits_inside(r, cr)) {
            snprintf(why, len,
                     "container %s asks %u milli-GPU x %u card(s) and %u MiB, more than its "
                     "claim %s's ElasticGPU %s holds (%u milli-GPU x %u card(s), %u MiB)",
                     pc->container, cr->core_milli, cr->ncards, cr->mem_mib, pc->claim, r->name,
                     r->core_milli, r->ncards, r->mem_mib);
            return;
        }
        if (plan->node[0] != '\0' && strcmp(plan->node, r->node) != 0) {
            snprintf(why, len,
                     "the pod's claims are bound to ElasticGPUs on different nodes (%s and "
                     "claim %s's %s on %s)",
                     plan->node, pc->claim, r->name, r->node);
            return;
        }
        if (plan->node[0] == '\0') {
            snprintf(plan->node, sizeof(plan->node), "%s", r->node);
            snprintf(plan->node_why, sizeof(plan->node_why),
                     "claim %s is bound to ElasticGPU %s on node %s", pc->claim, r->name, r->node);
        }
        plan->inside[plan->ninside].container = ci;
        snprintf(plan->inside[plan->ninside].egpu, sizeof(plan->inside[0].egpu), "%s", r->name);
        plan->ninside++;
        in[ci] = true;
        return;
    }
    if (ce == NULL || !ce->known) {
        snprintf(why, len, "claim %s/%s not found", pod->ns, pc->claim);
        return;
    }
    if (ce->bound_egpu[0] != '\0') {
        snprintf(why, len,
                 "claim %s is bound to ElasticGPU %s, which the scheduler has not seen (yet)",
                 pc->claim, ce->bound_egpu);
        return;
    }
    cls = class_of(c, ce, why, len);
    if (cls == NULL)
        return;
    if (cls->binding_mode != EGPU_API_BINDING_WAIT_FOR_FIRST_CONSUMER) {
        snprintf(why, len, "claim %s is not bound yet (class %s, bindingMode Immediate)", pc->claim,
                 cls->meta.name);
        return;
    }
    if ((cls->provisioner == EGPU_API_PROVISIONER_PHYSICAL) != (cr->core_milli == EGPU_GPU_MILLI)) {
        snprintf(why, len, "container %s asks %s but claim %s's class %s provisions %s",
                 pc->container,
                 cr->core_milli == EGPU_GPU_MILLI ? "whole cards" : "a share of one card",
                 pc->claim, cls->meta.name, egpu_api_provisioner_name(cls->provisioner));
        return;
    }
    plan->wait[plan->nwait].container = ci;
    snprintf(plan->wait[plan->nwait].claim, sizeof(plan->wait[0].claim), "%s", pc->claim);
    snprintf(plan->wait[plan->nwait].class_name, sizeof(plan->wait[0].class_name), "%s",
             cls->meta.name);
    plan->nwait++;
}

/* Plan pod (a cached or filter-decoded pod) into *plan. For each claimed
 * container, in order, the first problem found goes into plan->error:
 * the container asks no gpu-core; another pod placed and not finished uses
 * the claim ("claim X is in use by pod ns/p on node n; ..."); the claim's
 * ElasticGPU is not applied (its state and reason) or is smaller than the
 * container's request; two bound claims on different nodes; the claim is
 * not found; it is bound to an ElasticGPU not seen yet; its class is not
 * found (or no default class); the class is Immediate ("claim X is not
 * bound yet ..."); the class's provisioner is not the container's kind
 * (whole cards or a share). A bound claim fixes plan->node and puts the
 * container in inside[] (and out of rest); a WaitForFirstConsumer claim
 * puts it in wait[] (placed by its own request). */
static void plan_pod(struct egpu_sched_cache *c, const struct egpu_sched_pod *pod,
                     struct egpu_sched_claim_plan *plan)
{
    bool in[EGPU_CONTAINERS_MAX] = {false};

    memset(plan, 0, offsetof(struct egpu_sched_claim_plan, inside));
    plan->rest = pod->req;
    plan->nclaims = pod->nclaims;
    if (pod->claims_error != NULL) {
        plan->nclaims = 1;
        snprintf(plan->error, sizeof(plan->error), "%s", pod->claims_error);
        return;
    }
    for (uint32_t i = 0; i < pod->nclaims && plan->error[0] == '\0'; i++)
        plan_claim(c, pod, &pod->claims[i], plan, in);
    plan->rest.ncontainers = 0;
    for (uint32_t i = 0; i < pod->req.ncontainers; i++) {
        if (!in[i]) {
            plan->rest_of[plan->rest.ncontainers] = i;
            plan->rest.containers[plan->rest.ncontainers++] = pod->req.containers[i];
        }
    }
    if (plan->error[0] != '\0')
        egpu_log(EGPU_LOG_DEBUG, "claim pod not placeable pod=%s/%s reason=\"%s\"", pod->ns,
                 pod->name, plan->error);
}

/* May a pod of plan go to node (by name)? False with why (len bytes) when
 * plan->error is set, node is not plan->node, or a WaitForFirstConsumer
 * claim's class does not allow the node (nodeSelector over its labels, or
 * models over its cards' model). */
static bool node_ok(struct egpu_sched_cache *c, const struct egpu_sched_claim_plan *plan,
                    const char *node, char *why, size_t len)
{
    const struct egpu__sched_node *ni = egpu_map_get(c->nodes, node);

    if (plan->error[0] != '\0') {
        snprintf(why, len, "%s", plan->error);
        return false;
    }
    if (plan->node[0] != '\0' && strcmp(plan->node, node) != 0) {
        snprintf(why, len, "%s", plan->node_why);
        return false;
    }
    for (uint32_t i = 0; i < plan->nwait; i++) {
        const struct egpu_api_class *k = egpu_map_get(c->classes, plan->wait[i].class_name);
        const char *model = NULL;
        char sel[256];

        for (uint32_t g = 0; ni != NULL && g < ni->ngpus && model == NULL; g++)
            model = ni->gpus[g].shadowed ? NULL : ni->gpus[g].model;
        if (k == NULL) {
            snprintf(why, len, "claim %s: ElasticGPUClass %s not found", plan->wait[i].claim,
                     plan->wait[i].class_name);
            return false;
        }
        if (k->has_node_selector &&
            !egpu_api_selector_matches_fn(&k->node_selector, egpu__sched_label,
                                          ni ? ni->labels : NULL)) {
            (void)egpu_api_selector_format(&k->node_selector, sel, sizeof(sel));
            snprintf(why, len, "claim %s: node %s is not one of class %s's nodes (nodeSelector %s)",
                     plan->wait[i].claim, node, k->meta.name, sel);
            return false;
        }
        if (k->models[0] != '\0' && (model == NULL || !egpu_api_class_allows_model(k, model))) {
            snprintf(why, len, "claim %s: node %s's cards are %s; class %s allows %s",
                     plan->wait[i].claim, node, model ? model : "none", k->meta.name, k->models);
            return false;
        }
    }
    return true;
}

/* The pod's whole pick on node: rest's shares (a pick for plan->rest) with
 * their containers mapped back, and each inside container on its
 * ElasticGPU's card(s). Returns 0, or -EINVAL when an ElasticGPU is no
 * longer applied on node (message names it). */
static int whole_pick(struct egpu_sched_cache *c, const struct egpu_sched_claim_plan *plan,
                      const struct egpu_node *node, const struct egpu_pick *rest,
                      struct egpu_pick *out, struct egpu_error *err)
{
    out->nshares = 0;
    for (uint32_t s = 0; s < rest->nshares; s++) {
        out->shares[out->nshares] = rest->shares[s];
        out->shares[out->nshares++].container = (uint16_t)plan->rest_of[rest->shares[s].container];
    }
    for (uint32_t i = 0; i < plan->ninside; i++) {
        const struct egpu__sched_resv *r = egpu_map_get(c->resvs, plan->inside[i].egpu);

        if (r == NULL || r->state != RESV_APPLIED || strcmp(r->node, node->name) != 0)
            return egpu_error_set(err, -EINVAL, "ElasticGPU %s is no longer held on node %s",
                                  plan->inside[i].egpu, node->name);
        for (uint32_t k = 0; k < r->ncards; k++) {
            const char *uuid = egpu__sched_resv_uuid(r, k);
            uint32_t g = 0;

            while (g < node->ngpus && strcmp(node->gpus[g].uuid, uuid) != 0)
                g++;
            if (g == node->ngpus || out->nshares == EGPU_PICK_SHARES_MAX)
                return egpu_error_set(err, -EINVAL, "node %s lacks ElasticGPU %s's card %s",
                                      node->name, r->name, r->gpus[k]);
            out->shares[out->nshares++] = (struct egpu_share){
                .container = (uint16_t)plan->inside[i].container,
                .gpu = (uint16_t)g,
                .core_milli = r->core_milli,
                .mem_mib = r->core_milli == EGPU_GPU_MILLI ? node->gpus[g].mem_mib : r->mem_mib};
        }
    }
    return 0;
}

/* Append the GPU object names of container's cards in pick on node to out,
 * comma-separated (EGPU_ANN_SELECTED_GPUS). Returns 0, -ENOENT (a card
 * whose GPU object the cache lacks) or egpu_buf_append's error. */
static int gpu_names(struct egpu_sched_cache *c, const struct egpu_node *node,
                     const struct egpu_pick *pick, uint32_t container, struct egpu_buf *out)
{
    const struct egpu__sched_node *ni = egpu_map_get(c->nodes, node->name);
    int rc = 0;

    for (uint32_t s = 0; s < pick->nshares && rc == 0; s++) {
        const char *uuid = node->gpus[pick->shares[s].gpu].uuid;
        const char *name = NULL;

        if (pick->shares[s].container != container)
            continue;
        for (uint32_t g = 0; ni != NULL && g < ni->ngpus && name == NULL; g++)
            name = !ni->gpus[g].shadowed && strcmp(ni->gpus[g].uuid, uuid) == 0 ? ni->gpus[g].name
                                                                                : NULL;
        if (name == NULL)
            return -ENOENT;
        if (out->len > 0)
            rc = egpu_buf_append(out, ",", 1);
        if (rc == 0)
            rc = egpu_buf_append(out, name, strlen(name));
    }
    return rc;
}

/* ---- The door: judging a pod that uses claims (the extender asks here) ---- */

/* The pick bind makes for a pod that uses claims on node (cache lock held):
 * the plan's rest by the placer, the claimed containers on their
 * ElasticGPUs' cards, into *whole. False when it cannot, with the reason in
 * msg (mlen bytes; msg may be NULL). */
static bool claim_pick(struct egpu_sched_cache *cache, struct egpu_placer *p,
                       const struct egpu_cluster *c, const struct egpu_sched_claim_plan *plan,
                       const struct egpu_node *node, struct egpu_pick *whole, char *msg,
                       size_t mlen)
{
    struct egpu_error err = {0};
    struct egpu_pick rest;

    if (!egpu_placer_can_host(p, c, node, &plan->rest, &rest, msg, mlen))
        return false;
    if (whole_pick(cache, plan, node, &rest, whole, &err) != 0) {
        if (msg != NULL)
            snprintf(msg, mlen, "%s", err.msg);
        return false;
    }
    return true;
}

/* Would bind refuse claim pod pod on node as ambiguous (cache lock held)?
 * Only a node where a pod waits for its allocated mark is looked at: the
 * pick bind would make there (claim_pick) against the waiting pods'
 * (egpu_sched_cache_is_ambiguous_locked), why (len bytes) saying so. */
static bool claim_ambiguous(struct egpu_sched_cache *cache, struct egpu_placer *p,
                            const struct egpu_cluster *c, const struct egpu_sched_pod *pod,
                            const struct egpu_sched_claim_plan *plan, const struct egpu_node *node,
                            char *why, size_t len)
{
    struct egpu_pick whole;

    return egpu__sched_cache_node_waits(cache, node->name) &&
           claim_pick(cache, p, c, plan, node, &whole, NULL, 0) &&
           egpu_sched_cache_is_ambiguous_locked(cache, pod, node, &whole, why, len);
}

/* Judge a pod that uses claims on nodes names[0..n) (cache lock held): a
 * node passes when the plan allows it (the bound claims' node, the
 * WaitForFirstConsumer classes' nodes) and the placer finds room there for
 * the plan's rest (the containers inside ElasticGPUs take no more room),
 * unless bind would refuse it as ambiguous (claim_ambiguous). v[i] and
 * why[i] (why may be NULL) as the extender's judge writes them for a pod
 * without claims. Returns 0 or -ENOMEM. */
int egpu__sched_claims_judge(struct egpu_sched_cache *cache, struct egpu_placer *p,
                             struct egpu_cluster *c, const struct egpu_sched_pod *pod,
                             bool load_aware, struct egpu_sched_claim_plan *plan,
                             const char *const *names, size_t n, struct egpu_verdict *v,
                             const char **why, struct egpu_buf *reasons)
{
    static const char failed[] = ""; /* marker: reason text is in reasons */
    size_t pos = 0;
    int rc = 0;

    plan_pod(cache, pod, plan);
    for (size_t i = 0; i < n; i++) {
        const struct egpu_node *node = egpu_cluster_node(c, names[i]);
        struct egpu_pick pick;
        char text[2048];
        double score = 0;

        v[i] = (struct egpu_verdict){.load = EGPU_LOAD_UNKNOWN};
        if (why != NULL)
            why[i] = NULL;
        if (node == NULL) {
            if (why != NULL)
                why[i] = EGPU__SCHED_UNKNOWN_NODE;
            continue;
        }
        if (!node_ok(cache, plan, names[i], text, sizeof(text))) {
            /* text says why */
        } else if (egpu_placer_score(p, c, node, &plan->rest, &score, &pick) != 0) {
            if (why != NULL)
                (void)egpu_placer_can_host(p, c, node, &plan->rest, NULL, text, sizeof(text));
        } else if (claim_ambiguous(cache, p, c, pod, plan, node, text, sizeof(text))) {
            /* text says why: bind would refuse the node (the rule of the
             * extender's steer) */
        } else {
            v[i] = (struct egpu_verdict){.score = score,
                                         .ok = true,
                                         .load = load_aware ? egpu_pick_load(node, &pick)
                                                            : EGPU_LOAD_UNKNOWN};
            continue;
        }
        if (why != NULL) {
            if (rc == 0)
                rc = egpu_buf_append(reasons, text, strlen(text) + 1);
            why[i] = failed;
        }
    }
    for (size_t i = 0; rc == 0 && why != NULL && i < n; i++) {
        if (why[i] == failed) {
            why[i] = reasons->data + pos;
            pos += strlen(why[i]) + 1;
        }
    }
    return rc;
}

/* Place a pod that uses claims on node (cache lock held): the plan must
 * allow the node, the rest must fit there, and the containers inside
 * ElasticGPUs go onto their cards (*pick: the pod's whole pick). For each
 * WaitForFirstConsumer claim marks[i] gets the cards chosen (*nmarks).
 * Returns EGPU_BIND_OK, or the failure with msg written. */
enum egpu_bind_result
egpu__sched_claims_place(struct egpu_sched_cache *cache, struct egpu_placer *p,
                         struct egpu_cluster *c, const struct egpu_sched_pod *pod,
                         struct egpu_node *node, struct egpu_sched_claim_plan *plan,
                         struct egpu_pick *pick, struct egpu__sched_claim_mark *marks,
                         uint32_t *nmarks, char *msg, size_t mlen)
{
    plan_pod(cache, pod, plan);
    if (!node_ok(cache, plan, node->name, msg, mlen) ||
        !claim_pick(cache, p, c, plan, node, pick, msg, mlen))
        return EGPU_BIND_NO_FIT;
    for (*nmarks = 0; *nmarks < plan->nwait; (*nmarks)++) {
        struct egpu__sched_claim_mark *m = &marks[*nmarks];
        struct egpu_buf names;

        egpu_buf_init(&names, 1 << 16);
        memcpy(m->claim, plan->wait[*nmarks].claim, sizeof(m->claim));
        if (gpu_names(cache, node, pick, plan->wait[*nmarks].container, &names) != 0 ||
            (m->gpus = egpu_strdup(egpu_buf_str(&names))) == NULL) {
            egpu_buf_free(&names);
            snprintf(msg, mlen, "claim %s: the cards chosen on node %s could not be named",
                     m->claim, node->name);
            return EGPU_BIND_NO_FIT;
        }
        egpu_buf_free(&names);
    }
    return EGPU_BIND_OK;
}
