/* sim/sample.c - the nodes kube-scheduler sends the extender when it samples.
 *
 * kube-scheduler (pkg/scheduler/schedule_one.go) does not filter every node
 * unless percentageOfNodesToScore is 100: numFeasibleNodesToFind gives how
 * many feasible nodes it looks for (all below 100 nodes; else N * p / 100,
 * p = 50 - N / 125 when the setting is unset, at least 5, and at least 100
 * nodes), and findNodesThatPassFilters checks the node list from
 * nextStartNodeIndex on, round robin, stopping once it has that many nodes
 * that pass its own filters; nextStartNodeIndex then moves on by the nodes it
 * processed (feasible plus refused). Only those feasible nodes reach the
 * extender's filter, so the policy chooses among them.
 *
 * Its own filters are modelled as NodeResourcesFit on what nodes advertise:
 * CPU, memory and the device plugin's elasticgpu.io/gpu-core, a node-wide sum
 * (it knows no cards, no models: the extender judges those).
 */
#include <errno.h>
#include <string.h>

#include "egpu/cli.h"
#include "egpu/sim.h"

#define KUBE_MIN_NODES 100 /* minFeasibleNodesToFind */
#define KUBE_MIN_PCT   5   /* minFeasibleNodesPercentageToFind */

size_t egpu_sim_kube_nodes_to_find(size_t nnodes, unsigned percent)
{
    size_t k;

    if (nnodes < KUBE_MIN_NODES || percent >= 100)
        return nnodes;
    if (percent == 0) {
        long p = 50 - (long)(nnodes / 125);

        percent = p < KUBE_MIN_PCT ? KUBE_MIN_PCT : (unsigned)p;
    }
    k = nnodes * percent / 100;
    return k < KUBE_MIN_NODES ? KUBE_MIN_NODES : k;
}

int egpu_sim_sample_parse(const char *arg, struct egpu_sim_sample *out, struct egpu_error *err)
{
    size_t len = strlen(arg);
    uint64_t v;

    memset(out, 0, sizeof(*out));
    if (strcmp(arg, "all") == 0)
        return 0;
    if (strcmp(arg, "kube") == 0) {
        out->mode = EGPU_SIM_SAMPLE_KUBE;
        return 0;
    }
    if (strncmp(arg, "kube:", 5) == 0 && egpu_cli_parse_u64(arg + 5, 1, 100000000, &v) == 0) {
        out->mode = EGPU_SIM_SAMPLE_KUBE;
        out->value = v;
        return 0;
    }
    if (len > 1 && arg[len - 1] == '%') {
        char num[32];

        if (len - 1 < sizeof(num)) {
            memcpy(num, arg, len - 1);
            num[len - 1] = '\0';
            if (egpu_cli_parse_u64(num, 1, 100, &v) == 0) {
                out->mode = EGPU_SIM_SAMPLE_PERCENT;
                out->value = v;
                return 0;
            }
        }
    } else if (egpu_cli_parse_u64(arg, 1, 100000000, &v) == 0) {
        out->mode = EGPU_SIM_SAMPLE_COUNT;
        out->value = v;
        return 0;
    }
    return egpu_error_set(err, -EINVAL,
                          "\"%s\": expected all, kube, kube:NODES (NODES 1..100000000), a node "
                          "count 1..100000000 or a percent 1%%..100%%",
                          arg);
}

size_t egpu_sim_sample_want(const struct egpu_sim_sample *s, size_t nnodes)
{
    size_t k;

    switch (s->mode) {
    case EGPU_SIM_SAMPLE_KUBE:
        if (s->value == 0)
            return egpu_sim_kube_nodes_to_find(nnodes, 0);
        /* The share a cluster of value nodes would find, of these nodes. */
        k = (size_t)((uint64_t)nnodes * egpu_sim_kube_nodes_to_find((size_t)s->value, 0) /
                     s->value);
        break;
    case EGPU_SIM_SAMPLE_COUNT:
        k = (size_t)s->value;
        break;
    case EGPU_SIM_SAMPLE_PERCENT:
        k = nnodes * (size_t)s->value / 100;
        break;
    default:
        return nnodes;
    }
    k = k < 1 ? 1 : k;
    return k > nnodes ? nnodes : k;
}

bool egpu_sim_kube_fits(const struct egpu_node *node, const struct egpu_pod_request *r)
{
    uint64_t free_core = 0;

    if (r->cpu_milli > node->cpu_milli - node->used_cpu_milli ||
        r->mem_mib > node->mem_mib - node->used_mem_mib)
        return false;
    for (uint32_t g = 0; g < node->ngpus; g++) {
        if (node->gpus[g].unhealthy == NULL)
            free_core += egpu_gpu_free_core(&node->gpus[g]);
    }
    return egpu_pod_request_gpu_milli(r) <= free_core;
}

size_t egpu_sim_sample_nodes(const struct egpu_cluster *c, const struct egpu_pod_request *r,
                             size_t want, size_t *next, uint32_t *slots)
{
    const size_t n = c->nnodes;
    size_t found = 0, processed = 0;

    if (n == 0)
        return 0;
    for (; processed < n && found < want; processed++) {
        size_t slot = (*next + processed) % n;

        if (egpu_sim_kube_fits(c->nodes[slot], r))
            slots[found++] = (uint32_t)slot;
    }
    *next = (*next + processed) % n;
    return found;
}
