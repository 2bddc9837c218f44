/* bench/bench_cache.c - the placement core as the extender's live cache uses it.
 *
 * 5,000 nodes of 8 cards, half full; then one pod at a time is placed
 * (schedule over every node + assign) and an old one released, as pods come
 * and go in a live cluster. Prints microseconds per operation for each
 * policy, and the cost of filtering every node once. Figures, not a test.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "egpu/core.h"

#define NODES    5000
#define STEPS    2000
#define LIVE_MAX (NODES * 8 * 4)

static double now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static struct egpu_pod_request shape(struct egpu_rng *rng)
{
    static const int64_t pct[] = {10, 25, 30, 50, 70, 100, 100, 200};
    struct egpu_pod_request r;
    struct egpu_error err = {0};

    memset(&r, 0, sizeof(r));
    r.cpu_milli = 2000 + 2000 * (int64_t)egpu_rng_below(rng, 4);
    r.mem_mib = 8192;
    r.ncontainers = 1;
    if (egpu_container_request_set(&r.containers[0], pct[egpu_rng_below(rng, 8)],
                                   1024 * (int64_t)egpu_rng_below(rng, 8), &err) != 0)
        r.ncontainers = 0;
    return r;
}

static int build(struct egpu_cluster **out)
{
    struct egpu_cluster *c = egpu_cluster_new();
    struct egpu_gpu_spec gpus[8];
    struct egpu_error err = {0};
    char name[32];

    if (c == NULL)
        return -1;
    for (int i = 0; i < NODES; i++) {
        struct egpu_node_spec s = {
            .name = name, .cpu_milli = 96000, .mem_mib = 393216, .ngpus = 8, .gpus = gpus};

        snprintf(name, sizeof(name), "node-%05d", i);
        for (uint32_t g = 0; g < 8; g++)
            gpus[g] = (struct egpu_gpu_spec){.index = g, .model = "A100", .mem_mib = 40960};
        if (egpu_cluster_add_node(c, &s, &err) != 0) {
            fprintf(stderr, "bench: %s\n", err.msg);
            egpu_cluster_free(c);
            return -1;
        }
    }
    *out = c;
    return 0;
}

static void bench_policy(enum egpu_policy_kind kind, const struct egpu_workload *w)
{
    static char keys[LIVE_MAX][24];
    struct egpu_placer_config cfg = {
        .node_policy = kind, .card_policy = kind, .seed = 42, .workload = w, .memo = true};
    struct egpu_error err = {0};
    struct egpu_placer *p = egpu_placer_new(&cfg, &err);
    struct egpu_cluster *c = NULL;
    struct egpu_rng rng;
    size_t live = 0, placed = 0;
    double t_sched = 0, t_assign = 0, t_release = 0, t_filter = 0;
    int nsched = 0, nrel = 0;

    if (p == NULL || build(&c) != 0) {
        fprintf(stderr, "bench: setup failed: %s\n", err.msg);
        egpu_placer_free(p);
        return;
    }
    egpu_rng_seed(&rng, 7);
    /* Fill to about half of the cards' compute. */
    while (c->used_core_milli * 2 < c->core_milli && live < LIVE_MAX) {
        struct egpu_pod_request r = shape(&rng);
        struct egpu_node *n;
        struct egpu_pick pick;

        if (egpu_placer_schedule(p, c, &r, &n, &pick) != 0)
            break;
        snprintf(keys[live], sizeof(keys[live]), "pod-%zu", placed++);
        if (egpu_cluster_assign(c, keys[live], n, &r, &pick, &err) != 0)
            break;
        live++;
    }
    for (int step = 0; step < STEPS; step++) {
        struct egpu_pod_request r = shape(&rng);
        struct egpu_node *n;
        struct egpu_pick pick;
        double t0 = now_us(), t1;
        int rc = egpu_placer_schedule(p, c, &r, &n, &pick);

        t1 = now_us();
        t_sched += t1 - t0;
        nsched++;
        if (rc == 0 && live < LIVE_MAX) {
            snprintf(keys[live], sizeof(keys[live]), "pod-%zu", placed++);
            t0 = now_us();
            if (egpu_cluster_assign(c, keys[live], n, &r, &pick, &err) == 0)
                live++;
            t_assign += now_us() - t0;
        }
        if (live > 0) {
            size_t k = (size_t)egpu_rng_below(&rng, live);

            t0 = now_us();
            if (egpu_cluster_release(c, keys[k], &err) != 0)
                fprintf(stderr, "bench: release: %s\n", err.msg);
            t_release += now_us() - t0;
            nrel++;
            memcpy(keys[k], keys[--live], sizeof(keys[k]));
        }
        if (step % 100 == 0) {
            size_t ok = 0;

            t0 = now_us();
            for (size_t i = 0; i < c->nnodes; i++)
                ok += egpu_placer_can_host(p, c, c->nodes[i], &r, NULL, NULL, 0);
            t_filter += now_us() - t0;
            (void)ok;
        }
    }
    printf("%-9s schedule over %d nodes %8.1f us   assign %5.2f us   release %5.2f us   "
           "filter all nodes %8.1f us   (%zu pods live, %.1f%% of GPU allocated)\n",
           egpu_policy_name(kind), NODES, t_sched / nsched, t_assign / nsched,
           nrel ? t_release / nrel : 0.0, t_filter / (STEPS / 100), live,
           100.0 * (double)c->used_core_milli / (double)c->core_milli);
    egpu_placer_free(p);
    egpu_cluster_free(c);
}

int main(void)
{
    const struct egpu_typical_pod typical[] = {
        {.cpu_milli = 4000, .gpu_milli = 250, .ncards = 1, .weight = 0.3},
        {.cpu_milli = 4000, .gpu_milli = 500, .ncards = 1, .weight = 0.3},
        {.cpu_milli = 8000, .gpu_milli = 1000, .ncards = 1, .weight = 0.3},
        {.cpu_milli = 2000, .weight = 0.1},
    };
    const enum egpu_policy_kind kinds[] = {EGPU_POLICY_BINPACK, EGPU_POLICY_SPREAD,
                                           EGPU_POLICY_BESTFIT, EGPU_POLICY_RANDOM,
                                           EGPU_POLICY_FGD,     EGPU_POLICY_FGD_CPU};
    struct egpu_workload w;

    if (egpu_workload_from_list(typical, sizeof(typical) / sizeof(typical[0]), &w) != 0)
        return 1;
    printf("== bench: live cache, %d nodes x 8 cards, %d place+release steps per policy\n", NODES,
           STEPS);
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
        bench_policy(kinds[i], &w);
    egpu_workload_free(&w);
    return 0;
}
