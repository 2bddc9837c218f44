/* core/workload.c - the target workload M of fragmentation gradient descent.
 *
 * FGD (Weng et al., USENIX ATC'23, section 4.1) measures fragmentation against
 * the "typical pods" the cluster expects: the trace's pods grouped by
 * (cpu_milli, per-card GPU milli, cards, allowed models), most frequent first,
 * cut where they cover 95% of pods (the group that crosses the line is kept),
 * with probabilities renormalised over the kept groups. Pods that ask no GPU
 * are part of it: for them every idle GPU is a fragment.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "egpu/core.h"

struct group {
    struct egpu_typical_pod pod;
    size_t count;
    size_t first_seen;
};

static void typical_of(const struct egpu_pod_request *r, struct egpu_typical_pod *t)
{
    const struct egpu_container_request *big = NULL;

    memset(t, 0, sizeof(*t));
    t->cpu_milli = r->cpu_milli;
    t->model_mask = r->model_mask;
    for (uint32_t i = 0; i < r->ncontainers; i++) {
        const struct egpu_container_request *c = &r->containers[i];

        if (big == NULL ||
            (uint64_t)c->core_milli * c->ncards > (uint64_t)big->core_milli * big->ncards)
            big = c;
    }
    if (big != NULL) {
        t->gpu_milli = big->core_milli;
        t->ncards = big->ncards;
    }
}

static bool same_shape(const struct egpu_typical_pod *a, const struct egpu_typical_pod *b)
{
    return a->cpu_milli == b->cpu_milli && a->gpu_milli == b->gpu_milli && a->ncards == b->ncards &&
           a->model_mask == b->model_mask;
}

/* Most frequent first; ties: larger CPU, then larger GPU, then more cards,
 * then first seen, so the order never depends on qsort's stability. */
static int cmp_group(const void *pa, const void *pb)
{
    const struct group *a = pa, *b = pb;

    if (a->count != b->count)
        return a->count > b->count ? -1 : 1;
    if (a->pod.cpu_milli != b->pod.cpu_milli)
        return a->pod.cpu_milli > b->pod.cpu_milli ? -1 : 1;
    if (a->pod.gpu_milli != b->pod.gpu_milli)
        return a->pod.gpu_milli > b->pod.gpu_milli ? -1 : 1;
    if (a->pod.ncards != b->pod.ncards)
        return a->pod.ncards > b->pod.ncards ? -1 : 1;
    return (a->first_seen > b->first_seen) - (a->first_seen < b->first_seen);
}

int egpu_workload_from_requests(const struct egpu_pod_request *reqs, size_t n, double coverage,
                                struct egpu_workload *out)
{
    struct group *groups;
    size_t ngroups = 0, kept = 0, covered = 0;
    struct egpu_typical_pod *pods;

    if (n == 0 || !(coverage > 0.0 && coverage <= 1.0))
        return -EINVAL;
    groups = egpu_calloc(n, sizeof(*groups));
    if (groups == NULL)
        return -ENOMEM;
    /* Groups are few (91 in the openb default trace): a linear scan is fine. */
    for (size_t i = 0; i < n; i++) {
        struct egpu_typical_pod t;
        size_t g;

        typical_of(&reqs[i], &t);
        for (g = 0; g < ngroups && !same_shape(&groups[g].pod, &t); g++)
            ;
        if (g == ngroups) {
            groups[g].pod = t;
            groups[g].first_seen = i;
            ngroups++;
        }
        groups[g].count++;
    }
    qsort(groups, ngroups, sizeof(*groups), cmp_group);
    while (kept < ngroups && (double)covered < coverage * (double)n)
        covered += groups[kept++].count;
    pods = egpu_calloc(kept, sizeof(*pods));
    if (pods == NULL) {
        egpu_free(groups);
        return -ENOMEM;
    }
    for (size_t i = 0; i < kept; i++) {
        pods[i] = groups[i].pod;
        pods[i].weight = (double)groups[i].count / (double)covered;
    }
    egpu_free(groups);
    out->n = kept;
    out->pods = pods;
    return 0;
}

int egpu_workload_from_list(const struct egpu_typical_pod *list, size_t n,
                            struct egpu_workload *out)
{
    struct egpu_typical_pod *pods;
    double sum = 0.0;

    if (n == 0)
        return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        if (!(list[i].weight >= 0.0) || (list[i].ncards == 0 && list[i].gpu_milli > 0) ||
            list[i].gpu_milli > EGPU_GPU_MILLI ||
            (list[i].ncards > 1 && list[i].gpu_milli != EGPU_GPU_MILLI))
            return -EINVAL;
        sum += list[i].weight;
    }
    if (!(sum > 0.0))
        return -EINVAL;
    pods = egpu_calloc(n, sizeof(*pods));
    if (pods == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        pods[i] = list[i];
        pods[i].weight = list[i].weight / sum;
    }
    out->n = n;
    out->pods = pods;
    return 0;
}

void egpu_workload_free(struct egpu_workload *w)
{
    if (w == NULL)
        return;
    egpu_free(w->pods);
    w->pods = NULL;
    w->n = 0;
}
