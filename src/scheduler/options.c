/* scheduler/options.c - egpu-scheduler's flags and environment variables.
 *
 * Every setting has a flag and an EGPU_* variable; the flag wins. A bad
 * value names the flag (or variable) and the allowed values, and the
 * process exits 2 before touching the network. The flags every server
 * shares (where it listens, HTTP limits, TLS, kubeconfig, the watch probe,
 * logs) are parsed by egpu_cli_parse_server (src/net/cli.c); this file
 * holds the scheduler's own and its --help.
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
#include "egpu/net.h"
#include "sched_int.h"

static const char usage[] =
    "Usage: egpu-scheduler [OPTION]...\n"
    "Elastic GPU's kube-scheduler extender: answers filter, prioritize and bind\n"
    "(extender v1, nodeCacheCapable) for pods that ask elasticgpu.io/gpu-core and\n"
    "elasticgpu.io/gpu-memory, and with --dra for DRA pods (their GPUs in\n"
    "ResourceClaims), from a cache of every GPU built by list+watch.\n"
    "\n"
    "  --listen ADDR           address the extender verbs are served on (EGPU_LISTEN;\n"
    "                          default 127.0.0.1: only callers in the same pod, i.e.\n"
    "                          its kube-scheduler, reach them)\n"
    "  --port N                their port (EGPU_PORT; default 8888; 0 = any free port,\n"
    "                          logged)\n"
    "  --health-listen ADDR    address of /healthz, /readyz and /metrics\n"
    "                          (EGPU_HEALTH_LISTEN; default 0.0.0.0)\n"
    "  --health-port N         their port (EGPU_HEALTH_PORT; default 8889; 0 = any\n"
    "                          free port, logged); must differ from --port\n"
    "  --max-connections N     open connections per port at most (EGPU_MAX_CONNECTIONS;\n"
    "                          default 256)\n"
    "  --max-per-client N      open connections from one address to the verbs' port at\n"
    "                          most (EGPU_MAX_PER_CLIENT; default 128: kube-scheduler\n"
    "                          binds in parallel, one pod never holds the port)\n"
    "  --health-max-per-client N\n"
    "                          the same for the health port (EGPU_HEALTH_MAX_PER_CLIENT;\n"
    "                          default 32: the kubelet and Prometheus open one or two)\n"
    "  --idle-timeout S        close a connection idle this long (EGPU_IDLE_TIMEOUT;\n"
    "                          default 120: past the 90 s kube-scheduler keeps one idle)\n"
    "  --request-timeout S     close a connection whose request has not all come this\n"
    "                          long after its first byte, even one sent with the\n"
    "                          connection (EGPU_REQUEST_TIMEOUT; default 10)\n"
    "  --handshake-timeout S   with --tls-cert: close a connection whose TLS handshake\n"
    "                          has not finished this long after it opened\n"
    "                          (EGPU_HANDSHAKE_TIMEOUT; default 5)\n"
    "  --prefix PATH           path before the verbs, e.g. /scheduler serves\n"
    "                          /scheduler/filter (EGPU_PREFIX; default none)\n"
    "  --tls-cert FILE         serve HTTPS with this PEM certificate (EGPU_TLS_CERT)\n"
    "  --tls-key FILE          and this PEM key (EGPU_TLS_KEY)\n"
    "  --tls-client-ca FILE    with them, answer only clients whose certificate a CA of\n"
    "                          this PEM bundle signed for client use: mutual TLS, for\n"
    "                          a kube-scheduler that calls over the network (its\n"
    "                          extender tlsConfig certFile and keyFile); others fail\n"
    "                          the handshake. Read again when the file changes\n"
    "                          (EGPU_TLS_CLIENT_CA)\n"
    "  --tls-client-cn NAME    and whose subject common name is NAME, only\n"
    "                          (EGPU_TLS_CLIENT_CN; default: any the CA signed)\n"
    "  --kubeconfig FILE       kubeconfig (EGPU_KUBECONFIG; default $KUBECONFIG, else\n"
    "                          ~/.kube/config, else the in-cluster service account)\n"
    "  --context NAME          kubeconfig context (EGPU_CONTEXT; default: current-context)\n"
    "  --node-policy P         node tier: " EGPU_POLICY_NAMES "\n"
    "                          (EGPU_NODE_POLICY; default binpack)\n"
    "  --card-policy P         card tier, same names (EGPU_CARD_POLICY; default binpack)\n"
    "                          Pods override both with the annotations\n"
    "                          elasticgpu.io/node-policy and elasticgpu.io/card-policy.\n"
    "  --seed N                seed of the random policy and of ties (EGPU_SEED; 0)\n"
    "  --load-aware[=BOOL]     among equally good placements, prefer the cards whose\n"
    "                          measured load (GPU status.used from egpu-agent: the\n"
    "                          higher of utilization and memory in use) is lowest;\n"
    "                          fitting still counts allocated shares only\n"
    "                          (EGPU_LOAD_AWARE; default false)\n"
    "  --load-max-age S        a status.used whose updateTime is older than this is\n"
    "                          unknown, never idle (EGPU_LOAD_MAX_AGE; 60..86400;\n"
    "                          default 300)\n"
    "  --pods-without-gpu M    pass: a pod asking no GPU passes every filter, scores 0\n"
    "                          and bind refuses it (kube-scheduler places it alone);\n"
    "                          place: it is judged, scored and bound by the node policy\n"
    "                          on its CPU and memory, as egpu-sim places it (for a\n"
    "                          kube-scheduler whose extender config has no\n"
    "                          managedResources) (EGPU_PODS_WITHOUT_GPU; default pass)\n"
    "  --target-workload FILE  FGD's target workload: a TargetWorkload JSON document\n"
    "                          (typical pods with weights, as egpu-sim writes it in\n"
    "                          target_workload.json; docs/scheduler.md) instead of\n"
    "                          one built from the pods seen so far (EGPU_TARGET_WORKLOAD)\n"
    "  --memo-warm BOOL        judge ahead, on every node, the request shapes the cached\n"
    "                          pods ask most (for the default policies, in the\n"
    "                          background, a slice of the cache lock at a time;\n"
    "                          again every 30 s and when the learned target workload\n"
    "                          is replaced), so the first pod of such a shape finds its\n"
    "                          answers memoised (EGPU_MEMO_WARM; default true)\n"
    "  --dra[=BOOL]            DRA mode: follow ResourceClaims (resource.k8s.io/v1, every\n"
    "                          namespace; needs list, watch and get on them) and judge\n"
    "                          DRA pods, whose containers carry elasticgpu.io/dra, by\n"
    "                          their claims: the node policy scores the nodes against\n"
    "                          the cards' use, allocated claims included; bind makes\n"
    "                          the Binding only (EGPU_DRA; default false: such pods are\n"
    "                          refused, naming this flag)\n"
    "  --scheduler-name NAME   bind serves only pods with this spec.schedulerName\n"
    "                          (EGPU_SCHEDULER_NAME; default elastic-gpu-scheduler,\n"
    "                          kube-scheduler's profile in scheduler-config.yaml)\n"
    "  --leader-elect BOOL     only the Lease holder binds; others are not ready\n"
    "                          (EGPU_LEADER_ELECT; default true)\n"
    "  --follow-lease NAME     instead, bind only while the kube-scheduler of this pod\n"
    "                          holds its Lease NAME (in --lease-namespace); no Lease\n"
    "                          of our own then (EGPU_FOLLOW_LEASE)\n"
    "  --pod-name NAME         this pod's name, as kube-scheduler's identity starts\n"
    "                          (EGPU_POD_NAME; default: the host name, which is it)\n"
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
    /* --v and --log-level, the same in every server */
    EGPU_CLI_LOG_HELP("                          ") /* egpu/cli.h */
    "  -h, --help              show this help\n"
    "  --version               show the version\n"
    "\n"
    "Serves POST <prefix>/filter, <prefix>/prioritize, <prefix>/bind on --listen:--port,\n"
    "and on --health-listen:--health-port GET /healthz,\n"
    "/readyz (ready once the cache is synced, the API server answers, no watch has\n"
    "failed longer than --watch-unhealthy-seconds and, with leader election, this\n"
    "instance leads, or with --follow-lease, this pod's kube-scheduler does) and\n"
    "/metrics (Prometheus text format 0.0.4).\n";

#define bad(...) egpu_cli_usage_error("egpu-scheduler", __VA_ARGS__)

enum {
    O_FOLLOW_LEASE = 256,
    O_POD_NAME,
    O_PREFIX,
    O_NODE_POLICY,
    O_CARD_POLICY,
    O_SEED,
    O_SCHED_NAME,
    O_LOAD_AWARE,
    O_LOAD_MAX_AGE,
    O_PODS_WITHOUT_GPU,
    O_TARGET_WORKLOAD,
    O_DRA,
    O_MEMO_WARM,
};

/* Apply one of the scheduler's own settings (from a flag or a variable
 * named by who); the common ones are egpu_cli_parse_server's. */
static int apply(void *ctx, int opt, const char *v, const char *who)
{
    struct egpu_sched_options *o = ctx;
    struct egpu_error err = {0};
    uint64_t u;

    switch (opt) {
    case O_FOLLOW_LEASE:
    case O_POD_NAME:
        if (v[0] == '\0' || strlen(v) >= EGPU_K8S_NAME_MAX)
            return bad("%s \"%s\": expected a name of 1..%d characters", who, v,
                       EGPU_K8S_NAME_MAX - 1);
        *(opt == O_FOLLOW_LEASE ? &o->follow_lease : &o->pod_name) = v;
        return 0;
    case O_PREFIX:
        if (v[0] != '\0' && (v[0] != '/' || v[strlen(v) - 1] == '/'))
            return bad("%s \"%s\": expected \"\" or a path such as /scheduler", who, v);
        o->prefix = v;
        return 0;
    case O_NODE_POLICY:
    case O_CARD_POLICY:
        if (egpu_policy_parse(v, opt == O_NODE_POLICY ? &o->node_policy : &o->card_policy, &err))
            return bad("%s: %s", who, err.msg);
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
    case O_LOAD_AWARE:
        /* --load-aware alone turns it on. */
        if (v != NULL && egpu_cli_parse_bool(v, &o->load_aware))
            return bad("%s \"%s\": expected true or false", who, v);
        if (v == NULL)
            o->load_aware = true;
        return 0;
    case O_LOAD_MAX_AGE:
        if (egpu_cli_parse_u64(v, 60, 86400, &u))
            return bad("%s \"%s\": expected seconds in 60..86400", who, v);
        o->load_max_age_s = (unsigned)u;
        return 0;
    case O_PODS_WITHOUT_GPU:
        if (strcmp(v, "pass") != 0 && strcmp(v, "place") != 0)
            return bad("%s \"%s\": expected pass or place", who, v);
        o->place_cpu_pods = strcmp(v, "place") == 0;
        return 0;
    case O_DRA:
        /* --dra alone turns it on. */
        if (v != NULL && egpu_cli_parse_bool(v, &o->dra))
            return bad("%s \"%s\": expected true or false", who, v);
        if (v == NULL)
            o->dra = true;
        return 0;
    case O_MEMO_WARM:
        if (egpu_cli_parse_bool(v, &o->memo_warm))
            return bad("%s \"%s\": expected true or false", who, v);
        return 0;
    case O_TARGET_WORKLOAD:
        if (v[0] == '\0')
            return bad("%s: expected a file name", who);
        o->target_workload = v;
        return 0;
    default:
        return bad("unknown setting");
    }
}

int egpu__sched_options_parse(int argc, char **argv, struct egpu_sched_options *o)
{
    static const struct egpu_cli_flag flags[] = {
        {"follow-lease", required_argument, O_FOLLOW_LEASE, "EGPU_FOLLOW_LEASE"},
        {"pod-name", required_argument, O_POD_NAME, "EGPU_POD_NAME"},
        {"prefix", required_argument, O_PREFIX, "EGPU_PREFIX"},
        {"node-policy", required_argument, O_NODE_POLICY, "EGPU_NODE_POLICY"},
        {"card-policy", required_argument, O_CARD_POLICY, "EGPU_CARD_POLICY"},
        {"seed", required_argument, O_SEED, "EGPU_SEED"},
        {"scheduler-name", required_argument, O_SCHED_NAME, "EGPU_SCHEDULER_NAME"},
        {"load-aware", optional_argument, O_LOAD_AWARE, "EGPU_LOAD_AWARE"},
        {"load-max-age", required_argument, O_LOAD_MAX_AGE, "EGPU_LOAD_MAX_AGE"},
        {"pods-without-gpu", required_argument, O_PODS_WITHOUT_GPU, "EGPU_PODS_WITHOUT_GPU"},
        {"target-workload", required_argument, O_TARGET_WORKLOAD, "EGPU_TARGET_WORKLOAD"},
        {"dra", optional_argument, O_DRA, "EGPU_DRA"},
        {"memo-warm", required_argument, O_MEMO_WARM, "EGPU_MEMO_WARM"},
    };
    struct egpu_cli_spec spec = {.prog = "egpu-scheduler",
                                 .usage = usage,
                                 .groups = EGPU_CLI_ALL | EGPU_CLI_LEASE,
                                 .flags = flags,
                                 .nflags = sizeof(flags) / sizeof(flags[0]),
                                 .apply = apply,
                                 .ctx = o};
    int rc;

    *o = (struct egpu_sched_options){.prefix = "",
                                     .node_policy = EGPU_POLICY_BINPACK,
                                     .card_policy = EGPU_POLICY_BINPACK,
                                     .scheduler_name = EGPU_SCHEDULER_NAME_DEFAULT,
                                     .load_max_age_s = EGPU_SCHED_LOAD_MAX_AGE_DEFAULT,
                                     .memo_warm = true};
    egpu_cli_server_defaults(&o->srv);
    o->srv.lease.name = "elastic-gpu-scheduler";
    o->srv.listen = "127.0.0.1";
    o->srv.port = 8888;
    o->srv.health_port = 8889;
    o->srv.max_body_bytes = 16u << 20;
    o->srv.max_per_client = 128;
    rc = egpu_cli_parse_server(argc, argv, &spec, &o->srv);
    if (rc != -1)
        return rc;
    if (o->follow_lease != NULL)
        o->srv.lease.elect = false; /* the followed Lease decides */
    return -1;
}
