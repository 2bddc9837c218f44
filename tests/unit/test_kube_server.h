/* tests/unit/test_kube_server.h - run the test API server for the kube
 * client tests.
 *
 * Starts `/usr/bin/python3 tests/apiserver/server.py --port 0 --token ...`
 * with posix_spawn, reads its first stdout line ("listening on
 * http://127.0.0.1:PORT"), and makes a client for it. The control API
 * (/_control/...) is reached through the same client. One server per test
 * program (group setup); tks_reset before each test empties it.
 */
#ifndef EGPU_TEST_KUBE_SERVER_H
#define EGPU_TEST_KUBE_SERVER_H

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"
#include "egpu/kube.h"

#define TKS_TOKEN  "test-token-1"
#define TKS_PYTHON "/usr/bin/python3"
#define TKS_SCRIPT EGPU_SOURCE_DIR "/tests/apiserver/server.py"

extern char **environ;

struct tks {
    pid_t pid;
    FILE *out; /* the server's stdout, kept open so it never gets SIGPIPE */
    char url[128];
    struct egpu_kube *kc;
};

/* Start the server with extra arguments (NULL-terminated, may be NULL). */
static inline int tks_start(struct tks *s, const char *const *extra)
{
    const char *argv[24] = {TKS_PYTHON, TKS_SCRIPT, "--port", "0", "--token", TKS_TOKEN};
    posix_spawn_file_actions_t fa;
    struct egpu_kube_config *cfg = NULL;
    struct egpu_error err = {0};
    char line[256];
    int p[2], argc = 6, rc;

    memset(s, 0, sizeof(*s));
    for (; extra != NULL && *extra != NULL && argc < 22; extra++)
        argv[argc++] = *extra;
    argv[argc] = NULL;
    if (access(TKS_SCRIPT, R_OK) != 0) {
        fprintf(stderr, "test API server missing: %s\n", TKS_SCRIPT);
        return -1;
    }
    if (pipe(p) != 0)
        return -1;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, p[1], 1);
    posix_spawn_file_actions_addclose(&fa, p[0]);
    posix_spawn_file_actions_addclose(&fa, p[1]);
    rc = posix_spawn(&s->pid, TKS_PYTHON, &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(p[1]);
    if (rc != 0) {
        close(p[0]);
        return -1;
    }
    s->out = fdopen(p[0], "r");
    if (s->out == NULL || fgets(line, sizeof(line), s->out) == NULL ||
        sscanf(line, "listening on %127s", s->url) != 1) {
        fprintf(stderr, "test API server did not start\n");
        kill(s->pid, SIGKILL);
        waitpid(s->pid, NULL, 0);
        return -1;
    }
    if (egpu_kube_config_new(s->url, TKS_TOKEN, &cfg, &err) != 0 ||
        egpu_kube_new(cfg, &s->kc, &err) != 0) {
        fprintf(stderr, "client: %s\n", err.msg);
        egpu_kube_config_free(cfg);
        return -1;
    }
    egpu_kube_config_free(cfg);
    return 0;
}

static inline void tks_stop(struct tks *s)
{
    egpu_kube_free(s->kc);
    s->kc = NULL;
    if (s->pid > 0) {
        kill(s->pid, SIGTERM);
        waitpid(s->pid, NULL, 0);
        s->pid = 0;
    }
    if (s->out != NULL)
        fclose(s->out);
    s->out = NULL;
}

/* A control request (method on /_control/<what>, JSON body or NULL); asserts
 * success and returns the reply (caller json_decref()s) . */
static inline json_t *tks_control(struct tks *s, const char *method, const char *what,
                                  const char *body)
{
    char path[256];
    struct egpu_error err = {0};
    json_t *out = NULL;

    snprintf(path, sizeof(path), "/_control/%s", what);
    if (egpu_kube_request(s->kc, method, path, NULL, body, body ? strlen(body) : 0, 1 << 24, &out,
                          NULL, &err) != 0)
        fail_msg("control %s %s: %s", method, what, err.msg);
    return out;
}

static inline void tks_post(struct tks *s, const char *what, const char *body)
{
    json_decref(tks_control(s, "POST", what, body ? body : "{}"));
}

static inline void tks_reset(struct tks *s)
{
    tks_post(s, "reset", NULL);
}

/* The server of the test program, started by its group setup. */
static struct tks srv;

static inline int tks_group_teardown(void **state)
{
    (void)state;
    tks_stop(&srv);
    return 0;
}

/* Per-test setup: an empty server. */
static inline int tks_reset_test(void **state)
{
    (void)state;
    tks_reset(&srv);
    return 0;
}

/* A small pod in ns (labels app=<app>), as a new object. */
static inline json_t *tks_pod(const char *ns, const char *name, const char *app)
{
    return json_pack("{s:s, s:s, s:{s:s, s:s, s:{s:s}}, s:{s:[{s:s, s:s}]}}", "apiVersion", "v1",
                     "kind", "Pod", "metadata", "name", name, "namespace", ns, "labels", "app", app,
                     "spec", "containers", "name", "main", "image", "busybox");
}

/* Create pod ns/name; asserts success and returns its resourceVersion. */
static inline long tks_create_pod(struct tks *s, const char *ns, const char *name)
{
    struct egpu_error err = {0};
    json_t *pod = tks_pod(ns, name, "trainer"), *out = NULL;
    long rv;

    if (egpu_kube_create(s->kc, &egpu_kube_pods, ns, pod, &out, NULL, &err) != 0)
        fail_msg("create %s/%s: %s", ns, name, err.msg);
    rv = strtol(
        json_string_value(json_object_get(json_object_get(out, "metadata"), "resourceVersion")),
        NULL, 10);
    json_decref(pod);
    json_decref(out);
    return rv;
}

/* Merge-patch label key=value onto pod ns/name; asserts success. */
static inline void tks_label_pod(struct tks *s, const char *ns, const char *name, const char *key,
                                 const char *value)
{
    struct egpu_error err = {0};
    json_t *patch = json_pack("{s:{s:{s:s}}}", "metadata", "labels", key, value);

    if (egpu_kube_patch(s->kc, &egpu_kube_pods, ns, name, EGPU_KUBE_MERGE_PATCH, patch, NULL, NULL,
                        &err) != 0)
        fail_msg("patch %s/%s: %s", ns, name, err.msg);
    json_decref(patch);
}

static inline void tks_delete_pod(struct tks *s, const char *ns, const char *name)
{
    struct egpu_error err = {0};

    if (egpu_kube_delete(s->kc, &egpu_kube_pods, ns, name, NULL, &err) != 0)
        fail_msg("delete %s/%s: %s", ns, name, err.msg);
}

static inline void tks_sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

static inline long tks_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

#endif /* EGPU_TEST_KUBE_SERVER_H */
