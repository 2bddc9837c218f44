/* tests/unit/test_vcuda_config.c - the interposer's configuration
 * (src/vcuda/config.c): GPU UUIDs, each key's values and ranges, the
 * vcuda.conf syntax with its truncated and corrupted forms, the precedence
 * of the fixed directory's file over $EGPU_VCUDA_DIR's file over the
 * environment, the fail-closed result of every broken input (a link or a
 * FIFO at vcuda.conf included), and the regions' directory (<dir>/shared
 * when it is a directory).
 */
#define _GNU_SOURCE /* mkdtemp */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "egpu/log.h"
#include "testutil.h"
#include "vcuda_int.h"

#define UUID0 "GPU-6d0c1c3e-0000-4000-8000-000000000000"
#define UUID1 "GPU-6D0C1C3E-0000-4000-8000-0000000000AB"

static char root[64];
static char fixed_dir[128], user_dir[128];

static void write_text(const char *dir, const char *text)
{
    char path[256];
    FILE *f;

    snprintf(path, sizeof(path), "%s/vcuda.conf", dir);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void remove_conf(const char *dir)
{
    char path[256];

    snprintf(path, sizeof(path), "%s/vcuda.conf", dir);
    if (unlink(path) != 0)
        (void)rmdir(path);
}

static int setup(void **state)
{
    (void)state;
    snprintf(root, sizeof(root), "/tmp/egpu-vcuda-config-XXXXXX");
    if (mkdtemp(root) == NULL)
        return -1;
    snprintf(fixed_dir, sizeof(fixed_dir), "%s/fixed", root);
    snprintf(user_dir, sizeof(user_dir), "%s/user", root);
    if (mkdir(fixed_dir, 0755) != 0 || mkdir(user_dir, 0755) != 0)
        return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    remove_conf(fixed_dir);
    remove_conf(user_dir);
    rmdir(fixed_dir);
    rmdir(user_dir);
    rmdir(root);
    return 0;
}

static int each_setup(void **state)
{
    (void)state;
    remove_conf(fixed_dir);
    remove_conf(user_dir);
    return 0;
}

static void uuid_round_trip(void **state)
{
    struct egpu__vcuda_uuid u;
    char text[EGPU_VCUDA_UUID_STR_MAX];

    (void)state;
    assert_int_equal(egpu__vcuda_uuid_parse(UUID0, &u), 0);
    assert_int_equal(u.b[0], 0x6d);
    assert_int_equal(u.b[3], 0x3e);
    assert_int_equal(u.b[15], 0x00);
    assert_string_equal(egpu__vcuda_uuid_format(&u, text), UUID0);
    /* upper case parses to the same bytes, and formats in lower case */
    assert_int_equal(egpu__vcuda_uuid_parse(UUID1, &u), 0);
    assert_int_equal(u.b[15], 0xab);
    assert_string_equal(egpu__vcuda_uuid_format(&u, text),
                        "GPU-6d0c1c3e-0000-4000-8000-0000000000ab");
}

static void uuid_rejects_malformed(void **state)
{
    static const char *const bad[] = {
        "6d0c1c3e-0000-4000-8000-000000000000",      /* no GPU- */
        "MIG-6d0c1c3e-0000-4000-8000-000000000000",  /* not a GPU UUID */
        "GPU-6d0c1c3e-0000-4000-8000-00000000000",   /* one digit short */
        "GPU-6d0c1c3e-0000-4000-8000-0000000000000", /* one digit long */
        "GPU-6d0c1c3e00000-4000-8000-000000000000",  /* dash missing */
        "GPU-6d0c1c3e-0000-4000-8000-00000000000g",  /* not hex */
        "GPU-6d0c1c3e-0000-4000-8000-000000000000 ", "",
    };
    struct egpu__vcuda_uuid u;

    (void)state;
    memset(&u, 0x5a, sizeof(u));
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (egpu__vcuda_uuid_parse(bad[i], &u) != -EINVAL)
            fail_msg("accepted \"%s\"", bad[i]);
    }
    assert_int_equal(u.b[0], 0x5a); /* unchanged */
}

/* set(key, value) fails with code and a message naming key and "allowed". */
static void expect_bad(const char *key, const char *value, int code)
{
    struct egpu__vcuda_config c;
    struct egpu_error err = {0};
    int rc;

    egpu__vcuda_config_defaults(&c, "/d");
    rc = egpu__vcuda_config_set(&c, key, value, &err);
    if (rc != code)
        fail_msg("%s=%s: got %d, want %d (%s)", key, value, rc, code, err.msg);
    if (strstr(err.msg, key) == NULL || strstr(err.msg, "allowed") == NULL)
        fail_msg("%s=%s: message does not name the key and the allowed values: %s", key, value,
                 err.msg);
}

static void keys_and_ranges(void **state)
{
    struct egpu__vcuda_config c;
    struct egpu_error err = {0};

    (void)state;
    egpu__vcuda_config_defaults(&c, "/d");
    assert_int_equal(c.context_mib, 300);
    assert_int_equal(c.ctx_extra_mib, 0);
    assert_int_equal(c.log_level, EGPU_LOG_WARN);
    assert_false(c.has_memory || c.has_core);
    /* 0: no GPU memory asked for, so no memory limit (only the core applies) */
    assert_int_equal(egpu__vcuda_config_set(&c, "EGPU_VCUDA_MEMORY_MIB", "0", &err), 0);
    assert_false(c.has_memory);
    assert_int_equal(egpu__vcuda_config_set(&c, "EGPU_VCUDA_MEMORY_MIB", "1", &err), 0);
    assert_true(c.has_memory);
    assert_int_equal(egpu__vcuda_config_set(&c, "EGPU_VCUDA_MEMORY_MIB", "16777216", &err), 0);
    assert_true(c.has_memory);
    assert_int_equal(c.memory_mib, 16777216);
    assert_int_equal(egpu__vcuda_config_set(&c, "EGPU_VCUDA_CORE", "1", &err), 0);
    assert_int_equal(egpu__vcuda_config_set(&c, "EGPU_VCUDA_CORE", "100", &err), 0);
    assert_true(c.has_core);
    assert_int_equal(egpu__vcuda_config_set(&c, "EGPU_VCUDA_CONTEXT_MIB", "0", &err), 0);
    assert_int_equal(c.context_mib, 0);
    assert_int_equal(egpu__vcuda_config_set(&c, "EGPU_VCUDA_CONTEXT_EXTRA_MIB", "96", &err), 0);
    assert_int_equal(c.ctx_extra_mib, 96);
    assert_int_equal(c.context_mib, 0); /* the extra adds to the context; it replaces nothing */
    assert_int_equal(egpu__vcuda_config_set(&c, "EGPU_VCUDA_CONTEXT_EXTRA_MIB", "65536", &err), 0);
    assert_int_equal(c.ctx_extra_mib, 65536);
    assert_int_equal(egpu__vcuda_config_set(&c, "EGPU_VCUDA_CONTEXT_EXTRA_MIB", "0", &err), 0);
    assert_int_equal(c.ctx_extra_mib, 0);
    assert_int_equal(egpu__vcuda_config_set(&c, "EGPU_VCUDA_LOG_LEVEL", "debug", &err), 0);
    assert_int_equal(c.log_level, EGPU_LOG_DEBUG);
    assert_int_equal(egpu__vcuda_config_set(&c, "EGPU_VCUDA_GPUS", UUID0 "," UUID1, &err), 0);
    assert_int_equal(c.ngpus, 2);

    expect_bad("EGPU_VCUDA_MEMORY_MIB", "16777217", -ERANGE);
    expect_bad("EGPU_VCUDA_MEMORY_MIB", "99999999999999999999999", -ERANGE);
    expect_bad("EGPU_VCUDA_MEMORY_MIB", "4096MiB", -EINVAL);
    expect_bad("EGPU_VCUDA_MEMORY_MIB", "-1", -EINVAL);
    expect_bad("EGPU_VCUDA_MEMORY_MIB", "0x10", -EINVAL);
    expect_bad("EGPU_VCUDA_MEMORY_MIB", "", -EINVAL);
    expect_bad("EGPU_VCUDA_CORE", "0", -ERANGE);
    expect_bad("EGPU_VCUDA_CORE", "101", -ERANGE);
    expect_bad("EGPU_VCUDA_CORE", "5.5", -EINVAL);
    expect_bad("EGPU_VCUDA_CORE_LIMIT", "101", -ERANGE);
    expect_bad("EGPU_VCUDA_CONTEXT_MIB", "65537", -ERANGE);
    expect_bad("EGPU_VCUDA_CONTEXT_EXTRA_MIB", "65537", -ERANGE);
    expect_bad("EGPU_VCUDA_CONTEXT_EXTRA_MIB", "96MiB", -EINVAL);
    expect_bad("EGPU_VCUDA_CONTEXT_EXTRA_MIB", "-1", -EINVAL);
    expect_bad("EGPU_VCUDA_CONTEXT_EXTRA_MIB", "", -EINVAL);
    expect_bad("EGPU_VCUDA_LOG_LEVEL", "verbose", -EINVAL);
    expect_bad("EGPU_VCUDA_LOG_LEVEL", "3", -EINVAL);
    expect_bad("EGPU_VCUDA_GPUS", "GPU-123", -EINVAL);
    expect_bad("EGPU_VCUDA_GPUS", UUID0 ",", -EINVAL);
    expect_bad("EGPU_VCUDA_GPUS", UUID0 "," UUID0, -EINVAL);
    expect_bad("EGPU_VCUDA_MEMORY", "4096", -ENOENT); /* unknown key */
}

static void core_limit_checks(void **state)
{
    struct egpu__vcuda_config c;
    struct egpu_error err = {0};

    (void)state;
    egpu__vcuda_config_defaults(&c, "/d");
    assert_int_equal(egpu__vcuda_config_set(&c, "EGPU_VCUDA_CORE", "30", &err), 0);
    assert_int_equal(egpu__vcuda_config_check(&c, &err), 0);
    assert_int_equal(c.core_limit_pct, 30); /* defaults to the core */

    egpu__vcuda_config_defaults(&c, "/d");
    assert_int_equal(egpu__vcuda_config_set(&c, "EGPU_VCUDA_CORE", "30", &err), 0);
    assert_int_equal(egpu__vcuda_config_set(&c, "EGPU_VCUDA_CORE_LIMIT", "20", &err), 0);
    assert_int_equal(egpu__vcuda_config_check(&c, &err), -ERANGE);
    assert_non_null(strstr(err.msg, "EGPU_VCUDA_CORE_LIMIT=20"));

    egpu__vcuda_config_defaults(&c, "/d");
    assert_int_equal(egpu__vcuda_config_set(&c, "EGPU_VCUDA_CORE_LIMIT", "50", &err), 0);
    assert_int_equal(egpu__vcuda_config_check(&c, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "needs EGPU_VCUDA_CORE"));

    egpu__vcuda_config_defaults(&c, "/d");
    assert_int_equal(egpu__vcuda_config_set(&c, "EGPU_VCUDA_CORE", "30", &err), 0);
    assert_int_equal(egpu__vcuda_config_set(&c, "EGPU_VCUDA_CORE_LIMIT", "80", &err), 0);
    assert_int_equal(egpu__vcuda_config_check(&c, &err), 0);
    assert_int_equal(c.core_limit_pct, 80);
}

static int parse_text(struct egpu__vcuda_config *c, const char *text, struct egpu_error *err)
{
    egpu__vcuda_config_defaults(c, "/d");
    return egpu__vcuda_config_parse(c, text, strlen(text), "/d/vcuda.conf", err);
}

static void parse_good_file(void **state)
{
    struct egpu__vcuda_config c;
    struct egpu_error err = {0};
    const char *text = "# written by egpu-agent\n"
                       "\n"
                       "EGPU_VCUDA_GPUS=" UUID0 "\n"
                       "  EGPU_VCUDA_MEMORY_MIB = 4096  \n"
                       "EGPU_VCUDA_CORE=30\r\n"
                       "\t# the burst ceiling\n"
                       "EGPU_VCUDA_CORE_LIMIT=60\n"
                       "EGPU_VCUDA_CONTEXT_MIB=250\n"
                       "EGPU_VCUDA_CONTEXT_EXTRA_MIB=96\n"
                       "EGPU_VCUDA_LOG_LEVEL=info\n";

    (void)state;
    assert_int_equal(parse_text(&c, text, &err), 0);
    assert_int_equal(c.ngpus, 1);
    assert_true(c.has_memory);
    assert_int_equal(c.memory_mib, 4096);
    assert_int_equal(c.core_pct, 30);
    assert_int_equal(c.core_limit_pct, 60);
    assert_int_equal(c.context_mib, 250);
    assert_int_equal(c.ctx_extra_mib, 96);
    assert_int_equal(c.log_level, EGPU_LOG_INFO);
    assert_false(c.fail_closed);
}

/* text fails to parse with a message holding every one of the words. */
static void expect_parse_error(const char *text, size_t len, ...)
{
    struct egpu__vcuda_config c;
    struct egpu_error err = {0};
    const char *word;
    va_list ap;

    egpu__vcuda_config_defaults(&c, "/d");
    if (egpu__vcuda_config_parse(&c, text, len, "/d/vcuda.conf", &err) == 0)
        fail_msg("accepted: %.*s", (int)len, text);
    if (strstr(err.msg, "/d/vcuda.conf") == NULL)
        fail_msg("message does not name the file: %s", err.msg);
    va_start(ap, len);
    while ((word = va_arg(ap, const char *)) != NULL) {
        if (strstr(err.msg, word) == NULL)
            fail_msg("message lacks \"%s\": %s", word, err.msg);
    }
    va_end(ap);
}

#define BAD(text, ...) expect_parse_error((text), sizeof(text) - 1, __VA_ARGS__, NULL)

static void parse_bad_files(void **state)
{
    (void)state;
    /* truncated in the middle of a line (no final newline) */
    BAD("EGPU_VCUDA_MEMORY_MIB=4096\nEGPU_VCUDA_CORE=3", "truncated");
    /* truncated at a line boundary: a required key is missing */
    BAD("EGPU_VCUDA_MEMORY_MIB=4096\n", "EGPU_VCUDA_CORE", "missing");
    BAD("EGPU_VCUDA_CORE=30\n", "EGPU_VCUDA_MEMORY_MIB", "missing");
    BAD("", "EGPU_VCUDA_MEMORY_MIB", "missing");
    /* corrupted */
    BAD("EGPU_VCUDA_MEMORY_MIB=4096\nEGPU_VCUDA_CORE=30\n\0garbage\n", "NUL");
    BAD("EGPU_VCUDA_MEMORY_MIB=4096\nEGPU_VCUDA_CORE=30\n\x7f\x45LF\x02\n", "line 3", "KEY=VALUE");
    BAD("EGPU_VCUDA_MEMORY_MIB=4096\nEGPU_VCUDA_CORE=30\nEGPU_VCUDA_CORE=40\n", "line 3",
        "EGPU_VCUDA_CORE", "twice");
    BAD("EGPU_VCUDA_MEMORY_MIB=4096\nEGPU_VCUDA_CORE=30\nEGPU_VCUDA_MEMORY=1\n", "line 3",
        "EGPU_VCUDA_MEMORY", "unknown key");
    BAD("EGPU_VCUDA_MEMORY_MIB=4O96\nEGPU_VCUDA_CORE=30\n", "line 1", "EGPU_VCUDA_MEMORY_MIB",
        "allowed 0..16777216");
    BAD("EGPU_VCUDA_MEMORY_MIB=4096\nEGPU_VCUDA_CORE=300\n", "line 2", "EGPU_VCUDA_CORE",
        "allowed 1..100");
    BAD("EGPU_VCUDA_MEMORY_MIB=4096\nEGPU_VCUDA_CORE=30\nEGPU_VCUDA_CORE_LIMIT=10\n",
        "EGPU_VCUDA_CORE_LIMIT");
    BAD("EGPU_VCUDA_MEMORY_MIB=4096\nEGPU_VCUDA_CORE=30\nEGPU_VCUDA_CONTEXT_EXTRA_MIB=96\n"
        "EGPU_VCUDA_CONTEXT_EXTRA_MIB=128\n",
        "line 4", "EGPU_VCUDA_CONTEXT_EXTRA_MIB", "twice");
    BAD("EGPU_VCUDA_MEMORY_MIB=4096\nEGPU_VCUDA_CORE=30\nEGPU_VCUDA_CONTEXT_EXTRA_MIB=70000\n",
        "line 3", "EGPU_VCUDA_CONTEXT_EXTRA_MIB=70000", "out of range", "allowed 0..65536");
    BAD("EGPU_VCUDA_MEMORY_MIB=4096\nEGPU_VCUDA_CORE=30\nEGPU_VCUDA_CONTEXT_EXTRA_MIB=9x\n",
        "line 3", "EGPU_VCUDA_CONTEXT_EXTRA_MIB", "not a decimal number", "allowed 0..65536");
}

static void parse_error_keeps_gpu_list(void **state)
{
    struct egpu__vcuda_config c;
    struct egpu_error err = {0};

    (void)state;
    /* a broken line before and after: the valid card list still counts,
     * so failing closed applies to the configured cards only */
    assert_int_not_equal(
        parse_text(&c, "EGPU_VCUDA_MEMORY_MIB=lots\nEGPU_VCUDA_GPUS=" UUID1 "\nEGPU_VCUDA_CORE=x\n",
                   &err),
        0);
    assert_non_null(strstr(err.msg, "line 1")); /* the first error is the one reported */
    assert_int_equal(c.ngpus, 1);
    egpu__vcuda_config_fail_closed(&c);
    assert_true(c.fail_closed && c.has_memory);
    assert_int_equal(c.memory_mib, 0);
    assert_false(c.has_core);
    assert_int_equal(c.ngpus, 1);
}

static void load_nothing_is_no_limits(void **state)
{
    char *envp[] = {"PATH=/usr/bin", "EGPU_VCUDA_DIR=", NULL};
    struct egpu__vcuda_config c;
    struct egpu_error err = {0};

    (void)state;
    assert_int_equal(egpu__vcuda_config_load(&c, fixed_dir, envp, &err), 0);
    assert_int_equal(c.source, EGPU_VCUDA_SRC_NONE);
    assert_false(c.has_memory || c.has_core || c.fail_closed);
}

static void load_env(void **state)
{
    char dir_var[160];
    char *envp[] = {dir_var,
                    "EGPU_VCUDA_MEMORY_MIB=2048",
                    "EGPU_VCUDA_CORE=40",
                    "EGPU_VCUDA_GPUS=" UUID0,
                    "EGPU_VCUDA_CONTEXT_EXTRA_MIB=96",
                    "OTHER=1",
                    NULL};
    struct egpu__vcuda_config c;
    struct egpu_error err = {0};

    (void)state;
    snprintf(dir_var, sizeof(dir_var), "EGPU_VCUDA_DIR=%s", user_dir);
    assert_int_equal(egpu__vcuda_config_load(&c, fixed_dir, envp, &err), 0);
    assert_int_equal(c.source, EGPU_VCUDA_SRC_ENV);
    assert_string_equal(c.dir, user_dir);
    assert_int_equal(c.memory_mib, 2048);
    assert_int_equal(c.core_pct, 40);
    assert_int_equal(c.core_limit_pct, 40);
    assert_int_equal(c.ngpus, 1);
    assert_int_equal(c.ctx_extra_mib, 96);
}

static void load_bad_env_fails_closed(void **state)
{
    char *typo[] = {"EGPU_VCUDA_MEMORY_MB=2048", NULL};
    char *range[] = {"EGPU_VCUDA_GPUS=" UUID0, "EGPU_VCUDA_MEMORY_MIB=2048", "EGPU_VCUDA_CORE=0",
                     NULL};
    char *extra[] = {"EGPU_VCUDA_MEMORY_MIB=2048", "EGPU_VCUDA_CONTEXT_EXTRA_MIB=0x60", NULL};
    struct egpu__vcuda_config c;
    struct egpu_error err = {0};

    (void)state;
    assert_int_equal(egpu__vcuda_config_load(&c, fixed_dir, typo, &err), -ENOENT);
    assert_non_null(strstr(err.msg, "EGPU_VCUDA_MEMORY_MB"));
    assert_non_null(strstr(err.msg, "failing closed"));
    assert_true(c.fail_closed && c.has_memory);
    assert_int_equal(c.memory_mib, 0);
    assert_int_equal(c.ngpus, 0); /* no card list: every card */

    assert_int_equal(egpu__vcuda_config_load(&c, fixed_dir, range, &err), -ERANGE);
    assert_non_null(strstr(err.msg, "EGPU_VCUDA_CORE=0"));
    assert_true(c.fail_closed);
    assert_int_equal(c.ngpus, 1);
    assert_int_equal(c.memory_mib, 0);

    assert_int_equal(egpu__vcuda_config_load(&c, fixed_dir, extra, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "environment: EGPU_VCUDA_CONTEXT_EXTRA_MIB=\"0x60\""));
    assert_non_null(strstr(err.msg, "allowed 0..65536"));
    assert_true(c.fail_closed);
    assert_int_equal(c.memory_mib, 0);
}

static void preloaded_names_the_interposer(void **state)
{
    const char *self = "/usr/local/lib/elastic-gpu/libegpu-vcuda.so";
    char path[200], link[200];
    struct {
        const char *text;
        bool want;
    } rows[] = {
        {"/usr/local/lib/elastic-gpu/libegpu-vcuda.so\n", true},
        {"/usr/local/lib/elastic-gpu/libegpu-vcuda.so", true}, /* no final newline */
        {"/lib/a.so:/lib/b.so /mnt/libegpu-vcuda.so", true},   /* same name, other path */
        {"\t/lib/a.so\n\n  /usr/local/lib/elastic-gpu/libegpu-vcuda.so  \n", true},
        {"/lib/a.so\n", false},
        {"/usr/local/lib/elastic-gpu/libegpu-vcuda.so.bak\n", false},
        {"/usr/local/lib/elastic-gpu/xlibegpu-vcuda.so\n", false},
        {"/usr/local/lib/elastic-gpu/\n", false},
        {"", false},
    };

    (void)state;
    snprintf(path, sizeof(path), "%s/ld.so.preload", user_dir);
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        FILE *f = fopen(path, "w");

        assert_non_null(f);
        fputs(rows[i].text, f);
        fclose(f);
        if (egpu__vcuda_preloaded(path, self) != rows[i].want)
            fail_msg("row %zu: '%s' should %sname the interposer", i, rows[i].text,
                     rows[i].want ? "" : "not ");
    }
    /* a NUL ends an entry */
    {
        FILE *f = fopen(path, "w");

        assert_non_null(f);
        fwrite("/lib/a.so\0/x/libegpu-vcuda.so", 1, 30, f);
        fclose(f);
        assert_true(egpu__vcuda_preloaded(path, self));
    }
    assert_false(egpu__vcuda_preloaded(path, NULL));
    assert_false(egpu__vcuda_preloaded(path, ""));
    assert_false(egpu__vcuda_preloaded(NULL, self));
    /* a link to a list naming it is not the agent's file */
    snprintf(link, sizeof(link), "%s/ld.so.preload.link", user_dir);
    unlink(link);
    assert_int_equal(symlink(path, link), 0);
    assert_false(egpu__vcuda_preloaded(link, self));
    unlink(link);
    unlink(path);
    assert_false(egpu__vcuda_preloaded(path, self)); /* none */
}

static void load_file_wins_over_env(void **state)
{
    char dir_var[160];
    char *envp[] = {dir_var, "EGPU_VCUDA_MEMORY_MIB=99999", "EGPU_VCUDA_CORE=100",
                    "EGPU_VCUDA_CONTEXT_EXTRA_MIB=500", NULL};
    struct egpu__vcuda_config c;
    struct egpu_error err = {0};

    (void)state;
    snprintf(dir_var, sizeof(dir_var), "EGPU_VCUDA_DIR=%s", user_dir);
    write_text(user_dir, "EGPU_VCUDA_MEMORY_MIB=1000\nEGPU_VCUDA_CORE=20\n");
    assert_int_equal(egpu__vcuda_config_load(&c, fixed_dir, envp, &err), 0);
    assert_int_equal(c.source, EGPU_VCUDA_SRC_FILE);
    assert_string_equal(c.dir, user_dir);
    assert_int_equal(c.memory_mib, 1000);
    assert_int_equal(c.core_pct, 20);
    assert_int_equal(c.ctx_extra_mib, 0); /* the file's (unset), not the environment's */

    /* the fixed directory's file wins even over EGPU_VCUDA_DIR's */
    write_text(fixed_dir, "EGPU_VCUDA_MEMORY_MIB=500\nEGPU_VCUDA_CORE=10\n");
    assert_int_equal(egpu__vcuda_config_load(&c, fixed_dir, envp, &err), 0);
    assert_string_equal(c.dir, fixed_dir);
    assert_int_equal(c.memory_mib, 500);
    assert_int_equal(c.core_pct, 10);
}

static void load_broken_file_fails_closed(void **state)
{
    char *envp[] = {"EGPU_VCUDA_MEMORY_MIB=99999", "EGPU_VCUDA_CORE=100", NULL};
    struct egpu__vcuda_config c;
    struct egpu_error err = {0};
    char path[256];

    (void)state;
    write_text(fixed_dir, "EGPU_VCUDA_GPUS=" UUID0 "\nEGPU_VCUDA_MEMORY_MIB=10");
    assert_int_equal(egpu__vcuda_config_load(&c, fixed_dir, envp, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "truncated"));
    assert_non_null(strstr(err.msg, fixed_dir));
    assert_true(c.fail_closed);
    assert_int_equal(c.memory_mib, 0); /* not the environment's 99999 */
    assert_int_equal(c.ngpus, 1);
    assert_false(c.has_core);

    /* unreadable: a directory where the file should be */
    remove_conf(fixed_dir);
    snprintf(path, sizeof(path), "%s/vcuda.conf", fixed_dir);
    assert_int_equal(mkdir(path, 0755), 0);
    assert_int_equal(egpu__vcuda_config_load(&c, fixed_dir, envp, &err), -EISDIR);
    assert_non_null(strstr(err.msg, "unreadable"));
    assert_non_null(strstr(err.msg, path));
    assert_true(c.fail_closed);
    assert_int_equal(c.memory_mib, 0);
    assert_int_equal(rmdir(path), 0);
}

/* A share of one card (EGPU_VCUDA_CORE 1..99) with EGPU_VCUDA_MEMORY_MIB=0
 * in the agent's file is what the scheduler booked as 0 MiB: it fails
 * closed (0 MiB on its cards) instead of running with no memory limit
 * beside tenants that booked theirs. Whole cards keep 0 = no limit. */
static void load_share_without_memory_fails_closed(void **state)
{
    char *envp[] = {NULL};
    struct egpu__vcuda_config c;
    struct egpu_error err = {0};

    (void)state;
    write_text(fixed_dir,
               "EGPU_VCUDA_GPUS=" UUID0 "\nEGPU_VCUDA_MEMORY_MIB=0\nEGPU_VCUDA_CORE=30\n");
    assert_int_equal(egpu__vcuda_config_load(&c, fixed_dir, envp, &err), -ERANGE);
    assert_non_null(strstr(err.msg, "EGPU_VCUDA_MEMORY_MIB=0 with EGPU_VCUDA_CORE=30"));
    assert_non_null(strstr(err.msg, "elasticgpu.io/gpu-memory"));
    assert_non_null(strstr(err.msg, "failing closed"));
    assert_true(c.fail_closed && c.has_memory);
    assert_int_equal(c.memory_mib, 0);
    assert_int_equal(c.ngpus, 1);

    write_text(fixed_dir,
               "EGPU_VCUDA_GPUS=" UUID0 "\nEGPU_VCUDA_MEMORY_MIB=0\nEGPU_VCUDA_CORE=100\n");
    assert_int_equal(egpu__vcuda_config_load(&c, fixed_dir, envp, &err), 0);
    assert_false(c.fail_closed || c.has_memory);
    assert_true(c.has_core);
    assert_int_equal(c.core_pct, 100);
}

static void load_oversize_file_fails_closed(void **state)
{
    char *envp[] = {NULL};
    struct egpu__vcuda_config c;
    struct egpu_error err = {0};
    char *big = malloc(EGPU_VCUDA_CONF_MAX_BYTES + 2);

    (void)state;
    assert_non_null(big);
    memset(big, '#', EGPU_VCUDA_CONF_MAX_BYTES);
    big[EGPU_VCUDA_CONF_MAX_BYTES] = '\n';
    big[EGPU_VCUDA_CONF_MAX_BYTES + 1] = '\0';
    write_text(fixed_dir, big);
    free(big);
    assert_int_equal(egpu__vcuda_config_load(&c, fixed_dir, envp, &err), -EFBIG);
    assert_non_null(strstr(err.msg, "corrupted"));
    assert_true(c.fail_closed);
}

/* vcuda.conf is never followed through a link and never blocks on a FIFO:
 * either is a broken configuration (fail closed), named in the message. */
static void load_link_or_fifo_fails_closed(void **state)
{
    char *envp[] = {NULL};
    struct egpu__vcuda_config c;
    struct egpu_error err = {0};
    char path[256], target[256];

    (void)state;
    write_text(user_dir, "EGPU_VCUDA_MEMORY_MIB=99999\nEGPU_VCUDA_CORE=100\n");
    snprintf(path, sizeof(path), "%s/vcuda.conf", fixed_dir);
    snprintf(target, sizeof(target), "%s/vcuda.conf", user_dir);
    assert_int_equal(symlink(target, path), 0);
    assert_int_equal(egpu__vcuda_config_load(&c, fixed_dir, envp, &err), -ELOOP);
    assert_non_null(strstr(err.msg, "symbolic link"));
    assert_non_null(strstr(err.msg, path));
    assert_true(c.fail_closed);
    assert_int_equal(c.memory_mib, 0); /* not the link target's 99999 */
    assert_int_equal(unlink(path), 0);

    assert_int_equal(mkfifo(path, 0644), 0); /* nobody writes: an open would block */
    assert_int_equal(egpu__vcuda_config_load(&c, fixed_dir, envp, &err), -EINVAL);
    assert_non_null(strstr(err.msg, path));
    assert_true(c.fail_closed);
    assert_int_equal(unlink(path), 0);
}

/* The regions' directory: <dir>/shared when it is a real directory (the
 * agent's layout), else the directory itself; a link named shared is not
 * taken. */
static void load_region_dir(void **state)
{
    char dir_var[160], shared[256], elsewhere[256];
    char *envp[] = {dir_var, "EGPU_VCUDA_MEMORY_MIB=1024", NULL};
    struct egpu__vcuda_config c;
    struct egpu_error err = {0};

    (void)state;
    snprintf(dir_var, sizeof(dir_var), "EGPU_VCUDA_DIR=%s", user_dir);
    snprintf(shared, sizeof(shared), "%s/shared", fixed_dir);
    snprintf(elsewhere, sizeof(elsewhere), "%s/elsewhere", root);

    /* The agent's file, no shared/: an older agent's dir, regions beside it. */
    write_text(fixed_dir, "EGPU_VCUDA_MEMORY_MIB=500\nEGPU_VCUDA_CORE=10\n");
    assert_int_equal(egpu__vcuda_config_load(&c, fixed_dir, envp, &err), 0);
    assert_string_equal(c.dir, fixed_dir);
    assert_string_equal(c.region_dir, fixed_dir);

    assert_int_equal(mkdir(shared, 01777), 0);
    assert_int_equal(egpu__vcuda_config_load(&c, fixed_dir, envp, &err), 0);
    assert_string_equal(c.region_dir, shared);
    assert_int_equal(rmdir(shared), 0);

    assert_int_equal(mkdir(elsewhere, 0755), 0);
    assert_int_equal(symlink(elsewhere, shared), 0);
    assert_int_equal(egpu__vcuda_config_load(&c, fixed_dir, envp, &err), 0);
    assert_string_equal(c.region_dir, fixed_dir);
    assert_int_equal(unlink(shared), 0);
    assert_int_equal(rmdir(elsewhere), 0);

    /* EGPU_VCUDA_DIR (tests, benches): the same rule. */
    remove_conf(fixed_dir);
    assert_int_equal(egpu__vcuda_config_load(&c, fixed_dir, envp, &err), 0);
    assert_int_equal(c.source, EGPU_VCUDA_SRC_ENV);
    assert_string_equal(c.region_dir, user_dir);
    snprintf(shared, sizeof(shared), "%s/shared", user_dir);
    assert_int_equal(mkdir(shared, 0755), 0);
    assert_int_equal(egpu__vcuda_config_load(&c, fixed_dir, envp, &err), 0);
    assert_string_equal(c.region_dir, shared);
    assert_int_equal(rmdir(shared), 0);
}

static void covers_and_index(void **state)
{
    struct egpu__vcuda_config c;
    struct egpu__vcuda_uuid u0, u1;
    struct egpu_error err = {0};

    (void)state;
    assert_int_equal(egpu__vcuda_uuid_parse(UUID0, &u0), 0);
    assert_int_equal(egpu__vcuda_uuid_parse(UUID1, &u1), 0);
    egpu__vcuda_config_defaults(&c, "/d");
    assert_true(egpu__vcuda_config_covers(&c, &u0)); /* no list: every card */
    assert_int_equal(egpu__vcuda_config_set(&c, "EGPU_VCUDA_GPUS", UUID1, &err), 0);
    assert_false(egpu__vcuda_config_covers(&c, &u0));
    assert_true(egpu__vcuda_config_covers(&c, &u1));
    assert_int_equal(egpu__vcuda_config_gpu_index(&c, &u1), 0);
    assert_int_equal(egpu__vcuda_config_gpu_index(&c, &u0), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(uuid_round_trip),
        cmocka_unit_test(uuid_rejects_malformed),
        cmocka_unit_test(keys_and_ranges),
        cmocka_unit_test(core_limit_checks),
        cmocka_unit_test(parse_good_file),
        cmocka_unit_test(parse_bad_files),
        cmocka_unit_test(parse_error_keeps_gpu_list),
        cmocka_unit_test_setup(load_nothing_is_no_limits, each_setup),
        cmocka_unit_test_setup(load_env, each_setup),
        cmocka_unit_test_setup(load_bad_env_fails_closed, each_setup),
        cmocka_unit_test_setup(preloaded_names_the_interposer, each_setup),
        cmocka_unit_test_setup(load_file_wins_over_env, each_setup),
        cmocka_unit_test_setup(load_broken_file_fails_closed, each_setup),
        cmocka_unit_test_setup(load_share_without_memory_fails_closed, each_setup),
        cmocka_unit_test_setup(load_oversize_file_fails_closed, each_setup),
        cmocka_unit_test_setup(load_link_or_fifo_fails_closed, each_setup),
        cmocka_unit_test_setup(load_region_dir, each_setup),
        cmocka_unit_test(covers_and_index),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
