/* tests/unit/test_cluster.c - the cluster model and its allocation bookkeeping.
 *
 * Covers src/core/cluster.c and src/core/assign.c through the public API in
 * egpu/core.h: adding and removing nodes, the GPU model table, committing and
 * releasing pods, and the promise that every total (per card, per node, per
 * cluster) stays exact and that a failed call leaves the cluster unchanged.
 *
 * DESIGN: each test states its cluster in a few lines with testutil.h. Two
 * helpers carry most of the checking: snap_take() folds every field a caller
 * can read into a snapshot, so "nothing changed" is one comparison, and
 * check_consistent() recomputes every total from the pods placed on each node,
 * so "every total is exact" is one call. Units follow the core: *_milli is
 * milli-GPU or millicores, *_mib is MiB.
 */
#include <errno.h>
#include <stdlib.h>

#include "testutil.h"

/* The card memory used by most tests, in MiB. */
#define CARD_MIB 16384

/* Everything a caller can read about a cluster, folded for comparison. */
struct snap {
    size_t nnodes;
    size_t npods;
    uint64_t gen;
    uint64_t ngpus;
    uint64_t core_milli;
    uint64_t used_core_milli;
    int64_t max_cpu_milli;
    uint32_t max_ngpus;
    uint64_t digest; /* every node's and card's fields, in slot order */
};

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    return h * 0x100000001b3ULL;
}

static void snap_take(const struct egpu_cluster *c, struct snap *s)
{
    uint64_t h = 1469598103934665603ULL;

    s->nnodes = c->nnodes;
    s->npods = c->npods;
    s->gen = c->gen;
    s->ngpus = c->ngpus;
    s->core_milli = c->core_milli;
    s->used_core_milli = c->used_core_milli;
    s->max_cpu_milli = c->max_cpu_milli;
    s->max_ngpus = c->max_ngpus;
    for (size_t i = 0; i < c->nnodes; i++) {
        const struct egpu_node *n = c->nodes[i];
        size_t npods = 0;

        h = mix(h, egpu_hash_str(n->name, 0));
        h = mix(h, n->slot);
        h = mix(h, n->gen);
        h = mix(h, (uint64_t)n->cpu_milli);
        h = mix(h, (uint64_t)n->mem_mib);
        h = mix(h, (uint64_t)n->used_cpu_milli);
        h = mix(h, (uint64_t)n->used_mem_mib);
        h = mix(h, n->model);
        h = mix(h, n->ngpus);
        h = mix(h, n->nlabels);
        for (uint32_t g = 0; g < n->ngpus; g++) {
            const struct egpu_gpu *gpu = &n->gpus[g];

            h = mix(h, egpu_hash_str(gpu->uuid, 0));
            h = mix(h, gpu->index);
            h = mix(h, gpu->model);
            h = mix(h, gpu->mem_mib);
            h = mix(h, gpu->core_milli);
            h = mix(h, gpu->used_core_milli);
            h = mix(h, gpu->used_mem_mib);
            h = mix(h, gpu->nshares);
        }
        for (const struct egpu_assignment *a = n->pods; a != NULL; a = a->next) {
            h = mix(h, egpu_hash_str(a->pod, 0));
            npods++;
        }
        h = mix(h, npods);
    }
    s->digest = h;
}

/* Assert that c still matches snapshot *before in every readable field. */
static void snap_expect(const struct egpu_cluster *c, const struct snap *before)
{
    struct snap now;

    snap_take(c, &now);
    assert_int_equal(now.nnodes, before->nnodes);
    assert_int_equal(now.npods, before->npods);
    assert_int_equal(now.gen, before->gen);
    assert_int_equal(now.ngpus, before->ngpus);
    assert_int_equal(now.core_milli, before->core_milli);
    assert_int_equal(now.used_core_milli, before->used_core_milli);
    assert_int_equal(now.max_cpu_milli, before->max_cpu_milli);
    assert_int_equal(now.max_ngpus, before->max_ngpus);
    assert_int_equal(now.digest, before->digest);
}

/* Recompute every total of c from the pods placed on its nodes and assert
 * that the stored totals match exactly, that each node sits in its slot and
 * is found by name, and that each pod is found by its key. */
static void check_consistent(const struct egpu_cluster *c)
{
    uint64_t ngpus = 0, core = 0, used = 0;
    int64_t max_cpu = 0;
    uint32_t max_ngpus = 0;
    size_t npods = 0;

    for (size_t i = 0; i < c->nnodes; i++) {
        const struct egpu_node *n = c->nodes[i];
        uint32_t gcore[EGPU_NODE_GPUS_MAX] = {0}, gmem[EGPU_NODE_GPUS_MAX] = {0};
        uint32_t gshares[EGPU_NODE_GPUS_MAX] = {0};
        int64_t cpu = 0, mem = 0;

        assert_int_equal(n->slot, i);
        assert_ptr_equal(egpu_cluster_node(c, n->name), n);
        for (const struct egpu_assignment *a = n->pods; a != NULL; a = a->next) {
            assert_ptr_equal(a->node, n);
            assert_ptr_equal(egpu_cluster_assignment(c, a->pod), a);
            cpu += a->cpu_milli;
            mem += a->mem_mib;
            for (uint32_t s = 0; s < a->nshares; s++) {
                assert_true(a->shares[s].gpu < n->ngpus);
                gcore[a->shares[s].gpu] += a->shares[s].core_milli;
                gmem[a->shares[s].gpu] += a->shares[s].mem_mib;
                gshares[a->shares[s].gpu]++;
            }
            npods++;
        }
        assert_int_equal(n->used_cpu_milli, cpu);
        assert_int_equal(n->used_mem_mib, mem);
        assert_true(n->used_cpu_milli <= n->cpu_milli);
        assert_true(n->used_mem_mib <= n->mem_mib);
        for (uint32_t g = 0; g < n->ngpus; g++) {
            assert_int_equal(n->gpus[g].used_core_milli, gcore[g]);
            assert_int_equal(n->gpus[g].used_mem_mib, gmem[g]);
            assert_int_equal(n->gpus[g].nshares, gshares[g]);
            assert_true(gcore[g] <= n->gpus[g].core_milli);
            assert_true(gmem[g] <= n->gpus[g].mem_mib);
            if (g > 0)
                assert_true(n->gpus[g - 1].index < n->gpus[g].index);
            used += gcore[g];
        }
        ngpus += n->ngpus;
        core += (uint64_t)n->ngpus * EGPU_GPU_MILLI;
        if (n->cpu_milli > max_cpu)
            max_cpu = n->cpu_milli;
        if (n->ngpus > max_ngpus)
            max_ngpus = n->ngpus;
    }
    assert_int_equal(c->ngpus, ngpus);
    assert_int_equal(c->core_milli, core);
    assert_int_equal(c->used_core_milli, used);
    assert_int_equal(c->npods, npods);
    assert_int_equal(c->max_cpu_milli, max_cpu);
    assert_int_equal(c->max_ngpus, max_ngpus);
}

/* Assert that nothing is allocated anywhere in c. */
static void check_all_free(const struct egpu_cluster *c)
{
    assert_int_equal(c->npods, 0);
    assert_int_equal(c->used_core_milli, 0);
    assert_int_equal(egpu_cluster_idle_milli(c), c->core_milli);
    for (size_t i = 0; i < c->nnodes; i++) {
        const struct egpu_node *n = c->nodes[i];

        assert_null(n->pods);
        assert_int_equal(n->used_cpu_milli, 0);
        assert_int_equal(n->used_mem_mib, 0);
        for (uint32_t g = 0; g < n->ngpus; g++) {
            assert_int_equal(n->gpus[g].used_core_milli, 0);
            assert_int_equal(n->gpus[g].used_mem_mib, 0);
            assert_int_equal(n->gpus[g].nshares, 0);
        }
    }
}

/* The pick that puts request r's cards, in container order, on the node
 * positions listed in gpus. A whole card takes the card's memory. */
static struct egpu_pick pick_on(const struct egpu_node *n, const struct egpu_pod_request *r,
                                const uint16_t *gpus)
{
    struct egpu_pick p;
    uint32_t k = 0;

    memset(&p, 0, sizeof(p));
    for (uint32_t i = 0; i < r->ncontainers; i++) {
        const struct egpu_container_request *cr = &r->containers[i];

        for (uint32_t j = 0; j < cr->ncards; j++, k++) {
            uint16_t g = gpus[k];
            bool whole = cr->core_milli == EGPU_GPU_MILLI;

            p.shares[k] = (struct egpu_share){.container = (uint16_t)i,
                                              .gpu = g,
                                              .core_milli = cr->core_milli,
                                              .mem_mib = whole ? n->gpus[g].mem_mib : cr->mem_mib};
        }
    }
    p.nshares = k;
    return p;
}

/* Assign pod with request r on the listed cards of n; asserts success. */
static void assign_ok(struct egpu_cluster *c, const char *pod, struct egpu_node *n,
                      const struct egpu_pod_request *r, const uint16_t *gpus)
{
    struct egpu_pick p = pick_on(n, r, gpus);
    struct egpu_error err = {0};

    if (egpu_cluster_assign(c, pod, n, r, &p, &err) != 0)
        fail_msg("assign %s on %s: %s", pod, n->name, err.msg);
}

/* Assign pod with pick p on n and expect code want, with the cluster and
 * the pod index unchanged. */
static void assign_refused(struct egpu_cluster *c, const char *pod, struct egpu_node *n,
                           const struct egpu_pod_request *r, const struct egpu_pick *p, int want)
{
    struct egpu_error err = {0};
    const struct egpu_assignment *held = egpu_cluster_assignment(c, pod);
    struct snap before;

    snap_take(c, &before);
    assert_int_equal(egpu_cluster_assign(c, pod, n, r, p, &err), want);
    assert_int_equal(err.code, want);
    assert_true(err.msg[0] != '\0');
    snap_expect(c, &before);
    assert_ptr_equal(egpu_cluster_assignment(c, pod), held);
    check_consistent(c);
}

/* Release pod; asserts success. */
static void release_ok(struct egpu_cluster *c, const char *pod)
{
    struct egpu_error err = {0};

    if (egpu_cluster_release(c, pod, &err) != 0)
        fail_msg("release %s: %s", pod, err.msg);
}

/* A request with a second container of core_pct percent appended to r. */
static struct egpu_pod_request with_container(struct egpu_pod_request r, int64_t core_pct,
                                              int64_t gpu_mem_mib)
{
    struct egpu_error err = {0};

    assert_int_equal(
        egpu_container_request_set(&r.containers[r.ncontainers], core_pct, gpu_mem_mib, &err), 0);
    r.ncontainers++;
    return r;
}

/* A node of another cluster, even one of the same name and slot, is
 * refused: the pod is not assigned and neither cluster changes. */
static void test_assign_refuses_node_of_another_cluster(void **state)
{
    struct egpu_cluster *c = egpu_cluster_new(), *other = egpu_cluster_new();
    struct egpu_node *mine, *theirs;
    struct egpu_pod_request r = tu_request(1000, 2048, 30, 4096);
    struct egpu_pick p;
    struct egpu_error err = {0};

    (void)state;
    mine = tu_add_node(c, "n", 32000, 65536, 2, "A", CARD_MIB);
    theirs = tu_add_node(other, "n", 32000, 65536, 2, "A", CARD_MIB);
    assert_int_equal(mine->slot, theirs->slot);
    p = pick_on(theirs, &r, (const uint16_t[]){0});
    assign_refused(c, "ns/p", theirs, &r, &p, -EINVAL);
    assert_int_equal(egpu_cluster_assign(c, "ns/p", theirs, &r, &p, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "is not in the cluster"));
    assert_null(egpu_cluster_assignment(other, "ns/p"));
    check_all_free(other);
    assign_ok(c, "ns/p", mine, &r, (const uint16_t[]){0});
    check_consistent(c);
    egpu_cluster_free(c);
    egpu_cluster_free(other);
}

/* Cards given out of index order come back sorted, with derived UUIDs,
 * copied labels and updated cluster totals. */
static void test_add_node_with_gpus(void **state)
{
    struct egpu_cluster *c = egpu_cluster_new();
    char key[] = "zone", value[] = "a";
    const struct egpu_label labels[] = {{key, value}, {"gpu", "yes"}};
    const struct egpu_gpu_spec gpus[] = {
        {.index = 3, .model = "V100M16", .mem_mib = 16000},
        {.uuid = "GPU-explicit", .index = 1, .model = "V100M16", .mem_mib = 16001},
        {.index = 2, .model = "V100M16", .mem_mib = 16002},
        {.index = 0, .model = "V100M16", .mem_mib = 16003},
    };
    const struct egpu_node_spec spec = {.name = "node-a",
                                        .cpu_milli = 96000,
                                        .mem_mib = 393216,
                                        .nlabels = 2,
                                        .labels = labels,
                                        .ngpus = 4,
                                        .gpus = gpus};
    static const uint32_t want_mem[] = {16003, 16001, 16002, 16000};
    struct egpu_error err = {0};
    struct egpu_node *n;
    int model;

    (void)state;
    assert_non_null(c);
    assert_int_equal(egpu_cluster_add_node(c, &spec, &err), 0);
    assert_int_equal(err.code, 0);
    n = egpu_cluster_node(c, "node-a");
    assert_non_null(n);
    assert_null(egpu_cluster_node(c, "node-b"));
    assert_string_equal(n->name, "node-a");
    assert_ptr_not_equal(n->name, spec.name);
    assert_int_equal(n->slot, 0);
    assert_ptr_equal(c->nodes[0], n);
    assert_true(n->gen > 0);
    assert_int_equal(n->gen, c->gen);
    assert_int_equal(n->cpu_milli, 96000);
    assert_int_equal(n->mem_mib, 393216);
    assert_int_equal(n->used_cpu_milli, 0);
    assert_int_equal(n->used_mem_mib, 0);
    assert_null(n->pods);

    /* The labels are copies: changing the caller's strings changes nothing. */
    key[0] = 'Z';
    value[0] = 'Z';
    assert_string_equal(egpu_node_label(n, "zone"), "a");
    assert_string_equal(egpu_node_label(n, "gpu"), "yes");
    assert_null(egpu_node_label(n, "Zone"));
    assert_null(egpu_node_label(n, "missing"));

    model = egpu_cluster_find_model(c, "V100M16");
    assert_int_equal(model, 0);
    assert_int_equal(n->model, model);
    assert_int_equal(n->ngpus, 4);
    for (uint32_t i = 0; i < 4; i++) {
        const struct egpu_gpu *g = &n->gpus[i];

        assert_int_equal(g->index, i);
        assert_int_equal(g->model, model);
        assert_int_equal(g->mem_mib, want_mem[i]);
        assert_int_equal(g->core_milli, EGPU_GPU_MILLI);
        assert_int_equal(g->used_core_milli, 0);
        assert_int_equal(g->used_mem_mib, 0);
        assert_int_equal(g->nshares, 0);
        assert_int_equal(egpu_gpu_free_core(g), EGPU_GPU_MILLI);
        assert_int_equal(egpu_gpu_free_mem(g), want_mem[i]);
    }
    assert_string_equal(n->gpus[0].uuid, "node-a-gpu0");
    assert_string_equal(n->gpus[1].uuid, "GPU-explicit");
    assert_string_equal(n->gpus[2].uuid, "node-a-gpu2");
    assert_string_equal(n->gpus[3].uuid, "node-a-gpu3");

    assert_int_equal(c->nnodes, 1);
    assert_int_equal(c->ngpus, 4);
    assert_int_equal(c->core_milli, 4000);
    assert_int_equal(c->used_core_milli, 0);
    assert_int_equal(egpu_cluster_idle_milli(c), 4000);
    assert_int_equal(c->max_cpu_milli, 96000);
    assert_int_equal(c->max_ngpus, 4);
    check_consistent(c);
    egpu_cluster_free(c);
}

/* A CPU-only node has no model and adds nothing to the GPU totals; a card
 * without a model name gets the "unknown" model. */
static void test_add_node_without_gpus(void **state)
{
    struct egpu_cluster *c = egpu_cluster_new();
    struct egpu_node *cpu, *big, *anon;
    const struct egpu_gpu_spec nomodel[] = {{.index = 0, .model = NULL, .mem_mib = 8},
                                            {.index = 1, .model = "", .mem_mib = 8}};
    const struct egpu_node_spec spec = {
        .name = "anon", .cpu_milli = 1000, .mem_mib = 1, .ngpus = 2, .gpus = nomodel};
    uint64_t gen0;

    (void)state;
    cpu = tu_add_node(c, "cpu-only", 64000, 262144, 0, NULL, 0);
    assert_non_null(cpu);
    assert_int_equal(cpu->ngpus, 0);
    assert_int_equal(cpu->model, EGPU_MODEL_NONE);
    assert_int_equal(cpu->nlabels, 0);
    assert_null(egpu_node_label(cpu, "zone"));
    assert_int_equal(c->ngpus, 0);
    assert_int_equal(c->core_milli, 0);
    assert_int_equal(c->max_cpu_milli, 64000);
    assert_int_equal(c->max_ngpus, 0);
    assert_int_equal(c->nmodels, 0);
    assert_int_equal(egpu_cluster_idle_milli(c), 0);
    gen0 = cpu->gen;

    big = tu_add_node(c, "big", 128000, 1, 2, "T4", CARD_MIB);
    assert_int_equal(big->slot, 1);
    assert_true(big->gen > gen0);
    assert_int_equal(cpu->gen, gen0);
    assert_int_equal(c->max_cpu_milli, 128000);
    assert_int_equal(c->max_ngpus, 2);

    assert_int_equal(egpu_cluster_add_node(c, &spec, NULL), 0);
    anon = egpu_cluster_node(c, "anon");
    assert_non_null(anon);
    assert_int_equal(anon->model, egpu_cluster_find_model(c, "unknown"));
    assert_int_equal(anon->gpus[1].model, anon->model);
    assert_int_equal(c->ngpus, 4);
    assert_int_equal(c->core_milli, 4000);
    check_consistent(c);
    egpu_cluster_free(c);
}

/* Add spec to c and expect code want with every readable field unchanged. */
static void add_refused(struct egpu_cluster *c, const struct egpu_node_spec *spec, int want)
{
    struct egpu_error err = {0};
    struct egpu_node *before = spec->name ? egpu_cluster_node(c, spec->name) : NULL;
    struct snap s;

    snap_take(c, &s);
    assert_int_equal(egpu_cluster_add_node(c, spec, &err), want);
    assert_int_equal(err.code, want);
    assert_true(err.msg[0] != '\0');
    snap_expect(c, &s);
    if (spec->name != NULL)
        assert_ptr_equal(egpu_cluster_node(c, spec->name), before);
    check_consistent(c);
    /* A NULL err is allowed and gives the same answer. */
    assert_int_equal(egpu_cluster_add_node(c, spec, NULL), want);
    snap_expect(c, &s);
}

/* Each invalid node is refused with its documented code and changes nothing;
 * afterwards the refused names and UUIDs are still free to use. */
static void test_add_node_errors_leave_cluster_unchanged(void **state)
{
    struct egpu_cluster *c = egpu_cluster_new();
    struct egpu_gpu_spec two[] = {{.index = 0, .model = "A", .mem_mib = CARD_MIB},
                                  {.index = 1, .model = "A", .mem_mib = CARD_MIB}};
    struct egpu_gpu_spec many[EGPU_NODE_GPUS_MAX + 1];
    struct egpu_node_spec spec = {.name = "x", .cpu_milli = 1000, .mem_mib = 1000, .ngpus = 2};
    struct egpu_node *a;

    (void)state;
    a = tu_add_node(c, "a", 8000, 32768, 2, "A", CARD_MIB);
    assign_ok(c, "p", a, &(struct egpu_pod_request){.cpu_milli = 1}, NULL);

    /* A name that is already present is -EEXIST. */
    spec.gpus = two;
    spec.name = "a";
    add_refused(c, &spec, -EEXIST);

    /* A UUID already present on node a: card 1 of "b" reuses a-gpu1, after
     * card 0 ("b-uuid0") would have been indexed. */
    spec.name = "b";
    two[0].uuid = "b-uuid0";
    two[1].uuid = "a-gpu1";
    add_refused(c, &spec, -EEXIST);
    two[1].uuid = NULL;

    /* Two cards of one node may not share a UUID either. */
    two[1].uuid = "b-uuid0";
    add_refused(c, &spec, -EEXIST);
    two[0].uuid = NULL;
    two[1].uuid = NULL;

    /* Mixed models are -EINVAL, a named model next to an unnamed one too. */
    two[1].model = "B";
    add_refused(c, &spec, -EINVAL);
    two[1].model = NULL;
    add_refused(c, &spec, -EINVAL);
    two[1].model = "A";

    /* A card index given twice is -EINVAL. */
    two[1].index = 0;
    add_refused(c, &spec, -EINVAL);
    two[1].index = 1;

    /* Negative CPU or memory is -EINVAL. */
    spec.cpu_milli = -1;
    add_refused(c, &spec, -EINVAL);
    spec.cpu_milli = 1000;
    spec.mem_mib = -1;
    add_refused(c, &spec, -EINVAL);
    spec.mem_mib = 1000;

    /* An empty or missing name is -EINVAL. */
    spec.name = "";
    add_refused(c, &spec, -EINVAL);
    spec.name = NULL;
    add_refused(c, &spec, -EINVAL);
    spec.name = "b";

    /* An empty UUID is -EINVAL. */
    two[0].uuid = "";
    add_refused(c, &spec, -EINVAL);
    two[0].uuid = NULL;

    /* More cards than a node may have are -EINVAL. */
    for (uint32_t i = 0; i <= EGPU_NODE_GPUS_MAX; i++)
        many[i] = (struct egpu_gpu_spec){.index = i, .model = "A", .mem_mib = 1};
    spec.gpus = many;
    spec.ngpus = EGPU_NODE_GPUS_MAX + 1;
    add_refused(c, &spec, -EINVAL);

    /* Exactly the maximum is fine, and the UUID "b-uuid0" that a refused
     * node had briefly indexed is free again. */
    spec.ngpus = EGPU_NODE_GPUS_MAX;
    many[0].uuid = "b-uuid0";
    assert_int_equal(egpu_cluster_add_node(c, &spec, NULL), 0);
    assert_int_equal(egpu_cluster_node(c, "b")->ngpus, EGPU_NODE_GPUS_MAX);
    assert_int_equal(c->max_ngpus, EGPU_NODE_GPUS_MAX);
    assert_int_equal(c->ngpus, 2 + EGPU_NODE_GPUS_MAX);
    assert_int_equal(c->npods, 1);
    check_consistent(c);
    egpu_cluster_free(c);
}

/* "On error the cluster is unchanged" includes the GPU model table: a node
 * refused after its model name was looked up must not leave that model
 * behind, or a cluster that sees many refused nodes fills the 64-entry table
 * with models no node has. */
static void test_add_node_error_keeps_model_table(void **state)
{
    struct egpu_cluster *c = egpu_cluster_new();
    const struct egpu_gpu_spec dup[] = {{.uuid = "a-gpu0", .index = 0, .model = "NEW"}};
    const struct egpu_gpu_spec fresh[] = {{.index = 0, .model = "NEW2"}};
    struct egpu_node_spec spec = {.name = "b", .ngpus = 1, .gpus = dup};
    uint16_t nmodels, after_dup, after_oom;
    int rc_dup, rc_oom, id_dup, id_oom;

    (void)state;
    (void)tu_add_node(c, "a", 1000, 1000, 1, "A", CARD_MIB);
    nmodels = c->nmodels;

    /* The first refusal is for a duplicate UUID. */
    rc_dup = egpu_cluster_add_node(c, &spec, NULL);
    after_dup = c->nmodels;
    id_dup = egpu_cluster_find_model(c, "NEW");

    /* The second is for lack of memory after the model name was copied (the 1st
     * allocation copies the name, the 2nd would be the node). */
    spec.gpus = fresh;
    egpu_alloc_fail_after(2);
    rc_oom = egpu_cluster_add_node(c, &spec, NULL);
    egpu_alloc_fail_after(0);
    after_oom = c->nmodels;
    id_oom = egpu_cluster_find_model(c, "NEW2");

    /* The cluster is freed before asserting, so a failure leaks nothing. */
    egpu_cluster_free(c);
    assert_int_equal(rc_dup, -EEXIST);
    assert_int_equal(rc_oom, -ENOMEM);
    assert_int_equal(after_dup, nmodels);
    assert_int_equal(id_dup, -ENOENT);
    assert_int_equal(after_oom, nmodels);
    assert_int_equal(id_oom, -ENOENT);
}

/* Model ids are dense and stable; masks set one bit per listed model. */
static void test_model_ids_and_mask(void **state)
{
    struct egpu_cluster *c = egpu_cluster_new();
    struct egpu_error err = {0};
    uint64_t mask = 0xdeadbeef;
    char name[16], longname[200];
    int a, b;

    (void)state;
    assert_int_equal(egpu_cluster_find_model(c, "A"), -ENOENT);
    a = egpu_cluster_model_id(c, "A");
    b = egpu_cluster_model_id(c, "B");
    assert_int_equal(a, 0);
    assert_int_equal(b, 1);
    assert_int_equal(egpu_cluster_model_id(c, "A"), a);
    assert_int_equal(egpu_cluster_find_model(c, "B"), b);
    assert_int_equal(c->nmodels, 2);
    assert_string_equal(c->models[a], "A");

    assert_int_equal(egpu_cluster_model_mask(c, "", &mask, &err), 0);
    assert_int_equal(mask, 0);
    assert_int_equal(egpu_cluster_model_mask(c, "A|B", &mask, &err), 0);
    assert_int_equal(mask, (1ULL << a) | (1ULL << b));
    assert_int_equal(egpu_cluster_model_mask(c, "B", &mask, &err), 0);
    assert_int_equal(mask, 1ULL << b);

    /* An unknown name joins the table. */
    assert_int_equal(egpu_cluster_model_mask(c, "B|C", &mask, &err), 0);
    assert_int_equal(egpu_cluster_find_model(c, "C"), 2);
    assert_int_equal(mask, (1ULL << b) | (1ULL << 2));

    /* Empty elements are syntax errors and leave *mask alone. */
    mask = 77;
    assert_int_equal(egpu_cluster_model_mask(c, "A||B", &mask, &err), EGPU_ESYNTAX);
    assert_int_equal(err.code, EGPU_ESYNTAX);
    assert_true(strstr(err.msg, "A||B") != NULL);
    assert_int_equal(mask, 77);
    assert_int_equal(egpu_cluster_model_mask(c, "|A", &mask, NULL), EGPU_ESYNTAX);
    assert_int_equal(egpu_cluster_model_mask(c, "A|", &mask, NULL), EGPU_ESYNTAX);
    assert_int_equal(egpu_cluster_model_mask(c, "|", &mask, NULL), EGPU_ESYNTAX);
    memset(longname, 'x', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    assert_int_equal(egpu_cluster_model_mask(c, longname, &mask, NULL), EGPU_ESYNTAX);
    assert_int_equal(mask, 77);

    /* The table holds EGPU_MODELS_MAX models and no more. */
    for (int i = c->nmodels; i < EGPU_MODELS_MAX; i++) {
        snprintf(name, sizeof(name), "M%d", i);
        assert_int_equal(egpu_cluster_model_id(c, name), i);
    }
    assert_int_equal(c->nmodels, EGPU_MODELS_MAX);
    assert_int_equal(egpu_cluster_model_id(c, "one-too-many"), EGPU_ELIMIT);
    assert_int_equal(egpu_cluster_model_mask(c, "A|one-too-many", &mask, &err), EGPU_ELIMIT);
    assert_int_equal(err.code, EGPU_ELIMIT);
    assert_int_equal(mask, 77);
    snprintf(name, sizeof(name), "M%d", EGPU_MODELS_MAX - 1);
    assert_int_equal(egpu_cluster_model_mask(c, name, &mask, NULL), 0);
    assert_int_equal(mask, 1ULL << (EGPU_MODELS_MAX - 1));
    egpu_cluster_free(c);
}

/* Assert card g of n holds exactly core, mem and nshares. */
static void expect_card(const struct egpu_node *n, uint16_t g, uint32_t core, uint32_t mem,
                        uint32_t nshares)
{
    assert_int_equal(n->gpus[g].used_core_milli, core);
    assert_int_equal(n->gpus[g].used_mem_mib, mem);
    assert_int_equal(n->gpus[g].nshares, nshares);
}

/* Shares, whole cards and a two-container pod, then releases in a different
 * order: every card, node and cluster total is exact at every step and
 * returns to zero. */
static void test_assign_release_totals_exact(void **state)
{
    struct egpu_cluster *c = egpu_cluster_new();
    struct egpu_node *n, *other;
    struct egpu_pod_request p1 = tu_request(1000, 2048, 30, 4096);
    struct egpu_pod_request p2 = tu_request(500, 1024, 50, 2000);
    struct egpu_pod_request p3 = tu_request(4000, 8192, 200, 10000);
    struct egpu_pod_request p4 = with_container(tu_request(250, 512, 20, 1000), 100, 0);
    struct egpu_pod_request cpu_only = tu_request(3000, 100, 0, 0);
    const struct egpu_assignment *a;
    char key[] = "ns/p1";

    (void)state;
    n = tu_add_node(c, "n", 32000, 65536, 4, "A", CARD_MIB);
    other = tu_add_node(c, "other", 32000, 65536, 2, "A", CARD_MIB);

    assign_ok(c, key, n, &p1, (const uint16_t[]){0});
    key[3] = 'X'; /* the key is copied: the caller's buffer may change */
    a = egpu_cluster_assignment(c, "ns/p1");
    assert_non_null(a);
    assert_null(egpu_cluster_assignment(c, "ns/X1"));
    assert_string_equal(a->pod, "ns/p1");
    assert_ptr_equal(a->node, n);
    assert_int_equal(a->cpu_milli, 1000);
    assert_int_equal(a->mem_mib, 2048);
    assert_int_equal(a->nshares, 1);
    assert_int_equal(a->shares[0].gpu, 0);
    assert_int_equal(a->shares[0].core_milli, 300);
    assert_int_equal(a->shares[0].mem_mib, 4096);
    expect_card(n, 0, 300, 4096, 1);
    assert_int_equal(n->used_cpu_milli, 1000);
    assert_int_equal(n->used_mem_mib, 2048);
    assert_int_equal(c->used_core_milli, 300);
    assert_int_equal(c->npods, 1);
    check_consistent(c);

    assign_ok(c, "ns/p2", n, &p2, (const uint16_t[]){0});
    expect_card(n, 0, 800, 6096, 2);
    assert_int_equal(n->used_cpu_milli, 1500);
    assert_int_equal(n->used_mem_mib, 3072);
    assert_int_equal(c->used_core_milli, 800);

    /* Each of two whole cards takes the card's whole memory. */
    assign_ok(c, "ns/p3", n, &p3, (const uint16_t[]){1, 2});
    expect_card(n, 1, 1000, CARD_MIB, 1);
    expect_card(n, 2, 1000, CARD_MIB, 1);
    assert_int_equal(n->used_cpu_milli, 5500);
    assert_int_equal(n->used_mem_mib, 11264);
    assert_int_equal(c->used_core_milli, 2800);
    assert_int_equal(egpu_cluster_idle_milli(c), 6000 - 2800);

    /* One pod takes a share filling card 0 and the whole of card 3. */
    assign_ok(c, "ns/p4", n, &p4, (const uint16_t[]){0, 3});
    expect_card(n, 0, 1000, 7096, 3);
    expect_card(n, 3, 1000, CARD_MIB, 1);
    assert_int_equal(n->used_cpu_milli, 5750);
    assert_int_equal(n->used_mem_mib, 11776);
    assert_int_equal(c->used_core_milli, 4000);
    assert_int_equal(egpu_cluster_assignment(c, "ns/p4")->nshares, 2);

    /* A CPU-only pod on the other node touches no card. */
    assign_ok(c, "ns/cpu", other, &cpu_only, NULL);
    assert_int_equal(other->used_cpu_milli, 3000);
    assert_int_equal(other->used_mem_mib, 100);
    expect_card(other, 0, 0, 0, 0);
    assert_int_equal(c->used_core_milli, 4000);
    assert_int_equal(c->npods, 5);
    assert_int_equal(n->used_cpu_milli, 5750);
    check_consistent(c);

    release_ok(c, "ns/p2");
    expect_card(n, 0, 500, 5096, 2);
    assert_int_equal(n->used_cpu_milli, 5250);
    assert_int_equal(n->used_mem_mib, 10752);
    assert_int_equal(c->used_core_milli, 3500);
    assert_int_equal(c->npods, 4);
    assert_null(egpu_cluster_assignment(c, "ns/p2"));
    check_consistent(c);

    release_ok(c, "ns/p3");
    expect_card(n, 1, 0, 0, 0);
    expect_card(n, 2, 0, 0, 0);
    assert_int_equal(n->used_cpu_milli, 1250);
    assert_int_equal(c->used_core_milli, 1500);
    check_consistent(c);

    /* The freed whole cards take a share again. */
    assign_ok(c, "ns/p2", n, &p2, (const uint16_t[]){2});
    expect_card(n, 2, 500, 2000, 1);
    check_consistent(c);

    release_ok(c, "ns/p1");
    release_ok(c, "ns/cpu");
    release_ok(c, "ns/p4");
    release_ok(c, "ns/p2");
    check_all_free(c);
    assert_int_equal(other->used_cpu_milli, 0);
    assert_int_equal(egpu_cluster_idle_milli(c), 6000);
    check_consistent(c);
    egpu_cluster_free(c);
}

/* 30% + 70% fill a card to 100%; then neither a share nor a whole card fits,
 * and a share too large for the card's free memory is refused too. */
static void test_card_full_refuses_more(void **state)
{
    struct egpu_cluster *c = egpu_cluster_new();
    struct egpu_node *n;
    struct egpu_pod_request one = tu_request(0, 0, 1, 0);
    struct egpu_pod_request whole = tu_request(0, 0, 100, 0);
    struct egpu_pod_request hungry = tu_request(0, 0, 10, CARD_MIB - 999);
    struct egpu_pod_request small = tu_request(0, 0, 10, 1000);
    struct egpu_pick p;

    (void)state;
    n = tu_add_node(c, "n", 8000, 8000, 2, "A", CARD_MIB);
    tu_use_card(c, n, "p30", 0, 30);
    tu_use_card(c, n, "p70", 0, 70);
    expect_card(n, 0, 1000, 0, 2);
    assert_int_equal(egpu_gpu_free_core(&n->gpus[0]), 0);
    assert_int_equal(c->used_core_milli, 1000);

    p = pick_on(n, &one, (const uint16_t[]){0});
    assign_refused(c, "p1", n, &one, &p, -EINVAL);
    p = pick_on(n, &whole, (const uint16_t[]){0});
    assign_refused(c, "w", n, &whole, &p, -EINVAL);

    /* Card 1 with 1000 MiB taken has 15384 MiB free: 15385 does not fit. */
    assign_ok(c, "m", n, &small, (const uint16_t[]){1});
    p = pick_on(n, &hungry, (const uint16_t[]){1});
    assign_refused(c, "h", n, &hungry, &p, -EINVAL);
    hungry.containers[0].mem_mib = CARD_MIB - 1000; /* exactly the free memory */
    p = pick_on(n, &hungry, (const uint16_t[]){1});
    assert_int_equal(egpu_cluster_assign(c, "h", n, &hungry, &p, NULL), 0);
    expect_card(n, 1, 200, CARD_MIB, 2);
    assert_int_equal(egpu_gpu_free_mem(&n->gpus[1]), 0);

    /* Releasing the 70% share leaves exactly 70% free again. */
    release_ok(c, "p70");
    expect_card(n, 0, 300, 0, 1);
    p = pick_on(n, &one, (const uint16_t[]){0});
    assert_int_equal(egpu_cluster_assign(c, "p1", n, &one, &p, NULL), 0);
    expect_card(n, 0, 310, 0, 2);
    check_consistent(c);
    egpu_cluster_free(c);
}

/* A whole card is exclusive: it cannot be picked while a share holds it,
 * no share fits on it, and one container cannot take one card twice. */
static void test_whole_card_exclusive(void **state)
{
    struct egpu_cluster *c = egpu_cluster_new();
    struct egpu_node *n;
    struct egpu_pod_request whole = tu_request(0, 0, 100, 0);
    struct egpu_pod_request two = tu_request(0, 0, 200, 0);
    struct egpu_pod_request share = tu_request(0, 0, 1, 0);
    struct egpu_pod_request both = with_container(tu_request(0, 0, 100, 0), 100, 0);
    struct egpu_pick p;

    (void)state;
    n = tu_add_node(c, "n", 8000, 8000, 3, "A", CARD_MIB);
    tu_use_card(c, n, "s", 0, 10);

    /* Card 0 holds a 10% share: 900 milli free, yet no whole card. */
    p = pick_on(n, &whole, (const uint16_t[]){0});
    assign_refused(c, "w", n, &whole, &p, -EINVAL);

    /* Card 1 held whole refuses even a 1% share. */
    p = pick_on(n, &whole, (const uint16_t[]){1});
    assert_int_equal(egpu_cluster_assign(c, "w", n, &whole, &p, NULL), 0);
    expect_card(n, 1, 1000, CARD_MIB, 1);
    p = pick_on(n, &share, (const uint16_t[]){1});
    assign_refused(c, "s2", n, &share, &p, -EINVAL);

    /* One container asking two cards cannot name card 2 twice, and two
     * whole-card containers cannot share card 2 either. */
    p = pick_on(n, &two, (const uint16_t[]){2, 2});
    assign_refused(c, "t", n, &two, &p, -EINVAL);
    p = pick_on(n, &both, (const uint16_t[]){2, 2});
    assign_refused(c, "b", n, &both, &p, -EINVAL);

    /* After the share leaves card 0, the whole card fits there. */
    release_ok(c, "s");
    p = pick_on(n, &two, (const uint16_t[]){0, 2});
    assert_int_equal(egpu_cluster_assign(c, "t", n, &two, &p, NULL), 0);
    expect_card(n, 0, 1000, CARD_MIB, 1);
    expect_card(n, 2, 1000, CARD_MIB, 1);
    check_consistent(c);
    egpu_cluster_free(c);
}

/* Picks that do not match their request or the node are -EINVAL and change
 * nothing, not even the node's generation. */
static void test_pick_mismatch_rejected(void **state)
{
    struct egpu_cluster *c = egpu_cluster_new(), *c2 = egpu_cluster_new();
    struct egpu_node *n, *foreign;
    struct egpu_pod_request share = tu_request(1000, 1000, 30, 512);
    struct egpu_pod_request two = tu_request(1000, 1000, 200, 0);
    struct egpu_pod_request pair = with_container(tu_request(0, 0, 30, 0), 40, 0);
    struct egpu_pod_request nogpu = tu_request(1000, 1000, 0, 0);
    struct egpu_pick p;

    (void)state;
    n = tu_add_node(c, "n", 4000, 4000, 4, "A", CARD_MIB);
    foreign = tu_add_node(c2, "n", 4000, 4000, 4, "A", CARD_MIB);
    tu_use_card(c, n, "bg", 3, 50);

    /* A pick of 40% for a 30% request has the wrong compute. */
    p = pick_on(n, &share, (const uint16_t[]){0});
    p.shares[0].core_milli = 400;
    assign_refused(c, "x", n, &share, &p, -EINVAL);
    /* A share with other memory than the request asks is refused. */
    p = pick_on(n, &share, (const uint16_t[]){0});
    p.shares[0].mem_mib = 511;
    assign_refused(c, "x", n, &share, &p, -EINVAL);
    /* A whole card must take all of the card's memory. */
    p = pick_on(n, &two, (const uint16_t[]){0, 1});
    p.shares[1].mem_mib = CARD_MIB - 1;
    assign_refused(c, "x", n, &two, &p, -EINVAL);

    /* A two-card container given one card, or three, is refused. */
    p = pick_on(n, &two, (const uint16_t[]){0, 1});
    p.nshares = 1;
    assign_refused(c, "x", n, &two, &p, -EINVAL);
    p = pick_on(n, &two, (const uint16_t[]){0, 1});
    p.shares[2] = p.shares[1];
    p.shares[2].gpu = 2;
    p.nshares = 3;
    assign_refused(c, "x", n, &two, &p, -EINVAL);
    /* A GPU request needs a pick, and a no-GPU request takes no card. */
    p = pick_on(n, &share, (const uint16_t[]){0});
    p.nshares = 0;
    assign_refused(c, "x", n, &share, &p, -EINVAL);
    p = pick_on(n, &share, (const uint16_t[]){0});
    assign_refused(c, "x", n, &nogpu, &p, -EINVAL);
    /* Both shares may not be credited to container 0 of a two-container pod. */
    p = pick_on(n, &pair, (const uint16_t[]){0, 1});
    p.shares[1].container = 0;
    p.shares[1].core_milli = 300;
    assign_refused(c, "x", n, &pair, &p, -EINVAL);

    /* A card the node lacks or a container the request lacks is refused. */
    p = pick_on(n, &share, (const uint16_t[]){4});
    assign_refused(c, "x", n, &share, &p, -EINVAL);
    p = pick_on(n, &share, (const uint16_t[]){UINT16_MAX});
    assign_refused(c, "x", n, &share, &p, -EINVAL);
    p = pick_on(n, &share, (const uint16_t[]){0});
    p.shares[0].container = 1;
    assign_refused(c, "x", n, &share, &p, -EINVAL);
    /* A pick may hold at most EGPU_PICK_SHARES_MAX shares. */
    p = pick_on(n, &share, (const uint16_t[]){0});
    p.nshares = EGPU_PICK_SHARES_MAX + 1;
    assign_refused(c, "x", n, &share, &p, -EINVAL);

    /* A node without the CPU or the memory refuses the pod. */
    p = pick_on(n, &share, (const uint16_t[]){0});
    share.cpu_milli = 4001;
    assign_refused(c, "x", n, &share, &p, -EINVAL);
    share.cpu_milli = 1000;
    share.mem_mib = 4001;
    assign_refused(c, "x", n, &share, &p, -EINVAL);
    share.mem_mib = 1000;

    /* A node of another cluster is refused, even one with the same name. */
    p = pick_on(foreign, &share, (const uint16_t[]){0});
    assign_refused(c, "x", foreign, &share, &p, -EINVAL);
    assert_int_equal(c2->npods, 0);
    assert_int_equal(foreign->gpus[0].used_core_milli, 0);

    /* The correct pick still works afterwards. */
    p = pick_on(n, &share, (const uint16_t[]){0});
    assert_int_equal(egpu_cluster_assign(c, "x", n, &share, &p, NULL), 0);
    expect_card(n, 0, 300, 512, 1);
    assert_int_equal(c->npods, 2);
    check_consistent(c);
    egpu_cluster_free(c);
    egpu_cluster_free(c2);
}

/* A pod key holds one allocation: a second assign, on any node, is
 * EGPU_EALLOCATED and changes nothing. */
static void test_double_assign(void **state)
{
    struct egpu_cluster *c = egpu_cluster_new();
    struct egpu_node *a, *b;
    struct egpu_pod_request r = tu_request(100, 100, 20, 0);
    const struct egpu_assignment *held;
    struct egpu_pick p;

    (void)state;
    a = tu_add_node(c, "a", 4000, 4000, 2, "A", CARD_MIB);
    b = tu_add_node(c, "b", 4000, 4000, 2, "A", CARD_MIB);
    assign_ok(c, "ns/p", a, &r, (const uint16_t[]){0});
    held = egpu_cluster_assignment(c, "ns/p");

    p = pick_on(a, &r, (const uint16_t[]){1});
    assign_refused(c, "ns/p", a, &r, &p, EGPU_EALLOCATED);
    p = pick_on(b, &r, (const uint16_t[]){0});
    assign_refused(c, "ns/p", b, &r, &p, EGPU_EALLOCATED);
    /* Even an invalid pick reports the existing allocation. */
    p.shares[0].gpu = 9;
    assign_refused(c, "ns/p", b, &r, &p, EGPU_EALLOCATED);

    assert_ptr_equal(egpu_cluster_assignment(c, "ns/p"), held);
    assert_ptr_equal(held->node, a);
    expect_card(a, 0, 200, 0, 1);
    expect_card(a, 1, 0, 0, 0);
    expect_card(b, 0, 0, 0, 0);
    assert_int_equal(c->npods, 1);

    /* After a release the key may be assigned again. */
    release_ok(c, "ns/p");
    p = pick_on(b, &r, (const uint16_t[]){0});
    assert_int_equal(egpu_cluster_assign(c, "ns/p", b, &r, &p, NULL), 0);
    assert_ptr_equal(egpu_cluster_assignment(c, "ns/p")->node, b);
    check_consistent(c);
    egpu_cluster_free(c);
}

/* Releasing a pod that holds nothing is EGPU_ENOTALLOC, never a no-op. */
static void test_release_unknown_pod(void **state)
{
    struct egpu_cluster *c = egpu_cluster_new();
    struct egpu_error err = {0};
    struct egpu_node *n;
    struct snap s;

    (void)state;
    n = tu_add_node(c, "n", 4000, 4000, 2, "A", CARD_MIB);
    assert_int_equal(egpu_cluster_release(c, "nobody", &err), EGPU_ENOTALLOC);
    assert_int_equal(err.code, EGPU_ENOTALLOC);
    assert_true(strstr(err.msg, "nobody") != NULL);

    tu_use_card(c, n, "p", 0, 40);
    tu_use_card(c, n, "q", 0, 40);
    snap_take(c, &s);
    assert_int_equal(egpu_cluster_release(c, "P", NULL), EGPU_ENOTALLOC);
    assert_int_equal(egpu_cluster_release(c, "", NULL), EGPU_ENOTALLOC);
    snap_expect(c, &s);

    release_ok(c, "p");
    snap_take(c, &s);
    memset(&err, 0, sizeof(err));
    assert_int_equal(egpu_cluster_release(c, "p", &err), EGPU_ENOTALLOC);
    assert_int_equal(err.code, EGPU_ENOTALLOC);
    snap_expect(c, &s);
    expect_card(n, 0, 400, 0, 1);
    assert_int_equal(c->npods, 1);
    check_consistent(c);
    egpu_cluster_free(c);
}

/* Removing a node releases its pods, drops its cards from the totals and
 * leaves the other nodes' pods alone; an unknown node is -ENOENT. */
static void test_remove_node_releases_pods(void **state)
{
    struct egpu_cluster *c = egpu_cluster_new();
    struct egpu_node *a, *b;
    struct egpu_pod_request two = tu_request(2000, 1000, 200, 0);
    struct snap s;

    (void)state;
    a = tu_add_node(c, "a", 16000, 16000, 4, "A", CARD_MIB);
    b = tu_add_node(c, "b", 8000, 8000, 2, "A", CARD_MIB);
    (void)tu_add_node(c, "c", 4000, 4000, 0, NULL, 0);
    tu_use_card(c, a, "a1", 0, 30);
    tu_use_card(c, a, "a2", 0, 30);
    assign_ok(c, "a3", a, &two, (const uint16_t[]){1, 3});
    tu_use_card(c, b, "b1", 1, 50);
    assert_int_equal(c->npods, 4);
    assert_int_equal(c->used_core_milli, 3100);

    snap_take(c, &s);
    assert_int_equal(egpu_cluster_remove_node(c, "zzz"), -ENOENT);
    assert_int_equal(egpu_cluster_remove_node(c, ""), -ENOENT);
    snap_expect(c, &s);

    assert_int_equal(egpu_cluster_remove_node(c, "a"), 0);
    assert_null(egpu_cluster_node(c, "a"));
    assert_int_equal(c->nnodes, 2);
    assert_int_equal(c->npods, 1);
    assert_int_equal(c->ngpus, 2);
    assert_int_equal(c->core_milli, 2000);
    assert_int_equal(c->used_core_milli, 500);
    assert_int_equal(c->max_cpu_milli, 8000);
    assert_int_equal(c->max_ngpus, 2);
    assert_null(egpu_cluster_assignment(c, "a1"));
    assert_null(egpu_cluster_assignment(c, "a2"));
    assert_null(egpu_cluster_assignment(c, "a3"));
    assert_int_equal(egpu_cluster_release(c, "a1", NULL), EGPU_ENOTALLOC);
    assert_int_equal(egpu_cluster_release(c, "a3", NULL), EGPU_ENOTALLOC);
    assert_ptr_equal(egpu_cluster_assignment(c, "b1")->node, b);
    expect_card(b, 1, 500, 0, 1);
    assert_int_equal(egpu_cluster_remove_node(c, "a"), -ENOENT);
    check_consistent(c);

    /* The name, its derived UUIDs and the pod keys are free again. */
    a = tu_add_node(c, "a", 1000, 1000, 4, "A", CARD_MIB);
    assert_non_null(a);
    assert_string_equal(a->gpus[3].uuid, "a-gpu3");
    tu_use_card(c, a, "a1", 2, 10);
    assert_int_equal(c->npods, 2);
    assert_int_equal(c->max_cpu_milli, 8000);
    check_consistent(c);

    /* Removing every node leaves an empty, consistent cluster. */
    assert_int_equal(egpu_cluster_remove_node(c, "b"), 0);
    assert_int_equal(egpu_cluster_remove_node(c, "c"), 0);
    assert_int_equal(egpu_cluster_remove_node(c, "a"), 0);
    assert_int_equal(c->nnodes, 0);
    assert_int_equal(c->npods, 0);
    assert_int_equal(c->ngpus, 0);
    assert_int_equal(c->core_milli, 0);
    assert_int_equal(c->used_core_milli, 0);
    assert_int_equal(c->max_cpu_milli, 0);
    assert_int_equal(c->max_ngpus, 0);
    check_consistent(c);
    egpu_cluster_free(c);
}

/* After removals from the middle, the front and the back, every remaining
 * node is found by name in the slot it reports, and only the node that moved
 * gets a new generation. */
static void test_remove_keeps_slots(void **state)
{
    struct egpu_cluster *c = egpu_cluster_new();
    static const char *const names[] = {"n0", "n1", "n2", "n3", "n4", "n5", "n6"};
    static const char *const order[] = {"n2", "n0", "n4", "n6", "n1"};
    enum { NN = 7 };
    bool gone[NN] = {false};

    (void)state;
    for (int i = 0; i < NN; i++) {
        struct egpu_node *n =
            tu_add_node(c, names[i], 1000 * (i + 1), 1000, (uint32_t)i, "A", CARD_MIB);

        if (i > 0)
            tu_use_card(c, n, names[i], 0, 10 * i);
    }
    for (size_t k = 0; k < sizeof(order) / sizeof(order[0]); k++) {
        uint64_t gens[NN] = {0};
        size_t slots[NN] = {0};
        size_t last = c->nnodes - 1;
        const struct egpu_node *moved = c->nodes[last];
        size_t hole = egpu_cluster_node(c, order[k])->slot;

        for (int i = 0; i < NN; i++) {
            if (!gone[i]) {
                gens[i] = egpu_cluster_node(c, names[i])->gen;
                slots[i] = egpu_cluster_node(c, names[i])->slot;
            }
        }
        assert_int_equal(egpu_cluster_remove_node(c, order[k]), 0);
        gone[order[k][1] - '0'] = true;
        assert_int_equal(c->nnodes, last);
        for (int i = 0; i < NN; i++) {
            const struct egpu_node *n = egpu_cluster_node(c, names[i]);

            if (gone[i]) {
                assert_null(n);
                continue;
            }
            assert_non_null(n);
            assert_string_equal(n->name, names[i]);
            assert_true(n->slot < c->nnodes);
            assert_ptr_equal(c->nodes[n->slot], n);
            if (n == moved && hole != last) {
                assert_int_equal(n->slot, hole);
                assert_true(n->gen > gens[i]);
                assert_int_equal(n->gen, c->gen);
            } else {
                assert_int_equal(n->slot, slots[i]);
                assert_int_equal(n->gen, gens[i]);
            }
            if (i > 0) {
                expect_card(n, 0, (uint32_t)(100 * i), 0, 1);
                assert_ptr_equal(egpu_cluster_assignment(c, names[i])->node, n);
            }
        }
        check_consistent(c);
    }
    /* n6 (largest CPU and most cards) is gone: the maxima were recomputed. */
    assert_int_equal(c->max_cpu_milli, 6000);
    assert_int_equal(c->max_ngpus, 5);
    assert_int_equal(c->nnodes, 2);
    egpu_cluster_free(c);
}

/* An assign or a release changes only the generation of the node it
 * touches, to a new cluster-wide value; a refused assign changes none. */
static void test_assign_changes_only_that_nodes_gen(void **state)
{
    struct egpu_cluster *c = egpu_cluster_new();
    enum { NN = 5 };
    uint64_t gens[NN], cgen;
    struct egpu_node *nodes[NN];
    struct egpu_pod_request r = tu_request(100, 100, 50, 0);
    struct egpu_pick p;
    char name[8];

    (void)state;
    for (int i = 0; i < NN; i++) {
        snprintf(name, sizeof(name), "n%d", i);
        nodes[i] = tu_add_node(c, name, 4000, 4000, 2, "A", CARD_MIB);
    }
    for (int step = 0; step < 6; step++) {
        /* Even steps place pod "p" on a node, odd steps release it there. */
        int target = ((step / 2) * 3 + 2) % NN;

        for (int i = 0; i < NN; i++)
            gens[i] = nodes[i]->gen;
        cgen = c->gen;
        if (step % 2 == 0)
            assign_ok(c, "p", nodes[target], &r, (const uint16_t[]){1});
        else
            release_ok(c, "p");
        assert_true(c->gen > cgen);
        for (int i = 0; i < NN; i++) {
            if (i == target) {
                assert_true(nodes[i]->gen > gens[i]);
                assert_true(nodes[i]->gen > cgen);
                assert_int_equal(nodes[i]->gen, c->gen);
            } else {
                assert_int_equal(nodes[i]->gen, gens[i]);
            }
        }
    }

    /* A refused assign and a refused release change no generation. */
    tu_use_card(c, nodes[1], "q", 0, 60);
    for (int i = 0; i < NN; i++)
        gens[i] = nodes[i]->gen;
    cgen = c->gen;
    p = pick_on(nodes[1], &r, (const uint16_t[]){0});
    assert_int_equal(egpu_cluster_assign(c, "p", nodes[1], &r, &p, NULL), -EINVAL);
    assert_int_equal(egpu_cluster_release(c, "p", NULL), EGPU_ENOTALLOC);
    assert_int_equal(c->gen, cgen);
    for (int i = 0; i < NN; i++)
        assert_int_equal(nodes[i]->gen, gens[i]);
    egpu_cluster_free(c);
}

/* egpu_cluster_new under every allocation failure: NULL or a cluster, and
 * no block left behind either way. */
static void test_cluster_new_oom(void **state)
{
    long base = egpu_alloc_live();
    int failures = 0;

    (void)state;
    for (long k = 1; k <= 32; k++) {
        struct egpu_cluster *c;

        egpu_alloc_fail_after(k);
        c = egpu_cluster_new();
        egpu_alloc_fail_after(0);
        if (c == NULL) {
            assert_int_equal(egpu_alloc_live(), base);
            failures++;
            continue;
        }
        assert_int_equal(c->nnodes, 0);
        egpu_cluster_free(c);
        assert_int_equal(egpu_alloc_live(), base);
        break;
    }
    assert_true(failures >= 4);
}

/* A cluster of npre nodes ("pre<i>", 2 cards of model A each), with one
 * pod on the first node when there is one. */
static struct egpu_cluster *prefilled(size_t npre)
{
    struct egpu_cluster *c = egpu_cluster_new();
    char name[32];

    assert_non_null(c);
    for (size_t i = 0; i < npre; i++) {
        snprintf(name, sizeof(name), "pre%zu", i);
        (void)tu_add_node(c, name, 8000, 8000, 2, "A", CARD_MIB);
    }
    if (npre > 0)
        tu_use_card(c, c->nodes[0], "bg", 1, 25);
    return c;
}

/* add_node under the nth allocation failing, n = 1, 2, ...: each call
 * succeeds or is -ENOMEM with the cluster unchanged, and nothing leaks.
 * Prefill sizes reach the node array's growth (64) and the name and UUID
 * maps' growth (12 nodes, 24 UUIDs). */
static void test_add_node_oom(void **state)
{
    static const size_t prefill[] = {0, 12, 64};
    const struct egpu_label labels[] = {{"zone", "a"}, {"rack", "r7"}};
    struct egpu_gpu_spec gpus[4];
    const struct egpu_node_spec spec = {.name = "oom",
                                        .cpu_milli = 4000,
                                        .mem_mib = 4000,
                                        .nlabels = 2,
                                        .labels = labels,
                                        .ngpus = 4,
                                        .gpus = gpus};

    (void)state;
    for (uint32_t i = 0; i < 4; i++)
        gpus[i] = (struct egpu_gpu_spec){.index = 3 - i, .model = "A", .mem_mib = CARD_MIB};
    for (size_t k = 0; k < sizeof(prefill) / sizeof(prefill[0]); k++) {
        long base = egpu_alloc_live();
        struct egpu_cluster *c = prefilled(prefill[k]);
        bool added = false;
        int failures = 0;

        for (long nth = 1; nth <= 100 && !added; nth++) {
            struct egpu_error err = {0};
            struct snap s;
            long live = egpu_alloc_live();
            bool had_array = c->nodes != NULL, had_gens = c->gens != NULL;
            uint16_t nmodels = c->nmodels;
            int rc;

            snap_take(c, &s);
            egpu_alloc_fail_after(nth);
            rc = egpu_cluster_add_node(c, &spec, &err);
            egpu_alloc_fail_after(0);
            if (rc == 0) {
                const struct egpu_node *n = egpu_cluster_node(c, "oom");

                added = true;
                assert_non_null(n);
                assert_int_equal(c->nnodes, prefill[k] + 1);
                assert_int_equal(n->gpus[0].index, 0);
                assert_string_equal(n->gpus[3].uuid, "oom-gpu3");
                assert_string_equal(egpu_node_label(n, "rack"), "r7");
                continue;
            }
            assert_int_equal(rc, -ENOMEM);
            assert_int_equal(err.code, -ENOMEM);
            snap_expect(c, &s);
            assert_null(egpu_cluster_node(c, "oom"));
            /* The only blocks a refused add may keep are a first node array
             * and its generations (capacity for later nodes) and a model name (see
             * test_add_node_error_keeps_model_table); the rest is freed. */
            assert_int_equal(egpu_alloc_live(), live + (!had_array && c->nodes != NULL) +
                                                    (!had_gens && c->gens != NULL) +
                                                    (c->nmodels - nmodels));
            check_consistent(c);
            failures++;
        }
        assert_true(added);
        assert_true(failures >= 6);
        check_consistent(c);
        egpu_cluster_free(c);
        assert_int_equal(egpu_alloc_live(), base);
    }
}

/* assign under the nth allocation failing: each call succeeds or is
 * -ENOMEM with the cluster and the pod index unchanged, and nothing leaks.
 * Twelve pods already placed make the pod map grow on the next one. */
static void test_assign_oom(void **state)
{
    static const size_t prepods[] = {0, 12};

    (void)state;
    for (size_t k = 0; k < sizeof(prepods) / sizeof(prepods[0]); k++) {
        long base = egpu_alloc_live();
        struct egpu_cluster *c = egpu_cluster_new();
        struct egpu_node *n = tu_add_node(c, "n", 64000, 64000, 4, "A", CARD_MIB);
        struct egpu_pod_request r = with_container(tu_request(500, 500, 40, 100), 200, 0);
        bool assigned = false;
        int failures = 0;
        char key[32];

        for (size_t i = 0; i < prepods[k]; i++) {
            snprintf(key, sizeof(key), "pre%zu", i);
            assign_ok(c, key, n, &(struct egpu_pod_request){.cpu_milli = 10}, NULL);
        }
        for (long nth = 1; nth <= 100 && !assigned; nth++) {
            struct egpu_pick p = pick_on(n, &r, (const uint16_t[]){0, 1, 2});
            struct egpu_error err = {0};
            struct snap s;
            long live = egpu_alloc_live();
            int rc;

            snap_take(c, &s);
            egpu_alloc_fail_after(nth);
            rc = egpu_cluster_assign(c, "ns/oom", n, &r, &p, &err);
            egpu_alloc_fail_after(0);
            if (rc == 0) {
                assigned = true;
                assert_int_equal(c->npods, prepods[k] + 1);
                expect_card(n, 0, 400, 100, 1);
                expect_card(n, 2, 1000, CARD_MIB, 1);
                continue;
            }
            assert_int_equal(rc, -ENOMEM);
            assert_int_equal(err.code, -ENOMEM);
            snap_expect(c, &s);
            assert_null(egpu_cluster_assignment(c, "ns/oom"));
            assert_int_equal(egpu_alloc_live(), live);
            failures++;
        }
        assert_true(assigned);
        /* The record (its key in it) fails, and with twelve pods the map's growth. */
        assert_true(failures >= (prepods[k] ? 2 : 1));
        check_consistent(c);
        release_ok(c, "ns/oom");
        assert_int_equal(c->npods, prepods[k]);
        assert_int_equal(c->used_core_milli, 0);
        egpu_cluster_free(c);
        assert_int_equal(egpu_alloc_live(), base);
    }
}

/* Find cards on n for r (one container); writes gpus and returns true, or
 * false when r does not fit n now. */
static bool find_cards(const struct egpu_node *n, const struct egpu_pod_request *r, uint16_t *gpus)
{
    const struct egpu_container_request *cr = &r->containers[0];
    uint32_t got = 0;

    if (r->cpu_milli > n->cpu_milli - n->used_cpu_milli ||
        r->mem_mib > n->mem_mib - n->used_mem_mib)
        return false;
    for (uint32_t g = 0; g < n->ngpus && got < cr->ncards; g++) {
        const struct egpu_gpu *gpu = &n->gpus[g];
        bool fits = cr->core_milli == EGPU_GPU_MILLI ? gpu->nshares == 0
                                                     : egpu_gpu_free_core(gpu) >= cr->core_milli &&
                                                           egpu_gpu_free_mem(gpu) >= cr->mem_mib;

        if (fits)
            gpus[got++] = (uint16_t)g;
    }
    return got == cr->ncards;
}

/* 5000 nodes x 8 cards, then 20000 pods assigned and released by key with
 * up to 3000 alive at once: the running totals match at the peak and every
 * total is exactly zero at the end. */
static void test_scale_assign_release(void **state)
{
    enum { NODES = 5000, CARDS = 8, PODS = 20000, WINDOW = 3000 };
    long base = egpu_alloc_live();
    struct egpu_cluster *c = egpu_cluster_new();
    uint64_t *milli = calloc(PODS, sizeof(*milli));
    uint64_t live_milli = 0;
    size_t live = 0;
    char key[32];

    (void)state;
    assert_non_null(milli);
    for (int i = 0; i < NODES; i++) {
        snprintf(key, sizeof(key), "node-%05d", i);
        (void)tu_add_node(c, key, 16000, 65536, CARDS, i % 3 ? "G2" : "T4", CARD_MIB);
    }
    assert_int_equal(c->nnodes, NODES);
    assert_int_equal(c->ngpus, NODES * CARDS);
    assert_int_equal(c->core_milli, (uint64_t)NODES * CARDS * EGPU_GPU_MILLI);
    assert_string_equal(egpu_cluster_node(c, "node-04999")->gpus[7].uuid, "node-04999-gpu7");

    for (int i = 0; i < PODS + WINDOW; i++) {
        if (i >= WINDOW) {
            int old = i - WINDOW;

            snprintf(key, sizeof(key), "ns/pod-%d", old);
            release_ok(c, key);
            live_milli -= milli[old];
            live--;
        }
        if (i < PODS) {
            int64_t pct = i % 7 == 0 ? 100 : i % 11 == 0 ? 200 : 5 + (i * 37) % 90;
            struct egpu_pod_request r = tu_request(250 + i % 500, 512, pct, (i % 4) * 1000);
            uint16_t gpus[2];
            uint32_t at = (uint32_t)(((uint64_t)i * 7919) % NODES);
            int tries = 0;

            while (!find_cards(c->nodes[at], &r, gpus)) {
                at = (at + 1) % NODES;
                assert_true(++tries < NODES);
            }
            snprintf(key, sizeof(key), "ns/pod-%d", i);
            assign_ok(c, key, c->nodes[at], &r, gpus);
            milli[i] = egpu_pod_request_gpu_milli(&r);
            live_milli += milli[i];
            live++;
        }
        if (i == PODS / 2) {
            assert_int_equal(c->npods, live);
            assert_int_equal(c->used_core_milli, live_milli);
            check_consistent(c);
        }
    }
    assert_int_equal(live, 0);
    assert_int_equal(c->npods, 0);
    assert_int_equal(c->used_core_milli, 0);
    check_all_free(c);
    check_consistent(c);
    assert_int_equal(egpu_cluster_release(c, "ns/pod-0", NULL), EGPU_ENOTALLOC);
    assert_int_equal(egpu_cluster_release(c, "ns/pod-19999", NULL), EGPU_ENOTALLOC);
    egpu_cluster_free(c);
    free(milli);
    assert_int_equal(egpu_alloc_live(), base);
}

/* The maxima best-fit normalises by follow removals: they drop only when the
 * last node holding them leaves. */
static void test_maxima_follow_removals(void **state)
{
    struct egpu_cluster *c = egpu_cluster_new();

    (void)state;
    assert_non_null(c);
    tu_add_node(c, "small", 8000, 1024, 2, "T4", 15360);
    tu_add_node(c, "big-a", 16000, 1024, 8, "A100", 40960);
    tu_add_node(c, "big-b", 16000, 1024, 8, "A100", 40960);
    assert_int_equal(c->max_cpu_milli, 16000);
    assert_int_equal(c->max_ngpus, 8);
    assert_int_equal(egpu_cluster_remove_node(c, "big-a"), 0);
    assert_int_equal(c->max_cpu_milli, 16000);
    assert_int_equal(c->max_ngpus, 8);
    assert_int_equal(egpu_cluster_remove_node(c, "big-b"), 0);
    assert_int_equal(c->max_cpu_milli, 8000);
    assert_int_equal(c->max_ngpus, 2);
    tu_add_node(c, "mid", 12000, 1024, 1, "T4", 15360);
    assert_int_equal(c->max_cpu_milli, 12000);
    assert_int_equal(c->max_ngpus, 2);
    assert_int_equal(egpu_cluster_remove_node(c, "small"), 0);
    assert_int_equal(c->max_cpu_milli, 12000);
    assert_int_equal(c->max_ngpus, 1);
    assert_int_equal(egpu_cluster_remove_node(c, "mid"), 0);
    assert_int_equal(c->max_cpu_milli, 0);
    assert_int_equal(c->max_ngpus, 0);
    egpu_cluster_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_maxima_follow_removals),
        cmocka_unit_test(test_add_node_with_gpus),
        cmocka_unit_test(test_add_node_without_gpus),
        cmocka_unit_test(test_add_node_errors_leave_cluster_unchanged),
        cmocka_unit_test(test_add_node_error_keeps_model_table),
        cmocka_unit_test(test_model_ids_and_mask),
        cmocka_unit_test(test_assign_release_totals_exact),
        cmocka_unit_test(test_assign_refuses_node_of_another_cluster),
        cmocka_unit_test(test_card_full_refuses_more),
        cmocka_unit_test(test_whole_card_exclusive),
        cmocka_unit_test(test_pick_mismatch_rejected),
        cmocka_unit_test(test_double_assign),
        cmocka_unit_test(test_release_unknown_pod),
        cmocka_unit_test(test_remove_node_releases_pods),
        cmocka_unit_test(test_remove_keeps_slots),
        cmocka_unit_test(test_assign_changes_only_that_nodes_gen),
        cmocka_unit_test(test_cluster_new_oom),
        cmocka_unit_test(test_add_node_oom),
        cmocka_unit_test(test_assign_oom),
        cmocka_unit_test(test_scale_assign_release),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
