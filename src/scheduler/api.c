/* scheduler/api.c - the extender's side of the API server: informers that
 * feed the cache, and the two writes bind makes.
 *
 * Six informers (nodes, pods in every namespace, GPU objects, ElasticGPUs,
 * ElasticGPUClaims, ElasticGPUClasses), and with --dra a seventh
 * (ResourceClaims, resource.k8s.io/v1, every namespace), turn list+watch
 * events into cache updates. The writes: the elasticgpu.io/assigned annotation, as a JSON
 * merge patch made conditional on the pod's resourceVersion (a 409 means the
 * pod changed under us: read it again, check it is still the same unbound
 * pod, and retry), the selected-node and selected-gpus annotations of a
 * WaitForFirstConsumer claim (a merge patch of those two keys only), and
 * the Binding. After a DRA pod's Binding, bind GETs the pod and its
 * ResourceClaims.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "egpu/kube.h"
#include "egpu/log.h"
#include "egpu/scheduler.h"
#include "sched_int.h"

#define ANNOTATE_TRIES 5

enum { INF_NODES, INF_GPUS, INF_PODS, INF_EGPUS, INF_CLAIMS, INF_CLASSES, INF_RCLAIMS };

static const char *const kinds[SCHED_INFORMERS] = {
    "Node", "GPU", "Pod", "ElasticGPU", "ElasticGPUClaim", "ElasticGPUClass", "ResourceClaim"};

const char *egpu__sched_api_kind(int i)
{
    return i >= 0 && i < SCHED_INFORMERS ? kinds[i] : "?";
}

/* Log and count an object the cache refused; the informer goes on. */
static void refused(struct egpu_sched_api *api, int kind, const json_t *obj,
                    const struct egpu_error *err)
{
    const char *name = egpu_kube_str(json_object_get(json_object_get(obj, "metadata"), "name"));

    atomic_fetch_add(&api->refused[kind], 1);
    egpu_log(EGPU_LOG_WARN, "ignored malformed %s name=%s error=\"%s\"", kinds[kind],
             name ? name : "?", err->msg);
}

unsigned long egpu__sched_api_skipped(struct egpu_sched_api *api, int i)
{
    struct egpu_kube_informer_stats st = {0};

    if (i < 0 || i >= SCHED_INFORMERS)
        return 0;
    if (api->informers[i] != NULL)
        egpu_kube_informer_stats(api->informers[i], &st);
    return st.skipped + atomic_load(&api->refused[i]);
}

static void on_node(void *ud, const json_t *obj)
{
    struct egpu_error err = {0};

    if (egpu_sched_cache_node_set(((struct egpu_sched_api *)ud)->cache, obj, &err) != 0)
        refused(ud, INF_NODES, obj, &err);
}

static void on_node_update(void *ud, const json_t *old_obj, const json_t *obj)
{
    (void)old_obj;
    on_node(ud, obj);
}

static void on_node_delete(void *ud, const json_t *obj)
{
    const char *name = egpu_kube_str(json_object_get(json_object_get(obj, "metadata"), "name"));

    if (name != NULL)
        (void)egpu_sched_cache_node_delete(((struct egpu_sched_api *)ud)->cache, name);
}

/* Tell the operator, on the GPU object itself, that its card is left out. */
static void warn_duplicate(struct egpu_sched_api *api, const json_t *obj, const char *why)
{
    const json_t *meta = json_object_get(obj, "metadata");
    struct egpu_kube_event ev = {.kind = "GPU",
                                 .api_version = EGPU_API_VERSION,
                                 .name = egpu_kube_str(json_object_get(meta, "name")),
                                 .uid = egpu_kube_str(json_object_get(meta, "uid")),
                                 .warning = true,
                                 .reason = "DuplicateGPU",
                                 .message = why,
                                 .component = "egpu-scheduler"};
    struct egpu_error err = {0};

    if (egpu_kube_event_post(api->kube, &ev, &err) != 0)
        egpu_log(EGPU_LOG_WARN, "event DuplicateGPU not posted gpu=%s error=\"%s\"",
                 ev.name ? ev.name : "?", err.msg);
}

static void on_gpu(void *ud, const json_t *obj)
{
    struct egpu_error err = {0};
    int rc = egpu_sched_cache_gpu_set(((struct egpu_sched_api *)ud)->cache, obj, &err);

    if (rc != 0)
        refused(ud, INF_GPUS, obj, &err);
    if (rc == -EEXIST)
        warn_duplicate(ud, obj, err.msg);
}

static void on_gpu_update(void *ud, const json_t *old_obj, const json_t *obj)
{
    struct egpu_error err = {0};

    /* A GPU object that moved to another node leaves its old one; any other
     * change is made in place (the cache finds the card by object name), so
     * an owner's update never hands its UUID to a duplicate in between. */
    if (!json_equal(json_object_get(json_object_get(old_obj, "spec"), "nodeName"),
                    json_object_get(json_object_get(obj, "spec"), "nodeName")) &&
        egpu_sched_cache_gpu_delete(((struct egpu_sched_api *)ud)->cache, old_obj, &err) != 0)
        refused(ud, INF_GPUS, old_obj, &err);
    on_gpu(ud, obj);
}

static void on_gpu_delete(void *ud, const json_t *obj)
{
    struct egpu_error err = {0};

    if (egpu_sched_cache_gpu_delete(((struct egpu_sched_api *)ud)->cache, obj, &err) != 0)
        refused(ud, INF_GPUS, obj, &err);
}

static void on_pod(void *ud, const json_t *obj)
{
    struct egpu_error err = {0};

    if (egpu_sched_cache_pod_set(((struct egpu_sched_api *)ud)->cache, obj, &err) != 0)
        refused(ud, INF_PODS, obj, &err);
}

static void on_pod_update(void *ud, const json_t *old_obj, const json_t *obj)
{
    (void)old_obj;
    on_pod(ud, obj);
}

static void on_pod_delete(void *ud, const json_t *obj)
{
    const json_t *meta = json_object_get(obj, "metadata");
    const char *ns = egpu_kube_str(json_object_get(meta, "namespace"));
    const char *name = egpu_kube_str(json_object_get(meta, "name"));

    if (name != NULL)
        (void)egpu_sched_cache_pod_delete(((struct egpu_sched_api *)ud)->cache, ns ? ns : "default",
                                          name);
}

/* An ElasticGPU's capacity counts as allocated on its cards (cache.c); a
 * malformed one is left out, logged and counted, as every kind is. */
static void on_egpu(void *ud, const json_t *obj)
{
    struct egpu_error err = {0};

    if (egpu_sched_cache_egpu_set(((struct egpu_sched_api *)ud)->cache, obj, &err) != 0)
        refused(ud, INF_EGPUS, obj, &err);
}

static void on_egpu_update(void *ud, const json_t *old_obj, const json_t *obj)
{
    (void)old_obj;
    on_egpu(ud, obj);
}

static void on_egpu_delete(void *ud, const json_t *obj)
{
    const char *name = egpu_kube_str(json_object_get(json_object_get(obj, "metadata"), "name"));

    if (name != NULL)
        (void)egpu_sched_cache_egpu_delete(((struct egpu_sched_api *)ud)->cache, name);
}

/* Claims say which ElasticGPU serves a pod's container, classes how a
 * WaitForFirstConsumer claim may be placed (cache.c). */
static void on_claim(void *ud, const json_t *obj)
{
    struct egpu_error err = {0};

    if (egpu_sched_cache_claim_set(((struct egpu_sched_api *)ud)->cache, obj, &err) != 0)
        refused(ud, INF_CLAIMS, obj, &err);
}

static void on_claim_update(void *ud, const json_t *old_obj, const json_t *obj)
{
    (void)old_obj;
    on_claim(ud, obj);
}

static void on_claim_delete(void *ud, const json_t *obj)
{
    const json_t *meta = json_object_get(obj, "metadata");
    const char *ns = egpu_kube_str(json_object_get(meta, "namespace"));
    const char *name = egpu_kube_str(json_object_get(meta, "name"));

    if (ns != NULL && name != NULL)
        (void)egpu_sched_cache_claim_delete(((struct egpu_sched_api *)ud)->cache, ns, name);
}

static void on_class(void *ud, const json_t *obj)
{
    struct egpu_error err = {0};

    if (egpu_sched_cache_class_set(((struct egpu_sched_api *)ud)->cache, obj, &err) != 0)
        refused(ud, INF_CLASSES, obj, &err);
}

static void on_class_update(void *ud, const json_t *old_obj, const json_t *obj)
{
    (void)old_obj;
    on_class(ud, obj);
}

static void on_class_delete(void *ud, const json_t *obj)
{
    const char *name = egpu_kube_str(json_object_get(json_object_get(obj, "metadata"), "name"));

    if (name != NULL)
        (void)egpu_sched_cache_class_delete(((struct egpu_sched_api *)ud)->cache, name);
}

/* ResourceClaims (resource.k8s.io/v1, --dra): an allocated one holds its
 * cards in the cache (dra.c); one whose status the decoder refuses is left
 * out as it stood (the version before stays), logged and counted. */
static void on_rclaim(void *ud, const json_t *obj)
{
    struct egpu_error err = {0};

    if (egpu_sched_cache_dra_claim_set(((struct egpu_sched_api *)ud)->cache, obj, &err) != 0)
        refused(ud, INF_RCLAIMS, obj, &err);
}

static void on_rclaim_update(void *ud, const json_t *old_obj, const json_t *obj)
{
    (void)old_obj;
    on_rclaim(ud, obj);
}

static void on_rclaim_delete(void *ud, const json_t *obj)
{
    const json_t *meta = json_object_get(obj, "metadata");
    const char *ns = egpu_kube_str(json_object_get(meta, "namespace"));
    const char *name = egpu_kube_str(json_object_get(meta, "name"));

    if (ns != NULL && name != NULL)
        (void)egpu_sched_cache_dra_claim_delete(((struct egpu_sched_api *)ud)->cache, ns, name);
}

/* What the informers keep of the three kinds a cluster has thousands of
 * (issue 27: stored as the API server sends them they weigh 6 to 8 times
 * their lists' text, 890 MiB at 5,000 nodes). Exactly what the handlers
 * above read through the cache's parsers, which read nothing else of them:
 *   Node: egpu_sched_cache_node_set (name, labels, status.allocatable).
 *   GPU:  gpu_fields and used_fields in cache.c (spec whole: nodeName, uuid,
 *         index, memory, model, topology; status.health, status.used).
 *   Pod:  egpu_sched_pod_parse (uid, annotations through
 *         egpu_api_pod_annotations and egpu_api_pod_claims, deletionTimestamp,
 *         nodeName, schedulerName, overhead, each container's name and
 *         resources through egpu_api_container_gpu, status.phase through
 *         egpu_api_pod_finished); spec.resourceClaims and the claim statuses
 *         egpu__sched_dra_refs reads are kept too (bind reads them from a GET
 *         today, the informer's copy costs nothing for pods without).
 * Name, namespace and resourceVersion are always kept (egpu_kube_keep). A
 * field a parser starts reading must be added here: test_sched's
 * transform tests parse every fixture pod with and without it. The other
 * kinds (a few hundred objects) only lose metadata.managedFields. */
static const char *const keep_nodes[] = {"metadata.labels", "status.allocatable", NULL};
static const char *const keep_gpus[] = {"spec", "status.health", "status.used", NULL};
static const char *const keep_pods[] = {"metadata.uid",
                                        "metadata.annotations",
                                        "metadata.deletionTimestamp",
                                        "spec.nodeName",
                                        "spec.schedulerName",
                                        "spec.overhead",
                                        "spec.containers[].name",
                                        "spec.containers[].resources",
                                        "spec.initContainers[].name",
                                        "spec.initContainers[].resources",
                                        "spec.resourceClaims",
                                        "status.phase",
                                        "status.resourceClaimStatuses",
                                        "status.extendedResourceClaimStatus",
                                        NULL};

const char *const *egpu__sched_api_keep(int i)
{
    return i == INF_NODES  ? keep_nodes
           : i == INF_GPUS ? keep_gpus
           : i == INF_PODS ? keep_pods
                           : NULL;
}

int egpu__sched_api_start(struct egpu_sched_api *api, struct egpu_error *err)
{
    const struct egpu_kube_resource *res[SCHED_INFORMERS] = {
        [INF_NODES] = &egpu_kube_nodes,
        [INF_GPUS] = &egpu_kube_gpus,
        [INF_PODS] = &egpu_kube_pods,
        [INF_EGPUS] = &egpu_kube_elasticgpus,
        [INF_CLAIMS] = &egpu_kube_elasticgpuclaims,
        [INF_CLASSES] = &egpu_kube_elasticgpuclasses,
        [INF_RCLAIMS] = &egpu_kube_resourceclaims};
    const struct egpu_kube_informer_cbs cbs[SCHED_INFORMERS] = {
        [INF_NODES] = {.on_add = on_node,
                       .on_update = on_node_update,
                       .on_delete = on_node_delete,
                       .ud = api},
        [INF_GPUS] = {.on_add = on_gpu,
                      .on_update = on_gpu_update,
                      .on_delete = on_gpu_delete,
                      .ud = api},
        [INF_PODS] = {.on_add = on_pod,
                      .on_update = on_pod_update,
                      .on_delete = on_pod_delete,
                      .ud = api},
        [INF_EGPUS] = {.on_add = on_egpu,
                       .on_update = on_egpu_update,
                       .on_delete = on_egpu_delete,
                       .ud = api},
        [INF_CLAIMS] = {.on_add = on_claim,
                        .on_update = on_claim_update,
                        .on_delete = on_claim_delete,
                        .ud = api},
        [INF_CLASSES] = {.on_add = on_class,
                         .on_update = on_class_update,
                         .on_delete = on_class_delete,
                         .ud = api},
        [INF_RCLAIMS] = {.on_add = on_rclaim,
                         .on_update = on_rclaim_update,
                         .on_delete = on_rclaim_delete,
                         .ud = api},
    };

    for (int i = 0; i < SCHED_INFORMERS; i++) {
        /* Streaming lists where the API server has them (1.34 and later by
         * default): at 20,000 nodes kube-apiserver 1.36 streamed 160,000 GPU
         * objects with 10.7 s of its CPU against 72.3 s in pages of 500, and
         * 139,751 pods with 12.8 s against 18.8 s (docs/scheduler.md,
         * "Streaming lists"). Where it does not, GPU objects (a custom
         * resource) in pages of 5,000: 1.07 s for 16,000 of them at 500 a
         * page, 0.59 s at 5,000; other kinds were no faster. */
        struct egpu_kube_informer_opts o = {
            .res = res[i], .page_limit = i == INF_GPUS ? 5000 : 0, .stream_list = true};
        int rc;

        if (egpu__sched_api_keep(i) != NULL) {
            o.transform = egpu_kube_keep_transform;
            o.transform_ud = (void *)egpu__sched_api_keep(i);
            /* Their handlers read the new object only, but for a GPU
             * object's name and node (on_gpu_update's old_obj, and
             * on_gpu_delete's obj when a relist finds the deletion, come
             * from the store), and nothing else reads the store. */
            o.store_keys_only = true;
            o.store_field = i == INF_GPUS ? "spec.nodeName" : NULL;
        } else {
            o.transform = egpu_kube_strip_managed_fields;
        }

        if (i == INF_RCLAIMS && !api->dra)
            continue; /* no ResourceClaims without --dra (nor the RBAC for them) */
        rc = egpu_kube_informer_new(api->kube, &o, &cbs[i], &api->informers[i], err);

        if (rc == 0)
            rc = egpu_kube_informer_start(api->informers[i], err);
        if (rc)
            return rc;
    }
    return 0;
}

void egpu__sched_api_stop(struct egpu_sched_api *api)
{
    for (int i = 0; i < SCHED_INFORMERS; i++) {
        egpu_kube_informer_free(api->informers[i]);
        api->informers[i] = NULL;
    }
}

bool egpu__sched_api_synced(void *data)
{
    struct egpu_sched_api *api = data;

    for (int i = 0; i < SCHED_INFORMERS; i++) {
        if (i == INF_RCLAIMS && !api->dra)
            continue;
        if (api->informers[i] == NULL || !egpu_kube_informer_has_synced(api->informers[i]))
            return false;
    }
    return true;
}

int egpu__sched_api_annotate(void *data, const char *ns, const char *name, const char *key,
                             const char *value, struct egpu_error *err)
{
    struct egpu_sched_api *api = data;
    struct egpu_kube_status st;
    int rc = 0;

    for (int attempt = 0; attempt < ANNOTATE_TRIES; attempt++) {
        json_t *pod = NULL, *patch;
        const char *rv, *node;

        rc = egpu_kube_get(api->kube, &egpu_kube_pods, ns, name, &pod, &st, err);
        if (rc)
            return rc;
        rv =
            json_string_value(json_object_get(json_object_get(pod, "metadata"), "resourceVersion"));
        node = json_string_value(json_object_get(json_object_get(pod, "spec"), "nodeName"));
        if (value != NULL && node != NULL && node[0] != '\0') {
            rc = egpu_error_set(err, EGPU_KUBE_ECONFLICT, "pod %s/%s is already bound to %s", ns,
                                name, node);
            json_decref(pod);
            return rc;
        }
        patch = json_pack("{s:{s:s?,s:{s:s?}}}", "metadata", "resourceVersion", rv, "annotations",
                          key, value);
        json_decref(pod);
        if (patch == NULL) /* value NULL packs as null: a merge patch deletes with null */
            return egpu_error_set(err, -ENOMEM, "annotating %s/%s: out of memory", ns, name);
        rc = egpu_kube_patch(api->kube, &egpu_kube_pods, ns, name, EGPU_KUBE_MERGE_PATCH, patch,
                             NULL, &st, err);
        json_decref(patch);
        if (rc != EGPU_KUBE_ECONFLICT)
            return rc;
        egpu_log(EGPU_LOG_INFO, "annotation conflict, retrying pod=%s/%s attempt=%d", ns, name,
                 attempt + 1);
    }
    return rc;
}

int egpu__sched_api_annotate_claim(void *data, const char *ns, const char *name, const char *node,
                                   const char *gpus, struct egpu_error *err)
{
    struct egpu_sched_api *api = data;
    struct egpu_kube_status st;
    json_t *patch = json_pack("{s:{s:{s:s,s:s}}}", "metadata", "annotations",
                              EGPU_ANN_SELECTED_NODE, node, EGPU_ANN_SELECTED_GPUS, gpus);
    int rc;

    if (patch == NULL)
        return egpu_error_set(err, -ENOMEM, "annotating claim %s/%s: out of memory", ns, name);
    rc = egpu_kube_patch(api->kube, &egpu_kube_elasticgpuclaims, ns, name, EGPU_KUBE_MERGE_PATCH,
                         patch, NULL, &st, err);
    json_decref(patch);
    return rc;
}

int egpu__sched_api_bind(void *data, const char *ns, const char *name, const char *uid,
                         const char *node, struct egpu_error *err)
{
    struct egpu_sched_api *api = data;
    struct egpu_kube_status st;

    return egpu_kube_bind(api->kube, ns, name, uid && *uid ? uid : NULL, node, NULL, &st, err);
}

int egpu__sched_api_get_pod(void *data, const char *ns, const char *name, json_t **out,
                            struct egpu_error *err)
{
    struct egpu_sched_api *api = data;
    struct egpu_kube_status st;

    return egpu_kube_get(api->kube, &egpu_kube_pods, ns, name, out, &st, err);
}

int egpu__sched_api_get_claim(void *data, const char *ns, const char *name, json_t **out,
                              struct egpu_error *err)
{
    struct egpu_sched_api *api = data;
    struct egpu_kube_status st;

    return egpu_kube_get(api->kube, &egpu_kube_resourceclaims, ns, name, out, &st, err);
}
