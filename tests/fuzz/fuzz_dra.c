/* tests/fuzz/fuzz_dra.c - the DRA kubelet plugin's decoders of the kubelet's
 * bytes: the messages of proto/pluginregistration, proto/dra (v1, v1beta1) and
 * proto/dra-health as protobuf-c unpacks them with the agent's allocator
 * (src/agent/pb.c), and the registration handlers of
 * src/agent/dra_registration.c (GetInfo, NotifyRegistrationStatus) on raw
 * request bytes.
 *
 * Input: one message's bytes, tried as every message type (so the kubelet's
 * own messages, e.g. the .bin files of shared/k8s-wire/dra/grpc, are seeds as
 * they are).
 * Invariants: a message that decodes has every string and sub-message
 * pointer set where the code will read it (map keys, claim fields, device
 * names); it packs, the packed bytes decode again, and packing that gives
 * the same bytes (one pack makes the encoding canonical; the one exception,
 * protobuf-c's overlong zero tag, is named in has_tag_zero). GetInfo answers 0
 * with the PluginInfo of this plugin or INVALID_ARGUMENT; NotifyRegistration-
 * Status answers 0, INVALID_ARGUMENT or UNKNOWN (a refusal), and the error
 * it keeps is terminated, one line and within its array. The DRAPlugin
 * handlers of src/agent/dra_plugin.c (NodePrepareResources and
 * NodeUnprepareResources, v1 and v1beta1) take the same bytes, with an API
 * server that cannot be reached and allocation and CDI dirs that do not
 * exist (nothing is written): a request that decodes is answered OK with
 * one entry per claim, keyed by its uid, and every prepare entry carries an
 * error (no claim can be read); one that does not is INVALID_ARGUMENT.
 * Nothing leaks (egpu_alloc_live() is back where it was).
 */
#include <errno.h>

#include "fuzz.h"
#include "dra/v1/api.pb-c.h"
#include "dra/v1beta1/api.pb-c.h"
#include "dra-health/v1alpha1/api.pb-c.h"
#include "pluginregistration/v1/api.pb-c.h"
#include "dra_plugin_int.h"
#include "dra_registration_int.h"
#include "pb_int.h"

#define DRIVER   "gpu.elasticgpu.io"
#define ENDPOINT "/var/lib/kubelet/plugins/gpu.elasticgpu.io/dra.sock"

static struct egpu__dra_registration *reg; /* made once, never served */
static struct egpu_kube *kube;             /* an API server nobody listens for */
static struct egpu__dra_plugin *plugin;    /* made once, never served */

static const ProtobufCMessageDescriptor *const descs[] = {
    &pluginregistration__info_request__descriptor,
    &pluginregistration__plugin_info__descriptor,
    &pluginregistration__registration_status__descriptor,
    &pluginregistration__registration_status_response__descriptor,
    &k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_request__descriptor,
    &k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__descriptor,
    &k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_request__descriptor,
    &k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_response__descriptor,
    &k8s__io__kubelet__pkg__apis__dra__v1beta1__node_prepare_resources_request__descriptor,
    &k8s__io__kubelet__pkg__apis__dra__v1beta1__node_prepare_resources_response__descriptor,
    &k8s__io__kubelet__pkg__apis__dra__v1beta1__node_unprepare_resources_request__descriptor,
    &k8s__io__kubelet__pkg__apis__dra__v1beta1__node_unprepare_resources_response__descriptor,
    &v1alpha1__node_watch_resources_request__descriptor,
    &v1alpha1__node_watch_resources_response__descriptor,
};

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    struct egpu__dra_registration_config cfg = {
        .registry_dir = "/nonexistent/plugins_registry", .driver = DRIVER, .endpoint = ENDPOINT};

    (void)argc;
    (void)argv;
    fuzz_quiet();
    egpu_log_level = EGPU_LOG_ERROR - 1; /* a refused registration is a WARN line: none here */
    FUZZ_CHECK(egpu__dra_registration_new(&cfg, &reg, NULL) == 0);
    {
        struct egpu_kube_config *kcfg = NULL;
        struct egpu__dra_plugin_config pcfg = {
            .node = "gpu-node-1",
            .endpoint = "/nonexistent/plugins/" DRIVER "/dra.sock",
            .alloc_root = "/nonexistent/alloc",
            .cdi_dir = "/nonexistent/cdi",
            .interposer = "/usr/lib/elastic-gpu/libegpu-vcuda.so",
        };

        /* Port 1 on loopback: every GET is refused at once, never retried. */
        FUZZ_CHECK(egpu_kube_config_new("http://127.0.0.1:1", "fuzz", &kcfg, NULL) == 0);
        FUZZ_CHECK(egpu_kube_new(kcfg, &kube, NULL) == 0);
        egpu_kube_config_free(kcfg);
        pcfg.kube = kube;
        FUZZ_CHECK(egpu__dra_plugin_new(&pcfg, &plugin, NULL) == 0);
        /* One refused GET first, so the client's lazily made parts are not
         * counted as the first input's leak. */
        {
            json_t *rec = NULL;

            FUZZ_CHECK(egpu__dra_plugin_prepare(plugin, "default",
                                                "0d5e0f7a-0000-4000-8000-000000000001", "c", &rec,
                                                NULL) != 0);
        }
    }
    return 0;
}

/* What the agent will read of a decoded message is there: strings and
 * sub-messages of requests and replies are set. */
static void check_claims(size_t n, K8s__Io__Kubelet__Pkg__Apis__Dra__V1__Claim **claims)
{
    for (size_t i = 0; i < n; i++) {
        FUZZ_CHECK(claims[i] != NULL);
        FUZZ_CHECK(claims[i]->namespace_ != NULL && claims[i]->uid != NULL &&
                   claims[i]->name != NULL);
    }
}

static void check_claims_v1beta1(size_t n,
                                 K8s__Io__Kubelet__Pkg__Apis__Dra__V1beta1__Claim **claims)
{
    for (size_t i = 0; i < n; i++) {
        FUZZ_CHECK(claims[i] != NULL);
        FUZZ_CHECK(claims[i]->namespace_ != NULL && claims[i]->uid != NULL &&
                   claims[i]->name != NULL);
    }
}

static void check_fields(const ProtobufCMessage *m)
{
    if (m->descriptor ==
        &k8s__io__kubelet__pkg__apis__dra__v1beta1__node_prepare_resources_request__descriptor) {
        const K8s__Io__Kubelet__Pkg__Apis__Dra__V1beta1__NodePrepareResourcesRequest *r =
            (const void *)m;

        check_claims_v1beta1(r->n_claims, r->claims);
    } else if (
        m->descriptor ==
        &k8s__io__kubelet__pkg__apis__dra__v1beta1__node_unprepare_resources_request__descriptor) {
        const K8s__Io__Kubelet__Pkg__Apis__Dra__V1beta1__NodeUnprepareResourcesRequest *r =
            (const void *)m;

        check_claims_v1beta1(r->n_claims, r->claims);
    } else if (m->descriptor ==
               &k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_request__descriptor) {
        const K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesRequest *r =
            (const void *)m;

        check_claims(r->n_claims, r->claims);
    } else if (
        m->descriptor ==
        &k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_request__descriptor) {
        const K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesRequest *r =
            (const void *)m;

        check_claims(r->n_claims, r->claims);
    } else if (m->descriptor ==
               &k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__descriptor) {
        const K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesResponse *r =
            (const void *)m;

        for (size_t i = 0; i < r->n_claims; i++) {
            const K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourceResponse *v =
                r->claims[i]->value; /* NULL: an entry sent without a value */

            FUZZ_CHECK(r->claims[i]->key != NULL);
            for (size_t j = 0; v != NULL && j < v->n_devices; j++) {
                FUZZ_CHECK(v->devices[j]->pool_name != NULL);
                FUZZ_CHECK(v->devices[j]->device_name != NULL);
                FUZZ_CHECK(v->devices[j]->_share_id_case !=
                               K8S__IO__KUBELET__PKG__APIS__DRA__V1__DEVICE___SHARE_ID_SHARE_ID ||
                           v->devices[j]->share_id != NULL);
                for (size_t k = 0; k < v->devices[j]->n_cdi_device_ids; k++)
                    FUZZ_CHECK(v->devices[j]->cdi_device_ids[k] != NULL);
            }
            FUZZ_CHECK(v == NULL || v->error != NULL);
        }
    }
}

/* Whether m or a message inside it kept an unknown field of number 0.
 * protobuf-c 1.4 accepts a zero tag written as an overlong varint (0x80
 * 0x00) as an unknown field, packs it as the plain zero tag and then
 * refuses that; nothing but the unknown field is affected. */
static bool has_tag_zero(const ProtobufCMessage *m)
{
    const ProtobufCMessageDescriptor *d = m->descriptor;

    for (unsigned i = 0; i < m->n_unknown_fields; i++) {
        if (m->unknown_fields[i].tag == 0)
            return true;
    }
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        const char *at = (const char *)m + f->offset;

        if (f->type != PROTOBUF_C_TYPE_MESSAGE)
            continue;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(const size_t *)((const char *)m + f->quantifier_offset);
            ProtobufCMessage *const *sub = *(ProtobufCMessage *const *const *)at;

            for (size_t j = 0; j < n; j++) {
                if (has_tag_zero(sub[j]))
                    return true;
            }
        } else {
            const ProtobufCMessage *sub = *(const ProtobufCMessage *const *)at;

            if (sub != NULL && has_tag_zero(sub))
                return true;
        }
    }
    return false;
}

/* Decode data as d; if it decodes: the fields are there, and pack, decode,
 * pack gives the same bytes. */
static void round_trip(const ProtobufCMessageDescriptor *d, const char *data, size_t size)
{
    struct egpu_grpc_request req = {.method = "/fuzz.Fuzz/Fuzz", .data = data, .len = size};
    ProtobufCMessage *m = egpu__pb_unpack(d, &req), *again;
    struct egpu_buf one, two;

    if (m == NULL)
        return;
    check_fields(m);
    egpu_buf_init(&one, EGPU_GRPC_MSG_MAX);
    egpu_buf_init(&two, EGPU_GRPC_MSG_MAX);
    FUZZ_CHECK(egpu__pb_pack(m, &one) == 0);
    FUZZ_CHECK(one.len == protobuf_c_message_get_packed_size(m));
    req.data = one.data != NULL ? one.data : "";
    req.len = one.len;
    again = egpu__pb_unpack(d, &req);
    if (again == NULL) {
        FUZZ_CHECK(has_tag_zero(m));
        goto out;
    }
    check_fields(again);
    FUZZ_CHECK(egpu__pb_pack(again, &two) == 0);
    FUZZ_CHECK(two.len == one.len);
    FUZZ_CHECK(one.len == 0 || memcmp(one.data, two.data, one.len) == 0);
    egpu__pb_unpacked_free(again);
out:
    egpu__pb_unpacked_free(m);
    egpu_buf_free(&one);
    egpu_buf_free(&two);
}

static void registration(const char *data, size_t size)
{
    struct egpu_grpc_request req = {.method = EGPU_DRA_METHOD_GET_INFO, .data = data, .len = size};
    struct egpu_grpc_status st = {0};
    struct egpu__dra_registration_state s;
    struct egpu_buf reply;
    int rc;

    egpu_buf_init(&reply, EGPU_GRPC_MSG_MAX);
    rc = egpu__dra_registration_on_get_info(reg, &req, &reply, &st);
    if (rc == 0) {
        Pluginregistration__PluginInfo *info = pluginregistration__plugin_info__unpack(
            &egpu__pb_allocator, reply.len, (const uint8_t *)(reply.data ? reply.data : ""));

        FUZZ_CHECK(info != NULL);
        FUZZ_CHECK(strcmp(info->type, "DRAPlugin") == 0 && strcmp(info->name, DRIVER) == 0 &&
                   strcmp(info->endpoint, ENDPOINT) == 0 && info->n_supported_versions == 2);
        pluginregistration__plugin_info__free_unpacked(info, &egpu__pb_allocator);
    } else {
        FUZZ_CHECK(rc == -EINVAL && st.code == GRPC_STATUS_INVALID_ARGUMENT);
    }
    egpu_buf_free(&reply);

    egpu_buf_init(&reply, EGPU_GRPC_MSG_MAX);
    st = (struct egpu_grpc_status){0};
    req.method = EGPU_DRA_METHOD_NOTIFY;
    rc = egpu__dra_registration_on_notify(reg, &req, &reply, &st);
    FUZZ_CHECK(
        (rc == 0 && reply.len == 0) || (rc == -EINVAL && st.code == GRPC_STATUS_INVALID_ARGUMENT) ||
        (rc == egpu_grpc_status_errno(GRPC_STATUS_UNKNOWN) && st.code == GRPC_STATUS_UNKNOWN));
    FUZZ_CHECK(memchr(st.msg, '\0', sizeof(st.msg)) != NULL);
    egpu__dra_registration_state(reg, &s);
    FUZZ_CHECK(memchr(s.error, '\0', sizeof(s.error)) != NULL);
    for (size_t i = 0; s.error[i] != '\0'; i++)
        FUZZ_CHECK((unsigned char)s.error[i] >= 0x20 && s.error[i] != 0x7f);
    FUZZ_CHECK(rc != 0 || (s.registered && s.error[0] == '\0'));
    egpu_buf_free(&reply);
}

/* The four DRAPlugin handlers on raw request bytes. */
static void dra_plugin(const char *data, size_t size)
{
    static const struct {
        const char *method;
        int (*fn)(void *, const struct egpu_grpc_request *, struct egpu_buf *,
                  struct egpu_grpc_status *);
        bool prepare;
    } hs[] = {
        {EGPU_DRA_METHOD_PREPARE_V1, egpu__dra_plugin_on_prepare_v1, true},
        {EGPU_DRA_METHOD_PREPARE_V1BETA1, egpu__dra_plugin_on_prepare_v1beta1, true},
        {EGPU_DRA_METHOD_UNPREPARE_V1, egpu__dra_plugin_on_unprepare_v1, false},
        {EGPU_DRA_METHOD_UNPREPARE_V1BETA1, egpu__dra_plugin_on_unprepare_v1beta1, false},
    };
    const struct egpu_grpc_request raw = {.data = data, .len = size};
    /* As the handlers decode it (prepare and unprepare requests have the
     * same one field, claims). */
    K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesRequest *in =
        (K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesRequest *)egpu__pb_unpack(
            &k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_request__descriptor,
            &raw);

    for (size_t h = 0; h < sizeof(hs) / sizeof(hs[0]); h++) {
        struct egpu_grpc_request req = {.method = hs[h].method, .data = data, .len = size};
        struct egpu_grpc_status st = {0};
        struct egpu_buf reply;
        int rc;

        egpu_buf_init(&reply, EGPU_GRPC_MSG_MAX);
        rc = hs[h].fn(plugin, &req, &reply, &st);
        if (in == NULL) {
            FUZZ_CHECK(rc != 0 && st.code == GRPC_STATUS_INVALID_ARGUMENT);
        } else if (hs[h].prepare) {
            K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesResponse *out =
                k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__unpack(
                    &egpu__pb_allocator, reply.len,
                    (const uint8_t *)(reply.data ? reply.data : ""));

            FUZZ_CHECK(rc == 0 && out != NULL && out->n_claims == in->n_claims);
            for (size_t i = 0; i < out->n_claims; i++) {
                FUZZ_CHECK(strcmp(out->claims[i]->key, in->claims[i]->uid) == 0);
                FUZZ_CHECK(out->claims[i]->value != NULL &&
                           out->claims[i]->value->error[0] != '\0' &&
                           out->claims[i]->value->n_devices == 0);
            }
            k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__free_unpacked(
                out, &egpu__pb_allocator);
        } else {
            K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesResponse *out =
                k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_response__unpack(
                    &egpu__pb_allocator, reply.len,
                    (const uint8_t *)(reply.data ? reply.data : ""));

            FUZZ_CHECK(rc == 0 && out != NULL && out->n_claims == in->n_claims);
            for (size_t i = 0; i < out->n_claims; i++)
                FUZZ_CHECK(strcmp(out->claims[i]->key, in->claims[i]->uid) == 0 &&
                           out->claims[i]->value != NULL);
            k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_response__free_unpacked(
                out, &egpu__pb_allocator);
        }
        egpu_buf_free(&reply);
    }
    if (in != NULL)
        egpu__pb_unpacked_free(&in->base);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    long live = egpu_alloc_live();
    char *copy = fuzz_cstr(data, size); /* NUL after size, as the gRPC server hands it */
    char *exact = fuzz_dup(data, size); /* exact size: ASan sees a read past the end */

    for (size_t i = 0; i < sizeof(descs) / sizeof(descs[0]); i++)
        round_trip(descs[i], exact, size);
    registration(copy, size);
    dra_plugin(exact, size);
    FUZZ_CHECK(egpu_alloc_live() == live);
    free(exact);
    free(copy);
    return 0;
}
