/* tests/unit/test_vcuda_sigbus.c - the interposer's guard against truncated
 * region files (src/vcuda/sigbus.c).
 *
 * A watched mapping whose file is truncated under it: the access that
 * faults completes on zeros instead of killing the process, the fault is
 * counted once, and a mapping of the file made again sees the file. A
 * mapping not watched (or watched no longer) still raises SIGBUS, which
 * reaches the handler the program had installed before; a handler installed
 * after ours is chained to, and ours is put back on top at the next watch.
 * Bad arguments are refused.
 */
#define _GNU_SOURCE /* mkdtemp, MAP_ANONYMOUS */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "vcuda_int.h"

#define BYTES (3 * 4096 + 100) /* several pages, the last one partial */

static char dir[64], path[128];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/egpu-vcuda-sigbus-XXXXXX");
    if (mkdtemp(dir) == NULL)
        return -1;
    snprintf(path, sizeof(path), "%s/region", dir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(path);
    rmdir(dir);
    return 0;
}

/* A file of BYTES bytes of 0x5a, mapped shared; *fd left open. */
static unsigned char *map_file(int *fd)
{
    unsigned char buf[BYTES];
    void *p;

    *fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    assert_true(*fd >= 0);
    memset(buf, 0x5a, sizeof(buf));
    assert_int_equal(write(*fd, buf, sizeof(buf)), (ssize_t)sizeof(buf));
    p = mmap(NULL, BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
    assert_true(p != MAP_FAILED);
    return p;
}

/* Read p[i] through a volatile pointer, so the access really happens. */
static unsigned char peek(const unsigned char *p, size_t i)
{
    return ((const volatile unsigned char *)p)[i];
}

static void truncated_mapping_reads_zeros(void **state)
{
    atomic_uint faults = 0;
    int fd;
    unsigned char *p = map_file(&fd);

    (void)state;
    assert_int_equal(egpu__vcuda_sigbus_watch(p, BYTES, &faults), 0);
    assert_int_equal(peek(p, 2 * 4096), 0x5a);
    assert_int_equal(ftruncate(fd, 4096), 0); /* pages 1.. are gone */
    assert_int_equal(peek(p, 0), 0x5a);       /* page 0 is still the file's */
    assert_int_equal(atomic_load(&faults), 0);
    assert_int_equal(peek(p, 2 * 4096), 0); /* faults: zeros, not death */
    assert_int_equal(atomic_load(&faults), 1);
    /* the whole range is private zeros now, writable, and faults no more */
    assert_int_equal(peek(p, 0), 0);
    p[3 * 4096] = 7;
    assert_int_equal(peek(p, 3 * 4096), 7);
    assert_int_equal(atomic_load(&faults), 1);
    /* the file did not see the write; a new mapping sees the file */
    assert_int_equal(ftruncate(fd, BYTES), 0);
    egpu__vcuda_sigbus_unwatch(p);
    munmap(p, BYTES);
    p = mmap(NULL, BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    assert_true(p != MAP_FAILED);
    assert_int_equal(peek(p, 0), 0x5a);
    assert_int_equal(peek(p, 3 * 4096), 0); /* the file's new bytes */
    munmap(p, BYTES);
    close(fd);
}

static sigjmp_buf escape;
static volatile sig_atomic_t theirs_called;

static void theirs(int sig, siginfo_t *si, void *uc)
{
    (void)si;
    (void)uc;
    theirs_called = sig;
    siglongjmp(escape, 1);
}

static void install_theirs(struct sigaction *old)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = theirs;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    assert_int_equal(sigaction(SIGBUS, &sa, old), 0);
}

/* A fault in a mapping not watched reaches the program's own handler,
 * whether it was installed before the first watch or after it. */
static void other_faults_are_chained(void **state)
{
    atomic_uint faults = 0;
    struct sigaction old, mine;
    unsigned char *watched, *other;
    int fd_w, fd_o;

    (void)state;
    install_theirs(&old);
    watched = map_file(&fd_w);
    assert_int_equal(egpu__vcuda_sigbus_watch(watched, BYTES, &faults), 0);
    assert_int_equal(sigaction(SIGBUS, NULL, &mine), 0);
    assert_true(mine.sa_sigaction != theirs); /* ours is on top */
    assert_int_equal(unlink(path), 0);
    other = map_file(&fd_o); /* a second file, never watched */
    assert_int_equal(ftruncate(fd_o, 0), 0);
    theirs_called = 0;
    if (sigsetjmp(escape, 1) == 0) {
        (void)peek(other, 0);
        fail_msg("an access past the end of a file did not raise SIGBUS");
    }
    assert_int_equal(theirs_called, SIGBUS);
    assert_int_equal(atomic_load(&faults), 0);
    /* a handler installed after ours: ours comes back on top at the next
     * watch and hands it the faults that are not ours */
    install_theirs(NULL);
    egpu__vcuda_sigbus_unwatch(watched);
    assert_int_equal(egpu__vcuda_sigbus_watch(watched, BYTES, &faults), 0);
    assert_int_equal(sigaction(SIGBUS, NULL, &mine), 0);
    assert_true(mine.sa_sigaction != theirs);
    theirs_called = 0;
    if (sigsetjmp(escape, 1) == 0) {
        (void)peek(other, 4096);
        fail_msg("no SIGBUS");
    }
    assert_int_equal(theirs_called, SIGBUS);
    /* ours still handles its own */
    assert_int_equal(ftruncate(fd_w, 0), 0);
    assert_int_equal(peek(watched, 4096), 0);
    assert_int_equal(atomic_load(&faults), 1);
    egpu__vcuda_sigbus_unwatch(watched);
    munmap(watched, BYTES);
    munmap(other, BYTES);
    close(fd_w);
    close(fd_o);
    assert_int_equal(sigaction(SIGBUS, &old, NULL), 0);
}

/* Unwatched, a truncated mapping raises SIGBUS again (passed on to the
 * program's handler here). */
static void unwatched_is_not_repaired(void **state)
{
    atomic_uint faults = 0;
    struct sigaction old, mine;
    unsigned char *p;
    int fd;

    (void)state;
    install_theirs(&old);
    p = map_file(&fd);
    assert_int_equal(egpu__vcuda_sigbus_watch(p, BYTES, &faults), 0);
    egpu__vcuda_sigbus_unwatch(p);
    assert_int_equal(sigaction(SIGBUS, NULL, &mine), 0);
    assert_true(mine.sa_sigaction != theirs); /* ours, passing it on */
    assert_int_equal(ftruncate(fd, 0), 0);
    theirs_called = 0;
    if (sigsetjmp(escape, 1) == 0) {
        /* not page-aligned: never the address of the last test's faults,
         * which sigbus.c would take for a loop of handlers */
        (void)peek(p, 2 * 4096 + 17);
        fail_msg("no SIGBUS");
    }
    assert_int_equal(theirs_called, SIGBUS);
    assert_int_equal(atomic_load(&faults), 0);
    assert_int_equal(sigaction(SIGBUS, &old, NULL), 0);
    munmap(p, BYTES);
    close(fd);
}

static struct sigaction chained_prev;

/* A handler that passes every SIGBUS to the one it replaced. */
static void chaining(int sig, siginfo_t *si, void *uc)
{
    chained_prev.sa_sigaction(sig, si, uc);
}

/* A handler installed after ours that calls ours, with ours installed
 * again on top of it: a fault that is not ours would go round between
 * them; it takes the default action instead (the process dies of SIGBUS,
 * as it would have without us, and does not hang or overflow its stack). */
static void handler_loop_ends(void **state)
{
    atomic_uint faults = 0;
    pid_t pid;
    int status = 0;

    (void)state;
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct sigaction sa;
        unsigned char *watched, *other;
        int fd_w, fd_o;

        watched = map_file(&fd_w);
        if (egpu__vcuda_sigbus_watch(watched, BYTES, &faults) != 0)
            _exit(2);
        memset(&sa, 0, sizeof(sa));
        sa.sa_sigaction = chaining;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        if (sigaction(SIGBUS, &sa, &chained_prev) != 0)
            _exit(3);
        egpu__vcuda_sigbus_unwatch(watched);
        if (egpu__vcuda_sigbus_watch(watched, BYTES, &faults) != 0) /* ours on top again */
            _exit(4);
        unlink(path);
        other = map_file(&fd_o);
        if (ftruncate(fd_o, 0) != 0)
            _exit(5);
        (void)peek(other, 100);
        _exit(6); /* not reached */
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGBUS);
    unlink(path);
}

static void bad_arguments(void **state)
{
    atomic_uint faults = 0;
    void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    void *watched[EGPU_VCUDA_SIGBUS_MAX];
    int n = 0;

    (void)state;
    assert_true(p != MAP_FAILED);
    assert_int_equal(egpu__vcuda_sigbus_watch(NULL, 4096, &faults), -EINVAL);
    assert_int_equal(egpu__vcuda_sigbus_watch(p, 0, &faults), -EINVAL);
    assert_int_equal(egpu__vcuda_sigbus_watch(p, 4096, NULL), -EINVAL);
    assert_int_equal(egpu__vcuda_sigbus_watch((char *)p + 1, 100, &faults), -EINVAL);
    /* the table is full after EGPU_VCUDA_SIGBUS_MAX ranges */
    for (int i = 0; i < EGPU_VCUDA_SIGBUS_MAX; i++) {
        watched[i] = (char *)p + 0; /* the same range may be watched once per slot */
        if (egpu__vcuda_sigbus_watch(watched[i], 4096, &faults) == 0)
            n++;
    }
    assert_int_equal(n, EGPU_VCUDA_SIGBUS_MAX);
    assert_int_equal(egpu__vcuda_sigbus_watch(p, 4096, &faults), -ENOSPC);
    egpu__vcuda_sigbus_unwatch(p); /* every slot of that range */
    assert_int_equal(egpu__vcuda_sigbus_watch(p, 4096, &faults), 0);
    egpu__vcuda_sigbus_unwatch(p);
    egpu__vcuda_sigbus_unwatch(NULL);
    munmap(p, 4096);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(truncated_mapping_reads_zeros),
        cmocka_unit_test(other_faults_are_chained),
        cmocka_unit_test(unwatched_is_not_repaired),
        cmocka_unit_test(handler_loop_ends),
        cmocka_unit_test(bad_arguments),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
