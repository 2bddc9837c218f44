/* tests/unit/test_api_gpu.c - the GPU object decoder (src/api/gpu.c): a
 * full object read field by field, a bare one, and one table row per rule
 * with its exact message; nothing leaks on success or failure. Objects are
 * written with ' for " (tu_json() swaps them). */
#include "testutil.h"
#include "testjson.h"

#include <errno.h>
#include <jansson.h>
#include <stdint.h>

#include "egpu/api.h"

#define HEAD  "{'apiVersion': 'elasticgpu.io/v1alpha1', 'kind': 'GPU', 'metadata': {'name': 'g'}, "
/* 64 and 65 bytes: status.health at the CRD's maxLength and one past it. */
#define H64   "0123456789012345678901234567890123456789012345678901234567890123"
#define H65   H64 "4"
#define SPEC  "'spec': {'nodeName': 'n1', 'index': 3, 'uuid': 'GPU-1', 'memory': 40960}"
/* A spec whose topology list the caller finishes: entries, then "]}}". */
#define TSPEC "'spec': {'nodeName': 'n1', 'index': 0, 'uuid': 'GPU-1', 'topology': ["

static void test_gpu_full(void **state)
{
    json_t *o =
        tu_json(HEAD "'spec': {'nodeName': 'n1', 'index': 3, 'uuid': 'GPU-1', 'model': "
                     "'NVIDIA A100', 'memory': 40960}, 'status': {'health': 'Healthy', "
                     "'capacity': {'core': 100, 'memory': 40000}, 'allocated': [{'namespace': "
                     "'ns', 'pod': 'p', 'podUID': 'u', 'container': 'c', 'core': 30, "
                     "'memory': 4096, 'claim': 'cl'}, {'namespace': 'ns2', 'pod': 'q', "
                     "'container': 'd'}], 'used': {'memory': 5000, 'utilization': 41, "
                     "'updateTime': '2026-07-24T09:31:03Z'}}}");
    struct egpu_api_gpu g;
    struct egpu_error err = {0};
    long live = egpu_alloc_live();

    (void)state;
    assert_int_equal(egpu_api_gpu_decode(o, &g, &err), 0);
    assert_string_equal(g.meta.name, "g");
    assert_string_equal(g.node_name, "n1");
    assert_int_equal(g.index, 3);
    assert_string_equal(g.uuid, "GPU-1");
    assert_string_equal(g.model, "NVIDIA A100");
    assert_int_equal(g.mem_mib, 40960);
    assert_string_equal(g.health, "Healthy");
    assert_true(g.has_cap_core && g.has_cap_mem);
    assert_int_equal(g.cap_core_pct, 100);
    assert_int_equal(g.cap_mem_mib, 40000);
    assert_int_equal(g.nallocated, 2);
    assert_string_equal(g.allocated[0].ns, "ns");
    assert_string_equal(g.allocated[0].pod, "p");
    assert_string_equal(g.allocated[0].container, "c");
    assert_int_equal(g.allocated[0].core_pct, 30);
    assert_int_equal(g.allocated[0].mem_mib, 4096);
    assert_string_equal(g.allocated[0].claim, "cl");
    assert_string_equal(g.allocated[1].ns, "ns2");
    assert_int_equal(g.allocated[1].core_pct, 0);
    assert_string_equal(g.allocated[1].claim, "");
    assert_true(g.has_used_mem && g.has_used_util);
    assert_int_equal(g.used_mem_mib, 5000);
    assert_int_equal(g.used_util_pct, 41);
    assert_string_equal(g.used_time, "2026-07-24T09:31:03Z");
    egpu_api_gpu_clear(&g);
    assert_int_equal(egpu_alloc_live(), live);
    assert_int_equal(g.nallocated, 0);
    assert_null(g.allocated);
    json_decref(o);
}

static void test_gpu_bare(void **state)
{
    json_t *o = tu_json(HEAD SPEC "}");
    struct egpu_api_gpu g;
    struct egpu_error err = {0};

    (void)state;
    assert_int_equal(egpu_api_gpu_decode(o, &g, &err), 0);
    json_decref(o);
    o = tu_json(HEAD SPEC ", 'status': {'health': '" H64 "'}}");
    egpu_api_gpu_clear(&g);
    assert_int_equal(egpu_api_gpu_decode(o, &g, &err), 0);
    assert_string_equal(g.health, H64);
    json_decref(o);
    o = tu_json(HEAD SPEC "}");
    egpu_api_gpu_clear(&g);
    assert_int_equal(egpu_api_gpu_decode(o, &g, &err), 0);
    assert_string_equal(g.model, "");
    assert_string_equal(g.health, "");
    assert_false(g.has_cap_core || g.has_cap_mem || g.has_used_mem || g.has_used_util);
    assert_int_equal(g.nallocated, 0);
    assert_null(g.allocated);
    egpu_api_gpu_clear(&g);
    json_decref(o);
}

/* spec.topology up to its bound, every link name, and one past the bound. */
static void test_gpu_topology(void **state)
{
    static const char *const names[] = {
        "NVLink",     "Internal", "SingleSwitch", "MultipleSwitches",
        "HostBridge", "NUMANode", "System"};
    struct egpu_api_gpu g;
    struct egpu_error err = {0};
    char buf[8192];
    size_t used;
    json_t *o;

    (void)state;
    used = (size_t)snprintf(buf, sizeof(buf), "%s", HEAD TSPEC);
    for (int i = 0; i < 7; i++)
        used += (size_t)snprintf(buf + used, sizeof(buf) - used, "%s{'index': %d, 'link': '%s'}",
                                 i ? ", " : "", 10 + i, names[i]);
    snprintf(buf + used, sizeof(buf) - used, "]}}");
    o = tu_json(buf);
    assert_int_equal(egpu_api_gpu_decode(o, &g, &err), 0);
    assert_int_equal(g.npeers, 7);
    for (int i = 0; i < 7; i++) {
        assert_int_equal(g.peers[i].index, 10 + i);
        assert_int_equal(g.peers[i].link, EGPU_TOPO_NVLINK - i);
        assert_string_equal(egpu_api_topo_name(g.peers[i].link), names[i]);
    }
    assert_string_equal(egpu_api_topo_name(EGPU_TOPO_UNKNOWN), "unknown");
    assert_string_equal(egpu_api_topo_name(EGPU_TOPO_LEVELS), "unknown");
    egpu_api_gpu_clear(&g);
    json_decref(o);

    for (int n = 63; n <= 64; n++) {
        used = (size_t)snprintf(buf, sizeof(buf), "%s", HEAD TSPEC);
        for (int i = 0; i < n; i++)
            used += (size_t)snprintf(buf + used, sizeof(buf) - used,
                                     "%s{'index': %d, 'link': 'System'}", i ? ", " : "", i + 1);
        snprintf(buf + used, sizeof(buf) - used, "]}}");
        o = tu_json(buf);
        if (n == 63) {
            assert_int_equal(egpu_api_gpu_decode(o, &g, &err), 0);
            assert_int_equal(g.npeers, 63);
            egpu_api_gpu_clear(&g);
        } else {
            assert_int_equal(egpu_api_gpu_decode(o, &g, &err), EGPU_ERANGE);
            assert_string_equal(err.msg, "spec.topology has 64 entries; allowed: at most 63");
        }
        json_decref(o);
    }
}

static void test_gpu_rules(void **state)
{
    static const struct {
        const char *obj;
        int code;
        const char *msg;
    } rows[] = {
        {"[]", EGPU_ESYNTAX, "a GPU must be a JSON object"},
        {"{'apiVersion': 'elasticgpu.io/v1alpha1', 'kind': 'Pod', 'metadata': {'name': 'g'}, " SPEC
         "}",
         EGPU_ERANGE, "kind is \"Pod\"; allowed: GPU"},
        {HEAD "'spec': {'index': 0, 'uuid': 'GPU-1'}}", EGPU_ESYNTAX, "spec.nodeName is missing"},
        {HEAD "'spec': {'nodeName': 'n1', 'index': 1024, 'uuid': 'GPU-1'}}", EGPU_ERANGE,
         "spec.index is 1024; allowed: a whole number 0..1023"},
        {HEAD "'spec': {'nodeName': 'n1', 'index': 0}}", EGPU_ESYNTAX, "spec.uuid is missing"},
        {HEAD "'spec': {'nodeName': 'n1', 'index': 0, 'uuid': 'GPU-1', 'memory': -1}}", EGPU_ERANGE,
         "spec.memory is -1; allowed: a whole number 0..4294967295"},
        {HEAD SPEC ", 'status': {'health': 5}}", EGPU_ESYNTAX, "status.health is 5; allowed: text"},
        {HEAD SPEC ", 'status': {'capacity': {'core': 'all'}}}", EGPU_ESYNTAX,
         "status.capacity.core is \"all\"; allowed: a whole number from 0"},
        {HEAD SPEC ", 'status': {'capacity': {'memory': -1}}}", EGPU_ERANGE,
         "status.capacity.memory is -1; allowed: a whole number from 0"},
        {HEAD SPEC ", 'status': {'health': '" H65 "'}}", EGPU_ESYNTAX,
         "status.health is 65 bytes long; allowed: at most 64"},
        {HEAD SPEC ", 'status': {'allocated': {}}}", EGPU_ESYNTAX,
         "status.allocated must be a list"},
        {HEAD SPEC ", 'status': {'allocated': [7]}}", EGPU_ESYNTAX,
         "status.allocated[0] must be an object"},
        {HEAD SPEC ", 'status': {'allocated': [{'namespace': 'a', 'pod': 'p', 'container': 'c'}, "
                   "{'namespace': 'a', 'container': 'c'}]}}",
         EGPU_ESYNTAX, "status.allocated[1].pod is missing"},
        {HEAD SPEC ", 'status': {'allocated': [{'namespace': 'a', 'pod': 'p', 'container': 'c', "
                   "'core': 150}]}}",
         EGPU_ERANGE, "status.allocated[0].core is 150; allowed: a whole number 0..100"},
        {HEAD SPEC ", 'status': {'allocated': [{'namespace': 'a', 'pod': 'p', 'container': 'c', "
                   "'memory': -1}]}}",
         EGPU_ERANGE, "status.allocated[0].memory is -1; allowed: a whole number from 0"},
        {HEAD SPEC ", 'status': {'used': {'memory': -3}}}", EGPU_ERANGE,
         "status.used.memory is -3; allowed: a whole number from 0"},
        {HEAD SPEC ", 'status': {'used': {'updateTime': 'yesterday'}}}", EGPU_ESYNTAX,
         "status.used.updateTime is \"yesterday\"; allowed: RFC 3339, e.g. "
         "2026-07-24T09:31:03Z"},
        {HEAD SPEC ", 'status': {'used': {'utilization': 101}}}", EGPU_ERANGE,
         "status.used.utilization is 101; allowed: a whole number 0..100"},
        {HEAD TSPEC "{'index': 1}]}}", EGPU_ESYNTAX, "spec.topology[0].link is missing"},
        {HEAD TSPEC "{'index': 1, 'link': 'NV'}]}}", EGPU_ERANGE,
         "spec.topology[0].link is \"NV\"; allowed: NVLink, Internal, SingleSwitch, "
         "MultipleSwitches, HostBridge, NUMANode, System"},
        {HEAD TSPEC "{'index': 1, 'link': 'System'}, {'index': 1024, 'link': 'System'}]}}",
         EGPU_ERANGE, "spec.topology[1].index is 1024; allowed: a whole number 0..1023"},
        {HEAD TSPEC "{'link': 'System'}]}}", EGPU_ESYNTAX, "spec.topology[0].index is missing"},
        {HEAD TSPEC "{'index': 2, 'link': 'System'}, {'index': 2, 'link': 'NVLink'}]}}",
         EGPU_ERANGE, "spec.topology[1].index 2 is given twice; allowed: one entry per peer card"},
        {HEAD TSPEC "'NVLink']}}", EGPU_ESYNTAX, "spec.topology[0] must be an object"},
        {HEAD "'spec': {'nodeName': 'n1', 'index': 0, 'uuid': 'GPU-1', 'topology': {}}}",
         EGPU_ESYNTAX, "spec.topology must be a list"},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        json_t *o = tu_json(rows[i].obj);
        struct egpu_api_gpu g;
        struct egpu_error err = {0};
        long live = egpu_alloc_live();
        int rc;

        memset(&g, 0x5a, sizeof(g));
        rc = egpu_api_gpu_decode(o, &g, &err);
        if (rc != rows[i].code || strcmp(err.msg, rows[i].msg) != 0)
            fail_msg("row %zu: got %d \"%s\", want %d \"%s\"", i, rc, err.msg, rows[i].code,
                     rows[i].msg);
        assert_int_equal(egpu_alloc_live(), live);
        assert_int_equal(g.index, 0x5a5a5a5a5a5a5a5aLL);
        json_decref(o);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpu_full),
        cmocka_unit_test(test_gpu_bare),
        cmocka_unit_test(test_gpu_rules),
        cmocka_unit_test(test_gpu_topology),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
