/* kube/transform.c - slimming objects before an informer stores them
 * (client-go's cache.TransformFunc, SharedIndexInformer.SetTransform).
 *
 * An informer keeps every object it lists or watches; as the API server
 * sends them, a Pod is mostly what no component of ours reads
 * (metadata.managedFields, the volumes, the container statuses, the
 * images and env). egpu_kube_keep builds the object a component's handlers
 * need from a list of dotted paths; egpu_kube_strip_managed_fields is the
 * transform for a component that reads everything but managedFields.
 *
 * DESIGN: the kept values are shared with the original by reference, not
 * copied: a list page's objects are parsed once, the kept subtrees move into
 * the slim object and the rest is freed with the page. Only the containers
 * on a kept path (the root, "metadata", "spec", an array walked with "[]")
 * are new. (An informer's list with egpu_kube_keep_transform never gets
 * here: list_decode.c applies the same paths while it decodes each page, so
 * what is left out is never built.) The original is never changed. A value
 * on a path that is not the container the path expects (a "spec" that is a
 * string, a "containers" that is not an array) is kept whole, so a parser
 * meets the same malformed value it would have met without the transform
 * and refuses it the same way.
 * Cost: one small object per container on the paths, about a microsecond
 * a Pod.
 */
#include <errno.h>
#include <string.h>

#include "kube_int.h"

#define SEGMENT_MAX 64 /* one path segment ("containers[]"), bytes incl. NUL */

/* The paths every kept object has: the informer's key and its repeat check. */
static const char *const always[] = {"metadata.name", "metadata.namespace",
                                     "metadata.resourceVersion", NULL};

static int put(json_t *dst, const char *key, json_t *v)
{
    return json_object_set(dst, key, v) == 0 ? 0 : -ENOMEM;
}

/* Keep src's value at path (relative to src) in dst, which mirrors src. */
static int keep_path(json_t *dst, json_t *src, const char *path)
{
    const char *dot = strchr(path, '.');
    size_t n = dot != NULL ? (size_t)(dot - path) : strlen(path);
    bool walk = n >= 2 && path[n - 2] == '[' && path[n - 1] == ']';
    char key[SEGMENT_MAX];
    json_t *sv, *dv;
    size_t klen = walk ? n - 2 : n, i;

    if (klen == 0 || klen >= sizeof(key))
        return -EINVAL;
    memcpy(key, path, klen);
    key[klen] = '\0';
    sv = json_object_get(src, key);
    if (sv == NULL)
        return 0;
    dv = json_object_get(dst, key);
    if (dv == sv)
        return 0; /* already kept whole by a shorter path */
    if (dot == NULL || (walk && !json_is_array(sv)) || (!walk && !json_is_object(sv)))
        return put(dst, key, sv);
    if (!walk) {
        if (dv == NULL) {
            dv = json_object();
            if (dv == NULL || json_object_set_new(dst, key, dv) != 0)
                return -ENOMEM;
        }
        return keep_path(dv, sv, dot + 1);
    }
    if (dv == NULL) {
        dv = json_array();
        if (dv == NULL || json_object_set_new(dst, key, dv) != 0)
            return -ENOMEM;
        for (i = 0; i < json_array_size(sv); i++) {
            json_t *el = json_array_get(sv, i);

            if (json_is_object(el) ? json_array_append_new(dv, json_object()) != 0
                                   : json_array_append(dv, el) != 0)
                return -ENOMEM;
        }
    }
    for (i = 0; i < json_array_size(sv); i++) {
        json_t *el = json_array_get(sv, i);
        int rc;

        if (!json_is_object(el))
            continue; /* kept as it is */
        rc = keep_path(json_array_get(dv, i), el, dot + 1);
        if (rc)
            return rc;
    }
    return 0;
}

json_t *egpu_kube_keep(json_t *obj, const char *const *keep)
{
    json_t *out;

    if (obj == NULL)
        return NULL;
    if (!json_is_object(obj))
        return json_incref(obj);
    out = json_object();
    if (out == NULL)
        return NULL;
    for (size_t i = 0; always[i] != NULL; i++) {
        if (keep_path(out, obj, always[i]) != 0)
            goto fail;
    }
    for (size_t i = 0; keep != NULL && keep[i] != NULL; i++) {
        if (keep_path(out, obj, keep[i]) != 0)
            goto fail;
    }
    return out;
fail:
    json_decref(out);
    return NULL;
}

json_t *egpu_kube_keep_transform(void *keep, json_t *obj)
{
    return egpu_kube_keep(obj, keep);
}

json_t *egpu_kube_strip_managed_fields(void *ud, json_t *obj)
{
    json_t *meta = json_object_get(obj, "metadata"), *out, *m;

    (void)ud;
    if (!json_is_object(meta) || json_object_get(meta, "managedFields") == NULL)
        return json_incref(obj);
    out = json_copy(obj); /* shallow: the values are shared */
    m = json_copy(meta);
    if (out == NULL || m == NULL || json_object_del(m, "managedFields") != 0 ||
        json_object_set_new(out, "metadata", m) != 0) {
        json_decref(out);
        return NULL;
    }
    return out;
}
