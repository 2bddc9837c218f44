/* tests/unit/test_kube_config.c - kubeconfig forms, in-cluster config, the
 * kubectl loading order, and base64 (src/kube/config.c).
 *
 * Fixtures: tests/fixtures/kube/kubeconfig_*.yaml (token, basic auth, client
 * certificate and key as data and as files, CA data and file,
 * insecure-skip-tls-verify, contexts, a two-file KUBECONFIG merge, and the
 * malformed cases). In-cluster files go to a temporary directory passed as
 * the service-account directory.
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"
#include "egpu/kube.h"
#include "kube_int.h"

#define FIX EGPU_FIXTURES "/kube/"

static const char ca_pem[] =
    "-----BEGIN CERTIFICATE-----\nTEST-CA-ONLY\n-----END CERTIFICATE-----\n";

static struct egpu_kube_config *load_ok(const char *paths, const char *context)
{
    struct egpu_kube_config *c = NULL;
    struct egpu_error err = {0};

    if (egpu_kube_config_from_kubeconfig(paths, context, &c, &err) != 0)
        fail_msg("load %s: %s", paths, err.msg);
    return c;
}

static void test_token_and_current_context(void **state)
{
    long live = egpu_alloc_live();
    struct egpu_kube_config *c;

    (void)state;
    c = load_ok(FIX "kubeconfig_token.yaml", NULL);
    assert_string_equal(c->context, "dev");
    assert_string_equal(c->server, "https://10.0.0.1:6443"); /* trailing '/' dropped */
    assert_string_equal(c->ns, "ml-team");
    assert_string_equal(c->token, "dev-token-abc");
    assert_null(c->token_file);
    assert_non_null(c->ca_data);
    assert_int_equal(c->ca_data_len, strlen(ca_pem));
    assert_memory_equal(c->ca_data, ca_pem, c->ca_data_len);
    assert_null(c->ca_file);
    assert_null(c->cert_data);
    assert_false(c->insecure);
    assert_int_equal(c->timeout_ms, 30000);
    egpu_kube_config_free(c);

    /* The other context: basic auth, CA file, namespace defaults. */
    c = load_ok(FIX "kubeconfig_token.yaml", "prod");
    assert_string_equal(c->server, "https://prod.example.com:6443");
    assert_string_equal(c->ns, "default");
    assert_null(c->token);
    assert_string_equal(c->username, "admin");
    assert_string_equal(c->password, "s3cret");
    assert_string_equal(c->ca_file, "/etc/kubernetes/pki/ca.crt");
    assert_null(c->ca_data);
    egpu_kube_config_free(c);
    assert_int_equal(egpu_alloc_live(), live);
}

static void test_client_cert_data(void **state)
{
    struct egpu_kube_config *c;

    (void)state;
    c = load_ok(FIX "kubeconfig_certdata.yaml", NULL);
    assert_string_equal(c->server, "https://127.0.0.1:39211");
    assert_non_null(strstr(c->cert_data, "TEST-CLIENT-CERT"));
    assert_int_equal(c->cert_data_len, strlen(c->cert_data));
    assert_non_null(strstr(c->key_data, "BEGIN EC PRIVATE KEY"));
    assert_non_null(strstr(c->ca_data, "TEST-CA-ONLY"));
    assert_null(c->cert_file);
    assert_null(c->key_file);
    assert_null(c->token);
    egpu_kube_config_free(c);
}

static void test_client_cert_files_relative(void **state)
{
    struct egpu_kube_config *c;

    (void)state;
    c = load_ok(FIX "kubeconfig_certfiles.yaml", NULL);
    /* Relative paths resolve against the kubeconfig's own directory. */
    assert_string_equal(c->ca_file, FIX "certs/ca.crt");
    assert_string_equal(c->cert_file, FIX "certs/client.crt");
    assert_string_equal(c->key_file, "/abs/path/client.key");
    assert_string_equal(c->ns, "gpu-system");
    assert_int_equal(access(c->ca_file, R_OK), 0);
    egpu_kube_config_free(c);
}

static void test_insecure_and_token_file_json(void **state)
{
    struct egpu_kube_config *c;

    (void)state;
    c = load_ok(FIX "kubeconfig_insecure.yaml", NULL); /* JSON is YAML too */
    assert_true(c->insecure);
    assert_string_equal(c->server, "https://lab:6443");
    assert_string_equal(c->token_file, FIX "token");
    assert_null(c->token);
    egpu_kube_config_free(c);
}

static void test_kubeconfig_list_merge(void **state)
{
    struct egpu_kube_config *c;

    (void)state;
    /* First file wins for current-context and cluster "shared"; a missing
     * file in the list is skipped. */
    c = load_ok(FIX "missing.yaml:" FIX "kubeconfig_merge_a.yaml:" FIX "kubeconfig_merge_b.yaml",
                NULL);
    assert_string_equal(c->context, "merged");
    assert_string_equal(c->server, "https://from-a:6443");
    assert_string_equal(c->token, "token-from-b");
    assert_string_equal(c->ns, "from-b");
    egpu_kube_config_free(c);
}

static void expect_error(const char *paths, const char *context, int code, const char *text)
{
    struct egpu_kube_config *c = NULL;
    struct egpu_error err = {0};
    long live = egpu_alloc_live();

    assert_int_equal(egpu_kube_config_from_kubeconfig(paths, context, &c, &err), code);
    assert_null(c);
    if (strstr(err.msg, text) == NULL)
        fail_msg("%s: message \"%s\" lacks \"%s\"", paths, err.msg, text);
    assert_int_equal(egpu_alloc_live(), live);
}

static void test_kubeconfig_errors(void **state)
{
    (void)state;
    expect_error(FIX "kubeconfig_bad_yaml.yaml", NULL, EGPU_ESYNTAX, "kubeconfig_bad_yaml.yaml:");
    expect_error(FIX "kubeconfig_bad_base64.yaml", NULL, EGPU_ESYNTAX,
                 "certificate-authority-data is not valid base64");
    expect_error(FIX "kubeconfig_exec.yaml", NULL, -ENOTSUP, "exec or auth-provider");
    expect_error(FIX "kubeconfig_no_server.yaml", NULL, -EINVAL, "has no server");
    expect_error(FIX "kubeconfig_no_current.yaml", NULL, -ENOENT, "no current-context");
    expect_error(FIX "kubeconfig_token.yaml", "staging", -ENOENT, "context \"staging\" not found");
    expect_error(FIX "nonexistent.yaml", NULL, -ENOENT, "nonexistent.yaml");
    expect_error(FIX "nope1.yaml:" FIX "nope2.yaml", NULL, -ENOENT, "none of");
}

static void test_kubeconfig_context_override(void **state)
{
    struct egpu_kube_config *c;

    (void)state;
    /* A file with no current-context still works when the context is named. */
    c = load_ok(FIX "kubeconfig_no_current.yaml", "only");
    assert_string_equal(c->server, "http://127.0.0.1:8080");
    assert_null(c->token);
    egpu_kube_config_free(c);
}

/* ------------------------------------------------------------------------ */

static void write_file(const char *dir, const char *name, const char *text)
{
    char path[512];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void remove_files(const char *dir, const char *const *names)
{
    char path[512];

    for (; *names; names++) {
        snprintf(path, sizeof(path), "%s/%s", dir, *names);
        unlink(path);
    }
}

static void test_in_cluster(void **state)
{
    static const char *const files[] = {"token", "ca.crt", "namespace", NULL};
    char dir[] = "/tmp/egpu-sa-XXXXXX";
    struct egpu_kube_config *c = NULL;
    struct egpu_error err = {0};
    long live = egpu_alloc_live();

    (void)state;
    assert_non_null(mkdtemp(dir));
    write_file(dir, "token", "eyJhbGciOiJSUzI1NiJ9.payload.sig\n");
    write_file(dir, "ca.crt", ca_pem);
    write_file(dir, "namespace", "gpu-system");
    unsetenv("POD_NAMESPACE");

    /* Without the environment: client-go's exact message. */
    unsetenv("KUBERNETES_SERVICE_HOST");
    setenv("KUBERNETES_SERVICE_PORT", "443", 1);
    assert_int_equal(egpu_kube_config_in_cluster(dir, &c, &err), -ENOENT);
    assert_string_equal(err.msg, "unable to load in-cluster configuration, "
                                 "KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be "
                                 "defined");

    setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
    assert_int_equal(egpu_kube_config_in_cluster(dir, &c, &err), 0);
    assert_string_equal(c->server, "https://10.96.0.1:443");
    assert_string_equal(c->token, "eyJhbGciOiJSUzI1NiJ9.payload.sig");
    assert_non_null(c->token_file);
    assert_non_null(strstr(c->token_file, "/token"));
    assert_non_null(strstr(c->ca_file, "/ca.crt"));
    assert_string_equal(c->ns, "gpu-system");
    assert_null(c->context);
    egpu_kube_config_free(c);

    /* IPv6 hosts get brackets; POD_NAMESPACE wins over the file. */
    setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
    setenv("POD_NAMESPACE", "from-env", 1);
    assert_int_equal(egpu_kube_config_in_cluster(dir, &c, &err), 0);
    assert_string_equal(c->server, "https://[fd00::1]:443");
    assert_string_equal(c->ns, "from-env");
    egpu_kube_config_free(c);
    unsetenv("POD_NAMESPACE");

    /* No CA file: system roots; no namespace file: "default". */
    remove_files(dir, (const char *const[]){"ca.crt", "namespace", NULL});
    assert_int_equal(egpu_kube_config_in_cluster(dir, &c, &err), 0);
    assert_null(c->ca_file);
    assert_string_equal(c->ns, "default");
    egpu_kube_config_free(c);

    /* No token: an error naming the file. */
    remove_files(dir, files);
    assert_int_equal(rmdir(dir), 0);
    assert_int_equal(egpu_kube_config_in_cluster(dir, &c, &err), -ENOENT);
    assert_non_null(strstr(err.msg, "token"));
    unsetenv("KUBERNETES_SERVICE_HOST");
    unsetenv("KUBERNETES_SERVICE_PORT");
    assert_int_equal(egpu_alloc_live(), live);
}

static void test_load_order(void **state)
{
    char home[] = "/tmp/egpu-home-XXXXXX";
    char kdir[512], path[600];
    struct egpu_kube_config *c = NULL;
    struct egpu_error err = {0};
    char *old_home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;

    (void)state;
    assert_non_null(mkdtemp(home));
    snprintf(kdir, sizeof(kdir), "%s/.kube", home);
    assert_int_equal(mkdir(kdir, 0700), 0);
    snprintf(path, sizeof(path), "%s/config", kdir);
    write_file(kdir, "config",
               "current-context: home\nclusters: [{name: h, cluster: {server: "
               "'https://home:6443'}}]\ncontexts: [{name: home, context: {cluster: h}}]\n");
    setenv("HOME", home, 1);
    unsetenv("KUBECONFIG");
    unsetenv("KUBERNETES_SERVICE_HOST");

    /* ~/.kube/config */
    assert_int_equal(egpu_kube_config_load(NULL, NULL, &c, &err), 0);
    assert_string_equal(c->server, "https://home:6443");
    egpu_kube_config_free(c);
    /* $KUBECONFIG beats it. */
    setenv("KUBECONFIG", FIX "kubeconfig_certdata.yaml", 1);
    assert_int_equal(egpu_kube_config_load(NULL, NULL, &c, &err), 0);
    assert_string_equal(c->server, "https://127.0.0.1:39211");
    egpu_kube_config_free(c);
    /* --kubeconfig beats both, and a context can be named. */
    assert_int_equal(egpu_kube_config_load(FIX "kubeconfig_token.yaml", "prod", &c, &err), 0);
    assert_string_equal(c->server, "https://prod.example.com:6443");
    egpu_kube_config_free(c);
    /* Nothing at all: in-cluster, which fails without its environment. */
    unsetenv("KUBECONFIG");
    unlink(path);
    rmdir(kdir);
    rmdir(home);
    assert_int_equal(egpu_kube_config_load(NULL, NULL, &c, &err), -ENOENT);
    assert_non_null(strstr(err.msg, "in-cluster"));
    if (old_home != NULL) {
        setenv("HOME", old_home, 1);
        free(old_home);
    }
}

static void test_config_new_and_base64(void **state)
{
    struct egpu_kube_config *c = NULL;
    struct egpu_error err = {0};
    char *out;
    size_t len;

    (void)state;
    assert_int_equal(egpu_kube_config_new("http://127.0.0.1:8080/", "t", &c, &err), 0);
    assert_string_equal(c->server, "http://127.0.0.1:8080");
    assert_string_equal(c->token, "t");
    assert_string_equal(c->ns, "default");
    egpu_kube_config_free(c);
    assert_int_equal(egpu_kube_config_new("127.0.0.1:8080", NULL, &c, &err), -EINVAL);
    assert_int_equal(egpu_kube_config_new(NULL, NULL, &c, &err), -EINVAL);

    assert_int_equal(egpu__kube_base64_decode("aGVsbG8=", 8, &out, &len), 0);
    assert_int_equal(len, 5);
    assert_string_equal(out, "hello");
    egpu_free(out);
    assert_int_equal(egpu__kube_base64_decode("aGVs\nbG8", 8, &out, &len), 0); /* no padding */
    assert_string_equal(out, "hello");
    egpu_free(out);
    assert_int_equal(egpu__kube_base64_decode("", 0, &out, &len), 0);
    assert_int_equal(len, 0);
    egpu_free(out);
    assert_int_equal(egpu__kube_base64_decode("aGVsbG8=x", 9, &out, &len), EGPU_ESYNTAX);
    assert_int_equal(egpu__kube_base64_decode("a", 1, &out, &len), EGPU_ESYNTAX);
    assert_int_equal(egpu__kube_base64_decode("a$==", 4, &out, &len), EGPU_ESYNTAX);
}

/* The base64 decoder (GnuTLS behind a normalizing step) accepts what the
 * hand-written one before it accepted, and refuses what it refused. */
static void test_base64_forms(void **state)
{
    static const struct {
        const char *in;
        const char *want; /* NULL: EGPU_ESYNTAX */
    } cases[] = {
        {"aGVsbG8=", "hello"},
        {"aGVsbG8", "hello"},                  /* padding absent */
        {" aG Vs\tbG8=\r\n", "hello"},         /* whitespace anywhere */
        {"aGVsbA", "hell"},                    /* two padding characters absent */
        {"aGVsbA=", "hell"},                   /* one short */
        {"aGVsbA==", "hell"},                  /* complete */
        {"aGVs=", "hel"},                      /* padding where none is needed */
        {"aQ=", "i"},                          /* short padding, no stray bits */
        {"  \n", ""},                          /* nothing but whitespace */
        {"==", ""},                            /* nothing but padding */
        {"+/+/", "\xfb\xff\xbf"},              /* the last two of the alphabet */
        {"aGVsbG8=x", NULL},                   /* data after padding */
        {"aG=Vs", NULL},                       /* padding in the middle */
        {"aGVsbG8===", NULL},                  /* three padding characters */
        {"a", NULL},                           /* six bits */
        {"AAAAA", NULL},                       /* a group and six bits */
        {"aGVsbG9=", NULL},                    /* stray bits before the padding */
        {"aGVsbG9", NULL},                     /* and without it */
        {"aGVs-bG8", NULL},                    /* '-': GnuTLS alone would stop there */
        {"aGVs_bG8", NULL},                    /* the URL alphabet is not this one */
        {"aGVs.bG8", NULL},                    /* not in any alphabet */
        {"-----BEGIN CERTIFICATE-----", NULL}, /* PEM armour is not base64 */
    };
    char *out;
    size_t len;
    long live = egpu_alloc_live();

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int rc = egpu__kube_base64_decode(cases[i].in, strlen(cases[i].in), &out, &len);

        if (cases[i].want == NULL) {
            if (rc != EGPU_ESYNTAX)
                fail_msg("\"%s\": want EGPU_ESYNTAX, got %d", cases[i].in, rc);
            continue;
        }
        if (rc != 0)
            fail_msg("\"%s\": want \"%s\", got %d", cases[i].in, cases[i].want, rc);
        assert_int_equal(len, strlen(cases[i].want));
        assert_memory_equal(out, cases[i].want, len);
        assert_int_equal(out[len], '\0');
        egpu_free(out);
    }
    /* A NUL inside is not base64 either. */
    assert_int_equal(egpu__kube_base64_decode("aGVs\0bG8=", 9, &out, &len), EGPU_ESYNTAX);
    /* Every byte value, wrapped at 64 columns as openssl and kubectl write it. */
    {
        static const char all[] =
            "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4v\n"
            "MDEyMzQ1Njc4OTo7PD0+P0BBQkNERUZHSElKS0xNTk9QUVJTVFVWV1hZWltcXV5f\n"
            "YGFiY2RlZmdoaWprbG1ub3BxcnN0dXZ3eHl6e3x9fn+AgYKDhIWGh4iJiouMjY6P\n"
            "kJGSk5SVlpeYmZqbnJ2en6ChoqOkpaanqKmqq6ytrq+wsbKztLW2t7i5uru8vb6/\n"
            "wMHCw8TFxsfIycrLzM3Oz9DR0tPU1dbX2Nna29zd3t/g4eLj5OXm5+jp6uvs7e7v\n"
            "8PHy8/T19vf4+fr7/P3+/w==\n";

        assert_int_equal(egpu__kube_base64_decode(all, strlen(all), &out, &len), 0);
        assert_int_equal(len, 256);
        for (size_t i = 0; i < 256; i++)
            assert_int_equal((unsigned char)out[i], i);
        egpu_free(out);
    }
    assert_int_equal(egpu_alloc_live(), live);
}

static void test_out_of_memory(void **state)
{
    long live = egpu_alloc_live();

    (void)state;
    /* Every allocation of a kubeconfig load may fail; none may leak. */
    for (long nth = 1; nth < 200; nth++) {
        struct egpu_kube_config *c = NULL;
        struct egpu_error err = {0};
        int rc;

        egpu_alloc_fail_after(nth);
        rc = egpu_kube_config_from_kubeconfig(FIX "kubeconfig_certdata.yaml", NULL, &c, &err);
        egpu_alloc_fail_after(0);
        if (rc == 0) {
            egpu_kube_config_free(c);
            break;
        }
        assert_int_equal(rc, -ENOMEM);
        assert_int_equal(egpu_alloc_live(), live);
    }
    assert_int_equal(egpu_alloc_live(), live);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_token_and_current_context),
        cmocka_unit_test(test_client_cert_data),
        cmocka_unit_test(test_client_cert_files_relative),
        cmocka_unit_test(test_insecure_and_token_file_json),
        cmocka_unit_test(test_kubeconfig_list_merge),
        cmocka_unit_test(test_kubeconfig_errors),
        cmocka_unit_test(test_kubeconfig_context_override),
        cmocka_unit_test(test_in_cluster),
        cmocka_unit_test(test_load_order),
        cmocka_unit_test(test_config_new_and_base64),
        cmocka_unit_test(test_base64_forms),
        cmocka_unit_test(test_out_of_memory),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
