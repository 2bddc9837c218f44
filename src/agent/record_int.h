/* agent/record_int.h - the agent's record of what was written into each
 * allocation dir (record.c), private to src/agent: the source of the
 * allocation metrics, never a file a container can write.
 *
 * Threads: every function takes the record's own lock; any thread may call.
 */
#ifndef EGPU_AGENT_RECORD_INT_H
#define EGPU_AGENT_RECORD_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "allocdir_int.h"
#include "egpu/api.h"
#include "egpu/core.h"

/* What PreStartContainer wrote into one allocation dir (its limits.json).
 * Rebuilt at start from the limits.json files of allocation dirs that are
 * the agent's own (egpu__fs_is_private, mode 0755). */
struct egpu__alloc_limits {
    char dir[EGPU_ALLOCDIR_NAME_LEN + 1]; /* the allocation dir's name */
    char ns[EGPU_K8S_NAME_MAX];
    char pod[EGPU_K8S_NAME_MAX];
    char container[EGPU_K8S_NAME_MAX];
    char gpus[EGPU_NODE_GPUS_MAX][EGPU_UUID_MAX]; /* the cards' UUIDs */
    uint32_t ngpus;                               /* 1..EGPU_NODE_GPUS_MAX */
    uint32_t core_pct;                            /* per card, 1..100 */
    uint32_t mem_mib;                             /* per card */
};

/* The record: one entry per allocation dir. Caller-owned storage:
 * egpu__record_init, then egpu__record_close. */
struct egpu__record {
    pthread_mutex_t lock;             /* guards what follows */
    struct egpu__alloc_limits *items; /* egpu_malloc'd */
    size_t n, cap;
};

/* Called for each entry by egpu__record_each, with the record's lock held:
 * l is borrowed for the call; cb must not call back into the record. */
typedef void (*egpu__record_cb)(void *data, const struct egpu__alloc_limits *l);

/* An empty record. */
void egpu__record_init(struct egpu__record *r);

/* Free the entries; r may be initialized again. */
void egpu__record_close(struct egpu__record *r);

/* Record l (copied) as what was written into the allocation dir l->dir,
 * replacing an earlier entry of that dir. Returns 0 or -ENOMEM (the record
 * is unchanged then). */
int egpu__record_put(struct egpu__record *r, const struct egpu__alloc_limits *l) EGPU_MUST_CHECK;

/* Forget the entry of the dir name (the cleanup removed it); none is a
 * no-op. */
void egpu__record_drop(struct egpu__record *r, const char *name);

/* Call cb for every entry (see egpu__record_cb). */
void egpu__record_each(struct egpu__record *r, egpu__record_cb cb, void *data);

/* Decode limits.json's text (NUL-terminated) into *out (dir left empty):
 * pod, namespace, container (strings under EGPU_K8S_NAME_MAX bytes), gpus
 * (1..EGPU_NODE_GPUS_MAX strings under EGPU_UUID_MAX bytes), core (integer
 * 1..100), memory (integer 0..4294967295). Returns 0 or EGPU_ESYNTAX with
 * err naming the field. */
int egpu__record_decode(const char *text, struct egpu__alloc_limits *out,
                        struct egpu_error *err) EGPU_MUST_CHECK;

/* Fill r at start from the limits.json of every allocation dir below
 * alloc_root that is the agent's own (owner and mode: no container can have
 * written it); what cannot be read or believed is logged and skipped. */
void egpu__record_load(struct egpu__record *r, const char *alloc_root);

#endif /* EGPU_AGENT_RECORD_INT_H */
