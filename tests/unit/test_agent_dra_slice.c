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
 */
#include <errno.h>
#include <stdlib.h>

#include "testutil.h"
#include "dra_slice_int.h"

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixture_reproduced),
        cmocka_unit_test(test_unpublishable_cards_left_out),
        cmocka_unit_test(test_memory_is_canonical),
        cmocka_unit_test(test_versions_as_semver),
        cmocka_unit_test(test_nvlink_islands),
        cmocka_unit_test(test_product_name_cut),
        cmocka_unit_test(test_bad_input_refused),
        cmocka_unit_test(test_dropped_fields_named),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
