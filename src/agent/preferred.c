/* agent/preferred.c - GetPreferredAllocation: which of the free device IDs
 * the kubelet should give a container.
 *
 * The kubelet sends, per container, the available IDs, the IDs it must
 * include and how many it wants (the container's gpu-core); it does not say
 * which pod. With an API server, the IDs of the card(s) the scheduler
 * assigned to a pending container of that size (prestart.c); otherwise, or
 * when no pending pod matches, keeps a container on as few cards as
 * possible (whole free cards for multiples of 100, else the fullest card
 * that still fits: binpack), starting from the must-include IDs.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "deviceplugin/v1beta1/api.pb-c.h"
#include "egpu/log.h"
#include "plugin_impl_int.h"
#include "prestart_int.h"

/* Pick size IDs from avail (n) with must (nmust) first, into out (the
 * caller's array of borrowed pointers, room for size). Returns the count. */
static size_t prefer_binpack(const struct egpu_gpu_info *cards, size_t ncards, char *const *avail,
                             size_t n, char *const *must, size_t nmust, size_t size, char **out)
{
    /* by_card[c][s]: the available ID string of card c slot s, or NULL */
    char *(*by_card)[EGPU_PLUGIN_IDS_PER_CARD] = egpu_calloc(EGPU_NODE_GPUS_MAX, sizeof(*by_card));
    unsigned free_ids[EGPU_NODE_GPUS_MAX] = {0};
    size_t got = 0;
    struct egpu_grpc_status st;

    if (by_card == NULL)
        return 0;
    for (size_t i = 0; i < nmust && got < size; i++)
        out[got++] = must[i];
    for (size_t i = 0; i < n; i++) {
        size_t c;
        unsigned s;
        bool dup = false;

        if (egpu__plugin_parse_id(cards, ncards, avail[i], &c, &s, &st) != 0 ||
            by_card[c][s] != NULL)
            continue;
        for (size_t m = 0; m < nmust; m++)
            dup = dup || strcmp(must[m], avail[i]) == 0;
        if (dup)
            continue;
        by_card[c][s] = avail[i];
        free_ids[c]++;
    }
    while (got < size) {
        size_t need = size - got, best = SIZE_MAX;

        for (size_t c = 0; c < ncards; c++) {
            if (free_ids[c] == 0)
                continue;
            if (need >= EGPU_PLUGIN_IDS_PER_CARD) {
                /* whole cards first; else the emptiest card */
                if (best == SIZE_MAX || free_ids[c] > free_ids[best])
                    best = c;
            } else if (free_ids[c] >= need) {
                /* binpack: the fullest card that still fits */
                if (best == SIZE_MAX || free_ids[best] < need || free_ids[c] < free_ids[best])
                    best = c;
            } else if (best == SIZE_MAX ||
                       (free_ids[best] < need && free_ids[c] > free_ids[best])) {
                best = c; /* nothing fits: the card with most room */
            }
        }
        if (best == SIZE_MAX)
            break;
        for (unsigned s = 0; s < EGPU_PLUGIN_IDS_PER_CARD && got < size; s++) {
            if (by_card[best][s] != NULL) {
                out[got++] = by_card[best][s];
                by_card[best][s] = NULL;
                free_ids[best]--;
            }
        }
    }
    egpu_free(by_card);
    return got;
}

int egpu__plugin_on_preferred(void *data, const struct egpu_grpc_request *req,
                              struct egpu_buf *reply, struct egpu_grpc_status *st)
{
    struct egpu_plugin *p = data;
    V1beta1__PreferredAllocationRequest *r;
    V1beta1__PreferredAllocationResponse resp = V1BETA1__PREFERRED_ALLOCATION_RESPONSE__INIT;
    V1beta1__ContainerPreferredAllocationResponse *cr = NULL, **crp = NULL;
    struct egpu_gpu_info *cards = egpu_calloc(EGPU_NODE_GPUS_MAX, sizeof(*cards));
    size_t ncards;
    int rc = 0;

    r = (V1beta1__PreferredAllocationRequest *)egpu__pb_unpack(
        &v1beta1__preferred_allocation_request__descriptor, req);
    if (cards == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    if (r == NULL) {
        rc = egpu_grpc_status_set(st, GRPC_STATUS_INVALID_ARGUMENT,
                                  "GetPreferredAllocation: request is not a "
                                  "PreferredAllocationRequest");
        goto out;
    }
    ncards = egpu__plugin_snapshot(p, cards);
    cr = egpu_calloc(r->n_container_requests ? r->n_container_requests : 1, sizeof(*cr));
    crp = egpu_calloc(r->n_container_requests ? r->n_container_requests : 1, sizeof(*crp));
    if (cr == NULL || crp == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < r->n_container_requests; i++) {
        V1beta1__ContainerPreferredAllocationRequest *c = r->container_requests[i];
        size_t size = c->allocation_size > 0 ? (size_t)c->allocation_size : 0;

        cr[i] = (V1beta1__ContainerPreferredAllocationResponse)
            V1BETA1__CONTAINER_PREFERRED_ALLOCATION_RESPONSE__INIT;
        crp[i] = &cr[i];
        cr[i].deviceids = egpu_calloc(size ? size : 1, sizeof(char *));
        if (cr[i].deviceids == NULL) {
            rc = -ENOMEM;
            goto out;
        }
        if (p->kube != NULL)
            cr[i].n_deviceids = egpu__prestart_prefer(
                p->kube, p->node, cards, ncards, c->available_deviceids, c->n_available_deviceids,
                c->must_include_deviceids, c->n_must_include_deviceids, size, cr[i].deviceids);
        if (cr[i].n_deviceids == 0)
            cr[i].n_deviceids = prefer_binpack(cards, ncards, c->available_deviceids,
                                               c->n_available_deviceids, c->must_include_deviceids,
                                               c->n_must_include_deviceids, size, cr[i].deviceids);
    }
    resp.n_container_responses = r->n_container_requests;
    resp.container_responses = crp;
    rc = egpu__pb_pack(&resp.base, reply);
out:
    for (size_t i = 0; cr != NULL && r != NULL && i < r->n_container_requests; i++)
        egpu_free(cr[i].deviceids);
    egpu_free(crp);
    egpu_free(cr);
    egpu_free(cards);
    if (r != NULL)
        egpu__pb_unpacked_free(&r->base);
    return rc;
}
