/* controller/index.c - what the worker keeps between reconciles, so that
 * provisioning costs O(cards considered) instead of rebuilding everything
 * from the caches for every claim:
 *   - one placement inventory per class (egpu_controller_inventory: its cards,
 *     every ElasticGPU's reservation counted), built on first use and kept;
 *   - the claim uid each ElasticGPU's claimRef names, and the other way;
 *   - the names of the Available ElasticGPUs (what binding chooses from).
 * The informers' threads only note what changed (an ElasticGPU's name, or
 * "capacity": a GPU, Node or class whose placement-relevant fields moved)
 * under a mutex; the worker applies the notes before it reads (refresh),
 * reading each noted ElasticGPU's current state from the cache. So the
 * cache stays the one truth and the index follows it one refresh behind.
 * A capacity change drops the inventories (rebuilt on next use: GPU and
 * Node objects change rarely, and never on the hot path of provisioning).
 * ElasticGPUs this controller creates are counted at once (assumed), before
 * their watch event, so the next claim never lands in the same room.
 *
 * Pods count too: the pod informer's events (the one gpustatus.c reads)
 * note a pod's key; refresh reads the noted pods from the cache and counts
 * what each holds (egpu_controller_pod_holds, the same reading as GPU status) in
 * every inventory, in O(its cards): a finished or deleted pod frees its
 * room. A pod that uses a claim is counted inside the claim's ElasticGPU
 * (egpu_controller_inventory_count_pod); so, as the scheduler's cache parks a
 * claim's users, a change of an ElasticGPU first uncounts the pods of the
 * claim(s) it serves, then counts them again once it is applied.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "controller_int.h"
#include "egpu/log.h"

struct cls_inv {
    char name[EGPU_K8S_NAME_MAX];
    struct egpu_controller_inventory inv;
};

struct egpu__controller_index {
    pthread_mutex_t mu;
    json_t *changed;      /* under mu: ElasticGPU name -> true (deleted) or false */
    bool dirty;           /* under mu: capacity changed, inventories to rebuild */
    bool lost;            /* under mu: a note was lost (out of memory): start again */
    json_t *pods_changed; /* under mu: pod key "<ns>/<name>" -> true (deleted) or false */
    bool pods_lost;       /* under mu: a pod note was lost: read every pod again */
    /* the worker's */
    bool ready;        /* every ElasticGPU of the cache applied once */
    json_t *uid_of;    /* ElasticGPU name -> its claimRef's uid */
    json_t *by_uid;    /* claim uid -> ElasticGPU name */
    json_t *available; /* names of Available ElasticGPUs -> true */
    json_t *claim_of;  /* ElasticGPU name -> "<ns>/<claim>" of its claimRef */
    size_t ninv;
    struct cls_inv *invs;
    struct egpu_api_egpu *scratch;
    bool pods_ready;               /* every pod of the cache read once */
    json_t *pods;                  /* pod key -> ["<ns>/<claim>", ...]: pods that hold cards */
    json_t *claim_pods;            /* "<ns>/<claim>" -> {pod key: true}: who uses each claim */
    struct egpu_assigned *pa;      /* scratch: a pod's decoded annotation */
    struct egpu_api_pod_claim *pc; /* scratch: its claims */
    size_t npc;
};

int egpu__controller_index_new(struct egpu__controller *c)
{
    struct egpu__controller_index *x = egpu_calloc(1, sizeof(*x));

    if (x == NULL)
        return -ENOMEM;
    pthread_mutex_init(&x->mu, NULL);
    x->changed = json_object();
    x->uid_of = json_object();
    x->by_uid = json_object();
    x->available = json_object();
    x->claim_of = json_object();
    x->scratch = egpu_malloc(sizeof(*x->scratch));
    x->pods_changed = json_object();
    x->pods = json_object();
    x->claim_pods = json_object();
    x->pa = egpu_malloc(sizeof(*x->pa));
    x->pc = egpu_calloc(EGPU_API_POD_CLAIMS_MAX, sizeof(*x->pc));
    c->idx = x;
    if (x->changed == NULL || x->uid_of == NULL || x->by_uid == NULL || x->available == NULL ||
        x->claim_of == NULL || x->scratch == NULL || x->pods_changed == NULL || x->pods == NULL ||
        x->claim_pods == NULL || x->pa == NULL || x->pc == NULL)
        return -ENOMEM;
    return 0;
}

static void drop_inventories(struct egpu__controller_index *x)
{
    for (size_t i = 0; i < x->ninv; i++)
        egpu_controller_inventory_free(&x->invs[i].inv);
    egpu_free(x->invs);
    x->invs = NULL;
    x->ninv = 0;
}

void egpu__controller_index_free(struct egpu__controller *c)
{
    struct egpu__controller_index *x = c->idx;

    if (x == NULL)
        return;
    drop_inventories(x);
    json_decref(x->changed);
    json_decref(x->uid_of);
    json_decref(x->by_uid);
    json_decref(x->available);
    json_decref(x->claim_of);
    egpu_free(x->scratch);
    json_decref(x->pods_changed);
    json_decref(x->pods);
    json_decref(x->claim_pods);
    egpu_free(x->pa);
    egpu_free(x->pc);
    pthread_mutex_destroy(&x->mu);
    egpu_free(x);
    c->idx = NULL;
}

void egpu__controller_index_note_egpu(struct egpu__controller *c, const char *name, bool deleted)
{
    struct egpu__controller_index *x = c->idx;

    if (x == NULL || name == NULL || name[0] == '\0')
        return;
    pthread_mutex_lock(&x->mu);
    if (json_object_set_new(x->changed, name, json_boolean(deleted)) != 0)
        x->lost = true; /* out of memory: start again from the whole cache */
    pthread_mutex_unlock(&x->mu);
}

void egpu__controller_index_note_pod(struct egpu__controller *c, const json_t *pod, bool deleted)
{
    const json_t *meta = json_object_get(pod, "metadata");
    const char *ns = egpu_api_str(json_object_get(meta, "namespace"));
    const char *name = egpu_api_str(json_object_get(meta, "name"));
    struct egpu__controller_index *x = c->idx;
    char key[EGPU_NAMESPACE_MAX + EGPU_K8S_NAME_MAX + 1];

    if (x == NULL || ns == NULL || name == NULL ||
        snprintf(key, sizeof(key), "%s/%s", ns, name) >= (int)sizeof(key))
        return;
    pthread_mutex_lock(&x->mu);
    if (json_object_set_new(x->pods_changed, key, json_boolean(deleted)) != 0)
        x->pods_lost = true; /* out of memory: read every pod again */
    pthread_mutex_unlock(&x->mu);
}

void egpu__controller_index_note_capacity(struct egpu__controller *c)
{
    struct egpu__controller_index *x = c->idx;

    if (x == NULL)
        return;
    pthread_mutex_lock(&x->mu);
    x->dirty = true;
    pthread_mutex_unlock(&x->mu);
}

/* Do two objects differ in a/b (b NULL: a alone)? */
static bool differs(const json_t *o, const json_t *n, const char *a, const char *b)
{
    const json_t *x = json_object_get(o, a), *y = json_object_get(n, a);

    if (b != NULL) {
        x = json_object_get(x, b);
        y = json_object_get(y, b);
    }
    return !((x == NULL && y == NULL) || (x != NULL && y != NULL && json_equal(x, y)));
}

bool egpu__controller_capacity_changed(const json_t *old, const json_t *obj)
{
    /* GPU: spec and health; Node: labels; class: its fields, and the
     * default-class annotation. Status writes (a GPU's status.allocated, a
     * Node's heartbeat) change none of these. */
    static const char *const parts[][2] = {
        {"spec", NULL},
        {"status", "health"},
        {"metadata", "labels"},
        {"metadata", "annotations"},
        {"metadata", "deletionTimestamp"},
        {"provisioner", NULL},
        {"parameters", NULL},
        {"reclaimPolicy", NULL},
        {"bindingMode", NULL},
    };

    for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
        if (differs(old, obj, parts[i][0], parts[i][1]))
            return true;
    }
    return false;
}

/* Decode pod (NULL: gone) into x->pa and x->pc; false when it holds no
 * cards. */
static bool pod_decode(struct egpu__controller_index *x, const char *key, const json_t *pod)
{
    struct egpu_error err = {0};

    x->pa->ncontainers = 0;
    x->npc = 0;
    if (pod == NULL)
        return false;
    if (egpu_controller_pod_holds(pod, x->pa, x->pc, EGPU_API_POD_CLAIMS_MAX, &x->npc, &err) != 0)
        egpu_log(EGPU_LOG_WARN,
                 "pod's GPU allocation not counted in provisioning pod=%s error=\"%s\"", key,
                 err.msg);
    return x->pa->ncontainers > 0;
}

/* The ElasticGPU serving container i's claim in x->pc (the one whose
 * claimRef names the claim's uid), or NULL. Borrowed from x->by_uid. */
static const char *serving_egpu(struct egpu__controller *c, const char *ns, uint32_t i)
{
    const char *claim =
        egpu_api_pod_claim_of(c->idx->pc, c->idx->npc, c->idx->pa->containers[i].name);
    json_t *obj =
        claim != NULL ? egpu_kube_informer_get(c->inf[EGPU__CONTROLLER_CLAIMS], ns, claim) : NULL;
    const char *uid = egpu_api_str(json_object_get(json_object_get(obj, "metadata"), "uid"));
    const char *name = uid != NULL ? egpu_api_str(json_object_get(c->idx->by_uid, uid)) : NULL;

    json_decref(obj);
    return name;
}

/* Count pod key (decoded in x->pa) in inv. */
static void pod_count_in(struct egpu__controller *c, struct cls_inv *ci, const char *key,
                         const char *ns)
{
    struct egpu__controller_index *x = c->idx;
    const char *egpus[EGPU_CONTAINERS_MAX] = {0};
    struct egpu_error err = {0};

    for (uint32_t i = 0; i < x->pa->ncontainers && i < EGPU_CONTAINERS_MAX; i++)
        egpus[i] = serving_egpu(c, ns, i);
    if (egpu_controller_inventory_count_pod(&ci->inv, key, x->pa, egpus, &err) != 0)
        egpu_log(EGPU_LOG_WARN, "pod not fully counted in class %s: %s", ci->name, err.msg);
}

/* Stop keeping pod key: out of every inventory and the claim map. */
static void pod_forget(struct egpu__controller *c, const char *key)
{
    struct egpu__controller_index *x = c->idx;
    json_t *claims = json_object_get(x->pods, key), *v;
    size_t i;

    for (size_t k = 0; k < x->ninv; k++)
        egpu_controller_inventory_uncount_pod(&x->invs[k].inv, key);
    json_array_foreach(claims, i, v)
    {
        json_t *users = json_object_get(x->claim_pods, json_string_value(v));

        (void)json_object_del(users, key); /* absent: nothing to do */
        if (users != NULL && json_object_size(users) == 0)
            (void)json_object_del(x->claim_pods, json_string_value(v));
    }
    (void)json_object_del(x->pods, key); /* absent: nothing to do */
}

/* Pod key is now pod (NULL: gone): keep it and count it in every inventory
 * when it holds cards. */
static void pod_apply(struct egpu__controller *c, const char *key, const json_t *pod)
{
    struct egpu__controller_index *x = c->idx;
    char ns[EGPU_NAMESPACE_MAX];
    json_t *claims;
    size_t nslen = strcspn(key, "/");

    pod_forget(c, key);
    if (nslen >= sizeof(ns) || !pod_decode(x, key, pod))
        return;
    memcpy(ns, key, nslen);
    ns[nslen] = '\0';
    claims = json_array();
    if (claims == NULL || json_object_set_new(x->pods, key, claims) != 0) {
        x->pods_ready = false; /* out of memory: read every pod again */
        return;
    }
    for (size_t i = 0; i < x->npc; i++) {
        char ck[EGPU_NAMESPACE_MAX + EGPU_K8S_NAME_MAX + 1];
        json_t *users;

        snprintf(ck, sizeof(ck), "%s/%s", ns, x->pc[i].claim);
        users = json_object_get(x->claim_pods, ck);
        if (users == NULL && json_object_set_new(x->claim_pods, ck, json_object()) != 0)
            x->pods_ready = false;
        users = json_object_get(x->claim_pods, ck);
        if (users == NULL || json_object_set_new(users, key, json_true()) != 0 ||
            json_array_append_new(claims, json_string(ck)) != 0)
            x->pods_ready = false;
    }
    for (size_t k = 0; k < x->ninv; k++)
        pod_count_in(c, &x->invs[k], key, ns);
}

/* The pod from the cache by its key (new reference), or NULL. */
static json_t *pod_get(struct egpu__controller *c, const char *key)
{
    char ns[EGPU_NAMESPACE_MAX];
    size_t nslen = strcspn(key, "/");

    if (key[nslen] != '/' || nslen >= sizeof(ns))
        return NULL;
    memcpy(ns, key, nslen);
    ns[nslen] = '\0';
    return egpu_kube_informer_get(c->inf[EGPU__CONTROLLER_PODS], ns, key + nslen + 1);
}

/* The pods that use the claim ElasticGPU e serves (NULL: none), added to
 * keys (an object). */
static void users_of(struct egpu__controller *c, const struct egpu_api_egpu *e, json_t *keys)
{
    char ck[EGPU_NAMESPACE_MAX + EGPU_K8S_NAME_MAX + 1];

    if (e == NULL || !e->has_claim_ref)
        return;
    snprintf(ck, sizeof(ck), "%s/%s", e->claim_ns, e->claim_name);
    if (json_object_get(c->idx->claim_pods, ck) != NULL &&
        json_object_update(keys, json_object_get(c->idx->claim_pods, ck)) != 0)
        c->idx->pods_ready = false;
}

/* Count (or stop counting) ElasticGPU name, now e (NULL: gone), in every
 * inventory and map. */
static void apply_inner(struct egpu__controller *c, const char *name, const struct egpu_api_egpu *e)
{
    struct egpu__controller_index *x = c->idx;
    const char *old = egpu_api_str(json_object_get(x->uid_of, name));
    struct egpu_error err = {0};

    if (old != NULL) {
        const char *owner = egpu_api_str(json_object_get(x->by_uid, old));

        if (owner != NULL && strcmp(owner, name) == 0)
            (void)json_object_del(x->by_uid, old);
        (void)json_object_del(x->uid_of, name);
    }
    (void)json_object_del(x->available, name);
    (void)json_object_del(x->claim_of, name);
    for (size_t i = 0; i < x->ninv; i++)
        egpu_controller_inventory_unreserve(&x->invs[i].inv, name);
    if (e == NULL)
        return;
    if (e->has_claim_ref) {
        char ck[EGPU_NAMESPACE_MAX + EGPU_K8S_NAME_MAX + 1];

        snprintf(ck, sizeof(ck), "%s/%s", e->claim_ns, e->claim_name);
        if (json_object_set_new(x->claim_of, name, json_string(ck)) != 0)
            x->ready = false;
    }
    if (e->has_claim_ref && e->claim_uid[0] != '\0' &&
        (json_object_set_new(x->uid_of, name, json_string(e->claim_uid)) != 0 ||
         json_object_set_new(x->by_uid, e->claim_uid, json_string(name)) != 0))
        x->ready = false;
    if (e->phase == EGPU_API_EGPU_AVAILABLE &&
        json_object_set_new(x->available, name, json_true()) != 0)
        x->ready = false;
    for (size_t i = 0; i < x->ninv; i++) {
        int rc = egpu_controller_inventory_reserve(&x->invs[i].inv, e, &err);

        if (rc != 0 && rc != -ENOENT && rc != EGPU_EALLOCATED)
            egpu_log(EGPU_LOG_WARN, "ElasticGPU %s not counted in class %s: %s", name,
                     x->invs[i].name, err.msg);
    }
}

/* apply_inner, with the pods of the claims ElasticGPU name served (was) and
 * serves (e) uncounted around it, so none is counted beside it while it
 * holds their room, nor inside it once it holds none. */
static void apply_decoded(struct egpu__controller *c, const char *name,
                          const struct egpu_api_egpu *e)
{
    struct egpu__controller_index *x = c->idx;
    json_t *users = json_object(), *v, *pod;
    const char *old = egpu_api_str(json_object_get(x->claim_of, name)), *key;

    if (users == NULL) {
        x->pods_ready = false;
    } else {
        if (old != NULL && json_object_get(x->claim_pods, old) != NULL &&
            json_object_update(users, json_object_get(x->claim_pods, old)) != 0)
            x->pods_ready = false;
        users_of(c, e, users);
        json_object_foreach(users, key, v)
        {
            for (size_t k = 0; k < x->ninv; k++)
                egpu_controller_inventory_uncount_pod(&x->invs[k].inv, key);
        }
    }
    apply_inner(c, name, e);
    json_object_foreach(users, key, v)
    {
        pod = pod_get(c, key);
        pod_apply(c, key, pod);
        json_decref(pod);
    }
    json_decref(users);
}

/* Apply the cache's state of ElasticGPU name (obj, NULL when the cache has
 * none; deleted: a delete event was noted). */
static void apply(struct egpu__controller *c, const char *name, const json_t *obj, bool deleted)
{
    struct egpu__controller_index *x = c->idx;

    if (obj == NULL && !deleted && json_object_get(c->assumed, name) != NULL)
        return; /* created by us, its watch event still to come */
    (void)json_object_del(c->assumed, name);
    apply_decoded(c, name,
                  obj != NULL && egpu_api_egpu_decode(obj, x->scratch, NULL) == 0 ? x->scratch
                                                                                  : NULL);
}

/* Apply the pod notes taken (pods, swapped out under the lock), or read
 * every pod of the cache again when one was lost. */
static void refresh_pods(struct egpu__controller *c, json_t *pods)
{
    struct egpu__controller_index *x = c->idx;
    json_t *all, *o, *v;
    const char *key;
    size_t i;

    if (x->pods_ready) {
        json_object_foreach(pods, key, v)
        {
            o = json_is_true(v) ? NULL : pod_get(c, key);
            pod_apply(c, key, o);
            json_decref(o);
        }
        return;
    }
    all = egpu_kube_informer_list(c->inf[EGPU__CONTROLLER_PODS]);
    if (all == NULL)
        return;
    json_object_foreach(x->pods, key, v)
    {
        for (size_t k = 0; k < x->ninv; k++)
            egpu_controller_inventory_uncount_pod(&x->invs[k].inv, key);
    }
    (void)json_object_clear(x->pods);
    (void)json_object_clear(x->claim_pods);
    x->pods_ready = true;
    json_array_foreach(all, i, o)
    {
        const json_t *meta = json_object_get(o, "metadata");
        const char *ns = egpu_api_str(json_object_get(meta, "namespace"));
        const char *name = egpu_api_str(json_object_get(meta, "name"));
        char pk[EGPU_NAMESPACE_MAX + EGPU_K8S_NAME_MAX + 1];

        if (ns != NULL && name != NULL &&
            snprintf(pk, sizeof(pk), "%s/%s", ns, name) < (int)sizeof(pk))
            pod_apply(c, pk, o);
    }
    json_decref(all);
}

void egpu__controller_index_refresh(struct egpu__controller *c)
{
    struct egpu__controller_index *x = c->idx;
    json_t *changed = json_object(), *pods = json_object(), *v, *all, *o;
    const char *name;
    bool dirty;
    size_t i;

    pthread_mutex_lock(&x->mu);
    if (changed != NULL) {
        json_t *t = x->changed;

        x->changed = changed;
        changed = t;
    } else {
        x->lost = true;
    }
    if (x->lost)
        x->ready = false;
    x->lost = false;
    if (pods != NULL) {
        json_t *t = x->pods_changed;

        x->pods_changed = pods;
        pods = t;
    } else {
        x->pods_lost = true;
    }
    if (x->pods_lost)
        x->pods_ready = false;
    x->pods_lost = false;
    dirty = x->dirty;
    x->dirty = false;
    pthread_mutex_unlock(&x->mu);
    if (dirty)
        drop_inventories(x);
    if (!x->ready) {
        all = egpu_kube_informer_list(c->inf[EGPU__CONTROLLER_EGPUS]);
        if (all != NULL) {
            (void)json_object_clear(x->uid_of);
            (void)json_object_clear(x->by_uid);
            (void)json_object_clear(x->available);
            (void)json_object_clear(x->claim_of);
            drop_inventories(x);
            x->ready = true;
            json_array_foreach(all, i, o)
            {
                const char *n =
                    egpu_api_str(json_object_get(json_object_get(o, "metadata"), "name"));

                if (n != NULL)
                    apply(c, n, o, false);
            }
            json_decref(all);
        }
    } else {
        json_object_foreach(changed, name, v)
        {
            o = egpu_kube_informer_get(c->inf[EGPU__CONTROLLER_EGPUS], NULL, name);
            apply(c, name, o, json_is_true(v));
            json_decref(o);
        }
    }
    json_decref(changed);
    refresh_pods(c, pods);
    json_decref(pods);
}

void egpu__controller_index_created(struct egpu__controller *c, json_t *obj)
{
    struct egpu__controller_index *x = c->idx;
    const char *name = egpu_api_str(json_object_get(json_object_get(obj, "metadata"), "name"));

    if (name == NULL || egpu_api_egpu_decode(obj, x->scratch, NULL) != 0)
        return;
    (void)json_object_set(c->assumed, name, obj);
    apply_decoded(c, name, x->scratch);
}

struct egpu_controller_inventory *egpu__controller_index_inventory(struct egpu__controller *c,
                                                                   const struct egpu_api_class *cls,
                                                                   struct egpu_error *err)
{
    struct egpu__controller_index *x = c->idx;
    struct cls_inv *n;
    json_t *gpus, *nodes, *egpus, *o;
    const char *key;
    size_t i;
    int rc;

    for (i = 0; i < x->ninv; i++) {
        if (strcmp(x->invs[i].name, cls->meta.name) == 0)
            return &x->invs[i].inv;
    }
    n = egpu_realloc(x->invs, (x->ninv + 1) * sizeof(*x->invs));
    if (n == NULL) {
        egpu_error_set(err, -ENOMEM, "inventory: out of memory");
        return NULL;
    }
    x->invs = n;
    n = &x->invs[x->ninv];
    memset(n, 0, sizeof(*n));
    snprintf(n->name, sizeof(n->name), "%s", cls->meta.name);
    gpus = egpu_kube_informer_list(c->inf[EGPU__CONTROLLER_GPUS]);
    nodes = egpu_kube_informer_list(c->inf[EGPU__CONTROLLER_NODES]);
    egpus = egpu_kube_informer_list(c->inf[EGPU__CONTROLLER_EGPUS]);
    rc = gpus == NULL || nodes == NULL || egpus == NULL
             ? egpu_error_set(err, -ENOMEM, "inventory: out of memory")
             : egpu_controller_inventory_build(gpus, nodes, cls, &n->inv, err);
    if (rc == 0) {
        struct egpu_error e = {0};

        json_array_foreach(egpus, i, o)
        {
            rc = egpu_api_egpu_decode(o, x->scratch, NULL) == 0
                     ? egpu_controller_inventory_reserve(&n->inv, x->scratch, &e)
                     : 0;
            if (rc != 0 && rc != -ENOENT && rc != EGPU_EALLOCATED)
                egpu_log(EGPU_LOG_WARN, "ElasticGPU %s not counted in class %s: %s",
                         x->scratch->meta.name, n->name, e.msg);
        }
        json_object_foreach(c->assumed, key, o)
        {
            if (egpu_api_egpu_decode(o, x->scratch, NULL) == 0 &&
                egpu_controller_inventory_reserve(&n->inv, x->scratch, &e) == EGPU_ENOFIT)
                egpu_log(EGPU_LOG_WARN, "ElasticGPU %s not counted in class %s: %s", key, n->name,
                         e.msg);
        }
        json_object_foreach(x->pods, key, o)
        {
            json_t *pod = pod_get(c, key);

            if (pod_decode(x, key, pod)) {
                char ns[EGPU_NAMESPACE_MAX];

                snprintf(ns, sizeof(ns), "%.*s", (int)strcspn(key, "/"), key);
                pod_count_in(c, n, key, ns);
            }
            json_decref(pod);
        }
        rc = 0;
    }
    json_decref(gpus);
    json_decref(nodes);
    json_decref(egpus);
    if (rc) {
        egpu_controller_inventory_free(&n->inv);
        return NULL;
    }
    x->ninv++;
    return &n->inv;
}

const char *egpu__controller_index_egpu_of_uid(struct egpu__controller *c, const char *uid)
{
    return egpu_api_str(json_object_get(c->idx->by_uid, uid));
}

json_t *egpu__controller_index_available(struct egpu__controller *c)
{
    return c->idx->available;
}
