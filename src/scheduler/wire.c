/* scheduler/wire.c - ExtenderArgs in, ExtenderFilterResult and
 * HostPriorityList out, on the extender's hot path (see wire_int.h).
 *
 * kube-scheduler sends every candidate node on each filter and prioritize
 * call: with nodeCacheCapable an ExtenderArgs of 5,000 nodes is ~85 KB, of
 * which the Pod is ~1 KB. Building a jansson tree of it costs more than
 * placing the pod, so the body is streamed through yajl instead:
 *
 * - NodeNames strings are copied into one arena (len + 1 bytes is always
 *   enough: a decoded string plus its NUL is shorter than its JSON text),
 *   with a table of pointers that grows by doubling;
 * - the Pod value is only located (its byte range, from the parser's offset
 *   at its opening and closing brace) and that small sub-document alone is
 *   parsed by jansson for egpu_sched_pod_parse;
 * - for the NodeList form (nodeCacheCapable false) each Nodes.items[i] is
 *   located the same way and its metadata.name read; the filter reply parses
 *   only the passing Node objects again (jansson) to send them back.
 *
 * DESIGN: a stack of roles (top, Pod, NodeNames, Nodes, items, item,
 * metadata; six levels at most) says what the current container is; any
 * other value is skipped by counting its depth. Type problems (NodeNames: 7,
 * a number among the names) are remembered, first one per list, and reported
 * after the parse in the order the jansson decoder used to: malformed JSON,
 * not an object, the Pod, then the node list actually used.
 *
 * Replies are written with yajl_gen into its own buffer, appended to the
 * reply once; the NodeList form, off the hot path, with jansson. The project
 * writes no JSON by hand: what plist.c keeps to spare the encoding is
 * yajl_gen's own text, copied only into the state it was made in. Memory:
 * yajl allocates with malloc, and stops the process when that fails (see
 * y_check).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <stdlib.h>
#include <yajl/yajl_gen.h>
#include <yajl/yajl_parse.h>

#include "egpu/kube.h"
#include "wire_int.h"

#define ROLES_MAX    8 /* deepest role: top > Nodes > items > item > metadata */
#define NAME_LEN_MAX (EGPU_K8S_NAME_MAX - 1)
#define NAMES_MIN    64

/* ------------------------------------------------------------------------ */
/* Decoding                                                                  */

enum role { R_SKIP, R_TOP, R_POD, R_NAMES, R_NODES, R_ITEMS, R_ITEM, R_META };
enum key { K_OTHER, K_POD, K_NODES, K_NODENAMES, K_ITEMS, K_METADATA, K_NAME };
enum kind { V_NULL, V_STRING, V_OTHER };

/* One candidate list: NodeNames, or Nodes.items. */
struct list {
    bool present; /* the key held an array (or, for NodeNames, a non-null value) */
    size_t n, cap;
    const char **names;
    struct egpu__wire_span *spans; /* items only */
    char msg[EGPU_ERRMSG_MAX];     /* first problem, or "" */
};

struct decoder {
    const char *body;
    size_t len;
    yajl_handle h;
    int depth; /* open containers with a role */
    enum role roles[ROLES_MAX];
    enum key keys[ROLES_MAX]; /* the last key read in the map at each depth */
    size_t skip;              /* depth inside a skipped value; 0 = not skipping */
    bool seen;                /* a top-level value started */
    bool not_object;
    bool nomem;
    bool has_pod; /* pod_off/pod_len locate an object or array */
    size_t pod_off, pod_len;
    char *arena;
    size_t used, cap;
    struct list names, items;
    size_t top_end;        /* just past the top-level object; 0 = not closed */
    size_t item_off;       /* the item being read */
    const char *item_name; /* its metadata.name, or NULL */
    const char *item_bad;  /* what is wrong with that name, or NULL */
};

/* Offset in the body just past the token being reported. */
static size_t here(const struct decoder *d)
{
    return yajl_get_bytes_consumed(d->h);
}

static void list_reset(struct list *l, bool present)
{
    l->present = present;
    l->n = 0;
    l->msg[0] = '\0';
}

static void list_free(struct list *l)
{
    egpu_free(l->names);
    egpu_free(l->spans);
    l->names = NULL;
    l->spans = NULL;
}

/* Why s cannot be a node name, or NULL when it can. */
static const char *name_problem(const unsigned char *s, size_t len, enum kind k)
{
    if (k != V_STRING)
        return "must be a string";
    if (len == 0)
        return "node name missing";
    if (len > NAME_LEN_MAX)
        return "longer than 253 characters";
    if (memchr(s, '\0', len) != NULL)
        return "contains a NUL character";
    return NULL;
}

/* Copy a checked name into the arena; NULL if it would not fit (a bug). */
static const char *keep(struct decoder *d, const unsigned char *s, size_t len)
{
    char *p;

    if (len + 1 > d->cap - d->used)
        return NULL;
    p = d->arena + d->used;
    memcpy(p, s, len);
    p[len] = '\0';
    d->used += len + 1;
    return p;
}

/* Make room for one more entry in l. false when out of memory. */
static bool list_grow(struct decoder *d, struct list *l)
{
    size_t cap = l->cap ? 2 * l->cap : NAMES_MIN;
    const char **names;

    /* NodeNames: a guess of one name per 16 bytes of body saves the
     * doublings, without costing much when names are longer. */
    if (l->cap == 0 && l == &d->names && d->cap / 16 > cap)
        cap = d->cap / 16;
    names = egpu_realloc(l->names, cap * sizeof(*names));
    if (names == NULL)
        return false;
    l->names = names;
    if (l == &d->items) {
        struct egpu__wire_span *spans = egpu_realloc(l->spans, cap * sizeof(*spans));

        if (spans == NULL)
            return false;
        l->spans = spans;
    }
    l->cap = cap;
    return true;
}

/* Append name (and its span, for items) to l. Returns 1, or 0 to stop the
 * parse when out of memory. */
static int list_add(struct decoder *d, struct list *l, const char *name, size_t off, size_t len)
{
    if (l->n == l->cap && !list_grow(d, l)) {
        d->nomem = true;
        return 0;
    }
    l->names[l->n] = name;
    if (l == &d->items)
        l->spans[l->n] = (struct egpu__wire_span){.off = off, .len = len};
    l->n++;
    return 1;
}

/* One element of NodeNames. Returns 0 to stop the parse (out of memory). */
static int add_name(struct decoder *d, const unsigned char *s, size_t len, enum kind k)
{
    struct list *l = &d->names;
    const char *why, *name = NULL;

    if (l->msg[0] != '\0')
        return 1; /* the request fails anyway; the first problem is the one told */
    why = name_problem(s, len, k);
    if (why == NULL)
        name = keep(d, s, len);
    if (name != NULL)
        return list_add(d, l, name, 0, 0);
    snprintf(l->msg, sizeof(l->msg), "ExtenderArgs.NodeNames[%zu]: %s", l->n,
             why ? why : "does not fit the name arena");
    return 1;
}

/* An element of Nodes.items ends (name NULL: none found; bad: why the one
 * found is unusable). Returns 0 to stop the parse (out of memory). */
static int add_item(struct decoder *d, size_t off, size_t len, const char *name, const char *bad)
{
    struct list *l = &d->items;

    if (l->msg[0] != '\0')
        return 1;
    if (name != NULL && bad == NULL)
        return list_add(d, l, name, off, len);
    if (bad != NULL)
        snprintf(l->msg, sizeof(l->msg), "ExtenderArgs.Nodes.items[%zu].metadata.name: %s", l->n,
                 bad);
    else
        snprintf(l->msg, sizeof(l->msg), "ExtenderArgs.Nodes.items[%zu]: node name missing", l->n);
    return 1;
}

/* A scalar value: null, a string, or a number or boolean. */
static int scalar(struct decoder *d, const unsigned char *s, size_t len, enum kind k)
{
    enum key key;

    if (d->skip)
        return 1;
    if (d->depth == 0) {
        d->seen = true;
        d->not_object = true;
        return 1;
    }
    key = d->keys[d->depth];
    switch (d->roles[d->depth]) {
    case R_TOP:
        if (key == K_POD) {
            d->has_pod = false;
        } else if (key == K_NODENAMES) {
            list_reset(&d->names, k != V_NULL);
            if (k != V_NULL)
                snprintf(d->names.msg, sizeof(d->names.msg),
                         "ExtenderArgs.NodeNames: must be an array of strings or null");
        } else if (key == K_NODES) {
            list_reset(&d->items, false);
        }
        return 1;
    case R_NODES:
        if (key == K_ITEMS)
            list_reset(&d->items, false);
        return 1;
    case R_NAMES:
        return add_name(d, s, len, k);
    case R_ITEMS:
        return add_item(d, 0, 0, NULL, NULL);
    case R_META:
        if (key == K_NAME) {
            d->item_bad = name_problem(s, len, k);
            d->item_name = d->item_bad ? NULL : keep(d, s, len);
            if (d->item_bad == NULL && d->item_name == NULL)
                d->item_bad = "does not fit the name arena";
        }
        return 1;
    default:
        return 1;
    }
}

/* The role of a container opening at the current position. */
static enum role child_role(struct decoder *d, bool is_map)
{
    enum key key = d->keys[d->depth];

    switch (d->roles[d->depth]) {
    case R_TOP:
        if (key == K_POD) {
            d->pod_off = here(d) - 1;
            return R_POD;
        }
        if (key == K_NODENAMES) {
            list_reset(&d->names, true);
            if (!is_map)
                return R_NAMES;
            snprintf(d->names.msg, sizeof(d->names.msg),
                     "ExtenderArgs.NodeNames: must be an array of strings or null");
            return R_SKIP;
        }
        if (key == K_NODES) {
            list_reset(&d->items, false);
            return is_map ? R_NODES : R_SKIP;
        }
        return R_SKIP;
    case R_NODES:
        if (key == K_ITEMS) {
            list_reset(&d->items, !is_map);
            return is_map ? R_SKIP : R_ITEMS;
        }
        return R_SKIP;
    case R_NAMES:
        (void)add_name(d, NULL, 0, V_OTHER); /* never stops: only records */
        return R_SKIP;
    case R_ITEMS:
        if (is_map) {
            d->item_off = here(d) - 1;
            d->item_name = NULL;
            d->item_bad = NULL;
            return R_ITEM;
        }
        (void)add_item(d, 0, 0, NULL, NULL);
        return R_SKIP;
    case R_ITEM:
        return key == K_METADATA && is_map ? R_META : R_SKIP;
    default:
        return R_SKIP;
    }
}

static int open_container(struct decoder *d, bool is_map)
{
    enum role role;

    if (d->skip) {
        d->skip++;
        return 1;
    }
    if (d->depth == 0) {
        d->seen = true;
        role = is_map ? R_TOP : R_SKIP;
        d->not_object = !is_map;
    } else {
        role = child_role(d, is_map);
    }
    if (role == R_SKIP || d->depth + 1 >= ROLES_MAX) {
        d->skip = 1;
        return 1;
    }
    d->depth++;
    d->roles[d->depth] = role;
    d->keys[d->depth] = K_OTHER;
    return 1;
}

static int close_container(struct decoder *d)
{
    enum role role;

    if (d->skip) {
        d->skip--;
        return 1;
    }
    role = d->roles[d->depth--];
    if (role == R_TOP) {
        d->top_end = here(d);
    } else if (role == R_POD) {
        d->pod_len = here(d) - d->pod_off;
        d->has_pod = true;
    } else if (role == R_ITEM) {
        return add_item(d, d->item_off, here(d) - d->item_off, d->item_name, d->item_bad);
    }
    return 1;
}

/* Offset of the first byte at or after i that is not JSON whitespace. */
static size_t skip_ws(const char *s, size_t len, size_t i)
{
    /* What yajl's lexer skips: JSON's four, and \f and \v. */
    while (i < len && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r' ||
                       s[i] == '\f' || s[i] == '\v'))
        i++;
    return i;
}

static bool is_key(const unsigned char *k, size_t len, const char *want)
{
    return len == strlen(want) && memcmp(k, want, len) == 0;
}

static int on_key(void *ctx, const unsigned char *k, size_t len)
{
    struct decoder *d = ctx;
    enum key key = K_OTHER;

    if (d->skip)
        return 1;
    switch (d->roles[d->depth]) {
    case R_TOP:
        if (is_key(k, len, "Pod"))
            key = K_POD;
        else if (is_key(k, len, "Nodes"))
            key = K_NODES;
        else if (is_key(k, len, "NodeNames"))
            key = K_NODENAMES;
        break;
    case R_NODES:
        key = is_key(k, len, "items") ? K_ITEMS : K_OTHER;
        break;
    case R_ITEM:
        key = is_key(k, len, "metadata") ? K_METADATA : K_OTHER;
        break;
    case R_META:
        key = is_key(k, len, "name") ? K_NAME : K_OTHER;
        break;
    default:
        break;
    }
    d->keys[d->depth] = key;
    return 1;
}

static int on_null(void *ctx)
{
    return scalar(ctx, NULL, 0, V_NULL);
}

static int on_boolean(void *ctx, int v)
{
    (void)v;
    return scalar(ctx, NULL, 0, V_OTHER);
}

static int on_number(void *ctx, const char *s, size_t len)
{
    return scalar(ctx, (const unsigned char *)s, len, V_OTHER);
}

static int on_string(void *ctx, const unsigned char *s, size_t len)
{
    return scalar(ctx, s, len, V_STRING);
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

/* yajl's own message, trimmed, and where it stopped. */
static int syntax_error(struct decoder *d, size_t len, struct egpu_error *err)
{
    unsigned char *text = yajl_get_error(d->h, 0, (const unsigned char *)d->body, len);
    size_t n = text ? strlen((const char *)text) : 0;
    int rc;

    while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == ' ' || text[n - 1] == '.'))
        n--;
    rc = egpu_error_set(err, EGPU_ESYNTAX, "ExtenderArgs: malformed JSON: %.*s at byte %zu", (int)n,
                        text ? (const char *)text : "parse error", here(d));
    if (text != NULL)
        yajl_free_error(d->h, text);
    return rc;
}

/* Stream body through yajl into d. 0, EGPU_ESYNTAX or -ENOMEM. */
static int scan(struct decoder *d, size_t len, struct egpu_error *err)
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
    yajl_status st;
    int rc = 0;

    d->h = yajl_alloc(&cb, &af, d);
    if (d->h == NULL)
        return egpu_error_set(err, -ENOMEM, "ExtenderArgs: out of memory");
    st = yajl_parse(d->h, (const unsigned char *)d->body, len);
    if (st == yajl_status_ok)
        st = yajl_complete_parse(d->h);
    if (st == yajl_status_client_canceled || d->nomem)
        rc = egpu_error_set(err, -ENOMEM, "ExtenderArgs: out of memory");
    else if (st != yajl_status_ok)
        rc = syntax_error(d, len, err);
    else if (!d->seen)
        rc = egpu_error_set(err, EGPU_ESYNTAX, "ExtenderArgs: malformed JSON: empty body");
    else if (d->not_object)
        rc = egpu_error_set(err, EGPU_ESYNTAX, "ExtenderArgs: must be a JSON object");
    else if (skip_ws(d->body, len, d->top_end) != len)
        /* yajl ends a parse at an unfinished token after the value (a
         * string left open) without an error: anything there is garbage. */
        rc = egpu_error_set(err, EGPU_ESYNTAX,
                            "ExtenderArgs: malformed JSON: text after the object at byte %zu",
                            skip_ws(d->body, len, d->top_end));
    yajl_free(d->h);
    d->h = NULL;
    return rc;
}

/* Parse the Pod's bytes (none: the Pod is missing or not an object). */
static int decode_pod(const struct decoder *d, struct egpu_sched_pod *out, json_t **keep,
                      bool *refused, struct egpu_error *err)
{
    json_error_t jerr;
    json_t *pod = NULL;
    int rc;

    if (d->has_pod) {
        pod = json_loadb(d->body + d->pod_off, d->pod_len, 0, &jerr);
        if (pod == NULL)
            return egpu_error_set(err, EGPU_ESYNTAX, "ExtenderArgs.Pod: malformed JSON: %s",
                                  jerr.text);
    }
    rc = egpu_sched_pod_parse(pod, out, err);
    *refused = rc != 0 && rc != -ENOMEM && json_is_object(pod);
    if (rc == 0 && out->dra) {
        *keep = pod; /* a DRA pod's claims are read from it */
        pod = NULL;
    }
    json_decref(pod);
    if (rc)
        return egpu_error_prefix(err, rc, "ExtenderArgs.Pod");
    return 0;
}

int egpu__wire_args_decode(const char *body, size_t len, struct egpu__wire_args *a,
                           struct egpu_error *err)
{
    struct decoder *d = egpu_calloc(1, sizeof(*d));
    struct list *use = NULL;
    int rc;

    a->pod_refused = false;
    a->pod_obj = NULL;
    a->pod.has_assigned = false; /* owns nothing until decoded */
    a->pod.assigned = NULL;
    a->pod.nclaims = 0;
    a->pod.claims = NULL;
    a->pod.names = NULL;
    a->pod.assigned_error = NULL;
    a->pod.claims_error = NULL;
    if (d == NULL)
        return egpu_error_set(err, -ENOMEM, "ExtenderArgs: out of memory");
    d->body = body;
    d->len = len;
    d->cap = len + 1;
    d->arena = egpu_malloc(d->cap);
    if (d->arena == NULL) {
        rc = egpu_error_set(err, -ENOMEM, "ExtenderArgs: out of memory");
        goto out;
    }
    rc = scan(d, len, err);
    if (!rc)
        rc = decode_pod(d, &a->pod, &a->pod_obj, &a->pod_refused, err);
    if (rc)
        goto out;
    if (d->names.present)
        use = &d->names;
    else if (d->items.present)
        use = &d->items;
    if (use == NULL)
        rc = egpu_error_set(err, EGPU_ESYNTAX,
                            "ExtenderArgs: NodeNames and Nodes.items are both missing");
    else if (use->msg[0] != '\0')
        rc = egpu_error_set(err, EGPU_ESYNTAX, "%s", use->msg);
    if (rc)
        goto out;
    a->n = use->n;
    a->names = use->names;
    a->arena = d->arena;
    a->items = use->spans;
    a->full = use == &d->items;
    a->body = body;
    use->names = NULL;
    use->spans = NULL;
    d->arena = NULL;
out:
    if (rc) {
        json_decref(a->pod_obj);
        a->pod_obj = NULL;
        egpu_sched_pod_clear(&a->pod);
    }
    list_free(&d->names);
    list_free(&d->items);
    egpu_free(d->arena);
    egpu_free(d);
    return rc;
}

void egpu__wire_args_free(struct egpu__wire_args *a)
{
    egpu_free(a->names);
    egpu_free(a->arena);
    egpu_free(a->items);
    json_decref(a->pod_obj);
    egpu_sched_pod_clear(&a->pod);
    a->pod_obj = NULL;
    a->names = NULL;
    a->arena = NULL;
    a->items = NULL;
    a->n = 0;
}

/* ------------------------------------------------------------------------ */
/* Encoding (yajl_gen for the hot NodeNames form, jansson for the NodeList form) */

struct sink {
    struct egpu_buf *reply;
    int rc;
};

/* A generator with its own buffer (one append into the reply at the end:
 * per-token print callbacks cost more than the encoding). Strings need no
 * UTF-8 check: node names were checked by the parser and reasons are cut at
 * a character boundary (utf8_len). */
yajl_gen egpu__wire_gen(void)
{
    yajl_alloc_funcs af = egpu_kube_yajl_alloc();

    return yajl_gen_alloc(&af);
}

static int gen_done(yajl_gen g, struct sink *k, yajl_gen_status st)
{
    const unsigned char *buf;
    size_t len;

    if (st == yajl_gen_status_ok)
        st = yajl_gen_get_buf(g, &buf, &len);
    if (st == yajl_gen_status_ok)
        k->rc = egpu_buf_append(k->reply, buf, len);
    yajl_gen_free(g);
    if (k->rc)
        return k->rc;
    return st == yajl_gen_status_ok ? 0 : -EINVAL;
}

static yajl_gen_status gen_str(yajl_gen g, const char *s, size_t len)
{
    return yajl_gen_string(g, (const unsigned char *)s, len);
}

#define GEN_LIT(g, lit) gen_str((g), (lit), sizeof(lit) - 1)

/* Length of s without a UTF-8 sequence cut short at its end (a reason
 * truncated to its buffer), so the reply stays valid UTF-8. */
static size_t utf8_len(const char *s)
{
    size_t n = strlen(s), i = n, need;

    while (i > 0 && n - i < 4 && ((unsigned char)s[i - 1] & 0xC0) == 0x80)
        i--;
    if (i == 0 || ((unsigned char)s[i - 1] & 0x80) == 0)
        return n;
    need = ((unsigned char)s[i - 1] & 0xE0) == 0xC0   ? 2
           : ((unsigned char)s[i - 1] & 0xF0) == 0xE0 ? 3
                                                      : 4;
    return n - (i - 1) >= need ? n : i - 1;
}

const char egpu__wire_unlisted[] = "(not listed)";

/* Does why say the node fails and is listed in FailedNodes? */
static bool listed(const char *why)
{
    return why != NULL && why != egpu__wire_unlisted;
}

/* FailedNodes of the NodeList form, as a jansson object. */
static json_t *failed_object(const struct egpu__wire_args *a, const char *const *why)
{
    json_t *failed = json_object();

    for (size_t i = 0; failed != NULL && i < a->n; i++) {
        json_t *v;

        if (!listed(why[i]))
            continue;
        v = json_stringn(why[i], utf8_len(why[i]));
        if (v == NULL || json_object_set_new(failed, a->names[i], v) != 0) {
            json_decref(failed);
            return NULL;
        }
    }
    return failed;
}

/* The NodeList form: each passing Node goes back as the very bytes it came
 * as. The decoder checked them as JSON; decoding them again with jansson
 * would refuse some of what yajl accepts (a "\u0000" in a string, an integer
 * past int64), and one such Node would turn every filter into a 500. */
static int filter_result_full(struct egpu_buf *reply, const struct egpu__wire_args *a,
                              const char *const *why)
{
    static const char head[] = "{\"Nodes\":{\"metadata\":{},\"items\":[";
    static const char mid[] = "]},\"NodeNames\":null,\"FailedNodes\":";
    static const char tail[] = ",\"FailedAndUnresolvableNodes\":{},\"Error\":\"\"}";
    json_t *failed = failed_object(a, why);
    char *text = failed ? json_dumps(failed, JSON_COMPACT) : NULL;
    bool first = true;
    int rc;

    json_decref(failed);
    if (text == NULL)
        return -ENOMEM;
    rc = egpu_buf_append(reply, head, sizeof(head) - 1);
    for (size_t i = 0; rc == 0 && i < a->n; i++) {
        if (why[i] != NULL)
            continue;
        if (!first)
            rc = egpu_buf_append(reply, ",", 1);
        if (rc == 0)
            rc = egpu_buf_append(reply, a->body + a->items[i].off, a->items[i].len);
        first = false;
    }
    if (rc == 0)
        rc = egpu_buf_append(reply, mid, sizeof(mid) - 1);
    if (rc == 0)
        rc = egpu_buf_append(reply, text, strlen(text));
    if (rc == 0)
        rc = egpu_buf_append(reply, tail, sizeof(tail) - 1);
    free(text);
    return rc;
}

/* ExtenderFilterResult up to the NodeNames entries. */
static yajl_gen_status filter_head(yajl_gen g)
{
    yajl_gen_status st = yajl_gen_map_open(g);

    if (st == yajl_gen_status_ok && (st = GEN_LIT(g, "Nodes")) == yajl_gen_status_ok &&
        (st = yajl_gen_null(g)) == yajl_gen_status_ok &&
        (st = GEN_LIT(g, "NodeNames")) == yajl_gen_status_ok)
        st = yajl_gen_array_open(g);
    return st;
}

/* Messages encoded once (reason_text): a direct-mapped table by address. */
#define REASON_SLOTS 256

struct reason_memo {
    struct {
        const char *why; /* NULL: empty slot */
        size_t off, len; /* its JSON string's text in enc */
    } slot[REASON_SLOTS];
    struct egpu_buf enc;
    yajl_gen g; /* the generator each message is encoded with, reset between them */
};

/* The JSON string text of why ("..." with its escapes), as yajl_gen writes
 * it, into *text and *len (borrowed from m until the next call): encoded
 * the first time an address is seen (or when its slot was taken by
 * another), copied from m after. Returns 0, -ENOMEM or -EINVAL. */
static int reason_text(struct reason_memo *m, const char *why, const char **text, size_t *len)
{
    size_t k = ((uintptr_t)why >> 4) % REASON_SLOTS;
    const unsigned char *buf = NULL;
    size_t blen = 0;
    int rc = 0;

    if (m->slot[k].why != why) {
        /* A string alone, at the top level: exactly its text, no separator.
         * One generator for all, reset, so a message costs no allocation. */
        if (m->g == NULL && (m->g = egpu__wire_gen()) == NULL)
            return -ENOMEM;
        yajl_gen_reset(m->g, NULL);
        yajl_gen_clear(m->g);
        if (gen_str(m->g, why, utf8_len(why)) != yajl_gen_status_ok ||
            yajl_gen_get_buf(m->g, &buf, &blen) != yajl_gen_status_ok)
            rc = -EINVAL;
        m->slot[k].why = NULL;
        m->slot[k].off = m->enc.len;
        m->slot[k].len = blen;
        if (rc == 0 && (rc = egpu_buf_append(&m->enc, buf, blen)) == 0)
            m->slot[k].why = why;
        if (rc)
            return rc;
    }
    *text = m->enc.data + m->slot[k].off;
    *len = m->slot[k].len;
    return 0;
}

/* ExtenderFilterResult after the NodeNames entries: FailedNodes for the
 * nodes listed with a reason, and the rest. A message that yajl encoded
 * once (reason_text) is given to it again as a number token, which it
 * writes as it is with the separator its state calls for: the text is the
 * one it wrote for that string, so the reply is byte for byte what
 * encoding each message afresh writes (test_filter_reasons_encoded_once). */
static yajl_gen_status filter_tail(yajl_gen g, const struct egpu__wire_args *a,
                                   const char *const *why, int *rc)
{
    yajl_gen_status st = yajl_gen_array_close(g);
    struct reason_memo *m = egpu_calloc(1, sizeof(*m));

    if (m == NULL) {
        *rc = -ENOMEM;
        return yajl_gen_in_error_state;
    }
    egpu_buf_init(&m->enc, SIZE_MAX / 2);
    if (st == yajl_gen_status_ok && (st = GEN_LIT(g, "FailedNodes")) == yajl_gen_status_ok)
        st = yajl_gen_map_open(g);
    for (size_t i = 0; st == yajl_gen_status_ok && i < a->n; i++) {
        const char *text;
        size_t len;

        if (!listed(why[i]) ||
            (st = gen_str(g, a->names[i], strlen(a->names[i]))) != yajl_gen_status_ok)
            continue;
        if ((*rc = reason_text(m, why[i], &text, &len)) != 0)
            st = yajl_gen_in_error_state;
        else
            st = yajl_gen_number(g, text, len);
    }
    if (m->g != NULL)
        yajl_gen_free(m->g);
    egpu_buf_free(&m->enc);
    egpu_free(m);
    if (st == yajl_gen_status_ok && (st = yajl_gen_map_close(g)) == yajl_gen_status_ok &&
        (st = GEN_LIT(g, "FailedAndUnresolvableNodes")) == yajl_gen_status_ok &&
        (st = yajl_gen_map_open(g)) == yajl_gen_status_ok &&
        (st = yajl_gen_map_close(g)) == yajl_gen_status_ok &&
        (st = GEN_LIT(g, "Error")) == yajl_gen_status_ok &&
        (st = GEN_LIT(g, "")) == yajl_gen_status_ok)
        st = yajl_gen_map_close(g);
    return st;
}

size_t egpu__wire_gen_len(yajl_gen g)
{
    const unsigned char *buf;
    size_t len = 0;

    if (yajl_gen_get_buf(g, &buf, &len) != yajl_gen_status_ok)
        return 0;
    return len;
}

int egpu__wire_filter_result(struct egpu_buf *reply, const struct egpu__wire_args *a,
                             const char *const *why)
{
    struct sink k = {.reply = reply};
    yajl_gen_status st;
    yajl_gen g;

    if (a->full)
        return filter_result_full(reply, a, why);
    g = egpu__wire_gen();
    if (g == NULL)
        return -ENOMEM;
    st = filter_head(g);
    for (size_t i = 0; st == yajl_gen_status_ok && i < a->n; i++) {
        if (why[i] == NULL)
            st = gen_str(g, a->names[i], strlen(a->names[i]));
    }
    if (st == yajl_gen_status_ok)
        st = filter_tail(g, a, why, &k.rc);
    if (k.rc != 0) {
        yajl_gen_free(g);
        return k.rc;
    }
    return gen_done(g, &k, st);
}

/* Append the text a new generator writes for write(g, warg) once
 * prepare(g, parg) has brought it to a state. What yajl_gen writes for a value depends only on the
 * state it is in, so these are the bytes a full encoding has there. */
static int gen_part(struct egpu_buf *out, yajl_gen_status (*prepare)(yajl_gen g, const void *arg),
                    const void *parg, yajl_gen_status (*write)(yajl_gen g, const void *arg),
                    const void *warg)
{
    yajl_gen g = egpu__wire_gen();
    yajl_gen_status st;
    const unsigned char *buf;
    size_t from, len;
    int rc;

    if (g == NULL)
        return -ENOMEM;
    st = prepare(g, parg);
    from = egpu__wire_gen_len(g);
    if (st == yajl_gen_status_ok)
        st = write(g, warg);
    if (st == yajl_gen_status_ok)
        st = yajl_gen_get_buf(g, &buf, &len);
    rc = st == yajl_gen_status_ok ? egpu_buf_append(out, buf + from, len - from) : -EINVAL;
    yajl_gen_free(g);
    return rc;
}

/* Scores are 0..10: their text is fixed, which spares yajl_gen_integer's
 * printf per entry. */
yajl_gen_status egpu__wire_gen_priority(yajl_gen g, const char *name, uint8_t score)
{
    static const char *const scores[] = {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10"};
    yajl_gen_status st;

    if ((st = yajl_gen_map_open(g)) == yajl_gen_status_ok &&
        (st = GEN_LIT(g, "Host")) == yajl_gen_status_ok &&
        (st = gen_str(g, name, strlen(name))) == yajl_gen_status_ok &&
        (st = GEN_LIT(g, "Score")) == yajl_gen_status_ok &&
        (st = yajl_gen_number(g, scores[score > 10 ? 10 : score], score >= 10 ? 2 : 1)) ==
            yajl_gen_status_ok)
        st = yajl_gen_map_close(g);
    return st;
}

int egpu__wire_priorities(struct egpu_buf *reply, const struct egpu__wire_args *a,
                          const uint8_t *score)
{
    struct sink k = {.reply = reply};
    yajl_gen g = egpu__wire_gen();
    yajl_gen_status st;

    if (g == NULL)
        return -ENOMEM;
    st = yajl_gen_array_open(g);
    for (size_t i = 0; st == yajl_gen_status_ok && i < a->n; i++) {
        /* kube-scheduler adds score * weight to each listed host's total: a
         * host left out adds nothing, the same as score 0. */
        if (score[i] != 0)
            st = egpu__wire_gen_priority(g, a->names[i], score[i]);
    }
    if (st == yajl_gen_status_ok)
        st = yajl_gen_array_close(g);
    return gen_done(g, &k, st);
}

/* A HostPriority to write. */
struct priority_arg {
    const char *name;
    uint8_t score;
    bool first; /* the first entry of the list */
};

/* State: HostPriorityList, after one entry unless first. */
static yajl_gen_status in_priorities(yajl_gen g, const void *arg)
{
    const struct priority_arg *p = arg;
    yajl_gen_status st = yajl_gen_array_open(g);

    if (st == yajl_gen_status_ok && !p->first)
        st = egpu__wire_gen_priority(g, p->name, p->score);
    return st;
}

static yajl_gen_status write_priority(yajl_gen g, const void *arg)
{
    const struct priority_arg *p = arg;

    return egpu__wire_gen_priority(g, p->name, p->score);
}

int egpu__wire_priority_entry(struct egpu_buf *out, const char *name, uint8_t score, bool first)
{
    struct priority_arg p = {.name = name, .score = score, .first = first};

    return gen_part(out, in_priorities, &p, write_priority, &p);
}
