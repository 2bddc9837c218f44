/* kubectl/render.c - what kubectl-egpu prints for decoded objects: the
 * tables (kubectl's layout, table.c) and the JSON documents of -o json
 * (docs/kubectl.md fixes their shape). Pure: no I/O, no clock.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "kubectl_int.h"

#define NONE "<none>"

/* ---- small pieces ---- */

const char *egpu_kubectl_age(int64_t s, char buf[EGPU_KUBECTL_AGE_MAX])
{
    int64_t m, h;

    if (s < -1)
        snprintf(buf, EGPU_KUBECTL_AGE_MAX, "<invalid>");
    else if (s < 0)
        snprintf(buf, EGPU_KUBECTL_AGE_MAX, "0s");
    else if (s < 120)
        snprintf(buf, EGPU_KUBECTL_AGE_MAX, "%" PRId64 "s", s);
    else if ((m = s / 60) < 10)
        snprintf(buf, EGPU_KUBECTL_AGE_MAX, s % 60 ? "%" PRId64 "m%" PRId64 "s" : "%" PRId64 "m", m,
                 s % 60);
    else if (m < 180)
        snprintf(buf, EGPU_KUBECTL_AGE_MAX, "%" PRId64 "m", m);
    else if ((h = s / 3600) < 8)
        snprintf(buf, EGPU_KUBECTL_AGE_MAX, m % 60 ? "%" PRId64 "h%" PRId64 "m" : "%" PRId64 "h", h,
                 m % 60);
    else if (h < 48)
        snprintf(buf, EGPU_KUBECTL_AGE_MAX, "%" PRId64 "h", h);
    else if (h < 24 * 8)
        snprintf(buf, EGPU_KUBECTL_AGE_MAX, h % 24 ? "%" PRId64 "d%" PRId64 "h" : "%" PRId64 "d",
                 h / 24, h % 24);
    else if (h < 24 * 365 * 2)
        snprintf(buf, EGPU_KUBECTL_AGE_MAX, "%" PRId64 "d", h / 24);
    else if (h < 24 * 365 * 8)
        snprintf(buf, EGPU_KUBECTL_AGE_MAX,
                 (h / 24) % 365 ? "%" PRId64 "y%" PRId64 "d" : "%" PRId64 "y", h / 24 / 365,
                 (h / 24) % 365);
    else
        snprintf(buf, EGPU_KUBECTL_AGE_MAX, "%" PRId64 "y", h / 24 / 365);
    return buf;
}

/* Thousandths as decimal text without trailing zeros: "12.5", "-0.25", "3". */
static const char *milli_text(int64_t v, char *buf, size_t len)
{
    uint64_t a = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v; /* INT64_MIN too */
    unsigned frac = (unsigned)(a % 1000);
    int digits = 3;

    if (frac == 0) {
        snprintf(buf, len, "%s%" PRIu64, v < 0 ? "-" : "", a / 1000);
        return buf;
    }
    while (frac % 10 == 0) {
        frac /= 10;
        digits--;
    }
    snprintf(buf, len, "%s%" PRIu64 ".%0*u", v < 0 ? "-" : "", a / 1000, digits, frac);
    return buf;
}

/* Thousandths as a JSON number that reads back as the same text. */
static json_t *milli_json(int64_t v)
{
    char t[48];

    if (v % 1000 == 0)
        return json_integer(v / 1000);
    return json_real(strtod(milli_text(v, t, sizeof(t)), NULL));
}

static int dump(json_t *doc, struct egpu_buf *out)
{
    char *s;
    int rc;

    if (doc == NULL)
        return -ENOMEM;
    s = json_dumps(doc, JSON_INDENT(2) | JSON_REAL_PRECISION(15));
    json_decref(doc);
    if (s == NULL)
        return -ENOMEM;
    rc = egpu_buf_printf(out, "%s\n", s);
    free(s);
    return rc;
}

/* o[k] = v (stolen); false when v is NULL or out of memory. */
static bool put(json_t *o, const char *k, json_t *v)
{
    return v != NULL && json_object_set_new(o, k, v) == 0;
}

/* part of whole in whole percent, rounded down (0 when whole is 0). */
static int64_t pct(int64_t part, int64_t whole)
{
    double r = whole > 0 ? (double)part * 100.0 / (double)whole : 0.0;

    return r < 1e18 ? (int64_t)r : 1000000000000000000LL;
}

/* a + b for a, b >= 0, at most INT64_MAX: the CRD bounds no memory but a
 * card's, so sums saturate instead of overflowing. */
static int64_t add(int64_t a, int64_t b)
{
    return a > INT64_MAX - b ? INT64_MAX : a + b;
}

/* ---- inspect ---- */

/* One card as shown: a GPU object (device-plugin mode), a device of a
 * node's ResourceSlice (DRA mode), or both (a DRA node's device and the GPU
 * object of the same UUID). */
struct view {
    const char *node;
    bool dra;                                /* the node is in DRA mode */
    const struct egpu_api_gpu *gpu;          /* or NULL */
    const struct egpu__kubectl_dra_card *dc; /* or NULL */
};

static const char *v_name(const struct view *v)
{
    return v->gpu != NULL ? v->gpu->meta.name : v->dc->device;
}

static int64_t v_index(const struct view *v)
{
    return v->dc != NULL ? v->dc->index : v->gpu->index;
}

static const char *v_uuid(const struct view *v)
{
    return v->dc != NULL && (v->dc->uuid[0] || v->gpu == NULL) ? v->dc->uuid : v->gpu->uuid;
}

static const char *v_model(const struct view *v)
{
    return v->dc != NULL && (v->dc->model[0] || v->gpu == NULL) ? v->dc->model : v->gpu->model;
}

/* "" when nobody reported it. The GPU object's health where it is not
 * Healthy (the agent taints an unhealthy card's device, or takes it out of
 * the slice); a device with a taint that keeps pods off is not to be
 * scheduled on whatever the GPU object says (an admin's DeviceTaintRule,
 * say); an untainted device in the slice is one the agent found healthy. */
static const char *v_health(const struct view *v)
{
    const char *h = v->gpu != NULL ? v->gpu->health : "";

    if (h[0] && strcmp(h, "Healthy") != 0)
        return h;
    if (v->dc != NULL && v->dc->tainted)
        return "Tainted";
    if (h[0])
        return h;
    return v->dc != NULL ? "Healthy" : "";
}

static int64_t v_mem_total(const struct view *v)
{
    return v->dc != NULL ? v->dc->mem_mib : v->gpu->mem_mib;
}

static int64_t v_core_total(const struct view *v)
{
    return v->dc != NULL ? v->dc->core_total : 100;
}

/* What one card holds, summed over its device-plugin containers and its
 * DRA shares. */
struct card_sum {
    int64_t core, mem; /* percent, MiB (a whole card: all of its memory) */
};

static struct card_sum card_sum(const struct view *v)
{
    struct card_sum s = {0, 0};
    bool whole = false;

    for (size_t i = 0; v->gpu != NULL && i < v->gpu->nallocated; i++) {
        s.core = add(s.core, v->gpu->allocated[i].core_pct);
        s.mem = add(s.mem, v->gpu->allocated[i].mem_mib);
        if (v->gpu->allocated[i].core_pct >= 100)
            whole = true;
    }
    for (size_t i = 0; v->dc != NULL && i < v->dc->nshares; i++) {
        s.core = add(s.core, v->dc->shares[i].core_pct);
        s.mem = add(s.mem, v->dc->shares[i].mem_mib);
        if (v->dc->shares[i].whole)
            whole = true;
    }
    if (whole)
        s.mem = v_mem_total(v);
    return s;
}

static int view_cmp(const void *a, const void *b)
{
    const struct view *x = a, *y = b;
    uint64_t ix = (uint64_t)v_index(x), iy = (uint64_t)v_index(y); /* unknown (-1) last */
    int c = strcmp(x->node, y->node);

    if (c)
        return c;
    if (ix != iy)
        return ix < iy ? -1 : 1;
    return strcmp(v_name(x), v_name(y));
}

struct totals {
    int64_t core, core_total, mem, mem_total;
    size_t cards;
};

static void totals_add(struct totals *t, const struct view *v, struct card_sum s)
{
    t->core = add(t->core, s.core);
    t->core_total = add(t->core_total, v_core_total(v));
    t->mem = add(t->mem, s.mem);
    t->mem_total = add(t->mem_total, v_mem_total(v));
    t->cards++;
}

static const char *mode_name(bool dra)
{
    return dra ? "dra" : "device-plugin";
}

enum {
    IC_NODE,
    IC_MODE,
    IC_GPU,
    IC_MODEL,
    IC_HEALTH,
    IC_CORE,
    IC_MEM,
    IC_USED,
    IC_UTIL,
    IC_UUID,
    IC_POD,
    IC_CONTAINER,
    IC_CLAIM,
    IC_N
};

static void inspect_total_row(struct egpu__kubectl_table *t, const size_t *col, const char *node,
                              const struct totals *s)
{
    egpu__kubectl_table_row(t);
    egpu__kubectl_table_set(t, col[IC_NODE], "%s", node);
    egpu__kubectl_table_set(t, col[IC_GPU], "total");
    egpu__kubectl_table_set(t, col[IC_CORE], "%" PRId64 "/%" PRId64 " (%" PRId64 "%%)", s->core,
                            s->core_total, pct(s->core, s->core_total));
    egpu__kubectl_table_set(t, col[IC_MEM], "%" PRId64 "/%" PRId64 " (%" PRId64 "%%)", s->mem,
                            s->mem_total, pct(s->mem, s->mem_total));
}

static void card_row(struct egpu__kubectl_table *t, const size_t *col, const struct view *v,
                     struct card_sum s, bool wide)
{
    const struct egpu_api_gpu *g = v->gpu;

    egpu__kubectl_table_row(t);
    egpu__kubectl_table_set(t, col[IC_NODE], "%s", v->node);
    if (col[IC_MODE] != SIZE_MAX)
        egpu__kubectl_table_set(t, col[IC_MODE], "%s", mode_name(v->dra));
    if (v_index(v) >= 0)
        egpu__kubectl_table_set(t, col[IC_GPU], "%" PRId64, v_index(v));
    else
        egpu__kubectl_table_set(t, col[IC_GPU], "%s", v_name(v));
    egpu__kubectl_table_set(t, col[IC_MODEL], "%s", v_model(v)[0] ? v_model(v) : NONE);
    egpu__kubectl_table_set(t, col[IC_HEALTH], "%s", v_health(v)[0] ? v_health(v) : "Unknown");
    egpu__kubectl_table_set(t, col[IC_CORE], "%" PRId64 "/%" PRId64, s.core, v_core_total(v));
    egpu__kubectl_table_set(t, col[IC_MEM], "%" PRId64 "/%" PRId64, s.mem, v_mem_total(v));
    if (!wide)
        return;
    if (g != NULL && g->has_used_mem)
        egpu__kubectl_table_set(t, col[IC_USED], "%" PRId64, g->used_mem_mib);
    else
        egpu__kubectl_table_set(t, col[IC_USED], NONE);
    if (g != NULL && g->has_used_util)
        egpu__kubectl_table_set(t, col[IC_UTIL], "%" PRId64, g->used_util_pct);
    else
        egpu__kubectl_table_set(t, col[IC_UTIL], NONE);
    egpu__kubectl_table_set(t, col[IC_UUID], "%s", v_uuid(v)[0] ? v_uuid(v) : NONE);
}

static void share_rows(struct egpu__kubectl_table *t, const size_t *col, const struct view *v)
{
    for (size_t k = 0; v->gpu != NULL && k < v->gpu->nallocated; k++) {
        const struct egpu_api_gpu_share *a = &v->gpu->allocated[k];

        egpu__kubectl_table_row(t);
        egpu__kubectl_table_set(t, col[IC_CORE], "%" PRId64, a->core_pct);
        if (a->core_pct >= 100)
            egpu__kubectl_table_set(t, col[IC_MEM], "all");
        else
            egpu__kubectl_table_set(t, col[IC_MEM], "%" PRId64, a->mem_mib);
        egpu__kubectl_table_set(t, col[IC_POD], "%s/%s", a->ns, a->pod);
        egpu__kubectl_table_set(t, col[IC_CONTAINER], "%s", a->container);
        egpu__kubectl_table_set(t, col[IC_CLAIM], "%s", a->claim[0] ? a->claim : NONE);
    }
    for (size_t k = 0; v->dc != NULL && k < v->dc->nshares; k++) {
        const struct egpu__kubectl_dra_share *a = &v->dc->shares[k];

        egpu__kubectl_table_row(t);
        egpu__kubectl_table_set(t, col[IC_CORE], "%" PRId64, a->core_pct);
        if (a->whole)
            egpu__kubectl_table_set(t, col[IC_MEM], "all");
        else
            egpu__kubectl_table_set(t, col[IC_MEM], "%" PRId64, a->mem_mib);
        if (a->npods > 1)
            egpu__kubectl_table_set(t, col[IC_POD], "%s/%s (+%zu)", a->ns, a->pods[0],
                                    a->npods - 1);
        else
            egpu__kubectl_table_set(t, col[IC_POD], "%s/%s", a->ns, a->npods ? a->pods[0] : NONE);
        egpu__kubectl_table_set(t, col[IC_CONTAINER], NONE);
        egpu__kubectl_table_set(t, col[IC_CLAIM], "%s", a->claim);
    }
}

static int inspect_table(const struct view *v, size_t n, bool wide, struct egpu_buf *out)
{
    static const char *const head[IC_N] = {"NODE", "MODE",        "GPU",       "MODEL",   "HEALTH",
                                           "CORE", "MEMORY(MiB)", "USED(MiB)", "UTIL(%)", "UUID",
                                           "POD",  "CONTAINER",   "CLAIM"};
    size_t col[IC_N];
    struct totals node = {0}, all = {0};
    size_t nodes = 0;
    bool any_dra = false;
    struct egpu__kubectl_table t;
    unsigned hide = 0;
    int rc;

    for (size_t i = 0; i < n; i++)
        any_dra = any_dra || v[i].dra;
    if (!wide)
        hide = 1u << IC_USED | 1u << IC_UTIL | 1u << IC_UUID | (any_dra ? 0 : 1u << IC_MODE);
    egpu__kubectl_table_start(&t, head, IC_N, hide, col);
    for (size_t i = 0; i < n; i++) {
        struct card_sum s = card_sum(&v[i]);

        if (i == 0 || strcmp(v[i - 1].node, v[i].node) != 0) {
            memset(&node, 0, sizeof(node));
            nodes++;
        }
        totals_add(&node, &v[i], s);
        totals_add(&all, &v[i], s);
        card_row(&t, col, &v[i], s, wide);
        share_rows(&t, col, &v[i]);
        if (i + 1 == n || strcmp(v[i + 1].node, v[i].node) != 0)
            inspect_total_row(&t, col, v[i].node, &node);
    }
    rc = egpu__kubectl_table_print(&t, out);
    egpu__kubectl_table_free(&t);
    if (!rc)
        rc = egpu_buf_printf(out,
                             "\nCluster: %zu node%s, %zu GPU%s, core %" PRId64 "/%" PRId64
                             " (%" PRId64 "%%), memory %" PRId64 "/%" PRId64 " MiB (%" PRId64
                             "%%)\n",
                             nodes, nodes == 1 ? "" : "s", all.cards, all.cards == 1 ? "" : "s",
                             all.core, all.core_total, pct(all.core, all.core_total), all.mem,
                             all.mem_total, pct(all.mem, all.mem_total));
    return rc;
}

static bool totals_json(json_t *o, const struct totals *t)
{
    return put(o, "coreAllocated", json_integer(t->core)) &&
           put(o, "coreTotal", json_integer(t->core_total)) &&
           put(o, "memoryAllocated", json_integer(t->mem)) &&
           put(o, "memoryTotal", json_integer(t->mem_total));
}

static bool str_or_null(json_t *o, const char *k, const char *s)
{
    return put(o, k, s[0] ? json_string(s) : json_null());
}

static json_t *shares_json(const struct view *v)
{
    json_t *pods = json_array();
    bool ok = pods != NULL;

    for (size_t k = 0; ok && v->gpu != NULL && k < v->gpu->nallocated; k++) {
        const struct egpu_api_gpu_share *a = &v->gpu->allocated[k];
        json_t *p = json_object(), *rf = json_array();

        ok = p != NULL && rf != NULL && put(p, "namespace", json_string(a->ns)) &&
             put(p, "pod", json_string(a->pod)) && put(p, "container", json_string(a->container)) &&
             put(p, "core", json_integer(a->core_pct)) &&
             put(p, "memory", json_integer(a->mem_mib)) && str_or_null(p, "claim", a->claim) &&
             put(p, "shareID", json_null()) && json_array_append_new(rf, json_string(a->pod)) == 0;
        ok = put(p, "reservedFor", rf) && ok;
        ok = json_array_append_new(pods, p) == 0 && ok;
    }
    for (size_t k = 0; ok && v->dc != NULL && k < v->dc->nshares; k++) {
        const struct egpu__kubectl_dra_share *a = &v->dc->shares[k];
        json_t *p = json_object(), *rf = json_array();

        ok = p != NULL && rf != NULL && put(p, "namespace", json_string(a->ns)) &&
             put(p, "pod", a->npods ? json_string(a->pods[0]) : json_null()) &&
             put(p, "container", json_null()) && put(p, "core", json_integer(a->core_pct)) &&
             put(p, "memory", json_integer(a->whole ? 0 : a->mem_mib)) &&
             put(p, "claim", json_string(a->claim)) && str_or_null(p, "shareID", a->share_id);
        for (size_t j = 0; ok && j < a->npods; j++)
            ok = json_array_append_new(rf, json_string(a->pods[j])) == 0;
        ok = put(p, "reservedFor", rf) && ok;
        ok = json_array_append_new(pods, p) == 0 && ok;
    }
    if (!ok) {
        json_decref(pods);
        return NULL;
    }
    return pods;
}

static json_t *card_json(const struct view *v, struct card_sum s)
{
    const struct egpu_api_gpu *g = v->gpu;
    json_t *o = json_object(), *used;
    bool ok = o != NULL;

    ok = ok && put(o, "name", json_string(v_name(v))) &&
         put(o, "device", v->dc != NULL ? json_string(v->dc->device) : json_null()) &&
         put(o, "index", v_index(v) >= 0 ? json_integer(v_index(v)) : json_null()) &&
         put(o, "uuid", json_string(v_uuid(v))) && put(o, "model", json_string(v_model(v))) &&
         str_or_null(o, "health", v_health(v)) && put(o, "coreAllocated", json_integer(s.core)) &&
         put(o, "coreTotal", json_integer(v_core_total(v))) &&
         put(o, "memoryAllocated", json_integer(s.mem)) &&
         put(o, "memoryTotal", json_integer(v_mem_total(v)));
    if (ok) {
        used = json_object();
        ok = used != NULL &&
             put(used, "memory",
                 g != NULL && g->has_used_mem ? json_integer(g->used_mem_mib) : json_null()) &&
             put(used, "utilization",
                 g != NULL && g->has_used_util ? json_integer(g->used_util_pct) : json_null()) &&
             put(used, "updateTime",
                 g != NULL && g->used_time[0] ? json_string(g->used_time) : json_null());
        ok = put(o, "used", used) && ok;
    }
    ok = ok && put(o, "pods", shares_json(v));
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static int inspect_json(const struct view *v, size_t n, struct egpu_buf *out)
{
    json_t *doc = json_object(), *nodes = json_array(), *node = NULL, *cards = NULL;
    struct totals nt = {0}, all = {0};
    bool ok = doc != NULL && nodes != NULL &&
              put(doc, "apiVersion", json_string("egpu.kubectl/v1")) &&
              put(doc, "kind", json_string("Inspect"));

    ok = put(doc, "nodes", nodes) && ok;
    for (size_t i = 0; ok && i < n; i++) {
        struct card_sum s = card_sum(&v[i]);

        if (i == 0 || strcmp(v[i - 1].node, v[i].node) != 0) {
            memset(&nt, 0, sizeof(nt));
            node = json_object();
            cards = json_array();
            ok = node != NULL && cards != NULL && put(node, "name", json_string(v[i].node)) &&
                 put(node, "mode", json_string(mode_name(v[i].dra)));
            ok = put(node, "gpus", cards) && ok;
            ok = json_array_append_new(nodes, node) == 0 && ok;
        }
        totals_add(&nt, &v[i], s);
        totals_add(&all, &v[i], s);
        ok = ok && json_array_append_new(cards, card_json(&v[i], s)) == 0;
        if (ok && (i + 1 == n || strcmp(v[i + 1].node, v[i].node) != 0))
            ok = totals_json(node, &nt);
    }
    ok = ok && totals_json(doc, &all);
    if (!ok) {
        json_decref(doc);
        return -ENOMEM;
    }
    return dump(doc, out);
}

int egpu_kubectl_inspect_all(const struct egpu_api_gpu *gpus, size_t n,
                             const struct egpu_kubectl_dra *dra, const char *node,
                             enum egpu_kubectl_output fmt, struct egpu_buf *out)
{
    size_t nd = dra != NULL ? dra->ncards : 0, m = 0;
    struct view *v = egpu_calloc(n + nd + 1, sizeof(*v));
    bool *merged = egpu_calloc(n + 1, sizeof(*merged));
    int rc = -ENOMEM;

    if (v == NULL || merged == NULL)
        goto out_free;
    for (size_t i = 0; i < nd; i++) {
        const struct egpu__kubectl_dra_card *dc = &dra->cards[i];

        if (node != NULL && strcmp(dc->node, node) != 0)
            continue;
        v[m] = (struct view){.node = dc->node, .dra = true, .dc = dc};
        for (size_t j = 0; dc->uuid[0] && j < n && v[m].gpu == NULL; j++) {
            if (!merged[j] && strcmp(gpus[j].node_name, dc->node) == 0 &&
                strcmp(gpus[j].uuid, dc->uuid) == 0) {
                v[m].gpu = &gpus[j];
                merged[j] = true;
            }
        }
        m++;
    }
    for (size_t j = 0; j < n; j++) {
        if (merged[j] || (node != NULL && strcmp(gpus[j].node_name, node) != 0))
            continue;
        v[m++] = (struct view){.node = gpus[j].node_name,
                               .dra = egpu__kubectl_dra_has_node(dra, gpus[j].node_name),
                               .gpu = &gpus[j]};
    }
    qsort(v, m, sizeof(*v), view_cmp);
    if (fmt == EGPU_KUBECTL_JSON)
        rc = inspect_json(v, m, out);
    else
        rc = inspect_table(v, m, fmt == EGPU_KUBECTL_WIDE, out);
out_free:
    egpu_free(merged);
    egpu_free(v);
    return rc;
}

int egpu_kubectl_inspect(const struct egpu_api_gpu *gpus, size_t n, const char *node,
                         enum egpu_kubectl_output fmt, struct egpu_buf *out)
{
    return egpu_kubectl_inspect_all(gpus, n, NULL, node, fmt, out);
}

/* ---- claims ---- */

static int claim_cmp(const void *a, const void *b)
{
    const struct egpu_api_claim *x = ((const struct egpu_kubectl_claim_row *)a)->claim;
    const struct egpu_api_claim *y = ((const struct egpu_kubectl_claim_row *)b)->claim;
    int c = strcmp(x->meta.ns, y->meta.ns);

    return c ? c : strcmp(x->meta.name, y->meta.name);
}

/* The card(s) of e: status.gpuName once chosen, else spec's names joined by ','. */
static const char *egpu_cards(const struct egpu_api_egpu *e, char *buf, size_t len)
{
    size_t used = 0;

    if (e->chosen_gpu[0] != '\0') {
        snprintf(buf, len, "%s", e->chosen_gpu);
        return buf;
    }
    buf[0] = '\0';
    for (uint32_t i = 0; i < e->ngpus && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? "," : "", e->gpu_names[i]);
    return buf[0] ? buf : NONE;
}

static void claim_request(const struct egpu_api_claim *c, char *buf, size_t len)
{
    char t[48];

    if (c->tflops_milli > 0)
        snprintf(buf, len, "%s TFLOPS", milli_text(c->tflops_milli, t, sizeof(t)));
    else
        snprintf(buf, len, "%" PRId64 "%%", c->core_pct);
}

enum {
    CC_NS,
    CC_NAME,
    CC_PHASE,
    CC_REQ,
    CC_MEM,
    CC_CLASS,
    CC_EGPU,
    CC_NODE,
    CC_GPU,
    CC_CAP,
    CC_MODEL,
    CC_AGE,
    CC_N
};

static int claims_table(struct egpu_kubectl_claim_row *rows, size_t n, bool all_ns, bool wide,
                        int64_t now_s, struct egpu_buf *out)
{
    static const char *const head[CC_N] = {"NAMESPACE",   "NAME",     "PHASE",      "REQUEST",
                                           "MEMORY(MiB)", "CLASS",    "ELASTICGPU", "NODE",
                                           "GPU",         "CAPACITY", "MODEL",      "AGE"};
    size_t col[CC_N];
    struct egpu__kubectl_table t;
    int rc;

    egpu__kubectl_table_start(
        &t, head, CC_N, (all_ns ? 0 : 1u << CC_NS) | (wide ? 0 : 1u << CC_CAP | 1u << CC_MODEL),
        col);
    for (size_t i = 0; i < n; i++) {
        const struct egpu_api_claim *c = rows[i].claim;
        const struct egpu_api_egpu *e = rows[i].egpu;
        char buf[EGPU_NODE_GPUS_MAX * 8 + EGPU_K8S_NAME_MAX], age[EGPU_KUBECTL_AGE_MAX];

        egpu__kubectl_table_row(&t);
        if (all_ns)
            egpu__kubectl_table_set(&t, col[CC_NS], "%s", c->meta.ns);
        egpu__kubectl_table_set(&t, col[CC_NAME], "%s", c->meta.name);
        egpu__kubectl_table_set(&t, col[CC_PHASE], "%s", egpu_api_claim_phase_name(c->phase));
        claim_request(c, buf, sizeof(buf));
        egpu__kubectl_table_set(&t, col[CC_REQ], "%s", buf);
        if (c->has_mem)
            egpu__kubectl_table_set(&t, col[CC_MEM], "%" PRId64, c->mem_mib);
        else
            egpu__kubectl_table_set(&t, col[CC_MEM], NONE);
        egpu__kubectl_table_set(&t, col[CC_CLASS], "%s",
                                c->class_name[0] ? c->class_name : "<default>");
        egpu__kubectl_table_set(&t, col[CC_EGPU], "%s", c->bound_egpu[0] ? c->bound_egpu : NONE);
        egpu__kubectl_table_set(&t, col[CC_NODE], "%s", e != NULL ? e->node_name : NONE);
        egpu__kubectl_table_set(&t, col[CC_GPU], "%s",
                                e != NULL ? egpu_cards(e, buf, sizeof(buf)) : NONE);
        if (wide) {
            if (c->has_cap_core && c->has_cap_mem)
                egpu__kubectl_table_set(&t, col[CC_CAP], "%" PRId64 "%%/%" PRId64 "MiB",
                                        c->cap_core_pct, c->cap_mem_mib);
            else if (c->has_cap_core)
                egpu__kubectl_table_set(&t, col[CC_CAP], "%" PRId64 "%%", c->cap_core_pct);
            else
                egpu__kubectl_table_set(&t, col[CC_CAP], NONE);
            egpu__kubectl_table_set(&t, col[CC_MODEL], "%s",
                                    e != NULL && e->model[0] ? e->model : NONE);
        }
        if (rows[i].created_s > 0)
            egpu__kubectl_table_set(&t, col[CC_AGE], "%s",
                                    egpu_kubectl_age(now_s - rows[i].created_s, age));
        else
            egpu__kubectl_table_set(&t, col[CC_AGE], "<unknown>");
    }
    rc = egpu__kubectl_table_print(&t, out);
    egpu__kubectl_table_free(&t);
    return rc;
}

static json_t *claim_json(const struct egpu_kubectl_claim_row *r)
{
    const struct egpu_api_claim *c = r->claim;
    const struct egpu_api_egpu *e = r->egpu;
    json_t *o = json_object(), *gpus = json_array(), *cap;
    char ts[EGPU_API_TIME_MAX];
    bool ok = o != NULL && gpus != NULL;

    ok = ok && put(o, "namespace", json_string(c->meta.ns)) &&
         put(o, "name", json_string(c->meta.name)) &&
         put(o, "phase", json_string(egpu_api_claim_phase_name(c->phase))) &&
         put(o, "core", c->tflops_milli > 0 ? json_null() : json_integer(c->core_pct)) &&
         put(o, "tflops", c->tflops_milli > 0 ? milli_json(c->tflops_milli) : json_null()) &&
         put(o, "memory", c->has_mem ? json_integer(c->mem_mib) : json_null()) &&
         put(o, "class", json_string(c->class_name)) &&
         put(o, "elasticGPU", c->bound_egpu[0] ? json_string(c->bound_egpu) : json_null());
    if (ok) {
        cap = json_object();
        ok = cap != NULL &&
             put(cap, "core", c->has_cap_core ? json_integer(c->cap_core_pct) : json_null()) &&
             put(cap, "memory", c->has_cap_mem ? json_integer(c->cap_mem_mib) : json_null());
        ok = put(o, "capacity", cap) && ok;
    }
    ok = ok && put(o, "node", e != NULL ? json_string(e->node_name) : json_null());
    if (e != NULL && e->chosen_gpu[0] != '\0')
        ok = ok && json_array_append_new(gpus, json_string(e->chosen_gpu)) == 0;
    for (uint32_t i = 0; e != NULL && e->chosen_gpu[0] == '\0' && ok && i < e->ngpus; i++)
        ok = json_array_append_new(gpus, json_string(e->gpu_names[i])) == 0;
    ok = put(o, "gpus", gpus) && ok;
    ok = ok && put(o, "model", e != NULL && e->model[0] ? json_string(e->model) : json_null());
    ok = ok &&
         put(o, "creationTimestamp",
             r->created_s > 0 ? json_string(egpu_api_time_format(r->created_s, ts)) : json_null());
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* A sorted copy of n elements of size bytes at src (cmp as qsort's), for
 * egpu_free; NULL when out of memory. */
static void *sorted_copy(const void *src, size_t n, size_t size,
                         int (*cmp)(const void *, const void *))
{
    void *v = egpu_calloc(n ? n : 1, size);

    if (v != NULL && n > 0) {
        memcpy(v, src, n * size);
        qsort(v, n, size, cmp);
    }
    return v;
}

int egpu_kubectl_claims(const struct egpu_kubectl_claim_row *rows, size_t n, bool all_ns,
                        int64_t now_s, enum egpu_kubectl_output fmt, struct egpu_buf *out)
{
    struct egpu_kubectl_claim_row *v = sorted_copy(rows, n, sizeof(*v), claim_cmp);
    json_t *doc, *items;
    bool ok;
    int rc;

    if (v == NULL)
        return -ENOMEM;
    if (fmt != EGPU_KUBECTL_JSON) {
        rc = claims_table(v, n, all_ns, fmt == EGPU_KUBECTL_WIDE, now_s, out);
        egpu_free(v);
        return rc;
    }
    doc = json_object();
    items = json_array();
    ok = doc != NULL && items != NULL && put(doc, "apiVersion", json_string("egpu.kubectl/v1")) &&
         put(doc, "kind", json_string("Claims"));
    ok = put(doc, "claims", items) && ok;
    for (size_t i = 0; ok && i < n; i++)
        ok = json_array_append_new(items, claim_json(&v[i])) == 0;
    egpu_free(v);
    if (!ok) {
        json_decref(doc);
        return -ENOMEM;
    }
    return dump(doc, out);
}

/* ---- budgets ---- */

static int budget_cmp(const void *a, const void *b)
{
    const struct egpu_api_budget *x = *(const struct egpu_api_budget *const *)a;
    const struct egpu_api_budget *y = *(const struct egpu_api_budget *const *)b;
    int c = strcmp(x->meta.ns, y->meta.ns);

    return c ? c : strcmp(x->meta.name, y->meta.name);
}

enum {
    BC_NS,
    BC_NAME,
    BC_HOURS,
    BC_USED,
    BC_REMAINING,
    BC_STATE,
    BC_PERIOD,
    BC_START,
    BC_END,
    BC_ZONE,
    BC_UNTIL,
    BC_N
};

static int budgets_table(const struct egpu_api_budget *const *v, size_t n, bool all_ns, bool wide,
                         struct egpu_buf *out)
{
    static const char *const head[BC_N] = {"NAMESPACE", "NAME",     "GPU-HOURS",    "USED",
                                           "REMAINING", "STATE",    "PERIOD",       "START",
                                           "END",       "TIMEZONE", "METERED-UNTIL"};
    size_t col[BC_N];
    struct egpu__kubectl_table t;
    int rc;

    egpu__kubectl_table_start(
        &t, head, BC_N, (all_ns ? 0 : 1u << BC_NS) | (wide ? 0 : 1u << BC_ZONE | 1u << BC_UNTIL),
        col);
    for (size_t i = 0; i < n; i++) {
        const struct egpu_api_budget *b = v[i];
        int64_t used = egpu_api_budget_used_milli(b);
        char x[48], ts[EGPU_API_TIME_MAX];

        egpu__kubectl_table_row(&t);
        if (all_ns)
            egpu__kubectl_table_set(&t, col[BC_NS], "%s", b->meta.ns);
        egpu__kubectl_table_set(&t, col[BC_NAME], "%s", b->meta.name);
        egpu__kubectl_table_set(&t, col[BC_HOURS], "%s",
                                milli_text(b->gpu_hours_milli, x, sizeof(x)));
        egpu__kubectl_table_set(&t, col[BC_USED], "%s",
                                b->has_metering ? milli_text(used, x, sizeof(x)) : NONE);
        egpu__kubectl_table_set(
            &t, col[BC_REMAINING], "%s",
            b->has_metering ? milli_text(b->gpu_hours_milli - used, x, sizeof(x)) : NONE);
        egpu__kubectl_table_set(&t, col[BC_STATE], "%s",
                                b->has_state ? egpu_api_budget_state_name(b->state) : NONE);
        egpu__kubectl_table_set(&t, col[BC_PERIOD], "%s", b->period_text);
        egpu__kubectl_table_set(&t, col[BC_START], "%s",
                                b->has_period ? egpu_api_time_format(b->period_start_s, ts) : NONE);
        egpu__kubectl_table_set(&t, col[BC_END], "%s",
                                b->has_period ? egpu_api_time_format(b->period_end_s, ts) : NONE);
        if (wide) {
            egpu__kubectl_table_set(&t, col[BC_ZONE], "%s", b->time_zone);
            egpu__kubectl_table_set(&t, col[BC_UNTIL], "%s",
                                    b->has_metering ? egpu_api_time_format(b->metered_until_s, ts)
                                                    : NONE);
        }
    }
    rc = egpu__kubectl_table_print(&t, out);
    egpu__kubectl_table_free(&t);
    return rc;
}

static json_t *budget_json(const struct egpu_api_budget *b)
{
    int64_t used = egpu_api_budget_used_milli(b);
    char ts[EGPU_API_TIME_MAX];
    json_t *o = json_object();
    bool ok = o != NULL;

    ok =
        ok && put(o, "namespace", json_string(b->meta.ns)) &&
        put(o, "name", json_string(b->meta.name)) &&
        put(o, "gpuHours", milli_json(b->gpu_hours_milli)) &&
        put(o, "used", b->has_metering ? milli_json(used) : json_null()) &&
        put(o, "remaining",
            b->has_metering ? milli_json(b->gpu_hours_milli - used) : json_null()) &&
        put(o, "state",
            b->has_state ? json_string(egpu_api_budget_state_name(b->state)) : json_null()) &&
        put(o, "period", json_string(b->period_text)) &&
        put(o, "timeZone", json_string(b->time_zone)) &&
        put(o, "periodStart",
            b->has_period ? json_string(egpu_api_time_format(b->period_start_s, ts)) : json_null());
    ok = ok &&
         put(o, "periodEnd",
             b->has_period ? json_string(egpu_api_time_format(b->period_end_s, ts)) : json_null());
    ok = ok && put(o, "meteredUntil",
                   b->has_metering ? json_string(egpu_api_time_format(b->metered_until_s, ts))
                                   : json_null());
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

int egpu_kubectl_budgets(const struct egpu_api_budget *const *budgets, size_t n, bool all_ns,
                         enum egpu_kubectl_output fmt, struct egpu_buf *out)
{
    const struct egpu_api_budget **v = sorted_copy(budgets, n, sizeof(*v), budget_cmp);
    json_t *doc, *items;
    bool ok;
    int rc;

    if (v == NULL)
        return -ENOMEM;
    if (fmt != EGPU_KUBECTL_JSON) {
        rc = budgets_table(v, n, all_ns, fmt == EGPU_KUBECTL_WIDE, out);
        egpu_free(v);
        return rc;
    }
    doc = json_object();
    items = json_array();
    ok = doc != NULL && items != NULL && put(doc, "apiVersion", json_string("egpu.kubectl/v1")) &&
         put(doc, "kind", json_string("Budgets"));
    ok = put(doc, "budgets", items) && ok;
    for (size_t i = 0; ok && i < n; i++)
        ok = json_array_append_new(items, budget_json(v[i])) == 0;
    egpu_free(v);
    if (!ok) {
        json_decref(doc);
        return -ENOMEM;
    }
    return dump(doc, out);
}
