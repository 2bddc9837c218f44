/* api/gpu.c - the GPU object (one physical card, published by egpu-agent,
 * its status.allocated written by egpu-controller), decoded for readers that
 * show it: spec, health, capacity, the containers holding a share of the
 * card, what the card is using now, and how it reaches the other cards of
 * its node (spec.topology). deploy/crds/elasticgpu.io_gpus.yaml
 * is the shape; every limit here is the CRD's. See "GPU" in egpu/api.h.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "objects_int.h"

/* Closest first, as the CRD's enum lists them. */
static const char *const topo_names[] = {
    "NVLink", "Internal", "SingleSwitch", "MultipleSwitches", "HostBridge", "NUMANode", "System"};
#define NTOPO (sizeof(topo_names) / sizeof(topo_names[0]))

const char *egpu_api_topo_name(enum egpu_topo_level link)
{
    if (link <= EGPU_TOPO_UNKNOWN || link > EGPU_TOPO_NVLINK)
        return "unknown";
    return topo_names[EGPU_TOPO_NVLINK - link];
}

static int peer_decode(const json_t *e, size_t i, struct egpu_api_gpu_peer *p,
                       struct egpu_error *err)
{
    char path[64];
    int64_t index;
    int rc, link;

    snprintf(path, sizeof(path), "spec.topology[%zu]", i);
    if (!json_is_object(e))
        return egpu_error_set(err, EGPU_ESYNTAX, "%s must be an object", path);
    snprintf(path, sizeof(path), "spec.topology[%zu].index", i);
    rc = egpu__api_int(e, "index", path, 0, 1023, NULL, &index, NULL, err);
    if (rc)
        return rc;
    snprintf(path, sizeof(path), "spec.topology[%zu].link", i);
    rc = egpu__api_enum(e, "link", path, topo_names, NTOPO, &link, NULL, err);
    if (rc)
        return rc;
    p->index = (uint32_t)index;
    p->link = (enum egpu_topo_level)(EGPU_TOPO_NVLINK - link);
    return 0;
}

int egpu_api_gpu_topology_decode(const json_t *spec, struct egpu_api_gpu_peer *peers, size_t *n,
                                 struct egpu_error *err)
{
    struct egpu_api_gpu_peer got[EGPU_API_GPU_PEERS_MAX];
    const json_t *topo = json_object_get(spec, "topology"), *e;
    size_t i;
    int rc;

    if (topo == NULL || json_is_null(topo)) {
        *n = 0;
        return 0;
    }
    if (!json_is_array(topo))
        return egpu_error_set(err, EGPU_ESYNTAX, "spec.topology must be a list");
    if (json_array_size(topo) > EGPU_API_GPU_PEERS_MAX)
        return egpu_error_set(err, EGPU_ERANGE,
                              "spec.topology has %zu entries; allowed: at most %d",
                              json_array_size(topo), EGPU_API_GPU_PEERS_MAX);
    json_array_foreach(topo, i, e)
    {
        rc = peer_decode(e, i, &got[i], err);
        if (rc)
            return rc;
        for (size_t j = 0; j < i; j++) {
            if (got[j].index == got[i].index)
                return egpu_error_set(err, EGPU_ERANGE,
                                      "spec.topology[%zu].index %u is given twice; allowed: one "
                                      "entry per peer card",
                                      i, got[i].index);
        }
    }
    memcpy(peers, got, json_array_size(topo) * sizeof(*got));
    *n = json_array_size(topo);
    return 0;
}

void egpu_api_gpu_clear(struct egpu_api_gpu *g)
{
    if (g == NULL)
        return;
    egpu_free(g->allocated);
    memset(g, 0, sizeof(*g));
}

static int share_decode(const json_t *e, size_t i, struct egpu_api_gpu_share *s,
                        struct egpu_error *err)
{
    char path[64];
    bool has;
    int rc;

    snprintf(path, sizeof(path), "status.allocated[%zu]", i);
    if (!json_is_object(e))
        return egpu_error_set(err, EGPU_ESYNTAX, "%s must be an object", path);
    snprintf(path, sizeof(path), "status.allocated[%zu].namespace", i);
    rc = egpu__api_text(e, "namespace", path, true, true, s->ns, sizeof(s->ns), err);
    if (!rc) {
        snprintf(path, sizeof(path), "status.allocated[%zu].pod", i);
        rc = egpu__api_text(e, "pod", path, true, true, s->pod, sizeof(s->pod), err);
    }
    if (!rc) {
        snprintf(path, sizeof(path), "status.allocated[%zu].container", i);
        rc = egpu__api_text(e, "container", path, true, true, s->container, sizeof(s->container),
                            err);
    }
    if (!rc) {
        snprintf(path, sizeof(path), "status.allocated[%zu].core", i);
        rc = egpu__api_int(e, "core", path, 0, 100, NULL, &s->core_pct, &has, err);
    }
    if (!rc) {
        snprintf(path, sizeof(path), "status.allocated[%zu].memory", i);
        rc = egpu__api_int(e, "memory", path, 0, INT64_MAX, NULL, &s->mem_mib, &has, err);
    }
    if (!rc) {
        snprintf(path, sizeof(path), "status.allocated[%zu].claim", i);
        rc = egpu__api_text(e, "claim", path, false, false, s->claim, sizeof(s->claim), err);
    }
    return rc;
}

static int status_decode(const json_t *status, struct egpu_api_gpu *g, struct egpu_error *err)
{
    const json_t *cap = NULL, *used = NULL, *alloc, *e;
    size_t i;
    int rc;

    rc = egpu__api_text(status, "health", "status.health", false, false, g->health,
                        sizeof(g->health), err);
    if (!rc)
        rc = egpu__api_object(status, "capacity", "status.capacity", false, &cap, err);
    if (!rc && cap != NULL)
        rc = egpu__api_int(cap, "core", "status.capacity.core", 0, INT64_MAX, NULL,
                           &g->cap_core_pct, &g->has_cap_core, err);
    if (!rc && cap != NULL)
        rc = egpu__api_int(cap, "memory", "status.capacity.memory", 0, INT64_MAX, NULL,
                           &g->cap_mem_mib, &g->has_cap_mem, err);
    if (!rc)
        rc = egpu__api_object(status, "used", "status.used", false, &used, err);
    if (!rc && used != NULL)
        rc = egpu__api_int(used, "memory", "status.used.memory", 0, INT64_MAX, NULL,
                           &g->used_mem_mib, &g->has_used_mem, err);
    if (!rc && used != NULL)
        rc = egpu__api_int(used, "utilization", "status.used.utilization", 0, 100, NULL,
                           &g->used_util_pct, &g->has_used_util, err);
    if (!rc && used != NULL)
        rc = egpu__api_text(used, "updateTime", "status.used.updateTime", false, false,
                            g->used_time, sizeof(g->used_time), err);
    if (!rc && g->used_time[0] != '\0') {
        int64_t t;

        rc = egpu_api_time_parse(g->used_time, "status.used.updateTime", &t, err);
    }
    if (rc)
        return rc;
    alloc = json_object_get(status, "allocated");
    if (alloc == NULL || json_is_null(alloc))
        return 0;
    if (!json_is_array(alloc))
        return egpu_error_set(err, EGPU_ESYNTAX, "status.allocated must be a list");
    if (json_array_size(alloc) > EGPU_API_GPU_SHARES_MAX)
        return egpu_error_set(err, EGPU_ERANGE,
                              "status.allocated has %zu entries; allowed: at most %d",
                              json_array_size(alloc), EGPU_API_GPU_SHARES_MAX);
    if (json_array_size(alloc) == 0)
        return 0;
    g->allocated = egpu_calloc(json_array_size(alloc), sizeof(*g->allocated));
    if (g->allocated == NULL)
        return egpu_error_set(err, -ENOMEM, "status.allocated: out of memory");
    json_array_foreach(alloc, i, e)
    {
        rc = share_decode(e, i, &g->allocated[i], err);
        if (rc)
            return rc;
        g->nallocated = i + 1;
    }
    return 0;
}

int egpu_api_gpu_decode(const json_t *obj, struct egpu_api_gpu *out, struct egpu_error *err)
{
    struct egpu_api_gpu g;
    const json_t *spec = NULL, *status = NULL;
    bool has;
    int rc;

    memset(&g, 0, sizeof(g));
    if (!json_is_object(obj))
        return egpu_error_set(err, EGPU_ESYNTAX, "a GPU must be a JSON object");
    rc = egpu__api_check_kind(obj, EGPU_KIND_GPU, err);
    if (!rc)
        rc = egpu__api_meta_decode(obj, false, &g.meta, err);
    if (!rc)
        rc = egpu__api_object(obj, "spec", "spec", true, &spec, err);
    if (!rc)
        rc = egpu__api_text(spec, "nodeName", "spec.nodeName", true, true, g.node_name,
                            sizeof(g.node_name), err);
    if (!rc)
        rc = egpu__api_int(spec, "index", "spec.index", 0, 1023, NULL, &g.index, NULL, err);
    if (!rc)
        rc = egpu__api_text(spec, "uuid", "spec.uuid", true, true, g.uuid, sizeof(g.uuid), err);
    if (!rc)
        rc = egpu__api_text(spec, "model", "spec.model", false, false, g.model, sizeof(g.model),
                            err);
    if (!rc)
        rc = egpu__api_int(spec, "memory", "spec.memory", 0, EGPU_API_GPU_MIB_MAX, NULL, &g.mem_mib,
                           &has, err);
    if (!rc)
        rc = egpu_api_gpu_topology_decode(spec, g.peers, &g.npeers, err);
    if (!rc)
        rc = egpu__api_object(obj, "status", "status", false, &status, err);
    if (!rc && status != NULL)
        rc = status_decode(status, &g, err);
    if (rc) {
        egpu_api_gpu_clear(&g);
        return rc;
    }
    *out = g;
    return 0;
}
