/* scheduler/follow.c - egpu-scheduler follows its own pod's kube-scheduler:
 * bind is served only while that kube-scheduler holds its Lease.
 *
 * DESIGN: in deploy/ the extender's verbs listen on 127.0.0.1 only, so their
 * one caller is the kube-scheduler container of the same pod, and only a
 * leading kube-scheduler schedules. Two Leases (one per container, as
 * before) could disagree: kube-scheduler leading in pod A would call an
 * extender that leads nowhere. So the extender does not campaign; it reads
 * kube-scheduler's Lease (client-go identity "<hostname>_<uuid>", and every
 * container of a pod has the pod's hostname) and binds only while the
 * holder is its own pod's and the record is live: seen to change (renewed)
 * within the Lease's leaseDurationSeconds by our clock, as a client-go
 * follower judges it, and read successfully within that time. The next
 * leader's kube-scheduler cannot take over before that time has passed
 * without a renewal, and the old one stops scheduling (and exits) once it
 * could not renew within its renew deadline, so two extenders never bind
 * at once on their kube-schedulers' behalf.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "egpu/log.h"
#include "sched_int.h"

#define LEASE_DURATION_DEFAULT_S 15 /* client-go's, when the Lease has none */

static double mono_s(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int egpu__follower_init(struct egpu__follower *f, struct egpu_kube *kube, const char *ns,
                        const char *name, const char *pod, struct egpu_error *err)
{
    memset(f, 0, sizeof(*f));
    if (snprintf(f->ns, sizeof(f->ns), "%s", ns) >= (int)sizeof(f->ns) ||
        snprintf(f->name, sizeof(f->name), "%s", name) >= (int)sizeof(f->name) ||
        snprintf(f->pod, sizeof(f->pod), "%s", pod) >= (int)sizeof(f->pod) || pod[0] == '\0')
        return egpu_error_set(err, -EINVAL,
                              "follow Lease %s/%s as pod \"%s\": a name is empty or too long", ns,
                              name, pod);
    f->kube = kube;
    f->lease_s = LEASE_DURATION_DEFAULT_S;
    snprintf(f->holder, sizeof(f->holder), "(not read yet)");
    pthread_mutex_init(&f->lock, NULL);
    return 0;
}

void egpu__follower_destroy(struct egpu__follower *f)
{
    pthread_mutex_destroy(&f->lock);
}

/* The Lease's holder and renewTime, or "" when absent or not strings. */
static void lease_fields(const json_t *lease, char *holder, size_t hlen, char *renew, size_t rlen,
                         long *duration_s)
{
    const json_t *spec = json_object_get(lease, "spec");
    const char *h = egpu_kube_str(json_object_get(spec, "holderIdentity"));
    const char *r = egpu_kube_str(json_object_get(spec, "renewTime"));
    const json_t *d = json_object_get(spec, "leaseDurationSeconds");

    snprintf(holder, hlen, "%s", h ? h : "");
    snprintf(renew, rlen, "%s", r ? r : "");
    *duration_s = json_is_integer(d) && json_integer_value(d) > 0 && json_integer_value(d) <= 3600
                      ? (long)json_integer_value(d)
                      : LEASE_DURATION_DEFAULT_S;
}

void egpu__follower_poll(struct egpu__follower *f)
{
    struct egpu_kube_status st = {0};
    struct egpu_error err = {0};
    json_t *lease = NULL;
    char holder[sizeof(f->holder)], renew[sizeof(f->renew)];
    long duration_s = LEASE_DURATION_DEFAULT_S;
    double now = mono_s();
    int rc = egpu_kube_get(f->kube, &egpu_kube_leases, f->ns, f->name, &lease, &st, &err);

    if (rc != 0 && st.code != 404) {
        egpu_log(EGPU_LOG_DEBUG, "cannot read Lease %s/%s error=\"%s\"", f->ns, f->name, err.msg);
        json_decref(lease);
        return; /* keep what we saw; it goes stale by itself */
    }
    if (rc == 0)
        lease_fields(lease, holder, sizeof(holder), renew, sizeof(renew), &duration_s);
    else
        holder[0] = renew[0] = '\0'; /* no Lease: nobody leads */
    json_decref(lease);
    pthread_mutex_lock(&f->lock);
    f->read_at = now;
    f->lease_s = duration_s;
    if (strcmp(holder, f->holder) != 0 || strcmp(renew, f->renew) != 0 || f->changed_at == 0) {
        memcpy(f->holder, holder, sizeof(holder));
        memcpy(f->renew, renew, sizeof(renew));
        f->changed_at = now;
    }
    pthread_mutex_unlock(&f->lock);
}

bool egpu__follower_leads(struct egpu__follower *f, char *why, size_t len)
{
    double now = mono_s();
    size_t n = strlen(f->pod);
    bool ours, live;

    pthread_mutex_lock(&f->lock);
    ours = strncmp(f->holder, f->pod, n) == 0 && f->holder[n] == '_';
    live = f->changed_at > 0 && now - f->changed_at < (double)f->lease_s &&
           now - f->read_at < (double)f->lease_s;
    if (!ours)
        snprintf(why, len,
                 "kube-scheduler of this pod (%s) does not hold Lease %s/%s (holder \"%.64s\")",
                 f->pod, f->ns, f->name, f->holder);
    else if (!live)
        snprintf(why, len,
                 "Lease %s/%s of this pod's kube-scheduler was not renewed or read within %ld s",
                 f->ns, f->name, f->lease_s);
    pthread_mutex_unlock(&f->lock);
    return ours && live;
}
