/* core/dra.c - DRA mode: the order of a node's devices in its ResourceSlice.
 *
 * In DRA mode (issue 26) kube-scheduler's structured-parameters allocator
 * (k8s.io/dynamic-resource-allocation/structured, 1.34+) chooses the cards:
 * it walks pools sorted by driver then pool name, slices by name and devices
 * in slice order, takes the first device that fits each request of a claim
 * (backtracking across the claim's requests and devices when a later one
 * finds none) and scores nothing. The node agent publishes one slice per
 * node with one device per healthy card (src/agent/dra_slice.c), so the
 * order of the devices in that slice is the whole of what steers the
 * allocator's choice of card. This file says what that order is for each
 * order the agent could publish; cards.c (egpu__cards_pick_dra) runs the
 * first fit over it.
 *
 * DESIGN: no I/O. An order is computed from the node's state as the
 * placement core holds it, so a state-dependent order (most-allocated,
 * least-allocated) is the order of a slice republished after every
 * allocation: an upper bound of what an agent that republishes with a lag
 * can win.
 */
#include <errno.h>
#include <string.h>

#include "egpu/core.h"

#define NAME_OF(id, name, sep) [EGPU_DRA_ORDER_##id] = name,

static const char *const names[EGPU_DRA_ORDER_COUNT] = {EGPU_DRA_ORDER_LIST(NAME_OF)};

int egpu_dra_order_parse(const char *name, enum egpu_dra_order *out, struct egpu_error *err)
{
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (strcmp(name, names[i]) == 0) {
            *out = (enum egpu_dra_order)i;
            return 0;
        }
    }
    return egpu_error_set(
        err, -EINVAL, "unknown DRA device order \"%s\" (allowed: " EGPU_DRA_ORDER_NAMES ")", name);
}

const char *egpu_dra_order_name(enum egpu_dra_order o)
{
    return (size_t)o < sizeof(names) / sizeof(names[0]) ? names[o] : "unknown";
}

/* Does card a come before card b in order o (a != b)? */
static bool before(const struct egpu_node *node, enum egpu_dra_order o, uint16_t a, uint16_t b)
{
    const struct egpu_gpu *ga = &node->gpus[a], *gb = &node->gpus[b];

    if (o != EGPU_DRA_ORDER_INDEX) {
        bool most = o == EGPU_DRA_ORDER_MOST_ALLOCATED;

        if (ga->used_core_milli != gb->used_core_milli)
            return most == (ga->used_core_milli > gb->used_core_milli);
        if (ga->used_mem_mib != gb->used_mem_mib)
            return most == (ga->used_mem_mib > gb->used_mem_mib);
    }
    return ga->index < gb->index;
}

int egpu_dra_device_order(const struct egpu_node *node, enum egpu_dra_order order, uint16_t *out)
{
    uint32_t n = 0;

    if ((size_t)order >= EGPU_DRA_ORDER_COUNT || node->ngpus > EGPU_NODE_GPUS_MAX)
        return -EINVAL;
    /* Insertion sort: at most EGPU_NODE_GPUS_MAX cards, stable. */
    for (uint32_t g = 0; g < node->ngpus; g++) {
        uint32_t j = n;

        if (node->gpus[g].unhealthy != NULL) /* not in the slice */
            continue;
        for (; j > 0 && before(node, order, (uint16_t)g, out[j - 1]); j--)
            out[j] = out[j - 1];
        out[j] = (uint16_t)g;
        n++;
    }
    return (int)n;
}
