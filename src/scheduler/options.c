/* scheduler/options.c - egpu-scheduler's flags and environment variables.
 *
 * Every setting has a flag and an EGPU_* variable; the flag wins. A bad
 * value names the flag (or variable) and the allowed values, and the
 * process exits 2 before touching the network.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "egpu/cli.h"
#include "egpu/log.h"
#include "sched_int.h"

static const char usage[] =
    "Usage: egpu-scheduler [OPTION]...\n"
    "Elastic GPU's kube-scheduler extender: answers filter, prioritize and bind\n"
    "(extender v1, nodeCacheCapable) for pods that ask elasticgpu.io/gpu-core and\n"
    "elasticgpu.io/gpu-memory, from a cache of every GPU built by list+watch.\n"
    "\n"
    "  --listen ADDR           address to serve on (EGPU_LISTEN; default 0.0.0.0)\n"
    "  --port N                port (EGPU_PORT; default 8888; 0 = any free port, logged)\n"
    "  --prefix PATH           path before the verbs, e.g. /scheduler serves\n"
    "                          /scheduler/filter (EGPU_PREFIX; default none)\n"
    "  --tls-cert FILE         serve HTTPS with this PEM certificate (EGPU_TLS_CERT)\n"
    "  --tls-key FILE          and this PEM key (EGPU_TLS_KEY)\n"
    "  --kubeconfig FILE       kubeconfig (KUBECONFIG; default ~/.kube/config, else\n"
    "                          the in-cluster service account)\n"
    "  --context NAME          kubeconfig context (default: current-context)\n"
    "  --node-policy P         node tier: binpack, spread, best-fit, random, fgd\n"
    "                          (EGPU_NODE_POLICY; default binpack)\n"
    "  --card-policy P         card tier, same names (EGPU_CARD_POLICY; default binpack)\n"
    "                          Pods override both with the annotations\n"
    "                          elasticgpu.io/node-policy and elasticgpu.io/card-policy.\n"
    "  --seed N                seed of the random policy and of ties (EGPU_SEED; 0)\n"
    "  --scheduler-name NAME   bind serves only pods with this spec.schedulerName\n"
    "                          (EGPU_SCHEDULER_NAME; default elastic-gpu-scheduler,\n"
    "                          kube-scheduler's profile in scheduler-config.yaml)\n"
    "  --leader-elect BOOL     only the Lease holder binds; others are not ready\n"
    "                          (EGPU_LEADER_ELECT; default true)\n"
    "  --lease-namespace NS    (EGPU_LEASE_NAMESPACE; default: the client's namespace)\n"
    "  --lease-name NAME       (EGPU_LEASE_NAME; default elastic-gpu-scheduler)\n"
    "  --lease-duration S      seconds (default 15)\n"
    "  --renew-deadline S      seconds (default 10)\n"
    "  --retry-period S        seconds (default 2)\n"
    "  --watch-unhealthy-seconds S\n"
    "                          not ready while a list or watch of nodes, GPUs or\n"
    "                          pods has kept failing this long (EGPU_WATCH_UNHEALTHY_SECONDS;\n"
    "                          default 30)\n"
    "  --threads N             HTTP threads (EGPU_THREADS; default 2)\n"
    "  --max-body BYTES        largest request body (EGPU_MAX_BODY; default 16777216)\n"
    "  --log-level L           error, warn, info, debug (EGPU_LOG_LEVEL; default info)\n"
    "  -h, --help              show this help\n"
    "  --version               show the version\n"
    "\n"
    "Serves POST <prefix>/filter, <prefix>/prioritize, <prefix>/bind, and GET /healthz,\n"
    "/readyz (ready once the cache is synced, the API server answers, no watch has\n"
    "failed longer than --watch-unhealthy-seconds and, with leader election, this\n"
    "instance leads) and /metrics (Prometheus text format 0.0.4).\n";

#define bad(...) egpu_cli_usage_error("egpu-scheduler", __VA_ARGS__)

enum {
    O_LISTEN = 256,
    O_PORT,
    O_PREFIX,
    O_CERT,
    O_KEY,
    O_KUBECONFIG,
    O_CONTEXT,
    O_NODE_POLICY,
    O_CARD_POLICY,
    O_SEED,
    O_WATCH_UNHEALTHY,
    O_SCHED_NAME,
    O_LEADER,
    O_LEASE_NS,
    O_LEASE_NAME,
    O_LEASE_DUR,
    O_RENEW,
    O_RETRY,
    O_THREADS,
    O_MAX_BODY,
    O_LOG,
    O_VERSION,
};

/* Apply one setting (from a flag or a variable named by who). */
static int apply(void *ctx, int opt, const char *v, const char *who)
{
    struct egpu_sched_options *o = ctx;
    struct egpu_error err = {0};
    uint64_t u;

    switch (opt) {
    case O_LISTEN:
        o->listen = v;
        return 0;
    case O_PORT:
        if (egpu_cli_parse_u64(v, 0, 65535, &u))
            return bad("%s \"%s\": expected a port in 0..65535 (0 = any free port)", who, v);
        o->port = (unsigned)u;
        return 0;
    case O_PREFIX:
        if (v[0] != '\0' && (v[0] != '/' || v[strlen(v) - 1] == '/'))
            return bad("%s \"%s\": expected \"\" or a path such as /scheduler", who, v);
        o->prefix = v;
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
    case O_NODE_POLICY:
    case O_CARD_POLICY:
        if (egpu_policy_parse(v, opt == O_NODE_POLICY ? &o->node_policy : &o->card_policy, &err))
            return bad("%s: %s", who, err.msg);
        return 0;
    case O_WATCH_UNHEALTHY:
        if (egpu_cli_parse_u64(v, 1, 3600, &u))
            return bad("%s \"%s\": expected seconds, 1..3600", who, v);
        o->watch_unhealthy_ms = (long)u * 1000;
        return 0;
    case O_SEED:
        if (egpu_cli_parse_u64(v, 0, UINT64_MAX, &u))
            return bad("%s \"%s\": expected a non-negative integer", who, v);
        o->seed = u;
        return 0;
    case O_SCHED_NAME:
        if (v[0] == '\0' || strlen(v) >= EGPU_K8S_NAME_MAX)
            return bad("%s \"%s\": expected a scheduler name of 1..%d characters", who, v,
                       EGPU_K8S_NAME_MAX - 1);
        o->scheduler_name = v;
        return 0;
    case O_LEADER:
        if (egpu_cli_parse_bool(v, &o->leader_elect))
            return bad("%s \"%s\": expected true or false", who, v);
        return 0;
    case O_LEASE_NS:
        o->lease_ns = v;
        return 0;
    case O_LEASE_NAME:
        o->lease_name = v;
        return 0;
    case O_LEASE_DUR:
    case O_RENEW:
    case O_RETRY:
        if (egpu_cli_parse_u64(v, 1, 3600, &u))
            return bad("%s \"%s\": expected seconds in 1..3600", who, v);
        *(opt == O_LEASE_DUR ? &o->lease_duration_ms
          : opt == O_RENEW   ? &o->renew_deadline_ms
                             : &o->retry_period_ms) = (long)u * 1000;
        return 0;
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
    default:
        return bad("unknown setting");
    }
}

int egpu__sched_options_parse(int argc, char **argv, struct egpu_sched_options *o)
{
    static const struct option longopts[] = {
        {"listen", required_argument, NULL, O_LISTEN},
        {"port", required_argument, NULL, O_PORT},
        {"prefix", required_argument, NULL, O_PREFIX},
        {"tls-cert", required_argument, NULL, O_CERT},
        {"tls-key", required_argument, NULL, O_KEY},
        {"kubeconfig", required_argument, NULL, O_KUBECONFIG},
        {"context", required_argument, NULL, O_CONTEXT},
        {"node-policy", required_argument, NULL, O_NODE_POLICY},
        {"card-policy", required_argument, NULL, O_CARD_POLICY},
        {"seed", required_argument, NULL, O_SEED},
        {"watch-unhealthy-seconds", required_argument, NULL, O_WATCH_UNHEALTHY},
        {"scheduler-name", required_argument, NULL, O_SCHED_NAME},
        {"leader-elect", required_argument, NULL, O_LEADER},
        {"lease-namespace", required_argument, NULL, O_LEASE_NS},
        {"lease-name", required_argument, NULL, O_LEASE_NAME},
        {"lease-duration", required_argument, NULL, O_LEASE_DUR},
        {"renew-deadline", required_argument, NULL, O_RENEW},
        {"retry-period", required_argument, NULL, O_RETRY},
        {"threads", required_argument, NULL, O_THREADS},
        {"max-body", required_argument, NULL, O_MAX_BODY},
        {"log-level", required_argument, NULL, O_LOG},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, O_VERSION},
        {NULL, 0, NULL, 0},
    };
    static const struct egpu_cli_env env[] = {
        {"EGPU_LISTEN", O_LISTEN},
        {"EGPU_PORT", O_PORT},
        {"EGPU_PREFIX", O_PREFIX},
        {"EGPU_TLS_CERT", O_CERT},
        {"EGPU_TLS_KEY", O_KEY},
        {"KUBECONFIG", O_KUBECONFIG},
        {"EGPU_NODE_POLICY", O_NODE_POLICY},
        {"EGPU_CARD_POLICY", O_CARD_POLICY},
        {"EGPU_SEED", O_SEED},
        {"EGPU_WATCH_UNHEALTHY_SECONDS", O_WATCH_UNHEALTHY},
        {"EGPU_SCHEDULER_NAME", O_SCHED_NAME},
        {"EGPU_LEADER_ELECT", O_LEADER},
        {"EGPU_LEASE_NAMESPACE", O_LEASE_NS},
        {"EGPU_LEASE_NAME", O_LEASE_NAME},
        {"EGPU_THREADS", O_THREADS},
        {"EGPU_MAX_BODY", O_MAX_BODY},
        {"EGPU_LOG_LEVEL", O_LOG},
    };
    int rc;

    *o = (struct egpu_sched_options){.listen = "0.0.0.0",
                                     .port = 8888,
                                     .prefix = "",
                                     .node_policy = EGPU_POLICY_BINPACK,
                                     .card_policy = EGPU_POLICY_BINPACK,
                                     .scheduler_name = EGPU_SCHEDULER_NAME_DEFAULT,
                                     .leader_elect = true,
                                     .watch_unhealthy_ms = 30000,
                                     .lease_name = "elastic-gpu-scheduler",
                                     .lease_duration_ms = 15000,
                                     .renew_deadline_ms = 10000,
                                     .retry_period_ms = 2000,
                                     .threads = 2,
                                     .max_body_bytes = 16u << 20,
                                     .log_level = EGPU_LOG_INFO};
    rc = egpu_cli_parse(argc, argv, longopts, O_VERSION, env, sizeof(env) / sizeof(env[0]),
                        "egpu-scheduler", "0.1.0", usage, apply, o);
    if (rc != -1)
        return rc;
    if ((o->tls_cert == NULL) != (o->tls_key == NULL))
        return bad("--tls-cert and --tls-key go together");
    if (o->lease_duration_ms <= o->renew_deadline_ms ||
        o->renew_deadline_ms * 10 <= o->retry_period_ms * 12)
        return bad("leader election needs --lease-duration > --renew-deadline > 1.2 x "
                   "--retry-period");
    return -1;
}
