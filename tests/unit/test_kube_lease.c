/* tests/unit/test_kube_lease.c - leader election on a Lease against the test
 * API server, with short durations (lease 2 s, renew deadline 1.5 s, retry
 * 0.4 s): config validation with client-go's texts; two electors in one
 * process, exactly one leader; failover when the leader stops without
 * releasing (within the lease duration plus jittered retries) and with
 * release (about one retry); leaseTransitions counted in the Lease; a leader
 * that cannot renew steps down within its renew deadline; a release that
 * meets a stale resourceVersion reads the Lease again and still releases.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "test_kube_server.h"

#define LEASE_MS 2000
#define RENEW_MS 1500
#define RETRY_MS 400
#define JITTER   2.2 /* acquire tries are retry..2.2*retry apart */

static int group_setup(void **state)
{
    (void)state;
    return tks_start(&srv, NULL);
}

struct cand {
    struct egpu_kube_elector *el;
    atomic_int started, stopped, new_leader;
};

static void on_started(void *ud)
{
    atomic_fetch_add(&((struct cand *)ud)->started, 1);
}

static void on_stopped(void *ud)
{
    atomic_fetch_add(&((struct cand *)ud)->stopped, 1);
}

static void on_new_leader(void *ud, const char *id)
{
    (void)id;
    atomic_fetch_add(&((struct cand *)ud)->new_leader, 1);
}

static void cand_start(struct cand *c, const char *identity, bool release)
{
    struct egpu_kube_elector_config cfg = {
        .ns = "kube-system",
        .name = "egpu-test",
        .identity = identity,
        .lease_duration_ms = LEASE_MS,
        .renew_deadline_ms = RENEW_MS,
        .retry_period_ms = RETRY_MS,
        .release_on_cancel = release,
        .on_started_leading = on_started,
        .on_stopped_leading = on_stopped,
        .on_new_leader = on_new_leader,
    };
    struct egpu_error err = {0};

    memset(c, 0, sizeof(*c));
    cfg.ud = c;
    if (egpu_kube_elector_new(srv.kc, &cfg, &c->el, &err) != 0 ||
        egpu_kube_elector_start(c->el, &err) != 0)
        fail_msg("elector %s: %s", identity, err.msg);
}

/* Wait up to ms for one of a, b to lead; returns it (NULL on timeout). */
static struct cand *wait_leader(struct cand *a, struct cand *b, long ms)
{
    long deadline = tks_now_ms() + ms;

    while (tks_now_ms() < deadline) {
        if (a != NULL && egpu_kube_elector_is_leader(a->el))
            return a;
        if (b != NULL && egpu_kube_elector_is_leader(b->el))
            return b;
        tks_sleep_ms(10);
    }
    return NULL;
}

/* The elector sets its leader flag before it calls on_started_leading and
 * clears it before on_stopped_leading: wait for a callback count. */
static int wait_count(atomic_int *n, int want, long ms)
{
    long deadline = tks_now_ms() + ms;

    while (atomic_load(n) < want && tks_now_ms() < deadline)
        tks_sleep_ms(5);
    return atomic_load(n);
}

static json_t *get_lease(void)
{
    struct egpu_error err = {0};
    json_t *lease = NULL;

    if (egpu_kube_get(srv.kc, &egpu_kube_leases, "kube-system", "egpu-test", &lease, NULL, &err))
        fail_msg("get lease: %s", err.msg);
    return lease;
}

static const char *spec_str(const json_t *lease, const char *f)
{
    const char *v = json_string_value(json_object_get(json_object_get(lease, "spec"), f));

    return v ? v : "";
}

static long spec_int(const json_t *lease, const char *f)
{
    return (long)json_integer_value(json_object_get(json_object_get(lease, "spec"), f));
}

/* MicroTime: 2006-01-02T15:04:05.000000Z */
static void check_micro_time(const char *s)
{
    assert_int_equal(strlen(s), 27);
    assert_int_equal(s[10], 'T');
    assert_int_equal(s[19], '.');
    assert_int_equal(s[26], 'Z');
}

/* ------------------------------------------------------------------------ */

static void expect_invalid(long lease, long renew, long retry, const char *text)
{
    struct egpu_kube_elector_config cfg = {.ns = "ns",
                                           .name = "n",
                                           .lease_duration_ms = lease,
                                           .renew_deadline_ms = renew,
                                           .retry_period_ms = retry};
    struct egpu_kube_elector *el = NULL;
    struct egpu_error err = {0};

    assert_int_equal(egpu_kube_elector_validate(&cfg, &err), -EINVAL);
    assert_string_equal(err.msg, text);
    assert_int_equal(egpu_kube_elector_new(srv.kc, &cfg, &el, &err), -EINVAL);
    assert_null(el);
}

static void test_validate_and_identity(void **state)
{
    struct egpu_kube_elector_config cfg = {.ns = "ns", .name = "n"};
    struct egpu_kube_elector *el = NULL;
    struct egpu_error err = {0};
    const char *id, *us;
    char host[128];

    (void)state;
    /* Defaults 15 s / 10 s / 2 s are valid. */
    assert_int_equal(egpu_kube_elector_validate(&cfg, &err), 0);
    expect_invalid(10000, 10000, 2000, "leaseDuration must be greater than renewDeadline");
    expect_invalid(15000, 2400, 2000,
                   "renewDeadline must be greater than retryPeriod*JitterFactor");
    expect_invalid(15000, 10000, -1, "retryPeriod must be greater than zero");
    expect_invalid(-5, -10, 1, "renewDeadline must be greater than retryPeriod*JitterFactor");
    cfg.name = NULL;
    assert_int_equal(egpu_kube_elector_validate(&cfg, &err), -EINVAL);

    /* Identity: <hostname>_<UUID>. */
    cfg.name = "n";
    assert_int_equal(egpu_kube_elector_new(srv.kc, &cfg, &el, &err), 0);
    id = egpu_kube_elector_identity(el);
    us = strrchr(id, '_');
    assert_non_null(us);
    assert_int_equal(strlen(us + 1), 36);
    assert_int_equal(us[1 + 14], '4'); /* version 4 */
    assert_int_equal(gethostname(host, sizeof(host)), 0);
    assert_int_equal(strncmp(id, host, strlen(host)), 0);
    assert_false(egpu_kube_elector_is_leader(el));
    egpu_kube_elector_free(el);
}

static void test_one_leader_failover_without_release(void **state)
{
    struct cand a, b, *leader, *other;
    json_t *lease;
    long t0, dt, until;

    (void)state;
    cand_start(&a, "cand-a", false);
    cand_start(&b, "cand-b", false);
    leader = wait_leader(&a, &b, 3000);
    assert_non_null(leader);
    other = leader == &a ? &b : &a;

    /* Exactly one leads, and it keeps leading. */
    until = tks_now_ms() + 1500;
    while (tks_now_ms() < until) {
        assert_true(egpu_kube_elector_is_leader(leader->el));
        assert_false(egpu_kube_elector_is_leader(other->el));
        tks_sleep_ms(20);
    }
    lease = get_lease();
    assert_string_equal(spec_str(lease, "holderIdentity"), egpu_kube_elector_identity(leader->el));
    assert_int_equal(spec_int(lease, "leaseDurationSeconds"), 2);
    assert_int_equal(spec_int(lease, "leaseTransitions"), 0);
    check_micro_time(spec_str(lease, "acquireTime"));
    check_micro_time(spec_str(lease, "renewTime"));
    assert_string_not_equal(spec_str(lease, "acquireTime"), spec_str(lease, "renewTime"));
    json_decref(lease);
    assert_int_equal(atomic_load(&leader->started), 1);
    assert_int_equal(atomic_load(&other->started), 0);
    assert_true(atomic_load(&other->new_leader) >= 1);

    /* The leader stops without releasing, as if it died: the other takes
     * over once the lease it last saw change has expired. */
    egpu_kube_elector_stop(leader->el);
    t0 = tks_now_ms();
    assert_false(egpu_kube_elector_is_leader(leader->el));
    assert_int_equal(atomic_load(&leader->stopped), 1);
    assert_non_null(wait_leader(other, NULL, 6000));
    dt = tks_now_ms() - t0;
    fprintf(stderr, "failover without release: %ld ms\n", dt);
    /* Not before the lease could have expired; within the lease duration
     * plus the jittered retries on both sides. */
    assert_true(dt >= LEASE_MS - (long)(JITTER * RETRY_MS));
    assert_true(dt <= LEASE_MS + (long)(2 * JITTER * RETRY_MS) + 500);
    lease = get_lease();
    assert_string_equal(spec_str(lease, "holderIdentity"), egpu_kube_elector_identity(other->el));
    assert_int_equal(spec_int(lease, "leaseTransitions"), 1);
    json_decref(lease);
    egpu_kube_elector_free(a.el);
    egpu_kube_elector_free(b.el);
}

static void test_failover_with_release(void **state)
{
    struct cand a, b, *leader, *other;
    json_t *lease;
    long t0, dt;

    (void)state;
    cand_start(&a, "rel-a", true);
    leader = wait_leader(&a, NULL, 3000);
    assert_non_null(leader);
    cand_start(&b, "rel-b", true);
    tks_sleep_ms(1000);
    other = &b;
    assert_false(egpu_kube_elector_is_leader(other->el));

    egpu_kube_elector_stop(leader->el);
    t0 = tks_now_ms();
    /* Released: holder "", 1 s; the other takes it at its next try. */
    assert_non_null(wait_leader(other, NULL, 3000));
    dt = tks_now_ms() - t0;
    fprintf(stderr, "failover with release: %ld ms\n", dt);
    assert_true(dt <= (long)(JITTER * RETRY_MS) + 300);
    lease = get_lease();
    assert_string_equal(spec_str(lease, "holderIdentity"), "rel-b");
    assert_int_equal(spec_int(lease, "leaseTransitions"), 1);
    json_decref(lease);

    /* The new leader releases too; the Lease then has no holder. */
    egpu_kube_elector_stop(other->el);
    lease = get_lease();
    assert_string_equal(spec_str(lease, "holderIdentity"), "");
    assert_int_equal(spec_int(lease, "leaseDurationSeconds"), 1);
    assert_int_equal(spec_int(lease, "leaseTransitions"), 1);
    assert_string_equal(spec_str(lease, "acquireTime"), spec_str(lease, "renewTime"));
    json_decref(lease);
    assert_int_equal(wait_count(&b.stopped, 1, 2000), 1);
    egpu_kube_elector_free(a.el);
    egpu_kube_elector_free(b.el);
}

/* Someone else writes the Lease (here a label, as a renewal whose reply the
 * stop cancelled would) just before the leader stops: its release meets a
 * stale resourceVersion, reads the Lease again and still releases it. */
static void test_release_after_outside_write(void **state)
{
    struct egpu_error err = {0};
    struct cand a;
    json_t *lease, *labels;

    (void)state;
    cand_start(&a, "stale", true);
    assert_non_null(wait_leader(&a, NULL, 3000));
    lease = get_lease();
    labels = json_pack("{s:s}", "touched", "yes");
    assert_int_equal(json_object_set_new(json_object_get(lease, "metadata"), "labels", labels), 0);
    if (egpu_kube_update(srv.kc, &egpu_kube_leases, "kube-system", "egpu-test", lease, NULL, NULL,
                         &err) != 0)
        fail_msg("update lease: %s", err.msg);
    json_decref(lease);
    egpu_kube_elector_stop(a.el);
    lease = get_lease();
    assert_string_equal(spec_str(lease, "holderIdentity"), "");
    assert_int_equal(spec_int(lease, "leaseDurationSeconds"), 1);
    assert_string_equal(
        json_string_value(json_object_get(
            json_object_get(json_object_get(lease, "metadata"), "labels"), "touched")),
        "yes");
    json_decref(lease);
    egpu_kube_elector_free(a.el);
}

static void test_leader_steps_down_when_it_cannot_renew(void **state)
{
    struct cand a;
    json_t *lease;
    long t0, dt;

    (void)state;
    cand_start(&a, "solo", false);
    assert_non_null(wait_leader(&a, NULL, 3000));
    tks_post(&srv, "down", "{\"down\":true}");
    t0 = tks_now_ms();
    while (egpu_kube_elector_is_leader(a.el) && tks_now_ms() - t0 < 5000)
        tks_sleep_ms(10);
    dt = tks_now_ms() - t0;
    fprintf(stderr, "stepped down after: %ld ms\n", dt);
    assert_false(egpu_kube_elector_is_leader(a.el));
    assert_int_equal(wait_count(&a.stopped, 1, 2000), 1);
    /* At most one retry after its last renew plus the renew deadline. */
    assert_true(dt <= RETRY_MS + RENEW_MS + 600);
    tks_post(&srv, "down", "{\"down\":false}");
    /* It still holds the Lease, so it renews it: no transition. */
    assert_non_null(wait_leader(&a, NULL, 3000));
    assert_int_equal(wait_count(&a.started, 2, 2000), 2);
    lease = get_lease();
    assert_string_equal(spec_str(lease, "holderIdentity"), "solo");
    assert_int_equal(spec_int(lease, "leaseTransitions"), 0);
    json_decref(lease);
    egpu_kube_elector_free(a.el);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_validate_and_identity, tks_reset_test),
        cmocka_unit_test_setup(test_one_leader_failover_without_release, tks_reset_test),
        cmocka_unit_test_setup(test_failover_with_release, tks_reset_test),
        cmocka_unit_test_setup(test_release_after_outside_write, tks_reset_test),
        cmocka_unit_test_setup(test_leader_steps_down_when_it_cannot_renew, tks_reset_test),
    };

    return cmocka_run_group_tests(tests, group_setup, tks_group_teardown);
}
