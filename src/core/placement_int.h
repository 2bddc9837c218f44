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

/* The target workload as the FGD family reads it: what depends on the
 * workload alone, computed once (egpu__target_init) instead of per node and
 * card evaluated, and the scratch of the node being evaluated. A placer
 * owns one for its cfg.workload (borrowed: the workload must not change
 * while the placer lives). */
struct egpu__target {
    const struct egpu_workload *w;
    double rho;                          /* egpu__workload_rho(w) */
    bool has_fill;                       /* unfill made (fgd-cpu-fill's policies) */
    uint16_t unfill[EGPU_GPU_MILLI + 1]; /* the fill table, see policy.c */
    /* The node being evaluated: base is its view's figures while
     * base_ready; the evaluation's caller clears base_ready per node. */
    bool base_ready;
    struct egpu__frag_base base; /* for w (owned) */
    /* F'_n of that node as it is for the node policy (egpu__node_score's
     * "before"): NAN when not known, then set by egpu__node_score. The
     * caller may keep it with the node's generation and give it back. */
    double frag_before;
};

/* Make *t for workload w (borrowed; not NULL, w->n > 0), with the fill table
 * when fill is set. Returns 0 or -ENOMEM. Free with egpu__target_free. */
int egpu__target_init(struct egpu__target *t, const struct egpu_workload *w, bool fill);

/* Free what egpu__target_init allocated; a zeroed *t is a no-op. */
void egpu__target_free(struct egpu__target *t);

/* The figures of node's current state in t->base, made when not
 * t->base_ready (then set). */
struct egpu__frag_base *egpu__target_base(struct egpu__target *t, const struct egpu_node *node);

/* Does policy kind read the fill table? */
static inline bool egpu__policy_fills(enum egpu_policy_kind kind)
{
    return kind == EGPU_POLICY_FGD_CPU_FILL || kind == EGPU_POLICY_FGD_CPU_FILL_LOOK;
}

/* Card tier: choose cards on node (of cluster c) for every container of r
 * with policy kind; with load_aware, exact ties between cards go to the
 * less loaded one (cards.c).
 * rng is used by EGPU_POLICY_RANDOM only; t by the FGD family only (egpu__policy_fgd_family;
 * its base for node, see egpu__target_base). On
 * success fills *pick and *after (the node state with r placed) and returns
 * true. On failure writes a one-line reason (if why != NULL) and returns
 * false. The node itself is not changed. */
bool egpu__cards_pick(enum egpu_policy_kind kind, bool load_aware, struct egpu__target *t,
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
 * rng is used by EGPU_POLICY_RANDOM only; t by the FGD family only (its
 * base for node, see egpu__target_base). */
double egpu__node_score(enum egpu_policy_kind kind, struct egpu__target *t, struct egpu_rng *rng,
                        const struct egpu_cluster *c, const struct egpu_node *node,
                        const struct egpu_pod_request *r, const struct egpu__node_view *after);

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
 * the variant's measure for fgd-cpu and the experimental ones) for t's
 * workload. frag is F_n(M) of v, or NAN to compute it here. */
double egpu__variant_frag(enum egpu_policy_kind kind, const struct egpu__node_view *v,
                          const struct egpu__target *t, double frag);

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
                         const struct egpu__target *t, const struct egpu_cluster *c,
                         const struct egpu_pod_request *r, struct egpu_node *const *cand,
                         const struct egpu_pick *picks, size_t n);

#endif /* EGPU_CORE_PLACEMENT_INT_H */
