/* core/frag.c - GPU fragmentation of a node for a target workload (FGD).
 *
 * Definition (shared/data/openb/README.md; Weng et al., ATC'23, section 4):
 * for node n with R milli-GPU idle and a typical pod m, F_n(m) = R when m
 * asks no GPU, m's allowed models exclude n's, or n lacks the CPU or enough
 * cards with m's per-card request free; otherwise F_n(m) is the idle
 * milli-GPU on the cards whose free compute is below m's per-card request.
 * F_n(M) = sum_m weight_m * F_n(m). Memory is not part of the measure.
 */
#include <errno.h>
#include <string.h>

#include "egpu/core.h"
#include "frag_int.h"

void egpu__view_of(const struct egpu_node *n, struct egpu__node_view *v)
{
    v->free_cpu_milli = n->cpu_milli - n->used_cpu_milli;
    v->model = n->model;
    v->ngpus = n->ngpus;
    for (uint32_t i = 0; i < n->ngpus; i++)
        v->free_milli[i] = n->gpus[i].unhealthy ? 0 : egpu_gpu_free_core(&n->gpus[i]);
}

static uint64_t frag_pod(const struct egpu__node_view *v, uint64_t idle,
                         const struct egpu_typical_pod *m)
{
    uint64_t below = 0;
    uint32_t fit = 0;

    if (m->ncards == 0 || m->gpu_milli == 0)
        return idle;
    if (m->model_mask != 0 &&
        (v->model == EGPU_MODEL_NONE || !(m->model_mask & (1ULL << v->model))))
        return idle;
    if (v->free_cpu_milli < m->cpu_milli)
        return idle;
    for (uint32_t i = 0; i < v->ngpus; i++) {
        if (v->free_milli[i] >= m->gpu_milli)
            fit++;
        else
            below += v->free_milli[i];
    }
    return fit < m->ncards ? idle : below;
}

double egpu__frag_view(const struct egpu__node_view *v, const struct egpu_workload *w)
{
    uint64_t idle = 0;
    double f = 0.0;

    for (uint32_t i = 0; i < v->ngpus; i++)
        idle += v->free_milli[i];
    if (idle == 0)
        return 0.0;
    for (size_t i = 0; i < w->n; i++)
        f += w->pods[i].weight * (double)frag_pod(v, idle, &w->pods[i]);
    return f;
}

/* Number b's classes 1.. by per-card GPU, smallest first (base_set walks
 * them with the node's sorted cards); b->fit and b->below, not yet used, hold
 * the old numbers meanwhile. */
static void sort_classes(struct egpu__frag_base *b)
{
    uint32_t *rank = b->fit2; /* by old class: its new number */
    uint32_t *old_gm = b->fit;
    uint64_t *old_mask = b->below;

    for (size_t c = 1; c < b->nclass; c++) {
        rank[c] = 1;
        for (size_t d = 1; d < b->nclass; d++)
            rank[c] += b->gm[d] < b->gm[c] || (b->gm[d] == b->gm[c] && d < c);
        old_gm[c] = b->gm[c];
        old_mask[c] = b->mask[c];
    }
    for (size_t c = 1; c < b->nclass; c++) {
        b->gm[rank[c]] = old_gm[c];
        b->mask[rank[c]] = old_mask[c];
    }
    for (size_t k = 0; k < b->w->n; k++)
        b->cls[k] = (uint16_t)rank[b->cls[k]];
}

int egpu__frag_base_init(struct egpu__frag_base *b, const struct egpu_workload *w)
{
    const size_t n = w->n ? w->n : 1, cap = w->n + 1;

    memset(b, 0, sizeof(*b));
    b->w = w;
    b->cls = egpu_calloc(n, sizeof(*b->cls));
    b->cpu = egpu_calloc(n, sizeof(*b->cpu));
    b->need = egpu_calloc(n, sizeof(*b->need));
    b->weight = egpu_calloc(n, sizeof(*b->weight));
    b->gm = egpu_calloc(cap, sizeof(*b->gm));
    b->mask = egpu_calloc(cap, sizeof(*b->mask));
    b->ok = egpu_calloc(cap, sizeof(*b->ok));
    b->fit = egpu_calloc(cap, sizeof(*b->fit));
    b->below = egpu_calloc(cap, sizeof(*b->below));
    b->fit2 = egpu_calloc(cap, sizeof(*b->fit2));
    b->below_d = egpu_calloc(cap, sizeof(*b->below_d));
    if (b->cls == NULL || b->cpu == NULL || b->need == NULL || b->weight == NULL || b->gm == NULL ||
        b->mask == NULL || b->ok == NULL || b->fit == NULL || b->below == NULL || b->fit2 == NULL ||
        b->below_d == NULL || cap > UINT16_MAX) {
        egpu__frag_base_free(b);
        return -ENOMEM;
    }
    b->nclass = 1; /* class 0: asks no GPU */
    for (size_t k = 0; k < w->n; k++) {
        const struct egpu_typical_pod *m = &w->pods[k];
        size_t c = 1;

        b->cpu[k] = m->cpu_milli;
        b->weight[k] = m->weight;
        b->need[k] = 1;
        if (m->ncards == 0 || m->gpu_milli == 0)
            continue; /* cls[k] = 0 */
        while (c < b->nclass && (b->gm[c] != m->gpu_milli || b->mask[c] != m->model_mask))
            c++;
        if (c == b->nclass) {
            b->gm[c] = m->gpu_milli;
            b->mask[c] = m->model_mask;
            b->nclass++;
        }
        b->cls[k] = (uint16_t)c;
        b->need[k] = m->ncards;
    }
    sort_classes(b);
    return 0;
}

void egpu__frag_base_free(struct egpu__frag_base *b)
{
    egpu_free(b->cls);
    egpu_free(b->cpu);
    egpu_free(b->need);
    egpu_free(b->weight);
    egpu_free(b->gm);
    egpu_free(b->mask);
    egpu_free(b->ok);
    egpu_free(b->fit);
    egpu_free(b->below);
    egpu_free(b->fit2);
    egpu_free(b->below_d);
    memset(b, 0, sizeof(*b));
}

void egpu__frag_base_set(struct egpu__frag_base *b, const struct egpu__node_view *v)
{
    uint32_t sorted[EGPU_NODE_GPUS_MAX];
    uint64_t below = 0;
    uint32_t n = 0;

    b->v = *v;
    b->nseen = b->next_seen = 0;
    b->ok[0] = false;
    for (uint32_t i = 0; i < v->ngpus; i++) {
        uint32_t j = i;

        for (; j > 0 && sorted[j - 1] > v->free_milli[i]; j--)
            sorted[j] = sorted[j - 1];
        sorted[j] = v->free_milli[i];
    }
    /* Classes by per-card GPU, smallest first: the cards below it only
     * grow in number (n of them, below their free compute summed). */
    for (size_t c = 1; c < b->nclass; c++) {
        const uint32_t gm = b->gm[c];

        for (; n < v->ngpus && sorted[n] < gm; n++)
            below += sorted[n];
        b->ok[c] =
            b->mask[c] == 0 || (v->model != EGPU_MODEL_NONE && (b->mask[c] & (1ULL << v->model)));
        b->fit[c] = v->ngpus - n;
        b->below[c] = below;
    }
}

static bool same_view(const struct egpu__node_view *a, const struct egpu__node_view *b)
{
    if (a->free_cpu_milli != b->free_cpu_milli || a->ngpus != b->ngpus)
        return false;
    for (uint32_t i = 0; i < a->ngpus; i++) {
        if (a->free_milli[i] != b->free_milli[i])
            return false;
    }
    return true;
}

double egpu__frag_base_eval(struct egpu__frag_base *b, const struct egpu__node_view *o)
{
    uint32_t was[EGPU_NODE_GPUS_MAX], now[EGPU_NODE_GPUS_MAX], nchanged = 0;
    const int64_t cpu = o->free_cpu_milli;
    uint64_t idle = 0;
    double f = 0.0, idle_d;

    for (uint32_t i = 0; i < b->nseen; i++) {
        if (same_view(&b->seen[i].v, o))
            return b->seen[i].f;
    }
    for (uint32_t i = 0; i < o->ngpus; i++) {
        idle += o->free_milli[i];
        if (o->free_milli[i] != b->v.free_milli[i]) {
            was[nchanged] = b->v.free_milli[i];
            now[nchanged++] = o->free_milli[i];
        }
    }
    if (idle == 0)
        return 0.0;
    /* The classes' figures for o: each changed card leaves the side of the
     * threshold it was on and joins the one it is on now. Below as a
     * double: the value frag_pod's integer converts to (exact: < 2^53). */
    b->fit2[0] = 0;
    for (size_t c = 1; c < b->nclass; c++) {
        const uint32_t gm = b->gm[c];
        uint64_t bl = b->below[c];
        uint32_t ft = b->fit[c];

        for (uint32_t j = 0; j < nchanged; j++) {
            ft += (uint32_t)(now[j] >= gm) - (uint32_t)(was[j] >= gm); /* mod 2^32 */
            bl += (uint64_t)(now[j] < gm ? now[j] : 0) - (uint64_t)(was[j] < gm ? was[j] : 0);
        }
        b->fit2[c] = b->ok[c] ? ft : 0;
        b->below_d[c] = (double)(int64_t)bl;
    }
    idle_d = (double)(int64_t)idle;
    {
        const size_t n = b->w->n;
        const uint16_t *cls = b->cls;
        const int64_t *need_cpu = b->cpu;
        const uint32_t *need = b->need, *fit = b->fit2;
        const double *weight = b->weight, *below = b->below_d;

        for (size_t k = 0; k < n; k++) {
            const uint16_t c = cls[k];
            const double val = ((cpu >= need_cpu[k]) & (fit[c] >= need[k])) ? below[c] : idle_d;

            f += weight[k] * val;
        }
    }
    b->seen[b->next_seen].v = *o;
    b->seen[b->next_seen].f = f;
    b->next_seen = (b->next_seen + 1) % EGPU__FRAG_SEEN;
    if (b->nseen < EGPU__FRAG_SEEN)
        b->nseen++;
    return f;
}

uint64_t egpu_frag_node_pod(const struct egpu_node *n, const struct egpu_typical_pod *m)
{
    struct egpu__node_view v;
    uint64_t idle = 0;

    egpu__view_of(n, &v);
    for (uint32_t i = 0; i < v.ngpus; i++)
        idle += v.free_milli[i];
    return frag_pod(&v, idle, m);
}

double egpu_frag_node(const struct egpu_node *n, const struct egpu_workload *w)
{
    struct egpu__node_view v;

    egpu__view_of(n, &v);
    return egpu__frag_view(&v, w);
}

double egpu_frag_cluster(const struct egpu_cluster *c, const struct egpu_workload *w)
{
    double f = 0.0;

    for (size_t i = 0; i < c->nnodes; i++)
        f += egpu_frag_node(c->nodes[i], w);
    return f;
}
