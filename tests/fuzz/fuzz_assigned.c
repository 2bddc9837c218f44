/* tests/fuzz/fuzz_assigned.c - the elasticgpu.io/assigned annotation
 * (src/api/assigned.c), which a pod owner can write.
 *
 * Invariants: a decoded annotation stays within its bounds (containers,
 * cards, each container's cards inside the card list, core 1..100); it
 * encodes, and the encoding decodes to the same annotation; an error has a
 * message; nothing leaks (LeakSanitizer, and the project's own block count).
 */
#include "fuzz.h"
#include "egpu/api.h"

static void check_same(const struct egpu_assigned *a, const struct egpu_assigned *b)
{
    FUZZ_CHECK(strcmp(a->node, b->node) == 0);
    FUZZ_CHECK(a->ncontainers == b->ncontainers && a->ncards == b->ncards);
    for (uint32_t i = 0; i < a->ncontainers; i++) {
        const struct egpu_assigned_container *x = &a->containers[i], *y = &b->containers[i];

        FUZZ_CHECK(strcmp(x->name, y->name) == 0);
        FUZZ_CHECK(x->core_pct == y->core_pct && x->mem_mib == y->mem_mib);
        FUZZ_CHECK(x->ncards == y->ncards && x->first_card == y->first_card);
    }
    for (uint32_t i = 0; i < a->ncards; i++)
        FUZZ_CHECK(strcmp(a->uuids[i], b->uuids[i]) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct egpu_assigned a, b;
    char *text = fuzz_cstr(data, size), *enc;
    struct egpu_error err = {0};
    long live = egpu_alloc_live();

    if (egpu_assigned_decode(text, &a, &err) == 0) {
        FUZZ_CHECK(a.ncontainers <= EGPU_CONTAINERS_MAX && a.ncards <= EGPU_PICK_SHARES_MAX);
        for (uint32_t i = 0; i < a.ncontainers; i++) {
            const struct egpu_assigned_container *c = &a.containers[i];

            FUZZ_CHECK(c->first_card <= a.ncards && c->ncards <= a.ncards - c->first_card);
            FUZZ_CHECK(c->core_pct >= 1 && c->core_pct <= 100);
        }
        enc = egpu_assigned_encode(&a);
        FUZZ_CHECK(enc != NULL);
        if (egpu_assigned_decode(enc, &b, &err) != 0) {
            fprintf(stderr, "re-decode of %s: %s\n", enc, err.msg);
            FUZZ_CHECK(!"the encoding of a decoded annotation decodes");
        }
        check_same(&a, &b);
        egpu_free(enc);
    } else {
        FUZZ_CHECK(err.msg[0] != '\0');
    }
    FUZZ_CHECK(egpu_alloc_live() == live);
    free(text);
    return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet();
    return 0;
}
