/* api/elasticgpu.c - ElasticGPU: decoded, validated, rendered back.
 *
 * An ElasticGPU is to a claim what a PersistentVolume is to a
 * PersistentVolumeClaim: capacity (gpu-core percent, gpu-memory MiB), the
 * node, exactly one source (gpuShare{gpuName}: a slice of one card, gpu-core
 * 1..99; physicalGPU{gpuNames}: whole cards, gpu-core 100 per card and no
 * gpu-memory, a card coming with all its memory), claimRef to the claim it
 * is bound to, the class it came from and what happens when the claim goes.
 * status: phase (Pending, Available, Bound, Released, Failed), reason and
 * message, and for a claim that asked TFLOPS the card chosen (gpuName), its
 * model and the percent of it the TFLOPS came to (corePercent).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "objects_int.h"

#define CAP     "spec.capacity."
#define MEM_MAX 4294967295LL

static const char *const egpu_phase_names[5] = {"Pending", "Available", "Bound", "Released",
                                                "Failed"};

const char *egpu_api_egpu_phase_name(enum egpu_api_egpu_phase p)
{
    return (unsigned)p < 5 ? egpu_phase_names[p] : "unknown";
}

static int source_decode(const json_t *spec, struct egpu_api_egpu *e, struct egpu_error *err)
{
    const json_t *share, *phys, *names, *v;
    size_t i;
    int rc;

    rc = egpu__api_object(spec, "gpuShare", "spec.gpuShare", false, &share, err);
    if (!rc)
        rc = egpu__api_object(spec, "physicalGPU", "spec.physicalGPU", false, &phys, err);
    if (rc)
        return rc;
    if ((share == NULL) == (phys == NULL))
        return egpu_error_set(err, EGPU_ERANGE,
                              "spec has %s gpuShare %s physicalGPU; allowed: exactly one of them",
                              share != NULL ? "both" : "neither", share != NULL ? "and" : "nor");
    if (share != NULL) {
        e->source = EGPU_API_PROVISIONER_GPUSHARE;
        e->ngpus = 1;
        return egpu__api_text(share, "gpuName", "spec.gpuShare.gpuName", true, true,
                              e->gpu_names[0], sizeof(e->gpu_names[0]), err);
    }
    e->source = EGPU_API_PROVISIONER_PHYSICAL;
    names = json_object_get(phys, "gpuNames");
    if (names == NULL || json_is_null(names))
        return egpu_error_set(err, EGPU_ESYNTAX, "spec.physicalGPU.gpuNames is missing");
    if (!json_is_array(names) || json_array_size(names) < 1 ||
        json_array_size(names) > EGPU_NODE_GPUS_MAX)
        return egpu_error_set(err, EGPU_ESYNTAX,
                              "spec.physicalGPU.gpuNames must be a list of 1..%d GPU names",
                              EGPU_NODE_GPUS_MAX);
    json_array_foreach(names, i, v)
    {
        const char *s = egpu_api_str(v);

        if (s == NULL || s[0] == '\0' || strlen(s) >= EGPU_K8S_NAME_MAX)
            return egpu_error_set(err, EGPU_ESYNTAX,
                                  "spec.physicalGPU.gpuNames[%zu] must be a GPU name of 1..%d "
                                  "bytes",
                                  i, EGPU_K8S_NAME_MAX - 1);
        for (size_t j = 0; j < i; j++) {
            if (strcmp(e->gpu_names[j], s) == 0)
                return egpu_error_set(err, EGPU_ERANGE,
                                      "spec.physicalGPU.gpuNames[%zu] is \"%s\" again; allowed: "
                                      "each card once",
                                      i, s);
        }
        memcpy(e->gpu_names[i], s, strlen(s) + 1);
        e->ngpus++;
    }
    return 0;
}

static int capacity_check(const struct egpu_api_egpu *e, struct egpu_error *err)
{
    if (e->source == EGPU_API_PROVISIONER_GPUSHARE && e->core_pct > 99)
        return egpu_error_set(err, EGPU_ERANGE,
                              CAP EGPU_RES_GPU_CORE
                              " is %" PRId64 " with gpuShare; allowed: "
                              "1..99, a slice of one card (whole cards are physicalGPU)",
                              e->core_pct);
    if (e->source == EGPU_API_PROVISIONER_PHYSICAL && e->core_pct != 100LL * e->ngpus)
        return egpu_error_set(err, EGPU_ERANGE,
                              CAP EGPU_RES_GPU_CORE " is %" PRId64 " with %u physicalGPU "
                                                    "gpuNames; allowed: 100 per whole card (%u)",
                              e->core_pct, e->ngpus, 100 * e->ngpus);
    if (e->source == EGPU_API_PROVISIONER_PHYSICAL && e->has_mem)
        return egpu_error_set(err, EGPU_ERANGE,
                              CAP EGPU_RES_GPU_MEMORY
                              " is %" PRId64 " with physicalGPU; "
                              "allowed: no gpu-memory on whole cards, which come with all "
                              "their memory",
                              e->mem_mib);
    return 0;
}

static int spec_decode(const json_t *obj, struct egpu_api_egpu *e, struct egpu_error *err)
{
    const json_t *spec, *cap, *ref;
    int v = 0;
    int rc;

    rc = egpu__api_object(obj, "spec", "spec", true, &spec, err);
    if (!rc)
        rc = egpu__api_object(spec, "capacity", "spec.capacity", true, &cap, err);
    if (!rc)
        rc = egpu__api_int(cap, EGPU_RES_GPU_CORE, CAP EGPU_RES_GPU_CORE, 1,
                           100LL * EGPU_NODE_GPUS_MAX, EGPU__CORE_ALLOWED " (at most 6400)",
                           &e->core_pct, NULL, err);
    if (!rc && e->core_pct > 99 && e->core_pct % 100 != 0)
        rc = egpu_error_set(err, EGPU_ERANGE,
                            CAP EGPU_RES_GPU_CORE " is %" PRId64 "; " EGPU__CORE_ALLOWED,
                            e->core_pct);
    if (!rc)
        rc = egpu__api_int(cap, EGPU_RES_GPU_MEMORY, CAP EGPU_RES_GPU_MEMORY, 1, MEM_MAX,
                           "allowed: a whole number of MiB, 1..4294967295, e.g. 4096", &e->mem_mib,
                           &e->has_mem, err);
    if (!rc)
        rc = egpu__api_text(spec, "nodeName", "spec.nodeName", true, true, e->node_name,
                            sizeof(e->node_name), err);
    if (!rc)
        rc = source_decode(spec, e, err);
    if (!rc)
        rc = capacity_check(e, err);
    if (!rc)
        rc = egpu__api_object(spec, "claimRef", "spec.claimRef", false, &ref, err);
    if (!rc && ref != NULL) {
        e->has_claim_ref = true;
        rc = egpu__api_text(ref, "namespace", "spec.claimRef.namespace", true, true, e->claim_ns,
                            sizeof(e->claim_ns), err);
        if (!rc)
            rc = egpu__api_text(ref, "name", "spec.claimRef.name", true, true, e->claim_name,
                                sizeof(e->claim_name), err);
        if (!rc)
            rc = egpu__api_text(ref, "uid", "spec.claimRef.uid", false, false, e->claim_uid,
                                sizeof(e->claim_uid), err);
    }
    if (!rc)
        rc = egpu__api_text(spec, "elasticGPUClassName", "spec.elasticGPUClassName", false, false,
                            e->class_name, sizeof(e->class_name), err);
    if (!rc)
        rc = egpu__api_enum(spec, "reclaimPolicy", "spec.reclaimPolicy", egpu__api_reclaim_names, 2,
                            &v, &e->has_reclaim_policy, err);
    if (!rc)
        e->reclaim_policy = (enum egpu_api_reclaim)v;
    return rc;
}

static int status_decode(const json_t *obj, struct egpu_api_egpu *e, struct egpu_error *err)
{
    const json_t *st;
    int phase = 0;
    bool has;
    int rc;

    rc = egpu__api_object(obj, "status", "status", false, &st, err);
    if (rc || st == NULL)
        return rc;
    rc = egpu__api_enum(st, "phase", "status.phase", egpu_phase_names, 5, &phase, &has, err);
    if (!rc) {
        e->phase = (enum egpu_api_egpu_phase)phase;
        rc = egpu__api_text(st, "reason", "status.reason", false, false, e->reason,
                            sizeof(e->reason), err);
    }
    if (!rc)
        rc = egpu__api_text(st, "message", "status.message", false, false, e->message,
                            sizeof(e->message), err);
    if (!rc)
        rc = egpu__api_int(st, "observedGeneration", "status.observedGeneration", 0, INT64_MAX,
                           NULL, &e->observed_generation, &has, err);
    if (!rc)
        rc = egpu__api_text(st, "gpuName", "status.gpuName", false, false, e->chosen_gpu,
                            sizeof(e->chosen_gpu), err);
    if (!rc)
        rc = egpu__api_text(st, "model", "status.model", false, false, e->model, sizeof(e->model),
                            err);
    if (!rc)
        rc = egpu__api_int(st, "corePercent", "status.corePercent", 1, 99,
                           "allowed: 1..99, the percent of the chosen card", &e->tflops_core_pct,
                           &has, err);
    return rc;
}

int egpu_api_egpu_decode(const json_t *obj, struct egpu_api_egpu *out, struct egpu_error *err)
{
    struct egpu_api_egpu *e = egpu_calloc(1, sizeof(*e));
    int rc;

    if (e == NULL)
        return egpu_error_set(err, -ENOMEM, "ElasticGPU: out of memory");
    rc = egpu__api_check_kind(obj, EGPU_KIND_ELASTICGPU, err);
    if (!rc)
        rc = egpu__api_meta_decode(obj, false, &e->meta, err);
    if (!rc)
        rc = spec_decode(obj, e, err);
    if (!rc)
        rc = status_decode(obj, e, err);
    if (!rc)
        memcpy(out, e, sizeof(*e));
    egpu_free(e);
    return rc;
}

json_t *egpu_api_egpu_encode(const struct egpu_api_egpu *e)
{
    json_t *o = egpu__api_object_new(EGPU_KIND_ELASTICGPU, &e->meta);
    json_t *spec = NULL, *cap = NULL, *src = NULL, *names = NULL, *ref = NULL, *st = NULL;
    bool ok;

    if (o == NULL)
        return NULL;
    ok = egpu__api_set(o, "spec", spec = json_object()) &&
         egpu__api_set(spec, "capacity", cap = json_object()) &&
         egpu__api_set(cap, EGPU_RES_GPU_CORE, json_integer(e->core_pct)) &&
         (!e->has_mem || egpu__api_set(cap, EGPU_RES_GPU_MEMORY, json_integer(e->mem_mib))) &&
         egpu__api_set_text(spec, "nodeName", e->node_name);
    if (ok && e->source == EGPU_API_PROVISIONER_GPUSHARE) {
        ok = egpu__api_set(spec, "gpuShare", src = json_object()) &&
             egpu__api_set(src, "gpuName", json_string(e->gpu_names[0]));
    } else if (ok) {
        ok = egpu__api_set(spec, "physicalGPU", src = json_object()) &&
             egpu__api_set(src, "gpuNames", names = json_array());
        for (uint32_t i = 0; ok && i < e->ngpus; i++)
            ok = json_array_append_new(names, json_string(e->gpu_names[i])) == 0;
    }
    if (ok && e->has_claim_ref)
        ok = egpu__api_set(spec, "claimRef", ref = json_object()) &&
             egpu__api_set(ref, "namespace", json_string(e->claim_ns)) &&
             egpu__api_set(ref, "name", json_string(e->claim_name)) &&
             egpu__api_set_text(ref, "uid", e->claim_uid);
    ok = ok && egpu__api_set_text(spec, "elasticGPUClassName", e->class_name) &&
         (!e->has_reclaim_policy ||
          egpu__api_set(spec, "reclaimPolicy",
                        json_string(egpu_api_reclaim_name(e->reclaim_policy)))) &&
         egpu__api_set(o, "status", st = json_object()) &&
         egpu__api_set(st, "phase", json_string(egpu_api_egpu_phase_name(e->phase))) &&
         egpu__api_set_text(st, "reason", e->reason) &&
         egpu__api_set_text(st, "message", e->message) &&
         (e->observed_generation == 0 ||
          egpu__api_set(st, "observedGeneration", json_integer(e->observed_generation))) &&
         egpu__api_set_text(st, "gpuName", e->chosen_gpu) &&
         egpu__api_set_text(st, "model", e->model) &&
         (e->tflops_core_pct == 0 ||
          egpu__api_set(st, "corePercent", json_integer(e->tflops_core_pct)));
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}
