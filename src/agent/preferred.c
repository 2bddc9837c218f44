/* agent/preferred.c - GetPreferredAllocation: which of the free device IDs
 * the kubelet should give a container.
 *
 * The kubelet sends, per container, the available IDs, the IDs it must
 * include and how many it wants (the container's gpu-core); it does not say
 * which pod. The answer, per container:
 *   1. with an API server, the IDs of the card(s) the scheduler assigned
 *      (elasticgpu.io/assigned) to the pending, not yet allocated container
 *      of this node asking exactly that many (prefer_assigned): the
 *      scheduler's decision, already made;
 *   2. otherwise, or when no such container matches, the card(s) the
 *      placement core picks (choose.c: egpu_placer_can_host with
 *      EGPU_CHOOSE_CARD_POLICY, the rule egpu-scheduler's bind picks cards
 *      with) on this node's cards as the agent knows them: free compute from
 *      the IDs offered, memory in use from the agent's record; must-include
 *      IDs first;
 *   3. when the core finds no card(s) with the room (or the size is no
 *      gpu-core), no preference, logged with the core's reason: the kubelet
 *      then picks among the available IDs itself, as the API allows.
 * Out of memory fails the call (RESOURCE_EXHAUSTED; the kubelet fails the
 * pod's admission with the message) rather than answer a preference nobody
 * chose.
 *
 * For 1, the scheduler's choice is on the pod (elasticgpu.io/assigned: per
 * container its cards, core % and memory MiB per card). So the agent lists
 * the pods bound to this node and looks for a container not yet allocated
 * whose core * cards equals the size, and prefers that many IDs on its
 * card(s). The scheduler's ambiguity rule (equal core, other cards or
 * memory, both pending) means at most one placement fits a size at a time;
 * equal placements are interchangeable.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "choose_int.h"
#include "deviceplugin/v1beta1/api.pb-c.h"
#include "egpu/log.h"
#include "container_int.h"
#include "plugin_impl_int.h"

static bool is_pending_pod(const json_t *pod)
{
    if (json_object_get(json_object_get(pod, "metadata"), "deletionTimestamp") != NULL)
        return false;
    return !egpu_api_pod_finished(pod);
}

/* Pick core IDs per card of c (all of each card when core is 100) from
 * avail and must, must first; out gets size pointers. Returns size, or 0
 * when a card lacks room or a must ID is elsewhere. */
static size_t pick_on_cards(const struct egpu_assigned *a, const struct egpu_assigned_container *c,
                            char *const *avail, size_t n, char *const *must, size_t nmust,
                            size_t size, char **out)
{
    size_t got = 0;
    unsigned slot;

    for (size_t m = 0; m < nmust; m++) {
        bool on = false;

        for (uint32_t g = 0; g < c->ncards && !on; g++)
            on = egpu__container_id_on_card(must[m], a->uuids[c->first_card + g], &slot);
        if (!on)
            return 0;
    }
    for (uint32_t g = 0; g < c->ncards; g++) {
        const char *uuid = a->uuids[c->first_card + g];
        char *slots[EGPU_PLUGIN_IDS_PER_CARD] = {NULL};
        bool taken[EGPU_PLUGIN_IDS_PER_CARD] = {false};
        unsigned have = 0;

        for (size_t m = 0; m < nmust; m++) {
            if (egpu__container_id_on_card(must[m], uuid, &slot) && !taken[slot] &&
                have < c->core_pct) {
                taken[slot] = true;
                out[got++] = must[m];
                have++;
            }
        }
        for (size_t i = 0; i < n; i++)
            if (egpu__container_id_on_card(avail[i], uuid, &slot) && !taken[slot])
                slots[slot] = avail[i];
        for (unsigned s = 0; s < EGPU_PLUGIN_IDS_PER_CARD && have < c->core_pct; s++) {
            if (slots[s] != NULL && got < size) {
                out[got++] = slots[s];
                have++;
            }
        }
        if (have < c->core_pct)
            return 0;
    }
    return got == size ? size : 0;
}

/* The pods bound to node (new reference to the List), or NULL with err. */
static json_t *node_pods(struct egpu_kube *kube, const char *node, struct egpu_error *err)
{
    char selector[EGPU_K8S_NAME_MAX + 32];
    struct egpu_kube_list_opts lo = {.field_selector = selector};
    struct egpu_kube_status st;
    json_t *list = NULL;

    snprintf(selector, sizeof(selector), "spec.nodeName=%s", node);
    if (egpu_kube_list(kube, &egpu_kube_pods, NULL, &lo, &list, &st, err) != 0)
        return NULL;
    return list;
}

/* With the API server: find the pending pod on node whose container was
 * assigned exactly size IDs' worth (core * cards == size) and is not
 * allocated yet, and pick size IDs of avail (n) on its card(s), must
 * (nmust) first, into out (room for size; borrowed pointers into
 * avail/must). Returns how many it picked: size, or 0 when no pod matches
 * or its cards lack room (the caller then asks the core). */
static size_t prefer_assigned(struct egpu_kube *kube, const char *node, char *const *avail,
                              size_t n, char *const *must, size_t nmust, size_t size, char **out)
{
    struct egpu_error err = {0};
    struct egpu_assigned *a = egpu_malloc(sizeof(*a));
    json_t *list = a != NULL ? node_pods(kube, node, &err) : NULL;
    const json_t *pod;
    size_t i, got = 0;

    if (list == NULL) {
        if (a != NULL)
            egpu_log(EGPU_LOG_WARN,
                     "GetPreferredAllocation: pods of node=%s not listed error=\"%s\"", node,
                     err.msg);
        egpu_free(a);
        return 0;
    }
    json_array_foreach(json_object_get(list, "items"), i, pod)
    {
        if (!is_pending_pod(pod) || egpu__container_assigned(pod, a, &err) != 0)
            continue;
        for (uint32_t k = 0; k < a->ncontainers && got == 0; k++) {
            const struct egpu_assigned_container *c = &a->containers[k];

            if ((size_t)c->core_pct * c->ncards != size ||
                egpu__container_is_allocated(pod, c->name))
                continue;
            got = pick_on_cards(a, c, avail, n, must, nmust, size, out);
            if (got)
                egpu_log(
                    EGPU_LOG_INFO, "preferred pod=%s/%s container=%s size=%zu gpus=%u first=%s",
                    json_string_value(
                        json_object_get(json_object_get(pod, "metadata"), "namespace")),
                    json_string_value(json_object_get(json_object_get(pod, "metadata"), "name")),
                    c->name, size, c->ncards, a->uuids[c->first_card]);
        }
        if (got)
            break;
    }
    json_decref(list);
    egpu_free(a);
    return got;
}

/* Memory MiB the record gives containers on each card. */
struct mem_sum {
    const struct egpu_gpu_info *cards;
    size_t ncards;
    uint64_t mib[EGPU_NODE_GPUS_MAX];
};

static void add_limits(void *data, const struct egpu__alloc_limits *l)
{
    struct mem_sum *m = data;

    for (uint32_t g = 0; g < l->ngpus; g++)
        for (size_t c = 0; c < m->ncards; c++)
            if (strcmp(m->cards[c].uuid, l->gpus[g]) == 0)
                m->mib[c] += l->mem_mib;
}

/* The core's choice for one container into out (room for size); *got the
 * count, 0 for no preference. Returns 0 or -ENOMEM with st set. */
static int prefer_core(struct egpu_plugin *p, const struct egpu_gpu_info *cards, size_t ncards,
                       const V1beta1__ContainerPreferredAllocationRequest *c, size_t size,
                       char **out, size_t *got, struct egpu_grpc_status *st)
{
    struct mem_sum *m = egpu_calloc(1, sizeof(*m));
    struct egpu_error err = {0};
    int rc;

    *got = 0;
    if (m == NULL)
        return egpu_grpc_status_set(st, GRPC_STATUS_RESOURCE_EXHAUSTED,
                                    "GetPreferredAllocation: out of memory");
    m->cards = cards;
    m->ncards = ncards;
    egpu__plugin_each_limits(p, add_limits, m);
    rc = egpu__choose_ids(EGPU_CHOOSE_CARD_POLICY, cards, ncards, m->mib, c->available_deviceids,
                          c->n_available_deviceids, c->must_include_deviceids,
                          c->n_must_include_deviceids, size, out, got, &err);
    egpu_free(m);
    if (rc == -ENOMEM)
        return egpu_grpc_status_set(st, GRPC_STATUS_RESOURCE_EXHAUSTED,
                                    "GetPreferredAllocation: out of memory");
    if (rc)
        egpu_log(EGPU_LOG_INFO,
                 "GetPreferredAllocation: no preference size=%zu available=%zu policy=%s "
                 "reason=\"%s\"",
                 size, c->n_available_deviceids, egpu_policy_name(EGPU_CHOOSE_CARD_POLICY),
                 err.msg);
    else if (*got > 0)
        egpu_log(EGPU_LOG_INFO, "preferred by the card policy policy=%s size=%zu first=%s",
                 egpu_policy_name(EGPU_CHOOSE_CARD_POLICY), size, out[0]);
    return 0;
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
            cr[i].n_deviceids = prefer_assigned(p->kube, p->node, c->available_deviceids,
                                                c->n_available_deviceids, c->must_include_deviceids,
                                                c->n_must_include_deviceids, size, cr[i].deviceids);
        if (cr[i].n_deviceids == 0) {
            rc = prefer_core(p, cards, ncards, c, size, cr[i].deviceids, &cr[i].n_deviceids, st);
            if (rc)
                goto out;
        }
    }
    resp.n_container_responses = r->n_container_requests;
    resp.container_responses = crp;
    rc = egpu__pb_pack(&resp.base, reply);
out:
    if (rc)
        egpu_log(EGPU_LOG_WARN, "GetPreferredAllocation refused error=\"%s\"",
                 st->msg[0] ? st->msg : egpu_strerror(rc));
    for (size_t i = 0; cr != NULL && r != NULL && i < r->n_container_requests; i++)
        egpu_free(cr[i].deviceids);
    egpu_free(crp);
    egpu_free(cr);
    egpu_free(cards);
    if (r != NULL)
        egpu__pb_unpacked_free(&r->base);
    return rc;
}
