/* core/alloc.c - the one allocator: counts live blocks and injects failures.
 *
 * DESIGN: every allocation in the project goes through egpu_malloc and friends
 * (STYLE.md, "one allocator"). Tests read egpu_alloc_live() to prove an
 * operation leaks nothing, and egpu_alloc_fail_after() to drive the
 * out-of-memory path of each function. The counters are the only global state
 * of the core; they are atomics, so replays may run on several threads.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "egpu/core.h"

static atomic_long live_blocks;
static atomic_long fail_countdown; /* 0 = off; 1 = the next allocation fails */

static bool should_fail(void)
{
    long n = atomic_load(&fail_countdown);

    while (n > 0) {
        if (atomic_compare_exchange_weak(&fail_countdown, &n, n - 1))
            return n == 1;
    }
    return false;
}

void *egpu_malloc(size_t size)
{
    void *p;

    if (should_fail())
        return NULL;
    p = malloc(size ? size : 1);
    if (p != NULL)
        atomic_fetch_add(&live_blocks, 1);
    return p;
}

void *egpu_calloc(size_t n, size_t size)
{
    void *p;

    if (should_fail())
        return NULL;
    p = calloc(n ? n : 1, size ? size : 1);
    if (p != NULL)
        atomic_fetch_add(&live_blocks, 1);
    return p;
}

void *egpu_realloc(void *p, size_t size)
{
    void *q;

    if (p == NULL)
        return egpu_malloc(size);
    if (should_fail())
        return NULL;
    q = realloc(p, size ? size : 1);
    return q; /* on failure p is still live and still counted */
}

char *egpu_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = egpu_malloc(n);

    if (d != NULL)
        memcpy(d, s, n);
    return d;
}

void egpu_free(void *p)
{
    if (p == NULL)
        return;
    atomic_fetch_sub(&live_blocks, 1);
    free(p);
}

long egpu_alloc_live(void)
{
    return atomic_load(&live_blocks);
}

void egpu_alloc_fail_after(long nth)
{
    atomic_store(&fail_countdown, nth > 0 ? nth : 0);
}
