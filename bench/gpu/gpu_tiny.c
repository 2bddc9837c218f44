/* bench/gpu/gpu_tiny.c - bench_gpu_tiny: short kernels under a compute limit on a real NVIDIA
 * GPU (kernels shorter than a launch call were charged their host time), and what each driver
 * call the compute controller makes costs.
 *
 * Short kernels. A framework's host loop launches kernels far shorter than one launch call
 * (PyTorch's x.add_(1) on 1,000 elements: about 1 us of device time for several us of host
 * time), so a container running it uses a small share of the card however its limit is set.
 * Such a container is under its share and must not be slowed. The PyTorch-free equivalent: a
 * worker launches --launches kernels egpu_spin_cycles(0) (1 block of 32 threads, the shortest
 * kernel there is) one at a time, with --host-us of host work (a spin on the clock) after each
 * launch, and times the whole loop. Three configurations, each in its own process, --rounds
 * times in turn (medians):
 *   driver (no interposer)
 *   interposer, core 30%        EGPU_VCUDA_CORE=30, EGPU_VCUDA_CORE_LIMIT=30
 *   interposer, core 50%        the same at 50%
 * The table gives launches per second, the speed against the driver's, the mean host time of a
 * cuLaunchKernel call, and the card's busy share (launches/s x the kernel's device time, which
 * a calibration in the driver's worker measures with events around 1,000 launches queued
 * behind a long kernel, so that they run back to back). Target: each limited row at least 95% of
 * the driver's speed while the driver's busy share is below its limit; exits 1 when one misses.
 *
 * Driver call costs. The driver's worker also times, over --calls calls each, the calls a timed
 * launch makes (cuStreamQuery, cuEventRecord, cuEventElapsedTime, cuStreamIsCapturing,
 * cuThreadExchangeStreamCaptureMode, cuCtxGetCurrent; cuEventQuery, which it made before issue
 * 15), the one a new kernel class makes (cuCtxGetDevice), and the clocks every throttled launch
 * reads (clock_gettime of CLOCK_MONOTONIC and CLOCK_MONOTONIC_COARSE), so the added ns per launch
 * of bench_gpu_overhead can be taken apart: a system call behind a clock read, or a driver call
 * that takes a lock, shows here. They are the figures the mock driver's "real" latencies model
 * (EGPU_MOCK_CUDA_CALL_NS, tests/mock/cuda_mock.c).
 *
 * What the controller did. The interposed workers run with EGPU_VCUDA_LOG_LEVEL=info and their
 * stderr in a file, where the interposer says at exit what its compute controller did; the
 * lines "controller, core 30%" and "core 50%" give it per launch: launches timed, context
 * queries, first tries refused on the coarse clock, waits, and the driver calls made besides
 * the launches.
 */
#define _GNU_SOURCE /* CLOCK_MONOTONIC_COARSE */
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpubench.h"

#define STARTUP_MS 120000
#define RUN_MS     600000
#define EXIT_MS    30000
#define MAX_ROUNDS 15
#define NCONFIGS   3
#define NCALLS     10
#define CALIB_N    1000

struct options {
    const char *vcuda;
    const char *err; /* worker: its stderr goes to this file (--err) */
    int device;
    uint64_t rounds, launches, host_us, calls;
    enum gpubench_lookup lookup;
    bool worker;
    bool costs; /* worker: also time the driver calls and the kernel */
};

/* One worker's figures; -1 = not measured. */
struct figures {
    double launches_per_s, launch_call_ns, kernel_ns;
    double call_ns[NCALLS];
};

static const char *const call_names[NCALLS] = {
    "cuCtxGetCurrent",
    "clock_gettime(CLOCK_MONOTONIC)",
    "clock_gettime(CLOCK_MONOTONIC_COARSE)",
    "cuStreamIsCapturing",
    "cuThreadExchangeStreamCaptureMode",
    "cuStreamQuery (idle stream)",
    "cuEventRecord",
    "cuEventQuery (done)",
    "cuEventElapsedTime (done)",
    "cuCtxGetDevice",
};

static void spin_until(uint64_t t_ns)
{
    while (gpubench_now_ns() < t_ns)
        ;
}

/* ---- Worker ---- */

/* The driver calls timed for the cost table, resolved with dlsym from the driver library
 * (the worker that times them runs without the interposer). */
struct calls {
    CUresult (*ctx_get_current)(CUcontext *ctx);
    CUresult (*stream_is_capturing)(CUstream stream, CUstreamCaptureStatus *status);
    CUresult (*exchange_capture_mode)(CUstreamCaptureMode *mode);
    CUresult (*stream_query)(CUstream stream);
    CUresult (*event_query)(CUevent event);
    CUresult (*ctx_get_device)(CUdevice *dev);
};

static void *sym(void *lib, const char *name)
{
    return dlsym(lib, name);
}

/* ns per call of call number which, over n calls (stream idle, events ev and ev1 recorded). */
static double time_call(const struct gpubench_cuda *cu, const struct calls *c, int which,
                        CUstream stream, CUevent ev, CUevent ev1, uint64_t n)
{
    struct timespec ts;
    CUcontext ctx;
    CUdevice dev;
    float ms;
    CUstreamCaptureStatus st;
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    uint64_t t0, t1;
    CUresult rc = CUDA_SUCCESS;

    if ((which == 0 && !c->ctx_get_current) || (which == 3 && !c->stream_is_capturing) ||
        (which == 4 && !c->exchange_capture_mode) || (which == 5 && !c->stream_query) ||
        (which == 7 && !c->event_query) || (which == 9 && !c->ctx_get_device))
        return -1;
    if ((which == 7 || which == 8) && (cu->event_record(ev, stream) != CUDA_SUCCESS ||
                                       cu->event_record(ev1, stream) != CUDA_SUCCESS ||
                                       cu->event_synchronize(ev1) != CUDA_SUCCESS))
        return -1;
    t0 = gpubench_now_ns();
    for (uint64_t i = 0; i < n && rc == CUDA_SUCCESS; i++) {
        switch (which) {
        case 0:
            rc = c->ctx_get_current(&ctx);
            break;
        case 1:
            rc = clock_gettime(CLOCK_MONOTONIC, &ts) == 0 ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN;
            break;
        case 2:
            rc =
                clock_gettime(CLOCK_MONOTONIC_COARSE, &ts) == 0 ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN;
            break;
        case 3:
            rc = c->stream_is_capturing(stream, &st);
            break;
        case 4:
            rc = c->exchange_capture_mode(&mode);
            break;
        case 5:
            rc = c->stream_query(stream);
            break;
        case 6:
            rc = cu->event_record(ev, stream);
            break;
        case 7:
            rc = c->event_query(ev);
            break;
        case 8:
            rc = cu->event_elapsed_time(&ms, ev, ev1);
            break;
        default:
            rc = c->ctx_get_device(&dev);
            break;
        }
    }
    t1 = gpubench_now_ns();
    if (which == 6)
        (void)cu->stream_synchronize(stream);
    return rc == CUDA_SUCCESS ? (double)(t1 - t0) / (double)n : -1;
}

static int worker_main(const struct options *o)
{
    struct gpubench_cuda cu;
    struct figures f;
    struct calls c;
    CUdevice dev;
    CUcontext ctx;
    CUmodule module;
    CUfunction fn;
    CUstream stream;
    CUevent ev0, ev1;
    unsigned long long cycles = 0;
    void *params[] = {&cycles};
    uint64_t t0 = 0, t1, in_launch = 0;
    const char *ptx;
    char why[256], kv[16 * NCALLS] = "";
    CUresult rc;

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
    if (rc == CUDA_SUCCESS)
        rc = cu.event_create(&ev0, CU_EVENT_DEFAULT);
    if (rc == CUDA_SUCCESS)
        rc = cu.event_create(&ev1, CU_EVENT_DEFAULT);
    if (rc != CUDA_SUCCESS) {
        gpubench_reply("err setup: %s", gpubench_cu_name(&cu, rc));
        return 1;
    }
    for (int i = 0; i < NCALLS; i++)
        f.call_ns[i] = -1;
    f.kernel_ns = -1;
    if (o->costs) {
        float ms = 0;

        /* The kernel's device time: CALIB_N launches queued behind a long kernel (20,000
         * blocks spinning 2,000,000 cycles each, several ms), so they run back to back with
         * no launch call in the span. */
        unsigned long long long_cycles = 2000000;
        void *long_params[] = {&long_cycles};

        rc = cu.launch_kernel(fn, 1, 1, 1, 32, 1, 1, 0, stream, params, NULL);
        if (rc == CUDA_SUCCESS)
            rc = cu.stream_synchronize(stream);
        if (rc == CUDA_SUCCESS)
            rc = cu.launch_kernel(fn, 20000, 1, 1, 32, 1, 1, 0, stream, long_params, NULL);
        if (rc == CUDA_SUCCESS)
            rc = cu.event_record(ev0, stream);
        for (int i = 0; i < CALIB_N && rc == CUDA_SUCCESS; i++)
            rc = cu.launch_kernel(fn, 1, 1, 1, 32, 1, 1, 0, stream, params, NULL);
        if (rc == CUDA_SUCCESS)
            rc = cu.event_record(ev1, stream);
        if (rc == CUDA_SUCCESS)
            rc = cu.event_synchronize(ev1);
        if (rc == CUDA_SUCCESS && cu.event_elapsed_time(&ms, ev0, ev1) == CUDA_SUCCESS)
            f.kernel_ns = (double)ms * 1e6 / CALIB_N;
        c.ctx_get_current = (CUresult(*)(CUcontext *))sym(cu.lib, "cuCtxGetCurrent");
        c.stream_is_capturing =
            (CUresult(*)(CUstream, CUstreamCaptureStatus *))sym(cu.lib, "cuStreamIsCapturing");
        c.exchange_capture_mode =
            (CUresult(*)(CUstreamCaptureMode *))sym(cu.lib, "cuThreadExchangeStreamCaptureMode");
        c.stream_query = (CUresult(*)(CUstream))sym(cu.lib, "cuStreamQuery");
        c.event_query = (CUresult(*)(CUevent))sym(cu.lib, "cuEventQuery");
        c.ctx_get_device = (CUresult(*)(CUdevice *))sym(cu.lib, "cuCtxGetDevice");
        for (int i = 0; i < NCALLS; i++)
            f.call_ns[i] = time_call(&cu, &c, i, stream, ev0, ev1, o->calls);
    }

    /* The loop; its first 1% warms up (the class is learned) and is not timed. */
    for (uint64_t i = 0, warm = o->launches / 100; i < warm + o->launches; i++) {
        uint64_t a, b;

        if (i == warm) {
            in_launch = 0;
            t0 = gpubench_now_ns();
        }
        a = gpubench_now_ns();
        rc = cu.launch_kernel(fn, 1, 1, 1, 32, 1, 1, 0, stream, params, NULL);
        b = gpubench_now_ns();
        if (rc != CUDA_SUCCESS) {
            gpubench_reply("err cuLaunchKernel: %s", gpubench_cu_name(&cu, rc));
            return 1;
        }
        in_launch += b - a;
        spin_until(b + o->host_us * 1000u);
    }
    rc = cu.stream_synchronize(stream);
    t1 = gpubench_now_ns();
    if (rc != CUDA_SUCCESS) {
        gpubench_reply("err cuStreamSynchronize: %s", gpubench_cu_name(&cu, rc));
        return 1;
    }
    f.launches_per_s = (double)o->launches * 1e9 / (double)(t1 - t0);
    f.launch_call_ns = (double)in_launch / (double)o->launches;
    for (int i = 0, used = 0; i < NCALLS && used >= 0 && (size_t)used < sizeof(kv); i++) {
        int n = snprintf(kv + used, sizeof(kv) - (size_t)used, " c%d=%.1f", i, f.call_ns[i]);

        used = n < 0 ? -1 : used + n;
    }
    gpubench_reply("ok per_s=%.1f call_ns=%.1f kernel_ns=%.1f%s ptx=%s", f.launches_per_s,
                   f.launch_call_ns, f.kernel_ns, kv, ptx);
    (void)cu.event_destroy(ev0); /* exiting */
    (void)cu.event_destroy(ev1);
    (void)cu.stream_destroy(stream);
    (void)cu.module_unload(module);
    (void)cu.primary_ctx_release(dev);
    return 0;
}

/* ---- Parent ---- */

static const char *const config_names[NCONFIGS] = {
    "driver (no interposer)",
    "interposer, core 30%",
    "interposer, core 50%",
};
static const unsigned config_core[NCONFIGS] = {100, 30, 50};

/* Run configuration cfg once into *f; for an interposed one, add what its controller did to
 * *stats. Returns 0, or -errno with the reason in line. */
static int run_config(const struct options *o, const char *vcuda, int cfg, struct figures *f,
                      struct gpubench_vcuda_stats *stats, char *line, size_t len)
{
    char dev[16], launches[24], host[24], calls[24];
    char preload[4200], dirv[4200], core[64], limit[64], dir[4096] = "", err[4200];
    const char *set[6] = {NULL};
    char *argv[] = {"bench_gpu_tiny",
                    "--worker",
                    cfg == 0 ? "costs" : "loop",
                    "--lookup",
                    (char *)gpubench_lookup_name(o->lookup),
                    "--device",
                    dev,
                    "--launches",
                    launches,
                    "--host-us",
                    host,
                    "--calls",
                    calls,
                    NULL, /* "--err", err for the interposed configurations */
                    NULL,
                    NULL};
    char key[8];
    int rc;

    snprintf(dev, sizeof(dev), "%d", o->device);
    snprintf(launches, sizeof(launches), "%" PRIu64, o->launches);
    snprintf(host, sizeof(host), "%" PRIu64, o->host_us);
    snprintf(calls, sizeof(calls), "%" PRIu64, o->calls);
    if (cfg > 0) {
        rc = gpubench_tmpdir_make(dir, sizeof(dir));
        if (rc != 0) {
            snprintf(line, len, "temporary directory: %s", strerror(-rc));
            return rc;
        }
        snprintf(preload, sizeof(preload), "LD_PRELOAD=%s", vcuda);
        snprintf(dirv, sizeof(dirv), "EGPU_VCUDA_DIR=%s", dir);
        snprintf(core, sizeof(core), "EGPU_VCUDA_CORE=%u", config_core[cfg]);
        snprintf(limit, sizeof(limit), "EGPU_VCUDA_CORE_LIMIT=%u", config_core[cfg]);
        set[0] = preload;
        set[1] = dirv;
        set[2] = core;
        set[3] = limit;
        set[4] = "EGPU_VCUDA_LOG_LEVEL=info"; /* the controller's line at exit */
        snprintf(err, sizeof(err), "%s/worker.err", dir);
        argv[sizeof(argv) / sizeof(argv[0]) - 3] = "--err";
        argv[sizeof(argv) / sizeof(argv[0]) - 2] = err;
    }
    rc = gpubench_worker_once(argv, set, STARTUP_MS + RUN_MS, EXIT_MS, line, len);
    if (cfg > 0 && gpubench_vcuda_stats_add(err, stats) != 0)
        fprintf(stderr, "bench_gpu_tiny: %s holds no line of the controller at exit\n", err);
    if (dir[0] != '\0')
        gpubench_tmpdir_remove(dir);
    if (rc != 0)
        return rc;
    if (gpubench_kv_f64(line, "per_s", &f->launches_per_s) != 0 ||
        gpubench_kv_f64(line, "call_ns", &f->launch_call_ns) != 0 ||
        gpubench_kv_f64(line, "kernel_ns", &f->kernel_ns) != 0)
        return -EIO;
    for (int i = 0; i < NCALLS; i++) {
        snprintf(key, sizeof(key), "c%d", i);
        if (gpubench_kv_f64(line, key, &f->call_ns[i]) != 0)
            return -EIO;
    }
    return 0;
}

static int usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [--vcuda PATH] [--device N] [--rounds N] [--launches N] [--host-us N]\n"
            "          [--calls N] [--lookup direct|dlsym|proc]\n",
            argv0);
    return 2;
}

static int parse_args(int argc, char **argv, struct options *o)
{
    static const struct gpubench_num_flag nums[] = {
        {"--rounds", offsetof(struct options, rounds), 1, MAX_ROUNDS},
        {"--launches", offsetof(struct options, launches), 100, 100000000},
        {"--host-us", offsetof(struct options, host_us), 0, 100000},
        {"--calls", offsetof(struct options, calls), 1, 100000000},
    };
    uint64_t v;

    memset(o, 0, sizeof(*o));
    o->rounds = 3;
    o->launches = 50000;
    o->host_us = 8;
    o->calls = 20000;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i], *val = argv[i + 1];
        int got = gpubench_num_flag(nums, sizeof(nums) / sizeof(nums[0]), a, val, o);

        if (got < 0)
            return -EINVAL;
        if (got > 0)
            continue;
        if (strcmp(a, "--worker") == 0 && (strcmp(val, "costs") == 0 || strcmp(val, "loop") == 0)) {
            o->worker = true;
            o->costs = strcmp(val, "costs") == 0;
        } else if (strcmp(a, "--vcuda") == 0) {
            o->vcuda = val;
        } else if (strcmp(a, "--err") == 0) {
            o->err = val;
        } else if (strcmp(a, "--device") == 0 && gpubench_parse_u64(val, 0, 63, &v) == 0) {
            o->device = (int)v;
        } else if (strcmp(a, "--lookup") == 0 && gpubench_lookup_parse(val, &o->lookup) == 0) {
            continue;
        } else {
            return -EINVAL;
        }
    }
    return argc % 2 == 1 ? 0 : -EINVAL;
}

int main(int argc, char **argv)
{
    static double samples[NCONFIGS][3 + NCALLS][MAX_ROUNDS];
    struct options o;
    double med[NCONFIGS][3 + NCALLS];
    const char *vcuda;
    char why[512], line[1024];
    unsigned got[NCONFIGS] = {0};
    struct gpubench_vcuda_stats stats[NCONFIGS] = {{0}};
    int missed = 0, failed = 0;

    if (parse_args(argc, argv, &o) != 0)
        return usage(argv[0]);
    if (o.worker)
        return worker_main(&o);
    if (!gpubench_has_gpu(why, sizeof(why))) {
        printf(GPUBENCH_SKIP_FMT, why);
        return 0;
    }
    vcuda = gpubench_vcuda_usable("bench_gpu_tiny", o.vcuda);
    if (vcuda == NULL)
        return 2;
    printf("bench_gpu_tiny: device %d, lookup %s, interposer %s\n", o.device,
           gpubench_lookup_name(o.lookup), vcuda);
    printf("loop: %" PRIu64 " launches of egpu_spin_cycles(0), 1 x 32 threads, one at a time, "
           "%" PRIu64 " us of host work after each; %" PRIu64 " rounds, medians\n",
           o.launches, o.host_us, o.rounds);
    for (uint64_t r = 0; r < o.rounds; r++) {
        for (int cfg = 0; cfg < NCONFIGS; cfg++) {
            struct figures f;

            if (run_config(&o, vcuda, cfg, &f, &stats[cfg], line, sizeof(line)) != 0) {
                printf("%s, round %" PRIu64 ": FAIL %s\n", config_names[cfg], r + 1, line);
                failed++;
                continue;
            }
            samples[cfg][0][got[cfg]] = f.launches_per_s;
            samples[cfg][1][got[cfg]] = f.launch_call_ns;
            samples[cfg][2][got[cfg]] = f.kernel_ns;
            for (int i = 0; i < NCALLS; i++)
                samples[cfg][3 + i][got[cfg]] = f.call_ns[i];
            got[cfg]++;
        }
    }
    for (int cfg = 0; cfg < NCONFIGS; cfg++)
        for (int k = 0; k < 3 + NCALLS; k++)
            med[cfg][k] = gpubench_median(samples[cfg][k], got[cfg]);

    printf("\nkernel device time (back to back): %.0f ns\n", med[0][2]);
    printf("\n%-26s %11s %10s %15s %10s\n", "short kernels", "launches/s", "speed",
           "launch call ns", "card busy");
    for (int cfg = 0; cfg < NCONFIGS; cfg++) {
        double speed = got[0] && got[cfg] ? med[cfg][0] / med[0][0] : -1;
        double busy = med[0][2] > 0 ? med[cfg][0] * med[0][2] / 1e7 : -1; /* percent */

        printf("%-26s", config_names[cfg]);
        if (got[cfg] == 0) {
            printf(" no figures\n");
            continue;
        }
        printf(" %11.0f %9.1f%% %15.0f", med[cfg][0], 100.0 * speed, med[cfg][1]);
        if (busy >= 0)
            printf(" %9.1f%%", busy);
        else
            printf(" %10s", "n/a");
        if (cfg > 0 && speed >= 0 && med[0][2] > 0 &&
            med[0][0] * med[0][2] / 1e7 < (double)config_core[cfg] && speed < 0.95) {
            printf("  MISSED (under its share: target >= 95%% of the driver's speed)");
            missed++;
        }
        printf("\n");
    }
    for (int cfg = 1; cfg < NCONFIGS; cfg++) /* every launch, the warm-up's too */
        gpubench_vcuda_stats_print(config_names[cfg] + strlen("interposer, "), &stats[cfg],
                                   (double)got[cfg] * (double)(o.launches + o.launches / 100));
    printf("\n%-40s %9s\n", "driver call (no interposer)", "ns/call");
    for (int i = 0; i < NCALLS; i++) {
        if (med[0][3 + i] < 0)
            printf("%-40s %9s\n", call_names[i], "n/a");
        else
            printf("%-40s %9.1f\n", call_names[i], med[0][3 + i]);
    }
    printf("\nshort kernels: target >= 95%% of the driver's speed under the share: %s\n",
           failed   ? "incomplete (a configuration failed)"
           : missed ? "MISSED"
                    : "met");
    return failed || missed ? 1 : 0;
}
