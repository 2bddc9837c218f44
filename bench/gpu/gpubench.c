/* bench/gpu/gpubench.c - the part of the real-GPU benchmarks that every program shares (see
 * gpubench.h): resolving the driver by one of three lookup paths, the skip test, the PTX
 * kernels, worker processes and small helpers.
 *
 * DESIGN: the driver is never linked. It is opened with dlopen at run time so the programs
 * build without the CUDA toolkit and run (and skip) on machines without a GPU. One table
 * lists every entry point with its exported (versioned) name and the base name that
 * cuGetProcAddress takes, so the three lookup paths resolve exactly the same functions.
 * Workers are this same executable started again (fork + execve of /proc/self/exe) with
 * another environment: LD_PRELOAD only takes effect at exec, and each worker gets its own
 * CUDA context, as each process of a container does.
 */
#define _GNU_SOURCE /* RTLD_DEFAULT, pipe2, syscall */
#include "gpubench.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/perf_event.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#ifndef EGPU_GPUBENCH_DEFAULT_VCUDA
#define EGPU_GPUBENCH_DEFAULT_VCUDA ""
#endif
#define GPUBENCH_INSTALLED_VCUDA "/usr/local/lib/elastic-gpu/libegpu-vcuda.so"

/* One driver entry point: the symbol the driver exports, the base name cuGetProcAddress
 * takes (NULL: always resolved with dlsym on the handle, for entries whose versioned
 * variants differ in signature), where it goes and whether a driver may lack it. */
struct entry {
    const char *sym;
    const char *proc;
    size_t off;
    bool optional;
};

#define ENTRY(sym, proc, field, opt)                          \
    {                                                         \
        sym, proc, offsetof(struct gpubench_cuda, field), opt \
    }

/* Sources: cuda.h of CUDA 13.0 (the #define mapping of each API name to its exported symbol)
 * and the cuGetProcAddress reference. */
static const struct entry entries[] = {
    ENTRY("cuInit", "cuInit", init, false),
    ENTRY("cuDriverGetVersion", "cuDriverGetVersion", driver_get_version, false),
    ENTRY("cuGetErrorName", "cuGetErrorName", get_error_name, true),
    ENTRY("cuDeviceGet", "cuDeviceGet", device_get, false),
    ENTRY("cuDeviceGetCount", "cuDeviceGetCount", device_get_count, false),
    ENTRY("cuDeviceGetName", "cuDeviceGetName", device_get_name, false),
    ENTRY("cuDeviceGetUuid_v2", "cuDeviceGetUuid", device_get_uuid, false),
    ENTRY("cuDeviceTotalMem_v2", "cuDeviceTotalMem", device_total_mem, false),
    ENTRY("cuDeviceGetAttribute", "cuDeviceGetAttribute", device_get_attribute, false),
    ENTRY("cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRetain", primary_ctx_retain, false),
    ENTRY("cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease", primary_ctx_release, false),
    ENTRY("cuCtxSetCurrent", "cuCtxSetCurrent", ctx_set_current, false),
    ENTRY("cuCtxSynchronize", "cuCtxSynchronize", ctx_synchronize, false),
    ENTRY("cuCtxCreate_v2", NULL, ctx_create_v2, true),
    ENTRY("cuCtxCreate_v4", NULL, ctx_create_v4, true),
    ENTRY("cuCtxDestroy_v2", "cuCtxDestroy", ctx_destroy, false),
    ENTRY("cuMemGetInfo_v2", "cuMemGetInfo", mem_get_info, false),
    ENTRY("cuMemAlloc_v2", "cuMemAlloc", mem_alloc, false),
    ENTRY("cuMemAllocPitch_v2", "cuMemAllocPitch", mem_alloc_pitch, false),
    ENTRY("cuMemAllocManaged", "cuMemAllocManaged", mem_alloc_managed, false),
    ENTRY("cuMemFree_v2", "cuMemFree", mem_free, false),
    ENTRY("cuMemGetAllocationGranularity", "cuMemGetAllocationGranularity",
          mem_get_allocation_granularity, true),
    ENTRY("cuMemCreate", "cuMemCreate", mem_create, true),
    ENTRY("cuMemRelease", "cuMemRelease", mem_release, true),
    ENTRY("cuMemAllocAsync", "cuMemAllocAsync", mem_alloc_async, true),
    ENTRY("cuMemFreeAsync", "cuMemFreeAsync", mem_free_async, true),
    ENTRY("cuMemPoolCreate", "cuMemPoolCreate", mem_pool_create, true),
    ENTRY("cuMemPoolDestroy", "cuMemPoolDestroy", mem_pool_destroy, true),
    ENTRY("cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync", mem_alloc_from_pool_async, true),
    ENTRY("cuMemPoolSetAttribute", "cuMemPoolSetAttribute", mem_pool_set_attribute, true),
    ENTRY("cuMemPoolTrimTo", "cuMemPoolTrimTo", mem_pool_trim_to, true),
    ENTRY("cuArrayCreate_v2", "cuArrayCreate", array_create, false),
    ENTRY("cuArray3DCreate_v2", "cuArray3DCreate", array3d_create, false),
    ENTRY("cuArrayDestroy", "cuArrayDestroy", array_destroy, false),
    ENTRY("cuMipmappedArrayCreate", "cuMipmappedArrayCreate", mipmapped_array_create, true),
    ENTRY("cuMipmappedArrayDestroy", "cuMipmappedArrayDestroy", mipmapped_array_destroy, true),
    ENTRY("cuModuleLoadData", "cuModuleLoadData", module_load_data, false),
    ENTRY("cuModuleUnload", "cuModuleUnload", module_unload, false),
    ENTRY("cuModuleGetFunction", "cuModuleGetFunction", module_get_function, false),
    ENTRY("cuLaunchKernel", "cuLaunchKernel", launch_kernel, false),
    ENTRY("cuStreamCreate", "cuStreamCreate", stream_create, false),
    ENTRY("cuStreamSynchronize", "cuStreamSynchronize", stream_synchronize, false),
    ENTRY("cuStreamDestroy_v2", "cuStreamDestroy", stream_destroy, false),
    ENTRY("cuEventCreate", "cuEventCreate", event_create, false),
    ENTRY("cuEventRecord", "cuEventRecord", event_record, false),
    ENTRY("cuEventSynchronize", "cuEventSynchronize", event_synchronize, false),
    ENTRY("cuEventElapsedTime", "cuEventElapsedTime", event_elapsed_time, false),
    ENTRY("cuEventDestroy_v2", "cuEventDestroy", event_destroy, false),
};

typedef CUresult (*getproc_v2_fn)(const char *symbol, void **pfn, int cuda_version,
                                  cuuint64_t flags, CUdriverProcAddressQueryResult *status);
typedef CUresult (*getproc_v1_fn)(const char *symbol, void **pfn, int cuda_version,
                                  cuuint64_t flags);

static void set_why(char *why, size_t whylen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_why(char *why, size_t whylen, const char *fmt, ...)
{
    va_list ap;

    if (why == NULL || whylen == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(why, whylen, fmt, ap);
    va_end(ap);
}

int gpubench_lookup_parse(const char *s, enum gpubench_lookup *out)
{
    if (strcmp(s, "direct") == 0)
        *out = GPUBENCH_DIRECT;
    else if (strcmp(s, "dlsym") == 0)
        *out = GPUBENCH_DLSYM;
    else if (strcmp(s, "proc") == 0)
        *out = GPUBENCH_PROC;
    else
        return -EINVAL;
    return 0;
}

const char *gpubench_lookup_name(enum gpubench_lookup lookup)
{
    switch (lookup) {
    case GPUBENCH_DIRECT:
        return "direct";
    case GPUBENCH_DLSYM:
        return "dlsym";
    case GPUBENCH_PROC:
        return "proc";
    }
    return "?";
}

static const char *libcuda_name(void)
{
    const char *name = getenv("EGPU_GPUBENCH_LIBCUDA");

    return name != NULL && name[0] != '\0' ? name : "libcuda.so.1";
}

/* Resolves sym the way lookup says, for the direct and dlsym paths. */
static void *sym_lookup(void *lib, enum gpubench_lookup lookup, const char *sym)
{
    return dlsym(lookup == GPUBENCH_DIRECT ? RTLD_DEFAULT : lib, sym);
}

static void slot_set(struct gpubench_cuda *cu, size_t off, void *p)
{
    /* POSIX guarantees object and function pointers have one representation. */
    memcpy((char *)cu + off, &p, sizeof(p));
}

int gpubench_cuda_open(struct gpubench_cuda *cu, enum gpubench_lookup lookup, char *why,
                       size_t whylen)
{
    const char *name = libcuda_name();
    getproc_v2_fn getproc_v2 = NULL;
    getproc_v1_fn getproc_v1 = NULL;
    int flags = RTLD_NOW | (lookup == GPUBENCH_DIRECT ? RTLD_GLOBAL : RTLD_LOCAL);
    void *lib, *p;

    memset(cu, 0, sizeof(*cu));
    lib = dlopen(name, flags);
    if (lib == NULL) {
        set_why(why, whylen, "dlopen %s: %s", name, dlerror());
        return -ENOENT;
    }
    cu->lib = lib;
    cu->lookup = lookup;
    if (lookup == GPUBENCH_PROC) {
        CUresult (*version)(int *) = NULL;

        p = dlsym(lib, "cuGetProcAddress_v2");
        memcpy(&getproc_v2, &p, sizeof(p));
        if (getproc_v2 == NULL) { /* drivers of CUDA 11.3 to 11.8 */
            p = dlsym(lib, "cuGetProcAddress");
            memcpy(&getproc_v1, &p, sizeof(p));
        }
        p = dlsym(lib, "cuDriverGetVersion");
        memcpy(&version, &p, sizeof(p));
        if ((getproc_v2 == NULL && getproc_v1 == NULL) || version == NULL) {
            set_why(why, whylen, "%s has no cuGetProcAddress (a driver older than CUDA 11.3)",
                    name);
            goto fail;
        }
        if (version(&cu->driver_version) != CUDA_SUCCESS) {
            set_why(why, whylen, "cuDriverGetVersion failed");
            goto fail;
        }
    }
    for (size_t i = 0; i < sizeof(entries) / sizeof(entries[0]); i++) {
        const struct entry *e = &entries[i];

        p = NULL;
        if (lookup != GPUBENCH_PROC || e->proc == NULL) {
            p = sym_lookup(lib, lookup == GPUBENCH_PROC ? GPUBENCH_DLSYM : lookup, e->sym);
        } else if (getproc_v2 != NULL) {
            CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;

            if (getproc_v2(e->proc, &p, cu->driver_version, CU_GET_PROC_ADDRESS_LEGACY_STREAM,
                           &status) != CUDA_SUCCESS ||
                status != CU_GET_PROC_ADDRESS_SUCCESS)
                p = NULL;
        } else if (getproc_v1(e->proc, &p, cu->driver_version, CU_GET_PROC_ADDRESS_LEGACY_STREAM) !=
                   CUDA_SUCCESS) {
            p = NULL;
        }
        if (p == NULL && !e->optional) {
            set_why(why, whylen, "%s: %s not found (%s lookup)", name, e->sym,
                    gpubench_lookup_name(lookup));
            goto fail;
        }
        slot_set(cu, e->off, p);
    }
    if (cu->driver_version == 0 && cu->driver_get_version(&cu->driver_version) != CUDA_SUCCESS)
        cu->driver_version = 0;
    return 0;
fail:
    dlclose(lib);
    memset(cu, 0, sizeof(*cu));
    return -ENOSYS;
}

/* Names of the CUresult values the skip test and the setup meet most (cuda.h, CUresult),
 * for drivers whose cuGetErrorName is missing or fails (the toolkit's stub library). */
static const struct {
    CUresult rc;
    const char *name;
} cu_names[] = {
    {1, "CUDA_ERROR_INVALID_VALUE"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY"},
    {3, "CUDA_ERROR_NOT_INITIALIZED"},
    {4, "CUDA_ERROR_DEINITIALIZED"},
    {34, "CUDA_ERROR_STUB_LIBRARY"},
    {36, "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER"},
    {46, "CUDA_ERROR_DEVICE_UNAVAILABLE"},
    {100, "CUDA_ERROR_NO_DEVICE"},
    {101, "CUDA_ERROR_INVALID_DEVICE"},
    {200, "CUDA_ERROR_INVALID_IMAGE"},
    {201, "CUDA_ERROR_INVALID_CONTEXT"},
    {209, "CUDA_ERROR_NO_BINARY_FOR_GPU"},
    {218, "CUDA_ERROR_INVALID_PTX"},
    {221, "CUDA_ERROR_JIT_COMPILER_NOT_FOUND"},
    {222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"},
    {304, "CUDA_ERROR_OPERATING_SYSTEM"},
    {400, "CUDA_ERROR_INVALID_HANDLE"},
    {801, "CUDA_ERROR_NOT_SUPPORTED"},
    {802, "CUDA_ERROR_SYSTEM_NOT_READY"},
    {803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"},
    {804, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE"},
    {999, "CUDA_ERROR_UNKNOWN"},
};

const char *gpubench_cu_name(const struct gpubench_cuda *cu, CUresult rc)
{
    static _Thread_local char buf[32];
    const char *s = NULL;

    if (cu != NULL && cu->get_error_name != NULL && cu->get_error_name(rc, &s) == CUDA_SUCCESS &&
        s != NULL)
        return s;
    for (size_t i = 0; i < sizeof(cu_names) / sizeof(cu_names[0]); i++) {
        if (cu_names[i].rc == rc)
            return cu_names[i].name;
    }
    snprintf(buf, sizeof(buf), "CUresult %d", rc);
    return buf;
}

bool gpubench_has_gpu(char *why, size_t whylen)
{
    struct gpubench_cuda cu;
    CUresult rc;
    int n = 0;

    if (gpubench_cuda_open(&cu, GPUBENCH_DLSYM, why, whylen) != 0)
        return false;
    rc = cu.init(0);
    if (rc != CUDA_SUCCESS) {
        set_why(why, whylen, "cuInit: %s", gpubench_cu_name(&cu, rc));
        return false;
    }
    rc = cu.device_get_count(&n);
    if (rc != CUDA_SUCCESS) {
        set_why(why, whylen, "cuDeviceGetCount: %s", gpubench_cu_name(&cu, rc));
        return false;
    }
    if (n < 1) {
        set_why(why, whylen, "cuDeviceGetCount: 0 devices");
        return false;
    }
    return true;
}

int gpubench_cuda_attach(const struct gpubench_cuda *cu, int ordinal, CUdevice *dev, CUcontext *ctx,
                         char *why, size_t whylen)
{
    CUresult rc = cu->init(0);

    if (rc != CUDA_SUCCESS) {
        set_why(why, whylen, "cuInit: %s", gpubench_cu_name(cu, rc));
        return -EIO;
    }
    rc = cu->device_get(dev, ordinal);
    if (rc != CUDA_SUCCESS) {
        set_why(why, whylen, "cuDeviceGet %d: %s", ordinal, gpubench_cu_name(cu, rc));
        return -EIO;
    }
    rc = cu->primary_ctx_retain(ctx, *dev);
    if (rc != CUDA_SUCCESS) {
        set_why(why, whylen, "cuDevicePrimaryCtxRetain: %s", gpubench_cu_name(cu, rc));
        return -EIO;
    }
    rc = cu->ctx_set_current(*ctx);
    if (rc != CUDA_SUCCESS) {
        set_why(why, whylen, "cuCtxSetCurrent: %s", gpubench_cu_name(cu, rc));
        (void)cu->primary_ctx_release(*dev); /* the set failure is what gets reported */
        return -EIO;
    }
    return 0;
}

int gpubench_cuda_uuid(const struct gpubench_cuda *cu, CUdevice dev, char *out, size_t len)
{
    CUuuid u;
    const unsigned char *b = (const unsigned char *)u.bytes;

    if (cu->device_get_uuid(&u, dev) != CUDA_SUCCESS)
        return -EIO;
    snprintf(out, len, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
             b[14], b[15]);
    return 0;
}

int gpubench_nvml_open(struct gpubench_nvml *nv, enum gpubench_lookup lookup, char *why,
                       size_t whylen)
{
    static const struct {
        const char *sym;
        size_t off;
    } nvml_entries[] = {
        {"nvmlInit_v2", offsetof(struct gpubench_nvml, init)},
        {"nvmlDeviceGetCount_v2", offsetof(struct gpubench_nvml, device_get_count)},
        {"nvmlDeviceGetHandleByIndex_v2",
         offsetof(struct gpubench_nvml, device_get_handle_by_index)},
        {"nvmlDeviceGetUUID", offsetof(struct gpubench_nvml, device_get_uuid)},
        {"nvmlDeviceGetMemoryInfo", offsetof(struct gpubench_nvml, device_get_memory_info)},
    };
    enum gpubench_lookup how = lookup == GPUBENCH_DIRECT ? GPUBENCH_DIRECT : GPUBENCH_DLSYM;
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | (how == GPUBENCH_DIRECT ? RTLD_GLOBAL : 0));
    void *p_util;
    int rc;

    memset(nv, 0, sizeof(*nv));
    if (lib == NULL) {
        set_why(why, whylen, "dlopen libnvidia-ml.so.1: %s", dlerror());
        return -ENOENT;
    }
    for (size_t i = 0; i < sizeof(nvml_entries) / sizeof(nvml_entries[0]); i++) {
        void *p = sym_lookup(lib, how, nvml_entries[i].sym);

        if (p == NULL) {
            set_why(why, whylen, "libnvidia-ml.so.1: %s not found", nvml_entries[i].sym);
            dlclose(lib);
            memset(nv, 0, sizeof(*nv));
            return -ENOSYS;
        }
        memcpy((char *)nv + nvml_entries[i].off, &p, sizeof(p));
    }
    nv->lib = lib;
    p_util = sym_lookup(lib, how, "nvmlDeviceGetUtilizationRates");
    memcpy(&nv->device_get_utilization_rates, &p_util, sizeof(p_util));
    rc = nv->init();
    if (rc != 0) {
        set_why(why, whylen, "nvmlInit_v2: nvmlReturn_t %d", rc);
        memset(nv, 0, sizeof(*nv)); /* the library stays loaded: NVML dislikes dlclose */
        return -EIO;
    }
    return 0;
}

int gpubench_nvml_find(const struct gpubench_nvml *nv, const char *uuid, void **device)
{
    unsigned int n = 0;

    if (nv->device_get_count(&n) != 0)
        return -EIO;
    for (unsigned int i = 0; i < n; i++) {
        char u[96];
        void *dev = NULL;

        if (nv->device_get_handle_by_index(i, &dev) != 0 ||
            nv->device_get_uuid(dev, u, sizeof(u)) != 0)
            return -EIO;
        if (strcmp(u, uuid) == 0) {
            *device = dev;
            return 0;
        }
    }
    return -ENODEV;
}

int gpubench_nvml_memory(const struct gpubench_nvml *nv, const char *uuid,
                         struct gpubench_nvml_memory *out)
{
    void *dev = NULL;
    int rc = gpubench_nvml_find(nv, uuid, &dev);

    if (rc != 0)
        return rc;
    return nv->device_get_memory_info(dev, out) == 0 ? 0 : -EIO;
}

/* The kernels, in PTX (PTX ISA reference: ld.param, mov from %clock64 and %tid.x, mad.lo,
 * setp, predicated bra, cvta.to.global, st.global). The header with .version and .target is
 * prepended at load time. */
static const char ptx_body[] = ".visible .entry egpu_spin_cycles(\n"
                               "\t.param .u64 egpu_spin_cycles_p0\n"
                               ")\n"
                               "{\n"
                               "\t.reg .pred %p<2>;\n"
                               "\t.reg .b64 %rd<5>;\n"
                               "\tld.param.u64 %rd1, [egpu_spin_cycles_p0];\n"
                               "\tmov.u64 %rd2, %clock64;\n"
                               "$Lspin:\n"
                               "\tmov.u64 %rd3, %clock64;\n"
                               "\tsub.s64 %rd4, %rd3, %rd2;\n"
                               "\tsetp.lt.u64 %p1, %rd4, %rd1;\n"
                               "\t@%p1 bra $Lspin;\n"
                               "\tret;\n"
                               "}\n"
                               "\n"
                               ".visible .entry egpu_spin_iters(\n"
                               "\t.param .u32 egpu_spin_iters_p0,\n"
                               "\t.param .u64 egpu_spin_iters_p1\n"
                               ")\n"
                               "{\n"
                               "\t.reg .pred %p<3>;\n"
                               "\t.reg .b32 %r<4>;\n"
                               "\t.reg .b64 %rd<3>;\n"
                               "\tld.param.u32 %r1, [egpu_spin_iters_p0];\n"
                               "\tld.param.u64 %rd1, [egpu_spin_iters_p1];\n"
                               "\tmov.u32 %r2, %tid.x;\n"
                               "\tmov.u32 %r3, 0;\n"
                               "\tsetp.eq.u32 %p1, %r1, 0;\n"
                               "\t@%p1 bra $Lstore;\n"
                               "$Liter:\n"
                               "\tmad.lo.u32 %r2, %r2, 1664525, 1013904223;\n"
                               "\tadd.u32 %r3, %r3, 1;\n"
                               "\tsetp.lt.u32 %p1, %r3, %r1;\n"
                               "\t@%p1 bra $Liter;\n"
                               "$Lstore:\n"
                               "\tsetp.eq.u64 %p2, %rd1, 0;\n"
                               "\t@%p2 bra $Ldone;\n"
                               "\tcvta.to.global.u64 %rd2, %rd1;\n"
                               "\tst.global.u32 [%rd2], %r2;\n"
                               "$Ldone:\n"
                               "\tret;\n"
                               "}\n";

int gpubench_module_load(const struct gpubench_cuda *cu, CUmodule *module, const char **used,
                         char *why, size_t whylen)
{
    static const struct {
        const char *name, *version, *target;
    } variants[] = {
        {"7.0/sm_52", "7.0", "sm_52"},
        {"7.0/sm_75", "7.0", "sm_75"},
        {"8.0/sm_90", "8.0", "sm_90"},
    };
    char text[sizeof(ptx_body) + 128];
    CUresult rc = CUDA_ERROR_INVALID_IMAGE;

    for (size_t i = 0; i < sizeof(variants) / sizeof(variants[0]); i++) {
        snprintf(text, sizeof(text), ".version %s\n.target %s\n.address_size 64\n\n%s",
                 variants[i].version, variants[i].target, ptx_body);
        rc = cu->module_load_data(module, text);
        if (rc == CUDA_SUCCESS) {
            *used = variants[i].name;
            return 0;
        }
    }
    set_why(why, whylen, "cuModuleLoadData (PTX 7.0/sm_52, 7.0/sm_75, 8.0/sm_90): %s",
            gpubench_cu_name(cu, rc));
    return -EIO;
}

/* ---- Worker processes ---- */

static bool env_matches(const char *entry, const char *const *names)
{
    size_t elen = strcspn(entry, "=");

    for (; names != NULL && *names != NULL; names++) {
        size_t n = strlen(*names);

        if (n > 0 && (*names)[n - 1] == '*') {
            if (elen >= n - 1 && strncmp(entry, *names, n - 1) == 0)
                return true;
        } else if (elen == n && strncmp(entry, *names, n) == 0) {
            return true;
        }
    }
    return false;
}

/* The child's environment: environ minus unset and minus the keys of set, then set. The
 * array is malloc'd; the strings are borrowed. */
static char **env_build(const char *const *set, const char *const *unset)
{
    size_t n = 0, k = 0, nset = 0;
    char **env;

    for (char **e = environ; *e != NULL; e++)
        n++;
    for (; set != NULL && set[nset] != NULL; nset++)
        ;
    env = malloc((n + nset + 1) * sizeof(*env));
    if (env == NULL)
        return NULL;
    for (char **e = environ; *e != NULL; e++) {
        bool overridden = false;

        for (size_t i = 0; i < nset && !overridden; i++) {
            size_t klen = strcspn(set[i], "=");

            overridden = strncmp(*e, set[i], klen) == 0 && (*e)[klen] == '=';
        }
        if (!overridden && !env_matches(*e, unset))
            env[k++] = *e;
    }
    for (size_t i = 0; i < nset; i++)
        env[k++] = (char *)set[i]; /* execve does not write the strings */
    env[k] = NULL;
    return env;
}

int gpubench_child_start(struct gpubench_child *c, char *const argv[], const char *const *set,
                         const char *const *unset)
{
    int in[2], out[2], err;
    char **env;
    pid_t pid;

    memset(c, 0, sizeof(*c));
    c->to_fd = c->from_fd = -1;
    signal(SIGPIPE, SIG_IGN); /* a dead child shows as EPIPE on write */
    env = env_build(set, unset);
    if (env == NULL)
        return -ENOMEM;
    if (pipe2(in, O_CLOEXEC) != 0) {
        err = -errno;
        free(env);
        return err;
    }
    if (pipe2(out, O_CLOEXEC) != 0) {
        err = -errno;
        close(in[0]);
        close(in[1]);
        free(env);
        return err;
    }
    fflush(NULL);
    pid = fork();
    if (pid < 0) {
        err = -errno;
        close(in[0]);
        close(in[1]);
        close(out[0]);
        close(out[1]);
        free(env);
        return err;
    }
    if (pid == 0) {
        if (dup2(in[0], STDIN_FILENO) < 0 || dup2(out[1], STDOUT_FILENO) < 0)
            _exit(127);
        execve("/proc/self/exe", argv, env);
        fprintf(stderr, "gpubench: execve /proc/self/exe: %s\n", strerror(errno));
        _exit(127);
    }
    free(env);
    close(in[0]);
    close(out[1]);
    c->pid = pid;
    c->to_fd = in[1];
    c->from_fd = out[0];
    return 0;
}

int gpubench_child_send(struct gpubench_child *c, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    int n;
    size_t off = 0;

    va_start(ap, fmt);
    n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(line) - 1)
        return -EMSGSIZE;
    line[n++] = '\n';
    if (c->to_fd < 0)
        return -EPIPE;
    while (off < (size_t)n) {
        ssize_t w = write(c->to_fd, line + off, (size_t)n - off);

        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -errno;
        off += (size_t)w;
    }
    return 0;
}

int gpubench_child_recv(struct gpubench_child *c, char *line, size_t len, int timeout_ms)
{
    uint64_t deadline = gpubench_now_ns() + (uint64_t)timeout_ms * 1000000u;

    for (;;) {
        char *nl = memchr(c->buf, '\n', c->len);
        struct pollfd pfd = {.fd = c->from_fd, .events = POLLIN};
        uint64_t now;
        ssize_t r;
        int pr;

        if (nl != NULL) {
            size_t n = (size_t)(nl - c->buf);

            if (n >= len)
                return -EMSGSIZE;
            memcpy(line, c->buf, n);
            line[n] = '\0';
            c->len -= n + 1;
            memmove(c->buf, nl + 1, c->len);
            return 0;
        }
        if (c->len == sizeof(c->buf))
            return -EMSGSIZE;
        if (c->from_fd < 0)
            return -EPIPE;
        now = gpubench_now_ns();
        if (now >= deadline)
            return -ETIMEDOUT;
        pr = poll(&pfd, 1, (int)((deadline - now + 999999u) / 1000000u));
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr < 0)
            return -errno;
        if (pr == 0)
            return -ETIMEDOUT;
        r = read(c->from_fd, c->buf + c->len, sizeof(c->buf) - c->len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -EPIPE;
        c->len += (size_t)r;
    }
}

static void child_close_fds(struct gpubench_child *c)
{
    if (c->to_fd >= 0)
        close(c->to_fd);
    if (c->from_fd >= 0)
        close(c->from_fd);
    c->to_fd = c->from_fd = -1;
}

int gpubench_child_wait(struct gpubench_child *c, int timeout_ms, int *status)
{
    uint64_t deadline = gpubench_now_ns() + (uint64_t)timeout_ms * 1000000u;
    int st = 0;

    child_close_fds(c);
    if (c->pid <= 0)
        return -ECHILD;
    for (;;) {
        pid_t r = waitpid(c->pid, &st, WNOHANG);

        if (r == c->pid)
            break;
        if (r < 0 && errno != EINTR) {
            c->pid = 0;
            return -ECHILD;
        }
        if (gpubench_now_ns() >= deadline) {
            kill(c->pid, SIGKILL);
            while (waitpid(c->pid, &st, 0) < 0 && errno == EINTR)
                ;
            c->pid = 0;
            if (status != NULL)
                *status = st;
            return -ETIMEDOUT;
        }
        gpubench_sleep_until(gpubench_now_ns() + 5000000u);
    }
    c->pid = 0;
    if (status != NULL)
        *status = st;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -ECHILD;
}

const char *const gpubench_limit_env[] = {"LD_PRELOAD",
                                          "EGPU_VCUDA_DIR",
                                          "EGPU_VCUDA_MEMORY_MIB",
                                          "EGPU_VCUDA_CORE",
                                          "EGPU_VCUDA_CORE_LIMIT",
                                          "EGPU_VCUDA_GPUS",
                                          NULL};

int gpubench_worker_once(char *const argv[], const char *const *set, int timeout_ms, int exit_ms,
                         char *line, size_t len)
{
    struct gpubench_child c;
    int rc = gpubench_child_start(&c, argv, set, gpubench_limit_env);

    if (rc != 0) {
        snprintf(line, len, "cannot start a worker: %s", strerror(-rc));
        return rc;
    }
    rc = gpubench_child_recv(&c, line, len, timeout_ms);
    if (rc != 0)
        snprintf(line, len, "no reply: %s", strerror(-rc));
    else if (strncmp(line, "ok ", 3) != 0)
        rc = -EIO;
    if (rc == 0)
        return gpubench_child_wait(&c, exit_ms, NULL);
    gpubench_child_kill(&c);
    return rc;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

int gpubench_num_flag(const struct gpubench_num_flag *flags, size_t n, const char *flag,
                      const char *val, void *opts)
{
    uint64_t v;

    for (size_t k = 0; k < n; k++) {
        if (strcmp(flag, flags[k].name) != 0)
            continue;
        if (gpubench_parse_u64(val, flags[k].min, flags[k].max, &v) != 0)
            return -EINVAL;
        memcpy((char *)opts + flags[k].off, &v, sizeof(v));
        return 1;
    }
    return 0;
}

double gpubench_median(double *v, size_t n)
{
    if (n == 0)
        return -1;
    qsort(v, n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void gpubench_child_kill(struct gpubench_child *c)
{
    int st;

    if (c->pid > 0) {
        kill(c->pid, SIGKILL);
        while (waitpid(c->pid, &st, 0) < 0 && errno == EINTR)
            ;
        c->pid = 0;
    }
    child_close_fds(c);
}

static const char *kv_find(const char *line, const char *key)
{
    size_t klen = strlen(key);

    for (const char *p = line; (p = strstr(p, key)) != NULL; p += klen) {
        if ((p == line || p[-1] == ' ') && p[klen] == '=')
            return p + klen + 1;
    }
    return NULL;
}

int gpubench_kv_u64(const char *line, const char *key, uint64_t *out)
{
    const char *v = kv_find(line, key);
    char *end;
    unsigned long long x;

    if (v == NULL)
        return -ENOENT;
    if (*v < '0' || *v > '9')
        return -EINVAL;
    errno = 0;
    x = strtoull(v, &end, 10);
    if (errno != 0 || (*end != '\0' && *end != ' '))
        return -EINVAL;
    *out = x;
    return 0;
}

int gpubench_kv_i64(const char *line, const char *key, int64_t *out)
{
    const char *v = kv_find(line, key);
    char *end;
    long long x;

    if (v == NULL)
        return -ENOENT;
    if ((*v < '0' || *v > '9') && *v != '-')
        return -EINVAL;
    errno = 0;
    x = strtoll(v, &end, 10);
    if (errno != 0 || end == v || (*end != '\0' && *end != ' '))
        return -EINVAL;
    *out = x;
    return 0;
}

int gpubench_kv_f64(const char *line, const char *key, double *out)
{
    const char *v = kv_find(line, key);
    char *end;
    double x;

    if (v == NULL)
        return -ENOENT;
    errno = 0;
    x = strtod(v, &end);
    if (errno != 0 || end == v || (*end != '\0' && *end != ' '))
        return -EINVAL;
    *out = x;
    return 0;
}

int gpubench_kv_str(const char *line, const char *key, char *out, size_t len)
{
    const char *v = kv_find(line, key);
    size_t n;

    if (v == NULL)
        return -ENOENT;
    n = strcspn(v, " ");
    if (n >= len)
        return -EMSGSIZE;
    memcpy(out, v, n);
    out[n] = '\0';
    return 0;
}

/* ---- Helpers ---- */

int gpubench_tmpdir_make(char *out, size_t len)
{
    const char *tmp = getenv("TMPDIR");
    int n;

    if (tmp == NULL || tmp[0] == '\0')
        tmp = "/tmp";
    n = snprintf(out, len, "%s/egpu-gpubench-XXXXXX", tmp);
    if (n < 0 || (size_t)n >= len)
        return -ENAMETOOLONG;
    return mkdtemp(out) != NULL ? 0 : -errno;
}

void gpubench_tmpdir_remove(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;

    if (d == NULL)
        return;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            (void)unlinkat(dirfd(d), de->d_name, 0); /* best effort, see the header */
    }
    closedir(d);
    (void)rmdir(dir); /* best effort, see the header */
}

int gpubench_stderr_to(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

    if (fd < 0)
        return -errno;
    if (dup2(fd, STDERR_FILENO) < 0) {
        int err = errno;

        close(fd);
        return -err;
    }
    close(fd);
    return 0;
}

int gpubench_vcuda_stats_add(const char *path, struct gpubench_vcuda_stats *sum)
{
    static const char key[] = "compute limit at exit ";
    FILE *f = fopen(path, "r");
    char line[1024];
    int rc = -ENOENT;

    if (f == NULL)
        return -errno;
    while (fgets(line, sizeof(line), f) != NULL) {
        const char *at = strstr(line, key);
        unsigned long long v[8];

        if (at == NULL || sscanf(at + sizeof(key) - 1,
                                 "timed=%llu collected=%llu lost=%llu ctx_queries=%llu "
                                 "retries=%llu bucket_sleeps=%llu queue_sleeps=%llu "
                                 "queue_forced=%llu",
                                 &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) != 8) {
            fputs(line, stderr); /* the worker's own message */
            continue;
        }
        sum->timed += (double)v[0];
        sum->collected += (double)v[1];
        sum->lost += (double)v[2];
        sum->ctx_queries += (double)v[3];
        sum->retries += (double)v[4];
        sum->bucket_sleeps += (double)v[5];
        sum->queue_sleeps += (double)v[6];
        sum->queue_forced += (double)v[7];
        rc = 0;
    }
    fclose(f);
    return rc;
}

void gpubench_vcuda_stats_print(const char *label, const struct gpubench_vcuda_stats *s,
                                double launches)
{
    if (launches <= 0) {
        printf("controller, %s: no figures\n", label);
        return;
    }
    printf("controller, %s: per launch %.4f timed, %.4f context queries, %.4f retries, "
           "%.4f bucket waits, %.4f queue waits, %.4f forced; driver calls besides the "
           "launch %.4f (%.0f launches)\n",
           label, s->timed / launches, s->ctx_queries / launches, s->retries / launches,
           s->bucket_sleeps / launches, s->queue_sleeps / launches, s->queue_forced / launches,
           (7 * s->timed + s->ctx_queries) / launches, launches);
}

const char *gpubench_vcuda_path(const char *arg)
{
    const char *env = getenv("EGPU_GPUBENCH_VCUDA");

    if (arg != NULL && arg[0] != '\0')
        return arg;
    if (env != NULL && env[0] != '\0')
        return env;
    if (EGPU_GPUBENCH_DEFAULT_VCUDA[0] != '\0' && access(EGPU_GPUBENCH_DEFAULT_VCUDA, R_OK) == 0)
        return EGPU_GPUBENCH_DEFAULT_VCUDA;
    return GPUBENCH_INSTALLED_VCUDA;
}

const char *gpubench_vcuda_usable(const char *prog, const char *arg)
{
    const char *path = gpubench_vcuda_path(arg);

    if (access(path, R_OK) == 0)
        return path;
    fprintf(stderr,
            "%s: interposer %s: %s (build libegpu-vcuda.so, or pass --vcuda PATH or "
            "EGPU_GPUBENCH_VCUDA)\n",
            prog, path, strerror(errno));
    return NULL;
}

uint64_t gpubench_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void gpubench_sleep_until(uint64_t t_ns)
{
    struct timespec ts = {.tv_sec = (time_t)(t_ns / 1000000000u),
                          .tv_nsec = (long)(t_ns % 1000000000u)};

    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

int gpubench_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    char *end;
    unsigned long long x;

    if (s == NULL || *s < '0' || *s > '9')
        return -EINVAL;
    errno = 0;
    x = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0' || x < min || x > max)
        return -EINVAL;
    *out = x;
    return 0;
}

/* A counter of the calling thread, user space only, disabled; -1 with errno set when refused. */
static int perf_open(uint32_t type, uint64_t config, uint64_t read_format)
{
    struct perf_event_attr attr;

    memset(&attr, 0, sizeof(attr));
    attr.size = sizeof(attr);
    attr.type = type;
    attr.config = config;
    attr.read_format = read_format;
    attr.disabled = 1;
    attr.exclude_kernel = 1;
    attr.exclude_hv = 1;
    return (int)syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0);
}

void gpubench_icount_open(struct gpubench_icount *ic)
{
    memset(ic, 0, sizeof(*ic));
    ic->fd = perf_open(PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS, 0);
    if (ic->fd < 0)
        snprintf(ic->why, sizeof(ic->why), "perf_event_open: %s", strerror(errno));
}

const char *const gpubench_pmu_names[GPUBENCH_PMU_EVENTS] = {"cycles", "L1i miss", "L1d miss",
                                                             "iTLB miss", "dTLB miss"};

/* perf_event_open(2): a generic cache event is id | op << 8 | result << 16. */
#define PMU_CACHE_MISS(id) \
    ((id) | PERF_COUNT_HW_CACHE_OP_READ << 8 | PERF_COUNT_HW_CACHE_RESULT_MISS << 16)

void gpubench_pmu_open(struct gpubench_pmu *p)
{
    static const struct {
        uint32_t type;
        uint64_t config;
    } ev[GPUBENCH_PMU_EVENTS] = {
        {PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES},
        {PERF_TYPE_HW_CACHE, PMU_CACHE_MISS(PERF_COUNT_HW_CACHE_L1I)},
        {PERF_TYPE_HW_CACHE, PMU_CACHE_MISS(PERF_COUNT_HW_CACHE_L1D)},
        {PERF_TYPE_HW_CACHE, PMU_CACHE_MISS(PERF_COUNT_HW_CACHE_ITLB)},
        {PERF_TYPE_HW_CACHE, PMU_CACHE_MISS(PERF_COUNT_HW_CACHE_DTLB)},
    };

    memset(p, 0, sizeof(*p));
    for (int i = 0; i < GPUBENCH_PMU_EVENTS; i++) {
        p->fd[i] = perf_open(ev[i].type, ev[i].config,
                             PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING);
        if (p->fd[i] < 0 && p->why[0] == '\0')
            snprintf(p->why, sizeof(p->why), "perf_event_open %s: %s", gpubench_pmu_names[i],
                     strerror(errno));
    }
}

void gpubench_pmu_start(struct gpubench_pmu *p)
{
    for (int i = 0; i < GPUBENCH_PMU_EVENTS; i++) {
        if (p->fd[i] >= 0) {
            ioctl(p->fd[i], PERF_EVENT_IOC_RESET, 0);
            ioctl(p->fd[i], PERF_EVENT_IOC_ENABLE, 0);
        }
    }
}

void gpubench_pmu_stop(struct gpubench_pmu *p, double out[GPUBENCH_PMU_EVENTS])
{
    for (int i = 0; i < GPUBENCH_PMU_EVENTS; i++) {
        uint64_t v[3] = {0, 0, 0}; /* value, time enabled, time running */

        out[i] = -1;
        if (p->fd[i] < 0)
            continue;
        ioctl(p->fd[i], PERF_EVENT_IOC_DISABLE, 0);
        if (read(p->fd[i], v, sizeof(v)) == (ssize_t)sizeof(v) && v[2] > 0)
            out[i] = (double)v[0] * ((double)v[1] / (double)v[2]);
    }
}

void gpubench_pmu_close(struct gpubench_pmu *p)
{
    for (int i = 0; i < GPUBENCH_PMU_EVENTS; i++) {
        if (p->fd[i] >= 0)
            close(p->fd[i]);
        p->fd[i] = -1;
    }
}

void gpubench_icount_start(struct gpubench_icount *ic)
{
    if (ic->fd < 0)
        return;
    ioctl(ic->fd, PERF_EVENT_IOC_RESET, 0);
    ioctl(ic->fd, PERF_EVENT_IOC_ENABLE, 0);
}

int64_t gpubench_icount_stop(struct gpubench_icount *ic)
{
    uint64_t v = 0;

    if (ic->fd < 0)
        return -1;
    ioctl(ic->fd, PERF_EVENT_IOC_DISABLE, 0);
    if (read(ic->fd, &v, sizeof(v)) != (ssize_t)sizeof(v))
        return -1;
    return (int64_t)v;
}

void gpubench_icount_close(struct gpubench_icount *ic)
{
    if (ic->fd >= 0)
        close(ic->fd);
    ic->fd = -1;
}

void gpubench_reply(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
}
