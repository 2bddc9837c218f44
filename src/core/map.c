/* core/map.c - string-keyed hash map (see egpu/core.h for the design).
 *
 * The table has a power-of-two size and is kept at most 3/4 full. Each slot
 * caches the key's hash, so probes compare strings only on a hash match.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "egpu/core.h"

struct slot {
    const char *key; /* NULL = empty */
    void *value;
    uint64_t hash;
};

struct egpu_map {
    struct slot *slots;
    size_t mask; /* size - 1 */
    size_t count;
};

#define MAP_MIN_SIZE 16

struct egpu_map *egpu_map_new(void)
{
    struct egpu_map *m = egpu_calloc(1, sizeof(*m));

    if (m == NULL)
        return NULL;
    m->slots = egpu_calloc(MAP_MIN_SIZE, sizeof(*m->slots));
    if (m->slots == NULL) {
        egpu_free(m);
        return NULL;
    }
    m->mask = MAP_MIN_SIZE - 1;
    return m;
}

void egpu_map_free(struct egpu_map *m)
{
    if (m == NULL)
        return;
    egpu_free(m->slots);
    egpu_free(m);
}

/* The table's hash of a key: eight bytes at a time (the bytes past the NUL
 * of the last word count as zero), then a full 64-bit mix. Several times
 * faster than a byte-at-a-time hash on node names and GPU UUIDs, which the
 * extender looks up by the thousand per request. Not egpu_hash_str, whose
 * values are part of the replay's results (its tie-break order). */
uint64_t egpu_map_hash(const char *key)
{
    size_t len = strlen(key);
    uint64_t h = (uint64_t)len * 0x9E3779B97F4A7C15ULL, w;

    for (; len >= 8; len -= 8, key += 8) {
        memcpy(&w, key, 8);
        h = (h ^ w) * 0xBF58476D1CE4E5B9ULL;
        h ^= h >> 31;
    }
    w = 0;
    memcpy(&w, key, len);
    h = (h ^ w) * 0x94D049BB133111EBULL;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ULL;
    return h ^ (h >> 32);
}

static size_t find(const struct egpu_map *m, const char *key, uint64_t h)
{
    size_t i = h & m->mask;

    while (m->slots[i].key != NULL) {
        if (m->slots[i].hash == h && strcmp(m->slots[i].key, key) == 0)
            return i;
        i = (i + 1) & m->mask;
    }
    return i; /* the empty slot where key would go */
}

void *egpu_map_get(const struct egpu_map *m, const char *key)
{
    size_t i = find(m, key, egpu_map_hash(key));

    return m->slots[i].key != NULL ? m->slots[i].value : NULL;
}

/* Pipeline, per key: hash it and prefetch its slot; KEY_AHEAD keys later,
 * read that slot and prefetch the stored key it points to; KEY_AHEAD keys
 * later again, probe (both are in cache by then). */
#define KEY_AHEAD 8
#define RING      32 /* hashes kept: power of two, > 2 * KEY_AHEAD */

void egpu_map_get_many(const struct egpu_map *m, const char *const *keys, size_t n, void **values)
{
    uint64_t hash[RING];

    for (size_t i = 0; i < n + 2 * KEY_AHEAD; i++) {
        if (i < n) {
            hash[i % RING] = egpu_map_hash(keys[i]);
            __builtin_prefetch(&m->slots[hash[i % RING] & m->mask]);
        }
        if (i >= KEY_AHEAD && i - KEY_AHEAD < n) {
            const struct slot *sl = &m->slots[hash[(i - KEY_AHEAD) % RING] & m->mask];

            if (sl->key != NULL)
                __builtin_prefetch(sl->key);
        }
        if (i >= 2 * KEY_AHEAD) {
            size_t k = i - 2 * KEY_AHEAD;
            size_t at = find(m, keys[k], hash[k % RING]);

            values[k] = m->slots[at].key != NULL ? m->slots[at].value : NULL;
        }
    }
}

static int grow(struct egpu_map *m)
{
    size_t size = (m->mask + 1) * 2;
    struct slot *old = m->slots;
    size_t old_size = m->mask + 1;
    struct slot *slots = egpu_calloc(size, sizeof(*slots));

    if (slots == NULL)
        return -ENOMEM;
    m->slots = slots;
    m->mask = size - 1;
    for (size_t j = 0; j < old_size; j++) {
        size_t i;

        if (old[j].key == NULL)
            continue;
        i = old[j].hash & m->mask;
        while (m->slots[i].key != NULL)
            i = (i + 1) & m->mask;
        m->slots[i] = old[j];
    }
    egpu_free(old);
    return 0;
}

int egpu_map_put(struct egpu_map *m, const char *key, void *value)
{
    uint64_t h = egpu_map_hash(key);
    size_t i;

    if ((m->count + 1) * 4 > (m->mask + 1) * 3) {
        int rc = grow(m);

        if (rc)
            return rc;
    }
    i = find(m, key, h);
    if (m->slots[i].key != NULL)
        return -EEXIST;
    m->slots[i].key = key;
    m->slots[i].value = value;
    m->slots[i].hash = h;
    m->count++;
    return 0;
}

int egpu_map_del(struct egpu_map *m, const char *key)
{
    size_t i = find(m, key, egpu_map_hash(key));
    size_t j = i;

    if (m->slots[i].key == NULL)
        return -ENOENT;
    /* Backward-shift: move later members of the probe run into the hole
     * whenever their home slot does not lie cyclically in (hole, j]. */
    for (;;) {
        size_t home;

        m->slots[i].key = NULL;
        for (;;) {
            j = (j + 1) & m->mask;
            if (m->slots[j].key == NULL) {
                m->count--;
                return 0;
            }
            home = m->slots[j].hash & m->mask;
            if (i <= j ? (home <= i || home > j) : (home <= i && home > j))
                break;
        }
        m->slots[i] = m->slots[j];
        i = j;
    }
}

size_t egpu_map_count(const struct egpu_map *m)
{
    return m->count;
}

void *egpu_map_next(const struct egpu_map *m, size_t *pos, const char **key)
{
    for (; *pos <= m->mask; (*pos)++) {
        if (m->slots[*pos].key != NULL) {
            const struct slot *s = &m->slots[(*pos)++];

            if (key != NULL)
                *key = s->key;
            return s->value;
        }
    }
    return NULL;
}
