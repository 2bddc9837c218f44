/* src/vcuda/throttle.h - the compute limit of the interposer: holds the
 * kernel launches of all processes of a container to its share of each
 * card's time (core percent), bursting up to the core limit while the card
 * is otherwise idle. How it works: docs/vcuda.md, "Compute limit" (a
 * summary at the top of throttle.c).
 *
 * Contract between the launch wrappers (hooks, src/vcuda) and the
 * controller (throttle.c):
 *   - egpu__vcuda_throttle_init once, from the interposer's initialisation,
 *     after the configuration is read and the real driver entry points are
 *     resolved;
 *   - every launch wrapper (cuLaunchKernel, _ptsz, cuLaunchKernelEx, _ptsz,
 *     cuLaunchCooperativeKernel, _ptsz, cuLaunchCooperativeKernelMultiDevice,
 *     cuLaunch, cuLaunchGrid, cuLaunchGridAsync, cuGraphLaunch, _ptsz) tests
 * egpu__vcuda_throttle_active first; when false it calls the real entry point directly (the fast
 * path: no lock, no allocation, no call); when true it fills a struct egpu__vcuda_launch and calls
 * egpu__vcuda_throttle_launch, which admits the launch (sleeping while the container is over its
 * share), calls l->launch(l) exactly once and returns what it returned. A graph launch is described
 *     as fn = (CUfunction)graph_exec, blocks = 1, threads = 0: the
 *     controller times and charges a graph like one kernel of its own;
 *   - the interposer's pthread_atfork child handler calls
 *     egpu__vcuda_throttle_atfork_child.
 * Units: percent of one card's time for core_pct and core_limit_pct.
 */
#ifndef EGPU_VCUDA_THROTTLE_H
#define EGPU_VCUDA_THROTTLE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "egpu/cuda_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Limited cards per container, and the CUdevice ordinals card_of_device maps. */
#define EGPU_VCUDA_MAX_CARDS 16

/* The real driver entry points the controller uses to measure device time
 * (resolved by the interposer from the real libcuda; CUDA driver API). The
 * first five are required (a sample is collected with cuEventElapsedTime
 * alone, which says CUDA_ERROR_NOT_READY until both events completed). The
 * others may be NULL:
 *   ctx_get_current (cuCtxGetCurrent): without it the controller assumes one
 *     context per device per process (it keys kernel estimates and timing
 *     events by device instead of by context); with it, each thread asks at
 *     its first launch and after egpu__vcuda_throttle_ctx_changed, and
 *     timed launches check the answer;
 *   exchange_capture_mode (cuThreadExchangeStreamCaptureMode): the
 *     controller collects its timing events in CU_STREAM_CAPTURE_MODE_RELAXED,
 *     so that its cuEventElapsedTime and cuStreamQuery never invalidate a
 *     graph capture this or another thread has going in global mode
 *     (PyTorch's default); without it, it cannot;
 *   stream_is_capturing (cuStreamIsCapturing): a launch the controller
 *     would time is checked first, and a launch into a capture (recorded in
 *     a graph, not run now) is neither timed (no event is recorded into the
 *     capture) nor charged; when the query fails, the launch is not timed;
 *   stream_query (cuStreamQuery): a timed launch on an idle stream has the
 *     host's submission time in its span (the card ran the start event at
 *     once and waited for the kernel); the controller takes that gap out of
 *     the device time it charges. Without it, spans are charged whole. */
struct egpu__vcuda_throttle_fns {
    CUresult (*ctx_get_device)(CUdevice *dev);
    CUresult (*event_create)(CUevent *event, unsigned int flags);
    CUresult (*event_record)(CUevent event, CUstream stream);
    CUresult (*event_elapsed_time)(float *ms, CUevent start, CUevent end);
    CUresult (*event_destroy)(CUevent event);
    CUresult (*ctx_get_current)(CUcontext *ctx);                                     /* optional */
    CUresult (*exchange_capture_mode)(CUstreamCaptureMode *mode);                    /* optional */
    CUresult (*stream_is_capturing)(CUstream stream, CUstreamCaptureStatus *status); /* optional */
    CUresult (*stream_query)(CUstream stream);                                       /* optional */
};

struct egpu__vcuda_throttle_config {
    const char *dir;                          /* allocation directory: the shared region lives here
                                                 (<dir>/vcuda-core.shm); NULL = a per-process region */
    unsigned core_pct;                        /* the share held to when others wait, 1..100 */
    unsigned core_limit_pct;                  /* the burst ceiling, core_pct..100 (0 = core_pct) */
    unsigned cards;                           /* limited cards, 1..EGPU_VCUDA_MAX_CARDS */
    int card_of_device[EGPU_VCUDA_MAX_CARDS]; /* CUdevice ordinal -> limited card index
                                                 0..cards-1, -1 = not limited */
    struct egpu__vcuda_throttle_fns fns;
    /* Optional (NULL: not protected): watch and unwatch a mapping of the
     * region file against SIGBUS, as egpu__vcuda_sigbus_watch (sigbus.c)
     * does: once another process truncated the file, an access to the
     * mapping completes on zeros and *faults grows instead of killing the
     * process. watch returns 0 or -errno. */
    int (*watch)(void *base, size_t bytes, atomic_uint *faults);
    void (*unwatch)(void *base);
};

/* One launch, as the wrapper received it. launch performs the real call
 * with the wrapper's own arguments (kept by the wrapper behind ctx). */
struct egpu__vcuda_launch {
    uint64_t blocks;  /* grid_x * grid_y * grid_z */
    uint64_t threads; /* block_x * block_y * block_z */
    CUfunction fn;
    CUstream stream;
    CUresult (*launch)(const struct egpu__vcuda_launch *l);
    void *ctx;
    bool per_thread; /* through a _ptsz entry point: a NULL stream is the calling
                        thread's default stream (the controller then times it on
                        CU_STREAM_PER_THREAD, never on the legacy stream) */
};

/* The shared region <dir>/vcuda-core.shm, one per container (allocation
 * directory): a token bucket per limited card (docs/vcuda.md, "Charging"). Here
 * so that egpu-vcuda-inspect reads the layout the controller writes. */
#define THR_MAGIC   0x45524f4355504745ull /* "EGPUCORE" */
#define THR_VERSION 1u

/* A launch is admitted while the bucket is at most this far ahead of now
 * (what ships; benches may build the controller with another THR_TAU_NS),
 * and a bucket further ahead than the second is reset. */
#define EGPU_VCUDA_THROTTLE_TAU_NS     (25 * 1000000ull)
#define EGPU_VCUDA_THROTTLE_CORRUPT_NS (60000 * 1000000ull)

struct egpu__vcuda_throttle_card {
    _Alignas(64) _Atomic uint64_t tat_ns; /* bucket: wall time its charges are paid up to */
    _Atomic uint64_t queue_end_ns;        /* when the container's queued work should be done */
};

/* Cards are indexed by the limited card index: the position in
 * EGPU_VCUDA_GPUS when it is set, else the order the visible cards have. */
struct egpu__vcuda_throttle_region {
    uint64_t magic;    /* THR_MAGIC, written last */
    uint32_t version;  /* THR_VERSION */
    uint32_t bytes;    /* sizeof(struct egpu__vcuda_throttle_region) */
    uint32_t core_pct; /* as configured by the process that initialised it (information) */
    uint32_t core_limit_pct;
    struct egpu__vcuda_throttle_card card[EGPU_VCUDA_MAX_CARDS];
};

/* True once init enabled throttling (core_pct < 100); read with relaxed
 * order on every launch. */
extern atomic_bool egpu__vcuda_throttle_active;

/* Start the controller (cfg is copied; dir need not outlive the call).
 * Returns 0; -EINVAL for a bad config (logged once, naming the field), and
 * throttling then stays off. core_pct 100 leaves throttling off. The
 * shared region <dir>/vcuda-core.shm is opened with O_NOFOLLOW | O_NONBLOCK
 * and must be a regular file with one link; when it cannot be created or
 * mapped, the reason is logged once and the controller fails closed: every
 * launch on a limited card returns CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES
 * without being made (no per-process bucket: N processes would get N times
 * the share; dir NULL still gives one, for tests); a region of another
 * layout, truncated or corrupted
 * is logged once and re-initialised. While launches run, the file is
 * looked at every 100 ms (and at once after a fault of the mapping): one
 * truncated, replaced or deleted is mapped again (re-initialised under
 * flock when it is short), logged once per process. Call it once per
 * process; a later call replaces the configuration and must not race with
 * launches (tests). */
int egpu__vcuda_throttle_init(const struct egpu__vcuda_throttle_config *cfg);

/* Admit l (may sleep), run l->launch(l) once and return its result. Never
 * allocates or locks when the container has device time left; see
 * docs/vcuda.md ("Accuracy and cost") for what a sampled launch costs. */
CUresult egpu__vcuda_throttle_launch(const struct egpu__vcuda_launch *l);

/* What this process's controller did since init (or fork), for tests,
 * benchmarks and debugging. */
struct egpu__vcuda_throttle_stats {
    uint64_t sampled;       /* launches timed with a pair of events */
    uint64_t samples_done;  /* timed launches collected */
    uint64_t samples_lost;  /* timed launches whose events failed (dropped) */
    uint64_t bucket_sleeps; /* sleeps because the container was over its share */
    uint64_t queue_sleeps;  /* sleeps because too much work was queued on the device */
    uint64_t queue_forced;  /* launches let through after the queue did not drain */
    uint64_t ctx_queries;   /* cuCtxGetCurrent calls: the thread's first launch, each launch
                               after its context may have changed, each timed launch's
                               check (the launches in between use the thread's cached
                               answer) */
    uint64_t retries;       /* launches whose first try, on the coarse clock, was refused
                               and which were tried again at once on the exact clock */
};

/* Copy the counters into *out (caller-owned). */
void egpu__vcuda_throttle_stats(struct egpu__vcuda_throttle_stats *out);

/* The calling thread's current context may have changed: every hooked
 * call that can change it (cuCtxSetCurrent, cuCtxPushCurrent_v2,
 * cuCtxPopCurrent_v2, cuCtxCreate_v2/_v3/_v4, cuCtxDestroy_v2) calls this
 * after the real call, whatever it returned, so the thread's next launch
 * asks the driver (cuCtxGetCurrent) instead of using the answer it cached.
 * One thread-local store; safe before init and with throttling off. */
void egpu__vcuda_throttle_ctx_changed(void);

/* After fork, in the child: forget the parent's per-process state (kernel
 * estimates, timing events, queued work); keep the container's region. */
void egpu__vcuda_throttle_atfork_child(void);

#ifdef __cplusplus
}
#endif

#endif /* EGPU_VCUDA_THROTTLE_H */
