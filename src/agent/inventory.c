/* agent/inventory.c - one GPU object per card of this node in the API server.
 *
 * egpu_inventory_publish makes the GPU objects (elasticgpu.io/v1alpha1,
 * deploy/crds/elasticgpu.io_gpus.yaml) of one node match the cards a
 * backend listed: it creates the missing ones, patches what differs, and
 * deletes those of cards that are gone. The scheduler's cache
 * (src/scheduler/cache.c) reads spec nodeName, index, uuid, model and memory
 * (MiB); status health and capacity (core percent, memory MiB) say what the
 * card offers.
 *
 * DESIGN: level-triggered and idempotent. Each run lists this node's
 * objects (label elasticgpu.io/node=<node>: label selectors work on every
 * Kubernetes version, CRD field selectors only from 1.31), compares, and
 * writes only differences, so a rerun or a restarted agent writes nothing.
 * Writes are JSON merge patches of the fields the agent owns: no
 * resourceVersion to go stale, and status.allocated, written by
 * egpu-controller, is never touched; status.used is written on its own by
 * egpu_inventory_report_used, so publishing never compares or writes it.
 * Only fields of the CRD's schema are written:
 * a real API server prunes unknown ones, which would make every compare
 * differ. Objects whose spec.nodeName is another node are never changed,
 * whatever their label says.
 *
 * Names: "<node>-gpu<index>", as a DNS subdomain (egpu_inventory_gpu_name).
 * An object at the right name holding another UUID means another card now
 * has that index: it is deleted and created again rather than patched, so
 * the allocations recorded against the old card leave with it.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "egpu/agent.h"
#include "egpu/log.h"

#define LABEL_VALUE_MAX   63 /* characters of a label value */
#define LABEL_HASHED_KEEP 46 /* node characters kept in a hashed label value */
#define FULL_CORE_PCT     100

/* ------------------------------------------------------------------------ */
/* Names                                                                    */

static bool is_lower_alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

static bool is_alnum(char c)
{
    return is_lower_alnum(c) || (c >= 'A' && c <= 'Z');
}

static char to_lower(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

static uint64_t fnv1a64(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ULL;

    for (; *s != '\0'; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ULL;
    }
    return h;
}

int egpu_inventory_gpu_name(const char *node, uint32_t index, char *out, size_t len,
                            struct egpu_error *err)
{
    char buf[EGPU_GPU_NAME_MAX], suffix[16];
    size_t n = 0, nlen, slen;
    bool cut = false;

    if (node == NULL)
        return egpu_error_set(err, -EINVAL, "GPU name: no node");
    if (index > EGPU_GPU_INDEX_MAX)
        return egpu_error_set(err, -EINVAL, "GPU name: index %u above %d", index,
                              EGPU_GPU_INDEX_MAX);
    nlen = strlen(node);
    for (size_t i = 0; i < nlen; i++) {
        char c = to_lower(node[i]);

        if (c == '.') {
            /* A dot must sit between letters or digits (RFC 1123 labels). */
            if (n == 0 || !is_lower_alnum(buf[n - 1]) || i + 1 == nlen ||
                !is_lower_alnum(to_lower(node[i + 1])))
                c = '-';
        } else if (!is_lower_alnum(c)) {
            c = '-';
        }
        if (n == 0 && !is_lower_alnum(c))
            continue;
        if (n == sizeof(buf) - 1) {
            cut = true;
            break;
        }
        buf[n++] = c;
    }
    if (n == 0)
        return egpu_error_set(err, -EINVAL, "GPU name: node name \"%.64s\" has no letter or digit",
                              node);
    slen = (size_t)snprintf(suffix, sizeof(suffix), "-gpu%u", index);
    if (cut || n + slen > EGPU_GPU_NAME_MAX - 1) {
        /* Too long: cut, and tell the cut names apart by a hash of the node. */
        n = EGPU_GPU_NAME_MAX - 1 - slen - 9;
        while (n > 0 && !is_lower_alnum(buf[n - 1]))
            n--;
        n += (size_t)snprintf(buf + n, sizeof(buf) - n, "-%08x",
                              (unsigned)(fnv1a64(node) & 0xffffffffU));
    }
    if (n + slen + 1 > len)
        return egpu_error_set(err, -ENAMETOOLONG, "GPU name: %zu bytes do not hold %zu", len,
                              n + slen + 1);
    memcpy(out, buf, n);
    memcpy(out + n, suffix, slen + 1);
    return 0;
}

int egpu_inventory_node_label(const char *node, char *out, size_t len, struct egpu_error *err)
{
    char buf[LABEL_VALUE_MAX + 1];
    size_t nlen, n = 0;
    bool valid;

    if (node == NULL || node[0] == '\0')
        return egpu_error_set(err, -EINVAL, "node label: no node name");
    nlen = strlen(node);
    valid = nlen <= LABEL_VALUE_MAX && is_alnum(node[0]) && is_alnum(node[nlen - 1]);
    for (size_t i = 0; valid && i < nlen; i++)
        valid = is_alnum(node[i]) || node[i] == '-' || node[i] == '_' || node[i] == '.';
    if (valid) {
        memcpy(buf, node, nlen + 1);
        n = nlen;
    } else {
        for (size_t i = 0; i < nlen && n < LABEL_HASHED_KEEP; i++) {
            char c = node[i];

            if (!is_alnum(c) && c != '-' && c != '_' && c != '.')
                c = '-';
            if (n == 0 && !is_alnum(c))
                continue;
            buf[n++] = c;
        }
        n += (size_t)snprintf(buf + n, sizeof(buf) - n, "%s%016llx", n > 0 ? "-" : "h",
                              (unsigned long long)fnv1a64(node));
    }
    if (n + 1 > len)
        return egpu_error_set(err, -ENAMETOOLONG, "node label: %zu bytes do not hold %zu", len,
                              n + 1);
    memcpy(out, buf, n + 1);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Publishing                                                               */

struct publish {
    struct egpu_kube *kc;
    const char *node;
    char label[LABEL_VALUE_MAX + 1];
    json_t *items;                     /* this node's listed objects (borrowed from the list) */
    const struct egpu_gpu_info *cards; /* what is published, ncards entries */
    size_t ncards;
    bool *listed_kept;               /* per item: a card still has it */
    struct egpu_inventory_stats *st; /* counts */
};

static const char *str_at(const json_t *o, const char *a, const char *b)
{
    const json_t *v = json_object_get(o, a);

    if (b != NULL)
        v = json_object_get(v, b);
    return json_string_value(v);
}

static bool str_eq(const char *a, const char *b)
{
    return a != NULL && b != NULL && strcmp(a, b) == 0;
}

static bool int_eq(const json_t *v, long long want)
{
    return json_is_integer(v) && json_integer_value(v) == want;
}

static const char *node_of(const json_t *obj)
{
    return str_at(obj, "spec", "nodeName");
}

/* The agent's link as the CRD's level (egpu/core.h); EGPU_TOPO_UNKNOWN for
 * EGPU_LINK_UNKNOWN. */
static enum egpu_topo_level topo_level(uint8_t link)
{
    switch ((enum egpu_gpu_link)link) {
    case EGPU_LINK_NVLINK:
        return EGPU_TOPO_NVLINK;
    case EGPU_LINK_BOARD:
        return EGPU_TOPO_INTERNAL;
    case EGPU_LINK_PIX:
        return EGPU_TOPO_SINGLE;
    case EGPU_LINK_PXB:
        return EGPU_TOPO_MULTIPLE;
    case EGPU_LINK_PHB:
        return EGPU_TOPO_HOSTBRIDGE;
    case EGPU_LINK_NODE:
        return EGPU_TOPO_NUMA_NODE;
    case EGPU_LINK_SYS:
        return EGPU_TOPO_SYSTEM;
    case EGPU_LINK_UNKNOWN:
        break;
    }
    return EGPU_TOPO_UNKNOWN;
}

/* spec.topology of card i of p->cards into *out: a new list, or NULL when
 * no link is known. Returns 0 or -ENOMEM. */
static int topology_json(const struct publish *p, size_t i, json_t **out)
{
    const struct egpu_gpu_info *c = &p->cards[i];
    json_t *list = NULL, *e;

    *out = NULL;
    for (size_t j = 0; c->has_links && j < p->ncards; j++) {
        enum egpu_topo_level level = topo_level(c->links[j]);

        if (j == i || level == EGPU_TOPO_UNKNOWN || p->cards[j].uuid[0] == '\0')
            continue;
        if (list == NULL && (list = json_array()) == NULL)
            return -ENOMEM;
        e = json_pack("{s:I, s:s}", "index", (json_int_t)p->cards[j].index, "link",
                      egpu_api_topo_name(level));
        if (json_array_append_new(list, e) != 0) { /* e NULL or not appended: freed */
            json_decref(list);
            return -ENOMEM;
        }
    }
    *out = list;
    return 0;
}

static bool spec_matches(const struct publish *p, const json_t *obj, const struct egpu_gpu_info *c)
{
    const json_t *spec = json_object_get(obj, "spec");
    const json_t *labels = json_object_get(json_object_get(obj, "metadata"), "labels");

    const json_t *has = json_object_get(spec, "topology");
    json_t *topo = NULL;
    bool same_topo;

    if (topology_json(p, (size_t)(c - p->cards), &topo) != 0)
        return false; /* patched, which then reports the lack of memory */
    same_topo = topo == NULL ? has == NULL || (json_is_array(has) && json_array_size(has) == 0)
                             : json_equal(has, topo) == 1;
    json_decref(topo);
    if (!same_topo)
        return false;
    return str_eq(str_at(spec, "nodeName", NULL), p->node) &&
           int_eq(json_object_get(spec, "index"), c->index) &&
           str_eq(str_at(spec, "uuid", NULL), c->uuid) &&
           str_eq(str_at(spec, "model", NULL), c->model) &&
           int_eq(json_object_get(spec, "memory"), (long long)c->mem_mib) &&
           str_eq(json_string_value(json_object_get(labels, EGPU_GPU_LABEL_NODE)), p->label);
}

static bool status_matches(const json_t *obj, const char *health, long long core, long long mem_mib)
{
    const json_t *status = json_object_get(obj, "status");
    const json_t *cap = json_object_get(status, "capacity");

    return str_eq(str_at(status, "health", NULL), health) &&
           int_eq(json_object_get(cap, "core"), core) &&
           int_eq(json_object_get(cap, "memory"), mem_mib);
}

/* The spec the agent writes for c; with for_patch, a topology none is known
 * of is null (a merge patch then removes one written before). NULL when out
 * of memory. */
static json_t *spec_json(const struct publish *p, const struct egpu_gpu_info *c, bool for_patch)
{
    json_t *topo = NULL, *spec;

    if (topology_json(p, (size_t)(c - p->cards), &topo) != 0)
        return NULL;
    if (topo == NULL && for_patch)
        topo = json_null();
    spec =
        json_pack("{s:s, s:I, s:s, s:s, s:I}", "nodeName", p->node, "index", (json_int_t)c->index,
                  "uuid", c->uuid, "model", c->model, "memory", (json_int_t)c->mem_mib);
    if (spec == NULL) {
        json_decref(topo);
        return NULL;
    }
    if (topo != NULL && json_object_set_new(spec, "topology", topo) != 0) { /* takes topo */
        json_decref(spec);
        return NULL;
    }
    return spec;
}

static int out_of_memory(struct egpu_error *err, const char *name)
{
    return egpu_error_set(err, -ENOMEM, "GPU %s: out of memory", name);
}

static int create_gpu(struct publish *p, const char *name, const struct egpu_gpu_info *c,
                      json_t **out, struct egpu_error *err)
{
    json_t *obj = json_pack("{s:s, s:s, s:{s:s, s:{s:s}}, s:o*}", "apiVersion", EGPU_API_VERSION,
                            "kind", "GPU", "metadata", "name", name, "labels", EGPU_GPU_LABEL_NODE,
                            p->label, "spec", spec_json(p, c, false));
    int rc;

    if (obj == NULL || json_object_get(obj, "spec") == NULL) {
        json_decref(obj);
        return out_of_memory(err, name);
    }
    rc = egpu_kube_create(p->kc, &egpu_kube_gpus, NULL, obj, out, NULL, err);
    json_decref(obj);
    if (rc == 0) {
        p->st->created++;
        egpu_log(EGPU_LOG_INFO, "GPU object created name=%s uuid=%s model=\"%s\" memory_mib=%llu",
                 name, c->uuid, c->model, (unsigned long long)c->mem_mib);
    }
    return rc;
}

static int delete_gpu(struct publish *p, const char *name, const char *why, struct egpu_error *err)
{
    int rc = egpu_kube_delete(p->kc, &egpu_kube_gpus, NULL, name, NULL, err);

    if (rc == -ENOENT)
        rc = 0; /* already gone: what we wanted */
    else if (rc == 0)
        p->st->deleted++;
    if (rc == 0)
        egpu_log(EGPU_LOG_INFO, "GPU object deleted name=%s reason=\"%s\"", name, why);
    return rc;
}

static int patch_spec(struct publish *p, const char *name, const struct egpu_gpu_info *c,
                      json_t **cur, struct egpu_error *err)
{
    json_t *patch = json_pack("{s:{s:{s:s}}, s:o*}", "metadata", "labels", EGPU_GPU_LABEL_NODE,
                              p->label, "spec", spec_json(p, c, true));
    json_t *out = NULL;
    int rc;

    if (patch == NULL || json_object_get(patch, "spec") == NULL) {
        json_decref(patch);
        return out_of_memory(err, name);
    }
    rc = egpu_kube_patch(p->kc, &egpu_kube_gpus, NULL, name, EGPU_KUBE_MERGE_PATCH, patch, &out,
                         NULL, err);
    json_decref(patch);
    if (rc)
        return rc;
    json_decref(*cur);
    *cur = out;
    p->st->updated++;
    egpu_log(EGPU_LOG_INFO, "GPU object updated name=%s uuid=%s model=\"%s\" memory_mib=%llu", name,
             c->uuid, c->model, (unsigned long long)c->mem_mib);
    return 0;
}

/* Make status.health and status.capacity of cur say health; *wrote set
 * when a patch was needed. */
static int sync_status(struct publish *p, const char *name, const json_t *cur, bool healthy,
                       uint64_t mem_mib, const char *reason, bool *wrote, struct egpu_error *err)
{
    const char *health = healthy ? EGPU_GPU_HEALTHY : EGPU_GPU_UNHEALTHY;
    long long core = healthy ? FULL_CORE_PCT : 0, mem = healthy ? (long long)mem_mib : 0;
    json_t *patch;
    int rc;

    if (status_matches(cur, health, core, mem))
        return 0;
    patch = json_pack("{s:{s:s, s:{s:I, s:I}}}", "status", "health", health, "capacity", "core",
                      (json_int_t)core, "memory", (json_int_t)mem);
    if (patch == NULL)
        return out_of_memory(err, name);
    rc = egpu_kube_patch_status(p->kc, &egpu_kube_gpus, NULL, name, EGPU_KUBE_MERGE_PATCH, patch,
                                NULL, NULL, err);
    json_decref(patch);
    if (rc)
        return rc;
    p->st->status_updated++;
    *wrote = true;
    if (healthy)
        egpu_log(EGPU_LOG_NOTICE, "GPU health name=%s health=%s", name, health);
    else
        egpu_log(EGPU_LOG_WARN, "GPU health name=%s health=%s reason=\"%s\"", name, health,
                 reason[0] ? reason : "unknown");
    return 0;
}

/* Index of the listed object called name, or -1. */
static long find_listed(const struct publish *p, const char *name)
{
    size_t i;
    json_t *item;

    json_array_foreach(p->items, i, item)
    {
        if (str_eq(str_at(item, "metadata", "name"), name))
            return (long)i;
    }
    return -1;
}

static int publish_card(struct publish *p, const struct egpu_gpu_info *c, struct egpu_error *err)
{
    char name[EGPU_GPU_NAME_MAX];
    json_t *cur = NULL;
    bool wrote = false;
    long at;
    int rc;

    rc = egpu_inventory_gpu_name(p->node, c->index, name, sizeof(name), err);
    if (rc)
        return rc;
    at = find_listed(p, name);
    if (at >= 0) {
        p->listed_kept[at] = true;
        cur = json_incref(json_array_get(p->items, (size_t)at));
    }
    if (c->uuid[0] == '\0') {
        /* Lost before it was identified: keep and flag the object it had. */
        if (cur != NULL && str_eq(node_of(cur), p->node))
            rc = sync_status(p, name, cur, false, 0, c->reason, &wrote, err);
        else
            egpu_log(EGPU_LOG_WARN, "GPU not published: unidentified name=%s reason=\"%s\"", name,
                     c->reason);
        goto out;
    }
    if (cur == NULL) {
        rc = create_gpu(p, name, c, &cur, err);
        if (rc == -EEXIST) /* there, but without our label: adopt it below */
            rc = egpu_kube_get(p->kc, &egpu_kube_gpus, NULL, name, &cur, NULL, err);
        else if (rc == 0)
            wrote = true;
        if (rc)
            goto out;
    }
    if (!str_eq(node_of(cur), p->node)) {
        rc = egpu_error_set(err, -EEXIST, "GPU object %s belongs to node %s, not %s: left alone",
                            name, node_of(cur) ? node_of(cur) : "(none)", p->node);
        goto out;
    }
    if (!str_eq(str_at(cur, "spec", "uuid"), c->uuid)) {
        rc = delete_gpu(p, name, "another card has this index now", err);
        json_decref(cur);
        cur = NULL;
        if (rc == 0)
            rc = create_gpu(p, name, c, &cur, err);
        if (rc)
            goto out;
        wrote = true;
    } else if (!spec_matches(p, cur, c)) {
        rc = patch_spec(p, name, c, &cur, err);
        if (rc)
            goto out;
        wrote = true;
    }
    rc = sync_status(p, name, cur, c->healthy, c->mem_mib, c->reason, &wrote, err);
out:
    if (rc == 0 && !wrote)
        p->st->unchanged++;
    json_decref(cur);
    return rc;
}

static int check_cards(const char *node, const struct egpu_gpu_info *cards, size_t n,
                       struct egpu_error *err)
{
    if (node == NULL || node[0] == '\0' || strlen(node) > EGPU_GPU_NAME_MAX - 1)
        return egpu_error_set(err, -EINVAL, "publish GPUs: node name empty or over %d characters",
                              EGPU_GPU_NAME_MAX - 1);
    if (n > EGPU_NODE_GPUS_MAX)
        return egpu_error_set(err, -EINVAL, "publish GPUs of node %s: %zu cards, at most %d", node,
                              n, EGPU_NODE_GPUS_MAX);
    for (size_t i = 0; i < n; i++) {
        const struct egpu_gpu_info *c = &cards[i];

        if (c->index > EGPU_GPU_INDEX_MAX || c->mem_mib > UINT32_MAX ||
            memchr(c->uuid, '\0', sizeof(c->uuid)) == NULL ||
            memchr(c->model, '\0', sizeof(c->model)) == NULL ||
            memchr(c->reason, '\0', sizeof(c->reason)) == NULL)
            return egpu_error_set(err, -EINVAL,
                                  "publish GPUs of node %s: card %zu invalid (index %u, memory "
                                  "%llu MiB, or unterminated text)",
                                  node, i, c->index, (unsigned long long)c->mem_mib);
        for (size_t j = 0; j < i; j++) {
            if (cards[j].index == c->index)
                return egpu_error_set(err, -EINVAL, "publish GPUs of node %s: index %u twice", node,
                                      c->index);
        }
    }
    return 0;
}

int egpu_inventory_publish(struct egpu_kube *kc, const char *node,
                           const struct egpu_gpu_info *cards, size_t n,
                           struct egpu_inventory_stats *stats, struct egpu_error *err)
{
    struct egpu_inventory_stats st = {0};
    struct publish p = {.kc = kc, .node = node, .st = &st, .cards = cards, .ncards = n};
    struct egpu_kube_list_opts opts = {0};
    struct egpu_error cerr = {0};
    char selector[sizeof(EGPU_GPU_LABEL_NODE) + LABEL_VALUE_MAX + 2];
    json_t *list = NULL, *item;
    size_t i;
    int rc, first = 0;

    rc = check_cards(node, cards, n, err);
    if (rc == 0)
        rc = egpu_inventory_node_label(node, p.label, sizeof(p.label), err);
    if (rc)
        goto out;
    snprintf(selector, sizeof(selector), "%s=%s", EGPU_GPU_LABEL_NODE, p.label);
    opts.label_selector = selector;
    rc = egpu_kube_list(kc, &egpu_kube_gpus, NULL, &opts, &list, NULL, err);
    if (rc) {
        rc = egpu_error_prefix(err, rc, "list GPU objects of node %s", node);
        goto out;
    }
    p.items = json_object_get(list, "items");
    if (!json_is_array(p.items)) {
        rc = egpu_error_set(err, -EPROTO, "list GPU objects of node %s: no items", node);
        goto out;
    }
    p.listed_kept = egpu_calloc(json_array_size(p.items) + 1, sizeof(bool));
    if (p.listed_kept == NULL) {
        rc = egpu_error_set(err, -ENOMEM, "publish GPUs of node %s: out of memory", node);
        goto out;
    }
    for (i = 0; i < n; i++) {
        rc = publish_card(&p, &cards[i], &cerr);
        if (rc && first == 0) {
            first = rc;
            if (err != NULL)
                *err = cerr;
        }
    }
    json_array_foreach(p.items, i, item)
    {
        const char *name = str_at(item, "metadata", "name");

        if (p.listed_kept[i] || name == NULL || !str_eq(node_of(item), node))
            continue; /* a card's, or another node's whatever its label says */
        rc = delete_gpu(&p, name, "card gone", &cerr);
        if (rc && first == 0) {
            first = rc;
            if (err != NULL)
                *err = cerr;
        }
    }
    rc = first;
out:
    egpu_free(p.listed_kept);
    json_decref(list);
    if (stats != NULL)
        *stats = st;
    return rc;
}

void egpu_gpus_read_links(struct egpu_gpus *g, struct egpu_gpu_info *cards, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        cards[i].has_links = true;
        memset(cards[i].links, EGPU_LINK_UNKNOWN, sizeof(cards[i].links));
    }
    for (size_t i = 0; i < n; i++) {
        for (size_t j = i + 1; j < n; j++) {
            struct egpu_error err = {0};
            enum egpu_gpu_link link = EGPU_LINK_UNKNOWN;

            if (cards[i].uuid[0] == '\0' || cards[j].uuid[0] == '\0')
                continue;
            if (egpu_gpus_link(g, cards[i].index, cards[j].index, &link, &err) != 0) {
                egpu_log(EGPU_LOG_WARN, "GPU link unknown a=%u b=%u reason=\"%s\"", cards[i].index,
                         cards[j].index, err.msg);
                continue;
            }
            cards[i].links[j] = (uint8_t)link;
            cards[j].links[i] = (uint8_t)link;
        }
    }
}

int egpu_inventory_sync(struct egpu_kube *kc, struct egpu_gpus *g, const char *node,
                        struct egpu_inventory_stats *stats, struct egpu_error *err)
{
    struct egpu_gpu_info *cards = egpu_calloc(EGPU_NODE_GPUS_MAX, sizeof(*cards));
    size_t n = 0;
    int rc;

    if (stats != NULL)
        memset(stats, 0, sizeof(*stats));
    if (cards == NULL)
        return egpu_error_set(err, -ENOMEM, "GPU inventory: out of memory");
    rc = egpu_gpus_list(g, cards, EGPU_NODE_GPUS_MAX, &n, err);
    if (rc == 0)
        egpu_gpus_read_links(g, cards, n);
    if (rc == 0)
        rc = egpu_inventory_publish(kc, node, cards, n, stats, err);
    egpu_free(cards);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* status.used                                                              */

static uint64_t absdiff(uint64_t a, uint64_t b)
{
    return a > b ? a - b : b - a;
}

bool egpu_inventory_used_due(const struct egpu_inventory_used *st, size_t slot,
                             const struct egpu_gpu_info *c)
{
    const struct egpu_inventory_used_card *last;

    if (slot >= EGPU_NODE_GPUS_MAX)
        return false;
    last = &st->cards[slot];

    if (last->uuid[0] == '\0' || strcmp(last->uuid, c->uuid) != 0)
        return true; /* never written for this card */
    if (last->reports + 1 >= EGPU_USED_REFRESH)
        return true;
    if (last->reports + 1 < EGPU_USED_MIN_REPORTS)
        return false; /* written less than a minute ago */
    if (absdiff(last->mem_mib, c->used_mem_mib) >= EGPU_USED_MIN_MIB ||
        absdiff(last->reserved_mem_mib, c->reserved_mem_mib) >= EGPU_USED_MIN_MIB ||
        last->mem_source != c->mem_source)
        return true;
    if (last->has_util != c->has_util)
        return true;
    return c->has_util && absdiff(last->util_pct, c->util_pct) >= EGPU_USED_MIN_PCT;
}

static void now_rfc3339(char *buf, size_t len)
{
    time_t t = time(NULL);
    struct tm tm;

    gmtime_r(&t, &tm);
    strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static int write_used(struct egpu_kube *kc, const char *node, const struct egpu_gpu_info *c,
                      struct egpu_error *err)
{
    char name[EGPU_GPU_NAME_MAX], when[32];
    json_t *used, *patch;
    int rc;

    rc = egpu_inventory_gpu_name(node, c->index, name, sizeof(name), err);
    if (rc)
        return rc;
    now_rfc3339(when, sizeof(when));
    /* A merge patch: null removes a field, so a v2 reservedMemory does not
     * outlive a fall back to v1 (which counts it inside memory). */
    used = json_pack(
        "{s:I, s:o, s:o, s:s}", "memory", (json_int_t)c->used_mem_mib, "memorySource",
        c->mem_source != EGPU_MEM_SOURCE_NONE ? json_string(egpu_gpu_mem_source_name(c->mem_source))
                                              : json_null(),
        "reservedMemory",
        c->mem_source == EGPU_MEM_SOURCE_V2 ? json_integer(c->reserved_mem_mib) : json_null(),
        "updateTime", when);
    if (used != NULL && c->has_util &&
        json_object_set_new(used, "utilization", json_integer(c->util_pct)) != 0) {
        json_decref(used);
        used = NULL;
    }
    patch = used != NULL ? json_pack("{s:{s:o}}", "status", "used", used) : NULL;
    if (patch == NULL)
        return out_of_memory(err, name);
    rc = egpu_kube_patch_status(kc, &egpu_kube_gpus, NULL, name, EGPU_KUBE_MERGE_PATCH, patch, NULL,
                                NULL, err);
    json_decref(patch);
    return rc;
}

int egpu_inventory_report_used(struct egpu_kube *kc, struct egpu_inventory_used *st,
                               const char *node, const struct egpu_gpu_info *cards, size_t n,
                               unsigned *written, struct egpu_error *err)
{
    struct egpu_error cerr = {0};
    unsigned w = 0;
    int first = 0;

    if (written != NULL)
        *written = 0;
    if (n > EGPU_NODE_GPUS_MAX)
        return egpu_error_set(err, -EINVAL, "GPU use of node %s: %zu cards, at most %d", node, n,
                              EGPU_NODE_GPUS_MAX);
    for (size_t i = 0; i < n; i++) {
        const struct egpu_gpu_info *c = &cards[i];
        struct egpu_inventory_used_card *last = &st->cards[i];
        int rc;

        if (!c->has_used || c->uuid[0] == '\0' || !c->healthy ||
            memchr(c->uuid, '\0', sizeof(c->uuid)) == NULL)
            continue;
        if (!egpu_inventory_used_due(st, i, c)) {
            last->reports++;
            continue;
        }
        rc = write_used(kc, node, c, &cerr);
        if (rc == -ENOENT)
            continue; /* not published yet: written on a later report */
        if (rc) {
            if (first == 0) {
                first = rc;
                if (err != NULL)
                    *err = cerr;
            }
            continue;
        }
        memcpy(last->uuid, c->uuid, strlen(c->uuid) + 1);
        last->mem_mib = c->used_mem_mib;
        last->reserved_mem_mib = c->reserved_mem_mib;
        last->mem_source = c->mem_source;
        last->util_pct = c->util_pct;
        last->has_util = c->has_util;
        last->reports = 0;
        w++;
    }
    if (written != NULL)
        *written = w;
    return first;
}
