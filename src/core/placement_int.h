/* core/placement_int.h - the two tiers of placement (private).
 *
 * cards.c chooses the card(s) per container on one node (the card tier);
 * policy.c scores a node given that choice (the node tier); placement.c ties
 * them together behind struct egpu_placer with a per-node result cache.
 */
#ifndef EGPU_CORE_PLACEMENT_INT_H
#define EGPU_CORE_PLACEMENT_INT_H

#include "egpu/core.h"
#include "frag_int.h"

/* Card tier: choose cards on node (of cluster c) for every container of r
 * with policy kind; with load_aware, exact ties between cards go to the
 * less loaded one (cards.c).
 * rng is used by EGPU_POLICY_RANDOM only; w by the FGD family only (egpu__policy_fgd_family). On
 * success fills *pick and *after (the node state with r placed) and returns
 * true. On failure writes a one-line reason (if why != NULL) and returns
 * false. The node itself is not changed. */
bool egpu__cards_pick(enum egpu_policy_kind kind, bool load_aware, const struct egpu_workload *w,
                      struct egpu_rng *rng, const struct egpu_cluster *c,
                      const struct egpu_node *node, const struct egpu_pod_request *r,
                      struct egpu_pick *pick, struct egpu__node_view *after, char *why,
                      size_t why_len);

/* Card tier in DRA mode: the structured allocator's choice on node (of
 * cluster c) for every container of r: first fit over the node's devices in
 * order (egpu_dra_device_order), with backtracking across containers and
 * cards, at most EGPU_DRA_STEPS_MAX devices tried (cards.c). Fills *pick and
 * *after (may be NULL) and returns true, or writes a one-line reason (if
 * why != NULL) and returns false. The node itself is not changed. */
bool egpu__cards_pick_dra(enum egpu_dra_order order, const struct egpu_cluster *c,
                          const struct egpu_node *node, const struct egpu_pod_request *r,
                          struct egpu_pick *pick, struct egpu__node_view *after, char *why,
                          size_t why_len);

/* Node tier: score of node once r is placed as in after (higher is better).
 * rng is used by EGPU_POLICY_RANDOM only; w by the FGD family only. */
double egpu__node_score(enum egpu_policy_kind kind, const struct egpu_workload *w,
                        struct egpu_rng *rng, const struct egpu_cluster *c,
                        const struct egpu_node *node, const struct egpu_pod_request *r,
                        const struct egpu__node_view *after);

/* Does kind place with FGD's card tier and need a target workload (fgd
 * and the experimental FGD variants)? */
static inline bool egpu__policy_fgd_family(enum egpu_policy_kind kind)
{
    return egpu_policy_needs_workload(kind);
}

/* The target workload's milli-GPU per milli-CPU over its GPU pods, by
 * weight (1 when they ask no CPU): what the typical GPU pod needs of CPU. */
double egpu__workload_rho(const struct egpu_workload *w);

/* S_n of view v: the idle milli-GPU beyond what its free CPU feeds at rho
 * milli-GPU per milli-CPU, max(0, R - rho * CPU free); 0 with no idle GPU. */
double egpu__strand_cpu(const struct egpu__node_view *v, double rho);

/* fgd-cpu-tight's small pods: one container of one card of at most this
 * many milli-GPU, the sizes that fill beside an 810-milli pod. */
#define EGPU_SMALL_POD_MILLI 190
bool egpu__small_pod(const struct egpu_pod_request *r);

/* F'_n of view v in milli-GPU for FGD-family policy kind (F_n(M) for fgd;
 * the variant's measure for fgd-cpu and the experimental ones), rho as
 * egpu__workload_rho(w). */
double egpu__variant_frag(enum egpu_policy_kind kind, const struct egpu__node_view *v,
                          const struct egpu_workload *w, double rho);

/* FGD's node score for a fragmentation change of delta_milli (after minus
 * before, milli-GPU): floor(100 * sigmoid(-delta_milli / 1000)), 0..100. */
double egpu__fgd_score(double delta_milli);

/* fgd-cpu-look's lookahead (lookahead.c): its per-node cache, made on first
 * use in *lk (the placer owns it; egpu__look_free frees it, NULL is a
 * no-op). egpu__look_choose returns the index in cand[0..n-1] (nodes of
 * cluster c in FGD's order, picks[j] r's cards on cand[j]) of the node the
 * lookahead ranks best; 0 when n <= 1 or out of memory. */
#define EGPU_LOOK_TOP   8 /* M: the nodes first in FGD's order it ranks */
#define EGPU_LOOK_TYPES 6 /* K: the typical pods' GPU sizes it looks at */
struct egpu__look;
void egpu__look_free(struct egpu__look *lk);
size_t egpu__look_choose(struct egpu__look **lk, enum egpu_policy_kind kind,
                         const struct egpu_workload *w, const struct egpu_cluster *c,
                         const struct egpu_pod_request *r, struct egpu_node *const *cand,
                         const struct egpu_pick *picks, size_t n);

#endif /* EGPU_CORE_PLACEMENT_INT_H */
