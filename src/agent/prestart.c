/* agent/prestart.c - the API-server side of the device plugin (DESIGN.md 2.3).
 *
 * GetPreferredAllocation: the kubelet only says how many IDs a container
 * wants (its gpu-core) and which are free. The scheduler's choice is on the
 * pod (elasticgpu.io/assigned: per container its cards, core % and memory
 * MiB per card). So the agent lists the pods bound to this node and looks
 * for a container not yet allocated whose core * cards equals the size, and
 * prefers that many IDs on its card(s). The scheduler's ambiguity rule
 * (equal core, other cards or memory, both pending) means at most one
 * placement fits a size at a time; equal placements are interchangeable.
 *
 * PreStartContainer: the exact owner of the IDs comes from the kubelet's
 * PodResources List (never guessed), its assignment from the pod. The IDs
 * must lie on the assigned card(s), core per card, else FAILED_PRECONDITION
 * and nothing is written. Then limits.json goes into the allocation dir
 * (the agent's own, 0755, opened as a directory fd: a random temporary name
 * made with O_EXCL | O_NOFOLLOW, then renameat, so the interposer never
 * reads half a file and no container can plant anything at those names):
 *   {"pod","namespace","container","gpus":[uuids],"core":pct,"memory":mib}
 * and the pod gets elasticgpu.io/allocated (merge patch), a JSON object
 * {"containers":{"<name>":{"gpus":[...],"core":pct,"memory":mib}}} that
 * grows by one container at a time. Usually the container is there already:
 * marker.c marks it right after Allocate (egpu__prestart_mark: the same
 * owner from PodResources, the same checks), when the kubelet has fixed
 * its IDs, not after the image pull; PreStartContainer marks what the
 * marker could not. Each mark reads the pod afresh under one lock, so two
 * never drop each other's container.
 *
 * Next to it goes vcuda.conf, the same limits for the interposer
 * (docs/vcuda.md; Allocate mounts it read-only into the container):
 *   EGPU_VCUDA_GPUS=<uuid>[,<uuid>...]  EGPU_VCUDA_MEMORY_MIB=<mib>
 *   EGPU_VCUDA_CORE=<pct>  EGPU_VCUDA_CORE_LIMIT=<pct>
 *   [EGPU_VCUDA_CONTEXT_EXTRA_MIB=<mib>]
 * one per line; the core limit is the pod annotation
 * elasticgpu.io/gpu-core-limit (core..100), or the core when absent; the
 * context extra is --context-extra-mib, written only when above 0.
 *
 * Units: core in percent of one card, memory in MiB per card.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "egpu/cli.h"
#include "egpu/log.h"
#include "egpu/api.h"
#include "allocdir_int.h"
#include "allocfs_int.h"
#include "pb_int.h"
#include "plugin_int.h"
#include "prestart_int.h"

#define OWNER_NAME_MAX EGPU_K8S_NAME_MAX

/* Whether id is "<uuid>-<nn>"; *slot gets nn. */
static bool id_on_card(const char *id, const char *uuid, unsigned *slot)
{
    size_t ul = strlen(uuid);

    if (ul == 0 || strlen(id) != ul + 3 || strncmp(id, uuid, ul) != 0 || id[ul] != '-' ||
        id[ul + 1] < '0' || id[ul + 1] > '9' || id[ul + 2] < '0' || id[ul + 2] > '9')
        return false;
    *slot = (unsigned)((id[ul + 1] - '0') * 10 + (id[ul + 2] - '0'));
    return true;
}

/* The pod's elasticgpu.io/allocated as an object (new reference), or NULL. */
static json_t *allocated_of(const json_t *pod)
{
    const json_t *v = json_object_get(
        json_object_get(json_object_get(pod, "metadata"), "annotations"), EGPU_ANN_ALLOCATED);
    json_t *doc;

    if (!json_is_string(v))
        return NULL;
    doc = json_loads(json_string_value(v), 0, NULL);
    if (!json_is_object(doc)) {
        json_decref(doc);
        return NULL;
    }
    return doc;
}

static bool is_allocated(const json_t *pod, const char *container)
{
    json_t *doc = allocated_of(pod);
    bool yes =
        doc != NULL && json_object_get(json_object_get(doc, "containers"), container) != NULL;

    json_decref(doc);
    return yes;
}

/* The pod's decoded assignment. Returns 0, -ENOENT (none) or EGPU_ESYNTAX. */
static int assigned_of(const json_t *pod, struct egpu_assigned *a, struct egpu_error *err)
{
    const json_t *v = json_object_get(
        json_object_get(json_object_get(pod, "metadata"), "annotations"), EGPU_ANN_ASSIGNED);

    if (!json_is_string(v))
        return -ENOENT;
    return egpu_assigned_decode(json_string_value(v), a, err);
}

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
            on = id_on_card(must[m], a->uuids[c->first_card + g], &slot);
        if (!on)
            return 0;
    }
    for (uint32_t g = 0; g < c->ncards; g++) {
        const char *uuid = a->uuids[c->first_card + g];
        char *slots[EGPU_PLUGIN_IDS_PER_CARD] = {NULL};
        bool taken[EGPU_PLUGIN_IDS_PER_CARD] = {false};
        unsigned have = 0;

        for (size_t m = 0; m < nmust; m++) {
            if (id_on_card(must[m], uuid, &slot) && !taken[slot] && have < c->core_pct) {
                taken[slot] = true;
                out[got++] = must[m];
                have++;
            }
        }
        for (size_t i = 0; i < n; i++)
            if (id_on_card(avail[i], uuid, &slot) && !taken[slot])
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

size_t egpu__prestart_prefer(struct egpu_kube *kube, const char *node,
                             const struct egpu_gpu_info *cards, size_t ncards, char *const *avail,
                             size_t n, char *const *must, size_t nmust, size_t size, char **out)
{
    struct egpu_error err = {0};
    struct egpu_assigned *a = egpu_malloc(sizeof(*a));
    json_t *list = a != NULL ? node_pods(kube, node, &err) : NULL;
    const json_t *pod;
    size_t i, got = 0;

    (void)cards;
    (void)ncards;
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
        if (!is_pending_pod(pod) || assigned_of(pod, a, &err) != 0)
            continue;
        for (uint32_t k = 0; k < a->ncontainers && got == 0; k++) {
            const struct egpu_assigned_container *c = &a->containers[k];

            if ((size_t)c->core_pct * c->ncards != size || is_allocated(pod, c->name))
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

/* ------------------------------------------------------------------------ */
/* PreStartContainer                                                        */

struct owner {
    char ns[OWNER_NAME_MAX];
    char pod[OWNER_NAME_MAX];
    char container[OWNER_NAME_MAX];
};

/* Whether container c holds every one of ids as gpu-core devices. */
static bool owns_all(const V1__ContainerResources *c, char *const *ids, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        bool found = false;

        for (size_t d = 0; d < c->n_devices && !found; d++) {
            const V1__ContainerDevices *cd = c->devices[d];

            if (cd->resource_name == NULL || strcmp(cd->resource_name, EGPU_RES_GPU_CORE) != 0)
                continue;
            for (size_t k = 0; k < cd->n_device_ids && !found; k++)
                found = strcmp(cd->device_ids[k], ids[i]) == 0;
        }
        if (!found)
            return false;
    }
    return true;
}

/* The container of r holding every one of ids, into *o. Returns whether
 * one does. */
static bool owner_in(const V1__ListPodResourcesResponse *r, char *const *ids, size_t n,
                     struct owner *o)
{
    for (size_t p = 0; p < r->n_pod_resources; p++) {
        const V1__PodResources *pr = r->pod_resources[p];

        for (size_t c = 0; c < pr->n_containers; c++) {
            if (!owns_all(pr->containers[c], ids, n))
                continue;
            snprintf(o->ns, sizeof(o->ns), "%s", pr->namespace_ ? pr->namespace_ : "");
            snprintf(o->pod, sizeof(o->pod), "%s", pr->name ? pr->name : "");
            snprintf(o->container, sizeof(o->container), "%s",
                     pr->containers[c]->name ? pr->containers[c]->name : "");
            return true;
        }
    }
    return false;
}

/* Ask PodResources List (cfg's) who owns ids. Returns 0, -ENOENT (nobody)
 * or the gRPC call's code, with st set. */
static int find_owner(const struct egpu_prestart_config *cfg, char *const *ids, size_t n,
                      struct owner *o, struct egpu_grpc_status *st)
{
    const char *socket = cfg->pod_resources;
    egpu__podres_list_fn list = cfg->podres_list != NULL ? cfg->podres_list : egpu__podres_list;
    struct egpu_error err = {0};
    V1__ListPodResourcesResponse *r = NULL;
    int rc = list(socket, &r, &err);

    if (rc == -EPROTO)
        return egpu_grpc_status_set(st, GRPC_STATUS_INTERNAL, "PreStartContainer: %s", err.msg);
    if (rc)
        return egpu_grpc_status_set(st, GRPC_STATUS_UNAVAILABLE,
                                    "PreStartContainer: PodResources List on %s: %s", socket,
                                    err.msg);
    if (owner_in(r, ids, n, o)) {
        *st = (struct egpu_grpc_status){0};
        rc = 0;
    } else {
        rc = egpu_grpc_status_set(st, GRPC_STATUS_NOT_FOUND,
                                  "PreStartContainer: no container holds device ID %s "
                                  "(PodResources List on %s)",
                                  ids[0], socket);
    }
    v1__list_pod_resources_response__free_unpacked(r, &egpu__pb_allocator);
    return rc;
}

/* Check ids against the container's cards: each ID on one of them, core
 * IDs per card. Returns 0 or FAILED_PRECONDITION with st naming both. */
static int check_cards(const struct owner *o, const struct egpu_assigned *a,
                       const struct egpu_assigned_container *c, char *const *ids, size_t n,
                       struct egpu_grpc_status *st)
{
    unsigned count[EGPU_NODE_GPUS_MAX] = {0};
    unsigned slot;

    for (size_t i = 0; i < n; i++) {
        bool on = false;

        for (uint32_t g = 0; g < c->ncards && !on; g++) {
            on = id_on_card(ids[i], a->uuids[c->first_card + g], &slot);
            if (on)
                count[g]++;
        }
        if (!on)
            return egpu_grpc_status_set(st, GRPC_STATUS_FAILED_PRECONDITION,
                                        "PreStartContainer: pod %s/%s container %s is assigned "
                                        "%s%s but the kubelet gave device ID %s on another GPU",
                                        o->ns, o->pod, o->container, a->uuids[c->first_card],
                                        c->ncards > 1 ? " and more" : "", ids[i]);
    }
    for (uint32_t g = 0; g < c->ncards; g++)
        if (count[g] != c->core_pct)
            return egpu_grpc_status_set(st, GRPC_STATUS_FAILED_PRECONDITION,
                                        "PreStartContainer: pod %s/%s container %s is assigned "
                                        "core %u on %s but the kubelet gave %u device IDs there",
                                        o->ns, o->pod, o->container, c->core_pct,
                                        a->uuids[c->first_card + g], count[g]);
    return 0;
}

/* The cards of ids as "<uuid>, <uuid>" into out (each card once). */
static void given_cards(char *const *ids, size_t n, char *out, size_t len)
{
    size_t used = 0;

    out[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        size_t ul = strlen(ids[i]);
        bool dup = false;
        int w;

        if (ul < 4)
            continue;
        ul -= 3;
        for (size_t j = 0; j < i && !dup; j++)
            dup = strlen(ids[j]) == ul + 3 && strncmp(ids[j], ids[i], ul) == 0;
        if (dup)
            continue;
        w = snprintf(out + used, len - used, "%s%.*s", used ? ", " : "", (int)ul, ids[i]);
        if (w < 0 || (size_t)w >= len - used)
            return;
        used += (size_t)w;
    }
}

/* Post a Warning event AllocationMismatch on the pod (best effort). */
static void post_mismatch_event(const struct egpu_prestart_config *cfg, const json_t *pod,
                                const struct owner *o, const struct egpu_assigned *a,
                                const struct egpu_assigned_container *c, char *const *ids, size_t n)
{
    char assigned[EGPU_NODE_GPUS_MAX * (EGPU_UUID_MAX + 2)] = "";
    char given[EGPU_NODE_GPUS_MAX * (EGPU_UUID_MAX + 2)];
    char msg[sizeof(assigned) + sizeof(given) + 3 * OWNER_NAME_MAX + 128];
    struct egpu_kube_event ev = {
        .kind = "Pod",
        .involved_ns = o->ns,
        .name = o->pod,
        .uid = egpu_kube_str(json_object_get(json_object_get(pod, "metadata"), "uid")),
        .warning = true,
        .reason = EGPU_PRESTART_EVENT_REASON,
        .message = msg,
        .component = "egpu-agent",
        .host = cfg->node,
    };
    struct egpu_error err = {0};
    size_t used = 0;

    for (uint32_t g = 0; g < c->ncards; g++) {
        int w = snprintf(assigned + used, sizeof(assigned) - used, "%s%s", used ? ", " : "",
                         a->uuids[c->first_card + g]);

        if (w < 0 || (size_t)w >= sizeof(assigned) - used)
            break;
        used += (size_t)w;
    }
    given_cards(ids, n, given, sizeof(given));
    snprintf(msg, sizeof(msg),
             "container %s is assigned GPU %s but the kubelet gave device IDs on GPU %s; "
             "the container is not started",
             o->container, assigned, given);
    if (egpu_kube_event_post(cfg->kube, &ev, &err) != 0)
        egpu_log(EGPU_LOG_WARN, "event %s on pod %s/%s not posted error=\"%s\"",
                 EGPU_PRESTART_EVENT_REASON, o->ns, o->pod, err.msg);
}

/* The container's limits as a JSON object (new reference), or NULL. */
static json_t *limits_of(const struct owner *o, const struct egpu_assigned *a,
                         const struct egpu_assigned_container *c, bool with_names)
{
    json_t *gpus = json_array();
    json_t *doc;

    for (uint32_t g = 0; gpus != NULL && g < c->ncards; g++)
        if (json_array_append_new(gpus, json_string(a->uuids[c->first_card + g])) != 0) {
            json_decref(gpus);
            return NULL;
        }
    if (with_names)
        doc = json_pack("{s:s,s:s,s:s,s:o,s:i,s:i}", "pod", o->pod, "namespace", o->ns, "container",
                        o->container, "gpus", gpus, "core", (int)c->core_pct, "memory",
                        (int)c->mem_mib);
    else
        doc = json_pack("{s:o,s:i,s:i}", "gpus", gpus, "core", (int)c->core_pct, "memory",
                        (int)c->mem_mib);
    return doc;
}

/* The core limit of pod's containers asking core percent: the annotation
 * elasticgpu.io/gpu-core-limit (an integer, core..100) or core when absent.
 * Returns 0, or -EINVAL with st saying what is wrong. */
static int core_limit_of(const json_t *pod, const struct owner *o, unsigned core, unsigned *out,
                         struct egpu_grpc_status *st)
{
    struct egpu_api_pod_annotations pa;
    struct egpu_error err = {0};

    *out = core;
    if (egpu_api_pod_annotations(json_object_get(json_object_get(pod, "metadata"), "annotations"),
                                 &pa, &err) != 0)
        return egpu_grpc_status_set(st, GRPC_STATUS_FAILED_PRECONDITION,
                                    "PreStartContainer: pod %s/%s: %s", o->ns, o->pod, err.msg);
    if (pa.core_limit == 0)
        return 0;
    if (pa.core_limit < core)
        return egpu_grpc_status_set(st, GRPC_STATUS_FAILED_PRECONDITION,
                                    "PreStartContainer: pod %s/%s: annotation " EGPU_ANN_CORE_LIMIT
                                    " is \"%u\"; allowed: the container's gpu-core (%u) to 100",
                                    o->ns, o->pod, pa.core_limit, core);
    *out = pa.core_limit;
    return 0;
}

/* vcuda.conf's text for container c (see the file's header), into b. */
static int vcuda_conf_of(const struct owner *o, const struct egpu_assigned *a,
                         const struct egpu_assigned_container *c, unsigned core_limit,
                         unsigned ctx_extra_mib, struct egpu_buf *b)
{
    int rc = egpu_buf_printf(b,
                             "# Written by egpu-agent for pod %s/%s container %s; read by "
                             "libegpu-vcuda.so.\nEGPU_VCUDA_GPUS=",
                             o->ns, o->pod, o->container);

    for (uint32_t g = 0; rc == 0 && g < c->ncards; g++)
        rc = egpu_buf_printf(b, "%s%s", g ? "," : "", a->uuids[c->first_card + g]);
    if (rc == 0)
        rc = egpu_buf_printf(b,
                             "\nEGPU_VCUDA_MEMORY_MIB=%u\nEGPU_VCUDA_CORE=%u\n"
                             "EGPU_VCUDA_CORE_LIMIT=%u\n",
                             c->mem_mib, c->core_pct, core_limit);
    if (rc == 0 && ctx_extra_mib > 0)
        rc = egpu_buf_printf(b, "EGPU_VCUDA_CONTEXT_EXTRA_MIB=%u\n", ctx_extra_mib);
    return rc;
}

/* Merge-patch elasticgpu.io/allocated of pod with this container added.
 * Returns 0 (*wrote says whether a patch was needed: false when the
 * container is there with the same limits), or a negative code with err. */
static int patch_allocated(struct egpu_kube *kube, const json_t *pod, const struct owner *o,
                           const struct egpu_assigned *a, const struct egpu_assigned_container *c,
                           bool *wrote, struct egpu_error *err)
{
    json_t *doc = allocated_of(pod), *containers, *patch = NULL, *entry;
    struct egpu_kube_status st;
    char *text = NULL;
    int rc = -ENOMEM;

    *wrote = false;
    if (doc == NULL)
        doc = json_object();
    containers = json_object_get(doc, "containers");
    if (!json_is_object(containers)) {
        containers = json_object();
        if (json_object_set_new(doc, "containers", containers) != 0)
            goto out;
    }
    entry = limits_of(o, a, c, false);
    if (entry != NULL && json_equal(json_object_get(containers, o->container), entry)) {
        json_decref(entry);
        rc = 0; /* marked already (after Allocate, or by a PreStartContainer before) */
        goto out;
    }
    if (json_object_set_new(containers, o->container, entry) != 0)
        goto out;
    *wrote = true;
    text = json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS);
    if (text == NULL)
        goto out;
    patch = json_pack("{s:{s:{s:s}}}", "metadata", "annotations", EGPU_ANN_ALLOCATED, text);
    if (patch == NULL)
        goto out;
    rc = egpu_kube_patch(kube, &egpu_kube_pods, o->ns, o->pod, EGPU_KUBE_MERGE_PATCH, patch, NULL,
                         &st, err);
out:
    if (rc == -ENOMEM)
        egpu_error_set(err, rc, "out of memory");
    free(text);
    json_decref(patch);
    json_decref(doc);
    return rc;
}

/* Add container c to the pod's elasticgpu.io/allocated as the pod is now:
 * under cfg->allocated_lock (the mark after Allocate and PreStartContainer
 * may run at once; each reads the pod afresh, so neither drops the other's
 * container from the annotation). *wrote as patch_allocated. */
static int mark_allocated(const struct egpu_prestart_config *cfg, const struct owner *o,
                          const struct egpu_assigned *a, const struct egpu_assigned_container *c,
                          bool *wrote, struct egpu_error *err)
{
    struct egpu_kube_status ks;
    json_t *pod = NULL;
    int rc;

    if (cfg->allocated_lock != NULL)
        pthread_mutex_lock(cfg->allocated_lock);
    rc = egpu_kube_get(cfg->kube, &egpu_kube_pods, o->ns, o->pod, &pod, &ks, err);
    if (rc == 0)
        rc = patch_allocated(cfg->kube, pod, o, a, c, wrote, err);
    if (cfg->allocated_lock != NULL)
        pthread_mutex_unlock(cfg->allocated_lock);
    json_decref(pod);
    return rc;
}

/* The record of what was written for container c into the dir name. */
static void record_of(const struct owner *o, const struct egpu_assigned *a,
                      const struct egpu_assigned_container *c, const char *name,
                      struct egpu__alloc_limits *out)
{
    memset(out, 0, sizeof(*out));
    snprintf(out->dir, sizeof(out->dir), "%s", name);
    snprintf(out->ns, sizeof(out->ns), "%s", o->ns);
    snprintf(out->pod, sizeof(out->pod), "%s", o->pod);
    snprintf(out->container, sizeof(out->container), "%s", o->container);
    for (uint32_t g = 0; g < c->ncards && g < EGPU_NODE_GPUS_MAX; g++)
        snprintf(out->gpus[out->ngpus++], EGPU_UUID_MAX, "%s", a->uuids[c->first_card + g]);
    out->core_pct = c->core_pct;
    out->mem_mib = c->mem_mib;
}

int egpu__prestart_run(const struct egpu_prestart_config *cfg, const struct egpu_gpu_info *cards,
                       size_t ncards, char *const *ids, size_t n, bool *mismatch, bool *marked,
                       struct egpu__alloc_limits *wrote, struct egpu_grpc_status *st)
{
    struct egpu_error err = {0};
    struct egpu_kube_status ks;
    struct egpu_assigned *a = egpu_malloc(sizeof(*a));
    const struct egpu_assigned_container *c = NULL;
    struct owner o;
    json_t *pod = NULL, *limits = NULL;
    char dir[4096];
    char *text = NULL;
    struct egpu_buf conf;
    bool created = false, patched = false;
    unsigned core_limit = 100;
    int rc, dfd = -1;

    (void)cards;
    egpu_buf_init(&conf, 4096);
    (void)ncards;
    if (a == NULL)
        return -ENOMEM;
    rc = find_owner(cfg, ids, n, &o, st);
    if (rc)
        goto out;
    rc = egpu_kube_get(cfg->kube, &egpu_kube_pods, o.ns, o.pod, &pod, &ks, &err);
    if (rc) {
        rc = egpu_grpc_status_set(st,
                                  rc == -ENOENT ? GRPC_STATUS_NOT_FOUND : GRPC_STATUS_UNAVAILABLE,
                                  "PreStartContainer: pod %s/%s: %s", o.ns, o.pod, err.msg);
        goto out;
    }
    rc = assigned_of(pod, a, &err);
    if (rc) {
        rc = egpu_grpc_status_set(st, GRPC_STATUS_FAILED_PRECONDITION,
                                  "PreStartContainer: pod %s/%s has %s " EGPU_ANN_ASSIGNED
                                  "%s%s: was it scheduled by elastic-gpu-scheduler?",
                                  o.ns, o.pod, rc == -ENOENT ? "no" : "a malformed",
                                  rc == -ENOENT ? "" : ": ", rc == -ENOENT ? "" : err.msg);
        goto out;
    }
    for (uint32_t k = 0; k < a->ncontainers && c == NULL; k++)
        if (strcmp(a->containers[k].name, o.container) == 0)
            c = &a->containers[k];
    if (c == NULL) {
        rc = egpu_grpc_status_set(st, GRPC_STATUS_FAILED_PRECONDITION,
                                  "PreStartContainer: pod %s/%s: " EGPU_ANN_ASSIGNED
                                  " has no container %s",
                                  o.ns, o.pod, o.container);
        goto out;
    }
    rc = check_cards(&o, a, c, ids, n, st);
    if (rc) {
        if (mismatch != NULL)
            *mismatch = true;
        post_mismatch_event(cfg, pod, &o, a, c, ids, n);
        goto out;
    }
    /* Whole cards run without the interposer: no burst to set. */
    core_limit = 100;
    if (c->core_pct < 100) {
        rc = core_limit_of(pod, &o, c->core_pct, &core_limit, st);
        if (rc)
            goto out;
    }
    rc = egpu__allocdir_path(cfg->alloc_root, ids, n, dir, sizeof(dir));
    if (rc)
        egpu_error_set(&err, rc, "allocation dir below %s: %s", cfg->alloc_root, egpu_strerror(rc));
    else
        rc = egpu__allocdir_open(cfg->alloc_root, dir, true, c->core_pct < 100, &created, &dfd,
                                 &err);
    if (rc) {
        rc = egpu_grpc_status_set(st, GRPC_STATUS_INTERNAL, "PreStartContainer: %s", err.msg);
        goto out;
    }
    limits = limits_of(&o, a, c, true);
    text = limits != NULL ? json_dumps(limits, JSON_COMPACT) : NULL;
    if (text == NULL || vcuda_conf_of(&o, a, c, core_limit, cfg->ctx_extra_mib, &conf) != 0) {
        rc = -ENOMEM;
        goto out;
    }
    /* vcuda.conf, then limits.json; when the second fails the first goes, so
     * a failed call leaves the dir as it was. The dir is the agent's alone
     * (0755): no container can plant anything at these names. */
    rc = egpu__fs_write_at(dfd, dir, EGPU_ALLOCDIR_VCUDA_FILE, conf.data, conf.len, 0644, &err);
    if (rc == 0) {
        rc = egpu__fs_write_at(dfd, dir, EGPU_ALLOCDIR_LIMITS_FILE, text, strlen(text), 0644, &err);
        if (rc != 0)
            (void)unlinkat(dfd, EGPU_ALLOCDIR_VCUDA_FILE, 0); /* best effort: the rename failed */
    }
    if (rc) {
        rc = egpu_grpc_status_set(st, GRPC_STATUS_INTERNAL, "PreStartContainer: %s", err.msg);
        if (created && egpu__allocdir_remove(cfg->alloc_root, dir) != 0)
            egpu_log(EGPU_LOG_WARN, "allocation dir not removed after a failed write dir=%s", dir);
        goto out;
    }
    if (wrote != NULL)
        record_of(&o, a, c, dir + strlen(cfg->alloc_root) + 1, wrote);
    rc = mark_allocated(cfg, &o, a, c, &patched, &err);
    if (rc) {
        rc = egpu_grpc_status_set(st, GRPC_STATUS_UNAVAILABLE,
                                  "PreStartContainer: pod %s/%s: " EGPU_ANN_ALLOCATED
                                  " not written: %s",
                                  o.ns, o.pod, err.msg);
        goto out;
    }
    if (marked != NULL)
        *marked = patched;
    egpu_log(EGPU_LOG_INFO,
             "limits written pod=%s/%s container=%s core=%u core_limit=%u memory=%u gpus=%u dir=%s "
             "allocated_marked_here=%s",
             o.ns, o.pod, o.container, c->core_pct, core_limit, c->mem_mib, c->ncards, dir,
             patched ? "true" : "false");
out:
    if (dfd >= 0)
        close(dfd);
    egpu_buf_free(&conf);
    free(text);
    json_decref(limits);
    json_decref(pod);
    egpu_free(a);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* The mark right after Allocate                                            */

int egpu__prestart_mark(const struct egpu_prestart_config *cfg,
                        const V1__ListPodResourcesResponse *r, char *const *ids, size_t n,
                        struct egpu_error *err)
{
    struct egpu_grpc_status st = {0};
    struct egpu_kube_status ks;
    struct egpu_assigned *a;
    const struct egpu_assigned_container *c = NULL;
    struct owner o;
    json_t *pod = NULL;
    unsigned core_limit;
    bool wrote = false;
    int rc;

    if (!owner_in(r, ids, n, &o))
        return 0;
    a = egpu_malloc(sizeof(*a));
    if (a == NULL)
        return egpu_error_set(err, -ENOMEM, "out of memory");
    rc = egpu_kube_get(cfg->kube, &egpu_kube_pods, o.ns, o.pod, &pod, &ks, err);
    if (rc == 0 && assigned_of(pod, a, err) != 0)
        rc =
            egpu_error_set(err, -ENOENT, "pod %s/%s has no usable " EGPU_ANN_ASSIGNED, o.ns, o.pod);
    for (uint32_t k = 0; rc == 0 && k < a->ncontainers && c == NULL; k++)
        if (strcmp(a->containers[k].name, o.container) == 0)
            c = &a->containers[k];
    if (rc == 0 && c == NULL)
        rc = egpu_error_set(err, -ENOENT, "pod %s/%s: " EGPU_ANN_ASSIGNED " has no container %s",
                            o.ns, o.pod, o.container);
    /* What PreStartContainer would refuse is not marked: it refuses it then
     * (with its event), and allocated keeps meaning "limits accepted". */
    if (rc == 0 && (check_cards(&o, a, c, ids, n, &st) != 0 ||
                    (c->core_pct < 100 && core_limit_of(pod, &o, c->core_pct, &core_limit, &st))))
        rc = egpu_error_set(err, -EINVAL, "%s", st.msg);
    if (rc == 0)
        rc = mark_allocated(cfg, &o, a, c, &wrote, err);
    if (rc == 0)
        egpu_log(EGPU_LOG_INFO,
                 "marked allocated after Allocate pod=%s/%s container=%s core=%u gpus=%u "
                 "patched=%s",
                 o.ns, o.pod, o.container, c->core_pct, c->ncards, wrote ? "true" : "false");
    json_decref(pod);
    egpu_free(a);
    return rc == 0 ? 1 : rc;
}
