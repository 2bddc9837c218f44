/* core/tally.c - rows counted by key (tally_int.h). */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "egpu/core.h"
#include "tally_int.h"

size_t egpu__tally_find(const uint32_t *index, size_t nindex, const void *rows, size_t size,
                        const void *key, egpu__tally_hash hash, egpu__tally_same same)
{
    size_t mask = nindex - 1;

    if (nindex == 0)
        return SIZE_MAX;
    for (size_t i = hash(key) & mask; index[i] != 0; i = (i + 1) & mask) {
        size_t r = index[i] - 1;

        if (same((const unsigned char *)rows + r * size, key))
            return r;
    }
    return SIZE_MAX;
}

void egpu__tally_put(uint32_t *index, size_t nindex, const void *rows, size_t size, size_t r,
                     egpu__tally_hash hash)
{
    size_t mask = nindex - 1, i = hash((const unsigned char *)rows + r * size) & mask;

    while (index[i] != 0)
        i = (i + 1) & mask;
    index[i] = (uint32_t)r + 1;
}

void egpu__tally_reindex(uint32_t *index, size_t nindex, const void *rows, size_t size,
                         size_t nrows, egpu__tally_hash hash)
{
    if (nindex == 0)
        return; /* nothing counted yet: no index */
    memset(index, 0, nindex * sizeof(*index));
    for (size_t r = 0; r < nrows; r++)
        egpu__tally_put(index, nindex, rows, size, r, hash);
}

int egpu__tally_grow(void **rows, size_t size, size_t *cap, uint32_t **index, size_t *nindex,
                     size_t nrows, egpu__tally_hash hash)
{
    size_t ncap = *cap ? 2 * *cap : 64;
    void *grown = egpu_realloc(*rows, ncap * size);
    uint32_t *idx;

    if (grown == NULL)
        return -ENOMEM;
    *rows = grown;
    if ((idx = egpu_calloc(2 * ncap, sizeof(*idx))) == NULL)
        return -ENOMEM;
    egpu_free(*index);
    *index = idx;
    *nindex = 2 * ncap;
    *cap = ncap;
    egpu__tally_reindex(idx, *nindex, grown, size, nrows, hash);
    return 0;
}
