/* scheduler/names_int.h - candidate node lists shared between requests, and
 * the memo that recognises a list sent again by its JSON text.
 *
 * Private to src/scheduler. The filter call names every candidate node and
 * the prioritize call the nodes that passed. When a pod is asked about
 * again, or kube-scheduler's feasible list comes in the same order for the
 * next pod, the NodeNames text is the same byte for byte. Streaming ~85 KB
 * of NodeNames through yajl (5,000 nodes) costs ~0.16 ms per call;
 * comparing the text with one decoded before costs a few microseconds. A
 * list once decoded is immutable and reference-counted, so a request, the
 * extender's kept verdicts and the memo can share it from any thread. A
 * list in another order is decoded in full (see plist_int.h for what is
 * kept by node instead).
 */
#ifndef EGPU_SCHED_NAMES_INT_H
#define EGPU_SCHED_NAMES_INT_H

#include <stdatomic.h>
#include <stddef.h>

/* A decoded list of node names, immutable once made. */
struct egpu__names {
    atomic_uint refs;
    size_t n;
    const char **names; /* n NUL-terminated names, into arena */
    char *arena;        /* every name's bytes */
    char *text;         /* the JSON array text they were decoded from, or NULL */
    size_t text_len;
};

/* A list owning names (n pointers into arena) and arena, both from
 * egpu_malloc, and a copy of text (text_len bytes; NULL = no text). On
 * success the list owns names and arena, refs = 1; on NULL (out of memory)
 * they are freed. */
struct egpu__names *egpu__names_new(const char **names, size_t n, char *arena, const char *text,
                                    size_t text_len);
/* Take a reference; returns l. */
struct egpu__names *egpu__names_ref(struct egpu__names *l);
/* Drop a reference; the last one frees the list. NULL is a no-op. */
void egpu__names_unref(struct egpu__names *l);

/* The lists decoded last (EGPU__NAMES_KEPT of them, the most recently used
 * first), recognised by their JSON text. Thread-safe. */
#define EGPU__NAMES_KEPT 2
struct egpu__names_memo;

/* A new empty memo, or NULL when out of memory. */
struct egpu__names_memo *egpu__names_memo_new(void);
/* Free the memo and its references. NULL is a no-op. */
void egpu__names_memo_free(struct egpu__names_memo *m);
/* The kept lists, each with a reference taken for the caller (drop them with
 * egpu__names_unref), most recent first; returns how many (0..KEPT). m may
 * be NULL (0). */
size_t egpu__names_memo_get(struct egpu__names_memo *m, struct egpu__names *out[EGPU__NAMES_KEPT]);
/* Keep l (which has text) as the most recent list, or mark it so when kept
 * already; the oldest beyond EGPU__NAMES_KEPT is dropped. m may be NULL. */
void egpu__names_memo_put(struct egpu__names_memo *m, struct egpu__names *l);

#endif /* EGPU_SCHED_NAMES_INT_H */
