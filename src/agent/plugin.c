/* agent/plugin.c - the kubelet device plugin for elasticgpu.io/gpu-core:
 * the plugin object, its life cycle and its registration with the kubelet.
 *
 * Serves v1beta1.DevicePlugin on <dir>/elasticgpu.sock (gRPC,
 * src/net/grpc_server.c) and registers with <dir>/kubelet.sock (DESIGN.md
 * section 2.3). Each verb has its file (the list is in plugin_impl_int.h):
 *   - GetDevicePluginOptions (here): both optional calls wanted;
 *   - ListAndWatch (listwatch.c): 100 IDs "<uuid>-<nn>" per card, again on
 *     every health change;
 *   - GetPreferredAllocation (preferred.c);
 *   - Allocate (allocate.c);
 *   - PreStartContainer (its handler here): checks the IDs; with an API
 *     server prestart.c then finds the owner and container.c checks the
 *     cards and writes limits.json (and marks the container allocated when
 *     marker.c did not).
 * A kubelet restart wipes the socket dir: main.c sees it (inotify) and calls
 * egpu__plugin_serve and egpu__plugin_register again.
 *
 * Also here: the device-ID helpers every verb uses (errors the kubelet
 * shows in pod events name the offending ID), and the plugin's record and
 * cleanup (record.c, cleanup.c) on its allocation dirs.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "deviceplugin/v1beta1/api.pb-c.h"
#include "egpu/log.h"
#include "egpu/api.h"
#include "cleanup_int.h"
#include "plugin_impl_int.h"
#include "prestart_int.h"

/* ------------------------------------------------------------------------ */
/* Device IDs                                                               */

int egpu__plugin_device_id(const char *uuid, unsigned slot, char *out, size_t len)
{
    int n;

    if (slot >= EGPU_PLUGIN_IDS_PER_CARD)
        return -EINVAL;
    n = snprintf(out, len, "%s-%02u", uuid, slot);
    if (n < 0 || (size_t)n >= len || n >= EGPU_PLUGIN_ID_MAX)
        return -ENAMETOOLONG;
    return 0;
}

/* The card (index into cards) and slot of id. Returns 0, EGPU_ESYNTAX (not
 * "<uuid>-<nn>") or -ENOENT (no such card); st says which ID and why. */
int egpu__plugin_parse_id(const struct egpu_gpu_info *cards, size_t ncards, const char *id,
                          size_t *card, unsigned *slot, struct egpu_grpc_status *st)
{
    size_t len = strlen(id), ulen;

    if (len < 4 || len >= EGPU_PLUGIN_ID_MAX || id[len - 3] != '-' || id[len - 2] < '0' ||
        id[len - 2] > '9' || id[len - 1] < '0' || id[len - 1] > '9') {
        egpu_grpc_status_set(st, GRPC_STATUS_INVALID_ARGUMENT,
                             "device ID \"%.64s\" is malformed: expected <GPU UUID>-<00..99>", id);
        return EGPU_ESYNTAX;
    }
    ulen = len - 3;
    for (size_t i = 0; i < ncards; i++) {
        if (cards[i].uuid[0] != '\0' && strlen(cards[i].uuid) == ulen &&
            memcmp(cards[i].uuid, id, ulen) == 0) {
            *card = i;
            *slot = (unsigned)((id[len - 2] - '0') * 10 + (id[len - 1] - '0'));
            return 0;
        }
    }
    egpu_grpc_status_set(st, GRPC_STATUS_INVALID_ARGUMENT,
                         "device ID \"%.64s\" names no GPU of this node (unknown UUID %.*s)", id,
                         (int)ulen, id);
    return -ENOENT;
}

/* Copy the card list under the lock. */
size_t egpu__plugin_snapshot(struct egpu_plugin *p, struct egpu_gpu_info *cards)
{
    size_t n;

    pthread_mutex_lock(&p->lock);
    n = p->ncards;
    memcpy(cards, p->cards, n * sizeof(cards[0]));
    pthread_mutex_unlock(&p->lock);
    return n;
}

/* Per-card counts of ids (n of them) into count[], rejecting malformed,
 * unknown and repeated IDs. Returns 0 or a negative code with st set. */
int egpu__plugin_count_ids(const struct egpu_gpu_info *cards, size_t ncards, char *const *ids,
                           size_t n, unsigned *count, struct egpu_grpc_status *st)
{
    uint64_t seen[EGPU_NODE_GPUS_MAX][(EGPU_PLUGIN_IDS_PER_CARD + 63) / 64];

    memset(seen, 0, sizeof(seen));
    memset(count, 0, EGPU_NODE_GPUS_MAX * sizeof(count[0]));
    for (size_t i = 0; i < n; i++) {
        size_t card;
        unsigned slot;
        int rc = egpu__plugin_parse_id(cards, ncards, ids[i], &card, &slot, st);

        if (rc)
            return rc;
        if (seen[card][slot / 64] & (UINT64_C(1) << (slot % 64)))
            return egpu_grpc_status_set(st, GRPC_STATUS_INVALID_ARGUMENT,
                                        "device ID \"%s\" is given twice", ids[i]);
        seen[card][slot / 64] |= UINT64_C(1) << (slot % 64);
        count[card]++;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* GetDevicePluginOptions                                                   */

static int on_options(void *data, const struct egpu_grpc_request *req, struct egpu_buf *reply,
                      struct egpu_grpc_status *st)
{
    V1beta1__DevicePluginOptions o = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;

    (void)data;
    (void)req;
    (void)st;
    o.pre_start_required = 1;
    o.get_preferred_allocation_available = 1;
    return egpu__pb_pack(&o.base, reply);
}

/* ------------------------------------------------------------------------ */
/* PreStartContainer                                                        */

/* What PreStartContainer and the allocation marker need of the plugin (borrowed: p outlives
 * both). */
static struct egpu__container_config container_config(struct egpu_plugin *p)
{
    return (struct egpu__container_config){.kube = p->kube,
                                           .node = p->node,
                                           .pod_resources = p->pod_resources,
                                           .podres_list = p->podres_list,
                                           .alloc_root = p->alloc_root,
                                           .ctx_extra_mib = p->ctx_extra_mib,
                                           .allocated_lock = &p->allocated_lock};
}

static int on_prestart(void *data, const struct egpu_grpc_request *req, struct egpu_buf *reply,
                       struct egpu_grpc_status *st)
{
    struct egpu_plugin *p = data;
    V1beta1__PreStartContainerRequest *r;
    V1beta1__PreStartContainerResponse resp = V1BETA1__PRE_START_CONTAINER_RESPONSE__INIT;
    struct egpu_gpu_info *cards = egpu_calloc(EGPU_NODE_GPUS_MAX, sizeof(*cards));
    unsigned count[EGPU_NODE_GPUS_MAX];
    struct egpu__alloc_limits *wrote = egpu_calloc(1, sizeof(*wrote));
    size_t ncards;
    bool mismatch = false, marked = false;
    int rc = 0;

    r = (V1beta1__PreStartContainerRequest *)egpu__pb_unpack(
        &v1beta1__pre_start_container_request__descriptor, req);
    if (cards == NULL || wrote == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    if (r == NULL) {
        rc = egpu_grpc_status_set(st, GRPC_STATUS_INVALID_ARGUMENT,
                                  "PreStartContainer: request is not a PreStartContainerRequest");
        goto out;
    }
    ncards = egpu__plugin_snapshot(p, cards);
    if (r->n_devices_ids == 0) {
        rc = egpu_grpc_status_set(st, GRPC_STATUS_INVALID_ARGUMENT,
                                  "PreStartContainer: no device IDs");
        goto out;
    }
    rc = egpu__plugin_count_ids(cards, ncards, r->devices_ids, r->n_devices_ids, count, st);
    if (rc == 0 && p->kube != NULL) {
        struct egpu__container_config pc = container_config(p);

        rc = egpu__prestart_run(&pc, cards, ncards, r->devices_ids, r->n_devices_ids, &mismatch,
                                &marked, wrote, st);
        /* The files are on disk even when the API server then failed: the
         * record says what is there. */
        if (wrote->dir[0] != '\0' && egpu__record_put(&p->rec, wrote) != 0)
            egpu_log(EGPU_LOG_WARN, "allocation not recorded (out of memory) pod=%s/%s dir=%s",
                     wrote->ns, wrote->pod, wrote->dir);
    }
    if (rc == 0)
        rc = egpu__pb_pack(&resp.base, reply);
out:
    if (mismatch) {
        pthread_mutex_lock(&p->lock);
        p->stats.mismatches++;
        pthread_mutex_unlock(&p->lock);
    }
    if (rc)
        egpu_log(EGPU_LOG_WARN, "PreStartContainer refused error=\"%s\"",
                 st->msg[0] ? st->msg : egpu_strerror(rc));
    else {
        pthread_mutex_lock(&p->lock);
        p->stats.prestarts++;
        p->stats.marked_prestart += marked;
        pthread_mutex_unlock(&p->lock);
    }
    egpu_free(wrote);
    egpu_free(cards);
    if (r != NULL)
        egpu__pb_unpacked_free(&r->base);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Life cycle                                                               */

static char *dup_or(const char *s, const char *def)
{
    return egpu_strdup(s != NULL ? s : def);
}

int egpu__plugin_new(const struct egpu_plugin_config *cfg, struct egpu_plugin **out,
                     struct egpu_error *err)
{
    struct egpu_plugin *p = egpu_calloc(1, sizeof(*p));
    int rc, w1, w2;

    if (p == NULL)
        return egpu_error_set(err, -ENOMEM, "device plugin: out of memory");
    pthread_mutex_init(&p->lock, NULL);
    pthread_mutex_init(&p->alloc_lock, NULL);
    pthread_mutex_init(&p->allocated_lock, NULL);
    egpu__record_init(&p->rec);
    p->gpus = cfg->gpus;
    p->kube = cfg->kube;
    p->strategy = cfg->strategy;
    p->ctx_extra_mib = cfg->ctx_extra_mib;
    p->podres_list = cfg->podres_list;
    p->dir = dup_or(cfg->dir, "/var/lib/kubelet/device-plugins");
    p->alloc_root = dup_or(cfg->alloc_root, "/var/lib/elastic-gpu/alloc");
    p->interposer = dup_or(cfg->interposer, EGPU_PLUGIN_INTERPOSER);
    p->pod_resources = dup_or(cfg->pod_resources, "/var/lib/kubelet/pod-resources/kubelet.sock");
    p->node = dup_or(cfg->node, "");
    if (p->dir == NULL || p->alloc_root == NULL || p->interposer == NULL ||
        p->pod_resources == NULL || p->node == NULL) {
        egpu__plugin_free(p);
        return egpu_error_set(err, -ENOMEM, "device plugin: out of memory");
    }
    w1 = snprintf(p->socket, sizeof(p->socket), "%s/%s", p->dir, EGPU_PLUGIN_SOCKET);
    w2 = snprintf(p->kubelet, sizeof(p->kubelet), "%s/%s", p->dir, EGPU_PLUGIN_KUBELET);
    if (w1 < 0 || w1 > 107 || w2 < 0 || w2 > 107) {
        egpu__plugin_free(p);
        return egpu_error_set(err, -ENAMETOOLONG,
                              "--device-plugin-dir %s: socket paths in it would pass 107 bytes",
                              cfg->dir);
    }
    rc = egpu_gpus_list(p->gpus, p->cards, EGPU_NODE_GPUS_MAX, &p->ncards, err);
    if (!rc)
        egpu__record_load(&p->rec, p->alloc_root);
    if (!rc && p->kube != NULL) {
        struct egpu__container_config pc = container_config(p);

        rc = egpu__marker_new(&pc, &p->marker);
        if (rc)
            egpu_error_set(err, rc, "device plugin: the allocated marker's thread: %s",
                           egpu_strerror(rc));
    }
    if (!rc)
        rc = egpu_grpc_server_new(p->socket, 4, &p->srv, err);
    if (!rc)
        rc = egpu_grpc_server_unary(p->srv, "/v1beta1.DevicePlugin/GetDevicePluginOptions",
                                    on_options, p);
    if (!rc)
        rc = egpu_grpc_server_stream(p->srv, "/v1beta1.DevicePlugin/ListAndWatch",
                                     egpu__plugin_on_list_and_watch, egpu__plugin_on_stream_close,
                                     p);
    if (!rc)
        rc = egpu_grpc_server_unary(p->srv, "/v1beta1.DevicePlugin/GetPreferredAllocation",
                                    egpu__plugin_on_preferred, p);
    if (!rc)
        rc = egpu_grpc_server_unary(p->srv, "/v1beta1.DevicePlugin/Allocate",
                                    egpu__plugin_on_allocate, p);
    if (!rc)
        rc = egpu_grpc_server_unary(p->srv, "/v1beta1.DevicePlugin/PreStartContainer", on_prestart,
                                    p);
    if (rc) {
        if (err != NULL && err->code == 0)
            egpu_error_set(err, rc, "device plugin: %s", egpu_strerror(rc));
        egpu__plugin_free(p);
        return rc;
    }
    *out = p;
    return 0;
}

void egpu__plugin_free(struct egpu_plugin *p)
{
    if (p == NULL)
        return;
    egpu_grpc_server_free(p->srv); /* stops it: every stream's close callback has run */
    egpu__marker_free(p->marker);  /* after the server: no Allocate queues any more */
    pthread_mutex_destroy(&p->lock);
    pthread_mutex_destroy(&p->allocated_lock);
    pthread_mutex_destroy(&p->alloc_lock);
    egpu__record_close(&p->rec);
    egpu_free(p->dir);
    egpu_free(p->alloc_root);
    egpu_free(p->interposer);
    egpu_free(p->pod_resources);
    egpu_free(p->node);
    egpu_free(p);
}

int egpu__plugin_serve(struct egpu_plugin *p, struct egpu_error *err)
{
    int rc;

    if (p->running)
        egpu_grpc_server_stop(p->srv);
    p->running = false;
    rc = egpu__allocdir_mkdir_p(p->dir);
    if (rc)
        return egpu_error_set(err, rc, "--device-plugin-dir %s: %s", p->dir, egpu_strerror(rc));
    rc = egpu_grpc_server_start(p->srv, err);
    if (rc)
        return rc;
    p->running = true;
    egpu_log(EGPU_LOG_NOTICE, "device plugin serving socket=%s", p->socket);
    return 0;
}

int egpu__plugin_register(struct egpu_plugin *p, struct egpu_error *err)
{
    static char version[] = "v1beta1", endpoint[] = EGPU_PLUGIN_SOCKET,
                resource[] = EGPU_RES_GPU_CORE;
    V1beta1__DevicePluginOptions o = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
    V1beta1__RegisterRequest r = V1BETA1__REGISTER_REQUEST__INIT;
    struct egpu_buf msg, reply;
    int rc;

    o.pre_start_required = 1;
    o.get_preferred_allocation_available = 1;
    r.version = version;
    r.endpoint = endpoint;
    r.resource_name = resource;
    r.options = &o;
    egpu_buf_init(&msg, 4096);
    egpu_buf_init(&reply, 4096);
    rc = egpu__pb_pack(&r.base, &msg);
    if (rc)
        egpu_error_set(err, rc, "Register: %s", egpu_strerror(rc));
    else
        rc = egpu_grpc_call(p->kubelet, "/v1beta1.Registration/Register", msg.data, msg.len, 15000,
                            &reply, err);
    egpu_buf_free(&msg);
    egpu_buf_free(&reply);
    if (rc == 0) {
        pthread_mutex_lock(&p->lock);
        p->stats.registrations++;
        pthread_mutex_unlock(&p->lock);
        egpu_log(EGPU_LOG_NOTICE, "registered kubelet=%s resource=%s endpoint=%s", p->kubelet,
                 EGPU_RES_GPU_CORE, EGPU_PLUGIN_SOCKET);
    }
    return rc;
}

bool egpu__plugin_socket_exists(const struct egpu_plugin *p)
{
    struct stat st;

    return stat(p->socket, &st) == 0 && S_ISSOCK(st.st_mode);
}

size_t egpu__plugin_cards(struct egpu_plugin *p, struct egpu_gpu_info *out, size_t cap)
{
    size_t n;

    pthread_mutex_lock(&p->lock);
    n = p->ncards < cap ? p->ncards : cap;
    memcpy(out, p->cards, n * sizeof(out[0]));
    pthread_mutex_unlock(&p->lock);
    return n;
}

void egpu__plugin_stats(struct egpu_plugin *p, struct egpu_plugin_stats *out)
{
    struct egpu__marker_stats ms;

    egpu__marker_stats(p->marker, &ms);
    pthread_mutex_lock(&p->lock);
    *out = p->stats;
    out->marked_allocate = ms.marked;
    out->cards = p->ncards;
    out->healthy = 0;
    for (size_t i = 0; i < p->ncards; i++)
        out->healthy += p->cards[i].healthy;
    pthread_mutex_unlock(&p->lock);
}

void egpu__plugin_each_limits(struct egpu_plugin *p, egpu__record_cb cb, void *data)
{
    egpu__record_each(&p->rec, cb, data);
}

int egpu__plugin_cleanup(struct egpu_plugin *p, long grace_s, unsigned *removed,
                         struct egpu_error *err)
{
    struct egpu__cleanup_config cc = {.alloc_root = p->alloc_root,
                                      .pod_resources = p->pod_resources,
                                      .podres_list = p->podres_list,
                                      .alloc_lock = &p->alloc_lock,
                                      .record = &p->rec};

    return egpu__cleanup_run(&cc, grace_s, &p->cleanup_failed, removed, err);
}
