/* core/frag_int.h - fragmentation of a hypothetical node state (private).
 *
 * Placers evaluate "what if this pod went on card g": a view is a copy of the
 * few numbers fragmentation depends on, cheap to modify and to measure.
 */
#ifndef EGPU_CORE_FRAG_INT_H
#define EGPU_CORE_FRAG_INT_H

#include "egpu/core.h"

struct egpu__node_view {
    int64_t free_cpu_milli;
    uint16_t model;
    uint32_t ngpus;
    uint32_t free_milli[EGPU_NODE_GPUS_MAX]; /* free compute per card */
};

/* Fill v from node n's current state. */
void egpu__view_of(const struct egpu_node *n, struct egpu__node_view *v);

/* F(M) of the view, in milli-GPU (see egpu_frag_node). */
double egpu__frag_view(const struct egpu__node_view *v, const struct egpu_workload *w);

/* F(M) of views of one node, cheaply: the typical pods of the workload in
 * classes by (per-card GPU, models), which see the same cards, and for one
 * view the node starts from (its state before a placement) per class the
 * cards with the class's per-card request free (fit) and the free compute
 * of the others (below). A view that differs from it in a few cards and in
 * CPU (the node with a pod placed) has its F(M) in O(classes x cards
 * changed + typical pods) instead of O(typical pods x cards), the same
 * double as egpu__frag_view: the same integer per typical pod, summed in the
 * same order. The last views measured since the base view was set are
 * remembered, so a view measured again (the card tier's choice, scored by
 * the node tier) costs a comparison. */
#define EGPU__FRAG_SEEN 8

struct egpu__frag_seen {
    struct egpu__node_view v;
    double f;
};

struct egpu__frag_base {
    const struct egpu_workload *w; /* borrowed */
    /* By typical pod (w->n), from w: */
    uint16_t *cls;  /* its class; 0 = asks no GPU */
    int64_t *cpu;   /* milli-CPU */
    uint32_t *need; /* cards (1 for a pod of class 0, which no card fits) */
    double *weight;
    /* By class (nclass, class 0 included), from w: */
    size_t nclass;
    uint32_t *gm;   /* per-card milli-GPU */
    uint64_t *mask; /* the model mask */
    /* For the view set (egpu__frag_base_set), by class: */
    struct egpu__node_view v;
    bool *ok;        /* it may use the node (asks GPU, models allow) */
    uint32_t *fit;   /* cards with gm free */
    uint64_t *below; /* free milli-GPU of the others */
    uint32_t *fit2;  /* egpu__frag_base_eval's scratch (0 unless ok) */
    double *below_d; /* egpu__frag_base_eval's scratch */
    struct egpu__frag_seen seen[EGPU__FRAG_SEEN];
    uint32_t nseen, next_seen;
};

/* Make *b for workload w (borrowed, unchanged while b lives). Returns 0 or
 * -ENOMEM. Free with egpu__frag_base_free (a zeroed *b: a no-op). */
int egpu__frag_base_init(struct egpu__frag_base *b, const struct egpu_workload *w);
void egpu__frag_base_free(struct egpu__frag_base *b);

/* Take view v as the one b's figures are for: O(classes x cards). */
void egpu__frag_base_set(struct egpu__frag_base *b, const struct egpu__node_view *v);

/* F(M) of view o, equal to egpu__frag_view(o, b->w). o is a view of the
 * node of b's view (same model and cards; any card's free compute and the
 * free CPU may differ). */
double egpu__frag_base_eval(struct egpu__frag_base *b, const struct egpu__node_view *o);

#endif /* EGPU_CORE_FRAG_INT_H */
