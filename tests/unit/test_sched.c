/* tests/unit/test_sched.c - the extender's pod parsing, annotation, cache and
 * verbs, driven by hand-built objects and the kube-scheduler fixtures of
 * shared/k8s-wire (skipped when that folder is absent).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "testutil.h"
#include "sched_testutil.h"
#include "egpu/log.h"
#include "egpu/scheduler.h"
#include "egpu/kube.h"
#include "sched_int.h"

#define WIRE EGPU_SOURCE_DIR "/../shared/k8s-wire/"

/* A pod with one container per (core, memory) pair; core 0 = no GPU. */
static json_t *make_pod(const char *ns, const char *name, const char *node, int ncont,
                        const int *core, const int *mem)
{
    json_t *containers = json_array();
    json_t *pod;

    for (int i = 0; i < ncont; i++) {
        json_t *req = json_pack("{s:s,s:s}", "cpu", "1", "memory", "1Gi");
        char cname[16];

        if (core[i] > 0) {
            json_object_set_new(req, EGPU_RES_GPU_CORE, json_sprintf("%d", core[i]));
            if (mem[i] > 0)
                json_object_set_new(req, EGPU_RES_GPU_MEMORY, json_sprintf("%d", mem[i]));
        }
        snprintf(cname, sizeof(cname), "c%d", i);
        json_array_append_new(
            containers, json_pack("{s:s,s:{s:o}}", "name", cname, "resources", "requests", req));
    }
    pod = json_pack("{s:{s:s,s:s,s:s},s:{s:o,s:s},s:{s:s}}", "metadata", "name", name, "namespace",
                    ns, "uid", name, "spec", "containers", containers, "schedulerName",
                    EGPU_SCHEDULER_NAME_DEFAULT, "status", "phase", "Pending");
    if (node != NULL)
        json_object_set_new(json_object_get(pod, "spec"), "nodeName", json_string(node));
    return pod;
}

static void annotate_json(json_t *pod, const char *key, const char *value)
{
    json_t *meta = json_object_get(pod, "metadata");

    if (json_object_get(meta, "annotations") == NULL)
        json_object_set_new(meta, "annotations", json_object());
    json_object_set_new(json_object_get(meta, "annotations"), key, json_string(value));
}

static json_t *make_node(const char *name, const char *cpu, const char *mem)
{
    return json_pack("{s:{s:s},s:{s:{s:s,s:s}}}", "metadata", "name", name, "status", "allocatable",
                     "cpu", cpu, "memory", mem);
}

static json_t *make_gpu(const char *node, int index, const char *model, int mem_mib)
{
    char uuid[64], name[96];

    snprintf(uuid, sizeof(uuid), "GPU-%s-%d", node, index);
    snprintf(name, sizeof(name), "%s-gpu%d", node, index);
    return json_pack("{s:{s:s},s:{s:s,s:i,s:s,s:s,s:i},s:{s:s}}", "metadata", "name", name, "spec",
                     "nodeName", node, "index", index, "uuid", uuid, "model", model, "memory",
                     mem_mib, "status", "health", "Healthy");
}

static void add_gpu_node(struct egpu_sched_cache *c, const char *name, int ngpus)
{
    struct egpu_error err = {0};
    json_t *n = make_node(name, "64", "256Gi");

    assert_int_equal(egpu_sched_cache_node_set(c, n, &err), 0);
    json_decref(n);
    for (int i = 0; i < ngpus; i++) {
        json_t *g = make_gpu(name, i, "A100", 40960);

        if (egpu_sched_cache_gpu_set(c, g, &err) != 0)
            fail_msg("gpu: %s", err.msg);
        json_decref(g);
    }
}

static void set_pod(struct egpu_sched_cache *c, json_t *pod)
{
    struct egpu_error err = {0};

    if (egpu_sched_cache_pod_set(c, pod, &err) != 0)
        fail_msg("pod: %s", err.msg);
    json_decref(pod);
}

/* Used milli-GPU on card index g of node name. */
static uint32_t card_used(struct egpu_sched_cache *c, const char *node, int g)
{
    struct egpu_cluster *cl = egpu_sched_cache_lock(c);
    struct egpu_node *n = egpu_cluster_node(cl, node);
    uint32_t v = n ? n->gpus[g].used_core_milli : UINT32_MAX;

    egpu_sched_cache_unlock(c);
    return v;
}

/* Lines of text that are warnings (klog 'W') holding needle. */
static size_t warnings_with(const char *text, const char *needle)
{
    size_t n = 0;

    for (const char *l = text; l != NULL && *l != '\0';) {
        const char *end = strchr(l, '\n');
        size_t len = end ? (size_t)(end - l) : strlen(l);
        char line[1024];

        snprintf(line, sizeof(line), "%.*s", (int)(len < sizeof(line) ? len : sizeof(line) - 1), l);
        n += line[0] == 'W' && strstr(line, needle) != NULL;
        l = end ? end + 1 : NULL;
    }
    return n;
}

/* A restart sees the pods before the GPU objects, and a
 * node's 8 cards one by one, so each pod is counted without its cards up to
 * 8 times on the way. None of that is a warning: at the sync, one warning
 * for the pod that is still wrong and one line with the count; after it,
 * one warning per pod that becomes so, not one per rebuild. */
static void test_sync_logs_only_what_stays_unresolved(void **state)
{
    struct egpu_sched_cache *c = egpu_sched_cache_new();
    struct egpu_sched_cache_stats st;
    const int core[] = {30}, mem[] = {1024};
    struct egpu_error err = {0};
    char *text = NULL, ann[256];
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    json_t *pod, *g;

    (void)state;
    assert_non_null(f);
    egpu_log_set_stream(f);
    for (int i = 0; i < 4; i++) {
        char name[8];

        snprintf(name, sizeof(name), "p%d", i);
        /* p0..p2 on the node's last card; p3 on a card it does not have. */
        snprintf(ann, sizeof(ann),
                 "{\"node\":\"n1\",\"containers\":[{\"name\":\"c0\",\"core\":30,"
                 "\"memory\":1024,\"gpus\":[\"GPU-n1-%d\"]}]}",
                 i < 3 ? 7 : 9);
        pod = make_pod("ns", name, "n1", 1, core, mem);
        annotate_json(pod, EGPU_ANN_ASSIGNED, ann);
        set_pod(c, pod);
    }
    add_gpu_node(c, "n1", 8);
    fflush(f);
    assert_int_equal(warnings_with(text, "counting pod without its cards"), 0);
    egpu_sched_cache_stats(c, &st);
    assert_int_equal(st.unresolved, 1);
    assert_int_equal(card_used(c, "n1", 7), 900);
    /* The sync: the one pod still wrong, and how many. */
    egpu_sched_cache_synced(c);
    fflush(f);
    assert_int_equal(warnings_with(text, "counting pod without its cards pod=ns/p3 node=n1"), 1);
    assert_int_equal(warnings_with(text, "counting pod without its cards"), 1);
    assert_int_equal(warnings_with(text, "cache synced with pods counted without their cards "
                                         "pods=4 unresolved=1 named=1"),
                     1);
    egpu_sched_cache_synced(c); /* once only */
    /* A spec change rebuilds the node and counts every pod again: p3 is
     * still wrong, and not warned about again. */
    g = make_gpu("n1", 0, "A100", 81920);
    assert_int_equal(egpu_sched_cache_gpu_set(c, g, &err), 0);
    json_decref(g);
    fflush(f);
    assert_int_equal(warnings_with(text, "counting pod without its cards"), 1);
    assert_int_equal(warnings_with(text, "cache synced"), 1);
    /* Its last card deleted, p0..p2 become wrong after the sync: one
     * warning each. */
    g = make_gpu("n1", 7, "A100", 40960);
    assert_int_equal(egpu_sched_cache_gpu_delete(c, g, &err), 0);
    json_decref(g);
    fflush(f);
    assert_int_equal(warnings_with(text, "counting pod without its cards"), 4);
    egpu_sched_cache_stats(c, &st);
    assert_int_equal(st.unresolved, 4);
    egpu_log_set_stream(NULL);
    fclose(f);
    free(text);
    egpu_sched_cache_free(c);
}

static void test_assigned_round_trip(void **state)
{
    struct egpu_assigned a = {0}, b;
    struct egpu_error err = {0};
    char *text;

    (void)state;
    snprintf(a.node, sizeof(a.node), "gpu-node-1");
    a.ncontainers = 2;
    a.containers[0] = (struct egpu_assigned_container){
        .core_pct = 30, .mem_mib = 4096, .ncards = 1, .first_card = 0};
    snprintf(a.containers[0].name, sizeof(a.containers[0].name), "trainer");
    a.containers[1] = (struct egpu_assigned_container){
        .core_pct = 100, .mem_mib = 0, .ncards = 2, .first_card = 1};
    snprintf(a.containers[1].name, sizeof(a.containers[1].name), "sidecar");
    a.ncards = 3;
    snprintf(a.uuids[0], sizeof(a.uuids[0]), "GPU-a");
    snprintf(a.uuids[1], sizeof(a.uuids[1]), "GPU-b");
    snprintf(a.uuids[2], sizeof(a.uuids[2]), "GPU-c");
    text = egpu_assigned_encode(&a);
    assert_non_null(text);
    assert_string_equal(text, "{\"node\":\"gpu-node-1\",\"containers\":[{\"name\":\"trainer\","
                              "\"core\":30,\"memory\":4096,\"gpus\":[\"GPU-a\"]},{\"name\":"
                              "\"sidecar\",\"core\":100,\"memory\":0,\"gpus\":[\"GPU-b\","
                              "\"GPU-c\"]}]}");
    assert_int_equal(egpu_assigned_decode(text, &b, &err), 0);
    assert_memory_equal(&a, &b, sizeof(a));
    egpu_free(text);
    /* The cache's record holds the same, in the bytes it takes: copies and
     * records of the same annotation compare equal, another does not. */
    {
        struct egpu_sched_assigned *r = egpu_sched_assigned_new(&a), *d, *o;

        assert_non_null(r);
        assert_true(r->size < 128);
        assert_string_equal(egpu_sched_assigned_node(r), "gpu-node-1");
        assert_int_equal(r->ncontainers, 2);
        assert_int_equal(r->ncards, 3);
        assert_string_equal(egpu_sched_assigned_name(r, 0), "trainer");
        assert_string_equal(egpu_sched_assigned_name(r, 1), "sidecar");
        assert_int_equal(r->containers[0].core_pct, 30);
        assert_int_equal(r->containers[0].mem_mib, 4096);
        assert_int_equal(r->containers[1].core_pct, 100);
        assert_int_equal(r->containers[1].ncards, 2);
        assert_int_equal(r->containers[1].first_card, 1);
        assert_string_equal(egpu_sched_assigned_uuid(r, 0), "GPU-a");
        assert_string_equal(egpu_sched_assigned_uuid(r, 2), "GPU-c");
        d = egpu_sched_assigned_dup(r);
        assert_non_null(d);
        assert_true(egpu_sched_assigned_same(r, d));
        assert_false(egpu_sched_assigned_same(r, NULL));
        snprintf(b.uuids[2], sizeof(b.uuids[2]), "GPU-d");
        o = egpu_sched_assigned_new(&b);
        assert_non_null(o);
        assert_false(egpu_sched_assigned_same(r, o));
        egpu_free(o);
        egpu_free(d);
        egpu_free(r);
    }
    /* Bad annotations name the field. */
    assert_int_equal(egpu_assigned_decode("{", &b, &err), EGPU_ESYNTAX);
    assert_int_equal(egpu_assigned_decode("{\"containers\":[]}", &b, &err), EGPU_ESYNTAX);
    assert_non_null(strstr(err.msg, "node: missing"));
    assert_int_equal(egpu_assigned_decode("{\"node\":\"n\",\"containers\":[{\"name\":\"c\","
                                          "\"core\":30,\"memory\":1,\"gpus\":[\"a\",\"b\"]}]}",
                                          &b, &err),
                     EGPU_ESYNTAX);
    assert_non_null(strstr(err.msg, "containers[0].gpus"));
    assert_int_equal(egpu_assigned_decode("{\"node\":\"n\",\"containers\":[{\"name\":\"c\","
                                          "\"core\":300,\"memory\":1,\"gpus\":[\"a\"]}]}",
                                          &b, &err),
                     EGPU_ESYNTAX);
    assert_non_null(strstr(err.msg, "containers[0].core"));
}

static void test_pod_parse(void **state)
{
    const int core[] = {30, 0, 200}, mem[] = {4096, 0, 0};
    json_t *pod = make_pod("ml", "p", NULL, 3, core, mem);
    struct egpu_sched_pod p = {0};
    struct egpu_error err = {0};
    json_t *init;

    (void)state;
    /* An init container asking 8 CPUs: the pod counts max(3, 8) = 8. */
    init = json_pack("[{s:s,s:{s:{s:s}}}]", "name", "init", "resources", "requests", "cpu", "8");
    json_object_set_new(json_object_get(pod, "spec"), "initContainers", init);
    json_object_set_new(json_object_get(pod, "spec"), "overhead",
                        json_pack("{s:s,s:s}", "cpu", "250m", "memory", "512Mi"));
    annotate_json(pod, EGPU_ANN_NODE_POLICY, "fgd");
    annotate_json(pod, EGPU_ANN_GPU_MODEL, "A100|V100M32");
    egpu_sched_pod_clear(&p);
    assert_int_equal(egpu_sched_pod_parse(pod, &p, &err), 0);
    assert_string_equal(p.ns, "ml");
    assert_string_equal(p.name, "p");
    assert_int_equal(p.req.cpu_milli, 8250);
    assert_int_equal(p.req.mem_mib, 3 * 1024 + 512);
    assert_int_equal(p.req.ncontainers, 2);
    assert_string_equal(egpu_sched_pod_container(&p, 0), "c0");
    assert_int_equal(p.req.containers[0].core_milli, 300);
    assert_int_equal(p.req.containers[0].mem_mib, 4096);
    assert_string_equal(egpu_sched_pod_container(&p, 1), "c2");
    assert_int_equal(p.req.containers[1].core_milli, 1000);
    assert_int_equal(p.req.containers[1].ncards, 2);
    assert_true(p.has_node_policy && p.node_policy == EGPU_POLICY_FGD);
    assert_false(p.has_card_policy);
    assert_string_equal(p.gpu_model, "A100|V100M32");
    assert_false(p.has_assigned);
    assert_null(p.assigned);
    assert_int_equal(p.nclaims, 0);
    assert_null(p.claims);
    json_decref(pod);

    /* The annotation and the claims are the pod's own allocations: a copy
     * has its own, and outlives the original. */
    {
        const int one[] = {50}, none[] = {0};
        struct egpu_sched_pod q;

        pod = make_pod("ml", "p", "n1", 1, one, none);
        annotate_json(pod, EGPU_ANN_ASSIGNED,
                      "{\"node\":\"n1\",\"containers\":[{\"name\":\"c0\",\"core\":50,"
                      "\"memory\":0,\"gpus\":[\"GPU-n1-0\"]}]}");
        annotate_json(pod, "egpuc.elasticgpu.io/c0", "shared-a");
        egpu_sched_pod_clear(&p);
        assert_int_equal(egpu_sched_pod_parse(pod, &p, &err), 0);
        json_decref(pod);
        assert_true(p.has_assigned);
        assert_non_null(p.assigned);
        assert_string_equal(egpu_sched_assigned_node(p.assigned), "n1");
        assert_int_equal(p.nclaims, 1);
        assert_string_equal(p.claims[0].claim, "shared-a");
        assert_int_equal(egpu_sched_pod_copy(&q, &p), 0);
        assert_ptr_not_equal(q.assigned, p.assigned);
        assert_ptr_not_equal(q.claims, p.claims);
        egpu_sched_pod_clear(&p);
        assert_false(p.has_assigned);
        assert_int_equal(p.nclaims, 0);
        assert_string_equal(egpu_sched_assigned_uuid(q.assigned, 0), "GPU-n1-0");
        assert_string_equal(q.claims[0].container, "c0");
        egpu_sched_pod_clear(&q);
        /* An unusable annotation: the message is the pod's too. */
        pod = make_pod("ml", "p", "n1", 1, one, none);
        annotate_json(pod, EGPU_ANN_ASSIGNED, "not json");
        egpu_sched_pod_clear(&p);
        assert_int_equal(egpu_sched_pod_parse(pod, &p, &err), 0);
        json_decref(pod);
        assert_false(p.has_assigned);
        assert_non_null(p.assigned_error);
        assert_null(p.claims_error);
        assert_int_equal(egpu_sched_pod_copy(&q, &p), 0);
        assert_ptr_not_equal(q.assigned_error, p.assigned_error);
        assert_string_equal(q.assigned_error, p.assigned_error);
        egpu_sched_pod_clear(&p);
        assert_null(p.assigned_error);
        assert_non_null(strstr(q.assigned_error, EGPU_ANN_ASSIGNED));
        egpu_sched_pod_clear(&q);
    }

    /* 150 is neither a share nor whole cards: the container, the resource
     * and the allowed values are named. */
    {
        const int bad[] = {150}, none[] = {0};

        pod = make_pod("ml", "p", NULL, 1, bad, none);
        egpu_sched_pod_clear(&p);
        assert_int_equal(egpu_sched_pod_parse(pod, &p, &err), EGPU_ERANGE);
        assert_string_equal(err.msg, "container \"c0\": elasticgpu.io/gpu-core is 150; allowed: "
                                     "1..99 to share one card, or a multiple of 100 for whole "
                                     "cards");
        json_decref(pod);
    }
    /* gpu-memory alone, and a policy annotation nobody knows. */
    pod = json_pack("{s:{s:s},s:{s:[{s:s,s:{s:{s:s}}}]}}", "metadata", "name", "m", "spec",
                    "containers", "name", "c", "resources", "limits", EGPU_RES_GPU_MEMORY, "1024");
    egpu_sched_pod_clear(&p);
    assert_int_equal(egpu_sched_pod_parse(pod, &p, &err), EGPU_ERANGE);
    assert_non_null(strstr(err.msg, "needs elasticgpu.io/gpu-core"));
    json_decref(pod);
    {
        const int one[] = {50}, none[] = {0};

        pod = make_pod("ml", "p", NULL, 1, one, none);
        annotate_json(pod, EGPU_ANN_CARD_POLICY, "tetris");
        egpu_sched_pod_clear(&p);
        assert_int_equal(egpu_sched_pod_parse(pod, &p, &err), EGPU_ERANGE);
        assert_non_null(strstr(err.msg, "elasticgpu.io/card-policy"));
        json_decref(pod);
    }
    /* Limits stand in for missing requests. */
    pod = json_pack("{s:{s:s},s:{s:[{s:s,s:{s:{s:s,s:s}}}]}}", "metadata", "name", "l", "spec",
                    "containers", "name", "c", "resources", "limits", EGPU_RES_GPU_CORE, "40",
                    "cpu", "2");
    egpu_sched_pod_clear(&p);
    assert_int_equal(egpu_sched_pod_parse(pod, &p, &err), 0);
    assert_int_equal(p.req.containers[0].core_milli, 400);
    assert_int_equal(p.req.cpu_milli, 2000);
    assert_string_equal(p.ns, "default");
    json_decref(pod);
    egpu_sched_pod_clear(&p);
    assert_int_equal(egpu_sched_pod_parse(NULL, &p, &err), EGPU_ESYNTAX);
}

static void test_wire_fixture_pod(void **state)
{
    json_error_t jerr;
    json_t *args = json_load_file(WIRE "extender_filter_args.json", 0, &jerr);
    struct egpu_sched_pod p = {0};
    struct egpu_error err = {0};
    json_t *c0;

    (void)state;
    if (args == NULL)
        tu_skip("shared/k8s-wire is not beside this checkout");
    /* The fixture uses example.com names; the same pod asking ours. */
    c0 = json_array_get(
        json_object_get(json_object_get(json_object_get(args, "Pod"), "spec"), "containers"), 0);
    json_object_set_new(json_object_get(json_object_get(c0, "resources"), "requests"),
                        EGPU_RES_GPU_CORE, json_string("30"));
    egpu_sched_pod_clear(&p);
    assert_int_equal(egpu_sched_pod_parse(json_object_get(args, "Pod"), &p, &err), 0);
    assert_string_equal(p.name, "train-job-0");
    assert_string_equal(p.ns, "ml-team");
    assert_string_equal(p.uid, "7b0c5c1e-3f0a-4d8e-9d2c-6a1f2b3c4d5e");
    assert_int_equal(p.req.ncontainers, 1);
    assert_int_equal(p.req.containers[0].core_milli, 300);
    json_decref(args);
    egpu_sched_pod_clear(&p);
}

static void test_cache_counts_and_rebuilds(void **state)
{
    struct egpu_sched_cache *c = egpu_sched_cache_new();
    struct egpu_sched_cache *d = egpu_sched_cache_new();
    struct egpu_sched_cache_stats st;
    const int core[] = {30}, mem[] = {1024};
    struct egpu_error err = {0};
    json_t *pod, *g;

    (void)state;
    add_gpu_node(c, "n1", 2);
    /* Bound with an annotation: counted on card GPU-n1-1. */
    pod = make_pod("ns", "a", "n1", 1, core, mem);
    annotate_json(pod, EGPU_ANN_ASSIGNED,
                  "{\"node\":\"n1\",\"containers\":[{\"name\":\"c0\",\"core\":30,\"memory\":1024,"
                  "\"gpus\":[\"GPU-n1-1\"]}]}");
    set_pod(c, json_deep_copy(pod));
    assert_int_equal(card_used(c, "n1", 0), 0);
    assert_int_equal(card_used(c, "n1", 1), 300);
    /* A restart sees the same objects in another order: same state. */
    set_pod(d, json_deep_copy(pod));
    add_gpu_node(d, "n1", 2);
    assert_int_equal(card_used(d, "n1", 1), 300);
    /* A GPU status update changes nothing; a spec change rebuilds the node
     * and keeps the pod counted. */
    g = make_gpu("n1", 1, "A100", 40960);
    json_object_set_new(json_object_get(g, "status"), "health", json_string("Unhealthy"));
    assert_int_equal(egpu_sched_cache_gpu_set(c, g, &err), 0);
    json_decref(g);
    g = make_gpu("n1", 1, "A100", 81920);
    assert_int_equal(egpu_sched_cache_gpu_set(c, g, &err), 0);
    assert_int_equal(card_used(c, "n1", 1), 300);
    /* Deleting the card: the pod's card is gone, it counts without it. */
    assert_int_equal(egpu_sched_cache_gpu_delete(c, g, &err), 0);
    json_decref(g);
    egpu_sched_cache_stats(c, &st);
    assert_int_equal(st.gpus, 1);
    assert_int_equal(st.unresolved, 1);
    /* The pod finishes: released. */
    json_object_set_new(json_object_get(pod, "status"), "phase", json_string("Succeeded"));
    set_pod(d, pod);
    assert_int_equal(card_used(d, "n1", 1), 0);
    egpu_sched_cache_stats(d, &st);
    assert_int_equal(st.placed, 0);
    assert_int_equal(st.pods, 1);
    assert_int_equal(egpu_sched_cache_pod_delete(d, "ns", "a"), 0);
    egpu_sched_cache_stats(d, &st);
    assert_int_equal(st.pods, 0);
    /* Bad objects are refused and change nothing. */
    g = json_pack("{s:{s:s},s:{s:s}}", "metadata", "name", "x", "spec", "nodeName", "n1");
    assert_int_equal(egpu_sched_cache_gpu_set(c, g, &err), EGPU_ESYNTAX);
    assert_non_null(strstr(err.msg, "spec.uuid"));
    json_decref(g);
    g = make_node("n2", "lots", "1Gi");
    assert_int_equal(egpu_sched_cache_node_set(c, g, &err), EGPU_ESYNTAX);
    assert_non_null(strstr(err.msg, "status.allocatable.cpu"));
    json_decref(g);
    egpu_sched_cache_stats(c, &st);
    assert_int_equal(st.nodes, 1);
    egpu_sched_cache_free(c);
    egpu_sched_cache_free(d);
}

/* Node count and cards per node of the core, for the duplicate tests. */
static int node_cards(struct egpu_sched_cache *c, const char *node)
{
    struct egpu_cluster *cl = egpu_sched_cache_lock(c);
    struct egpu_node *n = egpu_cluster_node(cl, node);
    int v = n ? (int)n->ngpus : -1;

    egpu_sched_cache_unlock(c);
    return v;
}

/* Pod ns/a (one container, 80% and 1024 MiB) on node (NULL = pending),
 * with elasticgpu.io/assigned naming uuid at core percent, or the raw
 * annotation text raw (raw_len bytes, NULs allowed), or none. */
static void set_assigned(struct egpu_sched_cache *c, const char *node, int core, const char *uuid,
                         const char *raw, size_t raw_len)
{
    const int cores[] = {80}, mem[] = {1024};
    json_t *pod = make_pod("ns", "a", node, 1, cores, mem);
    char text[256];

    if (uuid != NULL) {
        snprintf(text, sizeof(text),
                 "{\"node\":\"n1\",\"containers\":[{\"name\":\"c0\",\"core\":%d,\"memory\":1024,"
                 "\"gpus\":[\"%s\"]}]}",
                 core, uuid);
        annotate_json(pod, EGPU_ANN_ASSIGNED, text);
    } else if (raw != NULL) {
        json_object_set_new(json_object_get(pod, "metadata"), "annotations",
                            json_pack("{s:s%}", EGPU_ANN_ASSIGNED, raw, raw_len));
    }
    set_pod(c, pod);
}

/* A node's GPU objects live in an array of the node's own size, grown and
 * shrunk as they come and go: every card stays the core's through each
 * resize (a moved slot keeps its card, its UUID and its pods), the 65th is
 * refused, and a node whose GPU objects all left has none. */
static void test_node_gpus_grow_and_shrink(void **state)
{
    struct egpu_sched_cache *c = egpu_sched_cache_new();
    struct egpu_error err = {0};
    json_t *g;

    (void)state;
    assert_non_null(c);
    add_gpu_node(c, "n1", EGPU_NODE_GPUS_MAX);
    assert_int_equal(node_cards(c, "n1"), EGPU_NODE_GPUS_MAX);
    g = make_gpu("n1", EGPU_NODE_GPUS_MAX, "A100", 40960);
    assert_int_equal(egpu_sched_cache_gpu_set(c, g, &err), EGPU_ELIMIT);
    assert_non_null(strstr(err.msg, "more than 64 GPUs"));
    json_decref(g);
    /* A pod on the last card, which every deletion below moves down. */
    set_assigned(c, "n1", 80, "GPU-n1-63", NULL, 0);
    assert_int_equal(card_used(c, "n1", EGPU_NODE_GPUS_MAX - 1), 800);
    for (int i = 0; i < EGPU_NODE_GPUS_MAX - 1; i++) {
        g = make_gpu("n1", i, "A100", 40960);
        assert_int_equal(egpu_sched_cache_gpu_delete(c, g, &err), 0);
        json_decref(g);
        assert_int_equal(node_cards(c, "n1"), EGPU_NODE_GPUS_MAX - 1 - i);
        assert_int_equal(card_used(c, "n1", 0), i == EGPU_NODE_GPUS_MAX - 2 ? 800 : 0);
    }
    assert_int_equal(card_used(c, "n1", 0), 800);
    g = make_gpu("n1", EGPU_NODE_GPUS_MAX - 1, "A100", 40960);
    assert_int_equal(egpu_sched_cache_gpu_delete(c, g, &err), 0);
    assert_int_equal(node_cards(c, "n1"), 0);
    /* And back: the array is made again. */
    assert_int_equal(egpu_sched_cache_gpu_set(c, g, &err), 0);
    json_decref(g);
    assert_int_equal(node_cards(c, "n1"), 1);
    assert_int_equal(card_used(c, "n1", 0), 800);
    egpu_sched_cache_free(c);
}

/* After bind, a pod owner edits its pod's
 * elasticgpu.io/assigned (core 80 -> 1, other card, removed, unreadable);
 * the cache keeps the decision it recorded, so the card stays full. */
static void test_cache_keeps_recorded_assignment(void **state)
{
    struct egpu_sched_cache *c = egpu_sched_cache_new();
    struct egpu_sched_cache_stats st;
    const int core[] = {80}, mem[] = {1024};
    json_t *pod;

    (void)state;
    add_gpu_node(c, "n1", 2);
    /* Our bind: the annotation on the pending pod, then the Binding. */
    set_assigned(c, NULL, 80, "GPU-n1-0", NULL, 0);
    set_assigned(c, "n1", 80, "GPU-n1-0", NULL, 0);
    assert_int_equal(card_used(c, "n1", 0), 800);
    set_assigned(c, "n1", 1, "GPU-n1-0", NULL, 0);        /* core 80 -> 1 */
    set_assigned(c, "n1", 80, "GPU-n1-1", NULL, 0);       /* another card */
    set_assigned(c, "n1", 0, NULL, NULL, 0);              /* removed */
    set_assigned(c, "n1", 0, NULL, "{\"no\0de\":1}", 12); /* unreadable, with a NUL */
    assert_int_equal(card_used(c, "n1", 0), 800);
    assert_int_equal(card_used(c, "n1", 1), 0);
    egpu_sched_cache_stats(c, &st);
    assert_int_equal(st.assigned_ignored, 4);
    assert_int_equal(st.unresolved, 0);
    /* The same decision again is no change. */
    set_assigned(c, "n1", 80, "GPU-n1-0", NULL, 0);
    egpu_sched_cache_stats(c, &st);
    assert_int_equal(st.assigned_ignored, 4);
    /* The pod ends: its card comes back whatever the annotation says. */
    pod = make_pod("ns", "a", "n1", 1, core, mem);
    json_object_set_new(json_object_get(pod, "status"), "phase", json_string("Failed"));
    set_pod(c, pod);
    assert_int_equal(card_used(c, "n1", 0), 0);
    /* A pending pod's annotation may still go (bind undoes it on failure). */
    set_assigned(c, NULL, 80, "GPU-n1-1", NULL, 0);
    assert_int_equal(egpu_sched_cache_pod_delete(c, "ns", "a"), 0);
    set_assigned(c, NULL, 80, "GPU-n1-1", NULL, 0);
    assert_int_equal(card_used(c, "n1", 1), 800);
    set_assigned(c, NULL, 0, NULL, NULL, 0);
    assert_int_equal(card_used(c, "n1", 1), 0);
    egpu_sched_cache_stats(c, &st);
    assert_int_equal(st.assigned_ignored, 4);
    egpu_sched_cache_free(c);
}

/* A GPU object repeating another card's UUID drops
 * only itself, never the node it names or the owner's node. */
static void test_cache_duplicate_uuid_drops_only_the_duplicate(void **state)
{
    struct egpu_sched_cache *c = egpu_sched_cache_new();
    struct egpu_sched_cache_stats st;
    struct egpu_error err = {0};
    json_t *evil, *twin, *owner, *nul;

    (void)state;
    add_gpu_node(c, "n1", 2);
    add_gpu_node(c, "n2", 2);
    /* On another node. */
    evil = make_gpu("n2", 5, "A100", 40960);
    json_object_set_new(json_object_get(evil, "spec"), "uuid", json_string("GPU-n1-0"));
    assert_int_equal(egpu_sched_cache_gpu_set(c, evil, &err), -EEXIST);
    assert_non_null(strstr(err.msg, "n2-gpu5"));
    assert_non_null(strstr(err.msg, "n1-gpu0"));
    /* On the same node, under another name and a bigger memory. */
    twin = make_gpu("n1", 7, "A100", 999999);
    json_object_set_new(json_object_get(twin, "spec"), "uuid", json_string("GPU-n1-1"));
    assert_int_equal(egpu_sched_cache_gpu_set(c, twin, &err), -EEXIST);
    assert_int_equal(node_cards(c, "n1"), 2);
    assert_int_equal(node_cards(c, "n2"), 2);
    egpu_sched_cache_stats(c, &st);
    assert_int_equal(st.nodes, 2);
    assert_int_equal(st.gpus, 4);
    assert_int_equal(st.duplicate_gpus, 2);
    /* A status update of a duplicate says nothing new. */
    json_object_set_new(evil, "status", json_pack("{s:s}", "health", "Unhealthy"));
    assert_int_equal(egpu_sched_cache_gpu_set(c, evil, &err), 0);
    /* An update of the owner keeps the card its own. */
    owner = make_gpu("n1", 0, "A100", 81920);
    assert_int_equal(egpu_sched_cache_gpu_set(c, owner, &err), 0);
    assert_int_equal(node_cards(c, "n1"), 2);
    /* The owner goes: the duplicate takes the card over. */
    assert_int_equal(egpu_sched_cache_gpu_delete(c, owner, &err), 0);
    assert_int_equal(node_cards(c, "n1"), 1);
    assert_int_equal(node_cards(c, "n2"), 3);
    egpu_sched_cache_stats(c, &st);
    assert_int_equal(st.duplicate_gpus, 1);
    /* Deleting a shadowed duplicate changes no node. */
    assert_int_equal(egpu_sched_cache_gpu_delete(c, twin, &err), 0);
    assert_int_equal(node_cards(c, "n1"), 1);
    egpu_sched_cache_stats(c, &st);
    assert_int_equal(st.duplicate_gpus, 0);
    assert_int_equal(egpu_sched_cache_gpu_delete(c, evil, &err), 0);
    assert_int_equal(node_cards(c, "n2"), 2);
    /* A UUID holding a NUL is refused, naming the field. */
    nul = make_gpu("n2", 6, "A100", 40960);
    json_object_set_new(json_object_get(nul, "spec"), "uuid", json_stringn("GPU-n1-1\0x", 10));
    assert_int_equal(egpu_sched_cache_gpu_set(c, nul, &err), EGPU_ESYNTAX);
    assert_non_null(strstr(err.msg, "spec.uuid"));
    assert_int_equal(node_cards(c, "n2"), 2);
    json_decref(nul);
    json_decref(owner);
    json_decref(evil);
    json_decref(twin);
    egpu_sched_cache_free(c);
}

/* A NUL in a string the extender reads as text is refused, naming the
 * field; one in an annotation it does not read changes nothing. */
static void test_pod_parse_nul(void **state)
{
    const int core[] = {30}, mem[] = {0};
    struct egpu_sched_pod p = {0};
    struct egpu_error err = {0};
    json_t *pod = make_pod("ns", "a", NULL, 1, core, mem);

    (void)state;
    json_object_set_new(json_object_get(pod, "metadata"), "annotations",
                        json_pack("{s:s%}", "team.example.com/note", "a\0b", (size_t)3));
    egpu_sched_pod_clear(&p);
    assert_int_equal(egpu_sched_pod_parse(pod, &p, &err), 0);
    json_object_set_new(json_object_get(json_object_get(pod, "metadata"), "annotations"),
                        EGPU_ANN_NODE_POLICY, json_stringn("fgd\0x", 5));
    egpu_sched_pod_clear(&p);
    assert_int_equal(egpu_sched_pod_parse(pod, &p, &err), EGPU_ERANGE);
    json_object_del(json_object_get(json_object_get(pod, "metadata"), "annotations"),
                    EGPU_ANN_NODE_POLICY);
    json_object_set_new(json_object_get(pod, "metadata"), "name", json_stringn("a\0b", 3));
    egpu_sched_pod_clear(&p);
    assert_int_equal(egpu_sched_pod_parse(pod, &p, &err), EGPU_ESYNTAX);
    assert_non_null(strstr(err.msg, "metadata.name"));
    json_decref(pod);
    egpu_sched_pod_clear(&p);
}

/* Fake API for bind: records calls, fails on demand. */
struct fake_api {
    pthread_mutex_t lock;
    int annotate_calls, bind_calls;
    int fail_annotate, fail_bind;
    char last_value[2048];
    bool removed;
    bool unsynced; /* the cache has not had its first lists */
};

static bool fake_synced(void *data)
{
    return !((struct fake_api *)data)->unsynced;
}

static int fake_annotate(void *data, const char *ns, const char *name, const char *key,
                         const char *value, struct egpu_error *err)
{
    struct fake_api *f = data;
    int rc = 0;

    (void)ns;
    (void)name;
    assert_string_equal(key, EGPU_ANN_ASSIGNED);
    pthread_mutex_lock(&f->lock);
    f->annotate_calls++;
    if (value == NULL)
        f->removed = true;
    else if (f->fail_annotate)
        rc = egpu_error_set(err, -EIO, "injected annotate failure");
    else
        snprintf(f->last_value, sizeof(f->last_value), "%s", value);
    pthread_mutex_unlock(&f->lock);
    return rc;
}

static int fake_bind(void *data, const char *ns, const char *name, const char *uid,
                     const char *node, struct egpu_error *err)
{
    struct fake_api *f = data;
    int rc = 0;

    (void)ns;
    (void)name;
    (void)uid;
    (void)node;
    pthread_mutex_lock(&f->lock);
    f->bind_calls++;
    if (f->fail_bind)
        rc = egpu_error_set(err, -EIO, "injected binding failure");
    pthread_mutex_unlock(&f->lock);
    return rc;
}

static struct egpu_extender *new_extender(struct egpu_sched_cache *c, struct fake_api *f,
                                          enum egpu_policy_kind k)
{
    struct egpu_extender_ops ops = {
        .data = f, .synced = fake_synced, .annotate = fake_annotate, .bind = fake_bind};
    struct egpu_extender_config cfg = {.node_policy = k, .card_policy = k, .seed = 1};
    struct egpu_error err = {0};

    pthread_mutex_init(&f->lock, NULL);
    return egpu_extender_new(&cfg, c, &ops, &err);
}

static json_t *call(int (*verb)(struct egpu_extender *, const char *, size_t, struct egpu_buf *),
                    struct egpu_extender *x, const char *body, int want_status)
{
    struct egpu_buf reply;
    json_error_t jerr;
    json_t *out;
    int status;

    egpu_buf_init(&reply, 1 << 20);
    status = verb(x, body, strlen(body), &reply);
    if (status != want_status)
        fail_msg("status %d (want %d): %s", status, want_status, egpu_buf_str(&reply));
    out = json_loads(egpu_buf_str(&reply), 0, &jerr);
    assert_non_null(out);
    egpu_buf_free(&reply);
    return out;
}

/* j printed compactly in its key order is exactly want. */
static void assert_json_text(const json_t *j, const char *want)
{
    char *text = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);

    assert_non_null(text);
    assert_string_equal(text, want);
    free(text);
}

/* Before the first lists, filter refuses with the protocol's Error (HTTP 200,
 * the text shows in kubectl describe pod); prioritize, whose reply has no
 * Error, answers 503. */
static void test_unsynced_refusals(void **state)
{
    struct egpu_sched_cache *c = egpu_sched_cache_new();
    struct fake_api f = {.unsynced = true};
    struct egpu_extender *x = new_extender(c, &f, EGPU_POLICY_BINPACK);
    const char *const nodes[] = {"n1"};
    const int core40[] = {40}, none[] = {0};
    char *body;
    json_t *out;

    (void)state;
    add_gpu_node(c, "n1", 1);
    body = tu_extender_args(make_pod("ns", "p", NULL, 1, core40, none), nodes, 1, false);
    out = call(egpu_extender_filter, x, body, 200);
    assert_json_text(out, "{\"Nodes\":null,\"NodeNames\":null,\"FailedNodes\":null,"
                          "\"FailedAndUnresolvableNodes\":null,"
                          "\"Error\":\"elastic-gpu extender: node cache not synced yet\"}");
    json_decref(out);
    json_decref(call(egpu_extender_prioritize, x, body, 503));
    free(body);
    egpu_extender_free(x);
    egpu_sched_cache_free(c);
}

static char *bind_args(const char *ns, const char *name, const char *node);

/* Set GPU object node-gpu<index>'s status.health (as egpu-agent writes it). */
static void set_health(struct egpu_sched_cache *c, const char *node, int index, const char *health)
{
    struct egpu_error err = {0};
    json_t *g = make_gpu(node, index, "A100", 40960);

    json_object_set_new(json_object_get(g, "status"), "health", json_string(health));
    if (egpu_sched_cache_gpu_set(c, g, &err) != 0)
        fail_msg("gpu: %s", err.msg);
    json_decref(g);
}

/* A card whose GPU object is not Healthy takes no new
 * pod. filter fails a node with only such cards, naming them and their
 * status.health; bind refuses to place there; pods already on them stay
 * counted; a card that is Healthy again takes pods again. */
static void test_unhealthy_cards_take_no_new_pod(void **state)
{
    struct egpu_sched_cache *c = egpu_sched_cache_new();
    struct fake_api f = {0};
    struct egpu_extender *x = new_extender(c, &f, EGPU_POLICY_BINPACK);
    const char *const nodes[] = {"n1", "n2"};
    const int core30[] = {30}, core50[] = {50}, none[] = {0};
    json_t *out, *p;
    char *body;

    (void)state;
    add_gpu_node(c, "n1", 2);
    add_gpu_node(c, "n2", 1);
    p = make_pod("ns", "old", "n1", 1, core50, none);
    annotate_json(p, EGPU_ANN_ASSIGNED,
                  "{\"node\":\"n1\",\"containers\":[{\"name\":\"c0\",\"core\":50,"
                  "\"memory\":0,\"gpus\":[\"GPU-n1-0\"]}]}");
    set_pod(c, p);
    set_health(c, "n1", 0, "Unhealthy");
    set_health(c, "n1", 1, "Unhealthy: XID 79");
    /* The pod on the unhealthy card stays counted. */
    assert_int_equal(card_used(c, "n1", 0), 500);
    body = tu_extender_args(make_pod("ns", "new", NULL, 1, core30, none), nodes, 2, false);
    out = call(egpu_extender_filter, x, body, 200);
    assert_int_equal(json_array_size(json_object_get(out, "NodeNames")), 1);
    assert_string_equal(json_string_value(json_array_get(json_object_get(out, "NodeNames"), 0)),
                        "n2");
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(out, "FailedNodes"), "n1")),
        "cards n1-gpu0 (Unhealthy), n1-gpu1 (Unhealthy: XID 79) take no new pods; "
        "no card with 30% core and 0 MiB free for container 0 (most free card: 0%, 0 MiB)");
    json_decref(out);
    free(body);
    /* bind refuses the node: nothing reserved, annotated or bound. */
    set_pod(c, make_pod("ns", "new", NULL, 1, core30, none));
    body = bind_args("ns", "new", "n1");
    out = call(egpu_extender_bind, x, body, 200);
    assert_non_null(strstr(json_string_value(json_object_get(out, "Error")),
                           "cards n1-gpu0 (Unhealthy), n1-gpu1 (Unhealthy: XID 79) take no new "
                           "pods"));
    json_decref(out);
    assert_int_equal(f.annotate_calls + f.bind_calls, 0);
    assert_int_equal(card_used(c, "n1", 0) + card_used(c, "n1", 1), 500);
    /* Card 1 is Healthy again: it takes the pod; card 0 still holds the old one. */
    set_health(c, "n1", 1, "Healthy");
    json_decref(call(egpu_extender_bind, x, body, 200));
    assert_int_equal(f.bind_calls, 1);
    assert_int_equal(card_used(c, "n1", 0), 500);
    assert_int_equal(card_used(c, "n1", 1), 300);
    free(body);
    egpu_extender_free(x);
    egpu_sched_cache_free(c);
}

/* A GPU object of card index on node with status.used as egpu-agent writes
 * it: utilization percent, memory MiB, updateTime age_s seconds ago. */
static void set_used(struct egpu_sched_cache *c, const char *node, int index, int util_pct,
                     int mem_mib, int64_t age_s)
{
    struct egpu_error err = {0};
    json_t *g = make_gpu(node, index, "A100", 40960);
    char at[EGPU_API_TIME_MAX];

    json_object_set_new(json_object_get(g, "status"), "used",
                        json_pack("{s:i,s:i,s:s}", "memory", mem_mib, "utilization", util_pct,
                                  "updateTime",
                                  egpu_api_time_format((int64_t)time(NULL) - age_s, at)));
    if (egpu_sched_cache_gpu_set(c, g, &err) != 0)
        fail_msg("gpu: %s", err.msg);
    json_decref(g);
}

/* The core's load of card g of node (EGPU_LOAD_UNKNOWN when none). */
static uint16_t card_load(struct egpu_sched_cache *c, const char *node, int g)
{
    struct egpu_cluster *cl = egpu_sched_cache_lock(c);
    struct egpu_node *n = egpu_cluster_node(cl, node);
    uint16_t v = n ? n->gpus[g].load_pct : 0;

    egpu_sched_cache_unlock(c);
    return v;
}

/* filter and then prioritize for a 30% pod on node-a and node-b: returns
 * the nodes filter passes ("node-a", "node-b" or "node-a,node-b"), with the
 * failed node's FailedNodes reason in *why ("" when none) and the node
 * prioritize gives 10 in ten (all copies, freed by the caller). */
static char *filter_pass(struct egpu_extender *x, char **why, char **ten)
{
    const char *const nodes[] = {"node-a", "node-b"};
    const int core30[] = {30}, none[] = {0};
    char *body = tu_extender_args(make_pod("ns", "p", NULL, 1, core30, none), nodes, 2, false);
    json_t *out = call(egpu_extender_filter, x, body, 200),
           *pass = json_object_get(out, "NodeNames");
    json_t *failed = json_object_get(out, "FailedNodes");
    const char *fail = json_string_value(json_object_get(failed, "node-b"));
    char list[64] = "";

    if (fail == NULL)
        fail = json_string_value(json_object_get(failed, "node-a"));
    *why = strdup(fail ? fail : "");
    for (size_t i = 0; i < json_array_size(pass); i++)
        snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s", i ? "," : "",
                 json_string_value(json_array_get(pass, i)));
    json_decref(out);
    out = call(egpu_extender_prioritize, x, body, 200);
    *ten = NULL;
    for (size_t i = 0; i < json_array_size(out); i++) {
        json_t *e = json_array_get(out, i);

        if (json_integer_value(json_object_get(e, "Score")) == 10)
            *ten = strdup(json_string_value(json_object_get(e, "Host")));
    }
    assert_non_null(*ten);
    json_decref(out);
    free(body);
    return strdup(list);
}

/* --load-aware. Two identical empty nodes and a seed
 * whose hash picks node-b; node-b's card reports 90% utilization, node-a's
 * 5%. Load-aware: filter passes node-a alone and says why node-b fails,
 * prioritize gives node-a 10. Off: both pass and node-b gets 10, as the
 * hash says. A report older than the bound is unknown, never idle: then
 * node-b's known 90% wins. Load-only reports never rebuild a node. */
static void test_load_aware_breaks_ties(void **state)
{
    struct egpu_sched_cache *c = egpu_sched_cache_new(), *d = egpu_sched_cache_new();
    struct fake_api f = {0}, g = {0};
    struct egpu_extender_ops ops = {
        .data = &f, .synced = fake_synced, .annotate = fake_annotate, .bind = fake_bind};
    struct egpu_extender_config cfg = {.node_policy = EGPU_POLICY_BINPACK,
                                       .card_policy = EGPU_POLICY_BINPACK};
    struct egpu_extender *x, *y;
    struct egpu_error err = {0};
    uint64_t members, gen;
    char *why, *one, *ten;

    (void)state;
    while (egpu_hash_str("node-b", cfg.seed) > egpu_hash_str("node-a", cfg.seed))
        cfg.seed++;
    pthread_mutex_init(&f.lock, NULL);
    pthread_mutex_init(&g.lock, NULL);
    cfg.load_aware = true;
    x = egpu_extender_new(&cfg, c, &ops, &err);
    cfg.load_aware = false;
    ops.data = &g;
    y = egpu_extender_new(&cfg, d, &ops, &err);
    assert_non_null(x);
    assert_non_null(y);
    egpu_sched_cache_set_load_aware(c, true, 300);
    add_gpu_node(c, "node-a", 1);
    add_gpu_node(c, "node-b", 1);
    add_gpu_node(d, "node-a", 1);
    add_gpu_node(d, "node-b", 1);
    members = egpu_sched_cache_lock(c)->members;
    egpu_sched_cache_unlock(c);
    set_used(c, "node-a", 0, 5, 1024, 10);
    set_used(c, "node-b", 0, 90, 1024, 10);
    set_used(d, "node-a", 0, 5, 1024, 10);
    set_used(d, "node-b", 0, 90, 1024, 10);
    assert_int_equal(card_load(c, "node-a", 0), 5);
    assert_int_equal(card_load(c, "node-b", 0), 90);
    assert_int_equal(card_load(d, "node-a", 0), EGPU_LOAD_UNKNOWN); /* off: never read */
    /* Load-only reports changed cards in place: no node left or came. */
    assert_true(egpu_sched_cache_lock(c)->members == members);
    egpu_sched_cache_unlock(c);

    one = filter_pass(x, &why, &ten);
    assert_string_equal(one, "node-a");
    assert_string_equal(ten, "node-a");
    assert_string_equal(why, "node node-a fits this pod as well and its cards are less loaded "
                             "(load 5% against 90%: the higher of GPU utilization and memory "
                             "in use); filter passes only the least loaded of the nodes tied "
                             "for the best score");
    assert_int_equal(egpu_extender_load_decided(x), 1);
    free(one);
    free(why);
    free(ten);
    one = filter_pass(y, &why, &ten);
    assert_string_equal(one, "node-a,node-b"); /* both pass, the hash's node-b gets 10 */
    assert_string_equal(ten, "node-b");
    assert_string_equal(why, "");
    assert_int_equal(egpu_extender_load_decided(y), 0);
    free(one);
    free(why);
    free(ten);

    /* The same report again changes nothing, not even the generation. */
    gen = egpu_sched_cache_lock(c)->gen;
    egpu_sched_cache_unlock(c);
    set_used(c, "node-a", 0, 5, 1024, 10);
    assert_true(egpu_sched_cache_lock(c)->gen == gen);
    egpu_sched_cache_unlock(c);

    /* node-a's report is 400 s old: unknown, so node-b's 90% is preferred. */
    set_used(c, "node-a", 0, 5, 1024, 400);
    assert_int_equal(card_load(c, "node-a", 0), EGPU_LOAD_UNKNOWN);
    one = filter_pass(x, &why, &ten);
    assert_string_equal(one, "node-b");
    assert_string_equal(ten, "node-b");
    assert_non_null(strstr(why, "(load 90% against unknown (no fresh report)"));
    free(one);
    free(why);
    free(ten);

    /* A fresh report grows stale as time passes, with no event. */
    set_used(c, "node-a", 0, 5, 1024, 10);
    assert_int_equal(card_load(c, "node-a", 0), 5);
    (void)egpu_sched_cache_lock(c);
    egpu_sched_cache_expire_loads_locked(c, (int64_t)time(NULL) + 200);
    egpu_sched_cache_unlock(c);
    assert_int_equal(card_load(c, "node-a", 0), 5);
    (void)egpu_sched_cache_lock(c);
    egpu_sched_cache_expire_loads_locked(c, (int64_t)time(NULL) + 300);
    egpu_sched_cache_unlock(c);
    assert_int_equal(card_load(c, "node-a", 0), EGPU_LOAD_UNKNOWN);
    assert_int_equal(card_load(c, "node-b", 0), EGPU_LOAD_UNKNOWN);

    /* No status.used at all: unknown. A health change rebuilds the node and
     * keeps the fresh load. */
    set_used(c, "node-b", 0, 90, 1024, 10);
    set_health(c, "node-a", 0, "Healthy");
    assert_int_equal(card_load(c, "node-a", 0), EGPU_LOAD_UNKNOWN);
    set_used(c, "node-a", 0, 40, 1024, 10);
    {
        json_t *gj = make_gpu("node-a", 0, "A100", 40960);
        char at[EGPU_API_TIME_MAX];

        json_object_set_new(json_object_get(gj, "status"), "health", json_string("Unhealthy"));
        json_object_set_new(json_object_get(gj, "status"), "used",
                            json_pack("{s:i,s:i,s:s}", "memory", 1024, "utilization", 40,
                                      "updateTime",
                                      egpu_api_time_format((int64_t)time(NULL) - 10, at)));
        assert_int_equal(egpu_sched_cache_gpu_set(c, gj, &err), 0);
        json_decref(gj);
    }
    assert_int_equal(card_load(c, "node-a", 0), 40);
    egpu_extender_free(x);
    egpu_extender_free(y);
    egpu_sched_cache_free(c);
    egpu_sched_cache_free(d);
}

static void test_filter_and_prioritize(void **state)
{
    struct egpu_sched_cache *c = egpu_sched_cache_new();
    struct fake_api f = {0};
    struct egpu_extender *x = new_extender(c, &f, EGPU_POLICY_BINPACK);
    const char *const nodes[] = {"n1", "n2", "ghost"};
    const int core60[] = {60}, none[] = {0}, core50[] = {50};
    json_t *out, *failed;
    char *body;

    (void)state;
    add_gpu_node(c, "n1", 1);
    add_gpu_node(c, "n2", 1);
    /* n1's card is 50% used. */
    {
        json_t *p = make_pod("ns", "busy", "n1", 1, core50, none);

        annotate_json(p, EGPU_ANN_ASSIGNED,
                      "{\"node\":\"n1\",\"containers\":[{\"name\":\"c0\",\"core\":50,"
                      "\"memory\":0,\"gpus\":[\"GPU-n1-0\"]}]}");
        set_pod(c, p);
    }
    /* 60% fits only n2; the ghost node is unknown. NodeNames form. */
    body = tu_extender_args(make_pod("ns", "new", NULL, 1, core60, none), nodes, 3, false);
    out = call(egpu_extender_filter, x, body, 200);
    assert_int_equal(json_array_size(json_object_get(out, "NodeNames")), 1);
    assert_string_equal(json_string_value(json_array_get(json_object_get(out, "NodeNames"), 0)),
                        "n2");
    assert_true(json_is_null(json_object_get(out, "Nodes")));
    failed = json_object_get(out, "FailedNodes");
    assert_non_null(strstr(json_string_value(json_object_get(failed, "n1")), "60% core"));
    assert_non_null(strstr(json_string_value(json_object_get(failed, "ghost")), "unknown"));
    assert_string_equal(json_string_value(json_object_get(out, "Error")), "");
    json_decref(out);
    free(body);
    /* Full Nodes form: the reply carries the node objects that pass. */
    body = tu_extender_args(make_pod("ns", "new", NULL, 1, core60, none), nodes, 2, true);
    out = call(egpu_extender_filter, x, body, 200);
    assert_true(json_is_null(json_object_get(out, "NodeNames")));
    assert_int_equal(json_array_size(json_object_get(json_object_get(out, "Nodes"), "items")), 1);
    json_decref(out);
    free(body);
    /* A pod without GPUs: every node passes. */
    body = tu_extender_args(make_pod("ns", "cpu", NULL, 1, none, none), nodes, 3, false);
    out = call(egpu_extender_filter, x, body, 200);
    assert_int_equal(json_array_size(json_object_get(out, "NodeNames")), 3);
    json_decref(out);
    free(body);
    /* Prioritize, binpack, 30%: n1 (fuller) 10, n2 0, ghost 0. */
    {
        const int core30[] = {30};

        body = tu_extender_args(make_pod("ns", "new", NULL, 1, core30, none), nodes, 3, false);
    }
    out = call(egpu_extender_prioritize, x, body, 200);
    /* n2 and the ghost score 0: left out, which kube-scheduler counts as 0. */
    assert_int_equal(json_array_size(out), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(out, 0), "Host")), "n1");
    assert_int_equal(json_integer_value(json_object_get(json_array_get(out, 0), "Score")), 10);
    json_decref(out);
    free(body);
    /* Malformed input: 400 naming the problem. */
    out = call(egpu_extender_filter, x, "{not json", 400);
    assert_non_null(strstr(json_string_value(json_object_get(out, "Error")), "malformed JSON"));
    json_decref(out);
    /* A Pod refused for its content: the protocol's refusal, HTTP 200 with the
     * ExtenderFilterResult's Error, so kube-scheduler shows the text. */
    out = call(egpu_extender_filter, x, "{\"Pod\":{\"metadata\":{},\"spec\":{}}}", 200);
    assert_json_text(out, "{\"Nodes\":null,\"NodeNames\":null,\"FailedNodes\":null,"
                          "\"FailedAndUnresolvableNodes\":null,"
                          "\"Error\":\"ExtenderArgs.Pod: metadata.name: missing\"}");
    json_decref(out);
    out = call(egpu_extender_prioritize, x,
               "{\"Pod\":{\"metadata\":{\"name\":\"p\"},\"spec\":{}},\"NodeNames\":7}", 400);
    assert_non_null(strstr(json_string_value(json_object_get(out, "Error")), "NodeNames"));
    json_decref(out);
    assert_int_equal(card_used(c, "n1", 0), 500);
    assert_int_equal(card_used(c, "n2", 0), 0);
    egpu_extender_free(x);
    egpu_sched_cache_free(c);
}

/* The same names pod after pod reuse the last lookup; a node that comes or
 * goes between two filters with the very same body is seen at once. */
static void test_filter_follows_node_set(void **state)
{
    struct egpu_sched_cache *c = egpu_sched_cache_new();
    struct fake_api f = {0};
    struct egpu_extender *x = new_extender(c, &f, EGPU_POLICY_BINPACK);
    const char *const nodes[] = {"n1", "n2", "n3"};
    const int core30[] = {30}, none[] = {0};
    char *body = tu_extender_args(make_pod("ns", "p", NULL, 1, core30, none), nodes, 3, false);
    json_t *out;

    (void)state;
    add_gpu_node(c, "n1", 1);
    add_gpu_node(c, "n2", 1);
    for (int round = 0; round < 4; round++) {
        out = call(egpu_extender_filter, x, body, 200);
        /* Rounds 0, 1: n3 unknown; 2: n3 added; 3: n1 deleted. */
        assert_int_equal(json_array_size(json_object_get(out, "NodeNames")), round < 2    ? 2
                                                                             : round == 2 ? 3
                                                                                          : 2);
        assert_int_equal(json_object_get(json_object_get(out, "FailedNodes"), "n3") != NULL,
                         round < 2);
        assert_int_equal(json_object_get(json_object_get(out, "FailedNodes"), "n1") != NULL,
                         round == 3);
        json_decref(out);
        if (round == 1)
            add_gpu_node(c, "n3", 1);
        if (round == 2)
            assert_int_equal(egpu_sched_cache_node_delete(c, "n1"), 0);
    }
    free(body);
    egpu_extender_free(x);
    egpu_sched_cache_free(c);
}

static char *bind_args(const char *ns, const char *name, const char *node)
{
    json_t *a = json_pack("{s:s,s:s,s:s,s:s}", "PodName", name, "PodNamespace", ns, "PodUID", name,
                          "Node", node);
    char *text = json_dumps(a, JSON_COMPACT);

    json_decref(a);
    return text;
}

static void test_bind_and_rollback(void **state)
{
    struct egpu_sched_cache *c = egpu_sched_cache_new();
    struct fake_api f = {0};
    struct egpu_extender *x = new_extender(c, &f, EGPU_POLICY_BINPACK);
    const int core40[] = {40}, mem[] = {2048};
    struct egpu_assigned a;
    struct egpu_error err = {0};
    uint64_t counts[EGPU_BIND_RESULTS];
    json_t *out;
    char *body;

    (void)state;
    add_gpu_node(c, "n1", 2);
    set_pod(c, make_pod("ns", "p1", NULL, 1, core40, mem));
    body = bind_args("ns", "p1", "n1");
    out = call(egpu_extender_bind, x, body, 200);
    assert_string_equal(json_string_value(json_object_get(out, "Error")), "");
    json_decref(out);
    assert_int_equal(f.bind_calls, 1);
    assert_int_equal(egpu_assigned_decode(f.last_value, &a, &err), 0);
    assert_string_equal(a.node, "n1");
    assert_int_equal(a.containers[0].core_pct, 40);
    assert_int_equal(a.containers[0].mem_mib, 2048);
    assert_int_equal(card_used(c, "n1", 0), 400);
    /* Binding the same pod again: refused, nothing more reserved. */
    out = call(egpu_extender_bind, x, body, 200);
    assert_non_null(strstr(json_string_value(json_object_get(out, "Error")), "already placed"));
    json_decref(out);
    free(body);
    assert_int_equal(card_used(c, "n1", 0), 400);

    /* The annotation write fails: the reservation is undone. */
    set_pod(c, make_pod("ns", "p2", NULL, 1, core40, mem));
    f.fail_annotate = 1;
    body = bind_args("ns", "p2", "n1");
    out = call(egpu_extender_bind, x, body, 200);
    assert_non_null(strstr(json_string_value(json_object_get(out, "Error")), "injected annotate"));
    json_decref(out);
    assert_int_equal(card_used(c, "n1", 0) + card_used(c, "n1", 1), 400);
    /* The Binding fails: the annotation is removed and the share freed. */
    f.fail_annotate = 0;
    f.fail_bind = 1;
    out = call(egpu_extender_bind, x, body, 200);
    assert_non_null(strstr(json_string_value(json_object_get(out, "Error")), "injected binding"));
    json_decref(out);
    assert_true(f.removed);
    assert_int_equal(card_used(c, "n1", 0) + card_used(c, "n1", 1), 400);
    free(body);
    /* Unknown pod and node: refused, HTTP 200 with the ExtenderBindingResult's
     * Error naming them; not ExtenderBindingArgs: 400. */
    body = bind_args("ns", "nobody", "n1");
    out = call(egpu_extender_bind, x, body, 200);
    assert_json_text(out, "{\"Error\":\"pod ns/nobody is not in the elastic-gpu cache\"}");
    json_decref(out);
    free(body);
    body = bind_args("ns", "p2", "ghost");
    out = call(egpu_extender_bind, x, body, 200);
    assert_json_text(out, "{\"Error\":\"node ghost is not in the elastic-gpu cache\"}");
    json_decref(out);
    free(body);
    out = call(egpu_extender_bind, x, "{\"PodName\":5}", 400);
    assert_non_null(strstr(json_string_value(json_object_get(out, "Error")), "PodName"));
    json_decref(out);
    egpu_extender_bind_counts(x, counts);
    assert_int_equal(counts[EGPU_BIND_OK], 1);
    assert_int_equal(counts[EGPU_BIND_ANNOTATE], 1);
    assert_int_equal(counts[EGPU_BIND_BINDING], 1);
    assert_int_equal(counts[EGPU_BIND_UNKNOWN], 2);
    assert_int_equal(counts[EGPU_BIND_BAD_REQUEST], 1);
    egpu_extender_free(x);
    egpu_sched_cache_free(c);
}

/* bind serves only this scheduler's GPU pods, as the cache holds them: a
 * pod of another scheduler (or with a name that only starts like ours) and
 * a pod asking no GPU are refused (HTTP 200, the Error naming the pod and why), and
 * nothing is reserved, annotated or bound. */
static void test_bind_refuses_foreign_and_gpu_less_pods(void **state)
{
    struct egpu_sched_cache *c = egpu_sched_cache_new();
    struct fake_api f = {0};
    struct egpu_extender *x = new_extender(c, &f, EGPU_POLICY_BINPACK);
    const int core40[] = {40}, none[] = {0};
    static const char *const foreign[] = {"default-scheduler", "elastic-gpu-scheduler-2", ""};
    uint64_t counts[EGPU_BIND_RESULTS];
    json_t *out, *pod;
    const char *e;
    char *body;

    (void)state;
    add_gpu_node(c, "n1", 1);
    for (size_t i = 0; i < sizeof(foreign) / sizeof(foreign[0]); i++) {
        pod = make_pod("ns", "other", NULL, 1, core40, none);
        json_object_set_new(json_object_get(pod, "spec"), "schedulerName", json_string(foreign[i]));
        set_pod(c, pod);
        body = bind_args("ns", "other", "n1");
        out = call(egpu_extender_bind, x, body, 200);
        e = json_string_value(json_object_get(out, "Error"));
        assert_non_null(strstr(e, "ns/other"));
        assert_non_null(strstr(e, "spec.schedulerName"));
        assert_non_null(strstr(e, "not this scheduler's pod"));
        json_decref(out);
        free(body);
    }
    /* A schedulerName with a NUL after ours is not ours either. */
    pod = make_pod("ns", "nul", NULL, 1, core40, none);
    json_object_set_new(
        json_object_get(pod, "spec"), "schedulerName",
        json_stringn(EGPU_SCHEDULER_NAME_DEFAULT "\0x", sizeof(EGPU_SCHEDULER_NAME_DEFAULT) + 1));
    set_pod(c, pod);
    body = bind_args("ns", "nul", "n1");
    json_decref(call(egpu_extender_bind, x, body, 200));
    free(body);
    /* Ours, but no GPU asked. */
    set_pod(c, make_pod("ns", "cpu", NULL, 1, none, none));
    body = bind_args("ns", "cpu", "n1");
    out = call(egpu_extender_bind, x, body, 200);
    e = json_string_value(json_object_get(out, "Error"));
    assert_non_null(strstr(e, "ns/cpu"));
    assert_non_null(strstr(e, "asks for no " EGPU_RES_GPU_CORE));
    json_decref(out);
    free(body);
    assert_int_equal(f.annotate_calls, 0);
    assert_int_equal(f.bind_calls, 0);
    assert_int_equal(card_used(c, "n1", 0), 0);
    egpu_extender_bind_counts(x, counts);
    assert_int_equal(counts[EGPU_BIND_NOT_OURS], 5);
    assert_int_equal(counts[EGPU_BIND_OK], 0);
    assert_string_equal(egpu_bind_result_name(EGPU_BIND_NOT_OURS), "not_ours");
    egpu_extender_free(x);
    egpu_sched_cache_free(c);

    /* Another configured name: only that one is served. */
    c = egpu_sched_cache_new();
    {
        struct egpu_extender_ops ops = {
            .data = &f, .synced = fake_synced, .annotate = fake_annotate, .bind = fake_bind};
        struct egpu_extender_config cfg = {.scheduler_name = "gpu-team", .seed = 1};
        struct egpu_error err = {0};

        x = egpu_extender_new(&cfg, c, &ops, &err);
        assert_non_null(x);
    }
    add_gpu_node(c, "n1", 1);
    set_pod(c, make_pod("ns", "p", NULL, 1, core40, none));
    body = bind_args("ns", "p", "n1");
    out = call(egpu_extender_bind, x, body, 200);
    assert_non_null(strstr(json_string_value(json_object_get(out, "Error")), "\"gpu-team\""));
    json_decref(out);
    pod = make_pod("ns", "p", NULL, 1, core40, none);
    json_object_set_new(json_object_get(pod, "spec"), "schedulerName", json_string("gpu-team"));
    set_pod(c, pod);
    json_decref(call(egpu_extender_bind, x, body, 200));
    free(body);
    assert_int_equal(f.bind_calls, 1);
    egpu_extender_free(x);
    egpu_sched_cache_free(c);
    pthread_mutex_destroy(&f.lock);
}

static void test_bind_refuses_ambiguity(void **state)
{
    struct egpu_sched_cache *c = egpu_sched_cache_new();
    struct fake_api f = {0};
    struct egpu_extender *x = new_extender(c, &f, EGPU_POLICY_SPREAD);
    const int core30[] = {30}, mem1[] = {1024}, mem2[] = {2048};
    json_t *out;
    char *body;

    (void)state;
    add_gpu_node(c, "n1", 2);
    set_pod(c, make_pod("ns", "a", NULL, 1, core30, mem1));
    set_pod(c, make_pod("ns", "b", NULL, 1, core30, mem2));
    body = bind_args("ns", "a", "n1");
    json_decref(call(egpu_extender_bind, x, body, 200));
    free(body);
    assert_int_equal(f.bind_calls, 1);
    /* b asks the same 30% with other memory while a has not started. */
    body = bind_args("ns", "b", "n1");
    out = call(egpu_extender_bind, x, body, 200);
    assert_non_null(strstr(json_string_value(json_object_get(out, "Error")), "same gpu-core"));
    json_decref(out);
    assert_int_equal(f.bind_calls, 1);
    /* Once the agent marks a allocated, b may go. */
    {
        json_t *pod = make_pod("ns", "a", "n1", 1, core30, mem1);

        annotate_json(pod, EGPU_ANN_ASSIGNED, f.last_value);
        annotate_json(pod, EGPU_ANN_ALLOCATED, "true");
        set_pod(c, pod);
    }
    out = call(egpu_extender_bind, x, body, 200);
    assert_string_equal(json_string_value(json_object_get(out, "Error")), "");
    json_decref(out);
    free(body);
    egpu_extender_free(x);
    egpu_sched_cache_free(c);
}

/* filter for one pod on n1 and n2: the nodes it passes ("n1", "n2",
 * "n1,n2" or ""), n1's FailedNodes reason in *why1 ("" when it passes) and
 * the node prioritize gives 10 ("" when none), all copies. */
static char *filter_two(struct egpu_extender *x, json_t *pod, char **why1, char **ten)
{
    const char *const nodes[] = {"n1", "n2"};
    char *body = tu_extender_args(pod, nodes, 2, false);
    json_t *out = call(egpu_extender_filter, x, body, 200),
           *pass = json_object_get(out, "NodeNames");
    const char *fail =
        json_string_value(json_object_get(json_object_get(out, "FailedNodes"), "n1"));
    char list[64] = "";

    *why1 = strdup(fail ? fail : "");
    for (size_t i = 0; i < json_array_size(pass); i++)
        snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s", i ? "," : "",
                 json_string_value(json_array_get(pass, i)));
    json_decref(out);
    out = call(egpu_extender_prioritize, x, body, 200);
    *ten = strdup("");
    for (size_t i = 0; i < json_array_size(out); i++) {
        json_t *e = json_array_get(out, i);

        if (json_integer_value(json_object_get(e, "Score")) == 10) {
            free(*ten);
            *ten = strdup(json_string_value(json_object_get(e, "Host")));
        }
    }
    json_decref(out);
    free(body);
    return strdup(list);
}

/* Filter steers around the node bind would refuse as
 * ambiguous. Pod a (30%, 1024 MiB) is placed on n1's card and not yet
 * allocated; b asks 30% with 2048 MiB. Binpack ranks n1 (the fuller node)
 * first, so before, filter passed n1 alone (n2 "fits this pod better")
 * and bind refused it. Now n1 fails with the reason, removed before the
 * best-score tie set is made, so n2 passes and prioritize gives it 10;
 * bind still refuses n1. Once a is allocated, n1 passes again (and is
 * best). A pod of another core size is not affected. */
static void test_filter_steers_around_ambiguity(void **state)
{
    struct egpu_sched_cache *c = egpu_sched_cache_new();
    struct fake_api f = {0};
    struct egpu_extender *x = new_extender(c, &f, EGPU_POLICY_BINPACK);
    const char *assigned_a = "{\"node\":\"n1\",\"containers\":[{\"name\":\"c0\",\"core\":30,"
                             "\"memory\":1024,\"gpus\":[\"GPU-n1-0\"]}]}";
    const int core30[] = {30}, core40[] = {40}, mem1[] = {1024}, mem2[] = {2048};
    char *pass, *why, *ten, *body;
    json_t *pod, *out;

    (void)state;
    add_gpu_node(c, "n1", 1);
    add_gpu_node(c, "n2", 1);
    pod = make_pod("ns", "a", "n1", 1, core30, mem1);
    annotate_json(pod, EGPU_ANN_ASSIGNED, assigned_a);
    set_pod(c, pod);
    set_pod(c, make_pod("ns", "b", NULL, 1, core30, mem2));

    pass = filter_two(x, make_pod("ns", "b", NULL, 1, core30, mem2), &why, &ten);
    assert_string_equal(pass, "n2");
    assert_string_equal(why, "pod ns/a placed on node n1 is not yet allocated and asks the same "
                             "gpu-core (30%) on other cards or memory; the kubelet's request "
                             "would be ambiguous until it is (retry shortly)");
    assert_string_equal(ten, "n2");
    free(pass);
    free(why);
    free(ten);
    /* bind keeps its refusal as the safety net. */
    body = bind_args("ns", "b", "n1");
    out = call(egpu_extender_bind, x, body, 200);
    assert_non_null(strstr(json_string_value(json_object_get(out, "Error")), "not yet allocated"));
    json_decref(out);
    free(body);
    assert_int_equal(f.bind_calls, 0);

    /* Another core size on the same card: nothing to confuse; n1 is best. */
    pass = filter_two(x, make_pod("ns", "d", NULL, 1, core40, mem2), &why, &ten);
    assert_string_equal(pass, "n1");
    assert_string_equal(why, "");
    assert_string_equal(ten, "n1");
    free(pass);
    free(why);
    free(ten);

    /* The agent marks a allocated: n1 passes again, and is the best. */
    pod = make_pod("ns", "a", "n1", 1, core30, mem1);
    annotate_json(pod, EGPU_ANN_ASSIGNED, assigned_a);
    annotate_json(pod, EGPU_ANN_ALLOCATED, "{\"containers\":{\"c0\":{}}}");
    set_pod(c, pod);
    pass = filter_two(x, make_pod("ns", "b", NULL, 1, core30, mem2), &why, &ten);
    assert_string_equal(pass, "n1");
    assert_string_equal(why, "");
    assert_string_equal(ten, "n1");
    free(pass);
    free(why);
    free(ten);

    /* A waits again when a new unallocated pod lands on n1; it goes away
     * with the pod (deleted): n1 passes. */
    pod = make_pod("ns", "e", "n1", 1, core30, mem1);
    annotate_json(pod, EGPU_ANN_ASSIGNED,
                  "{\"node\":\"n1\",\"containers\":[{\"name\":\"c0\",\"core\":30,"
                  "\"memory\":1024,\"gpus\":[\"GPU-n1-0\"]}]}");
    set_pod(c, pod);
    pass = filter_two(x, make_pod("ns", "b", NULL, 1, core30, mem2), &why, &ten);
    assert_string_equal(pass, "n2");
    assert_non_null(strstr(why, "pod ns/e placed on node n1"));
    free(pass);
    free(why);
    free(ten);
    assert_int_equal(egpu_sched_cache_pod_delete(c, "ns", "e"), 0);
    pass = filter_two(x, make_pod("ns", "b", NULL, 1, core30, mem2), &why, &ten);
    assert_string_equal(pass, "n1");
    free(pass);
    free(why);
    free(ten);

    /* Only n1, and it is ambiguous: no node passes, with the reason. */
    pod = make_pod("ns", "e", "n1", 1, core30, mem1);
    annotate_json(pod, EGPU_ANN_ASSIGNED,
                  "{\"node\":\"n1\",\"containers\":[{\"name\":\"c0\",\"core\":30,"
                  "\"memory\":1024,\"gpus\":[\"GPU-n1-0\"]}]}");
    set_pod(c, pod);
    {
        const char *const one[] = {"n1"};

        body = tu_extender_args(make_pod("ns", "b", NULL, 1, core30, mem2), one, 1, false);
        out = call(egpu_extender_filter, x, body, 200);
        assert_int_equal(json_array_size(json_object_get(out, "NodeNames")), 0);
        assert_non_null(
            strstr(json_string_value(json_object_get(json_object_get(out, "FailedNodes"), "n1")),
                   "retry shortly"));
        json_decref(out);
        free(body);
    }
    egpu_extender_free(x);
    egpu_sched_cache_free(c);
}

/* With more than 100 refusals, a pod that fits on a node gets 100 of them
 * worded (the rest left out of the reply), but a node steered around for a
 * pod not yet allocated always says so, wherever it comes in the request:
 * bench/live_replay and an operator look for that reason. 150 nodes
 * without GPUs come first, then n1 (pod a waits there) and n2. */
static void test_steered_node_always_listed(void **state)
{
    enum { NOGPU = 150 };
    struct egpu_sched_cache *c = egpu_sched_cache_new();
    struct fake_api f = {0};
    struct egpu_extender *x = new_extender(c, &f, EGPU_POLICY_BINPACK);
    const char *assigned_a = "{\"node\":\"n1\",\"containers\":[{\"name\":\"c0\",\"core\":30,"
                             "\"memory\":1024,\"gpus\":[\"GPU-n1-0\"]}]}";
    const int core30[] = {30}, mem1[] = {1024}, mem2[] = {2048};
    const char *names[NOGPU + 2];
    char name[NOGPU][16], *body;
    json_t *pod, *out, *failed;

    (void)state;
    for (int i = 0; i < NOGPU; i++) {
        snprintf(name[i], sizeof(name[i]), "cpu-%03d", i);
        names[i] = name[i];
        add_gpu_node(c, name[i], 0);
    }
    names[NOGPU] = "n1";
    names[NOGPU + 1] = "n2";
    add_gpu_node(c, "n1", 1);
    add_gpu_node(c, "n2", 1);
    pod = make_pod("ns", "a", "n1", 1, core30, mem1);
    annotate_json(pod, EGPU_ANN_ASSIGNED, assigned_a);
    set_pod(c, pod);
    body = tu_extender_args(make_pod("ns", "b", NULL, 1, core30, mem2), names, NOGPU + 2, false);
    out = call(egpu_extender_filter, x, body, 200);
    assert_int_equal(json_array_size(json_object_get(out, "NodeNames")), 1);
    assert_string_equal(json_string_value(json_array_get(json_object_get(out, "NodeNames"), 0)),
                        "n2");
    failed = json_object_get(out, "FailedNodes");
    assert_int_equal(json_object_size(failed), 101);
    assert_non_null(strstr(json_string_value(json_object_get(failed, "n1")), "not yet allocated"));
    assert_string_equal(json_string_value(json_object_get(failed, "cpu-099")), "node has no GPUs");
    assert_null(json_object_get(failed, "cpu-100"));
    json_decref(out);
    free(body);
    egpu_extender_free(x);
    egpu_sched_cache_free(c);
}

/* The per-pod annotations override the flags' policies. One card is 50%
 * used, the other free: binpack puts a 30% pod on the used card, a pod
 * annotated card-policy=spread goes to the free one. */
static void test_policy_override_by_annotation(void **state)
{
    struct egpu_sched_cache *c = egpu_sched_cache_new();
    struct fake_api f = {0};
    struct egpu_extender *x = new_extender(c, &f, EGPU_POLICY_BINPACK);
    const int core30[] = {30}, core50[] = {50}, none[] = {0};
    struct egpu_assigned a;
    struct egpu_error err = {0};
    json_t *pod;
    char *body;

    (void)state;
    add_gpu_node(c, "n1", 2);
    pod = make_pod("ns", "busy", "n1", 1, core50, none);
    annotate_json(pod, EGPU_ANN_ASSIGNED,
                  "{\"node\":\"n1\",\"containers\":[{\"name\":\"c0\",\"core\":50,"
                  "\"memory\":0,\"gpus\":[\"GPU-n1-0\"]}]}");
    annotate_json(pod, EGPU_ANN_ALLOCATED, "true");
    set_pod(c, pod);
    set_pod(c, make_pod("ns", "packed", NULL, 1, core30, none));
    pod = make_pod("ns", "spread", NULL, 1, core30, none);
    annotate_json(pod, EGPU_ANN_CARD_POLICY, "spread");
    set_pod(c, pod);
    body = bind_args("ns", "packed", "n1");
    json_decref(call(egpu_extender_bind, x, body, 200));
    free(body);
    assert_int_equal(egpu_assigned_decode(f.last_value, &a, &err), 0);
    assert_string_equal(a.uuids[0], "GPU-n1-0");
    /* Mark it allocated so the next bind is not held back as ambiguous. */
    pod = make_pod("ns", "packed", "n1", 1, core30, none);
    annotate_json(pod, EGPU_ANN_ASSIGNED, f.last_value);
    annotate_json(pod, EGPU_ANN_ALLOCATED, "true");
    set_pod(c, pod);
    body = bind_args("ns", "spread", "n1");
    json_decref(call(egpu_extender_bind, x, body, 200));
    free(body);
    assert_int_equal(egpu_assigned_decode(f.last_value, &a, &err), 0);
    assert_string_equal(a.uuids[0], "GPU-n1-1");
    egpu_extender_free(x);
    egpu_sched_cache_free(c);
}

/* FGD in the extender: its target workload comes from the cached pods.
 * Card 0 holds 70%; a 30% pod fills it exactly (no fragment left), which FGD
 * prefers over opening the free card, and prioritize ranks that node first. */
/* Pod ns/name of core percent placed on card 0 of node and allocated. */
static void put_allocated(struct egpu_sched_cache *c, const char *name, const char *node, int core)
{
    const int cores[] = {core}, none[] = {0};
    json_t *pod = make_pod("ns", name, node, 1, cores, none);
    char ann[256];

    snprintf(ann, sizeof(ann),
             "{\"node\":\"%s\",\"containers\":[{\"name\":\"c0\",\"core\":%d,\"memory\":0,"
             "\"gpus\":[\"GPU-%s-0\"]}]}",
             node, core, node);
    annotate_json(pod, EGPU_ANN_ASSIGNED, ann);
    annotate_json(pod, EGPU_ANN_ALLOCATED, "true");
    set_pod(c, pod);
}

static void test_fgd_with_live_workload(void **state)
{
    struct egpu_sched_cache *c = egpu_sched_cache_new();
    struct fake_api f = {0};
    struct egpu_extender *x = new_extender(c, &f, EGPU_POLICY_FGD);
    const char *const nodes[] = {"n1", "n2"};
    const int core70[] = {70}, core30[] = {30}, none[] = {0};
    struct egpu_assigned a;
    struct egpu_error err = {0};
    json_t *out;
    char *body;

    (void)state;
    add_gpu_node(c, "n1", 2);
    add_gpu_node(c, "n2", 2);
    put_allocated(c, "big", "n1", 70);
    for (int i = 0; i < 4; i++) {
        char name[16];

        snprintf(name, sizeof(name), "w%d", i);
        set_pod(c, make_pod("ns", name, NULL, 1, i % 2 ? core70 : core30, none));
    }
    body = tu_extender_args(make_pod("ns", "w0", NULL, 1, core30, none), nodes, 2, false);
    out = call(egpu_extender_prioritize, x, body, 200);
    assert_int_equal(json_array_size(out), 1); /* n2 scores 0: left out */
    assert_string_equal(json_string_value(json_object_get(json_array_get(out, 0), "Host")), "n1");
    assert_int_equal(json_integer_value(json_object_get(json_array_get(out, 0), "Score")), 10);
    json_decref(out);
    free(body);
    body = bind_args("ns", "w0", "n1");
    json_decref(call(egpu_extender_bind, x, body, 200));
    free(body);
    assert_int_equal(egpu_assigned_decode(f.last_value, &a, &err), 0);
    assert_string_equal(a.uuids[0], "GPU-n1-0");
    assert_int_equal(card_used(c, "n1", 0), 1000);
    egpu_extender_free(x);
    egpu_sched_cache_free(c);
}

/* Pending pods ns/<prefix>0..n-1 of core percent. */
static void put_pending(struct egpu_sched_cache *c, const char *prefix, int n, int core)
{
    const int cores[] = {core}, none[] = {0};

    for (int i = 0; i < n; i++) {
        char name[32];

        snprintf(name, sizeof(name), "%s%d", prefix, i);
        set_pod(c, make_pod("ns", name, NULL, 1, cores, none));
    }
}

/* The learned target workload is rebuilt every 64 new pods; it replaces
 * the one in use (dropping the placers' memos) only when the mix moved by
 * 1% or more. 64 more pods of the same 30% shape: kept; 64 of 70%: replaced. */
static void test_live_workload_kept_until_mix_moves(void **state)
{
    struct egpu_sched_cache *c = egpu_sched_cache_new();
    struct fake_api f = {0};
    struct egpu_extender *x = new_extender(c, &f, EGPU_POLICY_FGD);
    const char *const nodes[] = {"n1"};
    const int core30[] = {30}, none[] = {0};
    uint64_t kept, replaced;
    char *body = NULL;

    (void)state;
    add_gpu_node(c, "n1", 2);
    put_pending(c, "a", 64, 30);
    body = tu_extender_args(make_pod("ns", "q", NULL, 1, core30, none), nodes, 1, false);
    json_decref(call(egpu_extender_prioritize, x, body, 200));
    egpu_extender_workload_rebuilds(x, &kept, &replaced);
    assert_int_equal(kept, 0);
    assert_int_equal(replaced, 1);

    put_pending(c, "b", 63, 30); /* one short of a rebuild */
    json_decref(call(egpu_extender_prioritize, x, body, 200));
    egpu_extender_workload_rebuilds(x, &kept, &replaced);
    assert_int_equal(kept + replaced, 1);

    put_pending(c, "c", 1, 30);
    json_decref(call(egpu_extender_prioritize, x, body, 200));
    egpu_extender_workload_rebuilds(x, &kept, &replaced);
    assert_int_equal(kept, 1);
    assert_int_equal(replaced, 1);

    put_pending(c, "d", 64, 70);
    json_decref(call(egpu_extender_prioritize, x, body, 200));
    egpu_extender_workload_rebuilds(x, &kept, &replaced);
    assert_int_equal(kept, 1);
    assert_int_equal(replaced, 2);
    free(body);
    egpu_extender_free(x);
    egpu_sched_cache_free(c);
}

/* Run x's memo warm until it finds nothing to do, budget slots a step;
 * the slots it looked at in all. */
static size_t warm_all(struct egpu_extender *x, uint32_t budget)
{
    size_t all = 0, looked;

    while ((looked = egpu_extender_warm(x, budget)) > 0) {
        assert_true(looked <= budget);
        all += looked;
    }
    return all;
}

/* The memo warm judges ahead the shapes of the cached pods asked at least
 * twice (3 pods of 30%, 2 of 50%; the one 70% pod is not warmed) on every
 * node: 2 shapes x 5 nodes = 10 verdicts in one pass, none before the
 * cache is synced, none again until the period has passed, and then only
 * what changed (a sixth node: 2 verdicts). A filter after it answers as an
 * extender that never warmed. */
static void test_memo_warm_judges_cached_shapes(void **state)
{
    struct egpu_sched_cache *c = egpu_sched_cache_new();
    struct fake_api f = {.unsynced = true}, g = {0};
    struct egpu_extender_ops ops = {
        .data = &f, .synced = fake_synced, .annotate = fake_annotate, .bind = fake_bind};
    struct egpu_extender_config cfg = {.node_policy = EGPU_POLICY_FGD,
                                       .card_policy = EGPU_POLICY_FGD,
                                       .seed = 1,
                                       .warm_period_ms = 1};
    struct egpu_error err = {0};
    struct egpu_extender *x, *y = new_extender(c, &g, EGPU_POLICY_FGD);
    const char *const nodes[] = {"w0", "w1", "w2", "w3", "w4"};
    const int core30[] = {30}, core70[] = {70}, none[] = {0};
    struct timespec ms2 = {0, 2000000};
    uint64_t passes, verdicts;
    char *body, *a, *b;
    json_t *ra, *rb;

    (void)state;
    pthread_mutex_init(&f.lock, NULL);
    x = egpu_extender_new(&cfg, c, &ops, &err);
    assert_non_null(x);
    for (int i = 0; i < 5; i++)
        add_gpu_node(c, nodes[i], 4);
    put_pending(c, "a", 3, 30);
    put_pending(c, "b", 2, 50);
    set_pod(c, make_pod("ns", "c0", NULL, 1, core70, none));
    assert_int_equal(egpu_extender_warm(x, 64), 0); /* not synced */
    f.unsynced = false;
    assert_int_equal(warm_all(x, 3), 10);
    egpu_extender_warm_counts(x, &passes, &verdicts);
    assert_int_equal(passes, 1);
    assert_int_equal(verdicts, 10);
    nanosleep(&ms2, NULL);
    assert_int_equal(warm_all(x, 64), 10); /* the next pass: all memoised */
    egpu_extender_warm_counts(x, &passes, &verdicts);
    assert_int_equal(passes, 2);
    assert_int_equal(verdicts, 10);
    add_gpu_node(c, "w5", 4);
    nanosleep(&ms2, NULL);
    assert_int_equal(warm_all(x, 64), 12);
    egpu_extender_warm_counts(x, &passes, &verdicts);
    assert_int_equal(passes, 3);
    assert_int_equal(verdicts, 12);

    body = tu_extender_args(make_pod("ns", "q", NULL, 1, core30, none), nodes, 5, false);
    ra = call(egpu_extender_filter, x, body, 200);
    rb = call(egpu_extender_filter, y, body, 200);
    a = json_dumps(ra, JSON_COMPACT | JSON_SORT_KEYS);
    b = json_dumps(rb, JSON_COMPACT | JSON_SORT_KEYS);
    assert_string_equal(a, b);
    free(a);
    free(b);
    json_decref(ra);
    json_decref(rb);
    free(body);
    egpu_extender_free(x);
    egpu_extender_free(y);
    egpu_sched_cache_free(c);
}

/* The warm's thread starts, finds the pass and stops. */
static void test_warmer_thread(void **state)
{
    struct egpu_sched_cache *c = egpu_sched_cache_new();
    struct fake_api f = {0};
    struct egpu_extender *x = new_extender(c, &f, EGPU_POLICY_BINPACK);
    struct egpu_warmer *w = NULL;
    struct egpu_error err = {0};
    struct timespec ms5 = {0, 5000000};
    uint64_t passes = 0, verdicts = 0;

    (void)state;
    add_gpu_node(c, "t0", 2);
    put_pending(c, "a", 2, 30);
    assert_int_equal(egpu_warmer_start(x, &w, &err), 0);
    for (int i = 0; i < 2000 && passes == 0; i++) {
        nanosleep(&ms5, NULL);
        egpu_extender_warm_counts(x, &passes, &verdicts);
    }
    assert_int_equal(passes, 1);
    assert_int_equal(verdicts, 1);
    egpu_warmer_stop(w);
    egpu_warmer_stop(NULL);
    egpu_extender_free(x);
    egpu_sched_cache_free(c);
}

/* 1,003 empty one-card nodes tie for binpack's best score: filter passes
 * 1,000 of them (TIED_PASSED), the replay's choice among them (the node
 * prioritize scores 10 over all 1,003), and fails the 3 others saying so. */
static void test_filter_passes_at_most_1000_tied(void **state)
{
    enum { N = 1003 };
    struct egpu_sched_cache *c = egpu_sched_cache_new();
    struct fake_api f = {0};
    struct egpu_extender *x = new_extender(c, &f, EGPU_POLICY_BINPACK);
    static char names[N][16];
    const char *nodes[N];
    const int core30[] = {30}, none[] = {0};
    const char *best = NULL, *key;
    json_t *out, *prio, *e, *failed, *why;
    size_t i, found = 0;
    char *body;

    (void)state;
    for (i = 0; i < N; i++) {
        snprintf(names[i], sizeof(names[i]), "t%04zu", i);
        nodes[i] = names[i];
        add_gpu_node(c, names[i], 1);
    }
    body = tu_extender_args(make_pod("ns", "q", NULL, 1, core30, none), nodes, N, false);
    prio = call(egpu_extender_prioritize, x, body, 200);
    json_array_foreach(prio, i, e)
    {
        if (json_integer_value(json_object_get(e, "Score")) == 10) {
            assert_null(best);
            best = json_string_value(json_object_get(e, "Host"));
        }
    }
    assert_non_null(best);
    out = call(egpu_extender_filter, x, body, 200);
    assert_int_equal(json_array_size(json_object_get(out, "NodeNames")), 1000);
    json_array_foreach(json_object_get(out, "NodeNames"), i, e) found +=
        strcmp(json_string_value(e), best) == 0;
    assert_int_equal(found, 1); /* passed */
    failed = json_object_get(out, "FailedNodes");
    assert_int_equal(json_object_size(failed), N - 1000);
    json_object_foreach(failed, key, why)
    {
        assert_non_null(strstr(json_string_value(why), "fits this pod as well"));
        assert_non_null(strstr(json_string_value(why), "filter passes at most 1000 of the nodes"));
    }
    json_decref(out);
    json_decref(prio);
    free(body);
    egpu_extender_free(x);
    egpu_sched_cache_free(c);
}

/* A pod of this scheduler asking cpu (a quantity) and no GPU. */
static json_t *cpu_pod(const char *name, const char *cpu, const char *node)
{
    const int none[] = {0};
    json_t *pod = make_pod("ns", name, node, 1, none, none);

    json_object_set_new(
        json_object_get(
            json_object_get(
                json_array_get(json_object_get(json_object_get(pod, "spec"), "containers"), 0),
                "resources"),
            "requests"),
        "cpu", json_string(cpu));
    return pod;
}

static int64_t node_cpu_used(struct egpu_sched_cache *c, const char *node)
{
    struct egpu_cluster *cl = egpu_sched_cache_lock(c);
    int64_t v = egpu_cluster_node(cl, node)->used_cpu_milli;

    egpu_sched_cache_unlock(c);
    return v;
}

/* With --pods-without-gpu place a pod that asks no GPU
 * is the node policy's to place, as egpu-sim places it: "small" (4 CPUs)
 * fails filter with the CPU it lacks, one node gets 10, bind binds it with
 * no elasticgpu.io/assigned, the cache counts its CPU at once and it never
 * waits for an allocated mark; a node too small is refused at bind. With
 * pass (the default) every node passes, none scores and bind refuses. */
static void test_pods_without_gpu_placed(void **state)
{
    const char *const nodes[] = {"small", "big1", "big2"};
    struct egpu_extender_ops ops;
    struct egpu_extender_config cfg = {.node_policy = EGPU_POLICY_BINPACK,
                                       .card_policy = EGPU_POLICY_BINPACK,
                                       .seed = 1,
                                       .place_cpu_pods = true};
    struct egpu_sched_cache *c = egpu_sched_cache_new();
    struct egpu_sched_cache_stats st;
    struct egpu_error err = {0};
    struct fake_api f = {0};
    struct egpu_extender *x, *pass;
    uint64_t counts[EGPU_BIND_RESULTS];
    json_t *out, *n = make_node("small", "4", "256Gi");
    const char *why;
    char *ten = NULL;
    char *body;

    (void)state;
    assert_int_equal(egpu_sched_cache_node_set(c, n, &err), 0);
    json_decref(n);
    add_gpu_node(c, "big1", 1);
    add_gpu_node(c, "big2", 1);
    set_pod(c, cpu_pod("bound", "50", "big1")); /* big1: 14 CPUs left */
    pass = new_extender(c, &f, EGPU_POLICY_BINPACK);
    ops = (struct egpu_extender_ops){
        .data = &f, .synced = fake_synced, .annotate = fake_annotate, .bind = fake_bind};
    x = egpu_extender_new(&cfg, c, &ops, &err);
    assert_non_null(x);
    set_pod(c, cpu_pod("cpu8", "8", NULL));
    body = tu_extender_args(cpu_pod("cpu8", "8", NULL), nodes, 3, false);
    /* pass: every node passes, nothing scores, bind refuses. */
    out = call(egpu_extender_filter, pass, body, 200);
    assert_int_equal(json_array_size(json_object_get(out, "NodeNames")), 3);
    json_decref(out);
    out = call(egpu_extender_prioritize, pass, body, 200);
    assert_int_equal(json_array_size(out), 0);
    json_decref(out);
    /* place: small fails naming the CPU, one of the others gets 10. */
    out = call(egpu_extender_filter, x, body, 200);
    why = json_string_value(json_object_get(json_object_get(out, "FailedNodes"), "small"));
    assert_non_null(why);
    assert_non_null(strstr(why, "cpu"));
    assert_true(json_array_size(json_object_get(out, "NodeNames")) >= 1);
    json_decref(out);
    out = call(egpu_extender_prioritize, x, body, 200);
    for (size_t i = 0; i < json_array_size(out); i++)
        if (json_integer_value(json_object_get(json_array_get(out, i), "Score")) == 10)
            ten = strdup(json_string_value(json_object_get(json_array_get(out, i), "Host")));
    assert_non_null(ten);
    assert_true(strcmp(ten, "big1") == 0 || strcmp(ten, "big2") == 0);
    json_decref(out);
    free(body);
    body = bind_args("ns", "cpu8", ten);
    json_decref(call(egpu_extender_bind, pass, body, 200)); /* pass: not ours */
    assert_int_equal(f.bind_calls, 0);
    json_decref(call(egpu_extender_bind, x, body, 200));
    assert_int_equal(f.bind_calls, 1);
    assert_int_equal(f.annotate_calls, 0); /* no cards to name */
    assert_int_equal(node_cpu_used(c, ten), strcmp(ten, "big1") == 0 ? 58000 : 8000);
    egpu_sched_cache_stats(c, &st);
    assert_int_equal(st.waiting, 0);
    free(body);
    /* One too big for small is refused at bind, naming the CPU. */
    set_pod(c, cpu_pod("cpu6", "6", NULL));
    body = bind_args("ns", "cpu6", "small");
    out = call(egpu_extender_bind, x, body, 200);
    assert_non_null(strstr(json_string_value(json_object_get(out, "Error")), "cpu"));
    json_decref(out);
    free(body);
    egpu_extender_bind_counts(x, counts);
    assert_int_equal(counts[EGPU_BIND_OK], 1);
    assert_int_equal(counts[EGPU_BIND_NO_FIT], 1);
    assert_int_equal(node_cpu_used(c, "small"), 0);
    /* The watch then shows it bound (nodeName, no annotation): counted once. */
    set_pod(c, cpu_pod("cpu8", "8", ten));
    assert_int_equal(node_cpu_used(c, ten), strcmp(ten, "big1") == 0 ? 58000 : 8000);
    egpu_sched_cache_stats(c, &st);
    assert_int_equal(st.waiting, 0);
    free(ten);
    egpu_extender_free(x);
    egpu_extender_free(pass);
    egpu_sched_cache_free(c);
    pthread_mutex_destroy(&f.lock);
}

/* The node FGD gives 10 for a 50% pod between "a" (its card 30% used) and
 * "b" (a free card), with target (NULL: learned from the cached pods). */
static char *fgd_choice(const struct egpu_api_workload *target)
{
    const char *const nodes[] = {"a", "b"};
    const int core50[] = {50}, core100[] = {100}, none[] = {0};
    struct egpu_extender_config cfg = {.node_policy = EGPU_POLICY_FGD,
                                       .card_policy = EGPU_POLICY_FGD,
                                       .seed = 1,
                                       .target = target};
    struct egpu_extender_ops ops = {.synced = fake_synced, .data = NULL};
    struct egpu_sched_cache *c = egpu_sched_cache_new();
    struct egpu_error err = {0};
    struct fake_api f = {0};
    struct egpu_extender *x;
    char *ten = NULL, *body;
    json_t *out;

    ops.data = &f;
    add_gpu_node(c, "a", 1);
    add_gpu_node(c, "b", 1);
    put_allocated(c, "used", "a", 30);
    for (int i = 0; i < 8; i++) { /* what a learned workload sees: whole cards */
        char name[16];

        snprintf(name, sizeof(name), "whole%d", i);
        set_pod(c, make_pod("ns", name, NULL, 1, core100, none));
    }
    x = egpu_extender_new(&cfg, c, &ops, &err);
    assert_non_null(x);
    body = tu_extender_args(make_pod("ns", "half", NULL, 1, core50, none), nodes, 2, false);
    out = call(egpu_extender_prioritize, x, body, 200);
    for (size_t i = 0; i < json_array_size(out); i++)
        if (json_integer_value(json_object_get(json_array_get(out, i), "Score")) == 10)
            ten = strdup(json_string_value(json_object_get(json_array_get(out, i), "Host")));
    assert_non_null(ten);
    json_decref(out);
    free(body);
    egpu_extender_free(x);
    egpu_sched_cache_free(c);
    return ten;
}

/* --target-workload: FGD measures fragmentation against the operator's
 * typical pods, not the cached ones. A 50% pod beside a card 30% used:
 * against whole cards (learned here from eight pending 100% pods, or
 * pinned) it goes onto the used card, keeping b whole; against 30% pods
 * it goes onto b, since 20% left on a's card would fit none of them. A
 * typical pod's model names are resolved in the cluster's model table. */
static void test_target_workload_pins_fgd(void **state)
{
    struct egpu_api_typical_pod small[] = {
        {.gpu_milli = 300, .gpus = 1, .weight = 1, .models = "A100|H100"}};
    struct egpu_api_typical_pod whole[] = {{.gpu_milli = 1000, .gpus = 1, .weight = 1}};
    struct egpu_api_workload ws = {.n = 1, .pods = small}, ww = {.n = 1, .pods = whole};
    const long live = egpu_alloc_live();
    char *learned, *pinned_small, *pinned_whole;

    (void)state;
    learned = fgd_choice(NULL);
    pinned_whole = fgd_choice(&ww);
    pinned_small = fgd_choice(&ws);
    assert_string_equal(learned, "a");
    assert_string_equal(pinned_whole, "a");
    assert_string_equal(pinned_small, "b");
    free(learned);
    free(pinned_whole);
    free(pinned_small);
    assert_int_equal(egpu_alloc_live(), live);
}

struct racer {
    struct egpu_extender *x;
    int index;
    int ok;
};

static void *race_bind(void *arg)
{
    struct racer *r = arg;
    char name[16], *body;
    struct egpu_buf reply;
    json_t *out;

    snprintf(name, sizeof(name), "r%d", r->index);
    body = bind_args("ns", name, "n1");
    egpu_buf_init(&reply, 1 << 16);
    if (egpu_extender_bind(r->x, body, strlen(body), &reply) == 200) {
        out = json_loads(egpu_buf_str(&reply), 0, NULL);
        r->ok = out && strcmp(json_string_value(json_object_get(out, "Error")), "") == 0;
        json_decref(out);
    }
    egpu_buf_free(&reply);
    free(body);
    return NULL;
}

static void test_concurrent_binds_never_overcommit(void **state)
{
    struct egpu_sched_cache *c = egpu_sched_cache_new();
    struct fake_api f = {0};
    struct egpu_extender *x = new_extender(c, &f, EGPU_POLICY_BINPACK);
    struct racer r[16];
    pthread_t t[16];
    const int core[] = {40}, mem[] = {0};
    int ok = 0;

    (void)state;
    /* Two cards: at most 2 pods of 40% per card fit, 4 in all. Containers
     * ask the same size with the same (zero) memory, but the cards differ, so
     * binds after the first on each card would be ambiguous until allocated:
     * the point here is only that no card ever passes 100%. */
    add_gpu_node(c, "n1", 2);
    for (int i = 0; i < 16; i++) {
        char name[16];

        snprintf(name, sizeof(name), "r%d", i);
        set_pod(c, make_pod("ns", name, NULL, 1, core, mem));
        r[i] = (struct racer){.x = x, .index = i};
    }
    for (int i = 0; i < 16; i++)
        assert_int_equal(pthread_create(&t[i], NULL, race_bind, &r[i]), 0);
    for (int i = 0; i < 16; i++) {
        pthread_join(t[i], NULL);
        ok += r[i].ok;
    }
    assert_true(ok >= 1 && ok <= 4);
    assert_int_equal(f.bind_calls, ok);
    assert_true(card_used(c, "n1", 0) <= 1000);
    assert_true(card_used(c, "n1", 1) <= 1000);
    assert_int_equal(card_used(c, "n1", 0) + card_used(c, "n1", 1), 400 * ok);
    egpu_extender_free(x);
    egpu_sched_cache_free(c);
}

/* ------------------------------------------------------------------------ */
/* What the informers keep (api.c's keep lists, egpu_kube_keep)             */

/* obj as the informer of kind i stores it (reference stolen from obj). */
static json_t *as_stored(int i, json_t *obj)
{
    json_t *t = egpu_kube_keep(obj, egpu__sched_api_keep(i));

    assert_non_null(t);
    json_decref(obj);
    return t;
}

/* A pod as kube-apiserver returns it, with what our parsers read among what
 * they do not (managedFields, volumes, statuses, images, env, labels). */
static const char *const rich_pod =
    "{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"rich\",\"namespace\":\"t\","
    "\"uid\":\"u-1\",\"resourceVersion\":\"42\",\"creationTimestamp\":\"2026-01-01T00:00:00Z\","
    "\"deletionTimestamp\":\"2026-01-01T00:01:00Z\",\"labels\":{\"app\":\"x\"},"
    "\"annotations\":{\"elasticgpu.io/allocated\":\"true\",\"elasticgpu.io/node-policy\":"
    "\"spread\",\"elasticgpu.io/assigned\":\"main=0:40:4096\"},"
    "\"ownerReferences\":[{\"kind\":\"ReplicaSet\",\"name\":\"rs\"}],"
    "\"managedFields\":[{\"manager\":\"kubectl\",\"fieldsV1\":{\"f:spec\":{}}}]},"
    "\"spec\":{\"nodeName\":\"n1\",\"schedulerName\":\"elastic-gpu-scheduler\","
    "\"overhead\":{\"cpu\":\"250m\",\"memory\":\"120Mi\"},\"volumes\":[{\"name\":\"tok\"}],"
    "\"initContainers\":[{\"name\":\"init\",\"image\":\"busybox\",\"resources\":{\"requests\":"
    "{\"cpu\":\"2\",\"memory\":\"1Gi\"}}}],"
    "\"containers\":[{\"name\":\"main\",\"image\":\"cuda\",\"env\":[{\"name\":\"A\"}],"
    "\"resources\":{\"requests\":{\"cpu\":\"1\",\"memory\":\"2Gi\",\"elasticgpu.io/gpu-core\":"
    "\"40\",\"elasticgpu.io/gpu-memory\":\"4096\"},\"limits\":{\"elasticgpu.io/gpu-core\":\"40\","
    "\"elasticgpu.io/gpu-memory\":\"4096\"}}},{\"name\":\"side\",\"resources\":{}}],"
    "\"resourceClaims\":[{\"name\":\"g\",\"resourceClaimName\":\"c\"}]},"
    "\"status\":{\"phase\":\"Running\",\"conditions\":[{\"type\":\"Ready\"}],"
    "\"containerStatuses\":[{\"name\":\"main\",\"ready\":true}]}}";

/* Equal strings, either of which may be NULL. */
static bool opt_same(const char *a, const char *b)
{
    return a == NULL || b == NULL ? a == b : strcmp(a, b) == 0;
}

/* Do two parsed pods say the same? Their owned parts are compared by
 * content, the rest byte for byte. */
static bool pod_same(const struct egpu_sched_pod *a, const struct egpu_sched_pod *b)
{
    struct egpu_sched_pod x = *a, y = *b;

    if (!opt_same(a->ns, b->ns) || !opt_same(a->name, b->name) || !opt_same(a->uid, b->uid) ||
        !opt_same(a->node, b->node) || !opt_same(a->gpu_model, b->gpu_model) ||
        !opt_same(a->scheduler_name, b->scheduler_name) ||
        !opt_same(a->assigned_error, b->assigned_error) ||
        !opt_same(a->claims_error, b->claims_error) || a->has_assigned != b->has_assigned ||
        a->nclaims != b->nclaims)
        return false;
    if (!egpu_sched_assigned_same(a->assigned, b->assigned))
        return false;
    if (a->nclaims > 0 && memcmp(a->claims, b->claims, a->nclaims * sizeof(*a->claims)) != 0)
        return false;
    for (uint32_t i = 0; i < a->req.ncontainers && i < b->req.ncontainers; i++) {
        if (!opt_same(egpu_sched_pod_container(a, i), egpu_sched_pod_container(b, i)))
            return false;
    }
    x.containers = y.containers = NULL;
    x.ns = x.name = x.uid = x.node = y.ns = y.name = y.uid = y.node = NULL;
    x.gpu_model = x.scheduler_name = y.gpu_model = y.scheduler_name = NULL;
    x.names = y.names = x.assigned_error = y.assigned_error = NULL;
    x.claims_error = y.claims_error = NULL;
    x.assigned = y.assigned = NULL;
    x.claims = y.claims = NULL;
    return memcmp(&x, &y, sizeof(x)) == 0;
}

/* Every pod the scheduler's parser reads the same whether stored whole or as
 * its informer keeps it: same code, same message, same record. The
 * malformed ones too (the transform keeps a malformed container whole). */
static void test_informer_keep_parses_the_same(void **state)
{
    static const char *const patches[] = {
        "{}",
        "{\"status\":{\"phase\":\"Succeeded\"}}",
        "{\"metadata\":{\"annotations\":{\"elasticgpu.io/assigned\":\"garbage\"}}}",
        "{\"metadata\":{\"annotations\":\"not an object\"}}",
        "{\"metadata\":{\"annotations\":{\"elasticgpu.io/claims\":\"{bad\"}}}",
        "{\"spec\":{\"containers\":\"not an array\"}}",
        "{\"spec\":{\"containers\":[\"not an object\"]}}",
        "{\"spec\":{\"containers\":[{\"name\":\"c\",\"resources\":\"not an object\"}]}}",
        "{\"spec\":{\"containers\":[{\"resources\":{}}]}}",
        "{\"spec\":{\"initContainers\":[{\"name\":\"i\",\"resources\":{\"requests\":"
        "{\"elasticgpu.io/gpu-core\":\"10\"}}}]}}",
        "{\"spec\":{\"overhead\":{\"cpu\":\"lots\"}}}",
        "{\"spec\":{\"nodeName\":7,\"schedulerName\":null}}",
        "{\"spec\":\"not an object\"}",
        "{\"metadata\":{\"namespace\":null,\"deletionTimestamp\":null}}",
    };
    const int core[] = {30, 0}, mem[] = {2048, 0};

    (void)state;
    for (size_t i = 0; i <= sizeof(patches) / sizeof(patches[0]); i++) {
        struct egpu_sched_pod *a = calloc(1, sizeof(*a)), *b = calloc(1, sizeof(*b));
        struct egpu_error ea = {0}, eb = {0};
        json_t *pod, *slim;
        int ra, rb;

        if (i < sizeof(patches) / sizeof(patches[0])) {
            json_t *patch = json_loads(patches[i], 0, NULL);

            pod = json_loads(rich_pod, 0, NULL);
            assert_non_null(pod);
            assert_non_null(patch);
            assert_int_equal(json_object_update_recursive(pod, patch), 0);
            json_decref(patch);
        } else {
            pod = make_pod("ns", "plain", NULL, 2, core, mem);
        }
        slim = egpu_kube_keep(pod, egpu__sched_api_keep(2));
        assert_non_null(slim);
        assert_string_equal(egpu__sched_api_kind(2), "Pod");
        assert_null(json_object_get(json_object_get(slim, "metadata"), "managedFields"));
        ra = egpu_sched_pod_parse(pod, a, &ea);
        rb = egpu_sched_pod_parse(slim, b, &eb);
        if (ra != rb || strcmp(ea.msg, eb.msg) != 0 || (ra == 0 && !pod_same(a, b)))
            fail_msg("pod %zu: whole %d \"%s\", kept %d \"%s\"", i, ra, ea.msg, rb, eb.msg);
        json_decref(slim);
        json_decref(pod);
        if (ra == 0)
            egpu_sched_pod_clear(a);
        if (rb == 0)
            egpu_sched_pod_clear(b);
        free(a);
        free(b);
    }
}

/* Two caches, one fed whole apiserver-shaped Nodes, GPU objects and pods,
 * the other what the informers keep of them: filter and prioritize answer
 * byte for byte the same. */
static void test_informer_keep_decides_the_same(void **state)
{
    struct egpu_sched_cache *c[2] = {egpu_sched_cache_new(), egpu_sched_cache_new()};
    struct fake_api f[2] = {0};
    struct egpu_extender *x[2];
    const char *const nodes[] = {"n1", "n2", "n3"};
    const int core[] = {60}, mem[] = {8192}, small[] = {30}, smem[] = {1024};
    struct egpu_error err = {0};

    (void)state;
    for (int k = 0; k < 2; k++) {
        x[k] = new_extender(c[k], &f[k], EGPU_POLICY_BINPACK);
        for (int n = 0; n < 3; n++) {
            json_t *node = make_node(nodes[n], n == 2 ? "2" : "64", "256Gi");

            json_object_set_new(json_object_get(node, "metadata"), "labels",
                                json_pack("{s:s}", "zone", n ? "b" : "a"));
            json_object_set_new(json_object_get(node, "metadata"), "managedFields",
                                json_pack("[{s:s}]", "manager", "kubelet"));
            json_object_set_new(json_object_get(node, "status"), "conditions",
                                json_pack("[{s:s}]", "type", "Ready"));
            if (k == 1)
                node = as_stored(0, node);
            assert_int_equal(egpu_sched_cache_node_set(c[k], node, &err), 0);
            json_decref(node);
            for (int g = 0; g < 2; g++) {
                json_t *gpu = make_gpu(nodes[n], g, "A100", 40960);

                json_object_set_new(json_object_get(gpu, "status"), "used",
                                    json_pack("{s:i,s:i,s:s}", "utilization", 10 * g, "memory",
                                              1024, "updateTime", "2026-01-01T00:00:00Z"));
                json_object_set_new(json_object_get(gpu, "status"), "allocated",
                                    json_pack("[{s:s}]", "pod", "x"));
                if (n == 1 && g == 1)
                    json_object_set_new(json_object_get(gpu, "status"), "health",
                                        json_string("Unhealthy"));
                if (k == 1)
                    gpu = as_stored(1, gpu);
                assert_int_equal(egpu_sched_cache_gpu_set(c[k], gpu, &err), 0);
                json_decref(gpu);
            }
        }
        for (int p = 0; p < 3; p++) {
            char name[16];
            json_t *pod;

            snprintf(name, sizeof(name), "run-%d", p);
            pod = make_pod("ns", name, nodes[p % 2], 1, small, smem);
            annotate_json(pod, EGPU_ANN_ASSIGNED, "c0=0:30:1024");
            json_object_set_new(json_object_get(pod, "metadata"), "managedFields",
                                json_pack("[{s:s}]", "manager", "kube-scheduler"));
            set_pod(c[k], k == 1 ? as_stored(2, pod) : pod);
        }
    }
    for (int q = 0; q < 2; q++) {
        char *body = tu_extender_args(
            make_pod("ns", "new", NULL, 1, q ? small : core, q ? smem : mem), nodes, 3, q == 1);
        char *text[2][2];

        for (int k = 0; k < 2; k++) {
            json_t *fo = call(egpu_extender_filter, x[k], body, 200);
            json_t *po = call(egpu_extender_prioritize, x[k], body, 200);

            text[k][0] = json_dumps(fo, JSON_COMPACT | JSON_PRESERVE_ORDER);
            text[k][1] = json_dumps(po, JSON_COMPACT | JSON_PRESERVE_ORDER);
            json_decref(fo);
            json_decref(po);
        }
        assert_string_equal(text[0][0], text[1][0]);
        assert_string_equal(text[0][1], text[1][1]);
        /* Not trivially equal: n2 passes (n1 has a pod on the card it
         * would share, n3 has too little CPU), every node is scored. */
        assert_non_null(strstr(text[0][1], "{\"Host\":\"n2\",\"Score\":10}"));
        assert_non_null(strstr(text[0][0], "\"n1\":\"node n2 fits this pod better"));
        for (int k = 0; k < 2; k++) {
            free(text[k][0]);
            free(text[k][1]);
        }
        free(body);
    }
    for (int k = 0; k < 2; k++) {
        egpu_extender_free(x[k]);
        egpu_sched_cache_free(c[k]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_assigned_round_trip),
        cmocka_unit_test(test_pod_parse),
        cmocka_unit_test(test_informer_keep_parses_the_same),
        cmocka_unit_test(test_informer_keep_decides_the_same),
        cmocka_unit_test(test_node_gpus_grow_and_shrink),
        cmocka_unit_test(test_wire_fixture_pod),
        cmocka_unit_test(test_cache_counts_and_rebuilds),
        cmocka_unit_test(test_sync_logs_only_what_stays_unresolved),
        cmocka_unit_test(test_cache_keeps_recorded_assignment),
        cmocka_unit_test(test_cache_duplicate_uuid_drops_only_the_duplicate),
        cmocka_unit_test(test_pod_parse_nul),
        cmocka_unit_test(test_filter_and_prioritize),
        cmocka_unit_test(test_unsynced_refusals),
        cmocka_unit_test(test_unhealthy_cards_take_no_new_pod),
        cmocka_unit_test(test_load_aware_breaks_ties),
        cmocka_unit_test(test_filter_follows_node_set),
        cmocka_unit_test(test_bind_and_rollback),
        cmocka_unit_test(test_bind_refuses_foreign_and_gpu_less_pods),
        cmocka_unit_test(test_bind_refuses_ambiguity),
        cmocka_unit_test(test_filter_steers_around_ambiguity),
        cmocka_unit_test(test_steered_node_always_listed),
        cmocka_unit_test(test_policy_override_by_annotation),
        cmocka_unit_test(test_fgd_with_live_workload),
        cmocka_unit_test(test_live_workload_kept_until_mix_moves),
        cmocka_unit_test(test_memo_warm_judges_cached_shapes),
        cmocka_unit_test(test_warmer_thread),
        cmocka_unit_test(test_filter_passes_at_most_1000_tied),
        cmocka_unit_test(test_pods_without_gpu_placed),
        cmocka_unit_test(test_target_workload_pins_fgd),
        cmocka_unit_test(test_concurrent_binds_never_overcommit),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
