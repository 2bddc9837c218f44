/* tests/unit/test_agent_inventory.c - GPU objects in the API server.
 *
 * The inventory against the test API server (tests/apiserver/server.py),
 * with the fake backend: objects appear with the spec, status and label the
 * scheduler reads; a rerun or a restart writes nothing (the server's request
 * log shows only the list); a removed card's object is deleted, other
 * nodes' objects are never touched; health changes patch only the status
 * and keep what others wrote there; a card replaced at an index gets a new
 * object; an unlabelled object is adopted; API failures are reported and
 * repaired by the next run; the scheduler's cache accepts every object;
 * status.used is written from the measured figures only when they moved.
 */
#include <errno.h>

#include "test_kube_server.h"
#include "egpu/agent.h"
#include "egpu/log.h"
#include "egpu/scheduler.h"

static long live_at_start;

static int group_setup(void **state)
{
    json_t *list = NULL;

    (void)state;
    egpu_log_level = -1; /* quiet: the tests provoke every warning */
    if (tks_start(&srv, NULL) != 0)
        return -1;
    /* One request first, so the client's lazily made parts are not counted
     * as a test's leak. */
    if (egpu_kube_list(srv.kc, &egpu_kube_gpus, NULL, NULL, &list, NULL, NULL) != 0)
        return -1;
    json_decref(list);
    return 0;
}

static int setup(void **state)
{
    live_at_start = egpu_alloc_live();
    return tks_reset_test(state);
}

static int teardown(void **state)
{
    (void)state;
    assert_int_equal(egpu_alloc_live(), live_at_start);
    return 0;
}

/* ------------------------------------------------------------------------ */

/* Open a fake backend for spec on node, publish its cards, close it. */
static int publish_fake(const char *spec, const char *node, struct egpu_inventory_stats *st,
                        struct egpu_error *err)
{
    struct egpu_gpus *g = NULL;
    int rc;

    if (egpu_gpus_open_fake(spec, node, &g, err) != 0)
        fail_msg("fake %s: %s", spec, err->msg);
    rc = egpu_inventory_sync(srv.kc, g, node, st, err);
    egpu_gpus_free(g);
    return rc;
}

static void publish_ok(const char *spec, const char *node, struct egpu_inventory_stats *st)
{
    struct egpu_error err = {0};

    if (publish_fake(spec, node, st, &err) != 0)
        fail_msg("publish %s on %s: %s", spec, node, err.msg);
}

/* The GPU object name (new reference), or NULL when it does not exist. */
static json_t *get_gpu(const char *name)
{
    struct egpu_error err = {0};
    json_t *obj = NULL;
    int rc = egpu_kube_get(srv.kc, &egpu_kube_gpus, NULL, name, &obj, NULL, &err);

    if (rc == -ENOENT)
        return NULL;
    if (rc != 0)
        fail_msg("get %s: %s", name, err.msg);
    return obj;
}

static const char *str_at(const json_t *o, const char *a, const char *b)
{
    const json_t *v = json_object_get(o, a);

    if (b != NULL)
        v = json_object_get(v, b);
    return json_string_value(v);
}

static long long int_at(const json_t *o, const char *a, const char *b, const char *c)
{
    const json_t *v = json_object_get(json_object_get(o, a), b);

    if (c != NULL)
        v = json_object_get(v, c);
    if (!json_is_integer(v))
        fail_msg("%s.%s%s%s is not an integer", a, b, c ? "." : "", c ? c : "");
    return json_integer_value(v);
}

static const char *label_of(const json_t *o)
{
    return json_string_value(json_object_get(
        json_object_get(json_object_get(o, "metadata"), "labels"), EGPU_GPU_LABEL_NODE));
}

static void clear_requests(void)
{
    json_decref(tks_control(&srv, "DELETE", "requests", NULL));
}

/* API requests since clear_requests: all of them, and those not GETs. */
static void count_requests(int *all, int *writes)
{
    json_t *log = tks_control(&srv, "GET", "requests", NULL), *r;
    size_t i;

    *all = *writes = 0;
    json_array_foreach(log, i, r)
    {
        (*all)++;
        if (strcmp(json_string_value(json_object_get(r, "method")), "GET") != 0)
            (*writes)++;
    }
    json_decref(log);
}

static void create_raw(const char *name, const char *label, const char *node, uint32_t index,
                       const char *uuid, long long mem_mib)
{
    struct egpu_error err = {0};
    json_t *obj = json_pack("{s:s, s:s, s:{s:s}, s:{s:s, s:i, s:s, s:s, s:I}}", "apiVersion",
                            "elasticgpu.io/v1alpha1", "kind", "GPU", "metadata", "name", name,
                            "spec", "nodeName", node, "index", (int)index, "uuid", uuid, "model",
                            "hand-made", "memory", (json_int_t)mem_mib);

    if (label != NULL)
        json_object_set_new(json_object_get(obj, "metadata"), "labels",
                            json_pack("{s:s}", EGPU_GPU_LABEL_NODE, label));
    if (egpu_kube_create(srv.kc, &egpu_kube_gpus, NULL, obj, NULL, NULL, &err) != 0)
        fail_msg("create %s: %s", name, err.msg);
    json_decref(obj);
}

static struct egpu_gpu_info card(uint32_t index, const char *uuid, const char *model,
                                 uint64_t mem_mib)
{
    struct egpu_gpu_info c;

    memset(&c, 0, sizeof(c));
    c.index = index;
    c.minor = index;
    snprintf(c.uuid, sizeof(c.uuid), "%s", uuid);
    snprintf(c.model, sizeof(c.model), "%s", model);
    c.mem_mib = mem_mib;
    c.healthy = uuid[0] != '\0';
    return c;
}

/* ------------------------------------------------------------------------ */

static void test_publish_creates_objects(void **state)
{
    struct egpu_gpu_info cards[EGPU_NODE_GPUS_MAX];
    struct egpu_inventory_stats st;
    struct egpu_error err = {0};
    struct egpu_gpus *g = NULL;
    size_t n = 0;
    json_t *obj;

    (void)state;
    assert_int_equal(egpu_gpus_open_fake("2xA100-80GB", "node-a", &g, &err), 0);
    assert_int_equal(egpu_gpus_list(g, cards, EGPU_NODE_GPUS_MAX, &n, &err), 0);
    assert_int_equal(egpu_inventory_sync(srv.kc, g, "node-a", &st, &err), 0);
    egpu_gpus_free(g);
    assert_int_equal(st.created, 2);
    assert_int_equal(st.status_updated, 2);
    assert_int_equal(st.updated + st.deleted + st.unchanged, 0);

    for (uint32_t i = 0; i < 2; i++) {
        char name[32];

        snprintf(name, sizeof(name), "node-a-gpu%u", i);
        obj = get_gpu(name);
        assert_non_null(obj);
        assert_string_equal(str_at(obj, "apiVersion", NULL), "elasticgpu.io/v1alpha1");
        assert_string_equal(str_at(obj, "kind", NULL), "GPU");
        assert_string_equal(label_of(obj), "node-a");
        assert_string_equal(str_at(obj, "spec", "nodeName"), "node-a");
        assert_int_equal(int_at(obj, "spec", "index", NULL), i);
        assert_string_equal(str_at(obj, "spec", "uuid"), cards[i].uuid);
        assert_string_equal(str_at(obj, "spec", "model"), "A100-80GB");
        assert_int_equal(int_at(obj, "spec", "memory", NULL), 81920);
        assert_string_equal(str_at(obj, "status", "health"), EGPU_GPU_HEALTHY);
        assert_int_equal(int_at(obj, "status", "capacity", "core"), 100);
        assert_int_equal(int_at(obj, "status", "capacity", "memory"), 81920);
        json_decref(obj);
    }
}

static void test_rerun_and_restart_write_nothing(void **state)
{
    struct egpu_inventory_stats st;
    struct egpu_error err = {0};
    struct egpu_gpus *g = NULL;
    int all, writes;

    (void)state;
    publish_ok("1xT4-16GB,2xA100-40GB", "node-a", &st);
    clear_requests();

    /* The same backend again. */
    assert_int_equal(egpu_gpus_open_fake("1xT4-16GB,2xA100-40GB", "node-a", &g, &err), 0);
    assert_int_equal(egpu_inventory_sync(srv.kc, g, "node-a", &st, &err), 0);
    assert_int_equal(st.unchanged, 3);
    assert_int_equal(st.created + st.updated + st.status_updated + st.deleted, 0);
    egpu_gpus_free(g);
    /* A restarted agent: a new backend, the same node. */
    publish_ok("1xT4-16GB,2xA100-40GB", "node-a", &st);
    assert_int_equal(st.unchanged, 3);
    assert_int_equal(st.created + st.updated + st.status_updated + st.deleted, 0);

    count_requests(&all, &writes);
    assert_int_equal(writes, 0);
    assert_int_equal(all, 2); /* one list per run */
}

/* spec.topology of GPU object name as "index:link,..." into buf. */
static const char *topology_of(const char *name, char *buf, size_t len)
{
    json_t *obj = get_gpu(name), *e;
    size_t used = 0, i;

    buf[0] = '\0';
    assert_non_null(obj);
    json_array_foreach(json_object_get(json_object_get(obj, "spec"), "topology"), i, e)
    {
        used += (size_t)snprintf(buf + used, len - used, "%s%lld:%s", i ? "," : "",
                                 (long long)json_integer_value(json_object_get(e, "index")),
                                 json_string_value(json_object_get(e, "link")));
    }
    json_decref(obj);
    return buf;
}

/* Each GPU object's spec.topology says how it reaches
 * every other card, as the backend's pair links say (the fake: the host
 * bridge within its group until set); a rerun writes nothing; a changed link
 * patches the two cards it joins; an unidentified card is nobody's peer. */
static void test_topology_published(void **state)
{
    struct egpu_inventory_stats st;
    struct egpu_error err = {0};
    struct egpu_gpus *g = NULL;
    char buf[512];

    (void)state;
    assert_int_equal(egpu_gpus_open_fake("4xA100-80GB", "node-a", &g, &err), 0);
    assert_int_equal(egpu_gpus_fake_set_link(g, 0, 1, EGPU_LINK_NVLINK, &err), 0);
    assert_int_equal(egpu_gpus_fake_set_link(g, 2, 3, EGPU_LINK_NVLINK, &err), 0);
    assert_int_equal(egpu_gpus_fake_set_link(g, 0, 3, EGPU_LINK_PIX, &err), 0);
    assert_int_equal(egpu_inventory_sync(srv.kc, g, "node-a", &st, &err), 0);
    assert_int_equal(st.created, 4);
    assert_string_equal(topology_of("node-a-gpu0", buf, sizeof(buf)),
                        "1:NVLink,2:HostBridge,3:SingleSwitch");
    assert_string_equal(topology_of("node-a-gpu3", buf, sizeof(buf)),
                        "0:SingleSwitch,1:HostBridge,2:NVLink");
    assert_int_equal(egpu_inventory_sync(srv.kc, g, "node-a", &st, &err), 0);
    assert_int_equal(st.unchanged, 4);
    assert_int_equal(egpu_gpus_fake_set_link(g, 1, 0, EGPU_LINK_SYS, &err), 0);
    assert_int_equal(egpu_inventory_sync(srv.kc, g, "node-a", &st, &err), 0);
    assert_int_equal(st.updated, 2);
    assert_int_equal(st.unchanged, 2);
    assert_string_equal(topology_of("node-a-gpu1", buf, sizeof(buf)),
                        "0:System,2:HostBridge,3:HostBridge");
    egpu_gpus_free(g);

    /* Cards published by hand, without links: no topology. */
    {
        struct egpu_gpu_info c[2] = {
            {.uuid = "GPU-x0", .index = 0, .model = "A100", .mem_mib = 1024, .healthy = true},
            {.uuid = "GPU-x1", .index = 1, .model = "A100", .mem_mib = 1024, .healthy = true}};

        assert_int_equal(egpu_inventory_publish(srv.kc, "node-b", c, 2, &st, &err), 0);
        assert_string_equal(topology_of("node-b-gpu0", buf, sizeof(buf)), "");
        c[0].has_links = c[1].has_links = true;
        memset(c[0].links, EGPU_LINK_UNKNOWN, sizeof(c[0].links));
        memset(c[1].links, EGPU_LINK_UNKNOWN, sizeof(c[1].links));
        c[0].links[1] = c[1].links[0] = EGPU_LINK_BOARD;
        c[1].uuid[0] = '\0'; /* lost before it was identified */
        assert_int_equal(egpu_inventory_publish(srv.kc, "node-b", c, 2, &st, &err), 0);
        assert_string_equal(topology_of("node-b-gpu0", buf, sizeof(buf)), "");
        memcpy(c[1].uuid, "GPU-x1", 7);
        assert_int_equal(egpu_inventory_publish(srv.kc, "node-b", c, 2, &st, &err), 0);
        assert_string_equal(topology_of("node-b-gpu0", buf, sizeof(buf)), "1:Internal");
    }
}

static void test_removed_card_deleted(void **state)
{
    struct egpu_inventory_stats st;
    struct egpu_error err = {0};
    json_t *obj;

    (void)state;
    publish_ok("3xA100-80GB", "node-a", &st);
    publish_ok("1xA100-80GB", "node-a", &st);
    assert_int_equal(st.deleted, 2);
    /* Its peers gone, card 0's spec.topology is removed. */
    assert_int_equal(st.updated, 1);
    assert_null(get_gpu("node-a-gpu1"));
    assert_null(get_gpu("node-a-gpu2"));
    obj = get_gpu("node-a-gpu0");
    assert_non_null(obj);
    json_decref(obj);

    /* No cards at all: every object of the node goes. */
    assert_int_equal(egpu_inventory_publish(srv.kc, "node-a", NULL, 0, &st, &err), 0);
    assert_int_equal(st.deleted, 1);
    assert_null(get_gpu("node-a-gpu0"));
}

static void test_other_nodes_untouched(void **state)
{
    struct egpu_inventory_stats st;
    struct egpu_error err = {0};
    json_t *b0, *b0_after, *odd, *odd_after;

    (void)state;
    publish_ok("2xT4-16GB", "node-b", &st);
    /* Labelled node-a by mistake, but spec.nodeName says node-c. */
    create_raw("odd-gpu0", "node-a", "node-c", 0, "GPU-odd", 1024);
    b0 = get_gpu("node-b-gpu0");
    odd = get_gpu("odd-gpu0");

    publish_ok("2xA100-80GB", "node-a", &st);
    assert_int_equal(st.created, 2);
    assert_int_equal(egpu_inventory_publish(srv.kc, "node-a", NULL, 0, &st, &err), 0);
    assert_int_equal(st.deleted, 2);

    b0_after = get_gpu("node-b-gpu0");
    odd_after = get_gpu("odd-gpu0");
    assert_non_null(b0_after);
    assert_non_null(odd_after);
    assert_string_equal(str_at(b0_after, "metadata", "resourceVersion"),
                        str_at(b0, "metadata", "resourceVersion"));
    assert_string_equal(str_at(odd_after, "metadata", "resourceVersion"),
                        str_at(odd, "metadata", "resourceVersion"));
    json_decref(b0);
    json_decref(b0_after);
    json_decref(odd);
    json_decref(odd_after);
    json_decref(b0 = get_gpu("node-b-gpu1"));
    assert_non_null(b0);
}

static void test_health_change_patches_status_only(void **state)
{
    struct egpu_inventory_stats st;
    struct egpu_error err = {0};
    struct egpu_gpus *g = NULL;
    json_t *alloc, *obj;
    int all, writes;

    (void)state;
    assert_int_equal(egpu_gpus_open_fake("2xA100-80GB", "node-a", &g, &err), 0);
    assert_int_equal(egpu_inventory_sync(srv.kc, g, "node-a", &st, &err), 0);
    /* The device plugin records an allocation in the status. */
    alloc = json_pack("{s:{s:[{s:s, s:s, s:s, s:i, s:i}]}}", "status", "allocated", "namespace",
                      "ml", "pod", "train-0", "container", "main", "core", 30, "memory", 4096);
    assert_int_equal(egpu_kube_patch_status(srv.kc, &egpu_kube_gpus, NULL, "node-a-gpu1",
                                            EGPU_KUBE_MERGE_PATCH, alloc, NULL, NULL, &err),
                     0);
    json_decref(alloc);

    assert_int_equal(egpu_gpus_fake_set_health(g, 1, false, "XID 79", &err), 0);
    clear_requests();
    assert_int_equal(egpu_inventory_sync(srv.kc, g, "node-a", &st, &err), 0);
    assert_int_equal(st.status_updated, 1);
    assert_int_equal(st.unchanged, 1);
    assert_int_equal(st.created + st.updated + st.deleted, 0);
    count_requests(&all, &writes);
    assert_int_equal(writes, 1);

    obj = get_gpu("node-a-gpu1");
    assert_string_equal(str_at(obj, "status", "health"), EGPU_GPU_UNHEALTHY);
    assert_int_equal(int_at(obj, "status", "capacity", "core"), 0);
    assert_int_equal(int_at(obj, "status", "capacity", "memory"), 0);
    assert_int_equal(int_at(obj, "spec", "memory", NULL), 81920);
    assert_int_equal(json_array_size(json_object_get(json_object_get(obj, "status"), "allocated")),
                     1);
    json_decref(obj);

    /* Healthy again. */
    assert_int_equal(egpu_gpus_fake_set_health(g, 1, true, NULL, &err), 0);
    assert_int_equal(egpu_inventory_sync(srv.kc, g, "node-a", &st, &err), 0);
    assert_int_equal(st.status_updated, 1);
    obj = get_gpu("node-a-gpu1");
    assert_string_equal(str_at(obj, "status", "health"), EGPU_GPU_HEALTHY);
    assert_int_equal(int_at(obj, "status", "capacity", "core"), 100);
    json_decref(obj);
    egpu_gpus_free(g);
}

static void test_card_replaced_at_index(void **state)
{
    struct egpu_gpu_info c[2] = {card(0, "GPU-aaaa", "Tesla T4", 15360),
                                 card(1, "GPU-bbbb", "Tesla T4", 15360)};
    struct egpu_inventory_stats st;
    struct egpu_error err = {0};
    json_t *before, *after;

    (void)state;
    assert_int_equal(egpu_inventory_publish(srv.kc, "node-a", c, 2, &st, &err), 0);
    before = get_gpu("node-a-gpu0");
    c[0] = card(0, "GPU-cccc", "NVIDIA L4", 23034);
    assert_int_equal(egpu_inventory_publish(srv.kc, "node-a", c, 2, &st, &err), 0);
    assert_int_equal(st.deleted, 1);
    assert_int_equal(st.created, 1);
    assert_int_equal(st.unchanged, 1);
    after = get_gpu("node-a-gpu0");
    assert_string_equal(str_at(after, "spec", "uuid"), "GPU-cccc");
    assert_string_equal(str_at(after, "spec", "model"), "NVIDIA L4");
    assert_int_equal(int_at(after, "status", "capacity", "memory"), 23034);
    assert_string_not_equal(str_at(after, "metadata", "uid"), str_at(before, "metadata", "uid"));
    json_decref(before);
    json_decref(after);
}

static void test_adopt_and_repair(void **state)
{
    struct egpu_gpu_info c[2] = {card(0, "GPU-aaaa", "Tesla T4", 15360),
                                 card(1, "GPU-bbbb", "Tesla T4", 15360)};
    struct egpu_inventory_stats st;
    struct egpu_error err = {0};
    json_t *obj;

    (void)state;
    /* Ours but unlabelled and with the wrong memory; the other one holds
     * our name for another node. */
    create_raw("node-a-gpu0", NULL, "node-a", 0, "GPU-aaaa", 1);
    create_raw("node-a-gpu1", "node-z", "node-z", 1, "GPU-zzzz", 1);
    assert_int_equal(egpu_inventory_publish(srv.kc, "node-a", c, 2, &st, &err), -EEXIST);
    assert_non_null(strstr(err.msg, "GPU object node-a-gpu1 belongs to node node-z"));
    assert_int_equal(st.updated, 1);
    assert_int_equal(st.status_updated, 1);
    assert_int_equal(st.created + st.deleted, 0);

    obj = get_gpu("node-a-gpu0");
    assert_string_equal(label_of(obj), "node-a");
    assert_int_equal(int_at(obj, "spec", "memory", NULL), 15360);
    assert_string_equal(str_at(obj, "spec", "model"), "Tesla T4");
    json_decref(obj);
    obj = get_gpu("node-a-gpu1");
    assert_string_equal(str_at(obj, "spec", "nodeName"), "node-z");
    assert_string_equal(str_at(obj, "spec", "uuid"), "GPU-zzzz");
    json_decref(obj);
}

static void test_unidentified_card_kept_unhealthy(void **state)
{
    struct egpu_gpu_info c[3] = {card(0, "GPU-aaaa", "Tesla T4", 15360),
                                 card(1, "GPU-bbbb", "Tesla T4", 15360),
                                 card(2, "GPU-cccc", "Tesla T4", 15360)};
    struct egpu_inventory_stats st;
    struct egpu_error err = {0};
    json_t *obj;

    (void)state;
    assert_int_equal(egpu_inventory_publish(srv.kc, "node-a", c, 2, &st, &err), 0);
    /* Card 1 stops answering before a (restarted) agent could read it; card
     * 2 was never published: nothing is made up for it. */
    c[1] = card(1, "", "", 0);
    snprintf(c[1].reason, sizeof(c[1].reason), "nvmlDeviceGetUUID: GPU is lost");
    c[2] = card(2, "", "", 0);
    assert_int_equal(egpu_inventory_publish(srv.kc, "node-a", c, 3, &st, &err), 0);
    assert_int_equal(st.status_updated, 1);
    assert_int_equal(st.deleted + st.created, 0);
    obj = get_gpu("node-a-gpu1");
    assert_non_null(obj);
    assert_string_equal(str_at(obj, "spec", "uuid"), "GPU-bbbb");
    assert_string_equal(str_at(obj, "status", "health"), EGPU_GPU_UNHEALTHY);
    assert_int_equal(int_at(obj, "status", "capacity", "core"), 0);
    json_decref(obj);
    assert_null(get_gpu("node-a-gpu2"));
}

static void test_scheduler_cache_accepts(void **state)
{
    struct egpu_sched_cache *cache = egpu_sched_cache_new();
    struct egpu_sched_cache_stats cs;
    struct egpu_inventory_stats st;
    struct egpu_error err = {0};
    json_t *list = NULL, *item;
    size_t i;

    (void)state;
    assert_non_null(cache);
    /* One model per node: the placement core refuses mixed nodes. */
    publish_ok("3xA100-40GB", "node-a", &st);
    publish_ok("4xH100-80GB", "node-b", &st);
    assert_int_equal(egpu_kube_list(srv.kc, &egpu_kube_gpus, NULL, NULL, &list, NULL, &err), 0);
    assert_int_equal(json_array_size(json_object_get(list, "items")), 7);
    json_array_foreach(json_object_get(list, "items"), i, item)
    {
        if (egpu_sched_cache_gpu_set(cache, item, &err) != 0)
            fail_msg("cache refused %s: %s", str_at(item, "metadata", "name"), err.msg);
    }
    /* Cards count once their Node is known. */
    for (i = 0; i < 2; i++) {
        json_t *node = json_pack("{s:{s:s}, s:{s:{s:s, s:s}}}", "metadata", "name",
                                 i == 0 ? "node-a" : "node-b", "status", "allocatable", "cpu", "32",
                                 "memory", "128Gi");

        assert_int_equal(egpu_sched_cache_node_set(cache, node, &err), 0);
        json_decref(node);
    }
    egpu_sched_cache_stats(cache, &cs);
    assert_int_equal(cs.nodes, 2);
    assert_int_equal(cs.gpus, 7);
    {
        struct egpu_cluster *cl = egpu_sched_cache_lock(cache);
        const struct egpu_node *na = egpu_cluster_node(cl, "node-a");

        assert_non_null(na);
        assert_int_equal(na->ngpus, 3);
        for (uint32_t k = 0; k < 3; k++)
            assert_int_equal(na->gpus[k].index, k);
        assert_int_equal(na->gpus[0].mem_mib, 40960);
        assert_int_equal(na->gpus[2].mem_mib, 40960);
        assert_memory_equal(na->gpus[0].uuid, "GPU-", 4);
        egpu_sched_cache_unlock(cache);
    }
    json_decref(list);
    egpu_sched_cache_free(cache);
}

static void test_api_failures_reported_then_repaired(void **state)
{
    struct egpu_inventory_stats st;
    struct egpu_error err = {0};
    json_t *obj;

    (void)state;
    /* The first create fails; the other card is still published. */
    tks_post(&srv, "fault",
             "{\"method\": \"POST\", \"path\": \"/gpus$\", \"code\": 500, \"count\": 1}");
    assert_int_equal(publish_fake("2xA100-80GB", "node-a", &st, &err), -EIO);
    assert_non_null(strstr(err.msg, "POST"));
    assert_int_equal(st.created, 1);
    /* The next run repairs it. */
    publish_ok("2xA100-80GB", "node-a", &st);
    assert_int_equal(st.created, 1);
    assert_int_equal(st.unchanged, 1);
    obj = get_gpu("node-a-gpu0");
    assert_non_null(obj);
    json_decref(obj);

    /* A failed list deletes nothing. */
    tks_post(&srv, "fault",
             "{\"method\": \"GET\", \"path\": \"/gpus$\", \"code\": 500, \"count\": 1}");
    assert_int_equal(egpu_inventory_publish(srv.kc, "node-a", NULL, 0, &st, &err), -EIO);
    assert_non_null(strstr(err.msg, "list GPU objects of node node-a"));
    assert_int_equal(st.deleted, 0);
    obj = get_gpu("node-a-gpu1");
    assert_non_null(obj);
    json_decref(obj);
}

static void test_bad_input_refused(void **state)
{
    struct egpu_gpu_info c[2] = {card(0, "GPU-aaaa", "T4", 15360),
                                 card(0, "GPU-bbbb", "T4", 15360)};
    struct egpu_inventory_stats st;
    struct egpu_error err = {0};
    int all, writes;

    (void)state;
    clear_requests();
    assert_int_equal(egpu_inventory_publish(srv.kc, "node-a", c, 2, &st, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "index 0 twice"));
    assert_int_equal(egpu_inventory_publish(srv.kc, "", c, 1, &st, &err), -EINVAL);
    c[1].index = 1;
    c[1].mem_mib = (uint64_t)1 << 40;
    assert_int_equal(egpu_inventory_publish(srv.kc, "node-a", c, 2, &st, &err), -EINVAL);
    count_requests(&all, &writes);
    assert_int_equal(all, 0);
}

/* status.used: written from the measured figures when a card is new, every
 * EGPU_USED_REFRESH reports for updateTime, and when they moved (256 MiB,
 * 10 points) but not within EGPU_USED_MIN_REPORTS reports of the last
 * write; never for a card without a measure or unhealthy; it leaves the
 * rest of the status alone. */
static void used_card(struct egpu_gpu_info *c, uint64_t mem_mib, uint32_t util)
{
    c->has_used = true;
    c->has_util = true;
    c->used_mem_mib = mem_mib;
    c->util_pct = util;
}

static void report(struct egpu_inventory_used *st, const struct egpu_gpu_info *cards, size_t n,
                   unsigned want_written, int want_requests)
{
    struct egpu_error err = {0};
    unsigned written = 99;
    int all, writes;

    clear_requests();
    if (egpu_inventory_report_used(srv.kc, st, "node-a", cards, n, &written, &err) != 0)
        fail_msg("report: %s", err.msg);
    assert_int_equal(written, want_written);
    count_requests(&all, &writes);
    assert_int_equal(writes, want_requests);
}

static void test_used_reported_when_it_moves(void **state)
{
    struct egpu_inventory_used *st = egpu_calloc(1, sizeof(*st));
    struct egpu_gpu_info cards[4];
    struct egpu_inventory_stats stats;
    struct egpu_error err = {0};
    json_t *obj, *used;

    (void)state;
    assert_non_null(st);
    cards[0] = card(0, "GPU-00000000-0000-0000-0000-000000000000", "A100", 81920);
    cards[1] = card(1, "GPU-11111111-1111-1111-1111-111111111111", "A100", 81920);
    cards[2] = card(2, "GPU-22222222-2222-2222-2222-222222222222", "A100", 81920);
    cards[3] = card(3, "GPU-33333333-3333-3333-3333-333333333333", "A100", 81920);
    assert_int_equal(egpu_inventory_publish(srv.kc, "node-a", cards, 3, &stats, &err), 0);
    used_card(&cards[0], 5120, 37);
    used_card(&cards[1], 0, 0);
    cards[1].has_util = false;    /* NVML without utilization for this card */
    cards[2].has_used = false;    /* a fake card: nothing measured */
    used_card(&cards[3], 10, 10); /* no GPU object yet: skipped, then left out */

    report(st, cards, 4, 2, 3); /* and card 3's PATCH: 404 */
    obj = get_gpu("node-a-gpu0");
    used = json_object_get(json_object_get(obj, "status"), "used");
    assert_int_equal(int_at(obj, "status", "used", "memory"), 5120);
    assert_int_equal(int_at(obj, "status", "used", "utilization"), 37);
    assert_non_null(json_string_value(json_object_get(used, "updateTime")));
    assert_int_equal(json_object_size(used), 3);
    assert_string_equal(str_at(obj, "status", "health"), EGPU_GPU_HEALTHY);
    assert_int_equal(int_at(obj, "status", "capacity", "core"), 100);
    json_decref(obj);
    obj = get_gpu("node-a-gpu1");
    used = json_object_get(json_object_get(obj, "status"), "used");
    assert_int_equal(int_at(obj, "status", "used", "memory"), 0);
    assert_null(json_object_get(used, "utilization"));
    json_decref(obj);
    obj = get_gpu("node-a-gpu2");
    assert_null(json_object_get(json_object_get(obj, "status"), "used"));
    json_decref(obj);

    /* The same figures: nothing written. */
    report(st, cards, 3, 0, 0);
    /* Moves below the thresholds: nothing, however long. */
    cards[0].used_mem_mib = 5120 + EGPU_USED_MIN_MIB - 1;
    cards[0].util_pct = 37 - (EGPU_USED_MIN_PCT - 1);
    for (int i = 0; i < EGPU_USED_MIN_REPORTS + 2; i++)
        report(st, cards, 3, 0, 0);
    /* 256 MiB more on card 0 (card 1's utilization cannot move: it has
     * none): written at once, a minute having passed since card 0's write. */
    cards[0].used_mem_mib = 5120 + EGPU_USED_MIN_MIB;
    report(st, cards, 3, 1, 1);
    /* 10 points less than written (28) right after: held back for
     * EGPU_USED_MIN_REPORTS reports, then written. */
    cards[0].util_pct = 28 - EGPU_USED_MIN_PCT;
    for (int i = 0; i < EGPU_USED_MIN_REPORTS - 1; i++)
        report(st, cards, 3, 0, 0);
    report(st, cards, 3, 1, 1);
    obj = get_gpu("node-a-gpu0");
    assert_int_equal(int_at(obj, "status", "used", "memory"), 5120 + EGPU_USED_MIN_MIB);
    assert_int_equal(int_at(obj, "status", "used", "utilization"), 28 - EGPU_USED_MIN_PCT);
    json_decref(obj);
    /* Unhealthy: its figures are not written. */
    cards[0].healthy = false;
    cards[0].used_mem_mib = 9000;
    report(st, cards, 3, 0, 0);
    cards[0].healthy = true;
    cards[0].used_mem_mib = 5120 + EGPU_USED_MIN_MIB;
    /* Steady: updateTime again on the EGPU_USED_REFRESH-th report since
     * the last write (a card skipped as unhealthy does not count it): card
     * 1 was last written on the first report, card 0 on the report before
     * the unhealthy one. */
    {
        int since1 = 1 + (EGPU_USED_MIN_REPORTS + 2) + 1 + EGPU_USED_MIN_REPORTS + 1;

        for (int i = since1; i < EGPU_USED_REFRESH - 1; i++)
            report(st, cards, 3, 0, 0);
        report(st, cards, 3, 1, 1); /* card 1 */
    }
    /* Another card at index 0: written at once. */
    snprintf(cards[0].uuid, sizeof(cards[0].uuid), "GPU-99999999-9999-9999-9999-999999999999");
    assert_true(egpu_inventory_used_due(st, 0, &cards[0]));
    assert_false(egpu_inventory_used_due(st, EGPU_NODE_GPUS_MAX, &cards[0]));
    egpu_free(st);
}

/* status.used names the NVML call behind memory: with v2 the reservation
 * beside it (reservedMemory), with v1 none (the merge patch removes the one
 * v2 wrote, since v1 counts it inside memory); a source change is written
 * like a move, not within EGPU_USED_MIN_REPORTS reports of the last write. */
static void test_used_names_its_source(void **state)
{
    struct egpu_inventory_used *st = egpu_calloc(1, sizeof(*st));
    struct egpu_gpu_info cards[1];
    struct egpu_inventory_stats stats;
    struct egpu_error err = {0};
    json_t *obj, *used;

    (void)state;
    assert_non_null(st);
    cards[0] = card(0, "GPU-00000000-0000-0000-0000-000000000000", "H100", 81559);
    assert_int_equal(egpu_inventory_publish(srv.kc, "node-a", cards, 1, &stats, &err), 0);
    used_card(&cards[0], 0, 0);
    cards[0].mem_source = EGPU_MEM_SOURCE_V2;
    cards[0].reserved_mem_mib = 480;
    report(st, cards, 1, 1, 1);
    obj = get_gpu("node-a-gpu0");
    used = json_object_get(json_object_get(obj, "status"), "used");
    assert_int_equal(int_at(obj, "status", "used", "memory"), 0);
    assert_string_equal(json_string_value(json_object_get(used, "memorySource")),
                        "nvmlDeviceGetMemoryInfo_v2");
    assert_int_equal(int_at(obj, "status", "used", "reservedMemory"), 480);
    assert_int_equal(json_object_size(used), 5);
    json_decref(obj);

    /* v2 stops answering: v1's used holds the reservation. */
    cards[0].mem_source = EGPU_MEM_SOURCE_V1;
    cards[0].reserved_mem_mib = 0;
    cards[0].used_mem_mib = 480;
    for (int i = 0; i < EGPU_USED_MIN_REPORTS - 1; i++)
        report(st, cards, 1, 0, 0);
    report(st, cards, 1, 1, 1);
    obj = get_gpu("node-a-gpu0");
    used = json_object_get(json_object_get(obj, "status"), "used");
    assert_int_equal(int_at(obj, "status", "used", "memory"), 480);
    assert_string_equal(json_string_value(json_object_get(used, "memorySource")),
                        "nvmlDeviceGetMemoryInfo");
    assert_null(json_object_get(used, "reservedMemory"));
    assert_int_equal(json_object_size(used), 4);
    json_decref(obj);
    report(st, cards, 1, 0, 0);

    /* The reservation moving by EGPU_USED_MIN_MIB is a move. */
    cards[0].mem_source = EGPU_MEM_SOURCE_V2;
    cards[0].used_mem_mib = 0;
    cards[0].reserved_mem_mib = 480;
    for (int i = 0; i < EGPU_USED_MIN_REPORTS; i++)
        report(st, cards, 1, i == EGPU_USED_MIN_REPORTS - 2 ? 1 : 0,
               i == EGPU_USED_MIN_REPORTS - 2 ? 1 : 0);
    cards[0].reserved_mem_mib = 480 + EGPU_USED_MIN_MIB - 1;
    for (int i = 0; i < EGPU_USED_MIN_REPORTS + 1; i++)
        report(st, cards, 1, 0, 0);
    cards[0].reserved_mem_mib = 480 + EGPU_USED_MIN_MIB;
    report(st, cards, 1, 1, 1);
    obj = get_gpu("node-a-gpu0");
    assert_int_equal(int_at(obj, "status", "used", "reservedMemory"), 480 + EGPU_USED_MIN_MIB);
    json_decref(obj);
    egpu_free(st);
}

static void test_names(void **state)
{
    char name[EGPU_GPU_NAME_MAX], label[64], node[300], other[300];
    struct egpu_error err = {0};

    (void)state;
    assert_int_equal(egpu_inventory_gpu_name("node-a", 3, name, sizeof(name), &err), 0);
    assert_string_equal(name, "node-a-gpu3");
    assert_int_equal(egpu_inventory_gpu_name("Node_A.Example.COM", 12, name, sizeof(name), &err),
                     0);
    assert_string_equal(name, "node-a.example.com-gpu12");
    assert_int_equal(egpu_inventory_gpu_name("-.x..y.", 0, name, sizeof(name), &err), 0);
    assert_string_equal(name, "x--y--gpu0");
    assert_int_equal(egpu_inventory_gpu_name("--", 0, name, sizeof(name), &err), -EINVAL);
    assert_int_equal(egpu_inventory_gpu_name("n", 1024, name, sizeof(name), &err), -EINVAL);
    assert_int_equal(egpu_inventory_gpu_name("node-a", 3, name, 11, &err), -ENAMETOOLONG);
    assert_int_equal(egpu_inventory_gpu_name("node-a", 3, name, 12, &err), 0);

    /* Too long: cut, told apart by a hash, still 253 characters at most. */
    memset(node, 'a', 253);
    node[253] = '\0';
    memcpy(other, node, sizeof(node));
    other[252] = 'b';
    assert_int_equal(egpu_inventory_gpu_name(node, 1023, name, sizeof(name), &err), 0);
    assert_true(strlen(name) <= 253);
    assert_non_null(strstr(name, "-gpu1023"));
    assert_int_equal(egpu_inventory_gpu_name(other, 1023, label, sizeof(label), &err),
                     -ENAMETOOLONG);
    {
        char name2[EGPU_GPU_NAME_MAX];

        assert_int_equal(egpu_inventory_gpu_name(other, 1023, name2, sizeof(name2), &err), 0);
        assert_string_not_equal(name, name2);
    }

    assert_int_equal(egpu_inventory_node_label("node-a", label, sizeof(label), &err), 0);
    assert_string_equal(label, "node-a");
    assert_int_equal(egpu_inventory_node_label(node, label, sizeof(label), &err), 0);
    assert_int_equal(strlen(label), 63);
    assert_int_equal(egpu_inventory_node_label("", label, sizeof(label), &err), -EINVAL);
}

static void test_long_node_name_published(void **state)
{
    struct egpu_inventory_stats st;
    char node[120], name[EGPU_GPU_NAME_MAX];
    struct egpu_error err = {0};
    json_t *obj;

    (void)state;
    memset(node, 'n', sizeof(node) - 1);
    node[sizeof(node) - 1] = '\0';
    publish_ok("1xT4-16GB", node, &st);
    assert_int_equal(st.created, 1);
    publish_ok("1xT4-16GB", node, &st);
    assert_int_equal(st.unchanged, 1);
    assert_int_equal(egpu_inventory_gpu_name(node, 0, name, sizeof(name), &err), 0);
    obj = get_gpu(name);
    assert_non_null(obj);
    assert_string_equal(str_at(obj, "spec", "nodeName"), node);
    assert_int_equal(strlen(label_of(obj)), 63);
    json_decref(obj);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_publish_creates_objects, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rerun_and_restart_write_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_removed_card_deleted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_other_nodes_untouched, setup, teardown),
        cmocka_unit_test_setup_teardown(test_health_change_patches_status_only, setup, teardown),
        cmocka_unit_test_setup_teardown(test_card_replaced_at_index, setup, teardown),
        cmocka_unit_test_setup_teardown(test_adopt_and_repair, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unidentified_card_kept_unhealthy, setup, teardown),
        cmocka_unit_test_setup_teardown(test_scheduler_cache_accepts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_api_failures_reported_then_repaired, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_input_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_used_reported_when_it_moves, setup, teardown),
        cmocka_unit_test_setup_teardown(test_used_names_its_source, setup, teardown),
        cmocka_unit_test_setup_teardown(test_names, setup, teardown),
        cmocka_unit_test_setup_teardown(test_topology_published, setup, teardown),
        cmocka_unit_test_setup_teardown(test_long_node_name_published, setup, teardown),
    };

    return cmocka_run_group_tests(tests, group_setup, tks_group_teardown);
}
