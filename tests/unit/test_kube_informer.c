/* tests/unit/test_kube_informer.c - the list+watch cache against the test API
 * server: the first sync, watch events, and that across dropped watches
 * (abrupt and graceful), a server that is down for a while, and a
 * compaction that expires the informer's resourceVersion (410, relist), the
 * callbacks see every change exactly once: counted per object against what
 * the test did, with no (object, resourceVersion) pair delivered twice.
 * Every test runs twice: listing in pages, then with stream_list (the
 * list a streaming watch, sendInitialEvents); the stream's own requests
 * and a server that refuses it have tests of their own.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "test_kube_server.h"

#define NS "inf"

static bool streamed; /* the informers list by a streaming watch (second group) */

static int group_setup(void **state)
{
    (void)state;
    return tks_start(&srv, (const char *const[]){"--bookmark-interval", "0.2", NULL});
}

static int group_setup_streamed(void **state)
{
    streamed = true;
    return group_setup(state);
}

/* What the callbacks saw. */
struct record {
    pthread_mutex_t mu;
    int adds, updates, deletes;
    char seen[400][96]; /* "A|U|D name rv" per callback */
    int nseen;
    bool duplicate;  /* the same (kind, name, rv) delivered twice */
    bool bad_update; /* an update whose old and new rv are equal */
};

static const char *rv_of(const json_t *obj)
{
    const char *v =
        json_string_value(json_object_get(json_object_get(obj, "metadata"), "resourceVersion"));

    return v ? v : "";
}

static const char *name_of(const json_t *obj)
{
    const char *v = json_string_value(json_object_get(json_object_get(obj, "metadata"), "name"));

    return v ? v : "";
}

static void note(struct record *r, char kind, const json_t *obj)
{
    char line[96];

    snprintf(line, sizeof(line), "%c %s %s", kind, name_of(obj), rv_of(obj));
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < r->nseen; i++) {
        if (strcmp(r->seen[i], line) == 0)
            r->duplicate = true;
    }
    if (r->nseen < 400)
        snprintf(r->seen[r->nseen++], sizeof(r->seen[0]), "%s", line);
    r->adds += kind == 'A';
    r->updates += kind == 'U';
    r->deletes += kind == 'D';
    pthread_mutex_unlock(&r->mu);
}

static void on_add(void *ud, const json_t *obj)
{
    note(ud, 'A', obj);
}

static void on_update(void *ud, const json_t *old_obj, const json_t *new_obj)
{
    struct record *r = ud;

    if (strcmp(rv_of(old_obj), rv_of(new_obj)) == 0)
        r->bad_update = true;
    note(r, 'U', new_obj);
}

static void on_delete(void *ud, const json_t *obj)
{
    note(ud, 'D', obj);
}

/* The options of this file's pod informers: namespace NS, pages of 2,
 * short watches and backoffs, listed as the group says (streamed). */
static struct egpu_kube_informer_opts pod_opts(void)
{
    return (struct egpu_kube_informer_opts){
        .res = &egpu_kube_pods,
        .ns = NS,
        .page_limit = 2,
        .watch_timeout_s = 30,
        .backoff_min_ms = 50,
        .backoff_max_ms = 400,
        .stream_list = streamed,
    };
}

static struct egpu_kube_informer *start_with(struct egpu_kube *kc, struct record *r)
{
    struct egpu_kube_informer_opts o = pod_opts();
    struct egpu_kube_informer_cbs cbs = {on_add, on_update, on_delete, r};
    struct egpu_kube_informer *inf = NULL;
    struct egpu_error err = {0};

    memset(r, 0, sizeof(*r));
    pthread_mutex_init(&r->mu, NULL);
    if (egpu_kube_informer_new(kc, &o, &cbs, &inf, &err) != 0 ||
        egpu_kube_informer_start(inf, &err) != 0)
        fail_msg("informer: %s", err.msg);
    assert_int_equal(egpu_kube_informer_wait_synced(inf, 5000), 0);
    return inf;
}

static struct egpu_kube_informer *start(struct record *r)
{
    return start_with(srv.kc, r);
}

/* Wait until the counts reach (adds, updates, deletes), then a little more
 * to catch any extra callback; assert they are exact. */
static void expect_counts(struct record *r, int adds, int updates, int deletes)
{
    long deadline = tks_now_ms() + 8000;
    bool reached = false;

    while (!reached && tks_now_ms() < deadline) {
        pthread_mutex_lock(&r->mu);
        reached = r->adds >= adds && r->updates >= updates && r->deletes >= deletes;
        pthread_mutex_unlock(&r->mu);
        if (!reached)
            tks_sleep_ms(20);
    }
    tks_sleep_ms(400); /* two bookmark intervals: no late repeats */
    pthread_mutex_lock(&r->mu);
    if (r->adds != adds || r->updates != updates || r->deletes != deletes || r->duplicate ||
        r->bad_update) {
        for (int i = 0; i < r->nseen; i++)
            fprintf(stderr, "  seen: %s\n", r->seen[i]);
        fail_msg("callbacks add=%d update=%d delete=%d dup=%d (want %d %d %d)", r->adds, r->updates,
                 r->deletes, r->duplicate, adds, updates, deletes);
    }
    pthread_mutex_unlock(&r->mu);
}

/* The cache equals a fresh list: same names, same resourceVersions. */
static void expect_cache_matches_server(struct egpu_kube_informer *inf)
{
    struct egpu_error err = {0};
    json_t *list = NULL, *items, *it, *cached;
    size_t i;

    assert_int_equal(egpu_kube_list(srv.kc, &egpu_kube_pods, NS, NULL, &list, NULL, &err), 0);
    items = json_object_get(list, "items");
    cached = egpu_kube_informer_list(inf);
    assert_int_equal(json_array_size(cached), json_array_size(items));
    json_decref(cached);
    json_array_foreach(items, i, it)
    {
        json_t *c = egpu_kube_informer_get(inf, NS, name_of(it));

        assert_non_null(c);
        assert_string_equal(rv_of(c), rv_of(it));
        json_decref(c);
    }
    json_decref(list);
}

/* Keep the informer from watching (its GETs fail with 503 and its watch
 * is dropped), so what the test then writes reaches it only by a relist. */
static void cut_off(void)
{
    tks_post(&srv, "fault",
             "{\"method\":\"GET\",\"path\":\"^/api/v1/namespaces/" NS "/pods$\",\"code\":503,"
             "\"count\":-1}");
    tks_post(&srv, "drop-watches", NULL);
}

/* After cut_off: compact, so the informer's resourceVersion is gone (410),
 * then let its GETs through again. */
static void expire_and_return(void)
{
    tks_post(&srv, "compact", NULL);
    tks_sleep_ms(300);
    json_decref(tks_control(&srv, "DELETE", "fault", NULL));
}

/* ------------------------------------------------------------------------ */

static void test_sync_and_events(void **state)
{
    struct record r;
    struct egpu_kube_informer *inf;
    struct egpu_kube_informer_stats stats;
    struct egpu_kube_config *cfg = NULL;
    struct egpu_kube *kc = NULL;
    struct egpu_error err = {0};
    json_t *obj;
    long live = egpu_alloc_live();

    (void)state;
    /* A client of its own, so that everything it held can be counted. */
    assert_int_equal(egpu_kube_config_new(srv.url, TKS_TOKEN, &cfg, &err), 0);
    assert_int_equal(egpu_kube_new(cfg, &kc, &err), 0);
    egpu_kube_config_free(cfg);
    for (int i = 0; i < 5; i++) {
        char name[16];

        snprintf(name, sizeof(name), "pre-%d", i);
        tks_create_pod(&srv, NS, name);
    }
    tks_create_pod(&srv, "elsewhere", "not-mine");
    inf = start_with(kc, &r);
    assert_true(egpu_kube_informer_has_synced(inf));
    /* The first list (3 pages of 2) is 5 adds, made before has_synced. */
    assert_int_equal(r.adds, 5);
    obj = egpu_kube_informer_get(inf, NS, "pre-3");
    assert_non_null(obj);
    json_decref(obj);
    assert_null(egpu_kube_informer_get(inf, "elsewhere", "not-mine"));

    tks_create_pod(&srv, NS, "new-0");
    tks_label_pod(&srv, NS, "pre-0", "k", "v1");
    tks_label_pod(&srv, NS, "pre-0", "k", "v2");
    tks_delete_pod(&srv, NS, "pre-1");
    /* A pod's deletion is two writes, as kube-apiserver's pod registry makes them: the
     * deletionTimestamp (an update), then the removal (a delete). */
    expect_counts(&r, 6, 3, 1);
    expect_cache_matches_server(inf);
    egpu_kube_informer_stats(inf, &stats);
    assert_int_equal(stats.lists, 1);
    assert_int_equal(stats.expired, 0);
    egpu_kube_informer_free(inf);
    egpu_kube_free(kc);
    pthread_mutex_destroy(&r.mu);
    assert_int_equal(egpu_alloc_live(), live);
}

static void test_dropped_watches_resume(void **state)
{
    struct record r;
    struct egpu_kube_informer *inf;
    struct egpu_kube_informer_stats stats;

    (void)state;
    tks_create_pod(&srv, NS, "a");
    tks_create_pod(&srv, NS, "b");
    inf = start(&r);
    expect_counts(&r, 2, 0, 0);

    /* Abrupt drop, changes, graceful drop, more changes. The changes of
     * the first batch arrive only over the watch opened after the drop, so
     * waiting for them makes the second drop find that watch open. */
    tks_post(&srv, "drop-watches", NULL);
    tks_create_pod(&srv, NS, "c");
    tks_label_pod(&srv, NS, "a", "k", "1");
    tks_delete_pod(&srv, NS, "b"); /* an update (deletionTimestamp), then the delete */
    expect_counts(&r, 3, 2, 1);
    tks_post(&srv, "drop-watches", "{\"graceful\":true}");
    tks_label_pod(&srv, NS, "c", "k", "1");
    tks_label_pod(&srv, NS, "a", "k", "2");
    tks_create_pod(&srv, NS, "d");
    expect_counts(&r, 4, 4, 1);
    expect_cache_matches_server(inf);
    egpu_kube_informer_stats(inf, &stats);
    /* Resumed from the last resourceVersion: no relist was needed. */
    assert_int_equal(stats.lists, 1);
    assert_true(stats.watches >= 3);
    egpu_kube_informer_free(inf);
    pthread_mutex_destroy(&r.mu);
}

static void test_compaction_relist_deltas(void **state)
{
    struct record r;
    struct egpu_kube_informer *inf;
    struct egpu_kube_informer_stats stats;

    (void)state;
    tks_create_pod(&srv, NS, "keep");
    tks_create_pod(&srv, NS, "change");
    tks_create_pod(&srv, NS, "remove");
    inf = start(&r);
    expect_counts(&r, 3, 0, 0);

    /* Keep the informer from watching (its GETs fail) while the test writes
     * and then compacts, so its resourceVersion is gone when it returns. */
    cut_off();
    tks_create_pod(&srv, NS, "added");
    tks_label_pod(&srv, NS, "change", "k", "1");
    tks_delete_pod(&srv, NS, "remove");
    expire_and_return();

    /* 410, relist, and the differences as callbacks: one of each. */
    expect_counts(&r, 4, 1, 1);
    expect_cache_matches_server(inf);
    egpu_kube_informer_stats(inf, &stats);
    assert_true(stats.expired >= 1);
    assert_true(stats.lists >= 2);
    assert_true(stats.errors >= 1);

    /* And it keeps watching after the relist. */
    tks_label_pod(&srv, NS, "keep", "k", "1");
    tks_create_pod(&srv, NS, "later");
    expect_counts(&r, 5, 2, 1);
    egpu_kube_informer_free(inf);
    pthread_mutex_destroy(&r.mu);
}

static void test_server_down_then_back(void **state)
{
    struct record r;
    struct egpu_kube_informer *inf;

    (void)state;
    tks_create_pod(&srv, NS, "a");
    inf = start(&r);
    expect_counts(&r, 1, 0, 0);
    /* Down: the watch breaks and reconnects fail (503) for a while. */
    tks_post(&srv, "down", "{\"down\":true}");
    tks_post(&srv, "drop-watches", NULL);
    tks_sleep_ms(600);
    tks_post(&srv, "down", "{\"down\":false}");
    tks_label_pod(&srv, NS, "a", "k", "1");
    tks_create_pod(&srv, NS, "b");
    expect_counts(&r, 2, 1, 0);
    expect_cache_matches_server(inf);

    /* Stopping is prompt even while a watch is open, and the cache stays. */
    {
        long t0 = tks_now_ms();
        json_t *obj;

        egpu_kube_informer_stop(inf);
        assert_true(tks_now_ms() - t0 < 1000);
        obj = egpu_kube_informer_get(inf, NS, "b");
        assert_non_null(obj);
        json_decref(obj);
    }
    egpu_kube_informer_free(inf);
    pthread_mutex_destroy(&r.mu);
}

/* A "\u0000" in an annotation value decodes (list and
 * watch), so the informer neither rejects the object nor wedges on it; and
 * egpu_kube_informer_unhealthy_ms follows a run of failures. */
static void test_nul_and_health(void **state)
{
    struct record r;
    struct egpu_kube_informer *inf;
    struct egpu_kube_informer_stats st;
    struct egpu_error err = {0};
    json_t *pod = tks_pod(NS, "nul-listed", "x"), *obj;
    long deadline;

    (void)state;
    json_object_set_new(json_object_get(pod, "metadata"), "annotations",
                        json_pack("{s:s%}", "note", "a\0b", (size_t)3));
    assert_int_equal(egpu_kube_create(srv.kc, &egpu_kube_pods, NS, pod, NULL, NULL, &err), 0);
    inf = start(&r);
    assert_int_equal(egpu_kube_informer_unhealthy_ms(inf), 0);
    json_object_set_new(json_object_get(pod, "metadata"), "name", json_string("nul-watched"));
    assert_int_equal(egpu_kube_create(srv.kc, &egpu_kube_pods, NS, pod, NULL, NULL, &err), 0);
    json_decref(pod);
    tks_create_pod(&srv, NS, "after");
    expect_counts(&r, 3, 0, 0);
    obj = egpu_kube_informer_get(inf, NS, "nul-watched");
    assert_non_null(obj);
    assert_int_equal(json_string_length(json_object_get(
                         json_object_get(json_object_get(obj, "metadata"), "annotations"), "note")),
                     3);
    json_decref(obj);
    egpu_kube_informer_stats(inf, &st);
    assert_int_equal(st.skipped, 0);
    /* The API goes away: unhealthy, and for longer and longer. */
    tks_post(&srv, "down", "{\"down\":true}");
    tks_post(&srv, "drop-watches", NULL);
    tks_sleep_ms(700);
    assert_true(egpu_kube_informer_unhealthy_ms(inf) >= 400);
    tks_sleep_ms(500);
    assert_true(egpu_kube_informer_unhealthy_ms(inf) >= 900);
    {
        /* What a component's /readyz says: the first informer failing longer
         * than the bound, by kind (a NULL informer, not started, is healthy). */
        struct egpu_kube_informer *infs[2] = {NULL, inf};
        static const char *const kinds[2] = {"Node", "Pod"};
        char why[128] = "untouched";

        assert_true(egpu_kube_informers_healthy(infs, kinds, 2, 60000, why, sizeof(why)));
        assert_string_equal(why, "untouched");
        tks_sleep_ms(1000);
        assert_false(egpu_kube_informers_healthy(infs, kinds, 2, 500, why, sizeof(why)));
        assert_non_null(strstr(why, "the list and watch of Pod objects has failed for "));
        assert_true(why[strlen(why) - 2] == ' ' && why[strlen(why) - 1] == 's'); /* "2 s" */
        assert_true(strtol(why + strlen("the list and watch of Pod objects has failed for "), NULL,
                           10) >= 2);
    }
    /* Back: healthy again once a watch has been open a second. */
    tks_post(&srv, "down", "{\"down\":false}");
    deadline = tks_now_ms() + 8000;
    while (egpu_kube_informer_unhealthy_ms(inf) != 0 && tks_now_ms() < deadline)
        tks_sleep_ms(50);
    assert_int_equal(egpu_kube_informer_unhealthy_ms(inf), 0);
    egpu_kube_informer_free(inf);
    pthread_mutex_destroy(&r.mu);
    assert_int_equal(egpu_kube_informer_unhealthy_ms(NULL), 0);
}

static void test_cluster_scoped_and_errors(void **state)
{
    struct egpu_kube_informer_opts o = {
        .res = &egpu_kube_nodes, .backoff_min_ms = 50, .stream_list = streamed};
    struct egpu_kube_informer *inf = NULL;
    struct egpu_error err = {0};
    json_t *node = json_pack("{s:s, s:s, s:{s:s}}", "apiVersion", "v1", "kind", "Node", "metadata",
                             "name", "gpu-node-1");
    json_t *obj;

    (void)state;
    assert_int_equal(egpu_kube_create(srv.kc, &egpu_kube_nodes, NULL, node, NULL, NULL, &err), 0);
    json_decref(node);
    assert_int_equal(egpu_kube_informer_new(srv.kc, &o, NULL, &inf, &err), 0);
    assert_int_equal(egpu_kube_informer_start(inf, &err), 0);
    assert_int_equal(egpu_kube_informer_start(inf, &err), -EALREADY);
    assert_int_equal(egpu_kube_informer_wait_synced(inf, 5000), 0);
    obj = egpu_kube_informer_get(inf, NULL, "gpu-node-1");
    assert_non_null(obj);
    json_decref(obj);
    egpu_kube_informer_free(inf);

    o.res = NULL;
    assert_int_equal(egpu_kube_informer_new(srv.kc, &o, NULL, &inf, &err), -EINVAL);
    /* Never synced: wait_synced times out. */
    tks_post(&srv, "down", "{\"down\":true}");
    o.res = &egpu_kube_nodes;
    assert_int_equal(egpu_kube_informer_new(srv.kc, &o, NULL, &inf, &err), 0);
    assert_int_equal(egpu_kube_informer_start(inf, &err), 0);
    assert_int_equal(egpu_kube_informer_wait_synced(inf, 300), -ETIMEDOUT);
    assert_false(egpu_kube_informer_has_synced(inf));
    egpu_kube_informer_free(inf);
    tks_post(&srv, "down", "{\"down\":false}");
}

/* ------------------------------------------------------------------------ */
/* Transforms                                                               */

/* egpu_kube_keep keeps exactly the named paths (and the key fields), walks
 * arrays element by element, keeps a malformed container whole, shares the
 * kept values with the original and never changes it. */
static void test_keep_paths(void **state)
{
    static const char *const keep[] = {"metadata.annotations",
                                       "spec.containers[].name",
                                       "spec.containers[].resources",
                                       "spec.nodeName",
                                       "status.phase",
                                       "weird.x",
                                       "spec.nodeName",
                                       NULL};
    json_t *obj = json_loads(
        "{\"kind\":\"Pod\",\"metadata\":{\"name\":\"p\",\"namespace\":\"n\",\"uid\":\"u\","
        "\"resourceVersion\":\"7\",\"managedFields\":[{\"manager\":\"kubectl\"}],"
        "\"labels\":{\"a\":\"b\"},\"annotations\":{\"k\":\"v\"}},"
        "\"spec\":{\"nodeName\":\"n1\",\"volumes\":[{\"name\":\"tok\"}],"
        "\"containers\":[{\"name\":\"c0\",\"image\":\"i\",\"resources\":{\"limits\":{\"cpu\":\"1\"}"
        "}},"
        "{\"name\":\"c1\",\"env\":[]},\"not-an-object\"]},"
        "\"status\":{\"phase\":\"Running\",\"containerStatuses\":[{}]},\"weird\":\"a string\"}",
        0, NULL);
    json_t *want =
        json_loads("{\"metadata\":{\"name\":\"p\",\"namespace\":\"n\",\"resourceVersion\":\"7\","
                   "\"annotations\":{\"k\":\"v\"}},"
                   "\"spec\":{\"nodeName\":\"n1\",\"containers\":[{\"name\":\"c0\",\"resources\":"
                   "{\"limits\":{\"cpu\":\"1\"}}},{\"name\":\"c1\"},\"not-an-object\"]},"
                   "\"status\":{\"phase\":\"Running\"},\"weird\":\"a string\"}",
                   0, NULL);
    json_t *before, *slim, *stripped;

    (void)state;
    assert_non_null(obj);
    assert_non_null(want);
    before = json_deep_copy(obj);
    slim = egpu_kube_keep(obj, keep);
    assert_non_null(slim);
    if (!json_equal(slim, want)) {
        char *got = json_dumps(slim, JSON_SORT_KEYS);

        fail_msg("kept %s", got);
    }
    assert_true(json_equal(obj, before)); /* the original is untouched */
    /* Shared, not copied. */
    assert_ptr_equal(json_object_get(json_object_get(slim, "metadata"), "annotations"),
                     json_object_get(json_object_get(obj, "metadata"), "annotations"));
    /* A whole subtree, then a path inside it: the subtree stays whole and
     * the original is still not changed. */
    json_decref(slim);
    slim = egpu_kube_keep(obj, (const char *const[]){"spec", "spec.containers[].name", NULL});
    assert_true(json_equal(json_object_get(slim, "spec"), json_object_get(obj, "spec")));
    assert_true(json_equal(obj, before));
    json_decref(slim);
    /* No paths: the key fields only. */
    slim = egpu_kube_keep(obj, NULL);
    assert_int_equal(json_object_size(slim), 1);
    assert_int_equal(json_object_size(json_object_get(slim, "metadata")), 3);
    json_decref(slim);
    /* Bad paths and inputs. */
    assert_null(egpu_kube_keep(obj, (const char *const[]){"spec..x", NULL}));
    assert_null(egpu_kube_keep(NULL, keep));
    slim = egpu_kube_keep(json_array_get(json_object_get(obj, "metadata"), 0), keep);
    assert_null(slim);
    {
        json_t *arr = json_object_get(json_object_get(obj, "metadata"), "managedFields");

        slim = egpu_kube_keep(arr, keep); /* not an object: itself */
        assert_ptr_equal(slim, arr);
        json_decref(slim);
    }
    /* managedFields only. */
    stripped = egpu_kube_strip_managed_fields(NULL, obj);
    assert_null(json_object_get(json_object_get(stripped, "metadata"), "managedFields"));
    json_object_del(json_object_get(before, "metadata"), "managedFields");
    assert_true(json_equal(stripped, before));
    assert_non_null(json_object_get(json_object_get(obj, "metadata"), "managedFields"));
    slim = egpu_kube_strip_managed_fields(NULL, stripped); /* none left: itself */
    assert_ptr_equal(slim, stripped);
    json_decref(slim);
    json_decref(stripped);
    json_decref(before);
    json_decref(want);
    json_decref(obj);
}

struct seen_slim {
    pthread_mutex_t mu;
    int adds, updates, deletes, fat; /* fat: callbacks given an object with a spec */
};

static int has_spec(const json_t *o)
{
    return json_object_get(o, "spec") != NULL ||
           json_object_get(json_object_get(o, "metadata"), "managedFields") != NULL;
}

static void slim_add(void *ud, const json_t *obj)
{
    struct seen_slim *s = ud;

    pthread_mutex_lock(&s->mu);
    s->adds++;
    s->fat += has_spec(obj);
    pthread_mutex_unlock(&s->mu);
}

static void slim_update(void *ud, const json_t *old_obj, const json_t *new_obj)
{
    struct seen_slim *s = ud;

    pthread_mutex_lock(&s->mu);
    s->updates++;
    s->fat += has_spec(old_obj) + has_spec(new_obj);
    pthread_mutex_unlock(&s->mu);
}

static void slim_delete(void *ud, const json_t *obj)
{
    struct seen_slim *s = ud;

    pthread_mutex_lock(&s->mu);
    s->deletes++;
    s->fat += has_spec(obj);
    pthread_mutex_unlock(&s->mu);
}

static bool slim_reached(struct seen_slim *s, int adds, int updates, int deletes)
{
    long deadline = tks_now_ms() + 8000;
    bool ok = false;

    while (!ok && tks_now_ms() < deadline) {
        pthread_mutex_lock(&s->mu);
        ok = s->adds >= adds && s->updates >= updates && s->deletes >= deletes;
        pthread_mutex_unlock(&s->mu);
        if (!ok)
            tks_sleep_ms(20);
    }
    return ok;
}

/* With a transform, the store and every callback (listed pages, watch
 * adds, updates and deletes, a relist after a 410) see only what it keeps;
 * without one (every other test here) objects are stored as sent. */
static void test_transform_informer(void **state)
{
    static const char *const keep[] = {"metadata.labels", NULL};
    struct egpu_kube_informer_opts o = pod_opts();
    struct seen_slim s = {.mu = PTHREAD_MUTEX_INITIALIZER};
    struct egpu_kube_informer_stats st;
    struct egpu_kube_informer_cbs cbs = {slim_add, slim_update, slim_delete, &s};
    struct egpu_kube_informer *inf = NULL;
    struct egpu_error err = {0};
    json_t *obj, *all;

    (void)state;
    o.transform = egpu_kube_keep_transform;
    o.transform_ud = (void *)keep;
    for (int i = 0; i < 5; i++) {
        char name[16];

        snprintf(name, sizeof(name), "slim-%d", i);
        tks_create_pod(&srv, NS, name);
    }
    assert_int_equal(egpu_kube_informer_new(srv.kc, &o, &cbs, &inf, &err), 0);
    assert_int_equal(egpu_kube_informer_start(inf, &err), 0);
    assert_int_equal(egpu_kube_informer_wait_synced(inf, 5000), 0);
    assert_int_equal(s.adds, 5); /* three pages of 2, each transformed */
    obj = egpu_kube_informer_get(inf, NS, "slim-2");
    assert_non_null(obj);
    assert_null(json_object_get(obj, "spec"));
    assert_null(json_object_get(obj, "kind"));
    assert_string_equal(name_of(obj), "slim-2");
    assert_string_equal(rv_of(obj)[0] ? "rv" : "", "rv");
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(json_object_get(obj, "metadata"), "labels"), "app")),
                        "trainer");
    json_decref(obj);

    tks_create_pod(&srv, NS, "slim-new");
    tks_label_pod(&srv, NS, "slim-0", "k", "v1");
    tks_delete_pod(&srv, NS, "slim-1");
    assert_true(slim_reached(&s, 6, 2, 1)); /* the deletion's timestamp is an update */
    obj = egpu_kube_informer_get(inf, NS, "slim-0");
    assert_non_null(obj);
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(json_object_get(obj, "metadata"), "labels"), "k")),
                        "v1");
    assert_false(has_spec(obj));
    json_decref(obj);
    /* A relist after a 410: its diff is of transformed objects too, so an
     * unchanged pod is no update (same resourceVersion). */
    cut_off();
    tks_label_pod(&srv, NS, "slim-3", "k", "v2");
    expire_and_return();
    assert_true(slim_reached(&s, 6, 3, 1));
    tks_label_pod(&srv, NS, "slim-4", "k", "v3"); /* and the watch after it */
    assert_true(slim_reached(&s, 6, 4, 1));
    tks_sleep_ms(400);
    egpu_kube_informer_stats(inf, &st);
    assert_true(st.expired >= 1);
    assert_true(st.lists >= 2);
    all = egpu_kube_informer_list(inf);
    assert_int_equal(json_array_size(all), 5);
    for (size_t i = 0; i < json_array_size(all); i++)
        assert_false(has_spec(json_array_get(all, i)));
    json_decref(all);
    pthread_mutex_lock(&s.mu);
    assert_int_equal(s.fat, 0);
    assert_int_equal(s.adds, 6);
    assert_int_equal(s.updates, 4);
    assert_int_equal(s.deletes, 1);
    pthread_mutex_unlock(&s.mu);
    egpu_kube_informer_free(inf);
}

struct seen_keys {
    pthread_mutex_t mu;
    int adds, updates, deletes;
    int new_without_labels; /* new objects given without what the transform keeps */
    int old_with_labels;    /* old or deleted objects given with more than their key */
};

static bool has_labels(const json_t *o)
{
    return json_object_get(json_object_get(o, "metadata"), "labels") != NULL;
}

static void keys_add(void *ud, const json_t *obj)
{
    struct seen_keys *s = ud;

    pthread_mutex_lock(&s->mu);
    s->adds++;
    s->new_without_labels += !has_labels(obj);
    pthread_mutex_unlock(&s->mu);
}

static void keys_update(void *ud, const json_t *old_obj, const json_t *new_obj)
{
    struct seen_keys *s = ud;

    pthread_mutex_lock(&s->mu);
    s->updates++;
    s->new_without_labels += !has_labels(new_obj);
    s->old_with_labels += has_labels(old_obj);
    pthread_mutex_unlock(&s->mu);
}

static void keys_delete(void *ud, const json_t *obj)
{
    struct seen_keys *s = ud;

    pthread_mutex_lock(&s->mu);
    s->deletes++;
    pthread_mutex_unlock(&s->mu);
    (void)obj;
}

static bool keys_reached(struct seen_keys *s, int adds, int updates, int deletes)
{
    long deadline = tks_now_ms() + 8000;
    bool ok = false;

    while (!ok && tks_now_ms() < deadline) {
        pthread_mutex_lock(&s->mu);
        ok = s->adds >= adds && s->updates >= updates && s->deletes >= deletes;
        pthread_mutex_unlock(&s->mu);
        if (!ok)
            tks_sleep_ms(20);
    }
    return ok;
}

/* store_keys_only: the callbacks get each new object as transformed, the
 * store (old_obj, _get, _list) only its name, namespace and
 * resourceVersion, and the relist diff and the repeat check still work
 * from those: an unchanged pod is no update, a vanished one a delete. */
static void test_store_keys_only(void **state)
{
    static const char *const keep[] = {"metadata.labels", NULL};
    struct egpu_kube_informer_opts o = pod_opts();
    struct seen_keys s = {.mu = PTHREAD_MUTEX_INITIALIZER};
    struct egpu_kube_informer_cbs cbs = {keys_add, keys_update, keys_delete, &s};
    struct egpu_kube_informer *inf = NULL;
    struct egpu_error err = {0};
    json_t *obj, *all;

    (void)state;
    o.transform = egpu_kube_keep_transform;
    o.transform_ud = (void *)keep;
    o.store_keys_only = true;
    for (int i = 0; i < 5; i++) {
        char name[16];

        snprintf(name, sizeof(name), "key-%d", i);
        tks_create_pod(&srv, NS, name);
    }
    assert_int_equal(egpu_kube_informer_new(srv.kc, &o, &cbs, &inf, &err), 0);
    assert_int_equal(egpu_kube_informer_start(inf, &err), 0);
    assert_int_equal(egpu_kube_informer_wait_synced(inf, 5000), 0);
    assert_int_equal(s.adds, 5); /* three pages of 2 */
    obj = egpu_kube_informer_get(inf, NS, "key-2");
    assert_non_null(obj);
    assert_string_equal(name_of(obj), "key-2");
    assert_true(rv_of(obj)[0] != '\0');
    assert_false(has_labels(obj));
    json_decref(obj);

    tks_label_pod(&srv, NS, "key-0", "k", "v1");
    assert_true(keys_reached(&s, 5, 1, 0));
    /* A relist after a 410 that misses a deletion and a label. */
    cut_off();
    tks_label_pod(&srv, NS, "key-3", "k", "v2");
    tks_delete_pod(&srv, NS, "key-1");
    expire_and_return();
    assert_true(keys_reached(&s, 5, 2, 1));
    tks_sleep_ms(400);
    all = egpu_kube_informer_list(inf);
    assert_non_null(all);
    for (size_t i = 0; i < json_array_size(all); i++)
        assert_false(has_labels(json_array_get(all, i)));
    pthread_mutex_lock(&s.mu);
    /* key-1's deletion timestamp may come as an update before it goes. */
    assert_true(s.updates == 2 || s.updates == 3);
    assert_int_equal(s.deletes, 1);
    assert_int_equal(s.adds, 5);
    assert_int_equal(s.new_without_labels, 0);
    assert_int_equal(s.old_with_labels, 0);
    assert_int_equal(json_array_size(all), 4);
    pthread_mutex_unlock(&s.mu);
    json_decref(all);
    egpu_kube_informer_free(inf);
}

/* store_field: the store keeps one string field besides the keys, and
 * old_obj, a relist's delete and _get give it at its path (nothing else of
 * the object). */
struct seen_field {
    pthread_mutex_t mu;
    int adds, updates, deletes;
    char old_app[32];     /* metadata.labels.app of the last old or deleted object */
    char deleted_ns[32];  /* metadata.namespace of the last deleted object */
    int old_other_labels; /* old or deleted objects with a label besides app */
};

static void field_seen(struct seen_field *s, const json_t *old)
{
    const json_t *labels = json_object_get(json_object_get(old, "metadata"), "labels");
    const char *app = json_string_value(json_object_get(labels, "app"));

    snprintf(s->old_app, sizeof(s->old_app), "%s", app ? app : "(none)");
    s->old_other_labels += json_object_size(labels) > (app != NULL ? 1u : 0u);
}

static void field_add(void *ud, const json_t *obj)
{
    struct seen_field *s = ud;

    (void)obj;
    pthread_mutex_lock(&s->mu);
    s->adds++;
    pthread_mutex_unlock(&s->mu);
}

static void field_update(void *ud, const json_t *old_obj, const json_t *new_obj)
{
    struct seen_field *s = ud;

    (void)new_obj;
    pthread_mutex_lock(&s->mu);
    s->updates++;
    field_seen(s, old_obj);
    pthread_mutex_unlock(&s->mu);
}

static void field_delete(void *ud, const json_t *obj)
{
    struct seen_field *s = ud;
    const char *ns =
        json_string_value(json_object_get(json_object_get(obj, "metadata"), "namespace"));

    pthread_mutex_lock(&s->mu);
    s->deletes++;
    field_seen(s, obj);
    snprintf(s->deleted_ns, sizeof(s->deleted_ns), "%s", ns ? ns : "(none)");
    pthread_mutex_unlock(&s->mu);
}

static bool field_reached(struct seen_field *s, int adds, int updates, int deletes)
{
    long deadline = tks_now_ms() + 8000;
    bool ok = false;

    while (!ok && tks_now_ms() < deadline) {
        pthread_mutex_lock(&s->mu);
        ok = s->adds >= adds && s->updates >= updates && s->deletes >= deletes;
        pthread_mutex_unlock(&s->mu);
        if (!ok)
            tks_sleep_ms(20);
    }
    return ok;
}

static void test_store_field(void **state)
{
    static const char *const keep[] = {"metadata.labels", NULL};
    struct egpu_kube_informer_opts o = pod_opts();
    struct seen_field s = {.mu = PTHREAD_MUTEX_INITIALIZER};
    struct egpu_kube_informer_cbs cbs = {field_add, field_update, field_delete, &s};
    struct egpu_kube_informer *inf = NULL;
    struct egpu_error err = {0};
    const json_t *labels;
    json_t *obj;

    (void)state;
    o.transform = egpu_kube_keep_transform;
    o.transform_ud = (void *)keep;
    o.store_keys_only = true;
    o.store_field = "metadata.labels.app";
    tks_create_pod(&srv, NS, "f-0");
    tks_create_pod(&srv, NS, "f-1");
    tks_create_pod(&srv, NS, "f-2");
    assert_int_equal(egpu_kube_informer_new(srv.kc, &o, &cbs, &inf, &err), 0);
    assert_int_equal(egpu_kube_informer_start(inf, &err), 0);
    assert_int_equal(egpu_kube_informer_wait_synced(inf, 5000), 0);
    obj = egpu_kube_informer_get(inf, NS, "f-1");
    assert_non_null(obj);
    assert_string_equal(name_of(obj), "f-1");
    assert_true(rv_of(obj)[0] != '\0');
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(obj, "metadata"), "namespace")), NS);
    labels = json_object_get(json_object_get(obj, "metadata"), "labels");
    assert_int_equal(json_object_size(labels), 1);
    assert_string_equal(json_string_value(json_object_get(labels, "app")), "trainer");
    assert_null(json_object_get(obj, "spec"));
    json_decref(obj);

    tks_label_pod(&srv, NS, "f-0", "app", "v2");
    assert_true(field_reached(&s, 3, 1, 0));
    pthread_mutex_lock(&s.mu);
    assert_string_equal(s.old_app, "trainer");
    pthread_mutex_unlock(&s.mu);
    tks_label_pod(&srv, NS, "f-0", "other", "x");
    assert_true(field_reached(&s, 3, 2, 0));
    pthread_mutex_lock(&s.mu);
    assert_string_equal(s.old_app, "v2");
    pthread_mutex_unlock(&s.mu);

    /* A deletion found by a relist after a 410: the store's entry. */
    cut_off();
    tks_delete_pod(&srv, NS, "f-1");
    expire_and_return();
    assert_true(field_reached(&s, 3, 2, 1));
    pthread_mutex_lock(&s.mu);
    assert_int_equal(s.deletes, 1);
    assert_string_equal(s.old_app, "trainer");
    assert_string_equal(s.deleted_ns, NS);
    assert_int_equal(s.old_other_labels, 0);
    pthread_mutex_unlock(&s.mu);
    assert_null(egpu_kube_informer_get(inf, NS, "f-1"));
    obj = egpu_kube_informer_list(inf);
    assert_int_equal(json_array_size(obj), 2);
    json_decref(obj);
    egpu_kube_informer_free(inf);
}

/* ------------------------------------------------------------------------ */
/* Streaming lists                                                          */

/* The API requests for this test's pods so far: how many were streaming
 * lists, plain watches and paged lists. */
struct pod_requests {
    int streams, watches, lists;
};

static struct pod_requests pod_requests(void)
{
    json_t *log = tks_control(&srv, "GET", "requests", NULL), *r;
    struct pod_requests n = {0};
    size_t i;

    json_array_foreach(log, i, r)
    {
        const char *method = json_string_value(json_object_get(r, "method"));
        const char *path = json_string_value(json_object_get(r, "path"));
        const char *q = json_string_value(json_object_get(r, "query"));

        if (method == NULL || strcmp(method, "GET") != 0 || path == NULL ||
            strcmp(path, "/api/v1/namespaces/" NS "/pods") != 0)
            continue;
        q = q ? q : "";
        if (strstr(q, "watch=1") == NULL)
            n.lists++;
        else if (strstr(q, "sendInitialEvents=true") != NULL &&
                 strstr(q, "resourceVersionMatch=NotOlderThan") != NULL &&
                 strstr(q, "allowWatchBookmarks=true") != NULL &&
                 strstr(q, "resourceVersion=") == NULL)
            n.streams++; /* and no resourceVersion: a consistent read */
        else
            n.watches++;
    }
    json_decref(log);
    return n;
}

/* A transform that is not egpu_kube_keep_transform: applied to each
 * initial event of a stream as to each watched object. */
static json_t *mark_transform(void *ud, json_t *obj)
{
    json_t *c = json_deep_copy(obj);

    (void)ud;
    if (c != NULL)
        json_object_set_new(c, "transformed", json_true());
    return c;
}

static int marked_adds;
static void marked_add(void *ud, const json_t *obj)
{
    (void)ud;
    if (json_is_true(json_object_get(obj, "transformed")))
        __atomic_fetch_add(&marked_adds, 1, __ATOMIC_SEQ_CST);
}

/* stream_list lists by one watch with sendInitialEvents and no
 * resourceVersion, never a paged list; the initial events are the list's
 * adds (transformed), made before has_synced; and the same stream then
 * carries the watch's events (one watch request in all). */
static void test_stream_list_one_request(void **state)
{
    struct egpu_kube_informer_opts o = pod_opts();
    struct egpu_kube_informer_cbs cbs = {.on_add = marked_add};
    struct egpu_kube_informer_stats st;
    struct egpu_kube_informer *inf = NULL;
    struct egpu_error err = {0};
    struct pod_requests n;
    json_t *obj;
    long deadline;

    (void)state;
    o.transform = mark_transform;
    o.stream_list = true;
    for (int i = 0; i < 5; i++) {
        char name[16];

        snprintf(name, sizeof(name), "s-%d", i);
        tks_create_pod(&srv, NS, name);
    }
    json_decref(tks_control(&srv, "DELETE", "requests", NULL));
    marked_adds = 0;
    assert_int_equal(egpu_kube_informer_new(srv.kc, &o, &cbs, &inf, &err), 0);
    assert_int_equal(egpu_kube_informer_start(inf, &err), 0);
    assert_int_equal(egpu_kube_informer_wait_synced(inf, 5000), 0);
    assert_int_equal(__atomic_load_n(&marked_adds, __ATOMIC_SEQ_CST), 5);
    obj = egpu_kube_informer_get(inf, NS, "s-4");
    assert_non_null(obj);
    assert_true(json_is_true(json_object_get(obj, "transformed")));
    json_decref(obj);

    tks_create_pod(&srv, NS, "s-later");
    deadline = tks_now_ms() + 5000;
    while (__atomic_load_n(&marked_adds, __ATOMIC_SEQ_CST) < 6 && tks_now_ms() < deadline)
        tks_sleep_ms(20);
    assert_int_equal(__atomic_load_n(&marked_adds, __ATOMIC_SEQ_CST), 6);
    n = pod_requests();
    assert_int_equal(n.streams, 1);
    assert_int_equal(n.lists, 0);
    assert_int_equal(n.watches, 0);
    egpu_kube_informer_stats(inf, &st);
    assert_int_equal(st.lists, 1);
    assert_int_equal(st.watches, 1);
    assert_int_equal(st.errors, 0);
    egpu_kube_informer_free(inf);
}

/* A streaming informer started with the request log cleared and its first
 * request answered with HTTP code. */
static struct egpu_kube_informer *start_streamed_after(struct record *r, int code)
{
    struct egpu_kube_informer *inf;
    bool was = streamed;
    char fault[160];

    json_decref(tks_control(&srv, "DELETE", "requests", NULL));
    snprintf(fault, sizeof(fault),
             "{\"method\":\"GET\",\"path\":\"^/api/v1/namespaces/" NS
             "/pods$\",\"code\":%d,\"count\":1}",
             code);
    tks_post(&srv, "fault", fault);
    streamed = true;
    inf = start(r);
    streamed = was;
    return inf;
}

/* A server that refuses the stream (422 Invalid, kube-apiserver with the
 * WatchList gate off) is listed in pages at once, without a backoff, and
 * from then on: the relist after a 410 is paged too. A stream that fails
 * otherwise (500) is a failed list, retried as a stream. */
static void test_stream_refused_lists_in_pages(void **state)
{
    struct record r;
    struct egpu_kube_informer *inf;
    struct egpu_kube_informer_stats st;
    struct pod_requests n;

    (void)state;
    tks_create_pod(&srv, NS, "a");
    tks_create_pod(&srv, NS, "b");
    tks_create_pod(&srv, NS, "c");
    inf = start_streamed_after(&r, 422);
    assert_int_equal(r.adds, 3);
    n = pod_requests();
    assert_int_equal(n.streams, 1);
    assert_int_equal(n.lists, 2); /* 3 pods, 2 a page */
    egpu_kube_informer_stats(inf, &st);
    assert_int_equal(st.errors, 0); /* no failure, no backoff */

    /* A 410: listed again, in pages (the deletion found by the list). */
    cut_off();
    tks_delete_pod(&srv, NS, "c");
    expire_and_return();
    expect_counts(&r, 3, 0, 1);
    expect_cache_matches_server(inf);
    n = pod_requests();
    assert_int_equal(n.streams, 1);
    assert_true(n.lists >= 3);
    egpu_kube_informer_free(inf);
    pthread_mutex_destroy(&r.mu);

    /* A 500 on the stream: a failed list, then a stream again. */
    inf = start_streamed_after(&r, 500);
    assert_int_equal(r.adds, 2);
    n = pod_requests();
    assert_int_equal(n.streams, 2);
    assert_int_equal(n.lists, 0);
    egpu_kube_informer_stats(inf, &st);
    assert_int_equal(st.errors, 1);
    assert_int_equal(st.lists, 1);
    egpu_kube_informer_free(inf);
    pthread_mutex_destroy(&r.mu);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_sync_and_events, tks_reset_test),
        cmocka_unit_test_setup(test_dropped_watches_resume, tks_reset_test),
        cmocka_unit_test_setup(test_compaction_relist_deltas, tks_reset_test),
        cmocka_unit_test_setup(test_store_keys_only, tks_reset_test),
        cmocka_unit_test_setup(test_store_field, tks_reset_test),
        cmocka_unit_test_setup(test_server_down_then_back, tks_reset_test),
        cmocka_unit_test_setup(test_cluster_scoped_and_errors, tks_reset_test),
        cmocka_unit_test_setup(test_nul_and_health, tks_reset_test),
        cmocka_unit_test(test_keep_paths),
        cmocka_unit_test_setup(test_transform_informer, tks_reset_test),
    };

    const struct CMUnitTest streaming[] = {
        cmocka_unit_test_setup(test_stream_list_one_request, tks_reset_test),
        cmocka_unit_test_setup(test_stream_refused_lists_in_pages, tks_reset_test),
    };
    int failed = cmocka_run_group_tests_name("paged lists", tests, group_setup, tks_group_teardown);

    failed += cmocka_run_group_tests_name("streaming lists", tests, group_setup_streamed,
                                          tks_group_teardown);
    return failed + cmocka_run_group_tests_name("streaming list requests", streaming, group_setup,
                                                tks_group_teardown);
}
