/* kube/list_decode.c - a List page or a watch event decoded into only what a
 * keep-spec keeps of its objects (egpu_kube_keep's paths), without building
 * the rest.
 *
 * Decoding a page whole with jansson and then keeping a few fields of each
 * item (egpu_kube_keep) builds every value of every item and frees most of
 * them again: at 5,000 nodes that was 40% of the scheduler's restart CPU in
 * malloc and free (issue 27). Here the page is streamed through yajl's
 * callback parser; the kept subtrees of each item are built as the same
 * jansson values egpu_kube_keep would give (so the store and the callbacks
 * see the same shapes), and everything else is passed over as tokens.
 *
 * The result equals json_loadb (EGPU_KUBE_JSON_FLAGS) then egpu_kube_keep
 * on every item (tests/unit/test_kube.c compares them): members outside
 * "items" (or a watch event's "object") are kept whole, an item that is not
 * an object is kept whole, a value that is not the object or array its path
 * goes through is kept whole, and a key repeated in an object keeps its last
 * value, as jansson does. Key order may differ (document order here).
 *
 * DESIGN: the keep paths are compiled into a tree (struct spec) once per
 * list page, and once per watch stream (egpu__kube_event_keep_new: a
 * streaming list is one event an object). A stack of frames says what the
 * current container is: built whole, filtered by a spec node, or an array walked with "[]"; a value
 * that no path names is skipped by counting its depth. The whole text is checked as strictly as
 * jansson checks it, skipped parts included, so a page is refused here exactly when it would have
 * been refused whole: malformed JSON, nesting deeper than JSON_PARSER_MAX_DEPTH (2048), an integer
 * outside long long, a real that overflows, a key holding a NUL, or a string that is not UTF-8
 * (overlong forms, surrogates and code points past U+10FFFF included). One difference: an escaped
 * lone UTF-16 surrogate ("\ud800"), which jansson refuses, is turned into '?' by yajl (Go's
 * encoder, the API server's, never writes one). The parser is iterative, so deep input costs memory
 * (bounded by the depth limit), never stack.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yajl/yajl_parse.h>

#include "kube_int.h"

#define SEGMENT_MAX 64 /* one path segment, bytes incl. NUL (as transform.c) */
#define DEPTH_MAX   JSON_PARSER_MAX_DEPTH
#define NUMBER_MAX  64 /* longest number text converted on the stack */

/* ------------------------------------------------------------------------ */
/* The keep tree                                                             */

enum shape { S_UNSET, S_OBJECT, S_WALK };

/* One segment of the keep paths. */
struct spec {
    char key[SEGMENT_MAX];
    bool whole;       /* a path ends here (or two go through it differently) */
    bool any;         /* members without a kid are kept whole (a page's top) */
    enum shape shape; /* how the paths go on through the value */
    size_t nkids;
    struct spec *kids; /* owned unless borrowed (see struct tree) */
};

/* The tree of one call: the item's paths, and the top of the document. */
struct tree {
    struct spec item; /* an item's root: its kids are the first segments */
    struct spec hold; /* "items" (walk) or "object" (object): item's kids, borrowed */
    struct spec top;  /* the List or the event: any, one kid (hold) */
};

static void spec_free(struct spec *s)
{
    for (size_t i = 0; i < s->nkids; i++)
        spec_free(&s->kids[i]);
    egpu_free(s->kids);
}

static struct spec *spec_kid(struct spec *s, const char *key, size_t klen)
{
    struct spec *k;

    for (size_t i = 0; i < s->nkids; i++) {
        if (strlen(s->kids[i].key) == klen && memcmp(s->kids[i].key, key, klen) == 0)
            return &s->kids[i];
    }
    k = egpu_realloc(s->kids, (s->nkids + 1) * sizeof(*k));
    if (k == NULL)
        return NULL;
    s->kids = k;
    k = &s->kids[s->nkids++];
    memset(k, 0, sizeof(*k));
    memcpy(k->key, key, klen);
    return k;
}

/* Add one dotted path (egpu_kube_keep's syntax). 0, -EINVAL or -ENOMEM. */
static int spec_add(struct spec *root, const char *path)
{
    struct spec *s = root;

    for (;;) {
        const char *dot = strchr(path, '.');
        size_t n = dot != NULL ? (size_t)(dot - path) : strlen(path);
        bool walk = n >= 2 && path[n - 2] == '[' && path[n - 1] == ']';
        size_t klen = walk ? n - 2 : n;
        enum shape want = walk ? S_WALK : S_OBJECT;

        if (klen == 0 || klen >= SEGMENT_MAX)
            return -EINVAL;
        s = spec_kid(s, path, klen);
        if (s == NULL)
            return -ENOMEM;
        if (dot == NULL) {
            s->whole = true;
            return 0;
        }
        /* One path walking an array and another taking it as an object
         * keep it whole in egpu_kube_keep, whatever the value is. */
        if (s->shape != S_UNSET && s->shape != want)
            s->whole = true;
        s->shape = want;
        path = dot + 1;
    }
}

static int tree_build(struct tree *t, const char *const *keep, bool event)
{
    static const char *const always[] = {"metadata.name", "metadata.namespace",
                                         "metadata.resourceVersion", NULL};
    int rc = 0;

    memset(t, 0, sizeof(*t));
    t->item.shape = S_OBJECT;
    for (size_t i = 0; rc == 0 && always[i] != NULL; i++)
        rc = spec_add(&t->item, always[i]);
    for (size_t i = 0; rc == 0 && keep != NULL && keep[i] != NULL; i++)
        rc = spec_add(&t->item, keep[i]);
    if (rc)
        return rc;
    snprintf(t->hold.key, sizeof(t->hold.key), "%s", event ? "object" : "items");
    t->hold.shape = event ? S_OBJECT : S_WALK;
    t->hold.kids = t->item.kids;
    t->hold.nkids = t->item.nkids;
    t->top.shape = S_OBJECT;
    t->top.any = true;
    t->top.kids = &t->hold;
    t->top.nkids = 1;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Decoding                                                                  */

enum fkind {
    F_WHOLE,  /* every value is built */
    F_FILTER, /* an object: only the members sp names (all when sp->any) */
    F_WALK,   /* an array walked with "[]": object elements filtered by sp */
};

struct frame {
    json_t *v;             /* the container, borrowed from its parent (or the root) */
    enum fkind kind;       /* what its values become */
    const struct spec *sp; /* F_FILTER, F_WALK */
};

/* What the value after a key becomes (F_FILTER). */
enum next { N_SKIP, N_WHOLE, N_SPEC };

enum fail { E_NONE, E_NOMEM, E_DEPTH, E_NUMBER, E_KEY, E_UTF8, E_TOP };

struct decoder {
    yajl_handle h;
    struct frame *frames;
    size_t nframes, cap;
    size_t skip;            /* depth inside a skipped value; 0 = not skipping */
    size_t depth;           /* open containers, skipped ones included */
    const struct spec *top; /* the document's spec */
    json_t *root;           /* the top-level value, once it has started */
    size_t top_end;         /* offset just past the top-level value; 0 = not closed */
    /* The pending key of the innermost object and what its value becomes. */
    char *key;
    size_t keycap;
    enum next next;
    const struct spec *next_sp;
    enum fail fail;
    char why[96]; /* E_NUMBER, E_KEY, E_UTF8: the detail */
};

/* Whether s[0..len) is UTF-8 as jansson accepts it (RFC 3629: no overlong
 * forms, no surrogates, nothing past U+10FFFF). */
static bool utf8_ok(const unsigned char *s, size_t len)
{
    size_t i = 0;

    while (i < len) {
        unsigned char c;
        size_t n;
        unsigned char lo = 0x80, hi = 0xBF;
        uint64_t w;

        /* ASCII eight bytes at a time (most of a page is). */
        while (len - i >= sizeof(w) &&
               (memcpy(&w, s + i, sizeof(w)), (w & 0x8080808080808080ULL) == 0))
            i += sizeof(w);
        if (i == len)
            break;
        c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF)
            n = 1;
        else if (c >= 0xE0 && c <= 0xEF)
            n = 2;
        else if (c >= 0xF0 && c <= 0xF4)
            n = 3;
        else
            return false;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F;
        else if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
        if (len - i <= n)
            return false;
        if (s[i + 1] < lo || s[i + 1] > hi)
            return false;
        for (size_t k = 2; k <= n; k++) {
            if (s[i + k] < 0x80 || s[i + k] > 0xBF)
                return false;
        }
        i += n + 1;
    }
    return true;
}

static int failed(struct decoder *d, enum fail f)
{
    d->fail = f;
    return 0; /* yajl: client canceled */
}

/* Attach v (a new reference, taken) where the innermost frame puts its
 * values. 1 (go on) or 0 (out of memory). */
static int attach(struct decoder *d, json_t *v)
{
    struct frame *f;
    int rc;

    if (v == NULL)
        return failed(d, E_NOMEM);
    if (d->nframes == 0) {
        json_decref(d->root);
        d->root = v;
        return 1;
    }
    f = &d->frames[d->nframes - 1];
    rc = json_is_object(f->v) ? json_object_set_new_nocheck(f->v, d->key, v)
                              : json_array_append_new(f->v, v);
    return rc == 0 ? 1 : failed(d, E_NOMEM);
}

/* What the next value becomes: its frame kind (F_WHOLE, F_FILTER, F_WALK
 * for a container), and sp; false when it is skipped. map: the value is an
 * object; array: an array (neither: a scalar). */
static bool placement(struct decoder *d, bool map, bool array, enum fkind *kind,
                      const struct spec **sp)
{
    const struct frame *f = d->nframes > 0 ? &d->frames[d->nframes - 1] : NULL;
    const struct spec *s;

    *kind = F_WHOLE;
    *sp = NULL;
    if (f == NULL) {
        if (map) {
            *kind = F_FILTER;
            *sp = d->top;
        }
        return true;
    }
    switch (f->kind) {
    case F_WHOLE:
        return true;
    case F_WALK:
        if (map) {
            *kind = F_FILTER;
            *sp = f->sp;
        }
        return true;
    case F_FILTER:
        break;
    }
    if (d->next == N_SKIP)
        return false;
    if (d->next == N_WHOLE)
        return true;
    s = d->next_sp;
    if (s->whole)
        return true;
    if (s->shape == S_WALK && array) {
        *kind = F_WALK;
        *sp = s;
    } else if (s->shape == S_OBJECT && map) {
        *kind = F_FILTER;
        *sp = s;
    }
    return true;
}

static int open_container(void *ctx, bool map)
{
    struct decoder *d = ctx;
    const struct spec *sp;
    enum fkind kind;
    json_t *v;

    if (++d->depth > DEPTH_MAX)
        return failed(d, E_DEPTH);
    if (d->skip) {
        d->skip++;
        return 1;
    }
    if (!placement(d, map, !map, &kind, &sp)) {
        d->skip = 1;
        return 1;
    }
    if (d->nframes == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 16;
        struct frame *nf = egpu_realloc(d->frames, cap * sizeof(*nf));

        if (nf == NULL)
            return failed(d, E_NOMEM);
        d->frames = nf;
        d->cap = cap;
    }
    v = map ? json_object() : json_array();
    if (v == NULL || !attach(d, v))
        return failed(d, E_NOMEM);
    d->frames[d->nframes++] = (struct frame){v, kind, sp};
    return 1;
}

static int close_container(void *ctx)
{
    struct decoder *d = ctx;

    d->depth--;
    if (d->skip) {
        d->skip--;
        return 1;
    }
    if (--d->nframes == 0)
        d->top_end = yajl_get_bytes_consumed(d->h);
    return 1;
}

/* Whether a scalar value here is kept (built) rather than skipped; a
 * top-level scalar is refused, as jansson refuses it. */
static bool kept(struct decoder *d)
{
    const struct spec *sp;
    enum fkind kind;

    if (d->nframes == 0 && d->skip == 0) {
        (void)failed(d, E_TOP);
        return false;
    }
    return d->skip == 0 && placement(d, false, false, &kind, &sp);
}

static int on_null(void *ctx)
{
    struct decoder *d = ctx;

    return kept(d) ? attach(d, json_null()) : d->fail == E_NONE;
}

static int on_boolean(void *ctx, int v)
{
    struct decoder *d = ctx;

    return kept(d) ? attach(d, json_boolean(v)) : d->fail == E_NONE;
}

static int on_string(void *ctx, const unsigned char *s, size_t len)
{
    struct decoder *d = ctx;

    if (!utf8_ok(s, len)) {
        snprintf(d->why, sizeof(d->why), "a string that is not UTF-8");
        return failed(d, E_UTF8);
    }
    return kept(d) ? attach(d, json_stringn_nocheck((const char *)s, len)) : d->fail == E_NONE;
}

/* As jansson reads a number: an integer (no '.', 'e' or 'E') within long
 * long, else a double that does not overflow. */
static int on_number(void *ctx, const char *s, size_t len)
{
    struct decoder *d = ctx;
    char small[NUMBER_MAX], *text = small, *end;
    bool real = memchr(s, '.', len) || memchr(s, 'e', len) || memchr(s, 'E', len);
    json_t *v = NULL;

    if (len >= sizeof(small) && (text = egpu_malloc(len + 1)) == NULL)
        return failed(d, E_NOMEM);
    memcpy(text, s, len);
    text[len] = '\0';
    errno = 0;
    if (!real) {
        long long i = strtoll(text, &end, 10);

        if (errno == ERANGE)
            snprintf(d->why, sizeof(d->why), "an integer outside 64 bits");
        else
            v = json_integer(i);
    } else {
        double x = strtod(text, &end);

        if (errno == ERANGE && isinf(x))
            snprintf(d->why, sizeof(d->why), "a real number that overflows");
        else
            v = json_real(x);
    }
    if (text != small)
        egpu_free(text);
    if (v == NULL)
        return failed(d, d->why[0] ? E_NUMBER : E_NOMEM);
    if (kept(d))
        return attach(d, v);
    json_decref(v);
    return d->fail == E_NONE;
}

static int on_key(void *ctx, const unsigned char *k, size_t len)
{
    struct decoder *d = ctx;
    const struct frame *f;
    const struct spec *sp;

    if (memchr(k, '\0', len) != NULL) {
        snprintf(d->why, sizeof(d->why), "a key holding a NUL character");
        return failed(d, E_KEY);
    }
    if (!utf8_ok(k, len)) {
        snprintf(d->why, sizeof(d->why), "a key that is not UTF-8");
        return failed(d, E_UTF8);
    }
    if (d->skip)
        return 1;
    f = &d->frames[d->nframes - 1];
    if (f->kind == F_FILTER) {
        sp = f->sp;
        d->next = sp->any ? N_WHOLE : N_SKIP;
        for (size_t i = 0; i < sp->nkids; i++) {
            if (strlen(sp->kids[i].key) == len && memcmp(sp->kids[i].key, k, len) == 0) {
                d->next = N_SPEC;
                d->next_sp = &sp->kids[i];
                break;
            }
        }
        if (d->next == N_SKIP)
            return 1;
    }
    if (len + 1 > d->keycap) {
        size_t cap = len + 1 > 2 * d->keycap ? len + 1 : 2 * d->keycap;
        char *nk = egpu_realloc(d->key, cap);

        if (nk == NULL)
            return failed(d, E_NOMEM);
        d->key = nk;
        d->keycap = cap;
    }
    memcpy(d->key, k, len);
    d->key[len] = '\0';
    return 1;
}

static int on_start_map(void *ctx)
{
    return open_container(ctx, true);
}

static int on_start_array(void *ctx)
{
    return open_container(ctx, false);
}

static int on_end(void *ctx)
{
    return close_container(ctx);
}

/* Offset of the first byte at or after i that is not JSON whitespace. */
static size_t skip_ws(const char *s, size_t len, size_t i)
{
    while (i < len && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r'))
        i++;
    return i;
}

static int report(struct decoder *d, yajl_handle h, const char *what, const char *body, size_t len,
                  yajl_status st, struct egpu_error *err)
{
    size_t at = yajl_get_bytes_consumed(h);
    unsigned char *text;
    size_t n;
    int rc;

    switch (d->fail) {
    case E_NOMEM:
        return egpu_error_set(err, -ENOMEM, "%s: out of memory", what);
    case E_DEPTH:
        return egpu_error_set(err, EGPU_ESYNTAX, "%s: nesting deeper than %d at byte %zu", what,
                              DEPTH_MAX, at);
    case E_TOP:
        return egpu_error_set(err, EGPU_ESYNTAX, "%s: not an object or array", what);
    case E_NUMBER:
    case E_KEY:
    case E_UTF8:
        return egpu_error_set(err, EGPU_ESYNTAX, "%s: %s at byte %zu", what, d->why, at);
    case E_NONE:
        break;
    }
    if (st == yajl_status_ok) {
        if (d->top_end == 0)
            return egpu_error_set(err, EGPU_ESYNTAX, "%s: malformed JSON: no value", what);
        /* yajl ends a parse at an unfinished token after the value (a string
         * left open) without an error: anything there is garbage. */
        return egpu_error_set(err, EGPU_ESYNTAX,
                              "%s: malformed JSON: text after the value at byte %zu", what,
                              skip_ws(body, len, d->top_end));
    }
    text = yajl_get_error(h, 0, (const unsigned char *)body, len);
    n = text ? strlen((const char *)text) : 0;
    while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == ' ' || text[n - 1] == '.'))
        n--;
    rc = egpu_error_set(err, EGPU_ESYNTAX, "%s: malformed JSON: %.*s at byte %zu", what, (int)n,
                        text ? (const char *)text : "parse error", at);
    if (text != NULL)
        yajl_free_error(h, text);
    return rc;
}

/* body decoded against the compiled tree t (borrowed): what
 * egpu__kube_list_decode and egpu__kube_event_decode_with return. */
static int decode_tree(const struct tree *t, const char *body, size_t len, const char *what,
                       json_t **out, struct egpu_error *err)
{
    static const yajl_callbacks cb = {
        .yajl_null = on_null,
        .yajl_boolean = on_boolean,
        .yajl_number = on_number,
        .yajl_string = on_string,
        .yajl_start_map = on_start_map,
        .yajl_map_key = on_key,
        .yajl_end_map = on_end,
        .yajl_start_array = on_start_array,
        .yajl_end_array = on_end,
    };
    yajl_alloc_funcs af = egpu_kube_yajl_alloc();
    struct decoder d = {0};
    yajl_handle h;
    yajl_status st;
    int rc = 0;

    *out = NULL;
    if (body == NULL)
        body = "";
    /* yajl takes \f and \v for whitespace; JSON has them nowhere (a raw
     * control character is not allowed in a string either). */
    for (const char *c = "\f\v"; *c != '\0'; c++) {
        const char *at = memchr(body, *c, len);

        if (at != NULL) {
            return egpu_error_set(err, EGPU_ESYNTAX,
                                  "%s: malformed JSON: control character 0x%02x at byte %zu", what,
                                  (unsigned)*c, (size_t)(at - body));
        }
    }
    d.top = &t->top;
    h = yajl_alloc(&cb, &af, &d);
    d.h = h;
    st = yajl_parse(h, (const unsigned char *)body, len);
    if (st == yajl_status_ok)
        st = yajl_complete_parse(h);
    if (st == yajl_status_ok && d.fail == E_NONE && d.top_end != 0 &&
        skip_ws(body, len, d.top_end) == len) {
        *out = d.root;
        d.root = NULL;
    } else {
        rc = report(&d, h, what, body, len, st, err);
    }
    yajl_free(h);
    json_decref(d.root);
    egpu_free(d.frames);
    egpu_free(d.key);
    return rc;
}

static int tree_failed(int rc, const char *what, struct egpu_error *err)
{
    return egpu_error_set(err, rc, "%s: %s", what,
                          rc == -EINVAL ? "a keep path with an empty or too long segment"
                                        : "out of memory");
}

/* The compiled keep tree of a stream's events (the tree points into itself,
 * so it lives where it was built). */
struct egpu__kube_event_keep {
    struct tree t;
};

int egpu__kube_event_keep_new(const char *const *keep, struct egpu__kube_event_keep **out,
                              struct egpu_error *err)
{
    struct egpu__kube_event_keep *k = egpu_malloc(sizeof(*k));
    int rc;

    *out = NULL;
    if (k == NULL)
        return tree_failed(-ENOMEM, "watch event", err);
    rc = tree_build(&k->t, keep, true);
    if (rc) {
        spec_free(&k->t.item);
        egpu_free(k);
        return tree_failed(rc, "watch event", err);
    }
    *out = k;
    return 0;
}

int egpu__kube_event_decode_with(const struct egpu__kube_event_keep *k, const char *body,
                                 size_t len, json_t **out, struct egpu_error *err)
{
    return decode_tree(&k->t, body, len, "watch event", out, err);
}

void egpu__kube_event_keep_free(struct egpu__kube_event_keep *k)
{
    if (k == NULL)
        return;
    spec_free(&k->t.item);
    egpu_free(k);
}

int egpu__kube_list_decode(const char *body, size_t len, const char *const *keep, json_t **out,
                           struct egpu_error *err)
{
    struct tree t;
    int rc = tree_build(&t, keep, false);

    *out = NULL;
    if (rc == 0)
        rc = decode_tree(&t, body, len, "list page", out, err);
    else
        rc = tree_failed(rc, "list page", err);
    spec_free(&t.item);
    return rc;
}
