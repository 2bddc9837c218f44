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
    "  --tls-client-ca FILE    answer only clients whose certificate a CA of this PEM\n"
    "                          bundle signed for client use (mutual TLS: the API\n"
    "                          server's --admission-control-config-file kubeconfig\n"
    "                          gives it one); others fail the handshake. Read again\n"
    "                          when the file changes (EGPU_TLS_CLIENT_CA; default:\n"
    "                          no client certificate asked)\n"
    "  --tls-client-cn NAME    and whose subject common name is NAME, only\n"
    "                          (EGPU_TLS_CLIENT_CN; default: any the CA signed)\n"
    "  --kubeconfig FILE       kubeconfig (EGPU_KUBECONFIG; default $KUBECONFIG, else\n"
    "                          ~/.kube/config, else the in-cluster service account)\n"
    "  --context NAME          kubeconfig context (EGPU_CONTEXT; default: current-context)\n"
    "  --mode MODE             how GPU pods get their GPUs (EGPU_MODE): device-plugin\n"
    "                          (the default: elasticgpu.io resources, placed by\n"
    "                          elastic-gpu-scheduler) or dra (each GPU container's\n"
    "                          request becomes a ResourceClaimTemplate, listed in the\n"
    "                          pod's annotation elasticgpu.io/dra-claims for\n"
    "                          egpu-controller to create, and a resourceClaims entry;\n"
    "                          the container gets the marker elasticgpu.io/dra, so the\n"
    "                          extender scores its node, the allocator picks its card;\n"
    "                          schedulerName as below, no PriorityClass or metering\n"
    "                          finalizer)\n"
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
    "  --default-memory-per-core MIB\n"
    "                          elasticgpu.io/gpu-memory given to a pod's container that\n"
    "                          asks a share of one card (gpu-core 1..99) and no\n"
    "                          gpu-memory: gpu-core x MIB MiB, with a warning; 0..65536\n"
    "                          (EGPU_DEFAULT_MEMORY_PER_CORE; default 0: such a pod is\n"
    "                          refused, naming gpu-memory)\n"
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
    "  --seccomp-profile P     the seccompProfile a container asking a gpu-core share\n"
    "                          (1..99) gets, refusing new user and mount namespaces:\n"
    "                          a Localhost profile path relative to the kubelet's\n"
    "                          seccomp directory, or RuntimeDefault where the runtime's\n"
    "                          default refuses them (containerd; not CRI-O)\n"
    "                          (EGPU_SECCOMP_PROFILE; default\n"
    "                          " EGPU_WEBHOOK_SECCOMP_PROFILE ")\n"
    "  --self-signed           make, keep and renew the serving certificate itself\n"
    "                          (EGPU_SELF_SIGNED; true turns it on): a CA and the\n"
    "                          certificate in the Secret --self-signed-secret, written\n"
    "                          to --tls-cert and --tls-key (one directory, made 0700),\n"
    "                          the CA in every webhook's caBundle; no cert-manager or\n"
    "                          certs.sh needed\n"
    "  --self-signed-secret NAME\n"
    "                          that Secret (EGPU_SELF_SIGNED_SECRET; default\n"
    "                          egpu-webhook-tls)\n"
    "  --self-signed-namespace NS\n"
    "                          its namespace and the Service's\n"
    "                          (EGPU_SELF_SIGNED_NAMESPACE; default: the kubeconfig's or\n"
    "                          the service account's)\n"
    "  --self-signed-service NAME\n"
    "                          the Service: the certificate is for NAME, NAME.NS,\n"
    "                          NAME.NS.svc and NAME.NS.svc.cluster.local\n"
    "                          (EGPU_SELF_SIGNED_SERVICE; default egpu-webhook)\n"
    "  --self-signed-configuration NAME\n"
    "                          the Mutating- and ValidatingWebhookConfiguration whose\n"
    "                          caBundle it keeps (EGPU_SELF_SIGNED_CONFIGURATION;\n"
    "                          default elastic-gpu-webhook)\n"
    "  --self-signed-ca-validity D\n"
    "                          a new CA's life, N followed by s, m, h or d\n"
    "                          (EGPU_SELF_SIGNED_CA_VALIDITY; default 3650d)\n"
    "  --self-signed-cert-validity D\n"
    "                          a new serving certificate's life\n"
    "                          (EGPU_SELF_SIGNED_CERT_VALIDITY; default 365d)\n"
    "  --self-signed-renew-before D\n"
    "                          make the certificate, or the CA, again this long before\n"
    "                          it ends (EGPU_SELF_SIGNED_RENEW_BEFORE; default 30d;\n"
    "                          less than both validities)\n"
    "  --self-signed-check-interval D\n"
    "                          read the Secret and the caBundles again this often\n"
    "                          (EGPU_SELF_SIGNED_CHECK_INTERVAL; default 1h)\n"
    "  --watch-unhealthy-seconds S\n"
    "                          not ready while a list and watch (GPU objects, claims,\n"
    "                          budgets, PriorityClasses) has kept failing this long\n"
    "                          (EGPU_WATCH_UNHEALTHY_SECONDS; default 30)\n"
    "  --max-connections N     open connections per port at most (EGPU_MAX_CONNECTIONS;\n"
    "                          default 1024)\n"
    "  --max-per-client N      open connections from one address to the HTTPS port at\n"
    "                          most (EGPU_MAX_PER_CLIENT; default 256: an API server\n"
    "                          opens many, one pod never holds the port)\n"
    "  --health-max-per-client N\n"
    "                          the same for the health port (EGPU_HEALTH_MAX_PER_CLIENT;\n"
    "                          default 32: Prometheus opens one or two)\n"
    "  --idle-timeout S        close a connection idle this long (EGPU_IDLE_TIMEOUT;\n"
    "                          default 120: past the 90 s an API server keeps one idle,\n"
    "                          so the API server closes first)\n"
    "  --request-timeout S     close a connection whose request has not all come this\n"
    "                          long after its first byte, even one sent with the\n"
    "                          connection (EGPU_REQUEST_TIMEOUT; default 10)\n"
    "  --handshake-timeout S   close a connection whose TLS handshake has not finished\n"
    "                          this long after it opened (EGPU_HANDSHAKE_TIMEOUT;\n"
    "                          default 5)\n"
    "  --threads N             HTTPS threads (EGPU_THREADS; default 2)\n"
    "  --max-body BYTES        largest AdmissionReview (EGPU_MAX_BODY; default 8388608)\n"
    /* --v and --log-level, the same in every server */
    EGPU_CLI_LOG_HELP("                          ") /* egpu/cli.h */
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
    O_DEFAULT_MEM_PER_CORE,
    O_SCHED_USER,
    O_AGENT_USER,
    O_CONTROLLER_USER,
    O_SECCOMP_PROFILE,
    O_SELF_SIGNED,
    O_SS_SECRET,
    O_SS_NAMESPACE,
    O_SS_SERVICE,
    O_SS_CONFIGURATION,
    O_SS_CA_VALIDITY,
    O_SS_CERT_VALIDITY,
    O_SS_RENEW_BEFORE,
    O_SS_CHECK,
    O_MODE,
};

static int apply_name(const char *who, const char *v, const char *what, const char **out)
{
    if (v[0] == '\0' || strlen(v) >= EGPU_K8S_NAME_MAX)
        return bad("%s \"%s\": expected %s of 1..%d characters", who, v, what,
                   EGPU_K8S_NAME_MAX - 1);
    *out = v;
    return 0;
}

/* --seccomp-profile: RuntimeDefault, or a Localhost profile as the API
 * server takes one (a path relative to the kubelet's seccomp directory,
 * no "..", no leading "/"), of safe characters only. */
static int apply_seccomp(const char *who, const char *v, const char **out)
{
    size_t n = strlen(v);

    if (strcmp(v, "RuntimeDefault") == 0) {
        *out = v;
        return 0;
    }
    if (n == 0 || n > 255 || v[0] == '/' || strstr(v, "..") != NULL ||
        strspn(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-/") != n)
        return bad("%s \"%s\": expected RuntimeDefault or a Localhost profile: a path of "
                   "1..255 characters (letters, digits, '.', '_', '-', '/') relative to the "
                   "kubelet's seccomp directory, without \"..\"",
                   who, v);
    *out = v;
    return 0;
}

#define DURATION_MAX_S ((int64_t)100 * 365 * 86400) /* 100 years */

/* The flags of --self-signed. */
static int apply_ss(struct egpu__webhook_ss_options *ss, int opt, const char *v, const char *who)
{
    int64_t *d = opt == O_SS_CA_VALIDITY     ? &ss->ca_validity_s
                 : opt == O_SS_CERT_VALIDITY ? &ss->cert_validity_s
                 : opt == O_SS_RENEW_BEFORE  ? &ss->renew_before_s
                                             : &ss->check_s;

    switch (opt) {
    case O_SELF_SIGNED:
        if (v == NULL) { /* the flag itself takes no value */
            ss->enabled = true;
            return 0;
        }
        if (egpu_cli_parse_bool(v, &ss->enabled))
            return bad("%s \"%s\": expected true or false", who, v);
        return 0;
    case O_SS_SECRET:
        return apply_name(who, v, "a Secret name", &ss->secret);
    case O_SS_NAMESPACE:
        return apply_name(who, v, "a namespace", &ss->ns);
    case O_SS_SERVICE:
        if (strlen(v) > 63)
            return bad("%s \"%s\": expected a Service name of 1..63 characters", who, v);
        return apply_name(who, v, "a Service name", &ss->service);
    case O_SS_CONFIGURATION:
        return apply_name(who, v, "a webhook configuration name", &ss->configuration);
    default:
        if (egpu__webhook_ss_parse_duration(v, 1, DURATION_MAX_S, d))
            return bad("%s \"%s\": expected a duration: N followed by s, m, h or d "
                       "(e.g. 30d), 1s..36500d",
                       who, v);
        return 0;
    }
}

/* Apply one of the webhook's own settings (from a flag or a variable named
 * by who); the common ones are egpu_cli_parse_server's. */
static int apply(void *ctx, int opt, const char *v, const char *who)
{
    struct egpu_webhook_config *cfg = &((struct egpu__webhook_options *)ctx)->cfg;
    uint64_t u;

    switch (opt) {
    case O_MODE:
        if (strcmp(v, "device-plugin") == 0)
            cfg->mode = EGPU_WEBHOOK_MODE_DEVICE_PLUGIN;
        else if (strcmp(v, "dra") == 0)
            cfg->mode = EGPU_WEBHOOK_MODE_DRA;
        else
            return bad("%s \"%s\": expected device-plugin or dra", who, v);
        return 0;
    case O_SCHED_NAME:
        return apply_name(who, v, "a scheduler name", &cfg->scheduler_name);
    case O_SCHED_USER:
        return apply_name(who, v, "a user name", &cfg->scheduler_user);
    case O_AGENT_USER:
        return apply_name(who, v, "a user name", &cfg->agent_user);
    case O_CONTROLLER_USER:
        return apply_name(who, v, "a user name", &cfg->controller_user);
    case O_SECCOMP_PROFILE:
        return apply_seccomp(who, v, &cfg->seccomp_profile);
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
    case O_DEFAULT_MEM_PER_CORE:
        if (egpu_cli_parse_u64(v, 0, EGPU_WEBHOOK_DEFAULT_MEM_PER_CORE_MAX, &u))
            return bad("%s \"%s\": expected MiB per gpu-core percent in 0..65536 (0: refuse "
                       "a share without gpu-memory)",
                       who, v);
        cfg->default_mem_per_core = (uint32_t)u;
        return 0;
    case O_SELF_SIGNED:
    case O_SS_SECRET:
    case O_SS_NAMESPACE:
    case O_SS_SERVICE:
    case O_SS_CONFIGURATION:
    case O_SS_CA_VALIDITY:
    case O_SS_CERT_VALIDITY:
    case O_SS_RENEW_BEFORE:
    case O_SS_CHECK:
        return apply_ss(&((struct egpu__webhook_options *)ctx)->ss, opt, v, who);
    default:
        return bad("unknown setting");
    }
}

int egpu__webhook_options_parse(int argc, char **argv, struct egpu__webhook_options *o)
{
    static const struct egpu_cli_flag flags[] = {
        {"mode", required_argument, O_MODE, "EGPU_MODE"},
        {"scheduler-name", required_argument, O_SCHED_NAME, "EGPU_SCHEDULER_NAME"},
        {"set-scheduler-name", required_argument, O_SET_SCHED_NAME, "EGPU_SET_SCHEDULER_NAME"},
        {"compat-nvidia", required_argument, O_COMPAT_NVIDIA, "EGPU_COMPAT_NVIDIA"},
        {"aliyun-gpu-mem-unit", required_argument, O_ALIYUN_UNIT, "EGPU_ALIYUN_GPU_MEM_UNIT"},
        {"memory-only-core", required_argument, O_MEM_ONLY_CORE, "EGPU_MEMORY_ONLY_CORE"},
        {"default-memory-per-core", required_argument, O_DEFAULT_MEM_PER_CORE,
         "EGPU_DEFAULT_MEMORY_PER_CORE"},
        {"scheduler-user", required_argument, O_SCHED_USER, "EGPU_SCHEDULER_USER"},
        {"agent-user", required_argument, O_AGENT_USER, "EGPU_AGENT_USER"},
        {"controller-user", required_argument, O_CONTROLLER_USER, "EGPU_CONTROLLER_USER"},
        {"seccomp-profile", required_argument, O_SECCOMP_PROFILE, "EGPU_SECCOMP_PROFILE"},
        {"self-signed", no_argument, O_SELF_SIGNED, "EGPU_SELF_SIGNED"},
        {"self-signed-secret", required_argument, O_SS_SECRET, "EGPU_SELF_SIGNED_SECRET"},
        {"self-signed-namespace", required_argument, O_SS_NAMESPACE, "EGPU_SELF_SIGNED_NAMESPACE"},
        {"self-signed-service", required_argument, O_SS_SERVICE, "EGPU_SELF_SIGNED_SERVICE"},
        {"self-signed-configuration", required_argument, O_SS_CONFIGURATION,
         "EGPU_SELF_SIGNED_CONFIGURATION"},
        {"self-signed-ca-validity", required_argument, O_SS_CA_VALIDITY,
         "EGPU_SELF_SIGNED_CA_VALIDITY"},
        {"self-signed-cert-validity", required_argument, O_SS_CERT_VALIDITY,
         "EGPU_SELF_SIGNED_CERT_VALIDITY"},
        {"self-signed-renew-before", required_argument, O_SS_RENEW_BEFORE,
         "EGPU_SELF_SIGNED_RENEW_BEFORE"},
        {"self-signed-check-interval", required_argument, O_SS_CHECK,
         "EGPU_SELF_SIGNED_CHECK_INTERVAL"},
    };
    struct egpu_cli_spec spec = {.prog = "egpu-webhook",
                                 .usage = usage,
                                 .groups = EGPU_CLI_ALL,
                                 .tls_required = "the API server calls webhooks over HTTPS only",
                                 .flags = flags,
                                 .nflags = sizeof(flags) / sizeof(flags[0]),
                                 .apply = apply,
                                 .ctx = o};
    int rc;

    *o = (struct egpu__webhook_options){.cfg = {.scheduler_name = EGPU_SCHEDULER_NAME,
                                                .set_scheduler_name = true,
                                                .aliyun_mem_mib = 1024,
                                                .memory_only_core = 1,
                                                .scheduler_user = EGPU_WEBHOOK_SCHEDULER_USER,
                                                .agent_user = EGPU_WEBHOOK_AGENT_USER,
                                                .controller_user = EGPU_WEBHOOK_CONTROLLER_USER,
                                                .seccomp_profile = EGPU_WEBHOOK_SECCOMP_PROFILE},
                                        .ss = {.secret = "egpu-webhook-tls",
                                               .service = "egpu-webhook",
                                               .configuration = "elastic-gpu-webhook",
                                               .ca_validity_s = (int64_t)3650 * 86400,
                                               .cert_validity_s = (int64_t)365 * 86400,
                                               .renew_before_s = (int64_t)30 * 86400,
                                               .check_s = 3600}};
    egpu_cli_server_defaults(&o->srv);
    o->srv.port = 9443;
    o->srv.health_port = 9444;
    o->srv.max_connections = 1024;
    o->srv.max_per_client = 256;
    o->srv.max_body_bytes = 8u << 20;
    rc = egpu_cli_parse_server(argc, argv, &spec, &o->srv);
    if (rc == -1 && o->ss.enabled &&
        (o->ss.renew_before_s >= o->ss.cert_validity_s ||
         o->ss.renew_before_s >= o->ss.ca_validity_s))
        return bad("--self-signed-renew-before (%llds) must be less than "
                   "--self-signed-cert-validity (%llds) and --self-signed-ca-validity (%llds)",
                   (long long)o->ss.renew_before_s, (long long)o->ss.cert_validity_s,
                   (long long)o->ss.ca_validity_s);
    return rc;
}
