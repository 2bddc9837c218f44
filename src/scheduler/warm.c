/* scheduler/warm.c - the memo warm's thread.
 *
 * Calls egpu_extender_warm one step at a time (WARM_BUDGET node slots, so
 * the verbs wait for the cache lock about a millisecond at most) while it
 * finds work, and sleeps WARM_IDLE_MS when it finds none. What it is worth:
 * bench_extender --nodes 65000 --policy fgd-cpu-fill (docs/scheduler.md,
 * "The memo warm").
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <time.h>

#include "egpu/scheduler.h"

#define WARM_BUDGET  1024 /* node slots a step */
#define WARM_IDLE_MS 200  /* sleep when a step finds nothing to do */

struct egpu_warmer {
    struct egpu_extender *x;
    pthread_t thread;
    pthread_mutex_t lock; /* guards stop */
    pthread_cond_t wake;
    bool stop;
};

static void *warm_main(void *arg)
{
    struct egpu_warmer *w = arg;

    pthread_mutex_lock(&w->lock);
    while (!w->stop) {
        size_t looked;

        pthread_mutex_unlock(&w->lock);
        looked = egpu_extender_warm(w->x, WARM_BUDGET);
        pthread_mutex_lock(&w->lock);
        if (looked == 0 && !w->stop) {
            struct timespec until;

            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_nsec += WARM_IDLE_MS * 1000000L;
            until.tv_sec += until.tv_nsec / 1000000000L;
            until.tv_nsec %= 1000000000L;
            (void)pthread_cond_timedwait(&w->wake, &w->lock, &until);
        }
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

int egpu_warmer_start(struct egpu_extender *x, struct egpu_warmer **out, struct egpu_error *err)
{
    struct egpu_warmer *w = egpu_calloc(1, sizeof(*w));
    int rc;

    *out = NULL;
    if (w == NULL)
        return egpu_error_set(err, -ENOMEM, "memo warm: out of memory");
    w->x = x;
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->wake, NULL);
    if ((rc = pthread_create(&w->thread, NULL, warm_main, w)) != 0) {
        pthread_cond_destroy(&w->wake);
        pthread_mutex_destroy(&w->lock);
        egpu_free(w);
        return egpu_error_set(err, -rc, "memo warm: thread: %s", egpu_strerror(-rc));
    }
    *out = w;
    return 0;
}

void egpu_warmer_stop(struct egpu_warmer *w)
{
    if (w == NULL)
        return;
    pthread_mutex_lock(&w->lock);
    w->stop = true;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->wake);
    pthread_mutex_destroy(&w->lock);
    egpu_free(w);
}
