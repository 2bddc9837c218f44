/* controller/gpustatus.c - GPU.status.allocated, kept current from the
 * scheduler's decisions.
 *
 * Source of truth: the elasticgpu.io/assigned annotation of each pod, which
 * only egpu-scheduler's bind writes (deploy/admission's policy refuses
 * anyone else setting or changing it), decoded with src/api's
 * egpu_assigned_decode, and the pod's egpuc.elasticgpu.io/<container>
 * annotations for the claim (egpu_api_pod_claims). The claim is shown as
 * the pod says: it is what the webhook resolved the container's request
 * from, and it changes nothing but the column.
 *
 * Two parts. The pure one (egpu/controller.h) turns a pod into its entries
 * per card and keeps an index of them: card key "<node>/<uuid>" -> pod ->
 * entries, and card key -> GPU object name. The I/O one (egpu__controller_gs_*) feeds
 * the index from the informers' pod and GPU events, queues "g/<card key>"
 * for each card whose entries changed (a pod event touches only the cards
 * it names, and only when its entries changed: a status update of a
 * running pod queues nothing), and on the worker merge-patches the GPU's
 * status.allocated only when it differs from what it should be. The queue
 * coalesces: a card dirtied many times before the worker reaches it is
 * written once. Only the leader's worker writes; the index is kept by every
 * instance, so a new leader writes at once.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller_int.h"
#include "egpu/controller.h"
#include "egpu/log.h"

#define POD_KEY_MAX (EGPU_NAMESPACE_MAX + EGPU_K8S_NAME_MAX + 1)

static const char *str_at(const json_t *o, const char *a, const char *b)
{
    const json_t *v = json_object_get(o, a);

    return egpu_api_str(b != NULL ? json_object_get(v, b) : v);
}

/* ------------------------------------------------------------------------ */
/* The pure part                                                            */

static int card_key(const char *node, const char *uuid, char *key, size_t len)
{
    int n = snprintf(key, len, "%s/%s", node, uuid);

    return n > 0 && (size_t)n < len ? 0 : -ENAMETOOLONG;
}

static json_t *entry_new(const char *ns, const char *pod, const char *uid,
                         const struct egpu_assigned_container *ac, const char *claim)
{
    json_t *e =
        json_pack("{s:s, s:s, s:s, s:I, s:I}", "namespace", ns, "pod", pod, "container", ac->name,
                  "core", (json_int_t)ac->core_pct, "memory", (json_int_t)ac->mem_mib);

    if (e == NULL)
        return NULL;
    if ((uid != NULL && json_object_set_new(e, "podUID", json_string(uid)) != 0) ||
        (claim != NULL && json_object_set_new(e, "claim", json_string(claim)) != 0)) {
        json_decref(e);
        return NULL;
    }
    return e;
}

static int add_entries(json_t *res, const char *ns, const char *name, const char *uid,
                       const struct egpu_assigned *a, const struct egpu_api_pod_claim *pc,
                       size_t npc, struct egpu_error *err)
{
    for (uint32_t i = 0; i < a->ncontainers; i++) {
        const struct egpu_assigned_container *ac = &a->containers[i];
        const char *claim = egpu_api_pod_claim_of(pc, npc, ac->name);

        for (uint32_t g = 0; g < ac->ncards; g++) {
            char key[EGPU_CONTROLLER_CARD_KEY_MAX];
            json_t *list, *e;

            if (card_key(a->node, a->uuids[ac->first_card + g], key, sizeof(key)) != 0)
                return egpu_error_set(err, EGPU_ERANGE, "%s: node and UUID over %d characters",
                                      EGPU_ANN_ASSIGNED, EGPU_CONTROLLER_CARD_KEY_MAX - 2);
            list = json_object_get(res, key);
            if (list == NULL) {
                list = json_array();
                if (list == NULL || json_object_set_new(res, key, list) != 0)
                    return -ENOMEM;
            }
            e = entry_new(ns, name, uid, ac, claim);
            if (e == NULL || json_array_append_new(list, e) != 0)
                return -ENOMEM;
        }
    }
    return 0;
}

int egpu_controller_pod_holds(const json_t *pod, struct egpu_assigned *a,
                              struct egpu_api_pod_claim *pc, size_t max, size_t *npc,
                              struct egpu_error *err)
{
    const json_t *ann = json_object_get(json_object_get(pod, "metadata"), "annotations");
    const char *text = egpu_api_str(json_object_get(ann, EGPU_ANN_ASSIGNED));
    const char *bound = str_at(pod, "spec", "nodeName");
    struct egpu_error cerr = {0};
    int rc;

    a->ncontainers = 0;
    a->ncards = 0;
    *npc = 0;
    if (text == NULL || str_at(pod, "metadata", "namespace") == NULL ||
        str_at(pod, "metadata", "name") == NULL || bound == NULL || bound[0] == '\0' ||
        egpu_api_pod_finished(pod))
        return 0; /* not bound, finished, or never scheduled by us */
    rc = egpu_assigned_decode(text, a, err);
    if (rc == 0 && strcmp(a->node, bound) != 0)
        rc = egpu_error_set(err, EGPU_ERANGE,
                            "%s: node: \"%.64s\", but the pod is bound to node \"%.64s\"",
                            EGPU_ANN_ASSIGNED, a->node, bound);
    if (rc != 0) {
        a->ncontainers = 0;
        a->ncards = 0;
        return rc;
    }
    if (egpu_api_pod_claims(pod, pc, max, npc, &cerr) != 0)
        *npc = 0; /* the webhook refuses such pods; the allocation still counts */
    return 0;
}

int egpu_controller_pod_gpu_entries(const json_t *pod, json_t **out, struct egpu_error *err)
{
    const char *ns = str_at(pod, "metadata", "namespace");
    const char *name = str_at(pod, "metadata", "name");
    struct egpu_api_pod_claim *pc = NULL;
    struct egpu_assigned *a = NULL;
    json_t *res = json_object();
    size_t npc = 0;
    int rc = 0;

    *out = NULL;
    if (res == NULL)
        return egpu_error_set(err, -ENOMEM, "GPU status: out of memory");
    a = egpu_malloc(sizeof(*a));
    pc = egpu_calloc(EGPU_API_POD_CLAIMS_MAX, sizeof(*pc));
    if (a == NULL || pc == NULL) {
        rc = egpu_error_set(err, -ENOMEM, "GPU status: out of memory");
        goto out;
    }
    rc = egpu_controller_pod_holds(pod, a, pc, EGPU_API_POD_CLAIMS_MAX, &npc, err);
    if (rc == 0 && a->ncontainers > 0)
        rc = add_entries(res, ns, name, str_at(pod, "metadata", "uid"), a, pc, npc, err);
    if (rc == -ENOMEM)
        egpu_error_set(err, rc, "GPU status: out of memory");
out:
    egpu_free(a);
    egpu_free(pc);
    if (rc != 0) {
        json_decref(res);
        res = rc == -ENOMEM ? NULL : json_object();
        if (res == NULL)
            rc = -ENOMEM;
    }
    *out = res;
    return rc;
}

static int cmp_str(const json_t *a, const json_t *b, const char *k)
{
    const char *x = egpu_api_str(json_object_get(a, k)), *y = egpu_api_str(json_object_get(b, k));

    return strcmp(x != NULL ? x : "", y != NULL ? y : "");
}

static int cmp_int(const json_t *a, const json_t *b, const char *k)
{
    json_int_t x = json_integer_value(json_object_get(a, k));
    json_int_t y = json_integer_value(json_object_get(b, k));

    return (x > y) - (x < y);
}

static int cmp_entry(const void *pa, const void *pb)
{
    const json_t *a = *(const json_t *const *)pa, *b = *(const json_t *const *)pb;
    int c = cmp_str(a, b, "namespace");

    if (c == 0)
        c = cmp_str(a, b, "pod");
    if (c == 0)
        c = cmp_str(a, b, "container");
    if (c == 0)
        c = cmp_str(a, b, "podUID");
    if (c == 0)
        c = cmp_int(a, b, "core");
    if (c == 0)
        c = cmp_int(a, b, "memory");
    if (c == 0)
        c = cmp_str(a, b, "claim");
    return c;
}

int egpu_controller_gpu_allocated_sort(json_t *list)
{
    size_t n = json_array_size(list);
    json_t **v;

    if (!json_is_array(list))
        return -EINVAL;
    if (n < 2)
        return 0;
    v = egpu_malloc(n * sizeof(*v));
    if (v == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        v[i] = json_incref(json_array_get(list, i));
    qsort(v, n, sizeof(*v), cmp_entry);
    for (size_t i = 0; i < n; i++)
        (void)json_array_set_new(list, i, v[i]); /* in place: never fails */
    egpu_free(v);
    return 0;
}

bool egpu_controller_gpu_allocated_equal(const json_t *a, const json_t *b)
{
    bool a_none = a == NULL || json_is_null(a) || (json_is_array(a) && json_array_size(a) == 0);
    bool b_none = b == NULL || json_is_null(b) || (json_is_array(b) && json_array_size(b) == 0);

    if (a_none || b_none)
        return a_none && b_none;
    return json_equal((json_t *)a, (json_t *)b) != 0;
}

struct egpu_controller_gpu_index {
    pthread_mutex_t lock;
    json_t *pods;  /* "ns/name" -> {card key: [entries]}, only pods with entries */
    json_t *cards; /* card key -> {"ns/name": [entries]} */
    json_t *gpus;  /* card key -> GPU object name */
};

struct egpu_controller_gpu_index *egpu_controller_gpu_index_new(void)
{
    struct egpu_controller_gpu_index *ix = egpu_calloc(1, sizeof(*ix));

    if (ix == NULL)
        return NULL;
    ix->pods = json_object();
    ix->cards = json_object();
    ix->gpus = json_object();
    if (ix->pods == NULL || ix->cards == NULL || ix->gpus == NULL) {
        egpu_controller_gpu_index_free(ix);
        return NULL;
    }
    pthread_mutex_init(&ix->lock, NULL);
    return ix;
}

void egpu_controller_gpu_index_free(struct egpu_controller_gpu_index *ix)
{
    if (ix == NULL)
        return;
    if (ix->pods != NULL && ix->cards != NULL && ix->gpus != NULL)
        pthread_mutex_destroy(&ix->lock);
    json_decref(ix->pods);
    json_decref(ix->cards);
    json_decref(ix->gpus);
    egpu_free(ix);
}

/* Under the lock: card key's entries of pod pk become list (NULL: none). */
static int card_set(struct egpu_controller_gpu_index *ix, const char *key, const char *pk,
                    json_t *list)
{
    json_t *card = json_object_get(ix->cards, key);

    if (list == NULL) {
        (void)json_object_del(card, pk);
        if (card != NULL && json_object_size(card) == 0)
            (void)json_object_del(ix->cards, key);
        return 0;
    }
    if (card == NULL) {
        card = json_object();
        if (card == NULL || json_object_set_new(ix->cards, key, card) != 0)
            return -ENOMEM;
    }
    return json_object_set(card, pk, list) != 0 ? -ENOMEM : 0;
}

int egpu_controller_gpu_index_pod(struct egpu_controller_gpu_index *ix, const char *ns,
                                  const char *name, const json_t *pod, json_t **touched,
                                  struct egpu_error *err)
{
    char pk[POD_KEY_MAX];
    json_t *now = NULL, *old, *changed = json_array(), *list;
    const char *key;
    int rc = 0, mrc = 0;

    if (touched != NULL)
        *touched = NULL;
    if (changed == NULL)
        return egpu_error_set(err, -ENOMEM, "GPU status: out of memory");
    if (ns == NULL || name == NULL ||
        snprintf(pk, sizeof(pk), "%s/%s", ns, name) >= (int)sizeof(pk)) {
        json_decref(changed);
        return egpu_error_set(err, -EINVAL,
                              "GPU status: pod namespace or name missing or too long");
    }
    if (pod != NULL)
        rc = egpu_controller_pod_gpu_entries(pod, &now, err);
    else
        now = json_object();
    if (now == NULL) {
        json_decref(changed);
        return rc != 0 ? rc : egpu_error_set(err, -ENOMEM, "GPU status: out of memory");
    }
    pthread_mutex_lock(&ix->lock);
    old = json_incref(json_object_get(ix->pods, pk));
    json_object_foreach(old, key, list)
    {
        json_t *want = json_object_get(now, key);

        if (want == NULL || !json_equal(list, want)) {
            mrc |= json_array_append_new(changed, json_string(key));
            if (want == NULL)
                (void)card_set(ix, key, pk, NULL);
        }
    }
    json_object_foreach(now, key, list)
    {
        json_t *had = json_object_get(old, key);

        if (had != NULL && json_equal(had, list))
            continue;
        if (had == NULL)
            mrc |= json_array_append_new(changed, json_string(key));
        mrc |= card_set(ix, key, pk, list);
    }
    if (json_object_size(now) > 0)
        mrc |= json_object_set(ix->pods, pk, now);
    else
        (void)json_object_del(ix->pods, pk);
    pthread_mutex_unlock(&ix->lock);
    json_decref(old);
    json_decref(now);
    if (mrc != 0) {
        json_decref(changed);
        return egpu_error_set(err, -ENOMEM, "GPU status: out of memory");
    }
    if (touched != NULL)
        *touched = changed;
    else
        json_decref(changed);
    return rc;
}

int egpu_controller_gpu_index_gpu(struct egpu_controller_gpu_index *ix, const json_t *gpu,
                                  bool deleted, char *key, size_t len, struct egpu_error *err)
{
    const char *name = str_at(gpu, "metadata", "name");
    const char *node = str_at(gpu, "spec", "nodeName");
    const char *uuid = str_at(gpu, "spec", "uuid");
    int rc = 0;

    if (name == NULL || node == NULL || uuid == NULL || name[0] == '\0' || node[0] == '\0' ||
        uuid[0] == '\0' || card_key(node, uuid, key, len) != 0 ||
        strlen(key) >= EGPU_CONTROLLER_CARD_KEY_MAX)
        return egpu_error_set(err, EGPU_ESYNTAX,
                              "GPU %.64s: metadata.name, spec.nodeName or spec.uuid missing or "
                              "too long",
                              name != NULL ? name : "(no name)");
    pthread_mutex_lock(&ix->lock);
    if (deleted) {
        const char *was = egpu_api_str(json_object_get(ix->gpus, key));

        if (was != NULL && strcmp(was, name) == 0)
            (void)json_object_del(ix->gpus, key);
    } else if (json_object_set_new(ix->gpus, key, json_string(name)) != 0) {
        rc = egpu_error_set(err, -ENOMEM, "GPU status: out of memory");
    }
    pthread_mutex_unlock(&ix->lock);
    return rc;
}

bool egpu_controller_gpu_index_gpu_name(struct egpu_controller_gpu_index *ix, const char *key,
                                        char *name, size_t len)
{
    bool found = false;
    const char *s;

    pthread_mutex_lock(&ix->lock);
    s = egpu_api_str(json_object_get(ix->gpus, key));
    if (s != NULL && strlen(s) < len) {
        memcpy(name, s, strlen(s) + 1);
        found = true;
    }
    pthread_mutex_unlock(&ix->lock);
    return found;
}

json_t *egpu_controller_gpu_index_cards(struct egpu_controller_gpu_index *ix)
{
    json_t *keys = json_array(), *v;
    const char *key;

    if (keys == NULL)
        return NULL;
    pthread_mutex_lock(&ix->lock);
    json_object_foreach(ix->gpus, key, v)
    {
        if (json_array_append_new(keys, json_string(key)) != 0) {
            json_decref(keys);
            keys = NULL;
            break;
        }
    }
    pthread_mutex_unlock(&ix->lock);
    return keys;
}

json_t *egpu_controller_gpu_index_allocated(struct egpu_controller_gpu_index *ix, const char *key)
{
    json_t *all = json_array(), *list;
    const char *pk;
    int rc = all == NULL;

    if (all == NULL)
        return NULL;
    pthread_mutex_lock(&ix->lock);
    json_object_foreach(json_object_get(ix->cards, key), pk, list)
    {
        rc |= json_array_extend(all, list);
    }
    pthread_mutex_unlock(&ix->lock);
    if (rc != 0 || egpu_controller_gpu_allocated_sort(all) != 0) {
        json_decref(all);
        return NULL;
    }
    return all;
}

/* ------------------------------------------------------------------------ */
/* The controller's side                                                    */

static void enqueue_card(struct egpu__controller *c, const char *key)
{
    char qkey[EGPU_CONTROLLER_CARD_KEY_MAX + 2];

    snprintf(qkey, sizeof(qkey), "g/%s", key);
    (void)egpu_controller_queue_add(c->queue, qkey);
}

int egpu__controller_gs_init(struct egpu__controller *c, struct egpu_error *err)
{
    const struct egpu_service_metric m[] = {
        {EGPU_SERVICE_COUNTER, "egpu_controller_gpu_status_writes_total",
         "Merge patches of a GPU object's status.allocated that the API server accepted.", 0, NULL,
         0, NULL, &c->m_gs_writes},
        {EGPU_SERVICE_COUNTER, "egpu_controller_gpu_status_errors_total",
         "Merge patches of a GPU object's status.allocated that failed (retried with backoff).", 0,
         NULL, 0, NULL, &c->m_gs_errors},
    };

    c->gs = egpu_controller_gpu_index_new();
    if (c->gs == NULL)
        return egpu_error_set(err, -ENOMEM, "GPU status: out of memory");
    return egpu_service_metrics_add(c->reg, m, sizeof(m) / sizeof(m[0]), err);
}

void egpu__controller_gs_free(struct egpu__controller *c)
{
    egpu_controller_gpu_index_free(c->gs);
    c->gs = NULL;
}

void egpu__controller_gs_pod(struct egpu__controller *c, const json_t *pod, bool deleted)
{
    const char *ns = str_at(pod, "metadata", "namespace"), *name = str_at(pod, "metadata", "name");
    struct egpu_error err = {0};
    json_t *touched = NULL, *k;
    size_t i;
    int rc;

    if (c->gs == NULL)
        return;
    rc = egpu_controller_gpu_index_pod(c->gs, ns, name, deleted ? NULL : pod, &touched, &err);
    if (rc)
        egpu_log(rc == -ENOMEM ? EGPU_LOG_ERROR : EGPU_LOG_WARN,
                 "pod's GPU allocation not counted pod=%s/%s error=\"%s\"", ns ? ns : "",
                 name ? name : "", err.msg);
    json_array_foreach(touched, i, k) enqueue_card(c, json_string_value(k));
    json_decref(touched);
}

void egpu__controller_gs_gpu(struct egpu__controller *c, const json_t *old, const json_t *gpu,
                             bool deleted)
{
    char key[EGPU_CONTROLLER_CARD_KEY_MAX];
    struct egpu_error err = {0};

    if (c->gs == NULL)
        return;
    if (old != NULL &&
        egpu_controller_gpu_index_gpu(c->gs, old, true, key, sizeof(key), &err) == 0 && !deleted)
        enqueue_card(c, key); /* its UUID may have changed: both cards */
    if (egpu_controller_gpu_index_gpu(c->gs, gpu, deleted, key, sizeof(key), &err) != 0) {
        egpu_log(EGPU_LOG_WARN, "GPU object left out of GPU status error=\"%s\"", err.msg);
        return;
    }
    if (!deleted)
        enqueue_card(c, key);
}

void egpu__controller_gs_enqueue_all(struct egpu__controller *c)
{
    json_t *keys = c->gs != NULL ? egpu_controller_gpu_index_cards(c->gs) : NULL, *k;
    size_t i;

    json_array_foreach(keys, i, k) enqueue_card(c, json_string_value(k));
    json_decref(keys);
}

int egpu__controller_gs_sync(struct egpu__controller *c, const char *key)
{
    char name[EGPU_K8S_NAME_MAX], want_key[EGPU_CONTROLLER_CARD_KEY_MAX];
    struct egpu_error err = {0};
    json_t *gpu, *want = NULL, *patch = NULL;
    int rc = 0;

    if (!egpu_controller_gpu_index_gpu_name(c->gs, key, name, sizeof(name)))
        return 0; /* no GPU object for this card (yet): its add queues it */
    gpu = egpu_kube_informer_get(c->inf[EGPU__CONTROLLER_GPUS], NULL, name);
    if (gpu == NULL ||
        card_key(str_at(gpu, "spec", "nodeName") ? str_at(gpu, "spec", "nodeName") : "",
                 str_at(gpu, "spec", "uuid") ? str_at(gpu, "spec", "uuid") : "", want_key,
                 sizeof(want_key)) != 0 ||
        strcmp(want_key, key) != 0)
        goto out; /* gone or changed since: its event queues what it holds now */
    want = egpu_controller_gpu_index_allocated(c->gs, key);
    if (want == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    if (egpu_controller_gpu_allocated_equal(
            json_object_get(json_object_get(gpu, "status"), "allocated"), want))
        goto out;
    patch = json_pack("{s:{s:O}}", "status", "allocated", want);
    if (patch == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    rc = egpu_kube_patch_status(c->kube, &egpu_kube_gpus, NULL, name, EGPU_KUBE_MERGE_PATCH, patch,
                                NULL, NULL, &err);
    if (rc == -ENOENT) {
        rc = 0; /* deleted meanwhile: its allocations went with it */
    } else if (rc) {
        (void)egpu_metric_inc(c->m_gs_errors, NULL);
        egpu_log(EGPU_LOG_WARN, "GPU status not written gpu=%s error=\"%s\"", name, err.msg);
    } else {
        (void)egpu_metric_inc(c->m_gs_writes, NULL);
        egpu_log(EGPU_LOG_INFO, "GPU status written gpu=%s allocated=%zu", name,
                 json_array_size(want));
    }
out:
    json_decref(patch);
    json_decref(want);
    json_decref(gpu);
    return rc;
}
