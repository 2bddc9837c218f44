/* webhook/options.c - egpu-webhook's flags and environment variables.
 *
 * Every setting has a flag and an EGPU_* variable; the flag wins. A bad
 * value names the flag (or variable) and the allowed values, and the
 * process exits 2 before touching the network. The flags every server
 * shares (where it listens, HTTP limits, TLS, kubeconfig, the watch probe,
 * logs) are parsed by egpu_cli_parse_server (src/net/cli.c); this file
 * holds the webhook's own and its --help.
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
    "rewrites other GPU-sharing systems' names into elasticgpu.io ones, sends GPU pods\n"
    "to the Elastic GPU scheduler, and gives a GPU pod of a namespace with a GPUBudget\n"
    "the budget's PriorityClass for its state (InBudget, OverBudget) and the finalizer\n"
    "elasticgpu.io/metering (AdmissionReview admission.k8s.io/v1 over HTTPS).\n"
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
    "  --controller-user NAME  the only user that may remove the finalizer\n"
    "                          elasticgpu.io/metering from a pod (EGPU_CONTROLLER_USER;\n"
    "                          default\n"
    "                          " EGPU_WEBHOOK_CONTROLLER_USER ")\n"
    "  --watch-unhealthy-seconds S\n"
    "                          not ready while a list and watch (GPU objects, claims,\n"
    "                          budgets, PriorityClasses) has kept failing this long\n"
    "                          (EGPU_WATCH_UNHEALTHY_SECONDS; default 30)\n"
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
    "over HTTPS on --listen:--port; GET /healthz, /readyz (ready once the GPU objects,\n"
    "ElasticGPUClaims, GPUBudgets and PriorityClasses are listed and while their\n"
    "watches have not failed longer than\n"
    "--watch-unhealthy-seconds) and /metrics (Prometheus text format 0.0.4) over\n"
    "HTTP on --health-listen:--health-port.\n";

#define bad(...) egpu_cli_usage_error("egpu-webhook", __VA_ARGS__)

enum {
    O_SCHED_NAME = 256,
    O_SET_SCHED_NAME,
    O_COMPAT_NVIDIA,
    O_ALIYUN_UNIT,
    O_MEM_ONLY_CORE,
    O_SCHED_USER,
    O_AGENT_USER,
    O_CONTROLLER_USER,
};

static int apply_name(const char *who, const char *v, const char *what, const char **out)
{
    if (v[0] == '\0' || strlen(v) >= EGPU_K8S_NAME_MAX)
        return bad("%s \"%s\": expected %s of 1..%d characters", who, v, what,
                   EGPU_K8S_NAME_MAX - 1);
    *out = v;
    return 0;
}

/* Apply one of the webhook's own settings (from a flag or a variable named
 * by who); the common ones are egpu_cli_parse_server's. */
static int apply(void *ctx, int opt, const char *v, const char *who)
{
    struct egpu_webhook_config *cfg = ctx;
    uint64_t u;

    switch (opt) {
    case O_SCHED_NAME:
        return apply_name(who, v, "a scheduler name", &cfg->scheduler_name);
    case O_SCHED_USER:
        return apply_name(who, v, "a user name", &cfg->scheduler_user);
    case O_AGENT_USER:
        return apply_name(who, v, "a user name", &cfg->agent_user);
    case O_CONTROLLER_USER:
        return apply_name(who, v, "a user name", &cfg->controller_user);
    case O_SET_SCHED_NAME:
    case O_COMPAT_NVIDIA:
        if (egpu_cli_parse_bool(v, opt == O_SET_SCHED_NAME ? &cfg->set_scheduler_name
                                                           : &cfg->compat_nvidia))
            return bad("%s \"%s\": expected true or false", who, v);
        return 0;
    case O_ALIYUN_UNIT:
        if (strcmp(v, "MiB") == 0)
            cfg->aliyun_mem_mib = 1;
        else if (strcmp(v, "GiB") == 0)
            cfg->aliyun_mem_mib = 1024;
        else
            return bad("%s \"%s\": expected MiB or GiB", who, v);
        return 0;
    case O_MEM_ONLY_CORE:
        if (egpu_cli_parse_u64(v, 1, 99, &u))
            return bad("%s \"%s\": expected a gpu-core percent in 1..99", who, v);
        cfg->memory_only_core = (uint32_t)u;
        return 0;
    default:
        return bad("unknown setting");
    }
}

int wh_options_parse(int argc, char **argv, struct wh_options *o)
{
    static const struct egpu_cli_flag flags[] = {
        {"scheduler-name", required_argument, O_SCHED_NAME, "EGPU_SCHEDULER_NAME"},
        {"set-scheduler-name", required_argument, O_SET_SCHED_NAME, "EGPU_SET_SCHEDULER_NAME"},
        {"compat-nvidia", required_argument, O_COMPAT_NVIDIA, "EGPU_COMPAT_NVIDIA"},
        {"aliyun-gpu-mem-unit", required_argument, O_ALIYUN_UNIT, "EGPU_ALIYUN_GPU_MEM_UNIT"},
        {"memory-only-core", required_argument, O_MEM_ONLY_CORE, "EGPU_MEMORY_ONLY_CORE"},
        {"scheduler-user", required_argument, O_SCHED_USER, "EGPU_SCHEDULER_USER"},
        {"agent-user", required_argument, O_AGENT_USER, "EGPU_AGENT_USER"},
        {"controller-user", required_argument, O_CONTROLLER_USER, "EGPU_CONTROLLER_USER"},
    };
    struct egpu_cli_spec spec = {.prog = "egpu-webhook",
                                 .usage = usage,
                                 .groups = EGPU_CLI_ALL,
                                 .tls_required = "the API server calls webhooks over HTTPS only",
                                 .flags = flags,
                                 .nflags = sizeof(flags) / sizeof(flags[0]),
                                 .apply = apply,
                                 .ctx = &o->cfg};

    *o = (struct wh_options){.cfg = {.scheduler_name = EGPU_SCHEDULER_NAME,
                                     .set_scheduler_name = true,
                                     .aliyun_mem_mib = 1024,
                                     .memory_only_core = 1,
                                     .scheduler_user = EGPU_WEBHOOK_SCHEDULER_USER,
                                     .agent_user = EGPU_WEBHOOK_AGENT_USER,
                                     .controller_user = EGPU_WEBHOOK_CONTROLLER_USER}};
    egpu_cli_server_defaults(&o->srv);
    o->srv.port = 9443;
    o->srv.health_port = 9444;
    o->srv.max_connections = 1024;
    o->srv.max_body_bytes = 8u << 20;
    return egpu_cli_parse_server(argc, argv, &spec, &o->srv);
}
