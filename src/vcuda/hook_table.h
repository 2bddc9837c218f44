/* vcuda/hook_table.h - every symbol libegpu-vcuda.so hooks, in one list.
 *
 * EGPU_VCUDA_HOOKS(X) expands X(lib, name) once per hooked entry point:
 * lib is CUDA (libcuda.so.1) or NVML (libnvidia-ml.so.1); name is the
 * symbol exactly as the library exports it (versioned: cuMemAlloc_v2,
 * cuLaunchKernel_ptsz). From this one list come:
 *   - the wrapper: a function of the same name in memory.c, launch.c or
 *     hooks.c (the prototype from egpu/cuda_abi.h or nvml_abi.h);
 *     cuCtxSetCurrent, cuCtxPushCurrent_v2 and cuCtxPopCurrent_v2 are hooked
 *     only to tell the compute limit that the thread's context changed
 *     (launch.c);
 *   - the slot holding the real entry point (struct egpu__vcuda_real, hooks.h);
 *   - the name -> wrapper table that dlsym and cuGetProcAddress use (hooks.c);
 *   - the linker version script (exports.map.in): the library exports these
 *     names and dlsym, nothing else.
 * tests/integration/test_vcuda.py checks that the exported symbols, this
 * list and what dlsym and cuGetProcAddress_v2 return all agree.
 *
 * Only macros here: the file is also run through the C preprocessor alone.
 *
 * Not hooked, on purpose: cuMemHostAlloc/cuMemFreeHost (pinned host memory,
 * no device memory), cuMemAddressReserve/cuMemMap (address space only; the
 * memory is counted at cuMemCreate), the pre-3.2 unversioned entry points
 * (cuMemAlloc, cuMemGetInfo, ... with 32-bit sizes, unused by any runtime
 * of CUDA 11.3 and later).
 */
#ifndef EGPU_VCUDA_HOOK_TABLE_H
#define EGPU_VCUDA_HOOK_TABLE_H

#define EGPU_VCUDA_HOOKS(X)                       \
    X(CUDA, cuInit)                               \
    X(CUDA, cuGetProcAddress)                     \
    X(CUDA, cuGetProcAddress_v2)                  \
    X(CUDA, cuCtxCreate_v2)                       \
    X(CUDA, cuCtxCreate_v3)                       \
    X(CUDA, cuCtxCreate_v4)                       \
    X(CUDA, cuCtxDestroy_v2)                      \
    X(CUDA, cuDevicePrimaryCtxRetain)             \
    X(CUDA, cuDevicePrimaryCtxRelease_v2)         \
    X(CUDA, cuDevicePrimaryCtxReset_v2)           \
    X(CUDA, cuCtxSetCurrent)                      \
    X(CUDA, cuCtxPushCurrent_v2)                  \
    X(CUDA, cuCtxPopCurrent_v2)                   \
    X(CUDA, cuMemGetInfo_v2)                      \
    X(CUDA, cuDeviceTotalMem_v2)                  \
    X(CUDA, cuMemAlloc_v2)                        \
    X(CUDA, cuMemAllocPitch_v2)                   \
    X(CUDA, cuMemAllocManaged)                    \
    X(CUDA, cuMemFree_v2)                         \
    X(CUDA, cuMemCreate)                          \
    X(CUDA, cuMemRelease)                         \
    X(CUDA, cuMemAllocAsync)                      \
    X(CUDA, cuMemAllocAsync_ptsz)                 \
    X(CUDA, cuMemFreeAsync)                       \
    X(CUDA, cuMemFreeAsync_ptsz)                  \
    X(CUDA, cuMemPoolCreate)                      \
    X(CUDA, cuMemPoolDestroy)                     \
    X(CUDA, cuMemAllocFromPoolAsync)              \
    X(CUDA, cuMemAllocFromPoolAsync_ptsz)         \
    X(CUDA, cuMemPoolTrimTo)                      \
    X(CUDA, cuMemPoolSetAttribute)                \
    X(CUDA, cuArrayCreate_v2)                     \
    X(CUDA, cuArray3DCreate_v2)                   \
    X(CUDA, cuArrayDestroy)                       \
    X(CUDA, cuMipmappedArrayCreate)               \
    X(CUDA, cuMipmappedArrayDestroy)              \
    X(CUDA, cuLaunchKernel)                       \
    X(CUDA, cuLaunchKernel_ptsz)                  \
    X(CUDA, cuLaunchKernelEx)                     \
    X(CUDA, cuLaunchKernelEx_ptsz)                \
    X(CUDA, cuLaunchCooperativeKernel)            \
    X(CUDA, cuLaunchCooperativeKernel_ptsz)       \
    X(CUDA, cuLaunchCooperativeKernelMultiDevice) \
    X(CUDA, cuLaunch)                             \
    X(CUDA, cuLaunchGrid)                         \
    X(CUDA, cuLaunchGridAsync)                    \
    X(CUDA, cuGraphLaunch)                        \
    X(CUDA, cuGraphLaunch_ptsz)                   \
    X(NVML, nvmlDeviceGetMemoryInfo)              \
    X(NVML, nvmlDeviceGetMemoryInfo_v2)

#endif /* EGPU_VCUDA_HOOK_TABLE_H */
