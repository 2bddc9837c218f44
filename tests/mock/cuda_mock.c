/* tests/mock/cuda_mock.c - a mock CUDA driver, libcuda.so.1, for testing the
 * interposer (src/vcuda) and the GPU benchmarks without a GPU. Test code,
 * never shipped; built by tests/mock/CMakeLists.txt as
 * <build>/tests/mock/cuda/libcuda.so.1 (SONAME libcuda.so.1).
 *
 * It implements the subset of the CUDA driver API in include/egpu/cuda_abi.h
 * with the real ABI (types, values and exported, versioned symbol names of
 * the CUDA driver API) and the real semantics wherever the tests touch them,
 * over the simulated machine of mock_device.h (cards, device memory, device
 * clock), shared by every process that names the same state file.
 *
 * Environment (read at cuInit unless said otherwise):
 *   EGPU_MOCK_NVML_GPUS        the cards, "name:MiB[:uuid],..." (default two
 *                              A100 80GB); CUdevice i is card i. A shared
 *                              state keeps the cards of the process that
 *                              created it.
 *   EGPU_MOCK_CUDA_STATE       path of the state file every process maps
 *                              (created on first use; read at the first
 *                              cuInit); unset or empty: private state
 *   EGPU_MOCK_CUDA_CONTEXT_MIB device memory each context takes, MiB
 *                              (default 300; read at each context creation)
 *   EGPU_MOCK_CUDA_POOL_CHUNK_MIB  what a memory pool's reservation grows by
 *                              at least, MiB (default 2, the granularity;
 *                              read at each growth)
 *   EGPU_MOCK_CUDA_BLOCK_NS    device time per thread block of a launch, ns
 *                              (default 1000; read by cuModuleGetFunction)
 *   EGPU_MOCK_CUDA_KERNEL_NS   "name=ns_per_block,..." per kernel name
 *                              (read by cuModuleGetFunction)
 *   EGPU_MOCK_CUDA_SUBMIT_NS   host time of a kernel launch call, ns, spent
 *                              before the kernel reaches the card (default
 *                              0; read at the first launch)
 *   EGPU_MOCK_CUDA_CALL_NS     host time of a call, ns, spent (spinning) at
 *                              the entry point before it does anything
 *                              else, as a real driver's call takes: a list
 *                              of "<name>=<ns>" (the entry point and its
 *                              _v2, _ptsz, _ptds variants) and "real" (the
 *                              figures of real_latency below, an H200's:
 *                              cuCtxGetCurrent, cuCtxGetDevice,
 *                              cuStreamIsCapturing,
 *                              cuThreadExchangeStreamCaptureMode,
 *                              cuStreamQuery, cuEventRecord, cuEventQuery
 *                              and cuEventElapsedTime), later items winning
 *                              (default: none; read at each entry point's
 *                              first call). A launch's own host time is
 *                              EGPU_MOCK_CUDA_SUBMIT_NS (a launch named here
 *                              spends both)
 *   EGPU_MOCK_CUDA_GRAPH_NS    device time of a launch of a graph with no
 *                              captured work (cuGraphCreate), ns (default
 *                              1000000; read by cuGraphInstantiateWithFlags)
 *   EGPU_MOCK_CUDA_TAG         who launches, for busy time (default "pid<pid>")
 *   EGPU_MOCK_CUDA_SMS         streaming multiprocessors of every card (what
 *                              CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
 *                              reports), 1..100000; set, a launch runs its
 *                              blocks in waves of that many (see Time).
 *                              Unset (or out of range): 108 (an A100's)
 *                              reported, and blocks one after another (read
 *                              by cuDeviceGetAttribute and
 *                              cuModuleGetFunction)
 *   EGPU_MOCK_CUDA_VERSION     what cuDriverGetVersion reports (default 12040)
 *
 * Device memory. Every device allocation is rounded up to the 2 MiB
 * granularity (EGPU_MOCK_GRANULARITY, also what
 * cuMemGetAllocationGranularity reports) and taken from its card: cuMemAlloc,
 * pitch (pitch = width rounded up to 512 bytes), managed, cuMemCreate (size a
 * multiple of the granularity), cuMemAllocAsync and pools, arrays and
 * mipmapped arrays (width * max(height,1) * max(depth,1) * channels * format
 * bytes, a mipmap's levels summed), and each context
 * (EGPU_MOCK_CUDA_CONTEXT_MIB). cuMemHostAlloc takes none: it returns real,
 * writable host memory. Over the card's free memory: CUDA_ERROR_OUT_OF_MEMORY
 * and nothing taken. Frees give it back; an unknown pointer or handle is
 * CUDA_ERROR_INVALID_VALUE. Device pointers are fake addresses, never
 * dereferenced: cuMemsetD8 and cuMemcpy check the range lies in a live
 * allocation or mapping and do nothing else. cuMemRelease gives a handle's
 * memory back at once (the driver would wait for its last unmap); cuMemUnmap
 * takes exactly one mapping. cuCtxDestroy and the last primary-context release
 * free the context's allocations, arrays, streams, events and modules, but not
 * cuMemCreate, async or pool memory (as the driver documents).
 *
 * Memory pools. Stream-ordered memory comes from a pool: cuMemAllocAsync's
 * from the device's default pool (cuDeviceGetDefaultMemPool, which
 * cuDeviceGetMemPool also returns: there is no cuDeviceSetMemPool here),
 * cuMemAllocFromPoolAsync's from the pool named. As the driver's, a pool
 * reserves device memory from the card and hands blocks out of that
 * reservation: a block that does not fit in what the pool holds unused
 * grows the reservation by what is missing rounded up to
 * EGPU_MOCK_CUDA_POOL_CHUNK_MIB (or by exactly what is missing when the card
 * cannot give the whole chunk). Freeing a block (cuMemFreeAsync, or
 * cuMemFree) keeps it reserved up to the pool's release threshold
 * (CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, default 0): the driver releases what
 * is above it at the next synchronisation, the mock at once, at the free
 * (and when the threshold is set). cuMemPoolTrimTo releases the unused
 * reservation down to its argument. cuMemPoolGetAttribute reports
 * RESERVED_MEM_CURRENT (what the card lends the pool: its real footprint),
 * USED_MEM_CURRENT, their _HIGH marks and RELEASE_THRESHOLD;
 * cuMemPoolSetAttribute sets RELEASE_THRESHOLD and resets the marks (to 0
 * only); the REUSE_* policies read 1 and are accepted. cuMemPoolDestroy frees
 * the blocks still allocated and returns the reservation (the driver would
 * wait for their frees); a default pool cannot be destroyed.
 *
 * Time. A launch (cuLaunchKernel, cuLaunchKernelEx,
 * cuLaunchCooperativeKernel and their _ptsz, each device's launch of
 * cuLaunchCooperativeKernelMultiDevice, and the pre-4.0 cuLaunch,
 * cuLaunchGrid and cuLaunchGridAsync) costs grid_x * grid_y * grid_z *
 * ns_per_block of device time on its card, or with EGPU_MOCK_CUDA_SMS,
 * ceil(grid_x * grid_y * grid_z / SMs) * ns_per_block: a card of S SMs
 * runs S blocks at a time, so a grid's time grows by waves, not blocks,
 * and the same grid is shorter on a larger card (1000 blocks are 8 waves
 * on 132 SMs, 6 on 188); it returns at once; cuLaunch's
 * grid is 1 x 1 and cuLaunchGrid's width x height, and their block shape is
 * the function's from cuFuncSetBlockShape (1 x 1 x 1 until set; it does not
 * change the cost); mock_device.h says how the card serialises launches of all
 * processes. Streams: stream 0 and CU_STREAM_LEGACY are the legacy default
 * stream, which waits for every stream of its context; CU_STREAM_PER_THREAD
 * and stream 0 in a _ptsz call are the context's default stream (one per
 * context, not per thread). Events are stamped with the end of their stream's
 * work (now if idle); cuEventQuery is CUDA_ERROR_NOT_READY until then.
 * cuCtxSynchronize waits for every stream of the current context.
 *
 * Graphs and stream capture. cuStreamBeginCapture_v2(_ptsz) starts a capture
 * on a created stream (stream 0 and the special handles cannot be captured
 * here: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED); a kernel or graph launched
 * into it does not run but adds a node of its cost to the graph, and an
 * event recorded there is "captured" (cuEventQuery and cuEventSynchronize on
 * it: CUDA_ERROR_CAPTURED_EVENT; cuEventElapsedTime: CUDA_ERROR_INVALID_HANDLE,
 * as for an event never recorded). cuStreamEndCapture(_ptsz) returns the
 * graph (from the capturing thread unless begun in RELAXED mode:
 * CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD), or NULL and
 * CUDA_ERROR_STREAM_CAPTURE_INVALIDATED when the capture was invalidated.
 * The potentially unsafe calls the mock knows (cuEventQuery,
 * cuEventSynchronize, cuStreamQuery, cuStreamSynchronize, cuCtxSynchronize)
 * follow the
 * rules of cuThreadExchangeStreamCaptureMode: made in a thread whose mode
 * forbids them while a capture is going on, they fail with
 * CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidate the captures they
 * conflict with; synchronising the capturing stream itself always does.
 * cuStreamIsCapturing(_ptsz) reports the capture of a created stream, NONE
 * for the others (the legacy stream does not depend on captures here). A
 * graph from cuGraphCreate has no nodes. cuGraphInstantiateWithFlags binds a
 * graph to the current context; a launch of it (cuGraphLaunch(_ptsz))
 * occupies the card, credited to the tag, for the sum of its captured
 * nodes' costs, or EGPU_MOCK_CUDA_GRAPH_NS for a graph with none.
 *
 * cuGetProcAddress and _v2 resolve an unversioned name and a CUDA version the
 * way the driver does, from the table in this file: each name lists the
 * versions at which its variants appeared (cudaTypedefs.h, PFN_<name>_v<ver>)
 * and the newest not above the requested version wins; with
 * CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM the _ptsz/_ptds variant where
 * there is one. So cuCtxCreate is _v2 from 3020, _v3 from 11040, _v4 from
 * 12050. The mock starts at each name's 64-bit (CUDA 3.2) variant: an older
 * version gets CUDA_ERROR_NOT_FOUND with VERSION_NOT_SUFFICIENT. The table is
 * that of a CUDA 13.0 driver whatever cuDriverGetVersion reports.
 *
 * Errors, as the driver returns them: CUDA_ERROR_NOT_INITIALIZED before cuInit
 * (all but cuDriverGetVersion, cuGetErrorString/Name and cuGetProcAddress);
 * CUDA_ERROR_INVALID_CONTEXT when a call needs a current context and there is
 * none (or it was destroyed or released); CUDA_ERROR_INVALID_DEVICE for a bad
 * ordinal; CUDA_ERROR_INVALID_VALUE for bad arguments and for freeing an
 * unknown pointer, handle, array or pool; CUDA_ERROR_INVALID_HANDLE for an
 * unknown stream, event, module or function; CUDA_ERROR_OUT_OF_MEMORY;
 * CUDA_ERROR_NOT_READY; CUDA_ERROR_NOT_FOUND from cuGetProcAddress;
 * CUDA_ERROR_NO_DEVICE from cuInit with no cards; CUDA_ERROR_UNKNOWN when the
 * state file cannot be opened (cuInit says why on stderr) or locked.
 *
 * Calls. Every exported entry point counts the calls the process makes to
 * it (ENTRY, the first statement of each): egpu_mock_calls and
 * egpu_mock_calls_at (cuda_mock.h) read the counts, so a test can say which
 * driver calls a program made, and how many. An entry point that forwards to
 * another does so through a static function, so each call counts once.
 *
 * Processes: after fork the child starts with no CUDA state (cuInit again);
 * its parent's memory stays its parent's. Threads: one lock serialises the
 * calls of a process; the current context is per thread.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_mock.h"
#include "egpu/cuda_abi.h"
#include "mock_device.h"

#define BUCKETS        4096
#define NAME_LEN       64
#define PITCH_ALIGN    512
#define ADDR_BASE      0x700000000000ull /* first fake device address */
#define HANDLE_BASE    0x10000ull        /* first fake handle */
#define DRIVER_VERSION 12040
#define CAPTURES_MAX   64 /* streams capturing at once per process */
#define CTX_STACK_MAX  16 /* contexts pushed under the current one per thread */

enum kind {
    K_CTX = 1,
    K_STREAM,
    K_EVENT,
    K_MODULE,
    K_FUNC,
    K_MEM,     /* a device pointer from cuMemAlloc*, async, pools */
    K_HOST,    /* cuMemHostAlloc */
    K_ARRAY,   /* cuArrayCreate, cuArray3DCreate */
    K_MIPMAP,  /* cuMipmappedArrayCreate */
    K_VMM,     /* cuMemCreate handle */
    K_RESERVE, /* cuMemAddressReserve range */
    K_MAP,     /* cuMemMap range */
    K_POOL,    /* cuMemPoolCreate */
    K_GRAPH,   /* cuGraphCreate, cuStreamEndCapture */
    K_EXEC,    /* cuGraphInstantiateWithFlags */
};

/* Every handle and allocation of the process, by (key, kind). */
struct obj {
    uint64_t key; /* the handle or device address given to the caller */
    struct obj *next;
    enum kind kind;
    uint64_t ctx;   /* owning context key (torn down with it), 0: none */
    unsigned card;  /* the card its device memory is on */
    uint64_t bytes; /* device memory taken, bytes (rounded) */
    uint64_t size;  /* address range, bytes (K_MEM, K_RESERVE, K_MAP, K_VMM) */
    union {
        struct {
            bool primary, active;
            int refs;            /* primary: retains */
            uint64_t default_ns; /* end of the default stream's work */
            uint64_t any_ns;     /* end of every stream's work */
        } ctx;
        struct {
            uint64_t last_ns;             /* end of its work */
            CUstreamCaptureStatus status; /* of a capture begun on it */
            CUstreamCaptureMode mode;     /* the capture's */
            unsigned thread;              /* the capturing thread (thread_id) */
            uint64_t graph;               /* the K_GRAPH being captured */
        } stream;
        struct {
            unsigned flags;
            bool recorded;
            bool captured; /* last recorded in a capture */
            uint64_t stamp_ns;
        } event;
        struct {
            uint64_t nodes;   /* captured launches */
            uint64_t cost_ns; /* their device time; K_EXEC: what a launch takes */
        } graph;
        struct {
            uint64_t module;
            uint64_t ns_per_block;
            uint64_t sms;      /* blocks run at once (EGPU_MOCK_CUDA_SMS), 0: one at a time */
            unsigned block[3]; /* cuFuncSetBlockShape's, 1 x 1 x 1 at first */
            char name[NAME_LEN];
        } func;
        struct {
            uint64_t pool; /* the pool of a stream-ordered block, 0: none */
        } mem;
        struct {
            /* The pool's reservation is the object's bytes (taken from the
             * card, given back when it shrinks or the pool goes). */
            uint64_t used;      /* blocks allocated and not freed, rounded */
            uint64_t used_high; /* high-water marks */
            uint64_t reserved_high;
            uint64_t threshold; /* CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, bytes */
            bool is_default;    /* a device's default pool: cannot be destroyed */
        } pool;
        struct {
            void *p;
        } host;
    } u;
};

static struct {
    pthread_mutex_t lock; /* every call; the shared state's mutex nests inside */
    bool initialised;
    unsigned generation; /* bumped in a fork child: older thread-current contexts are void */
    struct egpu_mock_dev dev;
    unsigned tag;
    uint64_t next_addr, next_handle;
    uint64_t primary[EGPU_MOCK_CARDS_MAX];      /* primary context key per card, 0: none */
    uint64_t default_pool[EGPU_MOCK_CARDS_MAX]; /* default memory pool key per card, 0: none yet */
    uint64_t captures[CAPTURES_MAX];            /* streams capturing (keys), 0: free */
    unsigned threads;                           /* thread ids handed out */
    struct obj *buckets[BUCKETS];
} g = {.lock = PTHREAD_MUTEX_INITIALIZER};

static _Thread_local uint64_t tls_ctx;
static _Thread_local uint64_t tls_stack[CTX_STACK_MAX]; /* below tls_ctx: cuCtxPushCurrent_v2 */
static _Thread_local unsigned tls_depth;
static _Thread_local unsigned tls_generation;
static _Thread_local unsigned tls_thread;                  /* thread_id(), 0: none yet */
static _Thread_local CUstreamCaptureMode tls_capture_mode; /* GLOBAL (0) to start with */
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* ---- registry ---- */

static struct obj **bucket(uint64_t key)
{
    return &g.buckets[(key * 0x9E3779B97F4A7C15ull) >> 52];
}

static struct obj *lookup(uint64_t key, enum kind kind)
{
    for (struct obj *o = *bucket(key); o != NULL; o = o->next) {
        if (o->key == key && o->kind == kind)
            return o;
    }
    return NULL;
}

static struct obj *obj_new(enum kind kind, uint64_t key)
{
    struct obj *o = calloc(1, sizeof(*o));
    struct obj **b = bucket(key);

    if (o == NULL)
        return NULL;
    o->key = key;
    o->kind = kind;
    o->next = *b;
    *b = o;
    return o;
}

static void obj_unlink(struct obj *o)
{
    for (struct obj **pp = bucket(o->key); *pp != NULL; pp = &(*pp)->next) {
        if (*pp == o) {
            *pp = o->next;
            return;
        }
    }
}

/* Give back o's device memory and host memory, unlink and free it. */
static void obj_release(struct obj *o)
{
    if (o->bytes > 0)
        egpu_mock_mem_give(&g.dev, o->card, o->bytes);
    if (o->kind == K_HOST)
        free(o->u.host.p);
    obj_unlink(o);
    free(o);
}

static uint64_t new_handle(void)
{
    g.next_handle += 0x10;
    return g.next_handle;
}

/* ---- helpers ---- */

static CUresult begin(void)
{
    pthread_mutex_lock(&g.lock);
    if (!g.initialised) {
        pthread_mutex_unlock(&g.lock);
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    return CUDA_SUCCESS;
}

static CUresult end(CUresult r)
{
    pthread_mutex_unlock(&g.lock);
    return r;
}

static uint64_t env_u64(const char *name, uint64_t dflt)
{
    const char *s = getenv(name);
    char *e;
    unsigned long long v;

    if (s == NULL || *s == '\0')
        return dflt;
    errno = 0;
    v = strtoull(s, &e, 10);
    return errno != 0 || *e != '\0' ? dflt : (uint64_t)v;
}

/* ---- entry points: call counts and modelled latencies ---- */

/* One exported entry point, as ENTRY() declares it. */
struct entry {
    const char *name;           /* the function's own name (__func__) */
    _Atomic uint64_t calls;     /* by this process */
    _Atomic int64_t latency_ns; /* host time spent at each call; -1: not read yet */
    atomic_flag listed;         /* on the list below */
    struct entry *_Atomic next; /* the list of entry points called so far */
};

static struct entry *_Atomic entries; /* newest first */

/* What EGPU_MOCK_CUDA_CALL_NS=real gives: ns per call of a real driver's
 * calls, as bench/gpu's bench_gpu_tiny measured them on an H200 (driver
 * 580.159.04, CUDA 13.0; docs/vcuda.md, "On a real GPU"), the host time of
 * a call in a loop of the same call. cuEventElapsedTime and cuCtxGetDevice
 * were not measured there: they are taken as cuEventQuery (both read the
 * device's progress) and cuCtxGetCurrent (both read the thread's context). */
static const struct {
    const char *name;
    int64_t ns;
} real_latency[] = {
    {"cuCtxGetCurrent", 14},     {"cuCtxGetDevice", 14},
    {"cuStreamIsCapturing", 28}, {"cuThreadExchangeStreamCaptureMode", 13},
    {"cuStreamQuery", 300},      {"cuEventRecord", 1363},
    {"cuEventQuery", 287},       {"cuEventElapsedTime", 287},
};

/* Whether item (n bytes, a name of EGPU_MOCK_CUDA_CALL_NS) names entry
 * point name: the same, or name is its _v2, _ptsz, _ptds or _v2_ptsz
 * variant. */
static bool latency_names(const char *item, size_t n, const char *name)
{
    static const char *const tails[] = {"", "_v2", "_ptsz", "_ptds", "_v2_ptsz"};

    if (strncmp(item, name, n) != 0)
        return false;
    for (size_t i = 0; i < sizeof(tails) / sizeof(tails[0]); i++)
        if (strcmp(name + n, tails[i]) == 0)
            return true;
    return false;
}

/* The host latency of entry point name, ns: the last item of
 * EGPU_MOCK_CUDA_CALL_NS that sets it, else 0. The variable is a list of
 * items separated by commas: "real" (every figure of real_latency) or
 * "<name>=<ns>". A malformed item is skipped. */
static int64_t latency_of(const char *name)
{
    const char *s = getenv("EGPU_MOCK_CUDA_CALL_NS");
    int64_t ns = 0;

    while (s != NULL && *s != '\0') {
        size_t len = strcspn(s, ",");
        const char *eq = memchr(s, '=', len);

        if (eq == NULL && len == 4 && strncmp(s, "real", 4) == 0) {
            for (size_t i = 0; i < sizeof(real_latency) / sizeof(real_latency[0]); i++)
                if (latency_names(real_latency[i].name, strlen(real_latency[i].name), name))
                    ns = real_latency[i].ns;
        } else if (eq != NULL && latency_names(s, (size_t)(eq - s), name)) {
            char *e;
            long long v = strtoll(eq + 1, &e, 10);

            if (e == s + len && e > eq + 1 && v >= 0)
                ns = v;
        }
        s += len;
        if (*s == ',')
            s++;
    }
    return ns;
}

static void spin_iters(uint64_t n)
{
    for (volatile uint64_t i = 0; i < n; i++)
        ;
}

/* Spin (not sleep: a driver call keeps its thread) for about ns
 * nanoseconds. A clock read costs tens of ns in a virtual machine (58 ns on
 * the development VM), as much as the shortest calls modelled: those (under
 * SPIN_CLOCK_NS) spin a loop timed once per process (the fastest of three
 * runs of 2^18 iterations, about 1 ms in all) for as many iterations, which
 * a CPU shared with other work runs slower; longer ones spin on the clock. */
#define SPIN_CLOCK_NS 256

static void spin_ns(uint64_t ns)
{
    static _Atomic uint64_t iters_per_ms; /* 0: not timed yet */
    uint64_t per_ms = atomic_load_explicit(&iters_per_ms, memory_order_relaxed);

    if (ns >= SPIN_CLOCK_NS) {
        uint64_t until = egpu_mock_now_ns() + ns;

        while (egpu_mock_now_ns() < until)
            ;
        return;
    }
    if (per_ms == 0) {
        uint64_t best = UINT64_MAX;

        for (int k = 0; k < 3; k++) {
            uint64_t t0 = egpu_mock_now_ns(), t;

            spin_iters(1u << 18);
            t = egpu_mock_now_ns() - t0;
            best = t > 0 && t < best ? t : best;
        }
        per_ms = ((1ull << 18) * 1000000ull) / best;
        per_ms = per_ms > 0 ? per_ms : 1;
        atomic_store_explicit(&iters_per_ms, per_ms, memory_order_relaxed);
    }
    spin_iters(ns * per_ms / 1000000u);
}

/* The first thing every exported entry point does (ENTRY): count the call,
 * and spend the entry point's modelled latency. The first call of an entry
 * point lists it and reads its latency. */
static void entry_enter(struct entry *e)
{
    int64_t ns = atomic_load_explicit(&e->latency_ns, memory_order_relaxed);

    atomic_fetch_add_explicit(&e->calls, 1, memory_order_relaxed);
    if (ns < 0) {
        if (!atomic_flag_test_and_set(&e->listed)) {
            struct entry *head = atomic_load(&entries);

            do
                atomic_store_explicit(&e->next, head, memory_order_relaxed);
            while (!atomic_compare_exchange_weak(&entries, &head, e));
        }
        ns = latency_of(e->name); /* the same in every thread that races here */
        atomic_store_explicit(&e->latency_ns, ns, memory_order_relaxed);
    }
    if (ns > 0)
        spin_ns((uint64_t)ns);
}

#define ENTRY()                                                              \
    do {                                                                     \
        static struct entry entry_ = {                                       \
            .name = __func__, .latency_ns = -1, .listed = ATOMIC_FLAG_INIT}; \
        entry_enter(&entry_);                                                \
    } while (0)

uint64_t egpu_mock_calls(const char *name)
{
    uint64_t n = 0;

    for (struct entry *e = atomic_load(&entries); e != NULL;
         e = atomic_load_explicit(&e->next, memory_order_relaxed))
        if (name == NULL || strcmp(e->name, name) == 0)
            n += atomic_load_explicit(&e->calls, memory_order_relaxed);
    return n;
}

const char *egpu_mock_calls_at(unsigned i, uint64_t *calls)
{
    struct entry *e = atomic_load(&entries);
    unsigned n = 0;

    for (struct entry *p = e; p != NULL; p = atomic_load_explicit(&p->next, memory_order_relaxed))
        n++;
    if (i >= n)
        return NULL;
    for (unsigned k = n - 1; k > i; k--) /* the list is newest first */
        e = atomic_load_explicit(&e->next, memory_order_relaxed);
    if (calls != NULL)
        *calls = atomic_load_explicit(&e->calls, memory_order_relaxed);
    return e->name;
}

static bool valid_device(CUdevice dev)
{
    return dev >= 0 && (unsigned)dev < g.dev.st->ncards;
}

/* bytes rounded up to the granularity; 0 when that overflows. */
static uint64_t round_granularity(uint64_t bytes)
{
    if (bytes > UINT64_MAX - (EGPU_MOCK_GRANULARITY - 1))
        return 0;
    return (bytes + EGPU_MOCK_GRANULARITY - 1) & ~(EGPU_MOCK_GRANULARITY - 1);
}

static struct obj *ctx_usable(uint64_t key)
{
    struct obj *c = lookup(key, K_CTX);

    return c != NULL && c->u.ctx.active ? c : NULL;
}

static struct obj *current_ctx(void)
{
    if (tls_ctx == 0 || tls_generation != g.generation)
        return NULL;
    return ctx_usable(tls_ctx);
}

static void set_current(uint64_t key)
{
    tls_ctx = key;
    tls_generation = g.generation;
}

/* Take size bytes (rounded) of card and register an object of kind there:
 * K_MEM gets a new fake device address range as key, others a new handle. */
static CUresult device_alloc(enum kind kind, unsigned card, uint64_t size, uint64_t ctx,
                             struct obj **out)
{
    uint64_t bytes = round_granularity(size);
    uint64_t key;
    struct obj *o;
    int r;

    if (bytes == 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    r = egpu_mock_mem_take(&g.dev, card, bytes);
    if (r == -ENOMEM)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (r != 0)
        return CUDA_ERROR_UNKNOWN;
    if (kind == K_MEM) {
        key = g.next_addr;
        g.next_addr += bytes;
    } else {
        key = new_handle();
    }
    o = obj_new(kind, key);
    if (o == NULL) {
        egpu_mock_mem_give(&g.dev, card, bytes);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    o->card = card;
    o->bytes = bytes;
    o->size = size;
    o->ctx = ctx;
    *out = o;
    return CUDA_SUCCESS;
}

/* Free every object owned by context c, then its own footprint. */
static void ctx_teardown(struct obj *c)
{
    for (unsigned b = 0; b < BUCKETS; b++) {
        struct obj *o = g.buckets[b];

        while (o != NULL) {
            struct obj *next = o->next;

            if (o->ctx == c->key)
                obj_release(o);
            o = next;
        }
    }
    if (c->bytes > 0)
        egpu_mock_mem_give(&g.dev, c->card, c->bytes);
    c->bytes = 0;
}

static CUresult ctx_footprint(struct obj *c)
{
    uint64_t mib = env_u64("EGPU_MOCK_CUDA_CONTEXT_MIB", 300);
    uint64_t bytes = mib > (UINT64_MAX >> 21) ? 0 : round_granularity(mib << 20);
    int r;

    if (mib > 0 && bytes == 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    r = bytes > 0 ? egpu_mock_mem_take(&g.dev, c->card, bytes) : 0;
    if (r == -ENOMEM)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (r != 0)
        return CUDA_ERROR_UNKNOWN;
    c->bytes = bytes;
    return CUDA_SUCCESS;
}

static CUresult unsafe_call(void);      /* stream capture, below */
static void mem_release(struct obj *o); /* stream-ordered memory, below */

/* ---- fork ---- */

static void atfork_prepare(void)
{
    pthread_mutex_lock(&g.lock);
}

static void atfork_parent(void)
{
    pthread_mutex_unlock(&g.lock);
}

/* The child is a new process to the driver: its parent's objects are not its
 * own (host memory stays: the program may still hold it). */
static void atfork_child(void)
{
    for (unsigned b = 0; b < BUCKETS; b++) {
        while (g.buckets[b] != NULL) {
            struct obj *o = g.buckets[b];

            g.buckets[b] = o->next;
            free(o);
        }
    }
    if (g.dev.st != NULL)
        egpu_mock_dev_close(&g.dev); /* the parent keeps its lock: it holds the file too */
    memset(g.primary, 0, sizeof(g.primary));
    memset(g.default_pool, 0, sizeof(g.default_pool));
    memset(g.captures, 0, sizeof(g.captures));
    g.initialised = false;
    g.generation++;
    pthread_mutex_unlock(&g.lock);
}

static void register_atfork(void)
{
    /* Only ENOMEM can fail it; a fork child would then inherit its parent's state. */
    (void)pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

/* ---- initialisation, version, errors ---- */

CUresult cuInit(unsigned int flags)
{
    ENTRY();
    const char *tag = getenv("EGPU_MOCK_CUDA_TAG");
    char pidtag[32];
    int r;

    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_once(&atfork_once, register_atfork);
    pthread_mutex_lock(&g.lock);
    if (!g.initialised) {
        const char *path = getenv("EGPU_MOCK_CUDA_STATE");

        if (path != NULL && *path == '\0')
            path = NULL;
        r = egpu_mock_dev_open(&g.dev, path, true, true);
        if (r != 0) {
            fprintf(stderr, "mock libcuda: cannot open the state %s: %s\n",
                    path != NULL ? path : "(private)", strerror(-r));
            return end(CUDA_ERROR_UNKNOWN);
        }
        if (g.dev.st->ncards == 0) {
            egpu_mock_dev_close(&g.dev);
            return end(CUDA_ERROR_NO_DEVICE);
        }
        g.next_addr = ADDR_BASE;
        g.next_handle = HANDLE_BASE;
        g.initialised = true;
    }
    if (tag == NULL || *tag == '\0') {
        snprintf(pidtag, sizeof(pidtag), "pid%ld", (long)getpid());
        tag = pidtag;
    }
    r = egpu_mock_tag_index(&g.dev, tag);
    if (r < 0)
        return end(CUDA_ERROR_UNKNOWN);
    g.tag = (unsigned)r;
    return end(CUDA_SUCCESS);
}

CUresult cuDriverGetVersion(int *version)
{
    ENTRY();
    uint64_t v = env_u64("EGPU_MOCK_CUDA_VERSION", DRIVER_VERSION);

    if (version == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *version = v > 0 && v <= INT32_MAX ? (int)v : DRIVER_VERSION;
    return CUDA_SUCCESS;
}

static const struct {
    CUresult code;
    const char *name;
    const char *text; /* the driver's cuGetErrorString text */
} errors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE",
     "the operation cannot be performed in the present state"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS",
     "an illegal memory access was encountered"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
     "operation not permitted when stream is capturing"},
    {CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
     "operation failed due to a previous error during capture"},
    {CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",
     "operation would make the legacy stream depend on a capturing blocking stream"},
    {CUDA_ERROR_CAPTURED_EVENT, "CUDA_ERROR_CAPTURED_EVENT",
     "operation not permitted on an event last recorded in a capturing stream"},
    {CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
     "attempt to terminate a thread-local capture sequence from another thread"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static CUresult error_lookup(CUresult error, const char **str, bool name)
{
    if (str == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++) {
        if (errors[i].code == error) {
            *str = name ? errors[i].name : errors[i].text;
            return CUDA_SUCCESS;
        }
    }
    *str = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGetErrorString(CUresult error, const char **str)
{
    ENTRY();
    return error_lookup(error, str, false);
}

CUresult cuGetErrorName(CUresult error, const char **str)
{
    ENTRY();
    return error_lookup(error, str, true);
}

/* ---- devices ---- */

CUresult cuDeviceGet(CUdevice *dev, int ordinal)
{
    ENTRY();
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    if (dev == NULL)
        return end(CUDA_ERROR_INVALID_VALUE);
    if (!valid_device(ordinal))
        return end(CUDA_ERROR_INVALID_DEVICE);
    *dev = ordinal;
    return end(CUDA_SUCCESS);
}

CUresult cuDeviceGetCount(int *count)
{
    ENTRY();
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    if (count == NULL)
        return end(CUDA_ERROR_INVALID_VALUE);
    *count = (int)g.dev.st->ncards;
    return end(CUDA_SUCCESS);
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    ENTRY();
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    if (name == NULL || len <= 0)
        return end(CUDA_ERROR_INVALID_VALUE);
    if (!valid_device(dev))
        return end(CUDA_ERROR_INVALID_DEVICE);
    snprintf(name, (size_t)len, "%s", g.dev.st->cards[dev].name);
    return end(CUDA_SUCCESS);
}

/* The UUID's 16 bytes; a configured UUID not of the GPU-<32 hex> form gives
 * zeros ending in the card index. */
static CUresult device_get_uuid(CUuuid *uuid, CUdevice dev)
{
    unsigned char b[16] = {0};
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    if (uuid == NULL)
        return end(CUDA_ERROR_INVALID_VALUE);
    if (!valid_device(dev))
        return end(CUDA_ERROR_INVALID_DEVICE);
    if (egpu_mock_uuid_bytes(g.dev.st->cards[dev].uuid, b) != 0)
        b[15] = (unsigned char)dev;
    memcpy(uuid->bytes, b, sizeof(b));
    return end(CUDA_SUCCESS);
}

CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    ENTRY();
    return device_get_uuid(uuid, dev);
}

CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    ENTRY();
    return device_get_uuid(uuid, dev);
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    ENTRY();
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    if (bytes == NULL)
        return end(CUDA_ERROR_INVALID_VALUE);
    if (!valid_device(dev))
        return end(CUDA_ERROR_INVALID_DEVICE);
    *bytes = (size_t)g.dev.st->cards[dev].total_bytes;
    return end(CUDA_SUCCESS);
}

/* EGPU_MOCK_CUDA_SMS, 0 when unset or out of range. */
static uint64_t mock_sms(void)
{
    uint64_t v = env_u64("EGPU_MOCK_CUDA_SMS", 0);

    return v <= 100000 ? v : 0;
}

/* An A100's: 108 SMs (EGPU_MOCK_CUDA_SMS when set), 1410 MHz, compute
 * capability 8.0, 1024 threads per block; the PCI bus id is the card index
 * + 1. Others: INVALID_VALUE. */
CUresult cuDeviceGetAttribute(int *value, CUdevice_attribute attr, CUdevice dev)
{
    ENTRY();
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    if (value == NULL)
        return end(CUDA_ERROR_INVALID_VALUE);
    if (!valid_device(dev))
        return end(CUDA_ERROR_INVALID_DEVICE);
    switch (attr) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
        *value = 1024;
        break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE:
        *value = 1410000;
        break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
        *value = mock_sms() != 0 ? (int)mock_sms() : 108;
        break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
        *value = dev + 1;
        break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
        *value = 8;
        break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
        *value = 0;
        break;
    default:
        return end(CUDA_ERROR_INVALID_VALUE);
    }
    return end(CUDA_SUCCESS);
}

/* ---- contexts ---- */

static CUresult ctx_create(CUcontext *ctx, CUdevice dev)
{
    struct obj *c;
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    if (ctx == NULL)
        return end(CUDA_ERROR_INVALID_VALUE);
    if (!valid_device(dev))
        return end(CUDA_ERROR_INVALID_DEVICE);
    c = obj_new(K_CTX, new_handle());
    if (c == NULL)
        return end(CUDA_ERROR_OUT_OF_MEMORY);
    c->card = (unsigned)dev;
    r = ctx_footprint(c);
    if (r != CUDA_SUCCESS) {
        obj_release(c);
        return end(r);
    }
    c->u.ctx.active = true;
    set_current(c->key);
    *ctx = (CUcontext)(uintptr_t)c->key;
    return end(CUDA_SUCCESS);
}

CUresult cuCtxCreate_v2(CUcontext *ctx, unsigned int flags, CUdevice dev)
{
    ENTRY();
    (void)flags; /* scheduling and mapping flags change nothing here */
    return ctx_create(ctx, dev);
}

CUresult cuCtxCreate_v3(CUcontext *ctx, CUexecAffinityParam *params, int nparams,
                        unsigned int flags, CUdevice dev)
{
    ENTRY();
    (void)flags;
    if (nparams < 0 || (nparams > 0 && params == NULL))
        return CUDA_ERROR_INVALID_VALUE;
    return ctx_create(ctx, dev);
}

CUresult cuCtxCreate_v4(CUcontext *ctx, CUctxCreateParams *params, unsigned int flags, CUdevice dev)
{
    ENTRY();
    (void)params; /* affinity and CIG parameters change nothing here */
    (void)flags;
    return ctx_create(ctx, dev);
}

CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    ENTRY();
    struct obj *c;
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    c = lookup((uint64_t)(uintptr_t)ctx, K_CTX);
    if (c == NULL || c->u.ctx.primary)
        return end(CUDA_ERROR_INVALID_CONTEXT);
    if (tls_ctx == c->key)
        tls_ctx = 0;
    ctx_teardown(c);
    obj_release(c);
    return end(CUDA_SUCCESS);
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev)
{
    ENTRY();
    struct obj *c;
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    if (ctx == NULL)
        return end(CUDA_ERROR_INVALID_VALUE);
    if (!valid_device(dev))
        return end(CUDA_ERROR_INVALID_DEVICE);
    c = g.primary[dev] != 0 ? lookup(g.primary[dev], K_CTX) : NULL;
    if (c == NULL) {
        c = obj_new(K_CTX, new_handle());
        if (c == NULL)
            return end(CUDA_ERROR_OUT_OF_MEMORY);
        c->card = (unsigned)dev;
        c->u.ctx.primary = true;
        g.primary[dev] = c->key;
    }
    if (!c->u.ctx.active) {
        r = ctx_footprint(c);
        if (r != CUDA_SUCCESS)
            return end(r);
        c->u.ctx.active = true;
        c->u.ctx.default_ns = c->u.ctx.any_ns = 0;
    }
    c->u.ctx.refs++;
    *ctx = (CUcontext)(uintptr_t)c->key;
    return end(CUDA_SUCCESS);
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    ENTRY();
    struct obj *c;
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    if (!valid_device(dev))
        return end(CUDA_ERROR_INVALID_DEVICE);
    c = g.primary[dev] != 0 ? ctx_usable(g.primary[dev]) : NULL;
    if (c == NULL || c->u.ctx.refs <= 0)
        return end(CUDA_ERROR_INVALID_CONTEXT);
    if (--c->u.ctx.refs == 0) {
        ctx_teardown(c);
        c->u.ctx.active = false;
    }
    return end(CUDA_SUCCESS);
}

CUresult cuCtxSetCurrent(CUcontext ctx)
{
    ENTRY();
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    if (ctx == NULL) {
        set_current(0);
        return end(CUDA_SUCCESS);
    }
    if (ctx_usable((uint64_t)(uintptr_t)ctx) == NULL)
        return end(CUDA_ERROR_INVALID_CONTEXT);
    set_current((uint64_t)(uintptr_t)ctx);
    return end(CUDA_SUCCESS);
}

CUresult cuCtxGetCurrent(CUcontext *ctx)
{
    ENTRY();
    struct obj *c;
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    if (ctx == NULL)
        return end(CUDA_ERROR_INVALID_VALUE);
    c = current_ctx();
    *ctx = c != NULL ? (CUcontext)(uintptr_t)c->key : NULL;
    return end(CUDA_SUCCESS);
}

/* The thread's context stack: the current context is its top (tls_ctx),
 * the contexts pushed under it wait in tls_stack. cuCtxCreate and
 * cuCtxDestroy only set and clear the top here. */
CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    ENTRY();
    struct obj *c;
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    c = current_ctx();
    if (ctx == NULL || ctx_usable((uint64_t)(uintptr_t)ctx) == NULL)
        return end(CUDA_ERROR_INVALID_CONTEXT);
    if (tls_generation != g.generation)
        tls_depth = 0; /* a fork child: the parent's stack is not its own */
    if (tls_depth == CTX_STACK_MAX)
        return end(CUDA_ERROR_INVALID_VALUE);
    tls_stack[tls_depth++] = c != NULL ? c->key : 0;
    set_current((uint64_t)(uintptr_t)ctx);
    return end(CUDA_SUCCESS);
}

CUresult cuCtxPopCurrent_v2(CUcontext *ctx)
{
    ENTRY();
    struct obj *c;
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    c = current_ctx();
    if (c == NULL)
        return end(CUDA_ERROR_INVALID_CONTEXT);
    if (ctx != NULL)
        *ctx = (CUcontext)(uintptr_t)c->key;
    set_current(tls_depth > 0 ? tls_stack[--tls_depth] : 0);
    return end(CUDA_SUCCESS);
}

/* The context ctx names, or the current one for NULL. */
static struct obj *ctx_or_current(CUcontext ctx)
{
    return ctx == NULL ? current_ctx() : ctx_usable((uint64_t)(uintptr_t)ctx);
}

static CUresult ctx_get_device(CUdevice *dev, CUcontext ctx)
{
    struct obj *c;
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    if (dev == NULL)
        return end(CUDA_ERROR_INVALID_VALUE);
    c = ctx_or_current(ctx);
    if (c == NULL)
        return end(CUDA_ERROR_INVALID_CONTEXT);
    *dev = (CUdevice)c->card;
    return end(CUDA_SUCCESS);
}

CUresult cuCtxGetDevice_v2(CUdevice *dev, CUcontext ctx)
{
    ENTRY();
    return ctx_get_device(dev, ctx);
}

CUresult cuCtxGetDevice(CUdevice *dev)
{
    ENTRY();
    return ctx_get_device(dev, NULL);
}

static CUresult ctx_synchronize(CUcontext ctx)
{
    struct obj *c;
    uint64_t until;
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    c = ctx_or_current(ctx);
    if (c == NULL)
        return end(CUDA_ERROR_INVALID_CONTEXT);
    r = unsafe_call();
    if (r != CUDA_SUCCESS)
        return end(r);
    until = c->u.ctx.any_ns;
    pthread_mutex_unlock(&g.lock);
    egpu_mock_sleep_until(until);
    return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize_v2(CUcontext ctx)
{
    ENTRY();
    return ctx_synchronize(ctx);
}

CUresult cuCtxSynchronize(void)
{
    ENTRY();
    return ctx_synchronize(NULL);
}

/* ---- device memory ---- */

/* begin() plus a current context (*c). */
static CUresult begin_ctx(struct obj **c)
{
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    *c = current_ctx();
    if (*c == NULL)
        return end(CUDA_ERROR_INVALID_CONTEXT);
    return CUDA_SUCCESS;
}

CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes)
{
    ENTRY();
    struct egpu_mock_card *card;
    struct obj *c;
    uint64_t used;
    CUresult r = begin_ctx(&c);

    if (r != CUDA_SUCCESS)
        return r;
    if (free_bytes == NULL || total_bytes == NULL)
        return end(CUDA_ERROR_INVALID_VALUE);
    if (egpu_mock_lock(&g.dev) != 0)
        return end(CUDA_ERROR_UNKNOWN);
    egpu_mock_reclaim(&g.dev);
    card = &g.dev.st->cards[c->card];
    used = card->used_bytes < card->total_bytes ? card->used_bytes : card->total_bytes;
    *total_bytes = (size_t)card->total_bytes;
    *free_bytes = (size_t)(card->total_bytes - used);
    egpu_mock_unlock(&g.dev);
    return end(CUDA_SUCCESS);
}

static CUresult mem_alloc(CUdeviceptr *dptr, uint64_t bytes)
{
    struct obj *c, *o;
    CUresult r = begin_ctx(&c);

    if (r != CUDA_SUCCESS)
        return r;
    if (dptr == NULL || bytes == 0)
        return end(CUDA_ERROR_INVALID_VALUE);
    r = device_alloc(K_MEM, c->card, bytes, c->key, &o);
    if (r == CUDA_SUCCESS)
        *dptr = o->key;
    return end(r);
}

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes)
{
    ENTRY();
    return mem_alloc(dptr, bytes);
}

CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width_bytes, size_t height,
                            unsigned int element_bytes)
{
    ENTRY();
    uint64_t p, total;
    CUresult r;

    if (dptr == NULL || pitch == NULL || width_bytes == 0 || height == 0 ||
        (element_bytes != 4 && element_bytes != 8 && element_bytes != 16))
        return CUDA_ERROR_INVALID_VALUE;
    if (width_bytes > UINT64_MAX - PITCH_ALIGN)
        return CUDA_ERROR_OUT_OF_MEMORY;
    p = (width_bytes + PITCH_ALIGN - 1) / PITCH_ALIGN * PITCH_ALIGN;
    if (__builtin_mul_overflow(p, (uint64_t)height, &total))
        return CUDA_ERROR_OUT_OF_MEMORY;
    r = mem_alloc(dptr, total);
    if (r == CUDA_SUCCESS)
        *pitch = (size_t)p;
    return r;
}

CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytes, unsigned int flags)
{
    ENTRY();
    if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)
        return CUDA_ERROR_INVALID_VALUE;
    return mem_alloc(dptr, bytes);
}

CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    ENTRY();
    struct obj *c, *o;
    CUresult r = begin_ctx(&c);

    if (r != CUDA_SUCCESS)
        return r;
    o = lookup(dptr, K_MEM);
    if (o == NULL)
        return end(CUDA_ERROR_INVALID_VALUE);
    mem_release(o);
    return end(CUDA_SUCCESS);
}

CUresult cuMemHostAlloc(void **p, size_t bytes, unsigned int flags)
{
    ENTRY();
    unsigned all =
        CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;
    struct obj *c, *o;
    void *host;
    CUresult r = begin_ctx(&c);

    if (r != CUDA_SUCCESS)
        return r;
    if (p == NULL || bytes == 0 || (flags & ~all) != 0)
        return end(CUDA_ERROR_INVALID_VALUE);
    host = malloc(bytes);
    if (host == NULL)
        return end(CUDA_ERROR_OUT_OF_MEMORY);
    o = obj_new(K_HOST, (uint64_t)(uintptr_t)host);
    if (o == NULL) {
        free(host);
        return end(CUDA_ERROR_OUT_OF_MEMORY);
    }
    o->u.host.p = host;
    o->ctx = c->key;
    *p = host;
    return end(CUDA_SUCCESS);
}

CUresult cuMemFreeHost(void *p)
{
    ENTRY();
    struct obj *c, *o;
    CUresult r = begin_ctx(&c);

    if (r != CUDA_SUCCESS)
        return r;
    o = lookup((uint64_t)(uintptr_t)p, K_HOST);
    if (o == NULL)
        return end(CUDA_ERROR_INVALID_VALUE);
    obj_release(o);
    return end(CUDA_SUCCESS);
}

/* Whether [dptr, dptr + n) lies in one live allocation or mapping. */
static bool range_valid(CUdeviceptr dptr, size_t n)
{
    for (unsigned b = 0; b < BUCKETS; b++) {
        for (const struct obj *o = g.buckets[b]; o != NULL; o = o->next) {
            if ((o->kind == K_MEM || o->kind == K_MAP) && dptr >= o->key &&
                dptr - o->key <= o->size && n <= o->size - (dptr - o->key))
                return true;
        }
    }
    return false;
}

static CUresult mem_touch(CUdeviceptr dptr, size_t n, bool host_needed, const void *host)
{
    struct obj *c;
    CUresult r = begin_ctx(&c);

    if (r != CUDA_SUCCESS)
        return r;
    if ((host_needed && host == NULL && n > 0) || !range_valid(dptr, n))
        return end(CUDA_ERROR_INVALID_VALUE);
    return end(CUDA_SUCCESS);
}

CUresult cuMemsetD8_v2(CUdeviceptr dptr, unsigned char value, size_t n)
{
    ENTRY();
    (void)value;
    return mem_touch(dptr, n, false, NULL);
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t bytes)
{
    ENTRY();
    return mem_touch(dst, bytes, true, src);
}

CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t bytes)
{
    ENTRY();
    return mem_touch(src, bytes, true, dst);
}

CUresult cuMemsetD8_v2_ptds(CUdeviceptr dptr, unsigned char value, size_t n)
{
    ENTRY();
    (void)value;
    return mem_touch(dptr, n, false, NULL);
}

CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void *src, size_t bytes)
{
    ENTRY();
    return mem_touch(dst, bytes, true, src);
}

CUresult cuMemcpyDtoH_v2_ptds(void *dst, CUdeviceptr src, size_t bytes)
{
    ENTRY();
    return mem_touch(src, bytes, true, dst);
}

/* ---- virtual memory management ---- */

static CUresult prop_device(const CUmemLocation *loc, CUmemAllocationType type, unsigned *card)
{
    if (type != CU_MEM_ALLOCATION_TYPE_PINNED || loc->type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(loc->id))
        return CUDA_ERROR_INVALID_DEVICE;
    *card = (unsigned)loc->id;
    return CUDA_SUCCESS;
}

CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                       CUmemAllocationGranularity_flags option)
{
    ENTRY();
    unsigned card;
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    if (granularity == NULL || prop == NULL ||
        (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
         option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
        return end(CUDA_ERROR_INVALID_VALUE);
    r = prop_device(&prop->location, prop->type, &card);
    if (r == CUDA_SUCCESS)
        *granularity = (size_t)EGPU_MOCK_GRANULARITY;
    return end(r);
}

CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t bytes,
                     const CUmemAllocationProp *prop, unsigned long long flags)
{
    ENTRY();
    unsigned card;
    struct obj *o;
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    if (handle == NULL || prop == NULL || flags != 0 || bytes == 0 ||
        bytes % EGPU_MOCK_GRANULARITY != 0)
        return end(CUDA_ERROR_INVALID_VALUE);
    r = prop_device(&prop->location, prop->type, &card);
    if (r == CUDA_SUCCESS)
        r = device_alloc(K_VMM, card, bytes, 0, &o);
    if (r == CUDA_SUCCESS)
        *handle = o->key;
    return end(r);
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    ENTRY();
    struct obj *o;
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    o = lookup(handle, K_VMM);
    if (o == NULL)
        return end(CUDA_ERROR_INVALID_VALUE);
    obj_release(o);
    return end(CUDA_SUCCESS);
}

CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t bytes, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags)
{
    ENTRY();
    uint64_t align = alignment > EGPU_MOCK_GRANULARITY ? alignment : EGPU_MOCK_GRANULARITY;
    struct obj *o;
    uint64_t base;
    CUresult r = begin();

    (void)addr; /* a hint the driver may ignore too */
    if (r != CUDA_SUCCESS)
        return r;
    if (ptr == NULL || bytes == 0 || bytes % EGPU_MOCK_GRANULARITY != 0 || flags != 0 ||
        (alignment & (alignment - 1)) != 0 || bytes > (1ull << 46))
        return end(CUDA_ERROR_INVALID_VALUE);
    base = (g.next_addr + align - 1) & ~(align - 1);
    o = obj_new(K_RESERVE, base);
    if (o == NULL)
        return end(CUDA_ERROR_OUT_OF_MEMORY);
    o->size = bytes;
    g.next_addr = base + bytes;
    *ptr = base;
    return end(CUDA_SUCCESS);
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t bytes)
{
    ENTRY();
    struct obj *o;
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    o = lookup(ptr, K_RESERVE);
    if (o == NULL || o->size != bytes)
        return end(CUDA_ERROR_INVALID_VALUE);
    obj_release(o);
    return end(CUDA_SUCCESS);
}

/* The kind object whose range holds [p, p + n), or that overlaps it (overlap). */
static struct obj *range_find(enum kind kind, uint64_t p, uint64_t n, bool overlap)
{
    for (unsigned b = 0; b < BUCKETS; b++) {
        for (struct obj *o = g.buckets[b]; o != NULL; o = o->next) {
            if (o->kind != kind)
                continue;
            if (overlap ? p < o->key + o->size && o->key < p + n
                        : p >= o->key && p - o->key <= o->size && n <= o->size - (p - o->key))
                return o;
        }
    }
    return NULL;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t bytes, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags)
{
    ENTRY();
    struct obj *h, *o;
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    h = lookup(handle, K_VMM);
    if (h == NULL || flags != 0 || bytes == 0 || bytes % EGPU_MOCK_GRANULARITY != 0 ||
        offset % EGPU_MOCK_GRANULARITY != 0 || offset > h->size || bytes > h->size - offset ||
        range_find(K_RESERVE, ptr, bytes, false) == NULL ||
        range_find(K_MAP, ptr, bytes, true) != NULL)
        return end(CUDA_ERROR_INVALID_VALUE);
    o = obj_new(K_MAP, ptr);
    if (o == NULL)
        return end(CUDA_ERROR_OUT_OF_MEMORY);
    o->size = bytes;
    o->card = h->card;
    return end(CUDA_SUCCESS);
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t bytes)
{
    ENTRY();
    struct obj *o;
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    o = lookup(ptr, K_MAP);
    if (o == NULL || o->size != bytes)
        return end(CUDA_ERROR_INVALID_VALUE);
    obj_release(o);
    return end(CUDA_SUCCESS);
}

/* ---- streams (resolution shared by launches, events, async memory) ---- */

struct target {
    struct obj *ctx;
    struct obj *stream; /* NULL: a default stream */
    bool legacy;        /* the legacy default stream */
};

/* Locked: what stream s names; ptsz: a _ptsz call (stream 0 is per-thread). */
static CUresult resolve_stream(CUstream s, bool ptsz, struct target *t)
{
    t->stream = NULL;
    t->legacy = false;
    if (s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) {
        t->legacy = s == CU_STREAM_LEGACY || (s == NULL && !ptsz);
        t->ctx = current_ctx();
    } else {
        t->stream = lookup((uint64_t)(uintptr_t)s, K_STREAM);
        if (t->stream == NULL)
            return CUDA_ERROR_INVALID_HANDLE;
        t->ctx = ctx_usable(t->stream->ctx);
    }
    return t->ctx != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

/* The end of the work queued on t. */
static uint64_t target_end(const struct target *t)
{
    if (t->stream != NULL)
        return t->stream->u.stream.last_ns;
    return t->legacy ? t->ctx->u.ctx.any_ns : t->ctx->u.ctx.default_ns;
}

static void target_extend(const struct target *t, uint64_t end_ns)
{
    if (t->stream != NULL)
        t->stream->u.stream.last_ns = end_ns;
    else
        t->ctx->u.ctx.default_ns = end_ns;
    if (end_ns > t->ctx->u.ctx.any_ns)
        t->ctx->u.ctx.any_ns = end_ns;
}

/* ---- stream capture (the rules of cuThreadExchangeStreamCaptureMode) ---- */

/* Locked: a small id of the calling thread, 1 and up. */
static unsigned thread_id(void)
{
    if (tls_thread == 0)
        tls_thread = ++g.threads;
    return tls_thread;
}

/* Locked: the stream t names when a capture is begun on it (active or
 * invalidated), else NULL. */
static struct obj *capturing(const struct target *t)
{
    return t->stream != NULL && t->stream->u.stream.status != CU_STREAM_CAPTURE_STATUS_NONE
               ? t->stream
               : NULL;
}

/* Locked: stream key is no longer capturing. */
static void capture_forget(uint64_t key)
{
    for (unsigned i = 0; i < CAPTURES_MAX; i++) {
        if (g.captures[i] == key)
            g.captures[i] = 0;
    }
}

/* Locked: whether the calling thread may make a potentially unsafe call now
 * (cuEventQuery, cuEventSynchronize, cuStreamQuery, cuStreamSynchronize,
 * cuCtxSynchronize):
 * not in its mode GLOBAL while another thread captures in GLOBAL mode, nor in
 * GLOBAL or THREAD_LOCAL while it captures itself in a mode other than
 * RELAXED. A call made anyway fails with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
 * and invalidates the captures it conflicts with. */
static CUresult unsafe_call(void)
{
    unsigned me = thread_id();
    bool refused = false;

    if (tls_capture_mode == CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_SUCCESS;
    for (unsigned i = 0; i < CAPTURES_MAX; i++) {
        struct obj *s = g.captures[i] != 0 ? lookup(g.captures[i], K_STREAM) : NULL;

        if (s == NULL) {
            g.captures[i] = 0; /* its stream or context went */
            continue;
        }
        if (s->u.stream.status != CU_STREAM_CAPTURE_STATUS_ACTIVE)
            continue;
        if (s->u.stream.thread == me ? s->u.stream.mode != CU_STREAM_CAPTURE_MODE_RELAXED
                                     : tls_capture_mode == CU_STREAM_CAPTURE_MODE_GLOBAL &&
                                           s->u.stream.mode == CU_STREAM_CAPTURE_MODE_GLOBAL) {
            s->u.stream.status = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
            refused = true;
        }
    }
    return refused ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

/* Locked: record a launch of cost_ns into the capture on stream s: one node
 * of the graph being captured. CUDA_ERROR_STREAM_CAPTURE_INVALIDATED when the
 * capture was invalidated. */
static CUresult capture_add(struct obj *s, uint64_t cost_ns)
{
    struct obj *gr = lookup(s->u.stream.graph, K_GRAPH);

    if (s->u.stream.status != CU_STREAM_CAPTURE_STATUS_ACTIVE)
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    if (gr == NULL)
        return CUDA_ERROR_UNKNOWN;
    gr->u.graph.nodes++;
    gr->u.graph.cost_ns =
        gr->u.graph.cost_ns > UINT64_MAX - cost_ns ? UINT64_MAX : gr->u.graph.cost_ns + cost_ns;
    return CUDA_SUCCESS;
}

CUresult cuStreamCreate(CUstream *stream, unsigned int flags)
{
    ENTRY();
    struct obj *c, *s;
    CUresult r = begin_ctx(&c);

    if (r != CUDA_SUCCESS)
        return r;
    if (stream == NULL || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING) != 0)
        return end(CUDA_ERROR_INVALID_VALUE);
    s = obj_new(K_STREAM, new_handle());
    if (s == NULL)
        return end(CUDA_ERROR_OUT_OF_MEMORY);
    s->ctx = c->key;
    *stream = (CUstream)(uintptr_t)s->key;
    return end(CUDA_SUCCESS);
}

CUresult cuStreamDestroy_v2(CUstream stream)
{
    ENTRY();
    struct obj *s;
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    s = lookup((uint64_t)(uintptr_t)stream, K_STREAM);
    if (s == NULL)
        return end(CUDA_ERROR_INVALID_HANDLE);
    if (s->u.stream.status != CU_STREAM_CAPTURE_STATUS_NONE) { /* the capture goes with it */
        struct obj *gr = lookup(s->u.stream.graph, K_GRAPH);

        if (gr != NULL)
            obj_release(gr);
        capture_forget(s->key);
    }
    obj_release(s); /* its queued work still runs, as on the device */
    return end(CUDA_SUCCESS);
}

static CUresult stream_sync(CUstream stream, bool ptsz)
{
    struct target t;
    uint64_t until;
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    r = resolve_stream(stream, ptsz, &t);
    if (r == CUDA_SUCCESS)
        r = unsafe_call();
    if (r == CUDA_SUCCESS && capturing(&t) != NULL) { /* a capture cannot be waited for */
        t.stream->u.stream.status = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
        r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    if (r != CUDA_SUCCESS)
        return end(r);
    until = target_end(&t);
    pthread_mutex_unlock(&g.lock);
    egpu_mock_sleep_until(until);
    return CUDA_SUCCESS;
}

CUresult cuStreamSynchronize(CUstream stream)
{
    ENTRY();
    return stream_sync(stream, false);
}

CUresult cuStreamSynchronize_ptsz(CUstream stream)
{
    ENTRY();
    return stream_sync(stream, true);
}

/* CUDA_SUCCESS when everything launched on the stream has run, else
 * CUDA_ERROR_NOT_READY; a potentially unsafe call, as cuEventQuery. */
static CUresult stream_query(CUstream stream, bool ptsz)
{
    struct target t;
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    r = resolve_stream(stream, ptsz, &t);
    if (r == CUDA_SUCCESS)
        r = unsafe_call();
    if (r == CUDA_SUCCESS && target_end(&t) > egpu_mock_now_ns())
        r = CUDA_ERROR_NOT_READY;
    return end(r);
}

CUresult cuStreamQuery(CUstream stream)
{
    ENTRY();
    return stream_query(stream, false);
}

CUresult cuStreamQuery_ptsz(CUstream stream)
{
    ENTRY();
    return stream_query(stream, true);
}

/* ---- stream-ordered memory ---- */

/* The default pool of card, made on first use; NULL when out of memory. */
static struct obj *default_pool(unsigned card)
{
    struct obj *p = g.default_pool[card] != 0 ? lookup(g.default_pool[card], K_POOL) : NULL;

    if (p != NULL)
        return p;
    p = obj_new(K_POOL, new_handle());
    if (p == NULL)
        return NULL;
    p->card = card;
    p->u.pool.is_default = true;
    g.default_pool[card] = p->key;
    return p;
}

/* Grow pool p's reservation by at least need bytes (a multiple of the
 * granularity): a chunk when the card has it, else exactly need. */
static CUresult pool_grow(struct obj *p, uint64_t need)
{
    uint64_t chunk_mib = env_u64("EGPU_MOCK_CUDA_POOL_CHUNK_MIB", 2);
    uint64_t chunk = chunk_mib > 0 && chunk_mib < (1ull << 40) ? chunk_mib << 20 : need;
    uint64_t grow = need;
    int r;

    if (need <= UINT64_MAX - chunk)
        grow = (need + chunk - 1) / chunk * chunk;
    r = egpu_mock_mem_take(&g.dev, p->card, grow);
    if (r == -ENOMEM && grow > need) {
        grow = need;
        r = egpu_mock_mem_take(&g.dev, p->card, grow);
    }
    if (r == -ENOMEM)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (r != 0)
        return CUDA_ERROR_UNKNOWN;
    p->bytes += grow;
    if (p->bytes > p->u.pool.reserved_high)
        p->u.pool.reserved_high = p->bytes;
    return CUDA_SUCCESS;
}

/* Release pool p's unused reservation down to max(in use, keep). */
static void pool_release(struct obj *p, uint64_t keep)
{
    uint64_t target = round_granularity(keep);

    if (target == 0 && keep > 0)
        target = UINT64_MAX; /* keep overflowed: keep everything */
    if (target < p->u.pool.used)
        target = p->u.pool.used;
    if (p->bytes > target) {
        egpu_mock_mem_give(&g.dev, p->card, p->bytes - target);
        p->bytes = target;
    }
}

/* Free device pointer o: a pool's block goes back to its pool, which keeps
 * it reserved up to its release threshold. */
static void mem_release(struct obj *o)
{
    struct obj *p = o->u.mem.pool != 0 ? lookup(o->u.mem.pool, K_POOL) : NULL;
    uint64_t block = round_granularity(o->size);

    obj_release(o);
    if (p == NULL)
        return;
    p->u.pool.used -= block < p->u.pool.used ? block : p->u.pool.used;
    pool_release(p, p->u.pool.used > UINT64_MAX - p->u.pool.threshold
                        ? UINT64_MAX
                        : p->u.pool.used + p->u.pool.threshold);
}

static CUresult alloc_async(CUdeviceptr *dptr, size_t bytes, struct obj *pool, CUstream stream,
                            bool ptsz)
{
    struct target t;
    uint64_t block = round_granularity(bytes);
    struct obj *o;
    CUresult r;

    if (dptr == NULL || bytes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    r = resolve_stream(stream, ptsz, &t);
    if (r != CUDA_SUCCESS)
        return r;
    if (pool == NULL)
        pool = default_pool(t.ctx->card);
    if (pool == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (block == 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (pool->u.pool.used + block > pool->bytes) {
        r = pool_grow(pool, pool->u.pool.used + block - pool->bytes);
        if (r != CUDA_SUCCESS)
            return r;
    }
    o = obj_new(K_MEM, g.next_addr);
    if (o == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY; /* the growth stays reserved, as a pool's would */
    g.next_addr += block;
    o->card = pool->card;
    o->size = bytes;
    o->u.mem.pool = pool->key;
    pool->u.pool.used += block;
    if (pool->u.pool.used > pool->u.pool.used_high)
        pool->u.pool.used_high = pool->u.pool.used;
    *dptr = o->key;
    return CUDA_SUCCESS;
}

static CUresult mem_alloc_async(CUdeviceptr *dptr, size_t bytes, CUstream stream, bool ptsz)
{
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    return end(alloc_async(dptr, bytes, NULL, stream, ptsz));
}

CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytes, CUstream stream)
{
    ENTRY();
    return mem_alloc_async(dptr, bytes, stream, false);
}

CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytes, CUstream stream)
{
    ENTRY();
    return mem_alloc_async(dptr, bytes, stream, true);
}

static CUresult mem_free_async(CUdeviceptr dptr, CUstream stream, bool ptsz)
{
    struct target t;
    struct obj *o;
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    r = resolve_stream(stream, ptsz, &t);
    if (r != CUDA_SUCCESS)
        return end(r);
    o = lookup(dptr, K_MEM);
    if (o == NULL)
        return end(CUDA_ERROR_INVALID_VALUE);
    mem_release(o);
    return end(CUDA_SUCCESS);
}

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream)
{
    ENTRY();
    return mem_free_async(dptr, stream, false);
}

CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream)
{
    ENTRY();
    return mem_free_async(dptr, stream, true);
}

CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    ENTRY();
    unsigned card;
    struct obj *o;
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    if (pool == NULL || props == NULL)
        return end(CUDA_ERROR_INVALID_VALUE);
    r = prop_device(&props->location, props->allocType, &card);
    if (r != CUDA_SUCCESS)
        return end(r);
    o = obj_new(K_POOL, new_handle());
    if (o == NULL)
        return end(CUDA_ERROR_OUT_OF_MEMORY);
    o->card = card;
    *pool = (CUmemoryPool)(uintptr_t)o->key;
    return end(CUDA_SUCCESS);
}

CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    ENTRY();
    struct obj *p;
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    p = lookup((uint64_t)(uintptr_t)pool, K_POOL);
    if (p == NULL || p->u.pool.is_default)
        return end(CUDA_ERROR_INVALID_VALUE);
    for (unsigned b = 0; b < BUCKETS; b++) {
        struct obj *o = g.buckets[b];

        while (o != NULL) {
            struct obj *next = o->next;

            if (o->kind == K_MEM && o->u.mem.pool == p->key)
                obj_release(o);
            o = next;
        }
    }
    obj_release(p);
    return end(CUDA_SUCCESS);
}

static CUresult alloc_from_pool(CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool, CUstream stream,
                                bool ptsz)
{
    struct obj *p;
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    p = lookup((uint64_t)(uintptr_t)pool, K_POOL);
    if (p == NULL)
        return end(CUDA_ERROR_INVALID_VALUE);
    return end(alloc_async(dptr, bytes, p, stream, ptsz));
}

/* begin() plus the pool named (*p). */
static CUresult begin_pool(CUmemoryPool pool, struct obj **p)
{
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    *p = lookup((uint64_t)(uintptr_t)pool, K_POOL);
    if (*p == NULL)
        return end(CUDA_ERROR_INVALID_VALUE);
    return CUDA_SUCCESS;
}

CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    ENTRY();
    struct obj *p;
    uint64_t v;
    CUresult r = begin_pool(pool, &p);

    if (r != CUDA_SUCCESS)
        return r;
    if (value == NULL)
        return end(CUDA_ERROR_INVALID_VALUE);
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        *(int *)value = 1;
        return end(CUDA_SUCCESS);
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        v = p->u.pool.threshold;
        break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
        v = p->bytes;
        break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
        v = p->u.pool.reserved_high;
        break;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
        v = p->u.pool.used;
        break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        v = p->u.pool.used_high;
        break;
    default:
        return end(CUDA_ERROR_INVALID_VALUE);
    }
    memcpy(value, &v, sizeof(v)); /* cuuint64_t */
    return end(CUDA_SUCCESS);
}

CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    ENTRY();
    struct obj *p;
    uint64_t v = 0;
    CUresult r = begin_pool(pool, &p);

    if (r != CUDA_SUCCESS)
        return r;
    if (value == NULL)
        return end(CUDA_ERROR_INVALID_VALUE);
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        return end(CUDA_SUCCESS);
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        memcpy(&v, value, sizeof(v));
        p->u.pool.threshold = v;
        pool_release(p, p->u.pool.used > UINT64_MAX - v ? UINT64_MAX : p->u.pool.used + v);
        return end(CUDA_SUCCESS);
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        memcpy(&v, value, sizeof(v));
        if (v != 0)
            return end(CUDA_ERROR_INVALID_VALUE);
        if (attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)
            p->u.pool.reserved_high = p->bytes;
        else
            p->u.pool.used_high = p->u.pool.used;
        return end(CUDA_SUCCESS);
    default:
        return end(CUDA_ERROR_INVALID_VALUE);
    }
}

CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t min_bytes_to_keep)
{
    ENTRY();
    struct obj *p;
    CUresult r = begin_pool(pool, &p);

    if (r != CUDA_SUCCESS)
        return r;
    pool_release(p, min_bytes_to_keep);
    return end(CUDA_SUCCESS);
}

static CUresult device_default_pool(CUmemoryPool *pool, CUdevice dev)
{
    struct obj *p;
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    if (pool == NULL)
        return end(CUDA_ERROR_INVALID_VALUE);
    if (!valid_device(dev))
        return end(CUDA_ERROR_INVALID_DEVICE);
    p = default_pool((unsigned)dev);
    if (p == NULL)
        return end(CUDA_ERROR_OUT_OF_MEMORY);
    *pool = (CUmemoryPool)(uintptr_t)p->key;
    return end(CUDA_SUCCESS);
}

CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev)
{
    ENTRY();
    return device_default_pool(pool, dev);
}

CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
    ENTRY();
    return device_default_pool(pool, dev); /* no cuDeviceSetMemPool here */
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool,
                                 CUstream stream)
{
    ENTRY();
    return alloc_from_pool(dptr, bytes, pool, stream, false);
}

CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool,
                                      CUstream stream)
{
    ENTRY();
    return alloc_from_pool(dptr, bytes, pool, stream, true);
}

/* ---- arrays ---- */

static unsigned format_bytes(CUarray_format f)
{
    switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
        return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
        return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
        return 4;
    default:
        return 0;
    }
}

static uint64_t at_least_1(uint64_t v)
{
    return v > 0 ? v : 1;
}

/* Bytes of a w x h x d array of format f with channels; 0: invalid, and
 * UINT64_MAX: too large. */
static uint64_t array_bytes(uint64_t w, uint64_t h, uint64_t d, CUarray_format f, unsigned channels)
{
    uint64_t n = format_bytes(f), total;

    if (w == 0 || n == 0 || (channels != 1 && channels != 2 && channels != 4))
        return 0;
    if (__builtin_mul_overflow(w, at_least_1(h), &total) ||
        __builtin_mul_overflow(total, at_least_1(d), &total) ||
        __builtin_mul_overflow(total, n * channels, &total))
        return UINT64_MAX;
    return total;
}

static CUresult array_create(enum kind kind, uint64_t bytes, uint64_t *key)
{
    struct obj *c, *o;
    CUresult r = begin_ctx(&c);

    if (r != CUDA_SUCCESS)
        return r;
    if (bytes == 0)
        return end(CUDA_ERROR_INVALID_VALUE);
    r = device_alloc(kind, c->card, bytes, c->key, &o);
    if (r == CUDA_SUCCESS)
        *key = o->key;
    return end(r);
}

CUresult cuArrayCreate_v2(CUarray *array, const CUDA_ARRAY_DESCRIPTOR *desc)
{
    ENTRY();
    uint64_t key;
    CUresult r;

    if (array == NULL || desc == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    r = array_create(
        K_ARRAY, array_bytes(desc->Width, desc->Height, 0, desc->Format, desc->NumChannels), &key);
    if (r == CUDA_SUCCESS)
        *array = (CUarray)(uintptr_t)key;
    return r;
}

CUresult cuArray3DCreate_v2(CUarray *array, const CUDA_ARRAY3D_DESCRIPTOR *desc)
{
    ENTRY();
    uint64_t key;
    CUresult r;

    if (array == NULL || desc == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    r = array_create(
        K_ARRAY,
        array_bytes(desc->Width, desc->Height, desc->Depth, desc->Format, desc->NumChannels), &key);
    if (r == CUDA_SUCCESS)
        *array = (CUarray)(uintptr_t)key;
    return r;
}

static CUresult array_destroy(uint64_t key, enum kind kind)
{
    struct obj *o;
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    o = lookup(key, kind);
    if (o == NULL)
        return end(CUDA_ERROR_INVALID_VALUE);
    obj_release(o);
    return end(CUDA_SUCCESS);
}

CUresult cuArrayDestroy(CUarray array)
{
    ENTRY();
    return array_destroy((uint64_t)(uintptr_t)array, K_ARRAY);
}

/* Every level l is max(1, extent >> l) in each used dimension; there are at
 * most floor(log2(largest extent)) + 1 levels. */
CUresult cuMipmappedArrayCreate(CUmipmappedArray *array, const CUDA_ARRAY3D_DESCRIPTOR *desc,
                                unsigned int levels)
{
    ENTRY();
    uint64_t total = 0, key, largest;
    unsigned max_levels = 0;
    CUresult r;

    if (array == NULL || desc == NULL || levels == 0)
        return CUDA_ERROR_INVALID_VALUE;
    largest = desc->Width;
    if (desc->Height > largest)
        largest = desc->Height;
    if (desc->Depth > largest)
        largest = desc->Depth;
    for (uint64_t v = largest; v > 0; v >>= 1)
        max_levels++;
    if (levels > max_levels)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned l = 0; l < levels; l++) {
        uint64_t h = desc->Height > 0 ? at_least_1(desc->Height >> l) : 0;
        uint64_t d = desc->Depth > 0 ? at_least_1(desc->Depth >> l) : 0;
        uint64_t b =
            array_bytes(at_least_1(desc->Width >> l), h, d, desc->Format, desc->NumChannels);

        if (b == 0)
            return CUDA_ERROR_INVALID_VALUE;
        if (b == UINT64_MAX || total > UINT64_MAX - b)
            return CUDA_ERROR_OUT_OF_MEMORY;
        total += b;
    }
    r = array_create(K_MIPMAP, total, &key);
    if (r == CUDA_SUCCESS)
        *array = (CUmipmappedArray)(uintptr_t)key;
    return r;
}

CUresult cuMipmappedArrayDestroy(CUmipmappedArray array)
{
    ENTRY();
    return array_destroy((uint64_t)(uintptr_t)array, K_MIPMAP);
}

/* ---- modules and launches ---- */

CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    ENTRY();
    struct obj *c, *m;
    CUresult r = begin_ctx(&c);

    if (r != CUDA_SUCCESS)
        return r;
    if (module == NULL || image == NULL)
        return end(CUDA_ERROR_INVALID_VALUE);
    m = obj_new(K_MODULE, new_handle());
    if (m == NULL)
        return end(CUDA_ERROR_OUT_OF_MEMORY);
    m->ctx = c->key;
    *module = (CUmodule)(uintptr_t)m->key;
    return end(CUDA_SUCCESS);
}

CUresult cuModuleUnload(CUmodule module)
{
    ENTRY();
    struct obj *m;
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    m = lookup((uint64_t)(uintptr_t)module, K_MODULE);
    if (m == NULL)
        return end(CUDA_ERROR_INVALID_HANDLE);
    for (unsigned b = 0; b < BUCKETS; b++) {
        struct obj *o = g.buckets[b];

        while (o != NULL) {
            struct obj *next = o->next;

            if (o->kind == K_FUNC && o->u.func.module == m->key)
                obj_release(o);
            o = next;
        }
    }
    obj_release(m);
    return end(CUDA_SUCCESS);
}

/* Device ns per block of kernel name: EGPU_MOCK_CUDA_KERNEL_NS, else
 * EGPU_MOCK_CUDA_BLOCK_NS, else 1000. */
static uint64_t kernel_cost(const char *name)
{
    const char *p = getenv("EGPU_MOCK_CUDA_KERNEL_NS");
    size_t len = strlen(name);

    while (p != NULL && *p != '\0') {
        const char *eq = strchr(p, '=');
        const char *comma = strchr(p, ',');

        if (eq == NULL)
            break;
        if (comma != NULL && comma < eq) {
            p = comma + 1;
            continue;
        }
        if ((size_t)(eq - p) == len && strncmp(p, name, len) == 0) {
            char *e;
            unsigned long long v = strtoull(eq + 1, &e, 10);

            if (e != eq + 1 && (*e == '\0' || *e == ','))
                return v;
        }
        if (comma == NULL)
            break;
        p = comma + 1;
    }
    return env_u64("EGPU_MOCK_CUDA_BLOCK_NS", 1000);
}

CUresult cuModuleGetFunction(CUfunction *fn, CUmodule module, const char *name)
{
    ENTRY();
    struct obj *m, *f;
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    if (fn == NULL || name == NULL)
        return end(CUDA_ERROR_INVALID_VALUE);
    m = lookup((uint64_t)(uintptr_t)module, K_MODULE);
    if (m == NULL)
        return end(CUDA_ERROR_INVALID_HANDLE);
    f = obj_new(K_FUNC, new_handle());
    if (f == NULL)
        return end(CUDA_ERROR_OUT_OF_MEMORY);
    f->ctx = m->ctx;
    f->u.func.module = m->key;
    f->u.func.ns_per_block = kernel_cost(name);
    f->u.func.sms = mock_sms();
    f->u.func.block[0] = f->u.func.block[1] = f->u.func.block[2] = 1;
    snprintf(f->u.func.name, sizeof(f->u.func.name), "%s", name);
    *fn = (CUfunction)(uintptr_t)f->key;
    return end(CUDA_SUCCESS);
}

/* The host time of a launch call, EGPU_MOCK_CUDA_SUBMIT_NS (read at the
 * first launch; default 0): the call spins that long before the kernel
 * reaches the card, as a real driver's launch call does. */
static void submit_delay(void)
{
    static _Atomic int64_t submit_ns = -1;
    int64_t ns = atomic_load_explicit(&submit_ns, memory_order_relaxed);
    uint64_t until;

    if (ns < 0) {
        ns = (int64_t)(env_u64("EGPU_MOCK_CUDA_SUBMIT_NS", 0) & INT64_MAX);
        atomic_store_explicit(&submit_ns, ns, memory_order_relaxed);
    }
    if (ns == 0)
        return;
    until = egpu_mock_now_ns() + (uint64_t)ns;
    while (egpu_mock_now_ns() < until)
        ;
}

static CUresult launch(CUfunction fn, const unsigned grid[3], const unsigned block[3],
                       CUstream stream, bool ptsz)
{
    struct target t;
    struct obj *f;
    uint64_t blocks, cost, end_ns;
    CUresult r;

    submit_delay();
    r = begin();
    if (r != CUDA_SUCCESS)
        return r;
    f = lookup((uint64_t)(uintptr_t)fn, K_FUNC);
    if (f == NULL)
        return end(CUDA_ERROR_INVALID_HANDLE);
    if (grid[0] == 0 || grid[1] == 0 || grid[2] == 0 || block[0] == 0 || block[1] == 0 ||
        block[2] == 0 || (uint64_t)block[0] * block[1] * block[2] > 1024)
        return end(CUDA_ERROR_INVALID_VALUE);
    r = resolve_stream(stream, ptsz, &t);
    if (r != CUDA_SUCCESS)
        return end(r);
    if (f->ctx != t.ctx->key)
        return end(CUDA_ERROR_INVALID_CONTEXT);
    blocks = (uint64_t)grid[0] * grid[1] * grid[2];
    if (f->u.func.sms != 0) /* waves of sms blocks at a time */
        blocks = (blocks + f->u.func.sms - 1) / f->u.func.sms;
    if (__builtin_mul_overflow(blocks, f->u.func.ns_per_block, &cost))
        cost = UINT64_MAX;
    if (capturing(&t) != NULL) /* recorded in the graph, not run */
        return end(capture_add(t.stream, cost));
    if (egpu_mock_launch(&g.dev, t.ctx->card, g.tag, target_end(&t), cost, &end_ns) != 0)
        return end(CUDA_ERROR_UNKNOWN);
    target_extend(&t, end_ns);
    return end(CUDA_SUCCESS);
}

CUresult cuLaunchKernel(CUfunction fn, unsigned int grid_x, unsigned int grid_y,
                        unsigned int grid_z, unsigned int block_x, unsigned int block_y,
                        unsigned int block_z, unsigned int shared_bytes, CUstream stream,
                        void **params, void **extra)
{
    ENTRY();
    const unsigned grid[3] = {grid_x, grid_y, grid_z}, block[3] = {block_x, block_y, block_z};

    (void)shared_bytes; /* the kernel's arguments and shared memory are not simulated */
    (void)params;
    (void)extra;
    return launch(fn, grid, block, stream, false);
}

CUresult cuLaunchKernel_ptsz(CUfunction fn, unsigned int grid_x, unsigned int grid_y,
                             unsigned int grid_z, unsigned int block_x, unsigned int block_y,
                             unsigned int block_z, unsigned int shared_bytes, CUstream stream,
                             void **params, void **extra)
{
    ENTRY();
    const unsigned grid[3] = {grid_x, grid_y, grid_z}, block[3] = {block_x, block_y, block_z};

    (void)shared_bytes;
    (void)params;
    (void)extra;
    return launch(fn, grid, block, stream, true);
}

static CUresult launch_ex(const CUlaunchConfig *config, CUfunction fn, bool ptsz)
{
    unsigned grid[3], block[3];

    if (config == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    grid[0] = config->gridDimX;
    grid[1] = config->gridDimY;
    grid[2] = config->gridDimZ;
    block[0] = config->blockDimX;
    block[1] = config->blockDimY;
    block[2] = config->blockDimZ;
    return launch(fn, grid, block, config->hStream, ptsz);
}

CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction fn, void **params, void **extra)
{
    ENTRY();
    (void)params;
    (void)extra;
    return launch_ex(config, fn, false);
}

CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction fn, void **params,
                               void **extra)
{
    ENTRY();
    (void)params;
    (void)extra;
    return launch_ex(config, fn, true);
}

CUresult cuLaunchCooperativeKernel(CUfunction fn, unsigned int grid_x, unsigned int grid_y,
                                   unsigned int grid_z, unsigned int block_x, unsigned int block_y,
                                   unsigned int block_z, unsigned int shared_bytes, CUstream stream,
                                   void **params)
{
    ENTRY();
    const unsigned grid[3] = {grid_x, grid_y, grid_z}, block[3] = {block_x, block_y, block_z};

    (void)shared_bytes; /* co-residency of the blocks is not simulated */
    (void)params;
    return launch(fn, grid, block, stream, false);
}

CUresult cuLaunchCooperativeKernel_ptsz(CUfunction fn, unsigned int grid_x, unsigned int grid_y,
                                        unsigned int grid_z, unsigned int block_x,
                                        unsigned int block_y, unsigned int block_z,
                                        unsigned int shared_bytes, CUstream stream, void **params)
{
    ENTRY();
    const unsigned grid[3] = {grid_x, grid_y, grid_z}, block[3] = {block_x, block_y, block_z};

    (void)shared_bytes;
    (void)params;
    return launch(fn, grid, block, stream, true);
}

/* Each device's launch in turn on its stream; the first that fails ends it
 * (the driver checks them all first; the tests launch valid lists). */
CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *list, unsigned int num_devices,
                                              unsigned int flags)
{
    ENTRY();
    CUresult r = CUDA_SUCCESS;

    (void)flags; /* CUDA_COOPERATIVE_LAUNCH_MULTI_DEVICE_NO_PRE/POST_LAUNCH_SYNC */
    if (list == NULL || num_devices == 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < num_devices && r == CUDA_SUCCESS; i++) {
        const CUDA_LAUNCH_PARAMS *p = &list[i];
        const unsigned grid[3] = {p->gridDimX, p->gridDimY, p->gridDimZ};
        const unsigned block[3] = {p->blockDimX, p->blockDimY, p->blockDimZ};

        r = launch(p->function, grid, block, p->hStream, false);
    }
    return r;
}

CUresult cuFuncSetBlockShape(CUfunction fn, int x, int y, int z)
{
    ENTRY();
    struct obj *f;
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    f = lookup((uint64_t)(uintptr_t)fn, K_FUNC);
    if (f == NULL)
        return end(CUDA_ERROR_INVALID_HANDLE);
    if (x <= 0 || y <= 0 || z <= 0 || (uint64_t)x * (uint64_t)y * (uint64_t)z > 1024)
        return end(CUDA_ERROR_INVALID_VALUE);
    f->u.func.block[0] = (unsigned)x;
    f->u.func.block[1] = (unsigned)y;
    f->u.func.block[2] = (unsigned)z;
    return end(CUDA_SUCCESS);
}

/* cuLaunch (1 x 1) and cuLaunchGrid(Async) (width x height) with the block
 * shape of cuFuncSetBlockShape. */
static CUresult launch_grid(CUfunction fn, int width, int height, CUstream stream)
{
    unsigned grid[3] = {0, 0, 1}, block[3];
    struct obj *f;
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    f = lookup((uint64_t)(uintptr_t)fn, K_FUNC);
    if (f == NULL)
        return end(CUDA_ERROR_INVALID_HANDLE);
    memcpy(block, f->u.func.block, sizeof(block));
    end(CUDA_SUCCESS);
    if (width <= 0 || height <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    grid[0] = (unsigned)width;
    grid[1] = (unsigned)height;
    return launch(fn, grid, block, stream, false);
}

CUresult cuLaunch(CUfunction fn)
{
    ENTRY();
    return launch_grid(fn, 1, 1, NULL);
}

CUresult cuLaunchGrid(CUfunction fn, int grid_width, int grid_height)
{
    ENTRY();
    return launch_grid(fn, grid_width, grid_height, NULL);
}

CUresult cuLaunchGridAsync(CUfunction fn, int grid_width, int grid_height, CUstream stream)
{
    ENTRY();
    return launch_grid(fn, grid_width, grid_height, stream);
}

/* ---- events ---- */

CUresult cuEventCreate(CUevent *event, unsigned int flags)
{
    ENTRY();
    const unsigned all = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
    struct obj *c, *e;
    CUresult r = begin_ctx(&c);

    if (r != CUDA_SUCCESS)
        return r;
    if (event == NULL || (flags & ~all) != 0 ||
        ((flags & CU_EVENT_INTERPROCESS) != 0 && (flags & CU_EVENT_DISABLE_TIMING) == 0))
        return end(CUDA_ERROR_INVALID_VALUE);
    e = obj_new(K_EVENT, new_handle());
    if (e == NULL)
        return end(CUDA_ERROR_OUT_OF_MEMORY);
    e->ctx = c->key;
    e->u.event.flags = flags;
    *event = (CUevent)(uintptr_t)e->key;
    return end(CUDA_SUCCESS);
}

static CUresult event_record(CUevent event, CUstream stream, bool ptsz)
{
    struct target t;
    struct obj *e;
    uint64_t now = egpu_mock_now_ns(), at;
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    e = lookup((uint64_t)(uintptr_t)event, K_EVENT);
    if (e == NULL)
        return end(CUDA_ERROR_INVALID_HANDLE);
    r = resolve_stream(stream, ptsz, &t);
    if (r != CUDA_SUCCESS)
        return end(r);
    if (capturing(&t) != NULL) { /* a node of the capture, not a time */
        if (t.stream->u.stream.status != CU_STREAM_CAPTURE_STATUS_ACTIVE)
            return end(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
        e->u.event.recorded = false;
        e->u.event.captured = true;
        return end(CUDA_SUCCESS);
    }
    at = target_end(&t);
    e->u.event.captured = false;
    e->u.event.recorded = true;
    e->u.event.stamp_ns = at > now ? at : now;
    return end(CUDA_SUCCESS);
}

CUresult cuEventRecord(CUevent event, CUstream stream)
{
    ENTRY();
    return event_record(event, stream, false);
}

CUresult cuEventRecord_ptsz(CUevent event, CUstream stream)
{
    ENTRY();
    return event_record(event, stream, true);
}

/* Locked: the event handle names. */
static CUresult event_get(CUevent event, struct obj **e)
{
    *e = lookup((uint64_t)(uintptr_t)event, K_EVENT);
    return *e != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult cuEventQuery(CUevent event)
{
    ENTRY();
    struct obj *e;
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    r = event_get(event, &e);
    if (r == CUDA_SUCCESS && e->u.event.captured)
        r = CUDA_ERROR_CAPTURED_EVENT;
    if (r == CUDA_SUCCESS)
        r = unsafe_call();
    if (r == CUDA_SUCCESS && e->u.event.recorded && e->u.event.stamp_ns > egpu_mock_now_ns())
        r = CUDA_ERROR_NOT_READY;
    return end(r);
}

CUresult cuEventSynchronize(CUevent event)
{
    ENTRY();
    struct obj *e;
    uint64_t until;
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    r = event_get(event, &e);
    if (r == CUDA_SUCCESS && e->u.event.captured)
        r = CUDA_ERROR_CAPTURED_EVENT;
    if (r == CUDA_SUCCESS)
        r = unsafe_call();
    if (r != CUDA_SUCCESS)
        return end(r);
    until = e->u.event.recorded ? e->u.event.stamp_ns : 0;
    pthread_mutex_unlock(&g.lock);
    egpu_mock_sleep_until(until);
    return CUDA_SUCCESS;
}

static CUresult event_elapsed(float *ms, CUevent start, CUevent end_event)
{
    struct obj *a, *b;
    uint64_t now = egpu_mock_now_ns();
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    if (ms == NULL)
        return end(CUDA_ERROR_INVALID_VALUE);
    if (event_get(start, &a) != CUDA_SUCCESS || event_get(end_event, &b) != CUDA_SUCCESS ||
        !a->u.event.recorded || !b->u.event.recorded ||
        ((a->u.event.flags | b->u.event.flags) & CU_EVENT_DISABLE_TIMING) != 0)
        return end(CUDA_ERROR_INVALID_HANDLE);
    if (a->u.event.stamp_ns > now || b->u.event.stamp_ns > now)
        return end(CUDA_ERROR_NOT_READY);
    *ms = (float)(((double)b->u.event.stamp_ns - (double)a->u.event.stamp_ns) / 1e6);
    return end(CUDA_SUCCESS);
}

CUresult cuEventElapsedTime(float *ms, CUevent start, CUevent end_event)
{
    ENTRY();
    return event_elapsed(ms, start, end_event);
}

CUresult cuEventElapsedTime_v2(float *ms, CUevent start, CUevent end_event)
{
    ENTRY();
    return event_elapsed(ms, start, end_event);
}

CUresult cuEventDestroy_v2(CUevent event)
{
    ENTRY();
    struct obj *e;
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    r = event_get(event, &e);
    if (r == CUDA_SUCCESS)
        obj_release(e);
    return end(r);
}

/* ---- stream capture and graphs ---- */

static CUresult begin_capture(CUstream stream, CUstreamCaptureMode mode, bool ptsz)
{
    struct target t;
    struct obj *gr;
    int slot = -1;
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    if (mode < CU_STREAM_CAPTURE_MODE_GLOBAL || mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return end(CUDA_ERROR_INVALID_VALUE);
    r = resolve_stream(stream, ptsz, &t);
    if (r != CUDA_SUCCESS)
        return end(r);
    if (t.stream == NULL) /* the mock captures created streams only */
        return end(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    if (t.stream->u.stream.status != CU_STREAM_CAPTURE_STATUS_NONE)
        return end(CUDA_ERROR_ILLEGAL_STATE);
    for (unsigned i = 0; i < CAPTURES_MAX && slot < 0; i++) {
        if (g.captures[i] == 0 || lookup(g.captures[i], K_STREAM) == NULL)
            slot = (int)i;
    }
    if (slot < 0)
        return end(CUDA_ERROR_OUT_OF_MEMORY);
    gr = obj_new(K_GRAPH, new_handle());
    if (gr == NULL)
        return end(CUDA_ERROR_OUT_OF_MEMORY);
    t.stream->u.stream.status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    t.stream->u.stream.mode = mode;
    t.stream->u.stream.thread = thread_id();
    t.stream->u.stream.graph = gr->key;
    g.captures[slot] = t.stream->key;
    return end(CUDA_SUCCESS);
}

CUresult cuStreamBeginCapture_v2(CUstream stream, CUstreamCaptureMode mode)
{
    ENTRY();
    return begin_capture(stream, mode, false);
}

CUresult cuStreamBeginCapture_v2_ptsz(CUstream stream, CUstreamCaptureMode mode)
{
    ENTRY();
    return begin_capture(stream, mode, true);
}

static CUresult end_capture(CUstream stream, CUgraph *graph, bool ptsz)
{
    struct target t;
    struct obj *s, *gr;
    CUstreamCaptureStatus was;
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    if (graph == NULL)
        return end(CUDA_ERROR_INVALID_VALUE);
    r = resolve_stream(stream, ptsz, &t);
    if (r != CUDA_SUCCESS)
        return end(r);
    s = capturing(&t);
    if (s == NULL)
        return end(CUDA_ERROR_ILLEGAL_STATE);
    if (s->u.stream.mode != CU_STREAM_CAPTURE_MODE_RELAXED && s->u.stream.thread != thread_id())
        return end(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD);
    was = s->u.stream.status;
    s->u.stream.status = CU_STREAM_CAPTURE_STATUS_NONE;
    capture_forget(s->key);
    gr = lookup(s->u.stream.graph, K_GRAPH);
    *graph = NULL;
    if (was != CU_STREAM_CAPTURE_STATUS_ACTIVE) {
        if (gr != NULL)
            obj_release(gr);
        return end(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    }
    if (gr == NULL)
        return end(CUDA_ERROR_UNKNOWN);
    *graph = (CUgraph)(uintptr_t)gr->key;
    return end(CUDA_SUCCESS);
}

CUresult cuStreamEndCapture(CUstream stream, CUgraph *graph)
{
    ENTRY();
    return end_capture(stream, graph, false);
}

CUresult cuStreamEndCapture_ptsz(CUstream stream, CUgraph *graph)
{
    ENTRY();
    return end_capture(stream, graph, true);
}

static CUresult is_capturing(CUstream stream, CUstreamCaptureStatus *status, bool ptsz)
{
    struct target t;
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    if (status == NULL)
        return end(CUDA_ERROR_INVALID_VALUE);
    r = resolve_stream(stream, ptsz, &t);
    if (r != CUDA_SUCCESS)
        return end(r);
    *status = t.stream != NULL ? t.stream->u.stream.status : CU_STREAM_CAPTURE_STATUS_NONE;
    return end(CUDA_SUCCESS);
}

CUresult cuStreamIsCapturing(CUstream stream, CUstreamCaptureStatus *status)
{
    ENTRY();
    return is_capturing(stream, status, false);
}

CUresult cuStreamIsCapturing_ptsz(CUstream stream, CUstreamCaptureStatus *status)
{
    ENTRY();
    return is_capturing(stream, status, true);
}

CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    ENTRY();
    CUstreamCaptureMode old;
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    if (mode == NULL || *mode < CU_STREAM_CAPTURE_MODE_GLOBAL ||
        *mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return end(CUDA_ERROR_INVALID_VALUE);
    old = tls_capture_mode;
    tls_capture_mode = *mode;
    *mode = old;
    return end(CUDA_SUCCESS);
}

CUresult cuGraphCreate(CUgraph *graph, unsigned int flags)
{
    ENTRY();
    struct obj *gr;
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    if (graph == NULL || flags != 0)
        return end(CUDA_ERROR_INVALID_VALUE);
    gr = obj_new(K_GRAPH, new_handle());
    if (gr == NULL)
        return end(CUDA_ERROR_OUT_OF_MEMORY);
    *graph = (CUgraph)(uintptr_t)gr->key;
    return end(CUDA_SUCCESS);
}

CUresult cuGraphGetNodes(CUgraph graph, CUgraphNode *nodes, size_t *count)
{
    ENTRY();
    struct obj *gr;
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    gr = lookup((uint64_t)(uintptr_t)graph, K_GRAPH);
    if (gr == NULL || count == NULL)
        return end(CUDA_ERROR_INVALID_VALUE);
    if (nodes != NULL) { /* fake node handles; the rest of the array NULL */
        for (size_t i = 0; i < *count; i++)
            nodes[i] = i < gr->u.graph.nodes ? (CUgraphNode)(uintptr_t)(gr->key + 1 + i) : NULL;
        if (*count > gr->u.graph.nodes)
            *count = (size_t)gr->u.graph.nodes;
    } else {
        *count = (size_t)gr->u.graph.nodes;
    }
    return end(CUDA_SUCCESS);
}

CUresult cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph graph, unsigned long long flags)
{
    ENTRY();
    const unsigned long long all =
        CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD |
        CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;
    struct obj *c, *gr, *x;
    CUresult r = begin_ctx(&c);

    if (r != CUDA_SUCCESS)
        return r;
    gr = lookup((uint64_t)(uintptr_t)graph, K_GRAPH);
    if (exec == NULL || gr == NULL || (flags & ~all) != 0)
        return end(CUDA_ERROR_INVALID_VALUE);
    x = obj_new(K_EXEC, new_handle());
    if (x == NULL)
        return end(CUDA_ERROR_OUT_OF_MEMORY);
    x->ctx = c->key;
    x->card = c->card;
    x->u.graph = gr->u.graph;
    if (x->u.graph.nodes == 0) /* nothing captured: the nodes the mock does not model */
        x->u.graph.cost_ns = env_u64("EGPU_MOCK_CUDA_GRAPH_NS", 1000000);
    *exec = (CUgraphExec)(uintptr_t)x->key;
    return end(CUDA_SUCCESS);
}

static CUresult graph_launch(CUgraphExec exec, CUstream stream, bool ptsz)
{
    struct target t;
    struct obj *x;
    uint64_t end_ns;
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    x = lookup((uint64_t)(uintptr_t)exec, K_EXEC);
    if (x == NULL)
        return end(CUDA_ERROR_INVALID_VALUE);
    r = resolve_stream(stream, ptsz, &t);
    if (r != CUDA_SUCCESS)
        return end(r);
    if (x->ctx != t.ctx->key)
        return end(CUDA_ERROR_INVALID_CONTEXT);
    if (capturing(&t) != NULL) /* a child graph node of the capture */
        return end(capture_add(t.stream, x->u.graph.cost_ns));
    if (egpu_mock_launch(&g.dev, t.ctx->card, g.tag, target_end(&t), x->u.graph.cost_ns, &end_ns) !=
        0)
        return end(CUDA_ERROR_UNKNOWN);
    target_extend(&t, end_ns);
    return end(CUDA_SUCCESS);
}

CUresult cuGraphLaunch(CUgraphExec exec, CUstream stream)
{
    ENTRY();
    return graph_launch(exec, stream, false);
}

CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream stream)
{
    ENTRY();
    return graph_launch(exec, stream, true);
}

CUresult cuGraphExecDestroy(CUgraphExec exec)
{
    ENTRY();
    struct obj *x;
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    x = lookup((uint64_t)(uintptr_t)exec, K_EXEC);
    if (x == NULL)
        return end(CUDA_ERROR_INVALID_VALUE);
    obj_release(x);
    return end(CUDA_SUCCESS);
}

CUresult cuGraphDestroy(CUgraph graph)
{
    ENTRY();
    struct obj *gr;
    CUresult r = begin();

    if (r != CUDA_SUCCESS)
        return r;
    gr = lookup((uint64_t)(uintptr_t)graph, K_GRAPH);
    if (gr == NULL)
        return end(CUDA_ERROR_INVALID_VALUE);
    obj_release(gr);
    return end(CUDA_SUCCESS);
}

/* ---- cuGetProcAddress ---- */

#define PT 1 /* the per-thread default stream variant (_ptsz, _ptds) */

/* name: the unversioned name asked for; since: the CUDA version that
 * introduced this variant (cudaTypedefs.h: PFN_<name>_v<since>[_pt*]). */
static const struct proc_entry {
    const char *name;
    int since;
    int flags;
    void (*fn)(void);
} procs[] = {
#define E(name, since, flags, sym)              \
    {                                           \
        name, since, flags, (void (*)(void))sym \
    }
    E("cuInit", 2000, 0, cuInit),
    E("cuDriverGetVersion", 2020, 0, cuDriverGetVersion),
    E("cuGetErrorString", 6000, 0, cuGetErrorString),
    E("cuGetErrorName", 6000, 0, cuGetErrorName),
    E("cuGetProcAddress", 11030, 0, cuGetProcAddress),
    E("cuGetProcAddress", 12000, 0, cuGetProcAddress_v2),
    E("cuDeviceGet", 2000, 0, cuDeviceGet),
    E("cuDeviceGetCount", 2000, 0, cuDeviceGetCount),
    E("cuDeviceGetName", 2000, 0, cuDeviceGetName),
    E("cuDeviceGetUuid", 9020, 0, cuDeviceGetUuid),
    E("cuDeviceGetUuid", 11040, 0, cuDeviceGetUuid_v2),
    E("cuDeviceTotalMem", 3020, 0, cuDeviceTotalMem_v2),
    E("cuDeviceGetAttribute", 2000, 0, cuDeviceGetAttribute),
    E("cuCtxCreate", 3020, 0, cuCtxCreate_v2),
    E("cuCtxCreate", 11040, 0, cuCtxCreate_v3),
    E("cuCtxCreate", 12050, 0, cuCtxCreate_v4),
    E("cuCtxDestroy", 4000, 0, cuCtxDestroy_v2),
    E("cuDevicePrimaryCtxRetain", 7000, 0, cuDevicePrimaryCtxRetain),
    E("cuDevicePrimaryCtxRelease", 11000, 0, cuDevicePrimaryCtxRelease_v2),
    E("cuCtxSetCurrent", 4000, 0, cuCtxSetCurrent),
    E("cuCtxGetCurrent", 4000, 0, cuCtxGetCurrent),
    E("cuCtxPushCurrent", 4000, 0, cuCtxPushCurrent_v2),
    E("cuCtxPopCurrent", 4000, 0, cuCtxPopCurrent_v2),
    E("cuCtxGetDevice", 2000, 0, cuCtxGetDevice),
    E("cuCtxGetDevice", 13000, 0, cuCtxGetDevice_v2),
    E("cuCtxSynchronize", 2000, 0, cuCtxSynchronize),
    E("cuCtxSynchronize", 13000, 0, cuCtxSynchronize_v2),
    E("cuMemGetInfo", 3020, 0, cuMemGetInfo_v2),
    E("cuMemAlloc", 3020, 0, cuMemAlloc_v2),
    E("cuMemAllocPitch", 3020, 0, cuMemAllocPitch_v2),
    E("cuMemAllocManaged", 6000, 0, cuMemAllocManaged),
    E("cuMemFree", 3020, 0, cuMemFree_v2),
    E("cuMemHostAlloc", 2020, 0, cuMemHostAlloc),
    E("cuMemFreeHost", 2000, 0, cuMemFreeHost),
    E("cuMemsetD8", 3020, 0, cuMemsetD8_v2),
    E("cuMemsetD8", 7000, PT, cuMemsetD8_v2_ptds),
    E("cuMemcpyHtoD", 3020, 0, cuMemcpyHtoD_v2),
    E("cuMemcpyHtoD", 7000, PT, cuMemcpyHtoD_v2_ptds),
    E("cuMemcpyDtoH", 3020, 0, cuMemcpyDtoH_v2),
    E("cuMemcpyDtoH", 7000, PT, cuMemcpyDtoH_v2_ptds),
    E("cuMemGetAllocationGranularity", 10020, 0, cuMemGetAllocationGranularity),
    E("cuMemCreate", 10020, 0, cuMemCreate),
    E("cuMemRelease", 10020, 0, cuMemRelease),
    E("cuMemAddressReserve", 10020, 0, cuMemAddressReserve),
    E("cuMemAddressFree", 10020, 0, cuMemAddressFree),
    E("cuMemMap", 10020, 0, cuMemMap),
    E("cuMemUnmap", 10020, 0, cuMemUnmap),
    E("cuMemAllocAsync", 11020, 0, cuMemAllocAsync),
    E("cuMemAllocAsync", 11020, PT, cuMemAllocAsync_ptsz),
    E("cuMemFreeAsync", 11020, 0, cuMemFreeAsync),
    E("cuMemFreeAsync", 11020, PT, cuMemFreeAsync_ptsz),
    E("cuMemPoolCreate", 11020, 0, cuMemPoolCreate),
    E("cuMemPoolDestroy", 11020, 0, cuMemPoolDestroy),
    E("cuMemAllocFromPoolAsync", 11020, 0, cuMemAllocFromPoolAsync),
    E("cuMemAllocFromPoolAsync", 11020, PT, cuMemAllocFromPoolAsync_ptsz),
    E("cuMemPoolGetAttribute", 11020, 0, cuMemPoolGetAttribute),
    E("cuMemPoolSetAttribute", 11020, 0, cuMemPoolSetAttribute),
    E("cuMemPoolTrimTo", 11020, 0, cuMemPoolTrimTo),
    E("cuDeviceGetDefaultMemPool", 11020, 0, cuDeviceGetDefaultMemPool),
    E("cuDeviceGetMemPool", 11020, 0, cuDeviceGetMemPool),
    E("cuArrayCreate", 3020, 0, cuArrayCreate_v2),
    E("cuArray3DCreate", 3020, 0, cuArray3DCreate_v2),
    E("cuArrayDestroy", 2000, 0, cuArrayDestroy),
    E("cuMipmappedArrayCreate", 5000, 0, cuMipmappedArrayCreate),
    E("cuMipmappedArrayDestroy", 5000, 0, cuMipmappedArrayDestroy),
    E("cuModuleLoadData", 2000, 0, cuModuleLoadData),
    E("cuModuleUnload", 2000, 0, cuModuleUnload),
    E("cuModuleGetFunction", 2000, 0, cuModuleGetFunction),
    E("cuLaunchKernel", 4000, 0, cuLaunchKernel),
    E("cuLaunchKernel", 7000, PT, cuLaunchKernel_ptsz),
    E("cuLaunchKernelEx", 11060, 0, cuLaunchKernelEx),
    E("cuLaunchKernelEx", 11060, PT, cuLaunchKernelEx_ptsz),
    E("cuLaunchCooperativeKernel", 9000, 0, cuLaunchCooperativeKernel),
    E("cuLaunchCooperativeKernel", 9000, PT, cuLaunchCooperativeKernel_ptsz),
    E("cuLaunchCooperativeKernelMultiDevice", 9000, 0, cuLaunchCooperativeKernelMultiDevice),
    E("cuFuncSetBlockShape", 2000, 0, cuFuncSetBlockShape),
    E("cuLaunch", 2000, 0, cuLaunch),
    E("cuLaunchGrid", 2000, 0, cuLaunchGrid),
    E("cuLaunchGridAsync", 2000, 0, cuLaunchGridAsync),
    E("cuStreamCreate", 2000, 0, cuStreamCreate),
    E("cuStreamSynchronize", 2000, 0, cuStreamSynchronize),
    E("cuStreamSynchronize", 7000, PT, cuStreamSynchronize_ptsz),
    E("cuStreamQuery", 2000, 0, cuStreamQuery),
    E("cuStreamQuery", 7000, PT, cuStreamQuery_ptsz),
    E("cuStreamDestroy", 4000, 0, cuStreamDestroy_v2),
    E("cuEventCreate", 2000, 0, cuEventCreate),
    E("cuEventRecord", 2000, 0, cuEventRecord),
    E("cuEventRecord", 7000, PT, cuEventRecord_ptsz),
    E("cuEventQuery", 2000, 0, cuEventQuery),
    E("cuEventSynchronize", 2000, 0, cuEventSynchronize),
    E("cuEventElapsedTime", 2000, 0, cuEventElapsedTime),
    E("cuEventElapsedTime", 12080, 0, cuEventElapsedTime_v2),
    E("cuEventDestroy", 4000, 0, cuEventDestroy_v2),
    E("cuStreamBeginCapture", 10010, 0, cuStreamBeginCapture_v2),
    E("cuStreamBeginCapture", 10010, PT, cuStreamBeginCapture_v2_ptsz),
    E("cuStreamEndCapture", 10000, 0, cuStreamEndCapture),
    E("cuStreamEndCapture", 10000, PT, cuStreamEndCapture_ptsz),
    E("cuStreamIsCapturing", 10000, 0, cuStreamIsCapturing),
    E("cuStreamIsCapturing", 10000, PT, cuStreamIsCapturing_ptsz),
    E("cuThreadExchangeStreamCaptureMode", 10010, 0, cuThreadExchangeStreamCaptureMode),
    E("cuGraphCreate", 10000, 0, cuGraphCreate),
    E("cuGraphGetNodes", 10000, 0, cuGraphGetNodes),
    E("cuGraphInstantiateWithFlags", 11040, 0, cuGraphInstantiateWithFlags),
    E("cuGraphLaunch", 10000, 0, cuGraphLaunch),
    E("cuGraphLaunch", 10000, PT, cuGraphLaunch_ptsz),
    E("cuGraphExecDestroy", 10000, 0, cuGraphExecDestroy),
    E("cuGraphDestroy", 10000, 0, cuGraphDestroy),
#undef E
};

static CUresult proc_lookup(const char *symbol, void **pfn, int cuda_version, cuuint64_t flags,
                            CUdriverProcAddressQueryResult *status)
{
    const struct proc_entry *best = NULL, *best_pt = NULL;
    bool known = false;

    if (symbol == NULL || pfn == NULL ||
        (flags != CU_GET_PROC_ADDRESS_DEFAULT && flags != CU_GET_PROC_ADDRESS_LEGACY_STREAM &&
         flags != CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM))
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof(procs) / sizeof(procs[0]); i++) {
        const struct proc_entry *e = &procs[i];
        const struct proc_entry **slot = e->flags & PT ? &best_pt : &best;

        if (strcmp(e->name, symbol) != 0)
            continue;
        known = true;
        if (e->since <= cuda_version && (*slot == NULL || (*slot)->since < e->since))
            *slot = e;
    }
    if (flags == CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM && best_pt != NULL)
        best = best_pt;
    *pfn = NULL;
    if (best == NULL) {
        if (status != NULL)
            *status = known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                            : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        return CUDA_ERROR_NOT_FOUND;
    }
    memcpy(pfn, &best->fn, sizeof(*pfn));
    if (status != NULL)
        *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int cuda_version, cuuint64_t flags)
{
    ENTRY();
    return proc_lookup(symbol, pfn, cuda_version, flags, NULL);
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cuda_version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *status)
{
    ENTRY();
    return proc_lookup(symbol, pfn, cuda_version, flags, status);
}
