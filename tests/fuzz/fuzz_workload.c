/* tests/fuzz/fuzz_workload.c - the TargetWorkload document (src/api/workload.c)
 * that egpu-scheduler --target-workload reads.
 *
 * Input: the JSON document.
 *
 * Invariants: a refused document gets EGPU_ESYNTAX or EGPU_ERANGE with a
 * message naming what was wrong and *out empty; a decoded one has 1..max
 * typical pods, each within the documented ranges (gpuMilli 0 exactly when
 * gpus 0, several cards only whole), weights finite, >= 0, not all 0; it
 * encodes, its JSON text parses and decodes to the same typical pods
 * (memcmp); nothing leaks.
 */
#include <errno.h>
#include <math.h>

#include "fuzz.h"
#include "egpu/api.h"

static void check(const struct egpu_api_workload *w)
{
    double total = 0;

    FUZZ_CHECK(w->n >= 1 && w->n <= EGPU_API_WORKLOAD_PODS_MAX && w->pods != NULL);
    for (size_t i = 0; i < w->n; i++) {
        const struct egpu_api_typical_pod *p = &w->pods[i];

        FUZZ_CHECK(p->cpu_milli >= 0 && p->cpu_milli <= 1000000000);
        FUZZ_CHECK(p->gpu_milli <= 1000 && p->gpus <= EGPU_API_WORKLOAD_GPUS_MAX);
        FUZZ_CHECK((p->gpu_milli == 0) == (p->gpus == 0));
        FUZZ_CHECK(p->gpus <= 1 || p->gpu_milli == 1000);
        FUZZ_CHECK(memchr(p->models, '\0', sizeof(p->models)) != NULL);
        FUZZ_CHECK(isfinite(p->weight) && p->weight >= 0);
        total += p->weight;
    }
    FUZZ_CHECK(total > 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    long live = egpu_alloc_live();
    struct egpu_api_workload w, back;
    struct egpu_error err = {0};
    json_t *o = json_loadb((const char *)data, size, JSON_ALLOW_NUL, NULL), *enc, *again;
    char *text;
    int rc;

    if (o == NULL)
        return 0;
    rc = egpu_api_workload_decode(o, &w, &err);
    json_decref(o);
    if (rc != 0) {
        FUZZ_CHECK(rc == EGPU_ESYNTAX || rc == EGPU_ERANGE || rc == -ENOMEM);
        FUZZ_CHECK(err.msg[0] != '\0' && w.n == 0 && w.pods == NULL);
        FUZZ_CHECK(egpu_alloc_live() == live);
        return 0;
    }
    check(&w);
    enc = egpu_api_workload_encode(&w);
    FUZZ_CHECK(enc != NULL);
    text = json_dumps(enc, JSON_COMPACT);
    FUZZ_CHECK(text != NULL);
    again = json_loads(text, 0, NULL);
    FUZZ_CHECK(again != NULL);
    if (egpu_api_workload_decode(again, &back, &err) != 0) {
        fprintf(stderr, "re-decoding %s: %s\n", text, err.msg);
        FUZZ_CHECK(0);
    }
    FUZZ_CHECK(back.n == w.n && memcmp(back.pods, w.pods, w.n * sizeof(*w.pods)) == 0);
    egpu_api_workload_free(&back);
    egpu_api_workload_free(&w);
    free(text);
    json_decref(again);
    json_decref(enc);
    FUZZ_CHECK(egpu_alloc_live() == live);
    return 0;
}
