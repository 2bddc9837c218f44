/* tests/tools/api_objects.c - src/api's object decoders and encoders on the
 * command line, for tests/integration/test_crds.py (test code, never
 * shipped).
 *
 *   egpu-api-objects < cases.json
 *
 * stdin: {"kind": "ElasticGPUClaim" | "ElasticGPUClass" | "ElasticGPU" | "GPUBudget" |
 *         "GPU", "objects": [<object>, ...]}
 * stdout: {"names": {...}, "results": [{"ok": true, "encoded": <object>} or
 *          {"ok": false, "error": "<message>"}, ...]}, one result per object
 *          in order; "encoded" is egpu_api_*_encode of what was decoded (null
 *          for a GPU, which src/api decodes for readers only and never writes).
 * names holds every enum's names as src/api spells them (phases, reclaim
 * policies, binding modes, provisioners, condition statuses, budget states).
 * Exit status 0, or 2 for input that is not the JSON above.
 */
#include <stdio.h>
#include <string.h>

#include "egpu/api.h"

static json_t *names_of(const char *(*name)(int))
{
    json_t *list = json_array();

    for (int i = 0; i < 16; i++) {
        const char *s = name(i);

        if (strcmp(s, "unknown") == 0)
            break;
        json_array_append_new(list, json_string(s));
    }
    return list;
}

static const char *claim_phase(int i)
{
    return egpu_api_claim_phase_name((enum egpu_api_claim_phase)i);
}
static const char *egpu_phase(int i)
{
    return egpu_api_egpu_phase_name((enum egpu_api_egpu_phase)i);
}
static const char *reclaim(int i)
{
    return egpu_api_reclaim_name((enum egpu_api_reclaim)i);
}
static const char *binding(int i)
{
    return egpu_api_binding_mode_name((enum egpu_api_binding_mode)i);
}
static const char *provisioner(int i)
{
    return egpu_api_provisioner_name((enum egpu_api_provisioner)i);
}
/* Closest first, as the CRD lists them. */
static const char *topology_link(int i)
{
    return egpu_api_topo_name((enum egpu_topo_level)(EGPU_TOPO_NVLINK - i));
}
static const char *budget_state(int i)
{
    return egpu_api_budget_state_name((enum egpu_api_budget_state)i);
}

static const char *cond_status(int i)
{
    return i < 3 ? egpu_api_cond_status_name((enum egpu_api_cond_status)i) : "unknown";
}

static json_t *one(const char *kind, const json_t *obj)
{
    static struct egpu_api_claim claim;
    static struct egpu_api_class cls;
    static struct egpu_api_egpu egpu;
    static struct egpu_api_budget budget;
    struct egpu_error err = {0};
    json_t *enc = NULL;
    int rc;

    if (strcmp(kind, EGPU_KIND_ELASTICGPUCLAIM) == 0) {
        rc = egpu_api_claim_decode(obj, &claim, &err);
        if (!rc)
            enc = egpu_api_claim_encode(&claim);
    } else if (strcmp(kind, EGPU_KIND_ELASTICGPUCLASS) == 0) {
        rc = egpu_api_class_decode(obj, &cls, &err);
        if (!rc)
            enc = egpu_api_class_encode(&cls);
    } else if (strcmp(kind, EGPU_KIND_GPU) == 0) {
        static struct egpu_api_gpu gpu;

        rc = egpu_api_gpu_decode(obj, &gpu, &err);
        if (!rc) {
            enc = json_null();
            egpu_api_gpu_clear(&gpu);
        }
    } else if (strcmp(kind, EGPU_KIND_GPUBUDGET) == 0) {
        rc = egpu_api_budget_decode(obj, &budget, &err);
        if (!rc)
            enc = egpu_api_budget_encode(&budget);
    } else {
        rc = egpu_api_egpu_decode(obj, &egpu, &err);
        if (!rc)
            enc = egpu_api_egpu_encode(&egpu);
    }
    if (rc)
        return json_pack("{s:b,s:s}", "ok", 0, "error", err.msg);
    return json_pack("{s:b,s:o}", "ok", 1, "encoded", enc);
}

int main(void)
{
    json_t *in = json_loadf(stdin, JSON_ALLOW_NUL, NULL), *objs, *out, *results, *names, *o;
    const char *kind;
    size_t i;

    kind = egpu_api_str(json_object_get(in, "kind"));
    objs = json_object_get(in, "objects");
    if (kind == NULL || !json_is_array(objs)) {
        fprintf(stderr, "egpu-api-objects: stdin must be {\"kind\": ..., \"objects\": [...]}\n");
        return 2;
    }
    if (strcmp(kind, EGPU_KIND_ELASTICGPUCLAIM) != 0 &&
        strcmp(kind, EGPU_KIND_ELASTICGPUCLASS) != 0 && strcmp(kind, EGPU_KIND_ELASTICGPU) != 0 &&
        strcmp(kind, EGPU_KIND_GPUBUDGET) != 0 && strcmp(kind, EGPU_KIND_GPU) != 0) {
        fprintf(stderr, "egpu-api-objects: unknown kind %s\n", kind);
        return 2;
    }
    results = json_array();
    json_array_foreach(objs, i, o) json_array_append_new(results, one(kind, o));
    names =
        json_pack("{s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o}", "claimPhases", names_of(claim_phase),
                  "elasticGPUPhases", names_of(egpu_phase), "reclaimPolicies", names_of(reclaim),
                  "bindingModes", names_of(binding), "provisioners", names_of(provisioner),
                  "conditionStatuses", names_of(cond_status), "budgetStates",
                  names_of(budget_state), "topologyLinks", names_of(topology_link));
    out = json_pack("{s:o,s:o}", "names", names, "results", results);
    if (out == NULL || json_dumpf(out, stdout, JSON_COMPACT) != 0)
        return 2;
    putchar('\n');
    json_decref(out);
    json_decref(in);
    return 0;
}
