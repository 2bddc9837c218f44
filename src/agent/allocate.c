/* agent/allocate.c - Allocate: what the container runtime gives a container
 * for its device IDs.
 *
 * Derives the card(s) from the IDs (an unknown, malformed or repeated ID is
 * INVALID_ARGUMENT naming it; an unhealthy card FAILED_PRECONDITION) and
 * answers the cards as --device-list-strategy says (NVIDIA_VISIBLE_DEVICES,
 * CDI devices nvidia.com/gpu=<uuid>, or DeviceSpecs of /dev/nvidia<minor>
 * and the control nodes), EGPU_ALLOC_DIR and a read-only mount of the
 * allocation dir <alloc_root>/<hash of the sorted IDs> at /etc/elastic-gpu
 * (allocdir.c). A container sharing a card (fewer than 100 IDs on it) also
 * gets the writable shared/ subdir, the interposer and /etc/ld.so.preload
 * naming it, so unsetting LD_PRELOAD cannot escape the limits.
 *
 * After an Allocate that succeeded, with an API server, marker.c's thread
 * learns the owner of the IDs from PodResources and marks it
 * elasticgpu.io/allocated (the kubelet records the IDs at admission;
 * PreStartContainer comes only after the image pull). Allocate does not
 * wait for it.
 *
 * A dir this call created is removed again when writing into it fails, so a
 * failed Allocate leaves nothing half done.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "allocdir_int.h"
#include "allocfs_int.h"
#include "deviceplugin/v1beta1/api.pb-c.h"
#include "egpu/log.h"
#include "plugin_impl_int.h"

#define CTL_NODES    3                    /* nvidiactl, nvidia-uvm, nvidia-uvm-tools */
#define CDI_NAME_MAX (EGPU_UUID_MAX + 16) /* "nvidia.com/gpu=<uuid>" */
#define DEV_NODE_MAX 32                   /* "/dev/nvidia<minor>" */

/* What one container's answer points into. */
struct alloc_out {
    char uuids[EGPU_NODE_GPUS_MAX * EGPU_UUID_MAX];
    char cdi_names[EGPU_NODE_GPUS_MAX][CDI_NAME_MAX];
    char dev_paths[EGPU_NODE_GPUS_MAX][DEV_NODE_MAX];
    V1beta1__CDIDevice cdi[EGPU_NODE_GPUS_MAX];
    V1beta1__CDIDevice *cdip[EGPU_NODE_GPUS_MAX];
    V1beta1__DeviceSpec dev[EGPU_NODE_GPUS_MAX + CTL_NODES];
    V1beta1__DeviceSpec *devp[EGPU_NODE_GPUS_MAX + CTL_NODES];
    char dir[PATH_MAX];
    char preload[PATH_MAX + 32];
    char shared_host[PATH_MAX + 32];
    V1beta1__ContainerAllocateResponse__EnvsEntry env[2];
    V1beta1__ContainerAllocateResponse__EnvsEntry *envp[2];
    V1beta1__Mount mount[4];
    V1beta1__Mount *mountp[4];
    V1beta1__ContainerAllocateResponse resp;
};

/* --device-list-strategy cdi: "nvidia.com/gpu=<uuid>" per card in use. */
static void cdi_devices(const struct egpu_gpu_info *cards, size_t ncards, const unsigned *count,
                        struct alloc_out *o)
{
    size_t n = 0;

    for (size_t i = 0; i < ncards; i++) {
        if (count[i] == 0)
            continue;
        snprintf(o->cdi_names[n], CDI_NAME_MAX, "nvidia.com/gpu=%s", cards[i].uuid);
        o->cdi[n] = (V1beta1__CDIDevice)V1BETA1__CDIDEVICE__INIT;
        o->cdi[n].name = o->cdi_names[n];
        o->cdip[n] = &o->cdi[n];
        n++;
    }
    o->resp.n_cdi_devices = n;
    o->resp.cdi_devices = o->cdip;
}

/* --device-list-strategy device-nodes: /dev/nvidia<minor> per card in use
 * and the control nodes, rw, at the same path in the container. */
static void device_nodes(const struct egpu_gpu_info *cards, size_t ncards, const unsigned *count,
                         struct alloc_out *o)
{
    static char ctl[] = EGPU_ALLOCDIR_DEV_CTL, uvm[] = EGPU_ALLOCDIR_DEV_UVM,
                uvm_tools[] = EGPU_ALLOCDIR_DEV_UVM_TOOLS, rw[] = "rw";
    char *ctl_paths[CTL_NODES] = {ctl, uvm, uvm_tools};
    size_t n = 0;

    for (size_t i = 0; i < ncards + CTL_NODES; i++) {
        char *path;

        if (i < ncards) {
            if (count[i] == 0)
                continue;
            snprintf(o->dev_paths[i], DEV_NODE_MAX, "/dev/nvidia%" PRIu32, cards[i].minor);
            path = o->dev_paths[i];
        } else
            path = ctl_paths[i - ncards];
        o->dev[n] = (V1beta1__DeviceSpec)V1BETA1__DEVICE_SPEC__INIT;
        o->dev[n].container_path = path;
        o->dev[n].host_path = path;
        o->dev[n].permissions = rw;
        o->devp[n] = &o->dev[n];
        n++;
    }
    o->resp.n_devices = n;
    o->resp.devices = o->devp;
}

static int allocate_one(struct egpu_plugin *p, const struct egpu_gpu_info *cards, size_t ncards,
                        const V1beta1__ContainerAllocateRequest *c, struct alloc_out *o,
                        struct egpu_grpc_status *st)
{
    static char env_visible[] = "NVIDIA_VISIBLE_DEVICES", env_dir[] = EGPU_ALLOCDIR_ENV_DIR,
                container_dir[] = EGPU_ALLOCDIR_CONTAINER_DIR,
                preload_path[] = EGPU_ALLOCDIR_CONTAINER_PRELOAD,
                shared_path[] = EGPU_ALLOCDIR_CONTAINER_DIR "/" EGPU_ALLOCDIR_SHARED_DIR;
    unsigned count[EGPU_NODE_GPUS_MAX];
    struct egpu_error err = {0};
    bool shared = false, created = false;
    size_t used = 0;
    char text[PATH_MAX + 2];
    int rc, dfd = -1;

    if (c->n_devices_ids == 0)
        return egpu_grpc_status_set(st, GRPC_STATUS_INVALID_ARGUMENT,
                                    "Allocate: a container request without device IDs");
    rc = egpu__plugin_count_ids(cards, ncards, c->devices_ids, c->n_devices_ids, count, st);
    if (rc)
        return rc;
    for (size_t i = 0; i < ncards; i++) {
        int w;

        if (count[i] == 0)
            continue;
        if (!cards[i].healthy)
            return egpu_grpc_status_set(st, GRPC_STATUS_FAILED_PRECONDITION,
                                        "Allocate: GPU %s is unhealthy (%s)", cards[i].uuid,
                                        cards[i].reason);
        shared = shared || count[i] < EGPU_PLUGIN_IDS_PER_CARD;
        w = snprintf(o->uuids + used, sizeof(o->uuids) - used, "%s%s", used ? "," : "",
                     cards[i].uuid);
        used += (size_t)w;
    }
    rc = egpu__allocdir_path(p->alloc_root, c->devices_ids, c->n_devices_ids, o->dir,
                             sizeof(o->dir));
    if (rc)
        return egpu_grpc_status_set(st, GRPC_STATUS_INTERNAL,
                                    "Allocate: allocation dir below %s: %s", p->alloc_root,
                                    egpu_strerror(rc));
    /* Under alloc_lock: the cleanup never sees the dir between its creation
     * and the fresh mtime that keeps it (see egpu__plugin_cleanup). The dir
     * is the agent's (0755); with a shared card, its subdir shared/ (01777,
     * sticky like /tmp) is where the container's processes, whatever their
     * user, create the interposer's regions. */
    pthread_mutex_lock(&p->alloc_lock);
    rc = egpu__allocdir_open(p->alloc_root, o->dir, true, shared, &created, &dfd, &err);
    if (rc == 0 && !created && futimens(dfd, NULL) != 0)
        rc = egpu_error_errno(&err, "allocation dir %s: touch", o->dir);
    if (rc == 0 && shared) {
        snprintf(text, sizeof(text), "%s\n", p->interposer);
        rc = egpu__fs_write_at(dfd, o->dir, EGPU_ALLOCDIR_PRELOAD_FILE, text, strlen(text), 0644,
                               &err);
        snprintf(o->preload, sizeof(o->preload), "%s/%s", o->dir, EGPU_ALLOCDIR_PRELOAD_FILE);
        snprintf(o->shared_host, sizeof(o->shared_host), "%s/%s", o->dir, EGPU_ALLOCDIR_SHARED_DIR);
    }
    if (dfd >= 0)
        close(dfd);
    if (rc && created && egpu__allocdir_remove(p->alloc_root, o->dir) != 0)
        egpu_log(EGPU_LOG_WARN, "allocation dir not removed after a failed Allocate dir=%s",
                 o->dir);
    pthread_mutex_unlock(&p->alloc_lock);
    if (rc)
        return egpu_grpc_status_set(st, GRPC_STATUS_INTERNAL, "Allocate: %s", err.msg);
    o->resp = (V1beta1__ContainerAllocateResponse)V1BETA1__CONTAINER_ALLOCATE_RESPONSE__INIT;
    for (int i = 0; i < 2; i++) {
        o->env[i] = (V1beta1__ContainerAllocateResponse__EnvsEntry)
            V1BETA1__CONTAINER_ALLOCATE_RESPONSE__ENVS_ENTRY__INIT;
        o->envp[i] = &o->env[i];
    }
    o->env[0].key = env_dir;
    o->env[0].value = container_dir;
    o->env[1].key = env_visible;
    o->env[1].value = o->uuids;
    o->resp.n_envs = p->strategy == EGPU_PLUGIN_ENVVAR ? 2 : 1;
    o->resp.envs = o->envp;
    if (p->strategy == EGPU_PLUGIN_CDI)
        cdi_devices(cards, ncards, count, o);
    else if (p->strategy == EGPU_PLUGIN_DEVICE_NODES)
        device_nodes(cards, ncards, count, o);
    for (int i = 0; i < 4; i++) {
        o->mount[i] = (V1beta1__Mount)V1BETA1__MOUNT__INIT;
        o->mountp[i] = &o->mount[i];
    }
    /* The allocation dir, read-only: what the agent wrote for the container
     * (limits.json, vcuda.conf) cannot be changed from inside. With a shared
     * card, its subdir shared/ read-write over it (container runtimes mount
     * a parent before its children, and the mount point exists inside the
     * read-only parent): the interposer's regions live there. */
    o->mount[0].container_path = container_dir;
    o->mount[0].host_path = o->dir;
    o->mount[0].read_only = 1;
    o->resp.n_mounts = 1;
    if (shared) {
        o->mount[1].container_path = shared_path;
        o->mount[1].host_path = o->shared_host;
        o->mount[1].read_only = 0;
        o->mount[2].container_path = p->interposer;
        o->mount[2].host_path = p->interposer;
        o->mount[2].read_only = 1;
        o->mount[3].container_path = preload_path;
        o->mount[3].host_path = o->preload;
        o->mount[3].read_only = 1;
        o->resp.n_mounts = 4;
    }
    o->resp.mounts = o->mountp;
    egpu_log(EGPU_LOG_INFO, "allocated ids=%zu gpus=%s shared=%s dir=%s", c->n_devices_ids,
             o->uuids, shared ? "true" : "false", o->dir);
    return 0;
}

int egpu__plugin_on_allocate(void *data, const struct egpu_grpc_request *req,
                             struct egpu_buf *reply, struct egpu_grpc_status *st)
{
    struct egpu_plugin *p = data;
    V1beta1__AllocateRequest *r;
    V1beta1__AllocateResponse resp = V1BETA1__ALLOCATE_RESPONSE__INIT;
    struct egpu_gpu_info *cards = egpu_calloc(EGPU_NODE_GPUS_MAX, sizeof(*cards));
    struct alloc_out *outs = NULL;
    V1beta1__ContainerAllocateResponse **ptrs = NULL;
    size_t ncards, n = 0;
    int rc = 0;

    r = (V1beta1__AllocateRequest *)egpu__pb_unpack(&v1beta1__allocate_request__descriptor, req);
    if (cards == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    if (r == NULL) {
        rc = egpu_grpc_status_set(st, GRPC_STATUS_INVALID_ARGUMENT,
                                  "Allocate: request is not an AllocateRequest");
        goto out;
    }
    if (r->n_container_requests == 0) {
        rc = egpu_grpc_status_set(st, GRPC_STATUS_INVALID_ARGUMENT,
                                  "Allocate: no container_requests");
        goto out;
    }
    n = r->n_container_requests;
    ncards = egpu__plugin_snapshot(p, cards);
    outs = egpu_calloc(n, sizeof(*outs));
    ptrs = egpu_calloc(n, sizeof(*ptrs));
    if (outs == NULL || ptrs == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; rc == 0 && i < n; i++) {
        rc = allocate_one(p, cards, ncards, r->container_requests[i], &outs[i], st);
        ptrs[i] = &outs[i].resp;
    }
    if (rc == 0) {
        resp.n_container_responses = n;
        resp.container_responses = ptrs;
        rc = egpu__pb_pack(&resp.base, reply);
    }
    /* The kubelet records these IDs as the container's once this returns:
     * the marker's thread learns the owner from PodResources and marks it
     * allocated then, not at PreStartContainer (after the image pull). */
    for (size_t i = 0; rc == 0 && i < n; i++)
        egpu__marker_add(p->marker, r->container_requests[i]->devices_ids,
                         r->container_requests[i]->n_devices_ids);
out:
    pthread_mutex_lock(&p->lock);
    if (rc == 0)
        p->stats.allocations += n;
    else
        p->stats.alloc_errors++;
    pthread_mutex_unlock(&p->lock);
    if (rc)
        egpu_log(EGPU_LOG_WARN, "Allocate refused error=\"%s\"",
                 st->msg[0] ? st->msg : egpu_strerror(rc));
    egpu_free(ptrs);
    egpu_free(outs);
    egpu_free(cards);
    if (r != NULL)
        egpu__pb_unpacked_free(&r->base);
    return rc;
}
