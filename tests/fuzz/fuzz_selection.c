/* tests/fuzz/fuzz_selection.c - a WaitForFirstConsumer claim's selection
 * (egpu_controller_place_at, src/controller/place.c): the annotations
 * elasticgpu.io/selected-node and selected-gpus, which the claim's owner can
 * write as well as the scheduler.
 *
 * Input: one byte choosing the claim and class (a share with memory, two
 * whole cards, a TFLOPS share; a gpushare or physical class, with or
 * without a nodeSelector), then the node's name, a newline, and the GPU
 * list. The inventory: nodes n1 (zone a) and n2 (zone b) with two A100s
 * each, v (zone a) with one V100; 80% of n1-g0 held by an ElasticGPU.
 * Invariants: the answer is 0, EGPU_ERANGE or EGPU_ENOFIT, a refusal has
 * a message; an accepted selection is on the node given, names as many
 * distinct cards as the claim asks, every one a card of the inventory on
 * that node, and the core reserves it (what it accepts fits); the check
 * leaves the inventory as it was; nothing leaks.
 */
#include "fuzz.h"
#include "egpu/controller.h"

static struct egpu_controller_inventory inv;
static struct egpu_api_class classes[4];
static struct egpu_api_claim claims[3];

static json_t *obj(const char *text)
{
    json_t *o = json_loads(text, 0, NULL);

    FUZZ_CHECK(o != NULL);
    return o;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    static const char *const cls[] = {
        "{\"metadata\":{\"name\":\"share\"},\"provisioner\":\"gpushare.provisioner.elasticgpu.io\","
        "\"parameters\":{\"tflops.A100\":\"312\"}}",
        "{\"metadata\":{\"name\":\"phys\"},\"provisioner\":\"physical.provisioner.elasticgpu.io\"}",
        "{\"metadata\":{\"name\":\"za\"},\"provisioner\":\"gpushare.provisioner.elasticgpu.io\","
        "\"parameters\":{\"nodeSelector\":\"zone=a\",\"tflops.V100\":\"125\"}}",
        "{\"metadata\":{\"name\":\"pa\"},\"provisioner\":\"physical.provisioner.elasticgpu.io\","
        "\"parameters\":{\"nodeSelector\":\"zone in (a)\",\"models\":\"A100\"}}",
    };
    static const char *const cl[] = {
        "{\"metadata\":{\"namespace\":\"t\",\"name\":\"c\",\"uid\":\"u\"},\"spec\":{\"resources\":"
        "{\"requests\":{\"elasticgpu.io/gpu-core\":20,\"elasticgpu.io/gpu-memory\":4096}}}}",
        "{\"metadata\":{\"namespace\":\"t\",\"name\":\"c\",\"uid\":\"u\"},\"spec\":{\"resources\":"
        "{\"requests\":{\"elasticgpu.io/gpu-core\":200}}}}",
        "{\"metadata\":{\"namespace\":\"t\",\"name\":\"c\",\"uid\":\"u\"},\"spec\":{\"resources\":"
        "{\"requests\":{\"elasticgpu.io/gpu-tflops\":50}}}}",
    };
    json_t *gpus = obj(
        "[{\"metadata\":{\"name\":\"n1-g0\"},\"spec\":{\"nodeName\":\"n1\",\"index\":0,\"uuid\":"
        "\"U10\",\"model\":\"A100\",\"memory\":40960}},"
        "{\"metadata\":{\"name\":\"n1-g1\"},\"spec\":{\"nodeName\":\"n1\",\"index\":1,\"uuid\":"
        "\"U11\",\"model\":\"A100\",\"memory\":40960}},"
        "{\"metadata\":{\"name\":\"n2-g0\"},\"spec\":{\"nodeName\":\"n2\",\"index\":0,\"uuid\":"
        "\"U20\",\"model\":\"A100\",\"memory\":40960}},"
        "{\"metadata\":{\"name\":\"n2-g1\"},\"spec\":{\"nodeName\":\"n2\",\"index\":1,\"uuid\":"
        "\"U21\",\"model\":\"A100\",\"memory\":40960}},"
        "{\"metadata\":{\"name\":\"v-g0\"},\"spec\":{\"nodeName\":\"v\",\"index\":0,\"uuid\":"
        "\"UV0\",\"model\":\"V100\",\"memory\":16384}}]");
    json_t *nodes = obj("[{\"metadata\":{\"name\":\"n1\",\"labels\":{\"zone\":\"a\"}}},"
                        "{\"metadata\":{\"name\":\"n2\",\"labels\":{\"zone\":\"b\"}}},"
                        "{\"metadata\":{\"name\":\"v\",\"labels\":{\"zone\":\"a\"}}}]");
    json_t *held = obj("{\"metadata\":{\"name\":\"held\"},\"spec\":{\"capacity\":{"
                       "\"elasticgpu.io/gpu-core\":80},\"nodeName\":\"n1\",\"gpuShare\":{"
                       "\"gpuName\":\"n1-g0\"}}}");
    struct egpu_api_egpu e;

    (void)argc;
    (void)argv;
    egpu_log_level = -1;
    for (size_t i = 0; i < 4; i++) {
        json_t *o = obj(cls[i]);

        FUZZ_CHECK(egpu_api_class_decode(o, &classes[i], NULL) == 0);
        json_decref(o);
    }
    for (size_t i = 0; i < 3; i++) {
        json_t *o = obj(cl[i]);

        FUZZ_CHECK(egpu_api_claim_decode(o, &claims[i], NULL) == 0);
        json_decref(o);
    }
    FUZZ_CHECK(egpu_controller_inventory_build(gpus, nodes, NULL, &inv, NULL) == 0);
    FUZZ_CHECK(egpu_api_egpu_decode(held, &e, NULL) == 0);
    FUZZ_CHECK(egpu_controller_inventory_reserve(&inv, &e, NULL) == 0);
    json_decref(gpus);
    json_decref(nodes);
    json_decref(held);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const struct egpu_api_claim *c;
    const struct egpu_api_class *cls;
    struct egpu_controller_choice ch;
    struct egpu_error err = {0};
    uint64_t used = inv.cluster->used_core_milli;
    size_t npods = inv.cluster->npods;
    long live = egpu_alloc_live();
    char *text, *gpus;
    int rc;

    if (size < 1)
        return 0;
    c = &claims[data[0] % 3];
    cls = &classes[(data[0] / 3) % 4];
    text = fuzz_cstr(data + 1, size - 1);
    gpus = strchr(text, '\n');
    if (gpus == NULL) {
        free(text);
        return 0;
    }
    *gpus++ = '\0';
    rc = egpu_controller_place_at(&inv, c, cls, text, gpus, &ch, &err);
    FUZZ_CHECK(rc == 0 || rc == EGPU_ERANGE || rc == EGPU_ENOFIT);
    FUZZ_CHECK(inv.cluster->used_core_milli == used && inv.cluster->npods == npods);
    if (rc != 0) {
        FUZZ_CHECK(err.msg[0] != '\0');
    } else {
        uint32_t want = c->core_pct >= 100 ? (uint32_t)(c->core_pct / 100) : 1;
        struct egpu_node *n = egpu_cluster_node(inv.cluster, text);
        struct egpu_reservation r = {0};

        FUZZ_CHECK(n != NULL && strcmp(ch.node, text) == 0 && ch.ngpus == want);
        for (uint32_t i = 0; i < ch.ngpus; i++) {
            const struct egpu_controller_card *card = egpu_map_get(inv.by_name, ch.gpu_names[i]);

            FUZZ_CHECK(card != NULL && strcmp(card->node, text) == 0);
            for (uint32_t k = 0; k < i; k++)
                FUZZ_CHECK(strcmp(ch.gpu_names[k], ch.gpu_names[i]) != 0);
            r.uuids[i] = card->uuid;
        }
        FUZZ_CHECK(ch.core_pct >= 1 && (want > 1 || ch.core_pct <= 99));
        r.ncards = ch.ngpus;
        r.core_milli = want > 1 ? EGPU_GPU_MILLI : (uint32_t)ch.core_pct * 10;
        r.mem_mib = (uint32_t)ch.mem_mib;
        FUZZ_CHECK(egpu_cluster_reserve(inv.cluster, "fuzz", n, &r, NULL) == 0);
        FUZZ_CHECK(egpu_cluster_release(inv.cluster, "fuzz", NULL) == 0);
    }
    free(text);
    FUZZ_CHECK(egpu_alloc_live() == live);
    return 0;
}
