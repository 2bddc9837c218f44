/* scheduler/wire_int.h - ExtenderArgs in, ExtenderFilterResult and
 * HostPriorityList out, for the extender's hot verbs (src/scheduler/wire.c).
 *
 * Private to src/scheduler. The decoder streams the body through yajl: node
 * names are copied into one arena, and only the Pod's bytes are handed to
 * jansson and egpu_sched_pod_parse. The encoders write with yajl_gen into
 * its own buffer and append that to the reply once; some also write one
 * entry of a HostPriorityList exactly as a full encoding has it (for the
 * list kept in plist.c). Nothing here allocates per node except the
 * amortised growth of the name table.
 */
#ifndef EGPU_SCHED_WIRE_INT_H
#define EGPU_SCHED_WIRE_INT_H

#include <stdint.h>
#include <yajl/yajl_gen.h>

#include "egpu/scheduler.h"

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
    const char **names;            /* n non-empty names, NUL-terminated, into arena */
    char *arena;                   /* every name's bytes */
    bool full;                     /* names come from Nodes.items (NodeList form) */
    struct egpu__wire_span *items; /* full form: n ranges of body; else NULL */
    const char *body;              /* borrowed: the request body items point into */
    bool pod_refused; /* on error: the body was ExtenderArgs, its Pod object was refused */
    json_t *pod_obj;  /* the Pod object when pod.dra (its claims are read from it), else NULL */
};

/* Decode ExtenderArgs from body (len bytes, borrowed: a full-form *a points
 * into it). Top-level keys may come in any order and unknown ones are
 * ignored; a key given twice counts once, the last one. Returns 0, or
 * EGPU_ESYNTAX / EGPU_ERANGE with err naming the problem ("ExtenderArgs:
 * malformed JSON: ...", "ExtenderArgs.Pod: metadata.name: missing",
 * "ExtenderArgs.NodeNames[3]: must be a string", ...), or -ENOMEM. On error
 * *a holds nothing to free but a->pod_refused: true when the body is JSON
 * whose Pod is an object that egpu_sched_pod_parse refused (the pod's fault,
 * not the caller's); on success free it with egpu__wire_args_free. */
int egpu__wire_args_decode(const char *body, size_t len, struct egpu__wire_args *a,
                           struct egpu_error *err) EGPU_MUST_CHECK;
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

/* A yajl generator (compact, no UTF-8 check; allocation failures inside
 * yajl stop the process, see wire.c), or NULL when its handle cannot be
 * allocated. Free with yajl_gen_free. */
yajl_gen egpu__wire_gen(void);
/* Append one HostPriority entry (score 1..10) exactly as a full
 * egpu__wire_priorities writes it there: with its separator unless first.
 * Returns 0, -ENOMEM or -EMSGSIZE. */
int egpu__wire_priority_entry(struct egpu_buf *out, const char *name, uint8_t score,
                              bool first) EGPU_MUST_CHECK;
/* Bytes of g's text so far (0 when it cannot tell). */
size_t egpu__wire_gen_len(yajl_gen g);
/* Write one HostPriority, {"Host":name,"Score":score}, with g (score 0..10;
 * above 10 is written as 10). Returns yajl_gen's status. */
yajl_gen_status egpu__wire_gen_priority(yajl_gen g, const char *name, uint8_t score);

#endif /* EGPU_SCHED_WIRE_INT_H */
