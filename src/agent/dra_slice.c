/* agent/dra_slice.c - this node's ResourceSlice: built from the card
 * inventory, published through src/kube, read back.
 *
 * egpu__dra_slice_build turns the cards egpu_gpus_list gives (struct
 * egpu_gpu_info) into the resource.k8s.io/v1 ResourceSlice of the node, as
 * dra_slice_int.h describes it; egpu__dra_slice_publish makes the API server
 * hold exactly that slice.
 *
 * DESIGN: level-triggered, as the GPU objects of inventory.c are: each
 * publish lists the node's slices of our driver, compares and writes only a
 * difference, so a rerun writes nothing and a slice the kubelet deleted (at
 * its start, or 30 s after the plugin left: dra_notes.md "Publishing facts")
 * is created again by the next call. The pool's generation only goes up: it
 * is bumped on every change of the spec, and st keeps the last one written,
 * so a pool recreated after a deletion starts above it. Quantities are
 * written in the canonical form the API server stores them in, so a read
 * back compares equal; what the server drops (fields of a feature gate that
 * is off, DRAConsumableCapacity on 1.34 and 1.35) is found by walking what
 * was sent against what came back, as the upstream publisher's
 * DroppedFieldsError does, logged, and remembered in st so the dropped
 * fields do not make every later publish write again.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "dra_slice_int.h"
#include "egpu/api.h"
#include "egpu/log.h"
#include "gpus_int.h"

#define FULL_CORE_PCT   "100"
#define MIN_MEMORY_MIB  2 /* validRange: min 1Mi + step 1Mi <= value */
#define SELECTOR_MAX    (EGPU_KUBE_NAME_MAX * 2 + 48)
#define GATE_CONSUMABLE "DRAConsumableCapacity"
#define GATE_TAINTS     "DRADeviceTaints"

/* ------------------------------------------------------------------------ */
/* Building                                                                 */

/* mib MiB as the canonical BinarySI quantity the API server writes: the
 * largest power-of-1024 suffix that keeps the number whole ("81559Mi",
 * "80Gi", "1Mi"). */
static void mib_quantity(uint64_t mib, char *buf, size_t len)
{
    static const char *const suffix[] = {"Mi", "Gi", "Ti", "Pi", "Ei"};
    size_t s = 0;

    while (s + 1 < sizeof(suffix) / sizeof(suffix[0]) && mib >= 1024 && mib % 1024 == 0) {
        mib /= 1024;
        s++;
    }
    snprintf(buf, len, "%llu%s", (unsigned long long)mib, suffix[s]);
}

/* s as semver "MAJOR.MINOR.PATCH" without leading zeros into out (len >=
 * 32): s must be 1 to 3 dot-separated decimal numbers of at most 9 digits;
 * false otherwise. */
static bool semver_of(const char *s, char *out, size_t len)
{
    unsigned long part[3] = {0, 0, 0};
    size_t nparts = 0;

    if (s == NULL || *s == '\0')
        return false;
    while (nparts < 3) {
        size_t digits = 0;

        while (s[digits] >= '0' && s[digits] <= '9')
            digits++;
        if (digits == 0 || digits > 9)
            return false;
        for (size_t i = 0; i < digits; i++)
            part[nparts] = part[nparts] * 10 + (unsigned long)(s[i] - '0');
        nparts++;
        s += digits;
        if (*s == '\0')
            break;
        if (*s != '.' || nparts == 3)
            return false;
        s++;
    }
    snprintf(out, len, "%lu.%lu.%lu", part[0], part[1], part[2]);
    return true;
}

/* s as a string attribute keeps it (egpu_api_dra_attr_len), into out
 * (EGPU_DRA_SLICE_STRING_MAX + 1 bytes). */
static void cut_string(const char *s, char *out)
{
    size_t n = egpu_api_dra_attr_len(s, strlen(s));

    memcpy(out, s, n);
    out[n] = '\0';
}

/* The lowest index among the cards card i reaches over NVLink, directly or
 * through others (i itself included). */
static uint32_t nvlink_island(const struct egpu_gpu_info *cards, size_t n, size_t i)
{
    bool seen[EGPU_NODE_GPUS_MAX] = {false};
    size_t todo[EGPU_NODE_GPUS_MAX], ntodo = 0;
    uint32_t low = cards[i].index;

    seen[i] = true;
    todo[ntodo++] = i;
    while (ntodo > 0) {
        size_t a = todo[--ntodo];

        if (cards[a].index < low)
            low = cards[a].index;
        for (size_t b = 0; cards[a].has_links && b < n; b++) {
            if (!seen[b] && cards[a].links[b] == EGPU_LINK_NVLINK) {
                seen[b] = true;
                todo[ntodo++] = b;
            }
        }
    }
    return low;
}

/* Set attribute key of attrs to {kind: value}, value a new reference that
 * is taken (NULL: out of memory). Returns 0 or -ENOMEM. */
static int set_attr(json_t *attrs, const char *key, const char *kind, json_t *value)
{
    json_t *a = value != NULL ? json_pack("{s:o}", kind, value) : NULL;

    if (a == NULL || json_object_set_new(attrs, key, a) != 0)
        return -ENOMEM; /* json_pack's "o" took value, json_object_set_new took a */
    return 0;
}

static int set_version(json_t *attrs, const char *key, const char *version)
{
    return set_attr(attrs, key, "version", json_string(version));
}

static json_t *attributes_of(const struct egpu__dra_slice_config *cfg,
                             const struct egpu_gpu_info *cards, size_t n, size_t i)
{
    const struct egpu_gpu_info *c = &cards[i];
    const struct egpu__dra_slice_card *x = cfg->extra != NULL ? &cfg->extra[i] : NULL;
    char model[EGPU_DRA_SLICE_STRING_MAX + 1], ver[32];
    json_t *attrs = json_object();
    int rc;

    if (attrs == NULL)
        return NULL;
    cut_string(c->model, model);
    rc = set_attr(attrs, "type", "string", json_string("gpu"));
    if (!rc)
        rc = set_attr(attrs, EGPU_API_DRA_ATTR_UUID, "string", json_string(c->uuid));
    if (!rc)
        rc = set_attr(attrs, "index", "int", json_integer(c->index));
    if (!rc)
        rc = set_attr(attrs, "minor", "int", json_integer(c->minor));
    if (!rc)
        rc = set_attr(attrs, EGPU_API_DRA_ATTR_MODEL, "string", json_string(model));
    if (!rc && c->has_links)
        rc = set_attr(attrs, "nvlinkIsland", "int", json_integer(nvlink_island(cards, n, i)));
    if (!rc && semver_of(cfg->driver_version, ver, sizeof(ver)))
        rc = set_version(attrs, "driverVersion", ver);
    if (!rc && cfg->cuda_driver_version > 0) {
        snprintf(ver, sizeof(ver), "%u.%u.0", cfg->cuda_driver_version / 1000,
                 cfg->cuda_driver_version % 1000 / 10);
        rc = set_version(attrs, "cudaDriverVersion", ver);
    }
    if (!rc && x != NULL && x->architecture != NULL && x->architecture[0] != '\0') {
        cut_string(x->architecture, model);
        rc = set_attr(attrs, "architecture", "string", json_string(model));
    }
    if (!rc && x != NULL && x->cc_major > 0) {
        snprintf(ver, sizeof(ver), "%u.%u.0", x->cc_major, x->cc_minor);
        rc = set_version(attrs, "cudaComputeCapability", ver);
    }
    if (!rc && x != NULL && x->pci_bus_id != NULL && x->pci_bus_id[0] != '\0') {
        cut_string(x->pci_bus_id, model);
        rc = set_attr(attrs, "pciBusID", "string", json_string(model));
    }
    if (!rc && x != NULL && x->numa_node >= 0)
        rc = set_attr(attrs, "numaNode", "int", json_integer(x->numa_node));
    if (rc) {
        json_decref(attrs);
        return NULL;
    }
    return attrs;
}

/* {value, requestPolicy {default: value, validRange {min, max: value,
 * step}}}: consumable up to value in steps, the whole of it by default. */
static json_t *capacity_of(const char *value, const char *min, const char *step)
{
    return json_pack("{s:s, s:{s:s, s:{s:s, s:s, s:s}}}", "value", value, "requestPolicy",
                     "default", value, "validRange", "min", min, "max", value, "step", step);
}

static const char *driver_of(const struct egpu__dra_slice_config *cfg)
{
    return cfg->driver != NULL && cfg->driver[0] != '\0' ? cfg->driver : EGPU_API_DRA_DRIVER;
}

/* reason as a label value (dra_notes.md: a taint's value is one): at most
 * 63 of [A-Za-z0-9._-], others as '-', starting and ending with a letter
 * or digit; "" when nothing is left. */
static void taint_value(const char *reason, char *out, size_t len)
{
    size_t n = 0;

    for (const char *c = reason; *c != '\0' && n + 1 < len && n < 63; c++) {
        bool alnum =
            (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9');

        if (n == 0 && !alnum)
            continue;
        out[n++] = alnum || *c == '.' || *c == '_' || *c == '-' ? *c : '-';
    }
    while (n > 0 &&
           !((out[n - 1] >= 'a' && out[n - 1] <= 'z') || (out[n - 1] >= 'A' && out[n - 1] <= 'Z') ||
             (out[n - 1] >= '0' && out[n - 1] <= '9')))
        n--;
    out[n] = '\0';
}

/* [{key, value (when the reason gives one), effect NoSchedule}] for an
 * unhealthy card. */
static json_t *taints_of(const struct egpu__dra_slice_config *cfg, const struct egpu_gpu_info *c)
{
    char key[EGPU_KUBE_NAME_MAX + 32], value[64];
    json_t *t;

    snprintf(key, sizeof(key), "%s/%s", driver_of(cfg), EGPU_DRA_SLICE_TAINT_UNHEALTHY);
    taint_value(c->reason, value, sizeof(value));
    t = json_pack("{s:s, s:s}", "key", key, "effect", EGPU_DRA_SLICE_TAINT_EFFECT);
    if (t != NULL && value[0] != '\0' && json_object_set_new(t, "value", json_string(value)) != 0) {
        json_decref(t);
        return NULL;
    }
    return json_pack("[o]", t);
}

static json_t *device_of(const struct egpu__dra_slice_config *cfg,
                         const struct egpu_gpu_info *cards, size_t n, size_t i)
{
    char name[32], mem[32];
    json_t *d;

    /* The card's NVML index names its device (api.h, EGPU_API_DRA_DEVICE_PREFIX). */
    if (egpu_api_dra_device_name(cards[i].index, name, sizeof(name)) != 0)
        return NULL;
    mib_quantity(cards[i].mem_mib, mem, sizeof(mem));
    d = json_pack("{s:s, s:o, s:{s:o, s:o}, s:b}", "name", name, "attributes",
                  attributes_of(cfg, cards, n, i), "capacity", EGPU_API_DRA_CAP_CORES,
                  capacity_of(FULL_CORE_PCT, "1", "1"), EGPU_API_DRA_CAP_MEMORY,
                  capacity_of(mem, "1Mi", "1Mi"), "allowMultipleAllocations", 1);
    if (d != NULL && !cards[i].healthy &&
        json_object_set_new(d, "taints", taints_of(cfg, &cards[i])) != 0) {
        json_decref(d);
        return NULL;
    }
    return d;
}

/* A card with an identity and room for the memory range; healthy, or
 * unhealthy and tainted (cfg->taint_unhealthy). */
static bool is_published(const struct egpu__dra_slice_config *cfg, const struct egpu_gpu_info *c)
{
    return (c->healthy || cfg->taint_unhealthy) && c->uuid[0] != '\0' &&
           c->mem_mib >= MIN_MEMORY_MIB;
}

enum egpu__dra_card_state egpu__dra_slice_card_state(const struct egpu__dra_slice_config *cfg,
                                                     const struct egpu__dra_slice_state *st,
                                                     const struct egpu_gpu_info *c)
{
    struct egpu__dra_slice_config eff = *cfg;

    eff.taint_unhealthy = cfg->taint_unhealthy && !st->no_taints;
    if (!is_published(&eff, c))
        return EGPU_DRA_CARD_ABSENT;
    return c->healthy ? EGPU_DRA_CARD_PUBLISHED : EGPU_DRA_CARD_TAINTED;
}

const char *egpu__dra_card_state_name(enum egpu__dra_card_state s)
{
    static const char *const names[EGPU_DRA_CARD_STATE_COUNT] = {
        [EGPU_DRA_CARD_PUBLISHED] = "published",
        [EGPU_DRA_CARD_TAINTED] = "tainted",
        [EGPU_DRA_CARD_ABSENT] = "absent",
    };

    return (unsigned)s < EGPU_DRA_CARD_STATE_COUNT ? names[s] : "?";
}

static int check_config(const struct egpu__dra_slice_config *cfg, const struct egpu_gpu_info *cards,
                        size_t n, struct egpu_error *err)
{
    if (cfg == NULL || cfg->node == NULL || cfg->node[0] == '\0' ||
        strlen(cfg->node) > EGPU_KUBE_NAME_MAX)
        return egpu_error_set(err, -EINVAL, "ResourceSlice: node name empty or over %d characters",
                              EGPU_KUBE_NAME_MAX);
    if (n > EGPU_NODE_GPUS_MAX || (n > 0 && cards == NULL))
        return egpu_error_set(err, -EINVAL, "ResourceSlice of node %s: %zu cards, at most %d",
                              cfg->node, n, EGPU_NODE_GPUS_MAX);
    for (size_t i = 0; i < n; i++) {
        if (memchr(cards[i].uuid, '\0', sizeof(cards[i].uuid)) == NULL ||
            memchr(cards[i].model, '\0', sizeof(cards[i].model)) == NULL)
            return egpu_error_set(err, -EINVAL, "ResourceSlice of node %s: card %zu unterminated",
                                  cfg->node, i);
    }
    return 0;
}

/* spec of the slice; *ndev its devices. NULL when out of memory. */
static json_t *spec_of(const struct egpu__dra_slice_config *cfg, const struct egpu_gpu_info *cards,
                       size_t n, int64_t generation, unsigned *ndev)
{
    json_t *devices = json_array();

    *ndev = 0;
    for (size_t i = 0; devices != NULL && i < n; i++) {
        if (!is_published(cfg, &cards[i]))
            continue;
        if (json_array_append_new(devices, device_of(cfg, cards, n, i)) != 0) {
            json_decref(devices); /* the device NULL or not appended: freed */
            return NULL;
        }
        (*ndev)++;
    }
    return json_pack("{s:s, s:s, s:{s:s, s:I, s:I}, s:o}", "driver", driver_of(cfg), "nodeName",
                     cfg->node, "pool", "name", cfg->node, "generation", (json_int_t)generation,
                     "resourceSliceCount", (json_int_t)1, "devices", devices);
}

static json_t *owner_of(const char *node, const char *uid)
{
    return json_pack("[{s:s, s:s, s:s, s:s, s:b}]", "apiVersion", "v1", "kind", "Node", "name",
                     node, "uid", uid, "controller", 1);
}

/* The whole object; *ndev its devices. NULL when out of memory. */
static json_t *slice_of(const struct egpu__dra_slice_config *cfg, const struct egpu_gpu_info *cards,
                        size_t n, int64_t generation, const char *uid, unsigned *ndev)
{
    char gen_name[EGPU_KUBE_NAME_MAX + 1];
    json_t *obj, *meta;

    snprintf(gen_name, sizeof(gen_name), "0-%s-%s-", driver_of(cfg), cfg->node);
    obj = json_pack("{s:s, s:s, s:{s:s}, s:o}", "apiVersion", EGPU_DRA_SLICE_API, "kind",
                    "ResourceSlice", "metadata", "generateName", gen_name, "spec",
                    spec_of(cfg, cards, n, generation, ndev));
    meta = json_object_get(obj, "metadata");
    if (obj != NULL && uid != NULL &&
        json_object_set_new(meta, "ownerReferences", owner_of(cfg->node, uid)) != 0) {
        json_decref(obj);
        return NULL;
    }
    return obj;
}

int egpu__dra_slice_build(const struct egpu__dra_slice_config *cfg,
                          const struct egpu_gpu_info *cards, size_t n, int64_t generation,
                          json_t **out, struct egpu_error *err)
{
    unsigned ndev;
    json_t *obj;
    int rc = check_config(cfg, cards, n, err);

    if (rc)
        return rc;
    if (generation < 1)
        return egpu_error_set(err, -EINVAL, "ResourceSlice of node %s: generation %lld below 1",
                              cfg->node, (long long)generation);
    obj = slice_of(cfg, cards, n, generation, cfg->node_uid, &ndev);
    if (obj == NULL)
        return egpu_error_set(err, -ENOMEM, "ResourceSlice of node %s: out of memory", cfg->node);
    *out = obj;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Comparing what was sent with what is stored                              */

static bool dropped_at(const json_t *sent, const json_t *stored, char *path, size_t len, size_t at)
{
    if (at >= len)
        at = len - 1; /* cut: the path still names where it starts */
    if (json_is_object(sent)) {
        const char *key;
        json_t *v;

        json_object_foreach((json_t *)sent, key, v)
        {
            const json_t *have = json_object_get(stored, key);
            int w;

            if (json_is_null(v))
                continue;
            w = snprintf(path + at, len - at, "%s%s", at > 0 ? "." : "", key);
            if (have == NULL || json_is_null(have))
                return true;
            if (dropped_at(v, have, path, len, at + (size_t)(w < 0 ? 0 : w)))
                return true;
        }
    } else if (json_is_array(sent)) {
        for (size_t i = 0; i < json_array_size(sent); i++) {
            int w = snprintf(path + at, len - at, "[%zu]", i);

            if (!json_is_array(stored) || i >= json_array_size(stored))
                return true;
            if (dropped_at(json_array_get(sent, i), json_array_get(stored, i), path, len,
                           at + (size_t)(w < 0 ? 0 : w)))
                return true;
        }
    }
    path[at] = '\0';
    return false;
}

bool egpu__dra_slice_dropped(const json_t *sent, const json_t *stored, const char *prefix,
                             char *path, size_t len)
{
    size_t at = 0;

    if (path == NULL || len == 0)
        return false;
    path[0] = '\0';
    if (prefix != NULL && prefix[0] != '\0') {
        snprintf(path, len, "%s", prefix);
        at = strlen(path);
    }
    if (dropped_at(sent, stored, path, len, at))
        return true;
    path[0] = '\0';
    return false;
}

/* Every field of want is in have with an equal value; arrays have the same
 * length. Fields the server adds are passed over, except where only the
 * agent writes: a device's attributes and capacity maps hold exactly want's
 * keys, and a device's taints are there only when want has them (so a card
 * healthy again, or an attribute no longer known, is written over). */
static bool covers_in(const json_t *want, const json_t *have, const char *key_of_want)
{
    if (json_is_object(want)) {
        const char *key;
        json_t *v;

        if (!json_is_object(have))
            return false;
        if (key_of_want != NULL &&
            (strcmp(key_of_want, "attributes") == 0 || strcmp(key_of_want, "capacity") == 0) &&
            json_object_size(want) != json_object_size(have))
            return false;
        if (json_object_get(want, "taints") == NULL &&
            json_array_size(json_object_get(have, "taints")) > 0)
            return false;
        json_object_foreach((json_t *)want, key, v)
        {
            if (!covers_in(v, json_object_get(have, key), key))
                return false;
        }
        return true;
    }
    if (json_is_array(want)) {
        if (!json_is_array(have) || json_array_size(want) != json_array_size(have))
            return false;
        for (size_t i = 0; i < json_array_size(want); i++) {
            if (!covers_in(json_array_get(want, i), json_array_get(have, i), NULL))
                return false;
        }
        return true;
    }
    return have != NULL && json_equal(want, have) == 1;
}

static bool covers(const json_t *want, const json_t *have)
{
    return covers_in(want, have, NULL);
}

/* ------------------------------------------------------------------------ */
/* Publishing                                                               */

void egpu__dra_slice_attributes(struct egpu_gpus *g, const struct egpu_gpu_info *cards, size_t n,
                                struct egpu__dra_slice_attrs *a, struct egpu__dra_slice_config *cfg)
{
    struct egpu__gpus_driver drv;

    memset(a, 0, sizeof(*a));
    egpu__gpus_driver(g, &drv);
    snprintf(a->driver_version, sizeof(a->driver_version), "%s", drv.version);
    cfg->driver_version = a->driver_version[0] != '\0' ? a->driver_version : NULL;
    cfg->cuda_driver_version = drv.cuda_version;
    for (size_t i = 0; i < n && i < EGPU_NODE_GPUS_MAX; i++) {
        struct egpu__gpu_details d;

        egpu__gpus_details(g, cards[i].index, &d);
        snprintf(a->architecture[i], sizeof(a->architecture[i]), "%s", d.architecture);
        snprintf(a->pci_bus_id[i], sizeof(a->pci_bus_id[i]), "%s", d.pci_bus_id);
        a->extra[i].architecture = a->architecture[i];
        a->extra[i].cc_major = d.cc_major;
        a->extra[i].cc_minor = d.cc_minor;
        a->extra[i].pci_bus_id = a->pci_bus_id[i];
        a->extra[i].numa_node = d.numa_node;
    }
    for (size_t i = n; i < EGPU_NODE_GPUS_MAX; i++)
        a->extra[i].numa_node = -1;
    cfg->extra = a->extra;
}

void egpu__dra_slice_state_close(struct egpu__dra_slice_state *st)
{
    if (st == NULL)
        return;
    json_decref(st->sent);
    json_decref(st->stored);
    memset(st, 0, sizeof(*st));
}

struct publish {
    struct egpu_kube *kc;
    struct egpu__dra_slice_state *st;
    const struct egpu__dra_slice_config *cfg;
    const struct egpu_gpu_info *cards;
    size_t n;
    const char *uid; /* the Node's */
    struct egpu__dra_slice_stats *stats;
    bool retaint; /* taints were dropped by the last write: write again without */
};

static const char *meta_str(const json_t *obj, const char *field)
{
    return egpu_kube_str(json_object_get(json_object_get(obj, "metadata"), field));
}

static int64_t generation_of(const json_t *slice)
{
    const json_t *g =
        json_object_get(json_object_get(json_object_get(slice, "spec"), "pool"), "generation");

    return json_is_integer(g) ? (int64_t)json_integer_value(g) : 0;
}

static bool has_owner(const json_t *slice, const char *uid)
{
    const json_t *refs = json_object_get(json_object_get(slice, "metadata"), "ownerReferences");
    size_t i;
    json_t *r;

    json_array_foreach(refs, i, r)
    {
        const char *u = egpu_kube_str(json_object_get(r, "uid"));
        const char *kind = egpu_kube_str(json_object_get(r, "kind"));

        if (u != NULL && kind != NULL && strcmp(u, uid) == 0 && strcmp(kind, "Node") == 0)
            return true;
    }
    return false;
}

static int node_uid(struct publish *p, struct egpu_error *err)
{
    json_t *node = NULL;
    const char *uid;
    int rc;

    if (p->cfg->node_uid != NULL && p->cfg->node_uid[0] != '\0') {
        p->uid = p->cfg->node_uid;
        return 0;
    }
    if (p->st->node_uid[0] == '\0') {
        rc = egpu_kube_get(p->kc, &egpu_kube_nodes, NULL, p->cfg->node, &node, NULL, err);
        if (rc)
            return egpu_error_prefix(err, rc, "ResourceSlice owner: Node %s", p->cfg->node);
        uid = meta_str(node, "uid");
        if (uid == NULL || uid[0] == '\0' || strlen(uid) >= sizeof(p->st->node_uid)) {
            json_decref(node);
            return egpu_error_set(err, -EPROTO, "ResourceSlice owner: Node %s has no usable uid",
                                  p->cfg->node);
        }
        memcpy(p->st->node_uid, uid, strlen(uid) + 1);
        json_decref(node);
    }
    p->uid = p->st->node_uid;
    return 0;
}

static const char *gate_hint(const char *path)
{
    if (strstr(path, "taints") != NULL)
        return "feature gate " GATE_TAINTS " disabled in the API server: unhealthy cards leave "
               "the slice instead";
    return strstr(path, "allowMultipleAllocations") != NULL || strstr(path, "requestPolicy") != NULL
               ? "feature gate " GATE_CONSUMABLE " disabled in the API server"
               : "a feature gate of the API server is off";
}

/* Whether sent carries a device taint that stored lacks. */
static bool taints_dropped(const json_t *sent, const json_t *stored)
{
    const json_t *sd = json_object_get(json_object_get(sent, "spec"), "devices");
    const json_t *hd = json_object_get(json_object_get(stored, "spec"), "devices");
    size_t i;
    json_t *d;

    json_array_foreach(sd, i, d)
    {
        const json_t *t = json_object_get(d, "taints");
        const json_t *h = json_object_get(json_array_get(hd, i), "taints");

        if (json_array_size(t) > 0 && json_array_size(h) < json_array_size(t))
            return true;
    }
    return false;
}

/* After a write of sent that the server answered with stored (taken):
 * record both in st, report a dropped field. */
static void after_write(struct publish *p, json_t *sent, json_t *stored)
{
    const json_t *spec = json_object_get(stored, "spec");
    const char *name = meta_str(stored, "name");
    char path[EGPU_DRA_SLICE_PATH_MAX];

    if (name != NULL)
        snprintf(p->stats->name, sizeof(p->stats->name), "%s", name);
    if (taints_dropped(sent, stored) && !p->st->no_taints) {
        /* An unhealthy card must not stay in the slice untainted. */
        p->st->no_taints = true;
        p->retaint = true;
        egpu_log(EGPU_LOG_WARN,
                 "ResourceSlice device taints dropped by the API server name=%s reason=\"%s\"",
                 name != NULL ? name : "?", gate_hint("taints"));
    }
    if (egpu__dra_slice_dropped(sent, stored, NULL, path, sizeof(path))) {
        snprintf(p->stats->dropped, sizeof(p->stats->dropped), "%s", path);
        egpu_log(EGPU_LOG_WARN,
                 "ResourceSlice field dropped by the API server name=%s field=%s reason=\"%s\"",
                 name != NULL ? name : "?", path, gate_hint(path));
    }
    json_decref(p->st->sent);
    json_decref(p->st->stored);
    p->st->sent = json_incref(json_object_get(sent, "spec"));
    p->st->stored = json_incref((json_t *)spec);
    p->st->generation = generation_of(sent);
    p->stats->generation = p->st->generation;
    json_decref(stored);
}

static int create_slice(struct publish *p, struct egpu_error *err)
{
    int64_t gen = p->st->generation + 1;
    json_t *obj, *stored = NULL;
    int rc;

    obj = slice_of(p->cfg, p->cards, p->n, gen, p->uid, &p->stats->devices);
    if (obj == NULL)
        return egpu_error_set(err, -ENOMEM, "ResourceSlice of node %s: out of memory",
                              p->cfg->node);
    rc = egpu_kube_create(p->kc, &egpu_kube_resourceslices, NULL, obj, &stored, NULL, err);
    if (rc) {
        json_decref(obj);
        return egpu_error_prefix(err, rc, "create ResourceSlice of node %s", p->cfg->node);
    }
    p->stats->created = 1;
    after_write(p, obj, stored);
    egpu_log(EGPU_LOG_INFO, "ResourceSlice created name=%s pool=%s generation=%lld devices=%u",
             p->stats->name, p->cfg->node, (long long)gen, p->stats->devices);
    json_decref(obj);
    return 0;
}

/* Write over the listed slice cur (borrowed) with spec at generation gen. */
static int update_slice(struct publish *p, const json_t *cur, int64_t gen, struct egpu_error *err)
{
    const char *name = meta_str(cur, "name");
    json_t *obj = json_deep_copy(cur), *stored = NULL, *spec;
    int rc;

    spec = slice_of(p->cfg, p->cards, p->n, gen, p->uid, &p->stats->devices);
    if (obj == NULL || spec == NULL ||
        json_object_set(obj, "spec", json_object_get(spec, "spec")) != 0 ||
        json_object_set(json_object_get(obj, "metadata"), "ownerReferences",
                        json_object_get(json_object_get(spec, "metadata"), "ownerReferences")) !=
            0) {
        json_decref(obj);
        json_decref(spec);
        return egpu_error_set(err, -ENOMEM, "ResourceSlice %s: out of memory", name);
    }
    json_decref(spec);
    rc = egpu_kube_update(p->kc, &egpu_kube_resourceslices, NULL, name, obj, &stored, NULL, err);
    if (rc) {
        json_decref(obj);
        return egpu_error_prefix(err, rc, "update ResourceSlice %s", name);
    }
    p->stats->updated = 1;
    after_write(p, obj, stored);
    egpu_log(EGPU_LOG_INFO, "ResourceSlice updated name=%s pool=%s generation=%lld devices=%u",
             p->stats->name, p->cfg->node, (long long)gen, p->stats->devices);
    json_decref(obj);
    return 0;
}

/* Make the listed slice cur (borrowed) what it should be. */
static int sync_slice(struct publish *p, const json_t *cur, struct egpu_error *err)
{
    const json_t *have = json_object_get(cur, "spec");
    int64_t listed = generation_of(cur);
    json_t *want;
    unsigned ndev;
    bool same;

    if (listed < 1)
        listed = 1;
    want = spec_of(p->cfg, p->cards, p->n, listed, &ndev);
    if (want == NULL)
        return egpu_error_set(err, -ENOMEM, "ResourceSlice of node %s: out of memory",
                              p->cfg->node);
    same = (p->st->sent != NULL && json_equal(want, p->st->sent) == 1 &&
            json_equal(have, p->st->stored) == 1) ||
           covers(want, have);
    json_decref(want);
    snprintf(p->stats->name, sizeof(p->stats->name), "%s", meta_str(cur, "name"));
    if (same && has_owner(cur, p->uid)) {
        p->stats->unchanged = 1;
        p->stats->devices = ndev;
        if (listed > p->st->generation)
            p->st->generation = listed;
        p->stats->generation = listed;
        return 0;
    }
    if (!same)
        listed = (listed > p->st->generation ? listed : p->st->generation) + 1;
    return update_slice(p, cur, listed, err);
}

static int delete_slice(struct publish *p, const char *name, struct egpu_error *err)
{
    int rc = egpu_kube_delete(p->kc, &egpu_kube_resourceslices, NULL, name, NULL, err);

    if (rc == -ENOENT)
        return 0; /* gone already */
    if (rc)
        return egpu_error_prefix(err, rc, "delete ResourceSlice %s", name);
    p->stats->deleted++;
    egpu_log(EGPU_LOG_INFO, "ResourceSlice deleted name=%s pool=%s reason=\"duplicate\"", name,
             p->cfg->node);
    return 0;
}

/* The listed slice to keep: the one of our pool, the one written last
 * (the same generation as st's) before others. */
static const json_t *pick(const struct publish *p, const json_t *items)
{
    const json_t *best = NULL;
    size_t i;
    json_t *item;

    json_array_foreach(items, i, item)
    {
        const char *pool = egpu_kube_str(
            json_object_get(json_object_get(json_object_get(item, "spec"), "pool"), "name"));

        if (pool == NULL || strcmp(pool, p->cfg->node) != 0 || meta_str(item, "name") == NULL)
            continue;
        if (best == NULL || generation_of(item) > generation_of(best))
            best = item;
    }
    return best;
}

static int publish_once(struct publish *p, struct egpu_error *err);

int egpu__dra_slice_publish(struct egpu_kube *kc, struct egpu__dra_slice_state *st,
                            const struct egpu__dra_slice_config *cfg,
                            const struct egpu_gpu_info *cards, size_t n,
                            struct egpu__dra_slice_stats *stats, struct egpu_error *err)
{
    struct egpu__dra_slice_stats local = {0};
    struct egpu__dra_slice_config eff;
    struct publish p = {.kc = kc, .st = st, .cfg = &eff, .cards = cards, .n = n};
    char dropped[EGPU_DRA_SLICE_PATH_MAX];
    int rc;

    p.stats = stats != NULL ? stats : &local;
    memset(p.stats, 0, sizeof(*p.stats));
    rc = check_config(cfg, cards, n, err);
    if (rc)
        return rc;
    if (st == NULL)
        return egpu_error_set(err, -EINVAL, "ResourceSlice of node %s: no state", cfg->node);
    eff = *cfg;
    eff.taint_unhealthy = cfg->taint_unhealthy && !st->no_taints;
    rc = publish_once(&p, err);
    if (rc == 0 && p.retaint) {
        /* The server dropped the taints: publish again, the unhealthy cards
         * left out (what was dropped stays in stats->dropped). */
        snprintf(dropped, sizeof(dropped), "%s", p.stats->dropped);
        eff.taint_unhealthy = false;
        p.retaint = false;
        memset(p.stats, 0, sizeof(*p.stats));
        rc = publish_once(&p, err);
        snprintf(p.stats->dropped, sizeof(p.stats->dropped), "%s", dropped);
    }
    return rc;
}

static int publish_once(struct publish *p, struct egpu_error *err)
{
    const struct egpu__dra_slice_config *cfg = p->cfg;
    struct egpu__dra_slice_state *st = p->st;
    struct egpu_kube_list_opts opts = {0};
    struct egpu_kube *kc = p->kc;
    char selector[SELECTOR_MAX];
    const json_t *items, *keep;
    json_t *list = NULL, *item;
    size_t i;
    int rc;

    snprintf(selector, sizeof(selector), "spec.nodeName=%s,spec.driver=%s", cfg->node,
             driver_of(cfg));
    opts.field_selector = selector;
    rc = egpu_kube_list(kc, &egpu_kube_resourceslices, NULL, &opts, &list, NULL, err);
    if (rc)
        return egpu_error_prefix(err, rc, "list ResourceSlices of node %s", cfg->node);
    items = json_object_get(list, "items");
    if (!json_is_array(items)) {
        json_decref(list);
        return egpu_error_set(err, -EPROTO, "list ResourceSlices of node %s: no items", cfg->node);
    }
    keep = pick(p, items);
    /* The Node's uid again when the slice must be made or its owner is not
     * the Node known: a Node deleted and registered again has a new uid, and
     * a slice owned by the old one would be garbage-collected at once. */
    if (keep == NULL || !has_owner(keep, st->node_uid))
        st->node_uid[0] = '\0';
    rc = node_uid(p, err);
    if (rc)
        goto out;
    json_array_foreach(items, i, item)
    {
        const char *name = meta_str(item, "name");

        if (item == keep || name == NULL)
            continue;
        rc = delete_slice(p, name, err);
        if (rc)
            goto out;
    }
    rc = keep != NULL ? sync_slice(p, keep, err) : create_slice(p, err);
out:
    json_decref(list);
    return rc;
}
