/* core/frag.c - GPU fragmentation of a node for a target workload (FGD).
 *
 * Definition (shared/data/openb/README.md; Weng et al., ATC'23, section 4):
 * for node n with R milli-GPU idle and a typical pod m, F_n(m) = R when m
 * asks no GPU, m's allowed models exclude n's, or n lacks the CPU or enough
 * cards with m's per-card request free; otherwise F_n(m) is the idle
 * milli-GPU on the cards whose free compute is below m's per-card request.
 * F_n(M) = sum_m weight_m * F_n(m). Memory is not part of the measure.
 */
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
