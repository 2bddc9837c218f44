/* agent/choose.c - which device IDs GetPreferredAllocation prefers when no
 * assignment of the scheduler names the cards: the placement core's card
 * choice, the one egpu-scheduler's bind makes.
 *
 * The node as the agent knows it becomes a one-node cluster of the core: each
 * card with its memory and health, and what is held of it as a reservation
 * (egpu_cluster_reserve): the compute of its IDs the kubelet does not offer
 * (1 ID = 10 milli-GPU; a card with none free is held whole) and, with that,
 * the memory the agent's record gives containers on it. The container's size
 * becomes its gpu-core request (egpu_container_request_set; no memory: the
 * kubelet does not say), and egpu_placer_can_host picks the card(s) with the
 * card policy, as bind does with the node's state in the scheduler's cache.
 * The IDs preferred are then the must-include ones and free IDs of those
 * cards.
 *
 * DESIGN: no I/O and no state; the cluster and the placer live for one call
 * (GetPreferredAllocation comes once per container the kubelet admits).
 * Cost: about 60 KiB allocated and a pass over at most 6,400 IDs.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "choose_int.h"

#define IDS EGPU_CHOOSE_IDS_PER_CARD

/* The free IDs the kubelet offers, per card and slot (NULL: not offered). */
struct offer {
    char *id[EGPU_NODE_GPUS_MAX][IDS];
    bool must[EGPU_NODE_GPUS_MAX][IDS];
    unsigned nfree[EGPU_NODE_GPUS_MAX];
};

/* The card (position in cards) and slot of id, or false. */
static bool id_slot(const struct egpu_gpu_info *cards, size_t ncards, const char *id, size_t *card,
                    unsigned *slot)
{
    size_t len = strlen(id), ulen;

    if (len < 4 || id[len - 3] != '-' || id[len - 2] < '0' || id[len - 2] > '9' ||
        id[len - 1] < '0' || id[len - 1] > '9')
        return false;
    ulen = len - 3;
    for (size_t i = 0; i < ncards; i++) {
        if (cards[i].uuid[0] != '\0' && strlen(cards[i].uuid) == ulen &&
            memcmp(cards[i].uuid, id, ulen) == 0) {
            *card = i;
            *slot = (unsigned)((id[len - 2] - '0') * 10 + (id[len - 1] - '0'));
            return true;
        }
    }
    return false;
}

static void offer_add(struct offer *o, const struct egpu_gpu_info *cards, size_t ncards,
                      char *const *ids, size_t n, bool must)
{
    for (size_t i = 0; i < n; i++) {
        size_t c;
        unsigned s;

        if (!id_slot(cards, ncards, ids[i], &c, &s) || o->id[c][s] != NULL)
            continue;
        o->id[c][s] = ids[i];
        o->must[c][s] = must;
        o->nfree[c]++;
    }
}

/* The one-node cluster of cards with what is held of each (see above). */
static int node_of(const struct egpu_gpu_info *cards, size_t ncards, const uint64_t *mem_used_mib,
                   const struct offer *o, struct egpu_cluster *cl, struct egpu_node **node,
                   struct egpu_error *err)
{
    struct egpu_gpu_spec specs[EGPU_NODE_GPUS_MAX];
    char unhealthy[EGPU_NODE_GPUS_MAX][EGPU_UUID_MAX + 16];
    struct egpu_node_spec ns = {.name = "this node", .gpus = specs};
    int rc;

    for (size_t i = 0; i < ncards && i < EGPU_NODE_GPUS_MAX; i++) {
        if (cards[i].uuid[0] == '\0')
            continue; /* never identified: no IDs */
        snprintf(unhealthy[i], sizeof(unhealthy[i]), "%s (Unhealthy)", cards[i].uuid);
        specs[ns.ngpus++] = (struct egpu_gpu_spec){
            .uuid = cards[i].uuid,
            .index = cards[i].index,
            .mem_mib = cards[i].mem_mib > UINT32_MAX ? UINT32_MAX : (uint32_t)cards[i].mem_mib,
            .unhealthy = cards[i].healthy ? NULL : unhealthy[i]};
    }
    rc = egpu_cluster_add_node(cl, &ns, err);
    if (rc)
        return rc;
    *node = egpu_cluster_node(cl, ns.name);
    for (size_t i = 0; i < ncards && i < EGPU_NODE_GPUS_MAX; i++) {
        struct egpu_reservation r = {.ncards = 1, .uuids = {cards[i].uuid}};
        unsigned held = IDS - o->nfree[i];
        char key[EGPU_UUID_MAX + 16];

        if (cards[i].uuid[0] == '\0' || !cards[i].healthy || held == 0)
            continue; /* an unhealthy card takes nothing anyway */
        r.core_milli = held * (EGPU_GPU_MILLI / IDS);
        if (mem_used_mib != NULL)
            r.mem_mib = mem_used_mib[i] > cards[i].mem_mib ? (uint32_t)cards[i].mem_mib
                                                           : (uint32_t)mem_used_mib[i];
        snprintf(key, sizeof(key), "held:%s", cards[i].uuid);
        rc = egpu_cluster_reserve(cl, key, *node, &r, err);
        if (rc)
            return rc;
    }
    return 0;
}

int egpu__choose_ids(enum egpu_policy_kind policy, const struct egpu_gpu_info *cards, size_t ncards,
                     const uint64_t *mem_used_mib, char *const *avail, size_t n, char *const *must,
                     size_t nmust, size_t size, char **out, size_t *got, struct egpu_error *err)
{
    struct egpu_placer_config pc = {.node_policy = policy, .card_policy = policy};
    struct offer *o = egpu_calloc(1, sizeof(*o));
    struct egpu_cluster *cl = egpu_cluster_new();
    struct egpu_pick *pick = egpu_malloc(sizeof(*pick));
    struct egpu_placer *placer = NULL;
    struct egpu_pod_request req = {.ncontainers = 1};
    struct egpu_node *node = NULL;
    char why[512];
    size_t k = 0;
    int rc = 0;

    *got = 0;
    if (ncards > EGPU_NODE_GPUS_MAX)
        ncards = EGPU_NODE_GPUS_MAX;
    if (o == NULL || cl == NULL || pick == NULL) {
        rc = egpu_error_set(err, -ENOMEM, "out of memory");
        goto out_free;
    }
    rc = egpu_container_request_set(&req.containers[0], (int64_t)size, 0, err);
    if (rc == 0) {
        offer_add(o, cards, ncards, must, nmust, true);
        offer_add(o, cards, ncards, avail, n, false);
        rc = node_of(cards, ncards, mem_used_mib, o, cl, &node, err);
    }
    if (rc == 0) {
        placer = egpu_placer_new(&pc, err);
        if (placer == NULL)
            rc = err != NULL && err->code ? err->code : -ENOMEM;
    }
    if (rc == 0 && !egpu_placer_can_host(placer, cl, node, &req, pick, why, sizeof(why)))
        rc = egpu_error_set(err, EGPU_ENOFIT, "%s", why);
    if (rc)
        goto out_free;
    /* The must-include IDs first, as the kubelet takes them anyway. */
    for (size_t i = 0; i < nmust && k < size; i++)
        out[k++] = must[i];
    for (uint32_t sh = 0; sh < pick->nshares && k < size; sh++) {
        const struct egpu_gpu *g = &node->gpus[pick->shares[sh].gpu];
        unsigned want = pick->shares[sh].core_milli / (EGPU_GPU_MILLI / IDS);
        size_t c = 0;

        while (c < ncards && strcmp(cards[c].uuid, g->uuid) != 0)
            c++;
        for (unsigned s = 0; s < IDS && c < ncards; s++) {
            if (o->must[c][s] && want > 0)
                want--; /* given above */
        }
        for (unsigned s = 0; s < IDS && c < ncards && want > 0 && k < size; s++) {
            if (o->id[c][s] != NULL && !o->must[c][s]) {
                out[k++] = o->id[c][s];
                want--;
            }
        }
    }
    *got = k;
out_free:
    egpu_placer_free(placer);
    egpu_cluster_free(cl);
    egpu_free(pick);
    egpu_free(o);
    return rc;
}
