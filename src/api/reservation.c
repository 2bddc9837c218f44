/* api/reservation.c - what an ElasticGPU holds on its cards.
 *
 * An ElasticGPU is capacity set aside for a claim: from the moment it names
 * its card(s) (a decoded one always does: gpuShare.gpuName or
 * physicalGPU.gpuNames) until it fails or is deleted, that capacity is
 * allocated, as a PersistentVolume's disk is taken whether or not a pod
 * mounts it. Released ones still hold it (Retain keeps the slice until an
 * operator deletes the ElasticGPU; Delete frees it when the object goes).
 * This is the one reading of it: the scheduler's cache and the trace replay
 * both apply its result with egpu_cluster_reserve.
 *
 * A pod's container that uses the claim runs inside that capacity: the one
 * rule of when it is counted there rather than beside it
 * (egpu_api_resv_can_hold) is here too, read by the scheduler's cache and by
 * egpu-controller's inventory, so neither counts a share twice or misses one.
 */
#include <string.h>

#include "egpu/api.h"

bool egpu_api_egpu_reservation(const struct egpu_api_egpu *e, struct egpu_reservation *out)
{
    memset(out, 0, sizeof(*out));
    if (e->phase == EGPU_API_EGPU_FAILED || e->ngpus == 0 || e->ngpus > EGPU_NODE_GPUS_MAX)
        return false;
    if (e->source == EGPU_API_PROVISIONER_PHYSICAL) {
        out->core_milli = EGPU_GPU_MILLI;
    } else {
        out->core_milli = (uint32_t)e->core_pct * 10; /* the decoder keeps it 1..99 */
        out->mem_mib = e->has_mem ? (uint32_t)e->mem_mib : 0;
    }
    out->ncards = e->ngpus;
    for (uint32_t i = 0; i < e->ngpus; i++)
        out->uuids[i] = e->gpu_names[i];
    return true;
}

bool egpu_api_resv_can_hold(const struct egpu_reservation *r,
                            const struct egpu_container_request *cr)
{
    if (cr->ncards != r->ncards)
        return false;
    if (r->core_milli == EGPU_GPU_MILLI || cr->core_milli == EGPU_GPU_MILLI)
        return r->core_milli == cr->core_milli;
    return cr->core_milli <= r->core_milli && cr->mem_mib <= r->mem_mib;
}
