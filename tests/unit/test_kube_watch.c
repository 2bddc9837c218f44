/* tests/unit/test_kube_watch.c - the pure parts of the API client: watch
 * stream decoding across arbitrary chunk boundaries, Status parsing, and
 * request paths (src/kube/watch.c, status.c, resource.c).
 *
 * Fixtures are read from shared/k8s-wire beside the checkout (skipped when absent):
 * watch_pods_stream.jsonl, watch_error_410.jsonl, watch_initial_events_end_bookmark.jsonl and the
 * status_*.json replies.
 */
#include <errno.h>
#include <stdlib.h>

#include "testutil.h"
#include "egpu/kube.h"
#include "kube_int.h"

#define WIRE EGPU_SOURCE_DIR "/../shared/k8s-wire/" /* read in place, never copied */

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *data;
    long n;

    if (f == NULL)
        tu_skip("shared/k8s-wire is not beside this checkout");
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    data = malloc((size_t)n + 1);
    assert_non_null(data);
    assert_int_equal(fread(data, 1, (size_t)n, f), (size_t)n);
    data[n] = '\0';
    fclose(f);
    *len = (size_t)n;
    return data;
}

/* ------------------------------------------------------------------------ */
/* Lines                                                                    */

struct lines_seen {
    char text[4096];
    int n;
};

static int collect_line(void *ud, const char *line, size_t len)
{
    struct lines_seen *s = ud;
    size_t used = strlen(s->text);

    snprintf(s->text + used, sizeof(s->text) - used, "[%.*s]", (int)len, line);
    s->n++;
    return 0;
}

static void test_lines_any_chunking(void **state)
{
    static const char body[] = "alpha\nbeta\r\n\n  \ngamma delta\nlast";
    long live = egpu_alloc_live();

    (void)state;
    /* Every split point, and every chunk size, gives the same lines. */
    for (size_t chunk = 1; chunk <= sizeof(body); chunk++) {
        struct egpu__kube_lines l;
        struct lines_seen seen = {"", 0};

        egpu__kube_lines_init(&l, 64, collect_line, &seen);
        for (size_t off = 0; off < sizeof(body) - 1; off += chunk) {
            size_t n = sizeof(body) - 1 - off < chunk ? sizeof(body) - 1 - off : chunk;

            assert_int_equal(egpu__kube_lines_feed(&l, body + off, n), 0);
        }
        assert_int_equal(egpu__kube_lines_finish(&l), 0);
        egpu__kube_lines_free(&l);
        assert_string_equal(seen.text, "[alpha][beta][gamma delta][last]");
    }
    assert_int_equal(egpu_alloc_live(), live);
}

static void test_lines_bound(void **state)
{
    char big[100];

    (void)state;
    memset(big, 'x', sizeof(big));
    big[99] = '\n';
    /* A line longer than the bound is passed over up to its '\n', whether it
     * arrives whole, in parts, or with the start of the next line; the lines
     * around it still arrive, and it is counted once. */
    for (size_t chunk = 1; chunk <= sizeof(big) + 6; chunk++) {
        static const char after[] = "next\n";
        char body[sizeof(big) + 16];
        struct egpu__kube_lines l;
        struct lines_seen seen = {"", 0};
        size_t len = 0;

        memcpy(body, "a\n", 2);
        len = 2;
        memcpy(body + len, big, sizeof(big));
        len += sizeof(big);
        memcpy(body + len, after, sizeof(after) - 1);
        len += sizeof(after) - 1;
        egpu__kube_lines_init(&l, 64, collect_line, &seen);
        for (size_t off = 0; off < len; off += chunk)
            assert_int_equal(
                egpu__kube_lines_feed(&l, body + off, len - off < chunk ? len - off : chunk), 0);
        assert_int_equal(egpu__kube_lines_finish(&l), 0);
        assert_int_equal(l.dropped, 1);
        egpu__kube_lines_free(&l);
        assert_string_equal(seen.text, "[a][next]");
    }
    /* A last line too long, without its '\n', is dropped at the end too. */
    {
        struct egpu__kube_lines l;
        struct lines_seen seen = {"", 0};

        egpu__kube_lines_init(&l, 64, collect_line, &seen);
        assert_int_equal(egpu__kube_lines_feed(&l, big, 99), 0);
        assert_int_equal(egpu__kube_lines_finish(&l), 0);
        assert_int_equal(l.dropped, 1);
        assert_int_equal(seen.n, 0);
        egpu__kube_lines_free(&l);
    }
}

/* ------------------------------------------------------------------------ */
/* Events                                                                   */

struct events_seen {
    char types[64];
    char names[256];
    int stop_after; /* 0 = never */
    int n;
};

static int collect_event(void *ud, enum egpu_kube_event_type type, json_t *obj)
{
    static const char letters[] = "AMDB";
    struct events_seen *s = ud;
    const char *name = egpu__kube_meta_str(obj, "name");
    size_t used = strlen(s->types);

    s->types[used] = letters[type];
    s->types[used + 1] = '\0';
    used = strlen(s->names);
    snprintf(s->names + used, sizeof(s->names) - used, "%s,", name ? name : "-");
    s->n++;
    return s->stop_after && s->n >= s->stop_after ? 1 : 0;
}

static void test_stream_fixture_every_chunk_size(void **state)
{
    size_t len;
    char *body = slurp(WIRE "watch_pods_stream.jsonl", &len);
    long live = egpu_alloc_live();
    size_t sizes[] = {1, 2, 3, 7, 64, 1000, 4096, len};

    (void)state;
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        struct egpu__kube_stream s;
        struct events_seen seen = {"", "", 0, 0};
        char rv[EGPU_KUBE_RV_MAX] = "10245";

        egpu__kube_stream_init(&s, collect_event, &seen, rv);
        for (size_t off = 0; off < len; off += sizes[k]) {
            size_t n = len - off < sizes[k] ? len - off : sizes[k];

            assert_int_equal(egpu__kube_stream_feed(&s, body + off, n), 0);
        }
        assert_int_equal(egpu__kube_stream_finish(&s), 0);
        egpu__kube_stream_free(&s);
        assert_string_equal(seen.types, "AMBD");
        assert_string_equal(seen.names, "train-job-0,train-job-0,-,train-job-0,");
        /* The last event's RV; the bookmark (12746) moved it on the way. */
        assert_string_equal(rv, "12801");
        assert_int_equal(s.events, 4);
    }
    free(body);
    assert_int_equal(egpu_alloc_live(), live);
}

static void test_stream_bookmark_rv_and_stop(void **state)
{
    size_t len;
    char *body = slurp(WIRE "watch_pods_stream.jsonl", &len);
    struct egpu__kube_stream s;
    struct events_seen seen = {"", "", 3, 0};
    char rv[EGPU_KUBE_RV_MAX] = "";

    (void)state;
    /* The callback stops at the bookmark: the RV is the bookmark's. */
    egpu__kube_stream_init(&s, collect_event, &seen, rv);
    assert_int_equal(egpu__kube_stream_feed(&s, body, len), 1);
    egpu__kube_stream_free(&s);
    assert_string_equal(seen.types, "AMB");
    assert_string_equal(rv, "12746");
    free(body);

    body = slurp(WIRE "watch_initial_events_end_bookmark.jsonl", &len);
    memset(&seen, 0, sizeof(seen));
    egpu__kube_stream_init(&s, collect_event, &seen, rv);
    assert_int_equal(egpu__kube_stream_feed(&s, body, len), 0);
    egpu__kube_stream_free(&s);
    assert_string_equal(seen.types, "B");
    assert_string_equal(rv, "12746");
    free(body);
}

static void test_stream_error_410(void **state)
{
    size_t len;
    char *body = slurp(WIRE "watch_error_410.jsonl", &len);
    struct egpu__kube_stream s;
    struct events_seen seen = {"", "", 0, 0};
    char rv[EGPU_KUBE_RV_MAX] = "10245";

    (void)state;
    egpu__kube_stream_init(&s, collect_event, &seen, rv);
    /* Fed in two halves: the error surfaces once the line is complete. */
    assert_int_equal(egpu__kube_stream_feed(&s, body, len / 2), 0);
    assert_int_equal(egpu__kube_stream_feed(&s, body + len / 2, len - len / 2), EGPU_KUBE_EEXPIRED);
    assert_int_equal(s.status.code, 410);
    assert_string_equal(s.status.reason, "Expired");
    assert_string_equal(s.status.message, "too old resource version: 10245 (11398)");
    assert_string_equal(rv, "10245");
    assert_int_equal(seen.n, 0);
    egpu__kube_stream_free(&s);
    free(body);
}

/* With a keep-spec the events are the same, each object only what
 * egpu_kube_keep keeps, and an ERROR event's Status is still read whole. */
static int collect_slim(void *ud, enum egpu_kube_event_type type, json_t *obj)
{
    if (type != EGPU_KUBE_BOOKMARK) {
        assert_null(json_object_get(obj, "spec"));
        assert_null(json_object_get(json_object_get(obj, "metadata"), "managedFields"));
        assert_non_null(json_object_get(json_object_get(obj, "status"), "phase"));
    }
    return collect_event(ud, type, obj);
}

static void test_stream_keep(void **state)
{
    static const char *const keep[] = {"status.phase", NULL};
    size_t len;
    char *body = slurp(WIRE "watch_pods_stream.jsonl", &len);
    struct egpu__kube_stream s;
    struct events_seen seen = {"", "", 0, 0};
    char rv[EGPU_KUBE_RV_MAX] = "10245";

    (void)state;
    egpu__kube_stream_init(&s, collect_slim, &seen, rv);
    s.keep = keep;
    assert_int_equal(egpu__kube_stream_feed(&s, body, len), 0);
    assert_int_equal(egpu__kube_stream_finish(&s), 0);
    egpu__kube_stream_free(&s);
    assert_string_equal(seen.types, "AMBD");
    assert_string_equal(seen.names, "train-job-0,train-job-0,-,train-job-0,");
    assert_string_equal(rv, "12801");
    free(body);

    body = slurp(WIRE "watch_error_410.jsonl", &len);
    egpu__kube_stream_init(&s, collect_slim, &seen, rv);
    s.keep = keep;
    assert_int_equal(egpu__kube_stream_feed(&s, body, len), EGPU_KUBE_EEXPIRED);
    assert_int_equal(s.status.code, 410);
    assert_string_equal(s.status.message, "too old resource version: 10245 (11398)");
    egpu__kube_stream_free(&s);
    free(body);

    /* A line the strict decoder refuses is skipped, as one jansson refuses. */
    egpu__kube_stream_init(&s, collect_slim, &seen, rv);
    s.keep = keep;
    assert_int_equal(
        egpu__kube_stream_feed(&s, "{\"type\":\"ADDED\",\"object\":{\"a\":1e999}}\n", 38), 0);
    assert_int_equal(s.skipped, 1);
    egpu__kube_stream_free(&s);
}

/* A streaming list's end: the initial-events-end bookmark is recognised
 * (the fixture), and reaches the callback with its annotation whatever the
 * keep-spec, which names no annotation; other objects are not an end. */
static int collect_end(void *ud, enum egpu_kube_event_type type, json_t *obj)
{
    int *ends = ud;

    if (type == EGPU_KUBE_BOOKMARK && egpu_kube_initial_events_end(obj))
        (*ends)++;
    return 0;
}

static void test_stream_initial_events_end(void **state)
{
    static const char *const keep[] = {"status.phase", NULL};
    const char *const *keeps[] = {NULL, keep};
    size_t len, plen;
    char *body = slurp(WIRE "watch_initial_events_end_bookmark.jsonl", &len);
    char *plain = slurp(WIRE "watch_pods_stream.jsonl", &plen);
    json_t *o;

    (void)state;
    for (int k = 0; k < 2; k++) {
        struct egpu__kube_stream s;
        char rv[EGPU_KUBE_RV_MAX] = "";
        int ends = 0;

        egpu__kube_stream_init(&s, collect_end, &ends, rv);
        s.keep = keeps[k];
        assert_int_equal(egpu__kube_stream_feed(&s, body, len), 0);
        assert_int_equal(egpu__kube_stream_feed(&s, plain, plen), 0);
        assert_int_equal(egpu__kube_stream_finish(&s), 0);
        egpu__kube_stream_free(&s);
        assert_int_equal(ends, 1); /* the plain stream's bookmark is not one */
        assert_string_equal(rv, "12801");
    }
    assert_false(egpu_kube_initial_events_end(NULL));
    o = json_pack("{s:{s:{s:s}}}", "metadata", "annotations", "k8s.io/initial-events-end", "false");
    assert_false(egpu_kube_initial_events_end(o));
    json_decref(o);
    o = json_pack("{s:{s:{s:b}}}", "metadata", "annotations", "k8s.io/initial-events-end", 1);
    assert_false(egpu_kube_initial_events_end(o)); /* a bool, not the string */
    json_decref(o);
    free(body);
    free(plain);
}

static void test_stream_malformed(void **state)
{
    static const char *const bad[] = {
        "{\"type\":\"ADDED\",\"object\":{\"metadata\":{}}\n", /* truncated JSON */
        "[1,2,3]\n",                                          /* not an object */
        "{\"type\":\"ADDED\"}\n",                             /* no object */
        "{\"type\":\"RENAMED\",\"object\":{}}\n",             /* unknown type */
        "{\"type\":7,\"object\":{}}\n",                       /* type not a string */
        "{\"type\":\"ADD\\u0000ED\",\"object\":{}}\n",        /* type with a NUL */
        "\xff\xfe\n",                                         /* not UTF-8 */
    };
    static const char good[] = "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"b\","
                               "\"resourceVersion\":\"9\"}}}\n";

    (void)state;
    /* A line that is no event is counted and passed over: the resourceVersion
     * stays, and the next event still arrives and moves it. */
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct egpu__kube_stream s;
        struct events_seen seen = {"", "", 0, 0};
        char rv[EGPU_KUBE_RV_MAX] = "5";

        egpu__kube_stream_init(&s, collect_event, &seen, rv);
        assert_int_equal(egpu__kube_stream_feed(&s, bad[i], strlen(bad[i])), 0);
        assert_int_equal(s.skipped, 1);
        assert_int_equal(seen.n, 0);
        assert_string_equal(rv, "5");
        assert_int_equal(egpu__kube_stream_feed(&s, good, strlen(good)), 0);
        assert_int_equal(egpu__kube_stream_finish(&s), 0);
        egpu__kube_stream_free(&s);
        assert_int_equal(seen.n, 1);
        assert_string_equal(seen.names, "b,");
        assert_string_equal(rv, "9");
    }
    /* An ERROR event without a Status still ends the stream, as a 500. */
    {
        static const char err_ev[] = "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Pod\"}}\n";
        struct egpu__kube_stream s;
        struct events_seen seen = {"", "", 0, 0};
        char rv[EGPU_KUBE_RV_MAX] = "5";

        egpu__kube_stream_init(&s, collect_event, &seen, rv);
        assert_int_equal(egpu__kube_stream_feed(&s, err_ev, strlen(err_ev)), -EIO); /* code 500 */
        egpu__kube_stream_free(&s);
        assert_string_equal(rv, "5");
    }
}

/* A "\u0000" in a string is valid JSON (a tenant can put one in any
 * annotation value): the event decodes and arrives whole, with the string's
 * full length; egpu_kube_str refuses it as a C string. */
static void test_stream_nul_in_string(void **state)
{
    static const char body[] =
        "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"a\",\"resourceVersion\":\"7\","
        "\"annotations\":{\"x\":\"be\\u0000fore\"}}}}\n";
    struct egpu__kube_stream s;
    struct events_seen seen = {"", "", 0, 0};
    char rv[EGPU_KUBE_RV_MAX] = "5";

    (void)state;
    egpu__kube_stream_init(&s, collect_event, &seen, rv);
    assert_int_equal(egpu__kube_stream_feed(&s, body, strlen(body)), 0);
    assert_int_equal(s.skipped, 0);
    egpu__kube_stream_free(&s);
    assert_int_equal(seen.n, 1);
    assert_string_equal(rv, "7");
}

static void test_kube_str(void **state)
{
    json_t *plain = json_string("abc"), *nul = json_stringn("a\0b", 3), *num = json_integer(1);

    (void)state;
    assert_string_equal(egpu_kube_str(plain), "abc");
    assert_null(egpu_kube_str(nul));
    assert_null(egpu_kube_str(num));
    assert_null(egpu_kube_str(NULL));
    json_decref(plain);
    json_decref(nul);
    json_decref(num);
}

/* ------------------------------------------------------------------------ */
/* Status                                                                   */

static void check_status(const char *file, int code, const char *reason, const char *msg_start,
                         int rc)
{
    struct egpu_kube_status st;
    size_t len;
    char *body = slurp(file, &len);

    assert_int_equal(egpu_kube_status_parse(body, len, 500, &st), 0);
    assert_int_equal(st.code, code);
    assert_string_equal(st.reason, reason);
    assert_int_equal(strncmp(st.message, msg_start, strlen(msg_start)), 0);
    assert_int_equal(egpu_kube_status_errno(&st), rc);
    free(body);
}

static void test_status_fixtures(void **state)
{
    (void)state;
    check_status(WIRE "status_409_conflict.json", 409, "Conflict",
                 "Operation cannot be fulfilled on pods \"train-job-0\": the object has been "
                 "modified",
                 EGPU_KUBE_ECONFLICT);
    check_status(WIRE "status_409_binding_conflict.json", 409, "Conflict",
                 "Operation cannot be fulfilled on pods/binding \"train-job-0\": pod train-job-0 "
                 "is already assigned to node \"gpu-node-2\"",
                 EGPU_KUBE_ECONFLICT);
    check_status(WIRE "status_410_expired_continue.json", 410, "Expired",
                 "The provided continue parameter is too old", EGPU_KUBE_EEXPIRED);
    check_status(WIRE "status_410_expired_watch.json", 410, "Expired",
                 "too old resource version: 10245 (11398)", EGPU_KUBE_EEXPIRED);
    check_status(WIRE "status_415_smp_on_crd.json", 415, "UnsupportedMediaType",
                 "the body of the request was in an unknown format", -ENOTSUP);
}

/* egpu_kube_status_parse of a C string. */
static int parse_text(const char *body, long http, struct egpu_kube_status *st)
{
    return egpu_kube_status_parse(body, body ? strlen(body) : 0, http, st);
}

static void test_status_not_a_status(void **state)
{
    struct egpu_kube_status st;
    char junk[2000];

    (void)state;
    /* A proxy's HTML page: reason from the code, message from the body. */
    assert_int_equal(parse_text("<html>\n<b>Bad gateway</b></html>", 502, &st), -EPROTO);
    assert_int_equal(st.code, 502);
    assert_string_equal(st.reason, "");
    assert_string_equal(st.message, "<html> <b>Bad gateway</b></html>");
    assert_int_equal(egpu_kube_status_errno(&st), -EIO);
    /* Empty body: client-go's generic text. */
    assert_int_equal(parse_text(NULL, 404, &st), -EPROTO);
    assert_string_equal(st.reason, "NotFound");
    assert_string_equal(st.message, "the server could not find the requested resource");
    assert_int_equal(egpu_kube_status_errno(&st), -ENOENT);
    /* JSON but not a Status; a Status with fields of the wrong types. */
    assert_int_equal(parse_text("{\"kind\":\"Pod\"}", 409, &st), -EPROTO);
    assert_string_equal(st.reason, "Conflict");
    assert_int_equal(egpu_kube_status_errno(&st), EGPU_KUBE_ECONFLICT);
    assert_int_equal(
        parse_text("{\"kind\":\"Status\",\"code\":\"x\",\"reason\":5,\"message\":[1]}", 403, &st),
        0);
    assert_int_equal(st.code, 403);
    assert_string_equal(st.reason, "");
    assert_int_equal(egpu_kube_status_errno(&st), -EPERM);
    /* A huge body is cut. */
    memset(junk, 'z', sizeof(junk));
    assert_int_equal(egpu_kube_status_parse(junk, sizeof(junk), 500, &st), -EPROTO);
    assert_true(strlen(st.message) <= 200);
    /* AlreadyExists is the other 409. */
    assert_int_equal(
        parse_text("{\"kind\":\"Status\",\"reason\":\"AlreadyExists\",\"code\":409}", 409, &st), 0);
    assert_int_equal(egpu_kube_status_errno(&st), -EEXIST);
}

/* ------------------------------------------------------------------------ */
/* Paths                                                                    */

static void check_path(const struct egpu_kube_resource *res, const char *ns, const char *name,
                       const char *sub, int rc, const char *want)
{
    struct egpu_buf b;

    egpu_buf_init(&b, 1024);
    assert_int_equal(egpu_kube_path(&b, res, ns, name, sub), rc);
    if (rc == 0)
        assert_string_equal(egpu_buf_str(&b), want);
    egpu_buf_free(&b);
}

static void test_paths(void **state)
{
    struct egpu_buf b;

    (void)state;
    check_path(&egpu_kube_pods, "ml-team", "train-job-0", "binding", 0,
               "/api/v1/namespaces/ml-team/pods/train-job-0/binding");
    check_path(&egpu_kube_pods, NULL, NULL, NULL, 0, "/api/v1/pods");
    check_path(&egpu_kube_nodes, "ignored", "gpu-node-1", "status", 0,
               "/api/v1/nodes/gpu-node-1/status");
    check_path(&egpu_kube_leases, "kube-system", "egpu-scheduler", NULL, 0,
               "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/egpu-scheduler");
    check_path(&egpu_kube_gpus, NULL, "gpu-abc", NULL, 0,
               "/apis/elasticgpu.io/v1alpha1/gpus/gpu-abc");
    check_path(&egpu_kube_elasticgpuclaims, "team-a", NULL, NULL, 0,
               "/apis/elasticgpu.io/v1alpha1/namespaces/team-a/elasticgpuclaims");
    /* A name cannot add segments or a query. */
    check_path(&egpu_kube_pods, "ns", "a/b?c=d", NULL, 0,
               "/api/v1/namespaces/ns/pods/a%2Fb%3Fc%3Dd");
    check_path(&egpu_kube_pods, NULL, "x", NULL, -EINVAL, NULL);
    check_path(&egpu_kube_pods, "ns", "", NULL, -EINVAL, NULL);
    check_path(&egpu_kube_pods, "ns", NULL, "status", -EINVAL, NULL);

    egpu_buf_init(&b, 1024);
    assert_int_equal(egpu_kube_path(&b, &egpu_kube_pods, NULL, NULL, NULL), 0);
    assert_int_equal(egpu__kube_query(&b, "labelSelector", "app=trainer,tier in (a,b)"), 0);
    assert_int_equal(egpu__kube_query(&b, "fieldSelector", "spec.nodeName=gpu-node-1"), 0);
    assert_string_equal(egpu_buf_str(&b), "/api/v1/pods?labelSelector=app%3Dtrainer%2Ctier%20in%20%"
                                          "28a%2Cb%29&fieldSelector=spec.nodeName%3Dgpu-node-1");
    egpu_buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lines_any_chunking),
        cmocka_unit_test(test_lines_bound),
        cmocka_unit_test(test_stream_fixture_every_chunk_size),
        cmocka_unit_test(test_stream_keep),
        cmocka_unit_test(test_stream_initial_events_end),
        cmocka_unit_test(test_stream_bookmark_rv_and_stop),
        cmocka_unit_test(test_stream_error_410),
        cmocka_unit_test(test_stream_malformed),
        cmocka_unit_test(test_stream_nul_in_string),
        cmocka_unit_test(test_kube_str),
        cmocka_unit_test(test_status_fixtures),
        cmocka_unit_test(test_status_not_a_status),
        cmocka_unit_test(test_paths),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
