/* core/request.c - a pod's resource request, checked against DESIGN.md section 1.
 *
 * elasticgpu.io/gpu-core is percent of one GPU: 1..99 is a share of one card,
 * 100*k is k whole cards; the core keeps it in milli-GPU (percent * 10) so the
 * openb trace's gpu_milli fits without rounding. gpu-memory is MiB per card.
 */
#include <errno.h>

#include "egpu/core.h"

int egpu_container_request_set(struct egpu_container_request *c, int64_t core_pct, int64_t mem_mib,
                               struct egpu_error *err)
{
    if (core_pct < 1 || (core_pct >= 100 && core_pct % 100 != 0) ||
        core_pct > 100LL * EGPU_NODE_GPUS_MAX)
        return egpu_error_set(err, EGPU_ERANGE,
                              "gpu-core %lld: allowed 1..99 (a share of one card) or 100*k "
                              "(k whole cards, k <= %d)",
                              (long long)core_pct, EGPU_NODE_GPUS_MAX);
    if (mem_mib < 0 || mem_mib > UINT32_MAX)
        return egpu_error_set(err, EGPU_ERANGE, "gpu-memory %lld MiB: allowed 0..%u",
                              (long long)mem_mib, UINT32_MAX);
    if (core_pct < 100) {
        c->core_milli = (uint32_t)core_pct * 10;
        c->ncards = 1;
    } else {
        c->core_milli = EGPU_GPU_MILLI;
        c->ncards = (uint32_t)(core_pct / 100);
    }
    c->mem_mib = (uint32_t)mem_mib;
    return 0;
}

int egpu_pod_request_validate(const struct egpu_pod_request *r, struct egpu_error *err)
{
    uint32_t cards = 0;

    if (r->cpu_milli < 0 || r->mem_mib < 0)
        return egpu_error_set(err, EGPU_ERANGE, "pod cpu and memory requests must be >= 0");
    if (r->ncontainers > EGPU_CONTAINERS_MAX)
        return egpu_error_set(err, EGPU_ERANGE, "%u GPU containers; at most %d allowed",
                              r->ncontainers, EGPU_CONTAINERS_MAX);
    for (uint32_t i = 0; i < r->ncontainers; i++) {
        const struct egpu_container_request *c = &r->containers[i];

        if (c->ncards == 0 || c->ncards > EGPU_NODE_GPUS_MAX)
            return egpu_error_set(err, EGPU_ERANGE, "container %u: %u cards; allowed 1..%d", i,
                                  c->ncards, EGPU_NODE_GPUS_MAX);
        if (c->core_milli == 0 || c->core_milli > EGPU_GPU_MILLI ||
            (c->ncards > 1 && c->core_milli != EGPU_GPU_MILLI))
            return egpu_error_set(err, EGPU_ERANGE,
                                  "container %u: %u milli-GPU on %u cards; allowed 1..999 on one "
                                  "card or 1000 on each of k cards",
                                  i, c->core_milli, c->ncards);
        cards += c->ncards;
    }
    if (cards > EGPU_PICK_SHARES_MAX)
        return egpu_error_set(err, EGPU_ERANGE, "%u cards in one pod; at most %d allowed", cards,
                              EGPU_PICK_SHARES_MAX);
    return 0;
}

uint64_t egpu_pod_request_gpu_milli(const struct egpu_pod_request *r)
{
    uint64_t total = 0;

    for (uint32_t i = 0; i < r->ncontainers; i++)
        total += (uint64_t)r->containers[i].core_milli * r->containers[i].ncards;
    return total;
}
