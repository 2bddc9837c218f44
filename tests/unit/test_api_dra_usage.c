/* tests/unit/test_api_dra_usage.c - what a ResourceClaim's or template's
 * spec asks of this driver's classes, and what an allocated claim holds by
 * its status (src/api/dra_usage.c): one table row per rule, with the exact
 * message of each refusal.
 *
 * Objects are written with ' for " (tu_json() swaps them). */
#include "testutil.h"
#include "testjson.h"

#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <string.h>

#include "egpu/api.h"

#define SHARE     "'gpu-share.elasticgpu.io'"
#define WHOLE     "'gpu.elasticgpu.io'"
#define REQ(body) "{'devices': {'requests': [" body "]}}"

static void test_spec_usage(void **state)
{
    static const struct {
        const char *spec;
        int64_t cores, mem, devices, whole;
    } rows[] = {
        /* a share as the webhook writes it */
        {REQ("{'name': 'gpu', 'exactly': {'deviceClassName': " SHARE ", 'count': 1, "
             "'capacity': {'requests': {'cores': '30', 'memory': '4096Mi'}}}}"),
         30, 4096, 1, 0},
        /* memory in Gi and bytes, rounded up to MiB */
        {REQ("{'name': 'a', 'exactly': {'deviceClassName': " SHARE ", "
             "'capacity': {'requests': {'cores': '5', 'memory': '2Gi'}}}}, "
             "{'name': 'b', 'exactly': {'deviceClassName': " SHARE ", "
             "'capacity': {'requests': {'cores': '1', 'memory': '1000001'}}}}"),
         6, 2048 + 1, 2, 0},
        /* whole cards: no capacity, count 3 */
        {REQ("{'name': 'gpu', 'exactly': {'deviceClassName': " WHOLE ", 'count': 3}}"), 300, 0, 3,
         3},
        /* cores named, memory not: the card's memory (not counted in MiB) */
        {REQ("{'name': 'gpu', 'exactly': {'deviceClassName': " SHARE ", 'count': 2, "
             "'capacity': {'requests': {'cores': '20'}}}}"),
         40, 0, 2, 2},
        /* an ElasticGPUClass's DeviceClass (the controller's elasticgpu-<class>),
         * named by a tenant's own claim: ours, counted */
        {REQ("{'name': 'gpu', 'exactly': {'deviceClassName': 'elasticgpu-gpushare', "
             "'capacity': {'requests': {'cores': '50', 'memory': '8Gi'}}}}"),
         50, 8192, 1, 0},
        /* another driver's class asks nothing of us */
        {REQ("{'name': 'nv', 'exactly': {'deviceClassName': 'gpu.nvidia.com', 'count': 8, "
             "'allocationMode': 'All'}}"),
         0, 0, 0, 0},
        /* firstAvailable: the largest of our subrequests, per figure */
        {REQ("{'name': 'gpu', 'firstAvailable': ["
             "{'name': 'big', 'deviceClassName': " SHARE ", "
             "'capacity': {'requests': {'cores': '80', 'memory': '1Gi'}}}, "
             "{'name': 'nv', 'deviceClassName': 'gpu.nvidia.com'}, "
             "{'name': 'small', 'deviceClassName': " SHARE ", "
             "'capacity': {'requests': {'cores': '10', 'memory': '8Gi'}}}]}"),
         80, 8192, 1, 0},
        /* no devices at all */
        {"{}", 0, 0, 0, 0},
        {"{'devices': {}}", 0, 0, 0, 0},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        json_t *spec = tu_json(rows[i].spec);
        struct egpu_api_dra_usage u;
        struct egpu_error err = {0};

        assert_int_equal(egpu_api_dra_spec_usage(spec, "spec", &u, &err), 0);
        assert_int_equal(u.cores, rows[i].cores);
        assert_int_equal(u.mem_mib, rows[i].mem);
        assert_int_equal(u.devices, rows[i].devices);
        assert_int_equal(u.mem_whole, rows[i].whole);
        json_decref(spec);
    }
}

static void test_spec_refused(void **state)
{
    static const struct {
        const char *spec;
        const char *field;
        int code;
        const char *msg;
    } rows[] = {
        {REQ("{'name': 'gpu', 'exactly': {'deviceClassName': " SHARE ", "
             "'capacity': {'requests': {'cores': '150'}}}}"),
         "spec", EGPU_ERANGE,
         "spec.devices.requests[0].exactly.capacity.requests.cores is \"150\"; allowed: a whole "
         "number 0..100 (percent of one card)"},
        {REQ("{'name': 'gpu', 'exactly': {'deviceClassName': " SHARE ", "
             "'capacity': {'requests': {'cores': '500m'}}}}"),
         "spec", EGPU_ERANGE,
         "spec.devices.requests[0].exactly.capacity.requests.cores is \"500m\"; allowed: a whole "
         "number 0..100 (percent of one card)"},
        {REQ("{'name': 'gpu', 'exactly': {'deviceClassName': " SHARE ", "
             "'capacity': {'requests': {'cores': 30}}}}"),
         "spec.spec", EGPU_ESYNTAX,
         "spec.spec.devices.requests[0].exactly.capacity.requests.cores is not a quantity "
         "string; allowed: a whole number 0..100 (percent of one card)"},
        {REQ("{'name': 'a', 'exactly': {'deviceClassName': 'x'}}, "
             "{'name': 'gpu', 'exactly': {'deviceClassName': " SHARE ", "
             "'capacity': {'requests': {'cores': '10', 'memory': '-1Gi'}}}}"),
         "spec", EGPU_ERANGE,
         "spec.devices.requests[1].exactly.capacity.requests.memory is \"-1Gi\"; allowed: a "
         "quantity of bytes, e.g. \"4Gi\" or \"4096Mi\", at most 1Pi"},
        {REQ("{'name': 'gpu', 'exactly': {'deviceClassName': " SHARE ", "
             "'capacity': {'requests': {'tflops': '10'}}}}"),
         "spec", EGPU_ERANGE,
         "spec.devices.requests[0].exactly.capacity.requests.tflops names capacity \"tflops\", "
         "which devices of gpu-share.elasticgpu.io do not have; allowed: cores, memory"},
        {REQ("{'name': 'gpu', 'exactly': {'deviceClassName': " WHOLE ", 'allocationMode': "
             "'All'}}"),
         "spec", EGPU_ERANGE,
         "spec.devices.requests[0].exactly.allocationMode is All; allowed: ExactCount (a number "
         "of cards of class gpu.elasticgpu.io; All is refused, its size is not known at "
         "admission)"},
        {REQ("{'name': 'gpu', 'exactly': {'deviceClassName': " WHOLE ", 'count': 0}}"), "spec",
         EGPU_ERANGE, "spec.devices.requests[0].exactly.count is not a whole number 1..128"},
        {REQ("{'name': 'gpu'}"), "spec", EGPU_ESYNTAX,
         "spec.devices.requests[0] has neither exactly nor firstAvailable; allowed: one of them"},
        {REQ("{'name': 'gpu', 'firstAvailable': [{'name': 's', 'deviceClassName': " SHARE ", "
             "'capacity': {'requests': {'cores': '101'}}}]}"),
         "spec", EGPU_ERANGE,
         "spec.devices.requests[0].firstAvailable[0].capacity.requests.cores is \"101\"; "
         "allowed: a whole number 0..100 (percent of one card)"},
        {REQ("{'name': 'gpu', 'exactly': {'count': 1}}"), "spec", EGPU_ESYNTAX,
         "spec.devices.requests[0].exactly.deviceClassName is missing or not a string; allowed: "
         "a DeviceClass name, e.g. gpu-share.elasticgpu.io"},
        {"{'devices': {'requests': {}}}", "spec", EGPU_ESYNTAX,
         "spec.devices.requests is not a list"},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        json_t *spec = tu_json(rows[i].spec);
        struct egpu_api_dra_usage u;
        struct egpu_error err = {0};

        assert_int_equal(egpu_api_dra_spec_usage(spec, rows[i].field, &u, &err), rows[i].code);
        assert_string_equal(err.msg, rows[i].msg);
        assert_int_equal(u.cores, 0);
        assert_int_equal(u.devices, 0);
        json_decref(spec);
    }
}

#define RESULT(drv, cc)                                                                    \
    "{'request': 'gpu', 'driver': '" drv "', 'pool': 'n1', 'device': 'gpu-0', 'shareID': " \
    "'7e1c0a4e-1d1e-4c3a-9a38-3a4d2f6b9a10'" cc "}"

static void test_claim_held(void **state)
{
    static const struct {
        const char *claim;
        int64_t cores, mem, devices, whole;
        bool allocated, in_use;
    } rows[] = {
        /* the spec says 99, the status 30: the status counts */
        {"{'spec': " REQ(
             "{'name': 'gpu', 'exactly': {'deviceClassName': " SHARE ", "
             "'capacity': {'requests': {'cores': '99'}}}}") ", "
                                                            "'status': {'allocation': "
                                                            "{'devices': {'results': [" RESULT(
                                                                "gpu.elasticgpu.io",
                                                                ", 'consumedCapacity': "
                                                                "{'cores': '30', 'memory': "
                                                                "'4Gi'}") "]}}, "
                                                                          "'reservedFor': "
                                                                          "[{'resource': "
                                                                          "'pods', 'name': "
                                                                          "'p', 'uid': 'u'}]}}",
         30, 4096, 1, 0, true, true},
        /* two results, one another driver's; a whole card's memory is not counted */
        {"{'status': {'allocation': {'devices': {'results': [" RESULT(
             "gpu.elasticgpu.io",
             ", 'consumedCapacity': {'cores': '100', 'memory': "
             "'81920Mi'}") ", " RESULT("gpu.nvidia.com", "") ", " RESULT("gpu.elasticgpu."
                                                                         "io",
                                                                         "") "]}}}}",
         200, 0, 2, 2, true, false},
        /* not allocated: nothing, whatever the spec asks */
        {"{'spec': " REQ("{'name': 'gpu', 'exactly': {'deviceClassName': " WHOLE
                         ", 'count': 4}}") "}",
         0, 0, 0, 0, false, false},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        json_t *c = tu_json(rows[i].claim);
        struct egpu_api_dra_usage u;
        struct egpu_error err = {0};
        bool allocated = !rows[i].allocated, in_use = !rows[i].in_use;

        assert_int_equal(egpu_api_dra_claim_held(c, &u, &allocated, &in_use, &err), 0);
        assert_int_equal(u.cores, rows[i].cores);
        assert_int_equal(u.mem_mib, rows[i].mem);
        assert_int_equal(u.devices, rows[i].devices);
        assert_int_equal(u.mem_whole, rows[i].whole);
        assert_int_equal(allocated, rows[i].allocated);
        assert_int_equal(in_use, rows[i].in_use);
        json_decref(c);
    }
}

static void test_claim_held_refused(void **state)
{
    json_t *c = tu_json("{'status': {'allocation': {'devices': {'results': [" RESULT(
        "gpu.nvidia.com", "") ", " RESULT("gpu.elasticgpu.io",
                                          ", 'consumedCapacity': {'cores': '1k'}") "]}}}}");
    struct egpu_api_dra_usage u;
    struct egpu_error err = {0};

    (void)state;
    assert_int_equal(egpu_api_dra_claim_held(c, &u, NULL, NULL, &err), EGPU_ERANGE);
    assert_string_equal(err.msg, "status.allocation.devices.results[1].consumedCapacity.cores is "
                                 "\"1k\"; allowed: a whole number 0..100 (percent of one card)");
    assert_int_equal(u.cores, 0);
    json_decref(c);
}

static void test_meter_read(void **state)
{
    json_t *c = tu_json(
        "{'metadata': {'name': 'c', 'creationTimestamp': '2026-07-24T09:00:00Z', "
        "'deletionTimestamp': '2026-07-24T10:00:00Z'}, "
        "'spec': " REQ(
            "{'name': 'gpu', 'exactly': {'deviceClassName': " SHARE ", "
            "'capacity': {'requests': {'cores': '99'}}}}") ", "
                                                           "'status': {'allocation': "
                                                           "{'allocationTimestamp': "
                                                           "'2026-07-24T09:30:00Z', "
                                                           "'devices': {'results': [" RESULT(
                                                               "gpu.elasticgpu.io",
                                                               ", 'consumedCapacity': {'cores': "
                                                               "'25', 'memory': "
                                                               "'2Gi'}") "]}}}}");
    struct egpu_api_meter_pod m;
    struct egpu_error err = {0};

    (void)state;
    assert_int_equal(egpu_api_dra_meter_read(c, &m, &err), 0);
    assert_int_equal(m.core_pct, 25); /* the status, not the spec's 99 */
    assert_int_equal(m.mem_mib, 2048);
    assert_int_equal(m.end_s - m.start_s, 1800); /* allocated 09:30, deleted 10:00 */
    /* without allocationTimestamp: from its creation, running */
    json_object_del(json_object_get(json_object_get(c, "status"), "allocation"),
                    "allocationTimestamp");
    json_object_del(json_object_get(c, "metadata"), "deletionTimestamp");
    assert_int_equal(egpu_api_dra_meter_read(c, &m, &err), 0);
    assert_int_equal(m.end_s, INT64_MAX);
    assert_int_equal(m.start_s, 1784883600); /* its creation, 2026-07-24T09:00:00Z */
    /* not allocated: nothing */
    json_object_del(c, "status");
    assert_int_equal(egpu_api_dra_meter_read(c, &m, &err), 0);
    assert_int_equal(m.start_s, 0);
    assert_int_equal(m.core_pct, 0);
    json_decref(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec_usage), cmocka_unit_test(test_spec_refused),
        cmocka_unit_test(test_claim_held), cmocka_unit_test(test_claim_held_refused),
        cmocka_unit_test(test_meter_read),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
