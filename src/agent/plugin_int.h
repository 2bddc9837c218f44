/* agent/plugin_int.h - the kubelet device plugin of egpu-agent (plugin.c and
 * the files plugin_impl_int.h lists: one per verb),
 * private to src/agent.
 *
 * The plugin advertises elasticgpu.io/gpu-core as 100 device IDs per card,
 * "<GPU UUID>-<nn>" with nn 00..99: a container asking gpu-core N gets N
 * IDs, so 30 IDs on one card is 30 % of it and 200 IDs are two whole cards.
 * It serves v1beta1.DevicePlugin on <dir>/elasticgpu.sock and registers
 * with <dir>/kubelet.sock. Health comes from the GPU backend: every card is
 * listed, the devices of an unhealthy card as "Unhealthy".
 *
 * Threads: the gRPC handlers run on the server's threads; egpu__plugin_refresh
 * may be called from any thread (the health watcher); restart and register
 * from one thread (main). A lock guards the card list and the open
 * ListAndWatch streams.
 */
#ifndef EGPU_AGENT_PLUGIN_INT_H
#define EGPU_AGENT_PLUGIN_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "egpu/agent.h"
#include "egpu/core.h"
#include "egpu/api.h"

#define EGPU_PLUGIN_SOCKET        "elasticgpu.sock"  /* our endpoint in the plugin dir */
#define EGPU_PLUGIN_KUBELET       "kubelet.sock"     /* the kubelet's Registration socket */
#define EGPU_PLUGIN_IDS_PER_CARD  100                /* one ID = 1 % of a card */
#define EGPU_PLUGIN_ID_MAX        64                 /* device ID incl. NUL (kubelet: 63) */
#define EGPU_PLUGIN_CONTAINER_DIR "/etc/elastic-gpu" /* the allocation dir in the container */
#define EGPU_PLUGIN_PRELOAD_FILE  "ld.so.preload"    /* in the allocation dir */
#define EGPU_PLUGIN_LIMITS_FILE   "limits.json"      /* in the allocation dir */
#define EGPU_PLUGIN_VCUDA_FILE    "vcuda.conf"       /* the interposer's limits, same dir */
#define EGPU_PLUGIN_SHARED_DIR    "shared"           /* the container's writable subdir */
#define EGPU_PLUGIN_INTERPOSER    "/usr/local/lib/elastic-gpu/libegpu-vcuda.so"
#define EGPU_PLUGIN_CTX_EXTRA_MAX 65536 /* MiB: EGPU_VCUDA_CONTEXT_EXTRA_MIB's range */
#define EGPU_PLUGIN_DIR_NAME_LEN  16    /* hex digits of an allocation dir's name */
#define EGPU_PLUGIN_LIMITS_MAX    16384 /* bytes: a larger limits.json is not the agent's */
#define EGPU_PLUGIN_RM_BUDGET_MS  2000  /* wall time one allocation dir's removal may take */

/* The layout of an allocation dir <alloc_root>/<16 hex digits> (DESIGN.md 5):
 *   <dir>/                 root, 0755; mounted read-only at /etc/elastic-gpu
 *     limits.json          root, 0644; written by PreStartContainer
 *     vcuda.conf           root, 0644; the interposer's limits, same call
 *     ld.so.preload        root, 0644; shared cards; Allocate; mounted at /etc/ld.so.preload
 *     shared/              root, 01777; shared cards; mounted read-write at
 *                          /etc/elastic-gpu/shared: the only place a container
 *                          can write, for the interposer's regions
 * The agent reads nothing below shared/ and never believes a file there; the
 * cleanup removes it with egpu__fs_remove_tree. */

/* How Allocate names a container's cards (--device-list-strategy). */
enum egpu_plugin_strategy {
    EGPU_PLUGIN_ENVVAR,      /* NVIDIA_VISIBLE_DEVICES=<uuid>[,<uuid>...] */
    EGPU_PLUGIN_CDI,         /* cdi_devices "nvidia.com/gpu=<uuid>" */
    EGPU_PLUGIN_DEVICE_NODES /* DeviceSpecs /dev/nvidia<minor> and the control nodes */
};

/* Settings; strings are copied by egpu__plugin_new. */
struct egpu_plugin_config {
    const char *dir;           /* device-plugin dir, e.g. /var/lib/kubelet/device-plugins */
    const char *alloc_root;    /* per-allocation dirs go below it */
    const char *interposer;    /* host path of libegpu-vcuda.so (mounted at the same path) */
    const char *pod_resources; /* PodResources socket (PreStartContainer) */
    const char *node;          /* this node's name (pods of the node) */
    struct egpu_gpus *gpus;    /* borrowed; must outlive the plugin */
    struct egpu_kube *kube;    /* borrowed, may be NULL (--no-api: no pod lookups) */
    enum egpu_plugin_strategy strategy;
    unsigned ctx_extra_mib; /* vcuda.conf's EGPU_VCUDA_CONTEXT_EXTRA_MIB, MiB; 0: not written */
};

struct egpu_plugin; /* opaque */

/* What PreStartContainer wrote into one allocation dir: the agent's own
 * record, the source of the allocation metrics (never a file a container can
 * write). Rebuilt at start from the limits.json files of allocation dirs
 * that are the agent's own (egpu__fs_is_private, mode 0755). */
struct egpu_plugin_limits {
    char dir[EGPU_PLUGIN_DIR_NAME_LEN + 1]; /* the allocation dir's name */
    char ns[EGPU_K8S_NAME_MAX];
    char pod[EGPU_K8S_NAME_MAX];
    char container[EGPU_K8S_NAME_MAX];
    char gpus[EGPU_NODE_GPUS_MAX][EGPU_UUID_MAX]; /* the cards' UUIDs */
    uint32_t ngpus;                               /* 1..EGPU_NODE_GPUS_MAX */
    uint32_t core_pct;                            /* per card, 1..100 */
    uint32_t mem_mib;                             /* per card */
};

/* Called for each record by egpu__plugin_each_limits, with the record lock
 * held: l is borrowed for the call; cb must not call back into the plugin. */
typedef void (*egpu_plugin_limits_cb)(void *data, const struct egpu_plugin_limits *l);

/* Counters for /metrics. */
struct egpu_plugin_stats {
    unsigned long allocations;     /* Allocate container requests answered OK */
    unsigned long alloc_errors;    /* refused */
    unsigned long prestarts;       /* PreStartContainer answered OK */
    unsigned long registrations;   /* successful Register calls */
    unsigned long mismatches;      /* PreStartContainer: IDs on other cards than assigned */
    unsigned long marked_allocate; /* containers marked allocated right after Allocate */
    unsigned long marked_prestart; /* containers PreStartContainer had to mark itself */
    size_t cards;                  /* cards listed */
    size_t healthy;                /* of which healthy */
};

/* Make a plugin (not serving yet) and list the cards once. Returns 0,
 * -ENAMETOOLONG (a socket path over 107 bytes), -ENOMEM or what
 * egpu_gpus_list returns; *out only on success. */
int egpu__plugin_new(const struct egpu_plugin_config *cfg, struct egpu_plugin **out,
                     struct egpu_error *err) EGPU_MUST_CHECK;

/* Stop serving and free. NULL is a no-op. */
void egpu__plugin_free(struct egpu_plugin *p);

/* (Re)start the gRPC server on <dir>/elasticgpu.sock: stops it first when it
 * runs (its ListAndWatch streams end), so a socket the kubelet deleted is
 * created again. Returns 0 or what egpu_grpc_server_start returns. */
int egpu__plugin_serve(struct egpu_plugin *p, struct egpu_error *err) EGPU_MUST_CHECK;

/* Register with <dir>/kubelet.sock (v1beta1, elasticgpu.sock,
 * elasticgpu.io/gpu-core, both options on). Returns 0 or what
 * egpu_grpc_call returns (-EAGAIN: nobody listens yet). */
int egpu__plugin_register(struct egpu_plugin *p, struct egpu_error *err) EGPU_MUST_CHECK;

/* List the cards again; when health or the card set changed, send the new
 * full device list on every open ListAndWatch stream. *changed (may be
 * NULL) says whether it did. Returns 0 or what egpu_gpus_list returns. */
int egpu__plugin_refresh(struct egpu_plugin *p, bool *changed,
                         struct egpu_error *err) EGPU_MUST_CHECK;

/* Whether our socket file is still there (the kubelet's restart deletes it). */
bool egpu__plugin_socket_exists(const struct egpu_plugin *p);

/* A copy of the card list (at most cap cards) into out. Returns the count. */
size_t egpu__plugin_cards(struct egpu_plugin *p, struct egpu_gpu_info *out, size_t cap);

/* A copy of the counters. */
void egpu__plugin_stats(struct egpu_plugin *p, struct egpu_plugin_stats *out);

/* The device ID of slot (0..99) of the card uuid into out (len >= 64).
 * Returns 0 or -ENAMETOOLONG. */
int egpu__plugin_device_id(const char *uuid, unsigned slot, char *out, size_t len) EGPU_MUST_CHECK;

/* The allocation dir of ids (n of them, in any order) into out:
 * <alloc_root>/<16 hex digits of FNV-1a over the sorted IDs>. Allocate and
 * PreStartContainer, which see the same IDs, find the same dir. Returns 0,
 * -ENAMETOOLONG or -ENOMEM. */
int egpu__plugin_alloc_dir(const char *alloc_root, char *const *ids, size_t n, char *out,
                           size_t len) EGPU_MUST_CHECK;

/* mkdir -p path (mode 0755). Returns 0, -ENAMETOOLONG or -errno. */
int egpu__plugin_mkdir_p(const char *path) EGPU_MUST_CHECK;

/* Open (with create, make first: mkdir -p alloc_root, then the dir) the
 * allocation dir dir (<alloc_root>/<name>, as egpu__plugin_alloc_dir gives
 * it) as a directory fd (O_NOFOLLOW) into *fd (close(2) it) and put it in
 * the layout above: owned by this process's user, mode 0755 (a dir found
 * otherwise, left by an older agent, is taken back), and with shared, a
 * real subdirectory shared/ of mode 01777 (a link or file there is removed
 * first). *created (may be NULL) says whether the dir was made by this
 * call. Returns 0, or -errno with err "allocation dir <dir> (--alloc-root
 * <root>) cannot be created: <reason>" (without create, -ENOENT when it
 * does not exist); on failure a dir this call made is removed again. */
int egpu__plugin_open_alloc_dir(const char *alloc_root, const char *dir, bool create, bool shared,
                                bool *created, int *fd, struct egpu_error *err) EGPU_MUST_CHECK;

/* Remove the allocation dir dir (<alloc_root>/<name>) and all below it
 * (egpu__fs_remove_tree). Returns 0 or what that returns. */
int egpu__plugin_remove_alloc_dir(const char *alloc_root, const char *dir) EGPU_MUST_CHECK;

/* Record l (copied) as what PreStartContainer wrote into the allocation dir
 * l->dir, replacing an earlier record of that dir. Returns 0 or -ENOMEM
 * (the record is unchanged then). */
int egpu__plugin_record(struct egpu_plugin *p, const struct egpu_plugin_limits *l) EGPU_MUST_CHECK;

/* Call cb for every record (see egpu_plugin_limits_cb). */
void egpu__plugin_each_limits(struct egpu_plugin *p, egpu_plugin_limits_cb cb, void *data);

/* Decode limits.json's text (NUL-terminated) into *out (dir left empty):
 * pod, namespace, container (strings under EGPU_K8S_NAME_MAX bytes), gpus
 * (1..EGPU_NODE_GPUS_MAX strings under EGPU_UUID_MAX bytes), core (integer
 * 1..100), memory (integer 0..4294967295). Returns 0 or EGPU_ESYNTAX with
 * err naming the field. */
int egpu__plugin_limits_decode(const char *text, struct egpu_plugin_limits *out,
                               struct egpu_error *err) EGPU_MUST_CHECK;

/* Remove the allocation dirs below alloc_root (names of 16 hex digits;
 * nothing else is touched) that no container holds any more: PodResources
 * List gives every container's gpu-core IDs, whose hash names the dir it
 * holds. A dir modified less than grace_s seconds ago is kept (Allocate
 * touches its dir: the kubelet may not list the container yet). Safe
 * against concurrent Allocate calls. *removed (may be NULL) gets the count.
 * Returns 0, or what the PodResources List returns (nothing is removed
 * then), or -errno for an unreadable alloc_root (a missing one is 0). */
int egpu__plugin_cleanup(struct egpu_plugin *p, long grace_s, unsigned *removed,
                         struct egpu_error *err) EGPU_MUST_CHECK;

/* protobuf-c's allocator on egpu_malloc/egpu_free, for every unpack. */
extern ProtobufCAllocator egpu__pb_allocator;

#endif /* EGPU_AGENT_PLUGIN_INT_H */
