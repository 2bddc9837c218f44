/* egpu/sim.h - the trace replay: the placement core over a production trace.
 *
 * Reads the Alibaba openb trace (cluster-trace-gpu-v2023, the FGD paper's
 * data: shared/data/openb/README.md documents the columns), replays it with
 * the paper's protocol and measures GPU allocation ratio and fragmentation
 * against the arrived workload. Units: milli-GPU (1000 = one card),
 * millicores, MiB, percent of cluster GPU capacity.
 */
#ifndef EGPU_SIM_H
#define EGPU_SIM_H

#include <stdio.h>

#include "egpu/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define EGPU_TRACE_NAME_MAX 128
#define EGPU_TRACE_SPEC_MAX 256

/* A row of openb_node_list_*.csv: sn,cpu_milli,memory_mib,gpu,model. */
struct egpu_trace_node {
    char name[EGPU_TRACE_NAME_MAX];
    int64_t cpu_milli;
    int64_t mem_mib;
    uint32_t ngpus;
    char model[EGPU_TRACE_NAME_MAX]; /* "" for CPU-only nodes */
    uint64_t unhealthy; /* bit g: card <name>-gpu<g> takes no new pod (egpu-sim --unhealthy) */
};

/* A row of openb_pod_list_*.csv: name,cpu_milli,memory_mib,num_gpu,gpu_milli
 * [,gpu_spec,...]; further columns are ignored. */
struct egpu_trace_pod {
    char name[EGPU_TRACE_NAME_MAX];
    int64_t cpu_milli;
    int64_t mem_mib;
    uint32_t num_gpu;                   /* 0..EGPU_NODE_GPUS_MAX */
    uint32_t gpu_milli;                 /* per card; below 1000 only when num_gpu = 1 */
    char gpu_spec[EGPU_TRACE_SPEC_MAX]; /* '|'-separated models; "" = any */
};

struct egpu_trace {
    struct egpu_trace_node *nodes;
    size_t nnodes;
    struct egpu_trace_pod *pods; /* sorted by name */
    size_t npods;
    /* egpu-sim --topology islands:N: every node's cards in NVLink islands of
     * N by index (index / N alike), the system between islands, as
     * spec.topology would say; 0 = no topology (the trace has none). */
    uint32_t topology_islands;
};

/* Load a node CSV and a pod CSV into *t (zeroed first). The header row names
 * the columns (any order; the required ones are listed above). Errors name
 * the file and line, e.g. "pods.csv:17: gpu_milli \"x\": not a whole number
 * (allowed 0..1000)". Returns 0, -errno (file unreadable), EGPU_ESYNTAX
 * (malformed row or header), EGPU_ERANGE (value out of range), -EINVAL (a
 * file with no rows after the header) or -ENOMEM. On error *t holds nothing
 * to free. Free with egpu_trace_free. Duplicate node names are reported by
 * egpu_trace_cluster. */
int egpu_trace_load(const char *node_csv, const char *pod_csv, struct egpu_trace *t,
                    struct egpu_error *err) EGPU_MUST_CHECK;
void egpu_trace_free(struct egpu_trace *t);

/* Resolve the trace directory: flag (may be NULL), else $EGPU_TRACE_DIR, else
 * ../shared/data/openb, else data/openb. The first one given is used and must
 * exist (a missing --trace-dir is an error, not a fallback). Copies the path
 * into out (len bytes). Returns 0 or -ENOENT with a message saying what to
 * fetch and from where (`make data`). */
int egpu_trace_find_dir(const char *flag, char *out, size_t len,
                        struct egpu_error *err) EGPU_MUST_CHECK;

/* Build the cluster of the trace's nodes. Card memory is not in the trace and
 * is 0 MiB (the trace asks no GPU memory). Returns 0 or an error of
 * egpu_cluster_add_node. Free *out with egpu_cluster_free. */
/* Mark cards of t unhealthy: list is comma-separated card names
 * "<sn>-gpu<index>" (as --reservations names them), each a node of t and an
 * index below its GPU count. egpu_trace_cluster then adds them unhealthy:
 * they take no new pod, like a card whose GPU object is not Healthy. Returns
 * 0, or EGPU_ESYNTAX with err naming the entry and what is allowed (nothing
 * marked then). */
int egpu_trace_mark_unhealthy(struct egpu_trace *t, const char *list,
                              struct egpu_error *err) EGPU_MUST_CHECK;

int egpu_trace_cluster(const struct egpu_trace *t, struct egpu_cluster **out,
                       struct egpu_error *err) EGPU_MUST_CHECK;

/* The request of pod p, with its gpu_spec resolved against cluster c. */
int egpu_trace_request(struct egpu_cluster *c, const struct egpu_trace_pod *p,
                       struct egpu_pod_request *r, struct egpu_error *err) EGPU_MUST_CHECK;

/* ------------------------------------------------------------------------ */
/* Reservations: pre-existing ElasticGPUs (src/sim/reservations.c)          */

/* The core key of a reservation in a replay's cluster: this + its name. */
#define EGPU_SIM_RESV_PREFIX "elasticgpu:"

/* One ElasticGPU of a --reservations file that holds capacity. */
struct egpu_sim_reservation {
    char *key;                   /* EGPU_SIM_RESV_PREFIX + metadata.name */
    char *node;                  /* spec.nodeName: a node of the trace */
    struct egpu_reservation res; /* its cards by the replay's card names ("<node>-gpu<index>",
                                    index 0..gpu-1 of the node CSV's row), gpu-memory dropped */
};

struct egpu_sim_reservations {
    struct egpu_sim_reservation *items; /* those holding capacity, in the file's order */
    size_t n;
    size_t nobjects;     /* ElasticGPUs in the file (Failed ones hold nothing) */
    uint64_t core_milli; /* reserved, milli-GPU */
    bool memory_dropped; /* a gpuShare gave gpu-memory (the trace has none) */
};

/* Read path: a JSON list of ElasticGPU objects, or a v1 List (kind "List"
 * or "ElasticGPUList", items: [...]), as `kubectl get egpu -o json` writes
 * it. Each is decoded by egpu_api_egpu_decode and read by
 * egpu_api_egpu_reservation; its spec.nodeName must be a node of trace t
 * and its gpuShare.gpuName / physicalGPU.gpuNames cards of that node named
 * "<node>-gpu<index>". gpu-memory is dropped (the trace's cards have none).
 * They are applied in the file's order on t's cluster to check they fit.
 * Errors name the file, the item, the object and the field, e.g.
 * "resv.json: items[2] (big): spec.gpuShare.gpuName \"n-a-gpu9\" is not a
 * card of node n-a (its cards: n-a-gpu0..n-a-gpu3)", and are -errno (file
 * unreadable), EGPU_ESYNTAX (not JSON, not a list, a malformed object),
 * EGPU_ERANGE (a value outside the allowed ones, an unknown node or card,
 * more than a card holds) or -ENOMEM. On error *out holds nothing to free.
 * Free with egpu_sim_reservations_free. */
int egpu_sim_reservations_load(const char *path, const struct egpu_trace *t,
                               struct egpu_sim_reservations *out,
                               struct egpu_error *err) EGPU_MUST_CHECK;
void egpu_sim_reservations_free(struct egpu_sim_reservations *r);

/* Hold every reservation of r on cluster c (built by egpu_trace_cluster)
 * with egpu_cluster_reserve. Returns 0 or its error (the message names the
 * reservation). */
int egpu_sim_reservations_apply(const struct egpu_sim_reservations *r, struct egpu_cluster *c,
                                struct egpu_error *err) EGPU_MUST_CHECK;

/* Write one CSV row per card of c to f: label,seed,node,card,
 * capacity_milli,reserved_milli,pods_milli,pods (reserved: held by
 * EGPU_SIM_RESV_PREFIX keys; pods: by every other assignment; pods counts
 * the pods holding part of the card). With header, the header row first. */
void egpu_sim_card_rows(FILE *f, const char *label, uint64_t seed, const struct egpu_cluster *c,
                        bool header);

/* ------------------------------------------------------------------------ */
/* kube-scheduler's node sampling (src/sim/sample.c)                       */

/* Which nodes the policy sees per pod (egpu-sim --node-sample). */
enum egpu_sim_sample_mode {
    EGPU_SIM_SAMPLE_ALL = 0, /* every node (percentageOfNodesToScore: 100) */
    EGPU_SIM_SAMPLE_KUBE,    /* kube-scheduler's default rule (setting unset) */
    EGPU_SIM_SAMPLE_COUNT,   /* a fixed number of feasible nodes */
    EGPU_SIM_SAMPLE_PERCENT, /* a share of the nodes, without the minimum of 100 */
};

struct egpu_sim_sample {
    enum egpu_sim_sample_mode mode;
    /* KUBE: the cluster size whose rule is scaled to the trace (0 = the
     * trace's own size); COUNT: nodes; PERCENT: 1..100. */
    uint64_t value;
};

/* kube-scheduler's numFeasibleNodesToFind for a cluster of nnodes nodes and
 * percentageOfNodesToScore percent (0 = unset): every node below 100 nodes
 * or at 100%; else nnodes * p / 100 with p = percent, or when unset
 * 50 - nnodes / 125 but at least 5; and at least 100 nodes. Examples: 1,213
 * nodes: 497 (41%); 5,000: 500 (10%); 65,000: 3,250 (5%). */
size_t egpu_sim_kube_nodes_to_find(size_t nnodes, unsigned percent);

/* Parse --node-sample's argument: "all", "kube" (the rule at the trace's
 * size), "kube:NODES" (the share of its nodes a cluster of NODES would
 * find: numFeasibleNodesToFind(NODES) / NODES), "K" (K nodes) or "P%" (P
 * percent of the nodes, rounded down, no minimum of 100). Writes *out.
 * Returns 0 or -EINVAL with err saying what is allowed. */
int egpu_sim_sample_parse(const char *arg, struct egpu_sim_sample *out,
                          struct egpu_error *err) EGPU_MUST_CHECK;

/* How many feasible nodes s looks for in a cluster of nnodes nodes: 1 at
 * least, nnodes at most (ALL: nnodes). */
size_t egpu_sim_sample_want(const struct egpu_sim_sample *s, size_t nnodes);

/* Would kube-scheduler's own NodeResourcesFit pass node for r: the node's
 * free CPU (millicores) and memory (MiB) hold r's, and its free GPU compute
 * over healthy cards (milli-GPU, the device plugin's gpu-core summed over
 * the node) holds r's total? Cards, models and shares are not judged (the
 * extender does). */
bool egpu_sim_kube_fits(const struct egpu_node *node, const struct egpu_pod_request *r);

/* One scheduling cycle's scan (findNodesThatPassFilters): from node slot
 * *next of c on, round robin over c->nodes, the nodes egpu_sim_kube_fits
 * passes, until want of them are found or every node was processed. Writes
 * their slots to slots (room for want) and moves *next on by the nodes
 * processed, modulo c->nnodes (nextStartNodeIndex). Returns how many were
 * found (0..want). */
size_t egpu_sim_sample_nodes(const struct egpu_cluster *c, const struct egpu_pod_request *r,
                             size_t want, size_t *next, uint32_t *slots);

/* ------------------------------------------------------------------------ */
/* Replay (src/sim/replay.c)                                                */

#define EGPU_REPLAY_PCT_MAX 200 /* arrived-percent buckets 0..EGPU_REPLAY_PCT_MAX */

struct egpu_replay_config {
    enum egpu_policy_kind node_policy;
    enum egpu_policy_kind card_policy;
    uint64_t seed;  /* shuffle, clone draws, random policy, ties */
    double inflate; /* grow the arrivals to this x cluster GPU capacity (1.3) */
    const struct egpu_workload *workload; /* target workload (FGD and the frag measure) */
    /* Pre-existing ElasticGPUs (NULL = none): held before the first pod
     * arrives, counted as allocated and as arrived at the start. */
    const struct egpu_sim_reservations *reservations;
    /* DRA mode (egpu-sim --dra): the placer's dra, dra_order and dra_blind
     * (egpu_placer_config): the allocator's first fit over the devices in
     * dra_order picks the cards, node_policy the node; card_policy is then
     * only what a blind extender scores with. false: the others unread. */
    bool dra;
    enum egpu_dra_order dra_order;
    bool dra_blind;
    /* Called with the cluster as the replay leaves it (NULL = not called),
     * e.g. to write egpu_sim_card_rows; from the replay's thread. */
    void (*final)(void *ud, const struct egpu_replay_config *cfg, const struct egpu_cluster *c);
    void *final_ud;
    /* Which nodes the policy chooses among per pod (egpu-sim --node-sample;
     * zeroed: every node). Otherwise each arrival is one kube-scheduler
     * cycle: egpu_sim_sample_nodes from the last cycle's nextStartNodeIndex
     * (0 at the start), then the policy's best of those nodes. */
    struct egpu_sim_sample sample;
};

/* Per arrived-percent bucket: sums over the events whose arrived GPU request,
 * as a percent of capacity, rounds to the bucket (the paper's analysis). */
struct egpu_replay_bucket {
    uint32_t events;
    double alloc_pct_sum; /* GPU allocation ratio, percent */
    double frag_pct_sum;  /* fragmentation: F(M) as percent of idle GPU */
};

/* Where the idle GPU of a cluster lies, in milli-GPU (egpu_replay_idle_of).
 * Each idle milli-GPU of a healthy card counts once, in the first class
 * that holds for its card, against the trace's own pod shapes (every
 * distinct CPU, memory, per-card GPU, cards and models of a GPU pod):
 * - usable: some trace pod fits the node now and would take this card;
 * - cpu: some trace pod would take the card by its GPU and model, but the
 *   node lacks its CPU or memory (stranded by CPU/memory);
 * - model: some trace pod would take the card by its GPU, but none of
 *   those allows the node's model (stranded by model constraints);
 * - fragment: no trace pod asks so little of one card, or so few cards as
 *   the node has free (stranded as a card fragment).
 * Each class is split into whole free cards and partly used cards. */
struct egpu_replay_idle {
    bool taken; /* the snapshot was taken (the replay reached its point) */
    uint64_t idle_milli;
    uint64_t usable_whole, usable_part;
    uint64_t cpu_whole, cpu_part;
    uint64_t model_whole, model_part;
    uint64_t frag_whole, frag_part;
    /* The idle milli-GPU of partly used cards by the card's free compute:
     * 1..199, 200..499, 500..999 milli. */
    uint64_t part_free[3];
};

/* The snapshots of egpu_replay_result.idle: when the arrived GPU request
 * first reaches 100% of capacity, and as the replay ends (inflate x). */
#define EGPU_REPLAY_IDLE_AT100 0
#define EGPU_REPLAY_IDLE_END   1

struct egpu_replay_result {
    size_t arrivals; /* pods that arrived (trace + clones) */
    size_t failed;   /* pods that did not fit, skipped */
    double final_arrived_pct;
    double final_alloc_pct;
    uint64_t reserved_milli; /* held by reservations from the start */
    double place_seconds;    /* time in placement (schedule + assign) */
    /* DRA mode: placed pods whose cards (the allocator's) are not the ones
     * the card policy would have chosen on the same node; 0 otherwise. */
    size_t dra_other_cards;
    /* With cfg.sample: failed pods that some node outside their sample
     * could have hosted (kube-scheduler would retry them; the replay does
     * not); 0 otherwise. */
    size_t sample_missed;
    struct egpu_replay_idle idle[2]; /* EGPU_REPLAY_IDLE_AT100, EGPU_REPLAY_IDLE_END */
    struct egpu_replay_bucket buckets[EGPU_REPLAY_PCT_MAX + 1];
};

/* Classify the idle GPU of cluster c (egpu_replay_idle's classes) against
 * the GPU pods of reqs[0..n) (requests of one container; others and pods
 * asking no GPU are passed over) into *out. */
void egpu_replay_idle_of(const struct egpu_cluster *c, const struct egpu_pod_request *reqs,
                         size_t n, struct egpu_replay_idle *out);

/* Replay trace t once with the FGD paper's protocol: pods sorted by name
 * (as loaded), shuffled with cfg->seed, then clones drawn uniformly with
 * replacement from the sorted pods appended while the total GPU request
 * (cfg->reservations' included) stays within cfg->inflate x capacity; pods arrive one at a time,
 * never leave, and a pod that fits nowhere is skipped. Thread-safe for distinct results (t and the
 * workload are only read). Returns 0, -EINVAL (bad config) or an error from building the cluster;
 * *out written on success. */
int egpu_replay_run(const struct egpu_trace *t, const struct egpu_replay_config *cfg,
                    struct egpu_replay_result *out, struct egpu_error *err) EGPU_MUST_CHECK;

/* Seconds on the monotonic clock (CLOCK_MONOTONIC), for timing replays. */
double egpu_sim_now(void);

/* Mean GPU allocation ratio (percent) at arrived percent x over results, the
 * paper's way: the mean over events in bucket x, else x-1, else x+1. Returns
 * a negative value when no event is near x. */
double egpu_replay_alloc_at(const struct egpu_replay_result *r, size_t n, int x);
/* Same for the fragmentation ratio (percent of idle GPU). */
double egpu_replay_frag_at(const struct egpu_replay_result *r, size_t n, int x);

/* Published mean allocation ratio (percent, 4 values, static) of a policy
 * (both tiers the same: random, best-fit or fgd) at arrived 80/90/100/130%
 * on the trace it was published for (shared/data/openb/README.md). nodes and
 * pods are the node and pod CSVs (a path or a file name: only the file name
 * counts), ngpus the cluster's GPUs and npods the pod rows loaded. Returns
 * NULL unless the cluster is openb_node_list_gpu_node.csv with 6,212 GPUs and
 * the pods are one of the paper's variants with its row count (default 8,152,
 * cpu050 7,439, gpushare40 8,152, gpuspec10 8,152, multigpu20 8,324), or when
 * nothing was published for the policy. */
const double *egpu_replay_published(const char *nodes, size_t ngpus, const char *pods, size_t npods,
                                    enum egpu_policy_kind node, enum egpu_policy_kind card);

/* ------------------------------------------------------------------------ */
/* Reports (src/sim/report.c)                                               */

/* All runs of one policy pair (one per seed). */
struct egpu_policy_runs {
    char label[64]; /* "fgd", or "binpack/fgd" for node/card */
    enum egpu_policy_kind node_policy;
    enum egpu_policy_kind card_policy;
    struct egpu_replay_result *runs; /* nruns entries, caller-owned */
    size_t nruns;
    const double *published; /* egpu_replay_published's figures for this trace, or NULL */
};

/* Print the summary table to f: per policy the mean GPU allocation ratio at
 * arrived 80/90/100/130%, fragmentation ratio at 90%, pods failed (mean per
 * seed), placement speed (microseconds per pod, pods per second), and below
 * a policy whose published member is set the published figures and the
 * difference (this run minus published; "-" where the run has no value). */
void egpu_report_table(FILE *f, const struct egpu_policy_runs *p, size_t n);

/* Print where the idle GPU lies (egpu_replay_idle's classes) to f: per
 * policy one row at 100% arrived and one at the end of the replays, each
 * class as a percent of capacity_milli (the cluster's GPU), whole free
 * cards + partly used cards, and the partly used cards' idle GPU by their
 * free compute (under 200, 200..499, 500..999 milli), the mean over the
 * runs that took the snapshot. */
void egpu_report_idle(FILE *f, const struct egpu_policy_runs *p, size_t n, uint64_t capacity_milli);

/* Write the curve: one row per arrived percent 0..max, a column of mean
 * allocation ratio and one of fragmentation ratio per policy (empty where no
 * event fell). Returns 0 or -errno with *err set. */
int egpu_report_csv(const char *path, const struct egpu_policy_runs *p, size_t n,
                    struct egpu_error *err) EGPU_MUST_CHECK;

/* Write a per-run summary (policy, seed index, figures) as CSV. */
int egpu_report_summary_csv(const char *path, const struct egpu_policy_runs *p, size_t n,
                            const uint64_t *seeds, struct egpu_error *err) EGPU_MUST_CHECK;

/* Plot allocation ratio against arrived workload per policy from the curve
 * CSV written by egpu_report_csv, with gnuplot, into png. Returns 0, -ENOENT
 * when gnuplot is not installed, or -EIO when it fails. */
int egpu_report_plot(const char *csv, const char *png, const struct egpu_policy_runs *p, size_t n,
                     struct egpu_error *err) EGPU_MUST_CHECK;

#ifdef __cplusplus
}
#endif

#endif /* EGPU_SIM_H */
