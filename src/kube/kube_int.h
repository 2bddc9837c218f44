/* kube/kube_int.h - private declarations shared by the files of src/kube.
 *
 * The transfer layer (client.c) runs one HTTP exchange on a pooled libcurl
 * handle; the watch stream decoder (watch.c) turns a chunked body into
 * events; small helpers for time, base64 and JSON bodies live here too so
 * every file of the client uses the same ones.
 */
#ifndef EGPU_KUBE_INT_H
#define EGPU_KUBE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "egpu/kube.h"

/* ------------------------------------------------------------------------ */
/* Time and randomness (clock.c)                                            */

/* CLOCK_MONOTONIC in milliseconds. */
int64_t egpu__kube_now_ms(void);

/* The current UTC time as a Kubernetes MicroTime,
 * "2006-01-02T15:04:05.000000Z" (27 characters + NUL). */
void egpu__kube_micro_time(char out[32]);

/* Initialise cond to time out against CLOCK_MONOTONIC. Returns 0 or -errno. */
int egpu__kube_cond_init(pthread_cond_t *cond);

/* Wait on cond (initialised by egpu__kube_cond_init, mu held) until
 * deadline_ms (egpu__kube_now_ms time) or a signal; returns with mu held. */
void egpu__kube_cond_wait_until(pthread_cond_t *cond, pthread_mutex_t *mu, int64_t deadline_ms);

/* Fill buf with len random bytes (getrandom, else the clock). */
void egpu__kube_random(void *buf, size_t len);

/* A background thread with a stop flag and sleeps that the flag cuts short
 * (the informer's and the elector's loops). */
struct egpu__kube_worker {
    pthread_t thread;
    bool running;        /* started and not yet joined (owner's thread only) */
    atomic_bool stop;    /* raised by egpu__kube_worker_stop */
    pthread_mutex_t mu;  /* with cond: the sleeps */
    pthread_cond_t cond; /* CLOCK_MONOTONIC */
};

/* Returns 0 or -errno. */
int egpu__kube_worker_init(struct egpu__kube_worker *w);
void egpu__kube_worker_destroy(struct egpu__kube_worker *w);
/* Run fn(arg) on a new thread. Returns 0, -EALREADY or -errno. */
int egpu__kube_worker_start(struct egpu__kube_worker *w, void *(*fn)(void *), void *arg);
/* Raise stop, wake a sleep and join the thread; no-op when not running. */
void egpu__kube_worker_stop(struct egpu__kube_worker *w);
/* Sleep ms unless stop is raised. Returns false when stopped. */
bool egpu__kube_worker_pause(struct egpu__kube_worker *w, long ms);
/* Whether stop has been raised. */
bool egpu__kube_worker_stopping(struct egpu__kube_worker *w);

/* ------------------------------------------------------------------------ */
/* Transfers (client.c)                                                     */

/* Called with body bytes of a 2xx reply (streaming calls only). Returns 0 to
 * go on or a nonzero code that aborts the transfer; the code comes back as
 * egpu__kube_perform's result. */
typedef int (*egpu__kube_sink)(void *ud, const char *data, size_t len);

struct egpu__kube_call {
    const char *method;       /* "GET", "POST", "PUT", "PATCH", "DELETE" */
    const char *path;         /* from the server root, with the query string */
    const char *content_type; /* of body; NULL = application/json */
    const char *body;         /* or NULL */
    size_t body_len;
    long timeout_ms;         /* whole exchange; 0 = the client's default, < 0 = none */
    const atomic_bool *stop; /* or NULL: raised -> -ECANCELED within ~100 ms */
    egpu__kube_sink sink;    /* or NULL: the 2xx body goes into reply too */
    void *sink_ud;
    void (*on_open)(void *ud); /* or NULL: called once a 2xx reply's headers are in */
    void *on_open_ud;
    struct egpu_buf *reply; /* body of non-streamed replies (bounded by its max) */
    /* Out. */
    long http_code;     /* final HTTP status, 0 if none arrived */
    long retry_after_s; /* Retry-After header in seconds, -1 if none */
};

/* Run one exchange. Returns 0 when a reply arrived (any HTTP status; see
 * call->http_code), the sink's nonzero code, or a transport failure
 * (-ECONNREFUSED, -EHOSTUNREACH, -ETIMEDOUT, -EMSGSIZE, -ECANCELED, -ENOMEM,
 * -EIO) with *err set. */
int egpu__kube_perform(struct egpu_kube *kc, struct egpu__kube_call *call, struct egpu_error *err);

/* A failed reply (non-2xx) as a return code: fills *st (may be NULL), sets
 * *err to "<method> <path>: <code> <reason>: <message>" and returns the code
 * from the table in kube.h. */
int egpu__kube_fail(const struct egpu__kube_call *call, struct egpu_kube_status *st,
                    struct egpu_error *err);

/* Fill *st from a parsed Status object (code defaults to http_code). Returns
 * 0, or -EPROTO when root is not a Status (st then holds only http_code). */
int egpu__kube_status_from_json(const json_t *root, long http_code, struct egpu_kube_status *st);

/* egpu_kube_request with a stop flag and timeout (see struct egpu__kube_call). */
int egpu__kube_request(struct egpu_kube *kc, const char *method, const char *path,
                       const char *content_type, const char *body, size_t body_len, size_t max,
                       long timeout_ms, const atomic_bool *stop, json_t **out,
                       struct egpu_kube_status *st, struct egpu_error *err);

/* method on the object (res, ns, name, sub) or, name NULL, its collection,
 * with body obj (may be NULL) sent as ctype (NULL = application/json);
 * timeout_ms and stop as in struct egpu__kube_call. Returns as
 * egpu_kube_request. */
int egpu__kube_object_call(struct egpu_kube *kc, const char *method,
                           const struct egpu_kube_resource *res, const char *ns, const char *name,
                           const char *sub, const char *ctype, const json_t *obj, long timeout_ms,
                           const atomic_bool *stop, json_t **out, struct egpu_kube_status *st,
                           struct egpu_error *err);

/* egpu_kube_list with a stop flag (informer). */
int egpu__kube_list(struct egpu_kube *kc, const struct egpu_kube_resource *res, const char *ns,
                    const struct egpu_kube_list_opts *opts, const atomic_bool *stop, json_t **out,
                    struct egpu_kube_status *st, struct egpu_error *err);

/* Serialize obj compactly into b (reset first), keys sorted when sort_keys
 * (a canonical form for comparisons). Returns 0, -EMSGSIZE, -ENOMEM or
 * -EINVAL (obj NULL). */
int egpu__kube_dump(const json_t *obj, struct egpu_buf *b, bool sort_keys);

/* Append "?key=value" (first) or "&key=value" to b, value percent-encoded. */
int egpu__kube_query(struct egpu_buf *b, const char *key, const char *value);

/* metadata.<field> of obj as a string, or NULL (missing, not a string, or
 * holding a NUL character: see egpu_kube_str). Borrowed from obj. */
const char *egpu__kube_meta_str(const json_t *obj, const char *field);

/* ------------------------------------------------------------------------ */
/* Config helpers (config.c)                                                */

/* Read a whole file of at most max bytes; *out egpu_malloc'ed, NUL-terminated.
 * Returns 0, -errno of fopen, -EMSGSIZE, -EIO or -ENOMEM. */
int egpu__kube_read_file(const char *path, size_t max, char **out, size_t *out_len);

/* Strip leading and trailing whitespace in place. */
void egpu__kube_trim(char *s);

/* Deep copy of src (defaults filled in). Returns 0 or -ENOMEM. */
int egpu__kube_config_dup(const struct egpu_kube_config *src, struct egpu_kube_config **out);

/* Decode standard base64 (RFC 4648, padding optional, whitespace ignored).
 * *out is egpu_malloc'ed and NUL-terminated after *out_len bytes. Returns 0,
 * EGPU_ESYNTAX or -ENOMEM. */
int egpu__kube_base64_decode(const char *in, size_t len, char **out, size_t *out_len);

/* ------------------------------------------------------------------------ */
/* Watch stream decoding (watch.c)                                          */

#define EGPU_KUBE_EVENT_MAX ((size_t)16 << 20) /* one watch event line, bytes */

/* Splits a body into '\n'-terminated lines across arbitrary chunk
 * boundaries, with a bound on the longest line. */
typedef int (*egpu__kube_line_cb)(void *ud, const char *line, size_t len);

struct egpu__kube_lines {
    struct egpu_buf partial; /* the unfinished line carried between chunks */
    egpu__kube_line_cb cb;
    void *ud;
    bool dropping;         /* passing over a line longer than the bound, up to its '\n' */
    unsigned long dropped; /* lines passed over for their length */
};

void egpu__kube_lines_init(struct egpu__kube_lines *l, size_t max_line, egpu__kube_line_cb cb,
                           void *ud);
/* Feed len bytes; cb runs for every complete line (without its '\n'; blank
 * lines skipped). A line that grows past max_line is passed over up to its
 * '\n' and counted in dropped. Returns 0, cb's nonzero result (feeding stops
 * there) or -ENOMEM. */
int egpu__kube_lines_feed(struct egpu__kube_lines *l, const char *data, size_t len);
/* End of body: a last line without '\n' is passed to cb. Same returns. */
int egpu__kube_lines_finish(struct egpu__kube_lines *l);
void egpu__kube_lines_free(struct egpu__kube_lines *l);

/* Decodes watch events from body chunks and tracks the resourceVersion. */
struct egpu__kube_stream {
    struct egpu__kube_lines lines;
    egpu_kube_watch_cb cb;
    void *ud;
    char *rv;                       /* EGPU_KUBE_RV_MAX bytes, updated per event */
    unsigned long events;           /* events decoded (bookmarks included) */
    unsigned long skipped;          /* lines that were no event, or too long (logged) */
    unsigned long dropped_seen;     /* lines.dropped already counted in skipped */
    bool stopped;                   /* cb asked to stop (positive return) */
    struct egpu_kube_status status; /* of an ERROR event */
    /* egpu_kube_keep's paths applied to each event's object as its line is
     * decoded (list_decode.c; an ERROR event is decoded whole), or NULL:
     * events whole. Set after egpu__kube_stream_init; borrowed. */
    const char *const *keep;
    struct egpu__kube_event_keep *kept; /* keep compiled at the first line; owned */
};

void egpu__kube_stream_init(struct egpu__kube_stream *s, egpu_kube_watch_cb cb, void *ud, char *rv);
/* Returns 0 to go on, 1 when cb stopped the stream, or a negative code:
 * EGPU_KUBE_EEXPIRED (ERROR event with code 410, s->status filled), the code
 * of another ERROR event (one without a Status: its HTTP code, 500), -ENOMEM, or cb's
 * negative return. A line that is no event, or too long, is counted in
 * s->skipped, logged, and passed over. */
int egpu__kube_stream_feed(struct egpu__kube_stream *s, const char *data, size_t len);
int egpu__kube_stream_finish(struct egpu__kube_stream *s);
void egpu__kube_stream_free(struct egpu__kube_stream *s);

/* ------------------------------------------------------------------------ */
/* Decoding with a keep-spec (list_decode.c)                                */

/* Decode a List page of len bytes (body need not be NUL-terminated) into
 * *out (new reference) as json_loadb(EGPU_KUBE_JSON_FLAGS) then
 * egpu_kube_keep(item, keep) on each element of its "items" would give it,
 * without building what keep leaves out; members other than "items" are
 * kept whole. keep: egpu_kube_keep's NULL-terminated path list (borrowed;
 * NULL = only name, namespace and resourceVersion). Returns 0, EGPU_ESYNTAX
 * with *err naming what is wrong and its byte offset (malformed JSON,
 * nesting deeper than JSON_PARSER_MAX_DEPTH, a number out of range, a key
 * holding a NUL, a string that is not UTF-8, a top-level scalar), -EINVAL
 * (a keep path with an empty or too long segment) or -ENOMEM; *out is NULL
 * on failure. */
int egpu__kube_list_decode(const char *body, size_t len, const char *const *keep, json_t **out,
                           struct egpu_error *err);

/* One watch event's line decoded the same way, its "object" member being
 * what the paths apply to, with the paths compiled once for the stream
 * (a streaming list's events are one an object: compiling them per event
 * was 5% of egpu-scheduler's restart). _new: *out (free with _free), or
 * -EINVAL (a path with an empty or too long segment) / -ENOMEM with *out
 * NULL. _decode_with: as egpu__kube_list_decode, with k (borrowed) for
 * keep. _free: NULL is a no-op. */
struct egpu__kube_event_keep;
int egpu__kube_event_keep_new(const char *const *keep, struct egpu__kube_event_keep **out,
                              struct egpu_error *err);
int egpu__kube_event_decode_with(const struct egpu__kube_event_keep *k, const char *body,
                                 size_t len, json_t **out, struct egpu_error *err);
void egpu__kube_event_keep_free(struct egpu__kube_event_keep *k);

#endif /* EGPU_KUBE_INT_H */
