/* vcuda/region.c - device memory in use by all processes of a container.
 *
 * Every process of the container maps <dir>/vcuda-memory.shm (the
 * allocation directory the agent mounts into the container). It holds:
 *
 *   header   magic, version, size, generation and a check word over them,
 *            then the lock word (below);
 *   cards    up to 16 cards keyed by their 16-byte UUID, each with the
 *            bytes in use by all live processes (the total);
 *   slots    one per live process that took memory: pid, start time
 *            (/proc/<pid>/stat field 22, so a reused pid is told apart)
 *            and bytes per card.
 *
 * Check-and-take happens under the lock: a card's total never passes the
 * limit. The lock is one 64-bit word in the region: 0 when free, else its
 * holder, pid << 32 | the low 32 bits of the holder's start time, taken with
 * a compare-and-swap (spinning briefly, then sleeping 10 us .. 1 ms). A
 * waiter that finds the same holder for a millisecond checks it is alive (as
 * reclamation does, below); a process that died holding the lock is
 * replaced by the waiter, which recomputes every total from the slots (what
 * EOWNERDEAD did for the robust mutex of version 1). Unlike a robust pthread
 * mutex, the word keeps no pointers into the holder's thread list, so the
 * region can be truncated, zeroed or re-initialised under a holder without
 * corrupting any process's memory. Slots of processes that are gone
 * (kill(pid, 0) == ESRCH, a zombie, or another start time) are reclaimed
 * whenever a reservation would fail and whenever usage is read
 * (cuMemGetInfo, NVML), so memory of a SIGKILLed process is back at the next
 * allocation that needs it.
 *
 * DESIGN, robustness: the header is validated before each use (loads from
 * the mapping, no system call). The file itself (same inode at the path,
 * full size) is checked at most every REGION_CHECK_NS (100 ms, on the coarse
 * clock), after a fork, and whenever the mapping took a fault: a truncation
 * by another process makes the next access to a page past the new end raise
 * SIGBUS, which sigbus.c turns into zeros and a count, so the access never
 * kills the application and the next operation maps the file again. (A
 * file replaced or deleted under a process is seen within 100 ms; until
 * then the process counts in the old one. The check per operation costs a
 * coarse clock read, not the stat(2) of the path it used to be.) A
 * truncated, corrupted or foreign-version file is re-initialised in place
 * under flock(2) (one log line per process; later ones at info level), with
 * a new generation number; each live process notices the new generation at
 * its next operation and registers its own usage again (it keeps its own
 * per-card bytes for that). A lock that keeps one live holder for
 * REGION_LOCK_TIMEOUT_S counts as corrupted too. Nothing here can crash the
 * application: every failure becomes an error code.
 *
 * DESIGN, tampering: every process of the container can write the file,
 * so nothing in it is believed on its own. The file is opened with
 * O_NOFOLLOW | O_NONBLOCK and must be a regular file with one link (a link
 * or FIFO planted at the name is refused; the caller then fails closed,
 * never counting per process). Each process's per-card bytes (mine[]) are
 * its ledger. At every entry, under the lock, reconcile() finds the
 * process's slot, writes the ledger into it, recomputes every total from
 * the live slots and vouches for the slot under the region's audit word.
 * What disagreed without a fault of this process's mapping to explain it
 * was written behind the interposer's back: repaired, logged once, and the
 * audit changes, so a reservation waits (CONFIRM_WAIT_NS, then -ENOMEM)
 * until every other live process has vouched for its slot again (dead ones
 * are reclaimed). A re-initialisation keeps the slots that name a process,
 * unconfirmed, so corrupting the header is no reset either. A writer that
 * rewrites slots and totals consistently still hides an idle process's
 * usage until that process's next call (docs/vcuda.md says what a hostile
 * process can do).
 *
 * egpu-vcuda-inspect reads a copy of the file through
 * egpu__vcuda_region_decode, with the same header checks, and judges a
 * slot's process with egpu__vcuda_proc_is_alive as reclamation does.
 *
 * Card ids given to callers are local to the process (the order it met the
 * cards), translated to the shared table's index per generation.
 *
 * Units: bytes.
 */
#define _GNU_SOURCE /* MAP_ANONYMOUS */
#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "egpu/log.h"
#include "vcuda_int.h"

#define REGION_MAGIC          0x31414d55444356ULL /* "VCDUMA1" */
#define REGION_VERSION        3 /* 2: the lock word replaced the robust mutex; 3: audit, confirmed */
#define REGION_SLOTS          EGPU_VCUDA_REGION_SLOTS
#define REGION_LOCK_TIMEOUT_S 5
#define ENTER_TRIES           3
#define MS_NS                 1000000ULL
#define REGION_CHECK_NS       (100 * MS_NS) /* the file is looked at this often */
#define COARSE_MAX_NS         (4 * MS_NS)   /* the coarsest clock the check may use */
#define LOCK_SPINS            64            /* compare-and-swaps before yielding */
#define LOCK_YIELDS           16            /* sched_yield before sleeping */
#define LOCK_PROBE_NS         MS_NS         /* a holder this long is checked for life */
#define CONFIRM_WAIT_NS       (200 * MS_NS) /* a reservation waits this long for unconfirmed slots */
#define CONFIRM_POLL_NS       MS_NS

struct shm_card {
    uint8_t uuid[16];
    uint32_t in_use; /* 1 = this entry names a card */
    uint32_t pad;
    uint64_t total_bytes; /* sum of the live slots' bytes on this card */
};

struct shm_slot {
    int32_t pid; /* 0 = free */
    uint32_t pad;
    uint64_t start;                       /* clock ticks since boot */
    uint64_t confirmed;                   /* the audit its owner last vouched for its bytes in */
    uint64_t bytes[EGPU_VCUDA_MAX_CARDS]; /* by shared card index */
};

struct shm {
    uint64_t magic;
    uint32_t version;
    uint32_t size;       /* sizeof(struct shm) */
    uint64_t generation; /* new at every (re-)initialisation */
    uint64_t check;      /* header_check() of the fields above */
    uint32_t slots_hwm;  /* slots [0, slots_hwm) may be in use */
    uint32_t pad;
    uint64_t audit;        /* new when usage was found changed behind the interposer's back */
    _Atomic uint64_t lock; /* 0 = free, else pid << 32 | low 32 bits of the holder's start */
    struct shm_card cards[EGPU_VCUDA_MAX_CARDS];
    struct shm_slot slots[REGION_SLOTS];
};

struct egpu__vcuda_region {
    pthread_mutex_t mu;  /* process-local: one thread at a time in here */
    char path[PATH_MAX]; /* "" = private region */
    int fd;
    dev_t dev;
    ino_t ino;
    struct shm *s;
    bool watched;        /* s is watched for SIGBUS (sigbus.c) */
    atomic_uint faults;  /* SIGBUS repairs of the mapping s (zeros since) */
    unsigned faults_ok;  /* faults when s was last mapped from the file */
    uint64_t checked_ns; /* coarse time the file was last checked, 0 = never */
    bool warned;         /* a repair was logged at warning level already */
    uint64_t known[2];   /* generation and check word last found good (header_ok) */
    uint64_t gen;        /* generation this process's usage is registered in */
    int slot;            /* our slot, -1 = none */
    pid_t pid;
    uint64_t start; /* 0 = not read yet */
    bool forked;    /* child of a fork: re-open the file on next use */
    unsigned nlocal;
    struct egpu__vcuda_uuid uuid[EGPU_VCUDA_MAX_CARDS];
    int shared[EGPU_VCUDA_MAX_CARDS];    /* local id -> shared index in gen, -1 = unknown */
    uint64_t mine[EGPU_VCUDA_MAX_CARDS]; /* bytes this process holds, by local id: its ledger */
    unsigned faults_seen;                /* faults when the slot was last reconciled */
};

static uint64_t header_check(uint64_t magic, uint32_t version, uint32_t size, uint64_t gen)
{
    uint64_t h = 1469598103934665603ULL;
    uint64_t words[3] = {magic, ((uint64_t)version << 32) | size, gen};

    for (int i = 0; i < 3; i++) {
        for (int b = 0; b < 8; b++) {
            h ^= (words[i] >> (8 * b)) & 0xff;
            h *= 1099511628211ULL;
        }
    }
    return h;
}

/* Whether the header is one of ours; why not in *why. known (NULL: none):
 * the generation and check word last found good, which spare the hash
 * when the header holds them still; updated when the header is good. */
static bool header_ok(const struct shm *s, uint64_t known[2], const char **why)
{
    uint64_t magic = __atomic_load_n(&s->magic, __ATOMIC_ACQUIRE);
    uint32_t version = __atomic_load_n(&s->version, __ATOMIC_RELAXED);
    uint32_t size = __atomic_load_n(&s->size, __ATOMIC_RELAXED);
    uint64_t gen = __atomic_load_n(&s->generation, __ATOMIC_RELAXED);
    uint64_t check = __atomic_load_n(&s->check, __ATOMIC_RELAXED);

    *why = NULL;
    if (magic != REGION_MAGIC)
        *why = "corrupted (bad magic)";
    else if (version != REGION_VERSION)
        *why = "of another version";
    else if (size != sizeof(struct shm))
        *why = "of another layout (size)";
    else if ((known == NULL || gen != known[0] || check != known[1]) &&
             check != header_check(magic, version, size, gen))
        *why = "corrupted (header check)";
    else if (__atomic_load_n(&s->slots_hwm, __ATOMIC_RELAXED) > REGION_SLOTS)
        *why = "corrupted (slot count)";
    if (*why == NULL && known != NULL) {
        known[0] = gen;
        known[1] = check;
    }
    return *why == NULL;
}

static uint64_t new_generation(uint64_t old)
{
    struct timespec ts;
    uint64_t g;

    clock_gettime(CLOCK_REALTIME, &ts);
    g = ((uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec) ^ ((uint64_t)getpid() << 40);
    if (g == old || g == 0)
        g = old + 1 ? old + 1 : 1;
    return g;
}

/* Invalidate s's header and zero everything but the slots, keeping the
 * old generation in s->generation for publish_header. */
static void init_shm_body(struct shm *s)
{
    uint64_t old = s->generation;

    __atomic_store_n(&s->magic, 0, __ATOMIC_RELEASE);
    memset((char *)s + sizeof(s->magic), 0, offsetof(struct shm, slots) - sizeof(s->magic));
    s->generation = old;
}

/* Give s a new generation and a valid header (the body laid out). */
static void publish_header(struct shm *s)
{
    uint64_t gen = new_generation(s->generation);

    s->version = REGION_VERSION;
    s->size = sizeof(*s);
    s->generation = gen;
    s->check = header_check(REGION_MAGIC, REGION_VERSION, sizeof(*s), gen);
    __atomic_store_n(&s->magic, REGION_MAGIC, __ATOMIC_RELEASE);
}

/* Lay a fresh region over s (zeroed usage, no slots, new generation, lock free). */
static void init_shm(struct shm *s)
{
    init_shm_body(s);
    memset(s->slots, 0, sizeof(s->slots));
    publish_header(s);
}

/* Re-initialise s after it was found corrupted, keeping who was there:
 * every slot that names a process (pid > 0) stays, with its bytes dropped
 * (the card table they indexed is gone) and unconfirmed under a new audit,
 * so no reservation passes until each of those processes has registered its
 * own usage again from its ledger or is found gone (see reserve). A tenant
 * that corrupts the region to reset it gets no memory from that. */
static void reinit_keeping_slots(struct shm *s)
{
    uint32_t hwm = 0;
    bool kept = false;

    init_shm_body(s);
    for (uint32_t i = 0; i < REGION_SLOTS; i++) {
        struct shm_slot *sl = &s->slots[i];

        if (sl->pid <= 0) {
            memset(sl, 0, sizeof(*sl));
            continue;
        }
        memset(sl->bytes, 0, sizeof(sl->bytes));
        sl->pad = 0;
        sl->confirmed = 0;
        hwm = i + 1;
        kept = true;
    }
    s->slots_hwm = hwm;
    s->audit = kept ? new_generation(0) : 0;
    publish_header(s);
}

/* Every card's total from the live slots. Returns whether any changed. */
static bool recompute_totals(struct shm *s)
{
    uint64_t sum[EGPU_VCUDA_MAX_CARDS] = {0};
    bool changed = false;

    for (uint32_t i = 0; i < s->slots_hwm && i < REGION_SLOTS; i++) {
        if (s->slots[i].pid == 0)
            continue;
        for (int c = 0; c < EGPU_VCUDA_MAX_CARDS; c++) {
            uint64_t b = s->slots[i].bytes[c];

            sum[c] = sum[c] > UINT64_MAX - b ? UINT64_MAX : sum[c] + b;
        }
    }
    for (int c = 0; c < EGPU_VCUDA_MAX_CARDS; c++) {
        changed = changed || s->cards[c].total_bytes != sum[c];
        s->cards[c].total_bytes = sum[c];
    }
    return changed;
}

int egpu__vcuda_proc_start(pid_t pid, uint64_t *start, bool *zombie)
{
    char path[64], buf[1024];
    const char *p;
    ssize_t n;
    int fd, field;

    snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return n == 0 ? -ENOENT : -errno;
    buf[n] = '\0';
    /* "pid (comm) S ..." where comm may hold spaces and parentheses. */
    p = strrchr(buf, ')');
    if (p == NULL || p[1] != ' ')
        return -EINVAL;
    p += 2;
    *zombie = *p == 'Z' || *p == 'X';
    for (field = 3; field < 22 && *p; p++) {
        if (*p == ' ')
            field++;
    }
    if (field != 22)
        return -EINVAL;
    *start = 0;
    for (; *p >= '0' && *p <= '9'; p++)
        *start = *start * 10 + (uint64_t)(*p - '0');
    return 0;
}

bool egpu__vcuda_proc_is_alive(pid_t pid, uint64_t start_ticks)
{
    uint64_t start = 0;
    bool zombie = false;
    int rc;

    if (pid <= 0)
        return false;
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return false;
    rc = egpu__vcuda_proc_start(pid, &start, &zombie);
    if (rc == -ENOENT)
        return false;
    if (rc == 0 && (zombie || (start_ticks != 0 && start != start_ticks)))
        return false;
    return true; /* alive, or /proc cannot tell: keep it */
}

/* Whether the process of slot sl is still there. */
static bool slot_alive(const struct shm_slot *sl)
{
    return egpu__vcuda_proc_is_alive(sl->pid, sl->start);
}

static bool is_me(const struct egpu__vcuda_region *h, const struct shm_slot *sl)
{
    return sl->pid == h->pid && sl->start == h->start;
}

/* Free dead slots (shared lock held). Returns how many. */
static int reclaim_locked(struct egpu__vcuda_region *h)
{
    struct shm *s = h->s;
    int n = 0;

    for (uint32_t i = 0; i < s->slots_hwm && i < REGION_SLOTS; i++) {
        struct shm_slot *sl = &s->slots[i];

        if (sl->pid == 0 || is_me(h, sl) || slot_alive(sl))
            continue;
        egpu_log(EGPU_LOG_INFO, "reclaimed the memory of a process that is gone pid=%d", sl->pid);
        for (int c = 0; c < EGPU_VCUDA_MAX_CARDS; c++) {
            uint64_t b = sl->bytes[c];

            s->cards[c].total_bytes -= b < s->cards[c].total_bytes ? b : s->cards[c].total_bytes;
        }
        memset(sl, 0, sizeof(*sl));
        n++;
    }
    return n;
}

/* Shared index of uuid, added to the table when absent. -1 when full. */
static int shared_card(struct shm *s, const struct egpu__vcuda_uuid *u)
{
    int free_at = -1;

    for (int c = 0; c < EGPU_VCUDA_MAX_CARDS; c++) {
        if (s->cards[c].in_use && memcmp(s->cards[c].uuid, u->b, 16) == 0)
            return c;
        if (!s->cards[c].in_use && free_at < 0)
            free_at = c;
    }
    if (free_at >= 0) {
        memcpy(s->cards[free_at].uuid, u->b, 16);
        s->cards[free_at].in_use = 1;
        s->cards[free_at].total_bytes = 0;
    }
    return free_at;
}

static void self_start(struct egpu__vcuda_region *h)
{
    bool zombie;

    if (h->start == 0 && egpu__vcuda_proc_start(h->pid, &h->start, &zombie) != 0)
        h->start = 0;
}

/* Our slot, claimed when needed (shared lock held). Returns 0 or -ENOSPC. */
static int claim_slot(struct egpu__vcuda_region *h)
{
    struct shm *s = h->s;

    if (h->slot >= 0 && is_me(h, &s->slots[h->slot]))
        return 0;
    h->slot = -1;
    for (int round = 0; round < 2; round++) {
        for (uint32_t i = 0; i < REGION_SLOTS; i++) {
            struct shm_slot *sl = &s->slots[i];

            if (sl->pid != 0)
                continue;
            memset(sl, 0, sizeof(*sl));
            sl->pid = h->pid;
            sl->start = h->start;
            sl->confirmed = s->audit; /* its bytes are what this process puts there */
            if (i + 1 > s->slots_hwm)
                s->slots_hwm = i + 1;
            h->slot = (int)i;
            return 0;
        }
        if (reclaim_locked(h) == 0)
            break;
    }
    egpu_log(EGPU_LOG_ERROR, "shared region %s: no free process slot (%d in use)",
             h->path[0] ? h->path : "(private)", REGION_SLOTS);
    return -ENOSPC;
}

/* After a new generation: forget the slot and card indexes of the old one
 * (reconcile registers this process's usage again from its ledger). */
static void rejoin(struct egpu__vcuda_region *h)
{
    uint64_t total = 0;

    h->slot = -1;
    for (unsigned c = 0; c < h->nlocal; c++) {
        h->shared[c] = -1;
        total += h->mine[c];
    }
    if (h->gen != 0)
        egpu_log(EGPU_LOG_INFO,
                 "shared region %s has a new generation: registered this process's usage again "
                 "bytes=%llu",
                 h->path[0] ? h->path : "(private)", (unsigned long long)total);
    h->gen = h->s->generation;
}

static int repair_level(struct egpu__vcuda_region *h);

/* Tampering is logged at warning level once per process (with the region's
 * other repairs), at info after. */
static void log_tamper(struct egpu__vcuda_region *h, const char *what)
{
    int level = repair_level(h); /* once: egpu_log may evaluate it twice */

    egpu_log(level,
             "shared region %s: %s was changed behind the interposer's back: repaired from this "
             "process's own ledger and the live slots; reservations wait until every live "
             "process has registered its usage again",
             h->path[0] ? h->path : "(private)", what);
}

/* Make the region agree with this process's ledger (shared lock held; see
 * DESIGN, tampering): find or claim our slot, put our bytes per card in it,
 * recompute every card's total from the live slots, and vouch for our slot
 * under the current audit. fresh: the generation is new (nothing there is
 * ours yet: not tampering). Whatever disagreed without a fault of this
 * process's mapping to explain it was written by someone else: the audit
 * changes, so reservations wait for every other live process to vouch for
 * its own slot again. */
static void reconcile(struct egpu__vcuda_region *h, bool fresh)
{
    struct shm *s = h->s;
    uint64_t want[EGPU_VCUDA_MAX_CARDS] = {0}, total = 0;
    unsigned faults = atomic_load_explicit(&h->faults, memory_order_acquire);
    bool excused = fresh || faults != h->faults_seen;
    const char *what = NULL;

    for (unsigned c = 0; c < h->nlocal; c++) {
        int i = -1;

        /* the first entry with the card's UUID, as every process finds it */
        if (h->shared[c] >= 0 || h->mine[c] > 0)
            i = shared_card(s, &h->uuid[c]);
        if (h->shared[c] >= 0 && i != h->shared[c] && !excused && h->mine[c] > 0)
            what = "the card table";
        h->shared[c] = i;
        if (i >= 0)
            want[i] += h->mine[c];
        total += h->mine[c];
    }
    if (h->slot >= 0 && !is_me(h, &s->slots[h->slot]))
        h->slot = -1;
    /* our slot when we hold memory: the first that names us (after the file
     * was mapped again, or a re-initialisation that kept the slots) */
    for (uint32_t i = 0; h->slot < 0 && total > 0 && i < s->slots_hwm && i < REGION_SLOTS; i++) {
        if (is_me(h, &s->slots[i]))
            h->slot = (int)i;
    }
    if (h->slot < 0 && total > 0) {
        if (!excused && h->gen != 0)
            what = "this process's slot";
        if (claim_slot(h) != 0)
            h->slot = -1;
    }
    if (h->slot >= 0) {
        struct shm_slot *sl = &s->slots[h->slot];

        for (int i = 0; i < EGPU_VCUDA_MAX_CARDS; i++) {
            if (sl->bytes[i] != want[i]) {
                if (!excused && what == NULL)
                    what = "this process's usage";
                sl->bytes[i] = want[i];
            }
        }
    }
    if (recompute_totals(s) && !excused && what == NULL)
        what = "a card's total";
    if (what != NULL) {
        s->audit = new_generation(s->audit);
        log_tamper(h, what);
    }
    if (h->slot >= 0)
        s->slots[h->slot].confirmed = s->audit;
    h->faults_seen = faults;
}

/* How many other live processes have not vouched for their slot under the
 * current audit (shared lock held); the slots of processes that are gone
 * are reclaimed first. */
static int unconfirmed(struct egpu__vcuda_region *h)
{
    struct shm *s = h->s;
    int n = 0;
    bool reclaimed = false;

    for (uint32_t i = 0; i < s->slots_hwm && i < REGION_SLOTS; i++) {
        const struct shm_slot *sl = &s->slots[i];

        if (sl->pid == 0 || is_me(h, sl) || sl->confirmed == s->audit)
            continue;
        if (!reclaimed) {
            reclaimed = true;
            reclaim_locked(h);
            if (sl->pid == 0)
                continue;
        }
        n++;
    }
    return n;
}

static uint64_t mono_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* CLOCK_MONOTONIC as of the last tick when that is at most COARSE_MAX_NS
 * coarse (a few ns to read, no system call), else exact. */
static uint64_t coarse_ns(void)
{
    static atomic_int coarse_ok = -1; /* unknown; every thread that looks finds the same */
    int ok = atomic_load_explicit(&coarse_ok, memory_order_relaxed);
    struct timespec ts;

    if (ok < 0) {
        ok = clock_getres(CLOCK_MONOTONIC_COARSE, &ts) == 0 && ts.tv_sec == 0 &&
             (uint64_t)ts.tv_nsec <= COARSE_MAX_NS;
        atomic_store_explicit(&coarse_ok, ok, memory_order_relaxed);
    }
    if (!ok || clock_gettime(CLOCK_MONOTONIC_COARSE, &ts) != 0)
        return mono_ns();
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* A repair is logged at warning level once per process (the event is
 * news), at info level after that (another process may truncate the file in
 * a loop). */
static int repair_level(struct egpu__vcuda_region *h)
{
    if (h == NULL || !h->warned) {
        if (h != NULL)
            h->warned = true;
        return EGPU_LOG_WARN;
    }
    return EGPU_LOG_INFO;
}

/* The lock word of this process (its start time read first). */
static uint64_t lock_word(const struct egpu__vcuda_region *h)
{
    return (uint64_t)(uint32_t)h->pid << 32 | (uint32_t)h->start;
}

/* Whether the process holding lock word w may still be alive (it is, or
 * cannot be told dead): as slot_alive, by pid and the start time's low bits. */
static bool holder_alive(uint64_t w)
{
    pid_t pid = (pid_t)(w >> 32);
    uint64_t start = 0;
    bool zombie = false;
    int rc;

    if (pid <= 0)
        return false;
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return false;
    rc = egpu__vcuda_proc_start(pid, &start, &zombie);
    if (rc == -ENOENT)
        return false;
    if (rc == 0 && (zombie || ((uint32_t)w != 0 && (uint32_t)start != (uint32_t)w)))
        return false;
    return true;
}

static void pause_ns(uint64_t ns)
{
    struct timespec ts = {0, (long)ns};

    (void)nanosleep(&ts, NULL);
}

/* Take the lock of s as me (see DESIGN). Returns 0, with *owner_died set
 * when it was taken over from a process that died holding it; or ETIMEDOUT
 * when one live holder kept it REGION_LOCK_TIMEOUT_S. A word equal to me is
 * this process's own, left by an operation whose mapping broke (the
 * caller's threads are serialised by h->mu): it is taken over too. */
static int lock_shared(struct shm *s, uint64_t me, bool *owner_died)
{
    uint64_t holder = 0, since = 0, probed = 0, nap = 10000;

    *owner_died = false;
    for (unsigned tries = 0;; tries++) {
        uint64_t cur = 0, now;

        if (atomic_compare_exchange_weak_explicit(&s->lock, &cur, me, memory_order_acquire,
                                                  memory_order_relaxed))
            return 0;
        if (cur == 0)
            continue; /* a spurious failure */
        if (cur == me) {
            *owner_died = true; /* our own, from a broken operation: half done */
            return 0;
        }
        if (tries < LOCK_SPINS)
            continue;
        if (tries < LOCK_SPINS + LOCK_YIELDS) {
            sched_yield();
            continue;
        }
        now = mono_ns();
        if (cur != holder) { /* progress: give the new holder its time */
            holder = cur;
            since = probed = now;
            nap = 10000;
        } else if (now - probed >= LOCK_PROBE_NS) {
            probed = now;
            if (!holder_alive(cur)) {
                if (atomic_compare_exchange_strong_explicit(
                        &s->lock, &cur, me, memory_order_acquire, memory_order_relaxed)) {
                    *owner_died = true;
                    return 0;
                }
                continue;
            }
        }
        if (now - since >= (uint64_t)REGION_LOCK_TIMEOUT_S * 1000000000ULL)
            return ETIMEDOUT;
        pause_ns(nap);
        nap = nap * 2 < MS_NS ? nap * 2 : MS_NS;
    }
}

/* Release the lock of s if me still holds it (a re-initialisation may have
 * freed it, and another process may have it now). */
static void unlock_shared(struct shm *s, uint64_t me)
{
    (void)atomic_compare_exchange_strong_explicit(&s->lock, &me, 0, memory_order_release,
                                                  memory_order_relaxed);
}

static struct shm *map_fd(int fd)
{
    void *p = mmap(NULL, sizeof(struct shm), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

    return p == MAP_FAILED ? NULL : p;
}

/* Map the file fd (of path) and watch the mapping for SIGBUS (sigbus.c),
 * counting into h->faults. Returns the mapping or NULL (errno set). */
static struct shm *map_watched(struct egpu__vcuda_region *h, int fd, const char *path)
{
    struct shm *s = map_fd(fd);
    int rc;

    if (s == NULL)
        return NULL;
    rc = egpu__vcuda_sigbus_watch(s, sizeof(*s), &h->faults);
    if (rc != 0)
        egpu_log(EGPU_LOG_WARN,
                 "shared region %s: not protected against truncation (a truncated file "
                 "would kill this process): %s",
                 path, strerror(-rc));
    return s;
}

/* Stop using h's mapping (h->mu held or h private to the caller). */
static void unmap(struct egpu__vcuda_region *h)
{
    if (h->s == NULL)
        return;
    if (h->path[0])
        egpu__vcuda_sigbus_unwatch(h->s);
    munmap(h->s, sizeof(struct shm));
    h->s = NULL;
}

/* Open path, under flock make it a valid region (creating or
 * re-initialising it), and map it, watched. remap: h had the file mapped
 * before (an empty file was truncated, not new). Returns 0 with *fd, *s,
 * *st set, or -errno. */
static int attach_file(struct egpu__vcuda_region *h, const char *path, bool remap, int *fd_out,
                       struct shm **s_out, struct stat *st, struct egpu_error *err)
{
    const char *why = NULL;
    bool created;
    struct shm *s;
    int fd, rc = 0;

    /* The directory is the container's: a symlink, FIFO, device or hard
     * link planted at the name is refused, never followed or written. */
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0666);
    if (fd < 0)
        return egpu_error_set(err, -errno, "shared region %s: cannot open: %s", path,
                              errno == ELOOP ? "it is a symbolic link" : strerror(errno));
    if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode) || st->st_nlink != 1) {
        rc = egpu_error_set(err, -EINVAL, "shared region %s: %s", path,
                            !S_ISREG(st->st_mode) ? "not a regular file" : "has other hard links");
        goto fail;
    }
    /* Every user of the container shares it; fails harmlessly if not ours. */
    (void)fchmod(fd, 0666);
    while (flock(fd, LOCK_EX) != 0) {
        if (errno != EINTR) {
            rc = egpu_error_errno(err, "shared region %s: flock", path);
            goto fail;
        }
    }
    if (fstat(fd, st) != 0) {
        rc = egpu_error_errno(err, "shared region %s: fstat", path);
        goto unlock;
    }
    created = st->st_size == 0 && !remap;
    if (st->st_size != (off_t)sizeof(struct shm)) {
        if (!created)
            why =
                st->st_size < (off_t)sizeof(struct shm) ? "truncated" : "of another layout (size)";
        if (ftruncate(fd, (off_t)sizeof(struct shm)) != 0) {
            rc = egpu_error_errno(err, "shared region %s: cannot size it", path);
            goto unlock;
        }
        if (fstat(fd, st) != 0) {
            rc = -errno;
            goto unlock;
        }
    }
    s = map_watched(h, fd, path);
    if (s == NULL) {
        rc = egpu_error_errno(err, "shared region %s: mmap", path);
        goto unlock;
    }
    if (created) {
        init_shm(s);
    } else if (why != NULL || !header_ok(s, NULL, &why)) {
        int level = repair_level(h); /* once: egpu_log may evaluate it twice */

        egpu_log(level, "shared region %s is %s: re-initialising it", path, why);
        reinit_keeping_slots(s);
    } else {
        uint64_t free_word = 0, w = (uint64_t)(uint32_t)getpid() << 32;

        if (atomic_compare_exchange_strong_explicit(&s->lock, &free_word, w, memory_order_acquire,
                                                    memory_order_relaxed)) {
            if (recompute_totals(s))
                egpu_log(EGPU_LOG_WARN,
                         "shared region %s: totals disagreed with the slots: repaired", path);
            unlock_shared(s, w);
        }
    }
    *s_out = s;
    *fd_out = fd;
unlock:
    flock(fd, LOCK_UN);
    if (rc == 0)
        return 0;
fail:
    close(fd);
    return rc;
}

/* Re-initialise h's current region in place when it is still bad (the
 * file under flock). force: even with a good header (a lock no one gave
 * back). */
static void repair(struct egpu__vcuda_region *h, bool force, const char *reason)
{
    const char *why = NULL;
    struct stat st;

    if (h->fd >= 0) {
        while (flock(h->fd, LOCK_EX) != 0 && errno == EINTR)
            ;
        if (fstat(h->fd, &st) == 0 && st.st_size != (off_t)sizeof(struct shm)) {
            why = st.st_size < (off_t)sizeof(struct shm) ? "truncated" : "of another layout (size)";
            if (ftruncate(h->fd, (off_t)sizeof(struct shm)) != 0)
                why = "unsizable";
        }
    }
    if (why != NULL || force || !header_ok(h->s, h->known, &why)) {
        int level = repair_level(h);

        egpu_log(level, "shared region %s is %s: re-initialising it",
                 h->path[0] ? h->path : "(private)", why ? why : reason);
        reinit_keeping_slots(h->s);
    }
    if (h->fd >= 0)
        flock(h->fd, LOCK_UN);
}

/* After mapping the file again: a lock word of this process's in it was
 * left by an operation whose mapping broke under it; finish that operation
 * (the totals from the slots) and free the lock. */
static void release_stale(struct egpu__vcuda_region *h)
{
    uint64_t me = lock_word(h);

    if (atomic_load_explicit(&h->s->lock, memory_order_acquire) == me) {
        recompute_totals(h->s);
        unlock_shared(h->s, me);
    }
}

/* Map the file at h->path again (after fork, a fault, or when it was
 * replaced), dropping the old mapping. */
static int reattach(struct egpu__vcuda_region *h)
{
    struct egpu_error err = {0};
    unsigned faults = atomic_load_explicit(&h->faults, memory_order_acquire);
    struct stat st;
    struct shm *s;
    int fd, rc;

    rc = attach_file(h, h->path, h->s != NULL && !h->forked, &fd, &s, &st, &err);
    if (rc) {
        egpu_log(EGPU_LOG_ERROR, "%s", err.msg);
        return rc;
    }
    unmap(h);
    if (h->fd >= 0)
        close(h->fd);
    h->s = s;
    h->fd = fd;
    h->dev = st.st_dev;
    h->ino = st.st_ino;
    h->slot = -1;
    h->faults_ok = faults; /* a fault while attaching brings us back here */
    release_stale(h);
    return 0;
}

/* Whether the file at h->path is still the one mapped, at full size. */
static int file_state(const struct egpu__vcuda_region *h)
{
    struct stat st;

    if (stat(h->path, &st) != 0 || st.st_dev != h->dev || st.st_ino != h->ino)
        return 1; /* gone or replaced: map the new one */
    if (st.st_size != (off_t)sizeof(struct shm))
        return 2; /* truncated or grown in place */
    return 0;
}

/* Look at the file when it is due (see DESIGN) or when force: map it again
 * after a fork or a fault or when it was replaced, repair it in place when
 * its size changed. Returns 0 or -EIO. */
static int check_file(struct egpu__vcuda_region *h, bool force)
{
    unsigned faults = atomic_load_explicit(&h->faults, memory_order_acquire);
    uint64_t now = coarse_ns();
    int state;

    if (!force && !h->forked && faults == h->faults_ok && h->checked_ns != 0 &&
        now - h->checked_ns < REGION_CHECK_NS)
        return 0;
    h->checked_ns = now ? now : 1;
    state = h->forked || faults != h->faults_ok ? 1 : file_state(h);
    if (state == 1) {
        if (faults != h->faults_ok && !h->forked) {
            int level = repair_level(h);

            egpu_log(level, "shared region %s was truncated under this process: mapping it again",
                     h->path);
        }
        if (reattach(h) != 0)
            return -EIO;
        h->forked = false;
    } else if (state == 2) {
        repair(h, false, "truncated");
    }
    return 0;
}

/* Take the shared lock of a valid region (h->mu held). Returns 0 or -EIO. */
static int enter(struct egpu__vcuda_region *h)
{
    self_start(h); /* before the first lock: it is part of the lock word */
    for (int tries = 0; tries < ENTER_TRIES; tries++) {
        const char *why;
        bool owner_died;
        int rc;

        if (h->path[0] && check_file(h, false) != 0)
            return -EIO;
        if (!header_ok(h->s, h->known, &why)) {
            /* Zeros from a fault, or a file replaced or cut short: look at
             * the file first; only a bad file is repaired in place. */
            if (h->path[0] && check_file(h, true) != 0)
                return -EIO;
            if (!header_ok(h->s, h->known, &why))
                repair(h, false, why);
            continue;
        }
        rc = lock_shared(h->s, lock_word(h), &owner_died);
        if (rc == ETIMEDOUT) {
            repair(h, true, "locked for too long");
            continue;
        }
        if (owner_died) {
            recompute_totals(h->s);
            egpu_log(EGPU_LOG_INFO,
                     "shared region %s: a process died holding its lock: totals "
                     "recomputed from the slots",
                     h->path[0] ? h->path : "(private)");
        }
        if (!header_ok(h->s, h->known, &why)) {
            unlock_shared(h->s, lock_word(h));
            continue;
        }
        {
            bool fresh = h->s->generation != h->gen;

            if (fresh)
                rejoin(h);
            reconcile(h, fresh);
        }
        return 0;
    }
    egpu_log(EGPU_LOG_ERROR, "shared region %s cannot be used", h->path[0] ? h->path : "(private)");
    return -EIO;
}

/* Release the shared lock; when the mapping broke during the operation,
 * map the file again at once and free the lock there if it is still ours
 * (other processes would wait for it). */
static void leave(struct egpu__vcuda_region *h)
{
    unlock_shared(h->s, lock_word(h));
    if (h->path[0] && atomic_load_explicit(&h->faults, memory_order_acquire) != h->faults_ok)
        (void)check_file(h, true);
}

int egpu__vcuda_region_open(struct egpu__vcuda_region **out, const char *dir,
                            struct egpu_error *err)
{
    struct egpu__vcuda_region *h = egpu_calloc(1, sizeof(*h));
    int rc;

    if (h == NULL)
        return egpu_error_set(err, -ENOMEM, "shared region: out of memory");
    pthread_mutex_init(&h->mu, NULL);
    h->fd = -1;
    h->slot = -1;
    h->pid = getpid();
    for (int c = 0; c < EGPU_VCUDA_MAX_CARDS; c++)
        h->shared[c] = -1;
    if (dir && dir[0]) {
        struct stat st;

        if (snprintf(h->path, sizeof(h->path), "%s/%s", dir, EGPU_VCUDA_REGION_NAME) >=
            (int)sizeof(h->path)) {
            rc = egpu_error_set(err, -ENAMETOOLONG, "shared region in %s: path too long", dir);
            goto fail;
        }
        rc = attach_file(h, h->path, false, &h->fd, &h->s, &st, err);
        if (rc)
            goto fail;
        h->dev = st.st_dev;
        h->ino = st.st_ino;
        h->checked_ns = coarse_ns();
    } else {
        void *p = mmap(NULL, sizeof(struct shm), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                       -1, 0);

        if (p == MAP_FAILED) {
            rc = egpu_error_errno(err, "private region: mmap");
            goto fail;
        }
        h->s = p;
        init_shm(h->s);
    }
    *out = h;
    return 0;
fail:
    pthread_mutex_destroy(&h->mu);
    egpu_free(h);
    return rc;
}

void egpu__vcuda_region_leave(struct egpu__vcuda_region *h)
{
    if (h == NULL)
        return;
    pthread_mutex_lock(&h->mu);
    if (h->slot >= 0 && enter(h) == 0) {
        struct shm *s = h->s;

        if (h->slot >= 0 && is_me(h, &s->slots[h->slot])) {
            struct shm_slot *sl = &s->slots[h->slot];

            for (int c = 0; c < EGPU_VCUDA_MAX_CARDS; c++) {
                uint64_t b = sl->bytes[c];

                s->cards[c].total_bytes -=
                    b < s->cards[c].total_bytes ? b : s->cards[c].total_bytes;
            }
            memset(sl, 0, sizeof(*sl));
        }
        leave(h);
    }
    h->slot = -1;
    memset(h->mine, 0, sizeof(h->mine));
    pthread_mutex_unlock(&h->mu);
}

void egpu__vcuda_region_close(struct egpu__vcuda_region *h)
{
    if (h == NULL)
        return;
    egpu__vcuda_region_leave(h);
    unmap(h);
    if (h->fd >= 0)
        close(h->fd);
    pthread_mutex_destroy(&h->mu);
    egpu_free(h);
}

int egpu__vcuda_region_card(struct egpu__vcuda_region *h, const struct egpu__vcuda_uuid *u,
                            int *card)
{
    int rc = 0;

    pthread_mutex_lock(&h->mu);
    for (unsigned c = 0; c < h->nlocal; c++) {
        if (memcmp(&h->uuid[c], u, sizeof(*u)) == 0) {
            *card = (int)c;
            goto out;
        }
    }
    if (h->nlocal == EGPU_VCUDA_MAX_CARDS) {
        rc = -ENOSPC;
        goto out;
    }
    h->uuid[h->nlocal] = *u;
    h->shared[h->nlocal] = -1;
    h->mine[h->nlocal] = 0;
    *card = (int)h->nlocal++;
out:
    pthread_mutex_unlock(&h->mu);
    return rc;
}

/* Shared index of local card c in the current generation (lock held). */
static int shared_index(struct egpu__vcuda_region *h, int c)
{
    if (h->shared[c] < 0)
        h->shared[c] = shared_card(h->s, &h->uuid[c]);
    return h->shared[c];
}

int egpu__vcuda_region_reserve(struct egpu__vcuda_region *h, int card, uint64_t bytes,
                               uint64_t limit_bytes)
{
    struct shm *s;
    int rc = 0, i;

    if (bytes == 0)
        return 0;
    pthread_mutex_lock(&h->mu);
    if (card < 0 || (unsigned)card >= h->nlocal) {
        rc = -EINVAL;
        goto out;
    }
    if (enter(h) != 0) {
        rc = -EIO;
        goto out;
    }
    s = h->s;
    i = shared_index(h, card);
    if (i < 0) {
        rc = -ENOSPC;
        goto unlock;
    }
    for (uint64_t waited = 0; unconfirmed(h) > 0; waited += CONFIRM_POLL_NS) {
        /* Usage of a live process is unknown: give it a moment to register
         * again (a busy process does at its next call), else refuse. */
        if (waited >= CONFIRM_WAIT_NS) {
            egpu_log(EGPU_LOG_DEBUG,
                     "shared region %s: refused %llu bytes: a live process has not registered "
                     "its usage again since the region was reset or changed",
                     h->path[0] ? h->path : "(private)", (unsigned long long)bytes);
            rc = -ENOMEM;
            goto unlock;
        }
        leave(h);
        pause_ns(CONFIRM_POLL_NS);
        if (enter(h) != 0) {
            rc = -EIO;
            goto out;
        }
        s = h->s;
        i = shared_index(h, card);
        if (i < 0) {
            rc = -ENOSPC;
            goto unlock;
        }
    }
    if (bytes > limit_bytes || s->cards[i].total_bytes > limit_bytes - bytes) {
        reclaim_locked(h);
        if (bytes > limit_bytes || s->cards[i].total_bytes > limit_bytes - bytes) {
            rc = -ENOMEM;
            goto unlock;
        }
    }
    rc = claim_slot(h);
    if (rc)
        goto unlock;
    s->slots[h->slot].bytes[i] += bytes;
    s->cards[i].total_bytes += bytes;
    h->mine[card] += bytes;
unlock:
    leave(h);
out:
    pthread_mutex_unlock(&h->mu);
    return rc;
}

void egpu__vcuda_region_release(struct egpu__vcuda_region *h, int card, uint64_t bytes)
{
    uint64_t take;

    pthread_mutex_lock(&h->mu);
    if (card < 0 || (unsigned)card >= h->nlocal)
        goto out;
    take = bytes < h->mine[card] ? bytes : h->mine[card];
    if (enter(h) == 0) { /* reconciled with the ledger: take it off both */
        struct shm *s = h->s;
        int i = h->shared[card];

        if (i >= 0 && h->slot >= 0 && is_me(h, &s->slots[h->slot])) {
            uint64_t *sb = &s->slots[h->slot].bytes[i];
            uint64_t t = take < *sb ? take : *sb;

            *sb -= t;
            s->cards[i].total_bytes -= t < s->cards[i].total_bytes ? t : s->cards[i].total_bytes;
        }
        h->mine[card] -= take;
        leave(h);
    } else {
        h->mine[card] -= take; /* the next reconcile puts it right */
    }
out:
    pthread_mutex_unlock(&h->mu);
}

int egpu__vcuda_region_used(struct egpu__vcuda_region *h, int card, uint64_t *used_bytes)
{
    int rc = 0, i;

    pthread_mutex_lock(&h->mu);
    if (card < 0 || (unsigned)card >= h->nlocal) {
        rc = -EINVAL;
        goto out;
    }
    if (enter(h) != 0) {
        rc = -EIO;
        goto out;
    }
    reclaim_locked(h);
    i = shared_index(h, card);
    *used_bytes = i >= 0 ? h->s->cards[i].total_bytes : h->mine[card];
    leave(h);
out:
    pthread_mutex_unlock(&h->mu);
    return rc;
}

uint64_t egpu__vcuda_region_mine(struct egpu__vcuda_region *h, int card)
{
    uint64_t v = 0;

    pthread_mutex_lock(&h->mu);
    if (card >= 0 && (unsigned)card < h->nlocal)
        v = h->mine[card];
    pthread_mutex_unlock(&h->mu);
    return v;
}

int egpu__vcuda_region_reclaim(struct egpu__vcuda_region *h)
{
    int n;

    pthread_mutex_lock(&h->mu);
    if (enter(h) != 0) {
        pthread_mutex_unlock(&h->mu);
        return -EIO;
    }
    n = reclaim_locked(h);
    leave(h);
    pthread_mutex_unlock(&h->mu);
    return n;
}

uint64_t egpu__vcuda_region_generation(struct egpu__vcuda_region *h)
{
    uint64_t gen;

    pthread_mutex_lock(&h->mu); /* h->s changes when the file is mapped again */
    gen = __atomic_load_n(&h->s->generation, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&h->mu);
    return gen;
}

void egpu__vcuda_region_atfork_prepare(struct egpu__vcuda_region *h)
{
    if (h)
        pthread_mutex_lock(&h->mu);
}

void egpu__vcuda_region_atfork_parent(struct egpu__vcuda_region *h)
{
    if (h)
        pthread_mutex_unlock(&h->mu);
}

void egpu__vcuda_region_atfork_child(struct egpu__vcuda_region *h)
{
    if (h == NULL)
        return;
    h->pid = getpid();
    h->start = 0;
    h->slot = -1;
    h->forked = h->path[0] != '\0'; /* own open file description for flock */
    memset(h->mine, 0, sizeof(h->mine));
    pthread_mutex_unlock(&h->mu);
}

int egpu__vcuda_region_debug_lock(struct egpu__vcuda_region *h)
{
    int rc;

    pthread_mutex_lock(&h->mu);
    rc = enter(h);
    pthread_mutex_unlock(&h->mu);
    return rc; /* the shared lock stays held */
}

int egpu__vcuda_region_debug_set_total(struct egpu__vcuda_region *h, int card, uint64_t bytes)
{
    int rc = -EINVAL;

    pthread_mutex_lock(&h->mu);
    if (card >= 0 && (unsigned)card < h->nlocal && enter(h) == 0) {
        int i = shared_index(h, card);

        if (i >= 0) {
            h->s->cards[i].total_bytes = bytes;
            rc = 0;
        }
        leave(h);
    }
    pthread_mutex_unlock(&h->mu);
    return rc;
}

int egpu__vcuda_region_debug_zero_usage(struct egpu__vcuda_region *h)
{
    struct shm *s;

    pthread_mutex_lock(&h->mu);
    s = h->s;
    for (int c = 0; c < EGPU_VCUDA_MAX_CARDS; c++)
        s->cards[c].total_bytes = 0;
    for (uint32_t i = 0; i < s->slots_hwm && i < REGION_SLOTS; i++)
        memset(s->slots[i].bytes, 0, sizeof(s->slots[i].bytes));
    pthread_mutex_unlock(&h->mu);
    return 0;
}

size_t egpu__vcuda_region_file_bytes(void)
{
    return sizeof(struct shm);
}

int egpu__vcuda_region_decode(const void *buf, size_t len, struct egpu__vcuda_region_view *out,
                              struct egpu_error *err)
{
    struct shm *s;
    const char *why = NULL;
    int rc = 0;

    if (len != sizeof(struct shm))
        return egpu_error_set(err, -EINVAL, "%s (size %zu bytes, expected %zu)",
                              len < sizeof(struct shm) ? "truncated" : "of another layout", len,
                              sizeof(struct shm));
    /* A copy: buf need not be aligned, and header_ok reads it as the
     * interposer reads its mapping. */
    s = egpu_malloc(sizeof(*s));
    if (s == NULL)
        return egpu_error_set(err, -ENOMEM, "out of memory");
    memcpy(s, buf, sizeof(*s));
    if (!header_ok(s, NULL, &why)) {
        rc = egpu_error_set(err, -EINVAL, "%s (magic=0x%llx version=%u size=%u slots_hwm=%u)", why,
                            (unsigned long long)s->magic, s->version, s->size, s->slots_hwm);
        goto out_free;
    }
    memset(out, 0, sizeof(*out));
    out->generation = s->generation;
    out->audit = s->audit;
    out->lock = atomic_load_explicit(&s->lock, memory_order_relaxed);
    out->slots_hwm = s->slots_hwm;
    for (int c = 0; c < EGPU_VCUDA_MAX_CARDS; c++) {
        memcpy(out->cards[c].uuid.b, s->cards[c].uuid, 16);
        out->cards[c].in_use = s->cards[c].in_use != 0;
        out->cards[c].total_bytes = s->cards[c].total_bytes;
    }
    /* The slots the interposer looks at: [0, slots_hwm), header_ok bounded it. */
    for (uint32_t i = 0; i < s->slots_hwm; i++) {
        const struct shm_slot *sl = &s->slots[i];
        struct egpu__vcuda_region_view_slot *v = &out->slots[out->nslots];

        if (sl->pid == 0)
            continue;
        v->index = i;
        v->pid = sl->pid;
        v->start = sl->start;
        v->confirmed = sl->confirmed == s->audit;
        memcpy(v->bytes, sl->bytes, sizeof(v->bytes));
        out->nslots++;
    }
out_free:
    egpu_free(s);
    return rc;
}
