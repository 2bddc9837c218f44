/* webhook/certs.c - the PKI of --self-signed: a CA, a serving certificate
 * signed by it, and the checks that say when either must be made again.
 *
 * Everything is PEM text (egpu_malloc'd, NUL-terminated) so it goes into the
 * Secret and the served files as it is. Keys are ECDSA P-256, signatures
 * SHA-256, serial numbers 16 random bytes (GnuTLS makes and parses all of
 * it; nothing here is hand-rolled). Times are Unix seconds, passed in, so
 * tests pin the clock.
 *
 * The CA certificate bundle (ca.crt, the configurations' caBundle) holds the
 * current CA first, then older CAs while they are still valid: a CA renewal
 * makes a new CA and a new serving certificate, and the replicas that still
 * serve a certificate of the old CA keep verifying until they read the
 * Secret again.
 *
 * DESIGN: a certificate starts CERT_BACKDATE_S before it is made, so an API
 * server whose clock is a little behind still accepts it; its end is
 * now + validity, and a serving certificate never outlives its CA.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>

#include "egpu/core.h"
#include "webhook_int.h"

#define CERT_BACKDATE_S 60
#define CA_BUNDLE_MAX   8 /* certificates in ca.crt; more is not ours */

void egpu__webhook_pki_clear(struct egpu__webhook_pki *p)
{
    egpu_free(p->ca_crt);
    egpu_free(p->ca_key);
    egpu_free(p->tls_crt);
    egpu_free(p->tls_key);
    *p = (struct egpu__webhook_pki){0};
}

int egpu__webhook_ss_parse_duration(const char *s, int64_t min_s, int64_t max_s, int64_t *out_s)
{
    unsigned long long n = 0;
    int64_t unit;
    const char *p = s;

    if (*p < '0' || *p > '9')
        return -EINVAL;
    for (; *p >= '0' && *p <= '9'; p++) {
        n = n * 10 + (unsigned)(*p - '0');
        if (n > (unsigned long long)max_s)
            return -ERANGE;
    }
    switch (*p) {
    case 's':
        unit = 1;
        break;
    case 'm':
        unit = 60;
        break;
    case 'h':
        unit = 3600;
        break;
    case 'd':
        unit = 86400;
        break;
    default:
        return -EINVAL;
    }
    if (p[1] != '\0')
        return -EINVAL;
    if ((int64_t)n > max_s / unit || (int64_t)n * unit < min_s || (int64_t)n * unit > max_s)
        return -ERANGE;
    *out_s = (int64_t)n * unit;
    return 0;
}

int egpu__webhook_ss_dns_names(const char *svc, const char *ns,
                               char names[EGPU_WEBHOOK_SS_NAMES][EGPU_WEBHOOK_SS_NAME_MAX])
{
    int n[EGPU_WEBHOOK_SS_NAMES];

    if (svc == NULL || ns == NULL || svc[0] == '\0' || ns[0] == '\0')
        return -EINVAL;
    n[0] = snprintf(names[0], EGPU_WEBHOOK_SS_NAME_MAX, "%s", svc);
    n[1] = snprintf(names[1], EGPU_WEBHOOK_SS_NAME_MAX, "%s.%s", svc, ns);
    n[2] = snprintf(names[2], EGPU_WEBHOOK_SS_NAME_MAX, "%s.%s.svc", svc, ns);
    n[3] = snprintf(names[3], EGPU_WEBHOOK_SS_NAME_MAX, "%s.%s.svc.cluster.local", svc, ns);
    for (int i = 0; i < EGPU_WEBHOOK_SS_NAMES; i++) {
        if (n[i] < 0 || n[i] >= EGPU_WEBHOOK_SS_NAME_MAX)
            return -ENAMETOOLONG;
    }
    return 0;
}

bool egpu__webhook_ss_is_due(int64_t not_after_s, int64_t now_s, int64_t renew_before_s)
{
    return now_s >= not_after_s - renew_before_s;
}

int egpu__webhook_b64_encode(const void *data, size_t len, char **out)
{
    gnutls_datum_t in = {(unsigned char *)(uintptr_t)data, (unsigned)len}, b64 = {NULL, 0};
    char *s;

    if (gnutls_base64_encode2(&in, &b64) != GNUTLS_E_SUCCESS)
        return -EINVAL;
    s = egpu_malloc(b64.size + 1);
    if (s != NULL) {
        memcpy(s, b64.data, b64.size);
        s[b64.size] = '\0';
    }
    gnutls_free(b64.data);
    if (s == NULL)
        return -ENOMEM;
    *out = s;
    return 0;
}

int egpu__webhook_b64_decode(const char *b64, char **out, size_t *len)
{
    gnutls_datum_t in = {(unsigned char *)(uintptr_t)b64, (unsigned)strlen(b64)}, raw = {NULL, 0};
    char *s;

    if (gnutls_base64_decode2(&in, &raw) != GNUTLS_E_SUCCESS)
        return -EINVAL;
    s = egpu_malloc((size_t)raw.size + 1);
    if (s != NULL) {
        memcpy(s, raw.data, raw.size);
        s[raw.size] = '\0';
        *len = raw.size;
    }
    gnutls_free(raw.data);
    if (s == NULL)
        return -ENOMEM;
    *out = s;
    return 0;
}

/* datum's bytes as a C string (egpu_malloc'd), then gnutls_free the datum. */
static int take_pem(gnutls_datum_t *d, char **out)
{
    char *s = egpu_malloc((size_t)d->size + 1);

    if (s != NULL) {
        memcpy(s, d->data, d->size);
        s[d->size] = '\0';
    }
    gnutls_free(d->data);
    *d = (gnutls_datum_t){NULL, 0};
    if (s == NULL)
        return -ENOMEM;
    egpu_free(*out);
    *out = s;
    return 0;
}

static int gerr(struct egpu_error *err, int g, const char *what)
{
    return egpu_error_set(err, g == GNUTLS_E_MEMORY_ERROR ? -ENOMEM : -EINVAL, "%s: %s", what,
                          gnutls_strerror(g));
}

static int new_key(gnutls_x509_privkey_t *key, struct egpu_error *err)
{
    int g = gnutls_x509_privkey_init(key);

    if (g < 0)
        return gerr(err, g, "key");
    g = gnutls_x509_privkey_generate(*key, GNUTLS_PK_ECDSA,
                                     GNUTLS_CURVE_TO_BITS(GNUTLS_ECC_CURVE_SECP256R1), 0);
    if (g < 0) {
        gnutls_x509_privkey_deinit(*key);
        return gerr(err, g, "generate an ECDSA P-256 key");
    }
    return 0;
}

/* The fields both kinds of certificate share: version, serial, times, the
 * subject's CN, the key and its id. */
static int crt_base(gnutls_x509_crt_t crt, gnutls_x509_privkey_t key, const char *cn, int64_t now_s,
                    int64_t not_after_s)
{
    unsigned char serial[16], id[64];
    size_t idlen = sizeof(id);
    int g;

    g = gnutls_rnd(GNUTLS_RND_NONCE, serial, sizeof(serial));
    serial[0] &= 0x7f; /* a positive INTEGER */
    serial[0] |= 0x01; /* and never one with a leading zero byte */
    if (g >= 0)
        g = gnutls_x509_crt_set_version(crt, 3);
    if (g >= 0)
        g = gnutls_x509_crt_set_serial(crt, serial, sizeof(serial));
    if (g >= 0)
        g = gnutls_x509_crt_set_activation_time(crt, (time_t)(now_s - CERT_BACKDATE_S));
    if (g >= 0)
        g = gnutls_x509_crt_set_expiration_time(crt, (time_t)not_after_s);
    if (g >= 0)
        g = gnutls_x509_crt_set_dn_by_oid(crt, GNUTLS_OID_X520_COMMON_NAME, 0, cn,
                                          (unsigned)strlen(cn));
    if (g >= 0)
        g = gnutls_x509_crt_set_key(crt, key);
    if (g >= 0)
        g = gnutls_x509_crt_get_key_id(crt, GNUTLS_KEYID_USE_SHA1, id, &idlen);
    if (g >= 0)
        g = gnutls_x509_crt_set_subject_key_id(crt, id, idlen);
    return g;
}

int egpu__webhook_pki_new_ca(const char *cn, int64_t now_s, int64_t validity_s,
                             struct egpu__webhook_pki *p, struct egpu_error *err)
{
    gnutls_x509_privkey_t key;
    gnutls_x509_crt_t crt;
    gnutls_datum_t d = {NULL, 0};
    char *crt_pem = NULL, *key_pem = NULL;
    int g, rc;

    rc = new_key(&key, err);
    if (rc)
        return rc;
    g = gnutls_x509_crt_init(&crt);
    if (g < 0) {
        gnutls_x509_privkey_deinit(key);
        return gerr(err, g, "CA certificate");
    }
    g = crt_base(crt, key, cn, now_s, now_s + validity_s);
    if (g >= 0)
        g = gnutls_x509_crt_set_basic_constraints(crt, 1, 0);
    if (g >= 0)
        g = gnutls_x509_crt_set_key_usage(crt, GNUTLS_KEY_KEY_CERT_SIGN | GNUTLS_KEY_CRL_SIGN |
                                                   GNUTLS_KEY_DIGITAL_SIGNATURE);
    if (g >= 0)
        g = gnutls_x509_crt_sign2(crt, crt, key, GNUTLS_DIG_SHA256, 0);
    if (g >= 0)
        g = gnutls_x509_crt_export2(crt, GNUTLS_X509_FMT_PEM, &d);
    rc = g < 0 ? gerr(err, g, "CA certificate") : take_pem(&d, &crt_pem);
    if (!rc) {
        g = gnutls_x509_privkey_export2_pkcs8(key, GNUTLS_X509_FMT_PEM, NULL, GNUTLS_PKCS_PLAIN,
                                              &d);
        rc = g < 0 ? gerr(err, g, "CA key") : take_pem(&d, &key_pem);
    }
    gnutls_x509_crt_deinit(crt);
    gnutls_x509_privkey_deinit(key);
    if (rc) {
        egpu_free(crt_pem);
        egpu_free(key_pem);
        return rc;
    }
    egpu_free(p->ca_crt);
    egpu_free(p->ca_key);
    p->ca_crt = crt_pem;
    p->ca_key = key_pem;
    return 0;
}

/* The first certificate of a PEM bundle, and how many it holds. */
static int import_bundle(const char *pem, gnutls_x509_crt_t **crts, unsigned *n)
{
    gnutls_datum_t d = {(unsigned char *)(uintptr_t)pem, (unsigned)strlen(pem)};
    int g = gnutls_x509_crt_list_import2(crts, n, &d, GNUTLS_X509_FMT_PEM, 0);

    if (g < 0 || *n == 0)
        return g < 0 ? g : GNUTLS_E_NO_CERTIFICATE_FOUND;
    return 0;
}

static void free_bundle(gnutls_x509_crt_t *crts, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        gnutls_x509_crt_deinit(crts[i]);
    gnutls_free(crts);
}

static int import_key(const char *pem, gnutls_x509_privkey_t *key)
{
    gnutls_datum_t d = {(unsigned char *)(uintptr_t)pem, (unsigned)strlen(pem)};
    int g = gnutls_x509_privkey_init(key);

    if (g < 0)
        return g;
    g = gnutls_x509_privkey_import(*key, &d, GNUTLS_X509_FMT_PEM);
    if (g < 0)
        gnutls_x509_privkey_deinit(*key);
    return g;
}

static bool is_key_of(gnutls_x509_crt_t crt, gnutls_x509_privkey_t key)
{
    unsigned char a[64], b[64];
    size_t na = sizeof(a), nb = sizeof(b);

    return gnutls_x509_crt_get_key_id(crt, GNUTLS_KEYID_USE_SHA256, a, &na) == 0 &&
           gnutls_x509_privkey_get_key_id(key, GNUTLS_KEYID_USE_SHA256, b, &nb) == 0 && na == nb &&
           memcmp(a, b, na) == 0;
}

int egpu__webhook_pki_new_leaf(struct egpu__webhook_pki *p,
                               const char names[][EGPU_WEBHOOK_SS_NAME_MAX], size_t n,
                               int64_t now_s, int64_t validity_s, struct egpu_error *err)
{
    gnutls_x509_crt_t *cas = NULL, crt = NULL;
    gnutls_x509_privkey_t ca_key = NULL, key = NULL;
    gnutls_datum_t d = {NULL, 0};
    unsigned nca = 0;
    unsigned char id[64];
    size_t idlen = sizeof(id);
    char *crt_pem = NULL, *key_pem = NULL;
    int64_t not_after;
    int g, rc = 0;

    if (p->ca_crt == NULL || p->ca_key == NULL || n == 0)
        return egpu_error_set(err, -EINVAL, "serving certificate: no CA");
    g = import_bundle(p->ca_crt, &cas, &nca);
    if (g < 0)
        return gerr(err, g, "ca.crt");
    g = import_key(p->ca_key, &ca_key);
    if (g < 0) {
        free_bundle(cas, nca);
        return gerr(err, g, "ca.key");
    }
    if (!is_key_of(cas[0], ca_key)) {
        rc = egpu_error_set(err, -EINVAL, "ca.key is not the key of ca.crt's first certificate");
        goto out_free_ca;
    }
    rc = new_key(&key, err);
    if (rc)
        goto out_free_ca;
    g = gnutls_x509_crt_init(&crt);
    if (g < 0) {
        rc = gerr(err, g, "serving certificate");
        goto out_free_key;
    }
    /* never past the CA's own end */
    not_after = now_s + validity_s;
    if ((int64_t)gnutls_x509_crt_get_expiration_time(cas[0]) < not_after)
        not_after = (int64_t)gnutls_x509_crt_get_expiration_time(cas[0]);
    g = crt_base(crt, key, names[n > 2 ? 2 : n - 1], now_s, not_after);
    for (size_t i = 0; g >= 0 && i < n; i++)
        g = gnutls_x509_crt_set_subject_alt_name(crt, GNUTLS_SAN_DNSNAME, names[i],
                                                 (unsigned)strlen(names[i]), GNUTLS_FSAN_APPEND);
    if (g >= 0)
        g = gnutls_x509_crt_set_basic_constraints(crt, 0, -1);
    if (g >= 0)
        g = gnutls_x509_crt_set_key_usage(crt, GNUTLS_KEY_DIGITAL_SIGNATURE);
    if (g >= 0)
        g = gnutls_x509_crt_set_key_purpose_oid(crt, GNUTLS_KP_TLS_WWW_SERVER, 0);
    if (g >= 0)
        g = gnutls_x509_crt_get_subject_key_id(cas[0], id, &idlen, NULL);
    if (g >= 0)
        g = gnutls_x509_crt_set_authority_key_id(crt, id, idlen);
    if (g >= 0)
        g = gnutls_x509_crt_sign2(crt, cas[0], ca_key, GNUTLS_DIG_SHA256, 0);
    if (g >= 0)
        g = gnutls_x509_crt_export2(crt, GNUTLS_X509_FMT_PEM, &d);
    rc = g < 0 ? gerr(err, g, "serving certificate") : take_pem(&d, &crt_pem);
    if (!rc) {
        g = gnutls_x509_privkey_export2_pkcs8(key, GNUTLS_X509_FMT_PEM, NULL, GNUTLS_PKCS_PLAIN,
                                              &d);
        rc = g < 0 ? gerr(err, g, "serving key") : take_pem(&d, &key_pem);
    }
    if (!rc) {
        egpu_free(p->tls_crt);
        egpu_free(p->tls_key);
        p->tls_crt = crt_pem;
        p->tls_key = key_pem;
        crt_pem = key_pem = NULL;
    }
    egpu_free(crt_pem);
    egpu_free(key_pem);
    gnutls_x509_crt_deinit(crt);
out_free_key:
    gnutls_x509_privkey_deinit(key);
out_free_ca:
    gnutls_x509_privkey_deinit(ca_key);
    free_bundle(cas, nca);
    return rc;
}

int egpu__webhook_pki_check(const struct egpu__webhook_pki *p,
                            const char names[][EGPU_WEBHOOK_SS_NAME_MAX], size_t n,
                            struct egpu__webhook_pki_info *out, struct egpu_error *err)
{
    gnutls_x509_crt_t *cas = NULL, *leaf = NULL;
    gnutls_x509_privkey_t ca_key = NULL, key = NULL;
    unsigned nca = 0, nleaf = 0, status = 0;
    int g, rc = 0;

    if (p->ca_crt == NULL || p->ca_key == NULL || p->tls_crt == NULL || p->tls_key == NULL)
        return egpu_error_set(err, -EINVAL, "ca.crt, ca.key, tls.crt or tls.key missing");
    g = import_bundle(p->ca_crt, &cas, &nca);
    if (g < 0)
        return gerr(err, g, "ca.crt");
    g = import_key(p->ca_key, &ca_key);
    if (g < 0) {
        rc = gerr(err, g, "ca.key");
        goto out_free_cas;
    }
    if (!is_key_of(cas[0], ca_key)) {
        rc = egpu_error_set(err, -EINVAL, "ca.key is not the key of ca.crt's first certificate");
        goto out_free_ca_key;
    }
    g = import_bundle(p->tls_crt, &leaf, &nleaf);
    if (g < 0) {
        rc = gerr(err, g, "tls.crt");
        goto out_free_ca_key;
    }
    g = import_key(p->tls_key, &key);
    if (g < 0) {
        rc = gerr(err, g, "tls.key");
        goto out_free_leaf;
    }
    if (!is_key_of(leaf[0], key)) {
        rc = egpu_error_set(err, -EINVAL, "tls.key is not the key of tls.crt");
        goto out_free_key;
    }
    out->ca_not_after_s = (int64_t)gnutls_x509_crt_get_expiration_time(cas[0]);
    out->tls_not_after_s = (int64_t)gnutls_x509_crt_get_expiration_time(leaf[0]);
    out->nca = nca;
    /* the serving certificate must come from the current CA and name every name */
    g = gnutls_x509_crt_verify(leaf[0], cas, 1, GNUTLS_VERIFY_DISABLE_TIME_CHECKS, &status);
    out->tls_matches = g == 0 && status == 0;
    for (size_t i = 0; out->tls_matches && i < n; i++)
        out->tls_matches = gnutls_x509_crt_check_hostname2(leaf[0], names[i], 0) != 0;
out_free_key:
    gnutls_x509_privkey_deinit(key);
out_free_leaf:
    free_bundle(leaf, nleaf);
out_free_ca_key:
    gnutls_x509_privkey_deinit(ca_key);
out_free_cas:
    free_bundle(cas, nca);
    return rc;
}

int egpu__webhook_pki_bundle_join(const char *newer, const char *older, int64_t now_s, char **out,
                                  struct egpu_error *err)
{
    gnutls_x509_crt_t *crts = NULL;
    unsigned n = 0;
    struct egpu_buf b;
    int g, rc;

    egpu_buf_init(&b, 64 * 1024);
    rc = egpu_buf_append(&b, newer, strlen(newer));
    if (!rc && older != NULL && older[0] != '\0') {
        g = import_bundle(older, &crts, &n);
        if (g < 0) {
            egpu_buf_free(&b);
            return gerr(err, g, "ca.crt");
        }
        for (unsigned i = 0; !rc && i < n && i + 1 < CA_BUNDLE_MAX; i++) {
            gnutls_datum_t d = {NULL, 0};

            if ((int64_t)gnutls_x509_crt_get_expiration_time(crts[i]) <= now_s)
                continue; /* expired: nothing it signed verifies any more */
            g = gnutls_x509_crt_export2(crts[i], GNUTLS_X509_FMT_PEM, &d);
            rc = g < 0 ? gerr(err, g, "ca.crt") : egpu_buf_append(&b, d.data, d.size);
            gnutls_free(d.data);
        }
        free_bundle(crts, n);
    }
    if (!rc && b.data == NULL)
        rc = -EINVAL;
    if (rc) {
        egpu_buf_free(&b);
        return egpu_error_set(err, rc, "ca.crt: %s", egpu_strerror(rc));
    }
    *out = egpu_buf_take(&b);
    return 0;
}
