/* scheduler/pod.c - a v1.Pod as the extender needs it.
 *
 * Reads identity, node, phase, the CPU and memory the pod requests (counted
 * the way kube-scheduler counts them: the sum over containers, at least each
 * init container's, plus spec.overhead), and each container's Elastic GPU
 * request. Every problem is reported with the JSON path of the field, so a
 * FailedScheduling event or a webhook denial can quote it.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "egpu/kube.h"
#include "egpu/scheduler.h"

/* Copy a string field into out (len bytes). Missing = "" unless required. */
static int copy_str(const json_t *v, char *out, size_t len, bool required, const char *path,
                    struct egpu_error *err)
{
    if (v == NULL || json_is_null(v)) {
        if (required)
            return egpu_error_set(err, EGPU_ESYNTAX, "%s: missing", path);
        out[0] = '\0';
        return 0;
    }
    if (!json_is_string(v))
        return egpu_error_set(err, EGPU_ESYNTAX, "%s: must be a string", path);
    if (egpu_kube_str(v) == NULL)
        return egpu_error_set(err, EGPU_ESYNTAX, "%s: must not hold a NUL character", path);
    if (json_string_length(v) >= len)
        return egpu_error_set(err, EGPU_ESYNTAX, "%s: longer than %zu characters", path, len - 1);
    memcpy(out, json_string_value(v), json_string_length(v) + 1);
    return 0;
}

/* The quantity text of resources.<kind>[name], or NULL. Integers are accepted
 * too (some clients send them) and rendered into buf. */
static const char *quantity(const json_t *resources, const char *kind, const char *name, char *buf,
                            size_t len, const char *path, struct egpu_error *err, int *rc)
{
    const json_t *map = json_object_get(resources, kind);
    const json_t *v;

    *rc = 0;
    if (map == NULL || json_is_null(map))
        return NULL;
    if (!json_is_object(map)) {
        *rc = egpu_error_set(err, EGPU_ESYNTAX, "%s.%s: must be an object", path, kind);
        return NULL;
    }
    v = json_object_get(map, name);
    if (v == NULL || json_is_null(v))
        return NULL;
    if (json_is_integer(v)) {
        snprintf(buf, len, "%lld", (long long)json_integer_value(v));
        return buf;
    }
    if (!json_is_string(v) || egpu_kube_str(v) == NULL) {
        *rc = egpu_error_set(err, EGPU_ESYNTAX, "%s.%s[%s]: must be a quantity string", path, kind,
                             name);
        return NULL;
    }
    return json_string_value(v);
}

/* The request for resource name: requests[name], else limits[name]. */
static const char *request_of(const json_t *resources, const char *name, char *buf, size_t len,
                              const char *path, char *field, size_t field_len,
                              struct egpu_error *err, int *rc)
{
    const char *q = quantity(resources, "requests", name, buf, len, path, err, rc);

    if (*rc == 0 && q != NULL) {
        snprintf(field, field_len, "%s.requests[%s]", path, name);
        return q;
    }
    if (*rc)
        return NULL;
    q = quantity(resources, "limits", name, buf, len, path, err, rc);
    snprintf(field, field_len, "%s.limits[%s]", path, name);
    return q;
}

struct usage {
    int64_t cpu_milli;
    int64_t mem_mib;
};

/* CPU and memory of one container (or of spec.overhead when overhead). */
static int container_usage(const json_t *resources, const char *path, struct usage *u,
                           struct egpu_error *err)
{
    char buf[32], field[512];
    const char *q;
    int rc;

    u->cpu_milli = 0;
    u->mem_mib = 0;
    if (resources == NULL || json_is_null(resources))
        return 0;
    if (!json_is_object(resources))
        return egpu_error_set(err, EGPU_ESYNTAX, "%s: must be an object", path);
    q = request_of(resources, "cpu", buf, sizeof(buf), path, field, sizeof(field), err, &rc);
    if (rc == 0 && q != NULL)
        rc = egpu_parse_cpu_milli(q, field, &u->cpu_milli, err);
    if (rc)
        return rc;
    q = request_of(resources, "memory", buf, sizeof(buf), path, field, sizeof(field), err, &rc);
    if (rc == 0 && q != NULL)
        rc = egpu_parse_mem_mib(q, field, &u->mem_mib, err);
    return rc;
}

/* A pod being read: the record, and its strings until they are stored in
 * its names (set_names). */
struct scratch {
    struct egpu_sched_pod p;
    char ns[EGPU_K8S_NAME_MAX], name[EGPU_K8S_NAME_MAX], uid[EGPU_K8S_NAME_MAX],
        node[EGPU_K8S_NAME_MAX];
    char gpu_model[EGPU_MODEL_MAX];
    char scheduler_name[EGPU_K8S_NAME_MAX];
    char containers[EGPU_CONTAINERS_MAX][EGPU_CONTAINER_NAME_MAX];
};

/* The container's Elastic GPU ask (egpu_api_container_gpu, read as the
 * scheduler counts it: requests, else limits), added to the pod's request. */
static int gpu_request(const json_t *c, const char *path, struct scratch *t, const char *name,
                       struct egpu_error *err)
{
    struct egpu_sched_pod *p = &t->p;
    struct egpu_api_gpu_ask a;
    int rc = egpu_api_container_gpu(c, name, false, &a, err);

    if (rc || a.core_pct == 0)
        return rc;
    if (p->req.ncontainers == EGPU_CONTAINERS_MAX)
        return egpu_error_set(err, EGPU_ERANGE, "%s: more than %d containers ask for GPUs", path,
                              EGPU_CONTAINERS_MAX);
    rc = egpu_container_request_set(&p->req.containers[p->req.ncontainers], a.core_pct, a.mem_mib,
                                    err);
    if (rc)
        return egpu_error_prefix(err, rc, "container \"%s\"", name);
    snprintf(t->containers[p->req.ncontainers], sizeof(t->containers[0]), "%s", name);
    p->req.ncontainers++;
    return 0;
}

/* Does resources (a container's) name the DRA marker EGPU_RES_DRA in its
 * requests or limits? Its value is not read: the marker only says that the
 * container's GPUs come from the pod's ResourceClaims. */
static bool has_dra_marker(const json_t *resources)
{
    return json_object_get(json_object_get(resources, "requests"), EGPU_RES_DRA) != NULL ||
           json_object_get(json_object_get(resources, "limits"), EGPU_RES_DRA) != NULL;
}

static int containers(const json_t *spec, const char *key, bool init, struct scratch *t,
                      struct egpu_error *err)
{
    struct egpu_sched_pod *p = &t->p;
    const json_t *list = json_object_get(spec, key), *c;
    int64_t init_cpu = 0, init_mem = 0;
    size_t i;

    if (list == NULL || json_is_null(list))
        return 0;
    if (!json_is_array(list))
        return egpu_error_set(err, EGPU_ESYNTAX, "spec.%s: must be an array", key);
    json_array_foreach(list, i, c)
    {
        char path[96], name[EGPU_CONTAINER_NAME_MAX], npath[112];
        const json_t *res;
        struct usage u;
        int rc;

        snprintf(path, sizeof(path), "spec.%s[%zu]", key, i);
        snprintf(npath, sizeof(npath), "%s.name", path);
        if (!json_is_object(c))
            return egpu_error_set(err, EGPU_ESYNTAX, "%s: must be an object", path);
        rc = copy_str(json_object_get(c, "name"), name, sizeof(name), true, npath, err);
        if (rc)
            return rc;
        res = json_object_get(c, "resources");
        snprintf(path, sizeof(path), "spec.%s[%zu].resources", key, i);
        rc = container_usage(res, path, &u, err);
        if (rc)
            return rc;
        if (init) {
            rc = egpu_api_init_container_gpu(c, name, err);
            if (rc)
                return rc;
            init_cpu = u.cpu_milli > init_cpu ? u.cpu_milli : init_cpu;
            init_mem = u.mem_mib > init_mem ? u.mem_mib : init_mem;
            continue;
        }
        p->req.cpu_milli += u.cpu_milli;
        p->req.mem_mib += u.mem_mib;
        p->dra = p->dra || has_dra_marker(res);
        rc = gpu_request(c, path, t, name, err);
        if (rc)
            return rc;
    }
    if (init) {
        p->req.cpu_milli = p->req.cpu_milli > init_cpu ? p->req.cpu_milli : init_cpu;
        p->req.mem_mib = p->req.mem_mib > init_mem ? p->req.mem_mib : init_mem;
    }
    return 0;
}

static int annotations(const json_t *meta, struct scratch *t, struct egpu_error *err)
{
    struct egpu_sched_pod *p = &t->p;
    const json_t *ann = json_object_get(meta, "annotations"), *v;
    struct egpu_api_pod_annotations pa;
    struct egpu_assigned *a = NULL; /* decoded here, kept as long as it is */
    struct egpu_error aerr = {0};
    int rc = egpu_api_pod_annotations(ann, &pa, err);

    if (rc)
        return rc;
    p->has_node_policy = pa.has_node_policy;
    p->node_policy = pa.node_policy;
    p->has_card_policy = pa.has_card_policy;
    p->card_policy = pa.card_policy;
    memcpy(t->gpu_model, pa.gpu_model, sizeof(t->gpu_model));
    p->allocated = json_object_get(ann, EGPU_ANN_ALLOCATED) != NULL;
    v = json_object_get(ann, EGPU_ANN_ASSIGNED);
    if (!json_is_string(v))
        return 0;
    if (egpu_api_str(v) == NULL) {
        p->assigned_error =
            egpu_strdup("metadata.annotations[" EGPU_ANN_ASSIGNED "]: holds a NUL character");
    } else if ((a = egpu_malloc(sizeof(*a))) != NULL &&
               egpu_assigned_decode(json_string_value(v), a, &aerr) == 0) {
        p->assigned = egpu_sched_assigned_new(a);
        p->has_assigned = p->assigned != NULL;
        egpu_free(a);
        if (p->has_assigned)
            return 0;
        return egpu_error_set(err, -ENOMEM, "metadata.annotations[%s]: out of memory",
                              EGPU_ANN_ASSIGNED);
    } else if (a != NULL) {
        p->assigned_error = egpu_strdup(aerr.msg);
    }
    egpu_free(a);
    if (p->assigned_error == NULL)
        return egpu_error_set(err, -ENOMEM, "metadata.annotations[%s]: out of memory",
                              EGPU_ANN_ASSIGNED);
    return 0;
}

/* The claims the pod's containers use, read with the shared
 * egpu_api_pod_claims (metadata.namespace is "default" when absent, as
 * p->ns). A pod whose claim annotations cannot be read keeps none, with the
 * reason in claims_error: it still counts on its node, beside every
 * ElasticGPU, and filter refuses it with the reason. */
static int pod_claims(const json_t *pod, struct egpu_sched_pod *p, struct egpu_error *err)
{
    struct egpu_api_pod_claim claims[EGPU_API_POD_CLAIMS_MAX];
    struct egpu_error cerr = {0};
    size_t n = 0;

    p->nclaims = 0;
    p->claims = NULL;
    p->claims_error = NULL;
    if (egpu_api_pod_claims(pod, claims, EGPU_API_POD_CLAIMS_MAX, &n, &cerr) != 0) {
        p->claims_error = egpu_strdup(cerr.msg);
        return p->claims_error == NULL
                   ? egpu_error_set(err, -ENOMEM, "metadata.annotations: claims: out of memory")
                   : 0;
    }
    if (n == 0)
        return 0;
    p->claims = egpu_malloc(n * sizeof(claims[0]));
    if (p->claims == NULL)
        return egpu_error_set(err, -ENOMEM, "metadata.annotations: claims: out of memory");
    memcpy(p->claims, claims, n * sizeof(claims[0]));
    p->nclaims = (uint32_t)n;
    return 0;
}

/* spec.schedulerName, kept only when it is a plain string that fits: any
 * other value (absent, mistyped, too long, with a NUL) leaves it "", which
 * names no scheduler, so bind refuses the pod; the parse never fails on it,
 * so such a pod still counts on its node. */
static void scheduler_name(const json_t *spec, struct scratch *t)
{
    const json_t *v = json_object_get(spec, "schedulerName");
    size_t n = json_string_length(v);

    t->scheduler_name[0] = '\0';
    if (json_is_string(v) && n < sizeof(t->scheduler_name) && strlen(json_string_value(v)) == n)
        memcpy(t->scheduler_name, json_string_value(v), n + 1);
}

/* spec.overhead (a resource list, RuntimeClass pod overhead) counts like a request. */
static int pod_overhead(const json_t *spec, struct usage *u, struct egpu_error *err)
{
    const json_t *oh = json_object_get(spec, "overhead");
    json_t *wrap;
    int rc;

    u->cpu_milli = 0;
    u->mem_mib = 0;
    if (oh == NULL || json_is_null(oh))
        return 0;
    wrap = json_object();
    if (wrap == NULL || json_object_set(wrap, "requests", (json_t *)oh)) {
        json_decref(wrap);
        return egpu_error_set(err, -ENOMEM, "spec.overhead: out of memory");
    }
    rc = container_usage(wrap, "spec.overhead", u, err);
    json_decref(wrap);
    return rc;
}

/* Copy s to b + *at, moving *at past its NUL; returns the copy. */
static const char *put(char *b, size_t *at, const char *s)
{
    size_t len = strlen(s) + 1;
    char *to = memcpy(b + *at, s, len);

    *at += len;
    return to;
}

/* The pod's strings copied one after another into its names. */
static int set_names(struct scratch *t, struct egpu_error *err)
{
    struct egpu_sched_pod *p = &t->p;
    size_t len = strlen(t->ns) + strlen(t->name) + strlen(t->uid) + strlen(t->node) +
                 strlen(t->gpu_model) + strlen(t->scheduler_name) + 6,
           at = 0;
    char *b;

    for (uint32_t i = 0; i < p->req.ncontainers; i++)
        len += strlen(t->containers[i]) + 1;
    b = egpu_malloc(len);
    if (b == NULL)
        return egpu_error_set(err, -ENOMEM, "metadata.name: out of memory");
    p->names = b;
    p->names_len = (uint32_t)len;
    p->ns = put(b, &at, t->ns);
    p->name = put(b, &at, t->name);
    p->uid = put(b, &at, t->uid);
    p->node = put(b, &at, t->node);
    p->gpu_model = put(b, &at, t->gpu_model);
    p->scheduler_name = put(b, &at, t->scheduler_name);
    p->containers = b + at;
    for (uint32_t i = 0; i < p->req.ncontainers; i++)
        (void)put(b, &at, t->containers[i]);
    return 0;
}

static void disown(struct egpu_sched_pod *p);

int egpu_sched_pod_parse(const json_t *pod, struct egpu_sched_pod *out, struct egpu_error *err)
{
    struct scratch *t;
    struct egpu_sched_pod *p;
    const json_t *meta, *spec;
    struct usage overhead;
    int rc;

    if (!json_is_object(pod))
        return egpu_error_set(err, EGPU_ESYNTAX, "pod: must be a JSON object");
    meta = json_object_get(pod, "metadata");
    spec = json_object_get(pod, "spec");
    if (!json_is_object(meta))
        return egpu_error_set(err, EGPU_ESYNTAX, "metadata: missing or not an object");
    if (!json_is_object(spec))
        return egpu_error_set(err, EGPU_ESYNTAX, "spec: missing or not an object");
    t = egpu_calloc(1, sizeof(*t));
    if (t == NULL)
        return egpu_error_set(err, -ENOMEM, "pod: out of memory");
    p = &t->p;
    disown(p);
    rc = copy_str(json_object_get(meta, "name"), t->name, sizeof(t->name), true, "metadata.name",
                  err);
    if (!rc)
        rc = copy_str(json_object_get(meta, "namespace"), t->ns, sizeof(t->ns), false,
                      "metadata.namespace", err);
    if (!rc)
        rc = copy_str(json_object_get(meta, "uid"), t->uid, sizeof(t->uid), false, "metadata.uid",
                      err);
    if (!rc)
        rc = copy_str(json_object_get(spec, "nodeName"), t->node, sizeof(t->node), false,
                      "spec.nodeName", err);
    if (!rc && t->ns[0] == '\0')
        memcpy(t->ns, "default", sizeof("default"));
    if (!rc)
        scheduler_name(spec, t);
    if (!rc)
        rc = containers(spec, "containers", false, t, err);
    if (!rc)
        rc = containers(spec, "initContainers", true, t, err);
    if (!rc)
        rc = pod_overhead(spec, &overhead, err);
    if (!rc) {
        p->req.cpu_milli += overhead.cpu_milli;
        p->req.mem_mib += overhead.mem_mib;
    }
    if (!rc)
        rc = annotations(meta, t, err);
    if (!rc)
        rc = pod_claims(pod, p, err);
    if (!rc)
        rc = set_names(t, err);
    if (!rc) {
        p->terminal = egpu_api_pod_finished(pod);
        p->deleting = json_is_string(json_object_get(meta, "deletionTimestamp"));
        *out = *p; /* what p owns is out's now */
    } else {
        egpu_sched_pod_clear(p);
    }
    egpu_free(t);
    return rc;
}

/* p owns nothing any more (what it owned is not freed: the caller freed or
 * handed it on). */
static void disown(struct egpu_sched_pod *p)
{
    p->names = NULL;
    p->names_len = 0;
    p->ns = p->name = p->uid = p->node = p->gpu_model = p->scheduler_name = p->containers = "";
    p->assigned_error = NULL;
    p->claims_error = NULL;
    p->assigned = NULL;
    p->has_assigned = false;
    p->claims = NULL;
    p->nclaims = 0;
}

void egpu_sched_pod_clear(struct egpu_sched_pod *p)
{
    if (p == NULL)
        return;
    egpu_free(p->names);
    egpu_free(p->assigned);
    egpu_free(p->claims);
    egpu_free(p->assigned_error);
    egpu_free(p->claims_error);
    disown(p);
}

void egpu_sched_pod_move(struct egpu_sched_pod *to, struct egpu_sched_pod *from)
{
    egpu_sched_pod_clear(to);
    *to = *from;
    disown(from);
}

int egpu_sched_pod_copy(struct egpu_sched_pod *dst, const struct egpu_sched_pod *src)
{
    struct egpu_sched_assigned *a = NULL;
    struct egpu_api_pod_claim *cl = NULL;
    char *ae = NULL, *ce = NULL, *nm = NULL;
    size_t len = 0;

    if (src->names != NULL)
        len = src->names_len;
    if ((src->names != NULL && (nm = egpu_malloc(len)) == NULL) ||
        (src->has_assigned && (a = egpu_sched_assigned_dup(src->assigned)) == NULL) ||
        (src->nclaims > 0 && (cl = egpu_malloc(src->nclaims * sizeof(*cl))) == NULL) ||
        (src->assigned_error != NULL && (ae = egpu_strdup(src->assigned_error)) == NULL) ||
        (src->claims_error != NULL && (ce = egpu_strdup(src->claims_error)) == NULL)) {
        egpu_free(a);
        egpu_free(cl);
        egpu_free(ae);
        egpu_free(nm);
        return -ENOMEM;
    }
    *dst = *src;
    if (nm != NULL) {
        memcpy(nm, src->names, len);
        dst->names = nm;
        dst->ns = nm + (src->ns - src->names);
        dst->name = nm + (src->name - src->names);
        dst->uid = nm + (src->uid - src->names);
        dst->node = nm + (src->node - src->names);
        dst->gpu_model = nm + (src->gpu_model - src->names);
        dst->scheduler_name = nm + (src->scheduler_name - src->names);
        dst->containers = nm + (src->containers - src->names);
    }
    dst->assigned = a;
    dst->claims = cl;
    dst->assigned_error = ae;
    dst->claims_error = ce;
    if (cl != NULL)
        memcpy(cl, src->claims, src->nclaims * sizeof(*cl));
    return 0;
}

const char *egpu_sched_pod_container(const struct egpu_sched_pod *p, uint32_t i)
{
    const char *s = p->containers;

    while (i-- > 0)
        s += strlen(s) + 1;
    return s;
}

bool egpu_sched_pod_wants_gpu(const struct egpu_sched_pod *p)
{
    return p->req.ncontainers > 0;
}
