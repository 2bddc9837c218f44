/* api/meter.c - what a pod is charged for against its namespace's
 * GPUBudget: its GPU ask and the seconds it held it, read from fields only
 * the API server, the scheduler's bind and the kubelet write (the binding's
 * PodScheduled condition, containers' terminated state, deletionTimestamp),
 * never from anything the pod's owner sets; and what a namespace holds
 * through its ElasticGPUClaims (an ElasticGPU's reservation, read from
 * fields the API server and egpu-controller write), charged per claim as
 * the larger of the reservation and its pods. No I/O. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "egpu/api.h"
#include "egpu/core.h"

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
    const char *del =
        egpu_api_str(json_object_get(json_object_get(pod, "metadata"), "deletionTimestamp"));
    int64_t last = 0, t;
    size_t i;
    int rc;

    *out = INT64_MAX;
    if (egpu_api_pod_finished(pod)) {
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

/* The claim annotations of pod into pc[0..EGPU_API_POD_CLAIMS_MAX), *n of
 * them (0 when they do not decode: every container is then the pod's own). */
static void pod_claims(const json_t *pod, struct egpu_api_pod_claim *pc, size_t *n)
{
    struct egpu_error err = {0};

    if (egpu_api_pod_claims(pod, pc, EGPU_API_POD_CLAIMS_MAX, n, &err) != 0)
        *n = 0;
}

/* Read pod: its own containers into *own, and (holds non-NULL) those that
 * use a claim into holds[0..max), *nholds of them. */
static int pod_read(const json_t *pod, struct egpu_api_meter_pod *own,
                    struct egpu_api_meter_hold *holds, size_t max, size_t *nholds,
                    struct egpu_error *err)
{
    struct egpu_api_pod_claim *pc = egpu_malloc(EGPU_API_POD_CLAIMS_MAX * sizeof(*pc));
    struct egpu_api_meter_pod p = {0};
    size_t npc = 0, nh = 0;
    const json_t *ctr;
    size_t i;
    int rc = 0;

    if (nholds != NULL)
        *nholds = 0;
    if (pc == NULL)
        return -ENOMEM;
    pod_claims(pod, pc, &npc);
    rc = bound_at(pod, &p.start_s, err);
    if (!rc)
        rc = ended_at(pod, &p.end_s, err);
    json_array_foreach(json_object_get(json_object_get(pod, "spec"), "containers"), i, ctr)
    {
        const char *name = egpu_api_str(json_object_get(ctr, "name"));
        const char *claim = egpu_api_pod_claim_of(pc, npc, name != NULL ? name : "");
        struct egpu_api_gpu_ask ask;
        int64_t mem;

        if (rc)
            break;
        rc = egpu_api_container_gpu(ctr, name != NULL ? name : "", false, &ask, err);
        if (rc)
            break;
        mem = ask.has_mem && ask.core_pct < 100 ? ask.mem_mib : 0;
        if (claim == NULL) {
            p.core_pct += ask.core_pct;
            p.mem_mib += mem;
        } else if (holds != NULL && nh < max && ask.core_pct > 0) {
            struct egpu_api_meter_hold *h = &holds[nh++];

            memset(h, 0, sizeof(*h));
            snprintf(h->claim, sizeof(h->claim), "%s", claim);
            h->m.core_pct = ask.core_pct;
            h->m.mem_mib = mem;
        }
    }
    if (!rc) {
        for (size_t k = 0; k < nh; k++) {
            holds[k].m.start_s = p.start_s;
            holds[k].m.end_s = p.end_s;
        }
        if (nholds != NULL)
            *nholds = nh;
        if (own != NULL)
            *own = p;
    }
    egpu_free(pc);
    return rc;
}

int egpu_api_meter_pod_read(const json_t *pod, struct egpu_api_meter_pod *out,
                            struct egpu_error *err)
{
    return pod_read(pod, out, NULL, 0, NULL, err);
}

int egpu_api_meter_pod_holds(const json_t *pod, struct egpu_api_meter_hold *out, size_t max,
                             size_t *n, struct egpu_error *err)
{
    return pod_read(pod, NULL, out, max, n, err);
}

int egpu_api_meter_egpu_read(const json_t *obj, int64_t claim_created_s,
                             struct egpu_api_meter_hold *out, struct egpu_error *err)
{
    struct egpu_api_egpu *e = egpu_malloc(sizeof(*e)); /* about 25 KiB */
    const json_t *meta = json_object_get(obj, "metadata");
    const char *created = egpu_api_str(json_object_get(meta, "creationTimestamp"));
    struct egpu_api_meter_hold h;
    int64_t t = 0;
    int rc;

    if (e == NULL)
        return -ENOMEM;
    memset(&h, 0, sizeof(h));
    rc = egpu_api_egpu_decode(obj, e, err);
    if (!rc && !e->has_claim_ref)
        rc = egpu_error_set(err, EGPU_ERANGE, "ElasticGPU %s has no spec.claimRef", e->meta.name);
    if (!rc && created != NULL)
        rc = egpu_api_time_parse(created, "metadata.creationTimestamp", &t, err);
    if (rc) {
        egpu_free(e);
        return rc;
    }
    snprintf(h.claim, sizeof(h.claim), "%s", e->claim_name);
    h.reserved = true;
    h.m.core_pct = e->source == EGPU_API_PROVISIONER_PHYSICAL ? 100LL * e->ngpus : e->core_pct;
    h.m.mem_mib = e->source == EGPU_API_PROVISIONER_GPUSHARE && e->has_mem ? e->mem_mib : 0;
    h.m.start_s = t > claim_created_s ? t : claim_created_s;
    if (h.m.start_s == 0)
        h.m.start_s = 1; /* no timestamp at all: from the first step that sees it */
    h.m.end_s = INT64_MAX;
    if (e->meta.deletion_timestamp[0] != '\0')
        rc = egpu_api_time_parse(e->meta.deletion_timestamp, "metadata.deletionTimestamp",
                                 &h.m.end_s, err);
    if (e->phase == EGPU_API_EGPU_FAILED)
        h.m.start_s = 0;
    egpu_free(e);
    if (rc)
        return rc;
    *out = h;
    return 0;
}

static int by_claim(const void *a, const void *b)
{
    const struct egpu_api_meter_hold *const *x = a, *const *y = b;

    return strcmp((*x)->claim, (*y)->claim);
}

static int by_time(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return (x > y) - (x < y);
}

/* Is p holding at second t (its [start_s, end_s) contains t)? */
static bool holds_at(const struct egpu_api_meter_pod *p, int64_t t)
{
    return p->start_s != 0 && p->core_pct > 0 && p->start_s <= t && t < p->end_s;
}

/* Add the claim of g[0..n) (holds of one claim) over [from, to); cuts has
 * room for 2n + 2 instants. */
static void claim_add(const struct egpu_api_meter_hold *const *g, size_t n, int64_t from,
                      int64_t to, int64_t *cuts, int64_t *core, int64_t *mem)
{
    size_t nc = 0;

    cuts[nc++] = from;
    cuts[nc++] = to;
    for (size_t i = 0; i < n; i++) {
        const struct egpu_api_meter_pod *p = &g[i]->m;

        if (p->start_s > from && p->start_s < to)
            cuts[nc++] = p->start_s;
        if (p->end_s > from && p->end_s < to)
            cuts[nc++] = p->end_s;
    }
    qsort(cuts, nc, sizeof(cuts[0]), by_time);
    for (size_t k = 0; k + 1 < nc; k++) {
        int64_t a = cuts[k], b = cuts[k + 1], rc = 0, rm = 0, uc = 0, um = 0;

        if (b <= a)
            continue;
        for (size_t i = 0; i < n; i++) {
            if (!holds_at(&g[i]->m, a))
                continue;
            if (g[i]->reserved) {
                rc += g[i]->m.core_pct;
                rm += g[i]->m.mem_mib;
            } else {
                uc += g[i]->m.core_pct;
                um += g[i]->m.mem_mib;
            }
        }
        *core += (rc > uc ? rc : uc) * (b - a);
        *mem += (rm > um ? rm : um) * (b - a);
    }
}

int egpu_api_meter_holds_add(const struct egpu_api_meter_hold *h, size_t n, int64_t from_s,
                             int64_t to_s, int64_t *core_pct_s, int64_t *mem_mib_s)
{
    const struct egpu_api_meter_hold **g;
    int64_t *cuts;
    size_t i, j;

    if (n == 0 || to_s <= from_s)
        return 0;
    g = egpu_malloc(n * sizeof(*g));
    cuts = egpu_malloc((2 * n + 2) * sizeof(*cuts));
    if (g == NULL || cuts == NULL) {
        egpu_free(g);
        egpu_free(cuts);
        return -ENOMEM;
    }
    for (i = 0; i < n; i++)
        g[i] = &h[i];
    qsort(g, n, sizeof(*g), by_claim);
    for (i = 0; i < n; i = j) {
        for (j = i + 1; j < n && strcmp(g[j]->claim, g[i]->claim) == 0; j++)
            ;
        claim_add(g + i, j - i, from_s, to_s, cuts, core_pct_s, mem_mib_s);
    }
    egpu_free(g);
    egpu_free(cuts);
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
