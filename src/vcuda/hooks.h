/* vcuda/hooks.h - what the wrappers of libegpu-vcuda.so share (hooks.c).
 *
 * The real entry points, one slot per hooked symbol (hook_table.h) plus the
 * unhooked driver calls the interposer itself needs; the process state
 * (configuration, region, device -> card map); and the lazy, once-only
 * initialisation. Wrappers call egpu__vcuda_cuda() (or egpu__vcuda_nvml())
 * first: it runs the initialisation once and says whether the real library
 * is there. A slot is NULL only when its library could not be loaded.
 */
#ifndef EGPU_VCUDA_HOOKS_H
#define EGPU_VCUDA_HOOKS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "egpu/cuda_abi.h"
#include "hook_table.h"
#include "nvml_abi.h"
#include "vcuda_int.h"

#define EGPU_VCUDA_EXPORT __attribute__((visibility("default")))

/* The real entry points, named as exported (written once, at init, with
 * atomic stores; read with EGPU_VCUDA_REAL). Kept as void * as dlsym gives
 * them; EGPU_VCUDA_REAL casts to the wrapper's own prototype. */
struct egpu__vcuda_real {
#define EGPU_VCUDA_REAL_SLOT(lib, name) void *name;
    EGPU_VCUDA_HOOKS(EGPU_VCUDA_REAL_SLOT)
#undef EGPU_VCUDA_REAL_SLOT
};

/* The real entry point of hooked symbol name, typed like the wrapper;
 * NULL when its library is not loaded (yet). One relaxed load. */
#define EGPU_VCUDA_REAL(name) \
    ((__typeof__(name) *)__atomic_load_n(&egpu__vcuda_real.name, __ATOMIC_RELAXED))

enum egpu__vcuda_lib {
    EGPU_VCUDA_LIB_CUDA = 0,
    EGPU_VCUDA_LIB_NVML = 1,
};

/* One row of the hook table (hook_table.h). */
struct egpu__vcuda_hook {
    const char *name; /* exported symbol */
    int lib;          /* enum egpu__vcuda_lib */
    void *wrapper;    /* our function of that name */
    void **real;      /* its slot in egpu__vcuda_real */
};

/* The row named name, or NULL. No initialisation needed (dlsym uses it). */
const struct egpu__vcuda_hook *egpu__vcuda_hook_find(const char *name);

/* Real driver calls that are not hooked but that the interposer makes. */
struct egpu__vcuda_helpers {
    CUresult (*ctx_get_device)(CUdevice *dev);
    CUresult (*ctx_get_current)(CUcontext *ctx);
    CUresult (*device_get)(CUdevice *dev, int ordinal);
    CUresult (*device_get_count)(int *count);
    CUresult (*device_get_uuid)(CUuuid *uuid, CUdevice dev);
    CUresult (*event_create)(CUevent *event, unsigned int flags);
    CUresult (*event_record)(CUevent event, CUstream stream);
    CUresult (*event_elapsed_time)(float *ms, CUevent start, CUevent end);
    CUresult (*event_destroy)(CUevent event);
    CUresult (*exchange_capture_mode)(CUstreamCaptureMode *mode); /* may be NULL */
    CUresult (*stream_is_capturing)(CUstream stream, CUstreamCaptureStatus *status); /* ditto */
    CUresult (*stream_query)(CUstream stream);                                       /* ditto */
    CUresult (*pool_get_attribute)(CUmemoryPool pool, CUmemPool_attribute attr,
                                   void *value);                       /* ditto */
    CUresult (*device_get_mem_pool)(CUmemoryPool *pool, CUdevice dev); /* ditto */
    CUresult (*ctx_synchronize)(void);                                 /* ditto */
    CUresult (*device_get_name)(char *name, int len, CUdevice dev);    /* ditto */
    int (*nvml_device_get_uuid)(struct egpu_nvml_device *dev, char *uuid, unsigned int len);
    int (*nvml_init)(void);                            /* may be NULL */
    int (*nvml_device_get_count)(unsigned int *count); /* ditto */
    int (*nvml_device_get_handle)(unsigned int index, struct egpu_nvml_device **dev); /* ditto */
};

struct egpu__vcuda_state {
    struct egpu__vcuda_config cfg;
    bool memory;                       /* a memory limit applies (cfg.has_memory) */
    uint64_t limit_bytes;              /* per card */
    uint64_t ctx_bytes;                /* counted per context */
    uint64_t ctx_extra_bytes;          /* counted per process and card with contexts there */
    struct egpu__vcuda_region *region; /* NULL when no memory limit */
    /* CUdevice (0..15) -> the region's local card id, -1 = not limited;
     * valid once devices_ready. */
    int dev_card[EGPU_VCUDA_MAX_CARDS];
    atomic_bool devices_ready;
};

extern struct egpu__vcuda_real egpu__vcuda_real;
extern struct egpu__vcuda_helpers egpu__vcuda_helpers;
extern struct egpu__vcuda_state egpu__vcuda_state;

/* Read the configuration once (thread-safe). Returns whether any limit applies. */
bool egpu__vcuda_config_ready(void);

/* Whether the configuration could not be read and verified (none found, or
 * a broken one; logged once at error level): then libcuda.so.1 and NVML are
 * never loaded, every hooked CUDA call is refused and cuInit returns
 * CUDA_ERROR_NOT_PERMITTED. Reads the configuration first (thread-safe). */
bool egpu__vcuda_refused(void);

/* Load libcuda.so.1 and resolve the real entry points once (thread-safe;
 * also reads the configuration). Returns whether libcuda is loaded. Called
 * again while that is under way on the same thread, it returns false. */
bool egpu__vcuda_cuda(void);

/* The same for libnvidia-ml.so.1. */
bool egpu__vcuda_nvml(void);

/* Map CUDA devices to cards once the driver is initialised (after cuInit
 * succeeded; retried until it works) and start the compute limit. */
void egpu__vcuda_devices_setup(void);

/* A device that is limited but whose usage cannot be counted (no region,
 * or the region's card table is full): every allocation on it fails. */
#define EGPU_VCUDA_CARD_CLOSED (-2)

/* The real dlsym (dlsym.c): name looked up in handle, or NULL. */
void *egpu__vcuda_real_dlsym(void *handle, const char *name);

/* fork(2) handlers of memory.c's process-local state (hooks.c registers
 * them with pthread_atfork): prepare locks it, parent unlocks it, child
 * forgets the parent's counted objects and primary contexts and unlocks. */
void egpu__vcuda_memory_atfork_prepare(void);
void egpu__vcuda_memory_atfork_parent(void);
void egpu__vcuda_memory_atfork_child(void);

/* The card id of dev: >= 0, -1 when no memory limit applies to it, or
 * EGPU_VCUDA_CARD_CLOSED. */
int egpu__vcuda_device_card(CUdevice dev);

/* The calling thread's current context may have changed: the
 * compute limit asks the driver for it again at the thread's next launch.
 * Called after every hooked call that can change it, with what that call
 * returned, whatever it was; returns r. One thread-local store. */
CUresult egpu__vcuda_ctx_changed(CUresult r);

#endif /* EGPU_VCUDA_HOOKS_H */
