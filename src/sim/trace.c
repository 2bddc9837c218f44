/* sim/trace.c - reading the openb trace CSVs (libcsv) and turning them into
 * the core's cluster and pod requests.
 *
 * DESIGN: rows are validated field by field and the first bad one stops the
 * load with "file:line: column \"value\": why (allowed ...)". The header row
 * picks the columns by name, so column order and extra columns do not matter
 * (openb_pod_list_multigpu20.csv has only the first five).
 */
#include <csv.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "egpu/sim.h"

#define FIELDS_MAX 32
#define FIELD_MAX  512

enum table { NODES, PODS };

struct loader {
    const char *path;
    enum table table;
    struct egpu_trace *t;
    struct egpu_error *err;
    int rc;      /* first error, 0 = none */
    size_t line; /* current line, 1-based (header = 1) */
    char fields[FIELDS_MAX][FIELD_MAX];
    size_t nfields;
    int col[8]; /* column index per wanted name, -1 = absent */
    size_t cap;
};

static const char *const node_cols[] = {"sn", "cpu_milli", "memory_mib", "gpu", "model"};
static const char *const pod_cols[] = {"name",    "cpu_milli", "memory_mib",
                                       "num_gpu", "gpu_milli", "gpu_spec"};
enum { C_NAME, C_CPU, C_MEM, C_NGPU, C_GPU_MILLI, C_SPEC }; /* pods; nodes use 0..4 */

/* Record the first error: "path:line: col \"val\": why". */
static int fail(struct loader *l, int code, const char *col, const char *val, const char *why)
{
    if (l->rc == 0)
        l->rc =
            egpu_error_set(l->err, code, "%s:%zu: %s \"%s\": %s", l->path, l->line, col, val, why);
    return l->rc;
}

/* Record the first error that concerns a whole row: "path:line: why". */
static int fail_row(struct loader *l, int code, const char *why)
{
    if (l->rc == 0)
        l->rc = egpu_error_set(l->err, code, "%s:%zu: %s", l->path, l->line, why);
    return l->rc;
}

static const char *field(const struct loader *l, int c)
{
    return l->col[c] >= 0 && (size_t)l->col[c] < l->nfields ? l->fields[l->col[c]] : "";
}

/* Whole decimal number in [lo, hi]. */
static int number(struct loader *l, int c, int64_t lo, int64_t hi, int64_t *out)
{
    const char *s = field(l, c);
    const char *name = l->table == NODES ? node_cols[c] : pod_cols[c];
    char why[128], *end;
    long long v;

    if (*s == '\0')
        return fail(l, EGPU_ESYNTAX, name, s, "missing value");
    errno = 0;
    v = strtoll(s, &end, 10);
    if (*end != '\0' || *s < '0' || *s > '9') {
        snprintf(why, sizeof(why), "not a whole number (allowed %lld..%lld)", (long long)lo,
                 (long long)hi);
        return fail(l, EGPU_ESYNTAX, name, s, why);
    }
    if (errno == ERANGE || v < lo || v > hi) {
        snprintf(why, sizeof(why), "out of range (allowed %lld..%lld)", (long long)lo,
                 (long long)hi);
        return fail(l, EGPU_ERANGE, name, s, why);
    }
    *out = v;
    return 0;
}

static int text(struct loader *l, int c, char *out, size_t len)
{
    const char *s = field(l, c);
    const char *name = l->table == NODES ? node_cols[c] : pod_cols[c];

    if (strlen(s) >= len)
        return fail(l, EGPU_ERANGE, name, s, "too long");
    memcpy(out, s, strlen(s) + 1);
    return 0;
}

static int header(struct loader *l)
{
    const char *const *cols = l->table == NODES ? node_cols : pod_cols;
    size_t ncols = l->table == NODES ? 5 : 6;

    for (size_t c = 0; c < ncols; c++) {
        l->col[c] = -1;
        for (size_t i = 0; i < l->nfields; i++) {
            if (strcmp(l->fields[i], cols[c]) == 0)
                l->col[c] = (int)i;
        }
        /* Optional: a node's model (CPU-only lists) and a pod's gpu_spec. */
        if (l->col[c] < 0 && !(l->table == NODES && c == 4) && !(l->table == PODS && c == C_SPEC)) {
            char why[160];

            snprintf(why, sizeof(why), "header lacks column %s (need %s)", cols[c],
                     l->table == NODES ? "sn,cpu_milli,memory_mib,gpu[,model]"
                                       : "name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec]");
            return fail_row(l, EGPU_ESYNTAX, why);
        }
    }
    return 0;
}

static int grow(struct loader *l, void **arr, size_t have, size_t size)
{
    void *p;

    if (have < l->cap)
        return 0;
    l->cap = l->cap ? l->cap * 2 : 1024;
    p = egpu_realloc(*arr, l->cap * size);
    if (p == NULL)
        return fail_row(l, -ENOMEM, "out of memory");
    *arr = p;
    return 0;
}

static int node_row(struct loader *l)
{
    struct egpu_trace *t = l->t;
    struct egpu_trace_node *n;
    int64_t v;

    if (grow(l, (void **)&t->nodes, t->nnodes, sizeof(*n)))
        return l->rc;
    n = &t->nodes[t->nnodes];
    memset(n, 0, sizeof(*n));
    if (text(l, 0, n->name, sizeof(n->name)) || number(l, 1, 0, INT64_MAX / 2, &n->cpu_milli) ||
        number(l, 2, 0, INT64_MAX / 2, &n->mem_mib) || number(l, 3, 0, EGPU_NODE_GPUS_MAX, &v) ||
        text(l, 4, n->model, sizeof(n->model)))
        return l->rc;
    if (n->name[0] == '\0')
        return fail(l, EGPU_ESYNTAX, "sn", "", "empty node name");
    n->ngpus = (uint32_t)v;
    if (n->ngpus > 0 && n->model[0] == '\0')
        return fail(l, EGPU_ESYNTAX, "model", "", "a node with GPUs needs its GPU model");
    t->nnodes++;
    return 0;
}

static int pod_row(struct loader *l)
{
    struct egpu_trace *t = l->t;
    struct egpu_trace_pod *p;
    int64_t ngpu, milli;

    if (grow(l, (void **)&t->pods, t->npods, sizeof(*p)))
        return l->rc;
    p = &t->pods[t->npods];
    memset(p, 0, sizeof(*p));
    if (text(l, C_NAME, p->name, sizeof(p->name)) ||
        number(l, C_CPU, 0, INT64_MAX / 2, &p->cpu_milli) ||
        number(l, C_MEM, 0, INT64_MAX / 2, &p->mem_mib) ||
        number(l, C_NGPU, 0, EGPU_NODE_GPUS_MAX, &ngpu) ||
        number(l, C_GPU_MILLI, 0, EGPU_GPU_MILLI, &milli) ||
        text(l, C_SPEC, p->gpu_spec, sizeof(p->gpu_spec)))
        return l->rc;
    if (p->name[0] == '\0')
        return fail(l, EGPU_ESYNTAX, "name", "", "empty pod name");
    if ((ngpu > 1 && milli != EGPU_GPU_MILLI) || (ngpu == 0) != (milli == 0))
        return fail(l, EGPU_ERANGE, "gpu_milli", field(l, C_GPU_MILLI),
                    "must be 1..1000 with num_gpu 1, 1000 with num_gpu > 1, 0 with num_gpu 0");
    p->num_gpu = (uint32_t)ngpu;
    p->gpu_milli = (uint32_t)milli;
    t->npods++;
    return 0;
}

static void on_field(void *s, size_t len, void *data)
{
    struct loader *l = data;

    if (l->rc)
        return;
    if (l->nfields == FIELDS_MAX) {
        fail_row(l, EGPU_ESYNTAX, "more than 32 columns");
        return;
    }
    if (len >= FIELD_MAX) {
        fail_row(l, EGPU_ESYNTAX, "a field longer than 511 bytes");
        return;
    }
    memcpy(l->fields[l->nfields], s, len);
    l->fields[l->nfields][len] = '\0';
    l->nfields++;
}

static void on_row(int c, void *data)
{
    struct loader *l = data;

    (void)c;
    l->line++;
    if (l->rc == 0) {
        if (l->line == 1)
            (void)header(l); /* failure recorded in l->rc */
        else if (l->table == NODES)
            (void)node_row(l);
        else
            (void)pod_row(l);
    }
    l->nfields = 0;
}

static void *csv_realloc(void *p, size_t n)
{
    return egpu_realloc(p, n);
}

static int load(const char *path, enum table table, struct egpu_trace *t, struct egpu_error *err)
{
    struct loader *l;
    struct csv_parser csv;
    char buf[65536];
    size_t n;
    FILE *f;
    int rc;

    f = fopen(path, "r");
    if (f == NULL)
        return egpu_error_errno(err, "%s", path);
    l = egpu_calloc(1, sizeof(*l));
    if (l == NULL || csv_init(&csv, CSV_STRICT | CSV_APPEND_NULL) != 0) {
        egpu_free(l);
        fclose(f);
        return egpu_error_set(err, -ENOMEM, "%s: out of memory", path);
    }
    csv_set_realloc_func(&csv, csv_realloc);
    csv_set_free_func(&csv, egpu_free);
    l->path = path;
    l->table = table;
    l->t = t;
    l->err = err;
    while (l->rc == 0 && (n = fread(buf, 1, sizeof(buf), f)) > 0) {
        if (csv_parse(&csv, buf, n, on_field, on_row, l) != n && l->rc == 0)
            l->rc = egpu_error_set(err, EGPU_ESYNTAX, "%s:%zu: %s", path, l->line + 1,
                                   csv_strerror(csv_error(&csv)));
    }
    if (l->rc == 0 && ferror(f))
        l->rc = egpu_error_set(err, -EIO, "%s: read error", path);
    if (l->rc == 0 && csv_fini(&csv, on_field, on_row, l) != 0)
        l->rc = egpu_error_set(err, EGPU_ESYNTAX, "%s:%zu: %s", path, l->line + 1,
                               csv_strerror(csv_error(&csv)));
    if (l->rc == 0 && l->line < 2)
        l->rc = egpu_error_set(err, -EINVAL, "%s: no rows after the header", path);
    csv_free(&csv);
    fclose(f);
    rc = l->rc;
    egpu_free(l);
    return rc;
}

static int cmp_pod_name(const void *a, const void *b)
{
    return strcmp(((const struct egpu_trace_pod *)a)->name,
                  ((const struct egpu_trace_pod *)b)->name);
}

int egpu_trace_load(const char *node_csv, const char *pod_csv, struct egpu_trace *t,
                    struct egpu_error *err)
{
    int rc;

    memset(t, 0, sizeof(*t));
    rc = load(node_csv, NODES, t, err);
    if (rc == 0)
        rc = load(pod_csv, PODS, t, err);
    if (rc) {
        egpu_trace_free(t);
        return rc;
    }
    qsort(t->pods, t->npods, sizeof(*t->pods), cmp_pod_name);
    return 0;
}

void egpu_trace_free(struct egpu_trace *t)
{
    if (t == NULL)
        return;
    egpu_free(t->nodes);
    egpu_free(t->pods);
    memset(t, 0, sizeof(*t));
}

static bool is_dir(const char *path)
{
    struct stat st;

    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int egpu_trace_find_dir(const char *flag, char *out, size_t len, struct egpu_error *err)
{
    static const char *const fallback[] = {"../shared/data/openb", "data/openb"};
    const char *env = getenv("EGPU_TRACE_DIR");
    const char *given = flag ? "--trace-dir" : (env && *env) ? "EGPU_TRACE_DIR" : NULL;
    const char *dir = flag ? flag : (env && *env) ? env : NULL;

    if (dir != NULL) {
        if (!is_dir(dir))
            return egpu_error_set(err, -ENOENT, "%s %s: no such directory", given, dir);
        snprintf(out, len, "%s", dir);
        return 0;
    }
    for (size_t i = 0; i < sizeof(fallback) / sizeof(fallback[0]); i++) {
        if (is_dir(fallback[i])) {
            snprintf(out, len, "%s", fallback[i]);
            return 0;
        }
    }
    return egpu_error_set(err, -ENOENT,
                          "no trace found (looked at --trace-dir, $EGPU_TRACE_DIR, "
                          "../shared/data/openb, data/openb); run `make data` to fetch "
                          "openb_node_list_gpu_node.csv and openb_pod_list_*.csv from "
                          "https://github.com/alibaba/clusterdata, folder "
                          "cluster-trace-gpu-v2023/csv, into data/openb");
}

/* s is a card index: decimal digits, no sign, below EGPU_NODE_GPUS_MAX. */
static bool index_of(const char *s, uint64_t *out)
{
    char *end;
    unsigned long long v;

    if (s[0] < '0' || s[0] > '9')
        return false;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0' || v >= EGPU_NODE_GPUS_MAX)
        return false;
    *out = v;
    return true;
}

int egpu_trace_mark_unhealthy(struct egpu_trace *t, const char *list, struct egpu_error *err)
{
    uint64_t *mark = egpu_calloc(t->nnodes ? t->nnodes : 1, sizeof(*mark));
    const char *p = list;
    int rc = 0;

    if (mark == NULL)
        return egpu_error_set(err, -ENOMEM, "--unhealthy: out of memory");
    while (rc == 0) {
        size_t len = strcspn(p, ",");
        const char *gpu = NULL;
        size_t i = t->nnodes;
        uint64_t idx = 0;
        char card[2 * EGPU_TRACE_NAME_MAX];

        snprintf(card, sizeof(card), "%.*s", (int)(len < sizeof(card) ? len : sizeof(card) - 1), p);
        for (char *s = strstr(card, "-gpu"); s != NULL; s = strstr(s + 1, "-gpu"))
            gpu = s; /* the last "-gpu": a node's name may hold one */
        if (gpu != NULL && index_of(gpu + 4, &idx)) {
            for (i = 0; i < t->nnodes; i++) {
                if (strlen(t->nodes[i].name) == (size_t)(gpu - card) &&
                    strncmp(t->nodes[i].name, card, (size_t)(gpu - card)) == 0 &&
                    idx < t->nodes[i].ngpus)
                    break;
            }
        }
        if (len == 0 || len >= sizeof(card) || i == t->nnodes)
            rc = egpu_error_set(err, EGPU_ESYNTAX,
                                "--unhealthy \"%s\": not a card of the trace (allowed: "
                                "<sn>-gpu<index>, a node of the node CSV and an index below "
                                "its gpu count, comma-separated)",
                                card);
        else
            mark[i] |= 1ULL << idx;
        if (p[len] == '\0')
            break;
        p += len + 1;
    }
    for (size_t i = 0; rc == 0 && i < t->nnodes; i++)
        t->nodes[i].unhealthy |= mark[i];
    egpu_free(mark);
    return rc;
}

int egpu_trace_cluster(const struct egpu_trace *t, struct egpu_cluster **out,
                       struct egpu_error *err)
{
    struct egpu_cluster *c = egpu_cluster_new();
    struct egpu_gpu_spec gpus[EGPU_NODE_GPUS_MAX];
    static _Thread_local struct egpu_topo_link links[EGPU_NODE_GPUS_MAX][EGPU_NODE_GPUS_MAX];
    const uint32_t isl = t->topology_islands;

    if (c == NULL)
        return egpu_error_set(err, -ENOMEM, "cluster: out of memory");
    for (size_t i = 0; i < t->nnodes; i++) {
        const struct egpu_trace_node *n = &t->nodes[i];
        struct egpu_node_spec spec = {
            .name = n->name,
            .cpu_milli = n->cpu_milli,
            .mem_mib = n->mem_mib,
            .ngpus = n->ngpus,
            .gpus = gpus,
        };
        int rc;

        char notes[EGPU_NODE_GPUS_MAX][EGPU_TRACE_NAME_MAX + 32]; /* copied by add_node */

        for (uint32_t g = 0; g < n->ngpus; g++) {
            gpus[g] = (struct egpu_gpu_spec){.index = g, .model = n->model};
            if (n->unhealthy & (1ULL << g)) {
                snprintf(notes[g], sizeof(notes[g]), "%s-gpu%u (unhealthy: --unhealthy)", n->name,
                         g);
                gpus[g].unhealthy = notes[g];
            }
            for (uint32_t p = 0; isl > 0 && p < n->ngpus; p++) {
                if (p != g)
                    links[g][gpus[g].nlinks++] = (struct egpu_topo_link){
                        .peer_index = p,
                        .level = g / isl == p / isl ? EGPU_TOPO_NVLINK : EGPU_TOPO_SYSTEM};
            }
            gpus[g].links = links[g];
        }
        rc = egpu_cluster_add_node(c, &spec, err);
        if (rc) {
            egpu_cluster_free(c);
            return rc;
        }
    }
    *out = c;
    return 0;
}

int egpu_trace_request(struct egpu_cluster *c, const struct egpu_trace_pod *p,
                       struct egpu_pod_request *r, struct egpu_error *err)
{
    int rc;

    memset(r, 0, sizeof(*r));
    r->cpu_milli = p->cpu_milli;
    r->mem_mib = p->mem_mib;
    if (p->num_gpu > 0) {
        r->ncontainers = 1;
        r->containers[0].core_milli = p->gpu_milli;
        r->containers[0].ncards = p->num_gpu;
    }
    rc = egpu_cluster_model_mask(c, p->gpu_spec, &r->model_mask, err);
    if (rc)
        return egpu_error_prefix(err, rc, "pod %s", p->name);
    return 0;
}
