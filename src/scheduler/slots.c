/* scheduler/slots.c - node name to cluster slot in dense memory (slots_int.h). */
#include <errno.h>
#include <string.h>

#include "slots_int.h"

#define AHEAD 8  /* names hashed (their entry fetched) before the one probed */
#define RING  16 /* hashes kept: a power of two, > AHEAD */

void egpu__slot_index_init(struct egpu__slot_index *ix)
{
    memset(ix, 0, sizeof(*ix));
}

void egpu__slot_index_free(struct egpu__slot_index *ix)
{
    egpu_free(ix->tab);
    egpu_free(ix->pool);
    egpu__slot_index_init(ix);
}

static uint64_t name_hash(const char *name)
{
    return egpu_map_hash(name);
}

/* Make ix for c's nodes. Returns 0 or -ENOMEM (ix empty). */
static int make(struct egpu__slot_index *ix, const struct egpu_cluster *c)
{
    size_t size = 16, bytes = 0, at = 0;

    egpu__slot_index_free(ix);
    while (size < 2 * c->nnodes)
        size *= 2;
    for (size_t s = 0; s < c->nnodes; s++)
        bytes += strlen(c->nodes[s]->name) + 1;
    if (bytes > UINT32_MAX)
        return -ENOMEM;
    ix->tab = egpu_malloc(size * sizeof(*ix->tab));
    ix->pool = egpu_malloc(bytes ? bytes : 1);
    if (ix->tab == NULL || ix->pool == NULL) {
        egpu__slot_index_free(ix);
        return -ENOMEM;
    }
    ix->mask = size - 1;
    for (size_t i = 0; i < size; i++)
        ix->tab[i] = (struct egpu__slot_entry){.slot = EGPU_NO_SLOT};
    for (size_t s = 0; s < c->nnodes; s++) {
        const char *name = c->nodes[s]->name;
        size_t len = strlen(name) + 1;
        uint64_t h = name_hash(name);
        size_t i = h & ix->mask;

        while (ix->tab[i].slot != EGPU_NO_SLOT)
            i = (i + 1) & ix->mask;
        ix->tab[i] = (struct egpu__slot_entry){
            .tag = (uint32_t)(h >> 32), .slot = (uint32_t)s, .name = (uint32_t)at};
        memcpy(ix->pool + at, name, len);
        at += len;
    }
    ix->cluster = c->id;
    ix->members = c->members;
    return 0;
}

static uint32_t probe(const struct egpu__slot_index *ix, const char *name, uint64_t h)
{
    uint32_t tag = (uint32_t)(h >> 32);

    for (size_t i = h & ix->mask; ix->tab[i].slot != EGPU_NO_SLOT; i = (i + 1) & ix->mask) {
        const struct egpu__slot_entry *e = &ix->tab[i];

        if (e->tag == tag && strcmp(ix->pool + e->name, name) == 0)
            return e->slot;
    }
    return EGPU_NO_SLOT;
}

int egpu__slot_index_lookup(struct egpu__slot_index *ix, const struct egpu_cluster *c,
                            const char *const *names, size_t n, uint32_t *slots)
{
    uint64_t hash[RING];

    if ((ix->tab == NULL || ix->cluster != c->id || ix->members != c->members) && make(ix, c) != 0)
        return -ENOMEM;
    /* Hash a name and fetch its entry; AHEAD names later, probe it. */
    for (size_t i = 0; i < n + AHEAD; i++) {
        if (i < n) {
            hash[i % RING] = name_hash(names[i]);
            __builtin_prefetch(&ix->tab[hash[i % RING] & ix->mask]);
        }
        if (i >= AHEAD)
            slots[i - AHEAD] = probe(ix, names[i - AHEAD], hash[(i - AHEAD) % RING]);
    }
    return 0;
}
