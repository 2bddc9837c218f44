/* sim/reservations.c - pre-existing ElasticGPUs in a replay (--reservations).
 *
 * Capacity planning with claims: the cluster starts with the capacity that
 * ElasticGPUs already hold, and the trace's pods are placed around it. The
 * file is what `kubectl get elasticgpus -o json` prints (a v1 List) or a
 * plain JSON list of ElasticGPU objects; each is decoded and read with
 * src/api's functions and held with the placement core's
 * egpu_cluster_reserve, the same code egpu-scheduler's cache runs, so the
 * replay and the live scheduler agree on what a reservation takes.
 *
 * Names: spec.nodeName is a node of the node CSV (its sn column) and the
 * cards of node n are "n-gpu0" .. "n-gpu<gpu-1>" (the core's card names when
 * the trace gives no UUIDs). The trace has no GPU memory (cards of 0 MiB),
 * so a gpuShare's gpu-memory is dropped, and said so.
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "egpu/api.h"
#include "egpu/sim.h"

void egpu_sim_reservations_free(struct egpu_sim_reservations *r)
{
    if (r == NULL)
        return;
    for (size_t i = 0; i < r->n; i++) {
        egpu_free(r->items[i].key);
        egpu_free(r->items[i].node);
        for (uint32_t k = 0; k < r->items[i].res.ncards; k++)
            egpu_free((char *)r->items[i].res.uuids[k]);
    }
    egpu_free(r->items);
    memset(r, 0, sizeof(*r));
}

/* The field naming card k of e, e.g. "spec.physicalGPU.gpuNames[1]". */
static void card_field(const struct egpu_api_egpu *e, uint32_t k, char *buf, size_t len)
{
    if (e->source == EGPU_API_PROVISIONER_GPUSHARE)
        snprintf(buf, len, "spec.gpuShare.gpuName");
    else
        snprintf(buf, len, "spec.physicalGPU.gpuNames[%u]", k);
}

/* Check e's node and cards against the trace and copy what it holds into
 * item. Returns 0, EGPU_ERANGE (message without the item prefix) or -ENOMEM. */
static int resolve(const struct egpu_api_egpu *e, const struct egpu_reservation *res,
                   const struct egpu_cluster *c, struct egpu_sim_reservation *item,
                   struct egpu_error *err)
{
    const struct egpu_node *n = egpu_cluster_node(c, e->node_name);
    char field[64];

    if (n == NULL)
        return egpu_error_set(err, EGPU_ERANGE,
                              "spec.nodeName \"%s\" is not a node of the trace (its sn column)",
                              e->node_name);
    for (uint32_t k = 0; k < res->ncards; k++) {
        bool found = false;

        for (uint32_t g = 0; g < n->ngpus && !found; g++)
            found = strcmp(n->gpus[g].uuid, res->uuids[k]) == 0;
        card_field(e, k, field, sizeof(field));
        if (!found && n->ngpus == 0)
            return egpu_error_set(err, EGPU_ERANGE,
                                  "%s \"%s\" is not a card of node %s (it has no GPUs)", field,
                                  res->uuids[k], n->name);
        if (!found)
            return egpu_error_set(
                err, EGPU_ERANGE,
                "%s \"%s\" is not a card of node %s (its cards: %s-gpu0..%s-gpu%u)", field,
                res->uuids[k], n->name, n->name, n->name, n->ngpus - 1);
    }
    item->res = *res;
    item->res.mem_mib = 0; /* the trace has no GPU memory */
    item->key = egpu_malloc(sizeof(EGPU_SIM_RESV_PREFIX) + strlen(e->meta.name));
    item->node = egpu_strdup(e->node_name);
    for (uint32_t k = 0; k < res->ncards; k++)
        item->res.uuids[k] = egpu_strdup(res->uuids[k]);
    if (item->key == NULL || item->node == NULL)
        return egpu_error_set(err, -ENOMEM, "out of memory");
    snprintf(item->key, sizeof(EGPU_SIM_RESV_PREFIX) + strlen(e->meta.name),
             EGPU_SIM_RESV_PREFIX "%s", e->meta.name);
    for (uint32_t k = 0; k < res->ncards; k++) {
        if (item->res.uuids[k] == NULL)
            return egpu_error_set(err, -ENOMEM, "out of memory");
    }
    return 0;
}

static int apply_one(const struct egpu_sim_reservation *item, struct egpu_cluster *c,
                     struct egpu_error *err)
{
    struct egpu_node *n = egpu_cluster_node(c, item->node);

    if (n == NULL)
        return egpu_error_set(err, -EINVAL, "reservation %s: node %s is not in the cluster",
                              item->key, item->node);
    return egpu_cluster_reserve(c, item->key, n, &item->res, err);
}

int egpu_sim_reservations_apply(const struct egpu_sim_reservations *r, struct egpu_cluster *c,
                                struct egpu_error *err)
{
    for (size_t i = 0; r != NULL && i < r->n; i++) {
        int rc = apply_one(&r->items[i], c, err);

        if (rc)
            return egpu_error_prefix(err, rc, "reservation %s", r->items[i].key);
    }
    return 0;
}

void egpu_sim_card_rows(FILE *f, const char *label, uint64_t seed, const struct egpu_cluster *c,
                        bool header)
{
    if (header)
        fprintf(f, "policy,seed,node,card,capacity_milli,reserved_milli,pods_milli,pods\n");
    for (size_t i = 0; i < c->nnodes; i++) {
        const struct egpu_node *n = c->nodes[i];

        for (uint32_t g = 0; g < n->ngpus; g++) {
            uint64_t reserved = 0, pods = 0, npods = 0;

            for (const struct egpu_assignment *a = n->pods; a != NULL; a = a->next) {
                bool resv =
                    strncmp(a->pod, EGPU_SIM_RESV_PREFIX, sizeof(EGPU_SIM_RESV_PREFIX) - 1) == 0;
                bool here = false;

                for (uint32_t s = 0; s < a->nshares; s++) {
                    if (a->shares[s].gpu != g)
                        continue;
                    here = true;
                    *(resv ? &reserved : &pods) += a->shares[s].core_milli;
                }
                npods += here && !resv;
            }
            fprintf(f, "%s,%" PRIu64 ",%s,%s,%u,%" PRIu64 ",%" PRIu64 ",%" PRIu64 "\n", label, seed,
                    n->name, n->gpus[g].uuid, n->gpus[g].core_milli, reserved, pods, npods);
        }
    }
}

/* The items of the file's top level: a list, or a List's items. */
static int items_of(const char *path, const json_t *doc, const json_t **items,
                    struct egpu_error *err)
{
    const char *kind;

    if (json_is_array(doc)) {
        *items = doc;
        return 0;
    }
    kind = json_string_value(json_object_get(doc, "kind"));
    if (json_is_object(doc) && kind != NULL &&
        (strcmp(kind, "List") == 0 || strcmp(kind, EGPU_KIND_ELASTICGPU "List") == 0) &&
        json_is_array(json_object_get(doc, "items"))) {
        *items = json_object_get(doc, "items");
        return 0;
    }
    return egpu_error_set(err, EGPU_ESYNTAX,
                          "%s: expected a JSON list of ElasticGPU objects, or a List (kind List "
                          "or ElasticGPUList) with items",
                          path);
}

int egpu_sim_reservations_load(const char *path, const struct egpu_trace *t,
                               struct egpu_sim_reservations *out, struct egpu_error *err)
{
    struct egpu_api_egpu *e = egpu_malloc(sizeof(*e));
    struct egpu_cluster *c = NULL;
    const json_t *items = NULL, *obj;
    json_error_t jerr;
    json_t *doc = NULL;
    size_t i;
    int rc;

    memset(out, 0, sizeof(*out));
    if (e == NULL)
        return egpu_error_set(err, -ENOMEM, "%s: out of memory", path);
    doc = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (doc == NULL) {
        FILE *f = fopen(path, "r");

        if (f == NULL) {
            rc = egpu_error_errno(err, "%s", path);
        } else {
            fclose(f);
            rc = egpu_error_set(err, EGPU_ESYNTAX, "%s:%d:%d: not JSON: %s", path, jerr.line,
                                jerr.column, jerr.text);
        }
        goto out;
    }
    rc = items_of(path, doc, &items, err);
    if (rc == 0)
        rc = egpu_trace_cluster(t, &c, err);
    if (rc == 0 && json_array_size(items) > 0) {
        out->items = egpu_calloc(json_array_size(items), sizeof(*out->items));
        if (out->items == NULL)
            rc = egpu_error_set(err, -ENOMEM, "%s: out of memory", path);
    }
    json_array_foreach(items, i, obj)
    {
        const char *name =
            json_string_value(json_object_get(json_object_get(obj, "metadata"), "name"));
        struct egpu_reservation res;
        struct egpu_sim_reservation *item;

        if (rc)
            break;
        rc = egpu_api_egpu_decode(obj, e, err);
        if (rc == 0 && !egpu_api_egpu_reservation(e, &res)) {
            out->nobjects++; /* Failed: holds nothing */
            continue;
        }
        if (rc == 0) {
            item = &out->items[out->n];
            rc = resolve(e, &res, c, item, err);
            if (rc == 0 || rc == -ENOMEM)
                out->n++; /* what it copied is freed with the rest */
            out->memory_dropped |= e->has_mem;
        }
        if (rc == 0) {
            rc = apply_one(item, c, err);
            if (rc == EGPU_ENOFIT)
                egpu_error_prefix(err, rc, "%s (reservations are applied in the file's order)",
                                  e->source == EGPU_API_PROVISIONER_GPUSHARE
                                      ? "spec.gpuShare.gpuName"
                                      : "spec.physicalGPU.gpuNames");
        }
        if (rc) {
            egpu_error_prefix(err, rc, "%s: items[%zu] (%s)", path, i,
                              name != NULL ? name : "no metadata.name");
            break;
        }
        out->nobjects++;
        out->core_milli += (uint64_t)res.core_milli * res.ncards;
    }
out:
    if (rc)
        egpu_sim_reservations_free(out);
    egpu_cluster_free(c);
    json_decref(doc);
    egpu_free(e);
    return rc;
}
