/* agent/cleanup_int.h - the cleanup of allocation dirs no container holds
 * any more (cleanup.c), private to src/agent.
 */
#ifndef EGPU_AGENT_CLEANUP_INT_H
#define EGPU_AGENT_CLEANUP_INT_H

#include <pthread.h>
#include <stdbool.h>

#include "egpu/core.h"
#include "podresources_int.h"
#include "record_int.h"

/* What a cleanup needs; all borrowed. */
struct egpu__cleanup_config {
    const char *alloc_root;           /* the allocation dirs are below it */
    const char *pod_resources;        /* PodResources socket path */
    egpu__podres_list_fn podres_list; /* NULL: egpu__podres_list */
    pthread_mutex_t *alloc_lock;      /* held around each removal (Allocate's mkdir); NULL: none */
    struct egpu__record *record;      /* the entry of each removed dir is dropped; NULL: none */
};

/* Remove the allocation dirs below cfg->alloc_root (names of 16 hex digits;
 * nothing else is touched) that no container holds any more: PodResources
 * List gives every container's gpu-core IDs, whose hash names the dir it
 * holds. A dir modified less than grace_s seconds ago is kept (Allocate
 * touches its dir: the kubelet may not list the container yet). Safe
 * against concurrent Allocate calls that hold cfg->alloc_lock. *failed (the
 * caller's, kept between calls) says whether the last List failed: a
 * failure is logged once until a List succeeds again. *removed (may be
 * NULL) gets the count. Returns 0, or what the PodResources List returns
 * (nothing is removed then), -ENOMEM, or -errno for an unreadable
 * alloc_root (a missing one is 0), with err set. */
int egpu__cleanup_run(const struct egpu__cleanup_config *cfg, long grace_s, bool *failed,
                      unsigned *removed, struct egpu_error *err) EGPU_MUST_CHECK;

#endif /* EGPU_AGENT_CLEANUP_INT_H */
