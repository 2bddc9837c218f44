/* controller/dra_metering.c - DRA mode's ResourceClaims metered into their
 * namespace's GPUBudgets as pods are (budget.c calls it in each metering
 * step): a consistent LIST of the namespace's ResourceClaims
 * (resource.k8s.io/v1), each one allocated on driver EGPU_API_DRA_DRIVER
 * read by egpu_api_dra_meter_read: what its status.allocation's results
 * consume (cores percent, a share's memory MiB; kube-scheduler wrote them,
 * never the spec a tenant wrote) from its allocationTimestamp (else its
 * creation) to its deletionTimestamp. Read-only: nothing is written on a
 * claim, so no finalizer keeps a deleted one for its last step (the API
 * server's own resource.kubernetes.io/delete-protection keeps an allocated
 * one until it is deallocated; what is between the last step that sees it
 * and its deletion is charged only when a step sees it deleting). A
 * DRA-mode pod asks no elasticgpu.io resource of its own, so it costs
 * nothing as a pod: nothing is counted twice. */
#include <errno.h>
#include <string.h>

#include "controller_int.h"
#include "egpu/log.h"

int egpu__controller_dra_meter_claims(struct egpu__controller *c, const char *ns,
                                      struct egpu_api_meter_pod **m, size_t *n)
{
    struct egpu_kube_status kst = {0};
    struct egpu_error err = {0};
    json_t *list = NULL, *items;
    struct egpu_api_meter_pod *grown;
    const json_t *o;
    size_t i, k;
    int rc;

    rc = egpu_kube_list(c->kube, &egpu_kube_resourceclaims, ns, NULL, &list, &kst, &err);
    if (rc == -ENOENT)
        return 0; /* the API server serves no resource.k8s.io/v1: no claims */
    if (rc) {
        egpu_log(EGPU_LOG_WARN, "namespace=%s: cannot list ResourceClaims to meter: %s", ns,
                 err.msg);
        return rc;
    }
    items = json_object_get(list, "items");
    k = json_array_size(items);
    grown = egpu_realloc(*m, (*n + k + 1) * sizeof(**m));
    if (grown == NULL) {
        json_decref(list);
        return -ENOMEM;
    }
    *m = grown;
    json_array_foreach(items, i, o)
    {
        struct egpu_api_meter_pod r;

        if (egpu_api_dra_meter_read(o, &r, &err) != 0) {
            egpu_log(EGPU_LOG_WARN, "resourceclaim=%s/%s not metered: %s", ns,
                     egpu_api_str(json_object_get(json_object_get(o, "metadata"), "name")),
                     err.msg);
            continue;
        }
        if (r.start_s > 0 && r.core_pct > 0)
            (*m)[(*n)++] = r;
    }
    json_decref(list);
    return 0;
}
