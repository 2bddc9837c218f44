/* kube/lease.c - leader election on a coordination.k8s.io/v1 Lease, with
 * client-go's tools/leaderelection semantics (crd_lease_leader_election_notes.md).
 *
 * tryAcquireOrRenew, in order:
 *  1. fast path: if this elector holds the lease as last observed and that
 *     observation is still within leaseDurationSeconds, PUT the renewed
 *     record (same acquireTime and leaseTransitions);
 *  2. otherwise GET the Lease; on NotFound, POST a new one (transitions 0);
 *  3. when the fetched record differs from the last observed one, note the
 *     local time: validity is judged only from when this elector saw the
 *     record change, never from renewTime, so clock skew does not matter;
 *  4. someone else holding a record observed less than its
 *     leaseDurationSeconds ago wins;
 *  5. else take over (acquireTime now, leaseTransitions + 1) or renew (both
 *     kept), with a PUT carrying the fetched resourceVersion; 409 = lost race.
 * Loops: acquire tries every retry period with jitter factor 1.2 (so
 * retry..2.2*retry apart); a leader renews every retry period, retrying
 * within a renew deadline; failing for renew_deadline_ms it stops leading.
 * Release (on stop, when asked) PUTs holderIdentity "" and
 * leaseDurationSeconds 1, so another candidate takes over within ~1 s.
 *
 * DESIGN: the elector's thread alone touches the observed record. Requests
 * carry a timeout of at most the renew deadline and the stop flag, so stop
 * is prompt. Times in the Lease are MicroTime ("...05.000000Z", UTC).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "egpu/log.h"
#include "kube_int.h"

#define JITTER_FACTOR 1.2
#define IDENTITY_MAX  256

struct egpu_kube_elector {
    struct egpu_kube *kc;
    struct egpu_kube_elector_config cfg; /* ns, name, identity point at the copies below */
    char *ns, *name;
    char identity[IDENTITY_MAX];
    long request_timeout_ms;

    struct egpu__kube_worker worker;
    atomic_bool leader;

    /* Elector thread only. */
    json_t *observed;            /* the Lease as last read or written */
    char *observed_raw;          /* its spec, canonical JSON */
    int64_t observed_ms;         /* when observed_raw last changed (monotonic) */
    char reported[IDENTITY_MAX]; /* holder last passed to on_new_leader */
    struct egpu_rng rng;
};

/* ------------------------------------------------------------------------ */
/* Config                                                                   */

static void apply_defaults(struct egpu_kube_elector_config *c)
{
    if (c->lease_duration_ms == 0)
        c->lease_duration_ms = 15000;
    if (c->renew_deadline_ms == 0)
        c->renew_deadline_ms = 10000;
    if (c->retry_period_ms == 0)
        c->retry_period_ms = 2000;
}

int egpu_kube_elector_validate(const struct egpu_kube_elector_config *cfg, struct egpu_error *err)
{
    struct egpu_kube_elector_config c = *cfg;

    apply_defaults(&c);
    /* Same checks, same order and same texts as client-go's NewLeaderElector. */
    if (c.lease_duration_ms <= c.renew_deadline_ms)
        return egpu_error_set(err, -EINVAL, "leaseDuration must be greater than renewDeadline");
    if ((double)c.renew_deadline_ms <= JITTER_FACTOR * (double)c.retry_period_ms)
        return egpu_error_set(err, -EINVAL,
                              "renewDeadline must be greater than retryPeriod*JitterFactor");
    if (c.lease_duration_ms < 1)
        return egpu_error_set(err, -EINVAL, "leaseDuration must be greater than zero");
    if (c.renew_deadline_ms < 1)
        return egpu_error_set(err, -EINVAL, "renewDeadline must be greater than zero");
    if (c.retry_period_ms < 1)
        return egpu_error_set(err, -EINVAL, "retryPeriod must be greater than zero");
    if (c.ns == NULL || c.ns[0] == '\0' || c.name == NULL || c.name[0] == '\0')
        return egpu_error_set(err, -EINVAL, "the Lease needs a namespace and a name");
    if (c.identity != NULL && (c.identity[0] == '\0' || strlen(c.identity) >= IDENTITY_MAX))
        return egpu_error_set(err, -EINVAL, "Lock identity is empty or too long");
    return 0;
}

/* "<hostname>_<random UUID v4>", client-go's convention. */
static void make_identity(char out[IDENTITY_MAX])
{
    unsigned char u[16];
    char host[128] = "localhost";

    if (gethostname(host, sizeof(host)) != 0)
        snprintf(host, sizeof(host), "localhost");
    host[sizeof(host) - 1] = '\0';
    egpu__kube_random(u, sizeof(u));
    u[6] = (unsigned char)((u[6] & 0x0f) | 0x40);
    u[8] = (unsigned char)((u[8] & 0x3f) | 0x80);
    snprintf(out, IDENTITY_MAX,
             "%s_%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", host, u[0],
             u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
             u[14], u[15]);
}

int egpu_kube_elector_new(struct egpu_kube *kc, const struct egpu_kube_elector_config *cfg,
                          struct egpu_kube_elector **out, struct egpu_error *err)
{
    struct egpu_kube_elector *el;
    uint64_t seed;
    int rc = egpu_kube_elector_validate(cfg, err);

    if (rc)
        return rc;
    el = egpu_calloc(1, sizeof(*el));
    if (el == NULL)
        return egpu_error_set(err, -ENOMEM, "elector: out of memory");
    el->kc = kc;
    el->cfg = *cfg;
    apply_defaults(&el->cfg);
    el->ns = egpu_strdup(cfg->ns);
    el->name = egpu_strdup(cfg->name);
    if (cfg->identity != NULL)
        snprintf(el->identity, sizeof(el->identity), "%s", cfg->identity);
    else
        make_identity(el->identity);
    el->cfg.ns = el->ns;
    el->cfg.name = el->name;
    el->cfg.identity = el->identity;
    el->request_timeout_ms = el->cfg.renew_deadline_ms;
    atomic_init(&el->leader, false);
    egpu__kube_random(&seed, sizeof(seed));
    egpu_rng_seed(&el->rng, seed);
    if (el->ns == NULL || el->name == NULL || egpu__kube_worker_init(&el->worker) != 0) {
        egpu_free(el->ns);
        egpu_free(el->name);
        egpu_free(el);
        return egpu_error_set(err, -ENOMEM, "elector: out of memory");
    }
    *out = el;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Lease requests                                                           */

/* method on the Lease (its collection for POST) with body obj, bounded by
 * the renew deadline. */
static int lease_call(struct egpu_kube_elector *el, const char *method, const json_t *obj,
                      const atomic_bool *stop, json_t **out, struct egpu_error *err)
{
    return egpu__kube_object_call(el->kc, method, &egpu_kube_leases, el->ns,
                                  strcmp(method, "POST") == 0 ? NULL : el->name, NULL, NULL, obj,
                                  el->request_timeout_ms, stop, out, NULL, err);
}

static long lease_seconds(const struct egpu_kube_elector *el)
{
    return (el->cfg.lease_duration_ms + 999) / 1000;
}

static const char *spec_str(const json_t *lease, const char *field)
{
    return json_string_value(json_object_get(json_object_get(lease, "spec"), field));
}

/* holderIdentity of lease, "" when absent. */
static const char *holder_of(const json_t *lease)
{
    const char *h = spec_str(lease, "holderIdentity");

    return h ? h : "";
}

static json_int_t spec_int(const json_t *lease, const char *field)
{
    return json_integer_value(json_object_get(json_object_get(lease, "spec"), field));
}

static void report_leader(struct egpu_kube_elector *el, const char *holder)
{
    if (holder == NULL)
        holder = "";
    if (strcmp(holder, el->reported) == 0)
        return;
    snprintf(el->reported, sizeof(el->reported), "%s", holder);
    egpu_log(EGPU_LOG_NOTICE, "new leader lease=%s/%s holder=\"%s\"", el->ns, el->name, holder);
    if (el->cfg.on_new_leader != NULL)
        el->cfg.on_new_leader(el->cfg.ud, holder);
}

/* Take lease as the observed record; when its spec changed, at time now. */
static void observe(struct egpu_kube_elector *el, json_t *lease, int64_t now)
{
    struct egpu_buf b;
    char *copy = NULL;

    egpu_buf_init(&b, EGPU_KUBE_BODY_MAX);
    if (egpu__kube_dump(json_object_get(lease, "spec"), &b, true) == 0)
        copy = egpu_buf_take(&b);
    egpu_buf_free(&b);
    if (copy == NULL || el->observed_raw == NULL || strcmp(copy, el->observed_raw) != 0) {
        egpu_free(el->observed_raw);
        el->observed_raw = copy;
        el->observed_ms = now;
    } else {
        egpu_free(copy);
    }
    json_decref(el->observed);
    el->observed = lease;
    report_leader(el, holder_of(lease));
}

/* The record this elector writes: a copy of base (or a new Lease) with spec
 * set; acquire_time NULL = now. */
static json_t *record(struct egpu_kube_elector *el, const json_t *base, const char *now,
                      const char *acquire_time, json_int_t transitions)
{
    json_t *lease, *spec;

    if (base != NULL) {
        lease = json_deep_copy(base);
    } else {
        lease = json_pack("{s:s, s:s, s:{s:s, s:s}}", "apiVersion", "coordination.k8s.io/v1",
                          "kind", "Lease", "metadata", "name", el->name, "namespace", el->ns);
    }
    spec = json_pack("{s:s, s:I, s:s, s:s, s:I}", "holderIdentity", el->identity,
                     "leaseDurationSeconds", (json_int_t)lease_seconds(el), "acquireTime",
                     acquire_time ? acquire_time : now, "renewTime", now, "leaseTransitions",
                     transitions);
    if (lease == NULL || spec == NULL || json_object_set_new(lease, "spec", spec) != 0) {
        json_decref(lease);
        return NULL;
    }
    return lease;
}

/* Send want (a Lease; consumed, NULL = out of memory) with method and,
 * when the server took it, observe the stored Lease at time now. */
static int write_record(struct egpu_kube_elector *el, const char *method, json_t *want, int64_t now,
                        const atomic_bool *stop, struct egpu_error *err)
{
    json_t *got = NULL;
    int rc = want ? lease_call(el, method, want, stop, &got, err)
                  : egpu_error_set(err, -ENOMEM, "lease: out of memory");

    json_decref(want);
    if (rc == 0 && !json_is_object(got))
        rc = egpu_error_set(err, -EPROTO, "%s lease: reply is not an object", method);
    if (rc) {
        json_decref(got);
        return rc;
    }
    observe(el, got, now);
    return 0;
}

static bool try_acquire_or_renew(struct egpu_kube_elector *el)
{
    struct egpu_error err = {0};
    int64_t now = egpu__kube_now_ms();
    json_t *got = NULL, *want;
    const char *holder;
    char ts[32];
    int rc;

    egpu__kube_micro_time(ts);
    /* 1. Fast path: renew what we hold, as last observed. */
    if (el->observed != NULL && strcmp(holder_of(el->observed), el->identity) == 0 &&
        el->observed_ms + spec_int(el->observed, "leaseDurationSeconds") * 1000 > now) {
        want = record(el, el->observed, ts, spec_str(el->observed, "acquireTime"),
                      spec_int(el->observed, "leaseTransitions"));
        rc = write_record(el, "PUT", want, now, &el->worker.stop, &err);
        if (rc == 0 || rc == -ECANCELED)
            return rc == 0;
        egpu_log(EGPU_LOG_DEBUG, "lease renew failed, reading it lease=%s/%s err=\"%s\"", el->ns,
                 el->name, err.msg);
    }
    /* 2. Read it; create it when there is none. */
    rc = lease_call(el, "GET", NULL, &el->worker.stop, &got, &err);
    if (rc == -ENOENT) {
        rc = write_record(el, "POST", record(el, NULL, ts, NULL, 0), now, &el->worker.stop, &err);
        if (rc != 0 && rc != -EEXIST && rc != -ECANCELED)
            egpu_log(EGPU_LOG_WARN, "lease create failed lease=%s/%s err=\"%s\"", el->ns, el->name,
                     err.msg);
        return rc == 0;
    }
    if (rc != 0 || !json_is_object(got)) {
        json_decref(got);
        if (rc != -ECANCELED)
            egpu_log(EGPU_LOG_WARN, "lease read failed lease=%s/%s err=\"%s\"", el->ns, el->name,
                     rc ? err.msg : "not an object");
        return false;
    }
    /* 3. Note when the record changed, by our clock. */
    observe(el, got, now);
    holder = holder_of(got);
    /* 4. Someone else holds a lease that has not expired. */
    if (holder[0] != '\0' && strcmp(holder, el->identity) != 0 &&
        el->observed_ms + spec_int(got, "leaseDurationSeconds") * 1000 > now)
        return false;
    /* 5. Take over or renew, conditional on the resourceVersion read. */
    if (strcmp(holder, el->identity) == 0)
        want = record(el, got, ts, spec_str(got, "acquireTime"), spec_int(got, "leaseTransitions"));
    else
        want = record(el, got, ts, NULL, spec_int(got, "leaseTransitions") + 1);
    rc = write_record(el, "PUT", want, now, &el->worker.stop, &err);
    if (rc != 0 && rc != EGPU_KUBE_ECONFLICT && rc != -ECANCELED)
        egpu_log(EGPU_LOG_WARN, "lease update failed lease=%s/%s err=\"%s\"", el->ns, el->name,
                 err.msg);
    return rc == 0;
}

/* A copy of base with holder "", 1 s, times ts and transitions kept;
 * NULL when out of memory. */
static json_t *released_record(const json_t *base, const char *ts)
{
    json_t *want = json_deep_copy(base);

    if (want != NULL && json_object_set_new(want, "spec",
                                            json_pack("{s:s, s:i, s:s, s:s, s:I}", "holderIdentity",
                                                      "", "leaseDurationSeconds", 1, "acquireTime",
                                                      ts, "renewTime", ts, "leaseTransitions",
                                                      spec_int(base, "leaseTransitions"))) != 0) {
        json_decref(want);
        want = NULL;
    }
    return want;
}

/* Give the Lease up: holder "", 1 s, times now, transitions kept. A renewal
 * cancelled by the stop may still have reached the server, leaving the
 * observed resourceVersion stale: on a conflict, read the Lease again and,
 * while it is still ours, release that. No stop flag on these calls:
 * stopping is what asked for the release. */
static void release(struct egpu_kube_elector *el)
{
    struct egpu_error err = {0};
    json_t *got = NULL;
    char ts[32];
    int rc;

    if (el->observed == NULL || strcmp(holder_of(el->observed), el->identity) != 0)
        return;
    egpu__kube_micro_time(ts);
    rc =
        write_record(el, "PUT", released_record(el->observed, ts), egpu__kube_now_ms(), NULL, &err);
    if (rc == EGPU_KUBE_ECONFLICT) {
        rc = lease_call(el, "GET", NULL, NULL, &got, &err);
        if (rc == 0 && json_is_object(got) && strcmp(holder_of(got), el->identity) == 0)
            rc = write_record(el, "PUT", released_record(got, ts), egpu__kube_now_ms(), NULL, &err);
        else if (rc == 0)
            rc = egpu_error_set(&err, EGPU_KUBE_ECONFLICT, "lease is no longer held");
        json_decref(got);
    }
    if (rc == 0)
        egpu_log(EGPU_LOG_NOTICE, "released lease=%s/%s identity=%s", el->ns, el->name,
                 el->identity);
    else
        egpu_log(EGPU_LOG_WARN, "lease release failed lease=%s/%s err=\"%s\"", el->ns, el->name,
                 err.msg);
}

/* ------------------------------------------------------------------------ */
/* The loops                                                                */

/* wait.Jitter(retry, 1.2): uniform in [retry, retry * 2.2). */
static long jittered(struct egpu_kube_elector *el)
{
    long extra = (long)(JITTER_FACTOR * (double)el->cfg.retry_period_ms);

    return el->cfg.retry_period_ms + (long)egpu_rng_below(&el->rng, (uint64_t)extra + 1);
}

/* A leader's renew loop; returns when leadership is lost or on stop. */
static void renew_loop(struct egpu_kube_elector *el)
{
    for (;;) {
        int64_t deadline = egpu__kube_now_ms() + el->cfg.renew_deadline_ms;
        bool renewed = false;

        while (!egpu__kube_worker_stopping(&el->worker)) {
            int64_t left;

            if (try_acquire_or_renew(el)) {
                renewed = true;
                break;
            }
            left = deadline - egpu__kube_now_ms();
            if (left <= 0)
                break;
            (void)egpu__kube_worker_pause(
                &el->worker, left < el->cfg.retry_period_ms ? left : el->cfg.retry_period_ms);
        }
        if (!renewed || !egpu__kube_worker_pause(&el->worker, el->cfg.retry_period_ms))
            return;
    }
}

static void *elector_main(void *arg)
{
    struct egpu_kube_elector *el = arg;

    while (!egpu__kube_worker_stopping(&el->worker)) {
        if (!try_acquire_or_renew(el)) {
            (void)egpu__kube_worker_pause(&el->worker, jittered(el));
            continue;
        }
        atomic_store(&el->leader, true);
        egpu_log(EGPU_LOG_NOTICE, "started leading lease=%s/%s identity=%s", el->ns, el->name,
                 el->identity);
        if (el->cfg.on_started_leading != NULL)
            el->cfg.on_started_leading(el->cfg.ud);
        renew_loop(el);
        if (egpu__kube_worker_stopping(&el->worker) && el->cfg.release_on_cancel)
            release(el);
        atomic_store(&el->leader, false);
        egpu_log(EGPU_LOG_NOTICE, "stopped leading lease=%s/%s identity=%s", el->ns, el->name,
                 el->identity);
        if (el->cfg.on_stopped_leading != NULL)
            el->cfg.on_stopped_leading(el->cfg.ud);
    }
    return NULL;
}

int egpu_kube_elector_start(struct egpu_kube_elector *el, struct egpu_error *err)
{
    int rc = egpu__kube_worker_start(&el->worker, elector_main, el);

    if (rc)
        return egpu_error_set(err, rc, "elector %s/%s: %s", el->ns, el->name,
                              rc == -EALREADY ? "already running" : egpu_strerror(rc));
    return 0;
}

bool egpu_kube_elector_is_leader(struct egpu_kube_elector *el)
{
    return atomic_load(&el->leader);
}

const char *egpu_kube_elector_identity(const struct egpu_kube_elector *el)
{
    return el->identity;
}

void egpu_kube_elector_stop(struct egpu_kube_elector *el)
{
    if (el != NULL)
        egpu__kube_worker_stop(&el->worker);
}

void egpu_kube_elector_free(struct egpu_kube_elector *el)
{
    if (el == NULL)
        return;
    egpu__kube_worker_destroy(&el->worker);
    json_decref(el->observed);
    egpu_free(el->observed_raw);
    egpu_free(el->ns);
    egpu_free(el->name);
    egpu_free(el);
}
