/* egpu/cli.h - what every Elastic GPU binary's command line needs: whole
 * flag values parsed strictly, and one way to report a bad one.
 *
 * A flag value is accepted only whole ("12x", " 12" and "" are refused), so a
 * typo never silently becomes a default. Bad usage exits with status 2 after
 * one line naming the flag and the allowed values, and a hint to --help.
 */
#ifndef EGPU_CLI_H
#define EGPU_CLI_H

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "egpu/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Print "<prog>: <message>\nTry '<prog> --help'.\n" on stderr. Returns 2,
 * the exit status for bad usage, so `return egpu_cli_usage_error(...)`. */
int egpu_cli_usage_error(const char *prog, const char *fmt, ...) EGPU_PRINTF(2, 3);

/* s as a decimal integer in [lo, hi]. Returns 0 or -EINVAL (not a whole
 * number of digits, or out of range); *out written only on success. */
int egpu_cli_parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out) EGPU_MUST_CHECK;

/* s as a number (strtod syntax) in [lo, hi]. Returns 0 or -EINVAL. */
int egpu_cli_parse_double(const char *s, double lo, double hi, double *out) EGPU_MUST_CHECK;

/* "true"/"1" or "false"/"0". Returns 0 or -EINVAL. */
int egpu_cli_parse_bool(const char *s, bool *out) EGPU_MUST_CHECK;

/* The value of one of the HTTP server flags every server binary takes:
 * connections (--max-connections, --max-per-client: 1..65536) when seconds
 * is false, else seconds (--idle-timeout, --request-timeout: 1..3600), into
 * *out (struct egpu_http_config's units). who names the flag or variable.
 * Returns 0, or egpu_cli_usage_error's 2 after a message for prog naming who
 * and the allowed values; *out written only on success. */
int egpu_cli_http_limit(const char *prog, const char *who, const char *v, bool seconds,
                        unsigned *out);

/* An environment variable that sets the same thing as a flag. */
struct egpu_cli_env {
    const char *var; /* e.g. "EGPU_PORT" */
    int opt;         /* the flag's getopt_long value */
};

/* Apply one setting; who names its source ("--port" or "EGPU_PORT") for
 * messages. Returns 0, or the exit status of egpu_cli_usage_error. */
typedef int (*egpu_cli_apply_cb)(void *ctx, int opt, const char *value, const char *who);

/* The command-line driver every binary shares: apply the set (non-empty)
 * variables of env, then the flags of argv (so a flag wins over its
 * variable); answer -h/--help with usage on stdout and the option whose
 * value is version_opt with "<prog> <version>". longopts is getopt_long's
 * table, ending with a zero entry. Returns -1 to run, 0 when help or the
 * version was printed, or 2 after an unknown option, a missing value, an
 * extra argument or a value apply refused (the message is on stderr). */
int egpu_cli_parse(int argc, char **argv, const struct option *longopts, int version_opt,
                   const struct egpu_cli_env *env, size_t nenv, const char *prog,
                   const char *version, const char *usage, egpu_cli_apply_cb apply, void *ctx);

/* ------------------------------------------------------------------------ */
/* The flags every long-running server shares                               */

/* Groups of common flags; a server takes the groups it names in
 * struct egpu_cli_spec's flags. Each flag has an EGPU_* variable, and the
 * message for a bad value is the same in every binary. */
enum egpu_cli_group {
    EGPU_CLI_LISTEN = 1u << 0, /* --listen ADDR, --port N (EGPU_LISTEN, EGPU_PORT) */
    EGPU_CLI_HEALTH = 1u << 1, /* --health-listen ADDR, --health-port N,
                                  --health-max-per-client N (EGPU_HEALTH_*); --port and
                                  --health-port must then differ */
    EGPU_CLI_LIMITS = 1u << 2, /* --max-connections, --max-per-client (on --port),
                                  --idle-timeout, --request-timeout (EGPU_MAX_CONNECTIONS,
                                  ...) */
    EGPU_CLI_POOL = 1u << 3,   /* --threads N (1..64), --max-body BYTES (4096..1 GiB) */
    EGPU_CLI_TLS = 1u << 4,    /* --tls-cert FILE, --tls-key FILE: both or neither;
                                  --tls-client-ca FILE (needs them), --tls-client-cn NAME
                                  (needs --tls-client-ca; 1..255 bytes), --handshake-timeout
                                  S (1..3600) (EGPU_TLS_CERT, EGPU_TLS_KEY,
                                  EGPU_TLS_CLIENT_CA, EGPU_TLS_CLIENT_CN,
                                  EGPU_HANDSHAKE_TIMEOUT) */
    EGPU_CLI_KUBE = 1u << 5,   /* --kubeconfig FILE, --context NAME (EGPU_KUBECONFIG,
                                  EGPU_CONTEXT; $KUBECONFIG is egpu_kube_config_load's) */
    EGPU_CLI_WATCH = 1u << 6,  /* --watch-unhealthy-seconds S (1..3600) */
    EGPU_CLI_LOG = 1u << 7,    /* --log-level L, --v N (EGPU_LOG_LEVEL, EGPU_V): egpu/log.h's
                                  egpu_log_parse_level and egpu_log_parse_v */
    EGPU_CLI_ALL = 0xffu,      /* all of the above: a server with its own routes beside the
                                  probes */
    EGPU_CLI_LEASE = 1u << 8,  /* leader election on a Lease: --leader-elect BOOL,
                                  --lease-namespace NS, --lease-name NAME (EGPU_LEADER_ELECT,
                                  EGPU_LEASE_NAMESPACE, EGPU_LEASE_NAME; names 1..253
                                  characters), --lease-duration, --renew-deadline,
                                  --retry-period (seconds, 1..3600); with leader election
                                  on, lease-duration > renew-deadline > 1.2 x retry-period */
};

/* The --help entries of --v and --log-level (EGPU_CLI_LOG), the same in
 * every server's usage text: IND is the string literal of spaces that
 * indents the usage's descriptions (each line of text is at most 50
 * columns, so up to 30 columns of IND keep it within 80). */
#define EGPU_CLI_LOG_HELP(IND)                                               \
    "  --v N\n" IND "klog verbosity, 0..10 (EGPU_V; default 2),\n" IND       \
    "the same in every Elastic GPU binary. 0:\n" IND                         \
    "errors, warnings and what an operator always\n" IND                     \
    "wants (start, stop, addresses served,\n" IND                            \
    "leadership, certificates, card health); 2:\n" IND                       \
    "also one line per event (a pod bound, a\n" IND                          \
    "container allocated, a request denied); 4:\n" IND                       \
    "also debugging detail (each request served)\n"                          \
    "  --log-level L\n" IND "the same by name (EGPU_LOG_LEVEL): error\n" IND \
    "(errors only), warn (and warnings), info\n" IND "(= --v 2) or debug (= --v 4)\n"

/* The common settings, as struct egpu_http_config and the probes use them.
 * Strings are borrowed from argv or the environment. */
struct egpu_cli_server {
    const char *listen;             /* address of the component's own server */
    unsigned port;                  /* its port; 0 = any free port */
    const char *health_listen;      /* EGPU_CLI_HEALTH: address of /healthz, /readyz, /metrics */
    unsigned health_port;           /* their port; 0 = any free port */
    unsigned max_connections;       /* open connections per port at most */
    unsigned max_per_client;        /* from one client address to --port at most */
    unsigned health_max_per_client; /* from one client address to --health-port at most */
    unsigned idle_timeout_s, request_timeout_s;
    unsigned handshake_timeout_s;   /* TLS: close a connection not through its handshake */
    unsigned threads;               /* HTTP pool threads of the component's own server */
    size_t max_body_bytes;          /* largest request body it takes */
    const char *tls_cert, *tls_key; /* PEM files; NULL = plain HTTP */
    const char *tls_client_ca;      /* PEM CA bundle clients' certificates must verify to
                                       (mutual TLS); NULL = no client certificate asked */
    const char *tls_client_cn;      /* the common name those certificates must have; NULL =
                                       any */
    const char *kubeconfig, *context;
    long watch_unhealthy_ms; /* not ready while a list or watch has failed this long */
    int log_level;           /* EGPU_LOG_* level, i.e. klog verbosity (egpu/log.h) */
    struct egpu_cli_lease {  /* EGPU_CLI_LEASE */
        bool elect;          /* only the Lease holder acts */
        const char *ns;      /* NULL: the client's namespace */
        const char *name;    /* the component sets its own default */
        long duration_ms, renew_deadline_ms, retry_period_ms;
    } lease;
};

/* The version every binary prints for --version. */
#define EGPU_VERSION            "0.1.0"
/* What --version prints, for the binary named by the string literal PROG:
 * "<prog> <version>\n", as egpu_cli_parse_server does. For the binaries
 * with their own flag parsing (egpu-sim, kubectl-egpu, egpu-vcuda-inspect,
 * which links no src/net). */
#define EGPU_VERSION_LINE(PROG) PROG " " EGPU_VERSION "\n"

/* One of a server's own flags and the variable that sets the same thing. */
struct egpu_cli_flag {
    const char *name; /* "scheduler-name" for --scheduler-name */
    int has_arg;      /* getopt_long's required_argument or no_argument */
    int opt;          /* the value apply gets: 256..4095 (the common ones use 4096 and up) */
    const char *var;  /* "EGPU_SCHEDULER_NAME", or NULL when there is none */
};

/* One server binary's command line: the common groups it takes and its own
 * flags; -h/--help and --version are added. */
struct egpu_cli_spec {
    const char *prog;                  /* "egpu-scheduler": messages start with it */
    const char *usage;                 /* printed by --help, whole */
    unsigned groups;                   /* enum egpu_cli_group bits */
    const char *tls_required;          /* with EGPU_CLI_TLS: NULL = optional, else both files are
                                          required and this says why, e.g. "the API server calls
                                          webhooks over HTTPS only" */
    const struct egpu_cli_flag *flags; /* own flags (their variables are applied after the
                                          common ones) */
    size_t nflags;
    egpu_cli_apply_cb apply; /* applies an own flag or variable; NULL when none */
    void *ctx;               /* apply's */
};

/* The defaults every server shares: listen and health_listen "0.0.0.0", the
 * HTTP limits of egpu/net.h (256 connections, 32 per client on either port,
 * 120 s idle, 10 s per request, 5 s per TLS handshake), 2 threads, a 1 MiB body, 30 s of failing
 * watch, logs at EGPU_LOG_INFO (--v 2), leader election on with client-go's timings (15 s lease, 10
 * s renew deadline, 2 s retry); no ports, TLS, kubeconfig or Lease name. A component sets its own
 * after this. */
void egpu_cli_server_defaults(struct egpu_cli_server *s);

/* Parse a server's command line with egpu_cli_parse: the variables of the
 * common groups, then spec's own, then argv (a flag wins over its
 * variable). A common setting goes into *s (which keeps what it holds,
 * normally egpu_cli_server_defaults' values, where nothing sets it); an own
 * one goes to spec->apply. After the flags it checks the pairs: with
 * EGPU_CLI_TLS "--tls-cert and --tls-key go together" (or, with
 * tls_required, "are required (<why>)"), that --tls-client-ca comes with
 * them and --tls-client-cn with --tls-client-ca, then with EGPU_CLI_HEALTH that
 * --port and --health-port differ unless --port is 0, then with
 * EGPU_CLI_LEASE and leader election on the Lease timings' order. Returns -1 to run, 0
 * after --help or --version ("<prog> EGPU_VERSION"), or 2 after bad usage (one line on stderr
 * naming the flag or variable and the allowed values). */
int egpu_cli_parse_server(int argc, char **argv, const struct egpu_cli_spec *spec,
                          struct egpu_cli_server *s);

#ifdef __cplusplus
}
#endif

#endif /* EGPU_CLI_H */
