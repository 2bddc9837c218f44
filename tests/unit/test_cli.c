/* tests/unit/test_cli.c - strict flag value parsing shared by the binaries. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "testutil.h"
#include "egpu/cli.h"
#include "egpu/log.h"
#include "egpu/net.h"

static void test_u64(void **state)
{
    uint64_t v = 7;

    (void)state;
    assert_int_equal(egpu_cli_parse_u64("42", 0, 100, &v), 0);
    assert_int_equal(v, 42);
    assert_int_equal(egpu_cli_parse_u64("18446744073709551615", 0, UINT64_MAX, &v), 0);
    assert_true(v == UINT64_MAX);
    v = 7;
    /* Partial, signed, spaced, empty, out of range and overflowing values
     * are refused and leave *out alone. */
    const char *bad[] = {"", "12x", " 12", "-1", "+1", "101", "18446744073709551616", "0x10"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(egpu_cli_parse_u64(bad[i], 0, 100, &v), -EINVAL);
    assert_int_equal(egpu_cli_parse_u64(NULL, 0, 100, &v), -EINVAL);
    assert_int_equal(v, 7);
    assert_int_equal(egpu_cli_parse_u64("0", 1, 5, &v), -EINVAL);
}

static void test_double_and_bool(void **state)
{
    double d = -1;
    bool b = false;

    (void)state;
    assert_int_equal(egpu_cli_parse_double("1.3", 0.01, 100, &d), 0);
    assert_true(fabs(d - 1.3) < 1e-12);
    assert_int_equal(egpu_cli_parse_double("1e-9", 1e-9, 1, &d), 0);
    assert_int_equal(egpu_cli_parse_double("", 0, 1, &d), -EINVAL);
    assert_int_equal(egpu_cli_parse_double("0.5x", 0, 1, &d), -EINVAL);
    assert_int_equal(egpu_cli_parse_double("nan", 0, 1, &d), -EINVAL);
    assert_int_equal(egpu_cli_parse_double("2", 0, 1, &d), -EINVAL);
    assert_int_equal(egpu_cli_parse_bool("true", &b), 0);
    assert_true(b);
    assert_int_equal(egpu_cli_parse_bool("0", &b), 0);
    assert_false(b);
    assert_int_equal(egpu_cli_parse_bool("yes", &b), -EINVAL);
    assert_int_equal(egpu_cli_parse_bool("TRUE", &b), -EINVAL);
}

struct seen {
    char port[16];
    char who[32];
    int calls;
};

static int record(void *ctx, int opt, const char *value, const char *who)
{
    struct seen *s = ctx;

    (void)opt;
    if (strcmp(value, "bad") == 0)
        return egpu_cli_usage_error("t", "%s: bad value", who);
    snprintf(s->port, sizeof(s->port), "%s", value);
    snprintf(s->who, sizeof(s->who), "%s", who);
    s->calls++;
    return 0;
}

/* The shared driver: a variable applies, a flag wins over it, help and the
 * version answer 0, bad usage answers 2. */
/* The HTTP server flags both server binaries take: one range check and one
 * message for each. */
static void test_http_limit(void **state)
{
    unsigned v = 7;

    (void)state;
    assert_int_equal(egpu_cli_http_limit("p", "--max-connections", "65536", false, &v), 0);
    assert_int_equal(v, 65536);
    assert_int_equal(egpu_cli_http_limit("p", "--idle-timeout", "3600", true, &v), 0);
    assert_int_equal(v, 3600);
    assert_int_equal(egpu_cli_http_limit("p", "--idle-timeout", "3601", true, &v), 2);
    assert_int_equal(egpu_cli_http_limit("p", "--max-per-client", "0", false, &v), 2);
    assert_int_equal(egpu_cli_http_limit("p", "--max-per-client", "65537", false, &v), 2);
    assert_int_equal(egpu_cli_http_limit("p", "EGPU_REQUEST_TIMEOUT", "1s", true, &v), 2);
    assert_int_equal(v, 3600);
}

static void test_parse_driver(void **state)
{
    static const struct option longopts[] = {
        {"port", required_argument, NULL, 300},
        {"version", no_argument, NULL, 301},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    static const struct egpu_cli_env env[] = {{"EGPU_TEST_PORT", 300}};
    char a0[] = "t", a1[] = "--port", a2[] = "9", a3[] = "extra", a4[] = "--nope", a5[] = "bad",
         a6[] = "--version";
    struct seen s;

    (void)state;
    memset(&s, 0, sizeof(s));
    setenv("EGPU_TEST_PORT", "7", 1);
    {
        char *argv[] = {a0, NULL};

        assert_int_equal(egpu_cli_parse(1, argv, longopts, 301, env, 1, "t", "1", "", record, &s),
                         -1);
        assert_string_equal(s.port, "7");
        assert_string_equal(s.who, "EGPU_TEST_PORT");
    }
    {
        char *argv[] = {a0, a1, a2, NULL};

        assert_int_equal(egpu_cli_parse(3, argv, longopts, 301, env, 1, "t", "1", "", record, &s),
                         -1);
        assert_string_equal(s.port, "9");
        assert_string_equal(s.who, "--port");
    }
    unsetenv("EGPU_TEST_PORT");
    {
        char *argv[] = {a0, a3, NULL};

        assert_int_equal(egpu_cli_parse(2, argv, longopts, 301, env, 1, "t", "1", "", record, &s),
                         2);
    }
    {
        char *argv[] = {a0, a4, NULL};

        assert_int_equal(egpu_cli_parse(2, argv, longopts, 301, env, 1, "t", "1", "", record, &s),
                         2);
    }
    {
        char *argv[] = {a0, a1, a5, NULL};

        assert_int_equal(egpu_cli_parse(3, argv, longopts, 301, env, 1, "t", "1", "", record, &s),
                         2);
    }
    {
        char *argv[] = {a0, a6, NULL};

        assert_int_equal(egpu_cli_parse(2, argv, longopts, 301, env, 1, "t", "1", "", record, &s),
                         0);
    }
    {
        char *argv[] = {a0, a1, NULL};

        /* --port without its value. */
        assert_int_equal(egpu_cli_parse(2, argv, longopts, 301, env, 1, "t", "1", "", record, &s),
                         2);
    }
    assert_int_equal(s.calls, 3); /* the variable, then the variable and the flag */
}

/* ------------------------------------------------------------------------ */
/* egpu_cli_parse_server: the flags every server shares                     */

#define SARGS(...)                                                                            \
    (sizeof((const char *[]){__VA_ARGS__}) / sizeof(const char *)), (char **)(const char *[]) \
    {                                                                                         \
        __VA_ARGS__, NULL                                                                     \
    }

/* An own flag of the binary under test: --name NAME (EGPU_TEST_NAME). */
struct own {
    const char *name;
    int calls;
};

static int apply_own(void *ctx, int opt, const char *v, const char *who)
{
    struct own *o = ctx;

    if (opt != 300)
        return egpu_cli_usage_error("srv", "unknown setting");
    if (v[0] == '\0')
        return egpu_cli_usage_error("srv", "%s \"%s\": expected a name", who, v);
    o->name = v;
    o->calls++;
    return 0;
}

static const struct egpu_cli_flag own_flags[] = {
    {"name", required_argument, 300, "EGPU_TEST_NAME"},
};

/* The spec of a binary that takes every group, its TLS optional. */
static struct egpu_cli_spec spec_all(struct own *own)
{
    return (struct egpu_cli_spec){.prog = "srv",
                                  .usage = "Usage: srv\n",
                                  .groups = EGPU_CLI_ALL,
                                  .flags = own_flags,
                                  .nflags = 1,
                                  .apply = apply_own,
                                  .ctx = own};
}

/* Run egpu_cli_parse_server with stderr in a file; *msg gets what it wrote. */
static int parse_capture(const struct egpu_cli_spec *spec, struct egpu_cli_server *s, char *msg,
                         size_t len, int argc, char **argv)
{
    FILE *saved = stderr, *f = tmpfile();
    size_t n;
    int rc;

    assert_non_null(f);
    stderr = f;
    rc = egpu_cli_parse_server(argc, argv, spec, s);
    stderr = saved;
    rewind(f);
    n = fread(msg, 1, len - 1, f);
    msg[n] = '\0';
    fclose(f);
    return rc;
}

static void test_server_defaults(void **state)
{
    struct egpu_cli_server s;

    (void)state;
    egpu_cli_server_defaults(&s);
    assert_string_equal(s.listen, "0.0.0.0");
    assert_string_equal(s.health_listen, "0.0.0.0");
    assert_int_equal(s.port, 0);
    assert_int_equal(s.health_port, 0);
    assert_int_equal(s.max_connections, 256);
    assert_int_equal(s.max_per_client, 32);
    assert_int_equal(s.idle_timeout_s, 120);
    assert_int_equal(s.request_timeout_s, 10);
    assert_int_equal(s.threads, 2);
    assert_int_equal(s.max_body_bytes, 1 << 20);
    assert_null(s.tls_cert);
    assert_null(s.tls_client_ca);
    assert_null(s.tls_client_cn);
    assert_null(s.kubeconfig);
    assert_null(s.context);
    assert_int_equal(s.watch_unhealthy_ms, 30000);
    assert_int_equal(s.log_level, EGPU_LOG_INFO);
}

/* Every common flag has its variable, and the flag wins over it. */
static void test_server_flag_and_variable(void **state)
{
    static const char *const vars[][2] = {
        {"EGPU_LISTEN", "10.0.0.1"},
        {"EGPU_PORT", "7001"},
        {"EGPU_HEALTH_LISTEN", "10.0.0.2"},
        {"EGPU_HEALTH_PORT", "7002"},
        {"EGPU_MAX_CONNECTIONS", "11"},
        {"EGPU_MAX_PER_CLIENT", "12"},
        {"EGPU_IDLE_TIMEOUT", "13"},
        {"EGPU_REQUEST_TIMEOUT", "14"},
        {"EGPU_THREADS", "15"},
        {"EGPU_MAX_BODY", "16384"},
        {"EGPU_TLS_CERT", "env.crt"},
        {"EGPU_TLS_KEY", "env.key"},
        {"EGPU_TLS_CLIENT_CA", "env-ca.crt"},
        {"EGPU_TLS_CLIENT_CN", "env-cn"},
        {"EGPU_KUBECONFIG", "env.kc"},
        {"EGPU_CONTEXT", "env-ctx"},
        {"EGPU_WATCH_UNHEALTHY_SECONDS", "17"},
        {"EGPU_LOG_LEVEL", "warn"},
        {"EGPU_TEST_NAME", "env-name"},
    };
    struct own own = {0};
    struct egpu_cli_spec spec = spec_all(&own);
    struct egpu_cli_server s;
    char msg[512];

    (void)state;
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
        setenv(vars[i][0], vars[i][1], 1);
    egpu_cli_server_defaults(&s);
    assert_int_equal(parse_capture(&spec, &s, msg, sizeof(msg), SARGS("srv")), -1);
    assert_string_equal(msg, "");
    assert_string_equal(s.listen, "10.0.0.1");
    assert_int_equal(s.port, 7001);
    assert_string_equal(s.health_listen, "10.0.0.2");
    assert_int_equal(s.health_port, 7002);
    assert_int_equal(s.max_connections, 11);
    assert_int_equal(s.max_per_client, 12);
    assert_int_equal(s.idle_timeout_s, 13);
    assert_int_equal(s.request_timeout_s, 14);
    assert_int_equal(s.threads, 15);
    assert_int_equal(s.max_body_bytes, 16384);
    assert_string_equal(s.tls_cert, "env.crt");
    assert_string_equal(s.tls_key, "env.key");
    assert_string_equal(s.tls_client_ca, "env-ca.crt");
    assert_string_equal(s.tls_client_cn, "env-cn");
    assert_string_equal(s.kubeconfig, "env.kc");
    assert_string_equal(s.context, "env-ctx");
    assert_int_equal(s.watch_unhealthy_ms, 17000);
    assert_int_equal(s.log_level, EGPU_LOG_WARN);
    assert_string_equal(own.name, "env-name");

    egpu_cli_server_defaults(&s);
    assert_int_equal(
        parse_capture(&spec, &s, msg, sizeof(msg),
                      SARGS("srv", "--listen", "::", "--port", "8001", "--health-listen",
                            "127.0.0.1", "--health-port", "8002", "--max-connections", "21",
                            "--max-per-client", "22", "--idle-timeout", "23", "--request-timeout",
                            "24", "--threads", "25", "--max-body", "8192", "--tls-cert", "flag.crt",
                            "--tls-key", "flag.key", "--tls-client-ca", "flag-ca.crt",
                            "--tls-client-cn", "flag-cn", "--kubeconfig", "flag.kc", "--context",
                            "flag-ctx", "--watch-unhealthy-seconds", "27", "--log-level", "error",
                            "--name", "flag-name")),
        -1);
    assert_string_equal(s.listen, "::");
    assert_int_equal(s.port, 8001);
    assert_string_equal(s.health_listen, "127.0.0.1");
    assert_int_equal(s.health_port, 8002);
    assert_int_equal(s.max_connections, 21);
    assert_int_equal(s.max_per_client, 22);
    assert_int_equal(s.idle_timeout_s, 23);
    assert_int_equal(s.request_timeout_s, 24);
    assert_int_equal(s.threads, 25);
    assert_int_equal(s.max_body_bytes, 8192);
    assert_string_equal(s.tls_cert, "flag.crt");
    assert_string_equal(s.tls_key, "flag.key");
    assert_string_equal(s.tls_client_ca, "flag-ca.crt");
    assert_string_equal(s.tls_client_cn, "flag-cn");
    assert_string_equal(s.kubeconfig, "flag.kc");
    assert_string_equal(s.context, "flag-ctx");
    assert_int_equal(s.watch_unhealthy_ms, 27000);
    assert_int_equal(s.log_level, EGPU_LOG_ERROR);
    assert_string_equal(own.name, "flag-name");
    assert_int_equal(own.calls, 3); /* the variable, then the variable and the flag */

    /* --v sets the level as klog's verbosity does; EGPU_V too, and the flag wins. */
    setenv("EGPU_V", "4", 1);
    egpu_cli_server_defaults(&s);
    assert_int_equal(parse_capture(&spec, &s, msg, sizeof(msg), SARGS("srv")), -1);
    assert_int_equal(s.log_level, EGPU_LOG_DEBUG);
    assert_int_equal(parse_capture(&spec, &s, msg, sizeof(msg), SARGS("srv", "--v", "3")), -1);
    assert_int_equal(s.log_level, 3); /* the verbosity is the level (egpu/log.h) */
    assert_int_equal(parse_capture(&spec, &s, msg, sizeof(msg), SARGS("srv", "--v=0")), -1);
    assert_int_equal(s.log_level, EGPU_LOG_NOTICE);
    /* --log-level and --v set the same thing: the last one wins. */
    assert_int_equal(
        parse_capture(&spec, &s, msg, sizeof(msg), SARGS("srv", "--v", "0", "--log-level", "info")),
        -1);
    assert_int_equal(s.log_level, EGPU_LOG_INFO);
    unsetenv("EGPU_V");
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
        unsetenv(vars[i][0]);
}

/* A bad value: one line naming the flag (or variable) and the allowed
 * values, a hint to --help, exit status 2; the setting keeps its value. */
static void test_server_bad_values(void **state)
{
    static const char *const bad[][3] = {
        {"--port", "65536",
         "srv: --port \"65536\": expected a port in 0..65535 (0 = any free "
         "port)\nTry 'srv --help'.\n"},
        {"--health-port", "-1",
         "srv: --health-port \"-1\": expected a port in 0..65535 (0 = any "
         "free port)\nTry 'srv --help'.\n"},
        {"--max-connections", "0",
         "srv: --max-connections \"0\": expected connections in "
         "1..65536\nTry 'srv --help'.\n"},
        {"--idle-timeout", "3601",
         "srv: --idle-timeout \"3601\": expected seconds in "
         "1..3600\nTry 'srv --help'.\n"},
        {"--threads", "65", "srv: --threads \"65\": expected 1..64 threads\nTry 'srv --help'.\n"},
        {"--max-body", "4095",
         "srv: --max-body \"4095\": expected bytes in "
         "4096..1073741824\nTry 'srv --help'.\n"},
        {"--watch-unhealthy-seconds", "0",
         "srv: --watch-unhealthy-seconds \"0\": expected "
         "seconds, 1..3600\nTry 'srv --help'.\n"},
        {"--log-level", "trace",
         "srv: --log-level \"trace\": expected error, warn, info or "
         "debug\nTry 'srv --help'.\n"},
        {"--v", "11", "srv: --v \"11\": expected a verbosity in 0..10\nTry 'srv --help'.\n"},
        {"--name", "", "srv: --name \"\": expected a name\nTry 'srv --help'.\n"},
        {"--tls-client-cn", "",
         "srv: --tls-client-cn \"\": expected a common name of 1..255 bytes\nTry 'srv "
         "--help'.\n"},
    };
    struct own own = {0};
    struct egpu_cli_spec spec = spec_all(&own);
    struct egpu_cli_server s;
    char msg[512];

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        egpu_cli_server_defaults(&s);
        assert_int_equal(
            parse_capture(&spec, &s, msg, sizeof(msg), SARGS("srv", bad[i][0], bad[i][1])), 2);
        assert_string_equal(msg, bad[i][2]);
    }
    assert_int_equal(s.port, 0);
    assert_int_equal(s.threads, 2);
    assert_int_equal(s.log_level, EGPU_LOG_INFO);

    /* From a variable, the message names the variable. */
    setenv("EGPU_PORT", "80x", 1);
    egpu_cli_server_defaults(&s);
    assert_int_equal(parse_capture(&spec, &s, msg, sizeof(msg), SARGS("srv")), 2);
    assert_string_equal(msg, "srv: EGPU_PORT \"80x\": expected a port in 0..65535 (0 = any free "
                             "port)\nTry 'srv --help'.\n");
    /* A good flag does not save a bad variable: the variables come first. */
    assert_int_equal(parse_capture(&spec, &s, msg, sizeof(msg), SARGS("srv", "--port", "80")), 2);
    unsetenv("EGPU_PORT");
}

/* The pairs: TLS files go together (or are required), the two ports differ. */
static void test_server_pairs(void **state)
{
    struct own own = {0};
    struct egpu_cli_spec spec = spec_all(&own);
    struct egpu_cli_server s;
    char msg[512];

    (void)state;
    egpu_cli_server_defaults(&s);
    assert_int_equal(parse_capture(&spec, &s, msg, sizeof(msg), SARGS("srv", "--tls-key", "k")), 2);
    assert_string_equal(msg, "srv: --tls-cert and --tls-key go together\nTry 'srv --help'.\n");
    egpu_cli_server_defaults(&s);
    assert_int_equal(parse_capture(&spec, &s, msg, sizeof(msg), SARGS("srv")), -1);
    spec.tls_required = "HTTPS only";
    assert_int_equal(parse_capture(&spec, &s, msg, sizeof(msg), SARGS("srv", "--tls-cert", "c")),
                     2);
    assert_string_equal(
        msg, "srv: --tls-cert and --tls-key are required (HTTPS only)\nTry 'srv --help'.\n");
    egpu_cli_server_defaults(&s);
    assert_int_equal(parse_capture(&spec, &s, msg, sizeof(msg),
                                   SARGS("srv", "--tls-cert", "c", "--tls-key", "k", "--port",
                                         "9000", "--health-port", "9000")),
                     2);
    assert_string_equal(msg, "srv: --port and --health-port must differ (both are 9000)\nTry 'srv "
                             "--help'.\n");
    /* Port 0 twice is two free ports. */
    egpu_cli_server_defaults(&s);
    assert_int_equal(parse_capture(&spec, &s, msg, sizeof(msg),
                                   SARGS("srv", "--tls-cert", "c", "--tls-key", "k")),
                     -1);
    /* A client CA needs the server's own pair; a client name needs the CA. */
    spec.tls_required = NULL;
    egpu_cli_server_defaults(&s);
    assert_int_equal(
        parse_capture(&spec, &s, msg, sizeof(msg), SARGS("srv", "--tls-client-ca", "ca")), 2);
    assert_string_equal(msg, "srv: --tls-client-ca needs --tls-cert and --tls-key (client "
                             "certificates are asked for over HTTPS)\nTry 'srv --help'.\n");
    egpu_cli_server_defaults(&s);
    assert_int_equal(parse_capture(&spec, &s, msg, sizeof(msg),
                                   SARGS("srv", "--tls-cert", "c", "--tls-key", "k",
                                         "--tls-client-cn", "kube-scheduler")),
                     2);
    assert_string_equal(msg, "srv: --tls-client-cn needs --tls-client-ca (the CA that signs the "
                             "certificate it names)\nTry 'srv --help'.\n");
    egpu_cli_server_defaults(&s);
    assert_int_equal(parse_capture(&spec, &s, msg, sizeof(msg),
                                   SARGS("srv", "--tls-cert", "c", "--tls-key", "k",
                                         "--tls-client-ca", "ca", "--tls-client-cn", "ks")),
                     -1);
    assert_string_equal(s.tls_client_ca, "ca");
    assert_string_equal(s.tls_client_cn, "ks");
}

/* Only the groups a binary names are its flags and variables. */
static void test_server_groups(void **state)
{
    struct egpu_cli_spec spec = {
        .prog = "agent", .usage = "Usage: agent\n", .groups = EGPU_CLI_LISTEN | EGPU_CLI_LOG};
    struct egpu_cli_server s;
    char msg[512];

    (void)state;
    egpu_cli_server_defaults(&s);
    assert_int_equal(parse_capture(&spec, &s, msg, sizeof(msg), SARGS("agent", "--port", "9400")),
                     -1);
    assert_int_equal(s.port, 9400);
    assert_int_equal(
        parse_capture(&spec, &s, msg, sizeof(msg), SARGS("agent", "--health-port", "1")), 2);
    assert_string_equal(
        msg, "agent: unknown or incomplete option \"--health-port\"\nTry 'agent --help'.\n");
    setenv("EGPU_THREADS", "0", 1); /* not agent's: not read */
    egpu_cli_server_defaults(&s);
    assert_int_equal(parse_capture(&spec, &s, msg, sizeof(msg), SARGS("agent")), -1);
    assert_int_equal(s.threads, 2);
    unsetenv("EGPU_THREADS");
    /* --help and --version answer 0 and run nothing. */
    assert_int_equal(parse_capture(&spec, &s, msg, sizeof(msg), SARGS("agent", "--version")), 0);
    assert_int_equal(parse_capture(&spec, &s, msg, sizeof(msg), SARGS("agent", "-h")), 0);
}

/* The Lease group: defaults, flags and variables (a flag without one too:
 * a NULL variable must not be looked up), names and the timings' order. */
static void test_server_lease(void **state)
{
    struct egpu_cli_spec spec = {
        .prog = "ctl", .usage = "Usage: ctl\n", .groups = EGPU_CLI_LISTEN | EGPU_CLI_LEASE};
    struct egpu_cli_server s;
    char msg[512];

    (void)state;
    egpu_cli_server_defaults(&s);
    assert_true(s.lease.elect);
    assert_null(s.lease.ns);
    assert_int_equal(s.lease.duration_ms, 15000);
    assert_int_equal(s.lease.renew_deadline_ms, 10000);
    assert_int_equal(s.lease.retry_period_ms, 2000);
    setenv("EGPU_LEASE_NAME", "from-env", 1);
    setenv("EGPU_LEASE_NAMESPACE", "ns-env", 1);
    assert_int_equal(parse_capture(&spec, &s, msg, sizeof(msg),
                                   SARGS("ctl", "--lease-namespace", "ns-flag", "--lease-duration",
                                         "30", "--renew-deadline", "20", "--retry-period", "5",
                                         "--leader-elect", "false")),
                     -1);
    unsetenv("EGPU_LEASE_NAME");
    unsetenv("EGPU_LEASE_NAMESPACE");
    assert_string_equal(s.lease.name, "from-env");
    assert_string_equal(s.lease.ns, "ns-flag");
    assert_false(s.lease.elect);
    assert_int_equal(s.lease.duration_ms, 30000);
    assert_int_equal(s.lease.renew_deadline_ms, 20000);
    assert_int_equal(s.lease.retry_period_ms, 5000);
    egpu_cli_server_defaults(&s);
    assert_int_equal(
        parse_capture(&spec, &s, msg, sizeof(msg), SARGS("ctl", "--lease-duration", "10")), 2);
    assert_string_equal(msg, "ctl: leader election needs --lease-duration > --renew-deadline > "
                             "1.2 x --retry-period\nTry 'ctl --help'.\n");
    /* Without leader election the timings are not used, so not checked. */
    egpu_cli_server_defaults(&s);
    assert_int_equal(parse_capture(&spec, &s, msg, sizeof(msg),
                                   SARGS("ctl", "--lease-duration", "10", "--leader-elect", "0")),
                     -1);
    assert_int_equal(parse_capture(&spec, &s, msg, sizeof(msg), SARGS("ctl", "--lease-name", "")),
                     2);
    assert_string_equal(msg, "ctl: --lease-name \"\": expected a name of 1..253 characters\nTry "
                             "'ctl --help'.\n");
    assert_int_equal(
        parse_capture(&spec, &s, msg, sizeof(msg), SARGS("ctl", "--retry-period", "0")), 2);
    assert_string_equal(msg, "ctl: --retry-period \"0\": expected seconds in 1..3600\nTry 'ctl "
                             "--help'.\n");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_server_lease),
        cmocka_unit_test(test_u64),
        cmocka_unit_test(test_double_and_bool),
        cmocka_unit_test(test_parse_driver),
        cmocka_unit_test(test_http_limit),
        cmocka_unit_test(test_server_defaults),
        cmocka_unit_test(test_server_flag_and_variable),
        cmocka_unit_test(test_server_bad_values),
        cmocka_unit_test(test_server_pairs),
        cmocka_unit_test(test_server_groups),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
