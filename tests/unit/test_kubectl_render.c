/* tests/unit/test_kubectl_render.c - what kubectl-egpu prints (src/kubectl/
 * render.c, table.c) for fixed objects, byte for byte: inspect as a table,
 * wide and JSON, with a node filter; claims with and without -A, wide and
 * JSON; budgets metered, over budget and not yet metered; kubectl's ages;
 * C0, C1 and BiDi controls as '?' (text.c).
 * Every object is decoded from its JSON by src/api's decoders, as the
 * plugin does. Objects are written with ' for " (tu_json() swaps them).
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

#define GPU(name, node, idx, model, mem, status)                                          \
    "{'apiVersion': 'elasticgpu.io/v1alpha1', 'kind': 'GPU', 'metadata': {'name': '" name \
    "'}, 'spec': {'nodeName': '" node "', 'index': " idx ", 'uuid': 'GPU-" name           \
    "', 'model': '" model "', 'memory': " mem "}" status "}"

/* Three cards on two nodes, given out of order: n2's whole card, n1's shared
 * card with two containers (one through a claim) and its idle sick card. */
static const char *const gpu_objs[] = {
    GPU("n2-gpu0", "n2", "0", "H100", "81920",
        ", 'status': {'health': 'Healthy', 'allocated': [{'namespace': 'ml', 'pod': 'big', "
        "'container': 'main', 'core': 100, 'memory': 0}]}"),
    GPU("n1-gpu1", "n1", "1", "A100", "40960",
        ", 'status': {'health': 'Unhealthy', 'used': {'memory': 0, 'utilization': 0}}"),
    GPU("n1-gpu0", "n1", "0", "A100", "40960",
        ", 'status': {'health': 'Healthy', 'capacity': {'core': 100, 'memory': 40960}, "
        "'allocated': [{'namespace': 'default', 'pod': 'infer', 'container': 'srv', 'core': 20, "
        "'memory': 8192}, {'namespace': 'team-a', 'pod': 'train-0', 'container': 'main', "
        "'core': 30, 'memory': 4096, 'claim': 'c1'}], 'used': {'memory': 5000, 'utilization': "
        "41, 'updateTime': '2026-07-24T09:31:03Z'}}"),
};
#define NGPUS (sizeof(gpu_objs) / sizeof(gpu_objs[0]))

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
    struct egpu_buf b;
    long live = egpu_alloc_live();

    (void)state;
    decode_gpus(g);
    egpu_buf_init(&b, EGPU_KUBECTL_OUT_MAX);
    expect(egpu_kubectl_inspect(g, NGPUS, NULL, EGPU_KUBECTL_TABLE, &b), &b,
           "NODE   GPU     MODEL   HEALTH      CORE             MEMORY(MiB)          POD           "
           "   CONTAINER   CLAIM\n"
           "n1     0       A100    Healthy     50/100           12288/40960\n"
           "                                   20               8192                 default/infer "
           "   srv         <none>\n"
           "                                   30               4096                 "
           "team-a/train-0   main        c1\n"
           "n1     1       A100    Unhealthy   0/100            0/40960\n"
           "n1     total                       50/200 (25%)     12288/81920 (15%)\n"
           "n2     0       H100    Healthy     100/100          81920/81920\n"
           "                                   100              all                  ml/big        "
           "   main        <none>\n"
           "n2     total                       100/100 (100%)   81920/81920 (100%)\n"
           "\n"
           "Cluster: 2 nodes, 3 GPUs, core 150/300 (50%), memory 94208/163840 MiB (57%)\n");
    egpu_buf_init(&b, EGPU_KUBECTL_OUT_MAX);
    expect(egpu_kubectl_inspect(g, NGPUS, "n2", EGPU_KUBECTL_TABLE, &b), &b,
           "NODE   GPU     MODEL   HEALTH    CORE             MEMORY(MiB)          POD      "
           "CONTAINER   CLAIM\n"
           "n2     0       H100    Healthy   100/100          81920/81920\n"
           "                                 100              all                  ml/big   main   "
           "     <none>\n"
           "n2     total                     100/100 (100%)   81920/81920 (100%)\n"
           "\n"
           "Cluster: 1 node, 1 GPU, core 100/100 (100%), memory 81920/81920 MiB (100%)\n");
    egpu_buf_init(&b, EGPU_KUBECTL_OUT_MAX);
    expect(
        egpu_kubectl_inspect(g, NGPUS, NULL, EGPU_KUBECTL_WIDE, &b), &b,
        "NODE   MODE            GPU     MODEL   HEALTH      CORE             MEMORY(MiB)          "
        "USED(MiB)   UTIL(%)   UUID          POD              CONTAINER   CLAIM\n"
        "n1     device-plugin   0       A100    Healthy     50/100           12288/40960          "
        "5000        41        GPU-n1-gpu0\n"
        "                                                   20               8192                  "
        "                                   default/infer    srv         <none>\n"
        "                                                   30               4096                  "
        "                                   team-a/train-0   main        c1\n"
        "n1     device-plugin   1       A100    Unhealthy   0/100            0/40960              "
        "0           0         GPU-n1-gpu1\n"
        "n1                     total                       50/200 (25%)     12288/81920 (15%)\n"
        "n2     device-plugin   0       H100    Healthy     100/100          81920/81920          "
        "<none>      <none>    GPU-n2-gpu0\n"
        "                                                   100              all                   "
        "                                   ml/big           main        <none>\n"
        "n2                     total                       100/100 (100%)   81920/81920 (100%)\n"
        "\n"
        "Cluster: 2 nodes, 3 GPUs, core 150/300 (50%), memory 94208/163840 MiB (57%)\n");
    clear_gpus(g);
    assert_int_equal(egpu_alloc_live(), live);
}

static void test_inspect_json(void **state)
{
    struct egpu_api_gpu g[NGPUS];
    struct egpu_buf b;

    (void)state;
    decode_gpus(g);
    egpu_buf_init(&b, EGPU_KUBECTL_OUT_MAX);
    expect(egpu_kubectl_inspect(g, NGPUS, "n1", EGPU_KUBECTL_JSON, &b), &b,
           "{\n"
           "  \"apiVersion\": \"egpu.kubectl/v1\",\n"
           "  \"kind\": \"Inspect\",\n"
           "  \"nodes\": [\n"
           "    {\n"
           "      \"name\": \"n1\",\n"
           "      \"mode\": \"device-plugin\",\n"
           "      \"gpus\": [\n"
           "        {\n"
           "          \"name\": \"n1-gpu0\",\n"
           "          \"device\": null,\n"
           "          \"index\": 0,\n"
           "          \"uuid\": \"GPU-n1-gpu0\",\n"
           "          \"model\": \"A100\",\n"
           "          \"health\": \"Healthy\",\n"
           "          \"coreAllocated\": 50,\n"
           "          \"coreTotal\": 100,\n"
           "          \"memoryAllocated\": 12288,\n"
           "          \"memoryTotal\": 40960,\n"
           "          \"used\": {\n"
           "            \"memory\": 5000,\n"
           "            \"utilization\": 41,\n"
           "            \"updateTime\": \"2026-07-24T09:31:03Z\"\n"
           "          },\n"
           "          \"pods\": [\n"
           "            {\n"
           "              \"namespace\": \"default\",\n"
           "              \"pod\": \"infer\",\n"
           "              \"container\": \"srv\",\n"
           "              \"core\": 20,\n"
           "              \"memory\": 8192,\n"
           "              \"claim\": null,\n"
           "              \"shareID\": null,\n"
           "              \"reservedFor\": [\n"
           "                \"infer\"\n"
           "              ]\n"
           "            },\n"
           "            {\n"
           "              \"namespace\": \"team-a\",\n"
           "              \"pod\": \"train-0\",\n"
           "              \"container\": \"main\",\n"
           "              \"core\": 30,\n"
           "              \"memory\": 4096,\n"
           "              \"claim\": \"c1\",\n"
           "              \"shareID\": null,\n"
           "              \"reservedFor\": [\n"
           "                \"train-0\"\n"
           "              ]\n"
           "            }\n"
           "          ]\n"
           "        },\n"
           "        {\n"
           "          \"name\": \"n1-gpu1\",\n"
           "          \"device\": null,\n"
           "          \"index\": 1,\n"
           "          \"uuid\": \"GPU-n1-gpu1\",\n"
           "          \"model\": \"A100\",\n"
           "          \"health\": \"Unhealthy\",\n"
           "          \"coreAllocated\": 0,\n"
           "          \"coreTotal\": 100,\n"
           "          \"memoryAllocated\": 0,\n"
           "          \"memoryTotal\": 40960,\n"
           "          \"used\": {\n"
           "            \"memory\": 0,\n"
           "            \"utilization\": 0,\n"
           "            \"updateTime\": null\n"
           "          },\n"
           "          \"pods\": []\n"
           "        }\n"
           "      ],\n"
           "      \"coreAllocated\": 50,\n"
           "      \"coreTotal\": 200,\n"
           "      \"memoryAllocated\": 12288,\n"
           "      \"memoryTotal\": 81920\n"
           "    }\n"
           "  ],\n"
           "  \"coreAllocated\": 50,\n"
           "  \"coreTotal\": 200,\n"
           "  \"memoryAllocated\": 12288,\n"
           "  \"memoryTotal\": 81920\n"
           "}\n");
    clear_gpus(g);
}

#define CLAIM(ns, name, spec, status)                                                           \
    "{'apiVersion': 'elasticgpu.io/v1alpha1', 'kind': 'ElasticGPUClaim', 'metadata': {'name': " \
    "'" name "', 'namespace': '" ns "'}, 'spec': " spec status "}"
#define EGPU(name, spec, status)                                                                 \
    "{'apiVersion': 'elasticgpu.io/v1alpha1', 'kind': 'ElasticGPU', 'metadata': {'name': '" name \
    "'}, 'spec': " spec status "}"

/* A bound share, a Pending TFLOPS claim of the default class, a claim
 * bound to an ElasticGPU that is gone (its age unknown), and in another
 * namespace a bound whole card of a class. */
static const char *const claim_objs[] = {
    CLAIM("team-a", "c1",
          "{'resources': {'requests': {'elasticgpu.io/gpu-core': 30, 'elasticgpu.io/gpu-memory': "
          "4096}}, 'elasticGPUClassName': 'share'}",
          ", 'status': {'phase': 'Bound', 'elasticGPUName': 'egpu-c1', 'capacity': "
          "{'elasticgpu.io/gpu-core': 30, 'elasticgpu.io/gpu-memory': 4096}}"),
    CLAIM("team-a", "fast", "{'resources': {'requests': {'elasticgpu.io/gpu-tflops': 12.5}}}", ""),
    CLAIM("team-a", "lost", "{'resources': {'requests': {'elasticgpu.io/gpu-core': 10}}}",
          ", 'status': {'phase': 'Lost', 'elasticGPUName': 'egpu-gone'}"),
    CLAIM("ml", "whole",
          "{'resources': {'requests': {'elasticgpu.io/gpu-core': 200}}, 'elasticGPUClassName': "
          "'phys'}",
          ", 'status': {'phase': 'Bound', 'elasticGPUName': 'egpu-whole', 'capacity': "
          "{'elasticgpu.io/gpu-core': 200}}"),
};
#define NCLAIMS (sizeof(claim_objs) / sizeof(claim_objs[0]))

static const char *const egpu_objs[] = {
    EGPU("egpu-c1",
         "{'capacity': {'elasticgpu.io/gpu-core': 30, 'elasticgpu.io/gpu-memory': 4096}, "
         "'nodeName': 'n1', 'gpuShare': {'gpuName': 'n1-gpu0'}, 'claimRef': {'namespace': "
         "'team-a', 'name': 'c1'}}",
         ", 'status': {'phase': 'Bound', 'gpuName': 'n1-gpu0', 'model': 'A100'}"),
    EGPU("egpu-whole",
         "{'capacity': {'elasticgpu.io/gpu-core': 200}, 'nodeName': 'n2', 'physicalGPU': "
         "{'gpuNames': ['n2-gpu0', 'n2-gpu1']}, 'claimRef': {'namespace': 'ml', 'name': "
         "'whole'}}",
         ", 'status': {'phase': 'Bound'}"),
};
#define NEGPUS (sizeof(egpu_objs) / sizeof(egpu_objs[0]))

#define NOW 1790000000 /* 2026-09-21T... */

static void claims_rows(struct egpu_api_claim *c, struct egpu_api_egpu *e,
                        struct egpu_kubectl_claim_row *rows)
{
    static const int64_t ages[NCLAIMS] = {45, 12 * 60, 0, 3 * 86400 + 5 * 3600};

    for (size_t i = 0; i < NEGPUS; i++) {
        struct egpu_error err = {0};
        json_t *o = tu_json(egpu_objs[i]);

        if (egpu_api_egpu_decode(o, &e[i], &err))
            fail_msg("ElasticGPU %zu: %s", i, err.msg);
        json_decref(o);
    }
    for (size_t i = 0; i < NCLAIMS; i++) {
        struct egpu_error err = {0};
        json_t *o = tu_json(claim_objs[i]);

        if (egpu_api_claim_decode(o, &c[i], &err))
            fail_msg("claim %zu: %s", i, err.msg);
        json_decref(o);
        rows[i].claim = &c[i];
        rows[i].egpu = NULL;
        for (size_t j = 0; j < NEGPUS; j++)
            if (strcmp(e[j].meta.name, c[i].bound_egpu) == 0)
                rows[i].egpu = &e[j];
        rows[i].created_s = ages[i] ? NOW - ages[i] : 0;
    }
}

static void test_claims(void **state)
{
    struct egpu_api_claim *c = calloc(NCLAIMS, sizeof(*c));
    struct egpu_api_egpu *e = calloc(NEGPUS, sizeof(*e));
    struct egpu_kubectl_claim_row rows[NCLAIMS];
    struct egpu_buf b;

    (void)state;
    assert_non_null(c);
    assert_non_null(e);
    claims_rows(c, e, rows);
    egpu_buf_init(&b, EGPU_KUBECTL_OUT_MAX);
    expect(egpu_kubectl_claims(rows, 3, false, NOW, EGPU_KUBECTL_TABLE, &b), &b,
           "NAME   PHASE     REQUEST       MEMORY(MiB)   CLASS       ELASTICGPU   NODE     GPU     "
           "  AGE\n"
           "c1     Bound     30%           4096          share       egpu-c1      n1       n1-gpu0 "
           "  45s\n"
           "fast   Pending   12.5 TFLOPS   <none>        <default>   <none>       <none>   <none>  "
           "  12m\n"
           "lost   Lost      10%           <none>        <default>   egpu-gone    <none>   <none>  "
           "  <unknown>\n");
    egpu_buf_init(&b, EGPU_KUBECTL_OUT_MAX);
    expect(egpu_kubectl_claims(rows, NCLAIMS, true, NOW, EGPU_KUBECTL_TABLE, &b), &b,
           "NAMESPACE   NAME    PHASE     REQUEST       MEMORY(MiB)   CLASS       ELASTICGPU   "
           "NODE     GPU               AGE\n"
           "ml          whole   Bound     200%          <none>        phys        egpu-whole   n2  "
           "     n2-gpu0,n2-gpu1   3d5h\n"
           "team-a      c1      Bound     30%           4096          share       egpu-c1      n1  "
           "     n1-gpu0           45s\n"
           "team-a      fast    Pending   12.5 TFLOPS   <none>        <default>   <none>       "
           "<none>   <none>            12m\n"
           "team-a      lost    Lost      10%           <none>        <default>   egpu-gone    "
           "<none>   <none>            <unknown>\n");
    egpu_buf_init(&b, EGPU_KUBECTL_OUT_MAX);
    expect(egpu_kubectl_claims(rows, NCLAIMS, true, NOW, EGPU_KUBECTL_WIDE, &b), &b,
           "NAMESPACE   NAME    PHASE     REQUEST       MEMORY(MiB)   CLASS       ELASTICGPU   "
           "NODE     GPU               CAPACITY      MODEL    AGE\n"
           "ml          whole   Bound     200%          <none>        phys        egpu-whole   n2  "
           "     n2-gpu0,n2-gpu1   200%          <none>   3d5h\n"
           "team-a      c1      Bound     30%           4096          share       egpu-c1      n1  "
           "     n1-gpu0           30%/4096MiB   A100     45s\n"
           "team-a      fast    Pending   12.5 TFLOPS   <none>        <default>   <none>       "
           "<none>   <none>            <none>        <none>   12m\n"
           "team-a      lost    Lost      10%           <none>        <default>   egpu-gone    "
           "<none>   <none>            <none>        <none>   <unknown>\n");
    egpu_buf_init(&b, EGPU_KUBECTL_OUT_MAX);
    expect(egpu_kubectl_claims(rows, 3, false, NOW, EGPU_KUBECTL_JSON, &b), &b,
           "{\n"
           "  \"apiVersion\": \"egpu.kubectl/v1\",\n"
           "  \"kind\": \"Claims\",\n"
           "  \"claims\": [\n"
           "    {\n"
           "      \"namespace\": \"team-a\",\n"
           "      \"name\": \"c1\",\n"
           "      \"phase\": \"Bound\",\n"
           "      \"core\": 30,\n"
           "      \"tflops\": null,\n"
           "      \"memory\": 4096,\n"
           "      \"class\": \"share\",\n"
           "      \"elasticGPU\": \"egpu-c1\",\n"
           "      \"capacity\": {\n"
           "        \"core\": 30,\n"
           "        \"memory\": 4096\n"
           "      },\n"
           "      \"node\": \"n1\",\n"
           "      \"gpus\": [\n"
           "        \"n1-gpu0\"\n"
           "      ],\n"
           "      \"model\": \"A100\",\n"
           "      \"creationTimestamp\": \"2026-09-21T14:12:35Z\"\n"
           "    },\n"
           "    {\n"
           "      \"namespace\": \"team-a\",\n"
           "      \"name\": \"fast\",\n"
           "      \"phase\": \"Pending\",\n"
           "      \"core\": null,\n"
           "      \"tflops\": 12.5,\n"
           "      \"memory\": null,\n"
           "      \"class\": \"\",\n"
           "      \"elasticGPU\": null,\n"
           "      \"capacity\": {\n"
           "        \"core\": null,\n"
           "        \"memory\": null\n"
           "      },\n"
           "      \"node\": null,\n"
           "      \"gpus\": [],\n"
           "      \"model\": null,\n"
           "      \"creationTimestamp\": \"2026-09-21T14:01:20Z\"\n"
           "    },\n"
           "    {\n"
           "      \"namespace\": \"team-a\",\n"
           "      \"name\": \"lost\",\n"
           "      \"phase\": \"Lost\",\n"
           "      \"core\": 10,\n"
           "      \"tflops\": null,\n"
           "      \"memory\": null,\n"
           "      \"class\": \"\",\n"
           "      \"elasticGPU\": \"egpu-gone\",\n"
           "      \"capacity\": {\n"
           "        \"core\": null,\n"
           "        \"memory\": null\n"
           "      },\n"
           "      \"node\": null,\n"
           "      \"gpus\": [],\n"
           "      \"model\": null,\n"
           "      \"creationTimestamp\": null\n"
           "    }\n"
           "  ]\n"
           "}\n");
    free(c);
    free(e);
}

#define BUDGET(ns, name, spec, status)                                                          \
    "{'apiVersion': 'elasticgpu.io/v1alpha1', 'kind': 'GPUBudget', 'metadata': {'name': '" name \
    "', 'namespace': '" ns "'}, 'spec': {" spec "}" status "}"

/* Metered in budget (0.3 GPU-hours of core plus memory weight), over budget
 * (remaining negative), and not metered yet. */
static const char *const budget_objs[] = {
    BUDGET("team-a", "monthly",
           "'gpuHours': 120, 'memoryWeight': 0.0125, "
           "'overBudgetPriorityClassName': 'low'",
           ", 'status': {'periodStart': '2026-09-01T00:00:00Z', 'periodEnd': "
           "'2026-10-01T00:00:00Z', 'metering': {'until': '2026-09-21T10:00:00Z', 'coreSeconds': "
           "108000, 'memorySeconds': 29491200}, 'state': 'InBudget'}"),
    BUDGET("ml", "daily",
           "'gpuHours': 1.5, 'period': 'Daily', 'timeZone': 'Europe/Paris', "
           "'overBudgetPriorityClassName': 'low'",
           ", 'status': {'periodStart': '2026-09-20T22:00:00Z', 'periodEnd': "
           "'2026-09-21T22:00:00Z', 'metering': {'until': '2026-09-21T10:00:00Z', 'coreSeconds': "
           "720000}, 'state': 'OverBudget'}"),
    BUDGET("team-a", "new",
           "'gpuHours': 0.25, 'period': '12h', 'overBudgetPriorityClassName': "
           "'low'",
           ""),
};
#define NBUDGETS (sizeof(budget_objs) / sizeof(budget_objs[0]))

static void test_budgets(void **state)
{
    struct egpu_api_budget *bs = calloc(NBUDGETS, sizeof(*bs));
    const struct egpu_api_budget *v[NBUDGETS];
    struct egpu_buf b;

    (void)state;
    assert_non_null(bs);
    for (size_t i = 0; i < NBUDGETS; i++) {
        struct egpu_error err = {0};
        json_t *o = tu_json(budget_objs[i]);

        if (egpu_api_budget_decode(o, &bs[i], &err))
            fail_msg("budget %zu: %s", i, err.msg);
        json_decref(o);
        v[i] = &bs[i];
    }
    egpu_buf_init(&b, EGPU_KUBECTL_OUT_MAX);
    expect(egpu_kubectl_budgets(v, NBUDGETS, true, EGPU_KUBECTL_TABLE, &b), &b,
           "NAMESPACE   NAME      GPU-HOURS   USED     REMAINING   STATE        PERIOD    START    "
           "              END\n"
           "ml          daily     1.5         2        -0.5        OverBudget   Daily     "
           "2026-09-20T22:00:00Z   2026-09-21T22:00:00Z\n"
           "team-a      monthly   120         0.4      119.6       InBudget     Monthly   "
           "2026-09-01T00:00:00Z   2026-10-01T00:00:00Z\n"
           "team-a      new       0.25        <none>   <none>      <none>       12h       <none>   "
           "              <none>\n");
    egpu_buf_init(&b, EGPU_KUBECTL_OUT_MAX);
    expect(egpu_kubectl_budgets(v, 1, false, EGPU_KUBECTL_WIDE, &b), &b,
           "NAME      GPU-HOURS   USED   REMAINING   STATE      PERIOD    START                  "
           "END                    TIMEZONE   METERED-UNTIL\n"
           "monthly   120         0.4    119.6       InBudget   Monthly   2026-09-01T00:00:00Z   "
           "2026-10-01T00:00:00Z   UTC        2026-09-21T10:00:00Z\n");
    egpu_buf_init(&b, EGPU_KUBECTL_OUT_MAX);
    expect(egpu_kubectl_budgets(v, NBUDGETS, true, EGPU_KUBECTL_JSON, &b), &b,
           "{\n"
           "  \"apiVersion\": \"egpu.kubectl/v1\",\n"
           "  \"kind\": \"Budgets\",\n"
           "  \"budgets\": [\n"
           "    {\n"
           "      \"namespace\": \"ml\",\n"
           "      \"name\": \"daily\",\n"
           "      \"gpuHours\": 1.5,\n"
           "      \"used\": 2,\n"
           "      \"remaining\": -0.5,\n"
           "      \"state\": \"OverBudget\",\n"
           "      \"period\": \"Daily\",\n"
           "      \"timeZone\": \"Europe/Paris\",\n"
           "      \"periodStart\": \"2026-09-20T22:00:00Z\",\n"
           "      \"periodEnd\": \"2026-09-21T22:00:00Z\",\n"
           "      \"meteredUntil\": \"2026-09-21T10:00:00Z\"\n"
           "    },\n"
           "    {\n"
           "      \"namespace\": \"team-a\",\n"
           "      \"name\": \"monthly\",\n"
           "      \"gpuHours\": 120,\n"
           "      \"used\": 0.4,\n"
           "      \"remaining\": 119.6,\n"
           "      \"state\": \"InBudget\",\n"
           "      \"period\": \"Monthly\",\n"
           "      \"timeZone\": \"UTC\",\n"
           "      \"periodStart\": \"2026-09-01T00:00:00Z\",\n"
           "      \"periodEnd\": \"2026-10-01T00:00:00Z\",\n"
           "      \"meteredUntil\": \"2026-09-21T10:00:00Z\"\n"
           "    },\n"
           "    {\n"
           "      \"namespace\": \"team-a\",\n"
           "      \"name\": \"new\",\n"
           "      \"gpuHours\": 0.25,\n"
           "      \"used\": null,\n"
           "      \"remaining\": null,\n"
           "      \"state\": null,\n"
           "      \"period\": \"12h\",\n"
           "      \"timeZone\": \"UTC\",\n"
           "      \"periodStart\": null,\n"
           "      \"periodEnd\": null,\n"
           "      \"meteredUntil\": null\n"
           "    }\n"
           "  ]\n"
           "}\n");
    free(bs);
}

/* Text of an object never adds a line nor reaches the terminal as an escape
 * sequence: control characters show as '?'. */
static void test_control_characters(void **state)
{
    json_t *o = tu_json(GPU("g", "n\\u001b[2Jx", "0", "A\\nB\\u007f", "100", ""));
    struct egpu_api_gpu g;
    struct egpu_error err = {0};
    struct egpu_buf b;

    (void)state;
    if (egpu_api_gpu_decode(o, &g, &err))
        fail_msg("%s", err.msg);
    json_decref(o);
    egpu_buf_init(&b, EGPU_KUBECTL_OUT_MAX);
    expect(egpu_kubectl_inspect(&g, 1, NULL, EGPU_KUBECTL_TABLE, &b), &b,
           "NODE     GPU     MODEL   HEALTH    CORE         MEMORY(MiB)   POD   CONTAINER   CLAIM\n"
           "n?[2Jx   0       A?B?    Unknown   0/100        0/100\n"
           "n?[2Jx   total                     0/100 (0%)   0/100 (0%)\n"
           "\n"
           "Cluster: 1 node, 1 GPU, core 0/100 (0%), memory 0/100 MiB (0%)\n");
    egpu_api_gpu_clear(&g);
}

/* C1 controls (CSI U+009B, OSC U+009D, ST U+009C) and BiDi controls (an
 * override that makes "exe.jpg" read "gpj.exe", an isolate, the marks) in
 * an object's text show as '?' in a table, one per character; -o json keeps
 * the original strings. */
static void test_c1_and_bidi(void **state)
{
    json_t *o = tu_json(GPU("g", "n\\u009b2J", "0", "A\\u202egpj.exe\\u202c", "100",
                            ", 'status': {'health': '\\u009d0;pwned\\u009c', 'allocated': "
                            "[{'namespace': 'a\\u2066b\\u2069', 'pod': 'p\\u200e\\u200f', "
                            "'container': 'c\\u061c', 'core': 10, 'memory': 1, 'claim': "
                            "'k\\u202a\\u202b\\u202d\\u2067\\u2068\\u2028\\u2029'}]}"));
    struct egpu_api_gpu g;
    struct egpu_error err = {0};
    struct egpu_buf b;
    json_t *doc, *card;

    (void)state;
    if (egpu_api_gpu_decode(o, &g, &err))
        fail_msg("%s", err.msg);
    json_decref(o);
    egpu_buf_init(&b, EGPU_KUBECTL_OUT_MAX);
    expect(egpu_kubectl_inspect(&g, 1, NULL, EGPU_KUBECTL_TABLE, &b), &b,
           "NODE   GPU     MODEL        HEALTH      CORE           MEMORY(MiB)   POD        "
           "CONTAINER   CLAIM\n"
           "n?2J   0       A?gpj.exe?   ?0;pwned?   10/100         1/100\n"
           "                                        10             1             a?b?/p??   "
           "c?          k???????\n"
           "n?2J   total                            10/100 (10%)   1/100 (1%)\n"
           "\n"
           "Cluster: 1 node, 1 GPU, core 10/100 (10%), memory 1/100 MiB (1%)\n");
    egpu_buf_reset(&b);
    assert_int_equal(egpu_kubectl_inspect(&g, 1, NULL, EGPU_KUBECTL_JSON, &b), 0);
    doc = json_loads(egpu_buf_str(&b), 0, NULL);
    assert_non_null(doc);
    card = json_array_get(json_object_get(json_array_get(json_object_get(doc, "nodes"), 0), "gpus"),
                          0);
    assert_string_equal(json_string_value(json_object_get(card, "model")),
                        "A\xe2\x80\xaegpj.exe\xe2\x80\xac");
    assert_string_equal(json_string_value(json_object_get(card, "health")), "\xc2\x9d"
                                                                            "0;pwned\xc2\x9c");
    json_decref(doc);
    egpu_buf_free(&b);
    egpu_api_gpu_clear(&g);
}

/* egpu__kubectl_text_clean byte by byte: raw 0x80..0x9F and every other byte
 * outside well-formed UTF-8 (overlong, surrogate, past U+10FFFF, cut short)
 * are one '?' each; well-formed UTF-8 is kept, even where a continuation byte
 * is 0x9B ("ě" is C4 9B). */
static void test_text_clean(void **state)
{
    static const struct {
        const char *in, *want;
    } cases[] = {
        {"plain ascii", "plain ascii"},
        {"a\x1b[2Jb\x7f\n", "a?[2Jb??"},
        {"\x9b"
         "2J\x9d\x9c\x80",
         "?2J???"},
        {"\xc2\x9b"
         "2J\xc2\x80\xc2\x9f",
         "?2J??"},
        {"\xc2\xa0\xc3\xa9\xc4\x9b\xe6\x97\xa5\xf0\x9f\x98\x80",
         "\xc2\xa0\xc3\xa9\xc4\x9b\xe6\x97\xa5\xf0\x9f\x98\x80"},
        {"\xc1\x9b\xe0\x82\x9b", "?????"}, /* overlong forms of U+005B, U+009B */
        {"\xed\xa0\x80", "???"},           /* a surrogate */
        {"\xf4\x90\x80\x80\xff", "?????"}, /* past U+10FFFF; 0xFF */
        {"\xe2\x80", "??"},                /* cut short */
        {"x\xe2\x80\xae"
         "y\xe2\x81\xa6z\xe2\x81\xa9\xe2\x80\x8e\xe2\x80\x8f\xd8\x9c",
         "x?y?z????"},
        {"\xe2\x80\xa8\xe2\x80\xa9\xe2\x80\xaa\xe2\x80\xad\xe2\x81\xa7\xe2\x81\xa8", "??????"},
        {"\xe2\x80\x8d\xe2\x80\xaf\xe2\x81\xa5\xe2\x81\xaa", /* ZWJ, NNBSP, U+2065, U+206A kept */
         "\xe2\x80\x8d\xe2\x80\xaf\xe2\x81\xa5\xe2\x81\xaa"},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char buf[64];

        snprintf(buf, sizeof(buf), "%s", cases[i].in);
        egpu__kubectl_text_clean(buf);
        if (strcmp(buf, cases[i].want) != 0)
            fail_msg("case %zu: got \"%s\"", i, buf);
    }
}

/* The CRD bounds no memory but a card's: sums saturate at INT64_MAX rather
 * than overflow (UBSan would stop the sanitizer build here). */
static void test_huge_values(void **state)
{
    json_t *o =
        tu_json(GPU("g", "n1", "0", "X", "4294967295",
                    ", 'status': {'allocated': [{'namespace': 'a', 'pod': 'p', 'container': "
                    "'c', 'core': 10, 'memory': 9223372036854775807}, {'namespace': 'a', "
                    "'pod': 'q', 'container': 'c', 'core': 10, 'memory': 9223372036854775807}]"
                    ", 'used': {'memory': 9223372036854775807}}"));
    struct egpu_api_gpu g[2];
    struct egpu_error err = {0};
    struct egpu_buf b;
    json_t *doc;

    (void)state;
    if (egpu_api_gpu_decode(o, &g[0], &err) || egpu_api_gpu_decode(o, &g[1], &err))
        fail_msg("%s", err.msg);
    json_decref(o);
    egpu_buf_init(&b, EGPU_KUBECTL_OUT_MAX);
    assert_int_equal(egpu_kubectl_inspect(g, 2, NULL, EGPU_KUBECTL_JSON, &b), 0);
    doc = json_loads(egpu_buf_str(&b), 0, NULL);
    assert_non_null(doc);
    assert_int_equal(json_integer_value(json_object_get(doc, "memoryAllocated")), INT64_MAX);
    assert_int_equal(json_integer_value(json_object_get(doc, "memoryTotal")), 8589934590LL);
    assert_int_equal(json_integer_value(json_object_get(doc, "coreAllocated")), 40);
    json_decref(doc);
    egpu_buf_reset(&b);
    assert_int_equal(egpu_kubectl_inspect(g, 2, NULL, EGPU_KUBECTL_WIDE, &b), 0);
    assert_non_null(strstr(egpu_buf_str(&b), "n1                     total                     "
                                             "40/200 (20%)   "
                                             "9223372036854775807/8589934590 (107374182425%)"));
    egpu_buf_free(&b);
    egpu_api_gpu_clear(&g[0]);
    egpu_api_gpu_clear(&g[1]);
}

/* apimachinery's duration.HumanDuration, boundary by boundary. */
static void test_age(void **state)
{
    static const struct {
        int64_t s;
        const char *want;
    } rows[] = {
        {-5, "<invalid>"},     {-1, "0s"},        {0, "0s"},
        {119, "119s"},         {120, "2m"},       {303, "5m3s"},
        {599, "9m59s"},        {600, "10m"},      {10799, "179m"},
        {10800, "3h"},         {12000, "3h20m"},  {28799, "7h59m"},
        {28800, "8h"},         {172799, "47h"},   {172800, "2d"},
        {190800, "2d5h"},      {691199, "7d23h"}, {691200, "8d"},
        {63071999, "729d"},    {63072000, "2y"},  {64000000, "2y10d"},
        {252287999, "7y364d"}, {252288000, "8y"},
    };
    char buf[EGPU_KUBECTL_AGE_MAX];

    (void)state;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        if (strcmp(egpu_kubectl_age(rows[i].s, buf), rows[i].want) != 0)
            fail_msg("age %lld: got %s, want %s", (long long)rows[i].s, buf, rows[i].want);
}

/* Every allocation of a rendering failing in turn: an error, never a crash
 * or a leak. */
static void test_out_of_memory(void **state)
{
    struct egpu_api_gpu g[NGPUS];
    long live;

    (void)state;
    decode_gpus(g);
    live = egpu_alloc_live();
    for (long nth = 1; nth < 200; nth++) {
        struct egpu_buf b;
        int rc;

        egpu_buf_init(&b, EGPU_KUBECTL_OUT_MAX);
        egpu_alloc_fail_after(nth);
        rc = egpu_kubectl_inspect(g, NGPUS, NULL, EGPU_KUBECTL_WIDE, &b);
        egpu_alloc_fail_after(0);
        egpu_buf_free(&b);
        assert_true(rc == 0 || rc == -ENOMEM);
        assert_int_equal(egpu_alloc_live(), live);
    }
    clear_gpus(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_inspect_table),
        cmocka_unit_test(test_inspect_json),
        cmocka_unit_test(test_claims),
        cmocka_unit_test(test_budgets),
        cmocka_unit_test(test_control_characters),
        cmocka_unit_test(test_c1_and_bidi),
        cmocka_unit_test(test_text_clean),
        cmocka_unit_test(test_huge_values),
        cmocka_unit_test(test_age),
        cmocka_unit_test(test_out_of_memory),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
