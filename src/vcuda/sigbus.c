/* vcuda/sigbus.c - survive the truncation of a mapped shared region.
 *
 * The shared regions (region.c: vcuda-memory.shm, throttle.c:
 * vcuda-core.shm) are files of the allocation directory mapped with
 * MAP_SHARED, writable by every process of the container. When one of them
 * truncates a file, the kernel removes the pages past the new end from every
 * mapping, and the next access of another process to one of them raises
 * SIGBUS, whose default action kills the application. Checking the file
 * before each access cannot prevent it (it can be truncated between the
 * check and the access), and a check costs a system call.
 *
 * DESIGN: a SIGBUS handler that knows the watched ranges. A fault in one of
 * them (si_code BUS_ADRERR, the address inside a watched range) is repaired
 * in the handler: the whole range is replaced (mmap MAP_FIXED, one system
 * call, async-signal-safe on Linux) by private zero-filled memory, the
 * range's fault counter is bumped, and the handler returns, so the access
 * that faulted runs again and completes on zeros. The owner of the range
 * sees the counter (or a header that is now all zeros) at its next use and
 * maps the file again. Nothing is checked on the fast path: the handler
 * runs only when a fault happens. Any other SIGBUS (not ours, or not a
 * truncated mapping) goes to the disposition installed before: its handler,
 * or the default action (the access faults again and the process dies as it
 * would have without us).
 *
 * Installing: sigaction at the first watch, and again at a later watch
 * (mapping a region again) when the application has installed a handler of
 * its own since; ours then passes that handler the SIGBUS that are not
 * ours. A handler of the application that itself calls the one it replaced
 * (ours) would send such a fault back to us: the same fault of the same
 * thread coming back within CHAIN_LOOP_NS gets the default action instead
 * of going round forever.
 *
 * Limits: between an application's sigaction and our next watch, a handler
 * of its own that does not call the previous one takes the protection away
 * (a truncation then kills the process, as it would without the
 * interposer). Ranges are few (EGPU_VCUDA_SIGBUS_MAX). A watched range must
 * stay mapped until it is unwatched (the handler maps over it).
 */
#define _GNU_SOURCE /* MAP_ANONYMOUS, BUS_ADRERR */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "vcuda_int.h"

#define CHAIN_LOOP_NS 100000000ULL /* 100 ms: a fault back this soon is a loop */

struct watch {
    _Atomic uintptr_t base; /* 0: free; published last */
    _Atomic size_t bytes;
    atomic_uint *_Atomic faults;
};

static struct watch watches[EGPU_VCUDA_SIGBUS_MAX];
static pthread_mutex_t watch_mu = PTHREAD_MUTEX_INITIALIZER; /* writers, installing */
/* The disposition before ours: two copies, so that installing again
 * (install) never changes the one a running handler reads. */
static struct sigaction prev_actions[2];
static atomic_uint prev_cur;
/* The fault being handed to another handler (to tell a loop back to us). */
static _Atomic pid_t chain_tid;
static _Atomic uintptr_t chain_addr;
static _Atomic uint64_t chain_ns;

/* The default action: a fault repeats when the handler returns and then
 * kills the process; a signal that was sent is sent again. */
static void default_action(int sig, const siginfo_t *si)
{
    struct sigaction dfl;

    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    (void)sigaction(sig, &dfl, NULL);
    if (si == NULL || si->si_code <= 0)
        (void)raise(sig);
}

/* Hand sig to the disposition installed before ours. */
static void chain(int sig, siginfo_t *si, void *uc)
{
    const struct sigaction *prev =
        &prev_actions[atomic_load_explicit(&prev_cur, memory_order_acquire) & 1];

    if ((prev->sa_flags & SA_SIGINFO) && prev->sa_sigaction != NULL) {
        prev->sa_sigaction(sig, si, uc);
        return;
    }
    if (prev->sa_handler != SIG_DFL && prev->sa_handler != SIG_IGN) {
        prev->sa_handler(sig);
        return;
    }
    if (prev->sa_handler == SIG_IGN && (si == NULL || si->si_code <= 0))
        return; /* sent by kill or raise: ignored, as before */
    default_action(sig, si);
}

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
    int saved = errno;

    if (si != NULL && si->si_code == BUS_ADRERR) {
        uintptr_t a = (uintptr_t)si->si_addr;

        for (unsigned i = 0; i < EGPU_VCUDA_SIGBUS_MAX; i++) {
            uintptr_t base = atomic_load_explicit(&watches[i].base, memory_order_acquire);
            size_t bytes = atomic_load_explicit(&watches[i].bytes, memory_order_relaxed);

            if (base == 0 || a < base || a - base >= bytes)
                continue;
            if (mmap((void *)base, bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
                break; /* cannot repair it: as if we were not here */
            atomic_fetch_add_explicit(
                atomic_load_explicit(&watches[i].faults, memory_order_relaxed), 1,
                memory_order_release);
            errno = saved;
            return; /* the access runs again, on zeros */
        }
    }
    /* A handler installed after ours that calls the one it replaced calls
     * us again when we were installed once more on top of it (install): the
     * same fault of the same thread coming back at once is that loop, and
     * gets the default action. (A handler that leaves with siglongjmp never
     * clears the record: hence the time.) */
    {
        pid_t tid = (pid_t)syscall(SYS_gettid);
        uintptr_t addr = si != NULL ? (uintptr_t)si->si_addr : 0;
        struct timespec ts;
        uint64_t now;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        now = (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
        if (atomic_load(&chain_tid) == tid && atomic_load(&chain_addr) == addr &&
            now - atomic_load(&chain_ns) < CHAIN_LOOP_NS) {
            errno = saved;
            default_action(sig, si);
            return;
        }
        atomic_store(&chain_ns, now);
        atomic_store(&chain_addr, addr);
        atomic_store(&chain_tid, tid);
        errno = saved;
        chain(sig, si, uc);
        atomic_store(&chain_tid, 0);
    }
}

/* Make on_sigbus the SIGBUS handler, unless it is (watch_mu held): at the
 * first watch, and again at a later one if the application installed
 * another handler since (which then gets the SIGBUS that are not ours).
 * Returns 0 or -errno. */
static int install(void)
{
    unsigned next = (atomic_load_explicit(&prev_cur, memory_order_relaxed) + 1) & 1;
    struct sigaction cur, sa;

    /* Read the old disposition first, so the handler never sees it half set. */
    if (sigaction(SIGBUS, NULL, &cur) != 0)
        return -errno;
    if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_sigbus)
        return 0;
    prev_actions[next] = cur;
    atomic_store_explicit(&prev_cur, next, memory_order_release);
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    return sigaction(SIGBUS, &sa, NULL) == 0 ? 0 : -errno;
}

int egpu__vcuda_sigbus_watch(void *base, size_t bytes, atomic_uint *faults)
{
    long page = sysconf(_SC_PAGESIZE);
    size_t rounded;
    int rc;

    if (base == NULL || bytes == 0 || faults == NULL || page <= 0 ||
        (uintptr_t)base % (uintptr_t)page != 0)
        return -EINVAL;
    rounded = (bytes + (size_t)page - 1) / (size_t)page * (size_t)page;
    pthread_mutex_lock(&watch_mu);
    rc = install();
    if (rc == 0)
        rc = -ENOSPC;
    for (unsigned i = 0; rc == -ENOSPC && i < EGPU_VCUDA_SIGBUS_MAX; i++) {
        if (atomic_load_explicit(&watches[i].base, memory_order_relaxed) != 0)
            continue;
        atomic_store_explicit(&watches[i].bytes, rounded, memory_order_relaxed);
        atomic_store_explicit(&watches[i].faults, faults, memory_order_relaxed);
        atomic_store_explicit(&watches[i].base, (uintptr_t)base, memory_order_release);
        rc = 0;
    }
    pthread_mutex_unlock(&watch_mu);
    return rc;
}

void egpu__vcuda_sigbus_unwatch(void *base)
{
    if (base == NULL)
        return;
    pthread_mutex_lock(&watch_mu);
    for (unsigned i = 0; i < EGPU_VCUDA_SIGBUS_MAX; i++) {
        if (atomic_load_explicit(&watches[i].base, memory_order_relaxed) == (uintptr_t)base)
            atomic_store_explicit(&watches[i].base, 0, memory_order_release);
    }
    pthread_mutex_unlock(&watch_mu);
}
