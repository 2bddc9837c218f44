/* core/tally_int.h - rows counted by key: a growing array and an
 * open-addressing index over it, for the workload's typical pods
 * (workload.c) and the request shapes (shapes.c).
 *
 * Rows are size bytes each and begin with their key; hash reads the key
 * alone, same compares two keys. The index has nindex slots (a power of
 * two, twice the rows' capacity): slot = row + 1, 0 = empty.
 */
#ifndef EGPU_CORE_TALLY_INT_H
#define EGPU_CORE_TALLY_INT_H

#include <stddef.h>
#include <stdint.h>

typedef uint32_t (*egpu__tally_hash)(const void *key);
typedef bool (*egpu__tally_same)(const void *a, const void *b);

/* The row of rows (nrows of size bytes) whose key is the same as key, or
 * SIZE_MAX; none when nindex is 0. */
size_t egpu__tally_find(const uint32_t *index, size_t nindex, const void *rows, size_t size,
                        const void *key, egpu__tally_hash hash, egpu__tally_same same);

/* Index rows[0..nrows) again from an emptied index (after the rows moved). */
void egpu__tally_reindex(uint32_t *index, size_t nindex, const void *rows, size_t size,
                         size_t nrows, egpu__tally_hash hash);

/* Index row r of rows (its slot must be free: r was just appended). */
void egpu__tally_put(uint32_t *index, size_t nindex, const void *rows, size_t size, size_t r,
                     egpu__tally_hash hash);

/* Double *cap (64 the first time) in *rows (nrows kept) and make *index of
 * 2 x the new cap slots with every row indexed. Returns 0 or -ENOMEM (rows
 * may have moved, still valid; the index as it was). */
int egpu__tally_grow(void **rows, size_t size, size_t *cap, uint32_t **index, size_t *nindex,
                     size_t nrows, egpu__tally_hash hash);

#endif /* EGPU_CORE_TALLY_INT_H */
