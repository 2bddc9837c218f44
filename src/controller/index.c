/* controller/index.c - what the worker keeps between reconciles, so that
 * provisioning costs O(cards considered) instead of rebuilding everything
 * from the caches for every claim:
 *   - one placement inventory per class (egpu_ctl_inventory: its cards,
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
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "ctl_int.h"
#include "egpu/log.h"

struct cls_inv {
    char name[EGPU_K8S_NAME_MAX];
    struct egpu_ctl_inventory inv;
};

struct ctl_index {
    pthread_mutex_t mu;
    json_t *changed; /* under mu: ElasticGPU name -> true (deleted) or false */
    bool dirty;      /* under mu: capacity changed, inventories to rebuild */
    bool lost;       /* under mu: a note was lost (out of memory): start again */
    /* the worker's */
    bool ready;        /* every ElasticGPU of the cache applied once */
    json_t *uid_of;    /* ElasticGPU name -> its claimRef's uid */
    json_t *by_uid;    /* claim uid -> ElasticGPU name */
    json_t *available; /* names of Available ElasticGPUs -> true */
    size_t ninv;
    struct cls_inv *invs;
    struct egpu_api_egpu *scratch;
};

int ctl_index_new(struct ctl *c)
{
    struct ctl_index *x = egpu_calloc(1, sizeof(*x));

    if (x == NULL)
        return -ENOMEM;
    pthread_mutex_init(&x->mu, NULL);
    x->changed = json_object();
    x->uid_of = json_object();
    x->by_uid = json_object();
    x->available = json_object();
    x->scratch = egpu_malloc(sizeof(*x->scratch));
    c->idx = x;
    if (x->changed == NULL || x->uid_of == NULL || x->by_uid == NULL || x->available == NULL ||
        x->scratch == NULL)
        return -ENOMEM;
    return 0;
}

static void drop_inventories(struct ctl_index *x)
{
    for (size_t i = 0; i < x->ninv; i++)
        egpu_ctl_inventory_free(&x->invs[i].inv);
    egpu_free(x->invs);
    x->invs = NULL;
    x->ninv = 0;
}

void ctl_index_free(struct ctl *c)
{
    struct ctl_index *x = c->idx;

    if (x == NULL)
        return;
    drop_inventories(x);
    json_decref(x->changed);
    json_decref(x->uid_of);
    json_decref(x->by_uid);
    json_decref(x->available);
    egpu_free(x->scratch);
    pthread_mutex_destroy(&x->mu);
    egpu_free(x);
    c->idx = NULL;
}

void ctl_index_note_egpu(struct ctl *c, const char *name, bool deleted)
{
    struct ctl_index *x = c->idx;

    if (x == NULL || name == NULL || name[0] == '\0')
        return;
    pthread_mutex_lock(&x->mu);
    if (json_object_set_new(x->changed, name, json_boolean(deleted)) != 0)
        x->lost = true; /* out of memory: start again from the whole cache */
    pthread_mutex_unlock(&x->mu);
}

void ctl_index_note_capacity(struct ctl *c)
{
    struct ctl_index *x = c->idx;

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

bool ctl_capacity_changed(const json_t *old, const json_t *obj)
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

/* Count (or stop counting) ElasticGPU name, now e (NULL: gone), in every
 * inventory and map. */
static void apply_decoded(struct ctl *c, const char *name, const struct egpu_api_egpu *e)
{
    struct ctl_index *x = c->idx;
    const char *old = egpu_api_str(json_object_get(x->uid_of, name));
    struct egpu_error err = {0};

    if (old != NULL) {
        const char *owner = egpu_api_str(json_object_get(x->by_uid, old));

        if (owner != NULL && strcmp(owner, name) == 0)
            (void)json_object_del(x->by_uid, old);
        (void)json_object_del(x->uid_of, name);
    }
    (void)json_object_del(x->available, name);
    for (size_t i = 0; i < x->ninv; i++)
        egpu_ctl_inventory_unreserve(&x->invs[i].inv, name);
    if (e == NULL)
        return;
    if (e->has_claim_ref && e->claim_uid[0] != '\0' &&
        (json_object_set_new(x->uid_of, name, json_string(e->claim_uid)) != 0 ||
         json_object_set_new(x->by_uid, e->claim_uid, json_string(name)) != 0))
        x->ready = false;
    if (e->phase == EGPU_API_EGPU_AVAILABLE &&
        json_object_set_new(x->available, name, json_true()) != 0)
        x->ready = false;
    for (size_t i = 0; i < x->ninv; i++) {
        int rc = egpu_ctl_inventory_reserve(&x->invs[i].inv, e, &err);

        if (rc != 0 && rc != -ENOENT && rc != EGPU_EALLOCATED)
            egpu_log(EGPU_LOG_WARN, "ElasticGPU %s not counted in class %s: %s", name,
                     x->invs[i].name, err.msg);
    }
}

/* Apply the cache's state of ElasticGPU name (obj, NULL when the cache has
 * none; deleted: a delete event was noted). */
static void apply(struct ctl *c, const char *name, const json_t *obj, bool deleted)
{
    struct ctl_index *x = c->idx;

    if (obj == NULL && !deleted && json_object_get(c->assumed, name) != NULL)
        return; /* created by us, its watch event still to come */
    (void)json_object_del(c->assumed, name);
    apply_decoded(c, name,
                  obj != NULL && egpu_api_egpu_decode(obj, x->scratch, NULL) == 0 ? x->scratch
                                                                                  : NULL);
}

void ctl_index_refresh(struct ctl *c)
{
    struct ctl_index *x = c->idx;
    json_t *changed = json_object(), *v, *all, *o;
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
    dirty = x->dirty;
    x->dirty = false;
    pthread_mutex_unlock(&x->mu);
    if (dirty)
        drop_inventories(x);
    if (!x->ready) {
        all = egpu_kube_informer_list(c->inf[CTL_EGPUS]);
        if (all != NULL) {
            (void)json_object_clear(x->uid_of);
            (void)json_object_clear(x->by_uid);
            (void)json_object_clear(x->available);
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
            o = egpu_kube_informer_get(c->inf[CTL_EGPUS], NULL, name);
            apply(c, name, o, json_is_true(v));
            json_decref(o);
        }
    }
    json_decref(changed);
}

void ctl_index_created(struct ctl *c, json_t *obj)
{
    struct ctl_index *x = c->idx;
    const char *name = egpu_api_str(json_object_get(json_object_get(obj, "metadata"), "name"));

    if (name == NULL || egpu_api_egpu_decode(obj, x->scratch, NULL) != 0)
        return;
    (void)json_object_set(c->assumed, name, obj);
    apply_decoded(c, name, x->scratch);
}

struct egpu_ctl_inventory *ctl_index_inventory(struct ctl *c, const struct egpu_api_class *cls,
                                               struct egpu_error *err)
{
    struct ctl_index *x = c->idx;
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
    gpus = egpu_kube_informer_list(c->inf[CTL_GPUS]);
    nodes = egpu_kube_informer_list(c->inf[CTL_NODES]);
    egpus = egpu_kube_informer_list(c->inf[CTL_EGPUS]);
    rc = gpus == NULL || nodes == NULL || egpus == NULL
             ? egpu_error_set(err, -ENOMEM, "inventory: out of memory")
             : egpu_ctl_inventory_build(gpus, nodes, cls, &n->inv, err);
    if (rc == 0) {
        struct egpu_error e = {0};

        json_array_foreach(egpus, i, o)
        {
            rc = egpu_api_egpu_decode(o, x->scratch, NULL) == 0
                     ? egpu_ctl_inventory_reserve(&n->inv, x->scratch, &e)
                     : 0;
            if (rc != 0 && rc != -ENOENT && rc != EGPU_EALLOCATED)
                egpu_log(EGPU_LOG_WARN, "ElasticGPU %s not counted in class %s: %s",
                         x->scratch->meta.name, n->name, e.msg);
        }
        json_object_foreach(c->assumed, key, o)
        {
            if (egpu_api_egpu_decode(o, x->scratch, NULL) == 0 &&
                egpu_ctl_inventory_reserve(&n->inv, x->scratch, &e) == EGPU_ENOFIT)
                egpu_log(EGPU_LOG_WARN, "ElasticGPU %s not counted in class %s: %s", key, n->name,
                         e.msg);
        }
        rc = 0;
    }
    json_decref(gpus);
    json_decref(nodes);
    json_decref(egpus);
    if (rc) {
        egpu_ctl_inventory_free(&n->inv);
        return NULL;
    }
    x->ninv++;
    return &n->inv;
}

const char *ctl_index_egpu_of_uid(struct ctl *c, const char *uid)
{
    return egpu_api_str(json_object_get(c->idx->by_uid, uid));
}

json_t *ctl_index_available(struct ctl *c)
{
    return c->idx->available;
}
