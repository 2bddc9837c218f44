/* tests/unit/test_controller_dra.c - the pure parts of egpu-controller's DRA
 * mode (src/controller/dra_spec.c): the elasticgpu.io/dra-claims annotation
 * decoded as hostile input (too long, not an object, too many entries, bad
 * names and bodies refused, each named), the templates a pod names, and the
 * comparison of a stored ResourceClaimTemplate's spec with the one the
 * controller makes, which holds across the API server's defaults and
 * canonical quantities and catches every real difference.
 */
#include "testutil.h"

#include "testjson.h"

#include <errno.h>
#include <stdlib.h>

#include "egpu/controller.h"

static void test_entries(void **state)
{
    struct egpu_error err = {0};
    json_t *out = NULL;
    char *big;

    (void)state;
    assert_int_equal(
        egpu_controller_dra_entries("{\"egpu-ab\": {\"spec\": {}}, \"egpu-cd\": {}}", &out, &err),
        0);
    assert_int_equal(json_object_size(out), 2);
    assert_true(json_is_object(json_object_get(out, "egpu-ab")));
    json_decref(out);
    out = NULL;
    assert_int_equal(egpu_controller_dra_entries("{}", &out, &err), 0);
    assert_int_equal(json_object_size(out), 0);
    json_decref(out);
    out = NULL;

    assert_int_equal(egpu_controller_dra_entries("[1]", &out, &err), EGPU_ESYNTAX);
    assert_string_equal(err.msg, "annotation elasticgpu.io/dra-claims: not a JSON object of "
                                 "template names to specs");
    assert_null(out);
    assert_int_equal(egpu_controller_dra_entries("{\"a\": 1", &out, &err), EGPU_ESYNTAX);
    assert_int_equal(egpu_controller_dra_entries("{\"a\": {}, \"a\": {}}", &out, &err),
                     EGPU_ESYNTAX);
    assert_int_equal(egpu_controller_dra_entries("{\"egpu-x\": \"spec\"}", &out, &err),
                     EGPU_ESYNTAX);
    assert_string_equal(err.msg, "annotation elasticgpu.io/dra-claims: entry \"egpu-x\": "
                                 "allowed: a name of 1..253 characters mapped to a template "
                                 "spec object");
    assert_int_equal(egpu_controller_dra_entries("{\"\": {}}", &out, &err), EGPU_ESYNTAX);
    assert_null(out);

    /* 33 entries: one more than a pod may name. */
    big = malloc(EGPU_CONTROLLER_DRA_TEXT_MAX + 2);
    assert_non_null(big);
    {
        size_t n = 0;

        n += (size_t)snprintf(big + n, 16, "{");
        for (int i = 0; i < 33; i++)
            n += (size_t)snprintf(big + n, 32, "%s\"t%d\": {}", i ? ", " : "", i);
        snprintf(big + n, 4, "}");
    }
    assert_int_equal(egpu_controller_dra_entries(big, &out, &err), EGPU_ERANGE);
    assert_string_equal(err.msg, "annotation elasticgpu.io/dra-claims: 33 templates; allowed: "
                                 "at most 32");
    /* A name of 254 characters. */
    memset(big, 'a', EGPU_CONTROLLER_DRA_TEXT_MAX + 1);
    big[0] = '{';
    big[1] = '"';
    snprintf(big + 2 + 254, 8, "\": {}}");
    assert_int_equal(egpu_controller_dra_entries(big, &out, &err), EGPU_ESYNTAX);
    /* Longer than the limit: refused before parsing. */
    memset(big, ' ', EGPU_CONTROLLER_DRA_TEXT_MAX + 1);
    big[0] = '{';
    big[EGPU_CONTROLLER_DRA_TEXT_MAX] = '}';
    big[EGPU_CONTROLLER_DRA_TEXT_MAX + 1] = '\0';
    assert_int_equal(egpu_controller_dra_entries(big, &out, &err), EGPU_ESYNTAX);
    assert_non_null(strstr(err.msg, "longer than 65536 bytes"));
    big[EGPU_CONTROLLER_DRA_TEXT_MAX] = '\0';
    big[EGPU_CONTROLLER_DRA_TEXT_MAX - 1] = '}';
    assert_int_equal(egpu_controller_dra_entries(big, &out, &err), 0);
    json_decref(out);
    assert_int_equal(egpu_controller_dra_entries(NULL, &out, &err), EGPU_ESYNTAX);
    free(big);
}

static void test_pod_templates(void **state)
{
    json_t *pod = tu_json("{'spec': {'resourceClaims': [{'name': 'gpu', "
                          "'resourceClaimTemplateName': 'egpu-1'}, {'name': 'x', "
                          "'resourceClaimName': 'shared'}, {'name': 'y', "
                          "'resourceClaimTemplateName': 'egpu-2'}, {'name': 'z', "
                          "'resourceClaimTemplateName': 7}]}}");
    json_t *none = tu_json("{'spec': {'containers': []}}");
    json_t *t = egpu_controller_dra_pod_templates(pod);

    (void)state;
    assert_int_equal(json_object_size(t), 2);
    assert_non_null(json_object_get(t, "egpu-1"));
    assert_non_null(json_object_get(t, "egpu-2"));
    assert_null(json_object_get(t, "shared"));
    json_decref(t);
    t = egpu_controller_dra_pod_templates(none);
    assert_int_equal(json_object_size(t), 0);
    json_decref(t);
    t = egpu_controller_dra_pod_templates(NULL);
    assert_int_equal(json_object_size(t), 0);
    json_decref(t);
    json_decref(pod);
    json_decref(none);
}

/* What the controller sends, and what the API server returns for it: the
 * template's metadata {}, allocationMode and count filled in, the memory
 * canonical. */
#define WANT                                                                            \
    "{'spec': {'devices': {'requests': [{'name': 'c0', 'exactly': {'deviceClassName': " \
    "'gpu-share.elasticgpu.io', 'capacity': {'requests': {'cores': '30', 'memory': "    \
    "'4096Mi'}}}}], 'constraints': [{'requests': ['c0'], 'distinctAttribute': "         \
    "'gpu.elasticgpu.io/uuid'}]}}}"
#define STORED                                                                              \
    "{'metadata': {'creationTimestamp': null}, 'spec': {'devices': {'requests': [{'name': " \
    "'c0', 'exactly': {'deviceClassName': 'gpu-share.elasticgpu.io', 'allocationMode': "    \
    "'ExactCount', 'count': 1, 'capacity': {'requests': {'cores': '30', 'memory': "         \
    "'4Gi'}}}}], 'constraints': [{'requests': ['c0'], 'distinctAttribute': "                \
    "'gpu.elasticgpu.io/uuid'}]}}}"

static void test_spec_same(void **state)
{
    static const char *const differ[] = {
        /* another capacity */
        "{'spec': {'devices': {'requests': [{'name': 'c0', 'exactly': {'deviceClassName': "
        "'gpu-share.elasticgpu.io', 'capacity': {'requests': {'cores': '31', 'memory': "
        "'4Gi'}}}}], 'constraints': [{'requests': ['c0'], 'distinctAttribute': "
        "'gpu.elasticgpu.io/uuid'}]}}}",
        /* more memory */
        "{'spec': {'devices': {'requests': [{'name': 'c0', 'exactly': {'deviceClassName': "
        "'gpu-share.elasticgpu.io', 'capacity': {'requests': {'cores': '30', 'memory': "
        "'5Gi'}}}}], 'constraints': [{'requests': ['c0'], 'distinctAttribute': "
        "'gpu.elasticgpu.io/uuid'}]}}}",
        /* the whole-card class */
        "{'spec': {'devices': {'requests': [{'name': 'c0', 'exactly': {'deviceClassName': "
        "'gpu.elasticgpu.io', 'capacity': {'requests': {'cores': '30', 'memory': "
        "'4Gi'}}}}], 'constraints': [{'requests': ['c0'], 'distinctAttribute': "
        "'gpu.elasticgpu.io/uuid'}]}}}",
        /* two devices */
        "{'spec': {'devices': {'requests': [{'name': 'c0', 'exactly': {'deviceClassName': "
        "'gpu-share.elasticgpu.io', 'count': 2, 'capacity': {'requests': {'cores': '30', "
        "'memory': '4Gi'}}}}], 'constraints': [{'requests': ['c0'], 'distinctAttribute': "
        "'gpu.elasticgpu.io/uuid'}]}}}",
        /* a selector added */
        "{'spec': {'devices': {'requests': [{'name': 'c0', 'exactly': {'deviceClassName': "
        "'gpu-share.elasticgpu.io', 'selectors': [{'cel': {'expression': 'true'}}], "
        "'capacity': {'requests': {'cores': '30', 'memory': '4Gi'}}}}], 'constraints': "
        "[{'requests': ['c0'], 'distinctAttribute': 'gpu.elasticgpu.io/uuid'}]}}}",
        /* the constraint gone */
        "{'spec': {'devices': {'requests': [{'name': 'c0', 'exactly': {'deviceClassName': "
        "'gpu-share.elasticgpu.io', 'capacity': {'requests': {'cores': '30', 'memory': "
        "'4Gi'}}}}]}}}",
        /* a second request */
        "{'spec': {'devices': {'requests': [{'name': 'c0', 'exactly': {'deviceClassName': "
        "'gpu-share.elasticgpu.io', 'capacity': {'requests': {'cores': '30', 'memory': "
        "'4Gi'}}}}, {'name': 'c1', 'exactly': {'deviceClassName': 'gpu.elasticgpu.io'}}], "
        "'constraints': [{'requests': ['c0'], 'distinctAttribute': "
        "'gpu.elasticgpu.io/uuid'}]}}}",
        /* labels the claims get */
        "{'metadata': {'labels': {'a': 'b'}}, 'spec': {'devices': {'requests': [{'name': "
        "'c0', 'exactly': {'deviceClassName': 'gpu-share.elasticgpu.io', 'capacity': "
        "{'requests': {'cores': '30', 'memory': '4Gi'}}}}], 'constraints': [{'requests': "
        "['c0'], 'distinctAttribute': 'gpu.elasticgpu.io/uuid'}]}}}",
        /* a field the controller does not set */
        "{'spec': {'devices': {'requests': [{'name': 'c0', 'exactly': {'deviceClassName': "
        "'gpu-share.elasticgpu.io', 'capacity': {'requests': {'cores': '30', 'memory': "
        "'4Gi'}}}}], 'constraints': [{'requests': ['c0'], 'distinctAttribute': "
        "'gpu.elasticgpu.io/uuid'}]}}, 'x': '1k'}",
        /* not a quantity */
        "{'spec': {'devices': {'requests': [{'name': 'c0', 'exactly': {'deviceClassName': "
        "'gpu-share.elasticgpu.io', 'capacity': {'requests': {'cores': 'thirty', 'memory': "
        "'4Gi'}}}}], 'constraints': [{'requests': ['c0'], 'distinctAttribute': "
        "'gpu.elasticgpu.io/uuid'}]}}}",
    };
    json_t *want = tu_json(WANT), *stored = tu_json(STORED);

    (void)state;
    assert_true(egpu_controller_dra_spec_same(want, want));
    assert_true(egpu_controller_dra_spec_same(want, stored));
    assert_true(egpu_controller_dra_spec_same(stored, want));
    for (size_t i = 0; i < sizeof(differ) / sizeof(differ[0]); i++) {
        json_t *d = tu_json(differ[i]);

        if (egpu_controller_dra_spec_same(want, d))
            fail_msg("differ[%zu] taken as the same spec", i);
        json_decref(d);
    }
    /* An allocationMode other than the default differs. */
    {
        json_t *all = json_deep_copy(stored);
        json_t *ex = json_object_get(
            json_array_get(json_object_get(json_object_get(json_object_get(all, "spec"), "devices"),
                                           "requests"),
                           0),
            "exactly");

        assert_int_equal(json_object_set_new(ex, "allocationMode", json_string("All")), 0);
        assert_false(egpu_controller_dra_spec_same(want, all));
        json_decref(all);
    }
    assert_true(egpu_controller_dra_spec_same(NULL, NULL));
    assert_false(egpu_controller_dra_spec_same(want, NULL));
    assert_false(egpu_controller_dra_spec_same(NULL, want));
    json_decref(want);
    json_decref(stored);
}

static void decode_class(const char *text, struct egpu_api_class *cls)
{
    struct egpu_error err = {0};
    json_t *obj = tu_json(text);

    if (egpu_api_class_decode(obj, cls, &err) != 0)
        fail_msg("class: %s", err.msg);
    json_decref(obj);
}

static const char *selector(const json_t *dc, size_t i)
{
    return json_string_value(json_object_get(
        json_object_get(
            json_array_get(json_object_get(json_object_get(dc, "spec"), "selectors"), i), "cel"),
        "expression"));
}

static void test_device_class(void **state)
{
    static struct egpu_api_class cls;
    struct egpu_error err = {0};
    json_t *dc = NULL, *ref;
    char name[EGPU_K8S_NAME_MAX], longname[300];

    (void)state;
    decode_class("{'apiVersion': 'elasticgpu.io/v1alpha1', 'kind': 'ElasticGPUClass', "
                 "'metadata': {'name': 'shared-a100', 'uid': 'u-1'}, 'provisioner': "
                 "'gpushare.provisioner.elasticgpu.io', 'parameters': {'models': "
                 "'A100-SXM4-80GB|NVIDIA H100', 'nodeSelector': 'zone=a', 'policy': 'fgd'}}",
                 &cls);
    assert_int_equal(egpu_controller_dra_device_class(&cls, &dc, &err), 0);
    assert_string_equal(json_string_value(json_object_get(dc, "kind")), "DeviceClass");
    assert_string_equal(json_string_value(json_object_get(json_object_get(dc, "metadata"), "name")),
                        "elasticgpu-shared-a100");
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(json_object_get(dc, "metadata"), "labels"),
                            EGPU_CONTROLLER_MANAGED_BY_KEY)),
                        "egpu-controller");
    ref = json_array_get(json_object_get(json_object_get(dc, "metadata"), "ownerReferences"), 0);
    assert_string_equal(json_string_value(json_object_get(ref, "uid")), "u-1");
    assert_string_equal(json_string_value(json_object_get(ref, "kind")), "ElasticGPUClass");
    assert_string_equal(json_string_value(json_object_get(ref, "name")), "shared-a100");
    assert_true(json_is_true(json_object_get(ref, "controller")));
    assert_string_equal(selector(dc, 0), "device.driver == \"gpu.elasticgpu.io\"");
    /* Each model as the class matches it: as written, and with the vendor
     * prefix GPU objects carry, once. */
    assert_string_equal(selector(dc, 1),
                        "has(device.attributes[\"gpu.elasticgpu.io\"].productName) && "
                        "device.attributes[\"gpu.elasticgpu.io\"].productName in "
                        "[\"A100-SXM4-80GB\", \"NVIDIA A100-SXM4-80GB\", \"NVIDIA H100\"]");
    assert_null(selector(dc, 2));
    json_decref(dc);
    dc = NULL;

    /* No models: the driver only. A hostile model stays one string. */
    decode_class("{'metadata': {'name': 'any', 'uid': 'u-2'}, 'provisioner': "
                 "'physical.provisioner.elasticgpu.io'}",
                 &cls);
    assert_int_equal(egpu_controller_dra_device_class(&cls, &dc, &err), 0);
    assert_non_null(selector(dc, 0));
    assert_null(selector(dc, 1));
    json_decref(dc);
    dc = NULL;
    /* Whatever the decoder lets through, the builder quotes as one string. */
    snprintf(cls.models, sizeof(cls.models), "%s", "x\"] && true && [\"");
    if (egpu_controller_dra_device_class(&cls, &dc, &err) != 0)
        fail_msg("%s", err.msg);
    assert_non_null(strstr(selector(dc, 1), "in [\"x\\\"] && true && [\\\"\", "));
    json_decref(dc);
    dc = NULL;

    /* Names: the prefix and the class's, at most 253 characters. */
    assert_int_equal(egpu_api_dra_object_name("a", name, sizeof(name)), 0);
    assert_string_equal(name, "elasticgpu-a");
    memset(longname, 'a', 242);
    longname[242] = '\0';
    assert_int_equal(egpu_api_dra_object_name(longname, name, sizeof(name)), 0);
    assert_int_equal(strlen(name), 253);
    longname[242] = 'a';
    longname[243] = '\0';
    assert_int_equal(egpu_api_dra_object_name(longname, name, sizeof(name)), -ENAMETOOLONG);
    memcpy(cls.meta.name, longname, 244);
    assert_int_equal(egpu_controller_dra_device_class(&cls, &dc, &err), -ENAMETOOLONG);
    assert_null(dc);
    assert_int_equal(egpu_api_dra_object_name("a", name, 12), -ENAMETOOLONG);
}

static void decode_claim(const char *text, struct egpu_api_claim *cl)
{
    struct egpu_error err = {0};
    json_t *obj = tu_json(text);

    if (egpu_api_claim_decode(obj, cl, &err) != 0)
        fail_msg("claim: %s", err.msg);
    json_decref(obj);
}

static void test_claim_object(void **state)
{
    static struct egpu_api_class share, whole;
    static struct egpu_api_claim cl;
    struct egpu_error err = {0};
    json_t *rc = NULL, *want, *ref;

    (void)state;
    decode_class("{'metadata': {'name': 's', 'uid': 'u-s'}, 'provisioner': "
                 "'gpushare.provisioner.elasticgpu.io'}",
                 &share);
    decode_class("{'metadata': {'name': 'w', 'uid': 'u-w'}, 'provisioner': "
                 "'physical.provisioner.elasticgpu.io'}",
                 &whole);
    decode_claim("{'metadata': {'name': 'train', 'namespace': 'ml', 'uid': 'u-c'}, 'spec': "
                 "{'resources': {'requests': {'elasticgpu.io/gpu-core': 30, "
                 "'elasticgpu.io/gpu-memory': 4096}}}}",
                 &cl);
    assert_int_equal(egpu_controller_dra_claim_object(&cl, &share, &rc, &err), 0);
    want = tu_json("{'devices': {'requests': [{'name': 'gpu', 'exactly': {'deviceClassName': "
                   "'elasticgpu-s', 'allocationMode': 'ExactCount', 'count': 1, 'capacity': "
                   "{'requests': {'cores': '30', 'memory': '4096Mi'}}}}]}}");
    assert_true(json_equal(json_object_get(rc, "spec"), want));
    json_decref(want);
    assert_string_equal(json_string_value(json_object_get(json_object_get(rc, "metadata"), "name")),
                        "elasticgpu-train");
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(rc, "metadata"), "namespace")), "ml");
    ref = json_array_get(json_object_get(json_object_get(rc, "metadata"), "ownerReferences"), 0);
    assert_string_equal(json_string_value(json_object_get(ref, "uid")), "u-c");
    assert_string_equal(json_string_value(json_object_get(ref, "kind")), "ElasticGPUClaim");
    json_decref(rc);
    rc = NULL;
    /* A share in a whole-card class, whole cards in a share class, TFLOPS. */
    assert_int_equal(egpu_controller_dra_claim_object(&cl, &whole, &rc, &err), EGPU_ERANGE);
    assert_string_equal(err.msg, "asks a share of one card, but class w provisions whole cards");
    decode_claim("{'metadata': {'name': 'big', 'namespace': 'ml', 'uid': 'u-b'}, 'spec': "
                 "{'resources': {'requests': {'elasticgpu.io/gpu-core': 200}}}}",
                 &cl);
    assert_int_equal(egpu_controller_dra_claim_object(&cl, &share, &rc, &err), EGPU_ERANGE);
    assert_int_equal(egpu_controller_dra_claim_object(&cl, &whole, &rc, &err), 0);
    assert_int_equal(
        json_integer_value(json_object_get(
            json_object_get(
                json_array_get(
                    json_object_get(json_object_get(json_object_get(rc, "spec"), "devices"),
                                    "requests"),
                    0),
                "exactly"),
            "count")),
        2);
    json_decref(rc);
    rc = NULL;
    decode_claim("{'metadata': {'name': 'fast', 'namespace': 'ml', 'uid': 'u-f'}, 'spec': "
                 "{'resources': {'requests': {'elasticgpu.io/gpu-tflops': 50}}}}",
                 &cl);
    assert_int_equal(egpu_controller_dra_claim_object(&cl, &share, &rc, &err), EGPU_ERANGE);
    assert_non_null(strstr(err.msg, "gpu-tflops"));
    assert_null(rc);
}

static void test_allocation(void **state)
{
    struct egpu_controller_dra_alloc a;
    json_t *rc = tu_json(
        "{'status': {'allocation': {'devices': {'results': [{'driver': 'other.example.com', "
        "'pool': 'x', 'device': 'y'}, {'request': 'gpu', 'driver': 'gpu.elasticgpu.io', "
        "'pool': 'n1', 'device': 'gpu-1', 'consumedCapacity': {'cores': '30', 'memory': "
        "'4Gi'}}]}, 'nodeSelector': {'nodeSelectorTerms': [{'matchFields': [{'key': "
        "'metadata.name', 'operator': 'In', 'values': ['n1']}]}]}}}}");
    json_t *none = tu_json("{'status': {}}");
    json_t *foreign = tu_json("{'status': {'allocation': {'devices': {'results': [{'driver': "
                              "'other.example.com', 'pool': 'x', 'device': 'y'}]}}}}");
    json_t *odd = tu_json("{'status': {'allocation': {'devices': {'results': [{'driver': "
                          "'gpu.elasticgpu.io', 'pool': 7, 'device': 'gpu-0', "
                          "'consumedCapacity': {'cores': '-5', 'memory': '1.5Mi'}}]}}}}");

    (void)state;
    egpu_controller_dra_allocation(rc, &a);
    assert_true(a.allocated);
    assert_string_equal(a.pool, "n1");
    assert_string_equal(a.device, "gpu-1");
    assert_string_equal(a.node, "n1");
    assert_int_equal(a.cores, 30);
    assert_int_equal(a.mem_mib, 4096);
    egpu_controller_dra_allocation(none, &a);
    assert_false(a.allocated);
    egpu_controller_dra_allocation(foreign, &a);
    assert_false(a.allocated);
    egpu_controller_dra_allocation(odd, &a);
    assert_true(a.allocated);
    assert_string_equal(a.pool, "");
    assert_string_equal(a.node, "");
    assert_int_equal(a.cores, 0);   /* negative: left out */
    assert_int_equal(a.mem_mib, 2); /* rounded up */
    egpu_controller_dra_allocation(NULL, &a);
    assert_false(a.allocated);
    json_decref(rc);
    json_decref(none);
    json_decref(foreign);
    json_decref(odd);
}

static void test_ask_of(void **state)
{
    static const char *const bad[] = {
        "{}",
        "{'devices': {'requests': []}}",
        "{'devices': {'requests': [{'name': 'x', 'exactly': {'deviceClassName': "
        "'gpu-share.elasticgpu.io', 'capacity': {'requests': {'cores': '30'}}}}]}}",
        "{'devices': {'requests': [{'name': 'gpu', 'exactly': {'deviceClassName': "
        "'other.example.com', 'capacity': {'requests': {'cores': '30'}}}}]}}",
        "{'devices': {'requests': [{'name': 'gpu', 'exactly': {'deviceClassName': "
        "'gpu-share.elasticgpu.io', 'capacity': {'requests': {'cores': '100'}}}}]}}",
        "{'devices': {'requests': [{'name': 'gpu', 'exactly': {'deviceClassName': "
        "'gpu-share.elasticgpu.io', 'capacity': {'requests': {'cores': '30.5'}}}}]}}",
        "{'devices': {'requests': [{'name': 'gpu', 'exactly': {'deviceClassName': "
        "'gpu-share.elasticgpu.io', 'capacity': {'requests': {'cores': '30', 'memory': "
        "'100'}}}}]}}",
        "{'devices': {'requests': [{'name': 'gpu', 'exactly': {'deviceClassName': "
        "'gpu.elasticgpu.io', 'count': 33}}]}}",
        "{'devices': {'requests': [{'name': 'gpu', 'exactly': {'deviceClassName': "
        "'gpu.elasticgpu.io'}}]}}",
        "{'devices': {'requests': [{'name': 'gpu', 'exactly': {'deviceClassName': "
        "'gpu.elasticgpu.io', 'count': 1}}, {'name': 'gpu', 'exactly': {}}]}}",
    };
    struct egpu_api_gpu_ask ask;
    json_t *s = tu_json("{'devices': {'requests': [{'name': 'gpu', 'exactly': "
                        "{'deviceClassName': 'gpu-share.elasticgpu.io', 'capacity': "
                        "{'requests': {'cores': '30', 'memory': '4Gi'}}}}]}}");

    (void)state;
    assert_int_equal(egpu_controller_dra_ask_of(s, &ask), 0);
    assert_int_equal(ask.core_pct, 30);
    assert_true(ask.has_mem);
    assert_int_equal(ask.mem_mib, 4096);
    json_decref(s);
    s = tu_json("{'devices': {'requests': [{'name': 'gpu', 'exactly': {'deviceClassName': "
                "'gpu.elasticgpu.io', 'count': 2, 'adminAccess': true}}]}}");
    /* Read back as 2 cards; the caller's comparison with the spec made
     * again refuses the adminAccess. */
    assert_int_equal(egpu_controller_dra_ask_of(s, &ask), 0);
    assert_int_equal(ask.core_pct, 200);
    assert_false(ask.has_mem);
    json_decref(s);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        json_t *b = tu_json(bad[i]);

        if (egpu_controller_dra_ask_of(b, &ask) != EGPU_ESYNTAX)
            fail_msg("bad[%zu] read as an ask", i);
        json_decref(b);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_entries),      cmocka_unit_test(test_pod_templates),
        cmocka_unit_test(test_ask_of),       cmocka_unit_test(test_spec_same),
        cmocka_unit_test(test_device_class), cmocka_unit_test(test_claim_object),
        cmocka_unit_test(test_allocation),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
