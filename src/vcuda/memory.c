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
 *   cuMemAllocAsync(_ptsz)              size, current device (the stream's)
 *   cuMemAllocFromPoolAsync(_ptsz)      size, the pool's device
 *   cuMemCreate / cuMemRelease          size, prop->location (a device)
 *   cuArrayCreate_v2, cuArray3DCreate_v2, cuMipmappedArrayCreate
 *                                       texels x element size (sizes.c)
 *   cuCtxCreate_v2/_v3/_v4, first cuDevicePrimaryCtxRetain of a device
 *                                       EGPU_VCUDA_CONTEXT_MIB
 * Destroying a context (or releasing a primary context for the last time,
 * or resetting it) also gives back what was allocated in it (device
 * pointers and arrays): the driver frees them. cuMemCreate, async and pool
 * memory is not bound to a context and stays counted until freed.
 *
 * cuMemGetInfo_v2, cuDeviceTotalMem_v2, nvmlDeviceGetMemoryInfo(_v2):
 * total = min(limit, the card's real total), used = the container's usage
 * (dead processes reclaimed first), never above total, free = total - used,
 * never more than the card really has free.
 *
 * No memory limit configured: every wrapper calls the real function at once.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "egpu/log.h"
#include "hooks.h"

static pthread_mutex_t track_mu = PTHREAD_MUTEX_INITIALIZER; /* objects */
static pthread_mutex_t ctx_mu = PTHREAD_MUTEX_INITIALIZER;   /* primary contexts */
static struct egpu__vcuda_track objects;
static unsigned primary_refs[EGPU_VCUDA_MAX_CARDS]; /* by CUdevice */
static CUcontext primary_ctx[EGPU_VCUDA_MAX_CARDS];

void egpu__vcuda_memory_atfork_prepare(void)
{
    pthread_mutex_lock(&ctx_mu);
    pthread_mutex_lock(&track_mu);
}

void egpu__vcuda_memory_atfork_parent(void)
{
    pthread_mutex_unlock(&track_mu);
    pthread_mutex_unlock(&ctx_mu);
}

void egpu__vcuda_memory_atfork_child(void)
{
    egpu__vcuda_track_clear(&objects);
    memset(primary_refs, 0, sizeof(primary_refs));
    memset(primary_ctx, 0, sizeof(primary_ctx));
    pthread_mutex_unlock(&track_mu);
    pthread_mutex_unlock(&ctx_mu);
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

static bool lookup(int kind, uint64_t key, struct egpu__vcuda_track_entry *e)
{
    bool found;

    pthread_mutex_lock(&track_mu);
    found = egpu__vcuda_track_get(&objects, kind, key, e);
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

EGPU_VCUDA_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytes, CUstream stream)
{
    struct call c = {.dptr = dptr, .bytes = bytes, .stream = stream};

    if (!HAVE_REAL(cuMemAllocAsync))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!counting())
        return call_async(&c);
    return alloc_ptr(current_card(), 0, call_async, &c);
}

EGPU_VCUDA_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytes, CUstream stream)
{
    struct call c = {.dptr = dptr, .bytes = bytes, .stream = stream};

    if (!HAVE_REAL(cuMemAllocAsync_ptsz))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!counting())
        return call_async_ptsz(&c);
    return alloc_ptr(current_card(), 0, call_async_ptsz, &c);
}

/* The pool's card (remembered at cuMemPoolCreate), else the current one. */
static int pool_card(CUmemoryPool pool)
{
    struct egpu__vcuda_track_entry e;

    if (lookup(EGPU_VCUDA_POOL, (uint64_t)(uintptr_t)pool, &e))
        return e.card;
    return current_card();
}

EGPU_VCUDA_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytes,
                                                   CUmemoryPool pool, CUstream stream)
{
    struct call c = {.dptr = dptr, .bytes = bytes, .pool = pool, .stream = stream};

    if (!HAVE_REAL(cuMemAllocFromPoolAsync))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!counting())
        return call_from_pool(&c);
    return alloc_ptr(pool_card(pool), 0, call_from_pool, &c);
}

EGPU_VCUDA_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytes,
                                                        CUmemoryPool pool, CUstream stream)
{
    struct call c = {.dptr = dptr, .bytes = bytes, .pool = pool, .stream = stream};

    if (!HAVE_REAL(cuMemAllocFromPoolAsync_ptsz))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!counting())
        return call_from_pool_ptsz(&c);
    return alloc_ptr(pool_card(pool), 0, call_from_pool_ptsz, &c);
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

    if (!HAVE_REAL(cuMemFree_v2))
        return CUDA_ERROR_NOT_INITIALIZED;
    return counting() ? freed(EGPU_VCUDA_PTR, call_free, &c) : call_free(&c);
}

EGPU_VCUDA_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream)
{
    struct call c = {.key = dptr, .stream = stream};

    if (!HAVE_REAL(cuMemFreeAsync))
        return CUDA_ERROR_NOT_INITIALIZED;
    return counting() ? freed(EGPU_VCUDA_PTR, call_free_async, &c) : call_free_async(&c);
}

EGPU_VCUDA_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream)
{
    struct call c = {.key = dptr, .stream = stream};

    if (!HAVE_REAL(cuMemFreeAsync_ptsz))
        return CUDA_ERROR_NOT_INITIALIZED;
    return counting() ? freed(EGPU_VCUDA_PTR, call_free_async_ptsz, &c) : call_free_async_ptsz(&c);
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

static CUresult call_pool_destroy(const struct call *c)
{
    return EGPU_VCUDA_REAL(cuMemPoolDestroy)((CUmemoryPool)(uintptr_t)c->key);
}

EGPU_VCUDA_EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    CUresult r;
    int card;

    if (!HAVE_REAL(cuMemPoolCreate))
        return CUDA_ERROR_NOT_INITIALIZED;
    r = EGPU_VCUDA_REAL(cuMemPoolCreate)(pool, props);
    if (r != CUDA_SUCCESS || !counting() || pool == NULL || props == NULL ||
        props->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return r;
    card = egpu__vcuda_device_card(props->location.id);
    if (card != -1 && remember(EGPU_VCUDA_POOL, (uint64_t)(uintptr_t)*pool, card, 0, 0) != 0) {
        (void)EGPU_VCUDA_REAL(cuMemPoolDestroy)(*pool);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return r;
}

EGPU_VCUDA_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    struct call c = {.key = (uint64_t)(uintptr_t)pool};

    /* Blocks still allocated from the pool stay counted until freed: the
     * driver keeps them until then too. */
    if (!HAVE_REAL(cuMemPoolDestroy))
        return CUDA_ERROR_NOT_INITIALIZED;
    return counting() ? freed(EGPU_VCUDA_POOL, call_pool_destroy, &c) : call_pool_destroy(&c);
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

/* A new context on c->dev counts EGPU_VCUDA_CONTEXT_MIB. */
static CUresult create_ctx(CUresult (*call)(const struct call *c), const struct call *c)
{
    int card = -1;

    if (counting() && c->pctx != NULL)
        card = egpu__vcuda_device_card(c->dev);
    if (card == -1)
        return call(c);
    return counted(card, egpu__vcuda_state.ctx_bytes, 0, EGPU_VCUDA_CTX, call, key_ctx, undo_ctx,
                   c);
}

EGPU_VCUDA_EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    struct call c = {.pctx = pctx, .flags = flags, .dev = dev};

    if (!HAVE_REAL(cuCtxCreate_v2))
        return CUDA_ERROR_NOT_INITIALIZED;
    return create_ctx(call_ctx_v2, &c);
}

EGPU_VCUDA_EXPORT CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *params, int nparams,
                                          unsigned int flags, CUdevice dev)
{
    struct call c = {
        .pctx = pctx, .affinity = params, .naffinity = nparams, .flags = flags, .dev = dev};

    if (!HAVE_REAL(cuCtxCreate_v3))
        return CUDA_ERROR_NOT_INITIALIZED;
    return create_ctx(call_ctx_v3, &c);
}

EGPU_VCUDA_EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params,
                                          unsigned int flags, CUdevice dev)
{
    struct call c = {.pctx = pctx, .params = params, .flags = flags, .dev = dev};

    if (!HAVE_REAL(cuCtxCreate_v4))
        return CUDA_ERROR_NOT_INITIALIZED;
    return create_ctx(call_ctx_v4, &c);
}

EGPU_VCUDA_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    uint64_t key = (uint64_t)(uintptr_t)ctx;
    struct egpu__vcuda_track_entry e;
    CUresult r;
    bool found;

    if (!HAVE_REAL(cuCtxDestroy_v2))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!counting())
        return EGPU_VCUDA_REAL(cuCtxDestroy_v2)(ctx);
    found = forget(EGPU_VCUDA_CTX, key, &e);
    r = EGPU_VCUDA_REAL(cuCtxDestroy_v2)(ctx);
    if (r != CUDA_SUCCESS) {
        if (found)
            (void)remember(EGPU_VCUDA_CTX, key, e.card, e.bytes, 0);
        return r;
    }
    if (found)
        give(e.card, e.bytes);
    drop_ctx(key);
    return r;
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
    uint64_t bytes = egpu__vcuda_state.ctx_bytes;
    bool first;
    CUresult r;
    int card;

    if (!HAVE_REAL(cuDevicePrimaryCtxRetain))
        return CUDA_ERROR_NOT_INITIALIZED;
    card = primary_card(dev);
    if (card == -1)
        return EGPU_VCUDA_REAL(cuDevicePrimaryCtxRetain)(pctx, dev);
    /* Held across the real call: two threads retaining at once must count
     * the primary context once. */
    pthread_mutex_lock(&ctx_mu);
    first = primary_refs[dev] == 0;
    if (first && take(card, bytes) != CUDA_SUCCESS) {
        pthread_mutex_unlock(&ctx_mu);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    r = EGPU_VCUDA_REAL(cuDevicePrimaryCtxRetain)(pctx, dev);
    if (r == CUDA_SUCCESS) {
        primary_refs[dev]++;
        if (pctx)
            primary_ctx[dev] = *pctx;
    } else if (first) {
        give(card, bytes);
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
        give(card, egpu__vcuda_state.ctx_bytes);
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
