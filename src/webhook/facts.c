/* webhook/facts.c - what the cluster's GPUs are, for the rules that depend
 * on it: the largest card's memory (gpu-memory must fit one card) and the
 * models there are (elasticgpu.io/gpu-model must name one of them).
 *
 * An informer on elasticgpu.io/v1alpha1 GPU objects calls
 * egpu__webhook_facts_on_* on its thread; each GPU's spec.memory (MiB) and
 * spec.model are kept by name under a mutex. Requests take a snapshot: an
 * immutable, reference-counted view rebuilt only when a GPU's memory or model
 * changed since the last one (so the first list of thousands of GPUs costs one
 * rebuild, at the first request, not one per object), and read it without any
 * lock.
 *
 * A GPU object with a missing or malformed spec.memory counts as a card of
 * unknown memory (it never lowers the largest), one without a model adds
 * none: the agent publishes both, and a half-written object must never make
 * the webhook refuse a valid pod.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "egpu/log.h"
#include "webhook_int.h"

struct card {
    char name[EGPU_K8S_NAME_MAX]; /* the map's key */
    uint32_t mem_mib;             /* 0 = unknown */
    char model[EGPU_MODEL_MAX];   /* "" = unknown */
};

struct snap {
    struct egpu__webhook_facts_snap pub; /* first: callers see only this */
    atomic_long refs;
    char **models;
};

struct egpu__webhook_facts {
    pthread_mutex_t lock; /* guards the rest */
    struct egpu_map *cards;
    struct snap *cur; /* the last view (one reference held here), NULL = rebuild */
};

struct egpu__webhook_facts *egpu__webhook_facts_new(void)
{
    struct egpu__webhook_facts *f = egpu_calloc(1, sizeof(*f));

    if (f == NULL)
        return NULL;
    f->cards = egpu_map_new();
    if (f->cards == NULL) {
        egpu_free(f);
        return NULL;
    }
    pthread_mutex_init(&f->lock, NULL);
    return f;
}

static void snap_free(struct snap *s)
{
    for (size_t i = 0; i < s->pub.facts.nmodels; i++)
        egpu_free(s->models[i]);
    egpu_free(s->models);
    egpu_free(s);
}

void egpu__webhook_facts_put(const struct egpu__webhook_facts_snap *pub)
{
    struct snap *s = (struct snap *)pub;

    if (s != NULL && atomic_fetch_sub(&s->refs, 1) == 1)
        snap_free(s);
}

void egpu__webhook_facts_free(struct egpu__webhook_facts *f)
{
    size_t pos = 0;
    struct card *c;

    if (f == NULL)
        return;
    while ((c = egpu_map_next(f->cards, &pos, NULL)) != NULL)
        egpu_free(c);
    egpu_map_free(f->cards);
    egpu__webhook_facts_put(f->cur ? &f->cur->pub : NULL);
    pthread_mutex_destroy(&f->lock);
    egpu_free(f);
}

/* A GPU object's name, memory and model into *c. False when it has no
 * usable name. */
static bool read_gpu(const json_t *gpu, struct card *c)
{
    const char *name = egpu_api_str(json_object_get(json_object_get(gpu, "metadata"), "name"));
    const json_t *spec = json_object_get(gpu, "spec");
    const json_t *mem = json_object_get(spec, "memory");
    const char *model = egpu_api_str(json_object_get(spec, "model"));

    memset(c, 0, sizeof(*c));
    if (name == NULL || name[0] == '\0' || strlen(name) >= sizeof(c->name))
        return false;
    snprintf(c->name, sizeof(c->name), "%s", name);
    if (json_is_integer(mem) && json_integer_value(mem) > 0 &&
        json_integer_value(mem) <= (json_int_t)UINT32_MAX)
        c->mem_mib = (uint32_t)json_integer_value(mem);
    if (model != NULL && strlen(model) < sizeof(c->model))
        snprintf(c->model, sizeof(c->model), "%s", model);
    return true;
}

/* Drop the current view so the next egpu__webhook_facts_get rebuilds it. Lock held. */
static void invalidate(struct egpu__webhook_facts *f)
{
    if (f->cur != NULL)
        egpu__webhook_facts_put(&f->cur->pub);
    f->cur = NULL;
}

static void upsert(struct egpu__webhook_facts *f, const json_t *gpu)
{
    struct card c, *old, *n;

    if (!read_gpu(gpu, &c))
        return;
    pthread_mutex_lock(&f->lock);
    old = egpu_map_get(f->cards, c.name);
    if (old != NULL) {
        if (old->mem_mib != c.mem_mib || strcmp(old->model, c.model) != 0) {
            *old = c;
            invalidate(f);
        }
    } else {
        n = egpu_malloc(sizeof(*n));
        if (n != NULL) {
            *n = c;
            if (egpu_map_put(f->cards, n->name, n) != 0)
                egpu_free(n);
            else
                invalidate(f);
        }
        if (n == NULL)
            egpu_log(EGPU_LOG_ERROR, "GPU facts: out of memory gpu=%s", c.name);
    }
    pthread_mutex_unlock(&f->lock);
}

void egpu__webhook_facts_on_add(void *ud, const json_t *gpu)
{
    upsert(ud, gpu);
}

void egpu__webhook_facts_on_update(void *ud, const json_t *old_gpu, const json_t *gpu)
{
    (void)old_gpu;
    upsert(ud, gpu);
}

void egpu__webhook_facts_on_delete(void *ud, const json_t *gpu)
{
    struct egpu__webhook_facts *f = ud;
    struct card c, *old;

    if (!read_gpu(gpu, &c))
        return;
    pthread_mutex_lock(&f->lock);
    old = egpu_map_get(f->cards, c.name);
    if (old != NULL) {
        (void)egpu_map_del(f->cards, c.name);
        egpu_free(old);
        invalidate(f);
    }
    pthread_mutex_unlock(&f->lock);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A new view of f's cards (lock held), or NULL when out of memory. */
static struct snap *build(struct egpu__webhook_facts *f)
{
    size_t pos = 0, n = egpu_map_count(f->cards), k = 0;
    struct snap *s = egpu_calloc(1, sizeof(*s));
    struct card *c;

    if (s == NULL)
        return NULL;
    s->models = egpu_calloc(n ? n : 1, sizeof(*s->models));
    if (s->models == NULL) {
        egpu_free(s);
        return NULL;
    }
    atomic_init(&s->refs, 1);
    while ((c = egpu_map_next(f->cards, &pos, NULL)) != NULL) {
        if (c->mem_mib > s->pub.facts.max_card_mib)
            s->pub.facts.max_card_mib = c->mem_mib;
        if (c->model[0] != '\0') {
            s->models[k] = egpu_strdup(c->model);
            if (s->models[k] == NULL) {
                s->pub.facts.nmodels = k;
                snap_free(s);
                return NULL;
            }
            k++;
        }
    }
    qsort(s->models, k, sizeof(*s->models), cmp_str);
    s->pub.facts.nmodels = 0;
    for (size_t i = 0; i < k; i++) { /* keep each model once */
        if (s->pub.facts.nmodels > 0 &&
            strcmp(s->models[s->pub.facts.nmodels - 1], s->models[i]) == 0)
            egpu_free(s->models[i]);
        else
            s->models[s->pub.facts.nmodels++] = s->models[i];
    }
    s->pub.facts.models = (const char *const *)s->models;
    s->pub.ncards = n;
    return s;
}

const struct egpu__webhook_facts_snap *egpu__webhook_facts_get(struct egpu__webhook_facts *f)
{
    struct snap *s;

    pthread_mutex_lock(&f->lock);
    if (f->cur == NULL)
        f->cur = build(f);
    s = f->cur;
    if (s != NULL)
        atomic_fetch_add(&s->refs, 1);
    pthread_mutex_unlock(&f->lock);
    return s != NULL ? &s->pub : NULL;
}
