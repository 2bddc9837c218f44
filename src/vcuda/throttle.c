/* vcuda/throttle.c - the compute limit: holds the kernel launches of every
 * process of a container to core percent of each card's time, and lets them
 * use up to the core limit while nobody else uses the card. The design, its
 * tunables and its figures: docs/vcuda.md, "Compute limit" (its last part,
 * "Inside the controller", follows this file).
 *
 * DESIGN, in short. What is limited is device time, measured with CUDA
 * events: some launches are timed (every launch of a kernel class being
 * learned, every launch that found no room for a class while a sample slot
 * is free, then one per THR_SAMPLE_NS of estimated work), and a class (one
 * function, grid and block in one context; a graph per executable graph) is
 * estimated at the minimum of its spans over the last second, less the
 * host's submission gap. One token bucket per card, shared by the
 * container's processes in <dir>/vcuda-core.shm, is a single 64-bit GCRA
 * arrival time moved by one compare-and-swap per launch: a launch is
 * admitted while it is at most THR_TAU_NS ahead of now, else it sleeps; a
 * timed launch's span corrects what it was charged. A process may have at
 * most THR_QUEUE_NS of work queued per card that no sample has shown done.
 * Late spans (work that waited behind another container's) end a burst at
 * the core limit. Launches into a capturing stream are neither timed nor
 * charged. The region file is opened safely, watched for SIGBUS and mapped
 * again when truncated, replaced or deleted; when it cannot be used, the
 * controller fails closed. Each thread caches its current context.
 *
 * Cost with tokens available: a coarse clock read, a thread-local load, a
 * probe of a fixed hash table, an atomic add and two compare-and-swaps on
 * the shared card's cache line; no driver call, lock, allocation or system
 * call. A timed launch makes eight driver calls (bench/vcuda/vcuda_overhead).
 *
 * Units: device and wall times in nanoseconds (CLOCK_MONOTONIC, the same
 * clock in every process of the machine), shares in percent.
 */
#define _GNU_SOURCE /* flock, MAP_ANONYMOUS */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "egpu/log.h"
#include "throttle.h"

/* Tunables (docs/vcuda.md, "Inside the controller"). Times in nanoseconds. The bucket, its batch
 * and the queue bound may be set at build time (-DTHR_TAU_NS=...), for
 * measuring variants on a card (bench/gpu); the defaults are what ships. */
#define THR_MS_NS 1000000ull
#ifndef THR_TAU_NS
/* the bucket: how far ahead of now charges may run */
#define THR_TAU_NS EGPU_VCUDA_THROTTLE_TAU_NS
#endif
#ifndef THR_BATCH_NS
#define THR_BATCH_NS 0ull /* a refused launch waits until this much more than its charge fits */
#endif
#ifndef THR_QUEUE_NS
#define THR_QUEUE_NS (4 * THR_MS_NS) /* queued device work per process and card */
#endif
#define THR_MAX_DEBT_NS    (10000 * THR_MS_NS) /* the most one launch moves the bucket */
#define THR_CORRUPT_NS     (60000 * THR_MS_NS) /* a bucket further ahead is reset */
#define THR_QUEUE_WAIT_NS  (200 * THR_MS_NS)   /* longest wait for the queue to drain */
#define THR_SAMPLE_NS      200000ull           /* estimated device work between timed launches */
#define THR_CLEAR_NS       (50 * THR_MS_NS)    /* a clear timed launch per class this often */
#define THR_CLEAR_STALE_NS (400 * THR_MS_NS)   /* no clear span so long: wait for one */
#define THR_CLEAR_WAIT_NS  (5 * THR_MS_NS)     /* for at most this long */
#define THR_LEARN          4u                  /* timed launches before a class is known */
#define THR_MIN_COST_NS    1000ull             /* no launch is estimated below 1 us */
#define THR_WIN_SHIFT      27                  /* estimate sub-window: 2^27 ns = 134 ms */
#define THR_WIN_N          8u                  /* sub-windows: the minimum spans about 1.07 s */
#define THR_WIN_VAL_BITS   40
#define THR_WIN_VAL_MASK   ((1ull << THR_WIN_VAL_BITS) - 1)
#define THR_WIN_EP_MASK    ((1ull << (64 - THR_WIN_VAL_BITS)) - 1)
#define THR_INFLATE_NS     20000ull          /* + est / 4: a span this late waited for others */
#define THR_IDLE_HOLD_NS   (250 * THR_MS_NS) /* burst after this long without contention */
#define THR_COARSE_MAX_NS  (4 * THR_MS_NS)   /* the coarsest clock the fast path may read */
#define THR_SLEEP_MIN_NS   20000ull
#define THR_SLEEP_MAX_NS   (2 * THR_MS_NS)
#define THR_CLASS_SLOTS    4096u /* kernel classes per process (a power of two) */
#define THR_CLASS_PROBES   32u
#define THR_SAMPLE_SLOTS   32u /* timed launches in flight per process */

#define THR_CHECK_NS (100 * THR_MS_NS) /* the region file is looked at this often */

/* The shared region, one per container: struct egpu__vcuda_throttle_region in throttle.h
 * (egpu-vcuda-inspect reads it too, and shows the bucket against these). */
_Static_assert(THR_CORRUPT_NS == EGPU_VCUDA_THROTTLE_CORRUPT_NS, "throttle.h's copy");

/* ---- Per process. ---- */

enum { CLASS_EMPTY, CLASS_FILLING, CLASS_READY };

/* One kernel class: launches of one function with one grid and block size
 * in one context. Keys and card are written before state becomes READY and
 * never change after. */
struct thr_class {
    _Atomic uint32_t state;
    int card; /* limited card index, -1 = not limited */
    CUfunction fn;
    CUcontext ctx;
    uint64_t blocks;
    uint64_t threads;
    _Atomic uint64_t est_ns;          /* span of one launch: the minimum of its spans (valid
                                         once samples > 0); the queue counts it */
    _Atomic uint64_t dev_ns;          /* device ns of one launch: the minimum of its spans less
                                         the host's submission gap (<= est_ns); charged */
    _Atomic uint32_t samples;         /* completed samples */
    _Atomic uint64_t clear_ns;        /* last launch timed with nothing of others ahead */
    _Atomic uint64_t win[THR_WIN_N];  /* per sub-window: epoch << 40 | minimum span, ns */
    _Atomic uint64_t dwin[THR_WIN_N]; /* the same for the spans less the submission gap */
    _Atomic uint64_t gwin[THR_WIN_N]; /* the same for the submission gaps (gap_seen) */
};

enum { SAMPLE_FREE, SAMPLE_BUSY, SAMPLE_PENDING };

/* One timed launch. The owner (the thread that moved state away from FREE or
 * PENDING) alone touches the other fields. The events stay with the slot
 * for reuse in the same context and card. */
struct thr_sample {
    _Atomic uint32_t state;
    bool has_events;
    int card;
    CUcontext ctx; /* context of the events */
    CUevent start;
    CUevent end;
    struct thr_class *k; /* NULL: launched without a class */
    uint64_t blocks;
    uint64_t charged_ns; /* device ns charged at launch */
    uint64_t issued_ns;  /* the process's issued counter after this launch */
    uint64_t launch_ns;
    unsigned rate_pct; /* rate the charge was made at */
    bool clear;        /* nothing of the container's was queued ahead of it but its own
                          earlier work on the same stream */
    uint64_t host_ns;  /* from before the start event to after the launch: any delay of
                          the host's between them (a preempted thread) is in the span */
    uint64_t gap_ns;   /* from after the start event was recorded to after the launch
                          returned: what the device waited for the kernel when the start
                          event ran at once (gap_seen) */
    bool gap_seen;     /* the stream was idle when the start event was recorded: the card
                          ran it at once and then waited for the kernel */
};

/* This process's view of one card. */
struct thr_card {
    _Alignas(64) _Atomic uint64_t issued_ns;    /* estimated device ns launched, ever */
    _Atomic uint64_t completed_ns;              /* issued_ns of the newest completed sample */
    _Atomic uint64_t next_sample_ns;            /* sample the launch that takes issued_ns past it */
    _Atomic uint64_t nspb_milli;                /* default estimate: device ns per block x 1000 */
    _Atomic uint32_t pending;                   /* samples in flight */
    _Alignas(64) _Atomic uintptr_t last_stream; /* stream of this process's last launch */
    _Atomic uint64_t last_end_ns;               /* the container's queue end that launch made */
    _Atomic uint64_t contended_ns;              /* last time samples showed contention */
    _Atomic uint32_t contentions;               /* times contention was seen */
    _Atomic uint64_t burst;         /* 0: at core; else contentions when it began << 1 | 1 */
    _Atomic uint64_t stop_clean_ns; /* clean_ns when bursting last stopped */
    _Atomic uint64_t clear_wait_ns; /* last wait for a clear moment (clear_wait) */
    _Atomic uint64_t clean_ns;      /* last uninflated, unambiguous sample */
};

/* Counters for tests, benches and the debug log (slow paths only). */
struct thr_stats {
    _Atomic uint64_t sampled;       /* launches timed */
    _Atomic uint64_t samples_done;  /* samples collected */
    _Atomic uint64_t samples_lost;  /* samples dropped (event errors) */
    _Atomic uint64_t bucket_sleeps; /* sleeps because the bucket was empty */
    _Atomic uint64_t queue_sleeps;  /* sleeps because the queue was full */
    _Atomic uint64_t queue_forced;  /* launches let through after THR_QUEUE_WAIT_NS */
    _Atomic uint64_t ctx_queries;   /* cuCtxGetCurrent calls (thr_ctx, sample checks) */
    _Atomic uint64_t retries;       /* first tries refused on the coarse clock, tried again */
};

struct thr {
    struct egpu__vcuda_throttle_region *region;
    size_t region_bytes;
    bool region_file; /* false: per-process (anonymous) region */
    bool closed;      /* the shared region could not be used: launches on limited cards refused */
    char path[4096];  /* of the region file */
    dev_t dev;        /* the file mapped, as fstat saw it */
    ino_t ino;
    int (*watch)(void *base, size_t bytes, atomic_uint *faults);
    void (*unwatch)(void *base);
    atomic_uint faults;             /* SIGBUS repairs of the mapping (zeros since) */
    atomic_uint faults_ok;          /* faults when the file was last mapped */
    _Atomic uint64_t next_check_ns; /* look at the file at the first launch after */
    atomic_flag checking;           /* a thread is looking at it */
    atomic_flag warned_region;      /* its trouble was logged at warning level */
    unsigned core_pct;              /* 1..99 while active */
    unsigned limit_pct;             /* core_pct..100 */
    uint64_t core_mul, limit_mul;   /* wall ns per device ns at core / limit, x 2^16, rounded up */
    unsigned cards;
    int card_of_device[EGPU_VCUDA_MAX_CARDS];
    struct egpu__vcuda_throttle_fns fns;
    uint64_t (*clock)(void); /* CLOCK_MONOTONIC ns (tests: their own clock) */
    int32_t pid;
    struct thr_class *classes; /* THR_CLASS_SLOTS, anonymous mapping; NULL: none */
    struct thr_card pc[EGPU_VCUDA_MAX_CARDS];
    struct thr_sample samples[THR_SAMPLE_SLOTS];
    struct thr_stats stats;
    atomic_flag warned_reset;
    atomic_flag warned_queue;
    atomic_flag warned_ctx;
    _Atomic uint64_t ctx_epoch; /* this controller's id for thr_tls; 0: no caching */
};

/* What admission decided for one launch. */
struct thr_admit {
    struct thr_class *k; /* NULL: class table full, or the device could not be read */
    int card;            /* -1: not limited, launch directly */
    uint64_t blocks;
    uint64_t est_ns;    /* estimated span, device ns: for the queue */
    uint64_t dev_ns;    /* estimated device ns without the submission gap: charged */
    uint64_t queue_ns;  /* what it counts for in the queue bound (est_ns, or more when unknown) */
    uint64_t charge_ns; /* wall ns the bucket moved */
    unsigned rate_pct;
    bool learning;        /* class not yet known: time this launch */
    bool force_sample;    /* queue over its bound with nothing in flight: time this launch */
    bool force_queue;     /* waited THR_QUEUE_WAIT_NS: ignore the queue bound */
    uint64_t clear_since; /* first wait for a clear moment, 0 = none */
};

enum thr_wait { THR_WAIT_NONE, THR_WAIT_BUCKET, THR_WAIT_QUEUE };

atomic_bool egpu__vcuda_throttle_active;

static struct thr g_thr = {.warned_reset = ATOMIC_FLAG_INIT,
                           .warned_queue = ATOMIC_FLAG_INIT,
                           .warned_ctx = ATOMIC_FLAG_INIT};

/* The current context of the calling thread as the driver last gave it to
 * the controller whose ctx_epoch is epoch (0: none): see thr_ctx. Epochs
 * come from thr_epochs and are never reused, so a thread's entry never
 * passes for another controller's (tests run several in one thread) or for
 * the parent's after fork. Initial-exec: one load off the thread pointer,
 * no __tls_get_addr call (the library is preloaded; glibc keeps static TLS
 * spare for a small block like this one even when it is dlopen'ed). */
#if defined(__GNUC__)
#define THR_TLS_MODEL __attribute__((tls_model("initial-exec")))
#else
#define THR_TLS_MODEL
#endif
static _Thread_local struct {
    CUcontext ctx;
    uint64_t epoch;
} thr_tls THR_TLS_MODEL;

static _Atomic uint64_t thr_epochs; /* the last epoch handed out */

static uint64_t mono_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* CLOCK_MONOTONIC as of the last timer tick (a few ns to read, at most
 * THR_COARSE_MAX_NS behind), when the system has it that fine; else exact. */
static bool coarse_ok;

static uint64_t coarse_ns(void)
{
    struct timespec ts;

    if (!coarse_ok || clock_gettime(CLOCK_MONOTONIC_COARSE, &ts) != 0)
        return mono_ns();
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull),
                          .tv_nsec = (long)(ns % 1000000000ull)};

    (void)nanosleep(&ts, NULL); /* a signal only shortens the wait: the caller re-checks */
}

/* Whether more than ns passed from then to now. Times read by different
 * threads, some from the coarse clock, may come in either order: a then
 * after now is no time at all. */
static bool elapsed_over(uint64_t now, uint64_t then, uint64_t ns)
{
    return (int64_t)(now - then) > (int64_t)ns;
}

static uint64_t clamp_u64(uint64_t v, uint64_t lo, uint64_t hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

/* ---- The bucket. ---- */

/* Admit a charge of charge_ns wall ns on card at now: returns 0 when taken,
 * else how long to wait (ns, > 0) before the bucket can take it. */
static uint64_t bucket_take(struct thr *t, int card, uint64_t charge_ns, uint64_t now)
{
    _Atomic uint64_t *tat = &t->region->card[card].tat_ns;
    uint64_t cur = atomic_load_explicit(tat, memory_order_relaxed);

    for (;;) {
        uint64_t base;

        if (cur > now + THR_CORRUPT_NS) {
            if (!atomic_flag_test_and_set(&t->warned_reset))
                egpu_log(EGPU_LOG_WARN,
                         "compute bucket out of range, reset card=%d ahead_ms=%llu region=%s", card,
                         (unsigned long long)((cur - now) / 1000000),
                         t->region_file ? "shared" : "process");
            if (atomic_compare_exchange_weak_explicit(tat, &cur, now, memory_order_relaxed,
                                                      memory_order_relaxed))
                cur = now;
            continue;
        }
        if (cur > now + THR_TAU_NS)
            return cur - now - THR_TAU_NS + THR_BATCH_NS;
        base = cur > now ? cur : now;
        if (atomic_compare_exchange_weak_explicit(tat, &cur, base + charge_ns, memory_order_relaxed,
                                                  memory_order_relaxed))
            return 0;
    }
}

/* Charge (delta_ns > 0) or refund (< 0) wall ns on card's bucket. */
static void bucket_adjust(struct thr *t, int card, int64_t delta_ns, uint64_t now)
{
    _Atomic uint64_t *tat = &t->region->card[card].tat_ns;
    uint64_t cur = atomic_load_explicit(tat, memory_order_relaxed);
    uint64_t next;

    if (delta_ns == 0)
        return;
    do {
        if (delta_ns > 0) {
            uint64_t add = (uint64_t)delta_ns;
            uint64_t base = cur > now ? cur : now;

            if (add > THR_MAX_DEBT_NS)
                add = THR_MAX_DEBT_NS;
            next = base + add;
        } else {
            uint64_t sub = (uint64_t)-delta_ns;

            next = cur > sub ? cur - sub : 0;
        }
    } while (!atomic_compare_exchange_weak_explicit(tat, &cur, next, memory_order_relaxed,
                                                    memory_order_relaxed));
}

/* ---- The current context. ---- */

/* The calling thread's current context into *ctx (NULL when the driver
 * cannot say), which keys a launch's kernel class: a CUDA 12 CUkernel may
 * be launched in any context, so the function alone does not name one. The
 * driver is asked once per thread, then only after the thread's context may
 * have changed: the hooked calls that can change it (cuCtxSetCurrent,
 * cuCtxPushCurrent_v2, cuCtxPopCurrent_v2, cuCtxCreate_v2/_v3/_v4,
 * cuCtxDestroy_v2) call egpu__vcuda_throttle_ctx_changed on their way out.
 * A change by a path that is not hooked (the unversioned pre-4.0 entry
 * points) is caught at the thread's next timed launch (ctx_check), which
 * turns the cache off for the process. Returns whether *ctx came from the
 * cache (the driver was not asked). */
static bool thr_ctx(struct thr *t, CUcontext *ctx)
{
    uint64_t ep = atomic_load_explicit(&t->ctx_epoch, memory_order_relaxed);

    if (ep != 0 && thr_tls.epoch == ep) {
        *ctx = thr_tls.ctx;
        return true;
    }
    *ctx = NULL;
    if (t->fns.ctx_get_current == NULL)
        return false;
    atomic_fetch_add_explicit(&t->stats.ctx_queries, 1, memory_order_relaxed);
    if (t->fns.ctx_get_current(ctx) != CUDA_SUCCESS) {
        *ctx = NULL; /* never cached: asked again at the next launch */
        return false;
    }
    if (ep != 0) {
        thr_tls.ctx = *ctx;
        thr_tls.epoch = ep;
    }
    return false;
}

/* A launch about to be timed was classified under the cached context
 * cached: ask the driver (a timed launch makes several driver calls
 * anyway). Returns false when the thread's context had changed behind the
 * hooks: then the cache is off for the process from now on (logged once),
 * and the launch, classified under the wrong context, goes untimed. */
static bool ctx_check(struct thr *t, CUcontext cached)
{
    CUcontext cur;

    atomic_fetch_add_explicit(&t->stats.ctx_queries, 1, memory_order_relaxed);
    if (t->fns.ctx_get_current(&cur) != CUDA_SUCCESS || cur == cached)
        return true; /* a query that fails says nothing new */
    atomic_store_explicit(&t->ctx_epoch, 0, memory_order_relaxed);
    thr_tls.epoch = 0;
    if (!atomic_flag_test_and_set(&t->warned_ctx))
        egpu_log(EGPU_LOG_INFO,
                 "current context changed by a call that is not hooked: asking the driver at "
                 "every launch from now on");
    return false;
}

/* ---- Kernel classes and their estimates. ---- */

/* The limited card of the calling thread's current context: its index, -1
 * when the device is not limited, -2 when the driver could not say. */
static int current_card(const struct thr *t)
{
    CUdevice dev;

    if (t->fns.ctx_get_device(&dev) != CUDA_SUCCESS)
        return -2;
    if (dev < 0 || dev >= EGPU_VCUDA_MAX_CARDS)
        return -1;
    return t->card_of_device[dev];
}

/* Find or add the class of l in ctx; fills a->k and a->card. */
static void thr_classify(struct thr *t, const struct egpu__vcuda_launch *l, CUcontext ctx,
                         struct thr_admit *a)
{
    uint64_t h =
        mix64((uint64_t)(uintptr_t)l->fn ^
              mix64((uint64_t)(uintptr_t)ctx + l->blocks * 0x9e3779b97f4a7c15ull + l->threads));
    int card = -3; /* not read yet */

    memset(a, 0, sizeof(*a));
    a->blocks = l->blocks;
    for (unsigned p = 0; t->classes && p < THR_CLASS_PROBES; p++) {
        struct thr_class *k = &t->classes[(h + p) & (THR_CLASS_SLOTS - 1)];
        uint32_t st = atomic_load_explicit(&k->state, memory_order_acquire);

        if (st == CLASS_EMPTY) {
            if (card == -3)
                card = current_card(t);
            if (card == -2)
                break; /* never cache a failed lookup */
            if (atomic_compare_exchange_strong_explicit(
                    &k->state, &st, CLASS_FILLING, memory_order_acquire, memory_order_acquire)) {
                k->card = card;
                k->fn = l->fn;
                k->ctx = ctx;
                k->blocks = l->blocks;
                k->threads = l->threads;
                atomic_store_explicit(&k->state, CLASS_READY, memory_order_release);
                a->k = k;
                a->card = card;
                return;
            }
            /* another thread took the slot: st holds what it is now */
        }
        if (st == CLASS_READY && k->fn == l->fn && k->ctx == ctx && k->blocks == l->blocks &&
            k->threads == l->threads) {
            a->k = k;
            a->card = k->card;
            return;
        }
    }
    if (card == -3)
        card = current_card(t);
    a->k = NULL;
    a->card = card < 0 ? -1 : card;
}

/* Put m_ns into the sliding minimum win (THR_WIN_N sub-windows) at now;
 * returns the minimum over the last second. */
static uint64_t window_observe(_Atomic uint64_t *win, uint64_t m_ns, uint64_t now)
{
    uint64_t ep = (now >> THR_WIN_SHIFT) & THR_WIN_EP_MASK;
    _Atomic uint64_t *w = &win[(now >> THR_WIN_SHIFT) % THR_WIN_N];
    uint64_t packed, cur, best = UINT64_MAX;

    m_ns = clamp_u64(m_ns, 1, THR_WIN_VAL_MASK); /* never 0: 0 marks empty */
    packed = ep << THR_WIN_VAL_BITS | m_ns;
    cur = atomic_load_explicit(w, memory_order_relaxed);
    do {
        if (cur >> THR_WIN_VAL_BITS == ep && (cur & THR_WIN_VAL_MASK) <= m_ns)
            break;
    } while (!atomic_compare_exchange_weak_explicit(w, &cur, packed, memory_order_relaxed,
                                                    memory_order_relaxed));
    for (unsigned i = 0; i < THR_WIN_N; i++) {
        uint64_t v = atomic_load_explicit(&win[i], memory_order_relaxed);
        uint64_t age = (ep - (v >> THR_WIN_VAL_BITS)) & THR_WIN_EP_MASK;

        if (v != 0 && age < THR_WIN_N && (v & THR_WIN_VAL_MASK) < best) /* 0: never written */
            best = v & THR_WIN_VAL_MASK;
    }
    return best == UINT64_MAX ? m_ns : best; /* UINT64_MAX: the sub-window moved on meanwhile */
}

/* Record a measured span m_ns of class k at now, d_ns without the host's
 * submission gap (d_ns <= m_ns); returns the new span estimate and sets
 * *dev_ns to the new device-time estimate (never above the span's). */
static uint64_t class_observe(struct thr_class *k, uint64_t m_ns, uint64_t d_ns, uint64_t now,
                              uint64_t *dev_ns)
{
    uint64_t best = window_observe(k->win, m_ns, now);
    uint64_t dev = window_observe(k->dwin, d_ns, now);

    if (dev > best)
        dev = best;
    atomic_store_explicit(&k->est_ns, best, memory_order_relaxed);
    atomic_store_explicit(&k->dev_ns, dev, memory_order_relaxed);
    atomic_fetch_add_explicit(&k->samples, 1, memory_order_relaxed);
    *dev_ns = dev;
    return best;
}

static uint64_t est_floor(uint64_t est_ns)
{
    return est_ns < THR_MIN_COST_NS ? THR_MIN_COST_NS : est_ns;
}

/* The span a launches for, before it runs (for the queue), and in *dev_ns
 * the device ns it is charged: the class's estimates once it was timed;
 * before that, this process's device ns per block on the card for both. */
static uint64_t estimate(const struct thr *t, const struct thr_admit *a, uint64_t *dev_ns)
{
    uint64_t est;

    if (a->k && atomic_load_explicit(&a->k->samples, memory_order_relaxed) > 0) {
        *dev_ns = est_floor(atomic_load_explicit(&a->k->dev_ns, memory_order_relaxed));
        return est_floor(atomic_load_explicit(&a->k->est_ns, memory_order_relaxed));
    }
    est = a->blocks * atomic_load_explicit(&t->pc[a->card].nspb_milli, memory_order_relaxed) / 1000;
    *dev_ns = est_floor(est);
    return est_floor(est);
}

/* The rate this process charges card at now: the limit while the card is
 * otherwise idle, else core. Bursting starts when a clear sample came since
 * the last stop, none was late in the last THR_IDLE_HOLD_NS, and the newest
 * is that recent; it stops at the next contention, or when no clear sample
 * came for THR_IDLE_HOLD_NS (then nothing would show contention). */
static unsigned rate_pct(const struct thr *t, struct thr_card *pc, int card, uint64_t now)
{
    uint64_t b, clean, contended, start;

    if (t->limit_pct <= t->core_pct)
        return t->core_pct;
    b = atomic_load_explicit(&pc->burst, memory_order_relaxed);
    clean = atomic_load_explicit(&pc->clean_ns, memory_order_relaxed);
    if (b != 0) {
        if (b >> 1 == atomic_load_explicit(&pc->contentions, memory_order_relaxed) &&
            !elapsed_over(now, clean, THR_IDLE_HOLD_NS))
            return t->limit_pct;
        if (atomic_compare_exchange_strong_explicit(&pc->burst, &b, 0, memory_order_relaxed,
                                                    memory_order_relaxed)) {
            atomic_store_explicit(&pc->stop_clean_ns, clean, memory_order_relaxed);
            egpu_log(EGPU_LOG_DEBUG, "compute rate card=%d rate_pct=%u reason=\"%s\"", card,
                     t->core_pct,
                     b >> 1 != atomic_load_explicit(&pc->contentions, memory_order_relaxed)
                         ? "others' work on the card"
                         : "no clear sample lately");
        }
        return t->core_pct;
    }
    contended = atomic_load_explicit(&pc->contended_ns, memory_order_relaxed);
    if (clean > atomic_load_explicit(&pc->stop_clean_ns, memory_order_relaxed) &&
        !elapsed_over(now, clean, THR_IDLE_HOLD_NS) &&
        (contended == 0 || elapsed_over(now, contended, THR_IDLE_HOLD_NS))) {
        start = (uint64_t)atomic_load_explicit(&pc->contentions, memory_order_relaxed) << 1 | 1;
        if (atomic_compare_exchange_strong_explicit(&pc->burst, &b, start, memory_order_relaxed,
                                                    memory_order_relaxed))
            egpu_log(EGPU_LOG_DEBUG,
                     "compute rate card=%d rate_pct=%u reason=\"card otherwise idle\"", card,
                     t->limit_pct);
        return t->limit_pct;
    }
    return t->core_pct;
}

/* ---- Samples. ---- */

static void sample_drop_events(struct thr *t, struct thr_sample *s)
{
    if (!s->has_events)
        return;
    (void)t->fns.event_destroy(s->start); /* it may belong to a destroyed context */
    (void)t->fns.event_destroy(s->end);
    s->has_events = false;
}

/* Claim a free sample slot (state BUSY, owned by the caller), or NULL. */
static struct thr_sample *sample_claim(struct thr *t)
{
    for (unsigned i = 0; i < THR_SAMPLE_SLOTS; i++) {
        struct thr_sample *s = &t->samples[i];
        uint32_t st = SAMPLE_FREE;

        if (atomic_load_explicit(&s->state, memory_order_relaxed) == SAMPLE_FREE &&
            atomic_compare_exchange_strong_explicit(&s->state, &st, SAMPLE_BUSY,
                                                    memory_order_acquire, memory_order_relaxed))
            return s;
    }
    return NULL;
}

static bool has_free_sample(const struct thr *t)
{
    for (unsigned i = 0; i < THR_SAMPLE_SLOTS; i++)
        if (atomic_load_explicit(&t->samples[i].state, memory_order_relaxed) == SAMPLE_FREE)
            return true;
    return false;
}

/* Idle detection from one collected sample (bursting configured). */
static void idle_observe(struct thr_card *pc, const struct thr_sample *s, uint64_t m_ns,
                         uint64_t est_ns, uint64_t now)
{
    if (!s->clear)
        return; /* it may have waited behind this container's own work */
    if (m_ns > est_ns + est_ns / 4 + THR_INFLATE_NS + s->host_ns) {
        atomic_store_explicit(&pc->contended_ns, now, memory_order_relaxed);
        atomic_fetch_add_explicit(&pc->contentions, 1, memory_order_relaxed);
    } else {
        atomic_store_explicit(&pc->clean_ns, now, memory_order_relaxed);
    }
}

/* The device time in a span of m_ns of sample s at now. When the card ran
 * the start event before the kernel was there (gap_seen: the stream was
 * idle), it then waited for the host to submit the kernel: a launch call of
 * a few microseconds, as long as a short kernel or longer. That wait is not
 * the kernel's and is taken out: the shortest such gap of the class over
 * the last second (a thread preempted inside the launch call, after the
 * kernel was submitted, makes one gap long while the card was busy), and
 * never more than 3/4 of the span (a start event that ran late, behind
 * another container's work, is corrected by at most that). */
static uint64_t device_span(const struct thr_sample *s, uint64_t m_ns, uint64_t now)
{
    uint64_t gap, d;

    if (!s->gap_seen)
        return m_ns;
    gap = s->k ? window_observe(s->k->gwin, s->gap_ns, now) : s->gap_ns;
    d = m_ns > gap ? m_ns - gap : 0;
    if (d < m_ns / 4)
        d = m_ns / 4;
    return est_floor(d);
}

/* A sample s (owned) completed with a span of ms milliseconds. */
static void sample_done(struct thr *t, struct thr_sample *s, float ms, uint64_t now)
{
    struct thr_card *pc = &t->pc[s->card];
    uint64_t m = (uint64_t)((double)ms * 1e6 + 0.5), d, est, dev, done;
    uint32_t known = s->k ? atomic_load_explicit(&s->k->samples, memory_order_relaxed) : 0;

    if (m < THR_MIN_COST_NS)
        m = THR_MIN_COST_NS;
    d = device_span(s, m, now);
    dev = d;
    est = s->k ? class_observe(s->k, m, d, now, &dev) : m;
    if (s->blocks > 0)
        atomic_store_explicit(&pc->nspb_milli, est * 1000 / s->blocks, memory_order_relaxed);
    if (dev != s->charged_ns)
        bucket_adjust(t, s->card, ((int64_t)dev - (int64_t)s->charged_ns) * 100 / s->rate_pct, now);
    done = atomic_load_explicit(&pc->completed_ns, memory_order_relaxed);
    while (done < s->issued_ns &&
           !atomic_compare_exchange_weak_explicit(&pc->completed_ns, &done, s->issued_ns,
                                                  memory_order_relaxed, memory_order_relaxed))
        ;
    if (t->limit_pct > t->core_pct && known >= THR_LEARN)
        idle_observe(pc, s, m, est, now);
    atomic_fetch_add_explicit(&t->stats.samples_done, 1, memory_order_relaxed);
}

/* The calling thread in the relaxed capture mode, and the mode it had. */
struct thr_relaxed {
    CUstreamCaptureMode mode; /* the thread's own, while on */
    bool on;
};

/* Put the calling thread in CU_STREAM_CAPTURE_MODE_RELAXED for the
 * controller's queries (cuEventElapsedTime, cuStreamQuery): in the global
 * mode, such a call from any thread would invalidate a graph capture in
 * progress on another. Without cuThreadExchangeStreamCaptureMode (or when
 * it fails) the thread stays as it is, and rx->on is false. */
static void relaxed_enter(const struct thr *t, struct thr_relaxed *rx)
{
    rx->mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    rx->on =
        t->fns.exchange_capture_mode && t->fns.exchange_capture_mode(&rx->mode) == CUDA_SUCCESS;
}

/* Back to the thread's own mode; does nothing when not in relaxed_enter's. */
static void relaxed_leave(const struct thr *t, struct thr_relaxed *rx)
{
    if (rx->on)
        (void)t->fns.exchange_capture_mode(&rx->mode); /* it was accepted a moment ago */
    rx->on = false;
}

static bool any_pending(const struct thr *t)
{
    for (unsigned i = 0; i < THR_SAMPLE_SLOTS; i++)
        if (atomic_load_explicit(&t->samples[i].state, memory_order_relaxed) == SAMPLE_PENDING)
            return true;
    return false;
}

/* Collect the samples that completed (never blocks), the calling thread in
 * the relaxed capture mode (relaxed_enter). One driver call per pending
 * sample: cuEventElapsedTime, which says CUDA_ERROR_NOT_READY itself until
 * both events have completed (no cuEventQuery before it). */
static void poll_relaxed(struct thr *t, uint64_t now)
{
    for (unsigned i = 0; i < THR_SAMPLE_SLOTS; i++) {
        struct thr_sample *s = &t->samples[i];
        uint32_t st = SAMPLE_PENDING;
        CUresult r;
        float ms = 0;

        if (atomic_load_explicit(&s->state, memory_order_relaxed) != SAMPLE_PENDING ||
            !atomic_compare_exchange_strong_explicit(&s->state, &st, SAMPLE_BUSY,
                                                     memory_order_acquire, memory_order_relaxed))
            continue;
        r = t->fns.event_elapsed_time(&ms, s->start, s->end);
        if (r == CUDA_ERROR_NOT_READY) {
            atomic_store_explicit(&s->state, SAMPLE_PENDING, memory_order_release);
            continue;
        }
        if (r == CUDA_SUCCESS && ms >= 0) {
            sample_done(t, s, ms, now);
        } else {
            sample_drop_events(t, s);
            atomic_fetch_add_explicit(&t->stats.samples_lost, 1, memory_order_relaxed);
        }
        atomic_fetch_sub_explicit(&t->pc[s->card].pending, 1, memory_order_relaxed);
        atomic_store_explicit(&s->state, SAMPLE_FREE, memory_order_release);
    }
}

/* Collect the samples that completed (never blocks), in the relaxed capture
 * mode; no driver call when none is pending. */
static void thr_poll(struct thr *t, uint64_t now)
{
    struct thr_relaxed rx;

    if (!any_pending(t))
        return;
    relaxed_enter(t, &rx);
    poll_relaxed(t, now);
    relaxed_leave(t, &rx);
}

/* Launch l timed by sample s (owned); s goes PENDING, or back to FREE when
 * the events could not be used, the stream's capture status could not be
 * read (the launch goes untimed), or the stream is capturing a graph (then
 * *captured: the launch was recorded into the graph and does not run now,
 * and no event is recorded into the capture). The thread comes in the
 * relaxed capture mode of rx, if at all: whether the stream is idle is asked
 * there (cuStreamQuery: a start event recorded on an idle stream runs at
 * once, and the card then waits for the kernel's submission, which the span
 * holds; without cuStreamQuery the span is taken whole), and the events and
 * the launch go in the thread's own mode. Returns the launch's result. */
static CUresult sample_launch(struct thr *t, struct thr_sample *s,
                              const struct egpu__vcuda_launch *l, CUcontext ctx,
                              const struct thr_admit *a, uint64_t issued, uint64_t now,
                              struct thr_relaxed *rx, bool *captured)
{
    /* A _ptsz launch on stream 0 runs on the thread's default stream: time it
     * there, never on the legacy stream, which would synchronise the others. */
    CUstream stream = l->stream == NULL && l->per_thread ? CU_STREAM_PER_THREAD : l->stream;
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    uint64_t after;
    CUresult rc;

    if (t->fns.stream_is_capturing) {
        rc = t->fns.stream_is_capturing(stream, &status);
        if (rc != CUDA_SUCCESS)
            goto unsampled; /* e.g. the legacy stream beside a capture: no event there */
        if (status != CU_STREAM_CAPTURE_STATUS_NONE) {
            *captured = true;
            goto unsampled;
        }
    }
    if (s->has_events && (s->ctx != ctx || s->card != a->card))
        sample_drop_events(t, s);
    if (!s->has_events) {
        if (t->fns.event_create(&s->start, CU_EVENT_DEFAULT) != CUDA_SUCCESS)
            goto unsampled;
        if (t->fns.event_create(&s->end, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
            (void)t->fns.event_destroy(s->start); /* nothing recorded on it yet */
            goto unsampled;
        }
        s->has_events = true;
        s->ctx = ctx;
        s->card = a->card;
    }
    s->gap_seen = t->fns.stream_query && t->fns.stream_query(stream) == CUDA_SUCCESS;
    relaxed_leave(t, rx);
    s->host_ns = t->clock();
    if (t->fns.event_record(s->start, stream) != CUDA_SUCCESS) {
        sample_drop_events(t, s);
        goto unsampled;
    }
    s->gap_ns = t->clock();
    rc = l->launch(l);
    after = t->clock();
    s->host_ns = after - s->host_ns;
    s->gap_ns = after - s->gap_ns;
    if (rc != CUDA_SUCCESS || t->fns.event_record(s->end, stream) != CUDA_SUCCESS) {
        if (rc == CUDA_SUCCESS)
            sample_drop_events(t, s);
        atomic_store_explicit(&s->state, SAMPLE_FREE, memory_order_release);
        return rc;
    }
    s->k = a->k;
    s->blocks = a->blocks;
    s->charged_ns = a->dev_ns;
    s->issued_ns = issued;
    s->launch_ns = now;
    s->rate_pct = a->rate_pct;
    if (s->clear && a->k)
        atomic_store_explicit(&a->k->clear_ns, now, memory_order_relaxed);
    atomic_fetch_add_explicit(&t->pc[a->card].pending, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&t->stats.sampled, 1, memory_order_relaxed);
    atomic_store_explicit(&s->state, SAMPLE_PENDING, memory_order_release);
    return rc;

unsampled:
    relaxed_leave(t, rx);
    atomic_store_explicit(&s->state, SAMPLE_FREE, memory_order_release);
    return l->launch(l);
}

/* ---- Admission. ---- */

/* Whether nothing of the container's is queued on card ahead of a launch on
 * stream at now but this process's own earlier work on the same stream. */
static bool queue_clear(const struct thr *t, const struct thr_card *pc, int card, CUstream stream,
                        uint64_t now)
{
    uint64_t cur = atomic_load_explicit(&t->region->card[card].queue_end_ns, memory_order_relaxed);

    return cur <= now ||
           (cur == atomic_load_explicit(&pc->last_end_ns, memory_order_relaxed) &&
            atomic_load_explicit(&pc->last_stream, memory_order_relaxed) == (uintptr_t)stream);
}

/* A class without a clear sample for THR_CLEAR_STALE_NS (its spans all held
 * other processes' or streams' work, which would inflate its estimate) waits
 * up to THR_CLEAR_WAIT_NS for a moment when the container's queue is clear,
 * and is timed then; one such wait per process and card per
 * THR_CLEAR_STALE_NS / 4, so they cost at most 5% of its time. Returns 0 or
 * the ns to wait. */
static uint64_t clear_wait(struct thr *t, struct thr_admit *a, CUstream stream, uint64_t now)
{
    struct thr_card *pc = &t->pc[a->card];
    uint64_t cur;

    if (!a->k || a->learning || a->clear_since == UINT64_MAX ||
        !elapsed_over(now, atomic_load_explicit(&a->k->clear_ns, memory_order_relaxed),
                      THR_CLEAR_STALE_NS) ||
        queue_clear(t, pc, a->card, stream, now))
        return 0;
    if (a->clear_since == 0) {
        cur = atomic_load_explicit(&pc->clear_wait_ns, memory_order_relaxed);
        if (!elapsed_over(now, cur, THR_CLEAR_STALE_NS / 4) ||
            !atomic_compare_exchange_strong_explicit(&pc->clear_wait_ns, &cur, now,
                                                     memory_order_relaxed, memory_order_relaxed))
            return 0; /* another class of this process waited lately */
        a->clear_since = now;
    } else if (elapsed_over(now, a->clear_since, THR_CLEAR_WAIT_NS)) {
        a->clear_since = UINT64_MAX; /* no clear moment came: go on, try again later */
        atomic_store_explicit(&a->k->clear_ns, now, memory_order_relaxed);
        return 0;
    }
    cur = atomic_load_explicit(&t->region->card[a->card].queue_end_ns, memory_order_relaxed);
    return clamp_u64(cur - now, THR_SLEEP_MIN_NS, THR_SLEEP_MAX_NS);
}

/* The wall ns the bucket moves for dev_ns of device time at rate_pct (core
 * or limit): dev_ns x 100 / rate, with a multiplication on the launch path
 * instead of a 64-bit division (tens of cycles); rounded up by at most
 * 2^-16 of the charge. dev_ns is below 2^40 (a span), so nothing overflows. */
static uint64_t wall_charge(const struct thr *t, uint64_t dev_ns, unsigned rate_pct)
{
    uint64_t mul = rate_pct == t->core_pct ? t->core_mul : t->limit_mul;

    if (dev_ns >= 1ull << 40)
        return THR_MAX_DEBT_NS;
    return (dev_ns * mul) >> 16;
}

/* Try to admit a (classified, limited) at now: returns 0 and charges the
 * bucket, or the ns to wait with *why saying for what. */
static uint64_t thr_try(struct thr *t, struct thr_admit *a, CUstream l_stream, uint64_t now,
                        enum thr_wait *why)
{
    struct thr_card *pc = &t->pc[a->card];
    uint64_t issued, done, out, wait;

    a->est_ns = estimate(t, a, &a->dev_ns);
    /* A class never timed counts as the whole queue bound in the queue, so
     * that at most two launches of an unknown kernel are in flight; the
     * bucket is charged the estimate, corrected when the first one is timed. */
    a->queue_ns = a->k && atomic_load_explicit(&a->k->samples, memory_order_relaxed) == 0 &&
                          a->est_ns < THR_QUEUE_NS
                      ? THR_QUEUE_NS
                      : a->est_ns;
    a->learning = a->k && atomic_load_explicit(&a->k->samples, memory_order_relaxed) < THR_LEARN;
    if (!a->force_queue) {
        issued = atomic_load_explicit(&pc->issued_ns, memory_order_relaxed);
        done = atomic_load_explicit(&pc->completed_ns, memory_order_relaxed);
        out = issued > done ? issued - done : 0;
        if (out > (a->queue_ns > THR_QUEUE_NS ? a->queue_ns : THR_QUEUE_NS)) {
            if (atomic_load_explicit(&pc->pending, memory_order_relaxed) > 0) {
                /* Until the excess should have run, or the container's
                 * queue should be done if sooner (unknown kernels count as
                 * more in the bound than they are estimated to take). */
                uint64_t end = atomic_load_explicit(&t->region->card[a->card].queue_end_ns,
                                                    memory_order_relaxed);

                wait = out - THR_QUEUE_NS;
                if (end > now && end - now < wait)
                    wait = end - now;
                else if (end <= now)
                    wait = THR_SLEEP_MIN_NS;
                *why = THR_WAIT_QUEUE;
                return clamp_u64(wait, THR_SLEEP_MIN_NS, THR_SLEEP_MAX_NS);
            }
            a->force_sample = true; /* nothing in flight can tell: time this one */
        }
        if (a->learning && !has_free_sample(t)) {
            *why = THR_WAIT_QUEUE;
            return THR_SLEEP_MIN_NS;
        }
        wait = clear_wait(t, a, l_stream, now);
        if (wait) {
            *why = THR_WAIT_QUEUE;
            return wait;
        }
    }
    a->rate_pct = rate_pct(t, pc, a->card, now);
    a->charge_ns = wall_charge(t, a->dev_ns, a->rate_pct);
    if (a->charge_ns > THR_MAX_DEBT_NS)
        a->charge_ns = THR_MAX_DEBT_NS;
    wait = bucket_take(t, a->card, a->charge_ns, now);
    if (wait)
        *why = THR_WAIT_BUCKET;
    return wait;
}

/* Move the container's estimated queue end on card past a launch of est_ns
 * at now. Returns the queue end before it; *own: that end was this
 * process's own last launch, on the same stream (nothing of the rest of the
 * container's is queued after it). */
static uint64_t queue_extend(struct thr *t, struct thr_card *pc, int card, CUstream stream,
                             uint64_t est_ns, uint64_t now, bool *own)
{
    _Atomic uint64_t *qe = &t->region->card[card].queue_end_ns;
    uint64_t cur = atomic_load_explicit(qe, memory_order_relaxed), next;

    do {
        uint64_t base = cur > now && cur < now + THR_CORRUPT_NS ? cur : now;

        next = base + est_ns;
    } while (!atomic_compare_exchange_weak_explicit(qe, &cur, next, memory_order_relaxed,
                                                    memory_order_relaxed));
    *own = cur == atomic_load_explicit(&pc->last_end_ns, memory_order_relaxed) &&
           atomic_load_explicit(&pc->last_stream, memory_order_relaxed) == (uintptr_t)stream;
    atomic_store_explicit(&pc->last_end_ns, next, memory_order_relaxed);
    atomic_store_explicit(&pc->last_stream, (uintptr_t)stream, memory_order_relaxed);
    return cur;
}

/* Issue the admitted launch a: time it when due, call it, account for it.
 * Timed: every launch of a class being learned, one per THR_SAMPLE_NS of
 * work, preferably a clear one (at most 3 x THR_SAMPLE_NS late), and a clear
 * one per class every THR_CLEAR_NS, which keeps the minimum filter fed with
 * spans that hold no one else's work. */
static CUresult thr_issue(struct thr *t, const struct egpu__vcuda_launch *l, CUcontext ctx,
                          bool ctx_cached, const struct thr_admit *a, uint64_t now)
{
    struct thr_card *pc = &t->pc[a->card];
    uint64_t issued =
        atomic_fetch_add_explicit(&pc->issued_ns, a->queue_ns, memory_order_relaxed) + a->queue_ns;
    uint64_t due = atomic_load_explicit(&pc->next_sample_ns, memory_order_relaxed);
    bool own;
    uint64_t ahead = queue_extend(t, pc, a->card, l->stream, a->est_ns, now, &own);
    bool clear = ahead <= now || own;
    /* Without a class (the table is full) the launch was charged its blocks
     * at the ns per block of the last sample, another kernel's, whose waves
     * fill the card's SMs otherwise: an error that grows with the SM count
     * (docs/vcuda.md, "Large GPUs"). Its own span corrects it, wherever a
     * sample slot is free (no wait for one). */
    bool sample = a->learning || a->force_sample || !a->k, captured = false;
    struct thr_relaxed rx = {.on = false};
    struct thr_sample *s = NULL;
    CUresult rc;

    if (issued >= due && (clear || issued >= due + 3 * THR_SAMPLE_NS)) {
        sample = true;
        /* THR_SAMPLE_NS of device work: issued counts spans, which hold the
         * submission gap of short kernels (est_ns / dev_ns <= 4). */
        atomic_store_explicit(&pc->next_sample_ns, issued + THR_SAMPLE_NS * a->est_ns / a->dev_ns,
                              memory_order_relaxed);
    } else if (clear && a->k &&
               elapsed_over(now, atomic_load_explicit(&a->k->clear_ns, memory_order_relaxed),
                            THR_CLEAR_NS)) {
        sample = true;
    }
    if (sample && ctx_cached && !ctx_check(t, ctx))
        sample = false; /* classified under a context that is not current */
    if (sample) {
        /* One relaxed window for the samples' collection and the stream's
         * query (sample_launch leaves it before the events and the launch). */
        if (t->fns.stream_query || any_pending(t))
            relaxed_enter(t, &rx);
        poll_relaxed(t, now);
        s = sample_claim(t);
    }
    if (s) {
        s->clear = clear;
        rc = sample_launch(t, s, l, ctx, a, issued, now, &rx, &captured);
    } else {
        relaxed_leave(t, &rx);
        rc = l->launch(l);
    }
    if (rc != CUDA_SUCCESS || captured) { /* nothing runs now: give back what was charged */
        bucket_adjust(t, a->card, -(int64_t)a->charge_ns, now);
        atomic_fetch_sub_explicit(&pc->issued_ns, a->queue_ns, memory_order_relaxed);
    }
    return rc;
}

/* A launch on its way through admission. */
struct thr_step {
    struct thr_admit a;
    CUcontext ctx;
    bool ctx_cached;      /* ctx came from thr_tls, not from the driver */
    uint64_t queue_since; /* first wait for the queue, 0 = none yet */
    bool classified;
};

/* Advance launch l (state p, zeroed for a new launch) at now: returns 0 once
 * l was issued (its result in *rc), else how long to sleep before the next
 * step (ns). Never blocks. */
static uint64_t thr_step(struct thr *t, const struct egpu__vcuda_launch *l, struct thr_step *p,
                         uint64_t now, CUresult *rc)
{
    enum thr_wait why = THR_WAIT_NONE;
    bool polled = false;
    uint64_t wait;

    if (!p->classified) {
        p->ctx_cached = thr_ctx(t, &p->ctx);
        thr_classify(t, l, p->ctx, &p->a);
        p->classified = true;
        if (p->a.card < 0) {
            *rc = l->launch(l);
            return 0;
        }
    }
    while ((wait = thr_try(t, &p->a, l->stream, now, &why)) != 0) {
        if (why == THR_WAIT_QUEUE) {
            if (p->queue_since == 0) {
                p->queue_since = now;
            } else if (elapsed_over(now, p->queue_since, THR_QUEUE_WAIT_NS)) {
                p->a.force_queue = true;
                atomic_fetch_add_explicit(&t->stats.queue_forced, 1, memory_order_relaxed);
                if (!atomic_flag_test_and_set(&t->warned_queue))
                    egpu_log(EGPU_LOG_INFO,
                             "device queue did not drain, launching anyway card=%d waited_ms=%llu",
                             p->a.card, (unsigned long long)((now - p->queue_since) / 1000000));
                continue;
            }
        }
        if (!polled) { /* completed samples may change the answer */
            thr_poll(t, now);
            polled = true;
            continue;
        }
        atomic_fetch_add_explicit(why == THR_WAIT_QUEUE ? &t->stats.queue_sleeps
                                                        : &t->stats.bucket_sleeps,
                                  1, memory_order_relaxed);
        return clamp_u64(wait, THR_SLEEP_MIN_NS, THR_SLEEP_MAX_NS);
    }
    *rc = thr_issue(t, l, p->ctx, p->ctx_cached, &p->a, now);
    return 0;
}

/* Admit (sleeping while over the share or the queue bound), then issue.
 * The first try reads the coarse clock: a clock behind the true time only
 * makes the bucket look fuller (a refused launch is retried at once with the
 * exact clock) and, on a bucket left idle, dates the new charges up to a
 * tick early. */
static void region_check(struct thr *t, uint64_t now);

static CUresult thr_launch(struct thr *t, const struct egpu__vcuda_launch *l)
{
    struct thr_step p;
    CUresult rc = CUDA_SUCCESS;
    uint64_t wait, now = coarse_ns();
    bool exact = !coarse_ok;

    /* The region file: due for a look, or the mapping took a fault. */
    if (t->closed)
        return current_card(t) == -1 ? l->launch(l) : CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
    if (t->region_file && (now >= atomic_load_explicit(&t->next_check_ns, memory_order_relaxed) ||
                           atomic_load_explicit(&t->faults, memory_order_relaxed) !=
                               atomic_load_explicit(&t->faults_ok, memory_order_relaxed)))
        region_check(t, now);
    memset(&p, 0, sizeof(p));
    while ((wait = thr_step(t, l, &p, now, &rc)) != 0) {
        if (exact)
            sleep_ns(wait);
        else
            atomic_fetch_add_explicit(&t->stats.retries, 1, memory_order_relaxed);
        exact = true;
        now = mono_ns();
    }
    return rc;
}

/* ---- Setting up. ---- */

static void region_init(struct egpu__vcuda_throttle_region *r, const struct thr *t)
{
    memset(r, 0, sizeof(*r));
    r->version = THR_VERSION;
    r->bytes = (uint32_t)sizeof(*r);
    r->core_pct = t->core_pct;
    r->core_limit_pct = t->limit_pct;
    atomic_thread_fence(memory_order_release);
    r->magic = THR_MAGIC;
}

static bool region_valid(const struct egpu__vcuda_throttle_region *r)
{
    return r->magic == THR_MAGIC && r->version == THR_VERSION && r->bytes == sizeof(*r);
}

/* Map t->path, creating or re-initialising it under flock: a new mapping
 * (at = NULL, watched for SIGBUS when t can), or over the current one (at =
 * t->region, MAP_FIXED: threads using it see the old pages or the new ones,
 * never a hole). An empty file is new unless again (it was mapped before:
 * it was truncated). A file re-initialised is logged, or, with reinit, why
 * is left in *reinit for the caller to say (else *reinit = NULL). Returns
 * the mapping or NULL with errno set (reason logged by the caller). */
static struct egpu__vcuda_throttle_region *region_map_file(struct thr *t,
                                                           struct egpu__vcuda_throttle_region *at,
                                                           bool again, const char **reinit)
{
    const char *why = NULL;
    struct egpu__vcuda_throttle_region *r;
    struct stat sb;
    int fd, saved, rc;

    /* The directory is the container's: a symlink, FIFO, device or hard
     * link planted at the name is refused, never followed or written. */
    fd = open(t->path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0666);
    if (fd < 0)
        return NULL;
    if (fstat(fd, &sb) != 0)
        goto fail;
    if (!S_ISREG(sb.st_mode) || sb.st_nlink != 1) {
        errno = S_ISREG(sb.st_mode) ? EMLINK : EINVAL;
        goto fail;
    }
    if (flock(fd, LOCK_EX) != 0 || fstat(fd, &sb) != 0)
        goto fail;
    if ((size_t)sb.st_size < sizeof(*r) && ftruncate(fd, (off_t)sizeof(*r)) != 0)
        goto fail;
    r = mmap(at, sizeof(*r), PROT_READ | PROT_WRITE, MAP_SHARED | (at ? MAP_FIXED : 0), fd, 0);
    if (r == MAP_FAILED)
        goto fail;
    if (at == NULL && t->watch != NULL) {
        rc = t->watch(r, sizeof(*r), &t->faults);
        if (rc != 0)
            egpu_log(EGPU_LOG_WARN,
                     "compute region not protected against truncation (a truncated file would "
                     "kill this process) path=%s err=\"%s\"",
                     t->path, strerror(-rc));
    }
    if (sb.st_size == 0 && !again) {
        region_init(r, t); /* new */
    } else if ((size_t)sb.st_size < sizeof(*r) || !region_valid(r)) {
        why = (size_t)sb.st_size < sizeof(*r) ? "truncated" : "of another layout or corrupted";
        if (reinit == NULL)
            egpu_log(EGPU_LOG_WARN, "compute region %s, re-initialised path=%s bytes=%lld", why,
                     t->path, (long long)sb.st_size);
        region_init(r, t);
    }
    if (reinit != NULL)
        *reinit = why;
    t->dev = sb.st_dev;
    t->ino = sb.st_ino;
    (void)flock(fd, LOCK_UN); /* closing releases it too */
    close(fd);
    return r;

fail:
    saved = errno;
    close(fd);
    errno = saved;
    return NULL;
}

/* Trouble with the region file is logged at warning level once per
 * process, later at debug level (another process may be at it in a loop). */
static int region_level(struct thr *t)
{
    return atomic_flag_test_and_set(&t->warned_region) ? EGPU_LOG_DEBUG : EGPU_LOG_WARN;
}

/* Look at the region file at now (a launch found it due, or the mapping
 * faulted): when it was truncated (the mapping faulted, or the file is
 * short), replaced or deleted, map it again over the current mapping,
 * re-initialising it when it is short or bad. One thread at a time; the
 * others go on with the mapping as it is (zeros after a fault: a bucket
 * with nothing charged, until this one is done). */
static void region_check(struct thr *t, uint64_t now)
{
    unsigned faults;
    const char *why = NULL;
    bool gone = false; /* the file mapped is no longer at the path */
    struct stat st;
    int level;

    if (atomic_flag_test_and_set_explicit(&t->checking, memory_order_acquire))
        return;
    atomic_store_explicit(&t->next_check_ns, now + THR_CHECK_NS, memory_order_relaxed);
    faults = atomic_load_explicit(&t->faults, memory_order_acquire);
    if (faults != atomic_load_explicit(&t->faults_ok, memory_order_relaxed))
        why = "truncated under this process";
    else if ((gone = stat(t->path, &st) != 0))
        why = "deleted";
    else if ((gone = st.st_dev != t->dev || st.st_ino != t->ino))
        why = "replaced";
    else if ((size_t)st.st_size < sizeof(struct egpu__vcuda_throttle_region))
        why = "truncated";
    if (why != NULL) {
        const char *reinit = NULL;

        level = region_level(t);
        /* an empty file there is new when the one mapped is gone */
        if (region_map_file(t, t->region, !gone, &reinit) != NULL) {
            atomic_store_explicit(&t->faults_ok, faults, memory_order_release);
            egpu_log(level, "compute region %s, mapped again%s%s path=%s", why,
                     reinit ? ", re-initialised: " : "", reinit ? reinit : "", t->path);
        } else {
            egpu_log(level,
                     "compute region %s, cannot be mapped again: kept as it is path=%s err=\"%s\"",
                     why, t->path, strerror(errno));
        }
    }
    atomic_flag_clear_explicit(&t->checking, memory_order_release);
}

static int config_check(const struct egpu__vcuda_throttle_config *cfg)
{
    const struct egpu__vcuda_throttle_fns *f;
    unsigned limit;

    if (cfg == NULL) {
        egpu_log(EGPU_LOG_ERROR, "compute limit off: no configuration");
        return -EINVAL;
    }
    f = &cfg->fns;
    limit = cfg->core_limit_pct ? cfg->core_limit_pct : cfg->core_pct;
    if (cfg->core_pct < 1 || cfg->core_pct > 100) {
        egpu_log(EGPU_LOG_ERROR, "compute limit off: bad core=%u (allowed 1..100 percent)",
                 cfg->core_pct);
        return -EINVAL;
    }
    if (limit < cfg->core_pct || limit > 100) {
        egpu_log(EGPU_LOG_ERROR,
                 "compute limit off: bad core_limit=%u (allowed core..100 percent, core=%u)",
                 cfg->core_limit_pct, cfg->core_pct);
        return -EINVAL;
    }
    if (cfg->cards < 1 || cfg->cards > EGPU_VCUDA_MAX_CARDS) {
        egpu_log(EGPU_LOG_ERROR, "compute limit off: bad cards=%u (allowed 1..%d)", cfg->cards,
                 EGPU_VCUDA_MAX_CARDS);
        return -EINVAL;
    }
    for (int i = 0; i < EGPU_VCUDA_MAX_CARDS; i++) {
        if (cfg->card_of_device[i] < -1 || cfg->card_of_device[i] >= (int)cfg->cards) {
            egpu_log(EGPU_LOG_ERROR,
                     "compute limit off: bad card_of_device[%d]=%d (allowed -1..%u)", i,
                     cfg->card_of_device[i], cfg->cards - 1);
            return -EINVAL;
        }
    }
    if (!f->ctx_get_device || !f->event_create || !f->event_record || !f->event_elapsed_time ||
        !f->event_destroy) {
        egpu_log(EGPU_LOG_ERROR, "compute limit off: a driver entry point is missing (fns)");
        return -EINVAL;
    }
    return 0;
}

static void thr_close(struct thr *t)
{
    for (unsigned i = 0; i < THR_SAMPLE_SLOTS; i++)
        if (t->fns.event_destroy)
            sample_drop_events(t, &t->samples[i]);
    if (t->region && t->region_file && t->unwatch)
        t->unwatch(t->region);
    if (t->region)
        munmap(t->region, t->region_bytes);
    if (t->classes)
        munmap(t->classes, THR_CLASS_SLOTS * sizeof(*t->classes));
    memset(t, 0, sizeof(*t));
}

/* Set t up from cfg (t zeroed or closed). Returns 0 or -EINVAL. */
static int thr_open(struct thr *t, const struct egpu__vcuda_throttle_config *cfg)
{
    void *p;
    int rc;

    memset(t, 0, sizeof(*t));
    atomic_flag_clear(&t->warned_reset);
    atomic_flag_clear(&t->warned_queue);
    atomic_flag_clear(&t->checking);
    atomic_flag_clear(&t->warned_region);
    atomic_flag_clear(&t->warned_ctx);
    atomic_store(&t->ctx_epoch, atomic_fetch_add(&thr_epochs, 1) + 1);
    rc = config_check(cfg);
    if (rc)
        return rc;
    t->core_pct = cfg->core_pct;
    t->limit_pct = cfg->core_limit_pct ? cfg->core_limit_pct : cfg->core_pct;
    t->core_mul = ((100ull << 16) + t->core_pct - 1) / t->core_pct;
    t->limit_mul = ((100ull << 16) + t->limit_pct - 1) / t->limit_pct;
    t->cards = cfg->cards;
    memcpy(t->card_of_device, cfg->card_of_device, sizeof(t->card_of_device));
    t->fns = cfg->fns;
    t->watch = cfg->watch;
    t->unwatch = cfg->unwatch;
    t->clock = mono_ns;
    t->pid = (int32_t)getpid();
    if (t->core_pct >= 100)
        return 0; /* nothing to hold */
    if (cfg->dir) {
        if ((size_t)snprintf(t->path, sizeof(t->path), "%s/vcuda-core.shm", cfg->dir) >=
            sizeof(t->path))
            errno = ENAMETOOLONG;
        else
            t->region = region_map_file(t, NULL, false, NULL);
        if (t->region) {
            t->region_file = true;
        } else {
            /* No per-process bucket instead: N processes would get N times
             * the share. Fail closed. */
            egpu_log(EGPU_LOG_ERROR,
                     "compute region %s unusable (%s): failing closed, every launch on the "
                     "limited cards gets CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
                     t->path[0] ? t->path : cfg->dir,
                     errno == EMLINK   ? "a hard link"
                     : errno == EINVAL ? "not a regular file"
                     : errno == ELOOP  ? "a symbolic link"
                                       : strerror(errno));
            t->closed = true;
            return 0;
        }
    }
    if (!t->region) { /* shared with children forked later: they are the same container */
        p = mmap(NULL, sizeof(struct egpu__vcuda_throttle_region), PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            egpu_log(EGPU_LOG_ERROR, "compute limit off: no memory for its region err=\"%s\"",
                     strerror(errno));
            return -ENOMEM;
        }
        t->region = p;
        region_init(t->region, t);
    }
    t->region_bytes = sizeof(struct egpu__vcuda_throttle_region);
    atomic_store(&t->next_check_ns, mono_ns() + THR_CHECK_NS);
    p = mmap(NULL, THR_CLASS_SLOTS * sizeof(*t->classes), PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    t->classes = p == MAP_FAILED ? NULL : p; /* without it every launch uses the default cost */
    return 0;
}

/* ---- The interface. ---- */

int egpu__vcuda_throttle_init(const struct egpu__vcuda_throttle_config *cfg)
{
    struct timespec res;
    int rc;

    coarse_ok = clock_getres(CLOCK_MONOTONIC_COARSE, &res) == 0 && res.tv_sec == 0 &&
                (uint64_t)res.tv_nsec <= THR_COARSE_MAX_NS;
    atomic_store(&egpu__vcuda_throttle_active, false);
    thr_close(&g_thr);
    rc = thr_open(&g_thr, cfg);
    if (rc == 0 && g_thr.core_pct < 100)
        atomic_store(&egpu__vcuda_throttle_active, true);
    return rc;
}

CUresult egpu__vcuda_throttle_launch(const struct egpu__vcuda_launch *l)
{
    if (!atomic_load_explicit(&egpu__vcuda_throttle_active, memory_order_relaxed))
        return l->launch(l);
    return thr_launch(&g_thr, l);
}

void egpu__vcuda_throttle_stats(struct egpu__vcuda_throttle_stats *out)
{
    const struct thr_stats *s = &g_thr.stats;

    out->sampled = atomic_load_explicit(&s->sampled, memory_order_relaxed);
    out->samples_done = atomic_load_explicit(&s->samples_done, memory_order_relaxed);
    out->samples_lost = atomic_load_explicit(&s->samples_lost, memory_order_relaxed);
    out->bucket_sleeps = atomic_load_explicit(&s->bucket_sleeps, memory_order_relaxed);
    out->queue_sleeps = atomic_load_explicit(&s->queue_sleeps, memory_order_relaxed);
    out->queue_forced = atomic_load_explicit(&s->queue_forced, memory_order_relaxed);
    out->ctx_queries = atomic_load_explicit(&s->ctx_queries, memory_order_relaxed);
    out->retries = atomic_load_explicit(&s->retries, memory_order_relaxed);
}

void egpu__vcuda_throttle_ctx_changed(void)
{
    thr_tls.epoch = 0;
}

void egpu__vcuda_throttle_atfork_child(void)
{
    struct thr *t = &g_thr;

    t->pid = (int32_t)getpid();
    atomic_flag_clear(&t->checking);     /* a parent's thread may have been looking */
    if (atomic_load(&t->ctx_epoch) != 0) /* the parent's contexts are not the child's */
        atomic_store(&t->ctx_epoch, atomic_fetch_add(&thr_epochs, 1) + 1);
    memset(t->pc, 0, sizeof(t->pc));
    memset(t->samples, 0, sizeof(t->samples)); /* the parent's events are not ours */
    memset(&t->stats, 0, sizeof(t->stats));
    if (t->classes &&
        mmap(t->classes, THR_CLASS_SLOTS * sizeof(*t->classes), PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
        memset(t->classes, 0, THR_CLASS_SLOTS * sizeof(*t->classes));
}
