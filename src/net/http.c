/* net/http.c - the HTTP/1.1 (and HTTPS) server every component serves on,
 * a thin wrapper over libmicrohttpd (see egpu/net.h for the contract).
 *
 * DESIGN: libmicrohttpd runs its own pool of threads, each with an epoll
 * loop over its share of the connections; our handlers run on those
 * threads. epoll, not poll: a poll() over every connection on each wake-up
 * cost the webhook, with 500 API server connections, about half its CPU
 * per request (bench/webhook: 285 us of CPU a request with poll, 154 with
 * epoll, p99 1.9 ms against 1.1 ms at 2,000 requests/s). libmicrohttpd
 * 0.9.75's edge-triggered epoll can miss a client's FIN that arrives with
 * the last bytes of a partial body; the watchdog closes such a connection
 * (TCP state CLOSE_WAIT on two ticks in a row while it waits for its
 * request) within half a second instead of holding it until
 * request_timeout_s. Per request we keep a
 * `struct call`, made in the URI-log callback (the one place that sees the raw request target, so
 * the query string reaches handlers unparsed) and freed in the request-completed callback.
 * libmicrohttpd calls the access handler several times per request: once when the headers are in
 * (we route there and refuse early: 404, 405, or 413 when Content-Length is already too big), once
 * per chunk of body (collected into a bounded egpu_buf; past the bound we keep reading but drop the
 * bytes), and once at the end, when the handler runs and its response is queued. Malformed requests
 * never reach us: libmicrohttpd answers them (400) itself.
 *
 * The route table is written only while the server is stopped and read
 * without locks while it runs, so requests never contend on it.
 *
 * TLS: libmicrohttpd asks our callback (on_tls_cert) for the certificate
 * chain and key at each handshake, so the server can serve the files' new
 * pair without a restart and without touching open connections (see "TLS
 * credentials" below).
 */
#define _GNU_SOURCE /* explicit_bzero */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/tcp.h> /* TCP_INFO's tcpi_bytes_received */
#include <pthread.h>
#include <stdatomic.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <linux/sockios.h> /* SIOCINQ */
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <gnutls/abstract.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <microhttpd.h>

#include "egpu/log.h"
#include "egpu/net.h"
#include "tls_int.h"

#define TEXT_PLAIN           "text/plain; charset=utf-8"
#define HTTP_SNDBUF          (1024 * 1024)        /* per connection send buffer, bytes */
#define HTTP_CONN_MEMORY     ((size_t)256 * 1024) /* default per connection: headers, read buffer */
#define WATCH_TICK_MS        250                  /* connection watchdog period */
#define TCP_STATE_CLOSE_WAIT 8 /* tcpi_state: the peer sent FIN (Linux net/tcp_states.h) */

/* One open connection, as the watchdog sees it. A TLS connection is
 * handshaking from accept(2) until its client's Finished message is read;
 * then, and a plain one from accept(2), it is idle between requests (no
 * byte since its last response, since its handshake or since it opened),
 * receiving once a byte of a request came (TCP_INFO's bytes_received passed
 * the mark: 0 for a plain connection's first request, the bytes read by the
 * end of the handshake or of the last response), and answering from the
 * time its handler runs until the response is sent. */
enum conn_state { CONN_FREE, CONN_WAITING, CONN_ANSWERING, CONN_CLOSING };

/* An open connection's address and slot, sorted by address (evict_pick). */
struct held {
    unsigned char addr[16];
    unsigned slot;
};

struct conn {
    enum conn_state state;
    struct egpu_http_server *srv; /* for on_tls_cert, which gets only the connection */
    uint64_t tls_gen;             /* srv->tls_gen when it opened: the oldest pair it may use */
    int fd;
    uint64_t id;            /* which connection holds the record (srv->next_conn_id) */
    bool handshaken;        /* plain HTTP, or its TLS client's Finished was read */
    unsigned char addr[16]; /* client IP, IPv4 as ::ffff:a.b.c.d */
    uint64_t mark;          /* bytes read by the server when it became idle */
    struct timespec since;  /* when it opened or became idle, or its request's first byte
                               was seen */
    bool receiving;         /* bytes past mark seen: since is the first sighting */
    bool fin_seen;          /* the peer had closed its side at the last tick */
    bool client_trusted;    /* with a client CA: its certificate passed on_tls_verify (set on
                               the connection's own pool thread, read there by begin) */
};

struct egpu_http_header {
    char *name;
    char *value;
};

/* One certificate chain and its key: what a handshake presents. */
struct tls_pair {
    gnutls_pcert_st certs[EGPU_HTTP_TLS_CHAIN_MAX]; /* leaf first */
    unsigned ncerts;
    gnutls_privkey_t key;
    uint64_t gen;          /* 1 for the pair read by egpu_http_server_new, +1 per reload */
    int64_t not_after_s;   /* the leaf's notAfter, Unix seconds */
    struct tls_pair *next; /* on the retired list */
};

struct route {
    char *method;
    char *path;
    egpu_http_handler_cb cb;
    void *data;
};

struct egpu_http_server {
    struct egpu_http_config cfg; /* defaults filled in; strings below */
    char *bind_addr;             /* copy, or NULL */
    struct sockaddr_in sin;
    struct sockaddr_in6 sin6;
    bool ipv6;
    bool dual_stack;
    struct route *routes;
    size_t nroutes;
    size_t cap;
    egpu_http_observe_cb observe;
    void *observe_data;
    struct MHD_Daemon *daemon; /* NULL while stopped */
    uint16_t port;
    /* Connection limits and timeouts (see on_accept, on_connection, watchdog). */
    pthread_mutex_t conn_lock; /* guards conns, nconns, stop_watch */
    pthread_cond_t watch_cond;
    struct conn *conns; /* table of cap_conns slots */
    struct held *held;  /* cap_conns entries: evict_pick's scratch, under conn_lock */
    unsigned cap_conns, nconns;
    uint64_t next_conn_id; /* under conn_lock */
    bool stop_watch;
    bool watching; /* watchdog thread running */
    pthread_t watch;
    atomic_uint_least64_t refused_total, refused_per_client, timed_out_idle, timed_out_slow,
        timed_out_handshake;
    /* TLS (see "TLS credentials"); cert_file NULL = plain HTTP. */
    char *cert_file, *key_file;        /* copies of the config's paths */
    pthread_mutex_t tls_lock;          /* guards the fields below, except tls_gen */
    struct tls_pair *tls_cur;          /* the pair new handshakes get */
    struct tls_pair *retired;          /* pairs replaced, kept for connections opened before */
    struct egpu__file_watch tls_watch; /* cert_file and key_file, as tls_cur read them */
    atomic_uint_least64_t tls_gen;     /* tls_cur->gen, for conn_open without tls_lock */
    /* Client certificates (see "TLS client certificates"); NULL = none asked. */
    struct egpu__tls_client *tls_client;
    atomic_uint_least64_t clients_refused;
};

/* One request, from its request line to its completion. */
struct call {
    struct egpu_http_server *srv;
    char *uri;                 /* raw request target, e.g. "/filter?x=1" */
    const struct route *route; /* the route matched, NULL when none */
    struct egpu_buf body;
    struct timespec t0; /* CLOCK_MONOTONIC at the request line */
    int status;         /* status queued; 0 = none yet */
    bool started;       /* first access-handler call done */
    bool too_big;       /* body passed max_body_bytes: answer 413 */
    bool no_memory;     /* body could not be stored: answer 500 */
    struct conn *conn;  /* the connection's watchdog record, or NULL */
};

/* ------------------------------------------------------------------------ */
/* Responses                                                                */

static bool is_token_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

static bool has_crlf(const char *s)
{
    return strpbrk(s, "\r\n") != NULL;
}

int egpu_http_response_set_type(struct egpu_http_response *resp, const char *type)
{
    size_t n = strlen(type);

    if (n == 0 || n >= sizeof(resp->content_type) || has_crlf(type))
        return -EINVAL;
    memcpy(resp->content_type, type, n + 1);
    return 0;
}

int egpu_http_response_header(struct egpu_http_response *resp, const char *name, const char *value)
{
    static const char *const reserved[] = {"Content-Type", "Content-Length", "Connection",
                                           "Transfer-Encoding"};
    struct egpu_http_header *h;

    if (name[0] == '\0' || has_crlf(value))
        return -EINVAL;
    for (const char *p = name; *p; p++) {
        if (!is_token_char(*p))
            return -EINVAL;
    }
    for (size_t i = 0; i < sizeof(reserved) / sizeof(reserved[0]); i++) {
        if (strcasecmp(name, reserved[i]) == 0)
            return -EINVAL;
    }
    if (resp->nheaders >= EGPU_HTTP_RESP_HEADERS_MAX)
        return EGPU_ELIMIT;
    if (resp->headers == NULL) {
        resp->headers = egpu_calloc(EGPU_HTTP_RESP_HEADERS_MAX, sizeof(*resp->headers));
        if (resp->headers == NULL)
            return -ENOMEM;
    }
    h = &resp->headers[resp->nheaders];
    h->name = egpu_strdup(name);
    h->value = egpu_strdup(value);
    if (h->name == NULL || h->value == NULL) {
        egpu_free(h->name);
        egpu_free(h->value);
        h->name = NULL;
        h->value = NULL;
        return -ENOMEM;
    }
    resp->nheaders++;
    return 0;
}

int egpu_http_response_text(struct egpu_http_response *resp, int status, const char *fmt, ...)
{
    va_list ap;
    char small[256];
    char *text = small;
    int n, rc;

    resp->status = status;
    memcpy(resp->content_type, TEXT_PLAIN, sizeof(TEXT_PLAIN));
    egpu_buf_reset(&resp->body);
    va_start(ap, fmt);
    n = vsnprintf(small, sizeof(small), fmt, ap);
    va_end(ap);
    if (n < 0)
        return -EINVAL;
    if ((size_t)n >= sizeof(small)) {
        text = egpu_malloc((size_t)n + 1);
        if (text == NULL)
            return -ENOMEM;
        va_start(ap, fmt);
        vsnprintf(text, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    rc = egpu_buf_append(&resp->body, text, (size_t)n);
    if (text != small)
        egpu_free(text);
    return rc;
}

static void response_init(struct egpu_http_response *resp, size_t max)
{
    memset(resp, 0, sizeof(*resp));
    resp->status = 200;
    memcpy(resp->content_type, TEXT_PLAIN, sizeof(TEXT_PLAIN));
    egpu_buf_init(&resp->body, max);
}

static void response_close(struct egpu_http_response *resp)
{
    for (size_t i = 0; i < resp->nheaders; i++) {
        egpu_free(resp->headers[i].name);
        egpu_free(resp->headers[i].value);
    }
    egpu_free(resp->headers);
    resp->headers = NULL;
    resp->nheaders = 0;
    egpu_buf_free(&resp->body);
}

/* Queue resp (consumed: its body moves to libmicrohttpd) on conn. Returns
 * MHD_YES, or MHD_NO when it could not be queued (the connection is then
 * closed by libmicrohttpd). */
static enum MHD_Result send_response(struct MHD_Connection *conn, struct call *call,
                                     struct egpu_http_response *resp)
{
    struct MHD_Response *r;
    enum MHD_Result ret;
    size_t len = resp->body.len;
    char *data = egpu_buf_take(&resp->body);

    if (resp->status == 204 || resp->status == 304) {
        egpu_free(data); /* these never carry a body (RFC 9110 15.3.5, 15.4.5) */
        data = NULL;
        len = 0;
    }
    if (data == NULL) {
        r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    } else {
        r = MHD_create_response_from_buffer_with_free_callback(len, data, egpu_free);
        if (r == NULL)
            egpu_free(data);
    }
    if (r == NULL) {
        response_close(resp);
        return MHD_NO;
    }
    ret = MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, resp->content_type);
    for (size_t i = 0; ret == MHD_YES && i < resp->nheaders; i++)
        ret = MHD_add_response_header(r, resp->headers[i].name, resp->headers[i].value);
    if (ret == MHD_YES)
        ret = MHD_queue_response(conn, (unsigned)resp->status, r);
    MHD_destroy_response(r);
    if (ret == MHD_YES)
        call->status = resp->status;
    response_close(resp);
    return ret;
}

/* Answer with a short text of the server's own (404, 405, 413, 500). */
static enum MHD_Result send_text(struct MHD_Connection *conn, struct call *call, int status,
                                 const char *allow, const char *text)
{
    struct egpu_http_response resp;

    response_init(&resp, strlen(text) + 1);
    if (egpu_buf_append(&resp.body, text, strlen(text)) != 0 ||
        (allow != NULL && egpu_http_response_header(&resp, "Allow", allow) != 0)) {
        response_close(&resp);
        return MHD_NO;
    }
    resp.status = status;
    return send_response(conn, call, &resp);
}

/* ------------------------------------------------------------------------ */
/* Connection limits and timeouts                                           */

/* DESIGN: libmicrohttpd checks its own connection limits before it asks the
 * accept policy, and says nothing to the application when one bites, so the
 * limits are ours: on_accept refuses a connection past max_connections or
 * max_per_client and counts it; libmicrohttpd's own limit is set well above
 * ours and stays a backstop. Each open connection has a record (struct conn)
 * made when libmicrohttpd announces it and freed when it announces its close,
 * which is before it closes the socket, so the fd in a record is always that
 * connection's. Its inactivity timeout resets on every byte, which a client
 * that trickles its headers one byte at a time never lets expire; so a
 * watchdog thread looks at every connection each WATCH_TICK_MS and closes
 * (shutdown(2); the pool thread then sees the end and closes it) a TLS one
 * whose handshake has not finished handshake_timeout_s after it opened, one
 * that is idle past timeout_s, or one whose request's first byte (TCP_INFO's
 * bytes_received passing the mark) came more than request_timeout_s ago
 * without the request being complete.
 *
 * The mark is what the server had read when the connection went idle,
 * taken on the pool thread at that moment (bytes_read: bytes_received less
 * what still waits in the socket), never at the watchdog's next look: a
 * mark taken there counted the bytes that came in between as old, so a
 * client that sent a partial request with its connection (or right after a
 * response) was dropped at timeout_s instead of request_timeout_s. A plain
 * connection's first mark is 0, so every byte it ever sent counts. A TLS
 * connection's is taken when its client's Finished message is read (a
 * GnuTLS handshake hook, on_tls_finished), and GnuTLS reads a stream a
 * record at a time, so the request's bytes that follow are not in it. A
 * request whose bytes libmicrohttpd read together with the previous one
 * (pipelined) is seen by on_uri once its request line is in. Counts in and
 * out of the table race with each other across pool threads, so a burst can
 * pass a limit by at most threads - 1 connections.
 *
 * A full port is not first come, first served: per-address caps stop one
 * address, not max_connections / max_per_client of them (8 pods fill the
 * agent's 64 at 8 each), and the kubelet's probe, one connection from the
 * node, would then be refused until one of theirs closed. So a newcomer
 * that finds the port full takes a slot from the address holding the most
 * connections, if that address holds more than the newcomer's does: that
 * address's oldest connection waiting for its request (silent or
 * handshaking before one still receiving; never one being answered) is
 * closed and counted as refused for the total (evict_pick). An address
 * that holds no connection thus gets in while any address holds two or
 * more, and attackers on k addresses keep at most max_connections / k
 * each; only max_connections addresses holding one each fill the port. */

static void addr_key(const struct sockaddr *sa, unsigned char key[16])
{
    memset(key, 0, 16);
    if (sa != NULL && sa->sa_family == AF_INET) {
        key[10] = key[11] = 0xff;
        memcpy(key + 12, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, 4);
    } else if (sa != NULL && sa->sa_family == AF_INET6) {
        memcpy(key, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, 16);
    }
}

static void addr_text(const unsigned char key[16], char *out, size_t len)
{
    static const unsigned char v4[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

    if (inet_ntop(memcmp(key, v4, 12) == 0 ? AF_INET : AF_INET6,
                  memcmp(key, v4, 12) == 0 ? key + 12 : key, out, (socklen_t)len) == NULL)
        snprintf(out, len, "?");
}

/* Bytes the kernel has received on fd's TCP connection, or UINT64_MAX when
 * it cannot tell; *peer_closed: the peer has sent its FIN (CLOSE_WAIT). */
static uint64_t bytes_received(int fd, bool *peer_closed)
{
    struct tcp_info ti;
    socklen_t len = sizeof(ti);

    memset(&ti, 0, sizeof(ti));
    *peer_closed = false;
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
        len < offsetof(struct tcp_info, tcpi_bytes_received) + sizeof(ti.tcpi_bytes_received))
        return UINT64_MAX;
    *peer_closed = ti.tcpi_state == TCP_STATE_CLOSE_WAIT;
    return ti.tcpi_bytes_received;
}

/* Bytes of fd's TCP connection the server has read: those the kernel
 * received (TCP_INFO) less those still waiting in the socket (SIOCINQ), in
 * that order, so a byte that lands between the two counts as not read yet.
 * 0 when it cannot tell (every byte then counts as new: the stricter
 * timeout). */
static uint64_t bytes_read(int fd)
{
    bool peer_closed;
    uint64_t got = bytes_received(fd, &peer_closed);
    int inq = 0;

    if (got == UINT64_MAX || ioctl(fd, SIOCINQ, &inq) != 0 || inq < 0 || (uint64_t)inq > got)
        return 0;
    return got - (uint64_t)inq;
}

static double seconds_between(const struct timespec *a, const struct timespec *b)
{
    return (double)(b->tv_sec - a->tv_sec) + (double)(b->tv_nsec - a->tv_nsec) / 1e9;
}

/* Log the n-th event of a kind only when n is a power of two, so a flood
 * makes a few lines, not one per connection. */
static bool worth_logging(uint64_t n)
{
    return n != 0 && (n & (n - 1)) == 0;
}

static int held_cmp(const void *a, const void *b)
{
    return memcmp(((const struct held *)a)->addr, ((const struct held *)b)->addr, 16);
}

/* Whether waiting connection c is a better one to evict than pick (NULL:
 * none yet): one not receiving a request before one that is, then the
 * oldest mark. */
static bool evict_better(const struct conn *c, const struct conn *pick)
{
    if (pick == NULL || c->receiving != pick->receiving)
        return pick == NULL || !c->receiving;
    return c->since.tv_sec != pick->since.tv_sec ? c->since.tv_sec < pick->since.tv_sec
                                                 : c->since.tv_nsec < pick->since.tv_nsec;
}

/* The port is full (conn_lock held): the connection to close so that a
 * newcomer from an address holding `same` connections can come in (see
 * DESIGN above), or NULL when no address holds more than `same` with one
 * waiting. Connections already closing count for no address. O(n log n) in
 * the open connections, only while the port is full. */
static struct conn *evict_pick(struct egpu_http_server *srv, unsigned same)
{
    struct held *h = srv->held;
    struct conn *victim = NULL;
    unsigned n = 0, most = same;

    for (unsigned i = 0; i < srv->cap_conns; i++) {
        if (srv->conns[i].state == CONN_WAITING || srv->conns[i].state == CONN_ANSWERING) {
            memcpy(h[n].addr, srv->conns[i].addr, 16);
            h[n++].slot = i;
        }
    }
    qsort(h, n, sizeof(*h), held_cmp);
    for (unsigned i = 0, j; i < n; i = j) {
        struct conn *pick = NULL;

        for (j = i; j < n && memcmp(h[j].addr, h[i].addr, 16) == 0; j++) {
            struct conn *c = &srv->conns[h[j].slot];

            if (c->state == CONN_WAITING && evict_better(c, pick))
                pick = c;
        }
        if (j - i > most && pick != NULL) {
            most = j - i;
            victim = pick;
        }
    }
    return victim;
}

static enum MHD_Result on_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
    struct egpu_http_server *srv = cls;
    unsigned char key[16];
    unsigned same = 0, open, closing = 0;
    bool total = false, per_client = false;
    char text[INET6_ADDRSTRLEN], victim_text[INET6_ADDRSTRLEN];
    struct conn *victim = NULL;
    uint64_t n;

    (void)addrlen;
    addr_key(addr, key);
    pthread_mutex_lock(&srv->conn_lock);
    open = srv->nconns;
    for (unsigned i = 0; i < srv->cap_conns; i++) {
        if (srv->conns[i].state == CONN_FREE)
            continue;
        closing += srv->conns[i].state == CONN_CLOSING;
        same += memcmp(srv->conns[i].addr, key, 16) == 0;
    }
    per_client = same >= srv->cfg.max_per_client;
    if (open - closing >= srv->cfg.max_connections) {
        /* Full: make room if an address holds more (a record must be free
         * for the newcomer while the victim's is still closing). */
        if (!per_client && open < srv->cap_conns)
            victim = evict_pick(srv, same);
        if (victim != NULL) {
            (void)shutdown(victim->fd, SHUT_RDWR);
            victim->state = CONN_CLOSING;
            addr_text(victim->addr, victim_text, sizeof(victim_text));
        } else {
            total = true;
        }
    }
    pthread_mutex_unlock(&srv->conn_lock);
    if (victim == NULL && !total && !per_client)
        return MHD_YES;
    addr_text(key, text, sizeof(text));
    if (victim != NULL) {
        n = atomic_fetch_add(&srv->refused_total, 1) + 1;
        if (worth_logging(n))
            egpu_log(EGPU_LOG_WARN,
                     "connection evicted client=%s for=%s reason=total open=%u limit=%u "
                     "refused=%" PRIu64,
                     victim_text, text, open - closing, srv->cfg.max_connections, n);
        return MHD_YES;
    }
    if (total) {
        n = atomic_fetch_add(&srv->refused_total, 1) + 1;
        if (worth_logging(n))
            egpu_log(EGPU_LOG_WARN,
                     "connection refused client=%s reason=total open=%u limit=%u refused=%" PRIu64,
                     text, open, srv->cfg.max_connections, n);
    } else {
        n = atomic_fetch_add(&srv->refused_per_client, 1) + 1;
        if (worth_logging(n))
            egpu_log(EGPU_LOG_WARN,
                     "connection refused client=%s reason=per_client open=%u limit=%u "
                     "refused=%" PRIu64,
                     text, same, srv->cfg.max_per_client, n);
    }
    return MHD_NO;
}

/* Record a new connection; NULL (and the connection shut) when the table is
 * full, which only a burst racing past on_accept can make happen. */
static struct conn *conn_open(struct egpu_http_server *srv, int fd, const struct sockaddr *peer)
{
    struct conn *c = NULL;

    pthread_mutex_lock(&srv->conn_lock);
    for (unsigned i = 0; i < srv->cap_conns && c == NULL; i++) {
        if (srv->conns[i].state == CONN_FREE)
            c = &srv->conns[i];
    }
    if (c != NULL) {
        memset(c, 0, sizeof(*c));
        c->state = CONN_WAITING;
        c->srv = srv;
        c->tls_gen = atomic_load(&srv->tls_gen);
        c->fd = fd;
        c->id = ++srv->next_conn_id;
        c->handshaken = srv->cert_file == NULL; /* TLS: on_tls_finished */
        c->mark = 0;
        addr_key(peer, c->addr);
        clock_gettime(CLOCK_MONOTONIC, &c->since);
        srv->nconns++;
    }
    pthread_mutex_unlock(&srv->conn_lock);
    if (c == NULL) {
        atomic_fetch_add(&srv->refused_total, 1);
        (void)shutdown(fd, SHUT_RDWR);
    }
    return c;
}

static void conn_close(struct egpu_http_server *srv, struct conn *c)
{
    if (c == NULL)
        return;
    pthread_mutex_lock(&srv->conn_lock);
    c->state = CONN_FREE;
    srv->nconns--;
    pthread_mutex_unlock(&srv->conn_lock);
}

/* A request's handler starts (CONN_ANSWERING: no timeout while it runs and
 * its answer goes out), or its response is done (CONN_WAITING: idle again). */
static void conn_set_state(struct egpu_http_server *srv, struct conn *c, enum conn_state state)
{
    uint64_t mark;

    if (c == NULL)
        return;
    /* c->fd is this connection's while its pool thread runs this. */
    mark = state == CONN_WAITING ? bytes_read(c->fd) : 0;
    pthread_mutex_lock(&srv->conn_lock);
    if (c->state == CONN_WAITING || c->state == CONN_ANSWERING) {
        c->state = state;
        if (state == CONN_WAITING) {
            c->mark = mark;
            c->receiving = false;
            c->fin_seen = false;
            clock_gettime(CLOCK_MONOTONIC, &c->since);
        }
    }
    pthread_mutex_unlock(&srv->conn_lock);
}

/* A request line came on c (on_uri): its request is arriving, if the
 * watchdog has not seen its bytes yet (they came with the previous
 * request's, so they were read before the mark). */
static void conn_request_seen(struct egpu_http_server *srv, struct conn *c)
{
    if (c == NULL)
        return;
    pthread_mutex_lock(&srv->conn_lock);
    if (c->state == CONN_WAITING && !c->receiving) {
        c->handshaken = true; /* a request comes after the handshake, hook or none */
        c->receiving = true;
        clock_gettime(CLOCK_MONOTONIC, &c->since);
    }
    pthread_mutex_unlock(&srv->conn_lock);
}

enum timeout_reason { TIMEOUT_IDLE, TIMEOUT_SLOW, TIMEOUT_HANDSHAKE };

/* Close c for a timeout (conn_lock held). */
static void conn_time_out(struct egpu_http_server *srv, struct conn *c, enum timeout_reason why,
                          double seconds)
{
    static const char *const names[] = {"idle", "slow", "handshake"};
    atomic_uint_least64_t *count = why == TIMEOUT_SLOW        ? &srv->timed_out_slow
                                   : why == TIMEOUT_HANDSHAKE ? &srv->timed_out_handshake
                                                              : &srv->timed_out_idle;
    char text[INET6_ADDRSTRLEN];
    uint64_t n = atomic_fetch_add(count, 1) + 1;

    (void)shutdown(c->fd, SHUT_RDWR);
    c->state = CONN_CLOSING;
    if (worth_logging(n)) {
        addr_text(c->addr, text, sizeof(text));
        egpu_log(EGPU_LOG_WARN,
                 "connection timed out client=%s reason=%s seconds=%.1f count=%" PRIu64, text,
                 names[why], seconds, n);
    }
}

static void tls_prune(struct egpu_http_server *srv, uint64_t oldest);

/* The oldest TLS pair an open connection may use (conn_lock held):
 * UINT64_MAX when none is open. */
static uint64_t oldest_tls_gen(const struct egpu_http_server *srv)
{
    uint64_t oldest = UINT64_MAX;

    for (unsigned i = 0; i < srv->cap_conns; i++) {
        if (srv->conns[i].state != CONN_FREE && srv->conns[i].tls_gen < oldest)
            oldest = srv->conns[i].tls_gen;
    }
    return oldest;
}

/* One idle connection as the watchdog's tick saw it, and what the kernel
 * said it has received. */
struct watch_item {
    unsigned slot;
    uint64_t id;
    int fd;
    uint64_t got;
    bool peer_closed;
};

/* One tick over the idle connections. TCP_INFO is asked with conn_lock
 * released: holding it over a getsockopt for each of hundreds of
 * connections held every pool thread's state change for about a
 * millisecond each tick (a stall seen every 250 ms under load). A record
 * still holding the same connection (slot and id) when the lock is taken
 * again had that connection open throughout, so its fd was its own. */
static void watch_tick(struct egpu_http_server *srv, struct watch_item *items)
{
    struct timespec now;
    unsigned n = 0;

    for (unsigned i = 0; i < srv->cap_conns; i++) {
        if (srv->conns[i].state == CONN_WAITING)
            items[n++] = (struct watch_item){i, srv->conns[i].id, srv->conns[i].fd, 0, false};
    }
    pthread_mutex_unlock(&srv->conn_lock);
    for (unsigned k = 0; k < n; k++)
        items[k].got = bytes_received(items[k].fd, &items[k].peer_closed);
    clock_gettime(CLOCK_MONOTONIC, &now);
    pthread_mutex_lock(&srv->conn_lock);
    for (unsigned k = 0; k < n; k++) {
        struct conn *c = &srv->conns[items[k].slot];
        uint64_t got = items[k].got;
        double t;

        if (c->state != CONN_WAITING || c->id != items[k].id)
            continue;
        /* The peer closed while its connection waits for a request: twice
         * in a row, so a whole request that came with the FIN has had a
         * tick to reach its handler (which makes the connection answering). */
        if (items[k].peer_closed && c->fin_seen) {
            (void)shutdown(c->fd, SHUT_RDWR);
            c->state = CONN_CLOSING;
            continue;
        }
        c->fin_seen = items[k].peer_closed;
        t = seconds_between(&c->since, &now);
        if (!c->handshaken) {
            /* A TLS client that has not finished its handshake: silent,
             * part of a ClientHello, or stopped mid-way. */
            if (t >= (double)srv->cfg.handshake_timeout_s)
                conn_time_out(srv, c, TIMEOUT_HANDSHAKE, t);
            continue;
        }
        if (got != UINT64_MAX && got > c->mark && !c->receiving) {
            c->receiving = true;
            c->since = now;
            continue;
        }
        if (c->receiving && t >= (double)srv->cfg.request_timeout_s)
            conn_time_out(srv, c, TIMEOUT_SLOW, t);
        else if (!c->receiving && t >= (double)srv->cfg.timeout_s)
            conn_time_out(srv, c, TIMEOUT_IDLE, t);
    }
}

static void *watchdog(void *arg)
{
    struct egpu_http_server *srv = arg;
    struct watch_item *items;
    struct timespec until;

    pthread_mutex_lock(&srv->conn_lock);
    /* cap_conns is fixed while the server runs. */
    items = egpu_calloc(srv->cap_conns, sizeof(*items));
    if (items == NULL)
        egpu_log(EGPU_LOG_ERROR, "http watchdog: out of memory; connections do not time out");
    while (!srv->stop_watch) {
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_nsec += WATCH_TICK_MS * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        (void)pthread_cond_timedwait(&srv->watch_cond, &srv->conn_lock, &until);
        if (srv->stop_watch)
            break;
        if (items != NULL)
            watch_tick(srv, items);
        if (srv->cert_file != NULL)
            tls_prune(srv, oldest_tls_gen(srv));
    }
    pthread_mutex_unlock(&srv->conn_lock);
    egpu_free(items);
    return NULL;
}

void egpu_http_server_conn_stats(struct egpu_http_server *srv, struct egpu_http_conn_stats *out)
{
    out->refused_total = atomic_load(&srv->refused_total);
    out->refused_per_client = atomic_load(&srv->refused_per_client);
    out->timed_out_idle = atomic_load(&srv->timed_out_idle);
    out->timed_out_slow = atomic_load(&srv->timed_out_slow);
    out->timed_out_handshake = atomic_load(&srv->timed_out_handshake);
    pthread_mutex_lock(&srv->conn_lock);
    out->open = srv->nconns;
    pthread_mutex_unlock(&srv->conn_lock);
}

/* ------------------------------------------------------------------------ */
/* TLS credentials                                                          */

/* DESIGN: libmicrohttpd is given no certificate, only on_tls_cert
 * (MHD_OPTION_HTTPS_CERT_CALLBACK, GnuTLS's retrieve_function2), which
 * GnuTLS calls once per handshake for the chain and key to present. It
 * hands out tls_cur, the pair the server holds. So that the files' new pair
 * is served without a restart, the callback first asks the files' watch
 * (tls_files.c: stat(2) of both paths at most once per EGPU__TLS_CHECK_MS,
 * which sees a Secret volume's swapped ..data link) whether they changed.
 *
 * A change is read whole (tls_pair_load): every certificate must parse and
 * the key must be the leaf's. A state of the files that fails is kept by the
 * watch, so it is logged once and not read again until the files change
 * once more; meanwhile tls_cur stays in service.
 *
 * Lifetime: retrieve_function2 leaves the pair ours, and GnuTLS uses it
 * through the handshake after the callback returned. A replaced pair goes on
 * the retired list with its generation; a connection records the generation
 * current when it opened (conn_open), and its handshake comes later, so it
 * uses that pair or a newer one. The watchdog frees a retired pair once
 * every open connection is younger than it (tls_prune); stopping frees them
 * all. */

static void tls_pair_free(struct tls_pair *p)
{
    if (p == NULL)
        return;
    for (unsigned i = 0; i < p->ncerts; i++)
        gnutls_pcert_deinit(&p->certs[i]);
    if (p->key != NULL)
        gnutls_privkey_deinit(p->key);
    egpu_free(p);
}

/* Is key the private half of leaf's public key? */
static bool is_key_of(gnutls_pcert_st *leaf, gnutls_privkey_t key)
{
    unsigned char a[64], b[64];
    size_t na = sizeof(a), nb = sizeof(b);
    gnutls_pubkey_t pub;
    bool same;

    if (gnutls_pubkey_init(&pub) < 0)
        return false;
    same = gnutls_pubkey_import_privkey(pub, key, 0, 0) == 0 &&
           gnutls_pubkey_get_key_id(pub, GNUTLS_KEYID_USE_SHA256, a, &na) == 0 &&
           gnutls_pubkey_get_key_id(leaf->pubkey, GNUTLS_KEYID_USE_SHA256, b, &nb) == 0 &&
           na == nb && memcmp(a, b, na) == 0;
    gnutls_pubkey_deinit(pub);
    return same;
}

/* Parse the chain in pem into p (sorted leaf first). */
static int tls_parse_chain(struct tls_pair *p, const char *pem, size_t len, const char *path,
                           struct egpu_error *err)
{
    gnutls_datum_t d = {(unsigned char *)pem, (unsigned)len};
    gnutls_x509_crt_t *crts = NULL, leaf;
    unsigned n = 0;
    int g;

    g = gnutls_x509_crt_list_import2(&crts, &n, &d, GNUTLS_X509_FMT_PEM, 0);
    if (g < 0)
        return egpu_error_set(err, -EINVAL, "TLS certificate %s: %s", path, gnutls_strerror(g));
    if (n == 0 || n > EGPU_HTTP_TLS_CHAIN_MAX) {
        g = egpu_error_set(err, -EINVAL, "TLS certificate %s: %u certificates; allowed: 1..%d",
                           path, n, EGPU_HTTP_TLS_CHAIN_MAX);
        goto out_crts;
    }
    p->ncerts = n;
    g = gnutls_pcert_import_x509_list(p->certs, crts, &p->ncerts, GNUTLS_X509_CRT_LIST_SORT);
    if (g < 0) {
        p->ncerts = 0;
        g = egpu_error_set(err, -EINVAL, "TLS certificate %s: %s", path, gnutls_strerror(g));
        goto out_crts;
    }
    /* The leaf after sorting, which crts[0] need not be. */
    if (gnutls_pcert_export_x509(&p->certs[0], &leaf) == 0) {
        p->not_after_s = (int64_t)gnutls_x509_crt_get_expiration_time(leaf);
        gnutls_x509_crt_deinit(leaf);
    }
    g = 0;
out_crts:
    for (unsigned i = 0; i < n; i++)
        gnutls_x509_crt_deinit(crts[i]);
    gnutls_free(crts);
    return g;
}

/* Read the pair from cert_file and key_file and check it: every
 * certificate parses, the key parses and is the leaf's. On success writes
 * *out (free with tls_pair_free) and the stat of the files read into
 * ids[0] (certificate) and ids[1] (key). Returns 0, -errno, -EMSGSIZE, -EINVAL or -ENOMEM,
 * with err naming the file. */
static int tls_pair_load(const char *cert_file, const char *key_file, struct tls_pair **out,
                         struct egpu__file_id ids[2], struct egpu_error *err)
{
    char *cert_pem = NULL, *key_pem = NULL;
    size_t cert_len = 0, key_len = 0;
    struct tls_pair *p = NULL;
    gnutls_datum_t d;
    int rc, g;

    rc = egpu__read_pem(cert_file, &cert_pem, &cert_len, &ids[0], err);
    if (rc == 0)
        rc = egpu__read_pem(key_file, &key_pem, &key_len, &ids[1], err);
    if (rc != 0)
        goto out;
    p = egpu_calloc(1, sizeof(*p));
    if (p == NULL) {
        rc = egpu_error_set(err, -ENOMEM, "TLS: out of memory");
        goto out;
    }
    rc = tls_parse_chain(p, cert_pem, cert_len, cert_file, err);
    if (rc != 0)
        goto out;
    g = gnutls_privkey_init(&p->key);
    if (g < 0) {
        p->key = NULL;
        rc = egpu_error_set(err, -ENOMEM, "TLS key %s: %s", key_file, gnutls_strerror(g));
        goto out;
    }
    d = (gnutls_datum_t){(unsigned char *)key_pem, (unsigned)key_len};
    g = gnutls_privkey_import_x509_raw(p->key, &d, GNUTLS_X509_FMT_PEM, NULL, 0);
    if (g < 0) {
        rc = egpu_error_set(err, -EINVAL, "TLS key %s: %s", key_file, gnutls_strerror(g));
        goto out;
    }
    if (!is_key_of(&p->certs[0], p->key)) {
        rc = egpu_error_set(err, -EINVAL,
                            "TLS key %s does not match the certificate %s (its leaf's public key)",
                            key_file, cert_file);
        goto out;
    }
    *out = p;
    p = NULL;
out:
    tls_pair_free(p);
    if (key_pem != NULL)
        explicit_bzero(key_pem, key_len);
    egpu_free(key_pem);
    egpu_free(cert_pem);
    return rc;
}

/* Read the pair again when the files changed, at most once per
 * EGPU__TLS_CHECK_MS (tls_lock held). */
static void tls_refresh(struct egpu_http_server *srv)
{
    struct egpu_error err = {0};
    struct egpu__file_id got[2];
    struct tls_pair *p;

    if (!egpu__file_watch_is_due(&srv->tls_watch))
        return;
    if (tls_pair_load(srv->cert_file, srv->key_file, &p, got, &err) != 0) {
        egpu__file_watch_failed(&srv->tls_watch);
        egpu_log(EGPU_LOG_WARN,
                 "TLS files changed but cannot be used; serving the previous certificate "
                 "generation=%" PRIu64 " err=\"%s\"",
                 srv->tls_cur->gen, err.msg);
        return;
    }
    p->gen = srv->tls_cur->gen + 1;
    srv->tls_cur->next = srv->retired;
    srv->retired = srv->tls_cur;
    srv->tls_cur = p;
    egpu__file_watch_loaded(&srv->tls_watch, got, false);
    atomic_store(&srv->tls_gen, p->gen);
    egpu_log(EGPU_LOG_NOTICE,
             "TLS certificate reloaded cert=%s generation=%" PRIu64 " not_after=%" PRId64,
             srv->cert_file, p->gen, p->not_after_s);
}

/* Our record of the connection a GnuTLS session belongs to, or NULL. The
 * session's pointer is libmicrohttpd's connection (it sets it for its own
 * PSK callback), whose socket context is our record of it (on_connection),
 * which leads to the server. A connection without a record (the table was
 * full, so it is being shut) has none. */
static struct conn *conn_of_session(gnutls_session_t session)
{
    struct MHD_Connection *mc = gnutls_session_get_ptr(session);
    const union MHD_ConnectionInfo *info;

    info = mc != NULL ? MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT) : NULL;
    return info != NULL ? info->socket_context : NULL;
}

/* GnuTLS's retrieve_function2, called once per handshake: present the
 * server's current pair. A connection without a record gets no
 * certificate and its handshake fails. */
static int on_tls_cert(gnutls_session_t session, const gnutls_datum_t *req_ca_dn, int nreqs,
                       const gnutls_pk_algorithm_t *pk_algos, int pk_algos_length,
                       gnutls_pcert_st **pcert, unsigned int *pcert_length, gnutls_privkey_t *pkey)
{
    struct conn *c = conn_of_session(session);
    struct egpu_http_server *srv;

    (void)req_ca_dn;
    (void)nreqs;
    (void)pk_algos;
    (void)pk_algos_length;
    if (c == NULL)
        return -1;
    srv = c->srv;
    pthread_mutex_lock(&srv->tls_lock);
    tls_refresh(srv);
    *pcert = srv->tls_cur->certs;
    *pcert_length = srv->tls_cur->ncerts;
    *pkey = srv->tls_cur->key;
    pthread_mutex_unlock(&srv->tls_lock);
    return 0;
}

/* Free the retired pairs older than oldest, the oldest generation an open
 * connection may use (UINT64_MAX: none open). */
static void tls_prune(struct egpu_http_server *srv, uint64_t oldest)
{
    struct tls_pair **pp, *p;

    pthread_mutex_lock(&srv->tls_lock);
    pp = &srv->retired;
    while (*pp != NULL) {
        p = *pp;
        if (p->gen < oldest) {
            *pp = p->next;
            tls_pair_free(p);
        } else {
            pp = &p->next;
        }
    }
    pthread_mutex_unlock(&srv->tls_lock);
}

void egpu_http_server_tls_stats(struct egpu_http_server *srv, struct egpu_http_tls_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (srv->cert_file == NULL)
        return;
    pthread_mutex_lock(&srv->tls_lock);
    out->generation = srv->tls_cur->gen;
    out->reloads = srv->tls_watch.reloads;
    out->reload_failures = srv->tls_watch.failures;
    out->not_after_s = srv->tls_cur->not_after_s;
    for (const struct tls_pair *p = srv->retired; p != NULL; p = p->next)
        out->retained++;
    pthread_mutex_unlock(&srv->tls_lock);
    if (srv->tls_client != NULL)
        egpu__tls_client_counts(srv->tls_client, &out->ca_reloads, &out->ca_failures);
    out->clients_refused = atomic_load(&srv->clients_refused);
}

/* ------------------------------------------------------------------------ */
/* TLS client certificates                                                  */

/* DESIGN: with a client CA (tls_client_ca), a connection is served
 * only once its client presented a certificate that egpu__tls_client_verify
 * trusts. libmicrohttpd asks for client certificates only when given
 * MHD_OPTION_HTTPS_MEM_TRUST, a CA fixed at start, so it is given none:
 * client_cert_ask, called from on_connection (libmicrohttpd has made the
 * connection's GnuTLS session by then and not begun its handshake), asks for
 * a certificate itself and hooks on_tls_verify into the session. GnuTLS
 * calls that once the client's Certificate message is in, with a chain or
 * empty; a nonzero return fails the handshake, so an untrusted client never
 * gets to send a request. The CA bundle is ours (tls_client.c), read again
 * when its file changes, and the CertificateRequest names no CA, so a
 * client that picks its certificate by those names (Go's crypto/tls, as in
 * kube-scheduler) offers it whatever CA the bundle moves to.
 *
 * GNUTLS_CERT_REQUEST rather than REQUIRE, so that on_tls_verify also sees,
 * refuses and counts a client that sends no certificate. And a belt to the
 * braces: begin answers 403 to any request on a connection whose client did
 * not pass on_tls_verify, should a handshake ever skip the callback (GnuTLS
 * does for a resumed session; libmicrohttpd offers no resumption today). A
 * verdict holds for the connection's life: a CA removed from the bundle
 * stops new connections, not open ones. */

/* GnuTLS's verify function of a session of a server with a client CA:
 * 0 trusts the client, anything else fails the handshake. */
static int on_tls_verify(gnutls_session_t session)
{
    struct conn *c = conn_of_session(session);
    char why[160], addr[INET6_ADDRSTRLEN];
    uint64_t n;

    if (c == NULL)
        return GNUTLS_E_CERTIFICATE_ERROR;
    if (egpu__tls_client_verify(c->srv->tls_client, session, why, sizeof(why)) == 0) {
        c->client_trusted = true;
        return 0;
    }
    n = atomic_fetch_add(&c->srv->clients_refused, 1) + 1;
    addr_text(c->addr, addr, sizeof(addr));
    egpu_log(worth_logging(n) ? EGPU_LOG_WARN : EGPU_LOG_DEBUG,
             "TLS client refused client=%s reason=\"%s\" refused=%" PRIu64, addr, why, n);
    return GNUTLS_E_CERTIFICATE_ERROR;
}

/* Ask the client of a new connection for its certificate, checked by
 * on_tls_verify. Without a session to ask (none is expected), the
 * connection stays untrusted and begin refuses its requests. */
static void client_cert_ask(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_GNUTLS_SESSION);
    gnutls_session_t session = info != NULL ? info->tls_session : NULL;

    if (session == NULL)
        return;
    gnutls_certificate_server_set_request(session, GNUTLS_CERT_REQUEST);
    gnutls_session_set_verify_function(session, on_tls_verify);
}

/* ------------------------------------------------------------------------ */
/* TLS handshake deadline                                                   */

/* GnuTLS's handshake hook (gnutls_handshake_hook_func), after each Finished
 * message: when it is the client's (incoming), the client has done its
 * part of the handshake (TLS 1.2 and 1.3 alike; libmicrohttpd offers no
 * resumption). The connection leaves the handshake deadline and becomes
 * idle, its mark the bytes read so far (the handshake's; GnuTLS reads a
 * record at a time, so a request's bytes sent with the Finished still
 * count as new). Runs on the connection's pool thread. */
static int on_tls_finished(gnutls_session_t session, unsigned htype, unsigned when,
                           unsigned incoming, const gnutls_datum_t *msg)
{
    struct conn *c = conn_of_session(session);
    uint64_t mark;

    (void)htype;
    (void)when;
    (void)msg;
    if (c == NULL || !incoming)
        return 0;
    mark = bytes_read(c->fd);
    pthread_mutex_lock(&c->srv->conn_lock);
    if (c->state == CONN_WAITING && !c->handshaken) {
        c->handshaken = true;
        c->mark = mark;
        c->receiving = false;
        c->fin_seen = false;
        clock_gettime(CLOCK_MONOTONIC, &c->since);
    }
    pthread_mutex_unlock(&c->srv->conn_lock);
    return 0;
}

/* Watch a new TLS connection's handshake (called from on_connection, before
 * the handshake begins, like client_cert_ask). Without a session to hook
 * (none is expected) the connection never counts as handshaken and the
 * watchdog closes it at the deadline. */
static void tls_watch_handshake(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_GNUTLS_SESSION);

    if (info != NULL && info->tls_session != NULL)
        gnutls_handshake_set_hook_function(info->tls_session, GNUTLS_HANDSHAKE_FINISHED,
                                           GNUTLS_HOOK_POST, on_tls_finished);
}

/* ------------------------------------------------------------------------ */
/* Request processing                                                       */

const char *egpu_http_request_header(const struct egpu_http_request *req, const char *name)
{
    return MHD_lookup_connection_value(req->priv, MHD_HEADER_KIND, name);
}

static bool method_matches(const struct route *r, const char *method)
{
    return strcmp(r->method, method) == 0 ||
           (strcmp(method, "HEAD") == 0 && strcmp(r->method, "GET") == 0);
}

/* Allow header for path: its routes' methods, plus HEAD beside GET. */
static void allowed_methods(const struct egpu_http_server *srv, const char *path, char *out,
                            size_t len)
{
    size_t n = 0;

    out[0] = '\0';
    for (size_t i = 0; i < srv->nroutes; i++) {
        const struct route *r = &srv->routes[i];
        int w;

        if (strcmp(r->path, path) != 0)
            continue;
        w = snprintf(out + n, len - n, "%s%s%s", n ? ", " : "", r->method,
                     strcmp(r->method, "GET") == 0 ? ", HEAD" : "");
        if (w < 0 || (size_t)w >= len - n) {
            out[n] = '\0';
            return;
        }
        n += (size_t)w;
    }
}

/* The value of Content-Length: -1 when absent or not a number, LLONG_MAX
 * when too large to hold. */
static long long content_length(struct MHD_Connection *conn)
{
    const char *v =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    char *end;
    unsigned long long n;

    if (v == NULL || *v < '0' || *v > '9')
        return -1;
    errno = 0;
    n = strtoull(v, &end, 10);
    if (errno != 0 || *end != '\0' || n > (unsigned long long)LLONG_MAX)
        return LLONG_MAX;
    return (long long)n;
}

/* First call, headers in: route, or refuse before reading any body. */
static enum MHD_Result begin(struct egpu_http_server *srv, struct call *call,
                             struct MHD_Connection *conn, const char *url, const char *method)
{
    bool path_known = false;
    long long clen;
    char text[128];

    for (size_t i = 0; i < srv->nroutes && call->route == NULL; i++) {
        if (strcmp(srv->routes[i].path, url) != 0)
            continue;
        path_known = true;
        if (method_matches(&srv->routes[i], method))
            call->route = &srv->routes[i];
    }
    if (srv->tls_client != NULL && (call->conn == NULL || !call->conn->client_trusted)) {
        atomic_fetch_add(&srv->clients_refused, 1);
        return send_text(conn, call, 403, NULL, "403 forbidden: no trusted client certificate\n");
    }
    if (!path_known)
        return send_text(conn, call, 404, NULL, "404 page not found\n");
    if (call->route == NULL) {
        char allow[256];

        allowed_methods(srv, url, allow, sizeof(allow));
        return send_text(conn, call, 405, allow, "405 method not allowed\n");
    }
    clen = content_length(conn);
    if (clen > 0 && (unsigned long long)clen > srv->cfg.max_body_bytes) {
        snprintf(text, sizeof(text), "413 request body too large (max %zu bytes)\n",
                 srv->cfg.max_body_bytes);
        return send_text(conn, call, 413, NULL, text);
    }
    egpu_buf_init(&call->body, srv->cfg.max_body_bytes);
    return MHD_YES;
}

/* Last call, whole body in: run the handler and send its answer. */
static enum MHD_Result finish(struct egpu_http_server *srv, struct call *call,
                              struct MHD_Connection *conn, const char *url, const char *method)
{
    const char *q = strchr(call->uri, '?');
    const char *ctype =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
    struct egpu_http_request req = {
        .method = method,
        .path = url,
        .query = q ? q + 1 : "",
        .content_type = ctype ? ctype : "",
        .body = egpu_buf_str(&call->body),
        .body_len = call->body.len,
        .priv = conn,
    };
    struct egpu_http_response resp;
    char text[128];
    int rc;

    if (call->too_big) {
        snprintf(text, sizeof(text), "413 request body too large (max %zu bytes)\n",
                 srv->cfg.max_body_bytes);
        return send_text(conn, call, 413, NULL, text);
    }
    if (call->no_memory)
        return send_text(conn, call, 500, NULL, "500 internal server error: out of memory\n");
    conn_set_state(srv, call->conn, CONN_ANSWERING);
    response_init(&resp, srv->cfg.max_resp_bytes);
    rc = call->route->cb(call->route->data, &req, &resp);
    if (rc == 0 && (resp.status < 200 || resp.status > 599)) {
        egpu_log(EGPU_LOG_ERROR, "handler set a bad status method=%s route=%s status=%d", method,
                 call->route->path, resp.status);
        rc = -EINVAL;
    }
    if (rc != 0) {
        /* The route, not the decoded URL: a client cannot forge log lines. */
        egpu_log(EGPU_LOG_ERROR, "handler failed method=%s route=%s err=\"%s\"", method,
                 call->route->path, egpu_strerror(rc));
        response_close(&resp);
        snprintf(text, sizeof(text), "500 internal server error: %s\n", egpu_strerror(rc));
        return send_text(conn, call, 500, NULL, text);
    }
    return send_response(conn, call, &resp);
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *conn, const char *url,
                                 const char *method, const char *version, const char *upload,
                                 size_t *upload_size, void **req_cls)
{
    struct egpu_http_server *srv = cls;
    struct call *call = *req_cls;
    int rc;

    (void)version;
    if (call == NULL)
        return MHD_NO; /* on_uri ran out of memory: drop the connection */
    if (call->status != 0) {
        *upload_size = 0; /* answered early: discard the rest of the body */
        return MHD_YES;
    }
    if (!call->started) {
        call->started = true;
        return begin(srv, call, conn, url, method);
    }
    if (*upload_size > 0) {
        if (!call->too_big && !call->no_memory) {
            rc = egpu_buf_append(&call->body, upload, *upload_size);
            if (rc != 0) {
                call->too_big = rc == -EMSGSIZE;
                call->no_memory = rc != -EMSGSIZE;
                egpu_buf_free(&call->body);
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    return finish(srv, call, conn, url, method);
}

/* Called with the raw request target before the headers are parsed. The
 * value returned becomes *req_cls in on_access and on_completed. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
    struct call *call = egpu_calloc(1, sizeof(*call));
    const union MHD_ConnectionInfo *info;

    if (call == NULL)
        return NULL;
    call->srv = cls;
    info = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    call->conn = info != NULL ? info->socket_context : NULL;
    conn_request_seen(call->srv, call->conn);
    call->uri = egpu_strdup(uri);
    if (call->uri == NULL) {
        egpu_free(call);
        return NULL;
    }
    egpu_buf_init(&call->body, 0);
    clock_gettime(CLOCK_MONOTONIC, &call->t0);
    return call;
}

/* A new connection: counted and watched (conn_open), and room in its send
 * buffer for a whole large reply (a HostPriorityList of 5,000 nodes is
 * ~200 KB), so it goes out in one write instead of a write, a wait for the
 * peer to read and a wake-up per piece. The kernel caps the size at twice
 * net.core.wmem_max (~416 KiB on a stock kernel) and stops tuning the buffer
 * itself; a failure leaves it as it was. A closed connection leaves the
 * table (before libmicrohttpd closes its socket). */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    struct egpu_http_server *srv = cls;
    const union MHD_ConnectionInfo *info, *peer;
    int size = HTTP_SNDBUF;

    if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        conn_close(srv, *socket_context);
        *socket_context = NULL;
        return;
    }
    if (code != MHD_CONNECTION_NOTIFY_STARTED)
        return;
    info = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    peer = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (info == NULL)
        return;
    (void)setsockopt(info->connect_fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
    *socket_context = conn_open(srv, info->connect_fd, peer ? peer->client_addr : NULL);
    if (srv->cert_file != NULL && *socket_context != NULL)
        tls_watch_handshake(conn);
    if (srv->tls_client != NULL && *socket_context != NULL)
        client_cert_ask(conn);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **req_cls,
                         enum MHD_RequestTerminationCode toe)
{
    struct egpu_http_server *srv = cls;
    struct call *call = *req_cls;
    struct timespec t1;
    double seconds;

    (void)conn;
    if (call == NULL)
        return;
    *req_cls = NULL;
    conn_set_state(srv, call->conn, CONN_WAITING);
    if (call->status != 0) {
        clock_gettime(CLOCK_MONOTONIC, &t1);
        seconds =
            (double)(t1.tv_sec - call->t0.tv_sec) + (double)(t1.tv_nsec - call->t0.tv_nsec) / 1e9;
        egpu_log(EGPU_LOG_DEBUG, "served route=%s status=%d seconds=%.6f completed=%d",
                 call->route ? call->route->path : "-", call->status, seconds,
                 toe == MHD_REQUEST_TERMINATED_COMPLETED_OK);
        if (srv->observe != NULL)
            srv->observe(srv->observe_data, call->route ? call->route->path : NULL, call->status,
                         seconds);
    }
    egpu_buf_free(&call->body);
    egpu_free(call->uri);
    egpu_free(call);
}

EGPU_PRINTF(2, 0)
static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    char line[512];
    size_t n;

    (void)cls;
    vsnprintf(line, sizeof(line), fmt, ap);
    n = strlen(line);
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        line[--n] = '\0';
    egpu_log(EGPU_LOG_INFO, "microhttpd: %s", line);
}

/* ------------------------------------------------------------------------ */
/* Server lifecycle                                                         */

static int parse_bind(struct egpu_http_server *srv, const char *addr, struct egpu_error *err)
{
    memset(&srv->sin, 0, sizeof(srv->sin));
    memset(&srv->sin6, 0, sizeof(srv->sin6));
    srv->sin.sin_family = AF_INET;
    srv->sin.sin_port = htons(srv->cfg.port);
    srv->sin6.sin6_family = AF_INET6;
    srv->sin6.sin6_port = htons(srv->cfg.port);
    if (addr == NULL || addr[0] == '\0') {
        srv->sin.sin_addr.s_addr = htonl(INADDR_ANY);
        return 0;
    }
    if (inet_pton(AF_INET, addr, &srv->sin.sin_addr) == 1)
        return 0;
    if (inet_pton(AF_INET6, addr, &srv->sin6.sin6_addr) == 1) {
        srv->ipv6 = true;
        srv->dual_stack = IN6_IS_ADDR_UNSPECIFIED(&srv->sin6.sin6_addr);
        return 0;
    }
    return egpu_error_set(err, -EINVAL, "bind address %s: not an IPv4 or IPv6 address", addr);
}

int egpu_http_server_new(const struct egpu_http_config *cfg, struct egpu_http_server **out,
                         struct egpu_error *err)
{
    struct egpu__file_id ids[2];
    struct egpu_http_server *srv;
    int rc;

    if ((cfg->tls_cert_file == NULL) != (cfg->tls_key_file == NULL))
        return egpu_error_set(err, -EINVAL, "TLS needs both a certificate and a key file");
    if (cfg->tls_client_ca != NULL && cfg->tls_cert_file == NULL)
        return egpu_error_set(err, -EINVAL,
                              "client certificates (a client CA) need TLS: a certificate and key");
    if (cfg->tls_client_cn != NULL && cfg->tls_client_ca == NULL)
        return egpu_error_set(err, -EINVAL,
                              "a client certificate name needs a client CA to check it against");
    if (cfg->tls_cert_file != NULL && MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES)
        return egpu_error_set(err, -ENOTSUP, "libmicrohttpd was built without TLS");
    srv = egpu_calloc(1, sizeof(*srv));
    if (srv == NULL)
        return egpu_error_set(err, -ENOMEM, "http server: out of memory");
    srv->cfg = *cfg;
    pthread_mutex_init(&srv->conn_lock, NULL);
    pthread_mutex_init(&srv->tls_lock, NULL);
    {
        pthread_condattr_t ca;

        /* The watchdog's deadlines are CLOCK_MONOTONIC times. */
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&srv->watch_cond, &ca);
        pthread_condattr_destroy(&ca);
    }
    srv->cfg.bind_addr = NULL;
    srv->cfg.tls_cert_file = NULL;
    srv->cfg.tls_key_file = NULL;
    srv->cfg.tls_client_ca = NULL;
    srv->cfg.tls_client_cn = NULL;
    if (srv->cfg.threads == 0)
        srv->cfg.threads = EGPU_HTTP_THREADS_DEFAULT;
    if (srv->cfg.timeout_s == 0)
        srv->cfg.timeout_s = EGPU_HTTP_TIMEOUT_S_DEFAULT;
    if (srv->cfg.request_timeout_s == 0)
        srv->cfg.request_timeout_s = EGPU_HTTP_REQUEST_TIMEOUT_S_DEFAULT;
    if (srv->cfg.handshake_timeout_s == 0)
        srv->cfg.handshake_timeout_s = EGPU_HTTP_HANDSHAKE_TIMEOUT_S_DEFAULT;
    if (srv->cfg.max_connections == 0)
        srv->cfg.max_connections = EGPU_HTTP_CONNECTIONS_DEFAULT;
    if (srv->cfg.max_per_client == 0)
        srv->cfg.max_per_client = EGPU_HTTP_PER_CLIENT_DEFAULT;
    if (srv->cfg.max_body_bytes == 0)
        srv->cfg.max_body_bytes = EGPU_HTTP_BODY_MAX_DEFAULT;
    if (srv->cfg.max_resp_bytes == 0)
        srv->cfg.max_resp_bytes = EGPU_HTTP_RESP_MAX_DEFAULT;
    if (srv->cfg.conn_memory_bytes == 0)
        srv->cfg.conn_memory_bytes = HTTP_CONN_MEMORY;
    rc = parse_bind(srv, cfg->bind_addr, err);
    if (rc != 0)
        goto out_free;
    if (cfg->bind_addr != NULL && cfg->bind_addr[0] != '\0') {
        srv->bind_addr = egpu_strdup(cfg->bind_addr);
        if (srv->bind_addr == NULL) {
            rc = egpu_error_set(err, -ENOMEM, "http server: out of memory");
            goto out_free;
        }
    }
    if (cfg->tls_cert_file != NULL) {
        srv->cert_file = egpu_strdup(cfg->tls_cert_file);
        srv->key_file = egpu_strdup(cfg->tls_key_file);
        if (srv->cert_file == NULL || srv->key_file == NULL) {
            rc = egpu_error_set(err, -ENOMEM, "http server: out of memory");
            goto out_free;
        }
        rc = tls_pair_load(srv->cert_file, srv->key_file, &srv->tls_cur, ids, err);
        if (rc != 0)
            goto out_free;
        srv->tls_watch =
            (struct egpu__file_watch){.paths = {srv->cert_file, srv->key_file}, .n = 2};
        egpu__file_watch_loaded(&srv->tls_watch, ids, true);
        srv->tls_cur->gen = 1;
        atomic_store(&srv->tls_gen, 1);
    }
    if (cfg->tls_client_ca != NULL) {
        rc = egpu__tls_client_new(cfg->tls_client_ca, cfg->tls_client_cn, &srv->tls_client, err);
        if (rc != 0)
            goto out_free;
    }
    *out = srv;
    return 0;

out_free:
    egpu_http_server_free(srv);
    return rc;
}

int egpu_http_server_route(struct egpu_http_server *srv, const char *method, const char *path,
                           egpu_http_handler_cb cb, void *data)
{
    struct route *r;

    if (method == NULL || method[0] == '\0' || path == NULL || path[0] != '/' || cb == NULL)
        return -EINVAL;
    for (const char *p = method; *p; p++) {
        if (!is_token_char(*p))
            return -EINVAL;
    }
    if (srv->daemon != NULL)
        return -EBUSY;
    for (size_t i = 0; i < srv->nroutes; i++) {
        if (strcmp(srv->routes[i].method, method) == 0 && strcmp(srv->routes[i].path, path) == 0)
            return -EEXIST;
    }
    if (srv->nroutes == srv->cap) {
        size_t cap = srv->cap ? 2 * srv->cap : 8;
        struct route *p = egpu_realloc(srv->routes, cap * sizeof(*p));

        if (p == NULL)
            return -ENOMEM;
        srv->routes = p;
        srv->cap = cap;
    }
    r = &srv->routes[srv->nroutes];
    r->method = egpu_strdup(method);
    r->path = egpu_strdup(path);
    if (r->method == NULL || r->path == NULL) {
        egpu_free(r->method);
        egpu_free(r->path);
        return -ENOMEM;
    }
    r->cb = cb;
    r->data = data;
    srv->nroutes++;
    return 0;
}

int egpu_http_server_unroute(struct egpu_http_server *srv, const char *method, const char *path)
{
    if (srv->daemon != NULL)
        return -EBUSY;
    for (size_t i = 0; i < srv->nroutes; i++) {
        struct route *r = &srv->routes[i];

        if (strcmp(r->method, method) != 0 || strcmp(r->path, path) != 0)
            continue;
        egpu_free(r->method);
        egpu_free(r->path);
        memmove(r, r + 1, (srv->nroutes - i - 1) * sizeof(*r));
        srv->nroutes--;
        return 0;
    }
    return -ENOENT;
}

int egpu_http_server_observe(struct egpu_http_server *srv, egpu_http_observe_cb cb, void *data)
{
    if (srv->daemon != NULL)
        return -EBUSY;
    srv->observe = cb;
    srv->observe_data = cb ? data : NULL;
    return 0;
}

static void stop_watchdog(struct egpu_http_server *srv);

int egpu_http_server_start(struct egpu_http_server *srv, struct egpu_error *err)
{
    struct MHD_OptionItem opts[12];
    const union MHD_DaemonInfo *info;
    unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ERROR_LOG;
    size_t n = 0;
    int rc;

    if (srv->daemon != NULL)
        return egpu_error_set(err, -EBUSY, "http server already running");
    /* Room for the limit and a burst racing past it (see on_accept). */
    srv->cap_conns = srv->cfg.max_connections + srv->cfg.threads + 8;
    srv->conns = egpu_calloc(srv->cap_conns, sizeof(*srv->conns));
    srv->held = egpu_calloc(srv->cap_conns, sizeof(*srv->held));
    if (srv->conns == NULL || srv->held == NULL) {
        egpu_free(srv->conns);
        egpu_free(srv->held);
        srv->conns = NULL;
        srv->held = NULL;
        return egpu_error_set(err, -ENOMEM, "http server: out of memory");
    }
    srv->nconns = 0;
    srv->stop_watch = false;
    rc = pthread_create(&srv->watch, NULL, watchdog, srv);
    if (rc != 0) {
        egpu_free(srv->conns);
        egpu_free(srv->held);
        srv->conns = NULL;
        srv->held = NULL;
        return egpu_error_set(err, -rc, "http server: cannot start its watchdog: %s", strerror(rc));
    }
    srv->watching = true;
    if (srv->ipv6)
        flags |= srv->dual_stack ? MHD_USE_DUAL_STACK : MHD_USE_IPv6;
    opts[n++] = (struct MHD_OptionItem){MHD_OPTION_SOCK_ADDR, 0,
                                        srv->ipv6 ? (void *)&srv->sin6 : (void *)&srv->sin};
    /* Backstops: the watchdog closes idle and slow connections first, and
     * on_accept refuses past the limits long before libmicrohttpd's own,
     * which it splits among the pool threads. */
    opts[n++] = (struct MHD_OptionItem){
        MHD_OPTION_CONNECTION_TIMEOUT,
        (intptr_t)(srv->cfg.timeout_s + srv->cfg.request_timeout_s + 1), NULL};
    opts[n++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_LIMIT,
                                        (intptr_t)srv->cap_conns * srv->cfg.threads, NULL};
    /* Room to read a large request body in few calls (by default: see
     * conn_memory_bytes in net.h). */
    opts[n++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_MEMORY_LIMIT,
                                        (intptr_t)srv->cfg.conn_memory_bytes, NULL};
    if (srv->cfg.threads > 1)
        opts[n++] =
            (struct MHD_OptionItem){MHD_OPTION_THREAD_POOL_SIZE, (intptr_t)srv->cfg.threads, NULL};
    if (srv->cert_file != NULL) {
        /* No certificate of its own: each handshake asks on_tls_cert. */
        flags |= MHD_USE_TLS;
        opts[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_CERT_CALLBACK, 0, (void *)on_tls_cert};
        /* TLS 1.2 and 1.3 only (tls_int.h). */
        opts[n++] =
            (struct MHD_OptionItem){MHD_OPTION_HTTPS_PRIORITIES, 0, (void *)EGPU__TLS_PRIORITIES};
    }
    opts[n] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};

    /* The logger goes first, so that every message of the start goes through it. */
    srv->daemon = MHD_start_daemon(
        flags, srv->cfg.port, on_accept, srv, on_access, srv, MHD_OPTION_EXTERNAL_LOGGER,
        on_mhd_log, NULL, MHD_OPTION_URI_LOG_CALLBACK, on_uri, srv, MHD_OPTION_NOTIFY_COMPLETED,
        on_completed, srv, MHD_OPTION_NOTIFY_CONNECTION, on_connection, srv, MHD_OPTION_ARRAY, opts,
        MHD_OPTION_END);
    if (srv->daemon == NULL) {
        stop_watchdog(srv);
        return egpu_error_set(err, -EADDRNOTAVAIL,
                              "http server: cannot serve on %s port %u%s (address in use or not "
                              "local, or unusable TLS key; see the microhttpd log line)",
                              srv->bind_addr ? srv->bind_addr : "0.0.0.0", (unsigned)srv->cfg.port,
                              srv->cert_file ? " with TLS" : "");
    }
    info = MHD_get_daemon_info(srv->daemon, MHD_DAEMON_INFO_BIND_PORT);
    srv->port = info ? info->port : srv->cfg.port;
    egpu_log(EGPU_LOG_NOTICE,
             "serving addr=%s port=%u tls=%s threads=%u max_connections=%u max_per_client=%u "
             "idle_timeout_s=%u request_timeout_s=%u handshake_timeout_s=%u",
             srv->bind_addr ? srv->bind_addr : "0.0.0.0", (unsigned)srv->port,
             srv->cert_file ? "yes" : "no", srv->cfg.threads, srv->cfg.max_connections,
             srv->cfg.max_per_client, srv->cfg.timeout_s, srv->cfg.request_timeout_s,
             srv->cfg.handshake_timeout_s);
    return 0;
}

uint16_t egpu_http_server_port(const struct egpu_http_server *srv)
{
    return srv->daemon ? srv->port : 0;
}

/* Stop the watchdog's thread, if it runs. */
static void join_watchdog(struct egpu_http_server *srv)
{
    if (!srv->watching)
        return;
    pthread_mutex_lock(&srv->conn_lock);
    srv->stop_watch = true;
    pthread_cond_signal(&srv->watch_cond);
    pthread_mutex_unlock(&srv->conn_lock);
    pthread_join(srv->watch, NULL);
    srv->watching = false;
}

/* Stop the watchdog and drop the connection table (no connection open). */
static void stop_watchdog(struct egpu_http_server *srv)
{
    join_watchdog(srv);
    egpu_free(srv->conns);
    egpu_free(srv->held);
    srv->conns = NULL;
    srv->held = NULL;
    srv->cap_conns = 0;
    srv->nconns = 0;
}

void egpu_http_server_stop(struct egpu_http_server *srv)
{
    if (srv->daemon == NULL)
        return;
    /* The watchdog goes first: it must not shut an fd libmicrohttpd closes. */
    join_watchdog(srv);
    MHD_stop_daemon(srv->daemon);
    srv->daemon = NULL;
    srv->port = 0;
    stop_watchdog(srv);
    tls_prune(srv, UINT64_MAX); /* no connection left to use a replaced pair */
}

void egpu_http_server_free(struct egpu_http_server *srv)
{
    if (srv == NULL)
        return;
    egpu_http_server_stop(srv);
    for (size_t i = 0; i < srv->nroutes; i++) {
        egpu_free(srv->routes[i].method);
        egpu_free(srv->routes[i].path);
    }
    egpu_free(srv->routes);
    tls_prune(srv, UINT64_MAX);
    tls_pair_free(srv->tls_cur);
    egpu__tls_client_free(srv->tls_client);
    egpu_free(srv->cert_file);
    egpu_free(srv->key_file);
    egpu_free(srv->bind_addr);
    pthread_cond_destroy(&srv->watch_cond);
    pthread_mutex_destroy(&srv->tls_lock);
    pthread_mutex_destroy(&srv->conn_lock);
    egpu_free(srv);
}
