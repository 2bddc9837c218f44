/* scheduler/ahead.c - prioritize's reply encoded ahead (see ahead_int.h).
 *
 * One worker thread, one posted job at a time. A job is reference counted:
 * the worker holds it while encoding outside the lock, and a newer post may
 * replace it meanwhile; the last holder frees it. The encoded reply is kept
 * for the token it was made for until the next post.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include "ahead_int.h"
#include "wire_int.h"

#define AHEAD_REPLY_MAX ((size_t)64 << 20) /* as the HTTP server's reply limit */

struct job {
    unsigned refs; /* under the lock */
    uint64_t token;
    size_t n;
    const char **names; /* a copy of the n names (egpu_strv_copy) */
    uint8_t *scores;
};

struct egpu__ahead {
    pthread_mutex_t lock;
    pthread_cond_t cond; /* a post, a reply done, or stop */
    pthread_t thread;
    bool stop;
    struct job *posted;  /* the last post; NULL = none */
    bool picked;         /* the worker has taken posted */
    struct egpu_buf out; /* the reply encoded for done_token */
    uint64_t done_token; /* 0 = no reply ready */
    struct job *encoded; /* the job out was encoded for (worker only); NULL = none */
};

/* Do jobs a and b ask for the same reply (same names and scores)? */
static bool same_job(const struct job *a, const struct job *b)
{
    return a != NULL && b != NULL && a->n == b->n && memcmp(a->scores, b->scores, a->n) == 0 &&
           egpu_strv_equal(a->names, b->names, a->n);
}

static void job_put(struct job *j)
{
    if (j == NULL || --j->refs > 0)
        return;
    egpu_free(j->names);
    egpu_free(j->scores);
    egpu_free(j);
}

static void *worker(void *arg)
{
    struct egpu__ahead *ah = arg;

    pthread_mutex_lock(&ah->lock);
    for (;;) {
        struct egpu__wire_args a;
        struct egpu_buf out;
        struct job *j;
        int rc;

        while (!ah->stop && (ah->posted == NULL || ah->picked))
            pthread_cond_wait(&ah->cond, &ah->lock);
        if (ah->stop)
            break;
        j = ah->posted;
        j->refs++;
        ah->picked = true;
        pthread_mutex_unlock(&ah->lock);

        /* The reply made last, when this job asks for the same one: pod
         * after pod, the same nodes with the same scores. */
        if (same_job(j, ah->encoded)) {
            pthread_mutex_lock(&ah->lock);
            if (ah->posted == j)
                ah->done_token = j->token;
            job_put(j);
            pthread_cond_broadcast(&ah->cond);
            continue;
        }
        memset(&a, 0, sizeof(a));
        a.n = j->n;
        a.names = j->names;
        egpu_buf_init(&out, AHEAD_REPLY_MAX);
        rc = egpu__wire_priorities(&out, &a, j->scores);

        pthread_mutex_lock(&ah->lock);
        if (ah->posted == j && rc == 0) {
            egpu_buf_free(&ah->out);
            ah->out = out;
            ah->done_token = j->token;
            job_put(ah->encoded);
            ah->encoded = j;
            j->refs++;
        } else {
            egpu_buf_free(&out);
        }
        job_put(j);
        pthread_cond_broadcast(&ah->cond);
    }
    pthread_mutex_unlock(&ah->lock);
    return NULL;
}

struct egpu__ahead *egpu__ahead_new(void)
{
    struct egpu__ahead *ah = egpu_calloc(1, sizeof(*ah));

    if (ah == NULL)
        return NULL;
    pthread_mutex_init(&ah->lock, NULL);
    pthread_cond_init(&ah->cond, NULL);
    egpu_buf_init(&ah->out, AHEAD_REPLY_MAX);
    if (pthread_create(&ah->thread, NULL, worker, ah) != 0) {
        pthread_cond_destroy(&ah->cond);
        pthread_mutex_destroy(&ah->lock);
        egpu_free(ah);
        return NULL;
    }
    return ah;
}

void egpu__ahead_free(struct egpu__ahead *ah)
{
    if (ah == NULL)
        return;
    pthread_mutex_lock(&ah->lock);
    ah->stop = true;
    pthread_cond_broadcast(&ah->cond);
    pthread_mutex_unlock(&ah->lock);
    pthread_join(ah->thread, NULL);
    job_put(ah->posted);
    job_put(ah->encoded);
    egpu_buf_free(&ah->out);
    pthread_cond_destroy(&ah->cond);
    pthread_mutex_destroy(&ah->lock);
    egpu_free(ah);
}

int egpu__ahead_post(struct egpu__ahead *ah, uint64_t token, const char *const *names,
                     const uint8_t *scores, size_t n)
{
    struct job *j = egpu_calloc(1, sizeof(*j)), *old;

    if (j != NULL) {
        j->names = egpu_strv_copy(names, n);
        j->scores = egpu_malloc(n ? n : 1);
    }
    if (j == NULL || j->names == NULL || j->scores == NULL) {
        if (j != NULL) {
            j->refs = 1;
            job_put(j);
        }
        return -ENOMEM;
    }
    if (n)
        memcpy(j->scores, scores, n);
    j->refs = 1;
    j->token = token;
    j->n = n;
    pthread_mutex_lock(&ah->lock);
    old = ah->posted;
    ah->posted = j;
    ah->picked = false;
    ah->done_token = 0;
    job_put(old);
    pthread_cond_broadcast(&ah->cond);
    pthread_mutex_unlock(&ah->lock);
    return 0;
}

int egpu__ahead_take(struct egpu__ahead *ah, uint64_t token, const char *const *names, size_t n,
                     struct egpu_buf *reply)
{
    struct job *j;
    int rc = 0;

    pthread_mutex_lock(&ah->lock);
    j = ah->posted;
    if (j == NULL || j->token != token || j->n != n || !egpu_strv_equal(j->names, names, n))
        goto out;
    /* Until its reply is done, or a newer post replaced it (a miss). An
     * encoding that failed leaves done_token 0 with picked set and the job
     * released: that is a miss too. */
    while (ah->posted == j && ah->done_token != token && !(ah->picked && j->refs == 1))
        pthread_cond_wait(&ah->cond, &ah->lock);
    if (ah->posted == j && ah->done_token == token) {
        rc = egpu_buf_append(reply, ah->out.data ? ah->out.data : "", ah->out.len);
        if (rc == 0)
            rc = 1;
    }
out:
    pthread_mutex_unlock(&ah->lock);
    return rc;
}
