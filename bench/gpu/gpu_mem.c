/* bench/gpu/gpu_mem.c - bench_gpu_mem: the interposer's memory limit on a real NVIDIA GPU
 * (the "memory" third of bench/gpu), and the device memory a CUDA context takes.
 *
 * Prints, for device --device (default 0):
 *   1. the context footprint, measured without the interposer with cuMemGetInfo: how much
 *      the card's free memory drops when another process creates its primary context, and
 *      when this process creates extra contexts (cuCtxCreate); the first figure, rounded up
 *      to a MiB, is the value to give EGPU_VCUDA_CONTEXT_MIB. Then what the interposer
 *      charges per process context under a limit;
 *   2. a table: for every allocation path (cuMemAlloc_v2, pitch, managed, cuMemCreate,
 *      cuMemAllocAsync, a memory pool, 2D/3D arrays, a mipmapped array) and every lookup
 *      path (direct symbol, dlsym, cuGetProcAddress_v2), in a fresh process under
 *      --limit-mib: cuMemGetInfo, cuDeviceTotalMem and NVML report the limit as the total;
 *      --chunk-mib allocations succeed until the next would pass the limit, and that one
 *      fails with CUDA_ERROR_OUT_OF_MEMORY and takes nothing; freeing gives it all back;
 *   3. four processes of one container sharing one limit;
 *   4. how long the memory of a SIGKILLed process takes to come back (target: 1 s);
 *   5. a memory pool's reservation (pools keep freed memory reserved, unseen by a
 *      count of allocations): a process under --limit-mib fills a pool
 *      whose release threshold is UINT64_MAX with --chunk-mib blocks, frees them (the pool
 *      keeps them reserved), then fills the default pool (cuMemAllocAsync); the card's real
 *      used memory, seen by a process without the interposer, must stay within the limit.
 * A row passes or fails on its own checks; the program exits 1 when one fails.
 *
 * DESIGN: the parent does no CUDA work beyond the skip test. Every measurement runs in a
 * worker (this executable with --worker, see gpubench.h) that attaches to the device and
 * obeys one-line commands (alloc, free, info, ctxs, watch), so several processes can be
 * stepped in a known order. Interposed workers get LD_PRELOAD=<libegpu-vcuda.so> and a fresh
 * allocation directory (EGPU_VCUDA_DIR) per container; sizes travel in bytes.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpubench.h"

#define MIB        ((uint64_t)1024 * 1024)
#define STARTUP_MS 120000 /* a worker's context creation and module JIT */
#define CMD_MS     120000
#define EXIT_MS    30000

enum path_kind {
    P_MEM,
    P_PITCH,
    P_MANAGED,
    P_VMM,
    P_ASYNC,
    P_POOL,
    P_ARRAY,
    P_ARRAY3D,
    P_MIPMAP,
    P_COUNT
};

static const char *const path_names[P_COUNT] = {"mem",  "pitch", "managed", "vmm",   "async",
                                                "pool", "array", "array3d", "mipmap"};
static const char *const path_apis[P_COUNT] = {
    "cuMemAlloc_v2",    "cuMemAllocPitch_v2", "cuMemAllocManaged",
    "cuMemCreate",      "cuMemAllocAsync",    "cuMemAllocFromPoolAsync",
    "cuArrayCreate_v2", "cuArray3DCreate_v2", "cuMipmappedArrayCreate"};

struct options {
    const char *vcuda;
    int device;
    uint64_t limit_mib;          /* the container's limit for the path table, MiB */
    uint64_t chunk_mib;          /* one allocation, MiB */
    uint64_t contexts;           /* extra contexts for the in-process footprint */
    uint64_t kill_ms;            /* target for a SIGKILLed process's memory to come back, ms */
    unsigned paths;              /* bit per enum path_kind */
    unsigned lookups;            /* bit per enum gpubench_lookup */
    bool worker;                 /* --worker: obey commands on stdin */
    enum gpubench_lookup lookup; /* the worker's lookup path */
};

/* ---- Worker ---- */

struct held {
    enum path_kind kind;
    CUdeviceptr ptr;
    CUmemGenericAllocationHandle handle;
    CUarray array;
    CUmipmappedArray mipmap;
};

struct worker {
    struct gpubench_cuda cu;
    struct gpubench_nvml nv;
    bool have_nvml;
    CUdevice dev;
    CUcontext ctx;
    char uuid[64];
    CUstream stream;
    CUmemoryPool pool;
    struct held *held;
    size_t nheld, cap;
};

static bool path_supported(const struct worker *w, enum path_kind k)
{
    const struct gpubench_cuda *cu = &w->cu;

    switch (k) {
    case P_VMM:
        return cu->mem_create != NULL && cu->mem_release != NULL &&
               cu->mem_get_allocation_granularity != NULL;
    case P_ASYNC:
        return cu->mem_alloc_async != NULL && cu->mem_free_async != NULL;
    case P_POOL:
        return cu->mem_pool_create != NULL && cu->mem_pool_destroy != NULL &&
               cu->mem_alloc_from_pool_async != NULL && cu->mem_free_async != NULL;
    case P_MIPMAP:
        return cu->mipmapped_array_create != NULL && cu->mipmapped_array_destroy != NULL;
    default:
        return true;
    }
}

/* One allocation of bytes by path k; on success *h records how to free it. */
static CUresult alloc_one(struct worker *w, enum path_kind k, size_t bytes, struct held *h)
{
    const struct gpubench_cuda *cu = &w->cu;
    CUresult rc;

    memset(h, 0, sizeof(*h));
    h->kind = k;
    switch (k) {
    case P_MEM:
        return cu->mem_alloc(&h->ptr, bytes);
    case P_PITCH: {
        size_t pitch = 0;

        /* 8 KiB rows of 4-byte elements: a width every driver keeps as the pitch. */
        return cu->mem_alloc_pitch(&h->ptr, &pitch, 8192, bytes / 8192, 4);
    }
    case P_MANAGED:
        return cu->mem_alloc_managed(&h->ptr, bytes, CU_MEM_ATTACH_GLOBAL);
    case P_VMM: {
        CUmemAllocationProp prop;
        size_t gran = 0;

        memset(&prop, 0, sizeof(prop));
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = w->dev;
        rc = cu->mem_get_allocation_granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
        if (rc != CUDA_SUCCESS)
            return rc;
        if (gran > 0)
            bytes = (bytes + gran - 1) / gran * gran;
        return cu->mem_create(&h->handle, bytes, &prop, 0);
    }
    case P_ASYNC:
        rc = cu->mem_alloc_async(&h->ptr, bytes, w->stream);
        if (rc == CUDA_SUCCESS)
            rc = cu->stream_synchronize(w->stream);
        return rc;
    case P_POOL:
        if (w->pool == NULL) {
            CUmemPoolProps props;

            memset(&props, 0, sizeof(props));
            props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
            props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
            props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
            props.location.id = w->dev;
            rc = cu->mem_pool_create(&w->pool, &props);
            if (rc != CUDA_SUCCESS)
                return rc;
        }
        rc = cu->mem_alloc_from_pool_async(&h->ptr, bytes, w->pool, w->stream);
        if (rc == CUDA_SUCCESS)
            rc = cu->stream_synchronize(w->stream);
        return rc;
    case P_ARRAY: {
        /* 4096 floats a row: 16 KiB rows. */
        CUDA_ARRAY_DESCRIPTOR d = {
            .Width = 4096, .Height = bytes / 16384, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};

        return cu->array_create(&h->array, &d);
    }
    case P_ARRAY3D: {
        /* 256 x 256 floats a slice: 256 KiB slices. */
        CUDA_ARRAY3D_DESCRIPTOR d = {.Width = 256,
                                     .Height = 256,
                                     .Depth = bytes / 262144,
                                     .Format = CU_AD_FORMAT_FLOAT,
                                     .NumChannels = 1};

        return cu->array3d_create(&h->array, &d);
    }
    case P_MIPMAP: {
        /* One level of a 2D mipmapped array (Depth 0), so its size is exactly bytes. */
        CUDA_ARRAY3D_DESCRIPTOR d = {.Width = 4096,
                                     .Height = bytes / 16384,
                                     .Depth = 0,
                                     .Format = CU_AD_FORMAT_FLOAT,
                                     .NumChannels = 1};

        return cu->mipmapped_array_create(&h->mipmap, &d, 1);
    }
    case P_COUNT:
        break;
    }
    return CUDA_ERROR_INVALID_VALUE;
}

static CUresult free_one(struct worker *w, const struct held *h)
{
    const struct gpubench_cuda *cu = &w->cu;

    switch (h->kind) {
    case P_MEM:
    case P_PITCH:
    case P_MANAGED:
        return cu->mem_free(h->ptr);
    case P_VMM:
        return cu->mem_release(h->handle);
    case P_ASYNC:
    case P_POOL:
        return cu->mem_free_async(h->ptr, w->stream);
    case P_ARRAY:
    case P_ARRAY3D:
        return cu->array_destroy(h->array);
    case P_MIPMAP:
        return cu->mipmapped_array_destroy(h->mipmap);
    case P_COUNT:
        break;
    }
    return CUDA_ERROR_INVALID_VALUE;
}

/* Frees everything held; returns the first error (all are attempted). */
static CUresult free_all(struct worker *w)
{
    CUresult first = CUDA_SUCCESS;

    for (size_t i = 0; i < w->nheld; i++) {
        CUresult rc = free_one(w, &w->held[i]);

        if (rc != CUDA_SUCCESS && first == CUDA_SUCCESS)
            first = rc;
    }
    w->nheld = 0;
    if (w->stream != NULL) {
        CUresult rc = w->cu.stream_synchronize(w->stream);

        if (rc != CUDA_SUCCESS && first == CUDA_SUCCESS)
            first = rc;
    }
    return first;
}

static int mem_info(struct worker *w, size_t *free_bytes, size_t *total_bytes)
{
    CUresult rc = w->cu.mem_get_info(free_bytes, total_bytes);

    if (rc != CUDA_SUCCESS) {
        gpubench_reply("err cuMemGetInfo_v2 %s", gpubench_cu_name(&w->cu, rc));
        return -EIO;
    }
    return 0;
}

static void cmd_info(struct worker *w)
{
    struct gpubench_nvml_memory nm = {0};
    size_t f, t, dt = 0;
    CUresult rc;
    int64_t nvml_total = -1, nvml_used = -1;

    if (mem_info(w, &f, &t) != 0)
        return;
    rc = w->cu.device_total_mem(&dt, w->dev);
    if (rc != CUDA_SUCCESS) {
        gpubench_reply("err cuDeviceTotalMem_v2 %s", gpubench_cu_name(&w->cu, rc));
        return;
    }
    if (w->have_nvml && gpubench_nvml_memory(&w->nv, w->uuid, &nm) == 0) {
        nvml_total = (int64_t)nm.total;
        nvml_used = (int64_t)nm.used;
    }
    gpubench_reply("ok free=%zu total=%zu dev_total=%zu nvml_total=%" PRId64 " nvml_used=%" PRId64,
                   f, t, dt, nvml_total, nvml_used);
}

static void cmd_alloc(struct worker *w, const char *path, uint64_t chunk, uint64_t max)
{
    enum path_kind k = P_COUNT;
    size_t f0, t, fb = 0, fa = 0, first_delta = 0;
    CUresult rc = CUDA_SUCCESS;
    uint64_t n = 0;

    for (int i = 0; i < P_COUNT; i++) {
        if (strcmp(path, path_names[i]) == 0)
            k = (enum path_kind)i;
    }
    if (k == P_COUNT || chunk == 0) {
        gpubench_reply("err bad alloc command");
        return;
    }
    if (!path_supported(w, k)) {
        gpubench_reply("err unsupported: the driver has no %s", path_apis[k]);
        return;
    }
    if (w->nheld + max > w->cap) {
        struct held *nh = realloc(w->held, (w->nheld + max) * sizeof(*nh));

        if (nh == NULL) {
            gpubench_reply("err out of host memory");
            return;
        }
        w->held = nh;
        w->cap = w->nheld + max;
    }
    if (mem_info(w, &f0, &t) != 0)
        return;
    fb = f0;
    for (; n < max; n++) {
        rc = alloc_one(w, k, chunk, &w->held[w->nheld]);
        if (rc != CUDA_SUCCESS)
            break;
        w->nheld++;
        if (mem_info(w, &fa, &t) != 0)
            return;
        if (n == 0)
            first_delta = f0 > fa ? f0 - fa : 0;
        fb = fa;
    }
    /* fb: free memory just before the call that failed; fa: just after it. */
    if (mem_info(w, &fa, &t) != 0)
        return;
    gpubench_reply("ok n=%" PRIu64 " code=%d code_name=%s first_delta=%zu free_before_fail=%zu "
                   "free_after_fail=%zu",
                   n, rc, rc == CUDA_SUCCESS ? "none" : gpubench_cu_name(&w->cu, rc), first_delta,
                   fb, fa);
}

/* "poolhold chunk max": a pool keeping everything freed (threshold UINT64_MAX) filled
 * with chunk-byte blocks and emptied, then the default pool filled. Holds the second
 * blocks until "free"; the pool is destroyed at exit. */
static void cmd_poolhold(struct worker *w, uint64_t chunk, uint64_t max)
{
    CUmemPoolProps props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                            .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = w->dev}};
    cuuint64_t keep_all = UINT64_MAX;
    CUresult rc = CUDA_SUCCESS, rc2 = CUDA_SUCCESS;
    uint64_t n1 = 0, n2 = 0;

    if (w->cu.mem_pool_create == NULL || w->cu.mem_pool_set_attribute == NULL ||
        w->cu.mem_alloc_from_pool_async == NULL || w->cu.mem_alloc_async == NULL) {
        gpubench_reply("err unsupported: the driver has no memory pools");
        return;
    }
    if (w->pool == NULL && (rc = w->cu.mem_pool_create(&w->pool, &props)) != CUDA_SUCCESS) {
        gpubench_reply("err cuMemPoolCreate %s", gpubench_cu_name(&w->cu, rc));
        return;
    }
    rc = w->cu.mem_pool_set_attribute(w->pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep_all);
    if (rc != CUDA_SUCCESS || free_all(w) != CUDA_SUCCESS) {
        gpubench_reply("err cuMemPoolSetAttribute %s", gpubench_cu_name(&w->cu, rc));
        return;
    }
    if (w->nheld + max > w->cap) {
        struct held *nh = realloc(w->held, (w->nheld + max) * sizeof(*nh));

        if (nh == NULL) {
            gpubench_reply("err out of host memory");
            return;
        }
        w->held = nh;
        w->cap = w->nheld + max;
    }
    for (; n1 < max; n1++) {
        CUdeviceptr p;

        rc = w->cu.mem_alloc_from_pool_async(&p, chunk, w->pool, w->stream);
        if (rc != CUDA_SUCCESS)
            break;
        w->held[w->nheld++] = (struct held){.kind = P_POOL, .ptr = p};
    }
    (void)free_all(w); /* synchronises: the pool keeps it all reserved */
    for (; n2 < max; n2++) {
        CUdeviceptr p;

        rc2 = w->cu.mem_alloc_async(&p, chunk, w->stream);
        if (rc2 != CUDA_SUCCESS)
            break;
        w->held[w->nheld++] = (struct held){.kind = P_ASYNC, .ptr = p};
    }
    (void)w->cu.stream_synchronize(w->stream);
    gpubench_reply("ok n1=%" PRIu64 " n2=%" PRIu64 " code=%d code2=%d", n1, n2, rc, rc2);
}

static void cmd_free(struct worker *w)
{
    size_t f, t;
    CUresult rc = free_all(w);

    if (rc != CUDA_SUCCESS) {
        gpubench_reply("err free: %s", gpubench_cu_name(&w->cu, rc));
        return;
    }
    if (mem_info(w, &f, &t) != 0)
        return;
    gpubench_reply("ok free=%zu", f);
}

static CUresult ctx_create(struct worker *w, CUcontext *ctx)
{
    if (w->cu.ctx_create_v2 != NULL)
        return w->cu.ctx_create_v2(ctx, CU_CTX_SCHED_AUTO, w->dev);
    if (w->cu.ctx_create_v4 != NULL)
        return w->cu.ctx_create_v4(ctx, NULL, CU_CTX_SCHED_AUTO, w->dev);
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* Creates n extra contexts one by one, measuring each one's drop in free memory, then
 * destroys them and reports what came back. */
static void cmd_ctxs(struct worker *w, uint64_t n)
{
    CUcontext ctxs[64];
    size_t f_start, f_prev, f, t;
    uint64_t dmin = UINT64_MAX, dmax = 0, dsum = 0, made = 0;
    CUresult rc = CUDA_SUCCESS;

    if (n == 0 || n > 64) {
        gpubench_reply("err ctxs: 1..64");
        return;
    }
    if (mem_info(w, &f_start, &t) != 0)
        return;
    f_prev = f_start;
    for (; made < n; made++) {
        uint64_t d;

        rc = ctx_create(w, &ctxs[made]);
        if (rc != CUDA_SUCCESS)
            break;
        /* cuCtxCreate makes the new context current: cuMemGetInfo sees the same card. */
        if (mem_info(w, &f, &t) != 0)
            return;
        d = f_prev > f ? f_prev - f : 0;
        dmin = d < dmin ? d : dmin;
        dmax = d > dmax ? d : dmax;
        dsum += d;
        f_prev = f;
    }
    for (uint64_t i = 0; i < made; i++)
        (void)w->cu.ctx_destroy(ctxs[i]); /* what came back is measured below */
    (void)w->cu.ctx_set_current(w->ctx);  /* the primary context stays retained */
    if (rc != CUDA_SUCCESS) {
        gpubench_reply("err cuCtxCreate: %s", gpubench_cu_name(&w->cu, rc));
        return;
    }
    if (mem_info(w, &f, &t) != 0)
        return;
    gpubench_reply("ok n=%" PRIu64 " min=%" PRIu64 " max=%" PRIu64 " sum=%" PRIu64 " missing=%zu",
                   made, dmin, dmax, dsum, f_start > f ? f_start - f : 0);
}

/* Polls cuMemGetInfo every millisecond until free >= target; reports microseconds since
 * t0_ns (the parent's CLOCK_MONOTONIC when it sent SIGKILL). */
static void cmd_watch(struct worker *w, uint64_t target, uint64_t timeout_ms, uint64_t t0_ns)
{
    uint64_t deadline = gpubench_now_ns() + timeout_ms * 1000000u;
    size_t f = 0, t;

    for (;;) {
        if (mem_info(w, &f, &t) != 0)
            return;
        if (f >= target) {
            uint64_t now = gpubench_now_ns();

            gpubench_reply("ok us=%" PRIu64 " free=%zu", now > t0_ns ? (now - t0_ns) / 1000u : 0,
                           f);
            return;
        }
        if (gpubench_now_ns() >= deadline) {
            gpubench_reply("err timeout free=%zu", f);
            return;
        }
        gpubench_sleep_until(gpubench_now_ns() + 1000000u);
    }
}

static int worker_main(const struct options *o)
{
    struct worker w;
    char why[256], line[256];
    size_t f, t;
    CUresult rc;

    memset(&w, 0, sizeof(w));
    if (gpubench_cuda_open(&w.cu, o->lookup, why, sizeof(why)) != 0 ||
        gpubench_cuda_attach(&w.cu, o->device, &w.dev, &w.ctx, why, sizeof(why)) != 0) {
        gpubench_reply("err %s", why);
        return 1;
    }
    if (gpubench_cuda_uuid(&w.cu, w.dev, w.uuid, sizeof(w.uuid)) != 0)
        w.uuid[0] = '\0';
    w.have_nvml = w.uuid[0] != '\0' && gpubench_nvml_open(&w.nv, o->lookup, why, sizeof(why)) == 0;
    rc = w.cu.stream_create(&w.stream, CU_STREAM_NON_BLOCKING);
    if (rc != CUDA_SUCCESS) {
        gpubench_reply("err cuStreamCreate: %s", gpubench_cu_name(&w.cu, rc));
        return 1;
    }
    if (w.cu.mem_get_info(&f, &t) != CUDA_SUCCESS) {
        gpubench_reply("err cuMemGetInfo_v2 failed after attach");
        return 1;
    }
    gpubench_reply("ready free=%zu total=%zu", f, t);
    while (fgets(line, sizeof(line), stdin) != NULL) {
        char path[16];
        uint64_t a, b, c;

        line[strcspn(line, "\n")] = '\0';
        if (strcmp(line, "info") == 0)
            cmd_info(&w);
        else if (sscanf(line, "alloc %15s %" SCNu64 " %" SCNu64, path, &a, &b) == 3)
            cmd_alloc(&w, path, a, b);
        else if (strcmp(line, "free") == 0)
            cmd_free(&w);
        else if (sscanf(line, "ctxs %" SCNu64, &a) == 1)
            cmd_ctxs(&w, a);
        else if (sscanf(line, "poolhold %" SCNu64 " %" SCNu64, &a, &b) == 2)
            cmd_poolhold(&w, a, b);
        else if (sscanf(line, "watch %" SCNu64 " %" SCNu64 " %" SCNu64, &a, &b, &c) == 3)
            cmd_watch(&w, a, b, c);
        else if (strcmp(line, "exit") == 0)
            break;
        else
            gpubench_reply("err unknown command");
    }
    (void)free_all(&w); /* exiting: the driver frees the rest */
    if (w.pool != NULL)
        (void)w.cu.mem_pool_destroy(w.pool);
    (void)w.cu.stream_destroy(w.stream);
    (void)w.cu.primary_ctx_release(w.dev);
    free(w.held);
    return 0;
}

/* ---- Parent ---- */

struct bench {
    const struct options *o;
    const char *vcuda;
    int checks, failed;
};

static void check(struct bench *b, bool ok)
{
    b->checks++;
    if (!ok)
        b->failed++;
}

static double mib(uint64_t bytes)
{
    return (double)bytes / (double)MIB;
}

/* Starts a worker on lookup, interposed when dir is not NULL (limit_mib then applies), and
 * waits for its ready line (copied to line). */
static int worker_start(struct bench *b, struct gpubench_child *c, enum gpubench_lookup lookup,
                        const char *dir, uint64_t limit_mib, char *line, size_t len)
{
    char dev[16], preload[4200], dirv[4200], limit[64];
    const char *set[4] = {NULL};
    char *argv[] = {"bench_gpu_mem", "--worker", "--lookup", (char *)gpubench_lookup_name(lookup),
                    "--device",      dev,        NULL};
    int rc;

    snprintf(dev, sizeof(dev), "%d", b->o->device);
    if (dir != NULL) {
        snprintf(preload, sizeof(preload), "LD_PRELOAD=%s", b->vcuda);
        snprintf(dirv, sizeof(dirv), "EGPU_VCUDA_DIR=%s", dir);
        snprintf(limit, sizeof(limit), "EGPU_VCUDA_MEMORY_MIB=%" PRIu64, limit_mib);
        set[0] = preload;
        set[1] = dirv;
        set[2] = limit;
    }
    rc = gpubench_child_start(c, argv, set, gpubench_limit_env);
    if (rc != 0) {
        snprintf(line, len, "cannot start a worker: %s", strerror(-rc));
        return rc;
    }
    rc = gpubench_child_recv(c, line, len, STARTUP_MS);
    if (rc != 0 || strncmp(line, "ready ", 6) != 0) {
        if (rc != 0)
            snprintf(line, len, "worker did not start: %s", strerror(-rc));
        gpubench_child_kill(c);
        return rc != 0 ? rc : -EIO;
    }
    return 0;
}

/* Sends a command and reads its reply into line; 0 when the reply starts with "ok". */
static int call(struct gpubench_child *c, char *line, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int call(struct gpubench_child *c, char *line, size_t len, const char *fmt, ...)
{
    char cmd[256];
    va_list ap;
    int rc;

    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    rc = gpubench_child_send(c, "%s", cmd);
    if (rc == 0)
        rc = gpubench_child_recv(c, line, len, CMD_MS);
    if (rc != 0) {
        snprintf(line, len, "%s: no reply (%s)", cmd, strerror(-rc));
        return rc;
    }
    return strncmp(line, "ok", 2) == 0 ? 0 : -EIO;
}

static void worker_stop(struct gpubench_child *c)
{
    (void)gpubench_child_send(c, "exit"); /* EOF on stdin does the same */
    (void)gpubench_child_wait(c, EXIT_MS, NULL);
}

static uint64_t kv(const char *line, const char *key)
{
    uint64_t v = 0;

    return gpubench_kv_u64(line, key, &v) == 0 ? v : 0;
}

/* Section 1: footprint without the interposer; prints and returns the largest per-process
 * figure in bytes (0 when it could not be measured), and the interposer's charge in *charged.
 * A "process" here is one that attached (primary context) and created one stream. */
static uint64_t footprint(struct bench *b, uint64_t *charged)
{
    struct gpubench_child f, g;
    char line[512], dir[4096];
    uint64_t worst = 0;

    *charged = 0;
    printf("\n== context footprint (cuMemGetInfo before/after, no interposer)\n");
    if (worker_start(b, &f, GPUBENCH_DLSYM, NULL, 0, line, sizeof(line)) != 0) {
        printf("cannot measure: %s\n", line);
        check(b, false);
        return 0;
    }
    for (int run = 0; run < 3; run++) {
        uint64_t before, after;

        if (call(&f, line, sizeof(line), "info") != 0)
            break;
        before = kv(line, "free");
        if (worker_start(b, &g, GPUBENCH_DLSYM, NULL, 0, line, sizeof(line)) != 0) {
            printf("cannot start a second process: %s\n", line);
            break;
        }
        if (call(&f, line, sizeof(line), "info") == 0) {
            after = kv(line, "free");
            printf("another process's primary context, run %d: %.1f MiB\n", run + 1,
                   mib(before > after ? before - after : 0));
            if (before > after && before - after > worst)
                worst = before - after;
        }
        worker_stop(&g);
    }
    if (call(&f, line, sizeof(line), "ctxs %" PRIu64, b->o->contexts) == 0) {
        uint64_t n = kv(line, "n");

        printf("an extra context in the same process (cuCtxCreate), %" PRIu64
               " of them: mean %.1f MiB, min %.1f, max %.1f; %.1f MiB not returned after "
               "cuCtxDestroy\n",
               n, n ? mib(kv(line, "sum")) / (double)n : 0.0, mib(kv(line, "min")),
               mib(kv(line, "max")), mib(kv(line, "missing")));
    } else {
        printf("extra contexts: %s\n", line);
    }
    worker_stop(&f);
    if (worst == 0)
        printf("the free memory did not move: the driver shares no device state between "
               "processes here (on the mock, set EGPU_MOCK_CUDA_STATE)\n");
    else
        printf("suggested EGPU_VCUDA_CONTEXT_MIB=%" PRIu64
               " (the largest per-process figure, rounded up to a MiB)\n",
               (worst + MIB - 1) / MIB);

    /* What the interposer charges: the same measurement seen through a limit. */
    if (gpubench_tmpdir_make(dir, sizeof(dir)) != 0) {
        printf("cannot make a temporary directory\n");
        check(b, false);
        return worst;
    }
    if (worker_start(b, &f, GPUBENCH_DLSYM, dir, b->o->limit_mib * 8, line, sizeof(line)) == 0) {
        uint64_t before = 0, after = 0, total = 0;

        if (call(&f, line, sizeof(line), "info") == 0) {
            before = kv(line, "free");
            total = kv(line, "total");
        }
        if (worker_start(b, &g, GPUBENCH_DLSYM, dir, b->o->limit_mib * 8, line, sizeof(line)) ==
            0) {
            if (call(&f, line, sizeof(line), "info") == 0)
                after = kv(line, "free");
            worker_stop(&g);
        }
        *charged = before > after ? before - after : 0;
        if (total == b->o->limit_mib * 8 * MIB) {
            /* Measured (no EGPU_VCUDA_CONTEXT_MIB) or configured, it must not fall short of
             * the footprint: 2 MiB or 2% of slack for the worker's stream and noise. */
            uint64_t slack = worst / 50 > 2 * MIB ? worst / 50 : 2 * MIB;
            bool enough = worst == 0 || *charged + slack >= worst;

            printf("the interposer charges %.1f MiB per process context "
                   "(seen by cuMemGetInfo under a %" PRIu64 " MiB limit)\n",
                   mib(*charged), b->o->limit_mib * 8);
            printf("context charged %.1f MiB vs measured %.1f MiB: %s\n", mib(*charged), mib(worst),
                   enough ? "PASS" : "FAIL (each process can pass the limit by the gap)");
            check(b, enough);
        } else {
            printf("FAIL under a %" PRIu64 " MiB limit cuMemGetInfo reports %.1f MiB total: "
                   "the interposer is not limiting this process\n",
                   b->o->limit_mib * 8, mib(total));
            check(b, false);
        }
        worker_stop(&f);
    } else {
        printf("interposed worker: %s\n", line);
        check(b, false);
    }
    gpubench_tmpdir_remove(dir);
    return worst;
}

/* Section 5: a pool keeping what is freed (release threshold UINT64_MAX), then the default
 * pool, in one interposed process under the limit; the card's real used memory is read by a
 * process without the interposer, before and after. */
static void pool_row(struct bench *b)
{
    const uint64_t chunk = b->o->chunk_mib * MIB, max = b->o->limit_mib / b->o->chunk_mib + 16;
    struct gpubench_child f, c;
    char line[512], dir[4096];
    uint64_t before = 0, after = 0, used;
    bool ok;

    printf("\n== memory pool reservation (release threshold UINT64_MAX), limit %" PRIu64
           " MiB, %" PRIu64 " MiB blocks\n",
           b->o->limit_mib, b->o->chunk_mib);
    if (worker_start(b, &f, GPUBENCH_DLSYM, NULL, 0, line, sizeof(line)) != 0) {
        printf("FAIL observer: %s\n", line);
        check(b, false);
        return;
    }
    if (gpubench_tmpdir_make(dir, sizeof(dir)) != 0 || call(&f, line, sizeof(line), "info") != 0) {
        printf("FAIL %s\n", line);
        check(b, false);
        worker_stop(&f);
        return;
    }
    before = kv(line, "free");
    if (worker_start(b, &c, GPUBENCH_DLSYM, dir, b->o->limit_mib, line, sizeof(line)) != 0) {
        printf("FAIL %s\n", line);
        check(b, false);
        worker_stop(&f);
        gpubench_tmpdir_remove(dir);
        return;
    }
    if (call(&c, line, sizeof(line), "poolhold %" PRIu64 " %" PRIu64, chunk, max) != 0) {
        if (strncmp(line, "err unsupported", 15) == 0)
            printf("skipped (%s)\n", line + 4);
        else
            printf("FAIL %s\n", line);
        check(b, strncmp(line, "err unsupported", 15) == 0);
    } else {
        printf("pool: %" PRIu64 " x %" PRIu64 " MiB allocated and freed (kept reserved); "
               "then default pool: %" PRIu64 " x %" PRIu64 " MiB\n",
               kv(line, "n1"), b->o->chunk_mib, kv(line, "n2"), b->o->chunk_mib);
        if (call(&f, line, sizeof(line), "info") == 0)
            after = kv(line, "free");
        used = before > after ? before - after : 0;
        ok = after != 0 && used <= b->o->limit_mib * MIB;
        printf("the process's real device memory (context included): %.1f MiB of %" PRIu64
               " MiB: %s\n",
               mib(used), b->o->limit_mib, ok ? "PASS" : "FAIL");
        check(b, ok);
    }
    worker_stop(&c);
    worker_stop(&f);
    gpubench_tmpdir_remove(dir);
}

/* The "next" column: what the call after the last success returned, short. */
static const char *next_label(const char *code_name)
{
    if (strcmp(code_name, "CUDA_ERROR_OUT_OF_MEMORY") == 0)
        return "OOM";
    if (strncmp(code_name, "CUDA_ERROR_", 11) == 0)
        return code_name + 11;
    return code_name;
}

/* Section 2: one row of the limit table. */
static void limit_row(struct bench *b, enum path_kind k, enum gpubench_lookup lookup)
{
    const uint64_t limit = b->o->limit_mib * MIB, chunk = b->o->chunk_mib * MIB;
    const uint64_t max = b->o->limit_mib / b->o->chunk_mib + 16;
    struct gpubench_child c;
    char line[512], dir[4096], why[160] = "", next[48];
    uint64_t free0, total, dev_total, n, charged, fb, fa, back;
    int64_t nvml_total = -1;
    bool ok = true;

    printf("%-8s %-7s ", path_names[k], gpubench_lookup_name(lookup));
    if (gpubench_tmpdir_make(dir, sizeof(dir)) != 0) {
        printf("cannot make a temporary directory\n");
        check(b, false);
        return;
    }
    if (worker_start(b, &c, lookup, dir, b->o->limit_mib, line, sizeof(line)) != 0) {
        printf("FAIL %s\n", line);
        check(b, false);
        gpubench_tmpdir_remove(dir);
        return;
    }
    if (call(&c, line, sizeof(line), "info") != 0) {
        printf("FAIL %s\n", line);
        goto fail;
    }
    free0 = kv(line, "free");
    total = kv(line, "total");
    dev_total = kv(line, "dev_total");
    (void)gpubench_kv_i64(line, "nvml_total", &nvml_total); /* -1 stays: no NVML */
    if (call(&c, line, sizeof(line), "alloc %s %" PRIu64 " %" PRIu64, path_names[k], chunk, max) !=
        0) {
        if (strncmp(line, "err unsupported", 15) == 0) {
            printf("skipped (%s)\n", line + 4);
            worker_stop(&c);
            gpubench_tmpdir_remove(dir);
            return;
        }
        printf("FAIL %s\n", line);
        goto fail;
    }
    n = kv(line, "n");
    charged = kv(line, "first_delta");
    fb = kv(line, "free_before_fail");
    fa = kv(line, "free_after_fail");
    if (total != limit || dev_total != limit)
        snprintf(why, sizeof(why), "total %.0f/%.0f MiB, want the limit", mib(total),
                 mib(dev_total));
    else if (nvml_total >= 0 && (uint64_t)nvml_total != limit)
        snprintf(why, sizeof(why), "NVML total %.0f MiB, want the limit",
                 mib((uint64_t)nvml_total));
    else if (strstr(line, "code_name=CUDA_ERROR_OUT_OF_MEMORY") == NULL)
        snprintf(why, sizeof(why), "the last call gave %s, want CUDA_ERROR_OUT_OF_MEMORY",
                 strstr(line, "code_name=") ? strstr(line, "code_name=") + 10 : "?");
    else if (n == 0 || charged == 0)
        snprintf(why, sizeof(why), "no allocation was counted (first one took %.1f MiB)",
                 mib(charged));
    else if (fb >= charged)
        snprintf(why, sizeof(why), "refused with %.1f MiB free >= one allocation", mib(fb));
    else if (fa != fb)
        snprintf(why, sizeof(why), "the failed call took %.1f MiB", mib(fb - fa));
    if (why[0] != '\0')
        ok = false;
    if (gpubench_kv_str(line, "code_name", next, sizeof(next)) != 0)
        snprintf(next, sizeof(next), "?");
    printf("%7.0f %8.0f %3" PRIu64 " x %-6.0f %-9.9s %9.1f ", mib(total), mib(free0), n,
           mib(charged), next_label(next), mib(fb));
    if (nvml_total >= 0)
        printf("%7.0f ", mib((uint64_t)nvml_total));
    else
        printf("%7s ", "n/a");
    if (call(&c, line, sizeof(line), "free") != 0) {
        printf("FAIL %s\n", line);
        goto fail;
    }
    back = kv(line, "free");
    if (ok && back != free0) {
        snprintf(why, sizeof(why), "after freeing, free is %.1f MiB, was %.1f", mib(back),
                 mib(free0));
        ok = false;
    }
    printf("%-4s %s\n", back == free0 ? "yes" : "no", ok ? "PASS" : "FAIL");
    if (!ok)
        printf("         ^ %s\n", why);
    check(b, ok);
    worker_stop(&c);
    gpubench_tmpdir_remove(dir);
    return;
fail:
    check(b, false);
    gpubench_child_kill(&c);
    gpubench_tmpdir_remove(dir);
}

/* Section 3: four processes of one container fill one limit. */
static void shared_limit(struct bench *b, uint64_t limit_mib)
{
    const uint64_t chunk = b->o->chunk_mib * MIB, max = limit_mib / b->o->chunk_mib + 16;
    struct gpubench_child c[4];
    char line[512], dir[4096];
    uint64_t sum = 0, n[4] = {0}, left = 0;
    int started = 0;
    bool ok = true;

    printf("\n== four processes, one container, one %" PRIu64 " MiB limit (cuMemAlloc_v2, %" PRIu64
           " MiB each)\n",
           limit_mib, b->o->chunk_mib);
    if (gpubench_tmpdir_make(dir, sizeof(dir)) != 0) {
        check(b, false);
        return;
    }
    for (; started < 4; started++) {
        if (worker_start(b, &c[started], GPUBENCH_DIRECT, dir, limit_mib, line, sizeof(line)) !=
            0) {
            printf("FAIL process %d: %s\n", started + 1, line);
            ok = false;
            break;
        }
    }
    /* All four allocate at the same time. */
    for (int i = 0; ok && i < 4; i++)
        ok = gpubench_child_send(&c[i], "alloc mem %" PRIu64 " %" PRIu64, chunk, max) == 0;
    for (int i = 0; ok && i < 4; i++) {
        ok = gpubench_child_recv(&c[i], line, sizeof(line), CMD_MS) == 0 &&
             strstr(line, "code_name=CUDA_ERROR_OUT_OF_MEMORY") != NULL;
        if (!ok)
            printf("FAIL process %d: %s\n", i + 1, line);
        n[i] = kv(line, "n");
        sum += n[i];
    }
    if (ok && call(&c[0], line, sizeof(line), "info") == 0) {
        left = kv(line, "free");
        ok = kv(line, "total") == limit_mib * MIB && left < chunk && sum * chunk <= limit_mib * MIB;
        printf("allocated %" PRIu64 "+%" PRIu64 "+%" PRIu64 "+%" PRIu64 " = %" PRIu64 " x %" PRIu64
               " MiB = %" PRIu64 " MiB, then CUDA_ERROR_OUT_OF_MEMORY in each; "
               "%.1f MiB left (< one allocation) of a %.0f MiB total: %s\n",
               n[0], n[1], n[2], n[3], sum, b->o->chunk_mib, sum * b->o->chunk_mib, mib(left),
               mib(kv(line, "total")), ok ? "PASS" : "FAIL");
    } else if (ok) {
        printf("FAIL %s\n", line);
        ok = false;
    }
    check(b, ok);
    for (int i = 0; i < started; i++)
        worker_stop(&c[i]);
    gpubench_tmpdir_remove(dir);
}

/* Section 4: memory of a SIGKILLed process comes back. */
static void killed_process(struct bench *b, uint64_t limit_mib)
{
    const uint64_t chunk = b->o->chunk_mib * MIB;
    struct gpubench_child watcher, victim;
    char line[512], dir[4096];
    uint64_t before = 0, held = 0, t_kill;
    bool ok = false;

    printf("\n== a SIGKILLed process's memory (limit %" PRIu64 " MiB)\n", limit_mib);
    if (gpubench_tmpdir_make(dir, sizeof(dir)) != 0) {
        check(b, false);
        return;
    }
    if (worker_start(b, &watcher, GPUBENCH_DIRECT, dir, limit_mib, line, sizeof(line)) != 0) {
        printf("FAIL %s\n", line);
        check(b, false);
        gpubench_tmpdir_remove(dir);
        return;
    }
    if (call(&watcher, line, sizeof(line), "info") != 0)
        goto out;
    before = kv(line, "free");
    if (kv(line, "total") != limit_mib * MIB) {
        snprintf(line, sizeof(line), "cuMemGetInfo reports %.1f MiB total, not the limit",
                 mib(kv(line, "total")));
        goto out;
    }
    if (worker_start(b, &victim, GPUBENCH_DIRECT, dir, limit_mib, line, sizeof(line)) != 0)
        goto out;
    if (call(&victim, line, sizeof(line), "alloc mem %" PRIu64 " 4", chunk) != 0 ||
        kv(line, "n") != 4) {
        printf("FAIL victim: %s\n", line);
        gpubench_child_kill(&victim);
        goto out;
    }
    if (call(&watcher, line, sizeof(line), "info") != 0) {
        gpubench_child_kill(&victim);
        goto out;
    }
    held = before > kv(line, "free") ? before - kv(line, "free") : 0;
    t_kill = gpubench_now_ns();
    gpubench_child_kill(&victim); /* SIGKILL, then reaped at once: no zombie keeps the pid */
    if (call(&watcher, line, sizeof(line), "watch %" PRIu64 " %" PRIu64 " %" PRIu64, before,
             b->o->kill_ms + 10000, t_kill) != 0)
        goto out;
    ok = kv(line, "us") <= b->o->kill_ms * 1000 && held >= 4 * chunk;
    printf("%.1f MiB held (a context and 4 x %" PRIu64 " MiB) came back %.1f ms after SIGKILL "
           "(target: within %" PRIu64 " ms): %s\n",
           mib(held), b->o->chunk_mib, (double)kv(line, "us") / 1000.0, b->o->kill_ms,
           ok ? "PASS" : "FAIL");
out:
    if (!ok && strncmp(line, "ok", 2) != 0)
        printf("FAIL %s\n", line);
    check(b, ok);
    worker_stop(&watcher);
    gpubench_tmpdir_remove(dir);
}

static int usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [--vcuda PATH] [--device N] [--limit-mib N] [--chunk-mib N]\n"
            "          [--paths mem,pitch,managed,vmm,async,pool,array,array3d,mipmap]\n"
            "          [--lookups direct,dlsym,proc] [--contexts N] [--kill-target-ms N]\n",
            argv0);
    return 2;
}

/* Parses a comma-separated list of names into a bit set. Returns 0 or -EINVAL. */
static int parse_set(const char *s, const char *const *names, int count, unsigned *out)
{
    char buf[256], *save = NULL;

    if (strlen(s) >= sizeof(buf))
        return -EINVAL;
    memcpy(buf, s, strlen(s) + 1);
    *out = 0;
    for (char *t = strtok_r(buf, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
        int i = 0;

        while (i < count && strcmp(t, names[i]) != 0)
            i++;
        if (i == count)
            return -EINVAL;
        *out |= 1u << i;
    }
    return *out != 0 ? 0 : -EINVAL;
}

static int parse_args(int argc, char **argv, struct options *o)
{
    static const char *const lookup_names[] = {"direct", "dlsym", "proc"};
    uint64_t v;

    memset(o, 0, sizeof(*o));
    o->limit_mib = 1024;
    o->chunk_mib = 64;
    o->contexts = 4;
    o->kill_ms = 1000;
    o->paths = (1u << P_COUNT) - 1;
    o->lookups = 7;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;

        if (strcmp(a, "--worker") == 0) {
            o->worker = true;
            continue;
        }
        if (val == NULL)
            return -EINVAL;
        i++;
        if (strcmp(a, "--vcuda") == 0)
            o->vcuda = val;
        else if (strcmp(a, "--device") == 0 && gpubench_parse_u64(val, 0, 63, &v) == 0)
            o->device = (int)v;
        else if (strcmp(a, "--limit-mib") == 0 &&
                 gpubench_parse_u64(val, 1, 1u << 24, &o->limit_mib) == 0)
            continue;
        else if (strcmp(a, "--chunk-mib") == 0 &&
                 gpubench_parse_u64(val, 2, 1u << 20, &o->chunk_mib) == 0 && o->chunk_mib % 2 == 0)
            continue;
        else if (strcmp(a, "--kill-target-ms") == 0 &&
                 gpubench_parse_u64(val, 1, 600000, &o->kill_ms) == 0)
            continue;
        else if (strcmp(a, "--contexts") == 0 && gpubench_parse_u64(val, 1, 64, &o->contexts) == 0)
            continue;
        else if (strcmp(a, "--paths") == 0 && parse_set(val, path_names, P_COUNT, &o->paths) == 0)
            continue;
        else if (strcmp(a, "--lookups") == 0 && parse_set(val, lookup_names, 3, &o->lookups) == 0)
            continue;
        else if (strcmp(a, "--lookup") == 0 && gpubench_lookup_parse(val, &o->lookup) == 0)
            continue;
        else
            return -EINVAL;
    }
    return o->chunk_mib <= o->limit_mib ? 0 : -EINVAL;
}

int main(int argc, char **argv)
{
    struct options o;
    struct bench b = {0};
    struct gpubench_cuda cu;
    char why[512], name[128] = "?";
    CUdevice dev;
    size_t total = 0;
    uint64_t ctx_charged, shared_mib;

    if (parse_args(argc, argv, &o) != 0)
        return usage(argv[0]);
    if (o.worker)
        return worker_main(&o);
    if (!gpubench_has_gpu(why, sizeof(why))) {
        printf(GPUBENCH_SKIP_FMT, why);
        return 0;
    }
    b.o = &o;
    b.vcuda = gpubench_vcuda_usable("bench_gpu_mem", o.vcuda);
    if (b.vcuda == NULL)
        return 2;
    if (gpubench_cuda_open(&cu, GPUBENCH_DLSYM, why, sizeof(why)) == 0 &&
        cu.init(0) == CUDA_SUCCESS && cu.device_get(&dev, o.device) == CUDA_SUCCESS) {
        (void)cu.device_get_name(name, sizeof(name), dev); /* "?" stays on failure */
        (void)cu.device_total_mem(&total, dev);            /* 0 stays on failure */
    }
    printf("bench_gpu_mem: device %d %s, %.0f MiB, driver %d.%d, interposer %s\n", o.device, name,
           mib(total), cu.driver_version / 1000, cu.driver_version % 1000 / 10, b.vcuda);

    (void)footprint(&b, &ctx_charged); /* it prints the figure it returns */

    printf("\n== memory limit %" PRIu64 " MiB, %" PRIu64 " MiB per allocation, one fresh "
           "process and allocation directory per row\n",
           o.limit_mib, o.chunk_mib);
    printf("%-8s %-7s %7s %8s %-12s %-9s %9s %7s %-4s %s\n", "path", "lookup", "total", "free0",
           "ok x MiB", "next", "free@fail", "nvml", "back", "verdict");
    for (int k = 0; k < P_COUNT; k++) {
        for (int l = 0; l < 3; l++) {
            if ((o.paths & (1u << k)) && (o.lookups & (1u << l)))
                limit_row(&b, (enum path_kind)k, (enum gpubench_lookup)l);
        }
    }
    printf("(total: cuMemGetInfo_v2 and cuDeviceTotalMem_v2; free0: before allocating, after the "
           "context; ok x MiB: allocations that succeeded x what the first one took; "
           "nvml: nvmlDeviceGetMemoryInfo total; back: free memory after freeing equals free0)\n");

    /* Room for four contexts and a few allocations each. */
    shared_mib = 4 * ((ctx_charged + MIB - 1) / MIB) + 8 * o.chunk_mib;
    if (shared_mib < o.limit_mib)
        shared_mib = o.limit_mib;
    shared_limit(&b, shared_mib);
    killed_process(&b, shared_mib);
    pool_row(&b);

    printf("\nmemory: %d of %d checks passed\n", b.checks - b.failed, b.checks);
    return b.failed == 0 ? 0 : 1;
}
