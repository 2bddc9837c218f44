/* agent/allocfs_int.h - file operations on allocation dirs (allocfs.c),
 * private to src/agent.
 *
 * A container can write below its allocation dir's shared/ subdirectory (the
 * interposer's regions live there), and the agent runs as root. So every
 * operation here works on directory file descriptors with openat(2) and
 * friends, never follows a symbolic link (O_NOFOLLOW, AT_SYMLINK_NOFOLLOW),
 * never blocks on a FIFO or a device (O_NONBLOCK; a non-directory is never
 * opened while removing), and never creates a file at a name that exists
 * (O_CREAT | O_EXCL). See docs/agent.md, "What a container can reach".
 */
#ifndef EGPU_AGENT_ALLOCFS_INT_H
#define EGPU_AGENT_ALLOCFS_INT_H

#include <fcntl.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>

#include "egpu/core.h"

/* Flags of every directory open: no link followed, no blocking, no tty. */
#define EGPU_FS_DIR_FLAGS (O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)

/* Open the directory name in the directory dfd (or a path, dfd AT_FDCWD)
 * with EGPU_FS_DIR_FLAGS: a symbolic link at name gives -ELOOP, anything
 * else that is no directory -ENOTDIR. *fd (close(2) it) only on success.
 * Returns 0 or -errno. */
int egpu__fs_open_dir(int dfd, const char *name, int *fd) EGPU_MUST_CHECK;

/* Write len bytes of text to name in the directory dfd, atomically: a new
 * file with a random name ".<name>.<16 hex digits>" made with O_CREAT |
 * O_EXCL | O_NOFOLLOW (never an existing file or a link's target), written,
 * set to mode (permission bits), fsync'd, then renameat(2) over name (so a
 * reader sees the old file or the new one, never half of one). dir is dfd's
 * path, for messages only. On failure the temporary file is gone and name is
 * as it was. Returns 0 or -errno with err naming <dir>/<name> (or the
 * temporary file) and the reason. */
int egpu__fs_write_at(int dfd, const char *dir, const char *name, const void *text, size_t len,
                      mode_t mode, struct egpu_error *err) EGPU_MUST_CHECK;

/* Read the regular file name in the directory dfd, opened with O_NOFOLLOW |
 * O_NONBLOCK | O_NOCTTY: at most max bytes into *text (egpu_malloc'd,
 * NUL-terminated, egpu_free it; *len its length), and its fstat into *st
 * (may be NULL) so the caller can check owner and mode. *text only on
 * success. Returns 0, -ENOENT, -ELOOP (a link), -EINVAL (not a regular
 * file: a FIFO, a socket, a device, a directory), -EFBIG (larger than max),
 * -ENOMEM or another -errno. */
int egpu__fs_read_at(int dfd, const char *name, size_t max, char **text, size_t *len,
                     struct stat *st) EGPU_MUST_CHECK;

/* Whether st (an fstat of something the agent made) is owned by this
 * process's effective user and writable by nobody else (no group or other
 * write bit): then no container can have written it. */
bool egpu__fs_is_private(const struct stat *st);

/* Remove the entry name of the directory dfd and, when it is a directory,
 * everything below it (rm -r), without following any symbolic link (a link
 * is removed, its target never touched) and without opening anything but
 * directories (a FIFO or a device is unlinked, never opened). No depth
 * limit and no deep recursion: at most EGPU_FS_RM_DEPTH directories are open
 * at once; a directory found deeper is moved up (renameat2 with
 * RENAME_NOREPLACE) to the top of the tree being removed, under a name
 * ".egpu-rm-<n>", and removed from there. Entries a concurrent writer adds
 * are removed too, within budget_ms milliseconds of wall time (0: no
 * bound). Returns 0 (name is gone, or was never there), -EAGAIN (the budget
 * ran out; what is left is removed by the next call), or the -errno of the
 * first operation that failed (the rest is still tried). */
int egpu__fs_remove_tree(int dfd, const char *name, long budget_ms) EGPU_MUST_CHECK;

#define EGPU_FS_RM_DEPTH 32 /* directories open at once in egpu__fs_remove_tree */

#endif /* EGPU_AGENT_ALLOCFS_INT_H */
