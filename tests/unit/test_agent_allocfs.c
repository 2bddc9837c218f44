/* tests/unit/test_agent_allocfs.c - the agent's file operations on
 * allocation dirs (src/agent/allocfs.c), played against what a hostile
 * container leaves in the dir it can write.
 *
 * egpu__fs_write_at: content and mode, replacing a file; a symbolic link or
 * a FIFO planted at the name is replaced, never followed or opened (the link
 * target keeps its bytes); a directory at the name fails the rename with a
 * message naming <dir>/<name> and leaves no temporary file.
 * egpu__fs_read_at: a regular file is read; a link (-ELOOP), a FIFO
 * (-EINVAL, without blocking), a file over the bound (-EFBIG) and a missing
 * one (-ENOENT) are refused. egpu__fs_is_private on owner and mode bits.
 * egpu__fs_remove_tree: files, links to files and directories outside the
 * tree (the targets survive), FIFOs, a 12-deep and a 10,000-deep chain of
 * directories, a link or a file given as the top; no fd is left open, no
 * memory is left allocated, and a tight budget gives -EAGAIN and the next
 * call finishes the job.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"
#include "allocfs_int.h"

static char root[64];
static int root_fd = -1;
static long live_at_start;

static int setup(void **state)
{
    (void)state;
    snprintf(root, sizeof(root), "/tmp/egpu-allocfs-XXXXXX");
    if (mkdtemp(root) == NULL)
        return -1;
    root_fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    live_at_start = egpu_alloc_live();
    return root_fd < 0 ? -1 : 0;
}

static int teardown(void **state)
{
    (void)state;
    assert_int_equal(egpu_alloc_live(), live_at_start);
    if (egpu__fs_remove_tree(AT_FDCWD, root, 0) != 0)
        return -1;
    close(root_fd);
    return 0;
}

/* Open fds of this process. */
static int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;

    assert_non_null(d);
    while (readdir(d) != NULL)
        n++;
    closedir(d);
    return n;
}

static void put(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");

    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void expect_text(const char *path, const char *text)
{
    char buf[256] = "";
    FILE *f = fopen(path, "r");
    size_t n;

    assert_non_null(f);
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    assert_string_equal(buf, text);
}

/* Entries of the directory path besides . and .. */
static int entries(const char *path)
{
    DIR *d = opendir(path);
    const struct dirent *e;
    int n = 0;

    assert_non_null(d);
    while ((e = readdir(d)) != NULL)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

static void path_of(char *out, size_t len, const char *name)
{
    snprintf(out, len, "%s/%s", root, name);
}

static void write_creates_and_replaces(void **state)
{
    struct egpu_error err = {0};
    char path[128];
    struct stat st;

    (void)state;
    path_of(path, sizeof(path), "w1");
    assert_int_equal(egpu__fs_write_at(root_fd, root, "w1", "one\n", 4, 0644, &err), 0);
    expect_text(path, "one\n");
    assert_int_equal(lstat(path, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    assert_int_equal(st.st_mode & 07777, 0644);
    assert_true(egpu__fs_is_private(&st));
    assert_int_equal(egpu__fs_write_at(root_fd, root, "w1", "two", 3, 0600, &err), 0);
    expect_text(path, "two");
    assert_int_equal(lstat(path, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0600);
    assert_int_equal(entries(root), 1); /* no temporary file left */
    assert_int_equal(unlink(path), 0);
}

static void write_replaces_link_and_fifo(void **state)
{
    struct egpu_error err = {0};
    char path[128], victim[128];
    struct stat st;

    (void)state;
    path_of(path, sizeof(path), "w2");
    path_of(victim, sizeof(victim), "victim");
    put(victim, "host file\n");
    assert_int_equal(symlink(victim, path), 0);
    assert_int_equal(egpu__fs_write_at(root_fd, root, "w2", "limits\n", 7, 0644, &err), 0);
    expect_text(victim, "host file\n"); /* never written through the link */
    assert_int_equal(lstat(path, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    expect_text(path, "limits\n");
    assert_int_equal(unlink(path), 0);

    assert_int_equal(mkfifo(path, 0666), 0); /* nobody reads it: opening it would block */
    assert_int_equal(egpu__fs_write_at(root_fd, root, "w2", "limits\n", 7, 0644, &err), 0);
    assert_int_equal(lstat(path, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    assert_int_equal(unlink(path), 0);
    assert_int_equal(unlink(victim), 0);
    assert_int_equal(entries(root), 0);
}

static void write_onto_directory_fails_cleanly(void **state)
{
    struct egpu_error err = {0};
    char path[128], want[160];

    (void)state;
    path_of(path, sizeof(path), "w3");
    assert_int_equal(mkdir(path, 0755), 0);
    path_of(path, sizeof(path), "w3/x");
    assert_int_equal(mkdir(path, 0755), 0); /* rename(2) onto a non-empty dir fails */
    assert_int_equal(egpu__fs_write_at(root_fd, root, "w3", "x", 1, 0644, &err), -EISDIR);
    snprintf(want, sizeof(want), "rename %s/w3", root);
    assert_non_null(strstr(err.msg, want));
    assert_int_equal(entries(root), 1); /* only w3: the temporary file is gone */
    assert_int_equal(egpu__fs_remove_tree(root_fd, "w3", 0), 0);
}

static void read_regular_only(void **state)
{
    char path[128], *text = NULL;
    struct stat st;
    size_t len = 0;

    (void)state;
    path_of(path, sizeof(path), "r1");
    put(path, "{\"core\":30}");
    assert_int_equal(egpu__fs_read_at(root_fd, "r1", 64, &text, &len, &st), 0);
    assert_string_equal(text, "{\"core\":30}");
    assert_int_equal(len, 11);
    assert_true(S_ISREG(st.st_mode));
    egpu_free(text);
    text = NULL;
    assert_int_equal(egpu__fs_read_at(root_fd, "r1", 10, &text, &len, NULL), -EFBIG);
    assert_null(text);
    assert_int_equal(egpu__fs_read_at(root_fd, "r1", 11, &text, &len, NULL), 0);
    egpu_free(text);
    text = NULL;
    assert_int_equal(egpu__fs_read_at(root_fd, "none", 64, &text, &len, NULL), -ENOENT);

    path_of(path, sizeof(path), "r2");
    assert_int_equal(symlink("r1", path), 0);
    assert_int_equal(egpu__fs_read_at(root_fd, "r2", 64, &text, &len, NULL), -ELOOP);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(mkfifo(path, 0666), 0);
    assert_int_equal(egpu__fs_read_at(root_fd, "r2", 64, &text, &len, NULL), -EINVAL);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(egpu__fs_read_at(root_fd, ".", 64, &text, &len, NULL), -EINVAL);
    assert_null(text);
    path_of(path, sizeof(path), "r1");
    assert_int_equal(unlink(path), 0);
}

static void is_private_bits(void **state)
{
    struct stat st = {.st_uid = geteuid(), .st_mode = S_IFREG | 0644};

    (void)state;
    assert_true(egpu__fs_is_private(&st));
    st.st_mode = S_IFDIR | 0755;
    assert_true(egpu__fs_is_private(&st));
    st.st_mode = S_IFDIR | 01777;
    assert_false(egpu__fs_is_private(&st));
    st.st_mode = S_IFREG | 0664;
    assert_false(egpu__fs_is_private(&st));
    st.st_mode = S_IFREG | 0644;
    st.st_uid = geteuid() + 1;
    assert_false(egpu__fs_is_private(&st));
}

/* Make a chain of depth directories "d" below dfd/name (made too), with a
 * file, a FIFO and a link to outside at the bottom. */
static void make_chain(const char *name, int depth, const char *outside)
{
    int fd, next;

    assert_int_equal(mkdirat(root_fd, name, 0755), 0);
    fd = openat(root_fd, name, O_RDONLY | O_DIRECTORY);
    assert_true(fd >= 0);
    for (int i = 0; i < depth; i++) {
        assert_int_equal(mkdirat(fd, "d", 0755), 0);
        next = openat(fd, "d", O_RDONLY | O_DIRECTORY);
        assert_true(next >= 0);
        close(fd);
        fd = next;
    }
    close(openat(fd, "f", O_WRONLY | O_CREAT, 0644));
    assert_int_equal(mkfifoat(fd, "fifo", 0666), 0);
    assert_int_equal(symlinkat(outside, fd, "out"), 0);
    close(fd);
}

static void remove_tree_never_follows(void **state)
{
    char outside_dir[128], outside_file[128], top[128], p[256];
    int fds = open_fds();

    (void)state;
    path_of(outside_dir, sizeof(outside_dir), "keep-dir");
    path_of(outside_file, sizeof(outside_file), "keep-file");
    assert_int_equal(mkdir(outside_dir, 0755), 0);
    snprintf(p, sizeof(p), "%s/inside", outside_dir);
    put(p, "x");
    put(outside_file, "host\n");
    path_of(top, sizeof(top), "tree");
    make_chain("tree", 12, outside_file);
    snprintf(p, sizeof(p), "%s/todir", top);
    assert_int_equal(symlink(outside_dir, p), 0);
    snprintf(p, sizeof(p), "%s/fifo", top);
    assert_int_equal(mkfifo(p, 0600), 0);
    snprintf(p, sizeof(p), "%s/dot", top);
    assert_int_equal(symlink("..", p), 0);
    assert_int_equal(egpu__fs_remove_tree(root_fd, "tree", 0), 0);
    assert_int_equal(access(top, F_OK), -1);
    expect_text(outside_file, "host\n");
    snprintf(p, sizeof(p), "%s/inside", outside_dir);
    expect_text(p, "x");
    assert_int_equal(open_fds(), fds);

    /* A link or a file as the top: removed itself, the target stays. */
    assert_int_equal(symlink(outside_dir, top), 0);
    assert_int_equal(egpu__fs_remove_tree(root_fd, "tree", 0), 0);
    assert_int_equal(access(p, F_OK), 0);
    assert_int_equal(egpu__fs_remove_tree(root_fd, "keep-file", 0), 0);
    assert_int_equal(egpu__fs_remove_tree(root_fd, "keep-file", 0), 0); /* gone: 0 */
    assert_int_equal(egpu__fs_remove_tree(root_fd, "keep-dir", 0), 0);
    assert_int_equal(entries(root), 0);
}

static void remove_tree_very_deep(void **state)
{
    char outside_file[128], top[128];
    int fds = open_fds();

    (void)state;
    path_of(outside_file, sizeof(outside_file), "keep-file");
    put(outside_file, "host\n");
    path_of(top, sizeof(top), "deep");
    make_chain("deep", 10000, outside_file);
    assert_int_equal(egpu__fs_remove_tree(root_fd, "deep", 0), 0);
    assert_int_equal(access(top, F_OK), -1);
    expect_text(outside_file, "host\n");
    assert_int_equal(open_fds(), fds);

    /* A budget too tight for the job: -EAGAIN, and the next call goes on. */
    make_chain("deep", 3000, outside_file);
    {
        int rc = egpu__fs_remove_tree(root_fd, "deep", 1);

        assert_true(rc == 0 || rc == -EAGAIN);
    }
    assert_int_equal(open_fds(), fds);
    assert_int_equal(egpu__fs_remove_tree(root_fd, "deep", 0), 0);
    assert_int_equal(access(top, F_OK), -1);
    assert_int_equal(unlink(outside_file), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(write_creates_and_replaces),
        cmocka_unit_test(write_replaces_link_and_fifo),
        cmocka_unit_test(write_onto_directory_fails_cleanly),
        cmocka_unit_test(read_regular_only),
        cmocka_unit_test(is_private_bits),
        cmocka_unit_test(remove_tree_never_follows),
        cmocka_unit_test(remove_tree_very_deep),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
