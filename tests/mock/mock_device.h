/* tests/mock/mock_device.h - the simulated machine behind the mock CUDA driver
 * (cuda_mock.c -> libcuda.so.1), the mock NVML (nvml_mock.c ->
 * libnvidia-ml.so.1) and mockctl (mockctl.c). Test code, never shipped.
 *
 * The machine: the cards of env EGPU_MOCK_NVML_GPUS, "name:MiB[:uuid],..."
 * (default two "NVIDIA A100-SXM4-80GB" of 81920 MiB with the UUIDs
 * GPU-6d0c1c3e-0000-4000-8000-<index as 12 decimal digits>).
 *
 * The state: per card, the device memory in use (bytes) and the device
 * timeline; per tag (who launched), busy nanoseconds and launches per card;
 * per process, the device memory it holds per card. It lives either in a
 * file that every process maps (env EGPU_MOCK_CUDA_STATE, created and
 * initialised by the first process under flock(2), so processes starting at
 * once agree), or, without that variable, in private anonymous memory of one
 * process. A process-shared robust mutex guards it; a process that died
 * holding it leaves it to the next locker, which marks it consistent and
 * recomputes each card's memory from the per-process records.
 *
 * Dead processes: every process that registers (the CUDA mock does, at
 * cuInit) holds an open-file-description lock (F_OFD_SETLK) on the byte of
 * its record. The kernel drops it when the process exits, is killed or
 * execs, before the process is reaped, so a record whose byte is unlocked
 * belongs to a dead process: its memory goes back to its cards (as a real
 * driver frees a dead process's memory). Checked at every allocation, at
 * every memory query and by mockctl. Where OFD locks are refused, kill(pid,
 * 0) == ESRCH is the test instead (zombies then count as alive).
 *
 * The timeline (CLOCK_MONOTONIC nanoseconds, the same clock in every
 * process): a card runs one kernel at a time across all processes. A launch
 * of cost c that may not start before t (its stream's last end) runs over
 * [start, start + c], start = max(now, card busy_until, t). Runs are kept in
 * a ring of EGPU_MOCK_RING per card, consecutive runs of one tag merged; the
 * runs not yet over are the device's queue: when EGPU_MOCK_RING runs are
 * pending, a launch waits (sleeps) until the oldest ends, as a real launch
 * blocks on a full queue. Busy time is credited to a tag as it elapses: a
 * reader sees completed work, not queued work. Utilisation is the busy
 * fraction of the last EGPU_MOCK_UTIL_WINDOW_NS (1 s); if the ring no longer
 * holds the whole second, of the span it holds. A dead process's queued work
 * still runs to its end (its memory returns, its timeline stays).
 *
 * Units: bytes for memory, nanoseconds for time, percent for utilisation.
 */
#ifndef EGPU_MOCK_DEVICE_H
#define EGPU_MOCK_DEVICE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EGPU_MOCK_HIDDEN __attribute__((visibility("hidden")))

#define EGPU_MOCK_CARDS_MAX      16
#define EGPU_MOCK_PROCS_MAX      128
#define EGPU_MOCK_TAGS_MAX       64
#define EGPU_MOCK_RING           4096
#define EGPU_MOCK_NAME_LEN       96 /* NVML_DEVICE_NAME_V2_BUFFER_SIZE */
#define EGPU_MOCK_TAG_LEN        64
#define EGPU_MOCK_GRANULARITY    (2ull << 20) /* every device allocation is a multiple, bytes */
#define EGPU_MOCK_UTIL_WINDOW_NS 1000000000ull
#define EGPU_MOCK_MAGIC          0x4b434f4d55504745ull /* "EGPUMOCK" */
#define EGPU_MOCK_VERSION        1

/* One card as EGPU_MOCK_NVML_GPUS describes it. */
struct egpu_mock_gpu {
    char name[EGPU_MOCK_NAME_LEN];
    char uuid[EGPU_MOCK_NAME_LEN]; /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" */
    uint64_t mem_mib;
};

/* One run of kernels on a card: [start_ns, end_ns] of the tag's work. */
struct egpu_mock_run {
    uint64_t start_ns;
    uint64_t end_ns;
    uint32_t tag; /* index in egpu_mock_state.tags */
    uint32_t reserved;
};

struct egpu_mock_card {
    char name[EGPU_MOCK_NAME_LEN];
    char uuid[EGPU_MOCK_NAME_LEN];
    uint64_t total_bytes;
    uint64_t used_bytes;    /* sum of the processes' used_bytes on this card */
    uint64_t busy_until_ns; /* end of the last queued run */
    uint64_t epoch_ns;      /* busy time and launches count from here (reset-busy) */
    uint64_t settled_ns;    /* busy time of settled runs since epoch_ns */
    uint64_t launches;      /* since epoch_ns */
    uint64_t head;          /* runs ever appended; ring[head % RING] is the next */
    uint64_t settled;       /* runs [0, settled) are over and credited to their tag */
    struct egpu_mock_run ring[EGPU_MOCK_RING];
};

struct egpu_mock_tag {
    char name[EGPU_MOCK_TAG_LEN];
    uint64_t settled_ns[EGPU_MOCK_CARDS_MAX]; /* busy time of settled runs since the epoch */
    uint64_t launches[EGPU_MOCK_CARDS_MAX];   /* since the card's epoch */
};

struct egpu_mock_proc {
    int32_t pid;     /* 0: free */
    uint32_t locked; /* 1: its record byte is OFD-locked while it lives */
    uint64_t used_bytes[EGPU_MOCK_CARDS_MAX];
};

/* The state file's layout (native byte order; one machine). */
struct egpu_mock_state {
    uint64_t magic;   /* EGPU_MOCK_MAGIC */
    uint32_t version; /* EGPU_MOCK_VERSION */
    uint32_t ready;   /* 1 once initialised (written last, under flock) */
    uint64_t size;    /* sizeof(struct egpu_mock_state) */
    pthread_mutex_t mutex;
    uint32_t ncards;
    uint32_t ntags;
    struct egpu_mock_card cards[EGPU_MOCK_CARDS_MAX];
    struct egpu_mock_tag tags[EGPU_MOCK_TAGS_MAX];
    struct egpu_mock_proc procs[EGPU_MOCK_PROCS_MAX];
};

/* A process's view of the state. */
struct egpu_mock_dev {
    struct egpu_mock_state *st; /* NULL: not open */
    int fd;                     /* the state file, -1 for private state */
    int slot;                   /* this process's record, -1 if it did not register */
};

/* What a reader sees of a card at a moment. */
struct egpu_mock_card_stats {
    uint64_t total_bytes;
    uint64_t used_bytes;
    uint64_t busy_ns; /* elapsed busy time since the epoch */
    uint64_t launches;
    uint64_t busy_until_ns;
    unsigned util_pct; /* busy fraction of the last second, 0-100 */
};

/* CLOCK_MONOTONIC in nanoseconds. */
EGPU_MOCK_HIDDEN uint64_t egpu_mock_now_ns(void);

/* Copy the next field of *p (a spec such as "a:1,b:2") up to one of the
 * characters of stops, or the end, into out (len bytes, cut to fit); step
 * past the stop and return it ('\0' at the end). */
EGPU_MOCK_HIDDEN char egpu_mock_next_field(const char **p, const char *stops, char *out,
                                           size_t len);

/* Sleep until CLOCK_MONOTONIC reaches t_ns (returns at once if it has). */
EGPU_MOCK_HIDDEN void egpu_mock_sleep_until(uint64_t t_ns);

/* Parse spec ("name:MiB[:uuid],...", the EGPU_MOCK_NVML_GPUS form) into at
 * most max cards of out (caller-owned); a card without a uuid gets the
 * default one. Returns the number of cards. Never fails: a missing MiB field
 * gives 0 MiB, extra cards are ignored. */
EGPU_MOCK_HIDDEN unsigned egpu_mock_gpus_parse(const char *spec, struct egpu_mock_gpu *out,
                                               unsigned max);

/* egpu_mock_gpus_parse of env EGPU_MOCK_NVML_GPUS, or of the default machine
 * when it is unset. */
EGPU_MOCK_HIDDEN unsigned egpu_mock_gpus_load(struct egpu_mock_gpu *out, unsigned max);

/* The 16 bytes of uuid ("GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"), as
 * cuDeviceGetUuid returns them (CUDA driver API: CUuuid). Returns 0, or
 * -EINVAL when uuid is not of that form (out is then untouched). */
EGPU_MOCK_HIDDEN int egpu_mock_uuid_bytes(const char *uuid, unsigned char out[16]);

/* Open the state: the file at path, or private memory when path is NULL.
 * create: make and initialise the file when it is missing, empty or of
 * another layout (from egpu_mock_gpus_load). register_process: take a
 * process record (dev->slot), OFD-locked while the process lives.
 * Returns 0, or -errno: the open/mmap/fcntl error, -ENODATA when !create
 * and the file holds no initialised state, -ENOSPC when every process
 * record is taken by a live process. On failure dev is left closed. */
EGPU_MOCK_HIDDEN int egpu_mock_dev_open(struct egpu_mock_dev *dev, const char *path, bool create,
                                        bool register_process);

/* Unmap and close. The process record stays (the process lives on); it is
 * reclaimed when the process dies. */
EGPU_MOCK_HIDDEN void egpu_mock_dev_close(struct egpu_mock_dev *dev);

/* Lock the state (the robust mutex). Returns 0 or -errno (ENOTRECOVERABLE).
 * After a holder died: marks it consistent, recomputes each card's memory
 * from the process records. */
EGPU_MOCK_HIDDEN int egpu_mock_lock(struct egpu_mock_dev *dev);
EGPU_MOCK_HIDDEN void egpu_mock_unlock(struct egpu_mock_dev *dev);

/* Locked: give the memory of dead processes back to their cards. */
EGPU_MOCK_HIDDEN void egpu_mock_reclaim(struct egpu_mock_dev *dev);

/* Take bytes of card for this process (reclaiming the dead first). Returns
 * 0, -ENOMEM when the card has less free (nothing is taken), -EINVAL for a
 * bad card, or egpu_mock_lock's error. */
EGPU_MOCK_HIDDEN int egpu_mock_mem_take(struct egpu_mock_dev *dev, unsigned card, uint64_t bytes);

/* Give back bytes of card that this process took. */
EGPU_MOCK_HIDDEN void egpu_mock_mem_give(struct egpu_mock_dev *dev, unsigned card, uint64_t bytes);

/* The index of tag name (added if new; the last slot, "other", takes every
 * name once the table is full). Returns the index or egpu_mock_lock's error. */
EGPU_MOCK_HIDDEN int egpu_mock_tag_index(struct egpu_mock_dev *dev, const char *name);

/* Queue a run of cost_ns for tag on card that may not start before
 * not_before_ns; writes its end to *end_ns. Waits while the card's queue is
 * full. Returns 0, -EINVAL for a bad card or tag, or egpu_mock_lock's error. */
EGPU_MOCK_HIDDEN int egpu_mock_launch(struct egpu_mock_dev *dev, unsigned card, unsigned tag,
                                      uint64_t not_before_ns, uint64_t cost_ns, uint64_t *end_ns);

/* Locked: settle card's finished runs, then fill *out at now_ns (reclaims
 * nothing: call egpu_mock_reclaim first for fresh memory figures). */
EGPU_MOCK_HIDDEN void egpu_mock_card_read(struct egpu_mock_dev *dev, unsigned card, uint64_t now_ns,
                                          struct egpu_mock_card_stats *out);

/* Locked, after egpu_mock_card_read at the same now_ns: the elapsed busy
 * time of tag on card since the card's epoch, nanoseconds. */
EGPU_MOCK_HIDDEN uint64_t egpu_mock_tag_busy(struct egpu_mock_dev *dev, unsigned card, unsigned tag,
                                             uint64_t now_ns);

/* Locked: zero busy time and launches of every card and tag from now_ns on
 * (queued work then counts only for its part after now_ns). */
EGPU_MOCK_HIDDEN void egpu_mock_reset_busy(struct egpu_mock_dev *dev, uint64_t now_ns);

#endif /* EGPU_MOCK_DEVICE_H */
