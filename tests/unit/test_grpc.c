/* tests/unit/test_grpc.c - the gRPC server and client against real peers:
 * the C server is called by Python grpcio clients, and the C client calls a
 * Python grpcio server, both over unix sockets in a temporary directory.
 * The Python side is one script written there at startup (PEER_PY below),
 * spawned per test; it prints one line per event, which the tests read to
 * keep both sides in step. Messages are raw bytes on both sides (no
 * protobuf), passed to the script in hex. Every test checks that the server
 * leaves no egpu_malloc block behind and its socket file is gone.
 */
#define _GNU_SOURCE /* mkdtemp */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"
#include "egpu/grpc.h"

#define PYTHON    "/usr/bin/python3"
#define LINE_MAX_ 8192
#define WAIT_MS   15000 /* generous: the peers share two busy cores with the build */
#define SVC       "/test.Svc/"
#define PEER      "/test.Peer/"

extern char **environ;

/* The Python peer. Modes:
 *   unary SOCK METHOD REQ [METHOD REQ ...]  one call each: "OK <hex>" or "ERR <CODE> <details>"
 *   stream SOCK METHOD REQ N               "MSG <hex>" per message; after N (0 = all) it
 *                                          cancels ("CANCEL"), else "END OK" or "END <CODE>
 * <details>" server SOCK                            serves /test.Peer/{Echo,Fail,Slow,Big}; "READY"
 * REQ is hex, "-" for an empty message, or "big:N" for N bytes of 'x'. */
static const char PEER_PY[] =
    "import sys, time\n"
    "from concurrent import futures\n"
    "import grpc\n"
    "def out(*a):\n"
    "    print(*a, flush=True)\n"
    "def req(s):\n"
    "    if s == '-':\n"
    "        return b''\n"
    "    if s.startswith('big:'):\n"
    "        return b'x' * int(s[4:])\n"
    "    return bytes.fromhex(s)\n"
    "def hx(b):\n"
    "    return b.hex() if b else '-'\n"
    "mode, sock = sys.argv[1], 'unix:' + sys.argv[2]\n"
    "if mode == 'unary':\n"
    "    with grpc.insecure_channel(sock) as ch:\n"
    "        a = sys.argv[3:]\n"
    "        for i in range(0, len(a), 2):\n"
    "            f = ch.unary_unary(a[i], request_serializer=None, response_deserializer=None)\n"
    "            try:\n"
    "                out('OK', hx(f(req(a[i + 1]), timeout=20)))\n"
    "            except grpc.RpcError as e:\n"
    "                out('ERR', e.code().name, e.details())\n"
    "elif mode == 'stream':\n"
    "    n = int(sys.argv[5])\n"
    "    with grpc.insecure_channel(sock) as ch:\n"
    "        f = ch.unary_stream(sys.argv[3], request_serializer=None, "
    "response_deserializer=None)\n"
    "        call = f(req(sys.argv[4]), timeout=60)\n"
    "        got = 0\n"
    "        try:\n"
    "            for m in call:\n"
    "                out('MSG', hx(m))\n"
    "                got += 1\n"
    "                if got == n:\n"
    "                    call.cancel()\n"
    "                    out('CANCEL')\n"
    "                    break\n"
    "            else:\n"
    "                out('END OK')\n"
    "        except grpc.RpcError as e:\n"
    "            out('END', e.code().name, e.details())\n"
    "elif mode == 'server':\n"
    "    def echo(r, ctx):\n"
    "        return b'py:' + r\n"
    "    def fail(r, ctx):\n"
    "        ctx.abort(grpc.StatusCode.INVALID_ARGUMENT, 'python says no')\n"
    "    def slow(r, ctx):\n"
    "        time.sleep(5)\n"
    "        return r\n"
    "    def big(r, ctx):\n"
    "        return b'y' * int(r.decode())\n"
    "    h = {n: grpc.unary_unary_rpc_method_handler(f) for n, f in\n"
    "         (('Echo', echo), ('Fail', fail), ('Slow', slow), ('Big', big))}\n"
    "    s = grpc.server(futures.ThreadPoolExecutor(4),\n"
    "                    handlers=[grpc.method_handlers_generic_handler('test.Peer', h)])\n"
    "    s.add_insecure_port(sock)\n"
    "    s.start()\n"
    "    out('READY')\n"
    "    while True:\n"
    "        time.sleep(3600)\n";

static char tmpdir[64];
static char script[128];
static bool have_python;

/* ------------------------------------------------------------------------ */
/* Python peers                                                             */

struct peer {
    pid_t pid;
    int fd; /* its stdout */
    char buf[LINE_MAX_];
    size_t len;
};

/* Start the peer script with args (NULL-terminated after mode). */
static void peer_start(struct peer *p, const char *const *args)
{
    const char *argv[16] = {PYTHON, script};
    posix_spawn_file_actions_t fa;
    int pfd[2];
    size_t n = 2;

    for (size_t i = 0; args[i] != NULL; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    assert_int_equal(pipe2(pfd, O_CLOEXEC), 0);
    assert_int_equal(posix_spawn_file_actions_init(&fa), 0);
    assert_int_equal(posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0), 0);
    assert_int_equal(posix_spawn_file_actions_adddup2(&fa, pfd[1], 1), 0);
    assert_int_equal(posix_spawn(&p->pid, PYTHON, &fa, NULL, (char *const *)argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    close(pfd[1]);
    p->fd = pfd[0];
    p->len = 0;
}

static long now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/* Next line of the peer's output (without the newline); fails the test on
 * EOF or after WAIT_MS. */
static void peer_line(struct peer *p, char *line, size_t cap)
{
    long until = now_ms() + WAIT_MS;

    for (;;) {
        char *nl = memchr(p->buf, '\n', p->len);

        if (nl != NULL) {
            size_t n = (size_t)(nl - p->buf);

            assert_true(n < cap);
            memcpy(line, p->buf, n);
            line[n] = '\0';
            memmove(p->buf, nl + 1, p->len - n - 1);
            p->len -= n + 1;
            return;
        }
        struct pollfd pf = {.fd = p->fd, .events = POLLIN};
        long left = until - now_ms();
        ssize_t r;

        if (left <= 0)
            fail_msg("peer: no line within %d ms (have \"%.*s\")", WAIT_MS, (int)p->len, p->buf);
        if (poll(&pf, 1, (int)left) <= 0)
            continue;
        assert_true(p->len < sizeof(p->buf));
        r = read(p->fd, p->buf + p->len, sizeof(p->buf) - p->len);
        if (r <= 0)
            fail_msg("peer: exited before a line (have \"%.*s\")", (int)p->len, p->buf);
        p->len += (size_t)r;
    }
}

static void peer_expect(struct peer *p, const char *want)
{
    char line[LINE_MAX_];

    peer_line(p, line, sizeof(line));
    assert_string_equal(line, want);
}

/* Wait for the peer to exit by itself (kill it past WAIT_MS); returns its
 * exit status. */
static int peer_wait(struct peer *p)
{
    long until = now_ms() + WAIT_MS;
    int status = 0;

    while (waitpid(p->pid, &status, WNOHANG) == 0) {
        if (now_ms() > until) {
            kill(p->pid, SIGKILL);
            waitpid(p->pid, &status, 0);
            close(p->fd);
            fail_msg("peer did not exit");
        }
        usleep(10000);
    }
    close(p->fd);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void peer_kill(struct peer *p)
{
    kill(p->pid, SIGKILL);
    waitpid(p->pid, NULL, 0);
    close(p->fd);
}

/* "hello" -> "68656c6c6f" (at most 200 bytes of text). */
static const char *hex(const char *s, char *out)
{
    static const char digits[] = "0123456789abcdef";
    size_t i = 0;

    for (; s[i] != '\0'; i++) {
        out[2 * i] = digits[(unsigned char)s[i] >> 4];
        out[2 * i + 1] = digits[(unsigned char)s[i] & 15];
    }
    out[2 * i] = '\0';
    return i ? out : "-";
}

/* Expect a line "<word> <hex of text>". */
static void peer_expect_hex(struct peer *p, const char *word, const char *text)
{
    char want[512], h[410];

    snprintf(want, sizeof(want), "%s %s", word, hex(text, h));
    peer_expect(p, want);
}

/* ------------------------------------------------------------------------ */
/* The C server under test                                                  */

struct fixture {
    struct egpu_grpc_server *srv;
    char sock[128];
    long live; /* egpu_alloc_live() before the fixture */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct egpu_grpc_stream *stream; /* the last accepted stream, while held */
    int opened;
    int closed;
    int close_reason;
    bool keep; /* the close callback leaves the stream to the test */
};

static struct fixture fx = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static int on_echo(void *data, const struct egpu_grpc_request *req, struct egpu_buf *reply,
                   struct egpu_grpc_status *st)
{
    (void)data;
    (void)st;
    if (egpu_buf_append(reply, "echo:", 5) != 0 || egpu_buf_append(reply, req->data, req->len))
        return -ENOMEM;
    return 0;
}

static int on_fail(void *data, const struct egpu_grpc_request *req, struct egpu_buf *reply,
                   struct egpu_grpc_status *st)
{
    (void)data;
    /* Whatever the handler wrote is discarded on error. */
    if (egpu_buf_append(reply, "partial", 7) != 0)
        return -ENOMEM;
    return egpu_grpc_status_set(st, GRPC_STATUS_INVALID_ARGUMENT, "bad request: %.*s",
                                (int)req->len, req->data);
}

static int on_errno(void *data, const struct egpu_grpc_request *req, struct egpu_buf *reply,
                    struct egpu_grpc_status *st)
{
    (void)data;
    (void)req;
    (void)reply;
    (void)st;
    return -ENOENT;
}

static int send_str(struct egpu_grpc_stream *s, const char *text)
{
    return egpu_grpc_stream_send(s, text, strlen(text));
}

/* Watch: the request says what to do. "three": send m1..m3 and stay open;
 * "one": send m0 and stay open; "finish": send a, b and end OK; "refuse":
 * refuse with FAILED_PRECONDITION. */
static int on_watch(void *data, const struct egpu_grpc_request *req,
                    struct egpu_grpc_stream *stream, struct egpu_grpc_status *st)
{
    (void)data;
    if (req->len == 6 && memcmp(req->data, "refuse", 6) == 0)
        return egpu_grpc_status_set(st, GRPC_STATUS_FAILED_PRECONDITION, "not ready");
    pthread_mutex_lock(&fx.mu);
    fx.stream = stream;
    fx.opened++;
    pthread_cond_broadcast(&fx.cv);
    pthread_mutex_unlock(&fx.mu);
    if (strcmp(req->data, "three") == 0) {
        if (send_str(stream, "m1") || send_str(stream, "m2") || send_str(stream, "m3"))
            return -EIO; /* cannot happen: the stream was just opened */
    } else if (strcmp(req->data, "one") == 0) {
        if (send_str(stream, "m0"))
            return -EIO;
    } else if (strcmp(req->data, "finish") == 0) {
        if (send_str(stream, "a") || send_str(stream, "b") ||
            egpu_grpc_stream_finish(stream, GRPC_STATUS_OK, "done"))
            return -EIO;
    }
    return 0;
}

static void on_watch_close(void *data, struct egpu_grpc_stream *stream, int reason)
{
    bool release;

    (void)data;
    pthread_mutex_lock(&fx.mu);
    fx.closed++;
    fx.close_reason = reason;
    release = !fx.keep;
    if (release && fx.stream == stream)
        fx.stream = NULL;
    pthread_cond_broadcast(&fx.cv);
    pthread_mutex_unlock(&fx.mu);
    if (release)
        egpu_grpc_stream_release(stream);
}

/* Wait until fx.closed reaches n; returns the last close reason. */
static int wait_closed(int n)
{
    struct timespec until;
    int reason;

    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += WAIT_MS / 1000;
    pthread_mutex_lock(&fx.mu);
    while (fx.closed < n) {
        if (pthread_cond_timedwait(&fx.cv, &fx.mu, &until) == ETIMEDOUT)
            break;
    }
    if (fx.closed < n) {
        pthread_mutex_unlock(&fx.mu);
        fail_msg("stream close callback not called (closed=%d, want %d)", fx.closed, n);
    }
    reason = fx.close_reason;
    pthread_mutex_unlock(&fx.mu);
    return reason;
}

static void fixture_start(const char *name)
{
    struct egpu_error err = {0};
    struct stat st;

    fx.live = egpu_alloc_live();
    fx.stream = NULL;
    fx.opened = fx.closed = fx.close_reason = 0;
    fx.keep = false;
    snprintf(fx.sock, sizeof(fx.sock), "%s/%s.sock", tmpdir, name);
    assert_int_equal(egpu_grpc_server_new(fx.sock, 2, &fx.srv, &err), 0);
    assert_int_equal(egpu_grpc_server_unary(fx.srv, SVC "Echo", on_echo, NULL), 0);
    assert_int_equal(egpu_grpc_server_unary(fx.srv, SVC "Fail", on_fail, NULL), 0);
    assert_int_equal(egpu_grpc_server_unary(fx.srv, SVC "Errno", on_errno, NULL), 0);
    assert_int_equal(egpu_grpc_server_stream(fx.srv, SVC "Watch", on_watch, on_watch_close, NULL),
                     0);
    if (egpu_grpc_server_start(fx.srv, &err) != 0)
        fail_msg("start: %s", err.msg);
    /* its owner alone may connect */
    assert_int_equal(lstat(fx.sock, &st), 0);
    assert_true(S_ISSOCK(st.st_mode));
    assert_int_equal(st.st_mode & 07777, 0600);
}

static void fixture_stop(void)
{
    struct stat st;

    egpu_grpc_server_free(fx.srv);
    fx.srv = NULL;
    assert_int_equal(lstat(fx.sock, &st), -1); /* the socket file is gone */
    assert_int_equal(egpu_alloc_live(), fx.live);
}

static void need_python(void)
{
    if (!have_python)
        tu_skip(PYTHON " cannot import grpc (Debian package python3-grpcio)");
}

/* ------------------------------------------------------------------------ */
/* Server tests                                                             */

/* Unary echo from Python (a message, an empty one, one with a NUL) and from
 * the C client to the C server. */
static void test_unary_echo(void **state)
{
    const char *args[] = {"unary", fx.sock,    SVC "Echo", "68656c6c6f", SVC "Echo",
                          "-",     SVC "Echo", "610062",   NULL};
    struct egpu_error err = {0};
    struct egpu_buf reply;
    struct peer p;

    (void)state;
    need_python();
    fixture_start("echo");
    args[1] = fx.sock;
    peer_start(&p, args);
    peer_expect_hex(&p, "OK", "echo:hello");
    peer_expect_hex(&p, "OK", "echo:");
    peer_expect(&p, "OK 6563686f3a610062");
    assert_int_equal(peer_wait(&p), 0);

    egpu_buf_init(&reply, 1024);
    assert_int_equal(egpu_grpc_call(fx.sock, SVC "Echo", "a\0b", 3, 5000, &reply, &err), 0);
    assert_int_equal(reply.len, 8);
    assert_memory_equal(reply.data, "echo:a\0b", 8);
    egpu_buf_reset(&reply);
    /* An empty request (Empty{}) is a message of 0 bytes. */
    assert_int_equal(egpu_grpc_call(fx.sock, SVC "Echo", NULL, 0, 0, &reply, &err), 0);
    assert_string_equal(egpu_buf_str(&reply), "echo:");
    egpu_buf_free(&reply);
    fixture_stop();
}

/* A handler's status and message reach the client; a bare -errno becomes
 * its gRPC code with egpu_strerror's text. */
static void test_unary_error_status(void **state)
{
    const char *args[] = {"unary", NULL, SVC "Fail", "78797a", SVC "Errno", "-", NULL};
    struct egpu_error err = {0};
    struct egpu_buf reply;
    struct peer p;

    (void)state;
    need_python();
    fixture_start("status");
    args[1] = fx.sock;
    peer_start(&p, args);
    peer_expect(&p, "ERR INVALID_ARGUMENT bad request: xyz");
    peer_expect(&p, "ERR NOT_FOUND No such file or directory");
    assert_int_equal(peer_wait(&p), 0);

    egpu_buf_init(&reply, 1024);
    assert_int_equal(egpu_grpc_call(fx.sock, SVC "Fail", "q", 1, 5000, &reply, &err), -EINVAL);
    assert_int_equal(err.code, -EINVAL);
    assert_string_equal(err.msg, "Fail: INVALID_ARGUMENT: bad request: q");
    assert_int_equal(reply.len, 0);
    egpu_buf_free(&reply);
    fixture_stop();
}

/* Paths nobody registered are UNIMPLEMENTED, answered by the server. */
static void test_unknown_method(void **state)
{
    const char *args[] = {"unary", NULL, SVC "Nope", "-", "/other.Svc/Echo", "6869", NULL};
    struct egpu_error err = {0};
    struct egpu_buf reply;
    struct peer p;

    (void)state;
    need_python();
    fixture_start("unknown");
    args[1] = fx.sock;
    peer_start(&p, args);
    peer_expect(&p, "ERR UNIMPLEMENTED unknown method /test.Svc/Nope");
    peer_expect(&p, "ERR UNIMPLEMENTED unknown method /other.Svc/Echo");
    assert_int_equal(peer_wait(&p), 0);

    egpu_buf_init(&reply, 1024);
    assert_int_equal(egpu_grpc_call(fx.sock, SVC "Nope", "", 0, 5000, &reply, &err), -ENOSYS);
    assert_string_equal(err.msg, "Nope: UNIMPLEMENTED: unknown method /test.Svc/Nope");
    egpu_buf_free(&reply);
    fixture_stop();
}

/* Server streaming: several messages, then the client cancels and the
 * server is told; a stream ended by the handler; a refused stream. */
static void test_stream_cancel(void **state)
{
    const char *cancel[] = {"stream", NULL, SVC "Watch", "7468726565", "3", NULL};
    const char *finish[] = {"stream", NULL, SVC "Watch", "66696e697368", "0", NULL};
    const char *refuse[] = {"stream", NULL, SVC "Watch", "726566757365", "0", NULL};
    struct peer p;

    (void)state;
    need_python();
    fixture_start("stream");
    cancel[1] = finish[1] = refuse[1] = fx.sock;
    peer_start(&p, cancel);
    peer_expect_hex(&p, "MSG", "m1");
    peer_expect_hex(&p, "MSG", "m2");
    peer_expect_hex(&p, "MSG", "m3");
    peer_expect(&p, "CANCEL");
    assert_int_equal(wait_closed(1), -ECONNRESET);
    assert_int_equal(peer_wait(&p), 0);

    peer_start(&p, finish);
    peer_expect_hex(&p, "MSG", "a");
    peer_expect_hex(&p, "MSG", "b");
    peer_expect(&p, "END OK");
    assert_int_equal(wait_closed(2), 0);
    assert_int_equal(peer_wait(&p), 0);

    peer_start(&p, refuse);
    peer_expect(&p, "END FAILED_PRECONDITION not ready");
    assert_int_equal(peer_wait(&p), 0);
    pthread_mutex_lock(&fx.mu);
    assert_int_equal(fx.opened, 2); /* the refused stream was never the test's */
    assert_int_equal(fx.closed, 2);
    pthread_mutex_unlock(&fx.mu);
    fixture_stop();
}

static void *pusher_main(void *arg)
{
    struct egpu_grpc_stream *s = arg;
    intptr_t rc = send_str(s, "p1");

    if (rc == 0)
        rc = send_str(s, "p2");
    if (rc == 0)
        rc = send_str(s, "p3");
    return (void *)rc;
}

/* Messages pushed from a thread of the application reach an open stream;
 * after the peer cancels, sends fail with -EPIPE until release. */
static void test_stream_push_from_thread(void **state)
{
    const char *args[] = {"stream", NULL, SVC "Watch", "6f6e65", "4", NULL};
    struct egpu_grpc_stream *s;
    struct peer p;
    pthread_t t;
    void *res;

    (void)state;
    need_python();
    fixture_start("push");
    fx.keep = true;
    args[1] = fx.sock;
    peer_start(&p, args);
    peer_expect_hex(&p, "MSG", "m0");
    pthread_mutex_lock(&fx.mu);
    s = fx.stream;
    pthread_mutex_unlock(&fx.mu);
    assert_non_null(s);
    assert_true(egpu_grpc_stream_is_open(s));
    assert_int_equal(pthread_create(&t, NULL, pusher_main, s), 0);
    assert_int_equal(pthread_join(t, &res), 0);
    assert_int_equal((intptr_t)res, 0);
    peer_expect_hex(&p, "MSG", "p1");
    peer_expect_hex(&p, "MSG", "p2");
    peer_expect_hex(&p, "MSG", "p3");
    peer_expect(&p, "CANCEL");
    assert_int_equal(wait_closed(1), -ECONNRESET);
    assert_int_equal(peer_wait(&p), 0);
    assert_false(egpu_grpc_stream_is_open(s));
    assert_int_equal(send_str(s, "late"), -EPIPE);
    assert_int_equal(egpu_grpc_stream_finish(s, GRPC_STATUS_OK, "late"), -EPIPE);
    egpu_grpc_stream_release(s);
    fixture_stop();
}

/* Stopping the server ends an open stream with UNAVAILABLE, tells the
 * handler, removes the socket; the server starts again afterwards. A
 * stream the application still holds outlives the server. */
static void test_stop_with_open_stream(void **state)
{
    const char *args[] = {"stream", NULL, SVC "Watch", "7468726565", "0", NULL};
    const char *echo[] = {"unary", NULL, SVC "Echo", "6869", NULL};
    struct egpu_error err = {0};
    struct egpu_grpc_stream *s;
    struct peer p;
    long t0;

    (void)state;
    need_python();
    fixture_start("stop");
    fx.keep = true;
    args[1] = echo[1] = fx.sock;
    peer_start(&p, args);
    peer_expect_hex(&p, "MSG", "m1");
    peer_expect_hex(&p, "MSG", "m2");
    peer_expect_hex(&p, "MSG", "m3");
    t0 = now_ms();
    egpu_grpc_server_stop(fx.srv);
    assert_true(now_ms() - t0 < EGPU_GRPC_STOP_GRACE_MS + 1000);
    peer_expect(&p, "END UNAVAILABLE server stopping");
    assert_int_equal(peer_wait(&p), 0);
    assert_int_equal(wait_closed(1), -ESHUTDOWN);
    assert_int_equal(access(fx.sock, F_OK), -1);
    pthread_mutex_lock(&fx.mu);
    s = fx.stream;
    pthread_mutex_unlock(&fx.mu);
    assert_int_equal(send_str(s, "after stop"), -EPIPE);

    if (egpu_grpc_server_start(fx.srv, &err) != 0)
        fail_msg("restart: %s", err.msg);
    assert_int_equal(send_str(s, "after restart"), -EPIPE);
    peer_start(&p, echo);
    peer_expect_hex(&p, "OK", "echo:hi");
    assert_int_equal(peer_wait(&p), 0);
    egpu_grpc_server_free(fx.srv);
    fx.srv = NULL;
    egpu_grpc_stream_release(s);
    assert_int_equal(access(fx.sock, F_OK), -1);
    assert_int_equal(egpu_alloc_live(), fx.live);
}

/* Write a unix socket address for path (which must fit). */
static void sun_path_set(struct sockaddr_un *sa, const char *path)
{
    size_t n = strlen(path);

    assert_true(n < sizeof(sa->sun_path));
    memcpy(sa->sun_path, path, n + 1);
}

/* Write bytes to the server's socket and read until it hangs up. */
static void raw_exchange(const char *path, const void *bytes, size_t len)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    struct timeval tv = {.tv_sec = WAIT_MS / 1000};
    char buf[4096];
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

    assert_true(fd >= 0);
    sun_path_set(&sa, path);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
    (void)send(fd, bytes, len, MSG_NOSIGNAL); /* the server may hang up first */
    shutdown(fd, SHUT_WR);
    while (recv(fd, buf, sizeof(buf), 0) > 0)
        ;
    close(fd);
}

/* Garbage on the socket, a broken HTTP/2 frame, a request over the size
 * limit: the server answers or hangs up, and goes on serving. */
static void test_malformed_input(void **state)
{
    static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    /* A HEADERS frame of 16 bytes on stream 1 whose HPACK block is junk. */
    static const unsigned char headers[] = {0,    0,    16,   1,    5,    0,    0,    0,    1,
                                            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    const char *args[] = {"unary", NULL, SVC "Echo", "big:5000000", SVC "Echo", "6f6b", NULL};
    char frame[sizeof(preface) - 1 + sizeof(headers)];
    struct peer p;

    (void)state;
    need_python();
    fixture_start("malformed");
    raw_exchange(fx.sock, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 27);
    raw_exchange(fx.sock, "\x00\x01\x02\x03\xff\xfe garbage", 15);
    memcpy(frame, preface, sizeof(preface) - 1);
    memcpy(frame + sizeof(preface) - 1, headers, sizeof(headers));
    raw_exchange(fx.sock, frame, sizeof(frame));
    args[1] = fx.sock;
    peer_start(&p, args);
    {
        char line[LINE_MAX_];

        peer_line(&p, line, sizeof(line));
        assert_true(strncmp(line, "ERR RESOURCE_EXHAUSTED ", 23) == 0);
    }
    peer_expect_hex(&p, "OK", "echo:ok");
    assert_int_equal(peer_wait(&p), 0);
    fixture_stop();
}

/* Argument checks, the route table, and what start refuses. */
static void test_server_config(void **state)
{
    struct egpu_grpc_server *srv;
    struct egpu_error err = {0};
    char path[256], longp[200];
    long live = egpu_alloc_live();
    int fd;

    (void)state;
    assert_int_equal(egpu_grpc_server_new("", 1, &srv, &err), -EINVAL);
    memset(longp, 'a', sizeof(longp) - 1);
    longp[sizeof(longp) - 1] = '\0';
    assert_int_equal(egpu_grpc_server_new(longp, 1, &srv, &err), -ENAMETOOLONG);
    assert_int_equal(egpu_grpc_server_new("/tmp/x.sock", 1000, &srv, &err), -EINVAL);

    snprintf(path, sizeof(path), "%s/cfg.sock", tmpdir);
    assert_int_equal(egpu_grpc_server_new(path, 0, &srv, &err), 0);
    assert_int_equal(egpu_grpc_server_unary(srv, "Echo", on_echo, NULL), -EINVAL);
    assert_int_equal(egpu_grpc_server_unary(srv, "/Echo", on_echo, NULL), -EINVAL);
    assert_int_equal(egpu_grpc_server_unary(srv, "/a.B/", on_echo, NULL), -EINVAL);
    assert_int_equal(egpu_grpc_server_unary(srv, "/a.B/C/D", on_echo, NULL), -EINVAL);
    assert_int_equal(egpu_grpc_server_unary(srv, SVC "Echo", NULL, NULL), -EINVAL);
    assert_int_equal(egpu_grpc_server_stream(srv, SVC "W", NULL, NULL, NULL), -EINVAL);
    assert_int_equal(egpu_grpc_server_unary(srv, SVC "Echo", on_echo, NULL), 0);
    assert_int_equal(egpu_grpc_server_unary(srv, SVC "Echo", on_echo, NULL), -EEXIST);
    assert_int_equal(egpu_grpc_server_stream(srv, SVC "Echo", on_watch, NULL, NULL), -EEXIST);

    /* A regular file in the way is left alone. */
    fd = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(egpu_grpc_server_start(srv, &err), -EEXIST);
    assert_int_equal(unlink(path), 0);

    /* A stale socket (a crashed run's) is replaced. */
    {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        struct egpu_buf reply;

        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sun_path_set(&sa, path);
        assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        close(fd);
        if (egpu_grpc_server_start(srv, &err) != 0)
            fail_msg("start over a stale socket: %s", err.msg);
        assert_int_equal(egpu_grpc_server_start(srv, &err), -EBUSY);
        assert_int_equal(egpu_grpc_server_unary(srv, SVC "Late", on_echo, NULL), -EBUSY);
        egpu_buf_init(&reply, 64);
        assert_int_equal(egpu_grpc_call(path, SVC "Echo", "z", 1, 5000, &reply, &err), 0);
        assert_string_equal(egpu_buf_str(&reply), "echo:z");
        egpu_buf_free(&reply);
        egpu_grpc_server_stop(srv);
        egpu_grpc_server_stop(srv); /* a no-op */
        assert_int_equal(access(path, F_OK), -1);
    }
    egpu_grpc_server_free(srv);

    snprintf(path, sizeof(path), "%s/missing/dir.sock", tmpdir);
    assert_int_equal(egpu_grpc_server_new(path, 1, &srv, &err), 0);
    assert_int_equal(egpu_grpc_server_start(srv, &err), -ENOENT);
    egpu_grpc_server_free(srv);
    egpu_grpc_server_free(NULL);
    egpu_grpc_stream_release(NULL);
    assert_int_equal(egpu_alloc_live(), live);
}

/* ------------------------------------------------------------------------ */
/* Client tests                                                             */

/* The C client against a Python grpcio server: a reply, an error status
 * with its message, UNIMPLEMENTED, the deadline, a reply too large. */
static void test_client_python_server(void **state)
{
    char sock[128];
    const char *args[] = {"server", sock, NULL};
    struct egpu_error err = {0};
    struct egpu_buf reply;
    struct peer p;
    long t0;
    int rc;

    (void)state;
    need_python();
    snprintf(sock, sizeof(sock), "%s/py.sock", tmpdir);
    peer_start(&p, args);
    peer_expect(&p, "READY");
    egpu_buf_init(&reply, 64);

    rc = egpu_grpc_call(sock, PEER "Echo", "hi", 2, 5000, &reply, &err);
    if (rc != 0)
        fail_msg("Echo: %s", err.msg);
    assert_string_equal(egpu_buf_str(&reply), "py:hi");

    rc = egpu_grpc_call(sock, PEER "Fail", "x", 1, 5000, &reply, &err);
    assert_int_equal(rc, -EINVAL);
    assert_string_equal(err.msg, "Fail: INVALID_ARGUMENT: python says no");
    assert_string_equal(egpu_buf_str(&reply), "py:hi"); /* unchanged on failure */

    rc = egpu_grpc_call(sock, PEER "Nope", "x", 1, 5000, &reply, &err);
    assert_int_equal(rc, -ENOSYS);
    assert_true(strncmp(err.msg, "Nope: UNIMPLEMENTED: ", 21) == 0);

    t0 = now_ms();
    rc = egpu_grpc_call(sock, PEER "Slow", "x", 1, 300, &reply, &err);
    assert_int_equal(rc, -ETIMEDOUT);
    assert_true(strncmp(err.msg, "Slow: DEADLINE_EXCEEDED: ", 25) == 0);
    assert_true(now_ms() - t0 < 3000);

    /* 100 bytes do not fit the 59 left in reply. */
    {
        char uri[160];

        snprintf(uri, sizeof(uri), "unix://%s", sock);
        rc = egpu_grpc_call(uri, PEER "Big", "100", 3, 5000, &reply, &err);
    }
    assert_int_equal(rc, -EMSGSIZE);
    assert_string_equal(egpu_buf_str(&reply), "py:hi");
    egpu_buf_free(&reply);
    peer_kill(&p);
    unlink(sock);
}

/* Nobody listens: no socket file, or a socket no one accepts on. */
static void test_client_no_listener(void **state)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    struct egpu_error err = {0};
    struct egpu_buf reply;
    char path[128];
    int fd, rc;

    (void)state;
    egpu_buf_init(&reply, 64);
    snprintf(path, sizeof(path), "%s/nobody.sock", tmpdir);
    rc = egpu_grpc_call(path, "/v1beta1.Registration/Register", "r", 1, 5000, &reply, &err);
    assert_int_equal(rc, -EAGAIN);
    assert_int_equal(err.code, -EAGAIN);
    assert_true(strncmp(err.msg, "Register: UNAVAILABLE: ", 23) == 0);

    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sun_path_set(&sa, path);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    rc = egpu_grpc_call(path, "/v1beta1.Registration/Register", "r", 1, 5000, &reply, &err);
    assert_int_equal(rc, -EAGAIN);
    assert_true(strncmp(err.msg, "Register: UNAVAILABLE: ", 23) == 0);
    close(fd);
    unlink(path);

    assert_int_equal(egpu_grpc_call("", "/a.B/C", NULL, 0, 0, &reply, &err), -EINVAL);
    assert_int_equal(egpu_grpc_call(path, "a.B/C", NULL, 0, 0, &reply, &err), -EINVAL);
    assert_int_equal(egpu_grpc_call(path, "/a.B/C", NULL, 1, 0, &reply, &err), -EINVAL);
    assert_int_equal(egpu_grpc_call(path, "/a.B/C", NULL, 0, -1, &reply, &err), -EINVAL);
    assert_int_equal(reply.len, 0);
    egpu_buf_free(&reply);
}

/* The status-code tables. */
static void test_status_codes(void **state)
{
    (void)state;
    assert_string_equal(egpu_grpc_status_name(GRPC_STATUS_UNAVAILABLE), "UNAVAILABLE");
    assert_string_equal(egpu_grpc_status_name(99), "UNKNOWN_STATUS");
    for (int c = 0; c <= GRPC_STATUS_UNAUTHENTICATED; c++)
        assert_int_equal(egpu_grpc_errno_status(egpu_grpc_status_errno(c)), c);
    assert_int_equal(egpu_grpc_status_errno(GRPC_STATUS_DEADLINE_EXCEEDED), -ETIMEDOUT);
    assert_int_equal(egpu_grpc_errno_status(-ENOMEM), GRPC_STATUS_RESOURCE_EXHAUSTED);
    assert_int_equal(egpu_grpc_errno_status(EGPU_ESYNTAX), GRPC_STATUS_INVALID_ARGUMENT);
    assert_int_equal(egpu_grpc_errno_status(-EXDEV), GRPC_STATUS_UNKNOWN);
}

/* ------------------------------------------------------------------------ */

static int group_setup(void **state)
{
    FILE *f;

    (void)state;
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/egpu-grpc-XXXXXX");
    if (mkdtemp(tmpdir) == NULL)
        return -1;
    snprintf(script, sizeof(script), "%s/peer.py", tmpdir);
    f = fopen(script, "w");
    if (f == NULL)
        return -1;
    fputs(PEER_PY, f);
    fclose(f);
    have_python = system(PYTHON " -c 'import grpc' 2>/dev/null") == 0;
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    unlink(script);
    rmdir(tmpdir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_codes),
        cmocka_unit_test(test_server_config),
        cmocka_unit_test(test_client_no_listener),
        cmocka_unit_test(test_unary_echo),
        cmocka_unit_test(test_unary_error_status),
        cmocka_unit_test(test_unknown_method),
        cmocka_unit_test(test_stream_cancel),
        cmocka_unit_test(test_stream_push_from_thread),
        cmocka_unit_test(test_stop_with_open_stream),
        cmocka_unit_test(test_malformed_input),
        cmocka_unit_test(test_client_python_server),
    };

    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
