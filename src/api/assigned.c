/* api/assigned.c - the elasticgpu.io/assigned annotation.
 *
 * bind writes it on the pod before the Binding, so the decision survives a
 * restart of the extender (the cache is rebuilt from it) and the node agent
 * knows which card(s) and limits each container got. Format, JSON text:
 *   {"node":"gpu-node-1","containers":[
 *     {"name":"trainer","core":30,"memory":4096,"gpus":["GPU-8f6..."]}]}
 * core: percent of each card (1..99 for a share, 100 for whole cards);
 * memory: MiB per card; gpus: NVML UUIDs, one per card.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "egpu/api.h"

char *egpu_assigned_encode(const struct egpu_assigned *a)
{
    json_t *root = json_object(), *list = json_array();
    char *text = NULL, *copy = NULL;

    if (root == NULL || list == NULL)
        goto out;
    if (json_object_set_new(root, "node", json_string(a->node)) ||
        json_object_set(root, "containers", list))
        goto out;
    for (uint32_t i = 0; i < a->ncontainers; i++) {
        const struct egpu_assigned_container *c = &a->containers[i];
        json_t *o = json_object(), *gpus = json_array();

        if (o == NULL || gpus == NULL || json_array_append_new(list, o)) {
            json_decref(o);
            json_decref(gpus);
            goto out;
        }
        if (json_object_set_new(o, "name", json_string(c->name)) ||
            json_object_set_new(o, "core", json_integer(c->core_pct)) ||
            json_object_set_new(o, "memory", json_integer(c->mem_mib)) ||
            json_object_set_new(o, "gpus", gpus))
            goto out;
        for (uint32_t g = 0; g < c->ncards; g++) {
            if (json_array_append_new(gpus, json_string(a->uuids[c->first_card + g])))
                goto out;
        }
    }
    text = json_dumps(root, JSON_COMPACT);
    if (text != NULL)
        copy = egpu_strdup(text);
out:
    free(text);
    json_decref(list);
    json_decref(root);
    return copy;
}

static int get_string(const json_t *o, const char *key, char *out, size_t len, const char *where,
                      struct egpu_error *err)
{
    const json_t *v = json_object_get(o, key);

    if (!json_is_string(v))
        return egpu_error_set(err, EGPU_ESYNTAX, "%s: %s: %s", EGPU_ANN_ASSIGNED, where,
                              v ? "must be a string" : "missing");
    if (json_string_length(v) == 0 || json_string_length(v) >= len)
        return egpu_error_set(err, EGPU_ESYNTAX, "%s: %s: length must be 1..%zu", EGPU_ANN_ASSIGNED,
                              where, len - 1);
    memcpy(out, json_string_value(v), json_string_length(v) + 1);
    return 0;
}

static int get_uint(const json_t *o, const char *key, json_int_t lo, json_int_t hi, uint32_t *out,
                    const char *where, struct egpu_error *err)
{
    const json_t *v = json_object_get(o, key);

    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return egpu_error_set(err, EGPU_ESYNTAX, "%s: %s: must be an integer in %lld..%lld",
                              EGPU_ANN_ASSIGNED, where, (long long)lo, (long long)hi);
    *out = (uint32_t)json_integer_value(v);
    return 0;
}

static int decode_container(const json_t *o, size_t i, struct egpu_assigned *a,
                            struct egpu_error *err)
{
    struct egpu_assigned_container *c = &a->containers[i];
    char where[64];
    const json_t *gpus;
    int rc;

    snprintf(where, sizeof(where), "containers[%zu]", i);
    if (!json_is_object(o))
        return egpu_error_set(err, EGPU_ESYNTAX, "%s: %s: must be an object", EGPU_ANN_ASSIGNED,
                              where);
    snprintf(where, sizeof(where), "containers[%zu].name", i);
    rc = get_string(o, "name", c->name, sizeof(c->name), where, err);
    snprintf(where, sizeof(where), "containers[%zu].core", i);
    if (!rc)
        rc = get_uint(o, "core", 1, 100, &c->core_pct, where, err);
    snprintf(where, sizeof(where), "containers[%zu].memory", i);
    if (!rc)
        rc = get_uint(o, "memory", 0, UINT32_MAX, &c->mem_mib, where, err);
    if (rc)
        return rc;
    gpus = json_object_get(o, "gpus");
    if (!json_is_array(gpus) || json_array_size(gpus) == 0 ||
        json_array_size(gpus) > EGPU_NODE_GPUS_MAX ||
        (c->core_pct < 100 && json_array_size(gpus) != 1))
        return egpu_error_set(err, EGPU_ESYNTAX,
                              "%s: containers[%zu].gpus: must list 1 UUID for a share, 1..%d for "
                              "whole cards",
                              EGPU_ANN_ASSIGNED, i, EGPU_NODE_GPUS_MAX);
    c->ncards = (uint32_t)json_array_size(gpus);
    c->first_card = a->ncards;
    if (a->ncards + c->ncards > EGPU_PICK_SHARES_MAX)
        return egpu_error_set(err, EGPU_ESYNTAX, "%s: more than %d cards in all", EGPU_ANN_ASSIGNED,
                              EGPU_PICK_SHARES_MAX);
    for (uint32_t g = 0; g < c->ncards; g++) {
        const json_t *u = json_array_get(gpus, g);

        if (!json_is_string(u) || json_string_length(u) == 0 ||
            json_string_length(u) >= EGPU_UUID_MAX)
            return egpu_error_set(err, EGPU_ESYNTAX,
                                  "%s: containers[%zu].gpus[%u]: must be a UUID of 1..%d "
                                  "characters",
                                  EGPU_ANN_ASSIGNED, i, g, EGPU_UUID_MAX - 1);
        memcpy(a->uuids[a->ncards++], json_string_value(u), json_string_length(u) + 1);
    }
    return 0;
}

int egpu_assigned_decode(const char *text, struct egpu_assigned *out, struct egpu_error *err)
{
    struct egpu_assigned *a = egpu_calloc(1, sizeof(*a));
    json_error_t jerr;
    json_t *root = NULL;
    const json_t *list;
    int rc = 0;

    if (a == NULL)
        return egpu_error_set(err, -ENOMEM, "%s: out of memory", EGPU_ANN_ASSIGNED);
    root = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
    if (!json_is_object(root)) {
        rc = egpu_error_set(err, EGPU_ESYNTAX, "%s: not a JSON object: %s", EGPU_ANN_ASSIGNED,
                            root ? "wrong type" : jerr.text);
        goto out;
    }
    rc = get_string(root, "node", a->node, sizeof(a->node), "node", err);
    if (rc)
        goto out;
    list = json_object_get(root, "containers");
    if (!json_is_array(list) || json_array_size(list) > EGPU_CONTAINERS_MAX) {
        rc = egpu_error_set(err, EGPU_ESYNTAX, "%s: containers: must be an array of at most %d",
                            EGPU_ANN_ASSIGNED, EGPU_CONTAINERS_MAX);
        goto out;
    }
    a->ncontainers = (uint32_t)json_array_size(list);
    for (size_t i = 0; i < a->ncontainers && rc == 0; i++)
        rc = decode_container(json_array_get(list, i), i, a, err);
    if (rc == 0)
        *out = *a;
out:
    json_decref(root);
    egpu_free(a);
    return rc;
}
