/* tests/unit/test_proto.c - the project's own kubelet .proto files (proto/), compiled
 * with protoc-c, against the kubelet's bytes.
 *
 * Every .bin under fixtures/deviceplugin and fixtures/podresources of shared/k8s-wire
 * (made by protoc --encode from the kubelet's upstream .proto files) is decoded with
 * the generated code and its fields are compared with the matching .txtpb, written
 * out here by hand. Each message is then packed again and must give the same bytes:
 * protoc and protobuf-c both write fields in field-number order, repeated scalars
 * packed (proto3), map entries in the order they came, and proto3 defaults not at
 * all, so the encoding is canonical for these messages. A RegisterRequest built
 * from scratch must give the fixture's bytes and, behind a gRPC frame header, the
 * captured frame. Truncated input must be refused or decoded, never read past.
 *
 * Fixtures are read in place from shared/k8s-wire beside the checkout; every test
 * that needs them is skipped when that folder is absent.
 */
#include <stdlib.h>

#include "testutil.h"
#include "pb_fixture.h"
#include "deviceplugin/v1beta1/api.pb-c.h"
#include "podresources/v1/api.pb-c.h"

#define WIRE EGPU_SOURCE_DIR "/../shared/k8s-wire/fixtures/" /* read in place, never copied */
#define DP   WIRE "deviceplugin/"
#define PR   WIRE "podresources/"

#define UUID0 "GPU-fef8089b-4820-abfc-e83e-94318197576e"
#define UUID1 "GPU-5b4c2e1a-9d3f-4a7b-8c6e-1f2a3b4c5d6e"

/* Reads a whole fixture (tu_fixture_load: skipped, or failed under CI=true,
 * when it is not there). */
static struct tu_fixture load(const char *path)
{
    return tu_fixture_load(path, "shared/k8s-wire is not beside this checkout");
}

/* A TopologyInfo of exactly one NUMA node, id numa. */
static void assert_one_numa(size_t n_nodes, V1beta1__NUMANode **nodes, int64_t numa)
{
    assert_int_equal(n_nodes, 1);
    assert_int_equal(nodes[0]->id, numa);
}

static void assert_one_numa_v1(const V1__TopologyInfo *t, int64_t numa)
{
    assert_non_null(t);
    assert_int_equal(t->n_nodes, 1);
    assert_int_equal(t->nodes[0]->id, numa);
}

/* ------------------------------------------------------------------------ */
/* Device plugin v1beta1                                                    */

static void test_register_request(void **state)
{
    struct tu_fixture fx = load(DP "RegisterRequest.bin");
    V1beta1__RegisterRequest *m =
        (V1beta1__RegisterRequest *)tu_pb_decode(&v1beta1__register_request__descriptor, &fx);

    (void)state;
    assert_string_equal(m->version, "v1beta1");
    assert_string_equal(m->endpoint, "example-vgpu.sock");
    assert_string_equal(m->resource_name, "example.com/vgpu");
    assert_non_null(m->options);
    assert_false(m->options->pre_start_required);
    assert_true(m->options->get_preferred_allocation_available);
    tu_pb_assert_packs_to(&m->base, &fx);
    v1beta1__register_request__free_unpacked(m, NULL);
    free(fx.data);
}

/* What the agent will send: built field by field, it must be the kubelet's bytes,
 * and with the 5-byte gRPC header (flag 0, big-endian length) the captured frame. */
static void test_register_request_built(void **state)
{
    struct tu_fixture fx = load(DP "RegisterRequest.bin");
    struct tu_fixture frame = load(DP "RegisterRequest.grpc-frame.bin");
    V1beta1__DevicePluginOptions opts = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
    V1beta1__RegisterRequest req = V1BETA1__REGISTER_REQUEST__INIT;
    uint8_t out[256];
    size_t n;

    (void)state;
    opts.get_preferred_allocation_available = 1;
    req.version = "v1beta1";
    req.endpoint = "example-vgpu.sock";
    req.resource_name = "example.com/vgpu";
    req.options = &opts;
    n = v1beta1__register_request__get_packed_size(&req);
    assert_true(n + 5 <= sizeof(out));
    assert_int_equal(v1beta1__register_request__pack(&req, out + 5), n);
    assert_int_equal(n, fx.len);
    assert_memory_equal(out + 5, fx.data, n);
    out[0] = 0;
    out[1] = (uint8_t)(n >> 24);
    out[2] = (uint8_t)(n >> 16);
    out[3] = (uint8_t)(n >> 8);
    out[4] = (uint8_t)n;
    assert_int_equal(frame.len, n + 5);
    assert_memory_equal(out, frame.data, n + 5);
    free(frame.data);
    free(fx.data);
}

static void test_device_plugin_options(void **state)
{
    struct tu_fixture fx = load(DP "DevicePluginOptions.bin");
    V1beta1__DevicePluginOptions *m = (V1beta1__DevicePluginOptions *)tu_pb_decode(
        &v1beta1__device_plugin_options__descriptor, &fx);

    (void)state;
    assert_false(m->pre_start_required);
    assert_true(m->get_preferred_allocation_available);
    tu_pb_assert_packs_to(&m->base, &fx);
    v1beta1__device_plugin_options__free_unpacked(m, NULL);
    free(fx.data);
}

/* Empty is zero bytes, and so is the empty PreStartContainerResponse. */
static void test_empty(void **state)
{
    struct tu_fixture fx = load(DP "Empty.bin");
    V1beta1__Empty *m = (V1beta1__Empty *)tu_pb_decode(&v1beta1__empty__descriptor, &fx);
    V1beta1__PreStartContainerResponse psr = V1BETA1__PRE_START_CONTAINER_RESPONSE__INIT;

    (void)state;
    assert_int_equal(fx.len, 0);
    tu_pb_assert_packs_to(&m->base, &fx);
    assert_int_equal(v1beta1__pre_start_container_response__get_packed_size(&psr), 0);
    v1beta1__empty__free_unpacked(m, NULL);
    free(fx.data);
}

static void test_list_and_watch_response(void **state)
{
    static const char *const ids[] = {UUID0 "-0", UUID0 "-1", UUID0 "-2",
                                      UUID0 "-3", UUID1 "-0", UUID1 "-1"};
    struct tu_fixture fx = load(DP "ListAndWatchResponse.bin");
    V1beta1__ListAndWatchResponse *m = (V1beta1__ListAndWatchResponse *)tu_pb_decode(
        &v1beta1__list_and_watch_response__descriptor, &fx);

    (void)state;
    assert_int_equal(m->n_devices, 6);
    for (size_t i = 0; i < m->n_devices; i++) {
        const V1beta1__Device *d = m->devices[i];

        assert_string_equal(d->id, ids[i]);
        assert_string_equal(d->health, i < 4 ? "Healthy" : "Unhealthy");
        assert_non_null(d->topology);
        /* NUMA node 0 is an empty sub-message on the wire: the id reads as 0. */
        assert_one_numa(d->topology->n_nodes, d->topology->nodes, i < 4 ? 0 : 1);
    }
    tu_pb_assert_packs_to(&m->base, &fx);
    v1beta1__list_and_watch_response__free_unpacked(m, NULL);
    free(fx.data);
}

static void test_preferred_allocation_request(void **state)
{
    struct tu_fixture fx = load(DP "PreferredAllocationRequest.bin");
    V1beta1__PreferredAllocationRequest *m = (V1beta1__PreferredAllocationRequest *)tu_pb_decode(
        &v1beta1__preferred_allocation_request__descriptor, &fx);
    const V1beta1__ContainerPreferredAllocationRequest *c;

    (void)state;
    assert_int_equal(m->n_container_requests, 1);
    c = m->container_requests[0];
    assert_int_equal(c->n_available_deviceids, 4);
    assert_string_equal(c->available_deviceids[0], UUID0 "-0");
    assert_string_equal(c->available_deviceids[1], UUID0 "-1");
    assert_string_equal(c->available_deviceids[2], UUID0 "-2");
    assert_string_equal(c->available_deviceids[3], UUID0 "-3");
    assert_int_equal(c->n_must_include_deviceids, 0);
    assert_int_equal(c->allocation_size, 2);
    tu_pb_assert_packs_to(&m->base, &fx);
    v1beta1__preferred_allocation_request__free_unpacked(m, NULL);
    free(fx.data);
}

static void test_preferred_allocation_response(void **state)
{
    struct tu_fixture fx = load(DP "PreferredAllocationResponse.bin");
    V1beta1__PreferredAllocationResponse *m = (V1beta1__PreferredAllocationResponse *)tu_pb_decode(
        &v1beta1__preferred_allocation_response__descriptor, &fx);
    const V1beta1__ContainerPreferredAllocationResponse *c;

    (void)state;
    assert_int_equal(m->n_container_responses, 1);
    c = m->container_responses[0];
    assert_int_equal(c->n_deviceids, 2);
    assert_string_equal(c->deviceids[0], UUID0 "-0");
    assert_string_equal(c->deviceids[1], UUID0 "-1");
    tu_pb_assert_packs_to(&m->base, &fx);
    v1beta1__preferred_allocation_response__free_unpacked(m, NULL);
    free(fx.data);
}

static void test_allocate_request(void **state)
{
    struct tu_fixture fx = load(DP "AllocateRequest.bin");
    V1beta1__AllocateRequest *m =
        (V1beta1__AllocateRequest *)tu_pb_decode(&v1beta1__allocate_request__descriptor, &fx);
    const V1beta1__ContainerAllocateRequest *c;

    (void)state;
    assert_int_equal(m->n_container_requests, 1);
    c = m->container_requests[0];
    assert_int_equal(c->n_devices_ids, 2);
    assert_string_equal(c->devices_ids[0], UUID0 "-0");
    assert_string_equal(c->devices_ids[1], UUID0 "-1");
    tu_pb_assert_packs_to(&m->base, &fx);
    v1beta1__allocate_request__free_unpacked(m, NULL);
    free(fx.data);
}

/* The fields of the one ContainerAllocateResponse both fixtures carry. */
static void assert_container_allocate_response(const V1beta1__ContainerAllocateResponse *c)
{
    assert_int_equal(c->n_envs, 3);
    assert_string_equal(c->envs[0]->key, "NVIDIA_VISIBLE_DEVICES");
    assert_string_equal(c->envs[0]->value, UUID0);
    assert_string_equal(c->envs[1]->key, "EXAMPLE_VGPU_MEMORY_LIMIT_MIB");
    assert_string_equal(c->envs[1]->value, "8192");
    assert_string_equal(c->envs[2]->key, "EXAMPLE_VGPU_CORE_PERCENT");
    assert_string_equal(c->envs[2]->value, "50");

    assert_int_equal(c->n_mounts, 2);
    assert_string_equal(c->mounts[0]->container_path, "/usr/local/vgpu/libvgpu.so");
    assert_string_equal(c->mounts[0]->host_path, "/usr/local/vgpu/libvgpu.so");
    assert_true(c->mounts[0]->read_only);
    assert_string_equal(c->mounts[1]->container_path, "/etc/ld.so.preload");
    assert_string_equal(c->mounts[1]->host_path, "/usr/local/vgpu/ld.so.preload");
    assert_true(c->mounts[1]->read_only);

    assert_int_equal(c->n_devices, 3);
    assert_string_equal(c->devices[0]->container_path, "/dev/nvidia0");
    assert_string_equal(c->devices[0]->host_path, "/dev/nvidia0");
    assert_string_equal(c->devices[0]->permissions, "rw");
    assert_string_equal(c->devices[1]->container_path, "/dev/nvidiactl");
    assert_string_equal(c->devices[1]->host_path, "/dev/nvidiactl");
    assert_string_equal(c->devices[1]->permissions, "rw");
    assert_string_equal(c->devices[2]->container_path, "/dev/nvidia-uvm");
    assert_string_equal(c->devices[2]->host_path, "/dev/nvidia-uvm");
    assert_string_equal(c->devices[2]->permissions, "rw");

    assert_int_equal(c->n_annotations, 1);
    assert_string_equal(c->annotations[0]->key, "example.com/vgpu-ids");
    assert_string_equal(c->annotations[0]->value, UUID0 "-0," UUID0 "-1");

    assert_int_equal(c->n_cdi_devices, 1);
    assert_string_equal(c->cdi_devices[0]->name, "nvidia.com/gpu=" UUID0);
}

static void test_allocate_response(void **state)
{
    struct tu_fixture fx = load(DP "AllocateResponse.bin");
    V1beta1__AllocateResponse *m =
        (V1beta1__AllocateResponse *)tu_pb_decode(&v1beta1__allocate_response__descriptor, &fx);

    (void)state;
    assert_int_equal(m->n_container_responses, 1);
    assert_container_allocate_response(m->container_responses[0]);
    tu_pb_assert_packs_to(&m->base, &fx);
    v1beta1__allocate_response__free_unpacked(m, NULL);
    free(fx.data);
}

/* The form the kubelet checkpoints (base64 AllocResp): the bare inner message. */
static void test_container_allocate_response(void **state)
{
    struct tu_fixture fx = load(DP "ContainerAllocateResponse.bin");
    V1beta1__ContainerAllocateResponse *m = (V1beta1__ContainerAllocateResponse *)tu_pb_decode(
        &v1beta1__container_allocate_response__descriptor, &fx);

    (void)state;
    assert_container_allocate_response(m);
    tu_pb_assert_packs_to(&m->base, &fx);
    v1beta1__container_allocate_response__free_unpacked(m, NULL);
    free(fx.data);
}

static void test_pre_start_container_request(void **state)
{
    struct tu_fixture fx = load(DP "PreStartContainerRequest.bin");
    V1beta1__PreStartContainerRequest *m = (V1beta1__PreStartContainerRequest *)tu_pb_decode(
        &v1beta1__pre_start_container_request__descriptor, &fx);

    (void)state;
    assert_int_equal(m->n_devices_ids, 2);
    assert_string_equal(m->devices_ids[0], UUID0 "-0");
    assert_string_equal(m->devices_ids[1], UUID0 "-1");
    tu_pb_assert_packs_to(&m->base, &fx);
    v1beta1__pre_start_container_request__free_unpacked(m, NULL);
    free(fx.data);
}

/* ------------------------------------------------------------------------ */
/* PodResources v1                                                          */

static void test_list_pod_resources_request(void **state)
{
    struct tu_fixture fx = load(PR "ListPodResourcesRequest.bin");
    V1__ListPodResourcesRequest *m = (V1__ListPodResourcesRequest *)tu_pb_decode(
        &v1__list_pod_resources_request__descriptor, &fx);

    (void)state;
    assert_int_equal(fx.len, 0);
    tu_pb_assert_packs_to(&m->base, &fx);
    v1__list_pod_resources_request__free_unpacked(m, NULL);
    free(fx.data);
}

static void test_list_pod_resources_response(void **state)
{
    struct tu_fixture fx = load(PR "ListPodResourcesResponse.bin");
    V1__ListPodResourcesResponse *m = (V1__ListPodResourcesResponse *)tu_pb_decode(
        &v1__list_pod_resources_response__descriptor, &fx);
    const V1__PodResources *p;
    const V1__ContainerResources *c;

    (void)state;
    assert_int_equal(m->n_pod_resources, 2);

    p = m->pod_resources[0];
    assert_string_equal(p->name, "train-job-0");
    assert_string_equal(p->namespace_, "ml-team");
    assert_int_equal(p->n_cpu_ids, 0);
    assert_int_equal(p->n_memory, 0);
    assert_int_equal(p->n_containers, 2);
    c = p->containers[0];
    assert_string_equal(c->name, "trainer");
    assert_int_equal(c->n_devices, 1);
    assert_string_equal(c->devices[0]->resource_name, "example.com/vgpu");
    assert_int_equal(c->devices[0]->n_device_ids, 2);
    assert_string_equal(c->devices[0]->device_ids[0], UUID0 "-0");
    assert_string_equal(c->devices[0]->device_ids[1], UUID0 "-1");
    assert_one_numa_v1(c->devices[0]->topology, 0);
    assert_int_equal(c->n_cpu_ids, 0);
    c = p->containers[1]; /* a container with no devices is still listed */
    assert_string_equal(c->name, "sidecar");
    assert_int_equal(c->n_devices, 0);
    assert_int_equal(c->n_cpu_ids, 0);
    assert_int_equal(c->n_memory, 0);
    assert_int_equal(c->n_dynamic_resources, 0);

    p = m->pod_resources[1];
    assert_string_equal(p->name, "infer-7d9c5b8f6-x2x7q");
    assert_string_equal(p->namespace_, "serving");
    assert_int_equal(p->n_containers, 1);
    c = p->containers[0];
    assert_string_equal(c->name, "server");
    assert_int_equal(c->n_devices, 1);
    assert_string_equal(c->devices[0]->resource_name, "example.com/vgpu");
    assert_int_equal(c->devices[0]->n_device_ids, 1);
    assert_string_equal(c->devices[0]->device_ids[0], UUID0 "-2");
    assert_one_numa_v1(c->devices[0]->topology, 0);
    assert_int_equal(c->n_cpu_ids, 2); /* packed repeated int64 */
    assert_int_equal(c->cpu_ids[0], 4);
    assert_int_equal(c->cpu_ids[1], 5);

    tu_pb_assert_packs_to(&m->base, &fx);
    v1__list_pod_resources_response__free_unpacked(m, NULL);
    free(fx.data);
}

static void test_allocatable_resources_response(void **state)
{
    struct tu_fixture fx = load(PR "AllocatableResourcesResponse.bin");
    V1__AllocatableResourcesResponse *m = (V1__AllocatableResourcesResponse *)tu_pb_decode(
        &v1__allocatable_resources_response__descriptor, &fx);
    const V1__ContainerDevices *d;

    (void)state;
    assert_int_equal(m->n_devices, 1);
    d = m->devices[0];
    assert_string_equal(d->resource_name, "example.com/vgpu");
    assert_int_equal(d->n_device_ids, 4);
    assert_string_equal(d->device_ids[0], UUID0 "-0");
    assert_string_equal(d->device_ids[1], UUID0 "-1");
    assert_string_equal(d->device_ids[2], UUID0 "-2");
    assert_string_equal(d->device_ids[3], UUID0 "-3");
    assert_one_numa_v1(d->topology, 0);
    assert_int_equal(m->n_cpu_ids, 8);
    for (size_t i = 0; i < m->n_cpu_ids; i++)
        assert_int_equal(m->cpu_ids[i], (int64_t)i);
    assert_int_equal(m->n_memory, 0);
    tu_pb_assert_packs_to(&m->base, &fx);
    v1__allocatable_resources_response__free_unpacked(m, NULL);
    free(fx.data);
}

static void test_get_pod_resources_request(void **state)
{
    struct tu_fixture fx = load(PR "GetPodResourcesRequest.bin");
    V1__GetPodResourcesRequest *m =
        (V1__GetPodResourcesRequest *)tu_pb_decode(&v1__get_pod_resources_request__descriptor, &fx);

    (void)state;
    assert_string_equal(m->pod_name, "train-job-0");
    assert_string_equal(m->pod_namespace, "ml-team");
    tu_pb_assert_packs_to(&m->base, &fx);
    v1__get_pod_resources_request__free_unpacked(m, NULL);
    free(fx.data);
}

/* ------------------------------------------------------------------------ */
/* Hostile input                                                            */

/* Every strict prefix of the two largest replies (the ones the agent decodes from
 * the kubelet) either fails to decode or decodes to something that packs back to
 * exactly that prefix; under ASan this also shows nothing reads past the end. */
static void check_prefixes(const ProtobufCMessageDescriptor *desc, const char *path)
{
    struct tu_fixture fx = load(path);

    for (size_t len = 0; len < fx.len; len++) {
        uint8_t *copy = malloc(len + 1); /* exactly len bytes readable */
        ProtobufCMessage *m;

        assert_non_null(copy);
        memcpy(copy, fx.data, len);
        m = protobuf_c_message_unpack(desc, NULL, len, copy);
        if (m != NULL) {
            struct tu_fixture prefix = {copy, len};

            tu_pb_assert_packs_to(m, &prefix);
            protobuf_c_message_free_unpacked(m, NULL);
        }
        free(copy);
    }
    free(fx.data);
}

static void test_truncated(void **state)
{
    (void)state;
    check_prefixes(&v1__list_pod_resources_response__descriptor, PR "ListPodResourcesResponse.bin");
    check_prefixes(&v1beta1__allocate_response__descriptor, DP "AllocateResponse.bin");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_register_request),
        cmocka_unit_test(test_register_request_built),
        cmocka_unit_test(test_device_plugin_options),
        cmocka_unit_test(test_empty),
        cmocka_unit_test(test_list_and_watch_response),
        cmocka_unit_test(test_preferred_allocation_request),
        cmocka_unit_test(test_preferred_allocation_response),
        cmocka_unit_test(test_allocate_request),
        cmocka_unit_test(test_allocate_response),
        cmocka_unit_test(test_container_allocate_response),
        cmocka_unit_test(test_pre_start_container_request),
        cmocka_unit_test(test_list_pod_resources_request),
        cmocka_unit_test(test_list_pod_resources_response),
        cmocka_unit_test(test_allocatable_resources_response),
        cmocka_unit_test(test_get_pod_resources_request),
        cmocka_unit_test(test_truncated),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
