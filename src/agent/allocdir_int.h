/* agent/allocdir_int.h - the allocation dirs (allocdir.c), private to
 * src/agent: their names, their layout, making and removing one. What the
 * device plugin writes for a container (and a DRA kubelet plugin would
 * write for a claim) lives in one of them; allocfs.c does the file
 * operations inside.
 *
 * The layout of an allocation dir <alloc_root>/<16 hex digits> (DESIGN.md 5):
 *   <dir>/                 root, 0755; mounted read-only at /etc/elastic-gpu
 *     limits.json          root, 0644; written by PreStartContainer
 *     vcuda.conf           root, 0644; the interposer's limits, same call
 *     ld.so.preload        root, 0644; shared cards; Allocate; mounted at /etc/ld.so.preload
 *     shared/              root, 01777; shared cards; mounted read-write at
 *                          /etc/elastic-gpu/shared: the only place a container
 *                          can write, for the interposer's regions
 * The agent reads nothing below shared/ and never believes a file there; the
 * cleanup removes it with egpu__fs_remove_tree.
 */
#ifndef EGPU_AGENT_ALLOCDIR_INT_H
#define EGPU_AGENT_ALLOCDIR_INT_H

#include <stdbool.h>
#include <stddef.h>

#include "egpu/core.h"

#define EGPU_ALLOCDIR_CONTAINER_DIR     "/etc/elastic-gpu" /* the allocation dir in the container */
#define EGPU_ALLOCDIR_PRELOAD_FILE      "ld.so.preload"    /* in the allocation dir */
#define EGPU_ALLOCDIR_LIMITS_FILE       "limits.json"      /* in the allocation dir */
#define EGPU_ALLOCDIR_VCUDA_FILE        "vcuda.conf"       /* the interposer's limits, same dir */
#define EGPU_ALLOCDIR_SHARED_DIR        "shared"           /* the container's writable subdir */
/* Where the preload file is mounted in the container, and the variable
 * naming the allocation dir there. */
#define EGPU_ALLOCDIR_CONTAINER_PRELOAD "/etc/ld.so.preload"
#define EGPU_ALLOCDIR_ENV_DIR           "EGPU_ALLOC_DIR"
/* The control device nodes a GPU container gets besides /dev/nvidia<minor>,
 * rw at the same path (device-plugin mode's Allocate and DRA mode's CDI
 * spec give the same ones). */
#define EGPU_ALLOCDIR_DEV_CTL           "/dev/nvidiactl"
#define EGPU_ALLOCDIR_DEV_UVM           "/dev/nvidia-uvm"
#define EGPU_ALLOCDIR_DEV_UVM_TOOLS     "/dev/nvidia-uvm-tools"
#define EGPU_ALLOCDIR_NAME_LEN          16    /* hex digits of an allocation dir's name */
#define EGPU_ALLOCDIR_LIMITS_MAX        16384 /* bytes: a larger limits.json is not the agent's */
#define EGPU_ALLOCDIR_RM_BUDGET_MS      2000  /* wall time one allocation dir's removal may take */

/* The allocation dir of ids (n of them, in any order) into out:
 * <alloc_root>/<16 hex digits of FNV-1a over the sorted IDs>. Allocate and
 * PreStartContainer, which see the same IDs, find the same dir. Returns 0,
 * -ENAMETOOLONG or -ENOMEM. */
int egpu__allocdir_path(const char *alloc_root, char *const *ids, size_t n, char *out,
                        size_t len) EGPU_MUST_CHECK;

/* Whether name is an allocation dir's: 16 lowercase hex digits. */
bool egpu__allocdir_is_name(const char *name);

/* mkdir -p path (mode 0755). Returns 0, -ENAMETOOLONG or -errno. */
int egpu__allocdir_mkdir_p(const char *path) EGPU_MUST_CHECK;

/* Open (with create, make first: mkdir -p alloc_root, then the dir) the
 * allocation dir dir (<alloc_root>/<name>, as egpu__allocdir_path gives
 * it) as a directory fd (O_NOFOLLOW) into *fd (close(2) it) and put it in
 * the layout above: owned by this process's user, mode 0755 (a dir found
 * otherwise, left by an older agent, is taken back), and with shared, a
 * real subdirectory shared/ of mode 01777 (a link or file there is removed
 * first). *created (may be NULL) says whether the dir was made by this
 * call. Returns 0, or -errno with err "allocation dir <dir> (--alloc-root
 * <root>) cannot be created: <reason>" (without create, -ENOENT when it
 * does not exist); on failure a dir this call made is removed again. */
int egpu__allocdir_open(const char *alloc_root, const char *dir, bool create, bool shared,
                        bool *created, int *fd, struct egpu_error *err) EGPU_MUST_CHECK;

/* Remove the allocation dir dir (<alloc_root>/<name>) and all below it
 * (egpu__fs_remove_tree). Returns 0, -EINVAL (dir not below alloc_root) or
 * what that returns. */
int egpu__allocdir_remove(const char *alloc_root, const char *dir) EGPU_MUST_CHECK;

#endif /* EGPU_AGENT_ALLOCDIR_INT_H */
