/* tests/unit/test_dra_registration.c - the DRA plugin's kubelet registration
 * (src/agent/dra_registration.c) served on a temporary registry dir and called
 * as the kubelet's plugin watcher calls it, with the project's gRPC client
 * (src/net/grpc_client.c): GetInfo's PluginInfo, NotifyRegistrationStatus
 * recorded (registered, or the kubelet's error), malformed requests refused,
 * the socket gone after stop, names and paths refused before anything is
 * made, and a registry dir or socket name someone planted (a link, a file, a
 * FIFO, a dir others can write) refused without touching what it points at.
 * Every test checks that no egpu_malloc block is left behind.
 */
#define _GNU_SOURCE /* mkdtemp */
#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"
#include "egpu/grpc.h"
#include "egpu/log.h"
#include "pluginregistration/v1/api.pb-c.h"
#include "dra_registration_int.h"

#define DRIVER   "gpu.elasticgpu.io"
#define ENDPOINT "/var/lib/kubelet/plugins/gpu.elasticgpu.io/dra.sock"
#define WAIT_MS  15000 /* generous: the tests share two busy cores with the build */

static char tmpdir[] = "/tmp/egpu-test-dra-reg-XXXXXX";
static char regdir[256]; /* <tmpdir>/plugins_registry, made by serve */

static struct egpu__dra_registration *make(const char *dir)
{
    struct egpu__dra_registration_config cfg = {
        .registry_dir = dir, .driver = DRIVER, .endpoint = ENDPOINT};
    struct egpu__dra_registration *r = NULL;
    struct egpu_error err = {0};

    if (egpu__dra_registration_new(&cfg, &r, &err) != 0)
        fail_msg("new: %s", err.msg);
    return r;
}

/* One call of method on the registration socket with req (len bytes).
 * Returns egpu_grpc_call's code; the reply is unpacked as desc into *out
 * (NULL when the call failed), err holds the failure. */
static int call(struct egpu__dra_registration *r, const char *method, const void *req, size_t len,
                const ProtobufCMessageDescriptor *desc, ProtobufCMessage **out,
                struct egpu_error *err)
{
    struct egpu_buf reply;
    int rc;

    egpu_buf_init(&reply, 4096);
    rc = egpu_grpc_call(egpu__dra_registration_socket(r), method, req, len, WAIT_MS, &reply, err);
    *out = NULL;
    if (rc == 0) {
        *out = protobuf_c_message_unpack(desc, NULL, reply.len, (const uint8_t *)reply.data);
        assert_non_null(*out);
    }
    egpu_buf_free(&reply);
    return rc;
}

/* NotifyRegistrationStatus{registered, error} on r's socket. */
static int notify(struct egpu__dra_registration *r, bool registered, const char *error,
                  struct egpu_error *err)
{
    Pluginregistration__RegistrationStatus s = PLUGINREGISTRATION__REGISTRATION_STATUS__INIT;
    uint8_t buf[4096];
    size_t n;
    ProtobufCMessage *m;
    int rc;

    s.plugin_registered = registered;
    s.error = (char *)error;
    n = pluginregistration__registration_status__get_packed_size(&s);
    assert_true(n <= sizeof(buf));
    assert_int_equal(pluginregistration__registration_status__pack(&s, buf), n);
    rc = call(r, EGPU_DRA_METHOD_NOTIFY, buf, n,
              &pluginregistration__registration_status_response__descriptor, &m, err);
    if (m != NULL)
        protobuf_c_message_free_unpacked(m, NULL);
    return rc;
}

/* The kubelet's sequence: GetInfo, then a successful registration. */
static void test_get_info_and_registered(void **state)
{
    long live = egpu_alloc_live();
    struct egpu__dra_registration *r = make(regdir);
    struct egpu__dra_registration_state s;
    struct egpu_error err = {0};
    Pluginregistration__PluginInfo *info;
    char want[512];
    struct stat st;

    (void)state;
    snprintf(want, sizeof(want), "%s/" DRIVER "-reg.sock", regdir);
    assert_string_equal(egpu__dra_registration_socket(r), want);
    assert_false(egpu__dra_registration_socket_exists(r));
    if (egpu__dra_registration_serve(r, &err) != 0)
        fail_msg("serve: %s", err.msg);
    assert_int_equal(lstat(regdir, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_int_equal(st.st_mode & 07777, 0755); /* as the kubelet makes it */
    assert_int_equal(lstat(want, &st), 0);
    assert_true(S_ISSOCK(st.st_mode));
    assert_true(egpu__dra_registration_socket_exists(r));

    if (call(r, EGPU_DRA_METHOD_GET_INFO, NULL, 0, &pluginregistration__plugin_info__descriptor,
             (ProtobufCMessage **)&info, &err) != 0)
        fail_msg("GetInfo: %s", err.msg);
    assert_string_equal(info->type, "DRAPlugin");
    assert_string_equal(info->name, DRIVER);
    assert_string_equal(info->endpoint, ENDPOINT);
    assert_int_equal(info->n_supported_versions, 2);
    assert_string_equal(info->supported_versions[0], "v1.DRAPlugin");
    assert_string_equal(info->supported_versions[1], "v1beta1.DRAPlugin");
    protobuf_c_message_free_unpacked(&info->base, NULL);

    egpu__dra_registration_state(r, &s);
    assert_int_equal(s.get_info_calls, 1);
    assert_false(s.notified);
    assert_false(s.registered);

    if (notify(r, true, "", &err) != 0)
        fail_msg("NotifyRegistrationStatus: %s", err.msg);
    egpu__dra_registration_state(r, &s);
    assert_true(s.notified);
    assert_true(s.registered);
    assert_string_equal(s.error, "");
    assert_int_equal(s.notifications, 1);
    assert_int_equal(s.refusals, 0);

    egpu__dra_registration_stop(r);
    assert_int_equal(lstat(want, &st), -1); /* the kubelet deregisters the plugin */
    assert_int_equal(errno, ENOENT);
    assert_false(egpu__dra_registration_socket_exists(r));
    egpu__dra_registration_free(r);
    assert_int_equal(egpu_alloc_live(), live);
}

/* The kubelet refused: its error is kept (one line, cut to fit) and answered
 * with an error, as the upstream helper does; a later success clears it. */
static void test_refused(void **state)
{
    long live = egpu_alloc_live();
    struct egpu__dra_registration *r = make(regdir);
    struct egpu__dra_registration_state s;
    struct egpu_error err = {0};
    char *longer = malloc(4 * EGPU_DRA_REG_ERROR_MAX);
    int rc;

    (void)state;
    assert_non_null(longer);
    if (egpu__dra_registration_serve(r, &err) != 0)
        fail_msg("serve: %s", err.msg);
    rc = notify(r, false,
                "RegisterPlugin error -- plugin validation failed with err: none of services\n"
                "supported",
                &err);
    assert_int_equal(rc, egpu_grpc_status_errno(GRPC_STATUS_UNKNOWN));
    assert_non_null(strstr(err.msg, "failed registration process: RegisterPlugin error -- "
                                    "plugin validation failed"));
    egpu__dra_registration_state(r, &s);
    assert_true(s.notified);
    assert_false(s.registered);
    assert_string_equal(s.error, "RegisterPlugin error -- plugin validation failed with err: none "
                                 "of services?supported");
    assert_int_equal(s.refusals, 1);

    memset(longer, 'e', 4 * EGPU_DRA_REG_ERROR_MAX - 1);
    longer[4 * EGPU_DRA_REG_ERROR_MAX - 1] = '\0';
    assert_int_equal(notify(r, false, longer, &err), egpu_grpc_status_errno(GRPC_STATUS_UNKNOWN));
    egpu__dra_registration_state(r, &s);
    assert_int_equal(strlen(s.error), EGPU_DRA_REG_ERROR_MAX - 1);
    assert_int_equal(s.refusals, 2);

    if (notify(r, true, "", &err) != 0)
        fail_msg("NotifyRegistrationStatus: %s", err.msg);
    egpu__dra_registration_state(r, &s);
    assert_true(s.registered);
    assert_string_equal(s.error, "");
    assert_int_equal(s.notifications, 3);
    assert_int_equal(s.refusals, 2);
    free(longer);
    egpu__dra_registration_free(r); /* stops it */
    assert_int_equal(egpu_alloc_live(), live);
}

/* Bytes that are no message of the method: INVALID_ARGUMENT, nothing recorded. */
static void test_malformed(void **state)
{
    long live = egpu_alloc_live();
    struct egpu__dra_registration *r = make(regdir);
    struct egpu__dra_registration_state s;
    struct egpu_error err = {0};
    static const uint8_t junk[] = {0x0a, 0x10, 'x'}; /* field 1: 16 bytes promised, 1 there */
    ProtobufCMessage *m;

    (void)state;
    if (egpu__dra_registration_serve(r, &err) != 0)
        fail_msg("serve: %s", err.msg);
    assert_int_equal(call(r, EGPU_DRA_METHOD_GET_INFO, junk, sizeof(junk),
                          &pluginregistration__plugin_info__descriptor, &m, &err),
                     -EINVAL);
    assert_non_null(strstr(err.msg, "not an InfoRequest"));
    assert_int_equal(call(r, EGPU_DRA_METHOD_NOTIFY, junk, sizeof(junk),
                          &pluginregistration__registration_status_response__descriptor, &m, &err),
                     -EINVAL);
    assert_non_null(strstr(err.msg, "not a RegistrationStatus"));
    egpu__dra_registration_state(r, &s);
    assert_int_equal(s.get_info_calls, 0);
    assert_int_equal(s.notifications, 0);
    assert_false(s.notified);
    egpu__dra_registration_free(r);
    assert_int_equal(egpu_alloc_live(), live);
}

/* The kubelet wiped the registry dir: serving again makes the dir and the
 * socket again. */
static void test_serve_again(void **state)
{
    long live = egpu_alloc_live();
    struct egpu__dra_registration *r = make(regdir);
    struct egpu_error err = {0};
    Pluginregistration__PluginInfo *info;

    (void)state;
    if (egpu__dra_registration_serve(r, &err) != 0)
        fail_msg("serve: %s", err.msg);
    assert_int_equal(unlink(egpu__dra_registration_socket(r)), 0);
    assert_int_equal(rmdir(regdir), 0);
    assert_false(egpu__dra_registration_socket_exists(r));
    if (egpu__dra_registration_serve(r, &err) != 0)
        fail_msg("serve again: %s", err.msg);
    assert_true(egpu__dra_registration_socket_exists(r));
    if (call(r, EGPU_DRA_METHOD_GET_INFO, NULL, 0, &pluginregistration__plugin_info__descriptor,
             (ProtobufCMessage **)&info, &err) != 0)
        fail_msg("GetInfo: %s", err.msg);
    assert_string_equal(info->name, DRIVER);
    protobuf_c_message_free_unpacked(&info->base, NULL);
    egpu__dra_registration_free(r);
    assert_int_equal(egpu_alloc_live(), live);
}

/* The handlers without a server: what the socket answers. */
static void test_handlers_direct(void **state)
{
    long live = egpu_alloc_live();
    struct egpu__dra_registration *r = make(regdir);
    struct egpu_grpc_request req = {.method = EGPU_DRA_METHOD_GET_INFO, .data = "", .len = 0};
    struct egpu_grpc_status st = {0};
    struct egpu_buf reply;
    Pluginregistration__PluginInfo *info;

    (void)state;
    egpu_buf_init(&reply, 4096);
    assert_int_equal(egpu__dra_registration_on_get_info(r, &req, &reply, &st), 0);
    info = pluginregistration__plugin_info__unpack(NULL, reply.len, (const uint8_t *)reply.data);
    assert_non_null(info);
    assert_string_equal(info->type, "DRAPlugin");
    assert_string_equal(info->endpoint, ENDPOINT);
    pluginregistration__plugin_info__free_unpacked(info, NULL);
    egpu_buf_free(&reply);
    egpu__dra_registration_free(r);
    assert_int_equal(egpu_alloc_live(), live);
}

/* Names and paths refused before anything is made. */
static void test_config_refused(void **state)
{
    static const char *const bad_drivers[] = {
        "",
        "../etc",
        ".hidden",
        "GPU.example.com",
        "gpu/x",
        "gpu..x",
        "-gpu",
        "a23456789012345678901234567890123456789012345678901234567890.com"}; /* 64 bytes */
    long live = egpu_alloc_live();
    struct egpu__dra_registration_config cfg = {
        .registry_dir = regdir, .driver = DRIVER, .endpoint = ENDPOINT};
    struct egpu__dra_registration *r = NULL;
    struct egpu_error err = {0};
    char longdir[200];

    (void)state;
    for (size_t i = 0; i < sizeof(bad_drivers) / sizeof(bad_drivers[0]); i++) {
        cfg.driver = bad_drivers[i];
        assert_int_equal(egpu__dra_registration_new(&cfg, &r, &err), -EINVAL);
        assert_non_null(strstr(err.msg, "DNS subdomain"));
        assert_null(r);
    }
    cfg.driver = NULL;
    assert_int_equal(egpu__dra_registration_new(&cfg, &r, &err), -EINVAL);
    cfg.driver = DRIVER;
    cfg.endpoint = "dra.sock";
    assert_int_equal(egpu__dra_registration_new(&cfg, &r, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "absolute"));
    cfg.endpoint = NULL;
    assert_int_equal(egpu__dra_registration_new(&cfg, &r, &err), -EINVAL);
    cfg.endpoint = ENDPOINT;
    memset(longdir, 'd', sizeof(longdir) - 1);
    longdir[0] = '/';
    longdir[90] = '\0'; /* 90 + "/gpu.elasticgpu.io-reg.sock" passes 107 */
    cfg.registry_dir = longdir;
    assert_int_equal(egpu__dra_registration_new(&cfg, &r, &err), -ENAMETOOLONG);
    cfg.registry_dir = "";
    assert_int_equal(egpu__dra_registration_new(&cfg, &r, &err), -EINVAL);
    cfg.registry_dir = NULL; /* the kubelet's, only named here */
    assert_int_equal(egpu__dra_registration_new(&cfg, &r, &err), 0);
    assert_string_equal(egpu__dra_registration_socket(r),
                        "/var/lib/kubelet/plugins_registry/" DRIVER "-reg.sock");
    egpu__dra_registration_free(r);
    egpu__dra_registration_free(NULL);
    assert_int_equal(egpu_alloc_live(), live);
}

/* A link planted at the registry dir, a dir others can write, and a link,
 * a hard link or a FIFO at the socket's name: refused, the victim intact. */
static void test_planted(void **state)
{
    long live = egpu_alloc_live();
    char link_dir[300], target[300], victim[300], sock[512];
    struct egpu__dra_registration *r;
    struct egpu_error err = {0};
    struct stat st;

    (void)state;
    snprintf(link_dir, sizeof(link_dir), "%s/linked_registry", tmpdir);
    snprintf(target, sizeof(target), "%s/elsewhere", tmpdir);
    snprintf(victim, sizeof(victim), "%s/victim", tmpdir);
    assert_int_equal(mkdir(target, 0755), 0);
    assert_int_equal(symlink(target, link_dir), 0);
    r = make(link_dir);
    assert_int_equal(egpu__dra_registration_serve(r, &err), -ELOOP);
    assert_non_null(strstr(err.msg, "symbolic link"));
    snprintf(sock, sizeof(sock), "%s/" DRIVER "-reg.sock", target);
    assert_int_equal(lstat(sock, &st), -1); /* nothing made through the link */
    egpu__dra_registration_free(r);
    assert_int_equal(unlink(link_dir), 0);

    assert_int_equal(chmod(target, 0777), 0);
    r = make(target);
    assert_int_equal(egpu__dra_registration_serve(r, &err), -EPERM);
    assert_non_null(strstr(err.msg, "writable by nobody else"));
    assert_int_equal(lstat(sock, &st), -1);
    assert_int_equal(chmod(target, 0755), 0);

    for (int kind = 0; kind < 3; kind++) {
        tu_plant(sock, victim, kind);
        err = (struct egpu_error){0};
        assert_int_equal(egpu__dra_registration_serve(r, &err), -EEXIST);
        assert_false(egpu__dra_registration_socket_exists(r));
        tu_victim_intact(victim);
        assert_int_equal(lstat(sock, &st), 0); /* left alone */
        assert_false(S_ISSOCK(st.st_mode));
    }
    assert_int_equal(unlink(sock), 0);
    assert_int_equal(unlink(victim), 0);
    if (egpu__dra_registration_serve(r, &err) != 0)
        fail_msg("serve: %s", err.msg);
    egpu__dra_registration_free(r);
    assert_int_equal(rmdir(target), 0);
    assert_int_equal(egpu_alloc_live(), live);
}

static int group_setup(void **state)
{
    (void)state;
    if (mkdtemp(tmpdir) == NULL)
        return -1;
    snprintf(regdir, sizeof(regdir), "%s/plugins_registry", tmpdir);
    egpu_log_level = EGPU_LOG_ERROR; /* quiet: the refusals are expected */
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    (void)rmdir(regdir); /* best effort: a failed test may leave it */
    (void)rmdir(tmpdir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_get_info_and_registered),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_serve_again),
        cmocka_unit_test(test_handlers_direct),
        cmocka_unit_test(test_config_refused),
        cmocka_unit_test(test_planted),
    };

    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
