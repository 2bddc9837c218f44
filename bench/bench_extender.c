/* bench/bench_extender.c - filter + prioritize over HTTP on loopback.
 *
 * What kube-scheduler does for every pod that asks for a GPU: POST
 * ExtenderArgs (the pod and every candidate node name, nodeCacheCapable) to
 * /filter, then the nodes that passed to /prioritize. The extender runs in
 * this process on the real HTTP server (src/net) with a cache of N nodes of
 * 8 cards, half of the cards 50% used; the client is libcurl on one
 * kept-alive connection. Prints p50 and p99 of the filter+prioritize pair,
 * of each verb, and pairs per second, for N = 1,000 and 5,000.
 * Target (issue 3): p99 under 2 ms at 5,000 nodes. Figures, not a test.
 */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "egpu/log.h"
#include "egpu/net.h"
#include "egpu/scheduler.h"

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

static int fill(struct egpu_sched_cache *c, int nodes)
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
            json_t *gpu, *pod;

            snprintf(uuid, sizeof(uuid), "GPU-%05d-%d", i, g);
            gpu = json_pack("{s:{s:s},s:{s:s,s:i,s:s,s:s,s:i}}", "metadata", "name", uuid, "spec",
                            "nodeName", name, "index", g, "uuid", uuid, "model", "A100", "memory",
                            40960);
            if (egpu_sched_cache_gpu_set(c, gpu, &err) != 0)
                return -1;
            json_decref(gpu);
            if (g % 2)
                continue;
            snprintf(ann, sizeof(ann),
                     "{\"node\":\"%s\",\"containers\":[{\"name\":\"c\",\"core\":50,"
                     "\"memory\":8192,\"gpus\":[\"%s\"]}]}",
                     name, uuid);
            pod = json_pack("{s:{s:s,s:s,s:{s:s}},s:{s:s,s:[{s:s,s:{s:{s:s,s:s,s:s}}}]}}",
                            "metadata", "name", uuid, "namespace", "bench", "annotations",
                            EGPU_ANN_ASSIGNED, ann, "spec", "nodeName", name, "containers", "name",
                            "c", "resources", "requests", "cpu", "4", EGPU_RES_GPU_CORE, "50",
                            EGPU_RES_GPU_MEMORY, "8192");
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
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    if (curl_easy_perform(h) != CURLE_OK)
        fprintf(stderr, "bench: POST %s failed\n", url);
}

static void run(int nodes, int iterations)
{
    struct egpu_extender_ops ops = {.synced = always, .annotate = no_annotate, .bind = no_bind};
    struct egpu_extender_config xc = {.node_policy = EGPU_POLICY_BINPACK,
                                      .card_policy = EGPU_POLICY_BINPACK};
    struct egpu_http_config hc = {.bind_addr = "127.0.0.1", .threads = 2};
    struct egpu_sched_cache *c = egpu_sched_cache_new();
    struct egpu_http_server *srv = NULL;
    struct egpu_extender *x = NULL;
    struct egpu_error err = {0};
    double *pair = calloc((size_t)iterations, sizeof(double));
    double *filt = calloc((size_t)iterations, sizeof(double));
    double *prio = calloc((size_t)iterations, sizeof(double));
    struct curl_slist *hdr = NULL;
    json_t *args, *names = json_array();
    char *body = NULL, furl[64], purl[64];
    double t_all;
    CURL *h = NULL;

    if (c == NULL || pair == NULL || filt == NULL || prio == NULL || fill(c, nodes) != 0)
        goto out;
    x = egpu_extender_new(&xc, c, &ops, &err);
    if (x == NULL || egpu_http_server_new(&hc, &srv, &err) != 0 ||
        egpu_http_server_route(srv, "POST", "/filter", on_filter, x) != 0 ||
        egpu_http_server_route(srv, "POST", "/prioritize", on_prioritize, x) != 0 ||
        egpu_http_server_start(srv, &err) != 0) {
        fprintf(stderr, "bench: server: %s\n", err.msg);
        goto out;
    }
    for (int i = 0; i < nodes; i++)
        json_array_append_new(names, json_sprintf("gpu-node-%05d", i));
    args =
        json_pack("{s:{s:{s:s,s:s,s:s},s:{s:[{s:s,s:{s:{s:s,s:s,s:s}}}]}},s:O,s:n}", "Pod",
                  "metadata", "name", "p", "namespace", "bench", "uid", "u", "spec", "containers",
                  "name", "c", "resources", "requests", "cpu", "2", EGPU_RES_GPU_CORE, "30",
                  EGPU_RES_GPU_MEMORY, "4096", "NodeNames", names, "Nodes");
    body = json_dumps(args, JSON_COMPACT);
    json_decref(args);
    snprintf(furl, sizeof(furl), "http://127.0.0.1:%u/filter", egpu_http_server_port(srv));
    snprintf(purl, sizeof(purl), "http://127.0.0.1:%u/prioritize", egpu_http_server_port(srv));
    h = curl_easy_init();
    hdr = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sink);
    for (int i = 0; i < 20; i++) /* warm up: connection, caches */
        post(h, furl, body);
    t_all = now_us();
    for (int i = 0; i < iterations; i++) {
        double t0 = now_us(), t1;

        post(h, furl, body);
        t1 = now_us();
        post(h, purl, body);
        filt[i] = t1 - t0;
        prio[i] = now_us() - t1;
        pair[i] = filt[i] + prio[i];
    }
    t_all = now_us() - t_all;
    printf("%5d nodes x 8 GPUs: filter+prioritize p50 %7.0f us  p99 %7.0f us  (filter p50 %6.0f "
           "p99 %6.0f, prioritize p50 %6.0f p99 %6.0f)  %6.0f pairs/s\n",
           nodes, pct(pair, iterations, 0.5), pct(pair, iterations, 0.99),
           pct(filt, iterations, 0.5), pct(filt, iterations, 0.99), pct(prio, iterations, 0.5),
           pct(prio, iterations, 0.99), iterations / (t_all / 1e6));
out:
    curl_slist_free_all(hdr);
    if (h != NULL)
        curl_easy_cleanup(h);
    free(body);
    egpu_http_server_free(srv);
    egpu_extender_free(x);
    egpu_sched_cache_free(c);
    free(pair);
    free(filt);
    free(prio);
}

int main(void)
{
    egpu_log_level = EGPU_LOG_ERROR;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    printf("== bench: extender filter+prioritize over HTTP on loopback, binpack, one pod of 30%% "
           "and 4096 MiB\n");
    run(1000, 500);
    run(5000, 300);
    curl_global_cleanup();
    return 0;
}
