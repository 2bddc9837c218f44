/* agent/marker.c - elasticgpu.io/allocated right after Allocate.
 *
 * The scheduler refuses to bind a second pod of the same gpu-core to a node
 * while a first one is placed there and not marked allocated (DESIGN.md 2.3:
 * the kubelet's request would be ambiguous). The kubelet fixes a
 * container's device IDs at admission: Allocate, then its device manager
 * records them (podDevices), which PodResources List reports from then on
 * (../shared/k8s-wire/deviceplugin_notes.md). PreStartContainer comes only
 * when the container starts, after its image is pulled, which may be
 * minutes. So after each Allocate that succeeded, the IDs are queued here
 * and a thread of its own (Allocate's latency does not grow) asks
 * PodResources List who holds them and marks that container allocated as
 * PreStartContainer would (mark_owner: container.c's checks and mark).
 * Nothing a tenant writes is believed: the owner comes from the kubelet,
 * the assignment from the annotation only the scheduler may write.
 * PreStartContainer still
 * marks it when this did not (its path is the fallback), and leaves the
 * annotation alone when it is there already.
 *
 * Bounded: MARK_TRIES Lists per queued Allocate, MARK_FIRST_MS after it and
 * then doubling (50, 100, 200, 400, 800, 1600 ms: about 3 s in all); one List
 * answers every queued Allocate due, so a pod of many containers costs no
 * more Lists than one (the kubelet limits PodResources to 100 calls a
 * second, 10 at once). At most MARK_QUEUE_MAX Allocates wait; one more is
 * left to PreStartContainer. Units: milliseconds, CLOCK_MONOTONIC.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "egpu/log.h"
#include "container_int.h"
#include "marker_int.h"
#include "pb_int.h"

#define MARK_TRIES     6
#define MARK_FIRST_MS  50
#define MARK_QUEUE_MAX 256

struct job {
    struct job *next;
    int64_t due_ms; /* next try, CLOCK_MONOTONIC */
    unsigned tries; /* Lists that did not show the IDs */
    size_t n;
    char **ids; /* n copies */
};

struct egpu__marker {
    struct egpu__container_config cfg; /* borrowed strings: the plugin's */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    pthread_t thread;
    bool started, stop;
    struct job *jobs; /* waiting, in no order */
    size_t njobs;
    struct egpu__marker_stats stats;
};

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void job_free(struct job *j)
{
    if (j == NULL)
        return;
    for (size_t i = 0; i < j->n; i++)
        egpu_free(j->ids[i]);
    egpu_free(j->ids);
    egpu_free(j);
}

/* When a container of r (a PodResources List answer) holds every one of
 * ids (n), read its pod's assignment and, when PreStartContainer would
 * accept the IDs (on the assigned card(s), core per card, a usable
 * gpu-core-limit), add the container to elasticgpu.io/allocated as
 * PreStartContainer does. Returns 1 (marked, or marked already), 0 (no
 * container of r holds the IDs yet) or a negative code with err (not
 * marked: PreStartContainer decides). */
static int mark_owner(const struct egpu__container_config *cfg,
                      const V1__ListPodResourcesResponse *r, char *const *ids, size_t n,
                      struct egpu_error *err)
{
    struct egpu_error cerr = {0};
    struct egpu_kube_status ks;
    struct egpu_assigned *a;
    const struct egpu_assigned_container *c = NULL;
    struct egpu__container_ref o;
    json_t *pod = NULL;
    unsigned core_limit;
    bool wrote = false;
    int rc;

    if (!egpu__container_owner(r, ids, n, &o))
        return 0;
    a = egpu_malloc(sizeof(*a));
    if (a == NULL)
        return egpu_error_set(err, -ENOMEM, "out of memory");
    rc = egpu_kube_get(cfg->kube, &egpu_kube_pods, o.ns, o.pod, &pod, &ks, err);
    if (rc == 0 && egpu__container_assigned(pod, a, err) != 0)
        rc =
            egpu_error_set(err, -ENOENT, "pod %s/%s has no usable " EGPU_ANN_ASSIGNED, o.ns, o.pod);
    if (rc == 0 && (c = egpu__container_find(a, o.container)) == NULL)
        rc = egpu_error_set(err, -ENOENT, "pod %s/%s: " EGPU_ANN_ASSIGNED " has no container %s",
                            o.ns, o.pod, o.container);
    /* What PreStartContainer would refuse is not marked: it refuses it then
     * (with its event), and allocated keeps meaning "limits accepted". */
    if (rc == 0 && (egpu__container_check_ids(&o, a, c, ids, n, &cerr) != 0 ||
                    (c->core_pct < 100 &&
                     egpu__container_core_limit(pod, &o, c->core_pct, &core_limit, &cerr))))
        rc = egpu_error_set(err, -EINVAL, "PreStartContainer: %s", cerr.msg);
    if (rc == 0)
        rc = egpu__container_mark(cfg, &o, a, c, &wrote, err);
    if (rc == 0)
        egpu_log(EGPU_LOG_INFO,
                 "marked allocated after Allocate pod=%s/%s container=%s core=%u gpus=%u "
                 "patched=%s",
                 o.ns, o.pod, o.container, c->core_pct, c->ncards, wrote ? "true" : "false");
    json_decref(pod);
    egpu_free(a);
    return rc == 0 ? 1 : rc;
}

/* Try the jobs of list that are due at now with one List; the others, and
 * the due ones to try again, are put back. Called without the lock. */
static void run_due(struct egpu__marker *m, struct job *list, int64_t now)
{
    V1__ListPodResourcesResponse *r = NULL;
    struct egpu_error err = {0};
    struct job *keep = NULL, *next;
    unsigned long marked = 0, gave_up = 0, failed = 0;
    egpu__podres_list_fn podres =
        m->cfg.podres_list != NULL ? m->cfg.podres_list : egpu__podres_list;
    int lrc = podres(m->cfg.pod_resources, &r, &err);

    if (lrc != 0)
        egpu_log(EGPU_LOG_DEBUG, "allocated mark: PodResources List failed error=\"%s\"", err.msg);
    for (struct job *j = list; j != NULL; j = next) {
        int rc = 0;

        next = j->next;
        if (j->due_ms > now) {
            j->next = keep;
            keep = j;
            continue;
        }
        if (lrc == 0) {
            err = (struct egpu_error){0};
            rc = mark_owner(&m->cfg, r, j->ids, j->n, &err);
        }
        if (rc == 1) {
            marked++;
        } else if (rc < 0) {
            failed++;
            egpu_log(EGPU_LOG_WARN,
                     "not marked allocated after Allocate, left to PreStartContainer id=%s "
                     "error=\"%s\"",
                     j->ids[0], err.msg);
        } else if (++j->tries >= MARK_TRIES) {
            gave_up++;
            egpu_log(EGPU_LOG_INFO,
                     "PodResources did not show the owner of the IDs after %u tries; "
                     "PreStartContainer will mark it id=%s",
                     j->tries, j->ids[0]);
        } else {
            j->due_ms = now_ms() + ((int64_t)MARK_FIRST_MS << j->tries);
            j->next = keep;
            keep = j;
            continue;
        }
        job_free(j);
    }
    if (r != NULL)
        v1__list_pod_resources_response__free_unpacked(r, &egpu__pb_allocator);
    pthread_mutex_lock(&m->lock);
    while (keep != NULL) {
        next = keep->next;
        keep->next = m->jobs;
        m->jobs = keep;
        m->njobs++;
        keep = next;
    }
    m->stats.marked += marked;
    m->stats.gave_up += gave_up;
    m->stats.failed += failed;
    pthread_mutex_unlock(&m->lock);
}

static void *marker_main(void *arg)
{
    struct egpu__marker *m = arg;

    pthread_mutex_lock(&m->lock);
    while (!m->stop) {
        int64_t due = INT64_MAX, now = now_ms();
        struct job *list;

        for (struct job *j = m->jobs; j != NULL; j = j->next)
            due = j->due_ms < due ? j->due_ms : due;
        if (due == INT64_MAX) {
            pthread_cond_wait(&m->cond, &m->lock);
            continue;
        }
        if (due > now) {
            struct timespec ts;

            clock_gettime(CLOCK_MONOTONIC, &ts);
            ts.tv_sec += (due - now) / 1000;
            ts.tv_nsec += (long)((due - now) % 1000) * 1000000;
            if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
            }
            (void)pthread_cond_timedwait(&m->cond, &m->lock, &ts); /* woken or due */
            continue;
        }
        list = m->jobs;
        m->jobs = NULL;
        m->njobs = 0;
        pthread_mutex_unlock(&m->lock);
        run_due(m, list, now);
        pthread_mutex_lock(&m->lock);
    }
    pthread_mutex_unlock(&m->lock);
    return NULL;
}

int egpu__marker_new(const struct egpu__container_config *cfg, struct egpu__marker **out)
{
    struct egpu__marker *m = egpu_calloc(1, sizeof(*m));
    pthread_condattr_t ca;

    if (m == NULL)
        return -ENOMEM;
    m->cfg = *cfg;
    pthread_mutex_init(&m->lock, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&m->cond, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&m->thread, NULL, marker_main, m) != 0) {
        egpu__marker_free(m);
        return -EAGAIN;
    }
    m->started = true;
    *out = m;
    return 0;
}

void egpu__marker_free(struct egpu__marker *m)
{
    struct job *j, *next;

    if (m == NULL)
        return;
    pthread_mutex_lock(&m->lock);
    m->stop = true;
    pthread_cond_broadcast(&m->cond);
    pthread_mutex_unlock(&m->lock);
    if (m->started)
        pthread_join(m->thread, NULL);
    for (j = m->jobs; j != NULL; j = next) {
        next = j->next;
        job_free(j);
    }
    pthread_cond_destroy(&m->cond);
    pthread_mutex_destroy(&m->lock);
    egpu_free(m);
}

void egpu__marker_add(struct egpu__marker *m, char *const *ids, size_t n)
{
    struct job *j;

    if (m == NULL || n == 0)
        return;
    j = egpu_calloc(1, sizeof(*j));
    if (j != NULL)
        j->ids = egpu_calloc(n, sizeof(*j->ids));
    for (size_t i = 0; j != NULL && j->ids != NULL && i < n; i++, j->n++)
        if ((j->ids[j->n] = egpu_strdup(ids[i])) == NULL)
            break;
    if (j == NULL || j->ids == NULL || j->n != n) {
        job_free(j);
        egpu_log(EGPU_LOG_WARN, "allocated mark not queued (out of memory) id=%s", ids[0]);
        return;
    }
    j->due_ms = now_ms() + MARK_FIRST_MS;
    pthread_mutex_lock(&m->lock);
    if (m->njobs >= MARK_QUEUE_MAX) {
        m->stats.dropped++;
        pthread_mutex_unlock(&m->lock);
        egpu_log(EGPU_LOG_WARN,
                 "allocated mark not queued (%d waiting), left to PreStartContainer id=%s",
                 MARK_QUEUE_MAX, ids[0]);
        job_free(j);
        return;
    }
    j->next = m->jobs;
    m->jobs = j;
    m->njobs++;
    pthread_cond_signal(&m->cond);
    pthread_mutex_unlock(&m->lock);
}

void egpu__marker_stats(struct egpu__marker *m, struct egpu__marker_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->lock);
    *out = m->stats;
    pthread_mutex_unlock(&m->lock);
}
