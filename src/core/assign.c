/* core/assign.c - committing and releasing a pod's cards, CPU and memory.
 *
 * DESIGN: an assignment is the only way card totals change, and it records
 * exactly what it added, so a release subtracts the same amounts and every
 * total stays exact. A pick is re-checked against the node's current state
 * before it is committed (the extender's bind may race with other binds), and
 * a release of a pod that holds nothing is an error, never a silent no-op.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "egpu/core.h"
#include "assign_int.h"

bool egpu__pick_fits(const struct egpu_node *node, const struct egpu_pod_request *r,
                     const struct egpu_pick *pick, char *why, size_t why_len)
{
    uint32_t core[EGPU_NODE_GPUS_MAX] = {0}, mem[EGPU_NODE_GPUS_MAX] = {0};
    uint32_t per_container[EGPU_CONTAINERS_MAX] = {0};
    bool whole[EGPU_NODE_GPUS_MAX] = {false};
    uint32_t users[EGPU_NODE_GPUS_MAX] = {0};
    char scratch[8];

    if (why == NULL) {
        why = scratch;
        why_len = sizeof(scratch);
    }
    if (r->cpu_milli > node->cpu_milli - node->used_cpu_milli ||
        r->mem_mib > node->mem_mib - node->used_mem_mib) {
        snprintf(why, why_len, "node %s lacks the CPU or memory", node->name);
        return false;
    }
    for (uint32_t i = 0; i < pick->nshares; i++) {
        const struct egpu_share *s = &pick->shares[i];
        const struct egpu_container_request *cr;

        if (s->container >= r->ncontainers || s->gpu >= node->ngpus) {
            snprintf(why, why_len, "share %u names container %u or card %u that does not exist", i,
                     s->container, s->gpu);
            return false;
        }
        cr = &r->containers[s->container];
        if (s->core_milli != cr->core_milli) {
            snprintf(why, why_len, "share %u: %u milli-GPU, container asks %u", i, s->core_milli,
                     cr->core_milli);
            return false;
        }
        if (cr->core_milli == EGPU_GPU_MILLI) {
            whole[s->gpu] = true;
            if (s->mem_mib != node->gpus[s->gpu].mem_mib || cr->mem_mib > s->mem_mib) {
                snprintf(why, why_len, "share %u: whole card %u memory mismatch", i, s->gpu);
                return false;
            }
        } else if (s->mem_mib != cr->mem_mib) {
            snprintf(why, why_len, "share %u: %u MiB, container asks %u MiB", i, s->mem_mib,
                     cr->mem_mib);
            return false;
        }
        core[s->gpu] += s->core_milli;
        mem[s->gpu] += s->mem_mib;
        users[s->gpu]++;
        per_container[s->container]++;
    }
    for (uint32_t i = 0; i < r->ncontainers; i++) {
        if (per_container[i] != r->containers[i].ncards) {
            snprintf(why, why_len, "container %u got %u cards, asks %u", i, per_container[i],
                     r->containers[i].ncards);
            return false;
        }
    }
    for (uint32_t g = 0; g < node->ngpus; g++) {
        const struct egpu_gpu *gpu = &node->gpus[g];

        if (users[g] == 0)
            continue;
        if (whole[g] && (users[g] > 1 || gpu->nshares > 0)) {
            snprintf(why, why_len, "card %s is not free for a whole-card container", gpu->uuid);
            return false;
        }
        if (core[g] > egpu_gpu_free_core(gpu) || mem[g] > egpu_gpu_free_mem(gpu)) {
            snprintf(why, why_len, "card %s has %u milli-GPU and %u MiB free, %u and %u MiB asked",
                     gpu->uuid, egpu_gpu_free_core(gpu), egpu_gpu_free_mem(gpu), core[g], mem[g]);
            return false;
        }
    }
    return true;
}

/* Add (add = true) or subtract assignment a's amounts on its node and cards. */
static void apply(struct egpu_cluster *c, struct egpu_assignment *a, bool add)
{
    struct egpu_node *n = a->node;

    n->used_cpu_milli += add ? a->cpu_milli : -a->cpu_milli;
    n->used_mem_mib += add ? a->mem_mib : -a->mem_mib;
    for (uint32_t i = 0; i < a->nshares; i++) {
        const struct egpu_share *s = &a->shares[i];
        struct egpu_gpu *g = &n->gpus[s->gpu];

        if (add) {
            g->used_core_milli += s->core_milli;
            g->used_mem_mib += s->mem_mib;
            g->nshares++;
            c->used_core_milli += s->core_milli;
        } else {
            g->used_core_milli -= s->core_milli;
            g->used_mem_mib -= s->mem_mib;
            g->nshares--;
            c->used_core_milli -= s->core_milli;
        }
    }
    egpu__node_touch(c, n);
}

int egpu_cluster_assign(struct egpu_cluster *c, const char *pod, struct egpu_node *node,
                        const struct egpu_pod_request *r, const struct egpu_pick *pick,
                        struct egpu_error *err)
{
    struct egpu_assignment *a;
    char why[256];
    int rc;

    if (egpu_map_get(c->by_pod, pod) != NULL)
        return egpu_error_set(err, EGPU_EALLOCATED, "pod %s already holds an allocation", pod);
    /* In c exactly when it stands at its slot (cluster.c keeps node->slot). */
    if (node->slot >= c->nnodes || c->nodes[node->slot] != node)
        return egpu_error_set(err, -EINVAL, "pod %s: node %s is not in the cluster", pod,
                              node->name);
    if (pick->nshares > EGPU_PICK_SHARES_MAX || !egpu__pick_fits(node, r, pick, why, sizeof(why)))
        return egpu_error_set(err, -EINVAL, "pod %s on node %s: %s", pod, node->name,
                              pick->nshares > EGPU_PICK_SHARES_MAX ? "too many shares" : why);
    /* One allocation: the record, its shares, then its key. */
    a = egpu_malloc(sizeof(*a) + pick->nshares * sizeof(a->shares[0]) + strlen(pod) + 1);
    if (a == NULL)
        return egpu_error_set(err, -ENOMEM, "pod %s: out of memory", pod);
    a->pod = memcpy((char *)(a->shares + pick->nshares), pod, strlen(pod) + 1);
    a->node = node;
    a->cpu_milli = r->cpu_milli;
    a->mem_mib = r->mem_mib;
    a->nshares = pick->nshares;
    memcpy(a->shares, pick->shares, pick->nshares * sizeof(a->shares[0]));
    rc = egpu_map_put(c->by_pod, a->pod, a);
    if (rc) {
        egpu_free(a);
        return egpu_error_set(err, rc, "pod %s: out of memory", pod);
    }
    a->prev = NULL;
    a->next = node->pods;
    if (node->pods != NULL)
        node->pods->prev = a;
    node->pods = a;
    apply(c, a, true);
    c->npods++;
    return 0;
}

void egpu__assignment_drop(struct egpu_cluster *c, struct egpu_assignment *a)
{
    apply(c, a, false);
    if (a->prev != NULL)
        a->prev->next = a->next;
    else
        a->node->pods = a->next;
    if (a->next != NULL)
        a->next->prev = a->prev;
    (void)egpu_map_del(c->by_pod, a->pod); /* present: every live assignment is indexed */
    c->npods--;
    egpu_free(a);
}

int egpu_cluster_release(struct egpu_cluster *c, const char *pod, struct egpu_error *err)
{
    struct egpu_assignment *a = egpu_map_get(c->by_pod, pod);

    if (a == NULL)
        return egpu_error_set(err, EGPU_ENOTALLOC, "pod %s holds no allocation", pod);
    egpu__assignment_drop(c, a);
    return 0;
}

const struct egpu_assignment *egpu_cluster_assignment(const struct egpu_cluster *c, const char *pod)
{
    return egpu_map_get(c->by_pod, pod);
}

int egpu_cluster_reserve(struct egpu_cluster *c, const char *key, struct egpu_node *node,
                         const struct egpu_reservation *r, struct egpu_error *err)
{
    struct egpu_pod_request req = {0};
    struct egpu_pick pick = {0};
    const bool whole = r->core_milli == EGPU_GPU_MILLI;
    char why[256];

    if (r->core_milli == 0 || r->core_milli > EGPU_GPU_MILLI)
        return egpu_error_set(err, -EINVAL,
                              "reservation %s: %u milli-GPU per card; allowed: 1..999 for a "
                              "share of one card, 1000 for whole cards",
                              key, r->core_milli);
    if (r->ncards == 0 || r->ncards > EGPU_NODE_GPUS_MAX || (!whole && r->ncards != 1))
        return egpu_error_set(err, -EINVAL,
                              "reservation %s: %u cards; allowed: 1 for a share, 1..%d whole "
                              "cards",
                              key, r->ncards, EGPU_NODE_GPUS_MAX);
    if (egpu_map_get(c->by_pod, key) != NULL)
        return egpu_error_set(err, EGPU_EALLOCATED, "reservation %s is already held", key);
    req.ncontainers = 1;
    req.containers[0] = (struct egpu_container_request){
        .core_milli = r->core_milli, .ncards = r->ncards, .mem_mib = whole ? 0 : r->mem_mib};
    for (uint32_t i = 0; i < r->ncards; i++) {
        uint32_t g = 0;

        if (r->uuids[i] == NULL)
            return egpu_error_set(err, -EINVAL, "reservation %s: card %u has no UUID", key, i);
        while (g < node->ngpus && strcmp(node->gpus[g].uuid, r->uuids[i]) != 0)
            g++;
        if (g == node->ngpus)
            return egpu_error_set(err, -ENOENT, "node %s has no card %s", node->name, r->uuids[i]);
        pick.shares[pick.nshares++] = (struct egpu_share){
            .container = 0,
            .gpu = (uint16_t)g,
            .core_milli = r->core_milli,
            .mem_mib = whole ? node->gpus[g].mem_mib : r->mem_mib,
        };
    }
    if (!egpu__pick_fits(node, &req, &pick, why, sizeof(why))) {
        for (uint32_t i = 0; i < pick.nshares; i++) {
            const struct egpu_gpu *g = &node->gpus[pick.shares[i].gpu];

            if (whole && g->nshares > 0)
                return egpu_error_set(err, EGPU_ENOFIT,
                                      "card %s is not free for a whole-card reservation (%u "
                                      "holders, %u milli-GPU used)",
                                      g->uuid, g->nshares, g->used_core_milli);
            if (!whole &&
                (r->core_milli > egpu_gpu_free_core(g) || r->mem_mib > egpu_gpu_free_mem(g)))
                return egpu_error_set(err, EGPU_ENOFIT,
                                      "card %s has %u milli-GPU and %u MiB free; the reservation "
                                      "asks %u milli-GPU and %u MiB",
                                      g->uuid, egpu_gpu_free_core(g), egpu_gpu_free_mem(g),
                                      r->core_milli, r->mem_mib);
        }
        return egpu_error_set(err, EGPU_ENOFIT, "reservation %s: %s", key, why);
    }
    return egpu_cluster_assign(c, key, node, &req, &pick, err);
}
