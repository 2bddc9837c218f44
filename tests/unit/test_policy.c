/* tests/unit/test_policy.c - placement policies: the node tier, the card tier
 * and the placer that ties them together (src/core/policy.c, cards.c,
 * placement.c).
 *
 * Every cluster here is small and made by hand; the comment above each check
 * works out the right answer from the documented semantics (include/egpu/
 * core.h, the header comments of policy.c and cards.c, and the FGD definition
 * in shared/data/openb/README.md), so a test never just restates the code.
 * Units: CPU in millicores, memory in MiB, GPU in milli-GPU (1000 = a card)
 * unless a name says percent (tu_request's core_pct).
 */
#include <errno.h>
#include <math.h>

#include "testutil.h"

#define V100     "V100M16"
#define V100_MIB 16384

/* got and want (doubles) agree to 1e-9. */
#define assert_near(got, want)                                     \
    do {                                                           \
        double got_ = (got), want_ = (want);                       \
        if (!(fabs(got_ - want_) <= 1e-9))                         \
            fail_msg("%s = %.12f, want %.12f", #got, got_, want_); \
    } while (0)

/* text (a C string) contains part. */
#define assert_has(text, part)                                          \
    do {                                                                \
        if (strstr((text), (part)) == NULL)                             \
            fail_msg("\"%s\" does not contain \"%s\"", (text), (part)); \
    } while (0)

static struct egpu_cluster *new_cluster(void)
{
    struct egpu_cluster *c = egpu_cluster_new();

    assert_non_null(c);
    return c;
}

static struct egpu_placer *new_placer_sized(enum egpu_policy_kind node_policy,
                                            enum egpu_policy_kind card_policy, uint64_t seed,
                                            const struct egpu_workload *w, bool memo,
                                            size_t memo_bytes)
{
    struct egpu_placer_config cfg = {.node_policy = node_policy,
                                     .card_policy = card_policy,
                                     .seed = seed,
                                     .workload = w,
                                     .memo = memo,
                                     .memo_bytes = memo_bytes};
    struct egpu_error err = {0};
    struct egpu_placer *p = egpu_placer_new(&cfg, &err);

    if (p == NULL)
        fail_msg("placer %s/%s: %s", egpu_policy_name(node_policy), egpu_policy_name(card_policy),
                 err.msg);
    return p;
}

static struct egpu_placer *new_placer(enum egpu_policy_kind node_policy,
                                      enum egpu_policy_kind card_policy, uint64_t seed,
                                      const struct egpu_workload *w, bool memo)
{
    return new_placer_sized(node_policy, card_policy, seed, w, memo, 0);
}

static void make_workload(struct egpu_workload *w, const struct egpu_typical_pod *pods, size_t n)
{
    assert_int_equal(egpu_workload_from_list(pods, n, w), 0);
}

/* Take CPU and memory on n with a pod that asks no GPU (test setup). */
static void use_cpu(struct egpu_cluster *c, struct egpu_node *n, const char *pod, int64_t cpu_milli,
                    int64_t mem_mib)
{
    struct egpu_pod_request r = tu_request(cpu_milli, mem_mib, 0, 0);
    struct egpu_pick pick = {.nshares = 0};
    struct egpu_error err = {0};

    if (egpu_cluster_assign(c, pod, n, &r, &pick, &err) != 0)
        fail_msg("use cpu of %s: %s", n->name, err.msg);
}

/* A share of core_pct percent and mem_mib GPU memory on card gpu (test setup). */
static void use_share(struct egpu_cluster *c, struct egpu_node *n, const char *pod, uint16_t gpu,
                      int64_t core_pct, uint32_t mem_mib)
{
    struct egpu_pod_request r = tu_request(0, 0, core_pct, mem_mib);
    struct egpu_pick pick = {.nshares = 1};
    struct egpu_error err = {0};

    pick.shares[0] = (struct egpu_share){
        .container = 0, .gpu = gpu, .core_milli = r.containers[0].core_milli, .mem_mib = mem_mib};
    if (egpu_cluster_assign(c, pod, n, &r, &pick, &err) != 0)
        fail_msg("use share of card %u of %s: %s", gpu, n->name, err.msg);
}

/* A pod with two GPU containers of pct0 and pct1 percent (no GPU memory). */
static struct egpu_pod_request two_containers(int64_t cpu_milli, int64_t pct0, int64_t pct1)
{
    struct egpu_pod_request r = tu_request(cpu_milli, 0, pct0, 0);

    r.ncontainers = 2;
    assert_int_equal(egpu_container_request_set(&r.containers[1], pct1, 0, NULL), 0);
    return r;
}

/* Node score of r on n; fails the test when n cannot host r. */
static double score_of(struct egpu_placer *p, const struct egpu_cluster *c,
                       const struct egpu_node *n, const struct egpu_pod_request *r,
                       struct egpu_pick *pick)
{
    double s = -1e300;
    int rc = egpu_placer_score(p, c, n, r, &s, pick);

    if (rc != 0)
        fail_msg("score on %s: %d (%s)", n->name, rc, egpu_strerror(rc));
    return s;
}

/* The card of the single share can_host picks for r on n. */
static uint16_t card_of(struct egpu_placer *p, const struct egpu_cluster *c,
                        const struct egpu_node *n, const struct egpu_pod_request *r)
{
    struct egpu_pick pick = {0};
    char why[256] = "";

    if (!egpu_placer_can_host(p, c, n, r, &pick, why, sizeof(why)))
        fail_msg("%s cannot host: %s", n->name, why);
    assert_int_equal(pick.nshares, 1);
    assert_int_equal(pick.shares[0].container, 0);
    assert_int_equal(pick.shares[0].core_milli, r->containers[0].core_milli);
    return pick.shares[0].gpu;
}

static void assert_same_pick(const struct egpu_pick *a, const struct egpu_pick *b)
{
    assert_int_equal(a->nshares, b->nshares);
    for (uint32_t i = 0; i < a->nshares; i++) {
        assert_int_equal(a->shares[i].container, b->shares[i].container);
        assert_int_equal(a->shares[i].gpu, b->shares[i].gpu);
        assert_int_equal(a->shares[i].core_milli, b->shares[i].core_milli);
        assert_int_equal(a->shares[i].mem_mib, b->shares[i].mem_mib);
    }
}

/* ------------------------------------------------------------------------ */

static void test_policy_parse_and_name(void **state)
{
    static const struct {
        const char *name;
        enum egpu_policy_kind kind;
    } cases[] = {
        {"binpack", EGPU_POLICY_BINPACK},  {"spread", EGPU_POLICY_SPREAD},
        {"best-fit", EGPU_POLICY_BESTFIT}, {"bestfit", EGPU_POLICY_BESTFIT},
        {"random", EGPU_POLICY_RANDOM},    {"fgd", EGPU_POLICY_FGD},
        {"fgd-cpu", EGPU_POLICY_FGD_CPU},  {"fgd-cpu-fill", EGPU_POLICY_FGD_CPU_FILL},
    };
    static const char *const canonical[] = {
        [EGPU_POLICY_BINPACK] = "binpack",
        [EGPU_POLICY_SPREAD] = "spread",
        [EGPU_POLICY_BESTFIT] = "best-fit",
        [EGPU_POLICY_RANDOM] = "random",
        [EGPU_POLICY_FGD] = "fgd",
        [EGPU_POLICY_FGD_CPU] = "fgd-cpu",
        [EGPU_POLICY_FGD_CPU_FILL] = "fgd-cpu-fill",
    };
    static const char *const unknown[] = {"packing", "", "best_fit", "fgd2"};
    struct egpu_error err = {0};
    enum egpu_policy_kind out;

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        out = (enum egpu_policy_kind)99;
        assert_int_equal(egpu_policy_parse(cases[i].name, &out, &err), 0);
        assert_int_equal(out, cases[i].kind);
    }
    /* The name of every kind is its canonical name and parses back to it. */
    for (int k = EGPU_POLICY_BINPACK; k <= EGPU_POLICY_FGD_CPU; k++) {
        const char *name = egpu_policy_name((enum egpu_policy_kind)k);

        assert_non_null(name);
        assert_string_equal(name, canonical[k]);
        out = (enum egpu_policy_kind)99;
        assert_int_equal(egpu_policy_parse(name, &out, NULL), 0);
        assert_int_equal(out, k);
    }
    for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
        memset(&err, 0, sizeof(err));
        assert_int_equal(egpu_policy_parse(unknown[i], &out, &err), -EINVAL);
        assert_int_equal(err.code, -EINVAL);
        assert_has(err.msg, unknown[i]);
        for (size_t k = 0; k < sizeof(canonical) / sizeof(canonical[0]); k++)
            assert_has(err.msg, canonical[k]);
        assert_int_equal(egpu_policy_parse(unknown[i], &out, NULL), -EINVAL);
    }
}

/* The one list of policies (EGPU_POLICY_LIST in egpu/core.h): every kind
 * below EGPU_POLICY_COUNT has a name that parses back to it, the names joined
 * with ", " are EGPU_POLICY_NAMES, and that is the text the --help of
 * egpu-scheduler and egpu-sim and the errors show (the errors' whole text:
 * test_api.c, test_api_claims.c, test_webhook_validate.c, test_sim_cli.py). */
static void test_policy_names_enumerated(void **state)
{
    char joined[256] = "", msg[EGPU_ERRMSG_MAX];
    struct egpu_error err = {0};
    enum egpu_policy_kind out;
    size_t used = 0;

    (void)state;
    assert_int_equal(EGPU_POLICY_COUNT, 7);
    for (int k = 0; k < EGPU_POLICY_COUNT; k++) {
        const char *name = egpu_policy_name((enum egpu_policy_kind)k);
        int n;

        assert_non_null(name);
        assert_string_not_equal(name, "unknown");
        out = (enum egpu_policy_kind)99;
        assert_int_equal(egpu_policy_parse(name, &out, NULL), 0);
        assert_int_equal(out, k);
        assert_string_equal(egpu_policy_name(out), name);
        n = snprintf(joined + used, sizeof(joined) - used, "%s%s", k ? ", " : "", name);
        assert_true(n > 0 && (size_t)n < sizeof(joined) - used);
        used += (size_t)n;
    }
    assert_string_equal(egpu_policy_name((enum egpu_policy_kind)EGPU_POLICY_ALL_COUNT), "unknown");
    /* The experimental ones follow, named, but only egpu-sim's parser
     * knows them: no flag, annotation or class of the live path can name
     * one. */
    for (int k = EGPU_POLICY_COUNT; k < EGPU_POLICY_ALL_COUNT; k++) {
        const char *name = egpu_policy_name((enum egpu_policy_kind)k);

        assert_string_not_equal(name, "unknown");
        assert_has(EGPU_POLICY_EXPERIMENTAL_NAMES, name);
        assert_int_equal(egpu_policy_parse(name, &out, NULL), -EINVAL);
        out = (enum egpu_policy_kind)99;
        assert_int_equal(egpu_policy_parse_experimental(name, &out, NULL), 0);
        assert_int_equal(out, k);
    }
    assert_int_equal(egpu_policy_parse_experimental("fgd", &out, NULL), 0);
    assert_int_equal(out, EGPU_POLICY_FGD);
    assert_int_equal(egpu_policy_parse_experimental("fgd-x", &out, &err), -EINVAL);
    assert_has(err.msg, "experimental: fgd-bf, ");
    memset(&err, 0, sizeof(err));
    assert_string_equal(joined, EGPU_POLICY_NAMES);
    assert_string_equal(EGPU_POLICY_NAMES,
                        "binpack, spread, best-fit, random, fgd, fgd-cpu, fgd-cpu-fill");
    /* The parser's error names them as the help text does. */
    assert_int_equal(egpu_policy_parse("packing", &out, &err), -EINVAL);
    snprintf(msg, sizeof(msg), "unknown policy \"packing\" (allowed: %s)", joined);
    assert_string_equal(err.msg, msg);
}

/* Binpack = mean used fraction of CPU, memory and GPU after placement; spread
 * is its negation. Four nodes of 16000m CPU, 65536 MiB, 2 cards; request
 * 2000m, 8192 MiB, 20%:
 *   A: card 0 60% used.  cpu 2000/16000 = .125, mem 8192/65536 = .125,
 *      gpu (600 + 200)/2000 = .4            -> .65/3  = .216667
 *   B: 12000m CPU used.  cpu 14000/16000 = .875, mem .125, gpu 200/2000 = .1
 *                                           -> 1.1/3  = .366667 (binpack)
 *   C: empty.            .125, .125, .1     -> .35/3  = .116667 (spread)
 *   D: only 1000m CPU: cannot host.
 * The CPU dimension decides: A has the most GPU used, B wins binpack. */
static void test_binpack_spread_node_choice(void **state)
{
    long live = egpu_alloc_live();
    struct egpu_cluster *c = new_cluster();
    struct egpu_node *a = tu_add_node(c, "A", 16000, 65536, 2, V100, V100_MIB);
    struct egpu_node *b = tu_add_node(c, "B", 16000, 65536, 2, V100, V100_MIB);
    struct egpu_node *cn = tu_add_node(c, "C", 16000, 65536, 2, V100, V100_MIB);
    struct egpu_node *d = tu_add_node(c, "D", 1000, 65536, 2, V100, V100_MIB);
    struct egpu_pod_request r = tu_request(2000, 8192, 20, 0);
    struct egpu_placer *bp, *sp;
    struct egpu_node *chosen = NULL;
    struct egpu_pick pick = {0};
    double s;

    (void)state;
    tu_use_card(c, a, "a-60", 0, 60);
    use_cpu(c, b, "b-cpu", 12000, 0);
    bp = new_placer(EGPU_POLICY_BINPACK, EGPU_POLICY_BINPACK, 1, NULL, false);
    sp = new_placer(EGPU_POLICY_SPREAD, EGPU_POLICY_SPREAD, 1, NULL, false);

    assert_near(score_of(bp, c, a, &r, NULL), 0.65 / 3);
    assert_near(score_of(bp, c, b, &r, NULL), 1.1 / 3);
    assert_near(score_of(bp, c, cn, &r, NULL), 0.35 / 3);
    assert_int_equal(egpu_placer_score(bp, c, d, &r, &s, NULL), EGPU_ENOFIT);
    assert_near(score_of(sp, c, a, &r, NULL), -0.65 / 3);
    assert_near(score_of(sp, c, b, &r, NULL), -1.1 / 3);
    assert_near(score_of(sp, c, cn, &r, NULL), -0.35 / 3);
    assert_int_equal(egpu_placer_score(sp, c, d, &r, &s, NULL), EGPU_ENOFIT);

    /* Binpack: B, on card 0 (both cards free: the lower index). */
    assert_int_equal(egpu_placer_schedule(bp, c, &r, &chosen, &pick), 0);
    assert_ptr_equal(chosen, b);
    assert_int_equal(pick.nshares, 1);
    assert_int_equal(pick.shares[0].gpu, 0);
    assert_int_equal(pick.shares[0].core_milli, 200);
    /* Spread: C, card 0 (equal cards: the lower index). */
    assert_int_equal(egpu_placer_schedule(sp, c, &r, &chosen, &pick), 0);
    assert_ptr_equal(chosen, cn);
    assert_int_equal(pick.nshares, 1);
    assert_int_equal(pick.shares[0].gpu, 0);
    /* On A, binpack fills the 60% card (200 left), spread takes the free one. */
    assert_int_equal(card_of(bp, c, a, &r), 0);
    assert_int_equal(card_of(sp, c, a, &r), 1);

    egpu_placer_free(bp);
    egpu_placer_free(sp);
    egpu_cluster_free(c);
    assert_int_equal(egpu_alloc_live(), live);
}

/* Best-fit = -(0.5 * CPU left / largest node CPU + 0.5 * GPU milli left /
 * (most cards on a node * 1000)). Largest CPU 32000m, most cards 8, so the
 * GPU norm is 8000. Request 1000m, 0 MiB, 50%:
 *   A: 32000m, 8 cards, 24000m and cards 0..5 used. Left 7000m, 1500 milli:
 *      -(0.5*7000/32000 + 0.5*1500/8000) = -(.109375 + .09375) = -.203125
 *   B: 4000m, 1 card, empty. Left 3000m, 500:
 *      -(.046875 + .03125) = -.078125   (best-fit's choice)
 *   C: 16000m, 4 cards, empty. Left 15000m, 3500:
 *      -(.234375 + .21875) = -.453125
 * Binpack measures fractions of each node instead (memory 0 everywhere):
 *   A: (25000/32000 + 0 + 6500/8000)/3 = .53125, B: (.25 + 0 + .5)/3 = .25,
 *   C: (.0625 + 0 + .125)/3 = .0625, so binpack takes A where best-fit takes B. */
static void test_bestfit_node_choice(void **state)
{
    long live = egpu_alloc_live();
    struct egpu_cluster *c = new_cluster();
    struct egpu_node *a = tu_add_node(c, "A", 32000, 65536, 8, V100, V100_MIB);
    struct egpu_node *b = tu_add_node(c, "B", 4000, 65536, 1, V100, V100_MIB);
    struct egpu_node *cn = tu_add_node(c, "C", 16000, 65536, 4, V100, V100_MIB);
    struct egpu_pod_request r = tu_request(1000, 0, 50, 0);
    struct egpu_placer *fp, *bp;
    struct egpu_node *chosen = NULL;
    struct egpu_pick pick = {0};
    char pod[16];

    (void)state;
    use_cpu(c, a, "a-cpu", 24000, 0);
    for (uint16_t g = 0; g < 6; g++) {
        snprintf(pod, sizeof(pod), "a-whole-%u", g);
        tu_use_card(c, a, pod, g, 100);
    }
    fp = new_placer(EGPU_POLICY_BESTFIT, EGPU_POLICY_BESTFIT, 3, NULL, false);
    bp = new_placer(EGPU_POLICY_BINPACK, EGPU_POLICY_BINPACK, 3, NULL, false);

    assert_near(score_of(fp, c, a, &r, NULL), -0.203125);
    assert_near(score_of(fp, c, b, &r, NULL), -0.078125);
    assert_near(score_of(fp, c, cn, &r, NULL), -0.453125);
    assert_near(score_of(bp, c, a, &r, NULL), 0.53125);
    assert_near(score_of(bp, c, b, &r, NULL), 0.25);
    assert_near(score_of(bp, c, cn, &r, NULL), 0.0625);

    assert_int_equal(egpu_placer_schedule(fp, c, &r, &chosen, &pick), 0);
    assert_ptr_equal(chosen, b);
    assert_int_equal(pick.nshares, 1);
    assert_int_equal(pick.shares[0].gpu, 0);
    assert_int_equal(egpu_placer_schedule(bp, c, &r, &chosen, &pick), 0);
    assert_ptr_equal(chosen, a);
    /* On A cards 6 and 7 are free and alike: the lower index. */
    assert_int_equal(pick.nshares, 1);
    assert_int_equal(pick.shares[0].gpu, 6);
    assert_int_equal(card_of(fp, c, a, &r), 6);

    egpu_placer_free(fp);
    egpu_placer_free(bp);
    egpu_cluster_free(c);
    assert_int_equal(egpu_alloc_live(), live);
}

/* Card tier on one node with cards at 0%, 30% and 60% used (free 1000, 700,
 * 400), request 30%:
 *   binpack, best-fit: least free after -> card 2 (100 left).
 *   spread: most free after -> card 0 (700 left).
 *   FGD with M = {whole card (1000, 1 card): 1/2, 40% (400, 1 card): 1/2}:
 *     card 0 -> [700, 700, 400]: no card fits m1, F(m1) = idle = 1800;
 *               every card >= 400, F(m2) = 0.             F = 900
 *     card 1 -> [1000, 400, 400]: F(m1) = 800; F(m2) = 0.  F = 400
 *     card 2 -> [1000, 700, 100]: F(m1) = 800; F(m2) = 100. F = 450
 *   so FGD takes card 1, neither binpack's nor spread's card. Before, F =
 *   .5 * (700 + 400) + 0 = 550, so dF = -150 and the FGD node score is
 *   floor(100 * sigmoid(0.15)) = floor(53.74) = 53.
 * FGD ties go to the lower index. Node "tie", cards at 20% and 40% used and
 * one free ([800, 600, 1000]), M = {whole card: 1}, request 30%:
 *   card 0 -> [500, 600, 1000]: F = 500 + 600 = 1100
 *   card 1 -> [800, 300, 1000]: F = 800 + 300 = 1100
 *   card 2 -> [800, 600, 700]: no whole card left, F = idle = 2100
 *   so card 0, where binpack takes card 1 (300 left). */
static void test_card_choice_per_policy(void **state)
{
    static const struct egpu_typical_pod pods[] = {
        {.cpu_milli = 0, .gpu_milli = 1000, .ncards = 1, .weight = 1.0},
        {.cpu_milli = 0, .gpu_milli = 400, .ncards = 1, .weight = 1.0},
    };
    long live = egpu_alloc_live();
    struct egpu_cluster *c = new_cluster();
    struct egpu_node *n = tu_add_node(c, "n", 8000, 32768, 3, V100, V100_MIB);
    struct egpu_node *tie = tu_add_node(c, "tie", 8000, 32768, 3, V100, V100_MIB);
    struct egpu_pod_request r = tu_request(1000, 1024, 30, 0);
    struct egpu_workload w = {0}, whole = {0};
    struct egpu_placer *bp, *fp, *sp, *gp, *tp;
    struct egpu_pick pick = {0};

    (void)state;
    make_workload(&w, pods, 2);
    assert_near(w.pods[0].weight, 0.5);
    tu_use_card(c, n, "n-30", 1, 30);
    tu_use_card(c, n, "n-60", 2, 60);
    bp = new_placer(EGPU_POLICY_BINPACK, EGPU_POLICY_BINPACK, 1, NULL, false);
    fp = new_placer(EGPU_POLICY_BESTFIT, EGPU_POLICY_BESTFIT, 1, NULL, false);
    sp = new_placer(EGPU_POLICY_SPREAD, EGPU_POLICY_SPREAD, 1, NULL, false);
    gp = new_placer(EGPU_POLICY_FGD, EGPU_POLICY_FGD, 1, &w, false);

    assert_int_equal(card_of(bp, c, n, &r), 2);
    assert_int_equal(card_of(fp, c, n, &r), 2);
    assert_int_equal(card_of(sp, c, n, &r), 0);
    assert_int_equal(card_of(gp, c, n, &r), 1);
    assert_near(egpu_frag_node(n, &w), 550.0);
    assert_near(score_of(gp, c, n, &r, &pick), 53.0);
    assert_int_equal(pick.shares[0].gpu, 1);
    /* Committing FGD's pick leaves exactly the F worked out above. */
    assert_int_equal(egpu_cluster_assign(c, "fgd-pod", n, &r, &pick, NULL), 0);
    assert_near(egpu_frag_node(n, &w), 400.0);

    make_workload(&whole, pods, 1);
    tu_use_card(c, tie, "tie-20", 0, 20);
    tu_use_card(c, tie, "tie-40", 1, 40);
    tp = new_placer(EGPU_POLICY_BINPACK, EGPU_POLICY_FGD, 1, &whole, false);
    assert_int_equal(card_of(tp, c, tie, &r), 0);
    assert_int_equal(card_of(bp, c, tie, &r), 1);
    assert_int_equal(card_of(sp, c, tie, &r), 2);

    egpu_placer_free(bp);
    egpu_placer_free(fp);
    egpu_placer_free(sp);
    egpu_placer_free(gp);
    egpu_placer_free(tp);
    egpu_workload_free(&w);
    egpu_workload_free(&whole);
    egpu_cluster_free(c);
    assert_int_equal(egpu_alloc_live(), live);
}

/* Ties in free compute go to the card with less free memory (binpack,
 * best-fit) or more (spread). Card 0: 30% with 0 MiB, card 1: 30% with
 * 4096 MiB, card 2: whole card used. Request 30%, no memory: cards 0 and 1
 * both end at 400 free; card 1 has 12288 MiB free, card 0 16384. A request
 * for 13000 MiB fits only card 0's memory, whatever the policy. */
static void test_card_ties_by_memory(void **state)
{
    long live = egpu_alloc_live();
    struct egpu_cluster *c = new_cluster();
    struct egpu_node *n = tu_add_node(c, "n", 8000, 32768, 3, V100, V100_MIB);
    struct egpu_pod_request r = tu_request(0, 0, 30, 0);
    struct egpu_pod_request big = tu_request(0, 0, 30, 13000);
    struct egpu_placer *bp, *fp, *sp;

    (void)state;
    use_share(c, n, "s0", 0, 30, 0);
    use_share(c, n, "s1", 1, 30, 4096);
    tu_use_card(c, n, "w2", 2, 100);
    bp = new_placer(EGPU_POLICY_BINPACK, EGPU_POLICY_BINPACK, 1, NULL, false);
    fp = new_placer(EGPU_POLICY_BESTFIT, EGPU_POLICY_BESTFIT, 1, NULL, false);
    sp = new_placer(EGPU_POLICY_SPREAD, EGPU_POLICY_SPREAD, 1, NULL, false);

    assert_int_equal(card_of(bp, c, n, &r), 1);
    assert_int_equal(card_of(fp, c, n, &r), 1);
    assert_int_equal(card_of(sp, c, n, &r), 0);
    assert_int_equal(card_of(bp, c, n, &big), 0);
    assert_int_equal(card_of(fp, c, n, &big), 0);
    assert_int_equal(card_of(sp, c, n, &big), 0);

    egpu_placer_free(bp);
    egpu_placer_free(fp);
    egpu_placer_free(sp);
    egpu_cluster_free(c);
    assert_int_equal(egpu_alloc_live(), live);
}

/* FGD node tier, M = {50% on one card: 1}. Nodes of 8000m, 32768 MiB;
 * request 1000m, 1024 MiB, 30%:
 *   P: 2 cards, card 1 70% used: free [1000, 300]. F before = 300 (card 1
 *      below 500). Card 0 -> [700, 300] F = 300; card 1 -> [1000, 0] F = 0:
 *      card 1, dF = -300, score floor(100 * sigmoid(0.3)) = floor(57.44) = 57.
 *   Q: 2 cards, card 0 whole used: [0, 1000], F = 0. Card 1 -> [0, 700],
 *      F = 0: dF = 0, score 50.
 *   R: 1 card free: [1000] -> [700], F 0 -> 0, score 50.
 *   S: 500m CPU: cannot host.
 * FGD takes P. Binpack (CPU and memory alike) takes the most GPU used after:
 *   P (700 + 300)/2000 = .5, Q 1300/2000 = .65, R .3 -> Q. */
static void test_fgd_node_choice_differs_from_binpack(void **state)
{
    static const struct egpu_typical_pod pods[] = {
        {.cpu_milli = 0, .gpu_milli = 500, .ncards = 1, .weight = 1.0},
    };
    long live = egpu_alloc_live();
    struct egpu_cluster *c = new_cluster();
    struct egpu_node *p = tu_add_node(c, "P", 8000, 32768, 2, V100, V100_MIB);
    struct egpu_node *q = tu_add_node(c, "Q", 8000, 32768, 2, V100, V100_MIB);
    struct egpu_node *rn = tu_add_node(c, "R", 8000, 32768, 1, V100, V100_MIB);
    struct egpu_node *s = tu_add_node(c, "S", 500, 32768, 2, V100, V100_MIB);
    struct egpu_pod_request r = tu_request(1000, 1024, 30, 0);
    struct egpu_workload w = {0};
    struct egpu_placer *gp, *bp;
    struct egpu_node *chosen = NULL;
    struct egpu_pick pick = {0};
    double sc;

    (void)state;
    make_workload(&w, pods, 1);
    tu_use_card(c, p, "p-70", 1, 70);
    tu_use_card(c, q, "q-100", 0, 100);
    gp = new_placer(EGPU_POLICY_FGD, EGPU_POLICY_FGD, 5, &w, false);
    bp = new_placer(EGPU_POLICY_BINPACK, EGPU_POLICY_BINPACK, 5, NULL, false);

    assert_near(egpu_frag_node(p, &w), 300.0);
    assert_near(score_of(gp, c, p, &r, &pick), 57.0);
    assert_int_equal(pick.shares[0].gpu, 1);
    assert_near(score_of(gp, c, q, &r, &pick), 50.0);
    assert_int_equal(pick.shares[0].gpu, 1);
    assert_near(score_of(gp, c, rn, &r, &pick), 50.0);
    assert_int_equal(pick.shares[0].gpu, 0);
    assert_int_equal(egpu_placer_score(gp, c, s, &r, &sc, NULL), EGPU_ENOFIT);

    assert_int_equal(egpu_placer_schedule(gp, c, &r, &chosen, &pick), 0);
    assert_ptr_equal(chosen, p);
    assert_int_equal(pick.nshares, 1);
    assert_int_equal(pick.shares[0].gpu, 1);
    /* Binpack, on the same cluster, takes Q. */
    assert_int_equal(egpu_placer_schedule(bp, c, &r, &chosen, &pick), 0);
    assert_ptr_equal(chosen, q);
    /* Committing FGD's choice removes P's fragment. */
    assert_int_equal(egpu_placer_schedule(gp, c, &r, &chosen, &pick), 0);
    assert_int_equal(egpu_cluster_assign(c, "fgd", chosen, &r, &pick, NULL), 0);
    assert_near(egpu_frag_node(p, &w), 0.0);

    egpu_placer_free(gp);
    egpu_placer_free(bp);
    egpu_workload_free(&w);
    egpu_cluster_free(c);
    assert_int_equal(egpu_alloc_live(), live);
}

/* FGD with a weighted, CPU-aware workload: m1 = 50% on one card, 0m, weight 3;
 * m2 = 2 whole cards with 4000m, weight 1 (renormalised: .75 and .25).
 * Nodes of 8000m; request 2000m, 0 MiB, 60%:
 *   X: 2 free cards. Before: m1 0, m2 fits, 0 -> F = 0. Card 0 -> [400, 1000],
 *      6000m left: m1 400; m2 has one whole card, F = idle 1400 ->
 *      .75*400 + .25*1400 = 650 (card 1 the same: the lower index).
 *      dF = 650: floor(100 * sigmoid(-0.65)) = floor(34.30) = 34.
 *   Y: 3 cards, card 2 40% used: [1000, 1000, 600]. Before: m1 0, m2 fits
 *      with 600 below -> .25*600 = 150. Card 0 -> [400, 1000, 600]: m1 400,
 *      m2 idle 2000 -> 800; card 2 -> [1000, 1000, 0]: 0. Card 2, dF = -150,
 *      floor(53.74) = 53.
 *   Z: 1 card. Before: m2 lacks a second card, idle 1000 -> .25*1000 = 250.
 *      After [400]: .75*400 + .25*400 = 400. dF = 150, floor(46.26) = 46.
 * FGD takes Y. Binpack (CPU .25 and memory 0 everywhere): GPU used X .3,
 * Y 1000/3000 = .333, Z .6 -> Z. */
static void test_fgd_weighted_workload_scores(void **state)
{
    static const struct egpu_typical_pod pods[] = {
        {.cpu_milli = 0, .gpu_milli = 500, .ncards = 1, .weight = 3.0},
        {.cpu_milli = 4000, .gpu_milli = 1000, .ncards = 2, .weight = 1.0},
    };
    long live = egpu_alloc_live();
    struct egpu_cluster *c = new_cluster();
    struct egpu_node *x = tu_add_node(c, "X", 8000, 32768, 2, V100, V100_MIB);
    struct egpu_node *y = tu_add_node(c, "Y", 8000, 32768, 3, V100, V100_MIB);
    struct egpu_node *z = tu_add_node(c, "Z", 8000, 32768, 1, V100, V100_MIB);
    struct egpu_pod_request r = tu_request(2000, 0, 60, 0);
    struct egpu_workload w = {0};
    struct egpu_placer *gp, *bp;
    struct egpu_node *chosen = NULL;
    struct egpu_pick pick = {0};

    (void)state;
    make_workload(&w, pods, 2);
    assert_near(w.pods[0].weight, 0.75);
    assert_near(w.pods[1].weight, 0.25);
    tu_use_card(c, y, "y-40", 2, 40);
    gp = new_placer(EGPU_POLICY_FGD, EGPU_POLICY_FGD, 9, &w, false);
    bp = new_placer(EGPU_POLICY_BINPACK, EGPU_POLICY_BINPACK, 9, NULL, false);

    assert_near(egpu_frag_node(x, &w), 0.0);
    assert_near(egpu_frag_node(y, &w), 150.0);
    assert_near(egpu_frag_node(z, &w), 250.0);
    assert_near(score_of(gp, c, x, &r, &pick), 34.0);
    assert_int_equal(pick.shares[0].gpu, 0);
    assert_near(score_of(gp, c, y, &r, &pick), 53.0);
    assert_int_equal(pick.shares[0].gpu, 2);
    assert_near(score_of(gp, c, z, &r, &pick), 46.0);
    assert_int_equal(pick.shares[0].gpu, 0);

    assert_int_equal(egpu_placer_schedule(gp, c, &r, &chosen, &pick), 0);
    assert_ptr_equal(chosen, y);
    assert_int_equal(pick.shares[0].gpu, 2);
    assert_int_equal(egpu_placer_schedule(bp, c, &r, &chosen, &pick), 0);
    assert_ptr_equal(chosen, z);

    egpu_placer_free(gp);
    egpu_placer_free(bp);
    egpu_workload_free(&w);
    egpu_cluster_free(c);
    assert_int_equal(egpu_alloc_live(), live);
}

/* Four nodes with 4 cards at various use; request 30%. */
static struct egpu_cluster *random_cluster(void)
{
    struct egpu_cluster *c = new_cluster();
    struct egpu_node *n1, *n2;

    tu_add_node(c, "r0", 8000, 32768, 4, V100, V100_MIB);
    n1 = tu_add_node(c, "r1", 8000, 32768, 4, V100, V100_MIB);
    n2 = tu_add_node(c, "r2", 8000, 32768, 4, V100, V100_MIB);
    tu_add_node(c, "r3", 8000, 32768, 4, V100, V100_MIB);
    tu_use_card(c, n1, "r1-50", 0, 50);
    tu_use_card(c, n2, "r2-100", 3, 100);
    tu_use_card(c, n2, "r2-20", 1, 20);
    return c;
}

static void test_random_same_seed_same_sequence(void **state)
{
    long live = egpu_alloc_live();
    struct egpu_cluster *c = random_cluster();
    struct egpu_pod_request r = tu_request(1000, 1024, 30, 0);
    struct egpu_placer *p1, *p2, *p3;
    int differ = 0;

    (void)state;
    p1 = new_placer(EGPU_POLICY_RANDOM, EGPU_POLICY_RANDOM, 42, NULL, false);
    p2 = new_placer(EGPU_POLICY_RANDOM, EGPU_POLICY_RANDOM, 42, NULL, false);
    p3 = new_placer(EGPU_POLICY_RANDOM, EGPU_POLICY_RANDOM, 43, NULL, false);
    for (int i = 0; i < 200; i++) {
        struct egpu_node *n1 = NULL, *n2 = NULL, *n3 = NULL;
        struct egpu_pick k1 = {0}, k2 = {0}, k3 = {0};

        assert_int_equal(egpu_placer_schedule(p1, c, &r, &n1, &k1), 0);
        assert_int_equal(egpu_placer_schedule(p2, c, &r, &n2, &k2), 0);
        assert_int_equal(egpu_placer_schedule(p3, c, &r, &n3, &k3), 0);
        assert_ptr_equal(n1, n2);
        assert_same_pick(&k1, &k2);
        if (n1 != n3 || k1.shares[0].gpu != k3.shares[0].gpu)
            differ++;
    }
    /* Another seed gives another sequence (16 (node, card) outcomes a step). */
    assert_true(differ > 0);

    egpu_placer_free(p1);
    egpu_placer_free(p2);
    egpu_placer_free(p3);
    egpu_cluster_free(c);
    assert_int_equal(egpu_alloc_live(), live);
}

/* Random node choice is uniform over the feasible nodes. Three nodes fit,
 * "tiny" (500m CPU) never does. 3000 schedules on one placer: 1000 each
 * expected, sd 25.8, so 850..1150 is about 6 sd; 1500 fresh placers (seeds
 * 0..1499): 500 each, sd 18.3, 400..600. */
static void test_random_node_share(void **state)
{
    long live = egpu_alloc_live();
    struct egpu_cluster *c = new_cluster();
    struct egpu_node *nodes[4];
    struct egpu_pod_request r = tu_request(1000, 1024, 30, 0);
    struct egpu_placer *p;
    int count[4] = {0};

    (void)state;
    nodes[0] = tu_add_node(c, "a", 8000, 32768, 2, V100, V100_MIB);
    nodes[1] = tu_add_node(c, "b", 16000, 65536, 4, V100, V100_MIB);
    nodes[2] = tu_add_node(c, "c", 8000, 32768, 1, V100, V100_MIB);
    nodes[3] = tu_add_node(c, "tiny", 500, 32768, 2, V100, V100_MIB);
    tu_use_card(c, nodes[1], "b-90", 0, 90);

    p = new_placer(EGPU_POLICY_RANDOM, EGPU_POLICY_BINPACK, 1, NULL, false);
    for (int i = 0; i < 3000; i++) {
        struct egpu_node *n = NULL;
        struct egpu_pick pick = {0};

        assert_int_equal(egpu_placer_schedule(p, c, &r, &n, &pick), 0);
        count[n->slot]++;
    }
    egpu_placer_free(p);
    for (int i = 0; i < 3; i++)
        assert_in_range(count[i], 850, 1150);
    assert_int_equal(count[3], 0);

    memset(count, 0, sizeof(count));
    for (uint64_t seed = 0; seed < 1500; seed++) {
        struct egpu_node *n = NULL;
        struct egpu_pick pick = {0};

        p = new_placer(EGPU_POLICY_RANDOM, EGPU_POLICY_RANDOM, seed, NULL, false);
        assert_int_equal(egpu_placer_schedule(p, c, &r, &n, &pick), 0);
        count[n->slot]++;
        egpu_placer_free(p);
    }
    for (int i = 0; i < 3; i++)
        assert_in_range(count[i], 400, 600);
    assert_int_equal(count[3], 0);

    egpu_cluster_free(c);
    assert_int_equal(egpu_alloc_live(), live);
}

/* Random card tier: uniform over the cards that fit. Cards free [1000, 700,
 * 400, 100], request 30%: cards 0..2 fit (1000 each of 3000, 850..1150),
 * card 3 never. Whole cards: a uniform subset of the free cards. 5 cards,
 * card 1 holds a 10% share; 200% takes 2 of {0, 2, 3, 4}: 6 pairs, 500 each
 * of 3000 (sd 20.4, 400..600), never card 1. Binpack takes {0, 2}. */
static void test_random_card_choice(void **state)
{
    long live = egpu_alloc_live();
    struct egpu_cluster *c = new_cluster();
    struct egpu_node *n = tu_add_node(c, "n", 8000, 32768, 4, V100, V100_MIB);
    struct egpu_node *m = tu_add_node(c, "m", 8000, 32768, 5, V100, V100_MIB);
    struct egpu_pod_request share = tu_request(0, 0, 30, 0);
    struct egpu_pod_request two = tu_request(0, 0, 200, 0);
    struct egpu_placer *p, *bp;
    int count[4] = {0}, pairs[5][5] = {{0}};
    struct egpu_pick pick = {0};

    (void)state;
    tu_use_card(c, n, "n1", 1, 30);
    tu_use_card(c, n, "n2", 2, 60);
    tu_use_card(c, n, "n3", 3, 90);
    tu_use_card(c, m, "m1", 1, 10);
    p = new_placer(EGPU_POLICY_BINPACK, EGPU_POLICY_RANDOM, 77, NULL, false);
    for (int i = 0; i < 3000; i++)
        count[card_of(p, c, n, &share)]++;
    for (int g = 0; g < 3; g++)
        assert_in_range(count[g], 850, 1150);
    assert_int_equal(count[3], 0);

    for (int i = 0; i < 3000; i++) {
        uint16_t g0, g1;

        assert_true(egpu_placer_can_host(p, c, m, &two, &pick, NULL, 0));
        assert_int_equal(pick.nshares, 2);
        g0 = pick.shares[0].gpu;
        g1 = pick.shares[1].gpu;
        assert_true(g0 < 5 && g1 < 5 && g0 != g1);
        assert_int_equal(pick.shares[0].core_milli, 1000);
        assert_int_equal(pick.shares[1].mem_mib, V100_MIB);
        pairs[g0 < g1 ? g0 : g1][g0 < g1 ? g1 : g0]++;
    }
    for (int a = 0; a < 5; a++) {
        for (int b = a + 1; b < 5; b++) {
            if (a == 1 || b == 1)
                assert_int_equal(pairs[a][b], 0);
            else
                assert_in_range(pairs[a][b], 400, 600);
        }
    }
    bp = new_placer(EGPU_POLICY_BINPACK, EGPU_POLICY_BINPACK, 77, NULL, false);
    assert_true(egpu_placer_can_host(bp, c, m, &two, &pick, NULL, 0));
    assert_int_equal(pick.nshares, 2);
    assert_int_equal(pick.shares[0].gpu, 0);
    assert_int_equal(pick.shares[1].gpu, 2);

    egpu_placer_free(p);
    egpu_placer_free(bp);
    egpu_cluster_free(c);
    assert_int_equal(egpu_alloc_live(), live);
}

/* can_host's one-line reasons, one per way a node can fail. */
static void test_filter_reasons(void **state)
{
    long live = egpu_alloc_live();
    struct egpu_cluster *c = new_cluster();
    struct egpu_node *small = tu_add_node(c, "small", 4000, 8192, 2, V100, V100_MIB);
    struct egpu_node *t4 = tu_add_node(c, "t4", 16000, 65536, 2, "T4", 15360);
    struct egpu_node *cpu = tu_add_node(c, "cpu", 16000, 65536, 0, NULL, 0);
    struct egpu_node *busy = tu_add_node(c, "busy", 16000, 65536, 2, V100, V100_MIB);
    struct egpu_node *part = tu_add_node(c, "partial", 16000, 65536, 4, V100, V100_MIB);
    struct egpu_placer *p = new_placer(EGPU_POLICY_BINPACK, EGPU_POLICY_BINPACK, 1, NULL, false);
    struct egpu_pick pick = {0};
    struct egpu_pod_request r;
    uint64_t mask = 0;
    char why[256];

    (void)state;
    tu_use_card(c, busy, "busy-80", 0, 80);
    tu_use_card(c, busy, "busy-50", 1, 50);
    tu_use_card(c, part, "part-0", 0, 10);
    tu_use_card(c, part, "part-1", 1, 10);

    /* 8000m on a 4000m node. */
    r = tu_request(8000, 0, 30, 0);
    why[0] = '\0';
    assert_false(egpu_placer_can_host(p, c, small, &r, &pick, why, sizeof(why)));
    assert_has(why, "insufficient cpu");
    assert_has(why, "requested 8000m");
    assert_has(why, "free 4000m");

    /* 16384 MiB on an 8192 MiB node. */
    r = tu_request(1000, 16384, 30, 0);
    why[0] = '\0';
    assert_false(egpu_placer_can_host(p, c, small, &r, &pick, why, sizeof(why)));
    assert_has(why, "insufficient memory");
    assert_has(why, "16384");
    assert_has(why, "8192");

    /* A pod restricted to V100M16 on a T4 node; the V100 node is fine. */
    r = tu_request(1000, 0, 30, 0);
    assert_int_equal(egpu_cluster_model_mask(c, V100, &mask, NULL), 0);
    assert_true(mask != 0);
    r.model_mask = mask;
    why[0] = '\0';
    assert_false(egpu_placer_can_host(p, c, t4, &r, &pick, why, sizeof(why)));
    assert_has(why, "GPU model T4 not allowed (pod allows " V100 ")");
    assert_true(egpu_placer_can_host(p, c, small, &r, &pick, why, sizeof(why)));
    r.model_mask = 0;
    assert_true(egpu_placer_can_host(p, c, t4, &r, &pick, why, sizeof(why)));

    /* A GPU pod on a node without cards; a CPU-only pod fits there. */
    why[0] = '\0';
    assert_false(egpu_placer_can_host(p, c, cpu, &r, &pick, why, sizeof(why)));
    assert_has(why, "no GPUs");
    r = tu_request(1000, 1024, 0, 0);
    pick.nshares = 7;
    assert_true(egpu_placer_can_host(p, c, cpu, &r, &pick, why, sizeof(why)));
    assert_int_equal(pick.nshares, 0);

    /* 60% on cards with 20% and 50% free: names the container, in percent. */
    r = tu_request(1000, 0, 60, 0);
    why[0] = '\0';
    assert_false(egpu_placer_can_host(p, c, busy, &r, &pick, why, sizeof(why)));
    assert_has(why, "container 0");
    assert_has(why, "60%");
    assert_has(why, "50%");
    /* 25% fits the compute but not 20000 MiB on a 16384 MiB card. */
    r = tu_request(1000, 0, 25, 20000);
    why[0] = '\0';
    assert_false(egpu_placer_can_host(p, c, busy, &r, &pick, why, sizeof(why)));
    assert_has(why, "container 0");
    assert_has(why, "25%");
    assert_has(why, "20000 MiB");

    /* 3 whole cards where 2 are free. */
    r = tu_request(1000, 0, 300, 0);
    why[0] = '\0';
    assert_false(egpu_placer_can_host(p, c, part, &r, &pick, why, sizeof(why)));
    assert_has(why, "3 whole free cards");
    assert_has(why, "node has 2");

    /* can_host true: the pick (cards 2 and 3) is one assign accepts; then
     * no whole card is left. */
    r = tu_request(1000, 0, 200, 0);
    memset(&pick, 0, sizeof(pick));
    assert_true(egpu_placer_can_host(p, c, part, &r, &pick, why, sizeof(why)));
    assert_int_equal(pick.nshares, 2);
    assert_int_equal(pick.shares[0].gpu, 2);
    assert_int_equal(pick.shares[1].gpu, 3);
    assert_int_equal(egpu_cluster_assign(c, "fits", part, &r, &pick, NULL), 0);
    assert_int_equal(part->used_cpu_milli, 1000);
    assert_int_equal(part->gpus[2].used_core_milli, 1000);
    assert_int_equal(part->gpus[3].used_core_milli, 1000);
    why[0] = '\0';
    assert_false(egpu_placer_can_host(p, c, part, &r, &pick, why, sizeof(why)));
    assert_has(why, "node has 0");
    /* Without a reason buffer or a pick the answer is the same. */
    assert_false(egpu_placer_can_host(p, c, part, &r, NULL, NULL, 0));
    r = tu_request(1000, 0, 30, 0);
    assert_true(egpu_placer_can_host(p, c, busy, &r, NULL, NULL, 0));

    egpu_placer_free(p);
    egpu_cluster_free(c);
    assert_int_equal(egpu_alloc_live(), live);
}

/* Whole-card containers take only fully free cards, the lowest indices first,
 * for every policy but random. 4 cards, card 1 holds a 10% share. */
static void test_whole_card_requests(void **state)
{
    static const struct egpu_typical_pod pods[] = {
        {.cpu_milli = 0, .gpu_milli = 500, .ncards = 1, .weight = 1.0},
    };
    static const enum egpu_policy_kind kinds[] = {EGPU_POLICY_BINPACK, EGPU_POLICY_SPREAD,
                                                  EGPU_POLICY_BESTFIT, EGPU_POLICY_FGD};
    long live = egpu_alloc_live();
    struct egpu_cluster *c = new_cluster();
    struct egpu_node *w4 = tu_add_node(c, "w4", 16000, 65536, 4, V100, V100_MIB);
    struct egpu_node *one = tu_add_node(c, "one", 16000, 65536, 2, V100, V100_MIB);
    struct egpu_pod_request two = tu_request(1000, 0, 200, 0);
    struct egpu_pod_request four = tu_request(1000, 0, 400, 0);
    struct egpu_pod_request whole = tu_request(1000, 0, 100, 8192);
    struct egpu_workload w = {0};
    struct egpu_pick pick = {0};
    char why[256];

    (void)state;
    make_workload(&w, pods, 1);
    tu_use_card(c, w4, "w4-10", 1, 10);
    tu_use_card(c, one, "one-50", 0, 50);
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        struct egpu_placer *p = new_placer(kinds[k], kinds[k], 1, &w, false);

        /* 200%: cards 0 and 2, whole memory each. */
        memset(&pick, 0, sizeof(pick));
        assert_true(egpu_placer_can_host(p, c, w4, &two, &pick, NULL, 0));
        assert_int_equal(pick.nshares, 2);
        for (uint32_t i = 0; i < 2; i++) {
            assert_int_equal(pick.shares[i].container, 0);
            assert_int_equal(pick.shares[i].core_milli, 1000);
            assert_int_equal(pick.shares[i].mem_mib, V100_MIB);
        }
        assert_int_equal(pick.shares[0].gpu, 0);
        assert_int_equal(pick.shares[1].gpu, 2);
        /* 400%: only 3 cards are free. */
        assert_false(egpu_placer_can_host(p, c, w4, &four, &pick, NULL, 0));
        /* 2 cards on a node with one free card fails; 1 card takes card 1. */
        why[0] = '\0';
        assert_false(egpu_placer_can_host(p, c, one, &two, &pick, why, sizeof(why)));
        assert_has(why, "2 whole free cards");
        assert_has(why, "node has 1");
        assert_true(egpu_placer_can_host(p, c, one, &whole, &pick, NULL, 0));
        assert_int_equal(pick.nshares, 1);
        assert_int_equal(pick.shares[0].gpu, 1);
        assert_int_equal(pick.shares[0].mem_mib, V100_MIB);
        egpu_placer_free(p);
    }
    /* The binpack pick for 200% is accepted by assign. */
    {
        struct egpu_placer *p =
            new_placer(EGPU_POLICY_BINPACK, EGPU_POLICY_BINPACK, 1, NULL, false);

        assert_true(egpu_placer_can_host(p, c, w4, &two, &pick, NULL, 0));
        assert_int_equal(egpu_cluster_assign(c, "two", w4, &two, &pick, NULL), 0);
        assert_int_equal(w4->gpus[0].used_mem_mib, V100_MIB);
        assert_int_equal(w4->gpus[2].used_core_milli, 1000);
        /* Now only card 3 is free. */
        assert_false(egpu_placer_can_host(p, c, w4, &two, &pick, NULL, 0));
        assert_true(egpu_placer_can_host(p, c, w4, &whole, &pick, NULL, 0));
        assert_int_equal(pick.shares[0].gpu, 3);
        egpu_placer_free(p);
    }

    egpu_workload_free(&w);
    egpu_cluster_free(c);
    assert_int_equal(egpu_alloc_live(), live);
}

/* Containers of one pod are placed one after another on the node's cards:
 *   50% + 50%, binpack: card 0 (tie: lower index), then card 0 again (0 left
 *     beats card 1's 500): one card. Spread: card 0, then card 1 (1000 free).
 *   60% + 60%: the second does not fit card 0's 400 -> card 1. On one card
 *     it fails, naming container 1.
 *   50% + 100%: the share on card 0, the whole card must be card 1 (card 0
 *     is now held); on one card it fails. 100% + 50%: card 0 whole, then the
 *     share on card 1. */
static void test_multi_container_pods(void **state)
{
    long live = egpu_alloc_live();
    struct egpu_cluster *c = new_cluster();
    struct egpu_node *dual = tu_add_node(c, "dual", 16000, 65536, 2, V100, V100_MIB);
    struct egpu_node *single = tu_add_node(c, "single", 16000, 65536, 1, V100, V100_MIB);
    struct egpu_pod_request halves = two_containers(1000, 50, 50);
    struct egpu_pod_request sixties = two_containers(1000, 60, 60);
    struct egpu_pod_request share_whole = two_containers(1000, 50, 100);
    struct egpu_pod_request whole_share = two_containers(1000, 100, 50);
    struct egpu_placer *bp = new_placer(EGPU_POLICY_BINPACK, EGPU_POLICY_BINPACK, 1, NULL, false);
    struct egpu_placer *sp = new_placer(EGPU_POLICY_SPREAD, EGPU_POLICY_SPREAD, 1, NULL, false);
    struct egpu_pick pick = {0};
    char why[256];

    (void)state;
    assert_true(egpu_placer_can_host(bp, c, dual, &halves, &pick, NULL, 0));
    assert_int_equal(pick.nshares, 2);
    assert_int_equal(pick.shares[0].container, 0);
    assert_int_equal(pick.shares[0].gpu, 0);
    assert_int_equal(pick.shares[1].container, 1);
    assert_int_equal(pick.shares[1].gpu, 0);
    assert_true(egpu_placer_can_host(bp, c, single, &halves, &pick, NULL, 0));
    assert_int_equal(pick.nshares, 2);
    assert_true(egpu_placer_can_host(sp, c, dual, &halves, &pick, NULL, 0));
    assert_int_equal(pick.shares[0].gpu, 0);
    assert_int_equal(pick.shares[1].gpu, 1);

    assert_true(egpu_placer_can_host(bp, c, dual, &sixties, &pick, NULL, 0));
    assert_int_equal(pick.nshares, 2);
    assert_int_equal(pick.shares[0].gpu, 0);
    assert_int_equal(pick.shares[1].gpu, 1);
    why[0] = '\0';
    assert_false(egpu_placer_can_host(bp, c, single, &sixties, &pick, why, sizeof(why)));
    assert_has(why, "container 1");
    assert_has(why, "60%");
    assert_has(why, "40%");

    assert_true(egpu_placer_can_host(bp, c, dual, &share_whole, &pick, NULL, 0));
    assert_int_equal(pick.nshares, 2);
    assert_int_equal(pick.shares[0].gpu, 0);
    assert_int_equal(pick.shares[1].container, 1);
    assert_int_equal(pick.shares[1].gpu, 1);
    assert_int_equal(pick.shares[1].core_milli, 1000);
    assert_false(egpu_placer_can_host(bp, c, single, &share_whole, &pick, NULL, 0));
    assert_true(egpu_placer_can_host(bp, c, dual, &whole_share, &pick, NULL, 0));
    assert_int_equal(pick.shares[0].gpu, 0);
    assert_int_equal(pick.shares[1].gpu, 1);
    assert_false(egpu_placer_can_host(bp, c, single, &whole_share, &pick, NULL, 0));

    /* The two 50% containers commit onto one card, which is then full. */
    assert_true(egpu_placer_can_host(bp, c, dual, &halves, &pick, NULL, 0));
    assert_int_equal(egpu_cluster_assign(c, "halves", dual, &halves, &pick, NULL), 0);
    assert_int_equal(dual->gpus[0].used_core_milli, 1000);
    assert_int_equal(dual->gpus[0].nshares, 2);
    assert_int_equal(dual->gpus[1].used_core_milli, 0);
    assert_true(egpu_placer_can_host(bp, c, dual, &sixties, &pick, why, sizeof(why)) == false);

    egpu_placer_free(bp);
    egpu_placer_free(sp);
    egpu_cluster_free(c);
    assert_int_equal(egpu_alloc_live(), live);
}

/* egpu_placer_score: 0 with a score on a node that fits, EGPU_ENOFIT where
 * it cannot, for every policy; its pick is can_host's. */
static void test_score_enofit(void **state)
{
    static const struct egpu_typical_pod pods[] = {
        {.cpu_milli = 0, .gpu_milli = 500, .ncards = 1, .weight = 1.0},
    };
    long live = egpu_alloc_live();
    struct egpu_cluster *c = new_cluster();
    struct egpu_node *ok = tu_add_node(c, "ok", 8000, 32768, 2, V100, V100_MIB);
    struct egpu_node *full = tu_add_node(c, "full", 8000, 32768, 1, V100, V100_MIB);
    struct egpu_node *nogpu = tu_add_node(c, "nogpu", 64000, 262144, 0, NULL, 0);
    struct egpu_pod_request r = tu_request(1000, 1024, 50, 0);
    struct egpu_workload w = {0};

    (void)state;
    make_workload(&w, pods, 1);
    tu_use_card(c, full, "full-60", 0, 60);
    for (int k = EGPU_POLICY_BINPACK; k <= EGPU_POLICY_FGD; k++) {
        enum egpu_policy_kind kind = (enum egpu_policy_kind)k;
        struct egpu_placer *p = new_placer(kind, kind, 4, &w, false);
        struct egpu_pick a = {0}, b = {0};
        double s = -1.0;

        assert_int_equal(egpu_placer_score(p, c, full, &r, &s, &a), EGPU_ENOFIT);
        assert_int_equal(egpu_placer_score(p, c, nogpu, &r, &s, NULL), EGPU_ENOFIT);
        assert_int_equal(egpu_placer_score(p, c, ok, &r, &s, &a), 0);
        assert_int_equal(a.nshares, 1);
        if (kind != EGPU_POLICY_RANDOM) {
            assert_true(egpu_placer_can_host(p, c, ok, &r, &b, NULL, 0));
            assert_same_pick(&a, &b);
        }
        egpu_placer_free(p);
    }

    egpu_workload_free(&w);
    egpu_cluster_free(c);
    assert_int_equal(egpu_alloc_live(), live);
}

static void test_schedule_enofit(void **state)
{
    long live = egpu_alloc_live();
    struct egpu_cluster *empty = new_cluster();
    struct egpu_cluster *c = new_cluster();
    struct egpu_pod_request eight = tu_request(1000, 0, 800, 0);
    struct egpu_pod_request share = tu_request(1000, 0, 50, 0);
    static struct egpu_node dummy;
    struct egpu_node *sentinel = &dummy;
    struct egpu_node *n1, *n2;
    struct egpu_pick pick = {0};

    (void)state;
    n1 = tu_add_node(c, "n1", 8000, 32768, 4, V100, V100_MIB);
    n2 = tu_add_node(c, "n2", 8000, 32768, 4, V100, V100_MIB);
    for (int k = EGPU_POLICY_BINPACK; k <= EGPU_POLICY_BESTFIT; k++) {
        enum egpu_policy_kind kind = (enum egpu_policy_kind)k;
        struct egpu_placer *p = new_placer(kind, kind, 2, NULL, false);
        struct egpu_node *n = sentinel;

        assert_int_equal(egpu_placer_schedule(p, c, &eight, &n, &pick), EGPU_ENOFIT);
        assert_ptr_equal(n, sentinel);
        assert_int_equal(egpu_placer_schedule(p, empty, &share, &n, &pick), EGPU_ENOFIT);
        assert_ptr_equal(n, sentinel);
        assert_int_equal(egpu_placer_schedule(p, c, &share, &n, &pick), 0);
        assert_true(n == n1 || n == n2);
        egpu_placer_free(p);
    }
    /* Random too. */
    {
        struct egpu_placer *p = new_placer(EGPU_POLICY_RANDOM, EGPU_POLICY_RANDOM, 2, NULL, false);
        struct egpu_node *n = sentinel;

        assert_int_equal(egpu_placer_schedule(p, c, &eight, &n, &pick), EGPU_ENOFIT);
        assert_ptr_equal(n, sentinel);
        egpu_placer_free(p);
    }

    egpu_cluster_free(c);
    egpu_cluster_free(empty);
    assert_int_equal(egpu_alloc_live(), live);
}

/* Equal scores go to the node with the smaller egpu_hash_str(name, seed).
 * Identical empty nodes score alike under every deterministic policy; over
 * 64 seeds both orders must occur. */
static void test_schedule_tie_break_by_seed(void **state)
{
    static const struct egpu_typical_pod pods[] = {
        {.cpu_milli = 0, .gpu_milli = 500, .ncards = 1, .weight = 1.0},
    };
    static const enum egpu_policy_kind kinds[] = {EGPU_POLICY_BINPACK, EGPU_POLICY_SPREAD,
                                                  EGPU_POLICY_BESTFIT, EGPU_POLICY_FGD};
    static const char *const names[] = {"node-a", "node-b", "node-c"};
    long live = egpu_alloc_live();
    struct egpu_cluster *c = new_cluster();
    struct egpu_pod_request r = tu_request(1000, 1024, 30, 0);
    struct egpu_workload w = {0};
    int wins[3] = {0};

    (void)state;
    make_workload(&w, pods, 1);
    /* Added in reverse order, so the slot order is not the answer. */
    for (int i = 2; i >= 0; i--)
        tu_add_node(c, names[i], 8000, 32768, 2, V100, V100_MIB);
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        for (uint64_t seed = 0; seed < 64; seed++) {
            struct egpu_placer *p = new_placer(kinds[k], kinds[k], seed, &w, false);
            struct egpu_node *n = NULL, *again = NULL;
            struct egpu_pick pick = {0};
            int want = 0;

            for (int i = 1; i < 3; i++) {
                if (egpu_hash_str(names[i], seed) < egpu_hash_str(names[want], seed))
                    want = i;
            }
            assert_int_equal(egpu_placer_schedule(p, c, &r, &n, &pick), 0);
            assert_string_equal(n->name, names[want]);
            assert_int_equal(egpu_placer_schedule(p, c, &r, &again, &pick), 0);
            assert_ptr_equal(again, n);
            wins[want]++;
            egpu_placer_free(p);
        }
    }
    for (int i = 0; i < 3; i++)
        assert_true(wins[i] > 0);

    egpu_workload_free(&w);
    egpu_cluster_free(c);
    assert_int_equal(egpu_alloc_live(), live);
}

/* ------------------------------------------------------------------------ */
/* Memo: the same choices with and without the per-node cache.             */

/* 20 nodes: 1, 2, 4, 8 or 0 cards, T4 or V100M16, 8..32 cores. */
static void build_mixed_cluster(struct egpu_cluster *c)
{
    static const uint32_t cards[] = {1, 2, 4, 8, 0};
    char name[32];

    for (int i = 0; i < 20; i++) {
        bool t4 = i % 3 == 0;

        snprintf(name, sizeof(name), "mix-%02d", i);
        tu_add_node(c, name, 8000 + 8000 * (i % 4), 32768 * (1 + i % 3), cards[i % 5],
                    t4 ? "T4" : V100, t4 ? 15360 : V100_MIB);
    }
}

struct shape {
    int64_t cpu_milli, mem_mib, pct, gpu_mem_mib;
    bool v100_only;
    int64_t second_pct; /* a second container, 0 = none */
};

static const struct shape shapes[] = {
    {1000, 2048, 0, 0, false, 0},        {2000, 4096, 10, 0, false, 0},
    {4000, 8192, 25, 2048, false, 0},    {2000, 4096, 50, 0, false, 0},
    {8000, 16384, 70, 8192, false, 0},   {4000, 8192, 100, 0, false, 0},
    {8000, 16384, 200, 0, false, 0},     {16000, 32768, 400, 0, false, 0},
    {1000, 1024, 30, 0, true, 0},        {2000, 2048, 50, 0, false, 50},
    {12000, 8192, 100, 15000, false, 0}, {500, 512, 5, 0, false, 0},
};

static struct egpu_pod_request shape_request(const struct shape *s, uint64_t v100_mask)
{
    struct egpu_pod_request r = tu_request(s->cpu_milli, s->mem_mib, s->pct, s->gpu_mem_mib);

    if (s->v100_only)
        r.model_mask = v100_mask;
    if (s->second_pct) {
        r.ncontainers = 2;
        assert_int_equal(egpu_container_request_set(&r.containers[1], s->second_pct, 0, NULL), 0);
    }
    return r;
}

static void add_late_node(struct egpu_cluster *c)
{
    tu_add_node(c, "late", 48000, 196608, 8, V100, V100_MIB);
}

/* Pods still allocated in c (a node removal releases its pods). */
static size_t prune_live(const struct egpu_cluster *c, int *live_pods, size_t n)
{
    char pod[16];
    size_t kept = 0;

    for (size_t i = 0; i < n; i++) {
        snprintf(pod, sizeof(pod), "p%d", live_pods[i]);
        if (egpu_cluster_assignment(c, pod) != NULL)
            live_pods[kept++] = live_pods[i];
    }
    return kept;
}

/* egpu_placer_score_slots on pm over every node of c1, last slot first,
 * with a name that is no node in the middle, agrees with pp's plain score of
 * each node of c2; c1's packed generations match its nodes'. Asked before
 * anything else for r, so memo misses and hits both go through it. */
static void compare_slot_scores(struct egpu_placer *pm, const struct egpu_cluster *c1,
                                struct egpu_placer *pp, const struct egpu_cluster *c2,
                                const struct egpu_pod_request *r)
{
    size_t n = c1->nnodes + 1, none = c1->nnodes / 2;
    uint32_t *slots = test_malloc(n * sizeof(*slots));
    struct egpu_verdict *v = test_malloc(n * sizeof(*v));

    for (size_t i = 0, k = 0; i < n; i++)
        slots[i] = i == none ? EGPU_NO_SLOT : (uint32_t)(c1->nnodes - 1 - k++);
    egpu_placer_score_slots(pm, c1, r, slots, n, v);
    for (size_t i = 0; i < n; i++) {
        double s = 0.0;
        int rc;

        if (slots[i] == EGPU_NO_SLOT) {
            assert_false(v[i].ok);
            continue;
        }
        assert_true(c1->gens[slots[i]] == c1->nodes[slots[i]]->gen);
        rc = egpu_placer_score(pp, c2, c2->nodes[slots[i]], r, &s, NULL);
        assert_int_equal(v[i].ok, rc == 0);
        assert_true(v[i].score == (rc == 0 ? s : 0.0));
    }
    test_free(slots);
    test_free(v);
}

/* Every node's score and pick agree between the two placers. */
static void compare_all_scores(struct egpu_placer *pm, const struct egpu_cluster *c1,
                               struct egpu_placer *pp, const struct egpu_cluster *c2,
                               const struct egpu_pod_request *r)
{
    assert_int_equal(c1->nnodes, c2->nnodes);
    compare_slot_scores(pm, c1, pp, c2, r);
    for (size_t i = 0; i < c1->nnodes; i++) {
        struct egpu_pick a = {0}, b = {0};
        double sa = 0.0, sb = 0.0;
        int ra = egpu_placer_score(pm, c1, c1->nodes[i], r, &sa, &a);
        int rb = egpu_placer_score(pp, c2, c2->nodes[i], r, &sb, &b);

        assert_string_equal(c1->nodes[i]->name, c2->nodes[i]->name);
        assert_int_equal(ra, rb);
        assert_int_equal(egpu_placer_can_host(pm, c1, c1->nodes[i], r, NULL, NULL, 0),
                         egpu_placer_can_host(pp, c2, c2->nodes[i], r, NULL, NULL, 0));
        if (ra == 0) {
            assert_true(sa == sb);
            assert_same_pick(&a, &b);
        }
    }
}

/* 500 schedule + assign steps (with releases) on two identically built
 * clusters, one placer with the memo and one without: every step must give
 * the same result, node and pick. At step 320 node mix-05 (neither the
 * largest CPU nor the most cards) is removed, moving the last node into its
 * slot. With grow, a node larger than any other ("late": 48000m, 8 cards)
 * arrives at step 200 and leaves at step 420, changing best-fit's
 * normalisation both times, so the placer must drop its cached results. */
static void memo_run(enum egpu_policy_kind kind, const struct egpu_workload *w, bool grow,
                     size_t memo_bytes, bool warm)
{
    struct egpu_cluster *c1 = new_cluster(), *c2 = new_cluster();
    struct egpu_placer *pm = new_placer_sized(kind, kind, 11, w, true, memo_bytes);
    struct egpu_placer *pp = new_placer(kind, kind, 11, w, false);
    uint64_t mask1 = 0, mask2 = 0;
    int live_pods[500];
    size_t nlive = 0;
    int placed = 0, failed = 0;
    struct egpu_rng rng;
    char pod[16];

    build_mixed_cluster(c1);
    build_mixed_cluster(c2);
    assert_int_equal(egpu_cluster_model_mask(c1, V100, &mask1, NULL), 0);
    assert_int_equal(egpu_cluster_model_mask(c2, V100, &mask2, NULL), 0);
    assert_true(mask1 == mask2);
    egpu_rng_seed(&rng, 2024);
    for (int step = 0; step < 500; step++) {
        const struct shape *s = &shapes[egpu_rng_below(&rng, sizeof(shapes) / sizeof(shapes[0]))];
        struct egpu_pod_request r = shape_request(s, mask1);
        struct egpu_node *n1 = NULL, *n2 = NULL;
        struct egpu_pick k1 = {0}, k2 = {0};
        int rc1, rc2;

        if (grow && step == 200) {
            add_late_node(c1);
            add_late_node(c2);
        }
        if (step == 320 || (grow && step == 420)) {
            const char *gone = step == 320 ? "mix-05" : "late";

            assert_int_equal(egpu_cluster_remove_node(c1, gone), 0);
            assert_int_equal(egpu_cluster_remove_node(c2, gone), 0);
            nlive = prune_live(c1, live_pods, nlive);
        }
        if (warm && step % 3 == 0) {
            /* The memo warm judges the shape ahead, in two ranges (the
             * second past the last slot); once done, nothing is left. A
             * shape of two GPU containers is not memoised: nothing made. */
            const struct shape *o =
                &shapes[egpu_rng_below(&rng, sizeof(shapes) / sizeof(shapes[0]))];
            struct egpu_pod_request other = shape_request(o, mask1), two = other;
            uint32_t half = (uint32_t)(c1->nnodes / 2);

            (void)egpu_placer_warm(pm, c1, &other, 0, half);
            (void)egpu_placer_warm(pm, c1, &r, half, 1000);
            (void)egpu_placer_warm(pm, c1, &r, 0, half);
            assert_int_equal(egpu_placer_warm(pm, c1, &r, 0, 1000), 0);
            two.ncontainers = 2;
            two.containers[1] = two.containers[0];
            assert_int_equal(egpu_placer_warm(pm, c1, &two, 0, 1000), 0);
        }
        if (step % 25 == 0 || step == 321 || step == 421)
            compare_all_scores(pm, c1, pp, c2, &r);
        rc1 = egpu_placer_schedule(pm, c1, &r, &n1, &k1);
        rc2 = egpu_placer_schedule(pp, c2, &r, &n2, &k2);
        if (rc1 != rc2)
            fail_msg("%s step %d: memo rc %d, plain rc %d", egpu_policy_name(kind), step, rc1, rc2);
        if (rc1 == 0) {
            if (strcmp(n1->name, n2->name) != 0)
                fail_msg("%s step %d: memo chose %s, plain %s", egpu_policy_name(kind), step,
                         n1->name, n2->name);
            assert_same_pick(&k1, &k2);
            snprintf(pod, sizeof(pod), "p%d", step);
            assert_int_equal(egpu_cluster_assign(c1, pod, n1, &r, &k1, NULL), 0);
            assert_int_equal(egpu_cluster_assign(c2, pod, n2, &r, &k2, NULL), 0);
            live_pods[nlive++] = step;
            placed++;
        } else {
            assert_int_equal(rc1, EGPU_ENOFIT);
            failed++;
        }
        if (nlive > 0 && egpu_rng_below(&rng, 3) == 0) {
            size_t k = (size_t)egpu_rng_below(&rng, nlive);

            snprintf(pod, sizeof(pod), "p%d", live_pods[k]);
            assert_int_equal(egpu_cluster_release(c1, pod, NULL), 0);
            assert_int_equal(egpu_cluster_release(c2, pod, NULL), 0);
            live_pods[k] = live_pods[--nlive];
        }
    }
    /* The run filled the cluster: both outcomes were compared many times. */
    if (placed < 150 || failed < 20)
        fail_msg("%s: %d placed, %d failed: the sequence does not exercise the memo",
                 egpu_policy_name(kind), placed, failed);
    assert_true(c1->used_core_milli == c2->used_core_milli);
    assert_true(egpu_frag_cluster(c1, w) == egpu_frag_cluster(c2, w));

    egpu_placer_free(pm);
    egpu_placer_free(pp);
    egpu_cluster_free(c1);
    egpu_cluster_free(c2);
}

/* FGD's target workload for the memo runs. */
static const struct egpu_typical_pod memo_pods[] = {
    {.cpu_milli = 0, .gpu_milli = 500, .ncards = 1, .weight = 0.4},
    {.cpu_milli = 2000, .gpu_milli = 1000, .ncards = 1, .weight = 0.3},
    {.cpu_milli = 4000, .gpu_milli = 1000, .ncards = 2, .weight = 0.2},
    {.cpu_milli = 1000, .gpu_milli = 0, .ncards = 0, .weight = 0.1},
};
static const enum egpu_policy_kind memo_kinds[] = {
    EGPU_POLICY_BINPACK,      EGPU_POLICY_BESTFIT,          EGPU_POLICY_FGD,
    EGPU_POLICY_SPREAD,       EGPU_POLICY_FGD_CPU_TIGHT,    EGPU_POLICY_FGD_CPU_FILL,
    EGPU_POLICY_FGD_CPU_LOOK, EGPU_POLICY_FGD_CPU_FILL_LOOK};

static void test_memo_matches_plain(void **state)
{
    long live = egpu_alloc_live();
    struct egpu_workload w = {0};

    (void)state;
    make_workload(&w, memo_pods, sizeof(memo_pods) / sizeof(memo_pods[0]));
    /* With the default size every shape is kept; with 1 byte the memo keeps
     * its least 8 shapes of the 11 the run asks, so shapes are dropped and
     * made again all along. */
    for (size_t k = 0; k < sizeof(memo_kinds) / sizeof(memo_kinds[0]); k++) {
        memo_run(memo_kinds[k], &w, false, 0, false);
        memo_run(memo_kinds[k], &w, false, 1, false);
        /* Warmed ahead (egpu_placer_warm): still the plain placer's answers,
         * with every shape kept and with shapes dropped between warm and use. */
        memo_run(memo_kinds[k], &w, false, 0, true);
        memo_run(memo_kinds[k], &w, false, 1, true);
    }
    egpu_workload_free(&w);
    assert_int_equal(egpu_alloc_live(), live);
}

/* A memo is for one cluster, found by the cluster's id. Node generations
 * count per cluster, so a cluster made where a freed one was (the same
 * address: glibc hands the freed block back) has nodes with the very same
 * generations as the old one's: its answers must still be its own. Node n
 * has one card; on the first cluster it has a CPU pod, on the second the
 * same number of changes (so the same generation) left 10% of its card. */
static void test_memo_new_cluster_same_generations(void **state)
{
    long live = egpu_alloc_live();
    struct egpu_placer *p = new_placer(EGPU_POLICY_BINPACK, EGPU_POLICY_BINPACK, 0, NULL, true);
    struct egpu_pod_request r = tu_request(1000, 1024, 50, 0);
    struct egpu_cluster *c = new_cluster();
    struct egpu_node *n = tu_add_node(c, "n", 8000, 32768, 1, V100, V100_MIB);
    uint32_t slot = 0;
    struct egpu_verdict v;
    uint64_t gen;

    (void)state;
    use_cpu(c, n, "cpu", 1000, 1024);
    gen = n->gen;
    egpu_placer_score_slots(p, c, &r, &slot, 1, &v);
    assert_true(v.ok);
    egpu_cluster_free(c);
    c = new_cluster();
    n = tu_add_node(c, "n", 8000, 32768, 1, V100, V100_MIB);
    use_share(c, n, "gpu", 0, 90, 0);
    assert_true(n->gen == gen);
    egpu_placer_score_slots(p, c, &r, &slot, 1, &v);
    assert_false(v.ok);
    assert_false(egpu_placer_can_host(p, c, n, &r, NULL, NULL, 0));
    egpu_placer_free(p);
    egpu_cluster_free(c);
    assert_int_equal(egpu_alloc_live(), live);
}

/* The same with a node that changes the cluster's largest CPU and card
 * count, then leaves again. */
static void test_memo_after_cluster_maxima_change(void **state)
{
    long live = egpu_alloc_live();
    struct egpu_workload w = {0};

    (void)state;
    make_workload(&w, memo_pods, sizeof(memo_pods) / sizeof(memo_pods[0]));
    for (size_t k = 0; k < sizeof(memo_kinds) / sizeof(memo_kinds[0]); k++)
        memo_run(memo_kinds[k], &w, true, 0, k % 2 == 0);
    egpu_workload_free(&w);
    assert_int_equal(egpu_alloc_live(), live);
}

/* ---- Topology: multi-card containers on the best connected cards ---- */

/* Two NVLink islands of 4, interleaved so that index order alone would
 * cross them: {0,2,4,6} and {1,3,5,7}; across islands the system. */
static uint8_t islands_interleaved(uint32_t a, uint32_t b)
{
    return a % 2 == b % 2 ? EGPU_TOPO_NVLINK : EGPU_TOPO_SYSTEM;
}

/* PCIe only: 0-1 and 2-3 behind one switch each, the rest one host bridge. */
static uint8_t pcie_pairs(uint32_t a, uint32_t b)
{
    return a / 2 == b / 2 ? EGPU_TOPO_SINGLE : EGPU_TOPO_HOSTBRIDGE;
}

/* Every pair alike (what a node says when it has one PCIe tree). */
static uint8_t all_system(uint32_t a, uint32_t b)
{
    (void)a;
    (void)b;
    return EGPU_TOPO_SYSTEM;
}

/* Add node name with ngpus V100s whose spec.topology says fn for every pair
 * (each card lists all its peers). */
static struct egpu_node *add_topo_node(struct egpu_cluster *c, const char *name, uint32_t ngpus,
                                       uint8_t (*fn)(uint32_t a, uint32_t b))
{
    static struct egpu_topo_link links[EGPU_NODE_GPUS_MAX][EGPU_NODE_GPUS_MAX];
    struct egpu_gpu_spec gpus[EGPU_NODE_GPUS_MAX];
    struct egpu_node_spec spec = {
        .name = name, .cpu_milli = 64000, .mem_mib = 262144, .ngpus = ngpus, .gpus = gpus};
    struct egpu_error err = {0};

    for (uint32_t i = 0; i < ngpus; i++) {
        uint32_t n = 0;

        for (uint32_t j = 0; j < ngpus; j++) {
            if (j != i)
                links[i][n++] = (struct egpu_topo_link){.peer_index = j, .level = fn(i, j)};
        }
        gpus[i] = (struct egpu_gpu_spec){
            .index = i, .model = V100, .mem_mib = V100_MIB, .nlinks = n, .links = links[i]};
    }
    if (egpu_cluster_add_node(c, &spec, &err) != 0)
        fail_msg("add node %s: %s", name, err.msg);
    return egpu_cluster_node(c, name);
}

/* The cards of pick (positions), as a bit set. */
static uint64_t pick_cards(const struct egpu_pick *pick)
{
    uint64_t set = 0;

    for (uint32_t i = 0; i < pick->nshares; i++)
        set |= 1ULL << pick->shares[i].gpu;
    return set;
}

#define CARDS2(a, b)       ((1ULL << (a)) | (1ULL << (b)))
#define CARDS4(a, b, c, d) (CARDS2(a, b) | CARDS2(c, d))

/* 8 cards in two NVLink islands of 4, {0,2,4,6} and {1,3,5,7}, the system
 * between them. For every policy but random (whose order is a draw):
 *   4 cards: one island, the one the policy's order reaches first
 *     ({0,2,4,6}: all free cards tie, lowest index first);
 *   2 cards: an NVLink pair, {0,2} (not {0,1}, index order's);
 *   1 card: card 0, as without topology;
 *   with card 0 taken by a share: 2 cards {1,3} (index order: {1,2}); 4
 *     cards {1,3,5,7}, the only whole island left (index order: 1,2,3,4);
 *   with 0..3 taken: 2 cards {4,6} (index order: {4,5}); 4 cards: no
 *     island is whole, so {4,5,6,7} in the policy's order.
 * Random: every 2- and 4-card pick lies inside one island, over 50 seeds. */
static void test_topology_nvlink_islands(void **state)
{
    static const struct egpu_typical_pod pods[] = {
        {.cpu_milli = 0, .gpu_milli = 1000, .ncards = 2, .weight = 1.0},
    };
    static const enum egpu_policy_kind kinds[] = {EGPU_POLICY_BINPACK, EGPU_POLICY_SPREAD,
                                                  EGPU_POLICY_BESTFIT, EGPU_POLICY_FGD};
    const uint64_t island_a = CARDS4(0, 2, 4, 6), island_b = CARDS4(1, 3, 5, 7);
    long live = egpu_alloc_live();
    struct egpu_cluster *c = new_cluster();
    struct egpu_node *n = add_topo_node(c, "nv8", 8, islands_interleaved);
    struct egpu_pod_request one = tu_request(1000, 0, 100, 0);
    struct egpu_pod_request two = tu_request(1000, 0, 200, 0);
    struct egpu_pod_request four = tu_request(1000, 0, 400, 0);
    struct egpu_workload w = {0};
    struct egpu_pick pick = {0};

    (void)state;
    assert_true(n->has_topology);
    assert_int_equal(n->gpus[0].link[2], EGPU_TOPO_NVLINK);
    assert_int_equal(n->gpus[0].link[1], EGPU_TOPO_SYSTEM);
    assert_int_equal(n->gpus[0].link[0], EGPU_TOPO_UNKNOWN);
    make_workload(&w, pods, 1);
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        struct egpu_placer *p = new_placer(kinds[k], kinds[k], 1, &w, false);

        assert_true(egpu_placer_can_host(p, c, n, &four, &pick, NULL, 0));
        assert_int_equal(pick_cards(&pick), island_a);
        assert_true(egpu_placer_can_host(p, c, n, &two, &pick, NULL, 0));
        assert_int_equal(pick_cards(&pick), CARDS2(0, 2));
        assert_true(egpu_placer_can_host(p, c, n, &one, &pick, NULL, 0));
        assert_int_equal(pick_cards(&pick), 1ULL << 0);

        tu_use_card(c, n, "share-0", 0, 30);
        assert_true(egpu_placer_can_host(p, c, n, &two, &pick, NULL, 0));
        assert_int_equal(pick_cards(&pick), CARDS2(1, 3));
        assert_true(egpu_placer_can_host(p, c, n, &four, &pick, NULL, 0));
        assert_int_equal(pick_cards(&pick), island_b);

        tu_use_card(c, n, "share-1", 1, 30);
        tu_use_card(c, n, "share-2", 2, 30);
        tu_use_card(c, n, "share-3", 3, 30);
        assert_true(egpu_placer_can_host(p, c, n, &two, &pick, NULL, 0));
        assert_int_equal(pick_cards(&pick), CARDS2(4, 6));
        assert_true(egpu_placer_can_host(p, c, n, &four, &pick, NULL, 0));
        assert_int_equal(pick_cards(&pick), CARDS4(4, 5, 6, 7));
        assert_int_equal(egpu_cluster_release(c, "share-0", NULL), 0);
        assert_int_equal(egpu_cluster_release(c, "share-1", NULL), 0);
        assert_int_equal(egpu_cluster_release(c, "share-2", NULL), 0);
        assert_int_equal(egpu_cluster_release(c, "share-3", NULL), 0);
        egpu_placer_free(p);
    }
    for (uint64_t seed = 1; seed <= 50; seed++) {
        struct egpu_placer *p =
            new_placer(EGPU_POLICY_RANDOM, EGPU_POLICY_RANDOM, seed, NULL, false);
        uint64_t got;

        assert_true(egpu_placer_can_host(p, c, n, &four, &pick, NULL, 0));
        got = pick_cards(&pick);
        assert_true(got == island_a || got == island_b);
        assert_true(egpu_placer_can_host(p, c, n, &two, &pick, NULL, 0));
        got = pick_cards(&pick);
        assert_true((got & island_a) == got || (got & island_b) == got);
        egpu_placer_free(p);
    }
    egpu_workload_free(&w);
    egpu_cluster_free(c);
    assert_int_equal(egpu_alloc_live(), live);
}

/* PCIe levels rank too: 0-1 and 2-3 share a switch, the rest meet at the
 * host bridge. With card 0 taken, index order's 2-card set {1,2} crosses
 * the host bridge; {2,3} shares a switch and is taken. A 3-card container
 * can only have a host-bridge pair: the policy's order, {1,2,3}. Links
 * given by one card of a pair only count for both; two cards that
 * disagree get the farther link. */
static void test_topology_pcie_levels(void **state)
{
    long live = egpu_alloc_live();
    struct egpu_cluster *c = new_cluster();
    struct egpu_node *n = add_topo_node(c, "pcie4", 4, pcie_pairs);
    struct egpu_pod_request two = tu_request(1000, 0, 200, 0);
    struct egpu_pod_request three = tu_request(1000, 0, 300, 0);
    struct egpu_placer *p = new_placer(EGPU_POLICY_BINPACK, EGPU_POLICY_BINPACK, 1, NULL, false);
    struct egpu_pick pick = {0};

    (void)state;
    assert_true(egpu_placer_can_host(p, c, n, &two, &pick, NULL, 0));
    assert_int_equal(pick_cards(&pick), CARDS2(0, 1));
    tu_use_card(c, n, "share-0", 0, 30);
    assert_true(egpu_placer_can_host(p, c, n, &two, &pick, NULL, 0));
    assert_int_equal(pick_cards(&pick), CARDS2(2, 3));
    assert_true(egpu_placer_can_host(p, c, n, &three, &pick, NULL, 0));
    assert_int_equal(pick_cards(&pick), CARDS2(1, 2) | CARDS2(3, 3));
    {
        /* One-sided and disagreeing links. */
        const struct egpu_topo_link l0[] = {{.peer_index = 1, .level = EGPU_TOPO_NVLINK},
                                            {.peer_index = 2, .level = EGPU_TOPO_NVLINK},
                                            {.peer_index = 9, .level = EGPU_TOPO_NVLINK},
                                            {.peer_index = 0, .level = EGPU_TOPO_NVLINK}};
        const struct egpu_topo_link l2[] = {{.peer_index = 0, .level = EGPU_TOPO_SINGLE}};
        const struct egpu_topo_link bad[] = {{.peer_index = 0, .level = EGPU_TOPO_LEVELS}};
        struct egpu_gpu_spec g[3] = {
            {.index = 0, .model = V100, .mem_mib = V100_MIB, .nlinks = 4, .links = l0},
            {.index = 1, .model = V100, .mem_mib = V100_MIB},
            {.index = 2, .model = V100, .mem_mib = V100_MIB, .nlinks = 1, .links = l2}};
        struct egpu_node_spec spec = {.name = "odd", .cpu_milli = 1000, .ngpus = 3, .gpus = g};
        struct egpu_error err = {0};
        struct egpu_node *o;

        assert_int_equal(egpu_cluster_add_node(c, &spec, &err), 0);
        o = egpu_cluster_node(c, "odd");
        assert_int_equal(o->gpus[1].link[0], EGPU_TOPO_NVLINK);
        assert_int_equal(o->gpus[0].link[2], EGPU_TOPO_SINGLE);
        assert_int_equal(o->gpus[2].link[0], EGPU_TOPO_SINGLE);
        assert_int_equal(o->gpus[0].link[0], EGPU_TOPO_UNKNOWN);
        assert_int_equal(o->gpus[1].link[2], EGPU_TOPO_UNKNOWN);
        g[1].nlinks = 1;
        g[1].links = bad;
        spec.name = "bad";
        g[0].uuid = "bad-0";
        g[1].uuid = "bad-1";
        g[2].uuid = "bad-2";
        assert_int_equal(egpu_cluster_add_node(c, &spec, &err), -EINVAL);
        assert_has(err.msg, "link");
    }
    egpu_placer_free(p);
    egpu_cluster_free(c);
    assert_int_equal(egpu_alloc_live(), live);
}

/* A topology that ranks every pair alike changes no choice: 40 nodes of 8
 * cards, one cluster with all pairs "system" and one without topology, take
 * the same 400 random pods (shares, 1, 2, 4 and 8 cards) to the same nodes
 * and cards under every deterministic policy (random draws its whole order
 * where topology is known, so its stream differs). */
static void test_topology_uniform_changes_nothing(void **state)
{
    static const enum egpu_policy_kind kinds[] = {EGPU_POLICY_BINPACK, EGPU_POLICY_SPREAD,
                                                  EGPU_POLICY_BESTFIT, EGPU_POLICY_FGD};
    static const int64_t cores[] = {20, 50, 100, 200, 400, 800};
    long live = egpu_alloc_live();
    struct egpu_workload w = {0};

    (void)state;
    make_workload(&w, memo_pods, sizeof(memo_pods) / sizeof(memo_pods[0]));
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        struct egpu_cluster *plain = new_cluster(), *topo = new_cluster();
        struct egpu_placer *pp = new_placer(kinds[k], kinds[k], 7, &w, false);
        struct egpu_placer *pt = new_placer(kinds[k], kinds[k], 7, &w, false);
        struct egpu_rng rng;
        size_t placed = 0;

        egpu_rng_seed(&rng, 42);
        for (int i = 0; i < 40; i++) {
            char name[16];

            snprintf(name, sizeof(name), "n%02d", i);
            (void)tu_add_node(plain, name, 64000, 262144, 8, V100, V100_MIB);
            (void)add_topo_node(topo, name, 8, all_system);
        }
        for (int i = 0; i < 400; i++) {
            int64_t core = cores[egpu_rng_below(&rng, sizeof(cores) / sizeof(cores[0]))];
            struct egpu_pod_request r = tu_request(1000, 1024, core, core < 100 ? 2048 : 0);
            struct egpu_node *na = NULL, *nb = NULL;
            struct egpu_pick a = {0}, b = {0};
            char pod[16];
            int ra = egpu_placer_schedule(pp, plain, &r, &na, &a);
            int rb = egpu_placer_schedule(pt, topo, &r, &nb, &b);

            assert_int_equal(ra, rb);
            if (ra != 0)
                continue;
            assert_string_equal(na->name, nb->name);
            assert_int_equal(a.nshares, b.nshares);
            for (uint32_t s = 0; s < a.nshares; s++)
                assert_int_equal(a.shares[s].gpu, b.shares[s].gpu);
            snprintf(pod, sizeof(pod), "p%d", i);
            assert_int_equal(egpu_cluster_assign(plain, pod, na, &r, &a, NULL), 0);
            assert_int_equal(egpu_cluster_assign(topo, pod, nb, &r, &b, NULL), 0);
            placed++;
        }
        assert_true(placed > 100);
        egpu_placer_free(pp);
        egpu_placer_free(pt);
        egpu_cluster_free(plain);
        egpu_cluster_free(topo);
    }
    egpu_workload_free(&w);
    assert_int_equal(egpu_alloc_live(), live);
}

/* FGD needs a target workload, at either tier. */
/* fgd-cpu counts the GPU a node's free CPU cannot feed. Target workload:
 * one typical pod, 1 whole card with 4 cores, so rho = 1000 / 4000 = 0.25
 * milli-GPU per milli-CPU and the node feeds 1.5 rho = 0.375 per free
 * milli-CPU. Nodes a (10 cores) and b (40 cores), 2 free cards each. A pod
 * of 6 cores and no GPU:
 * - FGD: on a, 4 cores are left, the typical pod still fits, F stays 0:
 *   score floor(100 sigma(0)) = 50; on b also 50. A tie: the per-seed
 *   node order decides, and some seeds take a, where only one of the two
 *   cards can ever be fed again.
 * - fgd-cpu: on a, S = 2000 - 4000 x 0.375 = 500 after (0 before: 10000 x
 *   0.375 = 3750 >= 2000), dF' = 2 x 500 = 1000, score floor(100 /
 *   (1 + e)) = 26; on b S stays 0: 50. b for every seed.
 * Where no CPU runs short, it scores as FGD: a whole card with 4 cores on
 * b is 50 under both. */
static void test_fgd_cpu_node_choice(void **state)
{
    static const struct egpu_typical_pod pods[] = {
        {.cpu_milli = 4000, .gpu_milli = 1000, .ncards = 1, .weight = 1.0},
    };
    long live = egpu_alloc_live();
    struct egpu_cluster *c = new_cluster();
    struct egpu_node *a = tu_add_node(c, "a", 10000, 32768, 2, V100, V100_MIB);
    struct egpu_node *b = tu_add_node(c, "b", 40000, 32768, 2, V100, V100_MIB);
    struct egpu_pod_request cpu_pod = tu_request(6000, 1024, 0, 0);
    struct egpu_pod_request card = tu_request(4000, 1024, 100, 0);
    struct egpu_workload w = {0};
    struct egpu_pick pick = {0};
    bool fgd_took_a = false;

    (void)state;
    make_workload(&w, pods, 1);
    for (uint64_t seed = 1; seed <= 16; seed++) {
        struct egpu_placer *fgd = new_placer(EGPU_POLICY_FGD, EGPU_POLICY_FGD, seed, &w, false);
        struct egpu_placer *cpu =
            new_placer(EGPU_POLICY_FGD_CPU, EGPU_POLICY_FGD_CPU, seed, &w, seed % 2 == 0);
        struct egpu_node *got = NULL;

        assert_near(score_of(fgd, c, a, &cpu_pod, &pick), 50.0);
        assert_near(score_of(fgd, c, b, &cpu_pod, &pick), 50.0);
        assert_near(score_of(cpu, c, a, &cpu_pod, &pick), 26.0);
        assert_near(score_of(cpu, c, b, &cpu_pod, &pick), 50.0);
        assert_near(score_of(fgd, c, b, &card, &pick), 50.0);
        assert_near(score_of(cpu, c, b, &card, &pick), 50.0);
        assert_int_equal(egpu_placer_schedule(cpu, c, &cpu_pod, &got, &pick), 0);
        assert_ptr_equal(got, b);
        assert_int_equal(egpu_placer_schedule(fgd, c, &cpu_pod, &got, &pick), 0);
        fgd_took_a |= got == a;
        egpu_placer_free(fgd);
        egpu_placer_free(cpu);
    }
    assert_true(fgd_took_a);
    /* With the pod's CPU taken on b as well, what is left is the same
     * question one step on: b keeps 34 cores for its 2 cards, no strand. */
    use_cpu(c, b, "cpu-b", 6000, 1024);
    {
        struct egpu_placer *cpu = new_placer(EGPU_POLICY_FGD_CPU, EGPU_POLICY_FGD, 1, &w, true);

        assert_near(score_of(cpu, c, b, &cpu_pod, &pick), 50.0);
        egpu_placer_free(cpu);
    }
    egpu_workload_free(&w);
    egpu_cluster_free(c);
    assert_int_equal(egpu_alloc_live(), live);
}

/* fgd-cpu-fill's card choice, worked by hand. Workload: whole cards 0.2,
 * 470 milli 0.5, 320 milli 0.3 (no CPU: rho 1, and 63 free cores strand
 * nothing); the frequent sizes are 470 and 320, so u(f) = f minus the most
 * sums of them reach: u(530) = 60, u(680) = 40 (320 + 320), u(210) = 210.
 * Node n: 3 cards, a 470 pod on card 0 (530 free). A 320 pod:
 *   card 0 -> 210 / 1000 / 1000: F = 210 (every type fits a whole card,
 *     the 210 below each), C = 210, F' = 210 + 1.5 * 210 = 525
 *   card 1 -> 530 / 680 / 1000: F = 0.2 * 1210 = 242 (only the whole card
 *     fits a whole-card pod), C = 60 + 40, F' = 242 + 150 = 392
 * FGD's card tier takes card 0 (F 210 < 242), fgd-cpu-fill card 1, and
 * leaves card 0 for the next 470. Node scores from F before = 0.2 * 530 =
 * 106, F' before = 106 + 1.5 * 60 = 196: FGD floor(100 sigmoid(-0.104)) =
 * 47, fgd-cpu-fill floor(100 sigmoid(-0.196)) = 45. */
static void test_fgd_cpu_fill_card_choice(void **state)
{
    static const struct egpu_typical_pod pods[] = {
        {.gpu_milli = 1000, .ncards = 1, .weight = 0.2},
        {.gpu_milli = 470, .ncards = 1, .weight = 0.5},
        {.gpu_milli = 320, .ncards = 1, .weight = 0.3},
    };
    long live = egpu_alloc_live();
    struct egpu_cluster *c = new_cluster();
    struct egpu_node *n = tu_add_node(c, "n", 64000, 262144, 3, V100, V100_MIB);
    struct egpu_pod_request r = tu_request(1000, 1024, 32, 1024);
    struct egpu_workload w = {0};
    struct egpu_pick pick = {0};

    (void)state;
    make_workload(&w, pods, 3);
    use_share(c, n, "p470", 0, 47, 1024);
    for (int memo = 0; memo <= 1; memo++) {
        struct egpu_placer *fgd = new_placer(EGPU_POLICY_FGD, EGPU_POLICY_FGD, 1, &w, memo);
        struct egpu_placer *fill =
            new_placer(EGPU_POLICY_FGD_CPU_FILL, EGPU_POLICY_FGD_CPU_FILL, 1, &w, memo);

        assert_near(score_of(fgd, c, n, &r, &pick), 47.0);
        assert_int_equal(pick.nshares, 1);
        assert_int_equal(pick.shares[0].gpu, 0);
        assert_near(score_of(fill, c, n, &r, &pick), 45.0);
        assert_int_equal(pick.nshares, 1);
        assert_int_equal(pick.shares[0].gpu, 1);
        egpu_placer_free(fgd);
        egpu_placer_free(fill);
    }
    egpu_workload_free(&w);
    egpu_cluster_free(c);
    assert_int_equal(egpu_alloc_live(), live);
}

static void test_placer_new_fgd_needs_workload(void **state)
{
    long live = egpu_alloc_live();
    struct egpu_workload none = {0};
    struct egpu_placer_config cfg = {.node_policy = EGPU_POLICY_FGD,
                                     .card_policy = EGPU_POLICY_BINPACK};
    struct egpu_error err = {0};
    struct egpu_placer *p;

    (void)state;
    assert_null(egpu_placer_new(&cfg, &err));
    assert_int_equal(err.code, -EINVAL);
    assert_has(err.msg, "workload");

    memset(&err, 0, sizeof(err));
    cfg.node_policy = EGPU_POLICY_BINPACK;
    cfg.card_policy = EGPU_POLICY_FGD;
    assert_null(egpu_placer_new(&cfg, &err));
    assert_int_equal(err.code, -EINVAL);

    memset(&err, 0, sizeof(err));
    cfg.node_policy = EGPU_POLICY_FGD;
    cfg.workload = &none;
    assert_null(egpu_placer_new(&cfg, &err));
    assert_int_equal(err.code, -EINVAL);
    assert_null(egpu_placer_new(&cfg, NULL));

    /* The experimental FGD variants too, named. */
    memset(&err, 0, sizeof(err));
    cfg.node_policy = EGPU_POLICY_FGD_CPU;
    cfg.workload = NULL;
    assert_null(egpu_placer_new(&cfg, &err));
    assert_int_equal(err.code, -EINVAL);
    assert_has(err.msg, "policy fgd-cpu needs a target workload");

    /* Other policies need none. */
    memset(&err, 0, sizeof(err));
    cfg.node_policy = EGPU_POLICY_BESTFIT;
    cfg.card_policy = EGPU_POLICY_SPREAD;
    cfg.workload = NULL;
    p = egpu_placer_new(&cfg, &err);
    assert_non_null(p);
    assert_int_equal(err.code, 0);
    egpu_placer_free(p);
    egpu_placer_free(NULL);
    assert_int_equal(egpu_alloc_live(), live);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_policy_parse_and_name),
        cmocka_unit_test(test_policy_names_enumerated),
        cmocka_unit_test(test_binpack_spread_node_choice),
        cmocka_unit_test(test_bestfit_node_choice),
        cmocka_unit_test(test_card_choice_per_policy),
        cmocka_unit_test(test_card_ties_by_memory),
        cmocka_unit_test(test_fgd_node_choice_differs_from_binpack),
        cmocka_unit_test(test_fgd_weighted_workload_scores),
        cmocka_unit_test(test_random_same_seed_same_sequence),
        cmocka_unit_test(test_random_node_share),
        cmocka_unit_test(test_random_card_choice),
        cmocka_unit_test(test_filter_reasons),
        cmocka_unit_test(test_whole_card_requests),
        cmocka_unit_test(test_multi_container_pods),
        cmocka_unit_test(test_score_enofit),
        cmocka_unit_test(test_schedule_enofit),
        cmocka_unit_test(test_schedule_tie_break_by_seed),
        cmocka_unit_test(test_placer_new_fgd_needs_workload),
        cmocka_unit_test(test_fgd_cpu_node_choice),
        cmocka_unit_test(test_fgd_cpu_fill_card_choice),
        cmocka_unit_test(test_topology_nvlink_islands),
        cmocka_unit_test(test_topology_pcie_levels),
        cmocka_unit_test(test_topology_uniform_changes_nothing),
        cmocka_unit_test(test_memo_matches_plain),
        cmocka_unit_test(test_memo_new_cluster_same_generations),
        /* Last: it exposes a use after free in placement.c (memo_reset). */
        cmocka_unit_test(test_memo_after_cluster_maxima_change),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
