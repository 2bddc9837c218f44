/* kube/clock.c - time and randomness for the client's loops: the monotonic
 * clock that timeouts, backoffs and lease expiry are measured with, the
 * wall-clock MicroTime written into Leases, timed waits on condition
 * variables bound to CLOCK_MONOTONIC, random bytes for jitter and
 * identities, and the background thread with a stop flag that the informer
 * and the elector run on.
 */
#define _GNU_SOURCE /* getrandom */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "kube_int.h"

int64_t egpu__kube_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void egpu__kube_micro_time(char out[32])
{
    struct timespec ts;
    char date[24];
    struct tm tm;

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    if (strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%S", &tm) == 0)
        date[0] = '\0';
    snprintf(out, 32, "%.19s.%06uZ", date, (unsigned)(ts.tv_nsec / 1000) % 1000000u);
}

int egpu__kube_cond_init(pthread_cond_t *cond)
{
    pthread_condattr_t attr;
    int rc = pthread_condattr_init(&attr);

    if (rc)
        return -rc;
    rc = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    if (!rc)
        rc = pthread_cond_init(cond, &attr);
    pthread_condattr_destroy(&attr);
    return -rc;
}

void egpu__kube_cond_wait_until(pthread_cond_t *cond, pthread_mutex_t *mu, int64_t deadline_ms)
{
    struct timespec ts = {.tv_sec = deadline_ms / 1000, .tv_nsec = (deadline_ms % 1000) * 1000000};

    (void)pthread_cond_timedwait(cond, mu, &ts); /* timeouts and wakeups look the same */
}

void egpu__kube_random(void *buf, size_t len)
{
    unsigned char *p = buf;
    ssize_t n = getrandom(buf, len, GRND_NONBLOCK);

    if (n == (ssize_t)len)
        return;
    for (size_t i = 0; i < len; i++) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        p[i] = (unsigned char)(ts.tv_nsec ^ (ts.tv_nsec >> 8) ^ (long)i * 131);
    }
}

int egpu__kube_worker_init(struct egpu__kube_worker *w)
{
    int rc;

    memset(w, 0, sizeof(*w));
    atomic_init(&w->stop, false);
    rc = pthread_mutex_init(&w->mu, NULL);
    if (rc)
        return -rc;
    rc = egpu__kube_cond_init(&w->cond);
    if (rc)
        pthread_mutex_destroy(&w->mu);
    return rc;
}

void egpu__kube_worker_destroy(struct egpu__kube_worker *w)
{
    egpu__kube_worker_stop(w);
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->mu);
}

int egpu__kube_worker_start(struct egpu__kube_worker *w, void *(*fn)(void *), void *arg)
{
    int rc;

    if (w->running)
        return -EALREADY;
    atomic_store(&w->stop, false);
    rc = pthread_create(&w->thread, NULL, fn, arg);
    if (rc)
        return -rc;
    w->running = true;
    return 0;
}

void egpu__kube_worker_stop(struct egpu__kube_worker *w)
{
    if (!w->running)
        return;
    pthread_mutex_lock(&w->mu);
    atomic_store(&w->stop, true);
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    w->running = false;
}

bool egpu__kube_worker_pause(struct egpu__kube_worker *w, long ms)
{
    int64_t deadline = egpu__kube_now_ms() + ms;

    pthread_mutex_lock(&w->mu);
    while (!atomic_load(&w->stop) && egpu__kube_now_ms() < deadline)
        egpu__kube_cond_wait_until(&w->cond, &w->mu, deadline);
    pthread_mutex_unlock(&w->mu);
    return !atomic_load(&w->stop);
}

bool egpu__kube_worker_stopping(struct egpu__kube_worker *w)
{
    return atomic_load(&w->stop);
}
