/* bench/gpu/gpu_overhead.c - bench_gpu_overhead: what the interposer adds to each
 * cuLaunchKernel and each cuMemAlloc_v2 / cuMemFree_v2 on a real NVIDIA GPU (the "overhead"
 * third of bench/gpu), in nanoseconds and in user-space instructions of the calling thread.
 *
 * Four configurations, each in its own process, run --rounds times in turn (figures are
 * medians over the rounds, so a slow moment of the machine hits every configuration alike):
 *   driver (no interposer)
 *   interposer, no limits           LD_PRELOAD, an empty allocation directory and
 *                                   EGPU_VCUDA_CORE=100 (nothing limited; with no
 *                                   configuration at all the interposer refuses CUDA)
 *   interposer, memory limit        + EGPU_VCUDA_MEMORY_MIB (--limit-mib, default 8192)
 *   interposer, core 50% (tokens)   + EGPU_VCUDA_CORE=50: throttling on, but the load stays
 *                                   far below the share, so no launch has to wait
 * Launches: --batches batches of --batch launches of egpu_spin_cycles(0) (1 block of 32
 * threads, the shortest kernel there is), timed around the launch calls only; after each
 * batch the stream is synchronised and the worker sleeps --pace-us (default 2000 us), so the
 * card is busy a few percent of the time and every configuration launches into the same
 * nearly empty queue. The figure per launch is the median over batches of the batch mean.
 * Allocations: --alloc-reps rounds of --allocs cuMemAlloc_v2 of --alloc-kib each, then as
 * many cuMemFree_v2; the figure is the median over rounds of the per-call mean.
 * Instructions: perf_event_open(PERF_COUNT_HW_INSTRUCTIONS, user space only) around the same
 * loops, the calling thread only; "n/a" with the reason when the kernel refuses it.
 * Target: under 100 ns added per launch when not throttled; exits 1 when missed.
 * The core-50% workers run with EGPU_VCUDA_LOG_LEVEL=info and their stderr in a file, where
 * the interposer says at exit what its compute controller did; the line "controller, core
 * 50%" gives it per launch: launches timed with events, context queries (cuCtxGetCurrent),
 * waits, and the driver calls made besides the launches (none per launch with tokens
 * available, since each thread caches its context; about 8 per timed launch).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpubench.h"

#define STARTUP_MS 120000
#define RUN_MS     600000
#define EXIT_MS    30000
#define MAX_ROUNDS 15
#define NCONFIGS   4

struct options {
    const char *vcuda;
    const char *err; /* worker: its stderr goes to this file (--err) */
    int device;
    uint64_t rounds, batches, batch, pace_us, allocs, alloc_reps, alloc_kib, limit_mib;
    enum gpubench_lookup lookup;
    bool worker;
};

/* Figures of one worker run; -1 = not measured. */
struct figures {
    double launch_ns, launch_instr, alloc_ns, alloc_instr, free_ns, free_instr;
    double launch_pmu[GPUBENCH_PMU_EVENTS]; /* per launch: cycles, cache and TLB misses */
};

#define NFIGS (6 + GPUBENCH_PMU_EVENTS)

/* ---- Worker ---- */

static int worker_main(const struct options *o)
{
    struct gpubench_cuda cu;
    struct gpubench_icount ic;
    struct gpubench_pmu pmu;
    double pmu_sum[GPUBENCH_PMU_EVENTS] = {0};
    CUdevice dev;
    CUcontext ctx;
    CUmodule module;
    CUfunction fn;
    CUstream stream;
    CUdeviceptr *ptrs = NULL;
    unsigned long long cycles = 0;
    void *params[] = {&cycles};
    double *per_batch = NULL, *per_alloc = NULL, *per_free = NULL;
    int64_t instr_launch = 0, instr_alloc = 0, instr_free = 0;
    uint64_t counted_launches = 0, counted_allocs = 0;
    const char *ptx;
    char why[256];
    CUresult rc;
    const size_t bytes = o->alloc_kib * 1024;

    if (o->err != NULL && gpubench_stderr_to(o->err) != 0) {
        gpubench_reply("err --err %s: cannot write it", o->err);
        return 1;
    }
    if (gpubench_cuda_open(&cu, o->lookup, why, sizeof(why)) != 0 ||
        gpubench_cuda_attach(&cu, o->device, &dev, &ctx, why, sizeof(why)) != 0 ||
        gpubench_module_load(&cu, &module, &ptx, why, sizeof(why)) != 0) {
        gpubench_reply("err %s", why);
        return 1;
    }
    rc = cu.module_get_function(&fn, module, "egpu_spin_cycles");
    if (rc == CUDA_SUCCESS)
        rc = cu.stream_create(&stream, CU_STREAM_NON_BLOCKING);
    if (rc != CUDA_SUCCESS) {
        gpubench_reply("err setup: %s", gpubench_cu_name(&cu, rc));
        return 1;
    }
    per_batch = calloc(o->batches, sizeof(*per_batch));
    per_alloc = calloc(o->alloc_reps, sizeof(*per_alloc));
    per_free = calloc(o->alloc_reps, sizeof(*per_free));
    ptrs = calloc(o->allocs, sizeof(*ptrs));
    if (per_batch == NULL || per_alloc == NULL || per_free == NULL || ptrs == NULL) {
        gpubench_reply("err out of host memory");
        return 1;
    }
    gpubench_icount_open(&ic);
    gpubench_pmu_open(&pmu);

    /* Launches; batch -1 warms up (module load, first launch) and is not counted. */
    for (int64_t bi = -1; bi < (int64_t)o->batches; bi++) {
        double counts[GPUBENCH_PMU_EVENTS];
        uint64_t t0, t1;
        int64_t n;

        gpubench_icount_start(&ic);
        gpubench_pmu_start(&pmu);
        t0 = gpubench_now_ns();
        for (uint64_t i = 0; i < o->batch; i++) {
            rc = cu.launch_kernel(fn, 1, 1, 1, 32, 1, 1, 0, stream, params, NULL);
            if (rc != CUDA_SUCCESS)
                break;
        }
        t1 = gpubench_now_ns();
        gpubench_pmu_stop(&pmu, counts);
        n = gpubench_icount_stop(&ic);
        if (rc == CUDA_SUCCESS)
            rc = cu.stream_synchronize(stream);
        if (rc != CUDA_SUCCESS) {
            gpubench_reply("err cuLaunchKernel: %s", gpubench_cu_name(&cu, rc));
            return 1;
        }
        if (bi >= 0) {
            per_batch[bi] = (double)(t1 - t0) / (double)o->batch;
            if (n >= 0 && instr_launch >= 0) {
                instr_launch += n;
                counted_launches += o->batch;
            } else {
                instr_launch = -1;
            }
            for (int k = 0; k < GPUBENCH_PMU_EVENTS; k++)
                pmu_sum[k] = counts[k] >= 0 && pmu_sum[k] >= 0 ? pmu_sum[k] + counts[k] : -1;
        }
        gpubench_sleep_until(gpubench_now_ns() + o->pace_us * 1000u);
    }

    /* Allocations; round -1 warms up. */
    for (int64_t r = -1; r < (int64_t)o->alloc_reps; r++) {
        uint64_t t0, t1, t2, t3;
        int64_t na, nf;

        gpubench_icount_start(&ic);
        t0 = gpubench_now_ns();
        for (uint64_t i = 0; i < o->allocs; i++) {
            rc = cu.mem_alloc(&ptrs[i], bytes);
            if (rc != CUDA_SUCCESS)
                break;
        }
        t1 = gpubench_now_ns();
        na = gpubench_icount_stop(&ic);
        if (rc != CUDA_SUCCESS) {
            gpubench_reply("err cuMemAlloc_v2 of %zu bytes: %s", bytes, gpubench_cu_name(&cu, rc));
            return 1;
        }
        gpubench_icount_start(&ic);
        t2 = gpubench_now_ns();
        for (uint64_t i = 0; i < o->allocs; i++) {
            rc = cu.mem_free(ptrs[i]);
            if (rc != CUDA_SUCCESS)
                break;
        }
        t3 = gpubench_now_ns();
        nf = gpubench_icount_stop(&ic);
        if (rc != CUDA_SUCCESS) {
            gpubench_reply("err cuMemFree_v2: %s", gpubench_cu_name(&cu, rc));
            return 1;
        }
        if (r >= 0) {
            per_alloc[r] = (double)(t1 - t0) / (double)o->allocs;
            per_free[r] = (double)(t3 - t2) / (double)o->allocs;
            if (na >= 0 && nf >= 0 && instr_alloc >= 0) {
                instr_alloc += na;
                instr_free += nf;
                counted_allocs += o->allocs;
            } else {
                instr_alloc = instr_free = -1;
            }
        }
    }
    for (int k = 0; k < GPUBENCH_PMU_EVENTS; k++)
        pmu_sum[k] = pmu_sum[k] >= 0 ? pmu_sum[k] / (double)(o->batches * o->batch) : -1;
    gpubench_pmu_close(&pmu);
    gpubench_reply(
        "ok launch_ns=%.1f launch_instr=%.1f alloc_ns=%.1f alloc_instr=%.1f free_ns=%.1f "
        "free_instr=%.1f pmu0=%.2f pmu1=%.2f pmu2=%.2f pmu3=%.2f pmu4=%.2f ptx=%s",
        gpubench_median(per_batch, o->batches),
        instr_launch >= 0 && counted_launches ? (double)instr_launch / counted_launches : -1.0,
        gpubench_median(per_alloc, o->alloc_reps),
        instr_alloc >= 0 && counted_allocs ? (double)instr_alloc / counted_allocs : -1.0,
        gpubench_median(per_free, o->alloc_reps),
        instr_free >= 0 && counted_allocs ? (double)instr_free / counted_allocs : -1.0, pmu_sum[0],
        pmu_sum[1], pmu_sum[2], pmu_sum[3], pmu_sum[4], ptx);
    gpubench_icount_close(&ic);
    (void)cu.stream_destroy(stream); /* exiting */
    (void)cu.module_unload(module);  /* exiting */
    (void)cu.primary_ctx_release(dev);
    free(per_batch);
    free(per_alloc);
    free(per_free);
    free(ptrs);
    return 0;
}

/* ---- Parent ---- */

static const char *const config_names[NCONFIGS] = {
    "driver (no interposer)",
    "interposer, no limits",
    "interposer, memory limit",
    "interposer, core 50% (tokens)",
};

/* Run configuration cfg once into *f; for the core-50% one, add what its controller did
 * to *stats. Returns 0, or -errno with the reason in line. */
static int run_config(const struct options *o, const char *vcuda, int cfg, struct figures *f,
                      struct gpubench_vcuda_stats *stats, char *line, size_t len)
{
    char dev[16], batches[24], batch[24], pace[24], allocs[24], reps[24], kib[24];
    char preload[4200], dirv[4200], limit[64], dir[4096] = "", err[4200];
    const char *set[6] = {NULL};
    char *argv[] = {"bench_gpu_overhead",
                    "--worker",
                    "1",
                    "--lookup",
                    (char *)gpubench_lookup_name(o->lookup),
                    "--device",
                    dev,
                    "--batches",
                    batches,
                    "--batch",
                    batch,
                    "--pace-us",
                    pace,
                    "--allocs",
                    allocs,
                    "--alloc-reps",
                    reps,
                    "--alloc-kib",
                    kib,
                    NULL, /* "--err", err for the core-50% configuration */
                    NULL,
                    NULL};
    int rc;

    snprintf(dev, sizeof(dev), "%d", o->device);
    snprintf(batches, sizeof(batches), "%" PRIu64, o->batches);
    snprintf(batch, sizeof(batch), "%" PRIu64, o->batch);
    snprintf(pace, sizeof(pace), "%" PRIu64, o->pace_us);
    snprintf(allocs, sizeof(allocs), "%" PRIu64, o->allocs);
    snprintf(reps, sizeof(reps), "%" PRIu64, o->alloc_reps);
    snprintf(kib, sizeof(kib), "%" PRIu64, o->alloc_kib);
    if (cfg > 0) {
        rc = gpubench_tmpdir_make(dir, sizeof(dir));
        if (rc != 0) {
            snprintf(line, len, "temporary directory: %s", strerror(-rc));
            return rc;
        }
        snprintf(preload, sizeof(preload), "LD_PRELOAD=%s", vcuda);
        snprintf(dirv, sizeof(dirv), "EGPU_VCUDA_DIR=%s", dir);
        set[0] = preload;
        set[1] = dirv;
        if (cfg == 1) {
            set[2] = "EGPU_VCUDA_CORE=100";
        } else if (cfg == 2) {
            snprintf(limit, sizeof(limit), "EGPU_VCUDA_MEMORY_MIB=%" PRIu64, o->limit_mib);
            set[2] = limit;
        } else if (cfg == 3) {
            set[2] = "EGPU_VCUDA_CORE=50";
            set[3] = "EGPU_VCUDA_CORE_LIMIT=50";
            set[4] = "EGPU_VCUDA_LOG_LEVEL=info"; /* the controller's line at exit */
            snprintf(err, sizeof(err), "%s/worker.err", dir);
            argv[sizeof(argv) / sizeof(argv[0]) - 3] = "--err";
            argv[sizeof(argv) / sizeof(argv[0]) - 2] = err;
        }
    }
    rc = gpubench_worker_once(argv, set, STARTUP_MS + RUN_MS, EXIT_MS, line, len);
    if (cfg == 3 && gpubench_vcuda_stats_add(err, stats) != 0)
        fprintf(stderr, "bench_gpu_overhead: %s holds no line of the controller at exit\n", err);
    if (dir[0] != '\0')
        gpubench_tmpdir_remove(dir);
    if (rc != 0)
        return rc;
    if (gpubench_kv_f64(line, "launch_ns", &f->launch_ns) != 0 ||
        gpubench_kv_f64(line, "launch_instr", &f->launch_instr) != 0 ||
        gpubench_kv_f64(line, "alloc_ns", &f->alloc_ns) != 0 ||
        gpubench_kv_f64(line, "alloc_instr", &f->alloc_instr) != 0 ||
        gpubench_kv_f64(line, "free_ns", &f->free_ns) != 0 ||
        gpubench_kv_f64(line, "free_instr", &f->free_instr) != 0)
        return -EIO;
    for (int k = 0; k < GPUBENCH_PMU_EVENTS; k++) {
        char key[8];

        snprintf(key, sizeof(key), "pmu%d", k);
        if (gpubench_kv_f64(line, key, &f->launch_pmu[k]) != 0)
            return -EIO;
    }
    return 0;
}

static void print_cell(double v, double base, bool first)
{
    if (v < 0) {
        printf(" %9s %8s", "n/a", "");
        return;
    }
    printf(" %9.1f", v);
    if (first || base < 0)
        printf(" %8s", "-");
    else
        printf(" %+8.1f", v - base);
}

static int usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [--vcuda PATH] [--device N] [--rounds N] [--batches N] [--batch N]\n"
            "          [--pace-us N] [--allocs N] [--alloc-reps N] [--alloc-kib N]\n"
            "          [--limit-mib N] [--lookup direct|dlsym|proc]\n",
            argv0);
    return 2;
}

static int parse_args(int argc, char **argv, struct options *o)
{
    static const struct gpubench_num_flag nums[] = {
        {"--rounds", offsetof(struct options, rounds), 1, MAX_ROUNDS},
        {"--batches", offsetof(struct options, batches), 1, 1000000},
        {"--batch", offsetof(struct options, batch), 1, 512},
        {"--pace-us", offsetof(struct options, pace_us), 0, 1000000},
        {"--allocs", offsetof(struct options, allocs), 1, 65536},
        {"--alloc-reps", offsetof(struct options, alloc_reps), 1, 100000},
        {"--alloc-kib", offsetof(struct options, alloc_kib), 1, 1u << 20},
        {"--limit-mib", offsetof(struct options, limit_mib), 1, 1u << 24},
    };
    uint64_t v;

    memset(o, 0, sizeof(*o));
    o->rounds = 3;
    o->batches = 300;
    o->batch = 64;
    o->pace_us = 2000;
    o->allocs = 256;
    o->alloc_reps = 8;
    o->alloc_kib = 2048;
    o->limit_mib = 8192;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i], *val = argv[i + 1];
        int got = gpubench_num_flag(nums, sizeof(nums) / sizeof(nums[0]), a, val, o);

        if (got < 0)
            return -EINVAL;
        if (got > 0)
            continue;
        if (strcmp(a, "--worker") == 0)
            o->worker = true;
        else if (strcmp(a, "--vcuda") == 0)
            o->vcuda = val;
        else if (strcmp(a, "--err") == 0)
            o->err = val;
        else if (strcmp(a, "--device") == 0 && gpubench_parse_u64(val, 0, 63, &v) == 0)
            o->device = (int)v;
        else if (strcmp(a, "--lookup") == 0 && gpubench_lookup_parse(val, &o->lookup) == 0)
            continue;
        else
            return -EINVAL;
    }
    return argc % 2 == 1 ? 0 : -EINVAL;
}

int main(int argc, char **argv)
{
    static double samples[NCONFIGS][NFIGS][MAX_ROUNDS];
    struct options o;
    struct figures med[NCONFIGS];
    const char *vcuda;
    char why[512], line[512];
    unsigned got[NCONFIGS] = {0};
    struct gpubench_vcuda_stats stats = {0};
    struct gpubench_icount ic;
    struct gpubench_pmu pmu;
    int missed = 0, failed = 0;

    if (parse_args(argc, argv, &o) != 0)
        return usage(argv[0]);
    if (o.worker)
        return worker_main(&o);
    if (!gpubench_has_gpu(why, sizeof(why))) {
        printf(GPUBENCH_SKIP_FMT, why);
        return 0;
    }
    vcuda = gpubench_vcuda_usable("bench_gpu_overhead", o.vcuda);
    if (vcuda == NULL)
        return 2;
    gpubench_icount_open(&ic);
    printf("bench_gpu_overhead: device %d, lookup %s, interposer %s\n", o.device,
           gpubench_lookup_name(o.lookup), vcuda);
    printf("launches: %" PRIu64 " batches x %" PRIu64 " of egpu_spin_cycles(0), 1 x 32 threads, "
           "%" PRIu64 " us pause after each batch; allocations: %" PRIu64 " x %" PRIu64
           " rounds of %" PRIu64 " KiB; %" PRIu64 " rounds of every configuration, medians\n",
           o.batches, o.batch, o.pace_us, o.alloc_reps, o.allocs, o.alloc_kib, o.rounds);
    if (ic.fd < 0)
        printf("instructions: n/a (%s)\n", ic.why);
    gpubench_icount_close(&ic);
    gpubench_pmu_open(&pmu);
    if (pmu.why[0] != '\0')
        printf("hardware counters: %s\n", pmu.why);
    gpubench_pmu_close(&pmu);
    for (uint64_t r = 0; r < o.rounds; r++) {
        for (int cfg = 0; cfg < NCONFIGS; cfg++) {
            struct figures f;

            if (run_config(&o, vcuda, cfg, &f, &stats, line, sizeof(line)) != 0) {
                printf("%s, round %" PRIu64 ": FAIL %s\n", config_names[cfg], r + 1, line);
                failed++;
                continue;
            }
            samples[cfg][0][got[cfg]] = f.launch_ns;
            samples[cfg][1][got[cfg]] = f.launch_instr;
            samples[cfg][2][got[cfg]] = f.alloc_ns;
            samples[cfg][3][got[cfg]] = f.alloc_instr;
            samples[cfg][4][got[cfg]] = f.free_ns;
            samples[cfg][5][got[cfg]] = f.free_instr;
            for (int k = 0; k < GPUBENCH_PMU_EVENTS; k++)
                samples[cfg][6 + k][got[cfg]] = f.launch_pmu[k];
            got[cfg]++;
        }
    }
    for (int cfg = 0; cfg < NCONFIGS; cfg++) {
        double m[NFIGS];

        for (int k = 0; k < NFIGS; k++)
            m[k] = gpubench_median(samples[cfg][k], got[cfg]);
        med[cfg] = (struct figures){m[0], m[1], m[2], m[3], m[4], m[5], {0}};
        memcpy(med[cfg].launch_pmu, m + 6, sizeof(med[cfg].launch_pmu));
    }

    printf("\n%-30s %9s %8s %9s %8s\n", "cuLaunchKernel", "ns", "added", "instr", "added");
    for (int cfg = 0; cfg < NCONFIGS; cfg++) {
        printf("%-30s", config_names[cfg]);
        if (got[cfg] == 0) {
            printf(" no figures\n");
            continue;
        }
        print_cell(med[cfg].launch_ns, med[0].launch_ns, cfg == 0);
        print_cell(med[cfg].launch_instr, med[0].launch_instr, cfg == 0);
        if (cfg > 0 && got[0] > 0 && med[cfg].launch_ns - med[0].launch_ns >= 100.0) {
            printf("  MISSED (target: < 100 ns added)");
            missed++;
        }
        printf("\n");
    }
    /* What the CPU spends per launch beyond instructions: stalls show as cycles, their causes
     * as cache and TLB misses (rows indented: not the ns rows above). */
    printf("\n%-32s", "cuLaunchKernel, per launch");
    for (int k = 0; k < GPUBENCH_PMU_EVENTS; k++)
        printf(" %9s %8s", gpubench_pmu_names[k], "added");
    printf("\n");
    for (int cfg = 0; cfg < NCONFIGS; cfg++) {
        printf("  %-30s", config_names[cfg]);
        for (int k = 0; k < GPUBENCH_PMU_EVENTS && got[cfg] > 0; k++)
            print_cell(med[cfg].launch_pmu[k], med[0].launch_pmu[k], cfg == 0);
        printf("%s\n", got[cfg] > 0 ? "" : " no figures");
    }
    /* Every launch of a worker goes through the controller: the warm-up batch too. */
    gpubench_vcuda_stats_print("core 50%", &stats,
                               (double)got[3] * (double)(o.batches + 1) * (double)o.batch);
    printf("\n%-30s %9s %8s %9s %8s %9s %8s %9s %8s\n", "cuMemAlloc_v2 / cuMemFree_v2", "alloc ns",
           "added", "instr", "added", "free ns", "added", "instr", "added");
    for (int cfg = 0; cfg < NCONFIGS; cfg++) {
        printf("%-30s", config_names[cfg]);
        if (got[cfg] == 0) {
            printf(" no figures\n");
            continue;
        }
        print_cell(med[cfg].alloc_ns, med[0].alloc_ns, cfg == 0);
        print_cell(med[cfg].alloc_instr, med[0].alloc_instr, cfg == 0);
        print_cell(med[cfg].free_ns, med[0].free_ns, cfg == 0);
        print_cell(med[cfg].free_instr, med[0].free_instr, cfg == 0);
        printf("\n");
    }
    printf("\noverhead: target < 100 ns added per launch when not throttled: %s\n",
           failed   ? "incomplete (a configuration failed)"
           : missed ? "MISSED"
                    : "met");
    return failed || missed ? 1 : 0;
}
