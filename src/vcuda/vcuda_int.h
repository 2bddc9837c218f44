/* vcuda/vcuda_int.h - the modules of the CUDA interposer libegpu-vcuda.so.
 *
 *   config.c   the configuration: <dir>/vcuda.conf or EGPU_VCUDA_* variables,
 *              parsed strictly; a broken file fails closed;
 *   sizes.c    what an allocation counts: 2 MiB granularity, array sizes;
 *   track.c    per-process map from a device pointer, handle or array to the
 *              card and bytes it was counted as, so frees give back exactly that;
 *   region.c   the shared region <dir>/vcuda-memory.shm: per-card usage of all
 *              processes of the container, a slot per live process, dead
 *              processes reclaimed, a corrupted region re-initialised;
 *   sigbus.c   a SIGBUS handler that turns an access to a truncated region
 *              file into an access to zeros, and tells the region's owner;
 *   hooks.c    initialisation, the real entry points, dlsym, cuGetProcAddress,
 *              fork handling and the device -> card map;
 *   memory.c   the memory wrappers (allocations, frees, contexts, memory info);
 *   launch.c   the launch wrappers (the compute limit lives in throttle.c);
 *   hook_table.h  the list of hooked symbols (one X-macro).
 *
 * Directories (docs/agent.md, "What a container can reach"): the agent
 * mounts its own allocation dir read-only at /etc/elastic-gpu (vcuda.conf,
 * limits.json: the container cannot change them) and, for a shared card,
 * the dir's subdir shared/ read-write at /etc/elastic-gpu/shared, the only
 * place the container can write. The configuration gives two directories:
 * cfg->dir, where vcuda.conf was looked for, and cfg->region_dir, where the
 * shared regions (EGPU_VCUDA_REGION_NAME, EGPU_VCUDA_CORE_REGION_NAME) live:
 * <dir>/shared when that is a directory (not a link to one), else <dir>
 * itself (an allocation dir of an older agent, or a plain EGPU_VCUDA_DIR of
 * tests and benches). Contract with region.c and throttle.c: they get
 * region_dir, a directory every process of the container can write, so
 * every name in it is the container's: each file there is opened with
 * O_NOFOLLOW (and checked with fstat) and nothing read there is believed
 * without checks.
 *
 * Units: device memory in bytes (uint64_t) inside, MiB only at the
 * configuration's edge (*_mib); percentages of one card (*_pct).
 * Nothing here is exported from the library: the version script built from
 * hook_table.h exports the hooked symbols and dlsym only.
 */
#ifndef EGPU_VCUDA_INT_H
#define EGPU_VCUDA_INT_H

#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "egpu/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define EGPU_VCUDA_MAX_CARDS           16 /* cards one process can have limited (and CUDA ordinals seen) */
#define EGPU_VCUDA_GRANULARITY_BYTES   (2ULL << 20) /* every allocation counts a multiple of this */
#define EGPU_VCUDA_CONF_NAME           "vcuda.conf"
#define EGPU_VCUDA_PRELOAD_PATH        "/etc/ld.so.preload" /* the agent mounts its list here */
#define EGPU_VCUDA_SHARED_SUBDIR       "shared" /* the regions' directory below the conf's */
#define EGPU_VCUDA_REGION_NAME         "vcuda-memory.shm"
#define EGPU_VCUDA_CORE_REGION_NAME    "vcuda-core.shm"
#define EGPU_VCUDA_CONTEXT_MIB_DEFAULT 300 /* a context's charge when unmeasured, unknown model */
#define EGPU_VCUDA_MEMORY_MIB_MAX      16777216 /* 16 TiB: largest accepted limit per card */
#define EGPU_VCUDA_CONTEXT_MIB_MAX     65536
#define EGPU_VCUDA_CONF_MAX_BYTES      65536                /* a larger vcuda.conf is corrupted */
#define EGPU_VCUDA_CONTEXT_LOCK_NAME   "vcuda-context.lock" /* serialises context measuring */

/* ------------------------------------------------------------------------ */
/* GPU UUIDs (config.c)                                                     */

/* A card's 16-byte UUID as cuDeviceGetUuid gives it: the 32 hex digits of the
 * NVML/agent string "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", in order. */
struct egpu__vcuda_uuid {
    uint8_t b[16];
};

#define EGPU_VCUDA_UUID_STR_MAX 41 /* "GPU-" + 36 + NUL */

/* Parse "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (hex digits in either
 * case, dashes exactly there; "GPU-" required) into *out. Returns 0 or
 * -EINVAL (out unchanged). Source of the format: NVML's nvmlDeviceGetUUID. */
int egpu__vcuda_uuid_parse(const char *s, struct egpu__vcuda_uuid *out) EGPU_MUST_CHECK;

/* Format u as "GPU-xxxxxxxx-..." (lowercase) into buf (at least
 * EGPU_VCUDA_UUID_STR_MAX bytes). Returns buf. */
char *egpu__vcuda_uuid_format(const struct egpu__vcuda_uuid *u, char *buf);

/* ------------------------------------------------------------------------ */
/* Configuration (config.c)                                                 */

enum egpu__vcuda_source {
    EGPU_VCUDA_SRC_NONE = 0, /* neither file nor variables: the interposer refuses CUDA */
    EGPU_VCUDA_SRC_ENV = 1,  /* EGPU_VCUDA_* environment variables */
    EGPU_VCUDA_SRC_FILE = 2, /* <dir>/vcuda.conf */
};

struct egpu__vcuda_config {
    char dir[PATH_MAX];             /* allocation directory (vcuda.conf lives here) */
    char region_dir[PATH_MAX];      /* the shared regions' directory: <dir>/shared or dir */
    enum egpu__vcuda_source source; /* where the settings came from */
    bool fail_closed;               /* the configuration was broken: memory limit 0 */
    unsigned ngpus;                 /* cards the limits apply to; 0 = every visible card */
    struct egpu__vcuda_uuid gpus[EGPU_VCUDA_MAX_CARDS];
    bool has_memory;         /* a memory limit applies */
    uint64_t memory_mib;     /* per card, MiB (0 only when failing closed) */
    bool has_core;           /* a compute limit applies */
    unsigned core_pct;       /* 1..100 */
    unsigned core_limit_pct; /* core_pct..100 */
    uint64_t context_mib;    /* device memory counted per context, MiB */
    bool has_context_mib;    /* EGPU_VCUDA_CONTEXT_MIB given: charge it, measure nothing */
    uint64_t ctx_extra_mib;  /* EGPU_VCUDA_CONTEXT_EXTRA_MIB: per process and card, MiB */
    int log_level;           /* EGPU_LOG_* */
};

/* Fill *cfg with the defaults: no limits, dir and region_dir as given (may
 * be NULL: ""), context_mib EGPU_VCUDA_CONTEXT_MIB_DEFAULT, log level warn.
 * Touches no file (egpu__vcuda_config_load picks region_dir). */
void egpu__vcuda_config_defaults(struct egpu__vcuda_config *cfg, const char *dir);

/* Apply one setting: key is one of EGPU_VCUDA_GPUS, EGPU_VCUDA_MEMORY_MIB
 * (MiB per card, 0..16777216; 0 = no memory limit, which vcuda.conf allows
 * only with EGPU_VCUDA_CORE=100), EGPU_VCUDA_CORE (percent, 1..100),
 * EGPU_VCUDA_CORE_LIMIT (percent, 1..100; checked against the core by
 * egpu__vcuda_config_check), EGPU_VCUDA_CONTEXT_MIB (MiB, 0..65536),
 * EGPU_VCUDA_CONTEXT_EXTRA_MIB (MiB, 0..65536; default 0),
 * EGPU_VCUDA_LOG_LEVEL (error|warn|info|debug). Numbers are decimal digits
 * only. Returns 0; -ENOENT for an unknown key, -EINVAL for a malformed value,
 * -ERANGE for a value out of range; err->msg names the key and the allowed
 * values. */
int egpu__vcuda_config_set(struct egpu__vcuda_config *cfg, const char *key, const char *value,
                           struct egpu_error *err) EGPU_MUST_CHECK;

/* Checks across keys once all are set: EGPU_VCUDA_CORE_LIMIT needs
 * EGPU_VCUDA_CORE and lies in core..100 (it defaults to the core).
 * Returns 0 or -EINVAL with err->msg naming the keys. */
int egpu__vcuda_config_check(struct egpu__vcuda_config *cfg,
                             struct egpu_error *err) EGPU_MUST_CHECK;

/* Parse the text of a vcuda.conf (len bytes, need not be NUL-terminated):
 * lines KEY=VALUE with the keys above, blank lines and '#' comments;
 * whitespace around keys and values is ignored; every line ends with '\n'
 * (a last line without one means the file was truncated); no NUL bytes;
 * each key at most once; EGPU_VCUDA_MEMORY_MIB and EGPU_VCUDA_CORE are
 * required, and EGPU_VCUDA_MEMORY_MIB=0 only with EGPU_VCUDA_CORE=100 (a
 * share of one card has a memory limit: -ERANGE). path names the file in
 * messages. Returns 0, or a negative
 * errno with err->msg "<path> line N: <key>: <reason>"; on error *cfg holds
 * every line that parsed (so a valid EGPU_VCUDA_GPUS still says which cards). */
int egpu__vcuda_config_parse(struct egpu__vcuda_config *cfg, const char *text, size_t len,
                             const char *path, struct egpu_error *err) EGPU_MUST_CHECK;

/* Switch *cfg to the documented safe behaviour after a broken configuration:
 * memory limit 0 MiB on the configured cards (every card when the card list
 * did not parse), no compute limit. */
void egpu__vcuda_config_fail_closed(struct egpu__vcuda_config *cfg);

/* Load the configuration. default_dir is the fixed allocation directory
 * (EGPU_VCUDA_DEFAULT_DIR, "/etc/elastic-gpu", where the agent mounts it);
 * envp is the environment (NULL-terminated "NAME=value" strings).
 *   1. <default_dir>/vcuda.conf if it exists: it wins over everything
 *      (EGPU_VCUDA_DIR included), so no variable escapes it;
 *   2. else <$EGPU_VCUDA_DIR>/vcuda.conf if EGPU_VCUDA_DIR is set and the
 *      file exists;
 *   3. else the EGPU_VCUDA_* variables (every one of them must be a known
 *      key; EGPU_VCUDA_DIR names the directory);
 *   4. nothing set: source NONE, no limits known (returns 0: the inspector
 *      reads a directory so; the interposer refuses every CUDA call).
 * vcuda.conf is opened with O_NOFOLLOW | O_NONBLOCK and must be a regular
 * file: a link, FIFO or device there is a broken configuration.
 * Returns 0 with *cfg ready; or a negative errno for a broken configuration
 * (unreadable, truncated or corrupted file, bad variable) with err->msg the
 * one log line to print (it names the file or variable and the key) and *cfg
 * already failed closed. cfg->dir is the directory used; cfg->region_dir is
 * <cfg->dir>/shared when that is a directory (lstat, so not a link), else
 * cfg->dir (see the top of this file). */
int egpu__vcuda_config_load(struct egpu__vcuda_config *cfg, const char *default_dir,
                            char *const *envp, struct egpu_error *err);

/* Whether the ld.so.preload(8) list at path (NUL-terminated; normally
 * EGPU_VCUDA_PRELOAD_PATH) names the shared object self (its path as the
 * dynamic loader has it, dladdr's dli_fname): an entry equal to self, or
 * with the same last path component. Reads at most 64 KiB; path is opened
 * O_NOFOLLOW and must be a regular file. Returns false for no file, a link,
 * a FIFO, an unreadable one, a list that does not name self, or self NULL
 * or empty; never fails otherwise. Allocates nothing that outlives it. */
bool egpu__vcuda_preloaded(const char *path, const char *self);

/* Whether the limits apply to the card with UUID u (always with no card list). */
bool egpu__vcuda_config_covers(const struct egpu__vcuda_config *cfg,
                               const struct egpu__vcuda_uuid *u);

/* Position of u in the card list, or -1. */
int egpu__vcuda_config_gpu_index(const struct egpu__vcuda_config *cfg,
                                 const struct egpu__vcuda_uuid *u);

/* ------------------------------------------------------------------------ */
/* What an allocation counts (sizes.c)                                      */

/* bytes rounded up to EGPU_VCUDA_GRANULARITY_BYTES; UINT64_MAX when that
 * overflows (such a request can never fit). */
uint64_t egpu__vcuda_round(uint64_t bytes);

/* Bytes of a CUDA array: width x max(height,1) x max(depth,1) elements of
 * channels x the format's element size (CUDA driver API CUarray_format),
 * summed over levels (>= 1) mipmap levels, each halving width, height and,
 * for 3D arrays (not layered, not cubemap), depth, never below 1. Formats
 * of unknown size count 16 bytes per element (an upper bound). Arrays with
 * CUDA_ARRAY3D_SPARSE or CUDA_ARRAY3D_DEFERRED_MAPPING have no memory of
 * their own (their backing comes from cuMemCreate): 0. UINT64_MAX on
 * overflow. Not rounded. */
uint64_t egpu__vcuda_array_bytes(uint64_t width, uint64_t height, uint64_t depth, int format,
                                 unsigned channels, unsigned flags, unsigned levels);

/* ------------------------------------------------------------------------ */
/* Per-process map of counted objects (track.c)                             */

enum egpu__vcuda_kind {
    EGPU_VCUDA_PTR = 1, /* device pointer: cuMemAlloc*, pitch, managed, async, pools */
    EGPU_VCUDA_VMM,     /* CUmemGenericAllocationHandle from cuMemCreate */
    EGPU_VCUDA_ARRAY,   /* CUarray */
    EGPU_VCUDA_MIPMAP,  /* CUmipmappedArray */
    EGPU_VCUDA_CTX,     /* CUcontext from cuCtxCreate */
    EGPU_VCUDA_POOL,    /* unused since memory.c keeps its pools in a table of its own */
};

struct egpu__vcuda_track_entry {
    uint64_t key;   /* pointer or handle value */
    uint64_t bytes; /* what it counted */
    uint64_t ctx;   /* CUcontext it lives in (freed with it); 0 = none */
    uint8_t kind;   /* enum egpu__vcuda_kind; 0 = empty slot */
    int8_t card;    /* the region's local card id */
};

/* Open addressing, linear probing, backward-shift deletion; not
 * thread-safe (hooks.c locks). Zero-initialised is a valid empty map. */
struct egpu__vcuda_track {
    struct egpu__vcuda_track_entry *slots; /* NULL until the first put */
    size_t mask;                           /* size - 1 */
    size_t count;
};

/* Insert (kind, key) counted as bytes on card, made in context ctx (0 =
 * not bound to a context). Returns 0, -EEXIST (already there, unchanged) or
 * -ENOMEM (map unchanged). */
int egpu__vcuda_track_put(struct egpu__vcuda_track *t, int kind, uint64_t key, int card,
                          uint64_t bytes, uint64_t ctx) EGPU_MUST_CHECK;
/* Remove (kind, key), copying its entry to *out. Returns true when found. */
bool egpu__vcuda_track_take(struct egpu__vcuda_track *t, int kind, uint64_t key,
                            struct egpu__vcuda_track_entry *out);
/* Copy the entry of (kind, key) to *out without removing it. Returns true
 * when found. */
bool egpu__vcuda_track_get(const struct egpu__vcuda_track *t, int kind, uint64_t key,
                           struct egpu__vcuda_track_entry *out);
/* Remove every entry made in context ctx (not 0), adding each one's bytes
 * to bytes_by_card[its card]. Returns how many were removed. */
size_t egpu__vcuda_track_drop_ctx(struct egpu__vcuda_track *t, uint64_t ctx,
                                  uint64_t bytes_by_card[EGPU_VCUDA_MAX_CARDS]);
/* Forget every entry, keeping the memory (after fork, in the child). */
void egpu__vcuda_track_clear(struct egpu__vcuda_track *t);
/* Free the memory; *t is empty again. */
void egpu__vcuda_track_free(struct egpu__vcuda_track *t);

/* ------------------------------------------------------------------------ */
/* The shared region (region.c)                                             */

struct egpu__vcuda_region;

/* Attach to <dir>/vcuda-memory.shm, creating it (mode 0666) or
 * re-initialising it when it is truncated, corrupted or of another version
 * (one log line naming the file and the reason). The mapping is watched for
 * SIGBUS (sigbus.c), and the file looked at every 100 ms, after a fork and
 * after a fault: one truncated, replaced or deleted under a live process is
 * mapped again (region.c, DESIGN). dir NULL or "": a region private to this
 * process and its forked children (anonymous shared memory). One handle per
 * process and file: two handles of one process on the same file share its
 * lock word. *out is the caller's, freed by egpu__vcuda_region_close.
 * The file is opened with O_NOFOLLOW | O_NONBLOCK and must be a regular
 * file with one link: a symbolic link, FIFO, device or hard link planted at
 * the name is refused (-ELOOP, -EINVAL). A process's own usage is its
 * ledger: at every use the region is reconciled with it, and usage changed
 * behind the interposer's back makes reservations wait for every live
 * process to register its own again (region.c, tampering).
 * Returns 0; -ENOMEM; or -errno when the file cannot be opened, sized or
 * mapped (err->msg names it). The caller must then fail closed: a region
 * per process would let N processes take N times the limit. */
int egpu__vcuda_region_open(struct egpu__vcuda_region **out, const char *dir,
                            struct egpu_error *err) EGPU_MUST_CHECK;

/* Give this process's slot back (its usage leaves the totals) and free h.
 * NULL is a no-op. */
void egpu__vcuda_region_close(struct egpu__vcuda_region *h);

/* Give this process's slot back without detaching (at exit). */
void egpu__vcuda_region_leave(struct egpu__vcuda_region *h);

/* The local id (0..EGPU_VCUDA_MAX_CARDS-1) of the card with UUID u, made on
 * first use (ids are this process's; the shared table is keyed by UUID).
 * Returns 0, or -ENOSPC when this process or the region already knows
 * EGPU_VCUDA_MAX_CARDS other cards. */
int egpu__vcuda_region_card(struct egpu__vcuda_region *h, const struct egpu__vcuda_uuid *u,
                            int *card) EGPU_MUST_CHECK;

/* Check-and-take: when the card's total plus bytes stays within
 * limit_bytes, add bytes to this process's slot and the total; otherwise
 * reclaim the slots of dead processes and check again. Returns 0, or
 * -ENOMEM (over the limit: nothing taken), -ENOSPC (no free process slot),
 * -EINVAL (bad card id), -EIO (the region could not be locked). */
int egpu__vcuda_region_reserve(struct egpu__vcuda_region *h, int card, uint64_t bytes,
                               uint64_t limit_bytes) EGPU_MUST_CHECK;

/* Give back bytes this process took on card (never more than it holds). */
void egpu__vcuda_region_release(struct egpu__vcuda_region *h, int card, uint64_t bytes);

/* Bytes in use on card by all live processes (dead ones reclaimed first).
 * Returns 0, -EINVAL (bad card id) or -EIO. */
int egpu__vcuda_region_used(struct egpu__vcuda_region *h, int card,
                            uint64_t *used_bytes) EGPU_MUST_CHECK;

/* Bytes this process holds on card (its own view, kept across re-initialisation). */
uint64_t egpu__vcuda_region_mine(struct egpu__vcuda_region *h, int card);

/* Free the slots of processes that are gone: kill(pid, 0) fails with ESRCH,
 * /proc/<pid>/stat shows a zombie, or its start time differs (the pid was
 * reused). Returns the number of slots freed, or -EIO. */
int egpu__vcuda_region_reclaim(struct egpu__vcuda_region *h);

/* The region's generation (changes at every re-initialisation). */
uint64_t egpu__vcuda_region_generation(struct egpu__vcuda_region *h);

/* fork(2) handlers: prepare locks h's process-local lock, parent unlocks
 * it, child unlocks it and forgets the parent's slot and usage (the child
 * starts with nothing and takes a slot of its own on first use). */
void egpu__vcuda_region_atfork_prepare(struct egpu__vcuda_region *h);
void egpu__vcuda_region_atfork_parent(struct egpu__vcuda_region *h);
void egpu__vcuda_region_atfork_child(struct egpu__vcuda_region *h);

/* For unit tests only: take the shared lock and keep it (a process that
 * then dies leaves its lock word, which the next locker takes over and
 * recomputes the totals), and overwrite a card's total (a half-done
 * update). Return 0 or -errno. */
int egpu__vcuda_region_debug_lock(struct egpu__vcuda_region *h);
int egpu__vcuda_region_debug_set_total(struct egpu__vcuda_region *h, int card, uint64_t bytes);
/* For unit tests only: what a hostile process of the container can do
 * without the interposer: zero every card's total and every slot's bytes
 * in the mapping, without the lock. Returns 0. */
int egpu__vcuda_region_debug_zero_usage(struct egpu__vcuda_region *h);

/* A read-only copy of a vcuda-memory.shm, for egpu-vcuda-inspect (which
 * never maps the file writable, locks or repairs it). */
#define EGPU_VCUDA_REGION_SLOTS 1024 /* process slots of the region */

struct egpu__vcuda_region_view_card {
    struct egpu__vcuda_uuid uuid;
    bool in_use;          /* the entry names a card */
    uint64_t total_bytes; /* as recorded (the interposer recomputes it from the live slots) */
};

struct egpu__vcuda_region_view_slot {
    uint32_t index;                       /* position in the region, 0..EGPU_VCUDA_REGION_SLOTS-1 */
    int32_t pid;                          /* in the container's pid namespace; never 0 */
    uint64_t start;                       /* start time, clock ticks since boot; 0 = unknown */
    bool confirmed;                       /* its owner vouched for it under the current audit */
    uint64_t bytes[EGPU_VCUDA_MAX_CARDS]; /* by the region's card index */
};

struct egpu__vcuda_region_view {
    uint64_t generation; /* new at every (re-)initialisation */
    uint64_t audit;      /* new when usage was found changed behind the interposer's back */
    uint64_t lock;       /* 0 = free, else holder pid << 32 | low 32 bits of its start */
    uint32_t slots_hwm;  /* slots [0, slots_hwm) may be in use; <= EGPU_VCUDA_REGION_SLOTS */
    struct egpu__vcuda_region_view_card cards[EGPU_VCUDA_MAX_CARDS];
    unsigned nslots; /* slots[0, nslots) name a process, in region order */
    struct egpu__vcuda_region_view_slot slots[EGPU_VCUDA_REGION_SLOTS];
};

/* Size of a vcuda-memory.shm of this version, bytes. */
size_t egpu__vcuda_region_file_bytes(void);

/* Decode the len bytes of a vcuda-memory.shm read from buf (any
 * alignment; not trusted) into *out (caller-owned). The header is checked
 * as the interposer checks it before each use (magic, version, size, check
 * word, slot count); every index in *out is then in range by construction.
 * Returns 0, or -EINVAL with err->msg the reason and the header's fields,
 * or -ENOMEM. Nothing is written to buf or the file. */
int egpu__vcuda_region_decode(const void *buf, size_t len, struct egpu__vcuda_region_view *out,
                              struct egpu_error *err) EGPU_MUST_CHECK;

/* Whether process pid, started start_ticks after boot (0 = unknown), is
 * still there, as reclamation judges a slot: not when kill(pid, 0) fails
 * with ESRCH, /proc/<pid>/stat shows a zombie or another start time; yes
 * when /proc cannot tell. pid is looked up in the caller's pid namespace. */
bool egpu__vcuda_proc_is_alive(pid_t pid, uint64_t start_ticks);

/* ------------------------------------------------------------------------ */
/* Truncated mappings (sigbus.c)                                            */

#define EGPU_VCUDA_SIGBUS_MAX 16 /* ranges watched at once */

/* Watch the mapping [base, base + bytes) of a file that other processes may
 * truncate (base page-aligned, as mmap returns it; bytes rounded up to
 * pages). From then on a SIGBUS raised by an access to it (a page past the
 * file's end: BUS_ADRERR) is handled: the whole range is replaced by private
 * zero-filled memory, *faults (the caller's, outliving the watch) is
 * incremented, and the access completes on the zeros. Any other SIGBUS goes
 * to the disposition installed before. The handler is installed with
 * sigaction(2) at the first call. Returns 0, -EINVAL (bad arguments),
 * -ENOSPC (EGPU_VCUDA_SIGBUS_MAX ranges watched already) or the -errno of
 * sigaction. Thread-safe. */
int egpu__vcuda_sigbus_watch(void *base, size_t bytes, atomic_uint *faults) EGPU_MUST_CHECK;

/* Stop watching the range that starts at base (call it before unmapping
 * the range). No-op for NULL or a range not watched. */
void egpu__vcuda_sigbus_unwatch(void *base);

/* Start time of process pid in clock ticks since boot (/proc/<pid>/stat
 * field 22, proc(5)); *zombie set when its state is Z or X. Returns 0 or
 * -errno (-ENOENT: no such process). */
int egpu__vcuda_proc_start(pid_t pid, uint64_t *start, bool *zombie) EGPU_MUST_CHECK;

#ifdef __cplusplus
}
#endif

#endif /* EGPU_VCUDA_INT_H */
