/* api/objects.c - what the claim model's three objects share: typed readers
 * of one field, metadata, conditions, and the names of the enums.
 *
 * Each reader names the field by its path in the manifest (spec.nodeName,
 * status.conditions[1].reason), the value it found and what is allowed, so
 * the controller can put the message in an event as it stands. Limits are the
 * CRDs' (deploy/crds): what the API server lets through, these let through,
 * and the other way round (tests/integration/test_crds.py).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "objects_int.h"

const char *const egpu__api_reclaim_names[2] = {"Delete", "Retain"};
const char *const egpu__api_binding_names[2] = {"Immediate", "WaitForFirstConsumer"};
const char *const egpu__api_provisioner_names[2] = {EGPU_PROVISIONER_GPUSHARE,
                                                    EGPU_PROVISIONER_PHYSICAL};
static const char *const cond_status_names[3] = {"True", "False", "Unknown"};

const char *egpu_api_cond_status_name(enum egpu_api_cond_status s)
{
    return (unsigned)s < 3 ? cond_status_names[s] : "Unknown";
}

bool egpu_api_condition_set(struct egpu_api_condition *conds, uint32_t *n, const char *type,
                            enum egpu_api_cond_status status, const char *reason,
                            const char *message, int64_t generation, const char *now)
{
    struct egpu_api_condition *k = NULL;

    for (uint32_t i = 0; i < *n; i++) {
        if (strcmp(conds[i].type, type) == 0)
            k = &conds[i];
    }
    if (k != NULL && k->status == status && k->observed_generation == generation &&
        strcmp(k->reason, reason) == 0 && strncmp(k->message, message, sizeof(k->message) - 1) == 0)
        return false;
    if (k == NULL) {
        if (*n == EGPU_API_CONDITIONS_MAX)
            (*n)--; /* drop the last one; the caller's matters more */
        k = &conds[(*n)++];
        memset(k, 0, sizeof(*k));
        snprintf(k->type, sizeof(k->type), "%s", type);
    }
    if (k->status != status || k->last_transition_time[0] == '\0')
        snprintf(k->last_transition_time, sizeof(k->last_transition_time), "%s", now);
    k->status = status;
    k->observed_generation = generation;
    snprintf(k->reason, sizeof(k->reason), "%s", reason);
    snprintf(k->message, sizeof(k->message), "%s", message);
    return true;
}

const char *egpu_api_provisioner_name(enum egpu_api_provisioner p)
{
    return (unsigned)p < 2 ? egpu__api_provisioner_names[p] : "unknown";
}

const char *egpu_api_reclaim_name(enum egpu_api_reclaim r)
{
    return (unsigned)r < 2 ? egpu__api_reclaim_names[r] : "unknown";
}

const char *egpu_api_binding_mode_name(enum egpu_api_binding_mode m)
{
    return (unsigned)m < 2 ? egpu__api_binding_names[m] : "unknown";
}

bool egpu_api_meta_has_finalizer(const struct egpu_api_meta *meta, const char *name)
{
    for (uint32_t i = 0; i < meta->nfinalizers; i++) {
        if (strcmp(meta->finalizers[i], name) == 0)
            return true;
    }
    return false;
}

const char *egpu__api_json_text(const json_t *v, char *buf, size_t len)
{
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);

    if (s == NULL) {
        snprintf(buf, len, "(unprintable)");
        return buf;
    }
    if (strlen(s) < len)
        snprintf(buf, len, "%s", s);
    else
        snprintf(buf, len, "%.*s...", (int)(len > 4 ? len - 4 : 0), s);
    free(s);
    return buf;
}

void egpu__api_copy(char *buf, size_t len, const char *s)
{
    size_t n = strlen(s);

    if (n >= len)
        n = len - 1;
    memcpy(buf, s, n);
    buf[n] = '\0';
}

const char *egpu__api_milli_text(int64_t milli, char *buf, size_t len)
{
    int64_t whole = milli / 1000, frac = milli % 1000;

    if (frac < 0)
        frac = -frac;
    if (frac == 0)
        snprintf(buf, len, "%" PRId64, whole);
    else if (frac % 100 == 0)
        snprintf(buf, len, "%" PRId64 ".%" PRId64, whole, frac / 100);
    else if (frac % 10 == 0)
        snprintf(buf, len, "%" PRId64 ".%02" PRId64, whole, frac / 10);
    else
        snprintf(buf, len, "%" PRId64 ".%03" PRId64, whole, frac);
    return buf;
}

int egpu__api_object(const json_t *o, const char *key, const char *path, bool required,
                     const json_t **out, struct egpu_error *err)
{
    const json_t *v = json_object_get(o, key);

    *out = NULL;
    if (v == NULL || json_is_null(v)) {
        if (required)
            return egpu_error_set(err, EGPU_ESYNTAX, "%s is missing", path);
        return 0;
    }
    if (!json_is_object(v)) {
        char t[64];

        return egpu_error_set(err, EGPU_ESYNTAX, "%s is %s; allowed: an object", path,
                              egpu__api_json_text(v, t, sizeof(t)));
    }
    *out = v;
    return 0;
}

int egpu__api_text(const json_t *o, const char *key, const char *path, bool required, bool nonempty,
                   char *buf, size_t len, struct egpu_error *err)
{
    const json_t *v = json_object_get(o, key);
    const char *s;
    char t[64];

    buf[0] = '\0';
    if (v == NULL || json_is_null(v)) {
        if (required)
            return egpu_error_set(err, EGPU_ESYNTAX, "%s is missing", path);
        return 0;
    }
    s = egpu_api_str(v);
    if (s == NULL)
        return egpu_error_set(err, EGPU_ESYNTAX, "%s is %s; allowed: text", path,
                              egpu__api_json_text(v, t, sizeof(t)));
    if (nonempty && s[0] == '\0')
        return egpu_error_set(err, EGPU_ESYNTAX, "%s is \"\"; allowed: non-empty text", path);
    if (strlen(s) >= len)
        return egpu_error_set(err, EGPU_ESYNTAX, "%s is %zu bytes long; allowed: at most %zu", path,
                              strlen(s), len - 1);
    memcpy(buf, s, strlen(s) + 1);
    return 0;
}

int egpu__api_int(const json_t *o, const char *key, const char *path, int64_t min, int64_t max,
                  const char *allowed, int64_t *out, bool *has, struct egpu_error *err)
{
    const json_t *v = json_object_get(o, key);
    char t[64], range[96];
    int64_t x;

    if (has != NULL)
        *has = false;
    if (v == NULL || json_is_null(v)) {
        if (has == NULL)
            return egpu_error_set(err, EGPU_ESYNTAX, "%s is missing", path);
        return 0;
    }
    if (allowed == NULL) {
        if (max == INT64_MAX)
            snprintf(range, sizeof(range), "allowed: a whole number from %" PRId64, min);
        else
            snprintf(range, sizeof(range), "allowed: a whole number %" PRId64 "..%" PRId64, min,
                     max);
        allowed = range;
    }
    if (!json_is_integer(v))
        return egpu_error_set(err, EGPU_ESYNTAX, "%s is %s; %s", path,
                              egpu__api_json_text(v, t, sizeof(t)), allowed);
    x = (int64_t)json_integer_value(v);
    if (x < min || x > max)
        return egpu_error_set(err, EGPU_ERANGE, "%s is %" PRId64 "; %s", path, x, allowed);
    *out = x;
    if (has != NULL)
        *has = true;
    return 0;
}

int egpu__api_enum(const json_t *o, const char *key, const char *path, const char *const *names,
                   size_t n, int *out, bool *has, struct egpu_error *err)
{
    const json_t *v = json_object_get(o, key);
    char allowed[256], t[64];
    size_t used = 0;
    const char *s;

    if (has != NULL)
        *has = false;
    if (v == NULL || json_is_null(v)) {
        if (has == NULL)
            return egpu_error_set(err, EGPU_ESYNTAX, "%s is missing", path);
        return 0;
    }
    s = egpu_api_str(v);
    for (size_t i = 0; s != NULL && i < n; i++) {
        if (strcmp(s, names[i]) == 0) {
            *out = (int)i;
            if (has != NULL)
                *has = true;
            return 0;
        }
    }
    allowed[0] = '\0';
    for (size_t i = 0; i < n && used < sizeof(allowed); i++)
        used += (size_t)snprintf(allowed + used, sizeof(allowed) - used, "%s%s", i ? ", " : "",
                                 names[i]);
    return egpu_error_set(err, s != NULL ? EGPU_ERANGE : EGPU_ESYNTAX, "%s is %s; allowed: %s",
                          path, egpu__api_json_text(v, t, sizeof(t)), allowed);
}

int egpu__api_check_kind(const json_t *obj, const char *kind, struct egpu_error *err)
{
    const char *names[1];
    int idx;
    bool has;
    int rc;

    if (!json_is_object(obj))
        return egpu_error_set(err, EGPU_ESYNTAX, "%s: the object must be a JSON object", kind);
    names[0] = EGPU_API_VERSION;
    rc = egpu__api_enum(obj, "apiVersion", "apiVersion", names, 1, &idx, &has, err);
    if (rc)
        return rc;
    names[0] = kind;
    return egpu__api_enum(obj, "kind", "kind", names, 1, &idx, &has, err);
}

int egpu__api_meta_decode(const json_t *obj, bool namespaced, struct egpu_api_meta *m,
                          struct egpu_error *err)
{
    const json_t *md, *fin, *f;
    bool has;
    size_t i;
    int rc;

    rc = egpu__api_object(obj, "metadata", "metadata", true, &md, err);
    if (!rc)
        rc = egpu__api_text(md, "name", "metadata.name", true, true, m->name, sizeof(m->name), err);
    if (!rc && namespaced)
        rc = egpu__api_text(md, "namespace", "metadata.namespace", true, true, m->ns, sizeof(m->ns),
                            err);
    if (!rc)
        rc = egpu__api_text(md, "uid", "metadata.uid", false, false, m->uid, sizeof(m->uid), err);
    if (!rc)
        rc = egpu__api_text(md, "resourceVersion", "metadata.resourceVersion", false, false,
                            m->resource_version, sizeof(m->resource_version), err);
    if (!rc)
        rc = egpu__api_int(md, "generation", "metadata.generation", 0, INT64_MAX, NULL,
                           &m->generation, &has, err);
    if (!rc)
        rc = egpu__api_text(md, "deletionTimestamp", "metadata.deletionTimestamp", false, false,
                            m->deletion_timestamp, sizeof(m->deletion_timestamp), err);
    if (rc)
        return rc;
    fin = json_object_get(md, "finalizers");
    if (fin == NULL || json_is_null(fin))
        return 0;
    if (!json_is_array(fin))
        return egpu_error_set(err, EGPU_ESYNTAX, "metadata.finalizers must be a list of names");
    if (json_array_size(fin) > EGPU_API_FINALIZERS_MAX)
        return egpu_error_set(err, EGPU_ESYNTAX,
                              "metadata.finalizers has %zu names; allowed: at most %d",
                              json_array_size(fin), EGPU_API_FINALIZERS_MAX);
    json_array_foreach(fin, i, f)
    {
        const char *s = egpu_api_str(f);

        if (s == NULL || s[0] == '\0' || strlen(s) >= EGPU_API_FINALIZER_MAX)
            return egpu_error_set(err, EGPU_ESYNTAX,
                                  "metadata.finalizers[%zu] must be a name of 1..%d bytes", i,
                                  EGPU_API_FINALIZER_MAX - 1);
        memcpy(m->finalizers[m->nfinalizers++], s, strlen(s) + 1);
    }
    return 0;
}

bool egpu__api_set(json_t *o, const char *key, json_t *v)
{
    return v != NULL && json_object_set_new(o, key, v) == 0;
}

bool egpu__api_set_text(json_t *o, const char *key, const char *s)
{
    return s[0] == '\0' || egpu__api_set(o, key, json_string(s));
}

json_t *egpu__api_object_new(const char *kind, const struct egpu_api_meta *m)
{
    json_t *o = json_object(), *md = json_object(), *fin;
    bool ok;

    if (o == NULL || md == NULL) {
        json_decref(o);
        json_decref(md);
        return NULL;
    }
    if (!egpu__api_set(o, "apiVersion", json_string(EGPU_API_VERSION)) ||
        !egpu__api_set(o, "kind", json_string(kind))) {
        json_decref(o);
        json_decref(md);
        return NULL;
    }
    /* From here o owns md, whatever fails next. */
    ok = egpu__api_set(o, "metadata", md) && egpu__api_set_text(md, "name", m->name) &&
         egpu__api_set_text(md, "namespace", m->ns) && egpu__api_set_text(md, "uid", m->uid) &&
         egpu__api_set_text(md, "resourceVersion", m->resource_version) &&
         (m->generation == 0 || egpu__api_set(md, "generation", json_integer(m->generation))) &&
         egpu__api_set_text(md, "deletionTimestamp", m->deletion_timestamp);
    if (ok && m->nfinalizers > 0) {
        fin = json_array();
        ok = egpu__api_set(md, "finalizers", fin);
        for (uint32_t i = 0; ok && i < m->nfinalizers; i++)
            ok = json_array_append_new(fin, json_string(m->finalizers[i])) == 0;
    }
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

int egpu__api_conditions_decode(const json_t *status, struct egpu_api_condition *c, uint32_t *n,
                                struct egpu_error *err)
{
    const json_t *list = json_object_get(status, "conditions"), *v;
    size_t i;

    *n = 0;
    if (list == NULL || json_is_null(list))
        return 0;
    if (!json_is_array(list))
        return egpu_error_set(err, EGPU_ESYNTAX, "status.conditions must be a list");
    if (json_array_size(list) > EGPU_API_CONDITIONS_MAX)
        return egpu_error_set(err, EGPU_ESYNTAX,
                              "status.conditions has %zu entries; allowed: at most %d",
                              json_array_size(list), EGPU_API_CONDITIONS_MAX);
    json_array_foreach(list, i, v)
    {
        struct egpu_api_condition *k = &c[i];
        char path[64], f[96];
        int st = 0;
        bool has;
        int rc;

        snprintf(path, sizeof(path), "status.conditions[%zu]", i);
        if (!json_is_object(v))
            return egpu_error_set(err, EGPU_ESYNTAX, "%s must be an object", path);
        snprintf(f, sizeof(f), "%s.type", path);
        rc = egpu__api_text(v, "type", f, true, true, k->type, sizeof(k->type), err);
        if (rc)
            return rc;
        snprintf(f, sizeof(f), "%s.status", path);
        rc = egpu__api_enum(v, "status", f, cond_status_names, 3, &st, NULL, err);
        if (rc)
            return rc;
        k->status = (enum egpu_api_cond_status)st;
        snprintf(f, sizeof(f), "%s.observedGeneration", path);
        rc = egpu__api_int(v, "observedGeneration", f, 0, INT64_MAX, NULL, &k->observed_generation,
                           &has, err);
        if (rc)
            return rc;
        snprintf(f, sizeof(f), "%s.lastTransitionTime", path);
        rc = egpu__api_text(v, "lastTransitionTime", f, true, true, k->last_transition_time,
                            sizeof(k->last_transition_time), err);
        if (rc)
            return rc;
        snprintf(f, sizeof(f), "%s.reason", path);
        rc = egpu__api_text(v, "reason", f, true, true, k->reason, sizeof(k->reason), err);
        if (rc)
            return rc;
        snprintf(f, sizeof(f), "%s.message", path);
        rc = egpu__api_text(v, "message", f, true, false, k->message, sizeof(k->message), err);
        if (rc)
            return rc;
        for (size_t j = 0; j < i; j++) {
            if (strcmp(c[j].type, k->type) == 0)
                return egpu_error_set(err, EGPU_ERANGE,
                                      "%s.type is \"%s\" again; allowed: one condition per type",
                                      path, k->type);
        }
        (*n)++;
    }
    return 0;
}

json_t *egpu__api_conditions_encode(const struct egpu_api_condition *c, uint32_t n)
{
    json_t *list = json_array();

    if (list == NULL)
        return NULL;
    for (uint32_t i = 0; i < n; i++) {
        json_t *o = json_object();
        bool ok = o != NULL && json_array_append_new(list, o) == 0;

        ok = ok && egpu__api_set(o, "type", json_string(c[i].type)) &&
             egpu__api_set(o, "status", json_string(egpu_api_cond_status_name(c[i].status))) &&
             (c[i].observed_generation == 0 ||
              egpu__api_set(o, "observedGeneration", json_integer(c[i].observed_generation))) &&
             egpu__api_set(o, "lastTransitionTime", json_string(c[i].last_transition_time)) &&
             egpu__api_set(o, "reason", json_string(c[i].reason)) &&
             egpu__api_set(o, "message", json_string(c[i].message));
        if (!ok) {
            json_decref(list);
            return NULL;
        }
    }
    return list;
}

json_t *egpu__api_milli_number(int64_t milli)
{
    if (milli % 1000 == 0)
        return json_integer(milli / 1000);
    return json_real((double)milli / 1000.0);
}
