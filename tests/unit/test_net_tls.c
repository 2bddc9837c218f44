/* tests/unit/test_net_tls.c - the HTTPS server's certificate, read again
 * when its files change, against a real TLS client (libcurl).
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
 * once, and that a pair that does not match is refused at start. Without
 * openssl the tests skip, or fail when CI=true. */
#define _GNU_SOURCE /* mkdtemp */
#include <errno.h>
#include <inttypes.h>
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
    const char *ci = getenv("CI");

    if (system("command -v openssl >/dev/null 2>&1") == 0)
        return;
    if (ci != NULL && strcmp(ci, "true") == 0)
        fail_msg("openssl is not installed (scripts/deps.sh installs it); CI=true: failing");
    print_message("openssl is not installed: skipping\n");
    skip();
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

/* Publish cert and key as the kubelet updates a Secret volume: a new
 * ..vN directory, then a new ..data link renamed over the old one. The first
 * call also makes tls.crt and tls.key, links through ..data. */
static void pki_publish(struct pki *p, const char *cert, const char *key)
{
    char dir[192], path[256], link[192], tmp[192];

    p->version++;
    snprintf(dir, sizeof(dir), "%s/..v%d", p->vol, p->version);
    assert_int_equal(mkdir(dir, 0700), 0);
    snprintf(path, sizeof(path), "%s/tls.crt", dir);
    copy_file(cert, path);
    snprintf(path, sizeof(path), "%s/tls.key", dir);
    copy_file(key, path);
    snprintf(link, sizeof(link), "..v%d", p->version);
    snprintf(tmp, sizeof(tmp), "%s/..data_tmp", p->vol);
    assert_int_equal(symlink(link, tmp), 0);
    snprintf(path, sizeof(path), "%s/..data", p->vol);
    assert_int_equal(rename(tmp, path), 0);
    if (p->version == 1) {
        assert_int_equal(symlink("..data/tls.crt", p->cert), 0);
        assert_int_equal(symlink("..data/tls.key", p->key), 0);
    }
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

/* Start an HTTPS server of /hello on cert and key; with health, also the
 * health endpoints and metrics (free *health after the server). */
static struct egpu_http_server *start(const char *cert, const char *key, struct egpu_metrics *reg,
                                      struct egpu_health **health)
{
    struct egpu_http_config cfg = {
        .bind_addr = "127.0.0.1", .threads = 2, .tls_cert_file = cert, .tls_key_file = key};
    struct egpu_http_server *srv;
    struct egpu_error err = {0};

    if (egpu_http_server_new(&cfg, &srv, &err) != 0)
        fail_msg("server new: %s", err.msg);
    assert_int_equal(egpu_http_server_route(srv, "GET", "/hello", on_hello, NULL), 0);
    if (health != NULL && egpu_health_new(srv, reg, NULL, NULL, health, &err) != 0)
        fail_msg("health: %s", err.msg);
    if (egpu_http_server_start(srv, &err) != 0)
        fail_msg("start: %s", err.msg);
    return srv;
}

/* ------------------------------------------------------------------------ */
/* Tests                                                                    */

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
    };

    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
