/* net/grpc_client.c - unary gRPC calls over a unix socket (or any gRPC
 * target) with the gRPC core C API, and the status-code helpers the server
 * shares (see egpu/grpc.h for the contract).
 *
 * DESIGN: the agent calls the kubelet a handful of times in its life
 * (Register at start and after each kubelet restart, PodResources List now
 * and then), so every call gets its own channel and completion queue and
 * tears them down before returning: no connection state survives a kubelet
 * restart, and nothing needs a background thread of ours. The whole call is
 * one batch (send metadata, message and half-close; receive metadata,
 * message and status), bounded by the call's deadline, which gRPC enforces
 * itself. grpc_init/grpc_shutdown bracket each call (reference-counted
 * inside gRPC, so a running server in the same process keeps gRPC up).
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>

#include "egpu/grpc.h"
#include "egpu/log.h"

#define TARGET_MAX 4096

/* ------------------------------------------------------------------------ */
/* Status codes                                                             */

/* Indexed by grpc_status_code (0..16). */
static const struct {
    const char *name;
    int err;
} statuses[] = {
    {"OK", 0},
    {"CANCELLED", -ECANCELED},
    {"UNKNOWN", -EPROTO},
    {"INVALID_ARGUMENT", -EINVAL},
    {"DEADLINE_EXCEEDED", -ETIMEDOUT},
    {"NOT_FOUND", -ENOENT},
    {"ALREADY_EXISTS", -EEXIST},
    {"PERMISSION_DENIED", -EACCES},
    {"RESOURCE_EXHAUSTED", -EBUSY},
    {"FAILED_PRECONDITION", -EPERM},
    {"ABORTED", -ECONNABORTED},
    {"OUT_OF_RANGE", -ERANGE},
    {"UNIMPLEMENTED", -ENOSYS},
    {"INTERNAL", -EREMOTEIO},
    {"UNAVAILABLE", -EAGAIN},
    {"DATA_LOSS", -EBADMSG},
    {"UNAUTHENTICATED", -EKEYREJECTED},
};

#define NSTATUSES ((int)(sizeof(statuses) / sizeof(statuses[0])))

const char *egpu_grpc_status_name(int code)
{
    if (code < 0 || code >= NSTATUSES)
        return "UNKNOWN_STATUS";
    return statuses[code].name;
}

int egpu_grpc_status_errno(int code)
{
    if (code < 0 || code >= NSTATUSES)
        return -EPROTO;
    return statuses[code].err;
}

int egpu_grpc_errno_status(int code)
{
    if (code == 0)
        return GRPC_STATUS_OK;
    for (int i = 1; i < NSTATUSES; i++) {
        if (statuses[i].err == code)
            return i;
    }
    switch (code) {
    case -ENOMEM:
    case -EMSGSIZE:
    case -ENOSPC:
    case EGPU_ELIMIT:
    case EGPU_ENOFIT:
        return GRPC_STATUS_RESOURCE_EXHAUSTED;
    case EGPU_ESYNTAX:
        return GRPC_STATUS_INVALID_ARGUMENT;
    case EGPU_ERANGE:
        return GRPC_STATUS_OUT_OF_RANGE;
    case -EOPNOTSUPP:
        return GRPC_STATUS_UNIMPLEMENTED;
    default:
        return GRPC_STATUS_UNKNOWN;
    }
}

int egpu_grpc_status_set(struct egpu_grpc_status *st, int code, const char *fmt, ...)
{
    va_list ap;

    st->code = code;
    va_start(ap, fmt);
    vsnprintf(st->msg, sizeof(st->msg), fmt, ap);
    va_end(ap);
    return egpu_grpc_status_errno(code);
}

/* ------------------------------------------------------------------------ */
/* Unary calls                                                              */

/* "Register" for "/v1beta1.Registration/Register". */
static const char *short_name(const char *method)
{
    const char *slash = strrchr(method, '/');

    return slash != NULL && slash[1] != '\0' ? slash + 1 : method;
}

static bool is_unix_path(const char *target)
{
    return target[0] == '/' || strchr(target, ':') == NULL;
}

/* Append the message in bb to reply. Returns 0, -EMSGSIZE or -ENOMEM. */
static int copy_reply(grpc_byte_buffer *bb, struct egpu_buf *reply)
{
    grpc_byte_buffer_reader r;
    grpc_slice s;
    int rc = 0;

    if (!grpc_byte_buffer_reader_init(&r, bb))
        return -EBADMSG;
    while (rc == 0 && grpc_byte_buffer_reader_next(&r, &s)) {
        rc = egpu_buf_append(reply, GRPC_SLICE_START_PTR(s), GRPC_SLICE_LENGTH(s));
        grpc_slice_unref(s);
    }
    grpc_byte_buffer_reader_destroy(&r);
    return rc;
}

int egpu_grpc_call(const char *target, const char *method, const void *req, size_t req_len,
                   int timeout_ms, struct egpu_buf *reply, struct egpu_error *err)
{
    char uri[TARGET_MAX];
    grpc_arg args_v[2];
    grpc_channel_args args = {0, args_v};
    grpc_channel_credentials *creds;
    grpc_channel *ch;
    grpc_completion_queue *cq;
    grpc_call *call;
    grpc_slice mslice, details = grpc_empty_slice();
    grpc_metadata_array md, trailing;
    grpc_byte_buffer *out = NULL, *in = NULL;
    grpc_status_code status = GRPC_STATUS_UNKNOWN;
    grpc_op ops[6];
    grpc_call_error e;
    grpc_event ev;
    gpr_timespec deadline;
    size_t room, len0;
    int rc = 0;

    if (target == NULL || target[0] == '\0' || method == NULL || method[0] != '/' ||
        (req == NULL && req_len > 0) || timeout_ms < 0 || reply == NULL)
        return egpu_error_set(err, -EINVAL,
                              "grpc call: bad arguments (target, method, request "
                              "or timeout)");
    if (req_len > EGPU_GRPC_MSG_MAX)
        return egpu_error_set(err, -EMSGSIZE, "%s: request of %zu bytes, at most %d",
                              short_name(method), req_len, EGPU_GRPC_MSG_MAX);
    if ((size_t)snprintf(uri, sizeof(uri), "%s%s", is_unix_path(target) ? "unix:" : "", target) >=
        sizeof(uri))
        return egpu_error_set(err, -EINVAL, "grpc call: target too long");
    if (timeout_ms == 0)
        timeout_ms = EGPU_GRPC_TIMEOUT_MS_DEFAULT;
    len0 = reply->len;
    room = reply->max > reply->len ? reply->max - reply->len : 0;

    grpc_init();
    args_v[args.num_args].type = GRPC_ARG_INTEGER;
    args_v[args.num_args].key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    /* gRPC refuses bigger replies itself (RESOURCE_EXHAUSTED); up to this
     * bound they are read and checked against reply's room (-EMSGSIZE). */
    args_v[args.num_args++].value.integer = room > INT_MAX             ? INT_MAX
                                            : room < EGPU_GRPC_MSG_MAX ? EGPU_GRPC_MSG_MAX
                                                                       : (int)room;
    if (strncmp(uri, "unix:", 5) == 0) {
        args_v[args.num_args].type = GRPC_ARG_STRING;
        args_v[args.num_args].key = GRPC_ARG_DEFAULT_AUTHORITY;
        args_v[args.num_args++].value.string = "localhost";
    }
    creds = grpc_insecure_credentials_create();
    ch = grpc_channel_create(uri, creds, &args);
    grpc_channel_credentials_release(creds);
    cq = grpc_completion_queue_create_for_next(NULL);
    deadline =
        gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(timeout_ms, GPR_TIMESPAN));
    mslice = grpc_slice_from_copied_string(method);
    call = grpc_channel_create_call(ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq, mslice, NULL, deadline,
                                    NULL);
    grpc_slice_unref(mslice);
    grpc_metadata_array_init(&md);
    grpc_metadata_array_init(&trailing);
    if (call == NULL) {
        rc = egpu_error_set(err, -EIO, "%s: gRPC refused to create the call to %s",
                            short_name(method), uri);
        goto out_channel;
    }
    {
        grpc_slice s = grpc_slice_from_copied_buffer(req_len ? req : "", req_len);

        out = grpc_raw_byte_buffer_create(&s, 1);
        grpc_slice_unref(s);
    }
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = out;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &md;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &in;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &trailing;
    ops[5].data.recv_status_on_client.status = &status;
    ops[5].data.recv_status_on_client.status_details = &details;
    e = grpc_call_start_batch(call, ops, 6, call, NULL);
    if (e != GRPC_CALL_OK) {
        rc = egpu_error_set(err, -EIO, "%s: gRPC refused the call: %s", short_name(method),
                            grpc_call_error_to_string(e));
        goto out_call;
    }
    /* The deadline bounds the call; gRPC always completes the batch. */
    do {
        ev = grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    } while (ev.type != GRPC_OP_COMPLETE || ev.tag != call);

    if (status != GRPC_STATUS_OK) {
        size_t n = GRPC_SLICE_LENGTH(details);

        rc = egpu_error_set(err, egpu_grpc_status_errno(status), "%s: %s: %.*s", short_name(method),
                            egpu_grpc_status_name(status), n > 400 ? 400 : (int)n,
                            (const char *)GRPC_SLICE_START_PTR(details));
    } else if (in == NULL) {
        rc = egpu_error_set(err, -EBADMSG, "%s: OK without a reply message", short_name(method));
    } else {
        rc = copy_reply(in, reply);
        if (rc != 0) {
            reply->len = len0;
            if (reply->data != NULL)
                reply->data[len0] = '\0';
            rc = egpu_error_set(err, rc, "%s: reply of %zu bytes: %s", short_name(method),
                                grpc_byte_buffer_length(in), egpu_strerror(rc));
        }
    }
out_call:
    if (out != NULL)
        grpc_byte_buffer_destroy(out);
    if (in != NULL)
        grpc_byte_buffer_destroy(in);
    grpc_slice_unref(details);
    grpc_call_unref(call);
out_channel:
    grpc_metadata_array_destroy(&md);
    grpc_metadata_array_destroy(&trailing);
    grpc_channel_destroy(ch);
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(cq);
    grpc_shutdown();
    return rc;
}
