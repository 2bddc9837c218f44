/* tests/unit/test_webhook_options.c - egpu-webhook's flags and variables
 * (src/webhook/options.c): the defaults of the agreed contract, a variable
 * for every flag with the flag winning, and a bad value refused with exit
 * status 2 before anything starts.
 */
#include <getopt.h>
#include <stdlib.h>

#include "webhook_testutil.h"

static int parse(struct egpu__webhook_options *o, int argc, const char **argv)
{
    optind = 0; /* getopt_long starts again */
    return egpu__webhook_options_parse(argc, (char **)argv, o);
}

#define ARGS(...)                                                                   \
    (int)(sizeof((const char *[]){__VA_ARGS__}) / sizeof(char *)), (const char *[]) \
    {                                                                               \
        __VA_ARGS__                                                                 \
    }

static void test_defaults(void **state)
{
    struct egpu__webhook_options o;

    (void)state;
    assert_int_equal(parse(&o, ARGS("egpu-webhook", "--tls-cert", "c", "--tls-key", "k")), -1);
    assert_string_equal(o.srv.listen, "0.0.0.0");
    assert_int_equal(o.srv.port, 9443);
    assert_string_equal(o.srv.health_listen, "0.0.0.0");
    assert_int_equal(o.srv.health_port, 9444);
    assert_string_equal(o.srv.tls_cert, "c");
    assert_string_equal(o.srv.tls_key, "k");
    assert_null(o.srv.kubeconfig);
    assert_null(o.srv.context);
    assert_string_equal(o.cfg.scheduler_name, "elastic-gpu-scheduler");
    assert_true(o.cfg.set_scheduler_name);
    assert_int_equal(o.cfg.mode, EGPU_WEBHOOK_MODE_DEVICE_PLUGIN);
    assert_false(o.cfg.compat_nvidia);
    assert_int_equal(o.cfg.aliyun_mem_mib, 1024);
    assert_int_equal(o.cfg.memory_only_core, 1);
    assert_string_equal(o.cfg.scheduler_user,
                        "system:serviceaccount:elastic-gpu-system:egpu-scheduler");
    assert_string_equal(o.cfg.agent_user, "system:serviceaccount:elastic-gpu-system:egpu-agent");
    assert_string_equal(o.cfg.controller_user,
                        "system:serviceaccount:elastic-gpu-system:egpu-controller");
    assert_int_equal(o.srv.watch_unhealthy_ms, 30000);
    assert_int_equal(o.srv.log_level, EGPU_LOG_INFO);
}

static void test_flags_and_variables(void **state)
{
    struct egpu__webhook_options o;

    (void)state;
    setenv("EGPU_TLS_CERT", "/env/tls.crt", 1);
    setenv("EGPU_TLS_KEY", "/env/tls.key", 1);
    setenv("EGPU_COMPAT_NVIDIA", "true", 1);
    setenv("EGPU_SCHEDULER_NAME", "from-env", 1);
    assert_int_equal(
        parse(&o,
              ARGS("egpu-webhook", "--scheduler-name", "from-flag", "--set-scheduler-name", "false",
                   "--aliyun-gpu-mem-unit", "MiB", "--memory-only-core", "5", "--scheduler-user",
                   "s", "--agent-user", "a", "--controller-user", "c", "--port", "8443",
                   "--health-port", "8444", "--listen", "127.0.0.1", "--kubeconfig", "kc",
                   "--context", "ctx", "--watch-unhealthy-seconds", "7", "--v", "4")),
        -1);
    assert_string_equal(o.srv.tls_cert, "/env/tls.crt");
    assert_string_equal(o.srv.tls_key, "/env/tls.key");
    assert_true(o.cfg.compat_nvidia);
    assert_string_equal(o.cfg.scheduler_name, "from-flag");
    assert_false(o.cfg.set_scheduler_name);
    assert_int_equal(o.cfg.aliyun_mem_mib, 1);
    assert_int_equal(o.cfg.memory_only_core, 5);
    assert_string_equal(o.cfg.scheduler_user, "s");
    assert_string_equal(o.cfg.agent_user, "a");
    assert_string_equal(o.cfg.controller_user, "c");
    assert_int_equal(o.srv.port, 8443);
    assert_int_equal(o.srv.health_port, 8444);
    assert_string_equal(o.srv.listen, "127.0.0.1");
    assert_string_equal(o.srv.kubeconfig, "kc");
    assert_string_equal(o.srv.context, "ctx");
    assert_int_equal(o.srv.watch_unhealthy_ms, 7000);
    assert_int_equal(o.srv.log_level, EGPU_LOG_DEBUG);
    unsetenv("EGPU_TLS_CERT");
    unsetenv("EGPU_TLS_KEY");
    unsetenv("EGPU_COMPAT_NVIDIA");
    unsetenv("EGPU_SCHEDULER_NAME");
    /* --mode, and EGPU_MODE with the flag winning. */
    setenv("EGPU_MODE", "dra", 1);
    assert_int_equal(parse(&o, ARGS("egpu-webhook", "--tls-cert", "c", "--tls-key", "k")), -1);
    assert_int_equal(o.cfg.mode, EGPU_WEBHOOK_MODE_DRA);
    assert_int_equal(parse(&o, ARGS("egpu-webhook", "--tls-cert", "c", "--tls-key", "k", "--mode",
                                    "device-plugin")),
                     -1);
    assert_int_equal(o.cfg.mode, EGPU_WEBHOOK_MODE_DEVICE_PLUGIN);
    unsetenv("EGPU_MODE");
}

static void test_bad_values_exit_2(void **state)
{
    static const char *const bad[][2] = {
        {"--aliyun-gpu-mem-unit", "TiB"},
        {"--memory-only-core", "0"},
        {"--memory-only-core", "100"},
        {"--set-scheduler-name", "yes"},
        {"--compat-nvidia", "1x"},
        {"--mode", "DRA"},
        {"--mode", ""},
        {"--port", "65536"},
        {"--scheduler-name", ""},
        {"--scheduler-user", ""},
        {"--watch-unhealthy-seconds", "0"},
        {"--v", "11"},
        {"--max-body", "10"},
        {"--threads", "0"},
    };
    struct egpu__webhook_options o;
    FILE *saved = stderr;

    (void)state;
    stderr = fopen("/dev/null", "w"); /* the messages; their text is egpu_cli's */
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(parse(&o, ARGS("egpu-webhook", "--tls-cert", "c", "--tls-key", "k",
                                        bad[i][0], bad[i][1])),
                         2);
    /* TLS is required, and the two ports must differ */
    assert_int_equal(parse(&o, ARGS("egpu-webhook")), 2);
    assert_int_equal(parse(&o, ARGS("egpu-webhook", "--tls-cert", "c")), 2);
    assert_int_equal(parse(&o, ARGS("egpu-webhook", "--tls-cert", "c", "--tls-key", "k", "--port",
                                    "9000", "--health-port", "9000")),
                     2);
    fclose(stderr);
    stderr = saved;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_flags_and_variables),
        cmocka_unit_test(test_bad_values_exit_2),
    };

    egpu_log_level = -1;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
