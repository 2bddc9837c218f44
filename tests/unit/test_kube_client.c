/* tests/unit/test_kube_client.c - the API client against the test API server
 * (tests/apiserver/server.py): get, create, update with resourceVersion
 * (409 Conflict), merge and JSON patch, delete, the binding subresource,
 * list paging and its restart on an expired continue token, watch from a
 * resourceVersion with bookmarks, 410 on watch, stop flags, error replies,
 * 429 retries, token file rotation, TLS, and concurrent use of one client.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "test_kube_server.h"

static int group_setup(void **state)
{
    (void)state;
    return tks_start(&srv, (const char *const[]){"--bookmark-interval", "0.3", NULL});
}

static const char *meta(const json_t *obj, const char *field)
{
    const char *v = json_string_value(json_object_get(json_object_get(obj, "metadata"), field));

    return v ? v : "";
}

/* Number of API requests logged whose path matches path and query contains q. */
static int count_requests(const char *method, const char *path, const char *q)
{
    json_t *log = tks_control(&srv, "GET", "requests", NULL), *r;
    size_t i;
    int n = 0;

    json_array_foreach(log, i, r)
    {
        const char *m = json_string_value(json_object_get(r, "method"));
        const char *p = json_string_value(json_object_get(r, "path"));
        const char *query = json_string_value(json_object_get(r, "query"));

        if (m && p && strcmp(m, method) == 0 && strcmp(p, path) == 0 &&
            (q == NULL || (query && strstr(query, q))))
            n++;
    }
    json_decref(log);
    return n;
}

/* ------------------------------------------------------------------------ */

static void test_get_create_update_conflict(void **state)
{
    struct egpu_kube *kc = srv.kc;
    struct egpu_kube_status st;
    struct egpu_error err = {0};
    json_t *pod = tks_pod("ml-team", "train-job-0", "trainer"), *created = NULL, *got = NULL;
    json_t *stale, *updated = NULL;
    long live = egpu_alloc_live();
    char rv1[64];

    (void)state;
    assert_int_equal(egpu_kube_create(kc, &egpu_kube_pods, "ml-team", pod, &created, &st, &err), 0);
    snprintf(rv1, sizeof(rv1), "%s", meta(created, "resourceVersion"));
    assert_true(rv1[0] != '\0');
    assert_true(meta(created, "uid")[0] != '\0');

    /* Again: 409 AlreadyExists. */
    assert_int_equal(egpu_kube_create(kc, &egpu_kube_pods, "ml-team", pod, NULL, &st, &err),
                     -EEXIST);
    assert_int_equal(st.code, 409);
    assert_string_equal(st.reason, "AlreadyExists");

    assert_int_equal(egpu_kube_get(kc, &egpu_kube_pods, "ml-team", "train-job-0", &got, &st, &err),
                     0);
    assert_string_equal(meta(got, "resourceVersion"), rv1);
    assert_string_equal(json_string_value(json_object_get(got, "kind")), "Pod");

    /* Update with the RV read: accepted, new RV. */
    stale = json_deep_copy(got);
    json_object_set_new(json_object_get(json_object_get(got, "metadata"), "labels"), "step",
                        json_string("1"));
    assert_int_equal(
        egpu_kube_update(kc, &egpu_kube_pods, "ml-team", "train-job-0", got, &updated, &st, &err),
        0);
    assert_string_not_equal(meta(updated, "resourceVersion"), rv1);
    assert_string_equal(
        json_string_value(json_object_get(
            json_object_get(json_object_get(updated, "metadata"), "labels"), "step")),
        "1");

    /* Update with the stale RV: 409 Conflict, as the API's Status. */
    json_object_set_new(json_object_get(json_object_get(stale, "metadata"), "labels"), "step",
                        json_string("2"));
    assert_int_equal(
        egpu_kube_update(kc, &egpu_kube_pods, "ml-team", "train-job-0", stale, NULL, &st, &err),
        EGPU_KUBE_ECONFLICT);
    assert_int_equal(st.code, 409);
    assert_string_equal(st.reason, "Conflict");
    assert_non_null(strstr(st.message, "the object has been modified; please apply your changes "
                                       "to the latest version and try again"));
    assert_non_null(strstr(err.msg, "PUT /api/v1/namespaces/ml-team/pods/train-job-0: 409"));

    /* Missing object: 404 NotFound. */
    assert_int_equal(egpu_kube_get(kc, &egpu_kube_pods, "ml-team", "nope", &got, &st, &err),
                     -ENOENT);
    assert_string_equal(st.reason, "NotFound");

    json_decref(pod);
    json_decref(created);
    json_decref(got);
    json_decref(stale);
    json_decref(updated);
    assert_int_equal(egpu_alloc_live(), live);
}

static void test_patches_and_delete(void **state)
{
    struct egpu_kube *kc = srv.kc;
    struct egpu_kube_status st;
    struct egpu_error err = {0};
    json_t *out = NULL, *patch, *gpu;
    const char *ann;

    (void)state;
    tks_create_pod(&srv, "ml-team", "p");
    /* Merge patch: add an annotation. */
    patch = json_pack("{s:{s:{s:s}}}", "metadata", "annotations", "elasticgpu.io/assigned",
                      "GPU-1:50:4096");
    assert_int_equal(egpu_kube_patch(kc, &egpu_kube_pods, "ml-team", "p", EGPU_KUBE_MERGE_PATCH,
                                     patch, &out, &st, &err),
                     0);
    ann = json_string_value(
        json_object_get(json_object_get(json_object_get(out, "metadata"), "annotations"),
                        "elasticgpu.io/assigned"));
    assert_string_equal(ann, "GPU-1:50:4096");
    json_decref(patch);
    json_decref(out);
    out = NULL;

    /* JSON patch with a test op: applies when the test holds, 422 when not. */
    patch = json_pack("[{s:s, s:s, s:s}, {s:s, s:s, s:s}]", "op", "test", "path",
                      "/metadata/annotations/elasticgpu.io~1assigned", "value", "GPU-1:50:4096",
                      "op", "replace", "path", "/metadata/annotations/elasticgpu.io~1assigned",
                      "value", "GPU-2:25:1024");
    assert_int_equal(egpu_kube_patch(kc, &egpu_kube_pods, "ml-team", "p", EGPU_KUBE_JSON_PATCH,
                                     patch, &out, &st, &err),
                     0);
    ann = json_string_value(
        json_object_get(json_object_get(json_object_get(out, "metadata"), "annotations"),
                        "elasticgpu.io/assigned"));
    assert_string_equal(ann, "GPU-2:25:1024");
    json_decref(out);
    out = NULL;
    assert_true(egpu_kube_patch(kc, &egpu_kube_pods, "ml-team", "p", EGPU_KUBE_JSON_PATCH, patch,
                                &out, &st, &err) < 0);
    assert_true(st.code == 422 || st.code == 409);
    json_decref(patch);

    /* A merge patch carrying a stale resourceVersion is a conflict. */
    patch = json_pack("{s:{s:s, s:{s:s}}}", "metadata", "resourceVersion", "1", "labels", "x", "y");
    assert_int_equal(egpu_kube_patch(kc, &egpu_kube_pods, "ml-team", "p", EGPU_KUBE_MERGE_PATCH,
                                     patch, NULL, &st, &err),
                     EGPU_KUBE_ECONFLICT);
    assert_string_equal(st.reason, "Conflict");
    json_decref(patch);

    /* Strategic merge patch is refused on a custom resource: 415. */
    gpu = json_pack("{s:s, s:s, s:{s:s}, s:{s:s, s:i}}", "apiVersion", "elasticgpu.io/v1alpha1",
                    "kind", "GPU", "metadata", "name", "gpu-node-1-0", "spec", "nodeName",
                    "gpu-node-1", "memory", 16384);
    assert_int_equal(egpu_kube_create(kc, &egpu_kube_gpus, NULL, gpu, NULL, &st, &err), 0);
    patch = json_pack("{s:{s:i}}", "spec", "memory", 32768);
    assert_int_equal(egpu_kube_patch(kc, &egpu_kube_gpus, NULL, "gpu-node-1-0",
                                     EGPU_KUBE_STRATEGIC_PATCH, patch, NULL, &st, &err),
                     -ENOTSUP);
    assert_string_equal(st.reason, "UnsupportedMediaType");
    /* Status subresource by merge patch. */
    json_decref(patch);
    patch = json_pack("{s:{s:s}}", "status", "health", "Healthy");
    assert_int_equal(egpu_kube_patch_status(kc, &egpu_kube_gpus, NULL, "gpu-node-1-0",
                                            EGPU_KUBE_MERGE_PATCH, patch, &out, &st, &err),
                     0);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(out, "status"), "health")), "Healthy");
    json_decref(out);
    json_decref(patch);
    json_decref(gpu);

    /* Delete, then it is gone, and deleting again is 404. */
    assert_int_equal(egpu_kube_delete(kc, &egpu_kube_pods, "ml-team", "p", &st, &err), 0);
    assert_int_equal(egpu_kube_get(kc, &egpu_kube_pods, "ml-team", "p", &out, &st, &err), -ENOENT);
    assert_int_equal(egpu_kube_delete(kc, &egpu_kube_pods, "ml-team", "p", &st, &err), -ENOENT);
    assert_int_equal(count_requests("PATCH", "/api/v1/namespaces/ml-team/pods/p", NULL), 4);
}

static void test_binding(void **state)
{
    struct egpu_kube *kc = srv.kc;
    struct egpu_kube_status st;
    struct egpu_error err = {0};
    json_t *ann = json_pack("{s:s}", "elasticgpu.io/assigned", "main=GPU-1:50:4096");
    json_t *pod = NULL, *conds, *c;
    size_t i;
    bool scheduled = false;

    (void)state;
    tks_create_pod(&srv, "ml-team", "train-job-0");
    assert_int_equal(egpu_kube_get(kc, &egpu_kube_pods, "ml-team", "train-job-0", &pod, NULL, &err),
                     0);
    /* A wrong uid precondition fails. */
    assert_true(egpu_kube_bind(kc, "ml-team", "train-job-0", "00000000-0000-0000-0000-000000000000",
                               "gpu-node-1", ann, &st, &err) < 0);
    assert_int_equal(egpu_kube_bind(kc, "ml-team", "train-job-0", meta(pod, "uid"), "gpu-node-1",
                                    ann, &st, &err),
                     0);
    json_decref(pod);
    assert_int_equal(egpu_kube_get(kc, &egpu_kube_pods, "ml-team", "train-job-0", &pod, NULL, &err),
                     0);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(pod, "spec"), "nodeName")), "gpu-node-1");
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(json_object_get(pod, "metadata"), "annotations"),
                            "elasticgpu.io/assigned")),
                        "main=GPU-1:50:4096");
    conds = json_object_get(json_object_get(pod, "status"), "conditions");
    json_array_foreach(conds, i, c)
    {
        if (strcmp(json_string_value(json_object_get(c, "type")), "PodScheduled") == 0)
            scheduled = strcmp(json_string_value(json_object_get(c, "status")), "True") == 0;
    }
    assert_true(scheduled);
    /* Bound already: 409 with the scheduler's message. */
    assert_int_equal(
        egpu_kube_bind(kc, "ml-team", "train-job-0", NULL, "gpu-node-2", NULL, &st, &err),
        EGPU_KUBE_ECONFLICT);
    assert_int_equal(st.code, 409);
    assert_string_equal(st.reason, "Conflict");
    assert_non_null(
        strstr(st.message, "pod train-job-0 is already assigned to node \"gpu-node-1\""));
    json_decref(pod);
    json_decref(ann);
}

/* ------------------------------------------------------------------------ */
/* List                                                                     */

struct pages {
    int calls;
    unsigned indexes[16];
    bool compact_after_first;
};

static int on_page(void *ud, unsigned index, const json_t *page)
{
    struct pages *p = ud;

    (void)page;
    if (p->calls < 16)
        p->indexes[p->calls] = index;
    p->calls++;
    if (p->compact_after_first && p->calls == 1) {
        /* A write and a compaction between pages: the continue token dies. */
        tks_create_pod(&srv, "paging", "pod-late");
        tks_post(&srv, "compact", NULL);
    }
    return 0;
}

static void check_names(json_t *list, const char *const *want)
{
    json_t *items = json_object_get(list, "items"), *it;
    size_t i, n = 0;

    while (want[n] != NULL)
        n++;
    assert_int_equal(json_array_size(items), n);
    json_array_foreach(items, i, it)
    {
        assert_string_equal(meta(it, "name"), want[i]);
    }
}

static void test_list_paging(void **state)
{
    static const char *const names[] = {"pod-a", "pod-b", "pod-c", "pod-d", "pod-e", NULL};
    struct pages pages = {0};
    struct egpu_kube_list_opts o = {.limit = 2, .on_page = on_page, .ud = &pages};
    struct egpu_error err = {0};
    json_t *list = NULL, *m;
    long live = egpu_alloc_live();
    long last_rv = 0;

    (void)state;
    for (int i = 0; names[i]; i++)
        last_rv = tks_create_pod(&srv, "paging", names[i]);
    tks_create_pod(&srv, "other", "pod-x");
    json_decref(tks_control(&srv, "DELETE", "requests", NULL));
    assert_int_equal(egpu_kube_list(srv.kc, &egpu_kube_pods, "paging", &o, &list, NULL, &err), 0);
    check_names(list, names);
    m = json_object_get(list, "metadata");
    assert_null(json_object_get(m, "continue"));
    assert_null(json_object_get(m, "remainingItemCount"));
    assert_true(strtol(meta(list, "resourceVersion"), NULL, 10) >= last_rv);
    assert_string_equal(json_string_value(json_object_get(list, "kind")), "PodList");
    assert_int_equal(pages.calls, 3);
    assert_int_equal(count_requests("GET", "/api/v1/namespaces/paging/pods", "limit=2"), 3);
    assert_int_equal(count_requests("GET", "/api/v1/namespaces/paging/pods", "continue="), 2);
    json_decref(list);

    /* All namespaces, label selector, one page. */
    o = (struct egpu_kube_list_opts){.label_selector = "app=trainer"};
    assert_int_equal(egpu_kube_list(srv.kc, &egpu_kube_pods, NULL, &o, &list, NULL, &err), 0);
    assert_int_equal(json_array_size(json_object_get(list, "items")), 6);
    json_decref(list);
    o.label_selector = "app=none";
    assert_int_equal(egpu_kube_list(srv.kc, &egpu_kube_pods, NULL, &o, &list, NULL, &err), 0);
    assert_int_equal(json_array_size(json_object_get(list, "items")), 0);
    json_decref(list);
    assert_int_equal(egpu_alloc_live(), live);
}

static void test_list_expired_continue_restarts(void **state)
{
    static const char *const before[] = {"pod-a", "pod-b", "pod-c", "pod-d", "pod-e", NULL};
    static const char *const after[] = {"pod-a", "pod-b",    "pod-c", "pod-d",
                                        "pod-e", "pod-late", NULL};
    struct pages pages = {.compact_after_first = true};
    struct egpu_kube_list_opts o = {.limit = 2, .on_page = on_page, .ud = &pages};
    struct egpu_error err = {0};
    json_t *list = NULL;

    (void)state;
    for (int i = 0; before[i]; i++)
        tks_create_pod(&srv, "paging", before[i]);
    json_decref(tks_control(&srv, "DELETE", "requests", NULL));
    assert_int_equal(egpu_kube_list(srv.kc, &egpu_kube_pods, "paging", &o, &list, NULL, &err), 0);
    /* Page 0, then the continue got 410, then a fresh list of 3 pages that
     * sees the pod created in between: one consistent snapshot. */
    check_names(list, after);
    assert_int_equal(pages.calls, 4);
    assert_int_equal(pages.indexes[0], 0);
    assert_int_equal(pages.indexes[1], 0);
    assert_int_equal(pages.indexes[2], 1);
    assert_int_equal(pages.indexes[3], 2);
    assert_int_equal(count_requests("GET", "/api/v1/namespaces/paging/pods", "continue="), 3);
    json_decref(list);
}

/* ------------------------------------------------------------------------ */
/* Watch                                                                    */

struct seen {
    char log[1024];
    int n, bookmarks;
    bool stop_at_bookmark; /* stop at the first bookmark after a DELETED */
    bool deleted;
};

static int on_event(void *ud, enum egpu_kube_event_type type, json_t *obj)
{
    static const char *const names[] = {"ADDED", "MODIFIED", "DELETED", "BOOKMARK"};
    struct seen *s = ud;
    size_t used = strlen(s->log);

    if (type == EGPU_KUBE_BOOKMARK) {
        s->bookmarks++;
        return s->stop_at_bookmark && s->deleted ? 1 : 0;
    }
    snprintf(s->log + used, sizeof(s->log) - used, "%s %s;", names[type], meta(obj, "name"));
    s->n++;
    s->deleted |= type == EGPU_KUBE_DELETED;
    return 0;
}

static void test_watch_from_rv_with_bookmarks(void **state)
{
    struct egpu_kube_watch_opts wo = {.timeout_s = 5};
    struct seen seen = {.stop_at_bookmark = true};
    struct egpu_kube_status st;
    struct egpu_error err = {0};
    long rv0, rv_del;
    long live = egpu_alloc_live();

    (void)state;
    rv0 = tks_create_pod(&srv, "w", "before");
    tks_create_pod(&srv, "w", "a");
    tks_label_pod(&srv, "w", "a", "step", "1");
    tks_create_pod(&srv, "other", "elsewhere");
    tks_delete_pod(&srv, "w", "a"); /* two writes: deletionTimestamp, then the removal */
    rv_del = rv0 + 5;
    /* From rv0: only the later changes in namespace w, then a bookmark. */
    snprintf(wo.resource_version, sizeof(wo.resource_version), "%ld", rv0);
    assert_int_equal(egpu_kube_watch(srv.kc, &egpu_kube_pods, "w", &wo, on_event, &seen, &st, &err),
                     0);
    assert_string_equal(seen.log, "ADDED a;MODIFIED a;MODIFIED a;DELETED a;");
    assert_true(seen.bookmarks >= 1);
    /* The RV to resume from is the bookmark's, not older than the delete. */
    assert_true(strtol(wo.resource_version, NULL, 10) >= rv_del);
    assert_int_equal(count_requests("GET", "/api/v1/namespaces/w/pods", "allowWatchBookmarks=true"),
                     1);

    /* From "": synthetic ADDED for what exists, then stop at a bookmark. */
    memset(&seen, 0, sizeof(seen));
    seen.stop_at_bookmark = true;
    seen.deleted = true;
    wo.resource_version[0] = '\0';
    assert_int_equal(egpu_kube_watch(srv.kc, &egpu_kube_pods, "w", &wo, on_event, &seen, &st, &err),
                     0);
    assert_string_equal(seen.log, "ADDED before;");

    /* Resuming from the returned RV sees nothing old; the server ends the
     * stream at timeoutSeconds and the call returns 0. */
    memset(&seen, 0, sizeof(seen));
    wo.timeout_s = 1;
    assert_int_equal(egpu_kube_watch(srv.kc, &egpu_kube_pods, "w", &wo, on_event, &seen, &st, &err),
                     0);
    assert_int_equal(seen.n, 0);
    assert_true(seen.bookmarks >= 1);
    assert_int_equal(egpu_alloc_live(), live);
}

static void test_watch_expired(void **state)
{
    struct egpu_kube_watch_opts wo = {.timeout_s = 5};
    struct seen seen = {0};
    struct egpu_kube_status st;
    struct egpu_error err = {0};
    long rv0;

    (void)state;
    rv0 = tks_create_pod(&srv, "w", "a");
    tks_create_pod(&srv, "w", "b");
    tks_post(&srv, "compact", NULL);
    snprintf(wo.resource_version, sizeof(wo.resource_version), "%ld", rv0);
    assert_int_equal(egpu_kube_watch(srv.kc, &egpu_kube_pods, "w", &wo, on_event, &seen, &st, &err),
                     EGPU_KUBE_EEXPIRED);
    assert_int_equal(st.code, 410);
    assert_string_equal(st.reason, "Expired");
    assert_non_null(strstr(st.message, "too old resource version"));
    assert_non_null(strstr(err.msg, "410 Expired"));
    assert_int_equal(seen.n, 0);
    /* The RV is left where it was: the caller lists again. */
    assert_int_equal(strtol(wo.resource_version, NULL, 10), rv0);
}

struct stopper {
    atomic_bool *flag;
    long after_ms;
};

static void *raise_later(void *arg)
{
    struct stopper *s = arg;

    tks_sleep_ms(s->after_ms);
    atomic_store(s->flag, true);
    return NULL;
}

static void test_watch_stop_flag(void **state)
{
    atomic_bool stop;
    struct egpu_kube_watch_opts wo = {.timeout_s = 30, .stop = &stop};
    struct stopper sp = {&stop, 300};
    struct seen seen = {0};
    struct egpu_error err = {0};
    pthread_t t;
    long t0;

    (void)state;
    atomic_init(&stop, false);
    assert_int_equal(pthread_create(&t, NULL, raise_later, &sp), 0);
    t0 = tks_now_ms();
    assert_int_equal(
        egpu_kube_watch(srv.kc, &egpu_kube_pods, NULL, &wo, on_event, &seen, NULL, &err),
        -ECANCELED);
    assert_true(tks_now_ms() - t0 < 1500);
    pthread_join(t, NULL);
}

/* ------------------------------------------------------------------------ */
/* Failures                                                                 */

static void test_error_replies(void **state)
{
    struct egpu_kube_status st;
    struct egpu_error err = {0};
    struct egpu_kube_config *cfg = NULL;
    struct egpu_kube *dead = NULL;
    json_t *out = NULL;
    long t0;

    (void)state;
    /* 503 for everything while "down". */
    tks_post(&srv, "down", "{\"down\":true}");
    assert_int_equal(egpu_kube_get(srv.kc, &egpu_kube_nodes, NULL, "n", &out, &st, &err), -EAGAIN);
    assert_int_equal(st.code, 503);
    tks_post(&srv, "down", "{\"down\":false}");

    /* An injected 500 is -EIO with the Status; the next request works. */
    tks_post(&srv, "fault", "{\"method\":\"GET\",\"path\":\"^/api/v1/nodes$\",\"code\":500}");
    assert_int_equal(egpu_kube_list(srv.kc, &egpu_kube_nodes, NULL, NULL, &out, &st, &err), -EIO);
    assert_int_equal(st.code, 500);
    assert_int_equal(egpu_kube_list(srv.kc, &egpu_kube_nodes, NULL, NULL, &out, &st, &err), 0);
    json_decref(out);

    /* 429 is retried after Retry-After (1 s): one call, two requests. */
    json_decref(tks_control(&srv, "DELETE", "requests", NULL));
    tks_post(&srv, "fault", "{\"method\":\"GET\",\"path\":\"^/api/v1/nodes$\",\"code\":429}");
    t0 = tks_now_ms();
    assert_int_equal(egpu_kube_list(srv.kc, &egpu_kube_nodes, NULL, NULL, &out, &st, &err), 0);
    assert_true(tks_now_ms() - t0 >= 900);
    assert_int_equal(count_requests("GET", "/api/v1/nodes", NULL), 2);
    json_decref(out);

    /* A request slower than the client's timeout: -ETIMEDOUT. */
    assert_int_equal(egpu_kube_config_new(srv.url, TKS_TOKEN, &cfg, &err), 0);
    cfg->timeout_ms = 300;
    assert_int_equal(egpu_kube_new(cfg, &dead, &err), 0);
    tks_post(&srv, "fault",
             "{\"method\":\"GET\",\"path\":\"^/api/v1/nodes$\",\"code\":0,\"delay_ms\":1500}");
    assert_int_equal(egpu_kube_list(dead, &egpu_kube_nodes, NULL, NULL, &out, &st, &err),
                     -ETIMEDOUT);
    egpu_kube_free(dead);
    egpu_kube_config_free(cfg);

    /* Wrong token: 401. Nothing listening: -ECONNREFUSED. */
    assert_int_equal(egpu_kube_config_new(srv.url, "wrong", &cfg, &err), 0);
    assert_int_equal(egpu_kube_new(cfg, &dead, &err), 0);
    assert_int_equal(egpu_kube_get(dead, &egpu_kube_nodes, NULL, "n", &out, &st, &err), -EACCES);
    assert_string_equal(st.reason, "Unauthorized");
    egpu_kube_free(dead);
    egpu_kube_config_free(cfg);
    assert_int_equal(egpu_kube_config_new("http://127.0.0.1:1", NULL, &cfg, &err), 0);
    assert_int_equal(egpu_kube_new(cfg, &dead, &err), 0);
    assert_int_equal(egpu_kube_get(dead, &egpu_kube_nodes, NULL, "n", &out, &st, &err),
                     -ECONNREFUSED);
    egpu_kube_free(dead);
    egpu_kube_config_free(cfg);

    /* A reply too large for its cap. */
    tks_create_pod(&srv, "ml-team", "big");
    assert_int_equal(egpu_kube_request(srv.kc, "GET", "/api/v1/namespaces/ml-team/pods/big", NULL,
                                       NULL, 0, 64, &out, &st, &err),
                     -EMSGSIZE);
}

static void write_token(const char *path, const char *token)
{
    char tmp[512];
    FILE *f;

    /* Like the kubelet: write aside, then rename over. */
    snprintf(tmp, sizeof(tmp), "%s.new", path);
    f = fopen(tmp, "w");
    assert_non_null(f);
    fprintf(f, "%s\n", token);
    fclose(f);
    assert_int_equal(rename(tmp, path), 0);
}

static void test_token_file_rotation(void **state)
{
    char dir[] = "/tmp/egpu-tok-XXXXXX", path[512];
    struct egpu_kube_config *cfg = NULL;
    struct egpu_kube *kc = NULL;
    struct egpu_kube_status st;
    struct egpu_error err = {0};
    json_t *out = NULL, *log;

    (void)state;
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/token", dir);
    write_token(path, "rotated-1");
    tks_post(&srv, "token", "{\"tokens\":[\"" TKS_TOKEN "\",\"rotated-1\"]}");
    assert_int_equal(egpu_kube_config_new(srv.url, NULL, &cfg, &err), 0);
    cfg->token_file = egpu_strdup(path);
    assert_int_equal(egpu_kube_new(cfg, &kc, &err), 0);
    assert_int_equal(egpu_kube_list(kc, &egpu_kube_nodes, NULL, NULL, &out, &st, &err), 0);
    json_decref(out);

    /* The server moves on to a new token; the old one is refused... */
    tks_post(&srv, "token", "{\"tokens\":[\"" TKS_TOKEN "\",\"rotated-2\"]}");
    assert_int_equal(egpu_kube_list(kc, &egpu_kube_nodes, NULL, NULL, &out, &st, &err), -EACCES);
    /* ...until the kubelet rewrites the file, which the client notices. */
    write_token(path, "rotated-2");
    assert_int_equal(egpu_kube_list(kc, &egpu_kube_nodes, NULL, NULL, &out, &st, &err), 0);
    json_decref(out);
    log = tks_control(&srv, "GET", "requests", NULL);
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(log, json_array_size(log) - 1), "authorization")),
                        "Bearer rotated-2");
    assert_non_null(strstr(json_string_value(json_object_get(
                               json_array_get(log, json_array_size(log) - 1), "user_agent")),
                           "elastic-gpu/"));
    json_decref(log);
    tks_post(&srv, "token", "{\"tokens\":[\"" TKS_TOKEN "\"]}");
    egpu_kube_free(kc);
    egpu_kube_config_free(cfg);
    unlink(path);
    rmdir(dir);
}

static void test_keep_alive(void **state)
{
    struct egpu_kube_config *cfg = NULL;
    struct egpu_kube *kc = NULL;
    struct egpu_kube_stats stats;
    struct egpu_error err = {0};
    json_t *out = NULL;

    (void)state;
    assert_int_equal(egpu_kube_config_new(srv.url, TKS_TOKEN, &cfg, &err), 0);
    assert_int_equal(egpu_kube_new(cfg, &kc, &err), 0);
    tks_create_pod(&srv, "ml-team", "p");
    for (int i = 0; i < 40; i++) {
        assert_int_equal(egpu_kube_get(kc, &egpu_kube_pods, "ml-team", "p", &out, NULL, &err), 0);
        json_decref(out);
        out = NULL;
    }
    /* Errors do not cost the connection either. */
    for (int i = 0; i < 5; i++)
        assert_int_equal(egpu_kube_get(kc, &egpu_kube_pods, "ml-team", "nope", &out, NULL, &err),
                         -ENOENT);
    egpu_kube_stats(kc, &stats);
    assert_int_equal(stats.requests, 45);
    assert_int_equal(stats.connections, 1);
    egpu_kube_free(kc);
    egpu_kube_config_free(cfg);
}

/* ------------------------------------------------------------------------ */
/* TLS and kubeconfig forms, end to end                                     */

#define TLS_DIR EGPU_FIXTURES "/kube/tls/"

static void b64_file(const char *path, char *out, size_t cap)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    unsigned char in[4096];
    FILE *f = fopen(path, "rb");
    size_t n, o = 0;

    assert_non_null(f);
    n = fread(in, 1, sizeof(in), f);
    fclose(f);
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)in[i] << 16 | (i + 1 < n ? (unsigned)in[i + 1] << 8 : 0) |
                     (i + 2 < n ? in[i + 2] : 0);

        assert_true(o + 5 < cap);
        out[o++] = tab[v >> 18 & 63];
        out[o++] = tab[v >> 12 & 63];
        out[o++] = i + 1 < n ? tab[v >> 6 & 63] : '=';
        out[o++] = i + 2 < n ? tab[v & 63] : '=';
    }
    out[o] = '\0';
}

/* Load context ctx of the kubeconfig at path and list nodes with it. */
static int list_with(const char *path, const char *ctx, struct egpu_error *err)
{
    struct egpu_kube_config *cfg = NULL;
    struct egpu_kube *kc = NULL;
    json_t *out = NULL;
    int rc;

    if (egpu_kube_config_from_kubeconfig(path, ctx, &cfg, err) != 0)
        fail_msg("kubeconfig context %s: %s", ctx, err->msg);
    assert_int_equal(egpu_kube_new(cfg, &kc, err), 0);
    rc = egpu_kube_list(kc, &egpu_kube_nodes, NULL, NULL, &out, NULL, err);
    json_decref(out);
    egpu_kube_free(kc);
    egpu_kube_config_free(cfg);
    return rc;
}

static void test_tls_kubeconfig_forms(void **state)
{
    static char ca[4096], crt[4096], key[4096];
    char path[] = "/tmp/egpu-kubeconfig-XXXXXX";
    struct egpu_error err = {0};
    struct tks tls;
    FILE *f;
    int fd;

    (void)state;
    assert_int_equal(
        tks_start(&tls, (const char *const[]){"--tls-cert", TLS_DIR "server.crt", "--tls-key",
                                              TLS_DIR "server.key", NULL}),
        0);
    assert_int_equal(strncmp(tls.url, "https://", 8), 0);
    b64_file(TLS_DIR "ca.crt", ca, sizeof(ca));
    b64_file(TLS_DIR "client.crt", crt, sizeof(crt));
    b64_file(TLS_DIR "client.key", key, sizeof(key));
    fd = mkstemp(path);
    assert_true(fd >= 0);
    f = fdopen(fd, "w");
    assert_non_null(f);
    fprintf(f,
            "apiVersion: v1\nkind: Config\ncurrent-context: ca-file\nclusters:\n"
            "- name: ca-file\n  cluster: {server: '%s', certificate-authority: '%sca.crt'}\n"
            "- name: ca-data\n  cluster: {server: '%s', certificate-authority-data: %s}\n"
            "- name: insecure\n  cluster: {server: '%s', insecure-skip-tls-verify: true}\n"
            "- name: no-ca\n  cluster: {server: '%s'}\n"
            "users:\n- name: tok\n  user: {token: %s}\n"
            "- name: cert-data\n  user: {token: %s, client-certificate-data: %s, "
            "client-key-data: %s}\n"
            "- name: cert-files\n  user: {token: %s, client-certificate: '%sclient.crt', "
            "client-key: '%sclient.key'}\n"
            "contexts:\n"
            "- {name: ca-file, context: {cluster: ca-file, user: tok}}\n"
            "- {name: ca-data, context: {cluster: ca-data, user: cert-data}}\n"
            "- {name: files, context: {cluster: ca-file, user: cert-files}}\n"
            "- {name: insecure, context: {cluster: insecure, user: tok}}\n"
            "- {name: no-ca, context: {cluster: no-ca, user: tok}}\n",
            tls.url, TLS_DIR, tls.url, ca, tls.url, tls.url, TKS_TOKEN, TKS_TOKEN, crt, key,
            TKS_TOKEN, TLS_DIR, TLS_DIR);
    fclose(f);
    /* CA file, CA data with a client certificate and key as data, the same
     * as files, and insecure-skip-tls-verify: all reach the server. */
    assert_int_equal(list_with(path, NULL, &err), 0);
    assert_int_equal(list_with(path, "ca-data", &err), 0);
    assert_int_equal(list_with(path, "files", &err), 0);
    assert_int_equal(list_with(path, "insecure", &err), 0);
    /* Without the CA the server's certificate is not trusted. */
    assert_int_equal(list_with(path, "no-ca", &err), -EIO);
    assert_non_null(strstr(err.msg, "https://127.0.0.1:"));
    unlink(path);
    tks_stop(&tls);
}

/* ------------------------------------------------------------------------ */
/* Concurrency                                                              */

struct worker {
    int id, failures;
};

static void *work(void *arg)
{
    struct worker *w = arg;
    struct egpu_error err = {0};
    char name[32];

    for (int i = 0; i < 15; i++) {
        json_t *pod, *out = NULL;

        snprintf(name, sizeof(name), "w%d-%d", w->id, i);
        pod = tks_pod("conc", name, "trainer");
        if (egpu_kube_create(srv.kc, &egpu_kube_pods, "conc", pod, NULL, NULL, &err) != 0 ||
            egpu_kube_get(srv.kc, &egpu_kube_pods, "conc", name, &out, NULL, &err) != 0)
            w->failures++;
        json_decref(out);
        json_decref(pod);
    }
    return NULL;
}

static void test_concurrent_requests(void **state)
{
    struct worker w[6];
    pthread_t t[6];
    struct egpu_error err = {0};
    json_t *list = NULL;

    (void)state;
    for (int i = 0; i < 6; i++) {
        w[i] = (struct worker){i, 0};
        assert_int_equal(pthread_create(&t[i], NULL, work, &w[i]), 0);
    }
    for (int i = 0; i < 6; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(w[i].failures, 0);
    }
    assert_int_equal(egpu_kube_list(srv.kc, &egpu_kube_pods, "conc", NULL, &list, NULL, &err), 0);
    assert_int_equal(json_array_size(json_object_get(list, "items")), 90);
    json_decref(list);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_get_create_update_conflict, tks_reset_test),
        cmocka_unit_test_setup(test_patches_and_delete, tks_reset_test),
        cmocka_unit_test_setup(test_binding, tks_reset_test),
        cmocka_unit_test_setup(test_list_paging, tks_reset_test),
        cmocka_unit_test_setup(test_list_expired_continue_restarts, tks_reset_test),
        cmocka_unit_test_setup(test_watch_from_rv_with_bookmarks, tks_reset_test),
        cmocka_unit_test_setup(test_watch_expired, tks_reset_test),
        cmocka_unit_test_setup(test_watch_stop_flag, tks_reset_test),
        cmocka_unit_test_setup(test_error_replies, tks_reset_test),
        cmocka_unit_test_setup(test_token_file_rotation, tks_reset_test),
        cmocka_unit_test_setup(test_keep_alive, tks_reset_test),
        cmocka_unit_test(test_tls_kubeconfig_forms),
        cmocka_unit_test_setup(test_concurrent_requests, tks_reset_test),
    };

    return cmocka_run_group_tests(tests, group_setup, tks_group_teardown);
}
