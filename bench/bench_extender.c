/* bench/bench_extender.c - filter + prioritize over HTTP on loopback.
 *
 * What kube-scheduler does for every pod that asks for a GPU: POST
 * ExtenderArgs (the pod and every candidate node name, nodeCacheCapable,
 * keys in the Go encoder's order) to /filter, then the nodes that passed to
 * /prioritize. The extender runs in this process on the real HTTP server
 * (src/net, 2 threads) with a cache of N nodes of 8 cards, 0 to 8 of them 50%
 * used (binpack scores spread over 0..10) by pods the agent has marked
 * allocated, as pods that have been running are (a node with a pod not yet
 * allocated is one filter looks at for ambiguity, see steer in extender.c;
 * only the churn pod below is such a pod); the client is libcurl on one
 * kept-alive connection, sending as kube-scheduler's Go client does (no
 * Expect: 100-continue). For N = 1,000 and 5,000 it prints p50 and p99 of
 * the filter+prioritize pair and of each verb, pairs and requests per
 * second, and the same verbs called in-process (no HTTP), in three runs:
 *
 * - same pod, cluster unchanged: one pod asked about again and again;
 * - pod after pod, churn: a new pod each time, and between two pods one pod
 *   lands on a node (its annotation arrives as through the watch) and the
 *   one before it leaves, so scores move;
 * - order shuffled: as churn, and each pod names the nodes in another order
 *   (kube-scheduler's parallel filtering lists feasible nodes in the order
 *   its workers find them), so nothing kept from the pod before applies.
 *
 * A last run makes every 10th node full, so filter refuses a tenth of the
 * nodes (each with its reason) and prioritize gets only the survivors. The
 * first line is the floor under all of it: an empty POST's round trip.
 * --one-core keeps client and server on one core, which takes a VM's
 * cross-core wake-ups out of the figures. --policy P scores with policy P
 * at both tiers (default binpack; an FGD one against the target workload
 * the extender learns from the cached pods). Target: p99 under 2 ms
 * at 5,000 nodes. Figures, not a test.
 */
#define _GNU_SOURCE /* sched_setaffinity, CPU_SET */
#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "egpu/log.h"
#include "egpu/net.h"
#include "egpu/scheduler.h"
#include "openb_pods.h"

/* Under callgrind (--instr-atstart=no), --nodes instruments only the run, not the cluster's
 * build: valgrind's client requests are no-ops on the CPU. Without its header, nothing. */
#if defined(__has_include)
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#endif
#endif
#ifndef CALLGRIND_START_INSTRUMENTATION
#define CALLGRIND_START_INSTRUMENTATION
#define CALLGRIND_STOP_INSTRUMENTATION
#endif

static double now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static bool always(void *data)
{
    (void)data;
    return true;
}

static int no_annotate(void *data, const char *ns, const char *name, const char *key,
                       const char *value, struct egpu_error *err)
{
    (void)data, (void)ns, (void)name, (void)key, (void)value, (void)err;
    return 0;
}

static int no_bind(void *data, const char *ns, const char *name, const char *uid, const char *node,
                   struct egpu_error *err)
{
    (void)data, (void)ns, (void)name, (void)uid, (void)node, (void)err;
    return 0;
}

static int on_filter(void *data, const struct egpu_http_request *req,
                     struct egpu_http_response *resp)
{
    resp->status = egpu_extender_filter(data, req->body, req->body_len, &resp->body);
    return egpu_http_response_set_type(resp, "application/json");
}

static int on_prioritize(void *data, const struct egpu_http_request *req,
                         struct egpu_http_response *resp)
{
    resp->status = egpu_extender_prioritize(data, req->body, req->body_len, &resp->body);
    return egpu_http_response_set_type(resp, "application/json");
}

static int on_ping(void *data, const struct egpu_http_request *req, struct egpu_http_response *resp)
{
    (void)data, (void)req;
    resp->status = 200;
    if (egpu_buf_append(&resp->body, "{}", 2) != 0)
        return -ENOMEM;
    return egpu_http_response_set_type(resp, "application/json");
}

/* N nodes of 8 A100s; on node i the first i % 9 cards are 50% used (0 to 8
 * busy cards, so nodes score differently, as in a cluster in use); every card
 * of every full_every-th node (0 = none) used whole. */
static int fill(struct egpu_sched_cache *c, int nodes, int full_every)
{
    struct egpu_error err = {0};
    char name[32], uuid[64], ann[256];

    for (int i = 0; i < nodes; i++) {
        json_t *n;

        snprintf(name, sizeof(name), "gpu-node-%05d", i);
        n = json_pack("{s:{s:s},s:{s:{s:s,s:s}}}", "metadata", "name", name, "status",
                      "allocatable", "cpu", "96", "memory", "384Gi");
        if (egpu_sched_cache_node_set(c, n, &err) != 0)
            return -1;
        json_decref(n);
        for (int g = 0; g < 8; g++) {
            bool full = full_every > 0 && i % full_every == 0;
            json_t *gpu, *pod;

            snprintf(uuid, sizeof(uuid), "GPU-%05d-%d", i, g);
            gpu = json_pack("{s:{s:s},s:{s:s,s:i,s:s,s:s,s:i}}", "metadata", "name", uuid, "spec",
                            "nodeName", name, "index", g, "uuid", uuid, "model", "A100", "memory",
                            40960);
            if (egpu_sched_cache_gpu_set(c, gpu, &err) != 0)
                return -1;
            json_decref(gpu);
            if (g >= i % 9 && !full)
                continue;
            snprintf(ann, sizeof(ann),
                     "{\"node\":\"%s\",\"containers\":[{\"name\":\"c\",\"core\":%d,"
                     "\"memory\":%d,\"gpus\":[\"%s\"]}]}",
                     name, full ? 100 : 50, full ? 40960 : 8192, uuid);
            /* Running for a while: the agent has marked it allocated, so
             * its node is not one bind would find ambiguous (steer). */
            pod = json_pack("{s:{s:s,s:s,s:{s:s,s:s}},s:{s:s,s:[{s:s,s:{s:{s:s,s:s,s:s}}}]}}",
                            "metadata", "name", uuid, "namespace", "bench", "annotations",
                            EGPU_ANN_ASSIGNED, ann, EGPU_ANN_ALLOCATED, "true", "spec", "nodeName",
                            name, "containers", "name", "c", "resources", "requests", "cpu", "4",
                            EGPU_RES_GPU_CORE, full ? "100" : "50", EGPU_RES_GPU_MEMORY,
                            full ? "0" : "8192");
            if (egpu_sched_cache_pod_set(c, pod, &err) != 0)
                return -1;
            json_decref(pod);
        }
    }
    return 0;
}

static size_t sink(char *p, size_t size, size_t n, void *data)
{
    (void)p;
    (void)data;
    return size * n;
}

static size_t keep(char *p, size_t size, size_t n, void *data)
{
    return egpu_buf_append(data, p, size * n) == 0 ? size * n : 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

static double pct(double *v, int n, double p)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return v[(int)(p * (n - 1))];
}

static void post(CURL *h, const char *url, const char *body)
{
    long status = 0;

    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    if (curl_easy_perform(h) != CURLE_OK)
        fprintf(stderr, "bench: POST %s failed\n", url);
    else if (curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status) == CURLE_OK && status != 200)
        fprintf(stderr, "bench: POST %s: HTTP %ld\n", url, status);
}

/* ExtenderArgs for a bench pod (30% and 4096 MiB of one card, named and
 * uid'd with POD_ID_DIGITS zeros that patch_pod renumbers) and names, with
 * the keys in the order kube-scheduler's Go encoder writes them. */
#define POD_ID_DIGITS 6
static char *make_args(json_t *names)
{
    json_t *args =
        json_pack("{s:{s:{s:s,s:s,s:s},s:{s:[{s:s,s:{s:{s:s,s:s,s:s}}}]}},s:n,s:O}", "Pod",
                  "metadata", "name", "p-000000", "namespace", "bench", "uid", "u-000000", "spec",
                  "containers", "name", "c", "resources", "requests", "cpu", "2", EGPU_RES_GPU_CORE,
                  "30", EGPU_RES_GPU_MEMORY, "4096", "Nodes", "NodeNames", names);
    char *body = json_dumps(args, JSON_COMPACT);

    json_decref(args);
    return body;
}

/* Make body's pod the id-th (name p-<id>, uid u-<id>). */
static void patch_pod(char *body, int id)
{
    char digits[POD_ID_DIGITS + 1];

    snprintf(digits, sizeof(digits), "%0*d", POD_ID_DIGITS, id % 1000000);
    for (const char *key = "\"p-"; key != NULL; key = key[1] == 'p' ? "\"u-" : NULL) {
        char *at = strstr(body, key);

        if (at != NULL)
            memcpy(at + 3, digits, POD_ID_DIGITS);
    }
}

/* ExtenderArgs naming every node: in index order for order 0, else in an
 * order shuffled with seed order (Fisher-Yates over a 64-bit LCG). */
static char *ordered_args(int nodes, int order)
{
    json_t *names = json_array();
    int *idx = malloc((size_t)nodes * sizeof(*idx));
    uint64_t x = (uint64_t)order * 0x9E3779B97F4A7C15ULL + 1;
    char *body = NULL;

    if (idx == NULL || names == NULL)
        goto out;
    for (int i = 0; i < nodes; i++)
        idx[i] = i;
    for (int i = nodes - 1; order != 0 && i > 0; i--) {
        int k, t;

        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        k = (int)((x >> 33) % (uint64_t)(i + 1));
        t = idx[i];
        idx[i] = idx[k];
        idx[k] = t;
    }
    for (int i = 0; i < nodes; i++)
        json_array_append_new(names, json_sprintf("gpu-node-%05d", idx[i]));
    body = make_args(names);
out:
    json_decref(names);
    free(idx);
    return body;
}

/* The prioritize body kube-scheduler would send after this filter reply:
 * the same pod and only the nodes that passed. NULL on a bad reply. */
static char *survivors(CURL *h, const char *furl, const char *fbody, size_t *passed)
{
    struct egpu_buf reply;
    json_t *out, *names;
    char *body = NULL;

    egpu_buf_init(&reply, 64 << 20);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, keep);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &reply);
    post(h, furl, fbody);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sink);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, NULL);
    out = json_loads(egpu_buf_str(&reply), 0, NULL);
    names = json_object_get(out, "NodeNames");
    if (json_is_array(names)) {
        *passed = json_array_size(names);
        body = make_args(names);
    }
    json_decref(out);
    egpu_buf_free(&reply);
    return body;
}

/* How pods follow one another in a run. */
enum mode {
    SAME,    /* one pod asked about again and again, nothing changes: the best case */
    CHURN,   /* pod after pod, with a pod landing and one leaving between them */
    SHUFFLE, /* CHURN, and each pod names the nodes in another order, as kube-scheduler's
                parallel filtering lists them (feasible nodes in the order found) */
};

/* Between two pods, what happens in the cluster: the pod placed last lands
 * (its elasticgpu.io/assigned arrives through the watch: 10% of card 7 of a
 * node that moves on by a large prime each time) and the one before it leaves. */
static void churn(struct egpu_sched_cache *c, int nodes, int i)
{
    struct egpu_error err = {0};
    char name[32], node[32], ann[256];
    json_t *pod;

    snprintf(name, sizeof(name), "churn-%d", i);
    /* Odd nodes: never one of the full ones (every 10th). */
    snprintf(node, sizeof(node), "gpu-node-%05d", (int)((long)i * 7919 % nodes) | 1);
    snprintf(ann, sizeof(ann),
             "{\"node\":\"%s\",\"containers\":[{\"name\":\"c\",\"core\":10,\"memory\":1024,"
             "\"gpus\":[\"GPU-%s-7\"]}]}",
             node, node + 9);
    pod = json_pack("{s:{s:s,s:s,s:{s:s}},s:{s:s,s:[{s:s,s:{s:{s:s,s:s,s:s}}}]}}", "metadata",
                    "name", name, "namespace", "bench", "annotations", EGPU_ANN_ASSIGNED, ann,
                    "spec", "nodeName", node, "containers", "name", "c", "resources", "requests",
                    "cpu", "1", EGPU_RES_GPU_CORE, "10", EGPU_RES_GPU_MEMORY, "1024");
    if (egpu_sched_cache_pod_set(c, pod, &err) != 0)
        fprintf(stderr, "bench: churn: %s\n", err.msg);
    json_decref(pod);
    snprintf(name, sizeof(name), "churn-%d", i - 1);
    (void)egpu_sched_cache_pod_delete(c, "bench", name);
}

/* The same pair called in-process, without HTTP: what the verbs cost. */
static void direct(struct egpu_extender *x, struct egpu_sched_cache *c, int nodes, enum mode mode,
                   char **bodies, int nbodies, char *pbody, double *filt, double *prio,
                   int iterations)
{
    struct egpu_buf reply;

    egpu_buf_init(&reply, 64 << 20);
    for (int i = 0; i < iterations; i++) {
        char *fbody = bodies[i % nbodies], *pb = mode == SHUFFLE ? fbody : pbody;
        size_t flen = strlen(fbody), plen = strlen(pb);
        double t0, t1;

        if (mode != SAME) {
            churn(c, nodes, iterations + i);
            patch_pod(fbody, i);
            patch_pod(pb, i);
        }
        t0 = now_us();
        egpu_buf_reset(&reply);
        if (egpu_extender_filter(x, fbody, flen, &reply) != 200)
            fprintf(stderr, "bench: filter failed: %s\n", egpu_buf_str(&reply));
        t1 = now_us();
        egpu_buf_reset(&reply);
        if (egpu_extender_prioritize(x, pb, plen, &reply) != 200)
            fprintf(stderr, "bench: prioritize failed: %s\n", egpu_buf_str(&reply));
        filt[i] = t1 - t0;
        prio[i] = now_us() - t1;
    }
    printf("%26s in-process, no HTTP: filter p50 %5.0f p99 %5.0f, prioritize p50 %5.0f p99 %5.0f "
           "us\n",
           "", pct(filt, iterations, 0.5), pct(filt, iterations, 0.99), pct(prio, iterations, 0.5),
           pct(prio, iterations, 0.99));
    egpu_buf_free(&reply);
}

#define ORDERS 16

static enum egpu_policy_kind policy = EGPU_POLICY_BINPACK; /* --policy */

static void run(int nodes, int iterations, int full_every, enum mode mode)
{
    static const char *const what[] = {"same pod, cluster unchanged", "pod after pod, churn",
                                       "pod after pod, churn, order shuffled"};
    struct egpu_extender_ops ops = {.synced = always, .annotate = no_annotate, .bind = no_bind};
    struct egpu_extender_config xc = {.node_policy = policy, .card_policy = policy};
    struct egpu_http_config hc = {.bind_addr = "127.0.0.1", .threads = 2};
    struct egpu_sched_cache *c = egpu_sched_cache_new();
    struct egpu_http_server *srv = NULL;
    struct egpu_extender *x = NULL;
    struct egpu_error err = {0};
    double *pair = calloc((size_t)iterations, sizeof(double));
    double *filt = calloc((size_t)iterations, sizeof(double));
    double *prio = calloc((size_t)iterations, sizeof(double));
    struct curl_slist *hdr = NULL;
    char *body[ORDERS] = {NULL}, *pbody = NULL, furl[64], purl[64];
    int nbodies = mode == SHUFFLE ? ORDERS : 1;
    size_t passed = 0;
    double t_all = 0;
    CURL *h = NULL;

    if (c == NULL || pair == NULL || filt == NULL || prio == NULL ||
        fill(c, nodes, full_every) != 0)
        goto out;
    x = egpu_extender_new(&xc, c, &ops, &err);
    if (x == NULL || egpu_http_server_new(&hc, &srv, &err) != 0 ||
        egpu_http_server_route(srv, "POST", "/filter", on_filter, x) != 0 ||
        egpu_http_server_route(srv, "POST", "/prioritize", on_prioritize, x) != 0 ||
        egpu_http_server_start(srv, &err) != 0) {
        fprintf(stderr, "bench: server: %s\n", err.msg);
        goto out;
    }
    for (int r = 0; r < nbodies; r++)
        body[r] = ordered_args(nodes, r);
    snprintf(furl, sizeof(furl), "http://127.0.0.1:%u/filter", egpu_http_server_port(srv));
    snprintf(purl, sizeof(purl), "http://127.0.0.1:%u/prioritize", egpu_http_server_port(srv));
    h = curl_easy_init();
    hdr = curl_slist_append(NULL, "Content-Type: application/json");
    /* kube-scheduler's Go client sends its body at once; libcurl would ask
     * "Expect: 100-continue" first for a body this size and wait a round
     * trip for the answer. */
    hdr = curl_slist_append(hdr, "Expect:");
    /* Nor does it touch signal handlers around each request, and it reads a
     * reply in large pieces: libcurl's defaults (SIGPIPE handler swapped per
     * transfer, 16 KiB reads) would time libcurl, not the extender. */
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_BUFFERSIZE, 512L * 1024);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sink);
    /* SHUFFLE runs send prioritize every node, in filter's order: the
     * largest prioritize, as when every node ties and passes filter (spread
     * over an idle cluster); the others send the nodes that passed. */
    pbody = survivors(h, furl, body[0], &passed);
    if (pbody == NULL) {
        fprintf(stderr, "bench: filter reply has no NodeNames\n");
        goto out;
    }
    for (int i = 0; i < 20; i++) /* warm up: connection, caches */
        post(h, furl, body[0]);
    for (int i = 0; i < iterations; i++) {
        char *fb = body[i % nbodies], *pb = mode == SHUFFLE ? fb : pbody;
        double t0, t1;

        if (mode != SAME) {
            churn(c, nodes, i);
            patch_pod(fb, i);
            patch_pod(pb, i);
        }
        t0 = now_us();
        post(h, furl, fb);
        t1 = now_us();
        post(h, purl, pb);
        filt[i] = t1 - t0;
        prio[i] = now_us() - t1;
        pair[i] = filt[i] + prio[i];
        t_all += pair[i];
    }
    printf("%5d nodes, %4zu pass, %s:\n  filter+prioritize p50 %6.0f us  p99 %6.0f us  "
           "(filter p50 %5.0f p99 %5.0f, prioritize p50 %5.0f p99 %5.0f)  %5.0f pairs/s "
           "%5.0f req/s\n",
           nodes, passed, what[mode], pct(pair, iterations, 0.5), pct(pair, iterations, 0.99),
           pct(filt, iterations, 0.5), pct(filt, iterations, 0.99), pct(prio, iterations, 0.5),
           pct(prio, iterations, 0.99), iterations / (t_all / 1e6), 2 * iterations / (t_all / 1e6));
    direct(x, c, nodes, mode, body, nbodies, pbody, filt, prio, iterations);
out:
    curl_slist_free_all(hdr);
    if (h != NULL)
        curl_easy_cleanup(h);
    for (int r = 0; r < nbodies; r++)
        free(body[r]);
    free(pbody);
    egpu_http_server_free(srv);
    egpu_extender_free(x);
    egpu_sched_cache_free(c);
    free(pair);
    free(filt);
    free(prio);
}

/* The floor under every figure: an empty POST answered "{}" by the same
 * server and client, round trip p50 and p99. On a VM the wake-up of the
 * other core's thread can cost more than the extender's work. */
static void floor_run(int iterations)
{
    struct egpu_http_config hc = {.bind_addr = "127.0.0.1", .threads = 2};
    struct egpu_http_server *srv = NULL;
    struct egpu_error err = {0};
    double *rt = calloc((size_t)iterations, sizeof(double));
    CURL *h = curl_easy_init();
    char url[64];

    if (rt == NULL || h == NULL || egpu_http_server_new(&hc, &srv, &err) != 0 ||
        egpu_http_server_route(srv, "POST", "/ping", on_ping, NULL) != 0 ||
        egpu_http_server_start(srv, &err) != 0) {
        fprintf(stderr, "bench: ping server: %s\n", err.msg);
        goto out;
    }
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/ping", egpu_http_server_port(srv));
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sink);
    for (int i = 0; i < 20; i++)
        post(h, url, "");
    for (int i = 0; i < iterations; i++) {
        double t0 = now_us();

        post(h, url, "");
        rt[i] = now_us() - t0;
    }
    printf("HTTP floor, an empty POST: round trip p50 %4.0f us  p99 %5.0f us (a pair makes two)\n",
           pct(rt, iterations, 0.5), pct(rt, iterations, 0.99));
out:
    if (h != NULL)
        curl_easy_cleanup(h);
    egpu_http_server_free(srv);
    free(rt);
}

/* ------------------------------------------------------------------------ */
/* --nodes N: the cluster at scale, with the openb trace's pod mix          */

struct scale_opts {
    int nodes, pods, orders;
    int warm;          /* pods asked before the measured ones, not counted (the memo warm) */
    double fill;       /* GPU request placed before the run, share of the cluster's GPU milli */
    const char *trace; /* the openb pod list (CSV) */
    bool direct;       /* call the verbs in-process, no HTTP (for callgrind) */
    bool sample;       /* send filter kube-scheduler's default share of the nodes, not all */
    bool no_memo_warm; /* no egpu_warmer (egpu-scheduler --memo-warm false) */
    const char *dump;  /* write the first filter reply here, or NULL */
};

/* A pod of t named name: pending (node NULL), or running on node with the cards of
 * assigned (an elasticgpu.io/assigned text, NULL for a pod with no GPU). */
static json_t *tpod_json(const struct tpod *t, const char *name, const char *node,
                         const char *assigned)
{
    json_t *pod = json_pack("{s:{s:s,s:s,s:s},s:{s:s,s:[{s:s,s:{s:o}}]}}", "metadata", "name", name,
                            "namespace", "bench", "uid", name, "spec", "schedulerName",
                            EGPU_SCHEDULER_NAME_DEFAULT, "containers", "name", "c", "resources",
                            "requests", tpod_requests(t));

    if (node != NULL) {
        json_object_set_new(json_object_get(pod, "spec"), "nodeName", json_string(node));
        json_object_set_new(pod, "status", json_pack("{s:s}", "phase", "Running"));
    }
    if (assigned != NULL)
        json_object_set_new(
            json_object_get(pod, "metadata"), "annotations",
            json_pack("{s:s,s:s}", EGPU_ANN_ASSIGNED, assigned, EGPU_ANN_ALLOCATED, "true"));
    return pod;
}

/* N nodes of 8 A100s (96 cores, 384 GiB, as the trace's G2 nodes), then pods drawn from the
 * trace placed on random nodes where they fit, running and allocated, until fill of the GPU
 * milli has been asked for. Names of the pods placed into *live (*nlive). */
static int scale_fill(struct egpu_sched_cache *c, const struct scale_opts *o,
                      const struct tpod *trace, size_t ntrace, char (**live)[32], size_t *nlive,
                      uint64_t *placed_milli)
{
    struct fill_node *fn = calloc((size_t)o->nodes, sizeof(*fn));
    struct egpu_error err = {0};
    uint64_t x = 42, asked = 0, target = (uint64_t)(o->fill * o->nodes * 8 * 1000);
    size_t cap = 1024;
    char name[32], uuid[64];
    int rc = -1;

    *nlive = 0;
    *placed_milli = 0;
    *live = malloc(cap * sizeof(**live));
    if (fn == NULL || *live == NULL)
        goto out;
    for (int i = 0; i < o->nodes; i++) {
        json_t *n;

        snprintf(name, sizeof(name), "gpu-node-%05d", i);
        n = json_pack("{s:{s:s},s:{s:{s:s,s:s}}}", "metadata", "name", name, "status",
                      "allocatable", "cpu", "96", "memory", "384Gi");
        if (egpu_sched_cache_node_set(c, n, &err) != 0)
            goto out;
        json_decref(n);
        fn[i] = fill_node_new();
        for (int g = 0; g < 8; g++) {
            json_t *gpu;

            snprintf(uuid, sizeof(uuid), "GPU-%05d-%d", i, g);
            gpu = json_pack("{s:{s:s},s:{s:s,s:i,s:s,s:s,s:i}}", "metadata", "name", uuid, "spec",
                            "nodeName", name, "index", g, "uuid", uuid, "model", "A100", "memory",
                            40960);
            if (egpu_sched_cache_gpu_set(c, gpu, &err) != 0)
                goto out;
            json_decref(gpu);
        }
    }
    while (asked < target) {
        const struct tpod *t = draw_pod(trace, ntrace, &x);
        char ann[512];
        json_t *pod;
        int gpus[8], k;

        if (t == NULL)
            continue;
        asked += (uint64_t)t->ngpu * (uint64_t)t->gpu_milli;
        if ((k = place_pod(fn, o->nodes, t, gpus, &x)) < 0)
            continue;
        snprintf(name, sizeof(name), "gpu-node-%05d", k);
        assigned_text(ann, sizeof(ann), name, k, t, gpus);
        if (*nlive == cap) {
            char(*m)[32] = realloc(*live, (cap *= 2) * sizeof(**live));

            if (m == NULL)
                goto out;
            *live = m;
        }
        snprintf((*live)[*nlive], sizeof((*live)[0]), "pop-%zu", *nlive);
        pod = tpod_json(t, (*live)[*nlive], name, t->ngpu > 0 ? ann : NULL);
        if (egpu_sched_cache_pod_set(c, pod, &err) != 0) {
            fprintf(stderr, "bench: fill: %s\n", err.msg);
            json_decref(pod);
            goto out;
        }
        json_decref(pod);
        (*nlive)++;
        *placed_milli += (uint64_t)t->ngpu * (uint64_t)t->gpu_milli;
    }
    rc = 0;
out:
    free(fn);
    return rc;
}

static double cpu_s(clockid_t id)
{
    struct timespec ts;

    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* CPU seconds the verbs took on the threads that ran them (this VM's process clock does not
 * keep up with threads that are still running, so each verb is timed on its own thread). One
 * request at a time: no lock needed beyond the HTTP round trip's ordering. */
static double verb_cpu_s;

static int timed_verb(int (*verb)(struct egpu_extender *, const char *, size_t, struct egpu_buf *),
                      struct egpu_extender *x, const char *body, size_t len, struct egpu_buf *reply)
{
    double t0 = cpu_s(CLOCK_THREAD_CPUTIME_ID);
    int status = verb(x, body, len, reply);

    verb_cpu_s += cpu_s(CLOCK_THREAD_CPUTIME_ID) - t0;
    return status;
}

/* The elasticgpu.io/assigned text bind wrote last (the watch gives it back). */
static char scale_assigned[4096];

static int keep_annotation(void *data, const char *ns, const char *name, const char *key,
                           const char *value, struct egpu_error *err)
{
    (void)data, (void)ns, (void)name, (void)err;
    if (value != NULL && strcmp(key, EGPU_ANN_ASSIGNED) == 0)
        snprintf(scale_assigned, sizeof(scale_assigned), "%s", value);
    return 0;
}

static int on_timed(int (*verb)(struct egpu_extender *, const char *, size_t, struct egpu_buf *),
                    void *data, const struct egpu_http_request *req,
                    struct egpu_http_response *resp)
{
    resp->status = timed_verb(verb, data, req->body, req->body_len, &resp->body);
    return egpu_http_response_set_type(resp, "application/json");
}

static int on_timed_filter(void *data, const struct egpu_http_request *req,
                           struct egpu_http_response *resp)
{
    return on_timed(egpu_extender_filter, data, req, resp);
}

static int on_timed_prioritize(void *data, const struct egpu_http_request *req,
                               struct egpu_http_response *resp)
{
    return on_timed(egpu_extender_prioritize, data, req, resp);
}

static int on_timed_bind(void *data, const struct egpu_http_request *req,
                         struct egpu_http_response *resp)
{
    return on_timed(egpu_extender_bind, data, req, resp);
}

typedef int (*verb_fn)(struct egpu_extender *, const char *, size_t, struct egpu_buf *);

/* --direct's verb thread: the verbs run on a thread of their own, as
 * egpu-scheduler's HTTP threads do, so the bench's own JSON (the filter
 * and prioritize replies it parses, thousands of small blocks at 65,000
 * nodes) is not freed into the heap arena the verbs allocate from; on the
 * bench's thread a bind after a prioritize of 11,000 nodes spent 1.2 ms in
 * glibc's malloc sorting that garbage. */
struct direct {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int state; /* 0 idle, 1 a call waiting, 2 its answer ready, 3 stop */
    verb_fn verb;
    struct egpu_extender *x;
    const char *body;
    size_t len;
    struct egpu_buf *reply;
    double wall_us;
};

static void *direct_main(void *arg)
{
    struct direct *d = arg;

    pthread_mutex_lock(&d->lock);
    for (;;) {
        while (d->state != 1 && d->state != 3)
            pthread_cond_wait(&d->cond, &d->lock);
        if (d->state == 3)
            break;
        pthread_mutex_unlock(&d->lock);
        {
            double t0 = now_us();

            (void)timed_verb(d->verb, d->x, d->body, d->len, d->reply);
            d->wall_us = now_us() - t0;
        }
        pthread_mutex_lock(&d->lock);
        d->state = 2;
        pthread_cond_broadcast(&d->cond);
    }
    pthread_mutex_unlock(&d->lock);
    return NULL;
}

/* Run verb on d's thread; its wall time in us. */
static double direct_call(struct direct *d, verb_fn verb, struct egpu_extender *x, const char *body,
                          struct egpu_buf *reply)
{
    pthread_mutex_lock(&d->lock);
    d->verb = verb;
    d->x = x;
    d->body = body;
    d->len = strlen(body);
    d->reply = reply;
    d->state = 1;
    pthread_cond_broadcast(&d->cond);
    while (d->state != 2)
        pthread_cond_wait(&d->cond, &d->lock);
    d->state = 0;
    pthread_mutex_unlock(&d->lock);
    return d->wall_us;
}

/* Where the verbs go: in-process on d's thread (--direct), else over HTTP
 * (h, base URL) to x's server. Before this, a run without --direct called
 * x in-process too (the server started and went unused), so the figures
 * "over HTTP" of docs/scheduler.md's 1,000-65,000-node table are
 * in-process ones. */
struct verbs {
    CURL *h;
    char base[64];
    struct egpu_extender *x;
    struct direct *d;
};

/* POST body to verb; its reply into reply. Returns the wall time in us. */
static double call_verb(struct verbs *v, const char *verb, const char *body, struct egpu_buf *reply)
{
    double t0 = now_us();

    egpu_buf_reset(reply);
    if (v->d != NULL) {
        return direct_call(v->d,
                           strcmp(verb, "filter") == 0       ? egpu_extender_filter
                           : strcmp(verb, "prioritize") == 0 ? egpu_extender_prioritize
                                                             : egpu_extender_bind,
                           v->x, body, reply);
    } else {
        char url[96];

        snprintf(url, sizeof(url), "%s/%s", v->base, verb);
        curl_easy_setopt(v->h, CURLOPT_WRITEFUNCTION, keep);
        curl_easy_setopt(v->h, CURLOPT_WRITEDATA, reply);
        post(v->h, url, body);
    }
    return now_us() - t0;
}

/* VmRSS or VmHWM of this process, in MiB. */
static double rss_mib(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kib = 0;

    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, key, strlen(key)) == 0)
            kib = strtod(line + strlen(key) + 1, NULL);
    }
    if (f != NULL)
        fclose(f);
    return kib / 1024;
}

static double load1(void)
{
    double l[3] = {0};

    return getloadavg(l, 3) > 0 ? l[0] : -1;
}

/* ExtenderArgs text: the pod (jansson's text) and the names text (a JSON array), keys in the
 * order kube-scheduler's Go encoder writes them. */
static char *args_text(const char *pod, const char *names)
{
    size_t len = strlen(pod) + strlen(names) + 64;
    char *body = malloc(len);

    if (body != NULL)
        snprintf(body, len, "{\"Pod\":%s,\"Nodes\":null,\"NodeNames\":%s}", pod, names);
    return body;
}

/* kube-scheduler's default percentageOfNodesToScore for n nodes (50 - n/125, at least 5%,
 * at least 100 nodes): the nodes its filter stops at once it has found that many feasible. */
static size_t default_sample(size_t n)
{
    long pct = 50 - (long)n / 125;
    size_t k;

    if (n < 100)
        return n;
    pct = pct < 5 ? 5 : pct;
    k = n * (size_t)pct / 100;
    return k < 100 ? 100 : k;
}

static void print_verb(const char *what, double *v, int n)
{
    printf("  %-22s p50 %8.2f ms  p99 %8.2f ms  max %8.2f ms\n", what, pct(v, n, 0.5) / 1e3,
           pct(v, n, 0.99) / 1e3, pct(v, n, 1.0) / 1e3);
}

static int scale_run(const struct scale_opts *o)
{
    struct egpu_extender_ops ops = {.synced = always, .annotate = keep_annotation, .bind = no_bind};
    struct egpu_extender_config xc = {.node_policy = policy, .card_policy = policy};
    struct egpu_http_config hc = {
        .bind_addr = "127.0.0.1", .threads = 2, .max_body_bytes = 16u << 20}; /* egpu-scheduler's */
    struct egpu_sched_cache *c = egpu_sched_cache_new();
    struct egpu_http_server *srv = NULL;
    struct egpu_warmer *warmer = NULL;
    struct egpu_error err = {0};
    struct verbs v = {0};
    struct direct direct = {0};
    struct tpod *trace = NULL, *gpu_pods = NULL;
    size_t ntrace = read_trace(o->trace, &trace), ngpu_pods = 0, nlive = 0;
    char(*live)[32] = NULL, **names = calloc((size_t)o->orders, sizeof(char *));
    const size_t asked = (size_t)o->warm + (size_t)o->pods;
    double *tf = calloc(asked, sizeof(double)), *tp = calloc(asked, sizeof(double));
    double *tb = calloc(asked, sizeof(double)), *tt = calloc(asked, sizeof(double));
    double *tn = calloc(asked, sizeof(double));
    double t0, build_s, rss_built, load_before, load_after, main_ext = 0, ext_cpu;
    uint64_t placed = 0, x = 7;
    size_t reply_bytes = 0, passed_sum = 0, nofit_bytes = 0;
    int done = 0, unschedulable = 0, bind_failed = 0, rc = 1;
    struct egpu_buf reply;
    struct curl_slist *hdr = NULL;

    egpu_buf_init(&reply, 256 << 20);
    for (size_t i = 0; i < ntrace; i++)
        ngpu_pods += trace[i].ngpu > 0;
    gpu_pods = malloc((ngpu_pods ? ngpu_pods : 1) * sizeof(*gpu_pods));
    if (ntrace == 0 || ngpu_pods == 0 || c == NULL || names == NULL || tf == NULL || tp == NULL ||
        tb == NULL || tt == NULL || tn == NULL || gpu_pods == NULL)
        goto out;
    ngpu_pods = 0;
    for (size_t i = 0; i < ntrace; i++)
        if (trace[i].ngpu > 0)
            gpu_pods[ngpu_pods++] = trace[i];
    load_before = load1();
    t0 = now_us();
    if (scale_fill(c, o, trace, ntrace, &live, &nlive, &placed) != 0)
        goto out;
    egpu_sched_cache_synced(c);
    build_s = (now_us() - t0) / 1e6;
    rss_built = rss_mib("VmRSS:");
    for (int r = 0; r < o->orders; r++) {
        json_t *arr = json_array();
        int *idx = malloc((size_t)o->nodes * sizeof(*idx));
        uint64_t y = (uint64_t)r * 0x9E3779B97F4A7C15ULL + 1;

        for (int i = 0; idx != NULL && i < o->nodes; i++)
            idx[i] = i;
        for (int i = o->nodes - 1; idx != NULL && i > 0; i--) {
            int k = (int)(rng_next(&y) % (uint64_t)(i + 1)), t = idx[i];

            idx[i] = idx[k];
            idx[k] = t;
        }
        for (int i = 0; idx != NULL && i < o->nodes; i++) {
            char nm[32];

            snprintf(nm, sizeof(nm), "gpu-node-%05d", idx[i]);
            json_array_append_new(arr, json_string(nm));
        }
        names[r] = json_dumps(arr, JSON_COMPACT);
        json_decref(arr);
        free(idx);
        if (names[r] == NULL)
            goto out;
    }
    v.x = egpu_extender_new(&xc, c, &ops, &err);
    if (v.x == NULL)
        goto out;
    if (o->direct) {
        pthread_mutex_init(&direct.lock, NULL);
        pthread_cond_init(&direct.cond, NULL);
        if (pthread_create(&direct.thread, NULL, direct_main, &direct) != 0) {
            fprintf(stderr, "bench: verb thread\n");
            goto out;
        }
        v.d = &direct;
    } else {
        if (egpu_http_server_new(&hc, &srv, &err) != 0 ||
            egpu_http_server_route(srv, "POST", "/filter", on_timed_filter, v.x) != 0 ||
            egpu_http_server_route(srv, "POST", "/prioritize", on_timed_prioritize, v.x) != 0 ||
            egpu_http_server_route(srv, "POST", "/bind", on_timed_bind, v.x) != 0 ||
            egpu_http_server_start(srv, &err) != 0) {
            fprintf(stderr, "bench: server: %s\n", err.msg);
            goto out;
        }
        snprintf(v.base, sizeof(v.base), "http://127.0.0.1:%u", egpu_http_server_port(srv));
        v.h = curl_easy_init();
        hdr = curl_slist_append(NULL, "Content-Type: application/json");
        hdr = curl_slist_append(hdr, "Expect:");
        curl_easy_setopt(v.h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(v.h, CURLOPT_BUFFERSIZE, 512L * 1024);
        curl_easy_setopt(v.h, CURLOPT_HTTPHEADER, hdr);
    }
    printf("== scale: %d nodes x 8 GPUs, %zu pods running (openb mix, %.0f%% of GPU milli "
           "asked, %.1f%% placed), %s, %s\n",
           o->nodes, nlive, 100 * o->fill, 100.0 * (double)placed / (o->nodes * 8000.0),
           o->direct ? "in-process (no HTTP)" : "HTTP on loopback, 2 server threads",
           o->sample ? "filter sent kube-scheduler's default sample of the nodes"
                     : "filter sent every node (percentageOfNodesToScore 100), shuffled");
    printf("  build %.1f s, RSS after build %.0f MiB, load %.2f before build, %.2f after\n",
           build_s, rss_built, load_before, load1());
    fflush(stdout);
    if (!o->no_memo_warm) {
        /* As egpu-scheduler starts it: the run begins once its first pass
         * has judged the cached pods' shapes on every node. */
        double w0 = now_us(), c0 = cpu_s(CLOCK_PROCESS_CPUTIME_ID);
        uint64_t passes = 0, verdicts = 0;

        if (egpu_warmer_start(v.x, &warmer, &err) != 0) {
            fprintf(stderr, "bench: memo warm: %s\n", err.msg);
            goto out;
        }
        for (; passes == 0; usleep(5000))
            egpu_extender_warm_counts(v.x, &passes, &verdicts);
        printf("  memo warm (--memo-warm true): first pass %.1f s, %.1f s of CPU, %llu verdicts "
               "(%.0f shapes x nodes), RSS %.0f MiB\n",
               (now_us() - w0) / 1e6, cpu_s(CLOCK_PROCESS_CPUTIME_ID) - c0,
               (unsigned long long)verdicts, (double)verdicts / o->nodes, rss_mib("VmRSS:"));
        fflush(stdout);
    }
    load_before = load1();
    verb_cpu_s = 0;
    if (o->warm == 0)
        CALLGRIND_START_INSTRUMENTATION;
    for (int i = 0; i < o->warm + o->pods; i++) {
        const struct tpod *t = &gpu_pods[rng_next(&x) % ngpu_pods];
        char pname[32], *pod_text, *fbody = NULL, *pbody = NULL, bbody[256];
        json_t *pod, *out, *nn, *best = NULL;
        double m0;
        long best_score = -1;
        size_t k;

        if (o->warm > 0 && i == o->warm) {
            /* The warm pods are asked as the others; only what follows counts. */
            done = unschedulable = bind_failed = 0;
            reply_bytes = passed_sum = nofit_bytes = 0;
            verb_cpu_s = main_ext = 0;
            load_before = load1();
            CALLGRIND_START_INSTRUMENTATION;
        }

        snprintf(pname, sizeof(pname), "new-%d", i);
        pod = tpod_json(t, pname, NULL, NULL);
        pod_text = json_dumps(pod, JSON_COMPACT);
        m0 = cpu_s(CLOCK_THREAD_CPUTIME_ID); /* the watch brings the pending pod */
        if (egpu_sched_cache_pod_set(c, pod, &err) != 0)
            fprintf(stderr, "bench: pending pod: %s\n", err.msg);
        main_ext += cpu_s(CLOCK_THREAD_CPUTIME_ID) - m0;
        json_decref(pod);
        if (o->sample) {
            /* The first default_sample(N) names of a shuffled list: what kube-scheduler's
             * filter sends once it has found that many feasible nodes (every node is, for
             * its own plugins here). */
            size_t want = default_sample((size_t)o->nodes), cut = 1;
            const char *s = names[i % o->orders];

            for (k = 0; s[cut] != '\0' && k < want; cut++)
                k += s[cut] == ',';
            {
                char *part = strndup(s, cut);

                part[cut - 1] = ']';
                fbody = args_text(pod_text, part);
                free(part);
            }
        } else {
            fbody = args_text(pod_text, names[i % o->orders]);
        }
        tf[done] = call_verb(&v, "filter", fbody, &reply);
        reply_bytes += reply.len;
        if (o->dump != NULL && i == 0) {
            FILE *f = fopen(o->dump, "w");

            if (f != NULL) {
                fwrite(reply.data ? reply.data : "", 1, reply.len, f);
                fclose(f);
            }
        }
        out = json_loads(egpu_buf_str(&reply), 0, NULL);
        nn = json_object_get(out, "NodeNames");
        if (!json_is_array(nn) || json_array_size(nn) == 0) {
            tn[unschedulable] = tf[done];
            nofit_bytes += reply.len;
            unschedulable++;
            (void)egpu_sched_cache_pod_delete(c, "bench", pname);
            json_decref(out);
            free(fbody);
            free(pod_text);
            continue;
        }
        passed_sum += json_array_size(nn);
        {
            char *ntext = json_dumps(nn, JSON_COMPACT);

            pbody = args_text(pod_text, ntext);
            free(ntext);
        }
        tp[done] = call_verb(&v, "prioritize", pbody, &reply);
        {
            json_t *pl = json_loads(egpu_buf_str(&reply), 0, NULL), *e;

            json_array_foreach(pl, k, e)
            {
                long sc = (long)json_integer_value(json_object_get(e, "Score"));

                if (sc > best_score) {
                    best_score = sc;
                    json_decref(best);
                    best = json_incref(json_object_get(e, "Host"));
                }
            }
            json_decref(pl);
        }
        if (best == NULL)
            best = json_incref(json_array_get(nn, 0));
        snprintf(
            bbody, sizeof(bbody),
            "{\"PodName\":\"%s\",\"PodNamespace\":\"bench\",\"PodUID\":\"%s\",\"Node\":\"%s\"}",
            pname, pname, json_string_value(best));
        scale_assigned[0] = '\0';
        tb[done] = call_verb(&v, "bind", bbody, &reply);
        if (strstr(egpu_buf_str(&reply), "\"Error\":\"\"") == NULL || scale_assigned[0] == '\0') {
            bind_failed++;
            (void)egpu_sched_cache_unreserve(c, "bench", pname);
            (void)egpu_sched_cache_pod_delete(c, "bench", pname);
        } else {
            /* It lands (the watch: nodeName and the annotation, then the agent's mark), and
             * a running pod leaves, so the population stays as large. */
            size_t gone = (size_t)(rng_next(&x) % nlive);

            pod = tpod_json(t, pname, json_string_value(best), scale_assigned);
            m0 = cpu_s(CLOCK_THREAD_CPUTIME_ID);
            if (egpu_sched_cache_pod_set(c, pod, &err) != 0)
                fprintf(stderr, "bench: bound pod: %s\n", err.msg);
            (void)egpu_sched_cache_pod_delete(c, "bench", live[gone]);
            main_ext += cpu_s(CLOCK_THREAD_CPUTIME_ID) - m0;
            json_decref(pod);
            snprintf(live[gone], sizeof(live[0]), "%s", pname);
        }
        tt[done] = tf[done] + tp[done] + tb[done];
        done++;
        json_decref(best);
        json_decref(out);
        free(fbody);
        free(pbody);
        free(pod_text);
    }
    CALLGRIND_STOP_INSTRUMENTATION;
    ext_cpu = verb_cpu_s + main_ext;
    load_after = load1();
    printf("  %d pods asked: %d placed, %d fit nowhere, %d binds refused; filter passed %.0f "
           "nodes on average, its reply %.0f KiB\n",
           o->pods, done, unschedulable, bind_failed, done ? (double)passed_sum / done : 0.0,
           (double)reply_bytes / (o->pods ? o->pods : 1) / 1024);
    if (done > 0) {
        print_verb("filter", tf, done);
        print_verb("prioritize", tp, done);
        print_verb("bind", tb, done);
        print_verb("filter+prioritize+bind", tt, done);
    }
    if (unschedulable > 0)
        printf("  filter of a pod that fits nowhere (%d of them; every node's reason, %.0f KiB): "
               "p50 %.2f ms, max %.2f ms\n",
               unschedulable, (double)nofit_bytes / unschedulable / 1024,
               pct(tn, unschedulable, 0.5) / 1e3, pct(tn, unschedulable, 1.0) / 1e3);
    printf("  extender CPU per pod %.2f ms (%s), peak RSS %.0f MiB, load %.2f before the run, "
           "%.2f after\n",
           1e3 * ext_cpu / (o->pods ? o->pods : 1),
           "the verbs on their threads and the cache updates the watch would make; HTTP not "
           "counted",
           rss_mib("VmHWM:"), load_before, load_after);
    {
        uint64_t kept, replaced;

        egpu_extender_workload_rebuilds(v.x, &kept, &replaced);
        printf("  learned target workload: %llu rebuilds kept the one in use, %llu replaced it "
               "(the first included)\n",
               (unsigned long long)kept, (unsigned long long)replaced);
        egpu_extender_warm_counts(v.x, &kept, &replaced);
        if (warmer != NULL)
            printf("  memo warm: %llu passes, %llu verdicts in all\n", (unsigned long long)kept,
                   (unsigned long long)replaced);
    }
    rc = 0;
out:
    if (v.d != NULL) {
        pthread_mutex_lock(&direct.lock);
        direct.state = 3;
        pthread_cond_broadcast(&direct.cond);
        pthread_mutex_unlock(&direct.lock);
        pthread_join(direct.thread, NULL);
    }
    if (v.h != NULL)
        curl_easy_cleanup(v.h);
    curl_slist_free_all(hdr);
    egpu_http_server_free(srv);
    egpu_warmer_stop(warmer);
    egpu_extender_free(v.x);
    egpu_sched_cache_free(c);
    for (int r = 0; names != NULL && r < o->orders; r++)
        free(names[r]);
    free(names);
    free(live);
    free(trace);
    free(gpu_pods);
    free(tf);
    free(tp);
    free(tb);
    free(tt);
    free(tn);
    egpu_buf_free(&reply);
    return rc;
}

/* Keep the process (client, server threads) on the first CPU it may use. */
static int one_core(void)
{
    cpu_set_t set;

    if (sched_getaffinity(0, sizeof(set), &set) != 0)
        return -1;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (CPU_ISSET(cpu, &set)) {
            CPU_ZERO(&set);
            CPU_SET(cpu, &set);
            return sched_setaffinity(0, sizeof(set), &set);
        }
    }
    return -1;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: bench_extender [--one-core] [--policy " EGPU_POLICY_NAMES "]\n"
            "       bench_extender [--one-core] [--policy P] --nodes N [--pods K] [--warm W] "
            "[--fill F] [--orders R]\n"
            "                      [--trace FILE] [--direct] [--sample] [--no-memo-warm] "
            "[--dump FILE]\n");
}

int main(int argc, char **argv)
{
    struct scale_opts so = {.pods = 200, .orders = 8, .fill = 0.7};
    bool pinned = false;
    char trace[4096];

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;

        if (strcmp(a, "--one-core") == 0)
            pinned = true;
        else if (strcmp(a, "--direct") == 0)
            so.direct = true;
        else if (strcmp(a, "--sample") == 0)
            so.sample = true;
        else if (strcmp(a, "--no-memo-warm") == 0)
            so.no_memo_warm = true;
        else if (val != NULL && strcmp(a, "--nodes") == 0 && (i++, 1))
            so.nodes = (int)strtol(val, NULL, 10);
        else if (val != NULL && strcmp(a, "--pods") == 0 && (i++, 1))
            so.pods = (int)strtol(val, NULL, 10);
        else if (val != NULL && strcmp(a, "--warm") == 0 && (i++, 1))
            so.warm = (int)strtol(val, NULL, 10);
        else if (val != NULL && strcmp(a, "--orders") == 0 && (i++, 1))
            so.orders = (int)strtol(val, NULL, 10);
        else if (val != NULL && strcmp(a, "--fill") == 0 && (i++, 1))
            so.fill = strtod(val, NULL);
        else if (val != NULL && strcmp(a, "--trace") == 0 && (i++, 1))
            so.trace = val;
        else if (val != NULL && strcmp(a, "--dump") == 0 && (i++, 1))
            so.dump = val;
        else if (val != NULL && strcmp(a, "--policy") == 0 &&
                 egpu_policy_parse(val, &policy, NULL) == 0 && (i++, 1))
            ;
        else {
            usage();
            return 2;
        }
    }
    if ((so.nodes == 0 && (so.direct || so.sample || so.trace)) || so.nodes < 0 ||
        so.nodes > 99999 || so.pods < 1 || so.warm < 0 || so.orders < 1 || so.fill < 0 ||
        so.fill > 1) {
        fprintf(stderr, "bench: --nodes 1..99999, --pods and --orders at least 1, --warm at least "
                        "0, --fill 0..1\n");
        usage();
        return 2;
    }
    if (pinned && one_core() != 0) {
        perror("bench: sched_setaffinity");
        return 1;
    }
    egpu_log_level = EGPU_LOG_ERROR;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (so.nodes > 0) {
        int rc;

        if (so.trace == NULL)
            so.trace = trace_default(trace, sizeof(trace));
        rc = scale_run(&so);
        curl_global_cleanup();
        return rc;
    }
    printf("== bench: extender filter+prioritize over HTTP on loopback, %s, one pod of 30%% "
           "and 4096 MiB, N nodes x 8 GPUs, %s\n",
           egpu_policy_name(policy),
           pinned ? "client and server on one core" : "threads on any core");
    floor_run(4000);
    for (int m = SAME; m <= SHUFFLE; m++) {
        run(1000, 4000, 0, (enum mode)m);
        run(5000, 2000, 0, (enum mode)m);
    }
    printf("== every 10th node full: filter refuses it; prioritize gets the survivors\n");
    run(1000, 4000, 10, CHURN);
    run(5000, 2000, 10, CHURN);
    curl_global_cleanup();
    return 0;
}
