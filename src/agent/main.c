/* agent/main.c - egpu-agent, the node agent: GPU inventory and the kubelet
 * device plugin for elasticgpu.io/gpu-core, or with --mode dra the kubelet's
 * DRA plugin (dra_mode.c runs that mode; main.c only parses its flags). A
 * thin main: options, wiring and the device plugin's main loop; the rest is
 * the egpu_agent library (CMakeLists.txt lists its files).
 *
 * Start: parse flags (exit 2 on bad usage), open the GPU backend (NVML, or
 * fake with --fake-gpus; exit 1 with the backend's message when it cannot be
 * opened), publish one GPU object per card unless --no-api, serve
 * /healthz, /readyz and /metrics, serve the device plugin and register with
 * the kubelet.
 *
 * Threads: the main thread watches the device-plugin dir with inotify and
 * (re)registers: a new kubelet.sock (a kubelet restart wipes every socket
 * there and creates it again) or our own socket gone means serve again and
 * Register again, retried every second until the kubelet answers. The
 * health watcher (health.c) runs on a thread of its own: on a GPU change or
 * every 10 s it lists the cards again, the plugin sends the new device list
 * on ListAndWatch, the inventory republishes and status.used is reported.
 * The main thread also removes allocation dirs no container holds any more
 * (egpu__plugin_cleanup, cleanup.c) at start and every --cleanup-interval
 * seconds; a dir younger than the interval is kept. Every second it also
 * refreshes the metrics (metrics.c), the allocation gauges from the
 * plugin's record of what PreStartContainer wrote (never from a file a
 * container can write, so nothing in the loop opens a path a container can
 * reach). SIGTERM or SIGINT stops both and exits 0 (the server, the probes,
 * the signals and the teardown order are src/net/service.c's, as in every
 * component).
 *
 * Restart: nothing the agent needs lives only in its memory. The kubelet
 * tracks which IDs it gave; the allocation dirs (named by the IDs) and
 * limits.json stay on disk, and the record is read back from the
 * limits.json files of the dirs that are the agent's own (root, 0755);
 * elasticgpu.io/assigned and elasticgpu.io/allocated on the pods steer
 * GetPreferredAllocation. So a restarted agent answers as the old one
 * would, and a PreStartContainer for a restarted container writes the same
 * limits again.
 */
#define _GNU_SOURCE /* inotify, gethostname */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "egpu/agent.h"
#include "egpu/cli.h"
#include "egpu/kube.h"
#include "egpu/log.h"
#include "egpu/net.h"
#include "egpu/api.h"
#include "dra_mode_int.h"
#include "health_int.h"
#include "metrics_int.h"
#include "plugin_int.h"

#define REGISTER_RETRY_MS 1000 /* between Register attempts */

static const char usage[] =
    "Usage: egpu-agent [OPTION]...\n"
    "Elastic GPU's node agent: publishes this node's GPUs and is the kubelet device\n"
    "plugin for elasticgpu.io/gpu-core (100 device IDs per card), or with --mode dra\n"
    "the kubelet's DRA plugin for " EGPU_API_DRA_DRIVER " (publishes the node's\n"
    "ResourceSlice, prepares the claims' shares and their CDI specs).\n"
    "\n"
    "  --mode MODE                 device-plugin or dra (EGPU_AGENT_MODE; default\n"
    "                              device-plugin); one mode per node, chosen by the node\n"
    "                              label " EGPU_LABEL_AGENT_MODE "=" EGPU_LABEL_AGENT_MODE_DRA "\n"
    "  --node-name NAME            this node (NODE_NAME; required with the API server)\n"
    "  --kubeconfig FILE           kubeconfig (EGPU_KUBECONFIG; default $KUBECONFIG, else\n"
    "                              ~/.kube/config, else the in-cluster service account)\n"
    "  --context NAME              kubeconfig context (EGPU_CONTEXT; default: current-context)\n"
    "  --no-api                    no API server: no GPU objects, no pod lookups\n"
    "  --fake-gpus SPEC            fake cards, e.g. 2xA100-80GB (EGPU_FAKE_GPUS)\n"
    "  --fake-health-file FILE     fake cards only: lines \"<index> healthy\" or\n"
    "                              \"<index> unhealthy [reason]\", applied when the file\n"
    "                              changes (EGPU_FAKE_HEALTH_FILE; for tests and demos)\n"
    "  --nvml-library PATH         NVML to load (EGPU_NVML_LIBRARY; default libnvidia-ml.so.1)\n"
    "  --device-plugin-dir DIR     device-plugin mode (EGPU_DEVICE_PLUGIN_DIR; default\n"
    "                              /var/lib/kubelet/device-plugins)\n"
    "  --pod-resources-socket PATH (EGPU_POD_RESOURCES_SOCKET;\n"
    "                              default /var/lib/kubelet/pod-resources/kubelet.sock)\n"
    "  --alloc-root DIR            per-allocation dirs (EGPU_ALLOC_ROOT;\n"
    "                              default /var/lib/elastic-gpu/alloc)\n"
    "  --cleanup-interval N        seconds between removals of allocation dirs that no\n"
    "                              container holds (per PodResources List); also at start\n"
    "                              (EGPU_CLEANUP_INTERVAL; default 60; 0 = never)\n"
    "  --device-list-strategy S    how Allocate names the cards: envvar\n"
    "                              (NVIDIA_VISIBLE_DEVICES), cdi (CDI devices\n"
    "                              nvidia.com/gpu=<uuid>) or device-nodes (/dev/nvidia*)\n"
    "                              (EGPU_DEVICE_LIST_STRATEGY; default envvar)\n"
    "  --dra-socket PATH           dra mode: the DRAPlugin socket (EGPU_DRA_SOCKET;\n"
    "                              default " EGPU_DRA_MODE_SOCKET ")\n"
    "  --plugin-registry-dir DIR   dra mode: the kubelet's plugin registry, where\n"
    "                              " EGPU_API_DRA_DRIVER EGPU_DRA_REG_SOCKET_SUFFIX " is served\n"
    "                              (EGPU_PLUGIN_REGISTRY_DIR; default\n"
    "                              " EGPU_DRA_REGISTRY_DIR ")\n"
    "  --cdi-dir DIR               dra mode: where the claims' CDI specs are written\n"
    "                              (EGPU_CDI_DIR; default " EGPU_CDI_DIR ")\n"
    "  --slice-interval N          dra mode: seconds between periodic publishes of the\n"
    "                              ResourceSlice, beside those on a health change and on\n"
    "                              its deletion (EGPU_SLICE_INTERVAL; 1..86400, default 30)\n"
    "  --interposer PATH           the CUDA interposer on the host (EGPU_INTERPOSER;\n"
    "                              default /usr/local/lib/elastic-gpu/libegpu-vcuda.so)\n"
    "  --context-extra-mib N       MiB of device memory each process's driver takes beyond\n"
    "                              its context as measured (module code loaded lazily at a\n"
    "                              kernel's first launch), charged once per process and card;\n"
    "                              written into each container's vcuda.conf as\n"
    "                              EGPU_VCUDA_CONTEXT_EXTRA_MIB (EGPU_CONTEXT_EXTRA_MIB;\n"
    "                              0..65536, default 0; PyTorch 2.11: 96)\n"
    "  --listen ADDR               HTTP address (EGPU_LISTEN; default 0.0.0.0)\n"
    "  --port N                    HTTP port for /healthz, /readyz, /metrics (EGPU_PORT;\n"
    "                              default 9400; 0 = any free port, logged)\n"
    "  --max-connections N         open HTTP connections at most (EGPU_MAX_CONNECTIONS;\n"
    "                              default 64); one more is refused and counted\n"
    "  --max-per-client N          from one client address at most (EGPU_MAX_PER_CLIENT;\n"
    "                              default 8: the kubelet's probes and a Prometheus\n"
    "                              open one or two each, one pod never holds the port)\n"
    "  --idle-timeout S            close an idle connection after S seconds\n"
    "                              (EGPU_IDLE_TIMEOUT; default 30: probes do not keep\n"
    "                              theirs, a scraper opens a new one)\n"
    "  --request-timeout S         close one whose request has not all come S seconds\n"
    "                              after its first byte, even one sent with the\n"
    "                              connection (EGPU_REQUEST_TIMEOUT; default 5)\n"
    /* --v and --log-level, the same in every server */
    EGPU_CLI_LOG_HELP("                              ") /* egpu/cli.h */
    "  -h, --help                  show this help\n"
    "  --version                   show the version\n";

#define bad(...) egpu_cli_usage_error("egpu-agent", __VA_ARGS__)

enum {
    O_NODE = 256,
    O_NO_API,
    O_FAKE,
    O_FAKE_HEALTH,
    O_NVML,
    O_DP_DIR,
    O_PR_SOCKET,
    O_ALLOC_ROOT,
    O_CLEANUP,
    O_INTERPOSER,
    O_STRATEGY,
    O_CONTEXT_EXTRA,
    O_MODE,
    O_DRA_SOCKET,
    O_REGISTRY_DIR,
    O_CDI_DIR,
    O_SLICE_INTERVAL,
};

struct options {
    struct egpu_cli_server srv; /* the flags every server shares (egpu/cli.h): --listen and
                                   --port are /healthz, /readyz and /metrics */
    const char *node;
    bool no_api;
    const char *fake;
    const char *fake_health;
    const char *nvml;
    const char *dp_dir;
    const char *pr_socket;
    const char *alloc_root;
    unsigned cleanup_s;
    const char *interposer;
    enum egpu_plugin_strategy strategy;
    unsigned ctx_extra_mib; /* EGPU_VCUDA_CONTEXT_EXTRA_MIB for vcuda.conf, 0 = not written */
    bool dra;               /* --mode dra */
    const char *dra_socket, *registry_dir, *cdi_dir; /* dra mode; NULL: their defaults */
    unsigned slice_interval_s;                       /* dra mode */
};

/* Apply one of the agent's own settings (from a flag or a variable named by
 * who); the common ones are egpu_cli_parse_server's. */
static int apply(void *ctx, int opt, const char *v, const char *who)
{
    struct options *o = ctx;
    uint64_t u;

    switch (opt) {
    case O_NODE:
        o->node = v;
        return 0;
    case O_NO_API:
        o->no_api = true;
        return 0;
    case O_FAKE:
        o->fake = v;
        return 0;
    case O_FAKE_HEALTH:
        o->fake_health = v;
        return 0;
    case O_NVML:
        o->nvml = v;
        return 0;
    case O_MODE:
        if (strcmp(v, "device-plugin") != 0 && strcmp(v, "dra") != 0)
            return bad("%s \"%s\": expected device-plugin or dra", who, v);
        o->dra = strcmp(v, "dra") == 0;
        return 0;
    case O_DP_DIR:
    case O_ALLOC_ROOT:
    case O_REGISTRY_DIR:
    case O_CDI_DIR:
        if (v[0] != '/')
            return bad("%s \"%s\": expected an absolute directory", who, v);
        *(opt == O_DP_DIR       ? &o->dp_dir
          : opt == O_ALLOC_ROOT ? &o->alloc_root
          : opt == O_CDI_DIR    ? &o->cdi_dir
                                : &o->registry_dir) = v;
        return 0;
    case O_SLICE_INTERVAL:
        if (egpu_cli_parse_u64(v, 1, EGPU_DRA_MODE_INTERVAL_MAX, &u))
            return bad("%s \"%s\": expected seconds in 1..%d", who, v, EGPU_DRA_MODE_INTERVAL_MAX);
        o->slice_interval_s = (unsigned)u;
        return 0;
    case O_CLEANUP:
        if (egpu_cli_parse_u64(v, 0, 86400, &u))
            return bad("%s \"%s\": expected seconds in 0..86400 (0 = never)", who, v);
        o->cleanup_s = (unsigned)u;
        return 0;
    case O_PR_SOCKET:
    case O_INTERPOSER:
    case O_DRA_SOCKET:
        if (v[0] != '/')
            return bad("%s \"%s\": expected an absolute path", who, v);
        *(opt == O_PR_SOCKET    ? &o->pr_socket
          : opt == O_INTERPOSER ? &o->interposer
                                : &o->dra_socket) = v;
        return 0;
    case O_STRATEGY:
        if (strcmp(v, "envvar") == 0)
            o->strategy = EGPU_PLUGIN_ENVVAR;
        else if (strcmp(v, "cdi") == 0)
            o->strategy = EGPU_PLUGIN_CDI;
        else if (strcmp(v, "device-nodes") == 0)
            o->strategy = EGPU_PLUGIN_DEVICE_NODES;
        else
            return bad("%s \"%s\": expected envvar, cdi or device-nodes", who, v);
        return 0;
    case O_CONTEXT_EXTRA:
        if (egpu_cli_parse_u64(v, 0, EGPU_PLUGIN_CTX_EXTRA_MAX, &u))
            return bad("%s \"%s\": expected MiB in 0..%d (0 = none)", who, v,
                       EGPU_PLUGIN_CTX_EXTRA_MAX);
        o->ctx_extra_mib = (unsigned)u;
        return 0;
    default:
        return bad("unknown setting");
    }
}

/* Fill o from the environment, then the flags. Returns -1 to run, else the
 * exit status (0 after --help or --version, 2 on bad usage). */
static int parse_options(int argc, char **argv, struct options *o)
{
    static const struct egpu_cli_flag flags[] = {
        {"node-name", required_argument, O_NODE, "NODE_NAME"},
        {"no-api", no_argument, O_NO_API, NULL},
        {"fake-gpus", required_argument, O_FAKE, EGPU_FAKE_GPUS_ENV},
        {"fake-health-file", required_argument, O_FAKE_HEALTH, "EGPU_FAKE_HEALTH_FILE"},
        {"nvml-library", required_argument, O_NVML, "EGPU_NVML_LIBRARY"},
        {"device-plugin-dir", required_argument, O_DP_DIR, "EGPU_DEVICE_PLUGIN_DIR"},
        {"pod-resources-socket", required_argument, O_PR_SOCKET, "EGPU_POD_RESOURCES_SOCKET"},
        {"alloc-root", required_argument, O_ALLOC_ROOT, "EGPU_ALLOC_ROOT"},
        {"cleanup-interval", required_argument, O_CLEANUP, "EGPU_CLEANUP_INTERVAL"},
        {"interposer", required_argument, O_INTERPOSER, "EGPU_INTERPOSER"},
        {"device-list-strategy", required_argument, O_STRATEGY, "EGPU_DEVICE_LIST_STRATEGY"},
        {"context-extra-mib", required_argument, O_CONTEXT_EXTRA, "EGPU_CONTEXT_EXTRA_MIB"},
        {"mode", required_argument, O_MODE, "EGPU_AGENT_MODE"},
        {"dra-socket", required_argument, O_DRA_SOCKET, "EGPU_DRA_SOCKET"},
        {"plugin-registry-dir", required_argument, O_REGISTRY_DIR, "EGPU_PLUGIN_REGISTRY_DIR"},
        {"cdi-dir", required_argument, O_CDI_DIR, "EGPU_CDI_DIR"},
        {"slice-interval", required_argument, O_SLICE_INTERVAL, "EGPU_SLICE_INTERVAL"},
    };
    struct egpu_cli_spec spec = {.prog = "egpu-agent",
                                 .usage = usage,
                                 .groups = EGPU_CLI_LISTEN | EGPU_CLI_LIMITS | EGPU_CLI_KUBE |
                                           EGPU_CLI_LOG,
                                 .flags = flags,
                                 .nflags = sizeof(flags) / sizeof(flags[0]),
                                 .apply = apply,
                                 .ctx = o};
    int rc;

    *o = (struct options){.dp_dir = "/var/lib/kubelet/device-plugins",
                          .pr_socket = "/var/lib/kubelet/pod-resources/kubelet.sock",
                          .alloc_root = "/var/lib/elastic-gpu/alloc",
                          .cleanup_s = 60,
                          .slice_interval_s = EGPU_DRA_MODE_INTERVAL_S,
                          .interposer = EGPU_PLUGIN_INTERPOSER};
    egpu_cli_server_defaults(&o->srv);
    o->srv.port = 9400;
    /* Its callers: the kubelet's probes and a Prometheus or two. */
    o->srv.max_connections = 64;
    o->srv.max_per_client = 8;
    o->srv.idle_timeout_s = 30;
    o->srv.request_timeout_s = 5;
    rc = egpu_cli_parse_server(argc, argv, &spec, &o->srv);
    if (rc != -1)
        return rc;
    if (o->dra && o->no_api)
        return bad("--no-api: --mode dra needs the API server (its ResourceSlice and the "
                   "claims it prepares)");
    if (!o->no_api && (o->node == NULL || o->node[0] == '\0'))
        return bad("--node-name (or NODE_NAME) is required unless --no-api is given");
    return -1;
}

/* ------------------------------------------------------------------------ */

struct app {
    struct options o;
    char node[256];
    struct egpu_gpus *gpus;
    struct egpu_kube_config *kcfg;
    struct egpu_kube *kube;
    struct egpu_plugin *plugin;
    struct egpu_service svc; /* /healthz, /readyz, /metrics on --listen:--port */
    struct egpu_metrics *reg;
    struct egpu__agent_metrics met; /* the agent's series in reg (metrics.c) */
    atomic_bool registered;
    struct egpu__health health; /* the health watcher's state (health.c) */
    pthread_t health_thread;
    bool health_started;
};

static bool ready(void *data, char *why, size_t len)
{
    struct app *a = data;

    if (!atomic_load(&a->registered)) {
        snprintf(why, len, "not registered with the kubelet (%s/%s)", a->o.dp_dir,
                 EGPU_PLUGIN_KUBELET);
        return false;
    }
    snprintf(why, len, "ok");
    return true;
}

static long now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int start(void *data, struct egpu_error *err)
{
    struct app *a = data;
    struct egpu_gpus_config gc = {.fake = a->o.fake, .nvml_library = a->o.nvml, .node = a->node};
    struct egpu_service_config sc = {.opts = &a->o.srv, .ready = ready, .data = a};
    struct egpu_plugin_config pc;
    int rc;

    rc = egpu_gpus_open(&gc, &a->gpus, err);
    if (rc)
        return rc;
    a->health =
        (struct egpu__health){.gpus = a->gpus, .node = a->node, .fake_health = a->o.fake_health};
    if (!a->o.no_api) {
        rc = egpu_kube_config_load(a->o.srv.kubeconfig, a->o.srv.context, &a->kcfg, err);
        if (!rc)
            rc = egpu_kube_new(a->kcfg, &a->kube, err);
        if (rc)
            return rc;
        a->health.kube = a->kube;
        egpu__health_publish(&a->health);
    }
    pc = (struct egpu_plugin_config){.dir = a->o.dp_dir,
                                     .alloc_root = a->o.alloc_root,
                                     .interposer = a->o.interposer,
                                     .pod_resources = a->o.pr_socket,
                                     .node = a->node,
                                     .gpus = a->gpus,
                                     .kube = a->kube,
                                     .strategy = a->o.strategy,
                                     .ctx_extra_mib = a->o.ctx_extra_mib};
    rc = egpu__plugin_new(&pc, &a->plugin, err);
    if (!rc)
        rc = egpu_service_metrics_new(NULL, 0, &a->reg, err);
    if (!rc)
        rc = egpu__agent_metrics_register(&a->met, a->reg, err);
    sc.reg = a->reg;
    if (!rc)
        rc = egpu_service_new(&sc, &a->svc, err);
    if (!rc)
        rc = egpu_service_start(&a->svc, err);
    if (rc)
        return rc;
    egpu_log(EGPU_LOG_NOTICE, "serving addr=%s port=%u node=%s backend=%s api=%s", a->o.srv.listen,
             egpu_http_server_port(a->svc.hsrv), a->node,
             egpu_gpus_kind(a->gpus) == EGPU_GPUS_FAKE ? "fake" : "nvml",
             a->kube != NULL ? "true" : "false");
    rc = egpu__plugin_serve(a->plugin, err);
    if (rc)
        return rc;
    a->health.plugin = a->plugin;
    rc = pthread_create(&a->health_thread, NULL, egpu__health_main, &a->health);
    if (rc)
        return egpu_error_set(err, -rc, "health thread: %s", strerror(rc));
    a->health_started = true;
    return 0;
}

/* The main loop: watch the plugin dir, (re)serve and (re)register. */
static void run(void *data)
{
    struct app *a = data;
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    char kubelet[PATH_MAX];
    int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    bool need_register = true, need_serve = false, warned = false;
    long next_try = 0, next_metrics = 0, next_cleanup = 0;

    snprintf(kubelet, sizeof(kubelet), "%s/%s", a->o.dp_dir, EGPU_PLUGIN_KUBELET);
    if (fd < 0 || inotify_add_watch(fd, a->o.dp_dir, IN_CREATE | IN_DELETE | IN_MOVED_TO) < 0)
        egpu_log(EGPU_LOG_WARN, "inotify on %s failed error=\"%s\": polling instead", a->o.dp_dir,
                 strerror(errno));
    while (!egpu_service_stopping()) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        struct egpu_error err = {0};
        struct stat st;
        long now;

        if (poll(&pfd, fd >= 0 ? 1 : 0, 200) > 0) {
            ssize_t len;

            while ((len = read(fd, buf, sizeof(buf))) > 0) {
                for (char *c = buf; c < buf + len;) {
                    const struct inotify_event *ev = (const struct inotify_event *)c;

                    if (ev->len > 0 && strcmp(ev->name, EGPU_PLUGIN_KUBELET) == 0 &&
                        (ev->mask & (IN_CREATE | IN_MOVED_TO))) {
                        egpu_log(EGPU_LOG_NOTICE, "kubelet.sock created: registering again");
                        need_serve = need_register = true;
                        next_try = 0;
                    }
                    c += sizeof(*ev) + ev->len;
                }
            }
        }
        if (!need_serve && !egpu__plugin_socket_exists(a->plugin)) {
            egpu_log(EGPU_LOG_NOTICE, "socket %s/%s gone: serving again", a->o.dp_dir,
                     EGPU_PLUGIN_SOCKET);
            need_serve = need_register = true;
        }
        now = now_ms();
        if (now >= next_metrics) {
            egpu__agent_metrics_refresh(&a->met, a->plugin, atomic_load(&a->registered));
            next_metrics = now + 1000;
        }
        if (a->o.cleanup_s > 0 && now >= next_cleanup) {
            if (egpu__plugin_cleanup(a->plugin, (long)a->o.cleanup_s, NULL, &err) != 0)
                egpu_log(EGPU_LOG_DEBUG, "cleanup skipped error=\"%s\"", err.msg);
            err = (struct egpu_error){0};
            next_cleanup = now_ms() + (long)a->o.cleanup_s * 1000;
        }
        if (!need_register || now < next_try)
            continue;
        if (stat(kubelet, &st) != 0) {
            atomic_store(&a->registered, false);
            continue; /* no kubelet yet: its socket's creation wakes us */
        }
        next_try = now + REGISTER_RETRY_MS;
        atomic_store(&a->registered, false);
        if (need_serve && egpu__plugin_serve(a->plugin, &err) != 0) {
            egpu_log(EGPU_LOG_ERROR, "device plugin not served error=\"%s\"", err.msg);
            continue;
        }
        need_serve = false;
        if (egpu__plugin_register(a->plugin, &err) != 0) {
            if (!warned)
                egpu_log(EGPU_LOG_WARN, "Register failed, retrying error=\"%s\"", err.msg);
            warned = true;
            continue;
        }
        warned = false;
        need_register = false;
        atomic_store(&a->registered, true);
    }
    if (fd >= 0)
        close(fd);
}

static void finish(void *data)
{
    struct app *a = data;

    if (a->health_started)
        pthread_join(a->health_thread, NULL); /* it ends once egpu_service_stopping() */
    egpu_service_stop(&a->svc);
    egpu__plugin_free(a->plugin);
    egpu_service_free(&a->svc);
    egpu_metrics_free(a->reg);
    egpu__agent_metrics_close(&a->met);
    egpu_kube_free(a->kube);
    egpu_kube_config_free(a->kcfg);
    egpu_gpus_free(a->gpus);
}

int main(int argc, char **argv)
{
    static struct app a;
    struct egpu_service_main m = {
        .prog = "egpu-agent", .start = start, .run = run, .finish = finish};
    int status = parse_options(argc, argv, &a.o);

    if (status >= 0)
        return status;
    if (a.o.dra) {
        struct egpu__dra_mode_config dc = {.srv = &a.o.srv,
                                           .node = a.o.node,
                                           .fake = a.o.fake,
                                           .fake_health = a.o.fake_health,
                                           .nvml = a.o.nvml,
                                           .alloc_root = a.o.alloc_root,
                                           .interposer = a.o.interposer,
                                           .cdi_dir = a.o.cdi_dir,
                                           .socket = a.o.dra_socket,
                                           .registry_dir = a.o.registry_dir,
                                           .slice_interval_s = a.o.slice_interval_s,
                                           .ctx_extra_mib = a.o.ctx_extra_mib};

        return egpu__dra_mode_main(&dc);
    }
    m.log_level = a.o.srv.log_level;
    if (a.o.node != NULL && a.o.node[0] != '\0')
        snprintf(a.node, sizeof(a.node), "%s", a.o.node);
    else if (gethostname(a.node, sizeof(a.node) - 1) != 0)
        snprintf(a.node, sizeof(a.node), "localhost");
    return egpu_service_main(&m, &a);
}
