/* vcuda/hooks.c - interposition: initialisation, the real entry points,
 * cuGetProcAddress, fork and exit, and which CUDA device is which card.
 *
 * The library is loaded into every process of a shared-GPU container
 * (LD_PRELOAD or /etc/ld.so.preload), most of which never touch CUDA, so
 * loading it does nothing: the first call of a hooked function reads the
 * configuration (once, pthread_once), and the first CUDA call loads
 * libcuda.so.1 (dlopen RTLD_NOW|RTLD_LOCAL, which finds the copy the
 * application already has) and resolves every real entry point with the
 * real dlsym. NVML is loaded the same way on the first NVML call.
 *
 * Lookup paths, all giving the same wrapper for a hooked symbol:
 *   - direct calls: the preloaded library's definitions come first;
 *   - dlsym (dlsym.c): a hooked name gives the wrapper, whatever the handle;
 *   - cuGetProcAddress and _v2 (CUDA 11.3+ runtimes look everything up that
 *     way, with a version and flags): the real call resolves the version and
 *     per-thread-stream flags exactly as the driver does, and when the
 *     pointer it returns is the real entry of a hooked symbol, the wrapper
 *     replaces it.
 *
 * No configuration is no licence: a process that cannot read and verify
 * its configuration (no vcuda.conf, no EGPU_VCUDA_* limits, or a broken
 * one) says so once on stderr and is refused every CUDA call: cuInit gets
 * CUDA_ERROR_NOT_PERMITTED, libcuda.so.1 and libnvidia-ml.so.1 are never
 * loaded (so every other hooked call gets CUDA_ERROR_NOT_INITIALIZED, and
 * the driver, never initialised, refuses the unhooked ones the same way).
 * The library is only ever preloaded into shared-GPU containers, so a
 * missing file there means the allocation directory was hidden or never
 * mounted (docs/security.md), never "no limit". And when the agent's
 * /etc/ld.so.preload names the library (preload.c), the environment is no
 * source at all: with /etc/elastic-gpu hidden, EGPU_VCUDA_DIR pointing at a
 * vcuda.conf of the tenant's or EGPU_VCUDA_* limits of its own change
 * nothing, and every CUDA call is refused the same.
 *
 * fork: the child forgets the parent's usage, slot and counted objects (its
 * device memory is its own; the parent's stays the parent's) and takes a
 * slot of its own on first use. At exit a process gives its slot back.
 */
#define _GNU_SOURCE /* dlvsym, RTLD_NEXT */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "egpu/log.h"
#include "hooks.h"
#include "throttle.h"

#ifndef EGPU_VCUDA_DEFAULT_DIR
#define EGPU_VCUDA_DEFAULT_DIR "/etc/elastic-gpu"
#endif

extern char **environ;

struct egpu__vcuda_real egpu__vcuda_real;
struct egpu__vcuda_helpers egpu__vcuda_helpers;
struct egpu__vcuda_state egpu__vcuda_state;

static const struct egpu__vcuda_hook hooks[] = {
#define EGPU_VCUDA_ROW(lib, name) \
    {#name, EGPU_VCUDA_LIB_##lib, (void *)name, &egpu__vcuda_real.name},
    EGPU_VCUDA_HOOKS(EGPU_VCUDA_ROW)
#undef EGPU_VCUDA_ROW
};

#define NHOOKS (sizeof(hooks) / sizeof(hooks[0]))

static pthread_once_t config_once = PTHREAD_ONCE_INIT;
static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;
static pthread_once_t nvml_once = PTHREAD_ONCE_INIT;
static atomic_bool config_done, cuda_done, nvml_done;
static _Thread_local bool in_init; /* this thread is inside one of the onces */
static void *cuda_lib, *nvml_lib;
static bool any_limit;
static bool refused; /* no usable configuration: every CUDA call is refused */
static pthread_mutex_t devices_mu = PTHREAD_MUTEX_INITIALIZER;

const struct egpu__vcuda_hook *egpu__vcuda_hook_find(const char *name)
{
    /* All hooked names start "cu" or "nvml": most lookups leave at once. */
    if (name[0] != 'c' && name[0] != 'n')
        return NULL;
    for (size_t i = 0; i < NHOOKS; i++) {
        if (strcmp(hooks[i].name, name) == 0)
            return &hooks[i];
    }
    return NULL;
}

static void set_component(void)
{
    char name[64];

    snprintf(name, sizeof(name), "egpu-vcuda[%ld]", (long)getpid());
    egpu_log_set_component(name);
}

/* fork(2): lock what the child copies, so it copies it whole. */
/* Lock order: devices_mu, then memory.c's locks, then the region's. */
static void atfork_prepare(void)
{
    pthread_mutex_lock(&devices_mu);
    egpu__vcuda_memory_atfork_prepare();
    egpu__vcuda_region_atfork_prepare(egpu__vcuda_state.region);
}

static void atfork_parent(void)
{
    egpu__vcuda_region_atfork_parent(egpu__vcuda_state.region);
    egpu__vcuda_memory_atfork_parent();
    pthread_mutex_unlock(&devices_mu);
}

static void atfork_child(void)
{
    set_component();
    egpu__vcuda_region_atfork_child(egpu__vcuda_state.region);
    egpu__vcuda_memory_atfork_child();
    pthread_mutex_unlock(&devices_mu);
    egpu__vcuda_throttle_atfork_child();
}

/* Whether this library was loaded through the agent's ld.so.preload: the
 * list at EGPU_VCUDA_PRELOAD_PATH names it. $EGPU_LD_SO_PRELOAD names
 * another list read the same way (for tests, which cannot write the host's
 * /etc/ld.so.preload): it can only add this answer, never take it away. */
static bool agent_preloaded(void)
{
    const char *extra = getenv("EGPU_LD_SO_PRELOAD");
    Dl_info self;

    if (dladdr((void *)&agent_preloaded, &self) == 0 || self.dli_fname == NULL)
        return false;
    return egpu__vcuda_preloaded(EGPU_VCUDA_PRELOAD_PATH, self.dli_fname) ||
           (extra != NULL && egpu__vcuda_preloaded(extra, self.dli_fname));
}

static void config_init(void)
{
    struct egpu__vcuda_state *st = &egpu__vcuda_state;
    struct egpu__vcuda_config *cfg = &st->cfg;
    struct egpu_error err = {0};
    bool managed;
    int rc;

    in_init = true;
    set_component();
    egpu_log_level = EGPU_LOG_WARN;
    for (int i = 0; i < EGPU_VCUDA_MAX_CARDS; i++)
        st->dev_card[i] = -1;
    managed = agent_preloaded();
    /* Loaded by the agent's ld.so.preload: only the agent's file counts. */
    rc = egpu__vcuda_config_load(cfg, EGPU_VCUDA_DEFAULT_DIR, managed ? NULL : environ, &err);
    egpu_log_level = cfg->log_level;
    if (rc == 0 && cfg->source == EGPU_VCUDA_SRC_NONE && managed)
        rc = egpu_error_set(&err, -ENOENT,
                            "no configuration: no %s/%s (the agent's read-only allocation "
                            "directory), and %s loads the interposer, so no $EGPU_VCUDA_DIR or "
                            "EGPU_VCUDA_* variable stands in for it",
                            EGPU_VCUDA_DEFAULT_DIR, EGPU_VCUDA_CONF_NAME, EGPU_VCUDA_PRELOAD_PATH);
    else if (rc == 0 && cfg->source == EGPU_VCUDA_SRC_NONE)
        rc = egpu_error_set(&err, -ENOENT,
                            "no configuration: no %s/%s (the agent's read-only allocation "
                            "directory), no $EGPU_VCUDA_DIR/%s and no EGPU_VCUDA_* limits",
                            EGPU_VCUDA_DEFAULT_DIR, EGPU_VCUDA_CONF_NAME, EGPU_VCUDA_CONF_NAME);
    if (rc) {
        /* Hidden, missing or damaged: no limit is known, so nothing runs. */
        egpu_log(EGPU_LOG_ERROR,
                 "%s; refusing every CUDA call (cuInit returns CUDA_ERROR_NOT_PERMITTED)", err.msg);
        refused = true;
        in_init = false;
        atomic_store_explicit(&config_done, true, memory_order_release);
        return;
    }
    any_limit = cfg->has_memory || cfg->has_core;
    st->memory = cfg->has_memory;
    st->limit_bytes = cfg->memory_mib << 20;
    st->ctx_bytes = cfg->context_mib << 20;
    st->ctx_extra_bytes = cfg->ctx_extra_mib << 20;
    if (st->memory) {
        rc = egpu__vcuda_region_open(&st->region, cfg->region_dir, &err);
        if (rc) {
            /* No region private to the process instead: N processes would
             * get N times the limit (a link planted at the file's name was
             * enough). What the others use is unknown, so nothing may be
             * allocated on the limited cards. */
            egpu_log(EGPU_LOG_ERROR,
                     "%s; failing closed: every allocation on the limited cards gets "
                     "CUDA_ERROR_OUT_OF_MEMORY",
                     err.msg);
            st->region = NULL;
        }
    }
    if (any_limit) {
        char gpus[EGPU_VCUDA_MAX_CARDS * (EGPU_VCUDA_UUID_STR_MAX + 1)] = "";
        size_t used = 0;

        for (unsigned i = 0; i < cfg->ngpus; i++) {
            char u[EGPU_VCUDA_UUID_STR_MAX];

            used += (size_t)snprintf(gpus + used, sizeof(gpus) - used, "%s%s", i ? "," : "",
                                     egpu__vcuda_uuid_format(&cfg->gpus[i], u));
        }
        char memory[32];

        if (cfg->has_memory)
            snprintf(memory, sizeof(memory), "%llu", (unsigned long long)cfg->memory_mib);
        else
            snprintf(memory, sizeof(memory), "none");
        egpu_log(EGPU_LOG_INFO,
                 "limits source=%s dir=%s regions=%s gpus=%s memory_mib=%s core_pct=%u "
                 "core_limit_pct=%u context_mib=%llu context_extra_mib=%llu",
                 cfg->source == EGPU_VCUDA_SRC_FILE ? "file" : "env", cfg->dir, cfg->region_dir,
                 cfg->ngpus ? gpus : "all", memory, cfg->core_pct, cfg->core_limit_pct,
                 (unsigned long long)cfg->context_mib, (unsigned long long)cfg->ctx_extra_mib);
        pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
    }
    in_init = false;
    atomic_store_explicit(&config_done, true, memory_order_release);
}

CUresult egpu__vcuda_ctx_changed(CUresult r)
{
    egpu__vcuda_throttle_ctx_changed();
    return r;
}

bool egpu__vcuda_config_ready(void)
{
    if (!atomic_load_explicit(&config_done, memory_order_acquire)) {
        if (in_init)
            return false;
        pthread_once(&config_once, config_init);
    }
    return any_limit;
}

bool egpu__vcuda_refused(void)
{
    (void)egpu__vcuda_config_ready();
    return refused;
}

/* Resolve name in lib with the real dlsym; NULL when absent. */
static void *resolve(void *lib, const char *name)
{
    return lib ? egpu__vcuda_real_dlsym(lib, name) : NULL;
}

static void resolve_lib(void *lib, int which)
{
    for (size_t i = 0; i < NHOOKS; i++) {
        if (hooks[i].lib == which)
            __atomic_store_n(hooks[i].real, resolve(lib, hooks[i].name), __ATOMIC_RELAXED);
    }
}

#define HELPER(field, lib, name) \
    (egpu__vcuda_helpers.field = (__typeof__(egpu__vcuda_helpers.field))resolve((lib), (name)))

static void cuda_init(void)
{
    void *lib;

    (void)egpu__vcuda_config_ready();
    if (refused) { /* every slot stays NULL: every hooked call is refused */
        atomic_store_explicit(&cuda_done, true, memory_order_release);
        return;
    }
    in_init = true;
    lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL)
        egpu_log(EGPU_LOG_WARN, "cannot load libcuda.so.1: %s", dlerror());
    resolve_lib(lib, EGPU_VCUDA_LIB_CUDA);
    HELPER(ctx_get_device, lib, "cuCtxGetDevice");
    HELPER(ctx_get_current, lib, "cuCtxGetCurrent");
    HELPER(device_get, lib, "cuDeviceGet");
    HELPER(device_get_count, lib, "cuDeviceGetCount");
    HELPER(device_get_uuid, lib, "cuDeviceGetUuid");
    HELPER(event_create, lib, "cuEventCreate");
    HELPER(event_record, lib, "cuEventRecord");
    HELPER(event_elapsed_time, lib, "cuEventElapsedTime");
    HELPER(event_destroy, lib, "cuEventDestroy_v2");
    HELPER(exchange_capture_mode, lib, "cuThreadExchangeStreamCaptureMode");
    HELPER(stream_is_capturing, lib, "cuStreamIsCapturing");
    HELPER(stream_query, lib, "cuStreamQuery");
    HELPER(pool_get_attribute, lib, "cuMemPoolGetAttribute");
    HELPER(device_get_mem_pool, lib, "cuDeviceGetMemPool");
    HELPER(ctx_synchronize, lib, "cuCtxSynchronize");
    HELPER(device_get_name, lib, "cuDeviceGetName");
    cuda_lib = lib;
    in_init = false;
    atomic_store_explicit(&cuda_done, true, memory_order_release);
}

bool egpu__vcuda_cuda(void)
{
    if (!atomic_load_explicit(&cuda_done, memory_order_acquire)) {
        if (in_init)
            return false;
        pthread_once(&cuda_once, cuda_init);
    }
    return cuda_lib != NULL;
}

static void nvml_init(void)
{
    void *lib;

    (void)egpu__vcuda_config_ready();
    if (refused) {
        atomic_store_explicit(&nvml_done, true, memory_order_release);
        return;
    }
    in_init = true;
    lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL)
        egpu_log(EGPU_LOG_WARN, "cannot load libnvidia-ml.so.1: %s", dlerror());
    resolve_lib(lib, EGPU_VCUDA_LIB_NVML);
    HELPER(nvml_device_get_uuid, lib, "nvmlDeviceGetUUID");
    HELPER(nvml_init, lib, "nvmlInit_v2");
    HELPER(nvml_device_get_count, lib, "nvmlDeviceGetCount_v2");
    HELPER(nvml_device_get_handle, lib, "nvmlDeviceGetHandleByIndex_v2");
    nvml_lib = lib;
    in_init = false;
    atomic_store_explicit(&nvml_done, true, memory_order_release);
}

bool egpu__vcuda_nvml(void)
{
    if (!atomic_load_explicit(&nvml_done, memory_order_acquire)) {
        if (in_init)
            return false;
        pthread_once(&nvml_once, nvml_init);
    }
    return nvml_lib != NULL;
}

static void throttle_start(const int *throttle_card, unsigned cards)
{
    const struct egpu__vcuda_config *cfg = &egpu__vcuda_state.cfg;
    const struct egpu__vcuda_helpers *h = &egpu__vcuda_helpers;
    struct egpu__vcuda_throttle_config tc = {
        .dir = cfg->region_dir,
        .core_pct = cfg->core_pct,
        .core_limit_pct = cfg->core_limit_pct,
        .cards = cards,
        .fns = {h->ctx_get_device, h->event_create, h->event_record, h->event_elapsed_time,
                h->event_destroy, h->ctx_get_current, h->exchange_capture_mode,
                h->stream_is_capturing, h->stream_query},
        .watch = egpu__vcuda_sigbus_watch,
        .unwatch = egpu__vcuda_sigbus_unwatch,
    };

    for (int i = 0; i < EGPU_VCUDA_MAX_CARDS; i++)
        tc.card_of_device[i] = throttle_card[i];
    if (cards == 0) {
        egpu_log(EGPU_LOG_WARN, "compute limit: no visible card is among EGPU_VCUDA_GPUS");
        return;
    }
    if (!h->ctx_get_device || !h->event_create || !h->event_record || !h->event_elapsed_time ||
        !h->event_destroy) {
        egpu_log(EGPU_LOG_ERROR, "compute limit off: libcuda.so.1 lacks the event calls it needs");
        return;
    }
    (void)egpu__vcuda_throttle_init(&tc); /* logs its own errors; throttling stays off */
}

void egpu__vcuda_devices_setup(void)
{
    struct egpu__vcuda_state *st = &egpu__vcuda_state;
    const struct egpu__vcuda_helpers *h = &egpu__vcuda_helpers;
    int throttle_card[EGPU_VCUDA_MAX_CARDS];
    unsigned limited = 0;
    int count = 0;

    if (atomic_load_explicit(&st->devices_ready, memory_order_acquire))
        return;
    if (!egpu__vcuda_cuda() || !any_limit)
        return;
    pthread_mutex_lock(&devices_mu);
    if (atomic_load_explicit(&st->devices_ready, memory_order_relaxed))
        goto out;
    if (!h->device_get_count || !h->device_get || !h->device_get_uuid ||
        h->device_get_count(&count) != CUDA_SUCCESS)
        goto out; /* before cuInit: try again on the next call */
    for (int i = 0; i < EGPU_VCUDA_MAX_CARDS; i++)
        throttle_card[i] = -1;
    for (int i = 0; i < count; i++) {
        struct egpu__vcuda_uuid u;
        char text[EGPU_VCUDA_UUID_STR_MAX];
        CUuuid cu;
        CUdevice dev;
        int card = -1;

        if (i >= EGPU_VCUDA_MAX_CARDS) {
            egpu_log(EGPU_LOG_WARN, "device %d and above are not limited (at most %d cards)", i,
                     EGPU_VCUDA_MAX_CARDS);
            break;
        }
        if (h->device_get(&dev, i) != CUDA_SUCCESS || dev < 0 || dev >= EGPU_VCUDA_MAX_CARDS ||
            h->device_get_uuid(&cu, dev) != CUDA_SUCCESS) {
            egpu_log(EGPU_LOG_WARN, "device %d: no UUID: not limited", i);
            continue;
        }
        memcpy(u.b, cu.bytes, sizeof(u.b));
        egpu__vcuda_uuid_format(&u, text);
        if (!egpu__vcuda_config_covers(&st->cfg, &u)) {
            egpu_log(EGPU_LOG_INFO, "device %d %s: not in EGPU_VCUDA_GPUS: not limited", i, text);
            continue;
        }
        throttle_card[dev] =
            st->cfg.ngpus ? egpu__vcuda_config_gpu_index(&st->cfg, &u) : (int)limited;
        limited++;
        if (st->memory &&
            (st->region == NULL || egpu__vcuda_region_card(st->region, &u, &card) != 0))
            card = EGPU_VCUDA_CARD_CLOSED; /* limited but cannot be counted */
        st->dev_card[dev] = st->memory ? card : -1;
        egpu_log(EGPU_LOG_INFO, "device %d %s: limited memory_card=%d compute_card=%d", i, text,
                 st->dev_card[dev], throttle_card[dev]);
    }
    if (st->cfg.has_core)
        throttle_start(throttle_card, st->cfg.ngpus ? st->cfg.ngpus : limited);
    atomic_store_explicit(&st->devices_ready, true, memory_order_release);
out:
    pthread_mutex_unlock(&devices_mu);
}

int egpu__vcuda_device_card(CUdevice dev)
{
    egpu__vcuda_devices_setup();
    if (dev < 0 || dev >= EGPU_VCUDA_MAX_CARDS ||
        !atomic_load_explicit(&egpu__vcuda_state.devices_ready, memory_order_acquire))
        return -1;
    return egpu__vcuda_state.dev_card[dev];
}

EGPU_VCUDA_EXPORT CUresult cuInit(unsigned int flags)
{
    CUresult r;

    if (egpu__vcuda_refused())
        return CUDA_ERROR_NOT_PERMITTED; /* config_init said why on stderr */
    if (!egpu__vcuda_cuda() || EGPU_VCUDA_REAL(cuInit) == NULL)
        return CUDA_ERROR_NOT_INITIALIZED;
    r = EGPU_VCUDA_REAL(cuInit)(flags);
    if (r == CUDA_SUCCESS)
        egpu__vcuda_devices_setup();
    return r;
}

/* The wrapper for real entry point p when p is one we hook, else p. */
static void *swap_for_wrapper(void *p)
{
    if (p == NULL)
        return p;
    for (size_t i = 0; i < NHOOKS; i++) {
        if (hooks[i].lib == EGPU_VCUDA_LIB_CUDA &&
            __atomic_load_n(hooks[i].real, __ATOMIC_RELAXED) == p)
            return hooks[i].wrapper;
    }
    return p;
}

EGPU_VCUDA_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cuda_version,
                                            cuuint64_t flags)
{
    CUresult r;

    if (!egpu__vcuda_cuda() || EGPU_VCUDA_REAL(cuGetProcAddress) == NULL)
        return CUDA_ERROR_NOT_INITIALIZED;
    r = EGPU_VCUDA_REAL(cuGetProcAddress)(symbol, pfn, cuda_version, flags);
    if (r == CUDA_SUCCESS && pfn != NULL)
        *pfn = swap_for_wrapper(*pfn);
    return r;
}

EGPU_VCUDA_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cuda_version,
                                               cuuint64_t flags,
                                               CUdriverProcAddressQueryResult *status)
{
    CUresult r;

    if (!egpu__vcuda_cuda() || EGPU_VCUDA_REAL(cuGetProcAddress_v2) == NULL)
        return CUDA_ERROR_NOT_INITIALIZED;
    r = EGPU_VCUDA_REAL(cuGetProcAddress_v2)(symbol, pfn, cuda_version, flags, status);
    if (r == CUDA_SUCCESS && pfn != NULL)
        *pfn = swap_for_wrapper(*pfn);
    return r;
}

/* At exit the process's usage leaves the shared totals at once (a process
 * that is killed is reclaimed instead). At info level, a process the compute
 * limit held says what its controller did: how many launches it timed (7
 * driver calls each, beside the check of the context), how often it asked
 * the driver for a thread's context (those checks included),
 * how often a first try on the coarse clock was refused, and how often
 * launches waited; bench/gpu shows it beside its figures. */
__attribute__((destructor)) static void vcuda_fini(void)
{
    if (atomic_load_explicit(&egpu__vcuda_throttle_active, memory_order_relaxed)) {
        struct egpu__vcuda_throttle_stats st;

        egpu__vcuda_throttle_stats(&st);
        egpu_log(EGPU_LOG_INFO,
                 "compute limit at exit timed=%llu collected=%llu lost=%llu ctx_queries=%llu "
                 "retries=%llu bucket_sleeps=%llu queue_sleeps=%llu queue_forced=%llu",
                 (unsigned long long)st.sampled, (unsigned long long)st.samples_done,
                 (unsigned long long)st.samples_lost, (unsigned long long)st.ctx_queries,
                 (unsigned long long)st.retries, (unsigned long long)st.bucket_sleeps,
                 (unsigned long long)st.queue_sleeps, (unsigned long long)st.queue_forced);
    }
    if (atomic_load_explicit(&config_done, memory_order_acquire) && egpu__vcuda_state.region)
        egpu__vcuda_region_leave(egpu__vcuda_state.region);
}
