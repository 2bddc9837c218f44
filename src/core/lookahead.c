/* core/lookahead.c - a one-pod lookahead over the typical pods (fgd-cpu-look).
 *
 * fgd-cpu-look ranks the M = EGPU_LOOK_TOP nodes FGD's order puts first
 * (fgd-cpu's score, load, the per-seed hash) by what the placement leaves
 * for the next pod. Its types t are the workload's most frequent typical pod
 * of each distinct GPU size (per-card milli-GPU and cards), the first K =
 * EGPU_LOOK_TYPES of them, with their weights p_t renormalised. Node n is
 * worth
 *   V(n) = dF'_n(pod) + sum_t p_t * min(dF'_t(n after), B_t(n)),
 * dF'_t(view) the growth of fgd-cpu's F' when t is placed on the view with
 * FGD's card choice (+inf when it does not fit; a type that fits nowhere
 * counts 0), B_t(n) the least dF'_t on any other node as the cluster is now:
 * the next pod goes to n only where n is then its best node. The node score
 * is FGD's integer floor(100 * sigmoid(-V / 1000)); the highest wins, its
 * ties to FGD's order.
 *
 * DESIGN: between two arrivals only one node changes, so dF'_t per node and
 * type is cached with the node's generation; an arrival costs K changed
 * nodes, K scans of the cached values and M x K placements on after-views.
 */
#include <math.h>
#include <string.h>

#include "placement_int.h"

struct look_cell {
    uint64_t gen; /* node generation the value is for; 0 = none */
    double d;     /* dF'_t on the node as it is */
};

struct egpu__look {
    uint64_t cluster; /* the cluster id the cache is for */
    size_t ntypes;
    size_t nslots;
    struct look_cell *cells; /* [type * nslots + slot] */
};

void egpu__look_free(struct egpu__look *lk)
{
    if (lk == NULL)
        return;
    egpu_free(lk->cells);
    egpu_free(lk);
}

/* dF' of typical pod t placed on view v (FGD's card choice: the card
 * leaving the least F'), +inf when it does not fit; fb is F' of v. */
static double place_typical(enum egpu_policy_kind kind, const struct egpu__node_view *v,
                            const struct egpu_typical_pod *t, const struct egpu__target *tg,
                            double fb)
{
    struct egpu__node_view a = *v;
    double best = INFINITY;

    if (v->free_cpu_milli < t->cpu_milli)
        return INFINITY;
    a.free_cpu_milli -= t->cpu_milli;
    if (t->ncards == 0 || t->gpu_milli == 0)
        return egpu__variant_frag(kind, &a, tg, NAN) - fb;
    if (v->ngpus == 0 || (t->model_mask != 0 &&
                          (v->model == EGPU_MODEL_NONE || !(t->model_mask & (1ULL << v->model)))))
        return INFINITY;
    if (t->gpu_milli >= EGPU_GPU_MILLI) {
        uint32_t k = 0;

        for (uint32_t g = 0; g < a.ngpus && k < t->ncards; g++) {
            if (a.free_milli[g] == EGPU_GPU_MILLI) {
                a.free_milli[g] = 0;
                k++;
            }
        }
        return k < t->ncards ? INFINITY : egpu__variant_frag(kind, &a, tg, NAN) - fb;
    }
    for (uint32_t g = 0; g < a.ngpus; g++) {
        uint32_t before = a.free_milli[g];
        bool seen = false;
        double f;

        if (before < t->gpu_milli)
            continue;
        for (uint32_t j = 0; j < g && !seen; j++)
            seen = v->free_milli[j] == before;
        if (seen)
            continue;
        a.free_milli[g] = before - t->gpu_milli;
        f = egpu__variant_frag(kind, &a, tg, NAN) - fb;
        a.free_milli[g] = before;
        if (f < best)
            best = f;
    }
    return best;
}

/* Make lk's cache fit cluster c and K types; false when out of memory. */
static bool look_fit(struct egpu__look *lk, const struct egpu_cluster *c, size_t k)
{
    if (lk->cluster == c->id && lk->ntypes == k && lk->nslots >= c->nnodes)
        return true;
    egpu_free(lk->cells);
    lk->cells = egpu_calloc(k * (c->cap > c->nnodes ? c->cap : c->nnodes), sizeof(*lk->cells));
    if (lk->cells == NULL) {
        lk->ntypes = lk->nslots = 0;
        lk->cluster = 0;
        return false;
    }
    lk->cluster = c->id;
    lk->ntypes = k;
    lk->nslots = c->cap > c->nnodes ? c->cap : c->nnodes;
    return true;
}

size_t egpu__look_choose(struct egpu__look **lkp, enum egpu_policy_kind kind,
                         const struct egpu__target *tg, const struct egpu_cluster *c,
                         const struct egpu_pod_request *r, struct egpu_node *const *cand,
                         const struct egpu_pick *picks, size_t n)
{
    size_t k = 0, ty[EGPU_LOOK_TYPES];
    const struct egpu_workload *w = tg->w;
    double best1[EGPU_LOOK_TYPES], best2[EGPU_LOOK_TYPES], p[EGPU_LOOK_TYPES], psum = 0.0;
    double best_v = INFINITY;
    size_t slot1[EGPU_LOOK_TYPES], chosen = 0;
    struct egpu__look *lk = *lkp;

    /* The types: the first typical pod of each distinct GPU size. */
    for (size_t i = 0; i < w->n && k < EGPU_LOOK_TYPES; i++) {
        bool dup = false;

        for (size_t j = 0; j < k && !dup; j++)
            dup = w->pods[ty[j]].gpu_milli == w->pods[i].gpu_milli &&
                  w->pods[ty[j]].ncards == w->pods[i].ncards;
        if (!dup)
            ty[k++] = i;
    }
    if (n <= 1 || k == 0)
        return 0;
    if (lk == NULL) {
        lk = egpu_calloc(1, sizeof(*lk));
        if (lk == NULL)
            return 0;
        *lkp = lk;
    }
    if (!look_fit(lk, c, k))
        return 0;
    for (size_t t = 0; t < k; t++) {
        p[t] = w->pods[ty[t]].weight;
        psum += p[t];
        best1[t] = best2[t] = INFINITY;
        slot1[t] = SIZE_MAX;
    }
    for (size_t i = 0; i < c->nnodes; i++) {
        const struct egpu_node *node = c->nodes[i];
        struct egpu__node_view v;
        bool have = false;
        double fb = 0.0;

        for (size_t t = 0; t < k; t++) {
            struct look_cell *cell = &lk->cells[t * lk->nslots + i];

            if (cell->gen != node->gen) {
                if (!have) {
                    egpu__view_of(node, &v);
                    fb = egpu__variant_frag(kind, &v, tg, NAN);
                    have = true;
                }
                cell->d = place_typical(kind, &v, &w->pods[ty[t]], tg, fb);
                cell->gen = node->gen;
            }
            if (cell->d < best1[t]) {
                best2[t] = best1[t];
                best1[t] = cell->d;
                slot1[t] = i;
            } else if (cell->d < best2[t]) {
                best2[t] = cell->d;
            }
        }
    }
    for (size_t j = 0; j < n; j++) {
        const struct egpu_node *node = cand[j];
        struct egpu__node_view before, after;
        double fb, fa, v = 0.0;

        egpu__view_of(node, &before);
        after = before;
        after.free_cpu_milli -= r->cpu_milli;
        for (uint32_t s = 0; s < picks[j].nshares; s++)
            after.free_milli[picks[j].shares[s].gpu] -= picks[j].shares[s].core_milli;
        fb = egpu__variant_frag(kind, &before, tg, NAN);
        fa = egpu__variant_frag(kind, &after, tg, NAN);
        for (size_t t = 0; t < k; t++) {
            double other = slot1[t] == node->slot ? best2[t] : best1[t];
            double here = place_typical(kind, &after, &w->pods[ty[t]], tg, fa);
            double d = here < other ? here : other;

            if (isinf(d))
                d = 0.0; /* fits nowhere either way: the same for every candidate */
            v += p[t] / psum * d;
        }
        v = -egpu__fgd_score(fa - fb + v);
        if (v < best_v) {
            best_v = v;
            chosen = j;
        }
    }
    return chosen;
}
