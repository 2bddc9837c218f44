/* bench/webhook/floor_server.c - the floor under egpu-webhook's figures.
 *
 * The project's HTTPS server (src/net: libmicrohttpd over GnuTLS, the pool of
 * poll threads egpu-webhook serves on, with its 32 KiB per connection)
 * answering POST /mutate and /validate with the least a webhook can answer:
 * the request parsed with jansson and
 * {"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview",
 * "response":{"uid":<the request's>,"allowed":true}}. webhook_load against it
 * measures what TLS, HTTP and one JSON parse cost at C connections; the gap to
 * egpu-webhook's figures is the webhook's own work (its rules, its patch).
 *
 *   floor_server --tls-cert FILE --tls-key FILE [--port N] [--threads N]
 *                [--max-connections N] [--max-per-client N]
 *
 * Prints "listening on https://127.0.0.1:PORT" once serving; runs until
 * SIGINT or SIGTERM. A bench tool, not a component: no health port, no
 * metrics. Bad JSON gets 400.
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "egpu/log.h"
#include "egpu/net.h"

static int on_review(void *data, const struct egpu_http_request *req,
                     struct egpu_http_response *resp)
{
    json_t *in = json_loadb(req->body, req->body_len, 0, NULL);
    const char *uid = json_string_value(json_object_get(json_object_get(in, "request"), "uid"));
    json_t *out;
    char *text;
    int rc;

    (void)data;
    if (uid == NULL) {
        json_decref(in);
        resp->status = 400;
        return egpu_buf_append(&resp->body, "not an AdmissionReview with request.uid\n", 40);
    }
    out = json_pack("{s:s,s:s,s:{s:s,s:b}}", "apiVersion", "admission.k8s.io/v1", "kind",
                    "AdmissionReview", "response", "uid", uid, "allowed", 1);
    json_decref(in);
    text = out != NULL ? json_dumps(out, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(out);
    if (text == NULL)
        return -ENOMEM;
    rc = egpu_buf_append(&resp->body, text, strlen(text));
    free(text);
    return rc != 0 ? rc : egpu_http_response_set_type(resp, "application/json");
}

static unsigned number(const char *flag, const char *v, unsigned long lo, unsigned long hi)
{
    char *end;
    unsigned long n;

    errno = 0;
    n = strtoul(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0' || n < lo || n > hi) {
        fprintf(stderr, "floor_server: %s \"%s\": expected %lu..%lu\n", flag, v, lo, hi);
        exit(2);
    }
    return (unsigned)n;
}

int main(int argc, char **argv)
{
    static const struct option lo[] = {{"tls-cert", required_argument, NULL, 'c'},
                                       {"tls-key", required_argument, NULL, 'k'},
                                       {"port", required_argument, NULL, 'p'},
                                       {"threads", required_argument, NULL, 't'},
                                       {"max-connections", required_argument, NULL, 'm'},
                                       {"max-per-client", required_argument, NULL, 'M'},
                                       {NULL, 0, NULL, 0}};
    /* 32 KiB per connection, as egpu-webhook serves (src/webhook/main.c): the
     * default 256 KiB is cleared by libmicrohttpd after every request, which
     * cost this server 6.6% of its CPU at 2,000 requests/s (perf, cpu-clock). */
    struct egpu_http_config cfg = {.bind_addr = "127.0.0.1",
                                   .max_connections = 4096,
                                   .max_per_client = 4096,
                                   .conn_memory_bytes = 32 * 1024};
    struct egpu_http_server *srv = NULL;
    struct egpu_error err = {0};
    sigset_t set;
    int opt, sig;

    while ((opt = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (opt) {
        case 'c':
            cfg.tls_cert_file = optarg;
            break;
        case 'k':
            cfg.tls_key_file = optarg;
            break;
        case 'p':
            cfg.port = (uint16_t)number("--port", optarg, 0, 65535);
            break;
        case 't':
            cfg.threads = number("--threads", optarg, 1, 64);
            break;
        case 'm':
            cfg.max_connections = number("--max-connections", optarg, 1, 100000);
            break;
        case 'M':
            cfg.max_per_client = number("--max-per-client", optarg, 1, 100000);
            break;
        default:
            fprintf(stderr, "usage: floor_server --tls-cert FILE --tls-key FILE [--port N] "
                            "[--threads N] [--max-connections N] [--max-per-client N]\n");
            return 2;
        }
    }
    if (cfg.tls_cert_file == NULL || cfg.tls_key_file == NULL || optind < argc) {
        fprintf(stderr, "floor_server: --tls-cert and --tls-key are required\n");
        return 2;
    }
    egpu_log_level = EGPU_LOG_WARN;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    /* Blocked before the pool threads start, so sigwait below takes them. */
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    if (egpu_http_server_new(&cfg, &srv, &err) != 0 ||
        egpu_http_server_route(srv, "POST", "/mutate", on_review, NULL) != 0 ||
        egpu_http_server_route(srv, "POST", "/validate", on_review, NULL) != 0 ||
        egpu_http_server_start(srv, &err) != 0) {
        fprintf(stderr, "floor_server: %s\n", err.msg[0] ? err.msg : "cannot route");
        egpu_http_server_free(srv);
        return 1;
    }
    printf("listening on https://127.0.0.1:%u\n", egpu_http_server_port(srv));
    fflush(stdout);
    (void)sigwait(&set, &sig);
    egpu_http_server_free(srv);
    return 0;
}
