/* tests/unit/test_frag.c - FGD fragmentation and the target workload.
 *
 * Covers src/core/frag.c and src/core/workload.c through egpu/core.h. The
 * fragmentation values are computed by hand in the comments from the
 * definition in shared/data/openb/README.md: for node n with R milli-GPU
 * idle and a typical pod m, F_n(m) = R when m asks no GPU, m's models exclude
 * n's, or n lacks the CPU or enough cards with m's per-card request free;
 * otherwise F_n(m) is the idle milli-GPU on the cards whose free compute is
 * below m's per-card request. F_n(M) = sum_m p_m F_n(m).
 *
 * DESIGN: nodes are built with testutil.h and loaded with tu_use_card, so a
 * test's card states read as one line each. Doubles are compared with a
 * tolerance of 1e-9. All quantities are milli-GPU unless a name says
 * otherwise.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "frag_int.h"
#include "testutil.h"

#define CARD_MIB 16384

/* True when a and b agree to within 1e-9. */
static bool near(double a, double b)
{
    return fabs(a - b) < 1e-9;
}

#define assert_near(a, b)                                                \
    do {                                                                 \
        double a_ = (a), b_ = (b);                                       \
        if (!near(a_, b_))                                               \
            fail_msg("%s = %.12f, expected %s = %.12f", #a, a_, #b, b_); \
    } while (0)

/* These are the three typical pods of the worked example. */
static const struct egpu_typical_pod M1 = {
    .cpu_milli = 4000, .gpu_milli = 300, .ncards = 1, .weight = 0.5};
static const struct egpu_typical_pod M2 = {
    .cpu_milli = 8000, .gpu_milli = 1000, .ncards = 2, .weight = 0.25};
static const struct egpu_typical_pod M3 = {.cpu_milli = 2000, .weight = 0.25};

/* A typical pod asking gpu_milli on each of ncards cards and cpu_milli CPU. */
static struct egpu_typical_pod tpod(int64_t cpu_milli, uint32_t gpu_milli, uint32_t ncards)
{
    return (struct egpu_typical_pod){
        .cpu_milli = cpu_milli, .gpu_milli = gpu_milli, .ncards = ncards, .weight = 1.0};
}

/* The worked example's workload M = {m1: 0.5, m2: 0.25, m3: 0.25}, given
 * unnormalised (2:1:1) so that normalisation is exercised too. */
static void example_workload(struct egpu_workload *w)
{
    struct egpu_typical_pod list[3] = {M1, M2, M3};

    list[0].weight = 2.0;
    list[1].weight = 1.0;
    list[2].weight = 1.0;
    assert_int_equal(egpu_workload_from_list(list, 3, w), 0);
    assert_int_equal(w->n, 3);
    assert_near(w->pods[0].weight, 0.5);
    assert_near(w->pods[1].weight, 0.25);
    assert_near(w->pods[2].weight, 0.25);
}

/* Node "name" of 4 model-A cards with free compute [1000, 500, 200, 0]:
 * card 1 half used, card 2 80% used, card 3 held whole. */
static struct egpu_node *example_node(struct egpu_cluster *c, const char *name, int64_t cpu_milli)
{
    struct egpu_node *n = tu_add_node(c, name, cpu_milli, 65536, 4, "A", CARD_MIB);
    char pod[64];

    snprintf(pod, sizeof(pod), "%s/half", name);
    tu_use_card(c, n, pod, 1, 50);
    snprintf(pod, sizeof(pod), "%s/most", name);
    tu_use_card(c, n, pod, 2, 80);
    snprintf(pod, sizeof(pod), "%s/whole", name);
    tu_use_card(c, n, pod, 3, 100);
    assert_int_equal(egpu_gpu_free_core(&n->gpus[0]), 1000);
    assert_int_equal(egpu_gpu_free_core(&n->gpus[1]), 500);
    assert_int_equal(egpu_gpu_free_core(&n->gpus[2]), 200);
    assert_int_equal(egpu_gpu_free_core(&n->gpus[3]), 0);
    return n;
}

/* The worked example, by hand. Free compute [1000, 500, 200, 0], so
 * R = 1700 idle; the node has 32000m CPU, enough for every m.
 * - m1 = 300 x 1 card: cards 0 and 1 have >= 300 free, so m1 fits; the cards
 *   below 300 are card 2 (200 idle) and card 3 (0 idle): F(m1) = 200.
 * - m2 = 1000 x 2 cards: only card 0 has 1000 free, one card of two, so m2
 *   does not fit: F(m2) = R = 1700.
 * - m3 asks no GPU: F(m3) = R = 1700.
 * F(M) = 0.5 * 200 + 0.25 * 1700 + 0.25 * 1700 = 100 + 425 + 425 = 950.
 * Around the thresholds: 200 x 1 fits card 2 exactly (free 200 is not below
 * 200), so only card 3 is below: F = 0; 201 x 1 puts card 2 below: F = 200;
 * 500 x 1: below are cards 2 and 3: F = 200; 501 x 1: cards 1, 2, 3:
 * F = 700; 1000 x 1: cards 1, 2, 3: F = 700; 1000 x 3: only one card fits,
 * so F = R = 1700. */
static void test_frag_worked_example(void **state)
{
    struct egpu_cluster *c = egpu_cluster_new();
    struct egpu_workload w;
    struct egpu_node *n;

    (void)state;
    n = example_node(c, "n", 32000);
    example_workload(&w);
    assert_int_equal(egpu_cluster_idle_milli(c), 1700);

    assert_int_equal(egpu_frag_node_pod(n, &M1), 200);
    assert_int_equal(egpu_frag_node_pod(n, &M2), 1700);
    assert_int_equal(egpu_frag_node_pod(n, &M3), 1700);
    assert_near(egpu_frag_node(n, &w), 950.0);

    assert_int_equal(
        egpu_frag_node_pod(n, &(struct egpu_typical_pod){.gpu_milli = 200, .ncards = 1}), 0);
    assert_int_equal(
        egpu_frag_node_pod(n, &(struct egpu_typical_pod){.gpu_milli = 201, .ncards = 1}), 200);
    assert_int_equal(
        egpu_frag_node_pod(n, &(struct egpu_typical_pod){.gpu_milli = 500, .ncards = 1}), 200);
    assert_int_equal(
        egpu_frag_node_pod(n, &(struct egpu_typical_pod){.gpu_milli = 501, .ncards = 1}), 700);
    assert_int_equal(
        egpu_frag_node_pod(n, &(struct egpu_typical_pod){.gpu_milli = 1000, .ncards = 1}), 700);
    assert_int_equal(
        egpu_frag_node_pod(n, &(struct egpu_typical_pod){.gpu_milli = 1000, .ncards = 3}), 1700);

    /* A pod with cards but 0 milli asks no GPU either: F = R. */
    assert_int_equal(egpu_frag_node_pod(n, &(struct egpu_typical_pod){.ncards = 1}), 1700);
    egpu_workload_free(&w);
    egpu_cluster_free(c);
}

/* A node without the CPU for m counts all its idle GPU as fragment. On the
 * example node with 8000m CPU of which a CPU-only pod takes 7000m, 1000m is
 * free: m = 300 x 1 with 1000m CPU fits (F = 200 as in the example), with
 * 1001m it does not (F = R = 1700). Memory is not part of the measure. */
static void test_frag_cpu_does_not_fit(void **state)
{
    struct egpu_cluster *c = egpu_cluster_new();
    struct egpu_pod_request cpu_pod = tu_request(7000, 60000, 0, 0);
    struct egpu_pick none = {0};
    struct egpu_typical_pod m = tpod(1000, 300, 1);
    struct egpu_workload w;
    struct egpu_node *n;

    (void)state;
    n = example_node(c, "n", 8000);
    assert_int_equal(egpu_frag_node_pod(n, &m), 200);
    m.cpu_milli = 8001;
    assert_int_equal(egpu_frag_node_pod(n, &m), 1700);

    assert_int_equal(egpu_cluster_assign(c, "cpu", n, &cpu_pod, &none, NULL), 0);
    m.cpu_milli = 1000;
    assert_int_equal(egpu_frag_node_pod(n, &m), 200);
    m.cpu_milli = 1001;
    assert_int_equal(egpu_frag_node_pod(n, &m), 1700);

    /* With 1000m free, M of the example is: m1 (4000m) does not fit, 1700;
     * m2 (8000m) 1700; m3 1700: F(M) = 1700. */
    example_workload(&w);
    assert_near(egpu_frag_node(n, &w), 1700.0);

    /* With all 8000m free again, m1 (4000m) fits: 200; m2 (8000m) fits the
     * CPU exactly but finds one full card of two: 1700; m3: 1700. F(M) is
     * 0.5 * 200 + 0.25 * 1700 + 0.25 * 1700 = 950. */
    assert_int_equal(egpu_cluster_release(c, "cpu", NULL), 0);
    assert_near(egpu_frag_node(n, &w), 950.0);
    egpu_workload_free(&w);
    egpu_cluster_free(c);
}

/* A pod whose allowed models exclude the node's model sees all idle GPU as
 * fragment; a mask including it, or no mask, gives the normal value. */
static void test_frag_model_mask(void **state)
{
    struct egpu_cluster *c = egpu_cluster_new();
    struct egpu_typical_pod m = tpod(1000, 300, 1);
    struct egpu_node *n, *b;
    uint64_t only_b = 0, a_or_b = 0;

    (void)state;
    n = example_node(c, "n", 32000); /* model A */
    b = tu_add_node(c, "b", 32000, 65536, 1, "B", CARD_MIB);
    assert_int_equal(egpu_cluster_model_mask(c, "B", &only_b, NULL), 0);
    assert_int_equal(egpu_cluster_model_mask(c, "B|A", &a_or_b, NULL), 0);

    m.model_mask = only_b;
    assert_int_equal(egpu_frag_node_pod(n, &m), 1700);
    /* On node b (one free B card) the same pod fits and leaves nothing. */
    assert_int_equal(egpu_frag_node_pod(b, &m), 0);
    m.model_mask = a_or_b;
    assert_int_equal(egpu_frag_node_pod(n, &m), 200);
    m.model_mask = 0;
    assert_int_equal(egpu_frag_node_pod(n, &m), 200);

    /* A model that no node has excludes every node. */
    assert_int_equal(egpu_cluster_model_mask(c, "V100M32", &m.model_mask, NULL), 0);
    assert_int_equal(egpu_frag_node_pod(n, &m), 1700);
    assert_int_equal(egpu_frag_node_pod(b, &m), 1000);
    egpu_cluster_free(c);
}

/* A node without GPUs has nothing idle, so nothing is a fragment, whatever
 * the pod; so does a node whose cards are all held. */
static void test_frag_no_idle_gpu(void **state)
{
    struct egpu_cluster *c = egpu_cluster_new();
    struct egpu_workload w;
    struct egpu_node *cpu, *full;
    uint64_t mask = 0;

    (void)state;
    cpu = tu_add_node(c, "cpu", 1000, 1000, 0, NULL, 0);
    full = tu_add_node(c, "full", 64000, 65536, 2, "A", CARD_MIB);
    tu_use_card(c, full, "w0", 0, 100);
    tu_use_card(c, full, "s1", 1, 60);
    tu_use_card(c, full, "s2", 1, 40);
    example_workload(&w);
    assert_int_equal(egpu_cluster_model_mask(c, "A", &mask, NULL), 0);

    assert_int_equal(egpu_frag_node_pod(cpu, &M1), 0);
    assert_int_equal(egpu_frag_node_pod(cpu, &M2), 0);
    assert_int_equal(egpu_frag_node_pod(cpu, &M3), 0);
    assert_int_equal(egpu_frag_node_pod(cpu, &(struct egpu_typical_pod){.cpu_milli = 99999,
                                                                        .gpu_milli = 100,
                                                                        .ncards = 1,
                                                                        .model_mask = mask}),
                     0);
    assert_near(egpu_frag_node(cpu, &w), 0.0);
    assert_int_equal(egpu_frag_node_pod(full, &M1), 0);
    assert_int_equal(egpu_frag_node_pod(full, &M3), 0);
    assert_near(egpu_frag_node(full, &w), 0.0);
    assert_near(egpu_frag_cluster(c, &w), 0.0);
    assert_int_equal(egpu_cluster_idle_milli(c), 0);
    egpu_workload_free(&w);
    egpu_cluster_free(c);
}

/* A fully free node of 4 cards (R = 4000): a pod of whole cards fits and
 * leaves no card below 1000 free, so F = 0 for 1..4 cards; 5 cards do not
 * fit, F = R = 4000; a share fits every card, F = 0; no GPU, F = R. */
static void test_frag_free_node(void **state)
{
    struct egpu_cluster *c = egpu_cluster_new();
    struct egpu_node *n;

    (void)state;
    n = tu_add_node(c, "n", 32000, 65536, 4, "A", CARD_MIB);
    assert_int_equal(
        egpu_frag_node_pod(n, &(struct egpu_typical_pod){.gpu_milli = 1000, .ncards = 1}), 0);
    assert_int_equal(
        egpu_frag_node_pod(n, &(struct egpu_typical_pod){.gpu_milli = 1000, .ncards = 4}), 0);
    assert_int_equal(
        egpu_frag_node_pod(n, &(struct egpu_typical_pod){.gpu_milli = 1000, .ncards = 5}), 4000);
    assert_int_equal(
        egpu_frag_node_pod(n, &(struct egpu_typical_pod){.gpu_milli = 999, .ncards = 1}), 0);
    assert_int_equal(egpu_frag_node_pod(n, &M3), 4000);
    egpu_cluster_free(c);
}

/* egpu_frag_cluster is the sum of egpu_frag_node; idle GPU is capacity
 * minus allocated. With M of the example:
 * - "ex": the example node, F = 950, idle 1700;
 * - "free": 2 free cards: m1 fits, no card below 300: 0; m2 fits both cards:
 *   0; m3: R = 2000. F = 0.25 * 2000 = 500, idle 2000;
 * - "cpu": no cards, F = 0, idle 0;
 * - "tight": card 0 held whole (0 free), card 1 at 90% (100 free), R = 100:
 *   m1 finds no card with 300 free: 100; m2: 100; m3: 100. F = 100.
 * Sum: 950 + 500 + 0 + 100 = 1550; idle 1700 + 2000 + 100 = 3800. */
static void test_frag_cluster_sum(void **state)
{
    struct egpu_cluster *c = egpu_cluster_new();
    struct egpu_workload w;
    struct egpu_node *nfree, *tight;
    double sum = 0.0;

    (void)state;
    example_workload(&w);
    assert_near(egpu_frag_cluster(c, &w), 0.0);
    assert_int_equal(egpu_cluster_idle_milli(c), 0);
    (void)example_node(c, "ex", 32000);
    nfree = tu_add_node(c, "free", 32000, 65536, 2, "A", CARD_MIB);
    (void)tu_add_node(c, "cpu", 32000, 65536, 0, NULL, 0);
    tight = tu_add_node(c, "tight", 32000, 65536, 2, "A", CARD_MIB);
    tu_use_card(c, tight, "t0", 0, 100);
    tu_use_card(c, tight, "t1", 1, 90);

    assert_near(egpu_frag_node(nfree, &w), 500.0);
    assert_near(egpu_frag_node(tight, &w), 100.0);
    for (size_t i = 0; i < c->nnodes; i++)
        sum += egpu_frag_node(c->nodes[i], &w);
    assert_near(egpu_frag_cluster(c, &w), sum);
    assert_near(egpu_frag_cluster(c, &w), 1550.0);
    assert_int_equal(egpu_cluster_idle_milli(c), 3800);
    assert_int_equal(egpu_cluster_idle_milli(c), c->core_milli - c->used_core_milli);

    /* A 30% share on "free" card 0 leaves [700, 1000], R = 1700: m1 fits,
     * nothing below 300: 0; m2 needs two full cards: 1700; m3: 1700.
     * F = 0.25 * 1700 + 0.25 * 1700 = 850; the cluster grows by 350. */
    tu_use_card(c, nfree, "f0", 0, 30);
    assert_near(egpu_frag_node(nfree, &w), 850.0);
    assert_near(egpu_frag_cluster(c, &w), 1900.0);
    assert_int_equal(egpu_cluster_idle_milli(c), 3500);
    assert_int_equal(egpu_cluster_release(c, "f0", NULL), 0);
    assert_near(egpu_frag_cluster(c, &w), 1550.0);
    assert_int_equal(egpu_cluster_idle_milli(c), 3800);

    /* Removing "ex" drops its 950 and its 1700 idle. */
    assert_int_equal(egpu_cluster_remove_node(c, "ex"), 0);
    assert_near(egpu_frag_cluster(c, &w), 600.0);
    assert_int_equal(egpu_cluster_idle_milli(c), 2100);
    egpu_workload_free(&w);
    egpu_cluster_free(c);
}

/* Four request shapes and their typical pods:
 * A = 4000m CPU, 50% of one card        -> (4000, 500, 1, any)
 * B = 8000m CPU, 2 whole cards          -> (8000, 1000, 2, any)
 * C = 2000m CPU, no GPU                 -> (2000, 0, 0, any)
 * D = 1000m CPU, 10% of one card, mask 1 -> (1000, 100, 1, 1) */
static struct egpu_pod_request shape(char which)
{
    struct egpu_pod_request r;

    switch (which) {
    case 'A':
        return tu_request(4000, 1024, 50, 2048);
    case 'B':
        return tu_request(8000, 4096, 200, 0);
    case 'C':
        return tu_request(2000, 512, 0, 0);
    default:
        r = tu_request(1000, 256, 10, 100);
        r.model_mask = 1;
        return r;
    }
}

/* Assert typical pod t is (cpu, gpu, ncards, mask) with weight. */
static void expect_typical(const struct egpu_typical_pod *t, int64_t cpu, uint32_t gpu,
                           uint32_t ncards, uint64_t mask, double weight)
{
    assert_int_equal(t->cpu_milli, cpu);
    assert_int_equal(t->gpu_milli, gpu);
    assert_int_equal(t->ncards, ncards);
    assert_int_equal(t->model_mask, mask);
    assert_near(t->weight, weight);
}

/* 100 requests in a shuffled order: D (4) and C (6) appear before most A
 * and B. At coverage 0.95: A covers 60 < 95, A+B 90 < 95, A+B+C 96 >= 95,
 * so C (the group crossing the line) is kept and D is not; weights are
 * renormalised over the 96 kept requests: 60/96, 30/96, 6/96. */
static void test_workload_from_requests_cut(void **state)
{
    struct egpu_pod_request reqs[100];
    struct egpu_workload w = {0};
    struct egpu_rng rng;
    long base = egpu_alloc_live();

    (void)state;
    for (int i = 0; i < 100; i++)
        reqs[i] = shape(i < 60 ? 'A' : i < 90 ? 'B' : i < 96 ? 'C' : 'D');
    egpu_rng_seed(&rng, 7);
    for (int i = 99; i > 0; i--) {
        int j = (int)egpu_rng_below(&rng, (uint64_t)i + 1);
        struct egpu_pod_request t = reqs[i];

        reqs[i] = reqs[j];
        reqs[j] = t;
    }
    /* The first request is a D, so "first seen" alone would not order them. */
    for (int i = 1; i < 100; i++) {
        if (reqs[i].model_mask == 1) {
            struct egpu_pod_request t = reqs[0];

            reqs[0] = reqs[i];
            reqs[i] = t;
            break;
        }
    }

    assert_int_equal(egpu_workload_from_requests(reqs, 100, 0.95, &w), 0);
    assert_int_equal(w.n, 3);
    expect_typical(&w.pods[0], 4000, 500, 1, 0, 60.0 / 96.0);
    expect_typical(&w.pods[1], 8000, 1000, 2, 0, 30.0 / 96.0);
    expect_typical(&w.pods[2], 2000, 0, 0, 0, 6.0 / 96.0);
    assert_near(w.pods[0].weight + w.pods[1].weight + w.pods[2].weight, 1.0);
    egpu_workload_free(&w);

    /* Coverage 1 keeps all four over 100 requests. */
    assert_int_equal(egpu_workload_from_requests(reqs, 100, 1.0, &w), 0);
    assert_int_equal(w.n, 4);
    expect_typical(&w.pods[0], 4000, 500, 1, 0, 0.60);
    expect_typical(&w.pods[1], 8000, 1000, 2, 0, 0.30);
    expect_typical(&w.pods[2], 2000, 0, 0, 0, 0.06);
    expect_typical(&w.pods[3], 1000, 100, 1, 1, 0.04);
    egpu_workload_free(&w);

    /* Coverage 0.5: A alone covers 60 >= 50, weight 1. */
    assert_int_equal(egpu_workload_from_requests(reqs, 100, 0.5, &w), 0);
    assert_int_equal(w.n, 1);
    expect_typical(&w.pods[0], 4000, 500, 1, 0, 1.0);
    egpu_workload_free(&w);

    /* Coverage 0.61: A (60) is short of 61, B crosses the line: 60/90, 30/90. */
    assert_int_equal(egpu_workload_from_requests(reqs, 100, 0.61, &w), 0);
    assert_int_equal(w.n, 2);
    expect_typical(&w.pods[0], 4000, 500, 1, 0, 60.0 / 90.0);
    expect_typical(&w.pods[1], 8000, 1000, 2, 0, 30.0 / 90.0);
    egpu_workload_free(&w);
    assert_int_equal(egpu_alloc_live(), base);
}

/* The grouping key is (cpu, per-card GPU, cards, model mask): memory does
 * not split a group, the mask does, and a pod with several GPU containers
 * is keyed by its largest one. */
static void test_workload_grouping_key(void **state)
{
    struct egpu_pod_request reqs[9];
    struct egpu_workload w = {0};
    struct egpu_error err = {0};

    (void)state;
    /* Three 30% pods at 1000m that differ only in memory: one group. */
    reqs[0] = tu_request(1000, 100, 30, 0);
    reqs[1] = tu_request(1000, 9999, 30, 5000);
    reqs[2] = tu_request(1000, 1, 30, 1);
    /* A 30% share plus two whole cards is keyed as 1000 x 2, like a plain
     * two-card pod of the same CPU: a group of two. */
    reqs[3] = tu_request(3000, 0, 30, 0);
    assert_int_equal(egpu_container_request_set(&reqs[3].containers[1], 200, 0, &err), 0);
    reqs[3].ncontainers = 2;
    reqs[4] = tu_request(3000, 0, 200, 0);
    /* The same 30% shape with mask 2 is its own group, and so is a 30%
     * share at another CPU. */
    reqs[5] = tu_request(1000, 100, 30, 0);
    reqs[5].model_mask = 2;
    reqs[6] = tu_request(1001, 100, 30, 0);
    /* Two shares of 20% and 50%: keyed by the 50% one, as a plain 50% pod. */
    reqs[7] = tu_request(500, 0, 20, 0);
    assert_int_equal(egpu_container_request_set(&reqs[7].containers[1], 50, 0, &err), 0);
    reqs[7].ncontainers = 2;
    reqs[8] = tu_request(500, 0, 50, 0);

    assert_int_equal(egpu_workload_from_requests(reqs, 9, 1.0, &w), 0);
    assert_int_equal(w.n, 5);
    expect_typical(&w.pods[0], 1000, 300, 1, 0, 3.0 / 9.0);
    /* Two groups of two: the larger CPU first. */
    expect_typical(&w.pods[1], 3000, 1000, 2, 0, 2.0 / 9.0);
    expect_typical(&w.pods[2], 500, 500, 1, 0, 2.0 / 9.0);
    /* Two groups of one: 1001m before 1000m (mask 2). */
    expect_typical(&w.pods[3], 1001, 300, 1, 0, 1.0 / 9.0);
    expect_typical(&w.pods[4], 1000, 300, 1, 2, 1.0 / 9.0);
    egpu_workload_free(&w);
}

/* Equal counts are ordered by the larger CPU first, even when the smaller
 * CPU group was seen first; groups equal in every ordered field keep the
 * order in which they were first seen. This is the order workload.c
 * documents; core.h's comment ("ties: the group seen first") states only
 * the last rule and should say so. */
static void test_workload_ties(void **state)
{
    struct egpu_pod_request reqs[8];
    struct egpu_workload w = {0};

    (void)state;
    for (int i = 0; i < 4; i++) {
        reqs[2 * i] = tu_request(1000, 0, 40, 0);
        reqs[2 * i + 1] = tu_request(2000, 0, 40, 0);
    }
    assert_int_equal(egpu_workload_from_requests(reqs, 8, 1.0, &w), 0);
    assert_int_equal(w.n, 2);
    expect_typical(&w.pods[0], 2000, 400, 1, 0, 0.5);
    expect_typical(&w.pods[1], 1000, 400, 1, 0, 0.5);
    egpu_workload_free(&w);

    /* Two groups differ only in mask, 4 (seen first) and 1. */
    for (int i = 0; i < 4; i++) {
        reqs[2 * i] = tu_request(1000, 0, 40, 0);
        reqs[2 * i].model_mask = 4;
        reqs[2 * i + 1] = tu_request(1000, 0, 40, 0);
        reqs[2 * i + 1].model_mask = 1;
    }
    assert_int_equal(egpu_workload_from_requests(reqs, 8, 1.0, &w), 0);
    assert_int_equal(w.n, 2);
    expect_typical(&w.pods[0], 1000, 400, 1, 4, 0.5);
    expect_typical(&w.pods[1], 1000, 400, 1, 1, 0.5);
    /* Half coverage keeps the first of the tied pair alone. */
    egpu_workload_free(&w);
    assert_int_equal(egpu_workload_from_requests(reqs, 8, 0.5, &w), 0);
    assert_int_equal(w.n, 1);
    expect_typical(&w.pods[0], 1000, 400, 1, 4, 1.0);
    egpu_workload_free(&w);
}

/* n = 0 and coverage outside (0, 1] are -EINVAL and leave *out alone. */
static void test_workload_from_requests_invalid(void **state)
{
    static const double bad[] = {0.0, -0.5, 1.0000001, 2.0};
    struct egpu_pod_request r = tu_request(1000, 0, 50, 0);
    struct egpu_typical_pod sentinel;
    struct egpu_workload w = {.n = 42, .pods = &sentinel};
    long base = egpu_alloc_live();

    (void)state;
    assert_int_equal(egpu_workload_from_requests(&r, 0, 0.95, &w), -EINVAL);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(egpu_workload_from_requests(&r, 1, bad[i], &w), -EINVAL);
    assert_int_equal(egpu_workload_from_requests(&r, 1, NAN, &w), -EINVAL);
    assert_int_equal(w.n, 42);
    assert_ptr_equal(w.pods, &sentinel);
    assert_int_equal(egpu_alloc_live(), base);

    /* The smallest valid coverage still keeps the most frequent group. */
    assert_int_equal(egpu_workload_from_requests(&r, 1, 1e-9, &w), 0);
    assert_int_equal(w.n, 1);
    expect_typical(&w.pods[0], 1000, 500, 1, 0, 1.0);
    egpu_workload_free(&w);
    assert_int_equal(egpu_alloc_live(), base);
}

/* An explicit list is copied with its weights renormalised to sum to 1. */
static void test_workload_from_list(void **state)
{
    struct egpu_typical_pod list[3] = {tpod(1000, 300, 1), tpod(2000, 1000, 4), tpod(500, 0, 0)};
    struct egpu_workload w = {0};

    (void)state;
    list[0].weight = 6.0;
    list[1].weight = 2.0;
    list[2].weight = 0.0;
    assert_int_equal(egpu_workload_from_list(list, 3, &w), 0);
    assert_int_equal(w.n, 3);
    assert_ptr_not_equal(w.pods, list);
    expect_typical(&w.pods[0], 1000, 300, 1, 0, 0.75);
    expect_typical(&w.pods[1], 2000, 1000, 4, 0, 0.25);
    expect_typical(&w.pods[2], 500, 0, 0, 0, 0.0);
    /* The input keeps its own weights, and the copy does not follow it. */
    assert_near(list[0].weight, 6.0);
    list[0].cpu_milli = 7;
    assert_int_equal(w.pods[0].cpu_milli, 1000);
    egpu_workload_free(&w);

    /* Weights already summing to 1 are kept. */
    list[0].weight = 0.1;
    list[1].weight = 0.2;
    list[2].weight = 0.7;
    assert_int_equal(egpu_workload_from_list(list, 3, &w), 0);
    assert_near(w.pods[0].weight, 0.1);
    assert_near(w.pods[1].weight, 0.2);
    assert_near(w.pods[2].weight, 0.7);
    egpu_workload_free(&w);
}

/* Invalid lists are -EINVAL and leave *out alone. */
static void test_workload_from_list_invalid(void **state)
{
    struct egpu_typical_pod list[2] = {tpod(1000, 300, 1), tpod(2000, 1000, 2)};
    struct egpu_typical_pod sentinel;
    struct egpu_workload w = {.n = 42, .pods = &sentinel};
    long base = egpu_alloc_live();

    (void)state;
    assert_int_equal(egpu_workload_from_list(list, 0, &w), -EINVAL);
    list[1].weight = -0.1;
    assert_int_equal(egpu_workload_from_list(list, 2, &w), -EINVAL);
    list[1].weight = NAN;
    assert_int_equal(egpu_workload_from_list(list, 2, &w), -EINVAL);
    list[0].weight = 0.0;
    list[1].weight = 0.0;
    assert_int_equal(egpu_workload_from_list(list, 2, &w), -EINVAL);
    list[0].weight = 1.0;
    list[1].weight = 1.0;
    list[1].ncards = 0; /* 1000 milli-GPU on no card */
    assert_int_equal(egpu_workload_from_list(list, 2, &w), -EINVAL);
    assert_int_equal(w.n, 42);
    assert_ptr_equal(w.pods, &sentinel);
    assert_int_equal(egpu_alloc_live(), base);

    /* Once fixed, the same list is accepted. */
    list[1].ncards = 2;
    assert_int_equal(egpu_workload_from_list(list, 2, &w), 0);
    assert_int_equal(w.n, 2);
    egpu_workload_free(&w);
    assert_int_equal(egpu_alloc_live(), base);
}

/* egpu_workload_free releases everything, empties the workload, and accepts
 * NULL and an already freed workload; out of memory leaks nothing either. */
/* Past the tally's first 64 groups (its index regrows): 300 shapes, shape k
 * asked by 1 + k % 7 pods, arriving interleaved. Coverage 1 keeps every
 * group, most frequent first, weights count / pods; a pod added one at a
 * time gives what the array form gives. */
/* Request shapes counted (src/core/shapes.c): shape k (0..299) asks CPU
 * 100 * (k / 2 + 1) and memory 1024 * (k % 2 + 1), so pairs differ in
 * memory only and must count apart, and is asked 1 + k % 7 times, the
 * shapes of one round in order. A pod of two GPU containers is not a shape
 * (no memo keeps it) and is not counted. top gives the shapes asked at
 * least min_count times, most asked first, ties in the order first asked
 * (shape k was first asked before k + 1). */
static void test_shape_tally(void **state)
{
    enum { SHAPES = 300 };
    static struct egpu_pod_request out[SHAPES];
    struct egpu_pod_request two = tu_request(1000, 0, 50, 0), shape;
    struct egpu_shape_tally t;
    size_t n, want = 0;
    long base = egpu_alloc_live();

    (void)state;
    egpu_shape_tally_init(&t);
    for (int round = 0; round < 7; round++) {
        for (int k = 0; k < SHAPES; k++) {
            struct egpu_pod_request r =
                tu_request(100 * (k / 2 + 1), 1024 * (k % 2 + 1), 10 + k % 90, 0);

            if (round < 1 + k % 7)
                assert_int_equal(egpu_shape_tally_add(&t, &r), 0);
        }
    }
    two.ncontainers = 2;
    two.containers[1] = two.containers[0];
    assert_false(egpu_request_shape_of(&two, &shape));
    assert_int_equal(egpu_shape_tally_add(&t, &two), 0);
    for (int k = 0; k < SHAPES; k++)
        want += 1 + k % 7 >= 2;
    assert_int_equal(t.nshapes, SHAPES);
    n = egpu_shape_tally_top(&t, 2, out, SHAPES);
    assert_int_equal(n, want);
    for (size_t i = 0; i < n; i++) {
        int k = (int)(out[i].cpu_milli / 100 - 1) * 2 + (int)(out[i].mem_mib / 1024 - 1);

        assert_true(k >= 0 && k < SHAPES);
        assert_int_equal(out[i].containers[0].core_milli, (uint32_t)(10 + k % 90) * 10);
        assert_true(1 + k % 7 >= 2);
        if (i > 0) {
            int j =
                (int)(out[i - 1].cpu_milli / 100 - 1) * 2 + (int)(out[i - 1].mem_mib / 1024 - 1);

            assert_true(1 + j % 7 > 1 + k % 7 || (1 + j % 7 == 1 + k % 7 && j < k));
        }
    }
    /* At most max, the most asked: shape 6 (7 times) first. */
    assert_int_equal(egpu_shape_tally_top(&t, 1, out, 3), 3);
    assert_int_equal(out[0].cpu_milli, 100 * (6 / 2 + 1));
    assert_int_equal(out[0].mem_mib, 1024);
    assert_int_equal(out[1].cpu_milli, 100 * (13 / 2 + 1));
    assert_int_equal(out[1].mem_mib, 2048);
    /* Counting goes on after top. */
    assert_int_equal(egpu_shape_tally_add(&t, &out[2]), 0);
    assert_int_equal(t.nshapes, SHAPES);
    /* The GPU memory is part of the shape. */
    shape = out[0];
    assert_true(egpu_request_same_shape(&shape, &out[0]));
    shape.containers[0].mem_mib++;
    assert_false(egpu_request_same_shape(&shape, &out[0]));
    egpu_shape_tally_free(&t);
    assert_int_equal(t.nshapes, 0);
    assert_int_equal(egpu_shape_tally_top(&t, 1, out, SHAPES), 0);
    assert_int_equal(egpu_alloc_live(), base);
}

static void test_workload_tally_many_groups(void **state)
{
    enum { SHAPES = 300 };
    static struct egpu_pod_request reqs[SHAPES * 7];
    struct egpu_workload w = {0}, v = {0};
    struct egpu_workload_tally t;
    size_t n = 0, total = 0;
    long base = egpu_alloc_live();

    (void)state;
    for (int round = 0; round < 7; round++) {
        for (int k = 0; k < SHAPES; k++) {
            if (round < 1 + k % 7)
                reqs[n++] = tu_request(100 * (k + 1), 0, 10 + k % 90, 0);
        }
    }
    for (int k = 0; k < SHAPES; k++)
        total += 1 + k % 7;
    assert_int_equal(n, total);
    egpu_workload_tally_init(&t);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(egpu_workload_tally_add(&t, &reqs[i]), 0);
    assert_int_equal(egpu_workload_tally_finish(&t, 1.0, &w), 0);
    egpu_workload_tally_free(&t);
    assert_int_equal(w.n, SHAPES);
    for (size_t i = 0; i < w.n; i++) {
        int k = (int)(w.pods[i].cpu_milli / 100) - 1;

        assert_true(k >= 0 && k < SHAPES);
        assert_int_equal(w.pods[i].gpu_milli, (uint32_t)(10 + k % 90) * 10);
        assert_near(w.pods[i].weight, (double)(1 + k % 7) / (double)total);
        if (i > 0)
            assert_true(w.pods[i].weight <= w.pods[i - 1].weight);
    }
    assert_int_equal(egpu_workload_from_requests(reqs, n, 1.0, &v), 0);
    assert_int_equal(v.n, w.n);
    assert_memory_equal(v.pods, w.pods, w.n * sizeof(w.pods[0]));
    egpu_workload_free(&v);
    egpu_workload_free(&w);
    /* Nothing counted: nothing to build. */
    egpu_workload_tally_init(&t);
    assert_int_equal(egpu_workload_tally_finish(&t, 1.0, &w), -EINVAL);
    egpu_workload_tally_free(&t);
    assert_int_equal(egpu_alloc_live(), base);
}

/* Total variation: a shape's weight moved from one to another counts once,
 * a shape missing on one side weighs 0 there, order does not matter. */
static void test_workload_distance(void **state)
{
    const struct egpu_typical_pod a[] = {
        {.cpu_milli = 1000, .gpu_milli = 500, .ncards = 1, .weight = 0.5},
        {.cpu_milli = 2000, .gpu_milli = 1000, .ncards = 2, .weight = 0.3},
        {.cpu_milli = 500, .weight = 0.2},
    };
    const struct egpu_typical_pod b[] = {
        {.cpu_milli = 2000, .gpu_milli = 1000, .ncards = 2, .weight = 0.3},
        {.cpu_milli = 1000, .gpu_milli = 500, .ncards = 1, .weight = 0.45},
        {.cpu_milli = 500, .weight = 0.2},
        {.cpu_milli = 500, .gpu_milli = 200, .ncards = 1, .weight = 0.05},
    };
    const struct egpu_typical_pod other[] = {
        {.cpu_milli = 1000, .gpu_milli = 500, .ncards = 1, .model_mask = 2, .weight = 1.0},
    };
    struct egpu_workload wa = {.n = 3, .pods = (struct egpu_typical_pod *)a};
    struct egpu_workload wb = {.n = 4, .pods = (struct egpu_typical_pod *)b};
    struct egpu_workload wo = {.n = 1, .pods = (struct egpu_typical_pod *)other};

    (void)state;
    assert_near(egpu_workload_distance(&wa, &wa), 0.0);
    assert_near(egpu_workload_distance(&wa, &wb), 0.05);
    assert_near(egpu_workload_distance(&wb, &wa), 0.05);
    /* The model mask is part of the shape: nothing in common. */
    assert_near(egpu_workload_distance(&wa, &wo), 1.0);
}

static void test_workload_free_no_leaks(void **state)
{
    struct egpu_pod_request reqs[3] = {tu_request(1, 0, 10, 0), tu_request(2, 0, 20, 0),
                                       tu_request(1, 0, 10, 0)};
    struct egpu_typical_pod list[1] = {tpod(1, 100, 1)};
    struct egpu_typical_pod sentinel;
    struct egpu_workload w = {0};
    long base = egpu_alloc_live();
    int failures = 0;

    (void)state;
    assert_int_equal(egpu_workload_from_requests(reqs, 3, 1.0, &w), 0);
    assert_true(egpu_alloc_live() > base);
    egpu_workload_free(&w);
    assert_int_equal(w.n, 0);
    assert_null(w.pods);
    assert_int_equal(egpu_alloc_live(), base);
    egpu_workload_free(&w);
    egpu_workload_free(NULL);
    assert_int_equal(egpu_alloc_live(), base);

    /* Each allocation of from_requests fails in turn. */
    for (long nth = 1; nth <= 8; nth++) {
        int rc;

        w = (struct egpu_workload){.n = 42, .pods = &sentinel};
        egpu_alloc_fail_after(nth);
        rc = egpu_workload_from_requests(reqs, 3, 1.0, &w);
        egpu_alloc_fail_after(0);
        if (rc == 0) {
            assert_int_equal(w.n, 2);
            egpu_workload_free(&w);
            break;
        }
        assert_int_equal(rc, -ENOMEM);
        assert_int_equal(w.n, 42);
        assert_int_equal(egpu_alloc_live(), base);
        failures++;
    }
    assert_int_equal(failures, 3); /* the groups, their index, the workload */

    w = (struct egpu_workload){.n = 42, .pods = &sentinel};
    egpu_alloc_fail_after(1);
    assert_int_equal(egpu_workload_from_list(list, 1, &w), -ENOMEM);
    egpu_alloc_fail_after(0);
    assert_int_equal(w.n, 42);
    assert_int_equal(egpu_alloc_live(), base);
}

/* An example of M built from requests measures the example node as the
 * hand-written M does: the requests 2 x m1, 1 x m2, 1 x m3 group into the
 * same three typical pods with weights 0.5, 0.25, 0.25, so F(M) = 950. */
static void test_frag_with_trace_workload(void **state)
{
    struct egpu_pod_request reqs[4] = {tu_request(4000, 0, 30, 0), tu_request(8000, 0, 200, 0),
                                       tu_request(2000, 0, 0, 0), tu_request(4000, 0, 30, 0)};
    struct egpu_cluster *c = egpu_cluster_new();
    struct egpu_workload w = {0};
    struct egpu_node *n;

    (void)state;
    n = example_node(c, "n", 32000);
    assert_int_equal(egpu_workload_from_requests(reqs, 4, 1.0, &w), 0);
    assert_int_equal(w.n, 3);
    expect_typical(&w.pods[0], 4000, 300, 1, 0, 0.5);
    assert_near(egpu_frag_node(n, &w), 950.0);
    assert_near(egpu_frag_cluster(c, &w), 950.0);
    egpu_workload_free(&w);
    egpu_cluster_free(c);
}

/* A random card free value: mostly the ones the trace leaves (0, whole,
 * the frequent sizes' leftovers), sometimes any. */
static uint32_t random_free(struct egpu_rng *rng)
{
    static const uint32_t common[] = {0, 1000, 190, 350, 500, 530, 540, 680, 770, 810};

    if (egpu_rng_below(rng, 4) == 0)
        return (uint32_t)egpu_rng_below(rng, EGPU_GPU_MILLI + 1);
    return common[egpu_rng_below(rng, sizeof(common) / sizeof(common[0]))];
}

/* egpu__frag_base_eval (the placer's incremental F(M): per class of typical
 * pods, the cards a view changed) gives exactly egpu__frag_view's double,
 * on random nodes, workloads and placements: the FGD score is an integer
 * of dF, so a different rounding could flip a tie and change a replay. */
static void test_frag_incremental_equals_full(void **state)
{
    static const uint32_t sizes[] = {0, 100, 190, 230, 320, 460, 470, 500, 650, 810, 1000};
    long live = egpu_alloc_live();
    struct egpu_rng rng;
    uint64_t compared = 0;

    (void)state;
    egpu_rng_seed(&rng, 29);
    for (int round = 0; round < 300; round++) {
        struct egpu_typical_pod pods[90];
        size_t npods = 1 + (size_t)egpu_rng_below(&rng, 90);
        struct egpu_workload w = {0};
        struct egpu__frag_base b;
        struct egpu__node_view before = {0};

        for (size_t k = 0; k < npods; k++) {
            uint32_t gm = sizes[egpu_rng_below(&rng, sizeof(sizes) / sizeof(sizes[0]))];

            pods[k] = (struct egpu_typical_pod){
                .cpu_milli = (int64_t)egpu_rng_below(&rng, 6) * 4000,
                .gpu_milli = gm,
                .ncards = gm == 0               ? 0
                          : gm < EGPU_GPU_MILLI ? 1
                                                : 1 + (uint32_t)egpu_rng_below(&rng, 8),
                .model_mask = egpu_rng_below(&rng, 4) == 0 ? 1ULL << egpu_rng_below(&rng, 3) : 0,
                .weight = 0.001 + (double)egpu_rng_below(&rng, 1000) / 997.0,
            };
        }
        assert_int_equal(egpu_workload_from_list(pods, npods, &w), 0);
        assert_int_equal(egpu__frag_base_init(&b, &w), 0);
        for (int node = 0; node < 20; node++) {
            before.ngpus = (uint32_t)egpu_rng_below(&rng, 9);
            before.model =
                egpu_rng_below(&rng, 5) == 0 ? EGPU_MODEL_NONE : (uint16_t)egpu_rng_below(&rng, 3);
            before.free_cpu_milli = (int64_t)egpu_rng_below(&rng, 97) * 1000;
            for (uint32_t i = 0; i < before.ngpus; i++)
                before.free_milli[i] = random_free(&rng);
            egpu__frag_base_set(&b, &before);
            assert_true(egpu__frag_base_eval(&b, &before) == egpu__frag_view(&before, &w));
            for (int place = 0; place < 12; place++) {
                struct egpu__node_view after = before;
                uint32_t changes = before.ngpus ? (uint32_t)egpu_rng_below(&rng, 4) : 0;

                after.free_cpu_milli -= (int64_t)egpu_rng_below(&rng, 5) * 2000;
                for (uint32_t j = 0; j < changes; j++) {
                    uint32_t g = (uint32_t)egpu_rng_below(&rng, before.ngpus);

                    after.free_milli[g] = (uint32_t)egpu_rng_below(&rng, after.free_milli[g] + 1);
                }
                /* Twice: the second answer comes from the views seen. */
                assert_true(egpu__frag_base_eval(&b, &after) == egpu__frag_view(&after, &w));
                assert_true(egpu__frag_base_eval(&b, &after) == egpu__frag_view(&after, &w));
                compared++;
            }
        }
        egpu__frag_base_free(&b);
        egpu_workload_free(&w);
    }
    assert_int_equal(compared, 300 * 20 * 12);
    assert_int_equal(egpu_alloc_live(), live);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_frag_worked_example),
        cmocka_unit_test(test_frag_cpu_does_not_fit),
        cmocka_unit_test(test_frag_model_mask),
        cmocka_unit_test(test_frag_no_idle_gpu),
        cmocka_unit_test(test_frag_free_node),
        cmocka_unit_test(test_frag_cluster_sum),
        cmocka_unit_test(test_workload_from_requests_cut),
        cmocka_unit_test(test_workload_grouping_key),
        cmocka_unit_test(test_workload_ties),
        cmocka_unit_test(test_workload_from_requests_invalid),
        cmocka_unit_test(test_workload_from_list),
        cmocka_unit_test(test_workload_from_list_invalid),
        cmocka_unit_test(test_workload_tally_many_groups),
        cmocka_unit_test(test_shape_tally),
        cmocka_unit_test(test_workload_distance),
        cmocka_unit_test(test_workload_free_no_leaks),
        cmocka_unit_test(test_frag_with_trace_workload),
        cmocka_unit_test(test_frag_incremental_equals_full),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
