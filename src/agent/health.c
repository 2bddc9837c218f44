/* agent/health.c - the health watcher (health_int.h): waits on the GPU
 * backend's events (egpu_gpus_wait) and, on a change or every
 * HEALTH_PROBE_MS (the probes of a backend without events), lists the cards
 * again: the plugin sends the new device list on ListAndWatch
 * (egpu__plugin_refresh; in DRA mode dra_mode.c's refresh, which re-publishes
 * the ResourceSlice) and the GPU objects are published again. After
 * every probe it reports the cards' use from NVML (status.used, written
 * only when it moved: egpu_inventory_report_used). With the fake backend,
 * --fake-health-file's lines ("<index> healthy" or "<index> unhealthy
 * [reason]") are applied whenever the file changes (mtime or size), for
 * tests and demos. Units: milliseconds, CLOCK_MONOTONIC.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "egpu/log.h"
#include "egpu/net.h"
#include "health_int.h"

#define HEALTH_WAIT_MS  1000  /* one egpu_gpus_wait */
#define HEALTH_PROBE_MS 10000 /* list again at least this often */

void egpu__health_publish(struct egpu__health *h)
{
    struct egpu_inventory_stats st;
    struct egpu_error err = {0};

    if (h->kube == NULL)
        return;
    if (egpu_inventory_sync(h->kube, h->gpus, h->node, &st, &err) != 0)
        egpu_log(EGPU_LOG_WARN, "GPU objects not published error=\"%s\"", err.msg);
    else if (st.created || st.updated || st.status_updated || st.deleted)
        egpu_log(EGPU_LOG_INFO, "GPU objects published created=%u updated=%u status=%u deleted=%u",
                 st.created, st.updated, st.status_updated, st.deleted);
}

/* status.used of this node's GPU objects, from NVML: on every probe, each
 * card written only when egpu_inventory_used_due says so. */
static void report_used(struct egpu__health *h)
{
    struct egpu_gpu_info *cards;
    struct egpu_error err = {0};
    unsigned written = 0;
    size_t n = 0;

    if (h->kube == NULL)
        return;
    cards = egpu_calloc(EGPU_NODE_GPUS_MAX, sizeof(*cards));
    if (cards == NULL)
        return;
    if (egpu_gpus_list(h->gpus, cards, EGPU_NODE_GPUS_MAX, &n, &err) != 0 ||
        egpu_inventory_report_used(h->kube, &h->used, h->node, cards, n, &written, &err) != 0)
        egpu_log(EGPU_LOG_WARN, "GPU use not reported error=\"%s\"", err.msg);
    else if (written > 0)
        egpu_log(EGPU_LOG_DEBUG, "GPU use reported cards=%u", written);
    egpu_free(cards);
}

static long now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* --fake-health-file: when the file changed (mtime or size), apply its
 * lines to the fake backend. Returns how many cards it set. */
static int apply_fake_health(struct egpu__health *h, struct timespec *seen_mtime, off_t *seen_size)
{
    char line[256];
    struct stat st;
    FILE *f;
    int set = 0;

    if (h->fake_health == NULL || egpu_gpus_kind(h->gpus) != EGPU_GPUS_FAKE ||
        stat(h->fake_health, &st) != 0)
        return 0;
    if (st.st_mtim.tv_sec == seen_mtime->tv_sec && st.st_mtim.tv_nsec == seen_mtime->tv_nsec &&
        st.st_size == *seen_size)
        return 0;
    *seen_mtime = st.st_mtim;
    *seen_size = st.st_size;
    f = fopen(h->fake_health, "r");
    if (f == NULL)
        return 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        char state[16] = "", reason[128] = "";
        struct egpu_error err = {0};
        unsigned index;
        int n = sscanf(line, "%u %15s %127[^\n]", &index, state, reason);

        if (n < 2 || (strcmp(state, "healthy") != 0 && strcmp(state, "unhealthy") != 0))
            continue;
        if (egpu_gpus_fake_set_health(h->gpus, index, strcmp(state, "healthy") == 0,
                                      n == 3 ? reason : NULL, &err) != 0)
            egpu_log(EGPU_LOG_WARN, "--fake-health-file: line ignored error=\"%s\"", err.msg);
        else
            set++;
    }
    fclose(f);
    return set;
}

void *egpu__health_main(void *data)
{
    struct egpu__health *h = data;
    long last = now_ms();
    struct timespec mtime = {0};
    off_t size = -1;

    report_used(h);
    while (!egpu_service_stopping()) {
        struct egpu_error err = {0};
        int n = egpu_gpus_wait(h->gpus, HEALTH_WAIT_MS, &err);
        bool changed = false;
        int rc;

        if (n < 0) {
            egpu_log(EGPU_LOG_WARN, "health wait failed error=\"%s\"", err.msg);
            n = 0;
        }
        n += apply_fake_health(h, &mtime, &size);
        if (n == 0 && now_ms() - last < HEALTH_PROBE_MS)
            continue;
        last = now_ms();
        rc = h->refresh != NULL ? h->refresh(h->refresh_data, &changed, &err)
                                : egpu__plugin_refresh(h->plugin, &changed, &err);
        if (rc != 0)
            egpu_log(EGPU_LOG_WARN, "GPU list failed error=\"%s\"", err.msg);
        else if (changed)
            egpu__health_publish(h);
        report_used(h);
    }
    return NULL;
}
