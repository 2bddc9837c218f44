/* agent/container.c - one container's allocation, whichever kubelet
 * protocol asks (container_int.h): the owner of device IDs as the kubelet
 * records it (PodResources List, never guessed), its assignment from the
 * pod (elasticgpu.io/assigned: per container its cards, core % and memory
 * MiB per card), the check that the IDs lie on the assigned card(s), core
 * per card, and then its files and its mark.
 *
 * limits.json goes into the allocation dir (the agent's own, 0755, opened
 * as a directory fd: a random temporary name made with O_EXCL | O_NOFOLLOW,
 * then renameat, so the interposer never reads half a file and no container
 * can plant anything at those names):
 *   {"pod","namespace","container","gpus":[uuids],"core":pct,"memory":mib}
 * and the pod gets elasticgpu.io/allocated (merge patch), a JSON object
 * {"containers":{"<name>":{"gpus":[...],"core":pct,"memory":mib}}} that
 * grows by one container at a time. Each mark reads the pod afresh under
 * one lock, so two never drop each other's container.
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
#include <unistd.h>

#include <jansson.h>

#include "egpu/api.h"
#include "egpu/log.h"
#include "allocdir_int.h"
#include "allocfs_int.h"
#include "container_int.h"

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

bool egpu__container_owner(const V1__ListPodResourcesResponse *r, char *const *ids, size_t n,
                           struct egpu__container_ref *o)
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

bool egpu__container_id_on_card(const char *id, const char *uuid, unsigned *slot)
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

bool egpu__container_is_allocated(const json_t *pod, const char *container)
{
    json_t *doc = allocated_of(pod);
    bool yes =
        doc != NULL && json_object_get(json_object_get(doc, "containers"), container) != NULL;

    json_decref(doc);
    return yes;
}

int egpu__container_assigned(const json_t *pod, struct egpu_assigned *a, struct egpu_error *err)
{
    const json_t *v = json_object_get(
        json_object_get(json_object_get(pod, "metadata"), "annotations"), EGPU_ANN_ASSIGNED);

    if (!json_is_string(v))
        return -ENOENT;
    return egpu_assigned_decode(json_string_value(v), a, err);
}

const struct egpu_assigned_container *egpu__container_find(const struct egpu_assigned *a,
                                                           const char *name)
{
    for (uint32_t k = 0; k < a->ncontainers; k++)
        if (strcmp(a->containers[k].name, name) == 0)
            return &a->containers[k];
    return NULL;
}

int egpu__container_check_ids(const struct egpu__container_ref *o, const struct egpu_assigned *a,
                              const struct egpu_assigned_container *c, char *const *ids, size_t n,
                              struct egpu_error *err)
{
    unsigned count[EGPU_NODE_GPUS_MAX] = {0};
    unsigned slot;

    for (size_t i = 0; i < n; i++) {
        bool on = false;

        for (uint32_t g = 0; g < c->ncards && !on; g++) {
            on = egpu__container_id_on_card(ids[i], a->uuids[c->first_card + g], &slot);
            if (on)
                count[g]++;
        }
        if (!on)
            return egpu_error_set(err, -EINVAL,
                                  "pod %s/%s container %s is assigned %s%s but the kubelet gave "
                                  "device ID %s on another GPU",
                                  o->ns, o->pod, o->container, a->uuids[c->first_card],
                                  c->ncards > 1 ? " and more" : "", ids[i]);
    }
    for (uint32_t g = 0; g < c->ncards; g++)
        if (count[g] != c->core_pct)
            return egpu_error_set(err, -EINVAL,
                                  "pod %s/%s container %s is assigned core %u on %s but the "
                                  "kubelet gave %u device IDs there",
                                  o->ns, o->pod, o->container, c->core_pct,
                                  a->uuids[c->first_card + g], count[g]);
    return 0;
}

int egpu__container_core_limit(const json_t *pod, const struct egpu__container_ref *o,
                               unsigned core, unsigned *out, struct egpu_error *err)
{
    struct egpu_api_pod_annotations pa;
    struct egpu_error perr = {0};

    *out = core;
    if (egpu_api_pod_annotations(json_object_get(json_object_get(pod, "metadata"), "annotations"),
                                 &pa, &perr) != 0)
        return egpu_error_set(err, -EINVAL, "pod %s/%s: %s", o->ns, o->pod, perr.msg);
    if (pa.core_limit == 0)
        return 0;
    if (pa.core_limit < core)
        return egpu_error_set(err, -EINVAL,
                              "pod %s/%s: annotation " EGPU_ANN_CORE_LIMIT
                              " is \"%u\"; allowed: the container's gpu-core (%u) to 100",
                              o->ns, o->pod, pa.core_limit, core);
    *out = pa.core_limit;
    return 0;
}

/* The container's limits as a JSON object (new reference), or NULL. */
static json_t *limits_of(const struct egpu__container_ref *o, const struct egpu_assigned *a,
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

/* vcuda.conf's text for container c (see the file's header), into b. */
static int vcuda_conf_of(const struct egpu__container_ref *o, const struct egpu_assigned *a,
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

/* The record of what was written for container c into the dir name. */
static void record_of(const struct egpu__container_ref *o, const struct egpu_assigned *a,
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

/* Write vcuda.conf, then limits.json, into the open dir dfd (path dir);
 * when the second fails the first goes, so a failed call leaves the dir as
 * it was. The dir is the agent's alone (0755): no container can plant
 * anything at these names. Returns 0 or a negative code with err. */
static int write_files(int dfd, const char *dir, const struct egpu_buf *conf, const char *text,
                       struct egpu_error *err)
{
    int rc =
        egpu__fs_write_at(dfd, dir, EGPU_ALLOCDIR_VCUDA_FILE, conf->data, conf->len, 0644, err);

    if (rc == 0) {
        rc = egpu__fs_write_at(dfd, dir, EGPU_ALLOCDIR_LIMITS_FILE, text, strlen(text), 0644, err);
        if (rc != 0)
            (void)unlinkat(dfd, EGPU_ALLOCDIR_VCUDA_FILE, 0); /* best effort: the rename failed */
    }
    return rc;
}

int egpu__container_write(const struct egpu__container_config *cfg,
                          const struct egpu__container_ref *o, const struct egpu_assigned *a,
                          const struct egpu_assigned_container *c, unsigned core_limit,
                          char *const *ids, size_t n, struct egpu__alloc_limits *wrote, char *dir,
                          size_t len, struct egpu_error *err)
{
    json_t *limits = limits_of(o, a, c, true);
    char *text = limits != NULL ? json_dumps(limits, JSON_COMPACT) : NULL;
    struct egpu_buf conf;
    bool created = false;
    int rc, dfd = -1;

    egpu_buf_init(&conf, 4096);
    if (text == NULL || vcuda_conf_of(o, a, c, core_limit, cfg->ctx_extra_mib, &conf) != 0) {
        rc = egpu_error_set(err, -ENOMEM, "out of memory");
        goto out;
    }
    rc = egpu__allocdir_path(cfg->alloc_root, ids, n, dir, len);
    if (rc)
        egpu_error_set(err, rc, "allocation dir below %s: %s", cfg->alloc_root, egpu_strerror(rc));
    else
        rc =
            egpu__allocdir_open(cfg->alloc_root, dir, true, c->core_pct < 100, &created, &dfd, err);
    if (rc)
        goto out;
    rc = write_files(dfd, dir, &conf, text, err);
    if (rc) {
        if (created && egpu__allocdir_remove(cfg->alloc_root, dir) != 0)
            egpu_log(EGPU_LOG_WARN, "allocation dir not removed after a failed write dir=%s", dir);
        goto out;
    }
    if (wrote != NULL)
        record_of(o, a, c, dir + strlen(cfg->alloc_root) + 1, wrote);
out:
    if (dfd >= 0)
        close(dfd);
    egpu_buf_free(&conf);
    free(text);
    json_decref(limits);
    return rc;
}

/* Merge-patch elasticgpu.io/allocated of pod with this container added.
 * Returns 0 (*wrote says whether a patch was needed: false when the
 * container is there with the same limits), or a negative code with err. */
static int patch_allocated(struct egpu_kube *kube, const json_t *pod,
                           const struct egpu__container_ref *o, const struct egpu_assigned *a,
                           const struct egpu_assigned_container *c, bool *wrote,
                           struct egpu_error *err)
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

int egpu__container_mark(const struct egpu__container_config *cfg,
                         const struct egpu__container_ref *o, const struct egpu_assigned *a,
                         const struct egpu_assigned_container *c, bool *wrote,
                         struct egpu_error *err)
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
