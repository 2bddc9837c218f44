/* tests/unit/test_vcuda_throttle.c - the interposer's compute limit
 * (src/vcuda/throttle.c), included whole so its internals can be driven.
 *
 * Three kinds of test:
 *   - a simulated card in virtual time: the controller's non-blocking step
 *     (thr_step) is driven by an event loop for several simulated processes
 *     and containers on one card whose model is the mock driver's (one kernel
 *     at a time, start = max(now, card busy, stream's last end), events
 *     stamped with the stream's last end; with sim.sms, a grid runs in waves
 *     of that many blocks, as the mock's EGPU_MOCK_CUDA_SMS). Shares are exact functions of the
 *     code, not of the machine's load, so they are asserted to 1 point;
 *   - the real-time path (sleeping, threads, fork) against the same model
 *     driven by CLOCK_MONOTONIC, with loose bounds;
 *   - the mock driver (<build>/tests/mock/cuda/libcuda.so.1, loaded with
 *     dlopen; skipped when it is not built, as in the sanitizer build).
 */
#include "../../src/vcuda/throttle.c" /* first: it sets the feature macros */

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/wait.h>

#include "testutil.h"
#include "vcuda_int.h" /* the SIGBUS guard (sigbus.c) */

/* ---- The simulated card. ---- */

#define SIM_PROCS  8
#define SIM_EVENTS 1024
#define SIM_T0     1000000000ull /* virtual time starts at 1 s */
#define MS         1000000ull
#define SEC        1000000000ull

struct sim_proc {
    struct thr *t;
    int owner;         /* container, for the accounting */
    uint64_t nspb;     /* device ns per block of its kernel */
    uint64_t blocks;   /* grid of its kernel */
    uint64_t next_ns;  /* when it acts next */
    uint64_t start_ns; /* it launches within [start_ns, stop_ns) */
    uint64_t stop_ns;
    uint64_t stream_end;
    uint64_t launches;
    uint64_t max_wait_ns;  /* longest a kernel of it waited for the card after its launch */
    bool new_kernels;      /* every launch is of a kernel never seen before */
    uint64_t hiccup_every; /* every so many launches, the host is 1 ms late between the
                              timing event and the launch (0: never) */
    uint64_t submit_ns;    /* host time of a launch call; the kernel reaches the card at its
                              end, as a real driver's does (0: at once) */
    uint64_t late_every;   /* every so many launches, the host is 1 ms late inside the launch
                              call after the kernel reached the card (0: never) */
    uint64_t think_ns;     /* host time between launches beyond the loop's 4-9 us (0: none) */
    uint64_t blocks2;      /* every other launch is of this grid (and its own class; 0: never) */
    uint64_t nodes;        /* a graph: each launch is cuGraphLaunch of this many kernel nodes
                              of the process's grid (0: a kernel) */
    struct thr_step step;
    struct egpu__vcuda_launch l;
};

struct sim_event {
    bool live;
    bool recorded;
    uint64_t stamp;
};

static struct {
    bool realtime; /* clock: CLOCK_MONOTONIC (threads) instead of virtual */
    uint64_t now;
    uint64_t busy_until;
    uint64_t sms; /* streaming multiprocessors: blocks run this many at a time (0: one) */
    uint64_t win_from, win_to;
    uint64_t busy[SIM_PROCS]; /* per owner, inside the window */
    int nproc;
    struct sim_proc p[SIM_PROCS];
    struct sim_event ev[SIM_EVENTS];
    int events_live;
    pthread_mutex_t mu; /* real-time mode: threads share the card */
} sim = {.mu = PTHREAD_MUTEX_INITIALIZER};

static _Thread_local int sim_cur;      /* the simulated process making driver calls */
static uint64_t sim_jitter_ns = 80000; /* spread of the sleeps' lateness */

static uint64_t sim_now(void)
{
    return sim.realtime ? mono_ns() : sim.now;
}

static uint64_t max_u64(uint64_t a, uint64_t b)
{
    return a > b ? a : b;
}

static CUresult sim_ctx_get_device(CUdevice *dev)
{
    *dev = 0;
    return CUDA_SUCCESS;
}

static CUresult sim_ctx_get_current(CUcontext *ctx)
{
    *ctx = (CUcontext)(uintptr_t)(0x1000 + sim_cur);
    return CUDA_SUCCESS;
}

static struct sim_event *sim_ev(CUevent e)
{
    uintptr_t i = (uintptr_t)e;

    return i >= 1 && i <= SIM_EVENTS && sim.ev[i - 1].live ? &sim.ev[i - 1] : NULL;
}

static CUresult sim_event_create(CUevent *e, unsigned flags)
{
    (void)flags;
    pthread_mutex_lock(&sim.mu);
    for (int i = 0; i < SIM_EVENTS; i++) {
        if (!sim.ev[i].live) {
            sim.ev[i] = (struct sim_event){.live = true};
            sim.events_live++;
            *e = (CUevent)(uintptr_t)(i + 1);
            pthread_mutex_unlock(&sim.mu);
            return CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&sim.mu);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult sim_event_destroy(CUevent e)
{
    struct sim_event *ev;

    pthread_mutex_lock(&sim.mu);
    ev = sim_ev(e);
    if (ev) {
        ev->live = false;
        sim.events_live--;
    }
    pthread_mutex_unlock(&sim.mu);
    return ev ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* Streams are the simulated processes: handle 0x100 + index. */
static struct sim_proc *sim_stream(CUstream s)
{
    uintptr_t i = (uintptr_t)s - 0x100;

    return i < SIM_PROCS ? &sim.p[i] : NULL;
}

static CUresult sim_event_record(CUevent e, CUstream s)
{
    struct sim_event *ev;
    struct sim_proc *p = sim_stream(s);

    pthread_mutex_lock(&sim.mu);
    ev = sim_ev(e);
    if (ev && p) {
        ev->recorded = true;
        ev->stamp = max_u64(sim_now(), p->stream_end);
    }
    pthread_mutex_unlock(&sim.mu);
    return ev && p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static CUresult sim_stream_query(CUstream s)
{
    struct sim_proc *p = sim_stream(s);

    if (!p)
        return CUDA_ERROR_INVALID_HANDLE;
    return sim_now() >= p->stream_end ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

static CUresult sim_event_elapsed(float *ms, CUevent a, CUevent b)
{
    struct sim_event *ea = sim_ev(a), *eb = sim_ev(b);

    if (!ea || !eb || !ea->recorded || !eb->recorded)
        return CUDA_ERROR_INVALID_HANDLE;
    if (sim_now() < eb->stamp)
        return CUDA_ERROR_NOT_READY;
    *ms = (float)((double)((int64_t)(eb->stamp - ea->stamp)) / 1e6);
    return CUDA_SUCCESS;
}

static uint64_t overlap(uint64_t a, uint64_t b, uint64_t lo, uint64_t hi)
{
    uint64_t s = max_u64(a, lo), e = b < hi ? b : hi;

    return e > s ? e - s : 0;
}

/* Device time of a kernel of blocks (sim.sms of them at a time) at nspb a
 * block or wave, times the graph's nodes. */
static uint64_t sim_cost(const struct sim_proc *p, uint64_t blocks)
{
    uint64_t waves = sim.sms ? (blocks + sim.sms - 1) / sim.sms : blocks;

    return waves * p->nspb * (p->nodes ? p->nodes : 1);
}

/* The launch: the card runs one kernel (or graph) at a time, in launch order. */
static CUresult sim_launch(const struct egpu__vcuda_launch *l)
{
    struct sim_proc *p = l->ctx;
    uint64_t now, start, end, grid = p->blocks2 && p->launches % 2 ? p->blocks2 : p->blocks;

    pthread_mutex_lock(&sim.mu);
    now = sim_now();
    if (p->hiccup_every && p->launches % p->hiccup_every == p->hiccup_every - 1)
        now = sim.now += MS; /* the thread was preempted after recording the start event */
    if (!sim.realtime)
        now = sim.now += p->submit_ns; /* the card sees the kernel at the call's end */
    start = max_u64(max_u64(now, sim.busy_until), p->stream_end);
    end = start + sim_cost(p, grid);
    sim.busy_until = end;
    p->stream_end = end;
    p->launches++;
    if (start - now > p->max_wait_ns && now >= sim.win_from)
        p->max_wait_ns = start - now;
    sim.busy[p->owner] += overlap(start, end, sim.win_from, sim.win_to);
    if (!sim.realtime && p->late_every && p->launches % p->late_every == 0)
        sim.now += MS; /* preempted inside the call, the kernel already on the card */
    pthread_mutex_unlock(&sim.mu);
    return CUDA_SUCCESS;
}

static const struct egpu__vcuda_throttle_fns sim_fns = {
    .ctx_get_device = sim_ctx_get_device,
    .event_create = sim_event_create,
    .event_record = sim_event_record,
    .event_elapsed_time = sim_event_elapsed,
    .event_destroy = sim_event_destroy,
    .ctx_get_current = sim_ctx_get_current,
    .stream_query = sim_stream_query,
};

static char tmp_root[] = "/tmp/egpu-throttle-XXXXXX";

static int setup(void **state)
{
    (void)state;
    if (!mkdtemp(tmp_root))
        return -1;
    egpu_log_level = EGPU_LOG_ERROR;
    return 0;
}

static int teardown(void **state)
{
    char cmd[256];

    (void)state;
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp_root);
    return system(cmd) == 0 ? 0 : -1;
}

/* A container's directory under the test's temporary root. */
static const char *cdir(int container)
{
    static char dirs[4][300];

    snprintf(dirs[container], sizeof(dirs[container]), "%s/c%d", tmp_root, container);
    (void)mkdir(dirs[container], 0700); /* exists from an earlier test: fine */
    return dirs[container];
}

static struct egpu__vcuda_throttle_config sim_config(int container, unsigned core, unsigned limit)
{
    struct egpu__vcuda_throttle_config cfg = {
        .dir = cdir(container), .core_pct = core, .core_limit_pct = limit, .cards = 1};

    for (int i = 0; i < EGPU_VCUDA_MAX_CARDS; i++)
        cfg.card_of_device[i] = i == 0 ? 0 : -1;
    cfg.fns = sim_fns;
    return cfg;
}

static void sim_reset(void)
{
    for (int i = 0; i < sim.nproc; i++) {
        thr_close(sim.p[i].t);
        free(sim.p[i].t);
    }
    assert_int_equal(sim.events_live, 0); /* every event the controller made is gone */
    memset(sim.p, 0, sizeof(sim.p));
    memset(sim.busy, 0, sizeof(sim.busy));
    sim.nproc = 0;
    sim.now = SIM_T0;
    sim.busy_until = 0;
    sim.sms = 0;
    sim.realtime = false;
    sim.win_from = sim.win_to = UINT64_MAX; /* nothing counted before sim_window */
}

/* Add a process of container owner (its region in cdir(owner), a fresh
 * bucket when it is the container's first) launching a kernel of blocks x
 * nspb device ns, saturating, within [start, stop). */
static struct sim_proc *sim_add(int owner, unsigned core, unsigned limit, uint64_t blocks,
                                uint64_t nspb, uint64_t start, uint64_t stop)
{
    struct egpu__vcuda_throttle_config cfg = sim_config(owner, core, limit);
    struct sim_proc *p = &sim.p[sim.nproc];
    bool first = true;

    for (int i = 0; i < sim.nproc; i++)
        first = first && sim.p[i].owner != owner;
    if (first) { /* a new container: a fresh region file */
        char path[400];

        snprintf(path, sizeof(path), "%s/vcuda-core.shm", cfg.dir);
        (void)unlink(path); /* left by an earlier test, or absent */
    }
    p->t = calloc(1, sizeof(*p->t));
    assert_non_null(p->t);
    assert_int_equal(thr_open(p->t, &cfg), 0);
    p->t->pid = 1000 + sim.nproc; /* processes apart, as getpid() would make them */
    p->t->clock = sim_now;
    p->owner = owner;
    p->blocks = blocks;
    p->nspb = nspb;
    p->start_ns = SIM_T0 + start;
    p->stop_ns = SIM_T0 + stop;
    p->next_ns = p->start_ns;
    p->l = (struct egpu__vcuda_launch){.blocks = blocks,
                                       .threads = 256,
                                       .fn = (CUfunction)(uintptr_t)(0x5000 + 16 * sim.nproc),
                                       .stream = (CUstream)(uintptr_t)(0x100 + sim.nproc),
                                       .launch = sim_launch,
                                       .ctx = p};
    sim.nproc++;
    return p;
}

/* Run every process until virtual time end (offset from SIM_T0). Each
 * process keeps a launch ready (saturating): 4-9 us of host time after each
 * launch, 40-120 us more than asked for each sleep (a loaded machine's timer). */
static void sim_run(uint64_t end)
{
    uint64_t rng = 42;

    end += SIM_T0;
    for (;;) {
        struct sim_proc *p = NULL;
        uint64_t wait;
        CUresult rc = CUDA_SUCCESS;

        for (int i = 0; i < sim.nproc; i++)
            if (sim.p[i].next_ns < sim.p[i].stop_ns && (!p || sim.p[i].next_ns < p->next_ns))
                p = &sim.p[i];
        if (!p || p->next_ns >= end)
            break;
        sim.now = p->next_ns;
        sim_cur = (int)(p - sim.p);
        wait = thr_step(p->t, &p->l, &p->step, sim.now, &rc);
        assert_int_equal(rc, CUDA_SUCCESS);
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        if (wait) {
            p->next_ns = sim.now + wait + 40000 + (rng >> 33) % sim_jitter_ns;
        } else {
            memset(&p->step, 0, sizeof(p->step));
            p->next_ns = sim.now + 4000 + (rng >> 33) % 5000 + p->think_ns;
            if (p->new_kernels)
                p->l.fn = (CUfunction)((uintptr_t)p->l.fn + 0x100000);
            if (p->blocks2 && !p->nodes) { /* the next launch's grid, and class */
                p->l.blocks = p->launches % 2 ? p->blocks2 : p->blocks;
                p->l.fn = (CUfunction)((uintptr_t)p->l.fn ^ 0x8);
            }
        }
    }
    sim.now = end;
}

/* Share of owner in percent over the window. */
static double sim_share(int owner)
{
    double share = 100.0 * (double)sim.busy[owner] / (double)(sim.win_to - sim.win_from);

    if (getenv("EGPU_TEST_VERBOSE")) {
        fprintf(stderr, "owner %d share %.2f%%\n", owner, share);
        for (int i = 0; i < sim.nproc; i++) {
            struct thr *t = sim.p[i].t;

            if (sim.p[i].owner != owner)
                continue;
            fprintf(stderr,
                    "  proc %d launches=%llu sampled=%llu done=%llu lost=%llu bucket_sleeps=%llu "
                    "queue_sleeps=%llu forced=%llu max_wait_us=%llu est=%llu true=%llu\n",
                    i, (unsigned long long)sim.p[i].launches,
                    (unsigned long long)atomic_load(&t->stats.sampled),
                    (unsigned long long)atomic_load(&t->stats.samples_done),
                    (unsigned long long)atomic_load(&t->stats.samples_lost),
                    (unsigned long long)atomic_load(&t->stats.bucket_sleeps),
                    (unsigned long long)atomic_load(&t->stats.queue_sleeps),
                    (unsigned long long)atomic_load(&t->stats.queue_forced),
                    (unsigned long long)sim.p[i].max_wait_ns / 1000,
                    (unsigned long long)(sim.p[i].step.a.k ? atomic_load(&sim.p[i].step.a.k->est_ns)
                                                           : 0),
                    (unsigned long long)sim_cost(&sim.p[i], sim.p[i].blocks));
        }
    }
    return share;
}

static void sim_window(uint64_t from, uint64_t to)
{
    sim.win_from = SIM_T0 + from;
    sim.win_to = SIM_T0 + to;
    memset(sim.busy, 0, sizeof(sim.busy));
}

#define assert_share(got, want, tol)                                                          \
    do {                                                                                      \
        double got_ = (got), want_ = (want);                                                  \
        if (got_ < want_ - (tol) || got_ > want_ + (tol))                                     \
            fail_msg("share %.2f%%, want %.2f%% +- %.1f (%s:%d)", got_, want_, (double)(tol), \
                     __FILE__, __LINE__);                                                     \
    } while (0)

/* ---- Tests. ---- */

static int count_lines(const char *text)
{
    int lines = 0;

    for (const char *c = text; *c; c++)
        lines += *c == '\n';
    return lines;
}

/* Each bad field is refused with -EINVAL and one log line naming it. */
static void test_config_rejected(void **state)
{
    struct egpu__vcuda_throttle_config cfg = sim_config(0, 30, 0);
    struct egpu__vcuda_throttle_config bad;
    char *text = NULL;
    size_t len = 0;
    FILE *log = open_memstream(&text, &len);

    (void)state;
    assert_non_null(log);
    egpu_log_set_stream(log);
    bad = cfg, bad.core_pct = 0;
    assert_int_equal(egpu__vcuda_throttle_init(&bad), -EINVAL);
    assert_false(atomic_load(&egpu__vcuda_throttle_active));
    bad = cfg, bad.core_pct = 101;
    assert_int_equal(egpu__vcuda_throttle_init(&bad), -EINVAL);
    bad = cfg, bad.core_limit_pct = 20; /* below core */
    assert_int_equal(egpu__vcuda_throttle_init(&bad), -EINVAL);
    bad = cfg, bad.core_limit_pct = 101;
    assert_int_equal(egpu__vcuda_throttle_init(&bad), -EINVAL);
    bad = cfg, bad.cards = 0;
    assert_int_equal(egpu__vcuda_throttle_init(&bad), -EINVAL);
    bad = cfg, bad.cards = EGPU_VCUDA_MAX_CARDS + 1;
    assert_int_equal(egpu__vcuda_throttle_init(&bad), -EINVAL);
    bad = cfg, bad.card_of_device[3] = 1; /* only card 0 exists */
    assert_int_equal(egpu__vcuda_throttle_init(&bad), -EINVAL);
    bad = cfg, bad.fns.event_elapsed_time = NULL;
    assert_int_equal(egpu__vcuda_throttle_init(&bad), -EINVAL);
    assert_int_equal(egpu__vcuda_throttle_init(NULL), -EINVAL);
    assert_false(atomic_load(&egpu__vcuda_throttle_active));
    egpu_log_set_stream(NULL);
    fclose(log);
    assert_non_null(strstr(text, "bad core=0 (allowed 1..100 percent)"));
    assert_non_null(strstr(text, "bad core=101"));
    assert_non_null(strstr(text, "bad core_limit=20 (allowed core..100 percent, core=30)"));
    assert_non_null(strstr(text, "bad core_limit=101"));
    assert_non_null(strstr(text, "bad cards=0"));
    assert_non_null(strstr(text, "bad cards=17"));
    assert_non_null(strstr(text, "bad card_of_device[3]=1 (allowed -1..0)"));
    assert_non_null(strstr(text, "a driver entry point is missing"));
    assert_non_null(strstr(text, "no configuration"));
    assert_int_equal(count_lines(text), 9);
    free(text);
    /* 100% holds nothing: the wrappers keep the fast path. */
    bad = cfg, bad.core_pct = 100;
    assert_int_equal(egpu__vcuda_throttle_init(&bad), 0);
    assert_false(atomic_load(&egpu__vcuda_throttle_active));
    /* ctx_get_current is optional. */
    bad = cfg, bad.fns.ctx_get_current = NULL;
    assert_int_equal(egpu__vcuda_throttle_init(&bad), 0);
    assert_true(atomic_load(&egpu__vcuda_throttle_active));
    assert_int_equal(egpu__vcuda_throttle_init(&cfg), 0);
    assert_true(atomic_load(&egpu__vcuda_throttle_active));
    thr_close(&g_thr);
    atomic_store(&egpu__vcuda_throttle_active, false);
}

/* One process saturating the card is held to its share. */
static void test_sim_one_process(void **state)
{
    static const unsigned targets[] = {10, 30, 50, 90};

    (void)state;
    for (unsigned i = 0; i < 4; i++) {
        sim_reset();
        sim_add(0, targets[i], 0, 100, 1000, 0, 12 * SEC); /* 100 us kernels */
        sim_window(2 * SEC, 12 * SEC);
        sim_run(12 * SEC);
        assert_share(sim_share(0), targets[i], 1.0);
        /* Nothing queued far ahead: a kernel starts within about the queue bound. */
        assert_true(sim.p[0].max_wait_ns <= 3 * MS);
    }
    sim_reset();
}

/* Four processes of one container share one bucket. */
static void test_sim_four_processes(void **state)
{
    static const unsigned targets[] = {10, 30, 50, 90};

    (void)state;
    for (unsigned i = 0; i < 4; i++) {
        sim_reset();
        for (int j = 0; j < 4; j++) /* different kernels: 50..200 us */
            sim_add(0, targets[i], 0, 50 * (uint64_t)(j + 1), 1000, 0, 12 * SEC);
        sim_window(2 * SEC, 12 * SEC);
        sim_run(12 * SEC);
        assert_share(sim_share(0), targets[i], 1.0);
    }
    sim_reset();
}

/* Two containers, 10% and 90%, both saturating one card. */
static void test_sim_two_containers(void **state)
{
    (void)state;
    sim_reset();
    sim_add(0, 10, 0, 100, 1000, 0, 12 * SEC);
    sim_add(1, 90, 0, 300, 1000, 0, 12 * SEC);
    sim_window(2 * SEC, 12 * SEC);
    sim_run(12 * SEC);
    assert_share(sim_share(0), 10, 1.0);
    assert_share(sim_share(1), 90, 1.0);
    /* The same with the kernel sizes the other way round. */
    sim_reset();
    sim_add(0, 10, 0, 1000, 1000, 0, 12 * SEC);
    sim_add(1, 90, 0, 50, 1000, 0, 12 * SEC);
    sim_window(2 * SEC, 12 * SEC);
    sim_run(12 * SEC);
    assert_share(sim_share(0), 10, 1.0);
    assert_share(sim_share(1), 90, 1.0);
    sim_reset();
}

/* core 20, limit 80: alone it bursts to 80; once a 50% container saturates
 * the card too it falls back to 20, and it bursts again when that one left. */
static void test_sim_burst(void **state)
{
    (void)state;
    sim_reset();
    sim_add(0, 20, 80, 100, 1000, 0, 15 * SEC);
    sim_add(1, 50, 0, 200, 1000, 5 * SEC, 10 * SEC);
    sim_window(1 * SEC, 5 * SEC);
    sim_run(5 * SEC);
    assert_share(sim_share(0), 80, 2.0);
    sim_window(5500 * MS, 10 * SEC); /* the first 500 ms: the reaction */
    sim_run(10 * SEC);
    assert_share(sim_share(0), 20, 1.0);
    assert_share(sim_share(1), 50, 1.0);
    sim_window(11 * SEC, 15 * SEC);
    sim_run(15 * SEC);
    assert_share(sim_share(0), 80, 2.0);
    sim_reset();
}

/* Two processes of one container burst too: they wait for clear moments to
 * time their kernels, and see no one else. */
static void test_sim_burst_two_processes(void **state)
{
    (void)state;
    sim_reset();
    sim_add(0, 20, 80, 100, 1000, 0, 6 * SEC);
    sim_add(0, 20, 80, 300, 1000, 0, 6 * SEC);
    sim_window(2 * SEC, 6 * SEC);
    sim_run(6 * SEC);
    assert_share(sim_share(0), 80, 2.0);
    sim_reset();
}

/* A thread preempted between the start event and the launch makes one late
 * sample: that alone is not contention, the burst goes on. */
static void test_sim_burst_host_hiccups(void **state)
{
    struct sim_proc *p;

    (void)state;
    sim_reset();
    p = sim_add(0, 20, 80, 100, 1000, 0, 6 * SEC);
    p->hiccup_every = 50;
    sim_window(2 * SEC, 6 * SEC);
    sim_run(6 * SEC);
    assert_share(sim_share(0), 80, 2.0);
    sim_reset();
}

/* Kernels shorter than a launch call (an H100 charged a 30% container of 1 us
 * kernels 45% of the card and ran it at 67% of its speed): 1 us kernels whose
 * launch call takes the host 4 us, with 6.5 us of other host work between
 * launches: unthrottled the card is busy about 9% of the time. The start
 * event runs on an idle stream at once and the card then waits for the
 * kernel's submission, so each span is about 5 us for 1 us of device time:
 * taken whole, a 30% container would be charged about 47% and slowed to two
 * thirds of its speed, as an H100 showed (200,000 x.add_(1) at 67%). Under
 * its share, it must run as fast as with no limit. */
static const struct thr_class *sim_class(const struct sim_proc *p)
{
    for (unsigned i = 0; p->t->classes && i < THR_CLASS_SLOTS; i++)
        if (atomic_load(&p->t->classes[i].state) == CLASS_READY && p->t->classes[i].fn == p->l.fn)
            return &p->t->classes[i];
    return NULL;
}

static struct sim_proc *sim_tiny(unsigned core, bool stream_query)
{
    struct sim_proc *p;

    sim_reset();
    p = sim_add(0, core, 0, 1, 1000, 0, 4 * SEC); /* 1 us kernels */
    p->submit_ns = 4000;
    if (!stream_query)
        p->t->fns.stream_query = NULL;
    sim_window(1 * SEC, 4 * SEC);
    sim_run(4 * SEC);
    return p;
}

static void test_sim_tiny_kernels_not_slowed(void **state)
{
    double free_share;
    uint64_t free_launches;
    const struct thr_class *k;
    struct sim_proc *p;

    (void)state;
    p = sim_tiny(99, true); /* no limit reached at 99% */
    free_share = sim_share(0);
    free_launches = p->launches;
    assert_true(free_share > 7.0 && free_share < 12.0); /* the workload is as described */
    p = sim_tiny(30, true);
    assert_true((double)p->launches >= 0.97 * (double)free_launches);
    assert_share(sim_share(0), free_share, 0.3);
    /* The charge is the device time, about 1 us a launch, not the 5 us span. */
    k = sim_class(p);
    assert_non_null(k);
    assert_true(atomic_load(&k->dev_ns) <= 1300);
    assert_true(atomic_load(&k->est_ns) >= 4500);
    /* Timed every 200 us of device work, not of spans: one launch in about
     * 200, so the timing calls (about 4 us on an H200) cost a tiny kernel
     * little. */
    assert_true(atomic_load(&p->t->stats.sampled) * 100 < p->launches);
    /* Without cuStreamQuery the span is charged whole: the loop is slowed,
     * as it was on the H100. */
    p = sim_tiny(30, false);
    assert_true((double)p->launches < 0.8 * (double)free_launches);
    sim_reset();
}

/* The same short kernels, many: a loop that would use 60% of the card at
 * 30% is still held to 30%, the submission gap taken out or not. */
static void test_sim_tiny_kernels_held(void **state)
{
    struct sim_proc *p;

    (void)state;
    sim_reset();
    p = sim_add(0, 30, 0, 8, 1000, 0, 6 * SEC); /* 8 us kernels, 4 us submission */
    p->submit_ns = 4000;
    sim_window(2 * SEC, 6 * SEC);
    sim_run(6 * SEC);
    assert_share(sim_share(0), 30, 1.0);
    sim_reset();
}

/* A thread preempted inside the launch call after the kernel reached the
 * card makes that sample's gap long while the card was busy: the class's
 * shortest gap is taken out, not that one, so the share holds. */
static void test_sim_late_inside_launch(void **state)
{
    struct sim_proc *p;

    (void)state;
    sim_reset();
    p = sim_add(0, 30, 0, 100, 1000, 0, 6 * SEC);
    p->submit_ns = 4000;
    p->late_every = 7;
    sim_window(2 * SEC, 6 * SEC);
    sim_run(6 * SEC);
    assert_share(sim_share(0), 30, 1.0);
    sim_reset();
}

/* Processes woken together by the bucket launch in the same order each time
 * (no jitter): the later ones' samples always hold the earlier ones' work,
 * and only the waits for clear moments keep their estimates right. */
static void test_sim_lockstep(void **state)
{
    (void)state;
    sim_reset();
    sim_jitter_ns = 1;
    for (int j = 0; j < 4; j++)
        sim_add(0, 90, 0, 50 * (uint64_t)(j + 1), 1000, 0, 8 * SEC);
    sim_window(2 * SEC, 8 * SEC);
    sim_run(8 * SEC);
    sim_jitter_ns = 80000;
    assert_share(sim_share(0), 90, 1.0);
    sim_reset();
}

/* How fast a burst gives way: the newcomer's share over its first 100 ms. */
static void test_sim_burst_reaction(void **state)
{
    (void)state;
    sim_reset();
    sim_add(0, 10, 100, 100, 1000, 0, 3 * SEC);
    sim_add(1, 60, 0, 100, 1000, 2 * SEC, 3 * SEC);
    sim_window(2 * SEC, 2100 * MS);
    sim_run(3 * SEC);
    assert_true(sim_share(1) > 50.0); /* the newcomer got its 60% nearly at once */
    sim_reset();
}

/* One run of the large-GPU cases on a card of sms SMs: the share of
 * container 0 at core, over 2..12 s. The kernels' device time is by waves
 * of sms blocks (a grid of 1000 is 8 waves on 132 SMs, 6 on 188), so a
 * controller that estimated or charged by blocks, or corrected by the SM
 * count, would drift from one card to the other. */
static double sim_large_gpu(uint64_t sms, unsigned core, int kind)
{
    struct sim_proc *p;

    sim_reset();
    sim.sms = sms;
    switch (kind) {
    case 0: /* one process, one kernel: 1000 blocks, 100 us a wave */
        sim_add(0, core, 0, 1000, 100000, 0, 12 * SEC);
        break;
    case 1: /* four processes, grids of 1 to 19 waves */
        for (int j = 0; j < 4; j++) {
            static const uint64_t grids[] = {100, 300, 1000, 2500};

            sim_add(0, core, 0, grids[j], 20000, 0, 12 * SEC);
        }
        break;
    case 2: /* kernels never seen before, alternating 100 and 2500 blocks: each
             * charged first by its blocks at the ns per block of the last
             * sample, often the other grid's (1 wave of 100 blocks, 19 or 14
             * of 2500: the error grows with the SM count); past the 4,096
             * classes of the table, with no class to learn */
        p = sim_add(0, core, 0, 100, 50000, 0, 12 * SEC);
        p->blocks2 = 2500;
        p->new_kernels = true;
        break;
    default: /* a graph of 10 kernel nodes of 1000 blocks (cuGraphLaunch) */
        p = sim_add(0, core, 0, 1000, 20000, 0, 12 * SEC);
        p->nodes = 10;
        p->l.blocks = 1; /* as launch.c describes a graph launch */
        p->l.threads = 0;
        p->l.fn = (CUfunction)(uintptr_t)0x9000;
        break;
    }
    sim_window(2 * SEC, 12 * SEC);
    sim_run(12 * SEC);
    if (kind == 2) /* the table filled: most launches found no class */
        assert_true(sim.p[0].launches > THR_CLASS_SLOTS + THR_CLASS_SLOTS / 2);
    return sim_share(0);
}

/* Cards of 132 (H100 SXM) and 188 SMs (the peers' "correction that grows
 * with the SM count"): a share holds to 1 point on both, as on the 108 of
 * the other tests, for single and mixed kernels, kernels never seen
 * before, and graphs; and the two cards give the same share within 1
 * point. The controller never reads the SM count: it charges measured
 * device time. Before launches without a class were timed whenever a
 * sample slot was free, case 2 at 50% got 50.47% on 132 SMs and 51.34% on
 * 188 (their blocks-based estimates went uncorrected). */
static void test_sim_large_gpus(void **state)
{
    static const unsigned cores[] = {30, 50};

    (void)state;
    for (int kind = 0; kind < 4; kind++) {
        for (unsigned c = 0; c < 2; c++) {
            double a = sim_large_gpu(132, cores[c], kind), b = sim_large_gpu(188, cores[c], kind);

            if (getenv("EGPU_TEST_VERBOSE"))
                fprintf(stderr, "kind %d core %u: 132 SMs %.2f%%, 188 SMs %.2f%%\n", kind, cores[c],
                        a, b);
            assert_share(a, cores[c], 1.0);
            assert_share(b, cores[c], 1.0);
            assert_share(a, b, 1.0);
        }
    }
    sim_reset();
}

/* An unknown kernel is learned from its first launches: a costly kernel at
 * 10% is not let through on a default estimate. */
static void test_sim_learns_unknown_kernel(void **state)
{
    (void)state;
    sim_reset();
    sim_add(0, 10, 0, 20000, 1000, 0, 2 * SEC); /* 20 ms per launch */
    sim_window(0, 2 * SEC);
    sim_run(2 * SEC);
    /* The bucket's burst (25 ms x 10%) and one launch in the queue are all it may get ahead. */
    assert_true(sim_share(0) <= 10.0 + 100.0 * (2.5 + 20) / 2000);
    assert_share(sim_share(0), 10, 2.0);
    assert_true(sim.p[0].t->classes != NULL);
    sim_reset();
}

/* Many kernels seen once each (a program starting up) are not held back
 * waiting to learn each one: 500 launches of 10 us at 10% take about the
 * 50 ms their device time is worth, not a sleep each. */
static void test_sim_many_new_kernels(void **state)
{
    struct sim_proc *p;

    (void)state;
    sim_reset();
    p = sim_add(0, 10, 0, 10, 1000, 0, 10 * SEC);
    p->new_kernels = true;
    while (p->launches < 500 && sim.now < SIM_T0 + 10 * SEC)
        sim_run(sim.now - SIM_T0 + MS);
    assert_true(p->launches >= 500);
    assert_true(sim.now - SIM_T0 <= 150 * MS);
    sim_reset();
}

/* A kernel that becomes three times as costly: the estimate follows. */
static void test_sim_kernel_gets_slower(void **state)
{
    (void)state;
    sim_reset();
    sim_add(0, 30, 0, 100, 1000, 0, 12 * SEC);
    sim_run(2 * SEC);
    sim.p[0].nspb = 3000;
    sim_window(2 * SEC, 12 * SEC);
    sim_run(12 * SEC);
    /* At most the filter's second of 3x under-charging: +(2 x 0.3 s)/10 s. */
    assert_true(sim_share(0) <= 30.0 + 6.5);
    sim_reset();
}

/* The same, measured after the filter forgot the old cost. */
static void test_sim_kernel_gets_slower_settles(void **state)
{
    (void)state;
    sim_reset();
    sim_add(0, 30, 0, 100, 1000, 0, 12 * SEC);
    sim_run(2 * SEC);
    sim.p[0].nspb = 3000;
    sim_run(4 * SEC);
    sim_window(4 * SEC, 12 * SEC);
    sim_run(12 * SEC);
    assert_share(sim_share(0), 30, 1.0);
    sim_reset();
}

/* A bucket that arithmetic cannot produce (a corrupted region) is reset;
 * launches go on instead of sleeping for ever. */
static void test_sim_corrupted_bucket(void **state)
{
    struct sim_proc *p;

    (void)state;
    sim_reset();
    p = sim_add(0, 50, 0, 100, 1000, 0, 3 * SEC);
    sim_run(SEC);
    atomic_store(&p->t->region->card[0].tat_ns, sim.now + 3600 * SEC);
    sim_window(1500 * MS, 3 * SEC);
    sim_run(3 * SEC);
    assert_share(sim_share(0), 50, 2.0);
    sim_reset();
}

/* Graph capture: another thread captures in global mode, in which any
 * thread's cuEventQuery outside the relaxed mode would invalidate it. */
static _Thread_local int capture_mode; /* CUstreamCaptureMode: 0 global, 2 relaxed */
static bool capture_global, capture_broken;
static CUstream capturing_stream = (CUstream)(uintptr_t)0x7777;

static CUresult capture_exchange(int *mode)
{
    int old = capture_mode;

    capture_mode = *mode;
    *mode = old;
    return CUDA_SUCCESS;
}

static CUresult capture_status(CUstream stream, int *status)
{
    *status = stream == capturing_stream; /* CU_STREAM_CAPTURE_STATUS_ACTIVE */
    return CUDA_SUCCESS;
}

/* The controller's queries of the device's progress: made outside the
 * relaxed mode while another thread captures in global mode, they would
 * invalidate that capture. */
static void capture_unsafe_call(void)
{
    if (capture_global && capture_mode != 2)
        capture_broken = true;
}

static CUresult capture_event_elapsed(float *ms, CUevent a, CUevent b)
{
    capture_unsafe_call();
    return sim_event_elapsed(ms, a, b);
}

static CUresult capture_stream_query(CUstream s)
{
    capture_unsafe_call();
    return sim_stream_query(s);
}

/* The controller's queries (cuEventElapsedTime, cuStreamQuery)
 * never break another thread's capture, and leave the thread's capture mode
 * as they found it. */
static void test_capture_queries_relaxed(void **state)
{
    struct sim_proc *p;

    (void)state;
    sim_reset();
    p = sim_add(0, 50, 0, 100, 1000, 0, SEC);
    p->t->fns.event_elapsed_time = capture_event_elapsed;
    p->t->fns.stream_query = capture_stream_query;
    p->t->fns.exchange_capture_mode = capture_exchange;
    capture_global = true;
    capture_broken = false;
    capture_mode = 0;
    sim_run(200 * MS);
    assert_true(atomic_load(&p->t->stats.samples_done) > 0);
    assert_false(capture_broken);
    assert_int_equal(capture_mode, 0);
    /* Without the exchange entry point it cannot help it (the test can fail). */
    p->t->fns.exchange_capture_mode = NULL;
    sim_run(400 * MS);
    assert_true(capture_broken);
    capture_global = false;
    sim_reset();
}

/* A launch into a capture is recorded in a graph, not run: when the
 * controller would time it, it records no event on the capturing stream and
 * charges nothing. */
static void test_capture_launch_not_charged(void **state)
{
    struct sim_proc *p;
    CUresult rc = CUDA_ERROR_UNKNOWN;

    (void)state;
    sim_reset();
    p = sim_add(0, 10, 0, 1000, 1000, 0, SEC); /* 1 ms kernels at 10%: 10 ms of bucket each */
    p->t->fns.stream_is_capturing = capture_status;
    p->l.stream = capturing_stream;
    sim_cur = 0;
    for (int i = 0; i < 10; i++) { /* a class never timed: every launch would be timed */
        memset(&p->step, 0, sizeof(p->step));
        assert_int_equal(thr_step(p->t, &p->l, &p->step, sim.now, &rc), 0);
        assert_int_equal(rc, CUDA_SUCCESS);
    }
    assert_int_equal(atomic_load(&p->t->stats.sampled), 0);
    assert_true(atomic_load(&p->t->region->card[0].tat_ns) <= sim.now);
    assert_int_equal(atomic_load(&p->t->pc[0].issued_ns), 0);
    sim_reset();
}

static CUstream recorded_stream;

static CUresult record_stream(CUevent e, CUstream s)
{
    (void)e;
    recorded_stream = s;
    return CUDA_SUCCESS;
}

/* A _ptsz launch on stream 0 is timed on the thread's default stream
 * (CU_STREAM_PER_THREAD), a plain one on stream 0 itself. */
static void test_per_thread_stream(void **state)
{
    struct sim_proc *p;
    CUresult rc = CUDA_ERROR_UNKNOWN;

    (void)state;
    sim_reset();
    p = sim_add(0, 50, 0, 10, 1000, 0, SEC);
    p->t->fns.event_record = record_stream;
    p->l.stream = NULL;
    p->l.per_thread = true;
    sim_cur = 0;
    recorded_stream = (CUstream)(uintptr_t)0x99;
    assert_int_equal(thr_step(p->t, &p->l, &p->step, sim.now, &rc), 0); /* learning: timed */
    assert_int_equal(rc, CUDA_SUCCESS);
    assert_ptr_equal(recorded_stream, CU_STREAM_PER_THREAD);
    memset(&p->step, 0, sizeof(p->step));
    p->l.per_thread = false;
    assert_int_equal(thr_step(p->t, &p->l, &p->step, sim.now, &rc), 0);
    assert_ptr_equal(recorded_stream, NULL);
    p->t->fns.event_record = sim_event_record;
    sim_reset();
}

/* The region file: created, shared by a second mapping, re-initialised when
 * truncated or corrupted, and a directory that cannot hold it leaves each
 * process on its own bucket. */
/* A launch the controller must not make (it failed closed). */
static CUresult refuse_launch(const struct egpu__vcuda_launch *l)
{
    (void)l;
    fail_msg("a launch went through a closed controller");
    return CUDA_ERROR_UNKNOWN;
}

static void test_region_file(void **state)
{
    struct egpu__vcuda_throttle_config cfg = sim_config(2, 40, 0);
    struct thr *a = calloc(1, sizeof(*a)), *b = calloc(1, sizeof(*b));
    char path[400], *text = NULL;
    size_t len = 0;
    FILE *f, *log = open_memstream(&text, &len);

    (void)state;
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(log);
    egpu_log_set_stream(log);
    egpu_log_level = EGPU_LOG_WARN;
    snprintf(path, sizeof(path), "%s/vcuda-core.shm", cfg.dir);
    (void)unlink(path);
    assert_int_equal(thr_open(a, &cfg), 0);
    assert_true(a->region_file);
    assert_int_equal(thr_open(b, &cfg), 0);
    atomic_store(&a->region->card[0].tat_ns, 12345);
    assert_int_equal(atomic_load(&b->region->card[0].tat_ns), 12345); /* one bucket */
    thr_close(a);
    thr_close(b);
    fflush(log);
    assert_int_equal(len, 0); /* nothing to say about a new region */
    /* Truncated: a new layout, the old value gone. */
    assert_int_equal(truncate(path, 16), 0);
    assert_int_equal(thr_open(a, &cfg), 0);
    assert_true(a->region_file);
    assert_int_equal(atomic_load(&a->region->card[0].tat_ns), 0);
    assert_int_equal(a->region->magic, THR_MAGIC);
    thr_close(a);
    /* Garbage of the right size. */
    f = fopen(path, "r+");
    assert_non_null(f);
    for (size_t i = 0; i < sizeof(struct egpu__vcuda_throttle_region); i++)
        fputc(0xa5, f);
    fclose(f);
    assert_int_equal(thr_open(a, &cfg), 0);
    assert_int_equal(a->region->magic, THR_MAGIC);
    assert_int_equal(atomic_load(&a->region->card[0].tat_ns), 0);
    thr_close(a);
    /* No such directory: no per-process bucket (N processes would get N
     * times the share): closed, every launch on a limited card refused. */
    cfg.dir = "/nonexistent/egpu-throttle";
    assert_int_equal(thr_open(a, &cfg), 0);
    assert_false(a->region_file);
    assert_true(a->closed);
    assert_null(a->region);
    {
        struct egpu__vcuda_launch l = {.blocks = 1, .threads = 1, .launch = refuse_launch};

        assert_int_equal(thr_launch(a, &l), CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES);
    }
    thr_close(a);
    free(a);
    free(b);
    egpu_log_level = EGPU_LOG_ERROR;
    egpu_log_set_stream(NULL);
    fclose(log);
    /* One line for each, naming what was wrong. */
    assert_non_null(strstr(text, "compute region truncated, re-initialised"));
    assert_non_null(strstr(text, "compute region of another layout or corrupted, re-initialised"));
    assert_non_null(strstr(text, "compute region /nonexistent/egpu-throttle/vcuda-core.shm "
                                 "unusable (No such file or directory): failing closed"));
    assert_int_equal(count_lines(text), 3); /* once each, nothing else */
    free(text);
}

/* A hostile process of the container plants a symbolic link, a hard link
 * or a FIFO at vcuda-core.shm: the region is not opened through it (the
 * target is neither written nor sized), and the controller fails closed
 * with one error line instead of counting each process on its own. */
static void test_region_planted(void **state)
{
    struct egpu__vcuda_throttle_config cfg = sim_config(1, 40, 0);
    char path[400], victim[400];
    struct thr *a = calloc(1, sizeof(*a));
    const char *kinds[] = {"symlink", "hardlink", "fifo"};
    char *text = NULL;
    size_t len = 0;
    FILE *log = open_memstream(&text, &len);

    (void)state;
    assert_non_null(a);
    assert_non_null(log);
    egpu_log_set_stream(log);
    egpu_log_level = EGPU_LOG_WARN;
    snprintf(path, sizeof(path), "%s/vcuda-core.shm", cfg.dir);
    snprintf(victim, sizeof(victim), "%s/victim", cfg.dir);
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        struct egpu__vcuda_launch l = {.blocks = 1, .threads = 1, .launch = refuse_launch};

        tu_plant(path, victim, (int)k);
        assert_int_equal(thr_open(a, &cfg), 0);
        assert_true(a->closed);
        assert_int_equal(thr_launch(a, &l), CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES);
        thr_close(a);
        tu_victim_intact(victim);
    }
    (void)unlink(path);
    (void)unlink(victim);
    free(a);
    egpu_log_level = EGPU_LOG_ERROR;
    egpu_log_set_stream(NULL);
    fclose(log);
    assert_int_equal(count_lines(text), 3);
    assert_non_null(strstr(text, "a symbolic link"));
    assert_non_null(strstr(text, "a hard link"));
    assert_non_null(strstr(text, "not a regular file"));
    assert_non_null(strstr(text, "failing closed"));
    free(text);
}

/* The region file truncated (to nothing, to half), deleted or replaced
 * under live processes: an access to the mapping never kills a process
 * (the SIGBUS guard, sigbus.c, gives zeros), and the next look at the file
 * (a launch after a fault, or every THR_CHECK_NS) maps it again, shared
 * again; one warning per process, the rest at debug level. */
static void test_region_truncated_live(void **state)
{
    struct egpu__vcuda_throttle_config cfg = sim_config(3, 40, 0);
    struct thr *a = calloc(1, sizeof(*a)), *b = calloc(1, sizeof(*b));
    char path[400], *text = NULL;
    size_t len = 0;
    FILE *log = open_memstream(&text, &len);

    (void)state;
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(log);
    egpu_log_set_stream(log);
    egpu_log_level = EGPU_LOG_WARN;
    cfg.watch = egpu__vcuda_sigbus_watch;
    cfg.unwatch = egpu__vcuda_sigbus_unwatch;
    snprintf(path, sizeof(path), "%s/vcuda-core.shm", cfg.dir);
    (void)unlink(path);
    assert_int_equal(thr_open(a, &cfg), 0);
    assert_int_equal(thr_open(b, &cfg), 0);
    atomic_store(&a->region->card[0].tat_ns, 12345);
    /* Truncated to nothing: b's next access faults and reads zeros. */
    assert_int_equal(truncate(path, 0), 0);
    assert_int_equal(atomic_load(&b->region->card[0].tat_ns), 0);
    assert_int_equal(atomic_load(&b->faults), 1);
    assert_true(atomic_load(&b->faults) != atomic_load(&b->faults_ok)); /* a launch would look */
    region_check(b, mono_ns());
    assert_int_equal(atomic_load(&b->faults_ok), 1);
    assert_int_equal(b->region->magic, THR_MAGIC); /* made again, laid out again */
    assert_int_equal(a->region->magic, THR_MAGIC); /* a never faulted: the same file */
    atomic_store(&a->region->card[0].tat_ns, 777);
    assert_int_equal(atomic_load(&b->region->card[0].tat_ns), 777); /* one bucket again */
    /* Truncated to half (the same page: no fault): the look finds it short. */
    assert_int_equal(truncate(path, (off_t)sizeof(struct egpu__vcuda_throttle_region) / 2), 0);
    region_check(a, mono_ns());
    assert_int_equal(atomic_load(&a->faults), 0);
    assert_int_equal(a->region->magic, THR_MAGIC);
    assert_int_equal(atomic_load(&b->region->card[0].tat_ns), 0); /* re-initialised, shared */
    /* Deleted, then made again by a: b is on the old file until it looks. */
    assert_int_equal(unlink(path), 0);
    region_check(a, mono_ns());
    atomic_store(&a->region->card[0].tat_ns, 4242);
    assert_int_equal(atomic_load(&b->region->card[0].tat_ns), 0);
    region_check(b, mono_ns());
    assert_int_equal(atomic_load(&b->region->card[0].tat_ns), 4242);
    thr_close(a);
    thr_close(b);
    free(a);
    free(b);
    egpu_log_level = EGPU_LOG_ERROR;
    egpu_log_set_stream(NULL);
    fclose(log);
    assert_non_null(strstr(text, "compute region truncated under this process, mapped again, "
                                 "re-initialised: truncated"));
    assert_int_equal(count_lines(text), 2); /* once for a, once for b */
    free(text);
}

/* ---- The current context. ---- */

static _Atomic unsigned ctx_calls;        /* cuCtxGetCurrent calls answered */
static _Thread_local uintptr_t ctx_shift; /* moves the thread's context behind the hooks */

static CUresult counting_ctx_get_current(CUcontext *ctx)
{
    atomic_fetch_add(&ctx_calls, 1);
    *ctx = (CUcontext)(uintptr_t)(0x1000 + sim_cur + ctx_shift);
    return CUDA_SUCCESS;
}

/* A launch makes no driver call for its context: the thread's context is
 * asked for at its first launch, after a hooked call that may change it
 * (egpu__vcuda_throttle_ctx_changed), and checked at timed launches. */
static void test_ctx_cached(void **state)
{
    struct sim_proc *p;
    CUresult rc = CUDA_ERROR_UNKNOWN;
    unsigned calls;

    (void)state;
    sim_reset();
    p = sim_add(0, 50, 0, 1, 1000, 0, SEC); /* 1 us kernels: one launch in 200 timed */
    p->t->fns.ctx_get_current = counting_ctx_get_current;
    atomic_store(&ctx_calls, 0);
    sim_run(200 * MS);
    calls = atomic_load(&ctx_calls);
    assert_true(p->launches > 10000);
    assert_true(calls >= 1 && calls * 50 < p->launches);
    assert_true(calls <= 1 + atomic_load(&p->t->stats.sampled) + 2);
    assert_int_equal(atomic_load(&p->t->stats.ctx_queries), calls);
    /* A hooked call changed it: the next launch asks, once. */
    egpu__vcuda_throttle_ctx_changed();
    memset(&p->step, 0, sizeof(p->step));
    assert_int_equal(thr_step(p->t, &p->l, &p->step, sim.now, &rc), 0);
    assert_int_equal(rc, CUDA_SUCCESS);
    assert_false(p->step.ctx_cached);
    assert_int_equal(atomic_load(&ctx_calls), calls + 1);
    memset(&p->step, 0, sizeof(p->step));
    assert_int_equal(thr_step(p->t, &p->l, &p->step, sim.now, &rc), 0);
    assert_true(p->step.ctx_cached);
    sim_reset();
}

/* A context changed by a call that is not hooked is caught at the next
 * timed launch: logged once, and from then on every launch asks. */
static void test_ctx_changed_behind_hooks(void **state)
{
    struct sim_proc *p;
    uint64_t launches;
    unsigned calls;
    char *text = NULL;
    size_t len = 0;
    FILE *log = open_memstream(&text, &len);

    (void)state;
    assert_non_null(log);
    sim_reset();
    p = sim_add(0, 50, 0, 1, 1000, 0, SEC);
    p->t->fns.ctx_get_current = counting_ctx_get_current;
    sim_run(100 * MS);
    assert_int_not_equal(atomic_load(&p->t->ctx_epoch), 0);
    egpu_log_set_stream(log);
    egpu_log_level = EGPU_LOG_INFO;
    ctx_shift = 0x100; /* another context, and no egpu__vcuda_throttle_ctx_changed */
    sim_run(150 * MS); /* past a timed launch */
    assert_int_equal(atomic_load(&p->t->ctx_epoch), 0);
    launches = p->launches;
    calls = atomic_load(&ctx_calls);
    sim_run(200 * MS);
    assert_true(atomic_load(&ctx_calls) - calls >= p->launches - launches);
    ctx_shift = 0;
    sim_reset();
    egpu_log_level = EGPU_LOG_ERROR;
    egpu_log_set_stream(NULL);
    fclose(log);
    assert_non_null(strstr(text, "current context changed by a call that is not hooked"));
    assert_int_equal(count_lines(text), 1);
    free(text);
}

/* ---- Real time: threads and fork through the public interface. ---- */

struct rt_arg {
    int index;
    uint64_t until;
};

static void *rt_thread(void *arg)
{
    struct rt_arg *a = arg;
    struct sim_proc *p = &sim.p[a->index];

    sim_cur = a->index;
    while (mono_ns() < a->until)
        if (egpu__vcuda_throttle_launch(&p->l) != CUDA_SUCCESS)
            return (void *)1;
    return NULL;
}

static void rt_setup(int nthreads, unsigned core)
{
    struct egpu__vcuda_throttle_config cfg = sim_config(3, core, 0);
    char path[400];

    sim_reset();
    snprintf(path, sizeof(path), "%s/vcuda-core.shm", cfg.dir);
    (void)unlink(path); /* a fresh bucket */
    sim.realtime = true;
    sim.now = 0;
    for (int i = 0; i < nthreads; i++) {
        struct sim_proc *p = &sim.p[i];

        p->blocks = 100;
        p->nspb = 1000;
        p->l = (struct egpu__vcuda_launch){.blocks = 100,
                                           .threads = 128,
                                           .fn = (CUfunction)(uintptr_t)0x7000,
                                           .stream = (CUstream)(uintptr_t)(0x100 + i),
                                           .launch = sim_launch,
                                           .ctx = p};
    }
    assert_int_equal(egpu__vcuda_throttle_init(&cfg), 0);
    assert_true(atomic_load(&egpu__vcuda_throttle_active));
}

static void rt_teardown(void)
{
    thr_close(&g_thr);
    atomic_store(&egpu__vcuda_throttle_active, false);
    assert_int_equal(sim.events_live, 0);
    sim.realtime = false;
}

/* Four threads of one process launch at once for 0.6 s at 25%: the share
 * holds from above however loaded the machine is (load only lowers it). */
static void test_realtime_threads(void **state)
{
    pthread_t th[4];
    struct rt_arg args[4];
    uint64_t t0;
    void *res;

    (void)state;
    rt_setup(4, 25);
    t0 = mono_ns();
    sim.win_from = t0 + 100 * MS;
    sim.win_to = t0 + 600 * MS;
    for (int i = 0; i < 4; i++) {
        args[i] = (struct rt_arg){.index = i, .until = t0 + 600 * MS};
        assert_int_equal(pthread_create(&th[i], NULL, rt_thread, &args[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        assert_int_equal(pthread_join(th[i], &res), 0);
        assert_null(res);
    }
    /* Threads share one process's estimates and queue, so at most the
     * bucket's burst over the window: 25% + 25 ms x 25% / 500 ms, + 2 for the
     * rounding of four threads' samples. */
    assert_true(sim_share(0) <= 25.0 + 1.25 + 2.0);
    assert_true(sim_share(0) > 0.0);
    assert_true(atomic_load(&g_thr.stats.samples_done) > 0);
    rt_teardown();
}

/* After fork the child starts afresh (no parent's samples) on the same bucket. */
static void test_realtime_fork(void **state)
{
    uint64_t tat_before;
    int status;
    pid_t pid;

    (void)state;
    rt_setup(1, 50);
    sim_cur = 0;
    for (int i = 0; i < 8; i++) /* learning launches: timed, samples in flight */
        assert_int_equal(egpu__vcuda_throttle_launch(&sim.p[0].l), CUDA_SUCCESS);
    assert_true(atomic_load(&g_thr.stats.sampled) > 0);
    tat_before = atomic_load(&g_thr.region->card[0].tat_ns);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int bad = 0;

        egpu__vcuda_throttle_atfork_child();
        for (unsigned i = 0; i < THR_SAMPLE_SLOTS; i++)
            bad |= atomic_load(&g_thr.samples[i].state) != SAMPLE_FREE;
        bad |= atomic_load(&g_thr.pc[0].issued_ns) != 0;
        bad |= g_thr.pid != (int32_t)getpid();
        for (int i = 0; i < 20; i++)
            bad |= egpu__vcuda_throttle_launch(&sim.p[0].l) != CUDA_SUCCESS;
        bad |= atomic_load(&g_thr.stats.ctx_queries) == 0; /* its context is asked for afresh */
        _exit(bad ? 1 : 0);
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    /* The child charged the container's bucket, which the parent sees. */
    assert_true(atomic_load(&g_thr.region->card[0].tat_ns) > tat_before);
    rt_teardown();
}

/* ---- The mock driver. ---- */

struct mock {
    void *h;
    CUresult (*init)(unsigned);
    CUresult (*device_get)(CUdevice *, int);
    CUresult (*retain)(CUcontext *, CUdevice);
    CUresult (*set_current)(CUcontext);
    CUresult (*module_load)(CUmodule *, const void *);
    CUresult (*get_function)(CUfunction *, CUmodule, const char *);
    CUresult (*stream_create)(CUstream *, unsigned);
    CUresult (*stream_sync)(CUstream);
    CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                       unsigned, CUstream, void **, void **);
    struct egpu__vcuda_throttle_fns fns;
};

static bool mock_open(struct mock *m)
{
    char path[4096];
    ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 64);
    const char *env = getenv("EGPU_MOCK_LIBCUDA");
    char *slash;

    if (env) {
        snprintf(path, sizeof(path), "%s", env);
    } else {
        if (n <= 0)
            return false;
        path[n] = '\0';
        slash = strrchr(path, '/');
        if (!slash)
            return false;
        snprintf(slash, (size_t)(path + sizeof(path) - slash), "/mock/cuda/libcuda.so.1");
    }
    m->h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!m->h)
        return false;
#define SYM(field, name) *(void **)&m->field = dlsym(m->h, name)
    SYM(init, "cuInit");
    SYM(device_get, "cuDeviceGet");
    SYM(retain, "cuDevicePrimaryCtxRetain");
    SYM(set_current, "cuCtxSetCurrent");
    SYM(module_load, "cuModuleLoadData");
    SYM(get_function, "cuModuleGetFunction");
    SYM(stream_create, "cuStreamCreate");
    SYM(stream_sync, "cuStreamSynchronize");
    SYM(launch, "cuLaunchKernel");
    SYM(fns.ctx_get_device, "cuCtxGetDevice");
    SYM(fns.ctx_get_current, "cuCtxGetCurrent");
    SYM(fns.event_create, "cuEventCreate");
    SYM(fns.event_record, "cuEventRecord");
    SYM(fns.event_elapsed_time, "cuEventElapsedTime");
    SYM(fns.event_destroy, "cuEventDestroy_v2");
    SYM(fns.stream_query, "cuStreamQuery");
#undef SYM
    return m->init && m->device_get && m->retain && m->set_current && m->module_load &&
           m->get_function && m->stream_create && m->stream_sync && m->launch &&
           m->fns.ctx_get_device && m->fns.ctx_get_current && m->fns.event_create &&
           m->fns.event_record && m->fns.stream_query && m->fns.event_elapsed_time &&
           m->fns.event_destroy;
}

struct mock_launch {
    struct mock *m;
    CUfunction fn;
    unsigned grid;
};

static struct mock mock;

static CUresult mock_do_launch(const struct egpu__vcuda_launch *l)
{
    const struct mock_launch *ml = l->ctx;

    return ml->m->launch(ml->fn, ml->grid, 1, 1, 128, 1, 1, 0, l->stream, NULL, NULL);
}

/* The host's slack of test_mock_driver, in points of the card. The mock starts a
 * kernel inside its launch call, not at the call's end as a real driver does, so
 * the part of the call after that (returning through the mock and the test's
 * launch function) is counted as submission gap and not charged: under 0.5 us a
 * launch in the default build (30.8% measured, 8 runs with the other core busy),
 * 4-5 us under ThreadSanitizer's instrumentation, about 2.5% of a 200 us launch
 * (31.0-31.9% measured, 8 runs with the other core busy: one over 1 point failed
 * CI). The default build keeps the tight bound. */
#ifdef __SANITIZE_THREAD__
#define MOCK_HOST_SLACK_PCT 3.0
#else
#define MOCK_HOST_SLACK_PCT 1.0
#endif

/* One process at 30% on the mock for 1 s: the controller measures the mock's
 * device clock through its events. Loose bounds: real time on a loaded machine. */
static void test_mock_driver(void **state)
{
    struct egpu__vcuda_throttle_config cfg = sim_config(1, 30, 0);
    struct mock_launch ml = {.m = &mock, .grid = 200};
    struct egpu__vcuda_launch l;
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUstream stream;
    uint64_t t0, launches = 0, busy_ns, wall;
    char path[400];

    (void)state;
    if (!mock_open(&mock))
        skip(); /* the mock is not built here (the sanitizer build): a build without it, not a
                   missing tool, so not tu_skip; CI runs this test in the default build */
    setenv("EGPU_MOCK_CUDA_BLOCK_NS", "1000", 1);
    unsetenv("EGPU_MOCK_CUDA_STATE");
    assert_int_equal(mock.init(0), CUDA_SUCCESS);
    assert_int_equal(mock.device_get(&dev, 0), CUDA_SUCCESS);
    assert_int_equal(mock.retain(&ctx, dev), CUDA_SUCCESS);
    assert_int_equal(mock.set_current(ctx), CUDA_SUCCESS);
    assert_int_equal(mock.module_load(&mod, "image"), CUDA_SUCCESS);
    assert_int_equal(mock.get_function(&ml.fn, mod, "spin"), CUDA_SUCCESS);
    assert_int_equal(mock.stream_create(&stream, 0), CUDA_SUCCESS);
    cfg.fns = mock.fns;
    snprintf(path, sizeof(path), "%s/vcuda-core.shm", cfg.dir);
    (void)unlink(path);
    assert_int_equal(egpu__vcuda_throttle_init(&cfg), 0);
    l = (struct egpu__vcuda_launch){.blocks = ml.grid,
                                    .threads = 128,
                                    .fn = ml.fn,
                                    .stream = stream,
                                    .launch = mock_do_launch,
                                    .ctx = &ml};
    t0 = mono_ns();
    while (mono_ns() - t0 < SEC) {
        assert_int_equal(egpu__vcuda_throttle_launch(&l), CUDA_SUCCESS);
        launches++;
    }
    assert_int_equal(mock.stream_sync(stream), CUDA_SUCCESS);
    wall = mono_ns() - t0;
    busy_ns = launches * ml.grid * 1000;
    /* 30% + the bucket's burst (7.5 ms) + the queue (1 ms) over 1 s, + the host's slack. */
    if (100.0 * (double)busy_ns / (double)wall > 30.0 + 0.85 + MOCK_HOST_SLACK_PCT ||
        100.0 * (double)busy_ns / (double)wall < 10.0)
        fail_msg(
            "%.2f%% of the mock card at 30%% (%llu launches of 200 us in %.3f s; timed %llu, "
            "collected %llu, bucket sleeps %llu, queue sleeps %llu, forced %llu, retries %llu)",
            100.0 * (double)busy_ns / (double)wall, (unsigned long long)launches,
            (double)wall / 1e9, (unsigned long long)atomic_load(&g_thr.stats.sampled),
            (unsigned long long)atomic_load(&g_thr.stats.samples_done),
            (unsigned long long)atomic_load(&g_thr.stats.bucket_sleeps),
            (unsigned long long)atomic_load(&g_thr.stats.queue_sleeps),
            (unsigned long long)atomic_load(&g_thr.stats.queue_forced),
            (unsigned long long)atomic_load(&g_thr.stats.retries));
    assert_true(atomic_load(&g_thr.stats.samples_done) > 0);
    assert_int_equal(atomic_load(&g_thr.stats.samples_lost), 0);
    thr_close(&g_thr);
    atomic_store(&egpu__vcuda_throttle_active, false);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_rejected),
        cmocka_unit_test(test_sim_one_process),
        cmocka_unit_test(test_sim_four_processes),
        cmocka_unit_test(test_sim_two_containers),
        cmocka_unit_test(test_sim_large_gpus),
        cmocka_unit_test(test_sim_burst),
        cmocka_unit_test(test_sim_burst_reaction),
        cmocka_unit_test(test_sim_burst_two_processes),
        cmocka_unit_test(test_sim_burst_host_hiccups),
        cmocka_unit_test(test_sim_lockstep),
        cmocka_unit_test(test_sim_tiny_kernels_not_slowed),
        cmocka_unit_test(test_sim_tiny_kernels_held),
        cmocka_unit_test(test_sim_late_inside_launch),
        cmocka_unit_test(test_sim_learns_unknown_kernel),
        cmocka_unit_test(test_sim_many_new_kernels),
        cmocka_unit_test(test_sim_kernel_gets_slower),
        cmocka_unit_test(test_sim_kernel_gets_slower_settles),
        cmocka_unit_test(test_sim_corrupted_bucket),
        cmocka_unit_test(test_per_thread_stream),
        cmocka_unit_test(test_capture_queries_relaxed),
        cmocka_unit_test(test_capture_launch_not_charged),
        cmocka_unit_test(test_ctx_cached),
        cmocka_unit_test(test_ctx_changed_behind_hooks),
        cmocka_unit_test(test_region_file),
        cmocka_unit_test(test_region_planted),
        cmocka_unit_test(test_region_truncated_live),
        cmocka_unit_test(test_realtime_threads),
        cmocka_unit_test(test_realtime_fork),
        cmocka_unit_test(test_mock_driver),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
