/* api/names.c - JSON strings as C text, for every reader of API objects. */
#include <string.h>

#include "egpu/api.h"

const char *egpu_api_str(const json_t *v)
{
    const char *s = json_string_value(v);

    /* Objects are decoded with JSON_ALLOW_NUL: a string holding "\u0000" is
     * longer than its C string, and any use as one would read only the front. */
    if (s == NULL || strlen(s) != json_string_length(v))
        return NULL;
    return s;
}

int egpu_api_field_obj(const json_t *o, const char *key, const char *path, const json_t **out,
                       struct egpu_error *err)
{
    const json_t *v = json_object_get(o, key);

    *out = NULL;
    if (v == NULL || json_is_null(v))
        return 0;
    if (!json_is_object(v))
        return egpu_error_set(err, EGPU_ESYNTAX, "%s%s is not an object; allowed: an object", path,
                              key);
    *out = v;
    return 0;
}

int egpu_api_field_text(const json_t *o, const char *key, const char *path, bool required,
                        char *dst, size_t len, struct egpu_error *err)
{
    const json_t *v = json_object_get(o, key);
    const char *s;
    size_t n;

    dst[0] = '\0';
    if (v == NULL || json_is_null(v)) {
        if (required)
            return egpu_error_set(err, EGPU_ESYNTAX, "%s%s is missing; allowed: a string", path,
                                  key);
        return 0;
    }
    s = egpu_api_str(v);
    if (s == NULL)
        return egpu_error_set(err, EGPU_ESYNTAX, "%s%s is not a string; allowed: a string", path,
                              key);
    n = strlen(s);
    if (n >= len)
        return egpu_error_set(err, EGPU_ESYNTAX,
                              "%s%s is %zu bytes long; allowed: at most %zu bytes", path, key, n,
                              len - 1);
    if (required && n == 0)
        return egpu_error_set(err, EGPU_ESYNTAX, "%s%s is empty; allowed: a name", path, key);
    memcpy(dst, s, n + 1);
    return 0;
}
