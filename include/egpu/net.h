/* egpu/net.h - the HTTP(S) server, the Prometheus metrics registry and the
 * health endpoints every long-running Elastic GPU component serves.
 *
 * Four parts, one per source file in src/net:
 *   - http.c: an HTTP/1.1 server over libmicrohttpd. The caller registers a
 *     handler per (method, exact path) before starting it; the server
 *     collects the whole request body into a bounded buffer, calls the
 *     handler on one of its pool threads and sends what the handler wrote.
 *     404, 405 (with Allow), 413 and 500 are answered by the server itself.
 *   - metrics.c: a thread-safe registry of counters, gauges and histograms
 *     (each optionally with labels), rendered in the Prometheus text
 *     exposition format 0.0.4.
 *   - health.c: /healthz, /readyz and /metrics on a server, and request
 *     metrics for that server.
 *   - service.c: a component's servers made from the common flags, its
 *     health endpoints, signals and teardown order.
 *
 * Threads: handlers and readiness callbacks run on the server's pool
 * threads, several at once; whatever they share must be thread-safe. The
 * metrics functions may be called from any thread.
 *
 * Units are carried in names (_s seconds, _bytes bytes). Errors are 0 or a
 * negative code (-errno or EGPU_E*), described by egpu_strerror(); functions
 * doing I/O also take `struct egpu_error *err` (may be NULL).
 */
#ifndef EGPU_NET_H
#define EGPU_NET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "egpu/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* HTTP server (src/net/http.c)                                             */

#define EGPU_HTTP_THREADS_DEFAULT             2   /* pool threads */
#define EGPU_HTTP_TIMEOUT_S_DEFAULT           120 /* idle connection timeout */
#define EGPU_HTTP_REQUEST_TIMEOUT_S_DEFAULT   10  /* whole request, first byte to last */
#define EGPU_HTTP_CONNECTIONS_DEFAULT         256 /* open connections, all clients */
#define EGPU_HTTP_PER_CLIENT_DEFAULT          32  /* open connections, one client address */
#define EGPU_HTTP_HANDSHAKE_TIMEOUT_S_DEFAULT 5   /* TLS handshake, from the connection */
#define EGPU_HTTP_BODY_MAX_DEFAULT            (1024 * 1024)      /* request body, bytes */
#define EGPU_HTTP_RESP_MAX_DEFAULT            (64 * 1024 * 1024) /* response body, bytes */
#define EGPU_HTTP_TYPE_MAX                    128                /* Content-Type, bytes incl. NUL */
#define EGPU_HTTP_RESP_HEADERS_MAX            32                 /* extra headers on one response */

/* Server settings. Zero fields take the defaults above, so
 * `struct egpu_http_config cfg = {.port = 8080};` is a complete config.
 * Strings are borrowed: egpu_http_server_new copies what it keeps. */
struct egpu_http_config {
    const char *bind_addr;        /* IPv4 or IPv6 literal; NULL or "" = every IPv4
                                     address (0.0.0.0); "::" = every address, IPv6
                                     and IPv4 (dual stack) */
    uint16_t port;                /* TCP port; 0 = an ephemeral port chosen by the
                                     kernel (see egpu_http_server_port) */
    unsigned threads;             /* pool threads serving connections; 0 = 2 */
    unsigned timeout_s;           /* close a kept-alive connection that sent nothing for this
                                     long after its last response (or since it opened); 0 =
                                     120, longer than the 90 s a Go client keeps an idle
                                     connection for reuse */
    unsigned request_timeout_s;   /* close a connection whose request has not fully arrived
                                     this long after its first byte came (a client trickling
                                     its headers or body, "slowloris"), also when that byte
                                     came with the connection itself, before the server first
                                     looked at it; 0 = 10 */
    unsigned handshake_timeout_s; /* with TLS: close a connection whose client has not
                                   finished its handshake (its Finished message read) this
                                   long after the connection opened, whether it sent
                                   nothing, part of a ClientHello or all but its last
                                   flight; 0 = 5. Unused without TLS */
    unsigned max_connections;     /* open connections at most; one more is refused (closed at
                                     once); 0 = 256 */
    unsigned max_per_client;      /* open connections from one client IP address at most
                                     (IPv6: the whole address), counted from accept(2), before
                                     and during a TLS handshake too; 0 = 32 */
    size_t max_body_bytes;        /* larger request bodies get 413; 0 = 1 MiB */
    size_t max_resp_bytes;        /* most a handler may write; 0 = 64 MiB */
    size_t conn_memory_bytes;     /* libmicrohttpd's memory per connection (headers and read
                                     buffer), bytes; 0 = 256 KiB, which reads a large body
                                     (kube-scheduler's ~85 KB ExtenderArgs) in few wake-ups.
                                     libmicrohttpd 0.9.75 clears all of it after every request
                                     on a kept-alive connection, so a server of small requests
                                     (admission reviews) does better with 32 KiB */
    const char *tls_cert_file;    /* PEM certificate chain for HTTPS, leaf first (at most
                                     EGPU_HTTP_TLS_CHAIN_MAX certificates); NULL = HTTP.
                                     Read again when it changes: see "TLS" below */
    const char *tls_key_file;     /* PEM private key (PKCS#1, PKCS#8 or SEC1, unencrypted) of
                                     the leaf; needed iff tls_cert_file */
    const char *tls_client_ca;    /* PEM file: a bundle of the CAs that sign clients'
                                     certificates. With it, a client must present a
                                     certificate that verifies to one of them (mutual TLS),
                                     else its handshake fails; NULL = no client certificate
                                     asked. Needs tls_cert_file. Read again when it changes:
                                     see "TLS client certificates" below */
    const char *tls_client_cn;    /* with tls_client_ca: the client certificate's subject
                                     must have exactly one common name (CN), this one
                                     (compared byte for byte); NULL = any name the CA signed */
};

/* What a handler sees. Every pointer is borrowed and valid only during the
 * handler call. */
struct egpu_http_request {
    const char *method;       /* as sent, e.g. "POST"; a HEAD request runs the
                                 GET handler with method "HEAD" */
    const char *path;         /* percent-decoded path without the query, "/filter" */
    const char *query;        /* raw query after '?', not decoded; "" when none */
    const char *content_type; /* Content-Type header; "" when absent */
    const char *body;         /* the whole body, NUL-terminated; "" when none */
    size_t body_len;          /* body bytes, excluding the NUL */
    void *priv;               /* the server's; read headers through
                                 egpu_http_request_header */
};

struct egpu_http_header; /* private list of extra response headers */

/* What a handler fills. The server prepares it before the call: status 200,
 * content_type "text/plain; charset=utf-8", an empty body whose max is the
 * config's max_resp_bytes, no extra headers. */
struct egpu_http_response {
    int status;                            /* HTTP status, 200..599 (204 and 304 send no body) */
    char content_type[EGPU_HTTP_TYPE_MAX]; /* set with egpu_http_response_set_type */
    struct egpu_buf body;                  /* the body; append with egpu_buf_* */
    struct egpu_http_header *headers;      /* private: egpu_http_response_header */
    size_t nheaders;                       /* private */
};

/* A route's handler. data is the pointer given to egpu_http_server_route.
 * Returns 0 to send resp as filled, or a negative code: the server then
 * discards resp and answers 500 with the code's text. To answer an error of
 * its own (400, 422...) a handler sets resp->status and returns 0. Runs on a
 * pool thread, concurrently with other calls. */
typedef int (*egpu_http_handler_cb)(void *data, const struct egpu_http_request *req,
                                    struct egpu_http_response *resp);

/* Called once per request the server answered (not for requests
 * libmicrohttpd rejected itself, such as a malformed request line), after
 * the response was sent or the connection dropped. route is the registered
 * path the request matched, or NULL when it matched none (404, 405); status is
 * the status sent; seconds is the time from the request line to the end of
 * the response. Runs on a pool thread; must not block. */
typedef void (*egpu_http_observe_cb)(void *data, const char *route, int status, double seconds);

struct egpu_http_server; /* opaque */

/* TLS. With tls_cert_file and tls_key_file set, the server serves HTTPS
 * (libmicrohttpd over GnuTLS) with the pair those files hold NOW, not the
 * pair they held at start: each new TLS handshake gets the pair the server
 * holds, and at most once a second a handshake first stat(2)s both paths
 * (following symbolic links, so a Kubernetes Secret volume's swapped ..data
 * link counts) and reads the pair again when either file's inode, size,
 * mtime or ctime changed. A pair that cannot be used (a half-written file,
 * a key that does not match the certificate, a file gone) is not taken:
 * the previous pair stays in service and one warning is logged per change
 * of the files. Open connections keep the session they negotiated; a
 * replaced pair is kept until every connection opened before its
 * replacement has closed. The files are the operator's (a Secret volume,
 * cert-manager's output), never a path a tenant can reach. Only TLS 1.2 and
 * TLS 1.3 are negotiated (the GnuTLS priority string EGPU__TLS_PRIORITIES
 * of src/net/tls_int.h, the one place it is written): a client that offers
 * only TLS 1.0 or 1.1 fails its handshake. */
#define EGPU_HTTP_TLS_CHAIN_MAX 16 /* certificates in tls_cert_file */

/* TLS client certificates. With tls_client_ca set, each handshake asks the
 * client for its certificate (the request names no CA) and refuses the
 * handshake unless the client presents a chain that verifies to a
 * certificate of the bundle (as a trust anchor), whose leaf is valid now,
 * allows TLS client authentication when it lists key purposes (extended key
 * usage), and has the subject common name tls_client_cn when that is set.
 * A refused client gets no response at all (its connection is closed during
 * the handshake); should a connection ever reach a request without passing
 * that check, the request is answered 403 and its handler never runs. Each
 * refusal counts in egpu_http_tls_stats.clients_refused; the first and then
 * every power-of-two-th one is logged as a warning, with the client address
 * and reason (the rest at debug level). The bundle is read again like the
 * certificate and key (at most once a second, at a handshake, when its
 * inode, size, mtime or ctime changed; a bundle that does not parse leaves
 * the previous one in service, counted and logged once). A new bundle
 * applies to new connections; open ones keep the verdict they got. */
#define EGPU_HTTP_TLS_CLIENT_CN_MAX 255 /* tls_client_cn, bytes */

/* Create a stopped server from cfg (copied; cfg may be freed afterwards).
 * With TLS files set, both PEM files are read and checked now: the
 * certificates must parse and the key must be the leaf certificate's. On
 * success writes *out (free with egpu_http_server_free). Returns 0,
 * -EINVAL (bad bind_addr, a TLS file without the other, a certificate or
 * key file that does not parse, more than EGPU_HTTP_TLS_CHAIN_MAX
 * certificates, a key that does not match the certificate, a client CA
 * without tls_cert_file or with no certificate or a block that does not
 * parse, tls_client_cn without a client CA, empty or longer than
 * EGPU_HTTP_TLS_CLIENT_CN_MAX; err names the file), -ENOTSUP
 * (libmicrohttpd without TLS), -errno from reading a TLS file, -EMSGSIZE (a
 * TLS file over 1 MiB) or -ENOMEM. With a client CA, its file is read and
 * checked now too. */
int egpu_http_server_new(const struct egpu_http_config *cfg, struct egpu_http_server **out,
                         struct egpu_error *err) EGPU_MUST_CHECK;

/* Route requests for method (e.g. "GET", matched exactly, case-sensitive)
 * on path (exact, e.g. "/filter"; no query) to cb with data. method and
 * path are copied; data is borrowed and must outlive the server. A GET
 * route also answers HEAD. Only before egpu_http_server_start. Returns 0,
 * -EINVAL (empty method, path not starting with '/', NULL cb), -EEXIST (the
 * pair is already routed), -EBUSY (server running) or -ENOMEM. */
int egpu_http_server_route(struct egpu_http_server *srv, const char *method, const char *path,
                           egpu_http_handler_cb cb, void *data) EGPU_MUST_CHECK;

/* Remove the route for method and path (as given to
 * egpu_http_server_route). Only before egpu_http_server_start. Returns 0,
 * -ENOENT (no such route) or -EBUSY (server running). */
int egpu_http_server_unroute(struct egpu_http_server *srv, const char *method,
                             const char *path) EGPU_MUST_CHECK;

/* Install one observer of finished requests (replacing any earlier one);
 * cb NULL removes it. data is borrowed. Only before egpu_http_server_start.
 * Returns 0 or -EBUSY. */
int egpu_http_server_observe(struct egpu_http_server *srv, egpu_http_observe_cb cb,
                             void *data) EGPU_MUST_CHECK;

/* Bind and start serving on the pool threads. Returns 0, -EBUSY (already
 * running) or -EADDRNOTAVAIL (libmicrohttpd could not start: port in use,
 * address not local, TLS unusable; its own log line gives the cause). A
 * stopped server may be started again, with the TLS pair it last held. */
int egpu_http_server_start(struct egpu_http_server *srv, struct egpu_error *err) EGPU_MUST_CHECK;

/* The TCP port the running server listens on (the kernel's choice when the
 * config said 0), or 0 when it is not running. */
uint16_t egpu_http_server_port(const struct egpu_http_server *srv);

/* What the server did to connections since it was made (counts survive a
 * stop and start). refused_*: connections closed on arrival because max_connections
 * (total) or max_per_client (per_client) were reached; timed_out_*: connections
 * closed because they sat idle past timeout_s (idle), their request had not
 * fully arrived request_timeout_s after its first byte (slow), or their TLS
 * handshake had not finished handshake_timeout_s after they opened
 * (handshake); open: connections open now. */
struct egpu_http_conn_stats {
    uint64_t refused_total, refused_per_client;
    uint64_t timed_out_idle, timed_out_slow, timed_out_handshake;
    unsigned open;
};

/* Read srv's connection counts into *out. Safe from any thread. */
void egpu_http_server_conn_stats(struct egpu_http_server *srv, struct egpu_http_conn_stats *out);

/* What the TLS side of srv did since it was made (counts survive a stop and
 * start). All zero for a server without TLS. */
struct egpu_http_tls_stats {
    uint64_t generation;      /* the pair new handshakes get: 1 = the one read by
                                 egpu_http_server_new, +1 per reload */
    uint64_t reloads;         /* pairs replaced by a changed pair read from the files */
    uint64_t reload_failures; /* changes of the files that could not be used (each
                                 distinct state of the two files counted once) */
    unsigned retained;        /* replaced pairs still held for connections opened
                                 before their replacement */
    int64_t not_after_s;      /* the served leaf certificate's notAfter, Unix seconds */
    uint64_t ca_reloads;      /* client CA bundles replaced by a changed bundle */
    uint64_t ca_failures;     /* changes of the client CA file that could not be used */
    uint64_t clients_refused; /* connections refused for their client certificate (none,
                                 untrusted, expired, not for clients, another name) */
};

/* Read srv's TLS counts into *out. Safe from any thread; never reads the
 * files itself. */
void egpu_http_server_tls_stats(struct egpu_http_server *srv, struct egpu_http_tls_stats *out);

/* Stop serving: close the listening socket and every connection, and join
 * the pool threads. Requests in flight are cut off. Returns when no
 * handler or observer is running any more. A stopped server is a no-op. */
void egpu_http_server_stop(struct egpu_http_server *srv);

/* Stop the server if running and free it. NULL is a no-op. */
void egpu_http_server_free(struct egpu_http_server *srv);

/* Value of request header name (case-insensitive), or NULL when absent.
 * Borrowed; valid during the handler call. Only inside a handler. */
const char *egpu_http_request_header(const struct egpu_http_request *req, const char *name);

/* Set resp's Content-Type (copied). Returns 0, or -EINVAL when type is
 * empty, holds CR or LF, or does not fit EGPU_HTTP_TYPE_MAX. */
int egpu_http_response_set_type(struct egpu_http_response *resp, const char *type) EGPU_MUST_CHECK;

/* Add header name: value to resp (both copied). Content-Type is set with
 * egpu_http_response_set_type, and Content-Length, Connection and
 * Transfer-Encoding belong to the server. Returns 0, -EINVAL (empty name,
 * a name that is not an HTTP token, CR/LF in value, or one of those four),
 * EGPU_ELIMIT (more than EGPU_HTTP_RESP_HEADERS_MAX) or -ENOMEM. */
int egpu_http_response_header(struct egpu_http_response *resp, const char *name,
                              const char *value) EGPU_MUST_CHECK;

/* Shorthand for a plain-text answer: set status, Content-Type
 * "text/plain; charset=utf-8" and replace the body with the formatted text.
 * Returns 0, or -EMSGSIZE/-ENOMEM as egpu_buf_printf (status and type are
 * set even then). */
int egpu_http_response_text(struct egpu_http_response *resp, int status, const char *fmt, ...)
    EGPU_PRINTF(3, 4) EGPU_MUST_CHECK;

/* ------------------------------------------------------------------------ */
/* Prometheus metrics (src/net/metrics.c)                                   */

#define EGPU_METRIC_LABELS_MAX   8     /* label names of one family */
#define EGPU_METRIC_BUCKETS_MAX  64    /* histogram upper bounds, +Inf excluded */
#define EGPU_METRIC_CHILDREN_MAX 10000 /* label-value sets of one family */

/* Prometheus client defaults for latencies in seconds:
 * .005 .01 .025 .05 .1 .25 .5 1 2.5 5 10 (+Inf implied). */
#define EGPU_METRIC_DEFAULT_NBUCKETS 11
extern const double egpu_metric_default_buckets[EGPU_METRIC_DEFAULT_NBUCKETS];

struct egpu_metrics; /* a registry: the families one /metrics page shows */
struct egpu_metric;  /* one family (name, type, help, label names) */

/* New empty registry, or NULL when out of memory. Free with egpu_metrics_free. */
struct egpu_metrics *egpu_metrics_new(void);
/* Free the registry and every family in it; their egpu_metric pointers die
 * with it. No other thread may use it meanwhile. NULL is a no-op. */
void egpu_metrics_free(struct egpu_metrics *reg);

/* Register a family in reg and write it to *out. The pointer stays valid
 * until egpu_metrics_free(reg).
 * - name: [a-zA-Z_:][a-zA-Z0-9_:]*; a counter's must end in "_total".
 * - help: the HELP text (any UTF-8, escaped on output); "" = no HELP line.
 * - labels: nlabels label names, [a-zA-Z_][a-zA-Z0-9_]*, not starting with
 *   "__", distinct, and not "le" for a histogram; NULL when nlabels is 0.
 * - bounds (histograms): nbounds finite upper bounds in strictly increasing
 *   order (a last +Inf is accepted and dropped; +Inf is always implied).
 * All strings and arrays are copied. A family without labels exists at 0
 * from the start; one with labels has no samples until its first update.
 * Registering a name again returns the existing family when type, help,
 * labels and bounds are the same (so two components may share a registry),
 * else -EEXIST. Returns 0, -EINVAL (a rule above), -EEXIST, EGPU_ELIMIT
 * (more than EGPU_METRIC_LABELS_MAX labels or EGPU_METRIC_BUCKETS_MAX
 * bounds) or -ENOMEM. */
int egpu_metric_counter(struct egpu_metrics *reg, const char *name, const char *help,
                        size_t nlabels, const char *const *labels,
                        struct egpu_metric **out) EGPU_MUST_CHECK;
int egpu_metric_gauge(struct egpu_metrics *reg, const char *name, const char *help, size_t nlabels,
                      const char *const *labels, struct egpu_metric **out) EGPU_MUST_CHECK;
int egpu_metric_histogram(struct egpu_metrics *reg, const char *name, const char *help,
                          size_t nlabels, const char *const *labels, size_t nbounds,
                          const double *bounds, struct egpu_metric **out) EGPU_MUST_CHECK;

/* Updates. values holds one value per label name of m, in the same order
 * (any UTF-8, escaped on output), or is NULL for a family without labels;
 * a new combination creates the child at 0 first. Safe from any thread.
 * - egpu_metric_inc: counter or gauge += 1.
 * - egpu_metric_add: counter += v (v >= 0, not NaN) or gauge += v.
 * - egpu_metric_set: gauge = v.
 * - egpu_metric_observe: histogram: count += 1, sum += v, and v is counted
 *   in the first bucket whose upper bound is >= v (le semantics).
 * Returns 0, -EINVAL (wrong type for the operation, bad v, NULL values on a
 * labelled family), EGPU_ELIMIT (EGPU_METRIC_CHILDREN_MAX children already)
 * or -ENOMEM. Deliberately not EGPU_MUST_CHECK: a lost sample must never
 * change what the caller does, so callers may drop the result. */
int egpu_metric_inc(struct egpu_metric *m, const char *const *values);
int egpu_metric_add(struct egpu_metric *m, const char *const *values, double v);
int egpu_metric_set(struct egpu_metric *m, const char *const *values, double v);
int egpu_metric_observe(struct egpu_metric *m, const char *const *values, double v);

/* Read a child without creating it: a counter's or gauge's value, or a
 * histogram's count. Returns 0 and writes *out, -ENOENT (no such child) or
 * -EINVAL (NULL values on a labelled family). */
int egpu_metric_get(struct egpu_metric *m, const char *const *values, double *out) EGPU_MUST_CHECK;

/* Drop the children of a labelled family for which keep(values, data)
 * returns false (values: one per label name, in order), e.g. the series of
 * a node that is gone. keep is called with the family's lock held and must
 * not touch the family. Returns how many were dropped (0 for m NULL or a
 * family without labels). */
size_t egpu_metric_retain(struct egpu_metric *m,
                          bool (*keep)(const char *const *values, void *data), void *data);

/* Append the text exposition (format 0.0.4) of every family to out:
 * families in registration order, each with "# HELP" (when help is not
 * empty) and "# TYPE" first, children sorted by label values; histograms
 * as cumulative _bucket lines (le="+Inf" last, equal to _count), then _sum
 * and _count. Values print in the shortest form that reads back exactly
 * (NaN, +Inf, -Inf as Prometheus spells them). Ends with a newline unless
 * empty. Returns 0, or -EMSGSIZE/-ENOMEM, leaving out as it was. */
int egpu_metrics_render(struct egpu_metrics *reg, struct egpu_buf *out) EGPU_MUST_CHECK;

/* Content-Type of a rendered registry. */
#define EGPU_METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* ------------------------------------------------------------------------ */
/* Health endpoints (src/net/health.c)                                      */

/* Readiness: return true when ready; when not, write a one-line reason (a
 * C string of at most len bytes incl. NUL) into why. Runs on a pool
 * thread for every GET /readyz; must be thread-safe and quick. */
typedef bool (*egpu_ready_cb)(void *data, char *why, size_t len);

struct egpu_health; /* opaque */

/* Serve on srv (not yet started):
 *   GET /healthz  200 "ok" while the process serves at all;
 *   GET /readyz   200 "ok" when ready(data) says so (or ready is NULL),
 *                 else 503 "not ready: <why>";
 *   GET /metrics  reg rendered, Content-Type EGPU_METRICS_CONTENT_TYPE
 *                 (only when reg is not NULL).
 * With reg it also registers, and keeps current for srv's requests:
 *   egpu_http_requests_total{path,code}        counter
 *   egpu_http_request_duration_seconds{path}   histogram (default buckets)
 * where path is the matched route or "unmatched", and the connection
 * metrics of egpu_health_add_server. This installs srv's observer
 * (egpu_http_server_observe). srv, reg and data are borrowed and
 * must outlive *out; free *out (egpu_health_free) only after
 * egpu_http_server_stop or _free(srv). Returns 0, or the error of a route
 * or metric registration (-EEXIST when srv already serves one of the
 * paths or reg holds one of the names with another shape, -EBUSY when srv
 * is running) or -ENOMEM; on error srv has none of these routes
 * (metric families registered before the error stay in reg). */
int egpu_health_new(struct egpu_http_server *srv, struct egpu_metrics *reg, egpu_ready_cb ready,
                    void *data, struct egpu_health **out, struct egpu_error *err) EGPU_MUST_CHECK;

/* Count another server's requests and connections in h's metrics too (a
 * component that serves on two ports, e.g. egpu-scheduler's extender verbs
 * on loopback and its health endpoints on the pod address). egpu_health_new
 * adds its own server this way when it has a registry, which then also
 * holds, kept current at each scrape of /metrics:
 *   egpu_http_connections_refused_total{reason="total|per_client"}  counter
 *   egpu_http_connections_timed_out_total{reason="idle|slow"}      counter
 *   egpu_http_connections_open                                     gauge
 * summed over its servers (see struct egpu_http_conn_stats), and, once a
 * server that serves HTTPS is added (see struct egpu_http_tls_stats):
 *   egpu_http_tls_reloads_total                                    counter
 *   egpu_http_tls_reload_failures_total                            counter
 *   egpu_http_tls_certificate_expiry_timestamp_seconds             gauge
 * (the last: the earliest served leaf's notAfter, Unix seconds). Installs srv's
 * observer; srv is borrowed and must outlive h. Only before
 * egpu_http_server_start(srv). Returns 0, -EINVAL (h has no registry),
 * EGPU_ELIMIT (a fifth server), -EBUSY (srv running), or the error of a TLS
 * family's registration (-EEXIST, -ENOMEM). */
int egpu_health_add_server(struct egpu_health *h, struct egpu_http_server *srv,
                           struct egpu_error *err) EGPU_MUST_CHECK;

/* Free h. NULL is a no-op. */
void egpu_health_free(struct egpu_health *h);

/* ------------------------------------------------------------------------ */
/* Service (src/net/service.c): a long-running component's servers, health  */
/* endpoints, signals and teardown order                                    */

struct egpu_cli_server; /* egpu/cli.h: the flags every server shares */

/* What egpu_service_new makes. */
struct egpu_service {
    struct egpu_http_server *srv;   /* the component's own routes on --listen:--port; NULL
                                       without own_server */
    struct egpu_http_server *hsrv;  /* /healthz, /readyz, /metrics */
    struct egpu_health *health;     /* on hsrv, counting both servers' requests */
    struct egpu_health *own_health; /* /healthz and /readyz on srv too (health_on_own) */
};

struct egpu_service_config {
    const struct egpu_cli_server *opts; /* borrowed; must outlive the service */
    bool own_server;          /* true: srv on opts->listen:port (opts' threads, max body, TLS,
                                 handshake timeout, max_per_client) and hsrv on
                                 opts->health_listen:health_port (health_max_per_client);
                                 false: only hsrv, on opts->listen:port (max_per_client) */
    bool health_on_own;       /* with own_server: /healthz and /readyz on srv too (a webhook's
                                 probes over HTTPS) */
    struct egpu_metrics *reg; /* rendered on /metrics; borrowed */
    egpu_ready_cb ready;      /* /readyz (see egpu_health_new); NULL = always ready */
    void *data;               /* ready's */
    size_t conn_memory_bytes; /* srv's egpu_http_config.conn_memory_bytes; 0 = its default */
};

/* Make the stopped servers of cfg with the health endpoints wired to
 * cfg->ready; the caller then routes its own paths on svc->srv and calls
 * egpu_service_start. Writes *svc (caller-owned storage) in any case: on
 * error, egpu_service_free(svc) frees what was made. Returns 0 or the
 * error of egpu_http_server_new, egpu_health_new or egpu_health_add_server. */
int egpu_service_new(const struct egpu_service_config *cfg, struct egpu_service *svc,
                     struct egpu_error *err) EGPU_MUST_CHECK;

/* Start srv (if any), then hsrv. Returns 0 or egpu_http_server_start's error. */
int egpu_service_start(struct egpu_service *svc, struct egpu_error *err) EGPU_MUST_CHECK;

/* Stop both servers: when it returns, no handler and no readiness callback
 * runs any more, so what they read may be stopped and freed. Safe on a
 * service egpu_service_new failed to make whole. */
void egpu_service_stop(struct egpu_service *svc);

/* Free the health endpoints and the servers (after egpu_service_stop) and
 * zero *svc. */
void egpu_service_free(struct egpu_service *svc);

/* The kind of a family in a struct egpu_service_metric. */
enum egpu_service_metric_type {
    EGPU_SERVICE_COUNTER,   /* egpu_metric_counter */
    EGPU_SERVICE_GAUGE,     /* egpu_metric_gauge */
    EGPU_SERVICE_HISTOGRAM, /* egpu_metric_histogram */
};

/* One family a component shows on its /metrics (see egpu_metric_counter for
 * the rules on names, help and labels). */
struct egpu_service_metric {
    enum egpu_service_metric_type type;
    const char *name;
    const char *help;
    size_t nlabels;
    const char *const *labels; /* NULL when nlabels is 0 */
    size_t nbounds;            /* histograms: their upper bounds; else 0, NULL */
    const double *bounds;
    struct egpu_metric **out; /* gets the family (valid until egpu_metrics_free) */
};

/* Make a component's registry: *reg gets a new one (caller-owned, freed
 * with egpu_metrics_free, on error too: it may hold some families), then
 * m[0..n) are registered in it in that order (the order /metrics shows
 * them in; the service's egpu_http_* families follow, from
 * egpu_service_new). Returns 0, -ENOMEM ("metrics: out of memory"; *reg
 * NULL), or the first failed registration's error ("metrics: <strerror>":
 * -EINVAL, -EEXIST, EGPU_ELIMIT, -ENOMEM; the families after it are not
 * registered). */
int egpu_service_metrics_new(const struct egpu_service_metric *m, size_t n,
                             struct egpu_metrics **reg, struct egpu_error *err) EGPU_MUST_CHECK;

/* Register m[0..n) in reg (borrowed), in that order, as
 * egpu_service_metrics_new does in its new registry: for the families a
 * component's library adds to the registry its main made. Returns 0 or the
 * first failed registration's error ("metrics: <strerror>"; the families
 * before it stay registered, those after it are not). */
int egpu_service_metrics_add(struct egpu_metrics *reg, const struct egpu_service_metric *m,
                             size_t n, struct egpu_error *err) EGPU_MUST_CHECK;

struct egpu_kube_elector_config; /* egpu/kube.h: a leader elector's settings */

/* The elector settings of the common lease flags (struct egpu_cli_server's
 * lease: --lease-namespace, --lease-name, --lease-duration, --renew-deadline,
 * --retry-period, all in ms) into *ec, which is zeroed first: ns
 * opts->lease.ns, or default_ns (the client's namespace,
 * egpu_kube_namespace) when unset; release_on_cancel true (a leader that
 * stops gives the Lease up, so another takes over in about a second);
 * identity NULL (hostname and a random UUID). Strings are borrowed from
 * opts and default_ns (egpu_kube_elector_new copies them). The caller sets
 * the callbacks and ud, then calls egpu_kube_elector_new and _start when
 * opts->lease.elect. */
void egpu_service_elector_config(const struct egpu_cli_server *opts, const char *default_ns,
                                 struct egpu_kube_elector_config *ec);

/* A component's process, from its parsed options to its exit status. */
struct egpu_service_main {
    const char *prog; /* "egpu-scheduler": the log component */
    int log_level;    /* EGPU_LOG_* level, i.e. klog verbosity (egpu/log.h) */
    /* Build and start everything; 0, or an error with err set (then the
     * process logs "start failed: <message>" as an error, calls finish
     * and exits 1). */
    int (*start)(void *app, struct egpu_error *err);
    /* Either run, which returns once egpu_service_stopping() is true, */
    void (*run)(void *app);
    /* or, when run is NULL, tick, called every tick_ms until then. */
    void (*tick)(void *app);
    long tick_ms;
    /* Tear down whatever start made (also after a failed start). */
    void (*finish)(void *app);
};

/* Set the log level and component, log "starting version=<EGPU_VERSION>
 * v=<level>" (EGPU_LOG_NOTICE), stop on SIGTERM and SIGINT (ignore
 * SIGPIPE: a peer gone mid-reply fails that write only), start, run or
 * tick until a signal, log "stopping", finish. Returns the exit status: 0,
 * or 1 when start failed. */
int egpu_service_main(const struct egpu_service_main *m, void *app);

/* True once SIGTERM or SIGINT came (or egpu_service_request_stop ran).
 * Async-signal-safe; any thread. */
bool egpu_service_stopping(void);

/* What SIGTERM does: egpu_service_stopping() turns true (for a component's
 * own threads, at teardown). */
void egpu_service_request_stop(void);

#ifdef __cplusplus
}
#endif

#endif /* EGPU_NET_H */
