/* webhook/claims.c - pods use claims: the annotation
 * egpuc.elasticgpu.io/<container>: <claim> of a pod being created becomes
 * that container's elasticgpu.io/gpu-core and gpu-memory, requests and
 * limits (docs/claims.md, "Pods use claims"); and the claim annotations of
 * a pod never change after it is created.
 *
 * On a Pod CREATE (/mutate and /mutate-nvidia), for every claim annotation
 * (read with src/api's egpu_api_pod_claims, whose errors deny as they are:
 * a key that is no container name, a claim of another namespace, one claim
 * for two containers):
 *   - the container must be one of spec.containers (init containers get no
 *     GPU);
 *   - the claim is looked up in the pod's namespace through cfg->claims:
 *     the cache first, and the API server (a live GET) on a miss, before
 *     denying on what the cache said and for a claim the cache has Pending
 *     (a claim created a moment before the pod, or bound since, is judged
 *     as it is now, not as a stale cache has it); a
 *     lookup that cannot be answered denies (fail closed: a pod admitted
 *     without its claim's limit would take a GPU unbounded by it);
 *   - what the container gets: a Bound claim's status.capacity (gpu-core
 *     percent and gpu-memory MiB of a slice, or 100*k for k whole cards
 *     without memory; a TFLOPS claim's capacity is the percent it resolved
 *     to); a Pending claim's spec requests when it asks gpu-core (e.g. a
 *     WaitForFirstConsumer claim before its first pod). A Pending claim
 *     asking gpu-tflops is refused: its core percent depends on the card it
 *     lands on and is known only once it is Bound. A Lost claim is refused;
 *   - the container must not ask for a GPU itself (an elasticgpu.io/ name
 *     or a compatible one): two sources of one limit. The exception is a
 *     container that already asks exactly what its claim gives, in requests
 *     and limits: the webhook's own patch seen again on reinvocation
 *     (reinvocationPolicy: IfNeeded), left as it is.
 * Every problem is reported, one sentence per claim. mutate.c writes the
 * results into the copy of the spec it diffs, so the patch holds them and
 * the pod then goes to elastic-gpu-scheduler; /validate's rules then judge
 * the result like any other GPU pod's. In DRA mode (--mode dra) the same
 * checks hold, and dra.c then moves what was written to the claim's
 * ResourceClaim (the controller's, elasticgpu-<claim>): a container that
 * already names it, with no GPU request of its own, is that patch seen
 * again. A claim bound to or naming an ElasticGPU is refused there: the
 * controller keeps it on its ElasticGPU and makes no ResourceClaim for it.
 *
 * On a Pod UPDATE (/validate) an egpuc.elasticgpu.io/ annotation added,
 * changed or removed is refused: the scheduler places the pod by it and the
 * controller protects the claim by it, and its requests were fixed at
 * creation.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "webhook_int.h"

#define PREFIX_LEN (sizeof(EGPU_ANN_CLAIM_PREFIX) - 1)
#define MSG_MAX    2048 /* a sentence before it is cut to EGPU_API_PROBLEM_MAX */

/* src into dst (len bytes), cut to fit. */
static void cut(char *dst, size_t len, const char *src)
{
    size_t n = strlen(src);

    if (n >= len)
        n = len - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

void egpu__webhook_warn(struct egpu__webhook_verdict *v, const char *fmt, ...)
{
    va_list ap;

    if (v->nwarnings >= EGPU_API_PROBLEMS_MAX)
        return;
    va_start(ap, fmt);
    vsnprintf(v->warnings[v->nwarnings++], sizeof(v->warnings[0]), fmt, ap);
    va_end(ap);
}

void egpu__webhook_problem_add(struct egpu_api_problems *p, const char *msg)
{
    if (p->n < EGPU_API_PROBLEMS_MAX)
        cut(p->msg[p->n++], sizeof(p->msg[0]), msg);
    else
        p->more++;
}

void egpu__webhook_deny_problems(struct egpu__webhook_verdict *v, const struct egpu_api_problems *p)
{
    size_t used = 0;

    v->allowed = false;
    v->code = 403;
    v->reason = "Forbidden";
    v->message[0] = '\0';
    for (size_t i = 0; i < p->n; i++) {
        int n = snprintf(v->message + used, sizeof(v->message) - used, "%s%s", i ? "; " : "",
                         p->msg[i]);

        if (n < 0 || (size_t)n >= sizeof(v->message) - used)
            return;
        used += (size_t)n;
    }
    if (p->more > 0)
        snprintf(v->message + used, sizeof(v->message) - used, "; and %zu more", p->more);
}

/* The index of container name in spec.containers, or -1. */
static long container_index(const json_t *spec, const char *name)
{
    const json_t *ctrs = json_object_get(spec, "containers");

    for (size_t i = 0; i < json_array_size(ctrs); i++) {
        const char *n = egpu_api_str(json_object_get(json_array_get(ctrs, i), "name"));

        if (n != NULL && strcmp(n, name) == 0)
            return (long)i;
    }
    return -1;
}

/* "a, b, c" of spec.containers' names into buf (len bytes), cut with ", ..."
 * when they do not fit; "none" when there are none. */
static void container_names(const json_t *spec, char *buf, size_t len)
{
    const json_t *ctrs = json_object_get(spec, "containers");
    size_t used = 0;

    buf[0] = '\0';
    for (size_t i = 0; i < json_array_size(ctrs); i++) {
        const char *n = egpu_api_str(json_object_get(json_array_get(ctrs, i), "name"));
        int k;

        if (n == NULL)
            continue;
        k = snprintf(buf + used, len - used, "%s%.63s", used ? ", " : "", n);
        if (k < 0 || (size_t)k >= len - used) {
            snprintf(buf + (used < len - 6 ? used : len - 6), 6, ", ...");
            return;
        }
        used += (size_t)k;
    }
    if (used == 0)
        snprintf(buf, len, "none");
}

/* Is name a GPU resource of a container: elasticgpu.io/ (not DRA mode's
 * marker, which dra.c writes beside the claim) or a compatible name the
 * route converts? */
static bool gpu_name(const char *name, bool nvidia)
{
    return egpu_api_res_asks_gpu(name) || egpu_api_compat_known(name, nvidia);
}

/* The GPU names container c asks, "a, b" into buf; false when none. */
static bool gpu_names(const json_t *c, bool nvidia, char *buf, size_t len)
{
    static const char *const maps[] = {"requests", "limits"};
    const json_t *res = json_object_get(c, "resources");
    size_t used = 0;

    buf[0] = '\0';
    for (size_t m = 0; m < 2; m++) {
        const json_t *map = json_object_get(res, maps[m]), *v;
        const char *key;

        if (!json_is_object(map))
            continue;
        json_object_foreach((json_t *)map, key, v)
        {
            int k;

            (void)v;
            if (!gpu_name(key, nvidia) ||
                (m == 1 && json_object_get(json_object_get(res, "requests"), key) != NULL))
                continue; /* not a GPU, or named already */
            k = snprintf(buf + used, len - used, "%s%.100s", used ? ", " : "", key);
            if (k < 0 || (size_t)k >= len - used)
                return true;
            used += (size_t)k;
        }
    }
    return used > 0;
}

/* Does container c ask, in requests and in limits, exactly ask and no other
 * GPU name (the patch this file made, seen again)? */
static bool asks_exactly(const json_t *c, bool nvidia, const struct egpu_api_gpu_ask *ask)
{
    static const char *const maps[] = {"requests", "limits"};
    const json_t *res = json_object_get(c, "resources");
    struct egpu_api_gpu_ask got;
    struct egpu_error err = {0};

    for (size_t m = 0; m < 2; m++) {
        const json_t *map = json_object_get(res, maps[m]), *v;
        const char *key;
        size_t want = ask->has_mem ? 2 : 1, seen = 0;

        if (!json_is_object(map))
            return false;
        json_object_foreach((json_t *)map, key, v)
        {
            (void)v;
            if (!gpu_name(key, nvidia))
                continue;
            if (strcmp(key, EGPU_RES_GPU_CORE) != 0 &&
                (!ask->has_mem || strcmp(key, EGPU_RES_GPU_MEMORY) != 0))
                return false;
            seen++;
        }
        if (seen != want)
            return false;
    }
    if (egpu_api_container_gpu(c, "", true, &got, &err) != 0)
        return false;
    return got.core_pct == ask->core_pct && got.has_mem == ask->has_mem &&
           got.mem_mib == ask->mem_mib;
}

enum found {
    FOUND,      /* *claim decoded */
    MISSING,    /* no such claim */
    MALFORMED,  /* it does not decode: why */
    UNREACHABLE /* it cannot be told: why */
};

/* Look claim ns/name up once (fresh or from the cache) into *c. */
static enum found look(const struct egpu_webhook_claims *src, const char *ns, const char *name,
                       bool fresh, struct egpu_api_claim *c, char *why, size_t len, int *rc)
{
    struct egpu_error err = {0};
    json_t *obj = NULL;
    int r;

    *rc = 0;
    if (src == NULL || src->get == NULL) {
        snprintf(why, len, "this webhook has no access to ElasticGPUClaims");
        return UNREACHABLE;
    }
    r = src->get(src->ud, ns, name, fresh, &obj, &err);
    if (r == -ENOENT)
        return MISSING;
    if (r == -ENOMEM) {
        *rc = r;
        return UNREACHABLE;
    }
    if (r != 0) {
        snprintf(why, len, "%s", err.msg[0] ? err.msg : egpu_strerror(r));
        return UNREACHABLE;
    }
    r = egpu_api_claim_decode(obj, c, &err);
    json_decref(obj);
    if (r == -ENOMEM) {
        *rc = r;
        return UNREACHABLE;
    }
    if (r != 0) {
        snprintf(why, len, "%s", err.msg);
        return MALFORMED;
    }
    return FOUND;
}

/* What claim c gives its container: true with *ask, or false (Lost, or
 * Pending and asking gpu-tflops). */
static bool claim_ask(const struct egpu_api_claim *c, struct egpu_api_gpu_ask *ask)
{
    memset(ask, 0, sizeof(*ask));
    if (c->phase == EGPU_API_CLAIM_LOST)
        return false;
    if (c->phase == EGPU_API_CLAIM_BOUND && c->has_cap_core && c->cap_core_pct > 0) {
        ask->core_pct = c->cap_core_pct;
        ask->has_mem = c->cap_core_pct < 100 && c->has_cap_mem && c->cap_mem_mib > 0;
        ask->mem_mib = ask->has_mem ? c->cap_mem_mib : 0;
        return true;
    }
    if (c->core_pct > 0) { /* Pending (or Bound without a capacity yet): its requests */
        ask->core_pct = c->core_pct;
        ask->has_mem = c->core_pct < 100 && c->has_mem;
        ask->mem_mib = ask->has_mem ? c->mem_mib : 0;
        return true;
    }
    return false;
}

/* Look claim ns/name up and work out what it gives: true with *ask, or
 * false with the problem in msg (len bytes). *rc: 0 or -ENOMEM. */
static bool resolve(const struct egpu_webhook_claims *src, const char *ns, const char *key,
                    const char *name, struct egpu_api_claim *c, struct egpu_api_gpu_ask *ask,
                    char *msg, size_t len, int *rc)
{
    char why[EGPU_ERRMSG_MAX], why2[EGPU_ERRMSG_MAX];
    enum found f = look(src, ns, name, false, c, why, sizeof(why), rc);

    if (*rc)
        return false;
    /* Ask the API server before refusing, and before taking a Pending
     * claim's requests (it may be Bound by now, to more than it asked). */
    if (f != FOUND || c->phase != EGPU_API_CLAIM_BOUND || !claim_ask(c, ask)) {
        enum found again = look(src, ns, name, true, c, why2, sizeof(why2), rc);

        if (*rc)
            return false;
        if (again != UNREACHABLE || f != FOUND) {
            f = again;
            memcpy(why, why2, sizeof(why));
        } /* else the API server is away: the cache's word (*c is still its claim) */
    }
    switch (f) {
    case MISSING:
        snprintf(msg, len, "annotation %.83s: ElasticGPUClaim %.63s/%.253s not found", key, ns,
                 name);
        return false;
    case UNREACHABLE:
        snprintf(
            msg, len,
            "annotation %.83s: cannot look up ElasticGPUClaim %.63s/%.253s (%.600s); the pod is "
            "refused rather than admitted without its claim's GPU limit, try again",
            key, ns, name, why);
        return false;
    case MALFORMED:
        snprintf(msg, len, "annotation %.83s: ElasticGPUClaim %.63s/%.253s is malformed: %.600s",
                 key, ns, name, why);
        return false;
    case FOUND:
        break;
    }
    if (claim_ask(c, ask))
        return true;
    if (c->phase == EGPU_API_CLAIM_LOST)
        snprintf(msg, len,
                 "annotation %.83s: ElasticGPUClaim %.63s/%.253s is Lost: its ElasticGPU %.253s is "
                 "gone; allowed: a Bound claim, or a Pending one (create the claim again)",
                 key, ns, name, c->bound_egpu[0] ? c->bound_egpu : "(none)");
    else
        snprintf(msg, len,
                 "annotation %.83s: ElasticGPUClaim %.63s/%.253s is Pending and "
                 "asks " EGPU_RES_GPU_TFLOPS
                 "; its gpu-core percent is known only once it is Bound (it depends on the card "
                 "it lands on); allowed: a Bound claim, or a Pending one asking " EGPU_RES_GPU_CORE,
                 key, ns, name);
    return false;
}

static void warn(struct egpu__webhook_verdict *v, const char *ctr, const char *ns,
                 const char *claim, const struct egpu_api_claim *c,
                 const struct egpu_api_gpu_ask *ask)
{
    char mem[64] = "", from[600], msg[MSG_MAX];

    if (v->nwarnings >= EGPU_API_PROBLEMS_MAX)
        return;
    if (ask->has_mem)
        snprintf(mem, sizeof(mem), " and " EGPU_RES_GPU_MEMORY " %lld", (long long)ask->mem_mib);
    if (c->phase == EGPU_API_CLAIM_BOUND && c->has_cap_core)
        snprintf(from, sizeof(from), "Bound to ElasticGPU %.253s", c->bound_egpu);
    else
        snprintf(from, sizeof(from), "%s: its requests", egpu_api_claim_phase_name(c->phase));
    snprintf(msg, sizeof(msg),
             "container \"%.63s\": " EGPU_RES_GPU_CORE " %lld%s from ElasticGPUClaim %.63s/%.253s "
             "(%s)",
             ctr, (long long)ask->core_pct, mem, ns, claim, from);
    cut(v->warnings[v->nwarnings++], sizeof(v->warnings[0]), msg);
}

/* pod's metadata.annotations with the namespace the pod is created in, as
 * egpu_api_pod_claims reads a pod (new reference; NULL when out of memory). */
static json_t *claims_view(const struct egpu__webhook_podpart *pp, const char *ns)
{
    return json_pack("{s:{s:s, s:O}}", "metadata", "namespace", ns, "annotations",
                     pp->annotations != NULL ? pp->annotations : json_null());
}

int egpu__webhook_claims_resolve(const struct egpu_webhook_config *cfg, bool nvidia,
                                 const struct egpu__webhook_review *rv,
                                 const struct egpu__webhook_podpart *pp,
                                 struct egpu__webhook_claim_use *uses, size_t *n,
                                 struct egpu_api_problems *p, struct egpu__webhook_verdict *v)
{
    struct egpu_api_pod_claim pc[EGPU_API_POD_CLAIMS_MAX];
    const char *ns =
        rv->ns[0] != '\0' ? rv->ns : egpu_api_str(json_object_get(pp->metadata, "namespace"));
    struct egpu_api_claim *c = NULL;
    struct egpu_error err = {0};
    size_t npc = 0;
    json_t *view;
    int rc;

    *n = 0;
    if (ns == NULL)
        ns = "";
    view = claims_view(pp, ns);
    if (view == NULL)
        return -ENOMEM;
    rc = egpu_api_pod_claims(view, pc, EGPU_API_POD_CLAIMS_MAX, &npc, &err);
    json_decref(view);
    if (rc == -ENOMEM)
        return rc;
    if (rc) {
        egpu__webhook_problem_add(p, err.msg);
        return 0;
    }
    if (npc == 0)
        return 0;
    if (!egpu_api_dns_label(ns)) {
        egpu__webhook_problem_add(
            p, "the pod's namespace is not known, so the ElasticGPUClaims its "
               "annotations " EGPU_ANN_CLAIM_PREFIX "<container> name cannot be found");
        return 0;
    }
    c = egpu_malloc(sizeof(*c)); /* about 16 KiB: not on a pool thread's stack */
    if (c == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < npc; i++) {
        char key[EGPU_CONTAINER_NAME_MAX + PREFIX_LEN], msg[MSG_MAX];
        char names[256];
        struct egpu__webhook_claim_use *u = &uses[*n];
        long idx = container_index(pp->spec, pc[i].container);
        const json_t *ctr;

        snprintf(key, sizeof(key), EGPU_ANN_CLAIM_PREFIX "%.63s", pc[i].container);
        if (idx < 0) {
            container_names(pp->spec, names, sizeof(names));
            snprintf(msg, sizeof(msg),
                     "annotation %.83s: the pod has no container \"%.63s\"; allowed: one of its "
                     "containers: %s",
                     key, pc[i].container, names);
            egpu__webhook_problem_add(p, msg);
            continue;
        }
        memset(u, 0, sizeof(*u));
        if (!resolve(cfg->claims, ns, key, pc[i].claim, c, &u->ask, msg, sizeof(msg), &rc)) {
            if (rc)
                break;
            egpu__webhook_problem_add(p, msg);
            continue;
        }
        if (cfg->mode == EGPU_WEBHOOK_MODE_DRA && (c->bound_egpu[0] || c->egpu_name[0])) {
            snprintf(msg, sizeof(msg),
                     "annotation %.83s: ElasticGPUClaim %.63s/%.253s is bound to ElasticGPU "
                     "%.253s, capacity kube-scheduler's allocator cannot see, so egpu-controller "
                     "--mode dra makes no ResourceClaim for it; allowed in DRA mode: a claim not "
                     "bound to and not naming an ElasticGPU",
                     key, ns, pc[i].claim, c->bound_egpu[0] ? c->bound_egpu : c->egpu_name);
            egpu__webhook_problem_add(p, msg);
            continue;
        }
        ctr = json_array_get(json_object_get(pp->spec, "containers"), (size_t)idx);
        if (cfg->mode == EGPU_WEBHOOK_MODE_DRA && !gpu_names(ctr, nvidia, names, sizeof(names)) &&
            egpu__webhook_dra_claim_done(pp->spec, (size_t)idx, pc[i].claim)) {
            u->done = true; /* dra.c's patch seen again */
        } else if (asks_exactly(ctr, nvidia, &u->ask)) {
            /* In DRA mode dra.c still moves them to the claim's ResourceClaim. */
            u->done = cfg->mode != EGPU_WEBHOOK_MODE_DRA;
        } else if (gpu_names(ctr, nvidia, names, sizeof(names))) {
            snprintf(msg, sizeof(msg),
                     "container \"%.63s\" uses claim %.253s (annotation %.83s) and also "
                     "requests %s; remove one",
                     pc[i].container, pc[i].claim, key, names);
            egpu__webhook_problem_add(p, msg);
            continue;
        }
        u->ctr = (size_t)idx;
        cut(u->container, sizeof(u->container), pc[i].container);
        cut(u->claim, sizeof(u->claim), pc[i].claim);
        if (!u->done)
            warn(v, pc[i].container, ns, pc[i].claim, c, &u->ask);
        (*n)++;
    }
    egpu_free(c);
    return rc;
}

/* map[name] = "value" in resources' map kind of container c. */
static int set_res(json_t *c, const char *kind, const char *name, int64_t value)
{
    json_t *res = json_object_get(c, "resources"), *map;
    char text[24];

    if (!json_is_object(res)) {
        res = json_object();
        if (res == NULL || json_object_set_new(c, "resources", res) != 0)
            return -ENOMEM;
    }
    map = json_object_get(res, kind);
    if (!json_is_object(map)) {
        map = json_object();
        if (map == NULL || json_object_set_new(res, kind, map) != 0)
            return -ENOMEM;
    }
    snprintf(text, sizeof(text), "%lld", (long long)value);
    return json_object_set_new(map, name, json_string(text)) != 0 ? -ENOMEM : 0;
}

int egpu__webhook_claims_apply(json_t *spec, const struct egpu__webhook_claim_use *uses, size_t n)
{
    static const char *const kinds[] = {"requests", "limits"};
    json_t *ctrs = json_object_get(spec, "containers");
    int rc = 0;

    for (size_t i = 0; rc == 0 && i < n; i++) {
        json_t *c = json_array_get(ctrs, uses[i].ctr);

        if (uses[i].done)
            continue;
        if (!json_is_object(c))
            return -EINVAL;
        for (size_t k = 0; rc == 0 && k < 2; k++) {
            rc = set_res(c, kinds[k], EGPU_RES_GPU_CORE, uses[i].ask.core_pct);
            if (!rc && uses[i].ask.has_mem)
                rc = set_res(c, kinds[k], EGPU_RES_GPU_MEMORY, uses[i].ask.mem_mib);
        }
    }
    return rc;
}

/* Annotation key of obj, or NULL when absent. */
static const json_t *ann_of(const json_t *obj, const char *key)
{
    return json_object_get(json_object_get(json_object_get(obj, "metadata"), "annotations"), key);
}

static void immutable_one(const struct egpu__webhook_review *rv, const char *key,
                          struct egpu_api_problems *p)
{
    const json_t *now = ann_of(rv->object, key), *before = ann_of(rv->old_object, key);
    const char *nv = egpu_api_str(now), *bv = egpu_api_str(before);
    char msg[MSG_MAX];

    if (now != NULL && before != NULL && json_equal(now, before))
        return;
    if (before == NULL)
        snprintf(msg, sizeof(msg),
                 "annotation %.100s cannot be added to a pod after it is created (the scheduler "
                 "and the controller rely on the claims a pod was created with); create a new pod",
                 key);
    else if (now == NULL)
        snprintf(msg, sizeof(msg),
                 "annotation %.100s cannot be removed from a pod (the scheduler and the "
                 "controller rely on the claims a pod was created with); delete the pod instead",
                 key);
    else
        snprintf(msg, sizeof(msg),
                 "annotation %.100s cannot change after the pod is created (was \"%.100s\", now "
                 "\"%.100s\"; the scheduler and the controller rely on the claims a pod was "
                 "created with); create a new pod",
                 key, bv ? bv : "?", nv ? nv : "?");
    egpu__webhook_problem_add(p, msg);
}

void egpu__webhook_claims_immutable(const struct egpu__webhook_review *rv,
                                    struct egpu_api_problems *p)
{
    const json_t *objs[2] = {rv->object, rv->old_object};

    for (size_t o = 0; o < 2; o++) {
        const json_t *ann = json_object_get(json_object_get(objs[o], "metadata"), "annotations");
        const json_t *v;
        const char *key;

        if (!json_is_object(ann))
            continue;
        json_object_foreach((json_t *)ann, key, v)
        {
            (void)v;
            if (strncmp(key, EGPU_ANN_CLAIM_PREFIX, PREFIX_LEN) != 0)
                continue;
            if (o == 1 && ann_of(rv->object, key) != NULL)
                continue; /* in both: seen in the first pass */
            immutable_one(rv, key, p);
        }
    }
}
