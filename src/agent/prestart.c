/* agent/prestart.c - PreStartContainer's API-server side (DESIGN.md 2.3):
 * what the device plugin adds to the shared part of a container's
 * allocation (container.c).
 *
 * The kubelet names only device IDs. Their exact owner comes from the
 * kubelet's PodResources List (never guessed), its assignment from the pod.
 * The IDs must lie on the assigned card(s), core per card, else
 * FAILED_PRECONDITION, a Warning event on the pod, and nothing is written.
 * Then container.c writes limits.json and vcuda.conf into the allocation
 * dir and marks the pod elasticgpu.io/allocated. Usually the container is
 * marked already: marker.c marks it right after Allocate, when the kubelet
 * has fixed its IDs, not after the image pull; PreStartContainer marks what
 * the marker could not. Each failure is answered with its gRPC status code
 * (prestart_int.h).
 *
 * Units: core in percent of one card, memory in MiB per card.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "egpu/log.h"
#include "egpu/api.h"
#include "container_int.h"
#include "pb_int.h"
#include "prestart_int.h"

/* Ask PodResources List (cfg's) who owns ids. Returns 0, -ENOENT (nobody)
 * or the gRPC call's code, with st set. */
static int find_owner(const struct egpu__container_config *cfg, char *const *ids, size_t n,
                      struct egpu__container_ref *o, struct egpu_grpc_status *st)
{
    const char *socket = cfg->pod_resources;
    egpu__podres_list_fn list = cfg->podres_list != NULL ? cfg->podres_list : egpu__podres_list;
    struct egpu_error err = {0};
    V1__ListPodResourcesResponse *r = NULL;
    int rc = list(socket, &r, &err);

    if (rc == -EPROTO)
        return egpu_grpc_status_set(st, GRPC_STATUS_INTERNAL, "PreStartContainer: %s", err.msg);
    if (rc)
        return egpu_grpc_status_set(st, GRPC_STATUS_UNAVAILABLE,
                                    "PreStartContainer: PodResources List on %s: %s", socket,
                                    err.msg);
    if (egpu__container_owner(r, ids, n, o)) {
        *st = (struct egpu_grpc_status){0};
        rc = 0;
    } else {
        rc = egpu_grpc_status_set(st, GRPC_STATUS_NOT_FOUND,
                                  "PreStartContainer: no container holds device ID %s "
                                  "(PodResources List on %s)",
                                  ids[0], socket);
    }
    v1__list_pod_resources_response__free_unpacked(r, &egpu__pb_allocator);
    return rc;
}

/* The cards of ids as "<uuid>, <uuid>" into out (each card once). */
static void given_cards(char *const *ids, size_t n, char *out, size_t len)
{
    size_t used = 0;

    out[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        size_t ul = strlen(ids[i]);
        bool dup = false;
        int w;

        if (ul < 4)
            continue;
        ul -= 3;
        for (size_t j = 0; j < i && !dup; j++)
            dup = strlen(ids[j]) == ul + 3 && strncmp(ids[j], ids[i], ul) == 0;
        if (dup)
            continue;
        w = snprintf(out + used, len - used, "%s%.*s", used ? ", " : "", (int)ul, ids[i]);
        if (w < 0 || (size_t)w >= len - used)
            return;
        used += (size_t)w;
    }
}

/* Post a Warning event AllocationMismatch on the pod (best effort). */
static void post_mismatch_event(const struct egpu__container_config *cfg, const json_t *pod,
                                const struct egpu__container_ref *o, const struct egpu_assigned *a,
                                const struct egpu_assigned_container *c, char *const *ids, size_t n)
{
    char assigned[EGPU_NODE_GPUS_MAX * (EGPU_UUID_MAX + 2)] = "";
    char given[EGPU_NODE_GPUS_MAX * (EGPU_UUID_MAX + 2)];
    char msg[sizeof(assigned) + sizeof(given) + 3 * EGPU_K8S_NAME_MAX + 128];
    struct egpu_kube_event ev = {
        .kind = "Pod",
        .involved_ns = o->ns,
        .name = o->pod,
        .uid = egpu_kube_str(json_object_get(json_object_get(pod, "metadata"), "uid")),
        .warning = true,
        .reason = EGPU_PRESTART_EVENT_REASON,
        .message = msg,
        .component = "egpu-agent",
        .host = cfg->node,
    };
    struct egpu_error err = {0};
    size_t used = 0;

    for (uint32_t g = 0; g < c->ncards; g++) {
        int w = snprintf(assigned + used, sizeof(assigned) - used, "%s%s", used ? ", " : "",
                         a->uuids[c->first_card + g]);

        if (w < 0 || (size_t)w >= sizeof(assigned) - used)
            break;
        used += (size_t)w;
    }
    given_cards(ids, n, given, sizeof(given));
    snprintf(msg, sizeof(msg),
             "container %s is assigned GPU %s but the kubelet gave device IDs on GPU %s; "
             "the container is not started",
             o->container, assigned, given);
    if (egpu_kube_event_post(cfg->kube, &ev, &err) != 0)
        egpu_log(EGPU_LOG_WARN, "event %s on pod %s/%s not posted error=\"%s\"",
                 EGPU_PRESTART_EVENT_REASON, o->ns, o->pod, err.msg);
}

int egpu__prestart_run(const struct egpu__container_config *cfg, const struct egpu_gpu_info *cards,
                       size_t ncards, char *const *ids, size_t n, bool *mismatch, bool *marked,
                       struct egpu__alloc_limits *wrote, struct egpu_grpc_status *st)
{
    struct egpu_error err = {0};
    struct egpu_kube_status ks;
    struct egpu_assigned *a = egpu_malloc(sizeof(*a));
    const struct egpu_assigned_container *c = NULL;
    struct egpu__container_ref o;
    json_t *pod = NULL;
    char dir[4096];
    bool patched = false;
    unsigned core_limit = 100;
    int rc;

    (void)cards;
    (void)ncards;
    if (a == NULL)
        return -ENOMEM;
    rc = find_owner(cfg, ids, n, &o, st);
    if (rc)
        goto out;
    rc = egpu_kube_get(cfg->kube, &egpu_kube_pods, o.ns, o.pod, &pod, &ks, &err);
    if (rc) {
        rc = egpu_grpc_status_set(st,
                                  rc == -ENOENT ? GRPC_STATUS_NOT_FOUND : GRPC_STATUS_UNAVAILABLE,
                                  "PreStartContainer: pod %s/%s: %s", o.ns, o.pod, err.msg);
        goto out;
    }
    rc = egpu__container_assigned(pod, a, &err);
    if (rc) {
        rc = egpu_grpc_status_set(st, GRPC_STATUS_FAILED_PRECONDITION,
                                  "PreStartContainer: pod %s/%s has %s " EGPU_ANN_ASSIGNED
                                  "%s%s: was it scheduled by elastic-gpu-scheduler?",
                                  o.ns, o.pod, rc == -ENOENT ? "no" : "a malformed",
                                  rc == -ENOENT ? "" : ": ", rc == -ENOENT ? "" : err.msg);
        goto out;
    }
    c = egpu__container_find(a, o.container);
    if (c == NULL) {
        rc = egpu_grpc_status_set(st, GRPC_STATUS_FAILED_PRECONDITION,
                                  "PreStartContainer: pod %s/%s: " EGPU_ANN_ASSIGNED
                                  " has no container %s",
                                  o.ns, o.pod, o.container);
        goto out;
    }
    if (egpu__container_check_ids(&o, a, c, ids, n, &err) != 0) {
        rc = egpu_grpc_status_set(st, GRPC_STATUS_FAILED_PRECONDITION, "PreStartContainer: %s",
                                  err.msg);
        if (mismatch != NULL)
            *mismatch = true;
        post_mismatch_event(cfg, pod, &o, a, c, ids, n);
        goto out;
    }
    /* Whole cards run without the interposer: no burst to set. */
    if (c->core_pct < 100 &&
        egpu__container_core_limit(pod, &o, c->core_pct, &core_limit, &err) != 0) {
        rc = egpu_grpc_status_set(st, GRPC_STATUS_FAILED_PRECONDITION, "PreStartContainer: %s",
                                  err.msg);
        goto out;
    }
    rc = egpu__container_write(cfg, &o, a, c, core_limit, ids, n, wrote, dir, sizeof(dir), &err);
    if (rc) {
        rc = egpu_grpc_status_set(st, GRPC_STATUS_INTERNAL, "PreStartContainer: %s", err.msg);
        goto out;
    }
    rc = egpu__container_mark(cfg, &o, a, c, &patched, &err);
    if (rc) {
        rc = egpu_grpc_status_set(st, GRPC_STATUS_UNAVAILABLE,
                                  "PreStartContainer: pod %s/%s: " EGPU_ANN_ALLOCATED
                                  " not written: %s",
                                  o.ns, o.pod, err.msg);
        goto out;
    }
    if (marked != NULL)
        *marked = patched;
    egpu_log(EGPU_LOG_INFO,
             "limits written pod=%s/%s container=%s core=%u core_limit=%u memory=%u gpus=%u dir=%s "
             "allocated_marked_here=%s",
             o.ns, o.pod, o.container, c->core_pct, core_limit, c->mem_mib, c->ncards, dir,
             patched ? "true" : "false");
out:
    json_decref(pod);
    egpu_free(a);
    return rc;
}
