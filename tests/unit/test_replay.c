/* tests/unit/test_replay.c - the replay protocol on traces built in memory.
 *
 * Checks what the FGD paper's protocol promises: the same seed gives the same
 * replay, the arrivals stop at the inflation target, pods never leave (the
 * allocation ratio never falls), a workload that fits is placed whole, and
 * the figures are averaged per arrived-percent bucket.
 */
#include <errno.h>
#include <math.h>

#include "testutil.h"
#include "egpu/sim.h"

/* nnodes nodes of 8 cards (96 cores, 384 GiB) and npods pods cycling through
 * a few shapes: whole cards, shares and CPU-only pods. */
static void make_trace(struct egpu_trace *t, size_t nnodes, size_t npods)
{
    static const uint32_t shapes[][2] = {{1, 1000}, {1, 500},  {1, 250},
                                         {0, 0},    {2, 1000}, {1, 750}};

    memset(t, 0, sizeof(*t));
    t->nodes = egpu_calloc(nnodes, sizeof(*t->nodes));
    t->pods = egpu_calloc(npods, sizeof(*t->pods));
    assert_non_null(t->nodes);
    assert_non_null(t->pods);
    for (size_t i = 0; i < nnodes; i++) {
        struct egpu_trace_node *n = &t->nodes[i];

        snprintf(n->name, sizeof(n->name), "node-%04zu", i);
        n->cpu_milli = 96000;
        n->mem_mib = 393216;
        n->ngpus = 8;
        snprintf(n->model, sizeof(n->model), "G2");
    }
    for (size_t i = 0; i < npods; i++) {
        struct egpu_trace_pod *p = &t->pods[i];
        const uint32_t *s = shapes[i % (sizeof(shapes) / sizeof(shapes[0]))];

        snprintf(p->name, sizeof(p->name), "pod-%05zu", i);
        p->cpu_milli = 4000;
        p->mem_mib = 8192;
        p->num_gpu = s[0];
        p->gpu_milli = s[1];
    }
    t->nnodes = nnodes;
    t->npods = npods;
}

static void workload_of(const struct egpu_trace *t, struct egpu_workload *w)
{
    struct egpu_cluster *c;
    struct egpu_pod_request *reqs = egpu_calloc(t->npods, sizeof(*reqs));
    struct egpu_error err = {0};

    assert_non_null(reqs);
    assert_int_equal(egpu_trace_cluster(t, &c, &err), 0);
    for (size_t i = 0; i < t->npods; i++)
        assert_int_equal(egpu_trace_request(c, &t->pods[i], &reqs[i], &err), 0);
    assert_int_equal(egpu_workload_from_requests(reqs, t->npods, 0.95, w), 0);
    egpu_free(reqs);
    egpu_cluster_free(c);
}

static void replay(const struct egpu_trace *t, const struct egpu_workload *w,
                   enum egpu_policy_kind k, uint64_t seed, double inflate,
                   struct egpu_replay_result *out)
{
    struct egpu_replay_config cfg = {
        .node_policy = k, .card_policy = k, .seed = seed, .inflate = inflate, .workload = w};
    struct egpu_error err = {0};

    if (egpu_replay_run(t, &cfg, out, &err) != 0)
        fail_msg("replay: %s", err.msg);
}

static void test_deterministic_per_seed(void **state)
{
    static struct egpu_replay_result a, b, c;
    struct egpu_trace t;
    struct egpu_workload w;
    bool differ = false;

    (void)state;
    make_trace(&t, 40, 300);
    workload_of(&t, &w);
    replay(&t, &w, EGPU_POLICY_FGD, 42, 1.3, &a);
    replay(&t, &w, EGPU_POLICY_FGD, 42, 1.3, &b);
    replay(&t, &w, EGPU_POLICY_FGD, 43, 1.3, &c);
    assert_int_equal(a.arrivals, b.arrivals);
    assert_int_equal(a.failed, b.failed);
    assert_memory_equal(a.buckets, b.buckets, sizeof(a.buckets));
    /* Another seed draws other clones in another order. */
    differ = a.arrivals != c.arrivals || memcmp(a.buckets, c.buckets, sizeof(a.buckets)) != 0;
    assert_true(differ);
    egpu_workload_free(&w);
    egpu_trace_free(&t);
}

static void test_inflation_target(void **state)
{
    static struct egpu_replay_result r;
    struct egpu_trace t;
    struct egpu_workload w;
    uint64_t trace_milli = 0;

    (void)state;
    make_trace(&t, 40, 300);
    workload_of(&t, &w);
    for (size_t i = 0; i < t.npods; i++)
        trace_milli += (uint64_t)t.pods[i].num_gpu * t.pods[i].gpu_milli;
    /* 300 pods ask 300/6 * (1000 + 500 + 250 + 0 + 2000 + 750) = 225000 milli
     * of 320000: the trace alone is 70.3% of capacity. */
    assert_int_equal(trace_milli, 225000);
    replay(&t, &w, EGPU_POLICY_BESTFIT, 7, 1.3, &r);
    assert_true(r.arrivals > t.npods);
    /* Clones stop before the total would pass 130%; the largest pod is 2000
     * milli = 0.625% of capacity, so the total ends within that of 130%. */
    assert_true(r.final_arrived_pct <= 130.0 + 1e-9);
    assert_true(r.final_arrived_pct > 130.0 - 0.625 - 1e-9);
    /* Capacity is 100%: at 130% arrived some pods failed. */
    assert_true(r.failed > 0);
    assert_true(r.final_alloc_pct <= 100.0 + 1e-9);
    egpu_workload_free(&w);
    egpu_trace_free(&t);
}

static void test_no_departures_monotone(void **state)
{
    static struct egpu_replay_result r;
    const enum egpu_policy_kind kinds[] = {EGPU_POLICY_BINPACK, EGPU_POLICY_SPREAD,
                                           EGPU_POLICY_BESTFIT, EGPU_POLICY_RANDOM,
                                           EGPU_POLICY_FGD};
    struct egpu_trace t;
    struct egpu_workload w;

    (void)state;
    make_trace(&t, 30, 250);
    workload_of(&t, &w);
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        double last = 0.0;

        replay(&t, &w, kinds[k], 42, 1.3, &r);
        for (int b = 0; b <= EGPU_REPLAY_PCT_MAX; b++) {
            double mean;

            if (r.buckets[b].events == 0)
                continue;
            mean = r.buckets[b].alloc_pct_sum / r.buckets[b].events;
            /* Pods never leave: the allocation ratio never falls, and never
             * exceeds what arrived. */
            assert_true(mean + 1e-9 >= last);
            assert_true(mean <= b + 0.5 + 1e-9);
            last = mean;
        }
    }
    egpu_workload_free(&w);
    egpu_trace_free(&t);
}

static void test_everything_fits(void **state)
{
    static struct egpu_replay_result r;
    struct egpu_trace t;
    struct egpu_workload w;

    (void)state;
    make_trace(&t, 40, 300);
    workload_of(&t, &w);
    /* Inflate to 50%: well within capacity, so nothing fails and the
     * allocation ratio equals the arrived ratio in every bucket. */
    replay(&t, &w, EGPU_POLICY_FGD, 42, 0.5, &r);
    assert_int_equal(r.failed, 0);
    assert_true(fabs(r.final_alloc_pct - r.final_arrived_pct) < 1e-9);
    for (int x = 10; x <= 45; x += 5) {
        double a = egpu_replay_alloc_at(&r, 1, x);

        assert_true(a >= 0.0);
        assert_true(fabs(a - x) <= 1.0);
    }
    /* Nothing arrived beyond 50%: no bucket near 80. */
    assert_true(egpu_replay_alloc_at(&r, 1, 80) < 0.0);
    egpu_workload_free(&w);
    egpu_trace_free(&t);
}

static void test_bucket_means(void **state)
{
    static struct egpu_replay_result r[2];

    (void)state;
    memset(r, 0, sizeof(r));
    /* Seed 1: bucket 90 has two events (89 and 91). Seed 2: one event (95). */
    r[0].buckets[90] =
        (struct egpu_replay_bucket){.events = 2, .alloc_pct_sum = 180.0, .frag_pct_sum = 40.0};
    r[1].buckets[90] =
        (struct egpu_replay_bucket){.events = 1, .alloc_pct_sum = 95.0, .frag_pct_sum = 10.0};
    /* Mean per seed (90 and 95), then across seeds. */
    assert_true(fabs(egpu_replay_alloc_at(r, 2, 90) - 92.5) < 1e-9);
    assert_true(fabs(egpu_replay_frag_at(r, 2, 90) - 15.0) < 1e-9);
    /* No event at 91: the paper's analysis falls back to 90. */
    assert_true(fabs(egpu_replay_alloc_at(r, 2, 91) - 92.5) < 1e-9);
    assert_true(egpu_replay_alloc_at(r, 2, 93) < 0.0);
}

static void test_published(void **state)
{
    const char *nodes = "openb_node_list_gpu_node.csv";
    const double *p;

    (void)state;
    p = egpu_replay_published(nodes, 6212, "openb_pod_list_default.csv", 8152, EGPU_POLICY_FGD,
                              EGPU_POLICY_FGD);
    assert_non_null(p);
    assert_true(fabs(p[2] - 95.23) < 1e-9);
    /* A directory in front of the file name does not matter. */
    p = egpu_replay_published("/d/openb_node_list_gpu_node.csv", 6212,
                              "/d/openb_pod_list_default.csv", 8152, EGPU_POLICY_BESTFIT,
                              EGPU_POLICY_BESTFIT);
    assert_non_null(p);
    assert_true(fabs(p[2] - 92.86) < 1e-9);
    assert_non_null(egpu_replay_published(nodes, 6212, "openb_pod_list_default.csv", 8152,
                                          EGPU_POLICY_RANDOM, EGPU_POLICY_RANDOM));
    assert_null(egpu_replay_published(nodes, 6212, "openb_pod_list_default.csv", 8152,
                                      EGPU_POLICY_BINPACK, EGPU_POLICY_BINPACK));
    assert_null(egpu_replay_published(nodes, 6212, "openb_pod_list_default.csv", 8152,
                                      EGPU_POLICY_FGD, EGPU_POLICY_BINPACK));
    /* Each variant has its own figures. */
    p = egpu_replay_published(nodes, 6212, "openb_pod_list_gpushare40.csv", 8152, EGPU_POLICY_FGD,
                              EGPU_POLICY_FGD);
    assert_non_null(p);
    assert_true(fabs(p[0] - 80.0) < 1e-9 && fabs(p[2] - 93.96) < 1e-9);
    p = egpu_replay_published(nodes, 6212, "openb_pod_list_multigpu20.csv", 8324,
                              EGPU_POLICY_RANDOM, EGPU_POLICY_RANDOM);
    assert_non_null(p);
    assert_true(fabs(p[3] - 88.69) < 1e-9);
    p = egpu_replay_published(nodes, 6212, "openb_pod_list_gpuspec10.csv", 8152,
                              EGPU_POLICY_BESTFIT, EGPU_POLICY_BESTFIT);
    assert_non_null(p);
    assert_true(fabs(p[1] - 84.98) < 1e-9);
    p = egpu_replay_published(nodes, 6212, "openb_pod_list_cpu050.csv", 7439, EGPU_POLICY_FGD,
                              EGPU_POLICY_FGD);
    assert_non_null(p);
    assert_true(fabs(p[2] - 95.0) < 1e-9);
    /* Not the trace they were published for: another file, another cluster, other rows. */
    assert_null(
        egpu_replay_published(nodes, 6212, "my_pods.csv", 8152, EGPU_POLICY_FGD, EGPU_POLICY_FGD));
    assert_null(egpu_replay_published("openb_node_list_all_node.csv", 6212,
                                      "openb_pod_list_default.csv", 8152, EGPU_POLICY_FGD,
                                      EGPU_POLICY_FGD));
    assert_null(egpu_replay_published(nodes, 16, "openb_pod_list_default.csv", 8152,
                                      EGPU_POLICY_FGD, EGPU_POLICY_FGD));
    assert_null(egpu_replay_published(nodes, 6212, "openb_pod_list_default.csv", 40,
                                      EGPU_POLICY_FGD, EGPU_POLICY_FGD));
    assert_null(egpu_replay_published(nodes, 6212, "openb_pod_list_cpu050.csv", 8152,
                                      EGPU_POLICY_FGD, EGPU_POLICY_FGD));
}

static void test_bad_config(void **state)
{
    static struct egpu_replay_result r;
    struct egpu_trace t;
    struct egpu_workload w;
    struct egpu_replay_config cfg = {
        .node_policy = EGPU_POLICY_FGD, .card_policy = EGPU_POLICY_FGD, .inflate = 0.0};
    struct egpu_error err = {0};
    long live;

    (void)state;
    make_trace(&t, 4, 10);
    workload_of(&t, &w);
    live = egpu_alloc_live();
    cfg.workload = &w;
    assert_int_equal(egpu_replay_run(&t, &cfg, &r, &err), -EINVAL);
    cfg.inflate = 1.3;
    cfg.workload = NULL;
    assert_int_equal(egpu_replay_run(&t, &cfg, &r, &err), -EINVAL);
    assert_int_equal(egpu_alloc_live(), live);
    egpu_workload_free(&w);
    egpu_trace_free(&t);
}

/* egpu_replay_idle_of on four nodes worked out by hand, against the
 * shapes: a share of 50% with 4 cores (twice, counted once), a whole card
 * with 12 cores, a share of 30% with 1 core on T4 cards only, and a pod of
 * 1 core and no GPU (passed over).
 * - a (V100, 8 cores, 2 of them taken): card 0 at 81% leaves 190 milli,
 *   which no shape asks so little of: fragment; card 1 is free and the
 *   50% share fits with its 4 cores: usable, whole.
 * - b (V100, 2 cores): its free card takes the share or the whole card by
 *   GPU and model, but neither's CPU fits: cpu, whole (the T4 share, which
 *   the model refuses, ranks below).
 * - c (V100, 64 cores): card at 60% leaves 400: only the T4 share takes
 *   that little, and not on a V100: model, partly used.
 * - d (T4): its card is in use: nothing idle. */
static void test_idle_classes(void **state)
{
    long live = egpu_alloc_live();
    struct egpu_cluster *c = egpu_cluster_new();
    struct egpu_node *a, *cn, *d;
    struct egpu_pod_request reqs[5], cpu_pod = tu_request(2000, 0, 0, 0);
    struct egpu_pick none = {.nshares = 0};
    struct egpu_replay_idle idle;

    (void)state;
    assert_non_null(c);
    a = tu_add_node(c, "a", 8000, 32768, 2, "V100M16", 0);
    tu_add_node(c, "b", 2000, 32768, 1, "V100M16", 0);
    cn = tu_add_node(c, "c", 64000, 32768, 1, "V100M16", 0);
    d = tu_add_node(c, "d", 64000, 32768, 1, "T4", 0);
    assert_int_equal(egpu_cluster_assign(c, "cpu", a, &cpu_pod, &none, NULL), 0);
    tu_use_card(c, a, "a0", 0, 81);
    tu_use_card(c, cn, "c0", 0, 60);
    tu_use_card(c, d, "d0", 0, 100);
    reqs[0] = tu_request(4000, 0, 50, 0);
    reqs[1] = tu_request(12000, 0, 100, 0);
    reqs[2] = tu_request(1000, 0, 30, 0);
    reqs[2].model_mask = 1ULL << d->model;
    reqs[3] = tu_request(1000, 0, 0, 0);
    reqs[4] = reqs[0];
    egpu_replay_idle_of(c, reqs, 5, &idle);
    assert_true(idle.taken);
    assert_int_equal(idle.idle_milli, 190 + 1000 + 1000 + 400);
    assert_int_equal(idle.usable_whole, 1000);
    assert_int_equal(idle.usable_part, 0);
    assert_int_equal(idle.cpu_whole, 1000);
    assert_int_equal(idle.cpu_part, 0);
    assert_int_equal(idle.model_whole, 0);
    assert_int_equal(idle.model_part, 400);
    assert_int_equal(idle.frag_whole, 0);
    assert_int_equal(idle.frag_part, 190);
    assert_int_equal(idle.part_free[0], 190);
    assert_int_equal(idle.part_free[1], 400);
    assert_int_equal(idle.part_free[2], 0);
    egpu_cluster_free(c);
    assert_int_equal(egpu_alloc_live(), live);
}

/* kube-scheduler's numFeasibleNodesToFind, worked by hand: every node below
 * 100; else N x p / 100 with p = 50 - N / 125 (integer), at least 5, and at
 * least 100 nodes. */
static void test_kube_nodes_to_find(void **state)
{
    (void)state;
    assert_int_equal(egpu_sim_kube_nodes_to_find(0, 0), 0);
    assert_int_equal(egpu_sim_kube_nodes_to_find(99, 0), 99);
    assert_int_equal(egpu_sim_kube_nodes_to_find(100, 0), 100);     /* 50% = 50, raised to 100 */
    assert_int_equal(egpu_sim_kube_nodes_to_find(250, 0), 120);     /* 48% */
    assert_int_equal(egpu_sim_kube_nodes_to_find(1213, 0), 497);    /* openb: 41% */
    assert_int_equal(egpu_sim_kube_nodes_to_find(5000, 0), 500);    /* 10% */
    assert_int_equal(egpu_sim_kube_nodes_to_find(5624, 0), 337);    /* 6% */
    assert_int_equal(egpu_sim_kube_nodes_to_find(20000, 0), 1000);  /* 50 - 160: 5% */
    assert_int_equal(egpu_sim_kube_nodes_to_find(65000, 0), 3250);  /* 5% */
    assert_int_equal(egpu_sim_kube_nodes_to_find(1213, 5), 100);    /* 60, raised to 100 */
    assert_int_equal(egpu_sim_kube_nodes_to_find(1213, 100), 1213); /* every node */
    assert_int_equal(egpu_sim_kube_nodes_to_find(50, 5), 50);
}

static void test_sample_parse_and_want(void **state)
{
    static const char *const bad[] = {"",  "0",   "kube:", "kube:0", "0%",     "101%",
                                      "%", "5%%", "x",     "-3",     "kube:x", "all:3"};
    struct egpu_sim_sample s;
    struct egpu_error err = {0};

    (void)state;
    assert_int_equal(egpu_sim_sample_parse("all", &s, &err), 0);
    assert_int_equal(s.mode, EGPU_SIM_SAMPLE_ALL);
    assert_int_equal(egpu_sim_sample_want(&s, 1213), 1213);
    assert_int_equal(egpu_sim_sample_parse("kube", &s, &err), 0);
    assert_int_equal(s.mode, EGPU_SIM_SAMPLE_KUBE);
    assert_int_equal(egpu_sim_sample_want(&s, 1213), 497);
    assert_int_equal(egpu_sim_sample_want(&s, 40), 40);
    /* The share a 65,000-node cluster finds (5%), of 1,213 nodes: 60. */
    assert_int_equal(egpu_sim_sample_parse("kube:65000", &s, &err), 0);
    assert_int_equal(egpu_sim_sample_want(&s, 1213), 60);
    assert_int_equal(egpu_sim_sample_parse("kube:5000", &s, &err), 0);
    assert_int_equal(egpu_sim_sample_want(&s, 1213), 121);
    assert_int_equal(egpu_sim_sample_parse("5%", &s, &err), 0);
    assert_int_equal(s.mode, EGPU_SIM_SAMPLE_PERCENT);
    assert_int_equal(egpu_sim_sample_want(&s, 1213), 60);
    assert_int_equal(egpu_sim_sample_want(&s, 10), 1); /* at least one */
    assert_int_equal(egpu_sim_sample_parse("100", &s, &err), 0);
    assert_int_equal(s.mode, EGPU_SIM_SAMPLE_COUNT);
    assert_int_equal(egpu_sim_sample_want(&s, 1213), 100);
    assert_int_equal(egpu_sim_sample_want(&s, 40), 40); /* at most every node */
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err = (struct egpu_error){0};
        assert_int_equal(egpu_sim_sample_parse(bad[i], &s, &err), -EINVAL);
        assert_non_null(strstr(err.msg, "expected all, kube, kube:NODES"));
    }
}

/* The scan and the choice among its nodes, worked by hand. Five nodes in
 * this order, 8 cores each, one card unless said; the pod asks 4 cores and
 * half a card; best-fit (-(0.5 CPU left / 8000 + 0.5 GPU left / 2000)):
 * - a (slot 0) empty: kube passes it, fits, -(0.25 + 0.125) = -0.375;
 * - b (1) 2 cores: kube refuses it (CPU);
 * - c (2) two cards 70% used: kube passes it (600 milli free in all), but
 *   no card has 500 free: the extender refuses it;
 * - d (3) its card 40% used: fits, -(0.25 + 0.025) = -0.275, the best;
 * - e (4) empty: as a.
 * Over every node the choice is d. */
static void test_sample_choice(void **state)
{
    long live = egpu_alloc_live();
    struct egpu_cluster *c = egpu_cluster_new();
    struct egpu_placer_config pc = {.node_policy = EGPU_POLICY_BESTFIT,
                                    .card_policy = EGPU_POLICY_BESTFIT,
                                    .seed = 42,
                                    .memo = true};
    struct egpu_pod_request r = tu_request(4000, 0, 50, 0);
    struct egpu_error err = {0};
    struct egpu_placer *p;
    struct egpu_node *a, *cn, *d, *got;
    struct egpu_pick pick;
    uint32_t slots[5];
    size_t next = 0;

    (void)state;
    assert_non_null(c);
    a = tu_add_node(c, "a", 8000, 32768, 1, "V100M16", 0);
    assert_false(egpu_sim_kube_fits(tu_add_node(c, "b", 2000, 32768, 1, "V100M16", 0), &r));
    cn = tu_add_node(c, "c", 8000, 32768, 2, "V100M16", 0);
    d = tu_add_node(c, "d", 8000, 32768, 1, "V100M16", 0);
    tu_add_node(c, "e", 8000, 32768, 1, "V100M16", 0);
    tu_use_card(c, cn, "c0", 0, 70);
    tu_use_card(c, cn, "c1", 1, 70);
    tu_use_card(c, d, "d0", 0, 40);
    assert_true(egpu_sim_kube_fits(cn, &r));
    p = egpu_placer_new(&pc, &err);
    assert_non_null(p);
    assert_int_equal(egpu_placer_schedule(p, c, &r, &got, &pick), 0);
    assert_ptr_equal(got, d);

    /* Two feasible from 0: a, (b refused), c; three processed. The best of
     * them is a, not d. */
    assert_int_equal(egpu_sim_sample_nodes(c, &r, 2, &next, slots), 2);
    assert_int_equal(slots[0], 0);
    assert_int_equal(slots[1], 2);
    assert_int_equal(next, 3);
    assert_int_equal(egpu_placer_schedule_slots(p, c, &r, slots, 2, &got, &pick), 0);
    assert_ptr_equal(got, a);
    assert_int_equal(pick.nshares, 1);
    /* The next cycle starts at d: d, e, and wraps round to 0. */
    assert_int_equal(egpu_sim_sample_nodes(c, &r, 2, &next, slots), 2);
    assert_int_equal(slots[0], 3);
    assert_int_equal(slots[1], 4);
    assert_int_equal(next, 0);
    assert_int_equal(egpu_placer_schedule_slots(p, c, &r, slots, 2, &got, &pick), 0);
    assert_ptr_equal(got, d);
    /* One feasible from b: c only, which the extender refuses: the pod
     * fits nowhere in its sample though a, d and e could host it. */
    next = 1;
    assert_int_equal(egpu_sim_sample_nodes(c, &r, 1, &next, slots), 1);
    assert_int_equal(slots[0], 2);
    assert_int_equal(next, 3);
    assert_int_equal(egpu_placer_schedule_slots(p, c, &r, slots, 1, &got, &pick), EGPU_ENOFIT);
    /* More wanted than pass: every node processed, next back where it was. */
    next = 4;
    assert_int_equal(egpu_sim_sample_nodes(c, &r, 5, &next, slots), 4);
    assert_int_equal(slots[0], 4);
    assert_int_equal(slots[1], 0);
    assert_int_equal(slots[2], 2);
    assert_int_equal(slots[3], 3);
    assert_int_equal(next, 4);
    assert_int_equal(egpu_placer_schedule_slots(p, c, &r, slots, 4, &got, &pick), 0);
    assert_ptr_equal(got, d);
    egpu_placer_free(p);
    egpu_cluster_free(c);
    assert_int_equal(egpu_alloc_live(), live);
}

/* A sample of every node is the replay without one, bit for bit; a sample
 * of one node (round robin) packs otherwise, and its missed pods are failed
 * pods that fit elsewhere. */
static void test_sample_replay(void **state)
{
    static struct egpu_replay_result all, hundred, one;
    struct egpu_replay_config cfg = {
        .node_policy = EGPU_POLICY_FGD, .card_policy = EGPU_POLICY_FGD, .seed = 42, .inflate = 1.3};
    struct egpu_error err = {0};
    struct egpu_trace t;
    struct egpu_workload w;

    (void)state;
    make_trace(&t, 40, 300);
    workload_of(&t, &w);
    cfg.workload = &w;
    assert_int_equal(egpu_replay_run(&t, &cfg, &all, &err), 0);
    cfg.sample = (struct egpu_sim_sample){.mode = EGPU_SIM_SAMPLE_PERCENT, .value = 100};
    assert_int_equal(egpu_replay_run(&t, &cfg, &hundred, &err), 0);
    assert_int_equal(hundred.arrivals, all.arrivals);
    assert_int_equal(hundred.failed, all.failed);
    assert_int_equal(hundred.sample_missed, 0);
    assert_memory_equal(hundred.buckets, all.buckets, sizeof(all.buckets));
    cfg.sample = (struct egpu_sim_sample){.mode = EGPU_SIM_SAMPLE_COUNT, .value = 1};
    assert_int_equal(egpu_replay_run(&t, &cfg, &one, &err), 0);
    assert_int_equal(one.arrivals, all.arrivals);
    assert_true(memcmp(one.buckets, all.buckets, sizeof(all.buckets)) != 0);
    assert_true(one.sample_missed <= one.failed);
    assert_int_equal(all.sample_missed, 0);
    egpu_workload_free(&w);
    egpu_trace_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_deterministic_per_seed),
        cmocka_unit_test(test_inflation_target),
        cmocka_unit_test(test_no_departures_monotone),
        cmocka_unit_test(test_everything_fits),
        cmocka_unit_test(test_bucket_means),
        cmocka_unit_test(test_published),
        cmocka_unit_test(test_bad_config),
        cmocka_unit_test(test_idle_classes),
        cmocka_unit_test(test_kube_nodes_to_find),
        cmocka_unit_test(test_sample_parse_and_want),
        cmocka_unit_test(test_sample_choice),
        cmocka_unit_test(test_sample_replay),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
