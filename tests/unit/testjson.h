/* tests/unit/testjson.h - JSON written readably in the unit tests.
 *
 * Include after testutil.h. Test objects are written with ' for " so they
 * read as they would in a manifest: tu_json("{'kind': 'Pod'}"). */
#ifndef EGPU_TESTJSON_H
#define EGPU_TESTJSON_H

#include <jansson.h>
#include <stdlib.h>

/* text with every ' turned into ", parsed (a NUL escape allowed in
 * strings); a text that is not JSON fails the test. New reference. */
static inline json_t *tu_json(const char *text)
{
    size_t n = strlen(text);
    char *buf = malloc(n + 1);
    json_error_t e;
    json_t *v;

    assert_non_null(buf);
    for (size_t i = 0; i <= n; i++)
        buf[i] = text[i] == '\'' ? '"' : text[i];
    v = json_loads(buf, JSON_ALLOW_NUL, &e);
    free(buf);
    if (v == NULL)
        fail_msg("bad test JSON: %s: %s", e.text, text);
    return v;
}

#endif /* EGPU_TESTJSON_H */
