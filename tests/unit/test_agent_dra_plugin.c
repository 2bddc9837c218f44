/* tests/unit/test_agent_dra_plugin.c - the DRA kubelet plugin's DRAPlugin
 * service (src/agent/dra_plugin.c) on a temporary socket, called with the
 * project's gRPC client as the kubelet calls it, against the test API server
 * (tests/apiserver/server.py) holding the ResourceClaims.
 *
 * The claims are built from ../shared/k8s-wire/dra/resourceclaim_allocated.json,
 * read in place at run time (never copied; a missing file skips, and fails
 * under CI=true): 30 cores and 4Gi of gpu-0 in pool gpu-node-1. Prepare
 * answers the claim's CDI device ID (v1 with the shareID, v1beta1 too),
 * writes the CDI spec and the allocation dir below <alloc root>/dra with
 * vcuda.conf (4096 MiB, core 30), ld.so.preload and shared/; a second
 * prepare answers the same and rewrites nothing. In one request a claim
 * naming gpu-9 gets an error naming gpu-9 while another succeeds, and a uid
 * other than the claim's is an error. Unprepare removes spec, dir and
 * record; an unknown claim is success. No memory is left allocated.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_kube_server.h"
#include "allocdir_int.h"
#include "allocfs_int.h"
#include "cdi_int.h"
#include "dra/v1/api.pb-c.h"
#include "dra_plugin_int.h"
#include "egpu/agent.h"
#include "egpu/grpc.h"
#include "egpu/log.h"

#define FIXTURE    EGPU_SOURCE_DIR "/../shared/k8s-wire/dra/resourceclaim_allocated.json"
#define NODE       "gpu-node-1" /* the fixture's pool */
#define NS         "default"
#define INTERPOSER "/usr/lib/elastic-gpu/libegpu-vcuda.so"
#define WAIT_MS    15000 /* generous: the tests share two busy cores with the build */

#define claim_msg K8s__Io__Kubelet__Pkg__Apis__Dra__V1__Claim

static char root[64];
static char alloc_root[128], dra_root[160], cdi_dir[128], sock[128];
static struct egpu_gpus *gpus;
static struct egpu_gpu_info cards[EGPU_NODE_GPUS_MAX];
static size_t ncards;
static struct egpu__dra_plugin *plugin;
static long live_at_start;

static int group_setup(void **state)
{
    struct egpu_error err = {0};
    json_t *list = NULL;

    (void)state;
    egpu_log_level = -1;
    if (tks_start(&srv, NULL) != 0)
        return -1;
    /* One request first, so the client's lazily made parts are not counted
     * as a test's leak. */
    if (egpu_kube_list(srv.kc, &egpu_kube_pods, NS, NULL, &list, NULL, NULL) != 0)
        return -1;
    json_decref(list);
    if (egpu_gpus_open_fake("2xA100-80GB", NODE, &gpus, &err) != 0 ||
        egpu_gpus_list(gpus, cards, EGPU_NODE_GPUS_MAX, &ncards, &err) != 0 || ncards != 2) {
        fprintf(stderr, "fake GPUs: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static int group_teardown(void **state)
{
    egpu_gpus_free(gpus);
    return tks_group_teardown(state);
}

static int setup(void **state)
{
    struct egpu_error err = {0};
    struct egpu__dra_plugin_config cfg = {0};

    snprintf(root, sizeof(root), "/tmp/egpu-dra-plugin-XXXXXX");
    if (mkdtemp(root) == NULL)
        return -1;
    snprintf(alloc_root, sizeof(alloc_root), "%s/alloc", root);
    snprintf(dra_root, sizeof(dra_root), "%s/%s", alloc_root, EGPU_DRA_PLUGIN_SUBDIR);
    snprintf(cdi_dir, sizeof(cdi_dir), "%s/cdi", root);
    snprintf(sock, sizeof(sock), "%s/dra.sock", root);
    live_at_start = egpu_alloc_live();
    cfg.kube = srv.kc;
    cfg.node = NODE;
    cfg.endpoint = sock;
    cfg.alloc_root = alloc_root;
    cfg.cdi_dir = cdi_dir;
    cfg.interposer = INTERPOSER;
    if (egpu__dra_plugin_new(&cfg, &plugin, &err) != 0 ||
        egpu__dra_plugin_serve(plugin, &err) != 0) {
        fprintf(stderr, "DRA plugin: %s\n", err.msg);
        return -1;
    }
    egpu__dra_plugin_set_cards(plugin, cards, ncards);
    return tks_reset_test(state);
}

static int teardown(void **state)
{
    (void)state;
    egpu__dra_plugin_free(plugin);
    plugin = NULL;
    assert_int_equal(egpu_alloc_live(), live_at_start);
    return egpu__fs_remove_tree(AT_FDCWD, root, 0) == 0 ? 0 : -1;
}

/* Create claim NS/name from the fixture, its one result naming device;
 * its uid (as the server gave it) into uid (len bytes). */
static void make_claim(const char *name, const char *device, char *uid, size_t len)
{
    struct egpu_error err = {0};
    json_error_t jerr;
    json_t *c = json_load_file(FIXTURE, 0, &jerr), *meta, *res, *out = NULL;

    if (c == NULL)
        tu_skip("../shared/k8s-wire/dra/resourceclaim_allocated.json is not beside this "
                "checkout");
    meta = json_object_get(c, "metadata");
    assert_int_equal(json_object_set_new(meta, "name", json_string(name)), 0);
    assert_int_equal(json_object_set_new(meta, "namespace", json_string(NS)), 0);
    json_object_del(meta, "resourceVersion");
    json_object_del(meta, "creationTimestamp");
    json_object_del(meta, "uid");
    res = json_array_get(
        json_object_get(
            json_object_get(json_object_get(json_object_get(c, "status"), "allocation"), "devices"),
            "results"),
        0);
    assert_non_null(res);
    assert_string_equal(json_string_value(json_object_get(res, "pool")), NODE);
    assert_int_equal(json_object_set_new(res, "device", json_string(device)), 0);
    if (egpu_kube_create(srv.kc, &egpu_kube_resourceclaims, NS, c, &out, NULL, &err) != 0)
        fail_msg("create claim %s: %s", name, err.msg);
    snprintf(uid, len, "%s",
             json_string_value(json_object_get(json_object_get(out, "metadata"), "uid")));
    assert_true(uid[0] != '\0');
    json_decref(c);
    json_decref(out);
}

/* The fixture's first result's shareID (static storage). */
static const char *fixture_share_id(void)
{
    static char id[128];
    json_error_t jerr;
    json_t *c = json_load_file(FIXTURE, 0, &jerr);

    if (c == NULL)
        tu_skip("fixture missing");
    snprintf(id, sizeof(id), "%s",
             json_string_value(json_object_get(
                 json_array_get(
                     json_object_get(json_object_get(json_object_get(json_object_get(c, "status"),
                                                                     "allocation"),
                                                     "devices"),
                                     "results"),
                     0),
                 "shareID")));
    json_decref(c);
    return id;
}

/* Call method with claims (n: namespace, uid, name each) packed as a v1
 * Node(Un)PrepareResourcesRequest (both have claims = 1); the reply
 * unpacked as desc (free with protobuf_c_message_free_unpacked). */
static ProtobufCMessage *call(const char *method, const ProtobufCMessageDescriptor *desc,
                              const char *const (*claims)[3], size_t n)
{
    K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesRequest r =
        K8S__IO__KUBELET__PKG__APIS__DRA__V1__NODE_PREPARE_RESOURCES_REQUEST__INIT;
    claim_msg c[4], *cp[4];
    struct egpu_error err = {0};
    struct egpu_buf reply;
    uint8_t buf[4096];
    ProtobufCMessage *m;
    size_t len;

    assert_true(n <= 4);
    for (size_t i = 0; i < n; i++) {
        claim_msg c0 = K8S__IO__KUBELET__PKG__APIS__DRA__V1__CLAIM__INIT;

        c[i] = c0;
        c[i].namespace_ = (char *)claims[i][0];
        c[i].uid = (char *)claims[i][1];
        c[i].name = (char *)claims[i][2];
        cp[i] = &c[i];
    }
    r.n_claims = n;
    r.claims = cp;
    len = protobuf_c_message_pack(&r.base, buf);
    egpu_buf_init(&reply, 1 << 16);
    if (egpu_grpc_call(sock, method, buf, len, WAIT_MS, &reply, &err) != 0)
        fail_msg("%s: %s", method, err.msg);
    m = protobuf_c_message_unpack(desc, NULL, reply.len, (const uint8_t *)reply.data);
    egpu_buf_free(&reply);
    assert_non_null(m);
    return m;
}

#define prep_resp   K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesResponse
#define prep_one    K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourceResponse
#define unprep_resp K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesResponse

static prep_resp *prepare(const char *method, const char *const (*claims)[3], size_t n)
{
    prep_resp *r = (prep_resp *)call(
        method, &k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__descriptor,
        claims, n);

    assert_int_equal(r->n_claims, n);
    return r;
}

static unprep_resp *unprepare(const char *const (*claims)[3], size_t n)
{
    unprep_resp *r = (unprep_resp *)call(
        EGPU_DRA_METHOD_UNPREPARE_V1,
        &k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_response__descriptor,
        claims, n);

    assert_int_equal(r->n_claims, n);
    return r;
}

/* The answer of claim uid in r. */
static const prep_one *answer_of(const prep_resp *r, const char *uid)
{
    for (size_t i = 0; i < r->n_claims; i++)
        if (strcmp(r->claims[i]->key, uid) == 0)
            return r->claims[i]->value;
    fail_msg("no answer for claim %s", uid);
    return NULL;
}

static void free_msg(void *m)
{
    protobuf_c_message_free_unpacked(m, NULL);
}

/* The claim uid's expected CDI ID of device and its allocation dir. */
static void expected(const char *uid, const char *device, char *id, char *dir, size_t len)
{
    struct egpu_error err = {0};
    char *ids[1] = {id};

    assert_int_equal(
        egpu__cdi_device_id(EGPU_API_DRA_DRIVER, uid, device, id, EGPU_CDI_ID_MAX, &err), 0);
    assert_int_equal(egpu__allocdir_path(dra_root, ids, 1, dir, len), 0);
}

static void spec_path(const char *uid, char *out, size_t len)
{
    char name[512];
    struct egpu_error err = {0};

    assert_int_equal(egpu__cdi_spec_name(EGPU_API_DRA_DRIVER, uid, name, sizeof(name), &err), 0);
    snprintf(out, len, "%s/%s", cdi_dir, name);
}

static void read_file(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "r");
    size_t n;

    if (f == NULL)
        fail_msg("open %s: %s", path, strerror(errno));
    n = fread(buf, 1, len - 1, f);
    buf[n] = '\0';
    fclose(f);
}

static bool exists(const char *path)
{
    struct stat st;

    return lstat(path, &st) == 0;
}

/* Create claim ns/name from the fixture with its results replaced by
 * results (stolen: a JSON array); its uid into uid (len bytes). */
static void make_claim_results(const char *ns, const char *name, json_t *results, char *uid,
                               size_t len)
{
    struct egpu_error err = {0};
    json_error_t jerr;
    json_t *c = json_load_file(FIXTURE, 0, &jerr), *meta, *out = NULL;

    if (c == NULL)
        tu_skip("../shared/k8s-wire/dra/resourceclaim_allocated.json is not beside this "
                "checkout");
    meta = json_object_get(c, "metadata");
    assert_int_equal(json_object_set_new(meta, "name", json_string(name)), 0);
    assert_int_equal(json_object_set_new(meta, "namespace", json_string(ns)), 0);
    json_object_del(meta, "resourceVersion");
    json_object_del(meta, "creationTimestamp");
    json_object_del(meta, "uid");
    assert_int_equal(
        json_object_set_new(
            json_object_get(json_object_get(json_object_get(c, "status"), "allocation"), "devices"),
            "results", results),
        0);
    if (egpu_kube_create(srv.kc, &egpu_kube_resourceclaims, ns, c, &out, NULL, &err) != 0)
        fail_msg("create claim %s/%s: %s", ns, name, err.msg);
    snprintf(uid, len, "%s",
             json_string_value(json_object_get(json_object_get(out, "metadata"), "uid")));
    assert_true(uid[0] != '\0');
    json_decref(c);
    json_decref(out);
}

#define SHARE1 "9c3e6f0a-51d7-4b2e-8f4a-0d6c2b7e1a95"

/* One allocation result (consumedCapacity {cores, memory}, each left out
 * when NULL), as a new object. */
static json_t *result(const char *driver, const char *pool, const char *device, const char *share,
                      const char *cores, const char *memory)
{
    json_t *r = json_pack("{s:s,s:s,s:s,s:s,s:{}}", "request", "gpu", "driver", driver, "pool",
                          pool, "device", device, "consumedCapacity");
    json_t *cc = json_object_get(r, "consumedCapacity");

    assert_non_null(r);
    if (share != NULL)
        assert_int_equal(json_object_set_new(r, "shareID", json_string(share)), 0);
    if (cores != NULL)
        assert_int_equal(json_object_set_new(cc, "cores", json_string(cores)), 0);
    if (memory != NULL)
        assert_int_equal(json_object_set_new(cc, "memory", json_string(memory)), 0);
    return r;
}

/* Prepare one claim through the v1 handler; its error (static storage, ""
 * on success) and, on success, its device count in *ndev. */
static const char *prepare_one(const char *ns, const char *uid, const char *name, size_t *ndev)
{
    static char error[512];
    const char *const claims[][3] = {{ns, uid, name}};
    prep_resp *r = prepare(EGPU_DRA_METHOD_PREPARE_V1, claims, 1);
    const prep_one *a = answer_of(r, uid);

    snprintf(error, sizeof(error), "%s", a->error);
    if (ndev != NULL)
        *ndev = a->n_devices;
    free_msg(r);
    return error;
}

/* Whether <alloc root>/dra holds nothing of claim uid: no record, no dir
 * of any of the node's devices; and no CDI spec. */
static void assert_nothing_of(const char *uid)
{
    char path[PATH_MAX + 32], id[EGPU_CDI_ID_MAX], dir[PATH_MAX], dev[16];

    snprintf(path, sizeof(path), "%s/%s%s.json", dra_root, EGPU_DRA_PLUGIN_RECORD_PREFIX, uid);
    assert_false(exists(path));
    spec_path(uid, path, sizeof(path));
    assert_false(exists(path));
    for (unsigned i = 0; i < 4; i++) {
        snprintf(dev, sizeof(dev), "gpu-%u", i);
        expected(uid, dev, id, dir, sizeof(dir));
        assert_false(exists(dir));
    }
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");

    if (f == NULL)
        fail_msg("open %s: %s", path, strerror(errno));
    fputs(text, f);
    fclose(f);
}

static void test_prepare_writes_spec_and_dir(void **state)
{
    char uid[128], id[EGPU_CDI_ID_MAX], dir[PATH_MAX], path[PATH_MAX + 32], text[8192];
    struct stat spec1, conf1, spec2, conf2, st;
    const prep_one *a;
    prep_resp *r;

    (void)state;
    make_claim("train-job-0-gpu", "gpu-0", uid, sizeof(uid));
    expected(uid, "gpu-0", id, dir, sizeof(dir));
    {
        const char *const claims[][3] = {{NS, uid, "train-job-0-gpu"}};

        r = prepare(EGPU_DRA_METHOD_PREPARE_V1, claims, 1);
        a = answer_of(r, uid);
        assert_string_equal(a->error, "");
        assert_int_equal(a->n_devices, 1);
        assert_string_equal(a->devices[0]->device_name, "gpu-0");
        assert_string_equal(a->devices[0]->pool_name, NODE);
        assert_int_equal(a->devices[0]->n_request_names, 1);
        assert_string_equal(a->devices[0]->request_names[0], "gpu");
        assert_int_equal(a->devices[0]->n_cdi_device_ids, 1);
        assert_string_equal(a->devices[0]->cdi_device_ids[0], id);
        assert_int_equal(a->devices[0]->_share_id_case,
                         K8S__IO__KUBELET__PKG__APIS__DRA__V1__DEVICE___SHARE_ID_SHARE_ID);
        assert_string_equal(a->devices[0]->share_id, fixture_share_id());
        free_msg(r);

        /* The CDI spec names the device and mounts the dir. */
        spec_path(uid, path, sizeof(path));
        assert_int_equal(stat(path, &spec1), 0);
        read_file(path, text, sizeof(text));
        assert_non_null(strstr(text, "k8s.gpu.elasticgpu.io/claim"));
        assert_non_null(strstr(text, dir));
        assert_non_null(strstr(text, cards[0].uuid));

        /* The allocation dir below <alloc root>/dra, as device-plugin mode's. */
        assert_true(strncmp(dir, dra_root, strlen(dra_root)) == 0);
        assert_int_equal(stat(dir, &st), 0);
        assert_int_equal(st.st_mode & 07777, 0755);
        snprintf(path, sizeof(path), "%s/%s", dir, EGPU_ALLOCDIR_VCUDA_FILE);
        assert_int_equal(stat(path, &conf1), 0);
        read_file(path, text, sizeof(text));
        assert_non_null(strstr(text, "EGPU_VCUDA_MEMORY_MIB=4096\n"));
        assert_non_null(strstr(text, "EGPU_VCUDA_CORE=30\n"));
        assert_non_null(strstr(text, "EGPU_VCUDA_CORE_LIMIT=30\n"));
        assert_non_null(strstr(text, cards[0].uuid));
        snprintf(path, sizeof(path), "%s/%s", dir, EGPU_ALLOCDIR_LIMITS_FILE);
        assert_true(exists(path));
        snprintf(path, sizeof(path), "%s/%s", dir, EGPU_ALLOCDIR_PRELOAD_FILE);
        read_file(path, text, sizeof(text));
        assert_string_equal(text, INTERPOSER "\n");
        snprintf(path, sizeof(path), "%s/%s", dir, EGPU_ALLOCDIR_SHARED_DIR);
        assert_int_equal(stat(path, &st), 0);
        assert_int_equal(st.st_mode & 07777, 01777);

        /* Again: the same answer, nothing rewritten (same inodes). */
        r = prepare(EGPU_DRA_METHOD_PREPARE_V1, claims, 1);
        a = answer_of(r, uid);
        assert_string_equal(a->error, "");
        assert_int_equal(a->n_devices, 1);
        assert_string_equal(a->devices[0]->cdi_device_ids[0], id);
        free_msg(r);
        spec_path(uid, path, sizeof(path));
        assert_int_equal(stat(path, &spec2), 0);
        snprintf(path, sizeof(path), "%s/%s", dir, EGPU_ALLOCDIR_VCUDA_FILE);
        assert_int_equal(stat(path, &conf2), 0);
        assert_int_equal(spec1.st_ino, spec2.st_ino);
        assert_int_equal(conf1.st_ino, conf2.st_ino);

        /* v1beta1 answers the same IDs, without a shareID. */
        r = prepare(EGPU_DRA_METHOD_PREPARE_V1BETA1, claims, 1);
        a = answer_of(r, uid);
        assert_string_equal(a->error, "");
        assert_string_equal(a->devices[0]->cdi_device_ids[0], id);
        assert_int_equal(a->devices[0]->_share_id_case,
                         K8S__IO__KUBELET__PKG__APIS__DRA__V1__DEVICE___SHARE_ID__NOT_SET);
        free_msg(r);
    }
}

static void test_prepare_errors_per_claim(void **state)
{
    char good[128], bad[128], id[EGPU_CDI_ID_MAX], dir[PATH_MAX], path[PATH_MAX + 32];
    const char *other = "0d5e0f7a-0000-4000-8000-000000000001";
    const prep_one *a;
    prep_resp *r;

    (void)state;
    make_claim("good", "gpu-1", good, sizeof(good));
    make_claim("bad", "gpu-9", bad, sizeof(bad));
    {
        const char *const claims[][3] = {
            {NS, bad, "bad"}, {NS, good, "good"}, {NS, other, "good"}, {NS, other, "missing"}};

        r = prepare(EGPU_DRA_METHOD_PREPARE_V1, claims, 4);
        a = answer_of(r, bad);
        assert_non_null(strstr(a->error, "gpu-9"));
        assert_int_equal(a->n_devices, 0);
        a = answer_of(r, good);
        assert_string_equal(a->error, "");
        assert_int_equal(a->n_devices, 1);
        expected(good, "gpu-1", id, dir, sizeof(dir));
        assert_string_equal(a->devices[0]->cdi_device_ids[0], id);
        /* The two entries of uid other: a uid mismatch, a claim not there. */
        for (size_t i = 0; i < r->n_claims; i++)
            if (strcmp(r->claims[i]->key, other) == 0)
                assert_true(r->claims[i]->value->error[0] != '\0');
        free_msg(r);
    }
    /* Nothing of the failed claims is left. */
    spec_path(bad, path, sizeof(path));
    assert_false(exists(path));
    spec_path(other, path, sizeof(path));
    assert_false(exists(path));
    expected(bad, "gpu-9", id, dir, sizeof(dir));
    assert_false(exists(dir));
    /* The mismatch names both uids. */
    {
        struct egpu_error err = {0};
        json_t *rec = NULL;

        assert_int_equal(egpu__dra_plugin_prepare(plugin, NS, other, "good", &rec, &err), -EINVAL);
        assert_null(rec);
        assert_non_null(strstr(err.msg, other));
        assert_non_null(strstr(err.msg, good));
    }
}

static void test_unprepare_removes_everything(void **state)
{
    char uid[128], id[EGPU_CDI_ID_MAX], dir[PATH_MAX], spec[PATH_MAX + 32], rec[PATH_MAX];
    const char *unknown = "5a1b2c3d-0000-4000-8000-00000000ffff";
    unprep_resp *u;
    prep_resp *r;

    (void)state;
    make_claim("train", "gpu-0", uid, sizeof(uid));
    expected(uid, "gpu-0", id, dir, sizeof(dir));
    spec_path(uid, spec, sizeof(spec));
    snprintf(rec, sizeof(rec), "%s/%s%s.json", dra_root, EGPU_DRA_PLUGIN_RECORD_PREFIX, uid);
    {
        const char *const claims[][3] = {{NS, uid, "train"}};
        const char *const both[][3] = {{NS, uid, "train"}, {NS, unknown, "gone"}};

        r = prepare(EGPU_DRA_METHOD_PREPARE_V1, claims, 1);
        assert_string_equal(answer_of(r, uid)->error, "");
        free_msg(r);
        assert_true(exists(spec));
        assert_true(exists(dir));
        assert_true(exists(rec));

        u = unprepare(both, 2);
        for (size_t i = 0; i < u->n_claims; i++)
            assert_string_equal(u->claims[i]->value->error, "");
        free_msg(u);
        assert_false(exists(spec));
        assert_false(exists(dir));
        assert_false(exists(rec));

        /* Again, and an unknown claim alone: success. */
        u = unprepare(claims, 1);
        assert_string_equal(u->claims[0]->value->error, "");
        free_msg(u);
    }
}

/* Results of another driver, or of this driver in another node's pool, are
 * not this node's: passed over; a claim with nothing else is an error that
 * names what it found. */
static void test_foreign_results_passed_over(void **state)
{
    char mixed[128], foreign[128], id[EGPU_CDI_ID_MAX], dir[PATH_MAX];
    const char *e;
    size_t n = 0;

    (void)state;
    make_claim_results(
        NS, "mixed",
        json_pack("[o,o,o]", result("gpu.other.example.com", NODE, "gpu-0", NULL, NULL, NULL),
                  result(EGPU_API_DRA_DRIVER, "gpu-node-2", "gpu-0", SHARE1, "30", "4Gi"),
                  result(EGPU_API_DRA_DRIVER, NODE, "gpu-1", SHARE1, "30", "4Gi")),
        mixed, sizeof(mixed));
    make_claim_results(
        NS, "foreign",
        json_pack("[o]", result(EGPU_API_DRA_DRIVER, "gpu-node-2", "gpu-0", SHARE1, "30", "4Gi")),
        foreign, sizeof(foreign));
    e = prepare_one(NS, mixed, "mixed", &n);
    assert_string_equal(e, "");
    assert_int_equal(n, 1);
    expected(mixed, "gpu-1", id, dir, sizeof(dir));
    assert_true(exists(dir));
    expected(mixed, "gpu-0", id, dir, sizeof(dir));
    assert_false(exists(dir));

    e = prepare_one(NS, foreign, "foreign", NULL);
    assert_non_null(strstr(e, "pool " NODE));
    assert_non_null(strstr(e, "gpu-node-2"));
    assert_nothing_of(foreign);
}

/* consumedCapacity beyond the card: an error naming the field and the
 * allowed range, and nothing written. */
static void test_capacity_beyond_card_refused(void **state)
{
    static const struct {
        const char *cores, *memory, *field, *range;
    } cases[] = {
        /* Past any card: egpu_api_dra_results' range (api.h); 0 holds
         * nothing, which only the agent refuses. */
        {"101", "4Gi", "consumedCapacity.cores", "0..100"},
        {"200", "4Gi", "consumedCapacity.cores", "0..100"},
        {"0", "4Gi", "consumedCapacity.cores", "1..100"},
        {"30", "81921Mi", "consumedCapacity.memory", "1..81920 MiB"},
        {"30", "1Ti", "consumedCapacity.memory", "1..81920 MiB"},
        {"30", "0", "consumedCapacity.memory", "1..81920 MiB"},
    };
    char uid[128], name[32];

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *e;

        snprintf(name, sizeof(name), "cap-%zu", i);
        make_claim_results(NS, name,
                           json_pack("[o]", result(EGPU_API_DRA_DRIVER, NODE, "gpu-0", SHARE1,
                                                   cases[i].cores, cases[i].memory)),
                           uid, sizeof(uid));
        e = prepare_one(NS, uid, name, NULL);
        if (strstr(e, cases[i].field) == NULL || strstr(e, cases[i].range) == NULL)
            fail_msg("cores %s memory %s: error \"%s\" names no %s %s", cases[i].cores,
                     cases[i].memory, e, cases[i].field, cases[i].range);
        assert_nothing_of(uid);
    }
    /* A capacity that is no quantity string is no "absent" (the whole card). */
    {
        json_t *r = result(EGPU_API_DRA_DRIVER, NODE, "gpu-0", SHARE1, NULL, "4Gi");
        const char *e;

        assert_int_equal(
            json_object_set_new(json_object_get(r, "consumedCapacity"), "cores", json_integer(30)),
            0);
        make_claim_results(NS, "cap-number", json_pack("[o]", r), uid, sizeof(uid));
        e = prepare_one(NS, uid, "cap-number", NULL);
        assert_non_null(strstr(e, "consumedCapacity.cores"));
        assert_nothing_of(uid);
    }
}

/* A shareID reaches the record and the kubelet: anything but a UID is
 * refused, naming the field, and nothing is written. */
static void test_bad_share_id_refused(void **state)
{
    static const char *const bad[] = {
        "../../../../etc/ld.so.preload",
        "9c3e6f0a-51d7-4b2e-8f4a-0d6c2b7e1a9/",
        "9C3E6F0A-51D7-4B2E-8F4A-0D6C2B7E1A95",
        "9c3e6f0a-51d7-4b2e-8f4a-0d6c2b7e1a95-",
        "x",
        "9c3e6f0a\n51d7-4b2e-8f4a-0d6c2b7e1a95",
    };
    char uid[128], name[32];

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char *e;

        snprintf(name, sizeof(name), "share-%zu", i);
        make_claim_results(
            NS, name,
            json_pack("[o]", result(EGPU_API_DRA_DRIVER, NODE, "gpu-0", bad[i], "30", "4Gi")), uid,
            sizeof(uid));
        e = prepare_one(NS, uid, name, NULL);
        if (strstr(e, "shareID") == NULL)
            fail_msg("shareID \"%s\": error \"%s\"", bad[i], e);
        assert_nothing_of(uid);
    }
}

/* Another namespace's claim: a request naming tenant B's claim with tenant
 * A's uid is refused, before and after A's claim is prepared (the record
 * of A's uid never answers for B's name). */
static void test_other_namespace_claim_refused(void **state)
{
    char a[128], b[128];
    const char *e;
    size_t n = 0;

    (void)state;
    make_claim_results(
        "team-a", "shared",
        json_pack("[o]", result(EGPU_API_DRA_DRIVER, NODE, "gpu-0", SHARE1, "30", "4Gi")), a,
        sizeof(a));
    make_claim_results(
        "team-b", "shared",
        json_pack("[o]", result(EGPU_API_DRA_DRIVER, NODE, "gpu-1", SHARE1, "30", "4Gi")), b,
        sizeof(b));
    e = prepare_one("team-b", a, "shared", NULL);
    assert_non_null(strstr(e, a));
    assert_non_null(strstr(e, b));
    assert_nothing_of(a);

    assert_string_equal(prepare_one("team-a", a, "shared", &n), "");
    assert_int_equal(n, 1);
    e = prepare_one("team-b", a, "shared", &n);
    assert_non_null(strstr(e, "team-a/shared"));
    assert_non_null(strstr(e, "team-b/shared"));
    /* A's share is still A's. */
    assert_string_equal(prepare_one("team-a", a, "shared", &n), "");
    assert_int_equal(n, 1);
}

/* A claim deleted between the agent's first read and its record: an
 * error, and nothing of it on disk. The test API server answers the
 * first GET and 404 to the second, as if the claim went meanwhile. */
static void test_claim_deleted_mid_prepare(void **state)
{
    char uid[128];
    const char *e;

    (void)state;
    make_claim("going", "gpu-0", uid, sizeof(uid));
    tks_post(&srv, "fault",
             "[{\"method\": \"GET\", \"path\": \"/resourceclaims/going$\", \"code\": 0, "
             "\"count\": 1}, {\"method\": \"GET\", \"path\": \"/resourceclaims/going$\", "
             "\"code\": 404, \"count\": 1}]");
    e = prepare_one(NS, uid, "going", NULL);
    assert_non_null(strstr(e, "deleted"));
    assert_non_null(strstr(e, "going"));
    assert_nothing_of(uid);
    /* Gone before the first read: the same. */
    tks_post(&srv, "fault",
             "{\"method\": \"GET\", \"path\": \"/resourceclaims/going$\", \"code\": 404}");
    e = prepare_one(NS, uid, "going", NULL);
    assert_true(e[0] != '\0');
    assert_nothing_of(uid);
    /* And once it is back to normal, the claim prepares. */
    assert_string_equal(prepare_one(NS, uid, "going", NULL), "");
}

/* The record replaced by a symbolic link or by garbage: never followed or
 * believed; prepare rebuilds it and keeps the share's dir (a region file in
 * shared/ survives), unprepare removes what the claim has; a record naming
 * a dir other than its own is never used to remove it. */
static void test_bad_record_rebuilt_never_followed(void **state)
{
    char uid[128], id[EGPU_CDI_ID_MAX], dir[PATH_MAX], rec[PATH_MAX], region[PATH_MAX + 64];
    char target[PATH_MAX], victim[PATH_MAX], text[8192], forged[4096];
    struct stat st, st2;
    size_t n = 0;

    (void)state;
    make_claim("rec", "gpu-0", uid, sizeof(uid));
    expected(uid, "gpu-0", id, dir, sizeof(dir));
    snprintf(rec, sizeof(rec), "%s/%s%s.json", dra_root, EGPU_DRA_PLUGIN_RECORD_PREFIX, uid);
    snprintf(region, sizeof(region), "%s/%s/region", dir, EGPU_ALLOCDIR_SHARED_DIR);
    snprintf(target, sizeof(target), "%s/elsewhere.json", root);
    snprintf(victim, sizeof(victim), "%s/victim", root);
    assert_int_equal(mkdir(victim, 0755), 0);

    assert_string_equal(prepare_one(NS, uid, "rec", &n), "");
    write_file(region, "the interposer's region\n");
    assert_int_equal(stat(dir, &st), 0);

    /* A link to a file elsewhere: not followed, the file untouched. */
    read_file(rec, text, sizeof(text));
    write_file(target, text);
    assert_int_equal(unlink(rec), 0);
    assert_int_equal(symlink(target, rec), 0);
    assert_string_equal(prepare_one(NS, uid, "rec", &n), "");
    assert_int_equal(n, 1);
    assert_int_equal(lstat(rec, &st2), 0);
    assert_true(S_ISREG(st2.st_mode));
    assert_true(exists(target));
    assert_true(exists(region));
    assert_int_equal(stat(dir, &st2), 0);
    assert_int_equal(st.st_ino, st2.st_ino);

    /* Garbage: rebuilt, the share kept. */
    write_file(rec, "{\"uid\": \"");
    assert_string_equal(prepare_one(NS, uid, "rec", &n), "");
    assert_int_equal(n, 1);
    read_file(rec, text, sizeof(text));
    assert_non_null(strstr(text, id));
    assert_true(exists(region));

    /* A record in the right shape whose dir is another path: unprepare
     * does not believe it (the victim stays) and removes the claim's own. */
    snprintf(forged, sizeof(forged),
             "{\"uid\":\"%s\",\"namespace\":\"%s\",\"name\":\"rec\",\"devices\":[{"
             "\"request\":\"gpu\",\"pool\":\"%s\",\"device\":\"gpu-0\",\"shareID\":\"\","
             "\"cdi\":\"%s\",\"dir\":\"%s/../../victim\"}]}",
             uid, NS, NODE, id, dra_root);
    write_file(rec, forged);
    {
        const char *const claims[][3] = {{NS, uid, "rec"}};
        unprep_resp *u = unprepare(claims, 1);

        assert_string_equal(u->claims[0]->value->error, "");
        free_msg(u);
    }
    assert_true(exists(victim));
    assert_true(exists(target));
    assert_nothing_of(uid);

    /* Unprepare over a link: the link goes, its target stays. */
    assert_string_equal(prepare_one(NS, uid, "rec", &n), "");
    assert_int_equal(unlink(rec), 0);
    assert_int_equal(symlink(target, rec), 0);
    {
        const char *const claims[][3] = {{NS, uid, "rec"}};
        unprep_resp *u = unprepare(claims, 1);

        assert_string_equal(u->claims[0]->value->error, "");
        free_msg(u);
    }
    assert_true(exists(target));
    assert_nothing_of(uid);

    /* The record gone (a rebuild that failed): unprepare still removes the
     * claim's dir. */
    assert_string_equal(prepare_one(NS, uid, "rec", &n), "");
    assert_int_equal(unlink(rec), 0);
    assert_true(exists(dir));
    {
        const char *const claims[][3] = {{NS, uid, "rec"}};
        unprep_resp *u = unprepare(claims, 1);

        assert_string_equal(u->claims[0]->value->error, "");
        free_msg(u);
    }
    assert_nothing_of(uid);
}

/* The record of uid as text, its device gpu-0 with the capacity members
 * extra (e.g. ",\"cores\":30"). */
static void record_text(const char *uid, const char *extra, char *out, size_t len)
{
    char id[EGPU_CDI_ID_MAX], dir[256];

    expected(uid, "gpu-0", id, dir, sizeof(dir));
    snprintf(out, len,
             "{\"uid\":\"%s\",\"namespace\":\"%s\",\"name\":\"c\",\"devices\":[{"
             "\"request\":\"gpu\",\"pool\":\"%s\",\"device\":\"gpu-0\",\"shareID\":\"\","
             "\"cdi\":\"%s\",\"dir\":\"%s\"%s}]}",
             uid, NS, NODE, id, dir, extra);
}

/* The record's capacity members: absent (an older agent's record) or
 * integers in range; anything else is not the agent's record. */
static void test_record_capacity_checked(void **state)
{
    const char *uid = "6a1b2c3d-0000-4000-8000-000000000001";
    static const struct {
        const char *extra;
        int rc;
    } t[] = {
        {"", 0},
        {",\"cores\":30,\"memoryMiB\":4096", 0},
        {",\"cores\":100,\"memoryMiB\":1", 0},
        {",\"cores\":0,\"memoryMiB\":4096", EGPU_ESYNTAX},
        {",\"cores\":101,\"memoryMiB\":4096", EGPU_ESYNTAX},
        {",\"cores\":\"30\",\"memoryMiB\":4096", EGPU_ESYNTAX},
        {",\"cores\":30,\"memoryMiB\":0", EGPU_ESYNTAX},
        {",\"cores\":30,\"memoryMiB\":-5", EGPU_ESYNTAX},
        {",\"cores\":30.5,\"memoryMiB\":4096", EGPU_ESYNTAX},
    };
    char text[2 * PATH_MAX + 1024];

    (void)state;
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        struct egpu_error err = {0};
        json_t *rec = NULL;

        record_text(uid, t[i].extra, text, sizeof(text));
        if (egpu__dra_plugin_record_parse(EGPU_API_DRA_DRIVER, dra_root, uid, text, strlen(text),
                                          &rec, &err) != t[i].rc)
            fail_msg("record with%s: %s", t[i].extra, err.msg);
        if (t[i].rc != 0)
            assert_non_null(strstr(err.msg, "memoryMiB"));
        json_decref(rec);
    }
}

static void test_reason_of_codes(void **state)
{
    (void)state;
    assert_int_equal(egpu__dra_reason_of(-EINVAL), EGPU_DRA_REASON_INVALID);
    assert_int_equal(egpu__dra_reason_of(-ENOENT), EGPU_DRA_REASON_NOT_FOUND);
    assert_int_equal(egpu__dra_reason_of(-ENOMEM), EGPU_DRA_REASON_NO_MEMORY);
    assert_int_equal(egpu__dra_reason_of(-EPERM), EGPU_DRA_REASON_API);
    assert_int_equal(egpu__dra_reason_of(-ETIMEDOUT), EGPU_DRA_REASON_API);
    assert_int_equal(egpu__dra_reason_of(EGPU_KUBE_ECONFLICT), EGPU_DRA_REASON_API);
    assert_int_equal(egpu__dra_reason_of(-ENOSPC), EGPU_DRA_REASON_FILE);
    assert_int_equal(egpu__dra_reason_of(-EIO), EGPU_DRA_REASON_FILE);
    assert_string_equal(egpu__dra_reason_name(EGPU_DRA_REASON_INVALID), "invalid");
    assert_string_equal(egpu__dra_reason_name(EGPU_DRA_REASON_NOT_FOUND), "not_found");
    assert_string_equal(egpu__dra_reason_name(EGPU_DRA_REASON_API), "api");
    assert_string_equal(egpu__dra_reason_name(EGPU_DRA_REASON_FILE), "file");
    assert_string_equal(egpu__dra_reason_name(EGPU_DRA_REASON_NO_MEMORY), "no_memory");
    assert_string_equal(egpu__dra_reason_name(EGPU_DRA_REASON_COUNT), "?");
}

/* Unprepare of a claim never prepared: nothing but the usage sums made
 * again. */
static void touch_usage(void)
{
    const char *const claims[][3] = {{NS, "7f000000-0000-4000-8000-000000000000", "none"}};
    unprep_resp *u = unprepare(claims, 1);

    assert_string_equal(u->claims[0]->value->error, "");
    free_msg(u);
}

/* The per-card sums come from the claim records: two shares of gpu-0
 * (30 % + 4 GiB, 20 % + 2 GiB) and the whole of gpu-1; they drop with an
 * unprepare, count an older agent's record as a share without figures, a
 * record not believed as bad, a share on a card that left as an orphan.
 * The handlers count requests, claims and errors by reason. */
static void test_usage_and_stats(void **state)
{
    char a[128], b[128], whole[128], bad[128], path[PATH_MAX + 64], text[2 * PATH_MAX + 1024];
    struct egpu__dra_usage *u = egpu_calloc(1, sizeof(*u));
    struct egpu__dra_plugin_stats st;
    size_t n = 0;

    (void)state;
    assert_non_null(u);
    egpu__dra_plugin_usage(plugin, u);
    assert_int_equal(u->ncards, 2);
    assert_int_equal(u->claims, 0);
    assert_int_equal(u->cards[0].shares, 0);
    assert_string_equal(u->cards[0].device, "gpu-0");
    assert_string_equal(u->cards[0].uuid, cards[0].uuid);
    assert_int_equal(u->cards[1].mem_mib, 81920);

    make_claim_results(
        NS, "a", json_pack("[o]", result(EGPU_API_DRA_DRIVER, NODE, "gpu-0", SHARE1, "30", "4Gi")),
        a, sizeof(a));
    make_claim_results(
        NS, "b",
        json_pack("[o]", result(EGPU_API_DRA_DRIVER, NODE, "gpu-0",
                                "9c3e6f0a-51d7-4b2e-8f4a-0d6c2b7e1a96", "20", "2048Mi")),
        b, sizeof(b));
    make_claim_results(
        NS, "whole", json_pack("[o]", result(EGPU_API_DRA_DRIVER, NODE, "gpu-1", NULL, NULL, NULL)),
        whole, sizeof(whole));
    make_claim_results(
        NS, "bad",
        json_pack("[o]", result(EGPU_API_DRA_DRIVER, NODE, "gpu-9", SHARE1, "10", "1Gi")), bad,
        sizeof(bad));
    assert_string_equal(prepare_one(NS, a, "a", &n), "");
    assert_string_equal(prepare_one(NS, b, "b", &n), "");
    assert_string_equal(prepare_one(NS, whole, "whole", &n), "");
    egpu__dra_plugin_usage(plugin, u);
    assert_int_equal(u->claims, 3);
    assert_int_equal(u->cards[0].shares, 2);
    assert_int_equal(u->cards[0].core_pct, 50);
    assert_int_equal(u->cards[0].alloc_mem_mib, 6144);
    assert_int_equal(u->cards[1].shares, 1);
    assert_int_equal(u->cards[1].core_pct, 100);
    assert_int_equal(u->cards[1].alloc_mem_mib, 81920);
    assert_int_equal(u->unsized + u->orphans + u->bad, 0);

    /* Errors by reason: a device this node lacks, a claim not there. */
    assert_non_null(strstr(prepare_one(NS, bad, "bad", &n), "gpu-9"));
    assert_true(prepare_one(NS, "7f000000-0000-4000-8000-0000000000aa", "missing", &n)[0] != '\0');
    egpu__dra_plugin_stats(plugin, &st);
    assert_int_equal(st.prepare_calls, 5);
    assert_int_equal(st.prepare_claims, 5);
    assert_int_equal(st.prepare_errors[EGPU_DRA_REASON_INVALID], 1);
    assert_int_equal(st.prepare_errors[EGPU_DRA_REASON_NOT_FOUND], 1);
    assert_int_equal(
        st.prepare_errors[EGPU_DRA_REASON_API] + st.prepare_errors[EGPU_DRA_REASON_FILE], 0);
    assert_int_equal(st.prepare_bad, 0);
    egpu__dra_plugin_usage(plugin, u);
    assert_int_equal(u->claims, 3); /* the failures left no record */

    /* b unprepared: gpu-0 back to a's share. */
    {
        const char *const claims[][3] = {{NS, b, "b"}};
        unprep_resp *r = unprepare(claims, 1);

        assert_string_equal(r->claims[0]->value->error, "");
        free_msg(r);
    }
    egpu__dra_plugin_usage(plugin, u);
    assert_int_equal(u->claims, 2);
    assert_int_equal(u->cards[0].shares, 1);
    assert_int_equal(u->cards[0].core_pct, 30);
    assert_int_equal(u->cards[0].alloc_mem_mib, 4096);
    egpu__dra_plugin_stats(plugin, &st);
    assert_int_equal(st.unprepare_calls, 1);
    assert_int_equal(st.unprepare_claims, 1);

    /* a's record as an older agent wrote it (no cores, no memoryMiB): a
     * share without figures. Garbage named as a record: bad, not summed. */
    snprintf(path, sizeof(path), "%s/%s%s.json", dra_root, EGPU_DRA_PLUGIN_RECORD_PREFIX, a);
    {
        char id[EGPU_CDI_ID_MAX], dir[256];

        expected(a, "gpu-0", id, dir, sizeof(dir));
        snprintf(text, sizeof(text),
                 "{\"uid\":\"%s\",\"namespace\":\"%s\",\"name\":\"a\",\"devices\":[{"
                 "\"request\":\"gpu\",\"pool\":\"%s\",\"device\":\"gpu-0\",\"shareID\":\"%s\","
                 "\"cdi\":\"%s\",\"dir\":\"%s\"}]}",
                 a, NS, NODE, SHARE1, id, dir);
    }
    write_file(path, text);
    snprintf(path, sizeof(path), "%s/%s7f000000-0000-4000-8000-0000000000bb.json", dra_root,
             EGPU_DRA_PLUGIN_RECORD_PREFIX);
    write_file(path, "{\"cores\": 100}");
    touch_usage();
    egpu__dra_plugin_usage(plugin, u);
    assert_int_equal(u->claims, 2);
    assert_int_equal(u->bad, 1);
    assert_int_equal(u->unsized, 1);
    assert_int_equal(u->cards[0].shares, 1);
    assert_int_equal(u->cards[0].core_pct, 0);
    assert_int_equal(u->cards[0].alloc_mem_mib, 0);
    assert_int_equal(unlink(path), 0);

    /* gpu-0 leaves the node: a's share is an orphan; gpu-1 keeps its own. */
    egpu__dra_plugin_set_cards(plugin, &cards[1], 1);
    egpu__dra_plugin_usage(plugin, u);
    assert_int_equal(u->ncards, 1);
    assert_string_equal(u->cards[0].device, "gpu-1");
    assert_int_equal(u->cards[0].shares, 1);
    assert_int_equal(u->orphans, 1);
    assert_int_equal(u->bad, 0);
    egpu_free(u);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_prepare_writes_spec_and_dir, setup, teardown),
        cmocka_unit_test_setup_teardown(test_prepare_errors_per_claim, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unprepare_removes_everything, setup, teardown),
        cmocka_unit_test_setup_teardown(test_foreign_results_passed_over, setup, teardown),
        cmocka_unit_test_setup_teardown(test_capacity_beyond_card_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_share_id_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_other_namespace_claim_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_claim_deleted_mid_prepare, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_record_rebuilt_never_followed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_record_capacity_checked, setup, teardown),
        cmocka_unit_test(test_reason_of_codes),
        cmocka_unit_test_setup_teardown(test_usage_and_stats, setup, teardown),
    };

    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
