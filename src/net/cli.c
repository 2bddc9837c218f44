/* net/cli.c - command-line helpers shared by every binary (see egpu/cli.h).
 *
 * DESIGN: the flags every long-running server takes (where it listens, its
 * HTTP limits, TLS, the kubeconfig, the watch probe, the log level) are
 * parsed here from one table, so each has the same name, EGPU_* variable,
 * range and message in every binary. A component's options.c lists only
 * its own flags and picks the common groups it takes (struct
 * egpu_cli_spec); its --help text stays its own, since where a flag points
 * (the verbs, the webhook, the probes) differs.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "egpu/cli.h"
#include "egpu/log.h"
#include "egpu/net.h"

int egpu_cli_usage_error(const char *prog, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "%s: ", prog);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry '%s --help'.\n", prog);
    return 2;
}

int egpu_cli_parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
    unsigned long long v;
    char *end;

    if (s == NULL || *s < '0' || *s > '9')
        return -EINVAL;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno || *end != '\0' || v < lo || v > hi)
        return -EINVAL;
    *out = v;
    return 0;
}

int egpu_cli_parse_double(const char *s, double lo, double hi, double *out)
{
    char *end;
    double v;

    if (s == NULL || *s == '\0')
        return -EINVAL;
    errno = 0;
    v = strtod(s, &end);
    if (errno || end == s || *end != '\0' || !(v >= lo && v <= hi))
        return -EINVAL;
    *out = v;
    return 0;
}

int egpu_cli_http_limit(const char *prog, const char *who, const char *v, bool seconds,
                        unsigned *out)
{
    uint64_t u;

    if (egpu_cli_parse_u64(v, 1, seconds ? 3600 : 65536, &u))
        return egpu_cli_usage_error(prog, "%s \"%s\": expected %s", who, v,
                                    seconds ? "seconds in 1..3600" : "connections in 1..65536");
    *out = (unsigned)u;
    return 0;
}

int egpu_cli_parse_bool(const char *s, bool *out)
{
    if (s != NULL && (strcmp(s, "true") == 0 || strcmp(s, "1") == 0)) {
        *out = true;
        return 0;
    }
    if (s != NULL && (strcmp(s, "false") == 0 || strcmp(s, "0") == 0)) {
        *out = false;
        return 0;
    }
    return -EINVAL;
}

int egpu_cli_parse(int argc, char **argv, const struct option *longopts, int version_opt,
                   const struct egpu_cli_env *env, size_t nenv, const char *prog,
                   const char *version, const char *usage, egpu_cli_apply_cb apply, void *ctx)
{
    int c, rc;

    for (size_t i = 0; i < nenv; i++) {
        const char *v = getenv(env[i].var);

        if (v != NULL && *v != '\0' && (rc = apply(ctx, env[i].opt, v, env[i].var)) != 0)
            return rc;
    }
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        const struct option *lo = longopts;
        char who[80];

        if (c == 'h') {
            fputs(usage, stdout);
            return 0;
        }
        if (c == version_opt) {
            printf("%s %s\n", prog, version);
            return 0;
        }
        if (c == '?' || c == ':')
            return egpu_cli_usage_error(prog, "unknown or incomplete option \"%s\"",
                                        argv[optind - 1]);
        while (lo->name != NULL && lo->val != c)
            lo++;
        snprintf(who, sizeof(who), "--%s", lo->name ? lo->name : "?");
        rc = apply(ctx, c, optarg, who);
        if (rc)
            return rc;
    }
    if (optind < argc)
        return egpu_cli_usage_error(prog, "unexpected argument \"%s\"", argv[optind]);
    return -1;
}

/* ------------------------------------------------------------------------ */
/* The flags every long-running server shares                               */

enum {
    O_LISTEN = 4096, /* above every component's own values (256..4095) */
    O_PORT,
    O_HEALTH_LISTEN,
    O_HEALTH_PORT,
    O_HEALTH_PER_CLIENT,
    O_MAX_CONN,
    O_MAX_PER_CLIENT,
    O_IDLE_TIMEOUT,
    O_REQUEST_TIMEOUT,
    O_THREADS,
    O_MAX_BODY,
    O_CERT,
    O_KEY,
    O_CLIENT_CA,
    O_CLIENT_CN,
    O_HANDSHAKE_TIMEOUT,
    O_KUBECONFIG,
    O_CONTEXT,
    O_WATCH_UNHEALTHY,
    O_LOG,
    O_V,
    O_LEADER,
    O_LEASE_NS,
    O_LEASE_NAME,
    O_LEASE_DUR,
    O_RENEW,
    O_RETRY,
    O_VERSION,
};

/* The one table of the common flags: group, name, getopt value, variable. */
static const struct common_flag {
    unsigned group;
    const char *name;
    int opt;
    const char *var;
} common_flags[] = {
    {EGPU_CLI_LISTEN, "listen", O_LISTEN, "EGPU_LISTEN"},
    {EGPU_CLI_LISTEN, "port", O_PORT, "EGPU_PORT"},
    {EGPU_CLI_HEALTH, "health-listen", O_HEALTH_LISTEN, "EGPU_HEALTH_LISTEN"},
    {EGPU_CLI_HEALTH, "health-port", O_HEALTH_PORT, "EGPU_HEALTH_PORT"},
    {EGPU_CLI_HEALTH, "health-max-per-client", O_HEALTH_PER_CLIENT, "EGPU_HEALTH_MAX_PER_CLIENT"},
    {EGPU_CLI_LIMITS, "max-connections", O_MAX_CONN, "EGPU_MAX_CONNECTIONS"},
    {EGPU_CLI_LIMITS, "max-per-client", O_MAX_PER_CLIENT, "EGPU_MAX_PER_CLIENT"},
    {EGPU_CLI_LIMITS, "idle-timeout", O_IDLE_TIMEOUT, "EGPU_IDLE_TIMEOUT"},
    {EGPU_CLI_LIMITS, "request-timeout", O_REQUEST_TIMEOUT, "EGPU_REQUEST_TIMEOUT"},
    {EGPU_CLI_POOL, "threads", O_THREADS, "EGPU_THREADS"},
    {EGPU_CLI_POOL, "max-body", O_MAX_BODY, "EGPU_MAX_BODY"},
    {EGPU_CLI_TLS, "tls-cert", O_CERT, "EGPU_TLS_CERT"},
    {EGPU_CLI_TLS, "tls-key", O_KEY, "EGPU_TLS_KEY"},
    {EGPU_CLI_TLS, "tls-client-ca", O_CLIENT_CA, "EGPU_TLS_CLIENT_CA"},
    {EGPU_CLI_TLS, "tls-client-cn", O_CLIENT_CN, "EGPU_TLS_CLIENT_CN"},
    {EGPU_CLI_TLS, "handshake-timeout", O_HANDSHAKE_TIMEOUT, "EGPU_HANDSHAKE_TIMEOUT"},
    {EGPU_CLI_KUBE, "kubeconfig", O_KUBECONFIG, "EGPU_KUBECONFIG"},
    {EGPU_CLI_KUBE, "context", O_CONTEXT, "EGPU_CONTEXT"},
    {EGPU_CLI_WATCH, "watch-unhealthy-seconds", O_WATCH_UNHEALTHY, "EGPU_WATCH_UNHEALTHY_SECONDS"},
    {EGPU_CLI_LOG, "log-level", O_LOG, "EGPU_LOG_LEVEL"},
    {EGPU_CLI_LOG, "v", O_V, "EGPU_V"},
    {EGPU_CLI_LEASE, "leader-elect", O_LEADER, "EGPU_LEADER_ELECT"},
    {EGPU_CLI_LEASE, "lease-namespace", O_LEASE_NS, "EGPU_LEASE_NAMESPACE"},
    {EGPU_CLI_LEASE, "lease-name", O_LEASE_NAME, "EGPU_LEASE_NAME"},
    {EGPU_CLI_LEASE, "lease-duration", O_LEASE_DUR, NULL},
    {EGPU_CLI_LEASE, "renew-deadline", O_RENEW, NULL},
    {EGPU_CLI_LEASE, "retry-period", O_RETRY, NULL},
};

#define NCOMMON   (sizeof(common_flags) / sizeof(common_flags[0]))
#define NOPTS_MAX 64 /* own flags of one binary at most */

void egpu_cli_server_defaults(struct egpu_cli_server *s)
{
    *s = (struct egpu_cli_server){.listen = "0.0.0.0",
                                  .health_listen = "0.0.0.0",
                                  .max_connections = EGPU_HTTP_CONNECTIONS_DEFAULT,
                                  .max_per_client = EGPU_HTTP_PER_CLIENT_DEFAULT,
                                  .health_max_per_client = EGPU_HTTP_PER_CLIENT_DEFAULT,
                                  .idle_timeout_s = EGPU_HTTP_TIMEOUT_S_DEFAULT,
                                  .request_timeout_s = EGPU_HTTP_REQUEST_TIMEOUT_S_DEFAULT,
                                  .handshake_timeout_s = EGPU_HTTP_HANDSHAKE_TIMEOUT_S_DEFAULT,
                                  .threads = EGPU_HTTP_THREADS_DEFAULT,
                                  .max_body_bytes = EGPU_HTTP_BODY_MAX_DEFAULT,
                                  .watch_unhealthy_ms = 30000,
                                  .log_level = EGPU_LOG_INFO,
                                  .lease = {.elect = true,
                                            .duration_ms = 15000,
                                            .renew_deadline_ms = 10000,
                                            .retry_period_ms = 2000}};
}

struct server_ctx {
    const struct egpu_cli_spec *spec;
    struct egpu_cli_server *s;
};

/* Apply one common setting (from a flag or a variable named by who). */
static int apply_common(const char *prog, struct egpu_cli_server *s, int opt, const char *v,
                        const char *who)
{
    uint64_t u;

    switch (opt) {
    case O_LISTEN:
    case O_HEALTH_LISTEN:
        *(opt == O_LISTEN ? &s->listen : &s->health_listen) = v;
        return 0;
    case O_PORT:
    case O_HEALTH_PORT:
        if (egpu_cli_parse_u64(v, 0, 65535, &u))
            return egpu_cli_usage_error(
                prog, "%s \"%s\": expected a port in 0..65535 (0 = any free port)", who, v);
        *(opt == O_PORT ? &s->port : &s->health_port) = (unsigned)u;
        return 0;
    case O_MAX_CONN:
        return egpu_cli_http_limit(prog, who, v, false, &s->max_connections);
    case O_MAX_PER_CLIENT:
        return egpu_cli_http_limit(prog, who, v, false, &s->max_per_client);
    case O_HEALTH_PER_CLIENT:
        return egpu_cli_http_limit(prog, who, v, false, &s->health_max_per_client);
    case O_HANDSHAKE_TIMEOUT:
        return egpu_cli_http_limit(prog, who, v, true, &s->handshake_timeout_s);
    case O_IDLE_TIMEOUT:
        return egpu_cli_http_limit(prog, who, v, true, &s->idle_timeout_s);
    case O_REQUEST_TIMEOUT:
        return egpu_cli_http_limit(prog, who, v, true, &s->request_timeout_s);
    case O_THREADS:
        if (egpu_cli_parse_u64(v, 1, 64, &u))
            return egpu_cli_usage_error(prog, "%s \"%s\": expected 1..64 threads", who, v);
        s->threads = (unsigned)u;
        return 0;
    case O_MAX_BODY:
        if (egpu_cli_parse_u64(v, 4096, 1UL << 30, &u))
            return egpu_cli_usage_error(prog, "%s \"%s\": expected bytes in 4096..1073741824", who,
                                        v);
        s->max_body_bytes = u;
        return 0;
    case O_CERT:
    case O_KEY:
        *(opt == O_CERT ? &s->tls_cert : &s->tls_key) = v;
        return 0;
    case O_CLIENT_CA:
        s->tls_client_ca = v;
        return 0;
    case O_CLIENT_CN:
        if (v[0] == '\0' || strlen(v) > EGPU_HTTP_TLS_CLIENT_CN_MAX)
            return egpu_cli_usage_error(prog, "%s \"%s\": expected a common name of 1..%d bytes",
                                        who, v, EGPU_HTTP_TLS_CLIENT_CN_MAX);
        s->tls_client_cn = v;
        return 0;
    case O_KUBECONFIG:
    case O_CONTEXT:
        *(opt == O_KUBECONFIG ? &s->kubeconfig : &s->context) = v;
        return 0;
    case O_WATCH_UNHEALTHY:
        if (egpu_cli_parse_u64(v, 1, 3600, &u))
            return egpu_cli_usage_error(prog, "%s \"%s\": expected seconds, 1..3600", who, v);
        s->watch_unhealthy_ms = (long)u * 1000;
        return 0;
    case O_LOG:
        if (egpu_log_parse_level(v, &s->log_level))
            return egpu_cli_usage_error(prog, "%s \"%s\": expected error, warn, info or debug", who,
                                        v);
        return 0;
    case O_V:
        if (egpu_log_parse_v(v, &s->log_level))
            return egpu_cli_usage_error(prog, "%s \"%s\": expected a verbosity in 0..%d", who, v,
                                        EGPU_LOG_V_MAX);
        return 0;
    case O_LEADER:
        if (egpu_cli_parse_bool(v, &s->lease.elect))
            return egpu_cli_usage_error(prog, "%s \"%s\": expected true or false", who, v);
        return 0;
    case O_LEASE_NS:
    case O_LEASE_NAME:
        if (v[0] == '\0' || strlen(v) >= 254)
            return egpu_cli_usage_error(prog, "%s \"%s\": expected a name of 1..253 characters",
                                        who, v);
        *(opt == O_LEASE_NS ? &s->lease.ns : &s->lease.name) = v;
        return 0;
    case O_LEASE_DUR:
    case O_RENEW:
    case O_RETRY:
        if (egpu_cli_parse_u64(v, 1, 3600, &u))
            return egpu_cli_usage_error(prog, "%s \"%s\": expected seconds in 1..3600", who, v);
        *(opt == O_LEASE_DUR ? &s->lease.duration_ms
          : opt == O_RENEW   ? &s->lease.renew_deadline_ms
                             : &s->lease.retry_period_ms) = (long)u * 1000;
        return 0;
    default:
        return egpu_cli_usage_error(prog, "unknown setting");
    }
}

static int apply_server(void *ctx, int opt, const char *v, const char *who)
{
    struct server_ctx *c = ctx;

    if (opt >= O_LISTEN)
        return apply_common(c->spec->prog, c->s, opt, v, who);
    if (c->spec->apply == NULL)
        return egpu_cli_usage_error(c->spec->prog, "unknown setting");
    return c->spec->apply(c->spec->ctx, opt, v, who);
}

int egpu_cli_parse_server(int argc, char **argv, const struct egpu_cli_spec *spec,
                          struct egpu_cli_server *s)
{
    struct option opts[NOPTS_MAX + NCOMMON + 3];
    struct egpu_cli_env env[NOPTS_MAX + NCOMMON];
    struct server_ctx ctx = {spec, s};
    size_t nopt = 0, nenv = 0;
    int rc;

    for (size_t i = 0; i < NCOMMON; i++) {
        if (!(spec->groups & common_flags[i].group))
            continue;
        opts[nopt++] =
            (struct option){common_flags[i].name, required_argument, NULL, common_flags[i].opt};
        if (common_flags[i].var != NULL)
            env[nenv++] = (struct egpu_cli_env){common_flags[i].var, common_flags[i].opt};
    }
    for (size_t i = 0; i < spec->nflags; i++) {
        const struct egpu_cli_flag *f = &spec->flags[i];

        if (nopt >= NOPTS_MAX + NCOMMON || f->opt < 256 || f->opt >= O_LISTEN)
            return egpu_cli_usage_error(spec->prog, "flag table: --%s", f->name);
        opts[nopt++] = (struct option){f->name, f->has_arg, NULL, f->opt};
        if (f->var != NULL)
            env[nenv++] = (struct egpu_cli_env){f->var, f->opt};
    }
    opts[nopt++] = (struct option){"help", no_argument, NULL, 'h'};
    opts[nopt++] = (struct option){"version", no_argument, NULL, O_VERSION};
    opts[nopt] = (struct option){NULL, 0, NULL, 0};
    rc = egpu_cli_parse(argc, argv, opts, O_VERSION, env, nenv, spec->prog, EGPU_VERSION,
                        spec->usage, apply_server, &ctx);
    if (rc != -1)
        return rc;
    if ((spec->groups & EGPU_CLI_TLS) && spec->tls_required != NULL &&
        (s->tls_cert == NULL || s->tls_key == NULL))
        return egpu_cli_usage_error(spec->prog, "--tls-cert and --tls-key are required (%s)",
                                    spec->tls_required);
    if ((spec->groups & EGPU_CLI_TLS) && (s->tls_cert == NULL) != (s->tls_key == NULL))
        return egpu_cli_usage_error(spec->prog, "--tls-cert and --tls-key go together");
    if ((spec->groups & EGPU_CLI_TLS) && s->tls_client_ca != NULL && s->tls_cert == NULL)
        return egpu_cli_usage_error(spec->prog, "--tls-client-ca needs --tls-cert and --tls-key "
                                                "(client certificates are asked for over HTTPS)");
    if ((spec->groups & EGPU_CLI_TLS) && s->tls_client_cn != NULL && s->tls_client_ca == NULL)
        return egpu_cli_usage_error(spec->prog, "--tls-client-cn needs --tls-client-ca (the CA "
                                                "that signs the certificate it names)");
    if ((spec->groups & EGPU_CLI_HEALTH) && s->port != 0 && s->port == s->health_port)
        return egpu_cli_usage_error(spec->prog,
                                    "--port and --health-port must differ (both are %u)", s->port);
    if ((spec->groups & EGPU_CLI_LEASE) && s->lease.elect &&
        (s->lease.duration_ms <= s->lease.renew_deadline_ms ||
         s->lease.renew_deadline_ms * 10 <= s->lease.retry_period_ms * 12))
        return egpu_cli_usage_error(spec->prog, "leader election needs --lease-duration > "
                                                "--renew-deadline > 1.2 x --retry-period");
    return -1;
}
