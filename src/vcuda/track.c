/* vcuda/track.c - per-process map of what each live allocation counted.
 *
 * A free must give back exactly what its allocation took, on the card it
 * took it from: the device pointer (or VMM handle, array, context, pool)
 * maps to (card, bytes). A free of something not in the map (made before a
 * limit applied, or by a path that is not counted) passes through unchanged.
 *
 * DESIGN: open addressing with linear probing over a power-of-two table kept
 * at most half full, keyed by (kind, value) so a pointer and a handle with
 * the same value never collide; backward-shift deletion keeps probes short
 * without tombstones. Entries made in a context remember it, so destroying
 * the context (which frees its allocations in the driver) gives them back.
 * Memory from egpu_malloc. Not thread-safe: the caller
 * holds its lock.
 */
#include <errno.h>
#include <string.h>

#include "vcuda_int.h"

#define TRACK_MIN_SIZE 64

static size_t hash(int kind, uint64_t key)
{
    uint64_t h = key ^ ((uint64_t)kind << 56);

    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return (size_t)h;
}

static struct egpu__vcuda_track_entry *find(const struct egpu__vcuda_track *t, int kind,
                                            uint64_t key)
{
    if (t->slots == NULL)
        return NULL;
    for (size_t i = hash(kind, key) & t->mask;; i = (i + 1) & t->mask) {
        struct egpu__vcuda_track_entry *e = &t->slots[i];

        if (e->kind == 0)
            return NULL;
        if (e->kind == kind && e->key == key)
            return e;
    }
}

static void insert(struct egpu__vcuda_track_entry *slots, size_t mask,
                   const struct egpu__vcuda_track_entry *n)
{
    size_t i = hash(n->kind, n->key) & mask;

    while (slots[i].kind != 0)
        i = (i + 1) & mask;
    slots[i] = *n;
}

static int grow(struct egpu__vcuda_track *t)
{
    size_t size = t->slots ? (t->mask + 1) * 2 : TRACK_MIN_SIZE;
    struct egpu__vcuda_track_entry *slots = egpu_calloc(size, sizeof(*slots));

    if (slots == NULL)
        return -ENOMEM;
    if (t->slots) {
        for (size_t i = 0; i <= t->mask; i++) {
            if (t->slots[i].kind != 0)
                insert(slots, size - 1, &t->slots[i]);
        }
        egpu_free(t->slots);
    }
    t->slots = slots;
    t->mask = size - 1;
    return 0;
}

int egpu__vcuda_track_put(struct egpu__vcuda_track *t, int kind, uint64_t key, int card,
                          uint64_t bytes, uint64_t ctx)
{
    struct egpu__vcuda_track_entry n = {
        .key = key, .bytes = bytes, .ctx = ctx, .kind = (uint8_t)kind, .card = (int8_t)card};

    if (find(t, kind, key) != NULL)
        return -EEXIST;
    if (t->slots == NULL || (t->count + 1) * 2 > t->mask + 1) {
        int rc = grow(t);

        if (rc)
            return rc;
    }
    insert(t->slots, t->mask, &n);
    t->count++;
    return 0;
}

bool egpu__vcuda_track_get(const struct egpu__vcuda_track *t, int kind, uint64_t key,
                           struct egpu__vcuda_track_entry *out)
{
    const struct egpu__vcuda_track_entry *e = find(t, kind, key);

    if (e == NULL)
        return false;
    *out = *e;
    return true;
}

bool egpu__vcuda_track_take(struct egpu__vcuda_track *t, int kind, uint64_t key,
                            struct egpu__vcuda_track_entry *out)
{
    struct egpu__vcuda_track_entry *e = find(t, kind, key);
    size_t i, j;

    if (e == NULL)
        return false;
    *out = *e;
    /* Backward-shift deletion: move later members of the probe run into the
     * hole when their home slot does not lie cyclically in (hole, them]. */
    i = (size_t)(e - t->slots);
    j = i;
    for (;;) {
        size_t home;

        j = (j + 1) & t->mask;
        if (t->slots[j].kind == 0)
            break;
        home = hash(t->slots[j].kind, t->slots[j].key) & t->mask;
        if (i <= j ? (i < home && home <= j) : (i < home || home <= j))
            continue;
        t->slots[i] = t->slots[j];
        i = j;
    }
    memset(&t->slots[i], 0, sizeof(t->slots[i]));
    t->count--;
    return true;
}

size_t egpu__vcuda_track_drop_ctx(struct egpu__vcuda_track *t, uint64_t ctx,
                                  uint64_t bytes_by_card[EGPU_VCUDA_MAX_CARDS])
{
    size_t n = 0;

    if (t->slots == NULL || ctx == 0)
        return 0;
    /* A take only ever moves an entry into the hole it leaves at i, so
     * looking at i again before moving on visits every entry once. */
    for (size_t i = 0; i <= t->mask;) {
        struct egpu__vcuda_track_entry *e = &t->slots[i], gone;

        if (e->kind == 0 || e->ctx != ctx) {
            i++;
            continue;
        }
        egpu__vcuda_track_take(t, e->kind, e->key, &gone);
        if (gone.card >= 0 && gone.card < EGPU_VCUDA_MAX_CARDS)
            bytes_by_card[gone.card] += gone.bytes;
        n++;
    }
    return n;
}

void egpu__vcuda_track_clear(struct egpu__vcuda_track *t)
{
    if (t->slots)
        memset(t->slots, 0, (t->mask + 1) * sizeof(*t->slots));
    t->count = 0;
}

void egpu__vcuda_track_free(struct egpu__vcuda_track *t)
{
    egpu_free(t->slots);
    memset(t, 0, sizeof(*t));
}
