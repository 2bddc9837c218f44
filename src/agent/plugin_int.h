/* agent/plugin_int.h - the kubelet device plugin of egpu-agent (plugin.c and
 * the files plugin_impl_int.h lists: one per verb),
 * private to src/agent.
 *
 * The plugin advertises elasticgpu.io/gpu-core as 100 device IDs per card,
 * "<GPU UUID>-<nn>" with nn 00..99: a container asking gpu-core N gets N
 * IDs, so 30 IDs on one card is 30 % of it and 200 IDs are two whole cards.
 * It serves v1beta1.DevicePlugin on <dir>/elasticgpu.sock and registers
 * with <dir>/kubelet.sock. Health comes from the GPU backend: every card is
 * listed, the devices of an unhealthy card as "Unhealthy".
 *
 * Threads: the gRPC handlers run on the server's threads; egpu__plugin_refresh
 * may be called from any thread (the health watcher); restart and register
 * from one thread (main). A lock guards the card list and the open
 * ListAndWatch streams.
 */
#ifndef EGPU_AGENT_PLUGIN_INT_H
#define EGPU_AGENT_PLUGIN_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "egpu/agent.h"
#include "egpu/core.h"
#include "egpu/api.h"
#include "podresources_int.h"
#include "record_int.h"

#define EGPU_PLUGIN_SOCKET        "elasticgpu.sock" /* our endpoint in the plugin dir */
#define EGPU_PLUGIN_KUBELET       "kubelet.sock"    /* the kubelet's Registration socket */
#define EGPU_PLUGIN_IDS_PER_CARD  100               /* one ID = 1 % of a card */
#define EGPU_PLUGIN_ID_MAX        64                /* device ID incl. NUL (kubelet: 63) */
#define EGPU_PLUGIN_INTERPOSER    "/usr/local/lib/elastic-gpu/libegpu-vcuda.so"
#define EGPU_PLUGIN_CTX_EXTRA_MAX 65536 /* MiB: EGPU_VCUDA_CONTEXT_EXTRA_MIB's range */

/* How Allocate names a container's cards (--device-list-strategy). */
enum egpu_plugin_strategy {
    EGPU_PLUGIN_ENVVAR,      /* NVIDIA_VISIBLE_DEVICES=<uuid>[,<uuid>...] */
    EGPU_PLUGIN_CDI,         /* cdi_devices "nvidia.com/gpu=<uuid>" */
    EGPU_PLUGIN_DEVICE_NODES /* DeviceSpecs /dev/nvidia<minor> and the control nodes */
};

/* Settings; strings are copied by egpu__plugin_new. */
struct egpu_plugin_config {
    const char *dir;           /* device-plugin dir, e.g. /var/lib/kubelet/device-plugins */
    const char *alloc_root;    /* per-allocation dirs go below it */
    const char *interposer;    /* host path of libegpu-vcuda.so (mounted at the same path) */
    const char *pod_resources; /* PodResources socket (PreStartContainer) */
    const char *node;          /* this node's name (pods of the node) */
    struct egpu_gpus *gpus;    /* borrowed; must outlive the plugin */
    struct egpu_kube *kube;    /* borrowed, may be NULL (--no-api: no pod lookups) */
    enum egpu_plugin_strategy strategy;
    unsigned ctx_extra_mib; /* vcuda.conf's EGPU_VCUDA_CONTEXT_EXTRA_MIB, MiB; 0: not written */
    /* the PodResources List of PreStartContainer, the marker and the
     * cleanup; NULL: egpu__podres_list on pod_resources */
    egpu__podres_list_fn podres_list;
};

struct egpu_plugin; /* opaque */

/* Counters for /metrics. */
struct egpu_plugin_stats {
    unsigned long allocations;     /* Allocate container requests answered OK */
    unsigned long alloc_errors;    /* refused */
    unsigned long prestarts;       /* PreStartContainer answered OK */
    unsigned long registrations;   /* successful Register calls */
    unsigned long mismatches;      /* PreStartContainer: IDs on other cards than assigned */
    unsigned long marked_allocate; /* containers marked allocated right after Allocate */
    unsigned long marked_prestart; /* containers PreStartContainer had to mark itself */
    size_t cards;                  /* cards listed */
    size_t healthy;                /* of which healthy */
};

/* Make a plugin (not serving yet) and list the cards once. Returns 0,
 * -ENAMETOOLONG (a socket path over 107 bytes), -ENOMEM or what
 * egpu_gpus_list returns; *out only on success. */
int egpu__plugin_new(const struct egpu_plugin_config *cfg, struct egpu_plugin **out,
                     struct egpu_error *err) EGPU_MUST_CHECK;

/* Stop serving and free. NULL is a no-op. */
void egpu__plugin_free(struct egpu_plugin *p);

/* (Re)start the gRPC server on <dir>/elasticgpu.sock: stops it first when it
 * runs (its ListAndWatch streams end), so a socket the kubelet deleted is
 * created again. Returns 0 or what egpu_grpc_server_start returns. */
int egpu__plugin_serve(struct egpu_plugin *p, struct egpu_error *err) EGPU_MUST_CHECK;

/* Register with <dir>/kubelet.sock (v1beta1, elasticgpu.sock,
 * elasticgpu.io/gpu-core, both options on). Returns 0 or what
 * egpu_grpc_call returns (-EAGAIN: nobody listens yet). */
int egpu__plugin_register(struct egpu_plugin *p, struct egpu_error *err) EGPU_MUST_CHECK;

/* List the cards again; when health or the card set changed, send the new
 * full device list on every open ListAndWatch stream. *changed (may be
 * NULL) says whether it did. Returns 0 or what egpu_gpus_list returns. */
int egpu__plugin_refresh(struct egpu_plugin *p, bool *changed,
                         struct egpu_error *err) EGPU_MUST_CHECK;

/* Whether our socket file is still there (the kubelet's restart deletes it). */
bool egpu__plugin_socket_exists(const struct egpu_plugin *p);

/* A copy of the card list (at most cap cards) into out. Returns the count. */
size_t egpu__plugin_cards(struct egpu_plugin *p, struct egpu_gpu_info *out, size_t cap);

/* A copy of the counters. */
void egpu__plugin_stats(struct egpu_plugin *p, struct egpu_plugin_stats *out);

/* The device ID of slot (0..99) of the card uuid into out (len >= 64).
 * Returns 0 or -ENAMETOOLONG. */
int egpu__plugin_device_id(const char *uuid, unsigned slot, char *out, size_t len) EGPU_MUST_CHECK;

/* Call cb for every entry of the plugin's record of what PreStartContainer
 * wrote (record_int.h: egpu__record_each, same rules). */
void egpu__plugin_each_limits(struct egpu_plugin *p, egpu__record_cb cb, void *data);

/* The cleanup (cleanup_int.h: egpu__cleanup_run) of the plugin's
 * allocation dirs, against concurrent Allocate calls, dropping removed
 * dirs from its record: the dirs no container holds any more and not
 * modified within grace_s seconds go. *removed (may be NULL) gets the
 * count. Returns 0 or what egpu__cleanup_run returns. Main thread only. */
int egpu__plugin_cleanup(struct egpu_plugin *p, long grace_s, unsigned *removed,
                         struct egpu_error *err) EGPU_MUST_CHECK;

#endif /* EGPU_AGENT_PLUGIN_INT_H */
