/* tests/fuzz/fuzz_quantity.c - the Kubernetes quantity parser
 * (src/core/quantity.c): egpu_quantity_parse, egpu_quantity_to_units in
 * several units both ways of rounding, and the four resource parsers.
 *
 * Invariants: an error always has a message; an exact conversion that
 * succeeds gives the same value rounded up; the resource parsers give values
 * in their documented ranges.
 */
#include "fuzz.h"

static const int units[][2] = {
    {0, 0}, {-3, 0}, {0, 20}, {0, 10}, {-9, 0}, {3, 0}, {0, 30}, {-2, 0}, {6, 10},
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = fuzz_cstr(data, size);
    struct egpu_error err = {0};
    struct egpu_quantity q;
    int64_t v, up;

    if (egpu_quantity_parse(s, &q, &err) == 0) {
        for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
            int exact = egpu_quantity_to_units(&q, units[i][0], units[i][1], EGPU_ROUND_EXACT, &v);
            int rounded = egpu_quantity_to_units(&q, units[i][0], units[i][1], EGPU_ROUND_UP, &up);

            FUZZ_CHECK(exact == 0 || exact == EGPU_ERANGE);
            FUZZ_CHECK(rounded == 0 || rounded == EGPU_ERANGE);
            if (exact == 0) {
                FUZZ_CHECK(rounded == 0 && up == v);
                FUZZ_CHECK(!q.negative || v <= 0);
            }
        }
    } else {
        FUZZ_CHECK(err.msg[0] != '\0');
    }

    err.msg[0] = '\0';
    if (egpu_parse_cpu_milli(s, "cpu", &v, &err) == 0)
        FUZZ_CHECK(v >= 0);
    else
        FUZZ_CHECK(err.msg[0] != '\0');
    err.msg[0] = '\0';
    if (egpu_parse_mem_mib(s, "memory", &v, &err) == 0)
        FUZZ_CHECK(v >= 0);
    else
        FUZZ_CHECK(err.msg[0] != '\0');
    err.msg[0] = '\0';
    if (egpu_parse_gpu_core_pct(s, "gpu-core", &v, &err) == 0)
        FUZZ_CHECK((v >= 1 && v <= 99) ||
                   (v >= 100 && v % 100 == 0 && v <= 100LL * EGPU_NODE_GPUS_MAX));
    else
        FUZZ_CHECK(err.msg[0] != '\0');
    err.msg[0] = '\0';
    if (egpu_parse_gpu_mem_mib(s, "gpu-memory", &v, &err) == 0)
        FUZZ_CHECK(v >= 0 && v <= (int64_t)UINT32_MAX);
    else
        FUZZ_CHECK(err.msg[0] != '\0');
    free(s);
    return 0;
}
