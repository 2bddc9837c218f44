/* src/vcuda/throttle.h - the compute limit of the interposer: holds the
 * kernel launches of all processes of a container to its share of each
 * card's time (core percent), bursting up to the core limit while the card
 * is otherwise idle.
 *
 * Contract between the launch wrappers (hooks, src/vcuda) and the
 * controller (throttle.c):
 *   - egpu_vcuda_throttle_init once, from the interposer's initialisation,
 *     after the configuration is read and the real driver entry points are
 *     resolved;
 *   - every launch wrapper (cuLaunchKernel, _ptsz, cuLaunchKernelEx, _ptsz)
 *     tests egpu_vcuda_throttle_active first; when false it calls the real
 *     entry point directly (the fast path: no lock, no allocation, no
 *     call); when true it fills a struct egpu_vcuda_launch and calls
 *     egpu_vcuda_throttle_launch, which admits the launch (sleeping while
 *     the container is over its share), calls l->launch(l) exactly once and
 *     returns what it returned.
 */
#ifndef EGPU_VCUDA_THROTTLE_H
#define EGPU_VCUDA_THROTTLE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "egpu/cuda_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The real driver entry points the controller uses to measure device time
 * (resolved by the interposer from the real libcuda; none may be NULL). */
struct egpu_vcuda_throttle_fns {
    CUresult (*ctx_get_device)(CUdevice *dev);
    CUresult (*event_create)(CUevent *event, unsigned int flags);
    CUresult (*event_record)(CUevent event, CUstream stream);
    CUresult (*event_query)(CUevent event);
    CUresult (*event_elapsed_time)(float *ms, CUevent start, CUevent end);
    CUresult (*event_destroy)(CUevent event);
};

struct egpu_vcuda_throttle_config {
    const char *dir;         /* allocation directory: the shared region lives here */
    unsigned core_pct;       /* the share held to when others wait, 1..100 */
    unsigned core_limit_pct; /* the burst ceiling, core_pct..100 */
    unsigned cards;          /* visible cards, 1..EGPU_VCUDA_MAX_CARDS */
    int card_of_device[16];  /* CUdevice ordinal -> limited card index, -1 = not limited */
    struct egpu_vcuda_throttle_fns fns;
};

/* One launch, as the wrapper received it. launch performs the real call
 * with the wrapper's own arguments (kept by the wrapper behind ctx). */
struct egpu_vcuda_launch {
    uint64_t blocks;  /* grid_x * grid_y * grid_z */
    uint64_t threads; /* block_x * block_y * block_z */
    CUfunction fn;
    CUstream stream;
    CUresult (*launch)(const struct egpu_vcuda_launch *l);
    void *ctx;
};

/* True once init enabled throttling (core_pct < 100); read with relaxed
 * order on every launch. */
extern atomic_bool egpu_vcuda_throttle_active;

/* Start the controller. Returns 0; -EINVAL for a bad config (logged, naming
 * the field); any other -errno when the shared region cannot be used, in
 * which case throttling stays off and the reason is logged once. */
int egpu_vcuda_throttle_init(const struct egpu_vcuda_throttle_config *cfg);

/* Admit l (may sleep), run l->launch(l) once and return its result. */
CUresult egpu_vcuda_throttle_launch(const struct egpu_vcuda_launch *l);

/* After fork, in the child: forget the parent's per-process state. */
void egpu_vcuda_throttle_atfork_child(void);

#ifdef __cplusplus
}
#endif

#endif
