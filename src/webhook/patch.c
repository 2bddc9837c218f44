/* webhook/patch.c - RFC 6902 JSON Patch for the mutating webhook.
 *
 * The mutating rules never write operations by hand: they change a copy of the
 * part of the object they own (the pod template's metadata and spec) with the
 * shared conversion code, and egpu__webhook_patch_diff turns the difference
 * into operations. So the patch does exactly what the conversion did, names
 * only the fields that changed (the API server applies it to the object as
 * stored, so nothing we do not own is dropped or reordered), and a second pass
 * over the patched object (reinvocationPolicy: IfNeeded) finds no difference
 * and makes no patch.
 *
 * DESIGN: pointers follow RFC 6901 (a key's "~" is written "~0" and its "/"
 * "~1"; so elasticgpu.io/gpu-core is .../elasticgpu.io~1gpu-core). A key
 * added under an object that does not exist yet is added with that object
 * whole (an "add" of /metadata/annotations/x fails when annotations is
 * absent, admission_notes.md). Existing members are changed with "replace",
 * which, unlike "add", means the same for an array element. Subtrees are
 * compared with json_equal before anything is walked, so the cost is the
 * size of what changed plus one comparison per level.
 *
 * egpu__webhook_patch_apply is the inverse, as the API server runs it (add,
 * remove, replace): the tests and the fuzzer apply every patch to the object
 * it was made for and check the result.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "webhook_int.h"

#define POINTER_BYTES_MAX (64 * 1024) /* one path's text */

int egpu__webhook_pointer_text(const struct egpu__webhook_pointer *p, struct egpu_buf *out)
{
    int rc = 0;

    for (size_t i = 0; rc == 0 && i < p->n; i++) {
        const char *s = p->seg[i];

        rc = egpu_buf_append(out, "/", 1);
        while (rc == 0 && *s != '\0') {
            size_t run = strcspn(s, "~/");

            rc = egpu_buf_append(out, s, run);
            s += run;
            if (rc == 0 && *s != '\0') {
                rc = egpu_buf_append(out, *s == '~' ? "~0" : "~1", 2);
                s++;
            }
        }
    }
    return rc;
}

/* Append {"op":op,"path":<at>[,"value":value]} to ops; value is stolen. */
static int add_op(json_t *ops, const char *op, const struct egpu__webhook_pointer *at,
                  json_t *value)
{
    struct egpu_buf path;
    json_t *o = NULL;
    int rc;

    egpu_buf_init(&path, POINTER_BYTES_MAX);
    rc = egpu__webhook_pointer_text(at, &path);
    if (rc == 0) {
        o = json_object();
        if (o == NULL || json_object_set_new(o, "op", json_string(op)) ||
            json_object_set_new(o, "path", json_stringn(egpu_buf_str(&path), path.len)) ||
            (value != NULL && json_object_set(o, "value", value)) || json_array_append(ops, o))
            rc = -ENOMEM;
    }
    json_decref(o);
    json_decref(value);
    egpu_buf_free(&path);
    return rc == -EMSGSIZE ? -ENOMEM : rc;
}

static int add_copy(json_t *ops, const char *op, const struct egpu__webhook_pointer *at,
                    const json_t *v)
{
    json_t *copy = json_deep_copy(v);

    return copy == NULL ? -ENOMEM : add_op(ops, op, at, copy);
}

int egpu__webhook_patch_diff(json_t *ops, struct egpu__webhook_pointer *at, const json_t *old,
                             const json_t *new)
{
    const char *key;
    json_t *v;
    int rc = 0;

    if (old == NULL)
        return add_copy(ops, "add", at, new);
    if (json_equal(old, new))
        return 0;
    if (at->n < EGPU_WEBHOOK_PATH_MAX && json_is_object(old) && json_is_object(new)) {
        size_t depth = at->n++;

        json_object_foreach((json_t *)old, key, v)
        {
            if (json_object_get(new, key) != NULL)
                continue;
            at->seg[depth] = key;
            rc = add_op(ops, "remove", at, NULL);
            if (rc)
                break;
        }
        json_object_foreach((json_t *)new, key, v)
        {
            if (rc)
                break;
            at->seg[depth] = key;
            rc = egpu__webhook_patch_diff(ops, at, json_object_get(old, key), v);
        }
        at->n = depth;
        return rc;
    }
    if (at->n < EGPU_WEBHOOK_PATH_MAX && json_is_array(old) && json_is_array(new) &&
        json_array_size(old) == json_array_size(new)) {
        size_t depth = at->n++;

        for (size_t i = 0; rc == 0 && i < json_array_size(new); i++) {
            snprintf(at->idx[depth], sizeof(at->idx[depth]), "%zu", i);
            at->seg[depth] = at->idx[depth];
            rc = egpu__webhook_patch_diff(ops, at, json_array_get(old, i), json_array_get(new, i));
        }
        at->n = depth;
        return rc;
    }
    return add_copy(ops, "replace", at, new);
}

/* ------------------------------------------------------------------------ */
/* Applying a patch                                                         */

/* The next reference token of *p (after its '/'), unescaped into tok
 * (len bytes). Returns 0, or -EINVAL (no '/', a bad escape, too long). */
static int next_token(const char **p, char *tok, size_t len)
{
    const char *s = *p;
    size_t n = 0;

    if (*s != '/')
        return -EINVAL;
    for (s++; *s != '\0' && *s != '/'; s++) {
        char c = *s;

        if (c == '~') {
            if (s[1] != '0' && s[1] != '1')
                return -EINVAL;
            c = s[1] == '0' ? '~' : '/';
            s++;
        }
        if (n + 1 >= len)
            return -EINVAL;
        tok[n++] = c;
    }
    tok[n] = '\0';
    *p = s;
    return 0;
}

/* An array index token: digits without a leading zero, below max. */
static int array_index(const char *tok, size_t max, size_t *out)
{
    size_t v = 0;

    if (tok[0] == '\0' || (tok[0] == '0' && tok[1] != '\0'))
        return -EINVAL;
    for (const char *c = tok; *c != '\0'; c++) {
        if (*c < '0' || *c > '9' || v > max)
            return -EINVAL;
        v = v * 10 + (size_t)(*c - '0');
    }
    if (v > max)
        return -EINVAL;
    *out = v;
    return 0;
}

static int apply_at(json_t *parent, const char *name, const char *tok, json_t *value);

static int apply_one(json_t *doc, const json_t *op)
{
    const char *name = json_string_value(json_object_get(op, "op"));
    const char *path = json_string_value(json_object_get(op, "path"));
    json_t *value = json_object_get(op, "value");
    json_t *parent = doc;
    int rc;
    char tok[1024];
    size_t i;

    if (name == NULL || path == NULL || path[0] == '\0')
        return -EINVAL; /* the whole document is never ours to replace */
    if (strcmp(name, "remove") != 0 && value == NULL)
        return -EINVAL;
    for (;;) {
        rc = next_token(&path, tok, sizeof(tok));
        if (rc)
            return rc;
        if (*path == '\0')
            break;
        parent = json_is_object(parent) ? json_object_get(parent, tok)
                 : json_is_array(parent) && !array_index(tok, json_array_size(parent) - 1, &i)
                     ? json_array_get(parent, i)
                     : NULL;
        if (parent == NULL)
            return -EINVAL;
    }
    value = value != NULL ? json_deep_copy(value) : NULL;
    if (json_object_get(op, "value") != NULL && value == NULL)
        return -ENOMEM;
    rc = apply_at(parent, name, tok, value);
    json_decref(value);
    return rc;
}

/* Run operation name on member tok of parent with value (borrowed). */
static int apply_at(json_t *parent, const char *name, const char *tok, json_t *value)
{
    size_t i;

    if (json_is_object(parent)) {
        bool exists = json_object_get(parent, tok) != NULL;

        if (strcmp(name, "add") == 0 || (strcmp(name, "replace") == 0 && exists))
            return json_object_set(parent, tok, value) ? -ENOMEM : 0;
        if (strcmp(name, "remove") == 0 && exists)
            return json_object_del(parent, tok) ? -EINVAL : 0;
        return -EINVAL;
    }
    if (!json_is_array(parent))
        return -EINVAL;
    if (strcmp(name, "add") == 0) {
        if (strcmp(tok, "-") == 0)
            return json_array_append(parent, value) ? -ENOMEM : 0;
        if (array_index(tok, json_array_size(parent), &i))
            return -EINVAL;
        return json_array_insert(parent, i, value) ? -ENOMEM : 0;
    }
    if (json_array_size(parent) == 0 || array_index(tok, json_array_size(parent) - 1, &i))
        return -EINVAL;
    if (strcmp(name, "remove") == 0)
        return json_array_remove(parent, i) ? -EINVAL : 0;
    if (strcmp(name, "replace") == 0)
        return json_array_set(parent, i, value) ? -ENOMEM : 0;
    return -EINVAL;
}

int egpu__webhook_patch_apply(json_t *doc, const json_t *ops)
{
    size_t i;
    json_t *op;

    if (!json_is_array(ops))
        return -EINVAL;
    json_array_foreach((json_t *)ops, i, op)
    {
        int rc = apply_one(doc, op);

        if (rc)
            return rc;
    }
    return 0;
}
