/* webhook/place.c - POST /mutate-place: spec.schedulerName of the pods that
 * ask no GPU, in the namespaces an operator chose.
 *
 * A pod that asks no GPU is scheduled by the cluster's default
 * kube-scheduler, which spreads it (LeastAllocated) onto GPU nodes whose
 * cards are free and strands those cards; no kube-scheduler setting packs it
 * by GPU (NodeResourcesFit leaves a resource the pod does not request out of
 * its score). egpu-scheduler --pods-without-gpu place does, but only for the
 * pods of its scheduler, elastic-gpu-scheduler. The webhook
 * place.webhook.elasticgpu.io (deploy/webhook/webhooks.yaml) sends here the
 * pods of namespaces labelled elasticgpu.io/pods-without-gpu: place whose
 * matchConditions say they ask no GPU and name no scheduler; this route
 * checks the same again (a direct caller, a configuration edited by hand):
 *
 *   a Pod CREATE, no subresource, a spec object, no schedulerName of its own
 *   (absent, "" or "default-scheduler": egpu__webhook_names_scheduler), asking
 *   no GPU (egpu_api_pod_asks_gpu: no elasticgpu.io or compatible resource in
 *   any container or init container, HAMi's names included, no ElasticGPUClaim
 *   annotation): one JSON Patch operation setting spec.schedulerName to
 *   --scheduler-name. (DRA mode's marker elasticgpu.io/dra is no GPU ask here;
 *   the matchConditions, which count every elasticgpu.io/ name, never send a
 *   pod carrying it, and /mutate gave such a pod its scheduler already);
 *   anything else (a GPU pod, which /mutate handles; another scheduler; an
 *   UPDATE; another kind; --set-scheduler-name false, where the extender
 *   runs in the main kube-scheduler and no elastic-gpu-scheduler exists):
 *   allowed, unchanged.
 *
 * It never denies: a wrong review gets handle.c's errors, like every route.
 * No side effects (dry runs are answered the same); the patched pod names a
 * scheduler, so a second pass makes no patch.
 */
#include <errno.h>
#include <string.h>

#include "webhook_int.h"

int egpu__webhook_place(const struct egpu_webhook_config *cfg,
                        const struct egpu__webhook_review *rv, struct egpu__webhook_verdict *v)
{
    struct egpu__webhook_pointer at = {.n = 1, .seg = {"spec"}};
    struct egpu__webhook_podpart pp;
    json_t *want;
    int rc;

    memset(v, 0, sizeof(*v));
    v->allowed = true;
    if (!cfg->set_scheduler_name || rv->op != EGPU_WEBHOOK_OP_CREATE ||
        rv->sub_resource[0] != '\0' ||
        !egpu__webhook_podpart_find(rv->group, rv->version, rv->kind, rv->object, &pp) ||
        !pp.is_pod || !json_is_object(pp.spec) || egpu__webhook_names_scheduler(pp.spec) ||
        egpu_api_pod_asks_gpu(pp.spec, pp.annotations, true))
        return 0;
    /* A shallow copy: only schedulerName differs, every other member is the
     * same value, which egpu__webhook_patch_diff names nowhere. */
    want = json_copy((json_t *)pp.spec);
    v->ops = json_array();
    if (want == NULL || v->ops == NULL ||
        json_object_set_new(want, "schedulerName",
                            json_string(egpu__webhook_scheduler_name(cfg))) != 0) {
        json_decref(want);
        egpu__webhook_verdict_free(v);
        return -ENOMEM;
    }
    rc = egpu__webhook_patch_diff(v->ops, &at, pp.spec, want);
    json_decref(want);
    if (rc || json_array_size(v->ops) == 0)
        egpu__webhook_verdict_free(v);
    return rc;
}
