/* tests/unit/test_webhook_patch.c - the JSON Patch builder
 * (src/webhook/patch.c): RFC 6901 pointer escaping, the difference of two
 * objects as RFC 6902 operations naming only what changed (a map added
 * whole when absent), and applying them back.
 */
#include "webhook_testutil.h"

static void assert_pointer(const char *const *segs, size_t n, const char *want)
{
    struct egpu__webhook_pointer p = {0};
    struct egpu_buf b;

    for (size_t i = 0; i < n; i++)
        p.seg[p.n++] = segs[i];
    egpu_buf_init(&b, 4096);
    assert_int_equal(egpu__webhook_pointer_text(&p, &b), 0);
    assert_string_equal(egpu_buf_str(&b), want);
    egpu_buf_free(&b);
}

static void test_pointer_escaping(void **state)
{
    (void)state;
    assert_pointer((const char *[]){"metadata", "annotations", "elasticgpu.io/gpu-core-limit"}, 3,
                   "/metadata/annotations/elasticgpu.io~1gpu-core-limit");
    assert_pointer((const char *[]){"a~b"}, 1, "/a~0b");
    assert_pointer((const char *[]){"~/"}, 1, "/~0~1");
    assert_pointer((const char *[]){"a~1"}, 1, "/a~01"); /* ~ first, so ~1 is not a slash */
    assert_pointer((const char *[]){"//~~"}, 1, "/~1~1~0~0");
    assert_pointer((const char *[]){""}, 1, "/");
    assert_pointer(NULL, 0, "");
}

/* diff(old, new) at prefix is exactly want, and applying it to old gives new. */
static void assert_diff(const char *old_text, const char *new_text, const char *prefix,
                        const char *want)
{
    json_t *old = old_text ? wt_json(old_text) : NULL, *new = wt_json(new_text);
    json_t *ops = json_array(), *doc;
    struct egpu__webhook_pointer at = {0};

    if (prefix != NULL)
        at.seg[at.n++] = prefix;
    assert_int_equal(egpu__webhook_patch_diff(ops, &at, old, new), 0);
    assert_int_equal(at.n, prefix != NULL ? 1 : 0);
    wt_assert_json(ops, want);
    doc = json_pack("{s:o}", prefix ? prefix : "x", old ? json_deep_copy(old) : json_object());
    if (old != NULL && prefix != NULL) {
        json_t *want_doc = json_pack("{s:O}", prefix, new);

        assert_int_equal(egpu__webhook_patch_apply(doc, ops), 0);
        assert_true(json_equal(doc, want_doc));
        json_decref(want_doc);
    }
    json_decref(doc);
    json_decref(ops);
    json_decref(old);
    json_decref(new);
}

static void test_diff(void **state)
{
    (void)state;
    /* nothing changed: no operation */
    assert_diff("{'a':{'b':[1,2]}}", "{'a':{'b':[1,2]}}", "m", "[]");
    /* annotations absent: the whole map, never a key under a missing map */
    assert_diff("{'name':'p'}", "{'name':'p','annotations':{'elasticgpu.io/x':'1'}}", "metadata",
                "[{'op':'add','path':'/metadata/annotations','value':{'elasticgpu.io/x':'1'}}]");
    /* annotations present: one key added, one removed, the rest untouched */
    assert_diff("{'annotations':{'keep':'k','tencent.com/vcuda-core-limit':'60'}}",
                "{'annotations':{'keep':'k','elasticgpu.io/gpu-core-limit':'60'}}", "metadata",
                "[{'op':'remove','path':'/metadata/annotations/tencent.com~1vcuda-core-limit'},"
                "{'op':'add','path':'/metadata/annotations/elasticgpu.io~1gpu-core-limit',"
                "'value':'60'}]");
    /* a changed scalar and an array element: replace (add would insert) */
    assert_diff("{'s':'default-scheduler','c':[{'n':1},{'n':2}]}",
                "{'s':'elastic-gpu-scheduler','c':[{'n':1},{'n':3}]}", "spec",
                "[{'op':'replace','path':'/spec/s','value':'elastic-gpu-scheduler'},"
                "{'op':'replace','path':'/spec/c/1/n','value':3}]");
    /* arrays of another length are replaced whole */
    assert_diff("{'c':[1]}", "{'c':[1,2]}", "spec",
                "[{'op':'replace','path':'/spec/c','value':[1,2]}]");
    /* a type change */
    assert_diff("{'annotations':null}", "{'annotations':{'a':'b'}}", "metadata",
                "[{'op':'replace','path':'/metadata/annotations','value':{'a':'b'}}]");
    /* old absent: added whole */
    assert_diff(NULL, "{'annotations':{'a':'b'}}", "metadata",
                "[{'op':'add','path':'/metadata','value':{'annotations':{'a':'b'}}}]");
}

/* A difference deeper than a pointer holds replaces its subtree there. */
static void test_diff_deep(void **state)
{
    json_t *old = json_string("x"), *new = json_string("y"), *ops = json_array();
    struct egpu__webhook_pointer at = {0};
    char *text;

    (void)state;
    for (int i = 0; i < 40; i++) {
        old = json_pack("{s:o}", "k", old);
        new = json_pack("{s:o}", "k", new);
    }
    assert_int_equal(egpu__webhook_patch_diff(ops, &at, old, new), 0);
    assert_int_equal(json_array_size(ops), 1);
    text = json_dumps(ops, JSON_COMPACT);
    assert_non_null(strstr(text, "\"op\":\"replace\""));
    assert_int_equal(egpu__webhook_patch_apply(old, ops), 0);
    assert_true(json_equal(old, new));
    free(text);
    json_decref(ops);
    json_decref(old);
    json_decref(new);
}

/* Operations that do not fit the document are refused, nothing crashes. */
static void test_apply_errors(void **state)
{
    static const char *const bad[] = {
        "[{'op':'remove','path':'/nope'}]",
        "[{'op':'add','path':'/a/b/c','value':1}]",
        "[{'op':'replace','path':'/list/5','value':1}]",
        "[{'op':'add','path':'/list/01','value':1}]",
        "[{'op':'add','path':'/list/-1','value':1}]",
        "[{'op':'add','path':'','value':1}]",
        "[{'op':'add','path':'/a~2','value':1}]",
        "[{'op':'move','path':'/a','from':'/list'}]",
        "[{'op':'add','path':'/a'}]",
        "[{'path':'/a'}]",
        "{}",
    };
    json_t *doc = wt_json("{'a':1,'list':[1,2]}");

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        json_t *ops = wt_json(bad[i]);

        assert_int_equal(egpu__webhook_patch_apply(doc, ops), -EINVAL);
        json_decref(ops);
    }
    {
        json_t *ops = wt_json("[{'op':'add','path':'/list/-','value':3},"
                              "{'op':'add','path':'/list/0','value':0},"
                              "{'op':'remove','path':'/list/1'},{'op':'add','path':'/a~1b',"
                              "'value':{'x':1}},{'op':'replace','path':'/a','value':2}]");

        assert_int_equal(egpu__webhook_patch_apply(doc, ops), 0);
        wt_assert_json(doc, "{'a':2,'list':[0,2,3],'a/b':{'x':1}}");
        json_decref(ops);
    }
    json_decref(doc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pointer_escaping),
        cmocka_unit_test(test_diff),
        cmocka_unit_test(test_diff_deep),
        cmocka_unit_test(test_apply_errors),
    };

    egpu_log_level = -1;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
