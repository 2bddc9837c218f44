/* tests/unit/test_sched_resv.c - ElasticGPU reservations in the extender's
 * cache (what egpu-controller provisions for claims, docs/claims.md): the
 * capacity an ElasticGPU holds counts as allocated on its cards, in any order
 * of informer events; Failed and deleted ones free it; two that overfill a
 * card leave the second out (never a negative free); malformed ones change
 * nothing; filter sees reserved capacity as taken.
 * Also egpu_api_egpu_reservation and egpu_cluster_reserve, the shared parts.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "testutil.h"
#include "sched_testutil.h"
#include "egpu/scheduler.h"

static json_t *make_node(const char *name)
{
    return json_pack("{s:{s:s},s:{s:{s:s,s:s}}}", "metadata", "name", name, "status", "allocatable",
                     "cpu", "64", "memory", "256Gi");
}

/* GPU object "<node>-gpu<index>", UUID "GPU-<node>-<index>", 40960 MiB. */
static json_t *make_gpu(const char *node, int index)
{
    char uuid[64], name[96];

    snprintf(uuid, sizeof(uuid), "GPU-%s-%d", node, index);
    snprintf(name, sizeof(name), "%s-gpu%d", node, index);
    return json_pack("{s:{s:s},s:{s:s,s:i,s:s,s:s,s:i},s:{s:s}}", "metadata", "name", name, "spec",
                     "nodeName", node, "index", index, "uuid", uuid, "model", "A100", "memory",
                     40960, "status", "health", "Healthy");
}

/* An ElasticGPU: gpuShare of gpu (core percent, mem MiB, 0 = none) when
 * ngpus is 0, else physicalGPU of gpus[0..ngpus); phase NULL = no status. */
static json_t *make_egpu(const char *name, const char *node, int core, int mem, const char *gpu,
                         const char *const *gpus, int ngpus, const char *phase)
{
    json_t *cap = json_pack("{s:i}", EGPU_RES_GPU_CORE, core);
    json_t *spec, *o;

    if (mem > 0)
        json_object_set_new(cap, EGPU_RES_GPU_MEMORY, json_integer(mem));
    spec = json_pack("{s:o,s:s}", "capacity", cap, "nodeName", node);
    if (ngpus == 0) {
        json_object_set_new(spec, "gpuShare", json_pack("{s:s}", "gpuName", gpu));
    } else {
        json_t *names = json_array();

        for (int i = 0; i < ngpus; i++)
            json_array_append_new(names, json_string(gpus[i]));
        json_object_set_new(spec, "physicalGPU", json_pack("{s:o}", "gpuNames", names));
    }
    o = json_pack("{s:s,s:s,s:{s:s},s:o}", "apiVersion", EGPU_API_VERSION, "kind",
                  EGPU_KIND_ELASTICGPU, "metadata", "name", name, "spec", spec);
    if (phase != NULL)
        json_object_set_new(o, "status", json_pack("{s:s}", "phase", phase));
    return o;
}

static void node_set(struct egpu_sched_cache *c, const char *name)
{
    struct egpu_error err = {0};
    json_t *n = make_node(name);

    if (egpu_sched_cache_node_set(c, n, &err) != 0)
        fail_msg("node: %s", err.msg);
    json_decref(n);
}

static void gpu_set(struct egpu_sched_cache *c, const char *node, int index)
{
    struct egpu_error err = {0};
    json_t *g = make_gpu(node, index);

    if (egpu_sched_cache_gpu_set(c, g, &err) != 0)
        fail_msg("gpu: %s", err.msg);
    json_decref(g);
}

static void egpu_set(struct egpu_sched_cache *c, json_t *e)
{
    struct egpu_error err = {0};

    if (egpu_sched_cache_egpu_set(c, e, &err) != 0)
        fail_msg("ElasticGPU: %s", err.msg);
    json_decref(e);
}

/* Used milli-GPU and MiB on card index g of node, or UINT32_MAX for none. */
static uint32_t card_used(struct egpu_sched_cache *c, const char *node, int g, bool mem)
{
    struct egpu_cluster *cl = egpu_sched_cache_lock(c);
    struct egpu_node *n = egpu_cluster_node(cl, node);
    uint32_t v = n && (uint32_t)g < n->ngpus
                     ? (mem ? n->gpus[g].used_mem_mib : n->gpus[g].used_core_milli)
                     : UINT32_MAX;

    egpu_sched_cache_unlock(c);
    return v;
}

static struct egpu_sched_cache_stats stats(struct egpu_sched_cache *c)
{
    struct egpu_sched_cache_stats st;

    egpu_sched_cache_stats(c, &st);
    return st;
}

/* The shared parts: what an ElasticGPU reserves, by phase and source. */
static void test_api_reservation(void **state)
{
    static const char *const phases[] = {NULL,    "Pending",  "Available",
                                         "Bound", "Released", "Failed"};
    const char *const two[] = {"n1-gpu0", "n1-gpu1"};
    struct egpu_api_egpu e;
    struct egpu_reservation r;
    struct egpu_error err = {0};

    (void)state;
    for (size_t i = 0; i < sizeof(phases) / sizeof(phases[0]); i++) {
        json_t *o = make_egpu("e", "n1", 30, 2048, "n1-gpu1", NULL, 0, phases[i]);
        bool held;

        assert_int_equal(egpu_api_egpu_decode(o, &e, &err), 0);
        held = egpu_api_egpu_reservation(&e, &r);
        json_decref(o);
        if (i == 5) {
            assert_false(held);
            assert_int_equal(r.ncards, 0);
            continue;
        }
        assert_true(held);
        assert_int_equal(r.core_milli, 300);
        assert_int_equal(r.mem_mib, 2048);
        assert_int_equal(r.ncards, 1);
        assert_string_equal(r.uuids[0], "n1-gpu1");
    }
    {
        json_t *o = make_egpu("w", "n1", 200, 0, NULL, two, 2, "Bound");

        assert_int_equal(egpu_api_egpu_decode(o, &e, &err), 0);
        json_decref(o);
    }
    assert_true(egpu_api_egpu_reservation(&e, &r));
    assert_int_equal(r.core_milli, EGPU_GPU_MILLI);
    assert_int_equal(r.mem_mib, 0);
    assert_int_equal(r.ncards, 2);
    assert_string_equal(r.uuids[1], "n1-gpu1");
}

/* egpu_cluster_reserve: shares, whole cards, what does not fit, and the
 * release through egpu_cluster_release. */
static void test_core_reserve(void **state)
{
    struct egpu_cluster *c = egpu_cluster_new();
    struct egpu_node *n = tu_add_node(c, "n1", 8000, 16384, 2, "A100", 1000);
    struct egpu_reservation share = {
        .core_milli = 600, .mem_mib = 700, .ncards = 1, .uuids = {"n1-gpu0"}};
    struct egpu_reservation whole = {
        .core_milli = 1000, .ncards = 2, .uuids = {"n1-gpu0", "n1-gpu1"}};
    struct egpu_error err = {0};

    (void)state;
    assert_int_equal(egpu_cluster_reserve(c, "elasticgpu:a", n, &share, &err), 0);
    assert_int_equal(n->gpus[0].used_core_milli, 600);
    assert_int_equal(n->gpus[0].used_mem_mib, 700);
    assert_int_equal(c->used_core_milli, 600);
    assert_int_equal(n->used_cpu_milli, 0);
    assert_int_equal(egpu_cluster_reserve(c, "elasticgpu:a", n, &share, &err), EGPU_EALLOCATED);
    /* 600 + 600 > 1000: refused with the card and what is free. */
    assert_int_equal(egpu_cluster_reserve(c, "elasticgpu:b", n, &share, &err), EGPU_ENOFIT);
    assert_string_equal(err.msg, "card n1-gpu0 has 400 milli-GPU and 300 MiB free; the "
                                 "reservation asks 600 milli-GPU and 700 MiB");
    /* Whole cards need cards nobody holds. */
    assert_int_equal(egpu_cluster_reserve(c, "elasticgpu:w", n, &whole, &err), EGPU_ENOFIT);
    assert_non_null(strstr(err.msg, "card n1-gpu0 is not free for a whole-card reservation"));
    whole.ncards = 1;
    whole.uuids[0] = "n1-gpu1";
    assert_int_equal(egpu_cluster_reserve(c, "elasticgpu:w", n, &whole, &err), 0);
    assert_int_equal(n->gpus[1].used_core_milli, 1000);
    assert_int_equal(n->gpus[1].used_mem_mib, 1000);
    whole.uuids[0] = "n1-gpu7";
    assert_int_equal(egpu_cluster_reserve(c, "elasticgpu:x", n, &whole, &err), -ENOENT);
    assert_string_equal(err.msg, "node n1 has no card n1-gpu7");
    share.core_milli = 1001;
    assert_int_equal(egpu_cluster_reserve(c, "elasticgpu:y", n, &share, &err), -EINVAL);
    assert_int_equal(c->used_core_milli, 1600);
    assert_int_equal(egpu_cluster_release(c, "elasticgpu:a", &err), 0);
    assert_int_equal(egpu_cluster_release(c, "elasticgpu:w", &err), 0);
    assert_int_equal(c->used_core_milli, 0);
    assert_int_equal(n->gpus[0].nshares + n->gpus[1].nshares, 0);
    egpu_cluster_free(c);
}

/* Add, update (phase changes keep it; a new size or card moves it),
 * Failed frees, back to Bound holds again, delete frees. */
static void test_cache_add_update_delete(void **state)
{
    struct egpu_sched_cache *c = egpu_sched_cache_new();
    const char *const both[] = {"n1-gpu0", "n1-gpu1"};
    struct egpu_sched_cache_stats st;

    (void)state;
    node_set(c, "n1");
    gpu_set(c, "n1", 0);
    gpu_set(c, "n1", 1);
    egpu_set(c, make_egpu("e1", "n1", 40, 8192, "n1-gpu0", NULL, 0, "Pending"));
    assert_int_equal(card_used(c, "n1", 0, false), 400);
    assert_int_equal(card_used(c, "n1", 0, true), 8192);
    st = stats(c);
    assert_int_equal(st.reservations[EGPU_SCHED_RESV_APPLIED], 1);
    assert_int_equal(st.reserved_core_milli, 400);
    assert_int_equal(st.reserved_mem_mib, 8192);
    /* Available, Bound, Released: the same capacity, held once. */
    egpu_set(c, make_egpu("e1", "n1", 40, 8192, "n1-gpu0", NULL, 0, "Available"));
    egpu_set(c, make_egpu("e1", "n1", 40, 8192, "n1-gpu0", NULL, 0, "Bound"));
    egpu_set(c, make_egpu("e1", "n1", 40, 8192, "n1-gpu0", NULL, 0, "Released"));
    assert_int_equal(card_used(c, "n1", 0, false), 400);
    /* Resized and moved to the other card. */
    egpu_set(c, make_egpu("e1", "n1", 70, 1024, "n1-gpu1", NULL, 0, "Bound"));
    assert_int_equal(card_used(c, "n1", 0, false), 0);
    assert_int_equal(card_used(c, "n1", 0, true), 0);
    assert_int_equal(card_used(c, "n1", 1, false), 700);
    assert_int_equal(card_used(c, "n1", 1, true), 1024);
    /* Failed holds nothing; Bound again holds again. */
    egpu_set(c, make_egpu("e1", "n1", 70, 1024, "n1-gpu1", NULL, 0, "Failed"));
    assert_int_equal(card_used(c, "n1", 1, false), 0);
    st = stats(c);
    assert_int_equal(st.reservations[EGPU_SCHED_RESV_OFF], 1);
    assert_int_equal(st.reserved_core_milli, 0);
    egpu_set(c, make_egpu("e1", "n1", 70, 1024, "n1-gpu1", NULL, 0, "Bound"));
    assert_int_equal(card_used(c, "n1", 1, false), 700);
    /* Whole cards: both cards, all their memory. */
    egpu_sched_cache_egpu_delete(c, "e1");
    egpu_set(c, make_egpu("w", "n1", 200, 0, NULL, both, 2, "Bound"));
    assert_int_equal(card_used(c, "n1", 0, false), 1000);
    assert_int_equal(card_used(c, "n1", 1, true), 40960);
    st = stats(c);
    assert_int_equal(st.reserved_mem_mib, 2 * 40960);
    /* Deleted: freed; deleting again or an unknown name is a no-op. */
    assert_int_equal(egpu_sched_cache_egpu_delete(c, "w"), 0);
    assert_int_equal(egpu_sched_cache_egpu_delete(c, "w"), 0);
    assert_int_equal(card_used(c, "n1", 0, false), 0);
    assert_int_equal(card_used(c, "n1", 1, false), 0);
    st = stats(c);
    assert_int_equal(
        st.reservations[EGPU_SCHED_RESV_APPLIED] + st.reservations[EGPU_SCHED_RESV_OFF], 0);
    egpu_sched_cache_free(c);
}

/* Events in any order reach the same state: every permutation of Node,
 * two GPUs and two ElasticGPUs (a share of card 0, card 1 whole). And when
 * the GPU object goes the reservation waits, and comes back with it. */
static void test_cache_event_order(void **state)
{
    const char *const one[] = {"n1-gpu1"};
    int perm[5] = {0, 1, 2, 3, 4};
    int orders = 0;

    (void)state;
    for (;;) {
        struct egpu_sched_cache *c = egpu_sched_cache_new();
        struct egpu_sched_cache_stats st;

        for (int i = 0; i < 5; i++) {
            switch (perm[i]) {
            case 0:
                node_set(c, "n1");
                break;
            case 1:
                gpu_set(c, "n1", 0);
                break;
            case 2:
                gpu_set(c, "n1", 1);
                break;
            case 3:
                egpu_set(c, make_egpu("s", "n1", 25, 512, "n1-gpu0", NULL, 0, "Bound"));
                break;
            default:
                egpu_set(c, make_egpu("w", "n1", 100, 0, NULL, one, 1, "Available"));
                break;
            }
        }
        assert_int_equal(card_used(c, "n1", 0, false), 250);
        assert_int_equal(card_used(c, "n1", 0, true), 512);
        assert_int_equal(card_used(c, "n1", 1, false), 1000);
        assert_int_equal(card_used(c, "n1", 1, true), 40960);
        st = stats(c);
        assert_int_equal(st.reservations[EGPU_SCHED_RESV_APPLIED], 2);
        assert_int_equal(st.reservation_overfills, 0);
        orders++;
        if (orders == 1) {
            /* The card's GPU object goes: the reservation waits; it comes
             * back: held again. The node goes: both wait. */
            json_t *g = make_gpu("n1", 1);
            struct egpu_error err = {0};

            assert_int_equal(egpu_sched_cache_gpu_delete(c, g, &err), 0);
            json_decref(g);
            st = stats(c);
            assert_int_equal(st.reservations[EGPU_SCHED_RESV_WAITING], 1);
            gpu_set(c, "n1", 1);
            assert_int_equal(card_used(c, "n1", 1, false), 1000);
            assert_int_equal(egpu_sched_cache_node_delete(c, "n1"), 0);
            st = stats(c);
            assert_int_equal(st.reservations[EGPU_SCHED_RESV_WAITING], 2);
            assert_int_equal(st.reserved_core_milli, 0);
            node_set(c, "n1");
            assert_int_equal(card_used(c, "n1", 0, false), 250);
            assert_int_equal(card_used(c, "n1", 1, false), 1000);
        }
        egpu_sched_cache_free(c);
        /* next permutation (lexicographic) */
        {
            int i = 3, j = 4;

            while (i >= 0 && perm[i] > perm[i + 1])
                i--;
            if (i < 0)
                break;
            while (perm[j] < perm[i])
                j--;
            int t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
            for (int a = i + 1, b = 4; a < b; a++, b--) {
                t = perm[a];
                perm[a] = perm[b];
                perm[b] = t;
            }
        }
    }
    assert_int_equal(orders, 120);
}

/* Two reservations that overfill a card: the second is left out and
 * reported, the free never goes negative; it is applied once the first is
 * deleted. A pod holding the card also keeps a reservation out until it
 * goes; a rebuild of the node keeps who holds what. */
static void test_cache_overfill(void **state)
{
    struct egpu_sched_cache *c = egpu_sched_cache_new();
    struct egpu_sched_cache_stats st;
    struct egpu_error err = {0};
    json_t *pod, *g;

    (void)state;
    node_set(c, "n1");
    gpu_set(c, "n1", 0);
    egpu_set(c, make_egpu("a", "n1", 60, 0, "n1-gpu0", NULL, 0, "Bound"));
    egpu_set(c, make_egpu("b", "n1", 50, 0, "n1-gpu0", NULL, 0, "Bound"));
    assert_int_equal(card_used(c, "n1", 0, false), 600);
    st = stats(c);
    assert_int_equal(st.reservations[EGPU_SCHED_RESV_APPLIED], 1);
    assert_int_equal(st.reservations[EGPU_SCHED_RESV_OVERFILL], 1);
    assert_int_equal(st.reservation_overfills, 1);
    /* A status update of the overfilled one reports nothing new. */
    egpu_set(c, make_egpu("b", "n1", 50, 0, "n1-gpu0", NULL, 0, "Released"));
    assert_int_equal(stats(c).reservation_overfills, 1);
    /* A rebuild (the card's memory grows) keeps a, not b. */
    g = make_gpu("n1", 0);
    json_object_set_new(json_object_get(g, "spec"), "memory", json_integer(81920));
    assert_int_equal(egpu_sched_cache_gpu_set(c, g, &err), 0);
    json_decref(g);
    assert_int_equal(card_used(c, "n1", 0, false), 600);
    st = stats(c);
    assert_int_equal(st.reservations[EGPU_SCHED_RESV_OVERFILL], 1);
    assert_int_equal(st.reservation_overfills, 1);
    /* a goes: b is applied. */
    assert_int_equal(egpu_sched_cache_egpu_delete(c, "a"), 0);
    assert_int_equal(card_used(c, "n1", 0, false), 500);
    st = stats(c);
    assert_int_equal(st.reservations[EGPU_SCHED_RESV_APPLIED], 1);
    assert_int_equal(st.reservations[EGPU_SCHED_RESV_OVERFILL], 0);
    /* A bound pod takes 30% beside b; a third reservation of 40% does not fit
     * until the pod finishes. */
    pod = json_pack("{s:{s:s,s:s,s:s,s:{s:s}},s:{s:s,s:s,s:[{s:s,s:{s:{s:s,s:s}}}]},s:{s:s}}",
                    "metadata", "name", "p", "namespace", "ns", "uid", "p", "annotations",
                    EGPU_ANN_ASSIGNED,
                    "{\"node\":\"n1\",\"containers\":[{\"name\":\"c0\",\"core\":30,\"memory\":0,"
                    "\"gpus\":[\"GPU-n1-0\"]}]}",
                    "spec", "nodeName", "n1", "schedulerName", EGPU_SCHEDULER_NAME_DEFAULT,
                    "containers", "name", "c0", "resources", "requests", EGPU_RES_GPU_CORE, "30",
                    "cpu", "1", "status", "phase", "Running");
    assert_int_equal(egpu_sched_cache_pod_set(c, pod, &err), 0);
    assert_int_equal(card_used(c, "n1", 0, false), 800);
    egpu_set(c, make_egpu("c", "n1", 40, 0, "n1-gpu0", NULL, 0, "Available"));
    assert_int_equal(card_used(c, "n1", 0, false), 800);
    assert_int_equal(stats(c).reservation_overfills, 2);
    json_object_set_new(json_object_get(pod, "status"), "phase", json_string("Succeeded"));
    assert_int_equal(egpu_sched_cache_pod_set(c, pod, &err), 0);
    json_decref(pod);
    assert_int_equal(card_used(c, "n1", 0, false), 900);
    st = stats(c);
    assert_int_equal(st.reservations[EGPU_SCHED_RESV_APPLIED], 2);
    assert_int_equal(st.reservations[EGPU_SCHED_RESV_OVERFILL], 0);
    assert_int_equal(st.reserved_core_milli, 900);
    egpu_sched_cache_free(c);
}

/* Malformed ElasticGPUs are refused with the field named and change
 * nothing: a new one is not tracked, an update keeps the version before. */
static void test_cache_malformed(void **state)
{
    struct egpu_sched_cache *c = egpu_sched_cache_new();
    struct egpu_error err = {0};
    json_t *o;

    (void)state;
    node_set(c, "n1");
    gpu_set(c, "n1", 0);
    egpu_set(c, make_egpu("e", "n1", 30, 0, "n1-gpu0", NULL, 0, "Bound"));
    /* gpuShare of 150%: refused, the 30% stands. */
    o = make_egpu("e", "n1", 150, 0, "n1-gpu0", NULL, 0, "Bound");
    assert_int_equal(egpu_sched_cache_egpu_set(c, o, &err), EGPU_ERANGE);
    assert_non_null(strstr(err.msg, "spec.capacity.elasticgpu.io/gpu-core is 150"));
    json_decref(o);
    assert_int_equal(card_used(c, "n1", 0, false), 300);
    /* No source; a phase that is none; a wrong kind; no nodeName. */
    o = make_egpu("f", "n1", 30, 0, "n1-gpu0", NULL, 0, "Bound");
    json_object_del(json_object_get(o, "spec"), "gpuShare");
    assert_int_equal(egpu_sched_cache_egpu_set(c, o, &err), EGPU_ERANGE);
    assert_non_null(strstr(err.msg, "neither gpuShare nor physicalGPU"));
    json_decref(o);
    o = make_egpu("f", "n1", 30, 0, "n1-gpu0", NULL, 0, "Lost");
    assert_int_not_equal(egpu_sched_cache_egpu_set(c, o, &err), 0);
    assert_non_null(strstr(err.msg, "status.phase"));
    json_decref(o);
    o = make_egpu("f", "n1", 30, 0, "n1-gpu0", NULL, 0, "Bound");
    json_object_set_new(o, "kind", json_string("GPU"));
    assert_int_not_equal(egpu_sched_cache_egpu_set(c, o, &err), 0);
    json_decref(o);
    o = make_egpu("f", "n1", 30, 0, "n1-gpu0", NULL, 0, "Bound");
    json_object_set_new(json_object_get(o, "spec"), "nodeName", json_integer(3));
    assert_int_equal(egpu_sched_cache_egpu_set(c, o, &err), EGPU_ESYNTAX);
    assert_non_null(strstr(err.msg, "spec.nodeName"));
    json_decref(o);
    assert_int_equal(card_used(c, "n1", 0, false), 300);
    assert_int_equal(stats(c).reservations[EGPU_SCHED_RESV_APPLIED], 1);
    assert_int_equal(stats(c).reservations[EGPU_SCHED_RESV_WAITING], 0);
    egpu_sched_cache_free(c);
}

static bool synced(void *data)
{
    (void)data;
    return true;
}

/* A pod of 60% for n1's card (n2 has none): filtered out while a 50%
 * ElasticGPU holds the card, fits once it is Failed or deleted. */
static void test_filter_sees_reservations(void **state)
{
    struct egpu_sched_cache *c = egpu_sched_cache_new();
    struct egpu_extender_ops ops = {.synced = synced};
    struct egpu_extender_config cfg = {.node_policy = EGPU_POLICY_BINPACK,
                                       .card_policy = EGPU_POLICY_BINPACK};
    const char *const nodes[] = {"n1"};
    json_t *pod = json_pack("{s:{s:s,s:s,s:s},s:{s:s,s:[{s:s,s:{s:{s:s}}}]}}", "metadata", "name",
                            "new", "namespace", "ns", "uid", "new", "spec", "schedulerName",
                            EGPU_SCHEDULER_NAME_DEFAULT, "containers", "name", "c0", "resources",
                            "requests", EGPU_RES_GPU_CORE, "60");
    struct egpu_error err = {0};
    struct egpu_extender *x;
    char *body = tu_extender_args(pod, nodes, 1, false);
    const char *verdict[3];

    (void)state;
    x = egpu_extender_new(&cfg, c, &ops, &err);
    assert_non_null(x);
    node_set(c, "n1");
    gpu_set(c, "n1", 0);
    for (int step = 0; step < 3; step++) {
        struct egpu_buf reply;
        json_t *out;

        if (step == 0)
            egpu_set(c, make_egpu("e", "n1", 50, 0, "n1-gpu0", NULL, 0, "Bound"));
        else if (step == 1)
            egpu_set(c, make_egpu("e", "n1", 50, 0, "n1-gpu0", NULL, 0, "Failed"));
        else
            assert_int_equal(egpu_sched_cache_egpu_delete(c, "e"), 0);
        egpu_buf_init(&reply, 1 << 20);
        assert_int_equal(egpu_extender_filter(x, body, strlen(body), &reply), 200);
        out = json_loads(egpu_buf_str(&reply), 0, NULL);
        assert_non_null(out);
        verdict[step] = json_array_size(json_object_get(out, "NodeNames")) == 1 ? "fits" : "no";
        if (step == 0)
            assert_non_null(strstr(
                json_string_value(json_object_get(json_object_get(out, "FailedNodes"), "n1")),
                "60% core"));
        json_decref(out);
        egpu_buf_free(&reply);
        if (step == 0) {
            /* Available: a phase change that holds the same. */
            egpu_set(c, make_egpu("e", "n1", 50, 0, "n1-gpu0", NULL, 0, "Available"));
        }
    }
    assert_string_equal(verdict[0], "no");
    assert_string_equal(verdict[1], "fits");
    assert_string_equal(verdict[2], "fits");
    free(body);
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
        cmocka_unit_test_teardown(test_api_reservation, check_leaks),
        cmocka_unit_test_teardown(test_core_reserve, check_leaks),
        cmocka_unit_test_teardown(test_cache_add_update_delete, check_leaks),
        cmocka_unit_test_teardown(test_cache_event_order, check_leaks),
        cmocka_unit_test_teardown(test_cache_overfill, check_leaks),
        cmocka_unit_test_teardown(test_cache_malformed, check_leaks),
        cmocka_unit_test_teardown(test_filter_sees_reservations, check_leaks),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
