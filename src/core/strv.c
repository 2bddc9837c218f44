/* core/strv.c - arrays of C strings (see egpu/core.h). */
#include <string.h>

#include "egpu/core.h"

const char **egpu_strv_copy(const char *const *v, size_t n)
{
    size_t bytes = 0, at;
    const char **out;
    char *text;

    for (size_t i = 0; i < n; i++)
        bytes += strlen(v[i]) + 1;
    out = egpu_malloc(n * sizeof(*out) + bytes + 1);
    if (out == NULL)
        return NULL;
    text = (char *)(out + n);
    at = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(v[i]) + 1;

        memcpy(text + at, v[i], len);
        out[i] = text + at;
        at += len;
    }
    return out;
}

bool egpu_strv_equal(const char *const *a, const char *const *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(a[i], b[i]) != 0)
            return false;
    }
    return true;
}
