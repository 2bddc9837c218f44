/* vcuda/memory.c - the memory limit: every way a process takes device
 * memory, counted per card across the container (region.c), and the memory
 * queries answered with the limit.
 *
 * Each allocating wrapper: find the card (the current context's device, the
 * device named in the call, or the pool's), count the size rounded up to the
 * 2 MiB granularity (sizes.c), check-and-take it in the shared region, then
 * make the real call. Over the limit: CUDA_ERROR_OUT_OF_MEMORY and nothing
 * taken. If the real call fails, the reservation is given back; if the
 * object cannot be remembered, it is freed again and the call fails: never a
 * partial allocation. Frees look the object up (track.c) and give back what
 * it counted; an object never counted passes through unchanged.
 *
 *   cuMemAlloc_v2, cuMemAllocManaged    size, current device
 *   cuMemAllocPitch_v2                  pitch x height (taken as width x
 *                                       height, then adjusted to the pitch)
 *   cuMemCreate / cuMemRelease          size, prop->location (a device)
 *   cuArrayCreate_v2, cuArray3DCreate_v2, cuMipmappedArrayCreate
 *                                       texels x element size (sizes.c)
 *   cuMemAllocAsync(_ptsz)              the reservation of the pool they
 *   cuMemAllocFromPoolAsync(_ptsz)      come from (see POOLS)
 *   cuCtxCreate_v2/_v3/_v4, first cuDevicePrimaryCtxRetain of a device
 *                                       the context's footprint, and the
 *                                       process's extra with its first
 *                                       context on the card (CONTEXTS)
 * Destroying a context (or releasing a primary context for the last time,
 * or resetting it) also gives back what was allocated in it (device
 * pointers and arrays): the driver frees them. cuMemCreate and pool memory
 * is not bound to a context and stays counted until freed.
 *
 * CONTEXTS. A context's own device memory shows in no allocation call and
 * depends on the GPU, the driver and its settings (523.6 MiB for a bare
 * context on an H100, measured by bench_gpu_mem). EGPU_VCUDA_CONTEXT_MIB,
 * when configured, is counted as is.
 * Otherwise the estimate (the last footprint this process measured on the
 * device, else the model's figure from cuDeviceGetName, else 300 MiB) is
 * taken first, so nothing is made over the limit, then the context is made
 * and measured: the drop in the card's free memory (the real NVML
 * nvmlDeviceGetMemoryInfo: cuMemGetInfo needs a context, and the first one
 * of a process has none before it) across the real call, rounded up to
 * 2 MiB, under an flock of <region dir>/vcuda-context.lock that every
 * process of the container takes around a context creation. The count then
 * moves to the measured figure (over the limit: the context is destroyed
 * again and the call fails). Processes of other containers are not held by
 * the lock: what they allocate or free meanwhile is the residual error,
 * bounded by counting never less than the model's figure (so a process of
 * the container freeing memory during another's measurement cannot shrink
 * its charge) and refusing a figure above 4x the model's (the estimate
 * counts then). No NVML, or the lock held for 2 s: the estimate.
 * EGPU_VCUDA_CONTEXT_EXTRA_MIB is what the driver takes later on its own
 * (module code loaded lazily at a kernel's first launch: about 95 MiB for
 * PyTorch 2.11), which no hooked call shows. It is counted per process and
 * card, on top of whatever the context counts (measured, estimated or
 * EGPU_VCUDA_CONTEXT_MIB): taken with the first context the process makes
 * on the card (a context that does not fit with it is refused), held while
 * the process has a context there (ctx_live; a primary context counts once
 * however often retained), given back when its last one goes. A second
 * context of the process on the card is not charged it again.
 *
 * POOLS. A memory pool reserves device memory beyond what is allocated from
 * it (rounding to its chunks, freed blocks kept up to its release
 * threshold), and that reservation is what the card lends it. So what a
 * pool counts is its reservation, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
 * read with the real cuMemPoolGetAttribute: after each allocation from it
 * the growth is taken (over the limit, even after re-reading every pool:
 * the block is freed, the context synchronised, the pool trimmed back to
 * what it counted, and CUDA_ERROR_OUT_OF_MEMORY); after cuMemFreeAsync,
 * cuMemFree, cuMemPoolTrimTo, cuMemPoolSetAttribute(RELEASE_THRESHOLD) and
 * in cuMemGetInfo every known pool is read again and what it released is
 * given back (the driver releases at synchronisations, which are not
 * hooked: until the next such call the count is high, never low). The
 * allocation is made before its growth is known, so for the microseconds
 * until it is undone the card holds that growth beyond the limit. A pool
 * destroyed with blocks still allocated keeps their bytes counted until the
 * process ends (the pool can no longer be asked when they are freed).
 * Pools are cuMemAllocAsync's (cuDeviceGetMemPool of the current device)
 * and those of cuMemPoolCreate, at most 64 per process; without
 * cuMemPoolGetAttribute each block counts its size, as before.
 *
 * cuMemGetInfo_v2, cuDeviceTotalMem_v2, nvmlDeviceGetMemoryInfo(_v2):
 * total = min(limit, the card's real total), used = the container's usage
 * (dead processes reclaimed first), never above total, free = total - used,
 * never more than the card really has free.
 *
 * No memory limit configured: every wrapper calls the real function at once.
 */
#define _GNU_SOURCE /* flock */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "egpu/log.h"
#include "hooks.h"

static pthread_mutex_t track_mu = PTHREAD_MUTEX_INITIALIZER; /* objects */
static pthread_mutex_t ctx_mu = PTHREAD_MUTEX_INITIALIZER;   /* primary contexts */
static struct egpu__vcuda_track objects;
static unsigned primary_refs[EGPU_VCUDA_MAX_CARDS]; /* by CUdevice */
static CUcontext primary_ctx[EGPU_VCUDA_MAX_CARDS];
static uint64_t primary_bytes[EGPU_VCUDA_MAX_CARDS];        /* what each primary context counts */
static _Atomic uint64_t ctx_measured[EGPU_VCUDA_MAX_CARDS]; /* last footprint measured, bytes */
static unsigned ctx_live[EGPU_VCUDA_MAX_CARDS]; /* by card: counted contexts (a primary once) */

/* Memory pools this process allocated from: each counts its reservation. */
#define MAX_POOLS 64
struct pool_charge {
    CUmemoryPool pool;
    int card;
    uint64_t bytes; /* the reservation counted: RESERVED_MEM_CURRENT when last read */
    bool gone;      /* destroyed with blocks still allocated: bytes stay counted */
};
static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER; /* pools, npools */
static struct pool_charge pools[MAX_POOLS];
static unsigned npools;

void egpu__vcuda_memory_atfork_prepare(void)
{
    pthread_mutex_lock(&ctx_mu);
    pthread_mutex_lock(&pool_mu);
    pthread_mutex_lock(&track_mu);
}

void egpu__vcuda_memory_atfork_parent(void)
{
    pthread_mutex_unlock(&track_mu);
    pthread_mutex_unlock(&pool_mu);
    pthread_mutex_unlock(&ctx_mu);
}

void egpu__vcuda_memory_atfork_child(void)
{
    egpu__vcuda_track_clear(&objects);
    memset(primary_refs, 0, sizeof(primary_refs));
    memset(primary_ctx, 0, sizeof(primary_ctx));
    memset(primary_bytes, 0, sizeof(primary_bytes));
    memset(ctx_live, 0, sizeof(ctx_live));
    memset(pools, 0, sizeof(pools));
    npools = 0;
    pthread_mutex_unlock(&track_mu);
    pthread_mutex_unlock(&pool_mu);
    pthread_mutex_unlock(&ctx_mu);
}

/* ---- driver and NVML calls made here, not hooked ---- */

/* The driver and NVML calls made here but not hooked are egpu__vcuda_helpers
 * (hooks.c resolves them with the rest; each may be NULL: an older driver,
 * no NVML, and what needs it is then skipped). NVML is initialised once, the
 * first time a pool or a context needs the driver, and never shut down: NVML
 * counts its initialisations, the application's stay its own. */
static bool nvml_ready; /* NVML loaded and initialised: contexts can be measured */
static pthread_once_t drv_once = PTHREAD_ONCE_INIT;

static void drv_init(void)
{
    const struct egpu__vcuda_helpers *h = &egpu__vcuda_helpers;

    (void)egpu__vcuda_cuda();
    nvml_ready = egpu__vcuda_nvml() && h->nvml_init && h->nvml_device_get_count &&
                 h->nvml_device_get_handle && h->nvml_device_get_uuid &&
                 EGPU_VCUDA_REAL(nvmlDeviceGetMemoryInfo) && h->nvml_init() == EGPU_NVML_SUCCESS;
    if (!nvml_ready)
        egpu_log(EGPU_LOG_INFO, "no NVML: context footprints are estimated, not measured");
}

/* Whether allocations are counted at all (initialising on first use). */
static bool counting(void)
{
    return egpu__vcuda_config_ready() && egpu__vcuda_state.memory;
}

/* The card of the current context's device; -1 when not limited or there
 * is no current context (the real call then reports that itself). */
static int current_card(void)
{
    CUdevice dev;

    if (egpu__vcuda_helpers.ctx_get_device == NULL ||
        egpu__vcuda_helpers.ctx_get_device(&dev) != CUDA_SUCCESS)
        return -1;
    return egpu__vcuda_device_card(dev);
}

static uint64_t current_ctx(void)
{
    CUcontext ctx = NULL;

    if (egpu__vcuda_helpers.ctx_get_current == NULL ||
        egpu__vcuda_helpers.ctx_get_current(&ctx) != CUDA_SUCCESS)
        return 0;
    return (uint64_t)(uintptr_t)ctx;
}

/* Check-and-take bytes on card. CUDA_SUCCESS or CUDA_ERROR_OUT_OF_MEMORY. */
static CUresult take(int card, uint64_t bytes)
{
    int rc;

    if (card == EGPU_VCUDA_CARD_CLOSED || egpu__vcuda_state.region == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    rc = egpu__vcuda_region_reserve(egpu__vcuda_state.region, card, bytes,
                                    egpu__vcuda_state.limit_bytes);
    if (rc == 0)
        return CUDA_SUCCESS;
    if (rc == -ENOMEM)
        egpu_log(EGPU_LOG_DEBUG, "over the memory limit card=%d bytes=%llu limit_bytes=%llu", card,
                 (unsigned long long)bytes, (unsigned long long)egpu__vcuda_state.limit_bytes);
    return CUDA_ERROR_OUT_OF_MEMORY; /* -ENOSPC, -EIO: cannot count it, so no */
}

static void give(int card, uint64_t bytes)
{
    if (card >= 0 && bytes > 0 && egpu__vcuda_state.region)
        egpu__vcuda_region_release(egpu__vcuda_state.region, card, bytes);
}

/* Move what card counts for one object from `from` to `to` bytes.
 * CUDA_SUCCESS, or CUDA_ERROR_OUT_OF_MEMORY with nothing changed. */
static CUresult recount(int card, uint64_t from, uint64_t to)
{
    if (to > from)
        return take(card, to - from);
    give(card, from - to);
    return CUDA_SUCCESS;
}

/* Remember (kind, key) as bytes on card in ctx. Returns 0 or -ENOMEM. An
 * older entry with the same key (freed by a path we did not see) is given
 * back first. */
static int remember(int kind, uint64_t key, int card, uint64_t bytes, uint64_t ctx)
{
    struct egpu__vcuda_track_entry old;
    bool had;
    int rc;

    pthread_mutex_lock(&track_mu);
    had = egpu__vcuda_track_take(&objects, kind, key, &old);
    rc = egpu__vcuda_track_put(&objects, kind, key, card, bytes, ctx);
    pthread_mutex_unlock(&track_mu);
    if (had)
        give(old.card, old.bytes);
    if (rc)
        egpu_log(EGPU_LOG_ERROR, "out of memory remembering an allocation: failing it");
    return rc;
}

static bool forget(int kind, uint64_t key, struct egpu__vcuda_track_entry *e)
{
    bool found;

    pthread_mutex_lock(&track_mu);
    found = egpu__vcuda_track_take(&objects, kind, key, e);
    pthread_mutex_unlock(&track_mu);
    return found;
}

/* Give back everything allocated in ctx (the driver freed it with ctx). */
static void drop_ctx(uint64_t ctx)
{
    uint64_t by_card[EGPU_VCUDA_MAX_CARDS] = {0};

    pthread_mutex_lock(&track_mu);
    egpu__vcuda_track_drop_ctx(&objects, ctx, by_card);
    pthread_mutex_unlock(&track_mu);
    for (int c = 0; c < EGPU_VCUDA_MAX_CARDS; c++)
        give(c, by_card[c]);
}

/* Whether libcuda is loaded and has the real entry point real (the
 * expression reads the slot only after the loading). */
#define HAVE_REAL(name) (egpu__vcuda_cuda() && EGPU_VCUDA_REAL(name) != NULL)

/* The arguments of one wrapped call, for the callbacks below: each makes
 * the real call with them, so the counting around it is written once. */
struct call {
    CUdeviceptr *dptr;
    size_t bytes;
    unsigned int flags;
    CUstream stream;
    CUmemoryPool pool;
    CUmemGenericAllocationHandle *handle;
    const CUmemAllocationProp *prop;
    void *array; /* CUarray * or CUmipmappedArray * */
    const void *desc;
    unsigned int levels;
    CUcontext *pctx;
    CUexecAffinityParam *affinity;
    int naffinity;
    CUctxCreateParams *params;
    CUdevice dev;
    uint64_t key; /* frees: what is freed */
};

/* Count bytes on card around call(c): over the limit, nothing is called;
 * when the call fails, the bytes are given back. Then the new object's key
 * (key_of(c)) is remembered in ctx, or the object is freed again with
 * undo. CUDA_SUCCESS, CUDA_ERROR_OUT_OF_MEMORY or the call's error. */
static CUresult counted(int card, uint64_t bytes, uint64_t ctx, int kind,
                        CUresult (*call)(const struct call *c),
                        uint64_t (*key_of)(const struct call *c), CUresult (*undo)(uint64_t key),
                        const struct call *c)
{
    uint64_t key;
    CUresult r;

    if (bytes > 0 && take(card, bytes) != CUDA_SUCCESS)
        return CUDA_ERROR_OUT_OF_MEMORY;
    r = call(c);
    if (r != CUDA_SUCCESS) {
        give(card, bytes);
        return r;
    }
    key = key_of(c);
    if (remember(kind, key, card, bytes, ctx) == 0)
        return CUDA_SUCCESS;
    (void)undo(key);
    give(card, bytes);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

/* A free of a counted object: forget it, free it, give its bytes back (or
 * remember it again when the real free failed). Unknown keys pass through. */
static CUresult freed(int kind, CUresult (*call)(const struct call *c), const struct call *c)
{
    struct egpu__vcuda_track_entry e;
    bool found = forget(kind, c->key, &e);
    CUresult r = call(c);

    if (found && r == CUDA_SUCCESS)
        give(e.card, e.bytes);
    else if (found)
        (void)remember(kind, c->key, e.card, e.bytes, e.ctx);
    return r;
}

static uint64_t key_dptr(const struct call *c)
{
    return *c->dptr;
}

static uint64_t key_handle(const struct call *c)
{
    return *c->handle;
}

static uint64_t key_array(const struct call *c)
{
    uint64_t key = 0;

    memcpy(&key, c->array, sizeof(void *)); /* CUarray or CUmipmappedArray */
    return key;
}

static uint64_t key_ctx(const struct call *c)
{
    return (uint64_t)(uintptr_t)*c->pctx;
}

static CUresult undo_free(uint64_t key)
{
    return EGPU_VCUDA_REAL(cuMemFree_v2)((CUdeviceptr)key);
}

static CUresult undo_release(uint64_t key)
{
    return EGPU_VCUDA_REAL(cuMemRelease)((CUmemGenericAllocationHandle)key);
}

static CUresult undo_array(uint64_t key)
{
    return EGPU_VCUDA_REAL(cuArrayDestroy)((CUarray)(uintptr_t)key);
}

static CUresult undo_mipmap(uint64_t key)
{
    return EGPU_VCUDA_REAL(cuMipmappedArrayDestroy)((CUmipmappedArray)(uintptr_t)key);
}

static CUresult undo_ctx(uint64_t key)
{
    return EGPU_VCUDA_REAL(cuCtxDestroy_v2)((CUcontext)(uintptr_t)key);
}

/* ---- device pointers ---- */

static CUresult call_alloc(const struct call *c)
{
    return EGPU_VCUDA_REAL(cuMemAlloc_v2)(c->dptr, c->bytes);
}

static CUresult call_managed(const struct call *c)
{
    return EGPU_VCUDA_REAL(cuMemAllocManaged)(c->dptr, c->bytes, c->flags);
}

static CUresult call_async(const struct call *c)
{
    return EGPU_VCUDA_REAL(cuMemAllocAsync)(c->dptr, c->bytes, c->stream);
}

static CUresult call_async_ptsz(const struct call *c)
{
    return EGPU_VCUDA_REAL(cuMemAllocAsync_ptsz)(c->dptr, c->bytes, c->stream);
}

static CUresult call_from_pool(const struct call *c)
{
    return EGPU_VCUDA_REAL(cuMemAllocFromPoolAsync)(c->dptr, c->bytes, c->pool, c->stream);
}

static CUresult call_from_pool_ptsz(const struct call *c)
{
    return EGPU_VCUDA_REAL(cuMemAllocFromPoolAsync_ptsz)(c->dptr, c->bytes, c->pool, c->stream);
}

/* A device-pointer allocation of c->bytes on card (-1: not counted), made
 * in context ctx (0 for stream-ordered memory, which outlives contexts). */
static CUresult alloc_ptr(int card, uint64_t ctx, CUresult (*call)(const struct call *c),
                          const struct call *c)
{
    if (card == -1 || c->dptr == NULL)
        return call(c);
    return counted(card, egpu__vcuda_round(c->bytes), ctx, EGPU_VCUDA_PTR, call, key_dptr,
                   undo_free, c);
}

EGPU_VCUDA_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes)
{
    struct call c = {.dptr = dptr, .bytes = bytes};

    if (!HAVE_REAL(cuMemAlloc_v2))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!counting())
        return call_alloc(&c);
    return alloc_ptr(current_card(), current_ctx(), call_alloc, &c);
}

EGPU_VCUDA_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytes, unsigned int flags)
{
    struct call c = {.dptr = dptr, .bytes = bytes, .flags = flags};

    if (!HAVE_REAL(cuMemAllocManaged))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!counting())
        return call_managed(&c);
    return alloc_ptr(current_card(), current_ctx(), call_managed, &c);
}

/* ---- memory pools: what counts is the reservation ---- */

/* The row of pool (not destroyed), or -1. pool_mu held. */
static int pool_find(CUmemoryPool pool)
{
    for (unsigned i = 0; i < npools; i++) {
        if (pools[i].pool == pool && !pools[i].gone)
            return (int)i;
    }
    return -1;
}

/* The row of pool, added (counting nothing yet) on card when new; -1 when
 * the table is full. pool_mu held. */
static int pool_add(CUmemoryPool pool, int card)
{
    int i = pool_find(pool);

    if (i >= 0 || npools == MAX_POOLS)
        return i;
    pools[npools] = (struct pool_charge){.pool = pool, .card = card};
    return (int)npools++;
}

/* Count pool row i's reservation as the driver reports it now: take the
 * growth, give back the shrinkage. CUDA_ERROR_OUT_OF_MEMORY when the growth
 * does not fit the limit (nothing taken then); a reservation that cannot be
 * read leaves the count as it was. pool_mu held. */
static CUresult pool_sync(unsigned i)
{
    cuuint64_t reserved = 0;

    if (pools[i].gone ||
        egpu__vcuda_helpers.pool_get_attribute(pools[i].pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
                                               &reserved) != CUDA_SUCCESS)
        return CUDA_SUCCESS;
    reserved = egpu__vcuda_round(reserved);
    if (recount(pools[i].card, pools[i].bytes, reserved) != CUDA_SUCCESS)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pools[i].bytes = reserved;
    return CUDA_SUCCESS;
}

/* Re-read every pool: what the driver released (at a synchronisation,
 * under the release threshold) is given back. pool_mu held. */
static void pools_sync(void)
{
    for (unsigned i = 0; i < npools; i++)
        (void)pool_sync(i); /* a pool that grew behind our back counts at its next allocation */
}

/* pools_sync for callers that do not hold pool_mu; cheap with no pools. */
static void pools_refresh(void)
{
    pthread_mutex_lock(&pool_mu);
    if (npools > 0 && egpu__vcuda_helpers.pool_get_attribute != NULL)
        pools_sync();
    pthread_mutex_unlock(&pool_mu);
}

/* A stream-ordered allocation from pool on card: the real call, then the
 * pool's reservation is counted (its growth, if any). When the growth does
 * not fit the limit, even after re-reading every pool, the block is freed,
 * the pool trimmed back to what it counted, and the call fails with
 * CUDA_ERROR_OUT_OF_MEMORY. Without cuMemPoolGetAttribute or a free row,
 * the block's size counts instead (alloc_ptr). */
static CUresult alloc_pool(int card, CUmemoryPool pool, CUresult (*call)(const struct call *c),
                           const struct call *c)
{
    CUresult r;
    int i;

    if (card == -1 || c->dptr == NULL)
        return call(c);
    pthread_once(&drv_once, drv_init);
    pthread_mutex_lock(&pool_mu);
    i = pool != NULL && egpu__vcuda_helpers.pool_get_attribute != NULL ? pool_add(pool, card) : -1;
    if (i < 0) {
        pthread_mutex_unlock(&pool_mu);
        return alloc_ptr(card, 0, call, c);
    }
    if (card == EGPU_VCUDA_CARD_CLOSED || egpu__vcuda_state.region == NULL) {
        pthread_mutex_unlock(&pool_mu);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    r = call(c);
    if (r == CUDA_SUCCESS && pool_sync((unsigned)i) != CUDA_SUCCESS) {
        pools_sync();
        if (pool_sync((unsigned)i) != CUDA_SUCCESS) {
            (void)EGPU_VCUDA_REAL(cuMemFreeAsync)(*c->dptr, c->stream);
            if (egpu__vcuda_helpers.ctx_synchronize !=
                NULL) /* the free completes: the trim can release it */
                (void)egpu__vcuda_helpers.ctx_synchronize();
            if (EGPU_VCUDA_REAL(cuMemPoolTrimTo) != NULL)
                (void)EGPU_VCUDA_REAL(cuMemPoolTrimTo)(pool, (size_t)pools[i].bytes);
            (void)pool_sync((unsigned)i); /* only shrinks now */
            r = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    pthread_mutex_unlock(&pool_mu);
    return r;
}

/* The current pool of the current context's device (cuMemAllocAsync's),
 * NULL when it cannot be found. */
static CUmemoryPool current_pool(void)
{
    CUmemoryPool pool = NULL;
    CUdevice dev;

    pthread_once(&drv_once, drv_init);
    if (egpu__vcuda_helpers.device_get_mem_pool == NULL ||
        egpu__vcuda_helpers.ctx_get_device == NULL ||
        egpu__vcuda_helpers.ctx_get_device(&dev) != CUDA_SUCCESS ||
        egpu__vcuda_helpers.device_get_mem_pool(&pool, dev) != CUDA_SUCCESS)
        return NULL;
    return pool;
}

EGPU_VCUDA_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytes, CUstream stream)
{
    struct call c = {.dptr = dptr, .bytes = bytes, .stream = stream};
    int card;

    if (!HAVE_REAL(cuMemAllocAsync))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!counting())
        return call_async(&c);
    card = current_card();
    return alloc_pool(card, card == -1 ? NULL : current_pool(), call_async, &c);
}

EGPU_VCUDA_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytes, CUstream stream)
{
    struct call c = {.dptr = dptr, .bytes = bytes, .stream = stream};
    int card;

    if (!HAVE_REAL(cuMemAllocAsync_ptsz))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!counting())
        return call_async_ptsz(&c);
    card = current_card();
    return alloc_pool(card, card == -1 ? NULL : current_pool(), call_async_ptsz, &c);
}

/* The pool's card (from cuMemPoolCreate), else the current one. */
static int pool_card(CUmemoryPool pool)
{
    int i, card = -1;

    pthread_mutex_lock(&pool_mu);
    i = pool_find(pool);
    if (i >= 0)
        card = pools[i].card;
    pthread_mutex_unlock(&pool_mu);
    return i >= 0 ? card : current_card();
}

EGPU_VCUDA_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytes,
                                                   CUmemoryPool pool, CUstream stream)
{
    struct call c = {.dptr = dptr, .bytes = bytes, .pool = pool, .stream = stream};

    if (!HAVE_REAL(cuMemAllocFromPoolAsync))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!counting())
        return call_from_pool(&c);
    return alloc_pool(pool_card(pool), pool, call_from_pool, &c);
}

EGPU_VCUDA_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytes,
                                                        CUmemoryPool pool, CUstream stream)
{
    struct call c = {.dptr = dptr, .bytes = bytes, .pool = pool, .stream = stream};

    if (!HAVE_REAL(cuMemAllocFromPoolAsync_ptsz))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!counting())
        return call_from_pool_ptsz(&c);
    return alloc_pool(pool_card(pool), pool, call_from_pool_ptsz, &c);
}

static uint64_t mul_sat(uint64_t a, uint64_t b)
{
    uint64_t r;

    return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

EGPU_VCUDA_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width_bytes,
                                              size_t height, unsigned int element_bytes)
{
    uint64_t guess, actual, ctx;
    CUresult r;
    int card = -1;

    if (!HAVE_REAL(cuMemAllocPitch_v2))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (counting() && dptr != NULL && pitch != NULL)
        card = current_card();
    if (card == -1)
        return EGPU_VCUDA_REAL(cuMemAllocPitch_v2)(dptr, pitch, width_bytes, height, element_bytes);
    /* The pitch is known only afterwards: take the least it can be, then
     * the rest (never refusing what would have fitted). */
    guess = egpu__vcuda_round(mul_sat(width_bytes, height));
    ctx = current_ctx();
    if (guess > 0 && take(card, guess) != CUDA_SUCCESS)
        return CUDA_ERROR_OUT_OF_MEMORY;
    r = EGPU_VCUDA_REAL(cuMemAllocPitch_v2)(dptr, pitch, width_bytes, height, element_bytes);
    if (r != CUDA_SUCCESS) {
        give(card, guess);
        return r;
    }
    actual = egpu__vcuda_round(mul_sat(*pitch, height));
    if (actual > guess && take(card, actual - guess) != CUDA_SUCCESS) {
        (void)undo_free(*dptr);
        give(card, guess);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (actual < guess)
        give(card, guess - actual);
    if (remember(EGPU_VCUDA_PTR, *dptr, card, actual, ctx) == 0)
        return CUDA_SUCCESS;
    (void)undo_free(*dptr);
    give(card, actual);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult call_free(const struct call *c)
{
    return EGPU_VCUDA_REAL(cuMemFree_v2)((CUdeviceptr)c->key);
}

static CUresult call_free_async(const struct call *c)
{
    return EGPU_VCUDA_REAL(cuMemFreeAsync)((CUdeviceptr)c->key, c->stream);
}

static CUresult call_free_async_ptsz(const struct call *c)
{
    return EGPU_VCUDA_REAL(cuMemFreeAsync_ptsz)((CUdeviceptr)c->key, c->stream);
}

EGPU_VCUDA_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    struct call c = {.key = dptr};

    CUresult r;

    if (!HAVE_REAL(cuMemFree_v2))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!counting())
        return call_free(&c);
    r = freed(EGPU_VCUDA_PTR, call_free, &c);
    pools_refresh(); /* a pool's block may be freed this way too */
    return r;
}

EGPU_VCUDA_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream)
{
    struct call c = {.key = dptr, .stream = stream};

    CUresult r;

    if (!HAVE_REAL(cuMemFreeAsync))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!counting())
        return call_free_async(&c);
    r = freed(EGPU_VCUDA_PTR, call_free_async, &c);
    pools_refresh();
    return r;
}

EGPU_VCUDA_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream)
{
    struct call c = {.key = dptr, .stream = stream};

    CUresult r;

    if (!HAVE_REAL(cuMemFreeAsync_ptsz))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!counting())
        return call_free_async_ptsz(&c);
    r = freed(EGPU_VCUDA_PTR, call_free_async_ptsz, &c);
    pools_refresh();
    return r;
}

/* ---- virtual memory management ---- */

static CUresult call_create(const struct call *c)
{
    return EGPU_VCUDA_REAL(cuMemCreate)(c->handle, c->bytes, c->prop, c->flags);
}

static CUresult call_release(const struct call *c)
{
    return EGPU_VCUDA_REAL(cuMemRelease)((CUmemGenericAllocationHandle)c->key);
}

EGPU_VCUDA_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t bytes,
                                       const CUmemAllocationProp *prop, unsigned long long flags)
{
    struct call c = {.handle = handle, .bytes = bytes, .prop = prop, .flags = (unsigned)flags};
    int card = -1;

    if (!HAVE_REAL(cuMemCreate))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (flags != 0) /* reserved by the API: let the driver refuse it */
        return EGPU_VCUDA_REAL(cuMemCreate)(handle, bytes, prop, flags);
    if (counting() && handle != NULL && prop != NULL &&
        prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE)
        card = egpu__vcuda_device_card(prop->location.id);
    if (card == -1)
        return call_create(&c);
    return counted(card, egpu__vcuda_round(bytes), 0, EGPU_VCUDA_VMM, call_create, key_handle,
                   undo_release, &c);
}

EGPU_VCUDA_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    struct call c = {.key = handle};

    if (!HAVE_REAL(cuMemRelease))
        return CUDA_ERROR_NOT_INITIALIZED;
    return counting() ? freed(EGPU_VCUDA_VMM, call_release, &c) : call_release(&c);
}

/* ---- memory pools ---- */

EGPU_VCUDA_EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    CUresult r;
    int card, i;

    if (!HAVE_REAL(cuMemPoolCreate))
        return CUDA_ERROR_NOT_INITIALIZED;
    r = EGPU_VCUDA_REAL(cuMemPoolCreate)(pool, props);
    if (r != CUDA_SUCCESS || !counting() || pool == NULL || props == NULL ||
        props->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return r;
    card = egpu__vcuda_device_card(props->location.id);
    if (card == -1)
        return r;
    pthread_mutex_lock(&pool_mu);
    i = pool_add(*pool, card);
    pthread_mutex_unlock(&pool_mu);
    if (i < 0) {
        egpu_log(EGPU_LOG_ERROR, "more than %d memory pools: failing cuMemPoolCreate", MAX_POOLS);
        (void)EGPU_VCUDA_REAL(cuMemPoolDestroy)(*pool);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return r;
}

EGPU_VCUDA_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    cuuint64_t used = 0;
    CUresult r;
    int i;

    if (!HAVE_REAL(cuMemPoolDestroy))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!counting())
        return EGPU_VCUDA_REAL(cuMemPoolDestroy)(pool);
    pthread_once(&drv_once, drv_init);
    pthread_mutex_lock(&pool_mu);
    i = pool_find(pool);
    if (i >= 0 && egpu__vcuda_helpers.pool_get_attribute != NULL &&
        egpu__vcuda_helpers.pool_get_attribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used) !=
            CUDA_SUCCESS)
        used = pools[i].bytes;
    r = EGPU_VCUDA_REAL(cuMemPoolDestroy)(pool);
    if (r == CUDA_SUCCESS && i >= 0) {
        /* Blocks still allocated stay with the driver until freed, but the
         * pool can no longer be asked: they count until the process ends. */
        used = egpu__vcuda_round(used);
        if (used < pools[i].bytes) {
            give(pools[i].card, pools[i].bytes - used);
            pools[i].bytes = used;
        }
        pools[i].gone = true;
        if (pools[i].bytes == 0)
            pools[i] = pools[--npools];
    }
    pthread_mutex_unlock(&pool_mu);
    return r;
}

/* After a call that may shrink pool's reservation: count it again. */
static void pool_changed(CUmemoryPool pool)
{
    int i;

    if (!counting())
        return;
    pthread_once(&drv_once, drv_init);
    pthread_mutex_lock(&pool_mu);
    i = pool_find(pool);
    if (i >= 0 && egpu__vcuda_helpers.pool_get_attribute != NULL)
        (void)pool_sync((unsigned)i); /* a growth here counts at the next allocation */
    pthread_mutex_unlock(&pool_mu);
}

EGPU_VCUDA_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t min_bytes_to_keep)
{
    CUresult r;

    if (!HAVE_REAL(cuMemPoolTrimTo))
        return CUDA_ERROR_NOT_INITIALIZED;
    r = EGPU_VCUDA_REAL(cuMemPoolTrimTo)(pool, min_bytes_to_keep);
    if (r == CUDA_SUCCESS)
        pool_changed(pool);
    return r;
}

EGPU_VCUDA_EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr,
                                                 void *value)
{
    CUresult r;

    if (!HAVE_REAL(cuMemPoolSetAttribute))
        return CUDA_ERROR_NOT_INITIALIZED;
    r = EGPU_VCUDA_REAL(cuMemPoolSetAttribute)(pool, attr, value);
    if (r == CUDA_SUCCESS && attr == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)
        pool_changed(pool);
    return r;
}

/* ---- arrays ---- */

static CUresult call_array(const struct call *c)
{
    return EGPU_VCUDA_REAL(cuArrayCreate_v2)(c->array, c->desc);
}

static CUresult call_array3d(const struct call *c)
{
    return EGPU_VCUDA_REAL(cuArray3DCreate_v2)(c->array, c->desc);
}

static CUresult call_mipmap(const struct call *c)
{
    return EGPU_VCUDA_REAL(cuMipmappedArrayCreate)(c->array, c->desc, c->levels);
}

static CUresult call_array_destroy(const struct call *c)
{
    return EGPU_VCUDA_REAL(cuArrayDestroy)((CUarray)(uintptr_t)c->key);
}

static CUresult call_mipmap_destroy(const struct call *c)
{
    return EGPU_VCUDA_REAL(cuMipmappedArrayDestroy)((CUmipmappedArray)(uintptr_t)c->key);
}

/* An array of bytes (before rounding) in the current context. */
static CUresult alloc_array(int kind, uint64_t bytes, CUresult (*call)(const struct call *c),
                            CUresult (*undo)(uint64_t key), const struct call *c)
{
    int card = -1;

    if (counting() && c->array != NULL && c->desc != NULL)
        card = current_card();
    if (card == -1)
        return call(c);
    return counted(card, egpu__vcuda_round(bytes), current_ctx(), kind, call, key_array, undo, c);
}

EGPU_VCUDA_EXPORT CUresult cuArrayCreate_v2(CUarray *array, const CUDA_ARRAY_DESCRIPTOR *desc)
{
    struct call c = {.array = array, .desc = desc};

    if (!HAVE_REAL(cuArrayCreate_v2))
        return CUDA_ERROR_NOT_INITIALIZED;
    return alloc_array(EGPU_VCUDA_ARRAY,
                       desc ? egpu__vcuda_array_bytes(desc->Width, desc->Height, 0, desc->Format,
                                                      desc->NumChannels, 0, 1)
                            : 0,
                       call_array, undo_array, &c);
}

EGPU_VCUDA_EXPORT CUresult cuArray3DCreate_v2(CUarray *array, const CUDA_ARRAY3D_DESCRIPTOR *desc)
{
    struct call c = {.array = array, .desc = desc};

    if (!HAVE_REAL(cuArray3DCreate_v2))
        return CUDA_ERROR_NOT_INITIALIZED;
    return alloc_array(EGPU_VCUDA_ARRAY,
                       desc ? egpu__vcuda_array_bytes(desc->Width, desc->Height, desc->Depth,
                                                      desc->Format, desc->NumChannels, desc->Flags,
                                                      1)
                            : 0,
                       call_array3d, undo_array, &c);
}

EGPU_VCUDA_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *array,
                                                  const CUDA_ARRAY3D_DESCRIPTOR *desc,
                                                  unsigned int levels)
{
    struct call c = {.array = array, .desc = desc, .levels = levels};

    if (!HAVE_REAL(cuMipmappedArrayCreate))
        return CUDA_ERROR_NOT_INITIALIZED;
    return alloc_array(EGPU_VCUDA_MIPMAP,
                       desc ? egpu__vcuda_array_bytes(desc->Width, desc->Height, desc->Depth,
                                                      desc->Format, desc->NumChannels, desc->Flags,
                                                      levels)
                            : 0,
                       call_mipmap, undo_mipmap, &c);
}

EGPU_VCUDA_EXPORT CUresult cuArrayDestroy(CUarray array)
{
    struct call c = {.key = (uint64_t)(uintptr_t)array};

    if (!HAVE_REAL(cuArrayDestroy))
        return CUDA_ERROR_NOT_INITIALIZED;
    return counting() ? freed(EGPU_VCUDA_ARRAY, call_array_destroy, &c) : call_array_destroy(&c);
}

EGPU_VCUDA_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray array)
{
    struct call c = {.key = (uint64_t)(uintptr_t)array};

    if (!HAVE_REAL(cuMipmappedArrayDestroy))
        return CUDA_ERROR_NOT_INITIALIZED;
    return counting() ? freed(EGPU_VCUDA_MIPMAP, call_mipmap_destroy, &c) : call_mipmap_destroy(&c);
}

/* ---- contexts ---- */

static CUresult call_ctx_v2(const struct call *c)
{
    return EGPU_VCUDA_REAL(cuCtxCreate_v2)(c->pctx, c->flags, c->dev);
}

static CUresult call_ctx_v3(const struct call *c)
{
    return EGPU_VCUDA_REAL(cuCtxCreate_v3)(c->pctx, c->affinity, c->naffinity, c->flags, c->dev);
}

static CUresult call_ctx_v4(const struct call *c)
{
    return EGPU_VCUDA_REAL(cuCtxCreate_v4)(c->pctx, c->params, c->flags, c->dev);
}

/* ---- a context's footprint ---- */

#define CTX_CEIL_FACTOR  4    /* no real context takes more than 4x its model's figure */
#define CTX_LOCK_WAIT_MS 2000 /* then give up measuring: the estimate counts */

/* Device memory a context takes by model, measured: cuDeviceGetName
 * contains the key. Other models count EGPU_VCUDA_CONTEXT_MIB_DEFAULT. */
static const struct {
    const char *key;
    uint64_t mib;
} ctx_models[] = {
    {"H100", 524}, /* a bare context measured 523.6 MiB (bench_gpu_mem) */
    {"H200", 524}, /* the same GPU (GH100) with more memory */
};

/* What a context on dev counts by its model, bytes. */
static uint64_t ctx_model_bytes(CUdevice dev)
{
    char name[256];

    pthread_once(&drv_once, drv_init);
    if (egpu__vcuda_helpers.device_get_name != NULL &&
        egpu__vcuda_helpers.device_get_name(name, sizeof(name), dev) == 0) {
        for (size_t i = 0; i < sizeof(ctx_models) / sizeof(ctx_models[0]); i++) {
            if (strstr(name, ctx_models[i].key) != NULL)
                return ctx_models[i].mib << 20;
        }
    }
    return (uint64_t)EGPU_VCUDA_CONTEXT_MIB_DEFAULT << 20;
}

/* What a new context on dev counts before it is measured: the configured
 * EGPU_VCUDA_CONTEXT_MIB, else the last footprint measured on dev by this
 * process, else the model's figure. */
static uint64_t ctx_estimate(CUdevice dev)
{
    uint64_t m;

    if (egpu__vcuda_state.cfg.has_context_mib)
        return egpu__vcuda_state.ctx_bytes;
    m = dev >= 0 && dev < EGPU_VCUDA_MAX_CARDS ? ctx_measured[dev] : 0;
    return m > 0 ? m : ctx_model_bytes(dev);
}

/* A measurement under way: the container's context lock, and the card's
 * free memory (real NVML) before the context was made. */
struct ctx_probe {
    int fd; /* the lock file, -1: not measuring */
    struct egpu_nvml_device *nv;
    uint64_t free_before;
};

/* NVML's handle of the card dev, found by UUID; NULL when none. */
static struct egpu_nvml_device *nvml_of(CUdevice dev)
{
    struct egpu__vcuda_uuid want, got;
    char text[EGPU_NVML_UUID_BUFFER_SIZE];
    unsigned n = 0;
    CUuuid cu;

    if (egpu__vcuda_helpers.device_get_uuid == NULL ||
        egpu__vcuda_helpers.device_get_uuid(&cu, dev) != CUDA_SUCCESS ||
        egpu__vcuda_helpers.nvml_device_get_count(&n) != EGPU_NVML_SUCCESS)
        return NULL;
    memcpy(want.b, cu.bytes, sizeof(want.b));
    for (unsigned i = 0; i < n; i++) {
        struct egpu_nvml_device *nv;

        if (egpu__vcuda_helpers.nvml_device_get_handle(i, &nv) == EGPU_NVML_SUCCESS &&
            egpu__vcuda_helpers.nvml_device_get_uuid(nv, text, sizeof(text)) == EGPU_NVML_SUCCESS &&
            egpu__vcuda_uuid_parse(text, &got) == 0 && memcmp(got.b, want.b, 16) == 0)
            return nv;
    }
    return NULL;
}

/* <region dir>/vcuda-context.lock, locked (flock, exclusive); -1 when it
 * cannot be opened (a link, not a regular file) or stays held. */
static int ctx_lock(void)
{
    char path[PATH_MAX + 32];
    struct stat st;
    int fd;

    if (egpu__vcuda_state.cfg.region_dir[0] == '\0' ||
        snprintf(path, sizeof(path), "%s/%s", egpu__vcuda_state.cfg.region_dir,
                 EGPU_VCUDA_CONTEXT_LOCK_NAME) >= (int)sizeof(path))
        return -1;
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0666);
    if (fd < 0)
        return -1;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return -1;
    }
    (void)fchmod(fd, 0666); /* every process of the container, whatever its umask */
    for (int ms = 0; flock(fd, LOCK_EX | LOCK_NB) != 0; ms++) {
        struct timespec one_ms = {0, 1000000};

        if (errno != EWOULDBLOCK && errno != EINTR)
            ms = CTX_LOCK_WAIT_MS;
        if (ms >= CTX_LOCK_WAIT_MS) {
            close(fd);
            return -1;
        }
        nanosleep(&one_ms, NULL);
    }
    return fd;
}

/* Start measuring a context about to be made on dev: m->fd is -1 when it
 * cannot be (configured figure, no NVML, no lock). */
static void ctx_probe_begin(CUdevice dev, struct ctx_probe *m)
{
    struct egpu_nvml_memory mem;

    m->fd = -1;
    if (egpu__vcuda_state.cfg.has_context_mib)
        return;
    pthread_once(&drv_once, drv_init);
    if (!nvml_ready || (m->nv = nvml_of(dev)) == NULL)
        return;
    m->fd = ctx_lock();
    if (m->fd < 0)
        return;
    if (EGPU_VCUDA_REAL(nvmlDeviceGetMemoryInfo)(m->nv, &mem) != EGPU_NVML_SUCCESS) {
        close(m->fd); /* closing drops the flock */
        m->fd = -1;
        return;
    }
    m->free_before = mem.free;
}

/* End the measurement (made: the context was created). Returns the bytes
 * the context counts: the drop in the card's free memory rounded up to the
 * granularity, never below the model's figure (another process of the
 * container freeing memory meanwhile, which the lock does not hold, would
 * shrink the drop: a measurement only ever raises the charge), when measured
 * and not above CTX_CEIL_FACTOR x the model's figure; else estimate. */
static uint64_t ctx_probe_end(CUdevice dev, struct ctx_probe *m, bool made, uint64_t estimate)
{
    struct egpu_nvml_memory mem;
    uint64_t drop = 0, model;

    if (m->fd < 0)
        return estimate;
    if (made && EGPU_VCUDA_REAL(nvmlDeviceGetMemoryInfo)(m->nv, &mem) == EGPU_NVML_SUCCESS &&
        mem.free < m->free_before)
        drop = egpu__vcuda_round(m->free_before - mem.free);
    close(m->fd);
    if (!made)
        return estimate;
    model = ctx_model_bytes(dev);
    if (drop > CTX_CEIL_FACTOR * model) {
        egpu_log(EGPU_LOG_INFO,
                 "context footprint dev=%d measured_bytes=%llu out of range: counting %llu", dev,
                 (unsigned long long)drop, (unsigned long long)estimate);
        return estimate;
    }
    egpu_log(EGPU_LOG_DEBUG, "context footprint dev=%d measured_bytes=%llu model_bytes=%llu", dev,
             (unsigned long long)drop, (unsigned long long)model);
    if (drop < model)
        drop = model;
    ctx_measured[dev] = drop;
    return drop;
}

/* One more counted context of this process on card: the first one takes
 * EGPU_VCUDA_CONTEXT_EXTRA_MIB (see CONTEXTS). Caller holds ctx_mu.
 * CUDA_SUCCESS, or CUDA_ERROR_OUT_OF_MEMORY with nothing changed. */
static CUresult ctx_extra_enter(int card)
{
    uint64_t extra = egpu__vcuda_state.ctx_extra_bytes;

    if (card < 0 || card >= EGPU_VCUDA_MAX_CARDS)
        return CUDA_SUCCESS; /* not counted, or closed: the context's own take fails */
    if (ctx_live[card] == 0 && extra > 0 && take(card, extra) != CUDA_SUCCESS)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ctx_live[card]++;
    return CUDA_SUCCESS;
}

/* One counted context of this process on card fewer (or one that was never
 * made): the last one gives the extra back. Caller holds ctx_mu. */
static void ctx_extra_leave(int card)
{
    if (card < 0 || card >= EGPU_VCUDA_MAX_CARDS || ctx_live[card] == 0)
        return;
    if (--ctx_live[card] == 0)
        give(card, egpu__vcuda_state.ctx_extra_bytes);
}

static CUresult ctx_extra_enter_locked(int card)
{
    CUresult r;

    pthread_mutex_lock(&ctx_mu);
    r = ctx_extra_enter(card);
    pthread_mutex_unlock(&ctx_mu);
    return r;
}

static void ctx_extra_leave_locked(int card)
{
    pthread_mutex_lock(&ctx_mu);
    ctx_extra_leave(card);
    pthread_mutex_unlock(&ctx_mu);
}

/* A new context on c->dev counts its footprint: the process's extra on the
 * card when it is its first context there, and the estimate, are taken
 * first (over the limit: nothing is made), the context made and measured,
 * and the count moved to the measured figure (over the limit then: the
 * context is destroyed again, the extra given back). */
static CUresult create_ctx(CUresult (*call)(const struct call *c), const struct call *c)
{
    struct egpu__vcuda_track_entry old;
    struct ctx_probe m;
    uint64_t est, bytes, key;
    CUresult r;
    int card = -1;

    if (counting() && c->pctx != NULL)
        card = egpu__vcuda_device_card(c->dev);
    if (card == -1)
        return call(c);
    if (ctx_extra_enter_locked(card) != CUDA_SUCCESS)
        return CUDA_ERROR_OUT_OF_MEMORY;
    est = ctx_estimate(c->dev);
    if (take(card, est) != CUDA_SUCCESS) {
        ctx_extra_leave_locked(card);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    ctx_probe_begin(c->dev, &m);
    r = call(c);
    bytes = ctx_probe_end(c->dev, &m, r == CUDA_SUCCESS, est);
    if (r != CUDA_SUCCESS) {
        give(card, est);
        ctx_extra_leave_locked(card);
        return r;
    }
    key = key_ctx(c);
    if (recount(card, est, bytes) != CUDA_SUCCESS) {
        (void)undo_ctx(key);
        give(card, est);
        ctx_extra_leave_locked(card);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (forget(EGPU_VCUDA_CTX, key, &old)) {
        /* A context with this handle went by a path not hooked: it is no
         * longer one of the process's contexts on its card. */
        give(old.card, old.bytes);
        ctx_extra_leave_locked(old.card);
    }
    if (remember(EGPU_VCUDA_CTX, key, card, bytes, 0) == 0)
        return CUDA_SUCCESS;
    (void)undo_ctx(key);
    give(card, bytes);
    ctx_extra_leave_locked(card);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

EGPU_VCUDA_EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    struct call c = {.pctx = pctx, .flags = flags, .dev = dev};

    if (!HAVE_REAL(cuCtxCreate_v2))
        return CUDA_ERROR_NOT_INITIALIZED;
    return egpu__vcuda_ctx_changed(create_ctx(call_ctx_v2, &c)); /* made current */
}

EGPU_VCUDA_EXPORT CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *params, int nparams,
                                          unsigned int flags, CUdevice dev)
{
    struct call c = {
        .pctx = pctx, .affinity = params, .naffinity = nparams, .flags = flags, .dev = dev};

    if (!HAVE_REAL(cuCtxCreate_v3))
        return CUDA_ERROR_NOT_INITIALIZED;
    return egpu__vcuda_ctx_changed(create_ctx(call_ctx_v3, &c));
}

EGPU_VCUDA_EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params,
                                          unsigned int flags, CUdevice dev)
{
    struct call c = {.pctx = pctx, .params = params, .flags = flags, .dev = dev};

    if (!HAVE_REAL(cuCtxCreate_v4))
        return CUDA_ERROR_NOT_INITIALIZED;
    return egpu__vcuda_ctx_changed(create_ctx(call_ctx_v4, &c));
}

static CUresult destroy_ctx(CUcontext ctx)
{
    uint64_t key = (uint64_t)(uintptr_t)ctx;
    struct egpu__vcuda_track_entry e;
    CUresult r;
    bool found;

    if (!counting())
        return EGPU_VCUDA_REAL(cuCtxDestroy_v2)(ctx);
    found = forget(EGPU_VCUDA_CTX, key, &e);
    r = EGPU_VCUDA_REAL(cuCtxDestroy_v2)(ctx);
    if (r != CUDA_SUCCESS) {
        if (found)
            (void)remember(EGPU_VCUDA_CTX, key, e.card, e.bytes, 0);
        return r;
    }
    if (found) {
        give(e.card, e.bytes);
        ctx_extra_leave_locked(e.card);
    }
    drop_ctx(key);
    return r;
}

EGPU_VCUDA_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    if (!HAVE_REAL(cuCtxDestroy_v2))
        return CUDA_ERROR_NOT_INITIALIZED;
    return egpu__vcuda_ctx_changed(destroy_ctx(ctx)); /* it pops ctx when it was current */
}

/* The card of dev for a primary-context call, -1 when not counted. */
static int primary_card(CUdevice dev)
{
    if (!counting() || dev < 0 || dev >= EGPU_VCUDA_MAX_CARDS)
        return -1;
    return egpu__vcuda_device_card(dev);
}

EGPU_VCUDA_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    struct ctx_probe m;
    uint64_t est = 0, bytes;
    bool first;
    CUresult r;
    int card;

    if (!HAVE_REAL(cuDevicePrimaryCtxRetain))
        return CUDA_ERROR_NOT_INITIALIZED;
    card = primary_card(dev);
    if (card == -1)
        return EGPU_VCUDA_REAL(cuDevicePrimaryCtxRetain)(pctx, dev);
    /* Held across the real call: two threads retaining at once must count
     * the primary context once. The first retain makes the context: it is
     * measured as cuCtxCreate's are (create_ctx), extra included. */
    pthread_mutex_lock(&ctx_mu);
    first = primary_refs[dev] == 0;
    if (first) {
        if (ctx_extra_enter(card) != CUDA_SUCCESS) {
            pthread_mutex_unlock(&ctx_mu);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        est = ctx_estimate(dev);
        if (take(card, est) != CUDA_SUCCESS) {
            ctx_extra_leave(card);
            pthread_mutex_unlock(&ctx_mu);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        ctx_probe_begin(dev, &m);
    }
    r = EGPU_VCUDA_REAL(cuDevicePrimaryCtxRetain)(pctx, dev);
    if (first) {
        bytes = ctx_probe_end(dev, &m, r == CUDA_SUCCESS, est);
        if (r != CUDA_SUCCESS) {
            give(card, est);
            ctx_extra_leave(card);
        } else if (recount(card, est, bytes) != CUDA_SUCCESS) {
            if (EGPU_VCUDA_REAL(cuDevicePrimaryCtxRelease_v2) != NULL)
                (void)EGPU_VCUDA_REAL(cuDevicePrimaryCtxRelease_v2)(dev);
            give(card, est);
            ctx_extra_leave(card);
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            primary_bytes[dev] = bytes;
        }
    }
    if (r == CUDA_SUCCESS) {
        primary_refs[dev]++;
        if (pctx)
            primary_ctx[dev] = *pctx;
    }
    pthread_mutex_unlock(&ctx_mu);
    return r;
}

EGPU_VCUDA_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    uint64_t gone = 0;
    CUresult r;
    int card;

    if (!HAVE_REAL(cuDevicePrimaryCtxRelease_v2))
        return CUDA_ERROR_NOT_INITIALIZED;
    card = primary_card(dev);
    if (card == -1)
        return EGPU_VCUDA_REAL(cuDevicePrimaryCtxRelease_v2)(dev);
    pthread_mutex_lock(&ctx_mu);
    r = EGPU_VCUDA_REAL(cuDevicePrimaryCtxRelease_v2)(dev);
    if (r == CUDA_SUCCESS && primary_refs[dev] > 0 && --primary_refs[dev] == 0) {
        gone = (uint64_t)(uintptr_t)primary_ctx[dev];
        primary_ctx[dev] = NULL;
        give(card, primary_bytes[dev]);
        primary_bytes[dev] = 0;
        ctx_extra_leave(card);
    }
    pthread_mutex_unlock(&ctx_mu);
    if (gone)
        drop_ctx(gone);
    return r;
}

EGPU_VCUDA_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    uint64_t gone = 0;
    CUresult r;

    if (!HAVE_REAL(cuDevicePrimaryCtxReset_v2))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (primary_card(dev) == -1)
        return EGPU_VCUDA_REAL(cuDevicePrimaryCtxReset_v2)(dev);
    /* The context's allocations go; its reference count (and so its own
     * footprint, made again on next use) stays. */
    pthread_mutex_lock(&ctx_mu);
    r = EGPU_VCUDA_REAL(cuDevicePrimaryCtxReset_v2)(dev);
    if (r == CUDA_SUCCESS)
        gone = (uint64_t)(uintptr_t)primary_ctx[dev];
    pthread_mutex_unlock(&ctx_mu);
    if (gone)
        drop_ctx(gone);
    return r;
}

/* ---- memory queries ---- */

/* Usage of card as the container sees it: used <= total <= limit. */
static void report(int card, uint64_t real_total, uint64_t real_free, uint64_t *total,
                   uint64_t *used, uint64_t *free_bytes)
{
    uint64_t u = 0, t = egpu__vcuda_state.limit_bytes;

    if (t > real_total)
        t = real_total;
    if (card == EGPU_VCUDA_CARD_CLOSED || egpu__vcuda_state.region == NULL)
        t = 0;
    else if (egpu__vcuda_region_used(egpu__vcuda_state.region, card, &u) != 0)
        u = t; /* cannot read it: show nothing free (allocations fail too) */
    if (u > t)
        u = t;
    *total = t;
    *used = u;
    *free_bytes = t - u < real_free ? t - u : real_free;
}

EGPU_VCUDA_EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes)
{
    uint64_t t, u, f;
    CUresult r;
    int card;

    if (!HAVE_REAL(cuMemGetInfo_v2))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (counting())
        pools_refresh(); /* what the pools released at a synchronisation is free again */
    r = EGPU_VCUDA_REAL(cuMemGetInfo_v2)(free_bytes, total_bytes);
    if (r != CUDA_SUCCESS || free_bytes == NULL || total_bytes == NULL || !counting() ||
        (card = current_card()) == -1)
        return r;
    report(card, *total_bytes, *free_bytes, &t, &u, &f);
    *total_bytes = (size_t)t;
    *free_bytes = (size_t)f;
    return r;
}

EGPU_VCUDA_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    CUresult r;
    int card;

    if (!HAVE_REAL(cuDeviceTotalMem_v2))
        return CUDA_ERROR_NOT_INITIALIZED;
    r = EGPU_VCUDA_REAL(cuDeviceTotalMem_v2)(bytes, dev);
    if (r != CUDA_SUCCESS || bytes == NULL || !counting() ||
        (card = egpu__vcuda_device_card(dev)) == -1)
        return r;
    if (card == EGPU_VCUDA_CARD_CLOSED)
        *bytes = 0;
    else if (*bytes > egpu__vcuda_state.limit_bytes)
        *bytes = (size_t)egpu__vcuda_state.limit_bytes;
    return r;
}

/* The card of an NVML device (by its UUID), -1 when not limited. */
static int nvml_card(struct egpu_nvml_device *device)
{
    char text[EGPU_NVML_UUID_BUFFER_SIZE];
    struct egpu__vcuda_uuid u;
    int card;

    if (egpu__vcuda_helpers.nvml_device_get_uuid == NULL ||
        egpu__vcuda_helpers.nvml_device_get_uuid(device, text, sizeof(text)) != EGPU_NVML_SUCCESS ||
        egpu__vcuda_uuid_parse(text, &u) != 0 ||
        !egpu__vcuda_config_covers(&egpu__vcuda_state.cfg, &u))
        return -1;
    if (egpu__vcuda_state.region == NULL ||
        egpu__vcuda_region_card(egpu__vcuda_state.region, &u, &card) != 0)
        return EGPU_VCUDA_CARD_CLOSED;
    return card;
}

EGPU_VCUDA_EXPORT int nvmlDeviceGetMemoryInfo(struct egpu_nvml_device *device,
                                              struct egpu_nvml_memory *memory)
{
    uint64_t t, u, f;
    int r, card;

    if (!egpu__vcuda_nvml() || EGPU_VCUDA_REAL(nvmlDeviceGetMemoryInfo) == NULL)
        return EGPU_NVML_ERROR_LIBRARY_NOT_FOUND;
    r = EGPU_VCUDA_REAL(nvmlDeviceGetMemoryInfo)(device, memory);
    if (r != EGPU_NVML_SUCCESS || memory == NULL || !counting() || (card = nvml_card(device)) == -1)
        return r;
    report(card, memory->total, memory->free, &t, &u, &f);
    memory->total = t;
    memory->used = u;
    memory->free = t - u;
    return r;
}

EGPU_VCUDA_EXPORT int nvmlDeviceGetMemoryInfo_v2(struct egpu_nvml_device *device,
                                                 struct egpu_nvml_memory_v2 *memory)
{
    uint64_t t, u, f;
    int r, card;

    if (!egpu__vcuda_nvml() || EGPU_VCUDA_REAL(nvmlDeviceGetMemoryInfo_v2) == NULL)
        return EGPU_NVML_ERROR_LIBRARY_NOT_FOUND;
    r = EGPU_VCUDA_REAL(nvmlDeviceGetMemoryInfo_v2)(device, memory);
    if (r != EGPU_NVML_SUCCESS || memory == NULL || !counting() || (card = nvml_card(device)) == -1)
        return r;
    report(card, memory->total, memory->free + memory->reserved, &t, &u, &f);
    memory->total = t;
    memory->reserved = 0;
    memory->used = u;
    memory->free = t - u;
    return r;
}
