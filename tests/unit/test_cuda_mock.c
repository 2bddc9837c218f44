/* tests/unit/test_cuda_mock.c - the mock CUDA driver and NVML (tests/mock).
 *
 * The mock libcuda.so.1 and libnvidia-ml.so.1 are dlopen()ed from the build
 * tree (EGPU_MOCK_CUDA_LIB, EGPU_MOCK_NVML_LIB from tests/mock/CMakeLists.txt)
 * over a state file in a fresh directory, so NVML (and mockctl) observe what
 * the driver does: device memory per card for every allocation path with its
 * rounding, out of memory with nothing taken, each context's footprint, the
 * device timeline (launches on one card serialise, events measure them,
 * synchronisation waits), NVML utilisation, cuGetProcAddress's versions and
 * per-thread variants, and the state shared between processes: this binary
 * re-executes itself as a child ("alloc" and "launch" modes, see child_main)
 * to hold memory, to launch under another tag, to be SIGKILLed (its memory
 * must come back), with private state, and several at once on a new file.
 * Timing checks are lower bounds, or bounds computed from clocks read around
 * the call, so a loaded machine cannot make them fail.
 */
#define _GNU_SOURCE /* mkdtemp, pipe2 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"
#include "cuda_mock.h"
#include "egpu/cuda_abi.h"
#include "mock_device.h"

#define MIB  (1ull << 20)
#define GPUS "Mock A:4096,Mock B:2048:GPU-00112233-4455-6677-8899-aabbccddeeff"
#define MS   1000000ull /* ns */

/* Every entry point of include/egpu/cuda_abi.h: all must be exported. */
#define CU_FUNCS(X)                  \
    X(cuInit)                        \
    X(cuDriverGetVersion)            \
    X(cuGetErrorString)              \
    X(cuGetErrorName)                \
    X(cuGetProcAddress)              \
    X(cuGetProcAddress_v2)           \
    X(cuDeviceGet)                   \
    X(cuDeviceGetCount)              \
    X(cuDeviceGetName)               \
    X(cuDeviceGetUuid)               \
    X(cuDeviceGetUuid_v2)            \
    X(cuDeviceTotalMem_v2)           \
    X(cuDeviceGetAttribute)          \
    X(cuCtxCreate_v2)                \
    X(cuCtxCreate_v3)                \
    X(cuCtxCreate_v4)                \
    X(cuCtxDestroy_v2)               \
    X(cuDevicePrimaryCtxRetain)      \
    X(cuDevicePrimaryCtxRelease_v2)  \
    X(cuCtxSetCurrent)               \
    X(cuCtxGetCurrent)               \
    X(cuCtxPushCurrent_v2)           \
    X(cuCtxPopCurrent_v2)            \
    X(cuCtxGetDevice)                \
    X(cuCtxGetDevice_v2)             \
    X(cuCtxSynchronize)              \
    X(cuCtxSynchronize_v2)           \
    X(cuMemGetInfo_v2)               \
    X(cuMemAlloc_v2)                 \
    X(cuMemAllocPitch_v2)            \
    X(cuMemAllocManaged)             \
    X(cuMemFree_v2)                  \
    X(cuMemHostAlloc)                \
    X(cuMemFreeHost)                 \
    X(cuMemsetD8_v2)                 \
    X(cuMemcpyHtoD_v2)               \
    X(cuMemcpyDtoH_v2)               \
    X(cuMemsetD8_v2_ptds)            \
    X(cuMemcpyHtoD_v2_ptds)          \
    X(cuMemcpyDtoH_v2_ptds)          \
    X(cuMemGetAllocationGranularity) \
    X(cuMemCreate)                   \
    X(cuMemRelease)                  \
    X(cuMemAddressReserve)           \
    X(cuMemAddressFree)              \
    X(cuMemMap)                      \
    X(cuMemUnmap)                    \
    X(cuMemAllocAsync)               \
    X(cuMemAllocAsync_ptsz)          \
    X(cuMemFreeAsync)                \
    X(cuMemFreeAsync_ptsz)           \
    X(cuMemPoolCreate)               \
    X(cuMemPoolDestroy)              \
    X(cuMemAllocFromPoolAsync)       \
    X(cuMemAllocFromPoolAsync_ptsz)  \
    X(cuArrayCreate_v2)              \
    X(cuArray3DCreate_v2)            \
    X(cuArrayDestroy)                \
    X(cuMipmappedArrayCreate)        \
    X(cuMipmappedArrayDestroy)       \
    X(cuModuleLoadData)              \
    X(cuModuleUnload)                \
    X(cuModuleGetFunction)           \
    X(cuLaunchKernel)                \
    X(cuLaunchKernel_ptsz)           \
    X(cuLaunchKernelEx)              \
    X(cuLaunchKernelEx_ptsz)         \
    X(cuStreamCreate)                \
    X(cuStreamSynchronize)           \
    X(cuStreamSynchronize_ptsz)      \
    X(cuStreamDestroy_v2)            \
    X(cuEventCreate)                 \
    X(cuEventRecord)                 \
    X(cuEventRecord_ptsz)            \
    X(cuEventQuery)                  \
    X(cuEventSynchronize)            \
    X(cuEventElapsedTime)            \
    X(cuEventElapsedTime_v2)         \
    X(cuEventDestroy_v2)

static struct {
#define FIELD(name) __typeof__(name) *name;
    CU_FUNCS(FIELD)
#undef FIELD
} cu;

/* The NVML ABI the test reads (NVML API reference: nvmlMemory_t,
 * nvmlMemory_v2_t, nvmlUtilization_t). */
struct nvml_memory {
    unsigned long long total, free, used;
};
struct nvml_memory_v2 {
    unsigned int version;
    unsigned long long total, reserved, free, used;
};
struct nvml_util {
    unsigned int gpu, memory;
};
#define NVML_MEMORY_V2 ((unsigned int)(sizeof(struct nvml_memory_v2) | (2u << 24)))

static struct {
    int (*init)(void);
    int (*handle)(unsigned int index, void **device);
    int (*uuid)(void *device, char *uuid, unsigned int len);
    int (*memory)(void *device, struct nvml_memory *m);
    int (*memory_v2)(void *device, struct nvml_memory_v2 *m);
    int (*util)(void *device, struct nvml_util *u);
} nvml;

static void *libcuda;
static char dir[64], state_path[96];

static int load_symbol(void *lib, const char *name, void *slot)
{
    void *p = dlsym(lib, name);

    if (p == NULL)
        return -1;
    memcpy(slot, &p, sizeof(p));
    return 0;
}

/* Load the mock driver into cu; 0 or -1 (the missing symbol on stderr). */
static int load_cuda(void)
{
    libcuda = dlopen(EGPU_MOCK_CUDA_LIB, RTLD_NOW | RTLD_LOCAL);
    if (libcuda == NULL) {
        fprintf(stderr, "dlopen %s: %s\n", EGPU_MOCK_CUDA_LIB, dlerror());
        return -1;
    }
#define LOAD(name)                                         \
    if (load_symbol(libcuda, #name, &cu.name) != 0) {      \
        fprintf(stderr, "mock libcuda lacks %s\n", #name); \
        return -1;                                         \
    }
    CU_FUNCS(LOAD)
#undef LOAD
    return 0;
}

static int load_nvml(void)
{
    void *lib = dlopen(EGPU_MOCK_NVML_LIB, RTLD_NOW | RTLD_LOCAL);

    if (lib == NULL || load_symbol(lib, "nvmlInit_v2", &nvml.init) != 0 ||
        load_symbol(lib, "nvmlDeviceGetHandleByIndex_v2", &nvml.handle) != 0 ||
        load_symbol(lib, "nvmlDeviceGetUUID", &nvml.uuid) != 0 ||
        load_symbol(lib, "nvmlDeviceGetMemoryInfo", &nvml.memory) != 0 ||
        load_symbol(lib, "nvmlDeviceGetMemoryInfo_v2", &nvml.memory_v2) != 0 ||
        load_symbol(lib, "nvmlDeviceGetUtilizationRates", &nvml.util) != 0)
        return -1;
    return nvml.init();
}

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

/* ---- children: this binary run as "test_cuda_mock <mode> <state> ..." ---- */

/* alloc: take card's primary context and mib MiB, print "ready <free bytes>",
 * hold them until stdin closes, then free and release. */
static int child_alloc(int card, unsigned long long mib)
{
    CUcontext ctx;
    CUdeviceptr p = 0;
    size_t free_bytes, total;
    char buf[16];

    if (cu.cuInit(0) != CUDA_SUCCESS || cu.cuDevicePrimaryCtxRetain(&ctx, card) != CUDA_SUCCESS ||
        cu.cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
        return 91;
    if (mib > 0 && cu.cuMemAlloc_v2(&p, mib * MIB) != CUDA_SUCCESS)
        return 92;
    if (cu.cuMemGetInfo_v2(&free_bytes, &total) != CUDA_SUCCESS)
        return 93;
    printf("ready %zu\n", free_bytes);
    fflush(stdout);
    while (read(0, buf, sizeof(buf)) > 0)
        continue;
    if (mib > 0 && cu.cuMemFree_v2(p) != CUDA_SUCCESS)
        return 94;
    return cu.cuDevicePrimaryCtxRelease_v2(card) == CUDA_SUCCESS ? 0 : 95;
}

/* launch: count launches of kernel "slow" with grid blocks on card's
 * default stream, then wait for them. */
static int child_launch(int card, unsigned blocks, unsigned count)
{
    CUcontext ctx;
    CUmodule mod;
    CUfunction fn;

    if (cu.cuInit(0) != CUDA_SUCCESS || cu.cuDevicePrimaryCtxRetain(&ctx, card) != CUDA_SUCCESS ||
        cu.cuCtxSetCurrent(ctx) != CUDA_SUCCESS || cu.cuModuleLoadData(&mod, "x") != CUDA_SUCCESS ||
        cu.cuModuleGetFunction(&fn, mod, "slow") != CUDA_SUCCESS)
        return 91;
    for (unsigned i = 0; i < count; i++) {
        if (cu.cuLaunchKernel(fn, blocks, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL) != CUDA_SUCCESS)
            return 92;
    }
    if (cu.cuCtxSynchronize() != CUDA_SUCCESS)
        return 93;
    return cu.cuDevicePrimaryCtxRelease_v2(card) == CUDA_SUCCESS ? 0 : 94;
}

/* argv: mode, state ("-": inherited, "private": none, else a path), then
 *   alloc <card> <MiB>
 *   launch <card> <tag> <blocks> <count> */
static int child_main(int argc, char **argv)
{
    if (argc < 3)
        return 99;
    if (strcmp(argv[2], "private") == 0)
        unsetenv("EGPU_MOCK_CUDA_STATE");
    else if (strcmp(argv[2], "-") != 0)
        setenv("EGPU_MOCK_CUDA_STATE", argv[2], 1);
    if (strcmp(argv[1], "launch") == 0 && argc == 7)
        setenv("EGPU_MOCK_CUDA_TAG", argv[4], 1);
    if (load_cuda() != 0)
        return 90;
    if (strcmp(argv[1], "alloc") == 0 && argc == 5)
        return child_alloc((int)strtol(argv[3], NULL, 10), strtoull(argv[4], NULL, 10));
    if (strcmp(argv[1], "launch") == 0 && argc == 7)
        return child_launch((int)strtol(argv[3], NULL, 10), (unsigned)strtoul(argv[5], NULL, 10),
                            (unsigned)strtoul(argv[6], NULL, 10));
    return 99;
}

struct child {
    pid_t pid;
    int in;    /* its stdin: closing it ends an "alloc" child */
    FILE *out; /* its stdout */
};

/* Start this binary with args (NULL-terminated, args[0] the mode). */
static void spawn(struct child *c, const char *const *args)
{
    const char *argv[16] = {"test_cuda_mock"};
    int in[2], out[2];
    size_t n = 1;

    for (; args[n - 1] != NULL && n < 15; n++)
        argv[n] = args[n - 1];
    argv[n] = NULL;
    assert_int_equal(pipe2(in, O_CLOEXEC), 0);
    assert_int_equal(pipe2(out, O_CLOEXEC), 0);
    c->pid = fork();
    assert_true(c->pid >= 0);
    if (c->pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        execv("/proc/self/exe", (char *const *)argv);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    c->in = in[1];
    c->out = fdopen(out[0], "r");
    assert_non_null(c->out);
}

/* Read an "alloc" child's "ready <free>" line; returns the free bytes it saw. */
static unsigned long long child_ready(struct child *c)
{
    char line[64];

    if (fgets(line, sizeof(line), c->out) == NULL || strncmp(line, "ready ", 6) != 0)
        fail_msg("child %d did not get ready", (int)c->pid);
    return strtoull(line + 6, NULL, 10);
}

/* Let the child finish; returns its wait status. */
static int child_end(struct child *c)
{
    int status;

    if (c->in >= 0)
        close(c->in);
    c->in = -1;
    assert_int_equal(waitpid(c->pid, &status, 0), c->pid);
    fclose(c->out);
    return status;
}

static void child_end_ok(struct child *c)
{
    int status = child_end(c);

    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("child %d: status 0x%x", (int)c->pid, status);
}

/* ---- observers ---- */

/* Device memory in use on card, from NVML over the shared state. */
static uint64_t used(unsigned card)
{
    struct nvml_memory m;
    void *d;

    assert_int_equal(nvml.handle(card, &d), 0);
    assert_int_equal(nvml.memory(d, &m), 0);
    assert_int_equal(m.free + m.used, m.total);
    return m.used;
}

/* used(card) is want, and so is the current context's cuMemGetInfo. */
static void expect_used(unsigned card, uint64_t want)
{
    size_t free_bytes, total;

    assert_int_equal(used(card), want);
    assert_int_equal(cu.cuMemGetInfo_v2(&free_bytes, &total), CUDA_SUCCESS);
    assert_int_equal(total - free_bytes, want);
}

/* mockctl's output for args; *status its exit status. Caller frees. */
static char *mockctl(const char *args, int *status)
{
    char cmd[512], *text = calloc(1, 65536);
    size_t n = 0, r;
    FILE *p;

    assert_non_null(text);
    snprintf(cmd, sizeof(cmd), "%s %s 2>/dev/null", EGPU_MOCKCTL, args);
    p = popen(cmd, "r");
    assert_non_null(p);
    while (n < 65535 && (r = fread(text + n, 1, 65535 - n, p)) > 0)
        n += r;
    *status = pclose(p);
    return text;
}

/* The value of key in the line of text that starts with prefix; -1 if none. */
static long long field(const char *text, const char *prefix, const char *key)
{
    char k[64];
    size_t plen = strlen(prefix);

    snprintf(k, sizeof(k), " %s=", key);
    for (const char *line = text; *line != '\0';) {
        const char *eol = strchr(line, '\n');
        const char *hit;

        if (eol == NULL)
            eol = line + strlen(line);
        if (strncmp(line, prefix, plen) == 0) {
            hit = strstr(line, k);
            if (hit != NULL && hit < eol)
                return strtoll(hit + strlen(k), NULL, 10);
        }
        line = *eol != '\0' ? eol + 1 : eol;
    }
    return -1;
}

static CUcontext primary(int dev)
{
    CUcontext ctx;

    assert_int_equal(cu.cuInit(0), CUDA_SUCCESS);
    assert_int_equal(cu.cuDevicePrimaryCtxRetain(&ctx, dev), CUDA_SUCCESS);
    assert_int_equal(cu.cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    return ctx;
}

static void primary_release(int dev)
{
    assert_int_equal(cu.cuDevicePrimaryCtxRelease_v2(dev), CUDA_SUCCESS);
}

/* ---- tests ---- */

/* Runs first: nothing works before cuInit but the version, errors and
 * cuGetProcAddress; cuInit validates its flags. */
static void test_init(void **state)
{
    const char *s;
    CUcontext ctx;
    void *fn;
    int n, v;

    (void)state;
    assert_int_equal(cu.cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
    assert_int_equal(cu.cuCtxGetCurrent(&ctx), CUDA_ERROR_NOT_INITIALIZED);
    assert_int_equal(cu.cuMemAlloc_v2(&(CUdeviceptr){0}, 1), CUDA_ERROR_NOT_INITIALIZED);
    assert_int_equal(cu.cuGetProcAddress("cuInit", &fn, 12040, 0), CUDA_SUCCESS);
    assert_ptr_equal(fn, dlsym(libcuda, "cuInit"));
    assert_int_equal(cu.cuDriverGetVersion(&v), CUDA_SUCCESS);
    assert_int_equal(v, 12040);
    setenv("EGPU_MOCK_CUDA_VERSION", "13000", 1);
    assert_int_equal(cu.cuDriverGetVersion(&v), CUDA_SUCCESS);
    assert_int_equal(v, 13000);
    unsetenv("EGPU_MOCK_CUDA_VERSION");
    assert_int_equal(cu.cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &s), CUDA_SUCCESS);
    assert_string_equal(s, "CUDA_ERROR_OUT_OF_MEMORY");
    assert_int_equal(cu.cuGetErrorString(CUDA_ERROR_INVALID_CONTEXT, &s), CUDA_SUCCESS);
    assert_string_equal(s, "invalid device context");
    assert_int_equal(cu.cuGetErrorString(12345, &s), CUDA_ERROR_INVALID_VALUE);
    assert_null(s);
    assert_int_equal(cu.cuInit(1), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cu.cuInit(0), CUDA_SUCCESS);
    assert_int_equal(cu.cuInit(0), CUDA_SUCCESS);
    assert_int_equal(cu.cuDeviceGetCount(&n), CUDA_SUCCESS);
    assert_int_equal(n, 2);
}

/* The cards of EGPU_MOCK_NVML_GPUS: names, sizes, UUID bytes that match
 * NVML's UUID strings, attributes of an A100. */
static void test_devices(void **state)
{
    static const unsigned char uuid0[16] = {0x6d, 0x0c, 0x1c, 0x3e, 0, 0, 0x40, 0, 0x80};
    static const unsigned char uuid1[16] = {0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77,
                                            0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff};
    char name[64], nvml_uuid[96];
    CUuuid u;
    size_t bytes;
    CUdevice dev;
    void *d;
    int v;

    (void)state;
    assert_int_equal(cu.cuInit(0), CUDA_SUCCESS);
    assert_int_equal(cu.cuDeviceGet(&dev, 1), CUDA_SUCCESS);
    assert_int_equal(dev, 1);
    assert_int_equal(cu.cuDeviceGet(&dev, 2), CUDA_ERROR_INVALID_DEVICE);
    assert_int_equal(cu.cuDeviceGetName(name, sizeof(name), 0), CUDA_SUCCESS);
    assert_string_equal(name, "Mock A");
    assert_int_equal(cu.cuDeviceTotalMem_v2(&bytes, 0), CUDA_SUCCESS);
    assert_int_equal(bytes, 4096 * MIB);
    assert_int_equal(cu.cuDeviceTotalMem_v2(&bytes, 1), CUDA_SUCCESS);
    assert_int_equal(bytes, 2048 * MIB);
    assert_int_equal(cu.cuDeviceTotalMem_v2(&bytes, -1), CUDA_ERROR_INVALID_DEVICE);
    assert_int_equal(cu.cuDeviceGetUuid(&u, 0), CUDA_SUCCESS);
    assert_memory_equal(u.bytes, uuid0, 16);
    assert_int_equal(cu.cuDeviceGetUuid_v2(&u, 1), CUDA_SUCCESS);
    assert_memory_equal(u.bytes, uuid1, 16);
    assert_int_equal(nvml.handle(0, &d), 0);
    assert_int_equal(nvml.uuid(d, nvml_uuid, sizeof(nvml_uuid)), 0);
    assert_string_equal(nvml_uuid, "GPU-6d0c1c3e-0000-4000-8000-000000000000");
    assert_int_equal(cu.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0),
                     CUDA_SUCCESS);
    assert_int_equal(v, 108);
    assert_int_equal(cu.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 1),
                     CUDA_SUCCESS);
    assert_int_equal(v, 8);
    assert_int_equal(cu.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 1),
                     CUDA_SUCCESS);
    assert_int_equal(v, 0);
    assert_int_equal(cu.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 0),
                     CUDA_SUCCESS);
    assert_int_equal(v, 1024);
    assert_int_equal(cu.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, 0), CUDA_SUCCESS);
    assert_int_equal(v, 1410000);
    assert_int_equal(cu.cuDeviceGetAttribute(&v, 4 /* shared memory per block */, 0),
                     CUDA_ERROR_INVALID_VALUE);
}

/* Contexts: calls that need one fail without; each context takes
 * EGPU_MOCK_CUDA_CONTEXT_MIB (300 by default) until destroyed or its last
 * primary release, and destroying it frees what was allocated in it. */
static void test_contexts(void **state)
{
    CUcontext p0, p0b, c1, c2, cur;
    CUdeviceptr ptr;
    CUdevice dev;
    size_t free_bytes, total;
    uint64_t u0, u1;

    (void)state;
    assert_int_equal(cu.cuInit(0), CUDA_SUCCESS);
    assert_int_equal(cu.cuCtxSetCurrent(NULL), CUDA_SUCCESS);
    assert_int_equal(cu.cuMemAlloc_v2(&ptr, 1), CUDA_ERROR_INVALID_CONTEXT);
    assert_int_equal(cu.cuMemGetInfo_v2(&free_bytes, &total), CUDA_ERROR_INVALID_CONTEXT);
    assert_int_equal(cu.cuCtxGetDevice(&dev), CUDA_ERROR_INVALID_CONTEXT);
    assert_int_equal(cu.cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT);
    assert_int_equal(cu.cuCtxGetCurrent(&cur), CUDA_SUCCESS);
    assert_null(cur);
    u0 = used(0);
    u1 = used(1);

    assert_int_equal(cu.cuDevicePrimaryCtxRetain(&p0, 0), CUDA_SUCCESS);
    assert_int_equal(used(0), u0 + 300 * MIB);
    assert_int_equal(cu.cuDevicePrimaryCtxRetain(&p0b, 0), CUDA_SUCCESS);
    assert_ptr_equal(p0, p0b);
    assert_int_equal(used(0), u0 + 300 * MIB);
    assert_int_equal(cu.cuCtxGetCurrent(&cur), CUDA_SUCCESS);
    assert_null(cur); /* retaining does not make it current */
    assert_int_equal(cu.cuCtxSetCurrent(p0), CUDA_SUCCESS);
    assert_int_equal(cu.cuCtxGetDevice(&dev), CUDA_SUCCESS);
    assert_int_equal(dev, 0);

    assert_int_equal(cu.cuCtxCreate_v2(&c1, 0, 1), CUDA_SUCCESS);
    assert_int_equal(cu.cuCtxGetCurrent(&cur), CUDA_SUCCESS);
    assert_ptr_equal(cur, c1);
    assert_int_equal(cu.cuCtxGetDevice_v2(&dev, NULL), CUDA_SUCCESS);
    assert_int_equal(dev, 1);
    assert_int_equal(cu.cuCtxGetDevice_v2(&dev, p0), CUDA_SUCCESS);
    assert_int_equal(dev, 0);
    expect_used(1, u1 + 300 * MIB);
    assert_int_equal(cu.cuMemAlloc_v2(&ptr, 10 * MIB), CUDA_SUCCESS);
    expect_used(1, u1 + 310 * MIB);
    assert_int_equal(cu.cuCtxDestroy_v2(c1), CUDA_SUCCESS);
    assert_int_equal(used(1), u1);
    assert_int_equal(cu.cuCtxGetCurrent(&cur), CUDA_SUCCESS);
    assert_null(cur);
    assert_int_equal(cu.cuCtxDestroy_v2(c1), CUDA_ERROR_INVALID_CONTEXT);
    assert_int_equal(cu.cuCtxSetCurrent(c1), CUDA_ERROR_INVALID_CONTEXT);
    assert_int_equal(cu.cuCtxDestroy_v2(p0), CUDA_ERROR_INVALID_CONTEXT);

    setenv("EGPU_MOCK_CUDA_CONTEXT_MIB", "64", 1);
    assert_int_equal(cu.cuCtxCreate_v3(&c1, NULL, 0, 0, 1), CUDA_SUCCESS);
    assert_int_equal(cu.cuCtxCreate_v4(&c2, NULL, 0, 1), CUDA_SUCCESS);
    assert_int_equal(used(1), u1 + 128 * MIB);
    assert_int_equal(cu.cuCtxCreate_v3(&c1, NULL, -1, 0, 1), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cu.cuCtxCreate_v2(&c1, 0, 2), CUDA_ERROR_INVALID_DEVICE);
    unsetenv("EGPU_MOCK_CUDA_CONTEXT_MIB");
    assert_int_equal(cu.cuCtxDestroy_v2(c1), CUDA_SUCCESS);
    assert_int_equal(cu.cuCtxDestroy_v2(c2), CUDA_SUCCESS);
    assert_int_equal(used(1), u1);

    primary_release(0);
    assert_int_equal(used(0), u0 + 300 * MIB);
    primary_release(0);
    assert_int_equal(used(0), u0);
    assert_int_equal(cu.cuDevicePrimaryCtxRelease_v2(0), CUDA_ERROR_INVALID_CONTEXT);
    assert_int_equal(cu.cuCtxSetCurrent(p0), CUDA_ERROR_INVALID_CONTEXT);
    assert_int_equal(cu.cuCtxSetCurrent((CUcontext)(uintptr_t)0xdead0), CUDA_ERROR_INVALID_CONTEXT);
}

/* The context stack: cuCtxPushCurrent_v2 puts a context over the current
 * one, cuCtxPopCurrent_v2 takes it off and gives it back. */
static void test_context_stack(void **state)
{
    CUcontext p0, p1, cur;

    (void)state;
    assert_int_equal(cu.cuInit(0), CUDA_SUCCESS);
    assert_int_equal(cu.cuDevicePrimaryCtxRetain(&p0, 0), CUDA_SUCCESS);
    assert_int_equal(cu.cuDevicePrimaryCtxRetain(&p1, 1), CUDA_SUCCESS);
    assert_int_equal(cu.cuCtxSetCurrent(p0), CUDA_SUCCESS);
    assert_int_equal(cu.cuCtxPushCurrent_v2(p1), CUDA_SUCCESS);
    assert_int_equal(cu.cuCtxGetCurrent(&cur), CUDA_SUCCESS);
    assert_ptr_equal(cur, p1);
    assert_int_equal(cu.cuCtxPushCurrent_v2((CUcontext)(uintptr_t)0xdead0),
                     CUDA_ERROR_INVALID_CONTEXT);
    assert_int_equal(cu.cuCtxPopCurrent_v2(&cur), CUDA_SUCCESS);
    assert_ptr_equal(cur, p1);
    assert_int_equal(cu.cuCtxGetCurrent(&cur), CUDA_SUCCESS);
    assert_ptr_equal(cur, p0);
    assert_int_equal(cu.cuCtxPopCurrent_v2(&cur), CUDA_SUCCESS);
    assert_ptr_equal(cur, p0);
    assert_int_equal(cu.cuCtxGetCurrent(&cur), CUDA_SUCCESS);
    assert_null(cur);
    assert_int_equal(cu.cuCtxPopCurrent_v2(&cur), CUDA_ERROR_INVALID_CONTEXT);
    primary_release(0);
    primary_release(1);
}

/* Every entry point counts the calls made to it, once each, also through
 * one that forwards to another's work (cuCtxGetDevice and _v2); and spends
 * the host time EGPU_MOCK_CUDA_CALL_NS gives it at its first call. */
static void test_call_counts(void **state)
{
    __typeof__(egpu_mock_calls) *calls = NULL;
    __typeof__(egpu_mock_calls_at) *calls_at = NULL;
    CUresult (*exchange)(CUstreamCaptureMode * mode) = NULL;
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
    uint64_t total, one, v2, n, t0;
    bool listed = false;
    const char *name;
    CUcontext p0;
    CUdevice dev;

    (void)state;
    assert_int_equal(load_symbol(libcuda, "egpu_mock_calls", &calls), 0);
    assert_int_equal(load_symbol(libcuda, "egpu_mock_calls_at", &calls_at), 0);
    assert_int_equal(load_symbol(libcuda, "cuThreadExchangeStreamCaptureMode", &exchange), 0);
    assert_int_equal(cu.cuInit(0), CUDA_SUCCESS);
    assert_int_equal(cu.cuDevicePrimaryCtxRetain(&p0, 0), CUDA_SUCCESS);
    assert_int_equal(cu.cuCtxSetCurrent(p0), CUDA_SUCCESS);
    total = calls(NULL);
    one = calls("cuCtxGetDevice");
    v2 = calls("cuCtxGetDevice_v2");
    for (int i = 0; i < 3; i++)
        assert_int_equal(cu.cuCtxGetDevice(&dev), CUDA_SUCCESS);
    assert_int_equal(cu.cuCtxGetDevice_v2(&dev, NULL), CUDA_SUCCESS);
    assert_int_equal(calls("cuCtxGetDevice"), one + 3);
    assert_int_equal(calls("cuCtxGetDevice_v2"), v2 + 1);
    assert_int_equal(calls(NULL), total + 4);
    assert_int_equal(calls("cuNoSuchCall"), 0);
    for (unsigned i = 0; (name = calls_at(i, &n)) != NULL; i++)
        if (strcmp(name, "cuCtxGetDevice") == 0)
            listed = n == one + 3;
    assert_true(listed);
    assert_null(calls_at(100000, &n));
    /* A call never made before reads its host time now: 3 ms here. */
    setenv("EGPU_MOCK_CUDA_CALL_NS", "bogus,cuThreadExchangeStreamCaptureMode=3000000", 1);
    t0 = now_ns();
    assert_int_equal(exchange(&mode), CUDA_SUCCESS);
    assert_true(now_ns() - t0 >= 3 * MS);
    unsetenv("EGPU_MOCK_CUDA_CALL_NS");
    assert_int_equal(exchange(&mode), CUDA_SUCCESS); /* back to the thread's mode */
    assert_int_equal(calls("cuThreadExchangeStreamCaptureMode"), 2);
    primary_release(0);
}

/* Every allocation path takes its size rounded up to 2 MiB from its card
 * and its free gives it back; host memory takes none and is writable;
 * memset/memcpy check the range. */
static void test_memory_paths(void **state)
{
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}};
    CUmemPoolProps pool_props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                                 .location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}};
    CUDA_ARRAY_DESCRIPTOR d2 = {1024, 1024, CU_AD_FORMAT_FLOAT, 4};
    CUDA_ARRAY_DESCRIPTOR d1 = {4096, 0, CU_AD_FORMAT_UNSIGNED_INT8, 1};
    CUDA_ARRAY3D_DESCRIPTOR d3 = {100, 100, 100, CU_AD_FORMAT_UNSIGNED_INT8, 1, 0};
    CUDA_ARRAY3D_DESCRIPTOR dm = {1024, 1024, 0, CU_AD_FORMAT_FLOAT, 1, 0};
    CUdeviceptr p, q, va;
    CUmemGenericAllocationHandle h;
    CUmemoryPool pool;
    CUarray a1, a2, a3;
    CUmipmappedArray m;
    unsigned char buf[16] = {0};
    size_t pitch, gran;
    uint64_t base;
    void *host;

    (void)state;
    primary(0);
    base = used(0);

    assert_int_equal(cu.cuMemAlloc_v2(&p, 1), CUDA_SUCCESS);
    expect_used(0, base + 2 * MIB);
    assert_int_equal(cu.cuMemAlloc_v2(&q, 2 * MIB + 1), CUDA_SUCCESS);
    expect_used(0, base + 6 * MIB);
    assert_true(q >= p + 2 * MIB || p >= q + 4 * MIB); /* distinct ranges */
    assert_int_equal(cu.cuMemFree_v2(p), CUDA_SUCCESS);
    assert_int_equal(cu.cuMemFree_v2(q), CUDA_SUCCESS);
    expect_used(0, base);
    assert_int_equal(cu.cuMemFree_v2(p), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cu.cuMemFree_v2(0x1234), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cu.cuMemAlloc_v2(&p, 0), CUDA_ERROR_INVALID_VALUE);

    assert_int_equal(cu.cuMemAllocPitch_v2(&p, &pitch, 513, 8192, 4), CUDA_SUCCESS);
    assert_int_equal(pitch, 1024);
    expect_used(0, base + 8 * MIB);
    assert_int_equal(cu.cuMemFree_v2(p), CUDA_SUCCESS);
    assert_int_equal(cu.cuMemAllocPitch_v2(&p, &pitch, 513, 8, 3), CUDA_ERROR_INVALID_VALUE);

    assert_int_equal(cu.cuMemAllocManaged(&p, 3 * MIB, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
    expect_used(0, base + 4 * MIB);
    assert_int_equal(cu.cuMemFree_v2(p), CUDA_SUCCESS);
    assert_int_equal(cu.cuMemAllocManaged(&p, MIB, 0), CUDA_ERROR_INVALID_VALUE);

    assert_int_equal(cu.cuMemHostAlloc(&host, MIB, CU_MEMHOSTALLOC_PORTABLE), CUDA_SUCCESS);
    expect_used(0, base);
    memset(host, 0xab, MIB);
    assert_int_equal(cu.cuMemFreeHost(host), CUDA_SUCCESS);
    assert_int_equal(cu.cuMemFreeHost(buf), CUDA_ERROR_INVALID_VALUE);

    assert_int_equal(cu.cuMemAlloc_v2(&p, 4 * MIB), CUDA_SUCCESS);
    assert_int_equal(cu.cuMemsetD8_v2(p, 0, 4 * MIB), CUDA_SUCCESS);
    assert_int_equal(cu.cuMemsetD8_v2_ptds(p + MIB, 0, 3 * MIB), CUDA_SUCCESS);
    assert_int_equal(cu.cuMemsetD8_v2(p + 1, 0, 4 * MIB), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cu.cuMemcpyHtoD_v2(p, buf, sizeof(buf)), CUDA_SUCCESS);
    assert_int_equal(cu.cuMemcpyDtoH_v2(buf, p + 4 * MIB - 16, 16), CUDA_SUCCESS);
    assert_int_equal(cu.cuMemcpyDtoH_v2(buf, p + 4 * MIB - 15, 16), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cu.cuMemcpyHtoD_v2(p, NULL, 16), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cu.cuMemFree_v2(p), CUDA_SUCCESS);
    assert_int_equal(cu.cuMemsetD8_v2(p, 0, 1), CUDA_ERROR_INVALID_VALUE);

    /* Virtual memory management. */
    assert_int_equal(
        cu.cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
        CUDA_SUCCESS);
    assert_int_equal(gran, 2 * MIB);
    assert_int_equal(
        cu.cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
        CUDA_SUCCESS);
    assert_int_equal(gran, 2 * MIB);
    assert_int_equal(cu.cuMemCreate(&h, 3 * MIB, &prop, 0), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cu.cuMemCreate(&h, 4 * MIB, &prop, 0), CUDA_SUCCESS);
    expect_used(0, base + 4 * MIB);
    assert_int_equal(cu.cuMemAddressReserve(&va, 8 * MIB, 0, 0, 0), CUDA_SUCCESS);
    expect_used(0, base + 4 * MIB); /* addresses cost no memory */
    assert_int_equal(cu.cuMemMap(va, 4 * MIB, 0, h, 0), CUDA_SUCCESS);
    assert_int_equal(cu.cuMemMap(va, 4 * MIB, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cu.cuMemMap(va + 4 * MIB, 4 * MIB, 2 * MIB, h, 0), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cu.cuMemsetD8_v2(va, 1, 4 * MIB), CUDA_SUCCESS);
    assert_int_equal(cu.cuMemsetD8_v2(va + 4 * MIB, 1, 1), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cu.cuMemUnmap(va, 4 * MIB), CUDA_SUCCESS);
    assert_int_equal(cu.cuMemAddressFree(va, 8 * MIB), CUDA_SUCCESS);
    assert_int_equal(cu.cuMemRelease(h), CUDA_SUCCESS);
    expect_used(0, base);
    assert_int_equal(cu.cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);
    prop.location.id = 5;
    assert_int_equal(cu.cuMemCreate(&h, 2 * MIB, &prop, 0), CUDA_ERROR_INVALID_DEVICE);

    /* Stream-ordered memory and pools. */
    assert_int_equal(cu.cuMemAllocAsync(&p, 5 * MIB, NULL), CUDA_SUCCESS);
    expect_used(0, base + 6 * MIB);
    assert_int_equal(cu.cuMemFreeAsync(p, NULL), CUDA_SUCCESS);
    expect_used(0, base);
    assert_int_equal(cu.cuMemFreeAsync(p, NULL), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cu.cuMemAllocAsync_ptsz(&p, MIB, CU_STREAM_PER_THREAD), CUDA_SUCCESS);
    assert_int_equal(cu.cuMemFreeAsync_ptsz(p, NULL), CUDA_SUCCESS);
    assert_int_equal(cu.cuMemPoolCreate(&pool, &pool_props), CUDA_SUCCESS);
    assert_int_equal(cu.cuMemAllocFromPoolAsync(&p, MIB, pool, NULL), CUDA_SUCCESS);
    assert_int_equal(cu.cuMemAllocFromPoolAsync_ptsz(&q, MIB, pool, NULL), CUDA_SUCCESS);
    expect_used(0, base + 4 * MIB);
    assert_int_equal(cu.cuMemFreeAsync(p, NULL), CUDA_SUCCESS);
    expect_used(0, base + 2 * MIB);
    assert_int_equal(cu.cuMemPoolDestroy(pool), CUDA_SUCCESS); /* returns q's block */
    expect_used(0, base);
    assert_int_equal(cu.cuMemPoolDestroy(pool), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cu.cuMemAllocFromPoolAsync(&p, MIB, pool, NULL), CUDA_ERROR_INVALID_VALUE);

    /* Arrays: width x height x depth x channels x format bytes, rounded. */
    assert_int_equal(cu.cuArrayCreate_v2(&a2, &d2), CUDA_SUCCESS);
    expect_used(0, base + 16 * MIB);
    assert_int_equal(cu.cuArrayCreate_v2(&a1, &d1), CUDA_SUCCESS);
    expect_used(0, base + 18 * MIB);
    assert_int_equal(cu.cuArray3DCreate_v2(&a3, &d3), CUDA_SUCCESS);
    expect_used(0, base + 20 * MIB);
    /* 11 levels of 1024x1024 floats: 4 * 1398101 bytes. */
    assert_int_equal(cu.cuMipmappedArrayCreate(&m, &dm, 11), CUDA_SUCCESS);
    expect_used(0, base + 26 * MIB);
    assert_int_equal(cu.cuMipmappedArrayCreate(&m, &dm, 12), CUDA_ERROR_INVALID_VALUE);
    d1.NumChannels = 3;
    assert_int_equal(cu.cuArrayCreate_v2(&a1, &d1), CUDA_ERROR_INVALID_VALUE);
    d3.Format = 0x77;
    assert_int_equal(cu.cuArray3DCreate_v2(&a3, &d3), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cu.cuMipmappedArrayDestroy(m), CUDA_SUCCESS);
    assert_int_equal(cu.cuArrayDestroy(a1), CUDA_SUCCESS);
    assert_int_equal(cu.cuArrayDestroy(a2), CUDA_SUCCESS);
    assert_int_equal(cu.cuArrayDestroy(a3), CUDA_SUCCESS);
    expect_used(0, base);
    assert_int_equal(cu.cuArrayDestroy(a3), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cu.cuMipmappedArrayDestroy(m), CUDA_ERROR_INVALID_VALUE);
    primary_release(0);
}

/* Up to the card's free memory succeeds; past it every path fails with
 * CUDA_ERROR_OUT_OF_MEMORY and takes nothing. */
static void test_out_of_memory(void **state)
{
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}};
    CUmemPoolProps pool_props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                                 .location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}};
    CUDA_ARRAY_DESCRIPTOR d1 = {16, 16, CU_AD_FORMAT_FLOAT, 1};
    CUDA_ARRAY3D_DESCRIPTOR dm = {16, 16, 0, CU_AD_FORMAT_FLOAT, 1, 0};
    CUmemGenericAllocationHandle h;
    CUdeviceptr all, p;
    CUmemoryPool pool;
    CUmipmappedArray m;
    CUcontext ctx;
    CUarray a;
    size_t free_bytes, total, pitch;
    uint64_t base;
    void *host;

    (void)state;
    primary(0);
    base = used(0);
    assert_int_equal(cu.cuMemPoolCreate(&pool, &pool_props), CUDA_SUCCESS);
    assert_int_equal(cu.cuMemGetInfo_v2(&free_bytes, &total), CUDA_SUCCESS);
    assert_int_equal(cu.cuMemAlloc_v2(&p, free_bytes + 1), CUDA_ERROR_OUT_OF_MEMORY);
    expect_used(0, base);
    assert_int_equal(cu.cuMemAlloc_v2(&all, free_bytes - 1), CUDA_SUCCESS); /* rounds to all */
    expect_used(0, total);
    assert_int_equal(cu.cuMemAlloc_v2(&p, 1), CUDA_ERROR_OUT_OF_MEMORY);
    assert_int_equal(cu.cuMemAllocPitch_v2(&p, &pitch, 16, 16, 4), CUDA_ERROR_OUT_OF_MEMORY);
    assert_int_equal(cu.cuMemAllocManaged(&p, 1, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_OUT_OF_MEMORY);
    assert_int_equal(cu.cuMemCreate(&h, 2 * MIB, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
    assert_int_equal(cu.cuMemAllocAsync(&p, 1, NULL), CUDA_ERROR_OUT_OF_MEMORY);
    assert_int_equal(cu.cuMemAllocFromPoolAsync(&p, 1, pool, NULL), CUDA_ERROR_OUT_OF_MEMORY);
    assert_int_equal(cu.cuArrayCreate_v2(&a, &d1), CUDA_ERROR_OUT_OF_MEMORY);
    assert_int_equal(cu.cuMipmappedArrayCreate(&m, &dm, 2), CUDA_ERROR_OUT_OF_MEMORY);
    assert_int_equal(cu.cuCtxCreate_v2(&ctx, 0, 0), CUDA_ERROR_OUT_OF_MEMORY);
    expect_used(0, total);
    assert_int_equal(cu.cuMemHostAlloc(&host, MIB, 0), CUDA_SUCCESS); /* no device memory */
    assert_int_equal(cu.cuMemFreeHost(host), CUDA_SUCCESS);
    assert_int_equal(cu.cuMemFree_v2(all), CUDA_SUCCESS);
    expect_used(0, base);
    assert_int_equal(cu.cuMemPoolDestroy(pool), CUDA_SUCCESS);
    primary_release(0);
}

/* cuGetProcAddress(_v2) returns the variant the driver would for a version
 * and flags. */
static void test_proc_address(void **state)
{
    static const struct {
        const char *name;
        int version;
        cuuint64_t flags;
        const char *want; /* NULL: not found */
        CUdriverProcAddressQueryResult status;
    } cases[] = {
        {"cuMemAlloc", 12040, 0, "cuMemAlloc_v2", CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuMemAlloc", 3020, 0, "cuMemAlloc_v2", CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuMemAlloc", 3010, 0, NULL, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT},
        {"cuMemAlloc", 12040, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemAlloc_v2",
         CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuCtxCreate", 11030, 0, "cuCtxCreate_v2", CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuCtxCreate", 11040, 0, "cuCtxCreate_v3", CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuCtxCreate", 12040, 0, "cuCtxCreate_v3", CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuCtxCreate", 12050, 0, "cuCtxCreate_v4", CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuCtxCreate", 13000, 0, "cuCtxCreate_v4", CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuMemGetInfo", 12040, 0, "cuMemGetInfo_v2", CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuEventElapsedTime", 12040, 0, "cuEventElapsedTime", CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuEventElapsedTime", 12080, 0, "cuEventElapsedTime_v2", CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuDeviceGetUuid", 11030, 0, "cuDeviceGetUuid", CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuDeviceGetUuid", 11040, 0, "cuDeviceGetUuid_v2", CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuCtxSynchronize", 12040, 0, "cuCtxSynchronize", CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuCtxSynchronize", 13000, 0, "cuCtxSynchronize_v2", CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuLaunchKernel", 12040, 0, "cuLaunchKernel", CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuLaunchKernel", 12040, CU_GET_PROC_ADDRESS_LEGACY_STREAM, "cuLaunchKernel",
         CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuLaunchKernel", 12040, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
         "cuLaunchKernel_ptsz", CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuLaunchKernelEx", 12040, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
         "cuLaunchKernelEx_ptsz", CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuLaunchKernelEx", 11050, 0, NULL, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT},
        {"cuMemsetD8", 12040, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemsetD8_v2_ptds",
         CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuMemAllocAsync", 12040, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
         "cuMemAllocAsync_ptsz", CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuStreamSynchronize", 12040, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
         "cuStreamSynchronize_ptsz", CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuEventRecord", 12040, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
         "cuEventRecord_ptsz", CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuGetProcAddress", 11030, 0, "cuGetProcAddress", CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2", CU_GET_PROC_ADDRESS_SUCCESS},
        {"cuMemAlloc_v2", 12040, 0, NULL, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND},
        {"cuNoSuchFunction", 12040, 0, NULL, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND},
    };
    CUdriverProcAddressQueryResult status;
    void *fn;

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        CUresult want_r = cases[i].want != NULL ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
        void *want = cases[i].want != NULL ? dlsym(libcuda, cases[i].want) : NULL;

        if (cases[i].want != NULL && want == NULL)
            fail_msg("%s is not exported", cases[i].want);
        fn = (void *)&status; /* must be overwritten */
        status = -1;
        if (cu.cuGetProcAddress_v2(cases[i].name, &fn, cases[i].version, cases[i].flags, &status) !=
                want_r ||
            fn != want || status != cases[i].status)
            fail_msg("cuGetProcAddress_v2(%s, %d, %llu): status %d, %s", cases[i].name,
                     cases[i].version, (unsigned long long)cases[i].flags, (int)status,
                     fn == want ? "right entry" : "wrong entry");
        fn = (void *)&status;
        assert_int_equal(cu.cuGetProcAddress(cases[i].name, &fn, cases[i].version, cases[i].flags),
                         want_r);
        assert_ptr_equal(fn, want);
    }
    assert_int_equal(cu.cuGetProcAddress_v2("cuMemAlloc", &fn, 12040, 4, &status),
                     CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cu.cuGetProcAddress_v2(NULL, &fn, 12040, 0, &status),
                     CUDA_ERROR_INVALID_VALUE);
}

/* The device timeline: launches on one card serialise (two streams),
 * events measure device time, queries say NOT_READY until the work is
 * done, and synchronisation waits for it. */
static void test_timeline(void **state)
{
    CUlaunchConfig cfg = {.gridDimX = 20,
                          .gridDimY = 1,
                          .gridDimZ = 1,
                          .blockDimX = 64,
                          .blockDimY = 1,
                          .blockDimZ = 1};
    CUstream a, b;
    CUevent e0, e1, eu, ent;
    CUmodule mod;
    CUfunction slow, other;
    CUresult query, elapsed;
    uint64_t t0, t1;
    float ms;

    (void)state;
    setenv("EGPU_MOCK_CUDA_KERNEL_NS", "fast=10,slow=1000000", 1); /* slow: 1 ms per block */
    primary(0);
    assert_int_equal(cu.cuModuleLoadData(&mod, NULL), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cu.cuModuleLoadData(&mod, "any image"), CUDA_SUCCESS);
    assert_int_equal(cu.cuModuleGetFunction(&slow, mod, "slow"), CUDA_SUCCESS);
    assert_int_equal(cu.cuModuleGetFunction(&other, mod, "other"), CUDA_SUCCESS);
    assert_int_equal(cu.cuStreamCreate(&a, CU_STREAM_DEFAULT), CUDA_SUCCESS);
    assert_int_equal(cu.cuStreamCreate(&b, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    assert_int_equal(cu.cuEventCreate(&e0, CU_EVENT_DEFAULT), CUDA_SUCCESS);
    assert_int_equal(cu.cuEventCreate(&e1, CU_EVENT_BLOCKING_SYNC), CUDA_SUCCESS);
    assert_int_equal(cu.cuEventCreate(&eu, CU_EVENT_DEFAULT), CUDA_SUCCESS);
    assert_int_equal(cu.cuEventCreate(&ent, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);

    /* 50 ms on a and 50 ms on b: the card runs them one after the other. */
    t0 = now_ns();
    assert_int_equal(cu.cuEventRecord(e0, a), CUDA_SUCCESS);
    assert_int_equal(cu.cuLaunchKernel(slow, 10, 5, 1, 32, 32, 1, 0, a, NULL, NULL), CUDA_SUCCESS);
    assert_int_equal(cu.cuLaunchKernel(slow, 50, 1, 1, 1, 1, 1, 0, b, NULL, NULL), CUDA_SUCCESS);
    assert_int_equal(cu.cuEventRecord(e1, b), CUDA_SUCCESS);
    assert_int_equal(cu.cuStreamSynchronize(b), CUDA_SUCCESS);
    assert_true(now_ns() - t0 >= 100 * MS);
    assert_int_equal(cu.cuEventElapsedTime(&ms, e0, e1), CUDA_SUCCESS);
    assert_true(ms >= 99.99f && ms < 5000.0f);
    assert_int_equal(cu.cuEventElapsedTime_v2(&ms, e0, e1), CUDA_SUCCESS);
    assert_true(ms >= 99.99f);

    /* Asynchronous: a 500 ms kernel is not done when the launch returns
     * (unless this process stalled that long: then the queries may say done). */
    t0 = now_ns();
    assert_int_equal(cu.cuLaunchKernel(slow, 500, 1, 1, 1, 1, 1, 0, a, NULL, NULL), CUDA_SUCCESS);
    assert_int_equal(cu.cuEventRecord(e1, a), CUDA_SUCCESS);
    query = cu.cuEventQuery(e1);
    elapsed = cu.cuEventElapsedTime(&ms, e0, e1);
    t1 = now_ns();
    assert_true(query == CUDA_ERROR_NOT_READY || t1 - t0 >= 500 * MS);
    assert_true(elapsed == CUDA_ERROR_NOT_READY || t1 - t0 >= 500 * MS);
    assert_int_equal(cu.cuEventSynchronize(e1), CUDA_SUCCESS);
    assert_true(now_ns() - t0 >= 500 * MS);
    assert_int_equal(cu.cuEventQuery(e1), CUDA_SUCCESS);
    assert_int_equal(cu.cuEventElapsedTime(&ms, e0, e1), CUDA_SUCCESS);
    assert_true(ms >= 599.99f);

    /* cuCtxSynchronize waits for every stream; an event on the legacy
     * default stream completes after the other streams' work. */
    t0 = now_ns();
    assert_int_equal(cu.cuLaunchKernel(slow, 60, 1, 1, 1, 1, 1, 0, a, NULL, NULL), CUDA_SUCCESS);
    assert_int_equal(cu.cuLaunchKernel(slow, 60, 1, 1, 1, 1, 1, 0, b, NULL, NULL), CUDA_SUCCESS);
    assert_int_equal(cu.cuCtxSynchronize(), CUDA_SUCCESS);
    assert_true(now_ns() - t0 >= 120 * MS);
    t0 = now_ns();
    assert_int_equal(cu.cuLaunchKernel(slow, 60, 1, 1, 1, 1, 1, 0, a, NULL, NULL), CUDA_SUCCESS);
    assert_int_equal(cu.cuEventRecord(e1, NULL), CUDA_SUCCESS);
    assert_int_equal(cu.cuEventSynchronize(e1), CUDA_SUCCESS);
    assert_true(now_ns() - t0 >= 60 * MS);

    /* cuLaunchKernelEx, and the per-thread default stream. */
    t0 = now_ns();
    cfg.hStream = b;
    assert_int_equal(cu.cuLaunchKernelEx(&cfg, slow, NULL, NULL), CUDA_SUCCESS);
    assert_int_equal(cu.cuStreamSynchronize_ptsz(b), CUDA_SUCCESS);
    assert_true(now_ns() - t0 >= 20 * MS);
    t0 = now_ns();
    assert_int_equal(cu.cuLaunchKernel_ptsz(slow, 30, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL),
                     CUDA_SUCCESS);
    assert_int_equal(cu.cuEventRecord_ptsz(e1, NULL), CUDA_SUCCESS);
    assert_int_equal(cu.cuStreamSynchronize(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
    assert_true(now_ns() - t0 >= 30 * MS);
    assert_int_equal(cu.cuEventQuery(e1), CUDA_SUCCESS);

    /* Errors: timing disabled or never recorded, bad launches. */
    assert_int_equal(cu.cuEventQuery(eu), CUDA_SUCCESS);
    assert_int_equal(cu.cuEventElapsedTime(&ms, e0, eu), CUDA_ERROR_INVALID_HANDLE);
    assert_int_equal(cu.cuEventRecord(ent, a), CUDA_SUCCESS);
    assert_int_equal(cu.cuEventSynchronize(ent), CUDA_SUCCESS);
    assert_int_equal(cu.cuEventElapsedTime(&ms, e0, ent), CUDA_ERROR_INVALID_HANDLE);
    assert_int_equal(cu.cuLaunchKernel(slow, 1, 1, 1, 32, 32, 2, 0, a, NULL, NULL),
                     CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cu.cuLaunchKernel(slow, 0, 1, 1, 32, 1, 1, 0, a, NULL, NULL),
                     CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(
        cu.cuLaunchKernel((CUfunction)(uintptr_t)0x999990, 1, 1, 1, 1, 1, 1, 0, a, NULL, NULL),
        CUDA_ERROR_INVALID_HANDLE);
    assert_int_equal(
        cu.cuLaunchKernel(slow, 1, 1, 1, 1, 1, 1, 0, (CUstream)(uintptr_t)0x999990, NULL, NULL),
        CUDA_ERROR_INVALID_HANDLE);
    assert_int_equal(cu.cuLaunchKernelEx(NULL, slow, NULL, NULL), CUDA_ERROR_INVALID_VALUE);

    assert_int_equal(cu.cuEventDestroy_v2(e0), CUDA_SUCCESS);
    assert_int_equal(cu.cuEventDestroy_v2(e0), CUDA_ERROR_INVALID_HANDLE);
    assert_int_equal(cu.cuEventDestroy_v2(e1), CUDA_SUCCESS);
    assert_int_equal(cu.cuEventDestroy_v2(eu), CUDA_SUCCESS);
    assert_int_equal(cu.cuEventDestroy_v2(ent), CUDA_SUCCESS);
    assert_int_equal(cu.cuStreamDestroy_v2(a), CUDA_SUCCESS);
    assert_int_equal(cu.cuStreamDestroy_v2(b), CUDA_SUCCESS);
    assert_int_equal(cu.cuStreamSynchronize(a), CUDA_ERROR_INVALID_HANDLE);
    assert_int_equal(cu.cuModuleUnload(mod), CUDA_SUCCESS);
    assert_int_equal(cu.cuLaunchKernel(slow, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL),
                     CUDA_ERROR_INVALID_HANDLE);
    unsetenv("EGPU_MOCK_CUDA_KERNEL_NS");
    primary_release(0);
}

/* The busy percent of the second before t for one run [s, e] (ns). */
static double busy_pct(uint64_t s, uint64_t e, uint64_t t)
{
    uint64_t lo = t > 1000 * MS ? t - 1000 * MS : 0;
    uint64_t a = s > lo ? s : lo, b = e < t ? e : t;

    return b > a ? (double)(b - a) * 100.0 / (1000.0 * MS) : 0.0;
}

/* Busy time per tag (mockctl) is exactly the device time launched, counted
 * once elapsed; NVML utilisation is the busy fraction of the last second. */
static void test_busy_and_utilisation(void **state)
{
    CUmodule mod;
    CUfunction slow, other;
    struct nvml_util u;
    uint64_t t_a, t_b, run_end;
    char args[128], *text;
    void *d;
    int status;

    (void)state;
    setenv("EGPU_MOCK_CUDA_KERNEL_NS", "slow=1000000", 1);
    primary(0);
    assert_int_equal(cu.cuModuleLoadData(&mod, "x"), CUDA_SUCCESS);
    assert_int_equal(cu.cuModuleGetFunction(&slow, mod, "slow"), CUDA_SUCCESS);
    assert_int_equal(cu.cuModuleGetFunction(&other, mod, "other"), CUDA_SUCCESS);
    snprintf(args, sizeof(args), "%s reset-busy", state_path);
    free(mockctl(args, &status));
    assert_int_equal(status, 0);
    text = mockctl(state_path, &status);
    assert_int_equal(status, 0);
    assert_int_equal(field(text, "card 0 ", "busy_ns"), 0);
    free(text);

    assert_int_equal(cu.cuLaunchKernel(slow, 30, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL), CUDA_SUCCESS);
    assert_int_equal(cu.cuLaunchKernel(other, 1000, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL),
                     CUDA_SUCCESS); /* EGPU_MOCK_CUDA_BLOCK_NS's default: 1 us per block */
    assert_int_equal(cu.cuCtxSynchronize(), CUDA_SUCCESS);
    text = mockctl(state_path, &status);
    assert_int_equal(status, 0);
    assert_int_equal(field(text, "tag parent card 0 ", "busy_ns"), 31 * MS);
    assert_int_equal(field(text, "tag parent card 0 ", "launches"), 2);
    assert_int_equal(field(text, "card 0 ", "busy_ns"), 31 * MS);
    assert_int_equal(field(text, "card 0 ", "launches"), 2);
    assert_int_equal(field(text, "card 1 ", "busy_ns"), 0);
    free(text);
    assert_int_equal(cu.cuModuleUnload(mod), CUDA_SUCCESS);
    primary_release(0);

    /* 600 ms on idle card 1, then NVML's utilisation at once: 60% unless
     * this process stalled; the bounds come from the clocks read around it. */
    primary(1);
    assert_int_equal(cu.cuModuleLoadData(&mod, "x"), CUDA_SUCCESS);
    assert_int_equal(cu.cuModuleGetFunction(&slow, mod, "slow"), CUDA_SUCCESS);
    assert_int_equal(cu.cuLaunchKernel(slow, 600, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL),
                     CUDA_SUCCESS);
    assert_int_equal(cu.cuCtxSynchronize(), CUDA_SUCCESS);
    assert_int_equal(nvml.handle(1, &d), 0);
    t_a = now_ns();
    assert_int_equal(nvml.util(d, &u), 0);
    t_b = now_ns();
    text = mockctl(state_path, &status);
    run_end = (uint64_t)field(text, "card 1 ", "busy_until_ns");
    free(text);
    assert_true(run_end <= t_a);
    assert_true(u.gpu >= busy_pct(run_end - 600 * MS, run_end, t_b) - 0.5);
    assert_true(u.gpu <= busy_pct(run_end - 600 * MS, run_end, t_a) + 0.5);
    while (now_ns() < run_end + 1010 * MS)
        sleep_ms(50);
    assert_int_equal(nvml.util(d, &u), 0);
    assert_int_equal(u.gpu, 0);
    assert_int_equal(cu.cuModuleUnload(mod), CUDA_SUCCESS);
    unsetenv("EGPU_MOCK_CUDA_KERNEL_NS");
    primary_release(1);
}

/* EGPU_MOCK_CUDA_SMS: the SM count reported, and grids run in waves of
 * that many blocks (a function takes the count when it is got), so one grid
 * is shorter on a larger card; unset, 108 and blocks one after another. */
static void test_sms(void **state)
{
    static const struct {
        const char *sms;
        int reported;
        uint64_t busy_ns; /* of 1000 blocks at 100 us a wave */
    } cases[] = {
        {"132", 132, 8 * 100000},   /* ceil(1000 / 132) = 8 waves */
        {"188", 188, 6 * 100000},   /* ceil(1000 / 188) = 6 */
        {NULL, 108, 1000 * 100000}, /* unset: one block at a time */
    };
    CUmodule mod;
    CUfunction fn;
    char args[128], *text;
    int status, v;

    (void)state;
    setenv("EGPU_MOCK_CUDA_KERNEL_NS", "wave=100000", 1);
    primary(0);
    assert_int_equal(cu.cuModuleLoadData(&mod, "x"), CUDA_SUCCESS);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (cases[i].sms != NULL)
            setenv("EGPU_MOCK_CUDA_SMS", cases[i].sms, 1);
        else
            unsetenv("EGPU_MOCK_CUDA_SMS");
        assert_int_equal(cu.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0),
                         CUDA_SUCCESS);
        assert_int_equal(v, cases[i].reported);
        assert_int_equal(cu.cuModuleGetFunction(&fn, mod, "wave"), CUDA_SUCCESS);
        snprintf(args, sizeof(args), "%s reset-busy", state_path);
        free(mockctl(args, &status));
        assert_int_equal(status, 0);
        assert_int_equal(cu.cuLaunchKernel(fn, 250, 4, 1, 1, 1, 1, 0, NULL, NULL, NULL),
                         CUDA_SUCCESS);
        assert_int_equal(cu.cuCtxSynchronize(), CUDA_SUCCESS);
        text = mockctl(state_path, &status);
        assert_int_equal(status, 0);
        assert_int_equal(field(text, "card 0 ", "busy_ns"), cases[i].busy_ns);
        free(text);
    }
    assert_int_equal(cu.cuModuleUnload(mod), CUDA_SUCCESS);
    unsetenv("EGPU_MOCK_CUDA_KERNEL_NS");
    primary_release(0);
}

/* NVML's memory info (v1 and v2) is the cards' simulated memory in use, and
 * the driver's reservation (EGPU_MOCK_NVML_RESERVED_MIB) in v1's used, apart in v2. */
static void test_nvml_memory(void **state)
{
    struct nvml_memory_v2 m2 = {.version = NVML_MEMORY_V2};
    struct nvml_memory m1;
    CUdeviceptr p;
    uint64_t base;
    void *d;

    (void)state;
    primary(1);
    base = used(1);
    assert_int_equal(cu.cuMemAlloc_v2(&p, 100 * MIB), CUDA_SUCCESS);
    assert_int_equal(nvml.handle(1, &d), 0);
    assert_int_equal(nvml.memory_v2(d, &m2), 0);
    assert_int_equal(m2.total, 2048 * MIB);
    assert_int_equal(m2.used, base + 100 * MIB);
    assert_int_equal(m2.free, m2.total - m2.used);
    assert_int_equal(m2.reserved, 0);
    /* The driver's reservation: v1 counts it as used, v2 apart. */
    setenv("EGPU_MOCK_NVML_RESERVED_MIB", "480", 1);
    assert_int_equal(nvml.memory_v2(d, &m2), 0);
    assert_int_equal(m2.reserved, 480 * MIB);
    assert_int_equal(m2.used, base + 100 * MIB);
    assert_int_equal(m2.free, m2.total - 480 * MIB - m2.used);
    assert_int_equal(nvml.memory(d, &m1), 0);
    assert_int_equal(m1.used, base + 100 * MIB + 480 * MIB);
    assert_int_equal(m1.free, m2.free);
    unsetenv("EGPU_MOCK_NVML_RESERVED_MIB");
    m2.version = 1;
    assert_int_equal(nvml.memory_v2(d, &m2), 25); /* NVML_ERROR_ARGUMENT_VERSION_MISMATCH */
    assert_int_equal(cu.cuMemFree_v2(p), CUDA_SUCCESS);
    assert_int_equal(used(1), base);
    primary_release(1);
}

/* Two processes on one state file see one device memory; when one frees
 * or ends, the other sees it back. */
static void test_shared_between_processes(void **state)
{
    const char *const a_args[] = {"alloc", "-", "0", "100", NULL};
    const char *const b_args[] = {"alloc", "-", "0", "200", NULL};
    struct child a, b;
    size_t free_bytes, total;
    unsigned long long a_free;
    uint64_t base;

    (void)state;
    primary(0);
    base = used(0);
    spawn(&a, a_args);
    a_free = child_ready(&a);
    assert_int_equal(used(0), base + 400 * MIB);
    assert_int_equal(a_free, 4096 * MIB - used(0));
    assert_int_equal(cu.cuMemGetInfo_v2(&free_bytes, &total), CUDA_SUCCESS);
    assert_int_equal(free_bytes, 4096 * MIB - used(0));
    spawn(&b, b_args);
    (void)child_ready(&b);
    assert_int_equal(used(0), base + 900 * MIB);
    child_end_ok(&a);
    assert_int_equal(used(0), base + 500 * MIB);
    child_end_ok(&b);
    expect_used(0, base);
    primary_release(0);
}

/* Two processes launching under two tags: the card runs their work one
 * kernel at a time, and each tag is credited exactly its own work. */
static void test_processes_share_the_clock(void **state)
{
    const char *const a_args[] = {"launch", "-", "0", "tag-a", "5", "20", NULL};
    const char *const b_args[] = {"launch", "-", "0", "tag-b", "5", "20", NULL};
    struct child a, b;
    char args[128], *text;
    uint64_t t0;
    int status;

    (void)state;
    setenv("EGPU_MOCK_CUDA_KERNEL_NS", "slow=1000000", 1); /* 20 x 5 ms each */
    snprintf(args, sizeof(args), "%s reset-busy", state_path);
    free(mockctl(args, &status));
    assert_int_equal(status, 0);
    t0 = now_ns();
    spawn(&a, a_args);
    spawn(&b, b_args);
    child_end_ok(&a);
    child_end_ok(&b);
    assert_true(now_ns() - t0 >= 200 * MS);
    unsetenv("EGPU_MOCK_CUDA_KERNEL_NS");
    text = mockctl(state_path, &status);
    assert_int_equal(status, 0);
    assert_int_equal(field(text, "tag tag-a card 0 ", "busy_ns"), 100 * MS);
    assert_int_equal(field(text, "tag tag-a card 0 ", "launches"), 20);
    assert_int_equal(field(text, "tag tag-b card 0 ", "busy_ns"), 100 * MS);
    assert_int_equal(field(text, "card 0 ", "busy_ns"), 200 * MS);
    assert_int_equal(field(text, "card 0 ", "launches"), 40);
    free(text);
}

/* A SIGKILLed process's memory returns, before it is even reaped. */
static void test_dead_process_reclaimed(void **state)
{
    const char *const args[] = {"alloc", "-", "0", "1024", NULL};
    struct child c;
    char prefix[64], *text;
    uint64_t base, deadline;
    int status;

    (void)state;
    base = used(0);
    spawn(&c, args);
    (void)child_ready(&c);
    assert_int_equal(used(0), base + 1324 * MIB);
    text = mockctl(state_path, &status);
    snprintf(prefix, sizeof(prefix), "proc %d card 0 ", (int)c.pid);
    assert_int_equal(field(text, prefix, "used_bytes"), 1324 * MIB);
    free(text);
    assert_int_equal(kill(c.pid, SIGKILL), 0);
    deadline = now_ns() + 10000 * MS;
    while (used(0) != base && now_ns() < deadline)
        sleep_ms(5);
    assert_int_equal(used(0), base);
    text = mockctl(state_path, &status);
    assert_int_equal(field(text, prefix, "used_bytes"), -1);
    free(text);
    status = child_end(&c);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

/* Without EGPU_MOCK_CUDA_STATE a process has a machine of its own. */
static void test_private_state(void **state)
{
    const char *const args[] = {"alloc", "private", "0", "100", NULL};
    struct child c;
    unsigned long long child_free;
    uint64_t base;

    (void)state;
    base = used(0);
    spawn(&c, args);
    child_free = child_ready(&c);
    assert_int_equal(child_free, (4096 - 400) * MIB);
    assert_int_equal(used(0), base);
    child_end_ok(&c);
}

/* The child of a fork starts without CUDA state, its allocations count on
 * the shared card, and its parent's are neither lost nor taken with it. */
static void test_fork(void **state)
{
    CUdeviceptr p;
    uint64_t base;
    pid_t pid;
    int status;

    (void)state;
    primary(0);
    assert_int_equal(cu.cuMemAlloc_v2(&p, 50 * MIB), CUDA_SUCCESS);
    base = used(0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        CUcontext ctx;
        CUdeviceptr q;
        size_t free_bytes, total;

        if (cu.cuMemAlloc_v2(&q, MIB) != CUDA_ERROR_NOT_INITIALIZED)
            _exit(1);
        if (cu.cuInit(0) != CUDA_SUCCESS || cu.cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
            cu.cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
            _exit(2);
        if (cu.cuMemAlloc_v2(&q, 10 * MIB) != CUDA_SUCCESS)
            _exit(3);
        if (cu.cuMemGetInfo_v2(&free_bytes, &total) != CUDA_SUCCESS ||
            total - free_bytes != base + 310 * MIB)
            _exit(4);
        if (cu.cuMemFree_v2(p) != CUDA_ERROR_INVALID_VALUE) /* the parent's, not ours */
            _exit(5);
        _exit(0); /* without freeing: reclaimed as a dead process's */
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    expect_used(0, base);
    assert_int_equal(cu.cuMemFree_v2(p), CUDA_SUCCESS);
    expect_used(0, base - 50 * MIB);
    primary_release(0);
}

/* A process that dies holding the state's lock, in the middle of an update:
 * the next user recovers the lock and the cards' memory from the process
 * records. */
static void test_lock_holder_died(void **state)
{
    CUdeviceptr p;
    uint64_t base;
    pid_t pid;
    int status;

    (void)state;
    primary(0);
    base = used(0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct egpu_mock_dev dev;

        if (egpu_mock_dev_open(&dev, state_path, false, false) != 0 || egpu_mock_lock(&dev) != 0)
            _exit(1);
        dev.st->cards[0].used_bytes += 12345; /* half an update */
        _exit(0);
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    expect_used(0, base);
    assert_int_equal(cu.cuMemAlloc_v2(&p, MIB), CUDA_SUCCESS);
    expect_used(0, base + 2 * MIB);
    assert_int_equal(cu.cuMemFree_v2(p), CUDA_SUCCESS);
    primary_release(0);
}

/* Four processes starting at once on a new state file share one state. */
static void test_concurrent_creation(void **state)
{
    char path[128], *text;
    const char *args[] = {"alloc", path, "1", "2", NULL};
    struct child c[4];
    int status;

    (void)state;
    snprintf(path, sizeof(path), "%s/state-new", dir);
    for (int i = 0; i < 4; i++)
        spawn(&c[i], args);
    for (int i = 0; i < 4; i++)
        (void)child_ready(&c[i]);
    text = mockctl(path, &status);
    assert_int_equal(status, 0);
    assert_int_equal(field(text, "card 1 ", "used_bytes"), 4 * 302 * MIB);
    assert_int_equal(field(text, "card 1 ", "total_bytes"), 2048 * MIB);
    free(text);
    for (int i = 0; i < 4; i++)
        child_end_ok(&c[i]);
    text = mockctl(path, &status);
    assert_int_equal(field(text, "card 1 ", "used_bytes"), 0);
    free(text);
    unlink(path);
}

/* mockctl: usage errors, a missing file, a file that is not a state. */
static void test_mockctl_errors(void **state)
{
    char args[160], path[128], *text;
    struct stat sb;
    int status, fd;

    (void)state;
    free(mockctl("", &status));
    assert_int_equal(WEXITSTATUS(status), 2);
    snprintf(args, sizeof(args), "%s frobnicate", state_path);
    free(mockctl(args, &status));
    assert_int_equal(WEXITSTATUS(status), 2);
    snprintf(path, sizeof(path), "%s/missing", dir);
    free(mockctl(path, &status));
    assert_int_equal(WEXITSTATUS(status), 1);
    assert_int_not_equal(stat(path, &sb), 0); /* never created */
    snprintf(path, sizeof(path), "%s/garbage", dir);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "not a state", 11), 11);
    close(fd);
    text = mockctl(path, &status);
    assert_int_equal(WEXITSTATUS(status), 1);
    assert_string_equal(text, "");
    free(text);
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_size, 11); /* left as it was */
    unlink(path);
}

static int group_setup(void **state)
{
    (void)state;
    if (load_cuda() != 0 || load_nvml() != 0)
        return -1;
    return 0;
}

int main(int argc, char **argv)
{
    static const char *const unset[] = {
        "EGPU_MOCK_CUDA_CONTEXT_MIB", "EGPU_MOCK_CUDA_BLOCK_NS",    "EGPU_MOCK_CUDA_KERNEL_NS",
        "EGPU_MOCK_CUDA_VERSION",     "EGPU_MOCK_CUDA_SMS",         "EGPU_MOCK_NVML_FAIL",
        "EGPU_MOCK_NVML_INIT",        "EGPU_MOCK_NVML_RESERVED_MIB"};
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init),
        cmocka_unit_test(test_devices),
        cmocka_unit_test(test_contexts),
        cmocka_unit_test(test_context_stack),
        cmocka_unit_test(test_call_counts),
        cmocka_unit_test(test_memory_paths),
        cmocka_unit_test(test_out_of_memory),
        cmocka_unit_test(test_proc_address),
        cmocka_unit_test(test_timeline),
        cmocka_unit_test(test_busy_and_utilisation),
        cmocka_unit_test(test_sms),
        cmocka_unit_test(test_nvml_memory),
        cmocka_unit_test(test_shared_between_processes),
        cmocka_unit_test(test_processes_share_the_clock),
        cmocka_unit_test(test_dead_process_reclaimed),
        cmocka_unit_test(test_private_state),
        cmocka_unit_test(test_fork),
        cmocka_unit_test(test_lock_holder_died),
        cmocka_unit_test(test_concurrent_creation),
        cmocka_unit_test(test_mockctl_errors),
    };
    int r;

    if (argc > 1)
        return child_main(argc, argv);
    snprintf(dir, sizeof(dir), "/tmp/egpu-cuda-mock-XXXXXX");
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(state_path, sizeof(state_path), "%s/state", dir);
    for (size_t i = 0; i < sizeof(unset) / sizeof(unset[0]); i++)
        unsetenv(unset[i]);
    setenv("EGPU_MOCK_CUDA_STATE", state_path, 1);
    setenv("EGPU_MOCK_NVML_GPUS", GPUS, 1);
    setenv("EGPU_MOCK_CUDA_TAG", "parent", 1);
    r = cmocka_run_group_tests(tests, group_setup, NULL);
    unlink(state_path);
    rmdir(dir);
    return r;
}
