/* api/request.c - a pod's Elastic GPU request: read, decoded, validated.
 *
 * One reader for every component: the scheduler counts what it reads here,
 * the agent and the webhook check the same annotations, and the webhook's
 * denials are the messages written here. A message names the container (or
 * the annotation), the value and what is allowed, in the words of the
 * user's manifest, e.g.
 *   container "train": elasticgpu.io/gpu-core is 150; allowed: 1..99 to
 *   share one card, or a multiple of 100 for whole cards
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "egpu/api.h"

#define CORE_ALLOWED "allowed: 1..99 to share one card, or a multiple of 100 for whole cards"
#define QUANTITY_MAX 64 /* a quantity's text as quoted in messages */
#define EGPU_STR_(x) #x
#define EGPU_STR(x)  EGPU_STR_(x)

/* The quantity text of resources.<kind>[res] into buf: a string, or an
 * integer (some clients send them). *present says whether it is given.
 * Returns 0 or EGPU_ESYNTAX. */
static int quantity(const json_t *resources, const char *kind, const char *res, const char *cname,
                    char *buf, size_t len, bool *present, struct egpu_error *err)
{
    const json_t *map = json_object_get(resources, kind), *v;

    *present = false;
    if (map == NULL || json_is_null(map))
        return 0;
    if (!json_is_object(map))
        return egpu_error_set(err, EGPU_ESYNTAX,
                              "container \"%s\": resources.%s must be an object of quantities",
                              cname, kind);
    v = json_object_get(map, res);
    if (v == NULL || json_is_null(v))
        return 0;
    if (json_is_integer(v)) {
        snprintf(buf, len, "%lld", (long long)json_integer_value(v));
    } else if (egpu_api_str(v) != NULL && json_string_length(v) < len) {
        memcpy(buf, json_string_value(v), json_string_length(v) + 1);
    } else {
        return egpu_error_set(err, EGPU_ESYNTAX,
                              "container \"%s\": resources.%s[%s] must be a quantity string, "
                              "e.g. \"30\"",
                              cname, kind, res);
    }
    *present = true;
    return 0;
}

/* What gpu-core allows, for a value text that is not allowed: whole cards
 * beyond what one node holds get their own words. */
static const char *core_allowed(const char *text)
{
    struct egpu_error perr = {0};
    int64_t v;

    if (egpu_parse_gpu_mem_mib(text, EGPU_RES_GPU_CORE, &v, &perr) == 0 && v % 100 == 0 &&
        v > 100LL * EGPU_NODE_GPUS_MAX)
        return "allowed: at most " EGPU_STR(EGPU_NODE_GPUS_MAX) " whole cards (" EGPU_STR(
            EGPU_NODE_GPUS_MAX) "00), the most one node may hold";
    return CORE_ALLOWED;
}

/* One resource of a container: requests[res], else limits[res]; with
 * strict, both given must be equal. Returns 0 (*present false when neither
 * is given), EGPU_ESYNTAX or EGPU_ERANGE. */
static int ask_of(const json_t *resources, const char *res, const char *cname, bool strict,
                  int (*parse)(const char *, const char *, int64_t *, struct egpu_error *),
                  const char *allowed /* NULL: gpu-core's */, int64_t *out, bool *present,
                  struct egpu_error *err)
{
    char req[QUANTITY_MAX], lim[QUANTITY_MAX];
    bool has_req, has_lim;
    int64_t vreq = 0, vlim = 0;
    struct egpu_error perr = {0};
    int rc;

    rc = quantity(resources, "requests", res, cname, req, sizeof(req), &has_req, err);
    if (!rc)
        rc = quantity(resources, "limits", res, cname, lim, sizeof(lim), &has_lim, err);
    if (rc)
        return rc;
    *present = has_req || has_lim;
    if (has_req && parse(req, res, &vreq, &perr) != 0)
        return egpu_error_set(err, EGPU_ERANGE, "container \"%s\": %s is %s; %s", cname, res, req,
                              allowed != NULL ? allowed : core_allowed(req));
    if (has_lim && parse(lim, res, &vlim, &perr) != 0)
        return egpu_error_set(err, EGPU_ERANGE, "container \"%s\": %s is %s; %s", cname, res, lim,
                              allowed != NULL ? allowed : core_allowed(lim));
    if (strict && has_req && has_lim && vreq != vlim)
        return egpu_error_set(err, EGPU_ERANGE,
                              "container \"%s\": %s requests %s but limits %s; allowed: "
                              "requests equal to limits (an extended resource is not "
                              "overcommitted)",
                              cname, res, req, lim);
    *out = has_req ? vreq : vlim;
    return 0;
}

int egpu_api_container_gpu(const json_t *container, const char *name, bool strict,
                           struct egpu_api_gpu_ask *out, struct egpu_error *err)
{
    const json_t *res = json_object_get(container, "resources");
    struct egpu_api_gpu_ask a = {0};
    bool has_core;
    int rc;

    if (res == NULL || json_is_null(res)) {
        *out = a;
        return 0;
    }
    if (!json_is_object(res))
        return egpu_error_set(err, EGPU_ESYNTAX, "container \"%s\": resources must be an object",
                              name);
    rc = ask_of(res, EGPU_RES_GPU_CORE, name, strict, egpu_parse_gpu_core_pct, NULL, &a.core_pct,
                &has_core, err);
    if (rc)
        return rc;
    rc = ask_of(res, EGPU_RES_GPU_MEMORY, name, strict, egpu_parse_gpu_mem_mib,
                "allowed: a whole number of MiB, e.g. 4096", &a.mem_mib, &a.has_mem, err);
    if (rc)
        return rc;
    if (a.has_mem && !has_core)
        return egpu_error_set(err, EGPU_ERANGE,
                              "container \"%s\": " EGPU_RES_GPU_MEMORY " needs " EGPU_RES_GPU_CORE
                              " in the same container; allowed: "
                              "gpu-core 1..99 with gpu-memory to share one card",
                              name);
    if (strict && a.has_mem && a.mem_mib == 0)
        return egpu_error_set(err, EGPU_ERANGE,
                              "container \"%s\": " EGPU_RES_GPU_MEMORY
                              " is 0; allowed: a whole number of MiB from 1",
                              name);
    if (strict && a.has_mem && a.core_pct >= 100)
        return egpu_error_set(err, EGPU_ERANGE,
                              "container \"%s\": " EGPU_RES_GPU_MEMORY
                              " is %lld with " EGPU_RES_GPU_CORE
                              " %lld (whole cards); allowed: no gpu-memory on whole cards, "
                              "which come with all their memory, or gpu-core 1..99 to share "
                              "one card",
                              name, (long long)a.mem_mib, (long long)a.core_pct);
    *out = a;
    return 0;
}

static int init_gpu_error(const char *name, struct egpu_error *err)
{
    return egpu_error_set(err, EGPU_ERANGE,
                          "init container \"%s\": asks " EGPU_RES_GPU_CORE "; allowed: GPUs in "
                          "regular containers only (an init container's GPU would be held for "
                          "the pod's whole life)",
                          name);
}

int egpu_api_init_container_gpu(const json_t *container, const char *name, struct egpu_error *err)
{
    struct egpu_api_gpu_ask a;
    struct egpu_error cerr = {0};
    int rc = egpu_api_container_gpu(container, name, false, &a, &cerr);

    if (rc)
        return egpu_error_set(err, rc, "init %s", cerr.msg);
    return a.core_pct > 0 ? init_gpu_error(name, err) : 0;
}

/* ------------------------------------------------------------------------ */
/* Annotations                                                               */

static int policy_of(const json_t *ann, const char *key, bool *has, enum egpu_policy_kind *out,
                     struct egpu_error *err)
{
    const json_t *v = json_object_get(ann, key);
    struct egpu_error perr = {0};
    const char *s;

    *has = false;
    if (v == NULL)
        return 0;
    s = egpu_api_str(v);
    if (s == NULL || egpu_policy_parse(s, out, &perr) != 0)
        return egpu_error_set(err, EGPU_ERANGE,
                              "annotation %s is \"%.64s\"; allowed: " EGPU_POLICY_NAMES, key,
                              s != NULL ? s : "(not text)");
    *has = true;
    return 0;
}

int egpu_api_pod_annotations(const json_t *ann, struct egpu_api_pod_annotations *out,
                             struct egpu_error *err)
{
    struct egpu_api_pod_annotations a = {0};
    const json_t *v;
    const char *s;
    int rc;

    if (ann != NULL && !json_is_null(ann) && !json_is_object(ann))
        return egpu_error_set(err, EGPU_ESYNTAX, "metadata.annotations must be an object");
    rc = policy_of(ann, EGPU_ANN_NODE_POLICY, &a.has_node_policy, &a.node_policy, err);
    if (!rc)
        rc = policy_of(ann, EGPU_ANN_CARD_POLICY, &a.has_card_policy, &a.card_policy, err);
    if (rc)
        return rc;
    v = json_object_get(ann, EGPU_ANN_GPU_MODEL);
    if (v != NULL) {
        s = egpu_api_str(v);
        if (s == NULL || strlen(s) >= sizeof(a.gpu_model))
            return egpu_error_set(err, EGPU_ERANGE,
                                  "annotation " EGPU_ANN_GPU_MODEL
                                  " must be text of at most %zu characters: GPU models "
                                  "separated by |, e.g. \"NVIDIA A100-SXM4-80GB|NVIDIA H100\"",
                                  sizeof(a.gpu_model) - 1);
        memcpy(a.gpu_model, s, strlen(s) + 1);
    }
    v = json_object_get(ann, EGPU_ANN_CORE_LIMIT);
    if (v != NULL) {
        int64_t pct = 0;
        struct egpu_error perr = {0};

        s = egpu_api_str(v);
        if (s == NULL || egpu_parse_gpu_mem_mib(s, EGPU_ANN_CORE_LIMIT, &pct, &perr) != 0 ||
            pct < 1 || pct > 100)
            return egpu_error_set(err, EGPU_ERANGE,
                                  "annotation " EGPU_ANN_CORE_LIMIT
                                  " is \"%.64s\"; allowed: a whole percent from the "
                                  "containers' gpu-core up to 100",
                                  s != NULL ? s : "(not text)");
        a.core_limit = (uint32_t)pct;
    }
    *out = a;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Validation                                                                */

static void problem(struct egpu_api_problems *out, size_t *found, const char *fmt, ...)
    EGPU_PRINTF(3, 4);

static void problem(struct egpu_api_problems *out, size_t *found, const char *fmt, ...)
{
    va_list ap;

    (*found)++;
    if (out->n == EGPU_API_PROBLEMS_MAX) {
        out->more++;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(out->msg[out->n++], EGPU_API_PROBLEM_MAX, fmt, ap);
    va_end(ap);
}

/* The name of container c for messages, into buf. */
static const char *container_name(const json_t *c, size_t i, char *buf, size_t len)
{
    const char *s = egpu_api_str(json_object_get(c, "name"));

    if (s != NULL && s[0] != '\0' && strlen(s) < len)
        snprintf(buf, len, "%s", s);
    else
        snprintf(buf, len, "#%zu", i);
    return buf;
}

/* Is model one of facts' models? */
static bool model_known(const struct egpu_api_facts *f, const char *model, size_t len)
{
    for (size_t i = 0; i < f->nmodels; i++) {
        if (f->models[i] != NULL && strlen(f->models[i]) == len &&
            memcmp(f->models[i], model, len) == 0)
            return true;
    }
    return false;
}

static void check_models(const char *value, const struct egpu_api_facts *f,
                         struct egpu_api_problems *out, size_t *found)
{
    char known[EGPU_API_PROBLEM_MAX / 2];
    size_t used = 0;
    const char *p = value;

    if (f == NULL || f->nmodels == 0 || value[0] == '\0')
        return;
    known[0] = '\0';
    for (size_t i = 0; i < f->nmodels && used < sizeof(known); i++)
        used += (size_t)snprintf(known + used, sizeof(known) - used, "%s%s", i ? ", " : "",
                                 f->models[i] != NULL ? f->models[i] : "");
    for (;;) {
        const char *bar = strchr(p, '|');
        size_t len = bar != NULL ? (size_t)(bar - p) : strlen(p);

        if (!model_known(f, p, len))
            problem(out, found,
                    "annotation " EGPU_ANN_GPU_MODEL " names \"%.*s\"; allowed: the models "
                    "the cluster has: %s",
                    (int)(len > 128 ? 128 : len), p, known);
        if (bar == NULL)
            break;
        p = bar + 1;
    }
}

/* The containers (init: initContainers) of spec: each read strictly. Adds
 * the largest shared gpu-core to *max_share and the GPU containers to *ngpu. */
static void check_containers(const json_t *spec, bool init, const struct egpu_api_facts *facts,
                             struct egpu_api_problems *out, size_t *found, int64_t *max_share,
                             size_t *ngpu)
{
    const char *key = init ? "initContainers" : "containers";
    const json_t *list = json_object_get(spec, key), *c;
    size_t i;

    if (list == NULL || json_is_null(list))
        return;
    if (!json_is_array(list)) {
        problem(out, found, "spec.%s must be an array", key);
        return;
    }
    json_array_foreach(list, i, c)
    {
        char name[EGPU_CONTAINER_NAME_MAX + 16];
        struct egpu_api_gpu_ask a;
        struct egpu_error err = {0};

        if (!json_is_object(c)) {
            problem(out, found, "spec.%s[%zu] must be an object", key, i);
            continue;
        }
        container_name(c, i, name, sizeof(name));
        if (egpu_api_container_gpu(c, name, true, &a, &err) != 0) {
            problem(out, found, "%s%s", init ? "init " : "", err.msg);
            continue;
        }
        if (a.core_pct == 0)
            continue;
        if (init) {
            (void)init_gpu_error(name, &err);
            problem(out, found, "%s", err.msg);
            continue;
        }
        (*ngpu)++;
        if (a.core_pct < 100 && a.core_pct > *max_share)
            *max_share = a.core_pct;
        /* A share with no memory would be booked as 0 MiB and given 0 MiB
         * by the interposer (vcuda.conf refuses "no limit" for a share). */
        if (a.core_pct < 100 && !a.has_mem &&
            (facts == NULL || facts->default_mem_per_core_mib == 0))
            problem(out, found,
                    "container \"%s\": " EGPU_RES_GPU_CORE " is %lld (a share of one card) "
                    "without " EGPU_RES_GPU_MEMORY "; allowed: gpu-memory in MiB with every "
                    "share, in requests and limits, e.g. " EGPU_RES_GPU_MEMORY ": \"4096\" (a "
                    "share is booked and limited to the memory it names)",
                    name, (long long)a.core_pct);
        if (facts != NULL && facts->max_card_mib > 0 && a.has_mem &&
            a.mem_mib > (int64_t)facts->max_card_mib)
            problem(out, found,
                    "container \"%s\": " EGPU_RES_GPU_MEMORY " is %lld; allowed: up to %u "
                    "MiB, the memory of the largest card in the cluster",
                    name, (long long)a.mem_mib, facts->max_card_mib);
    }
}

size_t egpu_api_pod_validate(const json_t *spec, const json_t *annotations,
                             const struct egpu_api_facts *facts, struct egpu_api_problems *out)
{
    struct egpu_api_pod_annotations a;
    struct egpu_error err = {0};
    int64_t max_share = 0;
    size_t found = 0, ngpu = 0;

    if (!json_is_object(spec)) {
        problem(out, &found, "spec must be an object");
        return found;
    }
    check_containers(spec, false, facts, out, &found, &max_share, &ngpu);
    check_containers(spec, true, facts, out, &found, &max_share, &ngpu);
    if (ngpu > EGPU_CONTAINERS_MAX)
        problem(out, &found, "%zu containers ask for GPUs; allowed: at most %d", ngpu,
                EGPU_CONTAINERS_MAX);
    if (egpu_api_pod_annotations(annotations, &a, &err) != 0) {
        problem(out, &found, "%s", err.msg);
        return found;
    }
    if (a.core_limit != 0 && (int64_t)a.core_limit < max_share)
        problem(out, &found,
                "annotation " EGPU_ANN_CORE_LIMIT " is %u; allowed: %lld..100 (at least the "
                "largest gpu-core of a shared container)",
                a.core_limit, (long long)max_share);
    check_models(a.gpu_model, facts, out, &found);
    return found;
}

/* resources[kind][EGPU_RES_GPU_MEMORY] = text, making the map if needed. */
static int set_memory(json_t *resources, const char *kind, const char *text)
{
    json_t *map = json_object_get(resources, kind);

    if (!json_is_object(map)) {
        map = json_object();
        if (map == NULL || json_object_set_new(resources, kind, map) != 0)
            return -ENOMEM;
    }
    return json_object_set_new(map, EGPU_RES_GPU_MEMORY, json_string(text)) != 0 ? -ENOMEM : 0;
}

int egpu_api_share_memory_default(json_t *spec, uint32_t mib_per_core,
                                  struct egpu_api_problems *notes)
{
    const json_t *list = json_object_get(spec, "containers");
    json_t *c;
    size_t i, found = 0;
    int n = 0;

    if (mib_per_core == 0 || !json_is_array(list))
        return 0;
    json_array_foreach(list, i, c)
    {
        char name[EGPU_CONTAINER_NAME_MAX + 16], text[32];
        json_t *res = json_object_get(c, "resources");
        struct egpu_api_gpu_ask a;
        struct egpu_error err = {0};
        long long mib;

        if (!json_is_object(c) ||
            egpu_api_container_gpu(c, container_name(c, i, name, sizeof(name)), false, &a, &err) !=
                0 ||
            a.core_pct == 0 || a.core_pct >= 100 || a.has_mem)
            continue;
        mib = (long long)a.core_pct * mib_per_core;
        snprintf(text, sizeof(text), "%lld", mib);
        if (set_memory(res, "limits", text) != 0 ||
            (json_object_get(json_object_get(res, "requests"), EGPU_RES_GPU_CORE) != NULL &&
             set_memory(res, "requests", text) != 0))
            return -ENOMEM;
        problem(notes, &found,
                "container \"%s\": " EGPU_RES_GPU_MEMORY " set to %lld MiB (" EGPU_RES_GPU_CORE
                " %lld x %u MiB, the cluster's default memory per gpu-core percent); "
                "name " EGPU_RES_GPU_MEMORY " in requests and limits to choose",
                name, mib, (long long)a.core_pct, mib_per_core);
        n++;
    }
    return n;
}

bool egpu_api_res_asks_gpu(const char *name)
{
    return strncmp(name, EGPU_API_GROUP "/", sizeof(EGPU_API_GROUP)) == 0 &&
           strcmp(name, EGPU_RES_DRA) != 0;
}

/* Does a resource map hold a GPU key of our group, or (compat) a compatible
 * name egpu_api_compat_convert rewrites (HAMi's only with nvidia)? */
static bool map_has_gpu(const json_t *map, bool compat, bool nvidia)
{
    const char *key;
    const json_t *v;

    json_object_foreach((json_t *)map, key, v)
    {
        (void)v;
        if (egpu_api_res_asks_gpu(key) || (compat && egpu_api_compat_known(key, nvidia)))
            return true;
    }
    return false;
}

/* Does any container or init container of spec name such a resource, in
 * requests or limits? */
static bool spec_has_gpu(const json_t *spec, bool compat, bool nvidia)
{
    static const char *const keys[] = {"containers", "initContainers"};

    for (size_t k = 0; k < 2; k++) {
        const json_t *list = json_object_get(spec, keys[k]), *c;
        size_t i;

        json_array_foreach(list, i, c)
        {
            const json_t *res = json_object_get(c, "resources");

            if (map_has_gpu(json_object_get(res, "requests"), compat, nvidia) ||
                map_has_gpu(json_object_get(res, "limits"), compat, nvidia))
                return true;
        }
    }
    return false;
}

bool egpu_api_spec_wants_gpu(const json_t *spec)
{
    return spec_has_gpu(spec, false, false);
}

bool egpu_api_pod_asks_gpu(const json_t *spec, const json_t *annotations, bool nvidia)
{
    const char *key;
    const json_t *v;

    if (spec_has_gpu(spec, true, nvidia))
        return true;
    json_object_foreach((json_t *)annotations, key, v)
    {
        (void)v;
        if (strncmp(key, EGPU_ANN_CLAIM_PREFIX, sizeof(EGPU_ANN_CLAIM_PREFIX) - 1) == 0)
            return true;
    }
    return false;
}
