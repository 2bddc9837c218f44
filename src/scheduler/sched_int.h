/* scheduler/sched_int.h - egpu-scheduler's private parts: options and the
 * API-server side (informers, annotate, bind). */
#ifndef EGPU_SCHED_INT_H
#define EGPU_SCHED_INT_H

#include "egpu/cli.h"
#include "egpu/kube.h"
#include "egpu/scheduler.h"

/* nodes, GPUs, pods, ElasticGPUs, claims, classes, and with dra
 * ResourceClaims, in this order */
#define SCHED_INFORMERS 7

struct egpu_sched_api {
    struct egpu_kube *kube;
    struct egpu_sched_cache *cache;
    bool dra; /* --dra: follow ResourceClaims too (else that informer is never made) */
    struct egpu_kube_informer *informers[SCHED_INFORMERS];
    atomic_ulong refused[SCHED_INFORMERS]; /* objects the cache refused (malformed), logged */
};

/* The kind of informer i ("Node", "GPU", "Pod", "ElasticGPU",
 * "ElasticGPUClaim", "ElasticGPUClass", "ResourceClaim"), for logs and
 * metric labels. */
const char *egpu__sched_api_kind(int i);

/* Objects of informer i left out of the cache since the start: those the
 * informer skipped (no event, no usable name) and those the cache refused as
 * malformed. Each was logged when it happened. */
unsigned long egpu__sched_api_skipped(struct egpu_sched_api *api, int i);

/* Start the informers feeding api->cache. Returns 0 or an informer error. */
/* The paths informer i (numbered as egpu__sched_api_kind) keeps of its
 * objects (egpu_kube_keep; static), or NULL when it keeps all of them but
 * metadata.managedFields. */
const char *const *egpu__sched_api_keep(int i);

int egpu__sched_api_start(struct egpu_sched_api *api, struct egpu_error *err) EGPU_MUST_CHECK;
/* Stop and free the informers. */
void egpu__sched_api_stop(struct egpu_sched_api *api);
/* struct egpu_extender_ops callbacks; data is the struct egpu_sched_api. */
bool egpu__sched_api_synced(void *data);
int egpu__sched_api_annotate(void *data, const char *ns, const char *name, const char *key,
                             const char *value, struct egpu_error *err);
int egpu__sched_api_annotate_claim(void *data, const char *ns, const char *name, const char *node,
                                   const char *gpus, struct egpu_error *err);
int egpu__sched_api_bind(void *data, const char *ns, const char *name, const char *uid,
                         const char *node, struct egpu_error *err);
int egpu__sched_api_get_pod(void *data, const char *ns, const char *name, json_t **out,
                            struct egpu_error *err);
int egpu__sched_api_get_claim(void *data, const char *ns, const char *name, json_t **out,
                              struct egpu_error *err);

/* Following kube-scheduler's Lease (follow.c): bind only while the
 * kube-scheduler of this pod leads. */
struct egpu__follower {
    struct egpu_kube *kube;
    char ns[EGPU_K8S_NAME_MAX], name[EGPU_K8S_NAME_MAX];
    char pod[EGPU_K8S_NAME_MAX]; /* this pod's name (its hostname) */
    pthread_mutex_t lock;        /* guards the rest */
    char holder[512];            /* holderIdentity last read, "" = none */
    char renew[64];              /* renewTime last read */
    double changed_at;           /* CLOCK_MONOTONIC s when holder or renewTime last changed */
    double read_at;              /* CLOCK_MONOTONIC s of the last successful read */
    long lease_s;                /* the Lease's leaseDurationSeconds */
};

/* Follow Lease ns/name as pod pod (strings copied). Returns 0 or -EINVAL
 * (an empty or too long name). */
int egpu__follower_init(struct egpu__follower *f, struct egpu_kube *kube, const char *ns,
                        const char *name, const char *pod, struct egpu_error *err) EGPU_MUST_CHECK;
void egpu__follower_destroy(struct egpu__follower *f);
/* Read the Lease once (GET; a failure keeps the last record, which goes
 * stale by itself). Call about once a second. */
void egpu__follower_poll(struct egpu__follower *f);
/* True while the Lease's holder is "<pod>_..." and the record was seen to
 * change and read within its leaseDurationSeconds; else false with the
 * reason in why (a C string of at most len bytes). Thread-safe. */
bool egpu__follower_leads(struct egpu__follower *f, char *why, size_t len);

/* egpu-scheduler's settings, from flags, else environment, else defaults. */
struct egpu_sched_options {
    struct egpu_cli_server srv; /* the flags every server shares (egpu/cli.h); srv.listen
                                   and srv.port are the extender verbs' */
    const char *follow_lease;   /* kube-scheduler's Lease to follow, or NULL */
    const char *pod_name;       /* this pod's name, for follow_lease */
    const char *prefix;         /* path prefix of the verbs, "" or "/scheduler" */
    enum egpu_policy_kind node_policy, card_policy;
    uint64_t seed;
    const char *scheduler_name;  /* bind serves only pods with this spec.schedulerName */
    bool load_aware;             /* break exact ties by the cards' measured load */
    unsigned load_max_age_s;     /* a status.used older than this is unknown */
    bool place_cpu_pods;         /* --pods-without-gpu place */
    const char *target_workload; /* --target-workload FILE, or NULL */
    bool dra;                    /* --dra: DRA pods, judged by their ResourceClaims */
    bool memo_warm;              /* --memo-warm: judge the cached pods' shapes ahead */
};

/* Parse argv (and the EGPU_* environment) into *o. Returns -1 to run, 0 when
 * --help or --version was answered, 2 on a bad flag (message printed). */
int egpu__sched_options_parse(int argc, char **argv, struct egpu_sched_options *o);

#endif /* EGPU_SCHED_INT_H */
