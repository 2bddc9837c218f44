/* scheduler/assigned.c - a pod's elasticgpu.io/assigned as the cache keeps
 * it: struct egpu_assigned's fields in one allocation of the size they take.
 *
 * DESIGN: the cache holds one per placed pod (most of the pods of a large
 * cluster), and struct egpu_assigned reserves 16 containers and 64 cards of
 * the longest names (5,640 bytes) where a pod has one container and one card
 * (about 100 bytes). The record refers to its strings by byte offsets, not
 * pointers, so a copy is the same bytes and two records compare with memcmp.
 */
#include <string.h>

#include "egpu/scheduler.h"

/* Bytes of a record of a: the header and containers, the card offsets, the
 * names with their NULs. */
static size_t record_size(const struct egpu_assigned *a, size_t *uuids_at)
{
    size_t n = sizeof(struct egpu_sched_assigned) +
               a->ncontainers * sizeof(struct egpu_sched_assigned_container);

    *uuids_at = n;
    n += a->ncards * sizeof(uint16_t) + strlen(a->node) + 1;
    for (uint32_t i = 0; i < a->ncontainers; i++)
        n += strlen(a->containers[i].name) + 1;
    for (uint32_t k = 0; k < a->ncards; k++)
        n += strlen(a->uuids[k]) + 1;
    return n;
}

/* Copy s to r's byte offset *at; returns that offset, *at moved past its NUL. */
static uint16_t put(struct egpu_sched_assigned *r, size_t *at, const char *s)
{
    size_t len = strlen(s) + 1, here = *at;

    memcpy((char *)r + here, s, len);
    *at += len;
    return (uint16_t)here;
}

struct egpu_sched_assigned *egpu_sched_assigned_new(const struct egpu_assigned *a)
{
    size_t uuids_at, at, size = record_size(a, &uuids_at);
    struct egpu_sched_assigned *r;
    uint16_t *uuids;

    /* At most 254 + 16 * 64 + 64 * 64 bytes of names: the offsets fit. */
    r = size <= UINT16_MAX ? egpu_calloc(1, size) : NULL;
    if (r == NULL)
        return NULL;
    r->size = (uint16_t)size;
    r->ncontainers = (uint16_t)a->ncontainers;
    r->ncards = (uint16_t)a->ncards;
    r->uuids = (uint16_t)uuids_at;
    at = uuids_at + a->ncards * sizeof(uint16_t);
    r->node = put(r, &at, a->node);
    for (uint32_t i = 0; i < a->ncontainers; i++) {
        const struct egpu_assigned_container *ac = &a->containers[i];

        r->containers[i] = (struct egpu_sched_assigned_container){
            .name = put(r, &at, ac->name),
            .core_pct = (uint16_t)ac->core_pct,
            .mem_mib = ac->mem_mib,
            .ncards = (uint16_t)ac->ncards,
            .first_card = (uint16_t)ac->first_card,
        };
    }
    uuids = (uint16_t *)((char *)r + uuids_at);
    for (uint32_t k = 0; k < a->ncards; k++)
        uuids[k] = put(r, &at, a->uuids[k]);
    return r;
}

struct egpu_sched_assigned *egpu_sched_assigned_dup(const struct egpu_sched_assigned *a)
{
    struct egpu_sched_assigned *r = egpu_malloc(a->size);

    if (r != NULL)
        memcpy(r, a, a->size);
    return r;
}

bool egpu_sched_assigned_same(const struct egpu_sched_assigned *a,
                              const struct egpu_sched_assigned *b)
{
    if (a == NULL || b == NULL)
        return a == b;
    return a->size == b->size && memcmp(a, b, a->size) == 0;
}

const char *egpu_sched_assigned_node(const struct egpu_sched_assigned *a)
{
    return (const char *)a + a->node;
}

const char *egpu_sched_assigned_name(const struct egpu_sched_assigned *a, uint32_t i)
{
    return (const char *)a + a->containers[i].name;
}

const char *egpu_sched_assigned_uuid(const struct egpu_sched_assigned *a, uint32_t k)
{
    uint16_t at;

    memcpy(&at, (const char *)a + a->uuids + k * sizeof(at), sizeof(at));
    return (const char *)a + at;
}
