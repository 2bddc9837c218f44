/* core/map_int.h - string-keyed hash map used by the cluster model (private).
 *
 * Open addressing with linear probing and backward-shift deletion, so a map
 * that sees millions of inserts and removals (the extender's live cache)
 * never degrades with tombstones. Keys are borrowed: the caller keeps each
 * key alive while it is in the map (the cluster stores the key inside the
 * value it maps to).
 */
#ifndef EGPU_CORE_MAP_INT_H
#define EGPU_CORE_MAP_INT_H

#include <stddef.h>

struct egpu_map;

/* New empty map, or NULL when out of memory. */
struct egpu_map *egpu__map_new(void);
/* Free the map (not the keys or values). NULL is a no-op. */
void egpu__map_free(struct egpu_map *m);
/* Value for key, or NULL. */
void *egpu__map_get(const struct egpu_map *m, const char *key);
/* Insert key -> value (value != NULL). Returns 0, -EEXIST or -ENOMEM. */
int egpu__map_put(struct egpu_map *m, const char *key, void *value);
/* Remove key. Returns 0 or -ENOENT. */
int egpu__map_del(struct egpu_map *m, const char *key);
/* Entries in the map. */
size_t egpu__map_count(const struct egpu_map *m);

#endif /* EGPU_CORE_MAP_INT_H */
