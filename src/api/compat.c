/* api/compat.c - the names of the GPU-sharing systems Elastic GPU replaces,
 * and how each becomes an elasticgpu.io resource or annotation.
 *
 * A pod written for gpushare (aliyun.com/gpu-mem), gpu-manager
 * (tencent.com/vcuda-*, inspur.com/vcuda-*), HAMi (nvidia.com/gpucores,
 * gpumem, with nvidia.com/gpu as the card count) or the elastic-gpu
 * projects runs unchanged: the webhook applies the edits worked out here.
 * Converting reads only; the caller applies the edits (as JSON Patch
 * operations, or with egpu_api_compat_apply), so the patch and the object
 * the webhook then validates come from the same list.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "egpu/api.h"

enum kind { CORE, MEMORY };

enum family { PLAIN, ALIYUN, NVIDIA };

struct compat_name {
    const char *name;
    enum kind kind;
    enum family family;
    uint32_t mib;     /* MEMORY: MiB in one unit (0: the family's own) */
    const char *unit; /* the unit, for warnings and errors */
};

static const struct compat_name names[] = {
    {"tencent.com/vcuda-core", CORE, PLAIN, 0, "percent of a card"},
    {"inspur.com/vcuda-core", CORE, PLAIN, 0, "percent of a card"},
    {"tencent.com/vcuda-memory", MEMORY, PLAIN, 256, "1 = 256 MiB"},
    {"inspur.com/vcuda-memory", MEMORY, PLAIN, 256, "1 = 256 MiB"},
    {"aliyun.com/gpu-mem", MEMORY, ALIYUN, 0, NULL},
    {"elastic-gpu/gpu-percent", CORE, PLAIN, 0, "percent of a card"},
    {"elasticgpu.com/gpu-core", CORE, PLAIN, 0, "percent of a card"},
    {"elasticgpu.com/gpu-memory", MEMORY, PLAIN, 1, "MiB"},
    {"gpushare.provisioner.elasticgpu.io/gpu-core", CORE, PLAIN, 0, "percent of a card"},
    {"gpushare.provisioner.elasticgpu.io/gpu-memory", MEMORY, PLAIN, 1, "MiB"},
    {"nvidia.com/gpucores", CORE, NVIDIA, 0, "percent of a card"},
    {"nvidia.com/gpumem", MEMORY, NVIDIA, 1, "MiB"},
};

#define NVIDIA_GPU "nvidia.com/gpu" /* HAMi's card count; NVIDIA's device plugin's too */
#define ALIYUN_GPU_COUNT \
    "aliyun.com/gpu-count" /* gpushare's card count, beside aliyun.com/gpu-mem */

static const char *const core_limit_names[] = {
    "tencent.com/vcuda-core-limit",
    "inspur.com/vcuda-core-limit",
};

#define NNAMES (sizeof(names) / sizeof(names[0]))

bool egpu_api_compat_known(const char *name, bool nvidia)
{
    for (size_t i = 0; i < NNAMES; i++) {
        if (strcmp(names[i].name, name) == 0)
            return nvidia || names[i].family != NVIDIA;
    }
    for (size_t i = 0; i < 2; i++) {
        if (strcmp(core_limit_names[i], name) == 0)
            return true;
    }
    return false;
}

/* What one resource map (requests or limits) of a container holds. */
struct found {
    const struct compat_name *core, *mem;
    int64_t core_v, mem_v; /* in the other system's units */
    bool has_count;        /* nvidia.com/gpu given */
    int64_t count;
    bool has_aliyun_count; /* aliyun.com/gpu-count given beside aliyun.com/gpu-mem */
    int64_t aliyun_count;
};

/* Integer value of map[name] (a quantity string or an integer). */
static int int_value(const json_t *map, const char *name, const char *cname, const char *unit,
                     int64_t *out, struct egpu_error *err)
{
    const json_t *v = json_object_get(map, name);
    const char *s = egpu_api_str(v);
    char buf[32];
    struct egpu_error perr = {0};

    if (json_is_integer(v)) {
        snprintf(buf, sizeof(buf), "%lld", (long long)json_integer_value(v));
        s = buf;
    }
    if (s == NULL || egpu_parse_gpu_mem_mib(s, name, out, &perr) != 0)
        return egpu_error_set(err, EGPU_ERANGE,
                              "container \"%s\": %s is %.32s; allowed: a whole number (%s)", cname,
                              name, s != NULL ? s : "not a quantity", unit);
    return 0;
}

/* Read the compatible names of one resource map. */
static int scan(const json_t *map, const char *cname, const struct egpu_api_compat_opts *o,
                struct found *f, struct egpu_error *err)
{
    memset(f, 0, sizeof(*f));
    if (!json_is_object(map))
        return 0;
    for (size_t i = 0; i < NNAMES; i++) {
        const struct compat_name *n = &names[i];
        const struct compat_name **slot = n->kind == CORE ? &f->core : &f->mem;
        int64_t *v = n->kind == CORE ? &f->core_v : &f->mem_v;
        int rc;

        if (json_object_get(map, n->name) == NULL || (n->family == NVIDIA && !o->nvidia))
            continue;
        if (*slot != NULL)
            return egpu_error_set(err, EGPU_ERANGE,
                                  "container \"%s\": asks both %s and %s; allowed: one name "
                                  "for the GPU %s",
                                  cname, (*slot)->name, n->name,
                                  n->kind == CORE ? "compute share" : "memory");
        rc = int_value(map, n->name, cname, n->unit ? n->unit : "units of GPU memory", v, err);
        if (rc)
            return rc;
        *slot = n;
    }
    if ((f->core != NULL && f->core->family == NVIDIA) ||
        (f->mem != NULL && f->mem->family == NVIDIA)) {
        f->has_count = json_object_get(map, NVIDIA_GPU) != NULL;
        f->count = 1;
        if (f->has_count) {
            int rc = int_value(map, NVIDIA_GPU, cname, "cards", &f->count, err);

            if (rc)
                return rc;
        }
    }
    if (f->mem != NULL && f->mem->family == ALIYUN &&
        json_object_get(map, ALIYUN_GPU_COUNT) != NULL) {
        int rc = int_value(map, ALIYUN_GPU_COUNT, cname, "cards", &f->aliyun_count, err);

        if (rc)
            return rc;
        f->has_aliyun_count = true;
    }
    return 0;
}

/* An edit of container ci: from (its quantity from_value, -1 = none) becomes
 * to value. */
static int add_edit(struct egpu_api_compat_result *r, bool init, uint32_t ci, bool limits,
                    const char *from, int64_t from_value, const char *to, int64_t value,
                    struct egpu_error *err)
{
    struct egpu_api_compat_edit *e;

    if (r->nedits == EGPU_API_COMPAT_EDITS_MAX)
        return egpu_error_set(err, EGPU_ERANGE, "more than %d resource names to rewrite",
                              EGPU_API_COMPAT_EDITS_MAX);
    e = &r->edits[r->nedits++];
    memset(e, 0, sizeof(*e));
    e->init = init;
    e->container = ci;
    e->limits = limits;
    snprintf(e->from, sizeof(e->from), "%s", from);
    if (from_value >= 0)
        snprintf(e->from_value, sizeof(e->from_value), "%lld", (long long)from_value);
    e->to = to;
    snprintf(e->value, sizeof(e->value), "%lld", (long long)value);
    return 0;
}

static void warn(struct egpu_api_compat_result *r, const char *fmt, ...) EGPU_PRINTF(2, 3);

static void warn(struct egpu_api_compat_result *r, const char *fmt, ...)
{
    va_list ap;

    if (r->nwarnings == EGPU_API_PROBLEMS_MAX)
        return;
    va_start(ap, fmt);
    vsnprintf(r->warnings[r->nwarnings++], EGPU_API_PROBLEM_MAX, fmt, ap);
    va_end(ap);
}

/* The elasticgpu.io ask of one map's compatible names: *core and *mem
 * (MiB; -1 = none), *memory_only when the core was defaulted. */
static int convert(const struct found *f, const char *cname, const struct egpu_api_compat_opts *o,
                   int64_t *core, int64_t *mem, bool *memory_only, struct egpu_error *err)
{
    *core = -1;
    *mem = -1;
    *memory_only = false;
    if (f->mem != NULL) {
        uint32_t unit =
            f->mem->family == ALIYUN ? (o->aliyun_mem_mib ? o->aliyun_mem_mib : 1024) : f->mem->mib;

        if (f->mem_v > (int64_t)(UINT32_MAX / unit))
            return egpu_error_set(err, EGPU_ERANGE,
                                  "container \"%s\": %s is %lld; allowed: at most %u MiB of GPU "
                                  "memory",
                                  cname, f->mem->name, (long long)f->mem_v, UINT32_MAX);
        *mem = f->mem_v * unit;
    }
    if (f->core != NULL)
        *core = f->core_v;
    if (f->has_aliyun_count && f->aliyun_count != 1)
        return egpu_error_set(err, EGPU_ERANGE,
                              "container \"%s\": " ALIYUN_GPU_COUNT " is %lld with %s; allowed: 1 "
                              "(aliyun.com/gpu-mem is the memory of one shared card; Elastic GPU "
                              "shares at most one card per container), or no " ALIYUN_GPU_COUNT,
                              cname, (long long)f->aliyun_count, f->mem->name);
    if ((f->core != NULL && f->core->family == NVIDIA) ||
        (f->mem != NULL && f->mem->family == NVIDIA)) {
        /* HAMi: nvidia.com/gpu cards, each with gpucores percent and
         * gpumem MiB; only one card can be shared. */
        if (f->count < 1)
            return egpu_error_set(err, EGPU_ERANGE,
                                  "container \"%s\": " NVIDIA_GPU " is %lld with HAMi's names; "
                                  "allowed: 1 to share a card, or more whole cards",
                                  cname, (long long)f->count);
        if (f->count > 1 && (*mem >= 0 || (*core >= 0 && *core != 100)))
            return egpu_error_set(err, EGPU_ERANGE,
                                  "container \"%s\": " NVIDIA_GPU " is %lld with a share of "
                                  "each card (nvidia.com/gpucores or gpumem); allowed: "
                                  "nvidia.com/gpu 1 to share one card, or whole cards "
                                  "without gpucores and gpumem (Elastic GPU shares at most "
                                  "one card per container)",
                                  cname, (long long)f->count);
        if (*core == 0)
            *core = -1; /* HAMi: 0 = no compute limit */
        if (*core == 100 || (f->count > 1 && *core < 0))
            *core = 100 * f->count;
        else if (*core < 0)
            *memory_only = true; /* one card shared, compute unlimited */
    } else if (*core < 0 && *mem >= 0 && f->mem->family == ALIYUN) {
        *memory_only = true;
    }
    if (*memory_only)
        *core = o->memory_only_core ? o->memory_only_core : 1;
    if (*core >= 100)
        *mem = -1; /* whole cards come with all their memory */
    return 0;
}

/* One map (requests or limits) of container ci. */
static int container_map(const json_t *map, bool init, uint32_t ci, bool limits, const char *cname,
                         const struct egpu_api_compat_opts *o, struct egpu_api_compat_result *r,
                         bool *memory_only, struct egpu_error *err)
{
    struct found f;
    int64_t core, mem;
    bool mo;
    int rc;

    rc = scan(map, cname, o, &f, err);
    if (rc || (f.core == NULL && f.mem == NULL))
        return rc;
    rc = convert(&f, cname, o, &core, &mem, &mo, err);
    if (rc)
        return rc;
    *memory_only |= mo;
    if (f.core != NULL)
        rc = add_edit(r, init, ci, limits, f.core->name, f.core_v,
                      core >= 0 ? EGPU_RES_GPU_CORE : NULL, core, err);
    else if (core >= 0)
        rc = add_edit(r, init, ci, limits, "", -1, EGPU_RES_GPU_CORE, core, err);
    if (!rc && f.mem != NULL)
        rc = add_edit(r, init, ci, limits, f.mem->name, f.mem_v,
                      mem >= 0 ? EGPU_RES_GPU_MEMORY : NULL, mem, err);
    if (!rc && f.has_count)
        rc = add_edit(r, init, ci, limits, NVIDIA_GPU, f.count, NULL, 0, err);
    if (!rc && f.has_aliyun_count)
        rc = add_edit(r, init, ci, limits, ALIYUN_GPU_COUNT, f.aliyun_count, NULL, 0, err);
    return rc;
}

/* The unit of one of our resources, as the warnings name it. */
static const char *to_unit(const char *to)
{
    return strcmp(to, EGPU_RES_GPU_MEMORY) == 0 ? "MiB" : "percent of a card";
}

/* Warnings for container cname's conversions: one per name, from the
 * edits made for its first converted map. limited: the pod sets a core
 * limit itself (ours or a compatible name), so a memory-only container is
 * not given one. */
static void warn_container(struct egpu_api_compat_result *r, size_t first, const char *cname,
                           const struct egpu_api_compat_opts *o, bool limited)
{
    bool limits = r->edits[first].limits;

    for (size_t i = first; i < r->nedits && r->edits[i].limits == limits; i++) {
        const struct egpu_api_compat_edit *e = &r->edits[i];
        const char *unit = "";

        for (size_t k = 0; k < NNAMES; k++) {
            if (strcmp(names[k].name, e->from) == 0)
                unit = names[k].family == ALIYUN ? (o->aliyun_mem_mib == 1 ? "MiB" : "GiB")
                                                 : names[k].unit;
        }
        if (e->from[0] == '\0' && limited)
            warn(r,
                 "container \"%s\": asks GPU memory only; given " EGPU_RES_GPU_CORE " %s, "
                 "and the pod's own core limit applies",
                 cname, e->value);
        else if (e->from[0] == '\0')
            warn(r,
                 "container \"%s\": asks GPU memory only; given " EGPU_RES_GPU_CORE " %s and "
                 "the pod " EGPU_ANN_CORE_LIMIT " 100, so it may use the whole card while it "
                 "is idle",
                 cname, e->value);
        else if (e->to == NULL)
            warn(r, "container \"%s\": %s removed (%s)", cname, e->from,
                 strcmp(e->from, NVIDIA_GPU) == 0 ? "the card count is in " EGPU_RES_GPU_CORE
                 : strcmp(e->from, ALIYUN_GPU_COUNT) == 0
                     ? "gpushare's card count; aliyun.com/gpu-mem is one shared card's memory"
                     : "whole cards come with all their memory");
        else if (strcmp(unit, to_unit(e->to)) != 0) /* name both units: 4 GiB is 4096 MiB */
            warn(r, "container \"%s\": %s %s (%s) rewritten to %s %s (%s)", cname, e->from,
                 e->from_value, unit, e->to, e->value, to_unit(e->to));
        else
            warn(r, "container \"%s\": %s rewritten to %s %s (%s)", cname, e->from, e->to, e->value,
                 unit);
    }
}

static bool has_ours(const json_t *res)
{
    static const char *const kinds[] = {"requests", "limits"};

    for (size_t k = 0; k < 2; k++) {
        const char *key;
        const json_t *v;

        json_object_foreach((json_t *)json_object_get(res, kinds[k]), key, v)
        {
            (void)v;
            if (egpu_api_res_asks_gpu(key)) /* the DRA marker alone is no ask */
                return true;
        }
    }
    return false;
}

static int containers(const json_t *spec, bool init, const struct egpu_api_compat_opts *o,
                      bool limited, struct egpu_api_compat_result *r, bool *memory_only,
                      struct egpu_error *err)
{
    const json_t *list = json_object_get(spec, init ? "initContainers" : "containers"), *c;
    size_t i;

    json_array_foreach(list, i, c)
    {
        const json_t *res = json_object_get(c, "resources");
        const char *n = egpu_api_str(json_object_get(c, "name"));
        char cname[EGPU_CONTAINER_NAME_MAX + 16];
        size_t first = r->nedits;
        int rc;

        if (!json_is_object(res) || has_ours(res))
            continue;
        if (n != NULL && n[0] != '\0' && strlen(n) < sizeof(cname))
            snprintf(cname, sizeof(cname), "%s", n);
        else
            snprintf(cname, sizeof(cname), "#%zu", i);
        rc = container_map(json_object_get(res, "requests"), init, (uint32_t)i, false, cname, o, r,
                           memory_only, err);
        if (!rc)
            rc = container_map(json_object_get(res, "limits"), init, (uint32_t)i, true, cname, o, r,
                               memory_only, err);
        if (rc)
            return rc;
        if (r->nedits > first)
            warn_container(r, first, cname, o, limited);
    }
    return 0;
}

static void add_annotation(struct egpu_api_compat_result *r, const char *from, const char *to,
                           const char *value)
{
    struct egpu_api_compat_annotation *a;

    if (r->nannotations == sizeof(r->annotations) / sizeof(r->annotations[0]))
        return;
    a = &r->annotations[r->nannotations++];
    snprintf(a->from, sizeof(a->from), "%s", from);
    a->to = to;
    snprintf(a->value, sizeof(a->value), "%s", value);
}

int egpu_api_compat_convert(const json_t *spec, const json_t *annotations,
                            const struct egpu_api_compat_opts *opts,
                            struct egpu_api_compat_result *out, struct egpu_error *err)
{
    static const struct egpu_api_compat_opts defaults = {0};
    const struct egpu_api_compat_opts *o = opts != NULL ? opts : &defaults;
    bool memory_only = false, has_limit, limited;
    int rc;

    memset(out, 0, sizeof(*out));
    if (!json_is_object(spec))
        return egpu_error_set(err, EGPU_ESYNTAX, "spec must be an object");
    limited = json_object_get(annotations, EGPU_ANN_CORE_LIMIT) != NULL;
    for (size_t i = 0; i < 2; i++)
        limited = limited || json_object_get(annotations, core_limit_names[i]) != NULL;
    rc = containers(spec, false, o, limited, out, &memory_only, err);
    if (!rc)
        rc = containers(spec, true, o, limited, out, &memory_only, err);
    if (rc) {
        memset(out, 0, sizeof(*out));
        return rc;
    }
    has_limit = json_object_get(annotations, EGPU_ANN_CORE_LIMIT) != NULL;
    for (size_t i = 0; i < 2; i++) {
        const json_t *v = json_object_get(annotations, core_limit_names[i]);
        const char *s = egpu_api_str(v);

        if (v == NULL || has_limit)
            continue;
        if (s == NULL || strlen(s) >= sizeof(out->annotations[0].value)) {
            memset(out, 0, sizeof(*out));
            return egpu_error_set(err, EGPU_ERANGE,
                                  "annotation %s must be a whole percent up to 100",
                                  core_limit_names[i]);
        }
        add_annotation(out, core_limit_names[i], EGPU_ANN_CORE_LIMIT, s);
        warn(out, "annotation %s rewritten to " EGPU_ANN_CORE_LIMIT " %s (percent of a card)",
             core_limit_names[i], s);
        has_limit = true;
    }
    if (memory_only && !has_limit)
        add_annotation(out, "", EGPU_ANN_CORE_LIMIT, "100");
    return 0;
}

/* The resource map an edit changes, created when absent. */
static json_t *edit_map(json_t *spec, const struct egpu_api_compat_edit *e)
{
    json_t *c = json_array_get(json_object_get(spec, e->init ? "initContainers" : "containers"),
                               e->container);
    json_t *res = json_object_get(c, "resources"), *map;
    const char *kind = e->limits ? "limits" : "requests";

    if (!json_is_object(res))
        return NULL;
    map = json_object_get(res, kind);
    if (map == NULL || json_is_null(map)) {
        map = json_object();
        if (map == NULL || json_object_set_new(res, kind, map) != 0)
            return NULL;
    }
    return json_is_object(map) ? map : NULL;
}

int egpu_api_compat_apply(json_t *spec, json_t *annotations,
                          const struct egpu_api_compat_result *res)
{
    for (size_t i = 0; i < res->nedits; i++) {
        const struct egpu_api_compat_edit *e = &res->edits[i];
        json_t *map = edit_map(spec, e);

        if (map == NULL)
            return -EINVAL;
        if (e->from[0] != '\0')
            (void)json_object_del(map, e->from);
        if (e->to != NULL && json_object_set_new(map, e->to, json_string(e->value)) != 0)
            return -ENOMEM;
    }
    if (res->nannotations > 0 && !json_is_object(annotations))
        return -EINVAL;
    for (size_t i = 0; i < res->nannotations; i++) {
        const struct egpu_api_compat_annotation *a = &res->annotations[i];

        if (a->from[0] != '\0')
            (void)json_object_del(annotations, a->from);
        if (a->to != NULL && json_object_set_new(annotations, a->to, json_string(a->value)) != 0)
            return -ENOMEM;
    }
    return 0;
}
