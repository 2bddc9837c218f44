/* agent/cleanup.c - the cleanup of allocation dirs no container holds any
 * more (cleanup_int.h).
 *
 * The kubelet's PodResources List names every container's gpu-core IDs; the
 * hash of a container's IDs names the dir it holds (allocdir.c). Every other
 * dir below --alloc-root named like an allocation dir goes, with its entry
 * in the record, unless it was touched within the grace (Allocate touches
 * its dir before the kubelet lists the container). Nothing goes when List
 * fails: an unanswered kubelet is not an empty node. Units: seconds.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "allocdir_int.h"
#include "allocfs_int.h"
#include "cleanup_int.h"
#include "egpu/api.h"
#include "egpu/log.h"
#include "pb_int.h"

#define DIR_NAME_LEN EGPU_ALLOCDIR_NAME_LEN

/* The dir names (DIR_NAME_LEN + 1 bytes each) of every container's gpu-core
 * IDs in r, into *out (egpu_free) and *n. Returns 0 or -ENOMEM. */
static int held_dirs(const char *alloc_root, const V1__ListPodResourcesResponse *r,
                     char (**out)[DIR_NAME_LEN + 1], size_t *n)
{
    char(*names)[DIR_NAME_LEN + 1] = NULL;
    size_t count = 0, root = strlen(alloc_root) + 1;

    for (size_t i = 0; i < r->n_pod_resources; i++) {
        const V1__PodResources *pr = r->pod_resources[i];

        for (size_t c = 0; c < pr->n_containers; c++) {
            const V1__ContainerResources *cr = pr->containers[c];
            char **ids;
            size_t nids = 0, total = 0;
            char path[PATH_MAX];
            void *grown;
            int rc;

            for (size_t d = 0; d < cr->n_devices; d++)
                if (cr->devices[d]->resource_name != NULL &&
                    strcmp(cr->devices[d]->resource_name, EGPU_RES_GPU_CORE) == 0)
                    total += cr->devices[d]->n_device_ids;
            if (total == 0)
                continue;
            ids = egpu_calloc(total, sizeof(*ids));
            grown = egpu_realloc(names, (count + 1) * sizeof(*names));
            if (grown != NULL)
                names = grown;
            if (ids == NULL || grown == NULL) {
                egpu_free(ids);
                egpu_free(names);
                return -ENOMEM;
            }
            for (size_t d = 0; d < cr->n_devices; d++)
                if (cr->devices[d]->resource_name != NULL &&
                    strcmp(cr->devices[d]->resource_name, EGPU_RES_GPU_CORE) == 0)
                    for (size_t k = 0; k < cr->devices[d]->n_device_ids; k++)
                        ids[nids++] = cr->devices[d]->device_ids[k];
            rc = egpu__allocdir_path(alloc_root, ids, nids, path, sizeof(path));
            egpu_free(ids);
            if (rc == 0 && strlen(path) == root + DIR_NAME_LEN)
                memcpy(names[count++], path + root, DIR_NAME_LEN + 1);
        }
    }
    *out = names;
    *n = count;
    return 0;
}

int egpu__cleanup_run(const struct egpu__cleanup_config *cfg, long grace_s, bool *failed,
                      unsigned *removed, struct egpu_error *err)
{
    egpu__podres_list_fn list = cfg->podres_list != NULL ? cfg->podres_list : egpu__podres_list;
    V1__ListPodResourcesResponse *r = NULL;
    char(*held)[DIR_NAME_LEN + 1] = NULL;
    size_t nheld = 0;
    unsigned gone = 0;
    const struct dirent *e;
    struct timespec now;
    DIR *d;
    int rc;

    if (removed != NULL)
        *removed = 0;
    rc = list(cfg->pod_resources, &r, err);
    if (rc) {
        if (!*failed)
            egpu_log(EGPU_LOG_WARN,
                     "allocation dirs not cleaned up: PodResources List failed error=\"%s\"",
                     err != NULL ? err->msg : egpu_strerror(rc));
        *failed = true;
        return rc;
    }
    *failed = false;
    rc = held_dirs(cfg->alloc_root, r, &held, &nheld);
    v1__list_pod_resources_response__free_unpacked(r, &egpu__pb_allocator);
    if (rc)
        return egpu_error_set(err, rc, "cleanup: out of memory");
    d = opendir(cfg->alloc_root);
    if (d == NULL) {
        rc = errno == ENOENT ? 0 : -errno;
        egpu_free(held);
        if (rc)
            egpu_error_set(err, rc, "--alloc-root %s: %s", cfg->alloc_root, strerror(-rc));
        return rc;
    }
    while ((e = readdir(d)) != NULL) {
        struct stat st;
        bool keep = !egpu__allocdir_is_name(e->d_name);

        for (size_t i = 0; i < nheld && !keep; i++)
            keep = strcmp(held[i], e->d_name) == 0;
        if (keep)
            continue;
        /* Allocate touches its dir under the alloc lock; a dir younger than the
         * grace may belong to a container the kubelet is still admitting. */
        if (cfg->alloc_lock != NULL)
            pthread_mutex_lock(cfg->alloc_lock);
        clock_gettime(CLOCK_REALTIME, &now);
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode) &&
            (long)(now.tv_sec - st.st_mtim.tv_sec) >= grace_s) {
            int rrc = egpu__fs_remove_tree(dirfd(d), e->d_name, EGPU_ALLOCDIR_RM_BUDGET_MS);

            if (rrc == 0) {
                if (cfg->record != NULL)
                    egpu__record_drop(cfg->record, e->d_name);
                gone++;
                egpu_log(EGPU_LOG_INFO, "allocation dir removed dir=%s/%s (no container holds it)",
                         cfg->alloc_root, e->d_name);
            } else
                egpu_log(EGPU_LOG_WARN, "allocation dir not removed dir=%s/%s error=\"%s\"",
                         cfg->alloc_root, e->d_name, egpu_strerror(rrc));
        }
        if (cfg->alloc_lock != NULL)
            pthread_mutex_unlock(cfg->alloc_lock);
    }
    closedir(d);
    egpu_free(held);
    if (removed != NULL)
        *removed = gone;
    return 0;
}