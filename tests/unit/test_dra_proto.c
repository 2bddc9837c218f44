/* tests/unit/test_dra_proto.c - the project's DRA .proto files (proto/pluginregistration,
 * proto/dra, proto/dra-health), compiled with protoc-c, against the kubelet's bytes.
 *
 * Every .bin under dra/grpc of shared/k8s-wire (made by protoc --encode from the
 * kubelet's upstream .proto files at v0.36.0) is decoded with the generated code and
 * its fields are compared with the matching .txtpb, written out here by hand. Each
 * message is then packed again and must give the same bytes (protoc and protobuf-c
 * both write fields in field-number order, map entries in the order they came, and
 * proto3 defaults not at all). The messages the agent will send (PluginInfo, a
 * NodePrepareResources reply) built field by field must give the fixture's bytes.
 * The v1 requests decode as v1beta1 too (the same wire), and a v1 reply's share_id
 * is an unknown field to v1beta1, kept and packed again. Every prefix of every
 * fixture is refused or decoded, never read past.
 *
 * Fixtures are read in place from shared/k8s-wire beside the checkout; every test
 * that needs them is skipped when that folder is absent (failed under CI=true).
 */
#include <dirent.h>
#include <stdlib.h>

#include "testutil.h"
#include "pb_fixture.h"
#include "pluginregistration/v1/api.pb-c.h"
#include "dra/v1/api.pb-c.h"
#include "dra/v1beta1/api.pb-c.h"
#include "dra-health/v1alpha1/api.pb-c.h"

#define GRPC EGPU_SOURCE_DIR "/../shared/k8s-wire/dra/grpc/" /* read in place, never copied */

/* The generated names, shortened: DRA1(Claim) is K8s__Io__Kubelet__Pkg__Apis__Dra__V1__Claim. */
#define DRA1(x)  K8s__Io__Kubelet__Pkg__Apis__Dra__V1__##x
#define DRAB1(x) K8s__Io__Kubelet__Pkg__Apis__Dra__V1beta1__##x
#define d1(x)    k8s__io__kubelet__pkg__apis__dra__v1__##x##__descriptor
#define db1(x)   k8s__io__kubelet__pkg__apis__dra__v1beta1__##x##__descriptor

#define CLAIM_UID "4f1d2a9c-8b3e-4c55-9a07-2e6b1d0c7f31"
#define SHARE_ID  "9c3e6f0a-51d7-4b2e-8f4a-0d6c2b7e1a95"
#define CDI_ID    "k8s.gpu.elasticgpu.io/claim=" CLAIM_UID "-gpu-0"
#define ENDPOINT  "/var/lib/kubelet/plugins/gpu.elasticgpu.io/dra.sock"
#define UID_ERROR "claim ml-team/train-job-0-gpu: uid mismatch (API server has 0b7e...)"

/* Reads a whole fixture (tu_fixture_load: skipped, or failed under CI=true,
 * when it is not there). */
static struct tu_fixture load(const char *path)
{
    return tu_fixture_load(path, "shared/k8s-wire/dra/grpc is not beside this checkout");
}

/* The example claim ml-team/train-job-0-gpu. */
static void assert_claim(const char *ns, const char *uid, const char *name)
{
    assert_string_equal(ns, "ml-team");
    assert_string_equal(uid, CLAIM_UID);
    assert_string_equal(name, "train-job-0-gpu");
}

/* ------------------------------------------------------------------------ */
/* pluginregistration                                                       */

static void test_plugin_info(void **state)
{
    struct tu_fixture fx = load(GRPC "PluginInfo.bin");
    Pluginregistration__PluginInfo *m = (Pluginregistration__PluginInfo *)tu_pb_decode(
        &pluginregistration__plugin_info__descriptor, &fx);

    (void)state;
    assert_string_equal(m->type, "DRAPlugin");
    assert_string_equal(m->name, "gpu.elasticgpu.io");
    assert_string_equal(m->endpoint, ENDPOINT);
    assert_int_equal(m->n_supported_versions, 3);
    assert_string_equal(m->supported_versions[0], "v1.DRAPlugin");
    assert_string_equal(m->supported_versions[1], "v1beta1.DRAPlugin");
    assert_string_equal(m->supported_versions[2], "v1alpha1.DRAResourceHealth");
    tu_pb_assert_packs_to(&m->base, &fx);
    pluginregistration__plugin_info__free_unpacked(m, NULL);
    free(fx.data);
}

/* Built field by field, as the agent answers GetInfo, it is the kubelet's bytes. */
static void test_plugin_info_built(void **state)
{
    struct tu_fixture fx = load(GRPC "PluginInfo.bin");
    char type[] = "DRAPlugin", name[] = "gpu.elasticgpu.io", endpoint[] = ENDPOINT;
    char v1[] = "v1.DRAPlugin", v1beta1[] = "v1beta1.DRAPlugin",
         health[] = "v1alpha1.DRAResourceHealth";
    char *versions[] = {v1, v1beta1, health};
    Pluginregistration__PluginInfo m = PLUGINREGISTRATION__PLUGIN_INFO__INIT;

    (void)state;
    m.type = type;
    m.name = name;
    m.endpoint = endpoint;
    m.n_supported_versions = 3;
    m.supported_versions = versions;
    tu_pb_assert_packs_to(&m.base, &fx);
    free(fx.data);
}

static void test_registration_status(void **state)
{
    struct tu_fixture fx = load(GRPC "RegistrationStatus.bin");
    Pluginregistration__RegistrationStatus *m =
        (Pluginregistration__RegistrationStatus *)tu_pb_decode(
            &pluginregistration__registration_status__descriptor, &fx);

    (void)state;
    assert_true(m->plugin_registered);
    assert_string_equal(m->error, "");
    tu_pb_assert_packs_to(&m->base, &fx);
    pluginregistration__registration_status__free_unpacked(m, NULL);
    free(fx.data);
}

/* The empty messages pack to nothing, and nothing decodes as them. */
static void test_empty_messages(void **state)
{
    Pluginregistration__InfoRequest in = PLUGINREGISTRATION__INFO_REQUEST__INIT;
    Pluginregistration__RegistrationStatusResponse out =
        PLUGINREGISTRATION__REGISTRATION_STATUS_RESPONSE__INIT;
    V1alpha1__NodeWatchResourcesRequest w = V1ALPHA1__NODE_WATCH_RESOURCES_REQUEST__INIT;
    struct tu_fixture none = {.data = (uint8_t *)"", .len = 0};
    ProtobufCMessage *m;

    (void)state;
    assert_int_equal(protobuf_c_message_get_packed_size(&in.base), 0);
    assert_int_equal(protobuf_c_message_get_packed_size(&out.base), 0);
    assert_int_equal(protobuf_c_message_get_packed_size(&w.base), 0);
    m = tu_pb_decode(&pluginregistration__info_request__descriptor, &none);
    protobuf_c_message_free_unpacked(m, NULL);
    m = tu_pb_decode(&pluginregistration__registration_status_response__descriptor, &none);
    protobuf_c_message_free_unpacked(m, NULL);
}

/* ------------------------------------------------------------------------ */
/* DRAPlugin v1 and v1beta1                                                 */

static void test_prepare_request(void **state)
{
    struct tu_fixture fx = load(GRPC "NodePrepareResourcesRequest.bin");
    DRA1(NodePrepareResourcesRequest) *m =
        (DRA1(NodePrepareResourcesRequest) *)tu_pb_decode(&d1(node_prepare_resources_request), &fx);
    DRAB1(NodePrepareResourcesRequest) * b;

    (void)state;
    assert_int_equal(m->n_claims, 1);
    assert_claim(m->claims[0]->namespace_, m->claims[0]->uid, m->claims[0]->name);
    tu_pb_assert_packs_to(&m->base, &fx);
    protobuf_c_message_free_unpacked(&m->base, NULL);
    /* A 1.32/1.33 kubelet sends the same bytes on the v1beta1 path. */
    b = (DRAB1(NodePrepareResourcesRequest) *)tu_pb_decode(&db1(node_prepare_resources_request),
                                                           &fx);
    assert_int_equal(b->n_claims, 1);
    assert_claim(b->claims[0]->namespace_, b->claims[0]->uid, b->claims[0]->name);
    tu_pb_assert_packs_to(&b->base, &fx);
    protobuf_c_message_free_unpacked(&b->base, NULL);
    free(fx.data);
}

static void test_unprepare_request(void **state)
{
    struct tu_fixture fx = load(GRPC "NodeUnprepareResourcesRequest.bin");
    DRA1(NodeUnprepareResourcesRequest) *m = (DRA1(NodeUnprepareResourcesRequest) *)tu_pb_decode(
        &d1(node_unprepare_resources_request), &fx);
    DRAB1(NodeUnprepareResourcesRequest) * b;

    (void)state;
    assert_int_equal(m->n_claims, 1);
    assert_claim(m->claims[0]->namespace_, m->claims[0]->uid, m->claims[0]->name);
    tu_pb_assert_packs_to(&m->base, &fx);
    protobuf_c_message_free_unpacked(&m->base, NULL);
    b = (DRAB1(NodeUnprepareResourcesRequest) *)tu_pb_decode(&db1(node_unprepare_resources_request),
                                                             &fx);
    assert_int_equal(b->n_claims, 1);
    assert_claim(b->claims[0]->namespace_, b->claims[0]->uid, b->claims[0]->name);
    tu_pb_assert_packs_to(&b->base, &fx);
    protobuf_c_message_free_unpacked(&b->base, NULL);
    free(fx.data);
}

static void test_prepare_response(void **state)
{
    struct tu_fixture fx = load(GRPC "NodePrepareResourcesResponse.bin");
    DRA1(NodePrepareResourcesResponse) *m = (DRA1(NodePrepareResourcesResponse) *)tu_pb_decode(
        &d1(node_prepare_resources_response), &fx);
    DRA1(NodePrepareResourceResponse) * v;
    DRA1(Device) * d;

    (void)state;
    assert_int_equal(m->n_claims, 1);
    assert_string_equal(m->claims[0]->key, CLAIM_UID);
    v = m->claims[0]->value;
    assert_non_null(v);
    assert_string_equal(v->error, "");
    assert_int_equal(v->n_devices, 1);
    d = v->devices[0];
    assert_int_equal(d->n_request_names, 1);
    assert_string_equal(d->request_names[0], "gpu");
    assert_string_equal(d->pool_name, "gpu-node-1");
    assert_string_equal(d->device_name, "gpu-0");
    assert_int_equal(d->n_cdi_device_ids, 1);
    assert_string_equal(d->cdi_device_ids[0], CDI_ID);
    assert_int_equal(d->_share_id_case,
                     K8S__IO__KUBELET__PKG__APIS__DRA__V1__DEVICE___SHARE_ID_SHARE_ID);
    assert_string_equal(d->share_id, SHARE_ID);
    tu_pb_assert_packs_to(&m->base, &fx);
    protobuf_c_message_free_unpacked(&m->base, NULL);
    free(fx.data);
}

/* What the agent will answer for the example claim, built field by field. */
static void test_prepare_response_built(void **state)
{
    struct tu_fixture fx = load(GRPC "NodePrepareResourcesResponse.bin");
    char req[] = "gpu", pool[] = "gpu-node-1", dev[] = "gpu-0", cdi[] = CDI_ID, share[] = SHARE_ID,
         uid[] = CLAIM_UID;
    char *reqs[] = {req}, *cdis[] = {cdi};
    DRA1(Device) d = K8S__IO__KUBELET__PKG__APIS__DRA__V1__DEVICE__INIT;
    DRA1(Device) * devs[] = {&d};
    DRA1(NodePrepareResourceResponse)
    v = K8S__IO__KUBELET__PKG__APIS__DRA__V1__NODE_PREPARE_RESOURCE_RESPONSE__INIT;
    DRA1(NodePrepareResourcesResponse__ClaimsEntry)
    e = K8S__IO__KUBELET__PKG__APIS__DRA__V1__NODE_PREPARE_RESOURCES_RESPONSE__CLAIMS_ENTRY__INIT;
    DRA1(NodePrepareResourcesResponse__ClaimsEntry) * entries[] = {&e};
    DRA1(NodePrepareResourcesResponse)
    m = K8S__IO__KUBELET__PKG__APIS__DRA__V1__NODE_PREPARE_RESOURCES_RESPONSE__INIT;
    DRA1(NodePrepareResourcesResponse) * back;
    uint8_t out[256];
    size_t n;

    (void)state;
    d.n_request_names = 1;
    d.request_names = reqs;
    d.pool_name = pool;
    d.device_name = dev;
    d.n_cdi_device_ids = 1;
    d.cdi_device_ids = cdis;
    d._share_id_case = K8S__IO__KUBELET__PKG__APIS__DRA__V1__DEVICE___SHARE_ID_SHARE_ID;
    d.share_id = share;
    v.n_devices = 1;
    v.devices = devs;
    e.key = uid;
    e.value = &v;
    m.n_claims = 1;
    m.claims = entries;
    tu_pb_assert_packs_to(&m.base, &fx);
    /* Without a share ID, field 5 is not sent at all: 2 bytes of tag and
     * length and the 36 of the ID fewer (and 2 more: the reply's and the
     * entry's lengths then fit one varint byte), and it decodes as unset. */
    d._share_id_case = K8S__IO__KUBELET__PKG__APIS__DRA__V1__DEVICE___SHARE_ID__NOT_SET;
    n = protobuf_c_message_get_packed_size(&m.base);
    assert_int_equal(n, fx.len - 40);
    assert_int_equal(protobuf_c_message_pack(&m.base, out), n);
    back = (DRA1(NodePrepareResourcesResponse) *)protobuf_c_message_unpack(
        &d1(node_prepare_resources_response), NULL, n, out);
    assert_non_null(back);
    assert_int_equal(back->claims[0]->value->devices[0]->_share_id_case,
                     K8S__IO__KUBELET__PKG__APIS__DRA__V1__DEVICE___SHARE_ID__NOT_SET);
    protobuf_c_message_free_unpacked(&back->base, NULL);
    free(fx.data);
}

/* The v1 reply read by a v1beta1 reader: share_id is an unknown field, kept. */
static void test_prepare_response_as_v1beta1(void **state)
{
    struct tu_fixture fx = load(GRPC "NodePrepareResourcesResponse.bin");
    DRAB1(NodePrepareResourcesResponse) *m = (DRAB1(NodePrepareResourcesResponse) *)tu_pb_decode(
        &db1(node_prepare_resources_response), &fx);
    DRAB1(Device) * d;

    (void)state;
    assert_int_equal(m->n_claims, 1);
    assert_string_equal(m->claims[0]->key, CLAIM_UID);
    assert_int_equal(m->claims[0]->value->n_devices, 1);
    d = m->claims[0]->value->devices[0];
    assert_string_equal(d->pool_name, "gpu-node-1");
    assert_string_equal(d->device_name, "gpu-0");
    assert_string_equal(d->cdi_device_ids[0], CDI_ID);
    assert_int_equal(d->base.n_unknown_fields, 1);
    assert_int_equal(d->base.unknown_fields[0].tag, 5);
    tu_pb_assert_packs_to(&m->base, &fx);
    protobuf_c_message_free_unpacked(&m->base, NULL);
    free(fx.data);
}

static void test_prepare_response_error(void **state)
{
    struct tu_fixture fx = load(GRPC "NodePrepareResourcesResponse_error.bin");
    DRA1(NodePrepareResourcesResponse) *m = (DRA1(NodePrepareResourcesResponse) *)tu_pb_decode(
        &d1(node_prepare_resources_response), &fx);

    (void)state;
    assert_int_equal(m->n_claims, 1);
    assert_string_equal(m->claims[0]->key, CLAIM_UID);
    assert_non_null(m->claims[0]->value);
    assert_int_equal(m->claims[0]->value->n_devices, 0);
    assert_string_equal(m->claims[0]->value->error, UID_ERROR);
    tu_pb_assert_packs_to(&m->base, &fx);
    protobuf_c_message_free_unpacked(&m->base, NULL);
    free(fx.data);
}

/* Success is an entry whose value is present and empty. */
static void test_unprepare_response(void **state)
{
    struct tu_fixture fx = load(GRPC "NodeUnprepareResourcesResponse.bin");
    DRA1(NodeUnprepareResourcesResponse) *m = (DRA1(NodeUnprepareResourcesResponse) *)tu_pb_decode(
        &d1(node_unprepare_resources_response), &fx);

    (void)state;
    assert_int_equal(m->n_claims, 1);
    assert_string_equal(m->claims[0]->key, CLAIM_UID);
    assert_non_null(m->claims[0]->value);
    assert_string_equal(m->claims[0]->value->error, "");
    tu_pb_assert_packs_to(&m->base, &fx);
    protobuf_c_message_free_unpacked(&m->base, NULL);
    free(fx.data);
}

/* ------------------------------------------------------------------------ */
/* DRAResourceHealth v1alpha1                                               */

static void test_watch_response(void **state)
{
    struct tu_fixture fx = load(GRPC "NodeWatchResourcesResponse.bin");
    V1alpha1__NodeWatchResourcesResponse *m = (V1alpha1__NodeWatchResourcesResponse *)tu_pb_decode(
        &v1alpha1__node_watch_resources_response__descriptor, &fx);

    (void)state;
    assert_int_equal(m->n_devices, 2);
    for (size_t i = 0; i < 2; i++) {
        assert_non_null(m->devices[i]->device);
        assert_string_equal(m->devices[i]->device->pool_name, "gpu-node-1");
        assert_int_equal(m->devices[i]->last_updated_time, 1795510800);
        assert_int_equal(m->devices[i]->health_check_timeout_seconds, 30);
    }
    assert_string_equal(m->devices[0]->device->device_name, "gpu-0");
    assert_int_equal(m->devices[0]->health, V1ALPHA1__HEALTH_STATUS__HEALTHY);
    assert_string_equal(m->devices[0]->message, "");
    assert_string_equal(m->devices[1]->device->device_name, "gpu-1");
    assert_int_equal(m->devices[1]->health, V1ALPHA1__HEALTH_STATUS__UNHEALTHY);
    assert_string_equal(m->devices[1]->message, "XID 79: GPU has fallen off the bus");
    tu_pb_assert_packs_to(&m->base, &fx);
    protobuf_c_message_free_unpacked(&m->base, NULL);
    free(fx.data);
}

/* ------------------------------------------------------------------------ */
/* Truncation                                                               */

/* Each prefix of each fixture, in an exact-size heap copy (ASan sees a read
 * past it), is refused or decoded, and what decodes packs again. */
static void test_prefixes(void **state)
{
    static const struct {
        const char *file;
        const ProtobufCMessageDescriptor *desc;
    } all[] = {
        {"PluginInfo.bin", &pluginregistration__plugin_info__descriptor},
        {"RegistrationStatus.bin", &pluginregistration__registration_status__descriptor},
        {"NodePrepareResourcesRequest.bin", &d1(node_prepare_resources_request)},
        {"NodePrepareResourcesResponse.bin", &d1(node_prepare_resources_response)},
        {"NodePrepareResourcesResponse.bin", &db1(node_prepare_resources_response)},
        {"NodePrepareResourcesResponse_error.bin", &d1(node_prepare_resources_response)},
        {"NodeUnprepareResourcesRequest.bin", &d1(node_unprepare_resources_request)},
        {"NodeUnprepareResourcesResponse.bin", &d1(node_unprepare_resources_response)},
        {"NodeWatchResourcesResponse.bin", &v1alpha1__node_watch_resources_response__descriptor},
    };
    char path[512];

    (void)state;
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        struct tu_fixture fx;

        snprintf(path, sizeof(path), GRPC "%s", all[i].file);
        fx = load(path);
        for (size_t n = 0; n < fx.len; n++) {
            uint8_t *cut = malloc(n ? n : 1);
            ProtobufCMessage *m;

            assert_non_null(cut);
            memcpy(cut, fx.data, n);
            m = protobuf_c_message_unpack(all[i].desc, NULL, n, cut);
            if (m != NULL) {
                uint8_t *out = malloc(protobuf_c_message_get_packed_size(m) + 1);

                assert_non_null(out);
                (void)protobuf_c_message_pack(m, out); /* only that it stays in bounds */
                free(out);
                protobuf_c_message_free_unpacked(m, NULL);
            }
            free(cut);
        }
        free(fx.data);
    }
}

/* Every .bin of the folder is one of those the tests above read, so a
 * fixture added there is not left unchecked. */
static void test_every_fixture_known(void **state)
{
    static const char *const known[] = {
        "PluginInfo.bin",
        "RegistrationStatus.bin",
        "NodePrepareResourcesRequest.bin",
        "NodePrepareResourcesResponse.bin",
        "NodePrepareResourcesResponse_error.bin",
        "NodeUnprepareResourcesRequest.bin",
        "NodeUnprepareResourcesResponse.bin",
        "NodeWatchResourcesResponse.bin",
    };
    DIR *d = opendir(GRPC);
    struct dirent *e;
    size_t nbin = 0;

    (void)state;
    if (d == NULL)
        tu_skip("shared/k8s-wire/dra/grpc is not beside this checkout");
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        bool found = false;

        if (len < 4 || strcmp(e->d_name + len - 4, ".bin") != 0)
            continue;
        for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
            found = found || strcmp(known[i], e->d_name) == 0;
        if (!found)
            fail_msg("fixture %s has no test in test_dra_proto.c", e->d_name);
        nbin++;
    }
    closedir(d);
    assert_int_equal(nbin, sizeof(known) / sizeof(known[0]));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plugin_info),
        cmocka_unit_test(test_plugin_info_built),
        cmocka_unit_test(test_registration_status),
        cmocka_unit_test(test_empty_messages),
        cmocka_unit_test(test_prepare_request),
        cmocka_unit_test(test_unprepare_request),
        cmocka_unit_test(test_prepare_response),
        cmocka_unit_test(test_prepare_response_built),
        cmocka_unit_test(test_prepare_response_as_v1beta1),
        cmocka_unit_test(test_prepare_response_error),
        cmocka_unit_test(test_unprepare_response),
        cmocka_unit_test(test_watch_response),
        cmocka_unit_test(test_prefixes),
        cmocka_unit_test(test_every_fixture_known),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
