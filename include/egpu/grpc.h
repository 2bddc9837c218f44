/* egpu/grpc.h - a small gRPC layer over the gRPC core C API (libgrpc 1.51):
 * the server the node agent serves the kubelet's device plugin API on, and
 * the client it calls the kubelet with (Registration/Register on
 * kubelet.sock, PodResourcesLister/List).
 *
 * Two parts, one per source file in src/net:
 *   - grpc_server.c: a plain-text HTTP/2 gRPC server on a unix socket. The
 *     caller registers a unary handler or a server-streaming handler per
 *     method path ("/v1beta1.DevicePlugin/Allocate") before starting it.
 *     Every other path is answered UNIMPLEMENTED by the server itself.
 *   - grpc_client.c: one unary call per egpu_grpc_call, over a unix socket
 *     (or any gRPC target), with a deadline.
 *
 * The layer moves serialized messages only: request and reply are the
 * protobuf bytes of one message (without the 5-byte gRPC frame header), so it
 * does not depend on any generated code. Wire format: gRPC over HTTP/2
 * (PROTOCOL-HTTP2.md of grpc/grpc), as the kubelet's grpc-go speaks it.
 *
 * Threads: handlers and stream callbacks run on the server's own threads,
 * several at once; whatever they share must be thread-safe. A stream may be
 * written from any thread. egpu_grpc_call may be called from any thread,
 * including inside a handler.
 *
 * Units are carried in names (_ms milliseconds, _bytes bytes). Errors are 0
 * or a negative code (-errno or EGPU_E*), described by egpu_strerror();
 * functions doing I/O also take `struct egpu_error *err` (may be NULL).
 * gRPC status codes are the GRPC_STATUS_* values of <grpc/status.h>; each
 * has one -errno of its own (egpu_grpc_status_errno).
 */
#ifndef EGPU_GRPC_H
#define EGPU_GRPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <grpc/status.h>

#include "egpu/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define EGPU_GRPC_THREADS_DEFAULT    2                  /* server completion-queue threads */
#define EGPU_GRPC_MSG_MAX            (4 * 1024 * 1024)  /* one request or reply message, bytes */
#define EGPU_GRPC_STREAM_QUEUE_MAX   (16 * 1024 * 1024) /* unsent bytes queued on one stream */
#define EGPU_GRPC_STATUS_MSG_MAX     256                /* status message, bytes incl. NUL */
#define EGPU_GRPC_STOP_GRACE_MS      2000               /* stop: wait this long for calls to end */
#define EGPU_GRPC_TIMEOUT_MS_DEFAULT 10000              /* client deadline when 0 is given */

/* ------------------------------------------------------------------------ */
/* Status codes (src/net/grpc_client.c)                                     */

/* A gRPC status: code is a GRPC_STATUS_* value (0 = OK), msg one line of
 * text for the peer (sent as grpc-message). */
struct egpu_grpc_status {
    int code;
    char msg[EGPU_GRPC_STATUS_MSG_MAX];
};

/* Name of a gRPC status code as the gRPC docs spell it ("OK", "CANCELLED",
 * "INVALID_ARGUMENT", ... "UNAUTHENTICATED"), or "UNKNOWN_STATUS" for a code
 * outside 0..16. Returns a static string. */
const char *egpu_grpc_status_name(int code);

/* The -errno egpu_grpc_call returns for a gRPC status code, one per code:
 * OK 0, CANCELLED -ECANCELED, UNKNOWN -EPROTO, INVALID_ARGUMENT -EINVAL,
 * DEADLINE_EXCEEDED -ETIMEDOUT, NOT_FOUND -ENOENT, ALREADY_EXISTS -EEXIST,
 * PERMISSION_DENIED -EACCES, RESOURCE_EXHAUSTED -EBUSY (the kubelet's rate
 * limit), FAILED_PRECONDITION -EPERM, ABORTED -ECONNABORTED, OUT_OF_RANGE
 * -ERANGE, UNIMPLEMENTED -ENOSYS, INTERNAL -EREMOTEIO, UNAVAILABLE -EAGAIN
 * (nobody listens, the server is stopping: retry later), DATA_LOSS
 * -EBADMSG, UNAUTHENTICATED -EKEYREJECTED; any other code -EPROTO. */
int egpu_grpc_status_errno(int code);

/* The gRPC status code for a negative code: the inverse of
 * egpu_grpc_status_errno, plus -ENOMEM, -EMSGSIZE, -ENOSPC, EGPU_ELIMIT and
 * EGPU_ENOFIT as RESOURCE_EXHAUSTED, EGPU_ESYNTAX as INVALID_ARGUMENT,
 * EGPU_ERANGE as OUT_OF_RANGE, -EOPNOTSUPP as UNIMPLEMENTED; 0 is OK and
 * anything else UNKNOWN. */
int egpu_grpc_errno_status(int code);

/* Record code (GRPC_STATUS_*) and a printf-formatted message in *st,
 * cutting the message to fit. Returns egpu_grpc_status_errno(code), so a
 * handler can write `return egpu_grpc_status_set(st, GRPC_STATUS_INVALID_ARGUMENT,
 * "Allocate: no container_requests");` */
int egpu_grpc_status_set(struct egpu_grpc_status *st, int code, const char *fmt, ...)
    EGPU_PRINTF(3, 4);

/* ------------------------------------------------------------------------ */
/* Server (src/net/grpc_server.c)                                           */

/* What a handler sees. Every pointer is borrowed and valid only during the
 * callback. */
struct egpu_grpc_request {
    const char *method; /* the registered path, "/v1beta1.DevicePlugin/Allocate" */
    const char *data;   /* the request message (protobuf bytes); never NULL,
                           NUL-terminated after len for convenience */
    size_t len;         /* message bytes; 0 for an empty message (Empty{}) */
};

/* A unary handler. data is the pointer given to egpu_grpc_server_unary.
 * reply starts empty with max EGPU_GRPC_MSG_MAX; the handler appends the
 * serialized reply message to it. st starts as {0, ""}.
 * Returns 0 to answer OK with reply (which may be empty), or a negative
 * code to fail the call: the peer then gets st's code and message when the
 * handler set them (egpu_grpc_status_set), else egpu_grpc_errno_status(code)
 * with egpu_strerror(code) as message. On failure reply is discarded.
 * Runs on a server thread, concurrently with other calls. */
typedef int (*egpu_grpc_unary_cb)(void *data, const struct egpu_grpc_request *req,
                                  struct egpu_buf *reply, struct egpu_grpc_status *st);

struct egpu_grpc_stream; /* one open server-streaming call; opaque */

/* A server-streaming call arrived (e.g. the kubelet's ListAndWatch). The
 * handler may send right away (egpu_grpc_stream_send), keep the stream to
 * send later from any thread, or end it (egpu_grpc_stream_finish).
 * Returns 0 to accept the stream: the caller then owns one reference and
 * must call egpu_grpc_stream_release exactly once, whenever it likes (even
 * inside this callback or the close callback); the close callback will be
 * called once. Returns a negative code to refuse it, with st (or the code)
 * as in egpu_grpc_unary_cb: the stream is then not the caller's any more
 * and the close callback is not called. Runs on a server thread. */
typedef int (*egpu_grpc_stream_cb)(void *data, const struct egpu_grpc_request *req,
                                   struct egpu_grpc_stream *stream, struct egpu_grpc_status *st);

/* An accepted stream ended; from now on egpu_grpc_stream_send returns -EPIPE.
 * reason: 0 (ended by egpu_grpc_stream_finish, the status reached the
 * peer), -ECONNRESET (the peer cancelled or went away), -ETIMEDOUT (the
 * peer's deadline passed) or -ESHUTDOWN (the server is stopping). stream
 * stays valid during the call even if already released. Runs on a server
 * thread, without any lock of the server held; must not block long. */
typedef void (*egpu_grpc_stream_close_cb)(void *data, struct egpu_grpc_stream *stream, int reason);

struct egpu_grpc_server; /* opaque */

/* Create a stopped server that will listen on the unix socket socket_path
 * (copied; absolute or relative, at most 107 bytes) with threads
 * completion-queue threads (0 = EGPU_GRPC_THREADS_DEFAULT, at most 64).
 * On success writes *out (free with egpu_grpc_server_free). Returns 0,
 * -EINVAL (empty path, threads > 64), -ENAMETOOLONG or -ENOMEM. */
int egpu_grpc_server_new(const char *socket_path, unsigned threads, struct egpu_grpc_server **out,
                         struct egpu_error *err) EGPU_MUST_CHECK;

/* Route unary calls of method ("/package.Service/Method", copied) to cb with
 * data (borrowed; must outlive the server). Only while stopped. Returns 0,
 * -EINVAL (method not of the form /x/y, NULL cb), -EEXIST (method already
 * routed), -EBUSY (server running) or -ENOMEM. */
int egpu_grpc_server_unary(struct egpu_grpc_server *srv, const char *method, egpu_grpc_unary_cb cb,
                           void *data) EGPU_MUST_CHECK;

/* Route server-streaming calls of method to open_cb, and tell close_cb
 * (may be NULL) when an accepted stream ends; data as above. Same rules and
 * returns as egpu_grpc_server_unary. */
int egpu_grpc_server_stream(struct egpu_grpc_server *srv, const char *method,
                            egpu_grpc_stream_cb open_cb, egpu_grpc_stream_close_cb close_cb,
                            void *data) EGPU_MUST_CHECK;

/* Bind the socket and start serving on the server's threads. A stale socket
 * file at the path (a kubelet restart leaves none, a crash of ours may) is
 * replaced; any other kind of file there is left alone. The socket file
 * gets mode 0600 (its owner alone connects). Returns 0, -EBUSY
 * (running), -EEXIST (a file that is not a socket is in the way), -errno of
 * the socket's directory (-ENOENT, -EACCES), -EADDRNOTAVAIL (gRPC could not
 * listen; its own log line says why) or -ENOMEM. A stopped server may be
 * started again. */
int egpu_grpc_server_start(struct egpu_grpc_server *srv, struct egpu_error *err) EGPU_MUST_CHECK;

/* Stop serving: refuse new calls, end every open stream with UNAVAILABLE
 * "server stopping" after the messages already queued on it, wait up to
 * EGPU_GRPC_STOP_GRACE_MS for calls to end, then cancel the rest. Returns
 * when no handler or callback runs any more and the socket file is removed
 * (only if it is still the one this server created). Streams the caller
 * still holds stay valid (sends return -EPIPE) until released. Not from a
 * handler or callback of this server. A stopped server is a no-op. */
void egpu_grpc_server_stop(struct egpu_grpc_server *srv);

/* Stop the server if running and free it. NULL is a no-op. */
void egpu_grpc_server_free(struct egpu_grpc_server *srv);

/* Queue one message (len bytes, copied) on stream, sent in order after the
 * ones before. Never blocks; safe from any thread. Returns 0, -EPIPE (the
 * stream has ended or is ending), -EMSGSIZE (len > EGPU_GRPC_MSG_MAX),
 * -ENOBUFS (more than EGPU_GRPC_STREAM_QUEUE_MAX bytes would wait unsent:
 * the peer does not read) or -ENOMEM. */
int egpu_grpc_stream_send(struct egpu_grpc_stream *stream, const void *msg,
                          size_t len) EGPU_MUST_CHECK;

/* End stream with status code (GRPC_STATUS_*, OK for a normal end) and a
 * printf-formatted message, sent after the queued messages. Safe from any
 * thread. Returns 0 or -EPIPE (already ended or ending). Deliberately not
 * EGPU_MUST_CHECK: -EPIPE only says the stream is over already, which is
 * what the caller wanted. */
int egpu_grpc_stream_finish(struct egpu_grpc_stream *stream, int code, const char *fmt, ...)
    EGPU_PRINTF(3, 4);

/* Whether stream still takes messages (not ended, not ending). */
bool egpu_grpc_stream_is_open(struct egpu_grpc_stream *stream);

/* Drop the caller's reference taken by accepting the stream. If the stream
 * is still open it stays open (end it first with egpu_grpc_stream_finish to
 * close it). NULL is a no-op. */
void egpu_grpc_stream_release(struct egpu_grpc_stream *stream);

/* ------------------------------------------------------------------------ */
/* Client (src/net/grpc_client.c)                                           */

/* Call method ("/v1beta1.Registration/Register") on target with the
 * serialized request (req_len bytes; req may be NULL when 0) and wait for
 * the reply, at most timeout_ms milliseconds (0 = EGPU_GRPC_TIMEOUT_MS_DEFAULT).
 * target is a unix socket path ("/var/lib/kubelet/device-plugins/kubelet.sock":
 * anything starting with '/' or holding no ':') or a gRPC target URI
 * ("unix:///path", "localhost:50051"). Plain text, no TLS; for unix sockets
 * the :authority is "localhost", as the kubelet's own client sends.
 * The call fails fast when nobody listens (no wait-for-ready).
 * On success the reply message is appended to reply (bounded by its max);
 * on failure reply is unchanged and err says, e.g.,
 * "Register: UNAVAILABLE: failed to connect to all addresses; ...".
 * Returns 0, egpu_grpc_status_errno(status) for a non-OK status, -EINVAL
 * (bad arguments), -EMSGSIZE (reply larger than reply's room), -EBADMSG (OK
 * without a reply message), -ENOMEM, or -EIO (gRPC refused the call). */
int egpu_grpc_call(const char *target, const char *method, const void *req, size_t req_len,
                   int timeout_ms, struct egpu_buf *reply, struct egpu_error *err) EGPU_MUST_CHECK;

#ifdef __cplusplus
}
#endif

#endif /* EGPU_GRPC_H */
