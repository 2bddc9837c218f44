/* net/tls_files.c - reading the HTTPS server's PEM files, and noticing
 * that they changed (see tls_int.h).
 *
 * DESIGN: a file is known by its stat(2): inode, size, mtime and ctime. stat
 * and not inotify: stat follows symbolic links, so a Secret volume's update
 * (the kubelet writes a new directory and swaps the ..data link that
 * tls.crt and tls.key resolve through) shows as a new inode, where an
 * inotify watch stays on the old inode and would have to watch each
 * directory on the path and be set again after every swap; inotify also
 * needs a thread of its own and misses changes on network filesystems. The
 * server looks at most once per EGPU__TLS_CHECK_MS, and only when a
 * handshake happens: a few stat calls a second cost nothing, and a server
 * that does no handshake needs no fresh file.
 *
 * A state of the files that failed to load is kept, so it is read, counted
 * and logged once, not at every handshake, until the files change again.
 */
#define _GNU_SOURCE /* explicit_bzero */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "egpu/core.h"
#include "tls_int.h"

static void file_id_from(const struct stat *st, struct egpu__file_id *id)
{
    memset(id, 0, sizeof(*id));
    id->dev = st->st_dev;
    id->ino = st->st_ino;
    id->size = st->st_size;
    id->mtime = st->st_mtim;
    id->ctime = st->st_ctim;
}

/* stat path (following links) into *id; a failure is an id too. */
static void file_id_stat(const char *path, struct egpu__file_id *id)
{
    struct stat st;

    if (stat(path, &st) != 0) {
        memset(id, 0, sizeof(*id));
        id->err = errno;
        return;
    }
    file_id_from(&st, id);
}

static bool is_same_file(const struct egpu__file_id *a, const struct egpu__file_id *b)
{
    return a->err == b->err && a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime.tv_sec == b->mtime.tv_sec && a->mtime.tv_nsec == b->mtime.tv_nsec &&
           a->ctime.tv_sec == b->ctime.tv_sec && a->ctime.tv_nsec == b->ctime.tv_nsec;
}

static bool is_same_state(const struct egpu__file_id *a, const struct egpu__file_id *b, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        if (!is_same_file(&a[i], &b[i]))
            return false;
    }
    return true;
}

int egpu__read_pem(const char *path, char **out, size_t *len, struct egpu__file_id *id,
                   struct egpu_error *err)
{
    struct egpu_buf b;
    char chunk[4096];
    struct stat st;
    ssize_t n;
    int fd, rc = 0;

    fd = open(path, O_RDONLY | O_CLOEXEC); /* no O_NOFOLLOW: see tls_int.h */
    if (fd < 0)
        return egpu_error_errno(err, "open %s", path);
    if (fstat(fd, &st) != 0) {
        rc = egpu_error_errno(err, "stat %s", path);
        close(fd);
        return rc;
    }
    file_id_from(&st, id);
    egpu_buf_init(&b, EGPU__TLS_FILE_MAX);
    for (;;) {
        n = read(fd, chunk, sizeof(chunk));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = egpu_error_errno(err, "read %s", path);
            break;
        }
        if (n == 0)
            break;
        rc = egpu_buf_append(&b, chunk, (size_t)n);
        if (rc != 0) {
            egpu_error_set(err, rc, "read %s: %s", path,
                           rc == -EMSGSIZE ? "larger than 1 MiB" : egpu_strerror(rc));
            break;
        }
    }
    close(fd);
    explicit_bzero(chunk, sizeof(chunk));
    if (rc == 0 && b.len == 0)
        rc = egpu_error_set(err, -EINVAL, "read %s: empty file", path);
    if (rc != 0) {
        if (b.data != NULL)
            explicit_bzero(b.data, b.cap);
        egpu_buf_free(&b);
        return rc;
    }
    *len = b.len;
    *out = egpu_buf_take(&b);
    return 0;
}

bool egpu__file_watch_is_due(struct egpu__file_watch *w)
{
    struct timespec now;
    double ms;

    clock_gettime(CLOCK_MONOTONIC, &now);
    ms = (double)(now.tv_sec - w->checked.tv_sec) * 1e3 +
         (double)(now.tv_nsec - w->checked.tv_nsec) / 1e6;
    if (w->checked.tv_sec != 0 && ms < (double)EGPU__TLS_CHECK_MS)
        return false;
    w->checked = now;
    for (unsigned i = 0; i < w->n; i++)
        file_id_stat(w->paths[i], &w->seen[i]);
    if (is_same_state(w->seen, w->loaded, w->n))
        return false;
    return !(w->has_bad && is_same_state(w->seen, w->bad, w->n)); /* failed and logged once */
}

void egpu__file_watch_loaded(struct egpu__file_watch *w, const struct egpu__file_id *ids,
                             bool first)
{
    memcpy(w->loaded, ids, w->n * sizeof(*ids));
    w->has_bad = false;
    if (!first)
        w->reloads++;
}

void egpu__file_watch_failed(struct egpu__file_watch *w)
{
    memcpy(w->bad, w->seen, w->n * sizeof(w->seen[0]));
    w->has_bad = true;
    w->failures++;
}
