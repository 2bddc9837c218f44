/* bench/webhook/webhook_load.c - load generator for egpu-webhook.
 *
 * What kube-apiserver does for every GPU pod created: POST an AdmissionReview
 * (admission.k8s.io/v1, CREATE of a pod with one container asking
 * elasticgpu.io/gpu-core 30 and elasticgpu.io/gpu-memory 4096, shaped as the
 * API server sends it: managedFields, the projected token volume, tolerations)
 * to /mutate and /validate over HTTPS, on kept-alive HTTP/1.1 connections.
 *
 * C clients (default 500), each its own libcurl multi handle with one easy
 * handle, so each keeps its own TLS connection open, as independent clients
 * do; one epoll loop drives them all through curl_multi_socket_action. A
 * request goes to the client idle longest (round robin over all C
 * connections), so the server has C live connections, not a few busy ones.
 *
 * Open loop (default): requests are scheduled at a fixed rate R (default
 * 2,000/s) for D seconds (default 10), after a warm-up at the same rate that
 * lasts W seconds (default 2) and at least until every client has opened its
 * connection. Latency is measured from the request's scheduled send time, not
 * from when it went out: when the server stalls, requests queue in the client
 * (all C connections busy) and the stall shows in the figures instead of
 * slowing the load down (no coordinated omission). The schedule is kept with a
 * timerfd at microsecond precision (timer slack set to 1 ns).
 *
 * Closed loop (--closed): every client sends its next request as soon as its
 * reply is in, for D seconds: the server's most requests per second at C
 * connections, latency measured from each send.
 *
 * Every reply is checked: HTTP 200, an AdmissionReview whose response.uid is
 * the request's uid (every request carries its own). Anything else counts as
 * an error, by kind. Prints requests sent/ok/errors, requests per second,
 * latency p50/p90/p99/p99.9/max in microseconds, and connections opened
 * (C when keep-alive holds: none opened during the run). Figures, not a test;
 * exit status 1 on a setup failure or any error reply. bench/webhook/run.sh
 * runs it against egpu-webhook; see bench/webhook/README.md.
 */
#define _GNU_SOURCE /* prctl's PR_SET_TIMERSLACK */
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define REPLY_MAX        (1024 * 1024) /* bytes of one reply kept; more is an error */
#define UID_ZERO         "00000000-0000-4000-8000-000000000000"
#define UID_LEN          (sizeof(UID_ZERO) - 1)
#define EGPU_PRINTF_ATTR __attribute__((format(printf, 3, 4)))

enum paths { PATH_ALTERNATE, PATH_MUTATE, PATH_VALIDATE };

struct options {
    const char *url;     /* base, e.g. https://127.0.0.1:9443 */
    const char *cacert;  /* PEM CA bundle; NULL = the system's */
    const char *samples; /* file for one line per measured request; NULL = none */
    unsigned clients;    /* concurrent kept-alive connections */
    double rate;         /* open loop: requests/s */
    double duration_s;   /* measured seconds */
    double warmup_s;     /* unmeasured seconds before */
    double timeout_s;    /* per request */
    enum paths paths;
    bool closed;     /* closed loop: max throughput */
    long server_pid; /* > 0: report this process's CPU time and run-queue wait */
};

/* One client: its own multi handle, easy handle and so its own connection. */
struct client {
    unsigned idx;
    CURLM *multi;
    CURL *easy;
    char *body; /* a copy of the AdmissionReview; uid patched in place */
    char uid[UID_LEN + 1];
    char *reply;
    size_t reply_len;
    bool reply_over;
    bool busy;
    bool measured; /* this request's latency counts */
    double sched;  /* scheduled send, us (monotonic) */
    double sent;   /* handed to libcurl, us */
    double timer;  /* libcurl's timeout for this multi, us; < 0 = none */
    struct run *run;
};

/* Errors by kind, with the first message of each. */
enum err_kind { E_TRANSPORT, E_STATUS, E_REPLY, E_UID, E_KINDS };
static const char *const err_name[E_KINDS] = {"transport", "HTTP status", "bad reply",
                                              "uid mismatch"};

/* Sums over a process's threads of /proc/PID/task/TID/schedstat: time on a
 * CPU and time runnable but waiting for one, ns. */
struct sched {
    double run_ns, wait_ns;
    bool ok;
};

struct samples {
    double *v;
    size_t n, cap;
};

struct run {
    const struct options *o;
    int ep, tfd;
    struct client *cl;
    unsigned *idle; /* ring of idle client indices, oldest first */
    unsigned idle_head, idle_n;
    struct curl_slist *hdr;
    char *url_mutate, *url_validate;
    size_t body_len;
    size_t uid_off;     /* where the uid lies in the body */
    uint64_t seq;       /* uids given out */
    unsigned long sent; /* measured requests sent */
    unsigned long ok;   /* measured requests answered correctly */
    unsigned long errors[E_KINDS];
    char first_err[E_KINDS][256];
    unsigned long allowed, denied, patched;
    long connects_warm, connects_run;
    double t_meas, t_end, t_last; /* measurement start, end of sending, last completion */
    struct samples at;            /* scheduled send, us after measuring began */
    struct samples lat;           /* from scheduled send */
    struct samples svc;           /* from actual send */
    struct samples wait;          /* scheduled send to actual send */
    double cpu_meas;              /* this process's CPU seconds when measuring began */
    struct sched srv0, self0;     /* schedstat sums when measuring began */
};

static double now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int push(struct samples *s, double v)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 65536;
        double *p = realloc(s->v, cap * sizeof(*p));

        if (p == NULL)
            return -ENOMEM;
        s->v = p;
        s->cap = cap;
    }
    s->v[s->n++] = v;
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

/* The p-quantile (0..1) of s, nearest rank; s must be sorted. */
static double quantile(const struct samples *s, double p)
{
    size_t i;

    if (s->n == 0)
        return NAN;
    i = (size_t)ceil(p * (double)s->n);
    return s->v[i == 0 ? 0 : i - 1];
}

static void print_latency(const char *what, struct samples *s)
{
    qsort(s->v, s->n, sizeof(*s->v), cmp_double);
    printf("%-34s p50 %7.0f  p90 %7.0f  p99 %7.0f  p99.9 %7.0f  max %7.0f\n", what,
           quantile(s, 0.5), quantile(s, 0.9), quantile(s, 0.99), quantile(s, 0.999),
           quantile(s, 1.0));
}

/* ---------------------------------------------------------------------- */
/* The AdmissionReview: a pod as kubectl creates it and the API server      */
/* sends it, with our resource names.                                       */

static json_t *resources(void)
{
    return json_pack("{s:{s:s,s:s,s:s},s:{s:s,s:s,s:s,s:s}}", "limits", "elasticgpu.io/gpu-core",
                     "30", "elasticgpu.io/gpu-memory", "4096", "memory", "16Gi", "requests", "cpu",
                     "4", "elasticgpu.io/gpu-core", "30", "elasticgpu.io/gpu-memory", "4096",
                     "memory", "16Gi");
}

static json_t *managed_fields(void)
{
    json_t *e = json_object();
    json_t *res = json_pack("{s:{},s:{s:{},s:{},s:{}},s:{s:{},s:{},s:{},s:{}}}", ".", "f:limits",
                            ".", "f:elasticgpu.io/gpu-core", "f:elasticgpu.io/gpu-memory",
                            "f:memory", "f:requests", ".", "f:cpu", "f:elasticgpu.io/gpu-core",
                            "f:elasticgpu.io/gpu-memory", "f:memory");
    json_t *ctr = json_pack("{s:{},s:{},s:{},s:{},s:{},s:o,s:{},s:{}}", ".", "f:command", "f:image",
                            "f:imagePullPolicy", "f:name", "f:resources", res,
                            "f:terminationMessagePath", "f:terminationMessagePolicy");
    json_t *spec = json_pack("{s:{s:o},s:{},s:{},s:{},s:{},s:{},s:{}}", "f:containers",
                             "k:{\"name\":\"train\"}", ctr, "f:dnsPolicy", "f:enableServiceLinks",
                             "f:restartPolicy", "f:schedulerName", "f:securityContext",
                             "f:terminationGracePeriodSeconds");
    json_t *v1 = json_pack("{s:{s:{s:{},s:{}}},s:o}", "f:metadata", "f:labels", ".", "f:app",
                           "f:spec", spec);

    json_object_set_new(e, "manager", json_string("kubectl-create"));
    json_object_set_new(e, "operation", json_string("Update"));
    json_object_set_new(e, "apiVersion", json_string("v1"));
    json_object_set_new(e, "time", json_string("2026-07-24T09:30:12Z"));
    json_object_set_new(e, "fieldsType", json_string("FieldsV1"));
    json_object_set_new(e, "fieldsV1", v1);
    return json_pack("[o]", e);
}

static json_t *volumes(void)
{
    json_t *sources = json_pack(
        "[{s:{s:i,s:s}},{s:{s:s,s:[{s:s,s:s}]}},{s:{s:[{s:s,s:{s:s,s:s}}]}}]",
        "serviceAccountToken", "expirationSeconds", 3607, "path", "token", "configMap", "name",
        "kube-root-ca.crt", "items", "key", "ca.crt", "path", "ca.crt", "downwardAPI", "items",
        "path", "namespace", "fieldRef", "apiVersion", "v1", "fieldPath", "metadata.namespace");

    return json_pack("[{s:s,s:{s:o,s:i}}]", "name", "kube-api-access-7xk2p", "projected", "sources",
                     sources, "defaultMode", 420);
}

static json_t *pod(void)
{
    json_t *ctr =
        json_pack("{s:s,s:s,s:[s,s],s:o,s:[{s:s,s:b,s:s}],s:s,s:s,s:s}", "name", "train", "image",
                  "registry.example.com/ml/trainer:1.4.2", "command", "python", "train.py",
                  "resources", resources(), "volumeMounts", "name", "kube-api-access-7xk2p",
                  "readOnly", 1, "mountPath", "/var/run/secrets/kubernetes.io/serviceaccount",
                  "terminationMessagePath", "/dev/termination-log", "terminationMessagePolicy",
                  "File", "imagePullPolicy", "IfNotPresent");
    json_t *tol =
        json_pack("[{s:s,s:s,s:s,s:i},{s:s,s:s,s:s,s:i}]", "key", "node.kubernetes.io/not-ready",
                  "operator", "Exists", "effect", "NoExecute", "tolerationSeconds", 300, "key",
                  "node.kubernetes.io/unreachable", "operator", "Exists", "effect", "NoExecute",
                  "tolerationSeconds", 300);
    json_t *spec = json_object();
    json_t *meta = json_pack("{s:s,s:s,s:n,s:{s:s},s:o}", "name", "train-0", "namespace", "ml-team",
                             "creationTimestamp", "labels", "app", "trainer", "managedFields",
                             managed_fields());

    json_object_set_new(spec, "volumes", volumes());
    json_object_set_new(spec, "containers", json_pack("[o]", ctr));
    json_object_set_new(spec, "restartPolicy", json_string("Never"));
    json_object_set_new(spec, "terminationGracePeriodSeconds", json_integer(30));
    json_object_set_new(spec, "dnsPolicy", json_string("ClusterFirst"));
    json_object_set_new(spec, "serviceAccountName", json_string("default"));
    json_object_set_new(spec, "serviceAccount", json_string("default"));
    json_object_set_new(spec, "securityContext", json_object());
    json_object_set_new(spec, "schedulerName", json_string("default-scheduler"));
    json_object_set_new(spec, "tolerations", tol);
    json_object_set_new(spec, "priority", json_integer(0));
    json_object_set_new(spec, "enableServiceLinks", json_true());
    json_object_set_new(spec, "preemptionPolicy", json_string("PreemptLowerPriority"));
    return json_pack("{s:s,s:s,s:o,s:o,s:{}}", "kind", "Pod", "apiVersion", "v1", "metadata", meta,
                     "spec", spec, "status");
}

/* The AdmissionReview text, with uid UID_ZERO (patched per request). NULL on
 * allocation failure; free() it. */
static char *admission_review(void)
{
    json_t *gvk = json_pack("{s:s,s:s,s:s}", "group", "", "version", "v1", "kind", "Pod");
    json_t *gvr = json_pack("{s:s,s:s,s:s}", "group", "", "version", "v1", "resource", "pods");
    json_t *req = json_pack(
        "{s:s,s:O,s:O,s:O,s:O,s:s,s:s,s:s,s:{s:s,s:[s,s]},s:o,s:n,s:b,s:{s:s,s:s,s:s}}", "uid",
        UID_ZERO, "kind", gvk, "resource", gvr, "requestKind", gvk, "requestResource", gvr, "name",
        "train-0", "namespace", "ml-team", "operation", "CREATE", "userInfo", "username",
        "kubernetes-admin", "groups", "kubeadm:cluster-admins", "system:authenticated", "object",
        pod(), "oldObject", "dryRun", 0, "options", "kind", "CreateOptions", "apiVersion",
        "meta.k8s.io/v1", "fieldManager", "kubectl-create");
    json_t *review = json_pack("{s:s,s:s,s:o}", "kind", "AdmissionReview", "apiVersion",
                               "admission.k8s.io/v1", "request", req);
    char *text = review != NULL ? json_dumps(review, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;

    json_decref(review);
    json_decref(gvk);
    json_decref(gvr);
    return text;
}

/* ---------------------------------------------------------------------- */
/* libcurl callbacks                                                        */

static size_t on_write(char *p, size_t size, size_t n, void *data)
{
    struct client *c = data;
    size_t len = size * n;

    if (c->reply_len + len > REPLY_MAX) {
        c->reply_over = true;
        return len;
    }
    memcpy(c->reply + c->reply_len, p, len);
    c->reply_len += len;
    return len;
}

/* libcurl's sockets of client c into the run's epoll set; the event's data
 * carries the client index (high 32 bits) and the fd. */
static int on_socket(CURL *e, curl_socket_t s, int what, void *userp, void *socketp)
{
    struct client *c = userp;
    struct epoll_event ev = {.data.u64 = (uint64_t)c->idx << 32 | (uint32_t)s};

    (void)e;
    if (what == CURL_POLL_REMOVE) {
        (void)epoll_ctl(c->run->ep, EPOLL_CTL_DEL, s, NULL);
        return 0;
    }
    ev.events = (what & CURL_POLL_IN ? EPOLLIN : 0u) | (what & CURL_POLL_OUT ? EPOLLOUT : 0u);
    /* A socket new to this multi is added, one seen before modified; the
     * other operation is the fallback when the set disagrees. */
    if (epoll_ctl(c->run->ep, socketp == NULL ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, s, &ev) != 0 &&
        epoll_ctl(c->run->ep, socketp == NULL ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, s, &ev) != 0) {
        perror("webhook_load: epoll_ctl");
        return -1;
    }
    curl_multi_assign(c->multi, s, c);
    return 0;
}

static int on_timer(CURLM *m, long timeout_ms, void *userp)
{
    struct client *c = userp;

    (void)m;
    c->timer = timeout_ms < 0 ? -1 : now_us() + (double)timeout_ms * 1e3;
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Requests                                                                 */

/* Count one error of kind k; keep the first one's message. */
static void EGPU_PRINTF_ATTR error(struct run *r, enum err_kind k, const char *fmt, ...)
{
    va_list ap;

    r->errors[k]++;
    if (r->first_err[k][0] != '\0')
        return;
    va_start(ap, fmt);
    vsnprintf(r->first_err[k], sizeof(r->first_err[k]), fmt, ap);
    va_end(ap);
}

/* Check c's reply; count it. */
static void check(struct run *r, struct client *c, CURLcode res)
{
    json_error_t jerr;
    json_t *doc, *resp, *allowed;
    const char *uid, *kind;
    long status = 0;

    if (res != CURLE_OK) {
        error(r, E_TRANSPORT, "%s (curl code %d)", curl_easy_strerror(res), (int)res);
        return;
    }
    curl_easy_getinfo(c->easy, CURLINFO_RESPONSE_CODE, &status);
    c->reply[c->reply_len] = '\0';
    if (status != 200) {
        error(r, E_STATUS, "%.200s (HTTP %ld)", c->reply, status);
        return;
    }
    if (c->reply_over) {
        error(r, E_REPLY, "reply over %d bytes", REPLY_MAX);
        return;
    }
    doc = json_loadb(c->reply, c->reply_len, 0, &jerr);
    resp = json_object_get(doc, "response");
    uid = json_string_value(json_object_get(resp, "uid"));
    kind = json_string_value(json_object_get(doc, "kind"));
    allowed = json_object_get(resp, "allowed");
    if (!json_is_object(resp) || !json_is_boolean(allowed) || kind == NULL ||
        strcmp(kind, "AdmissionReview") != 0) {
        error(r, E_REPLY, "not an AdmissionReview with response.allowed: %.200s", c->reply);
    } else if (uid == NULL || strcmp(uid, c->uid) != 0) {
        error(r, E_UID, "response.uid %.100s, sent %s", uid ? uid : "(none)", c->uid);
    } else {
        r->ok++;
        if (json_is_true(allowed))
            r->allowed++;
        else
            r->denied++;
        if (json_object_get(resp, "patch") != NULL)
            r->patched++;
    }
    json_decref(doc);
}

static void finish(struct run *r, struct client *c, CURLcode res)
{
    double t = now_us();
    long connects = 0;

    curl_easy_getinfo(c->easy, CURLINFO_NUM_CONNECTS, &connects);
    if (c->measured) {
        r->connects_run += connects;
        r->sent++;
        check(r, c, res);
        if (push(&r->at, c->sched - r->t_meas) != 0 || push(&r->lat, t - c->sched) != 0 ||
            push(&r->svc, t - c->sent) != 0 || push(&r->wait, c->sent - c->sched) != 0) {
            fprintf(stderr, "webhook_load: out of memory for samples\n");
            exit(1);
        }
        if (t > r->t_last)
            r->t_last = t;
    } else {
        r->connects_warm += connects;
    }
    curl_multi_remove_handle(c->multi, c->easy);
    c->busy = false;
    r->idle[(r->idle_head + r->idle_n) % r->o->clients] = c->idx;
    r->idle_n++;
}

/* Reap c's finished transfer, if any. */
static void reap(struct run *r, struct client *c)
{
    CURLMsg *m;
    int left;

    while ((m = curl_multi_info_read(c->multi, &left)) != NULL)
        if (m->msg == CURLMSG_DONE)
            finish(r, c, m->data.result);
}

static void act(struct run *r, struct client *c, curl_socket_t s, int flags)
{
    int running;

    curl_multi_socket_action(c->multi, s, flags, &running);
    reap(r, c);
}

/* ---------------------------------------------------------------------- */
/* Flags                                                                    */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: webhook_load --url https://HOST:PORT [options]\n"
            "  --url URL          the webhook's base URL (POST URL/mutate, URL/validate)\n"
            "  --cacert FILE      PEM CA that signed the server's certificate\n"
            "  --connections N    concurrent kept-alive clients (default 500)\n"
            "  --rate R           open loop: requests per second (default 2000)\n"
            "  --duration S       measured seconds (default 10)\n"
            "  --warmup S         unmeasured seconds first (default 2; the open loop's\n"
            "                     warm-up also lasts until every client has connected)\n"
            "  --path P           mutate, validate or alternate (default alternate)\n"
            "  --closed           closed loop: each client sends again as soon as its reply\n"
            "                     is in (the server's most requests/s); --rate is ignored\n"
            "  --timeout S        per request (default 10)\n"
            "  --server-pid PID   also report that process's CPU time per request and how\n"
            "                     long its threads waited for a CPU (Linux schedstat)\n"
            "  --samples FILE     write one line per measured request: its due time (us after\n"
            "                     measuring began) and its latency from then and from its send\n");
}

static int parse_num(const char *flag, const char *v, double lo, double hi, double *out)
{
    char *end;
    double d;

    errno = 0;
    d = strtod(v, &end);
    if (errno != 0 || end == v || *end != '\0' || !(d >= lo && d <= hi)) {
        fprintf(stderr, "webhook_load: %s \"%s\": expected a number in %g..%g\n", flag, v, lo, hi);
        return -1;
    }
    *out = d;
    return 0;
}

static int parse(int argc, char **argv, struct options *o)
{
    static const struct option lo[] = {{"url", required_argument, NULL, 'u'},
                                       {"cacert", required_argument, NULL, 'a'},
                                       {"connections", required_argument, NULL, 'c'},
                                       {"rate", required_argument, NULL, 'r'},
                                       {"duration", required_argument, NULL, 'd'},
                                       {"warmup", required_argument, NULL, 'w'},
                                       {"path", required_argument, NULL, 'p'},
                                       {"closed", no_argument, NULL, 'C'},
                                       {"timeout", required_argument, NULL, 't'},
                                       {"help", no_argument, NULL, 'h'},
                                       {"server-pid", required_argument, NULL, 'P'},
                                       {"samples", required_argument, NULL, 'S'},
                                       {NULL, 0, NULL, 0}};
    double d;
    int opt;

    while ((opt = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (opt) {
        case 'u':
            o->url = optarg;
            break;
        case 'a':
            o->cacert = optarg;
            break;
        case 'S':
            o->samples = optarg;
            break;
        case 'c':
            if (parse_num("--connections", optarg, 1, 10000, &d) != 0)
                return -1;
            o->clients = (unsigned)d;
            break;
        case 'r':
            if (parse_num("--rate", optarg, 1, 1e6, &o->rate) != 0)
                return -1;
            break;
        case 'd':
            if (parse_num("--duration", optarg, 0.1, 3600, &o->duration_s) != 0)
                return -1;
            break;
        case 'w':
            if (parse_num("--warmup", optarg, 0, 3600, &o->warmup_s) != 0)
                return -1;
            break;
        case 't':
            if (parse_num("--timeout", optarg, 0.01, 3600, &o->timeout_s) != 0)
                return -1;
            break;
        case 'p':
            if (strcmp(optarg, "mutate") == 0) {
                o->paths = PATH_MUTATE;
            } else if (strcmp(optarg, "validate") == 0) {
                o->paths = PATH_VALIDATE;
            } else if (strcmp(optarg, "alternate") == 0) {
                o->paths = PATH_ALTERNATE;
            } else {
                fprintf(stderr,
                        "webhook_load: --path \"%s\": expected mutate, validate or alternate\n",
                        optarg);
                return -1;
            }
            break;
        case 'C':
            o->closed = true;
            break;
        case 'P':
            if (parse_num("--server-pid", optarg, 1, 4194304, &d) != 0)
                return -1;
            o->server_pid = (long)d;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            return -1;
        }
    }
    if (optind < argc || o->url == NULL) {
        fprintf(stderr, "webhook_load: %s\n",
                optind < argc ? "unexpected argument" : "--url is required");
        usage(stderr);
        return -1;
    }
    return 0;
}

/* Read pid's schedstat sums (pid 0: this process). */
static struct sched sched_of(long pid)
{
    struct sched st = {0, 0, false};
    char path[64];
    DIR *d;
    struct dirent *e;

    if (pid == 0)
        pid = (long)getpid();
    snprintf(path, sizeof(path), "/proc/%ld/task", pid);
    d = opendir(path);
    if (d == NULL)
        return st;
    while ((e = readdir(d)) != NULL) {
        char file[128];
        double run, wait;
        FILE *f;

        if (e->d_name[0] == '.')
            continue;
        snprintf(file, sizeof(file), "%s/%.32s/schedstat", path, e->d_name);
        f = fopen(file, "r");
        if (f == NULL)
            continue;
        if (fscanf(f, "%lf %lf", &run, &wait) == 2) {
            st.run_ns += run;
            st.wait_ns += wait;
            st.ok = true;
        }
        fclose(f);
    }
    closedir(d);
    return st;
}

static double cpu_s(void)
{
    struct rusage ru;

    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* Send the next request on the longest-idle client (the caller checked that
 * one is idle); sched is its scheduled send time, us. */
static void start(struct run *r, double sched, bool measured)
{
    struct client *c = &r->cl[r->idle[r->idle_head]];
    uint64_t id = ++r->seq;
    bool mutate = r->o->paths == PATH_MUTATE || (r->o->paths == PATH_ALTERNATE && id % 2 == 0);

    if (measured && r->cpu_meas < 0) {
        r->cpu_meas = cpu_s();
        r->self0 = sched_of(0);
        if (r->o->server_pid > 0)
            r->srv0 = sched_of(r->o->server_pid);
    }
    r->idle_head = (r->idle_head + 1) % r->o->clients;
    r->idle_n--;
    snprintf(c->uid, sizeof(c->uid), "3c1d6b0e-%04x-4e2d-b5c8-%012llx", c->idx & 0xffffu,
             (unsigned long long)(id & 0xffffffffffffULL));
    memcpy(c->body + r->uid_off, c->uid, UID_LEN);
    curl_easy_setopt(c->easy, CURLOPT_URL, mutate ? r->url_mutate : r->url_validate);
    c->busy = true;
    c->measured = measured;
    c->sched = sched;
    c->reply_len = 0;
    c->reply_over = false;
    c->sent = now_us();
    if (curl_multi_add_handle(c->multi, c->easy) != CURLM_OK) {
        fprintf(stderr, "webhook_load: curl_multi_add_handle failed\n");
        exit(1);
    }
    act(r, c, CURL_SOCKET_TIMEOUT, 0);
}

/* Wake the loop at t (us, monotonic) at the latest. */
static void arm(struct run *r, double t)
{
    struct itimerspec its = {{0, 0}, {0, 0}};

    if (t < 1)
        t = 1;
    its.it_value.tv_sec = (time_t)(t / 1e6);
    its.it_value.tv_nsec = (long)((t - (double)its.it_value.tv_sec * 1e6) * 1e3);
    if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0)
        its.it_value.tv_nsec = 1;
    (void)timerfd_settime(r->tfd, TFD_TIMER_ABSTIME, &its, NULL);
}

#define TIMERFD_KEY UINT64_MAX
#define SPIN_US     200 /* busy-poll this long before a deadline, us */

/* The whole run: warm-up, measurement, drain. */
static void loop(struct run *r)
{
    const struct options *o = r->o;
    double interval = 1e6 / o->rate, t0 = now_us() + 1000;
    uint64_t k_warm = 0, k_total = 0, k_next = 0;
    double drain_until;

    if (!o->closed) {
        k_warm = (uint64_t)ceil(o->warmup_s * o->rate);
        if (k_warm < o->clients)
            k_warm = o->clients;
        k_total = k_warm + (uint64_t)llround(o->duration_s * o->rate);
        r->t_meas = t0 + (double)k_warm * interval;
        r->t_end = t0 + (double)k_total * interval;
    } else {
        r->t_meas = t0 + o->warmup_s * 1e6;
        r->t_end = r->t_meas + o->duration_s * 1e6;
    }
    drain_until = r->t_end + (o->timeout_s + 1) * 1e6;
    for (;;) {
        struct epoll_event ev[256];
        double now = now_us(), next = drain_until;
        int n;

        for (unsigned i = 0; i < o->clients; i++) {
            struct client *c = &r->cl[i];

            if (c->timer >= 0 && c->timer <= now) {
                c->timer = -1;
                act(r, c, CURL_SOCKET_TIMEOUT, 0);
            }
        }
        now = now_us();
        if (!o->closed) {
            while (k_next < k_total && r->idle_n > 0 && t0 + (double)k_next * interval <= now) {
                start(r, t0 + (double)k_next * interval, k_next >= k_warm);
                k_next++;
            }
            if (k_next == k_total && r->idle_n == o->clients)
                break;
            if (k_next < k_total && r->idle_n > 0)
                next = fmin(next, t0 + (double)k_next * interval);
        } else {
            while (now >= t0 && now < r->t_end && r->idle_n > 0) {
                start(r, now, now >= r->t_meas);
                now = now_us();
            }
            if (now >= r->t_end && r->idle_n == o->clients)
                break;
            if (now < r->t_end)
                next = fmin(next, now < t0 ? t0 : r->t_end);
        }
        if (now >= drain_until) {
            unsigned long lost = 0;

            for (unsigned i = 0; i < o->clients; i++)
                lost += r->cl[i].busy && r->cl[i].measured;
            if (k_next < k_total)
                lost += (unsigned long)(k_total - (k_next > k_warm ? k_next : k_warm));
            r->sent += lost;
            r->errors[E_TRANSPORT] += lost;
            snprintf(r->first_err[E_TRANSPORT], sizeof(r->first_err[E_TRANSPORT]),
                     "%lu requests unanswered or unsent at the deadline", lost);
            break;
        }
        for (unsigned i = 0; i < o->clients; i++)
            if (r->cl[i].timer >= 0)
                next = fmin(next, r->cl[i].timer);
        /* A timer wakes this VM's threads ~65 us late at p50 (more at p99):
         * sleep until SPIN_US before the deadline, then poll without sleeping,
         * so requests leave on time and replies are still read meanwhile. */
        if (next - now > SPIN_US)
            arm(r, next - SPIN_US);
        n = epoll_wait(r->ep, ev, (int)(sizeof(ev) / sizeof(ev[0])), next - now > SPIN_US ? -1 : 0);
        for (int i = 0; i < n; i++) {
            uint64_t key = ev[i].data.u64, ticks;
            int flags = 0;

            if (key == TIMERFD_KEY) {
                (void)!read(r->tfd, &ticks, sizeof(ticks));
                continue;
            }
            flags |= ev[i].events & EPOLLIN ? CURL_CSELECT_IN : 0;
            flags |= ev[i].events & EPOLLOUT ? CURL_CSELECT_OUT : 0;
            flags |= ev[i].events & (EPOLLERR | EPOLLHUP) ? CURL_CSELECT_ERR : 0;
            act(r, &r->cl[key >> 32], (curl_socket_t)(key & 0xffffffffu), flags);
        }
    }
}

/* One line per measured request, in completion order: due time (us after
 * measuring began), latency from it and from the send, us. Before report(),
 * which sorts the samples. Returns 0 or -1 with errno. */
static int write_samples(const struct run *r, const char *path)
{
    FILE *f = fopen(path, "w");

    if (f == NULL)
        return -1;
    fprintf(f, "# due_us latency_us service_us\n");
    for (size_t i = 0; i < r->lat.n; i++)
        fprintf(f, "%.0f %.0f %.0f\n", r->at.v[i], r->lat.v[i], r->svc.v[i]);
    return fclose(f);
}

static void report(struct run *r, double cpu_end)
{
    const struct options *o = r->o;
    static const char *const path_name[] = {"/mutate and /validate alternately", "/mutate only",
                                            "/validate only"};
    unsigned long errors = 0;
    double span_s = (r->t_last - r->t_meas) / 1e6;
    long connects = r->connects_warm + r->connects_run;

    for (int k = 0; k < E_KINDS; k++)
        errors += r->errors[k];
    printf("== bench: egpu-webhook over TLS, HTTP/1.1 keep-alive; AdmissionReview CREATE of a pod, "
           "one container asking elasticgpu.io/gpu-core 30 and gpu-memory 4096 (%zu bytes)\n",
           r->body_len);
    if (o->closed)
        printf("%s, %s, %u connections, closed loop (each client sends again on its reply), "
               "%g s warm-up, %g s measured\n",
               o->url, path_name[o->paths], o->clients, o->warmup_s, o->duration_s);
    else
        printf("%s, %s, %u connections, open loop at %.0f requests/s, %g s warm-up, "
               "%g s measured\n",
               o->url, path_name[o->paths], o->clients, o->rate, o->warmup_s, o->duration_s);
    printf("requests: %lu sent, %lu ok, %lu errors (%lu transport, %lu HTTP status, %lu bad reply, "
           "%lu uid mismatch)\n",
           r->sent, r->ok, errors, r->errors[E_TRANSPORT], r->errors[E_STATUS], r->errors[E_REPLY],
           r->errors[E_UID]);
    printf("replies: %lu allowed, %lu denied, %lu with a patch\n", r->allowed, r->denied,
           r->patched);
    printf("achieved: %.0f requests/s answered ok (%s)\n",
           span_s > 0 ? (double)r->ok / span_s : 0.0,
           o->closed ? "the server's throughput at this many connections"
                     : "target met when equal to the rate");
    if (!o->closed) {
        print_latency("latency from scheduled send, us:", &r->lat);
        print_latency("latency from actual send, us:", &r->svc);
        print_latency("waited in the client to send, us:", &r->wait);
    } else {
        print_latency("latency, us:", &r->svc);
    }
    printf(
        "connections opened: %ld (%ld warming up, %ld during the measured run) for %u clients%s\n",
        connects, r->connects_warm, r->connects_run, o->clients,
        connects == (long)o->clients ? ": every client kept its connection"
                                     : ": NOT one per client, keep-alive did not hold");
    if (r->cpu_meas >= 0 && span_s > 0) {
        struct sched self1 = sched_of(0);

        printf("client: %.0f%% of one core (most of it polling before a send is due), waited "
               "%.1f ms in all for a CPU\n",
               100.0 * (cpu_end - r->cpu_meas) / span_s,
               self1.ok && r->self0.ok ? (self1.wait_ns - r->self0.wait_ns) / 1e6 : NAN);
    }
    if (o->server_pid > 0 && r->srv0.ok && span_s > 0 && r->sent > 0) {
        struct sched srv1 = sched_of(o->server_pid);

        if (srv1.ok)
            printf("server (pid %ld): %.0f%% of one core, %.0f us of CPU per request; its "
                   "threads waited %.1f ms in all for a CPU\n",
                   o->server_pid, 100.0 * (srv1.run_ns - r->srv0.run_ns) / 1e9 / span_s,
                   (srv1.run_ns - r->srv0.run_ns) / 1e3 / (double)r->sent,
                   (srv1.wait_ns - r->srv0.wait_ns) / 1e6);
    }
    for (int k = 0; k < E_KINDS; k++)
        if (r->errors[k] > 0)
            fprintf(stderr, "webhook_load: first %s error: %s\n", err_name[k], r->first_err[k]);
}

static int setup_client(struct run *r, struct client *c, const char *body)
{
    const struct options *o = r->o;

    c->run = r;
    c->timer = -1;
    c->multi = curl_multi_init();
    c->easy = curl_easy_init();
    c->body = malloc(r->body_len + 1);
    c->reply = malloc(REPLY_MAX + 1);
    if (c->multi == NULL || c->easy == NULL || c->body == NULL || c->reply == NULL)
        return -ENOMEM;
    memcpy(c->body, body, r->body_len + 1);
    curl_multi_setopt(c->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
    curl_multi_setopt(c->multi, CURLMOPT_SOCKETDATA, c);
    curl_multi_setopt(c->multi, CURLMOPT_TIMERFUNCTION, on_timer);
    curl_multi_setopt(c->multi, CURLMOPT_TIMERDATA, c);
    curl_easy_setopt(c->easy, CURLOPT_POSTFIELDS, c->body);
    curl_easy_setopt(c->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body_len);
    curl_easy_setopt(c->easy, CURLOPT_HTTPHEADER, r->hdr);
    curl_easy_setopt(c->easy, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(c->easy, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(c->easy, CURLOPT_WRITEDATA, c);
    curl_easy_setopt(c->easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c->easy, CURLOPT_TIMEOUT_MS, (long)(o->timeout_s * 1e3));
    if (o->cacert != NULL)
        curl_easy_setopt(c->easy, CURLOPT_CAINFO, o->cacert);
    return 0;
}

int main(int argc, char **argv)
{
    struct options o = {.clients = 500,
                        .rate = 2000,
                        .duration_s = 10,
                        .warmup_s = 2,
                        .timeout_s = 10,
                        .paths = PATH_ALTERNATE};
    struct run r = {.o = &o, .ep = -1, .tfd = -1, .cpu_meas = -1};
    struct epoll_event tev = {.events = EPOLLIN, .data.u64 = TIMERFD_KEY};
    struct rlimit rl;
    char *body = NULL, *at;
    int status = 1;
    size_t ulen;

    if (parse(argc, argv, &o) != 0)
        return 2;
    /* Each client holds a socket and its multi handle's wake-up pair. */
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        (void)setrlimit(RLIMIT_NOFILE, &rl);
    }
    (void)prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    body = admission_review();
    at = body != NULL ? strstr(body, UID_ZERO) : NULL;
    ulen = strlen(o.url) + sizeof("/validate");
    r.url_mutate = malloc(ulen);
    r.url_validate = malloc(ulen);
    r.cl = calloc(o.clients, sizeof(*r.cl));
    r.idle = calloc(o.clients, sizeof(*r.idle));
    r.ep = epoll_create1(EPOLL_CLOEXEC);
    r.tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (at == NULL || r.url_mutate == NULL || r.url_validate == NULL || r.cl == NULL ||
        r.idle == NULL || r.ep < 0 || r.tfd < 0 ||
        epoll_ctl(r.ep, EPOLL_CTL_ADD, r.tfd, &tev) != 0) {
        perror("webhook_load: setup");
        goto out;
    }
    r.body_len = strlen(body);
    r.uid_off = (size_t)(at - body);
    snprintf(r.url_mutate, ulen, "%s/mutate", o.url);
    snprintf(r.url_validate, ulen, "%s/validate", o.url);
    /* As kube-apiserver's webhook client: JSON both ways, the body sent at
     * once (libcurl would otherwise be free to wait for 100-continue). */
    r.hdr = curl_slist_append(NULL, "Content-Type: application/json");
    r.hdr = curl_slist_append(r.hdr, "Accept: application/json, */*");
    r.hdr = curl_slist_append(r.hdr, "Expect:");
    for (unsigned i = 0; i < o.clients; i++) {
        r.cl[i].idx = i;
        r.idle[i] = i;
        if (setup_client(&r, &r.cl[i], body) != 0) {
            fprintf(stderr, "webhook_load: out of memory for %u clients\n", o.clients);
            goto out;
        }
    }
    r.idle_n = o.clients;
    loop(&r);
    if (o.samples != NULL && write_samples(&r, o.samples) != 0)
        perror(o.samples);
    report(&r, cpu_s());
    status = r.ok == r.sent && r.sent > 0 ? 0 : 1;
out:
    for (unsigned i = 0; r.cl != NULL && i < o.clients; i++) {
        struct client *c = &r.cl[i];

        if (c->busy)
            curl_multi_remove_handle(c->multi, c->easy);
        if (c->easy != NULL)
            curl_easy_cleanup(c->easy);
        if (c->multi != NULL)
            curl_multi_cleanup(c->multi);
        free(c->body);
        free(c->reply);
    }
    curl_slist_free_all(r.hdr);
    if (r.ep >= 0)
        close(r.ep);
    if (r.tfd >= 0)
        close(r.tfd);
    free(r.cl);
    free(r.idle);
    free(r.url_mutate);
    free(r.url_validate);
    free(r.at.v);
    free(r.lat.v);
    free(r.svc.v);
    free(r.wait.v);
    free(body);
    curl_global_cleanup();
    return status;
}
