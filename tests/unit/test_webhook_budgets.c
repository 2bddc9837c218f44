/* tests/unit/test_webhook_budgets.c - GPU budgets at admission
 * (src/webhook/budgets.c) through the real handler, one row per rule: a GPU
 * Pod CREATE in namespace ml, whose GPUBudget and PriorityClasses come from
 * a fake lookup; the exact JSON Patch (decoded: priorityClassName, priority
 * and preemptionPolicy together, and the finalizer elasticgpu.io/metering)
 * and the exact warnings, or the exact denial, out. Each patch is applied
 * as the API server would: the result passes /validate, and a second pass
 * over it (reinvocationPolicy: IfNeeded) makes no patch. On UPDATE,
 * /validate lets only the controller remove the finalizer.
 *
 * The pods come as the API server hands them to mutating webhooks: its
 * Priority plugin has already set spec.priority (0, or the value of the
 * class the pod named) and spec.preemptionPolicy.
 */
#include "webhook_testutil.h"

#define FIN     "elasticgpu.io/metering"
#define IN_PC   "gpu-in-budget"
#define OVER_PC "gpu-over-budget"
#define GPU     "{'elasticgpu.io/gpu-core':'30','elasticgpu.io/gpu-memory':'4096'}"
#define ADD_FIN "{'op':'add','path':'/metadata/finalizers','value':['" FIN "']}"
#define CTRL    EGPU_WEBHOOK_CONTROLLER_USER
#define OVER_MSG                                                                                \
    "namespace ml is over its GPU budget (GPUBudget team); the pod gets PriorityClass " OVER_PC \
    " and may be preempted by pods of namespaces within budget"
#define IN_MSG \
    "namespace ml is within its GPU budget (GPUBudget team); the pod gets PriorityClass " IN_PC
#define METERED_MSG                                                                               \
    "namespace ml is within its GPU budget (GPUBudget team); the pod keeps its priority and its " \
    "GPU time is metered (finalizer " FIN ")"

/* The fake lookup: GPUBudgets of namespace ml, PriorityClasses. */
struct fake {
    json_t *budgets; /* array */
    json_t *classes; /* name -> PriorityClass */
    bool down;       /* the lookups cannot be answered */
    bool class_down; /* the PriorityClass lookup cannot be answered */
    int lists, class_gets;
};

static int fake_list(void *ud, const char *ns, json_t **out, struct egpu_error *err)
{
    struct fake *f = ud;

    assert_string_equal(ns, "ml");
    f->lists++;
    if (f->down)
        return egpu_error_set(err, -EIO, "the cache is gone");
    *out = json_deep_copy(f->budgets);
    return *out ? 0 : -ENOMEM;
}

static int fake_class(void *ud, const char *name, json_t **out, struct egpu_error *err)
{
    struct fake *f = ud;
    json_t *pc = json_object_get(f->classes, name);

    f->class_gets++;
    if (f->class_down)
        return egpu_error_set(err, -EIO, "the class cache is gone");
    if (pc == NULL)
        return -ENOENT;
    *out = json_incref(pc);
    return 0;
}

/* GPUBudget ml/name: state NULL = no status (not metered yet); in_class
 * NULL = no inBudgetPriorityClassName. */
static json_t *budget(const char *name, const char *state, const char *in_class)
{
    json_t *b = wt_json("{'apiVersion':'elasticgpu.io/v1alpha1','kind':'GPUBudget','metadata':{"
                        "'namespace':'ml'},'spec':{'gpuHours':100,'period':'Monthly',"
                        "'overBudgetPriorityClassName':'" OVER_PC "'}}");

    json_object_set_new(json_object_get(b, "metadata"), "name", json_string(name));
    if (in_class != NULL)
        json_object_set_new(json_object_get(b, "spec"), "inBudgetPriorityClassName",
                            json_string(in_class));
    if (state != NULL)
        json_object_set_new(b, "status", json_pack("{s:s}", "state", state));
    return b;
}

static void add_classes(struct fake *f)
{
    json_object_set_new(f->classes, IN_PC,
                        wt_json("{'apiVersion':'scheduling.k8s.io/v1','kind':'PriorityClass',"
                                "'metadata':{'name':'" IN_PC "'},'value':1000}"));
    json_object_set_new(f->classes, OVER_PC,
                        wt_json("{'apiVersion':'scheduling.k8s.io/v1','kind':'PriorityClass',"
                                "'metadata':{'name':'" OVER_PC "'},'value':-10,"
                                "'preemptionPolicy':'Never'}"));
    json_object_set_new(f->classes, "team-high",
                        wt_json("{'apiVersion':'scheduling.k8s.io/v1','kind':'PriorityClass',"
                                "'metadata':{'name':'team-high'},'value':100000}"));
}

/* A pod as the Priority plugin leaves it: class (NULL: none) at priority. */
static json_t *ppod(const char *limits, const char *class, int priority, const char *finalizers)
{
    json_t *pod = wt_pod(limits, NULL, "elastic-gpu-scheduler");
    json_t *spec = json_object_get(pod, "spec");

    if (class != NULL)
        json_object_set_new(spec, "priorityClassName", json_string(class));
    json_object_set_new(spec, "priority", json_integer(priority));
    json_object_set_new(spec, "preemptionPolicy", json_string("PreemptLowerPriority"));
    if (finalizers != NULL)
        json_object_set_new(json_object_get(pod, "metadata"), "finalizers", wt_json(finalizers));
    return pod;
}

struct bcase {
    const char *what;
    bool has_budget;
    const char *state;    /* status.state, NULL: no status */
    const char *in_class; /* inBudgetPriorityClassName, NULL: none */
    bool classes;         /* the PriorityClasses exist */
    const char *limits;   /* the pod's GPU ask */
    const char *own;      /* the pod's own class, NULL: none */
    int own_priority;
    const char *finalizers; /* the pod's own, JSON with ', or NULL */
    bool down;
    const char *ops; /* the patch, or NULL: none */
    const char *warn[2];
    const char *denied;
};

static const struct bcase cases[] = {
    {"in budget, with an in-budget class: that class, all three fields",
     true,
     "InBudget",
     IN_PC,
     true,
     GPU,
     NULL,
     0,
     NULL,
     false,
     "[" ADD_FIN ",{'op':'replace','path':'/spec/priority','value':1000},"
     "{'op':'add','path':'/spec/priorityClassName','value':'" IN_PC "'}]",
     {IN_MSG, NULL},
     NULL},
    {"in budget, no in-budget class: the finalizer only",
     true,
     "InBudget",
     NULL,
     true,
     GPU,
     NULL,
     0,
     NULL,
     false,
     "[" ADD_FIN "]",
     {METERED_MSG, NULL},
     NULL},
    {"over budget: the over-budget class, its value and preemptionPolicy Never",
     true,
     "OverBudget",
     IN_PC,
     true,
     GPU,
     NULL,
     0,
     NULL,
     false,
     "[" ADD_FIN ",{'op':'replace','path':'/spec/priority','value':-10},"
     "{'op':'replace','path':'/spec/preemptionPolicy','value':'Never'},"
     "{'op':'add','path':'/spec/priorityClassName','value':'" OVER_PC "'}]",
     {OVER_MSG, NULL},
     NULL},
    {"no budget: nothing changes",
     false,
     NULL,
     NULL,
     true,
     GPU,
     NULL,
     0,
     NULL,
     false,
     NULL,
     {NULL, NULL},
     NULL},
    {"a budget not metered yet (no status): InBudget",
     true,
     NULL,
     IN_PC,
     true,
     GPU,
     NULL,
     0,
     NULL,
     false,
     "[" ADD_FIN ",{'op':'replace','path':'/spec/priority','value':1000},"
     "{'op':'add','path':'/spec/priorityClassName','value':'" IN_PC "'}]",
     {IN_MSG, NULL},
     NULL},
    {"over budget, the class missing: admitted at its priority, with a warning",
     true,
     "OverBudget",
     IN_PC,
     false,
     GPU,
     NULL,
     0,
     NULL,
     false,
     "[" ADD_FIN "]",
     {"namespace ml is over its GPU budget (GPUBudget team), whose PriorityClass " OVER_PC
      " (spec.overBudgetPriorityClassName) does not exist: the pod is admitted at the priority it "
      "has; create the PriorityClass or correct the GPUBudget",
      NULL},
     NULL},
    {"in budget, the class missing: the pod keeps its own class",
     true,
     "InBudget",
     IN_PC,
     false,
     GPU,
     "team-high",
     100000,
     NULL,
     false,
     "[" ADD_FIN "]",
     {"namespace ml is within its GPU budget (GPUBudget team), whose PriorityClass " IN_PC
      " (spec.inBudgetPriorityClassName) does not exist: the pod is admitted at the priority it "
      "has; create the PriorityClass or correct the GPUBudget",
      NULL},
     NULL},
    {"over budget, the pod's own class replaced",
     true,
     "OverBudget",
     IN_PC,
     true,
     GPU,
     "team-high",
     100000,
     "['example.com/keep']",
     false,
     "[{'op':'replace','path':'/metadata/finalizers','value':['example.com/keep','" FIN "']},"
     "{'op':'replace','path':'/spec/priorityClassName','value':'" OVER_PC "'},"
     "{'op':'replace','path':'/spec/priority','value':-10},"
     "{'op':'replace','path':'/spec/preemptionPolicy','value':'Never'}]",
     {OVER_MSG, "the pod's PriorityClass team-high is replaced by " OVER_PC
                ": GPU pods of namespace ml take the class of GPUBudget team"},
     NULL},
    {"no budget: the pod's own class kept",
     false,
     NULL,
     NULL,
     true,
     GPU,
     "team-high",
     100000,
     NULL,
     false,
     NULL,
     {NULL, NULL},
     NULL},
    {"a pod without a GPU: not looked up, untouched",
     true,
     "OverBudget",
     IN_PC,
     true,
     "{'cpu':'1'}",
     NULL,
     0,
     NULL,
     false,
     NULL,
     {NULL, NULL},
     NULL},
    {"the budgets cannot be read: refused",
     true,
     "OverBudget",
     IN_PC,
     true,
     GPU,
     NULL,
     0,
     NULL,
     true,
     NULL,
     {NULL, NULL},
     "cannot read the GPUBudgets of namespace ml (the cache is gone); the pod is refused rather "
     "than admitted outside its budget, try again"},
};

/* The patched pod passes /validate, and /mutate again patches nothing. */
static void check_applied(const struct egpu_webhook_config *cfg, const json_t *pod,
                          const json_t *ops)
{
    json_t *doc = json_deep_copy(pod);
    struct wt_reply again;

    assert_int_equal(egpu__webhook_patch_apply(doc, ops), 0);
    again = wt_call(cfg, EGPU_WEBHOOK_VALIDATE, NULL,
                    wt_review("CREATE", "", "v1", "Pod", "alice", json_incref(doc), NULL));
    wt_assert_allowed_minimal(&again);
    wt_free(&again);
    again = wt_call(cfg, EGPU_WEBHOOK_MUTATE, NULL,
                    wt_review("CREATE", "", "v1", "Pod", "alice", doc, NULL));
    wt_assert_allowed_minimal(&again); /* reinvocation: no patch, no warning */
    wt_free(&again);
}

static void test_budgets(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct bcase *c = &cases[i];
        struct fake f = {.budgets = json_array(), .classes = json_object(), .down = c->down};
        struct egpu_webhook_budgets src = {
            .list = fake_list, .priority_class = fake_class, .ud = &f};
        struct egpu_webhook_config cfg = {.set_scheduler_name = true, .budgets = &src};
        json_t *pod = ppod(c->limits, c->own, c->own_priority, c->finalizers), *warnings;
        size_t nwarn = c->warn[1] ? 2 : c->warn[0] ? 1 : 0;
        struct wt_reply w;

        print_message("case %zu: %s\n", i, c->what);
        if (c->has_budget)
            json_array_append_new(f.budgets, budget("team", c->state, c->in_class));
        if (c->classes)
            add_classes(&f);
        w = wt_call(&cfg, EGPU_WEBHOOK_MUTATE, NULL,
                    wt_review("CREATE", "", "v1", "Pod", "alice", json_incref(pod), NULL));
        if (c->denied != NULL) {
            wt_assert_denied(&w, c->denied);
            assert_null(json_object_get(wt_response(&w), "warnings"));
        } else if (c->ops == NULL) {
            wt_assert_allowed_minimal(&w);
        } else {
            assert_int_equal(w.result, EGPU_WEBHOOK_PATCHED);
            wt_assert_json(w.ops, c->ops);
            warnings = json_object_get(wt_response(&w), "warnings");
            assert_int_equal(json_array_size(warnings), nwarn);
            for (size_t k = 0; k < nwarn; k++)
                assert_string_equal(json_string_value(json_array_get(warnings, k)), c->warn[k]);
            check_applied(&cfg, pod, w.ops);
        }
        if (strcmp(c->limits, GPU) != 0)
            assert_int_equal(f.lists, 0);
        wt_free(&w);
        json_decref(pod);
        json_decref(f.budgets);
        json_decref(f.classes);
    }
}

/* Several GPUBudgets in one namespace: the first by name decides, whatever
 * the order they are listed in. */
static void test_first_budget_by_name(void **state)
{
    struct fake f = {.budgets = json_array(), .classes = json_object()};
    struct egpu_webhook_budgets src = {.list = fake_list, .priority_class = fake_class, .ud = &f};
    struct egpu_webhook_config cfg = {.set_scheduler_name = true, .budgets = &src};
    json_t *b = budget("b-second", "InBudget", IN_PC);
    struct wt_reply w;

    (void)state;
    json_array_append_new(f.budgets, b);
    json_array_append_new(f.budgets, budget("a-first", "OverBudget", IN_PC));
    add_classes(&f);
    w = wt_call(&cfg, EGPU_WEBHOOK_MUTATE, NULL,
                wt_review("CREATE", "", "v1", "Pod", "alice", ppod(GPU, NULL, 0, NULL), NULL));
    wt_assert_json(w.ops, "[" ADD_FIN ",{'op':'replace','path':'/spec/priority','value':-10},"
                          "{'op':'replace','path':'/spec/preemptionPolicy','value':'Never'},"
                          "{'op':'add','path':'/spec/priorityClassName','value':'" OVER_PC "'}]");
    assert_string_equal(
        json_string_value(json_array_get(json_object_get(wt_response(&w), "warnings"), 0)),
        "namespace ml is over its GPU budget (GPUBudget a-first); the pod gets "
        "PriorityClass " OVER_PC " and may be preempted by pods of namespaces within budget");
    wt_free(&w);
    json_decref(f.budgets);
    json_decref(f.classes);
}

/* What cannot be used: a class with a bad preemptionPolicy or value, a
 * budget that does not decode (the pod admitted, with the finalizer and a
 * warning), a class lookup that fails (refused). */
static void test_unusable(void **state)
{
    struct fake f = {.budgets = json_array(), .classes = json_object()};
    struct egpu_webhook_budgets src = {.list = fake_list, .priority_class = fake_class, .ud = &f};
    struct egpu_webhook_config cfg = {.set_scheduler_name = true, .budgets = &src};
    json_t *pod = ppod(GPU, NULL, 0, NULL), *b;
    struct wt_reply w;

    (void)state;
    json_array_append_new(f.budgets, budget("team", "OverBudget", IN_PC));
    json_object_set_new(f.classes, OVER_PC,
                        wt_json("{'metadata':{'name':'" OVER_PC "'},'value':5,"
                                "'preemptionPolicy':'Sometimes'}"));
    w = wt_call(&cfg, EGPU_WEBHOOK_MUTATE, NULL,
                wt_review("CREATE", "", "v1", "Pod", "alice", json_incref(pod), NULL));
    wt_assert_json(w.ops, "[" ADD_FIN "]");
    wt_assert_json(
        json_object_get(wt_response(&w), "warnings"),
        "['namespace ml is over its GPU budget (GPUBudget team), whose PriorityClass " OVER_PC
        " (spec.overBudgetPriorityClassName) cannot be used (its preemptionPolicy is not "
        "PreemptLowerPriority or Never): the pod is admitted at the priority it has; "
        "create the PriorityClass or correct the GPUBudget']");
    check_applied(&cfg, pod, w.ops);
    wt_free(&w);

    json_object_set_new(f.classes, OVER_PC,
                        wt_json("{'metadata':{'name':'" OVER_PC "'},'value':3000000000}"));
    w = wt_call(&cfg, EGPU_WEBHOOK_MUTATE_NVIDIA, NULL,
                wt_review("CREATE", "", "v1", "Pod", "alice", json_incref(pod), NULL));
    wt_assert_json(w.ops, "[" ADD_FIN "]");
    wt_assert_json(
        json_object_get(wt_response(&w), "warnings"),
        "['namespace ml is over its GPU budget (GPUBudget team), whose PriorityClass " OVER_PC
        " (spec.overBudgetPriorityClassName) cannot be used (its value is not a 32-bit "
        "integer): the pod is admitted at the priority it has; create the PriorityClass "
        "or correct the GPUBudget']");
    wt_free(&w);

    f.class_down = true;
    w = wt_call(&cfg, EGPU_WEBHOOK_MUTATE, NULL,
                wt_review("CREATE", "", "v1", "Pod", "alice", json_incref(pod), NULL));
    wt_assert_denied(&w, "cannot look up PriorityClass " OVER_PC " of GPUBudget ml/team (the class "
                         "cache is gone); the pod is refused rather than admitted outside its "
                         "budget, try again");
    wt_free(&w);

    b = json_array_get(f.budgets, 0);
    json_object_set_new(json_object_get(b, "spec"), "gpuHours", json_integer(-1));
    w = wt_call(&cfg, EGPU_WEBHOOK_MUTATE, NULL,
                wt_review("CREATE", "", "v1", "Pod", "alice", json_incref(pod), NULL));
    wt_assert_json(w.ops, "[" ADD_FIN "]");
    assert_int_equal(json_array_size(json_object_get(wt_response(&w), "warnings")), 1);
    assert_true(
        strncmp(json_string_value(json_array_get(json_object_get(wt_response(&w), "warnings"), 0)),
                "namespace ml has GPUBudget team, which cannot be read (spec.gpuHours", 67) == 0);
    wt_free(&w);
    json_decref(pod);
    json_decref(f.budgets);
    json_decref(f.classes);
}

/* /validate: the metering finalizer is removed only by the controller. */
struct fcase {
    const char *what;
    const char *old_fins, *new_fins; /* JSON with ', NULL: none */
    const char *user;
    const char *denied; /* NULL: allowed */
};

#define FIN_DENIED(user)                                                                       \
    "finalizer " FIN " is removed only by the controller (" CTRL "), once it has metered the " \
    "pod's GPU time to its end; user \"" user "\" may not remove it"

static const struct fcase fcases[] = {
    {"a tenant removes it", "['" FIN "']", "[]", "alice", FIN_DENIED("alice")},
    {"a tenant drops the whole list", "['example.com/keep','" FIN "']", NULL, "alice",
     FIN_DENIED("alice")},
    {"the scheduler may not either", "['" FIN "']", "[]", EGPU_WEBHOOK_SCHEDULER_USER,
     FIN_DENIED(EGPU_WEBHOOK_SCHEDULER_USER)},
    {"the controller removes it", "['example.com/keep','" FIN "']", "['example.com/keep']", CTRL,
     NULL},
    {"a tenant removes another finalizer", "['example.com/keep','" FIN "']", "['" FIN "']", "alice",
     NULL},
    {"a tenant adds it", NULL, "['" FIN "']", "alice", NULL},
};

static void test_finalizer_guard(void **state)
{
    struct egpu_webhook_config cfg = {.set_scheduler_name = true};

    (void)state;
    for (size_t i = 0; i < sizeof(fcases) / sizeof(fcases[0]); i++) {
        const struct fcase *c = &fcases[i];
        json_t *old = ppod(GPU, NULL, 0, c->old_fins);
        json_t *now = ppod(GPU, NULL, 0, c->new_fins);
        struct wt_reply w;

        print_message("case %zu: %s\n", i, c->what);
        w = wt_call(&cfg, EGPU_WEBHOOK_VALIDATE, NULL,
                    wt_review("UPDATE", "", "v1", "Pod", c->user, now, old));
        if (c->denied != NULL)
            wt_assert_denied(&w, c->denied);
        else
            wt_assert_allowed_minimal(&w);
        wt_free(&w);
    }
}

/* --controller-user names who may remove it. */
static void test_finalizer_guard_user(void **state)
{
    struct egpu_webhook_config cfg = {.controller_user = "system:serviceaccount:ops:meter"};
    struct wt_reply w;

    (void)state;
    w = wt_call(&cfg, EGPU_WEBHOOK_VALIDATE, NULL,
                wt_review("UPDATE", "", "v1", "Pod", "system:serviceaccount:ops:meter",
                          ppod(GPU, NULL, 0, NULL), ppod(GPU, NULL, 0, "['" FIN "']")));
    wt_assert_allowed_minimal(&w);
    wt_free(&w);
    w = wt_call(&cfg, EGPU_WEBHOOK_VALIDATE, NULL,
                wt_review("UPDATE", "", "v1", "Pod", CTRL, ppod(GPU, NULL, 0, NULL),
                          ppod(GPU, NULL, 0, "['" FIN "']")));
    wt_assert_denied(&w, "finalizer " FIN " is removed only by the controller "
                         "(system:serviceaccount:ops:meter), once it has metered the pod's GPU "
                         "time to its end; user \"" CTRL "\" may not remove it");
    wt_free(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_budgets),
        cmocka_unit_test(test_first_budget_by_name),
        cmocka_unit_test(test_unusable),
        cmocka_unit_test(test_finalizer_guard),
        cmocka_unit_test(test_finalizer_guard_user),
    };

    egpu_log_level = -1;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
