/* webhook/quota.c - ElasticGPUClaims count against their namespace's
 * ResourceQuotas.
 *
 * Kubernetes' ResourceQuota counts pods' requests.elasticgpu.io/gpu-core and
 * gpu-memory (docs/budgets.md) but knows nothing of a custom resource's
 * requests, so a claim reserving 99% of a card with no pod escaped it. Here
 * a namespace holds, against each ResourceQuota without scopes that limits
 * either resource:
 *   - every ElasticGPUClaim that is not Lost: a Bound one its
 *     status.capacity, a Pending one its requests (a gpu-tflops claim 99,
 *     the most one card's share can come to), from its creation (as a
 *     PersistentVolumeClaim counts against requests.storage) until it is
 *     gone;
 *   - every ElasticGPU whose claimRef is in the namespace and names a claim
 *     that is gone (Released; a Retain one that nobody can use any more),
 *     not Failed, until an operator deletes it or clears its claimRef;
 *   - every unfinished pod's containers that use no claim, their requests
 *     (a limit standing for a missing one), as the quota plugin counts
 *     them (not a pod deleted past its grace period: pod_counts); a
 *     container that uses a claim (egpuc.elasticgpu.io/<container>)
 *     asks what its claim holds and is counted with the claim: so a claim
 *     and its pod are never counted twice. (Counted from a live LIST of the
 *     pods, not the quota's status.used, which lags a deletion.)
 *   - every resource.k8s.io ResourceClaim asking this driver's classes
 *     (DRA mode, dra_quota.c): an allocated one what its status says it
 *     consumes, one not allocated yet what its spec asks
 *     (egpu_api_dra_claim_held, egpu_api_dra_spec_usage), until it is
 *     gone. A DRA-mode pod asks nothing of its own (its containers' GPU is
 *     in its claims), so nothing is counted twice; nor is an ElasticGPUClaim
 *     and the ResourceClaim it controls (egpu-controller --mode dra's
 *     elasticgpu-<claim>): the pair counts the larger of the two.
 * A claim CREATE, or an UPDATE that raises what the claim holds, whose
 * holding would take that total past a quota's hard limit is refused with
 * the quota plugin's figures (requested, used, limited) and what the used
 * figure is made of; so is a Pod CREATE whose own requests (its containers
 * that use no claim) would. The figures are read live from the API server
 * (cfg->quota), and a read that fails refuses (fail closed). Two claims
 * admitted at the same instant by two replicas can both pass (the quota
 * plugin serialises on the quota object's resourceVersion; a webhook
 * cannot): docs/security.md says so.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "webhook_int.h"

#define Q_CORE "requests." EGPU_RES_GPU_CORE
#define Q_MEM  "requests." EGPU_RES_GPU_MEMORY

/* What something holds: gpu-core percent and gpu-memory MiB. */
struct held {
    int64_t core, mem;
};

/* What claim c holds (Lost: nothing). */
static struct held claim_held(const struct egpu_api_claim *c)
{
    struct held h = {0, 0};

    if (c->phase == EGPU_API_CLAIM_LOST)
        return h;
    if (c->phase == EGPU_API_CLAIM_BOUND && c->has_cap_core && c->cap_core_pct > 0) {
        h.core = c->cap_core_pct;
        h.mem = c->cap_core_pct < 100 && c->has_cap_mem ? c->cap_mem_mib : 0;
        return h;
    }
    h.core = c->core_pct > 0 ? c->core_pct : 99; /* gpu-tflops: at most 99% of one card */
    h.mem = c->has_mem && (c->core_pct == 0 || c->core_pct < 100) ? c->mem_mib : 0;
    return h;
}

/* A quantity of a quota's spec.hard as whole units, rounded
 * up; absent: 0 with *has false. */
static int quantity(const json_t *map, const char *key, int64_t *out, bool *has)
{
    const char *s = egpu_api_str(json_object_get(map, key));
    struct egpu_quantity q;
    struct egpu_error err = {0};

    *out = 0;
    if (has != NULL)
        *has = s != NULL;
    if (s == NULL)
        return 0;
    if (egpu_quantity_parse(s, &q, &err) != 0 ||
        egpu_quantity_to_units(&q, 0, 0, EGPU_ROUND_UP, out) != 0)
        return -EINVAL;
    return 0;
}

/* What the containers of pod (v1 Pod or the object under review) ask: those
 * that use a claim into *claimed, the others into *own (either may be
 * NULL). */
static void pod_asks(const json_t *pod, struct held *own, struct held *claimed)
{
    struct egpu_api_pod_claim pc[EGPU_API_POD_CLAIMS_MAX];
    struct egpu_error err = {0};
    const json_t *ctr;
    size_t npc = 0, i;

    if (egpu_api_pod_claims(pod, pc, EGPU_API_POD_CLAIMS_MAX, &npc, &err) != 0)
        npc = 0;
    json_array_foreach(json_object_get(json_object_get(pod, "spec"), "containers"), i, ctr)
    {
        const char *name = egpu_api_str(json_object_get(ctr, "name"));
        struct egpu_api_gpu_ask ask;
        struct held *to;

        if (name == NULL || egpu_api_container_gpu(ctr, name, false, &ask, &err) != 0)
            continue;
        to = egpu_api_pod_claim_of(pc, npc, name) != NULL ? claimed : own;
        if (to == NULL)
            continue;
        to->core += ask.core_pct;
        to->mem += ask.has_mem && ask.core_pct < 100 ? ask.mem_mib : 0;
    }
}

/* Whether pod counts against its namespace's quotas, as the quota plugin
 * counts it (QuotaV1Pod): not once it has finished, nor once the grace
 * period of its deletion is over (a pod the finalizer elasticgpu.io/metering
 * holds after its deletion, until egpu-controller has metered it, holds
 * nothing in status.used). */
static bool pod_counts(const json_t *pod)
{
    const json_t *md = json_object_get(pod, "metadata");
    const char *del = egpu_api_str(json_object_get(md, "deletionTimestamp"));
    const json_t *grace = json_object_get(md, "deletionGracePeriodSeconds");
    struct egpu_error err = {0};
    int64_t at;

    if (egpu_api_pod_finished(pod))
        return false;
    if (del == NULL || !json_is_integer(grace) ||
        egpu_api_time_parse(del, "metadata.deletionTimestamp", &at, &err) != 0)
        return true;
    return (int64_t)time(NULL) <= at + json_integer_value(grace);
}

/* What the namespace holds besides the object under review. */
struct tally {
    struct held claims;   /* claims not Lost, but the one under review */
    struct held released; /* ElasticGPUs of the namespace whose claim is gone */
    struct held own;      /* what unfinished pods' containers without a claim ask */
    struct held dra;      /* ResourceClaims of this driver's classes, but the one under review */
    json_t *owned;        /* uid of each claim counted -> [core, mem] it is counted for */
};

/* The uid of the ElasticGPUClaim that controls ResourceClaim o (its
 * controller ownerReference, as egpu-controller --mode dra writes on
 * elasticgpu-<claim>), or NULL. */
static const char *owner_claim(const json_t *o)
{
    const json_t *refs = json_object_get(json_object_get(o, "metadata"), "ownerReferences"), *r;
    size_t i;

    json_array_foreach(refs, i, r)
    {
        const char *kind = egpu_api_str(json_object_get(r, "kind"));
        const char *av = egpu_api_str(json_object_get(r, "apiVersion"));

        if (kind != NULL && av != NULL && strcmp(kind, EGPU_KIND_ELASTICGPUCLAIM) == 0 &&
            strncmp(av, EGPU_API_GROUP "/", sizeof(EGPU_API_GROUP)) == 0 &&
            json_is_true(json_object_get(r, "controller")))
            return egpu_api_str(json_object_get(r, "uid"));
    }
    return NULL;
}

/* h less what the ElasticGPUClaim controlling ResourceClaim o is counted
 * for already in t (a claim and its ResourceClaim are one holding: the
 * larger of the two counts), and that claim's entry raised to h. An owner
 * reference a tenant forged can only name a claim already counted, and
 * never makes the pair count less than the larger. */
static struct held less_owner(struct tally *t, const json_t *o, struct held h)
{
    const char *uid = owner_claim(o);
    json_t *e = uid != NULL ? json_object_get(t->owned, uid) : NULL;
    int64_t core, mem;

    if (!json_is_array(e))
        return h;
    core = json_integer_value(json_array_get(e, 0));
    mem = json_integer_value(json_array_get(e, 1));
    (void)json_array_set_new(e, 0, json_integer(h.core > core ? h.core : core));
    (void)json_array_set_new(e, 1, json_integer(h.mem > mem ? h.mem : mem));
    h.core = h.core > core ? h.core - core : 0;
    h.mem = h.mem > mem ? h.mem - mem : 0;
    return h;
}

static int list(const struct egpu_webhook_config *cfg, enum egpu_webhook_quota_list what,
                const char *ns, json_t **out, char *why, size_t len)
{
    struct egpu_error err = {0};
    int rc = cfg->quota->list(cfg->quota->ud, what, ns, out, &err);

    if (rc && rc != -ENOMEM)
        snprintf(why, len, "%s", err.msg[0] ? err.msg : egpu_strerror(rc));
    return rc;
}

/* What ResourceClaim o holds: allocated, its status; else its spec. */
static struct held dra_held(const json_t *o)
{
    struct egpu_api_dra_usage u;
    bool allocated = false;
    struct held h = {0, 0};

    if (egpu_api_dra_claim_held(o, &u, &allocated, NULL, NULL) != 0)
        return h; /* the scheduler wrote it; an unreadable one holds nothing we can tell */
    if (!allocated && egpu_api_dra_spec_usage(json_object_get(o, "spec"), "spec", &u, NULL) != 0)
        return h; /* refused at its creation (dra_quota.c) */
    h.core = u.cores;
    h.mem = u.mem_mib;
    return h;
}

/* Count the namespace's claims (skip: the name under review, or NULL;
 * skip_rc: the ResourceClaim under review, or NULL), Released ElasticGPUs,
 * claim pods and ResourceClaims into *t. */
static int tally(const struct egpu_webhook_config *cfg, const char *ns, const char *skip,
                 const char *skip_uid, const char *skip_rc, struct tally *t, char *why, size_t len)
{
    json_t *claims = NULL, *pods = NULL, *egpus = NULL, *rcs = NULL, *uids = json_object();
    struct egpu_api_claim *c = egpu_malloc(sizeof(*c)); /* about 16 KiB */
    struct egpu_api_egpu *e = egpu_malloc(sizeof(*e));  /* about 25 KiB */
    const json_t *o;
    size_t i;
    int rc;

    memset(t, 0, sizeof(*t));
    t->owned = json_object();
    rc = c == NULL || e == NULL || uids == NULL || t->owned == NULL ? -ENOMEM : 0;
    if (!rc)
        rc = list(cfg, EGPU_WEBHOOK_LIST_CLAIMS, ns, &claims, why, len);
    if (!rc)
        rc = list(cfg, EGPU_WEBHOOK_LIST_PODS, ns, &pods, why, len);
    if (!rc)
        rc = list(cfg, EGPU_WEBHOOK_LIST_ELASTICGPUS, ns, &egpus, why, len);
    if (!rc) {
        rc = list(cfg, EGPU_WEBHOOK_LIST_RESOURCECLAIMS, ns, &rcs, why, len);
        if (rc == -ENOENT) /* no resource.k8s.io/v1 here: no ResourceClaims */
            rc = 0;
    }
    if (rc)
        goto out;
    if (skip_uid != NULL && skip_uid[0] != '\0')
        (void)json_object_set_new(uids, skip_uid, json_true());
    json_array_foreach(claims, i, o)
    {
        struct held h;

        if (egpu_api_claim_decode(o, c, NULL) != 0)
            continue; /* the CRD's schema keeps these out */
        if (c->meta.uid[0] != '\0')
            (void)json_object_set_new(uids, c->meta.uid, json_true());
        if (skip != NULL && strcmp(c->meta.name, skip) == 0) {
            if (c->meta.uid[0] != '\0' && t->owned != NULL) /* its ResourceClaim: in its ask */
                (void)json_object_set_new(
                    t->owned, c->meta.uid,
                    json_pack("[I, I]", (json_int_t)INT64_MAX, (json_int_t)INT64_MAX));
            continue;
        }
        h = claim_held(c);
        t->claims.core += h.core;
        t->claims.mem += h.mem;
        if (c->meta.uid[0] != '\0' && t->owned != NULL)
            (void)json_object_set_new(t->owned, c->meta.uid,
                                      json_pack("[I, I]", (json_int_t)h.core, (json_int_t)h.mem));
    }
    json_array_foreach(egpus, i, o)
    {
        struct egpu_reservation r;

        if (egpu_api_egpu_decode(o, e, NULL) != 0 || !e->has_claim_ref ||
            strcmp(e->claim_ns, ns) != 0 || e->claim_uid[0] == '\0' ||
            json_object_get(uids, e->claim_uid) != NULL || !egpu_api_egpu_reservation(e, &r))
            continue; /* not the namespace's, its claim exists (counted there), or Failed */
        t->released.core +=
            e->source == EGPU_API_PROVISIONER_PHYSICAL ? 100LL * e->ngpus : e->core_pct;
        t->released.mem +=
            e->source == EGPU_API_PROVISIONER_GPUSHARE && e->has_mem ? e->mem_mib : 0;
    }
    json_array_foreach(pods, i, o)
    {
        if (pod_counts(o))
            pod_asks(o, &t->own, NULL);
    }
    json_array_foreach(rcs, i, o)
    {
        const char *name = egpu_api_str(json_object_get(json_object_get(o, "metadata"), "name"));
        struct held h;

        if (skip_rc != NULL && name != NULL && strcmp(name, skip_rc) == 0)
            continue;
        h = less_owner(t, o, dra_held(o));
        t->dra.core += h.core;
        t->dra.mem += h.mem;
    }
out:
    json_decref(rcs);
    json_decref(claims);
    json_decref(pods);
    json_decref(egpus);
    json_decref(uids);
    egpu_free(c);
    egpu_free(e);
    return rc;
}

/* Does quota q (a v1 ResourceQuota) hold claims: no scopes, and a hard
 * limit on either resource? */
static bool applies(const json_t *q)
{
    const json_t *spec = json_object_get(q, "spec"), *hard = json_object_get(spec, "hard");

    if (json_array_size(json_object_get(spec, "scopes")) > 0 ||
        json_is_object(json_object_get(spec, "scopeSelector")))
        return false;
    return json_object_get(hard, Q_CORE) != NULL || json_object_get(hard, Q_MEM) != NULL;
}

/* One resource of quota q against what is asked: appends "name=value" to
 * the three lists when it would pass the limit. */
static int judge(const json_t *q, const char *key, int64_t ask, int64_t holds, char *req,
                 char *used, char *lim, size_t len, bool *over)
{
    int64_t hard;
    bool has;
    size_t n;

    if (quantity(json_object_get(json_object_get(q, "spec"), "hard"), key, &hard, &has) != 0)
        return -EINVAL;
    if (!has || ask <= 0 || holds + ask <= hard)
        return 0;
    n = strlen(req);
    snprintf(req + n, len - n, "%s%s=%" PRId64, n ? "," : "", key, ask);
    n = strlen(used);
    snprintf(used + n, len - n, "%s%s=%" PRId64, n ? "," : "", key, holds);
    n = strlen(lim);
    snprintf(lim + n, len - n, "%s%s=%" PRId64, n ? "," : "", key, hard);
    *over = true;
    return 0;
}

/* Judge ask (what the object under review adds) in namespace ns against
 * every quota; what: "ElasticGPUClaim x" or "pod x" for messages. */
static int check(const struct egpu_webhook_config *cfg, const char *ns, const char *skip,
                 const char *skip_uid, const char *skip_rc, const json_t *rc_obj, struct held ask,
                 const char *what, struct egpu_api_problems *p)
{
    char why[EGPU_ERRMSG_MAX] = "", msg[4 * EGPU_API_PROBLEM_MAX];
    char req[256], used[256], lim[256];
    json_t *quotas = NULL;
    struct tally t;
    const json_t *q;
    size_t i;
    int rc;

    if (cfg->quota == NULL || cfg->quota->list == NULL || (ask.core <= 0 && ask.mem <= 0))
        return 0;
    rc = list(cfg, EGPU_WEBHOOK_LIST_QUOTAS, ns, &quotas, why, sizeof(why));
    if (rc == 0) {
        bool any = false;

        json_array_foreach(quotas, i, q) any = any || applies(q);
        if (!any) {
            json_decref(quotas);
            return 0;
        }
        rc = tally(cfg, ns, skip, skip_uid, skip_rc, &t, why, sizeof(why));
        if (rc == 0 && rc_obj != NULL) /* an ElasticGPUClaim's own ResourceClaim: its excess */
            ask = less_owner(&t, rc_obj, ask);
        json_decref(t.owned);
    }
    if (rc == -ENOMEM) {
        json_decref(quotas);
        return rc;
    }
    if (rc) {
        snprintf(msg, sizeof(msg),
                 "cannot read what namespace %s holds against its ResourceQuotas (%.300s); the %s "
                 "is refused rather than admitted past its quota, try again",
                 ns, why, what);
        egpu__webhook_problem_add(p, msg);
        json_decref(quotas);
        return 0;
    }
    json_array_foreach(quotas, i, q)
    {
        const char *qname = egpu_api_str(json_object_get(json_object_get(q, "metadata"), "name"));
        bool over = false;

        if (!applies(q))
            continue;
        req[0] = used[0] = lim[0] = '\0';
        if (judge(q, Q_CORE, ask.core, t.claims.core + t.released.core + t.own.core + t.dra.core,
                  req, used, lim, sizeof(req), &over) != 0 ||
            judge(q, Q_MEM, ask.mem, t.claims.mem + t.released.mem + t.own.mem + t.dra.mem, req,
                  used, lim, sizeof(req), &over) != 0) {
            snprintf(msg, sizeof(msg), "ResourceQuota %s/%.200s does not parse; the %s is refused",
                     ns, qname != NULL ? qname : "", what);
            egpu__webhook_problem_add(p, msg);
            break;
        }
        if (!over)
            continue;
        snprintf(msg, sizeof(msg),
                 "%s is forbidden: exceeded quota: %.200s, requested: %s, used: %s, limited: %s "
                 "(used: ElasticGPUClaims gpu-core %" PRId64 " gpu-memory %" PRId64
                 ", Released ElasticGPUs gpu-core %" PRId64 " gpu-memory %" PRId64
                 ", pods without claims gpu-core %" PRId64 " gpu-memory %" PRId64
                 ", ResourceClaims gpu-core %" PRId64 " gpu-memory %" PRId64 ")",
                 what, qname != NULL ? qname : "", req, used, lim, t.claims.core, t.claims.mem,
                 t.released.core, t.released.mem, t.own.core, t.own.mem, t.dra.core, t.dra.mem);
        egpu__webhook_problem_add(p, msg);
        break;
    }
    json_decref(quotas);
    return 0;
}

bool egpu__webhook_quota_is_claim(const struct egpu__webhook_review *rv)
{
    return strcmp(rv->group, EGPU_API_GROUP) == 0 &&
           strcmp(rv->kind, EGPU_KIND_ELASTICGPUCLAIM) == 0;
}

int egpu__webhook_quota_claim(const struct egpu_webhook_config *cfg,
                              const struct egpu__webhook_review *rv, struct egpu_api_problems *p)
{
    struct egpu_api_claim *c = NULL;
    struct held now, before = {0, 0}, ask;
    char what[EGPU_K8S_NAME_MAX + 32];
    int rc = 0;

    if (rv->object == NULL || rv->ns[0] == '\0' ||
        (rv->op != EGPU_WEBHOOK_OP_CREATE && rv->op != EGPU_WEBHOOK_OP_UPDATE))
        return 0;
    c = egpu_malloc(sizeof(*c));
    if (c == NULL)
        return -ENOMEM;
    if (egpu_api_claim_decode(rv->object, c, NULL) != 0)
        goto out; /* the CRD's schema judges it */
    now = claim_held(c);
    if (rv->op == EGPU_WEBHOOK_OP_UPDATE && rv->old_object != NULL &&
        egpu_api_claim_decode(rv->old_object, c, NULL) == 0)
        before = claim_held(c);
    if (now.core <= before.core && now.mem <= before.mem)
        goto out; /* holds no more than it did: never blocks an unrelated edit */
    ask.core = now.core > before.core ? now.core : 0;
    ask.mem = now.mem > before.mem ? now.mem : 0;
    snprintf(what, sizeof(what), "ElasticGPUClaim \"%.253s\"", rv->name);
    rc = check(cfg, rv->ns, rv->name, NULL, NULL, NULL, ask, what, p);
out:
    egpu_free(c);
    return rc;
}

int egpu__webhook_quota_pod(const struct egpu_webhook_config *cfg,
                            const struct egpu__webhook_review *rv, struct egpu_api_problems *p)
{
    struct held own = {0, 0};
    char what[EGPU_K8S_NAME_MAX + 32];
    json_t *view;

    if (rv->op != EGPU_WEBHOOK_OP_CREATE || rv->object == NULL || rv->ns[0] == '\0')
        return 0;
    /* The pod as egpu_api_pod_claims reads it: with the review's namespace. */
    view = json_deep_copy(rv->object);
    if (view == NULL)
        return -ENOMEM;
    if (json_is_object(json_object_get(view, "metadata")))
        (void)json_object_set_new(json_object_get(view, "metadata"), "namespace",
                                  json_string(rv->ns));
    pod_asks(view, &own, NULL);
    json_decref(view);
    snprintf(what, sizeof(what), "pod \"%.253s\"", rv->name);
    return check(cfg, rv->ns, NULL, NULL, NULL, NULL, own, what, p);
}

int egpu__webhook_quota_ask(const struct egpu_webhook_config *cfg, const char *ns,
                            const char *skip_rc, const json_t *rc_obj, int64_t core, int64_t mem,
                            const char *what, struct egpu_api_problems *p)
{
    struct held ask = {core, mem};

    if (ns == NULL || ns[0] == '\0')
        return 0;
    return check(cfg, ns, NULL, NULL, skip_rc, rc_obj, ask, what, p);
}
