/* scheduler/replies.c - the filter reply encoded last (replies_int.h). */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "replies_int.h"

#define REPLY_MAX ((size_t)64 << 20) /* as the HTTP server's reply limit */

struct egpu__replies {
    pthread_mutex_t lock;
    struct egpu__names *list; /* the names of the kept reply (a reference); NULL = none */
    size_t *why_off;          /* list->n: SIZE_MAX = passed, else offset in whys */
    struct egpu_buf whys;     /* the refusal texts, each NUL-terminated */
    struct egpu_buf text;     /* the reply */
};

struct egpu__replies *egpu__replies_new(void)
{
    struct egpu__replies *m = egpu_calloc(1, sizeof(*m));

    if (m != NULL && pthread_mutex_init(&m->lock, NULL) != 0) {
        egpu_free(m);
        return NULL;
    }
    if (m != NULL) {
        egpu_buf_init(&m->whys, REPLY_MAX);
        egpu_buf_init(&m->text, REPLY_MAX);
    }
    return m;
}

static void forget(struct egpu__replies *m)
{
    egpu__names_unref(m->list);
    egpu_free(m->why_off);
    m->list = NULL;
    m->why_off = NULL;
    egpu_buf_reset(&m->whys);
    egpu_buf_reset(&m->text);
}

void egpu__replies_free(struct egpu__replies *m)
{
    if (m == NULL)
        return;
    forget(m);
    egpu_buf_free(&m->whys);
    egpu_buf_free(&m->text);
    pthread_mutex_destroy(&m->lock);
    egpu_free(m);
}

/* Does the kept reply answer a and why (lock held)? */
static bool same(const struct egpu__replies *m, const struct egpu__wire_args *a,
                 const char *const *why)
{
    if (m->list == NULL || m->list != a->list || a->full)
        return false;
    for (size_t i = 0; i < a->n; i++) {
        size_t off = m->why_off[i];

        if ((why[i] == NULL) != (off == SIZE_MAX) ||
            (why[i] != NULL && strcmp(why[i], m->whys.data + off) != 0))
            return false;
    }
    return true;
}

/* Keep text (the reply just encoded for a and why) in place of the last
 * (lock held). Out of memory keeps nothing. */
static void keep(struct egpu__replies *m, const struct egpu__wire_args *a, const char *const *why,
                 const char *text, size_t len)
{
    forget(m);
    m->why_off = egpu_malloc((a->n ? a->n : 1) * sizeof(*m->why_off));
    if (m->why_off == NULL)
        return;
    for (size_t i = 0; i < a->n; i++) {
        m->why_off[i] = why[i] == NULL ? SIZE_MAX : m->whys.len;
        if (why[i] != NULL && egpu_buf_append(&m->whys, why[i], strlen(why[i]) + 1) != 0)
            goto fail;
    }
    if (egpu_buf_append(&m->text, text, len) != 0)
        goto fail;
    m->list = egpu__names_ref(a->list);
    return;
fail:
    forget(m);
}

int egpu__replies_filter(struct egpu__replies *m, struct egpu_buf *reply,
                         const struct egpu__wire_args *a, const char *const *why)
{
    size_t start = reply->len;
    int rc;

    if (m == NULL || a->full || a->list == NULL || a->list->text == NULL)
        return egpu__wire_filter_result(reply, a, why);
    pthread_mutex_lock(&m->lock);
    if (same(m, a, why)) {
        rc = egpu_buf_append(reply, m->text.data, m->text.len);
        pthread_mutex_unlock(&m->lock);
        return rc;
    }
    pthread_mutex_unlock(&m->lock);
    rc = egpu__wire_filter_result(reply, a, why);
    if (rc == 0) {
        pthread_mutex_lock(&m->lock);
        keep(m, a, why, reply->data + start, reply->len - start);
        pthread_mutex_unlock(&m->lock);
    }
    return rc;
}
