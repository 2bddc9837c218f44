/* tests/fuzz/fuzz_list_decode.c - the streaming list decoder
 * (src/kube/list_decode.c): egpu__kube_list_decode and
 * egpu__kube_event_decode_with (its paths compiled by
 * egpu__kube_event_keep_new) against json_loadb then egpu_kube_keep on each
 * item, the decode-whole path they replace for informers with a keep-spec.
 *
 * Input: byte 0 picks the keep-spec (mod 3: the scheduler's pod paths, paths
 * through values of the wrong type, none); bit 7 decodes a watch event
 * (its "object") instead of a List page ("items"); the rest is the body.
 *
 * Invariants: when both decode, the values are equal (json_equal); a body
 * refused whole is refused here (the one known exception, an escaped lone
 * UTF-16 surrogate that yajl turns into '?', is not compared); a refusal is
 * EGPU_ESYNTAX with a message and no value; nothing leaks.
 */
#include <jansson.h>

#include "fuzz.h"
#include "egpu/kube.h"
#include "kube_int.h"

static const char *const pods[] = {"metadata.uid",
                                   "metadata.annotations",
                                   "metadata.deletionTimestamp",
                                   "spec.nodeName",
                                   "spec.overhead",
                                   "spec.containers[].name",
                                   "spec.containers[].resources",
                                   "spec.initContainers[].name",
                                   "status.phase",
                                   NULL};
static const char *const odd[] = {
    "spec", "spec.containers[].name", "metadata.labels", "spec.containers.name", "status.a[].b[].c",
    NULL};

/* Whether the body has a "\u" escape of a UTF-16 surrogate. */
static bool has_surrogate_escape(const char *s, size_t len)
{
    for (size_t i = 0; i + 5 < len; i++) {
        if (s[i] == '\\' && s[i + 1] == 'u' && (s[i + 2] == 'd' || s[i + 2] == 'D') &&
            strchr("89abAB", s[i + 3]) != NULL && s[i + 3] != '\0')
            return true;
    }
    return false;
}

static json_t *whole_then_keep(const char *body, size_t len, const char *const *keep, bool event)
{
    json_t *doc = json_loadb(body, len, EGPU_KUBE_JSON_FLAGS, NULL), *items;

    if (doc == NULL || !json_is_object(doc))
        return doc;
    if (event) {
        json_t *obj = json_object_get(doc, "object");

        if (obj != NULL)
            FUZZ_CHECK(json_object_set_new(doc, "object", egpu_kube_keep(obj, keep)) == 0);
        return doc;
    }
    items = json_object_get(doc, "items");
    for (size_t i = 0; json_is_array(items) && i < json_array_size(items); i++) {
        json_t *t = egpu_kube_keep(json_array_get(items, i), keep);

        FUZZ_CHECK(t != NULL);
        FUZZ_CHECK(json_array_set_new(items, i, t) == 0);
    }
    return doc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *const *const specs[] = {pods, odd, NULL};
    struct egpu_error err = {0};
    const char *const *keep;
    const char *body;
    long live = egpu_alloc_live();
    json_t *a, *b = NULL;
    bool event;
    size_t len;
    int rc;

    if (size < 1)
        return 0;
    keep = specs[(data[0] & 0x7f) % 3];
    event = (data[0] & 0x80) != 0;
    body = (const char *)data + 1;
    len = size - 1;
    if (event) {
        struct egpu__kube_event_keep *k = NULL;

        FUZZ_CHECK(egpu__kube_event_keep_new(keep, &k, &err) == 0);
        rc = egpu__kube_event_decode_with(k, body, len, &b, &err);
        egpu__kube_event_keep_free(k);
    } else {
        rc = egpu__kube_list_decode(body, len, keep, &b, &err);
    }
    if (rc != 0) {
        FUZZ_CHECK(rc == EGPU_ESYNTAX);
        FUZZ_CHECK(b == NULL);
        FUZZ_CHECK(err.msg[0] != '\0');
    }
    if (!has_surrogate_escape(body, len)) {
        a = whole_then_keep(body, len, keep, event);
        FUZZ_CHECK((a == NULL) == (rc != 0));
        FUZZ_CHECK(a == NULL || json_equal(a, b));
        json_decref(a);
    }
    json_decref(b);
    FUZZ_CHECK(egpu_alloc_live() == live);
    return 0;
}
