/* agent/allocdir.c - the allocation dirs: their names, their layout,
 * making and removing one (allocdir_int.h).
 *
 * An allocation dir is named by a hash of the sorted device IDs
 * (<alloc_root>/<16 hex digits of FNV-1a>), so Allocate and
 * PreStartContainer, which both see only IDs, find the same dir. Its layout
 * is in allocdir_int.h: the agent's own (0755, mounted read-only), with a
 * shared/ subdir (01777) for a container sharing a card. A dir found
 * otherwise (left by an older agent) is taken back. All writes go through
 * directory fds (allocfs.c: O_NOFOLLOW, O_EXCL under a random name,
 * renameat). The cleanup of the dirs no container holds is cleanup.c's.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "allocdir_int.h"
#include "allocfs_int.h"
#include "egpu/log.h"

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int egpu__allocdir_path(const char *alloc_root, char *const *ids, size_t n, char *out, size_t len)
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

bool egpu__allocdir_is_name(const char *name)
{
    size_t i;

    for (i = 0; name[i] != '\0'; i++)
        if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f')))
            return false;
    return i == EGPU_ALLOCDIR_NAME_LEN;
}

int egpu__allocdir_mkdir_p(const char *path)
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
        if (mkdirat(fd, EGPU_ALLOCDIR_SHARED_DIR, 01777) != 0 && errno != EEXIST)
            return -errno;
        rc = egpu__fs_open_dir(fd, EGPU_ALLOCDIR_SHARED_DIR, &sfd);
        if (rc == -ELOOP || rc == -ENOTDIR) {
            /* Not ours (an older agent's writable dir): away with it. */
            rc = egpu__fs_remove_tree(fd, EGPU_ALLOCDIR_SHARED_DIR, EGPU_ALLOCDIR_RM_BUDGET_MS);
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

int egpu__allocdir_open(const char *alloc_root, const char *dir, bool create, bool shared,
                        bool *created, int *fd, struct egpu_error *err)
{
    size_t rl = strlen(alloc_root);
    const char *name = dir + rl + 1;
    bool made = false;
    int root = -1, dfd = -1, rc = 0;

    if (strncmp(dir, alloc_root, rl) != 0 || dir[rl] != '/' || strchr(name, '/') != NULL)
        rc = -EINVAL;
    if (rc == 0 && create)
        rc = egpu__allocdir_mkdir_p(alloc_root);
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
        if (made && egpu__fs_remove_tree(root, name, EGPU_ALLOCDIR_RM_BUDGET_MS) != 0)
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

int egpu__allocdir_remove(const char *alloc_root, const char *dir)
{
    size_t rl = strlen(alloc_root);
    int root, rc;

    if (strncmp(dir, alloc_root, rl) != 0 || dir[rl] != '/')
        return -EINVAL;
    root = open(alloc_root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (root < 0)
        return -errno;
    rc = egpu__fs_remove_tree(root, dir + rl + 1, EGPU_ALLOCDIR_RM_BUDGET_MS);
    close(root);
    return rc;
}
