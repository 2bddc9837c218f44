/* bench/vcuda/bench_driver.h - the CUDA driver as the interposer benchmarks
 * use it: libcuda.so.1 loaded with dlopen (the mock driver, found through
 * LD_LIBRARY_PATH) and its entry points looked up with dlsym, the way CUDA
 * runtimes find them. When libegpu-vcuda.so is preloaded, its dlsym wrapper
 * returns the interposer's wrappers for the hooked names, so the same
 * program measures the mock alone or the mock behind the interposer.
 *
 * Types and values: include/egpu/cuda_abi.h (CUDA driver API).
 */
#ifndef EGPU_BENCH_DRIVER_H
#define EGPU_BENCH_DRIVER_H

#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "egpu/cuda_abi.h"

struct bench_driver {
    void *lib;
    CUresult (*init)(unsigned int flags);
    CUresult (*device_get)(CUdevice *dev, int ordinal);
    CUresult (*retain)(CUcontext *ctx, CUdevice dev);
    CUresult (*set_current)(CUcontext ctx);
    CUresult (*get_current)(CUcontext *ctx);
    CUresult (*get_device)(CUdevice *dev);
    CUresult (*module_load)(CUmodule *mod, const void *image);
    CUresult (*get_function)(CUfunction *fn, CUmodule mod, const char *name);
    CUresult (*stream_create)(CUstream *stream, unsigned int flags);
    CUresult (*stream_sync)(CUstream stream);
    CUresult (*launch)(CUfunction fn, unsigned int gx, unsigned int gy, unsigned int gz,
                       unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
                       CUstream stream, void **params, void **extra);
    CUresult (*mem_alloc)(CUdeviceptr *p, size_t bytes);
    CUresult (*mem_free)(CUdeviceptr p);
    CUresult (*event_create)(CUevent *e, unsigned int flags);
    CUresult (*event_record)(CUevent e, CUstream stream);
    CUresult (*event_query)(CUevent e);
    CUresult (*event_elapsed)(float *ms, CUevent a, CUevent b);
    CUresult (*event_destroy)(CUevent e);
    CUcontext ctx;
    CUfunction fn;
    CUstream stream;
};

static inline uint64_t bench_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void bench_sleep_until(uint64_t t_ns)
{
    struct timespec ts = {.tv_sec = (time_t)(t_ns / 1000000000ull),
                          .tv_nsec = (long)(t_ns % 1000000000ull)};

    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0)
        ;
}

/* Load libcuda.so.1, resolve what the benchmarks call, and set up device 0:
 * its primary context made current, a module, the kernel "spin" and a
 * stream. Returns 0, or -1 with the reason in err (errlen bytes). */
static inline int bench_driver_open(struct bench_driver *d, char *err, size_t errlen)
{
    const struct {
        void **slot;
        const char *name;
    } syms[] = {
        {(void **)&d->init, "cuInit"},
        {(void **)&d->device_get, "cuDeviceGet"},
        {(void **)&d->retain, "cuDevicePrimaryCtxRetain"},
        {(void **)&d->set_current, "cuCtxSetCurrent"},
        {(void **)&d->get_current, "cuCtxGetCurrent"},
        {(void **)&d->get_device, "cuCtxGetDevice"},
        {(void **)&d->module_load, "cuModuleLoadData"},
        {(void **)&d->get_function, "cuModuleGetFunction"},
        {(void **)&d->stream_create, "cuStreamCreate"},
        {(void **)&d->stream_sync, "cuStreamSynchronize"},
        {(void **)&d->launch, "cuLaunchKernel"},
        {(void **)&d->mem_alloc, "cuMemAlloc_v2"},
        {(void **)&d->mem_free, "cuMemFree_v2"},
        {(void **)&d->event_create, "cuEventCreate"},
        {(void **)&d->event_record, "cuEventRecord"},
        {(void **)&d->event_query, "cuEventQuery"},
        {(void **)&d->event_elapsed, "cuEventElapsedTime"},
        {(void **)&d->event_destroy, "cuEventDestroy_v2"},
    };
    CUdevice dev;
    CUmodule mod;
    CUresult rc;

    memset(d, 0, sizeof(*d));
    d->lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (d->lib == NULL) {
        snprintf(err, errlen, "dlopen libcuda.so.1: %s", dlerror());
        return -1;
    }
    for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
        *syms[i].slot = dlsym(d->lib, syms[i].name);
        if (*syms[i].slot == NULL) {
            snprintf(err, errlen, "libcuda.so.1 has no %s", syms[i].name);
            return -1;
        }
    }
    if ((rc = d->init(0)) != CUDA_SUCCESS || (rc = d->device_get(&dev, 0)) != CUDA_SUCCESS ||
        (rc = d->retain(&d->ctx, dev)) != CUDA_SUCCESS ||
        (rc = d->set_current(d->ctx)) != CUDA_SUCCESS ||
        (rc = d->module_load(&mod, "bench")) != CUDA_SUCCESS ||
        (rc = d->get_function(&d->fn, mod, "spin")) != CUDA_SUCCESS ||
        (rc = d->stream_create(&d->stream, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS) {
        snprintf(err, errlen, "setting up device 0: CUresult %d", rc);
        return -1;
    }
    return 0;
}

/* True when the launch entry point the program got is the interposer's. */
static inline bool bench_driver_interposed(const struct bench_driver *d)
{
    Dl_info info;

    return dladdr(*(void **)&d->launch, &info) != 0 && info.dli_fname != NULL &&
           strstr(info.dli_fname, "libegpu-vcuda") != NULL;
}

#endif /* EGPU_BENCH_DRIVER_H */
