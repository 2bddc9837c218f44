/* egpu/agent.h - egpu-agent, the node agent: the GPU inventory.
 *
 * The agent finds the node's cards through a backend and publishes one GPU
 * object (elasticgpu.io/v1alpha1, DESIGN.md section 3) per card:
 *
 * - NVML (src/agent/nvml.c): libnvidia-ml.so.1 loaded with dlopen at run
 *   time, every symbol looked up once and checked; a library or a required
 *   symbol that is missing is an error at open, never a crash. Health comes
 *   from XID critical-error events where the driver offers them and from a
 *   probe (UUID and memory info) on every list.
 * - fake (src/agent/fake.c): cards described by a spec such as
 *   "2xA100-80GB" or "1xT4-16GB,4xA100-40GB", for machines without GPUs
 *   (tests, demos); --fake-gpus or $EGPU_FAKE_GPUS selects it.
 *
 * The inventory (src/agent/inventory.c) makes the API server hold exactly one
 * GPU object per card of this node, named "<node>-gpu<index>" and labelled
 * elasticgpu.io/node=<node>, and deletes the objects of cards that are gone.
 * It writes only what differs, so a rerun (or a restart) writes nothing.
 *
 * Units: memory in MiB (_mib), time in milliseconds (_ms), compute capacity
 * in percent of one card (100 when healthy). Errors: 0 or a negative code
 * (-errno or EGPU_E*) with one line of detail in *err (may be NULL).
 */
#ifndef EGPU_AGENT_H
#define EGPU_AGENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "egpu/api.h"
#include "egpu/core.h"
#include "egpu/kube.h"

#ifdef __cplusplus
extern "C" {
#endif

#define EGPU_NVML_LIBRARY   "libnvidia-ml.so.1"    /* dlopen name of NVML */
#define EGPU_FAKE_GPUS_ENV  "EGPU_FAKE_GPUS"       /* fake spec when no --fake-gpus is given */
#define EGPU_GPU_LABEL_NODE EGPU_API_GROUP "/node" /* label on every GPU object: its node */
#define EGPU_GPU_HEALTHY    EGPU_API_GPU_HEALTHY   /* status.health values (egpu/api.h) */
#define EGPU_GPU_UNHEALTHY  EGPU_API_GPU_UNHEALTHY
#define EGPU_GPU_MODEL_MAX  128  /* model name incl. NUL (CRD: maxLength 127) */
#define EGPU_GPU_REASON_MAX 128  /* why a card is unhealthy, incl. NUL */
#define EGPU_GPU_INDEX_MAX  1023 /* highest spec.index the CRD accepts */
#define EGPU_GPU_NAME_MAX   254  /* GPU object name incl. NUL (DNS subdomain: 253) */

/* ------------------------------------------------------------------------ */
/* Cards and their backends (src/agent/gpus.c, nvml.c, fake.c)              */

/* Which NVML call measured a card's used memory (egpu_gpu_info.mem_source).
 * nvmlDeviceGetMemoryInfo (v1) counts what the driver and firmware reserve
 * as used (480 MiB on an idle H100); nvmlDeviceGetMemoryInfo_v2 reports that
 * apart, so its used is what processes took. */
enum egpu_gpu_mem_source {
    EGPU_MEM_SOURCE_NONE, /* nothing measured (fake cards, a card never read) */
    EGPU_MEM_SOURCE_V1,   /* nvmlDeviceGetMemoryInfo: used includes the reservation */
    EGPU_MEM_SOURCE_V2,   /* nvmlDeviceGetMemoryInfo_v2: used excludes it */
};

/* One card as the backend sees it now. */
struct egpu_gpu_info {
    /* NVML UUID ("GPU-" + 36 characters). "" when the card stopped answering
     * before its identity was ever read (healthy is then false). */
    char uuid[EGPU_UUID_MAX];
    uint32_t index;                 /* NVML index on this node, 0-based */
    uint32_t minor;                 /* device node /dev/nvidia<minor> */
    char model[EGPU_GPU_MODEL_MAX]; /* product name, e.g. "NVIDIA A100-SXM4-80GB" */
    uint64_t mem_mib;               /* total memory, MiB */
    uint64_t used_mem_mib;          /* memory in use (NVML memory info), MiB; 0 for fake cards */
    uint64_t reserved_mem_mib;      /* the driver's reservation, MiB: v2 only, else 0 */
    enum egpu_gpu_mem_source mem_source; /* the call behind used_mem_mib (NONE without has_used) */
    uint32_t util_pct;                   /* compute utilization (NVML), percent 0..100 */
    bool has_used; /* used_mem_mib was measured (NVML; never for fake cards) */
    bool has_util; /* util_pct was measured (NVML reports it for this card) */
    bool healthy;
    char reason[EGPU_GPU_REASON_MAX]; /* why not healthy, e.g. "XID 79"; "" when healthy */
    /* With has_links (egpu_inventory_sync sets it; egpu_gpus_list does not),
     * links[j] is the enum egpu_gpu_link to the card at position j of the same
     * list; published as spec.topology. Without it nothing is published. */
    bool has_links;
    uint8_t links[EGPU_NODE_GPUS_MAX];
};

/* How two cards reach each other, closest first (the rows of
 * `nvidia-smi topo -m`). NVLink wins over any PCIe relation. */
enum egpu_gpu_link {
    EGPU_LINK_NVLINK,  /* NV: NVLink between the two */
    EGPU_LINK_BOARD,   /* the same board (NVML_TOPOLOGY_INTERNAL, e.g. K80) */
    EGPU_LINK_PIX,     /* at most one PCIe switch */
    EGPU_LINK_PXB,     /* several PCIe switches, no host bridge */
    EGPU_LINK_PHB,     /* through one PCIe host bridge */
    EGPU_LINK_NODE,    /* host bridges within one NUMA node */
    EGPU_LINK_SYS,     /* across NUMA nodes (SMP interconnect) */
    EGPU_LINK_UNKNOWN, /* the backend cannot tell */
};

/* "NV", "BOARD", "PIX", "PXB", "PHB", "NODE", "SYS" or "unknown" (static). */
const char *egpu_gpu_link_name(enum egpu_gpu_link link);

/* The name GPU.status.used.memorySource and the metrics give a source: the
 * NVML call, "nvmlDeviceGetMemoryInfo_v2" or "nvmlDeviceGetMemoryInfo", and
 * "none" for EGPU_MEM_SOURCE_NONE or a value out of range. Static storage. */
const char *egpu_gpu_mem_source_name(enum egpu_gpu_mem_source source);

enum egpu_gpus_kind {
    EGPU_GPUS_NVML,
    EGPU_GPUS_FAKE,
};

/* An open backend. Thread safety: one thread may wait in egpu_gpus_wait
 * while another lists, links or sets fake health; free only when neither. */
struct egpu_gpus;

struct egpu_gpus_config {
    const char *fake;         /* --fake-gpus spec; NULL = $EGPU_FAKE_GPUS; neither = NVML */
    const char *nvml_library; /* --nvml-library path; NULL = EGPU_NVML_LIBRARY */
    const char *node;         /* node name; seeds the fake backend's UUIDs (NULL = "") */
};

/* Open the backend cfg (NULL = all defaults) selects: a non-empty cfg->fake, else a non-empty
 * $EGPU_FAKE_GPUS, else NVML. Returns what egpu_gpus_open_fake or
 * egpu_gpus_open_nvml returns; *out (free with egpu_gpus_free) only on
 * success. */
int egpu_gpus_open(const struct egpu_gpus_config *cfg, struct egpu_gpus **out,
                   struct egpu_error *err) EGPU_MUST_CHECK;

/* Load NVML from library (a path or a name for dlopen's search; NULL =
 * EGPU_NVML_LIBRARY), resolve its symbols, nvmlInit_v2, and register every
 * card for XID critical-error events where supported. Returns 0, -ENOENT
 * (the library cannot be loaded: the message names it and suggests
 * --fake-gpus), -ENOSYS (a required symbol is missing: the message names it;
 * nothing of the library was called), the mapped NVML error of nvmlInit_v2
 * (-ENODEV driver not loaded, -EACCES no permission, -EPROTO driver/library
 * version mismatch, else -EIO; the message carries nvmlErrorString) or
 * -ENOMEM. */
int egpu_gpus_open_nvml(const char *library, struct egpu_gpus **out,
                        struct egpu_error *err) EGPU_MUST_CHECK;

/* A fake backend with the cards spec describes:
 *   spec  = group *("," group)        e.g. "1xT4-16GB,4xA100-40GB"
 *   group = count "x" model           count 1..64, at most 64 cards in all
 *   model = name "-" size unit        name: letters, digits, '-', '_', '.'
 *   unit  = "GB" | "GiB" (x 1024 MiB) | "MB" | "MiB"  (case-insensitive)
 * Cards are indexed in spec order from 0, minor = index, model = the group's
 * model text ("A100-80GB"), all healthy. UUIDs are derived from node and
 * index, so the same node gets the same UUIDs after a restart. Links: PHB
 * within a group, SYS between groups, until egpu_gpus_fake_set_link.
 * Returns 0, EGPU_ESYNTAX or EGPU_ERANGE (the message quotes the spec and
 * shows the allowed form) or -ENOMEM. */
int egpu_gpus_open_fake(const char *spec, const char *node, struct egpu_gpus **out,
                        struct egpu_error *err) EGPU_MUST_CHECK;

/* Close the backend (nvmlShutdown and dlclose for NVML). NULL is a no-op. */
void egpu_gpus_free(struct egpu_gpus *g);

enum egpu_gpus_kind egpu_gpus_kind(const struct egpu_gpus *g);

/* The cards now, sorted by index, into out[0 .. *n) (caller-owned, cap
 * entries). Each list probes every card: one that fails to answer is listed
 * unhealthy with the failing call in reason, keeping the identity read
 * before when there was one; a card stays unhealthy after a critical XID
 * until the backend is reopened. Returns 0, EGPU_ELIMIT (more than cap
 * cards), or a failure of the backend as a whole (NVML device count: -EIO,
 * -ENODEV...). *n written only on success. */
int egpu_gpus_list(struct egpu_gpus *g, struct egpu_gpu_info *out, size_t cap, size_t *n,
                   struct egpu_error *err) EGPU_MUST_CHECK;

/* The relation between cards of index a and b (a != b) in *out. A backend or
 * driver that cannot tell gives EGPU_LINK_UNKNOWN, not an error. Returns 0,
 * -EINVAL (a == b), -ENODEV (no such card) or an NVML failure. */
int egpu_gpus_link(struct egpu_gpus *g, uint32_t a, uint32_t b, enum egpu_gpu_link *out,
                   struct egpu_error *err) EGPU_MUST_CHECK;

/* Wait up to timeout_ms (>= 0) for health events: NVML XID critical errors
 * (application XIDs 13, 31, 43, 45, 68 and 109 are ignored, as NVIDIA's
 * device plugin does) or fake health changes. Returns early with the number
 * of cards whose health changed (> 0: list and publish again), 0 after the
 * timeout, or a negative code. Without event support it simply sleeps:
 * health then comes from the probes of egpu_gpus_list. */
int egpu_gpus_wait(struct egpu_gpus *g, long timeout_ms, struct egpu_error *err) EGPU_MUST_CHECK;

/* Fake backend only: mark the card of index healthy or not (reason copied,
 * NULL = "set by test") and wake egpu_gpus_wait. Returns 0, -EINVAL (not a
 * fake backend) or -ENODEV (no such card). */
int egpu_gpus_fake_set_health(struct egpu_gpus *g, uint32_t index, bool healthy, const char *reason,
                              struct egpu_error *err) EGPU_MUST_CHECK;

/* Fake backend only: set the relation of a and b (both ways). Returns 0,
 * -EINVAL (not fake, a == b) or -ENODEV. */
int egpu_gpus_fake_set_link(struct egpu_gpus *g, uint32_t a, uint32_t b, enum egpu_gpu_link link,
                            struct egpu_error *err) EGPU_MUST_CHECK;

/* ------------------------------------------------------------------------ */
/* GPU objects in the API server (src/agent/inventory.c)                    */

/* What one publish did: objects created, spec or label patched, status
 * patched, deleted (cards gone, or replaced by another card at the same
 * index), left as they were. */
struct egpu_inventory_stats {
    unsigned created;
    unsigned updated;
    unsigned status_updated;
    unsigned deleted;
    unsigned unchanged;
};

/* The GPU object name of card index on node into out (len bytes;
 * EGPU_GPU_NAME_MAX always fits): "<node>-gpu<index>" as a
 * DNS subdomain: lower-cased, characters other than [a-z0-9.-] (and dots that
 * would not sit between letters or digits) become '-', leading ones are
 * dropped; a node part too long for 253 characters is cut and ended with 8
 * hex digits of its hash, so distinct nodes keep distinct names. Returns 0,
 * -EINVAL (node has no letter or digit, index > 1023) or -ENAMETOOLONG (len
 * too small). */
int egpu_inventory_gpu_name(const char *node, uint32_t index, char *out, size_t len,
                            struct egpu_error *err) EGPU_MUST_CHECK;

/* The elasticgpu.io/node label value for node into out (len >= 64): node
 * itself when it is a valid label value (at most 63 characters), else its
 * first 46 characters, '-' and 16 hex digits of its hash. Returns 0,
 * -EINVAL (node empty) or -ENAMETOOLONG. */
int egpu_inventory_node_label(const char *node, char *out, size_t len,
                              struct egpu_error *err) EGPU_MUST_CHECK;

/* Make node's GPU objects match cards[0 .. n) (borrowed):
 * - lists GPU objects labelled elasticgpu.io/node=<node> (only those whose
 *   spec.nodeName is node are ever changed: other nodes' are untouched);
 * - per card: creates the object (spec nodeName, index, uuid, model, memory;
 *   the label) or merge-patches spec and label where they differ; an object
 *   of the right name holding another UUID (another card now has this index)
 *   is deleted and created again, so its old allocations go with it; an
 *   object of the right name but without the label is adopted; one that
 *   belongs to another node is left alone and reported as -EEXIST;
 * - spec.topology: per card with has_links, {index, link} of every other
 *   identified card whose link is known, by peer index (egpu_api_topo_name
 *   names: NVLink, Internal, SingleSwitch, ...); absent when none is known;
 * - per card: merge-patches the status subresource where health or capacity
 *   differ (Healthy: core 100, memory = memory; Unhealthy: core 0, memory
 *   0), leaving status.allocated and status.used to their writers;
 * - a card without a UUID (lost before it was identified) only has the
 *   existing object of its index marked Unhealthy;
 * - deletes this node's objects of cards not in the list.
 * Objects equal to what they should be are not written. Every card is tried
 * even when one fails; deletes happen only after a successful list. Returns
 * 0 or the first failure (kube.h codes; -EINVAL for an invalid card or node;
 * -EEXIST as above). stats (may be NULL) is filled either way. */
int egpu_inventory_publish(struct egpu_kube *kc, const char *node,
                           const struct egpu_gpu_info *cards, size_t n,
                           struct egpu_inventory_stats *stats,
                           struct egpu_error *err) EGPU_MUST_CHECK;

/* The link between every two identified cards of cards[0 .. n) (as
 * egpu_gpus_list gave them) into their links[], has_links set on each; one
 * the backend cannot read stays EGPU_LINK_UNKNOWN (logged at warning level;
 * the card is still published). Call from the thread that lists. */
void egpu_gpus_read_links(struct egpu_gpus *g, struct egpu_gpu_info *cards, size_t n);

/* List g's cards, read the link between every two identified cards
 * (egpu_gpus_link; one it cannot read is left unknown: the card is still
 * published) and publish them for node. Returns what egpu_gpus_list or
 * egpu_inventory_publish returns (nothing is published when listing
 * fails, so an NVML failure never deletes objects). */
int egpu_inventory_sync(struct egpu_kube *kc, struct egpu_gpus *g, const char *node,
                        struct egpu_inventory_stats *stats, struct egpu_error *err) EGPU_MUST_CHECK;

/* GPU status.used: what each card uses now, as NVML measured it (never
 * from a file a container can write). The agent reports on every probe of
 * its health loop (every 10 s), and writes a card's status.used (memory
 * MiB, memorySource: the NVML call it came from, reservedMemory MiB with
 * nvmlDeviceGetMemoryInfo_v2, utilization percent, updateTime) when the
 * card is new to it, when EGPU_USED_REFRESH reports passed without a write
 * (so updateTime says the figures are live: at most 5 minutes old on a
 * steady card), or, at least EGPU_USED_MIN_REPORTS reports after the last
 * write, when memory or the reservation moved by EGPU_USED_MIN_MIB,
 * utilization by EGPU_USED_MIN_PCT, or the source changed since it. A busy
 * card is thus written at most once a minute: 1,000 nodes of 8 cards make
 * at most about 133 small patches a second, fewer than their kubelets'
 * Lease renewals, rather than one per card per probe. */
#define EGPU_USED_MIN_MIB     256
#define EGPU_USED_MIN_PCT     10
#define EGPU_USED_MIN_REPORTS 6
#define EGPU_USED_REFRESH     30

/* What was last written for one card. */
struct egpu_inventory_used_card {
    char uuid[EGPU_UUID_MAX]; /* "" = nothing written for this slot */
    uint64_t mem_mib;
    uint64_t reserved_mem_mib;
    enum egpu_gpu_mem_source mem_source;
    uint32_t util_pct;
    bool has_util;
    unsigned reports; /* reports since the last write */
};

/* What was last written, per slot (the card's place in the list; zero it
 * to start; one per node). */
struct egpu_inventory_used {
    struct egpu_inventory_used_card cards[EGPU_NODE_GPUS_MAX];
};

/* Is a write of card c in slot due, given what st says was last written
 * there (nothing, or for another UUID: due) and the reports since? False
 * for slot >= EGPU_NODE_GPUS_MAX. Pure. */
bool egpu_inventory_used_due(const struct egpu_inventory_used *st, size_t slot,
                             const struct egpu_gpu_info *c);

/* Merge-patch status.used of node's GPU objects ("<node>-gpu<index>") for
 * the cards[0 .. n) (at most EGPU_NODE_GPUS_MAX) that have has_used, a
 * UUID and are healthy, where egpu_inventory_used_due says so; *st
 * remembers what was written. A GPU object not there yet (404) is skipped
 * (publishing creates it; the next report writes it). *written (may be
 * NULL) counts the writes. Returns 0 or the first failure (kube.h codes,
 * -EINVAL for n too large); every card is tried. */
int egpu_inventory_report_used(struct egpu_kube *kc, struct egpu_inventory_used *st,
                               const char *node, const struct egpu_gpu_info *cards, size_t n,
                               unsigned *written, struct egpu_error *err) EGPU_MUST_CHECK;

#ifdef __cplusplus
}
#endif

#endif /* EGPU_AGENT_H */
