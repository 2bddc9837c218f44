/* tests/tools/dra_claims.c - src/api's DRA claim functions (src/api/dra.c)
 * on the command line, for tests/integration/test_dra_cel.py (test code,
 * never shipped).
 *
 *   egpu-dra-claims < cases.json
 *
 * stdin: {"quote": ["<hex>", ...], "selectors": ["<hex>", ...],
 *         "specs": [{"core": N, "memory": M (0: none), "models": "<hex>"}, ...]}
 * Text is hex-encoded bytes, so invalid UTF-8 can be given. stdout, one
 * result per case in order:
 *   {"quote": [{"ok": true, "literal": "..."} or {"ok": false, "error": "..."}],
 *    "selectors": [{"ok": true, "expression": "..."} or {"ok": false, "error": ...}],
 *    "specs": [{"ok": true, "spec": {...}, "name": "egpu-..."} or {"ok": false, ...}]}
 * Exit status 0, or 2 for input that is not the JSON above.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "egpu/api.h"

/* hex into buf (at most max bytes); its length, or -1. */
static long unhex(const char *hex, char *buf, size_t max)
{
    size_t n = hex != NULL ? strlen(hex) : 0;

    if (hex == NULL || n % 2 != 0 || n / 2 >= max)
        return -1;
    for (size_t i = 0; i < n / 2; i++) {
        unsigned v;

        if (sscanf(hex + 2 * i, "%2x", &v) != 1)
            return -1;
        buf[i] = (char)v;
    }
    buf[n / 2] = '\0';
    return (long)(n / 2);
}

static json_t *result(int rc, const char *key, json_t *value, const struct egpu_error *err)
{
    if (rc != 0)
        return json_pack("{s:b, s:s}", "ok", 0, "error", err->msg);
    return json_pack("{s:b, s:o}", "ok", 1, key, value);
}

int main(void)
{
    json_t *in = json_loadf(stdin, 0, NULL), *out, *list, *c;
    static char buf[8192];
    size_t i;

    if (!json_is_object(in))
        return 2;
    out = json_pack("{s:[], s:[], s:[]}", "quote", "selectors", "specs");
    json_array_foreach(json_object_get(in, "quote"), i, c)
    {
        struct egpu_error err = {0};
        long n = unhex(json_string_value(c), buf, sizeof(buf));
        char *lit = NULL;
        int rc;

        if (n < 0)
            return 2;
        rc = egpu_api_cel_quote(buf, (size_t)n, &lit, &err);
        json_array_append_new(json_object_get(out, "quote"),
                              result(rc, "literal", rc ? NULL : json_string(lit), &err));
        egpu_free(lit);
    }
    json_array_foreach(json_object_get(in, "selectors"), i, c)
    {
        struct egpu_error err = {0};
        char *expr = NULL;
        int rc;

        if (unhex(json_string_value(c), buf, sizeof(buf)) < 0)
            return 2;
        rc = egpu_api_dra_model_selector(buf, &expr, &err);
        json_array_append_new(json_object_get(out, "selectors"),
                              result(rc, "expression", rc ? NULL : json_string(expr), &err));
        egpu_free(expr);
    }
    list = json_object_get(out, "specs");
    json_array_foreach(json_object_get(in, "specs"), i, c)
    {
        struct egpu_api_gpu_ask ask = {
            .core_pct = json_integer_value(json_object_get(c, "core")),
            .mem_mib = json_integer_value(json_object_get(c, "memory")),
        };
        char name[EGPU_API_DRA_TEMPLATE_NAME_MAX];
        struct egpu_error err = {0};
        json_t *spec = NULL, *r;
        int rc;

        ask.has_mem = ask.mem_mib > 0;
        if (unhex(json_string_value(json_object_get(c, "models")), buf, sizeof(buf)) < 0)
            return 2;
        rc = egpu_api_dra_claim_spec(&ask, buf, &spec, &err);
        if (!rc)
            rc = egpu_api_dra_template_name(spec, name, &err);
        r = result(rc, "spec", rc ? NULL : json_incref(spec), &err);
        if (!rc)
            json_object_set_new(r, "name", json_string(name));
        json_array_append_new(list, r);
        json_decref(spec);
    }
    json_dumpf(out, stdout, JSON_COMPACT);
    json_decref(out);
    json_decref(in);
    return 0;
}
