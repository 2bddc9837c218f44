/* tests/unit/test_agent_prestart.c - PreStartContainer and the cleanup,
 * driven through the agent's library (src/agent/prestart.c, container.c,
 * cleanup.c, plugin.c) against the test API server (tests/apiserver/server.py), with
 * the kubelet's PodResources List answered by this file (the
 * egpu__podres_list_fn of the configs) instead of a kubelet.
 *
 * A pod whose container holds 30 IDs on its assigned card gets its
 * allocation dir (0755, shared/ 01777), vcuda.conf and limits.json as the
 * integration tests (tests/integration/test_agent.py) read them, and
 * elasticgpu.io/allocated; a second call marks nothing again. A pod without
 * elasticgpu.io/assigned is refused FAILED_PRECONDITION with the annotation
 * named, IDs on another card than assigned too (with the Warning event),
 * IDs no container holds NOT_FOUND, a PodResources failure UNAVAILABLE; none
 * of them writes a dir. The cleanup removes the dir of a pod that is gone
 * (and its record entry), keeps a held one and one within the grace, and
 * removes nothing when List fails. The mark after Allocate (marker.c) marks
 * a container whose IDs fit its assignment without PreStartContainer, and
 * not one given another card. Through the plugin object and its gRPC
 * socket: PreStartContainer records what it wrote, the cleanup drops it.
 * No memory is left allocated by any test.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "test_kube_server.h"
#include "allocdir_int.h"
#include "allocfs_int.h"
#include "cleanup_int.h"
#include "container_int.h"
#include "deviceplugin/v1beta1/api.pb-c.h"
#include "egpu/agent.h"
#include "egpu/log.h"
#include "marker_int.h"
#include "pb_int.h"
#include "plugin_int.h"
#include "prestart_int.h"
#include "record_int.h"

#define NODE "node-1"
#define NS   "default"

static char root[64];        /* the test's temporary dir */
static char alloc_root[128]; /* <root>/alloc */
static struct egpu_gpus *gpus;
static struct egpu_gpu_info cards[EGPU_NODE_GPUS_MAX];
static size_t ncards;
static long live_at_start;

/* ------------------------------------------------------------------------ */
/* The PodResources List this file answers                                  */

#define HOLDERS_MAX 4

/* One container holding device IDs, as the kubelet would list it. */
struct holder {
    char pod[64];
    char container[64];
    char *ids[EGPU_PLUGIN_IDS_PER_CARD * 2];
    size_t n;
};

static struct holder holders[HOLDERS_MAX];
static size_t nholders;
static int podres_fail; /* nonzero: List fails with this code */
static unsigned podres_calls;

/* The answer: every holder as a pod of NS with one container, its IDs as
 * elasticgpu.io/gpu-core devices; packed and unpacked again with the agent's
 * allocator, as egpu__podres_list hands it over. */
static int fake_podres_list(const char *socket, V1__ListPodResourcesResponse **out,
                            struct egpu_error *err)
{
    V1__ListPodResourcesResponse r = V1__LIST_POD_RESOURCES_RESPONSE__INIT;
    V1__PodResources pr[HOLDERS_MAX], *prp[HOLDERS_MAX];
    V1__ContainerResources cr[HOLDERS_MAX], *crp[HOLDERS_MAX];
    V1__ContainerDevices cd[HOLDERS_MAX], *cdp[HOLDERS_MAX];
    static char ns[] = NS, res[] = EGPU_RES_GPU_CORE;
    uint8_t *buf;
    size_t len;

    (void)socket;
    podres_calls++;
    if (podres_fail)
        return egpu_error_set(err, podres_fail, "PodResources List: the test says no");
    for (size_t i = 0; i < nholders; i++) {
        v1__pod_resources__init(&pr[i]);
        v1__container_resources__init(&cr[i]);
        v1__container_devices__init(&cd[i]);
        cd[i].resource_name = res;
        cd[i].device_ids = holders[i].ids;
        cd[i].n_device_ids = holders[i].n;
        cdp[i] = &cd[i];
        cr[i].name = holders[i].container;
        cr[i].devices = &cdp[i];
        cr[i].n_devices = 1;
        crp[i] = &cr[i];
        pr[i].name = holders[i].pod;
        pr[i].namespace_ = ns;
        pr[i].containers = &crp[i];
        pr[i].n_containers = 1;
        prp[i] = &pr[i];
    }
    r.pod_resources = prp;
    r.n_pod_resources = nholders;
    len = v1__list_pod_resources_response__get_packed_size(&r);
    buf = malloc(len ? len : 1);
    assert_non_null(buf);
    v1__list_pod_resources_response__pack(&r, buf);
    *out = v1__list_pod_resources_response__unpack(&egpu__pb_allocator, len, buf);
    free(buf);
    assert_non_null(*out);
    return 0;
}

/* Let pod/container hold count IDs of card (slots first..first+count-1). */
static struct holder *hold(const char *pod, const char *container, size_t card, unsigned first,
                           unsigned count)
{
    struct holder *h = &holders[nholders++];

    assert_true(nholders <= HOLDERS_MAX);
    snprintf(h->pod, sizeof(h->pod), "%s", pod);
    snprintf(h->container, sizeof(h->container), "%s", container);
    h->n = 0;
    for (unsigned s = first; s < first + count; s++) {
        h->ids[h->n] = malloc(EGPU_PLUGIN_ID_MAX);
        assert_non_null(h->ids[h->n]);
        assert_int_equal(
            egpu__plugin_device_id(cards[card].uuid, s, h->ids[h->n], EGPU_PLUGIN_ID_MAX), 0);
        h->n++;
    }
    return h;
}

static void holders_clear(void)
{
    for (size_t i = 0; i < nholders; i++)
        for (size_t k = 0; k < holders[i].n; k++)
            free(holders[i].ids[k]);
    nholders = 0;
    podres_fail = 0;
    podres_calls = 0;
}

/* ------------------------------------------------------------------------ */

static int group_setup(void **state)
{
    struct egpu_error err = {0};
    json_t *list = NULL;

    (void)state;
    egpu_log_level = -1; /* quiet: the tests provoke every warning */
    if (tks_start(&srv, NULL) != 0)
        return -1;
    /* One request first, so the client's lazily made parts are not counted
     * as a test's leak. */
    if (egpu_kube_list(srv.kc, &egpu_kube_pods, NS, NULL, &list, NULL, NULL) != 0)
        return -1;
    json_decref(list);
    if (egpu_gpus_open_fake("2xA100-80GB", NODE, &gpus, &err) != 0 ||
        egpu_gpus_list(gpus, cards, EGPU_NODE_GPUS_MAX, &ncards, &err) != 0 || ncards != 2) {
        fprintf(stderr, "fake GPUs: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static int group_teardown(void **state)
{
    egpu_gpus_free(gpus);
    return tks_group_teardown(state);
}

static int setup(void **state)
{
    snprintf(root, sizeof(root), "/tmp/egpu-prestart-XXXXXX");
    if (mkdtemp(root) == NULL)
        return -1;
    snprintf(alloc_root, sizeof(alloc_root), "%s/alloc", root);
    holders_clear();
    live_at_start = egpu_alloc_live();
    return tks_reset_test(state);
}

static int teardown(void **state)
{
    (void)state;
    holders_clear();
    assert_int_equal(egpu_alloc_live(), live_at_start);
    return egpu__fs_remove_tree(AT_FDCWD, root, 0) == 0 ? 0 : -1;
}

/* Create pod NS/name on NODE, one container asking core on card; with
 * assigned, elasticgpu.io/assigned says container gets core % and mem MiB
 * there (as the scheduler writes it); extra: more annotations or NULL. */
static void make_pod(const char *name, const char *container, unsigned core, unsigned mem,
                     size_t card, bool assigned, json_t *extra)
{
    struct egpu_error err = {0};
    json_t *ann = extra != NULL ? extra : json_object(), *pod, *out = NULL;
    char core_s[16];

    snprintf(core_s, sizeof(core_s), "%u", core);
    if (assigned) {
        json_t *a =
            json_pack("{s:s,s:[{s:s,s:i,s:i,s:[s]}]}", "node", NODE, "containers", "name",
                      container, "core", (int)core, "memory", (int)mem, "gpus", cards[card].uuid);
        char *text = json_dumps(a, JSON_COMPACT);

        assert_non_null(text);
        assert_int_equal(json_object_set_new(ann, EGPU_ANN_ASSIGNED, json_string(text)), 0);
        free(text);
        json_decref(a);
    }
    pod = json_pack("{s:s,s:s,s:{s:s,s:s,s:o},s:{s:s,s:[{s:s,s:s,s:{s:{s:s},s:{s:s}}}]}}",
                    "apiVersion", "v1", "kind", "Pod", "metadata", "name", name, "namespace", NS,
                    "annotations", ann, "spec", "nodeName", NODE, "containers", "name", container,
                    "image", "busybox", "resources", "requests", EGPU_RES_GPU_CORE, core_s,
                    "limits", EGPU_RES_GPU_CORE, core_s);
    assert_non_null(pod);
    if (egpu_kube_create(srv.kc, &egpu_kube_pods, NS, pod, &out, NULL, &err) != 0)
        fail_msg("create %s: %s", name, err.msg);
    json_decref(pod);
    json_decref(out);
}

/* The pod's elasticgpu.io/allocated, decoded (new reference), or NULL. */
static json_t *allocated_of(const char *name)
{
    struct egpu_error err = {0};
    json_t *pod = NULL, *doc = NULL;
    const json_t *v;

    if (egpu_kube_get(srv.kc, &egpu_kube_pods, NS, name, &pod, NULL, &err) != 0)
        fail_msg("get %s: %s", name, err.msg);
    v = json_object_get(json_object_get(json_object_get(pod, "metadata"), "annotations"),
                        EGPU_ANN_ALLOCATED);
    if (json_is_string(v))
        doc = json_loads(json_string_value(v), 0, NULL);
    json_decref(pod);
    return doc;
}

static struct egpu__container_config config(pthread_mutex_t *lock)
{
    return (struct egpu__container_config){.kube = srv.kc,
                                           .node = NODE,
                                           .pod_resources = "/nonexistent/kubelet.sock",
                                           .podres_list = fake_podres_list,
                                           .alloc_root = alloc_root,
                                           .allocated_lock = lock};
}

/* The text of <dir>/<name> into buf (len bytes). */
static void read_text(const char *dir, const char *name, char *buf, size_t len)
{
    char path[512];
    FILE *f;
    size_t n;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "r");
    if (f == NULL)
        fail_msg("%s: %s", path, strerror(errno));
    n = fread(buf, 1, len - 1, f);
    buf[n] = '\0';
    fclose(f);
}

/* The lines of text that are no comment, joined by '|'. */
static void settings_of(const char *text, char *out, size_t len)
{
    size_t used = 0;

    out[0] = '\0';
    for (const char *line = text; *line != '\0';) {
        const char *end = strchr(line, '\n');
        size_t ll = end != NULL ? (size_t)(end - line) : strlen(line);

        if (ll > 0 && line[0] != '#') {
            int w = snprintf(out + used, len - used, "%s%.*s", used ? "|" : "", (int)ll, line);

            assert_true(w > 0 && (size_t)w < len - used);
            used += (size_t)w;
        }
        line += ll + (end != NULL);
    }
}

/* Whether the allocation root is missing or holds no entry. */
static bool alloc_root_empty(void)
{
    DIR *d = opendir(alloc_root);
    const struct dirent *e;
    bool empty = true;

    if (d == NULL)
        return errno == ENOENT;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            empty = false;
    closedir(d);
    return empty;
}

/* ------------------------------------------------------------------------ */

/* (a) An assigned container's IDs: its allocation dir with vcuda.conf and
 * limits.json as test_agent.py's test_shared_container_follows_assignment
 * reads them, the record of it, and elasticgpu.io/allocated. */
static void test_prestart_writes_allocation_dir(void **state)
{
    pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    struct egpu__container_config cfg = config(&lock);
    struct egpu_grpc_status st = {0};
    struct egpu__alloc_limits wrote = {0};
    struct holder *h;
    bool mismatch = false, marked = false;
    char dir[256], text[4096], settings[1024], want[1024];
    struct stat sb;
    json_t *limits, *doc, *expect;

    (void)state;
    make_pod("shared", "main", 30, 4096, 1, true, NULL);
    h = hold("shared", "main", 1, 0, 30);
    assert_int_equal(
        egpu__prestart_run(&cfg, cards, ncards, h->ids, h->n, &mismatch, &marked, &wrote, &st), 0);
    assert_false(mismatch);
    assert_true(marked);
    assert_int_equal(podres_calls, 1);

    assert_int_equal(egpu__allocdir_path(alloc_root, h->ids, h->n, dir, sizeof(dir)), 0);
    assert_int_equal(stat(dir, &sb), 0);
    assert_true(S_ISDIR(sb.st_mode));
    assert_int_equal(sb.st_mode & 07777, 0755);
    assert_int_equal(sb.st_uid, geteuid());
    snprintf(text, sizeof(text), "%s/%s", dir, EGPU_ALLOCDIR_SHARED_DIR);
    assert_int_equal(stat(text, &sb), 0);
    assert_true(S_ISDIR(sb.st_mode));
    assert_int_equal(sb.st_mode & 07777, 01777);
    for (int i = 0; i < 2; i++) {
        snprintf(text, sizeof(text), "%s/%s", dir,
                 i ? EGPU_ALLOCDIR_LIMITS_FILE : EGPU_ALLOCDIR_VCUDA_FILE);
        assert_int_equal(lstat(text, &sb), 0);
        assert_true(S_ISREG(sb.st_mode));
        assert_int_equal(sb.st_mode & 07777, 0644);
    }

    read_text(dir, EGPU_ALLOCDIR_VCUDA_FILE, text, sizeof(text));
    settings_of(text, settings, sizeof(settings));
    snprintf(want, sizeof(want),
             "EGPU_VCUDA_GPUS=%s|EGPU_VCUDA_MEMORY_MIB=4096|EGPU_VCUDA_CORE=30|"
             "EGPU_VCUDA_CORE_LIMIT=30",
             cards[1].uuid);
    assert_string_equal(settings, want);

    read_text(dir, EGPU_ALLOCDIR_LIMITS_FILE, text, sizeof(text));
    limits = json_loads(text, 0, NULL);
    expect = json_pack("{s:s,s:s,s:s,s:[s],s:i,s:i}", "pod", "shared", "namespace", NS, "container",
                       "main", "gpus", cards[1].uuid, "core", 30, "memory", 4096);
    assert_true(json_equal(limits, expect));
    json_decref(limits);
    json_decref(expect);

    /* The record: what the metrics read, never the file. */
    assert_string_equal(wrote.dir, dir + strlen(alloc_root) + 1);
    assert_string_equal(wrote.ns, NS);
    assert_string_equal(wrote.pod, "shared");
    assert_string_equal(wrote.container, "main");
    assert_int_equal(wrote.ngpus, 1);
    assert_string_equal(wrote.gpus[0], cards[1].uuid);
    assert_int_equal(wrote.core_pct, 30);
    assert_int_equal(wrote.mem_mib, 4096);

    doc = allocated_of("shared");
    expect = json_pack("{s:{s:{s:[s],s:i,s:i}}}", "containers", "main", "gpus", cards[1].uuid,
                       "core", 30, "memory", 4096);
    assert_true(json_equal(doc, expect));
    json_decref(doc);
    json_decref(expect);

    /* Again (a restarted container): the same files, no second patch. */
    marked = true;
    assert_int_equal(
        egpu__prestart_run(&cfg, cards, ncards, h->ids, h->n, &mismatch, &marked, &wrote, &st), 0);
    assert_false(marked);
    read_text(dir, EGPU_ALLOCDIR_VCUDA_FILE, text, sizeof(text));
    settings_of(text, settings, sizeof(settings));
    assert_string_equal(settings, want);
}

/* With --context-extra-mib and elasticgpu.io/gpu-core-limit: both reach
 * vcuda.conf (test_context_extra_mib_reaches_vcuda_conf, the burst test). */
static void test_prestart_core_limit_and_context_extra(void **state)
{
    struct egpu__container_config cfg = config(NULL);
    struct egpu_grpc_status st = {0};
    struct holder *h;
    char dir[256], text[4096], settings[1024], want[1024];

    (void)state;
    cfg.ctx_extra_mib = 96;
    make_pod("burst", "main", 30, 4096, 0, true, json_pack("{s:s}", EGPU_ANN_CORE_LIMIT, "80"));
    h = hold("burst", "main", 0, 40, 30);
    assert_int_equal(egpu__prestart_run(&cfg, cards, ncards, h->ids, h->n, NULL, NULL, NULL, &st),
                     0);
    assert_int_equal(egpu__allocdir_path(alloc_root, h->ids, h->n, dir, sizeof(dir)), 0);
    read_text(dir, EGPU_ALLOCDIR_VCUDA_FILE, text, sizeof(text));
    assert_non_null(strstr(text, "\nEGPU_VCUDA_CONTEXT_EXTRA_MIB=96\n"));
    settings_of(text, settings, sizeof(settings));
    snprintf(want, sizeof(want),
             "EGPU_VCUDA_GPUS=%s|EGPU_VCUDA_MEMORY_MIB=4096|EGPU_VCUDA_CORE=30|"
             "EGPU_VCUDA_CORE_LIMIT=80|EGPU_VCUDA_CONTEXT_EXTRA_MIB=96",
             cards[0].uuid);
    assert_string_equal(settings, want);
}

/* (b) A pod the scheduler did not place (no elasticgpu.io/assigned): refused
 * FAILED_PRECONDITION, the annotation named, nothing written or marked. */
static void test_prestart_refuses_unassigned(void **state)
{
    struct egpu__container_config cfg = config(NULL);
    struct egpu_grpc_status st = {0};
    struct egpu__alloc_limits wrote = {0};
    struct holder *h;
    bool mismatch = false, marked = false;
    json_t *doc;

    (void)state;
    make_pod("stray", "main", 30, 4096, 0, false, NULL);
    h = hold("stray", "main", 0, 0, 30);
    assert_true(
        egpu__prestart_run(&cfg, cards, ncards, h->ids, h->n, &mismatch, &marked, &wrote, &st) < 0);
    assert_int_equal(st.code, GRPC_STATUS_FAILED_PRECONDITION);
    assert_non_null(strstr(st.msg, "pod " NS "/stray has no " EGPU_ANN_ASSIGNED));
    assert_non_null(strstr(st.msg, "was it scheduled by elastic-gpu-scheduler?"));
    assert_false(mismatch);
    assert_false(marked);
    assert_string_equal(wrote.dir, "");
    assert_true(alloc_root_empty());
    doc = allocated_of("stray");
    assert_null(doc);
}

/* IDs on another card than assigned: FAILED_PRECONDITION naming both,
 * *mismatch set, a Warning event on the pod, nothing written. */
static void test_prestart_refuses_other_card(void **state)
{
    struct egpu__container_config cfg = config(NULL);
    struct egpu_grpc_status st = {0};
    struct egpu_kube_list_opts lo = {.field_selector = "involvedObject.name=wrong"};
    struct holder *h;
    bool mismatch = false;
    json_t *events = NULL;

    (void)state;
    make_pod("wrong", "main", 30, 4096, 0, true, NULL);
    h = hold("wrong", "main", 1, 0, 30); /* the kubelet gave the other card */
    assert_true(egpu__prestart_run(&cfg, cards, ncards, h->ids, h->n, &mismatch, NULL, NULL, &st) <
                0);
    assert_int_equal(st.code, GRPC_STATUS_FAILED_PRECONDITION);
    assert_non_null(strstr(st.msg, cards[0].uuid));
    assert_non_null(strstr(st.msg, "on another GPU"));
    assert_true(mismatch);
    assert_true(alloc_root_empty());
    assert_int_equal(egpu_kube_list(srv.kc, &egpu_kube_events, NS, &lo, &events, NULL, NULL), 0);
    assert_int_equal(json_array_size(json_object_get(events, "items")), 1);
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(json_object_get(events, "items"), 0), "reason")),
                        EGPU_PRESTART_EVENT_REASON);
    json_decref(events);
}

/* IDs nobody holds: NOT_FOUND; a failing PodResources: UNAVAILABLE. */
static void test_prestart_owner_unknown_or_kubelet_down(void **state)
{
    struct egpu__container_config cfg = config(NULL);
    struct egpu_grpc_status st = {0};
    struct holder *h;

    (void)state;
    make_pod("lost", "main", 30, 4096, 0, true, NULL);
    h = hold("lost", "main", 0, 0, 30);
    h->n = 29; /* the kubelet lists one ID fewer than the call names */
    assert_true(egpu__prestart_run(&cfg, cards, ncards, h->ids, 30, NULL, NULL, NULL, &st) < 0);
    h->n = 30;
    assert_int_equal(st.code, GRPC_STATUS_NOT_FOUND);
    assert_non_null(strstr(st.msg, "no container holds device ID"));
    podres_fail = -EAGAIN;
    assert_true(egpu__prestart_run(&cfg, cards, ncards, h->ids, h->n, NULL, NULL, NULL, &st) < 0);
    assert_int_equal(st.code, GRPC_STATUS_UNAVAILABLE);
    assert_non_null(strstr(st.msg, "the test says no"));
    assert_true(alloc_root_empty());
}

/* The mark right after Allocate (marker.c), with no PreStartContainer: the
 * container whose IDs lie on its assigned card is marked allocated, the one
 * given another card is not (left to PreStartContainer, which refuses it),
 * and the marker writes no file. */
static void test_marker_marks_without_prestart(void **state)
{
    pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    struct egpu__container_config cfg = config(&lock);
    struct egpu__marker_stats ms = {0};
    struct egpu__marker *m = NULL;
    struct holder *early, *astray;
    json_t *doc, *expect;

    (void)state;
    make_pod("early", "main", 30, 4096, 1, true, NULL);
    make_pod("astray", "main", 40, 2048, 0, true, NULL);
    early = hold("early", "main", 1, 0, 30);
    astray = hold("astray", "main", 1, 30, 40); /* the kubelet gave the other card */
    assert_int_equal(egpu__marker_new(&cfg, &m), 0);
    egpu__marker_add(m, early->ids, early->n);
    egpu__marker_add(m, astray->ids, astray->n);
    for (int i = 0; i < 300 && ms.marked + ms.failed < 2; i++) {
        struct timespec ts = {.tv_nsec = 10 * 1000 * 1000};

        nanosleep(&ts, NULL);
        egpu__marker_stats(m, &ms);
    }
    egpu__marker_free(m);
    assert_int_equal(ms.marked, 1);
    assert_int_equal(ms.failed, 1);
    assert_int_equal(ms.gave_up, 0);
    assert_int_equal(ms.dropped, 0);

    doc = allocated_of("early");
    expect = json_pack("{s:{s:{s:[s],s:i,s:i}}}", "containers", "main", "gpus", cards[1].uuid,
                       "core", 30, "memory", 4096);
    assert_true(json_equal(doc, expect));
    json_decref(doc);
    json_decref(expect);
    doc = allocated_of("astray");
    assert_null(doc);
    assert_true(alloc_root_empty());
}

/* Count the record's entries. */
static void count_entry(void *data, const struct egpu__alloc_limits *l)
{
    (void)l;
    (*(size_t *)data)++;
}

/* (c) The cleanup: a held dir stays, a dir within the grace stays, nothing
 * goes while List fails, and the dir of a pod that is gone goes with its
 * record entry. */
static void test_cleanup_frees_gone_pods_dir(void **state)
{
    pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    struct egpu__container_config cfg = config(NULL);
    struct egpu__record rec;
    struct egpu__cleanup_config cc = {.alloc_root = alloc_root,
                                      .pod_resources = "/nonexistent/kubelet.sock",
                                      .podres_list = fake_podres_list,
                                      .alloc_lock = &lock,
                                      .record = &rec};
    struct egpu_grpc_status st = {0};
    struct egpu_error err = {0};
    struct egpu__alloc_limits wrote = {0}, kept = {0};
    struct holder *gone, *held;
    char gone_dir[256], held_dir[256], other[256];
    struct stat sb;
    bool failed = false;
    unsigned removed = 99;
    size_t n = 0;

    (void)state;
    egpu__record_init(&rec);
    make_pod("done", "main", 30, 4096, 0, true, NULL);
    make_pod("running", "main", 30, 4096, 1, true, NULL);
    gone = hold("done", "main", 0, 0, 30);
    held = hold("running", "main", 1, 0, 30);
    assert_int_equal(
        egpu__prestart_run(&cfg, cards, ncards, gone->ids, gone->n, NULL, NULL, &wrote, &st), 0);
    assert_int_equal(egpu__record_put(&rec, &wrote), 0);
    assert_int_equal(
        egpu__prestart_run(&cfg, cards, ncards, held->ids, held->n, NULL, NULL, &kept, &st), 0);
    assert_int_equal(egpu__record_put(&rec, &kept), 0);
    assert_int_equal(
        egpu__allocdir_path(alloc_root, gone->ids, gone->n, gone_dir, sizeof(gone_dir)), 0);
    assert_int_equal(
        egpu__allocdir_path(alloc_root, held->ids, held->n, held_dir, sizeof(held_dir)), 0);
    /* Not an allocation dir's name: never touched. */
    snprintf(other, sizeof(other), "%s/not-ours", alloc_root);
    assert_int_equal(mkdir(other, 0755), 0);

    /* Both held: nothing goes. */
    assert_int_equal(egpu__cleanup_run(&cc, 0, &failed, &removed, &err), 0);
    assert_int_equal(removed, 0);
    assert_false(failed);

    /* The pod "done" is gone from the kubelet's list. */
    holders_clear();
    held = hold("running", "main", 1, 0, 30);

    /* List fails: nothing goes, the failure is remembered. */
    podres_fail = -EAGAIN;
    assert_int_equal(egpu__cleanup_run(&cc, 0, &failed, &removed, &err), -EAGAIN);
    assert_true(failed);
    assert_int_equal(stat(gone_dir, &sb), 0);
    podres_fail = 0;

    /* Within the grace (just written): kept. */
    assert_int_equal(egpu__cleanup_run(&cc, 3600, &failed, &removed, &err), 0);
    assert_false(failed);
    assert_int_equal(removed, 0);
    assert_int_equal(stat(gone_dir, &sb), 0);

    /* Past it: the gone pod's dir and its record entry go, the rest stays. */
    assert_int_equal(egpu__cleanup_run(&cc, 0, &failed, &removed, &err), 0);
    assert_int_equal(removed, 1);
    assert_int_equal(stat(gone_dir, &sb), -1);
    assert_int_equal(errno, ENOENT);
    assert_int_equal(stat(held_dir, &sb), 0);
    assert_int_equal(stat(other, &sb), 0);
    egpu__record_each(&rec, count_entry, &n);
    assert_int_equal(n, 1);
    assert_int_equal(rec.n, 1);
    assert_string_equal(rec.items[0].pod, "running");
    egpu__record_close(&rec);
}

/* What the plugin recorded: the pod names, joined by ','. */
static void names_of(void *data, const struct egpu__alloc_limits *l)
{
    char *out = data;
    size_t used = strlen(out);

    snprintf(out + used, 256 - used, "%s%s", used ? "," : "", l->pod);
}

/* The whole PreStartContainer verb through the plugin object: the gRPC call
 * on its socket, the record it keeps, the counters, and the plugin's
 * cleanup dropping the dir once the pod is gone. */
static void test_plugin_prestart_and_cleanup(void **state)
{
    struct egpu_plugin_config pc = {0};
    struct egpu_plugin *p = NULL;
    struct egpu_plugin_stats ps;
    struct egpu_error err = {0};
    V1beta1__PreStartContainerRequest r = V1BETA1__PRE_START_CONTAINER_REQUEST__INIT;
    struct egpu_buf msg, reply;
    char dp_dir[128], socket[192], dir[256], names[256] = "";
    struct holder *h;
    struct stat sb;
    unsigned removed = 0;

    (void)state;
    snprintf(dp_dir, sizeof(dp_dir), "%s/dp", root);
    snprintf(socket, sizeof(socket), "%s/%s", dp_dir, EGPU_PLUGIN_SOCKET);
    pc = (struct egpu_plugin_config){.dir = dp_dir,
                                     .alloc_root = alloc_root,
                                     .pod_resources = "/nonexistent/kubelet.sock",
                                     .podres_list = fake_podres_list,
                                     .node = NODE,
                                     .gpus = gpus,
                                     .kube = srv.kc};
    make_pod("viaplugin", "main", 30, 4096, 1, true, NULL);
    h = hold("viaplugin", "main", 1, 10, 30);
    assert_int_equal(egpu__plugin_new(&pc, &p, &err), 0);
    assert_int_equal(egpu__plugin_serve(p, &err), 0);

    r.devices_ids = h->ids;
    r.n_devices_ids = h->n;
    egpu_buf_init(&msg, 1 << 16);
    egpu_buf_init(&reply, 1 << 16);
    assert_int_equal(egpu__pb_pack(&r.base, &msg), 0);
    if (egpu_grpc_call(socket, "/v1beta1.DevicePlugin/PreStartContainer", msg.data, msg.len, 10000,
                       &reply, &err) != 0)
        fail_msg("PreStartContainer: %s", err.msg);
    egpu_buf_free(&msg);
    egpu_buf_free(&reply);

    egpu__plugin_stats(p, &ps);
    assert_int_equal(ps.prestarts, 1);
    assert_int_equal(ps.marked_prestart, 1);
    assert_int_equal(ps.mismatches, 0);
    egpu__plugin_each_limits(p, names_of, names);
    assert_string_equal(names, "viaplugin");
    assert_int_equal(egpu__allocdir_path(alloc_root, h->ids, h->n, dir, sizeof(dir)), 0);
    assert_int_equal(stat(dir, &sb), 0);

    /* Held: kept. Gone: removed with its record entry. */
    assert_int_equal(egpu__plugin_cleanup(p, 0, &removed, &err), 0);
    assert_int_equal(removed, 0);
    holders_clear();
    assert_int_equal(egpu__plugin_cleanup(p, 0, &removed, &err), 0);
    assert_int_equal(removed, 1);
    assert_int_equal(stat(dir, &sb), -1);
    names[0] = '\0';
    egpu__plugin_each_limits(p, names_of, names);
    assert_string_equal(names, "");
    egpu__plugin_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_prestart_writes_allocation_dir, setup, teardown),
        cmocka_unit_test_setup_teardown(test_prestart_core_limit_and_context_extra, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_prestart_refuses_unassigned, setup, teardown),
        cmocka_unit_test_setup_teardown(test_prestart_refuses_other_card, setup, teardown),
        cmocka_unit_test_setup_teardown(test_prestart_owner_unknown_or_kubelet_down, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_marker_marks_without_prestart, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cleanup_frees_gone_pods_dir, setup, teardown),
        cmocka_unit_test_setup_teardown(test_plugin_prestart_and_cleanup, setup, teardown),
    };

    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
