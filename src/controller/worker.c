/* controller/worker.c - egpu-controller's worker thread: it takes keys
 * from the work queue while this instance leads and the caches are synced,
 * and hands each to its reconciler (claim.c, egpu.c, gpustatus.c,
 * budget.c, dra.c), timing it and queueing it again with backoff when it fails.
 */
#include <string.h>
#include <time.h>

#include "controller_int.h"
#include "egpu/log.h"

static long long now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void process(struct egpu__controller *c, const char *key)
{
    const char *labels[1];
    long long t0 = now_ms();
    int rc;

    if (key[0] == 'c' && key[1] == '/') {
        char ns[EGPU_NAMESPACE_MAX];
        const char *slash = strchr(key + 2, '/');

        labels[0] = "ElasticGPUClaim";
        if (slash == NULL || (size_t)(slash - key - 2) >= sizeof(ns))
            return;
        memcpy(ns, key + 2, (size_t)(slash - key - 2));
        ns[slash - key - 2] = '\0';
        rc = egpu__controller_claim_sync(c, ns, slash + 1);
    } else if (key[0] == 't' && key[1] == '/') {
        char ns[EGPU_NAMESPACE_MAX];
        const char *slash = strchr(key + 2, '/');

        labels[0] = "Pod";
        if (slash == NULL || (size_t)(slash - key - 2) >= sizeof(ns))
            return;
        memcpy(ns, key + 2, (size_t)(slash - key - 2));
        ns[slash - key - 2] = '\0';
        rc = egpu__controller_dra_sync(c, ns, slash + 1);
    } else if (key[0] == 'd' && key[1] == '/') {
        labels[0] = "DeviceClass";
        rc = egpu__controller_dra_class_sync(c, key + 2);
    } else if (strcmp(key, "T") == 0) {
        labels[0] = "ResourceClaimTemplate";
        rc = egpu__controller_dra_gc(c);
    } else if (key[0] == 'g' && key[1] == '/') {
        labels[0] = "GPU";
        rc = egpu__controller_gs_sync(c, key + 2);
    } else if (key[0] == 'b' && key[1] == '/') {
        labels[0] = "GPUBudget";
        rc = egpu__controller_budget_sync(c, key + 2);
    } else {
        labels[0] = "ElasticGPU";
        rc = egpu__controller_egpu_sync(c, key + 2);
    }
    (void)egpu_metric_observe(c->m_latency, labels, (double)(now_ms() - t0) / 1000.0);
    if (rc == 0) {
        egpu_controller_queue_forget(c->queue, key);
        return;
    }
    (void)egpu_metric_inc(c->m_errors, labels);
    egpu_log(rc == EGPU_KUBE_ECONFLICT ? EGPU_LOG_DEBUG : EGPU_LOG_WARN,
             "reconcile failed key=%s error=\"%s\" retry_ms=%ld", key, egpu_strerror(rc),
             egpu_controller_queue_add_backoff(c->queue, key));
}

static bool synced(struct egpu__controller *c)
{
    for (int i = 0; i < EGPU__CONTROLLER_NINF; i++) {
        if (!egpu_kube_informer_has_synced(c->inf[i]))
            return false;
    }
    return egpu__controller_dra_synced(c);
}

void *egpu__controller_worker(void *data)
{
    struct egpu__controller *c = data;
    bool was_leading = false;

    while (!atomic_load(&c->stop)) {
        char *key = NULL;
        bool leading = atomic_load(&c->leading);

        if (!leading || !synced(c)) {
            was_leading = false;
            struct timespec ts = {0, 50 * 1000000};

            nanosleep(&ts, NULL);
            continue;
        }
        if (!was_leading) {
            egpu_log(EGPU_LOG_NOTICE, "reconciling: caches synced and leading");
            egpu__controller_enqueue_all(c, EGPU__CONTROLLER_CLAIMS, false);
            egpu__controller_enqueue_all(c, EGPU__CONTROLLER_EGPUS, false);
            egpu__controller_enqueue_all(c, EGPU__CONTROLLER_BUDGETS, false);
            egpu__controller_gs_enqueue_all(c);
            egpu__controller_dra_enqueue_all(c);
            was_leading = true;
        }
        if (egpu_controller_queue_get(c->queue, 200, &key) != 0)
            continue;
        if (atomic_load(&c->leading))
            process(c, key);
        else
            (void)egpu_controller_queue_add(c->queue, key); /* the next leader's, or ours later */
        egpu_controller_queue_done(c->queue, key);
        egpu_free(key);
    }
    return NULL;
}
