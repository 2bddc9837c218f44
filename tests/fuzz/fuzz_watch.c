/* tests/fuzz/fuzz_watch.c - the watch-event decoder (src/kube/watch.c):
 * egpu__kube_stream_init/feed/finish on a body cut into chunks at places the
 * input chooses, with each event handed to the scheduler's cache the way
 * its informers do (src/scheduler/api.c), so what a tenant can put in a Pod
 * reaches the pod parser and the cache too.
 *
 * Input: byte 0 = flags (bit 0: lines bound cut to 256 bytes, so the
 * too-long-line path runs; bit 1: events decoded through a keep-spec, as
 * the scheduler's informers decode them, with a BOOKMARK or ERROR decoded
 * again whole; bits 4..7: the number of chunk lengths), then that
 * many bytes, each a chunk length (1..256); the rest is the body, fed in
 * chunks of those lengths and then in one piece.
 *
 * Invariants: the lines the splitter gives are the same however the body
 * is cut; the resourceVersion stays a NUL-terminated string of its buffer;
 * the stream stops at the first nonzero return; nothing leaks.
 */
#include <errno.h>
#include <jansson.h>

#include "fuzz.h"
#include "egpu/kube.h"
#include "egpu/scheduler.h"
#include "kube_int.h"

#define SMALL_LINE 256

/* Some of the scheduler's pod paths (src/scheduler/api.c), for flags bit 1. */
static const char *const keep[] = {"kind",          "metadata.annotations",
                                   "spec.nodeName", "spec.containers[].resources",
                                   "status.phase",  NULL};

/* Lines as one running digest (FNV-1a over each line and its length). */
struct digest {
    uint64_t h;
    unsigned long n;
};

static int on_line(void *ud, const char *line, size_t len)
{
    struct digest *d = ud;

    for (size_t i = 0; i < len; i++)
        d->h = (d->h ^ (unsigned char)line[i]) * 1099511628211ULL;
    d->h = (d->h ^ len) * 1099511628211ULL;
    d->n++;
    return 0;
}

static void split_lines(const char *body, size_t len, const uint8_t *cuts, size_t ncuts, size_t max,
                        struct digest *d)
{
    struct egpu__kube_lines l;
    size_t off = 0;
    int rc = 0;

    d->h = 14695981039346656037ULL;
    d->n = 0;
    egpu__kube_lines_init(&l, max, on_line, d);
    for (size_t i = 0; i < ncuts && off < len && rc == 0; i++) {
        size_t n = (size_t)cuts[i] + 1;

        n = n < len - off ? n : len - off;
        rc = egpu__kube_lines_feed(&l, body + off, n);
        off += n;
    }
    if (rc == 0 && off < len)
        rc = egpu__kube_lines_feed(&l, body + off, len - off);
    if (rc == 0)
        rc = egpu__kube_lines_finish(&l);
    egpu__kube_lines_free(&l);
    /* The digest callback never fails, so only the splitter's own errors end it. */
    FUZZ_CHECK(rc == 0 || rc == -EMSGSIZE || rc == -ENOMEM);
    if (rc != 0)
        d->n = (unsigned long)-1; /* compared as "ended early" */
}

/* The scheduler's informer callbacks, by kind. */
static int on_event(void *ud, enum egpu_kube_event_type type, json_t *obj)
{
    struct egpu_sched_cache *c = ud;
    struct egpu_error err = {0};
    const char *kind = json_string_value(json_object_get(obj, "kind"));
    const json_t *meta = json_object_get(obj, "metadata");
    const char *name = json_string_value(json_object_get(meta, "name"));
    const char *ns = json_string_value(json_object_get(meta, "namespace"));
    int rc = 0;

    if (type == EGPU_KUBE_BOOKMARK) /* a streaming list's end, or not */
        return egpu_kube_initial_events_end(obj) && kind != NULL && strcmp(kind, "Stop") == 0;
    if (kind == NULL)
        return 0;
    /* What the cache refuses it logs and drops (api.c); it must stay whole. */
    if (strcmp(kind, "Pod") == 0) {
        if (type == EGPU_KUBE_DELETED && name != NULL)
            rc = egpu_sched_cache_pod_delete(c, ns ? ns : "default", name);
        else if (type != EGPU_KUBE_DELETED)
            rc = egpu_sched_cache_pod_set(c, obj, &err);
    } else if (strcmp(kind, "GPU") == 0) {
        rc = type == EGPU_KUBE_DELETED ? egpu_sched_cache_gpu_delete(c, obj, &err)
                                       : egpu_sched_cache_gpu_set(c, obj, &err);
    } else if (strcmp(kind, "Node") == 0) {
        if (type == EGPU_KUBE_DELETED && name != NULL)
            rc = egpu_sched_cache_node_delete(c, name);
        else if (type != EGPU_KUBE_DELETED)
            rc = egpu_sched_cache_node_set(c, obj, &err);
    } else if (strcmp(kind, "Stop") == 0) {
        return 1;
    }
    (void)rc;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct egpu__kube_stream s;
    struct egpu_sched_cache *c;
    struct digest whole, cut;
    char rv[EGPU_KUBE_RV_MAX] = "", *body;
    const uint8_t *cuts;
    size_t ncuts, len, off = 0, max;
    long live = egpu_alloc_live();
    uint8_t flags;
    int rc = 0;

    if (size < 1)
        return 0;
    flags = data[0];
    ncuts = flags >> 4;
    if (size < 1 + ncuts)
        return 0;
    cuts = data + 1;
    body = fuzz_dup(data + 1 + ncuts, size - 1 - ncuts);
    len = size - 1 - ncuts;
    max = (flags & 1) ? SMALL_LINE : EGPU_KUBE_EVENT_MAX;

    split_lines(body, len, NULL, 0, max, &whole);
    split_lines(body, len, cuts, ncuts, max, &cut);
    FUZZ_CHECK(whole.n == cut.n && whole.h == cut.h);

    c = egpu_sched_cache_new();
    FUZZ_CHECK(c != NULL);
    egpu__kube_stream_init(&s, on_event, c, rv);
    s.lines.partial.max = max; /* before anything is buffered */
    if (flags & 2)
        s.keep = keep;
    for (size_t i = 0; i < ncuts && off < len && rc == 0; i++) {
        size_t n = (size_t)cuts[i] + 1;

        n = n < len - off ? n : len - off;
        rc = egpu__kube_stream_feed(&s, body + off, n);
        off += n;
        FUZZ_CHECK(memchr(rv, '\0', sizeof(rv)) != NULL);
    }
    if (rc == 0 && off < len)
        rc = egpu__kube_stream_feed(&s, body + off, len - off);
    if (rc == 0)
        rc = egpu__kube_stream_finish(&s);
    FUZZ_CHECK(rc == 0 || rc == 1 || rc < 0);
    FUZZ_CHECK(rc != 1 || s.stopped);
    FUZZ_CHECK(memchr(rv, '\0', sizeof(rv)) != NULL);
    egpu__kube_stream_free(&s);
    egpu_sched_cache_free(c);
    free(body);
    FUZZ_CHECK(egpu_alloc_live() == live);
    return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet();
    return 0;
}
