/* egpu/cuda_abi.h - the subset of the CUDA driver API ABI that the
 * interposer (src/vcuda), the mock driver (tests/mock) and the real-GPU
 * programs (bench/gpu) use, so that none of them needs the CUDA toolkit.
 *
 * Source: the CUDA driver API reference and cuda.h of CUDA 12/13 (types,
 * enumerator values, struct layouts and the exported, versioned symbol
 * names). Only facts of the ABI are restated here: an int-sized CUresult,
 * 64-bit CUdeviceptr, opaque handle pointers, and the struct layouts below
 * exactly as the driver reads them.
 *
 * Versioned names: cuda.h maps an API name to the symbol the driver exports
 * (cuMemAlloc -> cuMemAlloc_v2; cuCtxCreate -> cuCtxCreate_v4 in CUDA 13's
 * header). The prototypes below use the exported names. cuGetProcAddress
 * takes the unversioned name plus the caller's CUDA version (1000 * major +
 * 10 * minor) and returns the variant that version was built against: for
 * cuCtxCreate, _v2 from 3020, _v3 from 11040 and _v4 from 12050 (the
 * PFN_*_v<version> names of cudaTypedefs.h).
 */
#ifndef EGPU_CUDA_ABI_H
#define EGPU_CUDA_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef uint64_t cuuint64_t;
typedef unsigned long long CUmemGenericAllocationHandle;

typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUarray_st *CUarray;
typedef struct CUmipmappedArray_st *CUmipmappedArray;
typedef struct CUmemPoolHandle_st *CUmemoryPool;
typedef struct CUgraph_st *CUgraph;         /* CUDA 10.0+ */
typedef struct CUgraphNode_st *CUgraphNode; /* CUDA 10.0+ */
typedef struct CUgraphExec_st *CUgraphExec; /* CUDA 10.0+ */

typedef struct CUuuid_st {
    char bytes[16];
} CUuuid;

/* CUresult values. */
#define CUDA_SUCCESS               0
#define CUDA_ERROR_INVALID_VALUE   1
#define CUDA_ERROR_OUT_OF_MEMORY   2
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CUDA_ERROR_DEINITIALIZED   4
#define CUDA_ERROR_NO_DEVICE       100
#define CUDA_ERROR_INVALID_DEVICE  101
#define CUDA_ERROR_INVALID_IMAGE   200
#define CUDA_ERROR_INVALID_CONTEXT 201
#define CUDA_ERROR_INVALID_HANDLE  400
#define CUDA_ERROR_ILLEGAL_STATE   401
#define CUDA_ERROR_NOT_FOUND       500
#define CUDA_ERROR_NOT_READY       600
#define CUDA_ERROR_ILLEGAL_ADDRESS 700
#define CUDA_ERROR_NOT_PERMITTED   800
#define CUDA_ERROR_NOT_SUPPORTED   801
#define CUDA_ERROR_UNKNOWN         999

/* The launch did not occur for lack of resources. */
#define CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES 701

/* CUresult values of stream capture (CUDA 10.0+). */
#define CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED  900 /* not permitted while capturing */
#define CUDA_ERROR_STREAM_CAPTURE_INVALIDATED  901 /* the capture was invalidated before */
#define CUDA_ERROR_STREAM_CAPTURE_IMPLICIT     906 /* legacy stream vs. a capture */
#define CUDA_ERROR_CAPTURED_EVENT              907 /* event last recorded in a capture */
#define CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD 908 /* ended by another thread */

/* CUdevice_attribute values. */
#define CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK    1
#define CU_DEVICE_ATTRIBUTE_CLOCK_RATE               13 /* kHz */
#define CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT     16
#define CU_DEVICE_ATTRIBUTE_PCI_BUS_ID               33
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR 75
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR 76
typedef int CUdevice_attribute;

/* Flags. */
#define CU_MEM_ATTACH_GLOBAL          0x1
#define CU_MEM_ATTACH_HOST            0x2
#define CU_MEMHOSTALLOC_PORTABLE      0x01
#define CU_MEMHOSTALLOC_DEVICEMAP     0x02
#define CU_MEMHOSTALLOC_WRITECOMBINED 0x04
#define CU_STREAM_DEFAULT             0x0
#define CU_STREAM_NON_BLOCKING        0x1
#define CU_EVENT_DEFAULT              0x0
#define CU_EVENT_BLOCKING_SYNC        0x1
#define CU_EVENT_DISABLE_TIMING       0x2
#define CU_EVENT_INTERPROCESS         0x4
#define CU_CTX_SCHED_AUTO             0x0

/* Special stream handles (CUDA 7.0+): the legacy default stream, which
 * waits for the other blocking streams of its context, and the calling
 * thread's per-thread default stream. */
#define CU_STREAM_LEGACY     ((CUstream)0x1)
#define CU_STREAM_PER_THREAD ((CUstream)0x2)

/* Stream capture (CUDA 10.0+; the modes 10.1+): CUstreamCaptureMode, the
 * mode a capture is begun in and a thread's own mode (which potentially
 * unsafe calls, such as cuEventQuery, a thread may make while captures are
 * going on: in GLOBAL, none while any thread captures in GLOBAL mode or this
 * thread captures in a mode other than RELAXED; in THREAD_LOCAL, none while
 * this thread does; in RELAXED, any), and CUstreamCaptureStatus, what
 * cuStreamIsCapturing reports. Both are int-sized enums. */
typedef int CUstreamCaptureMode;
#define CU_STREAM_CAPTURE_MODE_GLOBAL       0
#define CU_STREAM_CAPTURE_MODE_THREAD_LOCAL 1
#define CU_STREAM_CAPTURE_MODE_RELAXED      2
typedef int CUstreamCaptureStatus;
#define CU_STREAM_CAPTURE_STATUS_NONE        0
#define CU_STREAM_CAPTURE_STATUS_ACTIVE      1
#define CU_STREAM_CAPTURE_STATUS_INVALIDATED 2 /* must still be ended (cuStreamEndCapture) */

/* cuGraphInstantiateWithFlags flags (CUgraphInstantiate_flags). */
#define CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH 0x1
#define CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD              0x2
#define CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH       0x4
#define CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY   0x8

/* cuGetProcAddress flags (CUdriverProcAddress_flags) and results
 * (CUdriverProcAddressQueryResult, CUDA 12.0+). */
#define CU_GET_PROC_ADDRESS_DEFAULT                   0
#define CU_GET_PROC_ADDRESS_LEGACY_STREAM             (1 << 0)
#define CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM (1 << 1)
typedef int CUdriverProcAddressQueryResult;
#define CU_GET_PROC_ADDRESS_SUCCESS                0
#define CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND       1
#define CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT 2

/* CUarray_format values. */
typedef int CUarray_format;
#define CU_AD_FORMAT_UNSIGNED_INT8  0x01
#define CU_AD_FORMAT_UNSIGNED_INT16 0x02
#define CU_AD_FORMAT_UNSIGNED_INT32 0x03
#define CU_AD_FORMAT_SIGNED_INT8    0x08
#define CU_AD_FORMAT_SIGNED_INT16   0x09
#define CU_AD_FORMAT_SIGNED_INT32   0x0a
#define CU_AD_FORMAT_HALF           0x10
#define CU_AD_FORMAT_FLOAT          0x20

typedef struct CUDA_ARRAY_DESCRIPTOR_st {
    size_t Width;
    size_t Height;
    CUarray_format Format;
    unsigned int NumChannels;
} CUDA_ARRAY_DESCRIPTOR;

typedef struct CUDA_ARRAY3D_DESCRIPTOR_st {
    size_t Width;
    size_t Height;
    size_t Depth;
    CUarray_format Format;
    unsigned int NumChannels;
    unsigned int Flags;
} CUDA_ARRAY3D_DESCRIPTOR;

/* Virtual memory management (CUDA 10.2+). */
typedef int CUmemAllocationType;
#define CU_MEM_ALLOCATION_TYPE_PINNED 0x1
typedef int CUmemAllocationHandleType;
#define CU_MEM_HANDLE_TYPE_NONE 0x0
typedef int CUmemLocationType;
#define CU_MEM_LOCATION_TYPE_DEVICE 0x1
typedef int CUmemAllocationGranularity_flags;
#define CU_MEM_ALLOC_GRANULARITY_MINIMUM     0x0
#define CU_MEM_ALLOC_GRANULARITY_RECOMMENDED 0x1

typedef struct CUmemLocation_st {
    CUmemLocationType type;
    int id;
} CUmemLocation;

typedef struct CUmemAllocationProp_st {
    CUmemAllocationType type;
    CUmemAllocationHandleType requestedHandleTypes;
    CUmemLocation location;
    void *win32HandleMetaData;
    struct {
        unsigned char compressionType;
        unsigned char gpuDirectRDMACapable;
        unsigned short usage;
        unsigned char reserved[4];
    } allocFlags;
} CUmemAllocationProp;

typedef struct CUmemPoolProps_st {
    CUmemAllocationType allocType;
    CUmemAllocationHandleType handleTypes;
    CUmemLocation location;
    void *win32SecurityAttributes;
    size_t maxSize;
    unsigned short usage;
    unsigned char reserved[54];
} CUmemPoolProps;

/* cuMemPoolGetAttribute / cuMemPoolSetAttribute (cuda.h CUmemPool_attribute).
 * The REUSE_* values are int; the others cuuint64_t, in bytes. */
typedef enum CUmemPool_attribute_enum {
    CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES = 1,
    CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC = 2,
    CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES = 3,
    CU_MEMPOOL_ATTR_RELEASE_THRESHOLD = 4,    /* reserved memory kept at a synchronisation */
    CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT = 5, /* device memory the pool holds */
    CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH = 6,    /* its high-water mark (set to 0 to reset) */
    CU_MEMPOOL_ATTR_USED_MEM_CURRENT = 7,     /* allocated from the pool and not freed */
    CU_MEMPOOL_ATTR_USED_MEM_HIGH = 8,
} CUmemPool_attribute;

/* cuCtxCreate_v4's parameters (CUDA 12.5+); NULL is accepted. */
typedef struct CUctxCreateParams_st CUctxCreateParams;

/* cuCtxCreate_v3's execution affinity parameters (CUDA 11.4+); opaque here. */
typedef struct CUexecAffinityParam_st CUexecAffinityParam;

/* cuLaunchKernelEx's configuration (CUDA 12.0+); attrs stay opaque here. */
typedef struct CUlaunchAttribute_st CUlaunchAttribute;
typedef struct CUlaunchConfig_st {
    unsigned int gridDimX;
    unsigned int gridDimY;
    unsigned int gridDimZ;
    unsigned int blockDimX;
    unsigned int blockDimY;
    unsigned int blockDimZ;
    unsigned int sharedMemBytes;
    CUstream hStream;
    CUlaunchAttribute *attrs;
    unsigned int numAttrs;
} CUlaunchConfig;

/* One device's launch of cuLaunchCooperativeKernelMultiDevice (CUDA 9.0+,
 * deprecated since 11.3; CUDA_LAUNCH_PARAMS_v1 in cuda.h). */
typedef struct CUDA_LAUNCH_PARAMS_st {
    CUfunction function;
    unsigned int gridDimX;
    unsigned int gridDimY;
    unsigned int gridDimZ;
    unsigned int blockDimX;
    unsigned int blockDimY;
    unsigned int blockDimZ;
    unsigned int sharedMemBytes;
    CUstream hStream;
    void **kernelParams;
} CUDA_LAUNCH_PARAMS;

/* Kernel launch "extra" markers. */
#define CU_LAUNCH_PARAM_END            ((void *)0x00)
#define CU_LAUNCH_PARAM_BUFFER_POINTER ((void *)0x01)
#define CU_LAUNCH_PARAM_BUFFER_SIZE    ((void *)0x02)

/* ---- Exported driver entry points (symbol names as exported). ---- */
CUresult cuInit(unsigned int flags);
CUresult cuDriverGetVersion(int *version);
CUresult cuGetErrorString(CUresult error, const char **str);
CUresult cuGetErrorName(CUresult error, const char **str);
CUresult cuGetProcAddress(const char *symbol, void **pfn, int cuda_version, cuuint64_t flags);
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cuda_version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *status);

CUresult cuDeviceGet(CUdevice *dev, int ordinal);
CUresult cuDeviceGetCount(int *count);
CUresult cuDeviceGetName(char *name, int len, CUdevice dev);
CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev);
CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev);
CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev);
CUresult cuDeviceGetAttribute(int *value, CUdevice_attribute attr, CUdevice dev);

CUresult cuCtxCreate_v2(CUcontext *ctx, unsigned int flags, CUdevice dev);
CUresult cuCtxCreate_v3(CUcontext *ctx, CUexecAffinityParam *params, int nparams,
                        unsigned int flags, CUdevice dev); /* CUDA 11.4+ */
CUresult cuCtxCreate_v4(CUcontext *ctx, CUctxCreateParams *params, unsigned int flags,
                        CUdevice dev);
CUresult cuCtxDestroy_v2(CUcontext ctx);
CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev);
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev);
CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev); /* CUDA 11.0+; cudaDeviceReset calls it */
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuCtxGetCurrent(CUcontext *ctx);
CUresult cuCtxPushCurrent_v2(CUcontext ctx);
CUresult cuCtxPopCurrent_v2(CUcontext *ctx);
CUresult cuCtxGetDevice(CUdevice *dev);
CUresult cuCtxGetDevice_v2(CUdevice *dev, CUcontext ctx); /* CUDA 13.0+; NULL: current */
CUresult cuCtxSynchronize(void);
CUresult cuCtxSynchronize_v2(CUcontext ctx); /* CUDA 13.0+; NULL: current */

CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes);
CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes);
CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width_bytes, size_t height,
                            unsigned int element_bytes);
CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytes, unsigned int flags);
CUresult cuMemFree_v2(CUdeviceptr dptr);
CUresult cuMemHostAlloc(void **p, size_t bytes, unsigned int flags);
CUresult cuMemFreeHost(void *p);
CUresult cuMemsetD8_v2(CUdeviceptr dptr, unsigned char value, size_t n);
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t bytes);
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t bytes);
/* The per-thread default stream variants (CUDA 7.0+). */
CUresult cuMemsetD8_v2_ptds(CUdeviceptr dptr, unsigned char value, size_t n);
CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void *src, size_t bytes);
CUresult cuMemcpyDtoH_v2_ptds(void *dst, CUdeviceptr src, size_t bytes);

CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                       CUmemAllocationGranularity_flags option);
CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t bytes,
                     const CUmemAllocationProp *prop, unsigned long long flags);
CUresult cuMemRelease(CUmemGenericAllocationHandle handle);
CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t bytes, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags);
CUresult cuMemAddressFree(CUdeviceptr ptr, size_t bytes);
CUresult cuMemMap(CUdeviceptr ptr, size_t bytes, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags);
CUresult cuMemUnmap(CUdeviceptr ptr, size_t bytes);

CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytes, CUstream stream);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytes, CUstream stream);
CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream);
CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props);
CUresult cuMemPoolDestroy(CUmemoryPool pool);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool,
                                 CUstream stream);
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool,
                                      CUstream stream);
CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value);
CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value);
CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t min_bytes_to_keep);
CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev);
CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev);

CUresult cuArrayCreate_v2(CUarray *array, const CUDA_ARRAY_DESCRIPTOR *desc);
CUresult cuArray3DCreate_v2(CUarray *array, const CUDA_ARRAY3D_DESCRIPTOR *desc);
CUresult cuArrayDestroy(CUarray array);
CUresult cuMipmappedArrayCreate(CUmipmappedArray *array, const CUDA_ARRAY3D_DESCRIPTOR *desc,
                                unsigned int levels);
CUresult cuMipmappedArrayDestroy(CUmipmappedArray array);

CUresult cuModuleLoadData(CUmodule *module, const void *image);
CUresult cuModuleUnload(CUmodule module);
CUresult cuModuleGetFunction(CUfunction *fn, CUmodule module, const char *name);
CUresult cuLaunchKernel(CUfunction fn, unsigned int grid_x, unsigned int grid_y,
                        unsigned int grid_z, unsigned int block_x, unsigned int block_y,
                        unsigned int block_z, unsigned int shared_bytes, CUstream stream,
                        void **params, void **extra);
CUresult cuLaunchKernel_ptsz(CUfunction fn, unsigned int grid_x, unsigned int grid_y,
                             unsigned int grid_z, unsigned int block_x, unsigned int block_y,
                             unsigned int block_z, unsigned int shared_bytes, CUstream stream,
                             void **params, void **extra);
CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction fn, void **params, void **extra);
CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction fn, void **params,
                               void **extra);
/* Cooperative launches (CUDA 9.0+): cuLaunchKernel's arguments without extra. */
CUresult cuLaunchCooperativeKernel(CUfunction fn, unsigned int grid_x, unsigned int grid_y,
                                   unsigned int grid_z, unsigned int block_x, unsigned int block_y,
                                   unsigned int block_z, unsigned int shared_bytes, CUstream stream,
                                   void **params);
CUresult cuLaunchCooperativeKernel_ptsz(CUfunction fn, unsigned int grid_x, unsigned int grid_y,
                                        unsigned int grid_z, unsigned int block_x,
                                        unsigned int block_y, unsigned int block_z,
                                        unsigned int shared_bytes, CUstream stream, void **params);
CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *list, unsigned int num_devices,
                                              unsigned int flags);
/* The launch API before CUDA 4.0, still exported: the block shape is set
 * with cuFuncSetBlockShape; cuLaunch runs a grid of 1 x 1 blocks,
 * cuLaunchGrid one of width x height, both on the legacy default stream. */
CUresult cuFuncSetBlockShape(CUfunction fn, int x, int y, int z);
CUresult cuLaunch(CUfunction fn);
CUresult cuLaunchGrid(CUfunction fn, int grid_width, int grid_height);
CUresult cuLaunchGridAsync(CUfunction fn, int grid_width, int grid_height, CUstream stream);

CUresult cuStreamCreate(CUstream *stream, unsigned int flags);
CUresult cuStreamSynchronize(CUstream stream);
CUresult cuStreamSynchronize_ptsz(CUstream stream);
CUresult cuStreamQuery(CUstream stream);
CUresult cuStreamQuery_ptsz(CUstream stream);
CUresult cuStreamDestroy_v2(CUstream stream);
CUresult cuEventCreate(CUevent *event, unsigned int flags);
CUresult cuEventRecord(CUevent event, CUstream stream);
CUresult cuEventRecord_ptsz(CUevent event, CUstream stream);
CUresult cuEventQuery(CUevent event);
CUresult cuEventSynchronize(CUevent event);
CUresult cuEventElapsedTime(float *ms, CUevent start, CUevent end);
CUresult cuEventElapsedTime_v2(float *ms, CUevent start, CUevent end); /* CUDA 12.8+ */
CUresult cuEventDestroy_v2(CUevent event);

/* Stream capture and graphs (CUDA 10.0+; cuGraphInstantiateWithFlags 11.4+).
 * The _ptsz variants take stream 0 as the calling thread's default stream. */
CUresult cuStreamBeginCapture_v2(CUstream stream, CUstreamCaptureMode mode); /* CUDA 10.1+ */
CUresult cuStreamBeginCapture_v2_ptsz(CUstream stream, CUstreamCaptureMode mode);
CUresult cuStreamEndCapture(CUstream stream, CUgraph *graph);
CUresult cuStreamEndCapture_ptsz(CUstream stream, CUgraph *graph);
CUresult cuStreamIsCapturing(CUstream stream, CUstreamCaptureStatus *status);
CUresult cuStreamIsCapturing_ptsz(CUstream stream, CUstreamCaptureStatus *status);
CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode); /* CUDA 10.1+ */
CUresult cuGraphCreate(CUgraph *graph, unsigned int flags);
CUresult cuGraphGetNodes(CUgraph graph, CUgraphNode *nodes, size_t *count);
CUresult cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph graph, unsigned long long flags);
CUresult cuGraphLaunch(CUgraphExec exec, CUstream stream);
CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream stream);
CUresult cuGraphExecDestroy(CUgraphExec exec);
CUresult cuGraphDestroy(CUgraph graph);

#ifdef __cplusplus
}
#endif

#endif
