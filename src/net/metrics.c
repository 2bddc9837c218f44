/* net/metrics.c - a thread-safe Prometheus metrics registry: counters,
 * gauges and histograms with optional labels, rendered in the text
 * exposition format 0.0.4 (see egpu/net.h and
 * shared/k8s-wire/prometheus_notes.md).
 *
 * DESIGN: a registry is a list of families in registration order, guarded
 * by one mutex that registration and rendering take. Each family has its
 * own mutex guarding its children (one per combination of label values),
 * kept in a chained hash table keyed by the label values, so updates to
 * different families never contend and an update costs one hash, one
 * lookup and one lock. Rendering locks one family at a time and sorts its
 * children by label values, so the page is stable between scrapes.
 *
 * Histogram children keep per-bucket (not cumulative) counts as integers;
 * cumulative counts are summed at render time, so le="+Inf" always equals
 * _count exactly.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "egpu/net.h"

const double egpu_metric_default_buckets[EGPU_METRIC_DEFAULT_NBUCKETS] = {
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};

enum metric_type {
    TYPE_COUNTER,
    TYPE_GAUGE,
    TYPE_HISTOGRAM,
};

static const char *const type_names[] = {"counter", "gauge", "histogram"};

struct child {
    struct child *next; /* hash chain */
    uint64_t hash;
    char **values;    /* nlabels copies, then NULL */
    double value;     /* counter, gauge */
    uint64_t *counts; /* histogram: nbounds + 1 per-bucket counts, last = +Inf */
    double sum;       /* histogram */
    uint64_t count;   /* histogram */
};

struct egpu_metric {
    struct egpu_metric *next; /* registration order */
    enum metric_type type;
    char *name;
    char *help;
    size_t nlabels;
    char *labels[EGPU_METRIC_LABELS_MAX];
    size_t nbounds;
    double *bounds;
    pthread_mutex_t lock; /* guards everything below */
    struct child **table;
    size_t tsize; /* slots in table, a power of two */
    size_t nchildren;
};

struct egpu_metrics {
    pthread_mutex_t lock; /* guards the family list */
    struct egpu_metric *first;
    struct egpu_metric *last;
};

/* ------------------------------------------------------------------------ */
/* Children                                                                 */

static uint64_t hash_values(const char *const *values, size_t n)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */

    for (size_t i = 0; i < n; i++) {
        for (const unsigned char *p = (const unsigned char *)values[i]; *p; p++) {
            h ^= *p;
            h *= 1099511628211ULL;
        }
        h ^= 0xff; /* separator: ("ab","") differs from ("a","b") */
        h *= 1099511628211ULL;
    }
    return h;
}

static bool same_values(const struct child *c, const char *const *values, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(c->values[i], values[i]) != 0)
            return false;
    }
    return true;
}

static void child_free(struct child *c)
{
    if (c == NULL)
        return;
    if (c->values != NULL) {
        for (char **v = c->values; *v; v++)
            egpu_free(*v);
        egpu_free(c->values);
    }
    egpu_free(c->counts);
    egpu_free(c);
}

static struct child *child_new(const struct egpu_metric *m, const char *const *values,
                               uint64_t hash)
{
    struct child *c = egpu_calloc(1, sizeof(*c));

    if (c == NULL)
        return NULL;
    c->hash = hash;
    c->values = egpu_calloc(m->nlabels + 1, sizeof(*c->values));
    if (c->values == NULL)
        goto out_free;
    for (size_t i = 0; i < m->nlabels; i++) {
        c->values[i] = egpu_strdup(values[i]);
        if (c->values[i] == NULL)
            goto out_free;
    }
    if (m->type == TYPE_HISTOGRAM) {
        c->counts = egpu_calloc(m->nbounds + 1, sizeof(*c->counts));
        if (c->counts == NULL)
            goto out_free;
    }
    return c;

out_free:
    child_free(c);
    return NULL;
}

/* Double the hash table; on failure keep the old one (chains just grow). */
static void table_grow(struct egpu_metric *m)
{
    size_t tsize = m->tsize * 2;
    struct child **t = egpu_calloc(tsize, sizeof(*t));

    if (t == NULL)
        return;
    for (size_t i = 0; i < m->tsize; i++) {
        struct child *c = m->table[i], *next;

        for (; c != NULL; c = next) {
            next = c->next;
            c->next = t[c->hash & (tsize - 1)];
            t[c->hash & (tsize - 1)] = c;
        }
    }
    egpu_free(m->table);
    m->table = t;
    m->tsize = tsize;
}

/* The child for values, created when create is set. Call with m->lock held.
 * Returns 0 and writes *out, -ENOENT, EGPU_ELIMIT or -ENOMEM. */
static int child_get(struct egpu_metric *m, const char *const *values, bool create,
                     struct child **out)
{
    uint64_t h = hash_values(values, m->nlabels);
    struct child *c;

    for (c = m->table[h & (m->tsize - 1)]; c != NULL; c = c->next) {
        if (c->hash == h && same_values(c, values, m->nlabels)) {
            *out = c;
            return 0;
        }
    }
    if (!create)
        return -ENOENT;
    if (m->nchildren >= EGPU_METRIC_CHILDREN_MAX)
        return EGPU_ELIMIT;
    c = child_new(m, values, h);
    if (c == NULL)
        return -ENOMEM;
    if (m->nchildren >= m->tsize)
        table_grow(m);
    c->next = m->table[h & (m->tsize - 1)];
    m->table[h & (m->tsize - 1)] = c;
    m->nchildren++;
    *out = c;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Registration                                                             */

static bool is_metric_name(const char *s)
{
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_' || *s == ':'))
        return false;
    for (s++; *s; s++) {
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '_' || *s == ':'))
            return false;
    }
    return true;
}

static bool is_label_name(const char *s)
{
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_'))
        return false;
    if (s[0] == '_' && s[1] == '_')
        return false;
    for (s++; *s; s++) {
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '_'))
            return false;
    }
    return true;
}

static bool has_suffix(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);

    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* Does name hist followed by one of the histogram suffixes spell name? */
static bool is_histogram_series(const char *hist, const char *name)
{
    static const char *const suffixes[] = {"_bucket", "_sum", "_count"};
    size_t n = strlen(hist);

    if (strncmp(hist, name, n) != 0)
        return false;
    for (size_t i = 0; i < 3; i++) {
        if (strcmp(name + n, suffixes[i]) == 0)
            return true;
    }
    return false;
}

static bool same_shape(const struct egpu_metric *m, enum metric_type type, const char *help,
                       size_t nlabels, const char *const *labels, size_t nbounds,
                       const double *bounds)
{
    if (m->type != type || strcmp(m->help, help) != 0 || m->nlabels != nlabels ||
        m->nbounds != nbounds)
        return false;
    for (size_t i = 0; i < nlabels; i++) {
        if (strcmp(m->labels[i], labels[i]) != 0)
            return false;
    }
    for (size_t i = 0; i < nbounds; i++) {
        if (m->bounds[i] != bounds[i])
            return false;
    }
    return true;
}

static void family_free(struct egpu_metric *m)
{
    if (m == NULL)
        return;
    if (m->table != NULL) {
        for (size_t i = 0; i < m->tsize; i++) {
            struct child *c = m->table[i], *next;

            for (; c != NULL; c = next) {
                next = c->next;
                child_free(c);
            }
        }
        egpu_free(m->table);
        pthread_mutex_destroy(&m->lock);
    }
    for (size_t i = 0; i < m->nlabels; i++)
        egpu_free(m->labels[i]);
    egpu_free(m->bounds);
    egpu_free(m->help);
    egpu_free(m->name);
    egpu_free(m);
}

static struct egpu_metric *family_new(enum metric_type type, const char *name, const char *help,
                                      size_t nlabels, const char *const *labels, size_t nbounds,
                                      const double *bounds)
{
    struct egpu_metric *m = egpu_calloc(1, sizeof(*m));
    struct child *c;

    if (m == NULL)
        return NULL;
    m->type = type;
    m->name = egpu_strdup(name);
    m->help = egpu_strdup(help);
    if (m->name == NULL || m->help == NULL)
        goto out_free;
    for (; m->nlabels < nlabels; m->nlabels++) {
        m->labels[m->nlabels] = egpu_strdup(labels[m->nlabels]);
        if (m->labels[m->nlabels] == NULL)
            goto out_free;
    }
    if (nbounds > 0) {
        m->bounds = egpu_malloc(nbounds * sizeof(*m->bounds));
        if (m->bounds == NULL)
            goto out_free;
        memcpy(m->bounds, bounds, nbounds * sizeof(*m->bounds));
    }
    m->nbounds = nbounds;
    m->tsize = 16;
    m->table = egpu_calloc(m->tsize, sizeof(*m->table));
    if (m->table == NULL)
        goto out_free;
    if (pthread_mutex_init(&m->lock, NULL) != 0) {
        egpu_free(m->table);
        m->table = NULL;
        goto out_free;
    }
    /* A family without labels has its one sample from the start. */
    if (nlabels == 0 && child_get(m, NULL, true, &c) != 0)
        goto out_free;
    return m;

out_free:
    family_free(m);
    return NULL;
}

static int metric_register(struct egpu_metrics *reg, enum metric_type type, const char *name,
                           const char *help, size_t nlabels, const char *const *labels,
                           size_t nbounds, const double *bounds, struct egpu_metric **out)
{
    struct egpu_metric *m;
    int rc = 0;

    if (name == NULL || help == NULL || !is_metric_name(name) || (nlabels > 0 && labels == NULL))
        return -EINVAL;
    if (type == TYPE_COUNTER && !has_suffix(name, "_total"))
        return -EINVAL;
    if (nlabels > EGPU_METRIC_LABELS_MAX)
        return EGPU_ELIMIT;
    for (size_t i = 0; i < nlabels; i++) {
        if (labels[i] == NULL || !is_label_name(labels[i]))
            return -EINVAL;
        if (type == TYPE_HISTOGRAM && strcmp(labels[i], "le") == 0)
            return -EINVAL;
        for (size_t j = 0; j < i; j++) {
            if (strcmp(labels[i], labels[j]) == 0)
                return -EINVAL;
        }
    }
    if (nbounds > 0 && bounds == NULL)
        return -EINVAL;
    if (nbounds > 0 && isinf(bounds[nbounds - 1]) && bounds[nbounds - 1] > 0)
        nbounds--; /* +Inf is implied */
    if (nbounds > EGPU_METRIC_BUCKETS_MAX)
        return EGPU_ELIMIT;
    for (size_t i = 0; i < nbounds; i++) {
        if (!isfinite(bounds[i]) || (i > 0 && !(bounds[i] > bounds[i - 1])))
            return -EINVAL;
    }

    pthread_mutex_lock(&reg->lock);
    for (m = reg->first; m != NULL; m = m->next) {
        if (strcmp(m->name, name) == 0) {
            if (same_shape(m, type, help, nlabels, labels, nbounds, bounds))
                *out = m;
            else
                rc = -EEXIST;
            goto out_unlock;
        }
        if ((m->type == TYPE_HISTOGRAM && is_histogram_series(m->name, name)) ||
            (type == TYPE_HISTOGRAM && is_histogram_series(name, m->name))) {
            rc = -EEXIST;
            goto out_unlock;
        }
    }
    m = family_new(type, name, help, nlabels, labels, nbounds, bounds);
    if (m == NULL) {
        rc = -ENOMEM;
        goto out_unlock;
    }
    if (reg->last != NULL)
        reg->last->next = m;
    else
        reg->first = m;
    reg->last = m;
    *out = m;

out_unlock:
    pthread_mutex_unlock(&reg->lock);
    return rc;
}

int egpu_metric_counter(struct egpu_metrics *reg, const char *name, const char *help,
                        size_t nlabels, const char *const *labels, struct egpu_metric **out)
{
    return metric_register(reg, TYPE_COUNTER, name, help, nlabels, labels, 0, NULL, out);
}

int egpu_metric_gauge(struct egpu_metrics *reg, const char *name, const char *help, size_t nlabels,
                      const char *const *labels, struct egpu_metric **out)
{
    return metric_register(reg, TYPE_GAUGE, name, help, nlabels, labels, 0, NULL, out);
}

int egpu_metric_histogram(struct egpu_metrics *reg, const char *name, const char *help,
                          size_t nlabels, const char *const *labels, size_t nbounds,
                          const double *bounds, struct egpu_metric **out)
{
    return metric_register(reg, TYPE_HISTOGRAM, name, help, nlabels, labels, nbounds, bounds, out);
}

struct egpu_metrics *egpu_metrics_new(void)
{
    struct egpu_metrics *reg = egpu_calloc(1, sizeof(*reg));

    if (reg == NULL)
        return NULL;
    if (pthread_mutex_init(&reg->lock, NULL) != 0) {
        egpu_free(reg);
        return NULL;
    }
    return reg;
}

void egpu_metrics_free(struct egpu_metrics *reg)
{
    struct egpu_metric *m, *next;

    if (reg == NULL)
        return;
    for (m = reg->first; m != NULL; m = next) {
        next = m->next;
        family_free(m);
    }
    pthread_mutex_destroy(&reg->lock);
    egpu_free(reg);
}

/* ------------------------------------------------------------------------ */
/* Updates                                                                  */

enum op {
    OP_ADD,
    OP_SET,
    OP_OBSERVE,
};

static int update(struct egpu_metric *m, const char *const *values, enum op op, double v)
{
    struct child *c;
    size_t b;
    int rc;

    if (m == NULL || (m->nlabels > 0 && values == NULL))
        return -EINVAL;
    for (size_t i = 0; i < m->nlabels; i++) {
        if (values[i] == NULL)
            return -EINVAL;
    }
    switch (op) {
    case OP_ADD:
        if (m->type == TYPE_HISTOGRAM || isnan(v) || (m->type == TYPE_COUNTER && v < 0))
            return -EINVAL;
        break;
    case OP_SET:
        if (m->type != TYPE_GAUGE)
            return -EINVAL;
        break;
    case OP_OBSERVE:
        if (m->type != TYPE_HISTOGRAM)
            return -EINVAL;
        break;
    }
    pthread_mutex_lock(&m->lock);
    rc = child_get(m, values, true, &c);
    if (rc == 0) {
        switch (op) {
        case OP_ADD:
            c->value += v;
            break;
        case OP_SET:
            c->value = v;
            break;
        case OP_OBSERVE:
            for (b = 0; b < m->nbounds && !(v <= m->bounds[b]); b++)
                continue;
            c->counts[b]++;
            c->count++;
            c->sum += v;
            break;
        }
    }
    pthread_mutex_unlock(&m->lock);
    return rc;
}

int egpu_metric_inc(struct egpu_metric *m, const char *const *values)
{
    return update(m, values, OP_ADD, 1.0);
}

int egpu_metric_add(struct egpu_metric *m, const char *const *values, double v)
{
    return update(m, values, OP_ADD, v);
}

int egpu_metric_set(struct egpu_metric *m, const char *const *values, double v)
{
    return update(m, values, OP_SET, v);
}

int egpu_metric_observe(struct egpu_metric *m, const char *const *values, double v)
{
    return update(m, values, OP_OBSERVE, v);
}

int egpu_metric_get(struct egpu_metric *m, const char *const *values, double *out)
{
    struct child *c;
    int rc;

    if (m == NULL || (m->nlabels > 0 && values == NULL))
        return -EINVAL;
    for (size_t i = 0; i < m->nlabels; i++) {
        if (values[i] == NULL)
            return -EINVAL;
    }
    pthread_mutex_lock(&m->lock);
    rc = child_get(m, values, false, &c);
    if (rc == 0)
        *out = m->type == TYPE_HISTOGRAM ? (double)c->count : c->value;
    pthread_mutex_unlock(&m->lock);
    return rc;
}

size_t egpu_metric_retain(struct egpu_metric *m,
                          bool (*keep)(const char *const *values, void *data), void *data)
{
    size_t dropped = 0;

    if (m == NULL || m->nlabels == 0)
        return 0;
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < m->tsize; i++) {
        struct child **link = &m->table[i];

        while (*link != NULL) {
            struct child *c = *link;

            if (keep((const char *const *)c->values, data)) {
                link = &c->next;
                continue;
            }
            *link = c->next;
            child_free(c);
            m->nchildren--;
            dropped++;
        }
    }
    pthread_mutex_unlock(&m->lock);
    return dropped;
}

/* ------------------------------------------------------------------------ */
/* Rendering                                                                */

/* An output buffer whose first error sticks, so render code reads straight. */
struct out {
    struct egpu_buf *b;
    int rc;
};

static void put(struct out *o, const char *s, size_t n)
{
    if (o->rc == 0)
        o->rc = egpu_buf_append(o->b, s, n);
}

static void puts_(struct out *o, const char *s)
{
    put(o, s, strlen(s));
}

/* Copy s, escaping backslash and line feed, and the double quote when
 * quote is set (label values) but not otherwise (HELP text). */
static void put_escaped(struct out *o, const char *s, bool quote)
{
    const char *run = s;

    for (; *s; s++) {
        const char *esc = *s == '\\'             ? "\\\\"
                          : *s == '\n'           ? "\\n"
                          : (quote && *s == '"') ? "\\\""
                                                 : NULL;

        if (esc == NULL)
            continue;
        put(o, run, (size_t)(s - run));
        puts_(o, esc);
        run = s + 1;
    }
    put(o, run, (size_t)(s - run));
}

/* v as Go's ParseFloat reads it: the shortest %g form that reads back as
 * exactly v, or NaN, +Inf, -Inf. */
static void format_value(double v, char *buf, size_t len)
{
    if (isnan(v)) {
        snprintf(buf, len, "NaN");
        return;
    }
    if (isinf(v)) {
        snprintf(buf, len, "%s", v > 0 ? "+Inf" : "-Inf");
        return;
    }
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, len, "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            return;
    }
}

static void put_value(struct out *o, double v)
{
    char num[40];

    format_value(v, num, sizeof(num));
    puts_(o, num);
}

static void put_count(struct out *o, uint64_t n)
{
    char num[24];

    snprintf(num, sizeof(num), "%" PRIu64, n);
    puts_(o, num);
}

/* `{a="x",b="y"}` for c, with le="<le>" last when le is set; nothing when
 * there are neither labels nor le. */
static void put_labels(struct out *o, const struct egpu_metric *m, const struct child *c,
                       const char *le)
{
    if (m->nlabels == 0 && le == NULL)
        return;
    puts_(o, "{");
    for (size_t i = 0; i < m->nlabels; i++) {
        if (i > 0)
            puts_(o, ",");
        puts_(o, m->labels[i]);
        puts_(o, "=\"");
        put_escaped(o, c->values[i], true);
        puts_(o, "\"");
    }
    if (le != NULL) {
        puts_(o, m->nlabels ? ",le=\"" : "le=\"");
        puts_(o, le);
        puts_(o, "\"");
    }
    puts_(o, "}");
}

static void put_child(struct out *o, const struct egpu_metric *m, const struct child *c)
{
    uint64_t cum = 0;
    char le[40];

    if (m->type != TYPE_HISTOGRAM) {
        puts_(o, m->name);
        put_labels(o, m, c, NULL);
        puts_(o, " ");
        put_value(o, c->value);
        puts_(o, "\n");
        return;
    }
    for (size_t b = 0; b <= m->nbounds; b++) {
        cum += c->counts[b];
        if (b < m->nbounds)
            format_value(m->bounds[b], le, sizeof(le));
        else
            snprintf(le, sizeof(le), "+Inf");
        puts_(o, m->name);
        puts_(o, "_bucket");
        put_labels(o, m, c, le);
        puts_(o, " ");
        put_count(o, cum);
        puts_(o, "\n");
    }
    puts_(o, m->name);
    puts_(o, "_sum");
    put_labels(o, m, c, NULL);
    puts_(o, " ");
    put_value(o, c->sum);
    puts_(o, "\n");
    puts_(o, m->name);
    puts_(o, "_count");
    put_labels(o, m, c, NULL);
    puts_(o, " ");
    put_count(o, c->count);
    puts_(o, "\n");
}

static int compare_children(const void *a, const void *b)
{
    char *const *va = (*(const struct child *const *)a)->values;
    char *const *vb = (*(const struct child *const *)b)->values;

    for (; *va != NULL && *vb != NULL; va++, vb++) {
        int d = strcmp(*va, *vb);

        if (d != 0)
            return d;
    }
    return 0;
}

static void put_family(struct out *o, struct egpu_metric *m)
{
    struct child **sorted;
    size_t n = 0;

    if (m->help[0] != '\0') {
        puts_(o, "# HELP ");
        puts_(o, m->name);
        puts_(o, " ");
        put_escaped(o, m->help, false);
        puts_(o, "\n");
    }
    puts_(o, "# TYPE ");
    puts_(o, m->name);
    puts_(o, " ");
    puts_(o, type_names[m->type]);
    puts_(o, "\n");

    pthread_mutex_lock(&m->lock);
    sorted = egpu_malloc((m->nchildren ? m->nchildren : 1) * sizeof(*sorted));
    if (sorted == NULL) {
        pthread_mutex_unlock(&m->lock);
        if (o->rc == 0)
            o->rc = -ENOMEM;
        return;
    }
    for (size_t i = 0; i < m->tsize; i++) {
        for (struct child *c = m->table[i]; c != NULL; c = c->next)
            sorted[n++] = c;
    }
    qsort(sorted, n, sizeof(*sorted), compare_children);
    for (size_t i = 0; i < n && o->rc == 0; i++)
        put_child(o, m, sorted[i]);
    pthread_mutex_unlock(&m->lock);
    egpu_free(sorted);
}

int egpu_metrics_render(struct egpu_metrics *reg, struct egpu_buf *out)
{
    struct out o = {.b = out, .rc = 0};
    size_t start = out->len;

    pthread_mutex_lock(&reg->lock);
    for (struct egpu_metric *m = reg->first; m != NULL && o.rc == 0; m = m->next)
        put_family(&o, m);
    pthread_mutex_unlock(&reg->lock);
    if (o.rc != 0) {
        out->len = start;
        if (out->data != NULL)
            out->data[start] = '\0';
    }
    return o.rc;
}
