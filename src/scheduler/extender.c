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
 * Placers (one per node/card policy pair, made on first use) live under the
 * cache lock too, since they cache per-node results of the cache's cluster.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "egpu/log.h"
#include "egpu/scheduler.h"

#define NPOLICIES             (EGPU_POLICY_FGD + 1)
#define WORKLOAD_REFRESH_PODS 64 /* rebuild the live target workload after this many new pods */

struct egpu_extender {
    struct egpu_extender_config cfg;
    struct egpu_sched_cache *cache;
    struct egpu_extender_ops ops;
    /* Guarded by the cache lock: */
    struct egpu_placer *placers[NPOLICIES][NPOLICIES];
    struct egpu_workload live; /* FGD target workload built from cached pods */
    size_t live_pods;          /* pods in the cache when live was built */
    atomic_uint_least64_t binds[EGPU_BIND_RESULTS];
};

const char *egpu_bind_result_name(enum egpu_bind_result r)
{
    static const char *const names[] = {"ok",        "bad_request", "unknown", "no_fit",
                                        "ambiguous", "annotate",    "binding"};

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
    x->cache = cache;
    x->ops = *ops;
    return x;
}

static void drop_placers(struct egpu_extender *x)
{
    for (int i = 0; i < NPOLICIES; i++) {
        for (int j = 0; j < NPOLICIES; j++) {
            egpu_placer_free(x->placers[i][j]);
            x->placers[i][j] = NULL;
        }
    }
}

void egpu_extender_free(struct egpu_extender *x)
{
    if (x == NULL)
        return;
    drop_placers(x);
    egpu_workload_free(&x->live);
    egpu_free(x);
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

/* ------------------------------------------------------------------------ */
/* Placers and the live target workload (cache lock held)                   */

static void refresh_live_workload(struct egpu_extender *x, struct egpu_cluster *c)
{
    struct egpu_sched_cache_stats st;
    static const struct egpu_typical_pod fallback[] = {
        {.gpu_milli = 250, .ncards = 1, .weight = 1},
        {.gpu_milli = 500, .ncards = 1, .weight = 1},
        {.gpu_milli = 1000, .ncards = 1, .weight = 1},
    };

    (void)c;
    egpu_sched_cache_stats_locked(x->cache, &st);
    if (x->live.n > 0 && st.pods < x->live_pods + WORKLOAD_REFRESH_PODS)
        return;
    drop_placers(x); /* FGD placers borrow the old workload */
    egpu_workload_free(&x->live);
    if (egpu_sched_cache_workload_locked(x->cache, &x->live) != 0 &&
        egpu_workload_from_list(fallback, 3, &x->live) != 0)
        return;
    x->live_pods = st.pods;
}

static struct egpu_placer *placer(struct egpu_extender *x, struct egpu_cluster *c,
                                  enum egpu_policy_kind node, enum egpu_policy_kind card,
                                  struct egpu_error *err)
{
    struct egpu_placer_config pc = {
        .node_policy = node, .card_policy = card, .seed = x->cfg.seed, .memo = true};

    if (node == EGPU_POLICY_FGD || card == EGPU_POLICY_FGD) {
        if (x->cfg.workload == NULL)
            refresh_live_workload(x, c);
        pc.workload = x->cfg.workload ? x->cfg.workload : &x->live;
    }
    if (x->placers[node][card] == NULL)
        x->placers[node][card] = egpu_placer_new(&pc, err);
    return x->placers[node][card];
}

static struct egpu_placer *placer_for(struct egpu_extender *x, struct egpu_cluster *c,
                                      const struct egpu_sched_pod *p, struct egpu_error *err)
{
    return placer(x, c, p->has_node_policy ? p->node_policy : x->cfg.node_policy,
                  p->has_card_policy ? p->card_policy : x->cfg.card_policy, err);
}

/* ------------------------------------------------------------------------ */
/* ExtenderArgs                                                              */

struct args {
    json_t *root;
    struct egpu_sched_pod pod;
    const json_t *names; /* NodeNames array, or NULL */
    const json_t *items; /* Nodes.items array, or NULL */
};

static const char *node_name_at(const struct args *a, size_t i)
{
    if (a->names != NULL)
        return json_string_value(json_array_get(a->names, i));
    return json_string_value(
        json_object_get(json_object_get(json_array_get(a->items, i), "metadata"), "name"));
}

static size_t node_count(const struct args *a)
{
    return json_array_size(a->names ? a->names : a->items);
}

/* Parse ExtenderArgs. Returns 0, or an HTTP status with the reply written. */
static int parse_args(const char *body, size_t len, struct args *a, struct egpu_buf *reply)
{
    struct egpu_error err = {0};
    json_error_t jerr;
    const json_t *nodes;
    char msg[EGPU_ERRMSG_MAX + 64];

    a->root = json_loadb(body, len, 0, &jerr);
    if (!json_is_object(a->root)) {
        snprintf(msg, sizeof(msg), "ExtenderArgs: %s%s",
                 a->root ? "must be a JSON object" : "malformed JSON: ", a->root ? "" : jerr.text);
        json_decref(a->root);
        return reply_error(reply, 400, msg);
    }
    if (egpu_sched_pod_parse(json_object_get(a->root, "Pod"), &a->pod, &err) != 0) {
        snprintf(msg, sizeof(msg), "ExtenderArgs.Pod: %s", err.msg);
        json_decref(a->root);
        return reply_error(reply, 400, msg);
    }
    a->names = json_object_get(a->root, "NodeNames");
    nodes = json_object_get(a->root, "Nodes");
    a->items = json_is_object(nodes) ? json_object_get(nodes, "items") : NULL;
    if (json_is_null(a->names))
        a->names = NULL;
    if (a->names != NULL && !json_is_array(a->names))
        snprintf(msg, sizeof(msg), "ExtenderArgs.NodeNames: must be an array of strings or null");
    else if (a->names == NULL && !json_is_array(a->items))
        snprintf(msg, sizeof(msg), "ExtenderArgs: NodeNames and Nodes.items are both missing");
    else
        msg[0] = '\0';
    for (size_t i = 0; msg[0] == '\0' && i < node_count(a); i++) {
        const char *n = node_name_at(a, i);

        if (n == NULL || n[0] == '\0')
            snprintf(msg, sizeof(msg), "ExtenderArgs.%s[%zu]: node name missing",
                     a->names ? "NodeNames" : "Nodes.items", i);
    }
    if (msg[0] != '\0') {
        json_decref(a->root);
        return reply_error(reply, 400, msg);
    }
    return 0;
}

static bool synced(struct egpu_extender *x)
{
    return x->ops.synced == NULL || x->ops.synced(x->ops.data);
}

/* The pod's allowed-model mask in cluster c (adds unknown names to it). */
static int model_mask(struct egpu_cluster *c, struct egpu_sched_pod *p, struct egpu_error *err)
{
    return egpu_cluster_model_mask(c, p->gpu_model, &p->req.model_mask, err);
}

int egpu_extender_filter(struct egpu_extender *x, const char *body, size_t len,
                         struct egpu_buf *reply)
{
    struct args a;
    json_t *out, *failed, *passed;
    struct egpu_error err = {0};
    struct egpu_placer *p = NULL;
    struct egpu_cluster *c;
    int status;

    if (!synced(x))
        return reply_json(reply,
                          json_pack("{s:n,s:n,s:n,s:n,s:s}", "Nodes", "NodeNames", "FailedNodes",
                                    "FailedAndUnresolvableNodes", "Error",
                                    "elastic-gpu extender: node cache not synced yet"),
                          503);
    status = parse_args(body, len, &a, reply);
    if (status)
        return status;
    failed = json_object();
    passed = json_array();
    c = egpu_sched_cache_lock(x->cache);
    if (egpu_sched_pod_wants_gpu(&a.pod)) {
        if (model_mask(c, &a.pod, &err) == 0)
            p = placer_for(x, c, &a.pod, &err);
        if (p == NULL) {
            egpu_sched_cache_unlock(x->cache);
            json_decref(failed);
            json_decref(passed);
            json_decref(a.root);
            return reply_error(reply, 400, err.msg);
        }
    }
    for (size_t i = 0; i < node_count(&a); i++) {
        const char *name = node_name_at(&a, i);
        const struct egpu_node *n = egpu_cluster_node(c, name);
        char why[512];

        if (p == NULL) { /* no GPU asked: not ours to judge */
            json_array_append_new(passed, json_integer((json_int_t)i));
        } else if (n == NULL) {
            json_object_set_new(failed, name,
                                json_string("node unknown to the elastic-gpu cache (no Node "
                                            "object seen)"));
        } else if (egpu_placer_can_host(p, c, n, &a.pod.req, NULL, NULL, 0)) {
            /* Asked without a reason first: that answer comes from the
             * placer's per-node cache; only refusals pay for the text. */
            json_array_append_new(passed, json_integer((json_int_t)i));
        } else {
            (void)egpu_placer_can_host(p, c, n, &a.pod.req, NULL, why, sizeof(why));
            json_object_set_new(failed, name, json_string(why));
        }
    }
    egpu_sched_cache_unlock(x->cache);
    out = json_pack("{s:n,s:n,s:o,s:{},s:s}", "Nodes", "NodeNames", "FailedNodes", failed,
                    "FailedAndUnresolvableNodes", "Error", "");
    if (out != NULL) {
        json_t *list = json_array();
        size_t k;
        json_t *idx;

        json_array_foreach(passed, k, idx)
        {
            size_t i = (size_t)json_integer_value(idx);

            json_array_append(list,
                              a.names ? json_array_get(a.names, i) : json_array_get(a.items, i));
        }
        if (a.names != NULL)
            json_object_set_new(out, "NodeNames", list);
        else
            json_object_set_new(out, "Nodes", json_pack("{s:{},s:o}", "metadata", "items", list));
    }
    json_decref(passed);
    json_decref(a.root);
    return out ? reply_json(reply, out, 200) : 500;
}

int egpu_extender_prioritize(struct egpu_extender *x, const char *body, size_t len,
                             struct egpu_buf *reply)
{
    struct args a;
    struct egpu_error err = {0};
    struct egpu_placer *p = NULL;
    struct egpu_cluster *c;
    double *scores;
    bool *ok;
    double lo = 0, hi = 0;
    bool any = false;
    json_t *out;
    size_t n;
    int status;

    if (!synced(x))
        return reply_error(reply, 503, "elastic-gpu extender: node cache not synced yet");
    status = parse_args(body, len, &a, reply);
    if (status)
        return status;
    n = node_count(&a);
    scores = egpu_calloc(n ? n : 1, sizeof(*scores));
    ok = egpu_calloc(n ? n : 1, sizeof(*ok));
    out = json_array();
    if (scores == NULL || ok == NULL || out == NULL) {
        egpu_free(scores);
        egpu_free(ok);
        json_decref(out);
        json_decref(a.root);
        return 500;
    }
    c = egpu_sched_cache_lock(x->cache);
    if (egpu_sched_pod_wants_gpu(&a.pod) && model_mask(c, &a.pod, &err) == 0)
        p = placer_for(x, c, &a.pod, &err);
    for (size_t i = 0; p != NULL && i < n; i++) {
        const struct egpu_node *node = egpu_cluster_node(c, node_name_at(&a, i));

        ok[i] = node && egpu_placer_score(p, c, node, &a.pod.req, &scores[i], NULL) == 0;
        if (ok[i]) {
            lo = any && lo < scores[i] ? lo : scores[i];
            hi = any && hi > scores[i] ? hi : scores[i];
            any = true;
        }
    }
    egpu_sched_cache_unlock(x->cache);
    /* Map the policy's scale onto 0..10 (MaxExtenderPriority): best = 10,
     * worst feasible = 0 (all 10 when they tie); nodes that cannot host
     * the pod, and every node for a pod without GPUs, score 0. */
    for (size_t i = 0; i < n; i++) {
        long long s = 0;

        if (ok[i])
            s = hi > lo ? (long long)(10.0 * (scores[i] - lo) / (hi - lo) + 0.5) : 10;
        json_array_append_new(
            out, json_pack("{s:s,s:I}", "Host", node_name_at(&a, i), "Score", (json_int_t)s));
    }
    egpu_free(scores);
    egpu_free(ok);
    json_decref(a.root);
    return reply_json(reply, out, 200);
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
    char msg[2048], *text = NULL;
    enum egpu_bind_result result = EGPU_BIND_OK;
    int status = 200;

    if (parse_bind(body, len, &b, msg, sizeof(msg)) != 0)
        return bind_fail(x, EGPU_BIND_BAD_REQUEST, reply, 400, msg);
    pod = egpu_malloc(sizeof(*pod));
    assigned = egpu_malloc(sizeof(*assigned));
    if (pod == NULL || assigned == NULL) {
        egpu_free(pod);
        egpu_free(assigned);
        return reply_error(reply, 500, "out of memory");
    }
    c = egpu_sched_cache_lock(x->cache);
    node = egpu_cluster_node(c, b.node);
    if (egpu_sched_cache_pod_locked(x->cache, b.ns, b.name) == NULL) {
        snprintf(msg, sizeof(msg), "pod %s/%s is not in the elastic-gpu cache", b.ns, b.name);
        result = EGPU_BIND_UNKNOWN;
        status = 404;
    } else if (node == NULL) {
        snprintf(msg, sizeof(msg), "node %s is not in the elastic-gpu cache", b.node);
        result = EGPU_BIND_UNKNOWN;
        status = 404;
    } else {
        *pod = *egpu_sched_cache_pod_locked(x->cache, b.ns, b.name);
        if (b.uid[0] && pod->uid[0] && strcmp(b.uid, pod->uid) != 0) {
            snprintf(msg, sizeof(msg), "pod %s/%s has uid %s, not %s", b.ns, b.name, pod->uid,
                     b.uid);
            result = EGPU_BIND_UNKNOWN;
            status = 404;
        }
    }
    if (result == EGPU_BIND_OK && egpu_sched_pod_wants_gpu(pod)) {
        p = model_mask(c, pod, &err) == 0 ? placer_for(x, c, pod, &err) : NULL;
        if (p == NULL) {
            snprintf(msg, sizeof(msg), "pod %s/%s: %s", b.ns, b.name, err.msg);
            result = EGPU_BIND_BAD_REQUEST;
        } else if (!egpu_placer_can_host(p, c, node, &pod->req, &pick, msg, sizeof(msg))) {
            result = EGPU_BIND_NO_FIT;
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
    if (egpu_sched_pod_wants_gpu(pod)) {
        text = egpu_assigned_encode(assigned);
        if (text == NULL ||
            x->ops.annotate(x->ops.data, b.ns, b.name, EGPU_ANN_ASSIGNED, text, &err) != 0) {
            snprintf(msg, sizeof(msg), "annotating pod %s/%s: %s", b.ns, b.name,
                     text ? err.msg : "out of memory");
            (void)egpu_sched_cache_unreserve(x->cache, b.ns, b.name);
            result = EGPU_BIND_ANNOTATE;
            goto out;
        }
    }
    if (x->ops.bind(x->ops.data, b.ns, b.name, b.uid, b.node, &err) != 0) {
        struct egpu_error uerr = {0};

        snprintf(msg, sizeof(msg), "binding pod %s/%s to %s: %s", b.ns, b.name, b.node, err.msg);
        result = EGPU_BIND_BINDING;
        if (egpu_sched_pod_wants_gpu(pod)) {
            if (x->ops.annotate(x->ops.data, b.ns, b.name, EGPU_ANN_ASSIGNED, NULL, &uerr) != 0)
                egpu_log(EGPU_LOG_WARN, "could not remove annotation pod=%s/%s error=\"%s\"", b.ns,
                         b.name, uerr.msg);
            (void)egpu_sched_cache_unreserve(x->cache, b.ns, b.name);
        }
    }
out:
    egpu_free(text);
    egpu_free(pod);
    egpu_free(assigned);
    if (result != EGPU_BIND_OK)
        return bind_fail(x, result, reply, status, msg);
    atomic_fetch_add(&x->binds[EGPU_BIND_OK], 1);
    egpu_log(EGPU_LOG_INFO, "bound pod=%s/%s node=%s", b.ns, b.name, b.node);
    return reply_json(reply, json_pack("{s:s}", "Error", ""), 200);
}
