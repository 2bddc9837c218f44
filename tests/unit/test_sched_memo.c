/* tests/unit/test_sched_memo.c - the two caches on the extender's hot path:
 * the node-list memo of the ExtenderArgs decoder (src/scheduler/names.c,
 * used by egpu__wire_args_decode in wire.c) and the filter-reply memo
 * (src/scheduler/replies.c).
 *
 * Decoder memo: a NodeNames array that is the body's last key and whose text
 * is byte for byte one decoded before gives back the very same list object,
 * while the rest of the body (the Pod above all) is still parsed. Whitespace
 * around it does not matter; one changed byte, NodeNames not being last, a
 * later key, or anything after the closing brace does: those bodies are
 * decoded in full (or refused as malformed JSON) and nothing wrong is kept.
 * The memo holds EGPU__NAMES_KEPT lists, dropping the least recently used.
 *
 * Reply memo: whatever it answers from, the bytes equal those of
 * egpu__wire_filter_result for the same list and verdicts; it answers from
 * its copy only for the same shared list and equal verdict texts. A small
 * two-thread run checks the same under contention.
 *
 * Every test checks with egpu_alloc_live() that it leaves nothing behind.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "testutil.h"
#include "egpu/log.h"
#include "egpu/scheduler.h"
#include "names_int.h"
#include "replies_int.h"
#include "wire_int.h"

#define BODY_MAX 4096

/* ------------------------------------------------------------------------ */
/* Fixtures                                                                  */

#define NAMES_ABC  "[\"node-a\",\"node-b\",\"node-c\"]"
#define NAMES_ABD  "[\"node-a\",\"node-b\",\"node-d\"]"
#define NAMES_XY   "[\"node-x\",\"node-y\"]"
#define NAMES_Q    "[\"q1\",\"q2\",\"q3\",\"q4\"]"
#define POD_PLAIN  "{\"metadata\":{\"name\":\"plain\"},\"spec\":{}}"
#define POD_LATER  "{\"metadata\":{\"name\":\"later\",\"uid\":\"u-later\"},\"spec\":{}}"
#define MALFORMED  "ExtenderArgs: malformed JSON"
#define NOT_STRING "ExtenderArgs.NodeNames[1]: must be a string"

/* A Pod object asking core percent of one card, named name with uid uid. */
static void pod_text(char *buf, size_t cap, const char *name, const char *uid, int core)
{
    int n = snprintf(buf, cap,
                     "{\"metadata\":{\"name\":\"%s\",\"namespace\":\"ns\",\"uid\":\"%s\"},"
                     "\"spec\":{\"containers\":[{\"name\":\"c0\",\"resources\":{\"requests\":"
                     "{\"" EGPU_RES_GPU_CORE "\":\"%d\"}}}]}}",
                     name, uid, core);

    assert_true(n > 0 && (size_t)n < cap);
}

/* ExtenderArgs as kube-scheduler writes it: Pod, Nodes (null), NodeNames
 * (the array text names) last. */
static void args_text(char *buf, size_t cap, const char *name, const char *uid, int core,
                      const char *names)
{
    char pod[1024];
    int n;

    pod_text(pod, sizeof(pod), name, uid, core);
    n = snprintf(buf, cap, "{\"Pod\":%s,\"Nodes\":null,\"NodeNames\":%s}", pod, names);
    assert_true(n > 0 && (size_t)n < cap);
}

/* Decode body (NUL-terminated) through memo (may be NULL); fails the test
 * on an error. */
static void decode(const char *body, struct egpu__names_memo *memo, struct egpu__wire_args *a)
{
    struct egpu_error err = {0};

    memset(a, 0, sizeof(*a));
    if (egpu__wire_args_decode(body, strlen(body), memo, a, &err) != 0)
        fail_msg("decode %s: %s", body, err.msg);
}

/* Decode body through memo expecting rc and an error message containing
 * want, with no allocation left behind by the failed call. */
static void decode_fails(const char *body, size_t len, struct egpu__names_memo *memo, int rc,
                         const char *want)
{
    struct egpu__wire_args a;
    struct egpu_error err = {0};
    long live = egpu_alloc_live();
    int got;

    memset(&a, 0, sizeof(a));
    got = egpu__wire_args_decode(body, len, memo, &a, &err);
    if (got != rc || strstr(err.msg, want) == NULL)
        fail_msg("%.*s: rc %d (want %d), error \"%s\" (want \"%s\")", (int)len, body, got, rc,
                 err.msg, want);
    assert_int_equal(egpu_alloc_live(), live);
}

/* decode_fails for a NUL-terminated body refused as EGPU_ESYNTAX. */
static void decode_refused(const char *body, struct egpu__names_memo *memo, const char *want)
{
    decode_fails(body, strlen(body), memo, EGPU_ESYNTAX, want);
}

/* a names exactly the n names of want, in order. */
static void expect_names(const struct egpu__wire_args *a, const char *const *want, size_t n)
{
    assert_int_equal(a->n, n);
    assert_false(a->full);
    assert_non_null(a->list);
    assert_ptr_equal(a->names, a->list->names);
    assert_int_equal(a->list->n, n);
    for (size_t i = 0; i < n; i++)
        assert_string_equal(a->names[i], want[i]);
}

static const char *const abc[] = {"node-a", "node-b", "node-c"};
static const char *const abd[] = {"node-a", "node-b", "node-d"};
static const char *const xy[] = {"node-x", "node-y"};
static const char *const q[] = {"q1", "q2", "q3", "q4"};

/* ------------------------------------------------------------------------ */
/* The decoder's memo                                                        */

/* The same body twice: the second decode shares the first list. */
static void test_memo_same_body_shares_list(void **state)
{
    const long live = egpu_alloc_live();
    struct egpu__names_memo *memo = egpu__names_memo_new();
    struct egpu__wire_args a1, a2;
    char body[BODY_MAX];

    (void)state;
    assert_non_null(memo);
    args_text(body, sizeof(body), "p1", "uid-1", 30, NAMES_ABC);
    decode(body, memo, &a1);
    expect_names(&a1, abc, 3);
    /* Kept with its JSON text, the array exactly as in the body. */
    assert_non_null(a1.list->text);
    assert_int_equal(a1.list->text_len, strlen(NAMES_ABC));
    assert_memory_equal(a1.list->text, NAMES_ABC, strlen(NAMES_ABC));

    decode(body, memo, &a2);
    assert_ptr_equal(a2.list, a1.list);
    assert_ptr_equal(a2.names, a1.names);
    expect_names(&a2, abc, 3);
    assert_null(a2.items);
    assert_string_equal(a2.pod.name, "p1");
    assert_string_equal(a2.pod.ns, "ns");
    assert_string_equal(a2.pod.uid, "uid-1");
    assert_int_equal(a2.pod.req.ncontainers, 1);
    assert_int_equal(a2.pod.req.containers[0].core_milli, 300);
    /* Three holders: a1, a2 and the memo. */
    assert_int_equal(atomic_load(&a1.list->refs), 3);

    egpu__wire_args_free(&a1);
    egpu__wire_args_free(&a2);
    egpu__names_memo_free(memo);
    assert_int_equal(egpu_alloc_live(), live);
}

/* Another pod with byte-identical NodeNames: the list is shared, the pod is
 * the new one. */
static void test_memo_other_pod_same_names(void **state)
{
    const long live = egpu_alloc_live();
    struct egpu__names_memo *memo = egpu__names_memo_new();
    struct egpu__wire_args a1, a2;
    char b1[BODY_MAX], b2[BODY_MAX];

    (void)state;
    args_text(b1, sizeof(b1), "first-pod", "uid-first", 30, NAMES_ABC);
    args_text(b2, sizeof(b2), "second-pod-with-a-longer-name", "uid-second", 75, NAMES_ABC);
    decode(b1, memo, &a1);
    decode(b2, memo, &a2);
    assert_ptr_equal(a2.list, a1.list);
    expect_names(&a2, abc, 3);
    assert_string_equal(a2.pod.name, "second-pod-with-a-longer-name");
    assert_string_equal(a2.pod.uid, "uid-second");
    assert_int_equal(a2.pod.req.ncontainers, 1);
    assert_int_equal(a2.pod.req.containers[0].core_milli, 750);
    /* The first decode's pod is untouched. */
    assert_string_equal(a1.pod.name, "first-pod");
    assert_int_equal(a1.pod.req.containers[0].core_milli, 300);
    egpu__wire_args_free(&a1);
    egpu__wire_args_free(&a2);

    /* A pod refused on a hit is still refused, and leaks nothing. */
    decode_refused("{\"Pod\":{\"metadata\":{},\"spec\":{}},\"Nodes\":null,\"NodeNames\":" NAMES_ABC
                   "}",
                   memo, "metadata.name");
    decode_refused("{\"Nodes\":null,\"NodeNames\":" NAMES_ABC "}", memo, "ExtenderArgs.Pod");
    egpu__names_memo_free(memo);
    assert_int_equal(egpu_alloc_live(), live);
}

/* Whitespace around ':' and before '}' still shares; one changed byte does
 * not, and the new names are decoded. */
static void test_memo_whitespace_and_one_byte_change(void **state)
{
    const long live = egpu_alloc_live();
    struct egpu__names_memo *memo = egpu__names_memo_new();
    struct egpu__wire_args a1, a2, a3, a4;
    char body[BODY_MAX];
    static const char spaced[] =
        "{\"Pod\":" POD_PLAIN ",\"Nodes\":null,\"NodeNames\" : \t" NAMES_ABC " \n}\n";
    static const char pretty[] = "{\n  \"Pod\": " POD_PLAIN ",\n  \"Nodes\": null,\n"
                                 "  \"NodeNames\"\r\n:\n" NAMES_ABC "\r\n}";

    (void)state;
    args_text(body, sizeof(body), "p1", "u1", 30, NAMES_ABC);
    decode(body, memo, &a1);
    decode(spaced, memo, &a2);
    assert_ptr_equal(a2.list, a1.list);
    assert_string_equal(a2.pod.name, "plain");
    decode(pretty, memo, &a3);
    assert_ptr_equal(a3.list, a1.list);
    assert_string_equal(a3.pod.name, "plain");

    /* node-c -> node-d: one byte differs. */
    args_text(body, sizeof(body), "p1", "u1", 30, NAMES_ABD);
    decode(body, memo, &a4);
    assert_ptr_not_equal(a4.list, a1.list);
    expect_names(&a4, abd, 3);
    expect_names(&a1, abc, 3); /* the kept list is not changed by it */
    egpu__wire_args_free(&a4);

    /* Whitespace inside the array is part of the text: decoded again, and right. */
    decode("{\"Pod\":" POD_PLAIN ",\"NodeNames\":[ \"node-a\",\"node-b\",\"node-c\"]}", memo, &a4);
    assert_ptr_not_equal(a4.list, a1.list);
    expect_names(&a4, abc, 3);
    egpu__wire_args_free(&a4);

    /* A prefix of a kept text is another list. */
    decode("{\"Pod\":" POD_PLAIN ",\"NodeNames\":[\"node-a\",\"node-b\"]}", memo, &a4);
    assert_ptr_not_equal(a4.list, a1.list);
    expect_names(&a4, abc, 2);
    egpu__wire_args_free(&a4);

    egpu__wire_args_free(&a1);
    egpu__wire_args_free(&a2);
    egpu__wire_args_free(&a3);
    egpu__names_memo_free(memo);
    assert_int_equal(egpu_alloc_live(), live);
}

/* NodeNames followed by another key: decoded in full, never kept, and never
 * answered from a list kept with the same text. */
static void test_memo_nodenames_not_last(void **state)
{
    const long live = egpu_alloc_live();
    struct egpu__names_memo *memo = egpu__names_memo_new();
    struct egpu__wire_args a1, a2, a3, a4, a5;
    static const char not_last[] =
        "{\"Pod\":" POD_PLAIN ",\"NodeNames\":" NAMES_ABC ",\"Nodes\":null}";
    static const char last[] = "{\"Pod\":" POD_PLAIN ",\"Nodes\":null,\"NodeNames\":" NAMES_ABC "}";

    (void)state;
    decode(not_last, memo, &a1);
    expect_names(&a1, abc, 3);
    assert_string_equal(a1.pod.name, "plain");
    assert_null(a1.list->text);
    decode(not_last, memo, &a2);
    expect_names(&a2, abc, 3);
    assert_null(a2.list->text);
    assert_ptr_not_equal(a2.list, a1.list);

    /* Nothing was kept: the first last-key decode is new, the second shares it. */
    decode(last, memo, &a3);
    assert_ptr_not_equal(a3.list, a1.list);
    assert_ptr_not_equal(a3.list, a2.list);
    assert_non_null(a3.list->text);
    decode(last, memo, &a4);
    assert_ptr_equal(a4.list, a3.list);

    /* Now the text is kept: not last, it is still decoded in full. */
    decode(not_last, memo, &a5);
    assert_ptr_not_equal(a5.list, a3.list);
    assert_null(a5.list->text);
    expect_names(&a5, abc, 3);
    assert_string_equal(a5.pod.name, "plain");

    egpu__wire_args_free(&a1);
    egpu__wire_args_free(&a2);
    egpu__wire_args_free(&a3);
    egpu__wire_args_free(&a4);
    egpu__wire_args_free(&a5);
    egpu__names_memo_free(memo);
    assert_int_equal(egpu_alloc_live(), live);
}

/* The text of a kept list followed by what no JSON object ends with: refused
 * as malformed JSON, with nothing left behind; a later key is decoded. */
static void test_memo_garbage_after_kept_text(void **state)
{
    const long live = egpu_alloc_live();
    struct egpu__names_memo *memo = egpu__names_memo_new();
    struct egpu__wire_args a1, a2;
    char body[BODY_MAX], bad[BODY_MAX + 16];
    static const char *const tails[] = {"}x", "}}", " ,}", "",     "} {}", "]}",     "}0",
                                        "}[", ",}", ":}",  " } ]", "}\"",  "}\"junk"};
    long kept_live;

    /* "}\"" leaves a string open after the object, which yajl alone
     * accepts: the decoder checks that nothing follows the object. */
    (void)state;
    args_text(body, sizeof(body), "p1", "u1", 30, NAMES_ABC);
    decode(body, memo, &a1);
    kept_live = egpu_alloc_live();
    for (size_t i = 0; i < sizeof(tails) / sizeof(tails[0]); i++) {
        int n;

        /* The kept body up to and including its array, then the tail. */
        n = snprintf(bad, sizeof(bad), "%.*s%s", (int)(strlen(body) - 1), body, tails[i]);
        assert_true(n > 0 && (size_t)n < sizeof(bad));
        decode_fails(bad, (size_t)n, memo, EGPU_ESYNTAX, MALFORMED);
    }
    /* Cut short by len rather than by the text: every length. */
    for (size_t len = 0; len < strlen(body); len++)
        decode_fails(body, len, memo, EGPU_ESYNTAX, "ExtenderArgs");
    assert_int_equal(egpu_alloc_live(), kept_live);

    /* The refusals did not disturb the memo: the kept body still shares. */
    decode(body, memo, &a2);
    assert_ptr_equal(a2.list, a1.list);
    egpu__wire_args_free(&a2);

    /* A later key after the kept text: that Pod counts (last key wins). */
    {
        char pod[1024];
        int n;

        pod_text(pod, sizeof(pod), "earlier", "u-earlier", 30);
        n = snprintf(bad, sizeof(bad), "{\"Pod\":%s,\"Nodes\":null,\"NodeNames\":%s,\"Pod\":%s}",
                     pod, NAMES_ABC, POD_LATER);
        assert_true(n > 0 && (size_t)n < sizeof(bad));
        decode(bad, memo, &a2);
        assert_string_equal(a2.pod.name, "later");
        assert_string_equal(a2.pod.uid, "u-later");
        assert_int_equal(a2.pod.req.ncontainers, 0);
        expect_names(&a2, abc, 3);
        assert_ptr_not_equal(a2.list, a1.list);
        assert_null(a2.list->text);
        egpu__wire_args_free(&a2);
    }
    /* A later NodeNames after the kept text: those names count. */
    decode("{\"Pod\":" POD_PLAIN ",\"NodeNames\":" NAMES_ABC ",\"NodeNames\":" NAMES_XY "}", memo,
           &a2);
    expect_names(&a2, xy, 2);
    egpu__wire_args_free(&a2);
    /* A later malformed key after the kept text: refused. */
    decode_refused("{\"Pod\":" POD_PLAIN ",\"NodeNames\":" NAMES_ABC ",\"NodeNames\":[\"a\",7]}",
                   memo, NOT_STRING);

    egpu__wire_args_free(&a1);
    egpu__names_memo_free(memo);
    assert_int_equal(egpu_alloc_live(), live);
}

/* A list with a name that is not a string is refused, and not kept: the
 * same body is refused again. */
static void test_memo_invalid_name_not_kept(void **state)
{
    const long live = egpu_alloc_live();
    struct egpu__names_memo *memo = egpu__names_memo_new();
    struct egpu__wire_args a1, a2;
    char good[BODY_MAX], body[BODY_MAX];

    (void)state;
    args_text(good, sizeof(good), "p1", "u1", 30, NAMES_ABC);
    decode(good, memo, &a1);
    args_text(body, sizeof(body), "p1", "u1", 30, "[\"node-a\",7,\"node-c\"]");
    for (int round = 0; round < 3; round++)
        decode_refused(body, memo, NOT_STRING);
    args_text(body, sizeof(body), "p1", "u1", 30, "[\"node-a\",null]");
    for (int round = 0; round < 2; round++)
        decode_refused(body, memo, NOT_STRING);
    /* The good list is still kept (the refused ones took no place). */
    decode(good, memo, &a2);
    assert_ptr_equal(a2.list, a1.list);
    egpu__wire_args_free(&a1);
    egpu__wire_args_free(&a2);
    egpu__names_memo_free(memo);
    assert_int_equal(egpu_alloc_live(), live);
}

/* EGPU__NAMES_KEPT (2) lists are kept; the least recently used goes first:
 * A, B, A (shared), C drops B, not A. */
static void test_memo_keeps_most_recently_used(void **state)
{
    const long live = egpu_alloc_live();
    struct egpu__names_memo *memo = egpu__names_memo_new();
    struct egpu__wire_args a1, b1, a2, c1, a3, b2;
    char ba[BODY_MAX], bb[BODY_MAX], bc[BODY_MAX];

    (void)state;
    assert_int_equal(EGPU__NAMES_KEPT, 2);
    args_text(ba, sizeof(ba), "pa", "ua", 30, NAMES_ABC);
    args_text(bb, sizeof(bb), "pb", "ub", 40, NAMES_XY);
    args_text(bc, sizeof(bc), "pc", "uc", 50, NAMES_Q);
    decode(ba, memo, &a1);
    decode(bb, memo, &b1);
    decode(ba, memo, &a2);
    assert_ptr_equal(a2.list, a1.list); /* both kept */
    decode(bc, memo, &c1);
    expect_names(&c1, q, 4);
    /* A was used after B: A is still kept, B is the one dropped. */
    decode(ba, memo, &a3);
    assert_ptr_equal(a3.list, a1.list);
    assert_string_equal(a3.pod.name, "pa");
    decode(bb, memo, &b2);
    assert_ptr_not_equal(b2.list, b1.list);
    expect_names(&b2, xy, 2);
    assert_string_equal(b2.pod.name, "pb");

    egpu__wire_args_free(&a1);
    egpu__wire_args_free(&b1);
    egpu__wire_args_free(&a2);
    egpu__wire_args_free(&c1);
    egpu__wire_args_free(&a3);
    egpu__wire_args_free(&b2);
    egpu__names_memo_free(memo);
    assert_int_equal(egpu_alloc_live(), live);
}

/* Only two lists at a time, without any hit in between: the oldest goes. */
static void test_memo_drops_oldest(void **state)
{
    const long live = egpu_alloc_live();
    struct egpu__names_memo *memo = egpu__names_memo_new();
    struct egpu__wire_args a1, b1, c1, a2, c2;
    char ba[BODY_MAX], bb[BODY_MAX], bc[BODY_MAX];

    (void)state;
    args_text(ba, sizeof(ba), "pa", "ua", 30, NAMES_ABC);
    args_text(bb, sizeof(bb), "pb", "ub", 40, NAMES_XY);
    args_text(bc, sizeof(bc), "pc", "uc", 50, NAMES_Q);
    decode(ba, memo, &a1);
    decode(bb, memo, &b1);
    decode(bc, memo, &c1);
    decode(bc, memo, &c2);
    assert_ptr_equal(c2.list, c1.list);
    decode(ba, memo, &a2);
    assert_ptr_not_equal(a2.list, a1.list);
    expect_names(&a2, abc, 3);
    /* The dropped list lives on while a request holds it. */
    expect_names(&a1, abc, 3);
    egpu__wire_args_free(&a1);
    egpu__wire_args_free(&b1);
    egpu__wire_args_free(&c1);
    egpu__wire_args_free(&a2);
    egpu__wire_args_free(&c2);
    egpu__names_memo_free(memo);
    assert_int_equal(egpu_alloc_live(), live);
}

/* Hits, misses and refusals mixed; the memo freed before the requests
 * holding its lists: every block comes back. */
static void test_memo_no_leaks(void **state)
{
    const long live = egpu_alloc_live();
    struct egpu__names_memo *memo = egpu__names_memo_new();
    struct egpu__wire_args held[8];
    char body[BODY_MAX];
    size_t nheld = 0;

    (void)state;
    for (int round = 0; round < 4; round++) {
        args_text(body, sizeof(body), "p", "u", 10 + round, round % 2 ? NAMES_XY : NAMES_ABC);
        decode(body, memo, &held[nheld++]);
        decode(body, memo, &held[nheld++]);
        decode_fails(body, strlen(body) - 1, memo, EGPU_ESYNTAX, MALFORMED);
    }
    egpu__names_memo_free(memo);
    /* The lists outlive the memo. */
    expect_names(&held[0], abc, 3);
    expect_names(&held[2], xy, 2);
    for (size_t i = 0; i < nheld; i++)
        egpu__wire_args_free(&held[i]);
    assert_int_equal(egpu_alloc_live(), live);

    /* A NULL memo: nothing kept, nothing shared. */
    args_text(body, sizeof(body), "p", "u", 10, NAMES_ABC);
    decode(body, NULL, &held[0]);
    decode(body, NULL, &held[1]);
    assert_ptr_not_equal(held[0].list, held[1].list);
    assert_int_equal(atomic_load(&held[0].list->refs), 1);
    egpu__wire_args_free(&held[0]);
    egpu__wire_args_free(&held[1]);
    egpu__names_memo_free(NULL);
    assert_int_equal(egpu_alloc_live(), live);
}

/* ------------------------------------------------------------------------ */
/* The reply memo                                                            */

/* egpu__wire_filter_result's text for a and why (caller free()s). */
static char *encoded(const struct egpu__wire_args *a, const char *const *why)
{
    struct egpu_buf b;
    char *text;

    egpu_buf_init(&b, 16 << 20);
    assert_int_equal(egpu__wire_filter_result(&b, a, why), 0);
    text = strdup(egpu_buf_str(&b));
    egpu_buf_free(&b);
    assert_non_null(text);
    return text;
}

/* Check that egpu__replies_filter(m, a, why) appends exactly want to a
 * buffer already holding a prefix. */
static void expect_reply(struct egpu__replies *m, const struct egpu__wire_args *a,
                         const char *const *why, const char *want)
{
    static const char prefix[] = "HTTP-prefix:";
    struct egpu_buf b;

    egpu_buf_init(&b, 16 << 20);
    assert_int_equal(egpu_buf_append(&b, prefix, strlen(prefix)), 0);
    assert_int_equal(egpu__replies_filter(m, &b, a, why, NULL, 0), 0);
    assert_true(b.len >= strlen(prefix));
    assert_memory_equal(b.data, prefix, strlen(prefix));
    if (b.len - strlen(prefix) != strlen(want) ||
        memcmp(b.data + strlen(prefix), want, strlen(want)) != 0)
        fail_msg("reply %s, want %s", egpu_buf_str(&b) + strlen(prefix), want);
    egpu_buf_free(&b);
}

/* The same list and verdicts: a miss, then a hit, both as encoded. */
static void test_replies_match_encoder(void **state)
{
    const long live = egpu_alloc_live();
    struct egpu__names_memo *memo = egpu__names_memo_new();
    struct egpu__replies *m = egpu__replies_new();
    const char *const why[] = {NULL, "node-b: no card with 30% free", NULL};
    const char *const none[] = {NULL, NULL, NULL};
    const char *const all[] = {"x", "y \"quoted\"", "caf\xc3\xa9"};
    struct egpu__wire_args a;
    char body[BODY_MAX], *want;

    (void)state;
    assert_non_null(m);
    args_text(body, sizeof(body), "p", "u", 30, NAMES_ABC);
    decode(body, memo, &a);
    assert_non_null(a.list->text);
    want = encoded(&a, why);
    assert_non_null(strstr(want, "node-b: no card with 30% free"));
    for (int round = 0; round < 3; round++)
        expect_reply(m, &a, why, want);
    free(want);
    /* Every node passing, every node refused: the same. */
    want = encoded(&a, none);
    for (int round = 0; round < 2; round++)
        expect_reply(m, &a, none, want);
    free(want);
    want = encoded(&a, all);
    for (int round = 0; round < 2; round++)
        expect_reply(m, &a, all, want);
    free(want);
    egpu__wire_args_free(&a);
    egpu__replies_free(m);
    egpu__names_memo_free(memo);
    assert_int_equal(egpu_alloc_live(), live);
}

/* The same list with other verdicts: a fresh reply each time they differ. */
static void test_replies_follow_verdicts(void **state)
{
    const long live = egpu_alloc_live();
    struct egpu__names_memo *memo = egpu__names_memo_new();
    struct egpu__replies *m = egpu__replies_new();
    const char *const w1[] = {NULL, "busy", NULL};
    const char *const w2[] = {NULL, "busy", "busy"}; /* one more refused */
    const char *const w3[] = {NULL, "bused", NULL};  /* another reason, same node */
    const char *const w4[] = {NULL, "bus", NULL};    /* a shorter one */
    const char *const w5[] = {"busy", NULL, NULL};   /* another node */
    char copy[] = "busy";                            /* equal text, another address */
    const char *const w6[] = {NULL, copy, NULL};
    const char *const *seq[] = {w1, w1, w2, w2, w1, w3, w3, w4, w1, w6, w6, w1, w5, w6};
    struct egpu__wire_args a;
    char body[BODY_MAX], *want1;

    (void)state;
    args_text(body, sizeof(body), "p", "u", 30, NAMES_ABC);
    decode(body, memo, &a);
    want1 = encoded(&a, w1);
    for (size_t i = 0; i < sizeof(seq) / sizeof(seq[0]); i++) {
        char *want = encoded(&a, seq[i]);

        /* The verdicts differ, so do the texts (except for the equal copy). */
        if (seq[i] == w6 || seq[i] == w1)
            assert_string_equal(want, want1);
        else
            assert_string_not_equal(want, want1);
        expect_reply(m, &a, seq[i], want);
        free(want);
    }
    /* The equal copy changed afterwards: the reply follows the new text. */
    copy[3] = 't';
    {
        char *want = encoded(&a, w6);

        assert_non_null(strstr(want, "\"bust\""));
        expect_reply(m, &a, w6, want);
        free(want);
    }
    free(want1);
    egpu__wire_args_free(&a);
    egpu__replies_free(m);
    egpu__names_memo_free(memo);
    assert_int_equal(egpu_alloc_live(), live);
}

/* Another list object is never answered from the kept reply: not with the
 * same names and no text, not with other names of the same count, not in
 * the NodeList form. */
static void test_replies_other_list(void **state)
{
    const long live = egpu_alloc_live();
    struct egpu__names_memo *memo = egpu__names_memo_new();
    struct egpu__replies *m = egpu__replies_new();
    const char *const why[] = {NULL, "no", NULL};
    struct egpu__wire_args a, same_names, other, full;
    char body[BODY_MAX], *want_a, *want;
    static const char nodelist[] =
        "{\"Pod\":" POD_PLAIN ",\"NodeNames\":null,\"Nodes\":{\"items\":[{\"metadata\":"
        "{\"name\":\"node-a\"}},{\"metadata\":{\"name\":\"node-b\"}},{\"metadata\":"
        "{\"name\":\"node-c\"}}]}}";

    (void)state;
    args_text(body, sizeof(body), "p", "u", 30, NAMES_ABC);
    decode(body, memo, &a);
    want_a = encoded(&a, why);
    expect_reply(m, &a, why, want_a);

    /* Same names, decoded without the memo: its own object. */
    decode(body, NULL, &same_names);
    assert_ptr_not_equal(same_names.list, a.list);
    expect_reply(m, &same_names, why, want_a);
    expect_reply(m, &a, why, want_a);
    egpu__wire_args_free(&same_names);
    /* Same names, not the last key: no text, its own object. */
    decode("{\"Pod\":" POD_PLAIN ",\"NodeNames\":" NAMES_ABC ",\"Nodes\":null}", memo, &same_names);
    assert_null(same_names.list->text);
    assert_ptr_not_equal(same_names.list, a.list);
    expect_reply(m, &same_names, why, want_a);
    expect_reply(m, &a, why, want_a);
    egpu__wire_args_free(&same_names);
    /* Other names, as many, no text: its own reply. */
    decode("{\"Pod\":" POD_PLAIN ",\"NodeNames\":[\"node-1\",\"node-2\",\"node-3\"],"
           "\"Nodes\":null}",
           memo, &same_names);
    assert_null(same_names.list->text);
    want = encoded(&same_names, why);
    assert_string_not_equal(want, want_a);
    expect_reply(m, &same_names, why, want);
    expect_reply(m, &a, why, want_a);
    expect_reply(m, &same_names, why, want);
    free(want);

    /* Other names, as many, with text: its own reply. */
    args_text(body, sizeof(body), "p", "u", 30, "[\"node-1\",\"node-2\",\"node-3\"]");
    decode(body, memo, &other);
    assert_non_null(other.list->text);
    want = encoded(&other, why);
    assert_string_not_equal(want, want_a);
    expect_reply(m, &other, why, want);
    expect_reply(m, &a, why, want_a);
    expect_reply(m, &other, why, want);
    free(want);

    /* The NodeList form echoes Node objects: never the kept NodeNames reply. */
    decode(nodelist, memo, &full);
    assert_true(full.full);
    want = encoded(&full, why);
    assert_non_null(strstr(want, "\"items\""));
    expect_reply(m, &a, why, want_a);
    expect_reply(m, &full, why, want);
    expect_reply(m, &a, why, want_a);
    free(want);

    free(want_a);
    egpu__wire_args_free(&a);
    egpu__wire_args_free(&same_names);
    egpu__wire_args_free(&other);
    egpu__wire_args_free(&full);
    egpu__replies_free(m);
    egpu__names_memo_free(memo);
    assert_int_equal(egpu_alloc_live(), live);
}

/* A NULL memo always encodes; a kept reply outlives the request's args. */
static void test_replies_null_memo_and_lifetimes(void **state)
{
    const long live = egpu_alloc_live();
    struct egpu__names_memo *memo = egpu__names_memo_new();
    struct egpu__replies *m = egpu__replies_new();
    const char *const w1[] = {NULL, "a reason", NULL};
    const char *const w2[] = {"r0", "r1", "r2"};
    struct egpu__wire_args a, b;
    char body[BODY_MAX], *want1, *want2;

    (void)state;
    args_text(body, sizeof(body), "p", "u", 30, NAMES_ABC);
    decode(body, memo, &a);
    want1 = encoded(&a, w1);
    want2 = encoded(&a, w2);
    for (int round = 0; round < 2; round++) {
        expect_reply(NULL, &a, w1, want1);
        expect_reply(NULL, &a, w2, want2);
    }
    egpu__replies_free(NULL);

    /* Kept, then the request and the names memo go away: the reply memo's
     * reference keeps the list, and a new decode (new object) is not
     * answered from it. */
    expect_reply(m, &a, w1, want1);
    egpu__wire_args_free(&a);
    egpu__names_memo_free(memo);
    memo = egpu__names_memo_new();
    decode(body, memo, &b);
    expect_reply(m, &b, w1, want1);
    expect_reply(m, &b, w1, want1);
    expect_reply(m, &b, w2, want2);
    egpu__wire_args_free(&b);
    free(want1);
    free(want2);
    egpu__replies_free(m);
    egpu__names_memo_free(memo);
    assert_int_equal(egpu_alloc_live(), live);
}

#define RACE_CALLS 200

struct racer {
    struct egpu__replies *m;
    const struct egpu__wire_args *a;
    const char *const *why[2];
    const char *want[2];
    int first; /* the pattern of the first call */
    int bad;   /* replies not equal to their pattern's text */
};

static void *race(void *arg)
{
    struct racer *r = arg;
    struct egpu_buf b;

    egpu_buf_init(&b, 16 << 20);
    for (int i = 0; i < RACE_CALLS; i++) {
        int k = (i + r->first) % 2;

        egpu_buf_reset(&b);
        if (egpu__replies_filter(r->m, &b, r->a, r->why[k], NULL, 0) != 0 ||
            b.len != strlen(r->want[k]) || memcmp(b.data, r->want[k], b.len) != 0)
            r->bad++;
    }
    egpu_buf_free(&b);
    return NULL;
}

/* Two threads, two verdict patterns on one list, alternating: every reply
 * is its own pattern's text. */
static void test_replies_two_threads(void **state)
{
    const long live = egpu_alloc_live();
    struct egpu__names_memo *memo = egpu__names_memo_new();
    struct egpu__replies *m = egpu__replies_new();
    const char *const w0[] = {NULL, "busy", NULL};
    const char *const w1[] = {"full", NULL, "too small"};
    struct egpu__wire_args a;
    char body[BODY_MAX], *want0, *want1;
    struct racer r[2];
    pthread_t t[2];

    (void)state;
    args_text(body, sizeof(body), "p", "u", 30, NAMES_ABC);
    decode(body, memo, &a);
    want0 = encoded(&a, w0);
    want1 = encoded(&a, w1);
    for (int i = 0; i < 2; i++)
        r[i] = (struct racer){
            .m = m, .a = &a, .why = {w0, w1}, .want = {want0, want1}, .first = i, .bad = 0};
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&t[i], NULL, race, &r[i]), 0);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(pthread_join(t[i], NULL), 0);
        assert_int_equal(r[i].bad, 0);
    }
    free(want0);
    free(want1);
    egpu__wire_args_free(&a);
    egpu__replies_free(m);
    egpu__names_memo_free(memo);
    assert_int_equal(egpu_alloc_live(), live);
}

/* Replies made from the kept one by node: 300 filter calls over the same
 * 40 nodes, each naming them in another order, with refusals (and their
 * texts) changing now and then, a name with no node, a node named twice
 * and, every 50th call, a new node-set stamp (the slots mean other nodes:
 * nothing may be borrowed). Every reply is byte for byte what
 * egpu__wire_filter_result writes, and most are made from the one before. */
static void test_replies_by_node(void **state)
{
    enum { N = 40, STEPS = 300 };
    const long live = egpu_alloc_live();
    struct egpu__replies *m = egpu__replies_new();
    char names[N][32];
    const char *list[N], *why[N], *refused[N];
    static const char *const reasons[] = {"no card with 30% free", "CPU: 4000m asked, 0 free",
                                          "caf\xc3\xa9 \"quoted\" reason"};
    uint32_t slots[N];
    int order[N];
    uint64_t members = 3, given;
    struct egpu_rng rng;
    int stamps = 0;

    (void)state;
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof(names[i]), i % 7 ? "node-%02d" : "n\\u00e9-\"%02d\"", i);
        refused[i] = NULL;
        order[i] = i;
    }
    egpu_rng_seed(&rng, 5);
    for (int step = 0; step < STEPS; step++) {
        struct egpu__wire_args a = {.n = N, .names = list};
        struct egpu_buf got;
        char *want;

        if (step % 50 == 49) {
            members++;
            stamps++;
        }
        for (int c = (int)egpu_rng_below(&rng, 3); c > 0; c--) {
            int i = (int)egpu_rng_below(&rng, N);

            refused[i] = refused[i] ? NULL : reasons[egpu_rng_below(&rng, 3)];
        }
        for (int i = N - 1; i > 0; i--) {
            int k = (int)egpu_rng_below(&rng, (uint32_t)i + 1), t = order[i];

            order[i] = order[k];
            order[k] = t;
        }
        for (int i = 0; i < N; i++) {
            list[i] = names[order[i]];
            slots[i] = (uint32_t)order[i];
            why[i] = refused[order[i]];
        }
        list[5] = "no-such-node";
        slots[5] = EGPU_NO_SLOT;
        why[5] = "node unknown";
        list[6] = list[4]; /* a node twice */
        slots[6] = slots[4];
        why[6] = why[4];
        want = encoded(&a, why);
        egpu_buf_init(&got, 1 << 20);
        assert_int_equal(egpu__replies_filter(m, &got, &a, why, slots, members), 0);
        assert_int_equal(got.len, strlen(want));
        assert_memory_equal(got.data, want, got.len);
        egpu_buf_free(&got);
        free(want);
    }
    /* All but the first call and the new stamps are made from the last. */
    given = egpu__replies_given(m);
    assert_true(given >= (uint64_t)(STEPS - 1 - stamps - 10));
    assert_true(given <= (uint64_t)(STEPS - 1 - stamps));
    egpu__replies_free(m);
    assert_int_equal(egpu_alloc_live(), live);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_memo_same_body_shares_list),
        cmocka_unit_test(test_memo_other_pod_same_names),
        cmocka_unit_test(test_memo_whitespace_and_one_byte_change),
        cmocka_unit_test(test_memo_nodenames_not_last),
        cmocka_unit_test(test_memo_garbage_after_kept_text),
        cmocka_unit_test(test_memo_invalid_name_not_kept),
        cmocka_unit_test(test_memo_keeps_most_recently_used),
        cmocka_unit_test(test_memo_drops_oldest),
        cmocka_unit_test(test_memo_no_leaks),
        cmocka_unit_test(test_replies_match_encoder),
        cmocka_unit_test(test_replies_follow_verdicts),
        cmocka_unit_test(test_replies_other_list),
        cmocka_unit_test(test_replies_null_memo_and_lifetimes),
        cmocka_unit_test(test_replies_two_threads),
        cmocka_unit_test(test_replies_by_node),
    };

    egpu_log_level = EGPU_LOG_ERROR;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
