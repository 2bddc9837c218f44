/* egpu/core.h - the placement core of Elastic GPU: errors, resource quantities,
 * the cluster model, pod requests, fragmentation and placement policies.
 *
 * DESIGN: the core does no I/O, reads no clock and keeps no state outside the
 * objects the caller passes in (the allocator's counters excepted), so the
 * scheduler extender's live cache and the trace replay run exactly the same
 * code. Units are carried in names: *_milli for milli-units (CPU millicores,
 * milli-GPU where 1000 is one whole card), *_mib for MiB, *_pct for percent of
 * one GPU (DESIGN.md section 1).
 *
 * Ownership: objects made by *_new are released by the matching *_free, which
 * accepts NULL. Structures shown here are readable by callers; they change only
 * through the functions below. Errors are 0 or a negative code (-errno or
 * EGPU_E*), described by egpu_strerror(); functions that can fail for a reason
 * worth telling a person also take `struct egpu_error *err` (may be NULL).
 */
#ifndef EGPU_CORE_H
#define EGPU_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define EGPU_MUST_CHECK   __attribute__((warn_unused_result))
#define EGPU_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define EGPU_MUST_CHECK
#define EGPU_PRINTF(f, a)
#endif

/* ------------------------------------------------------------------------ */
/* Errors (src/core/error.c)                                                */

enum egpu_errno {
    EGPU_ENOFIT = -4001,     /* no node or card satisfies the request */
    EGPU_ENOTALLOC = -4002,  /* release of a pod that holds no allocation */
    EGPU_EALLOCATED = -4003, /* the pod already holds an allocation */
    EGPU_ESYNTAX = -4004,    /* malformed input (quantity, CSV row, flag value) */
    EGPU_ERANGE = -4005,     /* well-formed value outside the allowed range */
    EGPU_ELIMIT = -4006,     /* a fixed limit of the model was exceeded */
};

#define EGPU_ERRMSG_MAX 512

struct egpu_error {
    int code;                  /* 0, -errno or EGPU_E*; 0 = no error */
    char msg[EGPU_ERRMSG_MAX]; /* one line, no trailing newline */
};

/* Human text for code (0, -errno or EGPU_E*). Returns a static string. */
const char *egpu_strerror(int code);

/* Record code and a printf-formatted message in *err (err may be NULL).
 * Never allocates. Returns code, so `return egpu_error_set(...)` is one line. */
int egpu_error_set(struct egpu_error *err, int code, const char *fmt, ...) EGPU_PRINTF(3, 4);

/* egpu_error_set with the code -errno and `: <strerror(errno)>` after the
 * printf-formatted message, errno read before anything else runs (so the
 * formatting cannot change it; strerror_r, so threads do not share a
 * buffer). For a failed system call: `return egpu_error_errno(err, "open %s",
 * path);`. Never allocates. Returns -errno (EIO when errno is 0). */
int egpu_error_errno(struct egpu_error *err, const char *fmt, ...) EGPU_PRINTF(2, 3);

/* Put `prefix: ` in front of the message already in *err (err may be NULL),
 * cutting the end to fit. Returns code, the error being passed on. */
int egpu_error_prefix(struct egpu_error *err, int code, const char *fmt, ...) EGPU_PRINTF(3, 4);

/* ------------------------------------------------------------------------ */
/* Memory (src/core/alloc.c)                                                */

/* All allocation goes through these, so tests can count live blocks and make
 * the Nth allocation fail. egpu_malloc/calloc/realloc return NULL on failure
 * (never abort); egpu_free(NULL) is a no-op. egpu_strdup copies a C string
 * (caller egpu_free()s it) or returns NULL. */
void *egpu_malloc(size_t size);
void *egpu_calloc(size_t n, size_t size);
void *egpu_realloc(void *p, size_t size);
char *egpu_strdup(const char *s);
void egpu_free(void *p);

/* Live blocks allocated through egpu_* and not yet freed (all threads). */
long egpu_alloc_live(void);
/* Make the nth allocation from now fail (1 = the next one); 0 turns it off. */
void egpu_alloc_fail_after(long nth);

/* ------------------------------------------------------------------------ */
/* Bounded buffers (src/core/buf.c)                                         */

/* A growable byte buffer with a mandatory maximum size (curl's dynbuf):
 * HTTP bodies, API-server replies and JSON documents go through it, so a
 * peer can never make us allocate without bound. data is always
 * NUL-terminated (when not NULL) so text can be read in place. */
struct egpu_buf {
    char *data; /* NULL until the first append */
    size_t len; /* bytes used, excluding the NUL */
    size_t cap; /* bytes allocated */
    size_t max; /* most bytes len may reach */
};

/* Start an empty buffer that may hold at most max bytes. Never allocates. */
void egpu_buf_init(struct egpu_buf *b, size_t max);
/* Append n bytes. Returns 0, -EMSGSIZE (len would pass max; b unchanged) or
 * -ENOMEM (b unchanged). */
int egpu_buf_append(struct egpu_buf *b, const void *p, size_t n) EGPU_MUST_CHECK;
/* Append printf-formatted text; same returns as egpu_buf_append. */
int egpu_buf_printf(struct egpu_buf *b, const char *fmt, ...) EGPU_PRINTF(2, 3) EGPU_MUST_CHECK;
/* The contents as a C string ("" when empty); borrowed, valid until the next change. */
const char *egpu_buf_str(const struct egpu_buf *b);
/* Empty the buffer, keeping its memory and its max. */
void egpu_buf_reset(struct egpu_buf *b);
/* Free the memory; b may be reused after egpu_buf_init. */
void egpu_buf_free(struct egpu_buf *b);
/* Take the contents (caller egpu_free()s them; NULL when empty) and reset b. */
char *egpu_buf_take(struct egpu_buf *b);

/* ------------------------------------------------------------------------ */
/* String-keyed hash map (src/core/map.c)                                   */

/* Open addressing with linear probing and backward-shift deletion, so a map
 * that sees millions of inserts and removals (the extender's live cache)
 * never degrades with tombstones. Keys are borrowed: the caller keeps each
 * key alive while it is in the map (typically the key lives inside the value
 * it maps to). Not thread-safe: callers lock. */
struct egpu_map;

/* New empty map, or NULL when out of memory. */
struct egpu_map *egpu_map_new(void);
/* Free the map (not the keys or values). NULL is a no-op. */
void egpu_map_free(struct egpu_map *m);
/* The hash the map files key (NUL-terminated) under: eight bytes at a
 * time, several times faster than egpu_hash_str on node names, for other
 * tables of names (the extender's slot index). Not stable across versions:
 * never part of a result. */
uint64_t egpu_map_hash(const char *key);
/* Value for key, or NULL. O(1) expected. */
void *egpu_map_get(const struct egpu_map *m, const char *key);
/* values[i] = egpu_map_get(m, keys[i]) for i in 0..n. Same answers, but the
 * lookups are pipelined: slots and stored keys are prefetched several keys
 * ahead, so a batch of thousands waits on memory in parallel instead of one
 * miss after another. keys and values are caller-owned arrays of n. */
void egpu_map_get_many(const struct egpu_map *m, const char *const *keys, size_t n, void **values);
/* Insert key -> value (value != NULL). Returns 0, -EEXIST or -ENOMEM. */
int egpu_map_put(struct egpu_map *m, const char *key, void *value) EGPU_MUST_CHECK;
/* Remove key. Returns 0 or -ENOENT. */
int egpu_map_del(struct egpu_map *m, const char *key);
/* Entries in the map. */
size_t egpu_map_count(const struct egpu_map *m);
/* Iterate: start with *pos = 0; each call returns the next value (and its key
 * in *key when key != NULL), or NULL at the end. The map must not change
 * during an iteration. */
void *egpu_map_next(const struct egpu_map *m, size_t *pos, const char **key);

/* ------------------------------------------------------------------------ */
/* Kubernetes resource quantities (src/core/quantity.c)                     */

/* A parsed resource.Quantity: value = mantissa * 10^dec_exp * 2^bin_exp.
 * Grammar (k8s.io/apimachinery/pkg/api/resource, quantity.go):
 *   [+-]? (digits | digits.digits | .digits | digits.) suffix
 *   suffix = "" | Ki Mi Gi Ti Pi Ei | n u m k M G T P E | (e|E)[+-]?digits */
struct egpu_quantity {
    bool negative;
    uint64_t mantissa; /* all digits, decimal point removed; at most 18 digits kept exact */
    int dec_exp;       /* power of ten */
    int bin_exp;       /* power of two (Ki = 10, Mi = 20 ...) */
};

/* Parse s (NUL-terminated). Returns 0, or EGPU_ESYNTAX for a malformed string
 * (empty, bad digits, unknown suffix, junk after the suffix) or EGPU_ERANGE
 * for more than 18 significant digits or an exponent beyond +-100. Writes *q
 * only on success. */
int egpu_quantity_parse(const char *s, struct egpu_quantity *q,
                        struct egpu_error *err) EGPU_MUST_CHECK;

enum egpu_round {
    EGPU_ROUND_EXACT, /* a value that is not a whole number of units is EGPU_ERANGE */
    EGPU_ROUND_UP,    /* toward +infinity, as Quantity.ScaledValue does */
};

/* Express q in units of 10^unit_dec * 2^unit_bin, as an int64 (e.g. milli:
 * unit_dec = -3; MiB: unit_bin = 20). Returns 0, or EGPU_ERANGE when the
 * result overflows int64 or is not whole under EGPU_ROUND_EXACT. */
int egpu_quantity_to_units(const struct egpu_quantity *q, int unit_dec, int unit_bin,
                           enum egpu_round round, int64_t *out) EGPU_MUST_CHECK;

/* The four resources Elastic GPU reads. Each parses s and converts it; field
 * names the field in error messages (e.g. "resources.requests.cpu").
 * - egpu_parse_cpu_milli: CPU in millicores, rounded up ("500m" = 500, "2" = 2000); >= 0.
 * - egpu_parse_mem_mib: memory bytes to MiB, rounded up ("4Gi" = 4096); >= 0.
 * - egpu_parse_gpu_core_pct: elasticgpu.io/gpu-core, percent of one GPU: a
 *   whole number 1..99 (a share of one card) or a multiple of 100 (whole cards).
 * - egpu_parse_gpu_mem_mib: elasticgpu.io/gpu-memory, a whole number of MiB >= 0.
 * Returns 0, EGPU_ESYNTAX or EGPU_ERANGE; *out written only on success. */
int egpu_parse_cpu_milli(const char *s, const char *field, int64_t *out,
                         struct egpu_error *err) EGPU_MUST_CHECK;
int egpu_parse_mem_mib(const char *s, const char *field, int64_t *out,
                       struct egpu_error *err) EGPU_MUST_CHECK;
int egpu_parse_gpu_core_pct(const char *s, const char *field, int64_t *out,
                            struct egpu_error *err) EGPU_MUST_CHECK;
int egpu_parse_gpu_mem_mib(const char *s, const char *field, int64_t *out,
                           struct egpu_error *err) EGPU_MUST_CHECK;

/* ------------------------------------------------------------------------ */
/* Cluster model (src/core/cluster.c, src/core/node.c)                      */

#define EGPU_GPU_MILLI     1000 /* milli-GPU in one whole card (core capacity 100%) */
#define EGPU_NODE_GPUS_MAX 64   /* cards on one node */
#define EGPU_MODELS_MAX    64   /* distinct GPU models in one cluster (bit mask) */
#define EGPU_UUID_MAX      64   /* NVML GPU UUID incl. NUL ("GPU-" + 36) */
#define EGPU_MODEL_NONE    UINT16_MAX

/* How closely two cards of one node are connected, as NVML's pair topology
 * says (nvmlDeviceGetP2PStatus for NVLink, else
 * nvmlDeviceGetTopologyCommonAncestor's nvmlGpuTopologyLevel_t): a higher
 * value is closer. The GPU object's spec.topology names them (egpu/api.h
 * egpu_api_topo_name). EGPU_TOPO_UNKNOWN is what a zeroed spec says. */
enum egpu_topo_level {
    EGPU_TOPO_UNKNOWN = 0, /* not published: ranks below every known link */
    EGPU_TOPO_SYSTEM,      /* NVML_TOPOLOGY_SYSTEM: across NUMA nodes (SYS) */
    EGPU_TOPO_NUMA_NODE,   /* NVML_TOPOLOGY_NODE: host bridges of one NUMA node (NODE) */
    EGPU_TOPO_HOSTBRIDGE,  /* NVML_TOPOLOGY_HOSTBRIDGE: one PCIe host bridge (PHB) */
    EGPU_TOPO_MULTIPLE,    /* NVML_TOPOLOGY_MULTIPLE: several PCIe switches (PXB) */
    EGPU_TOPO_SINGLE,      /* NVML_TOPOLOGY_SINGLE: one PCIe switch (PIX) */
    EGPU_TOPO_INTERNAL,    /* NVML_TOPOLOGY_INTERNAL: the same board (e.g. K80) */
    EGPU_TOPO_NVLINK,      /* NVLink between the two (NV) */
    EGPU_TOPO_LEVELS,      /* number of values */
};

/* One peer of a card in an egpu_gpu_spec: the card of NVML index
 * peer_index on the same node, and the link to it. */
struct egpu_topo_link {
    uint32_t peer_index;
    uint8_t level; /* enum egpu_topo_level */
};

struct egpu_gpu {
    const char *uuid;         /* shorter than EGPU_UUID_MAX; in its node's uuids */
    uint32_t index;           /* NVML index on its node */
    uint16_t model;           /* id in the cluster's model table */
    uint32_t mem_mib;         /* device memory capacity */
    uint32_t core_milli;      /* compute capacity, EGPU_GPU_MILLI (= 100%) */
    uint32_t used_core_milli; /* allocated compute */
    uint32_t used_mem_mib;    /* allocated memory */
    uint32_t nshares;         /* containers holding part or all of this card */
    char *unhealthy;          /* NULL: takes pods. Else the card takes no new pod (placement */
                              /* sees it full; pods on it stay counted) and this says which */
                              /* card and why, e.g. "gpu-1-gpu0 (Unhealthy)" (owned) */
    uint16_t load_pct;        /* measured load 0..100 (egpu_load_pct), EGPU_LOAD_UNKNOWN */
                              /* when none is known; read only by load-aware placers */
    /* enum egpu_topo_level to the card at each position of node->gpus
     * (ngpus entries): a row of the node's links, or of a shared row of
     * EGPU_TOPO_UNKNOWN when the node has none; read when node->has_topology */
    const uint8_t *link;
};

struct egpu_label {
    char *key;
    char *value;
};

struct egpu_assignment;

struct egpu_node {
    char *name;
    size_t slot;       /* position in cluster->nodes; changes on removals */
    uint64_t gen;      /* cluster-unique, new on every change of this node */
    int64_t cpu_milli; /* allocatable CPU */
    int64_t mem_mib;   /* allocatable memory */
    int64_t used_cpu_milli;
    int64_t used_mem_mib;
    uint16_t model; /* model of its cards (EGPU_MODEL_NONE without cards) */
    uint32_t ngpus;
    struct egpu_gpu *gpus; /* ngpus entries, sorted by index */
    char *uuids;           /* the cards' UUIDs one after another (owned; egpu_gpu.uuid) */
    uint8_t *links;        /* ngpus x ngpus egpu_gpu.link rows (owned), NULL: no topology */
    bool has_topology;     /* some pair of cards has a known link (egpu_gpu.link) */
    size_t nlabels;
    struct egpu_label *labels;
    struct egpu_assignment *pods; /* pods placed here (intrusive list) */
};

/* Node description passed to egpu_cluster_add_node (all borrowed, copied). */
struct egpu_gpu_spec {
    const char *uuid; /* unique in the cluster; NULL = "<node>-gpu<index>" */
    uint32_t index;
    const char *model; /* e.g. "V100M16"; NULL or "" = "unknown" */
    uint32_t mem_mib;
    const char *unhealthy; /* NULL or "": healthy; else the card takes no new pod, and */
                           /* this names it and why for refusals (copied) */
    bool load_known;       /* false (a zeroed spec): load unknown; else load_pct holds */
    uint16_t load_pct;     /* measured load 0..100, see egpu_load_pct */
    /* Links to peer cards of this node (the GPU object's spec.topology; none:
     * unknown). A peer index the node lacks, the card's own and
     * EGPU_TOPO_UNKNOWN are passed over. When the two cards of a pair say
     * different things, the farther link counts; when one says nothing, the
     * other's. */
    uint32_t nlinks;
    const struct egpu_topo_link *links; /* nlinks entries (borrowed, copied) */
};

struct egpu_node_spec {
    const char *name;
    int64_t cpu_milli;
    int64_t mem_mib;
    size_t nlabels;
    const struct egpu_label *labels;
    uint32_t ngpus;
    const struct egpu_gpu_spec *gpus;
};

struct egpu_map;

struct egpu_cluster {
    struct egpu_node **nodes; /* nnodes entries, node->slot is the position */
    uint64_t *gens;           /* cap entries: gens[slot] == nodes[slot]->gen, packed so a */
                              /* walk over many nodes' memo entries touches no node */
    size_t nnodes;
    size_t cap;
    struct egpu_map *by_name; /* node name -> node */
    struct egpu_map *by_pod;  /* pod key -> assignment */
    struct egpu_map *by_uuid; /* GPU UUID -> node */
    char *models[EGPU_MODELS_MAX];
    uint16_t nmodels;
    uint64_t id;              /* this cluster's, never another's of the process (a cluster */
                              /* made at a freed one's address has another id) */
    uint64_t gen;             /* last generation handed out (node generations are per cluster) */
    uint64_t members;         /* stamp of the node set: changes on every add and remove, */
                              /* unique across clusters of the process (never reused) */
    uint64_t ngpus;           /* cards in the cluster */
    uint64_t core_milli;      /* sum of card compute capacity */
    uint64_t used_core_milli; /* sum of allocated card compute */
    size_t npods;             /* pods holding an allocation */
    int64_t max_cpu_milli;    /* largest node CPU (best-fit normalisation) */
    uint32_t max_ngpus;       /* most cards on one node (best-fit normalisation) */
    size_t nmax_cpu;          /* nodes with max_cpu_milli: removals rescan only at 0 */
    size_t nmax_ngpus;        /* nodes with max_ngpus */
};

/* New empty cluster, or NULL when out of memory. Free with egpu_cluster_free. */
struct egpu_cluster *egpu_cluster_new(void);
/* Free the cluster, its nodes and every assignment. NULL is a no-op. */
void egpu_cluster_free(struct egpu_cluster *c);

/* Id of GPU model name, adding it if new. Returns the id (>= 0), or
 * EGPU_ELIMIT past EGPU_MODELS_MAX models, or -ENOMEM. */
int egpu_cluster_model_id(struct egpu_cluster *c, const char *name) EGPU_MUST_CHECK;
/* Id of an existing model, or -ENOENT. */
int egpu_cluster_find_model(const struct egpu_cluster *c, const char *name);

/* Bit mask of allowed models from a '|'-separated list ("V100M16|V100M32",
 * the openb gpu_spec form; "" = any model = mask 0). Unknown names are added
 * to the model table. Returns 0, EGPU_ESYNTAX (empty element), EGPU_ELIMIT,
 * or -ENOMEM. */
int egpu_cluster_model_mask(struct egpu_cluster *c, const char *list, uint64_t *mask,
                            struct egpu_error *err) EGPU_MUST_CHECK;

/* Add a node (spec copied). All cards of one node must share a model.
 * Returns 0, -EEXIST (name or a GPU UUID already present), -EINVAL (empty
 * name, negative capacity, mixed models, duplicate index, too many cards),
 * EGPU_ELIMIT or -ENOMEM. On error the cluster is unchanged. */
int egpu_cluster_add_node(struct egpu_cluster *c, const struct egpu_node_spec *spec,
                          struct egpu_error *err) EGPU_MUST_CHECK;

/* Remove node name and release every pod placed on it. Returns 0 or -ENOENT. */
int egpu_cluster_remove_node(struct egpu_cluster *c, const char *name) EGPU_MUST_CHECK;

/* Node by name, or NULL. O(1). */
struct egpu_node *egpu_cluster_node(const struct egpu_cluster *c, const char *name);
/* nodes[i] = egpu_cluster_node(c, names[i]) for i in 0..n, pipelined
 * (egpu_map_get_many). names and nodes are caller-owned arrays of n. */
void egpu_cluster_nodes(const struct egpu_cluster *c, const char *const *names, size_t n,
                        struct egpu_node **nodes);

/* Label value on node, or NULL. */
const char *egpu_node_label(const struct egpu_node *n, const char *key);

/* Measured load (src/core/load.c). What the node agents report of a card
 * (GPU status.used: NVML utilization and memory in use) is a measurement,
 * not an allocation: the allocated shares above stay the only truth for
 * fitting, and a load-aware placer (egpu_placer_config.load_aware) reads
 * the load only to break exact ties. A card's load is one number, percent:
 * the higher of its utilization and the share of its memory in use. A card
 * with no (fresh) report has EGPU_LOAD_UNKNOWN, the largest value, so an
 * unknown load is never preferred over a known one, however high: unknown
 * counts as busy, never as idle. */
#define EGPU_LOAD_UNKNOWN UINT16_MAX

/* The load of a card from its report: max(util_pct, 100 * used_mib /
 * mem_mib) clamped to 0..100, from the parts given (has_util, has_mem; the
 * memory part needs mem_mib > 0). EGPU_LOAD_UNKNOWN when neither is given. */
uint16_t egpu_load_pct(bool has_util, int64_t util_pct, bool has_mem, int64_t used_mib,
                       uint32_t mem_mib);

/* Set card gpu (position in n->gpus) of node n to load_pct (0..100 or
 * EGPU_LOAD_UNKNOWN; more than 100 counts as 100). A change renews the
 * node's generation, so memoised scores and picks are made again; setting
 * the value it has changes nothing. Returns 0, or -EINVAL for no such card. */
int egpu_cluster_set_load(struct egpu_cluster *c, struct egpu_node *n, uint32_t gpu,
                          uint16_t load_pct) EGPU_MUST_CHECK;

struct egpu_pick;

/* The load a pod would meet on node with pick: the highest load of the
 * cards picked (EGPU_LOAD_UNKNOWN when one of them is unknown, or the pick
 * has no card). Lower is better; equal loads tie. */
uint16_t egpu_pick_load(const struct egpu_node *n, const struct egpu_pick *pick);

/* Free compute on card g of n, in milli-GPU. */
static inline uint32_t egpu_gpu_free_core(const struct egpu_gpu *g)
{
    return g->core_milli - g->used_core_milli;
}

static inline uint32_t egpu_gpu_free_mem(const struct egpu_gpu *g)
{
    return g->mem_mib - g->used_mem_mib;
}

/* ------------------------------------------------------------------------ */
/* Pod requests (src/core/request.c)                                        */

#define EGPU_CONTAINERS_MAX 16 /* GPU-requesting containers in one pod */

/* One container's GPU request. A share: core_milli 1..999 on ncards = 1.
 * Whole cards: core_milli = EGPU_GPU_MILLI on ncards >= 1. mem_mib is GPU
 * memory per card; for whole cards it is a minimum card size (the whole
 * card's memory is allocated). ncards = 0 means no GPU. */
struct egpu_container_request {
    uint32_t core_milli;
    uint32_t ncards;
    uint32_t mem_mib;
};

struct egpu_pod_request {
    int64_t cpu_milli;   /* sum of the pod's CPU requests */
    int64_t mem_mib;     /* sum of the pod's memory requests */
    uint64_t model_mask; /* allowed GPU models (bit = model id); 0 = any */
    uint32_t ncontainers;
    struct egpu_container_request containers[EGPU_CONTAINERS_MAX];
};

/* Build a container request from elasticgpu.io/gpu-core (percent, as parsed by
 * egpu_parse_gpu_core_pct) and gpu-memory (MiB). core_pct 1..99 is a share,
 * 100*k is k whole cards. Returns 0 or EGPU_ERANGE naming the allowed values. */
int egpu_container_request_set(struct egpu_container_request *c, int64_t core_pct, int64_t mem_mib,
                               struct egpu_error *err) EGPU_MUST_CHECK;

/* Check a whole pod request: counts, ranges, at most EGPU_CONTAINERS_MAX
 * containers. Returns 0 or EGPU_ERANGE with the offending field named. */
int egpu_pod_request_validate(const struct egpu_pod_request *r,
                              struct egpu_error *err) EGPU_MUST_CHECK;

/* Total GPU asked by r, in milli-GPU (sum of core_milli * ncards). */
uint64_t egpu_pod_request_gpu_milli(const struct egpu_pod_request *r);

/* ------------------------------------------------------------------------ */
/* Assignments: the card(s) chosen per container (src/core/assign.c)       */

/* One card share of one container. */
struct egpu_share {
    uint16_t container; /* index in the request's containers */
    uint16_t gpu;       /* position in node->gpus */
    uint32_t core_milli;
    uint32_t mem_mib;
};

#define EGPU_PICK_SHARES_MAX 64

/* A tentative choice of cards on one node (caller-owned storage). */
struct egpu_pick {
    uint32_t nshares;
    struct egpu_share shares[EGPU_PICK_SHARES_MAX];
};

/* A pod's committed allocation, owned by the cluster. */
struct egpu_assignment {
    char *pod; /* key, e.g. "namespace/name" or a uid; after shares, in the same allocation */
    struct egpu_node *node;
    int64_t cpu_milli;
    int64_t mem_mib;
    struct egpu_assignment *prev, *next; /* node->pods list */
    uint32_t nshares;
    struct egpu_share shares[];
};

/* Commit pick of request r on node for pod (key copied). Every card total and
 * the node's CPU and memory are updated exactly. Returns 0, EGPU_EALLOCATED
 * (pod already holds an allocation), -EINVAL (pick does not fit the node's
 * current state, or names a card the node lacks), or -ENOMEM; on error
 * nothing changes. */
int egpu_cluster_assign(struct egpu_cluster *c, const char *pod, struct egpu_node *node,
                        const struct egpu_pod_request *r, const struct egpu_pick *pick,
                        struct egpu_error *err) EGPU_MUST_CHECK;

/* Release pod's allocation. Returns 0 or EGPU_ENOTALLOC when pod holds none. */
int egpu_cluster_release(struct egpu_cluster *c, const char *pod,
                         struct egpu_error *err) EGPU_MUST_CHECK;

/* The pod's assignment, or NULL. Borrowed; valid until it is released. */
const struct egpu_assignment *egpu_cluster_assignment(const struct egpu_cluster *c,
                                                      const char *pod);

/* Reserved capacity: cards, or a slice of one card, held for an ElasticGPU
 * (a claim's capacity) whether or not a pod uses it yet. A reservation is an
 * assignment like a pod's, under its own key and with no CPU or memory of
 * the node, so every total, filter, score and fragmentation measure counts
 * it as allocated and nothing else is placed into it. The scheduler's cache
 * and the trace replay both apply reservations with this function. */
struct egpu_reservation {
    uint32_t core_milli; /* per card: 1..999 = a share of one card; EGPU_GPU_MILLI = whole cards */
    uint32_t mem_mib;    /* GPU memory per card, MiB, shares only (a whole card holds all of
                            its memory; this is ignored then) */
    uint32_t ncards;     /* 1 for a share; 1..EGPU_NODE_GPUS_MAX whole cards */
    const char *uuids[EGPU_NODE_GPUS_MAX]; /* the cards, by egpu_gpu.uuid (borrowed) */
};

/* Hold r on node under key (copied; it must differ from every pod key: the
 * scheduler uses "elasticgpu:<name>", pod keys hold a '/'). Released with
 * egpu_cluster_release(c, key, ...). Returns 0, EGPU_EALLOCATED (key holds
 * something already), -EINVAL (core_milli, ncards or a UUID out of shape:
 * the message names it), -ENOENT (node has no card of that UUID: "node n3
 * has no card n3-gpu9"), EGPU_ENOFIT when the cards lack the room, with the
 * card and what is free ("card n3-gpu0 has 300 milli-GPU and 0 MiB free;
 * the reservation asks 500 milli-GPU and 0 MiB", or "card ... is not free
 * for a whole-card reservation"), or -ENOMEM. On error nothing changes. */
int egpu_cluster_reserve(struct egpu_cluster *c, const char *key, struct egpu_node *node,
                         const struct egpu_reservation *r, struct egpu_error *err) EGPU_MUST_CHECK;

/* ------------------------------------------------------------------------ */
/* Target workload and fragmentation (src/core/workload.c, src/core/frag.c) */

/* A typical pod of the target workload (FGD paper, section 4.1). */
struct egpu_typical_pod {
    int64_t cpu_milli;
    uint32_t gpu_milli;  /* per card: 1..1000 (0 = asks no GPU) */
    uint32_t ncards;     /* cards (0 = asks no GPU) */
    uint64_t model_mask; /* 0 = any model */
    double weight;       /* probability; the workload's weights sum to 1 */
};

struct egpu_workload {
    size_t n;
    struct egpu_typical_pod *pods; /* most frequent first */
};

/* Target workload of a trace: the pods grouped by (cpu_milli, per-card GPU
 * milli, cards, model mask), most frequent first (ties: more CPU, then more
 * GPU per card, then more cards, then the group seen first),
 * kept until they cover `coverage` of the pods (0 < coverage <= 1; the paper
 * uses 0.95), weights renormalised to sum to 1. Each request contributes its
 * largest GPU container. Returns 0, -EINVAL (n = 0 or coverage out of range)
 * or -ENOMEM. Free *out with egpu_workload_free. */
int egpu_workload_from_requests(const struct egpu_pod_request *reqs, size_t n, double coverage,
                                struct egpu_workload *out) EGPU_MUST_CHECK;

/* Pods counted into the workload's groups one at a time, for a caller that
 * holds its pods elsewhere (the scheduler's cache): init, add each pod, then
 * finish, which gives what egpu_workload_from_requests gives for the same
 * pods in the same order, and free. A tally owns its memory; zeroed is
 * initialised. */
struct egpu__workload_group;
struct egpu_workload_tally {
    struct egpu__workload_group *groups;
    size_t ngroups, cap;
    uint32_t *index; /* open addressing over the groups, nindex slots */
    size_t nindex;
    size_t npods;
};

void egpu_workload_tally_init(struct egpu_workload_tally *t);

/* Count request r (its largest GPU container, as egpu_workload_from_requests
 * does). Returns 0 or -ENOMEM (the tally as it was). */
int egpu_workload_tally_add(struct egpu_workload_tally *t,
                            const struct egpu_pod_request *r) EGPU_MUST_CHECK;

/* The workload of the pods counted, kept until they cover `coverage` of them
 * (as egpu_workload_from_requests). Returns 0, -EINVAL (no pod counted or
 * coverage out of range) or -ENOMEM. Orders t's groups: add nothing more
 * after it. Free *out with egpu_workload_free. */
int egpu_workload_tally_finish(struct egpu_workload_tally *t, double coverage,
                               struct egpu_workload *out) EGPU_MUST_CHECK;

/* Free t's memory and leave it initialised; NULL is a no-op. */
void egpu_workload_tally_free(struct egpu_workload_tally *t);

/* The total variation distance between two workloads: half the sum over
 * every typical pod shape (CPU, per-card GPU, cards, models) of the
 * difference of its weights, a shape missing from one weighing 0 there.
 * 0 (the same weights) to 1 (no shape in common); for workloads whose
 * weights sum to 1. */
double egpu_workload_distance(const struct egpu_workload *a, const struct egpu_workload *b);

/* An explicit workload: pods copied, weights renormalised. Returns 0, -EINVAL
 * (n = 0, a negative weight, all weights 0, ncards = 0 with gpu_milli > 0)
 * or -ENOMEM. */
int egpu_workload_from_list(const struct egpu_typical_pod *pods, size_t n,
                            struct egpu_workload *out) EGPU_MUST_CHECK;

void egpu_workload_free(struct egpu_workload *w);

/* ------------------------------------------------------------------------ */
/* Request shapes (src/core/shapes.c): the placer memo's key, counted        */

/* The shape of r, the key a placer memoises its verdicts by: CPU (milli),
 * memory (MiB), model mask and the one GPU container's compute per card
 * (milli), cards and memory (MiB), the rest zeroed, into *shape. False
 * (*shape untouched) for a request of more than one GPU container, which
 * no memo keeps. */
bool egpu_request_shape_of(const struct egpu_pod_request *r, struct egpu_pod_request *shape);

/* Do a and b have the same shape (as egpu_request_shape_of keys them)? */
bool egpu_request_same_shape(const struct egpu_pod_request *a, const struct egpu_pod_request *b);

/* Requests counted by shape, one at a time: init (or zero), add each, top,
 * free. Owns its memory. */
struct egpu__shape_count;
struct egpu_shape_tally {
    struct egpu__shape_count *shapes;
    size_t nshapes, cap;
    uint32_t *index; /* open addressing over the shapes, nindex slots */
    size_t nindex;
    size_t npods; /* requests counted */
};

void egpu_shape_tally_init(struct egpu_shape_tally *t);

/* Count r under its shape (a request of more than one GPU container is
 * passed over: 0). Returns 0 or -ENOMEM (the tally as it was). */
int egpu_shape_tally_add(struct egpu_shape_tally *t,
                         const struct egpu_pod_request *r) EGPU_MUST_CHECK;

/* The shapes counted at least min_count times, most frequent first (ties:
 * the one counted first), at most max of them into out (max entries).
 * Returns how many were written. t may be added to after it. */
size_t egpu_shape_tally_top(struct egpu_shape_tally *t, size_t min_count,
                            struct egpu_pod_request *out, size_t max);

/* Free t's memory and leave it initialised; NULL is a no-op. */
void egpu_shape_tally_free(struct egpu_shape_tally *t);

/* Fragmentation of node n for one typical pod m, in milli-GPU (FGD, as
 * defined in shared/data/openb/README.md): all idle GPU of n when m asks no
 * GPU, m's models exclude n's, or n lacks the CPU or the cards for m;
 * otherwise the idle milli on cards whose free compute is below m's per-card
 * request. */
uint64_t egpu_frag_node_pod(const struct egpu_node *n, const struct egpu_typical_pod *m);

/* F_n(M) = sum over m of weight_m * F_n(m), in milli-GPU. */
double egpu_frag_node(const struct egpu_node *n, const struct egpu_workload *w);

/* Sum of egpu_frag_node over the cluster, in milli-GPU. */
double egpu_frag_cluster(const struct egpu_cluster *c, const struct egpu_workload *w);

/* Idle GPU of the cluster (capacity - allocated), in milli-GPU. */
uint64_t egpu_cluster_idle_milli(const struct egpu_cluster *c);

/* ------------------------------------------------------------------------ */
/* Policies and placement (src/core/policy.c, src/core/placement.c)         */

/* Every policy, once, in enum order: X(ID, "name", "text before the name
 * in EGPU_POLICY_NAMES") for each.
 *   binpack   fill the fullest node / card first
 *   spread    the emptiest node / card first
 *   best-fit  least resources left after placement
 *   random    uniformly at random among those that fit (seeded)
 *   fgd       least growth of fragmentation for the target workload
 *   fgd-cpu   fgd, counting as fragmented also the idle GPU that a node's
 *             free CPU cannot feed (docs/replay.md, "fgd-cpu")
 *   fgd-cpu-fill  fgd-cpu (slack 1.2) counting also, 1.5 times, the compute
 *             of partly used cards that no sum of the workload's frequent
 *             card sizes fills, in both tiers (docs/replay.md, "fgd-cpu-fill")
 * The enum, EGPU_POLICY_COUNT, EGPU_POLICY_NAMES and the names that
 * egpu_policy_name and egpu_policy_parse know (src/core/policy.c) all come
 * from this list, so the flags' help, the errors and the parser cannot drift
 * apart. */
#define EGPU_POLICY_LIST(X)      \
    X(BINPACK, "binpack", "")    \
    X(SPREAD, "spread", ", ")    \
    X(BESTFIT, "best-fit", ", ") \
    X(RANDOM, "random", ", ")    \
    X(FGD, "fgd", ", ")          \
    X(FGD_CPU, "fgd-cpu", ", ")  \
    X(FGD_CPU_FILL, "fgd-cpu-fill", ", ")

#define EGPU__POLICY_ENUM(id, name, sep) EGPU_POLICY_##id,
#define EGPU__POLICY_ONE(id, name, sep)  +1
#define EGPU__POLICY_NAME(id, name, sep) sep name

/* Experimental policies (docs/replay.md, "Experimental policies"), in
 * the same form, after the list above in the enum. They are variants of
 * FGD (FGD's card tier, a node tier built on FGD's score) tried against
 * it on the openb trace and not (yet) better on every variant. Only
 * egpu_policy_parse_experimental (egpu-sim --policy) knows their names:
 * egpu_policy_parse, and so every flag, annotation and class of the live
 * path, refuses them, and they are not in EGPU_POLICY_COUNT.
 * Each scores a node as FGD does, floor(100 * sigmoid(-dF' / 1000)), with
 * F'_n = F_n(M) changed as below, and may add a tie-break below one
 * integer step (docs/replay.md has the formulas and the figures). fgd-cpu
 * (above: F' = F + 2 S, S = max(0, R - 1.5 rho CPU free), the idle GPU the
 * node's free CPU cannot feed, rho the target workload's milli-GPU per
 * milli-CPU) and fgd-cpu-fill (above) are the ones of them that were kept:
 *   fgd-bf        ties to the least best-fit leftover
 *   fgd-blend     dF' = dF + 0.05 R after (best-fit's GPU leftover blended in)
 *   fgd-whole     ties to the node left with the fewest whole free cards
 *   fgd-cpupods   pods asking no GPU: ties to the most CPU beyond the GPU's
 *   fgd-pack      F' = (F + P) / 2, P the GPU copies of each m cannot take
 *   fgd-small     ties to the node with the fewest cards
 *   fgd-cpu-pack  fgd-cpu and fgd-pack together
 *   fgd-cpu-bf    fgd-cpu with fgd-bf's tie-break
 *   fgd-cpu-cards fgd-cpu and fgd-pack with P counting the cards only
 *   fgd-cpu-look  fgd-cpu, its top nodes ranked by a one-pod lookahead over
 *                 the workload's most frequent typical pods
 *   fgd-cpu-tight fgd-cpu, pods of at most 190 milli-GPU on the card they
 *                 fit tightest
 *   fgd-cpu-fill-look fgd-cpu-fill (above) with S's slack 1.5 and
 *                 fgd-cpu-look's lookahead
 */
#define EGPU_POLICY_EXPERIMENTAL_LIST(X)    \
    X(FGD_BF, "fgd-bf", "")                 \
    X(FGD_BLEND, "fgd-blend", ", ")         \
    X(FGD_WHOLE, "fgd-whole", ", ")         \
    X(FGD_CPUPODS, "fgd-cpupods", ", ")     \
    X(FGD_PACK, "fgd-pack", ", ")           \
    X(FGD_SMALL, "fgd-small", ", ")         \
    X(FGD_CPU_PACK, "fgd-cpu-pack", ", ")   \
    X(FGD_CPU_BF, "fgd-cpu-bf", ", ")       \
    X(FGD_CPU_CARDS, "fgd-cpu-cards", ", ") \
    X(FGD_CPU_LOOK, "fgd-cpu-look", ", ")   \
    X(FGD_CPU_TIGHT, "fgd-cpu-tight", ", ") \
    X(FGD_CPU_FILL_LOOK, "fgd-cpu-fill-look", ", ")

enum egpu_policy_kind {
    EGPU_POLICY_LIST(EGPU__POLICY_ENUM) EGPU_POLICY_EXPERIMENTAL_LIST(EGPU__POLICY_ENUM)
};

/* How many policies there are: the kinds are 0..EGPU_POLICY_COUNT-1. */
#define EGPU_POLICY_COUNT (0 EGPU_POLICY_LIST(EGPU__POLICY_ONE))
/* "binpack, spread, best-fit, random, fgd, fgd-cpu, fgd-cpu-fill": a string literal, for help texts
 * and error messages. */
#define EGPU_POLICY_NAMES EGPU_POLICY_LIST(EGPU__POLICY_NAME)

/* Policy by name: one of EGPU_POLICY_NAMES, or "bestfit" for best-fit.
 * Returns 0 or -EINVAL naming the allowed values; writes *out only on 0. */
int egpu_policy_parse(const char *name, enum egpu_policy_kind *out,
                      struct egpu_error *err) EGPU_MUST_CHECK;
/* The name of kind k, a static string; "unknown" when k is not below
 * EGPU_POLICY_ALL_COUNT. */
const char *egpu_policy_name(enum egpu_policy_kind k);

/* Does policy k need a target workload (egpu_placer_config.workload): fgd,
 * fgd-cpu, fgd-cpu-fill and the experimental FGD variants. */
bool egpu_policy_needs_workload(enum egpu_policy_kind k);

/* How many policies there are with the experimental ones: the kinds are
 * 0..EGPU_POLICY_ALL_COUNT-1. */
#define EGPU_POLICY_ALL_COUNT          (EGPU_POLICY_COUNT EGPU_POLICY_EXPERIMENTAL_LIST(EGPU__POLICY_ONE))
/* "fgd-bf, fgd-blend, ...": the experimental policies' names, a string
 * literal. */
#define EGPU_POLICY_EXPERIMENTAL_NAMES EGPU_POLICY_EXPERIMENTAL_LIST(EGPU__POLICY_NAME)

/* As egpu_policy_parse, and also the experimental policies'
 * names (EGPU_POLICY_EXPERIMENTAL_NAMES), for egpu-sim. Returns 0 or
 * -EINVAL naming both lists; writes *out only on 0. */
int egpu_policy_parse_experimental(const char *name, enum egpu_policy_kind *out,
                                   struct egpu_error *err) EGPU_MUST_CHECK;

/* DRA mode (src/core/dra.c). kube-scheduler's structured-parameters
 * allocator (k8s.io/dynamic-resource-allocation/structured, 1.34+) picks a
 * DRA node's cards: devices in slice order (pools by driver then pool name,
 * slices by name), the first that fits each request of a claim, with
 * backtracking across the claim's requests and devices, no scoring. The
 * agent publishes one device per healthy card (src/agent/dra_slice.c), so
 * the device order of the node's slice decides which card a pod gets.
 * X(ID, "name", "text before the name in EGPU_DRA_ORDER_NAMES"):
 *   index            by NVML index: "gpu-0", "gpu-1", ... (the agent's order)
 *   most-allocated   most allocated compute first, then most allocated
 *                    memory, then index: first fit is then a tightest fit
 *   least-allocated  least allocated compute first, then least memory,
 *                    then index: first fit is then an emptiest fit
 * The last two are orders the agent could publish and republish as its
 * cards fill. */
#define EGPU_DRA_ORDER_LIST(X)                \
    X(INDEX, "index", "")                     \
    X(MOST_ALLOCATED, "most-allocated", ", ") \
    X(LEAST_ALLOCATED, "least-allocated", ", ")

#define EGPU__DRA_ORDER_ENUM(id, name, sep) EGPU_DRA_ORDER_##id,
#define EGPU__DRA_ORDER_ONE(id, name, sep)  +1
#define EGPU__DRA_ORDER_NAME(id, name, sep) sep name

enum egpu_dra_order { EGPU_DRA_ORDER_LIST(EGPU__DRA_ORDER_ENUM) };

/* How many orders there are, and "index, most-allocated, least-allocated"
 * (a string literal, for help texts and errors). */
#define EGPU_DRA_ORDER_COUNT (0 EGPU_DRA_ORDER_LIST(EGPU__DRA_ORDER_ONE))
#define EGPU_DRA_ORDER_NAMES EGPU_DRA_ORDER_LIST(EGPU__DRA_ORDER_NAME)

/* The most devices the allocator model tries for one pod on one node
 * before it gives up (the pod does not fit there then): the search
 * backtracks, and a pod of many shares on a node of many cards that fits
 * none would otherwise try every arrangement. kube-scheduler bounds the
 * same search by time instead. */
#define EGPU_DRA_STEPS_MAX 100000

/* Order by name: one of EGPU_DRA_ORDER_NAMES. Returns 0, or -EINVAL with
 * *err naming the allowed values; writes *out only on 0. */
int egpu_dra_order_parse(const char *name, enum egpu_dra_order *out,
                         struct egpu_error *err) EGPU_MUST_CHECK;
/* The name of order o, a static string; "unknown" for a value not listed. */
const char *egpu_dra_order_name(enum egpu_dra_order o);

/* The devices of node's slice in order: positions in node->gpus (not NVML
 * indexes) of its healthy cards, written to out (caller-owned, room for
 * node->ngpus entries; at most EGPU_NODE_GPUS_MAX). An unhealthy card is
 * not in the slice. The state-dependent orders read the cards' allocated
 * compute (milli-GPU) and memory (MiB) as they are now: a slice republished
 * after every change. Returns the number of devices written (0 for a node
 * without healthy cards), or -EINVAL for an order not in the list. Never
 * allocates. */
int egpu_dra_device_order(const struct egpu_node *node, enum egpu_dra_order order, uint16_t *out);

struct egpu_placer_config {
    enum egpu_policy_kind node_policy;    /* which node */
    enum egpu_policy_kind card_policy;    /* which card(s) on that node */
    uint64_t seed;                        /* random policy and tie-breaking */
    const struct egpu_workload *workload; /* required by FGD; borrowed, must outlive the placer */
    bool memo; /* cache each node's score per request shape (deterministic policies) */
    /* The most bytes the memo's verdicts take (a verdict per node slot and
     * shape; the least recently used shape goes first), at least 8 shapes
     * kept whatever it says; 0 = 128 MiB (all 256 shapes up to 16,384 node
     * slots, 64 at 65,536). */
    size_t memo_bytes;
    /* Break exact ties by measured load (egpu_gpu.load_pct): between cards the
     * card policy scores alike, the less loaded card; between nodes of equal
     * score, the node whose picked cards are less loaded (egpu_pick_load),
     * before the per-seed hash. false: loads are never read. */
    bool load_aware;
    /* DRA mode: the cards are the allocator's first fit over the node's
     * devices in dra_order (egpu_dra_device_order), not card_policy's
     * choice; the node is still node_policy's (the extender's prioritize).
     * Load and topology do not steer that fit (the allocator knows
     * neither). With dra_blind the node score is computed as if card_policy
     * chose the cards (an extender blind to the allocator's choice), else
     * with the allocator's cards (an extender that models it). false: none
     * of the three is read. */
    bool dra;
    enum egpu_dra_order dra_order;
    bool dra_blind;
};

struct egpu_placer;

/* New placer, or NULL with *err set: -EINVAL (FGD without a workload, or
 * with dra a dra_order not in EGPU_DRA_ORDER_LIST) or -ENOMEM. */
struct egpu_placer *egpu_placer_new(const struct egpu_placer_config *cfg, struct egpu_error *err);
void egpu_placer_free(struct egpu_placer *p);

/* Filter: can node (of cluster c) host r? On false, reason (if not NULL)
 * gets one line for the extender's FailedNodes, e.g. "insufficient cpu:
 * requested 8000m, free 4000m". On true, *pick (if not NULL) gets the
 * card-tier choice. */
bool egpu_placer_can_host(struct egpu_placer *p, const struct egpu_cluster *c,
                          const struct egpu_node *node, const struct egpu_pod_request *r,
                          struct egpu_pick *pick, char *reason, size_t reason_len);

/* Score of placing r on node with the card-tier pick (higher is better; the
 * scale depends on the node policy, see policy.c). Writes *score and *pick
 * (pick may be NULL). Returns 0 or EGPU_ENOFIT when the node cannot host r. */
int egpu_placer_score(struct egpu_placer *p, const struct egpu_cluster *c,
                      const struct egpu_node *node, const struct egpu_pod_request *r, double *score,
                      struct egpu_pick *pick) EGPU_MUST_CHECK;

/* One node's answer for a request: can it host it, and with what score. */
struct egpu_verdict {
    double score; /* as egpu_placer_score; 0 when !ok */
    bool ok;
    uint16_t load; /* with load_aware: egpu_pick_load of the pick; else EGPU_LOAD_UNKNOWN */
};

#define EGPU_NO_SLOT UINT32_MAX /* in a slot list: a name with no node */

/* egpu_placer_score for many nodes at once: out[i] for the node in slot
 * slots[i] of c (EGPU_NO_SLOT: not a node, !ok). The same answers as n calls,
 * faster: a node unchanged since its result was memoised is answered from
 * c->gens and the memo alone, without touching the node, so a walk over
 * thousands of nodes runs at memory speed instead of missing the cache on
 * each node. slots and out are arrays of n; a slot at or past c->nnodes
 * counts as no node. */
void egpu_placer_score_slots(struct egpu_placer *p, const struct egpu_cluster *c,
                             const struct egpu_pod_request *r, const uint32_t *slots, size_t n,
                             struct egpu_verdict *out);

/* How many request shapes p's memo keeps verdicts for over c's node slots
 * (about 128 MiB of them; every shape up to 16,384 slots, 64 at 65,536):
 * past it the least recently used shape is dropped. 0 when p memoises
 * nothing (cfg.memo false, or a random policy). */
size_t egpu_placer_memo_shapes(const struct egpu_placer *p, const struct egpu_cluster *c);

/* Warm p's memo for r over node slots [first, first + n) of c (past
 * c->nnodes: none): each node whose memoised verdict for r is not of its
 * generation is judged now, as egpu_placer_score_slots would judge it, so
 * that a request of r's shape later finds them all memoised. Counts as a
 * use of r's shape (the memo's least recently used order). Returns how many
 * verdicts were made; 0 when all were memoised, when r is not memoised
 * (more than one GPU container, a random policy), or out of memory. */
size_t egpu_placer_warm(struct egpu_placer *p, const struct egpu_cluster *c,
                        const struct egpu_pod_request *r, uint32_t first, uint32_t n);

/* Choose the node and cards for r across cluster c: the node with the
 * highest score; ties go (with load_aware) to the lowest egpu_pick_load,
 * then to the node ranked first by a per-seed hash of the
 * node names (a fixed random order for each seed, as in the FGD paper's
 * simulator). Writes *node and *pick on success. Returns 0 or EGPU_ENOFIT. */
int egpu_placer_schedule(struct egpu_placer *p, const struct egpu_cluster *c,
                         const struct egpu_pod_request *r, struct egpu_node **node,
                         struct egpu_pick *pick) EGPU_MUST_CHECK;

/* egpu_placer_schedule among the nodes in slots[0..n) of c only (a slot
 * that is EGPU_NO_SLOT or at or past c->nnodes is passed over), with the
 * same rule: what a scheduler that sends the policy a sample of the nodes
 * is given (egpu-sim --node-sample). slots is borrowed, n entries; with a
 * deterministic policy their order does not change the choice (random draws
 * in that order). Returns 0 (writes *node and *pick) or EGPU_ENOFIT when
 * none of them can host r. */
int egpu_placer_schedule_slots(struct egpu_placer *p, const struct egpu_cluster *c,
                               const struct egpu_pod_request *r, const uint32_t *slots, size_t n,
                               struct egpu_node **node, struct egpu_pick *pick) EGPU_MUST_CHECK;

/* ------------------------------------------------------------------------ */
/* Seeded pseudo-random numbers (src/core/rng.c): xoshiro256**             */

struct egpu_rng {
    uint64_t s[4];
};

/* Seed r from seed (any value; expanded with splitmix64). */
void egpu_rng_seed(struct egpu_rng *r, uint64_t seed);
/* Next 64 random bits. */
uint64_t egpu_rng_next(struct egpu_rng *r);
/* Uniform integer in [0, n), without modulo bias; n must be > 0. */
uint64_t egpu_rng_below(struct egpu_rng *r, uint64_t n);
/* 64-bit hash of a C string mixed with seed (FNV-1a, then splitmix64). */
uint64_t egpu_hash_str(const char *s, uint64_t seed);

/* ------------------------------------------------------------------------ */
/* Arrays of C strings (src/core/strv.c)                                    */

/* A copy of v[0..n) (NUL-terminated strings) in one allocation: n pointers
 * followed by the strings' bytes. Free it with egpu_free. Returns NULL when
 * out of memory. */
const char **egpu_strv_copy(const char *const *v, size_t n);
/* True when a[i] and b[i] are equal strings for every i in 0..n. */
bool egpu_strv_equal(const char *const *a, const char *const *b, size_t n);

/* ------------------------------------------------------------------------ */
/* GPU UUIDs (src/core/uuid.c)                                              */

#define EGPU_GPU_UUID_BYTES   16
#define EGPU_GPU_UUID_STR_MAX 41 /* "GPU-" + 36 + NUL */

/* Parse "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (hex digits in either
 * case, the four dashes exactly there) into its 16 bytes, in order: the
 * string NVML's nvmlDeviceGetUUID gives and the bytes of the CUDA driver
 * API's CUuuid (cuDeviceGetUuid). Returns 0, or -EINVAL (out untouched). */
int egpu_gpu_uuid_parse(const char *s, uint8_t out[EGPU_GPU_UUID_BYTES]) EGPU_MUST_CHECK;
/* Format 16 bytes as "GPU-xxxxxxxx-..." (lowercase) into buf (at least
 * EGPU_GPU_UUID_STR_MAX bytes). Returns buf. */
char *egpu_gpu_uuid_format(const uint8_t b[EGPU_GPU_UUID_BYTES], char *buf);

#ifdef __cplusplus
}
#endif

#endif /* EGPU_CORE_H */
