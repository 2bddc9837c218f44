/* api/meter.c - what a pod is charged for against its namespace's
 * GPUBudget: its GPU ask and the seconds it held it, read from fields only
 * the API server, the scheduler's bind and the kubelet write (the binding's
 * PodScheduled condition, containers' terminated state, deletionTimestamp),
 * never from anything the pod's owner sets. No I/O. */
#include <stdint.h>
#include <string.h>

#include "egpu/api.h"

/* PodScheduled True's lastTransitionTime, or 0 (with rc 0) when not bound. */
static int bound_at(const json_t *pod, int64_t *out, struct egpu_error *err)
{
    const json_t *c;
    size_t i;

    *out = 0;
    if (egpu_api_str(json_object_get(json_object_get(pod, "spec"), "nodeName")) == NULL)
        return 0;
    json_array_foreach(json_object_get(json_object_get(pod, "status"), "conditions"), i, c)
    {
        const char *type = egpu_api_str(json_object_get(c, "type"));
        const char *st = egpu_api_str(json_object_get(c, "status"));

        if (type != NULL && strcmp(type, "PodScheduled") == 0 && st != NULL &&
            strcmp(st, "True") == 0)
            return egpu_api_time_parse(egpu_api_str(json_object_get(c, "lastTransitionTime")),
                                       "status.conditions[PodScheduled].lastTransitionTime", out,
                                       err);
    }
    return 0;
}

/* The last terminated.finishedAt of the containers of a pod that ended, else
 * its deletionTimestamp, else INT64_MAX. */
static int ended_at(const json_t *pod, int64_t *out, struct egpu_error *err)
{
    const json_t *status = json_object_get(pod, "status"), *cs;
    const char *phase = egpu_api_str(json_object_get(status, "phase"));
    const char *del =
        egpu_api_str(json_object_get(json_object_get(pod, "metadata"), "deletionTimestamp"));
    int64_t last = 0, t;
    size_t i;
    int rc;

    *out = INT64_MAX;
    if (phase != NULL && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0)) {
        json_array_foreach(json_object_get(status, "containerStatuses"), i, cs)
        {
            const char *fin = egpu_api_str(json_object_get(
                json_object_get(json_object_get(cs, "state"), "terminated"), "finishedAt"));

            if (fin == NULL)
                continue;
            rc = egpu_api_time_parse(fin, "status.containerStatuses[].state.terminated.finishedAt",
                                     &t, err);
            if (rc)
                return rc;
            if (t > last)
                last = t;
        }
        if (last > 0) {
            *out = last;
            return 0;
        }
    }
    if (del != NULL)
        return egpu_api_time_parse(del, "metadata.deletionTimestamp", out, err);
    return 0;
}

int egpu_api_meter_pod_read(const json_t *pod, struct egpu_api_meter_pod *out,
                            struct egpu_error *err)
{
    struct egpu_api_meter_pod p = {0};
    const json_t *ctr;
    size_t i;
    int rc;

    json_array_foreach(json_object_get(json_object_get(pod, "spec"), "containers"), i, ctr)
    {
        const char *name = egpu_api_str(json_object_get(ctr, "name"));
        struct egpu_api_gpu_ask ask;

        rc = egpu_api_container_gpu(ctr, name != NULL ? name : "", false, &ask, err);
        if (rc)
            return rc;
        p.core_pct += ask.core_pct;
        if (ask.has_mem && ask.core_pct < 100)
            p.mem_mib += ask.mem_mib;
    }
    rc = bound_at(pod, &p.start_s, err);
    if (!rc)
        rc = ended_at(pod, &p.end_s, err);
    if (rc)
        return rc;
    *out = p;
    return 0;
}

void egpu_api_meter_add(const struct egpu_api_meter_pod *p, int64_t from_s, int64_t to_s,
                        int64_t *core_pct_s, int64_t *mem_mib_s)
{
    int64_t a, b;

    if (p->start_s == 0 || p->core_pct == 0)
        return;
    a = p->start_s > from_s ? p->start_s : from_s;
    b = p->end_s < to_s ? p->end_s : to_s;
    if (b <= a)
        return;
    *core_pct_s += p->core_pct * (b - a);
    *mem_mib_s += p->mem_mib * (b - a);
}
