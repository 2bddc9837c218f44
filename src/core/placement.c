/* core/placement.c - the placer: filter, score and choose a node and cards.
 *
 * A placer holds the two tiers' policies, the seed and the target workload.
 * The scheduler extender calls egpu_placer_can_host (filter) and
 * egpu_placer_score (prioritize) per node and commits with
 * egpu_cluster_assign (bind); the replay calls egpu_placer_schedule, which
 * does all three over every node.
 *
 * DESIGN: between two pods only the node that received the first one changed,
 * so with deterministic policies a node's result for a request shape is
 * cached with the node's generation number; a cached entry is used only
 * while the generation matches. Generations count per cluster, so the memo
 * is for one cluster, known by its id (egpu_cluster.id, never another
 * cluster's: one made where a freed one was has the same generations, not
 * the same id). Shapes are (CPU, memory, GPU compute per card, cards, GPU
 * memory, allowed models) of single-container pods; the least recently used
 * shape is evicted past MEMO_CLASSES. What it is worth: the extender's
 * filter+prioritize over 5,000 nodes in shuffled order costs 1.2-1.3 ms at
 * p50 with it and 2.3-2.5 ms without (bench_extender --one-core, on the
 * 2-core development VM; docs/scheduler.md).
 *
 * Beside the memo, a memoised placer keeps by slot what each node's state
 * allows (struct hot: free CPU and memory, the most free compute and memory
 * on one card, the whole free cards), read with the node's generation
 * whenever a shape evaluates it. A shape met for the first time skips the
 * nodes that cannot host it without reading their records (a new shape is
 * p99, and each node record read a cache and TLB miss at 20,000 nodes and
 * more): 37% of the card tier's calls in bench_extender's first 30 pods at
 * 5,000 nodes. Only what the card tier itself refuses for is checked, so
 * every verdict is the one it would give.
 *
 * The FGD family's evaluation of a node (cfg.workload: struct egpu__target,
 * made once per placer) reads the node's cards once per evaluation
 * (egpu__frag_base_set, per class of typical pods) and measures each card
 * choice and the node after from what changed (egpu__frag_base_eval, the
 * same doubles as egpu__frag_view); F'_n before, which no request shape
 * changes, is kept in the dense copy with the node's generation. What it
 * is worth: a memo miss evaluated a node in about 11,400 instructions with
 * fgd-cpu-fill and now in about 3,900 (bench_extender --nodes 5000 --direct
 * under callgrind; docs/scheduler.md).
 *
 * Load awareness (cfg.load_aware, see load.c): the card tier breaks its
 * exact ties by card load, and the node tier's exact score ties go to the
 * lower egpu_pick_load before the hash. A card's load is part of its node's
 * state (egpu_cluster_set_load renews the generation), so memoised entries
 * stay exact. Without it no load is read and every choice is as before.
 *
 * DRA mode (cfg.dra): the cards are the structured allocator's first fit
 * (egpu__cards_pick_dra) and the node the node tier's, as kube-scheduler
 * does with the extender's prioritize beside the DRA plugin. The node score
 * is computed with the allocator's cards (the extender aware of them) or,
 * with cfg.dra_blind, with the card tier's own choice (blind to them); the
 * cards committed are the allocator's either way. The device order depends
 * on the node's state only, so memoised entries stay exact.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "placement_int.h"

#define MEMO_CLASSES     256
#define MEMO_CARDS       8
/* The memo holds a verdict per node slot and request shape: at most
 * cfg.memo_bytes of them (this when 0; at least MEMO_CLASSES_MIN shapes), so
 * at 65,536 node slots it keeps the 170 shapes used last (1.5 MiB each)
 * instead of 256 (384 MiB); up to 43,690 slots all 256 fit. */
#define MEMO_BYTES       ((size_t)256 << 20)
#define MEMO_CLASSES_MIN 8
#define SLOTS_AHEAD      8 /* slots score_slots fetches ahead (fetch_ahead) */

/* 24 bytes, so that 256 MiB keeps 170 shapes at 65,536 node slots (the
 * openb trace's pods ask 126; at 32 bytes the 128 kept left some out, and
 * each of those is a filter that evaluates every node). */
struct memo_entry {
    double score;
    /* The node generation the entry is for, 0 = empty. A generation of 2^48
     * or more is kept cut to 48 bits and so never equals the node's (whose
     * generations only grow): past it the memo answers nothing, exactly. */
    uint64_t gen : 48;
    uint64_t load : 16; /* egpu_pick_load of the pick (load-aware placers) */
    uint64_t ok : 1;
    uint64_t ncards : 4; /* 0..MEMO_CARDS */
    uint64_t gpus : 48;  /* the cards picked, MEMO_GPU_BITS each (< EGPU_NODE_GPUS_MAX) */
};
#define MEMO_GPU_BITS 6
_Static_assert(MEMO_CARDS *MEMO_GPU_BITS <= 48 && EGPU_NODE_GPUS_MAX <= 1 << MEMO_GPU_BITS,
               "memo_entry.gpus holds MEMO_CARDS card positions");

/* What a node's state allows, kept by slot for the generation it was read
 * at, in one dense array: a pod that asks more than it (hot_refuses) fits
 * no card choice, so a request shape met for the first time skips such a
 * node without reading its record. */
struct hot {
    uint64_t gen; /* node generation; 0 = not read */
    int64_t free_cpu_milli, free_mem_mib;
    uint32_t share_milli;   /* the most free compute on one card (unhealthy: none) */
    uint32_t share_mem_mib; /* the most free memory on one card */
    uint32_t whole_mem_mib; /* the most memory of a card nobody holds */
    uint16_t nwhole;        /* cards nobody holds, all compute free */
    uint16_t model;
    uint32_t ngpus;
    double frag_before; /* F'_n for the node policy (FGD family), NAN = not known */
};

struct memo_class {
    struct egpu_pod_request shape; /* cpu, mem, model mask, container 0 */
    uint64_t last_used;
    struct memo_entry *entries; /* by node slot */
    size_t nentries;
};

/* One of the nodes FGD's order puts first (schedule_look). */
struct look_top {
    struct egpu_node *node;
    double score;
    uint16_t load;
    uint64_t rank;
    struct egpu_pick pick;
};

struct egpu_placer {
    struct egpu_placer_config cfg;
    struct egpu_rng rng;
    uint64_t memo_cluster; /* the id of the cluster the memo is for; 0 = none */
    int64_t memo_max_cpu;  /* best-fit scores depend on the cluster maxima */
    uint32_t memo_max_ngpus;
    uint64_t clock;
    size_t last; /* index of the class used last */
    size_t nclasses;
    struct memo_class classes[MEMO_CLASSES];
    struct egpu__look *look;            /* fgd-cpu-look's cache (lookahead.c); NULL until used */
    struct look_top top[EGPU_LOOK_TOP]; /* schedule_look's scratch */
    struct egpu_node *top_nodes[EGPU_LOOK_TOP];
    struct egpu_pick top_picks[EGPU_LOOK_TOP];
    struct hot *hot; /* by node slot, nhot entries (memoised placers) */
    size_t nhot;
    struct egpu__target tgt; /* cfg.workload's, FGD-family placers (tgt.w NULL otherwise) */
};

struct egpu_placer *egpu_placer_new(const struct egpu_placer_config *cfg, struct egpu_error *err)
{
    struct egpu_placer *p;

    if ((egpu__policy_fgd_family(cfg->node_policy) || egpu__policy_fgd_family(cfg->card_policy)) &&
        (cfg->workload == NULL || cfg->workload->n == 0)) {
        egpu_error_set(err, -EINVAL, "policy %s needs a target workload",
                       egpu_policy_name(egpu__policy_fgd_family(cfg->node_policy)
                                            ? cfg->node_policy
                                            : cfg->card_policy));
        return NULL;
    }
    if (cfg->dra && (size_t)cfg->dra_order >= EGPU_DRA_ORDER_COUNT) {
        egpu_error_set(err, -EINVAL, "DRA device order %d: allowed: " EGPU_DRA_ORDER_NAMES,
                       (int)cfg->dra_order);
        return NULL;
    }
    p = egpu_calloc(1, sizeof(*p));
    if (p == NULL) {
        egpu_error_set(err, -ENOMEM, "placer: out of memory");
        return NULL;
    }
    p->cfg = *cfg;
    if ((egpu__policy_fgd_family(cfg->node_policy) || egpu__policy_fgd_family(cfg->card_policy)) &&
        egpu__target_init(&p->tgt, cfg->workload,
                          egpu__policy_fills(cfg->node_policy) ||
                              egpu__policy_fills(cfg->card_policy)) != 0) {
        egpu_free(p);
        egpu_error_set(err, -ENOMEM, "placer: out of memory");
        return NULL;
    }
    egpu_rng_seed(&p->rng, cfg->seed);
    return p;
}

void egpu_placer_free(struct egpu_placer *p)
{
    if (p == NULL)
        return;
    for (size_t i = 0; i < p->nclasses; i++)
        egpu_free(p->classes[i].entries);
    egpu__look_free(p->look);
    egpu_free(p->hot);
    egpu__target_free(&p->tgt);
    egpu_free(p);
}

static bool memo_usable(const struct egpu_placer *p, const struct egpu_pod_request *r)
{
    return p->cfg.memo && p->cfg.node_policy != EGPU_POLICY_RANDOM &&
           p->cfg.card_policy != EGPU_POLICY_RANDOM && r->ncontainers <= 1 &&
           (r->ncontainers == 0 || r->containers[0].ncards <= MEMO_CARDS);
}

static void memo_reset(struct egpu_placer *p, const struct egpu_cluster *c)
{
    for (size_t i = 0; i < p->nclasses; i++) {
        egpu_free(p->classes[i].entries);
        p->classes[i].entries = NULL;
        p->classes[i].nentries = 0;
    }
    p->nclasses = 0;
    egpu_free(p->hot);
    p->hot = NULL;
    p->nhot = 0;
    p->memo_cluster = c->id;
    p->memo_max_cpu = c->max_cpu_milli;
    p->memo_max_ngpus = c->max_ngpus;
}

/* How many shapes the memo keeps for c (MEMO_BYTES of verdicts). */
static size_t memo_limit(const struct egpu_placer *p, const struct egpu_cluster *c)
{
    size_t bytes = p->cfg.memo_bytes > 0 ? p->cfg.memo_bytes : MEMO_BYTES;
    size_t n = bytes / ((c->cap > 0 ? c->cap : 1) * sizeof(struct memo_entry));

    return n < MEMO_CLASSES_MIN ? MEMO_CLASSES_MIN : n > MEMO_CLASSES ? MEMO_CLASSES : n;
}

/* The least recently used class. p->nclasses > 0. */
static struct memo_class *memo_lru(struct egpu_placer *p)
{
    struct memo_class *mc = &p->classes[0];

    for (size_t i = 1; i < p->nclasses; i++) {
        if (p->classes[i].last_used < mc->last_used)
            mc = &p->classes[i];
    }
    return mc;
}

/* Grow *arr (of *n entries of size bytes each) to cap entries, the new ones
 * zeroed (an empty memo entry, an unknown hot copy). False, *arr and *n as
 * they were, when out of memory. */
static bool grow_zeroed(void **arr, size_t *n, size_t cap, size_t size)
{
    unsigned char *a = egpu_realloc(*arr, cap * size);

    if (a == NULL)
        return false;
    memset(a + *n * size, 0, (cap - *n) * size);
    *arr = a;
    *n = cap;
    return true;
}

/* The memo class of r, found or made; NULL when out of memory. */
static struct memo_class *memo_class(struct egpu_placer *p, const struct egpu_cluster *c,
                                     const struct egpu_pod_request *r)
{
    struct memo_class *mc = NULL;

    if (p->memo_cluster != c->id || p->memo_max_cpu != c->max_cpu_milli ||
        p->memo_max_ngpus != c->max_ngpus)
        memo_reset(p, c);
    /* The extender asks for one request across every node in a row: try the
     * last class first. */
    if (p->last < p->nclasses && egpu_request_same_shape(&p->classes[p->last].shape, r))
        mc = &p->classes[p->last];
    for (size_t i = 0; i < p->nclasses && mc == NULL; i++) {
        if (egpu_request_same_shape(&p->classes[i].shape, r))
            mc = &p->classes[i];
    }
    if (mc == NULL) {
        size_t limit = memo_limit(p, c);

        /* The cluster grew past what the kept shapes may take: the least
         * recently used go (the last class moves into the freed place). */
        while (p->nclasses > limit) {
            struct memo_class *gone = memo_lru(p);

            egpu_free(gone->entries);
            *gone = p->classes[--p->nclasses];
            memset(&p->classes[p->nclasses], 0, sizeof(p->classes[0]));
        }
        if (p->nclasses < limit) {
            mc = &p->classes[p->nclasses++];
        } else {
            mc = memo_lru(p);
            memset(mc->entries, 0, mc->nentries * sizeof(mc->entries[0]));
        }
        (void)egpu_request_shape_of(r, &mc->shape); /* memo_usable: one container at most */
    }
    mc->last_used = ++p->clock;
    p->last = (size_t)(mc - p->classes);
    if (mc->nentries < c->nnodes &&
        !grow_zeroed((void **)&mc->entries, &mc->nentries, c->cap, sizeof(*mc->entries)))
        return NULL;
    if (p->nhot < c->nnodes && !grow_zeroed((void **)&p->hot, &p->nhot, c->cap, sizeof(*p->hot)))
        return NULL;
    return mc;
}

static void pick_from_memo(const struct egpu_node *node, const struct egpu_pod_request *r,
                           const struct memo_entry *e, struct egpu_pick *pick)
{
    const struct egpu_container_request *cr = &r->containers[0];

    pick->nshares = e->ncards;
    for (uint32_t i = 0; i < e->ncards; i++) {
        struct egpu_share *s = &pick->shares[i];

        s->container = 0;
        s->gpu = (uint16_t)(e->gpus >> (MEMO_GPU_BITS * i) & ((1u << MEMO_GPU_BITS) - 1));
        s->core_milli = cr->core_milli;
        s->mem_mib = cr->core_milli == EGPU_GPU_MILLI ? node->gpus[s->gpu].mem_mib : cr->mem_mib;
    }
}

/* The memo class for r, or NULL when r's results are not cached. */
static struct memo_class *memo_for(struct egpu_placer *p, const struct egpu_cluster *c,
                                   const struct egpu_pod_request *r)
{
    return memo_usable(p, r) ? memo_class(p, c, r) : NULL;
}

/* Read what node's state allows into *h. The same figures egpu__cards_pick
 * reads: an unhealthy card has no compute or memory free and is held. */
static void hot_read(const struct egpu_node *node, struct hot *h)
{
    *h = (struct hot){.gen = node->gen,
                      .frag_before = NAN,
                      .free_cpu_milli = node->cpu_milli - node->used_cpu_milli,
                      .free_mem_mib = node->mem_mib - node->used_mem_mib,
                      .model = node->model,
                      .ngpus = node->ngpus};
    for (uint32_t g = 0; g < node->ngpus; g++) {
        const struct egpu_gpu *gpu = &node->gpus[g];
        uint32_t core = gpu->unhealthy ? 0 : egpu_gpu_free_core(gpu);
        uint32_t mem = gpu->unhealthy ? 0 : egpu_gpu_free_mem(gpu);

        h->share_milli = core > h->share_milli ? core : h->share_milli;
        h->share_mem_mib = mem > h->share_mem_mib ? mem : h->share_mem_mib;
        if (gpu->nshares == 0 && gpu->unhealthy == NULL && core == EGPU_GPU_MILLI) {
            h->nwhole++;
            if (gpu->mem_mib > h->whole_mem_mib)
                h->whole_mem_mib = gpu->mem_mib;
        }
    }
}

/* Does h show that r (one container at most: a memoised shape) fits no card
 * choice of egpu__cards_pick? Only what it would refuse for: the node's
 * checks (cards, model, CPU, memory), and for the container no card with
 * the share's compute and memory free, or fewer whole free cards than it
 * asks or none with its memory. true is certain; false decides nothing. */
static bool hot_refuses(const struct hot *h, const struct egpu_pod_request *r)
{
    const struct egpu_container_request *cr = &r->containers[0];

    if (r->ncontainers > 0 &&
        (h->ngpus == 0 || (r->model_mask != 0 &&
                           (h->model == EGPU_MODEL_NONE || !(r->model_mask & (1ULL << h->model))))))
        return true;
    if (r->cpu_milli > h->free_cpu_milli || r->mem_mib > h->free_mem_mib)
        return true;
    if (r->ncontainers == 0)
        return false;
    if (cr->core_milli == EGPU_GPU_MILLI)
        return cr->ncards > 0 && (h->nwhole < cr->ncards || cr->mem_mib > h->whole_mem_mib);
    return cr->core_milli > h->share_milli || cr->mem_mib > h->share_mem_mib;
}

/* Evaluate node for r: feasibility, card-tier pick and node-tier score,
 * and in *load (may be NULL) the pick's load with load awareness, else
 * EGPU_LOAD_UNKNOWN. mc (may be NULL) is r's memo class from memo_for. */
static bool evaluate(struct egpu_placer *p, const struct egpu_cluster *c, struct memo_class *mc,
                     const struct egpu_node *node, const struct egpu_pod_request *r, double *score,
                     struct egpu_pick *pick, uint16_t *load, char *why, size_t why_len)
{
    struct egpu__node_view after;
    struct memo_entry *e = NULL;
    uint16_t l = EGPU_LOAD_UNKNOWN;
    bool ok;

    if (mc != NULL && why == NULL) {
        e = &mc->entries[node->slot];
        if (e->gen == node->gen) {
            if (e->ok) {
                *score = e->score;
                pick_from_memo(node, r, e, pick);
                if (load != NULL)
                    *load = e->load;
            }
            return e->ok;
        }
        /* Card tier's own checks, from the dense copy (not in DRA mode,
         * whose allocator is another search). */
        if (!p->cfg.dra && p->hot[node->slot].gen == node->gen &&
            hot_refuses(&p->hot[node->slot], r)) {
            *e = (struct memo_entry){.gen = node->gen, .ok = false, .load = EGPU_LOAD_UNKNOWN};
            return false;
        }
    }
    p->tgt.base_ready = false; /* another node, or this one in another state */
    p->tgt.frag_before =
        e != NULL && p->hot[node->slot].gen == node->gen ? p->hot[node->slot].frag_before : NAN;
    if (!p->cfg.dra) {
        ok = egpu__cards_pick(p->cfg.card_policy, p->cfg.load_aware, &p->tgt, &p->rng, c, node, r,
                              pick, &after, why, why_len);
    } else {
        ok = egpu__cards_pick_dra(p->cfg.dra_order, c, node, r, pick, &after, why, why_len);
        if (ok && p->cfg.dra_blind) {
            /* The extender scores the node with the cards it would choose. */
            struct egpu_pick own;

            ok = egpu__cards_pick(p->cfg.card_policy, p->cfg.load_aware, &p->tgt, &p->rng, c, node,
                                  r, &own, &after, why, why_len);
        }
    }
    if (ok)
        *score = egpu__node_score(p->cfg.node_policy, &p->tgt, &p->rng, c, node, r, &after);
    if (ok && p->cfg.load_aware)
        l = egpu_pick_load(node, pick);
    if (ok && load != NULL)
        *load = l;
    if (e != NULL && p->hot[node->slot].gen != node->gen)
        hot_read(node, &p->hot[node->slot]);
    if (e != NULL) {
        p->hot[node->slot].frag_before = p->tgt.frag_before;
        e->gen = node->gen;
        e->ok = ok;
        e->load = l;
        e->score = ok ? *score : 0.0;
        e->ncards = ok ? pick->nshares : 0;
        e->gpus = 0;
        for (uint32_t i = 0; ok && i < pick->nshares; i++)
            e->gpus |= (uint64_t)pick->shares[i].gpu << (MEMO_GPU_BITS * i);
    }
    return ok;
}

bool egpu_placer_can_host(struct egpu_placer *p, const struct egpu_cluster *c,
                          const struct egpu_node *node, const struct egpu_pod_request *r,
                          struct egpu_pick *pick, char *reason, size_t reason_len)
{
    struct egpu_pick local;
    double score;

    return evaluate(p, c, reason ? NULL : memo_for(p, c, r), node, r, &score, pick ? pick : &local,
                    NULL, reason, reason_len);
}

int egpu_placer_score(struct egpu_placer *p, const struct egpu_cluster *c,
                      const struct egpu_node *node, const struct egpu_pod_request *r, double *score,
                      struct egpu_pick *pick)
{
    struct egpu_pick local;

    if (!evaluate(p, c, memo_for(p, c, r), node, r, score, pick ? pick : &local, NULL, NULL, 0))
        return EGPU_ENOFIT;
    return 0;
}

/* Will score_slots evaluate the node in slot (in range) for mc's shape,
 * neither its memo entry nor the dense copy answering? */
static bool slot_needs_node(const struct egpu_placer *p, const struct egpu_cluster *c,
                            const struct memo_class *mc, const struct egpu_pod_request *r,
                            uint32_t slot)
{
    uint64_t gen = c->gens[slot];

    return mc->entries[slot].gen != gen &&
           (p->cfg.dra || p->hot[slot].gen != gen || !hot_refuses(&p->hot[slot], r));
}

/* Fetch ahead what score_slots reads of slots[i] (i < n): at
 * 2 * SLOTS_AHEAD its memo entry, generation and dense copy; at SLOTS_AHEAD
 * whether the node will be evaluated (into needs, a ring of 2 * SLOTS_AHEAD
 * by position) and for such a node its pointer, at SLOTS_AHEAD / 2 the
 * node record and at SLOTS_AHEAD / 4 the node's cards (each node evaluated
 * was a cache and TLB miss after another one). Nothing more for a node its
 * memo answers. */
static void fetch_ahead(const struct egpu_placer *p, const struct egpu_cluster *c,
                        const struct memo_class *mc, const struct egpu_pod_request *r,
                        const uint32_t *slots, size_t n, size_t i, bool *needs)
{
    size_t k;

    if ((k = i + 2 * SLOTS_AHEAD) < n && slots[k] < c->nnodes) {
        __builtin_prefetch(&mc->entries[slots[k]]);
        __builtin_prefetch(&c->gens[slots[k]]);
        __builtin_prefetch(&p->hot[slots[k]]);
    }
    if ((k = i + SLOTS_AHEAD) < n) {
        needs[k % (2 * SLOTS_AHEAD)] =
            slots[k] < c->nnodes && slot_needs_node(p, c, mc, r, slots[k]);
        if (needs[k % (2 * SLOTS_AHEAD)])
            __builtin_prefetch(&c->nodes[slots[k]]);
    }
    if ((k = i + SLOTS_AHEAD / 2) < n && needs[k % (2 * SLOTS_AHEAD)])
        __builtin_prefetch(c->nodes[slots[k]]);
    if ((k = i + SLOTS_AHEAD / 4) < n && needs[k % (2 * SLOTS_AHEAD)]) {
        const struct egpu_node *node = c->nodes[slots[k]];

        for (uint32_t g = 0; g < node->ngpus; g++) {
            __builtin_prefetch(&node->gpus[g].mem_mib);
            __builtin_prefetch(&node->gpus[g].load_pct);
        }
    }
}

/* The verdict on r of the node in slot (< c->nnodes) into *out: from mc's
 * entry when it is of the node's generation, else made (the dense copy's
 * refusal, or evaluate) and memoised in mc (NULL: no memo). Returns whether
 * it was made rather than read. */
static bool slot_verdict(struct egpu_placer *p, const struct egpu_cluster *c, struct memo_class *mc,
                         const struct egpu_pod_request *r, uint32_t slot, struct egpu_verdict *out)
{
    struct egpu_pick pick;

    *out = (struct egpu_verdict){.score = 0.0, .ok = false, .load = EGPU_LOAD_UNKNOWN};
    if (mc != NULL) {
        struct memo_entry *e = &mc->entries[slot];

        if (e->gen == c->gens[slot]) {
            *out = (struct egpu_verdict){.score = e->score, .ok = e->ok, .load = e->load};
            return false;
        }
        /* evaluate's check, here without reading the node record. */
        if (!p->cfg.dra && p->hot[slot].gen == c->gens[slot] && hot_refuses(&p->hot[slot], r)) {
            *e = (struct memo_entry){.gen = c->gens[slot], .ok = false, .load = EGPU_LOAD_UNKNOWN};
            return true;
        }
    }
    out->ok = evaluate(p, c, mc, c->nodes[slot], r, &out->score, &pick, &out->load, NULL, 0);
    if (!out->ok) {
        out->score = 0.0;
        out->load = EGPU_LOAD_UNKNOWN;
    }
    return true;
}

void egpu_placer_score_slots(struct egpu_placer *p, const struct egpu_cluster *c,
                             const struct egpu_pod_request *r, const uint32_t *slots, size_t n,
                             struct egpu_verdict *out)
{
    struct memo_class *mc = memo_for(p, c, r);
    bool needs[2 * SLOTS_AHEAD] = {false};

    for (size_t i = 0; i < n; i++) {
        uint32_t slot = slots[i];

        /* Slots come in the request's order: fetch a few ahead. */
        if (mc != NULL)
            fetch_ahead(p, c, mc, r, slots, n, i, needs);
        if (slot == EGPU_NO_SLOT || slot >= c->nnodes) /* no node (a stale slot: none either) */
            out[i] = (struct egpu_verdict){.score = 0.0, .ok = false, .load = EGPU_LOAD_UNKNOWN};
        else
            (void)slot_verdict(p, c, mc, r, slot, &out[i]);
    }
}

size_t egpu_placer_memo_shapes(const struct egpu_placer *p, const struct egpu_cluster *c)
{
    struct egpu_pod_request none = {0};

    return memo_usable(p, &none) ? memo_limit(p, c) : 0;
}

size_t egpu_placer_warm(struct egpu_placer *p, const struct egpu_cluster *c,
                        const struct egpu_pod_request *r, uint32_t first, uint32_t n)
{
    struct memo_class *mc = memo_for(p, c, r);
    size_t end = (size_t)first + n, made = 0;
    struct egpu_verdict v;

    if (mc == NULL)
        return 0;
    if (end > c->nnodes)
        end = c->nnodes;
    for (size_t slot = first; slot < end; slot++)
        made += slot_verdict(p, c, mc, r, (uint32_t)slot, &v);
    return made;
}

/* The best node so far of a schedule: egpu_placer_schedule's rule. */
struct best_node {
    struct egpu_node *node; /* NULL: none yet */
    double score;
    uint64_t rank;
    uint16_t load;
};

/* FGD's order of a node (score sa, load la) against another (sb, lb):
 * 1 when it comes first, -1 when the other does, 0 when the per-seed hash
 * rank decides. Without load awareness every load is EGPU_LOAD_UNKNOWN. */
static int order_of(double sa, uint16_t la, double sb, uint16_t lb)
{
    if (sa != sb)
        return sa > sb ? 1 : -1;
    if (la != lb)
        return la < lb ? 1 : -1;
    return 0;
}

/* Offer node n to *b: it becomes the best when it can host r and beats the
 * best so far (order_of, then the per-seed hash); *pick then gets its
 * cards. */
static void offer(struct egpu_placer *p, const struct egpu_cluster *c, struct memo_class *mc,
                  struct egpu_node *n, const struct egpu_pod_request *r, struct best_node *b,
                  struct egpu_pick *pick)
{
    struct egpu_pick cur;
    uint16_t load;
    uint64_t rank;
    double s;
    int o;

    if (!evaluate(p, c, mc, n, r, &s, &cur, &load, NULL, 0))
        return;
    o = b->node == NULL ? 1 : order_of(s, load, b->score, b->load);
    if (o < 0)
        return;
    /* The hash only for a node that may be the best (most are not). */
    rank = egpu_hash_str(n->name, p->cfg.seed);
    if (o == 0 && rank >= b->rank)
        return;
    b->rank = rank;
    b->node = n;
    b->score = s;
    b->load = load;
    pick->nshares = cur.nshares;
    memcpy(pick->shares, cur.shares, cur.nshares * sizeof(cur.shares[0]));
}

/* Does a come before b in FGD's order: score, then load, then hash rank? */
static bool top_before(double sa, uint16_t la, uint64_t ra, const struct look_top *b)
{
    int o = order_of(sa, la, b->score, b->load);

    return o != 0 ? o > 0 : ra < b->rank;
}

/* egpu_placer_schedule for fgd-cpu-look: the top M nodes in FGD's order,
 * the one the lookahead ranks best among them (lookahead.c). */
static int schedule_look(struct egpu_placer *p, const struct egpu_cluster *c,
                         const struct egpu_pod_request *r, struct egpu_node **node,
                         struct egpu_pick *pick)
{
    struct look_top *top = p->top;
    struct egpu_node **nodes = p->top_nodes;
    struct egpu_pick *picks = p->top_picks;
    struct memo_class *mc = memo_for(p, c, r);
    const size_t m = EGPU_LOOK_TOP;
    size_t n = 0, chosen;
    struct egpu_pick cur;

    for (size_t i = 0; i < c->nnodes; i++) {
        struct egpu_node *nd = c->nodes[i];
        uint16_t load;
        uint64_t rank;
        double s;
        size_t at;

        if (!evaluate(p, c, mc, nd, r, &s, &cur, &load, NULL, 0))
            continue;
        rank = egpu_hash_str(nd->name, p->cfg.seed);
        if (n == m && !top_before(s, load, rank, &top[n - 1]))
            continue;
        at = n < m ? n++ : n - 1;
        while (at > 0 && top_before(s, load, rank, &top[at - 1])) {
            top[at] = top[at - 1];
            at--;
        }
        top[at] = (struct look_top){.node = nd, .score = s, .load = load, .rank = rank};
        top[at].pick.nshares = cur.nshares;
        memcpy(top[at].pick.shares, cur.shares, cur.nshares * sizeof(cur.shares[0]));
    }
    if (n == 0)
        return EGPU_ENOFIT;
    for (size_t j = 0; j < n; j++) {
        nodes[j] = top[j].node;
        picks[j] = top[j].pick;
    }
    chosen = egpu__look_choose(&p->look, p->cfg.node_policy, &p->tgt, c, r, nodes, picks, n);
    *node = nodes[chosen];
    pick->nshares = picks[chosen].nshares;
    memcpy(pick->shares, picks[chosen].shares, picks[chosen].nshares * sizeof(pick->shares[0]));
    return 0;
}

int egpu_placer_schedule(struct egpu_placer *p, const struct egpu_cluster *c,
                         const struct egpu_pod_request *r, struct egpu_node **node,
                         struct egpu_pick *pick)
{
    struct memo_class *mc = memo_for(p, c, r);
    struct best_node b = {.load = EGPU_LOAD_UNKNOWN};

    if ((p->cfg.node_policy == EGPU_POLICY_FGD_CPU_LOOK ||
         p->cfg.node_policy == EGPU_POLICY_FGD_CPU_FILL_LOOK) &&
        !p->cfg.dra)
        return schedule_look(p, c, r, node, pick);
    for (size_t i = 0; i < c->nnodes; i++)
        offer(p, c, mc, c->nodes[i], r, &b, pick);
    if (b.node == NULL)
        return EGPU_ENOFIT;
    *node = b.node;
    return 0;
}

int egpu_placer_schedule_slots(struct egpu_placer *p, const struct egpu_cluster *c,
                               const struct egpu_pod_request *r, const uint32_t *slots, size_t n,
                               struct egpu_node **node, struct egpu_pick *pick)
{
    struct memo_class *mc = memo_for(p, c, r);
    struct best_node b = {.load = EGPU_LOAD_UNKNOWN};

    for (size_t i = 0; i < n; i++) {
        if (slots[i] != EGPU_NO_SLOT && slots[i] < c->nnodes)
            offer(p, c, mc, c->nodes[slots[i]], r, &b, pick);
    }
    if (b.node == NULL)
        return EGPU_ENOFIT;
    *node = b.node;
    return 0;
}
