/* scheduler/cache_int.h - what the cluster cache (cache.c) and the claims'
 * room (claims.c) share: the cache's entries and the locked helpers of
 * cache.c that claims.c calls.
 *
 * DESIGN: the calls run one way. cache.c counts pods on nodes, applies
 * ElasticGPU reservations (a node's rebuild applies them again) and parks
 * a claim's users while what serves the claim changes, since counting a pod
 * and applying a reservation call each other. claims.c holds the
 * ElasticGPU, claim and class events, the claim plans and their judging,
 * and asks cache.c through the functions below; cache.c calls nothing of
 * claims.c. Every function here expects the caller to hold the cache lock.
 */
#ifndef EGPU_SCHED_CACHE_INT_H
#define EGPU_SCHED_CACHE_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "egpu/api.h"
#include "egpu/scheduler.h"

#define POD_KEY_MAX (2 * EGPU_K8S_NAME_MAX)

#define SCHED_GPU_MODEL_MAX 128 /* spec.model, bytes incl. NUL */

struct egpu__sched_gpu {
    /* spec.uuid; spec.model ("unknown" when none, shorter than
     * SCHED_GPU_MODEL_MAX); the GPU object's metadata.name; status.health
     * when not EGPU_API_GPU_HEALTHY ("" healthy): stored as long as they
     * are, one after another, in strs (owned, strs_len bytes; set by
     * gpu_strs in cache.c), so a card takes about 60 bytes of names instead
     * of 511 */
    const char *uuid, *model, *name, *health;
    char *strs;
    uint32_t strs_len;
    uint32_t index;
    uint32_t mem_mib;
    bool shadowed; /* another GPU object owns this UUID: left out of the core */
    /* spec.topology (owned, NULL when none; allocated, as most cards have
     * none): compared by content, so a change rebuilds the node. */
    uint32_t npeers;
    struct egpu_api_gpu_peer *peers;
    /* status.used, kept out of the comparison that decides a rebuild: */
    uint16_t load_pct; /* egpu_load_pct of the report; EGPU_LOAD_UNKNOWN = none */
    int64_t load_at_s; /* its updateTime, Unix seconds (no later than its arrival); 0 = none */
};

struct egpu__sched_pod_entry;
struct egpu__sched_resv;
struct egpu__sched_claim;
struct egpu__sched_dra; /* DRA mode's ResourceClaims (dra.c, dra_int.h) */

/* One claimed container of a pod (egpuc.elasticgpu.io/<container>), linked
 * into its claim's list of users. */
struct egpu__sched_claim_use {
    struct egpu__sched_pod_entry *pod;
    struct egpu__sched_claim *ce;
    struct egpu__sched_claim_use *prev, *next; /* ce->uses */
};

/* An ElasticGPUClaim as far as the scheduler needs it: what the claims
 * informer says of it (known), the pods whose containers use it and the
 * ElasticGPUs whose spec.claimRef names it. Kept while any of the three
 * refers to it, under "namespace/name". */
struct egpu__sched_claim {
    char key[2 * EGPU_K8S_NAME_MAX];
    char ns[EGPU_NAMESPACE_MAX], name[EGPU_K8S_NAME_MAX];
    bool known; /* the claim object is cached */
    char uid[EGPU_API_UID_MAX];
    char class_name[EGPU_K8S_NAME_MAX]; /* spec.elasticGPUClassName, "" = the default class */
    enum egpu_api_claim_phase phase;
    char bound_egpu[EGPU_K8S_NAME_MAX]; /* status.elasticGPUName */
    struct egpu__sched_claim_use *uses;
    struct egpu__sched_resv *resvs; /* through egpu__sched_resv.claim_next */
};

struct egpu__sched_node {
    char name[EGPU_K8S_NAME_MAX];
    struct egpu__sched_pod_entry
        *pods;        /* pods placed here (list through egpu__sched_pod_entry.next) */
    uint32_t waiting; /* of which placed by an assignment and not yet allocated */
    struct egpu__sched_node *wprev, *wnext; /* egpu_sched_cache.waiting, while waiting > 0 */
    struct egpu__sched_resv *resvs;         /* ElasticGPUs naming this node, oldest first */
    bool has_node;                          /* the Node object is known */
    char *labels;      /* its metadata.labels packed (egpu__sched_labels_pack), NULL = none */
    size_t labels_len; /* bytes of labels */
    int64_t cpu_milli; /* allocatable */
    int64_t mem_mib;
    /* Its GPU objects: gpus[0..ngpus) of gpus_cap allocated (NULL when
     * none; grown and shrunk as GPU objects come and go, at most
     * EGPU_NODE_GPUS_MAX), so a node record holds the cards it has instead
     * of 64 slots of which 8 are used. Slots past ngpus are zeroed. */
    uint32_t ngpus, gpus_cap;
    struct egpu__sched_gpu *gpus;
};

struct egpu__sched_pod_entry {
    struct egpu_sched_pod pod;
    bool counted;                  /* holds an assignment in the core under key */
    bool reserved;                 /* placed by our bind; the watch has not confirmed it yet */
    bool unresolved;               /* counted without its cards (they could not be matched) */
    bool warned;                   /* unresolved, and logged as a warning (after the sync) */
    struct egpu__sched_node *home; /* the node it is placed on, or NULL */
    bool waiting;                  /* counted in home->waiting (see is_waiting) */
    struct egpu__sched_pod_entry *prev, *next;
    uint64_t parked; /* uncounted by egpu__sched_park_users under this tag, to be counted again */
    uint32_t nuses;  /* pod.claims[i] is uses[i]'s claim */
    struct egpu__sched_claim_use *uses; /* pod.nclaims entries while linked, else NULL */
    /* inside[i]: container i of pod.req counted inside this ElasticGPU
     * (whose occupant this pod is), not beside it; NULL = beside. The
     * array (EGPU_CONTAINERS_MAX entries, owned) is allocated only while the
     * pod is counted with a container inside one (few pods use claims):
     * NULL = every container beside, or not counted. */
    struct egpu__sched_resv **inside;
    char key[]; /* "namespace/name", as long as it is (pod_entry_new) */
};

/* ElasticGPU reservations (egpu_api_egpu_reservation): capacity held on
 * cards for a claim. Each is an assignment in the core under "elasticgpu:"
 * + its name (pod keys always hold a '/', so the two never meet). */
#define RESV_PREFIX     "elasticgpu:"
#define RESV_PREFIX_LEN (sizeof(RESV_PREFIX) - 1)

#define RESV_OFF      EGPU_SCHED_RESV_OFF
#define RESV_WAITING  EGPU_SCHED_RESV_WAITING
#define RESV_APPLIED  EGPU_SCHED_RESV_APPLIED
#define RESV_OVERFILL EGPU_SCHED_RESV_OVERFILL

struct egpu__sched_resv {
    char key[RESV_PREFIX_LEN + EGPU_K8S_NAME_MAX]; /* RESV_PREFIX + metadata.name */
    const char *name;                              /* key + RESV_PREFIX_LEN: the map's key */
    uint64_t seq;                                  /* arrival order: older ones are applied first */
    char node[EGPU_K8S_NAME_MAX];                  /* spec.nodeName */
    struct egpu__sched_node *home;                 /* node_info of node */
    struct egpu__sched_resv *next;                 /* home->resvs, by seq */
    bool holds;                                    /* egpu_api_egpu_reservation said so */
    enum egpu_sched_resv_state state, reported;    /* now, and as last logged */
    bool was_applied;                              /* rebuild(): held before the node was rebuilt */
    uint64_t held_mem_mib;                  /* memory held while applied (whole cards: theirs) */
    uint32_t core_milli, mem_mib, ncards;   /* struct egpu_reservation's */
    struct egpu__sched_claim *claim;        /* spec.claimRef's claim, or NULL */
    struct egpu__sched_resv *claim_next;    /* claim->resvs */
    char claim_uid[EGPU_API_UID_MAX];       /* spec.claimRef.uid, "" = any */
    bool released;                          /* phase Released: its claim is gone, it serves none */
    struct egpu__sched_pod_entry *occupant; /* the pod with a container counted inside it */
    char why[EGPU_ERRMSG_MAX];              /* why it is not applied (waiting, overfill, off) */
    char gpus[][EGPU_K8S_NAME_MAX];         /* ncards GPU object names */
};

struct egpu_sched_cache {
    pthread_mutex_t lock;
    struct egpu_cluster *cluster;
    struct egpu_map *nodes;           /* name -> struct egpu__sched_node */
    struct egpu_map *pods;            /* key -> struct egpu__sched_pod_entry */
    struct egpu_map *owners;          /* GPU UUID -> struct gpu_owner */
    struct egpu_map *resvs;           /* ElasticGPU name -> struct egpu__sched_resv */
    struct egpu_map *claims;          /* "namespace/name" -> struct egpu__sched_claim */
    struct egpu_map *classes;         /* ElasticGPUClass name -> struct egpu_api_class */
    uint64_t park_seq;                /* last egpu__sched_park_users tag handed out */
    uint64_t resv_seq;                /* last egpu__sched_resv.seq handed out */
    uint64_t resv_overfills;          /* times a reservation was found not to fit */
    size_t nshadowed;                 /* GPU slots left out as duplicates */
    uint64_t assigned_ignored;        /* changes to a recorded assigned annotation not believed */
    struct egpu__sched_node *waiting; /* the nodes with waiting > 0 (few: pods between bind and
                                       * the agent's elasticgpu.io/allocated) */
    bool load_aware;                  /* give the core the cards' fresh loads */
    int64_t load_max_age_s;           /* a report older than this is unknown */
    int64_t load_expiry_s;            /* no fresh load turns stale before this; INT64_MAX = none */
    bool synced;                 /* egpu_sched_cache_synced was called: every kind listed once */
    struct egpu__sched_dra *dra; /* ResourceClaims (dra.c), NULL until the first one */
};

/* The node a pod counts on (its assigned node, else spec.nodeName), or NULL
 * when it is not placed (or terminal). Borrowed from p. */
const char *egpu__sched_target_of(const struct egpu_sched_pod *p);
/* Position of GPU container name in p's request, or UINT32_MAX. */
uint32_t egpu__sched_container_of(const struct egpu_sched_pod *p, const char *name);

/* A node's metadata.labels (an object, or NULL) packed into one allocation
 * (caller egpu_free()s it): each label whose value is a string without a NUL
 * as key, NUL, value, NUL, in the object's order, then one more NUL; *len its
 * bytes. A tenth of the labels as jansson values (some 1.6 KB for a cloud
 * node's ten labels). *out NULL when there is none. Returns 0 or -ENOMEM. */
int egpu__sched_labels_pack(const json_t *labels, char **out, size_t *len) EGPU_MUST_CHECK;
/* The value of label key in packed labels (NULL allowed), or NULL: an
 * egpu_api_label_fn. */
const char *egpu__sched_label(const void *packed, const char *key);

/* The ElasticGPU that serves claim ce (NULL allowed): one whose
 * spec.claimRef names it, not Released, whose claimRef.uid is the claim's
 * (when both are known); the one the claim's status.elasticGPUName names
 * first, else the oldest. NULL when none. */
struct egpu__sched_resv *egpu__sched_claim_resv(const struct egpu__sched_claim *ce);
/* Does container request cr fit inside ElasticGPU r (egpu_api_resv_can_hold)? */
bool egpu__sched_fits_inside(const struct egpu__sched_resv *r,
                             const struct egpu_container_request *cr);
/* The card UUID of r's card k, "" when its GPU object is not on r's node
 * (borrowed from the cache). */
const char *egpu__sched_resv_uuid(const struct egpu__sched_resv *r, uint32_t k);

/* Uncount the users of claim ce (those counted on node, or anywhere when
 * node is NULL) and mark them with a new tag for egpu__sched_claim_settle.
 * Returns the tag (0 when ce is NULL). */
uint64_t egpu__sched_park_users(struct egpu_sched_cache *c, struct egpu__sched_claim *ce,
                                const char *node);
/* Claim ce's users were parked under tag: apply its ElasticGPUs that can
 * hold now, count the users again (inside or beside), then let the
 * reservations on their nodes try the capacity freed. ce may be NULL. */
void egpu__sched_claim_settle(struct egpu_sched_cache *c, struct egpu__sched_claim *ce,
                              uint64_t tag);

/* Hold r in the core if it holds capacity and is not held yet (else it
 * waits, or is an overfill: logged and counted). */
void egpu__sched_resv_apply(struct egpu_sched_cache *c, struct egpu__sched_resv *r);
/* Give back what r holds in the core (state becomes waiting, unlogged). */
void egpu__sched_resv_release(struct egpu_sched_cache *c, struct egpu__sched_resv *r);
/* Capacity on node (may be NULL) was freed: try its waiting and overfilled
 * reservations again, oldest first. */
void egpu__sched_resv_retry(struct egpu_sched_cache *c, const char *node);
/* Link r into its node's list (by seq; the node's entry made when new).
 * Returns 0 or -ENOMEM. */
int egpu__sched_resv_link(struct egpu_sched_cache *c, struct egpu__sched_resv *r) EGPU_MUST_CHECK;
/* Take r out of its node's list (the node's entry forgotten when nothing
 * else refers to it). */
void egpu__sched_resv_unlink(struct egpu_sched_cache *c, struct egpu__sched_resv *r);

/* The entry of claim ns/name (owned by the cache); created when create.
 * NULL when not there, out of memory or the names are too long. */
struct egpu__sched_claim *egpu__sched_claim_get(struct egpu_sched_cache *c, const char *ns,
                                                const char *name, bool create);
/* Forget ce (NULL allowed) when nothing refers to it any more: it is then
 * freed. */
void egpu__sched_claim_drop_if_unused(struct egpu_sched_cache *c, struct egpu__sched_claim *ce);

/* Is node one where a pod is placed by an assignment and not yet marked
 * allocated (egpu_sched_cache_waiting_next_locked's nodes)? O(1). */
bool egpu__sched_cache_node_waits(struct egpu_sched_cache *c, const char *node);

#endif /* EGPU_SCHED_CACHE_INT_H */
