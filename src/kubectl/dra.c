/* kubectl/dra.c - the cards of DRA-mode nodes and the shares on them, as
 * kubectl-egpu reads them: ResourceSlices of the driver (one per node from
 * egpu-agent --mode dra: pool = node, devices "gpu-<index>" with attributes
 * uuid, index, productName and capacities cores and memory) and allocated
 * ResourceClaims (status.allocation.devices.results[] of the driver, with
 * shareID and consumedCapacity, decoded by egpu_api_dra_results in
 * src/api/dra_result.c, and status.reservedFor's pods).
 *
 * Wire format: kubernetes/api resource/v1/types.go (v0.34 to v0.36), as
 * ../shared/k8s-wire/dra/dra_notes.md sums it up: sections 3 (slices, the
 * pool's generation rule), 5 (claims, results, reservedFor) and 8 (fields
 * that come back as null, quantities always strings). The slice the agent
 * writes: src/agent/dra_slice_int.h.
 *
 * DESIGN: everything here is outside input (any tenant can make a claim and
 * write what an API server without the DRA validation keeps), so a field of
 * the wrong type, too long or out of range refuses the object with a message
 * naming the field and what is allowed, and leaves the set as it was; cmd.c
 * then leaves that object out with a warning. Lengths are the API's own
 * limits (a device name is a DNS label, a string attribute 64 bytes), the
 * counts its list limits (128 devices per slice, 32 results per claim, 256
 * reservedFor entries). Units: cores in percent of one card, memory in MiB
 * rounded up from the bytes of the quantity.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "kubectl_int.h"

#define SLICE_DEVICES_MAX 128 /* devices per ResourceSlice (resource/v1) */
#define RESERVED_FOR_MAX  256 /* status.reservedFor entries */
#define INDEX_MAX         1023
#define PATH_MAX_LEN      96 /* a field path such as "spec.devices[127].capacity.memory.value" */

struct egpu_kubectl_dra *egpu_kubectl_dra_new(const char *driver)
{
    struct egpu_kubectl_dra *d = egpu_calloc(1, sizeof(*d));

    if (d != NULL)
        snprintf(d->driver, sizeof(d->driver), "%s", driver ? driver : EGPU_API_DRA_DRIVER);
    return d;
}

static void share_clear(struct egpu__kubectl_dra_share *s)
{
    for (size_t i = 0; i < s->npods; i++)
        egpu_free(s->pods[i]);
    egpu_free(s->pods);
    s->pods = NULL;
    s->npods = 0;
}

static void card_clear(struct egpu__kubectl_dra_card *c)
{
    for (size_t i = 0; i < c->nshares; i++)
        share_clear(&c->shares[i]);
    egpu_free(c->shares);
    c->shares = NULL;
    c->nshares = 0;
}

void egpu_kubectl_dra_free(struct egpu_kubectl_dra *d)
{
    if (d == NULL)
        return;
    for (size_t i = 0; i < d->ncards; i++)
        card_clear(&d->cards[i]);
    egpu_free(d->cards);
    egpu_free(d->pools);
    egpu_free(d);
}

bool egpu__kubectl_dra_has_node(const struct egpu_kubectl_dra *d, const char *node)
{
    for (size_t i = 0; d != NULL && i < d->npools; i++)
        if (strcmp(d->pools[i].node, node) == 0)
            return true;
    return false;
}

size_t egpu_kubectl_dra_cards(const struct egpu_kubectl_dra *d, const char *node)
{
    size_t n = 0;

    for (size_t i = 0; d != NULL && i < d->ncards; i++)
        n += node == NULL || strcmp(d->cards[i].node, node) == 0;
    return n;
}

/* ---- fields ---- */

/* o[key] as an array of at most max entries: *out (borrowed) or NULL. */
static int get_arr(const json_t *o, const char *key, const char *path, size_t max,
                   const json_t **out, struct egpu_error *err)
{
    const json_t *v = json_object_get(o, key);

    *out = NULL;
    if (v == NULL || json_is_null(v))
        return 0;
    if (!json_is_array(v))
        return egpu_error_set(err, EGPU_ESYNTAX, "%s%s is not an array; allowed: an array", path,
                              key);
    if (json_array_size(v) > max)
        return egpu_error_set(err, EGPU_ERANGE, "%s%s has %zu entries; allowed: at most %zu", path,
                              key, json_array_size(v), max);
    *out = v;
    return 0;
}

/* A quantity of percent (cores) at field: a whole number lo..hi, rounded up. */
static int cores_of(const json_t *v, const char *field, int64_t lo, int64_t hi, int64_t *out,
                    struct egpu_error *err)
{
    const char *s = egpu_api_str(v);
    struct egpu_quantity q;
    int64_t pct;

    if (s == NULL)
        return egpu_error_set(err, EGPU_ESYNTAX,
                              "%s is not a string; allowed: a quantity, e.g. \"30\"", field);
    if (egpu_quantity_parse(s, &q, NULL) != 0 ||
        egpu_quantity_to_units(&q, 0, 0, EGPU_ROUND_UP, &pct) != 0 || pct < lo || pct > hi)
        return egpu_error_set(err, EGPU_ERANGE,
                              "%s is \"%.64s\"; allowed: a whole number %" PRId64 "..%" PRId64
                              " (percent of the card)",
                              field, s, lo, hi);
    *out = pct;
    return 0;
}

/* A quantity of bytes at field, in MiB rounded up, 0..EGPU_API_GPU_MIB_MAX. */
static int mib_of(const json_t *v, const char *field, int64_t *out, struct egpu_error *err)
{
    const char *s = egpu_api_str(v);
    int64_t mib;

    if (s == NULL)
        return egpu_error_set(err, EGPU_ESYNTAX,
                              "%s is not a string; allowed: a quantity of bytes, e.g. \"4Gi\"",
                              field);
    if (egpu_parse_mem_mib(s, field, &mib, NULL) != 0 || mib > EGPU_API_GPU_MIB_MAX)
        return egpu_error_set(err, EGPU_ERANGE,
                              "%s is \"%.64s\"; allowed: a quantity of bytes 0..%" PRId64 "Mi",
                              field, s, (int64_t)EGPU_API_GPU_MIB_MAX);
    *out = mib;
    return 0;
}

static bool is_dns_label(const char *s)
{
    size_t n = strlen(s);

    if (n == 0 || n > 63 || s[0] == '-' || s[n - 1] == '-')
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-'))
            return false;
    return true;
}

/* ---- slices ---- */

/* One device of a slice into *c (node, pool and generation already set). */
static int device_decode(const json_t *dev, size_t i, struct egpu__kubectl_dra_card *c,
                         struct egpu_error *err)
{
    char path[PATH_MAX_LEN], field[PATH_MAX_LEN + 32];
    const json_t *attrs, *caps, *a, *cap, *taints, *t;
    size_t k;
    int rc;

    snprintf(path, sizeof(path), "spec.devices[%zu]", i);
    if (!json_is_object(dev))
        return egpu_error_set(err, EGPU_ESYNTAX, "%s is not an object; allowed: a Device", path);
    snprintf(path, sizeof(path), "spec.devices[%zu].", i);
    rc = egpu_api_field_text(dev, "name", path, true, c->device, sizeof(c->device), err);
    if (rc)
        return rc;
    if (!is_dns_label(c->device))
        return egpu_error_set(err, EGPU_ESYNTAX,
                              "%sname is \"%s\"; allowed: a DNS label (a-z, 0-9, '-', at most "
                              "63)",
                              path, c->device);
    c->index = -1;
    c->core_total = 100;
    c->mem_mib = 0;
    snprintf(path, sizeof(path), "spec.devices[%zu].", i);
    if ((rc = egpu_api_field_obj(dev, "attributes", path, &attrs, err)) != 0)
        return rc;
    snprintf(path, sizeof(path), "spec.devices[%zu].attributes.uuid.", i);
    if ((rc = egpu_api_field_obj(attrs, "uuid", path, &a, err)) == 0 && a != NULL)
        rc = egpu_api_field_text(a, "string", path, false, c->uuid, sizeof(c->uuid), err);
    if (rc)
        return rc;
    snprintf(path, sizeof(path), "spec.devices[%zu].attributes.productName.", i);
    if ((rc = egpu_api_field_obj(attrs, "productName", path, &a, err)) == 0 && a != NULL)
        rc = egpu_api_field_text(a, "string", path, false, c->model, sizeof(c->model), err);
    if (rc)
        return rc;
    snprintf(path, sizeof(path), "spec.devices[%zu].attributes.", i);
    if ((rc = egpu_api_field_obj(attrs, "index", path, &a, err)) != 0)
        return rc;
    if (a != NULL) {
        const json_t *v = json_object_get(a, "int");

        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INDEX_MAX)
            return egpu_error_set(err, EGPU_ERANGE,
                                  "%sindex.int is not a whole number 0..%d; allowed: the card's "
                                  "index 0..%d",
                                  path, INDEX_MAX, INDEX_MAX);
        c->index = json_integer_value(v);
    }
    snprintf(path, sizeof(path), "spec.devices[%zu].", i);
    if ((rc = egpu_api_field_obj(dev, "capacity", path, &caps, err)) != 0)
        return rc;
    snprintf(path, sizeof(path), "spec.devices[%zu].capacity.", i);
    if ((rc = egpu_api_field_obj(caps, EGPU_API_DRA_CAP_CORES, path, &cap, err)) != 0)
        return rc;
    if (cap != NULL) {
        snprintf(field, sizeof(field), "%s%s.value", path, EGPU_API_DRA_CAP_CORES);
        if ((rc = cores_of(json_object_get(cap, "value"), field, 1, 100, &c->core_total, err)))
            return rc;
    }
    if ((rc = egpu_api_field_obj(caps, EGPU_API_DRA_CAP_MEMORY, path, &cap, err)) != 0)
        return rc;
    if (cap != NULL) {
        snprintf(field, sizeof(field), "%s%s.value", path, EGPU_API_DRA_CAP_MEMORY);
        if ((rc = mib_of(json_object_get(cap, "value"), field, &c->mem_mib, err)))
            return rc;
    }
    snprintf(path, sizeof(path), "spec.devices[%zu].", i);
    if ((rc = get_arr(dev, "taints", path, 16, &taints, err)) != 0)
        return rc;
    json_array_foreach(taints, k, t)
    {
        const char *e = egpu_api_str(json_object_get(t, "effect"));

        /* Unknown effects count as None (resource/v1 DeviceTaint). */
        if (e != NULL && (strcmp(e, "NoSchedule") == 0 || strcmp(e, "NoExecute") == 0))
            c->tainted = true;
    }
    return 0;
}

static struct egpu__kubectl_dra_card *find_card(const struct egpu_kubectl_dra *d, const char *pool,
                                                const char *device)
{
    for (size_t i = 0; i < d->ncards; i++)
        if (strcmp(d->cards[i].pool, pool) == 0 && strcmp(d->cards[i].device, device) == 0)
            return &d->cards[i];
    return NULL;
}

int egpu_kubectl_dra_add_slice(struct egpu_kubectl_dra *d, const json_t *slice,
                               struct egpu_error *err)
{
    struct egpu__kubectl_dra_card base, *nc = NULL;
    struct egpu__kubectl_dra_pool *pool_at = NULL;
    const json_t *spec, *pool, *devs, *dev, *gen;
    char driver[EGPU_K8S_NAME_MAX];
    size_t n, i, keep;
    int rc;

    if (d == NULL || d->claims_added)
        return egpu_error_set(err, -EINVAL, "every ResourceSlice before any ResourceClaim");
    memset(&base, 0, sizeof(base));
    if (!json_is_object(slice))
        return egpu_error_set(err, EGPU_ESYNTAX, "not an object; allowed: a ResourceSlice");
    if ((rc = egpu_api_field_obj(slice, "spec", "", &spec, err)) != 0)
        return rc;
    if (spec == NULL)
        return egpu_error_set(err, EGPU_ESYNTAX, "spec is missing; allowed: a ResourceSliceSpec");
    if ((rc = egpu_api_field_text(spec, "driver", "spec.", true, driver, sizeof(driver), err)) != 0)
        return rc;
    if (strcmp(driver, d->driver) != 0)
        return egpu_error_set(err, EGPU_ESYNTAX, "spec.driver is \"%s\"; allowed: %s", driver,
                              d->driver);
    if ((rc = egpu_api_field_text(spec, "nodeName", "spec.", false, base.node, sizeof(base.node),
                                  err)) != 0)
        return rc;
    if (base.node[0] == '\0')
        return egpu_error_set(err, EGPU_ESYNTAX,
                              "spec.nodeName is missing; allowed: a node's name (egpu-agent "
                              "publishes one slice per node)");
    if ((rc = egpu_api_field_obj(spec, "pool", "spec.", &pool, err)) != 0)
        return rc;
    if (pool == NULL)
        return egpu_error_set(err, EGPU_ESYNTAX, "spec.pool is missing; allowed: a ResourcePool");
    if ((rc = egpu_api_field_text(pool, "name", "spec.pool.", true, base.pool, sizeof(base.pool),
                                  err)) != 0)
        return rc;
    gen = json_object_get(pool, "generation");
    if (!json_is_integer(gen) || json_integer_value(gen) < 0)
        return egpu_error_set(err, EGPU_ERANGE,
                              "spec.pool.generation is not a whole number >= 0; allowed: the "
                              "pool's generation");
    base.generation = json_integer_value(gen);
    if ((rc = get_arr(spec, "devices", "spec.", SLICE_DEVICES_MAX, &devs, err)) != 0)
        return rc;
    /* The pool's newest generation is the only one that counts. */
    for (i = 0; i < d->npools; i++)
        if (strcmp(d->pools[i].name, base.pool) == 0)
            pool_at = &d->pools[i];
    if (pool_at != NULL && pool_at->generation > base.generation)
        return 0;
    if (pool_at == NULL) {
        struct egpu__kubectl_dra_pool *v = egpu_realloc(d->pools, (d->npools + 1) * sizeof(*v));

        if (v == NULL)
            return egpu_error_set(err, -ENOMEM, "out of memory");
        d->pools = v; /* npools grows only once the slice is in */
    }
    n = json_array_size(devs);
    if (n > 0) {
        nc = egpu_calloc(n, sizeof(*nc));
        if (nc == NULL)
            return egpu_error_set(err, -ENOMEM, "out of memory");
    }
    json_array_foreach(devs, i, dev)
    {
        nc[i] = base;
        rc = device_decode(dev, i, &nc[i], err);
        for (size_t j = 0; !rc && j < i; j++)
            if (strcmp(nc[j].device, nc[i].device) == 0)
                rc = egpu_error_set(err, EGPU_ESYNTAX,
                                    "spec.devices[%zu].name is \"%s\" as devices[%zu]'s; "
                                    "allowed: a name once per pool",
                                    i, nc[i].device, j);
        for (size_t j = 0; !rc && j < d->ncards; j++)
            if (strcmp(d->cards[j].pool, base.pool) == 0 &&
                d->cards[j].generation == base.generation &&
                strcmp(d->cards[j].device, nc[i].device) == 0)
                rc = egpu_error_set(err, EGPU_ESYNTAX,
                                    "spec.devices[%zu].name is \"%s\", in another ResourceSlice "
                                    "of pool %s too; allowed: a name once per pool",
                                    i, nc[i].device, base.pool);
        if (rc) {
            egpu_free(nc);
            return rc;
        }
    }
    if (d->ncards + n > d->cap) {
        size_t cap = d->cap ? d->cap : 16;
        struct egpu__kubectl_dra_card *v;

        while (cap < d->ncards + n)
            cap *= 2;
        v = egpu_realloc(d->cards, cap * sizeof(*v));
        if (v == NULL) {
            egpu_free(nc);
            return egpu_error_set(err, -ENOMEM, "out of memory");
        }
        d->cards = v;
        d->cap = cap;
    }
    /* Drop what older generations of the pool gave (no claim is added yet,
     * so no card holds shares). */
    for (i = 0, keep = 0; i < d->ncards; i++)
        if (strcmp(d->cards[i].pool, base.pool) != 0 || d->cards[i].generation == base.generation)
            d->cards[keep++] = d->cards[i];
    d->ncards = keep;
    if (n > 0)
        memcpy(&d->cards[d->ncards], nc, n * sizeof(*nc));
    d->ncards += n;
    egpu_free(nc);
    if (pool_at == NULL) {
        pool_at = &d->pools[d->npools++];
        snprintf(pool_at->name, sizeof(pool_at->name), "%s", base.pool);
    }
    snprintf(pool_at->node, sizeof(pool_at->node), "%s", base.node);
    pool_at->generation = base.generation;
    return 0;
}

/* ---- claims ---- */

/* The pods of status.reservedFor (st borrowed) into s->pods. */
static int pods_decode(const json_t *st, struct egpu__kubectl_dra_share *s, struct egpu_error *err)
{
    const json_t *rf, *e;
    size_t i;
    int rc;

    if ((rc = get_arr(st, "reservedFor", "status.", RESERVED_FOR_MAX, &rf, err)) != 0)
        return rc;
    if (json_array_size(rf) > 0) {
        s->pods = egpu_calloc(json_array_size(rf), sizeof(*s->pods));
        if (s->pods == NULL)
            return egpu_error_set(err, -ENOMEM, "out of memory");
    }
    json_array_foreach(rf, i, e)
    {
        char path[PATH_MAX_LEN], res[EGPU_K8S_NAME_MAX], grp[EGPU_K8S_NAME_MAX];
        char name[EGPU_K8S_NAME_MAX];

        snprintf(path, sizeof(path), "status.reservedFor[%zu]", i);
        if (!json_is_object(e))
            return egpu_error_set(err, EGPU_ESYNTAX,
                                  "%s is not an object; allowed: a ResourceClaimConsumerReference",
                                  path);
        snprintf(path, sizeof(path), "status.reservedFor[%zu].", i);
        if ((rc = egpu_api_field_text(e, "resource", path, true, res, sizeof(res), err)) != 0 ||
            (rc = egpu_api_field_text(e, "apiGroup", path, false, grp, sizeof(grp), err)) != 0 ||
            (rc = egpu_api_field_text(e, "name", path, true, name, sizeof(name), err)) != 0)
            return rc;
        if (strcmp(res, "pods") != 0 || grp[0] != '\0')
            continue; /* not a pod */
        s->pods[s->npods] = egpu_strdup(name);
        if (s->pods[s->npods] == NULL)
            return egpu_error_set(err, -ENOMEM, "out of memory");
        s->npods++;
    }
    return 0;
}

static int share_cmp(const struct egpu__kubectl_dra_share *a,
                     const struct egpu__kubectl_dra_share *b)
{
    int c = strcmp(a->ns, b->ns);

    if (c == 0)
        c = strcmp(a->claim, b->claim);
    return c ? c : strcmp(a->share_id, b->share_id);
}

/* *cp = s with its own copy of the pods. Returns 0 or -ENOMEM. */
static int share_copy(const struct egpu__kubectl_dra_share *s, struct egpu__kubectl_dra_share *cp)
{
    *cp = *s;
    cp->pods = NULL;
    cp->npods = 0;
    if (s->npods == 0)
        return 0;
    cp->pods = egpu_calloc(s->npods, sizeof(*cp->pods));
    if (cp->pods == NULL)
        return -ENOMEM;
    for (; cp->npods < s->npods; cp->npods++) {
        cp->pods[cp->npods] = egpu_strdup(s->pods[cp->npods]);
        if (cp->pods[cp->npods] == NULL) {
            share_clear(cp);
            return -ENOMEM;
        }
    }
    return 0;
}

/* Put s (taken) into card c, whose shares have room, in order. */
static void share_insert(struct egpu__kubectl_dra_card *c, const struct egpu__kubectl_dra_share *s)
{
    size_t at;

    for (at = c->nshares; at > 0 && share_cmp(&c->shares[at - 1], s) > 0; at--)
        c->shares[at] = c->shares[at - 1];
    c->shares[at] = *s;
    c->nshares++;
}

int egpu_kubectl_dra_add_claim(struct egpu_kubectl_dra *d, const json_t *claim,
                               struct egpu_error *err)
{
    struct egpu_api_dra_result res[EGPU_API_DRA_RESULTS_MAX];
    struct egpu__kubectl_dra_share s;
    struct egpu__kubectl_dra_card *cards[EGPU_API_DRA_RESULTS_MAX];
    const json_t *meta, *st;
    struct egpu__kubectl_dra_share copies[EGPU_API_DRA_RESULTS_MAX];
    size_t i, nres = 0, missing = 0, ncopies = 0;
    int rc;

    if (d == NULL)
        return egpu_error_set(err, -EINVAL, "no DRA set");
    d->claims_added = true;
    memset(&s, 0, sizeof(s));
    if (!json_is_object(claim))
        return egpu_error_set(err, EGPU_ESYNTAX, "not an object; allowed: a ResourceClaim");
    if ((rc = egpu_api_field_obj(claim, "metadata", "", &meta, err)) != 0)
        return rc;
    if ((rc = egpu_api_field_text(meta, "name", "metadata.", true, s.claim, sizeof(s.claim),
                                  err)) != 0 ||
        (rc = egpu_api_field_text(meta, "namespace", "metadata.", true, s.ns, sizeof(s.ns), err)) !=
            0)
        return rc;
    if ((rc = egpu_api_field_obj(claim, "status", "", &st, err)) != 0 ||
        (rc = egpu_api_dra_results(claim, d->driver, res, EGPU_API_DRA_RESULTS_MAX, &nres, err)) !=
            0)
        return rc;
    if (nres == 0)
        return 0;
    if ((rc = pods_decode(st, &s, err)) != 0) {
        share_clear(&s);
        return rc;
    }
    /* Every result's card, its copy of the share and the room for it first,
     * so that a failure adds nothing. */
    for (i = 0; i < nres; i++) {
        cards[i] = find_card(d, res[i].pool, res[i].device);
        if (cards[i] == NULL) {
            if (missing++ == 0)
                (void)egpu_error_set(err, 1,
                                     "status.allocation.devices.results: device %s of pool %s "
                                     "is in no ResourceSlice of %s",
                                     res[i].device, res[i].pool, d->driver);
            continue;
        }
        snprintf(s.share_id, sizeof(s.share_id), "%s", res[i].share_id);
        s.whole = res[i].whole;
        s.core_pct = res[i].has_cores ? res[i].core_pct : cards[i]->core_total;
        s.mem_mib = res[i].has_mem ? res[i].mem_mib : cards[i]->mem_mib;
        rc = share_copy(&s, &copies[ncopies]);
        if (rc == 0) {
            size_t need = cards[i]->nshares + 1;
            struct egpu__kubectl_dra_share *v;

            for (size_t j = 0; j < i; j++)
                need += cards[j] == cards[i];
            v = egpu_realloc(cards[i]->shares, need * sizeof(*v));
            if (v == NULL) {
                share_clear(&copies[ncopies]);
                rc = -ENOMEM;
            } else {
                cards[i]->shares = v;
                ncopies++;
            }
        }
        if (rc) {
            for (size_t j = 0; j < ncopies; j++)
                share_clear(&copies[j]);
            share_clear(&s);
            return egpu_error_set(err, rc, "out of memory");
        }
    }
    for (i = 0, ncopies = 0; i < nres; i++)
        if (cards[i] != NULL)
            share_insert(cards[i], &copies[ncopies++]);
    share_clear(&s);
    return (int)missing;
}
