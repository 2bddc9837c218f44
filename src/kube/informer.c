/* kube/informer.c - a list+watch cache of one resource (client-go's
 * Reflector + Indexer + event handlers, without the DeltaFIFO).
 *
 * The informer's thread lists the resource (paged), stores every object by
 * "namespace/name" (or "name"), then watches from the list's
 * resourceVersion. Each event updates the store and then calls on_add,
 * on_update or on_delete. When a stream ends or breaks, the watch resumes
 * from the last resourceVersion seen, bookmarks included, so no change is
 * missed and none is repeated. When the server says that version is gone
 * (410 Expired), the informer lists again and turns the differences between
 * the new list and its store into callbacks: new keys are adds, keys whose
 * resourceVersion changed are updates, keys that vanished are deletes. An
 * event whose object has the resourceVersion already stored is a repeat
 * and is dropped.
 *
 * With opts.stream_list the list is a streaming watch (KEP 3157; client-go's
 * WatchListClient): sendInitialEvents with no resourceVersion, whose ADDED
 * events are the list's items, stored and delivered one by one as a page's
 * are, up to the BOOKMARK annotated k8s.io/initial-events-end: the list is
 * then done (its deletes, synced) as of that bookmark's resourceVersion and
 * the same stream goes on as the watch. A server that refuses the stream
 * (422 or 400: kube-apiserver with its WatchList gate off) is listed in
 * pages from then on; a stream that ends or fails before its bookmark is a
 * failed list, backed off and streamed again.
 *
 * With opts.transform (client-go's SetTransform) every listed item and every
 * watched object is replaced by what the transform keeps of it before the
 * store or a callback sees it; the items of a list are transformed as each
 * page arrives, so the list as the server sent it is held one page at a
 * time, never whole; egpu_kube_keep_transform's paths are applied while
 * each page and each watch event is decoded (list_decode.c), so what they
 * leave out is never built. Without one, objects are stored as sent. The
 * adds and updates of a list are stored and delivered page by page too (the
 * list's items are not kept past their page); the keys a list did not have
 * are its deletes, after the last page. With opts.store_keys_only the store
 * keeps only each object's key fields and resourceVersion, what the relist
 * diff and the repeat check read (and opts.store_field's value), in one
 * small allocation an object in a string-keyed map (struct kentry: about
 * 80 bytes a pod where the same three fields as jansson values took 600);
 * what a callback's old_obj or a reader gets of it is made from that entry
 * when asked. A list marks the entries it has with its number (gen), so
 * the keys a list did not have are found without a second table.
 *
 * DESIGN: stored objects are immutable jansson values shared by reference
 * (jansson's reference counts are atomic), so readers on other threads take
 * a reference under the mutex and read without it. Callbacks run on the
 * informer's thread with no lock held, so they may call
 * egpu_kube_informer_get. Failures back off exponentially from
 * backoff_min_ms to backoff_max_ms (0.5 s to 30 s by default), with jitter;
 * a watch that ends within a second without an event counts as a failure,
 * so a server that closes streams at once is not hammered.
 *
 * One object never stops the informer: a watch line that is not an event is
 * skipped by the stream (watch.c), and an object without a usable name (so
 * without a key) is logged and left out of the store, in a list as in a
 * watch; both count in stats.skipped. The time since failures began is kept
 * (unhealthy_since_ms) so a component can say it is not ready while its
 * view of the API has stopped following it. A watch the server accepted
 * and has kept open for a second makes the informer healthy while it runs
 * (a quiet watch may carry no event for minutes); one that breaks sooner
 * keeps the run of failures going, as the backoff does.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "egpu/log.h"
#include "kube_int.h"

#define KEY_MAX   512
#define STORE_MAX 4096 /* a longer resourceVersion or store_field value is not kept */

enum change { CH_ADD, CH_UPDATE, CH_DELETE };

struct pending {
    enum change kind;
    json_t *old_obj; /* references, or NULL */
    json_t *new_obj;
};

struct egpu_kube_informer {
    struct egpu_kube *kc;
    const struct egpu_kube_resource *res;
    char *ns, *label_selector, *field_selector;
    unsigned page_limit;
    int watch_timeout_s;
    long backoff_min_ms, backoff_max_ms;
    struct egpu_kube_informer_cbs cbs;
    egpu_kube_transform_cb transform; /* or NULL */
    void *transform_ud;
    bool store_keys_only;
    char *store_field;   /* or NULL */
    bool stream_list;    /* list by a streaming watch (opts) */
    bool stream_refused; /* the server would not: paged lists from then on (thread only) */

    pthread_mutex_t mu;    /* store, keys, gen, synced, stats */
    pthread_cond_t cond;   /* synced set */
    json_t *store;         /* key -> object; NULL with store_keys_only */
    struct egpu_map *keys; /* key -> struct kentry, with store_keys_only; else NULL */
    uint32_t gen;          /* the number of the list running or last run (keys) */
    bool synced;
    struct egpu_kube_informer_stats stats;

    int64_t unhealthy_since_ms; /* CLOCK_MONOTONIC ms; 0 = healthy (under mu) */
    int64_t open_since_ms;      /* when the running watch was accepted; 0 = none (under mu) */

    struct egpu__kube_worker worker;
    char rv[EGPU_KUBE_RV_MAX]; /* where the next watch starts (thread only) */
    struct egpu_rng rng;       /* jitter (thread only) */
};

static char *dup_opt(const char *s, bool *oom)
{
    char *d;

    if (s == NULL || s[0] == '\0')
        return NULL;
    d = egpu_strdup(s);
    if (d == NULL)
        *oom = true;
    return d;
}

int egpu_kube_informer_new(struct egpu_kube *kc, const struct egpu_kube_informer_opts *opts,
                           const struct egpu_kube_informer_cbs *cbs,
                           struct egpu_kube_informer **out, struct egpu_error *err)
{
    struct egpu_kube_informer *inf;
    uint64_t seed;
    bool oom = false;

    if (kc == NULL || opts == NULL || opts->res == NULL || opts->res->plural == NULL)
        return egpu_error_set(err, -EINVAL, "informer: no client or resource");
    inf = egpu_calloc(1, sizeof(*inf));
    if (inf == NULL)
        return egpu_error_set(err, -ENOMEM, "informer: out of memory");
    inf->kc = kc;
    inf->res = opts->res;
    inf->ns = dup_opt(opts->ns, &oom);
    inf->label_selector = dup_opt(opts->label_selector, &oom);
    inf->field_selector = dup_opt(opts->field_selector, &oom);
    inf->page_limit = opts->page_limit;
    inf->watch_timeout_s = opts->watch_timeout_s;
    inf->backoff_min_ms = opts->backoff_min_ms > 0 ? opts->backoff_min_ms : 500;
    inf->backoff_max_ms = opts->backoff_max_ms > 0 ? opts->backoff_max_ms : 30000;
    if (inf->backoff_max_ms < inf->backoff_min_ms)
        inf->backoff_max_ms = inf->backoff_min_ms;
    if (cbs != NULL)
        inf->cbs = *cbs;
    inf->transform = opts->transform;
    inf->transform_ud = opts->transform_ud;
    inf->store_keys_only = opts->store_keys_only;
    inf->stream_list = opts->stream_list;
    if (inf->store_keys_only) {
        inf->store_field = dup_opt(opts->store_field, &oom);
        inf->keys = egpu_map_new();
    } else {
        inf->store = json_object();
    }
    egpu__kube_random(&seed, sizeof(seed));
    egpu_rng_seed(&inf->rng, seed);
    if (oom || (inf->store == NULL && inf->keys == NULL))
        goto fail_free;
    if (pthread_mutex_init(&inf->mu, NULL) != 0)
        goto fail_free;
    if (egpu__kube_cond_init(&inf->cond) != 0)
        goto fail_mutex;
    if (egpu__kube_worker_init(&inf->worker) != 0)
        goto fail_cond;
    *out = inf;
    return 0;
fail_cond:
    pthread_cond_destroy(&inf->cond);
fail_mutex:
    pthread_mutex_destroy(&inf->mu);
fail_free:
    json_decref(inf->store);
    egpu_map_free(inf->keys);
    egpu_free(inf->store_field);
    egpu_free(inf->ns);
    egpu_free(inf->label_selector);
    egpu_free(inf->field_selector);
    egpu_free(inf);
    return egpu_error_set(err, -ENOMEM, "informer: out of memory");
}

/* "namespace/name" or "name"; false when the object has no usable name (or
 * namespace): missing, not a string, holding a NUL, or too long. */
static bool object_key(const json_t *obj, char key[KEY_MAX])
{
    const char *name = egpu__kube_meta_str(obj, "name");
    const char *ns = egpu__kube_meta_str(obj, "namespace");
    int n;

    if (name == NULL || name[0] == '\0')
        return false;
    if (ns != NULL && ns[0] != '\0')
        n = snprintf(key, KEY_MAX, "%s/%s", ns, name);
    else
        n = snprintf(key, KEY_MAX, "%s", name);
    return n > 0 && n < KEY_MAX;
}

static bool same_version(const json_t *a, const json_t *b)
{
    const char *ra = egpu__kube_meta_str(a, "resourceVersion");
    const char *rb = egpu__kube_meta_str(b, "resourceVersion");

    return ra != NULL && rb != NULL && strcmp(ra, rb) == 0;
}

/* ------------------------------------------------------------------------ */
/* The store                                                                */

/* An object as a store_keys_only informer keeps it. */
struct kentry {
    uint32_t gen;       /* the list that last had it (inf->gen) */
    uint16_t ns_len;    /* bytes of namespace the key begins with; 0 = cluster-scoped */
    uint16_t rv_off;    /* text + rv_off: the resourceVersion; 0 = none */
    uint16_t field_off; /* text + field_off: store_field's value; 0 = none */
    uint16_t field_len; /* its bytes (a JSON string may hold a NUL) */
    char text[];        /* key ("namespace/name" or "name"), NUL, [rv, NUL], [value, NUL] */
};

/* obj's string at the dotted path (borrowed), or NULL. */
static const json_t *string_at(const json_t *obj, const char *path)
{
    char seg[KEY_MAX];

    while (obj != NULL) {
        const char *dot = strchr(path, '.');
        size_t n = dot != NULL ? (size_t)(dot - path) : strlen(path);

        if (n >= sizeof(seg))
            return NULL;
        memcpy(seg, path, n);
        seg[n] = '\0';
        obj = json_object_get(obj, seg);
        if (dot == NULL)
            return json_is_string(obj) ? obj : NULL;
        path = dot + 1;
    }
    return NULL;
}

/* A new entry for obj under key (object_key's), or NULL when out of memory. */
static struct kentry *kentry_new(const struct egpu_kube_informer *inf, const char *key,
                                 const json_t *obj)
{
    const char *rv = egpu__kube_meta_str(obj, "resourceVersion");
    const char *ns = egpu__kube_meta_str(obj, "namespace");
    const json_t *fv = inf->store_field != NULL ? string_at(obj, inf->store_field) : NULL;
    size_t klen = strlen(key) + 1, rlen = rv != NULL ? strlen(rv) + 1 : 0;
    size_t flen = fv != NULL ? json_string_length(fv) + 1 : 0;
    struct kentry *e;

    if (rlen > STORE_MAX)
        rlen = 0; /* every event of it is then an update, none a repeat */
    if (flen > STORE_MAX)
        flen = 0;
    e = egpu_malloc(sizeof(*e) + klen + rlen + flen);
    if (e == NULL)
        return NULL;
    e->gen = inf->gen;
    e->ns_len = (uint16_t)(ns != NULL && ns[0] != '\0' ? strlen(ns) : 0);
    e->rv_off = (uint16_t)(rlen ? klen : 0);
    e->field_off = (uint16_t)(flen ? klen + rlen : 0);
    e->field_len = (uint16_t)(flen ? flen - 1 : 0);
    memcpy(e->text, key, klen);
    if (rlen)
        memcpy(e->text + klen, rv, rlen);
    if (flen) {
        memcpy(e->text + klen + rlen, json_string_value(fv), flen - 1);
        e->text[klen + rlen + flen - 1] = '\0';
    }
    return e;
}

static int set_str(json_t *o, const char *key, const char *s, size_t len)
{
    return json_object_set_new(o, key, json_stringn(s, len)) == 0 ? 0 : -ENOMEM;
}

/* store_field's value at its path in o, each object on the way made. */
static int set_field(json_t *o, const char *path, const char *s, size_t len)
{
    char seg[KEY_MAX];

    for (;;) {
        const char *dot = strchr(path, '.');
        size_t n = dot != NULL ? (size_t)(dot - path) : strlen(path);
        json_t *next;

        if (n >= sizeof(seg))
            return -EINVAL;
        memcpy(seg, path, n);
        seg[n] = '\0';
        if (dot == NULL)
            return set_str(o, seg, s, len);
        next = json_object_get(o, seg);
        if (next == NULL) {
            next = json_object();
            if (next == NULL || json_object_set_new(o, seg, next) != 0)
                return -ENOMEM;
        }
        o = next;
        path = dot + 1;
    }
}

/* What a reader or a callback gets of e: metadata.name, .namespace and
 * .resourceVersion (those the object had) and store_field's value. A new
 * object, or NULL when out of memory. */
static json_t *kentry_object(const struct egpu_kube_informer *inf, const struct kentry *e)
{
    json_t *o = json_object(), *m = json_object();
    const char *name = e->ns_len ? e->text + e->ns_len + 1 : e->text;
    int rc = o != NULL && m != NULL && json_object_set(o, "metadata", m) == 0 ? 0 : -ENOMEM;

    if (rc == 0)
        rc = set_str(m, "name", name, strlen(name));
    if (rc == 0 && e->ns_len)
        rc = set_str(m, "namespace", e->text, e->ns_len);
    if (rc == 0 && e->rv_off)
        rc = set_str(m, "resourceVersion", e->text + e->rv_off, strlen(e->text + e->rv_off));
    if (rc == 0 && e->field_off)
        rc = set_field(o, inf->store_field, e->text + e->field_off, e->field_len);
    json_decref(m);
    if (rc) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static bool same_version(const json_t *a, const json_t *b);

/* Under mu: whether key is stored with obj's resourceVersion (a repeat);
 * a list that has it marks it (gen). */
static bool store_has(struct egpu_kube_informer *inf, const char *key, const json_t *obj)
{
    struct kentry *e;
    const char *rv;

    if (inf->keys == NULL) {
        const json_t *old = json_object_get(inf->store, key);

        return old != NULL && same_version(old, obj);
    }
    e = egpu_map_get(inf->keys, key);
    if (e == NULL)
        return false;
    e->gen = inf->gen;
    rv = egpu__kube_meta_str(obj, "resourceVersion");
    return e->rv_off && rv != NULL && strcmp(e->text + e->rv_off, rv) == 0;
}

/* Under mu: obj (as transformed) stored under key, and *old the entry it
 * replaced as readers get it (a new reference; NULL when key was new).
 * Returns 0, or -ENOMEM with the store unchanged and *old NULL. */
static int store_put(struct egpu_kube_informer *inf, const char *key, json_t *obj, json_t **old)
{
    struct kentry *e, *was;

    *old = NULL;
    if (inf->keys == NULL) {
        *old = json_incref(json_object_get(inf->store, key));
        if (json_object_set_nocheck(inf->store, key, obj) == 0)
            return 0;
        json_decref(*old);
        *old = NULL;
        return -ENOMEM;
    }
    was = egpu_map_get(inf->keys, key);
    if (was != NULL && (*old = kentry_object(inf, was)) == NULL)
        return -ENOMEM;
    e = kentry_new(inf, key, obj);
    if (e == NULL) {
        json_decref(*old);
        *old = NULL;
        return -ENOMEM;
    }
    if (was != NULL)
        (void)egpu_map_del(inf->keys, was->text);
    /* After a delete the map does not grow, so this fails only for a new key. */
    if (egpu_map_put(inf->keys, e->text, e) != 0) {
        egpu_free(e);
        return -ENOMEM;
    }
    egpu_free(was);
    return 0;
}

/* Under mu: key out of the store; *old (when old != NULL) what readers got
 * of it, a new reference. Returns 0, -ENOENT (not stored) or -ENOMEM (the
 * entry stays). */
static int store_del(struct egpu_kube_informer *inf, const char *key, json_t **old)
{
    struct kentry *e;

    if (inf->keys == NULL) {
        json_t *o = json_object_get(inf->store, key);

        if (o == NULL)
            return -ENOENT;
        if (old != NULL)
            *old = json_incref(o);
        json_object_del(inf->store, key);
        return 0;
    }
    e = egpu_map_get(inf->keys, key);
    if (e == NULL)
        return -ENOENT;
    if (old != NULL && (*old = kentry_object(inf, e)) == NULL)
        return -ENOMEM;
    (void)egpu_map_del(inf->keys, e->text);
    egpu_free(e);
    return 0;
}

static void deliver(struct egpu_kube_informer *inf, const struct pending *p)
{
    const struct egpu_kube_informer_cbs *c = &inf->cbs;

    switch (p->kind) {
    case CH_ADD:
        if (c->on_add != NULL)
            c->on_add(c->ud, p->new_obj);
        break;
    case CH_UPDATE:
        if (c->on_update != NULL)
            c->on_update(c->ud, p->old_obj, p->new_obj);
        break;
    case CH_DELETE:
        if (c->on_delete != NULL)
            c->on_delete(c->ud, p->old_obj);
        break;
    }
}

/* ------------------------------------------------------------------------ */
/* Watch events                                                             */

static int store_event(struct egpu_kube_informer *inf, enum egpu_kube_event_type type, json_t *obj);

/* The paths of an egpu_kube_keep_transform, which the watch applies while
 * it decodes each event; NULL for any other transform or none. */
static const char *const *keep_paths(const struct egpu_kube_informer *inf)
{
    return inf->transform == egpu_kube_keep_transform ? (const char *const *)inf->transform_ud
                                                      : NULL;
}

static int on_event(void *ud, enum egpu_kube_event_type type, json_t *obj)
{
    struct egpu_kube_informer *inf = ud;
    json_t *t;
    int rc;

    /* egpu_kube_keep_transform's paths were applied as the event was decoded. */
    if (type == EGPU_KUBE_BOOKMARK || inf->transform == NULL || keep_paths(inf) != NULL)
        return store_event(inf, type, obj);
    t = inf->transform(inf->transform_ud, obj);
    if (t == NULL)
        return -ENOMEM; /* the watch resumes before this event */
    rc = store_event(inf, type, t);
    json_decref(t);
    return rc;
}

/* The event of obj (as stored: transformed) into the store, then its callback. */
static int store_event(struct egpu_kube_informer *inf, enum egpu_kube_event_type type, json_t *obj)
{
    struct pending p = {CH_ADD, NULL, NULL};
    char key[KEY_MAX];
    json_t *old;

    if (type == EGPU_KUBE_BOOKMARK)
        return egpu__kube_worker_stopping(&inf->worker) ? 1 : 0;
    if (!object_key(obj, key)) {
        pthread_mutex_lock(&inf->mu);
        inf->stats.skipped++;
        pthread_mutex_unlock(&inf->mu);
        egpu_log(EGPU_LOG_WARN, "watch event without a usable name, skipped resource=%s",
                 inf->res->plural);
        return 0;
    }
    pthread_mutex_lock(&inf->mu);
    if (type == EGPU_KUBE_DELETED) {
        if (store_del(inf, key, NULL) != 0) {
            pthread_mutex_unlock(&inf->mu);
            return 0; /* already gone (a relist saw it first) */
        }
        p = (struct pending){CH_DELETE, json_incref(obj), NULL};
    } else {
        if (store_has(inf, key, obj)) {
            pthread_mutex_unlock(&inf->mu);
            return 0; /* a repeat */
        }
        if (store_put(inf, key, obj, &old) != 0) {
            pthread_mutex_unlock(&inf->mu);
            return -ENOMEM; /* the watch resumes before this event */
        }
        p = (struct pending){old ? CH_UPDATE : CH_ADD, old, json_incref(obj)};
    }
    pthread_mutex_unlock(&inf->mu);
    deliver(inf, &p);
    json_decref(p.old_obj);
    json_decref(p.new_obj);
    return egpu__kube_worker_stopping(&inf->worker) ? 1 : 0;
}

/* ------------------------------------------------------------------------ */
/* List and relist                                                          */

/* One relist in progress: the keys its pages have had. */
struct listing {
    struct egpu_kube_informer *inf;
    json_t *seen;    /* key -> null: every key of this list so far (the keys of a
                        store_keys_only informer are marked with inf->gen instead) */
    size_t items;    /* items listed (repeats of a restarted list included) */
    size_t changes;  /* callbacks made */
    size_t nskipped; /* items without a usable name */
    int rc;          /* -ENOMEM once the store could not take an item */
};

/* Under mu: one listed item (already transformed) into the store, marked
 * as this list's; *p its add or update to deliver. Returns 1 (p filled),
 * 0 (unchanged, or no usable name: counted) or -ENOMEM (p untouched). */
static int list_take(struct listing *l, json_t *item, struct pending *p)
{
    struct egpu_kube_informer *inf = l->inf;
    char k[KEY_MAX];
    json_t *old;

    l->items++;
    if (!object_key(item, k)) {
        l->nskipped++;
        return 0;
    }
    if (inf->keys == NULL && json_object_set_new_nocheck(l->seen, k, json_null()) != 0)
        return -ENOMEM;
    if (store_has(inf, k, item))
        return 0;
    if (store_put(inf, k, item, &old) != 0)
        return -ENOMEM;
    *p = (struct pending){old ? CH_UPDATE : CH_ADD, old, json_incref(item)};
    return 1;
}

/* Under mu: a list (again) from its first item. */
static void list_begin(struct listing *l)
{
    json_object_clear(l->seen);
    l->inf->gen++;
}

/* A list page (items already transformed): each item into the store, and
 * its add or update delivered now, so the list is never held whole; the
 * deletions wait for the last page (list_done). */
static int on_list_page(void *ud, unsigned page_index, const json_t *page)
{
    struct listing *l = ud;
    struct egpu_kube_informer *inf = l->inf;
    const json_t *items = json_object_get(page, "items");
    struct pending *pend;
    size_t npend = 0, i;
    json_t *item;

    pend = egpu_calloc(json_array_size(items) + 1, sizeof(*pend));
    if (pend == NULL)
        return -ENOMEM;
    pthread_mutex_lock(&inf->mu);
    if (page_index == 0) /* the list started (again, after a 410 on a continue) */
        list_begin(l);
    json_array_foreach(items, i, item)
    {
        int took = list_take(l, item, &pend[npend]);

        if (took < 0) {
            l->rc = took;
            break;
        }
        npend += (size_t)took;
    }
    pthread_mutex_unlock(&inf->mu);
    for (i = 0; i < npend; i++) {
        deliver(inf, &pend[i]);
        json_decref(pend[i].old_obj);
        json_decref(pend[i].new_obj);
    }
    l->changes += npend;
    egpu_free(pend);
    return l->rc;
}

/* Under mu: the keys the list did not have out of the store, each with
 * what readers got of it into pend (room for every stored key), *n of
 * them. Returns 0, or -ENOMEM with those *n out and the rest still stored
 * (the next list finds them again). */
static int drop_unseen(struct listing *l, struct pending *pend, size_t *n)
{
    struct egpu_kube_informer *inf = l->inf;
    size_t nfound = 0, pos = 0;
    const char *key;
    struct kentry *e;
    json_t *old;
    void *tmp;

    *n = 0;
    if (inf->keys == NULL) {
        json_object_foreach_safe(inf->store, tmp, key, old)
        {
            if (json_object_get(l->seen, key) == NULL) {
                pend[(*n)++] = (struct pending){CH_DELETE, json_incref(old), NULL};
                json_object_del(inf->store, key);
            }
        }
        return 0;
    }
    /* The map must not change while it is walked: collect, then drop. */
    while ((e = egpu_map_next(inf->keys, &pos, NULL)) != NULL) {
        if (e->gen != inf->gen)
            pend[nfound++].old_obj = (json_t *)e; /* the entry, until replaced below */
    }
    for (size_t i = 0; i < nfound; i++) {
        e = (struct kentry *)pend[i].old_obj;
        pend[i] = (struct pending){CH_DELETE, kentry_object(inf, e), NULL};
        if (pend[i].old_obj == NULL) {
            memset(&pend[i], 0, (nfound - i) * sizeof(*pend));
            return -ENOMEM;
        }
        (void)egpu_map_del(inf->keys, e->text);
        egpu_free(e);
        (*n)++;
    }
    return 0;
}

/* After the last page: keys the list no longer has are deletions. */
static int list_done(struct listing *l)
{
    struct egpu_kube_informer *inf = l->inf;
    struct pending *pend;
    size_t npend, i;
    int rc;

    pthread_mutex_lock(&inf->mu);
    pend = egpu_calloc((inf->keys ? egpu_map_count(inf->keys) : json_object_size(inf->store)) + 1,
                       sizeof(*pend));
    if (pend == NULL) {
        pthread_mutex_unlock(&inf->mu);
        return -ENOMEM;
    }
    rc = drop_unseen(l, pend, &npend);
    if (rc == 0) {
        inf->stats.lists++;
        inf->stats.skipped += l->nskipped;
    }
    pthread_mutex_unlock(&inf->mu);
    for (i = 0; i < npend; i++) {
        deliver(inf, &pend[i]);
        json_decref(pend[i].old_obj);
    }
    l->changes += npend;
    egpu_free(pend);
    return rc;
}

/* A list (paged, or streamed up to its initial-events-end bookmark) has
 * been stored and delivered, as of resourceVersion rv: synced and healthy
 * in one step, so no caller that saw the informer synced can then see it
 * unhealthy from this list. A streamed list's watch goes on from here, so
 * its second of being open counts from now. */
static void listed(struct egpu_kube_informer *inf, const struct listing *l, const char *rv,
                   bool streamed)
{
    if (l->nskipped > 0)
        egpu_log(EGPU_LOG_WARN, "list items without a usable name, skipped resource=%s count=%zu",
                 inf->res->plural, l->nskipped);
    egpu_log(EGPU_LOG_DEBUG, "listed resource=%s items=%zu rv=%s changes=%zu streamed=%s",
             inf->res->plural, l->items, rv, l->changes, streamed ? "true" : "false");
    pthread_mutex_lock(&inf->mu);
    inf->unhealthy_since_ms = 0;
    inf->open_since_ms = streamed ? egpu__kube_now_ms() : 0;
    if (!inf->synced) {
        inf->synced = true;
        pthread_cond_broadcast(&inf->cond);
    }
    pthread_mutex_unlock(&inf->mu);
}

static int relist(struct egpu_kube_informer *inf)
{
    struct listing l = {.inf = inf, .seen = json_object()};
    struct egpu_kube_list_opts lo = {
        .label_selector = inf->label_selector,
        .field_selector = inf->field_selector,
        .limit = inf->page_limit,
        .on_page = on_list_page,
        .ud = &l,
        .drop_items = true,
        .transform = inf->transform,
        .transform_ud = inf->transform_ud,
    };
    struct egpu_error err = {0};
    json_t *list = NULL;
    const char *rv;
    int rc;

    if (l.seen == NULL)
        return -ENOMEM;
    rc = egpu__kube_list(inf->kc, inf->res, inf->ns, &lo, &inf->worker.stop, &list, NULL, &err);
    if (rc == 0)
        rc = list_done(&l);
    if (rc) {
        if (rc != -ECANCELED)
            egpu_log(EGPU_LOG_WARN, "list failed resource=%s err=\"%s\"", inf->res->plural,
                     l.rc ? egpu_strerror(l.rc) : err.msg);
        goto out;
    }
    rv = egpu__kube_meta_str(list, "resourceVersion");
    snprintf(inf->rv, sizeof(inf->rv), "%s", rv && strlen(rv) < EGPU_KUBE_RV_MAX ? rv : "");
    listed(inf, &l, inf->rv, false);
out:
    json_decref(l.seen);
    json_decref(list);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Streaming list                                                            */

/* A streaming list (opts.stream_list): its listing until the bookmark that
 * ends the initial events, then the watch's events. */
struct streaming {
    struct listing l;
    bool listed; /* that bookmark came and the list was done */
};

static int stop_or_go(struct egpu_kube_informer *inf)
{
    return egpu__kube_worker_stopping(&inf->worker) ? 1 : 0;
}

/* An event of a streaming list: before the initial-events-end bookmark
 * an ADDED (or MODIFIED) is a listed item, stored and delivered at once,
 * and the bookmark is the list's end (its deletes, then synced); after it,
 * as on_event. */
static int on_stream_event(void *ud, enum egpu_kube_event_type type, json_t *obj)
{
    struct streaming *s = ud;
    struct egpu_kube_informer *inf = s->l.inf;
    struct pending p = {CH_ADD, NULL, NULL};
    json_t *t = NULL;
    int took, rc;

    if (s->listed || type == EGPU_KUBE_DELETED)
        return on_event(inf, type, obj); /* a deletion is never initial state */
    if (type == EGPU_KUBE_BOOKMARK) {
        const char *rv = egpu__kube_meta_str(obj, "resourceVersion");

        if (!egpu_kube_initial_events_end(obj))
            return stop_or_go(inf);
        rc = list_done(&s->l);
        if (rc)
            return s->l.rc = rc; /* the list failed: the stream ends here */
        s->listed = true;
        listed(inf, &s->l, rv && strlen(rv) < EGPU_KUBE_RV_MAX ? rv : "", true);
        return stop_or_go(inf);
    }
    /* egpu_kube_keep_transform's paths were applied as the event was decoded. */
    if (inf->transform != NULL && keep_paths(inf) == NULL) {
        t = inf->transform(inf->transform_ud, obj);
        if (t == NULL)
            return s->l.rc = -ENOMEM;
        obj = t;
    }
    pthread_mutex_lock(&inf->mu);
    took = list_take(&s->l, obj, &p);
    pthread_mutex_unlock(&inf->mu);
    json_decref(t);
    if (took < 0)
        return s->l.rc = took;
    if (took > 0) {
        deliver(inf, &p);
        json_decref(p.old_obj);
        json_decref(p.new_obj);
        s->l.changes++;
    }
    return stop_or_go(inf);
}

/* Whether a watch's refusal says the server does not stream lists: 422
 * Invalid (kube-apiserver with the WatchList feature gate off) or 400. */
static bool stream_refused(int rc, const struct egpu_kube_status *st)
{
    return rc != 0 && rc != -ECANCELED && (st->code == 422 || st->code == 400);
}

/* ------------------------------------------------------------------------ */
/* The thread                                                               */

/* Wait the current backoff (with up to 25% jitter) and double it. */
static void back_off(struct egpu_kube_informer *inf, long *backoff)
{
    long wait = *backoff + (long)egpu_rng_below(&inf->rng, (uint64_t)*backoff / 4 + 1);

    (void)egpu__kube_worker_pause(&inf->worker,
                                  wait < inf->backoff_max_ms ? wait : inf->backoff_max_ms);
    *backoff = *backoff * 2 < inf->backoff_max_ms ? *backoff * 2 : inf->backoff_max_ms;
}

static void count(struct egpu_kube_informer *inf, unsigned long *field)
{
    pthread_mutex_lock(&inf->mu);
    (*field)++;
    pthread_mutex_unlock(&inf->mu);
}

#define OPEN_HEALTHY_MS 1000 /* a watch open this long counts as working */

/* A list or watch ended, failed or not: keep when the run of failures began.
 * A watch that had been open a while ends a run, so its failure starts one. */
static void set_health(struct egpu_kube_informer *inf, bool failed)
{
    int64_t now = egpu__kube_now_ms();
    bool was_open;

    pthread_mutex_lock(&inf->mu);
    was_open = inf->open_since_ms != 0 && now - inf->open_since_ms >= OPEN_HEALTHY_MS;
    inf->open_since_ms = 0;
    if (!failed)
        inf->unhealthy_since_ms = 0;
    else if (inf->unhealthy_since_ms == 0 || was_open)
        inf->unhealthy_since_ms = now;
    pthread_mutex_unlock(&inf->mu);
}

/* A list or watch failed: unhealthy, counted, and the backoff waited. */
static void fail_and_back_off(struct egpu_kube_informer *inf, long *backoff)
{
    set_health(inf, true);
    count(inf, &inf->stats.errors);
    back_off(inf, backoff);
}

static void on_watch_open(void *ud)
{
    struct egpu_kube_informer *inf = ud;

    pthread_mutex_lock(&inf->mu);
    inf->open_since_ms = egpu__kube_now_ms();
    pthread_mutex_unlock(&inf->mu);
}

static void *informer_main(void *arg)
{
    struct egpu_kube_informer *inf = arg;
    long backoff = inf->backoff_min_ms;
    bool need_list = true;
    unsigned expired_in_row = 0;

    while (!egpu__kube_worker_stopping(&inf->worker)) {
        struct egpu_kube_watch_opts wo = {
            .label_selector = inf->label_selector,
            .field_selector = inf->field_selector,
            .stop = &inf->worker.stop,
            .on_open = on_watch_open,
            .open_ud = inf,
            .keep = keep_paths(inf),
        };
        struct streaming s = {.l = {.inf = inf}};
        struct egpu_kube_status st = {0};
        struct egpu_error err = {0};
        bool stream = need_list && inf->stream_list && !inf->stream_refused;
        bool progressed;
        int64_t started;
        int rc;

        if (need_list && !stream) {
            rc = relist(inf);
            if (egpu__kube_worker_stopping(&inf->worker))
                break;
            if (rc) {
                fail_and_back_off(inf, &backoff);
                continue;
            }
            need_list = false;
        }
        wo.timeout_s = inf->watch_timeout_s > 0 ? inf->watch_timeout_s
                                                : 300 + (int)egpu_rng_below(&inf->rng, 301);
        if (stream) {
            /* A consistent read (no resourceVersion), as a paged list's. */
            wo.send_initial_events = true;
            s.l.seen = json_object();
            if (s.l.seen == NULL) {
                fail_and_back_off(inf, &backoff);
                continue;
            }
            pthread_mutex_lock(&inf->mu);
            list_begin(&s.l);
            pthread_mutex_unlock(&inf->mu);
        } else {
            snprintf(wo.resource_version, sizeof(wo.resource_version), "%s", inf->rv);
        }
        pthread_mutex_lock(&inf->mu);
        inf->stats.watches++;
        pthread_mutex_unlock(&inf->mu);
        started = egpu__kube_now_ms();
        /* rv moves only past events the store has taken (bookmarks too). */
        if (stream)
            rc = egpu_kube_watch(inf->kc, inf->res, inf->ns, &wo, on_stream_event, &s, &st, &err);
        else
            rc = egpu_kube_watch(inf->kc, inf->res, inf->ns, &wo, on_event, inf, &st, &err);
        json_decref(s.l.seen);
        progressed = stream || strcmp(wo.resource_version, inf->rv) != 0;
        if (wo.skipped > 0) {
            pthread_mutex_lock(&inf->mu);
            inf->stats.skipped += wo.skipped;
            pthread_mutex_unlock(&inf->mu);
        }
        if (egpu__kube_worker_stopping(&inf->worker))
            break;
        if (stream && !s.listed) {
            if (stream_refused(rc, &st)) {
                egpu_log(EGPU_LOG_INFO,
                         "the API server does not stream lists, listing in pages resource=%s "
                         "err=\"%s\"",
                         inf->res->plural, err.msg);
                inf->stream_refused = true;
                continue;
            }
            egpu_log(EGPU_LOG_WARN, "list failed resource=%s streamed=true err=\"%s\"",
                     inf->res->plural,
                     s.l.rc    ? egpu_strerror(s.l.rc)
                     : rc != 0 ? err.msg
                               : "the stream ended before its initial events did");
            fail_and_back_off(inf, &backoff);
            continue;
        }
        if (stream)
            need_list = false;
        snprintf(inf->rv, sizeof(inf->rv), "%s", wo.resource_version);
        if (rc == EGPU_KUBE_EEXPIRED) {
            egpu_log(EGPU_LOG_INFO, "watch expired, listing again resource=%s rv=%s",
                     inf->res->plural, inf->rv);
            count(inf, &inf->stats.expired);
            need_list = true;
            if (expired_in_row++ > 0)
                (void)egpu__kube_worker_pause(&inf->worker, inf->backoff_min_ms);
            continue;
        }
        expired_in_row = 0;
        if (rc == 0 && (progressed || egpu__kube_now_ms() - started >= 1000)) {
            set_health(inf, false);
            backoff = inf->backoff_min_ms;
            continue;
        }
        egpu_log(EGPU_LOG_WARN,
                 "watch failed, retrying resource=%s rv=%s backoff_ms=%ld err=\"%s\"",
                 inf->res->plural, inf->rv, backoff, rc ? err.msg : "stream ended at once");
        fail_and_back_off(inf, &backoff);
    }
    return NULL;
}

int egpu_kube_informer_start(struct egpu_kube_informer *inf, struct egpu_error *err)
{
    int rc;

    /* Not healthy until the first list has succeeded. */
    pthread_mutex_lock(&inf->mu);
    inf->unhealthy_since_ms = egpu__kube_now_ms();
    pthread_mutex_unlock(&inf->mu);
    rc = egpu__kube_worker_start(&inf->worker, informer_main, inf);
    if (rc)
        return egpu_error_set(err, rc, "informer %s: %s", inf->res->plural,
                              rc == -EALREADY ? "already running" : egpu_strerror(rc));
    return 0;
}

bool egpu_kube_informer_has_synced(struct egpu_kube_informer *inf)
{
    bool s;

    pthread_mutex_lock(&inf->mu);
    s = inf->synced;
    pthread_mutex_unlock(&inf->mu);
    return s;
}

int egpu_kube_informer_wait_synced(struct egpu_kube_informer *inf, long timeout_ms)
{
    int64_t deadline = egpu__kube_now_ms() + timeout_ms;
    bool s;

    pthread_mutex_lock(&inf->mu);
    while (!inf->synced && egpu__kube_now_ms() < deadline)
        egpu__kube_cond_wait_until(&inf->cond, &inf->mu, deadline);
    s = inf->synced;
    pthread_mutex_unlock(&inf->mu);
    return s ? 0 : -ETIMEDOUT;
}

json_t *egpu_kube_informer_get(struct egpu_kube_informer *inf, const char *ns, const char *name)
{
    char key[KEY_MAX];
    json_t *obj;
    int n;

    if (name == NULL)
        return NULL;
    if (ns != NULL && ns[0] != '\0')
        n = snprintf(key, sizeof(key), "%s/%s", ns, name);
    else
        n = snprintf(key, sizeof(key), "%s", name);
    if (n <= 0 || n >= KEY_MAX)
        return NULL;
    pthread_mutex_lock(&inf->mu);
    if (inf->keys != NULL) {
        const struct kentry *e = egpu_map_get(inf->keys, key);

        obj = e != NULL ? kentry_object(inf, e) : NULL;
    } else {
        obj = json_incref(json_object_get(inf->store, key));
    }
    pthread_mutex_unlock(&inf->mu);
    return obj;
}

json_t *egpu_kube_informer_list(struct egpu_kube_informer *inf)
{
    json_t *arr = json_array(), *obj;
    const struct kentry *e;
    const char *key;
    size_t pos = 0;

    if (arr == NULL)
        return NULL;
    pthread_mutex_lock(&inf->mu);
    if (inf->keys != NULL) {
        while ((e = egpu_map_next(inf->keys, &pos, NULL)) != NULL) {
            if (json_array_append_new(arr, kentry_object(inf, e)) != 0)
                goto oom;
        }
    } else {
        json_object_foreach(inf->store, key, obj)
        {
            if (json_array_append(arr, obj) != 0)
                goto oom;
        }
    }
    pthread_mutex_unlock(&inf->mu);
    return arr;
oom:
    pthread_mutex_unlock(&inf->mu);
    json_decref(arr);
    return NULL;
}

void egpu_kube_informer_stats(struct egpu_kube_informer *inf, struct egpu_kube_informer_stats *out)
{
    pthread_mutex_lock(&inf->mu);
    *out = inf->stats;
    pthread_mutex_unlock(&inf->mu);
}

long egpu_kube_informer_unhealthy_ms(struct egpu_kube_informer *inf)
{
    int64_t since, open, now = egpu__kube_now_ms();

    if (inf == NULL)
        return 0;
    pthread_mutex_lock(&inf->mu);
    since = inf->unhealthy_since_ms;
    open = inf->open_since_ms;
    pthread_mutex_unlock(&inf->mu);
    if (since == 0 || (open != 0 && now - open >= OPEN_HEALTHY_MS))
        return 0;
    return (long)(now - since) + 1;
}

bool egpu_kube_informers_healthy(struct egpu_kube_informer *const *inf, const char *const *kinds,
                                 size_t n, long max_ms, char *why, size_t len)
{
    for (size_t i = 0; i < n; i++) {
        long ms = egpu_kube_informer_unhealthy_ms(inf[i]);

        if (ms > max_ms) {
            snprintf(why, len, "the list and watch of %s objects has failed for %ld s", kinds[i],
                     ms / 1000);
            return false;
        }
    }
    return true;
}

void egpu_kube_informer_stop(struct egpu_kube_informer *inf)
{
    if (inf != NULL)
        egpu__kube_worker_stop(&inf->worker);
}

void egpu_kube_informer_free(struct egpu_kube_informer *inf)
{
    if (inf == NULL)
        return;
    egpu__kube_worker_destroy(&inf->worker);
    pthread_cond_destroy(&inf->cond);
    pthread_mutex_destroy(&inf->mu);
    json_decref(inf->store);
    if (inf->keys != NULL) {
        size_t pos = 0;
        void *e;

        while ((e = egpu_map_next(inf->keys, &pos, NULL)) != NULL)
            egpu_free(e);
        egpu_map_free(inf->keys);
    }
    egpu_free(inf->store_field);
    egpu_free(inf->ns);
    egpu_free(inf->label_selector);
    egpu_free(inf->field_selector);
    egpu_free(inf);
}
