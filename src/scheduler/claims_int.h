/* scheduler/claims_int.h - the claims' door for the extender verbs
 * (claims.c): how filter, prioritize and bind judge a pod that uses claims
 * (egpuc.elasticgpu.io/<container>). The extender asks these two functions
 * and nothing else of the claims; what they read of the cache stays behind
 * them (cache_int.h). Both expect the caller to hold egpu_sched_cache_lock.
 */
#ifndef EGPU_SCHED_CLAIMS_INT_H
#define EGPU_SCHED_CLAIMS_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "egpu/scheduler.h"

/* The reason of a node the cache has no Node object of. */
#define EGPU__SCHED_UNKNOWN_NODE "node unknown to the elastic-gpu cache (no Node object seen)"

/* Where a pod that uses claims may go (filter, prioritize and bind), made
 * by egpu__sched_claims_judge and _place under the cache lock. About 20 KiB:
 * allocate it. */
struct egpu_sched_claim_plan {
    uint32_t nclaims;             /* the pod's claims (0: the pod uses none); 1 when
                                     its claim annotations are unreadable */
    char error[2048];             /* a reason every node fails with, or "" */
    char node[EGPU_K8S_NAME_MAX]; /* the node its bound claims' ElasticGPUs are on, "" = any */
    char node_why[2048];          /* why every other node fails */
    struct egpu_pod_request rest; /* the pod's request less the containers inside
                                     ElasticGPUs: what is placed beside (model mask as the
                                     pod's) */
    uint32_t rest_of[EGPU_CONTAINERS_MAX]; /* rest.containers[i] is the pod's rest_of[i] */
    uint32_t ninside;                      /* containers of bound claims */
    uint32_t nwait;                        /* containers of WaitForFirstConsumer claims */
    struct {
        uint32_t container;           /* index in the pod's request */
        char egpu[EGPU_K8S_NAME_MAX]; /* the ElasticGPU it goes inside */
    } inside[EGPU_CONTAINERS_MAX];
    struct {
        uint32_t container;                 /* index in the pod's request, placed by it */
        char claim[EGPU_K8S_NAME_MAX];      /* the claim, to annotate at bind */
        char class_name[EGPU_K8S_NAME_MAX]; /* its class (nodeSelector, models) */
    } wait[EGPU_CONTAINERS_MAX];
};

/* A WaitForFirstConsumer claim to annotate with where bind put its pod. */
struct egpu__sched_claim_mark {
    char claim[EGPU_K8S_NAME_MAX];
    char *gpus; /* GPU object names, comma-separated (the caller egpu_frees it) */
};

/* Judge pod, which uses claims, on the nodes names[0..n) of cluster c
 * (filter and prioritize): plan (caller-allocated scratch) gets the pod's
 * claim plan; a node passes when the plan allows it (the bound claims'
 * node, the WaitForFirstConsumer classes' nodes) and placer p finds room
 * there for the plan's rest (the containers inside ElasticGPUs take no more
 * room), unless bind would refuse it as ambiguous. v[i] gets node i's
 * verdict (its score; with load_aware the load of the cards it would get).
 * With why (may be NULL), why[i] is NULL for a passing node, else its
 * reason, a C string inside reasons (bounded; the caller frees it) or a
 * static one. Returns 0 or -ENOMEM (reasons full). */
int egpu__sched_claims_judge(struct egpu_sched_cache *cache, struct egpu_placer *p,
                             struct egpu_cluster *c, const struct egpu_sched_pod *pod,
                             bool load_aware, struct egpu_sched_claim_plan *plan,
                             const char *const *names, size_t n, struct egpu_verdict *v,
                             const char **why, struct egpu_buf *reasons) EGPU_MUST_CHECK;

/* Place pod, which uses claims, on node (bind): plan as above; the plan
 * must allow the node, the rest must fit there (placer p), and the
 * containers inside ElasticGPUs go onto their cards (*pick: the pod's whole
 * pick). For each WaitForFirstConsumer claim marks[i] (EGPU_CONTAINERS_MAX
 * entries) gets the claim and the cards chosen, *nmarks how many; the
 * caller egpu_frees marks[i].gpus for i < *nmarks, also on a failure.
 * Returns EGPU_BIND_OK, or EGPU_BIND_NO_FIT with msg (mlen bytes) saying
 * why. */
enum egpu_bind_result
egpu__sched_claims_place(struct egpu_sched_cache *cache, struct egpu_placer *p,
                         struct egpu_cluster *c, const struct egpu_sched_pod *pod,
                         struct egpu_node *node, struct egpu_sched_claim_plan *plan,
                         struct egpu_pick *pick, struct egpu__sched_claim_mark *marks,
                         uint32_t *nmarks, char *msg, size_t mlen);

#endif /* EGPU_SCHED_CLAIMS_INT_H */
