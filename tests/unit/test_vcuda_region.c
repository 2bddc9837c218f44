/* tests/unit/test_vcuda_region.c - the interposer's shared region
 * (src/vcuda/region.c) with real processes (fork).
 *
 * Check-and-take up to the limit and back; cards apart; a private region;
 * two processes sharing one limit; the memory of a process that exits
 * without giving it back (a zombie, then reaped) is reclaimed; a process
 * that dies holding the lock leaves it EOWNERDEAD and the totals are
 * recomputed from the slots; a corrupted, truncated, zeroed or
 * foreign-version file is re-initialised with one log line; a live process
 * registers its usage again after a re-initialisation, after the file is
 * truncated under it (to nothing: the next access faults, and does not
 * kill it; to half: the file is looked at within 100 ms) and after it is
 * replaced; a forked child starts with nothing and its parent keeps its
 * usage.
 */
#define _GNU_SOURCE /* mkdtemp, waitid */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "egpu/log.h"
#include "testutil.h"
#include "vcuda_int.h"

#define MIB (1ULL << 20)

static char dir[64], path[128];
static struct egpu__vcuda_uuid uuid_a, uuid_b;
static FILE *log_file;

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/egpu-vcuda-region-XXXXXX");
    if (mkdtemp(dir) == NULL)
        return -1;
    snprintf(path, sizeof(path), "%s/%s", dir, EGPU_VCUDA_REGION_NAME);
    if (egpu__vcuda_uuid_parse("GPU-6d0c1c3e-0000-4000-8000-000000000000", &uuid_a) != 0 ||
        egpu__vcuda_uuid_parse("GPU-6d0c1c3e-0000-4000-8000-000000000001", &uuid_b) != 0)
        return -1;
    egpu_log_level = EGPU_LOG_WARN;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(path);
    rmdir(dir);
    return 0;
}

/* Each test starts without a region file and with an empty log. */
static int each_setup(void **state)
{
    (void)state;
    unlink(path);
    log_file = tmpfile();
    egpu_log_set_stream(log_file);
    return log_file ? 0 : -1;
}

static int each_teardown(void **state)
{
    (void)state;
    egpu_log_set_stream(NULL);
    fclose(log_file);
    return 0;
}

/* Lines logged since the test began that contain word. */
static int log_lines(const char *word)
{
    char line[1024];
    int n = 0;

    fflush(log_file);
    rewind(log_file);
    while (fgets(line, sizeof(line), log_file) != NULL)
        n += strstr(line, word) != NULL;
    fseek(log_file, 0, SEEK_END);
    return n;
}

static struct egpu__vcuda_region *open_region(const char *d, int *card)
{
    struct egpu__vcuda_region *h = NULL;
    struct egpu_error err = {0};

    if (egpu__vcuda_region_open(&h, d, &err) != 0)
        fail_msg("open: %s", err.msg);
    if (card != NULL)
        assert_int_equal(egpu__vcuda_region_card(h, &uuid_a, card), 0);
    return h;
}

static uint64_t used_of(struct egpu__vcuda_region *h, int card)
{
    uint64_t used = 0;

    assert_int_equal(egpu__vcuda_region_used(h, card, &used), 0);
    return used;
}

static void check_and_take(struct egpu__vcuda_region *h)
{
    int a, b;

    assert_int_equal(egpu__vcuda_region_card(h, &uuid_a, &a), 0);
    assert_int_equal(egpu__vcuda_region_card(h, &uuid_b, &b), 0);
    assert_int_not_equal(a, b);
    assert_int_equal(egpu__vcuda_region_card(h, &uuid_a, &b), 0); /* same card, same id */
    assert_int_equal(a, b);
    assert_int_equal(egpu__vcuda_region_card(h, &uuid_b, &b), 0);
    assert_int_equal(egpu__vcuda_region_reserve(h, a, 60 * MIB, 100 * MIB), 0);
    assert_int_equal(egpu__vcuda_region_reserve(h, a, 40 * MIB, 100 * MIB), 0);
    assert_int_equal(egpu__vcuda_region_reserve(h, a, 2 * MIB, 100 * MIB), -ENOMEM);
    assert_int_equal(egpu__vcuda_region_reserve(h, a, 0, 100 * MIB), 0);
    assert_int_equal(used_of(h, a), 100 * MIB);
    /* the other card has its own limit */
    assert_int_equal(egpu__vcuda_region_reserve(h, b, 100 * MIB, 100 * MIB), 0);
    assert_int_equal(egpu__vcuda_region_reserve(h, b, 1, 100 * MIB), -ENOMEM);
    egpu__vcuda_region_release(h, a, 40 * MIB);
    assert_int_equal(used_of(h, a), 60 * MIB);
    assert_int_equal(egpu__vcuda_region_mine(h, a), 60 * MIB);
    assert_int_equal(egpu__vcuda_region_reserve(h, a, 40 * MIB, 100 * MIB), 0);
    /* giving back more than held never goes below zero */
    egpu__vcuda_region_release(h, a, 1000 * MIB);
    assert_int_equal(used_of(h, a), 0);
    assert_int_equal(used_of(h, b), 100 * MIB);
    /* a request larger than the limit itself */
    assert_int_equal(egpu__vcuda_region_reserve(h, a, 101 * MIB, 100 * MIB), -ENOMEM);
    assert_int_equal(egpu__vcuda_region_reserve(h, 7, MIB, 100 * MIB), -EINVAL);
    assert_int_equal(egpu__vcuda_region_reserve(h, -1, MIB, 100 * MIB), -EINVAL);
}

static void reserve_release_limit(void **state)
{
    struct egpu__vcuda_region *h = open_region(dir, NULL);
    struct stat st;

    (void)state;
    assert_int_equal(stat(path, &st), 0);
    assert_true(st.st_size > 0);
    assert_int_equal(st.st_mode & 0777, 0666);
    check_and_take(h);
    egpu__vcuda_region_close(h);
    assert_int_equal(log_lines(""), 0); /* nothing to say about a fresh region */
    assert_int_equal(egpu_alloc_live(), 0);
}

static void private_region(void **state)
{
    struct egpu__vcuda_region *h = open_region(NULL, NULL);
    struct stat st;

    (void)state;
    check_and_take(h);
    egpu__vcuda_region_close(h);
    assert_int_not_equal(stat(path, &st), 0); /* no file */
}

static void card_table_full(void **state)
{
    struct egpu__vcuda_region *h = open_region(dir, NULL);
    struct egpu__vcuda_uuid u = uuid_a;
    int card;

    (void)state;
    for (int i = 0; i < EGPU_VCUDA_MAX_CARDS; i++) {
        u.b[15] = (uint8_t)(0x40 + i);
        assert_int_equal(egpu__vcuda_region_card(h, &u, &card), 0);
        assert_int_equal(card, i);
    }
    u.b[15] = 0x3f;
    assert_int_equal(egpu__vcuda_region_card(h, &u, &card), -ENOSPC);
    egpu__vcuda_region_close(h);
}

/* A child: run fn in a forked process with its own handle; its exit status
 * is fn's return (0 = passed). Communicates through pipes to[0]/from[1]. */
static int to_child[2], from_child[2];

static void child_send(char c)
{
    if (write(from_child[1], &c, 1) != 1)
        _exit(90);
}

static char child_wait(void)
{
    char c = 0;

    if (read(to_child[0], &c, 1) != 1)
        _exit(91);
    return c;
}

static void parent_send(char c)
{
    assert_int_equal(write(to_child[1], &c, 1), 1);
}

static char parent_wait(void)
{
    char c = 0;

    assert_int_equal(read(from_child[0], &c, 1), 1);
    return c;
}

static pid_t spawn(int (*fn)(void))
{
    pid_t pid;

    assert_int_equal(pipe(to_child), 0);
    assert_int_equal(pipe(from_child), 0);
    fflush(NULL);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(fn());
    return pid;
}

static int reap(pid_t pid)
{
    int status = -1;

    assert_int_equal(waitpid(pid, &status, 0), pid);
    close(to_child[0]);
    close(to_child[1]);
    close(from_child[0]);
    close(from_child[1]);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

/* Wait until pid has exited without reaping it: it stays a zombie. */
static void wait_zombie(pid_t pid)
{
    siginfo_t si;

    assert_int_equal(waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT), 0);
}

static int child_takes_50(void)
{
    struct egpu_error err = {0};
    struct egpu__vcuda_region *h = NULL;
    int card;

    if (egpu__vcuda_region_open(&h, dir, &err) != 0 ||
        egpu__vcuda_region_card(h, &uuid_a, &card) != 0)
        return 1;
    if (egpu__vcuda_region_reserve(h, card, 50 * MIB, 100 * MIB) != 0)
        return 2;
    if (egpu__vcuda_region_reserve(h, card, 30 * MIB, 100 * MIB) != -ENOMEM)
        return 3; /* 30 (parent) + 50 + 30 > 100 */
    child_send('r');
    child_wait();
    return 0; /* exits holding 50 MiB: never given back */
}

static void dead_process_reclaimed(void **state)
{
    int card;
    struct egpu__vcuda_region *h = open_region(dir, &card);
    pid_t pid;

    (void)state;
    assert_int_equal(egpu__vcuda_region_reserve(h, card, 30 * MIB, 100 * MIB), 0);
    pid = spawn(child_takes_50);
    assert_int_equal(parent_wait(), 'r');
    assert_int_equal(used_of(h, card), 80 * MIB); /* both count against one limit */
    assert_int_equal(egpu__vcuda_region_reserve(h, card, 21 * MIB, 100 * MIB), -ENOMEM);
    parent_send('x');
    wait_zombie(pid);
    /* a zombie holds no device memory: the next reservation that would
     * fail reclaims it */
    assert_int_equal(egpu__vcuda_region_reserve(h, card, 70 * MIB, 100 * MIB), 0);
    assert_int_equal(used_of(h, card), 100 * MIB);
    assert_int_equal(reap(pid), 0);
    egpu__vcuda_region_release(h, card, 100 * MIB);
    assert_int_equal(used_of(h, card), 0);
    assert_int_equal(log_lines(""), 0);
    egpu__vcuda_region_close(h);
}

static int child_dies_holding_lock(void)
{
    struct egpu_error err = {0};
    struct egpu__vcuda_region *h = NULL;
    int card;

    if (egpu__vcuda_region_open(&h, dir, &err) != 0 ||
        egpu__vcuda_region_card(h, &uuid_a, &card) != 0 ||
        egpu__vcuda_region_reserve(h, card, 10 * MIB, 100 * MIB) != 0)
        return 1;
    /* a half-done update, then death with the lock held */
    if (egpu__vcuda_region_debug_set_total(h, card, 999 * MIB) != 0 ||
        egpu__vcuda_region_debug_lock(h) != 0)
        return 2;
    return 0;
}

static void owner_died_recomputes(void **state)
{
    int card;
    struct egpu__vcuda_region *h = open_region(dir, &card);

    (void)state;
    assert_int_equal(reap(spawn(child_dies_holding_lock)), 0);
    /* EOWNERDEAD: totals from the slots (the dead child's 10 MiB still has
     * its slot), so 2 MiB fits under a 12 MiB limit without reclaiming */
    assert_int_equal(egpu__vcuda_region_reserve(h, card, 2 * MIB, 12 * MIB), 0);
    /* reading usage reclaims the dead child */
    assert_int_equal(used_of(h, card), 2 * MIB);
    assert_int_equal(egpu__vcuda_region_reserve(h, card, 10 * MIB, 12 * MIB), 0);
    assert_int_equal(egpu__vcuda_region_reserve(h, card, 2 * MIB, 12 * MIB), -ENOMEM);
    egpu__vcuda_region_close(h);
}

static void write_at(off_t off, const void *p, size_t n)
{
    int fd = open(path, O_WRONLY);

    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, p, n, off), (ssize_t)n);
    close(fd);
}

/* Make a region file, break it with how, and open it again: one log line
 * with the path and word, and a region that works. */
static void broken_file_case(void (*how)(void), const char *word)
{
    struct egpu__vcuda_region *h = open_region(dir, NULL);
    int card;

    egpu__vcuda_region_close(h);
    how();
    h = open_region(dir, &card);
    if (log_lines(word) != 1 || log_lines(path) != 1 || log_lines("re-initialising") != 1 ||
        log_lines("") != 1)
        fail_msg("want one line naming %s and \"%s\"", path, word);
    assert_int_equal(used_of(h, card), 0);
    assert_int_equal(egpu__vcuda_region_reserve(h, card, 8 * MIB, 8 * MIB), 0);
    assert_int_equal(egpu__vcuda_region_reserve(h, card, 2 * MIB, 8 * MIB), -ENOMEM);
    egpu__vcuda_region_close(h);
    fclose(log_file);
    log_file = tmpfile();
    egpu_log_set_stream(log_file);
}

static void garbage_header(void)
{
    unsigned char junk[64];

    memset(junk, 0xa5, sizeof(junk));
    write_at(0, junk, sizeof(junk));
}

static void truncate_file(void)
{
    assert_int_equal(truncate(path, 100), 0);
}

static void zero_file(void)
{
    struct stat st;
    static char zeros[4096];

    assert_int_equal(stat(path, &st), 0);
    for (off_t off = 0; off < st.st_size; off += (off_t)sizeof(zeros))
        write_at(off, zeros,
                 (size_t)(st.st_size - off < (off_t)sizeof(zeros) ? st.st_size - off
                                                                  : (off_t)sizeof(zeros)));
}

static void other_version(void)
{
    uint32_t v = 99;

    write_at(8, &v, sizeof(v)); /* after the 8-byte magic */
}

static void grown_file(void)
{
    struct stat st;

    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(truncate(path, st.st_size * 2), 0);
}

static void broken_files_reinitialised(void **state)
{
    (void)state;
    broken_file_case(garbage_header, "corrupted");
    broken_file_case(truncate_file, "truncated");
    broken_file_case(zero_file, "corrupted");
    broken_file_case(other_version, "another version");
    broken_file_case(grown_file, "another layout");
}

static int child_holds_40_then_reads(void)
{
    struct egpu_error err = {0};
    struct egpu__vcuda_region *h = NULL;
    uint64_t used = 0;
    int card;

    if (egpu__vcuda_region_open(&h, dir, &err) != 0 ||
        egpu__vcuda_region_card(h, &uuid_a, &card) != 0 ||
        egpu__vcuda_region_reserve(h, card, 40 * MIB, 100 * MIB) != 0)
        return 1;
    child_send('r');
    child_wait(); /* the parent corrupts and re-initialises the region */
    if (egpu__vcuda_region_used(h, card, &used) != 0)
        return 2;
    child_send('u');
    child_wait();
    return 0;
}

static void live_process_registers_again(void **state)
{
    int card, card2;
    struct egpu__vcuda_region *h = open_region(dir, &card), *h2;
    uint64_t gen;
    pid_t pid;

    (void)state;
    assert_int_equal(egpu__vcuda_region_reserve(h, card, 10 * MIB, 100 * MIB), 0);
    gen = egpu__vcuda_region_generation(h);
    pid = spawn(child_holds_40_then_reads);
    assert_int_equal(parent_wait(), 'r');
    assert_int_equal(used_of(h, card), 50 * MIB);
    garbage_header();
    /* a new process finds it corrupted and lays a new generation */
    h2 = open_region(dir, &card2);
    assert_int_equal(log_lines("re-initialising"), 1);
    assert_true(egpu__vcuda_region_generation(h2) != gen);
    parent_send('g');
    assert_int_equal(parent_wait(), 'u'); /* the child has used the region again */
    /* the child's 40 and (through h) this process's 10 are back */
    assert_int_equal(used_of(h, card), 50 * MIB);
    assert_int_equal(used_of(h2, card2), 50 * MIB);
    assert_int_equal(egpu__vcuda_region_reserve(h2, card2, 52 * MIB, 100 * MIB), -ENOMEM);
    parent_send('x');
    assert_int_equal(reap(pid), 0);
    assert_int_equal(log_lines("re-initialising"), 1);
    egpu__vcuda_region_close(h2);
    egpu__vcuda_region_close(h);
}

/* A hostile process zeroes the usage words behind this process's back:
 * its own slot comes back from its ledger at its next call, logged once. */
static void zeroed_usage_repaired_from_ledger(void **state)
{
    int card;
    struct egpu__vcuda_region *h = open_region(dir, &card);

    (void)state;
    assert_int_equal(egpu__vcuda_region_reserve(h, card, 30 * MIB, 100 * MIB), 0);
    assert_int_equal(egpu__vcuda_region_debug_zero_usage(h), 0);
    /* 30 (the ledger) + 80 > 100 */
    assert_int_equal(egpu__vcuda_region_reserve(h, card, 80 * MIB, 100 * MIB), -ENOMEM);
    assert_int_equal(used_of(h, card), 30 * MIB);
    assert_int_equal(egpu__vcuda_region_reserve(h, card, 70 * MIB, 100 * MIB), 0);
    /* a total alone zeroed is recomputed from the slots */
    assert_int_equal(egpu__vcuda_region_debug_set_total(h, card, 0), 0);
    assert_int_equal(used_of(h, card), 100 * MIB);
    assert_int_equal(egpu__vcuda_region_reserve(h, card, 2 * MIB, 100 * MIB), -ENOMEM);
    /* logged once per process at warning level (the second at info) */
    assert_int_equal(log_lines(""), 1);
    assert_int_equal(log_lines("this process's usage was changed behind the interposer's back: "
                               "repaired"),
                     1);
    egpu__vcuda_region_close(h);
}

/* The usage of another, idle process is zeroed too: it cannot be known
 * until that process registers it again, so reservations wait for it
 * (then fail closed) instead of believing the zeros. */
static void zeroed_usage_waits_for_the_others(void **state)
{
    int card;
    struct egpu__vcuda_region *h = open_region(dir, &card);
    pid_t pid;

    (void)state;
    assert_int_equal(egpu__vcuda_region_reserve(h, card, 10 * MIB, 100 * MIB), 0);
    pid = spawn(child_holds_40_then_reads);
    assert_int_equal(parent_wait(), 'r');
    assert_int_equal(egpu__vcuda_region_debug_zero_usage(h), 0);
    /* the child's 40 MiB are unknown now: refused, though 60 would fit */
    assert_int_equal(egpu__vcuda_region_reserve(h, card, 40 * MIB, 100 * MIB), -ENOMEM);
    parent_send('g');
    assert_int_equal(parent_wait(), 'u'); /* the child has used the region again */
    assert_int_equal(used_of(h, card), 50 * MIB);
    assert_int_equal(egpu__vcuda_region_reserve(h, card, 52 * MIB, 100 * MIB), -ENOMEM);
    assert_int_equal(egpu__vcuda_region_reserve(h, card, 50 * MIB, 100 * MIB), 0);
    parent_send('x');
    assert_int_equal(reap(pid), 0);
    egpu__vcuda_region_close(h);
}

/* A symbolic link, hard link or FIFO planted at the region's name: the
 * region cannot be opened (the caller fails closed: no private region),
 * and the link's target is left as it was. */
static void planted_names_refused(void **state)
{
    char victim[160];
    struct egpu__vcuda_region *h = NULL;
    struct egpu_error err = {0};

    (void)state;
    snprintf(victim, sizeof(victim), "%s/victim", dir);
    for (int k = 0; k < 3; k++) {
        tu_plant(path, victim, k);
        assert_true(egpu__vcuda_region_open(&h, dir, &err) < 0);
        assert_non_null(strstr(err.msg, path));
        assert_non_null(strstr(err.msg, k == 0   ? "symbolic link"
                                        : k == 1 ? "other hard links"
                                                 : "not a regular file"));
        tu_victim_intact(victim);
    }
    (void)unlink(path);
    (void)unlink(victim);
}

static void truncated_under_a_live_process(void **state)
{
    int card;
    struct egpu__vcuda_region *h = open_region(dir, &card);
    struct stat st;

    (void)state;
    assert_int_equal(egpu__vcuda_region_reserve(h, card, 10 * MIB, 100 * MIB), 0);
    assert_int_equal(truncate(path, 0), 0);
    /* the next access faults: no death by SIGBUS (sigbus.c), the file is
     * mapped, sized and laid again, and this process's usage registered
     * again */
    assert_int_equal(used_of(h, card), 10 * MIB);
    assert_int_equal(stat(path, &st), 0);
    assert_true(st.st_size > 0);
    assert_int_equal(log_lines("truncated"), 1);
    egpu__vcuda_region_close(h);
}

static void truncated_to_half_under_a_live_process(void **state)
{
    int card;
    struct egpu__vcuda_region *h = open_region(dir, &card);
    struct stat st;
    off_t full;

    (void)state;
    assert_int_equal(egpu__vcuda_region_reserve(h, card, 10 * MIB, 100 * MIB), 0);
    assert_int_equal(stat(path, &st), 0);
    full = st.st_size;
    assert_int_equal(truncate(path, full / 2), 0);
    /* the pages this process uses are still there: the file is looked at
     * within 100 ms, found short, laid again, and the usage registered */
    usleep(150000);
    assert_int_equal(used_of(h, card), 10 * MIB);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, full);
    assert_int_equal(log_lines("truncated"), 1);
    assert_int_equal(egpu__vcuda_region_reserve(h, card, 92 * MIB, 100 * MIB), -ENOMEM);
    egpu__vcuda_region_close(h);
}

static void replaced_under_a_live_process(void **state)
{
    int card;
    struct egpu__vcuda_region *h = open_region(dir, &card);
    struct stat st;

    (void)state;
    assert_int_equal(egpu__vcuda_region_reserve(h, card, 10 * MIB, 100 * MIB), 0);
    assert_int_equal(unlink(path), 0);
    usleep(150000); /* the file is looked at every 100 ms (no system call in between) */
    assert_int_equal(used_of(h, card), 10 * MIB);
    assert_int_equal(stat(path, &st), 0); /* made again, with our usage in it */
    egpu__vcuda_region_close(h);
}

static struct egpu__vcuda_region *fork_region;
static int fork_card;

static int forked_child(void)
{
    struct egpu__vcuda_region *h = fork_region;
    uint64_t used = 0;

    egpu__vcuda_region_atfork_child(h);
    if (egpu__vcuda_region_mine(h, fork_card) != 0)
        return 1; /* the parent's usage is not the child's */
    if (egpu__vcuda_region_reserve(h, fork_card, 50 * MIB, 100 * MIB) != 0)
        return 2;
    if (egpu__vcuda_region_used(h, fork_card, &used) != 0 || used != 80 * MIB)
        return 3; /* the parent's 30 still count */
    if (egpu__vcuda_region_reserve(h, fork_card, 30 * MIB, 100 * MIB) != -ENOMEM)
        return 4;
    return 0; /* dies holding 50 */
}

static void fork_child_starts_empty(void **state)
{
    pid_t pid;

    (void)state;
    fork_region = open_region(dir, &fork_card);
    assert_int_equal(egpu__vcuda_region_reserve(fork_region, fork_card, 30 * MIB, 100 * MIB), 0);
    egpu__vcuda_region_atfork_prepare(fork_region);
    fflush(NULL);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(forked_child());
    egpu__vcuda_region_atfork_parent(fork_region);
    {
        int status = -1;

        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
    }
    assert_int_equal(egpu__vcuda_region_mine(fork_region, fork_card), 30 * MIB);
    assert_int_equal(used_of(fork_region, fork_card), 30 * MIB); /* the child's 50 reclaimed */
    egpu__vcuda_region_close(fork_region);
}

static void proc_start_times(void **state)
{
    uint64_t start = 0, again = 0;
    bool zombie = true;

    (void)state;
    assert_int_equal(egpu__vcuda_proc_start(getpid(), &start, &zombie), 0);
    assert_true(start > 0);
    assert_false(zombie);
    assert_int_equal(egpu__vcuda_proc_start(getpid(), &again, &zombie), 0);
    assert_int_equal(start, again);
    assert_int_equal(egpu__vcuda_proc_start(0x3ffffff0, &start, &zombie), -ENOENT);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, each_setup, each_teardown)
    const struct CMUnitTest tests[] = {
        T(reserve_release_limit),
        T(private_region),
        T(zeroed_usage_repaired_from_ledger),
        T(zeroed_usage_waits_for_the_others),
        T(planted_names_refused),
        T(card_table_full),
        T(dead_process_reclaimed),
        T(owner_died_recomputes),
        T(broken_files_reinitialised),
        T(live_process_registers_again),
        T(truncated_under_a_live_process),
        T(truncated_to_half_under_a_live_process),
        T(replaced_under_a_live_process),
        T(fork_child_starts_empty),
        T(proc_start_times),
    };
#undef T

    return cmocka_run_group_tests(tests, setup, teardown);
}
