/* tests/unit/test_sched_dra.c - DRA mode in the extender (src/scheduler/
 * dra.c, docs/scheduler.md "DRA pods"): allocated ResourceClaims hold their
 * cards in the cache in any order of events (allocated, deallocated,
 * deleted, a node rebuilt, a node or card not known yet, an overfill, a
 * hostile status refused with the cache unchanged, a watch that lags behind
 * what bind read), and filter, prioritize and bind of DRA pods: the ask
 * read from the pod's claims, the node policy scoring against the claims
 * held, the refusals, the Binding alone and the claims read after it.
 * Wire format of the objects: ../shared/k8s-wire/dra/dra_notes.md.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "testutil.h"
#include "sched_testutil.h"
#include "egpu/scheduler.h"
#include "dra_int.h"

static json_t *make_node(const char *name)
{
    return json_pack("{s:{s:s},s:{s:{s:s,s:s}}}", "metadata", "name", name, "status", "allocatable",
                     "cpu", "64", "memory", "256Gi");
}

/* GPU object "<node>-gpu<index>", UUID "GPU-<node>-<index>", mem_mib MiB. */
static json_t *make_gpu(const char *node, int index, int mem_mib)
{
    char uuid[64], name[96];

    snprintf(uuid, sizeof(uuid), "GPU-%s-%d", node, index);
    snprintf(name, sizeof(name), "%s-gpu%d", node, index);
    return json_pack("{s:{s:s},s:{s:s,s:i,s:s,s:s,s:i},s:{s:s}}", "metadata", "name", name, "spec",
                     "nodeName", node, "index", index, "uuid", uuid, "model", "A100", "memory",
                     mem_mib, "status", "health", "Healthy");
}

static void node_set(struct egpu_sched_cache *c, const char *name)
{
    struct egpu_error err = {0};
    json_t *n = make_node(name);

    if (egpu_sched_cache_node_set(c, n, &err) != 0)
        fail_msg("node: %s", err.msg);
    json_decref(n);
}

static void gpu_set(struct egpu_sched_cache *c, const char *node, int index, int mem_mib)
{
    struct egpu_error err = {0};
    json_t *g = make_gpu(node, index, mem_mib);

    if (egpu_sched_cache_gpu_set(c, g, &err) != 0)
        fail_msg("gpu: %s", err.msg);
    json_decref(g);
}

static void gpu_node(struct egpu_sched_cache *c, const char *name, int ngpus)
{
    node_set(c, name);
    for (int i = 0; i < ngpus; i++)
        gpu_set(c, name, i, 40960);
}

/* One result of driver gpu.elasticgpu.io on pool node, device gpu-<index>;
 * cores < 0: no consumedCapacity (the whole device). */
struct result {
    const char *node;
    int index;
    int cores, mem_mib;
};

/* A ResourceClaim ns/name at resourceVersion rv asking one request of
 * class (count devices; cores percent and mem_mib MiB of each, 0 = not
 * named) and holding results[0..nres) (nres < 0: not allocated). */
static json_t *make_claim(const char *ns, const char *name, int rv, const char *cls, int count,
                          int cores, int mem_mib, const struct result *results, int nres)
{
    json_t *caps = json_object(), *ex, *o;
    char rvs[16];

    if (cores > 0)
        json_object_set_new(caps, "cores", json_sprintf("%d", cores));
    if (mem_mib > 0)
        json_object_set_new(caps, "memory", json_sprintf("%dMi", mem_mib));
    ex = json_pack("{s:s,s:s,s:i}", "deviceClassName", cls, "allocationMode", "ExactCount", "count",
                   count);
    if (json_object_size(caps) > 0)
        json_object_set_new(ex, "capacity", json_pack("{s:o}", "requests", caps));
    else
        json_decref(caps);
    snprintf(rvs, sizeof(rvs), "%d", rv);
    o = json_pack("{s:s,s:s,s:{s:s,s:s,s:s},s:{s:{s:[{s:s,s:o}]}}}", "apiVersion",
                  "resource.k8s.io/v1", "kind", "ResourceClaim", "metadata", "name", name,
                  "namespace", ns, "resourceVersion", rvs, "spec", "devices", "requests", "name",
                  "gpu", "exactly", ex);
    if (nres >= 0) {
        json_t *list = json_array();

        for (int i = 0; i < nres; i++) {
            char dev[32];
            json_t *r;

            snprintf(dev, sizeof(dev), "gpu-%d", results[i].index);
            r = json_pack("{s:s,s:s,s:s,s:s}", "request", "gpu", "driver", "gpu.elasticgpu.io",
                          "pool", results[i].node, "device", dev);
            if (results[i].cores >= 0) {
                json_object_set_new(r, "shareID",
                                    json_string("9c3e6f0a-51d7-4b2e-8f4a-0d6c2b7e1a95"));
                json_object_set_new(r, "consumedCapacity",
                                    json_pack("{s:o,s:o}", "cores",
                                              json_sprintf("%d", results[i].cores), "memory",
                                              json_sprintf("%dMi", results[i].mem_mib)));
            }
            json_array_append_new(list, r);
        }
        json_object_set_new(o, "status",
                            json_pack("{s:{s:{s:o}}}", "allocation", "devices", "results", list));
    }
    return o;
}

static int claim_set(struct egpu_sched_cache *c, json_t *claim, struct egpu_error *err)
{
    int rc = egpu_sched_cache_dra_claim_set(c, claim, err);

    json_decref(claim);
    return rc;
}

static void claim_ok(struct egpu_sched_cache *c, json_t *claim)
{
    struct egpu_error err = {0};

    if (claim_set(c, claim, &err) != 0)
        fail_msg("claim: %s", err.msg);
}

/* Used milli-GPU (or MiB with mem) on card position g of node; UINT32_MAX
 * when there is no such card. */
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

#define APPLIED  EGPU_SCHED_RESV_APPLIED
#define WAITING  EGPU_SCHED_RESV_WAITING
#define OVERFILL EGPU_SCHED_RESV_OVERFILL
#define OFF      EGPU_SCHED_RESV_OFF

/* A claim holds its share once allocated, nothing once deallocated, its
 * new cards when allocated again elsewhere, nothing once deleted. */
static void test_claim_allocate_deallocate_delete(void **state)
{
    struct egpu_sched_cache *c = egpu_sched_cache_new();
    const struct result share = {"n1", 0, 30, 4096}, whole = {"n1", 1, -1, 0};
    struct egpu_sched_cache_stats st;

    (void)state;
    gpu_node(c, "n1", 2);
    /* Not allocated yet: it asks, holds nothing. */
    claim_ok(c, make_claim("ml", "c1", 1, "gpu-share.elasticgpu.io", 1, 30, 4096, NULL, -1));
    assert_int_equal(card_used(c, "n1", 0, false), 0);
    assert_int_equal(stats(c).dra_claims[OFF], 1);
    /* Allocated: 30% and 4096 MiB on gpu-0. */
    claim_ok(c, make_claim("ml", "c1", 2, "gpu-share.elasticgpu.io", 1, 30, 4096, &share, 1));
    assert_int_equal(card_used(c, "n1", 0, false), 300);
    assert_int_equal(card_used(c, "n1", 0, true), 4096);
    st = stats(c);
    assert_int_equal(st.dra_claims[APPLIED], 1);
    assert_int_equal(st.dra_core_milli, 300);
    assert_int_equal(st.dra_mem_mib, 4096);
    /* The same allocation again (reservedFor, status.devices changed): held once. */
    claim_ok(c, make_claim("ml", "c1", 3, "gpu-share.elasticgpu.io", 1, 30, 4096, &share, 1));
    assert_int_equal(card_used(c, "n1", 0, false), 300);
    /* Deallocated: free again. */
    claim_ok(c, make_claim("ml", "c1", 4, "gpu-share.elasticgpu.io", 1, 30, 4096, NULL, -1));
    assert_int_equal(card_used(c, "n1", 0, false), 0);
    assert_int_equal(card_used(c, "n1", 0, true), 0);
    assert_int_equal(stats(c).dra_claims[OFF], 1);
    /* Allocated the whole of gpu-1 (no consumedCapacity): all its memory. */
    claim_ok(c, make_claim("ml", "c1", 5, "gpu.elasticgpu.io", 1, 0, 0, &whole, 1));
    assert_int_equal(card_used(c, "n1", 0, false), 0);
    assert_int_equal(card_used(c, "n1", 1, false), 1000);
    assert_int_equal(card_used(c, "n1", 1, true), 40960);
    /* Deleted: nothing held; deleting it again, or an unknown one, is a no-op. */
    assert_int_equal(egpu_sched_cache_dra_claim_delete(c, "ml", "c1"), 0);
    assert_int_equal(card_used(c, "n1", 1, false), 0);
    assert_int_equal(egpu_sched_cache_dra_claim_delete(c, "ml", "c1"), 0);
    assert_int_equal(egpu_sched_cache_dra_claim_delete(c, "ml", "nobody"), 0);
    st = stats(c);
    for (int s = 0; s < EGPU_SCHED_RESV_STATES; s++)
        assert_int_equal(st.dra_claims[s], 0);
    egpu_sched_cache_free(c);
}

/* A node rebuilt (its allocatable or a card changed) holds its claims
 * again, before its pods; a claim on a node or card the cache does not
 * know yet waits and is held once they come; two claims that overfill a
 * card leave the younger out until the older goes. */
static void test_claim_rebuild_wait_overfill(void **state)
{
    struct egpu_sched_cache *c = egpu_sched_cache_new();
    const struct result r0 = {"n1", 0, 60, 8192}, r1 = {"n2", 1, 50, 1024};
    struct egpu_error err = {0};
    json_t *n;

    (void)state;
    gpu_node(c, "n1", 1);
    claim_ok(c, make_claim("ml", "a", 1, "gpu-share.elasticgpu.io", 1, 60, 8192, &r0, 1));
    assert_int_equal(card_used(c, "n1", 0, false), 600);
    /* The Node's allocatable changes: the node is rebuilt, the claim held again. */
    n = json_pack("{s:{s:s},s:{s:{s:s,s:s}}}", "metadata", "name", "n1", "status", "allocatable",
                  "cpu", "32", "memory", "128Gi");
    assert_int_equal(egpu_sched_cache_node_set(c, n, &err), 0);
    json_decref(n);
    assert_int_equal(card_used(c, "n1", 0, false), 600);
    assert_int_equal(card_used(c, "n1", 0, true), 8192);
    /* Its card's GPU object changes (memory): rebuilt, held again. */
    gpu_set(c, "n1", 0, 81920);
    assert_int_equal(card_used(c, "n1", 0, false), 600);
    assert_int_equal(stats(c).dra_claims[APPLIED], 1);
    /* The Node goes: the claim waits; back: held. */
    assert_int_equal(egpu_sched_cache_node_delete(c, "n1"), 0);
    assert_int_equal(stats(c).dra_claims[WAITING], 1);
    node_set(c, "n1");
    assert_int_equal(card_used(c, "n1", 0, false), 600);
    assert_int_equal(stats(c).dra_claims[APPLIED], 1);

    /* On n2, not known yet: waits; the Node alone: still waits (its card
     * gpu-1 is not known); the card gpu-0 only: waits; gpu-1: held. */
    claim_ok(c, make_claim("ml", "b", 1, "gpu-share.elasticgpu.io", 1, 50, 1024, &r1, 1));
    assert_int_equal(stats(c).dra_claims[WAITING], 1);
    node_set(c, "n2");
    assert_int_equal(stats(c).dra_claims[WAITING], 1);
    gpu_set(c, "n2", 0, 40960);
    assert_int_equal(stats(c).dra_claims[WAITING], 1);
    assert_int_equal(card_used(c, "n2", 0, false), 0);
    gpu_set(c, "n2", 1, 40960);
    assert_int_equal(stats(c).dra_claims[APPLIED], 2);
    assert_int_equal(card_used(c, "n2", 1, false), 500);

    /* Overfill: another 60% on n1's gpu-0 does not fit; once a is gone it is held. */
    claim_ok(c, make_claim("ml", "o", 1, "gpu-share.elasticgpu.io", 1, 60, 8192, &r0, 1));
    assert_int_equal(stats(c).dra_claims[OVERFILL], 1);
    assert_int_equal(stats(c).dra_overfills, 1);
    assert_int_equal(card_used(c, "n1", 0, false), 600);
    assert_int_equal(egpu_sched_cache_dra_claim_delete(c, "ml", "a"), 0);
    assert_int_equal(stats(c).dra_claims[OVERFILL], 0);
    assert_int_equal(card_used(c, "n1", 0, false), 600);
    assert_int_equal(stats(c).dra_claims[APPLIED], 2);
    egpu_sched_cache_free(c);
}

/* A status the decoder refuses (cores past 100, a device that is not
 * gpu-<index>, results on two nodes) fails the event with the field named
 * and leaves the cache as it was: the version before stays held. A claim
 * of another driver's devices only holds nothing. */
static void test_claim_hostile_status(void **state)
{
    struct egpu_sched_cache *c = egpu_sched_cache_new();
    const struct result ok = {"n1", 0, 30, 4096}, big = {"n1", 0, 150, 4096};
    const struct result two[] = {{"n1", 0, 10, 100}, {"n2", 0, 10, 100}};
    struct egpu_error err = {0};
    json_t *claim, *res;

    (void)state;
    gpu_node(c, "n1", 1);
    gpu_node(c, "n2", 1);
    claim_ok(c, make_claim("ml", "c", 1, "gpu-share.elasticgpu.io", 1, 30, 4096, &ok, 1));
    assert_int_equal(
        claim_set(c, make_claim("ml", "c", 2, "gpu-share.elasticgpu.io", 1, 30, 4096, &big, 1),
                  &err),
        EGPU_ERANGE);
    assert_non_null(strstr(err.msg, "consumedCapacity.cores"));
    assert_int_equal(card_used(c, "n1", 0, false), 300);
    assert_int_equal(
        claim_set(c, make_claim("ml", "c", 3, "gpu-share.elasticgpu.io", 1, 10, 100, two, 2), &err),
        EGPU_ERANGE);
    assert_non_null(strstr(err.msg, "pool"));
    assert_int_equal(card_used(c, "n1", 0, false), 300);
    assert_int_equal(card_used(c, "n2", 0, false), 0);
    claim = make_claim("ml", "c", 4, "gpu-share.elasticgpu.io", 1, 30, 4096, &ok, 1);
    res = json_array_get(
        json_object_get(
            json_object_get(json_object_get(json_object_get(claim, "status"), "allocation"),
                            "devices"),
            "results"),
        0);
    json_object_set_new(res, "device", json_string("card-zero"));
    assert_int_not_equal(claim_set(c, claim, &err), 0);
    assert_non_null(strstr(err.msg, "device"));
    assert_int_equal(card_used(c, "n1", 0, false), 300);
    /* A new claim refused is not cached at all. */
    assert_int_not_equal(
        claim_set(c, make_claim("ml", "d", 1, "gpu-share.elasticgpu.io", 1, 30, 4096, &big, 1),
                  &err),
        0);
    assert_int_equal(stats(c).dra_claims[APPLIED] + stats(c).dra_claims[OFF], 1);
    /* Another driver's result: the claim holds nothing of ours. */
    claim = make_claim("ml", "e", 1, "other.example.com", 1, 0, 0, &ok, 1);
    res = json_array_get(
        json_object_get(
            json_object_get(json_object_get(json_object_get(claim, "status"), "allocation"),
                            "devices"),
            "results"),
        0);
    json_object_set_new(res, "driver", json_string("other.example.com"));
    claim_ok(c, claim);
    assert_int_equal(card_used(c, "n1", 0, false), 300);
    assert_int_equal(stats(c).dra_claims[OFF], 1);
    egpu_sched_cache_free(c);
}

/* What bind read stands against a watch that lags: an older event that
 * does not show the allocation is passed over; a newer one is believed. */
static void test_claim_read_beats_stale_events(void **state)
{
    struct egpu_sched_cache *c = egpu_sched_cache_new();
    const struct result r = {"n1", 0, 40, 2048};
    struct egpu_error err = {0};
    json_t *claim;

    (void)state;
    gpu_node(c, "n1", 1);
    /* A claim the cache does not hold (deleted since filter): the read is passed over. */
    claim = make_claim("ml", "gone", 10, "gpu-share.elasticgpu.io", 1, 40, 2048, &r, 1);
    assert_int_equal(egpu_sched_cache_dra_claim_read(c, claim, &err), 0);
    json_decref(claim);
    assert_int_equal(card_used(c, "n1", 0, false), 0);
    claim_ok(c, make_claim("ml", "c", 7, "gpu-share.elasticgpu.io", 1, 40, 2048, NULL, -1));
    claim = make_claim("ml", "c", 10, "gpu-share.elasticgpu.io", 1, 40, 2048, &r, 1);
    assert_int_equal(egpu_sched_cache_dra_claim_read(c, claim, &err), 0);
    json_decref(claim);
    assert_int_equal(card_used(c, "n1", 0, false), 400);
    /* The watch's older versions (before PreBind wrote the allocation). */
    claim_ok(c, make_claim("ml", "c", 8, "gpu-share.elasticgpu.io", 1, 40, 2048, NULL, -1));
    claim_ok(c, make_claim("ml", "c", 9, "gpu-share.elasticgpu.io", 1, 40, 2048, NULL, -1));
    assert_int_equal(card_used(c, "n1", 0, false), 400);
    /* The allocation's own event, then a real deallocation. */
    claim_ok(c, make_claim("ml", "c", 10, "gpu-share.elasticgpu.io", 1, 40, 2048, &r, 1));
    claim_ok(c, make_claim("ml", "c", 12, "gpu-share.elasticgpu.io", 1, 40, 2048, NULL, -1));
    assert_int_equal(card_used(c, "n1", 0, false), 0);
    /* A read older than what the cache holds changes nothing. */
    claim = make_claim("ml", "c", 11, "gpu-share.elasticgpu.io", 1, 40, 2048, &r, 1);
    assert_int_equal(egpu_sched_cache_dra_claim_read(c, claim, &err), 0);
    json_decref(claim);
    assert_int_equal(card_used(c, "n1", 0, false), 0);
    egpu_sched_cache_free(c);
}

/* ---- The verbs ---- */

struct fake_api {
    pthread_mutex_t lock;
    int annotate_calls, bind_calls, get_pod_calls, get_claim_calls;
    json_t *pods;   /* "ns/name" -> pod, what get_pod answers */
    json_t *claims; /* "ns/name" -> claim, what get_claim answers */
};

static bool fake_synced(void *data)
{
    (void)data;
    return true;
}

static int fake_annotate(void *data, const char *ns, const char *name, const char *key,
                         const char *value, struct egpu_error *err)
{
    struct fake_api *f = data;

    (void)ns;
    (void)name;
    (void)key;
    (void)value;
    (void)err;
    f->annotate_calls++;
    return 0;
}

static int fake_bind(void *data, const char *ns, const char *name, const char *uid,
                     const char *node, struct egpu_error *err)
{
    struct fake_api *f = data;

    (void)ns;
    (void)name;
    (void)uid;
    (void)node;
    (void)err;
    f->bind_calls++;
    return 0;
}

static int fake_get(json_t *from, int *calls, const char *ns, const char *name, json_t **out,
                    struct egpu_error *err)
{
    char key[512];
    json_t *o;

    (*calls)++;
    snprintf(key, sizeof(key), "%s/%s", ns, name);
    o = json_object_get(from, key);
    if (o == NULL)
        return egpu_error_set(err, -ENOENT, "%s not found", key);
    *out = json_incref(o);
    return 0;
}

static int fake_get_pod(void *data, const char *ns, const char *name, json_t **out,
                        struct egpu_error *err)
{
    struct fake_api *f = data;

    return fake_get(f->pods, &f->get_pod_calls, ns, name, out, err);
}

static int fake_get_claim(void *data, const char *ns, const char *name, json_t **out,
                          struct egpu_error *err)
{
    struct fake_api *f = data;

    return fake_get(f->claims, &f->get_claim_calls, ns, name, out, err);
}

static struct egpu_extender *new_extender(struct egpu_sched_cache *c, struct fake_api *f,
                                          enum egpu_policy_kind k, bool dra)
{
    struct egpu_extender_ops ops = {.data = f,
                                    .synced = fake_synced,
                                    .annotate = fake_annotate,
                                    .bind = fake_bind,
                                    .get_pod = fake_get_pod,
                                    .get_claim = fake_get_claim};
    struct egpu_extender_config cfg = {.node_policy = k, .card_policy = k, .seed = 1, .dra = dra};
    struct egpu_error err = {0};

    pthread_mutex_init(&f->lock, NULL);
    if (f->pods == NULL)
        f->pods = json_object();
    if (f->claims == NULL)
        f->claims = json_object();
    return egpu_extender_new(&cfg, c, &ops, &err);
}

static void fake_free(struct fake_api *f)
{
    json_decref(f->pods);
    json_decref(f->claims);
    pthread_mutex_destroy(&f->lock);
}

/* A DRA pod ns/name as egpu-webhook --mode dra makes it: one container
 * with the marker elasticgpu.io/dra: 1 and the claim egpu-0 from a
 * template, made (status.resourceClaimStatuses) as claim when claim is not
 * NULL; node: spec.nodeName (NULL: pending). */
static json_t *dra_pod(const char *ns, const char *name, const char *claim, const char *node)
{
    json_t *pod = json_pack(
        "{s:{s:s,s:s,s:s},s:{s:s,s:[{s:s,s:{s:{s:s,s:s,s:s},s:{s:s},s:[{s:s}]}}],s:[{s:s,s:s}]},"
        "s:{s:s}}",
        "metadata", "name", name, "namespace", ns, "uid", name, "spec", "schedulerName",
        EGPU_SCHEDULER_NAME_DEFAULT, "containers", "name", "c0", "resources", "requests", "cpu",
        "1", "memory", "1Gi", EGPU_RES_DRA, "1", "limits", EGPU_RES_DRA, "1", "claims", "name",
        "egpu-0", "resourceClaims", "name", "egpu-0", "resourceClaimTemplateName",
        "egpu-0123456789abcdef0123456789abcdef", "status", "phase", "Pending");

    if (claim != NULL)
        json_object_set_new(json_object_get(pod, "status"), "resourceClaimStatuses",
                            json_pack("[{s:s,s:s}]", "name", "egpu-0", "resourceClaimName", claim));
    if (node != NULL)
        json_object_set_new(json_object_get(pod, "spec"), "nodeName", json_string(node));
    return pod;
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

/* filter's reply for pod over nodes (pod reference stolen). */
static json_t *filter(struct egpu_extender *x, json_t *pod, const char *const *nodes, int n)
{
    char *body = tu_extender_args(pod, nodes, n, false);
    json_t *out = call(egpu_extender_filter, x, body, 200);

    free(body);
    return out;
}

static bool passes(const json_t *out, const char *node)
{
    const json_t *v;
    size_t i;

    json_array_foreach(json_object_get(out, "NodeNames"), i, v)
    {
        if (strcmp(json_string_value(v), node) == 0)
            return true;
    }
    return false;
}

static const char *error_of(const json_t *out)
{
    return json_string_value(json_object_get(out, "Error"));
}

/* prioritize's score of node (0 when left out). */
static int score_of(const json_t *out, const char *node)
{
    const json_t *e;
    size_t i;

    json_array_foreach(out, i, e)
    {
        if (strcmp(json_string_value(json_object_get(e, "Host")), node) == 0)
            return (int)json_integer_value(json_object_get(e, "Score"));
    }
    return 0;
}

/* A DRA pod is judged by its claims against the claims held: binpack packs
 * it onto the node whose card an allocated claim fills, FGD and spread
 * keep it off; prioritize gives that node 10. */
static void test_dra_pod_scored_against_claims(void **state)
{
    struct egpu_sched_cache *c = egpu_sched_cache_new();
    const struct result held = {"n1", 0, 50, 8192};
    const char *const nodes[] = {"n1", "n2"};
    struct fake_api f = {0}, g = {0};
    struct egpu_extender *x = new_extender(c, &f, EGPU_POLICY_BINPACK, true);
    struct egpu_extender *sx = new_extender(c, &g, EGPU_POLICY_SPREAD, true);
    json_t *out;
    char *body;

    (void)state;
    gpu_node(c, "n1", 1);
    gpu_node(c, "n2", 1);
    claim_ok(c, make_claim("ml", "other", 1, "gpu-share.elasticgpu.io", 1, 50, 8192, &held, 1));
    claim_ok(c, make_claim("ml", "mine", 1, "gpu-share.elasticgpu.io", 1, 30, 4096, NULL, -1));
    /* binpack: n1, 50% full, fits 30% and is fuller: it alone passes. */
    out = filter(x, dra_pod("ml", "p", "mine", NULL), nodes, 2);
    assert_string_equal(error_of(out), "");
    assert_true(passes(out, "n1"));
    assert_false(passes(out, "n2"));
    assert_non_null(
        strstr(json_string_value(json_object_get(json_object_get(out, "FailedNodes"), "n2")),
               "node n1 fits this pod better (node policy binpack)"));
    json_decref(out);
    body = tu_extender_args(dra_pod("ml", "p", "mine", NULL), nodes, 2, false);
    out = call(egpu_extender_prioritize, x, body, 200);
    assert_int_equal(score_of(out, "n1"), 10);
    assert_true(score_of(out, "n2") < 10);
    json_decref(out);
    /* spread: the empty n2. */
    out = call(egpu_extender_prioritize, sx, body, 200);
    assert_int_equal(score_of(out, "n2"), 10);
    assert_true(score_of(out, "n1") < 10);
    json_decref(out);
    free(body);
    out = filter(sx, dra_pod("ml", "p", "mine", NULL), nodes, 2);
    assert_true(passes(out, "n2"));
    assert_false(passes(out, "n1"));
    json_decref(out);
    /* The held claim grows past what leaves 30%: n1 no longer fits in the
     * model, so binpack passes n2 alone, the only node that fits. */
    egpu_sched_cache_dra_claim_delete(c, "ml", "other");
    {
        const struct result big = {"n1", 0, 80, 8192};

        claim_ok(c, make_claim("ml", "other", 2, "gpu-share.elasticgpu.io", 1, 80, 8192, &big, 1));
    }
    out = filter(x, dra_pod("ml", "p", "mine", NULL), nodes, 2);
    assert_false(passes(out, "n1"));
    assert_true(passes(out, "n2"));
    json_decref(out);
    egpu_extender_free(x);
    egpu_extender_free(sx);
    fake_free(&f);
    fake_free(&g);
    egpu_sched_cache_free(c);
}

/* A share naming no memory consumes its card's whole memory (the slice's
 * default): it fits no card that holds any memory already, so binpack
 * passes the empty node, not the fuller one whose card a claim of 10% and
 * 1 GiB holds (a share of 0 MiB would fit there). */
static void test_dra_share_without_memory_takes_the_card_memory(void **state)
{
    struct egpu_sched_cache *c = egpu_sched_cache_new();
    const struct result held = {"n1", 0, 10, 1024};
    const char *const nodes[] = {"n1", "n2"};
    struct fake_api f = {0};
    struct egpu_extender *x = new_extender(c, &f, EGPU_POLICY_BINPACK, true);
    json_t *out;

    (void)state;
    gpu_node(c, "n1", 1);
    node_set(c, "n2");
    gpu_set(c, "n2", 0, 81920); /* another card size: judged in its own group */
    claim_ok(c, make_claim("ml", "other", 1, "gpu-share.elasticgpu.io", 1, 10, 1024, &held, 1));
    claim_ok(c, make_claim("ml", "nomem", 1, "gpu-share.elasticgpu.io", 1, 30, 0, NULL, -1));
    claim_ok(c, make_claim("ml", "mem", 1, "gpu-share.elasticgpu.io", 1, 30, 1024, NULL, -1));
    out = filter(x, dra_pod("ml", "p", "nomem", NULL), nodes, 2);
    assert_string_equal(error_of(out), "");
    assert_false(passes(out, "n1"));
    assert_true(passes(out, "n2"));
    assert_non_null(strstr(
        json_string_value(json_object_get(json_object_get(out, "FailedNodes"), "n1")), "40960"));
    json_decref(out);
    /* The same share naming 1 GiB packs beside the claim on n1. */
    out = filter(x, dra_pod("ml", "p", "mem", NULL), nodes, 2);
    assert_true(passes(out, "n1"));
    assert_false(passes(out, "n2"));
    json_decref(out);
    egpu_extender_free(x);
    fake_free(&f);
    egpu_sched_cache_free(c);
}

/* Filter's refusals of a DRA pod, each an Error kube-scheduler shows and
 * retries on: its claim not in the cache yet, its template's claim not made
 * yet, gpu-core beside the marker, a claim spec it cannot read, and any DRA
 * pod without --dra. Where the model finds no node that fits, the nodes it
 * knows all pass (the allocator's filter stands); an unknown one fails. */
static void test_dra_filter_refusals_and_fallback(void **state)
{
    struct egpu_sched_cache *c = egpu_sched_cache_new();
    const char *const nodes[] = {"n1", "ghost"};
    struct fake_api f = {0}, g = {0};
    struct egpu_extender *x = new_extender(c, &f, EGPU_POLICY_BINPACK, true);
    struct egpu_extender *off = new_extender(c, &g, EGPU_POLICY_BINPACK, false);
    json_t *out, *pod;
    char *body;

    (void)state;
    gpu_node(c, "n1", 1);
    out = filter(x, dra_pod("ml", "p", "mine", NULL), nodes, 2);
    assert_non_null(strstr(error_of(out), "ResourceClaim ml/mine of pod ml/p is not in the "
                                          "elastic-gpu cache yet"));
    assert_true(json_is_null(json_object_get(out, "NodeNames")));
    json_decref(out);
    body = tu_extender_args(dra_pod("ml", "p", "mine", NULL), nodes, 2, false);
    out = call(egpu_extender_prioritize, x, body, 503);
    json_decref(out);
    free(body);
    out = filter(x, dra_pod("ml", "p", NULL, NULL), nodes, 2);
    assert_non_null(strstr(error_of(out), "is not made yet"));
    json_decref(out);
    pod = dra_pod("ml", "p", "mine", NULL);
    json_object_set_new(
        json_object_get(
            json_object_get(
                json_array_get(json_object_get(json_object_get(pod, "spec"), "containers"), 0),
                "resources"),
            "requests"),
        EGPU_RES_GPU_CORE, json_string("30"));
    out = filter(x, pod, nodes, 2);
    assert_non_null(strstr(error_of(out), "asks elasticgpu.io/gpu-core beside elasticgpu.io/dra"));
    json_decref(out);
    out = filter(off, dra_pod("ml", "p", "mine", NULL), nodes, 2);
    assert_non_null(strstr(error_of(out), "without --dra"));
    json_decref(out);
    /* A spec naming a capacity the devices do not have. */
    {
        json_t *claim =
            make_claim("ml", "bad", 1, "gpu-share.elasticgpu.io", 1, 30, 4096, NULL, -1);
        json_t *caps = json_object_get(
            json_object_get(
                json_object_get(
                    json_array_get(
                        json_object_get(json_object_get(json_object_get(claim, "spec"), "devices"),
                                        "requests"),
                        0),
                    "exactly"),
                "capacity"),
            "requests");

        json_object_set_new(caps, "watts", json_string("300"));
        claim_ok(c, claim);
    }
    out = filter(x, dra_pod("ml", "p", "bad", NULL), nodes, 2);
    assert_non_null(strstr(error_of(out), "watts"));
    json_decref(out);
    /* 4 whole cards fit no node of one card in the model: n1 passes all
     * the same, ghost fails as unknown. */
    claim_ok(c, make_claim("ml", "four", 1, "gpu.elasticgpu.io", 4, 0, 0, NULL, -1));
    out = filter(x, dra_pod("ml", "p", "four", NULL), nodes, 2);
    assert_string_equal(error_of(out), "");
    assert_true(passes(out, "n1"));
    assert_false(passes(out, "ghost"));
    assert_non_null(json_object_get(json_object_get(out, "FailedNodes"), "ghost"));
    json_decref(out);
    egpu_extender_free(x);
    egpu_extender_free(off);
    fake_free(&f);
    fake_free(&g);
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

/* bind of a DRA pod: the Binding only (no elasticgpu.io/assigned), then the
 * pod and its claim read from the API server: the allocation kube-scheduler
 * wrote is held at once, so the next pod is scored against it. Without
 * --dra it is refused and nothing is bound. */
static void test_dra_bind(void **state)
{
    struct egpu_sched_cache *c = egpu_sched_cache_new();
    const struct result r = {"n1", 0, 30, 4096};
    struct fake_api f = {0}, g = {0};
    struct egpu_extender *x = new_extender(c, &f, EGPU_POLICY_BINPACK, true);
    struct egpu_extender *off = new_extender(c, &g, EGPU_POLICY_BINPACK, false);
    struct egpu_error err = {0};
    uint64_t counts[EGPU_BIND_RESULTS];
    json_t *out, *pod;
    char *body;

    (void)state;
    gpu_node(c, "n1", 1);
    pod = dra_pod("ml", "p", "p-egpu-0-x7k2q", NULL);
    assert_int_equal(egpu_sched_cache_pod_set(c, pod, &err), 0);
    json_object_set_new(f.pods, "ml/p", pod);
    claim_ok(
        c, make_claim("ml", "p-egpu-0-x7k2q", 5, "gpu-share.elasticgpu.io", 1, 30, 4096, NULL, -1));
    /* What the API server holds after PreBind. */
    json_object_set_new(
        f.claims, "ml/p-egpu-0-x7k2q",
        make_claim("ml", "p-egpu-0-x7k2q", 6, "gpu-share.elasticgpu.io", 1, 30, 4096, &r, 1));
    body = bind_args("ml", "p", "n1");
    out = call(egpu_extender_bind, off, body, 200);
    assert_non_null(strstr(error_of(out), "without --dra"));
    json_decref(out);
    assert_int_equal(g.bind_calls, 0);
    egpu_extender_bind_counts(off, counts);
    assert_int_equal(counts[EGPU_BIND_NOT_OURS], 1);
    out = call(egpu_extender_bind, x, body, 200);
    assert_string_equal(error_of(out), "");
    json_decref(out);
    free(body);
    assert_int_equal(f.bind_calls, 1);
    assert_int_equal(f.annotate_calls, 0);
    assert_int_equal(f.get_pod_calls, 1);
    assert_int_equal(f.get_claim_calls, 1);
    assert_int_equal(card_used(c, "n1", 0, false), 300);
    assert_int_equal(card_used(c, "n1", 0, true), 4096);
    /* The pod's CPU counts on n1 at once. */
    {
        struct egpu_cluster *cl = egpu_sched_cache_lock(c);

        assert_int_equal(egpu_cluster_node(cl, "n1")->used_cpu_milli, 1000);
        egpu_sched_cache_unlock(c);
    }
    /* The claim's watch events lag: the one before PreBind does not free it. */
    claim_ok(
        c, make_claim("ml", "p-egpu-0-x7k2q", 5, "gpu-share.elasticgpu.io", 1, 30, 4096, NULL, -1));
    assert_int_equal(card_used(c, "n1", 0, false), 300);
    /* Bound again: refused as placed already, nothing more bound. */
    body = bind_args("ml", "p", "n1");
    out = call(egpu_extender_bind, x, body, 200);
    assert_non_null(strstr(error_of(out), "already placed"));
    json_decref(out);
    free(body);
    assert_int_equal(f.bind_calls, 1);
    assert_int_equal(card_used(c, "n1", 0, false), 300);
    egpu_extender_bind_counts(x, counts);
    assert_int_equal(counts[EGPU_BIND_OK], 1);
    egpu_extender_free(x);
    egpu_extender_free(off);
    fake_free(&f);
    fake_free(&g);
    egpu_sched_cache_free(c);
}

/* The marker makes a DRA pod; it asks no gpu-core, so its cards are only
 * its claims'. */
static void test_dra_pod_parse(void **state)
{
    struct egpu_sched_pod p = {0};
    struct egpu_error err = {0};
    json_t *pod = dra_pod("ml", "p", "c", NULL);

    (void)state;
    egpu_sched_pod_clear(&p);
    assert_int_equal(egpu_sched_pod_parse(pod, &p, &err), 0);
    assert_true(p.dra);
    assert_false(egpu_sched_pod_wants_gpu(&p));
    assert_int_equal(p.req.cpu_milli, 1000);
    json_decref(pod);
    egpu_sched_pod_clear(&p);
}

/* FGD's target workload learned from the cache counts a DRA pod by its
 * claim's ask, not as a pod without GPUs. */
static void test_dra_workload_from_claims(void **state)
{
    struct egpu_sched_cache *c = egpu_sched_cache_new();
    struct egpu_workload w = {0};
    struct egpu_error err = {0};
    json_t *pod;

    (void)state;
    gpu_node(c, "n1", 1);
    for (int i = 0; i < 3; i++) {
        char name[16], cl[16];

        snprintf(name, sizeof(name), "p%d", i);
        snprintf(cl, sizeof(cl), "c%d", i);
        pod = dra_pod("ml", name, cl, NULL);
        assert_int_equal(egpu_sched_cache_pod_set(c, pod, &err), 0);
        json_decref(pod);
        claim_ok(c, make_claim("ml", cl, 1, "gpu-share.elasticgpu.io", 1, 30, 4096, NULL, -1));
    }
    egpu_sched_cache_lock(c);
    assert_int_equal(egpu_sched_cache_workload_locked(c, &w), 0);
    egpu_sched_cache_unlock(c);
    assert_int_equal(w.n, 1);
    assert_int_equal(w.pods[0].gpu_milli, 300);
    assert_int_equal(w.pods[0].ncards, 1);
    egpu_workload_free(&w);
    egpu_sched_cache_free(c);
}

/* A DRA pod's claims: a claim by name, one from a template through
 * status.resourceClaimStatuses (one whose entry has no claim needs none),
 * the extended-resource claim; a template's claim not made yet is -EAGAIN,
 * an entry with neither name is refused naming it. */
static void test_dra_pod_claim_names(void **state)
{
    struct egpu__sched_dra_refs refs;
    struct egpu_error err = {0};
    json_t *pod =
        json_pack("{s:{s:s},s:{s:[{s:s,s:s},{s:s,s:s},{s:s,s:s}]},s:{s:[{s:s,s:s},{s:s,s:n}],"
                  "s:{s:s}}}",
                  "metadata", "name", "p", "spec", "resourceClaims", "name", "a",
                  "resourceClaimName", "shared", "name", "b", "resourceClaimTemplateName", "t",
                  "name", "c", "resourceClaimTemplateName", "t2", "status", "resourceClaimStatuses",
                  "name", "b", "resourceClaimName", "p-b-x7k2q", "name", "c", "resourceClaimName",
                  "extendedResourceClaimStatus", "resourceClaimName", "p-extended-9z");

    (void)state;
    assert_int_equal(egpu__sched_dra_refs(pod, &refs, &err), 0);
    assert_int_equal(refs.n, 3);
    assert_string_equal(refs.names[0], "shared");
    assert_string_equal(refs.names[1], "p-b-x7k2q");
    assert_string_equal(refs.names[2], "p-extended-9z");
    /* b's claim not made yet. */
    json_array_remove(json_object_get(json_object_get(pod, "status"), "resourceClaimStatuses"), 0);
    assert_int_equal(egpu__sched_dra_refs(pod, &refs, &err), -EAGAIN);
    assert_non_null(strstr(err.msg, "spec.resourceClaims[1] (b): the claim from template t"));
    /* An entry naming neither. */
    json_object_del(
        json_array_get(json_object_get(json_object_get(pod, "spec"), "resourceClaims"), 0),
        "resourceClaimName");
    assert_int_equal(egpu__sched_dra_refs(pod, &refs, &err), EGPU_ESYNTAX);
    assert_non_null(strstr(err.msg, "spec.resourceClaims[0]: neither"));
    json_decref(pod);
    /* No resourceClaims at all: no claim; not a list: refused. */
    pod = json_pack("{s:{s:s},s:{}}", "metadata", "name", "p", "spec");
    assert_int_equal(egpu__sched_dra_refs(pod, &refs, &err), 0);
    assert_int_equal(refs.n, 0);
    json_object_set_new(json_object_get(pod, "spec"), "resourceClaims", json_string("x"));
    assert_int_equal(egpu__sched_dra_refs(pod, &refs, &err), EGPU_ESYNTAX);
    json_decref(pod);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_claim_allocate_deallocate_delete),
        cmocka_unit_test(test_claim_rebuild_wait_overfill),
        cmocka_unit_test(test_claim_hostile_status),
        cmocka_unit_test(test_claim_read_beats_stale_events),
        cmocka_unit_test(test_dra_pod_parse),
        cmocka_unit_test(test_dra_pod_claim_names),
        cmocka_unit_test(test_dra_pod_scored_against_claims),
        cmocka_unit_test(test_dra_filter_refusals_and_fallback),
        cmocka_unit_test(test_dra_share_without_memory_takes_the_card_memory),
        cmocka_unit_test(test_dra_bind),
        cmocka_unit_test(test_dra_workload_from_claims),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
