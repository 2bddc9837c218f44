/* tests/unit/test_sched_claims.c - pods that use claims in the extender
 * (docs/scheduler.md "Pods that use claims"): a claimed container placed on
 * its ElasticGPU's card is counted inside the ElasticGPU's reservation,
 * never beside it as well, whatever the order of the informers' events (the
 * ElasticGPU before or after the pod, deleted while the pod runs, a relist,
 * a node rebuilt); one pod at a time is counted inside; a
 * WaitForFirstConsumer claim's pod counts beside until its ElasticGPU
 * appears, then inside. filter passes only the bound claim's
 * node, refuses a second pod of a claim, an unapplied ElasticGPU and an
 * Immediate claim not bound yet, and keeps a WaitForFirstConsumer claim's
 * pod on its class's nodes; bind gives the claimed container the
 * ElasticGPU's card and annotates a WaitForFirstConsumer claim with the node
 * and card before binding the pod.
 */
#include <errno.h>
#include <stdlib.h>

#include "testutil.h"
#include "sched_testutil.h"
#include "egpu/scheduler.h"

#define NS "team"

static json_t *make_node(const char *name, const char *pool)
{
    return json_pack("{s:{s:s,s:{s:s}},s:{s:{s:s,s:s}}}", "metadata", "name", name, "labels",
                     "pool", pool, "status", "allocatable", "cpu", "64", "memory", "256Gi");
}

/* GPU object "<node>-gpu<index>", UUID "GPU-<node>-<index>", 40960 MiB. */
static json_t *make_gpu(const char *node, int index)
{
    char uuid[64], name[96];

    snprintf(uuid, sizeof(uuid), "GPU-%s-%d", node, index);
    snprintf(name, sizeof(name), "%s-gpu%d", node, index);
    return json_pack("{s:{s:s},s:{s:s,s:i,s:s,s:s,s:i}}", "metadata", "name", name, "spec",
                     "nodeName", node, "index", index, "uuid", uuid, "model", "A100", "memory",
                     40960);
}

/* A gpuShare ElasticGPU of core percent and mem MiB on gpu of node, whose
 * claimRef names claim (NULL: none) with uid (NULL: none), phase Bound. */
static json_t *make_egpu(const char *name, const char *node, const char *gpu, int core, int mem,
                         const char *claim, const char *uid)
{
    json_t *spec =
        json_pack("{s:{s:i,s:i},s:s,s:{s:s}}", "capacity", EGPU_RES_GPU_CORE, core,
                  EGPU_RES_GPU_MEMORY, mem, "nodeName", node, "gpuShare", "gpuName", gpu);

    if (claim != NULL)
        json_object_set_new(
            spec, "claimRef",
            json_pack("{s:s,s:s,s:s}", "namespace", NS, "name", claim, "uid", uid ? uid : ""));
    return json_pack("{s:s,s:s,s:{s:s},s:o,s:{s:s}}", "apiVersion", EGPU_API_VERSION, "kind",
                     EGPU_KIND_ELASTICGPU, "metadata", "name", name, "spec", spec, "status",
                     "phase", "Bound");
}

/* Claim NS/name of core percent and mem MiB, of class cls ("" = default),
 * bound to egpu (NULL: Pending). uid is "uid-<name>". */
static json_t *make_claim(const char *name, int core, int mem, const char *cls, const char *egpu)
{
    char uid[128];
    json_t *o;

    snprintf(uid, sizeof(uid), "uid-%s", name);
    o = json_pack("{s:s,s:s,s:{s:s,s:s,s:s},s:{s:{s:{s:i,s:i}},s:s}}", "apiVersion",
                  EGPU_API_VERSION, "kind", EGPU_KIND_ELASTICGPUCLAIM, "metadata", "name", name,
                  "namespace", NS, "uid", uid, "spec", "resources", "requests", EGPU_RES_GPU_CORE,
                  core, EGPU_RES_GPU_MEMORY, mem, "elasticGPUClassName", cls);
    json_object_set_new(o, "status",
                        egpu ? json_pack("{s:s,s:s}", "phase", "Bound", "elasticGPUName", egpu)
                             : json_pack("{s:s}", "phase", "Pending"));
    if (mem == 0) /* whole cards: no gpu-memory */
        json_object_del(
            json_object_get(json_object_get(json_object_get(o, "spec"), "resources"), "requests"),
            EGPU_RES_GPU_MEMORY);
    return o;
}

static json_t *make_class(const char *name, const char *mode, const char *selector)
{
    json_t *o = json_pack("{s:s,s:s,s:{s:s},s:s,s:s}", "apiVersion", EGPU_API_VERSION, "kind",
                          EGPU_KIND_ELASTICGPUCLASS, "metadata", "name", name, "provisioner",
                          EGPU_PROVISIONER_GPUSHARE, "bindingMode", mode);

    if (selector != NULL)
        json_object_set_new(o, "parameters", json_pack("{s:s}", "nodeSelector", selector));
    return o;
}

/* Pod NS/name with one container "main" asking core percent and mem MiB,
 * using claim (NULL: none); placed on node's card gpu (index; node NULL:
 * pending) with its elasticgpu.io/assigned. */
static json_t *make_pod(const char *name, int core, int mem, const char *claim, const char *node,
                        int gpu)
{
    json_t *reqs =
        json_pack("{s:s,s:s,s:o,s:o}", "cpu", "1", "memory", "1Gi", EGPU_RES_GPU_CORE,
                  json_sprintf("%d", core), EGPU_RES_GPU_MEMORY, json_sprintf("%d", mem));
    json_t *pod =
        json_pack("{s:{s:s,s:s,s:s,s:{}},s:{s:s,s:[{s:s,s:{s:o}}]},s:{s:s}}", "metadata", "name",
                  name, "namespace", NS, "uid", name, "annotations", "spec", "schedulerName",
                  EGPU_SCHEDULER_NAME_DEFAULT, "containers", "name", "main", "resources",
                  "requests", reqs, "status", "phase", node ? "Running" : "Pending");
    json_t *ann = json_object_get(json_object_get(pod, "metadata"), "annotations");

    if (claim != NULL)
        json_object_set_new(ann, EGPU_ANN_CLAIM_PREFIX "main", json_string(claim));
    if (node != NULL) {
        json_object_set_new(json_object_get(pod, "spec"), "nodeName", json_string(node));
        json_object_set_new(ann, EGPU_ANN_ASSIGNED,
                            json_sprintf("{\"node\":\"%s\",\"containers\":[{\"name\":\"main\","
                                         "\"core\":%d,\"memory\":%d,\"gpus\":[\"GPU-%s-%d\"]}]}",
                                         node, core, mem, node, gpu));
    }
    return pod;
}

static void put(struct egpu_sched_cache *c, json_t *o)
{
    struct egpu_error err = {0};
    const char *kind = json_string_value(json_object_get(o, "kind"));
    int rc;

    if (kind != NULL && strcmp(kind, EGPU_KIND_ELASTICGPU) == 0)
        rc = egpu_sched_cache_egpu_set(c, o, &err);
    else if (kind != NULL && strcmp(kind, EGPU_KIND_ELASTICGPUCLAIM) == 0)
        rc = egpu_sched_cache_claim_set(c, o, &err);
    else if (kind != NULL && strcmp(kind, EGPU_KIND_ELASTICGPUCLASS) == 0)
        rc = egpu_sched_cache_class_set(c, o, &err);
    else if (json_object_get(o, "status") != NULL &&
             json_object_get(json_object_get(o, "status"), "allocatable") != NULL)
        rc = egpu_sched_cache_node_set(c, o, &err);
    else if (json_object_get(json_object_get(o, "spec"), "uuid") != NULL)
        rc = egpu_sched_cache_gpu_set(c, o, &err);
    else
        rc = egpu_sched_cache_pod_set(c, o, &err);
    if (rc != 0)
        fail_msg("cache refused an object: %s", err.msg);
    json_decref(o);
}

/* Used milli-GPU on card index g of node. */
static uint32_t used(struct egpu_sched_cache *c, const char *node, int g)
{
    struct egpu_cluster *cl = egpu_sched_cache_lock(c);
    struct egpu_node *n = egpu_cluster_node(cl, node);
    uint32_t v = n && (uint32_t)g < n->ngpus ? n->gpus[g].used_core_milli : UINT32_MAX;

    egpu_sched_cache_unlock(c);
    return v;
}

static uint32_t used_mem(struct egpu_sched_cache *c, const char *node, int g)
{
    struct egpu_cluster *cl = egpu_sched_cache_lock(c);
    struct egpu_node *n = egpu_cluster_node(cl, node);
    uint32_t v = n && (uint32_t)g < n->ngpus ? n->gpus[g].used_mem_mib : UINT32_MAX;

    egpu_sched_cache_unlock(c);
    return v;
}

static struct egpu_sched_cache_stats stats(struct egpu_sched_cache *c)
{
    struct egpu_sched_cache_stats st;

    egpu_sched_cache_stats(c, &st);
    return st;
}

static struct egpu_sched_cache *cluster(void)
{
    struct egpu_sched_cache *c = egpu_sched_cache_new();

    assert_non_null(c);
    put(c, make_node("n1", "cpu"));
    put(c, make_gpu("n1", 0));
    put(c, make_node("n2", "gpu"));
    put(c, make_gpu("n2", 0));
    return c;
}

/* The claim's pod counts inside its ElasticGPU in every order of events:
 * the card holds 500 milli-GPU and 8192 MiB (the ElasticGPU's), never 1000. */
static void test_inside_every_order(void **state)
{
    (void)state;
    for (int order = 0; order < 4; order++) {
        struct egpu_sched_cache *c = cluster();

        put(c, make_claim("c1", 50, 8192, "", "e1"));
        if (order == 0) { /* the ElasticGPU, then the pod */
            put(c, make_egpu("e1", "n2", "n2-gpu0", 50, 8192, "c1", "uid-c1"));
            put(c, make_pod("p1", 50, 8192, "c1", "n2", 0));
        } else if (order == 1) { /* the pod, then the ElasticGPU */
            put(c, make_pod("p1", 50, 8192, "c1", "n2", 0));
            assert_int_equal(used(c, "n2", 0), 500); /* beside: nothing else holds it yet */
            put(c, make_egpu("e1", "n2", "n2-gpu0", 50, 8192, "c1", "uid-c1"));
        } else if (order == 2) { /* the pod before its node and card, then both */
            egpu_sched_cache_free(c);
            c = egpu_sched_cache_new();
            put(c, make_claim("c1", 50, 8192, "", "e1"));
            put(c, make_pod("p1", 50, 8192, "c1", "n2", 0));
            put(c, make_egpu("e1", "n2", "n2-gpu0", 50, 8192, "c1", "uid-c1"));
            put(c, make_gpu("n2", 0));
            put(c, make_node("n2", "gpu"));
        } else { /* the claim last */
            egpu_sched_cache_free(c);
            c = cluster();
            put(c, make_egpu("e1", "n2", "n2-gpu0", 50, 8192, "c1", "uid-c1"));
            put(c, make_pod("p1", 50, 8192, "c1", "n2", 0));
            put(c, make_claim("c1", 50, 8192, "", "e1"));
        }
        assert_int_equal(used(c, "n2", 0), 500);
        assert_int_equal(used_mem(c, "n2", 0), 8192);
        assert_int_equal(stats(c).inside, 1);
        assert_int_equal(stats(c).reservations[EGPU_SCHED_RESV_APPLIED], 1);
        assert_int_equal(stats(c).reservation_overfills, 0);
        assert_int_equal(stats(c).placed, 1);

        /* A relist: the same objects again, and the node rebuilt (a new card). */
        put(c, make_egpu("e1", "n2", "n2-gpu0", 50, 8192, "c1", "uid-c1"));
        put(c, make_pod("p1", 50, 8192, "c1", "n2", 0));
        put(c, make_claim("c1", 50, 8192, "", "e1"));
        put(c, make_gpu("n2", 1));
        assert_int_equal(used(c, "n2", 0), 500);
        assert_int_equal(stats(c).inside, 1);

        /* Another pod takes the other half beside it; none fits into it. */
        put(c, make_pod("other", 50, 1024, NULL, "n2", 0));
        assert_int_equal(used(c, "n2", 0), 1000);
        assert_int_equal(used_mem(c, "n2", 0), 8192 + 1024);

        /* The ElasticGPU deleted while the pod runs: the pod counts beside. */
        assert_int_equal(egpu_sched_cache_egpu_delete(c, "e1"), 0);
        assert_int_equal(used(c, "n2", 0), 1000);
        assert_int_equal(stats(c).inside, 0);
        assert_int_equal(stats(c).placed, 2);
        /* and back: inside again, not overfilled */
        put(c, make_egpu("e1", "n2", "n2-gpu0", 50, 8192, "c1", "uid-c1"));
        assert_int_equal(used(c, "n2", 0), 1000);
        assert_int_equal(stats(c).inside, 1);
        assert_int_equal(stats(c).reservations[EGPU_SCHED_RESV_OVERFILL], 0);

        /* The pod goes: the ElasticGPU alone holds its half. */
        assert_int_equal(egpu_sched_cache_pod_delete(c, NS, "p1"), 0);
        assert_int_equal(used(c, "n2", 0), 1000);
        assert_int_equal(egpu_sched_cache_pod_delete(c, NS, "other"), 0);
        assert_int_equal(used(c, "n2", 0), 500);
        assert_int_equal(egpu_sched_cache_egpu_delete(c, "e1"), 0);
        assert_int_equal(used(c, "n2", 0), 0);
        assert_int_equal(used_mem(c, "n2", 0), 0);
        egpu_sched_cache_free(c);
    }
}

/* One pod at a time inside: a second pod of the claim on the same card
 * counts beside, and moves inside when the first goes. A pod of another
 * claim, or whose claimRef.uid is another claim's, never goes inside. */
static void test_one_pod_inside(void **state)
{
    struct egpu_sched_cache *c = cluster();

    (void)state;
    put(c, make_claim("c1", 30, 1024, "", "e1"));
    put(c, make_egpu("e1", "n2", "n2-gpu0", 30, 1024, "c1", "uid-c1"));
    put(c, make_pod("p1", 30, 1024, "c1", "n2", 0));
    put(c, make_pod("p2", 30, 1024, "c1", "n2", 0));
    assert_int_equal(used(c, "n2", 0), 600);
    assert_int_equal(stats(c).inside, 1);
    assert_int_equal(egpu_sched_cache_pod_delete(c, NS, "p1"), 0);
    assert_int_equal(used(c, "n2", 0), 300);
    assert_int_equal(stats(c).inside, 1);
    /* finished: the ElasticGPU alone */
    put(c, make_pod("p2", 30, 1024, "c1", NULL, 0));
    assert_int_equal(used(c, "n2", 0), 300);
    assert_int_equal(stats(c).inside, 0);

    /* The ElasticGPU names the claim by another uid (an older claim of the
     * same name): it does not serve this one. */
    put(c, make_egpu("e1", "n2", "n2-gpu0", 30, 1024, "c1", "uid-old"));
    put(c, make_pod("p3", 30, 1024, "c1", "n2", 0));
    assert_int_equal(used(c, "n2", 0), 600);
    assert_int_equal(stats(c).inside, 0);
    /* fixed: inside */
    put(c, make_egpu("e1", "n2", "n2-gpu0", 30, 1024, "c1", "uid-c1"));
    assert_int_equal(used(c, "n2", 0), 300);
    assert_int_equal(stats(c).inside, 1);
    /* A pod asking more than the ElasticGPU holds is not hidden inside it. */
    put(c, make_pod("p3", 30, 1024, NULL, NULL, 0));
    put(c, make_pod("p4", 40, 1024, "c1", "n2", 0));
    assert_int_equal(used(c, "n2", 0), 700);
    assert_int_equal(stats(c).inside, 0);
    egpu_sched_cache_free(c);
}

/* WaitForFirstConsumer: the pod is bound before its ElasticGPU exists and
 * counts beside; the ElasticGPU provisioned on its card takes it inside. */
static void test_wffc_beside_then_inside(void **state)
{
    struct egpu_sched_cache *c = cluster();

    (void)state;
    put(c, make_class("late", "WaitForFirstConsumer", NULL));
    put(c, make_claim("c2", 30, 2048, "late", NULL));
    put(c, make_pod("p1", 30, 2048, "c2", "n1", 0));
    assert_int_equal(used(c, "n1", 0), 300);
    assert_int_equal(stats(c).inside, 0);
    put(c, make_egpu("egpu-uid-c2", "n1", "n1-gpu0", 30, 2048, "c2", "uid-c2"));
    assert_int_equal(used(c, "n1", 0), 300);
    assert_int_equal(used_mem(c, "n1", 0), 2048);
    assert_int_equal(stats(c).inside, 1);
    assert_int_equal(stats(c).reservations[EGPU_SCHED_RESV_APPLIED], 1);
    /* the claim then reads Bound: nothing moves */
    put(c, make_claim("c2", 30, 2048, "late", "egpu-uid-c2"));
    assert_int_equal(used(c, "n1", 0), 300);
    assert_int_equal(stats(c).inside, 1);
    /* the claim deleted while its pod runs: the ElasticGPU still names it */
    assert_int_equal(egpu_sched_cache_claim_delete(c, NS, "c2"), 0);
    assert_int_equal(used(c, "n1", 0), 300);
    /* Released: it serves nobody, the pod counts beside it */
    {
        json_t *e = make_egpu("egpu-uid-c2", "n1", "n1-gpu0", 30, 2048, "c2", "uid-c2");

        json_object_set_new(e, "status", json_pack("{s:s}", "phase", "Released"));
        put(c, e);
    }
    assert_int_equal(used(c, "n1", 0), 600);
    assert_int_equal(stats(c).inside, 0);
    egpu_sched_cache_free(c);
}

/* Whole cards: a physicalGPU ElasticGPU's card holds its pod once. */
static void test_whole_cards_inside(void **state)
{
    struct egpu_sched_cache *c = cluster();
    json_t *e = json_pack("{s:s,s:s,s:{s:s},s:{s:{s:i},s:s,s:{s:[s]},s:{s:s,s:s,s:s}},s:{s:s}}",
                          "apiVersion", EGPU_API_VERSION, "kind", EGPU_KIND_ELASTICGPU, "metadata",
                          "name", "whole", "spec", "capacity", EGPU_RES_GPU_CORE, 100, "nodeName",
                          "n1", "physicalGPU", "gpuNames", "n1-gpu0", "claimRef", "namespace", NS,
                          "name", "cw", "uid", "uid-cw", "status", "phase", "Bound");

    (void)state;
    put(c, make_claim("cw", 100, 0, "", "whole"));
    put(c, make_pod("pw", 100, 0, "cw", "n1", 0));
    assert_int_equal(used(c, "n1", 0), 1000);
    put(c, e);
    assert_int_equal(used(c, "n1", 0), 1000);
    assert_int_equal(used_mem(c, "n1", 0), 40960);
    assert_int_equal(stats(c).inside, 1);
    assert_int_equal(stats(c).reservations[EGPU_SCHED_RESV_APPLIED], 1);
    assert_int_equal(egpu_sched_cache_pod_delete(c, NS, "pw"), 0);
    assert_int_equal(used(c, "n1", 0), 1000);
    assert_int_equal(stats(c).inside, 0);
    egpu_sched_cache_free(c);
}

/* ---- any order of events: the cache always equals a fresh one ---- */

#define RND_EGPUS 3 /* e<i> on card i of cards[] (30%, 4096 MiB), claimRef c<i> */
#define RND_PODS  4 /* p<j>: uses claim c<j % 3>, 20% and 2048 MiB */

static const char *const rnd_node[] = {"n1", "n1", "n2", "n2"};
static const int rnd_gpu[] = {0, 1, 0, 1}; /* card 3 (n2-gpu1) holds no ElasticGPU */

struct world {
    json_t *egpu[RND_EGPUS], *claim[RND_EGPUS], *pod[RND_PODS]; /* NULL = absent */
};

static uint64_t rnd_next(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static void world_put(json_t **slot, json_t *o)
{
    json_decref(*slot);
    *slot = o;
}

/* A fresh cache of the world's objects, in one of two orders. */
static struct egpu_sched_cache *fresh(const struct world *w, bool pods_first)
{
    struct egpu_sched_cache *c = cluster();

    put(c, make_gpu("n1", 1));
    put(c, make_gpu("n2", 1));
    for (int i = 0; pods_first && i < RND_PODS; i++)
        if (w->pod[i] != NULL)
            put(c, json_incref(w->pod[i]));
    for (int i = 0; i < RND_EGPUS; i++) {
        if (w->claim[i] != NULL)
            put(c, json_incref(w->claim[i]));
        if (w->egpu[i] != NULL)
            put(c, json_incref(w->egpu[i]));
    }
    for (int i = 0; !pods_first && i < RND_PODS; i++)
        if (w->pod[i] != NULL)
            put(c, json_incref(w->pod[i]));
    return c;
}

/* Each card's used core and memory, and the containers inside, equal. */
static void same_counts(struct egpu_sched_cache *a, struct egpu_sched_cache *b, int step)
{
    for (int k = 0; k < 4; k++) {
        if (used(a, rnd_node[k], rnd_gpu[k]) != used(b, rnd_node[k], rnd_gpu[k]) ||
            used_mem(a, rnd_node[k], rnd_gpu[k]) != used_mem(b, rnd_node[k], rnd_gpu[k]))
            fail_msg("step %d: card %s-gpu%d holds %u milli-GPU %u MiB, a fresh cache %u %u", step,
                     rnd_node[k], rnd_gpu[k], used(a, rnd_node[k], rnd_gpu[k]),
                     used_mem(a, rnd_node[k], rnd_gpu[k]), used(b, rnd_node[k], rnd_gpu[k]),
                     used_mem(b, rnd_node[k], rnd_gpu[k]));
        assert_true(used(a, rnd_node[k], rnd_gpu[k]) <= 1000);
    }
    assert_int_equal(stats(a).inside, stats(b).inside);
    assert_int_equal(stats(a).placed, stats(b).placed);
    assert_int_equal(stats(a).reservations[EGPU_SCHED_RESV_APPLIED],
                     stats(b).reservations[EGPU_SCHED_RESV_APPLIED]);
}

/* 3,000 random events (ElasticGPUs bound, Released, Failed, with another
 * claim's uid, deleted; claims Bound, Pending, deleted; pods placed on their
 * ElasticGPU's card or elsewhere, finished, pending, deleted; a card's node
 * rebuilt): after each, every card holds exactly what a cache built afresh
 * from the objects there now holds, in either order of kinds. */
static void test_any_order_equals_fresh(void **state)
{
    struct egpu_sched_cache *c = cluster();
    struct world w = {0};
    uint64_t x = 0x9e3779b97f4a7c15ULL;
    int placed[RND_PODS] = {-1, -1, -1, -1}; /* the card each pod is placed on, -1 none */

    (void)state;
    if (getenv("RND_SEED") != NULL) /* to explore other sequences by hand */
        x = strtoull(getenv("RND_SEED"), NULL, 0) | 1;
    put(c, make_gpu("n1", 1));
    put(c, make_gpu("n2", 1));
    for (int step = 0; step < 3000; step++) {
        int what = (int)(rnd_next(&x) % 10), i = (int)(rnd_next(&x) % RND_EGPUS);
        int j = (int)(rnd_next(&x) % RND_PODS), v = (int)(rnd_next(&x) % 4);
        char e[16], cl[16], pn[16], gpu[32];
        struct egpu_sched_cache *f;

        snprintf(e, sizeof(e), "e%d", i);
        snprintf(cl, sizeof(cl), "c%d", i);
        snprintf(gpu, sizeof(gpu), "%s-gpu%d", rnd_node[i], rnd_gpu[i]);
        if (what <= 1) { /* an ElasticGPU set */
            json_t *o = make_egpu(e, rnd_node[i], gpu, 30, 4096, cl, v == 3 ? "uid-old" : "");

            if (v != 3) {
                char uid[32];

                snprintf(uid, sizeof(uid), "uid-%s", cl);
                json_object_set_new(json_object_get(json_object_get(o, "spec"), "claimRef"), "uid",
                                    json_string(uid));
            }
            if (v == 1 || v == 2)
                json_object_set_new(o, "status",
                                    json_pack("{s:s}", "phase", v == 1 ? "Released" : "Failed"));
            world_put(&w.egpu[i], json_incref(o));
            put(c, o);
        } else if (what == 2) {
            world_put(&w.egpu[i], NULL);
            assert_int_equal(egpu_sched_cache_egpu_delete(c, e), 0);
        } else if (what == 3) {
            json_t *o = make_claim(cl, 20, 2048, "", v < 2 ? e : NULL);

            world_put(&w.claim[i], json_incref(o));
            put(c, o);
        } else if (what == 4) {
            world_put(&w.claim[i], NULL);
            assert_int_equal(egpu_sched_cache_claim_delete(c, NS, cl), 0);
        } else if (what <= 7) { /* a pod set: on its claim's card, card 3, or not placed */
            int k = j % RND_EGPUS;
            json_t *o;

            snprintf(pn, sizeof(pn), "p%d", j);
            snprintf(cl, sizeof(cl), "c%d", k);
            o = v == 0   ? make_pod(pn, 20, 2048, cl, NULL, 0)
                : v == 1 ? make_pod(pn, 20, 2048, cl, rnd_node[3], rnd_gpu[3])
                         : make_pod(pn, 20, 2048, cl, rnd_node[k], rnd_gpu[k]);
            if (v == 3) /* finished */
                json_object_set_new(o, "status", json_pack("{s:s}", "phase", "Succeeded"));
            /* A bound pod never moves (its elasticgpu.io/assigned is kept as
             * first seen): one on another card is a new pod of that name. */
            if (placed[j] >= 0 && placed[j] != (v == 0 ? -1 : v == 1 ? 3 : k))
                assert_int_equal(egpu_sched_cache_pod_delete(c, NS, pn), 0);
            placed[j] = v == 0 ? -1 : v == 1 ? 3 : k;
            world_put(&w.pod[j], json_incref(o));
            put(c, o);
        } else if (what == 8) {
            snprintf(pn, sizeof(pn), "p%d", j);
            world_put(&w.pod[j], NULL);
            placed[j] = -1;
            assert_int_equal(egpu_sched_cache_pod_delete(c, NS, pn), 0);
        } else { /* a node rebuilt: its card changes and changes back */
            json_t *g = make_gpu(rnd_node[i], 1);

            json_object_set_new(json_object_get(g, "spec"), "memory", json_integer(40000));
            put(c, g);
            put(c, make_gpu(rnd_node[i], 1));
        }
        if (getenv("RND_TRACE") != NULL)
            fprintf(stderr, "step %d: what=%d i=%d j=%d v=%d inside=%zu\n", step, what, i, j, v,
                    stats(c).inside);
        f = fresh(&w, false);
        same_counts(c, f, step);
        egpu_sched_cache_free(f);
        f = fresh(&w, true);
        same_counts(c, f, step);
        egpu_sched_cache_free(f);
    }
    for (int i = 0; i < RND_EGPUS; i++) {
        json_decref(w.egpu[i]);
        json_decref(w.claim[i]);
    }
    for (int j = 0; j < RND_PODS; j++)
        json_decref(w.pod[j]);
    egpu_sched_cache_free(c);
}

/* ---- filter and bind ---- */

struct calls {
    int annotated, bound, claims;
    char assigned[2048];
    char claim[128], node[128], gpus[256];
    char order[64]; /* "c" claim annotated, "a" pod annotated, "b" bound */
};

/* Append text to the C string buf of len bytes. */
static void add(char *buf, size_t len, const char *text)
{
    size_t n = strlen(buf);

    snprintf(buf + n, len - n, "%s", text);
}

static bool synced(void *data)
{
    (void)data;
    return true;
}

static int fake_annotate(void *data, const char *ns, const char *name, const char *key,
                         const char *value, struct egpu_error *err)
{
    struct calls *k = data;

    (void)ns, (void)name, (void)err;
    if (value != NULL && strcmp(key, EGPU_ANN_ASSIGNED) == 0)
        snprintf(k->assigned, sizeof(k->assigned), "%s", value);
    k->annotated++;
    add(k->order, sizeof(k->order), "a");
    return 0;
}

static int fake_annotate_claim(void *data, const char *ns, const char *name, const char *node,
                               const char *gpus, struct egpu_error *err)
{
    struct calls *k = data;

    (void)err;
    snprintf(k->claim, sizeof(k->claim), "%s/%s", ns, name);
    snprintf(k->node, sizeof(k->node), "%s", node);
    snprintf(k->gpus, sizeof(k->gpus), "%s", gpus);
    k->claims++;
    add(k->order, sizeof(k->order), "c");
    return 0;
}

static int fake_bind(void *data, const char *ns, const char *name, const char *uid,
                     const char *node, struct egpu_error *err)
{
    struct calls *k = data;

    (void)ns, (void)name, (void)uid, (void)node, (void)err;
    k->bound++;
    add(k->order, sizeof(k->order), "b");
    return 0;
}

/* filter pod (a reference, kept) on n1 and n2: the passing names joined
 * with ',' into pass, n1's and n2's reasons ("" when they pass). */
static void filter(struct egpu_extender *x, json_t *pod, char *pass, char *why1, char *why2)
{
    const char *const nodes[] = {"n1", "n2"};
    char *body = tu_extender_args(json_incref(pod), nodes, 2, false);
    struct egpu_buf reply;
    json_t *out, *v;
    size_t i;

    egpu_buf_init(&reply, 1 << 20);
    assert_int_equal(egpu_extender_filter(x, body, strlen(body), &reply), 200);
    out = json_loads(egpu_buf_str(&reply), 0, NULL);
    assert_non_null(out);
    pass[0] = '\0';
    json_array_foreach(json_object_get(out, "NodeNames"), i, v)
    {
        add(pass, 256, i ? "," : "");
        add(pass, 256, json_string_value(v));
    }
    v = json_object_get(json_object_get(out, "FailedNodes"), "n1");
    snprintf(why1, 1024, "%s", v ? json_string_value(v) : "");
    v = json_object_get(json_object_get(out, "FailedNodes"), "n2");
    snprintf(why2, 1024, "%s", v ? json_string_value(v) : "");
    json_decref(out);
    egpu_buf_free(&reply);
    free(body);
}

static int bind(struct egpu_extender *x, const char *pod, const char *node, char *msg)
{
    char body[256];
    struct egpu_buf reply;
    int status;

    snprintf(body, sizeof(body), "{\"PodName\":\"%s\",\"PodNamespace\":\"%s\",\"Node\":\"%s\"}",
             pod, NS, node);
    egpu_buf_init(&reply, 1 << 16);
    status = egpu_extender_bind(x, body, strlen(body), &reply);
    snprintf(msg, 2048, "%s", egpu_buf_str(&reply));
    egpu_buf_free(&reply);
    return status;
}

/* A binpack extender over c whose API calls k records. */
static struct egpu_extender *claims_extender(struct egpu_sched_cache *c, struct calls *k)
{
    struct egpu_extender_ops ops = {.data = k,
                                    .synced = synced,
                                    .annotate = fake_annotate,
                                    .annotate_claim = fake_annotate_claim,
                                    .bind = fake_bind};
    struct egpu_extender_config cfg = {.node_policy = EGPU_POLICY_BINPACK,
                                       .card_policy = EGPU_POLICY_BINPACK};
    struct egpu_error err = {0};

    return egpu_extender_new(&cfg, c, &ops, &err);
}

static void test_filter_and_bind_bound_claim(void **state)
{
    struct egpu_sched_cache *c = cluster();
    struct calls k = {0};
    struct egpu_extender *x = claims_extender(c, &k);
    char pass[256], why1[1024], why2[1024], msg[2048];
    json_t *pod;

    (void)state;
    assert_non_null(x);
    put(c, make_gpu("n2", 1));
    put(c, make_claim("c1", 50, 8192, "", "e1"));
    /* Waiting: its card is not known yet. */
    put(c, make_egpu("e1", "n2", "n2-gpu7", 50, 8192, "c1", "uid-c1"));
    pod = make_pod("p1", 50, 8192, "c1", NULL, 0);
    put(c, json_incref(pod));
    filter(x, pod, pass, why1, why2);
    assert_string_equal(pass, "");
    assert_non_null(strstr(why2, "claim c1: its ElasticGPU e1 on node n2 holds nothing yet "
                                 "(waiting): GPU n2-gpu7 is not known on node n2"));
    /* Applied on n2's second card: only n2 passes, although n1 has room. */
    put(c, make_egpu("e1", "n2", "n2-gpu1", 50, 8192, "c1", "uid-c1"));
    filter(x, pod, pass, why1, why2);
    assert_string_equal(pass, "n2");
    assert_string_equal(why1, "claim c1 is bound to ElasticGPU e1 on node n2");
    assert_int_equal(bind(x, "p1", "n1", msg), 200);
    assert_string_equal(msg, "{\"Error\":\"claim c1 is bound to ElasticGPU e1 on node n2\"}");
    assert_int_equal(k.annotated + k.bound, 0);
    assert_int_equal(bind(x, "p1", "n2", msg), 200);
    assert_string_equal(msg, "{\"Error\":\"\"}");
    assert_string_equal(k.assigned, "{\"node\":\"n2\",\"containers\":[{\"name\":\"main\",\"core\":"
                                    "50,\"memory\":8192,\"gpus\":[\"GPU-n2-1\"]}]}");
    assert_string_equal(k.order, "ab");
    assert_int_equal(k.claims, 0);
    /* Counted inside: the card holds the ElasticGPU's half only. */
    assert_int_equal(used(c, "n2", 1), 500);
    assert_int_equal(used(c, "n2", 0), 0);
    assert_int_equal(stats(c).inside, 1);
    /* The watch confirms it: still inside. */
    put(c, make_pod("p1", 50, 8192, "c1", "n2", 1));
    assert_int_equal(used(c, "n2", 1), 500);
    assert_int_equal(stats(c).inside, 1);
    json_decref(pod);

    /* A second pod of the claim is refused, naming the first. */
    pod = make_pod("p2", 50, 8192, "c1", NULL, 0);
    put(c, json_incref(pod));
    filter(x, pod, pass, why1, why2);
    assert_string_equal(pass, "");
    assert_string_equal(why2, "claim c1 is in use by pod team/p1 on node n2; a claim serves one "
                              "running pod at a time");
    json_decref(pod);

    /* Other pods never go into the reserved half: 60% fits only n1 (n2's
     * cards: one half reserved, the other 0% used, so card 0 takes it). */
    put(c, make_pod("big", 60, 0, NULL, "n2", 0));
    pod = make_pod("q", 60, 0, NULL, NULL, 0);
    put(c, json_incref(pod));
    filter(x, pod, pass, why1, why2);
    assert_string_equal(pass, "n1");
    json_decref(pod);

    /* An Immediate claim not bound yet. */
    put(c, make_class("now", "Immediate", NULL));
    put(c, make_claim("c3", 20, 1024, "now", NULL));
    pod = make_pod("p3", 20, 1024, "c3", NULL, 0);
    put(c, json_incref(pod));
    filter(x, pod, pass, why1, why2);
    assert_string_equal(pass, "");
    assert_string_equal(why1, "claim c3 is not bound yet (class now, bindingMode Immediate)");
    json_decref(pod);
    /* A claim that does not exist. */
    pod = make_pod("p4", 20, 1024, "nope", NULL, 0);
    put(c, json_incref(pod));
    filter(x, pod, pass, why1, why2);
    assert_string_equal(pass, "");
    assert_string_equal(why1, "claim team/nope not found");
    json_decref(pod);
    egpu_extender_free(x);
    egpu_sched_cache_free(c);
}

/* Issue 14 point 3 for pods that use claims: filter steers them around a
 * node where bind would refuse them as ambiguous. w (50%, 8192 MiB, no
 * claim) is placed on n2's card 0 and not yet allocated; p1's claim is
 * bound to e1 on n2's card 1, the same gpu-core and memory on another
 * card: the kubelet could confuse the two. Before, filter passed n2 and
 * bind refused it; now filter fails n2 with bind's reason, and passes it
 * again once w is allocated. */
static void test_claim_pod_steered_around_ambiguity(void **state)
{
    struct egpu_sched_cache *c = cluster();
    struct calls k = {0};
    struct egpu_extender *x = claims_extender(c, &k);
    char pass[256], why1[1024], why2[1024], msg[2048];
    json_t *pod, *w;

    (void)state;
    assert_non_null(x);
    put(c, make_gpu("n2", 1));
    put(c, make_claim("c1", 50, 8192, "", "e1"));
    put(c, make_egpu("e1", "n2", "n2-gpu1", 50, 8192, "c1", "uid-c1"));
    w = make_pod("w", 50, 8192, NULL, "n2", 0);
    put(c, json_incref(w));
    pod = make_pod("p1", 50, 8192, "c1", NULL, 0);
    put(c, json_incref(pod));
    filter(x, pod, pass, why1, why2);
    assert_string_equal(pass, "");
    assert_string_equal(why1, "claim c1 is bound to ElasticGPU e1 on node n2");
    assert_non_null(strstr(why2, "pod team/w placed on node n2 is not yet allocated"));
    assert_int_equal(bind(x, "p1", "n2", msg), 200);
    assert_non_null(strstr(msg, "not yet allocated"));
    assert_int_equal(k.annotated + k.bound, 0);
    /* The agent marks w allocated: n2 passes and bind places p1 there. */
    json_object_set_new(json_object_get(json_object_get(w, "metadata"), "annotations"),
                        EGPU_ANN_ALLOCATED, json_string("true"));
    put(c, w);
    filter(x, pod, pass, why1, why2);
    assert_string_equal(pass, "n2");
    assert_string_equal(why2, "");
    assert_int_equal(bind(x, "p1", "n2", msg), 200);
    assert_string_equal(msg, "{\"Error\":\"\"}");
    json_decref(pod);
    egpu_extender_free(x);
    egpu_sched_cache_free(c);
}

static void test_bind_wffc_marks_claim(void **state)
{
    struct egpu_sched_cache *c = cluster();
    struct calls k = {0};
    struct egpu_extender *x = claims_extender(c, &k);
    char pass[256], why1[1024], why2[1024], msg[2048];
    json_t *pod;

    (void)state;
    assert_non_null(x);
    put(c, make_class("late", "WaitForFirstConsumer", "pool=gpu"));
    put(c, make_claim("c2", 30, 2048, "late", NULL));
    pod = make_pod("p1", 30, 2048, "c2", NULL, 0);
    put(c, json_incref(pod));
    filter(x, pod, pass, why1, why2);
    assert_string_equal(pass, "n2");
    assert_string_equal(why1, "claim c2: node n1 is not one of class late's nodes (nodeSelector "
                              "pool=gpu)");
    json_decref(pod);
    assert_int_equal(bind(x, "p1", "n1", msg), 200);
    assert_non_null(strstr(msg, "node n1 is not one of class late's nodes"));
    assert_int_equal(k.claims + k.annotated + k.bound, 0);
    assert_int_equal(bind(x, "p1", "n2", msg), 200);
    assert_string_equal(msg, "{\"Error\":\"\"}");
    assert_string_equal(k.order, "cab");
    assert_string_equal(k.claim, NS "/c2");
    assert_string_equal(k.node, "n2");
    assert_string_equal(k.gpus, "n2-gpu0");
    assert_string_equal(k.assigned, "{\"node\":\"n2\",\"containers\":[{\"name\":\"main\",\"core\":"
                                    "30,\"memory\":2048,\"gpus\":[\"GPU-n2-0\"]}]}");
    /* Beside until its ElasticGPU comes, then inside. */
    assert_int_equal(used(c, "n2", 0), 300);
    put(c, make_egpu("egpu-uid-c2", "n2", "n2-gpu0", 30, 2048, "c2", "uid-c2"));
    assert_int_equal(used(c, "n2", 0), 300);
    assert_int_equal(stats(c).inside, 1);
    egpu_extender_free(x);
    egpu_sched_cache_free(c);
}

static int check_leaks(void **state)
{
    (void)state;
    assert_int_equal(egpu_alloc_live(), 0);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_inside_every_order, check_leaks),
        cmocka_unit_test_teardown(test_one_pod_inside, check_leaks),
        cmocka_unit_test_teardown(test_wffc_beside_then_inside, check_leaks),
        cmocka_unit_test_teardown(test_whole_cards_inside, check_leaks),
        cmocka_unit_test_teardown(test_any_order_equals_fresh, check_leaks),
        cmocka_unit_test_teardown(test_filter_and_bind_bound_claim, check_leaks),
        cmocka_unit_test_teardown(test_claim_pod_steered_around_ambiguity, check_leaks),
        cmocka_unit_test_teardown(test_bind_wffc_marks_claim, check_leaks),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
