/* core/cards.c - the card tier: which card(s) of one node each container gets.
 *
 * Containers are placed one after another on a scratch copy of the node's
 * cards, so two containers of one pod may share a card when they fit. A
 * share (1..999 milli-GPU) needs that much compute and its memory free on one
 * card; a whole-card container takes cards nobody holds, lowest index first
 * (all such cards are alike for every policy but random).
 *
 * Share policies: binpack and best-fit take the card with the least compute
 * left after placement (ties: less memory left, then lower index); spread the
 * most; random any that fits, uniformly; FGD the card whose use grows the
 * node's fragmentation for the target workload least (ties: lower index).
 *
 * Load awareness (egpu_placer_config.load_aware): where a policy other than
 * random ties two cards exactly (binpack/best-fit/spread: the same compute
 * and memory left; FGD: the same fragmentation; whole cards: any two free
 * ones), the card with the lower measured load (egpu_gpu.load_pct, unknown
 * last) is taken before the lower index. Without it no load is read.
 *
 * Topology (node->has_topology, from the GPU objects' spec.topology): a
 * container of two or more whole cards gets, of the free cards, a set whose
 * worst pair is best connected (NVLink, then the same board, one PCIe
 * switch, several, one host bridge, one NUMA node, the system; unknown
 * last), and among sets as good the one the policy's order (index, load,
 * or the random draw) reaches first. A share or a single card is placed as
 * without topology, and a node with no known link is never looked at, so a
 * cluster without topology places exactly as before.
 *
 * DRA mode (egpu__cards_pick_dra): kube-scheduler's allocator chooses, not a
 * policy. It tries the node's devices in slice order (egpu_dra_device_order)
 * and gives each container's card(s) the first that fits, backtracking to
 * the next device of an earlier container when a later one finds none, as
 * the structured allocator does across a claim's requests. It knows no
 * load and no topology. The search is capped at EGPU_DRA_STEPS_MAX devices
 * tried, so a pod of many shares that fits no arrangement cannot stall a
 * replay.
 */
#include <stdio.h>
#include <string.h>

#include "placement_int.h"

struct scratch {
    struct egpu__node_view view;           /* free compute per card */
    uint32_t free_mem[EGPU_NODE_GPUS_MAX]; /* MiB */
    bool held[EGPU_NODE_GPUS_MAX];         /* someone holds part or all of it */
};

static bool model_allowed(const struct egpu_node *n, uint64_t mask)
{
    return mask == 0 || (n->model != EGPU_MODEL_NONE && (mask & (1ULL << n->model)));
}

static void pct(char *buf, size_t len, uint32_t milli)
{
    if (milli % 10 == 0)
        snprintf(buf, len, "%u%%", milli / 10);
    else
        snprintf(buf, len, "%u.%u%%", milli / 10, milli % 10);
}

static void add_share(struct egpu_pick *pick, struct scratch *s, uint16_t container, uint16_t gpu,
                      uint32_t core_milli, uint32_t mem_mib)
{
    struct egpu_share *sh = &pick->shares[pick->nshares++];

    sh->container = container;
    sh->gpu = gpu;
    sh->core_milli = core_milli;
    sh->mem_mib = mem_mib;
    s->view.free_milli[gpu] -= core_milli;
    s->free_mem[gpu] -= mem_mib;
    s->held[gpu] = true;
}

/* The closest link between card a and every card of set[0..n). */
static uint8_t worst_link(const struct egpu_node *node, uint16_t a, const uint16_t *set, uint32_t n)
{
    uint8_t worst = EGPU_TOPO_NVLINK;

    for (uint32_t i = 0; i < n; i++) {
        if (node->gpus[a].link[set[i]] < worst)
            worst = node->gpus[a].link[set[i]];
    }
    return worst;
}

/* Topology: put the k best connected cards of order[0..n) (the policy's
 * order, best first) in front, in that order. The best set is the one
 * whose worst pair is closest (egpu_topo_level; unknown is the farthest);
 * among sets as good, the one the policy's order reaches first. For each
 * level from NVLink down and each card in order as a start, the cards in
 * order that reach every card taken so far at that level are added until k
 * are found: exact where links of a level group the cards (NVLink islands,
 * PCIe trees), a good set otherwise, and at most levels x n x n x k steps.
 * When no level gives k cards, order stays as it is. */
static void topo_order(const struct egpu_node *node, uint16_t *order, uint32_t n, uint32_t k)
{
    uint16_t set[EGPU_NODE_GPUS_MAX];

    for (int level = EGPU_TOPO_NVLINK; level > EGPU_TOPO_UNKNOWN; level--) {
        for (uint32_t start = 0; start < n; start++) {
            bool in[EGPU_NODE_GPUS_MAX] = {false};
            uint32_t m = 1, front = 0, back = k;

            set[0] = order[start];
            in[start] = true;
            for (uint32_t i = 0; i < n && m < k; i++) {
                if (i != start && worst_link(node, order[i], set, m) >= level) {
                    set[m++] = order[i];
                    in[i] = true;
                }
            }
            if (m < k)
                continue;
            /* The set first, the rest after, each in the policy's order. */
            for (uint32_t i = 0; i < n; i++)
                set[in[i] ? front++ : back++] = order[i];
            memcpy(order, set, n * sizeof(*order));
            return;
        }
    }
}

static bool pick_whole(enum egpu_policy_kind kind, bool load_aware, struct egpu_rng *rng,
                       const struct egpu_node *node, uint16_t ci,
                       const struct egpu_container_request *cr, struct scratch *s,
                       struct egpu_pick *pick, char *why, size_t why_len)
{
    uint16_t free_cards[EGPU_NODE_GPUS_MAX];
    uint32_t nfree = 0;

    for (uint32_t g = 0; g < node->ngpus; g++) {
        if (!s->held[g] && s->view.free_milli[g] == EGPU_GPU_MILLI &&
            node->gpus[g].mem_mib >= cr->mem_mib)
            free_cards[nfree++] = (uint16_t)g;
    }
    if (nfree < cr->ncards) {
        if (why != NULL)
            snprintf(why, why_len, "container %u needs %u whole free cards%s, node has %u", ci,
                     cr->ncards, cr->mem_mib ? " with enough memory" : "", nfree);
        return false;
    }
    if (kind == EGPU_POLICY_RANDOM) {
        /* A uniform random subset: partial Fisher-Yates over the free cards
         * (all of them when topology then chooses among them). */
        uint32_t shuffled = node->has_topology && cr->ncards > 1 ? nfree : cr->ncards;

        for (uint32_t i = 0; i < shuffled; i++) {
            uint32_t j = i + (uint32_t)egpu_rng_below(rng, nfree - i);
            uint16_t t = free_cards[i];

            free_cards[i] = free_cards[j];
            free_cards[j] = t;
        }
    } else if (load_aware) {
        /* The least loaded free cards first; equal loads by index (stable). */
        for (uint32_t i = 1; i < nfree; i++) {
            uint16_t g = free_cards[i];
            uint32_t j = i;

            for (; j > 0 && node->gpus[free_cards[j - 1]].load_pct > node->gpus[g].load_pct; j--)
                free_cards[j] = free_cards[j - 1];
            free_cards[j] = g;
        }
    }
    if (node->has_topology && cr->ncards > 1)
        topo_order(node, free_cards, nfree, cr->ncards);
    for (uint32_t i = 0; i < cr->ncards; i++) {
        uint16_t g = free_cards[i];

        add_share(pick, s, ci, g, EGPU_GPU_MILLI, node->gpus[g].mem_mib);
    }
    return true;
}

/* Is card a less loaded than card b (with load awareness)? */
static bool less_loaded(const struct egpu_node *node, bool load_aware, uint32_t a, uint32_t b)
{
    return load_aware && node->gpus[a].load_pct < node->gpus[b].load_pct;
}

/* Is card a (after placement) better than card b for the policy? */
static bool better_card(enum egpu_policy_kind kind, bool load_aware, const struct egpu_node *node,
                        const struct scratch *s, uint32_t a, uint32_t b)
{
    uint32_t ca = s->view.free_milli[a], cb = s->view.free_milli[b];
    uint32_t ma = s->free_mem[a], mb = s->free_mem[b];

    if (ca == cb && ma == mb)
        return less_loaded(node, load_aware, a, b);
    if (kind == EGPU_POLICY_SPREAD)
        return ca > cb || (ca == cb && ma > mb);
    return ca < cb || (ca == cb && ma < mb);
}

static bool pick_share(enum egpu_policy_kind kind, bool load_aware, struct egpu__target *t,
                       struct egpu_rng *rng, const struct egpu_node *node, uint16_t ci,
                       const struct egpu_container_request *cr, struct scratch *s,
                       struct egpu_pick *pick, char *why, size_t why_len)
{
    uint32_t fits[EGPU_NODE_GPUS_MAX], nfits = 0, best;
    uint32_t most_core = 0, most_mem = 0;

    for (uint32_t g = 0; g < node->ngpus; g++) {
        if (s->view.free_milli[g] >= cr->core_milli && s->free_mem[g] >= cr->mem_mib)
            fits[nfits++] = g;
        if (s->view.free_milli[g] > most_core ||
            (s->view.free_milli[g] == most_core && s->free_mem[g] > most_mem)) {
            most_core = s->view.free_milli[g];
            most_mem = s->free_mem[g];
        }
    }
    if (nfits == 0) {
        char want[16], have[16];

        if (why == NULL)
            return false;
        pct(want, sizeof(want), cr->core_milli);
        pct(have, sizeof(have), most_core);
        snprintf(why, why_len,
                 "no card with %s core and %u MiB free for container %u (most free card: %s, "
                 "%u MiB)",
                 want, cr->mem_mib, ci, have, most_mem);
        return false;
    }
    best = fits[0];
    if (kind == EGPU_POLICY_RANDOM) {
        best = fits[egpu_rng_below(rng, nfits)];
    } else if (egpu__policy_fgd_family(kind) &&
               !(kind == EGPU_POLICY_FGD_CPU_TIGHT && cr->core_milli <= EGPU_SMALL_POD_MILLI)) {
        struct egpu__frag_base *b = egpu__target_base(t, node);
        double best_f = 0.0, tried_f[EGPU_NODE_GPUS_MAX];
        uint32_t tried_free[EGPU_NODE_GPUS_MAX], ntried = 0;

        for (uint32_t i = 0; i < nfits; i++) {
            const uint32_t g = fits[i], before = s->view.free_milli[g];
            uint32_t seen = ntried;
            double f;

            /* Cards with equal free compute give equal fragmentation: a
             * later one can win only on load. */
            for (uint32_t j = 0; j < ntried && seen == ntried; j++)
                seen = tried_free[j] == before ? j : ntried;
            if (seen < ntried) {
                if (tried_f[seen] == best_f && less_loaded(node, load_aware, g, best))
                    best = g;
                continue;
            }
            s->view.free_milli[g] = before - cr->core_milli;
            f = egpu__frag_base_eval(b, &s->view);
            if (egpu__policy_fills(kind))
                f = egpu__variant_frag(kind, &s->view, t, f);
            s->view.free_milli[g] = before;
            tried_free[ntried] = before;
            tried_f[ntried++] = f;
            if (i == 0 || f < best_f || (f == best_f && less_loaded(node, load_aware, g, best))) {
                best_f = f;
                best = g;
            }
        }
    } else {
        for (uint32_t i = 1; i < nfits; i++) {
            if (better_card(kind, load_aware, node, s, fits[i], best))
                best = fits[i];
        }
    }
    add_share(pick, s, ci, (uint16_t)best, cr->core_milli, cr->mem_mib);
    return true;
}

/* "A|B" of the models in mask, into buf. */
static void model_list(const struct egpu_cluster *c, uint64_t mask, char *buf, size_t len)
{
    size_t used = 0;

    buf[0] = '\0';
    for (uint16_t i = 0; i < c->nmodels && used < len; i++) {
        if (mask & (1ULL << i)) {
            int n = snprintf(buf + used, len - used, "%s%s", used ? "|" : "", c->models[i]);

            used += n > 0 ? (size_t)n : 0;
        }
    }
}

/* Put the node's unhealthy cards in front of why (len bytes), when it has
 * any: "cards gpu-1-gpu0 (Unhealthy) take no new pods; <why>". */
static void unhealthy_note(const struct egpu_node *node, char *why, size_t len)
{
    char note[1024];
    size_t used = 0;
    uint32_t n = 0;

    for (uint32_t g = 0; why != NULL && g < node->ngpus && used < sizeof(note); g++) {
        int k;

        if (node->gpus[g].unhealthy == NULL)
            continue;
        k = snprintf(note + used, sizeof(note) - used, "%s%s", n++ ? ", " : "",
                     node->gpus[g].unhealthy);
        used += k > 0 ? (size_t)k : 0;
    }
    if (n == 0)
        return;
    if (used >= sizeof(note))
        used = sizeof(note) - 1;
    note[used] = '\0';
    {
        char rest[512];

        snprintf(rest, sizeof(rest), "%s", why);
        snprintf(why, len, "card%s %s take%s no new pods; %s", n > 1 ? "s" : "", note,
                 n > 1 ? "" : "s", rest);
    }
}

/* The checks every card choice starts with (GPUs, model, CPU, memory);
 * true when r may fit node's cards, else a reason in why (when not NULL). */
static bool node_admits(const struct egpu_cluster *c, const struct egpu_node *node,
                        const struct egpu_pod_request *r, char *why, size_t why_len)
{
    if (r->ncontainers > 0 && node->ngpus == 0) {
        if (why != NULL)
            snprintf(why, why_len, "node has no GPUs");
        return false;
    }
    if (r->ncontainers > 0 && !model_allowed(node, r->model_mask)) {
        char allowed[256];

        if (why == NULL)
            return false;
        model_list(c, r->model_mask, allowed, sizeof(allowed));
        snprintf(why, why_len, "GPU model %s not allowed (pod allows %s)", c->models[node->model],
                 allowed);
        return false;
    }
    if (r->cpu_milli > node->cpu_milli - node->used_cpu_milli) {
        if (why != NULL)
            snprintf(why, why_len, "insufficient cpu: requested %lldm, free %lldm",
                     (long long)r->cpu_milli, (long long)(node->cpu_milli - node->used_cpu_milli));
        return false;
    }
    if (r->mem_mib > node->mem_mib - node->used_mem_mib) {
        if (why != NULL)
            snprintf(why, why_len, "insufficient memory: requested %lld MiB, free %lld MiB",
                     (long long)r->mem_mib, (long long)(node->mem_mib - node->used_mem_mib));
        return false;
    }
    return true;
}

/* The scratch copy of node's cards with r's CPU taken. */
static void scratch_init(const struct egpu_node *node, const struct egpu_pod_request *r,
                         struct scratch *s)
{
    egpu__view_of(node, &s->view); /* an unhealthy card: no compute free */
    for (uint32_t g = 0; g < node->ngpus; g++) {
        const struct egpu_gpu *gpu = &node->gpus[g];

        s->free_mem[g] = gpu->unhealthy ? 0 : egpu_gpu_free_mem(gpu);
        s->held[g] = gpu->nshares > 0 || gpu->unhealthy != NULL;
    }
    s->view.free_cpu_milli -= r->cpu_milli;
}

bool egpu__cards_pick(enum egpu_policy_kind kind, bool load_aware, struct egpu__target *t,
                      struct egpu_rng *rng, const struct egpu_cluster *c,
                      const struct egpu_node *node, const struct egpu_pod_request *r,
                      struct egpu_pick *pick, struct egpu__node_view *after, char *why,
                      size_t why_len)
{
    struct scratch s;

    /* why NULL: no reason is worded (a placer's memo and filter's verdicts
     * ask only whether the pod fits: formatting every refusal was a third
     * of filter's instructions at 5,000 nodes). */
    pick->nshares = 0;
    if (!node_admits(c, node, r, why, why_len))
        return false;
    scratch_init(node, r, &s);
    for (uint16_t ci = 0; ci < r->ncontainers; ci++) {
        const struct egpu_container_request *cr = &r->containers[ci];
        bool ok = cr->core_milli == EGPU_GPU_MILLI
                      ? pick_whole(kind, load_aware, rng, node, ci, cr, &s, pick, why, why_len)
                      : pick_share(kind, load_aware, t, rng, node, ci, cr, &s, pick, why, why_len);

        if (!ok) {
            unhealthy_note(node, why, why_len);
            return false;
        }
    }
    if (after != NULL)
        *after = s.view;
    return true;
}

/* ------------------------------------------------------------------------ */
/* DRA mode: the allocator's first fit (egpu__cards_pick_dra)               */

/* The search of egpu__cards_pick_dra: the node's devices in slice order, the
 * scratch state of the cards and the steps taken so far. */
struct dra_search {
    const struct egpu_node *node;
    const struct egpu_pod_request *r;
    uint16_t order[EGPU_NODE_GPUS_MAX]; /* positions in node->gpus, slice order */
    uint32_t n;
    struct scratch s;
    struct egpu_pick *pick;
    uint64_t steps; /* devices tried */
    bool capped;    /* steps passed EGPU_DRA_STEPS_MAX */
};

/* Can card g take one card of cr now? A share needs its compute and memory
 * free (a device with allowMultipleAllocations: the capacities left); a
 * whole card (a request naming neither capacity: the requestPolicy's
 * default, all of it) needs a card nobody holds. */
static bool dra_fits(const struct dra_search *d, uint16_t g,
                     const struct egpu_container_request *cr)
{
    if (cr->core_milli == EGPU_GPU_MILLI)
        return !d->s.held[g] && d->s.view.free_milli[g] == EGPU_GPU_MILLI &&
               d->node->gpus[g].mem_mib >= cr->mem_mib;
    return d->s.view.free_milli[g] >= cr->core_milli && d->s.free_mem[g] >= cr->mem_mib;
}

/* Give card k (of cr->ncards) of container ci, and everything after it, a
 * device: the first in slice order that fits, from position from on for the
 * further cards of one container (a set of whole cards is tried once, not
 * in every order); when what follows finds none, the next device. True
 * when every container has its cards (in d->pick); false when none fits or
 * the steps ran out (d->capped). */
static bool dra_place(struct dra_search *d, uint16_t ci, uint32_t k, uint32_t from)
{
    const struct egpu_container_request *cr;

    if (ci == d->r->ncontainers)
        return true;
    cr = &d->r->containers[ci];
    if (k == cr->ncards)
        return dra_place(d, (uint16_t)(ci + 1), 0, 0);
    if (cr->core_milli == EGPU_GPU_MILLI) {
        /* Fewer free cards than the container still needs: no device of
         * the loop below leads anywhere, so the allocator's outcome is the
         * same without trying them. */
        uint32_t nfree = 0;

        for (uint32_t i = from; i < d->n; i++)
            nfree += dra_fits(d, d->order[i], cr);
        if (nfree < cr->ncards - k)
            return false;
    }
    for (uint32_t i = from; i < d->n; i++) {
        const uint16_t g = d->order[i];
        const uint32_t mem =
            cr->core_milli == EGPU_GPU_MILLI ? d->node->gpus[g].mem_mib : cr->mem_mib;
        const bool held = d->s.held[g];

        if (++d->steps > EGPU_DRA_STEPS_MAX) {
            d->capped = true;
            return false;
        }
        if (!dra_fits(d, g, cr))
            continue;
        add_share(d->pick, &d->s, ci, g, cr->core_milli, mem);
        if (dra_place(d, ci, k + 1, cr->core_milli == EGPU_GPU_MILLI ? i + 1 : 0))
            return true;
        d->pick->nshares--; /* undo add_share: the next device */
        d->s.view.free_milli[g] += cr->core_milli;
        d->s.free_mem[g] += mem;
        d->s.held[g] = held;
        if (d->capped)
            return false;
    }
    return false;
}

bool egpu__cards_pick_dra(enum egpu_dra_order order, const struct egpu_cluster *c,
                          const struct egpu_node *node, const struct egpu_pod_request *r,
                          struct egpu_pick *pick, struct egpu__node_view *after, char *why,
                          size_t why_len)
{
    struct dra_search d = {.node = node, .r = r, .pick = pick};
    char scratch_why[8];
    int n;

    if (why == NULL) {
        why = scratch_why;
        why_len = sizeof(scratch_why);
    }
    pick->nshares = 0;
    if (!node_admits(c, node, r, why, why_len))
        return false;
    n = egpu_dra_device_order(node, order, d.order);
    if (n < 0) {
        snprintf(why, why_len, "unknown DRA device order %d", (int)order);
        return false;
    }
    d.n = (uint32_t)n;
    scratch_init(node, r, &d.s);
    if (dra_place(&d, 0, 0, 0)) {
        if (after != NULL)
            *after = d.s.view;
        return true;
    }
    pick->nshares = 0;
    if (d.capped) {
        snprintf(why, why_len,
                 "the DRA allocator gave up after trying %d devices for the pod's %u containers",
                 EGPU_DRA_STEPS_MAX, r->ncontainers);
    } else if (why != scratch_why) {
        /* The search tried every arrangement: no card choice fits, so the
         * greedy card tier fails too, and says on which container. */
        struct egpu_pick greedy;

        if (egpu__cards_pick(EGPU_POLICY_BINPACK, false, NULL, NULL, c, node, r, &greedy, NULL, why,
                             why_len))
            snprintf(why, why_len, "no arrangement of the pod's containers on the node's cards");
    }
    return false;
}
