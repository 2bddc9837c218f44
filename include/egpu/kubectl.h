/* egpu/kubectl.h - kubectl-egpu, the kubectl plugin: what it prints.
 *
 * `kubectl egpu inspect [NODE]`, `kubectl egpu claims` and `kubectl egpu
 * budget` read GPU, ElasticGPUClaim, ElasticGPU and GPUBudget objects from
 * the API server (src/kubectl/cmd.c), decode them with src/api's decoders
 * (and, for DRA-mode nodes, ResourceSlices and ResourceClaims with dra.c's),
 * and render them here: a table as kubectl prints one (columns three spaces
 * apart, upper-case headers, <none> for what is not there), the same with
 * more columns (-o wide), or a JSON document whose shape docs/kubectl.md
 * fixes (-o json). Rendering is pure: same objects and `now`, same bytes.
 *
 * Units: core in percent of one card, memory in MiB, GPU-hours in
 * thousandths as src/api keeps them, times in Unix seconds.
 */
#ifndef EGPU_KUBECTL_H
#define EGPU_KUBECTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "egpu/api.h"
#include "egpu/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define EGPU_KUBECTL_OUT_MAX ((size_t)256 << 20) /* bytes of one rendered output */

enum egpu_kubectl_output {
    EGPU_KUBECTL_TABLE, /* the default */
    EGPU_KUBECTL_WIDE,  /* -o wide */
    EGPU_KUBECTL_JSON,  /* -o json */
};

/* Render the cards of gpus[0..n) (borrowed, any order), every node in
 * device-plugin mode (egpu_kubectl_inspect_all with no DRA cards): nodes sorted by
 * name, cards by index then name; node (NULL = every node) keeps only the
 * cards whose spec.nodeName is node. Per card its model, health, core
 * allocated/100, memory allocated/total MiB (a whole-card container, core
 * 100, holds all of it) and the containers of status.allocated
 * (namespace/pod, container, core, memory, claim); a total row per node,
 * and a line for the cluster. Appends to out. Returns 0, or what
 * egpu_buf_append returns (-ENOMEM, -EMSGSIZE). */
int egpu_kubectl_inspect(const struct egpu_api_gpu *gpus, size_t n, const char *node,
                         enum egpu_kubectl_output fmt, struct egpu_buf *out) EGPU_MUST_CHECK;

/* DRA mode (resource.k8s.io/v1, issue 26): the cards of the nodes whose
 * egpu-agent runs with --mode dra, read from their ResourceSlices, and the
 * shares on them, read from allocated ResourceClaims (src/kubectl/dra.c).
 * Wire format: kubernetes/api resource/v1/types.go as summed up in
 * ../shared/k8s-wire/dra/dra_notes.md (sections 3, 5, 8); the slice the
 * agent writes is agent/dra_slice_int.h's. Both are outside input (any
 * user may hold a claim; a slice may come from an older agent): every
 * field is checked, and what does not decode is refused with a message
 * naming the field and what is allowed, never trusted. */
struct egpu_kubectl_dra;

/* An empty set for driver (NULL = EGPU_API_DRA_DRIVER; copied), for
 * egpu_kubectl_dra_free. NULL when out of memory. */
struct egpu_kubectl_dra *egpu_kubectl_dra_new(const char *driver);
/* Free d and all it holds. NULL is a no-op. */
void egpu_kubectl_dra_free(struct egpu_kubectl_dra *d);

/* Add the devices of slice (a ResourceSlice as a list gives it, borrowed):
 * spec.driver must be d's, spec.nodeName a node (node-local slices only),
 * spec.pool {name, generation >= 0}; per device (at most 128): name (a DNS
 * label, unique in its pool), attributes uuid and productName (strings,
 * optional), index (int 0..1023; unknown when absent), capacity cores (a whole number 1..100,
 * percent; absent: 100) and memory (bytes, shown in MiB rounded up, at most
 * EGPU_API_GPU_MIB_MAX MiB; absent: 0), and taints (a device with a taint
 * of effect NoSchedule or NoExecute shows as "Tainted"). Of a pool, only
 * the slices of its highest generation count (the DRA consumer rule): an
 * older slice is passed over (0), a newer one replaces what older ones
 * gave. Every slice before any claim. Returns 0, EGPU_ESYNTAX (a missing
 * field, a wrong JSON type, a name too long, a device twice in its pool)
 * or EGPU_ERANGE (a number out of range, too many devices), with err
 * naming the field; -EINVAL after a claim was added; -ENOMEM. On error d
 * is as before. */
int egpu_kubectl_dra_add_slice(struct egpu_kubectl_dra *d, const json_t *slice,
                               struct egpu_error *err) EGPU_MUST_CHECK;

/* Add the shares of claim (a ResourceClaim, borrowed): the results of
 * status.allocation.devices.results[] (at most 32) whose driver is d's,
 * each {pool, device, shareID (optional), consumedCapacity {cores (whole
 * percent 0..100, rounded up), memory (bytes, MiB rounded up)}}, held for
 * the pods of status.reservedFor[] (resource "pods", at most 256). A result
 * without consumedCapacity (a device not shared) holds the whole card; one
 * without cores or memory holds all of that capacity (the requestPolicy
 * default of the agent's slice). A claim without status.allocation has
 * nothing to add (0). Returns 0; a positive count of the results that name
 * a device no slice added holds (left out, err names the first: "result
 * [0]: device gpu-7 of pool n1 is in no ResourceSlice of driver ..."); or
 * EGPU_ESYNTAX / EGPU_ERANGE naming the field, or -ENOMEM, with nothing of
 * the claim added. */
int egpu_kubectl_dra_add_claim(struct egpu_kubectl_dra *d, const json_t *claim,
                               struct egpu_error *err) EGPU_MUST_CHECK;

/* The number of cards d holds on node (NULL = on every node). */
size_t egpu_kubectl_dra_cards(const struct egpu_kubectl_dra *d, const char *node);

/* egpu_kubectl_inspect over both modes: the cards of gpus[0..n) (GPU
 * objects, device-plugin mode) and of dra (NULL = none). A node with a
 * card in dra is in DRA mode: its cards are dra's, each merged with the GPU
 * object of the same node and UUID where there is one (its health where not
 * Healthy, else "Tainted" for a device tainted NoSchedule or NoExecute;
 * status.used; any device-plugin containers still in its status.allocated); a GPU
 * object of that node matching no device is shown as a card of its own.
 * Every other node is in device-plugin mode, as egpu_kubectl_inspect shows
 * it. The table gets a MODE column (dra, device-plugin) when a node shown
 * is in DRA mode, -o wide always; JSON a node's "mode", a card's "device"
 * and a share's "shareID" and "reservedFor". A DRA share's row shows the
 * claim's namespace and its first pod ("ns/pod (+2)" for three), no
 * container. Returns as egpu_kubectl_inspect. */
int egpu_kubectl_inspect_all(const struct egpu_api_gpu *gpus, size_t n,
                             const struct egpu_kubectl_dra *dra, const char *node,
                             enum egpu_kubectl_output fmt, struct egpu_buf *out) EGPU_MUST_CHECK;

/* One claim to show, with what it is bound to. */
struct egpu_kubectl_claim_row {
    const struct egpu_api_claim *claim; /* borrowed */
    const struct egpu_api_egpu *egpu;   /* its bound ElasticGPU (status.elasticGPUName),
                                           borrowed; NULL when none or not found */
    int64_t created_s;                  /* metadata.creationTimestamp; 0 = unknown */
};

/* Render claims rows[0..n) sorted by namespace and name, with a NAMESPACE
 * column when all_ns; AGE is now_s - created_s as kubectl writes ages
 * (egpu_kubectl_age). Appends to out. Returns 0, -ENOMEM or -EMSGSIZE. */
int egpu_kubectl_claims(const struct egpu_kubectl_claim_row *rows, size_t n, bool all_ns,
                        int64_t now_s, enum egpu_kubectl_output fmt,
                        struct egpu_buf *out) EGPU_MUST_CHECK;

/* Render budgets[0..n) (borrowed) sorted by namespace and name, with a
 * NAMESPACE column when all_ns: GPU-hours, used (egpu_api_budget_used_milli
 * of status.metering), remaining (GPU-hours minus used, negative over
 * budget), status.state, the period and status.periodStart/End; what the
 * controller has not written yet shows as <none> (null in JSON). Appends to
 * out. Returns 0, -ENOMEM or -EMSGSIZE. */
int egpu_kubectl_budgets(const struct egpu_api_budget *const *budgets, size_t n, bool all_ns,
                         enum egpu_kubectl_output fmt, struct egpu_buf *out) EGPU_MUST_CHECK;

#define EGPU_KUBECTL_AGE_MAX 32

/* seconds as kubectl's AGE column writes a duration (apimachinery's
 * duration.HumanDuration): "45s", "5m3s", "12m", "3h20m", "9h", "2d5h",
 * "30d", "2y10d", "9y"; "<invalid>" below -1 s, "0s" for -1. Returns buf. */
const char *egpu_kubectl_age(int64_t seconds, char buf[EGPU_KUBECTL_AGE_MAX]);

/* The command line of kubectl-egpu (argv as kubectl hands it to the plugin:
 * argv[1] is the subcommand). Runs it, printing to stdout and messages to
 * stderr. Returns the exit status: 0, 1 (an API or configuration error,
 * one line naming the server and the HTTP status) or 2 (bad usage, after
 * the usage text). */
int egpu_kubectl_main(int argc, char **argv);

#ifdef __cplusplus
}
#endif

#endif /* EGPU_KUBECTL_H */
