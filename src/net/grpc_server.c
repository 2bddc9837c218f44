/* net/grpc_server.c - the gRPC server the node agent serves the kubelet's
 * device plugin API on: plain-text HTTP/2 on a unix socket, over the gRPC
 * core C API (see egpu/grpc.h for the contract).
 *
 * DESIGN: one completion queue, polled by the server's own threads (each
 * runs cq_main). Every event's tag points at a `struct tag` inside the
 * object it belongs to, and tag->kind says what finished:
 *   - TAG_REQUEST: a call to a registered method (or, with m == NULL, to any
 *     other path) arrived. We first post a replacement request, so the next
 *     call can be matched by another thread, then answer it. Each method
 *     keeps `threads` requests posted, plus as many for unknown paths.
 *   - TAG_CALL_DONE: the one batch that answers a unary call (or an unknown
 *     path with UNIMPLEMENTED) finished: initial metadata, the reply, the
 *     status and RECV_CLOSE_ON_SERVER go together, so one event ends it.
 *   - TAG_STREAM_WRITE: a stream's send batch finished. A stream has at most
 *     one send batch in flight; more messages wait in its queue, and the
 *     status goes after the last of them.
 *   - TAG_STREAM_CLOSE: a stream's RECV_CLOSE_ON_SERVER finished: the call is
 *     over (status sent, or cancelled by the peer, its deadline or our stop).
 *   - TAG_SHUTDOWN: grpc_server_shutdown_and_notify completed.
 * Unary handlers run on the thread that took the call's event. A stream is
 * reference-counted: the server holds one reference until the call is over
 * and no batch of it is in flight (then it unrefs the grpc_call), and the
 * application holds one from accepting the stream until
 * egpu_grpc_stream_release, so either may go first. Sends take only the
 * stream's mutex and never wait for the peer.
 *
 * `live` counts the posted requests and the calls the server side still
 * holds; stop waits for it to reach zero (after shutdown and, past the
 * grace period, cancelling every call) before it shuts the queue down, so
 * no batch is ever started on a dead queue. Lock order: srv->mu, then a
 * stream's mu; callbacks run with neither held.
 *
 * grpc_init/grpc_shutdown bracket a running server (start/stop), so a
 * stopped server holds nothing of gRPC's.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>

#include "egpu/grpc.h"
#include "egpu/log.h"

#define THREADS_MAX 64
#define SOCKET_MODE 0600 /* the socket file: its owner reads and writes */
#define ADDR_MAX    (sizeof(((struct sockaddr_un *)0)->sun_path) + 8) /* "unix:" + path */

enum tag_kind {
    TAG_REQUEST,
    TAG_CALL_DONE,
    TAG_STREAM_WRITE,
    TAG_STREAM_CLOSE,
    TAG_SHUTDOWN,
};

struct tag {
    enum tag_kind kind;
    void *owner;
};

struct method {
    char *name;
    bool stream;
    egpu_grpc_unary_cb unary;
    egpu_grpc_stream_cb open;
    egpu_grpc_stream_close_cb close;
    void *data;
    void *handle; /* grpc_server_register_method's, while running */
};

struct egpu_grpc_server {
    char *path;
    unsigned nthreads;
    struct method *methods;
    size_t nmethods;
    size_t cap;
    /* While running: */
    bool running;
    grpc_server *gs;
    grpc_completion_queue *cq;
    pthread_t *threads;
    unsigned nstarted;
    struct tag shutdown_tag;
    dev_t sock_dev; /* the socket file we created, removed by stop */
    ino_t sock_ino;
    bool have_sock;
    pthread_mutex_t mu; /* guards the fields below */
    pthread_cond_t cv;  /* live reached 0, or shutdown_done */
    atomic_bool stopping;
    bool shutdown_done;
    size_t live;
    struct egpu_grpc_stream *streams; /* streams the server side still holds */
};

/* A posted request, then the unary (or unknown-path) call it became. */
struct call {
    struct tag tag;
    struct egpu_grpc_server *srv;
    const struct method *m; /* NULL: any unregistered path */
    grpc_call *gc;
    gpr_timespec deadline;
    grpc_metadata_array md;
    grpc_call_details details; /* unregistered paths only */
    grpc_byte_buffer *payload; /* registered methods: the request message */
    grpc_byte_buffer *reply;
    grpc_slice status_details;
    bool has_details;
    int cancelled;
};

struct qmsg {
    struct qmsg *next;
    size_t len;
    char data[];
};

struct egpu_grpc_stream {
    struct tag write_tag;
    struct tag close_tag;
    struct egpu_grpc_server *srv; /* only while the server side holds the stream */
    const struct method *m;
    grpc_call *gc;
    gpr_timespec deadline;
    struct egpu_grpc_stream *prev, *next; /* srv->streams */
    pthread_mutex_t mu;                   /* guards everything below */
    int refs;                             /* server side + application + callbacks */
    struct qmsg *head, *tail;             /* messages waiting to be sent */
    size_t queued_bytes;
    grpc_byte_buffer *wbuf; /* the message of the batch in flight */
    grpc_slice details;     /* the status message of the batch in flight */
    bool has_details;
    int finish_code;
    char finish_msg[EGPU_GRPC_STATUS_MSG_MAX];
    unsigned inflight; /* batches started, not yet completed */
    int cancelled;     /* RECV_CLOSE_ON_SERVER's result */
    bool accepted;     /* the open callback returned 0 */
    bool busy;         /* a send batch is in flight */
    bool md_sent;      /* initial metadata went out */
    bool finishing;    /* a status is queued */
    bool by_stop;      /* ... because the server stops */
    bool status_sent;
    bool broken; /* a send failed: the call is going away */
    bool closed; /* RECV_CLOSE_ON_SERVER completed */
};

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */

static grpc_byte_buffer *make_buffer(const void *p, size_t len)
{
    grpc_slice s = grpc_slice_from_copied_buffer(len ? p : "", len);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);

    grpc_slice_unref(s);
    return bb;
}

/* Copy the message in bb into out. Returns 0, or a negative code with st set. */
static int read_message(grpc_byte_buffer *bb, struct egpu_buf *out, struct egpu_grpc_status *st)
{
    grpc_byte_buffer_reader r;
    grpc_slice s;
    int rc = 0;

    if (bb == NULL)
        return egpu_grpc_status_set(st, GRPC_STATUS_INVALID_ARGUMENT, "request message missing");
    if (!grpc_byte_buffer_reader_init(&r, bb))
        return egpu_grpc_status_set(st, GRPC_STATUS_INVALID_ARGUMENT,
                                    "request message cannot be decompressed");
    while (rc == 0 && grpc_byte_buffer_reader_next(&r, &s)) {
        rc = egpu_buf_append(out, GRPC_SLICE_START_PTR(s), GRPC_SLICE_LENGTH(s));
        grpc_slice_unref(s);
    }
    grpc_byte_buffer_reader_destroy(&r);
    if (rc == -EMSGSIZE)
        return egpu_grpc_status_set(st, GRPC_STATUS_RESOURCE_EXHAUSTED,
                                    "request message larger than %d bytes", EGPU_GRPC_MSG_MAX);
    if (rc != 0)
        return egpu_grpc_status_set(st, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
    return 0;
}

/* Turn a handler's failure (rc != 0) into the status the peer gets. */
static void resolve_status(int rc, struct egpu_grpc_status *st)
{
    if (st->code <= GRPC_STATUS_OK || st->code > GRPC_STATUS_UNAUTHENTICATED) {
        st->code = rc < 0 ? egpu_grpc_errno_status(rc) : GRPC_STATUS_UNKNOWN;
        if (st->code == GRPC_STATUS_OK)
            st->code = GRPC_STATUS_UNKNOWN;
    }
    if (st->msg[0] == '\0')
        snprintf(st->msg, sizeof(st->msg), "%s", rc < 0 ? egpu_strerror(rc) : "handler failed");
}

static void live_put(struct egpu_grpc_server *srv)
{
    pthread_mutex_lock(&srv->mu);
    if (--srv->live == 0)
        pthread_cond_broadcast(&srv->cv);
    pthread_mutex_unlock(&srv->mu);
}

/* ------------------------------------------------------------------------ */
/* Requests and unary calls                                                 */

static void call_free(struct call *c)
{
    if (c->gc != NULL)
        grpc_call_unref(c->gc);
    if (c->payload != NULL)
        grpc_byte_buffer_destroy(c->payload);
    if (c->reply != NULL)
        grpc_byte_buffer_destroy(c->reply);
    if (c->has_details)
        grpc_slice_unref(c->status_details);
    grpc_metadata_array_destroy(&c->md);
    grpc_call_details_destroy(&c->details);
    egpu_free(c);
}

/* Post one request for calls of m (NULL: unregistered paths). */
static int post_request(struct egpu_grpc_server *srv, const struct method *m)
{
    grpc_call_error e;
    struct call *c;

    pthread_mutex_lock(&srv->mu);
    if (atomic_load(&srv->stopping)) {
        pthread_mutex_unlock(&srv->mu);
        return 0;
    }
    srv->live++;
    pthread_mutex_unlock(&srv->mu);
    c = egpu_calloc(1, sizeof(*c));
    if (c == NULL) {
        live_put(srv);
        return -ENOMEM;
    }
    c->tag = (struct tag){TAG_REQUEST, c};
    c->srv = srv;
    c->m = m;
    grpc_metadata_array_init(&c->md);
    grpc_call_details_init(&c->details);
    if (m != NULL)
        e = grpc_server_request_registered_call(srv->gs, m->handle, &c->gc, &c->deadline, &c->md,
                                                &c->payload, srv->cq, srv->cq, &c->tag);
    else
        e = grpc_server_request_call(srv->gs, &c->gc, &c->details, &c->md, srv->cq, srv->cq,
                                     &c->tag);
    if (e != GRPC_CALL_OK) {
        egpu_log(EGPU_LOG_ERROR, "grpc request_call failed method=%s error=\"%s\"",
                 m ? m->name : "*", grpc_call_error_to_string(e));
        call_free(c);
        live_put(srv);
        return -EIO;
    }
    return 0;
}

/* Answer c in one batch: reply (NULL on failure) and status st. */
static void call_answer(struct call *c, const struct egpu_buf *reply,
                        const struct egpu_grpc_status *st)
{
    struct egpu_grpc_server *srv = c->srv;
    grpc_op ops[4];
    size_t n = 0;
    grpc_call_error e;

    memset(ops, 0, sizeof(ops));
    ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    if (reply != NULL) {
        c->reply = make_buffer(reply->data, reply->len);
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = c->reply;
    }
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = (grpc_status_code)st->code;
    if (st->code != GRPC_STATUS_OK) {
        c->status_details = grpc_slice_from_copied_string(st->msg);
        c->has_details = true;
        ops[n].data.send_status_from_server.status_details = &c->status_details;
    }
    n++;
    ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[n++].data.recv_close_on_server.cancelled = &c->cancelled;
    c->tag.kind = TAG_CALL_DONE;
    e = grpc_call_start_batch(c->gc, ops, n, &c->tag, NULL);
    if (e != GRPC_CALL_OK) {
        egpu_log(EGPU_LOG_ERROR, "grpc answer failed method=%s error=\"%s\"",
                 c->m ? c->m->name : "*", grpc_call_error_to_string(e));
        call_free(c);
        live_put(srv);
    }
}

static void answer_unknown(struct call *c)
{
    struct egpu_grpc_status st = {.code = GRPC_STATUS_UNIMPLEMENTED};
    size_t n = GRPC_SLICE_LENGTH(c->details.method);

    snprintf(st.msg, sizeof(st.msg), "unknown method %.*s", n > 200 ? 200 : (int)n,
             (const char *)GRPC_SLICE_START_PTR(c->details.method));
    egpu_log(EGPU_LOG_DEBUG, "grpc unimplemented method=\"%.*s\"", n > 200 ? 200 : (int)n,
             (const char *)GRPC_SLICE_START_PTR(c->details.method));
    call_answer(c, NULL, &st);
}

static void answer_unary(struct call *c)
{
    struct egpu_grpc_status st = {0};
    struct egpu_buf in, out;
    int rc;

    egpu_buf_init(&in, EGPU_GRPC_MSG_MAX);
    egpu_buf_init(&out, EGPU_GRPC_MSG_MAX);
    rc = read_message(c->payload, &in, &st);
    if (rc == 0) {
        struct egpu_grpc_request req = {c->m->name, egpu_buf_str(&in), in.len};

        rc = c->m->unary(c->m->data, &req, &out, &st);
    }
    if (rc != 0) {
        resolve_status(rc, &st);
        egpu_log(EGPU_LOG_DEBUG, "grpc call failed method=%s status=%s msg=\"%s\"", c->m->name,
                 egpu_grpc_status_name(st.code), st.msg);
        call_answer(c, NULL, &st);
    } else {
        st = (struct egpu_grpc_status){0};
        call_answer(c, &out, &st);
    }
    egpu_buf_free(&in);
    egpu_buf_free(&out);
}

/* ------------------------------------------------------------------------ */
/* Streams                                                                  */

static void queue_drop(struct egpu_grpc_stream *s)
{
    while (s->head != NULL) {
        struct qmsg *q = s->head;

        s->head = q->next;
        egpu_free(q);
    }
    s->tail = NULL;
    s->queued_bytes = 0;
}

static void stream_unref(struct egpu_grpc_stream *s)
{
    int refs;

    pthread_mutex_lock(&s->mu);
    refs = --s->refs;
    pthread_mutex_unlock(&s->mu);
    if (refs > 0)
        return;
    queue_drop(s);
    pthread_mutex_destroy(&s->mu);
    egpu_free(s);
}

/* Start the next send batch, if any is due and none is in flight. s->mu held. */
static void stream_pump(struct egpu_grpc_stream *s)
{
    grpc_op ops[2];
    size_t n = 0;
    grpc_call_error e;

    if (s->busy || s->closed || s->broken)
        return;
    memset(ops, 0, sizeof(ops));
    if (!s->md_sent)
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    if (s->head != NULL) {
        struct qmsg *q = s->head;

        s->head = q->next;
        if (s->head == NULL)
            s->tail = NULL;
        s->queued_bytes -= q->len;
        s->wbuf = make_buffer(q->data, q->len);
        egpu_free(q);
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = s->wbuf;
    } else if (s->finishing && !s->status_sent) {
        ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
        ops[n].data.send_status_from_server.status = (grpc_status_code)s->finish_code;
        if (s->finish_code != GRPC_STATUS_OK) {
            s->details = grpc_slice_from_copied_string(s->finish_msg);
            s->has_details = true;
            ops[n].data.send_status_from_server.status_details = &s->details;
        }
        n++;
        s->status_sent = true;
    } else {
        return;
    }
    s->md_sent = true;
    s->busy = true;
    s->inflight++;
    e = grpc_call_start_batch(s->gc, ops, n, &s->write_tag, NULL);
    if (e == GRPC_CALL_OK)
        return;
    egpu_log(EGPU_LOG_ERROR, "grpc stream send failed method=%s error=\"%s\"", s->m->name,
             grpc_call_error_to_string(e));
    s->busy = false;
    s->inflight--;
    s->broken = true;
    if (s->wbuf != NULL)
        grpc_byte_buffer_destroy(s->wbuf);
    s->wbuf = NULL;
    if (s->has_details)
        grpc_slice_unref(s->details);
    s->has_details = false;
    queue_drop(s);
    /* The call cannot go on: cancelling it completes RECV_CLOSE_ON_SERVER. */
    (void)grpc_call_cancel(s->gc, NULL);
}

/* The server side is done with s: no batch in flight and the call over. */
static void stream_server_release(struct egpu_grpc_stream *s)
{
    struct egpu_grpc_server *srv = s->srv;

    grpc_call_unref(s->gc);
    pthread_mutex_lock(&srv->mu);
    if (s->prev != NULL)
        s->prev->next = s->next;
    else
        srv->streams = s->next;
    if (s->next != NULL)
        s->next->prev = s->prev;
    pthread_mutex_lock(&s->mu);
    s->gc = NULL;
    s->srv = NULL;
    pthread_mutex_unlock(&s->mu);
    if (--srv->live == 0)
        pthread_cond_broadcast(&srv->cv);
    pthread_mutex_unlock(&srv->mu);
    stream_unref(s);
}

static void on_stream_write(struct egpu_grpc_stream *s, bool ok)
{
    bool done;

    pthread_mutex_lock(&s->mu);
    s->busy = false;
    s->inflight--;
    if (s->wbuf != NULL)
        grpc_byte_buffer_destroy(s->wbuf);
    s->wbuf = NULL;
    if (s->has_details)
        grpc_slice_unref(s->details);
    s->has_details = false;
    if (!ok) {
        s->broken = true;
        queue_drop(s);
    } else {
        stream_pump(s);
    }
    done = s->closed && s->inflight == 0;
    pthread_mutex_unlock(&s->mu);
    if (done)
        stream_server_release(s);
}

static void on_stream_close(struct egpu_grpc_stream *s)
{
    struct egpu_grpc_server *srv = s->srv;
    bool accepted, done;
    int reason;

    pthread_mutex_lock(&s->mu);
    s->closed = true;
    s->inflight--;
    queue_drop(s);
    if (!s->cancelled)
        reason = s->by_stop ? -ESHUTDOWN : 0;
    else if (atomic_load(&srv->stopping))
        reason = -ESHUTDOWN;
    else if (gpr_time_cmp(gpr_now(s->deadline.clock_type), s->deadline) >= 0)
        reason = -ETIMEDOUT;
    else
        reason = -ECONNRESET;
    accepted = s->accepted;
    if (accepted)
        s->refs++; /* keeps s alive through the callback */
    done = s->inflight == 0;
    pthread_mutex_unlock(&s->mu);
    egpu_log(EGPU_LOG_DEBUG, "grpc stream closed method=%s reason=\"%s\"", s->m->name,
             egpu_strerror(reason));
    if (accepted && s->m->close != NULL)
        s->m->close(s->m->data, s, reason);
    if (done)
        stream_server_release(s);
    if (accepted)
        stream_unref(s);
}

/* Queue a status on s. s->mu held. Returns 0 or -EPIPE. */
static int stream_finish_locked(struct egpu_grpc_stream *s, int code, bool by_stop)
{
    if (s->closed || s->finishing || s->broken)
        return -EPIPE;
    if (code < GRPC_STATUS_OK || code > GRPC_STATUS_UNAUTHENTICATED)
        code = GRPC_STATUS_UNKNOWN;
    s->finishing = true;
    s->by_stop = by_stop;
    s->finish_code = code;
    stream_pump(s);
    return 0;
}

/* A call to a streaming method arrived: hand it to the open callback. */
static void open_stream(struct call *c)
{
    struct egpu_grpc_server *srv = c->srv;
    struct egpu_grpc_status st = {0};
    struct egpu_grpc_stream *s;
    struct egpu_buf in;
    grpc_call_error e;
    grpc_op op;
    int rc;

    egpu_buf_init(&in, EGPU_GRPC_MSG_MAX);
    rc = read_message(c->payload, &in, &st);
    s = rc == 0 ? egpu_calloc(1, sizeof(*s)) : NULL;
    if (s == NULL) {
        if (rc == 0)
            (void)egpu_grpc_status_set(&st, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        call_answer(c, NULL, &st);
        egpu_buf_free(&in);
        return;
    }
    s->write_tag = (struct tag){TAG_STREAM_WRITE, s};
    s->close_tag = (struct tag){TAG_STREAM_CLOSE, s};
    s->srv = srv;
    s->m = c->m;
    s->gc = c->gc; /* the live count of c passes to s */
    s->deadline = c->deadline;
    s->refs = 2; /* server side, and the application's if it accepts */
    pthread_mutex_init(&s->mu, NULL);
    c->gc = NULL;
    call_free(c);
    pthread_mutex_lock(&srv->mu);
    s->next = srv->streams;
    if (s->next != NULL)
        s->next->prev = s;
    srv->streams = s;
    pthread_mutex_unlock(&srv->mu);

    struct egpu_grpc_request req = {s->m->name, egpu_buf_str(&in), in.len};

    rc = s->m->open(s->m->data, &req, s, &st);
    egpu_buf_free(&in);
    pthread_mutex_lock(&s->mu);
    if (rc == 0) {
        s->accepted = true;
    } else {
        s->refs--; /* never the last: the server side holds one */
        resolve_status(rc, &st);
        egpu_log(EGPU_LOG_DEBUG, "grpc stream refused method=%s status=%s msg=\"%s\"", s->m->name,
                 egpu_grpc_status_name(st.code), st.msg);
        if (!s->finishing && !s->closed && !s->broken) {
            snprintf(s->finish_msg, sizeof(s->finish_msg), "%s", st.msg);
            (void)stream_finish_locked(s, st.code, false);
        }
    }
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &s->cancelled;
    s->inflight++;
    e = grpc_call_start_batch(s->gc, &op, 1, &s->close_tag, NULL);
    if (e != GRPC_CALL_OK) {
        /* Cannot happen (one RECV_CLOSE per call); without it the call would
         * never be released, so fail loudly and treat it as closed. */
        egpu_log(EGPU_LOG_ERROR, "grpc stream recv_close failed method=%s error=\"%s\"", s->m->name,
                 grpc_call_error_to_string(e));
        (void)grpc_call_cancel(s->gc, NULL);
        pthread_mutex_unlock(&s->mu);
        on_stream_close(s);
        return;
    }
    pthread_mutex_unlock(&s->mu);
}

int egpu_grpc_stream_send(struct egpu_grpc_stream *s, const void *msg, size_t len)
{
    struct qmsg *q;
    int rc = 0;

    if (len > EGPU_GRPC_MSG_MAX)
        return -EMSGSIZE;
    pthread_mutex_lock(&s->mu);
    if (s->closed || s->finishing || s->broken)
        rc = -EPIPE;
    else if (len > EGPU_GRPC_STREAM_QUEUE_MAX - s->queued_bytes)
        rc = -ENOBUFS;
    if (rc != 0) {
        pthread_mutex_unlock(&s->mu);
        return rc;
    }
    q = egpu_malloc(sizeof(*q) + len);
    if (q == NULL) {
        pthread_mutex_unlock(&s->mu);
        return -ENOMEM;
    }
    q->next = NULL;
    q->len = len;
    if (len > 0)
        memcpy(q->data, msg, len);
    if (s->tail != NULL)
        s->tail->next = q;
    else
        s->head = q;
    s->tail = q;
    s->queued_bytes += len;
    stream_pump(s);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

int egpu_grpc_stream_finish(struct egpu_grpc_stream *s, int code, const char *fmt, ...)
{
    va_list ap;
    int rc;

    pthread_mutex_lock(&s->mu);
    if (!s->closed && !s->finishing && !s->broken) {
        va_start(ap, fmt);
        vsnprintf(s->finish_msg, sizeof(s->finish_msg), fmt, ap);
        va_end(ap);
    }
    rc = stream_finish_locked(s, code, false);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

bool egpu_grpc_stream_is_open(struct egpu_grpc_stream *s)
{
    bool open;

    pthread_mutex_lock(&s->mu);
    open = !s->closed && !s->finishing && !s->broken;
    pthread_mutex_unlock(&s->mu);
    return open;
}

void egpu_grpc_stream_release(struct egpu_grpc_stream *s)
{
    if (s != NULL)
        stream_unref(s);
}

/* ------------------------------------------------------------------------ */
/* The completion-queue loop                                                */

static void on_request(struct call *c, bool ok)
{
    struct egpu_grpc_server *srv = c->srv;

    if (!ok) { /* the server is shutting down: the request was never matched */
        call_free(c);
        live_put(srv);
        return;
    }
    if (post_request(srv, c->m) != 0)
        egpu_log(EGPU_LOG_ERROR, "grpc cannot post a request method=%s: calls may queue",
                 c->m ? c->m->name : "*");
    if (c->m == NULL)
        answer_unknown(c);
    else if (c->m->stream)
        open_stream(c);
    else
        answer_unary(c);
}

static void dispatch(struct egpu_grpc_server *srv, const grpc_event *ev)
{
    struct tag *t = ev->tag;

    switch (t->kind) {
    case TAG_REQUEST:
        on_request(t->owner, ev->success != 0);
        break;
    case TAG_CALL_DONE:
        call_free(t->owner);
        live_put(srv);
        break;
    case TAG_STREAM_WRITE:
        on_stream_write(t->owner, ev->success != 0);
        break;
    case TAG_STREAM_CLOSE:
        on_stream_close(t->owner);
        break;
    case TAG_SHUTDOWN:
        pthread_mutex_lock(&srv->mu);
        srv->shutdown_done = true;
        pthread_cond_broadcast(&srv->cv);
        pthread_mutex_unlock(&srv->mu);
        break;
    }
}

static void *cq_main(void *arg)
{
    struct egpu_grpc_server *srv = arg;

    for (;;) {
        grpc_event ev =
            grpc_completion_queue_next(srv->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);

        if (ev.type == GRPC_QUEUE_SHUTDOWN)
            break;
        if (ev.type == GRPC_OP_COMPLETE)
            dispatch(srv, &ev);
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Server lifecycle                                                         */

static bool is_method_name(const char *s)
{
    const char *slash;

    if (s == NULL || s[0] != '/' || s[1] == '/' || s[1] == '\0')
        return false;
    slash = strchr(s + 1, '/');
    return slash != NULL && slash[1] != '\0' && strchr(slash + 1, '/') == NULL;
}

int egpu_grpc_server_new(const char *socket_path, unsigned threads, struct egpu_grpc_server **out,
                         struct egpu_error *err)
{
    struct egpu_grpc_server *srv;

    if (socket_path == NULL || socket_path[0] == '\0')
        return egpu_error_set(err, -EINVAL, "grpc server: empty socket path");
    if (strlen(socket_path) >= sizeof(((struct sockaddr_un *)0)->sun_path))
        return egpu_error_set(err, -ENAMETOOLONG, "grpc server: socket path %s is too long",
                              socket_path);
    if (threads > THREADS_MAX)
        return egpu_error_set(err, -EINVAL, "grpc server: %u threads, at most %d", threads,
                              THREADS_MAX);
    srv = egpu_calloc(1, sizeof(*srv));
    if (srv == NULL)
        return egpu_error_set(err, -ENOMEM, "grpc server: out of memory");
    srv->path = egpu_strdup(socket_path);
    if (srv->path == NULL) {
        egpu_free(srv);
        return egpu_error_set(err, -ENOMEM, "grpc server: out of memory");
    }
    srv->nthreads = threads ? threads : EGPU_GRPC_THREADS_DEFAULT;
    pthread_mutex_init(&srv->mu, NULL);
    pthread_cond_init(&srv->cv, NULL);
    *out = srv;
    return 0;
}

static int add_method(struct egpu_grpc_server *srv, const struct method *nm)
{
    struct method *m;

    if (!is_method_name(nm->name))
        return -EINVAL;
    if (srv->running)
        return -EBUSY;
    for (size_t i = 0; i < srv->nmethods; i++) {
        if (strcmp(srv->methods[i].name, nm->name) == 0)
            return -EEXIST;
    }
    if (srv->nmethods == srv->cap) {
        size_t cap = srv->cap ? 2 * srv->cap : 8;
        struct method *p = egpu_realloc(srv->methods, cap * sizeof(*p));

        if (p == NULL)
            return -ENOMEM;
        srv->methods = p;
        srv->cap = cap;
    }
    m = &srv->methods[srv->nmethods];
    *m = *nm;
    m->name = egpu_strdup(nm->name);
    if (m->name == NULL)
        return -ENOMEM;
    srv->nmethods++;
    return 0;
}

int egpu_grpc_server_unary(struct egpu_grpc_server *srv, const char *method, egpu_grpc_unary_cb cb,
                           void *data)
{
    struct method m = {.name = (char *)method, .unary = cb, .data = data};

    if (cb == NULL)
        return -EINVAL;
    return add_method(srv, &m);
}

int egpu_grpc_server_stream(struct egpu_grpc_server *srv, const char *method,
                            egpu_grpc_stream_cb open_cb, egpu_grpc_stream_close_cb close_cb,
                            void *data)
{
    struct method m = {
        .name = (char *)method, .stream = true, .open = open_cb, .close = close_cb, .data = data};

    if (open_cb == NULL)
        return -EINVAL;
    return add_method(srv, &m);
}

/* Make room for the socket: remove a stale socket file, refuse anything
 * else, and check the directory can take a new entry. */
static int prepare_path(const char *path, struct egpu_error *err)
{
    char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
    const char *slash = strrchr(path, '/');
    struct stat st;

    if (lstat(path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode))
            return egpu_error_set(err, -EEXIST, "grpc server: %s exists and is not a socket", path);
        if (unlink(path) != 0)
            return egpu_error_errno(err, "grpc server: remove stale socket %s", path);
    } else if (errno != ENOENT) {
        return egpu_error_errno(err, "grpc server: %s", path);
    }
    if (slash == NULL)
        snprintf(dir, sizeof(dir), ".");
    else if (slash == path)
        snprintf(dir, sizeof(dir), "/");
    else
        snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
    if (access(dir, W_OK | X_OK) != 0)
        return egpu_error_errno(err, "grpc server: socket directory %s", dir);
    return 0;
}

/* Free the gRPC objects of a server that was never started (no listener,
 * so it may be destroyed without a shutdown). */
static void abandon(struct egpu_grpc_server *srv)
{
    grpc_server_destroy(srv->gs);
    grpc_completion_queue_shutdown(srv->cq);
    while (grpc_completion_queue_next(srv->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(srv->cq);
    srv->gs = NULL;
    srv->cq = NULL;
    egpu_free(srv->threads);
    srv->threads = NULL;
    grpc_shutdown();
}

/* Shut the running server down and free its gRPC objects (stop, and start's
 * failure path once the server has started). */
static void teardown(struct egpu_grpc_server *srv)
{
    struct timespec until;
    struct stat st;

    pthread_mutex_lock(&srv->mu);
    atomic_store(&srv->stopping, true);
    for (struct egpu_grpc_stream *s = srv->streams; s != NULL; s = s->next) {
        pthread_mutex_lock(&s->mu);
        if (!s->closed && !s->finishing && !s->broken) {
            snprintf(s->finish_msg, sizeof(s->finish_msg), "server stopping");
            (void)stream_finish_locked(s, GRPC_STATUS_UNAVAILABLE, true);
        }
        pthread_mutex_unlock(&s->mu);
    }
    pthread_mutex_unlock(&srv->mu);
    srv->shutdown_tag = (struct tag){TAG_SHUTDOWN, srv};
    grpc_server_shutdown_and_notify(srv->gs, srv->cq, &srv->shutdown_tag);
    if (srv->nstarted > 0) {
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += EGPU_GRPC_STOP_GRACE_MS / 1000;
        until.tv_nsec += (long)(EGPU_GRPC_STOP_GRACE_MS % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_mutex_lock(&srv->mu);
        while (!srv->shutdown_done || srv->live > 0) {
            if (pthread_cond_timedwait(&srv->cv, &srv->mu, &until) == ETIMEDOUT)
                break;
        }
        pthread_mutex_unlock(&srv->mu);
        /* Calls still running past the grace period are cut off. */
        grpc_server_cancel_all_calls(srv->gs);
        pthread_mutex_lock(&srv->mu);
        while (!srv->shutdown_done || srv->live > 0)
            pthread_cond_wait(&srv->cv, &srv->mu);
        pthread_mutex_unlock(&srv->mu);
    } else {
        /* No thread polls the queue: poll it here until everything is back. */
        grpc_server_cancel_all_calls(srv->gs);
        while (!srv->shutdown_done || srv->live > 0) {
            grpc_event ev =
                grpc_completion_queue_next(srv->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);

            if (ev.type == GRPC_OP_COMPLETE)
                dispatch(srv, &ev);
        }
    }
    grpc_completion_queue_shutdown(srv->cq);
    for (unsigned i = 0; i < srv->nstarted; i++)
        pthread_join(srv->threads[i], NULL);
    if (srv->nstarted == 0) {
        while (grpc_completion_queue_next(srv->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
               GRPC_QUEUE_SHUTDOWN)
            ;
    }
    srv->nstarted = 0;
    egpu_free(srv->threads);
    srv->threads = NULL;
    grpc_server_destroy(srv->gs);
    grpc_completion_queue_destroy(srv->cq);
    srv->gs = NULL;
    srv->cq = NULL;
    if (srv->have_sock && lstat(srv->path, &st) == 0 && st.st_dev == srv->sock_dev &&
        st.st_ino == srv->sock_ino && unlink(srv->path) != 0)
        egpu_log(EGPU_LOG_WARN, "grpc cannot remove socket path=%s error=\"%s\"", srv->path,
                 strerror(errno));
    srv->have_sock = false;
    grpc_shutdown();
}

int egpu_grpc_server_start(struct egpu_grpc_server *srv, struct egpu_error *err)
{
    char addr[ADDR_MAX];
    grpc_arg arg;
    grpc_channel_args args = {1, &arg};
    grpc_server_credentials *creds;
    struct stat st;
    int port, rc;

    if (srv->running)
        return egpu_error_set(err, -EBUSY, "grpc server already running");
    rc = prepare_path(srv->path, err);
    if (rc != 0)
        return rc;
    snprintf(addr, sizeof(addr), "unix:%s", srv->path);
    srv->threads = egpu_calloc(srv->nthreads, sizeof(*srv->threads));
    if (srv->threads == NULL)
        return egpu_error_set(err, -ENOMEM, "grpc server: out of memory");

    grpc_init();
    arg.type = GRPC_ARG_INTEGER;
    arg.key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    arg.value.integer = EGPU_GRPC_MSG_MAX;
    srv->gs = grpc_server_create(&args, NULL);
    srv->cq = grpc_completion_queue_create_for_next(NULL);
    grpc_server_register_completion_queue(srv->gs, srv->cq, NULL);
    for (size_t i = 0; i < srv->nmethods; i++) {
        srv->methods[i].handle = grpc_server_register_method(
            srv->gs, srv->methods[i].name, NULL, GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
        if (srv->methods[i].handle == NULL) {
            abandon(srv);
            return egpu_error_set(err, -EINVAL, "grpc server: gRPC refused method %s",
                                  srv->methods[i].name);
        }
    }
    creds = grpc_insecure_server_credentials_create();
    port = grpc_server_add_http2_port(srv->gs, addr, creds);
    grpc_server_credentials_release(creds);
    if (port <= 0) {
        abandon(srv);
        return egpu_error_set(err, -EADDRNOTAVAIL,
                              "grpc server: cannot listen on %s (see the gRPC log line)", addr);
    }
    grpc_server_start(srv->gs);
    if (lstat(srv->path, &st) == 0) {
        srv->sock_dev = st.st_dev;
        srv->sock_ino = st.st_ino;
        srv->have_sock = true;
        /* The owner alone may connect (the kubelet runs as root, as do
         * we); the umask's 0755 already keeps others from connecting
         * (connect needs write permission), this states it. */
        if (S_ISSOCK(st.st_mode) && fchmodat(AT_FDCWD, srv->path, SOCKET_MODE, 0) != 0)
            egpu_log(EGPU_LOG_WARN, "grpc cannot set the socket's mode path=%s error=\"%s\"",
                     srv->path, strerror(errno));
    }
    atomic_store(&srv->stopping, false);
    srv->shutdown_done = false;
    srv->live = 0;
    srv->running = true;
    rc = 0;
    for (unsigned i = 0; i < srv->nthreads && rc == 0; i++) {
        rc = -pthread_create(&srv->threads[i], NULL, cq_main, srv);
        if (rc == 0)
            srv->nstarted++;
    }
    for (size_t i = 0; i <= srv->nmethods && rc == 0; i++) {
        for (unsigned j = 0; j < srv->nthreads && rc == 0; j++)
            rc = post_request(srv, i < srv->nmethods ? &srv->methods[i] : NULL);
    }
    if (rc != 0) {
        teardown(srv);
        srv->running = false;
        return egpu_error_set(err, rc, "grpc server: cannot start on %s: %s", addr,
                              egpu_strerror(rc));
    }
    egpu_log(EGPU_LOG_NOTICE, "grpc serving socket=%s threads=%u methods=%zu", srv->path,
             srv->nthreads, srv->nmethods);
    return 0;
}

void egpu_grpc_server_stop(struct egpu_grpc_server *srv)
{
    if (!srv->running)
        return;
    teardown(srv);
    srv->running = false;
    egpu_log(EGPU_LOG_NOTICE, "grpc stopped socket=%s", srv->path);
}

void egpu_grpc_server_free(struct egpu_grpc_server *srv)
{
    if (srv == NULL)
        return;
    egpu_grpc_server_stop(srv);
    for (size_t i = 0; i < srv->nmethods; i++)
        egpu_free(srv->methods[i].name);
    egpu_free(srv->methods);
    egpu_free(srv->path);
    pthread_cond_destroy(&srv->cv);
    pthread_mutex_destroy(&srv->mu);
    egpu_free(srv);
}
