/* api/class.c - ElasticGPUClass, and the label selectors its nodeSelector
 * parameter holds.
 *
 * A class is to ElasticGPUs what a StorageClass is to volumes: fields at the
 * top level (provisioner, parameters, reclaimPolicy, bindingMode, defaults
 * Delete and Immediate as StorageClass's), and the class of claims that name
 * none marked by the annotation elasticgpu.io/is-default-class: "true".
 * parameters is a map of strings; the keys are ours and fixed, so a typo is
 * an error rather than a silently ignored setting:
 *   models:          "A|B", card models the class may use (GPU spec.model)
 *   nodeSelector:    a label selector on nodes, kubectl's text form
 *   policy:          a policy name, EGPU_POLICY_NAMES (both tiers)
 *   tflops.<model>:  "<peak TFLOPS>" of that model, digits with up to 3
 *                    decimals, for claims that ask elasticgpu.io/gpu-tflops
 * A model in models or tflops.<model> names a GPU object's spec.model
 * exactly, or with its leading "NVIDIA " left out ("A100-SXM4-80GB").
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "objects_int.h"

#define PEAK_PREFIX    "tflops."
#define PARAMS_ALLOWED "allowed: models, nodeSelector, policy, tflops.<model>"
#define POLICY_ALLOWED "allowed: " EGPU_POLICY_NAMES
#define MODELS_EXAMPLE "e.g. \"NVIDIA A100-SXM4-80GB|NVIDIA H100\""
#define SELECTOR_GRAMMAR                                                                     \
    "allowed: a label selector such as \"zone=a,pool in (x,y)\": requirements separated by " \
    "commas, each key, !key, key=value, key!=value, key in (v1,v2) or key notin (v1,v2)"

/* ------------------------------------------------------------------------ */
/* Label selectors                                                           */

static bool key_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-' || c == '/';
}

static const char *skip_spaces(const char *p)
{
    while (*p == ' ' || *p == '\t')
        p++;
    return p;
}

/* A run of key (slash: also '/') characters into buf; NULL when too long
 * (or empty when !empty_ok). */
static const char *word(const char *p, bool slash, bool empty_ok, char *buf, size_t len)
{
    size_t n = 0;

    while (key_char(p[n]) && (slash || p[n] != '/'))
        n++;
    if (n >= len || (n == 0 && !empty_ok))
        return NULL;
    memcpy(buf, p, n);
    buf[n] = '\0';
    return p + n;
}

/* Is p the word w, followed by a space or '('? */
static bool is_op(const char *p, const char *w)
{
    size_t n = strlen(w);

    return strncmp(p, w, n) == 0 && (p[n] == ' ' || p[n] == '\t' || p[n] == '(');
}

static const char *value_set(const char *p, struct egpu_api_selector_req *r)
{
    p = skip_spaces(p);
    if (*p++ != '(')
        return NULL;
    for (;;) {
        if (r->nvalues == EGPU_API_SELECTOR_VALUES_MAX)
            return NULL;
        p = word(skip_spaces(p), false, false, r->values[r->nvalues++], EGPU_API_LABEL_VALUE_MAX);
        if (p == NULL)
            return NULL;
        p = skip_spaces(p);
        if (*p == ')')
            return p + 1;
        if (*p++ != ',')
            return NULL;
    }
}

static const char *requirement(const char *p, struct egpu_api_selector_req *r)
{
    p = skip_spaces(p);
    if (*p == '!') {
        r->op = EGPU_API_SEL_ABSENT;
        return word(skip_spaces(p + 1), true, false, r->key, sizeof(r->key));
    }
    p = word(p, true, false, r->key, sizeof(r->key));
    if (p == NULL)
        return NULL;
    p = skip_spaces(p);
    if (p[0] == '=' || (p[0] == '!' && p[1] == '=')) {
        r->op = p[0] == '=' ? EGPU_API_SEL_EQ : EGPU_API_SEL_NE;
        p += p[0] == '!' || p[1] == '=' ? 2 : 1;
        r->nvalues = 1;
        return word(skip_spaces(p), false, true, r->values[0], EGPU_API_LABEL_VALUE_MAX);
    }
    if (is_op(p, "in") || is_op(p, "notin")) {
        r->op = p[0] == 'i' ? EGPU_API_SEL_IN : EGPU_API_SEL_NOTIN;
        return value_set(p + (p[0] == 'i' ? 2 : 5), r);
    }
    r->op = EGPU_API_SEL_EXISTS;
    return p;
}

int egpu_api_selector_parse(const char *text, const char *field, struct egpu_api_selector *out,
                            struct egpu_error *err)
{
    struct egpu_api_selector s;
    const char *p = skip_spaces(text);

    memset(&s, 0, sizeof(s));
    while (*p != '\0') {
        if (s.nreqs == EGPU_API_SELECTOR_REQS_MAX)
            return egpu_error_set(err, EGPU_ERANGE,
                                  "%s is \"%.128s\"; allowed: at most %d requirements", field, text,
                                  EGPU_API_SELECTOR_REQS_MAX);
        p = requirement(p, &s.reqs[s.nreqs++]);
        if (p != NULL) {
            p = skip_spaces(p);
            if (*p == ',' && *skip_spaces(p + 1) != '\0')
                p++;
            else if (*p != '\0')
                p = NULL;
        }
        if (p == NULL)
            return egpu_error_set(err, EGPU_ERANGE,
                                  "%s is \"%.128s\"; " SELECTOR_GRAMMAR
                                  " (keys of at most 317 and values of at most 63 characters "
                                  "A-Z a-z 0-9 . _ -, up to 8 values in a set)",
                                  field, text);
    }
    memcpy(out, &s, sizeof(s));
    return 0;
}

size_t egpu_api_selector_format(const struct egpu_api_selector *sel, char *buf, size_t len)
{
    static const char *const ops[] = {"=", "!=", " in (", " notin ("};
    size_t used = 0;
    int n;

    if (len > 0)
        buf[0] = '\0';
    for (uint32_t i = 0; i < sel->nreqs; i++) {
        const struct egpu_api_selector_req *r = &sel->reqs[i];
        const char *sep = i ? "," : "";

#define EMIT(...)                                                                               \
    do {                                                                                        \
        n = snprintf(used < len ? buf + used : NULL, used < len ? len - used : 0, __VA_ARGS__); \
        used += n > 0 ? (size_t)n : 0;                                                          \
    } while (0)
        if (r->op == EGPU_API_SEL_EXISTS) {
            EMIT("%s%s", sep, r->key);
        } else if (r->op == EGPU_API_SEL_ABSENT) {
            EMIT("%s!%s", sep, r->key);
        } else {
            EMIT("%s%s%s", sep, r->key, ops[r->op]);
            for (uint32_t v = 0; v < r->nvalues; v++)
                EMIT("%s%s", v ? "," : "", r->values[v]);
            if (r->op == EGPU_API_SEL_IN || r->op == EGPU_API_SEL_NOTIN)
                EMIT(")");
        }
#undef EMIT
    }
    return used;
}

static const char *json_label(const void *labels, const char *key)
{
    return egpu_api_str(json_object_get(labels, key));
}

bool egpu_api_selector_matches(const struct egpu_api_selector *sel, const json_t *labels)
{
    return egpu_api_selector_matches_fn(sel, json_label, labels);
}

bool egpu_api_selector_matches_fn(const struct egpu_api_selector *sel, egpu_api_label_fn label,
                                  const void *ud)
{
    for (uint32_t i = 0; i < sel->nreqs; i++) {
        const struct egpu_api_selector_req *r = &sel->reqs[i];
        const char *have = label(ud, r->key);
        bool in = false;

        for (uint32_t v = 0; have != NULL && v < r->nvalues; v++)
            in = in || strcmp(have, r->values[v]) == 0;
        switch (r->op) {
        case EGPU_API_SEL_EQ:
        case EGPU_API_SEL_IN:
            if (!in)
                return false;
            break;
        case EGPU_API_SEL_NE:
        case EGPU_API_SEL_NOTIN:
            if (in)
                return false;
            break;
        case EGPU_API_SEL_EXISTS:
            if (have == NULL)
                return false;
            break;
        case EGPU_API_SEL_ABSENT:
            if (have != NULL)
                return false;
            break;
        }
    }
    return true;
}

/* ------------------------------------------------------------------------ */
/* Models                                                                    */

/* Does want (wlen bytes) name model, exactly or without "NVIDIA "? */
static bool model_is(const char *want, size_t wlen, const char *model)
{
    if (strlen(model) == wlen && memcmp(model, want, wlen) == 0)
        return true;
    return strncmp(model, "NVIDIA ", 7) == 0 && strlen(model + 7) == wlen &&
           memcmp(model + 7, want, wlen) == 0;
}

bool egpu_api_class_allows_model(const struct egpu_api_class *c, const char *model)
{
    const char *p = c->models;

    if (p[0] == '\0')
        return true;
    if (model == NULL)
        return false;
    for (;;) {
        const char *bar = strchr(p, '|');
        size_t len = bar != NULL ? (size_t)(bar - p) : strlen(p);

        if (model_is(p, len, model))
            return true;
        if (bar == NULL)
            return false;
        p = bar + 1;
    }
}

int64_t egpu_api_class_peak(const struct egpu_api_class *c, const char *model)
{
    if (model == NULL)
        return 0;
    /* An exact name wins over one matched without "NVIDIA ". */
    for (uint32_t i = 0; i < c->npeaks; i++) {
        if (strcmp(c->peaks[i].model, model) == 0)
            return c->peaks[i].tflops_milli;
    }
    for (uint32_t i = 0; i < c->npeaks; i++) {
        if (model_is(c->peaks[i].model, strlen(c->peaks[i].model), model))
            return c->peaks[i].tflops_milli;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* The class                                                                 */

/* "312", "19.5": 1..7 digits, up to 3 decimals, above 0, at most 10^6. */
static bool peak_parse(const char *s, int64_t *milli)
{
    int64_t whole = 0, frac = 0;
    size_t n = 0, d = 0;

    while (s[n] >= '0' && s[n] <= '9' && n < 8)
        whole = whole * 10 + (s[n++] - '0');
    if (n == 0 || n > 7)
        return false;
    if (s[n] == '.') {
        n++;
        while (s[n] >= '0' && s[n] <= '9' && d < 4) {
            frac = frac * 10 + (s[n++] - '0');
            d++;
        }
        if (d == 0 || d > 3)
            return false;
        for (size_t k = d; k < 3; k++)
            frac *= 10;
    }
    if (s[n] != '\0')
        return false;
    *milli = whole * 1000 + frac;
    return *milli > 0 && *milli <= 1000LL * EGPU_API_TFLOPS_MAX;
}

static int models_check(const char *s, struct egpu_error *err)
{
    const char *p = s;

    if (s[0] == '\0')
        return 0;
    for (;;) {
        const char *bar = strchr(p, '|');
        size_t len = bar != NULL ? (size_t)(bar - p) : strlen(p);

        if (len == 0)
            return egpu_error_set(err, EGPU_ERANGE,
                                  "parameters.models is \"%s\"; allowed: card models separated "
                                  "by |, none empty, " MODELS_EXAMPLE,
                                  s);
        if (bar == NULL)
            return 0;
        p = bar + 1;
    }
}

static int param(struct egpu_api_class *c, const char *key, const char *v, struct egpu_error *err)
{
    struct egpu_error perr = {0};

    if (strcmp(key, "models") == 0) {
        if (strlen(v) >= sizeof(c->models))
            return egpu_error_set(
                err, EGPU_ERANGE,
                "parameters.models is %zu bytes long; allowed: at most %zu, " MODELS_EXAMPLE,
                strlen(v), sizeof(c->models) - 1);
        memcpy(c->models, v, strlen(v) + 1);
        return models_check(v, err);
    }
    if (strcmp(key, "nodeSelector") == 0) {
        char canon[8192];
        int rc = egpu_api_selector_parse(v, "parameters.nodeSelector", &c->node_selector, err);

        if (rc)
            return rc;
        /* Its canonical form (what the encoder writes) must fit too. */
        if (egpu_api_selector_format(&c->node_selector, canon, sizeof(canon)) >=
            EGPU_API_PARAM_VALUE_MAX)
            return egpu_error_set(err, EGPU_ERANGE,
                                  "parameters.nodeSelector is \"%.128s...\"; allowed: at most "
                                  "%d bytes, also when written as \"key in (a,b)\"",
                                  v, EGPU_API_PARAM_VALUE_MAX - 1);
        c->has_node_selector = true;
        return 0;
    }
    if (strcmp(key, "policy") == 0) {
        if (egpu_policy_parse(v, &c->policy, &perr) != 0)
            return egpu_error_set(err, EGPU_ERANGE,
                                  "parameters.policy is \"%.64s\"; " POLICY_ALLOWED, v);
        c->has_policy = true;
        return 0;
    }
    if (strncmp(key, PEAK_PREFIX, strlen(PEAK_PREFIX)) == 0 && key[strlen(PEAK_PREFIX)] != '\0') {
        const char *model = key + strlen(PEAK_PREFIX);
        struct egpu_api_class_peak *pk;

        if (c->npeaks == EGPU_API_CLASS_TFLOPS_MAX)
            return egpu_error_set(err, EGPU_ERANGE,
                                  "parameters has more than %d tflops.<model> entries; allowed: "
                                  "at most %d",
                                  EGPU_API_CLASS_TFLOPS_MAX, EGPU_API_CLASS_TFLOPS_MAX);
        if (strlen(model) >= sizeof(pk->model))
            return egpu_error_set(err, EGPU_ERANGE,
                                  "parameters has tflops.<model> with a model of %zu bytes; "
                                  "allowed: at most %zu",
                                  strlen(model), sizeof(pk->model) - 1);
        pk = &c->peaks[c->npeaks];
        if (!peak_parse(v, &pk->tflops_milli))
            return egpu_error_set(err, EGPU_ERANGE,
                                  "parameters[\"%s\"] is \"%.64s\"; allowed: the card's peak "
                                  "TFLOPS, digits with up to 3 decimals, above 0 and at most "
                                  "1000000, e.g. \"312\" or \"19.5\"",
                                  key, v);
        memcpy(pk->model, model, strlen(model) + 1);
        c->npeaks++;
        return 0;
    }
    return egpu_error_set(err, EGPU_ERANGE, "parameters has \"%.128s\"; " PARAMS_ALLOWED, key);
}

static int params_decode(const json_t *obj, struct egpu_api_class *c, struct egpu_error *err)
{
    const json_t *params, *v;
    const char *key;
    int rc;

    rc = egpu__api_object(obj, "parameters", "parameters", false, &params, err);
    if (rc || params == NULL)
        return rc;
    json_object_foreach((json_t *)params, key, v)
    {
        const char *s = egpu_api_str(v);
        char t[64];

        if (s == NULL)
            return egpu_error_set(err, EGPU_ESYNTAX, "parameters[\"%.128s\"] is %s; allowed: text",
                                  key, egpu__api_json_text(v, t, sizeof(t)));
        if (strlen(s) >= EGPU_API_PARAM_VALUE_MAX)
            return egpu_error_set(err, EGPU_ESYNTAX,
                                  "parameters[\"%.128s\"] is %zu bytes long; allowed: at most %d",
                                  key, strlen(s), EGPU_API_PARAM_VALUE_MAX - 1);
        rc = param(c, key, s, err);
        if (rc)
            return rc;
    }
    return 0;
}

int egpu_api_class_decode(const json_t *obj, struct egpu_api_class *out, struct egpu_error *err)
{
    struct egpu_api_class *c = egpu_calloc(1, sizeof(*c));
    const json_t *ann = NULL;
    int v = 0;
    bool has;
    int rc;

    if (c == NULL)
        return egpu_error_set(err, -ENOMEM, "ElasticGPUClass: out of memory");
    rc = egpu__api_check_kind(obj, EGPU_KIND_ELASTICGPUCLASS, err);
    if (!rc)
        rc = egpu__api_meta_decode(obj, false, &c->meta, err);
    if (!rc)
        rc = egpu__api_object(json_object_get(obj, "metadata"), "annotations",
                              "metadata.annotations", false, &ann, err);
    if (!rc) {
        const char *d = egpu_api_str(json_object_get(ann, EGPU_ANN_DEFAULT_CLASS));

        c->is_default = d != NULL && strcmp(d, "true") == 0;
        rc = egpu__api_enum(obj, "provisioner", "provisioner", egpu__api_provisioner_names, 2, &v,
                            NULL, err);
    }
    if (!rc) {
        c->provisioner = (enum egpu_api_provisioner)v;
        v = 0;
        rc = egpu__api_enum(obj, "reclaimPolicy", "reclaimPolicy", egpu__api_reclaim_names, 2, &v,
                            &has, err);
    }
    if (!rc) {
        c->reclaim_policy = (enum egpu_api_reclaim)v;
        v = 0;
        rc = egpu__api_enum(obj, "bindingMode", "bindingMode", egpu__api_binding_names, 2, &v, &has,
                            err);
    }
    if (!rc) {
        c->binding_mode = (enum egpu_api_binding_mode)v;
        rc = params_decode(obj, c, err);
    }
    if (!rc)
        memcpy(out, c, sizeof(*c));
    egpu_free(c);
    return rc;
}

json_t *egpu_api_class_encode(const struct egpu_api_class *c)
{
    json_t *o = egpu__api_object_new(EGPU_KIND_ELASTICGPUCLASS, &c->meta);
    json_t *params = NULL, *ann = NULL;
    bool ok;

    if (o == NULL)
        return NULL;
    ok = (!c->is_default ||
          (egpu__api_set(json_object_get(o, "metadata"), "annotations", ann = json_object()) &&
           egpu__api_set(ann, EGPU_ANN_DEFAULT_CLASS, json_string("true")))) &&
         egpu__api_set(o, "provisioner", json_string(egpu_api_provisioner_name(c->provisioner)));
    if (ok && (c->models[0] != '\0' || c->has_node_selector || c->has_policy || c->npeaks > 0)) {
        ok = egpu__api_set(o, "parameters", params = json_object()) &&
             egpu__api_set_text(params, "models", c->models);
        if (ok && c->has_node_selector) {
            char text[EGPU_API_PARAM_VALUE_MAX];

            (void)egpu_api_selector_format(&c->node_selector, text, sizeof(text));
            ok = egpu__api_set(params, "nodeSelector", json_string(text));
        }
        if (ok && c->has_policy)
            ok = egpu__api_set(params, "policy", json_string(egpu_policy_name(c->policy)));
        for (uint32_t i = 0; ok && i < c->npeaks; i++) {
            char key[sizeof(PEAK_PREFIX) + EGPU_MODEL_MAX], val[32];

            snprintf(key, sizeof(key), PEAK_PREFIX "%s", c->peaks[i].model);
            ok = egpu__api_set(
                params, key,
                json_string(egpu__api_milli_text(c->peaks[i].tflops_milli, val, sizeof(val))));
        }
    }
    ok = ok &&
         egpu__api_set(o, "reclaimPolicy", json_string(egpu_api_reclaim_name(c->reclaim_policy))) &&
         egpu__api_set(o, "bindingMode", json_string(egpu_api_binding_mode_name(c->binding_mode)));
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

bool egpu_api_class_serves(const struct egpu_api_class *k, const char *class_name,
                           const struct egpu_api_class *best)
{
    if (class_name[0] != '\0' ? strcmp(k->meta.name, class_name) != 0 : !k->is_default)
        return false;
    return best == NULL || strcmp(k->meta.name, best->meta.name) < 0;
}

const char *egpu_api_class_missing(const char *class_name, char *buf, size_t len)
{
    if (class_name[0] != '\0')
        snprintf(buf, len, "ElasticGPUClass \"%s\" not found", class_name);
    else
        snprintf(buf, len,
                 "no ElasticGPUClass is named and none is the default "
                 "(annotation " EGPU_ANN_DEFAULT_CLASS ": \"true\")");
    return buf;
}
