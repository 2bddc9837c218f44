/* core/policy.c - the node tier: how good a node is for a pod.
 *
 * Each score is computed on the node as it would be with the pod placed
 * (the card tier's choice), higher is better:
 * - binpack: mean used fraction of the node's CPU, memory and (when it has
 *   cards) GPU compute; the fullest node wins. spread: its negation.
 * - best-fit: the FGD paper's BestFit baseline (Panigrahy et al.): minus the
 *   weighted sum of what is left, 0.5 * CPU left / largest node CPU + 0.5 *
 *   GPU left / largest node's GPU, so the tightest fit wins.
 * - random: a uniform random number, so the winner is uniform over feasible
 *   nodes (seeded).
 * - FGD: the FGD paper's score plugin (Weng et al., ATC'23, section 4.2, and
 *   its simulator): with dF = F_n(M) after - F_n(M) before in milli-GPU,
 *   score = floor(100 * sigmoid(-dF / 1000)), an integer 0..100 like every
 *   kube-scheduler score. The placement that grows fragmentation least wins;
 *   placements within one integer step (about 40 milli-GPU near dF = 0) tie,
 *   and ties go to the fixed per-seed node order (see placement.c), which
 *   packs them. The published figures were measured with this integer score;
 *   ranking by the exact dF instead measured about 2 points lower at 100%
 *   arrived on the openb default trace (docs/replay.md).
 */

#include <errno.h>
#include <math.h>
#include <string.h>

#include "placement_int.h"

#define NAME_OF(id, name, sep) [EGPU_POLICY_##id] = name,

static const char *const names[EGPU_POLICY_ALL_COUNT] = {
    EGPU_POLICY_LIST(NAME_OF) EGPU_POLICY_EXPERIMENTAL_LIST(NAME_OF)};

int egpu_policy_parse_experimental(const char *name, enum egpu_policy_kind *out,
                                   struct egpu_error *err)
{
    for (size_t i = EGPU_POLICY_COUNT; i < EGPU_POLICY_ALL_COUNT; i++) {
        if (strcmp(name, names[i]) == 0) {
            *out = (enum egpu_policy_kind)i;
            return 0;
        }
    }
    if (egpu_policy_parse(name, out, NULL) == 0)
        return 0;
    return egpu_error_set(err, -EINVAL,
                          "unknown policy \"%s\" (allowed: " EGPU_POLICY_NAMES
                          "; experimental: " EGPU_POLICY_EXPERIMENTAL_NAMES ")",
                          name);
}

int egpu_policy_parse(const char *name, enum egpu_policy_kind *out, struct egpu_error *err)
{
    for (size_t i = 0; i < EGPU_POLICY_COUNT; i++) {
        if (strcmp(name, names[i]) == 0) {
            *out = (enum egpu_policy_kind)i;
            return 0;
        }
    }
    if (strcmp(name, "bestfit") == 0) {
        *out = EGPU_POLICY_BESTFIT;
        return 0;
    }
    return egpu_error_set(err, -EINVAL, "unknown policy \"%s\" (allowed: " EGPU_POLICY_NAMES ")",
                          name);
}

const char *egpu_policy_name(enum egpu_policy_kind k)
{
    return (size_t)k < sizeof(names) / sizeof(names[0]) ? names[k] : "unknown";
}

bool egpu_policy_needs_workload(enum egpu_policy_kind k)
{
    return k == EGPU_POLICY_FGD || k == EGPU_POLICY_FGD_CPU || k == EGPU_POLICY_FGD_CPU_FILL ||
           ((int)k >= EGPU_POLICY_COUNT && (int)k < EGPU_POLICY_ALL_COUNT);
}

double egpu__fgd_score(double delta_milli)
{
    return floor(100.0 / (1.0 + exp(delta_milli / 1000.0)));
}

static uint64_t view_free_gpu(const struct egpu__node_view *v)
{
    uint64_t f = 0;

    for (uint32_t i = 0; i < v->ngpus; i++)
        f += v->free_milli[i];
    return f;
}

static double used_fraction(const struct egpu_node *n, const struct egpu_pod_request *r,
                            const struct egpu__node_view *after)
{
    double sum = 0.0;
    int dims = 0;

    if (n->cpu_milli > 0) {
        sum += (double)(n->cpu_milli - after->free_cpu_milli) / (double)n->cpu_milli;
        dims++;
    }
    if (n->mem_mib > 0) {
        sum += (double)(n->used_mem_mib + r->mem_mib) / (double)n->mem_mib;
        dims++;
    }
    if (n->ngpus > 0) {
        double cap = (double)n->ngpus * EGPU_GPU_MILLI;

        sum += (cap - (double)view_free_gpu(after)) / cap;
        dims++;
    }
    return dims ? sum / dims : 0.0;
}

/* ------------------------------------------------------------------------ */
/* Experimental FGD variants (docs/replay.md, "Experimental policies")      */

enum fgd_tie {
    TIE_HASH,     /* none: FGD's, the per-seed node order */
    TIE_BESTFIT,  /* least best-fit leftover (0.5 CPU + 0.5 GPU, as best-fit) */
    TIE_WHOLE,    /* fewest whole free cards left: keep whole nodes whole */
    TIE_SURPLUS,  /* most CPU left beyond what the idle GPU needs */
    TIE_SMALLEST, /* fewest cards: small nodes first */
    TIE_TIGHT,    /* pods of at most 190 milli-GPU: the least left on their card */
};

struct fgd_variant {
    double strand_w;  /* weight of the CPU-stranded GPU S_n in F'_n */
    double rho_scale; /* rho = rho_scale x the workload's milli-GPU per milli-CPU */
    double pack_a;    /* F'_n = (1 - a) F_n(M) + a P_n(M) (the packing measure) */
    bool pack_gpu;    /* P_n counts the copies the cards allow, not the CPU */
    double left_b;    /* dF' + b x idle GPU after (best-fit's GPU leftover blended in) */
    double fill_b;    /* F'_n + b x C_n (the partly used cards' unfillable compute) */
    enum fgd_tie tie;
    bool tie_cpu_pods; /* the tie-break only for pods that ask no GPU */
};

static const struct fgd_variant variants[EGPU_POLICY_ALL_COUNT] = {
    [EGPU_POLICY_FGD_CPU] = {.strand_w = 2.0, .rho_scale = 1.5},
    [EGPU_POLICY_FGD_BF] = {.tie = TIE_BESTFIT},
    [EGPU_POLICY_FGD_BLEND] = {.left_b = 0.05},
    [EGPU_POLICY_FGD_WHOLE] = {.tie = TIE_WHOLE},
    [EGPU_POLICY_FGD_CPUPODS] = {.tie = TIE_SURPLUS, .tie_cpu_pods = true},
    [EGPU_POLICY_FGD_PACK] = {.pack_a = 0.5},
    [EGPU_POLICY_FGD_SMALL] = {.tie = TIE_SMALLEST},
    [EGPU_POLICY_FGD_CPU_PACK] = {.strand_w = 2.0, .rho_scale = 1.5, .pack_a = 0.5},
    [EGPU_POLICY_FGD_CPU_BF] = {.strand_w = 2.0, .rho_scale = 1.5, .tie = TIE_BESTFIT},
    [EGPU_POLICY_FGD_CPU_CARDS] = {.strand_w = 2.0,
                                   .rho_scale = 1.5,
                                   .pack_a = 0.5,
                                   .pack_gpu = true},
    [EGPU_POLICY_FGD_CPU_LOOK] = {.strand_w = 2.0, .rho_scale = 1.5},
    [EGPU_POLICY_FGD_CPU_FILL] = {.strand_w = 2.0, .rho_scale = 1.2, .fill_b = 1.5},
    [EGPU_POLICY_FGD_CPU_FILL_LOOK] = {.strand_w = 2.0, .rho_scale = 1.5, .fill_b = 1.5},
    [EGPU_POLICY_FGD_CPU_TIGHT] = {.strand_w = 2.0, .rho_scale = 1.5, .tie = TIE_TIGHT},
};

/* The target workload's milli-GPU per milli-CPU over its GPU pods,
 * weighted (1 when they ask no CPU). */
double egpu__workload_rho(const struct egpu_workload *w)
{
    double gpu = 0.0, cpu = 0.0;

    for (size_t i = 0; i < w->n; i++) {
        const struct egpu_typical_pod *m = &w->pods[i];

        if (m->ncards == 0 || m->gpu_milli == 0)
            continue;
        gpu += m->weight * (double)m->gpu_milli * (double)m->ncards;
        cpu += m->weight * (double)m->cpu_milli;
    }
    return cpu > 0.0 ? gpu / cpu : 1.0;
}

double egpu__strand_cpu(const struct egpu__node_view *v, double rho)
{
    double idle = (double)view_free_gpu(v);
    double can = (double)(v->free_cpu_milli > 0 ? v->free_cpu_milli : 0) * rho;

    return idle > can ? idle - can : 0.0;
}

static uint32_t whole_free(const struct egpu__node_view *v)
{
    uint32_t k = 0;

    for (uint32_t i = 0; i < v->ngpus; i++)
        k += v->free_milli[i] == EGPU_GPU_MILLI;
    return k;
}

/* P_n(m): the idle GPU that copies of m packed on the node cannot take (as
 * many as its cards and its CPU allow); idle when m cannot use the node. */
static double pack_pod(const struct egpu__node_view *v, uint64_t idle,
                       const struct egpu_typical_pod *m, bool gpu_only)
{
    uint64_t copies = 0;

    if (m->ncards == 0 || m->gpu_milli == 0)
        return (double)idle;
    if (m->model_mask != 0 &&
        (v->model == EGPU_MODEL_NONE || !(m->model_mask & (1ULL << v->model))))
        return (double)idle;
    if (m->gpu_milli >= EGPU_GPU_MILLI) {
        copies = whole_free(v) / m->ncards;
    } else {
        for (uint32_t i = 0; i < v->ngpus; i++)
            copies += v->free_milli[i] / m->gpu_milli;
    }
    if (m->cpu_milli > 0 && !gpu_only) {
        uint64_t by_cpu =
            v->free_cpu_milli > 0 ? (uint64_t)v->free_cpu_milli / (uint64_t)m->cpu_milli : 0;

        if (by_cpu < copies)
            copies = by_cpu;
    }
    return (double)idle - (double)(copies * m->ncards * m->gpu_milli);
}

/* The fill table of a workload: unfill[f] = f minus the most that sums of
 * its frequent card sizes reach without passing f, f in milli-GPU 0..1000.
 * A frequent size: a per-card milli-GPU under a whole card that one-card
 * typical pods ask with a summed weight of at least FILL_MIN_WEIGHT (on the
 * default trace 810, 470, 650, 320, 460, 230). Made once per target
 * (egpu__target_init). */
#define FILL_MIN_WEIGHT 0.015

static void make_fill(const struct egpu_workload *w, uint16_t unfill[EGPU_GPU_MILLI + 1])
{
    bool reach[EGPU_GPU_MILLI + 1];
    double size_w[EGPU_GPU_MILLI + 1]; /* by card size; EGPU_GPU_MILLI itself stays 0 */
    uint32_t best = 0;

    memset(reach, 0, sizeof(reach));
    reach[0] = true;
    memset(size_w, 0, sizeof(size_w));
    for (size_t i = 0; i < w->n; i++) {
        const struct egpu_typical_pod *m = &w->pods[i];

        if (m->ncards == 1 && m->gpu_milli > 0 && m->gpu_milli < EGPU_GPU_MILLI)
            size_w[m->gpu_milli] += m->weight;
    }
    for (uint32_t f = 1; f <= EGPU_GPU_MILLI; f++) {
        for (uint32_t g = 1; g <= f && !reach[f]; g++)
            reach[f] = size_w[g] >= FILL_MIN_WEIGHT && reach[f - g];
    }
    for (uint32_t f = 0; f <= EGPU_GPU_MILLI; f++) {
        if (reach[f])
            best = f;
        unfill[f] = (uint16_t)(f - best);
    }
}

int egpu__target_init(struct egpu__target *t, const struct egpu_workload *w, bool fill)
{
    memset(t, 0, sizeof(*t));
    t->w = w;
    t->rho = egpu__workload_rho(w);
    t->frag_before = NAN;
    if (egpu__frag_base_init(&t->base, w) != 0) {
        egpu__target_free(t);
        return -ENOMEM;
    }
    if (fill)
        make_fill(w, t->unfill);
    t->has_fill = fill;
    return 0;
}

void egpu__target_free(struct egpu__target *t)
{
    egpu__frag_base_free(&t->base);
    memset(t, 0, sizeof(*t));
}

struct egpu__frag_base *egpu__target_base(struct egpu__target *t, const struct egpu_node *node)
{
    if (!t->base_ready) {
        struct egpu__node_view v;

        egpu__view_of(node, &v);
        egpu__frag_base_set(&t->base, &v);
        t->base_ready = true;
    }
    return &t->base;
}

/* C_n of the view: the compute of its partly used cards that no sum of the
 * frequent card sizes fills (the fill table unfill). */
static double unfillable(const struct egpu__node_view *v, const uint16_t *unfill)
{
    double c = 0.0;

    for (uint32_t i = 0; i < v->ngpus; i++) {
        if (v->free_milli[i] > 0 && v->free_milli[i] < EGPU_GPU_MILLI)
            c += unfill[v->free_milli[i]];
    }
    return c;
}

/* F'_n of the view for variant x and t's workload, milli-GPU, f being its
 * F_n(M). */
static double variant_frag(const struct fgd_variant *x, const struct egpu__node_view *v,
                           const struct egpu__target *t, double f)
{
    const struct egpu_workload *w = t->w;

    if (x->pack_a > 0.0) {
        uint64_t idle = view_free_gpu(v);
        double p = 0.0;

        for (size_t i = 0; idle > 0 && i < w->n; i++)
            p += w->pods[i].weight * pack_pod(v, idle, &w->pods[i], x->pack_gpu);
        f = (1.0 - x->pack_a) * f + x->pack_a * p;
    }
    if (x->strand_w > 0.0)
        f += x->strand_w * egpu__strand_cpu(v, t->rho * x->rho_scale);
    if (x->fill_b > 0.0)
        f += x->fill_b * unfillable(v, t->unfill);
    return f;
}

bool egpu__small_pod(const struct egpu_pod_request *r)
{
    return r->ncontainers == 1 && r->containers[0].core_milli <= EGPU_SMALL_POD_MILLI &&
           r->containers[0].ncards == 1;
}

double egpu__variant_frag(enum egpu_policy_kind kind, const struct egpu__node_view *v,
                          const struct egpu__target *t, double frag)
{
    if (isnan(frag))
        frag = egpu__frag_view(v, t->w);
    if (kind == EGPU_POLICY_FGD || (int)kind < 0 || (int)kind >= EGPU_POLICY_ALL_COUNT)
        return frag;
    return variant_frag(&variants[kind], v, t, frag);
}

/* The tie-break of variant x in [0, 1] (higher wins), for the node as in
 * after. */
static double variant_tie(const struct fgd_variant *x, const struct egpu_cluster *c,
                          const struct egpu_node *node, const struct egpu__node_view *after,
                          double rho)
{
    double cpu_norm = c->max_cpu_milli > 0 ? (double)c->max_cpu_milli : 1.0;
    double gpu_norm = c->max_ngpus > 0 ? (double)c->max_ngpus * EGPU_GPU_MILLI : 1.0;
    double cards = c->max_ngpus > 0 ? (double)c->max_ngpus : 1.0;
    double t = 0.0;

    switch (x->tie) {
    case TIE_HASH:
        return 0.0;
    case TIE_BESTFIT:
        t = 1.0 - (0.5 * (double)after->free_cpu_milli / cpu_norm +
                   0.5 * (double)view_free_gpu(after) / gpu_norm);
        break;
    case TIE_WHOLE:
        t = 1.0 - (double)whole_free(after) / cards;
        break;
    case TIE_SURPLUS:
        t = 0.5 +
            ((double)after->free_cpu_milli * rho - (double)view_free_gpu(after)) / (8.0 * gpu_norm);
        break;
    case TIE_SMALLEST:
        t = 1.0 - (double)node->ngpus / cards;
        break;
    case TIE_TIGHT: {
        struct egpu__node_view before;

        egpu__view_of(node, &before);
        t = 0.0;
        for (uint32_t i = 0; i < after->ngpus; i++) {
            if (after->free_milli[i] != before.free_milli[i])
                t = 1.0 - (double)after->free_milli[i] / EGPU_GPU_MILLI;
        }
        break;
    }
    }
    return t < 0.0 ? 0.0 : t > 1.0 ? 1.0 : t;
}

/* An FGD variant's node score: FGD's integer score of the growth of F'_n,
 * plus half the tie-break (below one integer step, so it only orders
 * nodes FGD's score ties). */
static double variant_score(enum egpu_policy_kind kind, struct egpu__target *t,
                            const struct egpu_cluster *c, const struct egpu_node *node,
                            const struct egpu_pod_request *r, const struct egpu__node_view *after)
{
    const struct fgd_variant *x = &variants[kind];
    const double rho = t->rho;
    struct egpu__frag_base *b = egpu__target_base(t, node);
    double score;

    if (isnan(t->frag_before))
        t->frag_before = variant_frag(x, &b->v, t, egpu__frag_base_eval(b, &b->v));
    score = egpu__fgd_score(variant_frag(x, after, t, egpu__frag_base_eval(b, after)) -
                            t->frag_before + x->left_b * (double)view_free_gpu(after));
    if (x->tie == TIE_HASH || (x->tie_cpu_pods && egpu_pod_request_gpu_milli(r) > 0))
        return score;
    if (x->tie == TIE_TIGHT && !egpu__small_pod(r))
        return score;
    return score + 0.5 * variant_tie(x, c, node, after, rho);
}

double egpu__node_score(enum egpu_policy_kind kind, struct egpu__target *t, struct egpu_rng *rng,
                        const struct egpu_cluster *c, const struct egpu_node *node,
                        const struct egpu_pod_request *r, const struct egpu__node_view *after)
{
    switch (kind) {
    case EGPU_POLICY_BINPACK:
        return used_fraction(node, r, after);
    case EGPU_POLICY_SPREAD:
        return -used_fraction(node, r, after);
    case EGPU_POLICY_BESTFIT: {
        double cpu_norm = c->max_cpu_milli > 0 ? (double)c->max_cpu_milli : 1.0;
        double gpu_norm = c->max_ngpus > 0 ? (double)c->max_ngpus * EGPU_GPU_MILLI : 1.0;

        return -(0.5 * (double)after->free_cpu_milli / cpu_norm +
                 0.5 * (double)view_free_gpu(after) / gpu_norm);
    }
    case EGPU_POLICY_RANDOM:
        return (double)(egpu_rng_next(rng) >> 11); /* 53 bits: exact in a double */
    case EGPU_POLICY_FGD: {
        struct egpu__frag_base *b = egpu__target_base(t, node);

        return egpu__fgd_score(egpu__frag_base_eval(b, after) - egpu__frag_base_eval(b, &b->v));
    }
    case EGPU_POLICY_FGD_CPU:
    case EGPU_POLICY_FGD_BF:
    case EGPU_POLICY_FGD_BLEND:
    case EGPU_POLICY_FGD_WHOLE:
    case EGPU_POLICY_FGD_CPUPODS:
    case EGPU_POLICY_FGD_PACK:
    case EGPU_POLICY_FGD_SMALL:
    case EGPU_POLICY_FGD_CPU_PACK:
    case EGPU_POLICY_FGD_CPU_BF:
    case EGPU_POLICY_FGD_CPU_CARDS:
    case EGPU_POLICY_FGD_CPU_LOOK:
    case EGPU_POLICY_FGD_CPU_TIGHT:
    case EGPU_POLICY_FGD_CPU_FILL:
    case EGPU_POLICY_FGD_CPU_FILL_LOOK:
        return variant_score(kind, t, c, node, r, after);
    }
    return 0.0;
}
