/* bench/vcuda/vcuda_overhead.c - what the interposer adds to a call (issue 5,
 * point 3): nanoseconds and instructions per cuLaunchKernel, cuMemAlloc_v2
 * and cuMemFree_v2 with libegpu-vcuda.so preloaded, against the mock driver
 * called directly.
 *
 * Each mode runs in a process of its own (the preload is fixed at exec):
 *   mock direct            no interposer
 *   no limits              preloaded, no configuration: everything passes through
 *   memory limit           preloaded, EGPU_VCUDA_MEMORY_MIB=65536
 *   core limit 50%         preloaded, EGPU_VCUDA_CORE=50, with tokens available
 *   memory + core limit    both
 * Launches: batches of --launches calls of a 1-block kernel costing 1 ns of
 * mock device time (so the device never holds them back), the stream
 * synchronised and 20 ms left between batches so the bucket is never empty
 * (the controller charges at least 1 us per launch: 2 us of wall time at 50%,
 * and its bucket holds 25 ms); the figure is the median batch's time per
 * call, which includes the launches the controller times with events (one
 * per 200 us of estimated work). Allocations: batches of --allocs
 * cuMemAlloc_v2 of 2 MiB, then as many cuMemFree_v2, timed apart.
 * Instructions: user-space instructions retired (perf_event_open,
 * PERF_COUNT_HW_INSTRUCTIONS) over the same batches, or "n/a" and why.
 *
 *   vcuda_overhead [--launches N] [--allocs N] [--batches N] [--interposer PATH]
 *                  [--mock-dir DIR]
 *
 * Exit status: 0, 1 when a mode could not be measured, 2 for a usage error.
 */
#define _GNU_SOURCE /* dladdr, syscall, mkdtemp */
#include <errno.h>
#include <linux/perf_event.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_driver.h"

#ifndef EGPU_BENCH_BUILD
#define EGPU_BENCH_BUILD "build"
#endif

#define BATCHES_MAX 101
#define ALLOC_BYTES (2u << 20)

enum call { CALL_LAUNCH, CALL_ALLOC, CALL_FREE, NCALLS };

static const char *const call_names[NCALLS] = {"cuLaunchKernel", "cuMemAlloc_v2", "cuMemFree_v2"};

struct mode {
    const char *name;
    bool preload;
    const char *memory_mib; /* NULL: no memory limit */
    const char *core_pct;   /* NULL: no compute limit */
};

static const struct mode modes[] = {
    {"mock direct", false, NULL, NULL},           {"no limits", true, NULL, NULL},
    {"memory limit", true, "65536", NULL},        {"core limit 50%", true, NULL, "50"},
    {"memory + core limit", true, "65536", "50"},
};

#define NMODES (sizeof(modes) / sizeof(modes[0]))

struct opts {
    unsigned launches;
    unsigned allocs;
    unsigned batches;
    const char *interposer;
    const char *mock_dir;
    char self[4096];
};

/* What a child measured for one call. */
struct figure {
    double ns;    /* median batch, ns per call; < 0: not measured */
    double instr; /* instructions per call; < 0: not counted */
};

/* ---- The child: one mode. ---- */

/* A user-space instruction counter for this process, or -1 with errno set. */
static int counter_open(void)
{
    struct perf_event_attr pe;

    memset(&pe, 0, sizeof(pe));
    pe.type = PERF_TYPE_HARDWARE;
    pe.size = sizeof(pe);
    pe.config = PERF_COUNT_HW_INSTRUCTIONS;
    pe.disabled = 1;
    pe.exclude_kernel = 1;
    pe.exclude_hv = 1;
    return (int)syscall(SYS_perf_event_open, &pe, 0, -1, -1, 0);
}

static void counter_start(int fd)
{
    if (fd >= 0) {
        (void)ioctl(fd, PERF_EVENT_IOC_RESET, 0); /* a failure shows as a wrong count */
        (void)ioctl(fd, PERF_EVENT_IOC_ENABLE, 0);
    }
}

static uint64_t counter_stop(int fd)
{
    uint64_t v = 0;

    if (fd < 0)
        return 0;
    (void)ioctl(fd, PERF_EVENT_IOC_DISABLE, 0);
    if (read(fd, &v, sizeof(v)) != (ssize_t)sizeof(v))
        return 0;
    return v;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

static double median(double *v, unsigned n)
{
    qsort(v, n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* vcuda_overhead --child LAUNCHES ALLOCS BATCHES: prints one line per call,
 * "<call> ns=<median ns per call> instr=<per call, -1 if not counted>", and
 * "counter=<why not>" when instructions could not be counted. */
static int child_main(char **argv)
{
    unsigned launches = (unsigned)strtoul(argv[0], NULL, 10);
    unsigned allocs = (unsigned)strtoul(argv[1], NULL, 10);
    unsigned batches = (unsigned)strtoul(argv[2], NULL, 10);
    double ns[NCALLS][BATCHES_MAX], instr[NCALLS][BATCHES_MAX];
    CUdeviceptr *ptrs = calloc(allocs, sizeof(*ptrs));
    struct bench_driver d;
    char err[256];
    int fd;

    if (ptrs == NULL || batches > BATCHES_MAX || bench_driver_open(&d, err, sizeof(err)) != 0) {
        fprintf(stderr, "vcuda_overhead child: %s\n", ptrs ? err : "out of memory");
        return 1;
    }
    fd = counter_open();
    if (fd < 0)
        printf("counter=perf_event_open(PERF_COUNT_HW_INSTRUCTIONS): %s (%s)\n", strerror(errno),
               errno == ENOENT || errno == EOPNOTSUPP ? "no hardware instruction counter here, "
                                                        "as in most virtual machines"
               : errno == EACCES || errno == EPERM
                   ? "not permitted: see /proc/sys/kernel/perf_event_paranoid, or a seccomp filter"
               : errno == ENOSYS ? "the kernel has no perf events"
                                 : "unexpected");
    for (unsigned i = 0; i < 2 * launches; i++) /* warm up: kernel learned, paths resolved */
        if (d.launch(d.fn, 1, 1, 1, 32, 1, 1, 0, d.stream, NULL, NULL) != CUDA_SUCCESS)
            return 1;
    (void)d.stream_sync(d.stream);
    for (unsigned b = 0; b < batches; b++) {
        uint64_t t0, t1;

        bench_sleep_until(bench_now_ns() + 20000000ull); /* the bucket refills */
        counter_start(fd);
        t0 = bench_now_ns();
        for (unsigned i = 0; i < launches; i++)
            if (d.launch(d.fn, 1, 1, 1, 32, 1, 1, 0, d.stream, NULL, NULL) != CUDA_SUCCESS)
                return 1;
        t1 = bench_now_ns();
        instr[CALL_LAUNCH][b] = (double)counter_stop(fd) / launches;
        ns[CALL_LAUNCH][b] = (double)(t1 - t0) / launches;
        (void)d.stream_sync(d.stream);

        counter_start(fd);
        t0 = bench_now_ns();
        for (unsigned i = 0; i < allocs; i++)
            if (d.mem_alloc(&ptrs[i], ALLOC_BYTES) != CUDA_SUCCESS)
                return 1;
        t1 = bench_now_ns();
        instr[CALL_ALLOC][b] = (double)counter_stop(fd) / allocs;
        ns[CALL_ALLOC][b] = (double)(t1 - t0) / allocs;
        counter_start(fd);
        t0 = bench_now_ns();
        for (unsigned i = 0; i < allocs; i++)
            if (d.mem_free(ptrs[i]) != CUDA_SUCCESS)
                return 1;
        t1 = bench_now_ns();
        instr[CALL_FREE][b] = (double)counter_stop(fd) / allocs;
        ns[CALL_FREE][b] = (double)(t1 - t0) / allocs;
    }
    for (int c = 0; c < NCALLS; c++)
        printf("%s ns=%.2f instr=%.1f\n", call_names[c], median(ns[c], batches),
               fd >= 0 ? median(instr[c], batches) : -1.0);
    printf("interposed=%d\n", bench_driver_interposed(&d) ? 1 : 0);
    free(ptrs);
    return 0;
}

/* ---- The parent: every mode, then the table. ---- */

/* Run mode m in a child, with an allocation directory of its own; fills
 * fig[] and why (the counter's absence). */
static int run_mode(const struct opts *o, const struct mode *m, struct figure fig[NCALLS],
                    char *why, size_t whylen)
{
    char out[4096], arg[3][16], ld[8192], dir[] = "/tmp/vcuda-overhead-XXXXXX", cmd[64];
    int fd[2], status, interposed = -1;
    size_t len = 0;
    ssize_t n;
    pid_t pid;

    for (int c = 0; c < NCALLS; c++)
        fig[c] = (struct figure){-1, -1};
    if (!mkdtemp(dir) || pipe(fd) != 0)
        return -1;
    snprintf(arg[0], sizeof(arg[0]), "%u", o->launches);
    snprintf(arg[1], sizeof(arg[1]), "%u", o->allocs);
    snprintf(arg[2], sizeof(arg[2]), "%u", o->batches);
    pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        dup2(fd[1], 1);
        close(fd[0]);
        close(fd[1]);
        unsetenv("EGPU_MOCK_CUDA_STATE"); /* a private mock state */
        setenv("EGPU_MOCK_CUDA_BLOCK_NS", "1", 1);
        setenv("EGPU_VCUDA_DIR", dir, 1); /* empty: the environment configures */
        unsetenv("EGPU_VCUDA_GPUS");
        unsetenv("EGPU_VCUDA_CORE_LIMIT");
        if (m->memory_mib)
            setenv("EGPU_VCUDA_MEMORY_MIB", m->memory_mib, 1);
        else
            unsetenv("EGPU_VCUDA_MEMORY_MIB");
        if (m->core_pct)
            setenv("EGPU_VCUDA_CORE", m->core_pct, 1);
        else
            unsetenv("EGPU_VCUDA_CORE");
        snprintf(ld, sizeof(ld), "%s%s%s", o->mock_dir, getenv("LD_LIBRARY_PATH") ? ":" : "",
                 getenv("LD_LIBRARY_PATH") ? getenv("LD_LIBRARY_PATH") : "");
        setenv("LD_LIBRARY_PATH", ld, 1);
        if (m->preload)
            setenv("LD_PRELOAD", o->interposer, 1);
        else
            unsetenv("LD_PRELOAD");
        execl(o->self, o->self, "--child", arg[0], arg[1], arg[2], (char *)NULL);
        _exit(127);
    }
    close(fd[1]);
    while (len + 1 < sizeof(out) && (n = read(fd[0], out + len, sizeof(out) - 1 - len)) > 0)
        len += (size_t)n;
    out[len] = '\0';
    close(fd[0]);
    if (waitpid(pid, &status, 0) != pid)
        status = -1;
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir); /* the interposer's shared regions */
    if (system(cmd) != 0)
        fprintf(stderr, "vcuda_overhead: could not remove %s\n", dir);
    if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return -1;
    for (char *line = out, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        if (strncmp(line, "counter=", 8) == 0)
            snprintf(why, whylen, "%s", line + 8);
        else if (sscanf(line, "interposed=%d", &interposed) == 1)
            continue;
        for (int c = 0; c < NCALLS; c++) {
            size_t k = strlen(call_names[c]);

            if (strncmp(line, call_names[c], k) == 0 && line[k] == ' ')
                (void)sscanf(line + k, " ns=%lf instr=%lf", &fig[c].ns, &fig[c].instr);
        }
    }
    if (interposed != (m->preload ? 1 : 0)) {
        fprintf(stderr, "vcuda_overhead: mode \"%s\": the interposer is %s\n", m->name,
                m->preload ? "not in the way (was it preloaded?)" : "in the way");
        return -1;
    }
    return 0;
}

static int parse(int argc, char **argv, struct opts *o)
{
    ssize_t n;

    *o = (struct opts){.launches = 4000,
                       .allocs = 500,
                       .batches = 15,
                       .interposer = EGPU_BENCH_BUILD "/src/vcuda/libegpu-vcuda.so",
                       .mock_dir = EGPU_BENCH_BUILD "/tests/mock/cuda"};
    n = readlink("/proc/self/exe", o->self, sizeof(o->self) - 1);
    if (n <= 0)
        return -1;
    o->self[n] = '\0';
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--launches") == 0)
            o->launches = (unsigned)strtoul(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--allocs") == 0)
            o->allocs = (unsigned)strtoul(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--batches") == 0)
            o->batches = (unsigned)strtoul(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--interposer") == 0)
            o->interposer = argv[i + 1];
        else if (strcmp(argv[i], "--mock-dir") == 0)
            o->mock_dir = argv[i + 1];
        else
            return -1;
    }
    return argc % 2 == 1 && o->launches > 0 && o->allocs > 0 && o->batches > 0 &&
                   o->batches <= BATCHES_MAX
               ? 0
               : -1;
}

int main(int argc, char **argv)
{
    struct figure fig[NMODES][NCALLS];
    char why[256] = "";
    bool ok[NMODES];
    double core_added;
    struct opts o;
    int failed = 0;

    if (argc == 5 && strcmp(argv[1], "--child") == 0)
        return child_main(argv + 2);
    if (parse(argc, argv, &o) != 0) {
        fprintf(stderr,
                "usage: vcuda_overhead [--launches N] [--allocs N] [--batches N<=%d] "
                "[--interposer PATH] [--mock-dir DIR]\n",
                BATCHES_MAX);
        return 2;
    }
    if (access(o.interposer, R_OK) != 0) {
        fprintf(stderr, "vcuda_overhead: no interposer at %s\n", o.interposer);
        return 1;
    }
    for (size_t m = 0; m < NMODES; m++) {
        ok[m] = run_mode(&o, &modes[m], fig[m], why, sizeof(why)) == 0;
        if (!ok[m]) {
            fprintf(stderr, "vcuda_overhead: mode \"%s\" could not be measured\n", modes[m].name);
            failed = 1;
        }
    }
    printf("vcuda_overhead: median of %u batches; %u launches or %u allocations of 2 MiB per "
           "batch;\n  the mock driver (%s) alone, then behind %s\n",
           o.batches, o.launches, o.allocs, o.mock_dir, o.interposer);
    printf("%-15s %-20s %9s %9s %11s %11s\n", "call", "mode", "ns/call", "added ns", "instr/call",
           "added instr");
    for (int c = 0; c < NCALLS; c++) {
        for (size_t m = 0; m < NMODES; m++) {
            char ns[32] = "-", added[32] = "-", ins[32] = "n/a", added_ins[32] = "n/a";

            if (ok[m]) {
                snprintf(ns, sizeof(ns), "%.1f", fig[m][c].ns);
                if (m > 0 && ok[0])
                    snprintf(added, sizeof(added), "%+.1f", fig[m][c].ns - fig[0][c].ns);
                if (fig[m][c].instr >= 0) {
                    snprintf(ins, sizeof(ins), "%.0f", fig[m][c].instr);
                    if (m > 0 && ok[0] && fig[0][c].instr >= 0)
                        snprintf(added_ins, sizeof(added_ins), "%+.0f",
                                 fig[m][c].instr - fig[0][c].instr);
                    else
                        snprintf(added_ins, sizeof(added_ins), "-");
                }
            }
            printf("%-15s %-20s %9s %9s %11s %11s\n", m == 0 ? call_names[c] : "", modes[m].name,
                   ns, m > 0 ? added : "-", ins, added_ins);
        }
    }
    if (why[0])
        printf("instructions n/a: %s\n", why);
    if (ok[0] && ok[3]) {
        core_added = fig[3][CALL_LAUNCH].ns - fig[0][CALL_LAUNCH].ns;
        printf("target: under 100 ns added per launch when not throttled: %+.1f ns with a core "
               "limit and tokens (%s), %+.1f ns without limits\n",
               core_added, core_added < 100 ? "met" : "missed",
               ok[1] ? fig[1][CALL_LAUNCH].ns - fig[0][CALL_LAUNCH].ns : 0.0);
    }
    return failed;
}
