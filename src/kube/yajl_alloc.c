/* kube/yajl_alloc.c - the allocator every yajl parser of the project uses.
 *
 * yajl does not check what its allocator returns (its buffers write to the
 * new block at once), so a failed allocation cannot be handed back to it:
 * the process stops with a log line instead of writing through NULL. Its
 * blocks come from malloc, not egpu_malloc, so an injected failure
 * (egpu_alloc_fail_after) never reaches yajl.
 */
#include <stdlib.h>

#include "egpu/kube.h"
#include "egpu/log.h"

static void *y_check(void *p, size_t sz)
{
    if (p == NULL) {
        egpu_log(EGPU_LOG_ERROR, "out of memory in the JSON library bytes=%zu", sz);
        abort();
    }
    return p;
}

static void *y_malloc(void *ctx, size_t sz)
{
    (void)ctx;
    return y_check(malloc(sz), sz);
}

static void *y_realloc(void *ctx, void *p, size_t sz)
{
    (void)ctx;
    return y_check(realloc(p, sz), sz);
}

static void y_free(void *ctx, void *p)
{
    (void)ctx;
    free(p);
}

yajl_alloc_funcs egpu_kube_yajl_alloc(void)
{
    return (yajl_alloc_funcs){.malloc = y_malloc, .realloc = y_realloc, .free = y_free};
}
