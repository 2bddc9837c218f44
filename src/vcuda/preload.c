/* vcuda/preload.c - whether ld.so.preload names the interposer (see
 * vcuda_int.h).
 *
 * The agent mounts a file of its own at /etc/ld.so.preload in every
 * shared-GPU container, naming the interposer by the path it mounts it at.
 * A process loaded that way runs in a container the agent configured, so
 * its limits can only come from the agent's vcuda.conf: the environment
 * (EGPU_VCUDA_DIR, EGPU_VCUDA_*), which any process there may set, is not a
 * source for it (hooks.c). A process that hid /etc/ld.so.preload in a mount
 * namespace of its own is not loaded that way, and needs no interposer to
 * run unlimited: only the seccomp profile the webhook gives the container
 * holds that door (docs/security.md).
 *
 * ld.so(8): the file lists shared objects separated by white space or
 * colons; lines are not special. Only the first 64 KiB are read, enough for
 * any real list: a longer file proves nothing more.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vcuda_int.h"

#define PRELOAD_READ_MAX (64 * 1024)

/* ld.so's separators; a NUL ends an entry too. */
static bool is_sep(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' || c == ':' ||
           c == '\0';
}

static const char *base_name(const char *p, size_t n, size_t *len)
{
    const char *b = p;

    for (size_t i = 0; i < n; i++) {
        if (p[i] == '/')
            b = p + i + 1;
    }
    *len = n - (size_t)(b - p);
    return b;
}

static bool names(const char *entry, size_t n, const char *self)
{
    size_t sn, eb_len, sb_len;
    const char *eb, *sb;

    if (self == NULL || self[0] == '\0')
        return false;
    sn = strlen(self);
    if (n == sn && memcmp(entry, self, n) == 0)
        return true;
    eb = base_name(entry, n, &eb_len);
    sb = base_name(self, sn, &sb_len);
    return eb_len > 0 && eb_len == sb_len && memcmp(eb, sb, eb_len) == 0;
}

bool egpu__vcuda_preloaded(const char *path, const char *self)
{
    char *buf;
    struct stat st;
    ssize_t got;
    size_t len = 0;
    bool found = false;
    int fd;

    if (path == NULL || path[0] == '\0')
        return false;
    fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return false;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (buf = malloc(PRELOAD_READ_MAX)) == NULL) {
        close(fd);
        return false;
    }
    while (len < PRELOAD_READ_MAX) {
        got = read(fd, buf + len, PRELOAD_READ_MAX - len);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        len += (size_t)got;
    }
    close(fd);
    for (size_t i = 0; i < len && !found;) {
        size_t start;

        while (i < len && is_sep(buf[i]))
            i++;
        start = i;
        while (i < len && !is_sep(buf[i]))
            i++;
        if (i > start)
            found = names(buf + start, i - start, self);
    }
    free(buf);
    return found;
}
