/* tests/unit/test_card_health.c - unhealthy cards in the placement core:
 * a card added with egpu_gpu_spec.unhealthy takes no new
 * pod (the card tier sees it full, for shares and whole cards, and the
 * fragmentation measure counts no idle compute on it), a refusal names it
 * with its note, and pods already on it are counted as on any card.
 */
#include "testutil.h"

/* A node "n" with two V100 cards (16384 MiB); card 0 unhealthy with note. */
static struct egpu_node *node_with_bad_card(struct egpu_cluster *c, const char *note)
{
    const struct egpu_gpu_spec gpus[2] = {
        {.uuid = "GPU-0", .index = 0, .model = "V100M16", .mem_mib = 16384, .unhealthy = note},
        {.uuid = "GPU-1", .index = 1, .model = "V100M16", .mem_mib = 16384},
    };
    const struct egpu_node_spec spec = {
        .name = "n", .cpu_milli = 64000, .mem_mib = 262144, .ngpus = 2, .gpus = gpus};
    struct egpu_error err = {0};

    if (egpu_cluster_add_node(c, &spec, &err) != 0)
        fail_msg("add node: %s", err.msg);
    return egpu_cluster_node(c, "n");
}

static struct egpu_placer *binpack(void)
{
    struct egpu_placer_config cfg = {
        .node_policy = EGPU_POLICY_BINPACK, .card_policy = EGPU_POLICY_BINPACK, .seed = 1};
    struct egpu_error err = {0};
    struct egpu_placer *p = egpu_placer_new(&cfg, &err);

    assert_non_null(p);
    return p;
}

static void test_unhealthy_card_takes_no_new_pod(void **state)
{
    struct egpu_cluster *c = egpu_cluster_new();
    struct egpu_placer *p = binpack();
    struct egpu_node *n;
    struct egpu_pod_request r;
    struct egpu_pick pick;
    char why[512];

    (void)state;
    n = node_with_bad_card(c, "n-gpu0 (Unhealthy: XID 79)");
    assert_string_equal(n->gpus[0].unhealthy, "n-gpu0 (Unhealthy: XID 79)");
    assert_null(n->gpus[1].unhealthy);
    /* binpack would put a share on the fuller card; card 0 is empty like
     * card 1, and the lower index wins a tie: yet the share goes to card 1. */
    r = tu_request(1000, 1024, 30, 0);
    assert_true(egpu_placer_can_host(p, c, n, &r, &pick, why, sizeof(why)));
    assert_int_equal(pick.nshares, 1);
    assert_int_equal(pick.shares[0].gpu, 1);
    /* Two whole cards: only one card takes pods. The refusal names the bad
     * card first, then the card tier's reason. */
    r = tu_request(1000, 1024, 200, 0);
    assert_false(egpu_placer_can_host(p, c, n, &r, &pick, why, sizeof(why)));
    assert_string_equal(why, "card n-gpu0 (Unhealthy: XID 79) takes no new pods; container 0 "
                             "needs 2 whole free cards, node has 1");
    /* A pod already on the bad card is counted there (a relist, a restart). */
    tu_use_card(c, n, "old", 0, 50);
    assert_int_equal(n->gpus[0].used_core_milli, 500);
    assert_int_equal(c->used_core_milli, 500);
    /* Card 1 full too: nothing fits, and the reason still names card 0. */
    tu_use_card(c, n, "full", 1, 100);
    r = tu_request(1000, 1024, 10, 0);
    assert_false(egpu_placer_can_host(p, c, n, &r, &pick, why, sizeof(why)));
    assert_non_null(strstr(why, "card n-gpu0 (Unhealthy: XID 79) takes no new pods; "));
    assert_int_equal(egpu_cluster_release(c, "old", NULL), 0);
    assert_int_equal(n->gpus[0].used_core_milli, 0);
    egpu_placer_free(p);
    egpu_cluster_free(c);
}

/* Healthy cards: an empty note is healthy, and the refusal is unchanged. */
static void test_empty_note_is_healthy(void **state)
{
    struct egpu_cluster *c = egpu_cluster_new();
    struct egpu_placer *p = binpack();
    struct egpu_node *n;
    struct egpu_pod_request r = tu_request(1000, 1024, 200, 0);
    struct egpu_pick pick;
    char why[512];

    (void)state;
    n = node_with_bad_card(c, "");
    assert_null(n->gpus[0].unhealthy);
    assert_true(egpu_placer_can_host(p, c, n, &r, &pick, why, sizeof(why)));
    r = tu_request(1000, 1024, 300, 0);
    assert_false(egpu_placer_can_host(p, c, n, &r, &pick, why, sizeof(why)));
    assert_string_equal(why, "container 0 needs 3 whole free cards, node has 2");
    egpu_placer_free(p);
    egpu_cluster_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unhealthy_card_takes_no_new_pod),
        cmocka_unit_test(test_empty_note_is_healthy),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
