/* tests/unit/test_map.c - the private string hash map (src/core/map.c).
 *
 * Checks put, get and del against their documented results, growth through
 * many inserts, and backward-shift deletion: after removing a pseudo-random
 * half of the keys (fixed seed, so every run is the same), each remaining key
 * must still be found with its value and each removed one must be gone. Also
 * checks that the map frees every block it allocates and that an allocation
 * failure during growth leaves the map as it was.
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

#define NKEYS   20000
#define KEY_MAX 24

/* Keys are borrowed by the map, so they live here for the whole test run;
 * vals[i] is the value stored for keys[i], compared by address. */
static char keys[NKEYS][KEY_MAX];
static int vals[NKEYS];

static void make_keys(void)
{
    for (int i = 0; i < NKEYS; i++) {
        snprintf(keys[i], sizeof(keys[i]), "default/pod-%d", i);
        vals[i] = i;
    }
}

/* Every key below n must map to its value when present[i], else be absent;
 * the count must equal the number present. */
static void check_contents(const struct egpu_map *m, int n, const bool *present)
{
    size_t want = 0;

    for (int i = 0; i < n; i++) {
        void *got = egpu_map_get(m, keys[i]);

        if (present[i] && got != &vals[i])
            fail_msg("key %s: got %p, want %p", keys[i], got, (void *)&vals[i]);
        if (!present[i] && got != NULL)
            fail_msg("deleted key %s still maps to %p", keys[i], got);
        want += present[i];
    }
    if (egpu_map_count(m) != want)
        fail_msg("count %zu, want %zu", egpu_map_count(m), want);
}

/* Fisher-Yates shuffle of perm[0..n) with r. */
static void shuffle(int *perm, int n, struct egpu_rng *r)
{
    for (int i = n - 1; i > 0; i--) {
        int j = (int)egpu_rng_below(r, (uint64_t)i + 1);
        int t = perm[i];

        perm[i] = perm[j];
        perm[j] = t;
    }
}

static void put_get_del(void **state)
{
    long live = egpu_alloc_live();
    struct egpu_map *m = egpu_map_new();
    char copy[KEY_MAX];
    int a = 1, b = 2, c = 3;

    (void)state;
    assert_non_null(m);
    assert_int_equal(egpu_map_count(m), 0);
    assert_null(egpu_map_get(m, "a"));
    assert_int_equal(egpu_map_put(m, "a", &a), 0);
    assert_int_equal(egpu_map_put(m, "b", &b), 0);
    assert_int_equal(egpu_map_put(m, "c", &c), 0);
    assert_int_equal(egpu_map_count(m), 3);
    assert_ptr_equal(egpu_map_get(m, "a"), &a);
    assert_ptr_equal(egpu_map_get(m, "b"), &b);
    assert_ptr_equal(egpu_map_get(m, "c"), &c);
    assert_null(egpu_map_get(m, "d"));
    assert_null(egpu_map_get(m, ""));
    /* Lookup compares contents, not the address of the key. */
    snprintf(copy, sizeof(copy), "%s", "b");
    assert_ptr_equal(egpu_map_get(m, copy), &b);

    assert_int_equal(egpu_map_del(m, copy), 0);
    assert_null(egpu_map_get(m, "b"));
    assert_int_equal(egpu_map_count(m), 2);
    assert_ptr_equal(egpu_map_get(m, "a"), &a);
    assert_ptr_equal(egpu_map_get(m, "c"), &c);
    assert_int_equal(egpu_map_del(m, "b"), -ENOENT);
    assert_int_equal(egpu_map_del(m, "zzz"), -ENOENT);
    assert_int_equal(egpu_map_count(m), 2);

    /* A deleted key can come back with a new value; the empty string is a key. */
    assert_int_equal(egpu_map_put(m, "b", &c), 0);
    assert_ptr_equal(egpu_map_get(m, "b"), &c);
    assert_int_equal(egpu_map_put(m, "", &a), 0);
    assert_ptr_equal(egpu_map_get(m, ""), &a);
    assert_int_equal(egpu_map_count(m), 4);

    egpu_map_free(m);
    egpu_map_free(NULL);
    assert_int_equal(egpu_alloc_live(), live);
}

static void put_duplicate_is_eexist(void **state)
{
    long live = egpu_alloc_live();
    struct egpu_map *m = egpu_map_new();
    char copy[KEY_MAX];
    int v1 = 1, v2 = 2;

    (void)state;
    assert_non_null(m);
    assert_int_equal(egpu_map_put(m, "node-1", &v1), 0);
    assert_int_equal(egpu_map_put(m, "node-1", &v2), -EEXIST);
    snprintf(copy, sizeof(copy), "%s", "node-1");
    assert_int_equal(egpu_map_put(m, copy, &v2), -EEXIST);
    /* The first value stays and nothing was added. */
    assert_ptr_equal(egpu_map_get(m, "node-1"), &v1);
    assert_int_equal(egpu_map_count(m), 1);
    assert_int_equal(egpu_map_del(m, "node-1"), 0);
    assert_int_equal(egpu_map_count(m), 0);
    assert_int_equal(egpu_map_del(m, "node-1"), -ENOENT);
    egpu_map_free(m);
    assert_int_equal(egpu_alloc_live(), live);
}

static void grows_through_many_inserts(void **state)
{
    static bool present[NKEYS];
    long live = egpu_alloc_live();
    struct egpu_map *m = egpu_map_new();

    (void)state;
    assert_non_null(m);
    for (int i = 0; i < NKEYS; i++) {
        assert_int_equal(egpu_map_put(m, keys[i], &vals[i]), 0);
        assert_int_equal(egpu_map_count(m), (size_t)i + 1);
        /* The newest key and the first one survive every growth. */
        assert_ptr_equal(egpu_map_get(m, keys[i]), &vals[i]);
        assert_ptr_equal(egpu_map_get(m, keys[0]), &vals[0]);
        present[i] = true;
    }
    check_contents(m, NKEYS, present);
    assert_null(egpu_map_get(m, "default/pod-20000"));
    assert_null(egpu_map_get(m, "default/pod-"));
    assert_int_equal(egpu_map_put(m, keys[12345], &vals[0]), -EEXIST);
    assert_int_equal(egpu_map_count(m), NKEYS);
    egpu_map_free(m);
    assert_int_equal(egpu_alloc_live(), live);
}

static void delete_random_half(void **state)
{
    static bool present[NKEYS];
    static int perm[NKEYS];
    long live = egpu_alloc_live();
    struct egpu_map *m = egpu_map_new();
    struct egpu_rng r;

    (void)state;
    assert_non_null(m);
    egpu_rng_seed(&r, 42);
    for (int i = 0; i < NKEYS; i++) {
        assert_int_equal(egpu_map_put(m, keys[i], &vals[i]), 0);
        present[i] = true;
        perm[i] = i;
    }
    /* Delete the first half of a random permutation, in that random order,
     * checking the whole map every 1000 deletions. */
    shuffle(perm, NKEYS, &r);
    for (int k = 0; k < NKEYS / 2; k++) {
        int i = perm[k];

        if (egpu_map_del(m, keys[i]) != 0)
            fail_msg("delete %s failed", keys[i]);
        present[i] = false;
        assert_null(egpu_map_get(m, keys[i]));
        if (k % 1000 == 999)
            check_contents(m, NKEYS, present);
    }
    check_contents(m, NKEYS, present);
    assert_int_equal(egpu_map_count(m), NKEYS / 2);
    for (int k = 0; k < NKEYS / 2; k++)
        assert_int_equal(egpu_map_del(m, keys[perm[k]]), -ENOENT);
    assert_int_equal(egpu_map_count(m), NKEYS / 2);

    /* Put the deleted half back and remove everything in another order. */
    for (int k = 0; k < NKEYS / 2; k++) {
        assert_int_equal(egpu_map_put(m, keys[perm[k]], &vals[perm[k]]), 0);
        present[perm[k]] = true;
    }
    check_contents(m, NKEYS, present);
    shuffle(perm, NKEYS, &r);
    for (int k = 0; k < NKEYS; k++) {
        assert_int_equal(egpu_map_del(m, keys[perm[k]]), 0);
        present[perm[k]] = false;
        if (k % 4000 == 3999)
            check_contents(m, NKEYS, present);
    }
    assert_int_equal(egpu_map_count(m), 0);
    check_contents(m, NKEYS, present);
    egpu_map_free(m);
    assert_int_equal(egpu_alloc_live(), live);
}

/* Keys whose probe runs wrap from the end of the smallest table to its start.
 * The map hashes with egpu_hash_str(key, 0) into 16 slots (map.c); if that
 * changes, this test still checks correctness, only less pointedly. */
static void delete_across_wraparound(void **state)
{
    enum { NWRAP = 11 }; /* 11 of 16 slots: below the 3/4 growth threshold */
    int idx[NWRAP], perm[NWRAP], n = 0;
    bool present[NKEYS] = {false};
    struct egpu_rng r;
    long live = egpu_alloc_live();

    (void)state;
    /* Five keys homed at slot 14 or 15 and six at slot 0 or 1. */
    for (int i = 0, high = 0, low = 0; i < NKEYS && n < NWRAP; i++) {
        uint64_t home = egpu_hash_str(keys[i], 0) & 15;

        if (home >= 14 && high < 5) {
            idx[n++] = i;
            high++;
        } else if (home <= 1 && low < 6) {
            idx[n++] = i;
            low++;
        }
    }
    assert_int_equal(n, NWRAP);
    egpu_rng_seed(&r, 7);
    for (int round = 0; round < 2000; round++) {
        struct egpu_map *m = egpu_map_new();

        assert_non_null(m);
        for (int k = 0; k < NWRAP; k++)
            perm[k] = idx[k];
        shuffle(perm, NWRAP, &r);
        for (int k = 0; k < NWRAP; k++) {
            assert_int_equal(egpu_map_put(m, keys[perm[k]], &vals[perm[k]]), 0);
            present[perm[k]] = true;
        }
        shuffle(perm, NWRAP, &r);
        for (int k = 0; k < NWRAP; k++) {
            assert_int_equal(egpu_map_del(m, keys[perm[k]]), 0);
            present[perm[k]] = false;
            for (int t = 0; t < NWRAP; t++) {
                void *got = egpu_map_get(m, keys[idx[t]]);

                if (got != (present[idx[t]] ? &vals[idx[t]] : NULL))
                    fail_msg("round %d: key %s wrong after deleting %s", round, keys[idx[t]],
                             keys[perm[k]]);
            }
            assert_int_equal(egpu_map_count(m), (size_t)(NWRAP - k - 1));
        }
        egpu_map_free(m);
    }
    assert_int_equal(egpu_alloc_live(), live);
}

/* Random puts and deletes on a small table, checked against a plain array. */
static void random_churn_matches_model(void **state)
{
    enum { NPOOL = 40 };
    bool present[NKEYS] = {false};
    long live = egpu_alloc_live();
    struct egpu_map *m = egpu_map_new();
    struct egpu_rng r;

    (void)state;
    assert_non_null(m);
    egpu_rng_seed(&r, 2024);
    for (int op = 0; op < 200000; op++) {
        int i = (int)egpu_rng_below(&r, NPOOL);
        int want = present[i] ? -EEXIST : 0;

        if (egpu_rng_below(&r, 2) == 0) {
            assert_int_equal(egpu_map_put(m, keys[i], &vals[i]), want);
            present[i] = true;
        } else {
            assert_int_equal(egpu_map_del(m, keys[i]), present[i] ? 0 : -ENOENT);
            present[i] = false;
        }
        if (op % 16 == 0)
            check_contents(m, NPOOL, present);
    }
    check_contents(m, NPOOL, present);
    egpu_map_free(m);
    assert_int_equal(egpu_alloc_live(), live);
}

static void new_out_of_memory(void **state)
{
    long live = egpu_alloc_live();

    (void)state;
    /* The first allocation (the map) or the second (its table) fails. */
    egpu_alloc_fail_after(1);
    assert_null(egpu_map_new());
    egpu_alloc_fail_after(2);
    assert_null(egpu_map_new());
    egpu_alloc_fail_after(0);
    assert_int_equal(egpu_alloc_live(), live);
}

/* Every put that needs memory is first tried with that allocation failing:
 * it must return -ENOMEM and leave the map as it was. Growth is the only
 * allocation a put makes, so this fails every growth on the way to NKEYS. */
static void put_out_of_memory_during_growth(void **state)
{
    static bool present[NKEYS];
    long live = egpu_alloc_live();
    struct egpu_map *m = egpu_map_new();
    int failures = 0;

    (void)state;
    assert_non_null(m);
    memset(present, 0, sizeof(present));
    for (int i = 0; i < NKEYS; i++) {
        int rc;

        egpu_alloc_fail_after(1);
        rc = egpu_map_put(m, keys[i], &vals[i]);
        egpu_alloc_fail_after(0);
        if (rc == -ENOMEM) {
            failures++;
            /* All earlier keys are still there and keys[i] is not. */
            check_contents(m, i + 1, present);
            assert_int_equal(egpu_map_del(m, keys[i]), -ENOENT);
            rc = egpu_map_put(m, keys[i], &vals[i]);
        }
        if (rc != 0)
            fail_msg("put %s: rc %d", keys[i], rc);
        present[i] = true;
    }
    /* A new map has 16 slots (map.c), so reaching 20000 keys takes 11
     * doublings; any table smaller than NKEYS must grow at least once. */
    if (failures < 1)
        fail_msg("no put allocated on the way to %d keys", NKEYS);
    check_contents(m, NKEYS, present);
    egpu_map_free(m);
    assert_int_equal(egpu_alloc_live(), live);
}

static int setup(void **state)
{
    (void)state;
    make_keys();
    egpu_alloc_fail_after(0);
    return 0;
}

/* egpu_map_next visits every entry exactly once, with its key, and then
 * returns NULL; an empty map yields nothing. */
static void iterate_every_entry_once(void **state)
{
    static char ikeys[500][16];
    static int ivalues[500];
    static unsigned char seen[500];
    struct egpu_map *m = egpu_map_new();
    const char *key;
    size_t pos = 0, count = 0;
    int *v;

    (void)state;
    assert_non_null(m);
    assert_null(egpu_map_next(m, &pos, &key));
    for (int i = 0; i < 500; i++) {
        snprintf(ikeys[i], sizeof(ikeys[i]), "k%d", i);
        ivalues[i] = i;
        assert_int_equal(egpu_map_put(m, ikeys[i], &ivalues[i]), 0);
    }
    /* Remove every third key: iteration must skip the holes. */
    for (int i = 0; i < 500; i += 3)
        assert_int_equal(egpu_map_del(m, ikeys[i]), 0);
    memset(seen, 0, sizeof(seen));
    pos = 0;
    while ((v = egpu_map_next(m, &pos, &key)) != NULL) {
        assert_int_not_equal(*v % 3, 0);
        assert_string_equal(key, ikeys[*v]);
        assert_int_equal(seen[*v], 0);
        seen[*v] = 1;
        count++;
    }
    assert_int_equal(count, egpu_map_count(m));
    assert_int_equal(count, 500 - 167);
    egpu_map_free(m);
}

/* The pipelined batch lookup gives egpu_map_get's answer for every key, in
 * order, for batches shorter and longer than its pipeline, with absent keys
 * (never put, and deleted) mixed in. */
static void get_many_matches_get(void **state)
{
    static char bkeys[3000][16];
    static int bvalues[3000];
    static const char *ask[3000];
    static void *got[3000];
    static const size_t sizes[] = {0, 1, 7, 16, 17, 33, 3000};
    static int sentinel;
    struct egpu_map *m = egpu_map_new();

    (void)state;
    assert_non_null(m);
    for (int i = 0; i < 3000; i++) {
        snprintf(bkeys[i], sizeof(bkeys[i]), "node-%d", i);
        bvalues[i] = i;
        if (i % 4 != 3)
            assert_int_equal(egpu_map_put(m, bkeys[i], &bvalues[i]), 0);
    }
    for (int i = 0; i < 3000; i += 5)
        (void)egpu_map_del(m, bkeys[i]);
    /* Ask in a scrambled order, so neighbours are not neighbours in the table. */
    for (int i = 0; i < 3000; i++)
        ask[i] = bkeys[(i * 1237) % 3000];
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        for (size_t i = 0; i < 3000; i++)
            got[i] = &sentinel;
        egpu_map_get_many(m, ask, sizes[s], got);
        for (size_t i = 0; i < sizes[s]; i++)
            assert_ptr_equal(got[i], egpu_map_get(m, ask[i]));
        if (sizes[s] < 3000)
            assert_ptr_equal(got[sizes[s]], &sentinel); /* nothing past n written */
    }
    /* The last, full batch had both present and absent keys. */
    {
        size_t absent = 0;

        for (size_t i = 0; i < 3000; i++)
            absent += got[i] == NULL;
        assert_true(absent > 0 && absent < 3000);
    }
    egpu_map_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(iterate_every_entry_once),
        cmocka_unit_test(get_many_matches_get),
        cmocka_unit_test(put_get_del),
        cmocka_unit_test(put_duplicate_is_eexist),
        cmocka_unit_test(grows_through_many_inserts),
        cmocka_unit_test(delete_random_half),
        cmocka_unit_test(delete_across_wraparound),
        cmocka_unit_test(random_churn_matches_model),
        cmocka_unit_test(new_out_of_memory),
        cmocka_unit_test(put_out_of_memory_during_growth),
    };

    return cmocka_run_group_tests(tests, setup, NULL);
}
