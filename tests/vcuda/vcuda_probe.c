/* tests/vcuda/vcuda_probe.c - a CUDA driver-API program that the interposer
 * tests (tests/integration/test_vcuda.py) run with libegpu-vcuda.so
 * preloaded over the mock driver (tests/mock). Test code, never shipped.
 *
 * Built twice: vcuda_probe_direct is linked against libcuda.so.1 and calls
 * the driver by its exported names (the "direct" lookup path); vcuda_probe
 * is not, and finds every entry point either with dlopen + dlsym
 * (--lookup dlsym) or, as CUDA 11.3+ runtimes do, with dlsym of
 * cuGetProcAddress_v2 alone and cuGetProcAddress_v2 for everything else
 * (--lookup procaddr, with --cuda-version V, default 12040; the _ptsz paths
 * then ask with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM).
 *
 * It reads commands from stdin, one per line, and answers each with one
 * line on stdout (flushed), so a test can drive it step by step:
 *
 *   init                        cuInit(0)                  -> init <rc>
 *   ctx <dev> primary|v2|v3|v4  make a context current     -> ctx <rc>
 *   setctx <i> | push <i> | pop cuCtxSetCurrent or cuCtxPushCurrent_v2 of the i-th
 *                               context "ctx" made (0, 1, ...), or cuCtxPopCurrent_v2
 *                               -> setctx|push|pop <rc>
 *   calls                       the mock driver's call counts of this process
 *                               (egpu_mock_calls_at) -> calls <name>=<n> ... ("-": none)
 *   ctxdestroy                  destroy (or release) the newest context made,
 *                               the one before it becomes current -> ctxdestroy <rc>
 *   alloc <path> <bytes>        one allocation             -> alloc <rc> <id> <pitch>
 *   free <id>                   free it                    -> free <rc>
 *   fill <path> <bytes>         allocate until one fails   -> fill <count> <rc>
 *   freeall                     free every live one        -> freeall <n> <first failing rc>
 *   meminfo                     cuMemGetInfo_v2            -> meminfo <rc> <free> <total>
 *   totalmem <dev>              cuDeviceTotalMem_v2        -> totalmem <rc> <bytes>
 *   nvml <index>                NVML memory info, v1 and v2 (dlopen'ed)
 *                               -> nvml <rc> <total> <free> <used> <rc2> <total> <reserved>
 *                                  <free> <used>
 *   launch                      a kernel (cuLaunchKernel), then cuStreamSynchronize
 *                               -> launch <rc>
 *   fork <path> <bytes>         fork; the child does init, ctx 0 primary, alloc, meminfo,
 *                               printing "child ..." lines, and exits; the parent waits
 *                               -> fork <child exit status>
 *   sym <name>                  dlsym of name through RTLD_DEFAULT, the libcuda handle and
 *                               the interposer's handle, each resolved with dladdr
 *                               -> sym <name> <lib>:<symbol> <lib>:<symbol> <lib>:<symbol>
 *   procaddr <name> <ver> <fl>  cuGetProcAddress_v2 through dlsym
 *                               -> procaddr <rc> <status> <lib>:<symbol>
 *   rtldnext                    dlsym(RTLD_NEXT) from a library loaded after the
 *                               interposer (libvcuda_next_a.so)  -> rtldnext <value>
 *   stream                      cuStreamCreate             -> stream <rc> <s>
 *   launchon <s> <kernel> <blocks> <n>
 *                               n launches of kernel (1 thread per block) on stream s
 *                               -> launchon <rc> <microseconds they took>
 *   sync <s>                    cuStreamSynchronize        -> sync <rc>
 *   capture <s> <mode>          cuStreamBeginCapture_v2    -> capture <rc>
 *   capturing <s>               cuStreamIsCapturing        -> capturing <rc> <status>
 *   endcapture <s>              cuStreamEndCapture, keeping the graph
 *                               -> endcapture <rc> <nodes (cuGraphGetNodes)>
 *   instantiate                 cuGraphInstantiateWithFlags of the graph kept (a new
 *                               cuGraphCreate one without nodes when none)
 *                               -> instantiate <rc>
 *   graphlaunch <s> <n> plain|ptsz
 *                               n launches of the instantiated graph (cuGraphLaunch or
 *                               cuGraphLaunch_ptsz)  -> graphlaunch <rc>
 *   spin kernel|graph|graph_ptsz|mixed|coop|coop_ptsz|multi|launch|grid|gridasync
 *        <kernel> <blocks>      a thread in the current context launches, until stop,
 *                               over and over on stream 0: kernel (cuLaunchKernel), the
 *                               instantiated graph (cuGraphLaunch, cuGraphLaunch_ptsz),
 *                               kernel then cuMemAlloc_v2 and cuMemFree_v2 of 2 MiB
 *                               (mixed), cuLaunchCooperativeKernel(_ptsz) (coop,
 *                               coop_ptsz), cuLaunchCooperativeKernelMultiDevice on one
 *                               device (multi), or, with cuFuncSetBlockShape 1 x 1 x 1,
 *                               cuLaunch (launch: one block), cuLaunchGrid (grid) or
 *                               cuLaunchGridAsync (gridasync) over blocks x 1; every 64
 *                               rounds it synchronises stream 0
 *                               -> spin <rc>
 *   stop                        stop and join that thread
 *                               -> stop <rounds> <first failing rc, 0 for none>
 *   multi2 <kernel> <blocks>    one cuLaunchCooperativeKernelMultiDevice over two
 *                               devices: the contexts of the last two "ctx" commands,
 *                               each with its own function and stream; both streams
 *                               synchronised when it ran -> multi2 <rc>
 *   quit
 *
 * <s> is a stream made by "stream" (0, 1, ...) or "-" for stream 0; <kernel>
 * a kernel name of the mock module (its cost: EGPU_MOCK_CUDA_KERNEL_NS);
 * <mode> a CUstreamCaptureMode.
 *
 * Paths: mem (cuMemAlloc_v2), pitch (cuMemAllocPitch_v2, height 64, width
 * bytes/64), managed, vmm (cuMemCreate on device 0), async, async_ptsz,
 * pool, pool_ptsz (cuMemAllocFromPoolAsync from a pool on device 0), array
 * (cuArrayCreate_v2: FLOAT x1, width 1024, height bytes/4096), array3d
 * (FLOAT x1, 1024 x 64 x bytes/262144), mipmap (FLOAT x1, width 1024,
 * height bytes/4096, 2 levels). <rc> is a CUresult; <lib> the basename of
 * the library dladdr names, "-" for NULL.
 */
#define _GNU_SOURCE /* RTLD_DEFAULT, RTLD_NEXT, dladdr */
#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "egpu/cuda_abi.h"

#define MAX_LIVE 4096

int egpu_next_call(void); /* libvcuda_next_a.so */

/* The entry points the probe uses, however they were found. */
struct api {
    __typeof__(cuInit) *init;
    __typeof__(cuDeviceGet) *device_get;
    __typeof__(cuDeviceTotalMem_v2) *device_total_mem;
    __typeof__(cuCtxCreate_v2) *ctx_create_v2;
    __typeof__(cuCtxCreate_v3) *ctx_create_v3;
    __typeof__(cuCtxCreate_v4) *ctx_create_v4;
    __typeof__(cuCtxDestroy_v2) *ctx_destroy;
    __typeof__(cuCtxSetCurrent) *ctx_set_current;
    __typeof__(cuCtxPushCurrent_v2) *ctx_push;
    __typeof__(cuCtxPopCurrent_v2) *ctx_pop;
    __typeof__(cuDevicePrimaryCtxRetain) *primary_retain;
    __typeof__(cuDevicePrimaryCtxRelease_v2) *primary_release;
    __typeof__(cuMemGetInfo_v2) *mem_get_info;
    __typeof__(cuMemAlloc_v2) *mem_alloc;
    __typeof__(cuMemAllocPitch_v2) *mem_alloc_pitch;
    __typeof__(cuMemAllocManaged) *mem_alloc_managed;
    __typeof__(cuMemFree_v2) *mem_free;
    __typeof__(cuMemGetAllocationGranularity) *mem_granularity;
    __typeof__(cuMemCreate) *mem_create;
    __typeof__(cuMemRelease) *mem_release;
    __typeof__(cuMemAllocAsync) *mem_alloc_async;
    __typeof__(cuMemAllocAsync_ptsz) *mem_alloc_async_ptsz;
    __typeof__(cuMemFreeAsync) *mem_free_async;
    __typeof__(cuMemFreeAsync_ptsz) *mem_free_async_ptsz;
    __typeof__(cuMemPoolCreate) *pool_create;
    __typeof__(cuMemPoolDestroy) *pool_destroy;
    __typeof__(cuMemAllocFromPoolAsync) *alloc_from_pool;
    __typeof__(cuMemAllocFromPoolAsync_ptsz) *alloc_from_pool_ptsz;
    __typeof__(cuArrayCreate_v2) *array_create;
    __typeof__(cuArray3DCreate_v2) *array3d_create;
    __typeof__(cuArrayDestroy) *array_destroy;
    __typeof__(cuMipmappedArrayCreate) *mipmap_create;
    __typeof__(cuMipmappedArrayDestroy) *mipmap_destroy;
    __typeof__(cuModuleLoadData) *module_load;
    __typeof__(cuModuleGetFunction) *module_get_function;
    __typeof__(cuLaunchKernel) *launch_kernel;
    __typeof__(cuStreamSynchronize) *stream_synchronize;
    __typeof__(cuStreamCreate) *stream_create;
    __typeof__(cuStreamBeginCapture_v2) *begin_capture;
    __typeof__(cuStreamEndCapture) *end_capture;
    __typeof__(cuStreamIsCapturing) *is_capturing;
    __typeof__(cuGraphCreate) *graph_create;
    __typeof__(cuGraphGetNodes) *graph_get_nodes;
    __typeof__(cuGraphInstantiateWithFlags) *graph_instantiate;
    __typeof__(cuGraphLaunch) *graph_launch;
    __typeof__(cuGraphLaunch_ptsz) *graph_launch_ptsz;
    __typeof__(cuGraphExecDestroy) *graph_exec_destroy;
    __typeof__(cuGraphDestroy) *graph_destroy;
    __typeof__(cuLaunchCooperativeKernel) *launch_coop;
    __typeof__(cuLaunchCooperativeKernel_ptsz) *launch_coop_ptsz;
    __typeof__(cuLaunchCooperativeKernelMultiDevice) *launch_multi;
    __typeof__(cuFuncSetBlockShape) *func_set_block_shape;
    __typeof__(cuLaunch) *launch_old;
    __typeof__(cuLaunchGrid) *launch_grid;
    __typeof__(cuLaunchGridAsync) *launch_grid_async;
};

/* One row per entry point: the field, the exported name, and the
 * unversioned name cuGetProcAddress takes (with the per-thread flag). */
struct row {
    size_t off;
    const char *exported;
    const char *base;
    int per_thread;
};

#define ROW(field, exported, base, pt)                  \
    {                                                   \
        offsetof(struct api, field), exported, base, pt \
    }
static const struct row rows[] = {
    ROW(init, "cuInit", "cuInit", 0),
    ROW(device_get, "cuDeviceGet", "cuDeviceGet", 0),
    ROW(device_total_mem, "cuDeviceTotalMem_v2", "cuDeviceTotalMem", 0),
    ROW(ctx_create_v2, "cuCtxCreate_v2", NULL, 0),
    ROW(ctx_create_v3, "cuCtxCreate_v3", NULL, 0),
    ROW(ctx_create_v4, "cuCtxCreate_v4", NULL, 0),
    ROW(ctx_destroy, "cuCtxDestroy_v2", "cuCtxDestroy", 0),
    ROW(ctx_set_current, "cuCtxSetCurrent", "cuCtxSetCurrent", 0),
    ROW(ctx_push, "cuCtxPushCurrent_v2", "cuCtxPushCurrent", 0),
    ROW(ctx_pop, "cuCtxPopCurrent_v2", "cuCtxPopCurrent", 0),
    ROW(primary_retain, "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRetain", 0),
    ROW(primary_release, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease", 0),
    ROW(mem_get_info, "cuMemGetInfo_v2", "cuMemGetInfo", 0),
    ROW(mem_alloc, "cuMemAlloc_v2", "cuMemAlloc", 0),
    ROW(mem_alloc_pitch, "cuMemAllocPitch_v2", "cuMemAllocPitch", 0),
    ROW(mem_alloc_managed, "cuMemAllocManaged", "cuMemAllocManaged", 0),
    ROW(mem_free, "cuMemFree_v2", "cuMemFree", 0),
    ROW(mem_granularity, "cuMemGetAllocationGranularity", "cuMemGetAllocationGranularity", 0),
    ROW(mem_create, "cuMemCreate", "cuMemCreate", 0),
    ROW(mem_release, "cuMemRelease", "cuMemRelease", 0),
    ROW(mem_alloc_async, "cuMemAllocAsync", "cuMemAllocAsync", 0),
    ROW(mem_alloc_async_ptsz, "cuMemAllocAsync_ptsz", "cuMemAllocAsync", 1),
    ROW(mem_free_async, "cuMemFreeAsync", "cuMemFreeAsync", 0),
    ROW(mem_free_async_ptsz, "cuMemFreeAsync_ptsz", "cuMemFreeAsync", 1),
    ROW(pool_create, "cuMemPoolCreate", "cuMemPoolCreate", 0),
    ROW(pool_destroy, "cuMemPoolDestroy", "cuMemPoolDestroy", 0),
    ROW(alloc_from_pool, "cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync", 0),
    ROW(alloc_from_pool_ptsz, "cuMemAllocFromPoolAsync_ptsz", "cuMemAllocFromPoolAsync", 1),
    ROW(array_create, "cuArrayCreate_v2", "cuArrayCreate", 0),
    ROW(array3d_create, "cuArray3DCreate_v2", "cuArray3DCreate", 0),
    ROW(array_destroy, "cuArrayDestroy", "cuArrayDestroy", 0),
    ROW(mipmap_create, "cuMipmappedArrayCreate", "cuMipmappedArrayCreate", 0),
    ROW(mipmap_destroy, "cuMipmappedArrayDestroy", "cuMipmappedArrayDestroy", 0),
    ROW(module_load, "cuModuleLoadData", "cuModuleLoadData", 0),
    ROW(module_get_function, "cuModuleGetFunction", "cuModuleGetFunction", 0),
    ROW(launch_kernel, "cuLaunchKernel", "cuLaunchKernel", 0),
    ROW(stream_synchronize, "cuStreamSynchronize", "cuStreamSynchronize", 0),
    ROW(stream_create, "cuStreamCreate", "cuStreamCreate", 0),
    ROW(begin_capture, "cuStreamBeginCapture_v2", "cuStreamBeginCapture", 0),
    ROW(end_capture, "cuStreamEndCapture", "cuStreamEndCapture", 0),
    ROW(is_capturing, "cuStreamIsCapturing", "cuStreamIsCapturing", 0),
    ROW(graph_create, "cuGraphCreate", "cuGraphCreate", 0),
    ROW(graph_get_nodes, "cuGraphGetNodes", "cuGraphGetNodes", 0),
    ROW(graph_instantiate, "cuGraphInstantiateWithFlags", "cuGraphInstantiateWithFlags", 0),
    ROW(graph_launch, "cuGraphLaunch", "cuGraphLaunch", 0),
    ROW(graph_launch_ptsz, "cuGraphLaunch_ptsz", "cuGraphLaunch", 1),
    ROW(graph_exec_destroy, "cuGraphExecDestroy", "cuGraphExecDestroy", 0),
    ROW(graph_destroy, "cuGraphDestroy", "cuGraphDestroy", 0),
    ROW(launch_coop, "cuLaunchCooperativeKernel", "cuLaunchCooperativeKernel", 0),
    ROW(launch_coop_ptsz, "cuLaunchCooperativeKernel_ptsz", "cuLaunchCooperativeKernel", 1),
    ROW(launch_multi, "cuLaunchCooperativeKernelMultiDevice",
        "cuLaunchCooperativeKernelMultiDevice", 0),
    ROW(func_set_block_shape, "cuFuncSetBlockShape", "cuFuncSetBlockShape", 0),
    ROW(launch_old, "cuLaunch", "cuLaunch", 0),
    ROW(launch_grid, "cuLaunchGrid", "cuLaunchGrid", 0),
    ROW(launch_grid_async, "cuLaunchGridAsync", "cuLaunchGridAsync", 0),
};
#undef ROW

static struct api api;
static void *cuda_handle;
static int cuda_version = 12040;

enum kind { K_PTR, K_PTR_ASYNC, K_PTR_ASYNC_PTSZ, K_VMM, K_ARRAY, K_MIPMAP };

struct live {
    int used;
    enum kind kind;
    uint64_t handle;
};

static struct live live[MAX_LIVE];

/* Contexts made by "ctx", newest last; "ctxdestroy" undoes the newest. */
struct made_ctx {
    CUcontext ctx;
    int primary;
    CUdevice dev;
};

static struct made_ctx ctxs[16];
static int nctx;
static CUcontext cur_ctx;        /* the current context, as the probe made it */
static CUcontext pushed_ctx[16]; /* the contexts "push" put cur_ctx over */
static int npushed;
static CUdevice ctx_dev; /* the device of the newest context */
static CUmemoryPool pool;

#ifdef PROBE_DIRECT
static void load_direct(void)
{
    api = (struct api){
        cuInit,
        cuDeviceGet,
        cuDeviceTotalMem_v2,
        cuCtxCreate_v2,
        cuCtxCreate_v3,
        cuCtxCreate_v4,
        cuCtxDestroy_v2,
        cuCtxSetCurrent,
        cuCtxPushCurrent_v2,
        cuCtxPopCurrent_v2,
        cuDevicePrimaryCtxRetain,
        cuDevicePrimaryCtxRelease_v2,
        cuMemGetInfo_v2,
        cuMemAlloc_v2,
        cuMemAllocPitch_v2,
        cuMemAllocManaged,
        cuMemFree_v2,
        cuMemGetAllocationGranularity,
        cuMemCreate,
        cuMemRelease,
        cuMemAllocAsync,
        cuMemAllocAsync_ptsz,
        cuMemFreeAsync,
        cuMemFreeAsync_ptsz,
        cuMemPoolCreate,
        cuMemPoolDestroy,
        cuMemAllocFromPoolAsync,
        cuMemAllocFromPoolAsync_ptsz,
        cuArrayCreate_v2,
        cuArray3DCreate_v2,
        cuArrayDestroy,
        cuMipmappedArrayCreate,
        cuMipmappedArrayDestroy,
        cuModuleLoadData,
        cuModuleGetFunction,
        cuLaunchKernel,
        cuStreamSynchronize,
        cuStreamCreate,
        cuStreamBeginCapture_v2,
        cuStreamEndCapture,
        cuStreamIsCapturing,
        cuGraphCreate,
        cuGraphGetNodes,
        cuGraphInstantiateWithFlags,
        cuGraphLaunch,
        cuGraphLaunch_ptsz,
        cuGraphExecDestroy,
        cuGraphDestroy,
        cuLaunchCooperativeKernel,
        cuLaunchCooperativeKernel_ptsz,
        cuLaunchCooperativeKernelMultiDevice,
        cuFuncSetBlockShape,
        cuLaunch,
        cuLaunchGrid,
        cuLaunchGridAsync,
    };
}
#endif /* PROBE_DIRECT */

static void set_field(size_t off, void *fn)
{
    memcpy((char *)&api + off, &fn, sizeof(fn));
}

static int load_dlsym(void)
{
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        void *fn = dlsym(cuda_handle, rows[i].exported);

        if (fn == NULL) {
            fprintf(stderr, "vcuda_probe: dlsym %s: %s\n", rows[i].exported, dlerror());
            return -1;
        }
        set_field(rows[i].off, fn);
    }
    return 0;
}

static int load_procaddr(void)
{
    __typeof__(cuGetProcAddress_v2) *gpa =
        (__typeof__(cuGetProcAddress_v2) *)dlsym(cuda_handle, "cuGetProcAddress_v2");

    if (gpa == NULL) {
        fprintf(stderr, "vcuda_probe: dlsym cuGetProcAddress_v2: %s\n", dlerror());
        return -1;
    }
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        CUdriverProcAddressQueryResult st = -1;
        void *fn = NULL;
        CUresult r;

        if (rows[i].base == NULL) {
            /* cuCtxCreate: the version picks the variant; the probe asks
             * for each variant by name through dlsym instead. */
            set_field(rows[i].off, dlsym(cuda_handle, rows[i].exported));
            continue;
        }
        r = gpa(rows[i].base, &fn, cuda_version,
                rows[i].per_thread ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
                                   : CU_GET_PROC_ADDRESS_DEFAULT,
                &st);
        if (r != CUDA_SUCCESS || fn == NULL) {
            fprintf(stderr, "vcuda_probe: cuGetProcAddress_v2 %s %d: %d status %d\n", rows[i].base,
                    cuda_version, r, st);
            return -1;
        }
        set_field(rows[i].off, fn);
    }
    return 0;
}

/* "lib:symbol" of p as dladdr names it. */
static void where(void *p, char *buf, size_t len)
{
    Dl_info info;

    if (p == NULL || dladdr(p, &info) == 0) {
        snprintf(buf, len, "-:-");
        return;
    }
    {
        const char *lib = info.dli_fname ? strrchr(info.dli_fname, '/') : NULL;

        snprintf(buf, len, "%s:%s", lib ? lib + 1 : (info.dli_fname ? info.dli_fname : "-"),
                 info.dli_sname && info.dli_saddr == p ? info.dli_sname : "?");
    }
}

static int new_id(enum kind kind, uint64_t handle)
{
    for (int i = 0; i < MAX_LIVE; i++) {
        if (!live[i].used) {
            live[i] = (struct live){1, kind, handle};
            return i;
        }
    }
    return -1;
}

static CUresult ensure_pool(void)
{
    CUmemPoolProps props;

    if (pool != NULL)
        return CUDA_SUCCESS;
    memset(&props, 0, sizeof(props));
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = ctx_dev;
    return api.pool_create(&pool, &props);
}

/* One allocation along path; *id and *pitch set on success. */
static CUresult alloc_path(const char *path, size_t bytes, int *id, size_t *pitch)
{
    CUdeviceptr p = 0;
    enum kind kind = K_PTR;
    uint64_t handle = 0;
    CUresult r;

    *pitch = 0;
    if (strcmp(path, "mem") == 0) {
        r = api.mem_alloc(&p, bytes);
    } else if (strcmp(path, "pitch") == 0) {
        r = api.mem_alloc_pitch(&p, pitch, bytes / 64, 64, 4);
    } else if (strcmp(path, "managed") == 0) {
        r = api.mem_alloc_managed(&p, bytes, CU_MEM_ATTACH_GLOBAL);
    } else if (strcmp(path, "async") == 0 || strcmp(path, "async_ptsz") == 0) {
        int pt = path[5] == '_';

        r = pt ? api.mem_alloc_async_ptsz(&p, bytes, NULL) : api.mem_alloc_async(&p, bytes, NULL);
        kind = pt ? K_PTR_ASYNC_PTSZ : K_PTR_ASYNC;
    } else if (strcmp(path, "pool") == 0 || strcmp(path, "pool_ptsz") == 0) {
        int pt = path[4] == '_';

        r = ensure_pool();
        if (r == CUDA_SUCCESS)
            r = pt ? api.alloc_from_pool_ptsz(&p, bytes, pool, NULL)
                   : api.alloc_from_pool(&p, bytes, pool, NULL);
        kind = pt ? K_PTR_ASYNC_PTSZ : K_PTR_ASYNC;
    } else if (strcmp(path, "vmm") == 0) {
        CUmemAllocationProp prop;
        CUmemGenericAllocationHandle h = 0;
        size_t gran = 0;

        memset(&prop, 0, sizeof(prop));
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = ctx_dev;
        r = api.mem_granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
        if (r == CUDA_SUCCESS && gran > 0)
            r = api.mem_create(&h, (bytes + gran - 1) / gran * gran, &prop, 0);
        kind = K_VMM;
        handle = h;
    } else if (strcmp(path, "array") == 0) {
        CUDA_ARRAY_DESCRIPTOR d = {1024, bytes / 4096, CU_AD_FORMAT_FLOAT, 1};
        CUarray a = NULL;

        r = api.array_create(&a, &d);
        kind = K_ARRAY;
        handle = (uint64_t)(uintptr_t)a;
    } else if (strcmp(path, "array3d") == 0) {
        CUDA_ARRAY3D_DESCRIPTOR d = {1024, 64, bytes / 262144, CU_AD_FORMAT_FLOAT, 1, 0};
        CUarray a = NULL;

        r = api.array3d_create(&a, &d);
        kind = K_ARRAY;
        handle = (uint64_t)(uintptr_t)a;
    } else if (strcmp(path, "mipmap") == 0) {
        CUDA_ARRAY3D_DESCRIPTOR d = {1024, bytes / 4096, 0, CU_AD_FORMAT_FLOAT, 1, 0};
        CUmipmappedArray a = NULL;

        r = api.mipmap_create(&a, &d, 2);
        kind = K_MIPMAP;
        handle = (uint64_t)(uintptr_t)a;
    } else {
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    if (r != CUDA_SUCCESS)
        return r;
    if (kind == K_PTR || kind == K_PTR_ASYNC || kind == K_PTR_ASYNC_PTSZ)
        handle = p;
    *id = new_id(kind, handle);
    return *id < 0 ? CUDA_ERROR_UNKNOWN : CUDA_SUCCESS;
}

static CUresult free_id(int id)
{
    struct live *l;
    CUresult r;

    if (id < 0 || id >= MAX_LIVE || !live[id].used)
        return CUDA_ERROR_INVALID_VALUE;
    l = &live[id];
    switch (l->kind) {
    case K_PTR:
        r = api.mem_free((CUdeviceptr)l->handle);
        break;
    case K_PTR_ASYNC:
        r = api.mem_free_async((CUdeviceptr)l->handle, NULL);
        break;
    case K_PTR_ASYNC_PTSZ:
        r = api.mem_free_async_ptsz((CUdeviceptr)l->handle, NULL);
        break;
    case K_VMM:
        r = api.mem_release((CUmemGenericAllocationHandle)l->handle);
        break;
    case K_ARRAY:
        r = api.array_destroy((CUarray)(uintptr_t)l->handle);
        break;
    default:
        r = api.mipmap_destroy((CUmipmappedArray)(uintptr_t)l->handle);
        break;
    }
    if (r == CUDA_SUCCESS)
        l->used = 0;
    return r;
}

static CUresult make_ctx(int dev, const char *how)
{
    CUcontext ctx = NULL;
    CUdevice d;
    CUresult r = api.device_get(&d, dev);

    if (r != CUDA_SUCCESS)
        return r;
    if (nctx == (int)(sizeof(ctxs) / sizeof(ctxs[0])))
        return CUDA_ERROR_UNKNOWN;
    if (strcmp(how, "primary") == 0)
        r = api.primary_retain(&ctx, d);
    else if (strcmp(how, "v2") == 0)
        r = api.ctx_create_v2(&ctx, 0, d);
    else if (strcmp(how, "v3") == 0)
        r = api.ctx_create_v3(&ctx, NULL, 0, 0, d);
    else if (strcmp(how, "v4") == 0)
        r = api.ctx_create_v4(&ctx, NULL, 0, d);
    else
        return CUDA_ERROR_NOT_SUPPORTED;
    if (r != CUDA_SUCCESS)
        return r;
    ctxs[nctx++] = (struct made_ctx){ctx, strcmp(how, "primary") == 0, d};
    ctx_dev = d;
    pool = NULL;
    r = api.ctx_set_current(ctx);
    if (r == CUDA_SUCCESS)
        cur_ctx = ctx;
    return r;
}

/* "setctx i" (cuCtxSetCurrent), "push i" (cuCtxPushCurrent_v2): context i
 * of those "ctx" made becomes current; "pop" (cuCtxPopCurrent_v2): the one
 * under it. The probe's kernels and streams follow (kernel_fn). */
static CUresult switch_ctx(const char *how, const char *arg)
{
    long i = strtol(arg, NULL, 10);
    CUcontext popped = NULL;
    CUresult r;

    if (strcmp(how, "pop") == 0) {
        r = api.ctx_pop(&popped);
        if (r == CUDA_SUCCESS)
            cur_ctx = npushed > 0 ? pushed_ctx[--npushed] : NULL;
        return r;
    }
    if (i < 0 || i >= nctx || npushed == (int)(sizeof(pushed_ctx) / sizeof(pushed_ctx[0])))
        return CUDA_ERROR_INVALID_VALUE;
    if (strcmp(how, "push") == 0) {
        r = api.ctx_push(ctxs[i].ctx);
        if (r == CUDA_SUCCESS)
            pushed_ctx[npushed++] = cur_ctx;
    } else {
        r = api.ctx_set_current(ctxs[i].ctx);
    }
    if (r == CUDA_SUCCESS)
        cur_ctx = ctxs[i].ctx;
    return r;
}

static CUresult destroy_ctx(void)
{
    struct made_ctx *m;
    CUresult r;

    if (nctx == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    m = &ctxs[nctx - 1];
    r = m->primary ? api.primary_release(m->dev) : api.ctx_destroy(m->ctx);
    if (r == CUDA_SUCCESS) {
        nctx--;
        pool = NULL;
        cur_ctx = NULL;
        if (nctx > 0) {
            ctx_dev = ctxs[nctx - 1].dev;
            r = api.ctx_set_current(ctxs[nctx - 1].ctx);
            if (r == CUDA_SUCCESS)
                cur_ctx = ctxs[nctx - 1].ctx;
        }
    }
    return r;
}

static void nvml_info(int index)
{
    int (*init)(void);
    int (*by_index)(unsigned, void **);
    int (*info)(void *, unsigned long long *);
    int (*info2)(void *, void *);
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL), *dev = NULL;
    unsigned long long m[3] = {0};
    struct {
        unsigned int version;
        unsigned long long total, reserved, free, used;
    } m2;
    int r, r2;

    if (h == NULL) {
        printf("nvml -1 %s\n", dlerror());
        return;
    }
    *(void **)&init = dlsym(h, "nvmlInit_v2");
    *(void **)&by_index = dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
    *(void **)&info = dlsym(h, "nvmlDeviceGetMemoryInfo");
    *(void **)&info2 = dlsym(h, "nvmlDeviceGetMemoryInfo_v2");
    if (!init || !by_index || !info || !info2) {
        printf("nvml -2 missing symbol\n");
        return;
    }
    r = init();
    if (r == 0)
        r = by_index((unsigned)index, &dev);
    if (r == 0)
        r = info(dev, m);
    memset(&m2, 0, sizeof(m2));
    m2.version = (unsigned int)(sizeof(m2) | (2u << 24));
    r2 = info2(dev, &m2);
    printf("nvml %d %llu %llu %llu %d %llu %llu %llu %llu\n", r, m[0], m[1], m[2], r2, m2.total,
           m2.reserved, m2.free, m2.used);
}

static CUresult launch_one(void)
{
    static const char image[] = "mock module";
    CUmodule mod = NULL;
    CUfunction fn = NULL;
    CUresult r = api.module_load(&mod, image);

    if (r == CUDA_SUCCESS)
        r = api.module_get_function(&fn, mod, "probe_kernel");
    if (r == CUDA_SUCCESS)
        r = api.launch_kernel(fn, 4, 1, 1, 128, 1, 1, 0, NULL, NULL, NULL);
    if (r == CUDA_SUCCESS)
        r = api.stream_synchronize(NULL);
    return r;
}

/* ---- streams, captures, graphs and launch loops ---- */

#define STREAMS_MAX 8
#define KERNELS_MAX 8

static CUstream streams[STREAMS_MAX];
static int nstreams;
static CUgraph graph;    /* from endcapture or instantiate */
static CUgraphExec exec; /* from instantiate */

static struct {
    char name[64];
    CUcontext ctx; /* the context current when it was loaded (cur_ctx) */
    CUfunction fn;
} kernels[KERNELS_MAX];

/* Stream s ("-" = 0), or CU_STREAM_LEGACY (never made by "stream") when
 * there is no such stream. */
static CUstream stream_arg(const char *s)
{
    char *e;
    long i = strtol(s, &e, 10);

    if (strcmp(s, "-") == 0)
        return NULL;
    return *e == '\0' && i >= 0 && i < nstreams ? streams[i] : CU_STREAM_LEGACY;
}

/* The function named name of the mock module, the same handle every time
 * (so the interposer sees one kernel). */
static CUresult kernel_fn(const char *name, CUfunction *fn)
{
    static const char image[] = "mock module";
    CUmodule mod = NULL;
    CUresult r;
    int i;

    for (i = 0; i < KERNELS_MAX && kernels[i].fn != NULL; i++) {
        if (strcmp(kernels[i].name, name) == 0 && kernels[i].ctx == cur_ctx) {
            *fn = kernels[i].fn;
            return CUDA_SUCCESS;
        }
    }
    if (i == KERNELS_MAX)
        return CUDA_ERROR_OUT_OF_MEMORY;
    r = api.module_load(&mod, image);
    if (r == CUDA_SUCCESS)
        r = api.module_get_function(fn, mod, name);
    if (r == CUDA_SUCCESS) {
        snprintf(kernels[i].name, sizeof(kernels[i].name), "%s", name);
        kernels[i].ctx = cur_ctx;
        kernels[i].fn = *fn;
    }
    return r;
}

/* "calls": the mock driver's count of every entry point this process
 * called (tests/mock/cuda_mock.h), "calls <name>=<n>...", or "calls -"
 * when the driver keeps none. The names are looked up in the driver as
 * loaded (the interposer's dlsym passes them through). */
static void mock_calls(void)
{
    const char *(*at)(unsigned, uint64_t *);
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    const char *name;
    uint64_t n;

    *(void **)&at = h ? dlsym(h, "egpu_mock_calls_at") : NULL;
    printf("calls");
    if (at == NULL)
        printf(" -");
    for (unsigned i = 0; at && (name = at(i, &n)) != NULL; i++)
        printf(" %s=%" PRIu64, name, n);
    printf("\n");
    if (h != NULL)
        dlclose(h); /* RTLD_NOLOAD took a reference */
}

static uint64_t now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void launch_on(const char *s, const char *name, unsigned blocks, long n)
{
    CUstream stream = stream_arg(s);
    CUfunction fn = NULL;
    uint64_t t0 = now_us();
    CUresult r = kernel_fn(name, &fn);

    for (long i = 0; i < n && r == CUDA_SUCCESS; i++)
        r = api.launch_kernel(fn, blocks, 1, 1, 1, 1, 1, 0, stream, NULL, NULL);
    printf("launchon %d %llu\n", r, (unsigned long long)(now_us() - t0));
}

static void end_capture(const char *s)
{
    size_t nodes = 0;
    CUresult r;

    if (graph != NULL)
        (void)api.graph_destroy(graph);
    graph = NULL;
    r = api.end_capture(stream_arg(s), &graph);
    if (r == CUDA_SUCCESS)
        r = api.graph_get_nodes(graph, NULL, &nodes);
    printf("endcapture %d %zu\n", r, nodes);
}

static CUresult instantiate(void)
{
    CUresult r = CUDA_SUCCESS;

    if (exec != NULL)
        (void)api.graph_exec_destroy(exec);
    exec = NULL;
    if (graph == NULL)
        r = api.graph_create(&graph, 0);
    if (r == CUDA_SUCCESS)
        r = api.graph_instantiate(&exec, graph, 0);
    return r;
}

static CUresult graph_launch(CUstream stream, bool ptsz)
{
    return ptsz ? api.graph_launch_ptsz(exec, stream) : api.graph_launch(exec, stream);
}

/* One launch of fn over blocks blocks (one thread each) on stream 0 through
 * the entry point what names: coop, coop_ptsz (cuLaunchCooperativeKernel,
 * _ptsz), multi (cuLaunchCooperativeKernelMultiDevice, one device), launch
 * (cuLaunch: always one block), grid, gridasync (cuLaunchGrid, _Async:
 * blocks x 1). */
static CUresult launch_other(const char *what, CUfunction fn, unsigned blocks)
{
    if (strcmp(what, "coop") == 0)
        return api.launch_coop(fn, blocks, 1, 1, 1, 1, 1, 0, NULL, NULL);
    if (strcmp(what, "coop_ptsz") == 0)
        return api.launch_coop_ptsz(fn, blocks, 1, 1, 1, 1, 1, 0, NULL, NULL);
    if (strcmp(what, "multi") == 0) {
        CUDA_LAUNCH_PARAMS p = {fn, blocks, 1, 1, 1, 1, 1, 0, NULL, NULL};

        return api.launch_multi(&p, 1, 0);
    }
    if (strcmp(what, "launch") == 0)
        return api.launch_old(fn);
    if (strcmp(what, "grid") == 0)
        return api.launch_grid(fn, (int)blocks, 1);
    if (strcmp(what, "gridasync") == 0)
        return api.launch_grid_async(fn, (int)blocks, 1, NULL);
    return CUDA_ERROR_INVALID_VALUE;
}

static bool other_launch(const char *what)
{
    static const char *const names[] = {"coop",   "coop_ptsz", "multi",
                                        "launch", "grid",      "gridasync"};

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strcmp(what, names[i]) == 0)
            return true;
    return false;
}

/* "multi2": kernel name over blocks blocks (one thread each), launched at
 * once on the devices of the last two contexts made, through
 * cuLaunchCooperativeKernelMultiDevice; a function and a stream of each
 * context, as the driver requires. The newest context is current after. */
static CUresult launch_multi_two(const char *name, unsigned blocks)
{
    static const char image[] = "mock module";
    CUDA_LAUNCH_PARAMS p[2];
    CUresult r = nctx >= 2 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;

    memset(p, 0, sizeof(p));
    for (int i = 0; i < 2 && r == CUDA_SUCCESS; i++) {
        CUmodule mod = NULL;

        p[i] = (CUDA_LAUNCH_PARAMS){NULL, blocks, 1, 1, 1, 1, 1, 0, NULL, NULL};
        r = api.ctx_set_current(ctxs[nctx - 2 + i].ctx);
        if (r == CUDA_SUCCESS)
            r = api.module_load(&mod, image);
        if (r == CUDA_SUCCESS)
            r = api.module_get_function(&p[i].function, mod, name);
        if (r == CUDA_SUCCESS)
            r = api.stream_create(&p[i].hStream, 0);
    }
    if (r == CUDA_SUCCESS)
        r = api.launch_multi(p, 2, 0);
    for (int i = 0; i < 2 && r == CUDA_SUCCESS; i++) {
        r = api.ctx_set_current(ctxs[nctx - 2 + i].ctx);
        if (r == CUDA_SUCCESS)
            r = api.stream_synchronize(p[i].hStream);
    }
    if (nctx > 0)
        (void)api.ctx_set_current(ctxs[nctx - 1].ctx); /* as before, whatever failed */
    return r;
}

/* The launch loop of "spin", in a thread of its own. */
static struct {
    pthread_t tid;
    bool running;
    atomic_bool stop;
    char what[24];
    CUfunction fn;
    unsigned blocks;
    CUcontext ctx;
    long rounds;
    CUresult first;
} spin;

static void *spin_thread(void *arg)
{
    CUresult r = api.ctx_set_current(spin.ctx);

    (void)arg;
    while (r == CUDA_SUCCESS && !atomic_load(&spin.stop)) {
        if (strcmp(spin.what, "graph") == 0 || strcmp(spin.what, "graph_ptsz") == 0) {
            r = graph_launch(NULL, strcmp(spin.what, "graph_ptsz") == 0);
        } else if (strcmp(spin.what, "kernel") != 0 && strcmp(spin.what, "mixed") != 0) {
            r = launch_other(spin.what, spin.fn, spin.blocks);
        } else {
            r = api.launch_kernel(spin.fn, spin.blocks, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
            if (r == CUDA_SUCCESS && strcmp(spin.what, "mixed") == 0) {
                CUdeviceptr p = 0;

                r = api.mem_alloc(&p, 2u << 20);
                if (r == CUDA_SUCCESS)
                    r = api.mem_free(p);
            }
        }
        if (r == CUDA_SUCCESS && ++spin.rounds % 64 == 0)
            r = api.stream_synchronize(NULL);
    }
    spin.first = r;
    return NULL;
}

static CUresult spin_start(const char *what, const char *name, unsigned blocks)
{
    CUresult r = CUDA_SUCCESS;

    if (spin.running || nctx == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    memset(&spin, 0, sizeof(spin));
    snprintf(spin.what, sizeof(spin.what), "%s", what);
    spin.blocks = blocks;
    spin.ctx = ctxs[nctx - 1].ctx;
    if (strncmp(what, "graph", 5) == 0) {
        if (exec == NULL)
            r = instantiate();
    } else if (strcmp(what, "kernel") == 0 || strcmp(what, "mixed") == 0) {
        r = kernel_fn(name, &spin.fn);
    } else if (other_launch(what)) {
        r = kernel_fn(name, &spin.fn);
        if (r == CUDA_SUCCESS)
            r = api.func_set_block_shape(spin.fn, 1, 1, 1);
    } else {
        r = CUDA_ERROR_INVALID_VALUE;
    }
    if (r != CUDA_SUCCESS)
        return r;
    if (pthread_create(&spin.tid, NULL, spin_thread, NULL) != 0)
        return CUDA_ERROR_UNKNOWN;
    spin.running = true;
    return CUDA_SUCCESS;
}

static void spin_stop(void)
{
    if (!spin.running) {
        printf("stop -1 -1\n");
        return;
    }
    atomic_store(&spin.stop, true);
    pthread_join(spin.tid, NULL);
    spin.running = false;
    printf("stop %ld %d\n", spin.rounds, spin.first);
}

static void sym(const char *name)
{
    void *self = dlopen(getenv("EGPU_PROBE_INTERPOSER") ? getenv("EGPU_PROBE_INTERPOSER")
                                                        : "libegpu-vcuda.so",
                        RTLD_NOW | RTLD_NOLOAD);
    char a[256], b[256], c[256];

    where(dlsym(RTLD_DEFAULT, name), a, sizeof(a));
    where(cuda_handle ? dlsym(cuda_handle, name) : NULL, b, sizeof(b));
    where(self ? dlsym(self, name) : NULL, c, sizeof(c));
    printf("sym %s %s %s %s\n", name, a, b, c);
}

static void procaddr(const char *name, int version, unsigned long long flags)
{
    __typeof__(cuGetProcAddress_v2) *gpa =
        (__typeof__(cuGetProcAddress_v2) *)dlsym(cuda_handle, "cuGetProcAddress_v2");
    CUdriverProcAddressQueryResult st = -1;
    void *fn = NULL;
    char w[256];
    CUresult r = gpa ? gpa(name, &fn, version, flags, &st) : CUDA_ERROR_NOT_FOUND;

    where(fn, w, sizeof(w));
    printf("procaddr %d %d %s\n", r, st, w);
}

#define THREADS_MAX 16

struct thread_job {
    CUcontext ctx;
    size_t bytes;
    CUdeviceptr ptrs[512];
    int count;
};

static void *thread_fill(void *arg)
{
    struct thread_job *j = arg;

    if (api.ctx_set_current(j->ctx) != CUDA_SUCCESS)
        return NULL;
    while (j->count < (int)(sizeof(j->ptrs) / sizeof(j->ptrs[0])) &&
           api.mem_alloc(&j->ptrs[j->count], j->bytes) == CUDA_SUCCESS)
        j->count++;
    return NULL;
}

static void threads_fill(int n, size_t bytes)
{
    static struct thread_job jobs[THREADS_MAX];
    pthread_t tids[THREADS_MAX];
    int total = 0, bad = 0;

    if (n < 1 || n > THREADS_MAX || nctx == 0) {
        printf("threads -1 -1\n");
        return;
    }
    for (int i = 0; i < n; i++) {
        memset(&jobs[i], 0, sizeof(jobs[i]));
        jobs[i].ctx = ctxs[nctx - 1].ctx;
        jobs[i].bytes = bytes;
        if (pthread_create(&tids[i], NULL, thread_fill, &jobs[i]) != 0)
            n = i;
    }
    for (int i = 0; i < n; i++)
        pthread_join(tids[i], NULL);
    for (int i = 0; i < n; i++) {
        total += jobs[i].count;
        for (int k = 0; k < jobs[i].count; k++)
            bad += api.mem_free(jobs[i].ptrs[k]) != CUDA_SUCCESS;
    }
    printf("threads %d %d\n", total, bad);
}

static void child_run(const char *path, size_t bytes)
{
    size_t f = 0, t = 0, pitch;
    CUresult r;
    int id = -1;

    memset(live, 0, sizeof(live));
    nctx = 0;
    pool = NULL;
    r = api.init(0);
    printf("child init %d\n", r);
    r = make_ctx(0, "primary");
    printf("child ctx %d\n", r);
    r = alloc_path(path, bytes, &id, &pitch);
    printf("child alloc %d\n", r);
    r = api.mem_get_info(&f, &t);
    printf("child meminfo %d %zu %zu\n", r, f, t);
    fflush(stdout);
}

static void run(FILE *in)
{
    char line[512];

    while (fgets(line, sizeof(line), in) != NULL) {
        char cmd[32] = "", a1[128] = "", a2[128] = "", a3[64] = "";
        int n = sscanf(line, "%31s %127s %127s %63s", cmd, a1, a2, a3);

        if (n <= 0)
            continue;
        if (strcmp(cmd, "quit") == 0) {
            break;
        } else if (strcmp(cmd, "init") == 0) {
            printf("init %d\n", api.init(0));
        } else if (strcmp(cmd, "ctx") == 0) {
            printf("ctx %d\n", make_ctx((int)strtol(a1, NULL, 10), a2));
        } else if (strcmp(cmd, "setctx") == 0 || strcmp(cmd, "push") == 0 ||
                   strcmp(cmd, "pop") == 0) {
            printf("%s %d\n", cmd, switch_ctx(cmd, a1));
        } else if (strcmp(cmd, "calls") == 0) {
            mock_calls();
        } else if (strcmp(cmd, "ctxdestroy") == 0) {
            printf("ctxdestroy %d\n", destroy_ctx());
        } else if (strcmp(cmd, "alloc") == 0) {
            size_t pitch = 0;
            int id = -1;
            CUresult r = alloc_path(a1, (size_t)strtoull(a2, NULL, 10), &id, &pitch);

            printf("alloc %d %d %zu\n", r, id, pitch);
        } else if (strcmp(cmd, "free") == 0) {
            printf("free %d\n", free_id((int)strtol(a1, NULL, 10)));
        } else if (strcmp(cmd, "fill") == 0) {
            size_t bytes = (size_t)strtoull(a2, NULL, 10), pitch;
            CUresult r = CUDA_SUCCESS;
            int count = 0, id;

            while (count < MAX_LIVE && (r = alloc_path(a1, bytes, &id, &pitch)) == CUDA_SUCCESS)
                count++;
            printf("fill %d %d\n", count, r);
        } else if (strcmp(cmd, "freeall") == 0) {
            CUresult first = CUDA_SUCCESS;
            int count = 0;

            for (int i = 0; i < MAX_LIVE; i++) {
                CUresult r;

                if (!live[i].used)
                    continue;
                r = free_id(i);
                if (r == CUDA_SUCCESS)
                    count++;
                else if (first == CUDA_SUCCESS)
                    first = r;
            }
            printf("freeall %d %d\n", count, first);
        } else if (strcmp(cmd, "meminfo") == 0) {
            size_t f = 0, t = 0;
            CUresult r = api.mem_get_info(&f, &t);

            printf("meminfo %d %zu %zu\n", r, f, t);
        } else if (strcmp(cmd, "totalmem") == 0) {
            size_t t = 0;
            CUresult r = api.device_total_mem(&t, (CUdevice)strtol(a1, NULL, 10));

            printf("totalmem %d %zu\n", r, t);
        } else if (strcmp(cmd, "nvml") == 0) {
            nvml_info((int)strtol(a1, NULL, 10));
        } else if (strcmp(cmd, "launch") == 0) {
            printf("launch %d\n", launch_one());
        } else if (strcmp(cmd, "threads") == 0) {
            threads_fill((int)strtol(a1, NULL, 10), (size_t)strtoull(a2, NULL, 10));
        } else if (strcmp(cmd, "fork") == 0) {
            pid_t pid;
            int status = -1;

            fflush(stdout);
            pid = fork();
            if (pid == 0) {
                child_run(a1, (size_t)strtoull(a2, NULL, 10));
                exit(0);
            }
            if (pid > 0)
                waitpid(pid, &status, 0);
            printf("fork %d\n", status);
        } else if (strcmp(cmd, "sym") == 0) {
            sym(a1);
        } else if (strcmp(cmd, "procaddr") == 0) {
            procaddr(a1, (int)strtol(a2, NULL, 10), strtoull(a3, NULL, 10));
        } else if (strcmp(cmd, "rtldnext") == 0) {
            printf("rtldnext %d\n", egpu_next_call());
        } else if (strcmp(cmd, "stream") == 0) {
            CUresult r = nstreams < STREAMS_MAX ? api.stream_create(&streams[nstreams], 0)
                                                : CUDA_ERROR_OUT_OF_MEMORY;

            printf("stream %d %d\n", r, r == CUDA_SUCCESS ? nstreams++ : -1);
        } else if (strcmp(cmd, "launchon") == 0) {
            char a4[32] = "";

            (void)sscanf(line, "%*s %*s %*s %*s %31s", a4);
            launch_on(a1, a2, (unsigned)strtoul(a3, NULL, 10), strtol(a4, NULL, 10));
        } else if (strcmp(cmd, "sync") == 0) {
            printf("sync %d\n", api.stream_synchronize(stream_arg(a1)));
        } else if (strcmp(cmd, "capture") == 0) {
            printf("capture %d\n",
                   api.begin_capture(stream_arg(a1), (CUstreamCaptureMode)strtol(a2, NULL, 10)));
        } else if (strcmp(cmd, "capturing") == 0) {
            CUstreamCaptureStatus st = -1;
            CUresult r = api.is_capturing(stream_arg(a1), &st);

            printf("capturing %d %d\n", r, st);
        } else if (strcmp(cmd, "endcapture") == 0) {
            end_capture(a1);
        } else if (strcmp(cmd, "instantiate") == 0) {
            printf("instantiate %d\n", instantiate());
        } else if (strcmp(cmd, "graphlaunch") == 0) {
            CUresult r = exec != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;

            for (long i = strtol(a2, NULL, 10); i > 0 && r == CUDA_SUCCESS; i--)
                r = graph_launch(stream_arg(a1), strcmp(a3, "ptsz") == 0);
            printf("graphlaunch %d\n", r);
        } else if (strcmp(cmd, "multi2") == 0) {
            printf("multi2 %d\n", launch_multi_two(a1, (unsigned)strtoul(a2, NULL, 10)));
        } else if (strcmp(cmd, "spin") == 0) {
            printf("spin %d\n", spin_start(a1, a2, (unsigned)strtoul(a3, NULL, 10)));
        } else if (strcmp(cmd, "stop") == 0) {
            spin_stop();
        } else {
            printf("unknown %s\n", cmd);
        }
        fflush(stdout);
    }
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"lookup", required_argument, NULL, 'l'},
                                         {"cuda-version", required_argument, NULL, 'v'},
                                         {NULL, 0, NULL, 0}};
    const char *lookup = "direct";
    int c;

    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'l')
            lookup = optarg;
        else if (c == 'v')
            cuda_version = (int)strtol(optarg, NULL, 10);
        else
            return 2;
    }
    cuda_handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (cuda_handle == NULL) {
        fprintf(stderr, "vcuda_probe: dlopen libcuda.so.1: %s\n", dlerror());
        return 1;
    }
    if (strcmp(lookup, "direct") == 0) {
#ifdef PROBE_DIRECT
        load_direct();
#else
        fprintf(stderr, "vcuda_probe: --lookup direct needs vcuda_probe_direct\n");
        return 2;
#endif
    } else if (strcmp(lookup, "dlsym") == 0) {
        if (load_dlsym() != 0)
            return 1;
    } else if (strcmp(lookup, "procaddr") == 0) {
        if (load_procaddr() != 0)
            return 1;
    } else {
        fprintf(stderr, "vcuda_probe: unknown --lookup %s\n", lookup);
        return 2;
    }
    run(stdin);
    return 0;
}
