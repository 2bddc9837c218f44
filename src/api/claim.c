/* api/claim.c - ElasticGPUClaim: decoded, validated, rendered back.
 *
 * A claim asks for GPU the way a PersistentVolumeClaim asks for storage:
 * spec.resources.requests holds elasticgpu.io/gpu-core (percent of one card,
 * 1..99 or 100*k) or elasticgpu.io/gpu-tflops (compute in TFLOPS, a JSON
 * number, which becomes the percent of the card it lands on), and optionally
 * elasticgpu.io/gpu-memory (MiB, shares only); elasticGPUClassName picks the
 * class ("" = the default one) and elasticGPUName an ElasticGPU (set by the
 * controller when it binds, or by hand to pre-bind). status: phase (Pending,
 * Bound, Lost), the bound ElasticGPU, what it gives, conditions.
 *
 * TFLOPS are kept in thousandths: a JSON number is multiplied by 1000 and
 * rounded up (a claim never gets less than it asked), except that a value
 * within 10^-6 of a whole thousandth is that thousandth, so what the encoder
 * writes (milli / 1000.0) decodes to the same thousandths.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "objects_int.h"

#define REQ            "spec.resources.requests."
#define MEM_MAX        4294967295LL
#define TFLOPS_ALLOWED "allowed: a number of TFLOPS above 0 and at most 1000000, e.g. 19.5"

static const char *const claim_phase_names[3] = {"Pending", "Bound", "Lost"};

const char *egpu_api_claim_phase_name(enum egpu_api_claim_phase p)
{
    return (unsigned)p < 3 ? claim_phase_names[p] : "unknown";
}

/* gpu-core as the resource model allows it, with request.c's words. */
static int core_of(const json_t *o, const char *key, const char *path, int64_t *out, bool *has,
                   struct egpu_error *err)
{
    int64_t v = 0;
    int rc = egpu__api_int(o, key, path, INT64_MIN, INT64_MAX, EGPU__CORE_ALLOWED, &v, has, err);

    if (rc || !*has)
        return rc;
    if (v % 100 == 0 && v > 100LL * EGPU_NODE_GPUS_MAX)
        return egpu_error_set(err, EGPU_ERANGE,
                              "%s is %" PRId64 "; allowed: at most %d whole cards (%d), the most "
                              "one node may hold",
                              path, v, EGPU_NODE_GPUS_MAX, 100 * EGPU_NODE_GPUS_MAX);
    if (v < 1 || (v > 99 && v % 100 != 0))
        return egpu_error_set(err, EGPU_ERANGE, "%s is %" PRId64 "; " EGPU__CORE_ALLOWED, path, v);
    *out = v;
    return 0;
}

static int tflops_of(const json_t *req, int64_t *out, bool *has, struct egpu_error *err)
{
    const json_t *v = json_object_get(req, EGPU_RES_GPU_TFLOPS);
    double d, m, r;
    char t[64];

    *has = false;
    if (v == NULL || json_is_null(v))
        return 0;
    if (!json_is_number(v))
        return egpu_error_set(err, EGPU_ESYNTAX, REQ EGPU_RES_GPU_TFLOPS " is %s; " TFLOPS_ALLOWED,
                              egpu__api_json_text(v, t, sizeof(t)));
    d = json_number_value(v);
    if (!(d > 0) || d > EGPU_API_TFLOPS_MAX)
        return egpu_error_set(err, EGPU_ERANGE, REQ EGPU_RES_GPU_TFLOPS " is %s; " TFLOPS_ALLOWED,
                              egpu__api_json_text(v, t, sizeof(t)));
    m = d * 1000.0;
    r = nearbyint(m);
    *out = (int64_t)(fabs(m - r) < 1e-6 ? r : ceil(m));
    if (*out < 1)
        *out = 1;
    *has = true;
    return 0;
}

static int spec_decode(const json_t *obj, struct egpu_api_claim *c, struct egpu_error *err)
{
    const json_t *spec, *res, *req;
    bool has_core, has_tflops;
    int rc;

    rc = egpu__api_object(obj, "spec", "spec", true, &spec, err);
    if (!rc)
        rc = egpu__api_object(spec, "resources", "spec.resources", true, &res, err);
    if (!rc)
        rc = egpu__api_object(res, "requests", "spec.resources.requests", true, &req, err);
    if (!rc)
        rc = core_of(req, EGPU_RES_GPU_CORE, REQ EGPU_RES_GPU_CORE, &c->core_pct, &has_core, err);
    if (!rc)
        rc = tflops_of(req, &c->tflops_milli, &has_tflops, err);
    if (!rc)
        rc = egpu__api_int(req, EGPU_RES_GPU_MEMORY, REQ EGPU_RES_GPU_MEMORY, 1, MEM_MAX,
                           "allowed: a whole number of MiB, 1..4294967295, e.g. 4096", &c->mem_mib,
                           &c->has_mem, err);
    if (rc)
        return rc;
    if (has_core == has_tflops)
        return egpu_error_set(err, EGPU_ERANGE,
                              "spec.resources.requests has %s " EGPU_RES_GPU_CORE
                              " %s " EGPU_RES_GPU_TFLOPS "; allowed: exactly one of them",
                              has_core ? "both" : "neither", has_core ? "and" : "nor");
    if (c->has_mem && c->core_pct >= 100)
        return egpu_error_set(err, EGPU_ERANGE,
                              REQ EGPU_RES_GPU_MEMORY
                              " is %" PRId64 " with " EGPU_RES_GPU_CORE " %" PRId64
                              " (whole cards); allowed: no gpu-memory on whole "
                              "cards, which come with all their memory",
                              c->mem_mib, c->core_pct);
    rc = egpu__api_text(spec, "elasticGPUClassName", "spec.elasticGPUClassName", false, false,
                        c->class_name, sizeof(c->class_name), err);
    if (!rc)
        rc = egpu__api_text(spec, "elasticGPUName", "spec.elasticGPUName", false, false,
                            c->egpu_name, sizeof(c->egpu_name), err);
    return rc;
}

static int status_decode(const json_t *obj, struct egpu_api_claim *c, struct egpu_error *err)
{
    const json_t *st, *cap;
    int phase = 0;
    bool has;
    int rc;

    rc = egpu__api_object(obj, "status", "status", false, &st, err);
    if (rc || st == NULL)
        return rc;
    rc = egpu__api_enum(st, "phase", "status.phase", claim_phase_names, 3, &phase, &has, err);
    if (rc)
        return rc;
    c->phase = (enum egpu_api_claim_phase)phase;
    rc = egpu__api_text(st, "elasticGPUName", "status.elasticGPUName", false, false, c->bound_egpu,
                        sizeof(c->bound_egpu), err);
    if (!rc)
        rc = egpu__api_object(st, "capacity", "status.capacity", false, &cap, err);
    if (!rc)
        rc = core_of(cap, EGPU_RES_GPU_CORE, "status.capacity." EGPU_RES_GPU_CORE, &c->cap_core_pct,
                     &c->has_cap_core, err);
    if (!rc)
        rc = egpu__api_int(cap, EGPU_RES_GPU_MEMORY, "status.capacity." EGPU_RES_GPU_MEMORY, 1,
                           MEM_MAX, NULL, &c->cap_mem_mib, &c->has_cap_mem, err);
    if (!rc)
        rc = egpu__api_int(st, "observedGeneration", "status.observedGeneration", 0, INT64_MAX,
                           NULL, &c->observed_generation, &has, err);
    if (!rc)
        rc = egpu__api_conditions_decode(st, c->conditions, &c->nconditions, err);
    return rc;
}

int egpu_api_claim_decode(const json_t *obj, struct egpu_api_claim *out, struct egpu_error *err)
{
    struct egpu_api_claim *c = egpu_calloc(1, sizeof(*c));
    int rc;

    if (c == NULL)
        return egpu_error_set(err, -ENOMEM, "ElasticGPUClaim: out of memory");
    rc = egpu__api_check_kind(obj, EGPU_KIND_ELASTICGPUCLAIM, err);
    if (!rc)
        rc = egpu__api_meta_decode(obj, true, &c->meta, err);
    if (!rc)
        rc = spec_decode(obj, c, err);
    if (!rc)
        rc = status_decode(obj, c, err);
    if (!rc)
        memcpy(out, c, sizeof(*c));
    egpu_free(c);
    return rc;
}

json_t *egpu_api_claim_encode(const struct egpu_api_claim *c)
{
    json_t *o = egpu__api_object_new(EGPU_KIND_ELASTICGPUCLAIM, &c->meta);
    json_t *spec = NULL, *res = NULL, *req = NULL, *st = NULL, *cap = NULL;
    bool ok;

    if (o == NULL)
        return NULL;
    /* Each object is handed to its parent as soon as it is made, so on any
     * failure freeing o frees everything. */
    ok = egpu__api_set(o, "spec", spec = json_object()) &&
         egpu__api_set(spec, "resources", res = json_object()) &&
         egpu__api_set(res, "requests", req = json_object()) &&
         (c->core_pct == 0 || egpu__api_set(req, EGPU_RES_GPU_CORE, json_integer(c->core_pct))) &&
         (c->tflops_milli == 0 ||
          egpu__api_set(req, EGPU_RES_GPU_TFLOPS, egpu__api_milli_number(c->tflops_milli))) &&
         (!c->has_mem || egpu__api_set(req, EGPU_RES_GPU_MEMORY, json_integer(c->mem_mib))) &&
         egpu__api_set_text(spec, "elasticGPUClassName", c->class_name) &&
         egpu__api_set_text(spec, "elasticGPUName", c->egpu_name) &&
         egpu__api_set(o, "status", st = json_object()) &&
         egpu__api_set(st, "phase", json_string(egpu_api_claim_phase_name(c->phase))) &&
         egpu__api_set_text(st, "elasticGPUName", c->bound_egpu);
    if (ok && (c->has_cap_core || c->has_cap_mem))
        ok = egpu__api_set(st, "capacity", cap = json_object()) &&
             (!c->has_cap_core ||
              egpu__api_set(cap, EGPU_RES_GPU_CORE, json_integer(c->cap_core_pct))) &&
             (!c->has_cap_mem ||
              egpu__api_set(cap, EGPU_RES_GPU_MEMORY, json_integer(c->cap_mem_mib)));
    if (ok && c->observed_generation > 0)
        ok = egpu__api_set(st, "observedGeneration", json_integer(c->observed_generation));
    if (ok && c->nconditions > 0)
        ok = egpu__api_set(st, "conditions",
                           egpu__api_conditions_encode(c->conditions, c->nconditions));
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}
