/* webhook/options.c - egpu-webhook's flags and environment variables.
 *
 * Every setting has a flag and an EGPU_* variable; the flag wins. A bad
 * value names the flag (or variable) and the allowed values, and the
 * process exits 2 before touching the network.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "egpu/cli.h"
#include "egpu/log.h"
#include "egpu/net.h"
#include "webhook_int.h"

static const char usage[] =
    "Usage: egpu-webhook [OPTION]...\n"
    "Elastic GPU's admission webhook: refuses bad GPU requests with a clear message,\n"
    "rewrites other GPU-sharing systems' names into elasticgpu.io ones, and sends GPU\n"
    "pods to the Elastic GPU scheduler (AdmissionReview admission.k8s.io/v1 over HTTPS).\n"
    "\n"
    "  --listen ADDR           address of the webhook (EGPU_LISTEN; default 0.0.0.0)\n"
    "  --port N                its HTTPS port (EGPU_PORT; default 9443; 0 = any free\n"
    "                          port, logged)\n"
    "  --health-listen ADDR    address of plain-HTTP /healthz, /readyz and /metrics\n"
    "                          (EGPU_HEALTH_LISTEN; default 0.0.0.0)\n"
    "  --health-port N         their port (EGPU_HEALTH_PORT; default 9444; 0 = any free\n"
    "                          port, logged); must differ from --port\n"
    "  --tls-cert FILE         PEM certificate (chain) of the webhook (EGPU_TLS_CERT;\n"
    "                          required); read again when the file changes\n"
    "  --tls-key FILE          its PEM private key (EGPU_TLS_KEY; required)\n"
    "  --kubeconfig FILE       kubeconfig (EGPU_KUBECONFIG; default $KUBECONFIG, else\n"
    "                          ~/.kube/config, else the in-cluster service account)\n"
    "  --context NAME          kubeconfig context (EGPU_CONTEXT; default: current-context)\n"
    "  --scheduler-name NAME   spec.schedulerName given to GPU pods that name none or\n"
    "                          default-scheduler (EGPU_SCHEDULER_NAME; default\n"
    "                          elastic-gpu-scheduler)\n"
    "  --set-scheduler-name BOOL\n"
    "                          set it at all (EGPU_SET_SCHEDULER_NAME; default true;\n"
    "                          false when the extender runs in the main kube-scheduler)\n"
    "  --compat-nvidia BOOL    rewrite HAMi's nvidia.com/gpucores and nvidia.com/gpumem\n"
    "                          on /mutate too, cluster-wide (EGPU_COMPAT_NVIDIA; default\n"
    "                          false: only on /mutate-nvidia)\n"
    "  --aliyun-gpu-mem-unit U the unit of aliyun.com/gpu-mem: MiB or GiB\n"
    "                          (EGPU_ALIYUN_GPU_MEM_UNIT; default GiB)\n"
    "  --memory-only-core N    elasticgpu.io/gpu-core percent given to a container that\n"
    "                          asked GPU memory only, 1..99 (EGPU_MEMORY_ONLY_CORE;\n"
    "                          default 1)\n"
    "  --scheduler-user NAME   the only user that may write elasticgpu.io/assigned\n"
    "                          (EGPU_SCHEDULER_USER; default\n"
    "                          " EGPU_WEBHOOK_SCHEDULER_USER ")\n"
    "  --agent-user NAME       the only user that may write elasticgpu.io/allocated\n"
    "                          (EGPU_AGENT_USER; default\n"
    "                          " EGPU_WEBHOOK_AGENT_USER ")\n"
    "  --watch-unhealthy-seconds S\n"
    "                          not ready while the list and watch of GPU objects has\n"
    "                          kept failing this long (EGPU_WATCH_UNHEALTHY_SECONDS;\n"
    "                          default 30)\n"
    "  --max-connections N     open connections per port at most (EGPU_MAX_CONNECTIONS;\n"
    "                          default 1024)\n"
    "  --max-per-client N      open connections from one address to the health port\n"
    "                          at most (EGPU_MAX_PER_CLIENT; default 32)\n"
    "  --idle-timeout S        close a connection idle this long (EGPU_IDLE_TIMEOUT;\n"
    "                          default 120)\n"
    "  --request-timeout S     close a connection whose request has not all come this\n"
    "                          long after its first byte (EGPU_REQUEST_TIMEOUT; default 10)\n"
    "  --threads N             HTTPS threads (EGPU_THREADS; default 2)\n"
    "  --max-body BYTES        largest AdmissionReview (EGPU_MAX_BODY; default 8388608)\n"
    "  --log-level L           error, warn, info, debug (EGPU_LOG_LEVEL; default info)\n"
    "  --v N                   klog verbosity 0..10: 4 and above is debug (EGPU_V)\n"
    "  -h, --help              show this help\n"
    "  --version               show the version\n"
    "\n"
    "Serves POST /mutate, /mutate-nvidia and /validate, and GET /healthz and /readyz,\n"
    "over HTTPS on --listen:--port; GET /healthz, /readyz (ready once the GPU objects\n"
    "are listed and while their watch has not failed longer than\n"
    "--watch-unhealthy-seconds) and /metrics (Prometheus text format 0.0.4) over\n"
    "HTTP on --health-listen:--health-port.\n";

#define bad(...) egpu_cli_usage_error("egpu-webhook", __VA_ARGS__)

enum {
    O_LISTEN = 256,
    O_PORT,
    O_HEALTH_LISTEN,
    O_HEALTH_PORT,
    O_CERT,
    O_KEY,
    O_KUBECONFIG,
    O_CONTEXT,
    O_SCHED_NAME,
    O_SET_SCHED_NAME,
    O_COMPAT_NVIDIA,
    O_ALIYUN_UNIT,
    O_MEM_ONLY_CORE,
    O_SCHED_USER,
    O_AGENT_USER,
    O_WATCH_UNHEALTHY,
    O_MAX_CONN,
    O_MAX_PER_CLIENT,
    O_IDLE_TIMEOUT,
    O_REQUEST_TIMEOUT,
    O_THREADS,
    O_MAX_BODY,
    O_LOG,
    O_V,
    O_VERSION,
};

static int apply_name(const char *who, const char *v, const char *what, const char **out)
{
    if (v[0] == '\0' || strlen(v) >= EGPU_K8S_NAME_MAX)
        return bad("%s \"%s\": expected %s of 1..%d characters", who, v, what,
                   EGPU_K8S_NAME_MAX - 1);
    *out = v;
    return 0;
}

/* Apply one setting (from a flag or a variable named by who). */
static int apply(void *ctx, int opt, const char *v, const char *who)
{
    struct wh_options *o = ctx;
    uint64_t u;

    switch (opt) {
    case O_LISTEN:
        o->listen = v;
        return 0;
    case O_HEALTH_LISTEN:
        o->health_listen = v;
        return 0;
    case O_PORT:
    case O_HEALTH_PORT:
        if (egpu_cli_parse_u64(v, 0, 65535, &u))
            return bad("%s \"%s\": expected a port in 0..65535 (0 = any free port)", who, v);
        *(opt == O_PORT ? &o->port : &o->health_port) = (unsigned)u;
        return 0;
    case O_CERT:
        o->tls_cert = v;
        return 0;
    case O_KEY:
        o->tls_key = v;
        return 0;
    case O_KUBECONFIG:
        o->kubeconfig = v;
        return 0;
    case O_CONTEXT:
        o->context = v;
        return 0;
    case O_SCHED_NAME:
        return apply_name(who, v, "a scheduler name", &o->cfg.scheduler_name);
    case O_SCHED_USER:
        return apply_name(who, v, "a user name", &o->cfg.scheduler_user);
    case O_AGENT_USER:
        return apply_name(who, v, "a user name", &o->cfg.agent_user);
    case O_SET_SCHED_NAME:
    case O_COMPAT_NVIDIA:
        if (egpu_cli_parse_bool(v, opt == O_SET_SCHED_NAME ? &o->cfg.set_scheduler_name
                                                           : &o->cfg.compat_nvidia))
            return bad("%s \"%s\": expected true or false", who, v);
        return 0;
    case O_ALIYUN_UNIT:
        if (strcmp(v, "MiB") == 0)
            o->cfg.aliyun_mem_mib = 1;
        else if (strcmp(v, "GiB") == 0)
            o->cfg.aliyun_mem_mib = 1024;
        else
            return bad("%s \"%s\": expected MiB or GiB", who, v);
        return 0;
    case O_MEM_ONLY_CORE:
        if (egpu_cli_parse_u64(v, 1, 99, &u))
            return bad("%s \"%s\": expected a gpu-core percent in 1..99", who, v);
        o->cfg.memory_only_core = (uint32_t)u;
        return 0;
    case O_WATCH_UNHEALTHY:
        if (egpu_cli_parse_u64(v, 1, 3600, &u))
            return bad("%s \"%s\": expected seconds, 1..3600", who, v);
        o->watch_unhealthy_ms = (long)u * 1000;
        return 0;
    case O_MAX_CONN:
        return egpu_cli_http_limit("egpu-webhook", who, v, false, &o->max_connections);
    case O_MAX_PER_CLIENT:
        return egpu_cli_http_limit("egpu-webhook", who, v, false, &o->max_per_client);
    case O_IDLE_TIMEOUT:
        return egpu_cli_http_limit("egpu-webhook", who, v, true, &o->idle_timeout_s);
    case O_REQUEST_TIMEOUT:
        return egpu_cli_http_limit("egpu-webhook", who, v, true, &o->request_timeout_s);
    case O_THREADS:
        if (egpu_cli_parse_u64(v, 1, 64, &u))
            return bad("%s \"%s\": expected 1..64 threads", who, v);
        o->threads = (unsigned)u;
        return 0;
    case O_MAX_BODY:
        if (egpu_cli_parse_u64(v, 4096, 1UL << 30, &u))
            return bad("%s \"%s\": expected bytes in 4096..1073741824", who, v);
        o->max_body_bytes = u;
        return 0;
    case O_LOG:
        if (egpu_log_parse_level(v, &o->log_level))
            return bad("%s \"%s\": expected error, warn, info or debug", who, v);
        return 0;
    case O_V:
        if (egpu_cli_parse_u64(v, 0, 10, &u))
            return bad("%s \"%s\": expected a verbosity in 0..10", who, v);
        o->log_level = u >= 4 ? EGPU_LOG_DEBUG : EGPU_LOG_INFO;
        return 0;
    default:
        return bad("unknown setting");
    }
}

int wh_options_parse(int argc, char **argv, struct wh_options *o)
{
    static const struct option longopts[] = {
        {"listen", required_argument, NULL, O_LISTEN},
        {"port", required_argument, NULL, O_PORT},
        {"health-listen", required_argument, NULL, O_HEALTH_LISTEN},
        {"health-port", required_argument, NULL, O_HEALTH_PORT},
        {"tls-cert", required_argument, NULL, O_CERT},
        {"tls-key", required_argument, NULL, O_KEY},
        {"kubeconfig", required_argument, NULL, O_KUBECONFIG},
        {"context", required_argument, NULL, O_CONTEXT},
        {"scheduler-name", required_argument, NULL, O_SCHED_NAME},
        {"set-scheduler-name", required_argument, NULL, O_SET_SCHED_NAME},
        {"compat-nvidia", required_argument, NULL, O_COMPAT_NVIDIA},
        {"aliyun-gpu-mem-unit", required_argument, NULL, O_ALIYUN_UNIT},
        {"memory-only-core", required_argument, NULL, O_MEM_ONLY_CORE},
        {"scheduler-user", required_argument, NULL, O_SCHED_USER},
        {"agent-user", required_argument, NULL, O_AGENT_USER},
        {"watch-unhealthy-seconds", required_argument, NULL, O_WATCH_UNHEALTHY},
        {"max-connections", required_argument, NULL, O_MAX_CONN},
        {"max-per-client", required_argument, NULL, O_MAX_PER_CLIENT},
        {"idle-timeout", required_argument, NULL, O_IDLE_TIMEOUT},
        {"request-timeout", required_argument, NULL, O_REQUEST_TIMEOUT},
        {"threads", required_argument, NULL, O_THREADS},
        {"max-body", required_argument, NULL, O_MAX_BODY},
        {"log-level", required_argument, NULL, O_LOG},
        {"v", required_argument, NULL, O_V},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, O_VERSION},
        {NULL, 0, NULL, 0},
    };
    static const struct egpu_cli_env env[] = {
        {"EGPU_LISTEN", O_LISTEN},
        {"EGPU_PORT", O_PORT},
        {"EGPU_HEALTH_LISTEN", O_HEALTH_LISTEN},
        {"EGPU_HEALTH_PORT", O_HEALTH_PORT},
        {"EGPU_TLS_CERT", O_CERT},
        {"EGPU_TLS_KEY", O_KEY},
        {"EGPU_KUBECONFIG", O_KUBECONFIG},
        {"EGPU_CONTEXT", O_CONTEXT},
        {"EGPU_SCHEDULER_NAME", O_SCHED_NAME},
        {"EGPU_SET_SCHEDULER_NAME", O_SET_SCHED_NAME},
        {"EGPU_COMPAT_NVIDIA", O_COMPAT_NVIDIA},
        {"EGPU_ALIYUN_GPU_MEM_UNIT", O_ALIYUN_UNIT},
        {"EGPU_MEMORY_ONLY_CORE", O_MEM_ONLY_CORE},
        {"EGPU_SCHEDULER_USER", O_SCHED_USER},
        {"EGPU_AGENT_USER", O_AGENT_USER},
        {"EGPU_WATCH_UNHEALTHY_SECONDS", O_WATCH_UNHEALTHY},
        {"EGPU_MAX_CONNECTIONS", O_MAX_CONN},
        {"EGPU_MAX_PER_CLIENT", O_MAX_PER_CLIENT},
        {"EGPU_IDLE_TIMEOUT", O_IDLE_TIMEOUT},
        {"EGPU_REQUEST_TIMEOUT", O_REQUEST_TIMEOUT},
        {"EGPU_THREADS", O_THREADS},
        {"EGPU_MAX_BODY", O_MAX_BODY},
        {"EGPU_LOG_LEVEL", O_LOG},
        {"EGPU_V", O_V},
    };
    int rc;

    *o = (struct wh_options){.listen = "0.0.0.0",
                             .port = 9443,
                             .health_listen = "0.0.0.0",
                             .health_port = 9444,
                             .max_connections = 1024,
                             .max_per_client = EGPU_HTTP_PER_CLIENT_DEFAULT,
                             .idle_timeout_s = EGPU_HTTP_TIMEOUT_S_DEFAULT,
                             .request_timeout_s = EGPU_HTTP_REQUEST_TIMEOUT_S_DEFAULT,
                             .threads = 2,
                             .max_body_bytes = 8u << 20,
                             .watch_unhealthy_ms = 30000,
                             .log_level = EGPU_LOG_INFO,
                             .cfg = {.scheduler_name = EGPU_SCHEDULER_NAME,
                                     .set_scheduler_name = true,
                                     .aliyun_mem_mib = 1024,
                                     .memory_only_core = 1,
                                     .scheduler_user = EGPU_WEBHOOK_SCHEDULER_USER,
                                     .agent_user = EGPU_WEBHOOK_AGENT_USER}};
    rc = egpu_cli_parse(argc, argv, longopts, O_VERSION, env, sizeof(env) / sizeof(env[0]),
                        "egpu-webhook", "0.1.0", usage, apply, o);
    if (rc != -1)
        return rc;
    if (o->tls_cert == NULL || o->tls_key == NULL)
        return bad("--tls-cert and --tls-key are required (the API server calls webhooks "
                   "over HTTPS only)");
    if (o->port != 0 && o->port == o->health_port)
        return bad("--port and --health-port must differ (both are %u)", o->port);
    return -1;
}
