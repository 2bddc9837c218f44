/* tests/unit/test_kubectl_dra.c - kubectl-egpu inspect on DRA-mode nodes
 * (src/kubectl/dra.c, render.c): ResourceSlices and allocated
 * ResourceClaims decoded and shown with the device-plugin nodes' GPU
 * objects, byte for byte as a table, a wide table and JSON; the pool's
 * newest generation only, whatever the order; every malformed slice and
 * claim refused with a message naming the field and the set left as it was;
 * a result naming no published device left out alone; the shared fixtures
 * (../shared/k8s-wire/dra) read as the agent and the scheduler write them;
 * every allocation failing in turn (an error, no crash, no leak, nothing of
 * a claim half added). Objects are written with ' for " (tu_json()).
 */
#include "testutil.h"
#include "testjson.h"

#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>

#include "egpu/api.h"
#include "egpu/kubectl.h"
#include "kubectl_int.h"

#define FIXTURES EGPU_SOURCE_DIR "/../shared/k8s-wire/dra/"

#define GPU(name, node, idx, model, mem, status)                                          \
    "{'apiVersion': 'elasticgpu.io/v1alpha1', 'kind': 'GPU', 'metadata': {'name': '" name \
    "'}, 'spec': {'nodeName': '" node "', 'index': " idx ", 'uuid': 'GPU-" name           \
    "', 'model': '" model "', 'memory': " mem "}" status "}"

#define SLICE(node, gen, devices)                                                            \
    "{'apiVersion': 'resource.k8s.io/v1', 'kind': 'ResourceSlice', 'metadata': {'name': '0-" \
    "gpu.elasticgpu.io-" node "-x" gen "'}, 'spec': {'driver': 'gpu.elasticgpu.io', "        \
    "'nodeName': '" node "', 'pool': {'name': '" node "', 'generation': " gen                \
    ", 'resourceSliceCount': 1}, 'devices': [" devices "]}}"

#define DEV(idx, uuid, model, mem)                                                                \
    "{'name': 'gpu-" idx "', 'attributes': {'index': {'int': " idx "}, 'uuid': {'string': '" uuid \
    "'}, 'productName': {'string': '" model "'}, 'type': {'string': 'gpu'}}, 'capacity': "        \
    "{'cores': {'value': '100', 'requestPolicy': {'default': '100', 'validRange': {'min': '1', "  \
    "'max': '100', 'step': '1'}}}, 'memory': {'value': '" mem "'}}, "                             \
    "'allowMultipleAllocations': true}"

#define CLAIM(ns, name, results, reserved)                                                      \
    "{'apiVersion': 'resource.k8s.io/v1', 'kind': 'ResourceClaim', 'metadata': {'name': '" name \
    "', 'namespace': '" ns "'}, 'spec': {'devices': {'requests': []}}, 'status': "              \
    "{'allocation': {'devices': {'results': [" results "]}}, 'reservedFor': [" reserved "]}}"

#define RES(pool, dev, share, cores, mem)                                                   \
    "{'request': 'gpu', 'driver': 'gpu.elasticgpu.io', 'pool': '" pool "', 'device': '" dev \
    "', 'shareID': '" share "', 'consumedCapacity': {'cores': '" cores "', 'memory': '" mem "'}}"

/* shareIDs: UUIDs, as kube-scheduler writes them (egpu_api_dra_results refuses others) */
#define SHARE_TRAIN "7e1c0a4e-1d1e-4c3a-9a38-3a4d2f6b9a01"
#define SHARE_INFER "7e1c0a4e-1d1e-4c3a-9a38-3a4d2f6b9a02"
#define SHARE_1     "7e1c0a4e-1d1e-4c3a-9a38-3a4d2f6b9a11"
#define SHARE_2     "7e1c0a4e-1d1e-4c3a-9a38-3a4d2f6b9a12"
#define SHARE_3     "7e1c0a4e-1d1e-4c3a-9a38-3a4d2f6b9a13"
#define SHARE_S     "7e1c0a4e-1d1e-4c3a-9a38-3a4d2f6b9a21"
#define SHARE_T     "7e1c0a4e-1d1e-4c3a-9a38-3a4d2f6b9a22"

#define POD(name) "{'resource': 'pods', 'name': '" name "', 'uid': 'uid-" name "'}"

/* n1 in device-plugin mode (one shared card); n2 in DRA mode: its slice's
 * gpu-0 (with the GPU object of its UUID: health and used) holding two
 * shares, gpu-1 held whole by a claim, and a card the slice leaves out
 * (its GPU object says Unhealthy). */
static const char *const gpu_objs[] = {
    GPU("n1-gpu0", "n1", "0", "A100", "40960",
        ", 'status': {'health': 'Healthy', 'allocated': [{'namespace': 'default', 'pod': "
        "'infer', 'container': 'srv', 'core': 20, 'memory': 8192}]}"),
    GPU("n2-gpu0", "n2", "0", "H100", "81559",
        ", 'status': {'health': 'Healthy', 'used': {'memory': 5000, 'utilization': 41}}"),
    GPU("n2-gpu2", "n2", "2", "H100", "81559", ", 'status': {'health': 'Unhealthy'}"),
};
#define NGPUS (sizeof(gpu_objs) / sizeof(gpu_objs[0]))

static const char *const slice_objs[] = {
    SLICE("n2", "2",
          DEV("0", "GPU-n2-gpu0", "NVIDIA H100 80GB HBM3",
              "81559Mi") ", " DEV("1", "GPU-n2-gpu1", "NVIDIA H100 80GB HBM3", "80Gi")),
    /* An older generation of the pool: passed over. */
    SLICE("n2", "1", DEV("0", "GPU-old", "old", "1Gi") ", " DEV("5", "GPU-old5", "old", "1Gi")),
};
#define NSLICES (sizeof(slice_objs) / sizeof(slice_objs[0]))

static const char *const claim_objs[] = {
    CLAIM("ml", "train", RES("n2", "gpu-0", SHARE_TRAIN, "30", "4Gi"), POD("train-0")),
    CLAIM("ml", "infer", RES("n2", "gpu-0", SHARE_INFER, "20", "8192Mi"),
          POD("infer-a") ", " POD("infer-b") ", " POD("infer-c")),
    /* A device not shared: no consumedCapacity, no shareID. */
    CLAIM("team-a", "whole",
          "{'request': 'gpu', 'driver': 'gpu.elasticgpu.io', 'pool': 'n2', 'device': 'gpu-1'}",
          POD("big")),
    /* Another driver's device, and a claim not allocated: nothing to show. */
    CLAIM("other", "nic",
          "{'request': 'n', 'driver': 'nic.example.com', 'pool': 'n2', 'device': 'x'}", POD("p")),
    "{'apiVersion': 'resource.k8s.io/v1', 'kind': 'ResourceClaim', 'metadata': {'name': "
    "'pending', 'namespace': 'ml'}, 'spec': {'devices': {'requests': []}}}",
};
#define NCLAIMS (sizeof(claim_objs) / sizeof(claim_objs[0]))

static void decode_gpus(struct egpu_api_gpu *g)
{
    for (size_t i = 0; i < NGPUS; i++) {
        struct egpu_error err = {0};
        json_t *o = tu_json(gpu_objs[i]);

        if (egpu_api_gpu_decode(o, &g[i], &err))
            fail_msg("GPU %zu: %s", i, err.msg);
        json_decref(o);
    }
}

static void clear_gpus(struct egpu_api_gpu *g)
{
    for (size_t i = 0; i < NGPUS; i++)
        egpu_api_gpu_clear(&g[i]);
}

/* rc of adding text to d as a slice or a claim; err filled. */
static int add(struct egpu_kubectl_dra *d, bool slice, const char *text, struct egpu_error *err)
{
    json_t *o = tu_json(text);
    int rc;

    memset(err, 0, sizeof(*err));
    rc = slice ? egpu_kubectl_dra_add_slice(d, o, err) : egpu_kubectl_dra_add_claim(d, o, err);
    json_decref(o);
    return rc;
}

static struct egpu_kubectl_dra *make_dra(void)
{
    struct egpu_kubectl_dra *d = egpu_kubectl_dra_new(NULL);
    struct egpu_error err;

    assert_non_null(d);
    for (size_t i = 0; i < NSLICES; i++)
        if (add(d, true, slice_objs[i], &err))
            fail_msg("slice %zu: %s", i, err.msg);
    for (size_t i = 0; i < NCLAIMS; i++)
        if (add(d, false, claim_objs[i], &err))
            fail_msg("claim %zu: %s", i, err.msg);
    return d;
}

static void expect(int rc, struct egpu_buf *b, const char *want)
{
    assert_int_equal(rc, 0);
    if (strcmp(egpu_buf_str(b), want) != 0) {
        fprintf(stderr, "got:\n%s\nwant:\n%s\n", egpu_buf_str(b), want);
        egpu_buf_free(b);
        fail();
    }
    egpu_buf_free(b);
}

static void test_inspect_table(void **state)
{
    struct egpu_api_gpu g[NGPUS];
    struct egpu_kubectl_dra *d;
    struct egpu_buf b;
    long live = egpu_alloc_live();

    (void)state;
    decode_gpus(g);
    d = make_dra();
    assert_int_equal(egpu_kubectl_dra_cards(d, NULL), 2);
    assert_int_equal(egpu_kubectl_dra_cards(d, "n2"), 2);
    assert_int_equal(egpu_kubectl_dra_cards(d, "n1"), 0);
    egpu_buf_init(&b, EGPU_KUBECTL_OUT_MAX);
    expect(egpu_kubectl_inspect_all(g, NGPUS, d, NULL, EGPU_KUBECTL_TABLE, &b), &b,
           "NODE   MODE            GPU     MODEL                   HEALTH      CORE            "
           "MEMORY(MiB)          POD               CONTAINER   CLAIM\n"
           "n1     device-plugin   0       A100                    Healthy     20/100          "
           "8192/40960\n"
           "                                                                   20              "
           "8192                 default/infer     srv         <none>\n"
           "n1                     total                                       20/100 (20%)    "
           "8192/40960 (20%)\n"
           "n2     dra             0       NVIDIA H100 80GB HBM3   Healthy     50/100          "
           "12288/81559\n"
           "                                                                   20              "
           "8192                 ml/infer-a (+2)   <none>      infer\n"
           "                                                                   30              "
           "4096                 ml/train-0        <none>      train\n"
           "n2     dra             1       NVIDIA H100 80GB HBM3   Healthy     100/100         "
           "81920/81920\n"
           "                                                                   100             all "
           "                 team-a/big        <none>      whole\n"
           "n2     dra             2       H100                    Unhealthy   0/100           "
           "0/81559\n"
           "n2                     total                                       150/300 (50%)   "
           "94208/245038 (38%)\n"
           "\n"
           "Cluster: 2 nodes, 4 GPUs, core 170/400 (42%), memory 102400/285998 MiB (35%)\n");
    /* NODE keeps one node; a device-plugin node alone has no MODE column. */
    egpu_buf_init(&b, EGPU_KUBECTL_OUT_MAX);
    expect(egpu_kubectl_inspect_all(g, NGPUS, d, "n1", EGPU_KUBECTL_TABLE, &b), &b,
           "NODE   GPU     MODEL   HEALTH    CORE           MEMORY(MiB)        POD             "
           "CONTAINER   CLAIM\n"
           "n1     0       A100    Healthy   20/100         8192/40960\n"
           "                                 20             8192               default/infer   "
           "srv         <none>\n"
           "n1     total                     20/100 (20%)   8192/40960 (20%)\n"
           "\n"
           "Cluster: 1 node, 1 GPU, core 20/100 (20%), memory 8192/40960 MiB (20%)\n");
    egpu_buf_init(&b, EGPU_KUBECTL_OUT_MAX);
    expect(egpu_kubectl_inspect_all(g, NGPUS, d, "n2", EGPU_KUBECTL_WIDE, &b), &b,
           "NODE   MODE   GPU     MODEL                   HEALTH      CORE            "
           "MEMORY(MiB)          USED(MiB)   UTIL(%)   UUID          POD               "
           "CONTAINER   CLAIM\n"
           "n2     dra    0       NVIDIA H100 80GB HBM3   Healthy     50/100          "
           "12288/81559          5000        41        GPU-n2-gpu0\n"
           "                                                          20              "
           "8192                                                     ml/infer-a (+2)   "
           "<none>      infer\n"
           "                                                          30              "
           "4096                                                     ml/train-0        "
           "<none>      train\n"
           "n2     dra    1       NVIDIA H100 80GB HBM3   Healthy     100/100         "
           "81920/81920          <none>      <none>    GPU-n2-gpu1\n"
           "                                                          100             "
           "all                                                      team-a/big        "
           "<none>      whole\n"
           "n2     dra    2       H100                    Unhealthy   0/100           "
           "0/81559              <none>      <none>    GPU-n2-gpu2\n"
           "n2            total                                       150/300 (50%)   "
           "94208/245038 (38%)\n"
           "\n"
           "Cluster: 1 node, 3 GPUs, core 150/300 (50%), memory 94208/245038 MiB (38%)\n");
    egpu_kubectl_dra_free(d);
    clear_gpus(g);
    assert_int_equal(egpu_alloc_live(), live);
}

static void test_inspect_json(void **state)
{
    struct egpu_api_gpu g[NGPUS];
    struct egpu_kubectl_dra *d;
    struct egpu_buf b;
    json_t *doc, *want;

    (void)state;
    decode_gpus(g);
    d = make_dra();
    egpu_buf_init(&b, EGPU_KUBECTL_OUT_MAX);
    assert_int_equal(egpu_kubectl_inspect_all(g, NGPUS, d, "n2", EGPU_KUBECTL_JSON, &b), 0);
    doc = json_loads(egpu_buf_str(&b), 0, NULL);
    assert_non_null(doc);
    want = tu_json(
        "{'apiVersion': 'egpu.kubectl/v1', 'kind': 'Inspect', 'nodes': [{'name': 'n2', 'mode': "
        "'dra', 'gpus': ["
        "{'name': 'n2-gpu0', 'device': 'gpu-0', 'index': 0, 'uuid': 'GPU-n2-gpu0', 'model': "
        "'NVIDIA H100 80GB HBM3', 'health': 'Healthy', 'coreAllocated': 50, 'coreTotal': 100, "
        "'memoryAllocated': 12288, 'memoryTotal': 81559, 'used': {'memory': 5000, "
        "'utilization': 41, 'updateTime': null}, 'pods': ["
        "{'namespace': 'ml', 'pod': 'infer-a', 'container': null, 'core': 20, 'memory': 8192, "
        "'claim': 'infer', 'shareID': '" SHARE_INFER "', 'reservedFor': ['infer-a', 'infer-b', "
        "'infer-c']}, "
        "{'namespace': 'ml', 'pod': 'train-0', 'container': null, 'core': 30, 'memory': 4096, "
        "'claim': 'train', 'shareID': '" SHARE_TRAIN "', 'reservedFor': ['train-0']}]}, "
        "{'name': 'gpu-1', 'device': 'gpu-1', 'index': 1, 'uuid': 'GPU-n2-gpu1', 'model': "
        "'NVIDIA H100 80GB HBM3', 'health': 'Healthy', 'coreAllocated': 100, 'coreTotal': 100, "
        "'memoryAllocated': 81920, 'memoryTotal': 81920, 'used': {'memory': null, "
        "'utilization': null, 'updateTime': null}, 'pods': ["
        "{'namespace': 'team-a', 'pod': 'big', 'container': null, 'core': 100, 'memory': 0, "
        "'claim': 'whole', 'shareID': null, 'reservedFor': ['big']}]}, "
        "{'name': 'n2-gpu2', 'device': null, 'index': 2, 'uuid': 'GPU-n2-gpu2', 'model': 'H100', "
        "'health': 'Unhealthy', 'coreAllocated': 0, 'coreTotal': 100, 'memoryAllocated': 0, "
        "'memoryTotal': 81559, 'used': {'memory': null, 'utilization': null, 'updateTime': "
        "null}, 'pods': []}], "
        "'coreAllocated': 150, 'coreTotal': 300, 'memoryAllocated': 94208, 'memoryTotal': "
        "245038}], "
        "'coreAllocated': 150, 'coreTotal': 300, 'memoryAllocated': 94208, 'memoryTotal': "
        "245038}");
    if (!json_equal(doc, want)) {
        fprintf(stderr, "got:\n%s\n", egpu_buf_str(&b));
        fail();
    }
    /* Keys in the documented order. */
    assert_non_null(strstr(egpu_buf_str(&b), "\"name\": \"n2\",\n      \"mode\": \"dra\",\n"));
    assert_non_null(strstr(egpu_buf_str(&b),
                           "\"claim\": \"train\",\n              \"shareID\": "
                           "\"" SHARE_TRAIN "\",\n              \"reservedFor\": ["));
    json_decref(want);
    json_decref(doc);
    egpu_buf_free(&b);
    egpu_kubectl_dra_free(d);
    clear_gpus(g);
}

/* Of a pool only the newest generation counts, in whichever order the
 * slices come; a claim on a device only an older generation had is left
 * out, alone. */
static void test_generations(void **state)
{
    static const char two[] =
        CLAIM("ml", "two",
              RES("n2", "gpu-5", SHARE_1, "10", "1Gi") ", " RES(
                  "n2", "gpu-0", SHARE_2, "10", "1Gi") ", " RES("n9", "gpu-0", SHARE_3, "1", "1Mi"),
              POD("p"));
    struct egpu_kubectl_dra *d = egpu_kubectl_dra_new(NULL);
    struct egpu_error err;
    long live = egpu_alloc_live() - 1;

    (void)state;
    assert_int_equal(add(d, true, slice_objs[1], &err), 0);
    assert_int_equal(egpu_kubectl_dra_cards(d, "n2"), 2);
    assert_string_equal(d->cards[1].device, "gpu-5");
    assert_int_equal(add(d, true, slice_objs[0], &err), 0);
    assert_int_equal(egpu_kubectl_dra_cards(d, "n2"), 2);
    assert_string_equal(d->cards[0].uuid, "GPU-n2-gpu0");
    assert_string_equal(d->cards[1].device, "gpu-1");
    assert_int_equal(d->cards[1].mem_mib, 81920);
    assert_int_equal(add(d, true, slice_objs[1], &err), 0); /* older again: passed over */
    assert_int_equal(egpu_kubectl_dra_cards(d, NULL), 2);
    assert_string_equal(d->cards[1].device, "gpu-1");
    /* Another pool of the same generation sits beside it. */
    assert_int_equal(add(d, true, SLICE("n3", "2", DEV("0", "GPU-n3", "L4", "23034Mi")), &err), 0);
    assert_int_equal(egpu_kubectl_dra_cards(d, NULL), 3);
    assert_int_equal(add(d, false, two, &err), 2);
    assert_string_equal(err.msg, "status.allocation.devices.results: device gpu-5 of pool n2 is "
                                 "in no ResourceSlice of gpu.elasticgpu.io");
    assert_int_equal(d->cards[0].nshares, 1);
    assert_string_equal(d->cards[0].shares[0].share_id, SHARE_2);
    /* Slices come before claims. */
    assert_int_equal(add(d, true, slice_objs[0], &err), -EINVAL);
    egpu_kubectl_dra_free(d);
    assert_int_equal(egpu_alloc_live(), live);
}

/* A pool's newest slice without devices (every card unhealthy) still
 * outranks its older ones, and its node is in DRA mode: the node's GPU
 * objects show under it. */
static void test_empty_slice(void **state)
{
    struct egpu_kubectl_dra *d = egpu_kubectl_dra_new(NULL);
    struct egpu_api_gpu g[NGPUS];
    struct egpu_error err;
    struct egpu_buf b;

    (void)state;
    decode_gpus(g);
    assert_int_equal(add(d, true, SLICE("n2", "4", ""), &err), 0);
    assert_int_equal(add(d, true, slice_objs[0], &err), 0);
    assert_int_equal(egpu_kubectl_dra_cards(d, NULL), 0);
    egpu_buf_init(&b, EGPU_KUBECTL_OUT_MAX);
    expect(egpu_kubectl_inspect_all(g, NGPUS, d, "n2", EGPU_KUBECTL_TABLE, &b), &b,
           "NODE   MODE   GPU     MODEL   HEALTH      CORE         MEMORY(MiB)     POD   CONTAINER "
           "  CLAIM\n"
           "n2     dra    0       H100    Healthy     0/100        0/81559\n"
           "n2     dra    2       H100    Unhealthy   0/100        0/81559\n"
           "n2            total                       0/200 (0%)   0/163118 (0%)\n"
           "\n"
           "Cluster: 1 node, 2 GPUs, core 0/200 (0%), memory 0/163118 MiB (0%)\n");
    egpu_kubectl_dra_free(d);
    clear_gpus(g);
}

/* HEALTH on a DRA node: the GPU object's where not Healthy (the agent's
 * taint of an unhealthy card), else Tainted for a taint that keeps pods
 * off, else Healthy. */
static void test_health(void **state)
{
    static const char *const objs[] = {
        GPU("h-gpu0", "h", "0", "A", "1024", ", 'status': {'health': 'Unhealthy'}"),
        GPU("h-gpu1", "h", "1", "A", "1024", ", 'status': {'health': 'Healthy'}"),
    };
    static const char slice[] = SLICE(
        "h", "1",
        "{'name': 'gpu-0', 'attributes': {'index': {'int': 0}, 'uuid': {'string': 'GPU-h-gpu0'}}, "
        "'taints': [{'key': 'gpu.elasticgpu.io/unhealthy', 'value': 'XID-79', 'effect': "
        "'NoSchedule'}]}, "
        "{'name': 'gpu-1', 'attributes': {'index': {'int': 1}, 'uuid': {'string': 'GPU-h-gpu1'}}, "
        "'taints': [{'key': 'k', 'effect': 'NoExecute'}]}, "
        "{'name': 'gpu-2', 'attributes': {'index': {'int': 2}}, 'taints': [{'key': 'k', "
        "'effect': 'NoSchedule'}]}, "
        "{'name': 'gpu-3', 'attributes': {'index': {'int': 3}}}");
    static const char *const want[] = {"Unhealthy", "Tainted", "Tainted", "Healthy"};
    struct egpu_kubectl_dra *d = egpu_kubectl_dra_new(NULL);
    struct egpu_api_gpu g[2];
    struct egpu_error err;
    struct egpu_buf b;
    json_t *doc, *c;
    size_t i;

    (void)state;
    for (i = 0; i < 2; i++) {
        json_t *o = tu_json(objs[i]);

        if (egpu_api_gpu_decode(o, &g[i], &err))
            fail_msg("%s", err.msg);
        json_decref(o);
    }
    assert_int_equal(add(d, true, slice, &err), 0);
    egpu_buf_init(&b, EGPU_KUBECTL_OUT_MAX);
    assert_int_equal(egpu_kubectl_inspect_all(g, 2, d, NULL, EGPU_KUBECTL_JSON, &b), 0);
    doc = json_loads(egpu_buf_str(&b), 0, NULL);
    assert_non_null(doc);
    assert_int_equal(json_array_size(json_object_get(doc, "nodes")), 1);
    json_array_foreach(json_object_get(json_array_get(json_object_get(doc, "nodes"), 0), "gpus"), i,
                       c)
    {
        assert_true(i < 4);
        assert_string_equal(json_string_value(json_object_get(c, "health")), want[i]);
    }
    assert_int_equal(i, 4);
    json_decref(doc);
    egpu_buf_free(&b);
    egpu_kubectl_dra_free(d);
    egpu_api_gpu_clear(&g[0]);
    egpu_api_gpu_clear(&g[1]);
}

/* Each malformed slice is refused with its field named, d left as it was. */
static void test_bad_slices(void **state)
{
    static const struct {
        const char *obj;
        int rc;
        const char *msg;
    } rows[] = {
        {"[]", EGPU_ESYNTAX, "not an object; allowed: a ResourceSlice"},
        {"{'kind': 'ResourceSlice'}", EGPU_ESYNTAX,
         "spec is missing; allowed: a ResourceSliceSpec"},
        {"{'spec': []}", EGPU_ESYNTAX, "spec is not an object; allowed: an object"},
        {"{'spec': {'driver': 'gpu.nvidia.com', 'nodeName': 'n', 'pool': {'name': 'n', "
         "'generation': 1}}}",
         EGPU_ESYNTAX, "spec.driver is \"gpu.nvidia.com\"; allowed: gpu.elasticgpu.io"},
        {"{'spec': {'driver': 7}}", EGPU_ESYNTAX, "spec.driver is not a string; allowed: a string"},
        {"{'spec': {'driver': 'gpu.elasticgpu.io', 'allNodes': true, 'pool': {'name': 'n', "
         "'generation': 1}}}",
         EGPU_ESYNTAX,
         "spec.nodeName is missing; allowed: a node's name (egpu-agent publishes one slice per "
         "node)"},
        {"{'spec': {'driver': 'gpu.elasticgpu.io', 'nodeName': 'n'}}", EGPU_ESYNTAX,
         "spec.pool is missing; allowed: a ResourcePool"},
        {"{'spec': {'driver': 'gpu.elasticgpu.io', 'nodeName': 'n', 'pool': {'generation': 1}}}",
         EGPU_ESYNTAX, "spec.pool.name is missing; allowed: a string"},
        {"{'spec': {'driver': 'gpu.elasticgpu.io', 'nodeName': 'n', 'pool': {'name': 'n', "
         "'generation': -1}}}",
         EGPU_ERANGE,
         "spec.pool.generation is not a whole number >= 0; allowed: the pool's generation"},
        {"{'spec': {'driver': 'gpu.elasticgpu.io', 'nodeName': 'n', 'pool': {'name': 'n', "
         "'generation': '1'}}}",
         EGPU_ERANGE,
         "spec.pool.generation is not a whole number >= 0; allowed: the pool's generation"},
        {"{'spec': {'driver': 'gpu.elasticgpu.io', 'nodeName': 'n', 'pool': {'name': 'n', "
         "'generation': 1}, 'devices': {}}}",
         EGPU_ESYNTAX, "spec.devices is not an array; allowed: an array"},
        {SLICE("n", "1", "7"), EGPU_ESYNTAX, "spec.devices[0] is not an object; allowed: a Device"},
        {SLICE("n", "1", "{}"), EGPU_ESYNTAX, "spec.devices[0].name is missing; allowed: a string"},
        {SLICE("n", "1", "{'name': 'GPU_0'}"), EGPU_ESYNTAX,
         "spec.devices[0].name is \"GPU_0\"; allowed: a DNS label (a-z, 0-9, '-', at most 63)"},
        {SLICE("n", "1", "{'name': 'a'}, {'name': 'a'}"), EGPU_ESYNTAX,
         "spec.devices[1].name is \"a\" as devices[0]'s; allowed: a name once per pool"},
        {SLICE("n", "1", "{'name': 'a', 'attributes': []}"), EGPU_ESYNTAX,
         "spec.devices[0].attributes is not an object; allowed: an object"},
        {SLICE("n", "1", "{'name': 'a', 'attributes': {'index': {'int': 1024}}}"), EGPU_ERANGE,
         "spec.devices[0].attributes.index.int is not a whole number 0..1023; allowed: the "
         "card's index 0..1023"},
        {SLICE("n", "1", "{'name': 'a', 'attributes': {'uuid': {'string': 5}}}"), EGPU_ESYNTAX,
         "spec.devices[0].attributes.uuid.string is not a string; allowed: a string"},
        {SLICE("n", "1",
               "{'name': 'a', 'attributes': {'productName': {'string': "
               "'12345678901234567890123456789012345678901234567890123456789012345'}}}"),
         EGPU_ESYNTAX,
         "spec.devices[0].attributes.productName.string is 65 bytes long; allowed: at most 64 "
         "bytes"},
        {SLICE("n", "1", "{'name': 'a', 'capacity': {'cores': {'value': '150'}}}"), EGPU_ERANGE,
         "spec.devices[0].capacity.cores.value is \"150\"; allowed: a whole number 1..100 "
         "(percent of the card)"},
        {SLICE("n", "1", "{'name': 'a', 'capacity': {'cores': {'value': 100}}}"), EGPU_ESYNTAX,
         "spec.devices[0].capacity.cores.value is not a string; allowed: a quantity, e.g. "
         "\"30\""},
        {SLICE("n", "1", "{'name': 'a', 'capacity': {'memory': {'value': '-1Mi'}}}"), EGPU_ERANGE,
         "spec.devices[0].capacity.memory.value is \"-1Mi\"; allowed: a quantity of bytes "
         "0..4294967295Mi"},
        {SLICE("n", "1", "{'name': 'a', 'capacity': {'memory': {'value': '9Ei'}}}"), EGPU_ERANGE,
         "spec.devices[0].capacity.memory.value is \"9Ei\"; allowed: a quantity of bytes "
         "0..4294967295Mi"},
        {SLICE("n", "1", "{'name': 'a', 'capacity': {'memory': 'x'}}"), EGPU_ESYNTAX,
         "spec.devices[0].capacity.memory is not an object; allowed: an object"},
        {SLICE("n", "1", "{'name': 'a', 'taints': {}}"), EGPU_ESYNTAX,
         "spec.devices[0].taints is not an array; allowed: an array"},
        /* A device another slice of the pool's generation has. */
        {SLICE("n2", "2", "{'name': 'gpu-1'}"), EGPU_ESYNTAX,
         "spec.devices[0].name is \"gpu-1\", in another ResourceSlice of pool n2 too; allowed: a "
         "name once per pool"},
    };
    struct egpu_kubectl_dra *d = egpu_kubectl_dra_new(NULL);
    struct egpu_error err;
    char many[140 * 16 + 256];
    size_t used;

    (void)state;
    assert_int_equal(add(d, true, slice_objs[0], &err), 0);
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        int rc = add(d, true, rows[i].obj, &err);

        if (rc != rows[i].rc || strcmp(err.msg, rows[i].msg) != 0)
            fail_msg("row %zu: rc %d, \"%s\"", i, rc, err.msg);
        assert_int_equal(d->ncards, 2);
        assert_int_equal(d->cards[1].mem_mib, 81920);
    }
    /* At most 128 devices. */
    used = (size_t)snprintf(many, sizeof(many),
                            "{'spec': {'driver': 'gpu.elasticgpu.io', 'nodeName': 'n', 'pool': "
                            "{'name': 'n', 'generation': 1}, 'devices': [");
    for (int i = 0; i < 129; i++)
        used += (size_t)snprintf(many + used, sizeof(many) - used, "%s{'name': 'g%d'}",
                                 i ? ", " : "", i);
    snprintf(many + used, sizeof(many) - used, "]}}");
    assert_int_equal(add(d, true, many, &err), EGPU_ERANGE);
    assert_string_equal(err.msg, "spec.devices has 129 entries; allowed: at most 128");
    /* A taint that keeps pods off; one of effect None does not. */
    assert_int_equal(add(d, true,
                         SLICE("t", "1",
                               "{'name': 'gpu-0', 'taints': [{'key': 'k', 'effect': 'None'}]}, "
                               "{'name': 'gpu-1', 'taints': [{'key': 'k', 'effect': "
                               "'NoSchedule'}]}"),
                         &err),
                     0);
    assert_false(d->cards[2].tainted);
    assert_true(d->cards[3].tainted);
    assert_int_equal(d->cards[2].index, -1); /* no index attribute */
    assert_int_equal(d->cards[2].core_total, 100);
    egpu_kubectl_dra_free(d);
}

/* Each malformed claim is refused with its field named, nothing added. */
static void test_bad_claims(void **state)
{
    static const struct {
        const char *obj;
        int rc;
        const char *msg;
    } rows[] = {
        {"['x']", EGPU_ESYNTAX, "not an object; allowed: a ResourceClaim"},
        {"{'metadata': {'namespace': 'ml'}}", EGPU_ESYNTAX,
         "metadata.name is missing; allowed: a string"},
        {"{'metadata': {'name': 'c'}}", EGPU_ESYNTAX,
         "metadata.namespace is missing; allowed: a string"},
        {"{'metadata': {'name': 'c', 'namespace': 'ml'}, 'status': 3}", EGPU_ESYNTAX,
         "status is not an object; allowed: an object"},
        {"{'metadata': {'name': 'c', 'namespace': 'ml'}, 'status': {'allocation': {'devices': "
         "{'results': {}}}}}",
         EGPU_ESYNTAX, "status.allocation.devices.results is not an array; allowed: an array"},
        {CLAIM("ml", "c", "7", ""), EGPU_ESYNTAX,
         "status.allocation.devices.results[0] is not an object; allowed: a "
         "DeviceRequestAllocationResult"},
        {CLAIM("ml", "c", "{'pool': 'n2', 'device': 'gpu-0'}", ""), EGPU_ESYNTAX,
         "status.allocation.devices.results[0].driver is missing; allowed: a string"},
        {CLAIM("ml", "c", "{'driver': 'gpu.elasticgpu.io', 'device': 'gpu-0'}", ""), EGPU_ESYNTAX,
         "status.allocation.devices.results[0].pool is missing; allowed: a string"},
        {CLAIM("ml", "c", RES("n2", "gpu-0", SHARE_S, "101", "1Gi"), ""), EGPU_ERANGE,
         "status.allocation.devices.results[0].consumedCapacity.cores is \"101\"; allowed: a "
         "whole number 0..100 (percent of one card)"},
        {CLAIM("ml", "c", RES("n2", "gpu-0", SHARE_S, "30", "lots"), ""), EGPU_ERANGE,
         "status.allocation.devices.results[0].consumedCapacity.memory is \"lots\"; allowed: a "
         "quantity of bytes 0..4294967295Mi"},
        {CLAIM("ml", "c",
               "{'request': 'gpu', 'driver': 'gpu.elasticgpu.io', 'pool': 'n2', 'device': "
               "'gpu-0', 'consumedCapacity': []}",
               ""),
         EGPU_ESYNTAX,
         "status.allocation.devices.results[0].consumedCapacity is not an object; allowed: an "
         "object"},
        {CLAIM("ml", "c", RES("n2", "gpu-0", SHARE_S, "30", "1Gi"), "'pod'"), EGPU_ESYNTAX,
         "status.reservedFor[0] is not an object; allowed: a ResourceClaimConsumerReference"},
        {CLAIM("ml", "c", RES("n2", "gpu-0", SHARE_S, "30", "1Gi"), "{'resource': 'pods'}"),
         EGPU_ESYNTAX, "status.reservedFor[0].name is missing; allowed: a string"},
        /* A fraction of a percent is no value the allocator writes (the
         * slice's step is 1): refused, as the agent and the quota refuse it. */
        {CLAIM("ml", "c", RES("n2", "gpu-0", SHARE_S, "250m", "1Gi"), ""), EGPU_ERANGE,
         "status.allocation.devices.results[0].consumedCapacity.cores is \"250m\"; allowed: a "
         "whole number 0..100 (percent of one card)"},
        /* A result without its request, or a request that is no request name. */
        {CLAIM("ml", "c", "{'driver': 'gpu.elasticgpu.io', 'pool': 'n2', 'device': 'gpu-0'}", ""),
         EGPU_ESYNTAX,
         "status.allocation.devices.results[0].request is missing; allowed: a string"},
        /* A result of ours after a good one: nothing of the claim is added. */
        {CLAIM(
             "ml", "c",
             RES("n2", "gpu-0", SHARE_S, "30", "1Gi") ", " RES("n2", "gpu-1", SHARE_T, "x", "1Gi"),
             ""),
         EGPU_ERANGE,
         "status.allocation.devices.results[1].consumedCapacity.cores is \"x\"; allowed: a whole "
         "number 0..100 (percent of one card)"},
    };
    struct egpu_kubectl_dra *d = egpu_kubectl_dra_new(NULL);
    struct egpu_error err;
    char many[64 * 120 + 512];
    size_t used;

    (void)state;
    assert_int_equal(add(d, true, slice_objs[0], &err), 0);
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        int rc = add(d, false, rows[i].obj, &err);

        if (rc != rows[i].rc || strcmp(err.msg, rows[i].msg) != 0)
            fail_msg("row %zu: rc %d, \"%s\"", i, rc, err.msg);
        assert_int_equal(d->cards[0].nshares + d->cards[1].nshares, 0);
    }
    used = (size_t)snprintf(many, sizeof(many),
                            "{'metadata': {'name': 'c', 'namespace': 'ml'}, 'status': "
                            "{'allocation': {'devices': {'results': [");
    for (int i = 0; i < 33; i++)
        used += (size_t)snprintf(many + used, sizeof(many) - used, "%s%s", i ? ", " : "",
                                 RES("n2", "gpu-0", SHARE_S, "1", "1Mi"));
    snprintf(many + used, sizeof(many) - used, "]}}}}");
    assert_int_equal(add(d, false, many, &err), EGPU_ERANGE);
    assert_string_equal(err.msg,
                        "status.allocation.devices.results has 33 entries; allowed: at most 32");
    /* Not pods in reservedFor are no pods; capacities the result leaves out
     * hold all of the card's (the slice's requestPolicy default). */
    assert_int_equal(add(d, false,
                         CLAIM("ml", "c",
                               "{'request': 'gpu', 'driver': 'gpu.elasticgpu.io', 'pool': "
                               "'n2', 'device': 'gpu-1', 'consumedCapacity': {'cores': '1'}}",
                               "{'apiGroup': 'batch', 'resource': 'jobs', 'name': 'j'}"),
                         &err),
                     0);
    assert_int_equal(d->cards[1].nshares, 1);
    assert_int_equal(d->cards[1].shares[0].npods, 0);
    assert_int_equal(d->cards[1].shares[0].core_pct, 1);
    assert_int_equal(d->cards[1].shares[0].mem_mib, 81920);
    assert_false(d->cards[1].shares[0].whole);
    egpu_kubectl_dra_free(d);
}

static json_t *load(const char *name)
{
    char path[512];
    json_t *o;

    snprintf(path, sizeof(path), FIXTURES "%s", name);
    o = json_load_file(path, 0, NULL);
    if (o == NULL)
        tu_skip("../shared/k8s-wire/dra is not beside this checkout");
    return o;
}

/* The agent's slice and the scheduler's allocated claim as the wire notes
 * give them. */
static void test_shared_fixtures(void **state)
{
    json_t *slice = load("resourceslice_gpu_consumable.json");
    json_t *claim = load("resourceclaim_allocated.json");
    struct egpu_kubectl_dra *d = egpu_kubectl_dra_new(NULL);
    struct egpu_error err = {0};
    struct egpu_buf b;
    json_t *doc, *card, *want;

    (void)state;
    assert_int_equal(egpu_kubectl_dra_add_slice(d, slice, &err), 0);
    assert_int_equal(egpu_kubectl_dra_add_claim(d, claim, &err), 0);
    egpu_buf_init(&b, EGPU_KUBECTL_OUT_MAX);
    assert_int_equal(egpu_kubectl_inspect_all(NULL, 0, d, NULL, EGPU_KUBECTL_JSON, &b), 0);
    doc = json_loads(egpu_buf_str(&b), 0, NULL);
    assert_non_null(doc);
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(json_object_get(doc, "nodes"), 0), "mode")),
                        "dra");
    card = json_array_get(json_object_get(json_array_get(json_object_get(doc, "nodes"), 0), "gpus"),
                          0);
    want = tu_json(
        "{'name': 'gpu-0', 'device': 'gpu-0', 'index': 0, 'uuid': "
        "'GPU-fef8089b-4820-abfc-e83e-94318197576e', 'model': 'NVIDIA H100 80GB HBM3', 'health': "
        "'Healthy', 'coreAllocated': 30, 'coreTotal': 100, 'memoryAllocated': 4096, "
        "'memoryTotal': 81559, 'used': {'memory': null, 'utilization': null, 'updateTime': "
        "null}, 'pods': [{'namespace': 'ml-team', 'pod': 'train-job-0', 'container': null, "
        "'core': 30, 'memory': 4096, 'claim': 'train-job-0-gpu', 'shareID': "
        "'9c3e6f0a-51d7-4b2e-8f4a-0d6c2b7e1a95', 'reservedFor': ['train-job-0']}]}");
    if (!json_equal(card, want)) {
        fprintf(stderr, "got:\n%s\n", egpu_buf_str(&b));
        fail();
    }
    assert_int_equal(json_integer_value(json_object_get(doc, "memoryTotal")), 2 * 81559);
    json_decref(want);
    json_decref(doc);
    egpu_buf_reset(&b);
    assert_int_equal(egpu_kubectl_inspect_all(NULL, 0, d, NULL, EGPU_KUBECTL_TABLE, &b), 0);
    assert_non_null(strstr(egpu_buf_str(&b), "gpu-node-1   dra    0       NVIDIA H100 80GB HBM3"));
    assert_non_null(
        strstr(egpu_buf_str(&b), "ml-team/train-job-0   <none>      train-job-0-gpu\n"));
    egpu_buf_free(&b);
    egpu_kubectl_dra_free(d);
    json_decref(slice);
    json_decref(claim);
}

static size_t shares(const struct egpu_kubectl_dra *d)
{
    size_t n = 0;

    for (size_t i = 0; i < d->ncards; i++)
        n += d->cards[i].nshares;
    return n;
}

/* Every allocation failing in turn: an error, never a crash, a leak or a
 * claim half added. */
static void test_out_of_memory(void **state)
{
    struct egpu_api_gpu g[NGPUS];
    json_t *slices[NSLICES], *claims[NCLAIMS];
    long live;

    (void)state;
    decode_gpus(g);
    for (size_t i = 0; i < NSLICES; i++)
        slices[i] = tu_json(slice_objs[i]);
    for (size_t i = 0; i < NCLAIMS; i++)
        claims[i] = tu_json(claim_objs[i]);
    live = egpu_alloc_live();
    for (long nth = 1; nth < 120; nth++) {
        struct egpu_kubectl_dra *d;
        struct egpu_error err;
        struct egpu_buf b;
        int rc = 0;

        egpu_buf_init(&b, EGPU_KUBECTL_OUT_MAX);
        egpu_alloc_fail_after(nth);
        d = egpu_kubectl_dra_new(NULL);
        for (size_t i = 0; d != NULL && i < NSLICES; i++) {
            size_t before = d->ncards;

            rc = egpu_kubectl_dra_add_slice(d, slices[i], &err);
            assert_true(rc == 0 || rc == -ENOMEM);
            if (rc)
                assert_int_equal(d->ncards, before);
        }
        for (size_t i = 0; d != NULL && i < NCLAIMS; i++) {
            size_t before = shares(d);

            /* A slice that failed leaves its devices unknown (rc > 0). */
            rc = egpu_kubectl_dra_add_claim(d, claims[i], &err);
            assert_true(rc >= 0 || rc == -ENOMEM);
            if (rc < 0)
                assert_int_equal(shares(d), before);
        }
        if (d != NULL) {
            rc = egpu_kubectl_inspect_all(g, NGPUS, d, NULL, EGPU_KUBECTL_WIDE, &b);
            assert_true(rc == 0 || rc == -ENOMEM);
            egpu_buf_reset(&b);
            rc = egpu_kubectl_inspect_all(g, NGPUS, d, NULL, EGPU_KUBECTL_JSON, &b);
            assert_true(rc == 0 || rc == -ENOMEM);
        }
        egpu_alloc_fail_after(0);
        egpu_kubectl_dra_free(d);
        egpu_buf_free(&b);
        assert_int_equal(egpu_alloc_live(), live);
    }
    for (size_t i = 0; i < NSLICES; i++)
        json_decref(slices[i]);
    for (size_t i = 0; i < NCLAIMS; i++)
        json_decref(claims[i]);
    clear_gpus(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_inspect_table), cmocka_unit_test(test_inspect_json),
        cmocka_unit_test(test_generations),   cmocka_unit_test(test_empty_slice),
        cmocka_unit_test(test_health),        cmocka_unit_test(test_bad_slices),
        cmocka_unit_test(test_bad_claims),    cmocka_unit_test(test_shared_fixtures),
        cmocka_unit_test(test_out_of_memory),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
