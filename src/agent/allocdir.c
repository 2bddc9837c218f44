/* agent/allocdir.c - the allocation dirs: their names, their layout, and
 * the cleanup of those no container holds.
 *
 * An allocation dir is named by a hash of the sorted device IDs
 * (<alloc_root>/<16 hex digits of FNV-1a>), so Allocate and
 * PreStartContainer, which both see only IDs, find the same dir. Its layout
 * is in plugin_int.h: the agent's own (0755, mounted read-only), with a
 * shared/ subdir (01777) for a container sharing a card. A dir found
 * otherwise (left by an older agent) is taken back. All writes go through
 * directory fds (allocfs.c: O_NOFOLLOW, O_EXCL under a random name,
 * renameat).
 *
 * egpu__plugin_cleanup removes the dirs whose IDs no container holds any
 * more (PodResources List), never one in use or touched within the grace,
 * and nothing when List fails.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "allocfs_int.h"
#include "egpu/log.h"
#include "egpu/api.h"
#include "plugin_impl_int.h"
#include "prestart_int.h"

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int egpu__plugin_alloc_dir(const char *alloc_root, char *const *ids, size_t n, char *out,
                           size_t len)
{
    char **sorted = egpu_calloc(n ? n : 1, sizeof(char *));
    uint64_t h = UINT64_C(14695981039346656037); /* FNV-1a 64 */
    int w;

    if (sorted == NULL)
        return -ENOMEM;
    memcpy(sorted, ids, n * sizeof(char *));
    qsort(sorted, n, sizeof(char *), cmp_str);
    for (size_t i = 0; i < n; i++) {
        for (const char *c = sorted[i]; *c; c++) {
            h ^= (unsigned char)*c;
            h *= UINT64_C(1099511628211);
        }
        h ^= '\n';
        h *= UINT64_C(1099511628211);
    }
    egpu_free(sorted);
    w = snprintf(out, len, "%s/%016" PRIx64, alloc_root, h);
    return w < 0 || (size_t)w >= len ? -ENAMETOOLONG : 0;
}

/* Whether name is an allocation dir's: 16 lowercase hex digits. */
bool egpu__plugin_is_alloc_name(const char *name)
{
    size_t i;

    for (i = 0; name[i] != '\0'; i++)
        if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f')))
            return false;
    return i == EGPU_PLUGIN_DIR_NAME_LEN;
}

int egpu__plugin_mkdir_p(const char *path)
{
    char buf[PATH_MAX];
    size_t len = strlen(path);

    if (len == 0 || len >= sizeof(buf))
        return -ENAMETOOLONG;
    memcpy(buf, path, len + 1);
    for (char *c = buf + 1; *c; c++) {
        if (*c != '/')
            continue;
        *c = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return -errno;
        *c = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
        return -errno;
    return 0;
}

/* Bring the open allocation dir fd to the agent's owner and mode 0755. */
static int take_dir(int fd, const char *dir)
{
    struct stat st;

    if (fstat(fd, &st) != 0)
        return -errno;
    if (egpu__fs_is_private(&st) && (st.st_mode & 07777) == 0755)
        return 0;
    if (st.st_uid != geteuid() && fchown(fd, geteuid(), getegid()) != 0)
        return -errno;
    if (fchmod(fd, 0755) != 0)
        return -errno;
    egpu_log(EGPU_LOG_INFO, "allocation dir taken back dir=%s uid=%u mode=%04o", dir,
             (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
    return 0;
}

/* Make <fd>/shared a real directory of mode 01777 owned by the agent. */
static int make_shared(int fd)
{
    struct stat st;
    int sfd = -1, rc = 0;

    for (int tries = 0; tries < 2 && sfd < 0; tries++) {
        if (mkdirat(fd, EGPU_PLUGIN_SHARED_DIR, 01777) != 0 && errno != EEXIST)
            return -errno;
        rc = egpu__fs_open_dir(fd, EGPU_PLUGIN_SHARED_DIR, &sfd);
        if (rc == -ELOOP || rc == -ENOTDIR) {
            /* Not ours (an older agent's writable dir): away with it. */
            rc = egpu__fs_remove_tree(fd, EGPU_PLUGIN_SHARED_DIR, EGPU_PLUGIN_RM_BUDGET_MS);
            if (rc)
                return rc;
            rc = -ENOTDIR;
        } else if (rc)
            return rc;
    }
    if (sfd < 0)
        return rc;
    if (fstat(sfd, &st) != 0)
        rc = -errno;
    else if (st.st_uid != geteuid() && fchown(sfd, geteuid(), getegid()) != 0)
        rc = -errno;
    else if ((st.st_mode & 07777) != 01777 && fchmod(sfd, 01777) != 0)
        rc = -errno; /* mkdirat's mode went through the umask */
    close(sfd);
    return rc;
}

int egpu__plugin_open_alloc_dir(const char *alloc_root, const char *dir, bool create, bool shared,
                                bool *created, int *fd, struct egpu_error *err)
{
    size_t rl = strlen(alloc_root);
    const char *name = dir + rl + 1;
    bool made = false;
    int root = -1, dfd = -1, rc = 0;

    if (strncmp(dir, alloc_root, rl) != 0 || dir[rl] != '/' || strchr(name, '/') != NULL)
        rc = -EINVAL;
    if (rc == 0 && create)
        rc = egpu__plugin_mkdir_p(alloc_root);
    if (rc == 0) {
        root = open(alloc_root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (root < 0)
            rc = -errno;
    }
    if (rc == 0 && create) {
        if (mkdirat(root, name, 0755) == 0)
            made = true;
        else if (errno != EEXIST)
            rc = -errno;
    }
    if (rc == 0)
        rc = egpu__fs_open_dir(root, name, &dfd);
    if (rc == 0)
        rc = take_dir(dfd, dir);
    if (rc == 0 && shared)
        rc = make_shared(dfd);
    if (rc) {
        if (dfd >= 0)
            close(dfd);
        if (made && egpu__fs_remove_tree(root, name, EGPU_PLUGIN_RM_BUDGET_MS) != 0)
            egpu_log(EGPU_LOG_WARN, "allocation dir not removed after a failure dir=%s", dir);
        if (root >= 0)
            close(root);
        if (rc == -ENOENT && !create)
            return egpu_error_set(err, rc, "allocation dir %s does not exist", dir);
        return egpu_error_set(
            err, rc, "allocation dir %s (--alloc-root %s) cannot be created: %s%s", dir, alloc_root,
            egpu_strerror(rc), rc == -ELOOP ? " (a symbolic link)" : "");
    }
    close(root);
    if (created != NULL)
        *created = made;
    *fd = dfd;
    return 0;
}

int egpu__plugin_remove_alloc_dir(const char *alloc_root, const char *dir)
{
    size_t rl = strlen(alloc_root);
    int root, rc;

    if (strncmp(dir, alloc_root, rl) != 0 || dir[rl] != '/')
        return -EINVAL;
    root = open(alloc_root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (root < 0)
        return -errno;
    rc = egpu__fs_remove_tree(root, dir + rl + 1, EGPU_PLUGIN_RM_BUDGET_MS);
    close(root);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Cleanup of allocation dirs                                               */

#define DIR_NAME_LEN EGPU_PLUGIN_DIR_NAME_LEN

/* The dir names (DIR_NAME_LEN + 1 bytes each) of every container's gpu-core
 * IDs in r, into *out (egpu_free) and *n. Returns 0 or -ENOMEM. */
static int held_dirs(const struct egpu_plugin *p, const V1__ListPodResourcesResponse *r,
                     char (**out)[DIR_NAME_LEN + 1], size_t *n)
{
    char(*names)[DIR_NAME_LEN + 1] = NULL;
    size_t count = 0, root = strlen(p->alloc_root) + 1;

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
            rc = egpu__plugin_alloc_dir(p->alloc_root, ids, nids, path, sizeof(path));
            egpu_free(ids);
            if (rc == 0 && strlen(path) == root + DIR_NAME_LEN)
                memcpy(names[count++], path + root, DIR_NAME_LEN + 1);
        }
    }
    *out = names;
    *n = count;
    return 0;
}

int egpu__plugin_cleanup(struct egpu_plugin *p, long grace_s, unsigned *removed,
                         struct egpu_error *err)
{
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
    rc = egpu__podres_list(p->pod_resources, &r, err);
    if (rc) {
        if (!p->cleanup_failed)
            egpu_log(EGPU_LOG_WARN,
                     "allocation dirs not cleaned up: PodResources List failed error=\"%s\"",
                     err != NULL ? err->msg : egpu_strerror(rc));
        p->cleanup_failed = true;
        return rc;
    }
    p->cleanup_failed = false;
    rc = held_dirs(p, r, &held, &nheld);
    v1__list_pod_resources_response__free_unpacked(r, &egpu__pb_allocator);
    if (rc)
        return egpu_error_set(err, rc, "cleanup: out of memory");
    d = opendir(p->alloc_root);
    if (d == NULL) {
        rc = errno == ENOENT ? 0 : -errno;
        egpu_free(held);
        if (rc)
            egpu_error_set(err, rc, "--alloc-root %s: %s", p->alloc_root, strerror(-rc));
        return rc;
    }
    while ((e = readdir(d)) != NULL) {
        struct stat st;
        bool keep = !egpu__plugin_is_alloc_name(e->d_name);

        for (size_t i = 0; i < nheld && !keep; i++)
            keep = strcmp(held[i], e->d_name) == 0;
        if (keep)
            continue;
        /* Allocate touches its dir under alloc_lock; a dir younger than the
         * grace may belong to a container the kubelet is still admitting. */
        pthread_mutex_lock(&p->alloc_lock);
        clock_gettime(CLOCK_REALTIME, &now);
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode) &&
            (long)(now.tv_sec - st.st_mtim.tv_sec) >= grace_s) {
            int rrc = egpu__fs_remove_tree(dirfd(d), e->d_name, EGPU_PLUGIN_RM_BUDGET_MS);

            if (rrc == 0) {
                egpu__plugin_record_drop(p, e->d_name);
                gone++;
                egpu_log(EGPU_LOG_INFO, "allocation dir removed dir=%s/%s (no container holds it)",
                         p->alloc_root, e->d_name);
            } else
                egpu_log(EGPU_LOG_WARN, "allocation dir not removed dir=%s/%s error=\"%s\"",
                         p->alloc_root, e->d_name, egpu_strerror(rrc));
        }
        pthread_mutex_unlock(&p->alloc_lock);
    }
    closedir(d);
    egpu_free(held);
    if (removed != NULL)
        *removed = gone;
    return 0;
}