/* tests/unit/test_agent_gpus.c - the agent's GPU backends.
 *
 * The fake backend: spec parsing (good specs, bad ones with messages that
 * show the allowed form), stable UUIDs, health changes waking a waiter,
 * links. The NVML backend against the mock libnvidia-ml.so.1 built in
 * <build>/src/agent (EGPU_NVML_MOCK_DIR, from egpu_agent's build interface):
 * cards listed, used memory from nvmlDeviceGetMemoryInfo_v2 (the driver's
 * reservation apart) or, without it, v1 (and the metric's series following
 * the source), topology and NVLink, probe failures
 * and XID events making cards unhealthy, and the startup errors: no library, a missing required
 * symbol (an error, never a NULL call), nvmlInit_v2 failing. Every test
 * checks that no egpu_malloc block and no NVML reference is left behind.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "testutil.h"
#include "egpu/agent.h"
#include "egpu/log.h"
#include "metrics_int.h"

#define MOCK_FULL    EGPU_NVML_MOCK_DIR "/nvml-mock/libnvidia-ml.so.1"
#define MOCK_NOMINOR EGPU_NVML_MOCK_DIR "/nvml-mock-nominor/libnvidia-ml.so.1"
#define MOCK_NOOPT   EGPU_NVML_MOCK_DIR "/nvml-mock-noopt/libnvidia-ml.so.1"

static const char *const mock_vars[] = {
    "EGPU_MOCK_NVML_GPUS",      "EGPU_MOCK_NVML_INIT",         "EGPU_MOCK_NVML_FAIL",
    "EGPU_MOCK_NVML_TOPO",      "EGPU_MOCK_NVML_NVLINK",       "EGPU_MOCK_NVML_XID",
    "EGPU_MOCK_NVML_NO_EVENTS", "EGPU_MOCK_NVML_RESERVED_MIB", EGPU_FAKE_GPUS_ENV,
};

static long live_at_start;

static int setup(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(mock_vars) / sizeof(mock_vars[0]); i++)
        unsetenv(mock_vars[i]);
    live_at_start = egpu_alloc_live();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    assert_int_equal(egpu_alloc_live(), live_at_start);
    return 0;
}

/* A mock library held open by the test, so its counters outlive the backend. */
struct mock {
    void *dl;
    void (*stats)(int *init_calls, int *shutdown_calls, int *sets_live);
    int init_calls, shutdown_calls, sets_live; /* at mock_hold */
};

static void mock_hold(struct mock *m, const char *path)
{
    void *sym;

    m->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (m->dl == NULL)
        fail_msg("mock NVML %s: %s", path, dlerror());
    sym = dlsym(m->dl, "egpu_mock_nvml_stats");
    assert_non_null(sym);
    memcpy(&m->stats, &sym, sizeof(sym));
    m->stats(&m->init_calls, &m->shutdown_calls, &m->sets_live);
}

/* Release the mock, asserting the backend made init_calls more
 * nvmlInit_v2 calls, a matching number of nvmlShutdown calls for the
 * successful ones (given), and freed its event sets. */
static void mock_release(struct mock *m, int init_calls, int shutdown_calls)
{
    int i, s, l;

    m->stats(&i, &s, &l);
    assert_int_equal(i - m->init_calls, init_calls);
    assert_int_equal(s - m->shutdown_calls, shutdown_calls);
    assert_int_equal(l, m->sets_live);
    dlclose(m->dl);
}

static long now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

static void list_cards(struct egpu_gpus *g, struct egpu_gpu_info *cards, size_t *n)
{
    struct egpu_error err = {0};

    if (egpu_gpus_list(g, cards, EGPU_NODE_GPUS_MAX, n, &err) != 0)
        fail_msg("list: %s", err.msg);
}

/* ------------------------------------------------------------------------ */
/* Fake backend                                                             */

static void test_fake_specs(void **state)
{
    struct egpu_gpu_info cards[EGPU_NODE_GPUS_MAX];
    struct egpu_error err = {0};
    struct egpu_gpus *g = NULL;
    size_t n = 0;

    (void)state;
    assert_int_equal(egpu_gpus_open_fake("2xA100-80GB", "node-a", &g, &err), 0);
    assert_int_equal(egpu_gpus_kind(g), EGPU_GPUS_FAKE);
    list_cards(g, cards, &n);
    assert_int_equal(n, 2);
    for (uint32_t i = 0; i < 2; i++) {
        assert_int_equal(cards[i].index, i);
        assert_int_equal(cards[i].minor, i);
        assert_string_equal(cards[i].model, "A100-80GB");
        assert_int_equal(cards[i].mem_mib, 81920);
        assert_true(cards[i].healthy);
        assert_string_equal(cards[i].reason, "");
        assert_int_equal(strlen(cards[i].uuid), 40);
        assert_memory_equal(cards[i].uuid, "GPU-", 4);
    }
    assert_string_not_equal(cards[0].uuid, cards[1].uuid);
    egpu_gpus_free(g);

    assert_int_equal(egpu_gpus_open_fake(" 1xT4-16GB, 4xA100-40GB ,1xL4-23034MiB", "n", &g, &err),
                     0);
    list_cards(g, cards, &n);
    assert_int_equal(n, 6);
    assert_string_equal(cards[0].model, "T4-16GB");
    assert_int_equal(cards[0].mem_mib, 16384);
    for (int i = 1; i <= 4; i++) {
        assert_string_equal(cards[i].model, "A100-40GB");
        assert_int_equal(cards[i].mem_mib, 40960);
        assert_int_equal(cards[i].index, i);
    }
    assert_string_equal(cards[5].model, "L4-23034MiB");
    assert_int_equal(cards[5].mem_mib, 23034);

    /* Room for fewer cards than there are. */
    assert_int_equal(egpu_gpus_list(g, cards, 3, &n, &err), EGPU_ELIMIT);
    egpu_gpus_free(g);

    /* 64 cards in all is the most. */
    assert_int_equal(egpu_gpus_open_fake("32xH100-80GB,32xH100-80GiB", "n", &g, &err), 0);
    list_cards(g, cards, &n);
    assert_int_equal(n, 64);
    assert_int_equal(cards[63].mem_mib, 81920);
    egpu_gpus_free(g);
    egpu_gpus_free(NULL);
}

static void test_fake_bad_specs(void **state)
{
    static const struct {
        const char *spec;
        int code;
        const char *says;
    } bad[] = {
        {"", EGPU_ESYNTAX, "empty spec"},
        {"A100-80GB", EGPU_ESYNTAX, "does not start with a card count"},
        {"0xA100-80GB", EGPU_ERANGE, "card count of group 1 is not 1..64"},
        {"65xA100-80GB", EGPU_ERANGE, "card count of group 1 is not 1..64"},
        {"99999999999999999999xA100-80GB", EGPU_ERANGE, "card count"},
        {"2A100-80GB", EGPU_ESYNTAX, "no 'x' after the count"},
        {"2x", EGPU_ESYNTAX, "no model in group 1"},
        {"2xA100", EGPU_ESYNTAX, "does not end in its memory size"},
        {"2xA100-", EGPU_ESYNTAX, "does not end in its memory size"},
        {"2x-80GB", EGPU_ESYNTAX, "no model name before"},
        {"2xA100-80XB", EGPU_ESYNTAX, "is not GB, GiB, MB or MiB"},
        {"2xA100-80", EGPU_ESYNTAX, "is not GB, GiB, MB or MiB"},
        {"2xA100-0GB", EGPU_ERANGE, "is not 1 MiB..4 TiB"},
        {"2xA100-5000GB", EGPU_ERANGE, "is not 1 MiB..4 TiB"},
        {"2xA100 80GB", EGPU_ESYNTAX, "' ' in model"},
        {"2xA100-80GB,", EGPU_ESYNTAX, "group 2 does not start with a card count"},
        {"2xA100-80GB;1xT4-16GB", EGPU_ESYNTAX, "';' in model"},
        {"40xA100-80GB,40xT4-16GB", EGPU_ERANGE, "more than 64 cards"},
    };
    struct egpu_error err;
    struct egpu_gpus *g = NULL;

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        memset(&err, 0, sizeof(err));
        if (egpu_gpus_open_fake(bad[i].spec, "n", &g, &err) != bad[i].code)
            fail_msg("spec \"%s\": want %d, got \"%s\"", bad[i].spec, bad[i].code, err.msg);
        assert_null(g);
        if (strstr(err.msg, bad[i].says) == NULL)
            fail_msg("spec \"%s\": message \"%s\" lacks \"%s\"", bad[i].spec, err.msg, bad[i].says);
        /* Every message shows the allowed form. */
        assert_non_null(strstr(err.msg, "<count>x<model>-<memory>GB"));
        assert_non_null(strstr(err.msg, "e.g. 2xA100-80GB"));
    }
}

static void test_fake_uuids_stable(void **state)
{
    struct egpu_gpu_info a[EGPU_NODE_GPUS_MAX], b[EGPU_NODE_GPUS_MAX], c[EGPU_NODE_GPUS_MAX];
    struct egpu_error err = {0};
    struct egpu_gpus *g = NULL;
    size_t na = 0, nb = 0, nc = 0;

    (void)state;
    assert_int_equal(egpu_gpus_open_fake("3xA100-80GB", "node-a", &g, &err), 0);
    list_cards(g, a, &na);
    egpu_gpus_free(g);
    /* A restart (same node, same spec) finds the same UUIDs. */
    assert_int_equal(egpu_gpus_open_fake("3xA100-80GB", "node-a", &g, &err), 0);
    list_cards(g, b, &nb);
    egpu_gpus_free(g);
    /* Another node never shares them. */
    assert_int_equal(egpu_gpus_open_fake("3xA100-80GB", "node-b", &g, &err), 0);
    list_cards(g, c, &nc);
    egpu_gpus_free(g);
    for (size_t i = 0; i < 3; i++) {
        assert_string_equal(a[i].uuid, b[i].uuid);
        for (size_t j = 0; j < 3; j++)
            assert_string_not_equal(a[i].uuid, c[j].uuid);
    }
}

static void test_open_selects_backend(void **state)
{
    struct egpu_gpu_info cards[EGPU_NODE_GPUS_MAX];
    struct egpu_gpus_config cfg = {.fake = "1xT4-16GB", .node = "n"};
    struct egpu_error err = {0};
    struct egpu_gpus *g = NULL;
    size_t n = 0;

    (void)state;
    /* The flag. */
    assert_int_equal(egpu_gpus_open(&cfg, &g, &err), 0);
    assert_int_equal(egpu_gpus_kind(g), EGPU_GPUS_FAKE);
    egpu_gpus_free(g);
    /* The flag beats the environment. */
    setenv(EGPU_FAKE_GPUS_ENV, "3xA100-40GB", 1);
    assert_int_equal(egpu_gpus_open(&cfg, &g, &err), 0);
    list_cards(g, cards, &n);
    assert_int_equal(n, 1);
    egpu_gpus_free(g);
    /* The environment without the flag. */
    cfg.fake = NULL;
    assert_int_equal(egpu_gpus_open(&cfg, &g, &err), 0);
    list_cards(g, cards, &n);
    assert_int_equal(n, 3);
    assert_string_equal(cards[2].model, "A100-40GB");
    egpu_gpus_free(g);
    /* A bad spec from the environment is an error, not NVML. */
    setenv(EGPU_FAKE_GPUS_ENV, "lots", 1);
    assert_int_equal(egpu_gpus_open(&cfg, &g, &err), EGPU_ESYNTAX);
    assert_non_null(strstr(err.msg, "\"lots\""));
    /* Neither: NVML, from --nvml-library. */
    unsetenv(EGPU_FAKE_GPUS_ENV);
    cfg.fake = "";
    cfg.nvml_library = MOCK_FULL;
    assert_int_equal(egpu_gpus_open(&cfg, &g, &err), 0);
    assert_int_equal(egpu_gpus_kind(g), EGPU_GPUS_NVML);
    /* Fake-only calls refuse a real backend. */
    assert_int_equal(egpu_gpus_fake_set_health(g, 0, false, NULL, &err), -EINVAL);
    assert_int_equal(egpu_gpus_fake_set_link(g, 0, 1, EGPU_LINK_SYS, &err), -EINVAL);
    egpu_gpus_free(g);
}

static void test_fake_health_and_wait(void **state)
{
    struct egpu_gpu_info cards[EGPU_NODE_GPUS_MAX];
    struct egpu_error err = {0};
    struct egpu_gpus *g = NULL;
    size_t n = 0;
    long t0;

    (void)state;
    assert_int_equal(egpu_gpus_open_fake("2xA100-80GB", "n", &g, &err), 0);
    /* Nothing happens: the wait times out. */
    t0 = now_ms();
    assert_int_equal(egpu_gpus_wait(g, 60, &err), 0);
    assert_true(now_ms() - t0 >= 50);
    assert_int_equal(egpu_gpus_wait(g, -1, &err), -EINVAL);

    assert_int_equal(egpu_gpus_fake_set_health(g, 1, false, "XID 79", &err), 0);
    t0 = now_ms();
    assert_int_equal(egpu_gpus_wait(g, 5000, &err), 1);
    assert_true(now_ms() - t0 < 1000);
    list_cards(g, cards, &n);
    assert_true(cards[0].healthy);
    assert_false(cards[1].healthy);
    assert_string_equal(cards[1].reason, "XID 79");
    /* The same state again is no change. */
    assert_int_equal(egpu_gpus_fake_set_health(g, 1, false, NULL, &err), 0);
    assert_int_equal(egpu_gpus_wait(g, 0, &err), 0);
    assert_int_equal(egpu_gpus_fake_set_health(g, 1, true, NULL, &err), 0);
    assert_int_equal(egpu_gpus_wait(g, 0, &err), 1);
    list_cards(g, cards, &n);
    assert_true(cards[1].healthy);
    assert_string_equal(cards[1].reason, "");
    assert_int_equal(egpu_gpus_fake_set_health(g, 2, false, NULL, &err), -ENODEV);
    egpu_gpus_free(g);
}

static void test_fake_links(void **state)
{
    struct egpu_error err = {0};
    struct egpu_gpus *g = NULL;
    enum egpu_gpu_link l;

    (void)state;
    assert_int_equal(egpu_gpus_open_fake("2xA100-80GB,1xT4-16GB", "n", &g, &err), 0);
    assert_int_equal(egpu_gpus_link(g, 0, 1, &l, &err), 0);
    assert_int_equal(l, EGPU_LINK_PHB);
    assert_int_equal(egpu_gpus_link(g, 2, 0, &l, &err), 0);
    assert_int_equal(l, EGPU_LINK_SYS);
    assert_int_equal(egpu_gpus_fake_set_link(g, 1, 0, EGPU_LINK_NVLINK, &err), 0);
    assert_int_equal(egpu_gpus_link(g, 0, 1, &l, &err), 0);
    assert_int_equal(l, EGPU_LINK_NVLINK);
    assert_string_equal(egpu_gpu_link_name(l), "NV");
    assert_int_equal(egpu_gpus_link(g, 1, 1, &l, &err), -EINVAL);
    assert_int_equal(egpu_gpus_link(g, 0, 3, &l, &err), -ENODEV);
    assert_int_equal(egpu_gpus_fake_set_link(g, 0, 0, EGPU_LINK_SYS, &err), -EINVAL);
    assert_int_equal(egpu_gpus_fake_set_link(g, 0, 7, EGPU_LINK_SYS, &err), -ENODEV);
    assert_string_equal(egpu_gpu_link_name(EGPU_LINK_PIX), "PIX");
    assert_string_equal(egpu_gpu_link_name(EGPU_LINK_UNKNOWN), "unknown");
    egpu_gpus_free(g);
}

/* ------------------------------------------------------------------------ */
/* NVML backend against the mock                                            */

static void test_nvml_cards(void **state)
{
    struct egpu_gpu_info cards[EGPU_NODE_GPUS_MAX];
    struct egpu_error err = {0};
    struct egpu_gpus *g = NULL;
    struct mock m;
    size_t n = 0;

    (void)state;
    setenv("EGPU_MOCK_NVML_GPUS",
           "NVIDIA A100-SXM4-80GB:81920,NVIDIA A100-SXM4-80GB:81920:GPU-11111111-2222-3333-4444-"
           "555555555555,Tesla T4:15360",
           1);
    mock_hold(&m, MOCK_FULL);
    if (egpu_gpus_open_nvml(MOCK_FULL, &g, &err) != 0)
        fail_msg("open: %s", err.msg);
    list_cards(g, cards, &n);
    assert_int_equal(n, 3);
    assert_string_equal(cards[0].model, "NVIDIA A100-SXM4-80GB");
    assert_int_equal(cards[0].mem_mib, 81920);
    /* The mock reports 1/16 of each card in use. */
    assert_int_equal(cards[0].used_mem_mib, 81920 / 16);
    assert_string_equal(cards[0].uuid, "GPU-6d0c1c3e-0000-4000-8000-000000000000");
    assert_string_equal(cards[1].uuid, "GPU-11111111-2222-3333-4444-555555555555");
    assert_string_equal(cards[2].model, "Tesla T4");
    assert_int_equal(cards[2].mem_mib, 15360);
    assert_int_equal(cards[2].used_mem_mib, 15360 / 16);
    for (uint32_t i = 0; i < 3; i++) {
        assert_int_equal(cards[i].index, i);
        assert_int_equal(cards[i].minor, 2 - i); /* the mock numbers minors backwards */
        assert_true(cards[i].healthy);
    }
    /* Measured use (status.used): memory and utilization (the mock's is 0). */
    assert_true(cards[0].has_used && cards[0].has_util);
    assert_int_equal(cards[0].util_pct, 0);
    /* A card without utilization stays healthy and reports memory only. */
    setenv("EGPU_MOCK_NVML_FAIL", "nvmlDeviceGetUtilizationRates@1=3", 1);
    list_cards(g, cards, &n);
    unsetenv("EGPU_MOCK_NVML_FAIL");
    assert_true(cards[1].healthy && cards[1].has_used);
    assert_false(cards[1].has_util);
    assert_true(cards[0].has_util && cards[2].has_util);
    assert_int_equal(egpu_gpus_list(g, cards, 2, &n, &err), EGPU_ELIMIT);
    egpu_gpus_free(g);
    mock_release(&m, 1, 1);
}

/* Used memory, given an H100's 480 MiB reserved by the driver (the mock's
 * EGPU_MOCK_NVML_RESERVED_MIB): v2 where it answers, used without the
 * reservation; v1 (used with it) where the symbol is missing. */
static void test_nvml_memory_v2(void **state)
{
    struct egpu_gpu_info cards[EGPU_NODE_GPUS_MAX];
    struct egpu_error err = {0};
    struct egpu_gpus *g = NULL;
    struct mock m;
    size_t n = 0;

    (void)state;
    setenv("EGPU_MOCK_NVML_GPUS", "NVIDIA H100 80GB HBM3:81559,Tesla T4:15360", 1);
    setenv("EGPU_MOCK_NVML_RESERVED_MIB", "480", 1);
    mock_hold(&m, MOCK_FULL);
    if (egpu_gpus_open_nvml(MOCK_FULL, &g, &err) != 0)
        fail_msg("open: %s", err.msg);
    list_cards(g, cards, &n);
    assert_int_equal(n, 2);
    for (size_t i = 0; i < n; i++) {
        assert_true(cards[i].healthy && cards[i].has_used);
        assert_int_equal(cards[i].mem_source, EGPU_MEM_SOURCE_V2);
        assert_int_equal(cards[i].reserved_mem_mib, 480);
    }
    assert_int_equal(cards[0].mem_mib, 81559);
    assert_int_equal(cards[0].used_mem_mib, 81559 / 16); /* the processes' part only */
    assert_int_equal(cards[1].used_mem_mib, 15360 / 16);
    assert_string_equal(egpu_gpu_mem_source_name(cards[0].mem_source),
                        "nvmlDeviceGetMemoryInfo_v2");
    /* An idle card: nothing used, whatever the driver holds. */
    setenv("EGPU_MOCK_NVML_RESERVED_MIB", "81559", 1);
    list_cards(g, cards, &n);
    assert_int_equal(cards[0].used_mem_mib, 0);
    assert_int_equal(cards[0].reserved_mem_mib, 81559);
    egpu_gpus_free(g);
    mock_release(&m, 1, 1);

    /* A library without v2 (an older driver): v1, the reservation in used. */
    setenv("EGPU_MOCK_NVML_RESERVED_MIB", "480", 1);
    mock_hold(&m, MOCK_NOOPT);
    if (egpu_gpus_open_nvml(MOCK_NOOPT, &g, &err) != 0)
        fail_msg("open: %s", err.msg);
    list_cards(g, cards, &n);
    assert_int_equal(n, 2);
    assert_true(cards[0].healthy && cards[0].has_used);
    assert_int_equal(cards[0].mem_source, EGPU_MEM_SOURCE_V1);
    assert_int_equal(cards[0].used_mem_mib, 81559 / 16 + 480);
    assert_int_equal(cards[0].reserved_mem_mib, 0);
    assert_string_equal(egpu_gpu_mem_source_name(cards[0].mem_source), "nvmlDeviceGetMemoryInfo");
    assert_string_equal(egpu_gpu_mem_source_name(EGPU_MEM_SOURCE_NONE), "none");
    egpu_gpus_free(g);
    mock_release(&m, 1, 1);
}

/* v2 exported but answering "not here" (FUNCTION_NOT_FOUND, NOT_SUPPORTED,
 * ARGUMENT_VERSION_MISMATCH): v1 on that probe, the card healthy, and v2
 * again once it answers. Any other failure of v2 is the card's. */
static void test_nvml_memory_v2_fails(void **state)
{
    static const char *const fallbacks[] = {
        "nvmlDeviceGetMemoryInfo_v2@*=13",
        "nvmlDeviceGetMemoryInfo_v2@*=3",
        "nvmlDeviceGetMemoryInfo_v2@1=25",
    };
    struct egpu_gpu_info cards[EGPU_NODE_GPUS_MAX];
    struct egpu_error err = {0};
    struct egpu_gpus *g = NULL;
    struct mock m;
    size_t n = 0;

    (void)state;
    setenv("EGPU_MOCK_NVML_GPUS", "H100:81559,H100:81559", 1);
    setenv("EGPU_MOCK_NVML_RESERVED_MIB", "480", 1);
    mock_hold(&m, MOCK_FULL);
    if (egpu_gpus_open_nvml(MOCK_FULL, &g, &err) != 0)
        fail_msg("open: %s", err.msg);
    for (size_t f = 0; f < sizeof(fallbacks) / sizeof(fallbacks[0]); f++) {
        setenv("EGPU_MOCK_NVML_FAIL", fallbacks[f], 1);
        list_cards(g, cards, &n);
        assert_int_equal(n, 2);
        assert_true(cards[1].healthy && cards[1].has_used);
        assert_int_equal(cards[1].mem_source, EGPU_MEM_SOURCE_V1);
        assert_int_equal(cards[1].used_mem_mib, 81559 / 16 + 480);
        assert_int_equal(cards[1].reserved_mem_mib, 0);
        unsetenv("EGPU_MOCK_NVML_FAIL");
        list_cards(g, cards, &n);
        assert_int_equal(cards[1].mem_source, EGPU_MEM_SOURCE_V2);
        assert_int_equal(cards[1].used_mem_mib, 81559 / 16);
        assert_int_equal(cards[1].reserved_mem_mib, 480);
    }
    /* Both unavailable and v1 failing: v1's failure names the card's fault. */
    setenv("EGPU_MOCK_NVML_FAIL", "nvmlDeviceGetMemoryInfo_v2@0=3,nvmlDeviceGetMemoryInfo@0=15", 1);
    list_cards(g, cards, &n);
    unsetenv("EGPU_MOCK_NVML_FAIL");
    assert_false(cards[0].healthy);
    assert_string_equal(cards[0].reason, "nvmlDeviceGetMemoryInfo: GPU is lost");
    assert_true(cards[1].healthy);
    egpu_gpus_free(g);
    mock_release(&m, 1, 1);
}

/* The used-memory series follow the card's source: after a fall back from
 * v2 to v1 only the v1 series is left, and a card that left has none. */
static void test_used_series_follow_the_source(void **state)
{
    static const char *const labels[] = {"gpu", "source"};
    struct egpu_gpu_info cards[2];
    struct egpu_metrics *reg = egpu_metrics_new();
    struct egpu_metric *m = NULL;
    const char *v2[] = {"GPU-a", "nvmlDeviceGetMemoryInfo_v2"};
    const char *v1[] = {"GPU-a", "nvmlDeviceGetMemoryInfo"};
    const char *other[] = {"GPU-b", "nvmlDeviceGetMemoryInfo_v2"};
    double got;

    (void)state;
    assert_non_null(reg);
    assert_int_equal(egpu_metric_gauge(reg, "used", "", 2, labels, &m), 0);
    memset(cards, 0, sizeof(cards));
    snprintf(cards[0].uuid, sizeof(cards[0].uuid), "GPU-a");
    snprintf(cards[1].uuid, sizeof(cards[1].uuid), "GPU-b");
    cards[0].mem_source = cards[1].mem_source = EGPU_MEM_SOURCE_V2;
    assert_int_equal(egpu_metric_set(m, v2, 5), 0);
    assert_int_equal(egpu_metric_set(m, other, 7), 0);
    assert_int_equal(egpu__agent_metrics_used_retain(m, cards, 2), 0);
    cards[0].mem_source = EGPU_MEM_SOURCE_V1; /* card a falls back */
    assert_int_equal(egpu_metric_set(m, v1, 485), 0);
    assert_int_equal(egpu__agent_metrics_used_retain(m, cards, 2), 1);
    assert_int_equal(egpu_metric_get(m, v2, &got), -ENOENT);
    assert_int_equal(egpu_metric_get(m, v1, &got), 0);
    assert_true(got == 485);
    assert_int_equal(egpu__agent_metrics_used_retain(m, cards, 1), 1); /* card b left */
    assert_int_equal(egpu_metric_get(m, other, &got), -ENOENT);
    assert_int_equal(egpu_metric_get(m, v1, &got), 0);
    egpu_metrics_free(reg);
}

static void test_nvml_topology(void **state)
{
    struct egpu_error err = {0};
    struct egpu_gpus *g = NULL;
    enum egpu_gpu_link l;
    struct mock m;

    (void)state;
    setenv("EGPU_MOCK_NVML_GPUS", "A:1024,B:1024,C:1024,D:1024", 1);
    setenv("EGPU_MOCK_NVML_TOPO", "0-2=50,1-2=40,0-3=10,1-3=20,2-3=0", 1);
    setenv("EGPU_MOCK_NVML_NVLINK", "0-1", 1);
    mock_hold(&m, MOCK_FULL);
    assert_int_equal(egpu_gpus_open_nvml(MOCK_FULL, &g, &err), 0);
    assert_int_equal(egpu_gpus_link(g, 0, 1, &l, &err), 0);
    assert_int_equal(l, EGPU_LINK_NVLINK);
    assert_int_equal(egpu_gpus_link(g, 1, 0, &l, &err), 0);
    assert_int_equal(l, EGPU_LINK_NVLINK);
    assert_int_equal(egpu_gpus_link(g, 0, 2, &l, &err), 0);
    assert_int_equal(l, EGPU_LINK_SYS);
    assert_int_equal(egpu_gpus_link(g, 2, 1, &l, &err), 0);
    assert_int_equal(l, EGPU_LINK_NODE);
    assert_int_equal(egpu_gpus_link(g, 0, 3, &l, &err), 0);
    assert_int_equal(l, EGPU_LINK_PIX);
    assert_int_equal(egpu_gpus_link(g, 1, 3, &l, &err), 0);
    assert_int_equal(l, EGPU_LINK_PXB);
    assert_int_equal(egpu_gpus_link(g, 2, 3, &l, &err), 0);
    assert_int_equal(l, EGPU_LINK_BOARD);
    setenv("EGPU_MOCK_NVML_FAIL", "nvmlDeviceGetTopologyCommonAncestor@*=3", 1);
    assert_int_equal(egpu_gpus_link(g, 2, 3, &l, &err), 0);
    assert_int_equal(l, EGPU_LINK_UNKNOWN);
    setenv("EGPU_MOCK_NVML_FAIL", "nvmlDeviceGetTopologyCommonAncestor@*=999", 1);
    assert_int_equal(egpu_gpus_link(g, 2, 3, &l, &err), -EIO);
    assert_non_null(strstr(err.msg, "nvmlDeviceGetTopologyCommonAncestor"));
    unsetenv("EGPU_MOCK_NVML_FAIL");
    assert_int_equal(egpu_gpus_link(g, 0, 9, &l, &err), -ENODEV);
    egpu_gpus_free(g);
    mock_release(&m, 1, 1);
}

static void test_nvml_probe_failures(void **state)
{
    struct egpu_gpu_info cards[EGPU_NODE_GPUS_MAX];
    struct egpu_error err = {0};
    struct egpu_gpus *g = NULL;
    struct mock m;
    size_t n = 0;

    (void)state;
    setenv("EGPU_MOCK_NVML_GPUS", "A100:40960,A100:40960,A100:40960", 1);
    mock_hold(&m, MOCK_FULL);
    assert_int_equal(egpu_gpus_open_nvml(MOCK_FULL, &g, &err), 0);
    list_cards(g, cards, &n);
    assert_int_equal(n, 3);

    /* Card 1 is lost after it was listed: same identity, unhealthy. Card
     * 2's handle fails: known before, so still listed under its UUID. */
    setenv("EGPU_MOCK_NVML_FAIL",
           "nvmlDeviceGetMemoryInfo_v2@1=15,nvmlDeviceGetHandleByIndex_v2@2=15", 1);
    list_cards(g, cards, &n);
    assert_int_equal(n, 3);
    assert_true(cards[0].healthy);
    assert_false(cards[1].healthy);
    assert_string_equal(cards[1].reason, "nvmlDeviceGetMemoryInfo_v2: GPU is lost");
    assert_string_equal(cards[1].uuid, "GPU-6d0c1c3e-0000-4000-8000-000000000001");
    assert_int_equal(cards[1].mem_mib, 40960);
    assert_false(cards[2].healthy);
    assert_string_equal(cards[2].reason, "nvmlDeviceGetHandleByIndex_v2: GPU is lost");
    assert_string_equal(cards[2].uuid, "GPU-6d0c1c3e-0000-4000-8000-000000000002");

    /* They recover when the probe passes again. */
    unsetenv("EGPU_MOCK_NVML_FAIL");
    list_cards(g, cards, &n);
    assert_true(cards[1].healthy && cards[2].healthy);

    /* The count itself failing is an error of the list. */
    setenv("EGPU_MOCK_NVML_FAIL", "nvmlDeviceGetCount_v2@*=999", 1);
    assert_int_equal(egpu_gpus_list(g, cards, EGPU_NODE_GPUS_MAX, &n, &err), -EIO);
    assert_non_null(strstr(err.msg, "nvmlDeviceGetCount_v2: Unknown Error (NVML error 999)"));
    unsetenv("EGPU_MOCK_NVML_FAIL");
    egpu_gpus_free(g);

    /* A card that never answered has no identity to list. */
    setenv("EGPU_MOCK_NVML_FAIL", "nvmlDeviceGetUUID@0=15", 1);
    assert_int_equal(egpu_gpus_open_nvml(MOCK_FULL, &g, &err), 0);
    list_cards(g, cards, &n);
    assert_int_equal(n, 3);
    assert_string_equal(cards[0].uuid, "");
    assert_false(cards[0].healthy);
    assert_string_equal(cards[0].reason, "nvmlDeviceGetUUID: GPU is lost");
    assert_true(cards[1].healthy);
    egpu_gpus_free(g);
    mock_release(&m, 2, 2);
}

static void test_nvml_xid_events(void **state)
{
    struct egpu_gpu_info cards[EGPU_NODE_GPUS_MAX];
    struct egpu_error err = {0};
    struct egpu_gpus *g = NULL;
    struct mock m;
    size_t n = 0;
    long t0;

    (void)state;
    setenv("EGPU_MOCK_NVML_GPUS", "A:1024,B:1024,C:1024", 1);
    /* 13 and 43 are application errors: ignored. 79 (fallen off the bus) is not. */
    setenv("EGPU_MOCK_NVML_XID", "0:13,2:43,1:79,1:48", 1);
    mock_hold(&m, MOCK_FULL);
    assert_int_equal(egpu_gpus_open_nvml(MOCK_FULL, &g, &err), 0);
    list_cards(g, cards, &n);
    t0 = now_ms();
    assert_int_equal(egpu_gpus_wait(g, 5000, &err), 1);
    assert_true(now_ms() - t0 < 1000);
    list_cards(g, cards, &n);
    assert_true(cards[0].healthy);
    assert_false(cards[1].healthy);
    assert_string_equal(cards[1].reason, "XID 79");
    assert_true(cards[2].healthy);
    /* A second XID on the same card changes nothing; then the wait times out. */
    t0 = now_ms();
    assert_int_equal(egpu_gpus_wait(g, 50, &err), 0);
    assert_true(now_ms() - t0 >= 40);
    /* XID health is sticky: the probes pass, the card stays unhealthy. */
    list_cards(g, cards, &n);
    assert_false(cards[1].healthy);
    egpu_gpus_free(g);

    /* An event for no device in particular concerns every card. */
    setenv("EGPU_MOCK_NVML_XID", "*:62", 1);
    assert_int_equal(egpu_gpus_open_nvml(MOCK_FULL, &g, &err), 0);
    list_cards(g, cards, &n);
    assert_int_equal(egpu_gpus_wait(g, 1000, &err), 3);
    list_cards(g, cards, &n);
    for (size_t i = 0; i < n; i++)
        assert_string_equal(cards[i].reason, "XID 62");
    egpu_gpus_free(g);

    /* A broken event set falls back to the probes, without spinning. */
    unsetenv("EGPU_MOCK_NVML_XID");
    setenv("EGPU_MOCK_NVML_FAIL", "nvmlEventSetWait_v2@*=999", 1);
    assert_int_equal(egpu_gpus_open_nvml(MOCK_FULL, &g, &err), 0);
    t0 = now_ms();
    assert_int_equal(egpu_gpus_wait(g, 50, &err), 0);
    assert_int_equal(egpu_gpus_wait(g, 50, &err), 0);
    assert_true(now_ms() - t0 >= 90);
    unsetenv("EGPU_MOCK_NVML_FAIL");
    egpu_gpus_free(g);

    /* Cards that cannot report events: the wait just sleeps. */
    setenv("EGPU_MOCK_NVML_NO_EVENTS", "1", 1);
    assert_int_equal(egpu_gpus_open_nvml(MOCK_FULL, &g, &err), 0);
    t0 = now_ms();
    assert_int_equal(egpu_gpus_wait(g, 50, &err), 0);
    assert_true(now_ms() - t0 >= 40);
    egpu_gpus_free(g);
    mock_release(&m, 4, 4);
}

static void test_nvml_without_optional_symbols(void **state)
{
    struct egpu_gpu_info cards[EGPU_NODE_GPUS_MAX];
    struct egpu_error err = {0};
    struct egpu_gpus *g = NULL;
    enum egpu_gpu_link l = EGPU_LINK_NVLINK;
    struct mock m;
    size_t n = 0;
    long t0;

    (void)state;
    mock_hold(&m, MOCK_NOOPT);
    if (egpu_gpus_open_nvml(MOCK_NOOPT, &g, &err) != 0)
        fail_msg("open: %s", err.msg);
    list_cards(g, cards, &n);
    assert_int_equal(n, 2);
    assert_true(cards[0].healthy);
    /* No topology or P2P calls: unknown, never a NULL call. */
    assert_int_equal(egpu_gpus_link(g, 0, 1, &l, &err), 0);
    assert_int_equal(l, EGPU_LINK_UNKNOWN);
    /* No event calls: the wait sleeps. */
    t0 = now_ms();
    assert_int_equal(egpu_gpus_wait(g, 30, &err), 0);
    assert_true(now_ms() - t0 >= 25);
    egpu_gpus_free(g);
    mock_release(&m, 1, 1);
}

static void test_nvml_missing_library(void **state)
{
    struct egpu_gpus_config cfg = {0};
    struct egpu_error err = {0};
    struct egpu_gpus *g = NULL;
    int rc;

    (void)state;
    assert_int_equal(egpu_gpus_open_nvml("/nonexistent/egpu/libnvidia-ml.so.1", &g, &err), -ENOENT);
    assert_null(g);
    assert_non_null(strstr(err.msg, "cannot load NVML (/nonexistent/egpu/libnvidia-ml.so.1)"));
    assert_non_null(strstr(err.msg, "--fake-gpus"));
    assert_non_null(strstr(err.msg, EGPU_FAKE_GPUS_ENV));

    /* The default name, from the loader's search path. On a machine with the
     * NVIDIA driver this finds the real library; the test then only checks
     * that it opens and closes cleanly. */
    memset(&err, 0, sizeof(err));
    rc = egpu_gpus_open(&cfg, &g, &err);
    if (rc == 0) {
        egpu_gpus_free(g);
    } else {
        assert_non_null(strstr(err.msg, "libnvidia-ml.so.1"));
        assert_non_null(strstr(err.msg, "--fake-gpus"));
    }
}

static void test_nvml_missing_symbol(void **state)
{
    struct egpu_error err = {0};
    struct egpu_gpus *g = NULL;
    struct mock m;

    (void)state;
    mock_hold(&m, MOCK_NOMINOR);
    assert_int_equal(egpu_gpus_open_nvml(MOCK_NOMINOR, &g, &err), -ENOSYS);
    assert_null(g);
    assert_non_null(strstr(err.msg, "has no nvmlDeviceGetMinorNumber"));
    assert_non_null(strstr(err.msg, MOCK_NOMINOR));
    /* Refused before anything in the library ran: not even nvmlInit_v2. */
    mock_release(&m, 0, 0);
}

static void test_nvml_init_failure(void **state)
{
    struct egpu_error err = {0};
    struct egpu_gpus *g = NULL;
    struct mock m;

    (void)state;
    mock_hold(&m, MOCK_FULL);
    setenv("EGPU_MOCK_NVML_INIT", "9", 1);
    assert_int_equal(egpu_gpus_open_nvml(MOCK_FULL, &g, &err), -ENODEV);
    assert_null(g);
    assert_non_null(strstr(err.msg, "nvmlInit_v2"));
    assert_non_null(strstr(err.msg, "Driver Not Loaded (NVML error 9)"));
    setenv("EGPU_MOCK_NVML_INIT", "18", 1);
    assert_int_equal(egpu_gpus_open_nvml(MOCK_FULL, &g, &err), -EPROTO);
    assert_non_null(strstr(err.msg, "version mismatch"));
    unsetenv("EGPU_MOCK_NVML_INIT");

    /* Init passes but the count fails: NVML is shut down again. */
    setenv("EGPU_MOCK_NVML_FAIL", "nvmlDeviceGetCount_v2@*=4", 1);
    assert_int_equal(egpu_gpus_open_nvml(MOCK_FULL, &g, &err), -EACCES);
    assert_non_null(strstr(err.msg, "nvmlDeviceGetCount_v2: Insufficient Permissions"));
    unsetenv("EGPU_MOCK_NVML_FAIL");
    mock_release(&m, 3, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fake_specs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fake_bad_specs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fake_uuids_stable, setup, teardown),
        cmocka_unit_test_setup_teardown(test_open_selects_backend, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fake_health_and_wait, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fake_links, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nvml_cards, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nvml_memory_v2, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nvml_memory_v2_fails, setup, teardown),
        cmocka_unit_test_setup_teardown(test_used_series_follow_the_source, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nvml_topology, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nvml_probe_failures, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nvml_xid_events, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nvml_without_optional_symbols, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nvml_missing_library, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nvml_missing_symbol, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nvml_init_failure, setup, teardown),
    };

    egpu_log_level = -1; /* quiet: the tests provoke every warning */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
