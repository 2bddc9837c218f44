/* bench/vcuda/vcuda_overhead.c - what the interposer adds to a call
 * (target: under 100 ns per launch when not throttled): nanoseconds and
 * instructions per cuLaunchKernel, cuMemAlloc_v2
 * and cuMemFree_v2 with libegpu-vcuda.so preloaded, against the mock driver
 * called directly.
 *
 * Each mode runs in a process of its own (the preload is fixed at exec):
 *   mock direct            no interposer
 *   no limits              preloaded, EGPU_VCUDA_CORE=100: nothing limited, every hook
 *                          passes straight through (with no configuration at all the
 *                          interposer refuses CUDA)
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
 * PERF_COUNT_HW_INSTRUCTIONS) over the same batches. Where the machine has
 * no such counter (most virtual machines), every mode runs a second time
 * under valgrind's callgrind, at most CG_BATCHES_MAX batches: the measured
 * loops are functions of their own (overhead_launches, overhead_allocs,
 * overhead_frees) and callgrind dumps its counts on entering and on leaving
 * each (--dump-before, --dump-after), so a dump taken on leaving holds the
 * instructions (Ir) of one batch; only the calling thread's counts are read
 * (--separate-threads=yes), as perf_event_open counts only that thread. The
 * table then says "(callgrind)". Without either, "n/a" and why.
 *
 * Driver calls. A real driver's calls cost hundreds of ns where the mock's
 * cost tens, so the mock is given a real driver's host time per call
 * (EGPU_MOCK_CUDA_CALL_NS, tests/mock/cuda_mock.c; --driver-latency, default
 * "real": an H200's figures), and the first mode prints what its calls then
 * cost here. Every mode also prints the driver calls made inside the timed
 * launch loops per launch, by entry point, from the mock's own counts
 * (egpu_mock_calls_at): what the interposer calls around a launch, and how
 * often.
 *
 *   vcuda_overhead [--launches N] [--allocs N] [--batches N] [--interposer PATH]
 *                  [--mock-dir DIR] [--valgrind PATH|none]
 *                  [--driver-latency real|none|NAME=NS,...]
 *
 * --valgrind: the valgrind to count instructions with when the hardware
 * counter is missing (default: "valgrind" found in PATH; "none": do not).
 * --driver-latency: EGPU_MOCK_CUDA_CALL_NS for the mock in every mode
 * ("none": the mock's own cost only, tens of ns a call where a real
 * driver's costs hundreds).
 *
 * Exit status: 0, 1 when a mode could not be measured, 2 for a usage error.
 */
#define _GNU_SOURCE /* dladdr, syscall, mkdtemp */
#include <dirent.h>
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

#define BATCHES_MAX    101
#define CG_BATCHES_MAX 3 /* under callgrind: counts are exact, a run is ~50x slower */
#define ALLOC_BYTES    (2u << 20)

enum call { CALL_LAUNCH, CALL_ALLOC, CALL_FREE, NCALLS };

static const char *const call_names[NCALLS] = {"cuLaunchKernel", "cuMemAlloc_v2", "cuMemFree_v2"};

/* The functions that time each call's batches, by the names callgrind is told. */
static const char *const loop_names[NCALLS] = {"overhead_launches", "overhead_allocs",
                                               "overhead_frees"};

struct mode {
    const char *name;
    bool preload;
    const char *memory_mib; /* NULL: no memory limit */
    const char *core_pct;   /* NULL: no compute limit */
};

static const struct mode modes[] = {
    {"mock direct", false, NULL, NULL},           {"no limits", true, NULL, "100"},
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
    const char *valgrind; /* NULL: no callgrind */
    bool valgrind_none;   /* --valgrind none */
    const char *latency;  /* EGPU_MOCK_CUDA_CALL_NS for the mock; NULL: none */
    char self[4096];
    char valgrind_found[4096];
};

/* What a child measured for one call. */
struct figure {
    double ns;     /* median batch, ns per call; < 0: not measured */
    double instr;  /* instructions per call, median batch; < 0: not counted */
    double spread; /* callgrind: largest minus smallest batch, instructions per call */
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

#define CALLS_MAX 64 /* entry points counted */

/* The driver calls made inside the measured launch loops, per entry point,
 * from the mock driver's own counts (egpu_mock_calls_at, tests/mock/cuda_mock.h):
 * what the interposer calls around each launch, and how often. */
struct call_counts {
    const char *(*at)(unsigned i, uint64_t *calls); /* NULL: the driver keeps no counts */
    unsigned n;
    const char *name[CALLS_MAX]; /* the mock's static strings */
    uint64_t before[CALLS_MAX];
    uint64_t sum[CALLS_MAX]; /* calls inside the loops */
};

static unsigned call_slot(struct call_counts *c, const char *name)
{
    unsigned i = 0;

    while (i < c->n && c->name[i] != name)
        i++;
    if (i == c->n && c->n < CALLS_MAX) {
        c->name[c->n] = name;
        c->before[c->n] = c->sum[c->n] = 0;
        c->n++;
    }
    return i;
}

/* What the mock's modelled calls cost from here (EGPU_MOCK_CUDA_CALL_NS), ns
 * per call, the median of 101 batches of 100 calls: printed as "model=
 * name=ns"..., so the table says what host time the driver's calls really
 * had on this machine. */
static void model_check(const struct bench_driver *d)
{
    static const char *const names[] = {"cuCtxGetCurrent", "cuEventRecord", "cuEventQuery"};
    double per[101], ns[3];
    CUcontext ctx;
    CUevent ev;
    CUresult rc = CUDA_SUCCESS;

    if (d->event_create(&ev, CU_EVENT_DEFAULT) != CUDA_SUCCESS)
        return;
    for (int c = 0; c < 3; c++) {
        for (unsigned b = 0; b < 101; b++) {
            uint64_t t0 = bench_now_ns();

            for (unsigned i = 0; i < 100 && rc == CUDA_SUCCESS; i++)
                rc = c == 0   ? d->get_current(&ctx)
                     : c == 1 ? d->event_record(ev, d->stream)
                              : d->event_query(ev);
            per[b] = (double)(bench_now_ns() - t0) / 100;
        }
        ns[c] = median(per, 101);
    }
    if (rc == CUDA_SUCCESS)
        printf("model= %s=%.0f %s=%.0f %s=%.0f\n", names[0], ns[0], names[1], ns[1], names[2],
               ns[2]);
    (void)d->event_destroy(ev); /* the process ends soon */
}

/* Take the counts as a loop starts (mark) or ends (add what it made). */
static void calls_read(struct call_counts *c, bool add)
{
    const char *name;
    uint64_t v;

    for (unsigned i = 0; c->at && (name = c->at(i, &v)) != NULL; i++) {
        unsigned k = call_slot(c, name);

        if (k == CALLS_MAX)
            break;
        if (add)
            c->sum[k] += v - c->before[k];
        c->before[k] = v;
    }
}

/* The measured loops. Each is a function of its own, called through a
 * volatile pointer so that the compiler neither inlines it nor clones it
 * under another name: callgrind finds it by name (loop_names). Each returns
 * 0, or -1 when a call did not return CUDA_SUCCESS. */
static __attribute__((noinline)) int overhead_launches(const struct bench_driver *d, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        if (d->launch(d->fn, 1, 1, 1, 32, 1, 1, 0, d->stream, NULL, NULL) != CUDA_SUCCESS)
            return -1;
    return 0;
}

static __attribute__((noinline)) int overhead_allocs(const struct bench_driver *d,
                                                     CUdeviceptr *ptrs, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        if (d->mem_alloc(&ptrs[i], ALLOC_BYTES) != CUDA_SUCCESS)
            return -1;
    return 0;
}

static __attribute__((noinline)) int overhead_frees(const struct bench_driver *d,
                                                    const CUdeviceptr *ptrs, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        if (d->mem_free(ptrs[i]) != CUDA_SUCCESS)
            return -1;
    return 0;
}

static int (*volatile launches_fn)(const struct bench_driver *, unsigned) = overhead_launches;
static int (*volatile allocs_fn)(const struct bench_driver *, CUdeviceptr *,
                                 unsigned) = overhead_allocs;
static int (*volatile frees_fn)(const struct bench_driver *, const CUdeviceptr *,
                                unsigned) = overhead_frees;

/* vcuda_overhead --child LAUNCHES ALLOCS BATCHES [cg]: prints one line per call,
 * "<call> ns=<median ns per call> instr=<per call, -1 if not counted>", and
 * "counter=<why not>" when instructions could not be counted. With "cg"
 * (running under callgrind, which counts) it opens no counter. */
static int child_main(int argc, char **argv)
{
    bool cg = argc == 4 && strcmp(argv[3], "cg") == 0;
    unsigned launches = (unsigned)strtoul(argv[0], NULL, 10);
    unsigned allocs = (unsigned)strtoul(argv[1], NULL, 10);
    unsigned batches = (unsigned)strtoul(argv[2], NULL, 10);
    double ns[NCALLS][BATCHES_MAX], instr[NCALLS][BATCHES_MAX];
    CUdeviceptr *ptrs = calloc(allocs, sizeof(*ptrs));
    struct bench_driver d;
    struct call_counts *counts = calloc(1, sizeof(*counts));
    char err[256];
    int fd;

    if (ptrs == NULL || counts == NULL || batches > BATCHES_MAX ||
        bench_driver_open(&d, err, sizeof(err)) != 0) {
        fprintf(stderr, "vcuda_overhead child: %s\n", ptrs && counts ? err : "out of memory");
        return 1;
    }
    *(void **)&counts->at = dlsym(d.lib, "egpu_mock_calls_at"); /* the mock's; NULL otherwise */
    fd = cg ? -1 : counter_open();
    if (fd < 0 && !cg)
        printf("counter=perf_event_open(PERF_COUNT_HW_INSTRUCTIONS): %s (%s)\n", strerror(errno),
               errno == ENOENT || errno == EOPNOTSUPP ? "no hardware instruction counter here, "
                                                        "as in most virtual machines"
               : errno == EACCES || errno == EPERM
                   ? "not permitted: see /proc/sys/kernel/perf_event_paranoid, or a seccomp filter"
               : errno == ENOSYS ? "the kernel has no perf events"
                                 : "unexpected");
    if (counts->at && !cg && !bench_driver_interposed(&d))
        model_check(&d);
    for (unsigned i = 0; i < 2 * launches; i++) /* warm up: kernel learned, paths resolved */
        if (d.launch(d.fn, 1, 1, 1, 32, 1, 1, 0, d.stream, NULL, NULL) != CUDA_SUCCESS)
            return 1;
    (void)d.stream_sync(d.stream);
    for (unsigned b = 0; b < batches; b++) {
        uint64_t t0, t1;

        bench_sleep_until(bench_now_ns() + 20000000ull); /* the bucket refills */
        calls_read(counts, false);
        counter_start(fd);
        t0 = bench_now_ns();
        if (launches_fn(&d, launches) != 0)
            return 1;
        t1 = bench_now_ns();
        instr[CALL_LAUNCH][b] = (double)counter_stop(fd) / launches;
        calls_read(counts, true);
        ns[CALL_LAUNCH][b] = (double)(t1 - t0) / launches;
        (void)d.stream_sync(d.stream);

        counter_start(fd);
        t0 = bench_now_ns();
        if (allocs_fn(&d, ptrs, allocs) != 0)
            return 1;
        t1 = bench_now_ns();
        instr[CALL_ALLOC][b] = (double)counter_stop(fd) / allocs;
        ns[CALL_ALLOC][b] = (double)(t1 - t0) / allocs;
        counter_start(fd);
        t0 = bench_now_ns();
        if (frees_fn(&d, ptrs, allocs) != 0)
            return 1;
        t1 = bench_now_ns();
        instr[CALL_FREE][b] = (double)counter_stop(fd) / allocs;
        ns[CALL_FREE][b] = (double)(t1 - t0) / allocs;
    }
    for (int c = 0; c < NCALLS; c++)
        printf("%s ns=%.2f instr=%.1f\n", call_names[c], median(ns[c], batches),
               fd >= 0 ? median(instr[c], batches) : -1.0);
    printf("interposed=%d\n", bench_driver_interposed(&d) ? 1 : 0);
    printf("calls=");
    for (unsigned i = 0; i < counts->n; i++)
        if (counts->sum[i] > 0)
            printf(" %s=%.4f", counts->name[i],
                   (double)counts->sum[i] / ((double)launches * batches));
    printf("\n");
    free(counts);
    free(ptrs);
    return 0;
}

/* ---- The parent: every mode, then the table. ---- */

static int cmp_dumps(const struct dirent **a, const struct dirent **b)
{
    unsigned x = 0, y = 0;

    (void)sscanf((*a)->d_name, "cg.out.%u", &x);
    (void)sscanf((*b)->d_name, "cg.out.%u", &y);
    return (x > y) - (x < y);
}

static int is_thread1_dump(const struct dirent *e)
{
    unsigned part, thread;
    int end = 0;

    return sscanf(e->d_name, "cg.out.%u-%u%n", &part, &thread, &end) == 2 &&
           e->d_name[end] == '\0' && thread == 1;
}

/* Read the callgrind dumps a child left in dir: files "cg.out.<part>-01"
 * (thread 1, the one that calls), each with a line "desc: Trigger:
 * --dump-after=<function>" when taken on leaving a measured loop, and
 * "totals: <Ir>" (callgrind output format, valgrind manual "Callgrind Format
 * Specification"). calls[c] is the number of calls one batch of call c makes.
 * Fills fig[c].instr (median batch, per call) and fig[c].spread. Returns 0,
 * or -1 with the reason in why (whylen bytes) when a call has no dump. */
static int cg_collect(const char *dir, const unsigned calls[NCALLS], struct figure fig[NCALLS],
                      char *why, size_t whylen)
{
    double v[NCALLS][CG_BATCHES_MAX];
    unsigned nv[NCALLS] = {0};
    struct dirent **list;
    char path[4200], *line = NULL;
    size_t cap = 0;
    int n;

    n = scandir(dir, &list, is_thread1_dump, cmp_dumps);
    if (n < 0) {
        snprintf(why, whylen, "scandir %s: %s", dir, strerror(errno));
        return -1;
    }
    for (int i = 0; i < n; i++) {
        unsigned long long total = 0;
        int c = -1, have_total = 0;
        FILE *f;

        snprintf(path, sizeof(path), "%s/%s", dir, list[i]->d_name);
        free(list[i]);
        if ((f = fopen(path, "r")) == NULL)
            continue;
        while (getline(&line, &cap, f) > 0) {
            if (strncmp(line, "desc: Trigger: --dump-after=", 28) == 0) {
                for (int k = 0; k < NCALLS; k++)
                    if (strncmp(line + 28, loop_names[k], strlen(loop_names[k])) == 0 &&
                        line[28 + strlen(loop_names[k])] == '\n')
                        c = k;
            } else if (sscanf(line, "totals: %llu", &total) == 1) {
                have_total = 1;
            }
        }
        fclose(f);
        if (c >= 0 && have_total && nv[c] < CG_BATCHES_MAX)
            v[c][nv[c]++] = (double)total / calls[c];
    }
    free(list);
    free(line);
    for (int c = 0; c < NCALLS; c++) {
        if (nv[c] == 0) {
            snprintf(why, whylen,
                     "callgrind left no dump on leaving %s (is the program stripped of its "
                     "symbols?)",
                     loop_names[c]);
            return -1;
        }
        fig[c].instr = median(v[c], nv[c]); /* sorts v[c] */
        fig[c].spread = v[c][nv[c] - 1] - v[c][0];
    }
    return 0;
}

/* Run mode m in a child, with an allocation directory of its own; fills
 * fig[], per_launch (per_launch_len bytes: the driver calls per launch,
 * " name=rate"..., when the driver counts them; may be NULL) and why (the
 * counter's absence). With cg, the child runs under callgrind
 * (o->valgrind) for at most CG_BATCHES_MAX batches: only the instructions
 * are filled, from its dumps, and why says what went wrong. */
static int run_mode(const struct opts *o, const struct mode *m, bool cg, struct figure fig[NCALLS],
                    char *per_launch, size_t per_launch_len, char *why, size_t whylen)
{
    char out[4096], arg[3][16], ld[8192], dir[] = "/tmp/vcuda-overhead-XXXXXX", cmd[128];
    char cgdir[] = "/tmp/vcuda-overhead-cg-XXXXXX", cgopt[2 * NCALLS + 1][128];
    unsigned batches = cg && o->batches > CG_BATCHES_MAX ? CG_BATCHES_MAX : o->batches;
    unsigned calls[NCALLS] = {o->launches, o->allocs, o->allocs};
    int fd[2], status, interposed = -1, rc = 0;
    size_t len = 0;
    ssize_t n;
    pid_t pid;

    for (int c = 0; c < NCALLS; c++)
        fig[c] = (struct figure){-1, -1, -1};
    if (!mkdtemp(dir))
        return -1;
    if ((cg && !mkdtemp(cgdir)) || pipe(fd) != 0) {
        rmdir(dir);
        if (cg)
            rmdir(cgdir); /* fails harmlessly when mkdtemp did */
        return -1;
    }
    snprintf(arg[0], sizeof(arg[0]), "%u", o->launches);
    snprintf(arg[1], sizeof(arg[1]), "%u", o->allocs);
    snprintf(arg[2], sizeof(arg[2]), "%u", batches);
    snprintf(cgopt[0], sizeof(cgopt[0]), "--callgrind-out-file=%s/cg.out", cgdir);
    for (int c = 0; c < NCALLS; c++) {
        snprintf(cgopt[1 + 2 * c], sizeof(cgopt[0]), "--dump-before=%s", loop_names[c]);
        snprintf(cgopt[2 + 2 * c], sizeof(cgopt[0]), "--dump-after=%s", loop_names[c]);
    }
    pid = fork();
    if (pid < 0) {
        close(fd[0]);
        close(fd[1]);
        rmdir(dir);
        if (cg)
            rmdir(cgdir);
        return -1;
    }
    if (pid == 0) {
        dup2(fd[1], 1);
        close(fd[0]);
        close(fd[1]);
        unsetenv("EGPU_MOCK_CUDA_STATE"); /* a private mock state */
        setenv("EGPU_MOCK_CUDA_BLOCK_NS", "1", 1);
        if (o->latency)
            setenv("EGPU_MOCK_CUDA_CALL_NS", o->latency, 1);
        else
            unsetenv("EGPU_MOCK_CUDA_CALL_NS");
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
        if (m->preload) /* valgrind passes it on to the program it runs */
            setenv("LD_PRELOAD", o->interposer, 1);
        else
            unsetenv("LD_PRELOAD");
        if (cg)
            execl(o->valgrind, o->valgrind, "-q", "--tool=callgrind", "--separate-threads=yes",
                  cgopt[0], cgopt[1], cgopt[2], cgopt[3], cgopt[4], cgopt[5], cgopt[6], o->self,
                  "--child", arg[0], arg[1], arg[2], "cg", (char *)NULL);
        else
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
    if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        if (cg && status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 127)
            snprintf(why, whylen, "could not run %s", o->valgrind);
        else if (cg)
            snprintf(why, whylen, "%s --tool=callgrind failed (exit status %d)", o->valgrind,
                     status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        rc = -1;
    }
    if (rc == 0) {
        for (char *line = out, *next; line && *line; line = next) {
            next = strchr(line, '\n');
            if (next)
                *next++ = '\0';
            if (strncmp(line, "counter=", 8) == 0)
                snprintf(why, whylen, "%s", line + 8);
            else if (sscanf(line, "interposed=%d", &interposed) == 1)
                continue;
            else if (strncmp(line, "calls=", 6) == 0 && per_launch != NULL)
                snprintf(per_launch, per_launch_len, "%s", line + 6);
            else if (strncmp(line, "model=", 6) == 0)
                printf("  the mock's calls, ns each (%s, alone):%s\n", m->name, line + 6);
            for (int c = 0; c < NCALLS && !cg; c++) {
                size_t k = strlen(call_names[c]);

                if (strncmp(line, call_names[c], k) == 0 && line[k] == ' ')
                    (void)sscanf(line + k, " ns=%lf instr=%lf", &fig[c].ns, &fig[c].instr);
            }
        }
        if (interposed != (m->preload ? 1 : 0)) {
            fprintf(stderr, "vcuda_overhead: mode \"%s\"%s: the interposer is %s\n", m->name,
                    cg ? " under callgrind" : "",
                    m->preload ? "not in the way (was it preloaded?)" : "in the way");
            if (cg)
                snprintf(why, whylen, "under callgrind, the interposer was %spreloaded",
                         m->preload ? "not " : "");
            rc = -1;
        }
    }
    if (rc == 0 && cg)
        rc = cg_collect(cgdir, calls, fig, why, whylen);
    snprintf(cmd, sizeof(cmd), "rm -rf %s %s", dir, cg ? cgdir : ""); /* the shared regions */
    if (system(cmd) != 0)
        fprintf(stderr, "vcuda_overhead: could not remove %s %s\n", dir, cg ? cgdir : "");
    return rc;
}

/* One mode's line of the driver calls table: each entry point's calls per
 * launch, then their sum besides the launch itself. calls: " name=rate"...
 * as the child printed them; NULL: the mode was not measured. */
static void print_calls(const char *mode, const char *calls)
{
    double besides = 0, rate;
    char name[128];
    int used;

    printf("  %-20s", mode);
    if (calls == NULL || calls[0] == '\0') {
        printf(" %s\n", calls ? "no counts (a driver without egpu_mock_calls_at)" : "-");
        return;
    }
    for (const char *p = calls; sscanf(p, " %127[^=]=%lf%n", name, &rate, &used) == 2; p += used) {
        printf(" %s=%.4f", name, rate);
        if (strcmp(name, call_names[CALL_LAUNCH]) != 0)
            besides += rate;
    }
    printf("\n  %-20s besides the launch: %.4f calls per launch\n", "", besides);
}

/* The first executable "valgrind" in PATH, into buf (len bytes); NULL if none. */
static const char *find_valgrind(char *buf, size_t len)
{
    const char *path = getenv("PATH");

    for (const char *p = path; p && *p;) {
        const char *end = strchr(p, ':');
        size_t k = end ? (size_t)(end - p) : strlen(p);

        if (k > 0 && k + sizeof("/valgrind") <= len) {
            memcpy(buf, p, k);
            memcpy(buf + k, "/valgrind", sizeof("/valgrind"));
            if (access(buf, X_OK) == 0)
                return buf;
        }
        p = end ? end + 1 : p + k;
    }
    return NULL;
}

static int parse(int argc, char **argv, struct opts *o)
{
    ssize_t n;

    *o = (struct opts){.launches = 4000,
                       .allocs = 500,
                       .batches = 15,
                       .interposer = EGPU_BENCH_BUILD "/src/vcuda/libegpu-vcuda.so",
                       .mock_dir = EGPU_BENCH_BUILD "/tests/mock/cuda",
                       .latency = "real"};
    n = readlink("/proc/self/exe", o->self, sizeof(o->self) - 1);
    if (n <= 0)
        return -1;
    o->self[n] = '\0';
    o->valgrind = find_valgrind(o->valgrind_found, sizeof(o->valgrind_found));
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
        else if (strcmp(argv[i], "--driver-latency") == 0)
            o->latency = strcmp(argv[i + 1], "none") == 0 ? NULL : argv[i + 1];
        else if (strcmp(argv[i], "--valgrind") == 0) {
            o->valgrind_none = strcmp(argv[i + 1], "none") == 0;
            o->valgrind = o->valgrind_none ? NULL : argv[i + 1];
        } else {
            return -1;
        }
    }
    return argc % 2 == 1 && o->launches > 0 && o->allocs > 0 && o->batches > 0 &&
                   o->batches <= BATCHES_MAX
               ? 0
               : -1;
}

int main(int argc, char **argv)
{
    struct figure fig[NMODES][NCALLS];
    char why[512] = "", cg_why[512] = "", calls[NMODES][1024] = {{0}};
    bool ok[NMODES], cg = false;
    double core_added, spread = -1;
    size_t spread_at[2] = {0, 0}; /* mode, call */
    struct opts o;
    int failed = 0;

    if ((argc == 5 || argc == 6) && strcmp(argv[1], "--child") == 0)
        return child_main(argc - 2, argv + 2);
    if (parse(argc, argv, &o) != 0) {
        fprintf(stderr,
                "usage: vcuda_overhead [--launches N] [--allocs N] [--batches N<=%d] "
                "[--interposer PATH] [--mock-dir DIR] [--valgrind PATH|none]\n"
                "                      [--driver-latency real|none|NAME=NS,...]\n",
                BATCHES_MAX);
        return 2;
    }
    if (access(o.interposer, R_OK) != 0) {
        fprintf(stderr, "vcuda_overhead: no interposer at %s\n", o.interposer);
        return 1;
    }
    for (size_t m = 0; m < NMODES; m++) {
        ok[m] = run_mode(&o, &modes[m], false, fig[m], calls[m], sizeof(calls[m]), why,
                         sizeof(why)) == 0;
        if (!ok[m]) {
            fprintf(stderr, "vcuda_overhead: mode \"%s\" could not be measured\n", modes[m].name);
            failed = 1;
        }
    }
    if (why[0] && o.valgrind == NULL) {
        snprintf(cg_why, sizeof(cg_why), "%s",
                 o.valgrind_none ? "callgrind not asked for (--valgrind none)"
                                 : "no valgrind in PATH to count with callgrind instead");
    } else if (why[0]) { /* no hardware counter: count under callgrind */
        struct figure f[NCALLS];

        cg = true;
        for (size_t m = 0; m < NMODES && cg; m++) {
            if (!ok[m])
                continue;
            if (run_mode(&o, &modes[m], true, f, NULL, 0, cg_why, sizeof(cg_why)) != 0) {
                cg = false;
                break;
            }
            for (int c = 0; c < NCALLS; c++) {
                fig[m][c].instr = f[c].instr;
                if (f[c].spread > spread) {
                    spread = f[c].spread;
                    spread_at[0] = m;
                    spread_at[1] = (size_t)c;
                }
            }
        }
        if (!cg)
            for (size_t m = 0; m < NMODES; m++)
                for (int c = 0; c < NCALLS; c++)
                    fig[m][c].instr = -1;
    }
    printf("vcuda_overhead: median of %u batches; %u launches or %u allocations of 2 MiB per "
           "batch;\n  the mock driver (%s) alone, then behind %s;\n  the mock's host time "
           "per call (EGPU_MOCK_CUDA_CALL_NS): %s\n",
           o.batches, o.launches, o.allocs, o.mock_dir, o.interposer,
           o.latency ? o.latency : "none");
    if (cg)
        printf("  instructions: user-space Ir of the calling thread under callgrind (%s), "
               "median of %u batches\n",
               o.valgrind, o.batches < CG_BATCHES_MAX ? o.batches : CG_BATCHES_MAX);
    printf("%-15s %-20s %9s %9s %11s %11s%s\n", "call", "mode", "ns/call", "added ns", "instr/call",
           "added instr", cg ? " (callgrind)" : "");
    for (int c = 0; c < NCALLS; c++) {
        for (size_t m = 0; m < NMODES; m++) {
            char ns[32] = "-", added[32] = "-", ins[32] = "n/a", added_ins[32] = "n/a";

            if (ok[m]) {
                snprintf(ns, sizeof(ns), "%.1f", fig[m][c].ns);
                if (m > 0 && ok[0])
                    snprintf(added, sizeof(added), "%+.1f", fig[m][c].ns - fig[0][c].ns);
                if (fig[m][c].instr >= 0) {
                    snprintf(ins, sizeof(ins), "%.1f", fig[m][c].instr);
                    if (m > 0 && ok[0] && fig[0][c].instr >= 0)
                        snprintf(added_ins, sizeof(added_ins), "%+.1f",
                                 fig[m][c].instr - fig[0][c].instr);
                    else
                        snprintf(added_ins, sizeof(added_ins), "-");
                }
            }
            printf("%-15s %-20s %9s %9s %11s %11s\n", m == 0 ? call_names[c] : "", modes[m].name,
                   ns, m > 0 ? added : "-", ins, added_ins);
        }
    }
    if (cg)
        printf("instructions: no hardware counter (%s); counted by callgrind, largest "
               "batch-to-batch spread %.2f instructions per call (%s, %s)\n",
               why, spread, call_names[spread_at[1]], modes[spread_at[0]].name);
    else if (why[0])
        printf("instructions n/a: %s; %s\n", why, cg_why);
    printf("driver calls per cuLaunchKernel in the timed loops (the mock's counts):\n");
    for (size_t m = 0; m < NMODES; m++)
        print_calls(modes[m].name, ok[m] ? calls[m] : NULL);
    if (ok[0] && ok[3]) {
        core_added = fig[3][CALL_LAUNCH].ns - fig[0][CALL_LAUNCH].ns;
        printf("target: under 100 ns added per launch when not throttled: %+.1f ns with a core "
               "limit and tokens (%s), %+.1f ns without limits\n",
               core_added, core_added < 100 ? "met" : "missed",
               ok[1] ? fig[1][CALL_LAUNCH].ns - fig[0][CALL_LAUNCH].ns : 0.0);
    }
    return failed;
}
