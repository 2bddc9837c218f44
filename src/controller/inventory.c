/* controller/inventory.c - the cards a class may provision from, as a
 * placement-core cluster, with existing ElasticGPUs and what pods hold
 * counted as allocated (egpu/controller.h).
 *
 * The same core the scheduler and the replay run (src/core) then chooses
 * node and card, so a provisioned ElasticGPU lands where the scheduler's
 * policy would have put a pod of that shape. Cards are GPU objects; a node
 * takes part only while its Node object exists (its labels are what a
 * class's nodeSelector reads), and only with healthy cards of models the
 * class allows. Nodes have unbounded CPU and memory here: a reservation
 * holds card capacity only. What an existing ElasticGPU holds is read and
 * applied by the shared code the scheduler's cache and the replay run too
 * (egpu_api_egpu_reservation, egpu_cluster_reserve), so all three count the
 * same phases and the same capacity.
 *
 * Pods count too: what a running pod's elasticgpu.io/assigned (the
 * scheduler's record) puts on a card is taken, else a claim could be
 * provisioned on a card pods already fill and the scheduler would refuse
 * its reservation. A container that uses a claim runs inside that claim's
 * ElasticGPU and is counted there, not again beside it, by the scheduler's
 * cache's rule (egpu_api_resv_can_hold, one pod per ElasticGPU, exactly its
 * cards). Each container is held under its own key, so a pod is counted
 * and uncounted in O(its cards) on each of its events.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "egpu/controller.h"

#define NODE_UNBOUNDED ((int64_t)1 << 40)

static const char *str_at(const json_t *o, const char *a, const char *b)
{
    const json_t *v = json_object_get(o, a);

    return egpu_api_str(b != NULL ? json_object_get(v, b) : v);
}

static bool copy_text(char *dst, size_t len, const char *src)
{
    size_t n;

    if (src == NULL || (n = strlen(src)) >= len)
        return false;
    memcpy(dst, src, n + 1);
    return true;
}

/* Read GPU object g into *c. False when it is malformed or unhealthy. */
static bool card_read(const json_t *g, struct egpu_controller_card *c)
{
    const json_t *spec = json_object_get(g, "spec");
    const json_t *idx = json_object_get(spec, "index"), *mem = json_object_get(spec, "memory");
    const char *health = str_at(g, "status", "health");
    const char *model = str_at(spec, "model", NULL);

    memset(c, 0, sizeof(*c));
    if (!copy_text(c->name, sizeof(c->name), str_at(g, "metadata", "name")) ||
        !copy_text(c->node, sizeof(c->node), str_at(spec, "nodeName", NULL)) ||
        !copy_text(c->uuid, sizeof(c->uuid), str_at(spec, "uuid", NULL)) || c->name[0] == '\0' ||
        c->node[0] == '\0' || c->uuid[0] == '\0')
        return false;
    if (!copy_text(c->model, sizeof(c->model), model != NULL ? model : ""))
        return false;
    if (!json_is_integer(idx) || json_integer_value(idx) < 0 || json_integer_value(idx) > 1023 ||
        !json_is_integer(mem) || json_integer_value(mem) < 1 ||
        json_integer_value(mem) > UINT32_MAX)
        return false;
    c->index = (uint32_t)json_integer_value(idx);
    c->mem_mib = (uint32_t)json_integer_value(mem);
    return health == NULL || strcmp(health, "Unhealthy") != 0;
}

static int by_node_index(const void *a, const void *b)
{
    const struct egpu_controller_card *x = a, *y = b;
    int c = strcmp(x->node, y->node);

    return c != 0 ? c : (x->index > y->index) - (x->index < y->index);
}

/* The Node object called name in nodes, or NULL. */
static const json_t *node_named(const json_t *nodes, const char *name)
{
    size_t i;
    const json_t *n;

    json_array_foreach(nodes, i, n)
    {
        const char *nn = str_at(n, "metadata", "name");

        if (nn != NULL && strcmp(nn, name) == 0)
            return n;
    }
    return NULL;
}

/* Add cards[0..n) (one node, sorted by index) to inv's cluster. Returns 0
 * (added, or left out and counted in skipped) or -ENOMEM / EGPU_ELIMIT. */
static int add_node(struct egpu_controller_inventory *inv, const struct egpu_controller_card *cards,
                    size_t n)
{
    struct egpu_gpu_spec specs[EGPU_NODE_GPUS_MAX];
    struct egpu_node_spec ns = {.name = cards[0].node,
                                .cpu_milli = NODE_UNBOUNDED,
                                .mem_mib = NODE_UNBOUNDED,
                                .ngpus = (uint32_t)n,
                                .gpus = specs};
    struct egpu_error e = {0};
    int rc;

    for (size_t i = 1; i < n; i++) {
        if (strcmp(cards[i].model, cards[0].model) != 0 || cards[i].index == cards[i - 1].index)
            n = 0; /* mixed models or a repeated index: not this node */
    }
    if (n == 0 || n > EGPU_NODE_GPUS_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        specs[i] = (struct egpu_gpu_spec){.uuid = cards[i].uuid,
                                          .index = cards[i].index,
                                          .model = cards[i].model,
                                          .mem_mib = cards[i].mem_mib};
    rc = egpu_cluster_add_node(inv->cluster, &ns, &e);
    if (rc == -EINVAL || rc == -EEXIST)
        return 0; /* a repeated uuid: the node stays out */
    if (rc)
        return rc;
    for (size_t i = 0; i < n; i++) {
        struct egpu_controller_card *c = &inv->cards[inv->ncards++];

        *c = cards[i];
        if (egpu_map_put(inv->by_uuid, c->uuid, c) != 0 ||
            egpu_map_put(inv->by_name, c->name, c) != 0)
            return -ENOMEM;
    }
    return 0;
}

int egpu_controller_inventory_build(const json_t *gpus, const json_t *nodes,
                                    const struct egpu_api_class *cls,
                                    struct egpu_controller_inventory *inv, struct egpu_error *err)
{
    size_t n = json_array_size(gpus), nread = 0, i;
    struct egpu_controller_card *all = NULL;
    const json_t *g;
    int rc = 0;

    memset(inv, 0, sizeof(*inv));
    inv->cluster = egpu_cluster_new();
    inv->by_uuid = egpu_map_new();
    inv->by_name = egpu_map_new();
    inv->cards = egpu_calloc(n ? n : 1, sizeof(*inv->cards));
    inv->pods = json_object();
    inv->occupants = json_object();
    all = egpu_calloc(n ? n : 1, sizeof(*all));
    if (inv->cluster == NULL || inv->by_uuid == NULL || inv->by_name == NULL ||
        inv->cards == NULL || inv->pods == NULL || inv->occupants == NULL || all == NULL) {
        egpu_free(all);
        return egpu_error_set(err, -ENOMEM, "inventory: out of memory");
    }
    json_array_foreach(gpus, i, g)
    {
        struct egpu_controller_card *c = &all[nread];

        if (card_read(g, c) && (cls == NULL || egpu_api_class_allows_model(cls, c->model)))
            nread++;
    }
    inv->skipped = n - nread;
    qsort(all, nread, sizeof(*all), by_node_index);
    for (size_t s = 0, e; rc == 0 && s < nread; s = e) {
        const json_t *node;
        size_t before = inv->ncards;

        for (e = s + 1; e < nread && strcmp(all[e].node, all[s].node) == 0; e++)
            ;
        node = node_named(nodes, all[s].node);
        if (node != NULL && (cls == NULL || !cls->has_node_selector ||
                             egpu_api_selector_matches(
                                 &cls->node_selector,
                                 json_object_get(json_object_get(node, "metadata"), "labels"))))
            rc = add_node(inv, &all[s], e - s);
        inv->skipped += (e - s) - (inv->ncards - before);
    }
    egpu_free(all);
    if (rc)
        return egpu_error_set(err, rc, "inventory: %s", egpu_strerror(rc));
    return 0;
}

int egpu_controller_inventory_reserve(struct egpu_controller_inventory *inv,
                                      const struct egpu_api_egpu *e, struct egpu_error *err)
{
    struct egpu_reservation r;
    struct egpu_node *node = NULL;
    uint32_t kept = 0;
    char key[EGPU_CONTROLLER_RESV_KEY_MAX];

    if (!egpu_api_egpu_reservation(e, &r))
        return 0; /* Failed: it holds nothing */
    for (uint32_t i = 0; i < r.ncards; i++) {
        const struct egpu_controller_card *c = egpu_map_get(inv->by_name, r.uuids[i]);
        struct egpu_node *n = c != NULL ? egpu_cluster_node(inv->cluster, c->node) : NULL;

        if (n == NULL || (node != NULL && n != node))
            continue; /* not in the inventory, or on another node than the first */
        node = n;
        r.uuids[kept++] = c->uuid; /* GPU object name -> the core's card UUID */
    }
    if (node == NULL)
        return -ENOENT;
    r.ncards = kept;
    snprintf(key, sizeof(key), EGPU_CONTROLLER_RESV_PREFIX "%s", e->meta.name);
    return egpu_cluster_reserve(inv->cluster, key, node, &r, err);
}

void egpu_controller_inventory_unreserve(struct egpu_controller_inventory *inv, const char *name)
{
    char key[EGPU_CONTROLLER_RESV_KEY_MAX];

    if (snprintf(key, sizeof(key), EGPU_CONTROLLER_RESV_PREFIX "%s", name) < (int)sizeof(key) &&
        egpu_cluster_release(inv->cluster, key, NULL) != 0)
        return; /* none counted under that name */
}

/* The key pod key's container i is held under: never an ElasticGPU's (no
 * name holds a '/'), nor the selection trial's. */
static int pod_key(char *buf, size_t len, const char *key, uint32_t i)
{
    int n = snprintf(buf, len, "pod:%s#%u", key, i);

    return n > 0 && (size_t)n < len ? 0 : -ENAMETOOLONG;
}

/* Is container ac of pod key (on node n) counted inside ElasticGPU name:
 * counted in inv on n on exactly ac's cards, holding no other pod, and
 * large enough (egpu_api_resv_can_hold)? */
static bool is_inside(const struct egpu_controller_inventory *inv, const char *key,
                      const struct egpu_node *n, const struct egpu_assigned *a,
                      const struct egpu_assigned_container *ac, const char *name)
{
    const struct egpu_container_request cr = {.core_milli = ac->core_pct >= 100 ? EGPU_GPU_MILLI
                                                                                : ac->core_pct * 10,
                                              .ncards = ac->ncards,
                                              .mem_mib = ac->mem_mib};
    const char *occupant = egpu_api_str(json_object_get(inv->occupants, name));
    const struct egpu_assignment *asg;
    struct egpu_reservation r = {0};
    char rk[EGPU_CONTROLLER_RESV_KEY_MAX];

    snprintf(rk, sizeof(rk), EGPU_CONTROLLER_RESV_PREFIX "%s", name);
    asg = egpu_cluster_assignment(inv->cluster, rk);
    if (asg == NULL || asg->node != n || asg->nshares == 0 ||
        (occupant != NULL && strcmp(occupant, key) != 0))
        return false;
    r.core_milli = asg->shares[0].core_milli;
    r.mem_mib = asg->shares[0].mem_mib;
    r.ncards = asg->nshares;
    if (!egpu_api_resv_can_hold(&r, &cr))
        return false;
    for (uint32_t s = 0; s < asg->nshares; s++) {
        const char *uuid = n->gpus[asg->shares[s].gpu].uuid;
        bool mine = false;

        for (uint32_t g = 0; g < ac->ncards && !mine; g++)
            mine = strcmp(a->uuids[ac->first_card + g], uuid) == 0;
        if (!mine)
            return false;
    }
    return true;
}

int egpu_controller_inventory_count_pod(struct egpu_controller_inventory *inv, const char *key,
                                        const struct egpu_assigned *a, const char *const *egpus,
                                        struct egpu_error *err)
{
    struct egpu_node *n;
    json_t *in, *rec;
    int first = 0;

    egpu_controller_inventory_uncount_pod(inv, key);
    n = egpu_cluster_node(inv->cluster, a->node);
    if (n == NULL || a->ncontainers == 0)
        return 0; /* holds nothing, or on no node of this inventory */
    in = json_array();
    rec = json_pack("{s:I, s:o}", "n", (json_int_t)a->ncontainers, "in", in);
    if (rec == NULL || json_object_set_new(inv->pods, key, rec) != 0)
        return egpu_error_set(err, -ENOMEM, "inventory: out of memory");
    for (uint32_t i = 0; i < a->ncontainers; i++) {
        const struct egpu_assigned_container *ac = &a->containers[i];
        const char *name = egpus != NULL ? egpus[i] : NULL;
        struct egpu_reservation r = {.core_milli =
                                         ac->core_pct >= 100 ? EGPU_GPU_MILLI : ac->core_pct * 10,
                                     .mem_mib = ac->mem_mib};
        char pk[EGPU_CONTROLLER_RESV_KEY_MAX + EGPU_NAMESPACE_MAX + 16];
        struct egpu_error e = {0};
        int rc = 0;

        if (name != NULL && is_inside(inv, key, n, a, ac, name)) {
            if (json_object_set_new(inv->occupants, name, json_string(key)) != 0 ||
                json_array_append_new(in, json_string(name)) != 0)
                rc = egpu_error_set(&e, -ENOMEM, "inventory: out of memory");
        } else {
            for (uint32_t g = 0; g < ac->ncards; g++) {
                const struct egpu_controller_card *c =
                    egpu_map_get(inv->by_uuid, a->uuids[ac->first_card + g]);

                if (c != NULL && strcmp(c->node, a->node) == 0)
                    r.uuids[r.ncards++] = c->uuid;
            }
            if (r.ncards > 0 && pod_key(pk, sizeof(pk), key, i) == 0)
                rc = egpu_cluster_reserve(inv->cluster, pk, n, &r, &e);
        }
        if (rc != 0 && first == 0)
            first = egpu_error_set(err, rc, "pod %s container %s: %s", key, ac->name, e.msg);
    }
    return first;
}

void egpu_controller_inventory_uncount_pod(struct egpu_controller_inventory *inv, const char *key)
{
    const json_t *rec = json_object_get(inv->pods, key), *v;
    json_int_t n = json_integer_value(json_object_get(rec, "n"));
    char pk[EGPU_CONTROLLER_RESV_KEY_MAX + EGPU_NAMESPACE_MAX + 16];
    size_t i;

    if (rec == NULL)
        return;
    for (json_int_t c = 0; c < n; c++) {
        if (pod_key(pk, sizeof(pk), key, (uint32_t)c) == 0 &&
            egpu_cluster_release(inv->cluster, pk, NULL) != 0)
            continue; /* counted inside its ElasticGPU, or on no card of inv */
    }
    json_array_foreach(json_object_get(rec, "in"), i, v)
    {
        const char *name = json_string_value(v);
        const char *occupant = egpu_api_str(json_object_get(inv->occupants, name));

        if (occupant != NULL && strcmp(occupant, key) == 0)
            (void)json_object_del(inv->occupants, name); /* present: cannot fail */
    }
    (void)json_object_del(inv->pods, key); /* present: cannot fail */
}

void egpu_controller_inventory_free(struct egpu_controller_inventory *inv)
{
    egpu_cluster_free(inv->cluster);
    egpu_map_free(inv->by_uuid);
    egpu_map_free(inv->by_name);
    egpu_free(inv->cards);
    json_decref(inv->pods);
    json_decref(inv->occupants);
    memset(inv, 0, sizeof(*inv));
}

int egpu_controller_provisioned_name(const char *uid, char *buf, size_t len)
{
    int n = snprintf(buf, len, "egpu-%s", uid);

    return n < 0 || (size_t)n >= len || uid[0] == '\0' ? -ENAMETOOLONG : 0;
}
