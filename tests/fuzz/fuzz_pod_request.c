/* tests/fuzz/fuzz_pod_request.c - a pod's GPU request as src/api reads it
 * (request.c, compat.c): the spec and annotations a pod owner writes.
 *
 * Input: byte 0 picks the compatibility options (bit 0: HAMi's names, bit 1:
 * aliyun.com/gpu-mem in MiB, bits 2..7: the memory-only core), the rest is a
 * pod's JSON ({"metadata":{"annotations":...},"spec":...}).
 *
 * Invariants: validation keeps at most EGPU_API_PROBLEMS_MAX messages, each
 * terminated, and counts the rest; every container read strictly is read
 * the same leniently; a conversion that succeeds only ever writes
 * elasticgpu.io names, applies to the spec, and a second conversion of the
 * result changes nothing (the webhook's patch is idempotent); a failed
 * conversion says why and leaves no edits; nothing leaks.
 */
#include "fuzz.h"
#include "egpu/api.h"

static void check_containers(const json_t *spec)
{
    static const char *const keys[] = {"containers", "initContainers"};

    for (size_t k = 0; k < 2; k++) {
        const json_t *c;
        size_t i;

        json_array_foreach(json_object_get(spec, keys[k]), i, c)
        {
            struct egpu_api_gpu_ask strict, lenient;
            struct egpu_error err = {0};

            if (egpu_api_container_gpu(c, "c", true, &strict, &err) != 0) {
                FUZZ_CHECK(err.msg[0] != '\0');
                continue;
            }
            FUZZ_CHECK(egpu_api_container_gpu(c, "c", false, &lenient, &err) == 0);
            FUZZ_CHECK(strict.core_pct == lenient.core_pct && strict.mem_mib == lenient.mem_mib);
            FUZZ_CHECK(strict.core_pct == 0 || (strict.core_pct >= 1 && strict.core_pct <= 6400));
        }
    }
}

static void check_validate(const json_t *spec, const json_t *ann)
{
    static const char *const models[] = {"A100", "H100"};
    const struct egpu_api_facts facts = {.max_card_mib = 81920, .nmodels = 2, .models = models};
    struct egpu_api_problems p = {0};
    size_t n = egpu_api_pod_validate(spec, ann, &facts, &p);

    FUZZ_CHECK(p.n <= EGPU_API_PROBLEMS_MAX && n == p.n + p.more);
    for (size_t i = 0; i < p.n; i++)
        FUZZ_CHECK(memchr(p.msg[i], '\0', sizeof(p.msg[i])) != NULL && p.msg[i][0] != '\0');
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct egpu_api_compat_result res, again;
    struct egpu_api_compat_opts o = {0};
    struct egpu_error err = {0};
    long live = egpu_alloc_live();
    json_t *pod, *spec, *ann;

    if (size < 1)
        return 0;
    o.nvidia = data[0] & 1;
    o.aliyun_mem_mib = (data[0] & 2) ? 1 : 0;
    o.memory_only_core = data[0] >> 2;
    pod = json_loadb((const char *)data + 1, size - 1, JSON_ALLOW_NUL, NULL);
    if (pod == NULL)
        return 0;
    spec = json_object_get(pod, "spec");
    ann = json_object_get(json_object_get(pod, "metadata"), "annotations");
    check_containers(spec);
    check_validate(spec, ann);
    (void)egpu_api_spec_wants_gpu(spec);
    if (egpu_api_compat_convert(spec, ann, &o, &res, &err) == 0) {
        json_t *copy = json_deep_copy(spec);
        json_t *acopy = json_is_object(ann) ? json_deep_copy(ann) : json_object();

        FUZZ_CHECK(copy != NULL && acopy != NULL);
        for (size_t i = 0; i < res.nedits; i++)
            FUZZ_CHECK(res.edits[i].to == NULL || strcmp(res.edits[i].to, EGPU_RES_GPU_CORE) == 0 ||
                       strcmp(res.edits[i].to, EGPU_RES_GPU_MEMORY) == 0);
        FUZZ_CHECK(egpu_api_compat_apply(copy, acopy, &res) == 0);
        FUZZ_CHECK(egpu_api_compat_convert(copy, acopy, &o, &again, &err) == 0);
        FUZZ_CHECK(again.nedits == 0 && again.nannotations == 0);
        check_containers(copy);
        check_validate(copy, acopy);
        json_decref(copy);
        json_decref(acopy);
    } else {
        FUZZ_CHECK(err.msg[0] != '\0' && res.nedits == 0);
    }
    json_decref(pod);
    FUZZ_CHECK(egpu_alloc_live() == live);
    return 0;
}
