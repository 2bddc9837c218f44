/* tests/unit/test_placement_dra.c - placement in DRA mode: the slice's
 * device order (src/core/dra.c), the structured allocator's first fit with
 * backtracking (cards.c, egpu__cards_pick_dra) and the placer that keeps
 * the node tier's choice of node (placement.c).
 *
 * The answers are worked out from the allocator's facts (include/egpu/
 * core.h, "DRA mode"): devices in slice order, the first that fits each
 * container, the next device of an earlier container when a later one finds
 * none; and from FGD's definition (shared/data/openb/README.md) where the
 * node score matters. Units: GPU in milli-GPU (1000 = a card) unless a name
 * says percent (tu_request's core_pct, tu_use_card's).
 */
#include <errno.h>
#include <time.h>

#include "testutil.h"

#define V100 "V100M16"

static struct egpu_cluster *new_cluster(void)
{
    struct egpu_cluster *c = egpu_cluster_new();

    assert_non_null(c);
    return c;
}

static struct egpu_placer *dra_placer(enum egpu_policy_kind policy, enum egpu_dra_order order,
                                      bool blind, const struct egpu_workload *w, bool memo)
{
    struct egpu_placer_config cfg = {.node_policy = policy,
                                     .card_policy = policy,
                                     .seed = 7,
                                     .workload = w,
                                     .memo = memo,
                                     .dra = true,
                                     .dra_order = order,
                                     .dra_blind = blind};
    struct egpu_error err = {0};
    struct egpu_placer *p = egpu_placer_new(&cfg, &err);

    if (p == NULL)
        fail_msg("placer: %s", err.msg);
    return p;
}

/* The one card a one-share pick holds (position in node->gpus). */
static int picked_card(const struct egpu_pick *pick)
{
    assert_int_equal(pick->nshares, 1);
    return pick->shares[0].gpu;
}

/* A pod of n containers, each a share of core_pct percent of one card. */
static struct egpu_pod_request shares(uint32_t n, int64_t core_pct)
{
    struct egpu_pod_request r = tu_request(0, 0, core_pct, 0);

    r.ncontainers = n;
    for (uint32_t i = 1; i < n; i++)
        r.containers[i] = r.containers[0];
    return r;
}

static void test_order_parse_and_name(void **state)
{
    static const char *const all[] = {"index", "most-allocated", "least-allocated"};
    struct egpu_error err = {0};
    enum egpu_dra_order o = EGPU_DRA_ORDER_INDEX;

    (void)state;
    assert_int_equal(EGPU_DRA_ORDER_COUNT, 3);
    assert_string_equal(EGPU_DRA_ORDER_NAMES, "index, most-allocated, least-allocated");
    for (int i = 0; i < EGPU_DRA_ORDER_COUNT; i++) {
        assert_int_equal(egpu_dra_order_parse(all[i], &o, &err), 0);
        assert_int_equal(o, i);
        assert_string_equal(egpu_dra_order_name(o), all[i]);
    }
    o = EGPU_DRA_ORDER_MOST_ALLOCATED;
    assert_int_equal(egpu_dra_order_parse("Index", &o, &err), -EINVAL);
    assert_int_equal(o, EGPU_DRA_ORDER_MOST_ALLOCATED); /* untouched */
    assert_string_equal(err.msg, "unknown DRA device order \"Index\" (allowed: index, "
                                 "most-allocated, least-allocated)");
    assert_string_equal(egpu_dra_order_name((enum egpu_dra_order)3), "unknown");
}

/* Cards used 30%, 70%, 0%, 70%: index is 0..3; most-allocated puts the two
 * 70% cards first (by index), then 30%, then the empty one; least-allocated
 * the reverse of that by load, each tie by index. */
static void test_device_orders(void **state)
{
    struct egpu_cluster *c = new_cluster();
    struct egpu_node *n = tu_add_node(c, "n", 64000, 262144, 4, V100, 16384);
    uint16_t got[EGPU_NODE_GPUS_MAX];
    static const uint16_t idx[] = {0, 1, 2, 3}, most[] = {1, 3, 0, 2}, least[] = {2, 0, 1, 3};

    (void)state;
    tu_use_card(c, n, "a", 0, 30);
    tu_use_card(c, n, "b", 1, 70);
    tu_use_card(c, n, "d", 3, 70);
    assert_int_equal(egpu_dra_device_order(n, EGPU_DRA_ORDER_INDEX, got), 4);
    assert_memory_equal(got, idx, sizeof(idx));
    assert_int_equal(egpu_dra_device_order(n, EGPU_DRA_ORDER_MOST_ALLOCATED, got), 4);
    assert_memory_equal(got, most, sizeof(most));
    assert_int_equal(egpu_dra_device_order(n, EGPU_DRA_ORDER_LEAST_ALLOCATED, got), 4);
    assert_memory_equal(got, least, sizeof(least));
    assert_int_equal(egpu_dra_device_order(n, (enum egpu_dra_order)3, got), -EINVAL);
    egpu_cluster_free(c);
}

/* An unhealthy card leaves the slice: it is not in any order, and no pod
 * gets it even when it is the first by index. */
static void test_unhealthy_card_not_in_slice(void **state)
{
    struct egpu_gpu_spec gpus[3] = {
        {.index = 0, .model = V100, .mem_mib = 16384, .unhealthy = "n-gpu0 (Unhealthy)"},
        {.index = 1, .model = V100, .mem_mib = 16384},
        {.index = 2, .model = V100, .mem_mib = 16384},
    };
    struct egpu_node_spec spec = {
        .name = "n", .cpu_milli = 8000, .mem_mib = 65536, .ngpus = 3, .gpus = gpus};
    struct egpu_cluster *c = new_cluster();
    struct egpu_error err = {0};
    struct egpu_placer *p =
        dra_placer(EGPU_POLICY_BINPACK, EGPU_DRA_ORDER_INDEX, false, NULL, false);
    struct egpu_pod_request r = tu_request(0, 0, 20, 0);
    struct egpu_pick pick;
    uint16_t got[EGPU_NODE_GPUS_MAX];
    struct egpu_node *n;

    (void)state;
    assert_int_equal(egpu_cluster_add_node(c, &spec, &err), 0);
    n = egpu_cluster_node(c, "n");
    assert_int_equal(egpu_dra_device_order(n, EGPU_DRA_ORDER_INDEX, got), 2);
    assert_int_equal(got[0], 1);
    assert_int_equal(got[1], 2);
    assert_true(egpu_placer_can_host(p, c, n, &r, &pick, NULL, 0));
    assert_int_equal(picked_card(&pick), 1);
    egpu_placer_free(p);
    egpu_cluster_free(c);
}

/* Cards used 70%, 0%, 50%, 0%; a 40% share. First fit in index order: card
 * 0 has 30% free (too little), card 1 is the first that fits. The card
 * tier's binpack would take the tightest, card 2 (50% free): the allocator
 * does not score. most-allocated tries 0 (no room) then 2; least-allocated
 * an empty card first, the lower index of the two: 1. */
static void test_first_fit_per_order(void **state)
{
    struct egpu_cluster *c = new_cluster();
    struct egpu_node *n = tu_add_node(c, "n", 64000, 262144, 4, V100, 16384);
    struct egpu_pod_request r = tu_request(1000, 1024, 40, 0);
    struct egpu_placer_config plain = {.node_policy = EGPU_POLICY_BINPACK,
                                       .card_policy = EGPU_POLICY_BINPACK};
    struct egpu_placer *p;
    struct egpu_pick pick;

    (void)state;
    tu_use_card(c, n, "a", 0, 70);
    tu_use_card(c, n, "b", 2, 50);
    p = egpu_placer_new(&plain, NULL);
    assert_non_null(p);
    assert_true(egpu_placer_can_host(p, c, n, &r, &pick, NULL, 0));
    assert_int_equal(picked_card(&pick), 2);
    egpu_placer_free(p);

    p = dra_placer(EGPU_POLICY_BINPACK, EGPU_DRA_ORDER_INDEX, false, NULL, false);
    assert_true(egpu_placer_can_host(p, c, n, &r, &pick, NULL, 0));
    assert_int_equal(picked_card(&pick), 1);
    assert_int_equal(pick.shares[0].core_milli, 400);
    egpu_placer_free(p);

    p = dra_placer(EGPU_POLICY_BINPACK, EGPU_DRA_ORDER_MOST_ALLOCATED, false, NULL, false);
    assert_true(egpu_placer_can_host(p, c, n, &r, &pick, NULL, 0));
    assert_int_equal(picked_card(&pick), 2);
    egpu_placer_free(p);

    p = dra_placer(EGPU_POLICY_BINPACK, EGPU_DRA_ORDER_LEAST_ALLOCATED, false, NULL, false);
    assert_true(egpu_placer_can_host(p, c, n, &r, &pick, NULL, 0));
    assert_int_equal(picked_card(&pick), 1);
    egpu_placer_free(p);
    egpu_cluster_free(c);
}

/* A pod of two containers, 40% and 70%, on cards with 70% and 40% free
 * (used 30% and 60%). First fit gives container 0 card 0 (70% free), which
 * leaves 30% there and 40% on card 1: container 1 (70%) fits neither. The
 * allocator backtracks: container 0 takes card 1, container 1 card 0. */
static void test_backtracking_two_containers(void **state)
{
    struct egpu_cluster *c = new_cluster();
    struct egpu_node *n = tu_add_node(c, "n", 64000, 262144, 2, V100, 16384);
    struct egpu_placer *p =
        dra_placer(EGPU_POLICY_BINPACK, EGPU_DRA_ORDER_INDEX, false, NULL, false);
    struct egpu_pod_request r = tu_request(0, 0, 40, 0);
    struct egpu_error err = {0};
    struct egpu_pick pick;

    (void)state;
    tu_use_card(c, n, "a", 0, 30);
    tu_use_card(c, n, "b", 1, 60);
    r.ncontainers = 2;
    assert_int_equal(egpu_container_request_set(&r.containers[1], 70, 0, &err), 0);
    assert_true(egpu_placer_can_host(p, c, n, &r, &pick, NULL, 0));
    assert_int_equal(pick.nshares, 2);
    assert_int_equal(pick.shares[0].container, 0);
    assert_int_equal(pick.shares[0].gpu, 1);
    assert_int_equal(pick.shares[1].container, 1);
    assert_int_equal(pick.shares[1].gpu, 0);
    /* The pick commits: it fits the node as it is. */
    assert_int_equal(egpu_cluster_assign(c, "pod", n, &r, &pick, &err), 0);
    assert_int_equal(n->gpus[0].used_core_milli, 1000);
    assert_int_equal(n->gpus[1].used_core_milli, 1000);
    egpu_placer_free(p);
    egpu_cluster_free(c);
}

/* Two whole cards on a node whose card 1 holds a share: the first two free
 * devices in order, 0 and 2, whichever order (free cards are all 0%
 * allocated). A share and a 2-card container of one pod: the share takes
 * card 0 (first fit), and the whole cards then the next free ones, 2 and 3
 * (card 0 is held now). Four whole cards do not fit: one reason names it. */
static void test_whole_cards(void **state)
{
    struct egpu_cluster *c = new_cluster();
    struct egpu_node *n = tu_add_node(c, "n", 64000, 262144, 4, V100, 16384);
    struct egpu_pod_request two = tu_request(0, 0, 200, 0), four = tu_request(0, 0, 400, 0);
    struct egpu_pod_request mixed = tu_request(0, 0, 10, 0);
    struct egpu_error err = {0};
    struct egpu_pick pick;
    char why[256] = "";

    (void)state;
    tu_use_card(c, n, "a", 1, 10);
    for (int o = 0; o < EGPU_DRA_ORDER_COUNT; o++) {
        struct egpu_placer *p =
            dra_placer(EGPU_POLICY_BINPACK, (enum egpu_dra_order)o, false, NULL, false);

        assert_true(egpu_placer_can_host(p, c, n, &two, &pick, NULL, 0));
        assert_int_equal(pick.nshares, 2);
        assert_int_equal(pick.shares[0].gpu, 0);
        assert_int_equal(pick.shares[1].gpu, 2);
        assert_int_equal(pick.shares[0].core_milli, 1000);
        assert_int_equal(pick.shares[0].mem_mib, 16384);
        assert_false(egpu_placer_can_host(p, c, n, &four, &pick, why, sizeof(why)));
        assert_string_equal(why, "container 0 needs 4 whole free cards, node has 3");
        egpu_placer_free(p);
    }
    mixed.ncontainers = 2;
    assert_int_equal(egpu_container_request_set(&mixed.containers[1], 200, 0, &err), 0);
    {
        struct egpu_placer *p =
            dra_placer(EGPU_POLICY_BINPACK, EGPU_DRA_ORDER_INDEX, false, NULL, false);

        assert_true(egpu_placer_can_host(p, c, n, &mixed, &pick, NULL, 0));
        assert_int_equal(pick.nshares, 3);
        assert_int_equal(pick.shares[0].gpu, 0);
        assert_int_equal(pick.shares[1].gpu, 2);
        assert_int_equal(pick.shares[2].gpu, 3);
        egpu_placer_free(p);
    }
    egpu_cluster_free(c);
}

/* The cap: 13 shares of 60% on 12 empty cards fit no arrangement (a card
 * holds one), and trying every one would take 12! orders: the allocator
 * model stops at EGPU_DRA_STEPS_MAX devices and says so, quickly. 12 such
 * shares fit (one per card, in order), and 3 on 2 cards, a small search
 * that ends, get the card tier's reason instead. */
static void test_search_is_capped(void **state)
{
    struct egpu_cluster *c = new_cluster();
    struct egpu_node *big = tu_add_node(c, "big", 64000, 262144, 12, V100, 16384);
    struct egpu_node *small = tu_add_node(c, "small", 64000, 262144, 2, V100, 16384);
    struct egpu_placer *p =
        dra_placer(EGPU_POLICY_BINPACK, EGPU_DRA_ORDER_INDEX, false, NULL, false);
    struct egpu_pod_request r13 = shares(13, 60), r12 = shares(12, 60), r3 = shares(3, 60);
    struct egpu_pick pick;
    struct timespec t0, t1;
    char why[256] = "";

    (void)state;
    assert_int_equal(EGPU_DRA_STEPS_MAX, 100000);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_false(egpu_placer_can_host(p, c, big, &r13, &pick, why, sizeof(why)));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    assert_string_equal(why, "the DRA allocator gave up after trying 100000 devices for the "
                             "pod's 13 containers");
    assert_int_equal(pick.nshares, 0);
    /* 100,000 fit checks: well under a second even with the other core busy. */
    assert_true((double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9 < 2.0);
    assert_false(egpu_placer_can_host(p, c, big, &r13, NULL, NULL, 0));

    assert_true(egpu_placer_can_host(p, c, big, &r12, &pick, NULL, 0));
    assert_int_equal(pick.nshares, 12);
    for (uint32_t i = 0; i < 12; i++) {
        assert_int_equal(pick.shares[i].container, i);
        assert_int_equal(pick.shares[i].gpu, i);
    }
    assert_false(egpu_placer_can_host(p, c, small, &r3, &pick, why, sizeof(why)));
    assert_string_equal(why, "no card with 60% core and 0 MiB free for container 2 (most free "
                             "card: 40%, 16384 MiB)");
    egpu_placer_free(p);
    egpu_cluster_free(c);
}

/* Blind vs aware, FGD with one typical pod of 60% (weight 1): F_n is the
 * idle milli-GPU on cards with less than 600 free. A 50% pod.
 * Node a: cards free 1000 and 550 (card 1 used 45%). FGD's own card is card
 * 1: 550 -> 50, F 550 -> 50, dF = -500, score floor(100 sigma(0.5)) = 62.
 * The allocator (index order) takes card 0: 1000 -> 500, F 550 -> 1050,
 * dF = +500, score floor(100 sigma(-0.5)) = 37.
 * Node b: one card free 600 (used 40%): 600 -> 100 either way, F 0 -> 100,
 * dF = +100, score floor(100 sigma(-0.1)) = 47.
 * Blind: a (62) beats b (47) and gets the allocator's card 0 anyway.
 * Aware: b (47) beats a (37). Without DRA, FGD picks a's card 1. */
static void test_blind_and_aware_extender(void **state)
{
    struct egpu_typical_pod tp = {.cpu_milli = 0, .gpu_milli = 600, .ncards = 1, .weight = 1.0};
    struct egpu_workload w = {0};
    struct egpu_cluster *c = new_cluster();
    struct egpu_node *a = tu_add_node(c, "a", 64000, 262144, 2, V100, 16384);
    struct egpu_node *b = tu_add_node(c, "b", 64000, 262144, 1, V100, 16384);
    struct egpu_pod_request r = tu_request(0, 0, 50, 0);
    struct egpu_placer_config plain = {
        .node_policy = EGPU_POLICY_FGD, .card_policy = EGPU_POLICY_FGD, .workload = &w};
    struct egpu_placer *p;
    struct egpu_node *got = NULL;
    struct egpu_pick pick;
    double score = 0.0;

    (void)state;
    assert_int_equal(egpu_workload_from_list(&tp, 1, &w), 0);
    tu_use_card(c, a, "x", 1, 45);
    tu_use_card(c, b, "y", 0, 40);

    p = egpu_placer_new(&plain, NULL);
    assert_non_null(p);
    assert_int_equal(egpu_placer_schedule(p, c, &r, &got, &pick), 0);
    assert_ptr_equal(got, a);
    assert_int_equal(picked_card(&pick), 1);
    egpu_placer_free(p);

    for (int memo = 0; memo < 2; memo++) {
        p = dra_placer(EGPU_POLICY_FGD, EGPU_DRA_ORDER_INDEX, true, &w, memo);
        assert_int_equal(egpu_placer_score(p, c, a, &r, &score, &pick), 0);
        assert_true(score == 62.0);
        assert_int_equal(picked_card(&pick), 0);
        assert_int_equal(egpu_placer_score(p, c, b, &r, &score, &pick), 0);
        assert_true(score == 47.0);
        assert_int_equal(egpu_placer_schedule(p, c, &r, &got, &pick), 0);
        assert_ptr_equal(got, a);
        assert_int_equal(picked_card(&pick), 0);
        egpu_placer_free(p);

        p = dra_placer(EGPU_POLICY_FGD, EGPU_DRA_ORDER_INDEX, false, &w, memo);
        assert_int_equal(egpu_placer_score(p, c, a, &r, &score, &pick), 0);
        assert_true(score == 37.0);
        assert_int_equal(picked_card(&pick), 0);
        assert_int_equal(egpu_placer_schedule(p, c, &r, &got, &pick), 0);
        assert_ptr_equal(got, b);
        assert_int_equal(picked_card(&pick), 0);
        egpu_placer_free(p);
    }
    /* most-allocated puts a's card 1 first: the allocator takes FGD's card,
     * and the aware extender scores a 62 again. */
    p = dra_placer(EGPU_POLICY_FGD, EGPU_DRA_ORDER_MOST_ALLOCATED, false, &w, true);
    assert_int_equal(egpu_placer_schedule(p, c, &r, &got, &pick), 0);
    assert_ptr_equal(got, a);
    assert_int_equal(picked_card(&pick), 1);
    egpu_placer_free(p);
    egpu_workload_free(&w);
    egpu_cluster_free(c);
}

/* The memo keeps DRA answers exact: the same pods, one after another, with
 * and without it, land on the same nodes and cards for every order and
 * both extenders (a state-dependent order changes with each assign, which
 * renews the node's generation). */
static void test_memo_matches_plain(void **state)
{
    struct egpu_typical_pod tp[2] = {
        {.cpu_milli = 1000, .gpu_milli = 500, .ncards = 1, .weight = 0.7},
        {.cpu_milli = 2000, .gpu_milli = 1000, .ncards = 1, .weight = 0.3},
    };
    static const int64_t pcts[] = {30, 50, 100, 20, 70, 200, 10, 40, 60, 25, 100, 90};
    struct egpu_workload w = {0};

    (void)state;
    assert_int_equal(egpu_workload_from_list(tp, 2, &w), 0);
    for (int o = 0; o < EGPU_DRA_ORDER_COUNT; o++) {
        for (int blind = 0; blind < 2; blind++) {
            struct egpu_cluster *c[2] = {new_cluster(), new_cluster()};
            struct egpu_placer *p[2];
            size_t placed = 0;

            for (int k = 0; k < 2; k++) {
                tu_add_node(c[k], "n1", 32000, 131072, 4, V100, 16384);
                tu_add_node(c[k], "n2", 32000, 131072, 2, V100, 16384);
                tu_add_node(c[k], "n3", 16000, 65536, 8, V100, 16384);
                p[k] = dra_placer(EGPU_POLICY_FGD, (enum egpu_dra_order)o, blind, &w, k == 1);
            }
            for (size_t i = 0; i < 40; i++) {
                struct egpu_pod_request r = tu_request(500, 1024, pcts[i % 12], 0);
                struct egpu_node *got[2] = {NULL, NULL};
                struct egpu_pick pick[2];
                int rc[2];
                char key[16];

                snprintf(key, sizeof(key), "p%zu", i);
                for (int k = 0; k < 2; k++)
                    rc[k] = egpu_placer_schedule(p[k], c[k], &r, &got[k], &pick[k]);
                assert_int_equal(rc[0], rc[1]);
                if (rc[0] != 0)
                    continue;
                assert_string_equal(got[0]->name, got[1]->name);
                assert_int_equal(pick[0].nshares, pick[1].nshares);
                assert_memory_equal(pick[0].shares, pick[1].shares,
                                    pick[0].nshares * sizeof(pick[0].shares[0]));
                for (int k = 0; k < 2; k++)
                    assert_int_equal(egpu_cluster_assign(c[k], key, got[k], &r, &pick[k], NULL), 0);
                placed++;
            }
            assert_true(placed > 10);
            for (int k = 0; k < 2; k++) {
                egpu_placer_free(p[k]);
                egpu_cluster_free(c[k]);
            }
        }
    }
    egpu_workload_free(&w);
}

static void test_placer_rejects_bad_order(void **state)
{
    struct egpu_placer_config cfg = {.node_policy = EGPU_POLICY_BINPACK,
                                     .card_policy = EGPU_POLICY_BINPACK,
                                     .dra = true,
                                     .dra_order = (enum egpu_dra_order)3};
    struct egpu_error err = {0};
    long live = egpu_alloc_live();

    (void)state;
    assert_null(egpu_placer_new(&cfg, &err));
    assert_int_equal(err.code, -EINVAL);
    assert_string_equal(err.msg,
                        "DRA device order 3: allowed: index, most-allocated, least-allocated");
    cfg.dra = false; /* the order is not read without dra */
    {
        struct egpu_placer *p = egpu_placer_new(&cfg, &err);

        assert_non_null(p);
        egpu_placer_free(p);
    }
    assert_int_equal(egpu_alloc_live(), live);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_parse_and_name),
        cmocka_unit_test(test_device_orders),
        cmocka_unit_test(test_unhealthy_card_not_in_slice),
        cmocka_unit_test(test_first_fit_per_order),
        cmocka_unit_test(test_backtracking_two_containers),
        cmocka_unit_test(test_whole_cards),
        cmocka_unit_test(test_search_is_capped),
        cmocka_unit_test(test_blind_and_aware_extender),
        cmocka_unit_test(test_memo_matches_plain),
        cmocka_unit_test(test_placer_rejects_bad_order),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
