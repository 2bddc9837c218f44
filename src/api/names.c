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
