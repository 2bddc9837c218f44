/* agent/listwatch.c - ListAndWatch: the device list the kubelet sees, and
 * its updates when a card's health changes.
 *
 * Each card is 100 device IDs "<uuid>-<nn>" (plugin_int.h); a card never
 * identified (no UUID) has none. A new stream gets the full list at once;
 * egpu__plugin_refresh lists the cards again (the health watcher calls it)
 * and, when the card set or a card's health changed, sends the full list
 * again on every open stream, an unhealthy card's IDs as "Unhealthy". At
 * most EGPU_PLUGIN_STREAMS_MAX streams are open (the kubelet keeps one).
 *
 * Threads: the handlers run on the gRPC server's threads, the refresh on the
 * health watcher's; p->lock guards the card list and the streams.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "deviceplugin/v1beta1/api.pb-c.h"
#include "egpu/log.h"
#include "egpu/api.h"
#include "plugin_impl_int.h"

#define DEVICES_MAX (EGPU_NODE_GPUS_MAX * EGPU_PLUGIN_IDS_PER_CARD)

/* The full device list of cards as a ListAndWatchResponse into out. */
static int pack_devices(const struct egpu_gpu_info *cards, size_t ncards, struct egpu_buf *out)
{
    static char healthy[] = EGPU_GPU_HEALTHY, unhealthy[] = EGPU_GPU_UNHEALTHY;
    V1beta1__ListAndWatchResponse r = V1BETA1__LIST_AND_WATCH_RESPONSE__INIT;
    V1beta1__Device *devs = egpu_calloc(DEVICES_MAX, sizeof(*devs));
    V1beta1__Device **ptrs = egpu_calloc(DEVICES_MAX, sizeof(*ptrs));
    char(*ids)[EGPU_PLUGIN_ID_MAX] = egpu_calloc(DEVICES_MAX, EGPU_PLUGIN_ID_MAX);
    size_t n = 0;
    int rc = 0;

    if (devs == NULL || ptrs == NULL || ids == NULL) {
        rc = -ENOMEM;
        goto out_free;
    }
    for (size_t c = 0; c < ncards; c++) {
        if (cards[c].uuid[0] == '\0')
            continue; /* never identified: no IDs to give */
        for (unsigned s = 0; s < EGPU_PLUGIN_IDS_PER_CARD; s++) {
            if (egpu__plugin_device_id(cards[c].uuid, s, ids[n], EGPU_PLUGIN_ID_MAX) != 0)
                break; /* cannot happen: UUIDs are at most 63 bytes with "-nn" room checked */
            devs[n] = (V1beta1__Device)V1BETA1__DEVICE__INIT;
            devs[n].id = ids[n];
            devs[n].health = cards[c].healthy ? healthy : unhealthy;
            ptrs[n] = &devs[n];
            n++;
        }
    }
    r.n_devices = n;
    r.devices = ptrs;
    rc = egpu__pb_pack(&r.base, out);
out_free:
    egpu_free(ids);
    egpu_free(ptrs);
    egpu_free(devs);
    return rc;
}

/* Send the current list on every open stream. Called with p->lock held. */
static void broadcast_locked(struct egpu_plugin *p)
{
    struct egpu_buf msg;
    int rc;

    egpu_buf_init(&msg, EGPU_GRPC_MSG_MAX);
    rc = pack_devices(p->cards, p->ncards, &msg);
    for (size_t i = 0; rc == 0 && i < p->nstreams; i++) {
        int src = egpu_grpc_stream_send(p->streams[i], msg.data, msg.len);

        if (src != 0 && src != -EPIPE)
            egpu_log(EGPU_LOG_WARN, "ListAndWatch send failed error=\"%s\"", egpu_strerror(src));
    }
    if (rc)
        egpu_log(EGPU_LOG_ERROR, "ListAndWatch: device list not built error=\"%s\"",
                 egpu_strerror(rc));
    egpu_buf_free(&msg);
}

int egpu__plugin_on_list_and_watch(void *data, const struct egpu_grpc_request *req,
                                   struct egpu_grpc_stream *stream, struct egpu_grpc_status *st)
{
    struct egpu_plugin *p = data;
    struct egpu_buf msg;
    int rc;

    (void)req;
    egpu_buf_init(&msg, EGPU_GRPC_MSG_MAX);
    pthread_mutex_lock(&p->lock);
    if (p->nstreams == EGPU_PLUGIN_STREAMS_MAX) {
        pthread_mutex_unlock(&p->lock);
        return egpu_grpc_status_set(st, GRPC_STATUS_RESOURCE_EXHAUSTED,
                                    "ListAndWatch: %d streams open already",
                                    EGPU_PLUGIN_STREAMS_MAX);
    }
    rc = pack_devices(p->cards, p->ncards, &msg);
    if (rc == 0) {
        p->streams[p->nstreams++] = stream;
        rc = egpu_grpc_stream_send(stream, msg.data, msg.len);
        if (rc)
            egpu_log(EGPU_LOG_WARN, "ListAndWatch first send failed error=\"%s\"",
                     egpu_strerror(rc));
        rc = 0; /* accepted either way: the close callback will drop it */
        egpu_log(EGPU_LOG_INFO, "ListAndWatch opened devices=%zu",
                 p->ncards * EGPU_PLUGIN_IDS_PER_CARD);
    }
    pthread_mutex_unlock(&p->lock);
    egpu_buf_free(&msg);
    return rc;
}

void egpu__plugin_on_stream_close(void *data, struct egpu_grpc_stream *stream, int reason)
{
    struct egpu_plugin *p = data;
    bool found = false;

    pthread_mutex_lock(&p->lock);
    for (size_t i = 0; i < p->nstreams; i++) {
        if (p->streams[i] == stream) {
            p->streams[i] = p->streams[--p->nstreams];
            found = true;
            break;
        }
    }
    pthread_mutex_unlock(&p->lock);
    egpu_log(EGPU_LOG_INFO, "ListAndWatch closed reason=\"%s\"",
             reason ? egpu_strerror(reason) : "finished");
    if (found)
        egpu_grpc_stream_release(stream);
}

static bool cards_differ(const struct egpu_gpu_info *a, size_t na, const struct egpu_gpu_info *b,
                         size_t nb)
{
    if (na != nb)
        return true;
    for (size_t i = 0; i < na; i++)
        if (strcmp(a[i].uuid, b[i].uuid) != 0 || a[i].healthy != b[i].healthy)
            return true;
    return false;
}

int egpu__plugin_refresh(struct egpu_plugin *p, bool *changed, struct egpu_error *err)
{
    struct egpu_gpu_info *cards = egpu_calloc(EGPU_NODE_GPUS_MAX, sizeof(*cards));
    size_t n;
    bool diff = false;
    int rc;

    if (cards == NULL)
        return egpu_error_set(err, -ENOMEM, "device plugin: out of memory");
    rc = egpu_gpus_list(p->gpus, cards, EGPU_NODE_GPUS_MAX, &n, err);
    if (rc == 0) {
        pthread_mutex_lock(&p->lock);
        diff = cards_differ(p->cards, p->ncards, cards, n);
        memcpy(p->cards, cards, n * sizeof(cards[0]));
        p->ncards = n;
        if (diff)
            broadcast_locked(p);
        pthread_mutex_unlock(&p->lock);
        if (diff)
            for (size_t i = 0; i < n; i++)
                egpu_log(EGPU_LOG_NOTICE, "gpu index=%u uuid=%s health=%s reason=\"%s\"",
                         cards[i].index, cards[i].uuid,
                         cards[i].healthy ? EGPU_GPU_HEALTHY : EGPU_GPU_UNHEALTHY, cards[i].reason);
    }
    if (changed != NULL)
        *changed = diff;
    egpu_free(cards);
    return rc;
}
