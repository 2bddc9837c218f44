/* controller/egpu.c - reconciling one ElasticGPU's phase, as the
 * PersistentVolume controller reconciles a PV.
 *
 *   Failed     its node left: no Node object and no GPU object on it (back
 *              to the phase below once the node returns);
 *   Available  no claimRef, or a claimRef without uid (pre-bound by hand to
 *              a claim that has not bound yet);
 *   Bound      claimRef with the uid of a claim that exists (the claim's
 *              reconcile writes this first when it binds);
 *   Released   claimRef with a uid no existing claim has (checked against
 *              the API server, not only the cache). Then the reclaim
 *              policy: Retain keeps it Released; Delete deletes it when
 *              this controller provisioned it (annotation
 *              elasticgpu.io/provisioned-by), and keeps a hand-made one
 *              Released with a message saying so.
 * Each change of phase is one status write and an event with its reason.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "controller_int.h"
#include "egpu/log.h"

/* Does node name still exist: a Node object, or a GPU object on it? */
static bool node_present(struct egpu__controller *c, const char *name)
{
    json_t *n = egpu_kube_informer_get(c->inf[EGPU__CONTROLLER_NODES], NULL, name), *gpus, *g;
    bool found = n != NULL;
    size_t i;

    json_decref(n);
    if (found)
        return true;
    gpus = egpu_kube_informer_list(c->inf[EGPU__CONTROLLER_GPUS]);
    if (gpus == NULL)
        return true; /* out of memory: do not fail anything */
    json_array_foreach(gpus, i, g)
    {
        const char *nn = egpu_api_str(json_object_get(json_object_get(g, "spec"), "nodeName"));

        if (nn != NULL && strcmp(nn, name) == 0) {
            found = true;
            break;
        }
    }
    json_decref(gpus);
    return found;
}

/* Does the claim of e's claimRef exist with its uid? Asks the API server
 * when the cache has no such claim. Returns 1, 0 or a negative code. */
static int claim_exists(struct egpu__controller *c, const struct egpu_api_egpu *e)
{
    json_t *o = egpu_kube_informer_get(c->inf[EGPU__CONTROLLER_CLAIMS], e->claim_ns, e->claim_name);
    const char *uid;
    int rc, yes;

    if (o == NULL) {
        rc = egpu_kube_get(c->kube, &egpu_kube_elasticgpuclaims, e->claim_ns, e->claim_name, &o,
                           NULL, NULL);
        if (rc == -ENOENT)
            return 0;
        if (rc)
            return rc;
    }
    uid = egpu_api_str(json_object_get(json_object_get(o, "metadata"), "uid"));
    yes = uid != NULL && strcmp(uid, e->claim_uid) == 0;
    json_decref(o);
    return yes;
}

static int set_phase(struct egpu__controller *c, json_t *obj, struct egpu_api_egpu *e,
                     enum egpu_api_egpu_phase p, bool warning, const char *reason, const char *msg)
{
    json_t *enc;
    int rc;

    if (e->phase == p && strcmp(e->reason, reason) == 0 &&
        strncmp(e->message, msg, sizeof(e->message) - 1) == 0)
        return 0;
    e->phase = p;
    snprintf(e->reason, sizeof(e->reason), "%s", reason);
    snprintf(e->message, sizeof(e->message), "%s", msg);
    e->observed_generation = e->meta.generation;
    enc = egpu_api_egpu_encode(e);
    if (enc == NULL)
        return -ENOMEM;
    rc = egpu__controller_put(c, &egpu_kube_elasticgpus, obj, enc, "status", NULL);
    json_decref(enc);
    if (rc == 0)
        egpu__controller_event(c, EGPU_KIND_ELASTICGPU, NULL, e->meta.name, e->meta.uid, warning,
                               reason, "%s", msg);
    return rc;
}

/* The claim is gone: Released, then the reclaim policy. */
static int release(struct egpu__controller *c, json_t *obj, struct egpu_api_egpu *e)
{
    const json_t *ann = json_object_get(json_object_get(obj, "metadata"), "annotations");
    bool provisioned = egpu_api_str(json_object_get(ann, EGPU_ANN_PROVISIONED_BY)) != NULL;
    /* Hand-made ElasticGPUs without a policy are kept, as manual PVs are. */
    bool del = e->has_reclaim_policy && e->reclaim_policy == EGPU_API_RECLAIM_DELETE;
    struct egpu_error err = {0};
    char msg[1024];
    int rc;

    if (del && !provisioned) {
        snprintf(msg, sizeof(msg),
                 "ElasticGPUClaim %s/%s is gone; reclaimPolicy Delete deletes only provisioned "
                 "ElasticGPUs, this one is kept",
                 e->claim_ns, e->claim_name);
        return set_phase(c, obj, e, EGPU_API_EGPU_RELEASED, true, "NotProvisioned", msg);
    }
    if (e->phase != EGPU_API_EGPU_RELEASED) {
        snprintf(msg, sizeof(msg), "ElasticGPUClaim %s/%s (uid %s) is gone; reclaimPolicy %s",
                 e->claim_ns, e->claim_name, e->claim_uid, del ? "Delete" : "Retain");
        rc = set_phase(c, obj, e, EGPU_API_EGPU_RELEASED, false, "Released", msg);
        if (rc)
            return rc;
    }
    if (!del)
        return 0;
    rc = egpu_kube_delete(c->kube, &egpu_kube_elasticgpus, NULL, e->meta.name, NULL, &err);
    if (rc == -ENOENT)
        return 0;
    if (rc)
        return rc;
    egpu__controller_event(
        c, EGPU_KIND_ELASTICGPU, NULL, e->meta.name, e->meta.uid, false, "Deleted",
        "ElasticGPUClaim %s/%s is gone and reclaimPolicy is Delete: deleted with its "
        "reservation",
        e->claim_ns, e->claim_name);
    return 0;
}

int egpu__controller_egpu_sync(struct egpu__controller *c, const char *name)
{
    json_t *obj = NULL;
    struct egpu_api_egpu *e = egpu__controller_egpu_get(c, name, &obj);
    char msg[1024];
    int rc = 0, exists;

    if (e == NULL)
        return 0;
    if (e->meta.deletion_timestamp[0] != '\0')
        goto out;
    if (!node_present(c, e->node_name)) {
        snprintf(msg, sizeof(msg), "node %s has no Node object and no GPU objects", e->node_name);
        rc = set_phase(c, obj, e, EGPU_API_EGPU_FAILED, true, "NodeLost", msg);
        goto out;
    }
    if (!e->has_claim_ref) {
        rc = set_phase(c, obj, e, EGPU_API_EGPU_AVAILABLE, false, "Available",
                       "not bound to a claim");
        goto out;
    }
    if (e->claim_uid[0] == '\0') {
        snprintf(msg, sizeof(msg), "reserved for ElasticGPUClaim %s/%s", e->claim_ns,
                 e->claim_name);
        rc = set_phase(c, obj, e, EGPU_API_EGPU_AVAILABLE, false, "Available", msg);
        egpu__controller_enqueue_claim(c, e->claim_ns, e->claim_name);
        goto out;
    }
    exists = claim_exists(c, e);
    if (exists < 0) {
        rc = exists;
        goto out;
    }
    if (exists) {
        /* The claim's reconcile writes Bound when it binds; here only the
         * repair of an ElasticGPU that lost it (back from Failed). */
        if (e->phase != EGPU_API_EGPU_BOUND && e->phase != EGPU_API_EGPU_PENDING) {
            snprintf(msg, sizeof(msg), "bound to ElasticGPUClaim %s/%s", e->claim_ns,
                     e->claim_name);
            rc = set_phase(c, obj, e, EGPU_API_EGPU_BOUND, false, "Bound", msg);
        }
        egpu__controller_enqueue_claim(c, e->claim_ns, e->claim_name);
        goto out;
    }
    rc = release(c, obj, e);
out:
    json_decref(obj);
    egpu_free(e);
    return rc;
}
