/* scheduler/plist.c - the HostPriorityList made last (plist_int.h). */
#include <errno.h>
#include <string.h>

#include "plist_int.h"
#include "wire_int.h"

#define PLIST_TEXT_MAX ((size_t)64 << 20) /* as the HTTP server's reply limit */
#define NO_POS         UINT32_MAX         /* in by_slot: no entry for that node */

/* The index of a list by node: for nodes[0..n) given by their slots
 * (EGPU_NO_SLOT for none), at[s] is the position of the node in slot s (the
 * last one when named twice) or NO_POS, for s < *nby (set to the largest
 * slot + 1). Returns the array (egpu_free it), or NULL when out of memory. */
static uint32_t *slot_index(const uint32_t *slots, size_t n, size_t *nby)
{
    uint32_t *at;

    *nby = 0;
    for (size_t i = 0; i < n; i++) {
        if (slots[i] != EGPU_NO_SLOT && slots[i] >= *nby)
            *nby = (size_t)slots[i] + 1;
    }
    at = egpu_malloc((*nby ? *nby : 1) * sizeof(*at));
    if (at == NULL)
        return NULL;
    for (size_t s = 0; s < *nby; s++)
        at[s] = NO_POS;
    for (size_t i = 0; i < n; i++) {
        if (slots[i] != EGPU_NO_SLOT)
            at[slots[i]] = (uint32_t)i;
    }
    return at;
}

void egpu__plist_init(struct egpu__plist *pl)
{
    memset(pl, 0, sizeof(*pl));
    egpu_buf_init(&pl->text, PLIST_TEXT_MAX);
}

void egpu__plist_free(struct egpu__plist *pl)
{
    egpu_free(pl->score);
    egpu_free(pl->at);
    egpu_free(pl->by_slot);
    egpu_buf_free(&pl->text);
    egpu__plist_init(pl);
}

/* What a new list is made of: its text, positions, scores and index. */
struct made {
    struct egpu_buf text;
    size_t *at;
    uint8_t *score;
    uint32_t *by_slot;
    size_t nby;
};

static void made_free(struct made *m)
{
    egpu_buf_free(&m->text);
    egpu_free(m->at);
    egpu_free(m->score);
    egpu_free(m->by_slot);
}

/* Allocate what a list of n nodes needs, its node index made from slots.
 * 0 or -ENOMEM. */
static int made_alloc(struct made *m, const uint32_t *slots, const uint8_t *score, size_t n)
{
    memset(m, 0, sizeof(*m));
    egpu_buf_init(&m->text, PLIST_TEXT_MAX);
    m->at = egpu_malloc((n + 1) * sizeof(*m->at));
    m->score = egpu_malloc(n ? n : 1);
    if (m->at == NULL || m->score == NULL)
        return -ENOMEM;
    if (n)
        memcpy(m->score, score, n);
    m->by_slot = slot_index(slots, n, &m->nby);
    return m->by_slot == NULL ? -ENOMEM : 0;
}

/* Make pl from m (taking it), for n nodes with the slots' stamp members. */
static void adopt(struct egpu__plist *pl, struct made *m, size_t n, uint64_t members)
{
    egpu__plist_free(pl);
    pl->text = m->text;
    pl->at = m->at;
    pl->score = m->score;
    pl->by_slot = m->by_slot;
    pl->nby = m->nby;
    pl->n = n;
    pl->members = members;
}

/* Encode the list in full, noting where each entry lies. */
static int encode(struct made *m, const char *const *names, const uint8_t *score, size_t n)
{
    yajl_gen g = egpu__wire_gen();
    yajl_gen_status st;
    const unsigned char *buf;
    size_t len;
    int rc;

    if (g == NULL)
        return -ENOMEM;
    st = yajl_gen_array_open(g);
    for (size_t i = 0; st == yajl_gen_status_ok && i < n; i++) {
        m->at[i] = egpu__wire_gen_len(g);
        if (score[i] != 0)
            st = egpu__wire_gen_priority(g, names[i], score[i]);
    }
    m->at[n] = egpu__wire_gen_len(g);
    if (st == yajl_gen_status_ok)
        st = yajl_gen_array_close(g);
    if (st == yajl_gen_status_ok)
        st = yajl_gen_get_buf(g, &buf, &len);
    rc = st == yajl_gen_status_ok ? egpu_buf_append(&m->text, buf, len) : -EINVAL;
    yajl_gen_free(g);
    return rc;
}

/* Position in pl of an entry that can stand for node i (in slot slots[i])
 * at score s: the same node, found by its slot, with the same score, or
 * NO_POS. */
static uint32_t old_entry(const struct egpu__plist *pl, const uint32_t *slots, size_t i, uint8_t s)
{
    uint32_t j;

    if (slots[i] == EGPU_NO_SLOT || slots[i] >= pl->nby)
        return NO_POS;
    j = pl->by_slot[slots[i]];
    return j != NO_POS && pl->score[j] == s ? j : NO_POS;
}

/* Make m from pl: every listed entry copied from pl where an entry of the
 * same node and score was made in the same state (first or not), else
 * encoded again. */
static int rebuild(const struct egpu__plist *pl, struct made *m, const char *const *names,
                   const uint32_t *slots, const uint8_t *score, size_t n)
{
    size_t old_first = 0;
    bool first = true;
    int rc;

    while (old_first < pl->n && pl->score[old_first] == 0)
        old_first++;
    rc = egpu_buf_append(&m->text, pl->text.data, pl->at[0]); /* "[" */
    for (size_t i = 0; rc == 0 && i < n; i++) {
        uint32_t j;

        m->at[i] = m->text.len;
        if (score[i] == 0)
            continue;
        j = old_entry(pl, slots, i, score[i]);
        if (j != NO_POS && (j == old_first) == first)
            rc = egpu_buf_append(&m->text, pl->text.data + pl->at[j], pl->at[j + 1] - pl->at[j]);
        else
            rc = egpu__wire_priority_entry(&m->text, names[i], score[i], first);
        first = false;
    }
    m->at[n] = m->text.len;
    if (rc == 0) /* "]" */
        rc = egpu_buf_append(&m->text, pl->text.data + pl->at[pl->n], pl->text.len - pl->at[pl->n]);
    return rc;
}

/* Are slots[0..n) pl's nodes in pl's order? */
static bool same_order(const struct egpu__plist *pl, const uint32_t *slots, size_t n)
{
    if (pl->n != n)
        return false;
    for (size_t i = 0; i < n; i++) {
        if (slots[i] == EGPU_NO_SLOT || slots[i] >= pl->nby || pl->by_slot[slots[i]] != i)
            return false;
    }
    return true;
}

int egpu__plist_set(struct egpu__plist *pl, const char *const *names, const uint32_t *slots,
                    uint64_t members, const uint8_t *score, size_t n)
{
    bool by_slot = pl->at != NULL && members != 0 && pl->members == members;
    size_t listed = 0, found = 0;
    struct made m;
    int rc;

    if (by_slot && same_order(pl, slots, n) && (n == 0 || memcmp(score, pl->score, n) == 0))
        return 1; /* the very same list */
    /* Made from the last list only when most of it can be copied: encoding
     * entry by entry costs more per entry than one full encoding. */
    for (size_t i = 0; by_slot && i < n; i++) {
        if (score[i] != 0) {
            listed++;
            found += old_entry(pl, slots, i, score[i]) != NO_POS;
        }
    }
    rc = made_alloc(&m, slots, score, n);
    if (rc == 0 && by_slot && found * 2 >= listed) {
        rc = rebuild(pl, &m, names, slots, score, n);
        if (rc == 0)
            rc = 1;
    } else if (rc == 0) {
        rc = encode(&m, names, score, n);
    }
    if (rc < 0) {
        made_free(&m);
        egpu__plist_free(pl);
        return rc;
    }
    adopt(pl, &m, n, members);
    return rc;
}
