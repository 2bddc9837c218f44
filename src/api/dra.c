/* api/dra.c - DRA mode's claims: what a pod's elasticgpu.io request becomes
 * as a ResourceClaimTemplate (resource.k8s.io/v1), its name, and the CEL
 * strings that go into its selectors.
 *
 * The webhook turns each GPU container's ask into one ResourceClaimSpec
 * (egpu_api_dra_claim_spec) and names its template after the spec's content
 * (egpu_api_dra_template_name), so equal asks share one template per
 * namespace and a name never has to be looked up or stored anywhere else:
 * the controller that creates the template, and anyone who checks it, can
 * compute the same name from the same spec.
 *
 * DESIGN: a tenant writes the text that ends up in a CEL expression (the
 * elasticgpu.io/gpu-model annotation), and kube-scheduler evaluates that
 * expression for every device of the cluster. So such text only ever enters
 * CEL through egpu_api_cel_quote, which makes one double-quoted string
 * literal of printable ASCII in which every other character, the quote and
 * the backslash are escapes: nothing the tenant writes can end the literal
 * (tests/integration/test_dra_cel.py evaluates the result with a real CEL
 * library). Text that is not valid UTF-8 is refused: CEL strings are
 * Unicode, and a byte that is no character has no literal.
 *
 * Units: cores in percent of one card (1..99 for a share), memory in MiB
 * written as a Quantity "<n>Mi"; whole cards are counted. Wire facts:
 * ../shared/k8s-wire/dra/dra_notes.md sections 4, 5 and 7.
 */
#include <errno.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <stdio.h>
#include <string.h>

#include "egpu/api.h"

/* The escaped form of a string of at most EGPU_API_CEL_TEXT_MAX bytes: at
 * most 10 characters (\UXXXXXXXX) per 4-byte character, 4 (\xXX) per byte,
 * plus the quotes. */
#define QUOTED_MAX (EGPU_API_CEL_TEXT_MAX * 4 + 3)

/* The code point of the UTF-8 sequence at s[0..len), its length in *n;
 * -1 when it is not a well-formed sequence (RFC 3629: no overlong forms,
 * no surrogates, nothing past U+10FFFF). */
static long utf8_next(const unsigned char *s, size_t len, size_t *n)
{
    unsigned char c = s[0];
    size_t need;
    long cp, min;

    if (c < 0x80) {
        *n = 1;
        return c;
    }
    if (c >= 0xc2 && c <= 0xdf) {
        need = 2;
        cp = c & 0x1f;
        min = 0x80;
    } else if (c >= 0xe0 && c <= 0xef) {
        need = 3;
        cp = c & 0x0f;
        min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
        need = 4;
        cp = c & 0x07;
        min = 0x10000;
    } else {
        return -1;
    }
    if (len < need)
        return -1;
    for (size_t i = 1; i < need; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return -1;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return -1;
    *n = need;
    return cp;
}

static int quote_char(struct egpu_buf *b, long cp)
{
    switch (cp) {
    case '"':
        return egpu_buf_append(b, "\\\"", 2);
    case '\\':
        return egpu_buf_append(b, "\\\\", 2);
    case '\n':
        return egpu_buf_append(b, "\\n", 2);
    case '\r':
        return egpu_buf_append(b, "\\r", 2);
    case '\t':
        return egpu_buf_append(b, "\\t", 2);
    default:
        break;
    }
    if (cp >= 0x20 && cp < 0x7f) {
        char c = (char)cp;

        return egpu_buf_append(b, &c, 1);
    }
    if (cp < 0x80) /* \x only where byte and code point agree */
        return egpu_buf_printf(b, "\\x%02X", (unsigned)cp);
    if (cp < 0x10000)
        return egpu_buf_printf(b, "\\u%04X", (unsigned)cp);
    return egpu_buf_printf(b, "\\U%08X", (unsigned)cp);
}

/* Append s[0..len) to b as a CEL string literal. */
static int quote_into(struct egpu_buf *b, const char *s, size_t len, struct egpu_error *err)
{
    const unsigned char *u = (const unsigned char *)s;
    int rc;

    if (len > EGPU_API_CEL_TEXT_MAX)
        return egpu_error_set(err, EGPU_ERANGE,
                              "text of %zu bytes for a CEL string; allowed: at most %d bytes", len,
                              EGPU_API_CEL_TEXT_MAX);
    rc = egpu_buf_append(b, "\"", 1);
    for (size_t i = 0; !rc && i < len;) {
        size_t n;
        long cp = utf8_next(u + i, len - i, &n);

        if (cp < 0)
            return egpu_error_set(err, EGPU_ESYNTAX,
                                  "byte %zu (0x%02X) of the text is not valid UTF-8; allowed: "
                                  "UTF-8 text",
                                  i, u[i]);
        rc = quote_char(b, cp);
        i += n;
    }
    if (!rc)
        rc = egpu_buf_append(b, "\"", 1);
    return rc == 0 ? 0 : -ENOMEM; /* -EMSGSIZE cannot be: QUOTED_MAX holds the worst case */
}

int egpu_api_cel_quote(const char *s, size_t len, char **out, struct egpu_error *err)
{
    struct egpu_buf b;
    int rc;

    egpu_buf_init(&b, QUOTED_MAX);
    rc = quote_into(&b, s, len, err);
    if (rc) {
        egpu_buf_free(&b);
        return rc;
    }
    *out = egpu_buf_take(&b);
    return *out != NULL ? 0 : -ENOMEM;
}

size_t egpu_api_dra_attr_len(const char *s, size_t len)
{
    if (len <= EGPU_API_DRA_ATTR_STRING_MAX)
        return len;
    len = EGPU_API_DRA_ATTR_STRING_MAX;
    while (len > 0 && ((unsigned char)s[len] & 0xC0) == 0x80)
        len--; /* s[len] continues a character: end before it */
    return len;
}

int egpu_api_dra_model_selector(const char *models, char **out, struct egpu_error *err)
{
    struct egpu_buf b;
    const char *p = models;
    bool first = true;
    int rc;

    if (models == NULL || models[0] == '\0')
        return egpu_error_set(err, EGPU_ERANGE,
                              "annotation " EGPU_ANN_GPU_MODEL " is empty; allowed: GPU models "
                              "separated by '|'");
    /* Test for the attribute first: a device without it would make the
     * expression fail, and a failed selector aborts the pod's allocation. */
    egpu_buf_init(&b, 16 * 1024); /* the API server's limit is 10 KiB: checked below */
    rc = egpu_buf_printf(
        &b, "has(device.attributes[\"" EGPU_API_DRA_DRIVER "\"]." EGPU_API_DRA_ATTR_MODEL
            ") && device.attributes[\"" EGPU_API_DRA_DRIVER "\"]." EGPU_API_DRA_ATTR_MODEL " in [");
    while (!rc) {
        const char *bar = strchr(p, '|');
        size_t len = bar != NULL ? (size_t)(bar - p) : strlen(p);

        if (len == 0) {
            egpu_buf_free(&b);
            return egpu_error_set(err, EGPU_ERANGE,
                                  "annotation " EGPU_ANN_GPU_MODEL " names an empty model; "
                                  "allowed: GPU models separated by '|'");
        }
        /* The slice holds the model cut as the API's limit makes every
         * string attribute (src/agent/dra_slice.c): match that. */
        len = egpu_api_dra_attr_len(p, len);
        if (!first)
            rc = egpu_buf_append(&b, ", ", 2);
        if (!rc)
            rc = quote_into(&b, p, len, err);
        if (rc == EGPU_ESYNTAX || rc == EGPU_ERANGE) {
            char why[EGPU_ERRMSG_MAX];

            snprintf(why, sizeof(why), "%s", err->msg); /* err is rewritten below */
            egpu_buf_free(&b);
            return egpu_error_set(err, rc, "annotation " EGPU_ANN_GPU_MODEL ": %s", why);
        }
        first = false;
        if (bar == NULL)
            break;
        p = bar + 1;
    }
    if (!rc)
        rc = egpu_buf_append(&b, "]", 1);
    if (!rc && b.len > EGPU_API_CEL_EXPR_MAX)
        rc = egpu_error_set(err, EGPU_ERANGE,
                            "annotation " EGPU_ANN_GPU_MODEL " makes a CEL selector of %zu "
                            "bytes; allowed: at most %d",
                            b.len, EGPU_API_CEL_EXPR_MAX);
    else if (rc)
        rc = -ENOMEM;
    if (rc) {
        egpu_buf_free(&b);
        return rc;
    }
    *out = egpu_buf_take(&b);
    return *out != NULL ? 0 : -ENOMEM;
}

int egpu_api_dra_claim_spec(const struct egpu_api_gpu_ask *ask, const char *models, json_t **out,
                            struct egpu_error *err)
{
    bool share = ask->core_pct >= 1 && ask->core_pct <= 99;
    json_t *spec, *exactly, *sel = NULL;
    char *expr = NULL;
    char q[32];
    int rc;

    if (!share && (ask->core_pct < 100 || ask->core_pct % 100 != 0 ||
                   ask->core_pct / 100 > EGPU_API_DRA_COUNT_MAX))
        return egpu_error_set(err, EGPU_ERANGE,
                              EGPU_RES_GPU_CORE
                              " is %lld; allowed: 1..99 to share one card, or "
                              "a multiple of 100 for whole cards, at most %d cards",
                              (long long)ask->core_pct, EGPU_API_DRA_COUNT_MAX);
    if (ask->has_mem && (!share || ask->mem_mib < 1 || ask->mem_mib > EGPU_API_GPU_MIB_MAX))
        return egpu_error_set(err, EGPU_ERANGE,
                              EGPU_RES_GPU_MEMORY " is %lld; allowed: 1..%lld MiB, with a share "
                                                  "of one card only",
                              (long long)ask->mem_mib, (long long)EGPU_API_GPU_MIB_MAX);
    if (models != NULL && models[0] != '\0') {
        rc = egpu_api_dra_model_selector(models, &expr, err);
        if (rc)
            return rc;
    }
    exactly =
        json_pack("{s:s, s:s, s:I}", "deviceClassName",
                  share ? EGPU_API_DRA_CLASS_SHARE : EGPU_API_DRA_CLASS_WHOLE, "allocationMode",
                  "ExactCount", "count", (json_int_t)(share ? 1 : ask->core_pct / 100));
    spec = json_pack("{s:{s:[{s:s, s:o}]}}", "devices", "requests", "name", EGPU_API_DRA_REQUEST,
                     "exactly", exactly);
    rc = spec == NULL ? -ENOMEM : 0;
    if (!rc && share) {
        json_t *req = json_object();

        snprintf(q, sizeof(q), "%lld", (long long)ask->core_pct);
        if (req == NULL ||
            json_object_set_new(exactly, "capacity", json_pack("{s:o}", "requests", req)) != 0 ||
            json_object_set_new(req, EGPU_API_DRA_CAP_CORES, json_string(q)) != 0)
            rc = -ENOMEM;
        snprintf(q, sizeof(q), "%lldMi", (long long)ask->mem_mib);
        if (!rc && ask->has_mem &&
            json_object_set_new(req, EGPU_API_DRA_CAP_MEMORY, json_string(q)))
            rc = -ENOMEM;
    }
    if (!rc && expr != NULL) {
        sel = json_pack("[{s:{s:s}}]", "cel", "expression", expr);
        if (sel == NULL || json_object_set_new(exactly, "selectors", sel) != 0)
            rc = -ENOMEM;
    }
    /* Whole cards: each device once. A device that allows several
     * allocations could otherwise be handed to one request twice
     * (KEP-5075); its full default consumption forbids that already, and
     * the constraint says so to the allocator up front. */
    if (!rc && !share && ask->core_pct > 100 &&
        json_object_set_new(json_object_get(spec, "devices"), "constraints",
                            json_pack("[{s:[s], s:s}]", "requests", EGPU_API_DRA_REQUEST,
                                      "distinctAttribute",
                                      EGPU_API_DRA_DRIVER "/" EGPU_API_DRA_ATTR_UUID)) != 0)
        rc = -ENOMEM;
    egpu_free(expr);
    if (rc) {
        json_decref(spec);
        return rc;
    }
    *out = spec;
    return 0;
}

int egpu_api_dra_template_name(const json_t *spec, char out[EGPU_API_DRA_TEMPLATE_NAME_MAX],
                               struct egpu_error *err)
{
    unsigned char digest[32];
    char *text;
    int rc;

    if (!json_is_object(spec))
        return egpu_error_set(err, EGPU_ESYNTAX, "claim spec is not a JSON object");
    text = json_dumps(spec, JSON_COMPACT | JSON_SORT_KEYS);
    if (text == NULL)
        return -ENOMEM;
    rc = gnutls_hash_fast(GNUTLS_DIG_SHA256, text, strlen(text), digest);
    free(text); /* json_dumps allocates with jansson's allocator (malloc) */
    if (rc < 0)
        return egpu_error_set(err, -EIO, "SHA-256 of the claim spec: %s", gnutls_strerror(rc));
    memcpy(out, EGPU_API_DRA_TEMPLATE_PREFIX, sizeof(EGPU_API_DRA_TEMPLATE_PREFIX) - 1);
    for (size_t i = 0; i < 16; i++)
        snprintf(out + sizeof(EGPU_API_DRA_TEMPLATE_PREFIX) - 1 + 2 * i, 3, "%02x", digest[i]);
    return 0;
}

int egpu_api_dra_object_name(const char *name, char *buf, size_t len)
{
    int n = snprintf(buf, len, "%s%s", EGPU_API_DRA_OBJECT_PREFIX, name);

    if (n < 0 || (size_t)n >= len || n > EGPU_K8S_NAME_MAX - 1)
        return -ENAMETOOLONG;
    return 0;
}
