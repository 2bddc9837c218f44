/* controller/route.c - egpu-controller's event routing: the informers on
 * ElasticGPUClaims, ElasticGPUClasses, ElasticGPUs, GPUs, Nodes, Pods and
 * GPUBudgets, and the callbacks deciding which keys of the work queue a
 * change concerns (see controller_int.h for the keys).
 *
 * The callbacks run on each informer's own thread and only queue keys (the
 * queue is thread-safe) and take notes for the index (index.c) and GPU
 * status (gpustatus.c); the worker (main.c) does the rest.
 */
#include <stdio.h>
#include <string.h>

#include "controller_int.h"

static const char *meta_str(const json_t *o, const char *k)
{
    return egpu_api_str(json_object_get(json_object_get(o, "metadata"), k));
}

void egpu__controller_enqueue_claim(struct egpu__controller *c, const char *ns, const char *name)
{
    char key[EGPU_NAMESPACE_MAX + EGPU_K8S_NAME_MAX + 4];

    if (ns == NULL || name == NULL || name[0] == '\0')
        return;
    snprintf(key, sizeof(key), "c/%s/%s", ns, name);
    (void)egpu_controller_queue_add(c->queue, key);
}

void egpu__controller_enqueue_budgets(struct egpu__controller *c, const char *ns)
{
    char key[EGPU_NAMESPACE_MAX + 4];

    if (ns == NULL || ns[0] == '\0')
        return;
    snprintf(key, sizeof(key), "b/%s", ns);
    (void)egpu_controller_queue_add(c->queue, key);
}

void egpu__controller_enqueue_egpu(struct egpu__controller *c, const char *name)
{
    char key[EGPU_K8S_NAME_MAX + 4];

    if (name == NULL || name[0] == '\0')
        return;
    snprintf(key, sizeof(key), "e/%s", name);
    (void)egpu_controller_queue_add(c->queue, key);
}

void egpu__controller_enqueue_all(struct egpu__controller *c, enum egpu__controller_inf i,
                                  bool pending_only)
{
    json_t *all = egpu_kube_informer_list(c->inf[i]), *o;
    size_t k;

    json_array_foreach(all, k, o)
    {
        const char *phase = egpu_api_str(json_object_get(json_object_get(o, "status"), "phase"));

        if (i == EGPU__CONTROLLER_EGPUS)
            egpu__controller_enqueue_egpu(c, meta_str(o, "name"));
        else if (i == EGPU__CONTROLLER_BUDGETS)
            egpu__controller_enqueue_budgets(c, meta_str(o, "namespace"));
        else if (!pending_only || phase == NULL || strcmp(phase, "Pending") == 0)
            egpu__controller_enqueue_claim(c, meta_str(o, "namespace"), meta_str(o, "name"));
    }
    json_decref(all);
}

/* ---- informer callbacks: queue the keys a change concerns ---- */

static void on_claim(void *ud, const json_t *o)
{
    struct egpu__controller *c = ud;
    const json_t *st = json_object_get(o, "status");
    char name[EGPU_K8S_NAME_MAX];

    egpu__controller_enqueue_claim(c, meta_str(o, "namespace"), meta_str(o, "name"));
    /* Its ElasticGPUs follow it (Released, Bound). */
    egpu__controller_enqueue_egpu(c, egpu_api_str(json_object_get(st, "elasticGPUName")));
    egpu__controller_enqueue_egpu(
        c, egpu_api_str(json_object_get(json_object_get(o, "spec"), "elasticGPUName")));
    if (meta_str(o, "uid") != NULL &&
        egpu_controller_provisioned_name(meta_str(o, "uid"), name, sizeof(name)) == 0)
        egpu__controller_enqueue_egpu(c, name);
}

static void on_egpu(void *ud, const json_t *o)
{
    struct egpu__controller *c = ud;
    const json_t *ref = json_object_get(json_object_get(o, "spec"), "claimRef");

    const char *rns = egpu_api_str(json_object_get(ref, "namespace"));
    const json_t *f, *meta = json_object_get(o, "metadata");
    bool fin = false;
    size_t i;

    egpu__controller_index_note_egpu(c, meta_str(o, "name"), false);
    egpu__controller_enqueue_egpu(c, meta_str(o, "name"));
    egpu__controller_enqueue_claim(c, rns, egpu_api_str(json_object_get(ref, "name")));
    json_array_foreach(json_object_get(meta, "finalizers"), i, f)
    {
        const char *s = egpu_api_str(f);

        fin = fin || (s != NULL && strcmp(s, EGPU_FINALIZER_METERING) == 0);
    }
    /* Meter the claim's namespace now: an ElasticGPU being deleted may be
     * released once metered; one of a budgeted namespace without the
     * finalizer gets it before it can go unmetered. */
    if (rns != NULL && ((fin && json_object_get(meta, "deletionTimestamp") != NULL) ||
                        (!fin && egpu__controller_budget_exists(c, rns))))
        egpu__controller_enqueue_budgets(c, rns);
}

static void on_egpu_delete(void *ud, const json_t *o)
{
    struct egpu__controller *c = ud;

    on_egpu(ud, o);
    egpu__controller_index_note_egpu(c, meta_str(o, "name"), true);
    egpu__controller_enqueue_all(c, EGPU__CONTROLLER_CLAIMS,
                                 false); /* Bound ones may be Lost; Pending ones may fit now */
}

/* Classes, GPUs and Nodes: capacity or rules changed. */
static void on_capacity(void *ud, const json_t *o)
{
    struct egpu__controller *c = ud;

    (void)o;
    egpu__controller_index_note_capacity(c);
    egpu__controller_enqueue_all(c, EGPU__CONTROLLER_CLAIMS, true);
    egpu__controller_enqueue_all(c, EGPU__CONTROLLER_EGPUS, false);
}

/* Only a change of what provisioning reads counts: a GPU's status written
 * on every pod, or a Node's heartbeat, would queue every claim each time. */
static void on_capacity_update(void *ud, const json_t *old, const json_t *o)
{
    if (egpu__controller_capacity_changed(old, o))
        on_capacity(ud, o);
}

static void on_pod(void *ud, const json_t *o)
{
    struct egpu__controller *c = ud;
    const char *ns = meta_str(o, "namespace"), *key;
    json_t *v;

    json_object_foreach((json_t *)json_object_get(json_object_get(o, "metadata"), "annotations"),
                        key, v)
    {
        if (strncmp(key, EGPU_ANN_CLAIM_PREFIX, strlen(EGPU_ANN_CLAIM_PREFIX)) == 0)
            egpu__controller_enqueue_claim(c, ns, egpu_api_str(v));
    }
}

/* A GPUBudget added or deleted, or its spec changed (not its status: the
 * controller's own writes would queue it again at once). */
static void on_budget(void *ud, const json_t *o)
{
    egpu__controller_enqueue_budgets(ud, meta_str(o, "namespace"));
}

static void on_budget_update(void *ud, const json_t *old, const json_t *o)
{
    const json_t *g0 = json_object_get(json_object_get(old, "metadata"), "generation");
    const json_t *g1 = json_object_get(json_object_get(o, "metadata"), "generation");

    if (!json_equal((json_t *)g0, (json_t *)g1))
        on_budget(ud, o);
}

/* A pod holding the metering finalizer that ended or is being deleted may
 * be released once metered: meter its namespace now rather than at the
 * next --meter-seconds. */
static void on_pod_metering(struct egpu__controller *c, const json_t *o)
{
    const json_t *f, *meta = json_object_get(o, "metadata");
    size_t i;

    if (json_object_get(meta, "deletionTimestamp") == NULL && !egpu_api_pod_finished(o))
        return;
    json_array_foreach(json_object_get(meta, "finalizers"), i, f)
    {
        const char *s = egpu_api_str(f);

        if (s != NULL && strcmp(s, EGPU_FINALIZER_METERING) == 0)
            egpu__controller_enqueue_budgets(c, meta_str(o, "namespace"));
    }
}

#define UPDATE_OF(fn)                                                     \
    static void fn##_update(void *ud, const json_t *old, const json_t *o) \
    {                                                                     \
        fn(ud, old);                                                      \
        fn(ud, o);                                                        \
    }
UPDATE_OF(on_claim)
UPDATE_OF(on_egpu)
UPDATE_OF(on_pod)

/* Pods and GPUs also feed GPU status.allocated (gpustatus.c); pods also
 * what the inventories count as held (index.c). */
/* Classes are capacity, and in DRA mode a DeviceClass each (dra.c). */
static void on_class(void *ud, const json_t *o)
{
    on_capacity(ud, o);
    egpu__controller_dra_note_class(ud, o);
}

static void on_class_update(void *ud, const json_t *old, const json_t *o)
{
    on_capacity_update(ud, old, o);
    egpu__controller_dra_note_class(ud, o);
}

static void on_pod_add(void *ud, const json_t *o)
{
    on_pod(ud, o);
    egpu__controller_dra_note_pod(ud, o);
    egpu__controller_gs_pod(ud, o, false);
    egpu__controller_index_note_pod(ud, o, false);
}

static void on_pod_changed(void *ud, const json_t *old, const json_t *o)
{
    on_pod_update(ud, old, o);
    egpu__controller_dra_note_pod(ud, o);
    egpu__controller_gs_pod(ud, o, false);
    egpu__controller_index_note_pod(ud, o, false);
    on_pod_metering(ud, o);
}

static void on_pod_delete(void *ud, const json_t *o)
{
    on_pod(ud, o);
    egpu__controller_dra_note_pod(ud, o);
    egpu__controller_gs_pod(ud, o, true);
    egpu__controller_index_note_pod(ud, o, true);
}

static void on_gpu_add(void *ud, const json_t *o)
{
    on_capacity(ud, o);
    egpu__controller_gs_gpu(ud, NULL, o, false);
}

static void on_gpu_update(void *ud, const json_t *old, const json_t *o)
{
    on_capacity_update(ud, old, o);
    egpu__controller_gs_gpu(ud, old, o, false);
}

static void on_gpu_delete(void *ud, const json_t *o)
{
    on_capacity(ud, o);
    egpu__controller_gs_gpu(ud, NULL, o, true);
}

void egpu__controller_route_cbs(struct egpu__controller *c,
                                struct egpu_kube_informer_cbs cbs[EGPU__CONTROLLER_NINF])
{
    const struct egpu_kube_informer_cbs all[EGPU__CONTROLLER_NINF] = {
        {on_claim, on_claim_update, on_claim, c},
        {on_class, on_class_update, on_class, c},
        {on_egpu, on_egpu_update, on_egpu_delete, c},
        {on_gpu_add, on_gpu_update, on_gpu_delete, c},
        {on_capacity, on_capacity_update, on_capacity, c},
        {on_pod_add, on_pod_changed, on_pod_delete, c},
        {on_budget, on_budget_update, on_budget, c},
    };

    memcpy(cbs, all, sizeof(all));
}

int egpu__controller_informers_start(struct egpu__controller *c, struct egpu_error *err)
{
    static const struct egpu_kube_resource *const res[EGPU__CONTROLLER_NINF] = {
        &egpu_kube_elasticgpuclaims,
        &egpu_kube_elasticgpuclasses,
        &egpu_kube_elasticgpus,
        &egpu_kube_gpus,
        &egpu_kube_nodes,
        &egpu_kube_pods,
        &egpu_kube_gpubudgets};
    struct egpu_kube_informer_cbs cbs[EGPU__CONTROLLER_NINF];
    int rc = 0;

    egpu__controller_route_cbs(c, cbs);
    for (int i = 0; rc == 0 && i < EGPU__CONTROLLER_NINF; i++) {
        /* Streaming lists (kube.h's stream_list) where the API server has them. */
        struct egpu_kube_informer_opts io = {.res = res[i], .stream_list = true};

        rc = egpu_kube_informer_new(c->kube, &io, &cbs[i], &c->inf[i], err);
    }
    for (int i = 0; rc == 0 && i < EGPU__CONTROLLER_NINF; i++)
        rc = egpu_kube_informer_start(c->inf[i], err);
    return rc;
}
