/* bench/bench_restart.c - egpu-scheduler's restart: from start to ready at N nodes.
 *
 * A restarted extender lists every Node, GPU object and Pod and watches from the list's
 * resourceVersion: by a streaming watch (sendInitialEvents, the informers' stream_list:
 * each object an ADDED event, then the initial-events-end bookmark, as kube-apiserver
 * 1.34 and later send it), or with --paged in pages of 500 following `continue` (the
 * stream refused with 422, as a server with the WatchList gate off does); /readyz answers 200 once
 * every informer has synced and the cache has taken the lists. This bench serves those
 * lists from an API server of its own, in this process (src/net's HTTP server, 16 threads;
 * the pages are rendered before egpu-scheduler starts, so serving one costs a copy), runs
 * the real egpu-scheduler binary against it (--leader-elect false), and times the restart
 * to ready, the scheduler's CPU (user + system, /proc/PID/stat) and its peak RSS (VmHWM).
 *
 * The cluster is bench_extender --nodes's: N nodes of 8 cards with the openb trace's pod
 * mix running on them (openb_pods.h), filled to --fill of the GPU milli. The objects are
 * shaped as a kube-apiserver returns them, with the fields a real cluster's carry (labels,
 * conditions, images, managedFields, a pod's token volume and container status), so the
 * informers' stores weigh what they would; --lean sends only what the cache reads.
 * A watch ends at once with no event (the informer backs off and watches again): no change
 * comes during the rebuild, as on a quiet cluster. egpu-scheduler runs with
 * --watch-unhealthy-seconds 3600, so those watches do not keep it from ready.
 *
 * The API server's own cost at 65,000 nodes is not here (this one serves rendered bytes):
 * docs/scheduler.md gives what a list costs the real kube-apiserver at smaller N.
 *
 * Usage: bench_restart [--nodes N] [--fill F] [--trace FILE] [--lean] [--paged]
 *                      [--scheduler PATH]
 * Figures, not a test.
 */
#define _GNU_SOURCE /* strndup */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <time.h>
#include <unistd.h>

#include "egpu/kube.h"
#include "egpu/log.h"
#include "egpu/net.h"
#include "egpu/scheduler.h"
#include "openb_pods.h"

#define PAGE 500

/* One listed resource: its collection path and its pages, rendered. */
struct coll {
    const struct egpu_kube_resource *res;
    char path[128];
    size_t npages;
    char **pages; /* npages texts (--paged); NULL when the list is empty or streamed */
    char *stream; /* the streaming list: ADDED lines, then the bookmark (not --paged) */
    size_t stream_len;
    json_t *items; /* while building */
    size_t objects;
    size_t bytes;
};

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double load1(void)
{
    double l[3] = {0};

    return getloadavg(l, 3) > 0 ? l[0] : -1;
}

static void coll_path(struct coll *c)
{
    if (c->res->group[0] == '\0')
        snprintf(c->path, sizeof(c->path), "/api/%s/%s", c->res->version, c->res->plural);
    else
        snprintf(c->path, sizeof(c->path), "/apis/%s/%s/%s", c->res->group, c->res->version,
                 c->res->plural);
}

/* Render c->items as a streaming list's body: one {"type":"ADDED","object":...} line an
 * item, then the BOOKMARK annotated k8s.io/initial-events-end at resourceVersion 100. */
static int coll_render_stream(struct coll *c)
{
    FILE *f = open_memstream(&c->stream, &c->stream_len);
    size_t i;
    json_t *item;
    int rc = 0;

    if (f == NULL)
        return -ENOMEM;
    c->objects = json_array_size(c->items);
    json_array_foreach(c->items, i, item)
    {
        char *text = json_dumps(item, JSON_COMPACT);

        if (text == NULL || fprintf(f, "{\"type\":\"ADDED\",\"object\":%s}\n", text) < 0)
            rc = -ENOMEM;
        free(text);
        if (rc)
            break;
    }
    if (!rc && fprintf(f,
                       "{\"type\":\"BOOKMARK\",\"object\":{\"apiVersion\":\"%s%s%s\","
                       "\"metadata\":{\"resourceVersion\":\"100\",\"annotations\":"
                       "{\"k8s.io/initial-events-end\":\"true\"}}}}\n",
                       c->res->group, c->res->group[0] ? "/" : "", c->res->version) < 0)
        rc = -ENOMEM;
    if (fclose(f) != 0 || rc)
        return -ENOMEM;
    c->bytes = c->stream_len;
    json_decref(c->items);
    c->items = NULL;
    return 0;
}

/* Render c->items into pages of PAGE items: a List with metadata.resourceVersion and, but
 * on the last page, metadata.continue = the next page's index. */
static int coll_render(struct coll *c)
{
    size_t n = json_array_size(c->items);

    c->objects = n;
    c->npages = n ? (n + PAGE - 1) / PAGE : 1;
    c->pages = calloc(c->npages, sizeof(*c->pages));
    if (c->pages == NULL)
        return -ENOMEM;
    for (size_t p = 0; p < c->npages; p++) {
        json_t *items = json_array(), *meta = json_pack("{s:s}", "resourceVersion", "100");
        json_t *list;
        char next[32];

        for (size_t i = p * PAGE; i < n && i < (p + 1) * PAGE; i++)
            json_array_append(items, json_array_get(c->items, i));
        if (p + 1 < c->npages) {
            snprintf(next, sizeof(next), "%zu", p + 1);
            json_object_set_new(meta, "continue", json_string(next));
            json_object_set_new(meta, "remainingItemCount",
                                json_integer((json_int_t)(n - (p + 1) * PAGE)));
        }
        list = json_pack("{s:s,s:s,s:o,s:o}", "kind", "List", "apiVersion", "v1", "metadata", meta,
                         "items", items);
        c->pages[p] = json_dumps(list, JSON_COMPACT);
        json_decref(list);
        if (c->pages[p] == NULL)
            return -ENOMEM;
        c->bytes += strlen(c->pages[p]);
    }
    json_decref(c->items);
    c->items = NULL;
    return 0;
}

static json_t *managed(const char *manager)
{
    return json_pack("[{s:s,s:s,s:s,s:s,s:s,s:{s:{}}}]", "manager", manager, "operation", "Update",
                     "apiVersion", "v1", "time", "2026-01-01T00:00:00Z", "fieldsType", "FieldsV1",
                     "fieldsV1", "f:status", "f:conditions", "{}");
}

static json_t *node_json(int i, bool lean)
{
    char name[32], uid[48];
    json_t *n, *labels, *images;

    snprintf(name, sizeof(name), "gpu-node-%05d", i);
    if (lean)
        return json_pack("{s:{s:s,s:s},s:{s:{s:s,s:s}}}", "metadata", "name", name,
                         "resourceVersion", "10", "status", "allocatable", "cpu", "96", "memory",
                         "384Gi");
    snprintf(uid, sizeof(uid), "6b1f0c2e-0000-4000-8000-%012d", i);
    labels = json_pack(
        "{s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s}", "kubernetes.io/hostname", name,
        "kubernetes.io/os", "linux", "kubernetes.io/arch", "amd64",
        "node.kubernetes.io/instance-type", "a2-highgpu-8g", "topology.kubernetes.io/region",
        "us-central1", "topology.kubernetes.io/zone", "us-central1-a",
        "cloud.google.com/gke-nodepool", "gpu-pool", "cloud.google.com/gke-accelerator",
        "nvidia-tesla-a100", "elasticgpu.io/agent", "true", "beta.kubernetes.io/arch", "amd64");
    images = json_array();
    for (int k = 0; k < 12; k++) {
        char img[128], dig[128];

        snprintf(img, sizeof(img), "registry.example.com/team-%d/trainer:v1.%d.%d", k, k, i % 7);
        snprintf(dig, sizeof(dig), "registry.example.com/team-%d/trainer@sha256:%064d", k, k);
        json_array_append_new(images, json_pack("{s:[s,s],s:I}", "names", dig, img, "sizeBytes",
                                                (json_int_t)(1500000000 + k * 1000)));
    }
    n = json_pack(
        "{s:{s:s,s:s,s:s,s:s,s:o,s:{s:s,s:s},s:o},s:{s:s,s:s},s:{s:{s:s,s:s,s:s,s:s,s:s},"
        "s:{s:s,s:s,s:s,s:s,s:s},s:[{s:s,s:s,s:s,s:s,s:s,s:s},{s:s,s:s,s:s,s:s,s:s,s:s},"
        "{s:s,s:s,s:s,s:s,s:s,s:s},{s:s,s:s,s:s,s:s,s:s,s:s}],s:[{s:s,s:s},{s:s,s:s}],"
        "s:{s:{s:i}},s:{s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s},s:o}}",
        "metadata", "name", name, "uid", uid, "resourceVersion", "10", "creationTimestamp",
        "2026-01-01T00:00:00Z", "labels", labels, "annotations", "node.alpha.kubernetes.io/ttl",
        "0", "volumes.kubernetes.io/controller-managed-attach-detach", "true", "managedFields",
        managed("kubelet"), "spec", "podCIDR", "10.64.0.0/24", "providerID",
        "gce://project/us-central1-a/node", "status", "capacity", "cpu", "96", "memory", "393216Mi",
        "pods", "110", "ephemeral-storage", "100Gi", "hugepages-2Mi", "0", "allocatable", "cpu",
        "96", "memory", "384Gi", "pods", "110", "ephemeral-storage", "90Gi", "hugepages-2Mi", "0",
        "conditions", "type", "MemoryPressure", "status", "False", "lastHeartbeatTime",
        "2026-01-01T00:00:00Z", "lastTransitionTime", "2026-01-01T00:00:00Z", "reason",
        "KubeletHasSufficientMemory", "message", "kubelet has sufficient memory available", "type",
        "DiskPressure", "status", "False", "lastHeartbeatTime", "2026-01-01T00:00:00Z",
        "lastTransitionTime", "2026-01-01T00:00:00Z", "reason", "KubeletHasNoDiskPressure",
        "message", "kubelet has no disk pressure", "type", "PIDPressure", "status", "False",
        "lastHeartbeatTime", "2026-01-01T00:00:00Z", "lastTransitionTime", "2026-01-01T00:00:00Z",
        "reason", "KubeletHasSufficientPID", "message", "kubelet has sufficient PID available",
        "type", "Ready", "status", "True", "lastHeartbeatTime", "2026-01-01T00:00:00Z",
        "lastTransitionTime", "2026-01-01T00:00:00Z", "reason", "KubeletReady", "message",
        "kubelet is posting ready status", "addresses", "type", "InternalIP", "address",
        "10.128.0.2", "type", "Hostname", "address", name, "daemonEndpoints", "kubeletEndpoint",
        "Port", 10250, "nodeInfo", "machineID", "0123456789abcdef", "systemUUID",
        "01234567-89ab-cdef-0123-456789abcdef", "bootID", "01234567-89ab-cdef", "kernelVersion",
        "6.1.0", "osImage", "Container-Optimized OS", "containerRuntimeVersion",
        "containerd://1.7.0", "kubeletVersion", "v1.31.0", "kubeProxyVersion", "v1.31.0",
        "operatingSystem", "linux", "architecture", "amd64", "images", images);
    return n;
}

static json_t *gpu_json(int i, int g, bool lean)
{
    char name[32], uuid[64];
    json_t *o;

    snprintf(name, sizeof(name), "gpu-node-%05d", i);
    snprintf(uuid, sizeof(uuid), "GPU-%05d-%d", i, g);
    o = json_pack("{s:s,s:s,s:{s:s,s:s},s:{s:s,s:i,s:s,s:s,s:i}}", "apiVersion",
                  "elasticgpu.io/v1alpha1", "kind", "GPU", "metadata", "name", uuid,
                  "resourceVersion", "10", "spec", "nodeName", name, "index", g, "uuid", uuid,
                  "model", "A100", "memory", 40960);
    if (!lean)
        json_object_set_new(json_object_get(o, "metadata"), "managedFields", managed("egpu-agent"));
    return o;
}

static json_t *pod_json(const struct tpod *t, size_t id, const char *node, const char *ann,
                        bool lean)
{
    char name[32], uid[48];
    json_t *req = tpod_requests(t), *pod, *meta;

    snprintf(name, sizeof(name), "pop-%zu", id);
    snprintf(uid, sizeof(uid), "9c2e5d1a-0000-4000-8000-%012zu", id);
    pod =
        json_pack("{s:{s:s,s:s,s:s,s:s},s:{s:s,s:s,s:[{s:s,s:s,s:{s:O,s:o}}]},s:{s:s}}", "metadata",
                  "name", name, "namespace", "bench", "uid", uid, "resourceVersion", "20", "spec",
                  "nodeName", node, "schedulerName", EGPU_SCHEDULER_NAME_DEFAULT, "containers",
                  "name", "c", "image", "registry.example.com/team-1/trainer:v1.2.3", "resources",
                  "requests", req, "limits", req, "status", "phase", "Running");
    meta = json_object_get(pod, "metadata");
    if (ann != NULL)
        json_object_set_new(
            meta, "annotations",
            json_pack("{s:s,s:s}", EGPU_ANN_ASSIGNED, ann, EGPU_ANN_ALLOCATED, "true"));
    if (!lean) {
        json_t *spec = json_object_get(pod, "spec"), *st = json_object_get(pod, "status");

        json_object_set_new(meta, "labels",
                            json_pack("{s:s,s:s,s:s}", "app", "trainer", "team", "ml-1",
                                      "pod-template-hash", "7d9f8c6b5"));
        json_object_set_new(meta, "ownerReferences",
                            json_pack("[{s:s,s:s,s:s,s:s,s:b,s:b}]", "apiVersion", "apps/v1",
                                      "kind", "ReplicaSet", "name", "trainer-7d9f8c6b5", "uid",
                                      "1f2e3d4c-0000-4000-8000-000000000001", "controller", 1,
                                      "blockOwnerDeletion", 1));
        json_object_set_new(meta, "creationTimestamp", json_string("2026-01-01T00:00:00Z"));
        json_object_set_new(meta, "managedFields", managed("kube-controller-manager"));
        json_object_set_new(spec, "volumes",
                            json_pack("[{s:s,s:{s:[{s:{s:I,s:s}},{s:{s:s,s:[{s:s,s:s}]}}],s:i}}]",
                                      "name", "kube-api-access-abcde", "projected", "sources",
                                      "serviceAccountToken", "expirationSeconds", (json_int_t)3607,
                                      "path", "token", "configMap", "name", "kube-root-ca.crt",
                                      "items", "key", "ca.crt", "path", "ca.crt", "defaultMode",
                                      420));
        json_object_set_new(spec, "tolerations",
                            json_pack("[{s:s,s:s,s:s,s:I},{s:s,s:s,s:s,s:I}]", "key",
                                      "node.kubernetes.io/not-ready", "operator", "Exists",
                                      "effect", "NoExecute", "tolerationSeconds", (json_int_t)300,
                                      "key", "node.kubernetes.io/unreachable", "operator", "Exists",
                                      "effect", "NoExecute", "tolerationSeconds", (json_int_t)300));
        json_object_set_new(spec, "serviceAccountName", json_string("default"));
        json_object_set_new(spec, "restartPolicy", json_string("Always"));
        json_object_set_new(st, "hostIP", json_string("10.128.0.2"));
        json_object_set_new(st, "podIP", json_string("10.64.0.17"));
        json_object_set_new(st, "startTime", json_string("2026-01-01T00:00:00Z"));
        json_object_set_new(st, "qosClass", json_string("Burstable"));
        json_object_set_new(st, "conditions",
                            json_pack("[{s:s,s:s},{s:s,s:s},{s:s,s:s},{s:s,s:s}]", "type",
                                      "Initialized", "status", "True", "type", "Ready", "status",
                                      "True", "type", "ContainersReady", "status", "True", "type",
                                      "PodScheduled", "status", "True"));
        json_object_set_new(
            st, "containerStatuses",
            json_pack("[{s:s,s:b,s:i,s:s,s:s,s:s,s:{s:{s:s}}}]", "name", "c", "ready", 1,
                      "restartCount", 0, "image", "registry.example.com/team-1/trainer:v1.2.3",
                      "imageID", "registry.example.com/team-1/trainer@sha256:0123456789abcdef",
                      "containerID", "containerd://0123456789abcdef0123456789abcdef", "state",
                      "running", "startedAt", "2026-01-01T00:00:01Z"));
    }
    return pod;
}

/* GET handler of every collection: a streaming list, a page, or a watch that ends at once. */
static int on_list(void *data, const struct egpu_http_request *req, struct egpu_http_response *resp)
{
    static const char refused[] =
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\",\"message\":"
        "\"ListOptions.meta.k8s.io \\\"\\\" is invalid: sendInitialEvents: Forbidden: "
        "sendInitialEvents is forbidden for watch unless the WatchList feature gate is "
        "enabled\",\"reason\":\"Invalid\",\"code\":422}";
    struct coll *c = data;
    const char *q = req->query, *cont = strstr(q, "continue=");
    size_t page = 0;

    if (strstr(q, "sendInitialEvents=true") != NULL) {
        if (c->stream == NULL) { /* --paged */
            resp->status = 422;
            if (egpu_buf_append(&resp->body, refused, sizeof(refused) - 1) != 0)
                return -ENOMEM;
        } else if (egpu_buf_append(&resp->body, c->stream, c->stream_len) != 0) {
            return -ENOMEM;
        }
        return egpu_http_response_set_type(resp, "application/json");
    }
    /* A watch ends at once, with no event: the informer backs off (0.5 s, doubling) and
     * watches again. Holding it open would hold one of libmicrohttpd's pool threads, and
     * with it every connection that thread serves, lists included. */
    if (strstr(q, "watch=1") != NULL || strstr(q, "watch=true") != NULL)
        return egpu_http_response_set_type(resp, "application/json");
    if (c->pages == NULL) { /* streamed: a paged list is not what the informers should ask */
        resp->status = 500;
        return egpu_buf_append(&resp->body, "{}", 2);
    }
    if (cont != NULL)
        page = (size_t)strtoul(cont + strlen("continue="), NULL, 10);
    if (page >= c->npages) {
        resp->status = 410;
        return egpu_buf_append(&resp->body, "{}", 2);
    }
    if (c->pages[page] != NULL &&
        egpu_buf_append(&resp->body, c->pages[page], strlen(c->pages[page])) != 0)
        return -ENOMEM;
    return egpu_http_response_set_type(resp, "application/json");
}

static int on_version(void *data, const struct egpu_http_request *req,
                      struct egpu_http_response *resp)
{
    static const char v[] = "{\"major\":\"1\",\"minor\":\"31\",\"gitVersion\":\"v1.31.0\"}";

    (void)data, (void)req;
    if (egpu_buf_append(&resp->body, v, sizeof(v) - 1) != 0)
        return -ENOMEM;
    return egpu_http_response_set_type(resp, "application/json");
}

static int free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;

    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

static size_t discard(char *p, size_t size, size_t n, void *data)
{
    (void)p, (void)data;
    return size * n;
}

/* Keep what curl reads into the egpu_buf data. */
static size_t keep_body(char *p, size_t size, size_t n, void *data)
{
    return egpu_buf_append(data, p, size * n) == 0 ? size * n : 0;
}

/* Has the scheduler on health port url (its /metrics) finished a pass of
 * the memo warm (egpu_scheduler_memo_warm_passes_total at least 1)? */
static bool warm_pass_done(CURL *h, const char *url)
{
    struct egpu_buf body;
    const char *at;
    bool done = false;

    egpu_buf_init(&body, 16 << 20);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, keep_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &body);
    if (curl_easy_perform(h) == CURLE_OK &&
        (at = strstr(egpu_buf_str(&body), "\negpu_scheduler_memo_warm_passes_total ")) != NULL)
        done = strtod(at + strlen("\negpu_scheduler_memo_warm_passes_total "), NULL) >= 1;
    egpu_buf_free(&body);
    return done;
}

/* The child's CPU seconds (utime + stime) and VmHWM in MiB. */
static void child_usage(pid_t pid, double *cpu, double *hwm)
{
    char path[64], buf[4096];
    FILE *f;

    *cpu = *hwm = 0;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if ((f = fopen(path, "r")) != NULL) {
        if (fgets(buf, sizeof(buf), f) != NULL) {
            char *p = strrchr(buf, ')');
            unsigned long ut = 0, st = 0;

            if (p != NULL &&
                sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) == 2)
                *cpu = (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
        }
        fclose(f);
    }
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    if ((f = fopen(path, "r")) != NULL) {
        while (fgets(buf, sizeof(buf), f) != NULL)
            if (strncmp(buf, "VmHWM:", 6) == 0)
                *hwm = strtod(buf + 6, NULL) / 1024;
        fclose(f);
    }
}

int main(int argc, char **argv)
{
    const struct egpu_kube_resource *all[] = {&egpu_kube_nodes,
                                              &egpu_kube_gpus,
                                              &egpu_kube_pods,
                                              &egpu_kube_elasticgpus,
                                              &egpu_kube_elasticgpuclaims,
                                              &egpu_kube_elasticgpuclasses,
                                              &egpu_kube_namespaces,
                                              &egpu_kube_resourcequotas,
                                              &egpu_kube_gpubudgets,
                                              &egpu_kube_priorityclasses,
                                              &egpu_kube_resourceslices,
                                              &egpu_kube_resourceclaims,
                                              &egpu_kube_resourceclaimtemplates,
                                              &egpu_kube_deviceclasses};
    enum { NCOLL = sizeof(all) / sizeof(all[0]) };
    struct coll colls[NCOLL] = {0};
    struct egpu_http_config hc = {.bind_addr = "127.0.0.1",
                                  .threads = 16,
                                  .max_resp_bytes = (size_t)4 << 30,
                                  .timeout_s = 600};
    struct egpu_http_server *srv = NULL;
    struct egpu_error err = {0};
    const char *trace_path = NULL, *sched = NULL;
    char trace_buf[4096], sched_buf[4096], kcfg[] = "/tmp/bench_restart_kubeconfig_XXXXXX";
    char url[128], hp[16], vp[16];
    int nodes = 1000, fd, status = 0;
    double fill = 0.7, t0, ready_s = -1, cpu = 0, hwm = 0;
    bool lean = false, paged = false;
    struct tpod *trace = NULL;
    size_t ntrace, npods = 0;
    struct fill_node *fns;
    uint64_t x = 42, asked = 0, target;
    pid_t pid;
    CURL *h;

    for (int i = 1; i < argc; i++) {
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;

        if (strcmp(argv[i], "--lean") == 0)
            lean = true;
        else if (strcmp(argv[i], "--paged") == 0)
            paged = true;
        else if (val != NULL && strcmp(argv[i], "--nodes") == 0 && (i++, 1))
            nodes = (int)strtol(val, NULL, 10);
        else if (val != NULL && strcmp(argv[i], "--fill") == 0 && (i++, 1))
            fill = strtod(val, NULL);
        else if (val != NULL && strcmp(argv[i], "--trace") == 0 && (i++, 1))
            trace_path = val;
        else if (val != NULL && strcmp(argv[i], "--scheduler") == 0 && (i++, 1))
            sched = val;
        else {
            fprintf(stderr, "usage: bench_restart [--nodes N] [--fill F] [--trace FILE] [--lean] "
                            "[--paged] [--scheduler PATH]\n");
            return 2;
        }
    }
    if (nodes < 1 || nodes > 99999 || fill < 0 || fill > 1) {
        fprintf(stderr, "bench_restart: --nodes 1..99999, --fill 0..1\n");
        return 2;
    }
    if (trace_path == NULL)
        trace_path = trace_default(trace_buf, sizeof(trace_buf));
    if (sched == NULL) {
        const char *slash = strrchr(argv[0], '/');

        snprintf(sched_buf, sizeof(sched_buf), "%.*s/src/scheduler/egpu-scheduler",
                 slash ? (int)(slash - argv[0]) : 1, slash ? argv[0] : ".");
        sched = sched_buf;
    }
    if ((ntrace = read_trace(trace_path, &trace)) == 0)
        return 1;
    egpu_log_level = EGPU_LOG_ERROR;
    for (int k = 0; k < NCOLL; k++) {
        colls[k].res = all[k];
        colls[k].items = json_array();
        coll_path(&colls[k]);
    }
    fns = calloc((size_t)nodes, sizeof(*fns));
    if (fns == NULL)
        return 1;
    t0 = now_s();
    for (int i = 0; i < nodes; i++) {
        fns[i] = fill_node_new();
        json_array_append_new(colls[0].items, node_json(i, lean));
        for (int g = 0; g < 8; g++)
            json_array_append_new(colls[1].items, gpu_json(i, g, lean));
    }
    target = (uint64_t)(fill * nodes * 8 * 1000);
    while (asked < target) {
        const struct tpod *t = draw_pod(trace, ntrace, &x);
        char name[32], ann[512];
        int gpus[8], k;

        if (t == NULL)
            continue;
        asked += (uint64_t)t->ngpu * (uint64_t)t->gpu_milli;
        if ((k = place_pod(fns, nodes, t, gpus, &x)) < 0)
            continue;
        snprintf(name, sizeof(name), "gpu-node-%05d", k);
        assigned_text(ann, sizeof(ann), name, k, t, gpus);
        json_array_append_new(colls[2].items,
                              pod_json(t, npods++, name, t->ngpu > 0 ? ann : NULL, lean));
    }
    for (int k = 0; k < NCOLL; k++) {
        if ((paged ? coll_render(&colls[k]) : coll_render_stream(&colls[k])) != 0) {
            fprintf(stderr, "bench_restart: out of memory rendering %s\n", colls[k].path);
            return 1;
        }
    }
    printf("== restart: %d nodes x 8 GPUs, %zu GPU objects, %zu pods (openb mix, %.0f%% of GPU "
           "milli asked), %s objects; lists (%s) rendered in %.1f s: nodes %.0f MiB, GPUs %.0f "
           "MiB, pods %.0f MiB\n",
           nodes, colls[1].objects, colls[2].objects, 100 * fill,
           lean ? "lean" : "apiserver-shaped", paged ? "pages of 500" : "streamed", now_s() - t0,
           colls[0].bytes / 1048576.0, colls[1].bytes / 1048576.0, colls[2].bytes / 1048576.0);
    if (egpu_http_server_new(&hc, &srv, &err) != 0)
        return 1;
    for (int k = 0; k < NCOLL; k++) {
        if (egpu_http_server_route(srv, "GET", colls[k].path, on_list, &colls[k]) != 0)
            return 1;
    }
    if (egpu_http_server_route(srv, "GET", "/version", on_version, NULL) != 0 ||
        egpu_http_server_start(srv, &err) != 0) {
        fprintf(stderr, "bench_restart: server: %s\n", err.msg);
        return 1;
    }
    if ((fd = mkstemp(kcfg)) < 0)
        return 1;
    dprintf(fd,
            "apiVersion: v1\nkind: Config\n"
            "clusters: [{name: b, cluster: {server: 'http://127.0.0.1:%u'}}]\n"
            "users: [{name: u, user: {token: bench}}]\n"
            "contexts: [{name: b, context: {cluster: b, user: u, namespace: elastic-gpu}}]\n"
            "current-context: b\n",
            egpu_http_server_port(srv));
    close(fd);
    snprintf(hp, sizeof(hp), "%d", free_port());
    snprintf(vp, sizeof(vp), "%d", free_port());
    snprintf(url, sizeof(url), "http://127.0.0.1:%s/readyz", hp);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    h = curl_easy_init();
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 1000L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    t0 = now_s();
    pid = fork();
    if (pid == 0) {
        const char *log = getenv("BENCH_RESTART_LOG");
        int null = open(log != NULL ? log : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0600);

        if (null >= 0)
            dup2(null, 2);
        /* The watches here end at once, which the informers count as
         * failures: with the default 30 s, a rebuild longer than that would
         * never turn ready. */
        execl(sched, sched, "--kubeconfig", kcfg, "--leader-elect", "false", "--listen",
              "127.0.0.1", "--port", vp, "--health-listen", "127.0.0.1", "--health-port", hp,
              "--watch-unhealthy-seconds", "3600", (char *)NULL);
        _exit(127);
    }
    while (pid > 0 && now_s() - t0 < 1800) {
        long code = 0;

        if (waitpid(pid, &status, WNOHANG) == pid) {
            fprintf(stderr, "bench_restart: %s exited (status %d) before it was ready\n", sched,
                    status);
            pid = -1;
            break;
        }
        if (curl_easy_perform(h) == CURLE_OK &&
            curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code) == CURLE_OK && code == 200) {
            ready_s = now_s() - t0;
            break;
        }
        usleep(20000);
    }
    if (pid > 0 && ready_s >= 0) {
        /* Then the memo warm's first pass (--memo-warm true): what it adds
         * to the peak RSS. */
        double w0 = now_s(), wcpu = 0, whwm = 0;
        char murl[96];
        bool done = false;

        child_usage(pid, &cpu, &hwm);
        printf("  ready after %.1f s; egpu-scheduler's CPU %.1f s, its peak RSS %.0f MiB; "
               "load %.2f\n",
               ready_s, cpu, hwm, load1());
        fflush(stdout);
        snprintf(murl, sizeof(murl), "http://127.0.0.1:%s/metrics", hp);
        while (!done && now_s() - w0 < 600) {
            usleep(200000);
            done = warm_pass_done(h, murl);
        }
        child_usage(pid, &wcpu, &whwm);
        if (done)
            printf("  memo warm's first pass done %.1f s after ready (%.1f s of CPU); peak RSS "
                   "then %.0f MiB\n",
                   now_s() - w0, wcpu - cpu, whwm);
        else
            printf("  memo warm's first pass not done 600 s after ready; peak RSS %.0f MiB\n",
                   whwm);
    }
    if (pid > 0) {
        if (ready_s < 0)
            child_usage(pid, &cpu, &hwm);
        kill(pid, SIGTERM);
        waitpid(pid, &status, 0);
    }
    curl_easy_cleanup(h);
    curl_global_cleanup();
    egpu_http_server_free(srv);
    unlink(kcfg);
    return ready_s >= 0 ? 0 : 1;
}
