/* tests/unit/test_webhook_seccomp.c - the seccomp guard of shared-GPU
 * containers (src/webhook/seccomp.c) through the real handler: /mutate gives
 * a container asking a gpu-core share (1..99) the profile that refuses new
 * user and mount namespaces, keeping the rest of its securityContext, and
 * refuses (as /validate does) what would lift it, naming the field; whole
 * cards and other containers are left alone.
 */
#include "webhook_testutil.h"

#define PROFILE_OP(ctr)                         \
    "{'op':'add','path':'/spec/containers/" ctr \
    "/securityContext','value':{'seccompProfile':" WT_SECCOMP "}}"
#define SN     "{'op':'replace','path':'/spec/schedulerName','value':'elastic-gpu-scheduler'}"
#define SHARED "{'elasticgpu.io/gpu-core':'30','elasticgpu.io/gpu-memory':'1024'}"

/* wt_pod without the seccompProfile it carries, and securityContext sc
 * (JSON with ', NULL: none) on its container. */
static json_t *bare_pod(const char *limits, const char *sc)
{
    json_t *pod = wt_pod(limits, NULL, "default-scheduler");
    json_t *c = json_array_get(json_object_get(json_object_get(pod, "spec"), "containers"), 0);

    json_object_del(c, "securityContext");
    if (sc != NULL)
        json_object_set_new(c, "securityContext", wt_json(sc));
    return pod;
}

static struct wt_reply call(const struct egpu_webhook_config *cfg, enum egpu_webhook_route r,
                            const char *op, json_t *obj, json_t *old)
{
    return wt_call(cfg, r, NULL, wt_review(op, "", "v1", "Pod", "alice", obj, old));
}

static void test_mutate_sets_the_profile(void **state)
{
    struct egpu_webhook_config cfg = {.set_scheduler_name = true};
    json_t *pod = bare_pod(SHARED, NULL), *doc;
    struct wt_reply w;

    (void)state;
    w = call(&cfg, EGPU_WEBHOOK_MUTATE, "CREATE", json_incref(pod), NULL);
    assert_int_equal(w.result, EGPU_WEBHOOK_PATCHED);
    wt_assert_json(w.ops, "[" PROFILE_OP("0") "," SN "]");
    /* applied as the API server would, it passes /validate and a second
     * pass makes no patch */
    doc = json_deep_copy(pod);
    assert_int_equal(egpu__webhook_patch_apply(doc, w.ops), 0);
    wt_free(&w);
    w = call(&cfg, EGPU_WEBHOOK_VALIDATE, "CREATE", json_incref(doc), NULL);
    wt_assert_allowed_minimal(&w);
    wt_free(&w);
    w = call(&cfg, EGPU_WEBHOOK_MUTATE, "CREATE", doc, NULL);
    wt_assert_allowed_minimal(&w);
    wt_free(&w);
    json_decref(pod);

    /* the container's own securityContext is kept: only the member is added */
    pod = bare_pod(SHARED, "{'runAsUser':65534,'capabilities':{'drop':['ALL']}}");
    w = call(&cfg, EGPU_WEBHOOK_MUTATE, "CREATE", pod, NULL);
    wt_assert_json(w.ops, "[{'op':'add','path':'/spec/containers/0/securityContext/"
                          "seccompProfile','value':" WT_SECCOMP "}," SN "]");
    wt_free(&w);

    /* --seccomp-profile RuntimeDefault, for containerd's default profile */
    cfg.seccomp_profile = "RuntimeDefault";
    pod = bare_pod(SHARED, NULL);
    w = call(&cfg, EGPU_WEBHOOK_MUTATE, "CREATE", pod, NULL);
    wt_assert_json(w.ops, "[{'op':'add','path':'/spec/containers/0/securityContext','value':{"
                          "'seccompProfile':{'type':'RuntimeDefault'}}}," SN "]");
    wt_free(&w);
}

/* Only the containers that get the interposer: a gpu-core share, also one
 * converted from a compatible name; never a whole card or a sidecar. */
static void test_only_shared_containers(void **state)
{
    struct egpu_webhook_config cfg = {.set_scheduler_name = false};
    json_t *pod = bare_pod("{'elasticgpu.io/gpu-core':'100'}", NULL);
    json_t *spec = json_object_get(pod, "spec");
    struct wt_reply w;

    (void)state;
    w = call(&cfg, EGPU_WEBHOOK_MUTATE, "CREATE", json_incref(pod), NULL);
    wt_assert_allowed_minimal(&w); /* a whole card: no interposer, no profile */
    wt_free(&w);
    /* a privileged whole-card container is not ours to refuse */
    json_object_set_new(json_array_get(json_object_get(spec, "containers"), 0), "securityContext",
                        wt_json("{'privileged':true}"));
    w = call(&cfg, EGPU_WEBHOOK_VALIDATE, "CREATE", json_incref(pod), NULL);
    wt_assert_allowed_minimal(&w);
    wt_free(&w);
    /* a sidecar next to a shared container is left alone, privileged or not */
    json_array_append_new(json_object_get(spec, "containers"),
                          wt_json("{'name':'shared','image':'x','resources':{'limits':"
                                  "{'tencent.com/vcuda-core':'20'}}}"));
    w = call(&cfg, EGPU_WEBHOOK_MUTATE, "CREATE", pod, NULL);
    wt_assert_json(w.ops,
                   "[{'op':'remove','path':'/spec/containers/1/resources/limits/tencent.com~1"
                   "vcuda-core'},{'op':'add','path':'/spec/containers/1/resources/limits/"
                   "elasticgpu.io~1gpu-core','value':'20'}," PROFILE_OP("1") "]");
    wt_free(&w);
}

struct refusal {
    const char *what;
    const char *container_sc; /* the shared container's securityContext, NULL: none */
    const char *pod_sc;       /* spec.securityContext, NULL: none */
    const char *message;
};

#define PRIV                                                                                   \
    "container \"train\": spec.containers[0].securityContext.privileged is true; a container " \
    "with a gpu-core share (1..99) runs under a seccomp profile that a privileged container "  \
    "escapes (allowed: false or unset)"
#define ALLOWED_PROFILE \
    "allowed: unset or type Localhost with localhostProfile elastic-gpu/shared-gpu.json"
#define PROFILE(type)                                                                           \
    "container \"train\": spec.containers[0].securityContext.seccompProfile.type is " type "; " \
    "a container with a gpu-core share (1..99) must run under the profile that refuses new "    \
    "namespaces (" ALLOWED_PROFILE ")"
#define CAP(c)                                                                                   \
    "container \"train\": spec.containers[0].securityContext.capabilities.add has " c "; a "     \
    "container with a gpu-core share (1..99) may not add SYS_ADMIN or ALL (it could mount over " \
    "/etc/elastic-gpu and leave its limits)"
#define POD_UNCONFINED                                                                     \
    "spec.securityContext.seccompProfile.type is Unconfined; a pod with a gpu-core share " \
    "(1..99) runs its shared containers under the profile that refuses new namespaces "    \
    "(" ALLOWED_PROFILE ")"

static const struct refusal refusals[] = {
    {"privileged", "{'privileged':true}", NULL, PRIV},
    {"container Unconfined", "{'seccompProfile':{'type':'Unconfined'}}", NULL,
     PROFILE("Unconfined")},
    {"container RuntimeDefault (CRI-O's allows unshare)",
     "{'seccompProfile':{'type':'RuntimeDefault'}}", NULL, PROFILE("RuntimeDefault")},
    {"a Localhost profile of the tenant's",
     "{'seccompProfile':{'type':'Localhost','localhostProfile':'mine.json'}}", NULL,
     PROFILE("Localhost")},
    {"SYS_ADMIN", "{'capabilities':{'add':['NET_ADMIN','SYS_ADMIN']}}", NULL, CAP("SYS_ADMIN")},
    {"CAP_SYS_ADMIN", "{'capabilities':{'add':['cap_sys_admin']}}", NULL, CAP("cap_sys_admin")},
    {"ALL", "{'capabilities':{'add':['ALL']}}", NULL, CAP("ALL")},
    {"pod Unconfined", NULL, "{'seccompProfile':{'type':'Unconfined'}}", POD_UNCONFINED},
    {"all at once", "{'privileged':true,'seccompProfile':{'type':'Unconfined'}}",
     "{'seccompProfile':{'type':'Unconfined'}}",
     PRIV "; " PROFILE("Unconfined") "; " POD_UNCONFINED},
};

static void test_refuses_what_lifts_it(void **state)
{
    struct egpu_webhook_config cfg = {.set_scheduler_name = true};

    (void)state;
    for (size_t i = 0; i < sizeof(refusals) / sizeof(refusals[0]); i++) {
        const struct refusal *r = &refusals[i];
        json_t *pod = bare_pod(SHARED, r->container_sc);
        struct wt_reply w;

        print_message("case %zu: %s\n", i, r->what);
        if (r->pod_sc != NULL)
            json_object_set_new(json_object_get(pod, "spec"), "securityContext",
                                wt_json(r->pod_sc));
        w = call(&cfg, EGPU_WEBHOOK_MUTATE, "CREATE", json_incref(pod), NULL);
        wt_assert_denied(&w, r->message);
        wt_free(&w);
        w = call(&cfg, EGPU_WEBHOOK_VALIDATE, "CREATE", json_incref(pod), NULL);
        wt_assert_denied(&w, r->message);
        wt_free(&w);
        /* a Deployment's template is refused by /validate too */
        w = wt_call(&cfg, EGPU_WEBHOOK_VALIDATE, NULL,
                    wt_review("CREATE", "apps", "v1", "Deployment", "alice",
                              wt_workload("Deployment", pod), NULL));
        assert_false(json_is_true(json_object_get(wt_response(&w), "allowed")));
        wt_free(&w);
    }
}

/* What does not lift the guard passes: allowPrivilegeEscalation (the
 * filter stays across execve), other capabilities, the pod's own
 * RuntimeDefault (the container's profile wins). */
static void test_allows_what_keeps_it(void **state)
{
    struct egpu_webhook_config cfg = {.set_scheduler_name = false};
    json_t *pod =
        bare_pod(SHARED, "{'allowPrivilegeEscalation':true,'capabilities':{'add':['NET_ADMIN',"
                         "'SYS_PTRACE']},'seccompProfile':" WT_SECCOMP "}");
    struct wt_reply w;

    (void)state;
    json_object_set_new(json_object_get(pod, "spec"), "securityContext",
                        wt_json("{'seccompProfile':{'type':'RuntimeDefault'}}"));
    w = call(&cfg, EGPU_WEBHOOK_MUTATE, "CREATE", json_incref(pod), NULL);
    wt_assert_allowed_minimal(&w);
    wt_free(&w);
    w = call(&cfg, EGPU_WEBHOOK_VALIDATE, "CREATE", pod, NULL);
    wt_assert_allowed_minimal(&w);
    wt_free(&w);
}

/* On UPDATE only what is new is refused: a pod admitted before the guard
 * keeps taking unrelated edits; one that gains privileged does not. */
static void test_update_only_new(void **state)
{
    struct egpu_webhook_config cfg = {0};
    json_t *old = bare_pod(SHARED, "{'privileged':true}");
    json_t *now = json_deep_copy(old);
    struct wt_reply w;

    (void)state;
    json_object_set_new(json_object_get(json_object_get(now, "metadata"), "labels"), "team",
                        json_string("b"));
    w = call(&cfg, EGPU_WEBHOOK_VALIDATE, "UPDATE", now, json_incref(old));
    wt_assert_allowed_minimal(&w);
    wt_free(&w);
    now = bare_pod(SHARED, "{'privileged':true}");
    json_decref(old);
    old = bare_pod(SHARED, NULL);
    w = call(&cfg, EGPU_WEBHOOK_VALIDATE, "UPDATE", now, old);
    wt_assert_denied(&w, PRIV);
    wt_free(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mutate_sets_the_profile),
        cmocka_unit_test(test_only_shared_containers),
        cmocka_unit_test(test_refuses_what_lifts_it),
        cmocka_unit_test(test_allows_what_keeps_it),
        cmocka_unit_test(test_update_only_new),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
