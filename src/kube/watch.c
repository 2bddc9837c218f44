/* kube/watch.c - the watch stream: GET ...?watch=1 and its events.
 *
 * Wire format (api_protocol_notes.md, "Watch"): a chunked 200 reply whose
 * body is a sequence of JSON documents, one per line:
 *   {"type":"ADDED|MODIFIED|DELETED|BOOKMARK|ERROR","object":{...}}\n
 * Chunk boundaries do not line up with events, so the body is split into
 * lines across chunks (struct egpu__kube_lines) before each line is decoded.
 * Every event's metadata.resourceVersion, BOOKMARKs included, becomes the
 * point to resume from. An ERROR event carries a Status; code 410 means the
 * resourceVersion is too old and the caller must list again (so does a plain
 * HTTP 410). A streaming list (send_initial_events: KEP 3157, "Streaming
 * list (WatchList)" in api_protocol_notes.md) is the same stream, its first
 * events the collection's state as ADDED, then a BOOKMARK annotated
 * k8s.io/initial-events-end (watch_initial_events_end_bookmark.jsonl).
 *
 * One bad line never ends the stream: objects come from tenants, and a watch
 * that gave up on one would meet the same line again on every retry from the
 * same resourceVersion, stopping every later change from reaching the cache.
 * Events are decoded with JSON_ALLOW_NUL (a "\u0000" in any string is valid
 * JSON); a line that still is not an event (not JSON, no type or object, an
 * unknown type) or is longer than the bound is logged, counted in the
 * stream's skipped counter and passed over, and the resourceVersion stays
 * where the last good event left it.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "egpu/log.h"
#include "kube_int.h"

#define WATCH_TIMEOUT_S 300    /* default timeoutSeconds */
#define WATCH_GRACE_MS  30000L /* the client waits this much longer than the server */

/* ------------------------------------------------------------------------ */
/* Lines                                                                    */

void egpu__kube_lines_init(struct egpu__kube_lines *l, size_t max_line, egpu__kube_line_cb cb,
                           void *ud)
{
    egpu_buf_init(&l->partial, max_line);
    l->cb = cb;
    l->ud = ud;
    l->dropping = false;
    l->dropped = 0;
}

static int emit(struct egpu__kube_lines *l, const char *line, size_t len)
{
    size_t i;

    if (len > l->partial.max) {
        l->dropped++;
        return 0;
    }
    while (len > 0 && line[len - 1] == '\r')
        len--;
    for (i = 0; i < len; i++) {
        if (line[i] != ' ' && line[i] != '\t' && line[i] != '\r')
            break;
    }
    return i == len ? 0 : l->cb(l->ud, line, len);
}

int egpu__kube_lines_feed(struct egpu__kube_lines *l, const char *data, size_t len)
{
    while (len > 0) {
        const char *nl = memchr(data, '\n', len);
        size_t n;
        int rc;

        if (nl == NULL) {
            if (l->dropping)
                return 0;
            rc = egpu_buf_append(&l->partial, data, len);
            if (rc != -EMSGSIZE)
                return rc;
            /* Pass over the rest of this line, up to its '\n'. */
            egpu_buf_reset(&l->partial);
            l->dropping = true;
            l->dropped++;
            return 0;
        }
        n = (size_t)(nl - data);
        rc = 0;
        if (l->dropping) {
            l->dropping = false; /* the long line ends here */
        } else if (l->partial.len > 0) {
            rc = egpu_buf_append(&l->partial, data, n);
            if (!rc) {
                rc = emit(l, l->partial.data, l->partial.len);
            } else if (rc == -EMSGSIZE) {
                l->dropped++; /* it ends here, past the bound */
                rc = 0;
            }
            egpu_buf_reset(&l->partial);
        } else {
            rc = emit(l, data, n);
        }
        if (rc)
            return rc;
        data = nl + 1;
        len -= n + 1;
    }
    return 0;
}

int egpu__kube_lines_finish(struct egpu__kube_lines *l)
{
    int rc = 0;

    if (!l->dropping && l->partial.len > 0)
        rc = emit(l, l->partial.data, l->partial.len);
    egpu_buf_reset(&l->partial);
    l->dropping = false;
    return rc;
}

void egpu__kube_lines_free(struct egpu__kube_lines *l)
{
    egpu_buf_free(&l->partial);
}

/* ------------------------------------------------------------------------ */
/* Events                                                                   */

/* Log and count a line that is not an event; the stream goes on. */
static int skip(struct egpu__kube_stream *s, json_t *ev, const char *why, const char *detail)
{
    s->skipped++;
    egpu_log(EGPU_LOG_WARN, "watch line skipped reason=\"%s: %s\" skipped=%lu", why, detail,
             s->skipped);
    json_decref(ev);
    return 0;
}

static int on_line(void *ud, const char *line, size_t len)
{
    static const char *const names[] = {"ADDED", "MODIFIED", "DELETED", "BOOKMARK"};
    struct egpu__kube_stream *s = ud;
    json_error_t jerr;
    struct egpu_error err = {0};
    json_t *ev, *obj;
    const char *type, *rv;
    int t = -1, rc;

    if (s->keep == NULL) {
        ev = json_loadb(line, len, EGPU_KUBE_JSON_FLAGS, &jerr);
        if (ev == NULL)
            return skip(s, ev, "not JSON", jerr.text);
    } else {
        rc = s->kept != NULL ? 0 : egpu__kube_event_keep_new(s->keep, &s->kept, &err);
        if (rc == 0)
            rc = egpu__kube_event_decode_with(s->kept, line, len, &ev, &err);
        if (rc == -ENOMEM)
            return rc;
        if (rc)
            return skip(s, NULL, "not JSON", err.msg);
        type = egpu_kube_str(json_object_get(ev, "type"));
        if (type != NULL && (strcmp(type, "ERROR") == 0 || strcmp(type, "BOOKMARK") == 0)) {
            /* An ERROR's object is a Status, not one of the resource's; a
             * BOOKMARK's annotations (initial-events-end) are not a kept
             * path. Both are a few hundred bytes and rare. */
            json_decref(ev);
            ev = json_loadb(line, len, EGPU_KUBE_JSON_FLAGS, &jerr);
            if (ev == NULL)
                return skip(s, ev, "not JSON", jerr.text);
        }
    }
    obj = json_object_get(ev, "object");
    type = egpu_kube_str(json_object_get(ev, "type"));
    if (type == NULL || !json_is_object(obj))
        return skip(s, ev, "not a watch event", "no type or no object");
    if (strcmp(type, "ERROR") == 0) {
        egpu__kube_status_from_json(obj, 500, &s->status);
        json_decref(ev);
        rc = egpu_kube_status_errno(&s->status);
        return rc ? rc : -EPROTO;
    }
    for (int i = 0; i < 4; i++) {
        if (strcmp(type, names[i]) == 0)
            t = i;
    }
    if (t < 0)
        return skip(s, ev, "unknown event type", type);
    s->events++;
    rc = s->cb ? s->cb(s->ud, (enum egpu_kube_event_type)t, obj) : 0;
    /* Resume after this event only once it was taken. */
    rv = egpu__kube_meta_str(obj, "resourceVersion");
    if (rc >= 0 && rv != NULL && strlen(rv) < EGPU_KUBE_RV_MAX)
        snprintf(s->rv, EGPU_KUBE_RV_MAX, "%s", rv);
    json_decref(ev);
    if (rc > 0) {
        s->stopped = true;
        return 1;
    }
    return rc;
}

void egpu__kube_stream_init(struct egpu__kube_stream *s, egpu_kube_watch_cb cb, void *ud, char *rv)
{
    memset(s, 0, sizeof(*s));
    egpu__kube_lines_init(&s->lines, EGPU_KUBE_EVENT_MAX, on_line, s);
    s->cb = cb;
    s->ud = ud;
    s->rv = rv;
}

/* Count and log the lines the splitter passed over for their length. */
static int took_lines(struct egpu__kube_stream *s, int rc)
{
    if (s->lines.dropped > s->dropped_seen) {
        s->skipped += s->lines.dropped - s->dropped_seen;
        s->dropped_seen = s->lines.dropped;
        egpu_log(EGPU_LOG_WARN, "watch line skipped reason=\"longer than %zu bytes\" skipped=%lu",
                 s->lines.partial.max, s->skipped);
    }
    return rc;
}

int egpu__kube_stream_feed(struct egpu__kube_stream *s, const char *data, size_t len)
{
    return took_lines(s, egpu__kube_lines_feed(&s->lines, data, len));
}

int egpu__kube_stream_finish(struct egpu__kube_stream *s)
{
    return took_lines(s, egpu__kube_lines_finish(&s->lines));
}

void egpu__kube_stream_free(struct egpu__kube_stream *s)
{
    egpu__kube_event_keep_free(s->kept);
    s->kept = NULL;
    egpu__kube_lines_free(&s->lines);
}

bool egpu_kube_initial_events_end(const json_t *object)
{
    const json_t *a = json_object_get(json_object_get(object, "metadata"), "annotations");
    const char *v = egpu_kube_str(json_object_get(a, "k8s.io/initial-events-end"));

    return v != NULL && strcmp(v, "true") == 0;
}

/* ------------------------------------------------------------------------ */
/* The request                                                              */

static int sink(void *ud, const char *data, size_t len)
{
    return egpu__kube_stream_feed(ud, data, len);
}

static int watch_path(struct egpu_buf *b, const struct egpu_kube_resource *res, const char *ns,
                      const struct egpu_kube_watch_opts *o)
{
    char timeout[24];
    int rc = egpu_kube_path(b, res, ns, NULL, NULL);

    snprintf(timeout, sizeof(timeout), "%d", o->timeout_s > 0 ? o->timeout_s : WATCH_TIMEOUT_S);
    if (!rc)
        rc = egpu__kube_query(b, "watch", "1");
    if (!rc && (!o->no_bookmarks || o->send_initial_events))
        rc = egpu__kube_query(b, "allowWatchBookmarks", "true");
    if (!rc && o->send_initial_events)
        rc = egpu__kube_query(b, "sendInitialEvents", "true");
    if (!rc && o->send_initial_events)
        rc = egpu__kube_query(b, "resourceVersionMatch", "NotOlderThan");
    if (!rc)
        rc = egpu__kube_query(b, "timeoutSeconds", timeout);
    if (!rc && o->resource_version[0] != '\0')
        rc = egpu__kube_query(b, "resourceVersion", o->resource_version);
    if (!rc && o->label_selector != NULL && o->label_selector[0] != '\0')
        rc = egpu__kube_query(b, "labelSelector", o->label_selector);
    if (!rc && o->field_selector != NULL && o->field_selector[0] != '\0')
        rc = egpu__kube_query(b, "fieldSelector", o->field_selector);
    return rc;
}

int egpu_kube_watch(struct egpu_kube *kc, const struct egpu_kube_resource *res, const char *ns,
                    struct egpu_kube_watch_opts *opts, egpu_kube_watch_cb cb, void *ud,
                    struct egpu_kube_status *st, struct egpu_error *err)
{
    struct egpu__kube_stream s;
    struct egpu_buf path, reply;
    struct egpu__kube_call call = {.method = "GET"};
    int rc;

    if (opts == NULL)
        return egpu_error_set(err, -EINVAL, "watch: no options");
    opts->resource_version[EGPU_KUBE_RV_MAX - 1] = '\0';
    egpu_buf_init(&path, (size_t)64 << 10);
    rc = watch_path(&path, res, ns, opts);
    if (rc) {
        egpu_buf_free(&path);
        return egpu_error_set(err, rc, "watch %s: bad path: %s", res ? res->plural : "?",
                              egpu_strerror(rc));
    }
    egpu_buf_init(&reply, EGPU_KUBE_BODY_MAX);
    egpu__kube_stream_init(&s, cb, ud, opts->resource_version);
    s.keep = opts->keep;
    call.path = egpu_buf_str(&path);
    call.stop = opts->stop;
    call.timeout_ms =
        (long)(opts->timeout_s > 0 ? opts->timeout_s : WATCH_TIMEOUT_S) * 1000 + WATCH_GRACE_MS;
    call.sink = sink;
    call.sink_ud = &s;
    call.reply = &reply;
    call.on_open = opts->on_open;
    call.on_open_ud = opts->open_ud;
    opts->skipped = 0;
    rc = egpu__kube_perform(kc, &call, err);
    if (rc == 0 && (call.http_code < 200 || call.http_code >= 300))
        rc = egpu__kube_fail(&call, st, err);
    else if (rc == 0)
        rc = egpu__kube_stream_finish(&s);
    if (rc == 1) {
        rc = 0; /* cb asked to stop */
    } else if (rc < 0 && s.status.code != 0) {
        if (st != NULL)
            *st = s.status;
        egpu_error_set(err, rc, "watch %s: ERROR event: %d %s: %s", call.path, s.status.code,
                       s.status.reason, s.status.message);
    } else if (rc == -EPROTO || rc == -EMSGSIZE) {
        egpu_error_set(err, rc, "watch %s: %s", call.path,
                       rc == -EPROTO ? "malformed event" : "event too large");
    }
    opts->skipped = s.skipped;
    egpu__kube_stream_free(&s);
    egpu_buf_free(&reply);
    egpu_buf_free(&path);
    return rc;
}
