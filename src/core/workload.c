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
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "egpu/core.h"
#include "tally_int.h"

struct egpu__workload_group {
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
    const struct egpu__workload_group *a = pa, *b = pb;

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

void egpu_workload_tally_init(struct egpu_workload_tally *t)
{
    memset(t, 0, sizeof(*t));
}

/* Of a group's key, the typical pod (tally_int.h). */
static uint32_t shape_hash(const void *key)
{
    const struct egpu_typical_pod *t = key;
    uint64_t h = (uint64_t)t->cpu_milli * 0x9e3779b97f4a7c15ULL;

    h ^= ((uint64_t)t->gpu_milli << 32 | t->ncards) * 0xc2b2ae3d27d4eb4fULL;
    h ^= t->model_mask * 0x165667b19e3779f9ULL;
    return (uint32_t)(h >> 32 ^ h);
}

static bool same_key(const void *a, const void *b)
{
    return same_shape(a, b);
}

int egpu_workload_tally_add(struct egpu_workload_tally *t, const struct egpu_pod_request *r)
{
    struct egpu_typical_pod pod;
    size_t g;
    int rc;

    typical_of(r, &pod);
    g = egpu__tally_find(t->index, t->nindex, t->groups, sizeof(*t->groups), &pod, shape_hash,
                         same_key);
    if (g != SIZE_MAX) {
        t->groups[g].count++;
        t->npods++;
        return 0;
    }
    if (t->ngroups == t->cap &&
        (rc = egpu__tally_grow((void **)&t->groups, sizeof(*t->groups), &t->cap, &t->index,
                               &t->nindex, t->ngroups, shape_hash)) != 0)
        return rc;
    t->groups[t->ngroups] =
        (struct egpu__workload_group){.pod = pod, .count = 1, .first_seen = t->npods};
    egpu__tally_put(t->index, t->nindex, t->groups, sizeof(*t->groups), t->ngroups++, shape_hash);
    t->npods++;
    return 0;
}

int egpu_workload_tally_finish(struct egpu_workload_tally *t, double coverage,
                               struct egpu_workload *out)
{
    size_t kept = 0, covered = 0;
    struct egpu_typical_pod *pods;

    if (t->npods == 0 || !(coverage > 0.0 && coverage <= 1.0))
        return -EINVAL;
    /* The groups' order is the workload's; the index is no longer needed. */
    egpu_free(t->index);
    t->index = NULL;
    t->nindex = 0;
    qsort(t->groups, t->ngroups, sizeof(*t->groups), cmp_group);
    while (kept < t->ngroups && (double)covered < coverage * (double)t->npods)
        covered += t->groups[kept++].count;
    pods = egpu_calloc(kept, sizeof(*pods));
    if (pods == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < kept; i++) {
        pods[i] = t->groups[i].pod;
        pods[i].weight = (double)t->groups[i].count / (double)covered;
    }
    out->n = kept;
    out->pods = pods;
    return 0;
}

void egpu_workload_tally_free(struct egpu_workload_tally *t)
{
    if (t == NULL)
        return;
    egpu_free(t->groups);
    egpu_free(t->index);
    egpu_workload_tally_init(t);
}

int egpu_workload_from_requests(const struct egpu_pod_request *reqs, size_t n, double coverage,
                                struct egpu_workload *out)
{
    struct egpu_workload_tally t;
    int rc = 0;

    if (n == 0 || !(coverage > 0.0 && coverage <= 1.0))
        return -EINVAL;
    egpu_workload_tally_init(&t);
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = egpu_workload_tally_add(&t, &reqs[i]);
    if (rc == 0)
        rc = egpu_workload_tally_finish(&t, coverage, out);
    egpu_workload_tally_free(&t);
    return rc;
}

double egpu_workload_distance(const struct egpu_workload *a, const struct egpu_workload *b)
{
    double d = 0.0;

    /* Half the L1 distance: what a shape weighs in a and not in b (or more
     * in a) counted once from each side. */
    for (size_t i = 0; i < a->n; i++) {
        double wb = 0.0;

        for (size_t j = 0; j < b->n; j++) {
            if (same_shape(&a->pods[i], &b->pods[j])) {
                wb = b->pods[j].weight;
                break;
            }
        }
        d += fabs(a->pods[i].weight - wb);
    }
    for (size_t j = 0; j < b->n; j++) {
        bool in_a = false;

        for (size_t i = 0; i < a->n && !in_a; i++)
            in_a = same_shape(&a->pods[i], &b->pods[j]);
        if (!in_a)
            d += b->pods[j].weight;
    }
    return d / 2.0;
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
