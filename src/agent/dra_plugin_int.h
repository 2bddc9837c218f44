/* agent/dra_plugin_int.h - the DRA kubelet plugin's DRAPlugin service
 * (dra_plugin.c), private to src/agent: NodePrepareResources and
 * NodeUnprepareResources, v1 and v1beta1, on the socket the registration's
 * PluginInfo.endpoint names (dra_registration_int.h).
 *
 * Prepare, per claim of the request (a failing claim fails alone, in its
 * response's error): GET the ResourceClaim, check its metadata.uid is the
 * request's, take status.allocation.devices.results of this driver and of
 * this node's pool, map each device "gpu-<index>" (dra_slice.c's names) to
 * the node's card of that NVML index, read consumedCapacity cores (percent,
 * 1..100; absent: 100) and memory (a quantity in bytes, rounded up to MiB;
 * absent: the card's whole memory), write each device's allocation dir as
 * device-plugin mode does (container.c's vcuda.conf and limits.json; for a
 * share of a card ld.so.preload and shared/), the claim's CDI spec (cdi.c)
 * and the claim's record, and answer the CDI device IDs.
 *
 * Layout: every DRA allocation dir lives below <alloc_root>/dra
 * (EGPU_DRA_PLUGIN_SUBDIR), never directly in alloc_root, so the device
 * plugin's cleanup (cleanup.c, which only looks at 16-hex-digit names right
 * below alloc_root) and its record (record.c) never see them. The dir of a
 * device is egpu__allocdir_path over its one CDI device ID. The claim's
 * record is <alloc_root>/dra/claim-<uid>.json (mode 0644, written
 * atomically by egpu__fs_write_at as the last step of a prepare):
 * {"uid","namespace","name","devices":[{"request","pool","device",
 * "shareID","cdi","dir","cores","memoryMiB"}]}, cores (percent) and
 * memoryMiB being what the share consumes as decoded from the allocation
 * result (capacity_of; a record of an agent before them lacks both). A prepare that finds the
 * record answers from it and writes nothing (idempotency across agent restarts); unprepare removes
 * the dirs, the CDI spec, then the record.
 *
 * Trust (docs/security.md, "DRA mode"): the kubelet's request names the
 * claim (namespace, name, uid); everything else comes from the API server's
 * ResourceClaim, and only its status.allocation.devices.results of this
 * driver and this node's pool (status is written by kube-scheduler, never
 * by the claim's owner; the claim's spec and its opaque config are never
 * read). Hostile or broken input is refused per claim with an error naming
 * the field: a uid other than the claim's; a device this node lacks; a
 * shareID that is not a UID; consumedCapacity cores outside 1..100 or
 * memory outside 1 MiB..the card's. The claim is read again just before
 * the record is written, so one deleted (or replaced) mid-prepare is an
 * error and leaves nothing. A record is read with O_NOFOLLOW, must be a
 * private regular file, and is believed only when every device's cdi and
 * dir are the ones its uid and device give (so unprepare never removes a
 * path a record names otherwise); an entry that is not such a record is
 * removed and rebuilt by prepare (dirs already there are written over,
 * never removed: a running container may use their shared/), and removed
 * by unprepare together with every dir the claim can have. A record found
 * for the uid answers only a request naming the same namespace and name.
 *
 * Threads: the handlers run on the gRPC server's threads; one lock
 * serializes prepares and unprepares (and guards the cards). new, serve,
 * stop and free from one thread.
 */
#ifndef EGPU_AGENT_DRA_PLUGIN_INT_H
#define EGPU_AGENT_DRA_PLUGIN_INT_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "egpu/agent.h"
#include "egpu/core.h"
#include "egpu/grpc.h"
#include "egpu/kube.h"

#define EGPU_DRA_PLUGIN_SUBDIR        "dra"    /* below alloc_root: DRA mode's dirs and records */
#define EGPU_DRA_PLUGIN_RECORD_PREFIX "claim-" /* record file: claim-<uid>.json */
#define EGPU_DRA_PLUGIN_RECORD_MAX    65536    /* bytes: a larger record is not the agent's */

#define EGPU_DRA_METHOD_PREPARE_V1 "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources"
#define EGPU_DRA_METHOD_UNPREPARE_V1 \
    "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources"
#define EGPU_DRA_METHOD_PREPARE_V1BETA1 \
    "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodePrepareResources"
#define EGPU_DRA_METHOD_UNPREPARE_V1BETA1 \
    "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodeUnprepareResources"

/* Settings; strings are copied by egpu__dra_plugin_new, kube is borrowed
 * (it must outlive the plugin). */
struct egpu__dra_plugin_config {
    struct egpu_kube *kube; /* API client: GET of resourceclaims */
    const char *node;       /* this node: the pool name of its results */
    const char *driver;     /* NULL: EGPU_API_DRA_DRIVER */
    const char *endpoint;   /* the DRAPlugin socket's path (absolute) */
    const char *alloc_root; /* DRA dirs go below <alloc_root>/dra */
    const char *cdi_dir;    /* NULL: EGPU_CDI_DIR */
    const char *interposer; /* host path of libegpu-vcuda.so (absolute) */
    unsigned ctx_extra_mib; /* vcuda.conf's EGPU_VCUDA_CONTEXT_EXTRA_MIB; 0: none */
};

struct egpu__dra_plugin; /* opaque */

/* Make the DRAPlugin service (not serving yet) for cfg, with no cards. *out
 * (free with egpu__dra_plugin_free) only on success. Returns 0, -EINVAL
 * (no kube or node, an endpoint, alloc_root, cdi dir or interposer that is
 * not absolute; err says which), -ENOMEM, or what egpu_grpc_server_new
 * returns. */
int egpu__dra_plugin_new(const struct egpu__dra_plugin_config *cfg, struct egpu__dra_plugin **out,
                         struct egpu_error *err) EGPU_MUST_CHECK;

/* Stop serving (if serving) and free p. NULL is a no-op. */
void egpu__dra_plugin_free(struct egpu__dra_plugin *p);

/* Replace the node's cards (n of them, copied; at most EGPU_NODE_GPUS_MAX
 * kept) that devices "gpu-<index>" are mapped to. Any thread. */
void egpu__dra_plugin_set_cards(struct egpu__dra_plugin *p, const struct egpu_gpu_info *cards,
                                size_t n);

/* Serve DRAPlugin (v1 and v1beta1) on the endpoint. Returns 0 or what
 * egpu_grpc_server_start returns, with err. */
int egpu__dra_plugin_serve(struct egpu__dra_plugin *p, struct egpu_error *err) EGPU_MUST_CHECK;

/* Stop serving. Not serving: a no-op. */
void egpu__dra_plugin_stop(struct egpu__dra_plugin *p);

/* The DRAPlugin socket's path (borrowed from p). */
const char *egpu__dra_plugin_socket(const struct egpu__dra_plugin *p);

/* Prepare one claim (ns, uid, name, as the kubelet names it): the record
 * (the header's opening) as a new JSON object into *rec (json_decref it),
 * from the disk when it is there, else made as the opening says (also when
 * the entry there is not the agent's record: it is rebuilt). Returns 0, or
 * a negative code with err: -EINVAL (a uid breaking the CDI rules, a uid
 * other than the claim's, a record of uid made for another namespace or
 * name, and what egpu__dra_plugin_results refuses), what egpu_kube_get
 * returns (-ENOENT: no such claim, or one deleted or replaced before the
 * prepare was recorded), or a file operation's -errno; on failure nothing
 * this call made is left. */
int egpu__dra_plugin_prepare(struct egpu__dra_plugin *p, const char *ns, const char *uid,
                             const char *name, json_t **rec,
                             struct egpu_error *err) EGPU_MUST_CHECK;

struct egpu__cdi_device;

/* The allocation results of claim (a ResourceClaim as the API server gives
 * it, borrowed) of driver and pool (this node) into devs[0 .. *n) (room for
 * EGPU_CDI_DEVICES_MAX; device and card strings borrowed from claim and
 * cards) and, when recdevs is not NULL, one record device {request, pool,
 * device, shareID, cores, memoryMiB} each appended to recdevs (a JSON
 * array). Results of
 * other drivers or pools are passed over. The results are decoded by
 * egpu_api_dra_results (api.h: its checks of every result of the driver,
 * its messages naming the field); on top of it each result of this pool
 * must name a device "gpu-<index>" of cards[0 .. ncards), and its
 * consumedCapacity cores (absent: 100) must be 1..100 and memory (absent:
 * the card's) 1..the card's MiB. Pure (no I/O). Returns 0 (*n >= 1) or
 * -EINVAL with err naming the device and field and what is allowed (no
 * result of ours: the driver, the pool, and the first result passed over),
 * or -ENOMEM. */
int egpu__dra_plugin_results(const char *driver, const char *pool,
                             const struct egpu_gpu_info *cards, size_t ncards, const json_t *claim,
                             struct egpu__cdi_device *devs, size_t *n, json_t *recdevs,
                             struct egpu_error *err) EGPU_MUST_CHECK;

/* Decode text[0 .. len) (the file's bytes, not NUL-terminated) as the
 * record of claim uid written by this agent for driver below dra_root
 * (<alloc_root>/dra): the opening's shape, no duplicate keys, uid equal to
 * uid, namespace and name non-empty, 1..EGPU_CDI_DEVICES_MAX devices each
 * with request, pool, device, shareID ("" or a UID), cdi and dir equal
 * to egpu__cdi_device_id(driver, uid, device) and its egpu__allocdir_path,
 * and cores (an integer 1..100) and memoryMiB (an integer >= 1) when there
 * (a record of an older agent lacks them).
 * Pure. Returns 0 with the record in *rec (json_decref it), or EGPU_ESYNTAX
 * with err saying what is wrong. */
int egpu__dra_plugin_record_parse(const char *driver, const char *dra_root, const char *uid,
                                  const char *text, size_t len, json_t **rec,
                                  struct egpu_error *err) EGPU_MUST_CHECK;

/* Undo egpu__dra_plugin_prepare for the claim uid: its allocation dirs
 * (from its record; without a record, or one not to believe, every dir
 * the uid can have on this node), its CDI spec and its record. A claim never prepared
 * is success. Returns 0, -EINVAL (a uid breaking the CDI rules) or the first
 * removal's negative code, with err (what could be removed is). */
int egpu__dra_plugin_unprepare(struct egpu__dra_plugin *p, const char *uid,
                               struct egpu_error *err) EGPU_MUST_CHECK;

/* Why a claim's prepare or unprepare failed, for /metrics
 * (egpu_agent_dra_claim_errors_total's reason). */
enum egpu__dra_reason {
    EGPU_DRA_REASON_INVALID,   /* -EINVAL: a claim refused (uid, results, capacity, device) */
    EGPU_DRA_REASON_NOT_FOUND, /* -ENOENT: no such claim, or deleted mid-prepare */
    EGPU_DRA_REASON_API,       /* another answer or transport failure of the API server */
    EGPU_DRA_REASON_FILE,      /* a file operation (dirs, CDI spec, record) */
    EGPU_DRA_REASON_NO_MEMORY, /* -ENOMEM */
    EGPU_DRA_REASON_COUNT
};

/* The reason of a negative code from egpu__dra_plugin_prepare or _unprepare:
 * -EINVAL invalid, -ENOENT not_found, -ENOMEM no_memory, the codes of
 * egpu/kube.h's transport and status mapping (-EACCES, -EPERM, -EAGAIN,
 * -ETIMEDOUT, -ECONNREFUSED, -EPROTO, -EMSGSIZE, -ECANCELED, -EOPNOTSUPP,
 * -ENOTSUP, EGPU_KUBE_ECONFLICT, EGPU_KUBE_EEXPIRED) api, any other file.
 * Pure. */
enum egpu__dra_reason egpu__dra_reason_of(int rc);

/* The label value of r: "invalid", "not_found", "api", "file", "no_memory"
 * (static storage; "?" out of range). */
const char *egpu__dra_reason_name(enum egpu__dra_reason r);

/* What the handlers counted since egpu__dra_plugin_new (monotonic). */
struct egpu__dra_plugin_stats {
    unsigned long prepare_calls;   /* NodePrepareResources requests (v1 and v1beta1) */
    unsigned long unprepare_calls; /* NodeUnprepareResources requests */
    unsigned long prepare_bad;     /* requests refused whole: not a NodePrepareResourcesRequest */
    unsigned long unprepare_bad;   /* ... not a NodeUnprepareResourcesRequest */
    unsigned long prepare_claims;  /* claims the prepare requests named */
    unsigned long unprepare_claims;
    unsigned long prepare_errors[EGPU_DRA_REASON_COUNT]; /* claims answered with an error */
    unsigned long unprepare_errors[EGPU_DRA_REASON_COUNT];
};

/* Copy p's counters into *out. Any thread. */
void egpu__dra_plugin_stats(struct egpu__dra_plugin *p, struct egpu__dra_plugin_stats *out);

/* What the prepared claims hold on one card. */
struct egpu__dra_card_usage {
    char uuid[EGPU_UUID_MAX]; /* the card's UUID */
    char device[32];          /* its slice device, "gpu-<index>" */
    uint64_t mem_mib;         /* the card's memory, MiB */
    unsigned shares;          /* devices of prepared claims on it (a whole card is one) */
    unsigned core_pct;        /* sum of their consumed cores, percent of the card */
    uint64_t alloc_mem_mib;   /* sum of their consumed memory, MiB */
};

/* What the prepared claims hold on the node. */
struct egpu__dra_usage {
    size_t ncards; /* cards[0 .. ncards): the cards as last set, in their order */
    struct egpu__dra_card_usage cards[EGPU_NODE_GPUS_MAX];
    unsigned claims;  /* claims with a record the agent believes */
    unsigned unsized; /* of their devices, those whose record has no cores or memoryMiB */
    unsigned orphans; /* of their devices, those on no card of the node (the card left) */
    unsigned bad;     /* entries below <alloc_root>/dra named as records and not believed */
};

/* The usage of p's prepared claims, summed from their records (the agent's
 * own files, read as prepare reads them: O_NOFOLLOW, private, parsed by
 * egpu__dra_plugin_record_parse; never from a file a container can reach,
 * never from the claim's spec) into *out. The sums are made again, with
 * the lock held, whenever a prepare, an unprepare or new cards may have
 * changed them, and kept: this copies the last sums. Any thread. */
void egpu__dra_plugin_usage(struct egpu__dra_plugin *p, struct egpu__dra_usage *out);

/* The four handlers (egpu_grpc_unary_cb, data = p). A request that does not
 * decode is INVALID_ARGUMENT; otherwise the answer is OK with one entry per
 * claim (keyed by its uid), each with its devices or its error. Return 0 or
 * the negative code of the status set in st, or -ENOMEM / -EMSGSIZE. */
int egpu__dra_plugin_on_prepare_v1(void *data, const struct egpu_grpc_request *req,
                                   struct egpu_buf *reply, struct egpu_grpc_status *st);
int egpu__dra_plugin_on_unprepare_v1(void *data, const struct egpu_grpc_request *req,
                                     struct egpu_buf *reply, struct egpu_grpc_status *st);
int egpu__dra_plugin_on_prepare_v1beta1(void *data, const struct egpu_grpc_request *req,
                                        struct egpu_buf *reply, struct egpu_grpc_status *st);
int egpu__dra_plugin_on_unprepare_v1beta1(void *data, const struct egpu_grpc_request *req,
                                          struct egpu_buf *reply, struct egpu_grpc_status *st);

#endif /* EGPU_AGENT_DRA_PLUGIN_INT_H */
