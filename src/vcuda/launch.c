/* vcuda/launch.c - the launch wrappers: kernels (cuLaunchKernel, _ptsz,
 * cuLaunchKernelEx, _ptsz, cuLaunchCooperativeKernel, _ptsz,
 * cuLaunchCooperativeKernelMultiDevice, and the pre-4.0 cuLaunch,
 * cuLaunchGrid and cuLaunchGridAsync) and graphs (cuGraphLaunch, _ptsz).
 *
 * DESIGN: the fast path, taken whenever the compute limit is not
 * throttling, is one relaxed atomic load of egpu__vcuda_throttle_active and
 * one relaxed load of the real entry point, then a tail call: no lock, no
 * allocation, no other call. Otherwise the launch goes through the
 * controller as src/vcuda/throttle.h lays down: the wrapper describes the
 * launch in a struct egpu__vcuda_launch whose launch callback makes the real
 * call with the wrapper's own arguments, and egpu__vcuda_throttle_launch
 * admits it (sleeping while the container is over its share) and calls it
 * exactly once. Every entry point's slow path is the same helper,
 * launch_slow: load the library when the real entry point's slot is still
 * empty, then hand the description to the controller or make the call; an
 * entry point differs only by its description, its slot and its callback.
 * The slow paths are kept out of line so the fast path stays small.
 *
 * A graph launch is one unit of device work to the controller: it is
 * described as fn = the executable graph, blocks = 1, threads = 0, so its
 * cost is learned and charged per executable graph, as a kernel's per
 * function and grid (throttle.c times it with events around the launch,
 * which order with the graph's work on the stream).
 *
 * A cooperative launch is a kernel launch to the controller (the same grid,
 * block and stream arguments). The pre-4.0 launches set their block shape
 * with cuFuncSetBlockShape, which is not hooked: they are described with
 * threads = 0 (the class is the function and grid in the context, and its
 * cost is measured with events like any other), blocks = 1 for cuLaunch and
 * width x height for cuLaunchGrid(Async); cuLaunch and cuLaunchGrid run on
 * the legacy default stream (NULL). cuLaunchCooperativeKernelMultiDevice
 * with one device is that device's cooperative launch; over several devices
 * the controller, which admits and times one launch on one stream of the
 * current context, cannot hold it: while throttling it is refused with
 * CUDA_ERROR_NOT_SUPPORTED (logged once; deprecated since CUDA 11.3, the
 * same work goes through cuLaunchCooperativeKernel per device).
 *
 * The calls that change the calling thread's current context
 * (cuCtxSetCurrent, cuCtxPushCurrent_v2, cuCtxPopCurrent_v2) are wrapped
 * here too, for the launch path alone: the compute limit keys a launch by
 * its context, and asks the driver for it (cuCtxGetCurrent, a driver call)
 * only at a thread's first launch and after such a call
 * (egpu__vcuda_ctx_changed, hooks.c's; memory.c's cuCtxCreate and
 * cuCtxDestroy wrappers call it as well). Each makes the real call, then says so: one
 * thread-local store.
 */
#include <stdint.h>

#include "egpu/log.h"
#include "hooks.h"
#include "throttle.h"

#if defined(__GNUC__)
#define LIKELY(x) __builtin_expect(!!(x), 1)
#define NOINLINE  __attribute__((noinline))
#define INLINE    inline __attribute__((always_inline))
#else
#define LIKELY(x) (x)
#define NOINLINE
#define INLINE inline
#endif

#define THROTTLING() atomic_load_explicit(&egpu__vcuda_throttle_active, memory_order_relaxed)

/* The arguments of a cuLaunchKernel(_ptsz) or cuLaunchCooperativeKernel(_ptsz)
 * call, kept for the callback (extra: NULL for a cooperative launch). real
 * is the entry point launch_slow loaded, of that call's type. */
struct kernel_args {
    void *real;
    CUfunction fn;
    unsigned int grid[3], block[3], shared_bytes;
    CUstream stream;
    void **params, **extra;
};

/* The arguments of a cuLaunchKernelEx(_ptsz) call. */
struct kernel_ex_args {
    void *real;
    const CUlaunchConfig *config;
    CUfunction fn;
    void **params, **extra;
};

/* The arguments of a cuGraphLaunch(_ptsz) call. */
struct graph_args {
    void *real;
    CUgraphExec exec;
    CUstream stream;
};

/* The arguments of a cuLaunchCooperativeKernelMultiDevice call. */
struct multi_args {
    void *real;
    CUDA_LAUNCH_PARAMS *list;
    unsigned int num_devices, flags;
};

/* The arguments of a cuLaunch, cuLaunchGrid or cuLaunchGridAsync call. */
struct legacy_args {
    CUfunction fn;
    int width, height; /* cuLaunchGrid(Async) */
    CUstream stream;   /* cuLaunchGridAsync */
    int which;         /* 0 cuLaunch, 1 cuLaunchGrid, 2 cuLaunchGridAsync */
};

/* The real calls, each with its wrapper's arguments (l->ctx). */
static CUresult call_kernel(const struct egpu__vcuda_launch *l)
{
    const struct kernel_args *a = l->ctx;

    return ((__typeof__(cuLaunchKernel) *)a->real)(a->fn, a->grid[0], a->grid[1], a->grid[2],
                                                   a->block[0], a->block[1], a->block[2],
                                                   a->shared_bytes, a->stream, a->params, a->extra);
}

static CUresult call_coop(const struct egpu__vcuda_launch *l)
{
    const struct kernel_args *a = l->ctx;

    return ((__typeof__(cuLaunchCooperativeKernel) *)a->real)(
        a->fn, a->grid[0], a->grid[1], a->grid[2], a->block[0], a->block[1], a->block[2],
        a->shared_bytes, a->stream, a->params);
}

static CUresult call_kernel_ex(const struct egpu__vcuda_launch *l)
{
    const struct kernel_ex_args *a = l->ctx;

    return ((__typeof__(cuLaunchKernelEx) *)a->real)(a->config, a->fn, a->params, a->extra);
}

static CUresult call_graph(const struct egpu__vcuda_launch *l)
{
    const struct graph_args *a = l->ctx;

    return ((__typeof__(cuGraphLaunch) *)a->real)(a->exec, a->stream);
}

static CUresult call_multi(const struct egpu__vcuda_launch *l)
{
    const struct multi_args *a = l->ctx;

    return ((__typeof__(cuLaunchCooperativeKernelMultiDevice) *)a->real)(a->list, a->num_devices,
                                                                         a->flags);
}

/* The real call of a pre-4.0 launch, which loads its own slot (NULL: not
 * there, CUDA_ERROR_NOT_INITIALIZED). */
static CUresult call_legacy(const struct egpu__vcuda_launch *l)
{
    const struct legacy_args *a = l->ctx;

    switch (a->which) {
    case 0: {
        __typeof__(cuLaunch) *real = EGPU_VCUDA_REAL(cuLaunch);

        return real ? real(a->fn) : CUDA_ERROR_NOT_INITIALIZED;
    }
    case 1: {
        __typeof__(cuLaunchGrid) *real = EGPU_VCUDA_REAL(cuLaunchGrid);

        return real ? real(a->fn, a->width, a->height) : CUDA_ERROR_NOT_INITIALIZED;
    }
    default: {
        __typeof__(cuLaunchGridAsync) *real = EGPU_VCUDA_REAL(cuLaunchGridAsync);

        return real ? real(a->fn, a->width, a->height, a->stream) : CUDA_ERROR_NOT_INITIALIZED;
    }
    }
}

/* What a throttling controller answers for a multi-device launch over
 * several devices, which it cannot hold (logged once). */
static CUresult refuse_multi(const struct egpu__vcuda_launch *l)
{
    const struct multi_args *a = l->ctx;
    static atomic_flag warned = ATOMIC_FLAG_INIT;

    if (!atomic_flag_test_and_set(&warned))
        egpu_log(EGPU_LOG_WARN,
                 "cuLaunchCooperativeKernelMultiDevice over %u devices refused "
                 "(CUDA_ERROR_NOT_SUPPORTED): the compute limit holds one launch on one "
                 "device at a time; launch with cuLaunchCooperativeKernel on each device",
                 a->num_devices);
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* Everything but the fast path, for every launch entry point: the library
 * not loaded yet, or throttling. slot is the real entry point's slot in
 * egpu__vcuda_real (the _ptsz one for a per-thread entry point); when it is
 * empty the library is loaded first, and when it stays empty the launch
 * gets CUDA_ERROR_NOT_INITIALIZED without being made. What it held is
 * stored in *real, where l->launch finds it. slot NULL: the entry point's
 * call loads its own (the pre-4.0 launches, call_legacy), and only the
 * library is loaded here. Then, while throttling, held(l) answers:
 * egpu__vcuda_throttle_launch (admit l, then make it), hold_ex or
 * hold_multi (the same, once they read what describes the launch),
 * l->launch (made at once: nothing to describe it by) or refuse_multi;
 * otherwise l->launch(l) makes the call. Returns what that returned. Inlined into each slow path,
 * so that held and l->launch are direct calls there. */
static INLINE CUresult launch_slow(void **slot, void **real, const struct egpu__vcuda_launch *l,
                                   CUresult (*held)(const struct egpu__vcuda_launch *l))
{
    if (slot == NULL || (*real = __atomic_load_n(slot, __ATOMIC_RELAXED)) == NULL) {
        if (!egpu__vcuda_cuda())
            return CUDA_ERROR_NOT_INITIALIZED;
        if (slot != NULL && (*real = __atomic_load_n(slot, __ATOMIC_RELAXED)) == NULL)
            return CUDA_ERROR_NOT_INITIALIZED;
    }
    if (THROTTLING())
        return held(l);
    return l->launch(l);
}

/* A kernel or cooperative launch, through the slot of the entry point
 * taken (per_thread: its _ptsz form) and its call. */
static CUresult kernel_launch(struct kernel_args *a, void **slot,
                              CUresult (*call)(const struct egpu__vcuda_launch *l), bool per_thread)
{
    struct egpu__vcuda_launch l = {
        .blocks = (uint64_t)a->grid[0] * a->grid[1] * a->grid[2],
        .threads = (uint64_t)a->block[0] * a->block[1] * a->block[2],
        .fn = a->fn,
        .stream = a->stream,
        .launch = call,
        .ctx = a,
        .per_thread = per_thread,
    };

    return launch_slow(slot, &a->real, &l, egpu__vcuda_throttle_launch);
}

/* While throttling, a cuLaunchKernelEx(_ptsz) with a config: described by
 * it (read only now, as the driver would read it), then held. */
static CUresult hold_ex(const struct egpu__vcuda_launch *l)
{
    const CUlaunchConfig *c = ((const struct kernel_ex_args *)l->ctx)->config;
    struct egpu__vcuda_launch d = *l;

    d.blocks = (uint64_t)c->gridDimX * c->gridDimY * c->gridDimZ;
    d.threads = (uint64_t)c->blockDimX * c->blockDimY * c->blockDimZ;
    d.stream = c->hStream;
    return egpu__vcuda_throttle_launch(&d);
}

/* A cuLaunchKernelEx(_ptsz): held as its config describes it (none: made at
 * once). */
static CUresult kernel_ex_launch(struct kernel_ex_args *a, bool per_thread)
{
    struct egpu__vcuda_launch l = {
        .fn = a->fn,
        .launch = call_kernel_ex,
        .ctx = a,
        .per_thread = per_thread,
    };

    return launch_slow(per_thread ? &egpu__vcuda_real.cuLaunchKernelEx_ptsz
                                  : &egpu__vcuda_real.cuLaunchKernelEx,
                       &a->real, &l, a->config != NULL ? hold_ex : call_kernel_ex);
}

/* A graph launch: one unit of device work, charged per executable graph. */
static NOINLINE CUresult graph_slow(CUgraphExec exec, CUstream stream, bool per_thread)
{
    struct graph_args a = {NULL, exec, stream};
    struct egpu__vcuda_launch l = {
        .blocks = 1,
        .threads = 0,
        .fn = (CUfunction)(void *)exec,
        .stream = stream,
        .launch = call_graph,
        .ctx = &a,
        .per_thread = per_thread,
    };

    return launch_slow(per_thread ? &egpu__vcuda_real.cuGraphLaunch_ptsz
                                  : &egpu__vcuda_real.cuGraphLaunch,
                       &a.real, &l, egpu__vcuda_throttle_launch);
}

/* While throttling, a multi-device launch over one device: that device's
 * cooperative launch, described by its parameters (read only now), held. */
static CUresult hold_multi(const struct egpu__vcuda_launch *l)
{
    const CUDA_LAUNCH_PARAMS *p = &((const struct multi_args *)l->ctx)->list[0];
    struct egpu__vcuda_launch d = *l;

    d.blocks = (uint64_t)p->gridDimX * p->gridDimY * p->gridDimZ;
    d.threads = (uint64_t)p->blockDimX * p->blockDimY * p->blockDimZ;
    d.fn = p->function;
    d.stream = p->hStream;
    return egpu__vcuda_throttle_launch(&d);
}

/* A multi-device cooperative launch: over one device held as that device's
 * cooperative launch; over several, refused while throttling; without a
 * list or devices, made at once. */
static NOINLINE CUresult multi_slow(CUDA_LAUNCH_PARAMS *list, unsigned int num_devices,
                                    unsigned int flags)
{
    struct multi_args a = {NULL, list, num_devices, flags};
    struct egpu__vcuda_launch l = {.launch = call_multi, .ctx = &a};
    CUresult (*held)(const struct egpu__vcuda_launch *) = call_multi;

    if (list != NULL && num_devices == 1)
        held = hold_multi;
    else if (list != NULL && num_devices > 1)
        held = refuse_multi;
    return launch_slow(&egpu__vcuda_real.cuLaunchCooperativeKernelMultiDevice, &a.real, &l, held);
}

/* A pre-4.0 launch: grid 1 x 1 (cuLaunch) or width x height, block shape
 * unknown (cuFuncSetBlockShape's, not seen here). */
static NOINLINE CUresult legacy_slow(struct legacy_args *a)
{
    uint64_t w = a->which == 0 ? 1 : (uint64_t)(a->width > 0 ? a->width : 0);
    uint64_t h = a->which == 0 ? 1 : (uint64_t)(a->height > 0 ? a->height : 0);
    struct egpu__vcuda_launch l = {
        .blocks = w * h,
        .threads = 0,
        .fn = a->fn,
        .stream = a->stream,
        .launch = call_legacy,
        .ctx = a,
    };

    return launch_slow(NULL, NULL, &l, egpu__vcuda_throttle_launch);
}

/* The out-of-line halves of the wrappers below: the same arguments, so the
 * wrapper reaches them with a plain jump and keeps no frame of its own. */
static NOINLINE CUresult kernel_slow(CUfunction fn, unsigned int grid_x, unsigned int grid_y,
                                     unsigned int grid_z, unsigned int block_x,
                                     unsigned int block_y, unsigned int block_z,
                                     unsigned int shared_bytes, CUstream stream, void **params,
                                     void **extra)
{
    struct kernel_args a = {
        NULL,   fn,   {grid_x, grid_y, grid_z}, {block_x, block_y, block_z}, shared_bytes, stream,
        params, extra};

    return kernel_launch(&a, &egpu__vcuda_real.cuLaunchKernel, call_kernel, false);
}

static NOINLINE CUresult kernel_ptsz_slow(CUfunction fn, unsigned int grid_x, unsigned int grid_y,
                                          unsigned int grid_z, unsigned int block_x,
                                          unsigned int block_y, unsigned int block_z,
                                          unsigned int shared_bytes, CUstream stream, void **params,
                                          void **extra)
{
    struct kernel_args a = {
        NULL,   fn,   {grid_x, grid_y, grid_z}, {block_x, block_y, block_z}, shared_bytes, stream,
        params, extra};

    return kernel_launch(&a, &egpu__vcuda_real.cuLaunchKernel_ptsz, call_kernel, true);
}

static NOINLINE CUresult kernel_ex_slow(const CUlaunchConfig *config, CUfunction fn, void **params,
                                        void **extra)
{
    struct kernel_ex_args a = {NULL, config, fn, params, extra};

    return kernel_ex_launch(&a, false);
}

static NOINLINE CUresult kernel_ex_ptsz_slow(const CUlaunchConfig *config, CUfunction fn,
                                             void **params, void **extra)
{
    struct kernel_ex_args a = {NULL, config, fn, params, extra};

    return kernel_ex_launch(&a, true);
}

static NOINLINE CUresult coop_slow(CUfunction fn, unsigned int grid_x, unsigned int grid_y,
                                   unsigned int grid_z, unsigned int block_x, unsigned int block_y,
                                   unsigned int block_z, unsigned int shared_bytes, CUstream stream,
                                   void **params)
{
    struct kernel_args a = {
        NULL,   fn,  {grid_x, grid_y, grid_z}, {block_x, block_y, block_z}, shared_bytes, stream,
        params, NULL};

    return kernel_launch(&a, &egpu__vcuda_real.cuLaunchCooperativeKernel, call_coop, false);
}

static NOINLINE CUresult coop_ptsz_slow(CUfunction fn, unsigned int grid_x, unsigned int grid_y,
                                        unsigned int grid_z, unsigned int block_x,
                                        unsigned int block_y, unsigned int block_z,
                                        unsigned int shared_bytes, CUstream stream, void **params)
{
    struct kernel_args a = {
        NULL,   fn,  {grid_x, grid_y, grid_z}, {block_x, block_y, block_z}, shared_bytes, stream,
        params, NULL};

    return kernel_launch(&a, &egpu__vcuda_real.cuLaunchCooperativeKernel_ptsz, call_coop, true);
}

EGPU_VCUDA_EXPORT CUresult cuLaunchKernel(CUfunction fn, unsigned int grid_x, unsigned int grid_y,
                                          unsigned int grid_z, unsigned int block_x,
                                          unsigned int block_y, unsigned int block_z,
                                          unsigned int shared_bytes, CUstream stream, void **params,
                                          void **extra)
{
    __typeof__(cuLaunchKernel) *real = EGPU_VCUDA_REAL(cuLaunchKernel);

    if (LIKELY(!THROTTLING() && real != NULL))
        return real(fn, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes, stream,
                    params, extra);
    return kernel_slow(fn, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes, stream,
                       params, extra);
}

EGPU_VCUDA_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction fn, unsigned int grid_x,
                                               unsigned int grid_y, unsigned int grid_z,
                                               unsigned int block_x, unsigned int block_y,
                                               unsigned int block_z, unsigned int shared_bytes,
                                               CUstream stream, void **params, void **extra)
{
    __typeof__(cuLaunchKernel_ptsz) *real = EGPU_VCUDA_REAL(cuLaunchKernel_ptsz);

    if (LIKELY(!THROTTLING() && real != NULL))
        return real(fn, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes, stream,
                    params, extra);
    return kernel_ptsz_slow(fn, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes,
                            stream, params, extra);
}

EGPU_VCUDA_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction fn,
                                            void **params, void **extra)
{
    __typeof__(cuLaunchKernelEx) *real = EGPU_VCUDA_REAL(cuLaunchKernelEx);

    if (LIKELY(!THROTTLING() && real != NULL))
        return real(config, fn, params, extra);
    return kernel_ex_slow(config, fn, params, extra);
}

EGPU_VCUDA_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction fn,
                                                 void **params, void **extra)
{
    __typeof__(cuLaunchKernelEx_ptsz) *real = EGPU_VCUDA_REAL(cuLaunchKernelEx_ptsz);

    if (LIKELY(!THROTTLING() && real != NULL))
        return real(config, fn, params, extra);
    return kernel_ex_ptsz_slow(config, fn, params, extra);
}

EGPU_VCUDA_EXPORT CUresult cuGraphLaunch(CUgraphExec exec, CUstream stream)
{
    __typeof__(cuGraphLaunch) *real = EGPU_VCUDA_REAL(cuGraphLaunch);

    if (LIKELY(!THROTTLING() && real != NULL))
        return real(exec, stream);
    return graph_slow(exec, stream, false);
}

EGPU_VCUDA_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream stream)
{
    __typeof__(cuGraphLaunch_ptsz) *real = EGPU_VCUDA_REAL(cuGraphLaunch_ptsz);

    if (LIKELY(!THROTTLING() && real != NULL))
        return real(exec, stream);
    return graph_slow(exec, stream, true);
}

EGPU_VCUDA_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction fn, unsigned int grid_x,
                                                     unsigned int grid_y, unsigned int grid_z,
                                                     unsigned int block_x, unsigned int block_y,
                                                     unsigned int block_z,
                                                     unsigned int shared_bytes, CUstream stream,
                                                     void **params)
{
    __typeof__(cuLaunchCooperativeKernel) *real = EGPU_VCUDA_REAL(cuLaunchCooperativeKernel);

    if (LIKELY(!THROTTLING() && real != NULL))
        return real(fn, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes, stream,
                    params);
    return coop_slow(fn, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes, stream,
                     params);
}

EGPU_VCUDA_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(
    CUfunction fn, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z,
    unsigned int block_x, unsigned int block_y, unsigned int block_z, unsigned int shared_bytes,
    CUstream stream, void **params)
{
    __typeof__(cuLaunchCooperativeKernel_ptsz) *real =
        EGPU_VCUDA_REAL(cuLaunchCooperativeKernel_ptsz);

    if (LIKELY(!THROTTLING() && real != NULL))
        return real(fn, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes, stream,
                    params);
    return coop_ptsz_slow(fn, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes,
                          stream, params);
}

EGPU_VCUDA_EXPORT CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *list,
                                                                unsigned int num_devices,
                                                                unsigned int flags)
{
    __typeof__(cuLaunchCooperativeKernelMultiDevice) *real =
        EGPU_VCUDA_REAL(cuLaunchCooperativeKernelMultiDevice);

    if (LIKELY(!THROTTLING() && real != NULL))
        return real(list, num_devices, flags);
    return multi_slow(list, num_devices, flags);
}

EGPU_VCUDA_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx)
{
    if (!egpu__vcuda_cuda() || EGPU_VCUDA_REAL(cuCtxSetCurrent) == NULL)
        return CUDA_ERROR_NOT_INITIALIZED;
    return egpu__vcuda_ctx_changed(EGPU_VCUDA_REAL(cuCtxSetCurrent)(ctx));
}

EGPU_VCUDA_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    if (!egpu__vcuda_cuda() || EGPU_VCUDA_REAL(cuCtxPushCurrent_v2) == NULL)
        return CUDA_ERROR_NOT_INITIALIZED;
    return egpu__vcuda_ctx_changed(EGPU_VCUDA_REAL(cuCtxPushCurrent_v2)(ctx));
}

EGPU_VCUDA_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *ctx)
{
    if (!egpu__vcuda_cuda() || EGPU_VCUDA_REAL(cuCtxPopCurrent_v2) == NULL)
        return CUDA_ERROR_NOT_INITIALIZED;
    return egpu__vcuda_ctx_changed(EGPU_VCUDA_REAL(cuCtxPopCurrent_v2)(ctx));
}

EGPU_VCUDA_EXPORT CUresult cuLaunch(CUfunction fn)
{
    __typeof__(cuLaunch) *real = EGPU_VCUDA_REAL(cuLaunch);
    struct legacy_args a = {fn, 1, 1, NULL, 0};

    if (LIKELY(!THROTTLING() && real != NULL))
        return real(fn);
    return legacy_slow(&a);
}

EGPU_VCUDA_EXPORT CUresult cuLaunchGrid(CUfunction fn, int grid_width, int grid_height)
{
    __typeof__(cuLaunchGrid) *real = EGPU_VCUDA_REAL(cuLaunchGrid);
    struct legacy_args a = {fn, grid_width, grid_height, NULL, 1};

    if (LIKELY(!THROTTLING() && real != NULL))
        return real(fn, grid_width, grid_height);
    return legacy_slow(&a);
}

EGPU_VCUDA_EXPORT CUresult cuLaunchGridAsync(CUfunction fn, int grid_width, int grid_height,
                                             CUstream stream)
{
    __typeof__(cuLaunchGridAsync) *real = EGPU_VCUDA_REAL(cuLaunchGridAsync);
    struct legacy_args a = {fn, grid_width, grid_height, stream, 2};

    if (LIKELY(!THROTTLING() && real != NULL))
        return real(fn, grid_width, grid_height, stream);
    return legacy_slow(&a);
}
