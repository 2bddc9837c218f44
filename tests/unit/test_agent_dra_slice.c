/* tests/unit/test_agent_dra_slice.c - the node's ResourceSlice as
 * src/agent/dra_slice.c builds it, and the check of what the API server
 * dropped.
 *
 * The reference is ../shared/k8s-wire/dra/resourceslice_gpu_consumable.json,
 * read in place at run time (never copied; a missing file skips, and fails
 * under CI=true): two H100 80GB cards of node gpu-node-1 built with the same
 * inputs must give the fixture's spec exactly (compared field by field, then
 * as a whole), its generateName and its owner reference. The publishing
 * half (list, create, update, delete on a real API server) is
 * tests/integration/test_cluster_dra_slice.py.
 *
 * The optional attributes from the inventory (egpu__dra_slice_attributes):
 * the fake backend's from its spec's models, the NVML backend's from the
 * mock libnvidia-ml.so.1 (EGPU_NVML_MOCK_DIR), a failing or missing call
 * leaving its attribute out. Unhealthy cards: tainted with
 * taint_unhealthy; with the test API server's DRADeviceTaints gate off
 * (POST /_control/gates) the taint is dropped, so publish writes the slice
 * again without the card and logs a warning naming the gate.
 */
#include <errno.h>
#include <stdlib.h>

#include "test_kube_server.h"
#include "dra_slice_int.h"
#include "egpu/log.h"

#define MOCK_FULL  EGPU_NVML_MOCK_DIR "/nvml-mock/libnvidia-ml.so.1"
#define MOCK_NOOPT EGPU_NVML_MOCK_DIR "/nvml-mock-noopt/libnvidia-ml.so.1"

#define FIXTURE EGPU_SOURCE_DIR "/../shared/k8s-wire/dra/resourceslice_gpu_consumable.json"

#define UUID0 "GPU-fef8089b-4820-abfc-e83e-94318197576e"
#define UUID1 "GPU-5b4c2e1a-9d3f-4a7b-8c6e-1f2a3b4c5d6e"
#define H100  "NVIDIA H100 80GB HBM3"

static json_t *fixture(void)
{
    json_error_t jerr;
    json_t *f = json_load_file(FIXTURE, 0, &jerr);

    if (f == NULL)
        tu_skip("../shared/k8s-wire/dra/resourceslice_gpu_consumable.json is not beside "
                "this checkout");
    return f;
}

static struct egpu_gpu_info card(uint32_t index, const char *uuid, const char *model,
                                 uint64_t mem_mib)
{
    struct egpu_gpu_info c;

    memset(&c, 0, sizeof(c));
    snprintf(c.uuid, sizeof(c.uuid), "%s", uuid);
    snprintf(c.model, sizeof(c.model), "%s", model);
    c.index = index;
    c.minor = index;
    c.mem_mib = mem_mib;
    c.healthy = true;
    return c;
}

/* The fixture's inputs: what its two cards and node say. */
static const struct egpu__dra_slice_card fixture_extra[2] = {
    {.architecture = "Hopper",
     .cc_major = 9,
     .cc_minor = 0,
     .pci_bus_id = "0000:18:00.0",
     .numa_node = 0},
    {.architecture = "Hopper",
     .cc_major = 9,
     .cc_minor = 0,
     .pci_bus_id = "0000:9a:00.0",
     .numa_node = 1},
};

static struct egpu__dra_slice_config fixture_config(const char *node_uid)
{
    struct egpu__dra_slice_config cfg = {
        .node = "gpu-node-1",
        .node_uid = node_uid,
        .driver_version = "570.133.20",
        .cuda_driver_version = 12080,
        .extra = fixture_extra,
    };

    return cfg;
}

static json_t *build(const struct egpu__dra_slice_config *cfg, const struct egpu_gpu_info *cards,
                     size_t n, int64_t gen)
{
    struct egpu_error err = {0};
    json_t *obj = NULL;
    int rc = egpu__dra_slice_build(cfg, cards, n, gen, &obj, &err);

    if (rc != 0)
        fail_msg("build: %d %s", rc, err.msg);
    assert_non_null(obj);
    return obj;
}

static const json_t *at(const json_t *o, const char *a, const char *b, const char *c)
{
    const json_t *v = json_object_get(o, a);

    if (b != NULL)
        v = json_object_get(v, b);
    if (c != NULL)
        v = json_object_get(v, c);
    return v;
}

static void assert_same(const json_t *want, const json_t *got, const char *what)
{
    if (json_equal(want, got) != 1) {
        char *w = json_dumps(want, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
        char *g = json_dumps(got, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);

        fail_msg("%s: want %s, got %s", what, w ? w : "(null)", g ? g : "(null)");
    }
}

static const json_t *device(const json_t *slice, size_t i)
{
    return json_array_get(at(slice, "spec", "devices", NULL), i);
}

static const char *dev_str(const json_t *slice, size_t i, const char *attr)
{
    return json_string_value(at(device(slice, i), "attributes", attr, "string"));
}

/* ------------------------------------------------------------------------ */

static void test_fixture_reproduced(void **state)
{
    json_t *fx = fixture();
    const json_t *owner = json_array_get(at(fx, "metadata", "ownerReferences", NULL), 0);
    struct egpu__dra_slice_config cfg =
        fixture_config(json_string_value(json_object_get(owner, "uid")));
    struct egpu_gpu_info cards[2] = {card(0, UUID0, H100, 81559), card(1, UUID1, H100, 81559)};
    json_t *got = build(&cfg, cards, 2, 1);
    const json_t *fdevs = at(fx, "spec", "devices", NULL);
    const char *key;
    json_t *v;

    (void)state;
    assert_string_equal(json_string_value(json_object_get(got, "apiVersion")),
                        json_string_value(json_object_get(fx, "apiVersion")));
    assert_string_equal(json_string_value(json_object_get(got, "kind")), "ResourceSlice");
    assert_same(at(fx, "metadata", "generateName", NULL), at(got, "metadata", "generateName", NULL),
                "metadata.generateName");
    assert_same(at(fx, "metadata", "ownerReferences", NULL),
                at(got, "metadata", "ownerReferences", NULL), "metadata.ownerReferences");
    /* Field by field first, so a difference is named. */
    json_object_foreach(json_object_get(fx, "spec"), key, v)
    {
        if (strcmp(key, "devices") != 0)
            assert_same(v, at(got, "spec", key, NULL), key);
    }
    assert_int_equal(json_array_size(at(got, "spec", "devices", NULL)), json_array_size(fdevs));
    for (size_t i = 0; i < json_array_size(fdevs); i++) {
        const json_t *fd = json_array_get(fdevs, i), *gd = device(got, i);
        const char *k;
        json_t *a;

        assert_same(json_object_get(fd, "name"), json_object_get(gd, "name"), "device name");
        assert_same(json_object_get(fd, "allowMultipleAllocations"),
                    json_object_get(gd, "allowMultipleAllocations"), "allowMultipleAllocations");
        json_object_foreach(json_object_get(fd, "attributes"), k, a)
        {
            assert_same(a, at(gd, "attributes", k, NULL), k);
        }
        json_object_foreach(json_object_get(fd, "capacity"), k, a)
        {
            assert_same(a, at(gd, "capacity", k, NULL), k);
        }
        assert_same(fd, gd, "device");
    }
    /* Then whole: nothing more, nothing less. */
    assert_same(json_object_get(fx, "spec"), json_object_get(got, "spec"), "spec");
    json_decref(got);
    json_decref(fx);
}

static void test_unpublishable_cards_left_out(void **state)
{
    struct egpu__dra_slice_config cfg = {.node = "n1"};
    struct egpu_gpu_info cards[4] = {card(0, UUID0, H100, 81559), card(1, UUID1, H100, 81559),
                                     card(2, "", H100, 81559), card(3, "GPU-3", "tiny", 1)};
    json_t *got;

    (void)state;
    cards[1].healthy = false;
    snprintf(cards[1].reason, sizeof(cards[1].reason), "XID 79");
    cards[2].healthy = false;
    got = build(&cfg, cards, 4, 7);
    assert_int_equal(json_array_size(at(got, "spec", "devices", NULL)), 1);
    assert_string_equal(json_string_value(json_object_get(device(got, 0), "name")), "gpu-0");
    assert_int_equal(json_integer_value(at(got, "spec", "pool", "generation")), 7);
    assert_int_equal(json_integer_value(at(got, "spec", "pool", "resourceSliceCount")), 1);
    assert_string_equal(json_string_value(at(got, "spec", "pool", "name")), "n1");
    assert_string_equal(json_string_value(at(got, "spec", "driver", NULL)), EGPU_API_DRA_DRIVER);
    /* No uid: no owner reference; the optional attributes are absent. */
    assert_null(at(got, "metadata", "ownerReferences", NULL));
    assert_null(at(device(got, 0), "attributes", "driverVersion", NULL));
    assert_null(at(device(got, 0), "attributes", "numaNode", NULL));
    assert_null(at(device(got, 0), "attributes", "nvlinkIsland", NULL));
    json_decref(got);

    /* No card to publish: a slice with no devices, still the node's pool. */
    got = build(&cfg, cards + 1, 3, 1);
    assert_true(json_is_array(at(got, "spec", "devices", NULL)));
    assert_int_equal(json_array_size(at(got, "spec", "devices", NULL)), 0);
    json_decref(got);
}

static void test_memory_is_canonical(void **state)
{
    static const struct {
        uint64_t mib;
        const char *q;
    } cases[] = {{81559, "81559Mi"}, {81920, "80Gi"},  {16384, "16Gi"}, {15360, "15Gi"},
                 {1048576, "1Ti"},   {1536, "1536Mi"}, {2, "2Mi"}};
    struct egpu__dra_slice_config cfg = {.node = "n1", .driver = "example.com"};

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct egpu_gpu_info c = card(0, UUID0, H100, cases[i].mib);
        json_t *got = build(&cfg, &c, 1, 1);
        const json_t *mem = at(device(got, 0), "capacity", "memory", NULL);

        assert_string_equal(json_string_value(json_object_get(mem, "value")), cases[i].q);
        assert_string_equal(json_string_value(at(mem, "requestPolicy", "default", NULL)),
                            cases[i].q);
        assert_string_equal(json_string_value(at(mem, "requestPolicy", "validRange", "max")),
                            cases[i].q);
        assert_string_equal(json_string_value(at(mem, "requestPolicy", "validRange", "min")),
                            "1Mi");
        assert_string_equal(json_string_value(at(mem, "requestPolicy", "validRange", "step")),
                            "1Mi");
        assert_string_equal(json_string_value(at(got, "spec", "driver", NULL)), "example.com");
        assert_string_equal(json_string_value(at(got, "metadata", "generateName", NULL)),
                            "0-example.com-n1-");
        json_decref(got);
    }
}

static void test_versions_as_semver(void **state)
{
    static const struct {
        const char *in, *out;
    } cases[] = {{"570.133.20", "570.133.20"},
                 {"535.104.05", "535.104.5"},
                 {"550.54", "550.54.0"},
                 {"560", "560.0.0"},
                 {"1.2.3.4", NULL},
                 {"abc", NULL},
                 {"12..3", NULL},
                 {"", NULL},
                 {"1.2.", NULL}};
    struct egpu_gpu_info c = card(0, UUID0, H100, 81559);

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct egpu__dra_slice_config cfg = {
            .node = "n1", .driver_version = cases[i].in, .cuda_driver_version = 11040};
        json_t *got = build(&cfg, &c, 1, 1);
        const json_t *v = at(device(got, 0), "attributes", "driverVersion", "version");

        if (cases[i].out == NULL)
            assert_null(v);
        else
            assert_string_equal(json_string_value(v), cases[i].out);
        assert_string_equal(
            json_string_value(at(device(got, 0), "attributes", "cudaDriverVersion", "version")),
            "11.4.0");
        json_decref(got);
    }
}

static void set_link(struct egpu_gpu_info *cards, size_t a, size_t b, enum egpu_gpu_link l)
{
    cards[a].links[b] = (uint8_t)l;
    cards[b].links[a] = (uint8_t)l;
}

static void test_nvlink_islands(void **state)
{
    struct egpu__dra_slice_config cfg = {.node = "n1"};
    struct egpu_gpu_info cards[5];
    static const long want[5] = {0, 0, 2, 2, 4};
    json_t *got;

    (void)state;
    for (size_t i = 0; i < 5; i++) {
        char uuid[16];

        snprintf(uuid, sizeof(uuid), "GPU-%zu", i);
        cards[i] = card((uint32_t)i, uuid, H100, 81559);
        cards[i].has_links = true;
        memset(cards[i].links, EGPU_LINK_SYS, sizeof(cards[i].links));
    }
    set_link(cards, 0, 1, EGPU_LINK_NVLINK);
    set_link(cards, 2, 3, EGPU_LINK_NVLINK);
    set_link(cards, 3, 4, EGPU_LINK_PHB);
    got = build(&cfg, cards, 5, 1);
    for (size_t i = 0; i < 5; i++)
        assert_int_equal(
            json_integer_value(at(device(got, i), "attributes", "nvlinkIsland", "int")), want[i]);
    json_decref(got);

    /* A chain joins: 4 reaches 2 through 3; an unhealthy card keeps no device
     * but its links still join the island. */
    set_link(cards, 3, 4, EGPU_LINK_NVLINK);
    cards[2].healthy = false;
    got = build(&cfg, cards, 5, 1);
    assert_int_equal(json_array_size(at(got, "spec", "devices", NULL)), 4);
    assert_int_equal(json_integer_value(at(device(got, 2), "attributes", "index", "int")), 3);
    assert_int_equal(json_integer_value(at(device(got, 2), "attributes", "nvlinkIsland", "int")),
                     2);
    assert_int_equal(json_integer_value(at(device(got, 3), "attributes", "nvlinkIsland", "int")),
                     2);
    json_decref(got);
}

static void test_product_name_cut(void **state)
{
    struct egpu__dra_slice_config cfg = {.node = "n1"};
    char model[100];
    struct egpu_gpu_info c;
    json_t *got;

    (void)state;
    memset(model, 'x', sizeof(model) - 1);
    model[sizeof(model) - 1] = '\0';
    c = card(0, UUID0, model, 81559);
    got = build(&cfg, &c, 1, 1);
    assert_int_equal(strlen(dev_str(got, 0, "productName")), EGPU_DRA_SLICE_STRING_MAX);
    json_decref(got);

    /* A two-byte character across byte 64 is left out whole. */
    memset(model, 'x', 63);
    memcpy(model + 63, "\xc3\xa9yy", 5);
    c = card(0, UUID0, model, 81559);
    got = build(&cfg, &c, 1, 1);
    assert_int_equal(strlen(dev_str(got, 0, "productName")), 63);
    json_decref(got);
}

static void test_bad_input_refused(void **state)
{
    struct egpu__dra_slice_config cfg = {.node = "n1"};
    struct egpu__dra_slice_config noname = {.node = ""};
    struct egpu_gpu_info c = card(0, UUID0, H100, 81559);
    struct egpu_error err = {0};
    json_t *out = NULL;

    (void)state;
    assert_int_equal(egpu__dra_slice_build(NULL, &c, 1, 1, &out, &err), -EINVAL);
    assert_int_equal(egpu__dra_slice_build(&noname, &c, 1, 1, &out, &err), -EINVAL);
    assert_int_equal(egpu__dra_slice_build(&cfg, &c, 1, 0, &out, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "generation"));
    assert_int_equal(egpu__dra_slice_build(&cfg, &c, EGPU_NODE_GPUS_MAX + 1, 1, &out, &err),
                     -EINVAL);
    memset(c.uuid, 'a', sizeof(c.uuid));
    assert_int_equal(egpu__dra_slice_build(&cfg, &c, 1, 1, &out, &err), -EINVAL);
    assert_null(out);
    /* The publisher checks the same before any request (no client needed). */
    {
        struct egpu__dra_slice_state st = {0};
        struct egpu__dra_slice_stats stats;

        assert_int_equal(egpu__dra_slice_publish(NULL, &st, &noname, &c, 1, &stats, &err), -EINVAL);
        assert_int_equal(stats.created + stats.updated + stats.unchanged, 0);
        egpu__dra_slice_state_close(&st);
        egpu__dra_slice_state_close(NULL);
    }
}

/* ------------------------------------------------------------------------ */
/* Dropped fields                                                           */

static void test_dropped_fields_named(void **state)
{
    json_t *fx = fixture(), *stored;
    char path[EGPU_DRA_SLICE_PATH_MAX];

    (void)state;
    /* Stored as sent: nothing dropped. */
    assert_false(egpu__dra_slice_dropped(fx, fx, NULL, path, sizeof(path)));
    assert_string_equal(path, "");

    /* The gate off: allowMultipleAllocations and requestPolicy gone. */
    stored = json_deep_copy(fx);
    json_object_del(json_array_get(at(stored, "spec", "devices", NULL), 1),
                    "allowMultipleAllocations");
    assert_true(egpu__dra_slice_dropped(fx, stored, NULL, path, sizeof(path)));
    assert_string_equal(path, "spec.devices[1].allowMultipleAllocations");
    json_object_del((json_t *)at(json_array_get(at(stored, "spec", "devices", NULL), 0), "capacity",
                                 "memory", NULL),
                    "requestPolicy");
    assert_true(egpu__dra_slice_dropped(fx, stored, NULL, path, sizeof(path)));
    assert_string_equal(path, "spec.devices[0].capacity.memory.requestPolicy");
    /* With a prefix, and cut to a short buffer. */
    assert_true(egpu__dra_slice_dropped(at(fx, "spec", NULL, NULL), at(stored, "spec", NULL, NULL),
                                        "spec", path, sizeof(path)));
    assert_string_equal(path, "spec.devices[0].capacity.memory.requestPolicy");
    assert_true(egpu__dra_slice_dropped(fx, stored, NULL, path, 12));
    assert_string_equal(path, "spec.device");
    json_decref(stored);

    /* Values are not compared: the server canonicalizes quantities. */
    stored = json_deep_copy(fx);
    json_object_set_new((json_t *)at(json_array_get(at(stored, "spec", "devices", NULL), 0),
                                     "capacity", "memory", NULL),
                        "value", json_string("79Gi"));
    assert_false(egpu__dra_slice_dropped(fx, stored, NULL, path, sizeof(path)));
    /* A null in what was sent is nothing to keep; a null stored is a drop. */
    json_object_set_new((json_t *)at(fx, "spec", NULL, NULL), "allNodes", json_null());
    assert_false(egpu__dra_slice_dropped(fx, stored, NULL, path, sizeof(path)));
    json_object_set_new((json_t *)at(stored, "spec", NULL, NULL), "nodeName", json_null());
    assert_true(egpu__dra_slice_dropped(fx, stored, NULL, path, sizeof(path)));
    assert_string_equal(path, "spec.nodeName");
    json_decref(stored);

    /* A shorter array: its first missing element. */
    stored = json_deep_copy(fx);
    json_array_remove((json_t *)at(stored, "spec", "devices", NULL), 1);
    assert_true(egpu__dra_slice_dropped(fx, stored, NULL, path, sizeof(path)));
    assert_string_equal(path, "spec.devices[1]");
    json_decref(stored);
    json_decref(fx);
}

/* The attribute attr of device i of the built slice, of kind ("string",
 * "version", "int"), or NULL. */
static const json_t *attr(const json_t *slice, size_t i, const char *name, const char *kind)
{
    return at(device(slice, i), "attributes", name, kind);
}

static void test_attributes_from_fake_cards(void **state)
{
    struct egpu__dra_slice_config cfg = {.node = "n1"};
    struct egpu__dra_slice_attrs *a = calloc(1, sizeof(*a));
    struct egpu_gpu_info cards[4];
    struct egpu_error err = {0};
    struct egpu_gpus *g = NULL;
    size_t n = 0;
    json_t *got;

    (void)state;
    assert_non_null(a);
    assert_int_equal(egpu_gpus_open_fake("2xA100-80GB,1xT4-16GB,1xMystery-8GB", "n1", &g, &err), 0);
    assert_int_equal(egpu_gpus_list(g, cards, 4, &n, &err), 0);
    assert_int_equal(n, 4);
    egpu__dra_slice_attributes(g, cards, n, a, &cfg);
    got = build(&cfg, cards, n, 1);
    assert_string_equal(json_string_value(attr(got, 0, "driverVersion", "version")), "570.133.20");
    assert_string_equal(json_string_value(attr(got, 0, "cudaDriverVersion", "version")), "12.8.0");
    assert_string_equal(json_string_value(attr(got, 0, "cudaComputeCapability", "version")),
                        "8.0.0");
    assert_string_equal(json_string_value(attr(got, 0, "architecture", "string")), "Ampere");
    assert_string_equal(json_string_value(attr(got, 0, "pciBusID", "string")), "0000:18:00.0");
    assert_string_equal(json_string_value(attr(got, 1, "pciBusID", "string")), "0000:19:00.0");
    assert_int_equal(json_integer_value(attr(got, 0, "numaNode", "int")), 0);
    /* The T4, in the second group (SYS from the first: another NUMA node). */
    assert_string_equal(json_string_value(attr(got, 2, "cudaComputeCapability", "version")),
                        "7.5.0");
    assert_string_equal(json_string_value(attr(got, 2, "architecture", "string")), "Turing");
    assert_int_equal(json_integer_value(attr(got, 2, "numaNode", "int")), 1);
    /* A model the table does not know: no capability, no architecture. */
    assert_null(attr(got, 3, "cudaComputeCapability", "version"));
    assert_null(attr(got, 3, "architecture", "string"));
    assert_non_null(attr(got, 3, "pciBusID", "string"));
    json_decref(got);
    egpu_gpus_free(g);
    free(a);
}

static void test_attributes_from_nvml(void **state)
{
    struct egpu__dra_slice_config cfg = {.node = "n1"};
    struct egpu__dra_slice_attrs *a = calloc(1, sizeof(*a));
    struct egpu_gpu_info cards[4];
    struct egpu_error err = {0};
    struct egpu_gpus *g = NULL;
    size_t n = 0;
    json_t *got;

    (void)state;
    assert_non_null(a);
    setenv("EGPU_MOCK_NVML_GPUS", "NVIDIA A100-SXM4-80GB:81920,NVIDIA A100-SXM4-80GB:81920", 1);
    setenv("EGPU_MOCK_NVML_FAIL",
           "nvmlDeviceGetCudaComputeCapability@1=3,nvmlDeviceGetNumaNodeId@1=3", 1);
    if (egpu_gpus_open_nvml(MOCK_FULL, &g, &err) != 0)
        fail_msg("NVML mock: %s", err.msg);
    assert_int_equal(egpu_gpus_list(g, cards, 4, &n, &err), 0);
    assert_int_equal(n, 2);
    egpu__dra_slice_attributes(g, cards, n, a, &cfg);
    got = build(&cfg, cards, n, 1);
    assert_string_equal(json_string_value(attr(got, 0, "driverVersion", "version")), "570.133.20");
    assert_string_equal(json_string_value(attr(got, 0, "cudaDriverVersion", "version")), "12.8.0");
    assert_string_equal(json_string_value(attr(got, 0, "cudaComputeCapability", "version")),
                        "8.0.0");
    assert_string_equal(json_string_value(attr(got, 0, "architecture", "string")), "Ampere");
    /* NVML's "00000000:18:00.0" as the 4-digit-domain form. */
    assert_string_equal(json_string_value(attr(got, 0, "pciBusID", "string")), "0000:18:00.0");
    assert_int_equal(json_integer_value(attr(got, 0, "numaNode", "int")), 0);
    /* Card 1's failing calls leave their attributes out, the rest stays. */
    assert_null(attr(got, 1, "cudaComputeCapability", "version"));
    assert_null(attr(got, 1, "numaNode", "int"));
    assert_string_equal(json_string_value(attr(got, 1, "pciBusID", "string")), "0000:19:00.0");
    json_decref(got);
    egpu_gpus_free(g);

    /* A library without the optional calls: none of those attributes. */
    unsetenv("EGPU_MOCK_NVML_FAIL");
    if (egpu_gpus_open_nvml(MOCK_NOOPT, &g, &err) != 0)
        fail_msg("NVML mock (no optional calls): %s", err.msg);
    assert_int_equal(egpu_gpus_list(g, cards, 4, &n, &err), 0);
    egpu__dra_slice_attributes(g, cards, n, a, &cfg);
    assert_null(cfg.driver_version);
    got = build(&cfg, cards, n, 1);
    assert_null(attr(got, 0, "driverVersion", "version"));
    assert_null(attr(got, 0, "cudaComputeCapability", "version"));
    assert_null(attr(got, 0, "pciBusID", "string"));
    assert_null(attr(got, 0, "numaNode", "int"));
    assert_non_null(attr(got, 0, "uuid", "string"));
    json_decref(got);
    egpu_gpus_free(g);
    unsetenv("EGPU_MOCK_NVML_GPUS");
    free(a);
}

static void test_unhealthy_card_tainted(void **state)
{
    struct egpu__dra_slice_config cfg = {.node = "n1", .taint_unhealthy = true};
    struct egpu_gpu_info cards[3] = {card(0, UUID0, H100, 81559), card(1, UUID1, H100, 81559),
                                     card(2, "", H100, 81559)};
    const json_t *t;
    json_t *got;

    (void)state;
    cards[1].healthy = false;
    snprintf(cards[1].reason, sizeof(cards[1].reason), "XID 79");
    cards[2].healthy = false; /* never read: no identity, still left out */
    got = build(&cfg, cards, 3, 1);
    assert_int_equal(json_array_size(at(got, "spec", "devices", NULL)), 2);
    assert_null(json_object_get(device(got, 0), "taints"));
    assert_string_equal(json_string_value(json_object_get(device(got, 1), "name")), "gpu-1");
    t = json_array_get(json_object_get(device(got, 1), "taints"), 0);
    assert_int_equal(json_array_size(json_object_get(device(got, 1), "taints")), 1);
    assert_string_equal(json_string_value(json_object_get(t, "key")),
                        EGPU_API_DRA_DRIVER "/unhealthy");
    assert_string_equal(json_string_value(json_object_get(t, "value")), "XID-79");
    assert_string_equal(json_string_value(json_object_get(t, "effect")), "NoSchedule");
    json_decref(got);
    /* A reason that is no label value is made one, or left out. */
    snprintf(cards[1].reason, sizeof(cards[1].reason), "  nvmlDeviceGetUUID: GPU is lost! ");
    got = build(&cfg, cards, 2, 1);
    t = json_array_get(json_object_get(device(got, 1), "taints"), 0);
    assert_string_equal(json_string_value(json_object_get(t, "value")),
                        "nvmlDeviceGetUUID--GPU-is-lost");
    json_decref(got);
    snprintf(cards[1].reason, sizeof(cards[1].reason), "!!");
    got = build(&cfg, cards, 2, 1);
    t = json_array_get(json_object_get(device(got, 1), "taints"), 0);
    assert_null(json_object_get(t, "value"));
    json_decref(got);
}

/* The node's one slice as the test API server holds it. */
static json_t *stored_slice(void)
{
    struct egpu_error err = {0};
    json_t *list = NULL, *s;

    if (egpu_kube_list(srv.kc, &egpu_kube_resourceslices, NULL, NULL, &list, NULL, &err) != 0)
        fail_msg("list slices: %s", err.msg);
    assert_int_equal(json_array_size(json_object_get(list, "items")), 1);
    s = json_incref(json_array_get(json_object_get(list, "items"), 0));
    json_decref(list);
    return s;
}

static void publish_unhealthy(bool gate, const char *log_path)
{
    struct egpu__dra_slice_config cfg = {
        .node = "n1", .node_uid = "3f0e1d2c-0000-4000-8000-000000000001", .taint_unhealthy = true};
    struct egpu_gpu_info cards[2] = {card(0, UUID0, H100, 81559), card(1, UUID1, H100, 81559)};
    struct egpu__dra_slice_state st = {0};
    struct egpu__dra_slice_stats stats;
    struct egpu_error err = {0};
    FILE *log = fopen(log_path, "w+");
    char text[4096];
    size_t len;
    json_t *s;

    assert_non_null(log);
    tks_reset(&srv);
    if (!gate)
        tks_post(&srv, "gates", "{\"DRADeviceTaints\": false}");
    cards[1].healthy = false;
    snprintf(cards[1].reason, sizeof(cards[1].reason), "XID 79");
    egpu_log_set_stream(log);
    egpu_log_level = EGPU_LOG_WARN;
    if (egpu__dra_slice_publish(srv.kc, &st, &cfg, cards, 2, &stats, &err) != 0)
        fail_msg("publish: %s", err.msg);
    s = stored_slice();
    if (gate) {
        /* The card stays, tainted; nothing dropped. */
        assert_int_equal(json_array_size(at(s, "spec", "devices", NULL)), 2);
        assert_non_null(json_object_get(device(s, 1), "taints"));
        assert_string_equal(stats.dropped, "");
        assert_false(st.no_taints);
    } else {
        /* The taint is dropped: the card leaves, the drop is named. */
        assert_int_equal(json_array_size(at(s, "spec", "devices", NULL)), 1);
        assert_string_equal(json_string_value(json_object_get(device(s, 0), "name")), "gpu-0");
        assert_non_null(strstr(stats.dropped, "taints"));
        assert_true(st.no_taints);
        assert_int_equal(stats.devices, 1);
    }
    json_decref(s);
    /* Again: nothing to write either way. */
    if (egpu__dra_slice_publish(srv.kc, &st, &cfg, cards, 2, &stats, &err) != 0)
        fail_msg("publish again: %s", err.msg);
    assert_int_equal(stats.unchanged, 1);
    fflush(log);
    egpu_log_set_stream(NULL);
    egpu_log_level = -1;
    rewind(log);
    len = fread(text, 1, sizeof(text) - 1, log);
    text[len] = '\0';
    fclose(log);
    if (gate)
        assert_null(strstr(text, "DRADeviceTaints"));
    else
        assert_non_null(strstr(text, "DRADeviceTaints"));
    egpu__dra_slice_state_close(&st);
}

static void test_taints_kept_with_gate_on(void **state)
{
    (void)state;
    publish_unhealthy(true, "/tmp/egpu-dra-slice-taints-on.log");
    (void)remove("/tmp/egpu-dra-slice-taints-on.log");
}

static void test_card_leaves_when_taints_dropped(void **state)
{
    (void)state;
    publish_unhealthy(false, "/tmp/egpu-dra-slice-taints-off.log");
    (void)remove("/tmp/egpu-dra-slice-taints-off.log");
}

static int group_setup(void **state)
{
    (void)state;
    egpu_log_level = -1;
    return tks_start(&srv, NULL);
}

/* egpu__dra_slice_card_state says what the built slice holds: a card
 * absent from its devices is absent, a device with taints is tainted; and
 * with the state's no_taints (the server dropped them) an unhealthy card
 * is absent. */
static void test_card_state_is_the_slices(void **state)
{
    struct egpu__dra_slice_config cfg = {.node = "n1", .taint_unhealthy = true};
    struct egpu__dra_slice_state st = {0};
    struct egpu_gpu_info cards[4] = {card(0, UUID0, H100, 81559), card(1, UUID1, H100, 81559),
                                     card(2, "", H100, 81559), card(3, "GPU-3", "tiny", 1)};
    static const enum egpu__dra_card_state want[2][4] = {
        {EGPU_DRA_CARD_PUBLISHED, EGPU_DRA_CARD_TAINTED, EGPU_DRA_CARD_ABSENT,
         EGPU_DRA_CARD_ABSENT},
        {EGPU_DRA_CARD_PUBLISHED, EGPU_DRA_CARD_ABSENT, EGPU_DRA_CARD_ABSENT, EGPU_DRA_CARD_ABSENT},
    };

    (void)state;
    cards[1].healthy = false;
    snprintf(cards[1].reason, sizeof(cards[1].reason), "XID 79");
    for (int pass = 0; pass < 2; pass++) {
        struct egpu__dra_slice_config eff = cfg;
        json_t *got;

        st.no_taints = pass == 1;
        eff.taint_unhealthy = cfg.taint_unhealthy && !st.no_taints;
        got = build(&eff, cards, 4, 1);
        for (size_t i = 0; i < 4; i++) {
            enum egpu__dra_card_state s = egpu__dra_slice_card_state(&cfg, &st, &cards[i]);
            const json_t *d = NULL, *x;
            char name[16];
            size_t k;

            snprintf(name, sizeof(name), "gpu-%zu", i);
            json_array_foreach(at(got, "spec", "devices", NULL), k,
                               x) if (strcmp(json_string_value(json_object_get(x, "name")), name) ==
                                      0) d = x;
            assert_int_equal(s, want[pass][i]);
            assert_int_equal(d == NULL, s == EGPU_DRA_CARD_ABSENT);
            assert_int_equal(d != NULL && json_object_get(d, "taints") != NULL,
                             s == EGPU_DRA_CARD_TAINTED);
        }
        json_decref(got);
    }
    assert_string_equal(egpu__dra_card_state_name(EGPU_DRA_CARD_PUBLISHED), "published");
    assert_string_equal(egpu__dra_card_state_name(EGPU_DRA_CARD_TAINTED), "tainted");
    assert_string_equal(egpu__dra_card_state_name(EGPU_DRA_CARD_ABSENT), "absent");
    assert_string_equal(egpu__dra_card_state_name(EGPU_DRA_CARD_STATE_COUNT), "?");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixture_reproduced),
        cmocka_unit_test(test_unpublishable_cards_left_out),
        cmocka_unit_test(test_card_state_is_the_slices),
        cmocka_unit_test(test_memory_is_canonical),
        cmocka_unit_test(test_versions_as_semver),
        cmocka_unit_test(test_nvlink_islands),
        cmocka_unit_test(test_product_name_cut),
        cmocka_unit_test(test_bad_input_refused),
        cmocka_unit_test(test_dropped_fields_named),
        cmocka_unit_test(test_attributes_from_fake_cards),
        cmocka_unit_test(test_attributes_from_nvml),
        cmocka_unit_test(test_unhealthy_card_tainted),
        cmocka_unit_test(test_taints_kept_with_gate_on),
        cmocka_unit_test(test_card_leaves_when_taints_dropped),
    };

    return cmocka_run_group_tests(tests, group_setup, tks_group_teardown);
}
