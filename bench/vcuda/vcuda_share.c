/* bench/vcuda/vcuda_share.c - the compute limit measured: the share of
 * device time each container gets against its target (within 2 points).
 *
 * Every case runs real processes over the mock driver with one shared
 * device state (EGPU_MOCK_CUDA_STATE: one simulated card timeline for all
 * processes; a launch of g blocks occupies card 0 for g x
 * EGPU_MOCK_CUDA_BLOCK_NS, or with --sms S, ceil(g / S) waves of it, as a
 * card of S SMs runs them: EGPU_MOCK_CUDA_SMS). Each container is an allocation directory of its
 * own (EGPU_VCUDA_DIR) with its limits in the environment
 * (EGPU_VCUDA_CORE, EGPU_VCUDA_CORE_LIMIT) and a mock tag of its own
 * (EGPU_MOCK_CUDA_TAG), so the mock credits its busy time separately. Each
 * process saturates: it launches the kernel "spin" on a stream of card 0 in
 * a loop, never waiting, with libegpu-vcuda.so preloaded (or, with
 * --inproc, with the controller of src/vcuda/throttle.c called in-process:
 * the controller alone, without the hooks). The processes of a container
 * launch different grids (grid/2 x 1, 2, 3, 4 blocks), as a real
 * container's do.
 *
 * Measured: after the warm-up, `mockctl <state>` reads each tag's busy time
 * twice, the window apart; the share is the busy time over the window. The
 * target is core % (core limit % for a container alone on the card with a
 * higher limit). Printed as a table with the error in points; the goal is
 * every share within 2 points over a 10 s window.
 *
 *   vcuda_share [--window S] [--warmup S] [--grid N] [--block-ns NS]
 *               [--sms N] [--inproc] [--case SUBSTRING] [--interposer PATH]
 *               [--mock-dir DIR] [--mockctl PATH]
 *
 * Defaults: 10 s window, 1.5 s warm-up, grid 200 (200 us per launch at the
 * default 1000 ns per block), paths from the build tree it was built in.
 * Exit status: 0 when every case ran (whatever the errors), 1 when one could
 * not be run or measured, 2 for a usage error.
 */
#define _GNU_SOURCE /* dladdr, mkdtemp */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_driver.h"
#include "egpu/log.h"
#include "throttle.h"

#ifndef EGPU_BENCH_BUILD
#define EGPU_BENCH_BUILD "build"
#endif

#define MAX_CONTAINERS 2
#define MAX_PROCS      4

struct container_spec {
    unsigned core_pct;
    unsigned limit_pct; /* 0: as core */
    unsigned procs;
    double target_pct;
};

struct bench_case {
    const char *name;
    unsigned ncontainers;
    struct container_spec c[MAX_CONTAINERS];
};

static const struct bench_case cases[] = {
    {"1 process, core 10%", 1, {{10, 0, 1, 10}}},
    {"1 process, core 30%", 1, {{30, 0, 1, 30}}},
    {"1 process, core 50%", 1, {{50, 0, 1, 50}}},
    {"1 process, core 90%", 1, {{90, 0, 1, 90}}},
    {"4 processes, core 10%", 1, {{10, 0, 4, 10}}},
    {"4 processes, core 30%", 1, {{30, 0, 4, 30}}},
    {"4 processes, core 50%", 1, {{50, 0, 4, 50}}},
    {"4 processes, core 90%", 1, {{90, 0, 4, 90}}},
    {"2 containers, 10% + 90%", 2, {{10, 0, 1, 10}, {90, 0, 1, 90}}},
    {"burst alone, core 20% limit 80%", 1, {{20, 80, 1, 80}}},
    {"burst 20%/80% + 50% container", 2, {{20, 80, 1, 20}, {50, 0, 1, 50}}},
};

struct opts {
    double window_s;
    double warmup_s;
    unsigned grid;
    unsigned block_ns;
    unsigned sms; /* EGPU_MOCK_CUDA_SMS; 0: unset (blocks one at a time) */
    bool inproc;
    const char *only;
    const char *interposer;
    const char *mock_dir;
    const char *mockctl;
    char self[4096];
};

/* ---- The worker: one process of a container. ---- */

struct worker_launch {
    struct bench_driver *d;
    unsigned grid;
};

static CUresult worker_do_launch(const struct egpu__vcuda_launch *l)
{
    const struct worker_launch *w = l->ctx;

    return w->d->launch(w->d->fn, w->grid, 1, 1, 128, 1, 1, 0, w->d->stream, NULL, NULL);
}

/* The controller in this process (--inproc): as the interposer would start it. */
static int worker_inproc_init(const struct bench_driver *d, unsigned core, unsigned limit)
{
    struct egpu__vcuda_throttle_config cfg = {
        .dir = getenv("EGPU_VCUDA_DIR"),
        .core_pct = core,
        .core_limit_pct = limit,
        .cards = 2,
        .fns = {.ctx_get_device = d->get_device,
                .event_create = d->event_create,
                .event_record = d->event_record,
                .event_elapsed_time = d->event_elapsed,
                .event_destroy = d->event_destroy,
                .ctx_get_current = d->get_current},
    };

    for (int i = 0; i < EGPU_VCUDA_MAX_CARDS; i++)
        cfg.card_of_device[i] = i < 2 ? i : -1;
    return egpu__vcuda_throttle_init(&cfg);
}

/* vcuda_share --worker START_NS UNTIL_NS GRID INPROC CORE LIMIT: launch from
 * CLOCK_MONOTONIC START_NS (after setting up) until UNTIL_NS. Prints
 * "launches=N" on stdout. */
static int worker_main(char **argv)
{
    uint64_t start = strtoull(argv[0], NULL, 10), until = strtoull(argv[1], NULL, 10);
    uint64_t launches = 0;
    unsigned grid = (unsigned)strtoul(argv[2], NULL, 10);
    bool inproc = strcmp(argv[3], "1") == 0;
    struct bench_driver d;
    struct worker_launch w = {.d = &d, .grid = grid};
    struct egpu__vcuda_launch l;
    char err[256];

    egpu_log_set_component("vcuda_share");
    if (bench_driver_open(&d, err, sizeof(err)) != 0) {
        fprintf(stderr, "vcuda_share worker: %s\n", err);
        return 1;
    }
    if (inproc) {
        if (worker_inproc_init(&d, (unsigned)strtoul(argv[4], NULL, 10),
                               (unsigned)strtoul(argv[5], NULL, 10)) != 0)
            return 1;
    } else if (!bench_driver_interposed(&d)) {
        fprintf(stderr, "vcuda_share worker: cuLaunchKernel is not the interposer's "
                        "(is libegpu-vcuda.so preloaded?)\n");
        return 1;
    }
    l = (struct egpu__vcuda_launch){.blocks = grid,
                                    .threads = 128,
                                    .fn = d.fn,
                                    .stream = d.stream,
                                    .launch = worker_do_launch,
                                    .ctx = &w};
    bench_sleep_until(start);
    while (bench_now_ns() < until) {
        CUresult rc = inproc ? egpu__vcuda_throttle_launch(&l) : worker_do_launch(&l);

        if (rc != CUDA_SUCCESS) {
            fprintf(stderr, "vcuda_share worker: cuLaunchKernel: CUresult %d\n", rc);
            return 1;
        }
        launches++;
    }
    (void)d.stream_sync(d.stream); /* the last launches finish before the process goes */
    printf("launches=%llu\n", (unsigned long long)launches);
    if (inproc && getenv("VCUDA_SHARE_STATS")) {
        struct egpu__vcuda_throttle_stats st;

        egpu__vcuda_throttle_stats(&st);
        fprintf(stderr,
                "worker %d: launches=%llu sampled=%llu done=%llu lost=%llu bucket_sleeps=%llu "
                "queue_sleeps=%llu queue_forced=%llu\n",
                (int)getpid(), (unsigned long long)launches, (unsigned long long)st.sampled,
                (unsigned long long)st.samples_done, (unsigned long long)st.samples_lost,
                (unsigned long long)st.bucket_sleeps, (unsigned long long)st.queue_sleeps,
                (unsigned long long)st.queue_forced);
    }
    return 0;
}

/* ---- The driver of the cases. ---- */

/* Run argv (argv[0] a path) and put its stdout in out (NUL-terminated).
 * Returns its exit status, or -1. */
static int run_capture(char *const argv[], char *out, size_t outlen)
{
    int fd[2], status;
    size_t len = 0;
    ssize_t n;
    pid_t pid;

    if (pipe(fd) != 0)
        return -1;
    pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        dup2(fd[1], 1);
        close(fd[0]);
        close(fd[1]);
        execv(argv[0], argv);
        _exit(127);
    }
    close(fd[1]);
    while (len + 1 < outlen && (n = read(fd[0], out + len, outlen - 1 - len)) > 0)
        len += (size_t)n;
    out[len] = '\0';
    close(fd[0]);
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
        return -1;
    return WEXITSTATUS(status);
}

/* One reading of the mock: its clock and each container tag's busy time on card 0. */
struct reading {
    uint64_t now_ns;
    uint64_t busy_ns[MAX_CONTAINERS];
};

static int read_mock(const struct opts *o, const char *state, struct reading *r)
{
    static char out[1 << 16];
    char *argv[] = {(char *)o->mockctl, (char *)state, NULL};
    char *line, *save = NULL;

    memset(r, 0, sizeof(*r));
    if (run_capture(argv, out, sizeof(out)) != 0)
        return -1;
    for (line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        unsigned c, card;
        unsigned long long busy;

        if (sscanf(line, "now_ns=%llu", &busy) == 1)
            r->now_ns = busy;
        else if (sscanf(line, "tag c%u card %u busy_ns=%llu", &c, &card, &busy) == 3 &&
                 c < MAX_CONTAINERS && card == 0)
            r->busy_ns[c] = busy;
    }
    return r->now_ns ? 0 : -1;
}

static void set_env_num(const char *name, unsigned long long v)
{
    char buf[32];

    snprintf(buf, sizeof(buf), "%llu", v);
    setenv(name, buf, 1);
}

/* Start a worker of container c (tag "c<c>", allocation directory dir) with
 * the limits of s, launching grid blocks from start to until (ns). */
static pid_t spawn_worker(const struct opts *o, const struct container_spec *s, unsigned c,
                          unsigned grid, const char *dir, const char *state, uint64_t start,
                          uint64_t until, int out_fd)
{
    char start_s[32], until_s[32], grid_s[32], core_s[16], limit_s[16], tag[16], ld[8192];
    pid_t pid;

    snprintf(start_s, sizeof(start_s), "%llu", (unsigned long long)start);
    snprintf(until_s, sizeof(until_s), "%llu", (unsigned long long)until);
    snprintf(grid_s, sizeof(grid_s), "%u", grid);
    snprintf(core_s, sizeof(core_s), "%u", s->core_pct);
    snprintf(limit_s, sizeof(limit_s), "%u", s->limit_pct ? s->limit_pct : s->core_pct);
    snprintf(tag, sizeof(tag), "c%u", c);
    pid = fork();
    if (pid != 0)
        return pid;
    dup2(out_fd, 1);
    setenv("EGPU_MOCK_CUDA_STATE", state, 1);
    setenv("EGPU_MOCK_CUDA_TAG", tag, 1);
    set_env_num("EGPU_MOCK_CUDA_BLOCK_NS", o->block_ns);
    if (o->sms)
        set_env_num("EGPU_MOCK_CUDA_SMS", o->sms);
    else
        unsetenv("EGPU_MOCK_CUDA_SMS");
    setenv("EGPU_VCUDA_DIR", dir, 1);
    setenv("EGPU_VCUDA_CORE", core_s, 1);
    setenv("EGPU_VCUDA_CORE_LIMIT", limit_s, 1);
    unsetenv("EGPU_VCUDA_GPUS");
    unsetenv("EGPU_VCUDA_MEMORY_MIB");
    snprintf(ld, sizeof(ld), "%s%s%s", o->mock_dir, getenv("LD_LIBRARY_PATH") ? ":" : "",
             getenv("LD_LIBRARY_PATH") ? getenv("LD_LIBRARY_PATH") : "");
    setenv("LD_LIBRARY_PATH", ld, 1);
    if (o->inproc)
        unsetenv("LD_PRELOAD");
    else
        setenv("LD_PRELOAD", o->interposer, 1);
    execl(o->self, o->self, "--worker", start_s, until_s, grid_s, o->inproc ? "1" : "0", core_s,
          limit_s, (char *)NULL);
    _exit(127);
}

struct result {
    double share_pct[MAX_CONTAINERS];
};

/* Run case k; fills r. Returns 0, or -1 (reason on stderr). */
static int run_case(const struct opts *o, const struct bench_case *k, struct result *r)
{
    char root[] = "/tmp/vcuda-share-XXXXXX", state[64], dirs[MAX_CONTAINERS][64], cmd[128];
    uint64_t t0 = bench_now_ns(), warm = (uint64_t)(o->warmup_s * 1e9);
    uint64_t win = (uint64_t)(o->window_s * 1e9), until = t0 + warm + win + 300000000ull;
    pid_t pids[MAX_CONTAINERS * MAX_PROCS];
    unsigned owner[MAX_CONTAINERS * MAX_PROCS], n = 0;
    struct reading a, b;
    int fd[2], rc = 0, status;
    char out[4096];
    size_t len = 0;
    ssize_t got;

    memset(r, 0, sizeof(*r));
    if (!mkdtemp(root) || pipe(fd) != 0) {
        fprintf(stderr, "vcuda_share: temporary directory: %s\n", strerror(errno));
        return -1;
    }
    snprintf(state, sizeof(state), "%s/state", root);
    for (unsigned c = 0; c < k->ncontainers; c++) {
        snprintf(dirs[c], sizeof(dirs[c]), "%s/c%u", root, c);
        mkdir(dirs[c], 0700);
        for (unsigned p = 0; p < k->c[c].procs; p++) {
            unsigned grid = o->grid;

            if (k->c[c].procs > 1) /* different kernels per process: grid/2 x 1, 2, 3, 4 */
                grid = (o->grid / 2 ? o->grid / 2 : 1) * (p + 1);
            pids[n] = spawn_worker(o, &k->c[c], c, grid, dirs[c], state, 0, until, fd[1]);
            owner[n++] = c;
        }
    }
    close(fd[1]);
    bench_sleep_until(t0 + warm);
    if (read_mock(o, state, &a) != 0)
        rc = -1;
    bench_sleep_until(t0 + warm + win);
    if (rc == 0 && read_mock(o, state, &b) != 0)
        rc = -1;
    if (rc != 0)
        fprintf(stderr, "vcuda_share: cannot read the mock's state with %s\n", o->mockctl);
    while (len + 1 < sizeof(out) && (got = read(fd[0], out + len, sizeof(out) - 1 - len)) > 0)
        len += (size_t)got;
    out[len] = '\0';
    close(fd[0]);
    for (unsigned i = 0; i < n; i++) {
        if (pids[i] < 0 || waitpid(pids[i], &status, 0) != pids[i] || !WIFEXITED(status) ||
            WEXITSTATUS(status) != 0) {
            fprintf(stderr, "vcuda_share: a worker of container %u failed\n", owner[i]);
            rc = -1;
        }
    }
    if (rc == 0 && b.now_ns > a.now_ns)
        for (unsigned c = 0; c < k->ncontainers; c++)
            r->share_pct[c] =
                100.0 * (double)(b.busy_ns[c] - a.busy_ns[c]) / (double)(b.now_ns - a.now_ns);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
    if (system(cmd) != 0)
        fprintf(stderr, "vcuda_share: could not remove %s\n", root);
    return rc;
}

/* ---- How fast a burst gives way, and comes back. ---- */

#define REACT_READINGS 512
#define REACT_STEP_NS  10000000ull /* a reading every 10 ms */

/* Share in percent of tag c between readings i and j. */
static double react_share(const struct reading *r, unsigned i, unsigned j, unsigned c)
{
    if (r[j].now_ns <= r[i].now_ns)
        return 0;
    return 100.0 * (double)(r[j].busy_ns[c] - r[i].busy_ns[c]) /
           (double)(r[j].now_ns - r[i].now_ns);
}

/* First reading at or after now_ns + t_ns (or the last one). */
static unsigned react_at(const struct reading *r, unsigned n, uint64_t t_ns)
{
    unsigned i = 0;

    while (i + 1 < n && r[i].now_ns < t_ns)
        i++;
    return i;
}

/* Container A (core 10%, limit 100%) runs alone; container B (50%) starts
 * 2 s in and stops 1.5 s later. mockctl is read every 10 ms; printed: each
 * one's share of the first 20, 50, 100 and 500 ms after B's work reached the
 * card (how fast A gave way), A's share while both ran, and how long after
 * B's last work A was back above 90%. Returns 0, or -1 when it could not be
 * run. */
static int run_reaction(const struct opts *o)
{
    static struct reading r[REACT_READINGS];
    static const struct container_spec a = {10, 100, 1, 100}, b = {50, 0, 1, 50};
    char root[] = "/tmp/vcuda-share-XXXXXX", state[64], dirs[2][64], cmd[128];
    uint64_t t0 = bench_now_ns(), b_on = 0, b_off = 0;
    unsigned n = 0, i, up = 0;
    pid_t pids[2];
    int fd, status, rc = 0;

    if (!mkdtemp(root) || (fd = open("/dev/null", O_WRONLY)) < 0)
        return -1;
    snprintf(state, sizeof(state), "%s/state", root);
    for (unsigned c = 0; c < 2; c++) {
        snprintf(dirs[c], sizeof(dirs[c]), "%s/c%u", root, c);
        mkdir(dirs[c], 0700);
    }
    pids[0] = spawn_worker(o, &a, 0, o->grid, dirs[0], state, 0, t0 + 5000000000ull, fd);
    pids[1] =
        spawn_worker(o, &b, 1, o->grid, dirs[1], state, t0 + 2000000000ull, t0 + 3500000000ull, fd);
    close(fd);
    for (uint64_t t = t0 + 1000000000ull; n < REACT_READINGS && t < t0 + 5000000000ull;
         t += REACT_STEP_NS) {
        bench_sleep_until(t);
        if (read_mock(o, state, &r[n]) == 0)
            n++;
    }
    for (unsigned k = 0; k < 2; k++)
        if (pids[k] < 0 || waitpid(pids[k], &status, 0) != pids[k] || !WIFEXITED(status) ||
            WEXITSTATUS(status) != 0)
            rc = -1;
    snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
    if (system(cmd) != 0)
        fprintf(stderr, "vcuda_share: could not remove %s\n", root);
    /* B's work reached the card between readings i-1 and i; it stopped after reading i. */
    for (i = 1; i < n && !b_on; i++)
        if (r[i].busy_ns[1] > r[i - 1].busy_ns[1])
            b_on = r[i - 1].now_ns;
    for (i = n - 1; i > 0 && !b_off; i--)
        if (r[i].busy_ns[1] > r[i - 1].busy_ns[1])
            b_off = r[i].now_ns;
    if (rc != 0 || n < 100 || !b_on || !b_off) {
        fprintf(stderr, "vcuda_share: the burst reaction could not be measured\n");
        return -1;
    }
    for (i = react_at(r, n, b_off) + 1; i < n && !up; i++)
        if (react_share(r, i - 1, i, 0) >= 90.0)
            up = i;
    printf("\nburst reaction (container A: core 10%% limit 100%%, alone; container B: core 50%% "
           "from 2 s to 3.5 s;\n  mockctl read every 10 ms; t = 0 when B's first work reached the "
           "card):\n");
    printf("  A alone, the second before B:        %6.2f%% of the card (limit 100%%)\n",
           react_share(r, react_at(r, n, b_on - 1000000000ull), react_at(r, n, b_on), 0));
    printf("  %-36s %8s %8s %8s %8s\n", "share over [0, t]:", "t=20ms", "50ms", "100ms", "500ms");
    for (unsigned c = 0; c < 2; c++) {
        printf("  %-36s", c == 0 ? "A (target 10%)" : "B (target 50%)");
        for (unsigned k = 0; k < 4; k++) {
            static const uint64_t ms[] = {20, 50, 100, 500};

            printf(" %7.2f%%", react_share(r, react_at(r, n, b_on),
                                           react_at(r, n, b_on + ms[k] * 1000000ull), c));
        }
        printf("\n");
    }
    printf("  A while B ran, from 500 ms on:       %6.2f%% (target 10%%)\n",
           react_share(r, react_at(r, n, b_on + 500000000ull), react_at(r, n, b_off), 0));
    if (up)
        printf("  A above 90%% again after B stopped:  %6.0f ms later\n",
               (double)(r[up - 1].now_ns - b_off) / 1e6);
    else
        printf("  A above 90%% again after B stopped:  never\n");
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: vcuda_share [--window S] [--warmup S] [--grid N] [--block-ns NS] "
               "[--sms N] [--inproc]\n"
               "                   [--case SUBSTRING] [--interposer PATH] [--mock-dir DIR] "
               "[--mockctl PATH]\n");
}

static int parse(int argc, char **argv, struct opts *o)
{
    ssize_t n;

    *o = (struct opts){.window_s = 10,
                       .warmup_s = 1.5,
                       .grid = 200,
                       .block_ns = 1000,
                       .interposer = EGPU_BENCH_BUILD "/src/vcuda/libegpu-vcuda.so",
                       .mock_dir = EGPU_BENCH_BUILD "/tests/mock/cuda",
                       .mockctl = EGPU_BENCH_BUILD "/tests/mock/mockctl"};
    n = readlink("/proc/self/exe", o->self, sizeof(o->self) - 1);
    if (n <= 0)
        return -1;
    o->self[n] = '\0';
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

        if (strcmp(a, "--inproc") == 0) {
            o->inproc = true;
            continue;
        }
        if (strcmp(a, "--help") == 0) {
            usage(stdout);
            exit(0);
        }
        if (v == NULL)
            return -1;
        i++;
        if (strcmp(a, "--window") == 0)
            o->window_s = strtod(v, NULL);
        else if (strcmp(a, "--warmup") == 0)
            o->warmup_s = strtod(v, NULL);
        else if (strcmp(a, "--grid") == 0)
            o->grid = (unsigned)strtoul(v, NULL, 10);
        else if (strcmp(a, "--block-ns") == 0)
            o->block_ns = (unsigned)strtoul(v, NULL, 10);
        else if (strcmp(a, "--sms") == 0)
            o->sms = (unsigned)strtoul(v, NULL, 10);
        else if (strcmp(a, "--case") == 0)
            o->only = v;
        else if (strcmp(a, "--interposer") == 0)
            o->interposer = v;
        else if (strcmp(a, "--mock-dir") == 0)
            o->mock_dir = v;
        else if (strcmp(a, "--mockctl") == 0)
            o->mockctl = v;
        else
            return -1;
    }
    return o->window_s > 0 && o->warmup_s >= 0 && o->grid > 0 && o->block_ns > 0 && o->sms <= 100000
               ? 0
               : -1;
}

int main(int argc, char **argv)
{
    struct opts o;
    unsigned rows = 0, within = 0, failed = 0;
    double worst = 0;

    if (argc >= 8 && strcmp(argv[1], "--worker") == 0)
        return worker_main(argv + 2);
    if (parse(argc, argv, &o) != 0) {
        usage(stderr);
        return 2;
    }
    if (!o.inproc && access(o.interposer, R_OK) != 0) {
        fprintf(stderr, "vcuda_share: no interposer at %s (build it, or --inproc)\n", o.interposer);
        return 1;
    }
    printf("vcuda_share: share of card 0's time per container, %.1f s window after %.1f s "
           "warm-up,\n  %s, kernels of %u blocks x %u ns (4 processes: %u..%u blocks)",
           o.window_s, o.warmup_s,
           o.inproc ? "controller in-process (--inproc)" : "libegpu-vcuda.so preloaded", o.grid,
           o.block_ns, o.grid / 2 ? o.grid / 2 : 1, 4 * (o.grid / 2 ? o.grid / 2 : 1));
    if (o.sms)
        printf(",\n  a card of %u SMs: a grid takes ceil(blocks / %u) x %u ns", o.sms, o.sms,
               o.block_ns);
    printf("\n");
    printf("%-34s %-10s %8s %10s %9s\n", "case", "container", "target%", "measured%", "error");
    fflush(stdout);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct bench_case *k = &cases[i];
        struct result r;

        if (o.only && !strstr(k->name, o.only))
            continue;
        if (run_case(&o, k, &r) != 0) {
            printf("%-34s %-10s %8s %10s %9s\n", k->name, "-", "-", "failed", "-");
            failed++;
            continue;
        }
        for (unsigned c = 0; c < k->ncontainers; c++) {
            double err = r.share_pct[c] - k->c[c].target_pct;
            char label[32];

            if (k->c[c].limit_pct)
                snprintf(label, sizeof(label), "%u%%/%u%%", k->c[c].core_pct, k->c[c].limit_pct);
            else
                snprintf(label, sizeof(label), "%u%%", k->c[c].core_pct);
            printf("%-34s %-10s %8.1f %10.2f %+9.2f\n", c == 0 ? k->name : "", label,
                   k->c[c].target_pct, r.share_pct[c], err);
            rows++;
            within += err >= -2.0 && err <= 2.0;
            if (err * err > worst * worst)
                worst = err;
        }
        fflush(stdout);
    }
    printf("%u of %u shares within 2 points of their target (largest error %+.2f points)%s\n",
           within, rows, worst, failed ? "; some cases failed to run" : "");
    if ((!o.only || strstr("burst reaction", o.only)) && run_reaction(&o) != 0)
        failed++;
    return failed ? 1 : 0;
}
