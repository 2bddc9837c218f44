/* scheduler/names.c - shared candidate lists and their memo (names_int.h). */
#include <pthread.h>
#include <string.h>

#include "egpu/core.h"
#include "names_int.h"

struct egpu__names_memo {
    pthread_mutex_t lock;
    size_t n;
    struct egpu__names *kept[EGPU__NAMES_KEPT]; /* most recent first */
};

struct egpu__names *egpu__names_new(const char **names, size_t n, char *arena, const char *text,
                                    size_t text_len)
{
    struct egpu__names *l = egpu_calloc(1, sizeof(*l));

    if (l != NULL && text != NULL) {
        l->text = egpu_malloc(text_len ? text_len : 1);
        if (l->text == NULL) {
            egpu_free(l);
            l = NULL;
        } else {
            memcpy(l->text, text, text_len);
            l->text_len = text_len;
        }
    }
    if (l == NULL) {
        egpu_free(names);
        egpu_free(arena);
        return NULL;
    }
    atomic_init(&l->refs, 1);
    l->n = n;
    l->names = names;
    l->arena = arena;
    return l;
}

struct egpu__names *egpu__names_ref(struct egpu__names *l)
{
    atomic_fetch_add(&l->refs, 1);
    return l;
}

void egpu__names_unref(struct egpu__names *l)
{
    if (l == NULL || atomic_fetch_sub(&l->refs, 1) != 1)
        return;
    egpu_free(l->names);
    egpu_free(l->arena);
    egpu_free(l->text);
    egpu_free(l);
}

struct egpu__names_memo *egpu__names_memo_new(void)
{
    struct egpu__names_memo *m = egpu_calloc(1, sizeof(*m));

    if (m != NULL && pthread_mutex_init(&m->lock, NULL) != 0) {
        egpu_free(m);
        return NULL;
    }
    return m;
}

void egpu__names_memo_free(struct egpu__names_memo *m)
{
    if (m == NULL)
        return;
    for (size_t i = 0; i < m->n; i++)
        egpu__names_unref(m->kept[i]);
    pthread_mutex_destroy(&m->lock);
    egpu_free(m);
}

size_t egpu__names_memo_get(struct egpu__names_memo *m, struct egpu__names *out[EGPU__NAMES_KEPT])
{
    size_t n;

    if (m == NULL)
        return 0;
    pthread_mutex_lock(&m->lock);
    n = m->n;
    for (size_t i = 0; i < n; i++)
        out[i] = egpu__names_ref(m->kept[i]);
    pthread_mutex_unlock(&m->lock);
    return n;
}

void egpu__names_memo_put(struct egpu__names_memo *m, struct egpu__names *l)
{
    struct egpu__names *drop = NULL;
    size_t at;

    if (m == NULL || l == NULL || l->text == NULL)
        return;
    pthread_mutex_lock(&m->lock);
    for (at = 0; at < m->n && m->kept[at] != l; at++)
        ;
    if (at == m->n) { /* not kept: make room at the end */
        if (m->n == EGPU__NAMES_KEPT)
            drop = m->kept[--m->n];
        at = m->n++;
        m->kept[at] = egpu__names_ref(l);
    }
    memmove(&m->kept[1], &m->kept[0], at * sizeof(m->kept[0]));
    m->kept[0] = l;
    pthread_mutex_unlock(&m->lock);
    egpu__names_unref(drop);
}
