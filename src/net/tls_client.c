/* net/tls_client.c - the check of TLS clients' certificates against a CA
 * bundle that is read again when its file changes (see tls_int.h, and "TLS
 * client certificates" in egpu/net.h; http.c hooks it into each handshake).
 *
 * DESIGN: the bundle becomes a GnuTLS trust list of our own
 * (gnutls_x509_trust_list_t), not part of the credentials libmicrohttpd
 * holds, so that it can be replaced while the server runs. A verification
 * holds tc->lock for its length (one or two signature checks, tens of
 * microseconds), so the list it uses cannot be freed under it and a
 * replaced list is freed at once. This server's callers keep their
 * connections (kube-scheduler, the API server), so handshakes are few and
 * serialising their checks costs nothing a caller notices.
 *
 * What is checked, as GnuTLS implements RFC 5280
 * (gnutls_x509_trust_list_verify_crt2): the chain the client sent, leaf
 * first, up to a trust anchor of the bundle: signatures, validity times,
 * CA constraints, and the key purpose TLS WWW client (1.3.6.1.5.5.7.3.2) on
 * every certificate that lists purposes (a server-only certificate of the
 * same CA is refused). Then the pinned common name, if any: exactly one CN
 * in the leaf's subject, equal byte for byte. That the client holds the
 * leaf's private key is GnuTLS's own check of its CertificateVerify
 * message, which fails the handshake by itself (in TLS 1.2 it comes after
 * this check, within the same handshake).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <gnutls/gnutls.h>
#include <gnutls/x509.h>

#include "egpu/log.h"
#include "egpu/net.h"
#include "tls_int.h"

struct egpu__tls_client {
    pthread_mutex_t lock;        /* guards tl and watch */
    char *ca_file;               /* copy of the path */
    char *cn;                    /* the pinned common name, or NULL */
    gnutls_x509_trust_list_t tl; /* the bundle in service */
    struct egpu__file_watch watch;
};

/* Read the bundle at path into a new trust list *out (free with
 * gnutls_x509_trust_list_deinit(*out, 1)), every certificate a trust
 * anchor, and the fstat of the file read into *id; *count says how many. */
static int ca_load(const char *path, gnutls_x509_trust_list_t *out, unsigned *count,
                   struct egpu__file_id *id, struct egpu_error *err)
{
    gnutls_x509_crt_t *crts = NULL;
    gnutls_x509_trust_list_t tl;
    gnutls_datum_t d;
    unsigned n = 0;
    size_t len = 0;
    char *pem = NULL;
    int rc, g;

    rc = egpu__read_pem(path, &pem, &len, id, err);
    if (rc != 0)
        return rc;
    d = (gnutls_datum_t){(unsigned char *)pem, (unsigned)len};
    g = gnutls_x509_crt_list_import2(&crts, &n, &d, GNUTLS_X509_FMT_PEM, 0);
    egpu_free(pem);
    if (g < 0 || n == 0) {
        rc = egpu_error_set(err, -EINVAL, "TLS client CA %s: %s", path,
                            g < 0 ? gnutls_strerror(g) : "no certificate");
        goto out_crts;
    }
    if (gnutls_x509_trust_list_init(&tl, 0) < 0) {
        rc = egpu_error_set(err, -ENOMEM, "TLS client CA %s: out of memory", path);
        goto out_crts;
    }
    /* The list owns the certificates it took (all, or the first g). */
    g = gnutls_x509_trust_list_add_cas(tl, crts, n, 0);
    if (g < 0 || (unsigned)g != n) {
        for (unsigned i = g < 0 ? 0 : (unsigned)g; i < n; i++)
            gnutls_x509_crt_deinit(crts[i]);
        gnutls_free(crts);
        gnutls_x509_trust_list_deinit(tl, 1);
        return egpu_error_set(err, -ENOMEM, "TLS client CA %s: out of memory", path);
    }
    gnutls_free(crts);
    *out = tl;
    *count = n;
    return 0;

out_crts:
    for (unsigned i = 0; i < n; i++)
        gnutls_x509_crt_deinit(crts[i]);
    gnutls_free(crts);
    return rc;
}

int egpu__tls_client_new(const char *ca_file, const char *cn, struct egpu__tls_client **out,
                         struct egpu_error *err)
{
    struct egpu__tls_client *tc;
    struct egpu__file_id id;
    unsigned n;
    int rc;

    if (cn != NULL && (cn[0] == '\0' || strlen(cn) > EGPU_HTTP_TLS_CLIENT_CN_MAX))
        return egpu_error_set(err, -EINVAL, "TLS client common name: expected 1..%d bytes, got %zu",
                              EGPU_HTTP_TLS_CLIENT_CN_MAX, strlen(cn));
    tc = egpu_calloc(1, sizeof(*tc));
    if (tc == NULL)
        return egpu_error_set(err, -ENOMEM, "TLS client CA: out of memory");
    pthread_mutex_init(&tc->lock, NULL);
    tc->ca_file = egpu_strdup(ca_file);
    tc->cn = cn != NULL ? egpu_strdup(cn) : NULL;
    if (tc->ca_file == NULL || (cn != NULL && tc->cn == NULL)) {
        rc = egpu_error_set(err, -ENOMEM, "TLS client CA: out of memory");
        goto out_free;
    }
    rc = ca_load(tc->ca_file, &tc->tl, &n, &id, err);
    if (rc != 0)
        goto out_free;
    tc->watch = (struct egpu__file_watch){.paths = {tc->ca_file}, .n = 1};
    egpu__file_watch_loaded(&tc->watch, &id, true);
    egpu_log(EGPU_LOG_INFO, "TLS client certificates required ca=%s certificates=%u cn=%s",
             tc->ca_file, n, tc->cn != NULL ? tc->cn : "(any)");
    *out = tc;
    return 0;

out_free:
    egpu__tls_client_free(tc);
    return rc;
}

void egpu__tls_client_free(struct egpu__tls_client *tc)
{
    if (tc == NULL)
        return;
    if (tc->tl != NULL)
        gnutls_x509_trust_list_deinit(tc->tl, 1);
    pthread_mutex_destroy(&tc->lock);
    egpu_free(tc->ca_file);
    egpu_free(tc->cn);
    egpu_free(tc);
}

/* Read the bundle again when its file changed, at most once per
 * EGPU__TLS_CHECK_MS (tc->lock held). */
static void ca_refresh(struct egpu__tls_client *tc)
{
    struct egpu_error err = {0};
    gnutls_x509_trust_list_t tl;
    struct egpu__file_id id;
    unsigned n;

    if (!egpu__file_watch_is_due(&tc->watch))
        return;
    if (ca_load(tc->ca_file, &tl, &n, &id, &err) != 0) {
        egpu__file_watch_failed(&tc->watch);
        egpu_log(EGPU_LOG_WARN,
                 "TLS client CA file changed but cannot be used; checking clients against "
                 "the previous one err=\"%s\"",
                 err.msg);
        return;
    }
    gnutls_x509_trust_list_deinit(tc->tl, 1);
    tc->tl = tl;
    egpu__file_watch_loaded(&tc->watch, &id, false);
    egpu_log(EGPU_LOG_NOTICE, "TLS client CA reloaded ca=%s certificates=%u", tc->ca_file, n);
}

/* Does crt's subject hold exactly one common name, and is it cn? */
static bool has_only_cn(gnutls_x509_crt_t crt, const char *cn)
{
    char buf[EGPU_HTTP_TLS_CLIENT_CN_MAX + 1];
    size_t size = sizeof(buf);

    if (gnutls_x509_crt_get_dn_by_oid(crt, GNUTLS_OID_X520_COMMON_NAME, 0, 0, buf, &size) < 0)
        return false; /* none, or longer than any name we pin */
    if (strlen(buf) != size || strcmp(buf, cn) != 0)
        return false; /* another name, or one with a NUL in it */
    size = sizeof(buf);
    return gnutls_x509_crt_get_dn_by_oid(crt, GNUTLS_OID_X520_COMMON_NAME, 1, 0, buf, &size) ==
           GNUTLS_E_REQUESTED_DATA_NOT_AVAILABLE;
}

/* Verify the n certificates of chain (leaf first) against the bundle in
 * service, for TLS client use. */
static int verify_chain(struct egpu__tls_client *tc, gnutls_x509_crt_t *chain, unsigned n,
                        char *why, size_t len)
{
    gnutls_typed_vdata_st purpose = {GNUTLS_DT_KEY_PURPOSE_OID,
                                     (unsigned char *)GNUTLS_KP_TLS_WWW_CLIENT, 0};
    gnutls_datum_t text = {NULL, 0};
    unsigned status = 0;
    int g;

    pthread_mutex_lock(&tc->lock);
    ca_refresh(tc);
    g = gnutls_x509_trust_list_verify_crt2(tc->tl, chain, n, &purpose, 1, 0, &status, NULL);
    pthread_mutex_unlock(&tc->lock);
    if (g < 0) {
        snprintf(why, len, "verification failed: %s", gnutls_strerror(g));
        return -EACCES;
    }
    if (status == 0)
        return 0;
    if (gnutls_certificate_verification_status_print(status, GNUTLS_CRT_X509, &text, 0) == 0) {
        snprintf(why, len, "%s", (const char *)text.data);
        gnutls_free(text.data);
    } else {
        snprintf(why, len, "not trusted (status 0x%x)", status);
    }
    return -EACCES;
}

int egpu__tls_client_verify(struct egpu__tls_client *tc, gnutls_session_t session, char *why,
                            size_t len)
{
    gnutls_x509_crt_t chain[EGPU_HTTP_TLS_CHAIN_MAX];
    const gnutls_datum_t *peers;
    unsigned n = 0, got = 0;
    int rc = -EACCES;

    peers = gnutls_certificate_get_peers(session, &n);
    if (peers == NULL || n == 0) {
        snprintf(why, len, "no client certificate");
        return -EACCES;
    }
    if (n > EGPU_HTTP_TLS_CHAIN_MAX) {
        snprintf(why, len, "a chain of %u certificates (at most %d)", n, EGPU_HTTP_TLS_CHAIN_MAX);
        return -EACCES;
    }
    for (; got < n; got++) {
        if (gnutls_x509_crt_init(&chain[got]) < 0) {
            snprintf(why, len, "out of memory");
            goto out_chain;
        }
        if (gnutls_x509_crt_import(chain[got], &peers[got], GNUTLS_X509_FMT_DER) < 0) {
            gnutls_x509_crt_deinit(chain[got]);
            snprintf(why, len, "certificate %u does not parse", got);
            goto out_chain;
        }
    }
    rc = verify_chain(tc, chain, n, why, len);
    if (rc == 0 && tc->cn != NULL && !has_only_cn(chain[0], tc->cn)) {
        snprintf(why, len, "subject common name is not %s, or not the only one", tc->cn);
        rc = -EACCES;
    }
out_chain:
    for (unsigned i = 0; i < got; i++)
        gnutls_x509_crt_deinit(chain[i]);
    return rc;
}

void egpu__tls_client_counts(struct egpu__tls_client *tc, uint64_t *reloads, uint64_t *failures)
{
    pthread_mutex_lock(&tc->lock);
    *reloads = tc->watch.reloads;
    *failures = tc->watch.failures;
    pthread_mutex_unlock(&tc->lock);
}
