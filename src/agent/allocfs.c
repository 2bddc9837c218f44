/* agent/allocfs.c - file operations on allocation dirs that a container may
 * have tampered with (see allocfs_int.h).
 *
 * The agent runs as root; the processes of a GPU container can write below
 * <alloc dir>/shared and are adversaries. So nothing here resolves a path a
 * container can change: each call starts from a directory fd, opens
 * directories with O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK, creates files only
 * with O_CREAT | O_EXCL | O_NOFOLLOW under a random name, renames with
 * renameat(2), and reads files only after fstat(2) says they are regular
 * and small enough.
 *
 * DESIGN (egpu__fs_remove_tree): a tree a container left may be as deep as
 * it likes (a 10,000-deep chain of directories is a few lines of shell), so
 * neither recursion over the depth nor one open fd per level will do. The
 * walk keeps at most EGPU_FS_RM_DEPTH directories open; a directory found
 * below that depth is moved (renameat2, RENAME_NOREPLACE) to the top of the
 * tree being removed, which is read again until a pass finds nothing more
 * to do. Every directory is moved at most once per EGPU_FS_RM_DEPTH levels,
 * so the work stays linear in the number of entries. Nothing but
 * directories is ever opened: any other entry is unlinked where it is, so a
 * FIFO cannot block and a link cannot lead out of the tree.
 */
#define _GNU_SOURCE /* renameat2, RENAME_NOREPLACE */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "allocfs_int.h"

int egpu__fs_open_dir(int dfd, const char *name, int *fd)
{
    int f = openat(dfd, name, EGPU_FS_DIR_FLAGS);

    if (f < 0)
        return -errno;
    *fd = f;
    return 0;
}

bool egpu__fs_is_private(const struct stat *st)
{
    return st->st_uid == geteuid() && (st->st_mode & (S_IWGRP | S_IWOTH)) == 0;
}

/* 64 random bits for a temporary name. Uniqueness is all O_EXCL needs; the
 * fallback (no getrandom) only has to differ from call to call. */
static uint64_t random64(void)
{
    static atomic_ulong counter;
    uint64_t v;
    struct timespec ts;

    if (getrandom(&v, sizeof(v), GRND_NONBLOCK) == (ssize_t)sizeof(v))
        return v;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 16) ^
           atomic_fetch_add(&counter, 1);
}

int egpu__fs_write_at(int dfd, const char *dir, const char *name, const void *text, size_t len,
                      mode_t mode, struct egpu_error *err)
{
    char tmp[NAME_MAX + 1];
    size_t off = 0;
    int fd = -1, e;

    for (int tries = 0; tries < 8 && fd < 0; tries++) {
        int w = snprintf(tmp, sizeof(tmp), ".%s.%016" PRIx64, name, random64());

        if (w < 0 || (size_t)w >= sizeof(tmp))
            return egpu_error_set(err, -ENAMETOOLONG, "%s/%s: name too long", dir, name);
        fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC,
                    0600);
        if (fd < 0 && errno != EEXIST)
            return egpu_error_errno(err, "create %s/%s", dir, tmp);
    }
    if (fd < 0)
        return egpu_error_set(err, -EEXIST, "create %s/%s: 8 random names taken", dir, tmp);
    while (off < len) {
        ssize_t n = write(fd, (const char *)text + off, len - off);

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            e = errno;
            close(fd);
            (void)unlinkat(dfd, tmp, 0); /* ours: made with O_EXCL */
            return egpu_error_set(err, -e, "write %s/%s: %s", dir, tmp, strerror(e));
        }
        off += (size_t)n;
    }
    if (fchmod(fd, mode) != 0 || fsync(fd) != 0) {
        e = errno;
        close(fd);
        (void)unlinkat(dfd, tmp, 0);
        return egpu_error_set(err, -e, "write %s/%s: %s", dir, tmp, strerror(e));
    }
    if (close(fd) != 0) {
        e = errno;
        (void)unlinkat(dfd, tmp, 0);
        return egpu_error_set(err, -e, "write %s/%s: %s", dir, tmp, strerror(e));
    }
    if (renameat(dfd, tmp, dfd, name) != 0) {
        e = errno;
        (void)unlinkat(dfd, tmp, 0);
        return egpu_error_set(err, -e, "rename %s/%s: %s", dir, name, strerror(e));
    }
    return 0;
}

int egpu__fs_read_at(int dfd, const char *name, size_t max, char **text, size_t *len,
                     struct stat *st)
{
    struct stat sb;
    size_t got = 0;
    char *buf;
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC), e;

    if (fd < 0)
        return -errno;
    if (fstat(fd, &sb) != 0) {
        e = errno;
        close(fd);
        return -e;
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return -EINVAL;
    }
    if (sb.st_size < 0 || (uint64_t)sb.st_size > max) {
        close(fd);
        return -EFBIG;
    }
    buf = egpu_malloc(max + 2);
    if (buf == NULL) {
        close(fd);
        return -ENOMEM;
    }
    /* Read up to max + 1: a file that grew past max since fstat is too big. */
    while (got <= max) {
        ssize_t n = read(fd, buf + got, max + 1 - got);

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            e = errno;
            close(fd);
            egpu_free(buf);
            return -e;
        }
        if (n == 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    if (got > max) {
        egpu_free(buf);
        return -EFBIG;
    }
    buf[got] = '\0';
    *text = buf;
    *len = got;
    if (st != NULL)
        *st = sb;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* rm -r                                                                    */

struct rm {
    int top;                  /* the tree's top directory: deep dirs are moved here */
    unsigned long moved;      /* names ".egpu-rm-<n>" handed out */
    bool bounded;             /* deadline applies */
    struct timespec deadline; /* CLOCK_MONOTONIC */
    bool late;                /* the deadline passed */
    int err;                  /* first failure, or 0 */
};

static bool rm_is_late(struct rm *r)
{
    struct timespec now;

    if (!r->bounded || r->late)
        return r->late;
    clock_gettime(CLOCK_MONOTONIC, &now);
    r->late = now.tv_sec > r->deadline.tv_sec ||
              (now.tv_sec == r->deadline.tv_sec && now.tv_nsec >= r->deadline.tv_nsec);
    return r->late;
}

static void rm_note(struct rm *r, int code)
{
    if (r->err == 0)
        r->err = code;
}

static void rm_entry(struct rm *r, int dfd, const char *name, int depth, bool *progress);

/* Remove everything in the directory fd (consumed), whose entries are at
 * depth + 1, reading it again while a pass removes something (entries
 * moved here, or added by someone else). */
static void rm_contents(struct rm *r, int fd, int depth)
{
    DIR *d = fdopendir(fd);
    bool progress = true;

    if (d == NULL) {
        rm_note(r, -errno);
        close(fd);
        return;
    }
    while (progress && !rm_is_late(r)) {
        const struct dirent *e;

        progress = false;
        rewinddir(d);
        while ((e = readdir(d)) != NULL && !rm_is_late(r)) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            rm_entry(r, dirfd(d), e->d_name, depth + 1, &progress);
        }
    }
    closedir(d);
}

/* Move the directory name of dfd to the top of the tree (a fresh name). */
static void rm_move_up(struct rm *r, int dfd, const char *name, bool *progress)
{
    for (int tries = 0; tries < 64; tries++) {
        char to[32];

        snprintf(to, sizeof(to), ".egpu-rm-%lu", r->moved++);
        if (renameat2(dfd, name, r->top, to, RENAME_NOREPLACE) == 0) {
            *progress = true;
            return;
        }
        if (errno != EEXIST)
            break;
    }
    if (errno != ENOENT)
        rm_note(r, -errno);
}

/* Remove the entry name of dfd, at depth (the top's entries are at 1). */
static void rm_entry(struct rm *r, int dfd, const char *name, int depth, bool *progress)
{
    int fd;

    if (unlinkat(dfd, name, 0) == 0) {
        *progress = true;
        return;
    }
    if (errno == ENOENT)
        return;
    if (errno != EISDIR && errno != EPERM) {
        rm_note(r, -errno);
        return;
    }
    if (depth >= EGPU_FS_RM_DEPTH) {
        rm_move_up(r, dfd, name, progress);
        return;
    }
    fd = openat(dfd, name, EGPU_FS_DIR_FLAGS);
    if (fd < 0) {
        /* Replaced by a non-directory since the unlink: unlink that. */
        if ((errno == ENOTDIR || errno == ELOOP) && unlinkat(dfd, name, 0) == 0)
            *progress = true;
        else if (errno != ENOENT)
            rm_note(r, -errno);
        return;
    }
    rm_contents(r, fd, depth);
    if (unlinkat(dfd, name, AT_REMOVEDIR) == 0)
        *progress = true;
    else if (errno != ENOENT && errno != ENOTEMPTY && errno != EEXIST)
        rm_note(r, -errno);
}

int egpu__fs_remove_tree(int dfd, const char *name, long budget_ms)
{
    struct rm r = {.top = -1};
    int fd = -1, dup_fd;

    if (budget_ms > 0) {
        clock_gettime(CLOCK_MONOTONIC, &r.deadline);
        r.deadline.tv_sec += budget_ms / 1000;
        r.deadline.tv_nsec += (budget_ms % 1000) * 1000000L;
        if (r.deadline.tv_nsec >= 1000000000L) {
            r.deadline.tv_sec++;
            r.deadline.tv_nsec -= 1000000000L;
        }
        r.bounded = true;
    }
    /* A non-directory goes at once; a directory is opened, never followed.
     * Something swapped in between is looked at again. */
    for (int tries = 0; tries < 8 && fd < 0; tries++) {
        if (unlinkat(dfd, name, 0) == 0 || errno == ENOENT)
            return 0;
        if (errno != EISDIR && errno != EPERM)
            return -errno;
        fd = openat(dfd, name, EGPU_FS_DIR_FLAGS);
        if (fd < 0 && errno == ENOENT)
            return 0;
        if (fd < 0 && errno != ENOTDIR && errno != ELOOP)
            return -errno;
    }
    if (fd < 0)
        return -EAGAIN;
    r.top = fd;
    dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (dup_fd < 0) {
        int e = -errno;

        close(fd);
        return e;
    }
    rm_contents(&r, dup_fd, 0);
    close(r.top);
    if (unlinkat(dfd, name, AT_REMOVEDIR) == 0 || errno == ENOENT)
        return 0;
    if (r.late)
        return -EAGAIN;
    return r.err != 0 ? r.err : -errno;
}
