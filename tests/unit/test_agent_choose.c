/* tests/unit/test_agent_choose.c - GetPreferredAllocation's card choice
 * (src/agent/choose.c): the IDs the agent prefers when no assignment names
 * the cards are on the card(s) the placement core picks.
 *
 * The rule against the core itself: for random states of a node (what is
 * held of each card, compute and memory, as pods egpu_cluster_assign placed
 * there, the way the scheduler's cache holds them) the card the agent prefers
 * is the card egpu_placer_can_host picks for the same request. Then the cases
 * the agent's own binpack (before the core took over) answered differently:
 * a tie on free compute broken by memory, no card with room for a share, no
 * whole card free, an unhealthy card offered; size that is no gpu-core;
 * must-include IDs first; and every allocation failing in turn (-ENOMEM,
 * nothing leaked).
 */
#include <errno.h>
#include <stdlib.h>

#include "testutil.h"
#include "choose_int.h"

#define NCARDS_MAX 8
#define MIB        81920

static long live_at_start;

static int setup(void **state)
{
    (void)state;
    live_at_start = egpu_alloc_live();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    assert_int_equal(egpu_alloc_live(), live_at_start);
    return 0;
}

/* A node as the agent sees it: cards, the kubelet's offer, the record. */
struct node {
    struct egpu_gpu_info cards[NCARDS_MAX];
    size_t ncards;
    char ids[NCARDS_MAX * 100][EGPU_UUID_MAX + 4];
    char *avail[NCARDS_MAX * 100];
    size_t navail;
    uint64_t mem_used[NCARDS_MAX];
};

static void node_init(struct node *n, size_t ncards)
{
    memset(n, 0, sizeof(*n));
    n->ncards = ncards;
    for (size_t i = 0; i < ncards; i++) {
        snprintf(n->cards[i].uuid, sizeof(n->cards[i].uuid),
                 "GPU-0000000%zu-0000-0000-0000-000000000000", i);
        n->cards[i].index = (uint32_t)i;
        n->cards[i].mem_mib = MIB;
        n->cards[i].healthy = true;
    }
}

/* Offer the slots [from, to) of card c. */
static void offer(struct node *n, size_t c, unsigned from, unsigned to)
{
    char uuid[EGPU_UUID_MAX];

    memcpy(uuid, n->cards[c].uuid, sizeof(uuid)); /* snprintf's source apart from n */
    for (unsigned s = from; s < to; s++) {
        int len = snprintf(n->ids[n->navail], sizeof(n->ids[0]), "%s-%02u", uuid, s);

        assert_true(len > 0 && (size_t)len < sizeof(n->ids[0]));
        n->avail[n->navail] = n->ids[n->navail];
        n->navail++;
    }
}

/* The card of id (its position), asserting it is one of n's. */
static size_t card_of(const struct node *n, const char *id)
{
    for (size_t c = 0; c < n->ncards; c++)
        if (strncmp(id, n->cards[c].uuid, strlen(n->cards[c].uuid)) == 0)
            return c;
    fail_msg("ID %s is on no card", id);
    return 0;
}

/* Choose size IDs; asserts the call's result is want_rc. */
static size_t choose(struct node *n, size_t size, char **out, int want_rc, struct egpu_error *err)
{
    size_t got = 99;
    int rc = egpu__choose_ids(EGPU_CHOOSE_CARD_POLICY, n->cards, n->ncards, n->mem_used, n->avail,
                              n->navail, NULL, 0, size, out, &got, err);

    assert_int_equal(rc, want_rc);
    if (rc != 0)
        assert_int_equal(got, 0);
    return got;
}

/* Every one of out (got) on card c, each ID once. */
static void all_on(const struct node *n, char **out, size_t got, size_t c)
{
    for (size_t i = 0; i < got; i++) {
        assert_int_equal(card_of(n, out[i]), c);
        for (size_t j = 0; j < i; j++)
            assert_string_not_equal(out[i], out[j]);
    }
}

static void follows_the_core_on_random_nodes(void **state)
{
    static struct node n;
    char *out[400];
    struct egpu_rng rng;
    int nfit = 0, nofit = 0;

    (void)state;
    egpu_rng_seed(&rng, 42);
    for (int round = 0; round < 300; round++) {
        size_t ncards = 1 + egpu_rng_below(&rng, NCARDS_MAX);
        struct egpu_cluster *c = egpu_cluster_new();
        struct egpu_node *node = tu_add_node(c, "n", 0, 0, (uint32_t)ncards, "A100", MIB);
        struct egpu_placer_config pc = {.node_policy = EGPU_CHOOSE_CARD_POLICY,
                                        .card_policy = EGPU_CHOOSE_CARD_POLICY};
        struct egpu_error err = {0};
        struct egpu_placer *p = egpu_placer_new(&pc, &err);
        struct egpu_pod_request req = {.ncontainers = 1};
        struct egpu_pick pick;
        size_t size, got;
        bool fits;

        assert_non_null(p);
        node_init(&n, ncards);
        for (size_t g = 0; g < ncards; g++) {
            /* Held: nothing, a whole card, or a share with some memory. */
            unsigned kind = (unsigned)egpu_rng_below(&rng, 3);
            unsigned held = kind == 0 ? 0 : kind == 1 ? 100 : 1 + egpu_rng_below(&rng, 99);
            uint32_t mem = held == 100 ? 0 : (uint32_t)egpu_rng_below(&rng, 4) * 4096;
            struct egpu_pod_request r = {.ncontainers = 1};
            struct egpu_pick pk = {.nshares = 1};
            char key[32];

            offer(&n, g, held, 100);
            if (held == 0)
                continue;
            n.mem_used[g] = mem;
            assert_int_equal(egpu_container_request_set(&r.containers[0], held, mem, &err), 0);
            pk.shares[0] = (struct egpu_share){.container = 0,
                                               .gpu = (uint16_t)g,
                                               .core_milli = held * 10,
                                               .mem_mib = held == 100 ? MIB : mem};
            snprintf(key, sizeof(key), "default/p%zu", g);
            assert_int_equal(egpu_cluster_assign(c, key, node, &r, &pk, &err), 0);
        }
        size = egpu_rng_below(&rng, 4) == 0 ? 100 * (1 + egpu_rng_below(&rng, 2))
                                            : 1 + egpu_rng_below(&rng, 99);
        assert_int_equal(egpu_container_request_set(&req.containers[0], (int64_t)size, 0, &err), 0);
        fits = egpu_placer_can_host(p, c, node, &req, &pick, NULL, 0);
        got = choose(&n, size, out, fits ? 0 : EGPU_ENOFIT, &err);
        nfit += fits;
        nofit += !fits;
        if (fits) {
            /* The same cards, in the core's order, each its share's worth. */
            assert_int_equal(got, size);
            for (uint32_t sh = 0; sh < pick.nshares; sh++) {
                size_t per = pick.shares[sh].core_milli / 10;

                all_on(&n, out + sh * per, per, pick.shares[sh].gpu);
            }
        }
        egpu_placer_free(p);
        egpu_cluster_free(c);
    }
    /* Both answers, many times each. */
    assert_true(nfit > 100 && nofit > 30);
}

/* Equal free IDs, more memory in use on card 1: the core's binpack leaves
 * the least memory, card 1. The agent's own rule took the lower index. */
static void tie_on_compute_goes_to_less_memory_left(void **state)
{
    static struct node n;
    char *out[100];
    struct egpu_error err = {0};

    (void)state;
    node_init(&n, 2);
    offer(&n, 0, 30, 100);
    offer(&n, 1, 30, 100);
    n.mem_used[0] = 1024;
    n.mem_used[1] = 60000;
    assert_int_equal(choose(&n, 20, out, 0, &err), 20);
    all_on(&n, out, 20, 1);
    /* Without the record's memory: the lower index. */
    n.mem_used[1] = 1024;
    assert_int_equal(choose(&n, 20, out, 0, &err), 20);
    all_on(&n, out, 20, 0);
}

static void binpack_the_fullest_card_that_fits(void **state)
{
    static struct node n;
    char *out[100];
    struct egpu_error err = {0};

    (void)state;
    node_init(&n, 3);
    offer(&n, 0, 0, 100);
    offer(&n, 1, 50, 100);
    offer(&n, 2, 80, 100);
    assert_int_equal(choose(&n, 30, out, 0, &err), 30);
    all_on(&n, out, 30, 1);
    assert_string_equal(out[0] + strlen(n.cards[1].uuid), "-50");
    assert_int_equal(choose(&n, 20, out, 0, &err), 20);
    all_on(&n, out, 20, 2);
}

/* No card has 60 free: the agent's own rule spread the share over two
 * cards; the core finds no fit, and says why. */
static void a_share_no_card_has_room_for(void **state)
{
    static struct node n;
    char *out[100];
    struct egpu_error err = {0};

    (void)state;
    node_init(&n, 2);
    offer(&n, 0, 50, 100);
    offer(&n, 1, 60, 100);
    choose(&n, 60, out, EGPU_ENOFIT, &err);
    assert_non_null(strstr(err.msg, "no card with 60% core"));
}

/* Whole cards: only cards nobody holds, lowest index first. The agent's own
 * rule gave 100 IDs of the emptiest cards even when none was whole. */
static void whole_cards_only_free_ones(void **state)
{
    static struct node n;
    char *out[300];
    struct egpu_error err = {0};

    (void)state;
    node_init(&n, 3);
    offer(&n, 0, 0, 100);
    offer(&n, 1, 5, 100);
    offer(&n, 2, 0, 100);
    assert_int_equal(choose(&n, 200, out, 0, &err), 200);
    all_on(&n, out, 100, 0);
    all_on(&n, out + 100, 100, 2);
    node_init(&n, 2);
    offer(&n, 0, 10, 100);
    offer(&n, 1, 5, 100);
    choose(&n, 100, out, EGPU_ENOFIT, &err);
    assert_non_null(strstr(err.msg, "whole free cards"));
}

/* An unhealthy card takes nothing, even when its IDs are offered. */
static void unhealthy_card_takes_nothing(void **state)
{
    static struct node n;
    char *out[100];
    struct egpu_error err = {0};

    (void)state;
    node_init(&n, 2);
    offer(&n, 0, 50, 100);
    offer(&n, 1, 0, 100);
    n.cards[0].healthy = false;
    assert_int_equal(choose(&n, 30, out, 0, &err), 30);
    all_on(&n, out, 30, 1);
}

static void size_that_is_no_gpu_core(void **state)
{
    static struct node n;
    char *out[200];
    struct egpu_error err = {0};

    (void)state;
    node_init(&n, 2);
    offer(&n, 0, 0, 100);
    offer(&n, 1, 0, 100);
    choose(&n, 150, out, EGPU_ERANGE, &err);
    assert_non_null(strstr(err.msg, "gpu-core 150"));
}

/* Must-include IDs come first and count toward their card's share. */
static void must_include_first(void **state)
{
    static struct node n;
    char *out[100], *must[2];
    struct egpu_error err = {0};
    size_t got = 0;

    (void)state;
    node_init(&n, 2);
    offer(&n, 0, 40, 100);
    offer(&n, 1, 0, 100);
    must[0] = n.avail[10]; /* card 0, slot 50 */
    must[1] = n.avail[11];
    assert_int_equal(egpu__choose_ids(EGPU_CHOOSE_CARD_POLICY, n.cards, n.ncards, NULL, n.avail,
                                      n.navail, must, 2, 30, out, &got, &err),
                     0);
    assert_int_equal(got, 30);
    assert_ptr_equal(out[0], must[0]);
    assert_ptr_equal(out[1], must[1]);
    all_on(&n, out, 30, 0);
}

/* Every allocation failing in turn: -ENOMEM, nothing written, nothing leaked. */
static void out_of_memory_is_an_error(void **state)
{
    static struct node n;
    char *out[100];
    int rc = -ENOMEM;

    (void)state;
    node_init(&n, 2);
    offer(&n, 0, 30, 100);
    offer(&n, 1, 0, 100);
    for (long nth = 1; rc == -ENOMEM && nth < 1000; nth++) {
        struct egpu_error err = {0};
        size_t got = 99;

        egpu_alloc_fail_after(nth);
        rc = egpu__choose_ids(EGPU_CHOOSE_CARD_POLICY, n.cards, n.ncards, NULL, n.avail, n.navail,
                              NULL, 0, 30, out, &got, &err);
        egpu_alloc_fail_after(0);
        if (rc == -ENOMEM)
            assert_int_equal(got, 0);
        assert_int_equal(egpu_alloc_live(), live_at_start);
    }
    assert_int_equal(rc, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(follows_the_core_on_random_nodes, setup, teardown),
        cmocka_unit_test_setup_teardown(tie_on_compute_goes_to_less_memory_left, setup, teardown),
        cmocka_unit_test_setup_teardown(binpack_the_fullest_card_that_fits, setup, teardown),
        cmocka_unit_test_setup_teardown(a_share_no_card_has_room_for, setup, teardown),
        cmocka_unit_test_setup_teardown(whole_cards_only_free_ones, setup, teardown),
        cmocka_unit_test_setup_teardown(unhealthy_card_takes_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(size_that_is_no_gpu_core, setup, teardown),
        cmocka_unit_test_setup_teardown(must_include_first, setup, teardown),
        cmocka_unit_test_setup_teardown(out_of_memory_is_an_error, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
