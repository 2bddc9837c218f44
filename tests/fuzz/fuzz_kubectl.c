/* tests/fuzz/fuzz_kubectl.c - GPU objects (src/api/gpu.c), which egpu-agent
 * and egpu-controller write and kubectl-egpu reads, DRA mode's ResourceSlices
 * and ResourceClaims (src/kubectl/dra.c), and what kubectl-egpu prints for
 * them (src/kubectl/render.c, table.c).
 *
 * Input: byte 0 picks the node filter (bit 0: only node "n1") and the form
 * of the rest (bit 1 clear: a JSON array of GPU objects, or one object; bit
 * 1 set: an object {"gpus": [...], "slices": [...], "claims": [...]}, each
 * list optional, slices added before claims as kubectl-egpu does).
 *
 * DRA invariants: a refused slice or claim gets EGPU_ESYNTAX or EGPU_ERANGE
 * with a message and leaves the set as it was (cards, shares); a claim
 * otherwise returns how many of its results name no card (>= 0); every
 * card has an index -1..1023, cores 1..100 and memory 0..EGPU_API_GPU_MIB_MAX
 * MiB, every share cores 0..100 and memory 0..EGPU_API_GPU_MIB_MAX; the
 * renderings then hold the invariants below with the JSON's own count of
 * cards, shares and nodes, and coreTotal is the sum of the cards'.
 *
 * Invariants: a refused GPU gets EGPU_ESYNTAX or EGPU_ERANGE with a message
 * and *out untouched; a decoded one has index 0..1023, at most 63 peers in
 * spec.topology (each index 0..1023 once, a known link), containers of core
 * 0..100 and memory >= 0, utilization 0..100; the table, the wide table and
 * the JSON document of the decoded cards all render; the table has one
 * line per card, per container and per node plus the header, a blank line
 * and the cluster's; the JSON parses, holds one entry per card, and its
 * cluster totals are the sums of the nodes' (saturating at INT64_MAX, as
 * the CRD bounds no memory but a card's); nothing leaks.
 */
#include <jansson.h>

#include "fuzz.h"
#include "egpu/api.h"
#include "egpu/kubectl.h"
#include "../../src/kubectl/kubectl_int.h" /* the cards and shares, to check them */

#define GPUS_MAX 64

static size_t lines(const char *s)
{
    size_t n = 0;

    for (; *s != '\0'; s++)
        n += *s == '\n';
    return n;
}

/* a + b of two numbers >= 0, at most INT64_MAX, as render.c sums. */
static int64_t sat_add(int64_t a, int64_t b)
{
    FUZZ_CHECK(a >= 0 && b >= 0);
    return a > INT64_MAX - b ? INT64_MAX : a + b;
}

static void render(const struct egpu_api_gpu *g, size_t n, const char *node)
{
    struct egpu_buf b;
    size_t cards = 0, shares = 0, nodes = 0, jcards = 0;
    int64_t core = 0, mem = 0;
    json_t *doc, *v, *gs;
    size_t i, j;

    for (i = 0; i < n; i++) {
        bool seen = false;

        if (node != NULL && strcmp(g[i].node_name, node) != 0)
            continue;
        cards++;
        shares += g[i].nallocated;
        for (j = 0; j < i && !seen; j++)
            seen = (node == NULL || strcmp(g[j].node_name, node) == 0) &&
                   strcmp(g[j].node_name, g[i].node_name) == 0;
        nodes += !seen;
    }
    egpu_buf_init(&b, EGPU_KUBECTL_OUT_MAX);
    FUZZ_CHECK(egpu_kubectl_inspect(g, n, node, EGPU_KUBECTL_TABLE, &b) == 0);
    FUZZ_CHECK(lines(egpu_buf_str(&b)) == 1 + cards + shares + nodes + 2);
    egpu_buf_reset(&b);
    FUZZ_CHECK(egpu_kubectl_inspect(g, n, node, EGPU_KUBECTL_WIDE, &b) == 0);
    FUZZ_CHECK(lines(egpu_buf_str(&b)) == 1 + cards + shares + nodes + 2);
    egpu_buf_reset(&b);
    FUZZ_CHECK(egpu_kubectl_inspect(g, n, node, EGPU_KUBECTL_JSON, &b) == 0);
    doc = json_loads(egpu_buf_str(&b), 0, NULL);
    FUZZ_CHECK(doc != NULL);
    FUZZ_CHECK(json_array_size(json_object_get(doc, "nodes")) == nodes);
    json_array_foreach(json_object_get(doc, "nodes"), i, v)
    {
        gs = json_object_get(v, "gpus");
        jcards += json_array_size(gs);
        core = sat_add(core, json_integer_value(json_object_get(v, "coreAllocated")));
        mem = sat_add(mem, json_integer_value(json_object_get(v, "memoryAllocated")));
    }
    FUZZ_CHECK(jcards == cards);
    FUZZ_CHECK(core == json_integer_value(json_object_get(doc, "coreAllocated")));
    FUZZ_CHECK(mem == json_integer_value(json_object_get(doc, "memoryAllocated")));
    FUZZ_CHECK(json_integer_value(json_object_get(doc, "coreTotal")) == (int64_t)cards * 100);
    json_decref(doc);
    egpu_buf_free(&b);
}

/* The three renderings of g[0..n) and d: the table's lines and the JSON's
 * sums, counted from the JSON document itself. */
static void render_dra(const struct egpu_api_gpu *g, size_t n, const struct egpu_kubectl_dra *d,
                       const char *node)
{
    size_t cards = 0, shares = 0, nodes;
    int64_t core = 0, mem = 0, core_total = 0;
    struct egpu_buf b;
    json_t *doc, *v, *c;
    size_t i, j;

    egpu_buf_init(&b, EGPU_KUBECTL_OUT_MAX);
    FUZZ_CHECK(egpu_kubectl_inspect_all(g, n, d, node, EGPU_KUBECTL_JSON, &b) == 0);
    doc = json_loads(egpu_buf_str(&b), 0, NULL);
    FUZZ_CHECK(doc != NULL);
    nodes = json_array_size(json_object_get(doc, "nodes"));
    json_array_foreach(json_object_get(doc, "nodes"), i, v)
    {
        const char *mode = json_string_value(json_object_get(v, "mode"));

        FUZZ_CHECK(mode != NULL &&
                   (strcmp(mode, "dra") == 0 || strcmp(mode, "device-plugin") == 0));
        FUZZ_CHECK(node == NULL ||
                   strcmp(json_string_value(json_object_get(v, "name")), node) == 0);
        json_array_foreach(json_object_get(v, "gpus"), j, c)
        {
            cards++;
            shares += json_array_size(json_object_get(c, "pods"));
            core_total = sat_add(core_total, json_integer_value(json_object_get(c, "coreTotal")));
        }
        core = sat_add(core, json_integer_value(json_object_get(v, "coreAllocated")));
        mem = sat_add(mem, json_integer_value(json_object_get(v, "memoryAllocated")));
    }
    FUZZ_CHECK(core == json_integer_value(json_object_get(doc, "coreAllocated")));
    FUZZ_CHECK(mem == json_integer_value(json_object_get(doc, "memoryAllocated")));
    FUZZ_CHECK(core_total == json_integer_value(json_object_get(doc, "coreTotal")));
    json_decref(doc);
    egpu_buf_reset(&b);
    FUZZ_CHECK(egpu_kubectl_inspect_all(g, n, d, node, EGPU_KUBECTL_TABLE, &b) == 0);
    FUZZ_CHECK(lines(egpu_buf_str(&b)) == 1 + cards + shares + nodes + 2);
    egpu_buf_reset(&b);
    FUZZ_CHECK(egpu_kubectl_inspect_all(g, n, d, node, EGPU_KUBECTL_WIDE, &b) == 0);
    FUZZ_CHECK(lines(egpu_buf_str(&b)) == 1 + cards + shares + nodes + 2);
    egpu_buf_free(&b);
}

static size_t dra_shares(const struct egpu_kubectl_dra *d)
{
    size_t n = 0;

    for (size_t i = 0; i < d->ncards; i++)
        n += d->cards[i].nshares;
    return n;
}

static void check_refused(int rc, const struct egpu_error *err)
{
    FUZZ_CHECK(rc == EGPU_ESYNTAX || rc == EGPU_ERANGE);
    FUZZ_CHECK(err->msg[0] != '\0' && memchr(err->msg, '\0', sizeof(err->msg)) != NULL);
}

/* Slices, then claims, into d, each checked. */
static void add_dra(struct egpu_kubectl_dra *d, const json_t *slices, const json_t *claims)
{
    const json_t *o;
    size_t i;

    json_array_foreach(slices, i, o)
    {
        struct egpu_error err = {0};
        size_t before = d->ncards;
        int rc = egpu_kubectl_dra_add_slice(d, o, &err);

        if (rc) {
            check_refused(rc, &err);
            FUZZ_CHECK(d->ncards == before);
        }
    }
    json_array_foreach(claims, i, o)
    {
        struct egpu_error err = {0};
        size_t before = dra_shares(d);
        int rc = egpu_kubectl_dra_add_claim(d, o, &err);

        if (rc < 0) {
            check_refused(rc, &err);
            FUZZ_CHECK(dra_shares(d) == before);
        } else {
            FUZZ_CHECK(dra_shares(d) >= before);
            FUZZ_CHECK(rc == 0 || err.msg[0] != '\0');
        }
    }
    for (i = 0; i < d->ncards; i++) {
        const struct egpu__kubectl_dra_card *c = &d->cards[i];

        FUZZ_CHECK(c->index >= -1 && c->index <= 1023);
        FUZZ_CHECK(c->core_total >= 1 && c->core_total <= 100);
        FUZZ_CHECK(c->mem_mib >= 0 && c->mem_mib <= EGPU_API_GPU_MIB_MAX);
        FUZZ_CHECK(c->node[0] != '\0' && c->device[0] != '\0');
        for (size_t k = 0; k < c->nshares; k++) {
            FUZZ_CHECK(c->shares[k].core_pct >= 0 && c->shares[k].core_pct <= 100);
            FUZZ_CHECK(c->shares[k].mem_mib >= 0 && c->shares[k].mem_mib <= EGPU_API_GPU_MIB_MAX);
            FUZZ_CHECK((c->shares[k].npods == 0) == (c->shares[k].pods == NULL));
        }
    }
}

static int decode(const json_t *o, struct egpu_api_gpu *g)
{
    struct egpu_error err = {0};
    int rc;

    memset(g, 0x5a, sizeof(*g));
    rc = egpu_api_gpu_decode(o, g, &err);
    if (rc != 0) {
        const unsigned char *p = (const unsigned char *)g;

        FUZZ_CHECK(rc == EGPU_ESYNTAX || rc == EGPU_ERANGE);
        FUZZ_CHECK(err.msg[0] != '\0' && memchr(err.msg, '\0', sizeof(err.msg)) != NULL);
        for (size_t i = 0; i < sizeof(*g); i++)
            FUZZ_CHECK(p[i] == 0x5a);
        return rc;
    }
    FUZZ_CHECK(g->index >= 0 && g->index <= 1023);
    FUZZ_CHECK(g->npeers <= EGPU_API_GPU_PEERS_MAX);
    for (size_t i = 0; i < g->npeers; i++) {
        FUZZ_CHECK(g->peers[i].index <= 1023);
        FUZZ_CHECK(g->peers[i].link > EGPU_TOPO_UNKNOWN && g->peers[i].link <= EGPU_TOPO_NVLINK);
        for (size_t j = 0; j < i; j++)
            FUZZ_CHECK(g->peers[j].index != g->peers[i].index);
    }
    FUZZ_CHECK(g->node_name[0] != '\0' && g->uuid[0] != '\0');
    FUZZ_CHECK(g->nallocated <= EGPU_API_GPU_SHARES_MAX);
    FUZZ_CHECK((g->nallocated == 0) == (g->allocated == NULL));
    for (size_t i = 0; i < g->nallocated; i++) {
        FUZZ_CHECK(g->allocated[i].core_pct >= 0 && g->allocated[i].core_pct <= 100);
        FUZZ_CHECK(g->allocated[i].mem_mib >= 0);
        FUZZ_CHECK(g->allocated[i].ns[0] && g->allocated[i].pod[0] && g->allocated[i].container[0]);
    }
    FUZZ_CHECK(!g->has_used_util || (g->used_util_pct >= 0 && g->used_util_pct <= 100));
    return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    egpu_log_level = EGPU_LOG_ERROR;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct egpu_api_gpu g[GPUS_MAX];
    long live = egpu_alloc_live();
    size_t n = 0, i;
    json_t *in, *o;

    if (size < 1)
        return 0;
    in = json_loadb((const char *)data + 1, size - 1, JSON_ALLOW_NUL, NULL);
    if (in == NULL)
        return 0;
    if (data[0] & 2) {
        struct egpu_kubectl_dra *d = egpu_kubectl_dra_new(NULL);

        FUZZ_CHECK(d != NULL);
        json_array_foreach(json_object_get(in, "gpus"), i, o)
        {
            if (n < GPUS_MAX && decode(o, &g[n]) == 0)
                n++;
        }
        add_dra(d, json_object_get(in, "slices"), json_object_get(in, "claims"));
        render_dra(g, n, d, (data[0] & 1) ? "n1" : NULL);
        egpu_kubectl_dra_free(d);
    } else if (json_is_array(in)) {
        json_array_foreach(in, i, o)
        {
            if (n < GPUS_MAX && decode(o, &g[n]) == 0)
                n++;
        }
        render(g, n, (data[0] & 1) ? "n1" : NULL);
    } else {
        if (decode(in, &g[0]) == 0)
            n = 1;
        render(g, n, (data[0] & 1) ? "n1" : NULL);
    }
    for (i = 0; i < n; i++)
        egpu_api_gpu_clear(&g[i]);
    json_decref(in);
    FUZZ_CHECK(egpu_alloc_live() == live);
    return 0;
}
