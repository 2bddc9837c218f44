/* tests/unit/test_load.c - load awareness in the placement core
 * (src/core/load.c, the ties in cards.c and placement.c).
 *
 * The rule under test (include/egpu/core.h, "Measured load"): a card's load
 * is the higher of its utilization and its memory in use, percent; unknown
 * is the largest value. A load-aware placer reads loads only where the
 * policies tie exactly: between cards the card policy scores alike, the
 * less loaded card; between nodes of equal score, the lower load of the
 * cards the pod would get, before the per-seed hash. Off, no load is read.
 * Units: CPU in millicores, memory in MiB, GPU in milli-GPU.
 */
#include <errno.h>

#include "testutil.h"

#define V100     "V100M16"
#define V100_MIB 16384
#define UNK      EGPU_LOAD_UNKNOWN

static const enum egpu_policy_kind det_kinds[] = {EGPU_POLICY_BINPACK, EGPU_POLICY_SPREAD,
                                                  EGPU_POLICY_BESTFIT, EGPU_POLICY_FGD};
#define NKINDS (sizeof(det_kinds) / sizeof(det_kinds[0]))

static const struct egpu_typical_pod typical[] = {
    {.cpu_milli = 1000, .gpu_milli = 250, .ncards = 1, .weight = 2.0},
    {.cpu_milli = 2000, .gpu_milli = 500, .ncards = 1, .weight = 1.0},
    {.cpu_milli = 4000, .gpu_milli = 1000, .ncards = 1, .weight = 1.0},
};

static struct egpu_placer *new_placer(enum egpu_policy_kind node_policy,
                                      enum egpu_policy_kind card_policy, uint64_t seed,
                                      const struct egpu_workload *w, bool memo, bool load_aware)
{
    struct egpu_placer_config cfg = {.node_policy = node_policy,
                                     .card_policy = card_policy,
                                     .seed = seed,
                                     .workload = w,
                                     .memo = memo,
                                     .load_aware = load_aware};
    struct egpu_error err = {0};
    struct egpu_placer *p = egpu_placer_new(&cfg, &err);

    if (p == NULL)
        fail_msg("placer: %s", err.msg);
    return p;
}

static void set_loads(struct egpu_cluster *c, struct egpu_node *n, const uint16_t *loads)
{
    for (uint32_t g = 0; g < n->ngpus; g++)
        assert_int_equal(egpu_cluster_set_load(c, n, g, loads[g]), 0);
}

static void test_load_pct(void **state)
{
    (void)state;
    /* Neither part: unknown, never idle. */
    assert_int_equal(egpu_load_pct(false, 0, false, 0, 16384), UNK);
    /* Memory alone needs the card's size. */
    assert_int_equal(egpu_load_pct(false, 0, true, 100, 0), UNK);
    assert_int_equal(egpu_load_pct(true, 37, false, 0, 16384), 37);
    /* 4096 of 16384 MiB is 25%. */
    assert_int_equal(egpu_load_pct(false, 0, true, 4096, 16384), 25);
    /* The higher of the two. */
    assert_int_equal(egpu_load_pct(true, 5, true, 8192, 16384), 50);
    assert_int_equal(egpu_load_pct(true, 90, true, 1024, 16384), 90);
    /* Clamped into 0..100. */
    assert_int_equal(egpu_load_pct(true, 250, true, 99999, 16384), 100);
    assert_int_equal(egpu_load_pct(true, -3, true, -5, 16384), 0);
}

/* An empty node of four cards: every share policy but random ties the four
 * exactly; the load-aware placer takes the least loaded, the other card 0. */
static void test_card_ties_go_to_the_less_loaded(void **state)
{
    static const uint16_t loads[] = {90, 5, UNK, 40};
    long live = egpu_alloc_live();
    struct egpu_workload w = {0};
    struct egpu_cluster *c = egpu_cluster_new();
    struct egpu_node *n = tu_add_node(c, "n", 16000, 65536, 4, V100, V100_MIB);
    struct egpu_pod_request r = tu_request(1000, 1024, 30, 1024);

    (void)state;
    assert_int_equal(egpu_workload_from_list(typical, 3, &w), 0);
    set_loads(c, n, loads);
    for (size_t k = 0; k < NKINDS; k++) {
        for (int aware = 0; aware < 2; aware++) {
            struct egpu_placer *p = new_placer(det_kinds[k], det_kinds[k], 1, &w, true, aware);
            struct egpu_pick pick = {0};
            double s;

            assert_int_equal(egpu_placer_score(p, c, n, &r, &s, &pick), 0);
            assert_int_equal(pick.nshares, 1);
            if (pick.shares[0].gpu != (aware ? 1 : 0))
                fail_msg("%s, load-aware %d: card %u", egpu_policy_name(det_kinds[k]), aware,
                         pick.shares[0].gpu);
            egpu_placer_free(p);
        }
    }
    egpu_workload_free(&w);
    egpu_cluster_free(c);
    assert_int_equal(egpu_alloc_live(), live);
}

/* Load never overrides the card policy: binpack takes the card already 50%
 * used (less left after) though it is the busiest; spread takes an empty
 * one, the less loaded of the two empty ones. */
static void test_load_only_breaks_card_ties(void **state)
{
    static const uint16_t loads[] = {95, 60, 10};
    struct egpu_cluster *c = egpu_cluster_new();
    struct egpu_node *n = tu_add_node(c, "n", 16000, 65536, 3, V100, V100_MIB);
    struct egpu_pod_request r = tu_request(1000, 1024, 30, 0);
    struct egpu_placer *bp = new_placer(EGPU_POLICY_BINPACK, EGPU_POLICY_BINPACK, 0, NULL, true, 1);
    struct egpu_placer *sp = new_placer(EGPU_POLICY_SPREAD, EGPU_POLICY_SPREAD, 0, NULL, true, 1);
    struct egpu_pick pick = {0};
    double s;

    (void)state;
    tu_use_card(c, n, "busy", 0, 50);
    set_loads(c, n, loads);
    assert_int_equal(egpu_placer_score(bp, c, n, &r, &s, &pick), 0);
    assert_int_equal(pick.shares[0].gpu, 0);
    assert_int_equal(egpu_placer_score(sp, c, n, &r, &s, &pick), 0);
    assert_int_equal(pick.shares[0].gpu, 2);
    egpu_placer_free(bp);
    egpu_placer_free(sp);
    egpu_cluster_free(c);
}

/* Unknown counts as busier than any known load, even 100%. */
static void test_unknown_is_never_preferred(void **state)
{
    static const uint16_t loads[] = {UNK, 100, UNK};
    struct egpu_cluster *c = egpu_cluster_new();
    struct egpu_node *n = tu_add_node(c, "n", 16000, 65536, 3, V100, V100_MIB);
    struct egpu_node *a, *b, *got = NULL;
    struct egpu_pod_request r = tu_request(1000, 1024, 30, 0);
    struct egpu_placer *p = new_placer(EGPU_POLICY_BINPACK, EGPU_POLICY_BINPACK, 0, NULL, true, 1);
    struct egpu_pick pick = {0};
    double s;

    (void)state;
    set_loads(c, n, loads);
    assert_int_equal(egpu_placer_score(p, c, n, &r, &s, &pick), 0);
    assert_int_equal(pick.shares[0].gpu, 1);
    assert_int_equal(egpu_pick_load(n, &pick), 100);
    /* Between nodes: the one with a known 90% beats the one with no report,
     * for every seed, whatever the hash says. */
    assert_int_equal(egpu_cluster_remove_node(c, "n"), 0);
    a = tu_add_node(c, "node-a", 16000, 65536, 1, V100, V100_MIB);
    b = tu_add_node(c, "node-b", 16000, 65536, 1, V100, V100_MIB);
    assert_int_equal(egpu_cluster_set_load(c, b, 0, 90), 0);
    (void)a;
    for (uint64_t seed = 0; seed < 32; seed++) {
        struct egpu_placer *q =
            new_placer(EGPU_POLICY_BINPACK, EGPU_POLICY_BINPACK, seed, NULL, false, true);

        assert_int_equal(egpu_placer_schedule(q, c, &r, &got, &pick), 0);
        assert_string_equal(got->name, "node-b");
        egpu_placer_free(q);
    }
    egpu_placer_free(p);
    egpu_cluster_free(c);
}

/* Whole cards: the least loaded free cards, equal loads by index. */
static void test_whole_cards_by_load(void **state)
{
    static const uint16_t loads[] = {70, 10, UNK, 20, 10};
    struct egpu_cluster *c = egpu_cluster_new();
    struct egpu_node *n = tu_add_node(c, "n", 16000, 65536, 5, V100, V100_MIB);
    struct egpu_pod_request r = tu_request(1000, 1024, 300, 0);
    struct egpu_pick pick = {0};
    double s;

    (void)state;
    set_loads(c, n, loads);
    for (int aware = 0; aware < 2; aware++) {
        struct egpu_placer *p =
            new_placer(EGPU_POLICY_BINPACK, EGPU_POLICY_BINPACK, 0, NULL, true, aware);

        assert_int_equal(egpu_placer_score(p, c, n, &r, &s, &pick), 0);
        assert_int_equal(pick.nshares, 3);
        /* Off: cards 0, 1, 2 (lowest index). On: 1 and 4 (10%), then 3 (20%). */
        assert_int_equal(pick.shares[0].gpu, aware ? 1 : 0);
        assert_int_equal(pick.shares[1].gpu, aware ? 4 : 1);
        assert_int_equal(pick.shares[2].gpu, aware ? 3 : 2);
        assert_int_equal(egpu_pick_load(n, &pick), aware ? 20 : UNK);
        egpu_placer_free(p);
    }
    egpu_cluster_free(c);
}

/* Two identical empty nodes, a seed whose hash picks node-b: node-b's card
 * at 90%, node-a's at 5%. Load-aware: node-a under every deterministic
 * policy and in the verdicts; off: node-b, as the hash says. */
static void test_node_ties_go_to_the_less_loaded(void **state)
{
    struct egpu_workload w = {0};
    struct egpu_cluster *c = egpu_cluster_new();
    struct egpu_node *a = tu_add_node(c, "node-a", 16000, 65536, 2, V100, V100_MIB);
    struct egpu_node *b = tu_add_node(c, "node-b", 16000, 65536, 2, V100, V100_MIB);
    struct egpu_pod_request r = tu_request(1000, 1024, 30, 0);
    static const uint16_t la[] = {5, 5}, lb[] = {90, 90};
    uint64_t seed = 0;

    (void)state;
    assert_int_equal(egpu_workload_from_list(typical, 3, &w), 0);
    while (egpu_hash_str("node-b", seed) > egpu_hash_str("node-a", seed))
        seed++;
    set_loads(c, a, la);
    set_loads(c, b, lb);
    for (size_t k = 0; k < NKINDS; k++) {
        for (int aware = 0; aware < 2; aware++) {
            struct egpu_placer *p = new_placer(det_kinds[k], det_kinds[k], seed, &w, true, aware);
            uint32_t slots[2] = {(uint32_t)a->slot, (uint32_t)b->slot};
            struct egpu_verdict v[2];
            struct egpu_node *got = NULL;
            struct egpu_pick pick = {0};

            assert_int_equal(egpu_placer_schedule(p, c, &r, &got, &pick), 0);
            if (strcmp(got->name, aware ? "node-a" : "node-b") != 0)
                fail_msg("%s, load-aware %d: %s", egpu_policy_name(det_kinds[k]), aware, got->name);
            egpu_placer_score_slots(p, c, &r, slots, 2, v);
            assert_true(v[0].ok && v[1].ok && v[0].score == v[1].score);
            assert_int_equal(v[0].load, aware ? 5 : UNK);
            assert_int_equal(v[1].load, aware ? 90 : UNK);
            egpu_placer_free(p);
        }
    }
    /* A better score wins whatever the load: binpack prefers the fuller node. */
    tu_use_card(c, b, "busy", 0, 20);
    {
        struct egpu_placer *p =
            new_placer(EGPU_POLICY_BINPACK, EGPU_POLICY_BINPACK, seed, &w, true, true);
        struct egpu_node *got = NULL;
        struct egpu_pick pick = {0};

        assert_int_equal(egpu_placer_schedule(p, c, &r, &got, &pick), 0);
        assert_string_equal(got->name, "node-b");
        egpu_placer_free(p);
    }
    egpu_workload_free(&w);
    egpu_cluster_free(c);
}

/* A load change renews the node's generation (memoised picks follow it);
 * setting the same value does not. */
static void test_set_load_renews_the_memo(void **state)
{
    struct egpu_cluster *c = egpu_cluster_new();
    struct egpu_node *a = tu_add_node(c, "node-a", 16000, 65536, 1, V100, V100_MIB);
    struct egpu_node *b = tu_add_node(c, "node-b", 16000, 65536, 1, V100, V100_MIB);
    struct egpu_pod_request r = tu_request(1000, 1024, 30, 0);
    struct egpu_placer *p = new_placer(EGPU_POLICY_BINPACK, EGPU_POLICY_BINPACK, 0, NULL, true, 1);
    struct egpu_node *got = NULL;
    struct egpu_pick pick = {0};
    uint64_t gen;

    (void)state;
    assert_int_equal(egpu_cluster_set_load(c, a, 0, 10), 0);
    assert_int_equal(egpu_cluster_set_load(c, b, 0, 80), 0);
    assert_int_equal(egpu_placer_schedule(p, c, &r, &got, &pick), 0);
    assert_string_equal(got->name, "node-a");
    gen = a->gen;
    assert_int_equal(egpu_cluster_set_load(c, a, 0, 10), 0);
    assert_true(a->gen == gen);
    assert_int_equal(egpu_cluster_set_load(c, a, 0, 95), 0);
    assert_true(a->gen != gen && c->gens[a->slot] == a->gen);
    assert_int_equal(egpu_placer_schedule(p, c, &r, &got, &pick), 0);
    assert_string_equal(got->name, "node-b");
    /* Stale report: unknown, behind node-b's 80%. */
    assert_int_equal(egpu_cluster_set_load(c, a, 0, UNK), 0);
    assert_int_equal(egpu_placer_schedule(p, c, &r, &got, &pick), 0);
    assert_string_equal(got->name, "node-b");
    assert_int_equal(egpu_cluster_set_load(c, a, 1, 0), -EINVAL);
    assert_int_equal(egpu_cluster_set_load(c, a, 0, 300), 0);
    assert_int_equal(a->gpus[0].load_pct, 100);
    egpu_placer_free(p);
    egpu_cluster_free(c);
}

/* A random cluster of 200 nodes x 8 cards and 2,000 random pods (shares,
 * whole cards, two-container pods; each tenth pod then leaves), placed
 * three ways side by side: (1) loads set at random (a tenth unknown), placer
 * off; (2) no loads, placer off; (3) no loads (all unknown), placer on.
 * All three choose the same node and cards for every pod. Then (4) the
 * random loads with the placer on, against (1) on the same state: its node
 * scores exactly as (1)'s choice, so load only broke ties, and it did break
 * some. */
static void test_off_places_as_before(void **state)
{
    static const enum egpu_policy_kind pairs[][2] = {
        {EGPU_POLICY_BINPACK, EGPU_POLICY_BINPACK},
        {EGPU_POLICY_FGD, EGPU_POLICY_FGD},
        {EGPU_POLICY_SPREAD, EGPU_POLICY_BESTFIT},
    };
    struct egpu_workload w = {0};
    long live = egpu_alloc_live();

    (void)state;
    assert_int_equal(egpu_workload_from_list(typical, 3, &w), 0);
    for (size_t k = 0; k < sizeof(pairs) / sizeof(pairs[0]); k++) {
        struct egpu_cluster *cl[4];
        struct egpu_placer *pl[4];
        struct egpu_rng rng;
        size_t differ = 0;
        char name[32];

        egpu_rng_seed(&rng, 7 + k);
        for (int j = 0; j < 4; j++) {
            cl[j] = egpu_cluster_new();
            assert_non_null(cl[j]);
            pl[j] = new_placer(pairs[k][0], pairs[k][1], 42, &w, true, j >= 2);
        }
        for (int i = 0; i < 200; i++) {
            uint16_t loads[8];

            snprintf(name, sizeof(name), "node-%03d", i);
            for (int g = 0; g < 8; g++) {
                uint64_t x = egpu_rng_below(&rng, 110);

                loads[g] = x >= 100 ? UNK : (uint16_t)(x / 10 * 10); /* steps of 10: ties */
            }
            for (int j = 0; j < 4; j++) {
                struct egpu_node *n = tu_add_node(cl[j], name, 32000, 131072, 8, V100, V100_MIB);

                if (j == 0 || j == 3)
                    set_loads(cl[j], n, loads);
            }
        }
        for (int i = 0; i < 2000; i++) {
            static const int64_t cores[] = {10, 20, 25, 30, 50, 50, 70, 100, 200};
            struct egpu_pod_request r =
                tu_request(500 * (int64_t)egpu_rng_below(&rng, 5), 1024,
                           cores[egpu_rng_below(&rng, 9)], 512 * (int64_t)egpu_rng_below(&rng, 8));
            struct egpu_node *got[4] = {0};
            struct egpu_pick pick[4];
            struct egpu_error err = {0};
            int rc[4];

            if (i % 5 == 0) {
                r.ncontainers = 2;
                assert_int_equal(egpu_container_request_set(&r.containers[1], 40, 1024, &err), 0);
            }
            snprintf(name, sizeof(name), "p%d", i);
            for (int j = 0; j < 4; j++) {
                memset(&pick[j], 0, sizeof(pick[j]));
                rc[j] = egpu_placer_schedule(pl[j], cl[j], &r, &got[j], &pick[j]);
            }
            for (int j = 1; j < 4; j++)
                assert_int_equal(rc[j], rc[0]);
            if (rc[0] != 0)
                continue;
            for (int j = 1; j < 3; j++) {
                assert_string_equal(got[j]->name, got[0]->name);
                assert_int_equal(pick[j].nshares, pick[0].nshares);
                assert_memory_equal(pick[j].shares, pick[0].shares,
                                    pick[0].nshares * sizeof(pick[0].shares[0]));
            }
            /* (4) against (1) on (4)'s state: the same best score. */
            {
                struct egpu_node *n1 = NULL;
                struct egpu_pick p1 = {0};
                double s1 = 0, s4 = 0;

                assert_int_equal(egpu_placer_schedule(pl[0], cl[3], &r, &n1, &p1), 0);
                assert_int_equal(egpu_placer_score(pl[0], cl[3], n1, &r, &s1, NULL), 0);
                assert_int_equal(egpu_placer_score(pl[0], cl[3], got[3], &r, &s4, NULL), 0);
                assert_true(s1 == s4);
                differ += n1 != got[3] ||
                          memcmp(p1.shares, pick[3].shares, p1.nshares * sizeof(p1.shares[0])) != 0;
            }
            for (int j = 0; j < 4; j++) {
                if (egpu_cluster_assign(cl[j], name, got[j], &r, &pick[j], &err) != 0)
                    fail_msg("assign %s: %s", name, err.msg);
            }
            if (i % 10 == 9) {
                snprintf(name, sizeof(name), "p%d", i - 5);
                for (int j = 0; j < 4; j++) {
                    int gone = egpu_cluster_release(cl[j], name, &err);

                    assert_true(gone == 0 ||
                                gone == EGPU_ENOTALLOC); /* it may have found no room */
                }
            }
        }
        assert_true(differ > 0);
        for (int j = 0; j < 4; j++) {
            egpu_placer_free(pl[j]);
            egpu_cluster_free(cl[j]);
        }
    }
    egpu_workload_free(&w);
    assert_int_equal(egpu_alloc_live(), live);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_pct),
        cmocka_unit_test(test_card_ties_go_to_the_less_loaded),
        cmocka_unit_test(test_load_only_breaks_card_ties),
        cmocka_unit_test(test_unknown_is_never_preferred),
        cmocka_unit_test(test_whole_cards_by_load),
        cmocka_unit_test(test_node_ties_go_to_the_less_loaded),
        cmocka_unit_test(test_set_load_renews_the_memo),
        cmocka_unit_test(test_off_places_as_before),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
