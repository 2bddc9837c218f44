/* tests/unit/test_controller_route.c - egpu-controller's event routing
 * (src/controller/route.c) through the library alone: the informers it
 * starts against the test API server queue the keys each change concerns
 * (a pod's claims, a claim's ElasticGPUs, an ElasticGPU's claim and its
 * namespace's budgets, a GPU's card), and the callbacks it hands out leave
 * the queue alone for changes that do not concern it (a GPU's status, a
 * budget's status).
 */
#include "test_kube_server.h"
#include "testjson.h"

#include <errno.h>
#include <jansson.h>

#include "controller_int.h"

#define NS "route"

static int group_setup(void **state)
{
    (void)state;
    return tks_start(&srv, NULL);
}

/* A controller with its queue, index, GPU status and informers (started,
 * synced), as main.c's start makes them, without a worker. */
static void controller_up(struct egpu__controller *c)
{
    struct egpu_error err = {0};

    memset(c, 0, sizeof(*c));
    c->kube = srv.kc;
    c->queue = egpu_controller_queue_new(10, 30000);
    c->reg = egpu_metrics_new();
    assert_non_null(c->queue);
    assert_non_null(c->reg);
    assert_int_equal(egpu__controller_index_new(c), 0);
    assert_int_equal(egpu__controller_gs_init(c, &err), 0);
    if (egpu__controller_informers_start(c, &err) != 0)
        fail_msg("informers: %s", err.msg);
    for (int i = 0; i < EGPU__CONTROLLER_NINF; i++)
        assert_int_equal(egpu_kube_informer_wait_synced(c->inf[i], 5000), 0);
}

static void controller_down(struct egpu__controller *c)
{
    egpu_controller_queue_shutdown(c->queue);
    for (int i = 0; i < EGPU__CONTROLLER_NINF; i++)
        egpu_kube_informer_free(c->inf[i]);
    egpu_controller_queue_free(c->queue);
    egpu__controller_gs_free(c);
    egpu__controller_index_free(c);
    egpu_metrics_free(c->reg);
}

/* Take every key the queue hands out within ms of the last one, as a JSON
 * object of key -> true (new reference). */
static json_t *drain(struct egpu__controller *c, long ms)
{
    json_t *keys = json_object();
    char *key;

    assert_non_null(keys);
    while (egpu_controller_queue_get(c->queue, ms, &key) == 0) {
        json_object_set_new(keys, key, json_true());
        egpu_controller_queue_done(c->queue, key);
        egpu_controller_queue_forget(c->queue, key);
        egpu_free(key);
    }
    return keys;
}

/* Wait (up to 5 s) until each of the NULL-terminated keys was queued; keys
 * queued meanwhile that are not listed are returned in *extra (may be
 * NULL). */
static void expect_keys(struct egpu__controller *c, const char *const *want, json_t **extra)
{
    json_t *seen = json_object();
    long long until = tks_now_ms() + 5000;
    const char *k;
    json_t *v;

    for (;;) {
        json_t *more = drain(c, 100);
        bool all = true;

        json_object_update(seen, more);
        json_decref(more);
        for (const char *const *w = want; *w != NULL; w++)
            all = all && json_object_get(seen, *w) != NULL;
        if (all)
            break;
        if (tks_now_ms() > until) {
            char *dump = json_dumps(seen, JSON_SORT_KEYS);

            fail_msg("keys queued: %s", dump ? dump : "?");
        }
    }
    json_t *rest = drain(c, 300); /* what the same change queued late */

    json_object_update(seen, rest);
    json_decref(rest);
    for (const char *const *w = want; *w != NULL; w++)
        json_object_del(seen, *w);
    if (extra != NULL) {
        *extra = seen;
        return;
    }
    json_object_foreach(seen, k, v)
    {
        (void)v;
        fail_msg("unexpected key queued: %s", k);
    }
    json_decref(seen);
}

static void create(const struct egpu_kube_resource *res, const char *ns, const char *text)
{
    struct egpu_error err = {0};
    json_t *obj = tu_json(text);

    if (egpu_kube_create(srv.kc, res, ns, obj, NULL, NULL, &err) != 0)
        fail_msg("create: %s", err.msg);
    json_decref(obj);
}

/* The informers' threads queue what each new object concerns. */
static void test_informers_queue_keys(void **state)
{
    static struct egpu__controller c;
    json_t *extra = NULL;

    (void)state;
    controller_up(&c);
    /* A pod using a claim queues the claim. */
    create(&egpu_kube_pods, NS,
           "{'apiVersion': 'v1', 'kind': 'Pod', 'metadata': {'name': 'p1', 'namespace': 'route',"
           " 'annotations': {'egpuc.elasticgpu.io/main': 'claim-a'}},"
           " 'spec': {'containers': [{'name': 'main', 'image': 'busybox'}]}}");
    expect_keys(&c, (const char *const[]){"c/" NS "/claim-a", NULL}, NULL);
    /* A budget queues its namespace. */
    create(&egpu_kube_gpubudgets, NS,
           "{'apiVersion': 'elasticgpu.io/v1alpha1', 'kind': 'GPUBudget',"
           " 'metadata': {'name': 'b1', 'namespace': 'route'},"
           " 'spec': {'gpuHours': '10', 'period': 'Daily'}}");
    expect_keys(&c, (const char *const[]){"b/" NS, NULL}, NULL);
    /* A claim queues itself and the ElasticGPUs it names or was given. */
    create(&egpu_kube_elasticgpuclaims, NS,
           "{'apiVersion': 'elasticgpu.io/v1alpha1', 'kind': 'ElasticGPUClaim',"
           " 'metadata': {'name': 'claim-b', 'namespace': 'route'},"
           " 'spec': {'elasticGPUName': 'egpu-by-hand',"
           " 'resources': {'requests': {'elasticgpu.io/gpu-core': '50'}}}}");
    expect_keys(&c, (const char *const[]){"c/" NS "/claim-b", "e/egpu-by-hand", NULL}, &extra);
    /* ... and the one provisioned for it, egpu-<uid> (the server's uid). */
    assert_int_equal(json_object_size(extra), 1);
    assert_true(strncmp(json_object_iter_key(json_object_iter(extra)), "e/egpu-", 7) == 0);
    json_decref(extra);
    /* An ElasticGPU queues itself, its claim, and its claim's namespace
     * (which has a budget, and the ElasticGPU no metering finalizer yet). */
    create(&egpu_kube_elasticgpus, NULL,
           "{'apiVersion': 'elasticgpu.io/v1alpha1', 'kind': 'ElasticGPU',"
           " 'metadata': {'name': 'eg1'},"
           " 'spec': {'claimRef': {'namespace': 'route', 'name': 'claim-c'},"
           " 'capacity': {'elasticgpu.io/gpu-core': '50'}}}");
    expect_keys(&c, (const char *const[]){"e/eg1", "c/" NS "/claim-c", "b/" NS, NULL}, NULL);
    /* A GPU object queues its card for status.allocated, and, being new
     * capacity, the claims not yet Bound and every ElasticGPU. */
    create(&egpu_kube_gpus, NULL,
           "{'apiVersion': 'elasticgpu.io/v1alpha1', 'kind': 'GPU', 'metadata': {'name': 'n1-0'},"
           " 'spec': {'nodeName': 'n1', 'index': 0, 'uuid': 'GPU-1', 'model': 'A100',"
           " 'memory': 40960}}");
    expect_keys(&c, (const char *const[]){"g/n1/GPU-1", "c/" NS "/claim-b", "e/eg1", NULL}, NULL);
    controller_down(&c);
}

/* The callbacks themselves: changes that concern nothing queue nothing. */
static void test_callbacks_ignore_noise(void **state)
{
    static struct egpu__controller c;
    struct egpu_kube_informer_cbs cbs[EGPU__CONTROLLER_NINF];
    json_t *gpu = tu_json("{'metadata': {'name': 'n1-0'}, 'spec': {'nodeName': 'n1', "
                          "'index': 0, 'uuid': 'GPU-1', 'model': 'A100', 'memory': 40960}}");
    json_t *gpu3 = tu_json("{'metadata': {'name': 'n1-0'}, 'spec': {'nodeName': 'n1', "
                           "'index': 0, 'uuid': 'GPU-1', 'model': 'A100', 'memory': 81920}}");
    json_t *extra = NULL;
    json_t *gpu2 = tu_json("{'metadata': {'name': 'n1-0'}, 'spec': {'nodeName': 'n1', "
                           "'index': 0, 'uuid': 'GPU-1', 'model': 'A100', 'memory': 40960},"
                           " 'status': {'allocated': []}}");
    json_t *b1 = tu_json("{'metadata': {'name': 'b', 'namespace': 'route', 'generation': 1}}");
    json_t *b1s = tu_json("{'metadata': {'name': 'b', 'namespace': 'route', 'generation': 1},"
                          " 'status': {'state': 'Within'}}");
    json_t *b2 = tu_json("{'metadata': {'name': 'b', 'namespace': 'route', 'generation': 2}}");
    json_t *pod = tu_json("{'metadata': {'name': 'p', 'namespace': 'route',"
                          " 'finalizers': ['elasticgpu.io/metering'],"
                          " 'deletionTimestamp': '2026-01-01T00:00:00Z'}}");

    (void)state;
    controller_up(&c);
    /* A claim still Pending: what a change of capacity queues again. */
    create(&egpu_kube_elasticgpuclaims, NS,
           "{'apiVersion': 'elasticgpu.io/v1alpha1', 'kind': 'ElasticGPUClaim',"
           " 'metadata': {'name': 'waiting', 'namespace': 'route'},"
           " 'spec': {'resources': {'requests': {'elasticgpu.io/gpu-core': '50'}}}}");
    expect_keys(&c, (const char *const[]){"c/" NS "/waiting", NULL}, &extra);
    json_decref(extra);
    egpu__controller_route_cbs(&c, cbs);
    for (int i = 0; i < EGPU__CONTROLLER_NINF; i++)
        assert_ptr_equal(cbs[i].ud, &c);
    /* A new GPU is capacity (the Pending claim again) and a card. */
    cbs[EGPU__CONTROLLER_GPUS].on_add(&c, gpu);
    expect_keys(&c, (const char *const[]){"g/n1/GPU-1", "c/" NS "/waiting", NULL}, NULL);
    /* Its status written: the card only, capacity is the same. */
    cbs[EGPU__CONTROLLER_GPUS].on_update(&c, gpu, gpu2);
    expect_keys(&c, (const char *const[]){"g/n1/GPU-1", NULL}, NULL);
    /* Its memory changed: capacity again. */
    cbs[EGPU__CONTROLLER_GPUS].on_update(&c, gpu2, gpu3);
    expect_keys(&c, (const char *const[]){"g/n1/GPU-1", "c/" NS "/waiting", NULL}, NULL);
    /* A budget's status write queues nothing; a spec change (generation)
     * queues its namespace. */
    cbs[EGPU__CONTROLLER_BUDGETS].on_update(&c, b1, b1s);
    expect_keys(&c, (const char *const[]){NULL}, NULL);
    cbs[EGPU__CONTROLLER_BUDGETS].on_update(&c, b1, b2);
    expect_keys(&c, (const char *const[]){"b/route", NULL}, NULL);
    /* A pod being deleted with the metering finalizer: meter its namespace
     * now. */
    cbs[EGPU__CONTROLLER_PODS].on_update(&c, pod, pod);
    expect_keys(&c, (const char *const[]){"b/route", NULL}, NULL);
    /* Missing names queue nothing. */
    egpu__controller_enqueue_claim(&c, NS, NULL);
    egpu__controller_enqueue_claim(&c, NS, "");
    egpu__controller_enqueue_egpu(&c, NULL);
    egpu__controller_enqueue_budgets(&c, "");
    expect_keys(&c, (const char *const[]){NULL}, NULL);
    controller_down(&c);
    json_decref(gpu);
    json_decref(gpu2);
    json_decref(gpu3);
    json_decref(b1);
    json_decref(b1s);
    json_decref(b2);
    json_decref(pod);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_informers_queue_keys, tks_reset_test),
        cmocka_unit_test_setup(test_callbacks_ignore_noise, tks_reset_test),
    };

    return cmocka_run_group_tests(tests, group_setup, tks_group_teardown);
}
