/* agent/dra_slice_int.h - this node's ResourceSlice (resource.k8s.io/v1) for
 * the DRA mode of egpu-agent (dra_slice.c), private to src/agent.
 *
 * One slice per node, one pool named after the node (resourceSliceCount 1),
 * one device "gpu-<index>" per healthy card of the inventory
 * (struct egpu_gpu_info, egpu/agent.h): allowMultipleAllocations true, and
 * two consumable capacities whose requestPolicy default is the whole card,
 * so a request that names neither gets the card to itself:
 *   cores   value "100" (percent of the card's time), default "100",
 *           validRange min "1", max "100", step "1";
 *   memory  value the card's MiB as a canonical BinarySI quantity ("81559Mi",
 *           "80Gi" for 81920 MiB: the form the API server stores, so what is
 *           read back compares equal), default the same, validRange min
 *           "1Mi", max the value, step "1Mi".
 * Wire facts: ../shared/k8s-wire/dra/dra_notes.md (sections 3 and 7) and
 * resourceslice_gpu_consumable.json, which egpu__dra_slice_build reproduces
 * for the same cards (tests/unit/test_agent_dra_slice.c).
 */
#ifndef EGPU_AGENT_DRA_SLICE_INT_H
#define EGPU_AGENT_DRA_SLICE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "egpu/agent.h"
#include "egpu/api.h"
#include "egpu/kube.h"

#define EGPU_DRA_SLICE_API             "resource.k8s.io/v1"
#define EGPU_DRA_SLICE_UID_MAX         64  /* a Node's metadata.uid incl. NUL (36 characters) */
#define EGPU_DRA_SLICE_PATH_MAX        160 /* a field path such as "spec.devices[3].capacity..." */
#define EGPU_DRA_SLICE_STRING_MAX      EGPU_API_DRA_ATTR_STRING_MAX /* bytes of a string attribute */
/* The device taint of an unhealthy card: key <driver>/unhealthy, value the
 * card's reason as a label value ("XID-79"), effect NoSchedule (pods
 * already running keep their share; new claims do not get the card). */
#define EGPU_DRA_SLICE_TAINT_UNHEALTHY "unhealthy"
#define EGPU_DRA_SLICE_TAINT_EFFECT    "NoSchedule"

/* What a card's device publishes beyond struct egpu_gpu_info. Every field is
 * optional: NULL, 0 or -1 leaves its attribute out. */
struct egpu__dra_slice_card {
    const char *architecture; /* "architecture" (string), e.g. "Hopper" */
    uint32_t cc_major;        /* "cudaComputeCapability" (version "<major>.<minor>.0"); */
    uint32_t cc_minor;        /* published when cc_major > 0 */
    const char *pci_bus_id;   /* "pciBusID" (string), e.g. "0000:18:00.0" */
    int numa_node;            /* "numaNode" (int); -1 = unknown */
};

/* The slice of one node. Strings are borrowed for the call. */
struct egpu__dra_slice_config {
    const char *driver; /* spec.driver; NULL = EGPU_API_DRA_DRIVER */
    const char *node;   /* spec.nodeName and spec.pool.name (required) */
    /* metadata.ownerReferences: the Node {apiVersion v1, kind Node, name,
     * uid, controller true}, so the garbage collector deletes the slice with
     * its Node. NULL: egpu__dra_slice_build writes none;
     * egpu__dra_slice_publish reads the Node's uid instead. */
    const char *node_uid;
    /* "driverVersion" (version): the NVIDIA driver, e.g. "570.133.20";
     * written as semver ("535.104.05" as "535.104.5", "550.54" as
     * "550.54.0"); NULL, or not 1 to 3 dot-separated numbers: left out. */
    const char *driver_version;
    /* "cudaDriverVersion" (version): the CUDA version the driver supports,
     * as NVML gives it (1000 * major + 10 * minor: 12080 = "12.8.0"); 0 =
     * left out. */
    uint32_t cuda_driver_version;
    /* Per card, indexed like the cards given (NULL = none for any card). */
    const struct egpu__dra_slice_card *extra;
    /* true: an unhealthy card (one with a UUID and memory) stays in the
     * slice with the device taint EGPU_DRA_SLICE_TAINT_* (spec.devices[].
     * taints, gate DRADeviceTaints: beta and on by default in 1.36, alpha
     * and off in 1.34 and 1.35; dra_notes.md) instead of leaving it; the
     * DRA mode sets it. egpu__dra_slice_publish turns it off for good (in
     * its state) once the API server drops the taints. false: unhealthy
     * cards leave the slice. */
    bool taint_unhealthy;
};

/* What egpu__dra_slice_attributes fills cfg's optional attributes from
 * (cfg points into it: keep it as long as cfg is used). */
struct egpu__dra_slice_attrs {
    char driver_version[80];
    char architecture[EGPU_NODE_GPUS_MAX][32];
    char pci_bus_id[EGPU_NODE_GPUS_MAX][32];
    struct egpu__dra_slice_card extra[EGPU_NODE_GPUS_MAX];
};

/* The optional attributes of the slice of cards[0 .. n) (the list
 * egpu_gpus_list gave, in its order, as given to egpu__dra_slice_build or
 * _publish next) from the backend g: sets cfg->driver_version and
 * cfg->cuda_driver_version (driverVersion, cudaDriverVersion) and
 * cfg->extra (per card: architecture, cudaComputeCapability, pciBusID,
 * numaNode), all pointing into *a, which this overwrites. With NVML
 * (nvml.c) each comes from its NVML call (nvmlSystemGetDriverVersion,
 * nvmlSystemGetCudaDriverVersion_v2, nvmlDeviceGetArchitecture,
 * nvmlDeviceGetCudaComputeCapability, nvmlDeviceGetPciInfo_v3,
 * nvmlDeviceGetNumaNodeId) where the library has it and it succeeds; with
 * the fake backend (fake.c) from the model's name (A100: Ampere 8.0, H100:
 * Hopper 9.0, T4: Turing 7.5, ...), PCI bus 0000:<0x18 + index>:00.0, the
 * spec group as NUMA node and driver 570.133.20 with CUDA 12.8. What the
 * backend cannot tell is left out of the slice. Cards past
 * EGPU_NODE_GPUS_MAX get none. Never fails; reads no clock; NVML calls only. */
void egpu__dra_slice_attributes(struct egpu_gpus *g, const struct egpu_gpu_info *cards, size_t n,
                                struct egpu__dra_slice_attrs *a,
                                struct egpu__dra_slice_config *cfg);

/* The ResourceSlice object for cfg and cards[0 .. n) (borrowed; the
 * inventory's list, in its order) at pool generation (>= 1), as a new
 * object in *out (caller json_decref()s): apiVersion, kind, metadata
 * {generateName "0-<driver>-<node>-" (the upstream helper's form: the API
 * server cuts a long one and adds 5 random characters), ownerReferences when
 * cfg->node_uid}, spec {driver, nodeName, pool {name, generation,
 * resourceSliceCount 1}, devices}. A device per card that is healthy (or
 * unhealthy, with cfg->taint_unhealthy: then with its taint), has a UUID
 * and at least 2 MiB (validRange min "1Mi" + step "1Mi" must fit); others
 * are left out (no device, no error). Attributes: type "gpu", uuid,
 * index, minor, productName (the model, cut to 64 bytes at a character
 * boundary), nvlinkIsland (int: the lowest index among the cards this one
 * reaches over NVLink, itself included; only with has_links), then the
 * optional ones of cfg and cfg->extra. Pure: no I/O, no clock. Returns 0,
 * -EINVAL (cfg or node missing or empty, generation < 1, n above
 * EGPU_NODE_GPUS_MAX, a UUID or model not terminated) or -ENOMEM; *out
 * written only on success. */
int egpu__dra_slice_build(const struct egpu__dra_slice_config *cfg,
                          const struct egpu_gpu_info *cards, size_t n, int64_t generation,
                          json_t **out, struct egpu_error *err) EGPU_MUST_CHECK;

/* Did the API server drop a field that sent carries? Walks sent (an object
 * as written) against stored (the object the server returned): an object
 * member of sent that stored lacks (or holds as null), or an array element
 * past stored's end, is dropped; scalar values are not compared (the server
 * canonicalizes quantities) and null members of sent are passed over. On
 * true, path (len bytes, EGPU_DRA_SLICE_PATH_MAX fits most) holds the first
 * such field as "spec.devices[0].allowMultipleAllocations", cut to fit; on
 * false it is "". prefix (may be NULL or "") starts the path. Pure. */
bool egpu__dra_slice_dropped(const json_t *sent, const json_t *stored, const char *prefix,
                             char *path, size_t len);

/* What egpu__dra_slice_publish remembers between calls, one per node and
 * driver; zero it to start, egpu__dra_slice_state_close at the end. Not
 * thread safe: one publisher at a time. */
struct egpu__dra_slice_state {
    int64_t generation;                    /* pool generation last written, 0 = none yet */
    char node_uid[EGPU_DRA_SLICE_UID_MAX]; /* the Node's uid once read ("" before) */
    json_t *sent;                          /* spec of the last write (owned), or NULL */
    json_t *stored;                        /* that spec as the server stored it (owned) */
    bool no_taints; /* the server dropped device taints: unhealthy cards leave the slice */
};

/* Free what st holds and zero it. NULL is a no-op. */
void egpu__dra_slice_state_close(struct egpu__dra_slice_state *st);

/* Where a card stands in the slice that egpu__dra_slice_publish writes for
 * cfg and st (for /metrics). */
enum egpu__dra_card_state {
    EGPU_DRA_CARD_PUBLISHED, /* a device of the slice, untainted */
    EGPU_DRA_CARD_TAINTED,   /* a device of the slice with the unhealthy taint */
    EGPU_DRA_CARD_ABSENT,    /* not in the slice: unhealthy where taints are dropped or
                              * not asked for, or no UUID, or under 2 MiB */
    EGPU_DRA_CARD_STATE_COUNT
};

/* The state of card c in the slice egpu__dra_slice_publish writes for cfg
 * with st as it is (st->no_taints counts, as the publish's rule does).
 * Pure. */
enum egpu__dra_card_state egpu__dra_slice_card_state(const struct egpu__dra_slice_config *cfg,
                                                     const struct egpu__dra_slice_state *st,
                                                     const struct egpu_gpu_info *c);

/* The label value of s: "published", "tainted", "absent" (static; "?" out
 * of range). */
const char *egpu__dra_card_state_name(enum egpu__dra_card_state s);

/* What one publish did. */
struct egpu__dra_slice_stats {
    unsigned created;   /* 1 when the slice was created (first time, or after a deletion) */
    unsigned updated;   /* 1 when it was written over (its devices or owner changed) */
    unsigned deleted;   /* other slices of this node and driver deleted (duplicates) */
    unsigned unchanged; /* 1 when the slice was already what it should be */
    unsigned devices;   /* devices in the slice as built */
    int64_t generation; /* the pool's generation now */
    char name[EGPU_KUBE_NAME_MAX + 1];     /* the slice's name ("" on failure before) */
    char dropped[EGPU_DRA_SLICE_PATH_MAX]; /* first field the server dropped on the write, or "" */
};

/* Make the API server hold this node's one slice as egpu__dra_slice_build
 * gives it for cards[0 .. n) (borrowed), level-triggered, so every call
 * (periodic, on a health change, on the deletion the kubelet makes at its
 * start and 30 s after a plugin leaves) converges:
 * - lists the ResourceSlices with fieldSelector
 *   spec.nodeName=<node>,spec.driver=<driver>; the one whose pool is the
 *   node is kept, every other one deleted (a create whose reply was lost
 *   leaves a duplicate);
 * - the Node's uid (for the owner reference) is cfg->node_uid, else read
 *   (GET nodes/<node>) and kept in st, read again when the slice is to be
 *   created or its owner is not that uid (a Node registered again);
 * - none: creates it (generation st->generation + 1, so a recreated pool
 *   never goes back); one whose spec, at its own generation, is what it
 *   should be (every field built present and equal; or exactly what the
 *   last write left, fields the server dropped included) and that has the
 *   owner reference: left alone; otherwise written over (PUT with its
 *   resourceVersion), the generation bumped (max of the listed and st's, + 1)
 *   when the spec changes;
 * - after a write, the returned object is compared with what was sent
 *   (egpu__dra_slice_dropped): a dropped field is logged at warning level,
 *   naming the field and, for allowMultipleAllocations or requestPolicy, the
 *   feature gate DRAConsumableCapacity, and is put in stats->dropped; the
 *   slice stays as stored (not an error: it is published, unshared).
 *   Dropped device taints are the exception: an unhealthy card must not
 *   stay untainted, so st->no_taints is set, a warning names the gate
 *   DRADeviceTaints, and the slice is written again at once without the
 *   unhealthy cards (and so on every later call).
 * Returns 0, -EINVAL (as egpu__dra_slice_build; cfg NULL), -ENOENT (no such
 * Node), EGPU_KUBE_ECONFLICT (the slice changed between list and write:
 * call again), -EPROTO (a list without items, a Node without uid), -ENOMEM
 * or another code of egpu/kube.h, with err naming the step. stats (may be
 * NULL) is filled either way. */
int egpu__dra_slice_publish(struct egpu_kube *kc, struct egpu__dra_slice_state *st,
                            const struct egpu__dra_slice_config *cfg,
                            const struct egpu_gpu_info *cards, size_t n,
                            struct egpu__dra_slice_stats *stats,
                            struct egpu_error *err) EGPU_MUST_CHECK;

#endif /* EGPU_AGENT_DRA_SLICE_INT_H */
