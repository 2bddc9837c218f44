/* core/load.c - measured load: what a card's users do, not what it holds.
 *
 * The node agent writes each card's NVML readings into its GPU object
 * (status.used: utilization percent, memory in use in MiB, updateTime). A
 * load-aware placer reads them only where the placement policies tie
 * exactly, so a load never makes a pod fit or not fit, and a cluster whose
 * cards report nothing places exactly as without load awareness.
 *
 * DESIGN: a card's load is one integer percent, the higher of its
 * utilization and its memory in use over its capacity: a card busy in
 * either way is busy for a newcomer, and whole percent steps keep the
 * noise of two readings a point apart from moving pods around more than
 * the policy's own ties already do. Unknown (no report, or one the caller
 * judged stale) is EGPU_LOAD_UNKNOWN, the largest value, so comparisons
 * are a plain "lower is better" and an unknown card is never chosen over a
 * known one: it may be idle, or it may be a card whose agent stopped
 * reporting because the node is in trouble. How old a report may be is
 * the caller's rule (the core has no clock): the scheduler's cache turns a
 * report unknown once its updateTime is older than --load-max-age.
 */
#include <errno.h>

#include "assign_int.h"

uint16_t egpu_load_pct(bool has_util, int64_t util_pct, bool has_mem, int64_t used_mib,
                       uint32_t mem_mib)
{
    int64_t load = -1;

    if (has_util)
        load = util_pct < 0 ? 0 : util_pct;
    if (has_mem && mem_mib > 0) {
        int64_t m = used_mib <= 0                  ? 0
                    : used_mib >= (int64_t)mem_mib ? 100
                                                   : used_mib * 100 / mem_mib;

        load = m > load ? m : load;
    }
    if (load < 0)
        return EGPU_LOAD_UNKNOWN;
    return (uint16_t)(load > 100 ? 100 : load);
}

int egpu_cluster_set_load(struct egpu_cluster *c, struct egpu_node *n, uint32_t gpu,
                          uint16_t load_pct)
{
    if (n == NULL || gpu >= n->ngpus)
        return -EINVAL;
    if (load_pct != EGPU_LOAD_UNKNOWN && load_pct > 100)
        load_pct = 100;
    if (n->gpus[gpu].load_pct == load_pct)
        return 0;
    n->gpus[gpu].load_pct = load_pct;
    egpu__node_touch(c, n); /* memoised picks and scores may read it */
    return 0;
}

uint16_t egpu_pick_load(const struct egpu_node *n, const struct egpu_pick *pick)
{
    uint16_t load = 0;

    if (pick->nshares == 0)
        return EGPU_LOAD_UNKNOWN;
    for (uint32_t i = 0; i < pick->nshares; i++) {
        uint16_t l = n->gpus[pick->shares[i].gpu].load_pct;

        load = l > load ? l : load;
    }
    return load;
}
