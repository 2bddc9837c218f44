/* scheduler/replies.c - the filter reply made last (replies_int.h). */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "plist_int.h"
#include "replies_int.h"

#define REPLY_MAX ((size_t)64 << 20) /* as the HTTP server's reply limit */

/* One reply and what it was made of. */
struct kept {
    struct egpu__names *list; /* its names (a reference), or NULL */
    size_t n;                 /* nodes */
    size_t *why_off;          /* n: SIZE_MAX = passed, else offset in whys */
    struct egpu_buf whys;     /* the refusal texts, each NUL-terminated */
    struct egpu_buf text;     /* the reply */
    size_t *at;               /* n + 1: node i's NodeNames entry is text[at[i], at[i + 1]) */
    uint64_t members;         /* node-set stamp of by_slot; 0 = none */
    uint32_t *by_slot;        /* nby: the node in slot s is node by_slot[s], or EGPU__NO_POS */
    size_t nby;
};

struct egpu__replies {
    pthread_mutex_t lock;
    struct kept k;  /* n == 0 and text empty: nothing kept */
    uint64_t given; /* replies given from k's text or made from it */
};

static void kept_init(struct kept *k)
{
    memset(k, 0, sizeof(*k));
    egpu_buf_init(&k->whys, REPLY_MAX);
    egpu_buf_init(&k->text, REPLY_MAX);
}

static void kept_free(struct kept *k)
{
    egpu__names_unref(k->list);
    egpu_free(k->why_off);
    egpu_free(k->at);
    egpu_free(k->by_slot);
    egpu_buf_free(&k->whys);
    egpu_buf_free(&k->text);
    kept_init(k);
}

struct egpu__replies *egpu__replies_new(void)
{
    struct egpu__replies *m = egpu_calloc(1, sizeof(*m));

    if (m != NULL && pthread_mutex_init(&m->lock, NULL) != 0) {
        egpu_free(m);
        return NULL;
    }
    if (m != NULL)
        kept_init(&m->k);
    return m;
}

uint64_t egpu__replies_given(struct egpu__replies *m)
{
    uint64_t n;

    pthread_mutex_lock(&m->lock);
    n = m->given;
    pthread_mutex_unlock(&m->lock);
    return n;
}

void egpu__replies_free(struct egpu__replies *m)
{
    if (m == NULL)
        return;
    kept_free(&m->k);
    pthread_mutex_destroy(&m->lock);
    egpu_free(m);
}

/* Is the kept reply the answer for a and why (the same shared list, the
 * same verdicts and reasons)? */
static bool same(const struct kept *k, const struct egpu__wire_args *a, const char *const *why)
{
    if (k->list == NULL || k->list != a->list || k->why_off == NULL)
        return false;
    for (size_t i = 0; i < a->n; i++) {
        size_t off = k->why_off[i];

        if ((why[i] == NULL) != (off == SIZE_MAX) ||
            (why[i] != NULL && strcmp(why[i], k->whys.data + off) != 0))
            return false;
    }
    return true;
}

/* The node in k that can lend its entry to node i of a new reply: the same
 * node (by slot), which passed too, or EGPU__NO_POS. */
static uint32_t lender(const struct kept *k, const uint32_t *slots, size_t i)
{
    uint32_t j;

    if (slots[i] == EGPU_NO_SLOT || slots[i] >= k->nby)
        return EGPU__NO_POS;
    j = k->by_slot[slots[i]];
    return j != EGPU__NO_POS && k->why_off[j] == SIZE_MAX ? j : EGPU__NO_POS;
}

/* Fill nk's verdicts, index and positions for a, why and slots (may be
 * NULL). 0 or -ENOMEM. */
static int describe(struct kept *nk, const struct egpu__wire_args *a, const char *const *why,
                    const uint32_t *slots, uint64_t members)
{
    size_t n = a->n;

    nk->n = n;
    nk->why_off = egpu_malloc((n ? n : 1) * sizeof(*nk->why_off));
    nk->at = egpu_malloc((n + 1) * sizeof(*nk->at));
    if (nk->why_off == NULL || nk->at == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        nk->why_off[i] = why[i] == NULL ? SIZE_MAX : nk->whys.len;
        if (why[i] != NULL && egpu_buf_append(&nk->whys, why[i], strlen(why[i]) + 1) != 0)
            return -ENOMEM;
    }
    if (slots == NULL)
        return 0;
    nk->by_slot = egpu__slot_index(slots, n, &nk->nby);
    if (nk->by_slot == NULL)
        return -ENOMEM;
    nk->members = members;
    return 0;
}

/* Make nk's text from k: the head, each passing node's entry copied from
 * the same node's in k when it was made in the same state (first or not),
 * else made again, and the tail made for this reply's refusals. */
static int rebuild(const struct kept *k, struct kept *nk, const struct egpu__wire_args *a,
                   const char *const *why, const uint32_t *slots)
{
    size_t k_first = 0;
    bool first = true;
    int rc;

    while (k_first < k->n && k->why_off[k_first] != SIZE_MAX)
        k_first++;
    rc = egpu_buf_append(&nk->text, k->text.data, k->at[0]);
    for (size_t i = 0; rc == 0 && i < a->n; i++) {
        uint32_t j;

        nk->at[i] = nk->text.len;
        if (why[i] != NULL)
            continue;
        j = lender(k, slots, i);
        if (j != EGPU__NO_POS && (j == k_first) == first)
            rc = egpu_buf_append(&nk->text, k->text.data + k->at[j], k->at[j + 1] - k->at[j]);
        else
            rc = egpu__wire_filter_entry(&nk->text, a->names[i], first);
        first = false;
    }
    nk->at[a->n] = nk->text.len;
    if (rc == 0)
        rc = egpu__wire_filter_tail(&nk->text, a, why, !first);
    return rc;
}

/* Can most of a's passing nodes borrow their entries from k? */
static bool worth_rebuilding(const struct kept *k, const struct egpu__wire_args *a,
                             const char *const *why, const uint32_t *slots, uint64_t members)
{
    size_t passing = 0, found = 0;

    if (slots == NULL || k->by_slot == NULL || members == 0 || k->members != members ||
        k->text.len == 0)
        return false;
    for (size_t i = 0; i < a->n; i++) {
        if (why[i] == NULL) {
            passing++;
            found += lender(k, slots, i) != EGPU__NO_POS;
        }
    }
    return found * 2 >= passing;
}

int egpu__replies_filter(struct egpu__replies *m, struct egpu_buf *reply,
                         const struct egpu__wire_args *a, const char *const *why,
                         const uint32_t *slots, uint64_t members)
{
    bool rebuilt = false;
    struct kept nk;
    int rc;

    /* Busy (another filter is making its reply): this one is made alone. */
    if (m == NULL || a->full || pthread_mutex_trylock(&m->lock) != 0)
        return egpu__wire_filter_result(reply, a, why);
    if (same(&m->k, a, why)) {
        rc = egpu_buf_append(reply, m->k.text.data, m->k.text.len);
        m->given++;
        pthread_mutex_unlock(&m->lock);
        return rc;
    }
    kept_init(&nk);
    rc = describe(&nk, a, why, slots, members);
    if (rc == 0 && worth_rebuilding(&m->k, a, why, slots, members)) {
        rc = rebuild(&m->k, &nk, a, why, slots);
        rebuilt = rc == 0;
    } else if (rc == 0) {
        rc = egpu__wire_filter_result_at(&nk.text, a, why, nk.at);
    }
    if (rc == 0)
        rc = egpu_buf_append(reply, nk.text.data, nk.text.len);
    if (rc == 0) {
        m->given += rebuilt;
        nk.list = a->list != NULL ? egpu__names_ref(a->list) : NULL;
        kept_free(&m->k);
        m->k = nk;
    } else {
        kept_free(&nk);
    }
    pthread_mutex_unlock(&m->lock);
    return rc;
}
