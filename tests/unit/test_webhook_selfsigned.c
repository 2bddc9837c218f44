/* tests/unit/test_webhook_selfsigned.c - the pure parts of --self-signed
 * (src/webhook/certs.c and the flags in options.c): durations, the Service's
 * DNS names, when a certificate is due, base64 through GnuTLS, and the PKI
 * itself with a pinned clock: a CA and a serving certificate that verify
 * and name every name, a leaf renewal under the same CA, the CA bundle of a
 * CA renewal (new first, expired ones dropped), and parts that do not
 * belong together refused.
 */
#include <getopt.h>
#include <gnutls/x509.h>

#include "webhook_testutil.h"

#define NOW ((int64_t)1800000000) /* 2027-01-15 */

static void test_duration(void **state)
{
    int64_t d = 0;

    (void)state;
    assert_int_equal(egpu__webhook_ss_parse_duration("90s", 1, 1000000, &d), 0);
    assert_int_equal(d, 90);
    assert_int_equal(egpu__webhook_ss_parse_duration("30m", 1, 1000000, &d), 0);
    assert_int_equal(d, 1800);
    assert_int_equal(egpu__webhook_ss_parse_duration("8760h", 1, 100000000, &d), 0);
    assert_int_equal(d, 31536000);
    assert_int_equal(egpu__webhook_ss_parse_duration("30d", 1, 100000000, &d), 0);
    assert_int_equal(d, 2592000);
    d = 7;
    assert_int_equal(egpu__webhook_ss_parse_duration("30", 1, 1000, &d), -EINVAL);
    assert_int_equal(egpu__webhook_ss_parse_duration("1y", 1, 1000, &d), -EINVAL);
    assert_int_equal(egpu__webhook_ss_parse_duration("-1s", 1, 1000, &d), -EINVAL);
    assert_int_equal(egpu__webhook_ss_parse_duration("1ss", 1, 1000, &d), -EINVAL);
    assert_int_equal(egpu__webhook_ss_parse_duration("", 1, 1000, &d), -EINVAL);
    assert_int_equal(egpu__webhook_ss_parse_duration("0s", 1, 1000, &d), -ERANGE);
    assert_int_equal(egpu__webhook_ss_parse_duration("1d", 1, 1000, &d), -ERANGE);
    assert_int_equal(egpu__webhook_ss_parse_duration("99999999999999999999999s", 1, 1000, &d),
                     -ERANGE);
    assert_int_equal(d, 7); /* untouched on failure */
}

static void test_dns_names(void **state)
{
    char names[EGPU_WEBHOOK_SS_NAMES][EGPU_WEBHOOK_SS_NAME_MAX];
    char longns[300];

    (void)state;
    assert_int_equal(egpu__webhook_ss_dns_names("egpu-webhook", "elastic-gpu-system", names), 0);
    assert_string_equal(names[0], "egpu-webhook");
    assert_string_equal(names[1], "egpu-webhook.elastic-gpu-system");
    assert_string_equal(names[2], "egpu-webhook.elastic-gpu-system.svc");
    assert_string_equal(names[3], "egpu-webhook.elastic-gpu-system.svc.cluster.local");
    assert_int_equal(egpu__webhook_ss_dns_names("", "ns", names), -EINVAL);
    assert_int_equal(egpu__webhook_ss_dns_names("svc", "", names), -EINVAL);
    memset(longns, 'a', sizeof(longns) - 1);
    longns[sizeof(longns) - 1] = '\0';
    assert_int_equal(egpu__webhook_ss_dns_names("svc", longns, names), -ENAMETOOLONG);
}

static void test_is_due(void **state)
{
    (void)state;
    assert_false(egpu__webhook_ss_is_due(NOW + 100, NOW, 30));
    assert_false(egpu__webhook_ss_is_due(NOW + 31, NOW, 30));
    assert_true(egpu__webhook_ss_is_due(NOW + 30, NOW, 30));
    assert_true(egpu__webhook_ss_is_due(NOW - 1, NOW, 30));
}

static void test_base64(void **state)
{
    static const char pem[] = "-----BEGIN CERTIFICATE-----\nAB\n-----END CERTIFICATE-----\n";
    char *b64 = NULL, *back = NULL;
    size_t len = 0;

    (void)state;
    assert_int_equal(egpu__webhook_b64_encode("hello", 5, &b64), 0);
    assert_string_equal(b64, "aGVsbG8=");
    egpu_free(b64);
    assert_int_equal(egpu__webhook_b64_encode(pem, strlen(pem), &b64), 0);
    assert_null(strchr(b64, '\n')); /* one line, as caBundle and Secret data are */
    assert_int_equal(egpu__webhook_b64_decode(b64, &back, &len), 0);
    assert_int_equal(len, strlen(pem));
    assert_string_equal(back, pem);
    egpu_free(back);
    egpu_free(b64);
    back = NULL;
    assert_int_equal(egpu__webhook_b64_decode("not base64!", &back, &len), -EINVAL);
    assert_null(back);
}

static const char (*names4(void))[EGPU_WEBHOOK_SS_NAME_MAX]
{
    static char names[EGPU_WEBHOOK_SS_NAMES][EGPU_WEBHOOK_SS_NAME_MAX];

    assert_int_equal(egpu__webhook_ss_dns_names("egpu-webhook", "elastic-gpu-system", names), 0);
    return (const char(*)[EGPU_WEBHOOK_SS_NAME_MAX])names;
}

static int64_t first_not_after(const char *pem)
{
    gnutls_x509_crt_t crt;
    gnutls_datum_t d = {(unsigned char *)(uintptr_t)pem, (unsigned)strlen(pem)};
    int64_t t;

    assert_int_equal(gnutls_x509_crt_init(&crt), 0);
    assert_int_equal(gnutls_x509_crt_import(crt, &d, GNUTLS_X509_FMT_PEM), 0);
    t = (int64_t)gnutls_x509_crt_get_expiration_time(crt);
    gnutls_x509_crt_deinit(crt);
    return t;
}

static int count_certs(const char *pem)
{
    int n = 0;

    for (const char *p = pem; (p = strstr(p, "-----BEGIN CERTIFICATE-----")) != NULL; p++)
        n++;
    return n;
}

static void test_pki(void **state)
{
    struct egpu__webhook_pki p = {0};
    struct egpu__webhook_pki_info info;
    struct egpu_error err = {0};
    char *ca1, *tls1, *bundle = NULL;

    (void)state;
    assert_int_equal(
        egpu__webhook_pki_new_leaf(&p, names4(), EGPU_WEBHOOK_SS_NAMES, NOW, 100, &err), -EINVAL);
    assert_int_equal(egpu__webhook_pki_new_ca("egpu-webhook-ca", NOW, 3650 * 86400LL, &p, &err), 0);
    assert_int_equal(
        egpu__webhook_pki_new_leaf(&p, names4(), EGPU_WEBHOOK_SS_NAMES, NOW, 365 * 86400LL, &err),
        0);
    assert_non_null(strstr(p.ca_key, "BEGIN PRIVATE KEY"));
    assert_int_equal(egpu__webhook_pki_check(&p, names4(), EGPU_WEBHOOK_SS_NAMES, &info, &err), 0);
    assert_true(info.tls_matches);
    assert_int_equal(info.nca, 1);
    assert_int_equal(info.ca_not_after_s, NOW + 3650 * 86400LL);
    assert_int_equal(info.tls_not_after_s, NOW + 365 * 86400LL);

    /* a serving certificate never outlives its CA */
    assert_int_equal(
        egpu__webhook_pki_new_leaf(&p, names4(), EGPU_WEBHOOK_SS_NAMES, NOW, 4000 * 86400LL, &err),
        0);
    assert_int_equal(first_not_after(p.tls_crt), NOW + 3650 * 86400LL);

    /* a leaf renewal keeps the CA */
    ca1 = egpu_strdup(p.ca_crt);
    tls1 = egpu_strdup(p.tls_crt);
    assert_int_equal(
        egpu__webhook_pki_new_leaf(&p, names4(), EGPU_WEBHOOK_SS_NAMES, NOW + 10, 100, &err), 0);
    assert_string_equal(p.ca_crt, ca1);
    assert_string_not_equal(p.tls_crt, tls1);
    assert_int_equal(egpu__webhook_pki_check(&p, names4(), EGPU_WEBHOOK_SS_NAMES, &info, &err), 0);
    assert_true(info.tls_matches);

    /* other names: usable, but not for them */
    {
        char other[EGPU_WEBHOOK_SS_NAMES][EGPU_WEBHOOK_SS_NAME_MAX];

        assert_int_equal(egpu__webhook_ss_dns_names("egpu-webhook", "elsewhere", other), 0);
        assert_int_equal(egpu__webhook_pki_check(&p, (const char(*)[EGPU_WEBHOOK_SS_NAME_MAX])other,
                                                 EGPU_WEBHOOK_SS_NAMES, &info, &err),
                         0);
        assert_false(info.tls_matches);
    }

    /* a CA renewal: the new CA first, the old one after it; an expired one dropped */
    assert_int_equal(egpu__webhook_pki_new_ca("egpu-webhook-ca", NOW, 3650 * 86400LL, &p, &err), 0);
    assert_int_equal(egpu__webhook_pki_bundle_join(p.ca_crt, ca1, NOW, &bundle, &err), 0);
    assert_int_equal(count_certs(bundle), 2);
    assert_memory_equal(bundle, p.ca_crt, strlen(p.ca_crt));
    assert_string_equal(bundle + strlen(p.ca_crt), ca1);
    egpu_free(bundle);
    assert_int_equal(
        egpu__webhook_pki_bundle_join(p.ca_crt, ca1, NOW + 3651 * 86400LL, &bundle, &err), 0);
    assert_string_equal(bundle, p.ca_crt);
    egpu_free(bundle);

    /* the old leaf with the new CA: not of the CA */
    assert_int_equal(egpu__webhook_pki_check(&p, names4(), EGPU_WEBHOOK_SS_NAMES, &info, &err), 0);
    assert_false(info.tls_matches);

    /* a key that is not its certificate's */
    {
        char *key = p.tls_key;

        p.tls_key = p.ca_key;
        assert_int_equal(egpu__webhook_pki_check(&p, names4(), EGPU_WEBHOOK_SS_NAMES, &info, &err),
                         -EINVAL);
        assert_non_null(strstr(err.msg, "tls.key"));
        p.tls_key = key;
    }
    egpu_free(ca1);
    egpu_free(tls1);
    egpu__webhook_pki_clear(&p);
    assert_int_equal(egpu__webhook_pki_check(&p, names4(), EGPU_WEBHOOK_SS_NAMES, &info, &err),
                     -EINVAL);
}

static int parse(struct egpu__webhook_options *o, int argc, const char **argv)
{
    optind = 0;
    return egpu__webhook_options_parse(argc, (char **)argv, o);
}

static void test_options(void **state)
{
    struct egpu__webhook_options o;
    const char *plain[] = {"egpu-webhook", "--tls-cert", "c", "--tls-key", "k"};
    const char *on[] = {"egpu-webhook",
                        "--tls-cert",
                        "c",
                        "--tls-key",
                        "k",
                        "--self-signed",
                        "--self-signed-secret",
                        "s",
                        "--self-signed-cert-validity",
                        "20s",
                        "--self-signed-renew-before",
                        "10s"};

    (void)state;
    assert_int_equal(parse(&o, 5, plain), -1);
    assert_false(o.ss.enabled);
    assert_string_equal(o.ss.secret, "egpu-webhook-tls");
    assert_string_equal(o.ss.service, "egpu-webhook");
    assert_string_equal(o.ss.configuration, "elastic-gpu-webhook");
    assert_null(o.ss.ns);
    assert_int_equal(o.ss.ca_validity_s, 3650 * 86400LL);
    assert_int_equal(o.ss.cert_validity_s, 365 * 86400LL);
    assert_int_equal(o.ss.renew_before_s, 30 * 86400LL);
    assert_int_equal(o.ss.check_s, 3600);
    assert_int_equal(parse(&o, 12, on), -1);
    assert_true(o.ss.enabled);
    assert_string_equal(o.ss.secret, "s");
    assert_int_equal(o.ss.cert_validity_s, 20);
    assert_int_equal(o.ss.renew_before_s, 10);
    setenv("EGPU_SELF_SIGNED", "true", 1);
    setenv("EGPU_SELF_SIGNED_CHECK_INTERVAL", "5m", 1);
    assert_int_equal(parse(&o, 5, plain), -1);
    assert_true(o.ss.enabled);
    assert_int_equal(o.ss.check_s, 300);
    unsetenv("EGPU_SELF_SIGNED");
    unsetenv("EGPU_SELF_SIGNED_CHECK_INTERVAL");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_duration), cmocka_unit_test(test_dns_names),
        cmocka_unit_test(test_is_due),   cmocka_unit_test(test_base64),
        cmocka_unit_test(test_pki),      cmocka_unit_test(test_options),
    };

    egpu_log_level = -1;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
