/* scheduler/wire_int.h - ExtenderArgs in, ExtenderFilterResult and
 * HostPriorityList out, for the extender's hot verbs (src/scheduler/wire.c).
 *
 * Private to src/scheduler. The decoder streams the body through yajl: node
 * names are copied into one arena, and only the Pod's bytes are handed to
 * jansson and egpu_sched_pod_parse. The encoders write straight into the
 * reply buffer. Nothing here allocates per node except the amortised growth
 * of the name table.
 */
#ifndef EGPU_SCHED_WIRE_INT_H
#define EGPU_SCHED_WIRE_INT_H

#include <stdint.h>

#include "egpu/scheduler.h"
#include "names_int.h"

/* A byte range of the request body. */
struct egpu__wire_span {
    size_t off, len;
};

/* ExtenderArgs, decoded. Node names come from NodeNames when that is an
 * array (nodeCacheCapable), else from Nodes.items[*].metadata.name; in the
 * second form items[i] is the byte range of the i-th Node object in the body,
 * which the filter reply echoes verbatim. */
struct egpu__wire_args {
    struct egpu_sched_pod pod;
    size_t n;                      /* node names */
    const char **names;            /* n non-empty names, NUL-terminated: list->names */
    struct egpu__names *list;      /* the names, a reference (shared when sent before) */
    bool full;                     /* names come from Nodes.items (NodeList form) */
    struct egpu__wire_span *items; /* full form: n ranges of body; else NULL */
    const char *body;              /* borrowed: the request body items point into */
};

/* Decode ExtenderArgs from body (len bytes, borrowed: a full-form *a points
 * into it). Top-level keys may come in any order and unknown ones are
 * ignored; a key given twice counts once, the last one. memo (may be NULL)
 * holds the lists decoded last: when NodeNames is the last key and its text
 * is byte for byte one of theirs, a->list is that list and the names are not
 * parsed again (the text was checked when it was decoded, in the same place
 * of the document); a NodeNames list decoded in full as the last key is put
 * in memo. Returns 0, or
 * EGPU_ESYNTAX / EGPU_ERANGE with err naming the problem ("ExtenderArgs:
 * malformed JSON: ...", "ExtenderArgs.Pod: metadata.name: missing",
 * "ExtenderArgs.NodeNames[3]: must be a string", ...), or -ENOMEM. On error
 * *a holds nothing to free; on success free it with egpu__wire_args_free. */
int egpu__wire_args_decode(const char *body, size_t len, struct egpu__names_memo *memo,
                           struct egpu__wire_args *a, struct egpu_error *err) EGPU_MUST_CHECK;
void egpu__wire_args_free(struct egpu__wire_args *a);

/* Append ExtenderFilterResult to reply: the nodes i of a with why[i] == NULL
 * pass (as NodeNames, or as Nodes.items when a->full), the others go to
 * FailedNodes with why[i] as the message; FailedAndUnresolvableNodes is
 * empty and Error "". Returns 0, -EMSGSIZE (reply full) or -ENOMEM; reply
 * may then hold part of the text. */
int egpu__wire_filter_result(struct egpu_buf *reply, const struct egpu__wire_args *a,
                             const char *const *why) EGPU_MUST_CHECK;

/* Append HostPriorityList: [{"Host":names[i],"Score":score[i]}] for every
 * node of a with a score above 0, in order (kube-scheduler counts a host
 * missing from the list as 0: extender v1, scheduler_extender_notes.md
 * "Scores"). Same returns as egpu__wire_filter_result. */
int egpu__wire_priorities(struct egpu_buf *reply, const struct egpu__wire_args *a,
                          const uint8_t *score) EGPU_MUST_CHECK;

/* A HostPriorityList kept with where each entry lies in its text, so the
 * list for the next pod over the same nodes, where only a few scores moved
 * (a node that took the last pod), is made by encoding those entries again
 * and copying the rest: ~0.03 ms instead of ~0.5 ms for 5,000 nodes. The
 * text is always byte for byte what egpu__wire_priorities writes for the
 * same names and scores: every byte of it comes from yajl_gen, changed
 * entries from a generator in the same state (after another entry or not). */
struct egpu__wire_plist {
    struct egpu_buf text; /* the list, "" when empty */
    size_t n;             /* names */
    const char **names;   /* a copy of the n names (egpu_strv_copy); NULL = empty */
    uint8_t *score;       /* n scores, 0..10 */
    size_t *at;           /* n + 1: entry i is text[at[i], at[i + 1]), empty when score 0 */
};

/* An empty list. Free with egpu__wire_plist_free. */
void egpu__wire_plist_init(struct egpu__wire_plist *pl);
void egpu__wire_plist_free(struct egpu__wire_plist *pl);

/* Make pl->text the HostPriorityList for names[0..n) (NUL-terminated,
 * copied) with score[0..n) (0..10; 0 = left out). Patched in place when the
 * names are pl's and the same nodes are left out, else encoded in full.
 * Returns 1 (pl's text was kept or patched), 0 (encoded in full), -ENOMEM
 * or -EMSGSIZE (past 64 MiB); on error pl is empty. */
int egpu__wire_plist_set(struct egpu__wire_plist *pl, const char *const *names,
                         const uint8_t *score, size_t n) EGPU_MUST_CHECK;

#endif /* EGPU_SCHED_WIRE_INT_H */
