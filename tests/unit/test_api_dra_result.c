/* tests/unit/test_api_dra_result.c - the one decoder of a ResourceClaim's
 * allocation results of this driver (src/api/dra_result.c) and the slice's
 * device names "gpu-<index>": what each kind of result decodes to, and one
 * table row per refusal with its exact message (every error path of
 * egpu_api_dra_results).
 *
 * Objects are written with ' for " (tu_json() swaps them). */
#include "testutil.h"
#include "testjson.h"

#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "egpu/api.h"

#define SHARE1         "7e1c0a4e-1d1e-4c3a-9a38-3a4d2f6b9a10"
#define SHARE2         "0d5e0f7a-0000-4000-8000-000000000001"
#define CLAIM(results) "{'status': {'allocation': {'devices': {'results': [" results "]}}}}"
/* A result of this driver with the members m (a JSON text after the
 * driver, starting with ", "). */
#define OURS(m)        "{'driver': 'gpu.elasticgpu.io'" m "}"
#define GOOD           ", 'request': 'gpu', 'pool': 'n1', 'device': 'gpu-0'"
#define RES            "status.allocation.devices.results"

static void test_device_names(void **state)
{
    static const char *const bad[] = {
        "gpu-",
        "gpu-00",
        "gpu-01",
        "gpu-+1",
        "gpu--1",
        "gpu-1a",
        "gpu- 1",
        "GPU-1",
        "gpu1",
        "cpu-1",
        "",
        "gpu-4294967296",
        "gpu-99999999999999999999",
    };
    char buf[32];
    uint32_t idx = 77;

    (void)state;
    assert_true(egpu_api_dra_device_index("gpu-0", &idx));
    assert_int_equal(idx, 0);
    assert_true(egpu_api_dra_device_index("gpu-17", &idx));
    assert_int_equal(idx, 17);
    assert_true(egpu_api_dra_device_index("gpu-4294967295", &idx));
    assert_int_equal(idx, UINT32_MAX);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        idx = 77;
        if (egpu_api_dra_device_index(bad[i], &idx))
            fail_msg("\"%s\" parsed as index %u", bad[i], idx);
        assert_int_equal(idx, 77); /* untouched */
    }
    assert_false(egpu_api_dra_device_index(NULL, &idx));

    assert_int_equal(egpu_api_dra_device_name(3, buf, sizeof(buf)), 0);
    assert_string_equal(buf, "gpu-3");
    assert_int_equal(egpu_api_dra_device_name(UINT32_MAX, buf, sizeof(buf)), 0);
    assert_string_equal(buf, "gpu-4294967295");
    /* The name and the parse agree both ways. */
    assert_true(egpu_api_dra_device_index(buf, &idx));
    assert_int_equal(idx, UINT32_MAX);
    assert_int_equal(egpu_api_dra_device_name(10, buf, 6), -ENAMETOOLONG); /* "gpu-10" + NUL */
    assert_string_equal(buf, "");
    assert_int_equal(egpu_api_dra_device_name(9, buf, 6), 0);
    assert_string_equal(buf, "gpu-9");
}

static void test_share_and_request_names(void **state)
{
    static const char *const bad_share[] = {
        "7E1C0A4E-1D1E-4C3A-9A38-3A4D2F6B9A10", /* upper case */
        "7e1c0a4e-1d1e-4c3a-9a38-3a4d2f6b9a1",  /* 35 */
        "7e1c0a4e-1d1e-4c3a-9a38-3a4d2f6b9a100",
        "7e1c0a4e1d1e-4c3a-9a38-3a4d2f6b9a10-",
        "../../../../etc/ld.so.preload/000000",
        "7e1c0a4e-1d1e-4c3a-9a38-3a4d2f6b9a1g",
        "",
    };
    static const char *const good_req[] = {
        "gpu", "a", "gpu/sub-1", "r-0/s",
        "a23456789012345678901234567890123456789012345678901234567890123"};
    static const char *const bad_req[] = {
        "",        "Gpu",
        "-gpu",    "gpu-",
        "a/",      "/b",
        "a/b/c",   "a b",
        "gpu/Sub", "a234567890123456789012345678901234567890123456789012345678901234", /* 64 */
    };

    (void)state;
    assert_true(egpu_api_dra_is_share_id(SHARE1));
    for (size_t i = 0; i < sizeof(bad_share) / sizeof(bad_share[0]); i++)
        if (egpu_api_dra_is_share_id(bad_share[i]))
            fail_msg("shareID \"%s\" accepted", bad_share[i]);
    assert_false(egpu_api_dra_is_share_id(NULL));
    for (size_t i = 0; i < sizeof(good_req) / sizeof(good_req[0]); i++)
        if (!egpu_api_dra_is_request_name(good_req[i]))
            fail_msg("request \"%s\" refused", good_req[i]);
    for (size_t i = 0; i < sizeof(bad_req) / sizeof(bad_req[0]); i++)
        if (egpu_api_dra_is_request_name(bad_req[i]))
            fail_msg("request \"%s\" accepted", bad_req[i]);
    assert_false(egpu_api_dra_is_request_name(NULL));
}

/* Each kind of result, decoded; other drivers' passed over, in order.
 * Another driver's (not ours: never read past its driver), a share, a
 * whole card, a device of no index in another pool, and one with every
 * capacity. */
#define MIXED                                                                                  \
    CLAIM("{'request': 'nic', 'driver': 'nic.example.com', 'pool': 'n1', 'device': 'eth0', "   \
          "'shareID': 'not-a-uuid', 'consumedCapacity': 7}, " OURS(                            \
              ", 'request': 'gpu', 'pool': 'n1', 'device': 'gpu-3', 'shareID': '" SHARE1 "', " \
              "'consumedCapacity': {'cores': '30', 'memory': '4Gi'}") ", " MIXED_2)
#define MIXED_2                                                                          \
    OURS(", 'request': 'gpu/whole', 'pool': 'n1', 'device': 'gpu-12', 'shareID': null, " \
         "'consumedCapacity': null")                                                     \
    ", " OURS(", 'request': 'gpu', 'pool': 'n2', "                                       \
              "'device': 'nvme-1', 'shareID': '', "                                      \
              "'consumedCapacity': {'memory': '1'}") ", " MIXED_3
#define MIXED_3                                                                           \
    OURS(", 'request': 'gpu', 'pool': 'n1', 'device': 'gpu-1', 'shareID': '" SHARE2 "', " \
         "'consumedCapacity': {'cores': '100', 'memory': '1.5Mi', 'other': 'x'}")

static void test_results(void **state)
{
    json_t *c = tu_json(MIXED);
    struct egpu_api_dra_result r[EGPU_API_DRA_RESULTS_MAX];
    struct egpu_error err = {0};
    size_t n = 99;

    (void)state;
    assert_int_equal(
        egpu_api_dra_results(c, EGPU_API_DRA_DRIVER, r, EGPU_API_DRA_RESULTS_MAX, &n, &err), 0);
    assert_int_equal(n, 4);
    /* A share: cores and memory consumed. */
    assert_int_equal(r[0].at, 1);
    assert_string_equal(r[0].request, "gpu");
    assert_string_equal(r[0].pool, "n1");
    assert_string_equal(r[0].device, "gpu-3");
    assert_true(r[0].has_index);
    assert_int_equal(r[0].index, 3);
    assert_string_equal(r[0].share_id, SHARE1);
    assert_false(r[0].whole);
    assert_true(r[0].has_cores);
    assert_int_equal(r[0].core_pct, 30);
    assert_true(r[0].has_mem);
    assert_int_equal(r[0].mem_mib, 4096);
    /* A device not shared: the whole card. */
    assert_int_equal(r[1].at, 2);
    assert_string_equal(r[1].request, "gpu/whole");
    assert_int_equal(r[1].index, 12);
    assert_string_equal(r[1].share_id, "");
    assert_true(r[1].whole);
    assert_false(r[1].has_cores);
    assert_int_equal(r[1].core_pct, 100);
    assert_false(r[1].has_mem);
    assert_int_equal(r[1].mem_mib, 0);
    /* Another name (no index) in another pool; cores not named: 100;
     * memory of 1 byte: 1 MiB (rounded up). */
    assert_int_equal(r[2].at, 3);
    assert_string_equal(r[2].pool, "n2");
    assert_false(r[2].has_index);
    assert_false(r[2].whole);
    assert_false(r[2].has_cores);
    assert_int_equal(r[2].core_pct, 100);
    assert_true(r[2].has_mem);
    assert_int_equal(r[2].mem_mib, 1);
    /* Capacities other than ours are not read; 1.5Mi is 2 MiB. */
    assert_int_equal(r[3].at, 4);
    assert_int_equal(r[3].core_pct, 100);
    assert_true(r[3].has_cores);
    assert_int_equal(r[3].mem_mib, 2);
    assert_string_equal(r[3].share_id, SHARE2);

    /* Another driver's results only: the nic's. */
    assert_int_equal(egpu_api_dra_results(c, "nic.example.com", r, 1, &n, &err), EGPU_ESYNTAX);
    assert_string_equal(err.msg, RES "[0].shareID is not a UID; allowed: absent, or 36 "
                                     "characters, 8-4-4-4-12 lowercase hex digits");
    /* NULL: this driver. max exactly the count: fits. */
    assert_int_equal(egpu_api_dra_results(c, NULL, r, 4, &n, &err), 0);
    assert_int_equal(n, 4);
    json_decref(c);
}

/* Nothing allocated (in any of the ways a claim says so): 0 results. */
static void test_not_allocated(void **state)
{
    static const char *const rows[] = {
        "{}",
        "{'status': null}",
        "{'status': {}}",
        "{'status': {'allocation': null, 'reservedFor': []}}",
        "{'status': {'allocation': {}}}",
        "{'status': {'allocation': {'devices': null}}}",
        "{'status': {'allocation': {'devices': {}}}}",
        "{'status': {'allocation': {'devices': {'results': null}}}}",
        "{'status': {'allocation': {'devices': {'results': []}}}}",
        CLAIM("{'driver': 'gpu.nvidia.com', 'pool': 'n1', 'device': 'gpu-0'}"),
        /* the spec is a tenant's: never read */
        "{'spec': {'devices': {'requests': 7}}}",
    };
    struct egpu_api_dra_result r[2];

    (void)state;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        json_t *c = tu_json(rows[i]);
        struct egpu_error err = {0};
        size_t n = 99;

        if (egpu_api_dra_results(c, EGPU_API_DRA_DRIVER, r, 2, &n, &err) != 0 || n != 0)
            fail_msg("row %zu: n %zu, \"%s\"", i, n, err.msg);
        json_decref(c);
    }
}

static void test_refused(void **state)
{
    static const struct {
        const char *claim;
        int code;
        const char *msg;
    } rows[] = {
        {"[]", EGPU_ESYNTAX, "not an object; allowed: a ResourceClaim"},
        {"{'status': []}", EGPU_ESYNTAX, "status is not an object; allowed: an object"},
        {"{'status': {'allocation': 'x'}}", EGPU_ESYNTAX,
         "status.allocation is not an object; allowed: an object"},
        {"{'status': {'allocation': {'devices': []}}}", EGPU_ESYNTAX,
         "status.allocation.devices is not an object; allowed: an object"},
        {"{'status': {'allocation': {'devices': {'results': {}}}}}", EGPU_ESYNTAX,
         RES " is not an array; allowed: an array"},
        {CLAIM("7"), EGPU_ESYNTAX,
         RES "[0] is not an object; allowed: a DeviceRequestAllocationResult"},
        {CLAIM("{'pool': 'n1', 'device': 'gpu-0'}"), EGPU_ESYNTAX,
         RES "[0].driver is missing; allowed: a string"},
        {CLAIM("{'driver': null}"), EGPU_ESYNTAX, RES "[0].driver is missing; allowed: a string"},
        {CLAIM("{'driver': 3}"), EGPU_ESYNTAX, RES "[0].driver is not a string; allowed: a string"},
        /* a NUL inside would compare as another driver's name */
        {CLAIM("{'driver': 'gpu.elasticgpu.io\\u0000x'}"), EGPU_ESYNTAX,
         RES "[0].driver is not a string; allowed: a string"},
        /* a bad result of ours after another driver's: named by its place */
        {CLAIM("{'driver': 'x'}, " OURS(", 'request': 'gpu', 'device': 'gpu-0'")), EGPU_ESYNTAX,
         RES "[1].pool is missing; allowed: a string"},
        {CLAIM(OURS(", 'pool': 5")), EGPU_ESYNTAX,
         RES "[0].pool is not a string; allowed: a string"},
        {CLAIM(OURS(", 'pool': ''")), EGPU_ESYNTAX, RES "[0].pool is empty; allowed: a name"},
        {CLAIM(OURS(", 'pool': 'n1'")), EGPU_ESYNTAX,
         RES "[0].device is missing; allowed: a string"},
        {CLAIM(OURS(", 'pool': 'n1', 'device': ''")), EGPU_ESYNTAX,
         RES "[0].device is empty; allowed: a name"},
        {CLAIM(OURS(", 'pool': 'n1', 'device': ['gpu-0']")), EGPU_ESYNTAX,
         RES "[0].device is not a string; allowed: a string"},
        {CLAIM(OURS(", 'pool': 'n1', 'device': '../gpu-0'")), EGPU_ESYNTAX,
         RES "[0].device is \"../gpu-0\"; allowed: a DNS label (a-z, 0-9, '-', at most 63), e.g. "
             "gpu-0"},
        {CLAIM(OURS(", 'pool': 'n1', 'device': "
                    "'gpu-012345678901234567890123456789012345678901234567890123456789'")),
         EGPU_ESYNTAX, RES "[0].device is 64 bytes long; allowed: at most 63 bytes"},
        {CLAIM(OURS(", 'pool': 'n1', 'device': 'gpu-0'")), EGPU_ESYNTAX,
         RES "[0].request is missing; allowed: a string"},
        {CLAIM(OURS(", 'pool': 'n1', 'device': 'gpu-0', 'request': 'a/b/c'")), EGPU_ESYNTAX,
         RES "[0].request is \"a/b/c\"; allowed: a request name (a DNS label, or two joined by "
             "'/')"},
        {CLAIM(OURS(", 'pool': 'n1', 'device': 'gpu-0', 'request': 'GPU'")), EGPU_ESYNTAX,
         RES "[0].request is \"GPU\"; allowed: a request name (a DNS label, or two joined by '/')"},
        {CLAIM(OURS(GOOD ", 'shareID': 36")), EGPU_ESYNTAX,
         RES "[0].shareID is not a string; allowed: a string"},
        {CLAIM(OURS(GOOD ", 'shareID': '../../../../etc/ld.so.preload'")), EGPU_ESYNTAX,
         RES "[0].shareID is not a UID; allowed: absent, or 36 characters, 8-4-4-4-12 lowercase "
             "hex digits"},
        {CLAIM(OURS(GOOD ", 'shareID': '7E1C0A4E-1D1E-4C3A-9A38-3A4D2F6B9A10'")), EGPU_ESYNTAX,
         RES "[0].shareID is not a UID; allowed: absent, or 36 characters, 8-4-4-4-12 lowercase "
             "hex digits"},
        {CLAIM(OURS(GOOD ", 'shareID': "
                         "'7e1c0a4e-1d1e-4c3a-9a38-3a4d2f6b9a10-7e1c0a4e-1d1e-4c3a-9a38-3a4'")),
         EGPU_ESYNTAX, RES "[0].shareID is 64 bytes long; allowed: at most 63 bytes"},
        {CLAIM(OURS(GOOD ", 'consumedCapacity': []")), EGPU_ESYNTAX,
         RES "[0].consumedCapacity is not an object; allowed: an object"},
        {CLAIM(OURS(GOOD ", 'consumedCapacity': {'cores': 30}")), EGPU_ESYNTAX,
         RES "[0].consumedCapacity.cores is not a quantity string; allowed: a whole number 0..100 "
             "(percent of one card)"},
        {CLAIM(OURS(GOOD ", 'consumedCapacity': {'cores': '150'}")), EGPU_ERANGE,
         RES "[0].consumedCapacity.cores is \"150\"; allowed: a whole number 0..100 (percent of "
             "one card)"},
        {CLAIM(OURS(GOOD ", 'consumedCapacity': {'cores': '-1'}")), EGPU_ERANGE,
         RES "[0].consumedCapacity.cores is \"-1\"; allowed: a whole number 0..100 (percent of "
             "one card)"},
        {CLAIM(OURS(GOOD ", 'consumedCapacity': {'cores': '250m'}")), EGPU_ERANGE,
         RES "[0].consumedCapacity.cores is \"250m\"; allowed: a whole number 0..100 (percent of "
             "one card)"},
        {CLAIM(OURS(GOOD ", 'consumedCapacity': {'cores': 'x'}")), EGPU_ERANGE,
         RES "[0].consumedCapacity.cores is \"x\"; allowed: a whole number 0..100 (percent of "
             "one card)"},
        {CLAIM(OURS(GOOD ", 'consumedCapacity': {'memory': 4096}")), EGPU_ESYNTAX,
         RES "[0].consumedCapacity.memory is not a quantity string; allowed: a quantity of bytes "
             "0..4294967295Mi"},
        {CLAIM(OURS(GOOD ", 'consumedCapacity': {'memory': 'lots'}")), EGPU_ERANGE,
         RES "[0].consumedCapacity.memory is \"lots\"; allowed: a quantity of bytes "
             "0..4294967295Mi"},
        {CLAIM(OURS(GOOD ", 'consumedCapacity': {'memory': '-1Mi'}")), EGPU_ERANGE,
         RES "[0].consumedCapacity.memory is \"-1Mi\"; allowed: a quantity of bytes "
             "0..4294967295Mi"},
        {CLAIM(OURS(GOOD ", 'consumedCapacity': {'cores': '30', 'memory': '4Pi'}")), EGPU_ERANGE,
         RES "[0].consumedCapacity.memory is \"4Pi\"; allowed: a quantity of bytes "
             "0..4294967295Mi"},
        /* a bad result after a good one of ours: refused all the same */
        {CLAIM(OURS(GOOD) ", " OURS(GOOD ", 'consumedCapacity': {'cores': '1k'}")), EGPU_ERANGE,
         RES "[1].consumedCapacity.cores is \"1k\"; allowed: a whole number 0..100 (percent of "
             "one card)"},
        /* more of ours than the caller has room for (max 2 below) */
        {CLAIM(OURS(GOOD) ", {'driver': 'x'}, " OURS(GOOD) ", " OURS(GOOD)), EGPU_ERANGE,
         RES "[3] is result 3 of driver gpu.elasticgpu.io; allowed: at most 2"},
    };
    struct egpu_api_dra_result r[2];

    (void)state;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        json_t *c = tu_json(rows[i].claim);
        struct egpu_error err = {0};
        size_t n = 0;
        int rc = egpu_api_dra_results(c, EGPU_API_DRA_DRIVER, r, 2, &n, &err);

        if (rc != rows[i].code || strcmp(err.msg, rows[i].msg) != 0)
            fail_msg("row %zu: rc %d, \"%s\"", i, rc, err.msg);
        json_decref(c);
    }
}

/* Lengths at the limits: a pool of 253 bytes is a name, 254 is not; more
 * than EGPU_API_DRA_RESULTS_MAX results (of any driver) are refused. */
static void test_limits(void **state)
{
    struct egpu_api_dra_result r[EGPU_API_DRA_RESULTS_MAX];
    char pool[300], text[EGPU_API_DRA_RESULTS_MAX * 64 + 1024];
    struct egpu_error err = {0};
    size_t n, used;
    json_t *c;

    (void)state;
    memset(pool, 'p', 253);
    pool[253] = '\0';
    snprintf(text, sizeof(text), CLAIM(OURS(", 'request': 'gpu', 'device': 'gpu-0', 'pool': '%s'")),
             pool);
    c = tu_json(text);
    assert_int_equal(egpu_api_dra_results(c, NULL, r, 1, &n, &err), 0);
    assert_int_equal(n, 1);
    assert_string_equal(r[0].pool, pool);
    json_decref(c);
    memcpy(pool + 253, "p", 2);
    snprintf(text, sizeof(text), CLAIM(OURS(", 'request': 'gpu', 'device': 'gpu-0', 'pool': '%s'")),
             pool);
    c = tu_json(text);
    assert_int_equal(egpu_api_dra_results(c, NULL, r, 1, &n, &err), EGPU_ESYNTAX);
    assert_string_equal(err.msg, RES "[0].pool is 254 bytes long; allowed: at most 253 bytes");
    json_decref(c);

    for (int count = EGPU_API_DRA_RESULTS_MAX; count <= EGPU_API_DRA_RESULTS_MAX + 1; count++) {
        used = (size_t)snprintf(text, sizeof(text),
                                "{'status': {'allocation': {'devices': {'results': [");
        for (int i = 0; i < count; i++)
            used += (size_t)snprintf(text + used, sizeof(text) - used, "%s%s", i ? ", " : "",
                                     i % 2 ? "{'driver': 'x'}" : OURS(GOOD));
        snprintf(text + used, sizeof(text) - used, "]}}}}");
        c = tu_json(text);
        if (count == EGPU_API_DRA_RESULTS_MAX) {
            assert_int_equal(egpu_api_dra_results(c, NULL, r, EGPU_API_DRA_RESULTS_MAX, &n, &err),
                             0);
            assert_int_equal(n, EGPU_API_DRA_RESULTS_MAX / 2);
            assert_int_equal(r[n - 1].at, EGPU_API_DRA_RESULTS_MAX - 2);
        } else {
            assert_int_equal(egpu_api_dra_results(c, NULL, r, EGPU_API_DRA_RESULTS_MAX, &n, &err),
                             EGPU_ERANGE);
            assert_string_equal(err.msg, RES " has 33 entries; allowed: at most 32");
        }
        json_decref(c);
    }
}

/* The wire notes' allocated claim, as kube-scheduler writes it. */
static void test_shared_fixture(void **state)
{
    json_t *c = json_load_file(
        EGPU_SOURCE_DIR "/../shared/k8s-wire/dra/resourceclaim_allocated.json", 0, NULL);
    struct egpu_api_dra_result r[EGPU_API_DRA_RESULTS_MAX];
    struct egpu_error err = {0};
    size_t n = 0;

    (void)state;
    if (c == NULL)
        tu_skip("../shared/k8s-wire/dra is not beside this checkout");
    assert_int_equal(egpu_api_dra_results(c, NULL, r, EGPU_API_DRA_RESULTS_MAX, &n, &err), 0);
    assert_int_equal(n, 1);
    assert_true(r[0].has_index);
    assert_true(egpu_api_dra_is_share_id(r[0].share_id));
    assert_false(r[0].whole);
    assert_int_equal(r[0].core_pct, 30);
    assert_int_equal(r[0].mem_mib, 4096);
    json_decref(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_device_names),   cmocka_unit_test(test_share_and_request_names),
        cmocka_unit_test(test_results),        cmocka_unit_test(test_not_allocated),
        cmocka_unit_test(test_refused),        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_shared_fixture),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
