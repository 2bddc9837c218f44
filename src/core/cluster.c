/* core/cluster.c - the cluster model: nodes, their cards, the GPU model table.
 *
 * DESIGN: the extender's live cache and the replay share this structure, so
 * every update is incremental: adding or removing a node is O(cards) plus a
 * hash-map update, never a rebuild. Each node carries a generation number
 * that changes on every change to it, which lets placers cache per-node
 * results safely. Cluster totals (cards, capacity, allocated compute) are kept
 * up to date so the allocation ratio is O(1).
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "egpu/core.h"
#include "assign_int.h"

/* Hands out cluster ids and membership stamps: one clock for every cluster
 * of the process, so a stamp or an id never matches a cluster it was not
 * taken from. */
static atomic_uint_least64_t members_clock;

static uint64_t members_stamp(void)
{
    return atomic_fetch_add(&members_clock, 1) + 1;
}

struct egpu_cluster *egpu_cluster_new(void)
{
    struct egpu_cluster *c = egpu_calloc(1, sizeof(*c));

    if (c == NULL)
        return NULL;
    c->by_name = egpu_map_new();
    c->by_pod = egpu_map_new();
    c->by_uuid = egpu_map_new();
    if (c->by_name == NULL || c->by_pod == NULL || c->by_uuid == NULL) {
        egpu_cluster_free(c);
        return NULL;
    }
    c->id = members_stamp();
    c->members = members_stamp();
    return c;
}

static void node_free(struct egpu_node *n)
{
    if (n == NULL)
        return;
    for (size_t i = 0; i < n->nlabels; i++) {
        egpu_free(n->labels[i].key);
        egpu_free(n->labels[i].value);
    }
    egpu_free(n->labels);
    for (uint32_t i = 0; n->gpus != NULL && i < n->ngpus; i++)
        egpu_free(n->gpus[i].unhealthy);
    egpu_free(n->gpus);
    egpu_free(n->uuids);
    egpu_free(n->links);
    egpu_free(n->name);
    egpu_free(n);
}

void egpu_cluster_free(struct egpu_cluster *c)
{
    if (c == NULL)
        return;
    for (size_t i = 0; i < c->nnodes; i++) {
        struct egpu_node *n = c->nodes[i];

        while (n->pods != NULL)
            egpu__assignment_drop(c, n->pods);
        node_free(n);
    }
    for (uint16_t i = 0; i < c->nmodels; i++)
        egpu_free(c->models[i]);
    egpu_free(c->nodes);
    egpu_free(c->gens);
    egpu_map_free(c->by_name);
    egpu_map_free(c->by_pod);
    egpu_map_free(c->by_uuid);
    egpu_free(c);
}

int egpu_cluster_find_model(const struct egpu_cluster *c, const char *name)
{
    for (uint16_t i = 0; i < c->nmodels; i++) {
        if (strcmp(c->models[i], name) == 0)
            return i;
    }
    return -ENOENT;
}

int egpu_cluster_model_id(struct egpu_cluster *c, const char *name)
{
    int id = egpu_cluster_find_model(c, name);

    if (id >= 0)
        return id;
    if (c->nmodels == EGPU_MODELS_MAX)
        return EGPU_ELIMIT;
    c->models[c->nmodels] = egpu_strdup(name);
    if (c->models[c->nmodels] == NULL)
        return -ENOMEM;
    return c->nmodels++;
}

int egpu_cluster_model_mask(struct egpu_cluster *c, const char *list, uint64_t *mask,
                            struct egpu_error *err)
{
    uint64_t m = 0;
    const char *p = list;

    if (*list == '\0') {
        *mask = 0;
        return 0;
    }
    for (;;) {
        const char *end = strchr(p, '|');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char name[128];
        int id;

        if (len == 0 || len >= sizeof(name))
            return egpu_error_set(err, EGPU_ESYNTAX,
                                  "GPU model list \"%s\": each model must be 1..127 characters, "
                                  "separated by '|'",
                                  list);
        memcpy(name, p, len);
        name[len] = '\0';
        id = egpu_cluster_model_id(c, name);
        if (id == EGPU_ELIMIT)
            return egpu_error_set(err, id, "GPU model list \"%s\": more than %d models in cluster",
                                  list, EGPU_MODELS_MAX);
        if (id < 0)
            return egpu_error_set(err, id, "GPU model list \"%s\": out of memory", list);
        m |= 1ULL << id;
        if (end == NULL)
            break;
        p = end + 1;
    }
    *mask = m;
    return 0;
}

struct egpu_node *egpu_cluster_node(const struct egpu_cluster *c, const char *name)
{
    return egpu_map_get(c->by_name, name);
}

void egpu_cluster_nodes(const struct egpu_cluster *c, const char *const *names, size_t n,
                        struct egpu_node **nodes)
{
    void *found[256];

    /* Through a void * array: the map stores void *, nodes holds node pointers. */
    for (size_t at = 0; at < n; at += 256) {
        size_t k = n - at < 256 ? n - at : 256;

        egpu_map_get_many(c->by_name, names + at, k, found);
        for (size_t i = 0; i < k; i++)
            nodes[at + i] = found[i];
    }
}

const char *egpu_node_label(const struct egpu_node *n, const char *key)
{
    for (size_t i = 0; i < n->nlabels; i++) {
        if (strcmp(n->labels[i].key, key) == 0)
            return n->labels[i].value;
    }
    return NULL;
}

static int check_spec(const struct egpu_cluster *c, const struct egpu_node_spec *s,
                      struct egpu_error *err)
{
    if (s->name == NULL || s->name[0] == '\0')
        return egpu_error_set(err, -EINVAL, "node name is empty");
    if (egpu_map_get(c->by_name, s->name) != NULL)
        return egpu_error_set(err, -EEXIST, "node %s already exists", s->name);
    if (s->cpu_milli < 0 || s->mem_mib < 0)
        return egpu_error_set(err, -EINVAL, "node %s: cpu and memory must be >= 0", s->name);
    if (s->ngpus > EGPU_NODE_GPUS_MAX)
        return egpu_error_set(err, -EINVAL, "node %s: %u cards, at most %d allowed", s->name,
                              s->ngpus, EGPU_NODE_GPUS_MAX);
    for (uint32_t i = 0; i < s->ngpus; i++) {
        const struct egpu_gpu_spec *g = &s->gpus[i];
        const char *mi = g->model && *g->model ? g->model : "unknown";
        const char *m0 = s->gpus[0].model && *s->gpus[0].model ? s->gpus[0].model : "unknown";

        if (strcmp(mi, m0) != 0)
            return egpu_error_set(err, -EINVAL,
                                  "node %s: cards of models %s and %s; one model "
                                  "per node is supported",
                                  s->name, m0, mi);
        if (g->uuid != NULL && (g->uuid[0] == '\0' || strlen(g->uuid) >= EGPU_UUID_MAX))
            return egpu_error_set(err, -EINVAL, "node %s: card %u UUID must be 1..%d characters",
                                  s->name, g->index, EGPU_UUID_MAX - 1);
        for (uint32_t l = 0; l < g->nlinks; l++) {
            if (g->links == NULL || g->links[l].level >= EGPU_TOPO_LEVELS)
                return egpu_error_set(err, -EINVAL, "node %s: card %u has a link of no known level",
                                      s->name, g->index);
        }
        for (uint32_t j = 0; j < i; j++) {
            if (s->gpus[j].index == g->index)
                return egpu_error_set(err, -EINVAL, "node %s: card index %u appears twice", s->name,
                                      g->index);
        }
    }
    return 0;
}

static int cmp_gpu_index(const void *a, const void *b)
{
    const struct egpu_gpu *x = a, *y = b;

    return (x->index > y->index) - (x->index < y->index);
}

/* Position of the card of NVML index in n->gpus (sorted), or n->ngpus. */
static uint32_t position_of(const struct egpu_node *n, uint32_t index)
{
    uint32_t lo = 0, hi = n->ngpus;

    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;

        if (n->gpus[mid].index < index)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n->ngpus && n->gpus[lo].index == index ? lo : n->ngpus;
}

/* What egpu_gpu.link reads on a node without topology. */
static const uint8_t no_links[EGPU_NODE_GPUS_MAX];

/* Fill egpu_gpu.link from the specs' links (n->gpus already sorted): each
 * pair gets the farther of what its two cards say, or the one that says
 * something. The rows are allocated only when a spec names a link.
 * Returns 0 or -ENOMEM. */
static int set_links(struct egpu_node *n, const struct egpu_node_spec *s)
{
    bool any = false;

    for (uint32_t i = 0; i < n->ngpus; i++) {
        n->gpus[i].link = no_links;
        any = any || s->gpus[i].nlinks > 0;
    }
    if (!any)
        return 0;
    n->links = egpu_calloc((size_t)n->ngpus * n->ngpus, 1);
    if (n->links == NULL)
        return -ENOMEM;
    for (uint32_t i = 0; i < n->ngpus; i++)
        n->gpus[i].link = n->links + (size_t)i * n->ngpus;
    for (uint32_t i = 0; i < s->ngpus; i++) {
        const struct egpu_gpu_spec *g = &s->gpus[i];
        uint32_t a = position_of(n, g->index);

        for (uint32_t l = 0; l < g->nlinks; l++) {
            uint32_t b = position_of(n, g->links[l].peer_index);
            uint8_t level = g->links[l].level, *ab, *ba;

            if (b == n->ngpus || b == a || level == EGPU_TOPO_UNKNOWN)
                continue;
            ab = &n->links[(size_t)a * n->ngpus + b];
            ba = &n->links[(size_t)b * n->ngpus + a];
            if (*ab == EGPU_TOPO_UNKNOWN || level < *ab)
                *ab = level;
            if (*ba == EGPU_TOPO_UNKNOWN || level < *ba)
                *ba = level;
            n->has_topology = true;
        }
    }
    return 0;
}

static void unindex_uuids(struct egpu_cluster *c, const struct egpu_node *n, uint32_t upto)
{
    for (uint32_t i = 0; i < upto; i++)
        (void)egpu_map_del(c->by_uuid, n->gpus[i].uuid); /* present: added above */
}

/* Count n into the cluster maxima (largest CPU, most cards) and how many
 * nodes hold them. */
static void note_maxima(struct egpu_cluster *c, const struct egpu_node *n)
{
    if (n->cpu_milli > c->max_cpu_milli || c->nmax_cpu == 0) {
        c->max_cpu_milli = n->cpu_milli;
        c->nmax_cpu = 1;
    } else if (n->cpu_milli == c->max_cpu_milli) {
        c->nmax_cpu++;
    }
    if (n->ngpus > c->max_ngpus || c->nmax_ngpus == 0) {
        c->max_ngpus = n->ngpus;
        c->nmax_ngpus = 1;
    } else if (n->ngpus == c->max_ngpus) {
        c->nmax_ngpus++;
    }
}

static int add_node(struct egpu_cluster *c, const struct egpu_node_spec *s, struct egpu_error *err)
{
    struct egpu_node *n;
    int rc = check_spec(c, s, err), model = EGPU_MODEL_NONE;
    uint32_t indexed = 0;
    char uuid[EGPU_NODE_GPUS_MAX][EGPU_UUID_MAX]; /* the cards', in the spec's order */
    size_t uuids_len = 0;

    if (rc)
        return rc;
    if (s->ngpus > 0) {
        const char *m = s->gpus[0].model && *s->gpus[0].model ? s->gpus[0].model : "unknown";

        model = egpu_cluster_model_id(c, m);
        if (model < 0)
            return egpu_error_set(err, model, "node %s: GPU model %s: %s", s->name, m,
                                  egpu_strerror(model));
    }
    if (c->nnodes == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 64;
        struct egpu_node **nodes = egpu_realloc(c->nodes, cap * sizeof(*nodes));
        uint64_t *gens;

        if (nodes == NULL)
            return egpu_error_set(err, -ENOMEM, "node %s: out of memory", s->name);
        c->nodes = nodes;
        gens = egpu_realloc(c->gens, cap * sizeof(*gens));
        if (gens == NULL)
            return egpu_error_set(err, -ENOMEM, "node %s: out of memory", s->name);
        c->gens = gens;
        c->cap = cap;
    }
    n = egpu_calloc(1, sizeof(*n));
    if (n == NULL)
        return egpu_error_set(err, -ENOMEM, "node %s: out of memory", s->name);
    n->name = egpu_strdup(s->name);
    n->gpus = egpu_calloc(s->ngpus, sizeof(*n->gpus));
    n->labels = egpu_calloc(s->nlabels, sizeof(*n->labels));
    if (n->name == NULL || n->gpus == NULL || n->labels == NULL)
        goto out_nomem;
    for (size_t i = 0; i < s->nlabels; i++, n->nlabels++) {
        n->labels[i].key = egpu_strdup(s->labels[i].key);
        n->labels[i].value = egpu_strdup(s->labels[i].value);
        if (n->labels[i].key == NULL || n->labels[i].value == NULL) {
            n->nlabels++; /* so node_free releases the partial pair */
            goto out_nomem;
        }
    }
    n->cpu_milli = s->cpu_milli;
    n->mem_mib = s->mem_mib;
    n->model = (uint16_t)model;
    n->ngpus = s->ngpus;
    for (uint32_t i = 0; i < s->ngpus; i++) {
        struct egpu_gpu *g = &n->gpus[i];

        g->index = s->gpus[i].index;
        g->model = (uint16_t)model;
        g->mem_mib = s->gpus[i].mem_mib;
        g->core_milli = EGPU_GPU_MILLI;
        g->load_pct = !s->gpus[i].load_known      ? EGPU_LOAD_UNKNOWN
                      : s->gpus[i].load_pct > 100 ? 100
                                                  : s->gpus[i].load_pct;
        if (s->gpus[i].unhealthy != NULL && s->gpus[i].unhealthy[0] != '\0' &&
            (g->unhealthy = egpu_strdup(s->gpus[i].unhealthy)) == NULL)
            goto out_nomem;
        if (s->gpus[i].uuid != NULL)
            snprintf(uuid[i], sizeof(uuid[i]), "%s", s->gpus[i].uuid);
        else if (snprintf(uuid[i], sizeof(uuid[i]), "%s-gpu%u", s->name, g->index) >=
                 (int)sizeof(uuid[i])) {
            rc = egpu_error_set(err, -EINVAL, "node %s: name too long to derive card UUIDs",
                                s->name);
            goto out_free;
        }
        uuids_len += strlen(uuid[i]) + 1;
    }
    n->uuids = egpu_malloc(uuids_len > 0 ? uuids_len : 1);
    if (n->uuids == NULL)
        goto out_nomem;
    for (uint32_t i = 0, at = 0; i < s->ngpus; i++) {
        size_t len = strlen(uuid[i]) + 1;

        n->gpus[i].uuid = memcpy(n->uuids + at, uuid[i], len);
        at += (uint32_t)len;
    }
    qsort(n->gpus, n->ngpus, sizeof(*n->gpus), cmp_gpu_index);
    if (set_links(n, s) != 0)
        goto out_nomem;
    for (; indexed < n->ngpus; indexed++) {
        rc = egpu_map_put(c->by_uuid, n->gpus[indexed].uuid, n);
        if (rc == -EEXIST) {
            rc = egpu_error_set(err, rc, "node %s: GPU UUID %s already exists", s->name,
                                n->gpus[indexed].uuid);
            goto out_unindex;
        }
        if (rc)
            goto out_unindex_nomem;
    }
    rc = egpu_map_put(c->by_name, n->name, n);
    if (rc)
        goto out_unindex_nomem;
    n->slot = c->nnodes;
    c->nodes[c->nnodes++] = n;
    egpu__node_touch(c, n);
    c->ngpus += n->ngpus;
    c->core_milli += (uint64_t)n->ngpus * EGPU_GPU_MILLI;
    note_maxima(c, n);
    return 0;

out_unindex_nomem:
    rc = egpu_error_set(err, -ENOMEM, "node %s: out of memory", s->name);
out_unindex:
    unindex_uuids(c, n, indexed);
out_free:
    node_free(n);
    return rc;
out_nomem:
    node_free(n);
    return egpu_error_set(err, -ENOMEM, "node %s: out of memory", s->name);
}

int egpu_cluster_add_node(struct egpu_cluster *c, const struct egpu_node_spec *s,
                          struct egpu_error *err)
{
    const uint16_t nmodels = c->nmodels;
    int rc = add_node(c, s, err);

    /* A refused node leaves no trace, not even its model's name. */
    while (rc && c->nmodels > nmodels)
        egpu_free(c->models[--c->nmodels]);
    if (rc == 0)
        c->members = members_stamp();
    return rc;
}

int egpu_cluster_remove_node(struct egpu_cluster *c, const char *name)
{
    struct egpu_node *n = egpu_map_get(c->by_name, name);
    struct egpu_node *last;

    if (n == NULL)
        return -ENOENT;
    while (n->pods != NULL)
        egpu__assignment_drop(c, n->pods);
    unindex_uuids(c, n, n->ngpus);
    (void)egpu_map_del(c->by_name, n->name); /* present: looked up above */
    c->members = members_stamp();
    last = c->nodes[--c->nnodes];
    c->nodes[n->slot] = last;
    last->slot = n->slot;
    egpu__node_touch(c, last); /* its slot changed: per-slot caches must not match */
    c->ngpus -= n->ngpus;
    c->core_milli -= (uint64_t)n->ngpus * EGPU_GPU_MILLI;
    /* Rescan only when the last node holding a maximum leaves: in a cluster
     * of like nodes that is rare, so removals stay O(1). */
    if (n->cpu_milli == c->max_cpu_milli)
        c->nmax_cpu--;
    if (n->ngpus == c->max_ngpus)
        c->nmax_ngpus--;
    if ((n->cpu_milli == c->max_cpu_milli && c->nmax_cpu == 0) ||
        (n->ngpus == c->max_ngpus && c->nmax_ngpus == 0)) {
        c->max_cpu_milli = 0;
        c->max_ngpus = 0;
        c->nmax_cpu = 0;
        c->nmax_ngpus = 0;
        for (size_t i = 0; i < c->nnodes; i++)
            note_maxima(c, c->nodes[i]);
    }
    node_free(n);
    return 0;
}

uint64_t egpu_cluster_idle_milli(const struct egpu_cluster *c)
{
    return c->core_milli - c->used_core_milli;
}
