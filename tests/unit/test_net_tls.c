/* tests/unit/test_net_tls.c - the HTTPS server's certificate, read again
 * when its files change, and its check of clients' certificates (mutual
 * TLS), against a real TLS client (libcurl over OpenSSL).
 *
 * Certificates are made at test time by openssl(1): two CAs and leaves
 * signed by each (EC P-256, SAN localhost and 127.0.0.1). The files sit in
 * the layout of a Kubernetes Secret volume: tls.crt and tls.key are links
 * through ..data, a link to a timestamped directory, and an update writes a
 * new directory and renames a new ..data link over the old one. The tests
 * show that a kept-alive connection keeps its session across a rotation
 * (same socket, no new connect), that a new connection gets the new
 * certificate (it verifies against the second CA and not against the first),
 * that files that cannot be used (a half-written certificate, a key of
 * another certificate) leave the previous pair in service and are counted
 * once, and that a pair that does not match is refused at start.
 *
 * With a client CA (tls_client_ca) the server serves a client whose
 * certificate CA 1 signed for client use, and refuses, in TLS 1.3 and 1.2,
 * a client without a certificate, one of CA 2, and CA 1's server
 * certificate (not for clients), while it goes on serving the trusted one
 * (a kept connection and new ones); with a pinned common name it refuses
 * CA 1's client certificate of another name; a new CA bundle in the Secret
 * volume turns the verdicts round for new connections, and a bad one is
 * not taken; a bad CA file or name is refused at start.
 *
 * Only TLS 1.2 and 1.3 are negotiated (a client of TLS 1.0 or 1.1
 * only fails its handshake), and a connection that has not finished its
 * handshake handshake_timeout_s after it opened (silent, or stopped inside
 * its ClientHello) is closed and counted, while one that finished it and
 * then waits stays open until the idle timeout. Without openssl the tests
 * skip, or fail when CI=true. */
#define _GNU_SOURCE /* mkdtemp */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "testutil.h"
#include "egpu/net.h"

struct pki {
    char dir[64];      /* mkdtemp'd; everything below lives in it */
    char vol[128];     /* the Secret volume: tls.crt, tls.key, ..data */
    char cert[160];    /* vol/tls.crt (through ..data) */
    char key[160];     /* vol/tls.key */
    char ca[2][128];   /* ca1.crt, ca2.crt */
    char leaf[3][128]; /* leaf1.crt (CA 1), leaf2.crt (CA 2), leaf3.crt (CA 1) */
    char lkey[3][128]; /* their keys */
    int version;       /* ..vN directories written so far */
    /* pki_make_mtls: client certificates (extendedKeyUsage clientAuth) */
    char client[3][128]; /* client1.crt (CA 1, CN kube-scheduler), client2.crt (CA 2, the
                            same CN), client3.crt (CA 1, CN intruder) */
    char ckey[3][128];   /* their keys */
    char cavol[128];     /* a second Secret volume: ca.crt through ..data */
    char cafile[160];    /* cavol/ca.crt */
    int ca_version;      /* its ..vN directories */
};

struct reply {
    long status;
    char body[16384];
    size_t len;
};

static size_t on_body(char *data, size_t size, size_t n, void *arg)
{
    struct reply *r = arg;
    size_t len = size * n;

    if (r->len + len >= sizeof(r->body))
        return 0;
    memcpy(r->body + r->len, data, len);
    r->len += len;
    r->body[r->len] = '\0';
    return len;
}

static int on_hello(void *data, const struct egpu_http_request *req,
                    struct egpu_http_response *resp)
{
    (void)data;
    (void)req;
    return egpu_http_response_text(resp, 200, "hello tls");
}

/* ------------------------------------------------------------------------ */
/* Certificates and files                                                   */

static void need_openssl(void)
{
    if (system("command -v openssl >/dev/null 2>&1") != 0)
        tu_skip("openssl is not installed (scripts/deps.sh installs it)");
}

static void sh(const char *fmt, ...) EGPU_PRINTF(1, 2);

static void sh(const char *fmt, ...)
{
    char cmd[2048];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    assert_true(n > 0 && (size_t)n < sizeof(cmd));
    if (system(cmd) != 0)
        fail_msg("command failed: %s", cmd);
}

static void pki_make(struct pki *p)
{
    static const int issuer[3] = {0, 1, 0};

    memset(p, 0, sizeof(*p));
    snprintf(p->dir, sizeof(p->dir), "/tmp/egpu-tls-rot-XXXXXX");
    assert_non_null(mkdtemp(p->dir));
    sh("printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\nbasicConstraints=CA:FALSE\\n"
       "extendedKeyUsage=serverAuth\\n' > %s/leaf.ext",
       p->dir);
    for (int i = 0; i < 2; i++) {
        snprintf(p->ca[i], sizeof(p->ca[i]), "%s/ca%d.crt", p->dir, i + 1);
        sh("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
           "-subj /CN=egpu-test-ca-%d -days 2 -addext basicConstraints=critical,CA:TRUE "
           "-addext keyUsage=critical,keyCertSign -keyout %s/ca%d.key -out %s >/dev/null 2>&1",
           i + 1, p->dir, i + 1, p->ca[i]);
    }
    for (int i = 0; i < 3; i++) {
        snprintf(p->leaf[i], sizeof(p->leaf[i]), "%s/leaf%d.crt", p->dir, i + 1);
        snprintf(p->lkey[i], sizeof(p->lkey[i]), "%s/leaf%d.key", p->dir, i + 1);
        sh("openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
           "-subj /CN=localhost -keyout %s -out %s/leaf%d.csr >/dev/null 2>&1 && "
           "openssl x509 -req -in %s/leaf%d.csr -CA %s -CAkey %s/ca%d.key -set_serial %d "
           "-days 1 -extfile %s/leaf.ext -out %s >/dev/null 2>&1",
           p->lkey[i], p->dir, i + 1, p->dir, i + 1, p->ca[issuer[i]], p->dir, issuer[i] + 1,
           100 + i, p->dir, p->leaf[i]);
    }
    snprintf(p->vol, sizeof(p->vol), "%s/vol", p->dir);
    assert_int_equal(mkdir(p->vol, 0700), 0);
    snprintf(p->cert, sizeof(p->cert), "%s/tls.crt", p->vol);
    snprintf(p->key, sizeof(p->key), "%s/tls.key", p->vol);
}

static void copy_file(const char *from, const char *to)
{
    char buf[8192];
    ssize_t n;
    int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0600);

    assert_true(in >= 0 && out >= 0);
    while ((n = read(in, buf, sizeof(buf))) > 0)
        assert_int_equal(write(out, buf, (size_t)n), n);
    assert_int_equal(n, 0);
    close(in);
    close(out);
}

/* Publish files (n of them, under names) into the Secret volume vol as the
 * kubelet updates one: a new ..vN directory, then a new ..data link renamed
 * over the old one. The first call (*version 0) also makes vol/<name>,
 * links through ..data. */
static void vol_publish(const char *vol, int *version, const char *const *names,
                        const char *const *files, int n)
{
    char dir[192], path[256], link[192], tmp[192];

    (*version)++;
    snprintf(dir, sizeof(dir), "%s/..v%d", vol, *version);
    assert_int_equal(mkdir(dir, 0700), 0);
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        copy_file(files[i], path);
    }
    snprintf(link, sizeof(link), "..v%d", *version);
    snprintf(tmp, sizeof(tmp), "%s/..data_tmp", vol);
    assert_int_equal(symlink(link, tmp), 0);
    snprintf(path, sizeof(path), "%s/..data", vol);
    assert_int_equal(rename(tmp, path), 0);
    for (int i = 0; i < n && *version == 1; i++) {
        snprintf(link, sizeof(link), "..data/%s", names[i]);
        snprintf(path, sizeof(path), "%s/%s", vol, names[i]);
        assert_int_equal(symlink(link, path), 0);
    }
}

/* Publish cert and key as the Secret volume's tls.crt and tls.key. */
static void pki_publish(struct pki *p, const char *cert, const char *key)
{
    static const char *const names[] = {"tls.crt", "tls.key"};
    const char *const files[] = {cert, key};

    vol_publish(p->vol, &p->version, names, files, 2);
}

/* Publish ca as the second Secret volume's ca.crt (p->cafile). */
static void pki_publish_ca(struct pki *p, const char *ca)
{
    static const char *const names[] = {"ca.crt"};

    vol_publish(p->cavol, &p->ca_version, names, &ca, 1);
}

/* pki_make, then the client certificates and the CA volume (skips
 * without openssl). */
static void pki_make_mtls(struct pki *p)
{
    static const int issuer[3] = {0, 1, 0};
    static const char *const cn[3] = {"kube-scheduler", "kube-scheduler", "intruder"};

    need_openssl();
    pki_make(p);
    sh("printf 'basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n' > %s/client.ext", p->dir);
    for (int i = 0; i < 3; i++) {
        snprintf(p->client[i], sizeof(p->client[i]), "%s/client%d.crt", p->dir, i + 1);
        snprintf(p->ckey[i], sizeof(p->ckey[i]), "%s/client%d.key", p->dir, i + 1);
        sh("openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
           "-subj /CN=%s -keyout %s -out %s/client%d.csr >/dev/null 2>&1 && "
           "openssl x509 -req -in %s/client%d.csr -CA %s -CAkey %s/ca%d.key -set_serial %d "
           "-days 1 -extfile %s/client.ext -out %s >/dev/null 2>&1",
           cn[i], p->ckey[i], p->dir, i + 1, p->dir, i + 1, p->ca[issuer[i]], p->dir, issuer[i] + 1,
           200 + i, p->dir, p->client[i]);
    }
    snprintf(p->cavol, sizeof(p->cavol), "%s/cavol", p->dir);
    assert_int_equal(mkdir(p->cavol, 0700), 0);
    snprintf(p->cafile, sizeof(p->cafile), "%s/ca.crt", p->cavol);
}

static void pki_remove(struct pki *p)
{
    sh("rm -rf %s", p->dir);
}

/* Wait past the server's once-a-second look at the files. */
static void wait_check_period(void)
{
    struct timespec ts = {1, 200 * 1000000L};

    nanosleep(&ts, NULL);
}

/* ------------------------------------------------------------------------ */
/* Client                                                                   */

/* GET path on h (kept between calls: same connection when it can) trusting
 * ca. Returns curl's result; fills r and the connection facts. */
static CURLcode get_path(CURL *h, uint16_t port, const char *ca, const char *path, struct reply *r,
                         long *connects, long *local_port)
{
    char url[96];
    CURLcode rc;

    snprintf(url, sizeof(url), "https://localhost:%u%s", (unsigned)port, path);
    memset(r, 0, sizeof(*r));
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CAINFO, ca);
    curl_easy_setopt(h, CURLOPT_CAPATH, NULL);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 20L);
    rc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r->status);
    if (connects != NULL)
        curl_easy_getinfo(h, CURLINFO_NUM_CONNECTS, connects);
    if (local_port != NULL)
        curl_easy_getinfo(h, CURLINFO_LOCAL_PORT, local_port);
    return rc;
}

static CURLcode get_hello(CURL *h, uint16_t port, const char *ca, struct reply *r, long *connects,
                          long *local_port)
{
    return get_path(h, port, ca, "/hello", r, connects, local_port);
}

/* A new connection trusting only ca: does the server's certificate verify? */
static bool verifies_with(uint16_t port, const char *ca)
{
    CURL *h = curl_easy_init();
    struct reply r;
    long connects = 0;
    CURLcode rc;

    assert_non_null(h);
    rc = get_hello(h, port, ca, &r, &connects, NULL);
    curl_easy_cleanup(h);
    if (rc == CURLE_OK) {
        assert_int_equal(connects, 1);
        assert_int_equal(r.status, 200);
        assert_string_equal(r.body, "hello tls");
        return true;
    }
    /* Refused for the certificate, nothing else (curl 7.88 says 60). */
    assert_int_equal(rc, CURLE_PEER_FAILED_VERIFICATION);
    return false;
}

/* A curl handle that presents cert and key (NULL: no certificate). */
static CURL *client_new(const char *cert, const char *key)
{
    CURL *h = curl_easy_init();

    assert_non_null(h);
    if (cert != NULL) {
        curl_easy_setopt(h, CURLOPT_SSLCERT, cert);
        curl_easy_setopt(h, CURLOPT_SSLKEY, key);
    }
    return h;
}

/* A new connection from a client that presents cert and key (NULL: no
 * certificate), speaking TLS 1.2 at most when tls12, trusting ca: the
 * status of GET /hello, or 0 when the server refused the client before any
 * response (curl then reports the failed handshake or the connection
 * closed under the first read, never a failure to connect). */
static long hello_as(uint16_t port, const char *ca, const char *cert, const char *key, bool tls12)
{
    CURL *h = client_new(cert, key);
    struct reply r;
    CURLcode rc;

    if (tls12)
        curl_easy_setopt(h, CURLOPT_SSLVERSION,
                         (long)(CURL_SSLVERSION_TLSv1_2 | CURL_SSLVERSION_MAX_TLSv1_2));
    rc = get_hello(h, port, ca, &r, NULL, NULL);
    curl_easy_cleanup(h);
    if (rc != CURLE_OK) {
        if (rc != CURLE_SSL_CONNECT_ERROR && rc != CURLE_RECV_ERROR && rc != CURLE_SEND_ERROR &&
            rc != CURLE_GOT_NOTHING)
            fail_msg("client refused by something else than TLS: curl %d %s", (int)rc,
                     curl_easy_strerror(rc));
        assert_int_equal(r.len, 0);
        return 0;
    }
    if (r.status == 200)
        assert_string_equal(r.body, "hello tls");
    return r.status;
}

/* Start an HTTPS server of /hello on cfg's bind address, threads and TLS
 * files; with health, also the health endpoints and metrics (free *health
 * after the server). */
static struct egpu_http_server *start_cfg(const struct egpu_http_config *cfg,
                                          struct egpu_metrics *reg, struct egpu_health **health)
{
    struct egpu_http_server *srv;
    struct egpu_error err = {0};

    if (egpu_http_server_new(cfg, &srv, &err) != 0)
        fail_msg("server new: %s", err.msg);
    assert_int_equal(egpu_http_server_route(srv, "GET", "/hello", on_hello, NULL), 0);
    if (health != NULL && egpu_health_new(srv, reg, NULL, NULL, health, &err) != 0)
        fail_msg("health: %s", err.msg);
    if (egpu_http_server_start(srv, &err) != 0)
        fail_msg("start: %s", err.msg);
    return srv;
}

/* start_cfg on cert and key, without client certificates. */
static struct egpu_http_server *start(const char *cert, const char *key, struct egpu_metrics *reg,
                                      struct egpu_health **health)
{
    struct egpu_http_config cfg = {
        .bind_addr = "127.0.0.1", .threads = 2, .tls_cert_file = cert, .tls_key_file = key};

    return start_cfg(&cfg, reg, health);
}

/* A TCP connection from 127.0.0.2 to 127.0.0.1:port. */
static int tcp_connect(uint16_t port)
{
    struct sockaddr_in a = {.sin_family = AF_INET}, to = {.sin_family = AF_INET};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    assert_true(fd >= 0);
    inet_pton(AF_INET, "127.0.0.2", &a.sin_addr);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    to.sin_port = htons(port);
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    assert_int_equal(connect(fd, (struct sockaddr *)&to, sizeof(to)), 0);
    return fd;
}

static double mono_s(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Seconds until the server closes fd (EOF or reset; bytes it sends, such
 * as an alert, are read and dropped), at most limit_s. */
static double seconds_to_close(int fd, double limit_s)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    double t0 = mono_s();
    char buf[512];

    while (mono_s() - t0 < limit_s) {
        if (poll(&p, 1, 100) == 1 && recv(fd, buf, sizeof(buf), 0) <= 0)
            return mono_s() - t0;
    }
    return limit_s;
}

/* Only the TLS versions vmin..vmax (CURL_SSLVERSION_*) offered, with
 * OpenSSL's security level 0 so that the client itself offers TLS 1.0 and
 * 1.1: does GET /hello succeed? */
static bool hello_with_versions(uint16_t port, const char *ca, long vmin, long vmax)
{
    CURL *h = curl_easy_init();
    struct reply r;
    CURLcode rc;

    assert_non_null(h);
    curl_easy_setopt(h, CURLOPT_SSLVERSION, vmin | vmax);
    curl_easy_setopt(h, CURLOPT_SSL_CIPHER_LIST, "DEFAULT:@SECLEVEL=0");
    rc = get_hello(h, port, ca, &r, NULL, NULL);
    curl_easy_cleanup(h);
    if (rc == CURLE_OK)
        assert_int_equal(r.status, 200);
    else
        assert_int_equal(rc, CURLE_SSL_CONNECT_ERROR);
    return rc == CURLE_OK;
}

/* A TLS connection made with CONNECT_ONLY (handshake done, no request),
 * then idle for wait_ms, then GET /hello sent by hand on it: the reply's
 * first bytes, or "" when the server had closed it. */
static void hello_after_handshake(uint16_t port, const char *ca, long version, long wait_ms,
                                  char *out, size_t cap)
{
    static const char req[] = "GET /hello HTTP/1.1\r\nHost: localhost\r\n\r\n";
    CURL *h = curl_easy_init();
    char url[64];
    size_t n = 0, got;
    double t0;

    assert_non_null(h);
    snprintf(url, sizeof(url), "https://localhost:%u/", (unsigned)port);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CAINFO, ca);
    curl_easy_setopt(h, CURLOPT_CAPATH, NULL);
    curl_easy_setopt(h, CURLOPT_SSLVERSION, version);
    curl_easy_setopt(h, CURLOPT_CONNECT_ONLY, 1L);
    assert_int_equal(curl_easy_perform(h), CURLE_OK);
    usleep((useconds_t)wait_ms * 1000);
    out[0] = '\0';
    if (curl_easy_send(h, req, sizeof(req) - 1, &got) == CURLE_OK) {
        t0 = mono_s();
        while (n + 1 < cap && mono_s() - t0 < 5.0) {
            CURLcode rc = curl_easy_recv(h, out + n, cap - 1 - n, &got);

            if (rc == CURLE_AGAIN) {
                usleep(10000);
                continue;
            }
            if (rc != CURLE_OK || got == 0)
                break;
            n += got;
            out[n] = '\0';
            if (strstr(out, "hello tls") != NULL)
                break;
        }
    }
    curl_easy_cleanup(h);
}

/* ------------------------------------------------------------------------ */
/* Tests                                                                    */

/* TLS 1.2 and 1.3 only. Before, a client offering only
 * TLS 1.0 or 1.1 was served in it. */
static void test_tls_versions(void **state)
{
    struct egpu_http_server *srv;
    struct pki p;
    long live = egpu_alloc_live();
    uint16_t port;

    (void)state;
    need_openssl();
    pki_make(&p);
    pki_publish(&p, p.leaf[0], p.lkey[0]);
    srv = start(p.cert, p.key, NULL, NULL);
    port = egpu_http_server_port(srv);
    assert_false(
        hello_with_versions(port, p.ca[0], CURL_SSLVERSION_TLSv1_0, CURL_SSLVERSION_MAX_TLSv1_0));
    assert_false(
        hello_with_versions(port, p.ca[0], CURL_SSLVERSION_TLSv1_1, CURL_SSLVERSION_MAX_TLSv1_1));
    assert_false(
        hello_with_versions(port, p.ca[0], CURL_SSLVERSION_TLSv1_0, CURL_SSLVERSION_MAX_TLSv1_1));
    assert_true(
        hello_with_versions(port, p.ca[0], CURL_SSLVERSION_TLSv1_2, CURL_SSLVERSION_MAX_TLSv1_2));
    assert_true(
        hello_with_versions(port, p.ca[0], CURL_SSLVERSION_TLSv1_3, CURL_SSLVERSION_MAX_TLSv1_3));
    /* A client of 1.0..1.3 gets 1.2 or better, not refused. */
    assert_true(
        hello_with_versions(port, p.ca[0], CURL_SSLVERSION_TLSv1_0, CURL_SSLVERSION_MAX_DEFAULT));
    egpu_http_server_free(srv);
    assert_int_equal(egpu_alloc_live(), live);
    pki_remove(&p);
}

/* A connection that has not finished its TLS handshake
 * handshake_timeout_s (1) after it opened is closed and counted: one that
 * sends nothing and one that stops inside its ClientHello (before, they
 * were held to the idle timeout, 4 s here, or the request timeout). A
 * client that finished its handshake, in TLS 1.2 or 1.3, and then waits 2 s
 * before its request is served on the same connection. */
static void test_handshake_deadline(void **state)
{
    /* A TLS record header (handshake, TLS 1.0 record version, 512 bytes)
     * and the start of a ClientHello: the rest never comes. */
    static const unsigned char part[] = {0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00,
                                         0x01, 0xfc, 0x03, 0x03, 0x11, 0x22, 0x33};
    struct egpu_http_config cfg = {.bind_addr = "127.0.0.1",
                                   .threads = 2,
                                   .timeout_s = 4,
                                   .request_timeout_s = 3,
                                   .handshake_timeout_s = 1};
    struct egpu_http_conn_stats st;
    struct egpu_http_server *srv;
    struct egpu_metrics *reg;
    struct egpu_health *health;
    struct reply r;
    struct pki p;
    char out[1024];
    double t;
    long live = egpu_alloc_live();
    uint16_t port;
    CURL *h;
    int fd;

    (void)state;
    need_openssl();
    pki_make(&p);
    pki_publish(&p, p.leaf[0], p.lkey[0]);
    cfg.tls_cert_file = p.cert;
    cfg.tls_key_file = p.key;
    reg = egpu_metrics_new();
    assert_non_null(reg);
    srv = start_cfg(&cfg, reg, &health);
    port = egpu_http_server_port(srv);

    fd = tcp_connect(port); /* silent */
    t = seconds_to_close(fd, 6.0);
    close(fd);
    assert_true(t >= 0.9 && t < 2.5);
    fd = tcp_connect(port); /* part of a ClientHello, at once */
    assert_int_equal(send(fd, part, sizeof(part), MSG_NOSIGNAL), (ssize_t)sizeof(part));
    t = seconds_to_close(fd, 6.0);
    close(fd);
    assert_true(t >= 0.9 && t < 2.5);
    egpu_http_server_conn_stats(srv, &st);
    assert_int_equal(st.timed_out_handshake, 2);
    assert_int_equal(st.timed_out_idle + st.timed_out_slow, 0);

    hello_after_handshake(port, p.ca[0],
                          (long)(CURL_SSLVERSION_TLSv1_2 | CURL_SSLVERSION_MAX_TLSv1_2), 2000, out,
                          sizeof(out));
    assert_non_null(strstr(out, "hello tls"));
    hello_after_handshake(port, p.ca[0],
                          (long)(CURL_SSLVERSION_TLSv1_3 | CURL_SSLVERSION_MAX_TLSv1_3), 2000, out,
                          sizeof(out));
    assert_non_null(strstr(out, "hello tls"));
    egpu_http_server_conn_stats(srv, &st);
    assert_int_equal(st.timed_out_handshake, 2);

    h = curl_easy_init();
    assert_int_equal(get_path(h, port, p.ca[0], "/metrics", &r, NULL, NULL), CURLE_OK);
    assert_non_null(
        strstr(r.body, "egpu_http_connections_timed_out_total{reason=\"handshake\"} 2\n"));
    curl_easy_cleanup(h);
    egpu_http_server_free(srv);
    egpu_health_free(health);
    egpu_metrics_free(reg);
    assert_int_equal(egpu_alloc_live(), live);
    pki_remove(&p);
}

static void test_rotation_keeps_connections(void **state)
{
    struct egpu_http_tls_stats st;
    struct egpu_http_server *srv;
    struct egpu_metrics *reg;
    struct egpu_health *health;
    struct pki p;
    struct reply r;
    char line[128];
    long connects, port_before, port_after, live = egpu_alloc_live();
    uint16_t port;
    CURL *kept;

    (void)state;
    need_openssl();
    pki_make(&p);
    pki_publish(&p, p.leaf[0], p.lkey[0]);
    reg = egpu_metrics_new();
    assert_non_null(reg);
    srv = start(p.cert, p.key, reg, &health);
    port = egpu_http_server_port(srv);
    egpu_http_server_tls_stats(srv, &st);
    assert_int_equal(st.generation, 1);
    assert_int_equal(st.reloads, 0);
    assert_true(st.not_after_s > (int64_t)time(NULL));

    /* A client keeps one connection; the server presents CA 1's leaf. */
    kept = curl_easy_init();
    assert_non_null(kept);
    assert_int_equal(get_hello(kept, port, p.ca[0], &r, &connects, &port_before), CURLE_OK);
    assert_int_equal(r.status, 200);
    assert_int_equal(connects, 1);
    assert_false(verifies_with(port, p.ca[1]));

    /* The Secret is updated to CA 2's leaf. */
    pki_publish(&p, p.leaf[1], p.lkey[1]);
    wait_check_period();
    /* The kept connection still answers, on the same socket: no new connect. */
    assert_int_equal(get_hello(kept, port, p.ca[0], &r, &connects, &port_after), CURLE_OK);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "hello tls");
    assert_int_equal(connects, 0);
    assert_int_equal(port_after, port_before);
    /* A new connection gets the new certificate: CA 2 verifies it, CA 1 not. */
    assert_true(verifies_with(port, p.ca[1]));
    assert_false(verifies_with(port, p.ca[0]));
    egpu_http_server_tls_stats(srv, &st);
    assert_int_equal(st.generation, 2);
    assert_int_equal(st.reloads, 1);
    assert_int_equal(st.reload_failures, 0);
    assert_int_equal(st.retained, 1); /* the kept connection opened with pair 1 */
    /* Still the same connection after the new ones came and went, and the
     * metrics say what happened. */
    assert_int_equal(get_path(kept, port, p.ca[0], "/metrics", &r, &connects, &port_after),
                     CURLE_OK);
    assert_int_equal(r.status, 200);
    assert_int_equal(connects, 0);
    assert_int_equal(port_after, port_before);
    assert_non_null(strstr(r.body, "\negpu_http_tls_reloads_total 1\n"));
    assert_non_null(strstr(r.body, "\negpu_http_tls_reload_failures_total 0\n"));
    snprintf(line, sizeof(line),
             "\negpu_http_tls_certificate_expiry_timestamp_seconds %" PRId64 "\n", st.not_after_s);
    assert_non_null(strstr(r.body, line));

    /* Once it is closed, the replaced pair is freed (by the watchdog). */
    curl_easy_cleanup(kept);
    for (int i = 0; i < 40; i++) {
        egpu_http_server_tls_stats(srv, &st);
        if (st.retained == 0)
            break;
        usleep(100 * 1000);
    }
    assert_int_equal(st.retained, 0);

    egpu_http_server_free(srv);
    egpu_health_free(health);
    egpu_metrics_free(reg);
    assert_int_equal(egpu_alloc_live(), live);
    pki_remove(&p);
}

static void test_broken_rotation_keeps_the_old_pair(void **state)
{
    struct egpu_http_tls_stats st;
    struct egpu_http_server *srv;
    char path[256], half[4096];
    struct pki p;
    uint16_t port;
    ssize_t n;
    long live = egpu_alloc_live();
    int fd;

    (void)state;
    need_openssl();
    pki_make(&p);
    pki_publish(&p, p.leaf[1], p.lkey[1]); /* CA 2 */
    srv = start(p.cert, p.key, NULL, NULL);
    port = egpu_http_server_port(srv);
    assert_true(verifies_with(port, p.ca[1]));

    /* Half a certificate written in place over the served file (same inode). */
    fd = open(p.leaf[2], O_RDONLY);
    assert_true(fd >= 0);
    n = read(fd, half, sizeof(half));
    close(fd);
    assert_true(n > 100);
    snprintf(path, sizeof(path), "%s/..v%d/tls.crt", p.vol, p.version);
    fd = open(path, O_WRONLY | O_TRUNC);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, half, (size_t)n / 2), n / 2);
    close(fd);
    wait_check_period();
    assert_true(verifies_with(port, p.ca[1]));
    assert_false(verifies_with(port, p.ca[0]));
    egpu_http_server_tls_stats(srv, &st);
    assert_int_equal(st.generation, 1);
    assert_int_equal(st.reload_failures, 1);

    /* A complete certificate with another certificate's key: not taken. */
    pki_publish(&p, p.leaf[2], p.lkey[1]);
    wait_check_period();
    assert_true(verifies_with(port, p.ca[1]));
    assert_false(verifies_with(port, p.ca[0]));
    egpu_http_server_tls_stats(srv, &st);
    assert_int_equal(st.generation, 1);
    assert_int_equal(st.reloads, 0);
    assert_int_equal(st.reload_failures, 2);
    /* The same bad state is counted (and logged) once, however many
     * handshakes come. */
    wait_check_period();
    assert_true(verifies_with(port, p.ca[1]));
    egpu_http_server_tls_stats(srv, &st);
    assert_int_equal(st.reload_failures, 2);

    /* Garbage in a new Secret version: still the old pair. */
    snprintf(path, sizeof(path), "%s/garbage.crt", p.dir);
    sh("printf -- '-----BEGIN CERTIFICATE-----\\nnot base64 at all\\n-----END CERTIFICATE-----\\n'"
       " > %s",
       path);
    pki_publish(&p, path, p.lkey[2]);
    wait_check_period();
    assert_true(verifies_with(port, p.ca[1]));
    egpu_http_server_tls_stats(srv, &st);
    assert_int_equal(st.generation, 1);
    assert_int_equal(st.reload_failures, 3);

    /* The files fixed: the new pair is served. */
    pki_publish(&p, p.leaf[2], p.lkey[2]);
    wait_check_period();
    assert_true(verifies_with(port, p.ca[0]));
    assert_false(verifies_with(port, p.ca[1]));
    egpu_http_server_tls_stats(srv, &st);
    assert_int_equal(st.generation, 2);
    assert_int_equal(st.reloads, 1);
    assert_int_equal(st.reload_failures, 3);

    egpu_http_server_free(srv);
    assert_int_equal(egpu_alloc_live(), live);
    pki_remove(&p);
}

static void test_bad_pair_at_start(void **state)
{
    struct egpu_http_config cfg = {.bind_addr = "127.0.0.1"};
    struct egpu_http_tls_stats st;
    struct egpu_http_server *srv = NULL;
    struct egpu_error err = {0};
    char garbage[128];
    struct pki p;
    long live = egpu_alloc_live();

    (void)state;
    need_openssl();
    pki_make(&p);
    /* A key of another certificate. */
    cfg.tls_cert_file = p.leaf[0];
    cfg.tls_key_file = p.lkey[1];
    assert_int_equal(egpu_http_server_new(&cfg, &srv, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "does not match"));
    assert_non_null(strstr(err.msg, p.lkey[1]));
    /* A certificate file that holds no certificate, and a key file that holds none. */
    snprintf(garbage, sizeof(garbage), "%s/garbage.pem", p.dir);
    sh("echo 'this is not PEM' > %s", garbage);
    cfg.tls_cert_file = garbage;
    cfg.tls_key_file = p.lkey[0];
    assert_int_equal(egpu_http_server_new(&cfg, &srv, &err), -EINVAL);
    assert_non_null(strstr(err.msg, garbage));
    cfg.tls_cert_file = p.leaf[0];
    cfg.tls_key_file = garbage;
    assert_int_equal(egpu_http_server_new(&cfg, &srv, &err), -EINVAL);
    assert_non_null(strstr(err.msg, garbage));
    /* The certificate in the key file's place (no private key in it). */
    cfg.tls_key_file = p.leaf[0];
    assert_int_equal(egpu_http_server_new(&cfg, &srv, &err), -EINVAL);
    /* The matching pair works; a plain HTTP server has no TLS counts. */
    cfg.tls_key_file = p.lkey[0];
    assert_int_equal(egpu_http_server_new(&cfg, &srv, &err), 0);
    egpu_http_server_free(srv);
    cfg.tls_cert_file = NULL;
    cfg.tls_key_file = NULL;
    assert_int_equal(egpu_http_server_new(&cfg, &srv, &err), 0);
    egpu_http_server_tls_stats(srv, &st);
    assert_int_equal(st.generation, 0);
    assert_int_equal(st.reloads, 0);
    egpu_http_server_free(srv);
    assert_int_equal(egpu_alloc_live(), live);
    pki_remove(&p);
}

/* ------------------------------------------------------------------------ */
/* Client certificates                                                      */

static void test_client_certificate_required(void **state)
{
    struct egpu_http_config cfg = {.bind_addr = "127.0.0.1", .threads = 2};
    struct egpu_http_tls_stats st;
    struct egpu_http_server *srv;
    struct egpu_metrics *reg;
    struct egpu_health *health;
    struct pki p;
    struct reply r;
    long connects, port_before, port_after, live = egpu_alloc_live();
    uint16_t port;
    CURL *kept;

    (void)state;
    pki_make_mtls(&p);
    pki_publish(&p, p.leaf[0], p.lkey[0]); /* served: CA 1's server certificate */
    cfg.tls_cert_file = p.cert;
    cfg.tls_key_file = p.key;
    cfg.tls_client_ca = p.ca[0];
    reg = egpu_metrics_new();
    assert_non_null(reg);
    srv = start_cfg(&cfg, reg, &health);
    port = egpu_http_server_port(srv);

    /* The client CA 1 signed for client use is served, and keeps its connection. */
    kept = client_new(p.client[0], p.ckey[0]);
    assert_int_equal(get_hello(kept, port, p.ca[0], &r, &connects, &port_before), CURLE_OK);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "hello tls");
    assert_int_equal(connects, 1);

    /* Refused, in TLS 1.3 and in 1.2: no certificate, a client certificate
     * of CA 2, and CA 1's server certificate (serverAuth only) offered as a
     * client's. None gets a response. */
    for (int tls12 = 0; tls12 < 2; tls12++) {
        assert_int_equal(hello_as(port, p.ca[0], NULL, NULL, tls12), 0);
        assert_int_equal(hello_as(port, p.ca[0], p.client[1], p.ckey[1], tls12), 0);
        assert_int_equal(hello_as(port, p.ca[0], p.leaf[0], p.lkey[0], tls12), 0);
        /* ... while the trusted client is served on new connections too. */
        assert_int_equal(hello_as(port, p.ca[0], p.client[0], p.ckey[0], tls12), 200);
    }
    egpu_http_server_tls_stats(srv, &st);
    assert_int_equal(st.clients_refused, 6);
    assert_int_equal(st.ca_reloads, 0);

    /* The kept connection still answers, on the same socket, and the
     * metrics count the refusals. */
    assert_int_equal(get_path(kept, port, p.ca[0], "/metrics", &r, &connects, &port_after),
                     CURLE_OK);
    assert_int_equal(r.status, 200);
    assert_int_equal(connects, 0);
    assert_int_equal(port_after, port_before);
    assert_non_null(strstr(r.body, "\negpu_http_tls_clients_refused_total 6\n"));
    curl_easy_cleanup(kept);

    egpu_http_server_free(srv);
    egpu_health_free(health);
    egpu_metrics_free(reg);
    assert_int_equal(egpu_alloc_live(), live);
    pki_remove(&p);
}

static void test_client_common_name_pinned(void **state)
{
    struct egpu_http_config cfg = {.bind_addr = "127.0.0.1", .tls_client_cn = "kube-scheduler"};
    struct egpu_http_tls_stats st;
    struct egpu_http_server *srv;
    struct pki p;
    long live = egpu_alloc_live();
    uint16_t port;

    (void)state;
    pki_make_mtls(&p);
    cfg.tls_cert_file = p.leaf[0];
    cfg.tls_key_file = p.lkey[0];
    cfg.tls_client_ca = p.ca[0];
    srv = start_cfg(&cfg, NULL, NULL);
    port = egpu_http_server_port(srv);
    assert_int_equal(hello_as(port, p.ca[0], p.client[0], p.ckey[0], false), 200);
    /* CA 1 signed it for client use, but for another name. */
    assert_int_equal(hello_as(port, p.ca[0], p.client[2], p.ckey[2], false), 0);
    assert_int_equal(hello_as(port, p.ca[0], p.client[2], p.ckey[2], true), 0);
    assert_int_equal(hello_as(port, p.ca[0], p.client[0], p.ckey[0], true), 200);
    egpu_http_server_tls_stats(srv, &st);
    assert_int_equal(st.clients_refused, 2);
    egpu_http_server_free(srv);

    /* Without the pin, CA 1's certificate of that other name is served. */
    cfg.tls_client_cn = NULL;
    srv = start_cfg(&cfg, NULL, NULL);
    assert_int_equal(hello_as(egpu_http_server_port(srv), p.ca[0], p.client[2], p.ckey[2], false),
                     200);
    egpu_http_server_free(srv);
    assert_int_equal(egpu_alloc_live(), live);
    pki_remove(&p);
}

static void test_client_ca_rotation(void **state)
{
    struct egpu_http_config cfg = {.bind_addr = "127.0.0.1", .threads = 2};
    struct egpu_http_tls_stats st;
    struct egpu_http_server *srv;
    char garbage[128];
    struct pki p;
    struct reply r;
    long connects, live = egpu_alloc_live();
    uint16_t port;
    CURL *kept;

    (void)state;
    pki_make_mtls(&p);
    pki_publish_ca(&p, p.ca[0]);
    cfg.tls_cert_file = p.leaf[0];
    cfg.tls_key_file = p.lkey[0];
    cfg.tls_client_ca = p.cafile;
    srv = start_cfg(&cfg, NULL, NULL);
    port = egpu_http_server_port(srv);
    kept = client_new(p.client[0], p.ckey[0]);
    assert_int_equal(get_hello(kept, port, p.ca[0], &r, &connects, NULL), CURLE_OK);
    assert_int_equal(r.status, 200);
    assert_int_equal(hello_as(port, p.ca[0], p.client[1], p.ckey[1], false), 0);

    /* The Secret now holds CA 2: its client is served, CA 1's is refused on
     * new connections; the connection CA 1's client opened before keeps
     * its verdict. */
    pki_publish_ca(&p, p.ca[1]);
    wait_check_period();
    assert_int_equal(hello_as(port, p.ca[0], p.client[1], p.ckey[1], false), 200);
    assert_int_equal(hello_as(port, p.ca[0], p.client[0], p.ckey[0], false), 0);
    assert_int_equal(get_hello(kept, port, p.ca[0], &r, &connects, NULL), CURLE_OK);
    assert_int_equal(r.status, 200);
    assert_int_equal(connects, 0);
    curl_easy_cleanup(kept);
    egpu_http_server_tls_stats(srv, &st);
    assert_int_equal(st.ca_reloads, 1);
    assert_int_equal(st.ca_failures, 0);
    assert_int_equal(st.reloads, 0); /* the server's own pair is another matter */

    /* A bundle that does not parse is not taken: CA 2 stays, counted once. */
    snprintf(garbage, sizeof(garbage), "%s/garbage.crt", p.dir);
    sh("printf -- '-----BEGIN CERTIFICATE-----\\nnot base64 at all\\n-----END CERTIFICATE-----\\n'"
       " > %s",
       garbage);
    pki_publish_ca(&p, garbage);
    wait_check_period();
    assert_int_equal(hello_as(port, p.ca[0], p.client[1], p.ckey[1], false), 200);
    assert_int_equal(hello_as(port, p.ca[0], p.client[0], p.ckey[0], false), 0);
    wait_check_period();
    assert_int_equal(hello_as(port, p.ca[0], p.client[1], p.ckey[1], false), 200);
    egpu_http_server_tls_stats(srv, &st);
    assert_int_equal(st.ca_reloads, 1);
    assert_int_equal(st.ca_failures, 1);

    /* Both CAs in one bundle: both clients are served. */
    snprintf(garbage, sizeof(garbage), "%s/both.crt", p.dir);
    sh("cat %s %s > %s", p.ca[0], p.ca[1], garbage);
    pki_publish_ca(&p, garbage);
    wait_check_period();
    assert_int_equal(hello_as(port, p.ca[0], p.client[0], p.ckey[0], false), 200);
    assert_int_equal(hello_as(port, p.ca[0], p.client[1], p.ckey[1], false), 200);
    egpu_http_server_tls_stats(srv, &st);
    assert_int_equal(st.ca_reloads, 2);

    egpu_http_server_free(srv);
    assert_int_equal(egpu_alloc_live(), live);
    pki_remove(&p);
}

static void test_bad_client_ca_at_start(void **state)
{
    struct egpu_http_config cfg = {.bind_addr = "127.0.0.1"};
    struct egpu_http_server *srv = NULL;
    struct egpu_error err = {0};
    char garbage[128], empty[128], cn[EGPU_HTTP_TLS_CLIENT_CN_MAX + 2];
    struct pki p;
    long live = egpu_alloc_live();

    (void)state;
    need_openssl();
    pki_make(&p);
    /* A client CA without a certificate and key of the server's own. */
    cfg.tls_client_ca = p.ca[0];
    assert_int_equal(egpu_http_server_new(&cfg, &srv, &err), -EINVAL);
    cfg.tls_cert_file = p.leaf[0];
    cfg.tls_key_file = p.lkey[0];
    /* A file that holds no certificate, an empty one, one that is not there. */
    snprintf(garbage, sizeof(garbage), "%s/garbage.pem", p.dir);
    sh("echo 'this is not PEM' > %s", garbage);
    cfg.tls_client_ca = garbage;
    assert_int_equal(egpu_http_server_new(&cfg, &srv, &err), -EINVAL);
    assert_non_null(strstr(err.msg, garbage));
    snprintf(empty, sizeof(empty), "%s/empty.pem", p.dir);
    sh(": > %s", empty);
    cfg.tls_client_ca = empty;
    assert_int_equal(egpu_http_server_new(&cfg, &srv, &err), -EINVAL);
    assert_non_null(strstr(err.msg, empty));
    cfg.tls_client_ca = "/nonexistent/ca.crt";
    assert_int_equal(egpu_http_server_new(&cfg, &srv, &err), -ENOENT);
    /* A name without a CA, an empty name, one too long. */
    cfg.tls_client_ca = NULL;
    cfg.tls_client_cn = "kube-scheduler";
    assert_int_equal(egpu_http_server_new(&cfg, &srv, &err), -EINVAL);
    cfg.tls_client_ca = p.ca[0];
    cfg.tls_client_cn = "";
    assert_int_equal(egpu_http_server_new(&cfg, &srv, &err), -EINVAL);
    memset(cn, 'a', sizeof(cn) - 1);
    cn[sizeof(cn) - 1] = '\0';
    cfg.tls_client_cn = cn;
    assert_int_equal(egpu_http_server_new(&cfg, &srv, &err), -EINVAL);
    /* The longest name, and the CA bundle, are taken. */
    cn[EGPU_HTTP_TLS_CLIENT_CN_MAX] = '\0';
    assert_int_equal(egpu_http_server_new(&cfg, &srv, &err), 0);
    egpu_http_server_free(srv);
    assert_int_equal(egpu_alloc_live(), live);
    pki_remove(&p);
}

static int group_setup(void **state)
{
    (void)state;
    signal(SIGPIPE, SIG_IGN);
    return curl_global_init(CURL_GLOBAL_ALL) == CURLE_OK ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    curl_global_cleanup();
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rotation_keeps_connections),
        cmocka_unit_test(test_broken_rotation_keeps_the_old_pair),
        cmocka_unit_test(test_bad_pair_at_start),
        cmocka_unit_test(test_client_certificate_required),
        cmocka_unit_test(test_client_common_name_pinned),
        cmocka_unit_test(test_client_ca_rotation),
        cmocka_unit_test(test_bad_client_ca_at_start),
        cmocka_unit_test(test_tls_versions),
        cmocka_unit_test(test_handshake_deadline),
    };

    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
