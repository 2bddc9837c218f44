/* core/error.c - error codes and the error record that travels with a call.
 *
 * Codes are 0, -errno, or EGPU_E* (all negative). struct egpu_error holds the
 * code and one line of detail; setting it never allocates, so an out-of-memory
 * path can still report itself.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "egpu/core.h"

const char *egpu_strerror(int code)
{
    switch (code) {
    case 0:
        return "success";
    case EGPU_ENOFIT:
        return "no node or card satisfies the request";
    case EGPU_ENOTALLOC:
        return "pod holds no allocation";
    case EGPU_EALLOCATED:
        return "pod already holds an allocation";
    case EGPU_ESYNTAX:
        return "malformed input";
    case EGPU_ERANGE:
        return "value out of range";
    case EGPU_ELIMIT:
        return "limit exceeded";
    default:
        break;
    }
    if (code < 0 && code > -4096)
        return strerror(-code);
    return "unknown error";
}

int egpu_error_set(struct egpu_error *err, int code, const char *fmt, ...)
{
    va_list ap;

    if (err == NULL)
        return code;
    err->code = code;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    va_end(ap);
    return code;
}

int egpu_error_errno(struct egpu_error *err, const char *fmt, ...)
{
    int e = errno != 0 ? errno : EIO;
    size_t n;
    va_list ap;

    if (err == NULL)
        return -e;
    err->code = -e;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    va_end(ap);
    n = strlen(err->msg);
    if (n + 3 < sizeof(err->msg)) {
        memcpy(err->msg + n, ": ", 3);
        int r = strerror_r(e, err->msg + n + 2, sizeof(err->msg) - n - 2);

        if (r != 0 && r != ERANGE) /* ERANGE: the text, cut to fit */
            snprintf(err->msg + n + 2, sizeof(err->msg) - n - 2, "error %d", e);
    }
    return -e;
}

int egpu_error_prefix(struct egpu_error *err, int code, const char *fmt, ...)
{
    char head[EGPU_ERRMSG_MAX];
    size_t hl, tl;
    va_list ap;

    if (err == NULL)
        return code;
    err->code = code;
    va_start(ap, fmt);
    vsnprintf(head, sizeof(head), fmt, ap);
    va_end(ap);
    /* "head: old message", cut to fit; the old message moves right. */
    hl = strlen(head);
    if (hl > sizeof(err->msg) - 3)
        hl = sizeof(err->msg) - 3;
    tl = strnlen(err->msg, sizeof(err->msg) - 1);
    if (hl + 2 + tl > sizeof(err->msg) - 1)
        tl = sizeof(err->msg) - 1 - hl - 2;
    memmove(err->msg + hl + 2, err->msg, tl);
    memcpy(err->msg, head, hl);
    err->msg[hl] = ':';
    err->msg[hl + 1] = ' ';
    err->msg[hl + 2 + tl] = '\0';
    return code;
}
