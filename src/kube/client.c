/* kube/client.c - HTTP exchanges with the API server, and the request verbs.
 *
 * One struct egpu_kube serves every thread of a component. It holds a pool
 * of idle libcurl handles; each pooled entry is an easy handle with its own
 * multi handle, whose connection cache keeps the TCP/TLS connection alive
 * between requests. A request takes an entry (or makes one), runs the
 * exchange with curl_multi_poll in slices of at most 100 ms so a stop flag
 * raised by another thread ends it promptly, and puts the entry back.
 *
 * Authentication follows the config: a bearer token (re-read from
 * token_file whenever the file changes, because service-account tokens
 * rotate), a client certificate and key, or basic auth. Every reply body is
 * bounded (egpu_buf with a maximum); a 2xx reply is JSON, anything else is
 * the API's Status (status.c) turned into a return code.
 *
 * Verbs (api_protocol_notes.md): GET an object; LIST with limit/continue,
 * restarting on 410 Expired; POST create; PUT update with the
 * resourceVersion in the body (409 Conflict when stale); PATCH with the
 * exact merge, JSON and strategic patch content types; DELETE; and POST of
 * a Binding to pods/<name>/binding.
 */
#define _GNU_SOURCE /* strncasecmp */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#include <curl/curl.h>

#include "egpu/log.h"
#include "kube_int.h"

#define POOL_IDLE_MAX  8                  /* idle handles kept per client */
#define PATH_MAX_BYTES ((size_t)64 << 10) /* one request path with its query */
#define TOKEN_MAX      ((size_t)64 << 10) /* bytes of a token file */
#define POLL_SLICE_MS  100                /* stop flag latency */
#define CONNECT_MAX_MS 10000L
#define LIST_RESTARTS  3 /* list restarts after an expired continue token */
#define RETRY_429      3 /* tries of a request answered 429 */

struct kube_conn {
    CURL *easy;
    CURLM *multi; /* owns the connection cache of this entry */
    struct kube_conn *next;
};

struct egpu_kube {
    struct egpu_kube_config *cfg;
    pthread_mutex_t mu; /* idle, nidle and the token fields */
    struct kube_conn *idle;
    unsigned nidle;
    char *token;              /* current bearer token, or NULL */
    struct stat token_st;     /* token_file when it was last read */
    bool token_file_read;     /* token_st is valid */
    bool token_warned;        /* one warning per failure streak */
    atomic_ulong requests;    /* exchanges attempted */
    atomic_ulong connections; /* TCP connections opened */
};

/* Sleep ms, in slices, returning early (false) when stop is raised. */
static bool sleep_unless_stopped(long ms, const atomic_bool *stop)
{
    int64_t end = egpu__kube_now_ms() + ms;

    for (;;) {
        int64_t left = end - egpu__kube_now_ms();
        struct timespec ts;

        if (stop != NULL && atomic_load(stop))
            return false;
        if (left <= 0)
            return true;
        if (left > POLL_SLICE_MS)
            left = POLL_SLICE_MS;
        ts.tv_sec = 0;
        ts.tv_nsec = (long)left * 1000000;
        nanosleep(&ts, NULL);
    }
}

/* ------------------------------------------------------------------------ */
/* Client                                                                   */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

int egpu_kube_new(const struct egpu_kube_config *cfg, struct egpu_kube **out,
                  struct egpu_error *err)
{
    struct egpu_kube *kc;
    int rc;

    if (cfg == NULL || cfg->server == NULL || cfg->server[0] == '\0')
        return egpu_error_set(err, -EINVAL, "kube client: the config has no server");
    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK)
        return egpu_error_set(err, -EIO, "kube client: curl_global_init: %s",
                              curl_easy_strerror(curl_init_rc));
    kc = egpu_calloc(1, sizeof(*kc));
    if (kc == NULL)
        return egpu_error_set(err, -ENOMEM, "kube client: out of memory");
    rc = egpu__kube_config_dup(cfg, &kc->cfg);
    if (!rc && cfg->token != NULL) {
        kc->token = egpu_strdup(cfg->token);
        if (kc->token == NULL)
            rc = -ENOMEM;
    }
    if (!rc)
        rc = -pthread_mutex_init(&kc->mu, NULL);
    if (rc) {
        if (kc->cfg != NULL)
            egpu_kube_config_free(kc->cfg);
        egpu_free(kc->token);
        egpu_free(kc);
        return egpu_error_set(err, rc, "kube client: %s", egpu_strerror(rc));
    }
    *out = kc;
    return 0;
}

static void conn_free(struct kube_conn *c)
{
    if (c == NULL)
        return;
    if (c->multi != NULL)
        curl_multi_cleanup(c->multi);
    if (c->easy != NULL)
        curl_easy_cleanup(c->easy);
    egpu_free(c);
}

void egpu_kube_free(struct egpu_kube *kc)
{
    if (kc == NULL)
        return;
    while (kc->idle != NULL) {
        struct kube_conn *c = kc->idle;

        kc->idle = c->next;
        conn_free(c);
    }
    pthread_mutex_destroy(&kc->mu);
    egpu_free(kc->token);
    egpu_kube_config_free(kc->cfg);
    egpu_free(kc);
}

const char *egpu_kube_namespace(const struct egpu_kube *kc)
{
    return kc->cfg->ns;
}

void egpu_kube_stats(struct egpu_kube *kc, struct egpu_kube_stats *out)
{
    out->requests = atomic_load(&kc->requests);
    out->connections = atomic_load(&kc->connections);
}

static struct kube_conn *conn_get(struct egpu_kube *kc)
{
    struct kube_conn *c;

    pthread_mutex_lock(&kc->mu);
    c = kc->idle;
    if (c != NULL) {
        kc->idle = c->next;
        kc->nidle--;
    }
    pthread_mutex_unlock(&kc->mu);
    if (c != NULL)
        return c;
    c = egpu_calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->easy = curl_easy_init();
    c->multi = curl_multi_init();
    if (c->easy == NULL || c->multi == NULL) {
        conn_free(c);
        return NULL;
    }
    return c;
}

static void conn_put(struct egpu_kube *kc, struct kube_conn *c)
{
    pthread_mutex_lock(&kc->mu);
    if (kc->nidle < POOL_IDLE_MAX) {
        c->next = kc->idle;
        kc->idle = c;
        kc->nidle++;
        c = NULL;
    }
    pthread_mutex_unlock(&kc->mu);
    conn_free(c);
}

/* Append "Authorization: Bearer <token>" to hdr when there is a token,
 * re-reading token_file first if it changed. */
static int auth_header(struct egpu_kube *kc, struct egpu_buf *hdr)
{
    const char *file = kc->cfg->token_file;
    int rc = 0;

    pthread_mutex_lock(&kc->mu);
    if (file != NULL) {
        struct stat sb;
        bool changed = true;

        if (stat(file, &sb) == 0 && kc->token_file_read)
            changed = sb.st_ino != kc->token_st.st_ino || sb.st_size != kc->token_st.st_size ||
                      sb.st_mtim.tv_sec != kc->token_st.st_mtim.tv_sec ||
                      sb.st_mtim.tv_nsec != kc->token_st.st_mtim.tv_nsec;
        if (changed) {
            char *data;
            size_t len;
            int frc = egpu__kube_read_file(file, TOKEN_MAX, &data, &len);

            if (frc == 0 && stat(file, &sb) == 0) {
                egpu__kube_trim(data);
                egpu_free(kc->token);
                kc->token = data;
                kc->token_st = sb;
                kc->token_file_read = true;
                kc->token_warned = false;
            } else {
                if (frc == 0)
                    egpu_free(data);
                if (!kc->token_warned)
                    egpu_log(EGPU_LOG_WARN,
                             "cannot read token, keeping the last one file=%s err=\"%s\"", file,
                             egpu_strerror(frc ? frc : -errno));
                kc->token_warned = true;
            }
        }
    }
    /* A token with a line break would forge headers: refuse it. */
    if (kc->token != NULL && strpbrk(kc->token, "\r\n") != NULL)
        rc = -EINVAL;
    else if (kc->token != NULL && kc->token[0] != '\0')
        rc = egpu_buf_printf(hdr, "Authorization: Bearer %s", kc->token);
    pthread_mutex_unlock(&kc->mu);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* One exchange                                                             */

struct xfer {
    struct egpu__kube_call *call;
    int body_rc; /* nonzero: the body callback stopped the transfer with it */
};

static size_t on_header(char *p, size_t size, size_t n, void *ud)
{
    struct xfer *x = ud;
    size_t len = size * n;
    char line[256];

    if (len >= sizeof(line))
        return len;
    memcpy(line, p, len);
    line[len] = '\0';
    if (strncmp(line, "HTTP/", 5) == 0) {
        char *sp = strchr(line, ' ');

        x->call->http_code = sp ? strtol(sp + 1, NULL, 10) : 0;
        x->call->retry_after_s = -1;
    } else if (strncasecmp(line, "Retry-After:", 12) == 0) {
        char *end;
        long v = strtol(line + 12, &end, 10);

        x->call->retry_after_s = end == line + 12 ? 1 : (v < 0 ? 0 : v);
    } else if ((strcmp(line, "\r\n") == 0 || strcmp(line, "\n") == 0) && x->call->on_open != NULL &&
               x->call->http_code >= 200 && x->call->http_code < 300) {
        x->call->on_open(x->call->on_open_ud); /* the headers are in: the body follows */
    }
    return len;
}

static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
    struct xfer *x = ud;
    struct egpu__kube_call *call = x->call;
    size_t len = size * n;
    int rc;

    if (call->sink != NULL && call->http_code >= 200 && call->http_code < 300)
        rc = call->sink(call->sink_ud, p, len);
    else
        rc = egpu_buf_append(call->reply, p, len);
    if (rc) {
        x->body_rc = rc;
        return 0; /* CURLE_WRITE_ERROR */
    }
    return len;
}

static int add_header(struct curl_slist **hdrs, const char *line)
{
    struct curl_slist *l = curl_slist_append(*hdrs, line);

    if (l == NULL)
        return -ENOMEM; /* *hdrs is still the caller's to free */
    *hdrs = l;
    return 0;
}

static int setup(struct egpu_kube *kc, CURL *h, struct egpu__kube_call *call, struct xfer *x,
                 struct curl_slist **hdrs, struct egpu_buf *url, char *errbuf)
{
    const struct egpu_kube_config *cfg = kc->cfg;
    struct egpu_buf auth;
    long timeout = call->timeout_ms == 0 ? cfg->timeout_ms : call->timeout_ms;
    const char *ctype = call->content_type ? call->content_type : "application/json";
    char ctype_hdr[128];
    int rc;

    rc = egpu_buf_printf(url, "%s%s", cfg->server, call->path);
    if (rc)
        return rc;
    egpu_buf_init(&auth, TOKEN_MAX + 64);
    rc = auth_header(kc, &auth);
    if (rc) {
        egpu_buf_free(&auth);
        return rc;
    }
    snprintf(ctype_hdr, sizeof(ctype_hdr), "Content-Type: %s", ctype);
    rc = add_header(hdrs, "Accept: application/json");
    if (!rc && auth.len > 0)
        rc = add_header(hdrs, egpu_buf_str(&auth));
    if (!rc)
        rc = add_header(hdrs, "Expect:"); /* no 100-continue round trip */
    if (!rc && call->body != NULL)
        rc = add_header(hdrs, ctype_hdr);
    egpu_buf_free(&auth);
    if (rc)
        return rc;

    curl_easy_reset(h);
    curl_easy_setopt(h, CURLOPT_URL, egpu_buf_str(url));
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    /* Probe idle connections (a quiet watch) so a dead peer is noticed in
     * about a minute, as client-go's 30 s keep-alive does. */
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPIDLE, 30L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPINTVL, 10L);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, *hdrs);
    curl_easy_setopt(h, CURLOPT_USERAGENT, cfg->user_agent);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
    if (timeout > 0) {
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout);
        curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
                         timeout < CONNECT_MAX_MS ? timeout : CONNECT_MAX_MS);
    } else {
        curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, CONNECT_MAX_MS);
    }
    if (call->body != NULL) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, call->body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)call->body_len);
        if (strcmp(call->method, "POST") != 0)
            curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, call->method);
    } else {
        curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
        if (strcmp(call->method, "GET") != 0)
            curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, call->method);
    }
    if (cfg->ca_data != NULL) {
        struct curl_blob blob = {cfg->ca_data, cfg->ca_data_len, CURL_BLOB_NOCOPY};

        curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &blob);
    } else if (cfg->ca_file != NULL) {
        curl_easy_setopt(h, CURLOPT_CAINFO, cfg->ca_file);
    }
    if (cfg->cert_data != NULL) {
        struct curl_blob blob = {cfg->cert_data, cfg->cert_data_len, CURL_BLOB_NOCOPY};

        curl_easy_setopt(h, CURLOPT_SSLCERT_BLOB, &blob);
        curl_easy_setopt(h, CURLOPT_SSLCERTTYPE, "PEM");
    } else if (cfg->cert_file != NULL) {
        curl_easy_setopt(h, CURLOPT_SSLCERT, cfg->cert_file);
    }
    if (cfg->key_data != NULL) {
        struct curl_blob blob = {cfg->key_data, cfg->key_data_len, CURL_BLOB_NOCOPY};

        curl_easy_setopt(h, CURLOPT_SSLKEY_BLOB, &blob);
        curl_easy_setopt(h, CURLOPT_SSLKEYTYPE, "PEM");
    } else if (cfg->key_file != NULL) {
        curl_easy_setopt(h, CURLOPT_SSLKEY, cfg->key_file);
    }
    if (cfg->insecure) {
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    if (cfg->username != NULL && cfg->token == NULL && cfg->token_file == NULL) {
        curl_easy_setopt(h, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
        curl_easy_setopt(h, CURLOPT_USERNAME, cfg->username);
        curl_easy_setopt(h, CURLOPT_PASSWORD, cfg->password ? cfg->password : "");
    }
    return 0;
}

static int curl_code_errno(CURLcode cc)
{
    switch (cc) {
    case CURLE_COULDNT_CONNECT:
        return -ECONNREFUSED;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
        return -EHOSTUNREACH;
    case CURLE_OPERATION_TIMEDOUT:
        return -ETIMEDOUT;
    case CURLE_OUT_OF_MEMORY:
        return -ENOMEM;
    case CURLE_ABORTED_BY_CALLBACK:
        return -ECANCELED;
    default:
        return -EIO;
    }
}

/* Drive h on c's multi handle until it finishes or stop is raised. */
static CURLcode run(struct kube_conn *c, const atomic_bool *stop, bool *canceled)
{
    CURLcode result = CURLE_OK;
    CURLMsg *msg;
    int running = 1, queued;
    bool done = false;

    *canceled = false;
    if (curl_multi_add_handle(c->multi, c->easy) != CURLM_OK)
        return CURLE_FAILED_INIT;
    for (;;) {
        if (curl_multi_perform(c->multi, &running) != CURLM_OK || running == 0)
            break;
        if (stop != NULL && atomic_load(stop)) {
            *canceled = true;
            break;
        }
        if (curl_multi_poll(c->multi, NULL, 0, stop ? POLL_SLICE_MS : 1000, NULL) != CURLM_OK)
            break;
    }
    while ((msg = curl_multi_info_read(c->multi, &queued)) != NULL) {
        if (msg->msg == CURLMSG_DONE && msg->easy_handle == c->easy) {
            result = msg->data.result;
            done = true;
        }
    }
    curl_multi_remove_handle(c->multi, c->easy);
    if (!done && !*canceled)
        result = CURLE_RECV_ERROR;
    return result;
}

int egpu__kube_perform(struct egpu_kube *kc, struct egpu__kube_call *call, struct egpu_error *err)
{
    char errbuf[CURL_ERROR_SIZE] = "";
    struct curl_slist *hdrs = NULL;
    struct xfer x = {call, 0};
    struct kube_conn *c;
    struct egpu_buf url;
    bool canceled;
    CURLcode cc;
    int rc;

    call->http_code = 0;
    call->retry_after_s = -1;
    c = conn_get(kc);
    if (c == NULL)
        return egpu_error_set(err, -ENOMEM, "%s %s: out of memory", call->method, call->path);
    egpu_buf_init(&url, PATH_MAX_BYTES + 4096);
    rc = setup(kc, c->easy, call, &x, &hdrs, &url, errbuf);
    if (rc) {
        curl_slist_free_all(hdrs);
        egpu_buf_free(&url);
        conn_put(kc, c);
        return egpu_error_set(err, rc, "%s %s: %s", call->method, call->path, egpu_strerror(rc));
    }
    cc = run(c, call->stop, &canceled);
    atomic_fetch_add(&kc->requests, 1);
    {
        long code = 0, conns = 0;

        if ((cc == CURLE_OK || x.body_rc) &&
            curl_easy_getinfo(c->easy, CURLINFO_RESPONSE_CODE, &code) == CURLE_OK && code > 0)
            call->http_code = code;
        if (curl_easy_getinfo(c->easy, CURLINFO_NUM_CONNECTS, &conns) == CURLE_OK && conns > 0)
            atomic_fetch_add(&kc->connections, (unsigned long)conns);
    }
    /* The handle must not keep pointers into this frame. */
    curl_easy_setopt(c->easy, CURLOPT_HTTPHEADER, NULL);
    curl_easy_setopt(c->easy, CURLOPT_ERRORBUFFER, NULL);
    curl_slist_free_all(hdrs);
    conn_put(kc, c);
    if (canceled)
        rc = egpu_error_set(err, -ECANCELED, "%s %s: stopped", call->method, call->path);
    else if (x.body_rc)
        rc = x.body_rc < 0 ? egpu_error_set(err, x.body_rc, "%s %s: %s", call->method, call->path,
                                            x.body_rc == -EMSGSIZE ? "reply too large"
                                                                   : egpu_strerror(x.body_rc))
                           : x.body_rc;
    else if (cc != CURLE_OK)
        rc = egpu_error_set(err, curl_code_errno(cc), "%s %s%s: %s", call->method, kc->cfg->server,
                            call->path, errbuf[0] ? errbuf : curl_easy_strerror(cc));
    else
        rc = 0;
    egpu_buf_free(&url);
    return rc;
}

int egpu__kube_fail(const struct egpu__kube_call *call, struct egpu_kube_status *st,
                    struct egpu_error *err)
{
    struct egpu_kube_status s;
    int rc;

    (void)egpu_kube_status_parse(call->reply ? call->reply->data : NULL,
                                 call->reply ? call->reply->len : 0, call->http_code, &s);
    rc = egpu_kube_status_errno(&s);
    if (st != NULL)
        *st = s;
    return egpu_error_set(err, rc, "%s %s: %d %s: %s", call->method, call->path, s.code,
                          s.reason[0] ? s.reason : "Failure", s.message);
}

/* ------------------------------------------------------------------------ */
/* Requests                                                                 */

/* One exchange with 429 retried, its 2xx body in *reply (egpu_buf_init'ed
 * by the caller, bounded by its max); a non-2xx reply is a failure
 * (egpu__kube_fail). Returns as egpu__kube_request. */
static int fetch(struct egpu_kube *kc, const char *method, const char *path,
                 const char *content_type, const char *body, size_t body_len, long timeout_ms,
                 const atomic_bool *stop, struct egpu_buf *reply, struct egpu_kube_status *st,
                 struct egpu_error *err)
{
    struct egpu__kube_call call = {
        .method = method,
        .path = path,
        .content_type = content_type,
        .body = body,
        .body_len = body_len,
        .timeout_ms = timeout_ms,
        .stop = stop,
        .reply = reply,
    };
    int rc;

    for (int attempt = 1;; attempt++) {
        egpu_buf_reset(reply);
        rc = egpu__kube_perform(kc, &call, err);
        if (rc)
            return rc;
        if (call.http_code != 429 || attempt >= RETRY_429)
            break;
        egpu_log(EGPU_LOG_INFO, "throttled, retrying method=%s path=%s retry_after_s=%ld", method,
                 path, call.retry_after_s);
        if (!sleep_unless_stopped(1000 * (call.retry_after_s < 1    ? 1
                                          : call.retry_after_s > 10 ? 10
                                                                    : call.retry_after_s),
                                  stop))
            return egpu_error_set(err, -ECANCELED, "%s %s: stopped", method, path);
    }
    if (call.http_code < 200 || call.http_code >= 300)
        return egpu__kube_fail(&call, st, err);
    return 0;
}

int egpu__kube_request(struct egpu_kube *kc, const char *method, const char *path,
                       const char *content_type, const char *body, size_t body_len, size_t max,
                       long timeout_ms, const atomic_bool *stop, json_t **out,
                       struct egpu_kube_status *st, struct egpu_error *err)
{
    struct egpu_buf reply;
    json_error_t jerr;
    json_t *doc;
    int rc;

    egpu_buf_init(&reply, max);
    rc = fetch(kc, method, path, content_type, body, body_len, timeout_ms, stop, &reply, st, err);
    if (rc == 0 && out != NULL) {
        doc = json_loadb(reply.data ? reply.data : "", reply.len, EGPU_KUBE_JSON_FLAGS, &jerr);
        if (doc == NULL)
            rc = egpu_error_set(err, -EPROTO, "%s %s: reply is not JSON: %s", method, path,
                                jerr.text);
        else
            *out = doc;
    }
    egpu_buf_free(&reply);
    return rc;
}

/* GET one list page into *out, decoded with keep (list_decode.c) when it is
 * not NULL, else whole. reply (egpu_buf_init'ed with EGPU_KUBE_LIST_MAX) is
 * the body's buffer, reset here and kept by the caller from page to page: a
 * page of 500 pods is about a megabyte, and a fresh buffer for each page
 * cost the scheduler's rebuild a tenth of its CPU in growing it (realloc's
 * copies, the kernel clearing new pages) and in glibc consolidating the
 * freed chunks (perf, bench_restart --nodes 20000). Returns as
 * egpu__kube_request. */
static int get_page(struct egpu_kube *kc, const char *path, const char *const *keep,
                    struct egpu_buf *reply, const atomic_bool *stop, json_t **out,
                    struct egpu_kube_status *st, struct egpu_error *err)
{
    int rc;

    if (keep == NULL)
        return egpu__kube_request(kc, "GET", path, NULL, NULL, 0, EGPU_KUBE_LIST_MAX, 0, stop, out,
                                  st, err);
    egpu_buf_reset(reply);
    rc = fetch(kc, "GET", path, NULL, NULL, 0, 0, stop, reply, st, err);
    if (rc == 0 && (rc = egpu__kube_list_decode(reply->data, reply->len, keep, out, err)) != 0)
        rc = egpu_error_prefix(err, rc == EGPU_ESYNTAX ? -EPROTO : rc, "GET %s: reply", path);
    return rc;
}

int egpu_kube_request(struct egpu_kube *kc, const char *method, const char *path,
                      const char *content_type, const char *body, size_t body_len, size_t max,
                      json_t **out, struct egpu_kube_status *st, struct egpu_error *err)
{
    return egpu__kube_request(kc, method, path, content_type, body, body_len, max, 0, NULL, out, st,
                              err);
}

/* Path of (res, ns, name, sub) into b, with a clear error. */
static int make_path(struct egpu_buf *b, const struct egpu_kube_resource *res, const char *ns,
                     const char *name, const char *sub, struct egpu_error *err)
{
    int rc;

    egpu_buf_init(b, PATH_MAX_BYTES);
    rc = egpu_kube_path(b, res, ns, name, sub);
    if (rc) {
        egpu_buf_free(b);
        return egpu_error_set(err, rc, "%s %s/%s: %s", res && res->plural ? res->plural : "?",
                              ns ? ns : "", name ? name : "",
                              rc == -EINVAL ? "namespace or name missing" : egpu_strerror(rc));
    }
    return 0;
}

int egpu__kube_object_call(struct egpu_kube *kc, const char *method,
                           const struct egpu_kube_resource *res, const char *ns, const char *name,
                           const char *sub, const char *ctype, const json_t *obj, long timeout_ms,
                           const atomic_bool *stop, json_t **out, struct egpu_kube_status *st,
                           struct egpu_error *err)
{
    struct egpu_buf path, body;
    int rc = make_path(&path, res, ns, name, sub, err);

    if (rc)
        return rc;
    egpu_buf_init(&body, EGPU_KUBE_BODY_MAX);
    if (obj != NULL) {
        rc = egpu__kube_dump(obj, &body, false);
        if (rc)
            rc = egpu_error_set(err, rc, "%s %s: cannot encode the body: %s", method,
                                egpu_buf_str(&path), egpu_strerror(rc));
    }
    if (!rc)
        rc = egpu__kube_request(kc, method, egpu_buf_str(&path), ctype,
                                obj ? egpu_buf_str(&body) : NULL, body.len, EGPU_KUBE_BODY_MAX,
                                timeout_ms, stop, out, st, err);
    egpu_buf_free(&body);
    egpu_buf_free(&path);
    return rc;
}

/* egpu__kube_object_call with the client's timeout and no stop flag. */
static int object_call(struct egpu_kube *kc, const char *method,
                       const struct egpu_kube_resource *res, const char *ns, const char *name,
                       const char *sub, const char *ctype, const json_t *obj, json_t **out,
                       struct egpu_kube_status *st, struct egpu_error *err)
{
    return egpu__kube_object_call(kc, method, res, ns, name, sub, ctype, obj, 0, NULL, out, st,
                                  err);
}

int egpu_kube_get(struct egpu_kube *kc, const struct egpu_kube_resource *res, const char *ns,
                  const char *name, json_t **out, struct egpu_kube_status *st,
                  struct egpu_error *err)
{
    if (name == NULL)
        return egpu_error_set(err, -EINVAL, "get: no name");
    return object_call(kc, "GET", res, ns, name, NULL, NULL, NULL, out, st, err);
}

int egpu_kube_create(struct egpu_kube *kc, const struct egpu_kube_resource *res, const char *ns,
                     const json_t *obj, json_t **out, struct egpu_kube_status *st,
                     struct egpu_error *err)
{
    if (res != NULL && res->namespaced && (ns == NULL || ns[0] == '\0'))
        return egpu_error_set(err, -EINVAL, "create %s: no namespace", res->plural);
    return object_call(kc, "POST", res, ns, NULL, NULL, NULL, obj, out, st, err);
}

int egpu_kube_update(struct egpu_kube *kc, const struct egpu_kube_resource *res, const char *ns,
                     const char *name, const json_t *obj, json_t **out, struct egpu_kube_status *st,
                     struct egpu_error *err)
{
    if (name == NULL)
        return egpu_error_set(err, -EINVAL, "update: no name");
    return object_call(kc, "PUT", res, ns, name, NULL, NULL, obj, out, st, err);
}

int egpu_kube_update_status(struct egpu_kube *kc, const struct egpu_kube_resource *res,
                            const char *ns, const char *name, const json_t *obj, json_t **out,
                            struct egpu_kube_status *st, struct egpu_error *err)
{
    if (name == NULL)
        return egpu_error_set(err, -EINVAL, "update status: no name");
    return object_call(kc, "PUT", res, ns, name, "status", NULL, obj, out, st, err);
}

static const char *patch_type(enum egpu_kube_patch_type type)
{
    switch (type) {
    case EGPU_KUBE_MERGE_PATCH:
        return "application/merge-patch+json";
    case EGPU_KUBE_JSON_PATCH:
        return "application/json-patch+json";
    case EGPU_KUBE_STRATEGIC_PATCH:
        return "application/strategic-merge-patch+json";
    }
    return NULL;
}

static int patch_sub(struct egpu_kube *kc, const struct egpu_kube_resource *res, const char *ns,
                     const char *name, const char *sub, enum egpu_kube_patch_type type,
                     const json_t *patch, json_t **out, struct egpu_kube_status *st,
                     struct egpu_error *err)
{
    const char *ctype = patch_type(type);

    if (name == NULL || ctype == NULL || patch == NULL)
        return egpu_error_set(err, -EINVAL, "patch: no name, patch or patch type");
    return object_call(kc, "PATCH", res, ns, name, sub, ctype, patch, out, st, err);
}

int egpu_kube_patch(struct egpu_kube *kc, const struct egpu_kube_resource *res, const char *ns,
                    const char *name, enum egpu_kube_patch_type type, const json_t *patch,
                    json_t **out, struct egpu_kube_status *st, struct egpu_error *err)
{
    return patch_sub(kc, res, ns, name, NULL, type, patch, out, st, err);
}

int egpu_kube_patch_status(struct egpu_kube *kc, const struct egpu_kube_resource *res,
                           const char *ns, const char *name, enum egpu_kube_patch_type type,
                           const json_t *patch, json_t **out, struct egpu_kube_status *st,
                           struct egpu_error *err)
{
    return patch_sub(kc, res, ns, name, "status", type, patch, out, st, err);
}

int egpu_kube_delete(struct egpu_kube *kc, const struct egpu_kube_resource *res, const char *ns,
                     const char *name, struct egpu_kube_status *st, struct egpu_error *err)
{
    if (name == NULL)
        return egpu_error_set(err, -EINVAL, "delete: no name");
    return object_call(kc, "DELETE", res, ns, name, NULL, NULL, NULL, NULL, st, err);
}

int egpu_kube_bind(struct egpu_kube *kc, const char *ns, const char *name, const char *uid,
                   const char *node, const json_t *annotations, struct egpu_kube_status *st,
                   struct egpu_error *err)
{
    json_t *binding, *meta;
    int rc;

    if (ns == NULL || name == NULL || node == NULL || node[0] == '\0')
        return egpu_error_set(err, -EINVAL, "bind: pod namespace, name and node are required");
    if (annotations != NULL && !json_is_object(annotations))
        return egpu_error_set(err, -EINVAL, "bind %s/%s: annotations must be an object", ns, name);
    meta = json_pack("{s:s, s:s}", "name", name, "namespace", ns);
    binding = json_pack("{s:s, s:s, s:o, s:{s:s, s:s}}", "kind", "Binding", "apiVersion", "v1",
                        "metadata", meta, "target", "kind", "Node", "name", node);
    if (binding == NULL)
        return egpu_error_set(err, -ENOMEM, "bind %s/%s: out of memory", ns, name);
    if ((uid != NULL && uid[0] != '\0' &&
         json_object_set_new(meta, "uid", json_string(uid)) != 0) ||
        (annotations != NULL &&
         json_object_set_new(meta, "annotations", json_deep_copy(annotations)) != 0)) {
        json_decref(binding);
        return egpu_error_set(err, -ENOMEM, "bind %s/%s: out of memory", ns, name);
    }
    rc =
        object_call(kc, "POST", &egpu_kube_pods, ns, name, "binding", NULL, binding, NULL, st, err);
    json_decref(binding);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* List                                                                     */

static int list_page_path(struct egpu_buf *b, const struct egpu_kube_resource *res, const char *ns,
                          const struct egpu_kube_list_opts *o, const char *cont)
{
    char limit[24];
    int rc = egpu_kube_path(b, res, ns, NULL, NULL);

    snprintf(limit, sizeof(limit), "%u", o->limit ? o->limit : 500);
    if (!rc)
        rc = egpu__kube_query(b, "limit", limit);
    if (!rc && o->label_selector != NULL && o->label_selector[0] != '\0')
        rc = egpu__kube_query(b, "labelSelector", o->label_selector);
    if (!rc && o->field_selector != NULL && o->field_selector[0] != '\0')
        rc = egpu__kube_query(b, "fieldSelector", o->field_selector);
    /* The apiserver rejects resourceVersion together with continue. */
    if (!rc && cont == NULL && o->resource_version != NULL)
        rc = egpu__kube_query(b, "resourceVersion", o->resource_version);
    if (!rc && cont != NULL)
        rc = egpu__kube_query(b, "continue", cont);
    return rc;
}

/* Replace each item of a page by what o->transform keeps of it, so the
 * rest is freed with the page. Returns 0 or -ENOMEM. */
static int transform_items(const struct egpu_kube_list_opts *o, json_t *items)
{
    for (size_t i = 0; i < json_array_size(items); i++) {
        json_t *t = o->transform(o->transform_ud, json_array_get(items, i));

        if (t == NULL || json_array_set_new(items, i, t) != 0)
            return -ENOMEM;
    }
    return 0;
}

int egpu__kube_list(struct egpu_kube *kc, const struct egpu_kube_resource *res, const char *ns,
                    const struct egpu_kube_list_opts *opts, const atomic_bool *stop, json_t **out,
                    struct egpu_kube_status *st, struct egpu_error *err)
{
    static const struct egpu_kube_list_opts none;
    const struct egpu_kube_list_opts *o = opts ? opts : &none;
    /* egpu_kube_keep's paths are applied while each page is decoded. */
    const char *const *keep =
        o->transform == egpu_kube_keep_transform ? (const char *const *)o->transform_ud : NULL;
    json_t *result = NULL, *page = NULL;
    struct egpu_buf path, reply;
    char *cont = NULL;
    json_t *meta;
    unsigned index = 0, restarts = 0;
    int rc = 0;

    egpu_buf_init(&path, PATH_MAX_BYTES);
    egpu_buf_init(&reply, EGPU_KUBE_LIST_MAX);
    for (;;) {
        json_t *items;
        const char *next;

        egpu_buf_reset(&path);
        rc = list_page_path(&path, res, ns, o, cont);
        if (rc) {
            rc = egpu_error_set(err, rc, "list %s: bad path: %s", res ? res->plural : "?",
                                egpu_strerror(rc));
            break;
        }
        rc = get_page(kc, egpu_buf_str(&path), keep, &reply, stop, &page, st, err);
        if (rc == EGPU_KUBE_EEXPIRED && cont != NULL && restarts < LIST_RESTARTS) {
            /* The continue token outlived its snapshot: start a fresh list. */
            egpu_log(EGPU_LOG_INFO, "list continue token expired, listing again resource=%s",
                     res->plural);
            restarts++;
            index = 0;
            egpu_free(cont);
            cont = NULL;
            json_decref(result);
            result = NULL;
            continue;
        }
        if (rc)
            break;
        items = json_object_get(page, "items");
        meta = json_object_get(page, "metadata");
        if (!json_is_object(page) || !(json_is_array(items) || json_is_null(items) || !items) ||
            (meta != NULL && !json_is_object(meta))) {
            rc = egpu_error_set(err, -EPROTO, "GET %s: reply is not a List", egpu_buf_str(&path));
            break;
        }
        if (o->transform != NULL && keep == NULL && json_is_array(items) &&
            (rc = transform_items(o, items)) != 0) {
            rc = egpu_error_set(err, rc, "list %s: out of memory", res->plural);
            break;
        }
        if (o->on_page != NULL && (rc = o->on_page(o->ud, index, page)) != 0) {
            rc = egpu_error_set(err, rc < 0 ? rc : -ECANCELED, "list %s: stopped by the caller",
                                res->plural);
            break;
        }
        index++;
        next = json_string_value(json_object_get(meta, "continue"));
        egpu_free(cont);
        cont = NULL;
        if (next != NULL && next[0] != '\0' && (cont = egpu_strdup(next)) == NULL) {
            rc = egpu_error_set(err, -ENOMEM, "list %s: out of memory", res->plural);
            break;
        }
        if (o->drop_items && json_is_array(items))
            json_array_clear(items); /* on_page has had them */
        if (result == NULL) {
            result = page;
            page = NULL;
            if (!json_is_array(items) && json_object_set_new(result, "items", json_array())) {
                rc = egpu_error_set(err, -ENOMEM, "list %s: out of memory", res->plural);
                break;
            }
        } else {
            if (json_is_array(items) &&
                json_array_extend(json_object_get(result, "items"), items) != 0) {
                rc = egpu_error_set(err, -ENOMEM, "list %s: out of memory", res->plural);
                break;
            }
            json_decref(page);
            page = NULL;
        }
        if (cont == NULL)
            break;
    }
    json_decref(page);
    egpu_free(cont);
    egpu_buf_free(&path);
    egpu_buf_free(&reply);
    if (rc) {
        json_decref(result);
        return rc;
    }
    meta = json_object_get(result, "metadata");
    if (json_is_object(meta)) {
        json_object_del(meta, "continue");
        json_object_del(meta, "remainingItemCount");
    }
    *out = result;
    return 0;
}

int egpu_kube_list(struct egpu_kube *kc, const struct egpu_kube_resource *res, const char *ns,
                   const struct egpu_kube_list_opts *opts, json_t **out,
                   struct egpu_kube_status *st, struct egpu_error *err)
{
    return egpu__kube_list(kc, res, ns, opts, NULL, out, st, err);
}
