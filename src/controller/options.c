/* controller/options.c - egpu-controller's flags and environment variables.
 *
 * The flags every server shares (where /healthz, /readyz and /metrics
 * listen, HTTP limits, kubeconfig, the watch probe, logs) are parsed by
 * egpu_cli_parse_server (src/net/cli.c); this file holds the controller's
 * own and its --help. A bad value names the flag and the allowed values,
 * and the process exits 2 before touching the network.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "controller_int.h"
#include "egpu/log.h"

static const char usage[] =
    "Usage: egpu-controller [OPTION]...\n"
    "Elastic GPU's controller: binds ElasticGPUClaims to ElasticGPUs as PVCs bind to\n"
    "PVs, provisions ElasticGPUs of a class (gpushare.provisioner.elasticgpu.io: a\n"
    "slice of one card; physical.provisioner.elasticgpu.io: whole cards), keeps\n"
    "claims in use by pods from being deleted, and releases, keeps or deletes an\n"
    "ElasticGPU when its claim goes. It keeps GPU status.allocated current, and meters\n"
    "the GPU pods of every namespace with a GPUBudget into the budget's status.\n"
    "\n"
    "  --listen ADDR           address of /healthz, /readyz and /metrics (EGPU_LISTEN;\n"
    "                          default 0.0.0.0)\n"
    "  --port N                their port (EGPU_PORT; default 9090; 0 = any free port,\n"
    "                          logged)\n"
    "  --kubeconfig FILE       kubeconfig (EGPU_KUBECONFIG; default $KUBECONFIG, else\n"
    "                          ~/.kube/config, else the in-cluster service account)\n"
    "  --context NAME          kubeconfig context (EGPU_CONTEXT; default: current-context)\n"
    "  --resync-seconds S      every claim and ElasticGPU is reconciled again this often,\n"
    "                          repairing drift, 1..86400 (EGPU_RESYNC_SECONDS; default 30)\n"
    "  --meter-seconds S       each namespace with a GPUBudget is metered, and its status\n"
    "                          written, this often, 1..3600 (EGPU_METER_SECONDS; default 30)\n"
    "  --mode MODE             device-plugin (the default) or dra: also make the\n"
    "                          ResourceClaimTemplates the webhook's DRA mode names in\n"
    "                          a pod's elasticgpu.io/dra-claims, a DeviceClass\n"
    "                          elasticgpu-<class> per ElasticGPUClass, and a\n"
    "                          ResourceClaim elasticgpu-<claim> per ElasticGPUClaim in\n"
    "                          place of an ElasticGPU (EGPU_MODE; docs/claims.md)\n"
    "  --dra-template-gc-seconds S\n"
    "                          --mode dra: a ResourceClaimTemplate this controller made\n"
    "                          that no pod has named this long is deleted, 1..2592000\n"
    "                          (EGPU_DRA_TEMPLATE_GC_SECONDS; default 3600)\n"
    "  --leader-elect BOOL     only the holder of the Lease reconciles (EGPU_LEADER_ELECT;\n"
    "                          default true)\n"
    "  --lease-namespace NS    (EGPU_LEASE_NAMESPACE; default: the client's namespace)\n"
    "  --lease-name NAME       (EGPU_LEASE_NAME; default elastic-gpu-controller)\n"
    "  --lease-duration S      seconds (default 15)\n"
    "  --renew-deadline S      seconds (default 10)\n"
    "  --retry-period S        seconds (default 2)\n"
    "  --watch-unhealthy-seconds S\n"
    "                          not ready while a list and watch has kept failing this\n"
    "                          long (EGPU_WATCH_UNHEALTHY_SECONDS; default 30)\n"
    "  --max-connections N     open connections at most (EGPU_MAX_CONNECTIONS; default 64)\n"
    "  --max-per-client N      from one address at most (EGPU_MAX_PER_CLIENT; default 8:\n"
    "                          the kubelet and Prometheus open one or two each)\n"
    "  --idle-timeout S        (EGPU_IDLE_TIMEOUT; default 30)\n"
    "  --request-timeout S     from a request's first byte, even one sent with the\n"
    "                          connection (EGPU_REQUEST_TIMEOUT; default 5)\n"
    /* --v and --log-level, the same in every server */
    EGPU_CLI_LOG_HELP("                          ") /* egpu/cli.h */
    "  -h, --help              show this help\n"
    "  --version               show the version\n"
    "\n"
    "Serves GET /healthz, /readyz (ready once every watched kind is listed and while\n"
    "no watch has failed longer than --watch-unhealthy-seconds) and /metrics\n"
    "(Prometheus text format 0.0.4) over HTTP on --listen:--port.\n";

#define bad(...) egpu_cli_usage_error(EGPU__CONTROLLER_PROG, __VA_ARGS__)

enum {
    O_RESYNC = 256,
    O_METER,
    O_MODE,
    O_DRA_GC,
};

static int apply(void *ctx, int opt, const char *v, const char *who)
{
    struct egpu__controller_options *o = ctx;
    uint64_t u;

    switch (opt) {
    case O_RESYNC:
        if (egpu_cli_parse_u64(v, 1, 86400, &u))
            return bad("%s \"%s\": expected seconds in 1..86400", who, v);
        o->resync_ms = (long)u * 1000;
        return 0;
    case O_METER:
        if (egpu_cli_parse_u64(v, 1, 3600, &u))
            return bad("%s \"%s\": expected seconds in 1..3600", who, v);
        o->meter_ms = (long)u * 1000;
        return 0;
    case O_MODE:
        if (strcmp(v, "dra") != 0 && strcmp(v, "device-plugin") != 0)
            return bad("%s \"%s\": expected device-plugin or dra", who, v);
        o->dra = strcmp(v, "dra") == 0;
        return 0;
    case O_DRA_GC:
        if (egpu_cli_parse_u64(v, 1, 2592000, &u))
            return bad("%s \"%s\": expected seconds in 1..2592000", who, v);
        o->dra_gc_ms = (long)u * 1000;
        return 0;
    default:
        return bad("unknown setting");
    }
}

int egpu__controller_options_parse(int argc, char **argv, struct egpu__controller_options *o)
{
    static const struct egpu_cli_flag flags[] = {
        {"resync-seconds", required_argument, O_RESYNC, "EGPU_RESYNC_SECONDS"},
        {"meter-seconds", required_argument, O_METER, "EGPU_METER_SECONDS"},
        {"mode", required_argument, O_MODE, "EGPU_MODE"},
        {"dra-template-gc-seconds", required_argument, O_DRA_GC, "EGPU_DRA_TEMPLATE_GC_SECONDS"},
    };
    struct egpu_cli_spec spec = {.prog = EGPU__CONTROLLER_PROG,
                                 .usage = usage,
                                 .groups = EGPU_CLI_LISTEN | EGPU_CLI_LIMITS | EGPU_CLI_KUBE |
                                           EGPU_CLI_LEASE | EGPU_CLI_WATCH | EGPU_CLI_LOG,
                                 .flags = flags,
                                 .nflags = sizeof(flags) / sizeof(flags[0]),
                                 .apply = apply,
                                 .ctx = o};

    *o = (struct egpu__controller_options){
        .resync_ms = 30000, .meter_ms = 30000, .dra_gc_ms = 3600000};
    egpu_cli_server_defaults(&o->srv);
    o->srv.lease.name = "elastic-gpu-controller";
    o->srv.port = 9090;
    /* Its callers: the kubelet's probes and a Prometheus or two. */
    o->srv.max_connections = 64;
    o->srv.max_per_client = 8;
    o->srv.idle_timeout_s = 30;
    o->srv.request_timeout_s = 5;
    return egpu_cli_parse_server(argc, argv, &spec, &o->srv);
}
