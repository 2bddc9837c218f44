/* tests/unit/test_controller_options.c - egpu-controller's flags and
 * variables (src/controller/options.c with egpu_cli_parse_server's groups):
 * the defaults, every flag and the variable of each (the flag winning),
 * --help naming every flag it accepts, the flags of other components
 * refused, and each refusal with its exact message and exit status 2 before
 * anything starts.
 */
#include "testutil.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "../../src/controller/controller_int.h"
#include "egpu/log.h"

#define ARGS(...)                                                                   \
    (int)(sizeof((const char *[]){__VA_ARGS__}) / sizeof(char *)), (const char *[]) \
    {                                                                               \
        __VA_ARGS__                                                                 \
    }

/* Parse with stdout and stderr caught: out gets what was printed on them
 * (stdout first). Returns what egpu__controller_options_parse returns. */
static int parse_out(struct egpu__controller_options *o, char *out, size_t len, int argc,
                     const char **argv)
{
    FILE *so = stdout, *se = stderr, *f = tmpfile();
    size_t n;
    int rc;

    assert_non_null(f);
    stdout = f;
    stderr = f;
    rc = egpu__controller_options_parse(argc, (char **)argv, o);
    fflush(f);
    stdout = so;
    stderr = se;
    rewind(f);
    n = fread(out, 1, len - 1, f);
    out[n] = '\0';
    fclose(f);
    return rc;
}

static int parse(struct egpu__controller_options *o, int argc, const char **argv)
{
    char out[8192];

    return parse_out(o, out, sizeof(out), argc, argv);
}

static void test_defaults(void **state)
{
    struct egpu__controller_options o;

    (void)state;
    assert_int_equal(parse(&o, ARGS("egpu-controller")), -1);
    assert_int_equal(o.resync_ms, 30000);
    assert_int_equal(o.meter_ms, 30000);
    assert_false(o.dra);
    assert_int_equal(o.dra_gc_ms, 3600000);
    assert_string_equal(o.srv.listen, "0.0.0.0");
    assert_int_equal(o.srv.port, 9090);
    assert_null(o.srv.kubeconfig);
    assert_null(o.srv.context);
    assert_int_equal(o.srv.max_connections, 64);
    assert_int_equal(o.srv.max_per_client, 8);
    assert_int_equal(o.srv.idle_timeout_s, 30);
    assert_int_equal(o.srv.request_timeout_s, 5);
    assert_int_equal(o.srv.watch_unhealthy_ms, 30000);
    assert_int_equal(o.srv.log_level, EGPU_LOG_INFO);
    assert_true(o.srv.lease.elect);
    assert_null(o.srv.lease.ns);
    assert_string_equal(o.srv.lease.name, "elastic-gpu-controller");
    assert_int_equal(o.srv.lease.duration_ms, 15000);
    assert_int_equal(o.srv.lease.renew_deadline_ms, 10000);
    assert_int_equal(o.srv.lease.retry_period_ms, 2000);
}

static void test_every_flag(void **state)
{
    struct egpu__controller_options o;

    (void)state;
    assert_int_equal(
        parse(&o,
              ARGS("egpu-controller", "--listen", "127.0.0.1", "--port", "0", "--kubeconfig", "kc",
                   "--context", "ctx", "--resync-seconds", "86400", "--meter-seconds", "3600",
                   "--leader-elect", "false", "--lease-namespace", "ns1", "--lease-name", "l1",
                   "--lease-duration", "30", "--renew-deadline", "20", "--retry-period", "5",
                   "--watch-unhealthy-seconds", "7", "--max-connections", "10", "--max-per-client",
                   "3", "--idle-timeout", "60", "--request-timeout", "5", "--log-level", "warn")),
        -1);
    assert_string_equal(o.srv.listen, "127.0.0.1");
    assert_int_equal(o.srv.port, 0);
    assert_string_equal(o.srv.kubeconfig, "kc");
    assert_string_equal(o.srv.context, "ctx");
    assert_int_equal(o.resync_ms, 86400000);
    assert_int_equal(o.meter_ms, 3600000);
    assert_false(o.srv.lease.elect);
    assert_string_equal(o.srv.lease.ns, "ns1");
    assert_string_equal(o.srv.lease.name, "l1");
    assert_int_equal(o.srv.lease.duration_ms, 30000);
    assert_int_equal(o.srv.lease.renew_deadline_ms, 20000);
    assert_int_equal(o.srv.lease.retry_period_ms, 5000);
    assert_int_equal(o.srv.watch_unhealthy_ms, 7000);
    assert_int_equal(o.srv.max_connections, 10);
    assert_int_equal(o.srv.max_per_client, 3);
    assert_int_equal(o.srv.idle_timeout_s, 60);
    assert_int_equal(o.srv.request_timeout_s, 5);
    assert_int_equal(o.srv.log_level, EGPU_LOG_WARN);
    assert_int_equal(parse(&o, ARGS("egpu-controller", "--resync-seconds", "1", "--v", "4")), -1);
    assert_int_equal(o.resync_ms, 1000);
    assert_int_equal(o.srv.log_level, EGPU_LOG_DEBUG);
    assert_int_equal(
        parse(&o, ARGS("egpu-controller", "--mode", "dra", "--dra-template-gc-seconds", "2592000")),
        -1);
    assert_true(o.dra);
    assert_int_equal(o.dra_gc_ms, 2592000000L);
    assert_int_equal(parse(&o, ARGS("egpu-controller", "--mode", "dra", "--mode", "device-plugin")),
                     -1);
    assert_false(o.dra);
}

static void test_variables_and_flag_wins(void **state)
{
    static const char *const vars[][2] = {
        {"EGPU_LISTEN", "10.0.0.1"},
        {"EGPU_PORT", "9191"},
        {"EGPU_KUBECONFIG", "/kc"},
        {"EGPU_CONTEXT", "c2"},
        {"EGPU_RESYNC_SECONDS", "45"},
        {"EGPU_METER_SECONDS", "7"},
        {"EGPU_LEADER_ELECT", "0"},
        {"EGPU_LEASE_NAMESPACE", "n"},
        {"EGPU_LEASE_NAME", "from-env"},
        {"EGPU_WATCH_UNHEALTHY_SECONDS", "9"},
        {"EGPU_MAX_CONNECTIONS", "11"},
        {"EGPU_MAX_PER_CLIENT", "4"},
        {"EGPU_IDLE_TIMEOUT", "61"},
        {"EGPU_REQUEST_TIMEOUT", "6"},
        {"EGPU_LOG_LEVEL", "error"},
        {"EGPU_MODE", "dra"},
        {"EGPU_DRA_TEMPLATE_GC_SECONDS", "5"},
    };
    struct egpu__controller_options o;

    (void)state;
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
        setenv(vars[i][0], vars[i][1], 1);
    assert_int_equal(parse(&o, ARGS("egpu-controller")), -1);
    assert_string_equal(o.srv.listen, "10.0.0.1");
    assert_int_equal(o.srv.port, 9191);
    assert_string_equal(o.srv.kubeconfig, "/kc");
    assert_string_equal(o.srv.context, "c2");
    assert_int_equal(o.resync_ms, 45000);
    assert_int_equal(o.meter_ms, 7000);
    assert_false(o.srv.lease.elect);
    assert_string_equal(o.srv.lease.ns, "n");
    assert_string_equal(o.srv.lease.name, "from-env");
    assert_int_equal(o.srv.watch_unhealthy_ms, 9000);
    assert_int_equal(o.srv.max_connections, 11);
    assert_int_equal(o.srv.max_per_client, 4);
    assert_int_equal(o.srv.idle_timeout_s, 61);
    assert_int_equal(o.srv.request_timeout_s, 6);
    assert_int_equal(o.srv.log_level, EGPU_LOG_ERROR);
    assert_true(o.dra);
    assert_int_equal(o.dra_gc_ms, 5000);
    /* The flag wins over its variable. */
    assert_int_equal(parse(&o, ARGS("egpu-controller", "--resync-seconds", "2", "--lease-name",
                                    "from-flag", "--port", "1")),
                     -1);
    assert_int_equal(o.resync_ms, 2000);
    assert_string_equal(o.srv.lease.name, "from-flag");
    assert_int_equal(o.srv.port, 1);
    /* A bad variable is refused as its flag would be, named. */
    setenv("EGPU_RESYNC_SECONDS", "0", 1);
    {
        char out[1024];

        assert_int_equal(parse_out(&o, out, sizeof(out), ARGS("egpu-controller")), 2);
        assert_string_equal(out, "egpu-controller: EGPU_RESYNC_SECONDS \"0\": expected seconds "
                                 "in 1..86400\nTry 'egpu-controller --help'.\n");
    }
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
        unsetenv(vars[i][0]);
}

static void test_help_and_version(void **state)
{
    static const char *const flags[] = {
        "--listen",
        "--port",
        "--kubeconfig",
        "--context",
        "--resync-seconds",
        "--meter-seconds",
        "--mode",
        "--dra-template-gc-seconds",
        "--leader-elect",
        "--lease-namespace",
        "--lease-name",
        "--lease-duration",
        "--renew-deadline",
        "--retry-period",
        "--watch-unhealthy-seconds",
        "--max-connections",
        "--max-per-client",
        "--idle-timeout",
        "--request-timeout",
        "--log-level",
        "--v",
        "--help",
        "--version",
    };
    struct egpu__controller_options o;
    char out[8192];

    (void)state;
    assert_int_equal(parse_out(&o, out, sizeof(out), ARGS("egpu-controller", "--help")), 0);
    assert_non_null(strstr(out, "Usage: egpu-controller [OPTION]...\n"));
    for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++) {
        char *at = strstr(out, flags[i]);

        if (at == NULL)
            fail_msg("--help does not name %s", flags[i]);
        /* Every flag the parser accepts is in --help, and the other way. */
        if (strcmp(flags[i], "--help") != 0 && strcmp(flags[i], "--version") != 0 &&
            strcmp(flags[i], "--leader-elect") != 0) {
            const char *v = strcmp(flags[i], "--log-level") == 0 ? "info"
                            : strcmp(flags[i], "--mode") == 0    ? "dra"
                            : strcmp(flags[i], "--listen") == 0 ||
                                    strcmp(flags[i], "--kubeconfig") == 0 ||
                                    strcmp(flags[i], "--context") == 0 ||
                                    strcmp(flags[i], "--lease-namespace") == 0 ||
                                    strcmp(flags[i], "--lease-name") == 0
                                ? "x"
                                : "3";

            if (parse(&o, ARGS("egpu-controller", flags[i], v, "--leader-elect", "false")) != -1)
                fail_msg("%s %s refused", flags[i], v);
        }
    }
    assert_int_equal(parse_out(&o, out, sizeof(out), ARGS("egpu-controller", "-h")), 0);
    assert_non_null(strstr(out, "--resync-seconds S"));
    assert_int_equal(parse_out(&o, out, sizeof(out), ARGS("egpu-controller", "--version")), 0);
    assert_non_null(strstr(out, "egpu-controller "));
}

static void test_refusals(void **state)
{
    static const char *const bad[][3] = {
        {"--resync-seconds", "0", "--resync-seconds \"0\": expected seconds in 1..86400"},
        {"--resync-seconds", "86401", "--resync-seconds \"86401\": expected seconds in 1..86400"},
        {"--resync-seconds", "1s", "--resync-seconds \"1s\": expected seconds in 1..86400"},
        {"--resync-seconds", "", "--resync-seconds \"\": expected seconds in 1..86400"},
        {"--meter-seconds", "0", "--meter-seconds \"0\": expected seconds in 1..3600"},
        {"--meter-seconds", "3601", "--meter-seconds \"3601\": expected seconds in 1..3600"},
        {"--mode", "hybrid", "--mode \"hybrid\": expected device-plugin or dra"},
        {"--mode", "DRA", "--mode \"DRA\": expected device-plugin or dra"},
        {"--dra-template-gc-seconds", "0",
         "--dra-template-gc-seconds \"0\": expected seconds in 1..2592000"},
        {"--dra-template-gc-seconds", "2592001",
         "--dra-template-gc-seconds \"2592001\": expected seconds in 1..2592000"},
        {"--port", "65536", "--port \"65536\": expected a port in 0..65535 (0 = any free port)"},
        {"--leader-elect", "yes", "--leader-elect \"yes\": expected true or false"},
        {"--lease-name", "", "--lease-name \"\": expected a name of 1..253 characters"},
        {"--lease-namespace", "", "--lease-namespace \"\": expected a name of 1..253 characters"},
        {"--lease-duration", "0", "--lease-duration \"0\": expected seconds in 1..3600"},
        {"--renew-deadline", "3601", "--renew-deadline \"3601\": expected seconds in 1..3600"},
        {"--retry-period", "x", "--retry-period \"x\": expected seconds in 1..3600"},
        {"--watch-unhealthy-seconds", "0",
         "--watch-unhealthy-seconds \"0\": expected seconds, 1..3600"},
        {"--max-connections", "0", "--max-connections \"0\": expected connections in 1..65536"},
        {"--max-per-client", "65537",
         "--max-per-client \"65537\": expected connections in 1..65536"},
        {"--idle-timeout", "0", "--idle-timeout \"0\": expected seconds in 1..3600"},
        {"--request-timeout", "3601", "--request-timeout \"3601\": expected seconds in 1..3600"},
        {"--log-level", "trace", "--log-level \"trace\": expected error, warn, info or debug"},
        {"--v", "11", "--v \"11\": expected a verbosity in 0..10"},
        /* Other components' flags: the controller has no TLS, pool or
         * second health port. */
        {"--tls-cert", "c", "unknown or incomplete option \"--tls-cert\""},
        {"--threads", "4", "unknown or incomplete option \"--threads\""},
        {"--max-body", "4096", "unknown or incomplete option \"--max-body\""},
        {"--health-port", "9", "unknown or incomplete option \"--health-port\""},
    };
    struct egpu__controller_options o;
    char out[1024], want[1024];

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(want, sizeof(want), "egpu-controller: %s\nTry 'egpu-controller --help'.\n",
                 bad[i][2]);
        assert_int_equal(
            parse_out(&o, out, sizeof(out), ARGS("egpu-controller", bad[i][0], bad[i][1])), 2);
        assert_string_equal(out, want);
    }
    /* A missing value, a stray argument, and leader election's timings out
     * of order. */
    assert_int_equal(parse_out(&o, out, sizeof(out), ARGS("egpu-controller", "--port")), 2);
    assert_string_equal(out, "egpu-controller: unknown or incomplete option \"--port\"\n"
                             "Try 'egpu-controller --help'.\n");
    assert_int_equal(parse_out(&o, out, sizeof(out), ARGS("egpu-controller", "extra")), 2);
    assert_string_equal(out, "egpu-controller: unexpected argument \"extra\"\n"
                             "Try 'egpu-controller --help'.\n");
    assert_int_equal(
        parse_out(&o, out, sizeof(out),
                  ARGS("egpu-controller", "--lease-duration", "10", "--renew-deadline", "10")),
        2);
    assert_string_equal(out, "egpu-controller: leader election needs --lease-duration > "
                             "--renew-deadline > 1.2 x --retry-period\n"
                             "Try 'egpu-controller --help'.\n");
    assert_int_equal(
        parse_out(&o, out, sizeof(out),
                  ARGS("egpu-controller", "--renew-deadline", "12", "--retry-period", "10")),
        2);
    /* Without leader election the timings do not matter. */
    assert_int_equal(parse(&o, ARGS("egpu-controller", "--leader-elect", "false",
                                    "--lease-duration", "10", "--renew-deadline", "10")),
                     -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_every_flag),
        cmocka_unit_test(test_variables_and_flag_wins),
        cmocka_unit_test(test_help_and_version),
        cmocka_unit_test(test_refusals),
    };

    egpu_log_level = -1;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
