/* kube/resource.c - naming things on the API server: resource descriptors,
 * URL paths and query strings, and JSON bodies.
 *
 * Paths follow the REST layout of the API (api_protocol_notes.md):
 *   /api/v1[/namespaces/<ns>]/<plural>[/<name>[/<subresource>]]            core group
 *   /apis/<group>/<version>[/namespaces/<ns>]/<plural>[/<name>[/<sub>]]   named groups
 * Every segment is percent-encoded, so a name can never add a segment or a
 * query; query values (selectors, continue tokens) are encoded the same way.
 */
#include <errno.h>
#include <string.h>

#include "egpu/api.h"
#include "kube_int.h"

const struct egpu_kube_resource egpu_kube_pods = {"", "v1", "pods", true};
const struct egpu_kube_resource egpu_kube_nodes = {"", "v1", "nodes", false};
const struct egpu_kube_resource egpu_kube_namespaces = {"", "v1", "namespaces", false};
const struct egpu_kube_resource egpu_kube_events = {"", "v1", "events", true};
const struct egpu_kube_resource egpu_kube_resourcequotas = {"", "v1", "resourcequotas", true};
const struct egpu_kube_resource egpu_kube_leases = {"coordination.k8s.io", "v1", "leases", true};
const struct egpu_kube_resource egpu_kube_gpus = {EGPU_API_GROUP, EGPU_API_VERSION_NAME,
                                                  EGPU_PLURAL_GPUS, false};
const struct egpu_kube_resource egpu_kube_elasticgpus = {EGPU_API_GROUP, EGPU_API_VERSION_NAME,
                                                         EGPU_PLURAL_ELASTICGPUS, false};
const struct egpu_kube_resource egpu_kube_elasticgpuclaims = {EGPU_API_GROUP, EGPU_API_VERSION_NAME,
                                                              EGPU_PLURAL_ELASTICGPUCLAIMS, true};
const struct egpu_kube_resource egpu_kube_elasticgpuclasses = {
    EGPU_API_GROUP, EGPU_API_VERSION_NAME, EGPU_PLURAL_ELASTICGPUCLASSES, false};
const struct egpu_kube_resource egpu_kube_gpubudgets = {EGPU_API_GROUP, EGPU_API_VERSION_NAME,
                                                        EGPU_PLURAL_GPUBUDGETS, true};
const struct egpu_kube_resource egpu_kube_priorityclasses = {"scheduling.k8s.io", "v1",
                                                             "priorityclasses", false};
const struct egpu_kube_resource egpu_kube_resourceslices = {"resource.k8s.io", "v1",
                                                            "resourceslices", false};
const struct egpu_kube_resource egpu_kube_resourceclaims = {"resource.k8s.io", "v1",
                                                            "resourceclaims", true};
const struct egpu_kube_resource egpu_kube_resourceclaimtemplates = {"resource.k8s.io", "v1",
                                                                    "resourceclaimtemplates", true};
const struct egpu_kube_resource egpu_kube_deviceclasses = {"resource.k8s.io", "v1", "deviceclasses",
                                                           false};

static bool unreserved(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '.' || c == '_' || c == '~';
}

static int append_encoded(struct egpu_buf *b, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    int rc = 0;

    for (const unsigned char *p = (const unsigned char *)s; *p && !rc; p++) {
        if (unreserved(*p)) {
            rc = egpu_buf_append(b, p, 1);
        } else {
            char esc[3] = {'%', hex[*p >> 4], hex[*p & 15]};

            rc = egpu_buf_append(b, esc, 3);
        }
    }
    return rc;
}

static int append_segment(struct egpu_buf *b, const char *seg)
{
    int rc = egpu_buf_append(b, "/", 1);

    return rc ? rc : append_encoded(b, seg);
}

int egpu_kube_path(struct egpu_buf *b, const struct egpu_kube_resource *res, const char *ns,
                   const char *name, const char *sub)
{
    int rc;

    if (res == NULL || res->plural == NULL || res->version == NULL)
        return -EINVAL;
    if (name != NULL && name[0] == '\0')
        return -EINVAL;
    if (sub != NULL && (name == NULL || sub[0] == '\0'))
        return -EINVAL;
    if (res->namespaced && name != NULL && (ns == NULL || ns[0] == '\0'))
        return -EINVAL;
    if (res->group == NULL || res->group[0] == '\0')
        rc = egpu_buf_printf(b, "/api/%s", res->version);
    else
        rc = egpu_buf_printf(b, "/apis/%s/%s", res->group, res->version);
    if (!rc && res->namespaced && ns != NULL && ns[0] != '\0') {
        rc = egpu_buf_append(b, "/namespaces", 11);
        if (!rc)
            rc = append_segment(b, ns);
    }
    if (!rc)
        rc = append_segment(b, res->plural);
    if (!rc && name != NULL)
        rc = append_segment(b, name);
    if (!rc && sub != NULL)
        rc = append_segment(b, sub);
    return rc;
}

int egpu__kube_query(struct egpu_buf *b, const char *key, const char *value)
{
    int rc =
        egpu_buf_printf(b, "%c%s=", memchr(b->data ? b->data : "", '?', b->len) ? '&' : '?', key);

    return rc ? rc : append_encoded(b, value);
}

const char *egpu_kube_str(const json_t *v)
{
    return egpu_api_str(v);
}

const char *egpu__kube_meta_str(const json_t *obj, const char *field)
{
    return egpu_kube_str(json_object_get(json_object_get(obj, "metadata"), field));
}

struct dump_state {
    struct egpu_buf *b;
    int rc;
};

static int dump_cb(const char *data, size_t size, void *ud)
{
    struct dump_state *d = ud;

    d->rc = egpu_buf_append(d->b, data, size);
    return d->rc ? -1 : 0;
}

int egpu__kube_dump(const json_t *obj, struct egpu_buf *b, bool sort_keys)
{
    struct dump_state d = {b, 0};
    size_t flags = JSON_COMPACT | JSON_ENCODE_ANY | (sort_keys ? JSON_SORT_KEYS : 0);

    egpu_buf_reset(b);
    if (json_dump_callback(obj, dump_cb, &d, flags) != 0)
        return d.rc ? d.rc : -EINVAL;
    return egpu_buf_append(b, "", 0);
}
