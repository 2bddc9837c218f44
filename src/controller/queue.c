/* controller/queue.c - the controller's work queue (egpu/controller.h).
 *
 * client-go's workqueue in one file: a FIFO of ready keys, a min-heap of
 * keys waiting on a timer, and per key one entry saying where it is
 * (queued, processing, dirty = added while processing, its place in the
 * heap, its failures). An entry that is nowhere and has no failures is
 * freed, so the queue holds memory only for keys with something to do.
 * One mutex guards everything; get waits on a condition variable until the
 * earliest timer or an add.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "egpu/controller.h"

struct ent {
    char *key;
    bool queued, processing, dirty;
    long heap_idx; /* -1: not waiting on a timer */
    long long due_ms;
    unsigned failures;
};

struct egpu_controller_queue {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct egpu_map *ents;
    struct ent **ready; /* ring of nready from head */
    size_t head, nready, cap;
    struct ent **heap;
    size_t nheap, heap_cap;
    long base_ms, max_ms;
    bool shutdown;
};

static long long now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

struct egpu_controller_queue *egpu_controller_queue_new(long base_ms, long max_ms)
{
    struct egpu_controller_queue *q = egpu_calloc(1, sizeof(*q));
    pthread_condattr_t ca;

    if (q == NULL)
        return NULL;
    q->ents = egpu_map_new();
    if (q->ents == NULL) {
        egpu_free(q);
        return NULL;
    }
    q->base_ms = base_ms > 0 ? base_ms : 5;
    q->max_ms = max_ms > 0 ? max_ms : 60000;
    pthread_mutex_init(&q->lock, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&q->cond, &ca);
    pthread_condattr_destroy(&ca);
    return q;
}

void egpu_controller_queue_free(struct egpu_controller_queue *q)
{
    size_t pos = 0;
    struct ent *e;

    if (q == NULL)
        return;
    while ((e = egpu_map_next(q->ents, &pos, NULL)) != NULL) {
        egpu_free(e->key);
        egpu_free(e);
    }
    egpu_map_free(q->ents);
    egpu_free(q->ready);
    egpu_free(q->heap);
    pthread_cond_destroy(&q->cond);
    pthread_mutex_destroy(&q->lock);
    egpu_free(q);
}

/* ---- heap of timers, by due time ---- */

static void heap_swap(struct egpu_controller_queue *q, size_t a, size_t b)
{
    struct ent *t = q->heap[a];

    q->heap[a] = q->heap[b];
    q->heap[b] = t;
    q->heap[a]->heap_idx = (long)a;
    q->heap[b]->heap_idx = (long)b;
}

static void heap_up(struct egpu_controller_queue *q, size_t i)
{
    while (i > 0 && q->heap[(i - 1) / 2]->due_ms > q->heap[i]->due_ms) {
        heap_swap(q, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
}

static void heap_down(struct egpu_controller_queue *q, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;

        if (l < q->nheap && q->heap[l]->due_ms < q->heap[m]->due_ms)
            m = l;
        if (r < q->nheap && q->heap[r]->due_ms < q->heap[m]->due_ms)
            m = r;
        if (m == i)
            return;
        heap_swap(q, i, m);
        i = m;
    }
}

static int heap_push(struct egpu_controller_queue *q, struct ent *e)
{
    if (q->nheap == q->heap_cap) {
        size_t cap = q->heap_cap ? q->heap_cap * 2 : 16;
        struct ent **h = egpu_realloc(q->heap, cap * sizeof(*h));

        if (h == NULL)
            return -ENOMEM;
        q->heap = h;
        q->heap_cap = cap;
    }
    q->heap[q->nheap] = e;
    e->heap_idx = (long)q->nheap++;
    heap_up(q, (size_t)e->heap_idx);
    return 0;
}

static void heap_remove(struct egpu_controller_queue *q, struct ent *e)
{
    size_t i = (size_t)e->heap_idx;

    e->heap_idx = -1;
    if (--q->nheap == i)
        return;
    q->heap[i] = q->heap[q->nheap];
    q->heap[i]->heap_idx = (long)i;
    heap_down(q, i);
    heap_up(q, i);
}

/* ---- entries and the ready ring ---- */

static void ent_drop_if_idle(struct egpu_controller_queue *q, struct ent *e)
{
    if (e->queued || e->processing || e->heap_idx >= 0 || e->failures > 0)
        return;
    (void)egpu_map_del(q->ents, e->key);
    egpu_free(e->key);
    egpu_free(e);
}

static struct ent *ent_get(struct egpu_controller_queue *q, const char *key)
{
    struct ent *e = egpu_map_get(q->ents, key);

    if (e != NULL)
        return e;
    e = egpu_calloc(1, sizeof(*e));
    if (e == NULL)
        return NULL;
    e->key = egpu_strdup(key);
    e->heap_idx = -1;
    if (e->key == NULL || egpu_map_put(q->ents, e->key, e) != 0) {
        egpu_free(e->key);
        egpu_free(e);
        return NULL;
    }
    return e;
}

static int ready_push(struct egpu_controller_queue *q, struct ent *e)
{
    if (q->nready == q->cap) {
        size_t cap = q->cap ? q->cap * 2 : 16;
        struct ent **r = egpu_malloc(cap * sizeof(*r));

        if (r == NULL)
            return -ENOMEM;
        for (size_t i = 0; i < q->nready; i++)
            r[i] = q->ready[(q->head + i) % q->cap];
        egpu_free(q->ready);
        q->ready = r;
        q->head = 0;
        q->cap = cap;
    }
    q->ready[(q->head + q->nready++) % q->cap] = e;
    e->queued = true;
    pthread_cond_signal(&q->cond);
    return 0;
}

/* add's work, under the lock. */
static int add_locked(struct egpu_controller_queue *q, struct ent *e)
{
    if (e->processing) {
        e->dirty = true;
        return 0;
    }
    if (e->queued)
        return 0;
    if (e->heap_idx >= 0)
        heap_remove(q, e);
    return ready_push(q, e);
}

int egpu_controller_queue_add(struct egpu_controller_queue *q, const char *key)
{
    return egpu_controller_queue_add_after(q, key, 0);
}

static int add_after_locked(struct egpu_controller_queue *q, const char *key, long delay_ms)
{
    struct ent *e;
    int rc;

    if (q->shutdown)
        return -ESHUTDOWN;
    e = ent_get(q, key);
    if (e == NULL)
        return -ENOMEM;
    if (delay_ms <= 0) {
        rc = add_locked(q, e);
    } else if (e->queued || (e->processing && e->dirty)) {
        rc = 0;
    } else if (e->heap_idx >= 0) {
        if (now_ms() + delay_ms < e->due_ms) {
            e->due_ms = now_ms() + delay_ms;
            heap_up(q, (size_t)e->heap_idx);
        }
        rc = 0;
    } else {
        e->due_ms = now_ms() + delay_ms;
        rc = heap_push(q, e);
        pthread_cond_signal(&q->cond); /* a waiting get may wait less now */
    }
    if (rc)
        ent_drop_if_idle(q, e);
    return rc;
}

int egpu_controller_queue_add_after(struct egpu_controller_queue *q, const char *key, long delay_ms)
{
    int rc;

    pthread_mutex_lock(&q->lock);
    rc = add_after_locked(q, key, delay_ms);
    pthread_mutex_unlock(&q->lock);
    return rc;
}

long egpu_controller_queue_add_backoff(struct egpu_controller_queue *q, const char *key)
{
    struct ent *e;
    long delay;
    int rc;

    pthread_mutex_lock(&q->lock);
    e = q->shutdown ? NULL : ent_get(q, key);
    if (e == NULL) {
        pthread_mutex_unlock(&q->lock);
        return q->shutdown ? -ESHUTDOWN : -ENOMEM;
    }
    delay = q->base_ms;
    for (unsigned i = 0; i < e->failures && delay < q->max_ms; i++)
        delay *= 2;
    if (delay > q->max_ms)
        delay = q->max_ms;
    e->failures++;
    rc = add_after_locked(q, key, delay);
    pthread_mutex_unlock(&q->lock);
    return rc ? rc : delay;
}

void egpu_controller_queue_forget(struct egpu_controller_queue *q, const char *key)
{
    struct ent *e;

    pthread_mutex_lock(&q->lock);
    e = egpu_map_get(q->ents, key);
    if (e != NULL) {
        e->failures = 0;
        ent_drop_if_idle(q, e);
    }
    pthread_mutex_unlock(&q->lock);
}

unsigned egpu_controller_queue_failures(struct egpu_controller_queue *q, const char *key)
{
    struct ent *e;
    unsigned n;

    pthread_mutex_lock(&q->lock);
    e = egpu_map_get(q->ents, key);
    n = e != NULL ? e->failures : 0;
    pthread_mutex_unlock(&q->lock);
    return n;
}

/* Move every timer that is due to the ready ring; the earliest one left in
 * *next_ms (-1: none). */
static void fire_timers(struct egpu_controller_queue *q, long long *next_ms)
{
    long long now = now_ms();

    while (q->nheap > 0 && q->heap[0]->due_ms <= now) {
        struct ent *e = q->heap[0];

        heap_remove(q, e);
        if (add_locked(q, e) != 0) {
            (void)heap_push(q, e); /* out of memory: try again on the next get */
            break;
        }
    }
    *next_ms = q->nheap > 0 ? q->heap[0]->due_ms : -1;
}

int egpu_controller_queue_get(struct egpu_controller_queue *q, long timeout_ms, char **key)
{
    long long deadline = timeout_ms >= 0 ? now_ms() + timeout_ms : -1;
    int rc = 0;

    pthread_mutex_lock(&q->lock);
    for (;;) {
        long long next, until;
        struct timespec ts;

        if (q->shutdown) {
            rc = -ESHUTDOWN;
            break;
        }
        fire_timers(q, &next);
        if (q->nready > 0) {
            struct ent *e = q->ready[q->head];
            char *k = egpu_strdup(e->key);

            if (k == NULL) {
                rc = -ENOMEM;
                break;
            }
            q->head = (q->head + 1) % q->cap;
            q->nready--;
            e->queued = false;
            e->processing = true;
            *key = k;
            break;
        }
        if (deadline >= 0 && now_ms() >= deadline) {
            rc = -ETIMEDOUT;
            break;
        }
        until = next;
        if (deadline >= 0 && (until < 0 || deadline < until))
            until = deadline;
        if (until < 0) {
            pthread_cond_wait(&q->cond, &q->lock);
            continue;
        }
        ts.tv_sec = (time_t)(until / 1000);
        ts.tv_nsec = (long)(until % 1000) * 1000000;
        (void)pthread_cond_timedwait(&q->cond, &q->lock, &ts);
    }
    pthread_mutex_unlock(&q->lock);
    return rc;
}

void egpu_controller_queue_done(struct egpu_controller_queue *q, const char *key)
{
    struct ent *e;

    pthread_mutex_lock(&q->lock);
    e = egpu_map_get(q->ents, key);
    if (e != NULL && e->processing) {
        e->processing = false;
        if (e->dirty && !q->shutdown)
            (void)add_locked(q, e); /* out of memory: the resync brings it back */
        e->dirty = false;
        ent_drop_if_idle(q, e);
    }
    pthread_mutex_unlock(&q->lock);
}

size_t egpu_controller_queue_len(struct egpu_controller_queue *q)
{
    size_t n;

    pthread_mutex_lock(&q->lock);
    n = q->nready + q->nheap;
    pthread_mutex_unlock(&q->lock);
    return n;
}

void egpu_controller_queue_shutdown(struct egpu_controller_queue *q)
{
    pthread_mutex_lock(&q->lock);
    q->shutdown = true;
    pthread_cond_broadcast(&q->cond);
    pthread_mutex_unlock(&q->lock);
}
