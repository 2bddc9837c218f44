/* core/buf.c - bounded, growable byte buffers (see struct egpu_buf).
 *
 * Capacity doubles as the buffer grows, capped at max + 1 (room for the NUL),
 * so appending is amortised O(1) and never exceeds the caller's bound.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "egpu/core.h"

void egpu_buf_init(struct egpu_buf *b, size_t max)
{
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    b->max = max;
}

static int reserve(struct egpu_buf *b, size_t n)
{
    size_t need, cap;
    char *p;

    if (n > b->max - b->len)
        return -EMSGSIZE;
    need = b->len + n + 1;
    if (need <= b->cap)
        return 0;
    cap = b->cap ? b->cap : 256;
    while (cap < need)
        cap *= 2;
    if (cap > b->max + 1)
        cap = b->max + 1;
    p = egpu_realloc(b->data, cap);
    if (p == NULL)
        return -ENOMEM;
    b->data = p;
    b->cap = cap;
    return 0;
}

int egpu_buf_append(struct egpu_buf *b, const void *p, size_t n)
{
    int rc = reserve(b, n);

    if (rc)
        return rc;
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int egpu_buf_printf(struct egpu_buf *b, const char *fmt, ...)
{
    va_list ap;
    int n, rc;

    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return -EINVAL;
    rc = reserve(b, (size_t)n);
    if (rc)
        return rc;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

const char *egpu_buf_str(const struct egpu_buf *b)
{
    return b->data ? b->data : "";
}

void egpu_buf_reset(struct egpu_buf *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

void egpu_buf_free(struct egpu_buf *b)
{
    egpu_free(b->data);
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
}

char *egpu_buf_take(struct egpu_buf *b)
{
    char *p = b->data;

    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    return p;
}
