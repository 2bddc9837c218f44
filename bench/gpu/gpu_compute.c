/* bench/gpu/gpu_compute.c - bench_gpu_compute: the interposer's compute limit on a real NVIDIA
 * GPU (the "compute" third of bench/gpu). Measures the share of the card's time that a
 * container's processes get, against its EGPU_VCUDA_CORE target, for 10, 30, 50 and 90% with
 * one and with four processes, and for two containers (10% and 90%) on one card, each over a
 * --window-s window (default 10 s), and prints a table with the error in points. Target: every
 * interposed row within 2 points; the program exits 1 when one misses.
 *
 * How device time is measured. Every worker keeps the card busy with egpu_spin_iters, a PTX
 * kernel of fixed work (gpubench.h): --blocks blocks (default one per SM) of 32 threads, each
 * running a chain of dependent multiply-adds, tuned so one kernel takes --kernel-us (default
 * 1000 us) on the idle card. A calibration process without the interposer measures that
 * duration with CUDA events around 30 back-to-back launches (cuEventElapsedTime), before and
 * after every case; its mean is the kernel's device time T. A worker counts the kernels that
 * complete inside the window (cuEventSynchronize on an event recorded after each launch,
 * --depth kernels in flight, default 4), and a container's share is
 *      kernels completed in the window x T / window.
 * Per-launch events in the workers would not do: when two contexts time-slice the card, an
 * event pair around one process's kernel also spans the other's slices, and a launch the
 * throttle holds back would count its wait. A fixed-work kernel does the same work however
 * it is sliced, so the count is exact; the drift column shows how much T moved between the
 * two calibrations (SM clock changes). When NVML is present the card's utilisation
 * (nvmlDeviceGetUtilizationRates, sampled every 100 ms during the window) is printed as a
 * second, coarser view of the same thing.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpubench.h"

#define STARTUP_MS 120000
#define CMD_MS     120000
#define EXIT_MS    30000
#define MAX_PROCS  8
#define MAX_DEPTH  8
#define MAX_CASES  16

struct options {
    const char *vcuda;
    const char *cases;
    int device;
    uint64_t window_ms, warmup_ms, kernel_us, depth, blocks;
    uint64_t pair_a, pair_b; /* the two containers' core percent */
    enum gpubench_lookup lookup;
    const char *worker; /* NULL, "calib" or "run" */
    uint64_t iters;     /* run worker: the kernel's iterations */
};

/* ---- Workers ---- */

struct kernel {
    struct gpubench_cuda cu;
    CUdevice dev;
    CUcontext ctx;
    CUmodule module;
    CUfunction fn;
    CUstream stream;
    const char *ptx;
    unsigned int blocks;
    uint32_t iters;
};

static int kernel_setup(struct kernel *k, const struct options *o)
{
    char why[256];
    int sms = 0;
    CUresult rc;

    memset(k, 0, sizeof(*k));
    if (gpubench_cuda_open(&k->cu, o->lookup, why, sizeof(why)) != 0 ||
        gpubench_cuda_attach(&k->cu, o->device, &k->dev, &k->ctx, why, sizeof(why)) != 0 ||
        gpubench_module_load(&k->cu, &k->module, &k->ptx, why, sizeof(why)) != 0) {
        gpubench_reply("err %s", why);
        return -EIO;
    }
    rc = k->cu.module_get_function(&k->fn, k->module, "egpu_spin_iters");
    if (rc == CUDA_SUCCESS)
        rc = k->cu.stream_create(&k->stream, CU_STREAM_NON_BLOCKING);
    if (rc == CUDA_SUCCESS && o->blocks == 0)
        rc = k->cu.device_get_attribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, k->dev);
    if (rc != CUDA_SUCCESS) {
        gpubench_reply("err kernel setup: %s", gpubench_cu_name(&k->cu, rc));
        return -EIO;
    }
    k->blocks = o->blocks != 0 ? (unsigned int)o->blocks : (unsigned int)(sms > 0 ? sms : 1);
    k->iters = (uint32_t)o->iters;
    return 0;
}

static CUresult kernel_launch(struct kernel *k)
{
    unsigned long long sink = 0; /* no store: the loop's result is kept only when sink != 0 */
    void *params[] = {&k->iters, &sink};

    return k->cu.launch_kernel(k->fn, k->blocks, 1, 1, 32, 1, 1, 0, k->stream, params, NULL);
}

/* Device time of one kernel with the card to itself: events around n back-to-back launches
 * (after one warm-up launch), in nanoseconds; 0 on error. */
static double kernel_time_ns(struct kernel *k, int n)
{
    CUevent e0 = NULL, e1 = NULL;
    float ms = 0;
    CUresult rc = k->cu.event_create(&e0, CU_EVENT_DEFAULT);

    if (rc == CUDA_SUCCESS)
        rc = k->cu.event_create(&e1, CU_EVENT_BLOCKING_SYNC);
    if (rc == CUDA_SUCCESS)
        rc = kernel_launch(k);
    if (rc == CUDA_SUCCESS)
        rc = k->cu.event_record(e0, k->stream);
    for (int i = 0; rc == CUDA_SUCCESS && i < n; i++)
        rc = kernel_launch(k);
    if (rc == CUDA_SUCCESS)
        rc = k->cu.event_record(e1, k->stream);
    if (rc == CUDA_SUCCESS)
        rc = k->cu.event_synchronize(e1);
    if (rc == CUDA_SUCCESS)
        rc = k->cu.event_elapsed_time(&ms, e0, e1);
    if (e0 != NULL)
        (void)k->cu.event_destroy(e0); /* measurement done */
    if (e1 != NULL)
        (void)k->cu.event_destroy(e1); /* measurement done */
    return rc == CUDA_SUCCESS ? (double)ms * 1e6 / n : 0.0;
}

/* The calibration worker: tunes iters so one kernel takes kernel_us, then answers "measure". */
static int worker_calib(const struct options *o)
{
    const double target = (double)o->kernel_us * 1000.0;
    struct kernel k;
    char line[128];
    char name[128] = "?";
    double t = 0, prev = 0;
    int sms = 0;

    if (kernel_setup(&k, o) != 0)
        return 1;
    (void)k.cu.device_get_name(name, sizeof(name), k.dev); /* "?" stays */
    (void)k.cu.device_get_attribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, k.dev);
    k.iters = 4096;
    for (int round = 0; round < 12; round++) {
        double scaled;

        t = kernel_time_ns(&k, 5);
        if (t <= 0) {
            gpubench_reply("err calibration launch failed");
            return 1;
        }
        if (fabs(t - target) < target * 0.02)
            break;
        /* A simulated driver's kernel time does not follow the work: stop there. */
        if (round > 0 && fabs(t - prev) < prev * 0.01)
            break;
        prev = t;
        scaled = (double)k.iters * target / t;
        k.iters = scaled < 1 ? 1 : scaled > 2e9 ? 2000000000u : (uint32_t)scaled;
    }
    /* The name may hold spaces: it goes last, and the parent takes the rest of the line. */
    gpubench_reply("ready sms=%d blocks=%u iters=%" PRIu32 " ptx=%s driver=%d name=%s", sms,
                   k.blocks, k.iters, k.ptx, k.cu.driver_version, name);
    while (fgets(line, sizeof(line), stdin) != NULL) {
        if (strncmp(line, "measure", 7) == 0) {
            t = kernel_time_ns(&k, 30);
            if (t > 0)
                gpubench_reply("ok kernel_ns=%.0f", t);
            else
                gpubench_reply("err measure failed");
        } else if (strncmp(line, "exit", 4) == 0) {
            break;
        } else {
            gpubench_reply("err unknown command");
        }
    }
    return 0;
}

/* A load worker: keeps depth kernels in flight from "go" until t1, counting the kernels whose
 * completion it sees inside [t0, t1). */
static int worker_run(const struct options *o)
{
    struct kernel k;
    CUevent done[MAX_DEPTH] = {NULL};
    bool busy[MAX_DEPTH] = {false};
    char line[128];
    uint64_t t0, t1, kernels = 0, launched = 0;
    unsigned depth = (unsigned)o->depth;
    CUresult rc = CUDA_SUCCESS;

    if (kernel_setup(&k, o) != 0)
        return 1;
    for (unsigned i = 0; i < depth && rc == CUDA_SUCCESS; i++)
        rc = k.cu.event_create(&done[i], CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING);
    if (rc != CUDA_SUCCESS) {
        gpubench_reply("err cuEventCreate: %s", gpubench_cu_name(&k.cu, rc));
        return 1;
    }
    gpubench_reply("ready");
    if (fgets(line, sizeof(line), stdin) == NULL ||
        sscanf(line, "go %" SCNu64 " %" SCNu64, &t0, &t1) != 2) {
        gpubench_reply("err expected go");
        return 1;
    }
    for (unsigned slot = 0;; slot = (slot + 1) % depth) {
        if (busy[slot]) {
            uint64_t now;

            rc = k.cu.event_synchronize(done[slot]);
            if (rc != CUDA_SUCCESS)
                break;
            now = gpubench_now_ns();
            busy[slot] = false;
            if (now >= t0 && now < t1)
                kernels++;
        }
        if (gpubench_now_ns() >= t1) {
            /* Drain: the kernels still in flight complete after t1 and are not counted. */
            for (unsigned i = 0; i < depth; i++) {
                if (busy[i])
                    (void)k.cu.event_synchronize(done[i]); /* only waits */
            }
            break;
        }
        rc = kernel_launch(&k);
        if (rc == CUDA_SUCCESS)
            rc = k.cu.event_record(done[slot], k.stream);
        if (rc != CUDA_SUCCESS)
            break;
        busy[slot] = true;
        launched++;
    }
    if (rc != CUDA_SUCCESS) {
        gpubench_reply("err launch loop: %s", gpubench_cu_name(&k.cu, rc));
        return 1;
    }
    gpubench_reply("ok kernels=%" PRIu64 " launched=%" PRIu64, kernels, launched);
    return 0;
}

/* ---- Parent ---- */

struct container {
    unsigned core_pct; /* 0: no interposer */
    unsigned procs;
    char label[32];
};

struct run_case {
    char name[32];
    unsigned ncontainers;
    struct container c[2];
};

struct bench {
    const struct options *o;
    const char *vcuda;
    struct gpubench_child calib;
    unsigned blocks;
    uint64_t iters;
    struct gpubench_nvml nv;
    void *nvml_dev;
    int rows, missed;
};

static int calib_measure(struct bench *b, double *ns)
{
    char line[256];
    uint64_t v = 0;
    int rc = gpubench_child_send(&b->calib, "measure");

    if (rc == 0)
        rc = gpubench_child_recv(&b->calib, line, sizeof(line), CMD_MS);
    if (rc == 0 && gpubench_kv_u64(line, "kernel_ns", &v) != 0)
        rc = -EIO;
    *ns = (double)v;
    return rc == 0 && v > 0 ? 0 : -EIO;
}

static int worker_spawn(struct bench *b, struct gpubench_child *c, const char *dir, unsigned core)
{
    char dev[16], iters[32], blocks[16], depth[16], preload[4200], dirv[4200], corev[64],
        limitv[64];
    const char *set[5] = {NULL};
    char *argv[] = {"bench_gpu_compute",
                    "--worker",
                    "run",
                    "--lookup",
                    (char *)gpubench_lookup_name(b->o->lookup),
                    "--device",
                    dev,
                    "--iters",
                    iters,
                    "--blocks",
                    blocks,
                    "--depth",
                    depth,
                    NULL};

    snprintf(dev, sizeof(dev), "%d", b->o->device);
    snprintf(iters, sizeof(iters), "%" PRIu64, b->iters);
    snprintf(blocks, sizeof(blocks), "%u", b->blocks);
    snprintf(depth, sizeof(depth), "%" PRIu64, b->o->depth);
    if (core > 0) {
        snprintf(preload, sizeof(preload), "LD_PRELOAD=%s", b->vcuda);
        snprintf(dirv, sizeof(dirv), "EGPU_VCUDA_DIR=%s", dir);
        snprintf(corev, sizeof(corev), "EGPU_VCUDA_CORE=%u", core);
        snprintf(limitv, sizeof(limitv), "EGPU_VCUDA_CORE_LIMIT=%u", core);
        set[0] = preload;
        set[1] = dirv;
        set[2] = corev;
        set[3] = limitv;
    }
    return gpubench_child_start(c, argv, set, gpubench_limit_env);
}

/* Runs one case; prints its rows. */
static void run_case(struct bench *b, const struct run_case *rc)
{
    struct gpubench_child kids[2 * MAX_PROCS];
    unsigned owner[2 * MAX_PROCS];
    char dirs[2][4096], line[256];
    uint64_t kernels[2] = {0, 0}, t0, t1, nvml_sum = 0, nvml_n = 0;
    double ns_before = 0, ns_after = 0, ns, share[2];
    unsigned nkids = 0;
    bool ok = true;

    for (unsigned c = 0; c < rc->ncontainers; c++) {
        dirs[c][0] = '\0';
        if (rc->c[c].core_pct > 0 && gpubench_tmpdir_make(dirs[c], sizeof(dirs[c])) != 0) {
            printf("%-14s cannot make a temporary directory\n", rc->name);
            b->missed++;
            return;
        }
    }
    if (calib_measure(b, &ns_before) != 0) {
        printf("%-14s calibration failed\n", rc->name);
        ok = false;
    }
    for (unsigned c = 0; ok && c < rc->ncontainers; c++) {
        for (unsigned p = 0; ok && p < rc->c[c].procs; p++) {
            int err = worker_spawn(b, &kids[nkids], dirs[c], rc->c[c].core_pct);

            if (err != 0) {
                printf("%-14s cannot start a worker: %s\n", rc->name, strerror(-err));
                ok = false;
                break;
            }
            owner[nkids++] = c;
        }
    }
    for (unsigned i = 0; ok && i < nkids; i++) {
        if (gpubench_child_recv(&kids[i], line, sizeof(line), STARTUP_MS) != 0 ||
            strncmp(line, "ready", 5) != 0) {
            printf("%-14s worker %u did not start: %s\n", rc->name, i + 1, line);
            ok = false;
        }
    }
    t0 = gpubench_now_ns() + b->o->warmup_ms * 1000000u;
    t1 = t0 + b->o->window_ms * 1000000u;
    for (unsigned i = 0; ok && i < nkids; i++)
        ok = gpubench_child_send(&kids[i], "go %" PRIu64 " %" PRIu64, t0, t1) == 0;
    if (ok && b->nvml_dev != NULL) {
        gpubench_sleep_until(t0);
        for (uint64_t t = t0 + 100000000u; t <= t1; t += 100000000u) {
            struct gpubench_nvml_utilization u;

            gpubench_sleep_until(t);
            if (b->nv.device_get_utilization_rates(b->nvml_dev, &u) == 0) {
                nvml_sum += u.gpu;
                nvml_n++;
            }
        }
    }
    for (unsigned i = 0; ok && i < nkids; i++) {
        uint64_t now = gpubench_now_ns(), v = 0;
        int wait_ms = (int)((t1 > now ? t1 - now : 0) / 1000000u) + CMD_MS;

        if (gpubench_child_recv(&kids[i], line, sizeof(line), wait_ms) != 0 ||
            gpubench_kv_u64(line, "kernels", &v) != 0) {
            printf("%-14s worker %u: %s\n", rc->name, i + 1, line);
            ok = false;
        }
        kernels[owner[i]] += v;
    }
    for (unsigned i = 0; i < nkids; i++) {
        if (ok)
            (void)gpubench_child_wait(&kids[i], EXIT_MS, NULL); /* the result is in */
        else
            gpubench_child_kill(&kids[i]);
    }
    if (ok && calib_measure(b, &ns_after) != 0) {
        printf("%-14s calibration failed\n", rc->name);
        ok = false;
    }
    for (unsigned c = 0; c < rc->ncontainers; c++) {
        if (dirs[c][0] != '\0')
            gpubench_tmpdir_remove(dirs[c]);
    }
    if (!ok) {
        b->missed++;
        b->rows++;
        return;
    }
    ns = (ns_before + ns_after) / 2;
    for (unsigned c = 0; c < rc->ncontainers; c++) {
        const struct container *ct = &rc->c[c];
        double target = ct->core_pct > 0 ? ct->core_pct : 100.0;
        double err;

        share[c] = 100.0 * (double)kernels[c] * ns / ((double)b->o->window_ms * 1e6);
        err = share[c] - target;
        printf("%-14s %-10s %5u %8.1f %9.2f %+7.2f ", rc->name, ct->label, ct->procs, target,
               share[c], err);
        if (nvml_n > 0 && c == 0)
            printf("%6.1f ", (double)nvml_sum / (double)nvml_n);
        else
            printf("%6s ", nvml_n > 0 ? "\"" : "n/a");
        printf("%8" PRIu64 " %6.2f%%", kernels[c], 100.0 * fabs(ns_after - ns_before) / ns_before);
        if (ct->core_pct > 0) {
            b->rows++;
            if (fabs(err) > 2.0) {
                b->missed++;
                printf("  MISSED");
            }
        } else if (share[c] < 98.0) {
            printf("  (the card was not kept busy: measurement suspect)");
        }
        printf("\n");
    }
    if (rc->ncontainers == 2 && share[0] > 0)
        printf("%-14s ratio %s:%s = 1:%.2f (target 1:%.2f)\n", rc->name, rc->c[0].label,
               rc->c[1].label, share[1] / share[0],
               (double)rc->c[1].core_pct / (double)rc->c[0].core_pct);
    fflush(stdout);
}

static int parse_case(const char *s, const struct options *o, struct run_case *rc)
{
    uint64_t procs, pct;
    char buf[32];
    const char *x;

    memset(rc, 0, sizeof(*rc));
    snprintf(rc->name, sizeof(rc->name), "%s", s);
    if (strcmp(s, "driver") == 0) {
        snprintf(rc->name, sizeof(rc->name), "driver alone");
        rc->ncontainers = 1;
        rc->c[0] = (struct container){.core_pct = 0, .procs = 1, .label = "-"};
        return 0;
    }
    if (strcmp(s, "pair") == 0) {
        snprintf(rc->name, sizeof(rc->name), "two containers");
        rc->ncontainers = 2;
        rc->c[0] = (struct container){.core_pct = (unsigned)o->pair_a, .procs = 1};
        rc->c[1] = (struct container){.core_pct = (unsigned)o->pair_b, .procs = 1};
        snprintf(rc->c[0].label, sizeof(rc->c[0].label), "A %u%%", rc->c[0].core_pct);
        snprintf(rc->c[1].label, sizeof(rc->c[1].label), "B %u%%", rc->c[1].core_pct);
        return 0;
    }
    x = strchr(s, 'x');
    if (x == NULL || (size_t)(x - s) >= sizeof(buf))
        return -EINVAL;
    memcpy(buf, s, (size_t)(x - s));
    buf[x - s] = '\0';
    if (gpubench_parse_u64(buf, 1, MAX_PROCS, &procs) != 0 ||
        gpubench_parse_u64(x + 1, 1, 100, &pct) != 0)
        return -EINVAL;
    snprintf(rc->name, sizeof(rc->name), "%" PRIu64 " x %" PRIu64 "%%", procs, pct);
    rc->ncontainers = 1;
    rc->c[0] = (struct container){.core_pct = (unsigned)pct, .procs = (unsigned)procs};
    snprintf(rc->c[0].label, sizeof(rc->c[0].label), "%" PRIu64 "%%", pct);
    return 0;
}

static int usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [--vcuda PATH] [--device N] [--window-s S] [--warmup-s S]\n"
            "          [--kernel-us N] [--blocks N] [--depth N] [--lookup direct|dlsym|proc]\n"
            "          [--cases driver,1x10,1x30,1x50,1x90,4x10,4x30,4x50,4x90,pair]\n"
            "          [--pair A,B]   (B 100: B without a limit, to see what A's slices cost)\n",
            argv0);
    return 2;
}

static int parse_args(int argc, char **argv, struct options *o)
{
    uint64_t v;

    memset(o, 0, sizeof(*o));
    o->cases = "driver,1x10,1x30,1x50,1x90,4x10,4x30,4x50,4x90,pair";
    o->window_ms = 10000;
    o->warmup_ms = 2000;
    o->kernel_us = 1000;
    o->depth = 4;
    o->pair_a = 10;
    o->pair_b = 90;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i], *val = argv[i + 1];

        if (strcmp(a, "--worker") == 0 && (strcmp(val, "calib") == 0 || strcmp(val, "run") == 0))
            o->worker = val;
        else if (strcmp(a, "--vcuda") == 0)
            o->vcuda = val;
        else if (strcmp(a, "--cases") == 0)
            o->cases = val;
        else if (strcmp(a, "--device") == 0 && gpubench_parse_u64(val, 0, 63, &v) == 0)
            o->device = (int)v;
        else if (strcmp(a, "--window-s") == 0 && gpubench_parse_u64(val, 1, 3600, &v) == 0)
            o->window_ms = v * 1000;
        else if (strcmp(a, "--window-ms") == 0 &&
                 gpubench_parse_u64(val, 100, 3600000, &o->window_ms) == 0)
            continue;
        else if (strcmp(a, "--warmup-s") == 0 && gpubench_parse_u64(val, 0, 600, &v) == 0)
            o->warmup_ms = v * 1000;
        else if (strcmp(a, "--kernel-us") == 0 &&
                 gpubench_parse_u64(val, 10, 1000000, &o->kernel_us) == 0)
            continue;
        else if (strcmp(a, "--blocks") == 0 &&
                 gpubench_parse_u64(val, 0, 1u << 20, &o->blocks) == 0)
            continue;
        else if (strcmp(a, "--depth") == 0 && gpubench_parse_u64(val, 1, MAX_DEPTH, &o->depth) == 0)
            continue;
        else if (strcmp(a, "--iters") == 0 &&
                 gpubench_parse_u64(val, 1, 2000000000u, &o->iters) == 0)
            continue;
        else if (strcmp(a, "--lookup") == 0 && gpubench_lookup_parse(val, &o->lookup) == 0)
            continue;
        else if (strcmp(a, "--pair") == 0 &&
                 sscanf(val, "%" SCNu64 ",%" SCNu64, &o->pair_a, &o->pair_b) == 2 &&
                 o->pair_a >= 1 && o->pair_a < 100 && o->pair_b >= 1 &&
                 (o->pair_a + o->pair_b <= 100 || o->pair_b == 100))
            continue;
        else
            return -EINVAL;
    }
    return argc % 2 == 1 ? 0 : -EINVAL;
}

static int calib_start(struct bench *b, char *line, size_t len)
{
    static const char *const unset[] = {"LD_PRELOAD", NULL};
    char dev[16], kus[32], blocks[16];
    char *argv[] = {"bench_gpu_compute",
                    "--worker",
                    "calib",
                    "--lookup",
                    (char *)gpubench_lookup_name(b->o->lookup),
                    "--device",
                    dev,
                    "--kernel-us",
                    kus,
                    "--blocks",
                    blocks,
                    NULL};
    int rc;

    snprintf(dev, sizeof(dev), "%d", b->o->device);
    snprintf(kus, sizeof(kus), "%" PRIu64, b->o->kernel_us);
    snprintf(blocks, sizeof(blocks), "%" PRIu64, b->o->blocks);
    rc = gpubench_child_start(&b->calib, argv, NULL, unset);
    if (rc != 0) {
        snprintf(line, len, "cannot start: %s", strerror(-rc));
        return rc;
    }
    rc = gpubench_child_recv(&b->calib, line, len, STARTUP_MS);
    if (rc != 0 || strncmp(line, "ready ", 6) != 0) {
        if (rc != 0)
            snprintf(line, len, "no reply: %s", strerror(-rc));
        gpubench_child_kill(&b->calib);
        return -EIO;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct options o;
    struct bench b;
    struct run_case cases[MAX_CASES];
    unsigned ncases = 0;
    char why[512], line[512], list[256], *save = NULL, uuid[64], name[128] = "?";
    uint64_t v, sms = 0, driver = 0;
    double ns = 0;
    char ptx[32] = "?";

    if (parse_args(argc, argv, &o) != 0)
        return usage(argv[0]);
    if (o.worker != NULL)
        return strcmp(o.worker, "calib") == 0 ? worker_calib(&o) : worker_run(&o);
    if (strlen(o.cases) >= sizeof(list))
        return usage(argv[0]);
    memcpy(list, o.cases, strlen(o.cases) + 1);
    for (char *t = strtok_r(list, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
        if (ncases == MAX_CASES || parse_case(t, &o, &cases[ncases]) != 0)
            return usage(argv[0]);
        ncases++;
    }
    if (!gpubench_has_gpu(why, sizeof(why))) {
        printf(GPUBENCH_SKIP_FMT, why);
        return 0;
    }
    memset(&b, 0, sizeof(b));
    b.o = &o;
    b.vcuda = gpubench_vcuda_usable("bench_gpu_compute", o.vcuda);
    if (b.vcuda == NULL)
        return 2;
    if (calib_start(&b, line, sizeof(line)) != 0) {
        fprintf(stderr, "bench_gpu_compute: calibration worker: %s\n", line);
        return 1;
    }
    if (gpubench_kv_u64(line, "iters", &b.iters) != 0 || gpubench_kv_u64(line, "blocks", &v) != 0) {
        fprintf(stderr, "bench_gpu_compute: calibration worker: %s\n", line);
        return 1;
    }
    b.blocks = (unsigned)v;
    (void)gpubench_kv_u64(line, "sms", &sms);             /* 0 stays: printed as such */
    (void)gpubench_kv_u64(line, "driver", &driver);       /* 0 stays: printed as such */
    (void)gpubench_kv_str(line, "ptx", ptx, sizeof(ptx)); /* "?" stays */
    if (strstr(line, " name=") != NULL)
        snprintf(name, sizeof(name), "%s", strstr(line, " name=") + 6);
    if (calib_measure(&b, &ns) != 0) {
        fprintf(stderr, "bench_gpu_compute: calibration failed\n");
        return 1;
    }
    {
        struct gpubench_cuda cu;
        CUdevice dev;

        b.nvml_dev = NULL;
        if (gpubench_nvml_open(&b.nv, GPUBENCH_DLSYM, why, sizeof(why)) == 0 &&
            b.nv.device_get_utilization_rates != NULL &&
            gpubench_cuda_open(&cu, GPUBENCH_DLSYM, why, sizeof(why)) == 0 &&
            cu.init(0) == CUDA_SUCCESS && cu.device_get(&dev, o.device) == CUDA_SUCCESS &&
            gpubench_cuda_uuid(&cu, dev, uuid, sizeof(uuid)) == 0 &&
            gpubench_nvml_find(&b.nv, uuid, &b.nvml_dev) != 0)
            b.nvml_dev = NULL;
    }
    printf("bench_gpu_compute: device %d %s, %" PRIu64 " SMs, driver %" PRIu64 ".%" PRIu64
           ", interposer %s\n",
           o.device, name, sms, driver / 1000, driver % 1000 / 10, b.vcuda);
    printf("kernel egpu_spin_iters (PTX %s): %u blocks x 32 threads, %" PRIu64
           " iterations = %.1f us of device time; %" PRIu64
           " in flight per process; window %.1f s after %.1f s warm-up\n",
           ptx, b.blocks, b.iters, ns / 1000.0, o.depth, (double)o.window_ms / 1000.0,
           (double)o.warmup_ms / 1000.0);
    printf("share = kernels completed in the window x calibrated kernel time / window; "
           "nvml = card utilisation (all containers)\n\n");
    printf("%-14s %-10s %5s %8s %9s %7s %6s %8s %7s\n", "case", "container", "procs", "target%",
           "measured%", "error", "nvml%", "kernels", "drift");
    for (unsigned i = 0; i < ncases; i++)
        run_case(&b, &cases[i]);
    (void)gpubench_child_send(&b.calib, "exit"); /* EOF does the same */
    (void)gpubench_child_wait(&b.calib, EXIT_MS, NULL);
    printf("\ncompute: %d of %d interposed rows within 2 points of the target (error in points "
           "of the card's time)\n",
           b.rows - b.missed, b.rows);
    return b.missed == 0 ? 0 : 1;
}
