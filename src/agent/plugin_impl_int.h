/* agent/plugin_impl_int.h - what the files of the device plugin share,
 * private to them: the plugin object, the device-ID helpers and each verb's
 * gRPC handler, registered by plugin.c.
 *
 *   plugin.c     the object, its life cycle, kubelet registration,
 *                GetDevicePluginOptions and PreStartContainer's handler
 *   listwatch.c  ListAndWatch and the health updates sent on it
 *   preferred.c  GetPreferredAllocation
 *   allocate.c   Allocate
 *
 * PreStartContainer's API-server side is prestart.c (prestart_int.h).
 * What they use and a DRA kubelet plugin would share has headers of its
 * own: container_int.h (one container's allocation: owner, assignment and
 * checks, its files, the allocated mark), allocdir_int.h (the allocation
 * dirs), record_int.h (the record of what was written there),
 * podresources_int.h (PodResources List), cleanup_int.h (removing the dirs
 * no container holds), marker_int.h (the mark after Allocate), pb_int.h
 * (the protobuf-c glue). What main.c, metrics.c and health.c see of the
 * plugin is plugin_int.h.
 */
#ifndef EGPU_AGENT_PLUGIN_IMPL_INT_H
#define EGPU_AGENT_PLUGIN_IMPL_INT_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "egpu/grpc.h"
#include "marker_int.h"
#include "pb_int.h"
#include "plugin_int.h"
#include "record_int.h"

#define EGPU_PLUGIN_STREAMS_MAX 16 /* ListAndWatch streams open at once (the kubelet keeps one) */

struct egpu_plugin {
    char *dir;
    char *alloc_root;
    char *interposer;
    char *pod_resources;
    egpu__podres_list_fn podres_list; /* NULL: egpu__podres_list */
    char *node;
    char socket[PATH_MAX];
    char kubelet[PATH_MAX];
    struct egpu_gpus *gpus;
    struct egpu_kube *kube;
    struct egpu_grpc_server *srv;
    enum egpu_plugin_strategy strategy;
    unsigned ctx_extra_mib; /* for vcuda.conf (PreStartContainer) */
    bool running;
    pthread_mutex_t alloc_lock;     /* Allocate's mkdir vs. the cleanup's removal */
    pthread_mutex_t allocated_lock; /* each read-and-patch of elasticgpu.io/allocated */
    struct egpu__marker *marker;    /* marks allocated after Allocate; NULL without kube */
    bool cleanup_failed;            /* the last cleanup's PodResources List failed */

    struct egpu__record rec; /* what PreStartContainer wrote, per dir */

    pthread_mutex_t lock; /* guards what follows */
    struct egpu_gpu_info cards[EGPU_NODE_GPUS_MAX];
    size_t ncards;
    struct egpu_grpc_stream *streams[EGPU_PLUGIN_STREAMS_MAX];
    size_t nstreams;
    struct egpu_plugin_stats stats;
};

/* Device IDs (plugin.c) ---------------------------------------------------- */

/* The card (index into cards) and slot of id. Returns 0, EGPU_ESYNTAX (not
 * "<uuid>-<nn>") or -ENOENT (no such card); st says which ID and why. */
int egpu__plugin_parse_id(const struct egpu_gpu_info *cards, size_t ncards, const char *id,
                          size_t *card, unsigned *slot, struct egpu_grpc_status *st);

/* Copy the card list under the lock into cards (room for
 * EGPU_NODE_GPUS_MAX). Returns the count. */
size_t egpu__plugin_snapshot(struct egpu_plugin *p, struct egpu_gpu_info *cards);

/* Per-card counts of ids (n of them) into count[] (EGPU_NODE_GPUS_MAX),
 * rejecting malformed, unknown and repeated IDs. Returns 0 or a negative
 * code with st set. */
int egpu__plugin_count_ids(const struct egpu_gpu_info *cards, size_t ncards, char *const *ids,
                           size_t n, unsigned *count, struct egpu_grpc_status *st) EGPU_MUST_CHECK;

/* The verbs' handlers (egpu_grpc_server_unary/_stream callbacks; data is the
 * plugin) ---------------------------------------------------------------- */

int egpu__plugin_on_list_and_watch(void *data, const struct egpu_grpc_request *req,
                                   struct egpu_grpc_stream *stream, struct egpu_grpc_status *st);
void egpu__plugin_on_stream_close(void *data, struct egpu_grpc_stream *stream, int reason);
int egpu__plugin_on_preferred(void *data, const struct egpu_grpc_request *req,
                              struct egpu_buf *reply, struct egpu_grpc_status *st);
int egpu__plugin_on_allocate(void *data, const struct egpu_grpc_request *req,
                             struct egpu_buf *reply, struct egpu_grpc_status *st);

#endif /* EGPU_AGENT_PLUGIN_IMPL_INT_H */
