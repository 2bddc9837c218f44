/* tests/unit/test_vcuda_track.c - what the interposer counts for an
 * allocation (src/vcuda/sizes.c) and the per-process map that gives the
 * same amount back at free (src/vcuda/track.c).
 *
 * Sizes: the 2 MiB rounding at its edges, saturation, array texel sizes
 * per format, mipmap levels (2D, 3D, layered), sparse arrays. Map: put,
 * get and take against their documented results, kinds kept apart, a long
 * random churn (fixed seed) checked against a plain model, dropping all
 * entries of a context, and an allocation failure during growth that
 * leaves the map as it was; no block leaks.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "testutil.h"
#include "vcuda_int.h"

#define MIB (1ULL << 20)

static void round_to_granularity(void **state)
{
    (void)state;
    assert_int_equal(egpu__vcuda_round(0), 0);
    assert_int_equal(egpu__vcuda_round(1), 2 * MIB);
    assert_int_equal(egpu__vcuda_round(2 * MIB - 1), 2 * MIB);
    assert_int_equal(egpu__vcuda_round(2 * MIB), 2 * MIB);
    assert_int_equal(egpu__vcuda_round(2 * MIB + 1), 4 * MIB);
    assert_int_equal(egpu__vcuda_round(99 * MIB + 1), 100 * MIB);
    assert_true(egpu__vcuda_round(UINT64_MAX) == UINT64_MAX);
    assert_true(egpu__vcuda_round(UINT64_MAX - MIB) == UINT64_MAX);
}

static void array_sizes(void **state)
{
    (void)state;
    /* 1D: height and depth 0 count 1 */
    assert_int_equal(egpu__vcuda_array_bytes(1000, 0, 0, 0x20, 1, 0, 1), 4000);
    /* 2D float4 */
    assert_int_equal(egpu__vcuda_array_bytes(1024, 512, 0, 0x20, 4, 0, 1), 1024 * 512 * 16);
    /* 3D int16 x2 */
    assert_int_equal(egpu__vcuda_array_bytes(64, 64, 64, 0x09, 2, 0, 1), 64 * 64 * 64 * 4);
    /* half x1, uint8 x4 */
    assert_int_equal(egpu__vcuda_array_bytes(10, 10, 0, 0x10, 1, 0, 1), 200);
    assert_int_equal(egpu__vcuda_array_bytes(10, 10, 0, 0x01, 4, 0, 1), 400);
    /* formats that name their channels ignore NumChannels */
    assert_int_equal(egpu__vcuda_array_bytes(10, 10, 0, 0xc5, 4, 0, 1), 800); /* UNORM16 x4 */
    assert_int_equal(egpu__vcuda_array_bytes(10, 10, 0, 0xc0, 1, 0, 1), 100); /* UNORM8 x1 */
    /* unknown formats count 16 bytes per element */
    assert_int_equal(egpu__vcuda_array_bytes(10, 10, 0, 0x91, 4, 0, 1), 1600);
    /* sparse and deferred-mapping arrays have no memory of their own */
    assert_int_equal(egpu__vcuda_array_bytes(1024, 1024, 0, 0x20, 1, 0x40, 1), 0);
    assert_int_equal(egpu__vcuda_array_bytes(1024, 1024, 0, 0x20, 1, 0x80, 1), 0);
    /* overflow saturates */
    assert_true(egpu__vcuda_array_bytes(UINT64_MAX / 2, 3, 0, 0x20, 1, 0, 1) == UINT64_MAX);
}

static void mipmap_sizes(void **state)
{
    (void)state;
    /* 2D, 3 levels: 1024x256 + 512x128 + 256x64 floats */
    assert_int_equal(egpu__vcuda_array_bytes(1024, 256, 0, 0x20, 1, 0, 3),
                     4 * (1024 * 256 + 512 * 128 + 256 * 64));
    /* levels stop halving at 1 */
    assert_int_equal(egpu__vcuda_array_bytes(4, 1, 0, 0x01, 1, 0, 5), 4 + 2 + 1 + 1 + 1);
    /* 3D: depth halves too */
    assert_int_equal(egpu__vcuda_array_bytes(8, 8, 8, 0x01, 1, 0, 2), 512 + 64);
    /* layered (0x01) and cubemap (0x04): depth is a layer count, never halved */
    assert_int_equal(egpu__vcuda_array_bytes(8, 8, 6, 0x01, 1, 0x01, 2), 8 * 8 * 6 + 4 * 4 * 6);
    assert_int_equal(egpu__vcuda_array_bytes(8, 8, 6, 0x01, 1, 0x04, 2), 8 * 8 * 6 + 4 * 4 * 6);
    /* levels 0 counts as 1 */
    assert_int_equal(egpu__vcuda_array_bytes(8, 8, 0, 0x01, 1, 0, 0), 64);
}

static void put_get_take(void **state)
{
    struct egpu__vcuda_track_entry e;
    struct egpu__vcuda_track t = {0};

    (void)state;
    assert_false(egpu__vcuda_track_get(&t, EGPU_VCUDA_PTR, 1, &e));
    assert_int_equal(egpu__vcuda_track_put(&t, EGPU_VCUDA_PTR, 0x7000, 1, 4 * MIB, 0xc0), 0);
    assert_int_equal(egpu__vcuda_track_put(&t, EGPU_VCUDA_PTR, 0x7000, 0, 2 * MIB, 0), -EEXIST);
    /* the same value as another kind is another object */
    assert_int_equal(egpu__vcuda_track_put(&t, EGPU_VCUDA_VMM, 0x7000, 0, 6 * MIB, 0), 0);
    assert_int_equal(t.count, 2);
    assert_true(egpu__vcuda_track_get(&t, EGPU_VCUDA_PTR, 0x7000, &e));
    assert_int_equal(e.card, 1);
    assert_int_equal(e.bytes, 4 * MIB);
    assert_int_equal(e.ctx, 0xc0);
    assert_int_equal(e.kind, EGPU_VCUDA_PTR);
    assert_true(egpu__vcuda_track_take(&t, EGPU_VCUDA_VMM, 0x7000, &e));
    assert_int_equal(e.card, 0);
    assert_int_equal(e.bytes, 6 * MIB);
    assert_false(egpu__vcuda_track_take(&t, EGPU_VCUDA_VMM, 0x7000, &e));
    assert_true(egpu__vcuda_track_get(&t, EGPU_VCUDA_PTR, 0x7000, &e));
    assert_int_equal(t.count, 1);
    egpu__vcuda_track_free(&t);
    assert_null(t.slots);
    assert_int_equal(egpu_alloc_live(), 0);
}

#define CHURN_KEYS 5000

/* A long random sequence of puts and takes over keys that collide a lot
 * (page-aligned pointers), each result checked against a plain array. */
static void random_churn_matches_model(void **state)
{
    static uint64_t model_bytes[CHURN_KEYS]; /* 0 = absent */
    struct egpu__vcuda_track t = {0};
    uint64_t x = 42;
    size_t present = 0;

    (void)state;
    memset(model_bytes, 0, sizeof(model_bytes));
    for (int step = 0; step < 200000; step++) {
        struct egpu__vcuda_track_entry e;
        uint64_t key;
        size_t k;

        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        k = (size_t)(x % CHURN_KEYS);
        key = 0x7f0000000000ULL + (uint64_t)k * 0x200000ULL;
        if (model_bytes[k] == 0) {
            assert_int_equal(
                egpu__vcuda_track_put(&t, EGPU_VCUDA_PTR, key, (int)(k % 16), (k + 1) * MIB, 0), 0);
            model_bytes[k] = (k + 1) * MIB;
            present++;
        } else {
            assert_true(egpu__vcuda_track_take(&t, EGPU_VCUDA_PTR, key, &e));
            assert_int_equal(e.bytes, model_bytes[k]);
            assert_int_equal(e.card, (int)(k % 16));
            model_bytes[k] = 0;
            present--;
        }
        assert_int_equal(t.count, present);
    }
    for (size_t k = 0; k < CHURN_KEYS; k++) {
        uint64_t key = 0x7f0000000000ULL + (uint64_t)k * 0x200000ULL;
        struct egpu__vcuda_track_entry e = {0};
        bool got = egpu__vcuda_track_get(&t, EGPU_VCUDA_PTR, key, &e);

        if (got != (model_bytes[k] != 0) || (got && e.bytes != model_bytes[k]))
            fail_msg("key %zu: map says %d/%llu, model %llu", k, got, (unsigned long long)e.bytes,
                     (unsigned long long)model_bytes[k]);
    }
    egpu__vcuda_track_free(&t);
    assert_int_equal(egpu_alloc_live(), 0);
}

static void drop_context(void **state)
{
    uint64_t by_card[EGPU_VCUDA_MAX_CARDS] = {0};
    struct egpu__vcuda_track_entry e;
    struct egpu__vcuda_track t = {0};

    (void)state;
    /* 300 objects in 3 contexts (and 50 in none), interleaved */
    for (uint64_t i = 0; i < 350; i++) {
        uint64_t ctx = i < 300 ? 0xa0 + i % 3 : 0;

        assert_int_equal(egpu__vcuda_track_put(&t, i % 2 ? EGPU_VCUDA_PTR : EGPU_VCUDA_ARRAY,
                                               0x1000 + i * 64, (int)(i % 2), 2 * MIB, ctx),
                         0);
    }
    assert_int_equal(egpu__vcuda_track_drop_ctx(&t, 0xa1, by_card), 100);
    assert_int_equal(by_card[0] + by_card[1], 100 * 2 * MIB);
    assert_int_equal(t.count, 250);
    /* nothing of 0xa1 is left; everything else is */
    for (uint64_t i = 0; i < 350; i++) {
        int kind = i % 2 ? EGPU_VCUDA_PTR : EGPU_VCUDA_ARRAY;
        bool want = !(i < 300 && i % 3 == 1);

        if (egpu__vcuda_track_get(&t, kind, 0x1000 + i * 64, &e) != want)
            fail_msg("object %llu: present %d, want %d", (unsigned long long)i, !want, want);
    }
    /* context 0 means "none": never dropped */
    assert_int_equal(egpu__vcuda_track_drop_ctx(&t, 0, by_card), 0);
    egpu__vcuda_track_clear(&t);
    assert_int_equal(t.count, 0);
    assert_false(egpu__vcuda_track_get(&t, EGPU_VCUDA_PTR, 0x1000 + 64, &e));
    egpu__vcuda_track_free(&t);
    assert_int_equal(egpu_alloc_live(), 0);
}

static void out_of_memory_leaves_map(void **state)
{
    struct egpu__vcuda_track_entry e;
    struct egpu__vcuda_track t = {0};
    size_t n = 0;

    (void)state;
    egpu_alloc_fail_after(1);
    assert_int_equal(egpu__vcuda_track_put(&t, EGPU_VCUDA_PTR, 1, 0, 1, 0), -ENOMEM);
    assert_int_equal(t.count, 0);
    egpu_alloc_fail_after(0);
    /* fill up to the point of growth, then fail the growth */
    while (t.slots == NULL || (t.count + 1) * 2 <= t.mask + 1) {
        assert_int_equal(egpu__vcuda_track_put(&t, EGPU_VCUDA_PTR, 100 + n, 0, n, 0), 0);
        n++;
    }
    egpu_alloc_fail_after(1);
    assert_int_equal(egpu__vcuda_track_put(&t, EGPU_VCUDA_PTR, 99, 0, 1, 0), -ENOMEM);
    egpu_alloc_fail_after(0);
    assert_int_equal(t.count, n);
    for (size_t i = 0; i < n; i++) {
        assert_true(egpu__vcuda_track_get(&t, EGPU_VCUDA_PTR, 100 + i, &e));
        assert_int_equal(e.bytes, i);
    }
    assert_false(egpu__vcuda_track_get(&t, EGPU_VCUDA_PTR, 99, &e));
    egpu__vcuda_track_free(&t);
    assert_int_equal(egpu_alloc_live(), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(round_to_granularity),
        cmocka_unit_test(array_sizes),
        cmocka_unit_test(mipmap_sizes),
        cmocka_unit_test(put_get_take),
        cmocka_unit_test(random_churn_matches_model),
        cmocka_unit_test(drop_context),
        cmocka_unit_test(out_of_memory_leaves_map),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
