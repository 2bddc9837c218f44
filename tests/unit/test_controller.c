/* tests/unit/test_controller.c - egpu-controller's pure parts
 * (src/controller/queue.c, inventory.c, place.c): the work queue's dedup,
 * processing, delays and backoff; the inventory built from GPU objects and
 * Nodes with a class's models and nodeSelector and existing ElasticGPUs
 * counted, and kept current by unreserve and reserve; pods counted from
 * their elasticgpu.io/assigned (claim pods inside their ElasticGPU, never
 * twice) and uncounted when they finish; the node and card
 * chosen for claims of each kind; and a scheduler's selection checked.
 *
 * Objects are written with ' for " (tu_json() swaps them) to stay readable. */
#include "testutil.h"
#include "testjson.h"

#include <errno.h>
#include <jansson.h>
#include <time.h>

#include "egpu/controller.h"

static long long mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- queue ---- */

static void expect_get(struct egpu_controller_queue *qu, const char *want)
{
    char *k = NULL;

    assert_int_equal(egpu_controller_queue_get(qu, 0, &k), 0);
    assert_string_equal(k, want);
    egpu_free(k);
}

static void test_queue_fifo_dedup(void **state)
{
    struct egpu_controller_queue *qu = egpu_controller_queue_new(0, 0);
    char *k = NULL;

    (void)state;
    assert_int_equal(egpu_controller_queue_add(qu, "a"), 0);
    assert_int_equal(egpu_controller_queue_add(qu, "b"), 0);
    assert_int_equal(egpu_controller_queue_add(qu, "a"), 0); /* waits already: once */
    assert_int_equal(egpu_controller_queue_len(qu), 2);
    expect_get(qu, "a");
    expect_get(qu, "b");
    assert_int_equal(egpu_controller_queue_get(qu, 0, &k), -ETIMEDOUT);
    egpu_controller_queue_done(qu, "a");
    egpu_controller_queue_done(qu, "b");
    assert_int_equal(egpu_controller_queue_len(qu), 0);
    egpu_controller_queue_free(qu);
    assert_int_equal(egpu_alloc_live(), 0);
}

static void test_queue_added_while_processing(void **state)
{
    struct egpu_controller_queue *qu = egpu_controller_queue_new(0, 0);
    char *k = NULL;

    (void)state;
    assert_int_equal(egpu_controller_queue_add(qu, "a"), 0);
    expect_get(qu, "a");
    /* Added while a worker holds it: not handed out twice at once. */
    assert_int_equal(egpu_controller_queue_add(qu, "a"), 0);
    assert_int_equal(egpu_controller_queue_get(qu, 0, &k), -ETIMEDOUT);
    egpu_controller_queue_done(qu, "a"); /* queued again now */
    expect_get(qu, "a");
    egpu_controller_queue_done(qu, "a");
    assert_int_equal(egpu_controller_queue_get(qu, 0, &k), -ETIMEDOUT);
    egpu_controller_queue_free(qu);
    assert_int_equal(egpu_alloc_live(), 0);
}

static void test_queue_delay_and_backoff(void **state)
{
    struct egpu_controller_queue *qu = egpu_controller_queue_new(20, 80);
    long long t0 = mono_ms();
    char *k = NULL;

    (void)state;
    assert_int_equal(egpu_controller_queue_add_after(qu, "late", 60), 0);
    assert_int_equal(egpu_controller_queue_add_after(qu, "soon", 10), 0);
    assert_int_equal(egpu_controller_queue_len(qu), 2);
    assert_int_equal(egpu_controller_queue_get(qu, 1000, &k), 0);
    assert_string_equal(k, "soon");
    assert_true(mono_ms() - t0 >= 10);
    egpu_controller_queue_done(qu, k);
    egpu_free(k);
    /* An add now beats the timer. */
    assert_int_equal(egpu_controller_queue_add(qu, "late"), 0);
    expect_get(qu, "late");
    assert_true(mono_ms() - t0 < 60);
    egpu_controller_queue_done(qu, "late");
    assert_int_equal(egpu_controller_queue_get(qu, 100, &k), -ETIMEDOUT); /* the timer went too */
    /* Backoff: 20, 40, 80, 80 (max), then forget starts over. */
    assert_int_equal(egpu_controller_queue_add_backoff(qu, "x"), 20);
    t0 = mono_ms();
    assert_int_equal(egpu_controller_queue_get(qu, 1000, &k), 0);
    assert_true(mono_ms() - t0 >= 19);
    egpu_controller_queue_done(qu, k);
    egpu_free(k);
    assert_int_equal(egpu_controller_queue_add_backoff(qu, "x"), 40);
    assert_int_equal(egpu_controller_queue_get(qu, 1000, &k), 0);
    egpu_controller_queue_done(qu, k);
    egpu_free(k);
    assert_int_equal(egpu_controller_queue_add_backoff(qu, "x"), 80);
    assert_int_equal(egpu_controller_queue_get(qu, 1000, &k), 0);
    egpu_controller_queue_done(qu, k);
    egpu_free(k);
    assert_int_equal(egpu_controller_queue_add_backoff(qu, "x"), 80);
    assert_int_equal(egpu_controller_queue_failures(qu, "x"), 4);
    egpu_controller_queue_forget(qu, "x");
    assert_int_equal(egpu_controller_queue_failures(qu, "x"), 0);
    assert_int_equal(egpu_controller_queue_get(qu, 1000, &k), 0);
    egpu_controller_queue_done(qu, k);
    egpu_free(k);
    assert_int_equal(egpu_controller_queue_add_backoff(qu, "x"), 20);
    egpu_controller_queue_shutdown(qu);
    assert_int_equal(egpu_controller_queue_get(qu, -1, &k), -ESHUTDOWN);
    assert_int_equal(egpu_controller_queue_add(qu, "y"), -ESHUTDOWN);
    egpu_controller_queue_free(qu);
    assert_int_equal(egpu_alloc_live(), 0);
}

/* ---- inventory and placement ---- */

/* Two A100 nodes (zone a and b, 2 cards of 40960 MiB), one V100 node (zone
 * a, 1 card of 16384 MiB), a card on a node without a Node object, an
 * unhealthy card and a malformed one. */
static json_t *gpus(void)
{
    return tu_json("["
                   "{'metadata':{'name':'n1-g0'},'spec':{'nodeName':'n1','index':0,'uuid':'U10',"
                   "'model':'A100','memory':40960}},"
                   "{'metadata':{'name':'n1-g1'},'spec':{'nodeName':'n1','index':1,'uuid':'U11',"
                   "'model':'A100','memory':40960}},"
                   "{'metadata':{'name':'n2-g0'},'spec':{'nodeName':'n2','index':0,'uuid':'U20',"
                   "'model':'A100','memory':40960}},"
                   "{'metadata':{'name':'n2-g1'},'spec':{'nodeName':'n2','index':1,'uuid':'U21',"
                   "'model':'A100','memory':40960}},"
                   "{'metadata':{'name':'v-g0'},'spec':{'nodeName':'v','index':0,'uuid':'UV0',"
                   "'model':'V100','memory':16384}},"
                   "{'metadata':{'name':'gone-g0'},'spec':{'nodeName':'gone','index':0,'uuid':'UG',"
                   "'model':'A100','memory':40960}},"
                   "{'metadata':{'name':'v-g1'},'spec':{'nodeName':'v','index':1,'uuid':'UV1',"
                   "'model':'V100','memory':16384},'status':{'health':'Unhealthy'}},"
                   "{'metadata':{'name':'bad'},'spec':{'nodeName':'v','index':'x'}}"
                   "]");
}

static json_t *nodes(void)
{
    return tu_json("[{'metadata':{'name':'n1','labels':{'zone':'a'}}},"
                   "{'metadata':{'name':'n2','labels':{'zone':'b'}}},"
                   "{'metadata':{'name':'v','labels':{'zone':'a'}}}]");
}

static void decode_class(const char *text, struct egpu_api_class *cls)
{
    json_t *o = tu_json(text);
    struct egpu_error err = {0};

    if (egpu_api_class_decode(o, cls, &err) != 0)
        fail_msg("class: %s", err.msg);
    json_decref(o);
}

static void decode_claim(const char *text, struct egpu_api_claim *c)
{
    json_t *o = tu_json(text);
    struct egpu_error err = {0};

    if (egpu_api_claim_decode(o, c, &err) != 0)
        fail_msg("claim: %s", err.msg);
    json_decref(o);
}

static void decode_egpu(const char *text, struct egpu_api_egpu *e)
{
    json_t *o = tu_json(text);
    struct egpu_error err = {0};

    if (egpu_api_egpu_decode(o, e, &err) != 0)
        fail_msg("egpu: %s", err.msg);
    json_decref(o);
}

static struct egpu_api_class share_cls, phys_cls;

static void build(const struct egpu_api_class *cls, struct egpu_controller_inventory *inv)
{
    json_t *g = gpus(), *n = nodes();
    struct egpu_error err = {0};

    if (egpu_controller_inventory_build(g, n, cls, inv, &err) != 0)
        fail_msg("build: %s", err.msg);
    json_decref(g);
    json_decref(n);
}

static void test_inventory_filters(void **state)
{
    struct egpu_api_class a100a;
    struct egpu_controller_inventory inv;

    (void)state;
    build(NULL, &inv);
    /* 5 cards on n1, n2, v; gone-g0 (no Node), v-g1 (unhealthy), bad left out. */
    assert_int_equal(inv.ncards, 5);
    assert_int_equal(inv.skipped, 3);
    assert_int_equal(inv.cluster->nnodes, 3);
    assert_non_null(egpu_map_get(inv.by_name, "v-g0"));
    assert_null(egpu_map_get(inv.by_name, "gone-g0"));
    egpu_controller_inventory_free(&inv);

    decode_class("{'metadata':{'name':'a'},'provisioner':'gpushare.provisioner.elasticgpu.io',"
                 "'parameters':{'models':'A100','nodeSelector':'zone=a'}}",
                 &a100a);
    build(&a100a, &inv);
    assert_int_equal(inv.ncards, 2);
    assert_int_equal(inv.cluster->nnodes, 1);
    assert_non_null(egpu_cluster_node(inv.cluster, "n1"));
    egpu_controller_inventory_free(&inv);
    assert_int_equal(egpu_alloc_live(), 0);
}

static void test_reserve_counts_existing(void **state)
{
    struct egpu_controller_inventory inv;
    struct egpu_api_egpu share, whole, other, over, failed, released;
    struct egpu_error err = {0};
    const struct egpu_node *n1;

    (void)state;
    decode_egpu("{'metadata':{'name':'s'},'spec':{'capacity':{'elasticgpu.io/gpu-core':60,"
                "'elasticgpu.io/gpu-memory':1000},'nodeName':'n1','gpuShare':{'gpuName':'n1-g1'}}}",
                &share);
    decode_egpu("{'metadata':{'name':'w'},'spec':{'capacity':{'elasticgpu.io/gpu-core':100},"
                "'nodeName':'n1','physicalGPU':{'gpuNames':['n1-g0']}}}",
                &whole);
    decode_egpu("{'metadata':{'name':'o'},'spec':{'capacity':{'elasticgpu.io/gpu-core':50},"
                "'nodeName':'gone','gpuShare':{'gpuName':'gone-g0'}}}",
                &other);
    decode_egpu("{'metadata':{'name':'over'},'spec':{'capacity':{'elasticgpu.io/gpu-core':50},"
                "'nodeName':'n1','gpuShare':{'gpuName':'n1-g1'}}}",
                &over);
    /* The phases hold capacity as egpu_api_egpu_reservation says: Failed
     * holds none, Released still holds its slice. */
    decode_egpu("{'metadata':{'name':'f'},'spec':{'capacity':{'elasticgpu.io/gpu-core':30},"
                "'nodeName':'n1','gpuShare':{'gpuName':'n1-g1'}},'status':{'phase':'Failed'}}",
                &failed);
    decode_egpu("{'metadata':{'name':'r'},'spec':{'capacity':{'elasticgpu.io/gpu-core':30,"
                "'elasticgpu.io/gpu-memory':500},'nodeName':'n1','gpuShare':{'gpuName':'n1-g1'}},"
                "'status':{'phase':'Released'}}",
                &released);
    build(NULL, &inv);
    assert_int_equal(egpu_controller_inventory_reserve(&inv, &share, &err), 0);
    assert_int_equal(egpu_controller_inventory_reserve(&inv, &whole, &err), 0);
    assert_non_null(egpu_cluster_assignment(inv.cluster, "elasticgpu:s"));
    assert_non_null(egpu_cluster_assignment(inv.cluster, "elasticgpu:w"));
    assert_int_equal(egpu_controller_inventory_reserve(&inv, &share, &err), EGPU_EALLOCATED);
    assert_int_equal(egpu_controller_inventory_reserve(&inv, &other, &err), -ENOENT);
    assert_int_equal(egpu_controller_inventory_reserve(&inv, &over, &err), EGPU_ENOFIT);
    assert_non_null(strstr(err.msg, "has 400 milli-GPU"));
    assert_int_equal(egpu_controller_inventory_reserve(&inv, &failed, &err), 0);
    assert_null(egpu_cluster_assignment(inv.cluster, "elasticgpu:f"));
    n1 = egpu_cluster_node(inv.cluster, "n1");
    assert_int_equal(n1->gpus[0].used_core_milli, 1000);
    assert_int_equal(n1->gpus[0].used_mem_mib, 40960);
    assert_int_equal(n1->gpus[1].used_core_milli, 600);
    assert_int_equal(n1->gpus[1].used_mem_mib, 1000);
    assert_int_equal(egpu_controller_inventory_reserve(&inv, &released, &err), 0);
    assert_int_equal(n1->gpus[1].used_core_milli, 900);
    assert_int_equal(n1->gpus[1].used_mem_mib, 1500);
    egpu_controller_inventory_free(&inv);
    assert_int_equal(egpu_alloc_live(), 0);
}

static void place(const struct egpu_api_class *cls, const char *claim,
                  const struct egpu_api_egpu *const *existing, size_t n, int want_rc,
                  struct egpu_controller_choice *out, struct egpu_error *err)
{
    struct egpu_controller_inventory inv;
    struct egpu_api_claim c;

    decode_claim(claim, &c);
    build(cls, &inv);
    for (size_t i = 0; i < n; i++) {
        struct egpu_error e = {0};
        int rc = egpu_controller_inventory_reserve(&inv, existing[i], &e);

        if (rc != 0 && rc != -ENOENT)
            fail_msg("reserve %s: %s", existing[i]->meta.name, e.msg);
    }
    memset(err, 0, sizeof(*err));
    assert_int_equal(egpu_controller_place(&inv, &c, cls, out, err), want_rc);
    egpu_controller_inventory_free(&inv);
}

#define CLAIM(req)                                                                               \
    "{'metadata':{'namespace':'t','name':'c','uid':'u-1'},'spec':{'resources':{'requests':{" req \
    "}}}}"

static void test_place_binpack_share(void **state)
{
    struct egpu_controller_choice ch;
    struct egpu_error err;
    struct egpu_api_egpu used;
    const struct egpu_api_egpu *ex[] = {&used};

    (void)state;
    /* binpack: the fullest card that fits; n2-g1 holds 50% already. */
    decode_egpu(
        "{'metadata':{'name':'s'},'spec':{'capacity':{'elasticgpu.io/gpu-core':50,"
        "'elasticgpu.io/gpu-memory':20000},'nodeName':'n2','gpuShare':{'gpuName':'n2-g1'}}}",
        &used);
    place(&share_cls, CLAIM("'elasticgpu.io/gpu-core':30,'elasticgpu.io/gpu-memory':4096"), ex, 1,
          0, &ch, &err);
    assert_string_equal(ch.node, "n2");
    assert_int_equal(ch.ngpus, 1);
    assert_string_equal(ch.gpu_names[0], "n2-g1");
    assert_string_equal(ch.model, "A100");
    assert_int_equal(ch.source, EGPU_API_PROVISIONER_GPUSHARE);
    assert_int_equal(ch.core_pct, 30);
    assert_int_equal(ch.mem_mib, 4096);
    assert_false(ch.from_tflops);
    /* 60% does not fit beside the 50%: another card. */
    place(&share_cls, CLAIM("'elasticgpu.io/gpu-core':60"), ex, 1, 0, &ch, &err);
    assert_string_not_equal(ch.gpu_names[0], "n2-g1");
    /* Memory larger than any card: no fit, said in a sentence. */
    place(&share_cls, CLAIM("'elasticgpu.io/gpu-core':10,'elasticgpu.io/gpu-memory':50000"), ex, 1,
          EGPU_ENOFIT, &ch, &err);
    assert_string_equal(err.msg, "no card has 10% of its compute and 50000 MiB free among the 5 "
                                 "cards class share may use");
}

static void test_place_physical_and_kind(void **state)
{
    struct egpu_controller_choice ch;
    struct egpu_error err;
    struct egpu_api_egpu used;
    const struct egpu_api_egpu *ex[] = {&used};

    (void)state;
    decode_egpu("{'metadata':{'name':'s'},'spec':{'capacity':{'elasticgpu.io/gpu-core':10},"
                "'nodeName':'n1','gpuShare':{'gpuName':'n1-g0'}}}",
                &used);
    /* Two whole cards: only n2 has both free (n1-g0 holds a share). */
    place(&phys_cls, CLAIM("'elasticgpu.io/gpu-core':200"), ex, 1, 0, &ch, &err);
    assert_string_equal(ch.node, "n2");
    assert_int_equal(ch.ngpus, 2);
    assert_string_equal(ch.gpu_names[0], "n2-g0");
    assert_string_equal(ch.gpu_names[1], "n2-g1");
    assert_int_equal(ch.source, EGPU_API_PROVISIONER_PHYSICAL);
    assert_int_equal(ch.core_pct, 200);
    place(&phys_cls, CLAIM("'elasticgpu.io/gpu-core':300"), ex, 1, EGPU_ENOFIT, &ch, &err);
    assert_string_equal(err.msg, "no node has 3 whole free card(s) among the 5 cards class phys "
                                 "may use");
    place(&phys_cls, CLAIM("'elasticgpu.io/gpu-core':30"), NULL, 0, EGPU_ERANGE, &ch, &err);
    assert_string_equal(err.msg, "the claim asks a share of one card but class phys provisions "
                                 "whole cards (physical.provisioner.elasticgpu.io)");
}

static void test_place_tflops(void **state)
{
    struct egpu_api_class cls, nopeak;
    struct egpu_controller_choice ch;
    struct egpu_error err;

    (void)state;
    decode_class("{'metadata':{'name':'tf'},'provisioner':'gpushare.provisioner.elasticgpu.io',"
                 "'parameters':{'tflops.A100':'312','tflops.V100':'125'}}",
                 &cls);
    /* 100 TFLOPS: 33% of an A100, 80% of a V100: the V100 (largest percent) first. */
    place(&cls, CLAIM("'elasticgpu.io/gpu-tflops':100"), NULL, 0, 0, &ch, &err);
    assert_string_equal(ch.node, "v");
    assert_string_equal(ch.model, "V100");
    assert_int_equal(ch.core_pct, 80);
    assert_true(ch.from_tflops);
    /* 200 TFLOPS: above a V100, 65% of an A100. */
    place(&cls, CLAIM("'elasticgpu.io/gpu-tflops':200"), NULL, 0, 0, &ch, &err);
    assert_string_equal(ch.model, "A100");
    assert_int_equal(ch.core_pct, 65);
    /* 400: no card holds it. */
    place(&cls, CLAIM("'elasticgpu.io/gpu-tflops':400"), NULL, 0, EGPU_ERANGE, &ch, &err);
    assert_non_null(strstr(err.msg, "on every card class tf may use"));
    decode_class("{'metadata':{'name':'np'},'provisioner':'gpushare.provisioner.elasticgpu.io',"
                 "'parameters':{'tflops.H100':'900'}}",
                 &nopeak);
    place(&nopeak, CLAIM("'elasticgpu.io/gpu-tflops':1"), NULL, 0, EGPU_ERANGE, &ch, &err);
    assert_string_equal(err.msg, "class np has no tflops.<model> parameter for any of the 5 cards "
                                 "it may use");
}

/* The scheduler's selection of a WaitForFirstConsumer claim, checked as any
 * placement: each way it can be wrong, with the sentence the claim's
 * condition gets; a good one is taken as it is, and inv is unchanged. */
static void place_at(const struct egpu_api_class *cls, const char *claim, const char *node,
                     const char *gpus, int want_rc, struct egpu_controller_choice *out,
                     struct egpu_error *err)
{
    struct egpu_controller_inventory inv;
    struct egpu_api_claim c;
    struct egpu_api_egpu used;
    struct egpu_error e = {0};

    decode_claim(claim, &c);
    decode_egpu("{'metadata':{'name':'s'},'spec':{'capacity':{'elasticgpu.io/gpu-core':80,"
                "'elasticgpu.io/gpu-memory':1000},'nodeName':'n1','gpuShare':{'gpuName':'n1-g0'}}}",
                &used);
    build(cls, &inv);
    if (egpu_controller_inventory_reserve(&inv, &used, &e) != 0 && e.code != -ENOENT)
        fail_msg("reserve: %s", e.msg);
    memset(err, 0, sizeof(*err));
    assert_int_equal(egpu_controller_place_at(&inv, &c, cls, node, gpus, out, err), want_rc);
    if (want_rc == 0) {
        /* Only the ElasticGPU's reservation is held: the trial left nothing. */
        const struct egpu_node *n = egpu_cluster_node(inv.cluster, node);

        assert_int_equal(inv.cluster->npods, egpu_cluster_node(inv.cluster, "n1") ? 1 : 0);
        for (uint32_t i = 0; i < n->ngpus; i++)
            assert_int_equal(n->gpus[i].used_core_milli,
                             strcmp(node, "n1") == 0 && i == 0 ? 800 : 0);
    }
    egpu_controller_inventory_free(&inv);
}

static void test_place_at_selection(void **state)
{
    struct egpu_api_class a, tf;
    struct egpu_controller_choice ch;
    struct egpu_error err;

    (void)state;
    place_at(&share_cls, CLAIM("'elasticgpu.io/gpu-core':20,'elasticgpu.io/gpu-memory':2048"), "n1",
             "n1-g0", 0, &ch, &err);
    assert_string_equal(ch.node, "n1");
    assert_int_equal(ch.ngpus, 1);
    assert_string_equal(ch.gpu_names[0], "n1-g0");
    assert_string_equal(ch.model, "A100");
    assert_int_equal(ch.source, EGPU_API_PROVISIONER_GPUSHARE);
    assert_int_equal(ch.core_pct, 20);
    assert_int_equal(ch.mem_mib, 2048);
    /* No room: 80% held, 30% asked. */
    place_at(&share_cls, CLAIM("'elasticgpu.io/gpu-core':30"), "n1", "n1-g0", EGPU_ENOFIT, &ch,
             &err);
    assert_string_equal(err.msg, "no room on the selected node n1: card U10 has 200 milli-GPU "
                                 "and 39960 MiB free; the reservation asks 300 milli-GPU and "
                                 "0 MiB");
    place_at(&phys_cls, CLAIM("'elasticgpu.io/gpu-core':200"), "n1", "n1-g1,n1-g0", EGPU_ENOFIT,
             &ch, &err);
    assert_non_null(strstr(err.msg, "no room on the selected node n1: card U10"));
    /* Whole cards, in the order given. */
    place_at(&phys_cls, CLAIM("'elasticgpu.io/gpu-core':200"), "n2", "n2-g1,n2-g0", 0, &ch, &err);
    assert_int_equal(ch.ngpus, 2);
    assert_string_equal(ch.gpu_names[0], "n2-g1");
    assert_string_equal(ch.gpu_names[1], "n2-g0");
    assert_int_equal(ch.source, EGPU_API_PROVISIONER_PHYSICAL);
    assert_int_equal(ch.core_pct, 200);
    place_at(&phys_cls, CLAIM("'elasticgpu.io/gpu-core':200"), "n2", "n2-g1", EGPU_ERANGE, &ch,
             &err);
    assert_string_equal(err.msg, "elasticgpu.io/selected-gpus names 1 card(s); the claim asks 2");
    place_at(&phys_cls, CLAIM("'elasticgpu.io/gpu-core':200"), "n2", "n2-g1,n2-g1", EGPU_ERANGE,
             &ch, &err);
    assert_string_equal(err.msg, "elasticgpu.io/selected-gpus names GPU n2-g1 twice");
    place_at(&share_cls, CLAIM("'elasticgpu.io/gpu-core':20"), "n2", "n2-g0,n2-g1", EGPU_ERANGE,
             &ch, &err);
    assert_string_equal(err.msg,
                        "elasticgpu.io/selected-gpus names more than the 1 card(s) the claim asks");
    /* Malformed lists. */
    place_at(&share_cls, CLAIM("'elasticgpu.io/gpu-core':20"), "n2", "", EGPU_ERANGE, &ch, &err);
    assert_string_equal(err.msg, "elasticgpu.io/selected-gpus \"\" is not a list of GPU names "
                                 "separated by commas");
    place_at(&phys_cls, CLAIM("'elasticgpu.io/gpu-core':200"), "n2", "n2-g0,", EGPU_ERANGE, &ch,
             &err);
    assert_string_equal(err.msg, "elasticgpu.io/selected-gpus \"n2-g0,\" is not a list of GPU "
                                 "names separated by commas");
    /* Cards the class may not use, or on another node than selected. */
    place_at(&share_cls, CLAIM("'elasticgpu.io/gpu-core':20"), "n2", "n1-g1", EGPU_ERANGE, &ch,
             &err);
    assert_string_equal(err.msg, "GPU n1-g1 is on node n1, not on the selected node n2");
    place_at(&share_cls, CLAIM("'elasticgpu.io/gpu-core':20"), "v", "v-g1", EGPU_ERANGE, &ch, &err);
    assert_string_equal(err.msg, "GPU v-g1 is not a card class share may use (no such GPU "
                                 "object, unhealthy, or a model the class does not allow)");
    place_at(&share_cls, CLAIM("'elasticgpu.io/gpu-core':20"), "gone", "gone-g0", EGPU_ERANGE, &ch,
             &err);
    assert_string_equal(err.msg, "node gone is not one class share may use (no Node object, not "
                                 "matched by its nodeSelector, or no healthy card of a model it "
                                 "allows)");
    decode_class("{'metadata':{'name':'a'},'provisioner':'gpushare.provisioner.elasticgpu.io',"
                 "'parameters':{'models':'A100','nodeSelector':'zone=a'}}",
                 &a);
    place_at(&a, CLAIM("'elasticgpu.io/gpu-core':20"), "n2", "n2-g0", EGPU_ERANGE, &ch, &err);
    assert_non_null(strstr(err.msg, "node n2 is not one class a may use"));
    place_at(&a, CLAIM("'elasticgpu.io/gpu-core':20"), "v", "v-g0", EGPU_ERANGE, &ch, &err);
    assert_non_null(strstr(err.msg, "node v is not one class a may use"));
    place_at(&phys_cls, CLAIM("'elasticgpu.io/gpu-core':20"), "n2", "n2-g0", EGPU_ERANGE, &ch,
             &err);
    assert_string_equal(err.msg, "the claim asks a share of one card but class phys provisions "
                                 "whole cards (physical.provisioner.elasticgpu.io)");
    /* TFLOPS: the percent of the selected card's model. */
    decode_class("{'metadata':{'name':'tf'},'provisioner':'gpushare.provisioner.elasticgpu.io',"
                 "'parameters':{'tflops.A100':'312'}}",
                 &tf);
    place_at(&tf, CLAIM("'elasticgpu.io/gpu-tflops':100"), "n2", "n2-g0", 0, &ch, &err);
    assert_int_equal(ch.core_pct, 33);
    assert_true(ch.from_tflops);
    place_at(&tf, CLAIM("'elasticgpu.io/gpu-tflops':100"), "v", "v-g0", EGPU_ERANGE, &ch, &err);
    assert_string_equal(err.msg,
                        "class tf has no tflops.<model> parameter for GPU v-g0's model V100");
    place_at(&tf, CLAIM("'elasticgpu.io/gpu-tflops':400"), "n2", "n2-g0", EGPU_ERANGE, &ch, &err);
    assert_non_null(strstr(err.msg, "on GPU n2-g0"));
    assert_int_equal(egpu_alloc_live(), 0);
}

/* An inventory kept across changes: unreserve frees exactly what reserve
 * held, and the same ElasticGPU counted again after a change holds its new
 * size. */
static void test_inventory_unreserve(void **state)
{
    struct egpu_controller_inventory inv;
    struct egpu_api_egpu s, bigger;
    struct egpu_error err = {0};
    const struct egpu_node *n1;

    (void)state;
    decode_egpu("{'metadata':{'name':'s'},'spec':{'capacity':{'elasticgpu.io/gpu-core':60,"
                "'elasticgpu.io/gpu-memory':1000},'nodeName':'n1','gpuShare':{'gpuName':'n1-g1'}}}",
                &s);
    decode_egpu("{'metadata':{'name':'s'},'spec':{'capacity':{'elasticgpu.io/gpu-core':90},"
                "'nodeName':'n1','gpuShare':{'gpuName':'n1-g1'}}}",
                &bigger);
    build(NULL, &inv);
    n1 = egpu_cluster_node(inv.cluster, "n1");
    assert_int_equal(egpu_controller_inventory_reserve(&inv, &s, &err), 0);
    assert_int_equal(n1->gpus[1].used_core_milli, 600);
    assert_int_equal(n1->gpus[1].used_mem_mib, 1000);
    egpu_controller_inventory_unreserve(&inv, "s");
    assert_int_equal(n1->gpus[1].used_core_milli, 0);
    assert_int_equal(n1->gpus[1].used_mem_mib, 0);
    assert_null(egpu_cluster_assignment(inv.cluster, "elasticgpu:s"));
    egpu_controller_inventory_unreserve(&inv, "s"); /* nothing counted: nothing happens */
    egpu_controller_inventory_unreserve(&inv, "never");
    assert_int_equal(egpu_controller_inventory_reserve(&inv, &bigger, &err), 0);
    assert_int_equal(n1->gpus[1].used_core_milli, 900);
    assert_int_equal(inv.cluster->npods, 1);
    egpu_controller_inventory_free(&inv);
    assert_int_equal(egpu_alloc_live(), 0);
}

/* Decode pod text's holdings (egpu_controller_pod_holds) into *a. */
static void pod_holds(const char *text, struct egpu_assigned *a)
{
    struct egpu_api_pod_claim pc[EGPU_API_POD_CLAIMS_MAX];
    struct egpu_error err = {0};
    json_t *o = tu_json(text);
    size_t npc = 0;

    if (egpu_controller_pod_holds(o, a, pc, EGPU_API_POD_CLAIMS_MAX, &npc, &err) != 0)
        fail_msg("pod: %s", err.msg);
    json_decref(o);
}

#define POD(phase, assigned)                                                           \
    "{'metadata':{'namespace':'t','name':'p','annotations':{'elasticgpu.io/assigned':" \
    "'" assigned "'}},'spec':{'nodeName':'n1'},'status':{'phase':'" phase "'}}"
#define N1_FULL                                                                               \
    "{\\'node\\':\\'n1\\',\\'containers\\':[{\\'name\\':\\'a\\',\\'core\\':100,\\'memory\\':" \
    "40960,\\'gpus\\':[\\'U10\\',\\'U11\\']}]}"

/* A class's inventory on n1 only (zone a, A100). */
static void build_n1(struct egpu_controller_inventory *inv)
{
    static struct egpu_api_class a100a;

    decode_class("{'metadata':{'name':'a'},'provisioner':'gpushare.provisioner.elasticgpu.io',"
                 "'parameters':{'models':'A100','nodeSelector':'zone=a'}}",
                 &a100a);
    build(&a100a, inv);
}

/* The bug: a card that pods fill was offered to an Immediate claim. Now
 * what a running pod's elasticgpu.io/assigned holds is counted; the claim
 * goes elsewhere, or nowhere with the lack of room named; the pod's end
 * frees the card again. */
static void test_inventory_counts_pods(void **state)
{
    struct egpu_assigned *a = egpu_malloc(sizeof(*a));
    struct egpu_controller_inventory inv;
    struct egpu_api_claim c;
    struct egpu_controller_choice ch;
    struct egpu_error err = {0};
    const struct egpu_node *n1;

    (void)state;
    decode_claim(CLAIM("'elasticgpu.io/gpu-core':30,'elasticgpu.io/gpu-memory':4096"), &c);
    /* Whole cards: both of n1's, held by one container. */
    pod_holds(POD("Running", N1_FULL), a);
    assert_int_equal(a->ncontainers, 1);
    build(NULL, &inv);
    assert_int_equal(egpu_controller_inventory_count_pod(&inv, "t/p", a, NULL, &err), 0);
    n1 = egpu_cluster_node(inv.cluster, "n1");
    assert_int_equal(n1->gpus[0].used_core_milli, 1000);
    assert_int_equal(n1->gpus[1].used_core_milli, 1000);
    assert_int_equal(egpu_controller_place(&inv, &c, &share_cls, &ch, &err), 0);
    assert_string_not_equal(ch.node, "n1"); /* binpack would have taken n1 first */
    egpu_controller_inventory_free(&inv);

    /* The only cards a class may use are full: Pending, the room named. */
    build_n1(&inv);
    assert_int_equal(egpu_controller_inventory_count_pod(&inv, "t/p", a, NULL, &err), 0);
    assert_int_equal(egpu_controller_place(&inv, &c, NULL, &ch, &err), EGPU_ENOFIT);
    assert_string_equal(err.msg, "no card has 30% of its compute and 4096 MiB free among the 2 "
                                 "cards class (none) may use");
    /* Counting again replaces; uncounting frees. */
    assert_int_equal(egpu_controller_inventory_count_pod(&inv, "t/p", a, NULL, &err), 0);
    n1 = egpu_cluster_node(inv.cluster, "n1");
    assert_int_equal(n1->gpus[0].used_core_milli, 1000);
    egpu_controller_inventory_uncount_pod(&inv, "t/p");
    assert_int_equal(n1->gpus[0].used_core_milli, 0);
    assert_int_equal(inv.cluster->npods, 0);
    egpu_controller_inventory_uncount_pod(&inv, "t/p"); /* none counted: nothing happens */
    assert_int_equal(egpu_controller_place(&inv, &c, NULL, &ch, &err), 0);
    assert_string_equal(ch.node, "n1");
    egpu_controller_inventory_free(&inv);

    /* A finished pod holds nothing. */
    pod_holds(POD("Succeeded", N1_FULL), a);
    assert_int_equal(a->ncontainers, 0);
    pod_holds(POD("Failed", N1_FULL), a);
    assert_int_equal(a->ncontainers, 0);
    egpu_free(a);
    assert_int_equal(egpu_alloc_live(), 0);
}

/* A claim pod inside its ElasticGPU is counted once: inside it, while the
 * ElasticGPU is counted on exactly its cards and it fits; a second pod of
 * the same claim, or one on other cards, is counted beside. */
static void test_inventory_claim_pod_inside(void **state)
{
    struct egpu_assigned *a = egpu_malloc(sizeof(*a)), *b = egpu_malloc(sizeof(*b));
    const char *const in[] = {"e1"};
    struct egpu_controller_inventory inv;
    struct egpu_api_egpu e1;
    struct egpu_error err = {0};
    const struct egpu_node *n1;

    (void)state;
    decode_egpu("{'metadata':{'name':'e1'},'spec':{'capacity':{'elasticgpu.io/gpu-core':30,"
                "'elasticgpu.io/gpu-memory':4096},'nodeName':'n1','gpuShare':{'gpuName':'n1-g0'},"
                "'claimRef':{'namespace':'t','name':'c'}}}",
                &e1);
    pod_holds(POD("Running", "{\\'node\\':\\'n1\\',\\'containers\\':[{\\'name\\':\\'a\\',"
                             "\\'core\\':30,\\'memory\\':4096,\\'gpus\\':[\\'U10\\']}]}"),
              a);
    pod_holds(POD("Running", "{\\'node\\':\\'n1\\',\\'containers\\':[{\\'name\\':\\'a\\',"
                             "\\'core\\':30,\\'memory\\':4096,\\'gpus\\':[\\'U11\\']}]}"),
              b);
    build(NULL, &inv);
    n1 = egpu_cluster_node(inv.cluster, "n1");
    assert_int_equal(egpu_controller_inventory_reserve(&inv, &e1, &err), 0);
    assert_int_equal(egpu_controller_inventory_count_pod(&inv, "t/p", a, in, &err), 0);
    assert_int_equal(n1->gpus[0].used_core_milli, 300); /* once, not 600 */
    assert_int_equal(n1->gpus[0].used_mem_mib, 4096);
    /* A second user of the claim on the same card is counted beside. */
    assert_int_equal(egpu_controller_inventory_count_pod(&inv, "t/q", a, in, &err), 0);
    assert_int_equal(n1->gpus[0].used_core_milli, 600);
    egpu_controller_inventory_uncount_pod(&inv, "t/q");
    assert_int_equal(n1->gpus[0].used_core_milli, 300);
    /* On other cards than its ElasticGPU's: beside, on those cards. */
    assert_int_equal(egpu_controller_inventory_count_pod(&inv, "t/r", b, in, &err), 0);
    assert_int_equal(n1->gpus[1].used_core_milli, 300);
    egpu_controller_inventory_uncount_pod(&inv, "t/r");
    /* The first pod leaves: its ElasticGPU still holds the room. */
    egpu_controller_inventory_uncount_pod(&inv, "t/p");
    assert_int_equal(n1->gpus[0].used_core_milli, 300);
    assert_null(json_object_get(inv.occupants, "e1"));
    /* Larger than its ElasticGPU (another shape): beside. */
    a->containers[0].core_pct = 50;
    assert_int_equal(egpu_controller_inventory_count_pod(&inv, "t/p", a, in, &err), 0);
    assert_int_equal(n1->gpus[0].used_core_milli, 800);
    egpu_controller_inventory_free(&inv);
    egpu_free(a);
    egpu_free(b);
    assert_int_equal(egpu_alloc_live(), 0);
}

static void test_provisioned_name(void **state)
{
    char buf[EGPU_K8S_NAME_MAX];

    (void)state;
    assert_int_equal(egpu_controller_provisioned_name("1b4e28ba", buf, sizeof(buf)), 0);
    assert_string_equal(buf, "egpu-1b4e28ba");
    assert_int_equal(egpu_controller_provisioned_name("", buf, sizeof(buf)), -ENAMETOOLONG);
    assert_int_equal(egpu_controller_provisioned_name("abcdef", buf, 8), -ENAMETOOLONG);
}

static int setup(void **state)
{
    (void)state;
    decode_class("{'metadata':{'name':'share'},'provisioner':'gpushare.provisioner.elasticgpu.io'}",
                 &share_cls);
    decode_class("{'metadata':{'name':'phys'},'provisioner':'physical.provisioner.elasticgpu.io'}",
                 &phys_cls);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_queue_fifo_dedup),
        cmocka_unit_test(test_queue_added_while_processing),
        cmocka_unit_test(test_queue_delay_and_backoff),
        cmocka_unit_test(test_inventory_filters),
        cmocka_unit_test(test_reserve_counts_existing),
        cmocka_unit_test(test_place_binpack_share),
        cmocka_unit_test(test_place_physical_and_kind),
        cmocka_unit_test(test_place_tflops),
        cmocka_unit_test(test_place_at_selection),
        cmocka_unit_test(test_inventory_unreserve),
        cmocka_unit_test(test_inventory_counts_pods),
        cmocka_unit_test(test_inventory_claim_pod_inside),
        cmocka_unit_test(test_provisioned_name),
    };

    return cmocka_run_group_tests(tests, setup, NULL);
}
