/* tests/mock/mock_device.c - the simulated machine shared by the mock CUDA
 * driver, the mock NVML and mockctl: the card list, the state file (or
 * private state), device memory per card and per process with reclamation of
 * dead processes, and the device timeline. mock_device.h describes the model
 * and the layout. Test code, never shipped: it is linked into each mock
 * library with hidden visibility, so each library keeps its own copy.
 */
#define _GNU_SOURCE /* F_OFD_SETLK, F_OFD_GETLK */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "egpu/core.h"
#include "mock_device.h"

#define DEFAULT_GPUS "NVIDIA A100-SXM4-80GB:81920,NVIDIA A100-SXM4-80GB:81920"

uint64_t egpu_mock_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void egpu_mock_sleep_until(uint64_t t_ns)
{
    struct timespec ts = {(time_t)(t_ns / 1000000000ull), (long)(t_ns % 1000000000ull)};

    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        continue;
}

char egpu_mock_next_field(const char **p, const char *stops, char *out, size_t len)
{
    size_t n = 0;

    while (**p != '\0' && strchr(stops, **p) == NULL) {
        if (n + 1 < len)
            out[n++] = **p;
        (*p)++;
    }
    out[n] = '\0';
    return **p != '\0' ? *(*p)++ : '\0';
}

unsigned egpu_mock_gpus_parse(const char *spec, struct egpu_mock_gpu *out, unsigned max)
{
    const char *p = spec;
    char field[128];
    unsigned n = 0;
    char sep;

    while (*p != '\0' && n < max) {
        struct egpu_mock_gpu *g = &out[n];

        memset(g, 0, sizeof(*g));
        sep = egpu_mock_next_field(&p, ":,", g->name, sizeof(g->name));
        if (sep == ':') {
            sep = egpu_mock_next_field(&p, ":,", field, sizeof(field));
            g->mem_mib = strtoull(field, NULL, 10);
        }
        if (sep == ':')
            egpu_mock_next_field(&p, ",", g->uuid, sizeof(g->uuid));
        if (g->uuid[0] == '\0')
            snprintf(g->uuid, sizeof(g->uuid), "GPU-6d0c1c3e-0000-4000-8000-%012u", n);
        n++;
    }
    return n;
}

unsigned egpu_mock_gpus_load(struct egpu_mock_gpu *out, unsigned max)
{
    const char *spec = getenv("EGPU_MOCK_NVML_GPUS");

    return egpu_mock_gpus_parse(spec != NULL ? spec : DEFAULT_GPUS, out, max);
}

int egpu_mock_uuid_bytes(const char *uuid, unsigned char out[16])
{
    return egpu_gpu_uuid_parse(uuid, out);
}

/* Fill a zeroed state with the machine; ready is set last. */
static int state_init(struct egpu_mock_state *st, bool shared)
{
    struct egpu_mock_gpu gpus[EGPU_MOCK_CARDS_MAX];
    pthread_mutexattr_t attr;
    unsigned n = egpu_mock_gpus_load(gpus, EGPU_MOCK_CARDS_MAX);
    int r;

    st->magic = EGPU_MOCK_MAGIC;
    st->version = EGPU_MOCK_VERSION;
    st->size = sizeof(*st);
    r = pthread_mutexattr_init(&attr);
    if (r == 0 && shared)
        r = pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    if (r == 0)
        r = pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    if (r == 0)
        r = pthread_mutex_init(&st->mutex, &attr);
    pthread_mutexattr_destroy(&attr);
    if (r != 0)
        return -r;
    st->ncards = n;
    for (unsigned i = 0; i < n; i++) {
        struct egpu_mock_card *c = &st->cards[i];

        memcpy(c->name, gpus[i].name, sizeof(c->name));
        memcpy(c->uuid, gpus[i].uuid, sizeof(c->uuid));
        c->total_bytes = gpus[i].mem_mib << 20;
    }
    __atomic_store_n(&st->ready, 1, __ATOMIC_RELEASE);
    return 0;
}

static bool state_valid(const struct egpu_mock_state *st)
{
    return st->magic == EGPU_MOCK_MAGIC && st->version == EGPU_MOCK_VERSION &&
           st->size == sizeof(*st) && __atomic_load_n(&st->ready, __ATOMIC_ACQUIRE) == 1 &&
           st->ncards <= EGPU_MOCK_CARDS_MAX && st->ntags <= EGPU_MOCK_TAGS_MAX;
}

static off_t proc_lock_offset(int slot)
{
    return (off_t)(offsetof(struct egpu_mock_state, procs) +
                   (size_t)slot * sizeof(struct egpu_mock_proc));
}

/* Map the file (locked with flock by the caller), initialising it if asked. */
static int map_file(struct egpu_mock_dev *dev, bool create)
{
    struct egpu_mock_state *st;
    struct stat sb;
    bool fresh = false;

    if (fstat(dev->fd, &sb) != 0)
        return -errno;
    if ((size_t)sb.st_size != sizeof(*st)) {
        if (!create)
            return -ENODATA;
        if (ftruncate(dev->fd, 0) != 0 || ftruncate(dev->fd, (off_t)sizeof(*st)) != 0)
            return -errno;
        fresh = true;
    }
    st = mmap(NULL, sizeof(*st), PROT_READ | PROT_WRITE, MAP_SHARED, dev->fd, 0);
    if (st == MAP_FAILED)
        return -errno;
    if (!fresh && !state_valid(st)) {
        if (!create) {
            munmap(st, sizeof(*st));
            return -ENODATA;
        }
        memset(st, 0, sizeof(*st));
        fresh = true;
    }
    if (fresh) {
        int r = state_init(st, true);

        if (r != 0) {
            munmap(st, sizeof(*st));
            return r;
        }
    }
    dev->st = st;
    return 0;
}

/* Locked: take a free process record for the caller. */
static int register_process(struct egpu_mock_dev *dev)
{
    struct egpu_mock_state *st = dev->st;

    egpu_mock_reclaim(dev);
    for (int i = 0; i < EGPU_MOCK_PROCS_MAX; i++) {
        struct egpu_mock_proc *p = &st->procs[i];
        struct flock fl = {
            .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = proc_lock_offset(i), .l_len = 1};
        uint32_t locked = 0;

        if (p->pid != 0)
            continue;
        if (dev->fd >= 0) {
            if (fcntl(dev->fd, F_OFD_SETLK, &fl) == 0)
                locked = 1;
            else if (errno != EINVAL)
                continue; /* held: a live process's record being set up */
        }
        memset(p, 0, sizeof(*p));
        p->pid = (int32_t)getpid();
        p->locked = locked;
        dev->slot = i;
        return 0;
    }
    return -ENOSPC;
}

int egpu_mock_dev_open(struct egpu_mock_dev *dev, const char *path, bool create, bool register_proc)
{
    int r = 0;

    dev->st = NULL;
    dev->fd = -1;
    dev->slot = -1;
    if (path == NULL) {
        struct egpu_mock_state *st =
            mmap(NULL, sizeof(*st), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

        if (st == MAP_FAILED)
            return -errno;
        r = state_init(st, false);
        if (r != 0) {
            munmap(st, sizeof(*st));
            return r;
        }
        dev->st = st;
    } else {
        dev->fd = open(path, O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0), 0666);
        if (dev->fd < 0)
            return -errno;
        while (flock(dev->fd, LOCK_EX) != 0) {
            if (errno != EINTR) {
                r = -errno;
                break;
            }
        }
        if (r == 0)
            r = map_file(dev, create);
        (void)flock(dev->fd, LOCK_UN); /* closing the file would drop it too */
        if (r != 0) {
            close(dev->fd);
            dev->fd = -1;
            return r;
        }
    }
    if (register_proc) {
        r = egpu_mock_lock(dev);
        if (r == 0) {
            r = register_process(dev);
            egpu_mock_unlock(dev);
        }
        if (r != 0)
            egpu_mock_dev_close(dev);
    }
    return r;
}

void egpu_mock_dev_close(struct egpu_mock_dev *dev)
{
    if (dev->st != NULL)
        munmap(dev->st, sizeof(*dev->st));
    if (dev->fd >= 0)
        close(dev->fd);
    dev->st = NULL;
    dev->fd = -1;
    dev->slot = -1;
}

/* Locked: each card's memory is the sum of its processes' (after a holder died). */
static void recompute_memory(struct egpu_mock_state *st)
{
    for (unsigned c = 0; c < st->ncards; c++) {
        uint64_t used = 0;

        for (int i = 0; i < EGPU_MOCK_PROCS_MAX; i++) {
            if (st->procs[i].pid != 0)
                used += st->procs[i].used_bytes[c];
        }
        st->cards[c].used_bytes = used;
    }
}

int egpu_mock_lock(struct egpu_mock_dev *dev)
{
    int r = pthread_mutex_lock(&dev->st->mutex);

    if (r == EOWNERDEAD) {
        r = pthread_mutex_consistent(&dev->st->mutex);
        if (r == 0)
            recompute_memory(dev->st);
    }
    return -r;
}

void egpu_mock_unlock(struct egpu_mock_dev *dev)
{
    pthread_mutex_unlock(&dev->st->mutex);
}

static bool is_alive(const struct egpu_mock_dev *dev, int slot)
{
    const struct egpu_mock_proc *p = &dev->st->procs[slot];

    if (dev->fd < 0)
        return true;
    if (p->locked) {
        struct flock fl = {
            .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = proc_lock_offset(slot), .l_len = 1};

        if (fcntl(dev->fd, F_OFD_GETLK, &fl) == 0)
            return fl.l_type != F_UNLCK;
    }
    return !(kill((pid_t)p->pid, 0) != 0 && errno == ESRCH);
}

void egpu_mock_reclaim(struct egpu_mock_dev *dev)
{
    struct egpu_mock_state *st = dev->st;

    for (int i = 0; i < EGPU_MOCK_PROCS_MAX; i++) {
        struct egpu_mock_proc *p = &st->procs[i];

        if (p->pid == 0 || i == dev->slot || is_alive(dev, i))
            continue;
        for (unsigned c = 0; c < st->ncards; c++) {
            uint64_t b = p->used_bytes[c];

            st->cards[c].used_bytes -= b < st->cards[c].used_bytes ? b : st->cards[c].used_bytes;
        }
        memset(p, 0, sizeof(*p));
    }
}

int egpu_mock_mem_take(struct egpu_mock_dev *dev, unsigned card, uint64_t bytes)
{
    struct egpu_mock_card *c;
    int r;

    if (card >= dev->st->ncards)
        return -EINVAL;
    r = egpu_mock_lock(dev);
    if (r != 0)
        return r;
    egpu_mock_reclaim(dev);
    c = &dev->st->cards[card];
    if (c->used_bytes > c->total_bytes || bytes > c->total_bytes - c->used_bytes) {
        r = -ENOMEM;
    } else {
        c->used_bytes += bytes;
        if (dev->slot >= 0)
            dev->st->procs[dev->slot].used_bytes[card] += bytes;
    }
    egpu_mock_unlock(dev);
    return r;
}

static void sub_clamped(uint64_t *v, uint64_t d)
{
    *v -= d < *v ? d : *v;
}

void egpu_mock_mem_give(struct egpu_mock_dev *dev, unsigned card, uint64_t bytes)
{
    if (card >= dev->st->ncards || egpu_mock_lock(dev) != 0)
        return;
    sub_clamped(&dev->st->cards[card].used_bytes, bytes);
    if (dev->slot >= 0)
        sub_clamped(&dev->st->procs[dev->slot].used_bytes[card], bytes);
    egpu_mock_unlock(dev);
}

int egpu_mock_tag_index(struct egpu_mock_dev *dev, const char *name)
{
    struct egpu_mock_state *st = dev->st;
    int r = egpu_mock_lock(dev);
    unsigned i;

    if (r != 0)
        return r;
    for (i = 0; i < st->ntags; i++) {
        if (strncmp(st->tags[i].name, name, EGPU_MOCK_TAG_LEN - 1) == 0)
            break;
    }
    if (i == st->ntags) {
        if (i == EGPU_MOCK_TAGS_MAX - 1 || i == EGPU_MOCK_TAGS_MAX) {
            i = EGPU_MOCK_TAGS_MAX - 1;
            name = "other";
        }
        snprintf(st->tags[i].name, sizeof(st->tags[i].name), "%s", name);
        st->ntags = i + 1;
    }
    egpu_mock_unlock(dev);
    return (int)i;
}

/* The part of run e after max(lo, e->start) and before now_ns. */
static uint64_t run_elapsed(const struct egpu_mock_run *e, uint64_t lo, uint64_t now_ns)
{
    uint64_t a = e->start_ns > lo ? e->start_ns : lo;
    uint64_t b = e->end_ns < now_ns ? e->end_ns : now_ns;

    return b > a ? b - a : 0;
}

/* Locked: credit the runs of card that ended by now_ns to their tags. */
static void settle(struct egpu_mock_state *st, unsigned card, uint64_t now_ns)
{
    struct egpu_mock_card *c = &st->cards[card];

    while (c->settled < c->head) {
        const struct egpu_mock_run *e = &c->ring[c->settled % EGPU_MOCK_RING];
        uint64_t d;

        if (e->end_ns > now_ns)
            break;
        d = run_elapsed(e, c->epoch_ns, UINT64_MAX);
        c->settled_ns += d;
        if (e->tag < EGPU_MOCK_TAGS_MAX)
            st->tags[e->tag].settled_ns[card] += d;
        c->settled++;
    }
}

/* Locked, after settle: the elapsed part of the pending runs (of tag, or of
 * every tag when tag < 0). */
static uint64_t pending_elapsed(const struct egpu_mock_card *c, int tag, uint64_t now_ns)
{
    uint64_t sum = 0;

    for (uint64_t i = c->settled; i < c->head; i++) {
        const struct egpu_mock_run *e = &c->ring[i % EGPU_MOCK_RING];

        if (e->start_ns >= now_ns)
            break;
        if (tag < 0 || e->tag == (uint32_t)tag)
            sum += run_elapsed(e, c->epoch_ns, now_ns);
    }
    return sum;
}

int egpu_mock_launch(struct egpu_mock_dev *dev, unsigned card, unsigned tag, uint64_t not_before_ns,
                     uint64_t cost_ns, uint64_t *end_ns)
{
    struct egpu_mock_state *st = dev->st;
    struct egpu_mock_card *c;
    struct egpu_mock_run *last;
    uint64_t now, start, end;
    int r;

    if (card >= st->ncards || tag >= EGPU_MOCK_TAGS_MAX)
        return -EINVAL;
    c = &st->cards[card];
    r = egpu_mock_lock(dev);
    if (r != 0)
        return r;
    now = egpu_mock_now_ns();
    settle(st, card, now);
    while (c->head - c->settled >= EGPU_MOCK_RING) {
        uint64_t t = c->ring[c->settled % EGPU_MOCK_RING].end_ns;

        egpu_mock_unlock(dev);
        egpu_mock_sleep_until(t);
        r = egpu_mock_lock(dev);
        if (r != 0)
            return r;
        now = egpu_mock_now_ns();
        settle(st, card, now);
    }
    start = now;
    if (c->busy_until_ns > start)
        start = c->busy_until_ns;
    if (not_before_ns > start)
        start = not_before_ns;
    end = cost_ns > UINT64_MAX - start ? UINT64_MAX : start + cost_ns;
    last = c->head > c->settled ? &c->ring[(c->head - 1) % EGPU_MOCK_RING] : NULL;
    if (end > start) {
        if (last != NULL && last->tag == tag && last->end_ns == start) {
            last->end_ns = end;
        } else {
            c->ring[c->head % EGPU_MOCK_RING] =
                (struct egpu_mock_run){.start_ns = start, .end_ns = end, .tag = tag};
            c->head++;
        }
        c->busy_until_ns = end;
    }
    c->launches++;
    st->tags[tag].launches[card]++;
    egpu_mock_unlock(dev);
    *end_ns = end;
    return 0;
}

/* Locked: busy percent of card over the last second before now_ns. */
static unsigned utilisation(const struct egpu_mock_card *c, uint64_t now_ns)
{
    uint64_t lo = now_ns > EGPU_MOCK_UTIL_WINDOW_NS ? now_ns - EGPU_MOCK_UTIL_WINDOW_NS : 0;
    uint64_t oldest = c->head > EGPU_MOCK_RING ? c->head - EGPU_MOCK_RING : 0;
    uint64_t busy = 0, i;

    for (i = c->head; i > oldest; i--) {
        const struct egpu_mock_run *e = &c->ring[(i - 1) % EGPU_MOCK_RING];

        if (e->end_ns <= lo)
            break;
        busy += run_elapsed(e, lo, now_ns);
    }
    if (i == oldest && oldest > 0) {
        /* The ring lost runs inside the window: measure over what it holds. */
        uint64_t first = c->ring[oldest % EGPU_MOCK_RING].start_ns;

        if (first > lo)
            lo = first;
    }
    if (now_ns <= lo)
        return 0;
    return (unsigned)((busy * 100 + (now_ns - lo) / 2) / (now_ns - lo));
}

void egpu_mock_card_read(struct egpu_mock_dev *dev, unsigned card, uint64_t now_ns,
                         struct egpu_mock_card_stats *out)
{
    struct egpu_mock_card *c = &dev->st->cards[card];

    settle(dev->st, card, now_ns);
    out->total_bytes = c->total_bytes;
    out->used_bytes = c->used_bytes;
    out->busy_ns = c->settled_ns + pending_elapsed(c, -1, now_ns);
    out->launches = c->launches;
    out->busy_until_ns = c->busy_until_ns;
    out->util_pct = utilisation(c, now_ns);
}

uint64_t egpu_mock_tag_busy(struct egpu_mock_dev *dev, unsigned card, unsigned tag, uint64_t now_ns)
{
    const struct egpu_mock_card *c = &dev->st->cards[card];

    return dev->st->tags[tag].settled_ns[card] + pending_elapsed(c, (int)tag, now_ns);
}

void egpu_mock_reset_busy(struct egpu_mock_dev *dev, uint64_t now_ns)
{
    struct egpu_mock_state *st = dev->st;

    for (unsigned c = 0; c < st->ncards; c++) {
        settle(st, c, now_ns);
        st->cards[c].settled_ns = 0;
        st->cards[c].launches = 0;
        st->cards[c].epoch_ns = now_ns;
        for (unsigned t = 0; t < EGPU_MOCK_TAGS_MAX; t++) {
            st->tags[t].settled_ns[c] = 0;
            st->tags[t].launches[c] = 0;
        }
    }
}
