/* egpu/kubectl.h - kubectl-egpu, the kubectl plugin: what it prints.
 *
 * `kubectl egpu inspect [NODE]`, `kubectl egpu claims` and `kubectl egpu
 * budget` read GPU, ElasticGPUClaim, ElasticGPU and GPUBudget objects from
 * the API server (src/kubectl/main.c), decode them with src/api's decoders,
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

/* Render the cards of gpus[0..n) (borrowed, any order): nodes sorted by
 * name, cards by index then name; node (NULL = every node) keeps only the
 * cards whose spec.nodeName is node. Per card its model, health, core
 * allocated/100, memory allocated/total MiB (a whole-card container, core
 * 100, holds all of it) and the containers of status.allocated
 * (namespace/pod, container, core, memory, claim); a total row per node,
 * and a line for the cluster. Appends to out. Returns 0, or what
 * egpu_buf_append returns (-ENOMEM, -EMSGSIZE). */
int egpu_kubectl_inspect(const struct egpu_api_gpu *gpus, size_t n, const char *node,
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
