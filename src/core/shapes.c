/* core/shapes.c - request shapes: the key of the placer's memo, counted.
 *
 * A placer memoises a verdict per node and request shape (placement.c):
 * (CPU, memory, allowed models, and the one GPU container's compute per
 * card, cards and memory) of a pod with at most one GPU container. The
 * scheduler's memo warm (src/scheduler/warm.c) counts the shapes of the
 * pods it holds here and evaluates the most frequent ones ahead of the
 * requests that will ask them.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "egpu/core.h"
#include "tally_int.h"

struct egpu__shape_count {
    struct egpu_pod_request shape;
    size_t count;
    size_t first_seen;
};

bool egpu_request_shape_of(const struct egpu_pod_request *r, struct egpu_pod_request *shape)
{
    if (r->ncontainers > 1)
        return false;
    memset(shape, 0, sizeof(*shape));
    shape->cpu_milli = r->cpu_milli;
    shape->mem_mib = r->mem_mib;
    shape->model_mask = r->model_mask;
    shape->ncontainers = r->ncontainers;
    if (r->ncontainers == 1)
        shape->containers[0] = r->containers[0];
    return true;
}

bool egpu_request_same_shape(const struct egpu_pod_request *a, const struct egpu_pod_request *b)
{
    if (a->cpu_milli != b->cpu_milli || a->mem_mib != b->mem_mib ||
        a->model_mask != b->model_mask || a->ncontainers != b->ncontainers)
        return false;
    return a->ncontainers == 0 ||
           memcmp(&a->containers[0], &b->containers[0], sizeof(a->containers[0])) == 0;
}

/* Of a row's key, the shape (tally_int.h). */
static uint32_t shape_hash(const void *key)
{
    const struct egpu_pod_request *s = key;
    const struct egpu_container_request *k = &s->containers[0];
    uint64_t h = (uint64_t)s->cpu_milli * 0x9e3779b97f4a7c15ULL;

    h ^= (uint64_t)s->mem_mib * 0xff51afd7ed558ccdULL;
    h ^= ((uint64_t)k->core_milli << 32 | (uint64_t)k->ncards << 16 | s->ncontainers) *
         0xc2b2ae3d27d4eb4fULL;
    h ^= ((uint64_t)k->mem_mib ^ s->model_mask) * 0x165667b19e3779f9ULL;
    return (uint32_t)(h >> 32 ^ h);
}

static bool same_key(const void *a, const void *b)
{
    return egpu_request_same_shape(a, b);
}

void egpu_shape_tally_init(struct egpu_shape_tally *t)
{
    memset(t, 0, sizeof(*t));
}

int egpu_shape_tally_add(struct egpu_shape_tally *t, const struct egpu_pod_request *r)
{
    struct egpu_pod_request shape;
    size_t s;
    int rc;

    if (!egpu_request_shape_of(r, &shape))
        return 0;
    s = egpu__tally_find(t->index, t->nindex, t->shapes, sizeof(*t->shapes), &shape, shape_hash,
                         same_key);
    if (s != SIZE_MAX) {
        t->shapes[s].count++;
        t->npods++;
        return 0;
    }
    if (t->nshapes == t->cap &&
        (rc = egpu__tally_grow((void **)&t->shapes, sizeof(*t->shapes), &t->cap, &t->index,
                               &t->nindex, t->nshapes, shape_hash)) != 0)
        return rc;
    t->shapes[t->nshapes] =
        (struct egpu__shape_count){.shape = shape, .count = 1, .first_seen = t->npods};
    egpu__tally_put(t->index, t->nindex, t->shapes, sizeof(*t->shapes), t->nshapes++, shape_hash);
    t->npods++;
    return 0;
}

/* Most frequent first; ties: the shape seen first. */
static int cmp_count(const void *pa, const void *pb)
{
    const struct egpu__shape_count *a = pa, *b = pb;

    if (a->count != b->count)
        return a->count > b->count ? -1 : 1;
    return (a->first_seen > b->first_seen) - (a->first_seen < b->first_seen);
}

size_t egpu_shape_tally_top(struct egpu_shape_tally *t, size_t min_count,
                            struct egpu_pod_request *out, size_t max)
{
    size_t n = 0;

    if (t->nshapes > 1)
        qsort(t->shapes, t->nshapes, sizeof(t->shapes[0]), cmp_count);
    /* The order moved: index the shapes again. */
    egpu__tally_reindex(t->index, t->nindex, t->shapes, sizeof(*t->shapes), t->nshapes, shape_hash);
    for (; n < t->nshapes && n < max && t->shapes[n].count >= min_count; n++)
        out[n] = t->shapes[n].shape;
    return n;
}

void egpu_shape_tally_free(struct egpu_shape_tally *t)
{
    if (t == NULL)
        return;
    egpu_free(t->shapes);
    egpu_free(t->index);
    egpu_shape_tally_init(t);
}
