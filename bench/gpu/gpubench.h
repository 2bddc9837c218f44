/* bench/gpu/gpubench.h - what the real-GPU benchmarks (bench_gpu_mem, bench_gpu_compute,
 * bench_gpu_overhead) share: loading the CUDA driver at run time through one of three lookup
 * paths, the skip test for machines without a GPU, the hand-written PTX kernels, worker child
 * processes spoken to over pipes, temporary allocation directories, clocks and an instruction
 * counter.
 *
 * Nothing here needs the CUDA toolkit: the ABI comes from "egpu/cuda_abi.h" and the driver is
 * opened with dlopen. Private to bench/gpu; not installed. Functions that can fail return 0 or
 * a negative errno and, where they take one, write a one-line reason into a caller-owned
 * buffer (why, whylen bytes).
 */
#ifndef EGPU_BENCH_GPUBENCH_H
#define EGPU_BENCH_GPUBENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "egpu/cuda_abi.h"

/* How the program finds the driver's entry points (the interposer must hook each). */
enum gpubench_lookup {
    GPUBENCH_DIRECT, /* dlsym(RTLD_DEFAULT, "cuMemAlloc_v2") after dlopen(RTLD_GLOBAL): what a
                      * program linked with -lcuda binds to; an LD_PRELOADed interposer's
                      * exported wrapper comes first */
    GPUBENCH_DLSYM,  /* dlsym(dlopen("libcuda.so.1"), "cuMemAlloc_v2") */
    GPUBENCH_PROC,   /* cuGetProcAddress_v2("cuMemAlloc", driver version), as CUDA 12+ runtimes
                      * do; cuGetProcAddress_v2 itself comes from dlsym */
};

/* The driver entry points the benchmarks call, resolved by gpubench_cuda_open. Fields marked
 * "optional" are NULL when the driver lacks them; the others are always set. */
struct gpubench_cuda {
    void *lib;                   /* dlopen handle of the driver library */
    enum gpubench_lookup lookup; /* how the fields below were resolved */
    int driver_version;          /* cuDriverGetVersion: 1000 * major + 10 * minor */
    CUresult (*init)(unsigned int flags);
    CUresult (*driver_get_version)(int *version);
    CUresult (*get_error_name)(CUresult error, const char **str); /* optional */
    CUresult (*device_get)(CUdevice *dev, int ordinal);
    CUresult (*device_get_count)(int *count);
    CUresult (*device_get_name)(char *name, int len, CUdevice dev);
    CUresult (*device_get_uuid)(CUuuid *uuid, CUdevice dev);
    CUresult (*device_total_mem)(size_t *bytes, CUdevice dev);
    CUresult (*device_get_attribute)(int *value, CUdevice_attribute attr, CUdevice dev);
    CUresult (*primary_ctx_retain)(CUcontext *ctx, CUdevice dev);
    CUresult (*primary_ctx_release)(CUdevice dev);
    CUresult (*ctx_set_current)(CUcontext ctx);
    CUresult (*ctx_synchronize)(void);
    CUresult (*ctx_create_v2)(CUcontext *ctx, unsigned int flags, CUdevice dev); /* optional */
    CUresult (*ctx_create_v4)(CUcontext *ctx, CUctxCreateParams *params, unsigned int flags,
                              CUdevice dev); /* optional */
    CUresult (*ctx_destroy)(CUcontext ctx);
    CUresult (*mem_get_info)(size_t *free_bytes, size_t *total_bytes);
    CUresult (*mem_alloc)(CUdeviceptr *dptr, size_t bytes);
    CUresult (*mem_alloc_pitch)(CUdeviceptr *dptr, size_t *pitch, size_t width_bytes, size_t height,
                                unsigned int element_bytes);
    CUresult (*mem_alloc_managed)(CUdeviceptr *dptr, size_t bytes, unsigned int flags);
    CUresult (*mem_free)(CUdeviceptr dptr);
    CUresult (*mem_get_allocation_granularity)(size_t *granularity, const CUmemAllocationProp *prop,
                                               CUmemAllocationGranularity_flags option);
    CUresult (*mem_create)(CUmemGenericAllocationHandle *handle, size_t bytes,
                           const CUmemAllocationProp *prop, unsigned long long flags);
    CUresult (*mem_release)(CUmemGenericAllocationHandle handle);
    CUresult (*mem_alloc_async)(CUdeviceptr *dptr, size_t bytes, CUstream stream);
    CUresult (*mem_free_async)(CUdeviceptr dptr, CUstream stream);
    CUresult (*mem_pool_create)(CUmemoryPool *pool, const CUmemPoolProps *props);
    CUresult (*mem_pool_destroy)(CUmemoryPool pool);
    CUresult (*mem_alloc_from_pool_async)(CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool,
                                          CUstream stream);
    CUresult (*mem_pool_set_attribute)(CUmemoryPool pool, CUmemPool_attribute attr, void *value);
    CUresult (*mem_pool_trim_to)(CUmemoryPool pool, size_t min_bytes_to_keep);
    CUresult (*array_create)(CUarray *array, const CUDA_ARRAY_DESCRIPTOR *desc);
    CUresult (*array3d_create)(CUarray *array, const CUDA_ARRAY3D_DESCRIPTOR *desc);
    CUresult (*array_destroy)(CUarray array);
    CUresult (*mipmapped_array_create)(CUmipmappedArray *array, const CUDA_ARRAY3D_DESCRIPTOR *desc,
                                       unsigned int levels);
    CUresult (*mipmapped_array_destroy)(CUmipmappedArray array);
    CUresult (*module_load_data)(CUmodule *module, const void *image);
    CUresult (*module_unload)(CUmodule module);
    CUresult (*module_get_function)(CUfunction *fn, CUmodule module, const char *name);
    CUresult (*launch_kernel)(CUfunction fn, unsigned int grid_x, unsigned int grid_y,
                              unsigned int grid_z, unsigned int block_x, unsigned int block_y,
                              unsigned int block_z, unsigned int shared_bytes, CUstream stream,
                              void **params, void **extra);
    CUresult (*stream_create)(CUstream *stream, unsigned int flags);
    CUresult (*stream_synchronize)(CUstream stream);
    CUresult (*stream_destroy)(CUstream stream);
    CUresult (*event_create)(CUevent *event, unsigned int flags);
    CUresult (*event_record)(CUevent event, CUstream stream);
    CUresult (*event_synchronize)(CUevent event);
    CUresult (*event_elapsed_time)(float *ms, CUevent start, CUevent end);
    CUresult (*event_destroy)(CUevent event);
};

/* The NVML calls used to read a card's memory as nvidia-smi does (NVML API, nvml.h; the
 * interposer hooks nvmlDeviceGetMemoryInfo). Return values are nvmlReturn_t (0 = success). */
struct gpubench_nvml_memory { /* nvmlMemory_t, bytes */
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
};

struct gpubench_nvml_utilization { /* nvmlUtilization_t, percent over NVML's last sample */
    unsigned int gpu;
    unsigned int memory;
};

struct gpubench_nvml {
    void *lib; /* dlopen handle of libnvidia-ml.so.1 */
    int (*init)(void);
    int (*device_get_count)(unsigned int *count);
    int (*device_get_handle_by_index)(unsigned int index, void **device);
    int (*device_get_uuid)(void *device, char *uuid, unsigned int len);
    int (*device_get_memory_info)(void *device, struct gpubench_nvml_memory *memory);
    int (*device_get_utilization_rates)(void *device,
                                        struct gpubench_nvml_utilization *u); /* optional */
};

/* A worker child process: its stdin carries commands, its stdout one reply line per command;
 * its stderr is the parent's (the interposer logs there). */
struct gpubench_child {
    pid_t pid;   /* 0 once reaped */
    int to_fd;   /* write end of the child's stdin, -1 when closed */
    int from_fd; /* read end of the child's stdout, -1 when closed */
    size_t len;  /* bytes buffered in buf */
    char buf[4096];
};

/* Instruction counter of the calling thread, user space only (perf_event_open,
 * PERF_COUNT_HW_INSTRUCTIONS); fd -1 when the kernel refuses it. */
struct gpubench_icount {
    int fd;
    char why[128]; /* why the counter is unavailable, "" when it works */
};

/* Hardware counters of the calling thread, user space only (perf_event_open): what a call
 * costs the CPU beyond its instructions. fd[i] is -1 when the kernel refuses counter i. */
#define GPUBENCH_PMU_EVENTS 5 /* cycles, L1i misses, L1d misses, iTLB misses, dTLB misses */
struct gpubench_pmu {
    int fd[GPUBENCH_PMU_EVENTS];
    char why[128]; /* why a counter is unavailable, "" when every one works */
};

/* ---- Driver ---- */

/* Parses "direct", "dlsym" or "proc" into *out. Returns 0 or -EINVAL. */
int gpubench_lookup_parse(const char *s, enum gpubench_lookup *out);

/* The name of a lookup path ("direct", "dlsym", "proc"); static storage. */
const char *gpubench_lookup_name(enum gpubench_lookup lookup);

/* Opens the driver library (env EGPU_GPUBENCH_LIBCUDA, default "libcuda.so.1"; dlopen,
 * RTLD_GLOBAL for the direct path) and resolves every field of *cu by the lookup path. Does
 * not call cuInit. Returns 0; -ENOENT when the library cannot be opened; -ENOSYS when a
 * required entry point is missing. why (whylen bytes) gets a one-line reason. On failure *cu
 * holds no open handle. The handle is never closed (the driver stays loaded until exit). */
int gpubench_cuda_open(struct gpubench_cuda *cu, enum gpubench_lookup lookup, char *why,
                       size_t whylen);

/* The CUDA error name of rc ("CUDA_ERROR_OUT_OF_MEMORY"), or "CUresult <n>" when unknown,
 * from cuGetErrorName when the driver has it. Returns a pointer to static or thread-local
 * storage, valid until the next call from the same thread. */
const char *gpubench_cu_name(const struct gpubench_cuda *cu, CUresult rc);

/* The skip test: true when the driver opens, cuInit(0) succeeds and cuDeviceGetCount reports
 * at least one device. When false, why (whylen bytes) says which step failed, e.g.
 * "dlopen libcuda.so.1: ... cannot open shared object file" or
 * "cuInit: CUDA_ERROR_NO_DEVICE". */
bool gpubench_has_gpu(char *why, size_t whylen);

/* Retains the primary context of device ordinal and makes it current; *dev gets the
 * device. Returns 0 or -EIO with why filled. */
int gpubench_cuda_attach(const struct gpubench_cuda *cu, int ordinal, CUdevice *dev, CUcontext *ctx,
                         char *why, size_t whylen);

/* Formats the device's UUID as NVML does ("GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx") into
 * out (len >= 41 bytes). Returns 0 or -EIO. */
int gpubench_cuda_uuid(const struct gpubench_cuda *cu, CUdevice dev, char *out, size_t len);

/* ---- NVML (optional everywhere) ---- */

/* Opens libnvidia-ml.so.1 and resolves *nv the way lookup says (direct: RTLD_DEFAULT after
 * RTLD_GLOBAL; dlsym and proc: dlsym on the handle, NVML has no cuGetProcAddress), then
 * nvmlInit_v2. Returns 0 or -ENOENT / -ENOSYS / -EIO with why filled. */
int gpubench_nvml_open(struct gpubench_nvml *nv, enum gpubench_lookup lookup, char *why,
                       size_t whylen);

/* Finds the NVML device whose UUID is uuid (CUDA and NVML may number cards differently).
 * Returns 0, -ENODEV when no device has that UUID, -EIO when an NVML call fails. */
int gpubench_nvml_find(const struct gpubench_nvml *nv, const char *uuid, void **device);

/* Reads the memory info of the NVML device whose UUID is uuid. Returns 0, -ENODEV, -EIO. */
int gpubench_nvml_memory(const struct gpubench_nvml *nv, const char *uuid,
                         struct gpubench_nvml_memory *out);

/* ---- Kernels ---- */

/* Loads the benchmark module from PTX text, trying PTX ISA 7.0 / sm_52 first (old enough for
 * any driver of CUDA 11.0 or later to JIT for any newer GPU) and then 7.0 / sm_75, 8.0 / sm_90
 * for drivers that no longer JIT older targets. *used gets the variant that loaded
 * ("7.0/sm_52"; static storage). The module has two kernels:
 *   egpu_spin_cycles(u64 cycles): every thread spins until %clock64 has advanced by cycles;
 *   egpu_spin_iters(u32 iters, u64 sink): every thread runs iters dependent integer
 *     multiply-adds and stores the result to sink when sink != 0; its duration is fixed work,
 *     not wall time, so a kernel that is time-sliced with another context still does the
 *     same amount of work.
 * Returns 0 or -EIO with why filled. */
int gpubench_module_load(const struct gpubench_cuda *cu, CUmodule *module, const char **used,
                         char *why, size_t whylen);

/* ---- Worker processes ---- */

/* Starts /proc/self/exe with argv (argv[0] is its name) in a child whose environment is this
 * process's, minus every variable named in unset (an entry ending in '*' is a prefix, e.g.
 * "EGPU_VCUDA_*"), plus every "KEY=VALUE" in set (both NULL-terminated, either may be NULL).
 * Returns 0 or -errno. */
int gpubench_child_start(struct gpubench_child *c, char *const argv[], const char *const *set,
                         const char *const *unset);

/* Sends one command line (printf format; a '\n' is appended). Returns 0 or -errno
 * (-EPIPE when the child has gone). */
int gpubench_child_send(struct gpubench_child *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Reads one reply line into line (len bytes, without the '\n'), waiting at most timeout_ms.
 * Returns 0, -ETIMEDOUT, -EPIPE (the child closed its stdout, e.g. it died), -EMSGSIZE. */
int gpubench_child_recv(struct gpubench_child *c, char *line, size_t len, int timeout_ms);

/* Closes the pipes and reaps the child, waiting at most timeout_ms before killing it with
 * SIGKILL. *status (optional) gets the waitpid status. Returns 0 when it exited with status 0,
 * -ETIMEDOUT when it had to be killed, -ECHILD when it exited otherwise. */
int gpubench_child_wait(struct gpubench_child *c, int timeout_ms, int *status);

/* Kills the child with SIGKILL and reaps it at once (so no zombie keeps its pid alive). */
void gpubench_child_kill(struct gpubench_child *c);

/* What a worker gets unset unless the program sets it: the preload and the limit keys
 * (EGPU_VCUDA_CONTEXT_MIB, _CONTEXT_EXTRA_MIB and _LOG_LEVEL pass through). NULL-terminated. */
extern const char *const gpubench_limit_env[];

/* Runs a worker that answers with one line and exits: gpubench_child_start(argv, set,
 * gpubench_limit_env), its line read into line (len bytes) within timeout_ms, which must start
 * with "ok ", then reaped within exit_ms. Returns 0; else -errno with line saying why (the
 * worker's own "err ..." line, "no reply: ...", or "cannot start a worker: ..."), the worker
 * killed. */
int gpubench_worker_once(char *const argv[], const char *const *set, int timeout_ms, int exit_ms,
                         char *line, size_t len);

/* The median of v[0..n) (sorts v in place); -1 when n is 0. */
double gpubench_median(double *v, size_t n);

/* A numeric flag: its name and where its uint64_t lives in a program's options struct. */
struct gpubench_num_flag {
    const char *name; /* "--rounds" */
    size_t off;       /* offsetof(struct options, rounds) */
    uint64_t min, max;
};

/* If flag is one of flags[0..n), parses val (decimal, min..max) into the uint64_t at
 * (char *)opts + its off. Returns 1 when it was one and parsed, 0 when it is none of them,
 * -EINVAL when it was one and val is bad. */
int gpubench_num_flag(const struct gpubench_num_flag *flags, size_t n, const char *flag,
                      const char *val, void *opts);

/* Finds " key=" in a reply line and parses its value. Return 0, -ENOENT, -EINVAL. */
/* A worker's answer to its parent: one printf-formatted line on stdout,
 * flushed at once (the parent reads it with gpubench_child_recv). */
void gpubench_reply(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

int gpubench_kv_u64(const char *line, const char *key, uint64_t *out);
int gpubench_kv_i64(const char *line, const char *key, int64_t *out);
int gpubench_kv_f64(const char *line, const char *key, double *out);

/* Copies the value of " key=" (up to the next space) into out (len bytes). Returns 0,
 * -ENOENT, -EMSGSIZE. */
int gpubench_kv_str(const char *line, const char *key, char *out, size_t len);

/* ---- Helpers ---- */

/* A fresh directory under $TMPDIR (default /tmp), "egpu-gpubench-XXXXXX", written to out
 * (len bytes). Returns 0 or -errno. */
int gpubench_tmpdir_make(char *out, size_t len);

/* Removes the files in dir, then dir itself (the interposer's regions live there; nothing
 * deeper is expected). Errors are ignored: a leftover directory under /tmp is harmless. */
void gpubench_tmpdir_remove(const char *dir);

/* The interposer library to preload: arg when not NULL, else env EGPU_GPUBENCH_VCUDA, else
 * the build-time default, else the agent's install path. Static storage or arg. */
const char *gpubench_vcuda_path(const char *arg);

/* gpubench_vcuda_path(arg) when that file is readable; else NULL, with one
 * line on stderr naming prog, the path and what to do. */
const char *gpubench_vcuda_usable(const char *prog, const char *arg);

/* CLOCK_MONOTONIC in nanoseconds (one clock for every process of the machine). */
uint64_t gpubench_now_ns(void);

/* Sleeps until CLOCK_MONOTONIC reaches t_ns. */
void gpubench_sleep_until(uint64_t t_ns);

/* Strict decimal parse of s into *out within [min, max]. Returns 0 or -EINVAL. */
int gpubench_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out);

/* Opens the instruction counter (disabled). Never fails: ic->fd is -1 and ic->why says why
 * when the kernel refuses (perf_event_paranoid, no PMU in a VM). */
void gpubench_icount_open(struct gpubench_icount *ic);
void gpubench_icount_start(struct gpubench_icount *ic);
/* Stops counting and returns the instructions since the last start, or -1 when unavailable. */
int64_t gpubench_icount_stop(struct gpubench_icount *ic);
void gpubench_icount_close(struct gpubench_icount *ic);

/* What the interposer's compute controller did in one worker, from the line it logs at exit at
 * info level ("compute limit at exit timed=... ", src/vcuda/hooks.c): launches timed with
 * events (7 driver calls each), cuCtxGetCurrent calls (the launch path's context comes from a
 * per-thread cache), first tries refused on the coarse clock and retried, launches that slept
 * for the bucket or the queue, and launches let through a queue that did not drain. */
struct gpubench_vcuda_stats {
    double timed, collected, lost, ctx_queries, retries, bucket_sleeps, queue_sleeps, queue_forced;
};

/* Worker side: sends this process's stderr (the interposer's log) to path, created or
 * truncated. Returns 0 or -errno. */
int gpubench_stderr_to(const char *path);

/* Parent side: adds the controller's figures from the worker's stderr file path (a worker
 * run with EGPU_VCUDA_LOG_LEVEL=info and gpubench_stderr_to(path)) into *sum, and copies the
 * file's other lines to stderr (the worker's own messages). Returns 0, -ENOENT when the file
 * holds no such line (the worker was not throttled, or did not exit), or -errno. */
int gpubench_vcuda_stats_add(const char *path, struct gpubench_vcuda_stats *sum);

/* Prints one line: "controller, <label>: per launch ..." from s summed over launches
 * launches: each figure per launch, and the driver calls the controller made per launch
 * besides the launch itself (7 per timed launch, and the context queries). */
void gpubench_vcuda_stats_print(const char *label, const struct gpubench_vcuda_stats *s,
                                double launches);

/* The counters' names, for tables: "cycles", "L1i miss", "L1d miss", "iTLB miss", "dTLB miss". */
extern const char *const gpubench_pmu_names[GPUBENCH_PMU_EVENTS];

/* Opens the counters (disabled). Never fails: a counter the kernel or the CPU refuses (no PMU
 * in a VM, perf_event_paranoid, an event the CPU lacks) has fd -1, and p->why says why. */
void gpubench_pmu_open(struct gpubench_pmu *p);
void gpubench_pmu_start(struct gpubench_pmu *p);
/* Stops counting; out[i] is counter i since the last start (scaled up when the kernel shared
 * the hardware counter with others), or -1 when unavailable. */
void gpubench_pmu_stop(struct gpubench_pmu *p, double out[GPUBENCH_PMU_EVENTS]);
void gpubench_pmu_close(struct gpubench_pmu *p);

/* The one line every program prints when the machine has no usable GPU, then exit 0. */
#define GPUBENCH_SKIP_FMT "no NVIDIA GPU: %s; skipping\n"

#endif /* EGPU_BENCH_GPUBENCH_H */
